//! The wheel's run-time requirements (its METADATA `Requires-Dist`), derived
//! from the plan's [`BuildEnvironment`], never typed by hand:
//! - torch: `torch==<public version>` of the torch built against (the local
//!   `+cu130` cannot be required portably: PEP 440 `==2.11.0` matches every
//!   local build of 2.11.0; the local stays in the provenance and `probe
//!   --python` compares it, `torch-abi`);
//! - NVSHMEM: its pip distribution `==` the version linked, where the revision
//!   links NVSHMEM's device library statically (`needs.nvshmem_same`);
//! - NCCL (EPv2): its pip distribution `==` the version compiled against where
//!   the revision requires the run-time NCCL to equal the build's (below
//!   `needs.nccl_exact_below`), else `>=` the revision's minimum.
//!
//! Only what the build took from a pip distribution (a `*.dist-info` beside
//! the `nvidia/<lib>` package in the build Python's site-packages) becomes a
//! requirement; a system NCCL or NVSHMEM is a note. Path-free (it is in the
//! cache key and the provenance). `with_requires` writes them into METADATA.
//! Before the registry toolchain is provisioned, [`would`] states the same
//! from the versions it would install. Must not read anything but dist-info
//! folder names.
use std::path::Path;
use std::str::FromStr;

use super::plan::WouldProvision;
use super::toolchain::Toolchain;
use forge_model::interface::{version_key, Branch};
use forge_wheel::provenance::{BuildEnvironment, Requirement, RuntimeNeeds, RuntimeRequires};

/// The requirements of a build of `e` with toolchain `t`; `nccl_root` and
/// `nvshmem_root` are where the build found them (`environment::root`);
/// `enabled`: the variant's `runtime_requires`.
pub fn derive(
    t: &Toolchain,
    e: &BuildEnvironment,
    nccl_root: Option<&Path>,
    nvshmem_root: Option<&Path>,
    enabled: bool,
) -> RuntimeRequires {
    let mut r = RuntimeRequires { enabled, ..Default::default() };
    torch(t, e, &mut r);
    if e.needs.nvshmem_same {
        if let Some(v) = &e.nvshmem {
            let why =
                "the revision links NVSHMEM's device library statically: the host library must be the same version";
            library(t, nvshmem_root, "nvshmem", &format!("=={v}"), why, &mut r);
        }
    }
    if let Some((spec, why)) = nccl_spec(e) {
        library(t, nccl_root, "nccl", &spec, &why, &mut r);
    }
    if !enabled {
        r.notes.push(
            "runtime_requires = false (pins.toml): none of these is written into the wheel's METADATA".to_string(),
        );
    }
    r
}

/// torch's public version, when the build Python has torch from a distribution.
fn torch(t: &Toolchain, e: &BuildEnvironment, r: &mut RuntimeRequires) {
    let Some(v) = e.torch.as_deref() else { return };
    let public = v.split('+').next().unwrap_or(v);
    if pep440_rs::Version::from_str(public).is_err() {
        r.notes.push(format!("torch {}: not a PEP 440 version, not required", forge_os::input::excerpt(v, 40)));
        return;
    }
    if t.site_packages.iter().all(|sp| dist_info(sp, "torch").is_none()) {
        r.notes.push("torch is not an installed distribution of the build Python: not required".into());
        return;
    }
    let local =
        if public == v { String::new() } else { format!(" (built with {v}: the local part is checked by probe)") };
    r.requires.push(Requirement {
        name: "torch".into(),
        specifier: format!("=={public}"),
        why: format!("the extension links the torch it was compiled against{local}"),
    });
}

/// The requirements a build with the registry toolchain `w` would give,
/// before it is provisioned: the same rules as [`derive`] over the versions `w`
/// names (torch's `==`, pins.toml's or the lock's exact NCCL/NVSHMEM); a
/// version only the install decides (torch's own pin, a `>=` uv resolves) is a
/// note, never guessed. `needs`: the revision's ([`forge_model::interface`]).
pub fn would(w: &WouldProvision, needs: &RuntimeNeeds, branch: Branch, enabled: bool) -> RuntimeRequires {
    let mut r = RuntimeRequires { enabled, ..Default::default() };
    match w.torch.strip_prefix("torch==").filter(|v| pep440_rs::Version::from_str(v).is_ok()) {
        Some(v) => {
            let public = v.split('+').next().unwrap_or(v);
            r.requires.push(Requirement {
                name: "torch".into(),
                specifier: format!("=={public}"),
                why: format!(
                    "the extension links the torch it is compiled against (the registry toolchain's {})",
                    w.torch
                ),
            })
        }
        None => r.notes.push(format!("torch: {} names no exact version: known once installed", w.torch)),
    }
    let exact = |lib: &str| {
        let prefix = format!("nvidia-{lib}-cu");
        w.overrides.iter().find(|o| o.name.starts_with(&prefix)).map(|o| (o, o.specifier.strip_prefix("==")))
    };
    if needs.nvshmem_same {
        let why = "the revision links NVSHMEM's device library statically: the host library must be the same version";
        match exact("nvshmem") {
            Some((o, Some(v))) => {
                r.requires.push(Requirement { name: o.name.clone(), specifier: format!("=={v}"), why: why.into() })
            }
            _ => r.notes.push(
                "NVSHMEM: the version torch pins, known once the toolchain is installed (then required ==)".into(),
            ),
        }
    }
    if branch == Branch::Main {
        let name = exact("nccl").map(|(o, _)| o.name.clone());
        match (exact("nccl").and_then(|(_, v)| v), name) {
            (Some(v), Some(name)) => {
                if let Some((spec, why)) = nccl_spec_of(v, needs) {
                    r.requires.push(Requirement { name, specifier: spec, why });
                }
            }
            _ => match (&needs.nccl_min, &needs.nccl_exact_below) {
                (Some(min), None) => r.notes.push(format!(
                    "NCCL: the revision needs {min} or newer; the distribution is named once the toolchain is installed"
                )),
                _ => r.notes.push("NCCL: the version is known once the toolchain is installed".into()),
            },
        }
    }
    r.notes.push(
        "stated from what the registry toolchain would provision: read again from it once installed (what the wheel carries)"
            .into(),
    );
    if !enabled {
        r.notes.push(
            "runtime_requires = false (pins.toml): none of these is written into the wheel's METADATA".to_string(),
        );
    }
    r
}

/// NCCL's specifier: `==` the build's below the exact-version bound, else `>=` the minimum.
fn nccl_spec(e: &BuildEnvironment) -> Option<(String, String)> {
    nccl_spec_of(e.nccl.as_deref()?, &e.needs)
}

/// [`nccl_spec`] for a build against NCCL `built` of a revision with `needs`.
fn nccl_spec_of(built: &str, needs: &RuntimeNeeds) -> Option<(String, String)> {
    if let Some(below) = &needs.nccl_exact_below {
        if version_key(built) < version_key(below) {
            return Some((
                format!("=={built}"),
                format!("below NCCL {below} the revision requires the run-time NCCL to be the one compiled against"),
            ));
        }
    }
    let min = needs.nccl_min.as_deref()?;
    Some((format!(">={min}"), format!("the revision needs NCCL {min} or newer")))
}

/// `nvidia-<lib>-cuXX<spec>` when `root` is `<site-packages>/nvidia/<lib>` with its dist-info there.
fn library(t: &Toolchain, root: Option<&Path>, lib: &str, spec: &str, why: &str, r: &mut RuntimeRequires) {
    let upper = lib.to_uppercase();
    let Some(root) = root else { return };
    let site = t.site_packages.iter().find(|sp| root == sp.join("nvidia").join(lib));
    let Some((name, version)) = site.and_then(|sp| dist_info(sp, &format!("nvidia_{lib}_cu"))) else {
        r.notes.push(format!(
            "{upper} is not from a pip distribution (a system or variant-named folder): not required; the environment must provide {upper}{spec}"
        ));
        return;
    };
    let spec = if spec.starts_with("==") { format!("=={version}") } else { spec.to_string() };
    r.requires.push(Requirement { name, specifier: spec, why: why.into() });
}

/// The distribution (PEP 503 name, version) of the `*.dist-info` in `site`
/// whose folder name starts with `prefix` (`torch`, `nvidia_nccl_cu`); the
/// highest when several.
fn dist_info(site: &Path, prefix: &str) -> Option<(String, String)> {
    let mut found: Vec<(String, String)> = forge_os::fs::machine::names(site)
        .into_iter()
        .filter_map(|n| {
            let stem = n.strip_suffix(".dist-info")?;
            let (name, version) = stem.split_once('-')?;
            let exact = prefix != "torch" || name == "torch";
            (name.starts_with(prefix) && exact && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
                .then_some(())?;
            pep440_rs::Version::from_str(version).ok()?;
            Some((name.replace('_', "-").to_ascii_lowercase(), version.to_string()))
        })
        .collect();
    found.sort_by_key(|a| version_key(&a.1));
    found.pop()
}

/// METADATA with `Requires-Dist` lines for `reqs` appended to its headers (the
/// body, after the first empty line, is kept as it is). A requirement already
/// declared (same line) is not repeated.
pub fn with_requires(metadata: &str, reqs: &[Requirement]) -> String {
    let (head, body) = match metadata.find("\n\n") {
        Some(i) => (&metadata[..i + 1], &metadata[i + 1..]),
        None => (metadata, ""),
    };
    let mut out = head.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    for r in reqs {
        let line = format!("Requires-Dist: {}", r.line());
        if !head.lines().any(|l| l.trim_end() == line) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out.push_str(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_wheel::provenance::RuntimeNeeds;

    fn req(name: &str, spec: &str) -> Requirement {
        Requirement { name: name.into(), specifier: spec.into(), why: String::new() }
    }

    #[test]
    fn requires_dist_goes_after_the_headers_and_before_the_body() {
        let m = "Metadata-Version: 2.1\nName: deep_ep\nVersion: 2.1.0+abc\n\nREADME text\n\nmore\n";
        let out = with_requires(m, &[req("torch", "==2.11.0"), req("nvidia-nccl-cu13", "==2.30.7")]);
        assert_eq!(
            out,
            "Metadata-Version: 2.1\nName: deep_ep\nVersion: 2.1.0+abc\nRequires-Dist: torch==2.11.0\nRequires-Dist: nvidia-nccl-cu13==2.30.7\n\nREADME text\n\nmore\n"
        );
        // Idempotent, and a body-less METADATA works.
        assert_eq!(with_requires(&out, &[req("torch", "==2.11.0")]), out);
        assert_eq!(with_requires("Name: x", &[req("torch", "==2")]), "Name: x\nRequires-Dist: torch==2\n");
    }

    #[test]
    fn nccl_is_exact_below_the_bound_else_the_minimum() {
        let mut e = BuildEnvironment {
            nccl: Some("2.30.7".into()),
            needs: RuntimeNeeds {
                nccl_min: Some("2.30.4".into()),
                nccl_exact_below: Some("2.31".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(nccl_spec(&e).unwrap().0, "==2.30.7");
        e.nccl = Some("2.31.0".into());
        assert_eq!(nccl_spec(&e).unwrap().0, ">=2.30.4");
        e.needs.nccl_min = None;
        assert_eq!(nccl_spec(&e), None);
    }

    #[test]
    fn dist_info_names_are_normalised_and_validated() {
        let d = tempfile::tempdir().unwrap();
        for n in [
            "nvidia_nccl_cu13-2.28.9.dist-info",
            "nvidia_nccl_cu13-2.30.7.dist-info",
            "nvidia_nccl_cu13-not a version.dist-info",
            "torch-2.11.0+cu130.dist-info",
            "torchvision-0.26.0.dist-info",
        ] {
            std::fs::create_dir(d.path().join(n)).unwrap();
        }
        assert_eq!(dist_info(d.path(), "nvidia_nccl_cu"), Some(("nvidia-nccl-cu13".to_string(), "2.30.7".to_string())));
        assert_eq!(dist_info(d.path(), "torch"), Some(("torch".to_string(), "2.11.0+cu130".to_string())));
        assert_eq!(dist_info(d.path(), "nvidia_nvshmem_cu"), None);
    }
}
