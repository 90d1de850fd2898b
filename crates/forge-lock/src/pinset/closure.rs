//! `pin set --index`: the `[tool.uv] override-dependencies` entries that make
//! the consumer's environment the one its DeepEP wheel needs. For each
//! `nvidia-nccl-cu*` / `nvidia-nvshmem-cu*` distribution the wheel requires at
//! one exact version (`==`, `builder::closure`: the revision requires the
//! run-time library to equal the build's), an override `NAME==VERSION`: torch
//! pins its own NCCL exactly (torch 2.11: `nvidia-nccl-cu13==2.28.9`), so
//! without the override `uv lock` fails with a conflict; with it uv takes the
//! wheel's version for everyone (the shape NeMo-RL writes by hand). Written
//! always for such an exact requirement (it is harmless when nothing else pins
//! the library), never for a minimum (`>=`), which uv resolves by itself.
//! Must not write files.
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use anyhow::Result;
use pep508_rs::{PackageName, VersionOrUrl};
use toml_edit::{Array, DocumentMut, Item, Table, Value};

use crate::lock::pyproject::leading_name;
use forge_os::error::Failure;
use forge_store::index::closure::WheelRequires;

/// Distributions whose exact requirement becomes an override.
const LIBRARIES: [&str; 2] = ["nvidia-nccl-cu", "nvidia-nvshmem-cu"];

/// `NAME==VERSION` overrides for the wheels' exact library requirements (sorted).
pub fn overrides(wheels: &[WheelRequires]) -> Result<Vec<String>> {
    let mut found: BTreeMap<String, (String, String)> = BTreeMap::new();
    for w in wheels {
        for r in &w.requires {
            let Some((name, version)) = exact_library(r) else { continue };
            match found.get(&name) {
                Some((v, other)) if *v != version => {
                    return Err(Failure::problems(format!(
                        "{other} requires {name}=={v} and {} requires {name}=={version}: one override cannot serve both",
                        w.wheel
                    ))
                    .hint("publish wheels built against one NCCL/NVSHMEM into one index, or write override-dependencies with markers by hand")
                    .into())
                }
                _ => {
                    found.insert(name, (version, w.wheel.clone()));
                }
            }
        }
    }
    Ok(found.into_iter().map(|(n, (v, _))| format!("{n}=={v}")).collect())
}

/// (name, version) of `NAME==VERSION` for a library of [`LIBRARIES`] without markers.
fn exact_library(req: &str) -> Option<(String, String)> {
    if !req.is_ascii() {
        return None;
    }
    let r = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(req).ok()?;
    let name = r.name.to_string();
    if !LIBRARIES.iter().any(|l| name.starts_with(l)) || !r.marker.is_true() {
        return None;
    }
    let Some(VersionOrUrl::VersionSpecifier(spec)) = &r.version_or_url else { return None };
    let [one] = spec.iter().collect::<Vec<_>>()[..] else { return None };
    matches!(one.operator(), pep508_rs::pep440_rs::Operator::Equal).then(|| (name, one.version().to_string()))
}

/// pyproject.toml text with `overrides` in `[tool.uv] override-dependencies`
/// (an entry for the same distribution replaced, others kept); unchanged when none.
pub fn write(path: &Path, text: &str, overrides: &[String]) -> Result<String> {
    if overrides.is_empty() {
        return Ok(text.to_string());
    }
    let mut doc: DocumentMut =
        text.parse().map_err(|e| Failure::usage(format!("{}: not TOML: {e}", path.display())))?;
    let tool = doc.entry("tool").or_insert_with(implicit).as_table_like_mut();
    let uv = tool.and_then(|t| t.entry("uv").or_insert(Item::Table(Table::new())).as_table_like_mut());
    let uv = uv.ok_or_else(|| Failure::usage(format!("{}: [tool] or [tool.uv] is not a table", path.display())))?;
    let arr = uv.entry("override-dependencies").or_insert(Item::Value(Value::Array(Array::new())));
    let arr = arr.as_array_mut().ok_or_else(|| {
        Failure::usage(format!("{}: [tool.uv] override-dependencies is not an array of strings", path.display()))
    })?;
    let names: Vec<PackageName> =
        overrides.iter().filter_map(|o| PackageName::from_str(leading_name(o)).ok()).collect();
    arr.retain(|v| {
        let n = v.as_str().and_then(|s| PackageName::from_str(leading_name(s)).ok());
        !n.is_some_and(|n| names.contains(&n))
    });
    for o in overrides {
        arr.push(o.as_str());
    }
    // A one-line array stays one tidy line; a multi-line one keeps its layout and comments.
    if !arr.to_string().contains('\n') {
        arr.fmt();
    }
    Ok(doc.to_string())
}

fn implicit() -> Item {
    let mut t = Table::new();
    t.set_implicit(true);
    Item::Table(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(name: &str, reqs: &[&str]) -> WheelRequires {
        WheelRequires {
            wheel: name.into(),
            sha256: String::new(),
            requires: reqs.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn exact_library_requirements_become_overrides() {
        let o = overrides(&[w(
            "a.whl",
            &["torch==2.11.0", "nvidia-nccl-cu13==2.30.7", "nvidia-nvshmem-cu13==3.4.5", "nvidia-nccl-cu12>=2.30.4"],
        )])
        .unwrap();
        assert_eq!(o, ["nvidia-nccl-cu13==2.30.7", "nvidia-nvshmem-cu13==3.4.5"]);
        let e = overrides(&[w("a.whl", &["nvidia-nccl-cu13==2.30.7"]), w("b.whl", &["nvidia-nccl-cu13==2.30.4"])])
            .unwrap_err();
        assert!(e.to_string().contains("one override cannot serve both"), "{e}");
    }

    #[test]
    fn the_override_replaces_one_for_the_same_distribution() {
        let p = Path::new("pyproject.toml");
        let text = "[project]\nname = \"x\"\n\n[tool.uv]\noverride-dependencies = [\"nvidia-nccl-cu13==2.27.3\", \"foo==1\"]\n";
        let out = write(p, text, &["nvidia-nccl-cu13==2.30.7".to_string()]).unwrap();
        assert!(out.contains("override-dependencies = [\"foo==1\", \"nvidia-nccl-cu13==2.30.7\"]"), "{out}");
        let out = write(p, "[project]\nname = \"x\"\n", &["nvidia-nccl-cu13==2.30.7".to_string()]).unwrap();
        assert!(out.contains("[tool.uv]\noverride-dependencies = [\"nvidia-nccl-cu13==2.30.7\"]"), "{out}");
        assert!(write(p, "tool = 1\n", &["a==1".to_string()]).is_err());
    }
}
