//! `lock-requires-unmet`: the consumer's uv.lock must satisfy the run-time
//! requirements of the deep-ep wheels it pins (their own `Requires-Dist`, read
//! by `lock check` from the index's PEP 658 `.metadata`, checked against the
//! signed manifest). A lock made with DeepEP's requirements hidden
//! (`[[tool.uv.dependency-metadata]]` with `requires-dist = []`, as NeMo-RL
//! writes it for the git source) or before the wheel changed can hold torch's
//! NCCL where the wheel needs its own: the extension then fails at import.
//! Only the packages uv.lock's environment tables hold (torch, NCCL, NVSHMEM).
use std::path::Path;
use std::str::FromStr;

use pep508_rs::VersionOrUrl;

use crate::lock::index::LockedWheel;
use crate::lock::uvlock::{EnvPackage, ENV_PACKAGES};
use forge_model::findings::{Finding, Severity};
use forge_model::pins::Arch;
use forge_store::index::closure::WheelRequires;

/// One finding per requirement of a locked wheel that the lock's tables for
/// the wheel's architecture do not satisfy (`lock_path` at the table's line).
pub fn lock_requires_unmet(
    lock_path: &Path,
    locked: &[LockedWheel],
    requires: &[WheelRequires],
    env: &[EnvPackage],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for w in locked {
        let Some(r) = requires.iter().find(|r| w.sha256.as_deref() == Some(r.sha256.as_str())) else { continue };
        let arch = Arch::ALL.into_iter().find(|a| w.arch.as_deref() == Some(a.as_str()));
        for req in &r.requires {
            let Some((name, spec)) = parse(req) else { continue };
            let tables: Vec<&EnvPackage> =
                env.iter().filter(|p| p.name == name && arch.is_none_or(|a| p.archs.contains(&a))).collect();
            let fix = fix(&name, &spec);
            if tables.is_empty() {
                let f = Finding::new(
                    "lock-requires-unmet",
                    Severity::Error,
                    lock_path,
                    format!(
                        "the deep-ep wheel {} that uv.lock pins requires {name}{spec} (its METADATA, from the index), and uv.lock installs no {name}{}: the extension fails at import",
                        w.file,
                        arch.map(|a| format!(" for {a}")).unwrap_or_default()
                    ),
                )
                .at(w.line, 1)
                .expected_found(format!("{name}{spec}"), "none")
                .fix(fix.clone());
                out.push(match arch {
                    Some(a) => f.arch(a),
                    None => f,
                });
                continue;
            }
            for p in tables.iter().filter(|p| !satisfies(&p.version, &spec)) {
                let f = Finding::new(
                    "lock-requires-unmet",
                    Severity::Error,
                    lock_path,
                    format!(
                        "uv.lock installs {name} {} but the deep-ep wheel {} it pins (line {}) requires {name}{spec} (its METADATA, from the index): the extension fails at import",
                        p.version, w.file, w.line
                    ),
                )
                .at(p.line, p.col)
                .expected_found(format!("{name}{spec}"), p.version.clone())
                .fix(fix.clone());
                out.push(match arch {
                    Some(a) => f.arch(a),
                    None => f,
                });
            }
        }
    }
    out
}

/// (normalised name, specifier text) of a requirement on an environment package, without markers.
fn parse(req: &str) -> Option<(String, pep508_rs::pep440_rs::VersionSpecifiers)> {
    if !req.is_ascii() {
        return None;
    }
    let r = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(req).ok()?;
    let name = r.name.to_string();
    let env = ENV_PACKAGES.iter().any(|p| if p.ends_with("-cu") { name.starts_with(p) } else { name == *p });
    let Some(VersionOrUrl::VersionSpecifier(spec)) = r.version_or_url else { return None };
    (env && r.marker.is_true()).then_some((name, spec))
}

fn satisfies(version: &str, spec: &pep508_rs::pep440_rs::VersionSpecifiers) -> bool {
    pep508_rs::pep440_rs::Version::from_str(version).is_ok_and(|v| spec.contains(&v))
}

/// The override that makes uv take the wheel's version (exact), else a relock.
fn fix(name: &str, spec: &pep508_rs::pep440_rs::VersionSpecifiers) -> String {
    let exact =
        spec.iter().count() == 1 && spec.iter().all(|s| matches!(s.operator(), pep508_rs::pep440_rs::Operator::Equal));
    if exact {
        format!("add `override-dependencies = [\"{name}{spec}\"]` under [tool.uv] in pyproject.toml (`deepep-forge pin set REV --index URL --variant NAME` writes it), then `uv lock`")
    } else {
        format!("drop DeepEP's `[[tool.uv.dependency-metadata]]` (it hides the wheel's requirements) and `uv lock --upgrade-package {name}`")
    }
}
