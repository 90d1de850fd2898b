//! DeepEP references in uv.lock, with line numbers: `[manifest]` overrides,
//! constraints and dependency-metadata, every `[[package]]` named deep-ep
//! (source `?rev=` and `#commit`, version), other packages' dependency
//! entries on it, and `requires-dist` (the project's own, or a third party's
//! own DeepEP pin). Must not judge (see `rules`).
//!
//! Fast path: uv writes one `[[package]]` table per package and no multi-line
//! strings, so only the header (conflicts, manifest) and the package tables
//! whose text names deep-ep are parsed; the rest (wheel lists, hashes: ~95%
//! of the file) is skipped unparsed, so a syntax error there is left to uv. Anything unexpected (a multi-line
//! string, a manifest after the packages, a table that does not parse alone)
//! falls back to parsing the whole file, which also gives exact error positions.
//! A parsed table of exactly uv's shape has its list elements that do not name
//! deep-ep blanked first (`lockgraph::thin_block`: offsets kept, same result).
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use anyhow::Result;
use pep508_rs::{MarkerTree, PackageName};
use serde::Deserialize;
use toml::Spanned;

use super::pyproject::is_name;
use super::{GitRef, Kind, LineIndex, Reference};
use forge_model::marker::{self, ConflictItem};
use forge_model::pins::Arch;
use forge_os::error::Failure;

/// What `lock check` needs from uv.lock.
#[derive(Debug)]
pub struct UvLock {
    pub refs: Vec<Reference>,
    /// Architectures for which `[manifest] overrides` replace deep-ep.
    pub overridden: Vec<Arch>,
    /// The locked packages DeepEP's compiled code meets at run time (torch,
    /// `nvidia-nvshmem-cu*`, `nvidia-nccl-cu*`), each with where and for which architectures.
    pub environment: Vec<EnvPackage>,
}

/// One locked `[[package]]` of [`ENV_PACKAGES`].
#[derive(Debug, Clone)]
pub struct EnvPackage {
    /// Normalised name (`torch`, `nvidia-nccl-cu13`).
    pub name: String,
    pub version: String,
    pub line: usize,
    pub col: usize,
    /// Where its `resolution-markers` can hold (all architectures when it has none).
    pub archs: Vec<Arch>,
}

/// Names (or name prefixes ending in `-cu`) of the packages [`environment`] reads.
pub const ENV_PACKAGES: [&str; 3] = ["torch", "nvidia-nvshmem-cu", "nvidia-nccl-cu"];
/// Most such tables read (a real lock has a handful: one per resolution fork).
pub const MAX_ENV_PACKAGES: usize = 64;

fn is_env_package(name: &str) -> bool {
    name == "torch"
        || ENV_PACKAGES[1..].iter().any(|p| {
            name.strip_prefix(p).is_some_and(|m| !m.is_empty() && m.len() <= 3 && m.bytes().all(|b| b.is_ascii_digit()))
        })
}

#[derive(Deserialize)]
struct EnvLock {
    #[serde(default)]
    package: Vec<EnvPkg>,
}

#[derive(Deserialize)]
struct EnvPkg {
    name: Spanned<String>,
    version: Option<String>,
    #[serde(rename = "resolution-markers", default)]
    resolution_markers: Vec<String>,
}

/// The [`ENV_PACKAGES`] tables of uv.lock: only `[[package]]` tables whose first key
/// names one are parsed (each alone; the whole file when one does not parse alone),
/// at most [`MAX_ENV_PACKAGES`].
/// Where the project's dependency edges reach (`forge_model::lockgraph`) narrows each table's
/// architectures.
pub fn environment(path: &Path, text: &str, project: Option<&str>) -> Result<Vec<EnvPackage>> {
    environment_at(path, text, project, &LineIndex::new(text))
}

/// [`environment`] with the lines of `text` already indexed.
fn environment_at(path: &Path, text: &str, project: Option<&str>, ix: &LineIndex) -> Result<Vec<EnvPackage>> {
    let starts: Vec<usize> =
        memchr::memmem::find_iter(text.as_bytes(), b"\n[[package]]\nname = \"").map(|i| i + 1).collect();
    let mut parts: Vec<(usize, EnvLock)> = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let head = &text[s + "[[package]]\nname = \"".len()..];
        let name = head.split('"').next().unwrap_or_default();
        if !is_env_package(name) {
            continue;
        }
        if parts.len() == MAX_ENV_PACKAGES {
            return Err(Failure::usage(format!(
                "{}: more than {MAX_ENV_PACKAGES} torch/nvidia-nvshmem/nvidia-nccl package tables",
                path.display()
            ))
            .hint("regenerate the lock with `uv lock`")
            .into());
        }
        let end = starts.get(k + 1).copied().unwrap_or(text.len());
        match toml::from_str::<EnvLock>(&text[s..end]) {
            Ok(l) => parts.push((s, l)),
            Err(_) => {
                let lock: EnvLock = toml::from_str(text)
                    .map_err(|e| super::toml_error(path, text, e, "uv.lock (or regenerate it with `uv lock`)"))?;
                parts = vec![(0, lock)];
                break;
            }
        }
    }
    let reach = if parts.is_empty() { None } else { Some(forge_model::lockgraph::reach(path, text, project)?) };
    let mut out = Vec::new();
    for (off, p) in parts.iter().flat_map(|(o, l)| l.package.iter().map(move |p| (*o, p))) {
        let (Some(version), true) = (&p.version, is_env_package(p.name.get_ref())) else { continue };
        let line = ix.line(off + p.name.span().start);
        let mut m = if p.resolution_markers.is_empty() { MarkerTree::TRUE } else { MarkerTree::FALSE };
        for rm in &p.resolution_markers {
            m.or(parse_marker(Some(rm), path, line)?);
        }
        out.push(EnvPackage {
            name: p.name.get_ref().clone(),
            version: version.clone(),
            line,
            col: ix.col(text, off + p.name.span().start),
            archs: reached(marker::archs(&m, &MarkerTree::TRUE), reach.as_ref(), p.name.get_ref(), version),
        });
    }
    Ok(out)
}

/// `archs` narrowed to where the project's edges reach the table (unchanged without a graph).
fn reached(archs: Vec<Arch>, reach: Option<&forge_model::lockgraph::Reach>, name: &str, version: &str) -> Vec<Arch> {
    match reach {
        None => archs,
        Some(r) => {
            let on = r.archs(name, version);
            archs.into_iter().filter(|a| on.contains(a)).collect()
        }
    }
}

#[derive(Deserialize)]
struct Lock {
    /// uv's lockfile format version (`version = 1`): every uv.lock starts with it.
    version: Option<toml::Value>,
    #[serde(default)]
    conflicts: Vec<Vec<ConflictEntry>>,
    manifest: Option<Manifest>,
    #[serde(default)]
    package: Vec<Package>,
}

#[derive(Deserialize)]
struct ConflictEntry {
    package: Option<String>,
    extra: Option<String>,
    group: Option<String>,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    members: Vec<String>,
    #[serde(default)]
    overrides: Vec<Spanned<LockReq>>,
    #[serde(default)]
    constraints: Vec<Spanned<LockReq>>,
    #[serde(rename = "dependency-metadata", default)]
    dependency_metadata: Vec<Spanned<LockMeta>>,
}

#[derive(Deserialize)]
struct LockReq {
    name: String,
    marker: Option<String>,
    git: Option<String>,
}

#[derive(Deserialize)]
struct LockMeta {
    name: String,
    version: Option<Spanned<String>>,
}

#[derive(Deserialize)]
struct Package {
    name: Spanned<String>,
    version: Option<String>,
    source: Option<Spanned<PkgSource>>,
    #[serde(rename = "resolution-markers", default)]
    resolution_markers: Vec<String>,
    #[serde(default)]
    dependencies: Vec<Spanned<LockDep>>,
    #[serde(rename = "optional-dependencies", default)]
    optional_dependencies: BTreeMap<String, Vec<Spanned<LockDep>>>,
    #[serde(rename = "dev-dependencies", default)]
    dev_dependencies: BTreeMap<String, Vec<Spanned<LockDep>>>,
    metadata: Option<PkgMeta>,
}

#[derive(Deserialize)]
struct PkgSource {
    git: Option<String>,
    editable: Option<String>,
    #[serde(rename = "virtual")]
    virtual_: Option<String>,
}

#[derive(Deserialize)]
struct LockDep {
    name: String,
    version: Option<String>,
    source: Option<PkgSource>,
    marker: Option<String>,
}

#[derive(Deserialize)]
struct PkgMeta {
    #[serde(rename = "requires-dist", default)]
    requires_dist: Vec<Spanned<LockReq>>,
    #[serde(rename = "requires-dev", default)]
    requires_dev: BTreeMap<String, Vec<Spanned<LockReq>>>,
}

fn parse_marker(m: Option<&str>, path: &Path, line: usize) -> Result<MarkerTree> {
    match m {
        None => Ok(MarkerTree::TRUE),
        Some(s) => forge_model::marker::parse(s).map_err(|e| {
            Failure::usage(format!("{}:{line}: invalid marker: {e}", path.display()))
                .hint("regenerate the lock with `uv lock`")
                .into()
        }),
    }
}

/// Parse the parts of uv.lock that can mention `name`, each with its byte offset (see the module doc).
fn parse_parts(path: &Path, text: &str, name: &PackageName) -> Result<Vec<(usize, Lock)>> {
    let full = || -> Result<Vec<(usize, Lock)>> {
        let lock = toml::from_str(text)
            .map_err(|e| super::toml_error(path, text, e, "uv.lock (or regenerate it with `uv lock`)"))?;
        Ok(vec![(0, lock)])
    };
    let starts: Vec<usize> = memchr::memmem::find_iter(text.as_bytes(), b"\n[[package]]\n").map(|i| i + 1).collect();
    let Some(&first) = starts.first() else { return full() };
    let body = &text[first..];
    let has = |t: &str, n: &str| memchr::memmem::find(t.as_bytes(), n.as_bytes()).is_some();
    if has(text, "\"\"\"") || has(text, "'''") || has(body, "\n[manifest") || has(body, "\n[[manifest") {
        return full();
    }
    // The bare normalised name: also catches a mangled `name = deep-ep`, so it gets parsed and reported.
    let needle = name.to_string();
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut out = Vec::new();
    let blocks =
        starts.iter().enumerate().map(|(k, &s)| (s, &text[s..starts.get(k + 1).copied().unwrap_or(text.len())]));
    for (off, part) in
        std::iter::once((0, &text[..first])).chain(blocks.filter(|(_, b)| finder.find(b.as_bytes()).is_some()))
    {
        // A table of uv's shape with the list elements that do not name the package blanked
        // (same offsets; the project's own table is ~10% of NeMo-RL's lock, nearly all other names).
        let thin = if off == 0 { None } else { forge_model::lockgraph::thin_block(part, &needle) };
        match toml::from_str::<Lock>(thin.as_deref().unwrap_or(part)) {
            Ok(l) => out.push((off, l)),
            Err(_) => return full(),
        }
    }
    Ok(out)
}

/// Read uv.lock text. `project` is the pyproject's own name (its requires-dist
/// is the project's intent, not a transitive pin).
// Over 120 lines: one pass over the lock's tables in the order uv writes them
// (header, conflicts, manifest, packages); each step feeds the next (the
// conflict sets decide which packages count per architecture), so it reads top
// to bottom as one walk of the file.
pub fn read(path: &Path, text: &str, name: &PackageName, project: Option<&str>) -> Result<UvLock> {
    if text.trim().is_empty() {
        return Err(Failure::usage(format!("{} is empty: not a uv lockfile", path.display()))
            .hint("regenerate it with `uv lock`, or delete it to check pyproject.toml alone")
            .into());
    }
    let parts = parse_parts(path, text, name)?;
    check_header(path, &parts)?;
    let mut r = Reader {
        path,
        text,
        name,
        ix: LineIndex::new(text),
        allowed: marker::conflicts_allowed(&conflict_sets(&parts, project)),
        refs: Vec::new(),
        overridden: Vec::new(),
    };
    let manifest = parts.iter().find_map(|(o, l)| l.manifest.as_ref().map(|m| (*o, m)));
    let members: Vec<String> = manifest.map(|(_, m)| m.members.clone()).unwrap_or_default();
    let packages: Vec<(usize, &Package)> =
        parts.iter().flat_map(|(o, l)| l.package.iter().map(move |p| (*o, p))).collect();
    if let Some((off, m)) = manifest {
        r.manifest(off, m)?;
    }
    // The locked deep-ep packages first: dependents are resolved against them.
    let locked = r.locked(&packages)?;
    for (off, p) in &packages {
        r.dependents(*off, p, &locked)?;
        let owner = p.name.get_ref();
        let own = members.iter().any(|m| m == owner)
            || project.is_some_and(|pr| PackageName::from_str(pr).is_ok_and(|pr| pr.as_ref() == owner))
            || p.source
                .as_ref()
                .map(Spanned::get_ref)
                .is_some_and(|s| s.editable.as_deref() == Some(".") || s.virtual_.as_deref() == Some("."));
        r.requires(*off, p, own)?;
    }
    let Reader { refs, mut overridden, ix, .. } = r;
    overridden.sort();
    overridden.dedup();
    let environment = environment_at(path, text, project, &ix)?;
    Ok(UvLock { refs, overridden, environment })
}

/// uv's lockfile header: an integer `version = N` in some part.
fn check_header(path: &Path, parts: &[(usize, Lock)]) -> Result<()> {
    match parts.iter().find_map(|(_, l)| l.version.as_ref()) {
        Some(toml::Value::Integer(_)) => Ok(()),
        Some(other) => Err(Failure::usage(format!(
            "{}: `version = {other}` is not uv's lockfile header (expected an integer, e.g. `version = 1`)",
            path.display()
        ))
        .hint("regenerate it with `uv lock`")
        .into()),
        None => Err(Failure::usage(format!("{} has no `version = N` header: not a lockfile uv wrote", path.display()))
            .hint("regenerate it with `uv lock`, or delete it to check pyproject.toml alone")
            .into()),
    }
}

/// The lock's `conflicts` sets, each item with its package (the project's when unnamed).
fn conflict_sets(parts: &[(usize, Lock)], project: Option<&str>) -> Vec<Vec<(String, ConflictItem)>> {
    parts
        .iter()
        .flat_map(|(_, l)| &l.conflicts)
        .map(|set| {
            set.iter()
                .filter_map(|c| {
                    let item = match (&c.extra, &c.group) {
                        (Some(e), _) => ConflictItem::Extra(e.clone()),
                        (None, Some(g)) => ConflictItem::Group(g.clone()),
                        _ => return None,
                    };
                    Some((c.package.clone().or_else(|| project.map(str::to_string))?, item))
                })
                .collect()
        })
        .collect()
}

/// A locked deep-ep package: (git source, version, archs).
type Locked = (Option<String>, Option<String>, Vec<Arch>);

/// Reading the DeepEP references out of a parsed lock, collecting them.
struct Reader<'a> {
    path: &'a Path,
    text: &'a str,
    name: &'a PackageName,
    ix: LineIndex,
    /// Where uv's conflict markers can hold.
    allowed: MarkerTree,
    refs: Vec<Reference>,
    overridden: Vec<Arch>,
}

impl Reader<'_> {
    /// Line and column of byte `at`.
    fn pos(&self, at: usize) -> (usize, usize) {
        (self.ix.line(at), self.ix.col(self.text, at))
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        kind: Kind,
        (line, col): (usize, usize),
        place: String,
        archs: Vec<Arch>,
        git: Option<GitRef>,
        version: Option<String>,
        owner: Option<String>,
    ) {
        let file = self.path.to_path_buf();
        self.refs.push(Reference { kind, file, line, col, place, archs, git, version, owner });
    }

    /// `[manifest]` overrides, constraints and dependency-metadata naming DeepEP.
    fn manifest(&mut self, off: usize, m: &Manifest) -> Result<()> {
        for (list, what) in [(&m.overrides, "overrides"), (&m.constraints, "constraints")] {
            for r in list.iter().filter(|r| is_name(&r.get_ref().name, self.name)) {
                let pos = self.pos(off + r.span().start);
                let archs =
                    marker::archs(&parse_marker(r.get_ref().marker.as_deref(), self.path, pos.0)?, &self.allowed);
                if what == "overrides" {
                    self.overridden.extend(archs.iter().copied());
                }
                let git = r.get_ref().git.as_deref().map(GitRef::from_lock_url);
                self.push(Kind::LockManifest, pos, format!("[manifest] {what}"), archs, git, None, None);
            }
        }
        for md in m.dependency_metadata.iter().filter(|d| is_name(&d.get_ref().name, self.name)) {
            let Some(v) = &md.get_ref().version else { continue };
            let pos = self.pos(off + v.span().start);
            let place = "[[manifest.dependency-metadata]] version".into();
            self.push(Kind::LockLabel, pos, place, Arch::ALL.to_vec(), None, Some(v.get_ref().clone()), None);
        }
        Ok(())
    }

    /// The locked deep-ep packages, each a reference; returned for their dependents.
    fn locked(&mut self, packages: &[(usize, &Package)]) -> Result<Vec<Locked>> {
        let mut locked = Vec::new();
        for (off, p) in packages.iter().filter(|(_, p)| is_name(p.name.get_ref(), self.name)) {
            let pos = self.pos(off + p.name.span().start);
            let mut m = if p.resolution_markers.is_empty() { MarkerTree::TRUE } else { MarkerTree::FALSE };
            for rm in &p.resolution_markers {
                m.or(parse_marker(Some(rm), self.path, pos.0)?);
            }
            let archs = marker::archs(&m, &MarkerTree::TRUE);
            let git_url = p.source.as_ref().and_then(|s| s.get_ref().git.clone());
            locked.push((git_url.clone(), p.version.clone(), archs.clone()));
            let git = git_url.as_deref().map(GitRef::from_lock_url);
            // A git source is reported at its `source = ...` line (the line that names the commit).
            let pos = match p.source.as_ref().filter(|s| s.get_ref().git.is_some()) {
                Some(s) => self.pos(off + s.span().start),
                None => pos,
            };
            self.push(Kind::LockPackage, pos, "[[package]] deep-ep".into(), archs, git, p.version.clone(), None);
        }
        Ok(locked)
    }

    /// `p`'s dependency entries naming DeepEP (dependencies, optional and dev).
    fn dependents(&mut self, off: usize, p: &Package, locked: &[Locked]) -> Result<()> {
        let owner = p.name.get_ref();
        let lists = std::iter::once(("dependencies".to_string(), &p.dependencies))
            .chain(p.optional_dependencies.iter().map(|(k, v)| (format!("optional-dependencies.{k}"), v)))
            .chain(p.dev_dependencies.iter().map(|(k, v)| (format!("dev-dependencies.{k}"), v)));
        for (list, deps) in lists {
            for d in deps.iter().filter(|d| is_name(&d.get_ref().name, self.name)) {
                let dep = d.get_ref();
                let pos = self.pos(off + d.span().start);
                let git_url = dep.source.as_ref().and_then(|s| s.git.clone());
                // The entry applies where its marker can hold AND the package it names was resolved.
                let target: Vec<Arch> = match locked.iter().find(|(g, v, _)| {
                    (git_url.is_some() && *g == git_url)
                        || (git_url.is_none() && dep.version.is_some() && *v == dep.version)
                }) {
                    Some((_, _, a)) => a.clone(),
                    None if locked.len() == 1 => locked[0].2.clone(),
                    None => Arch::ALL.to_vec(),
                };
                let archs: Vec<Arch> =
                    marker::archs(&parse_marker(dep.marker.as_deref(), self.path, pos.0)?, &self.allowed)
                        .into_iter()
                        .filter(|a| target.contains(a))
                        .collect();
                let git = git_url.as_deref().map(GitRef::from_lock_url);
                let place = format!("{owner} {list}");
                self.push(Kind::LockDependent, pos, place, archs, git, dep.version.clone(), Some(owner.clone()));
            }
        }
        Ok(())
    }

    /// `p`'s metadata requirements naming DeepEP: the project's own (`own`) or a transitive one.
    fn requires(&mut self, off: usize, p: &Package, own: bool) -> Result<()> {
        let owner = p.name.get_ref();
        let Some(meta) = &p.metadata else { return Ok(()) };
        let lists = std::iter::once(("requires-dist".to_string(), &meta.requires_dist))
            .chain(meta.requires_dev.iter().map(|(k, v)| (format!("requires-dev.{k}"), v)));
        for (list, reqs) in lists {
            for r in reqs.iter().filter(|r| is_name(&r.get_ref().name, self.name)) {
                let pos = self.pos(off + r.span().start);
                // requires-dist markers use plain extra names: no uv conflict encoding.
                let archs =
                    marker::archs(&parse_marker(r.get_ref().marker.as_deref(), self.path, pos.0)?, &MarkerTree::TRUE);
                let kind = if own { Kind::LockRequiresDist } else { Kind::LockTransitive };
                let git = r.get_ref().git.as_deref().map(GitRef::from_lock_url);
                self.push(kind, pos, format!("{owner} {list}"), archs, git, None, Some(owner.clone()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(text: &str) -> String {
        let name = PackageName::from_str("deep_ep").unwrap();
        format!("{:?}", read(Path::new("uv.lock"), text, &name, Some("consumer")).unwrap())
    }

    #[test]
    fn fast_path_reads_the_same_as_a_full_parse() {
        for text in [
            include_str!("../../../../tests/fixtures/consumer-split/uv.lock"),
            include_str!("../../../../tests/fixtures/consumer-unified/uv.lock"),
        ] {
            // a trailing comment with a multi-line string delimiter forces the full parse
            let full = format!("{text}# '''\n");
            assert_eq!(refs(text), refs(&full));
        }
    }

    #[test]
    fn split_lock_references_carry_lines_archs_and_kinds() {
        let name = PackageName::from_str("deep_ep").unwrap();
        let text = include_str!("../../../../tests/fixtures/consumer-split/uv.lock");
        let l = read(Path::new("uv.lock"), text, &name, Some("consumer")).unwrap();
        let line = |needle: &str| text.lines().position(|x| x.contains(needle)).unwrap() + 1;
        let x86 = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";
        let pkg: Vec<(usize, Vec<Arch>)> =
            l.refs.iter().filter(|r| r.kind == Kind::LockPackage).map(|r| (r.line, r.archs.clone())).collect();
        assert_eq!(pkg.len(), 2);
        assert_eq!(pkg[0].1, vec![Arch::X86_64]);
        assert_eq!(pkg[1].1, vec![Arch::Aarch64]);
        // each at its `source = { git = ...#commit }` line, where the commit is written
        let source =
            text.lines().position(|l| l.starts_with("source = ") && l.contains(&format!("?rev={x86}#"))).unwrap() + 1;
        assert_eq!(pkg[0].0, source);
        // dependents restricted by conflicts and by the package they name
        let deps: Vec<&Reference> =
            l.refs.iter().filter(|r| r.kind == Kind::LockDependent && r.owner.as_deref() == Some("consumer")).collect();
        assert_eq!(deps.len(), 4);
        for d in deps {
            let rev = d.git.as_ref().unwrap().rev.as_deref().unwrap();
            assert_eq!(d.archs, if rev == x86 { vec![Arch::X86_64] } else { vec![Arch::Aarch64] }, "line {}", d.line);
        }
        let t: Vec<&Reference> = l.refs.iter().filter(|r| r.kind == Kind::LockTransitive).collect();
        assert_eq!((t.len(), t[0].line, t[0].archs.len()), (1, line("rev=7febc6e"), 2));
        assert_eq!(l.overridden, Arch::ALL.to_vec());
        assert_eq!(l.refs.iter().filter(|r| r.kind == Kind::LockRequiresDist).count(), 4);
        assert_eq!(
            l.refs.iter().find(|r| r.kind == Kind::LockLabel).unwrap().line,
            line("version = \"1.2.1+29d31c0\"")
        );
    }
}
