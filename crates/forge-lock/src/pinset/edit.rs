//! `toml_edit` rewrites for `pin set`: DeepEP requirements, sources and the
//! dependency-metadata label in pyproject.toml, pins in pins.toml. Keeps
//! comments and formatting; touches only DeepEP values. Validates while it
//! walks: anything it cannot rewrite honestly is a usage error naming file:line.
use std::path::Path;
use std::str::FromStr;

use anyhow::Result;
use pep508_rs::{MarkerTree, PackageName, VersionOrUrl};
use toml_edit::{Array, DocumentMut, Item, TableLike, Value};

use crate::lock::pyproject::{is_name, leading_name, parse_requirement, REQUIREMENT_FIELDS};
use forge_model::marker::{arch_env, archs};
use forge_model::pins::Arch;
use forge_os::error::Failure;

/// What to write.
pub struct Target<'a> {
    pub rev: &'a str,
    /// `None`: both architectures, one unmarked requirement per place.
    pub arch: Option<Arch>,
    /// The new dependency-metadata label (`1.2.1+17cfb81`), when one is known.
    pub label: Option<&'a str>,
}

/// The 1-based line where `needle` first appears (for messages).
fn line_of(text: &str, needle: &str) -> usize {
    text.find(needle).map(|i| forge_model::pins::line_col(text, i).0).unwrap_or(0)
}

/// The 1-based line of a string value: found by its text as written (TOML
/// escapes such as `\u0040` included), else by its decoded text.
fn line_of_value(text: &str, v: &Value) -> usize {
    let raw = match v {
        Value::String(f) => f.as_repr().and_then(|r| r.as_raw().as_str()),
        _ => None,
    };
    match raw.and_then(|r| text.find(r)) {
        Some(i) => forge_model::pins::line_col(text, i).0,
        None => line_of(text, v.as_str().unwrap_or_default()),
    }
}

/// `git+https://host/repo.git@OLD#frag` with its revision replaced (or added).
pub fn with_rev(url: &str, rev: &str) -> String {
    let cut = url.find(['?', '#']).unwrap_or(url.len());
    let (main, tail) = url.split_at(cut);
    let slash = main.rfind('/').unwrap_or(0);
    let base = match main[slash..].find('@') {
        Some(at) => &main[..slash + at],
        None => main,
    };
    format!("{base}@{rev}{tail}")
}

/// The marker restricts by architecture only (true or false per arch, nothing else).
fn arch_only(m: &MarkerTree) -> bool {
    Arch::ALL.into_iter().all(|a| {
        let env = arch_env(a);
        let mut x = m.clone();
        x.and(env.clone());
        x.is_false() || x == env
    })
}

fn decor_prefix(v: &Value) -> String {
    v.decor().prefix().and_then(|p| p.as_str()).unwrap_or_default().to_string()
}

/// Rewrite one array of requirement strings; returns how many values changed.
fn edit_array(arr: &mut Array, place: &str, name: &PackageName, t: &Target, path: &Path, text: &str) -> Result<usize> {
    // (index, string, url as written, archs)
    let mut git_items: Vec<(usize, String, String, Vec<Arch>, MarkerTree)> = Vec::new();
    let mut lines = std::collections::BTreeMap::new();
    for (i, v) in arr.iter().enumerate() {
        let Some(s) = v.as_str() else { continue };
        if !is_name(leading_name(s), name) {
            continue;
        }
        let line = line_of_value(text, v);
        lines.insert(i, line);
        let req = parse_requirement(s, path, line)?;
        let Some(VersionOrUrl::Url(u)) = &req.version_or_url else { continue };
        let url = u.given().unwrap_or(u.as_str()).to_string();
        if !url.starts_with("git+") {
            continue;
        }
        git_items.push((i, s.to_string(), url, archs(&req.marker, &MarkerTree::TRUE), req.marker.clone()));
    }
    if git_items.is_empty() {
        return Ok(0);
    }
    match t.arch {
        None => {
            for (i, s, _, _, m) in &git_items {
                if !arch_only(m) {
                    return Err(Failure::usage(format!(
                        "{}:{}: {place}: the marker of `{s}` restricts DeepEP by more than the architecture; one unmarked requirement would drop that",
                        path.display(),
                        lines.get(i).copied().unwrap_or_default()
                    ))
                    .hint("edit that requirement by hand, or pin one architecture with --arch")
                    .into());
                }
            }
            let (first, s, url, _, _) = &git_items[0];
            let at = s.find('@').expect("a URL requirement has `@`");
            let new = format!("{} @ {}", s[..at].trim_end(), with_rev(url, t.rev));
            let mut changed = usize::from(new != *s);
            arr.replace(*first, new);
            for (i, _, _, _, _) in git_items[1..].iter().rev() {
                let removed = arr.remove(*i);
                changed += 1;
                // Keep a comment that sat above a removed requirement.
                let p = decor_prefix(&removed);
                if p.contains('#') {
                    if let Some(next) = arr.get_mut(*i) {
                        let merged = format!("{}{}", p.trim_end(), decor_prefix(next));
                        next.decor_mut().set_prefix(merged);
                    }
                }
            }
            Ok(changed)
        }
        Some(a) => {
            let mut changed = 0;
            for (i, s, url, covers, _) in &git_items {
                if !covers.contains(&a) {
                    continue;
                }
                if covers.len() > 1 {
                    return Err(Failure::usage(format!(
                        "{}:{}: {place}: `{s}` serves every architecture; --arch {a} cannot change it for {a} alone",
                        path.display(),
                        lines.get(i).copied().unwrap_or_default()
                    ))
                    .hint("run without --arch to pin both architectures, or give each architecture its own marked requirement first")
                    .into());
                }
                let new = s.replacen(url.as_str(), &with_rev(url, t.rev), 1);
                changed += usize::from(new != *s);
                arr.replace(*i, new);
            }
            Ok(changed)
        }
    }
}

/// Every list of requirement strings pyproject.toml keeps (see
/// [`REQUIREMENT_FIELDS`]), each with its place, in the table's order.
pub(super) fn each_requirement_array(
    doc: &mut DocumentMut,
    mut f: impl FnMut(String, &mut Array) -> Result<()>,
) -> Result<()> {
    for field in &REQUIREMENT_FIELDS {
        let Some(table) = table_mut(doc, field.table) else { continue };
        let keys: Vec<String> = match field.key {
            Some(k) => vec![k.to_string()],
            None => table.iter().map(|(k, _)| k.to_string()).collect(),
        };
        for k in keys {
            let Some(arr) = table.get_mut(&k).and_then(Item::as_array_mut) else { continue };
            f(field.place(&k), arr)?;
        }
    }
    Ok(())
}

pub(super) fn table_mut<'a>(doc: &'a mut DocumentMut, path: &[&str]) -> Option<&'a mut dyn TableLike> {
    let mut t: &mut dyn TableLike = doc.as_table_mut();
    for k in path {
        t = t.get_mut(k)?.as_table_like_mut()?;
    }
    Some(t)
}

fn set_string(item: &mut Item, s: &str) -> bool {
    match item.as_value_mut() {
        Some(v) if v.as_str() != Some(s) => {
            let decor = v.decor().clone();
            *v = Value::from(s);
            *v.decor_mut() = decor;
            true
        }
        _ => false,
    }
}

/// Rewrite pyproject.toml text. Returns the new text and the places changed.
pub fn pyproject(path: &Path, text: &str, name: &PackageName, t: &Target) -> Result<(String, Vec<String>)> {
    let mut doc = pins_doc(path, text)?;
    let mut places = Vec::new();
    each_requirement_array(&mut doc, |place, arr| {
        if edit_array(arr, &place, name, t, path, text)? > 0 {
            places.push(place);
        }
        Ok(())
    })?;

    // tool.uv.sources.<deep_ep>: a table or a list of tables with git + rev.
    if let Some(sources) = table_mut(&mut doc, &["tool", "uv", "sources"]) {
        let keys: Vec<String> = sources.iter().map(|(k, _)| k.to_string()).filter(|k| is_name(k, name)).collect();
        for k in keys {
            let item = sources.get_mut(&k).expect("listed");
            // (entry, is an inline table)
            let mut entries: Vec<(&mut dyn TableLike, bool)> = match item {
                Item::Value(Value::Array(a)) => a
                    .iter_mut()
                    .filter_map(|v| v.as_inline_table_mut().map(|t| (t as &mut dyn TableLike, true)))
                    .collect(),
                Item::Value(Value::InlineTable(t)) => vec![(t as &mut dyn TableLike, true)],
                other => other.as_table_like_mut().into_iter().map(|t| (t, false)).collect(),
            };
            let mut changed = false;
            for (e, inline) in entries.iter_mut() {
                if e.get("git").is_none() {
                    continue;
                }
                let marker = e.get("marker").and_then(Item::as_value);
                let m = match marker.and_then(Value::as_str) {
                    Some(s) => forge_model::marker::parse(s).map_err(|err| {
                        Failure::usage(format!(
                            "{}:{}: tool.uv.sources.{k}: invalid marker: {err}",
                            path.display(),
                            marker.map(|v| line_of_value(text, v)).unwrap_or_default()
                        ))
                    })?,
                    None => MarkerTree::TRUE,
                };
                let covers = archs(&m, &MarkerTree::TRUE);
                if let Some(a) = t.arch {
                    if !covers.contains(&a) {
                        continue;
                    }
                    if covers.len() > 1 {
                        return Err(Failure::usage(format!(
                            "{}:{}: tool.uv.sources.{k} serves every architecture; --arch {a} cannot change it for {a} alone",
                            path.display(),
                            line_of(text, &format!("{k} ="))
                        ))
                        .hint("run without --arch, or give each architecture its own entry with a marker")
                        .into());
                    }
                }
                e.remove("tag");
                e.remove("branch");
                match e.get_mut("rev") {
                    Some(r) => changed |= set_string(r, t.rev),
                    None => {
                        let mut v = Value::from(t.rev);
                        if *inline {
                            // Appended last: the old last value's space before `}` moves behind the new one.
                            if let Some(last) = e.iter_mut().last().and_then(|(_, i)| i.as_value_mut()) {
                                let suffix =
                                    last.decor().suffix().and_then(|s| s.as_str()).unwrap_or_default().to_string();
                                last.decor_mut().set_suffix("");
                                v.decor_mut().set_suffix(suffix);
                            }
                            v.decor_mut().set_prefix(" ");
                        }
                        e.insert("rev", Item::Value(v));
                        changed = true;
                    }
                }
            }
            if changed {
                places.push(format!("tool.uv.sources.{k}"));
            }
        }
    }

    // [[tool.uv.dependency-metadata]] name = deep_ep: the static label.
    if let Some(label) = t.label {
        if let Some(uv) = table_mut(&mut doc, &["tool", "uv"]) {
            if let Some(aot) = uv.get_mut("dependency-metadata").and_then(Item::as_array_of_tables_mut) {
                for tbl in aot.iter_mut() {
                    if !tbl.get("name").and_then(Item::as_str).is_some_and(|n| is_name(n, name)) {
                        continue;
                    }
                    if let Some(v) = tbl.get_mut("version") {
                        if set_string(v, label) {
                            places.push("[[tool.uv.dependency-metadata]] version".into());
                        }
                    }
                }
            }
        }
    }
    Ok((doc.to_string(), places))
}

/// Rewrite pins.toml text: the rev of each target architecture (adding
/// `[pin.<arch>]` when missing) and, if it changed, `source.base_version`.
pub fn pins(path: &Path, text: &str, rev: &str, arches: &[Arch], base: Option<&str>) -> Result<String> {
    let mut doc = pins_doc(path, text)?;
    for a in arches {
        let pin = doc["pin"]
            .as_table_like_mut()
            .ok_or_else(|| Failure::usage(format!("{}: [pin] is not a table", path.display())))?;
        if pin.get(a.as_str()).is_none() {
            let mut t = toml_edit::Table::new();
            t.insert("rev", toml_edit::value(rev));
            pin.insert(a.as_str(), Item::Table(t));
        } else {
            let entry = pin.get_mut(a.as_str()).and_then(Item::as_table_like_mut).expect("pin tables validated");
            match entry.get_mut("rev") {
                Some(r) => {
                    set_string(r, rev);
                }
                None => {
                    entry.insert("rev", toml_edit::value(rev));
                }
            }
        }
    }
    if let Some(b) = base {
        if let Some(v) = table_mut(&mut doc, &["source"]).and_then(|s| s.get_mut("base_version")) {
            set_string(v, b);
        }
    }
    Ok(doc.to_string())
}

/// pins.toml text as an editable document, a syntax error named with its line.
fn pins_doc(path: &Path, text: &str) -> Result<DocumentMut> {
    DocumentMut::from_str(text).map_err(|e| {
        let line = e.span().map(|s| forge_model::pins::line_col(text, s.start).0).unwrap_or(0);
        Failure::usage(format!("{}:{line}: {}", path.display(), e.message().trim())).into()
    })
}

/// pins.toml text without `source.branch` (the pin moved to a commit whose branch its source
/// does not say; see `pin set`).
pub fn without_branch(path: &Path, text: &str) -> Result<String> {
    let mut doc = pins_doc(path, text)?;
    if let Some(s) = table_mut(&mut doc, &["source"]) {
        s.remove("branch");
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_rev_replaces_or_adds_the_revision() {
        assert_eq!(with_rev("git+https://h/o/DeepEP.git@abc", "def"), "git+https://h/o/DeepEP.git@def");
        assert_eq!(with_rev("git+https://h/o/DeepEP.git", "def"), "git+https://h/o/DeepEP.git@def");
        assert_eq!(
            with_rev("git+ssh://git@h/o/DeepEP.git@abc#subdirectory=x", "def"),
            "git+ssh://git@h/o/DeepEP.git@def#subdirectory=x"
        );
    }

    const NEW: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";

    fn edit(text: &str, arch: Option<Arch>) -> Result<(String, Vec<String>)> {
        let name = PackageName::from_str("deep_ep").unwrap();
        pyproject(Path::new("pyproject.toml"), text, &name, &Target { rev: NEW, arch, label: Some("1.2.1+17cfb81") })
    }

    #[test]
    fn sources_labels_and_comments_are_rewritten_in_place() {
        let text = r#"[project]
dependencies = [
  "deep-ep ; platform_machine == 'x86_64'",  # bare: the source pins it
]
[tool.uv]
override-dependencies = [
  "deep_ep @ git+https://h/DeepEP.git@aaaa ; platform_machine == 'x86_64'",
  # aarch64 runs an older build
  "deep_ep @ git+https://h/DeepEP.git@bbbb ; platform_machine == 'aarch64'",
  "numpy",
]
[tool.uv.sources]
deep-ep = [
  { git = "https://h/DeepEP.git", tag = "v1", marker = "platform_machine == 'x86_64'" },
  { git = "https://h/DeepEP.git", rev = "bbbb", marker = "platform_machine == 'aarch64'" },  # arm
]
[[tool.uv.dependency-metadata]]
name = "Deep_EP"
version = "v1.2.1+aaaa"   # label
"#;
        let (out, places) = edit(text, None).unwrap();
        assert_eq!(
            places,
            ["tool.uv.override-dependencies", "tool.uv.sources.deep-ep", "[[tool.uv.dependency-metadata]] version"]
        );
        assert!(
            out.contains(&format!(
                "  \"deep_ep @ git+https://h/DeepEP.git@{NEW}\",\n  # aarch64 runs an older build\n  \"numpy\","
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "{{ git = \"https://h/DeepEP.git\", marker = \"platform_machine == 'x86_64'\", rev = \"{NEW}\" }},\n"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!("rev = \"{NEW}\", marker = \"platform_machine == 'aarch64'\" }},  # arm")),
            "{out}"
        );
        assert!(out.contains("version = \"1.2.1+17cfb81\"   # label"), "{out}");
        assert!(out.contains("\"deep-ep ; platform_machine == 'x86_64'\",  # bare"), "{out}");

        // --arch aarch64 touches only aarch64's requirement and source
        let (out, _) = edit(text, Some(Arch::Aarch64)).unwrap();
        assert!(
            out.contains("DeepEP.git@aaaa ; platform_machine == 'x86_64'")
                && out.contains(&format!("DeepEP.git@{NEW} ; platform_machine == 'aarch64'")),
            "{out}"
        );
        assert!(out.contains("tag = \"v1\"") && !out.contains("rev = \"bbbb\""), "{out}");
    }

    #[test]
    fn arch_only_markers() {
        for (m, ok) in [
            ("platform_machine == 'x86_64'", true),
            ("platform_machine != 'aarch64'", true),
            ("sys_platform == 'linux' and platform_machine == 'aarch64'", true),
            ("platform_machine == 'x86_64' and python_version >= '3.12'", false),
            ("extra == 'moe'", false),
        ] {
            assert_eq!(arch_only(&MarkerTree::from_str(m).unwrap()), ok, "{m}");
        }
    }
}
