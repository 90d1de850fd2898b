//! DeepEP references in a consumer's pyproject.toml, with line numbers:
//! `project.dependencies`, `project.optional-dependencies.*`,
//! `dependency-groups.*`, `tool.uv.{override,constraint,dev}-dependencies`,
//! `tool.uv.sources` and `[[tool.uv.dependency-metadata]]`.
//! Reads with serde `toml` + `Spanned`; must not judge (see `rules`).
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use anyhow::Result;
use pep508_rs::{MarkerTree, PackageName, Requirement, VerbatimUrl, VersionOrUrl};
use serde::Deserialize;
use toml::Spanned;

use super::{GitRef, Kind, LineIndex, Reference};
use forge_model::marker;
use forge_os::error::Failure;

/// One place pyproject.toml keeps a list of requirement strings.
#[derive(Debug, Clone, Copy)]
pub struct RequirementField {
    /// The table holding the list (`["tool", "uv"]`).
    pub table: &'static [&'static str],
    /// The list's key in it; `None`: every key of the table is a list
    /// (`project.optional-dependencies.<extra>`, `dependency-groups.<group>`).
    pub key: Option<&'static str>,
    /// The dotted name messages give (`.<key>` appended when `key` is `None`).
    pub label: &'static str,
}

impl RequirementField {
    /// The place a list found under `key` of this field's table is named by.
    pub fn place(&self, key: &str) -> String {
        match self.key {
            Some(_) => self.label.to_string(),
            None => format!("{}.{key}", self.label),
        }
    }
}

/// Every place pyproject.toml keeps requirement strings, in the order they
/// are read and rewritten: the one table `lock check`, `pin set` and
/// `pin set --index` go through.
pub const REQUIREMENT_FIELDS: [RequirementField; 6] = [
    RequirementField { table: &["project"], key: Some("dependencies"), label: "project.dependencies" },
    RequirementField {
        table: &["project", "optional-dependencies"],
        key: None,
        label: "project.optional-dependencies",
    },
    RequirementField { table: &["dependency-groups"], key: None, label: "dependency-groups" },
    RequirementField {
        table: &["tool", "uv"],
        key: Some("override-dependencies"),
        label: "tool.uv.override-dependencies",
    },
    RequirementField {
        table: &["tool", "uv"],
        key: Some("constraint-dependencies"),
        label: "tool.uv.constraint-dependencies",
    },
    RequirementField { table: &["tool", "uv"], key: Some("dev-dependencies"), label: "tool.uv.dev-dependencies" },
];

/// What `lock check` and `pin set` need from pyproject.toml.
#[derive(Debug)]
pub struct Pyproject {
    pub project_name: Option<String>,
    pub refs: Vec<Reference>,
}

#[derive(Deserialize)]
struct Doc {
    project: Option<Project>,
    #[serde(rename = "dependency-groups", default)]
    dependency_groups: BTreeMap<String, Vec<Spanned<GroupItem>>>,
    tool: Option<Tool>,
}

impl Doc {
    /// The lists of requirement strings `field` names, each with its place.
    fn lists(&self, field: &RequirementField) -> Vec<(String, Vec<Spanned<String>>)> {
        let project = self.project.as_ref();
        let uv = self.tool.as_ref().and_then(|t| t.uv.as_ref());
        let one = |v: Option<&Vec<Spanned<String>>>| v.map(|v| vec![(field.place(""), v.clone())]).unwrap_or_default();
        match (field.table, field.key) {
            (["project"], Some("dependencies")) => one(project.map(|p| &p.dependencies)),
            (["project", "optional-dependencies"], None) => project
                .map(|p| p.optional_dependencies.iter().map(|(g, v)| (field.place(g), v.clone())).collect())
                .unwrap_or_default(),
            (["dependency-groups"], None) => {
                self.dependency_groups.iter().map(|(g, items)| (field.place(g), group_requirements(items))).collect()
            }
            (["tool", "uv"], Some("override-dependencies")) => one(uv.map(|u| &u.override_dependencies)),
            (["tool", "uv"], Some("constraint-dependencies")) => one(uv.map(|u| &u.constraint_dependencies)),
            (["tool", "uv"], Some("dev-dependencies")) => one(uv.map(|u| &u.dev_dependencies)),
            _ => unreachable!("{}: a requirement field the reader has no slot for", field.label),
        }
    }
}

/// The requirement strings of a dependency group (`include-group` entries hold none).
fn group_requirements(items: &[Spanned<GroupItem>]) -> Vec<Spanned<String>> {
    items
        .iter()
        .filter_map(|i| match i.get_ref() {
            GroupItem::Requirement(s) => Some(Spanned::new(i.span(), s.clone())),
            GroupItem::Include(_) => None,
        })
        .collect()
}

#[derive(Deserialize)]
struct Project {
    name: Option<String>,
    #[serde(default)]
    dependencies: Vec<Spanned<String>>,
    #[serde(rename = "optional-dependencies", default)]
    optional_dependencies: BTreeMap<String, Vec<Spanned<String>>>,
}

forge_model::toml_shapes!(
    /// A dependency-group item: a requirement string, or `{ include-group = "x" }`
    /// (refers to another group, holds no requirement).
    #[allow(dead_code)]
    enum GroupItem,
    "a requirement string such as \"torch>=2.9\" or a table such as { include-group = \"test\" }",
    { Requirement(String) if is_str, Include(toml::Table) if is_table }
);

#[derive(Deserialize)]
struct Tool {
    uv: Option<Uv>,
}

#[derive(Deserialize)]
struct Uv {
    #[serde(rename = "override-dependencies", default)]
    override_dependencies: Vec<Spanned<String>>,
    #[serde(rename = "constraint-dependencies", default)]
    constraint_dependencies: Vec<Spanned<String>>,
    #[serde(rename = "dev-dependencies", default)]
    dev_dependencies: Vec<Spanned<String>>,
    #[serde(default)]
    sources: BTreeMap<String, Spanned<Sources>>,
    #[serde(rename = "dependency-metadata", default)]
    dependency_metadata: Vec<Spanned<Metadata>>,
}

forge_model::toml_shapes!(
    /// `[tool.uv.sources]` entry: one source table, or a list of them.
    enum Sources,
    "a source table such as { git = \"https://github.com/x/y\", rev = \"<sha>\" }, or a list of such tables",
    { One(Source) if is_table, Many(Vec<Source>) if is_array }
);

#[derive(Deserialize)]
struct Source {
    git: Option<String>,
    rev: Option<String>,
    tag: Option<String>,
    branch: Option<String>,
    marker: Option<String>,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
    version: Option<Spanned<String>>,
}

/// The distribution name a PEP 508 string starts with (cheap: no full parse).
pub fn leading_name(req: &str) -> &str {
    let s = req.trim_start();
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))).unwrap_or(s.len());
    &s[..end]
}

/// `name` normalises to `target` (PEP 503: case, `-`, `_`, `.` runs).
pub fn is_name(name: &str, target: &PackageName) -> bool {
    PackageName::from_str(name).is_ok_and(|n| &n == target)
}

/// Parse a DeepEP requirement string fully (PEP 508), or fail naming file:line.
pub fn parse_requirement(req: &str, path: &Path, line: usize) -> Result<Requirement<VerbatimUrl>> {
    // pep508_rs 0.9 can panic slicing non-ASCII text (see `marker::parse`).
    if !req.is_ascii() {
        return Err(Failure::usage(format!(
            "{}:{line}: `{}` is not ASCII: a PEP 508 requirement is (percent-encode a URL)",
            path.display(),
            forge_os::input::excerpt(req, 60)
        ))
        .into());
    }
    Requirement::<VerbatimUrl>::from_str(req).map_err(|e| {
        Failure::usage(format!("{}:{line}: not a valid PEP 508 requirement: {e}", path.display()))
            .hint("fix the requirement string (e.g. `deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@<40-hex sha>`)")
            .into()
    })
}

/// The version of a `NAME==VERSION` requirement (one `==`/`===` specifier, no
/// wildcard): an index-sourced DeepEP's label.
fn exact_version(req: &Requirement<VerbatimUrl>) -> Option<String> {
    let Some(VersionOrUrl::VersionSpecifier(specs)) = &req.version_or_url else { return None };
    let [one] = specs.iter().collect::<Vec<_>>()[..] else { return None };
    let exact =
        matches!(one.operator(), pep508_rs::pep440_rs::Operator::Equal | pep508_rs::pep440_rs::Operator::ExactEqual);
    exact.then(|| one.version().to_string())
}

/// Read pyproject.toml text (`path` for messages and findings).
pub fn read(path: &Path, text: &str, name: &PackageName) -> Result<Pyproject> {
    let doc: Doc = toml::from_str(text).map_err(|e| super::toml_error(path, text, e, "pyproject.toml"))?;
    let ix = LineIndex::new(text);
    let mut refs = Vec::new();
    let reqs = |items: &[Spanned<String>], place: String, refs: &mut Vec<Reference>| -> Result<()> {
        for item in items {
            if !is_name(leading_name(item.get_ref()), name) {
                continue;
            }
            let line = ix.line(item.span().start);
            let req = parse_requirement(item.get_ref(), path, line)?;
            let git = match &req.version_or_url {
                Some(VersionOrUrl::Url(u)) => GitRef::from_pep508_url(u.given().unwrap_or(u.as_str())),
                _ => None,
            };
            refs.push(Reference {
                kind: Kind::Requirement,
                file: path.to_path_buf(),
                line,
                col: ix.col(text, item.span().start),
                place: place.clone(),
                archs: marker::archs(&req.marker, &MarkerTree::TRUE),
                git,
                version: exact_version(&req),
                owner: None,
            });
        }
        Ok(())
    };
    for field in &REQUIREMENT_FIELDS {
        for (place, items) in doc.lists(field) {
            reqs(&items, place, &mut refs)?;
        }
    }
    if let Some(uv) = doc.tool.and_then(|t| t.uv) {
        for (key, spec) in &uv.sources {
            if !is_name(key, name) {
                continue;
            }
            let span = spec.span();
            let entries: Vec<&Source> = match spec.get_ref() {
                Sources::One(s) => vec![s],
                Sources::Many(v) => v.iter().collect(),
            };
            for s in entries {
                let Some(repo) = &s.git else { continue };
                let rev = s.rev.clone().or_else(|| s.tag.clone()).or_else(|| s.branch.clone());
                // The entry's own line: where its rev (else its URL) is written inside the sources value.
                let needle = rev.as_deref().unwrap_or(repo);
                let at = text[span.clone()].find(needle).map(|o| span.start + o).unwrap_or(span.start);
                let line = ix.line(at);
                let m = match &s.marker {
                    Some(m) => marker::parse(m).map_err(|e| {
                        Failure::usage(format!("{}:{line}: tool.uv.sources.{key}: invalid marker: {e}", path.display()))
                    })?,
                    None => MarkerTree::TRUE,
                };
                refs.push(Reference {
                    kind: Kind::Source,
                    file: path.to_path_buf(),
                    line,
                    col: ix.col(text, at),
                    place: format!("tool.uv.sources.{key}"),
                    archs: marker::archs(&m, &MarkerTree::TRUE),
                    git: Some(GitRef { repo: repo.clone(), rev, commit: None }),
                    version: None,
                    owner: None,
                });
            }
        }
        for m in &uv.dependency_metadata {
            let meta = m.get_ref();
            if !is_name(&meta.name, name) {
                continue;
            }
            let Some(v) = &meta.version else { continue };
            refs.push(Reference {
                kind: Kind::Label,
                file: path.to_path_buf(),
                line: ix.line(v.span().start),
                col: ix.col(text, v.span().start),
                place: "[[tool.uv.dependency-metadata]] version".into(),
                // No marker: one static label serves every architecture.
                archs: forge_model::pins::Arch::ALL.to_vec(),
                git: None,
                version: Some(v.get_ref().clone()),
                owner: None,
            });
        }
    }
    Ok(Pyproject { project_name: doc.project.and_then(|p| p.name), refs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_model::pins::Arch;

    #[test]
    fn every_requirement_field_is_read() {
        let text = "[project]\ndependencies = [\"a\"]\n[project.optional-dependencies]\nx = [\"b\"]\n[dependency-groups]\ng = [\"c\", { include-group = \"x\" }]\n[tool.uv]\noverride-dependencies = [\"d\"]\nconstraint-dependencies = [\"e\"]\ndev-dependencies = [\"f\"]\n";
        let doc: Doc = toml::from_str(text).unwrap();
        let places: Vec<(String, usize)> =
            REQUIREMENT_FIELDS.iter().flat_map(|f| doc.lists(f)).map(|(p, v)| (p, v.len())).collect();
        let want = [
            "project.dependencies",
            "project.optional-dependencies.x",
            "dependency-groups.g",
            "tool.uv.override-dependencies",
            "tool.uv.constraint-dependencies",
            "tool.uv.dev-dependencies",
        ];
        assert_eq!(places, want.iter().map(|p| (p.to_string(), 1)).collect::<Vec<_>>());
    }

    fn deep_ep() -> PackageName {
        PackageName::from_str("deep_ep").unwrap()
    }

    #[test]
    fn names_normalise() {
        for n in ["deep_ep", "deep-ep", "Deep.EP", "DEEP__EP"] {
            assert!(is_name(n, &deep_ep()), "{n}");
        }
        assert!(!is_name("deep_gemm", &deep_ep()));
        assert_eq!(leading_name("  deep_ep[x] @ git+x"), "deep_ep");
        assert_eq!(leading_name("deep-ep>=1"), "deep-ep");
    }

    #[test]
    fn finds_every_place_with_lines_and_archs() {
        let text = r#"[project]
name = "consumer"
dependencies = ["numpy", "Deep-EP"]
[project.optional-dependencies]
moe = [
  "deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa ; platform_machine == 'x86_64'",
  "deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb ; platform_machine == 'aarch64' and extra == 'moe'",
]
[dependency-groups]
dev = [{ include-group = "x" }, "deep.ep ; python_version < '3.0'"]
[tool.uv]
override-dependencies = ["deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]
[tool.uv.sources]
deep_ep = [
  { git = "https://github.com/deepseek-ai/DeepEP.git", rev = "cccccccccccccccccccccccccccccccccccccccc", marker = "platform_machine == 'x86_64'" },
]
[[tool.uv.dependency-metadata]]
name = "deep-ep"
version = "v1.2.1+aaaaaaa"
"#;
        let p = read(Path::new("pyproject.toml"), text, &deep_ep()).unwrap();
        assert_eq!(p.project_name.as_deref(), Some("consumer"));
        type Row<'a> = (Kind, usize, &'a str, Vec<Arch>, Option<&'a str>);
        let got: Vec<Row> = p
            .refs
            .iter()
            .map(|r| (r.kind, r.line, r.place.as_str(), r.archs.clone(), r.git.as_ref().and_then(|g| g.rev.as_deref())))
            .collect();
        let a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let both = Arch::ALL.to_vec();
        assert_eq!(
            got,
            vec![
                (Kind::Requirement, 3, "project.dependencies", both.clone(), None),
                (Kind::Requirement, 6, "project.optional-dependencies.moe", vec![Arch::X86_64], Some(a)),
                (
                    Kind::Requirement,
                    7,
                    "project.optional-dependencies.moe",
                    vec![Arch::Aarch64],
                    Some("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
                ),
                (Kind::Requirement, 10, "dependency-groups.dev", both.clone(), None),
                (Kind::Requirement, 12, "tool.uv.override-dependencies", both.clone(), Some(a)),
                (
                    Kind::Source,
                    15,
                    "tool.uv.sources.deep_ep",
                    vec![Arch::X86_64],
                    Some("cccccccccccccccccccccccccccccccccccccccc")
                ),
                (Kind::Label, 19, "[[tool.uv.dependency-metadata]] version", both, None),
            ]
        );
    }

    #[test]
    fn malformed_input_names_file_and_line() {
        let e = read(Path::new("p/pyproject.toml"), "[project]\ndependencies = [\"x\",\n", &deep_ep()).unwrap_err();
        assert!(format!("{e:#}").contains("p/pyproject.toml:"), "{e:#}");
        let e = read(
            Path::new("pyproject.toml"),
            "[project]\ndependencies = [\n\"deep_ep @ git+https://x/y.git@a ; platform_machine ==\"]\n",
            &deep_ep(),
        )
        .unwrap_err();
        let s = format!("{e:#}");
        assert!(s.contains("pyproject.toml:3: not a valid PEP 508 requirement"), "{s}");
        assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Usage);
    }
}
