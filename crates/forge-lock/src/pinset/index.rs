//! `pin set --index URL --variant NAME` and `pin set --git`: the consumer's
//! pyproject.toml moved between DeepEP from git (uv builds it) and DeepEP from
//! a `deepep-forge publish` index (uv installs the wheel). `toml_edit`
//! rewrites that keep comments and formatting:
//! - to the index: every DeepEP git requirement becomes `NAME==LABEL` (its
//!   marker kept), `[tool.uv.sources]` gets `NAME = { index = ... }` (one
//!   entry per architecture marker where the requirements carry them), a named
//!   `[[tool.uv.index]]` with `explicit = true` is added or updated, and the
//!   `[[tool.uv.dependency-metadata]]` for DeepEP (which existed only to spare
//!   uv a source build) is dropped;
//! - back to git: requirements become `NAME @ git+REPO@REV`, the index source
//!   and the index are removed.
//!
//! Must not write files or decide the revision.
use std::path::Path;
use std::str::FromStr;

use anyhow::Result;
use pep508_rs::{PackageName, VersionOrUrl};
use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, Value};

use crate::lock::pyproject::{is_name, leading_name, parse_requirement};
use forge_model::marker::archs;
use forge_model::pins::Arch;
use forge_os::error::Failure;

/// The index name `pin set --index` writes: `deepep-forge-<variant>`.
pub fn index_name(variant: &str) -> String {
    format!("deepep-forge-{variant}")
}

/// Where DeepEP comes from after the edit.
pub enum Dest<'a> {
    /// `url` is the variant's simple index (`<base>/<variant>/simple`).
    Index { name: &'a str, url: &'a str, label: &'a str },
    /// `repo` without `git+`, at `rev`.
    Git { repo: &'a str, rev: &'a str },
}

/// A `--index` URL: https, `file://`, or http on the loopback interface only
/// (plain http elsewhere can be changed on the way). Returns the variant's
/// simple-index URL.
pub fn index_url(base: &str, variant: &str) -> Result<String> {
    let u = forge_os::http::parse(base).map_err(|why| {
        Failure::usage(format!("--index {why}"))
            .hint("give the base URL of a `deepep-forge publish` folder, e.g. https://example.org/deepep")
    })?;
    let loopback = matches!(u.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    let ok = match u.scheme() {
        "https" | "file" => true,
        "http" => loopback,
        _ => false,
    };
    if !ok || u.query().is_some() || u.fragment().is_some() || !u.username().is_empty() || u.password().is_some() {
        return Err(Failure::usage(format!(
            "--index {}: expected an https:// or file:// URL without credentials, ?query or #fragment (http:// only on 127.0.0.1/localhost)",
            forge_os::http::redact(base)
        ))
        .hint("publish the index on an https host (GitHub Pages, S3, nginx) and give its base URL")
        .into());
    }
    forge_store::index::manifest::check_variant_name(variant).map_err(Failure::usage)?;
    Ok(format!("{}/{variant}/simple", u.as_str().trim_end_matches('/')))
}

/// The new text of one DeepEP requirement, or `None` when it is not one this edit moves.
fn moved(s: &str, name: &PackageName, dest: &Dest, path: &Path) -> Result<Option<(String, Vec<Arch>)>> {
    if !is_name(leading_name(s), name) {
        return Ok(None);
    }
    let req = parse_requirement(s, path, 0)?;
    let from_git = matches!(&req.version_or_url, Some(VersionOrUrl::Url(u)) if u.given().unwrap_or(u.as_str()).starts_with("git+"));
    let pinned = matches!(&req.version_or_url, Some(VersionOrUrl::VersionSpecifier(_)));
    let marker = req.marker.try_to_string().map(|m| format!(" ; {m}")).unwrap_or_default();
    let written = leading_name(s);
    let extras = if req.extras.is_empty() {
        String::new()
    } else {
        format!("[{}]", req.extras.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(","))
    };
    let new = match dest {
        Dest::Index { label, .. } if from_git || pinned => format!("{written}{extras}=={label}{marker}"),
        Dest::Git { repo, rev } if pinned || from_git => format!("{written}{extras} @ git+{repo}@{rev}{marker}"),
        _ => return Ok(None),
    };
    Ok(Some((new, archs(&req.marker, &pep508_rs::MarkerTree::TRUE))))
}

/// Rewrite every DeepEP requirement in the usual places; returns the places
/// changed and the architecture sets the requirements serve.
fn requirements(
    doc: &mut DocumentMut,
    name: &PackageName,
    dest: &Dest,
    path: &Path,
) -> Result<(Vec<String>, Vec<Vec<Arch>>)> {
    let (mut places, mut covers) = (Vec::new(), Vec::new());
    super::edit::each_requirement_array(doc, |place, arr| {
        if edit_array(arr, name, dest, path, &mut covers)? {
            places.push(place);
        }
        Ok(())
    })?;
    Ok((places, covers))
}

fn edit_array(
    arr: &mut Array,
    name: &PackageName,
    dest: &Dest,
    path: &Path,
    covers: &mut Vec<Vec<Arch>>,
) -> Result<bool> {
    let mut changed = false;
    for i in 0..arr.len() {
        let Some(s) = arr.get(i).and_then(Value::as_str).map(String::from) else { continue };
        let Some((new, arches)) = moved(&s, name, dest, path)? else { continue };
        covers.push(arches);
        if new != s {
            let decor = arr.get(i).expect("in range").decor().clone();
            let mut v = Value::from(new);
            *v.decor_mut() = decor;
            arr.replace_formatted(i, v);
            changed = true;
        }
    }
    Ok(changed)
}

/// `[tool.uv.sources]`: DeepEP from the index (per architecture marker where
/// the requirements are split by architecture), or no entry at all.
fn sources(doc: &mut DocumentMut, name: &PackageName, dest: &Dest, covers: &[Vec<Arch>]) -> bool {
    let uv = doc.entry("tool").or_insert(toml_edit::table()).as_table_like_mut().expect("tool is a table");
    let uv = uv.entry("uv").or_insert(toml_edit::table()).as_table_like_mut().expect("tool.uv is a table");
    let before = uv.get("sources").map(|s| s.to_string());
    let sources = uv.entry("sources").or_insert(toml_edit::table()).as_table_like_mut().expect("sources is a table");
    let keys: Vec<String> = sources.iter().map(|(k, _)| k.to_string()).filter(|k| is_name(k, name)).collect();
    for k in &keys {
        sources.remove(k);
    }
    if let Dest::Index { name: index, .. } = dest {
        let split: Vec<Arch> = Arch::ALL.into_iter().filter(|a| covers.iter().any(|c| c == &vec![*a])).collect();
        let entry = |marker: Option<String>| {
            let mut t = InlineTable::new();
            t.insert("index", Value::from(*index));
            if let Some(m) = marker {
                t.insert("marker", Value::from(m));
            }
            Value::InlineTable(t)
        };
        let key = keys.first().cloned().unwrap_or_else(|| name.to_string());
        let value = if split.is_empty() {
            entry(None)
        } else {
            let mut a = Array::new();
            for arch in split {
                a.push_formatted(entry(Some(format!("platform_machine == '{arch}'"))));
            }
            Value::Array(a)
        };
        sources.insert(&key, Item::Value(value));
    }
    if sources.is_empty() {
        uv.remove("sources");
    }
    uv.get("sources").map(|s| s.to_string()) != before
}

/// `[[tool.uv.index]]`: the named index added or updated (`explicit = true`:
/// only DeepEP comes from it), or every `deepep-forge-*` index removed.
fn index_table(doc: &mut DocumentMut, dest: &Dest) -> bool {
    let uv = doc["tool"]["uv"].as_table_like_mut().expect("made by sources()");
    let before = uv.get("index").map(|s| s.to_string());
    if uv.get("index").is_none() {
        if matches!(dest, Dest::Git { .. }) {
            return false;
        }
        uv.insert("index", Item::ArrayOfTables(ArrayOfTables::new()));
    }
    let Some(aot) = uv.get_mut("index").and_then(Item::as_array_of_tables_mut) else { return false };
    let ours = |t: &Table| t.get("name").and_then(Item::as_str).is_some_and(|n| n.starts_with("deepep-forge-"));
    match dest {
        Dest::Index { name, url, .. } => {
            let at = (0..aot.len())
                .find(|i| aot.get(*i).is_some_and(|t| t.get("name").and_then(Item::as_str) == Some(name)));
            aot.retain(|t| !ours(t) || t.get("name").and_then(Item::as_str) == Some(name));
            match at.and_then(|_| aot.iter_mut().find(|t| t.get("name").and_then(Item::as_str) == Some(name))) {
                Some(t) => {
                    t["url"] = toml_edit::value(*url);
                    t["explicit"] = toml_edit::value(true);
                }
                None => {
                    let mut t = Table::new();
                    t["name"] = toml_edit::value(*name);
                    t["url"] = toml_edit::value(*url);
                    t["explicit"] = toml_edit::value(true);
                    aot.push(t);
                }
            }
        }
        Dest::Git { .. } => aot.retain(|t| !ours(t)),
    }
    if aot.is_empty() {
        uv.remove("index");
    }
    uv.get("index").map(|s| s.to_string()) != before
}

/// Drop `[[tool.uv.dependency-metadata]]` entries for DeepEP (index only).
fn drop_dependency_metadata(doc: &mut DocumentMut, name: &PackageName) -> bool {
    let Some(uv) = doc["tool"]["uv"].as_table_like_mut() else { return false };
    let Some(aot) = uv.get_mut("dependency-metadata").and_then(Item::as_array_of_tables_mut) else { return false };
    let n = aot.len();
    aot.retain(|t| !t.get("name").and_then(Item::as_str).is_some_and(|v| is_name(v, name)));
    let changed = aot.len() != n;
    if aot.is_empty() {
        uv.remove("dependency-metadata");
    }
    changed
}

/// `project.dependencies` gets `deep_ep==LABEL` (the name as DeepEP's metadata
/// writes it: pip before 23.2 compares it unnormalised).
fn add_requirement(doc: &mut DocumentMut, name: &PackageName, label: &str, path: &Path) -> Result<String> {
    let Some(project) = doc.get_mut("project").and_then(Item::as_table_like_mut) else {
        return Err(Failure::usage(format!("{}: no [project] table to add DeepEP to", path.display()))
            .hint("run `uv init` in the project first, or add a [project] table with name and version")
            .into());
    };
    let deps = project.entry("dependencies").or_insert(Item::Value(Value::Array(Array::new())));
    let Some(arr) = deps.as_array_mut() else {
        return Err(Failure::usage(format!("{}: project.dependencies is not an array", path.display())).into());
    };
    let mut v = Value::from(format!("{}=={label}", name.as_dist_info_name()));
    // On its own line where the last element is (its comment not copied).
    let indent = arr.iter().last().and_then(|l| l.decor().prefix()?.as_str().map(String::from));
    if let Some(p) = indent.filter(|p| p.contains('\n')) {
        v.decor_mut().set_prefix(&p[p.rfind('\n').expect("contains")..]);
    } else if !arr.is_empty() {
        v.decor_mut().set_prefix(" ");
    }
    arr.push_formatted(v);
    Ok("project.dependencies (added)".into())
}

/// Rewrite pyproject.toml text for `dest`. Returns the new text and the places changed.
pub fn pyproject(path: &Path, text: &str, name: &PackageName, dest: &Dest) -> Result<(String, Vec<String>)> {
    let mut doc = DocumentMut::from_str(text).map_err(|e| {
        let line = e.span().map(|s| forge_model::pins::line_col(text, s.start).0).unwrap_or(0);
        Failure::usage(format!("{}:{line}: {}", path.display(), e.message().trim()))
    })?;
    let (mut places, mut covers) = requirements(&mut doc, name, dest, path)?;
    if covers.is_empty() {
        // A consumer new to DeepEP (`uv init`): the index adds the requirement.
        let Dest::Index { label, .. } = dest else {
            return Err(Failure::usage(format!(
                "{}: no DeepEP requirement (`{name} @ git+...` or `{name}==...`) to move",
                path.display()
            ))
            .into());
        };
        places.push(add_requirement(&mut doc, name, label, path)?);
        covers.push(Arch::ALL.to_vec());
    }
    if sources(&mut doc, name, dest, &covers) {
        places.push(format!("tool.uv.sources.{name}"));
    }
    if index_table(&mut doc, dest) {
        places.push("[[tool.uv.index]]".into());
    }
    if matches!(dest, Dest::Index { .. }) && drop_dependency_metadata(&mut doc, name) {
        places.push("[[tool.uv.dependency-metadata]] (dropped: the index serves the metadata)".into());
    }
    Ok((doc.to_string(), places))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"[project]
name = "c"
version = "0"
requires-python = ">=3.11"
dependencies = [
  "numpy",
  # DeepEP, pinned per architecture
  "deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@aaaa ; platform_machine == 'x86_64'",
  "deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@aaaa ; platform_machine == 'aarch64'",
]

[[tool.uv.dependency-metadata]]
name = "deep_ep"
version = "1.2.1+aaaaaaa"   # label
requires-dist = ["torch"]
"#;

    #[test]
    fn to_the_index_and_back_keeping_comments() {
        let name = PackageName::from_str("deep_ep").unwrap();
        let p = Path::new("pyproject.toml");
        let to = Dest::Index { name: "deepep-forge-demo", url: "https://h/demo/simple", label: "1.2.1+0bfa6c2" };
        let (out, places) = pyproject(p, TEXT, &name, &to).unwrap();
        assert!(
            out.contains(
                "  # DeepEP, pinned per architecture\n  \"deep_ep==1.2.1+0bfa6c2 ; platform_machine == 'x86_64'\","
            ),
            "{out}"
        );
        assert!(out.contains("deep-ep = [{ index = \"deepep-forge-demo\", marker = \"platform_machine == 'x86_64'\" }, { index = \"deepep-forge-demo\", marker = \"platform_machine == 'aarch64'\" }]"), "{out}");
        assert!(
            out.contains(
                "[[tool.uv.index]]\nname = \"deepep-forge-demo\"\nurl = \"https://h/demo/simple\"\nexplicit = true"
            ),
            "{out}"
        );
        assert!(!out.contains("dependency-metadata"), "{out}");
        assert_eq!(places.len(), 4, "{places:?}");
        // Twice: nothing changes.
        let (again, _) = pyproject(p, &out, &name, &to).unwrap();
        assert_eq!(again, out);
        let back = Dest::Git { repo: "https://github.com/deepseek-ai/DeepEP.git", rev: "bbbb" };
        let (git, _) = pyproject(p, &out, &name, &back).unwrap();
        assert!(
            git.contains(
                "\"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@bbbb ; platform_machine == 'aarch64'\""
            ),
            "{git}"
        );
        assert!(!git.contains("tool.uv.index") && !git.contains("index ="), "{git}");
    }

    #[test]
    fn a_consumer_without_deepep_gets_the_requirement() {
        let name = PackageName::from_str("deep_ep").unwrap();
        let to = Dest::Index { name: "deepep-forge-demo", url: "https://h/demo/simple", label: "1.2.1+0bfa6c2" };
        let p = Path::new("pyproject.toml");
        let (out, places) =
            pyproject(p, "[project]\nname = \"c\"\nversion = \"0\"\ndependencies = []\n", &name, &to).unwrap();
        assert!(out.contains("dependencies = [\"deep_ep==1.2.1+0bfa6c2\"]"), "{out}");
        assert!(out.contains("deep-ep = { index = \"deepep-forge-demo\" }"), "{out}");
        assert_eq!(places[0], "project.dependencies (added)");
        let (out, _) = pyproject(p, "[project]\nname = \"c\"\nversion = \"0\"\n", &name, &to).unwrap();
        assert!(out.contains("dependencies = [\"deep_ep==1.2.1+0bfa6c2\"]"), "{out}");
        let many = "[project]\nname = \"c\"\nversion = \"0\"\ndependencies = [\n  # numbers\n  \"numpy\",\n]\n";
        let (out, _) = pyproject(p, many, &name, &to).unwrap();
        assert!(out.contains("  # numbers\n  \"numpy\",\n  \"deep_ep==1.2.1+0bfa6c2\",\n]"), "{out}");
        assert!(pyproject(p, "[tool.x]\n", &name, &to).is_err(), "no [project]: nothing to add to");
        let back = Dest::Git { repo: "https://github.com/deepseek-ai/DeepEP.git", rev: "bbbb" };
        assert!(pyproject(p, "[project]\nname = \"c\"\n", &name, &back).is_err(), "--git moves, never adds");
    }

    #[test]
    fn index_urls_are_https_file_or_loopback_http() {
        assert_eq!(index_url("https://h.example/deepep/", "demo").unwrap(), "https://h.example/deepep/demo/simple");
        assert!(index_url("http://127.0.0.1:8123", "demo").is_ok());
        for bad in ["http://h.example/x", "ftp://h/x", "https://u:p@h/x", "https://h/x?q=1", "not a url"] {
            assert!(index_url(bad, "demo").is_err(), "{bad}");
        }
        assert!(index_url("https://h/x", "../x").is_err());
    }
}
