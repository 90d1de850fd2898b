//! uv.lock's dependency graph: which `[[package]]` tables a project really
//! installs on each Linux architecture. A table without `resolution-markers`
//! is not "everywhere": it installs where some path of dependency edges from
//! the project's own table (its `dependencies`, each extra, each dev group)
//! has every edge's `marker` true, and where its own `resolution-markers` hold.
//! Each root context (the dependencies alone, `extra <name>`, `group <name>`)
//! is walked per architecture with a visited set (no recursion), the markers
//! evaluated by [`crate::marker`] with uv's conflict sets excluded.
//! uv.lock is hostile input: tables, edges and contexts are capped.
//! Must not judge (see `lock::rules` and `builder::registry`).
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Result;
use pep508_rs::MarkerTree;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Deserialize;

use crate::marker::{self, ConflictItem};
use crate::pins::Arch;
use forge_os::error::Failure;

mod scan;

/// Most `[[package]]` tables read (NeMo-RL's locks have 445 to 549).
pub const MAX_TABLES: usize = 20_000;
/// Most dependency edges read, all tables together.
pub const MAX_EDGES: usize = 200_000;
/// Most root contexts walked (the dependencies, each extra, each dev group).
pub const MAX_CONTEXTS: usize = 64;

/// One table the project installs somewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Normalised name.
    pub name: String,
    pub version: String,
    /// `source = { registry = URL }`, when so.
    pub registry: Option<String>,
    /// 1-based line of the table's `name`.
    pub line: usize,
    /// Per architecture, the root contexts that reach it (`dependencies`, `extra vllm`, `group dev`).
    pub via: BTreeMap<Arch, BTreeSet<String>>,
}

impl Installed {
    pub fn archs(&self) -> Vec<Arch> {
        self.via.keys().copied().collect()
    }
}

/// The tables a project installs, in lock order.
#[derive(Debug, Default)]
pub struct Installs {
    pub tables: Vec<Installed>,
    /// Walked from the project's own table (else read by resolution-markers alone).
    pub rooted: bool,
    /// How many `[[package]]` tables the hand scanner read (the rest: `toml`).
    pub scanned: usize,
}

impl Installs {
    /// Where the table `name` `version` installs (none: not reached at all).
    pub fn archs(&self, name: &str, version: &str) -> Vec<Arch> {
        let mut out: Vec<Arch> =
            self.tables.iter().filter(|t| t.name == name && t.version == version).flat_map(|t| t.archs()).collect();
        out.sort();
        out.dedup();
        out
    }
}

#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    conflicts: Vec<Vec<Conflict>>,
}

#[derive(Deserialize)]
struct Conflict {
    package: Option<String>,
    extra: Option<String>,
    group: Option<String>,
}

#[derive(Deserialize)]
struct Block<'a> {
    package: Vec<Table<'a>>,
}

/// One `[[package]]` table: its strings borrowed from the lock when [`scan`] read it
/// (uv's markers are most of the lock: not copied), owned when `toml` did.
#[derive(Debug, Deserialize)]
struct Table<'a> {
    name: Cow<'a, str>,
    version: Option<Cow<'a, str>>,
    source: Option<Source<'a>>,
    #[serde(rename = "resolution-markers", default)]
    resolution_markers: Vec<Cow<'a, str>>,
    #[serde(default)]
    dependencies: Vec<Edge<'a>>,
    #[serde(rename = "optional-dependencies", default)]
    optional: BTreeMap<String, Vec<Edge<'a>>>,
    #[serde(rename = "dev-dependencies", default)]
    dev: BTreeMap<String, Vec<Edge<'a>>>,
}

#[derive(Debug, Deserialize)]
struct Source<'a> {
    registry: Option<Cow<'a, str>>,
    editable: Option<Cow<'a, str>>,
    #[serde(rename = "virtual")]
    virtual_: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
struct Edge<'a> {
    name: Cow<'a, str>,
    version: Option<Cow<'a, str>>,
    marker: Option<Cow<'a, str>>,
    #[serde(default)]
    extra: Vec<Cow<'a, str>>,
    /// The marker's id and the tables the edge names (its version's), resolved at
    /// the first walk that meets the edge: later walks (each context, each
    /// architecture) reuse them instead of re-normalising and re-hashing.
    #[serde(skip)]
    resolved: std::cell::OnceCell<(usize, Vec<usize>)>,
}

/// `Deep_EP.x` -> `deep-ep-x` (PEP 503); a name already so (uv writes them so) is borrowed.
fn normalise(n: &str) -> Cow<'_, str> {
    if !n.bytes().any(|b| b.is_ascii_uppercase() || b == b'_' || b == b'.') && !n.contains("--") {
        return Cow::Borrowed(n);
    }
    let mut out = String::with_capacity(n.len());
    for c in n.chars() {
        match c {
            '-' | '_' | '.' if out.ends_with('-') => {}
            '-' | '_' | '.' => out.push('-'),
            c => out.push(c.to_ascii_lowercase()),
        }
    }
    Cow::Owned(out)
}

/// A `[[package]]` block without its `sdist` / `wheels` lines (~95% of the
/// file; uv writes them as one line, or `wheels = [` to a lone `]`).
fn without_files(block: &str) -> String {
    let mut out = String::with_capacity(block.len() / 4);
    let mut in_wheels = false;
    for line in block.lines() {
        if in_wheels {
            in_wheels = line != "]";
            continue;
        }
        if line.starts_with("sdist = ") || (line.starts_with("wheels = [") && line.ends_with(']')) {
            continue;
        }
        if line == "wheels = [" {
            in_wheels = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The offset of each `[[package]]` line (at a line start) and its 1-based line: one pass.
fn package_starts(text: &str) -> Vec<(usize, usize)> {
    // memmem (SIMD) finds the headers; the lines between are counted, not split.
    let b = text.as_bytes();
    let (mut line, mut last) = (1usize, 0usize);
    let mut out = Vec::new();
    for at in memchr::memmem::find_iter(b, b"[[package]]\n").filter(|&i| i > 0 && b[i - 1] == b'\n') {
        line += memchr::memchr_iter(b'\n', &b[last..at]).count();
        last = at;
        out.push((at, line));
    }
    out
}

/// The `[[package]]` table at `block` with each list element line that does not
/// name `needle` (normalised) blanked, offsets and lines kept, when the table has
/// exactly uv's shape (see `scan`); `None` otherwise (parse it whole).
pub fn thin_block(block: &str, needle: &str) -> Option<String> {
    // A line that normalises to contain `needle` holds its first word (up to a `-`) in
    // any case: checked first, without allocating.
    let word = needle.split('-').next().unwrap_or_default().as_bytes();
    scan::thin(block, |line| has_ignore_ascii_case(line.as_bytes(), word) && normalise(line).contains(needle))
}

/// Whether `hay` holds `word` in any ASCII case (an empty word: always): the places of
/// its first byte, either case, found by `memchr2`, then the rest compared.
fn has_ignore_ascii_case(hay: &[u8], word: &[u8]) -> bool {
    let Some(&first) = word.first() else { return true };
    let (lower, upper) = (first.to_ascii_lowercase(), first.to_ascii_uppercase());
    memchr::memchr2_iter(lower, upper, hay)
        .any(|i| hay.get(i..i + word.len()).is_some_and(|w| w.eq_ignore_ascii_case(word)))
}

fn bad(path: &Path, line: usize, what: String) -> anyhow::Error {
    Failure::usage(format!("{}:{line}: {what}", path.display())).hint("regenerate the lock with `uv lock`").into()
}

/// The tables of one `[[package]]` block: read by [`scan`] when it has uv's shape, else by `toml`
/// (without its file lists, then whole: the error of the whole block).
fn parse_block<'a>(path: &Path, line: usize, block: &'a str) -> Result<(Vec<Table<'a>>, bool)> {
    if let Some(t) = scan::table(block) {
        return Ok((vec![t], true));
    }
    let parsed: Block = toml::from_str(&without_files(block))
        .or_else(|_| toml::from_str(block))
        .map_err(|e| bad(path, line, format!("a [[package]] table does not parse: {e}")))?;
    Ok((parsed.package, false))
}

/// The tables of uv.lock, each with its line; uv's conflict sets; how many the scanner read.
type Tables<'a> = (Vec<(usize, Table<'a>)>, MarkerTree, usize);

/// The tables of uv.lock with the line of each (blocks parsed alone, files skipped).
fn tables<'a>(path: &Path, text: &'a str) -> Result<Tables<'a>> {
    // Each block's start and first line, in one pass over the text (not one per block).
    let (starts, lines): (Vec<usize>, Vec<usize>) = package_starts(text).into_iter().unzip();
    if starts.len() > MAX_TABLES {
        return Err(bad(path, 1, format!("more than {MAX_TABLES} [[package]] tables")));
    }
    let head = &text[..starts.first().copied().unwrap_or(text.len())];
    let header: Header = toml::from_str(head).map_err(|e| bad(path, 1, format!("the header does not parse: {e}")))?;
    let sets: Vec<Vec<(String, ConflictItem)>> = header
        .conflicts
        .into_iter()
        .map(|set| {
            set.into_iter()
                .filter_map(|c| {
                    let item = match (c.extra, c.group) {
                        (Some(e), _) => ConflictItem::Extra(e),
                        (None, Some(g)) => ConflictItem::Group(g),
                        _ => return None,
                    };
                    Some((c.package?, item))
                })
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(starts.len());
    let (mut edges, mut scanned) = (0usize, 0usize);
    for (k, &s) in starts.iter().enumerate() {
        let block = &text[s..starts.get(k + 1).copied().unwrap_or(text.len())];
        let line = lines[k];
        let (parsed, by_scan) = parse_block(path, line, block)?;
        scanned += usize::from(by_scan);
        for t in parsed {
            edges += t.dependencies.len() + t.optional.values().chain(t.dev.values()).map(Vec::len).sum::<usize>();
            if edges > MAX_EDGES {
                return Err(bad(path, line, format!("more than {MAX_EDGES} dependency edges")));
            }
            out.push((line, t));
        }
    }
    Ok((out, marker::conflicts_allowed(&sets), scanned))
}

/// Parsed markers, interned, and whether each holds per context and architecture
/// (cached: each marker is restricted by the conflict sets once, each context by
/// each architecture once; a marker that names no extra is context-free).
struct Markers<'a> {
    path: &'a Path,
    allowed: &'a MarkerTree,
    ids: FxHashMap<String, usize>,
    /// (marker ∧ allowed, whether it names an extra or group).
    trees: Vec<(MarkerTree, bool)>,
    envs: FxHashMap<(usize, Arch), MarkerTree>,
    holds: FxHashMap<(usize, usize, Arch), bool>,
}

impl Markers<'_> {
    fn id(&mut self, m: Option<&str>, line: usize) -> Result<usize> {
        let s = m.unwrap_or("");
        if let Some(i) = self.ids.get(s) {
            return Ok(*i);
        }
        let mut tree = match m {
            None => MarkerTree::TRUE,
            Some(s) => marker::parse(s).map_err(|e| bad(self.path, line, format!("invalid marker: {e}")))?,
        };
        tree.and(self.allowed.clone());
        self.trees.push((tree, s.contains("extra")));
        self.ids.insert(s.to_string(), self.trees.len() - 1);
        Ok(self.trees.len() - 1)
    }

    /// Can marker `id` hold on `arch` in context `ctx` (a marker id too; `base`: the context
    /// that constrains nothing)?
    fn holds(&mut self, id: usize, ctx: usize, base: usize, arch: Arch) -> bool {
        let ctx = if self.trees[id].1 { ctx } else { base };
        if let Some(h) = self.holds.get(&(id, ctx, arch)) {
            return *h;
        }
        let trees = &self.trees;
        let env = self.envs.entry((ctx, arch)).or_insert_with(|| {
            let mut e = trees[ctx].0.clone();
            e.and(marker::arch_env(arch));
            e
        });
        let mut m = trees[id].0.clone();
        m.and(env.clone());
        let h = !m.is_false();
        self.holds.insert((id, ctx, arch), h);
        h
    }
}

/// Where each table of uv.lock installs for `project` (its normalised name; else
/// the workspace's own tables, `editable`/`virtual` sources). A lock without such
/// a table (not one uv wrote for a project) is read by each table's own
/// `resolution-markers` alone ([`Installs::rooted`] false).
pub fn installs(path: &Path, text: &str, project: Option<&str>) -> Result<Installs> {
    let w = walked(path, text, project)?;
    let tables = w
        .tables
        .iter()
        .zip(&w.bits)
        .filter_map(|((line, t), b)| {
            let via: BTreeMap<Arch, BTreeSet<String>> = Arch::ALL
                .into_iter()
                .enumerate()
                .filter(|(a, _)| b[*a] != 0)
                .map(|(a, arch)| (arch, labelled(&w.labels, b[a])))
                .collect();
            (!via.is_empty()).then(|| Installed {
                name: normalise(&t.name).into_owned(),
                version: t.version.as_deref().unwrap_or_default().to_string(),
                registry: t.source.as_ref().and_then(|s| s.registry.as_deref().map(str::to_string)),
                line: *line,
                via,
            })
        })
        .collect();
    Ok(Installs { tables, rooted: w.rooted, scanned: w.scanned })
}

/// The labels whose bits are set in `bits`.
fn labelled(labels: &[String], bits: u64) -> BTreeSet<String> {
    labels.iter().enumerate().filter(|(k, _)| bits >> k & 1 == 1).map(|(_, l)| l.clone()).collect()
}

/// Where each table of uv.lock installs, by architecture alone: [`installs`] without
/// the labels of the contexts that reach each table (nothing copied out of the lock).
pub struct Reach<'a>(Walked<'a>);

impl Reach<'_> {
    /// Where the table `name` `version` installs (none: not reached at all), as [`Installs::archs`].
    pub fn archs(&self, name: &str, version: &str) -> Vec<Arch> {
        let w = &self.0;
        let mut out: Vec<Arch> = w
            .tables
            .iter()
            .zip(&w.bits)
            .filter(|((_, t), _)| normalise(&t.name) == name && t.version.as_deref().unwrap_or_default() == version)
            .flat_map(|(_, b)| Arch::ALL.into_iter().enumerate().filter(|(a, _)| b[*a] != 0).map(|(_, arch)| arch))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// [`installs`] by architecture alone (see [`Reach`]).
pub fn reach<'a>(path: &Path, text: &'a str, project: Option<&str>) -> Result<Reach<'a>> {
    walked(path, text, project).map(Reach)
}

/// The tables of uv.lock and, per table and architecture, the root contexts that reach it.
struct Walked<'a> {
    tables: Vec<(usize, Table<'a>)>,
    /// Each context's label (`dependencies`, `extra vllm`, `group dev`; `resolution-markers`
    /// when not rooted): bit `k` of [`Walked::bits`] is label `k`.
    labels: Vec<String>,
    /// Per table and architecture (index in [`Arch::ALL`]), the contexts that reach it.
    bits: Vec<[u64; 2]>,
    rooted: bool,
    scanned: usize,
}

/// Every root context walked on each architecture (see [`installs`]).
fn walked<'a>(path: &Path, text: &'a str, project: Option<&str>) -> Result<Walked<'a>> {
    let (tables, allowed, scanned) = tables(path, text)?;
    let project = project.map(normalise);
    let own = |t: &Table| {
        t.source.as_ref().is_some_and(|s| s.editable.is_some() || s.virtual_.is_some())
            && project.as_ref().is_none_or(|p| normalise(&t.name) == *p)
    };
    let roots: Vec<usize> = (0..tables.len()).filter(|i| own(&tables[*i].1)).collect();
    let mut by_name: FxHashMap<Cow<str>, Vec<usize>> = FxHashMap::default();
    for (i, (_, t)) in tables.iter().enumerate() {
        by_name.entry(normalise(&t.name)).or_default().push(i);
    }
    let mut mk = Markers {
        path,
        allowed: &allowed,
        ids: FxHashMap::default(),
        trees: Vec::new(),
        envs: FxHashMap::default(),
        holds: FxHashMap::default(),
    };
    let base = mk.id(None, 1)?;
    // Each table's resolution-markers as one marker id (TRUE when it has none).
    let mut fork = Vec::with_capacity(tables.len());
    for (line, t) in &tables {
        let joined = t.resolution_markers.iter().map(|m| format!("({m})")).collect::<Vec<_>>().join(" or ");
        fork.push(mk.id((!joined.is_empty()).then_some(joined.as_str()), *line)?);
    }
    let contexts = contexts(&tables, &roots, &mut mk)?;
    // Per table and architecture, the contexts that reach it (a bit each: at most MAX_CONTEXTS = 64).
    let mut bits: Vec<[u64; 2]> = vec![[0; 2]; tables.len()];
    let g = Graph { tables: &tables, by_name: &by_name, fork: &fork, base };
    let mut scratch = Scratch::default();
    for (k, (_, ctx, starts)) in contexts.iter().enumerate() {
        for (a, arch) in Arch::ALL.into_iter().enumerate() {
            for &t in g.walk(&mut mk, *ctx, arch, starts, &mut scratch)? {
                bits[t][a] |= 1u64 << k;
            }
        }
    }
    let mut labels: Vec<String> = contexts.into_iter().map(|c| c.0).collect();
    if roots.is_empty() {
        // No context walked: each table where its own resolution-markers can hold.
        labels.push("resolution-markers".into());
        for (t, f) in fork.iter().enumerate() {
            for (a, arch) in Arch::ALL.into_iter().enumerate() {
                if mk.holds(*f, base, base, arch) {
                    bits[t][a] |= 1;
                }
            }
        }
    }
    Ok(Walked { tables, labels, bits, rooted: !roots.is_empty(), scanned })
}

/// A root context: its label, its marker id (the extra or group active, in uv's
/// conflict encoding `extra-<len>-<project>-<name>`), and the edges it starts from.
type Context<'t> = (String, usize, Vec<(usize, &'t Edge<'t>)>);

fn contexts<'t>(tables: &'t [(usize, Table<'t>)], roots: &[usize], mk: &mut Markers) -> Result<Vec<Context<'t>>> {
    let mut out: Vec<Context<'t>> = Vec::new();
    for &r in roots {
        let (line, t) = &tables[r];
        let base: Vec<(usize, &Edge<'t>)> = t.dependencies.iter().map(|e| (r, e)).collect();
        let name = normalise(&t.name);
        out.push(("dependencies".into(), mk.id(None, *line)?, base.clone()));
        for (kind, lists) in [("extra", &t.optional), ("group", &t.dev)] {
            for (n, edges) in lists {
                let m = format!("extra == '{kind}-{}-{name}-{}'", name.len(), normalise(n));
                // A name uv could not have encoded (not ASCII, quotes): the context stays unconstrained.
                let ctx = mk.id(Some(&m), *line).or_else(|_| mk.id(None, *line))?;
                let starts = base.iter().copied().chain(edges.iter().map(|e| (r, e))).collect();
                out.push((format!("{kind} {n}"), ctx, starts));
            }
        }
        if out.len() > MAX_CONTEXTS {
            return Err(bad(mk.path, *line, format!("more than {MAX_CONTEXTS} extras and dependency groups")));
        }
    }
    Ok(out)
}

struct Graph<'g> {
    tables: &'g [(usize, Table<'g>)],
    by_name: &'g FxHashMap<Cow<'g, str>, Vec<usize>>,
    fork: &'g [usize],
    /// The context that constrains nothing.
    base: usize,
}

impl Graph<'_> {
    /// The tables reached on `arch` in context `ctx` from `starts`: a worklist of
    /// (table, extra of it) with a visited set, each edge taken where its marker
    /// can hold, each target where its resolution-markers can. Dense per-walk
    /// state (`scratch`, reused): no hashing per edge.
    fn walk<'a, 's>(
        &'a self,
        mk: &mut Markers,
        ctx: usize,
        arch: Arch,
        starts: &[(usize, &'a Edge<'a>)],
        scratch: &'s mut Scratch,
    ) -> Result<&'s [usize]> {
        let n = self.tables.len();
        scratch.reset(n);
        let Scratch { holds, seen, reached, order } = scratch;
        let mut seen_extra: FxHashSet<(usize, &'a str)> = FxHashSet::default();
        let mut work: Vec<(usize, &'a Edge<'a>)> = starts.to_vec();
        let mut check = |mk: &mut Markers, id: usize| -> bool {
            if holds.len() <= id {
                holds.resize(id + 1, 0);
            }
            if holds[id] == 0 {
                holds[id] = 1 + u8::from(mk.holds(id, ctx, self.base, arch));
            }
            holds[id] == 2
        };
        while let Some((from, e)) = work.pop() {
            let (id, targets) = self.resolve(mk, from, e)?;
            if !check(mk, *id) {
                continue;
            }
            for &t in targets {
                if !check(mk, self.fork[t]) {
                    continue;
                }
                if !reached[t] {
                    reached[t] = true;
                    order.push(t);
                }
                let table = &self.tables[t].1;
                if !seen[t] {
                    seen[t] = true;
                    work.extend(table.dependencies.iter().map(|e| (t, e)));
                }
                for x in &e.extra {
                    if seen_extra.insert((t, &**x)) {
                        work.extend(table.optional.get(&**x).into_iter().flatten().map(|e| (t, e)));
                    }
                }
            }
        }
        Ok(order)
    }

    /// The edge's marker id and target tables, resolved once (later walks reuse them).
    fn resolve<'e>(&self, mk: &mut Markers, from: usize, e: &'e Edge<'_>) -> Result<&'e (usize, Vec<usize>)> {
        if let Some(r) = e.resolved.get() {
            return Ok(r);
        }
        let id = mk.id(e.marker.as_deref(), self.tables[from].0)?;
        let named = self.by_name.get(&*normalise(&e.name)).map(Vec::as_slice).unwrap_or_default();
        let targets =
            named.iter().copied().filter(|t| e.version.is_none() || e.version == self.tables[*t].1.version).collect();
        Ok(e.resolved.get_or_init(|| (id, targets)))
    }
}

/// One walk's dense state, kept between walks to reuse its memory.
#[derive(Default)]
struct Scratch {
    /// Per marker id: 0 not asked yet, 1 cannot hold, 2 can.
    holds: Vec<u8>,
    /// Per table: its own dependencies queued.
    seen: Vec<bool>,
    reached: Vec<bool>,
    /// The reached tables, in the order reached.
    order: Vec<usize>,
}

impl Scratch {
    fn reset(&mut self, tables: usize) {
        self.holds.clear();
        for v in [&mut self.seen, &mut self.reached] {
            v.clear();
            v.resize(tables, false);
        }
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "version = 1\nrevision = 3\nrequires-python = \">=3.10\"\n";

    fn table(name: &str, source: &str, deps: &str, rest: &str) -> String {
        format!(
            "\n[[package]]\nname = \"{name}\"\nversion = \"1.0\"\nsource = {{ {source} }}\ndependencies = [\n{deps}]\nwheels = [\n    {{ url = \"https://x/{name}.whl\" }},\n]\n{rest}"
        )
    }

    #[test]
    fn cycles_end_and_extras_of_dependencies_are_followed() {
        let reg = "registry = \"https://pypi.org/simple\"";
        let lock = [
            HEAD.to_string(),
            table("app", "editable = \".\"", "    { name = \"a\", extra = [\"gpu\"] },\n", ""),
            table(
                "a",
                reg,
                "    { name = \"b\" },\n",
                "\n[package.optional-dependencies]\ngpu = [\n    { name = \"nvidia-nccl-cu12\", marker = \"platform_machine == 'x86_64'\" },\n]\n",
            ),
            table("b", reg, "    { name = \"a\" },\n", ""),
            table("nvidia-nccl-cu12", reg, "", ""),
            table("unreached", reg, "", ""),
        ]
        .concat();
        let g = installs(Path::new("uv.lock"), &lock, Some("app")).unwrap();
        assert!(g.rooted);
        assert_eq!(g.archs("nvidia-nccl-cu12", "1.0"), vec![Arch::X86_64]);
        assert_eq!(g.archs("b", "1.0"), Arch::ALL.to_vec());
        assert_eq!(g.archs("unreached", "1.0"), vec![]);
        // Without the project's own table: each table by its resolution-markers alone.
        let g = installs(Path::new("uv.lock"), &lock, Some("other")).unwrap();
        assert!(!g.rooted && g.archs("unreached", "1.0") == Arch::ALL.to_vec());
    }

    #[test]
    fn names_normalise_as_pep_503_says() {
        for (n, want) in
            [("deep-ep", "deep-ep"), ("Deep_EP.x", "deep-ep-x"), ("a--b", "a-b"), ("a-_.b", "a-b"), ("é-x", "é-x")]
        {
            assert_eq!(normalise(n), want);
            assert_eq!(matches!(normalise(n), Cow::Borrowed(_)), n == want, "{n}");
        }
    }

    #[test]
    fn a_word_is_found_in_any_case_as_by_windows() {
        for (hay, word) in [
            ("", ""),
            ("", "deep"),
            ("x deep_ep", "deep"),
            ("DeEp", "deep"),
            ("dee", "deep"),
            ("d-e", "-e"),
            ("ddeep", "deep"),
        ] {
            let windows =
                word.is_empty() || hay.as_bytes().windows(word.len()).any(|w| w.eq_ignore_ascii_case(word.as_bytes()));
            assert_eq!(has_ignore_ascii_case(hay.as_bytes(), word.as_bytes()), windows, "{hay:?} {word:?}");
        }
    }

    #[test]
    fn hostile_sizes_are_bad_input_naming_the_file() {
        let edges = "    { name = \"x\" },\n".repeat(MAX_EDGES + 1);
        let lock = format!("{HEAD}{}", table("app", "virtual = \".\"", &edges, ""));
        let err = installs(Path::new("uv.lock"), &lock, None).unwrap_err();
        assert_eq!(forge_os::error::exit_of(&err), forge_os::error::Exit::Usage);
        assert!(format!("{err:#}").contains(&format!("uv.lock:5: more than {MAX_EDGES} dependency edges")), "{err:#}");
    }

    /// Each block of `lock` as `toml` reads it (the path the scanner stands in for).
    fn by_toml(block: &str) -> Vec<Table<'static>> {
        let b: Block = toml::from_str(&without_files(block)).or_else(|_| toml::from_str(block)).unwrap();
        b.package
    }

    fn blocks(lock: &str) -> Vec<&str> {
        let starts: Vec<usize> = lock.match_indices("\n[[package]]\n").map(|(i, _)| i + 1).collect();
        (0..starts.len()).map(|k| &lock[starts[k]..starts.get(k + 1).copied().unwrap_or(lock.len())]).collect()
    }

    const LOCKS: [&str; 3] = [
        include_str!("../../../tests/fixtures/consumer-split/uv.lock"),
        include_str!("../../../tests/fixtures/consumer-unified/uv.lock"),
        include_str!("../../../tests/fixtures/consumer-forks/uv.lock"),
    ];

    #[test]
    fn the_scanner_reads_every_table_uv_wrote_as_toml_does() {
        for lock in LOCKS {
            for b in blocks(lock) {
                let t = scan::table(b).unwrap_or_else(|| panic!("not scanned: {b}"));
                assert_eq!(format!("{:?}", vec![t]), format!("{:?}", by_toml(b)));
            }
        }
    }

    /// `lock` with each `name = ` line right after `[[package]]` given a comment:
    /// the same TOML, the same lines, but no table is uv's shape (all read by `toml`).
    fn commented(lock: &str) -> String {
        let mut out = String::with_capacity(lock.len() + 4096);
        let mut after = false;
        for l in lock.split_inclusive('\n') {
            match l.strip_suffix('\n') {
                Some(body) if after && body.starts_with("name = ") => out.push_str(&format!("{body} # toml\n")),
                _ => out.push_str(l),
            }
            after = l == "[[package]]\n";
        }
        out
    }

    fn graph(lock: &str, project: Option<&str>) -> (String, usize) {
        let g = installs(Path::new("uv.lock"), lock, project).unwrap();
        (format!("{:?} {}", g.tables, g.rooted), g.scanned)
    }

    #[test]
    fn reach_gives_the_archs_installs_gives() {
        for lock in LOCKS {
            for project in [None, Some("consumer"), Some("other")] {
                let g = installs(Path::new("uv.lock"), lock, project).unwrap();
                let r = reach(Path::new("uv.lock"), lock, project).unwrap();
                for (_, t) in tables(Path::new("uv.lock"), lock).unwrap().0 {
                    let (name, version) = (normalise(&t.name), t.version.as_deref().unwrap_or_default());
                    assert_eq!(r.archs(&name, version), g.archs(&name, version), "{name} {version}");
                }
            }
        }
    }

    #[test]
    fn odd_but_valid_toml_gives_the_same_graph_through_the_toml_path() {
        for lock in LOCKS {
            let n = blocks(lock).len();
            for project in [None, Some("consumer"), Some("other")] {
                let (plain, scanned) = graph(lock, project);
                assert_eq!(scanned, n);
                let odd = commented(lock);
                assert_eq!(graph(&odd, project), (plain.clone(), 0), "{odd}");
                // literal strings, a quoted key, spaced `=`, an escape: valid TOML, not uv's shape
                for (from, to) in [
                    ("source = { registry = \"", "source = { \"registry\" = \""),
                    ("\nversion = \"", "\nversion   =   \""),
                    ("{ name = \"", "{name=\""),
                    ("platform_machine == 'x86_64'", "platform_machine == \\u0027x86_64\\u0027"),
                    ("dependencies = [\n", "dependencies = [ # edges\n"),
                ] {
                    let odd = lock.replace(from, to);
                    let (g, s) = graph(&odd, project);
                    assert_eq!(g, plain, "{from} -> {to}");
                    let in_tables = lock.find("\n[[package]]\n").is_some_and(|f| lock[f..].contains(from));
                    assert!(!in_tables || s < n, "{from} -> {to}: every table still scanned");
                }
            }
        }
    }

    #[test]
    fn a_table_that_does_not_parse_is_an_error_at_its_line_either_way() {
        let lock = LOCKS[0];
        let at = lock.match_indices("\n[[package]]\n").nth(1).unwrap().0 + 1;
        let line = lock[..at].matches('\n').count() + 1;
        for broken in ["version = \"1.0\"\nversion = \"2.0\"\n", "version = \"1.0\n"] {
            let bad = format!("{}{}{}", &lock[..at], format_args!("[[package]]\nname = \"zz\"\n{broken}"), &lock[at..]);
            let err = installs(Path::new("uv.lock"), &bad, None).unwrap_err();
            assert!(
                format!("{err:#}").contains(&format!("uv.lock:{line}: a [[package]] table does not parse")),
                "{err:#}"
            );
        }
    }
}
