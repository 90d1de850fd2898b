//! DeepEP from a package index (`pin set --index`), as a consumer's files say
//! it: the `[tool.uv.sources]` entry naming an index, that index's URL from
//! `[[tool.uv.index]]`, and every deep-ep wheel uv.lock pins (file name,
//! sha256, line). Parsed with serde `toml` + `Spanned`. Must not judge.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use pep508_rs::PackageName;
use serde::Deserialize;
use toml::Spanned;

use super::pyproject::is_name;
use super::LineIndex;

/// An index-sourced DeepEP.
#[derive(Debug, Clone)]
pub struct IndexSource {
    /// The index name in `[tool.uv.sources]`.
    pub name: String,
    /// Its URL from `[[tool.uv.index]]`, if declared.
    pub url: Option<String>,
    /// The variant the URL names (`<base>/<variant>/simple`).
    pub variant: Option<String>,
    pub line: usize,
}

/// One deep-ep wheel uv.lock pins.
#[derive(Debug, Clone)]
pub struct LockedWheel {
    pub file: String,
    pub sha256: Option<String>,
    pub line: usize,
    /// `x86_64` / `aarch64` from the wheel's platform tag.
    pub arch: Option<String>,
    /// The Python minor of its `cpXY` tag (`3.12`); None for another tag.
    pub python: Option<String>,
    /// The index uv.lock resolved it from (`source = { registry = ... }`).
    pub registry: Option<String>,
}

/// uv.lock's deep-ep wheels and the `requires-python` it was resolved for.
#[derive(Debug, Clone, Default)]
pub struct LockedWheels {
    pub wheels: Vec<LockedWheel>,
    /// The lock's top-level `requires-python` (`>=3.11, <3.14`).
    pub requires_python: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Py {
    tool: Option<Tool>,
}
#[derive(Debug, Deserialize)]
struct Tool {
    uv: Option<Uv>,
}
#[derive(Debug, Deserialize)]
struct Uv {
    #[serde(default)]
    sources: BTreeMap<String, Spanned<toml::Value>>,
    #[serde(default)]
    index: Vec<IndexDecl>,
}
#[derive(Debug, Deserialize)]
struct IndexDecl {
    name: Option<String>,
    url: Option<String>,
}

/// The index source of DeepEP in pyproject.toml, if it has one.
pub fn source(path: &Path, text: &str, name: &PackageName) -> Result<Option<IndexSource>> {
    let py: Py = toml::from_str(text).map_err(|e| super::toml_error(path, text, e, "pyproject.toml"))?;
    let Some(uv) = py.tool.and_then(|t| t.uv) else { return Ok(None) };
    let ix = LineIndex::new(text);
    for (k, v) in &uv.sources {
        if !is_name(k, name) {
            continue;
        }
        let entries: Vec<&toml::Value> = match v.get_ref() {
            toml::Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        let Some(index) = entries.iter().find_map(|e| e.get("index").and_then(toml::Value::as_str)) else {
            continue;
        };
        let url = uv.index.iter().find(|d| d.name.as_deref() == Some(index)).and_then(|d| d.url.clone());
        let variant = url.as_deref().and_then(variant_of_url);
        return Ok(Some(IndexSource { name: index.to_string(), url, variant, line: ix.line(v.span().start) }));
    }
    Ok(None)
}

/// `<base>/<variant>/simple[/]` -> variant.
pub fn variant_of_url(url: &str) -> Option<String> {
    let mut segs = url.trim_end_matches('/').rsplit('/');
    (segs.next()? == "simple").then(|| segs.next().map(String::from)).flatten()
}

/// `<DIR or base>/<variant>/index.json` of an index URL.
pub fn manifest_url(url: &str) -> Option<String> {
    url.trim_end_matches('/').strip_suffix("/simple").map(|b| format!("{b}/index.json"))
}

#[derive(Debug, Deserialize)]
struct Lock {
    #[serde(rename = "requires-python")]
    requires_python: Option<String>,
    #[serde(default)]
    package: Vec<Spanned<Package>>,
}
#[derive(Debug, Deserialize)]
struct Package {
    name: String,
    #[serde(default)]
    wheels: Vec<Spanned<Wheel>>,
    source: Option<PackageSource>,
}
#[derive(Debug, Deserialize)]
struct PackageSource {
    registry: Option<String>,
}
#[derive(Debug, Deserialize)]
struct Wheel {
    url: Option<String>,
    /// A wheel of a local (`file://`) index: uv writes its path, not a URL.
    path: Option<String>,
    filename: Option<String>,
    hash: Option<String>,
}

/// A wheel's file name: the last segment of its URL or path, percent-decoded
/// (`deep_ep-1.2.1%2B0bfa6c2-...whl` is `deep_ep-1.2.1+0bfa6c2-...whl`); `None` when empty.
fn last_segment(u: &str) -> Option<String> {
    let last = u.split(['?', '#']).next().unwrap_or_default().rsplit('/').next()?;
    (!last.is_empty()).then(|| forge_store::index::manifest::percent_decode(last))
}

/// Every deep-ep wheel in uv.lock, and the lock's `requires-python`.
pub fn locked_wheels(path: &Path, text: &str, name: &PackageName) -> Result<LockedWheels> {
    let lock: Lock = toml::from_str(text).map_err(|e| super::toml_error(path, text, e, "uv.lock"))?;
    let ix = LineIndex::new(text);
    let mut out = Vec::new();
    for p in lock.package.iter().filter(|p| is_name(&p.get_ref().name, name)) {
        for w in &p.get_ref().wheels {
            let wr = w.get_ref();
            let file = wr
                .filename
                .clone()
                .or_else(|| wr.url.as_deref().or(wr.path.as_deref()).and_then(last_segment))
                .unwrap_or_default();
            let parsed = forge_wheel::wheel::WheelName::parse(&file);
            let arch = parsed
                .as_ref()
                .and_then(|n| ["x86_64", "aarch64"].into_iter().find(|a| n.platform.ends_with(a)).map(String::from));
            let python = parsed.as_ref().and_then(forge_wheel::wheel::WheelName::cpython_minor);
            let sha256 = wr.hash.as_deref().and_then(|h| h.strip_prefix("sha256:")).map(String::from);
            let registry = p.get_ref().source.as_ref().and_then(|s| s.registry.clone());
            out.push(LockedWheel { file, sha256, line: ix.line(w.span().start), arch, python, registry });
        }
    }
    Ok(LockedWheels { wheels: out, requires_python: lock.requires_python })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_variant_and_manifest() {
        assert_eq!(variant_of_url("http://127.0.0.1:8/demo/simple").as_deref(), Some("demo"));
        assert_eq!(variant_of_url("https://h/x/demo/simple/").as_deref(), Some("demo"));
        assert_eq!(variant_of_url("https://pypi.org/pypi"), None);
        assert_eq!(manifest_url("https://h/x/demo/simple").as_deref(), Some("https://h/x/demo/index.json"));
    }

    /// A wheel of a `file://` index (uv writes a `path`) or an http one (a `url`): its
    /// name is decoded, never empty in messages.
    #[test]
    fn locked_wheel_names_come_from_urls_and_paths_decoded() {
        let lock = r#"
version = 1
requires-python = ">=3.12"

[[package]]
name = "deep-ep"
version = "1.2.1+0bfa6c2"
source = { registry = "file:///srv/idx/demo/simple" }
wheels = [
    { path = "deep_ep-1.2.1%2B0bfa6c2-cp312-cp312-linux_x86_64.whl", hash = "sha256:aa" },
    { url = "http://127.0.0.1:8/demo/simple/deep-ep/deep_ep-1.2.1%2B0bfa6c2-cp312-cp312-linux_aarch64.whl", hash = "sha256:bb" },
]
"#;
        let name = PackageName::new("deep-ep".into()).unwrap();
        let w = locked_wheels(Path::new("uv.lock"), lock, &name).unwrap().wheels;
        let files: Vec<&str> = w.iter().map(|w| w.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "deep_ep-1.2.1+0bfa6c2-cp312-cp312-linux_x86_64.whl",
                "deep_ep-1.2.1+0bfa6c2-cp312-cp312-linux_aarch64.whl"
            ]
        );
        assert_eq!(w[0].arch.as_deref(), Some("x86_64"));
        assert_eq!(last_segment("file:///a/"), None);
    }
}
