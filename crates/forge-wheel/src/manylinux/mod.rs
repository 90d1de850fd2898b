//! Platform tags a wheel's binaries earn (PEP 600 manylinux): every ELF member
//! read (`elf`: DT_NEEDED, the symbol versions required per library), judged
//! by auditwheel's rules against auditwheel's policy table (`table`):
//! - symbol versions: for each family a policy lists (GLIBC, GLIBCXX, CXXABI,
//!   GCC, ZLIB, LIBATOMIC), every version the wheel requires of it is in the
//!   policy's list (`GLIBC_PRIVATE` is in none);
//! - libraries: every NEEDED library that is not a member of the wheel and not
//!   external ([`EXTERNALS`], what auditwheel's `--exclude` names) is on the
//!   policy's list; a library on no list is forbidden (the build fails);
//! - forbidden symbols: no undefined symbol is on the policy's blacklist of a
//!   library the member needs.
//!
//! The wheel's policy is the oldest one all three rules allow; its tag is
//! `manylinux_2_X_<arch>` with PEP 600's legacy alias where one exists.
//! auditwheel's instruction-set check (x86-64-v2/v3 code) is not made. Owns
//! the policy rules; must not rename or rewrite wheels (that is `wheel::stamp`).
pub mod elf;
pub mod judge;
pub mod table;
pub mod words;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;

pub use elf::ElfNeeds;
use table::{Row, POLICIES};

/// A library a DeepEP wheel takes from its environment, never from a policy:
/// every soname starting with `prefix`, provided by `from`.
#[derive(Debug, Clone, Copy)]
pub struct External {
    pub prefix: &'static str,
    pub from: &'static str,
}

/// The libraries outside every policy that a DeepEP wheel legitimately needs
/// (auditwheel `--exclude`; torch's own wheels need them the same way), each
/// declared (`Requires-Dist`) or a system requirement (docs/platform-tags.md).
pub const EXTERNALS: &[External] = &[
    External { prefix: "libtorch", from: "torch (Requires-Dist)" },
    External { prefix: "libc10", from: "torch (Requires-Dist)" },
    External { prefix: "libshm.so", from: "torch (Requires-Dist)" },
    External { prefix: "libcudart.so.", from: "nvidia-cuda-runtime, a dependency of torch" },
    External { prefix: "libnccl.so.", from: "nvidia-nccl, a dependency of torch" },
    External { prefix: "libnvshmem_host.so.", from: "nvidia-nvshmem, a dependency of torch" },
    External { prefix: "libcuda.so.", from: "the NVIDIA driver (system requirement)" },
    External { prefix: "libnvidia-ml.so.", from: "the NVIDIA driver (system requirement)" },
    External { prefix: "libibverbs.so.", from: "rdma-core (system requirement)" },
    External { prefix: "libmlx5.so.", from: "rdma-core (system requirement)" },
    External { prefix: "libpython3", from: "the Python interpreter" },
];

/// The external entry a library falls under.
pub fn external(lib: &str) -> Option<&'static External> {
    EXTERNALS.iter().find(|e| lib.starts_with(e.prefix))
}

pub use crate::provenance::{Platform, Raise};

/// The audit of a wheel's binaries.
#[derive(Debug, Clone)]
pub struct Audit {
    pub arch: String,
    pub platform: Platform,
    /// (member, library): NEEDED libraries on no policy's list and not external.
    pub forbidden: Vec<(String, String)>,
}

/// Every ELF member of an open wheel (members in `replaced` read from there:
/// the patched bytes the stamped wheel will hold).
pub fn read_wheel(w: &mut crate::wheel::Wheel, replaced: &BTreeMap<String, Vec<u8>>) -> Result<Vec<ElfNeeds>> {
    let mut out = Vec::new();
    for name in w.names() {
        if name.ends_with('/') {
            continue;
        }
        let data = match replaced.get(&name) {
            Some(d) if d.starts_with(b"\x7fELF") => d.clone(),
            Some(_) => continue,
            None if w.starts_with(&name, b"\x7fELF")? => {
                w.member(&name, crate::wheel::limits::PARSED)?.unwrap_or_default()
            }
            None => continue,
        };
        let needs = elf::read(&name, &data)
            .map_err(|why| forge_os::error::Failure::usage(format!("{}: member {name}: {why}", w.path().display())))?;
        out.push(needs);
    }
    Ok(out)
}

/// The policies of `arch`, oldest first.
pub fn policies(arch: &str) -> impl Iterator<Item = &'static Row> + '_ {
    POLICIES.iter().filter(move |r| r.versions.iter().any(|(a, _)| *a == arch))
}

/// The policy named `manylinux_2_X` (or `2_X`) that exists for `arch`.
pub fn policy(name: &str, arch: &str) -> Option<&'static Row> {
    let name = if name.starts_with("manylinux_") { name.to_string() } else { format!("manylinux_{name}") };
    policies(arch).find(|r| r.name == name)
}

/// glibc (major, minor) of a policy name (`manylinux_2_34` -> (2, 34)).
pub fn glibc(policy: &str) -> Option<(u32, u32)> {
    let (a, b) = policy.strip_prefix("manylinux_")?.split_once('_')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The platform tag set of a policy for `arch` (PEP 600: the legacy alias after the new name).
pub fn tag(row: Option<&Row>, arch: &str) -> String {
    match row {
        None => format!("linux_{arch}"),
        Some(r) => match r.alias {
            Some(a) => format!("{}_{arch}.{a}_{arch}", r.name),
            None => format!("{}_{arch}", r.name),
        },
    }
}

/// The oldest glibc a platform tag (set) lets an installer put the wheel on:
/// `manylinux_2_17_x86_64.manylinux2014_x86_64` -> (2, 17); None for `linux_*` (any).
pub fn claimed_glibc(platform_tag: &str) -> Option<(u32, u32)> {
    platform_tag.split('.').filter_map(tag_glibc).min()
}

/// Why `platform_tag` claims less than `earned` (an older glibc, or a policy
/// where the binaries earn none); None when the tag is honest or `linux_*` (claims nothing).
pub fn understated(platform_tag: &str, earned: &Platform) -> Option<String> {
    let claim = claimed_glibc(platform_tag)?;
    match glibc(&earned.policy) {
        Some(need) if need <= claim => None,
        _ => {
            let raised: Vec<String> = earned.raised_by.iter().take(3).map(Raise::to_string).collect();
            Some(format!(
                "its tag {platform_tag} claims glibc {}.{} but its binaries need {} ({})",
                claim.0,
                claim.1,
                earned.tag,
                raised.join("; ")
            ))
        }
    }
}

fn tag_glibc(t: &str) -> Option<(u32, u32)> {
    let legacy = [("manylinux1_", (2, 5)), ("manylinux2010_", (2, 12)), ("manylinux2014_", (2, 17))];
    if let Some((_, v)) = legacy.iter().find(|(p, _)| t.starts_with(p)) {
        return Some(*v);
    }
    let mut parts = t.strip_prefix("manylinux_")?.splitn(3, '_');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Audit the ELF members of a wheel: None when it has none (nothing to tag).
pub fn audit(elves: &[ElfNeeds], members: &[String]) -> Option<Audit> {
    let arch = elves.first()?.machine.clone();
    let internal: BTreeSet<&str> = members.iter().map(|m| m.rsplit('/').next().unwrap_or(m)).collect();
    let (externals, system, forbidden) = libraries(elves, &internal);
    let candidates: Vec<&Row> = policies(&arch).collect();
    let allowed = |r: &Row| {
        elves.iter().all(|e| e.machine == arch)
            && symbols_allowed(elves, r, &arch)
            && system.iter().all(|l| r.libraries.contains(&l.as_str()))
            && !blacklisted(elves, r)
    };
    let found = candidates.iter().position(|r| allowed(r));
    let row = found.map(|i| candidates[i]);
    // What raised it: the versions the next older policy does not allow.
    let older = match found {
        Some(i) if i > 0 => Some(candidates[i - 1]),
        None => candidates.last().copied(),
        _ => None,
    };
    let raised_by = older.map(|o| exceeding(elves, o, &arch)).unwrap_or_default();
    let platform = Platform {
        policy: row.map(|r| r.name.to_string()).unwrap_or_else(|| "linux".into()),
        tag: tag(row, &arch),
        externals,
        system,
        raised_by,
    };
    Some(Audit { arch, platform, forbidden })
}

/// Rule 2's inputs: (externals, libraries a policy must allow, forbidden (member, library)).
fn libraries(elves: &[ElfNeeds], internal: &BTreeSet<&str>) -> (Vec<String>, Vec<String>, Vec<(String, String)>) {
    let all: BTreeSet<&str> = POLICIES.iter().flat_map(|r| r.libraries.iter().copied()).collect();
    let (mut ext, mut sys, mut bad) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    for e in elves {
        for lib in &e.needed {
            if internal.contains(lib.as_str()) || lib.starts_with("ld-linux") || lib.starts_with("ld64.so.") {
                continue;
            }
            if external(lib).is_some() {
                ext.insert(lib.clone());
            } else if all.contains(lib.as_str()) {
                sys.insert(lib.clone());
            } else {
                bad.push((e.member.clone(), lib.clone()));
            }
        }
    }
    (ext.into_iter().collect(), sys.into_iter().collect(), bad)
}

/// The versions a policy allows of one family for `arch` (None: the policy does not list the family).
fn listed(r: &Row, arch: &str, family: &str) -> Option<Vec<&'static str>> {
    let (_, fams) = r.versions.iter().find(|(a, _)| *a == arch)?;
    fams.iter().find(|(f, _)| *f == family).map(|(_, v)| v.split(' ').filter(|s| !s.is_empty()).collect())
}

/// Whether `r` allows the version `v` (`GLIBC_2.34`): its family (before the first `_`) unlisted, or it listed.
fn version_allowed(r: &Row, arch: &str, v: &str) -> bool {
    let (family, rest) = v.split_once('_').unwrap_or((v, ""));
    match listed(r, arch, family) {
        None => true,
        Some(list) => list.contains(&rest),
    }
}

/// Rule 1: every required symbol version of a listed family is allowed.
fn symbols_allowed(elves: &[ElfNeeds], r: &Row, arch: &str) -> bool {
    elves.iter().all(|e| e.versions.keys().all(|(_, v)| version_allowed(r, arch, v)))
}

/// Rule 3: an undefined symbol on the policy's blacklist of a library the member needs.
fn blacklisted(elves: &[ElfNeeds], r: &Row) -> bool {
    elves.iter().any(|e| {
        r.blacklist.iter().any(|(lib, syms)| {
            e.needed.iter().any(|n| n == lib) && e.undefined.iter().any(|u| syms.contains(&u.as_str()))
        })
    })
}

/// The symbol versions `r` does not allow, member by member (what a floor names).
pub fn exceeding(elves: &[ElfNeeds], r: &Row, arch: &str) -> Vec<Raise> {
    let mut out = Vec::new();
    for e in elves {
        for ((lib, v), (syms, n)) in &e.versions {
            if !version_allowed(r, arch, v) {
                out.push(Raise {
                    member: e.member.clone(),
                    library: lib.clone(),
                    version: v.clone(),
                    symbols: syms.clone(),
                    count: *n,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(versions: &[(&str, &str)], needed: &[&str]) -> ElfNeeds {
        ElfNeeds {
            member: "deep_ep_cpp.so".into(),
            machine: "x86_64".into(),
            needed: needed.iter().map(|s| s.to_string()).collect(),
            versions: versions.iter().map(|(l, v)| ((l.to_string(), v.to_string()), (vec![], 0))).collect(),
            undefined: vec![],
        }
    }

    #[test]
    fn table_is_ordered_oldest_first() {
        let p: Vec<u32> = POLICIES.iter().map(|r| r.priority).collect();
        assert!(p.windows(2).all(|w| w[0] > w[1]), "{p:?}");
        assert_eq!(POLICIES[0].name, "manylinux_2_5");
        assert!(policies("aarch64").next().is_some_and(|r| r.name == "manylinux_2_17"));
    }

    #[test]
    fn glibc_symbol_versions_decide_the_policy() {
        let e = needs(&[("libc.so.6", "GLIBC_2.34"), ("libc.so.6", "GLIBC_2.2.5")], &["libc.so.6"]);
        let a = audit(&[e], &[]).unwrap();
        assert_eq!(a.platform.tag, "manylinux_2_34_x86_64");
        assert_eq!(a.platform.raised_by.len(), 1, "{:?}", a.platform.raised_by);
        assert_eq!(a.platform.raised_by[0].version, "GLIBC_2.34");
        let old = needs(&[("libc.so.6", "GLIBC_2.14")], &["libc.so.6", "libtorch.so", "libcuda.so.1"]);
        let a = audit(&[old], &[]).unwrap();
        assert_eq!(a.platform.tag, "manylinux_2_17_x86_64.manylinux2014_x86_64");
        assert_eq!(a.platform.externals, ["libcuda.so.1", "libtorch.so"]);
        let private = needs(&[("libc.so.6", "GLIBC_PRIVATE")], &["libc.so.6"]);
        assert_eq!(audit(&[private], &[]).unwrap().platform.tag, "linux_x86_64");
    }

    #[test]
    fn unknown_libraries_are_forbidden_and_members_are_internal() {
        let e = needs(&[], &["libfoo.so.1", "libbar.so", "libc.so.6"]);
        let a = audit(&[e], &["deep_ep/libbar.so".into()]).unwrap();
        assert_eq!(a.forbidden, [("deep_ep_cpp.so".to_string(), "libfoo.so.1".to_string())]);
        assert_eq!(a.platform.tag, "manylinux_2_5_x86_64.manylinux1_x86_64");
    }

    #[test]
    fn claimed_glibc_is_the_lowest_tag_of_the_set() {
        assert_eq!(claimed_glibc("manylinux_2_17_x86_64.manylinux2014_x86_64"), Some((2, 17)));
        assert_eq!(claimed_glibc("manylinux_2_34_x86_64"), Some((2, 34)));
        assert_eq!(claimed_glibc("manylinux1_x86_64"), Some((2, 5)));
        assert_eq!(claimed_glibc("linux_x86_64"), None);
        assert_eq!(glibc("manylinux_2_38"), Some((2, 38)));
        let e = needs(&[("libc.so.6", "GLIBC_2.34")], &["libc.so.6"]);
        let earned = audit(&[e], &[]).unwrap().platform;
        let why = understated("manylinux_2_17_x86_64.manylinux2014_x86_64", &earned).unwrap();
        assert!(why.contains("claims glibc 2.17 but its binaries need manylinux_2_34_x86_64"), "{why}");
        assert_eq!(understated("manylinux_2_34_x86_64", &earned), None);
        assert_eq!(understated("manylinux_2_35_x86_64", &earned), None);
        assert_eq!(understated("linux_x86_64", &earned), None);
    }
}
