//! The one judgment of a wheel's platform-tag set against its members, made on
//! every path that delivers or accepts a wheel (a fresh build, a cache hit, a
//! remote cache hit, `publish`, `publish --check`, `verify`, `probe`): every tag
//! of the set (split on `.`) is judged, not the first; the ELF machine of every
//! member against every tag's architecture; `linux_*` anywhere in the set is a
//! warning; a member that cannot be read fails the judgment (closed, never a
//! pass); a member that needs musl's libc in a manylinux wheel (or glibc's in a
//! musllinux one) fails; pins.toml's floor, when given, bounds the policy the
//! binaries earn. Reads facts; must not rename or rewrite wheels.
use std::collections::BTreeMap;

use anyhow::Result;

use super::{audit, exceeding, glibc, policies, Audit, ElfNeeds, Raise};

/// How much a problem weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Fail,
    Warn,
}

/// One thing wrong with a wheel's name against its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub level: Level,
    pub text: String,
}

/// What one judgment found.
#[derive(Debug, Clone)]
pub struct Judgment {
    /// The platform tag set judged (`manylinux_2_17_x86_64.manylinux2014_x86_64`).
    pub tag: String,
    /// The ELF members read (empty when none, or none could be read).
    pub elves: Vec<ElfNeeds>,
    /// The policy the members earn; None without a readable ELF member.
    pub audit: Option<Audit>,
    pub problems: Vec<Problem>,
}

impl Judgment {
    /// A problem that refuses the wheel.
    pub fn failed(&self) -> bool {
        self.problems.iter().any(|p| p.level == Level::Fail)
    }

    /// The texts of the problems of one level.
    pub fn texts(&self, level: Level) -> Vec<&str> {
        self.problems.iter().filter(|p| p.level == level).map(|p| p.text.as_str()).collect()
    }

    /// The failures in one line each, for an error message; None when it passed.
    pub fn refusal(&self) -> Option<String> {
        let fails = self.texts(Level::Fail);
        (!fails.is_empty()).then(|| fails.join("\n  "))
    }
}

/// One tag of a set: its family and the architecture it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagPart {
    pub tag: String,
    pub family: Family,
    /// `x86_64`, `aarch64`, ... (None: a tag that names no architecture, `any`).
    pub arch: Option<String>,
}

/// The family of one platform tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `manylinux_2_X_<arch>` or a legacy alias: glibc (major, minor).
    Manylinux(u32, u32),
    /// `musllinux_1_X_<arch>`.
    Musllinux,
    /// `linux_<arch>`: claims any Linux.
    Linux,
    /// `any`: pure Python.
    Any,
    /// Anything else (`macosx_...`, `win_amd64`, a misspelling).
    Other,
}

/// Every tag of a compressed tag set, in order.
pub fn parts(tag_set: &str) -> Vec<TagPart> {
    tag_set.split('.').map(part).collect()
}

fn part(t: &str) -> TagPart {
    let legacy = [("manylinux1_", (2, 5)), ("manylinux2010_", (2, 12)), ("manylinux2014_", (2, 17))];
    let (family, arch) = if t == "any" {
        (Family::Any, None)
    } else if let Some((p, v)) = legacy.iter().find(|(p, _)| t.starts_with(p)) {
        (Family::Manylinux(v.0, v.1), Some(&t[p.len()..]))
    } else if let Some(rest) = t.strip_prefix("manylinux_") {
        match versioned(rest) {
            Some((a, b, arch)) => (Family::Manylinux(a, b), Some(arch)),
            None => (Family::Other, None),
        }
    } else if let Some(rest) = t.strip_prefix("musllinux_") {
        match versioned(rest) {
            Some((_, _, arch)) => (Family::Musllinux, Some(arch)),
            None => (Family::Other, None),
        }
    } else if let Some(arch) = t.strip_prefix("linux_") {
        (Family::Linux, Some(arch))
    } else {
        (Family::Other, None)
    };
    let arch = arch.filter(|a| !a.is_empty()).map(str::to_string);
    TagPart {
        tag: t.to_string(),
        family: if arch.is_none() && family != Family::Any { Family::Other } else { family },
        arch,
    }
}

/// `2_34_x86_64` -> (2, 34, `x86_64`).
fn versioned(rest: &str) -> Option<(u32, u32, &str)> {
    let mut it = rest.splitn(3, '_');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?, it.next()?))
}

/// A member that could not be read: (member, why).
pub type Unreadable = (String, String);

/// Every ELF member of an open wheel, and those that could not be read (a
/// truncated or malformed ELF file): the judgment fails on the second list.
pub fn read_members(w: &mut crate::wheel::Wheel) -> Result<(Vec<ElfNeeds>, Vec<Unreadable>)> {
    let (mut elves, mut bad) = (Vec::new(), Vec::new());
    for name in w.names() {
        if name.ends_with('/') || !w.starts_with(&name, b"\x7fELF")? {
            continue;
        }
        let data = w.member(&name, crate::wheel::limits::PARSED)?.unwrap_or_default();
        match super::elf::read(&name, &data) {
            Ok(e) => elves.push(e),
            Err(why) => bad.push((name, format!("{why:#}"))),
        }
    }
    Ok((elves, bad))
}

/// Judge the wheel at `path` by its file name's platform tag set (see the module).
pub fn wheel(path: &std::path::Path, floor: Option<&str>) -> Result<Judgment> {
    let mut w = crate::wheel::open(path)?;
    let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tag = crate::wheel::WheelName::parse(&file).map(|n| n.platform).unwrap_or_default();
    let (elves, bad) = read_members(&mut w)?;
    Ok(judge(&tag, elves, &bad, &w.names(), floor))
}

/// The judgment of `tag_set` against the members' facts (see the module).
pub fn judge(
    tag_set: &str,
    elves: Vec<ElfNeeds>,
    unreadable: &[Unreadable],
    members: &[String],
    floor: Option<&str>,
) -> Judgment {
    let mut problems = Vec::new();
    let fail = |text: String| Problem { level: Level::Fail, text };
    for (m, why) in unreadable {
        problems
            .push(fail(format!("member {m} cannot be read ({why}): its needs are unknown, so no tag can be trusted")));
    }
    let tags = parts(tag_set);
    if elves.is_empty() {
        return Judgment { tag: tag_set.to_string(), elves, audit: None, problems };
    }
    let a = audit(&elves, members);
    problems.extend(machines(&tags, &elves).into_iter().map(fail));
    problems.extend(libcs(&tags, &elves).into_iter().map(fail));
    if let Some(a) = &a {
        problems.extend(claims(&tags, a));
        if !a.forbidden.is_empty() {
            let list: Vec<String> = a.forbidden.iter().map(|(m, l)| format!("{m} needs {l}")).collect();
            problems.push(Problem {
                level: Level::Warn,
                text: format!("libraries on no manylinux policy's list and not external: {}", list.join("; ")),
            });
        }
        if let Some(f) = floor {
            problems.extend(above_floor(a, &elves, f).map(fail));
        }
    }
    Judgment { tag: tag_set.to_string(), elves, audit: a, problems }
}

/// Every member's ELF machine against every tag's architecture.
fn machines(tags: &[TagPart], elves: &[ElfNeeds]) -> Vec<String> {
    let mut by_machine: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in elves {
        by_machine.entry(e.machine.as_str()).or_default().push(e.member.as_str());
    }
    let mut out = Vec::new();
    for t in tags {
        match (&t.family, &t.arch) {
            (Family::Any, _) => out.push(format!("tag `any` claims pure Python, but the wheel holds ELF members")),
            (Family::Other, _) => {
                out.push(format!("{} is not a Linux platform tag, but the wheel holds ELF members", t.tag))
            }
            (_, Some(arch)) => {
                for (machine, members) in &by_machine {
                    if machine != arch {
                        out.push(format!(
                            "{} names {arch} but the ELF machine of {} is {machine}: mislabelled wheel",
                            t.tag,
                            members.join(", ")
                        ));
                    }
                }
            }
            (_, None) => {}
        }
    }
    out
}

/// A manylinux tag over a member that needs musl's libc, or a musllinux tag over glibc's.
fn libcs(tags: &[TagPart], elves: &[ElfNeeds]) -> Vec<String> {
    let needs = |pred: &dyn Fn(&str) -> bool| -> Vec<&str> {
        elves.iter().filter(|e| e.needed.iter().any(|n| pred(n))).map(|e| e.member.as_str()).collect()
    };
    let musl = needs(&|n| n.starts_with("libc.musl-") || n.starts_with("ld-musl-"));
    let gnu = needs(&|n| n == "libc.so.6");
    let mut out = Vec::new();
    for t in tags {
        match t.family {
            Family::Manylinux(..) if !musl.is_empty() => out.push(format!(
                "{} promises glibc, but {} needs musl's libc: it loads on no manylinux machine",
                t.tag,
                musl.join(", ")
            )),
            Family::Musllinux if !gnu.is_empty() => {
                out.push(format!("{} promises musl, but {} needs glibc (libc.so.6)", t.tag, gnu.join(", ")))
            }
            _ => {}
        }
    }
    out
}

/// Every tag's claim against the policy the binaries earn: a manylinux tag claiming an
/// older glibc fails; `linux_*` (anywhere in the set) claims any Linux, a warning.
fn claims(tags: &[TagPart], a: &Audit) -> Vec<Problem> {
    let earned = &a.platform;
    let need = glibc(&earned.policy);
    let raised = raised(&earned.raised_by);
    let mut out = Vec::new();
    for t in tags {
        match t.family {
            Family::Linux => out.push(Problem {
                level: Level::Warn,
                text: format!(
                    "{} claims any Linux; the binaries need {}{raised}: installers put it where it cannot load",
                    t.tag, earned.tag
                ),
            }),
            Family::Manylinux(x, y) if need.is_some_and(|n| (x, y) >= n) => {}
            Family::Manylinux(x, y) => out.push(Problem {
                level: Level::Fail,
                text: format!(
                    "{} claims less than the binaries need: {}{raised} (it claims glibc {x}.{y})",
                    t.tag, earned.tag
                ),
            }),
            _ => {}
        }
    }
    out
}

/// ` (raised by GLIBC_2.34 from libc.so.6 in x.so ...)`, or nothing.
pub fn raised(r: &[Raise]) -> String {
    if r.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = r.iter().take(4).map(Raise::to_string).collect();
    let more = if r.len() > 4 { format!(" and {} more", r.len() - 4) } else { String::new() };
    format!(" (raised by {}{more})", shown.join("; "))
}

/// The policy the binaries earn against pins.toml's floor (`2_28`): newer is the
/// reason, naming the symbols that raised it (those the newest policy at or below
/// the floor does not allow).
pub fn above_floor(a: &Audit, elves: &[ElfNeeds], floor: &str) -> Option<String> {
    let want = glibc(&format!("manylinux_{}", floor.trim_start_matches("manylinux_")));
    let have = glibc(&a.platform.policy);
    if have.is_some() && have <= want {
        return None;
    }
    let row = policies(&a.arch).filter(|r| glibc(r.name) <= want).last();
    let raised: Vec<String> =
        row.map(|r| exceeding(elves, r, &a.arch)).unwrap_or_default().iter().map(|r| r.to_string()).collect();
    let why =
        if raised.is_empty() { "(the libraries it needs; see the build log)".to_string() } else { raised.join("\n  ") };
    Some(format!(
        "needs {} but pins.toml's floor is manylinux_{}: raised by\n  {why}",
        a.platform.policy,
        floor.trim_start_matches("manylinux_")
    ))
}

/// The hint for a wheel above the floor.
pub fn floor_hint(floor: &str) -> String {
    format!(
        "build in an image or sysroot whose glibc is {floor} or older (docs/platform-tags.md, \"Building for an \
         older glibc\"), or raise `[toolchain] manylinux` in pins.toml if your users' machines are newer"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(machine: &str, glibc: &str, needed: &[&str]) -> ElfNeeds {
        ElfNeeds {
            member: "deep_ep_cpp.so".into(),
            machine: machine.into(),
            needed: needed.iter().map(|s| s.to_string()).collect(),
            versions: [(("libc.so.6".to_string(), glibc.to_string()), (vec!["pthread_create".into()], 1))].into(),
            undefined: vec![],
        }
    }

    fn fails(j: &Judgment) -> Vec<&str> {
        j.texts(Level::Fail)
    }

    #[test]
    fn every_tag_of_a_set_is_judged() {
        let e = || vec![needs("x86_64", "GLIBC_2.34", &["libc.so.6"])];
        for set in ["manylinux_2_38_x86_64.manylinux_2_38_aarch64", "manylinux_2_38_aarch64.manylinux_2_38_x86_64"] {
            let j = judge(set, e(), &[], &[], None);
            assert!(
                fails(&j).iter().any(|f| f.contains("names aarch64 but the ELF machine")),
                "{set}: {:?}",
                j.problems
            );
        }
        for set in ["linux_x86_64.manylinux_2_38_x86_64", "manylinux_2_38_x86_64.linux_x86_64"] {
            let j = judge(set, e(), &[], &[], None);
            assert!(!j.failed(), "{:?}", j.problems);
            assert!(j.texts(Level::Warn).iter().any(|w| w.contains("linux_x86_64 claims any Linux")), "{set}");
        }
        for set in ["manylinux_2_17_x86_64.manylinux_2_38_x86_64", "manylinux_2_38_x86_64.manylinux2014_x86_64"] {
            let j = judge(set, e(), &[], &[], None);
            assert!(
                fails(&j).iter().any(|f| f.contains("claims less than the binaries need")),
                "{set}: {:?}",
                j.problems
            );
        }
        assert!(!judge("manylinux_2_34_x86_64", e(), &[], &[], None).failed());
        assert!(judge("any", e(), &[], &[], None).failed());
        assert!(judge("win_amd64", e(), &[], &[], None).failed());
        assert!(!judge("any", vec![], &[], &[], None).failed());
    }

    #[test]
    fn an_unreadable_member_or_musl_or_the_floor_fails_closed() {
        let bad = [("deep_ep/junk.so".to_string(), "malformed ELF".to_string())];
        let j = judge("manylinux_2_17_x86_64", vec![needs("x86_64", "GLIBC_2.34", &["libc.so.6"])], &bad, &[], None);
        assert!(fails(&j).iter().any(|f| f.contains("deep_ep/junk.so cannot be read")), "{:?}", j.problems);
        let j = judge("manylinux_2_17_x86_64", vec![], &bad, &[], None);
        assert!(j.failed(), "an unreadable member alone fails");
        let musl = needs("x86_64", "GLIBC_2.2.5", &["libc.musl-x86_64.so.1"]);
        let j = judge("manylinux_2_17_x86_64", vec![musl], &[], &[], None);
        assert!(fails(&j).iter().any(|f| f.contains("needs musl's libc")), "{:?}", j.problems);
        let e = || vec![needs("x86_64", "GLIBC_2.34", &["libc.so.6"])];
        let j = judge("manylinux_2_34_x86_64", e(), &[], &[], Some("2_28"));
        let f = fails(&j).join("\n");
        assert!(f.contains("needs manylinux_2_34 but pins.toml's floor is manylinux_2_28"), "{f}");
        assert!(f.contains("GLIBC_2.34 from libc.so.6 (pthread_create)"), "{f}");
        assert!(!judge("manylinux_2_34_x86_64", e(), &[], &[], Some("2_34")).failed());
    }
}
