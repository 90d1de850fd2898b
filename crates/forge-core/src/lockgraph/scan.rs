//! One `[[package]]` table of uv.lock read by hand, for the exact shape uv
//! writes: `name`, `version`, `source = { ... }`, `resolution-markers` and
//! `dependencies` as one element a line, `[package.optional-dependencies]` and
//! `[package.dev-dependencies]` lists of the same edges, blank lines; the
//! `sdist` / `wheels` lines are skipped exactly as `without_files` skips them.
//! Any other line (a comment, an escape or tab in a string, a quoted key, a
//! duplicate key or table, `[package.metadata]`, a value of another type) gives
//! `None`: the caller then parses the table with `toml`, so the result (or the
//! error, with its line) is the one the full parse gives. One pass over the
//! lines, each byte looked at a bounded number of times. Must not judge.
use std::collections::BTreeMap;

use super::{Edge, Source, Table};

/// Where the key lines of a table go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Top,
    Optional,
    Dev,
}

/// The table in `block` (from its `[[package]]` line to the next one), or `None`
/// when some line is not one uv writes.
pub(super) fn table(block: &str) -> Option<Table> {
    let mut lines = Lines::new(block);
    if lines.next()? != "[[package]]" {
        return None;
    }
    let mut t = Partial::default();
    let mut section = Section::Top;
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        if let Some(s) = header(line) {
            if !t.headers.insert_new(s as u8) {
                return None;
            }
            section = s;
            continue;
        }
        let (key, rest) = key_line(line)?;
        match section {
            Section::Top => t.top(key, rest, &mut lines)?,
            Section::Optional => insert_list(&mut t.optional, key, rest, &mut lines)?,
            Section::Dev => insert_list(&mut t.dev, key, rest, &mut lines)?,
        }
    }
    t.finish()
}

/// The block's lines as `without_files` keeps them (`sdist = ...`,
/// `wheels = [...]` on one line, and `wheels = [` to a lone `]`, dropped).
struct Lines<'a> {
    inner: std::str::Lines<'a>,
}

impl<'a> Lines<'a> {
    fn new(block: &'a str) -> Self {
        Lines { inner: block.lines() }
    }
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        loop {
            let line = self.inner.next()?;
            if line.starts_with("sdist = ") || (line.starts_with("wheels = [") && line.ends_with(']')) {
                continue;
            }
            if line == "wheels = [" {
                for l in self.inner.by_ref() {
                    if l == "]" {
                        break;
                    }
                }
                continue;
            }
            return Some(line);
        }
    }
}

/// A small set of seen sections (bit per [`Section`]).
#[derive(Default)]
struct Seen(u8);

impl Seen {
    /// False when `s` was seen already.
    fn insert_new(&mut self, s: u8) -> bool {
        let bit = 1u8 << (s & 7);
        let new = self.0 & bit == 0;
        self.0 |= bit;
        new
    }
}

/// The table as read so far.
#[derive(Default)]
struct Partial {
    name: Option<String>,
    version: Option<String>,
    source: Option<Source>,
    markers: Option<Vec<String>>,
    dependencies: Option<Vec<Edge>>,
    optional: BTreeMap<String, Vec<Edge>>,
    dev: BTreeMap<String, Vec<Edge>>,
    headers: Seen,
}

impl Partial {
    /// One key of the table itself (`None`: unknown key, duplicate, or not uv's shape).
    fn top(&mut self, key: &str, rest: &str, lines: &mut Lines) -> Option<()> {
        match key {
            "name" => set(&mut self.name, whole_string(rest)?),
            "version" => set(&mut self.version, whole_string(rest)?),
            "source" => set(&mut self.source, whole(rest, source)?),
            "resolution-markers" => set(&mut self.markers, list(rest, lines, |e| whole_string(e))?),
            "dependencies" => set(&mut self.dependencies, list(rest, lines, |e| whole(e, edge))?),
            _ => None,
        }
    }

    fn finish(self) -> Option<Table> {
        Some(Table {
            name: self.name?,
            version: self.version,
            source: self.source,
            resolution_markers: self.markers.unwrap_or_default(),
            dependencies: self.dependencies.unwrap_or_default(),
            optional: self.optional,
            dev: self.dev,
        })
    }
}

/// Sets `slot` once (a second time is a duplicate key: `None`).
fn set<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(v);
    Some(())
}

fn insert_list(map: &mut BTreeMap<String, Vec<Edge>>, key: &str, rest: &str, lines: &mut Lines) -> Option<()> {
    if map.contains_key(key) {
        return None;
    }
    let edges = list(rest, lines, |e| whole(e, edge))?;
    map.insert(key.to_string(), edges);
    Some(())
}

fn header(line: &str) -> Option<Section> {
    match line {
        "[package.optional-dependencies]" => Some(Section::Optional),
        "[package.dev-dependencies]" => Some(Section::Dev),
        _ => None,
    }
}

fn is_bare_key(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `key = rest` with a bare key.
fn key_line(line: &str) -> Option<(&str, &str)> {
    let (key, rest) = line.split_once(" = ")?;
    is_bare_key(key).then_some((key, rest))
}

/// A list value: `[]`, or `[` then one `    <element>,` a line to a lone `]`.
fn list<T>(rest: &str, lines: &mut Lines, mut element: impl FnMut(&str) -> Option<T>) -> Option<Vec<T>> {
    match rest {
        "[]" => return Some(Vec::new()),
        "[" => {}
        _ => return None,
    }
    let mut out = Vec::new();
    loop {
        let line = lines.next()?;
        if line == "]" {
            return Some(out);
        }
        let e = line.strip_prefix("    ")?.strip_suffix(',')?;
        out.push(element(e)?);
    }
}

/// `parse` of all of `s` (nothing may follow).
fn whole<'a, T>(s: &'a str, parse: impl FnOnce(&'a str) -> Option<(T, &'a str)>) -> Option<T> {
    let (v, rest) = parse(s)?;
    rest.is_empty().then_some(v)
}

fn whole_string(s: &str) -> Option<String> {
    whole(s, string).map(str::to_string)
}

/// A basic string without escapes or control characters (tab included), and what follows it.
fn string(s: &str) -> Option<(&str, &str)> {
    let body = s.strip_prefix('"')?;
    let end = body.find(['"', '\\'])?;
    let (v, rest) = body.split_at(end);
    if v.bytes().any(|b| b < 0x20 || b == 0x7f) || !rest.starts_with('"') {
        return None;
    }
    Some((v, &rest[1..]))
}

/// `["a", "b"]` (strings only), and what follows it.
fn strings(s: &str) -> Option<(Vec<String>, &str)> {
    let mut rest = s.strip_prefix('[')?;
    let mut out = Vec::new();
    if let Some(r) = rest.strip_prefix(']') {
        return Some((out, r));
    }
    loop {
        let (v, r) = string(rest)?;
        out.push(v.to_string());
        if let Some(r) = r.strip_prefix(']') {
            return Some((out, r));
        }
        rest = r.strip_prefix(", ")?;
    }
}

/// One value of an inline table as uv writes them.
enum Value<'a> {
    Str(&'a str),
    Strings(Vec<String>),
    Table,
}

/// `{ k = v, k = v }` (bare keys, no duplicates, values strings, string lists or
/// inline tables of strings), each pair given to `field`; and what follows.
fn inline<'a>(s: &'a str, mut field: impl FnMut(&'a str, Value<'a>) -> Option<()>) -> Option<&'a str> {
    let mut rest = s.strip_prefix("{ ")?;
    let mut keys: Vec<&str> = Vec::new();
    loop {
        let (key, r) = rest.split_once(" = ")?;
        if !is_bare_key(key) || keys.contains(&key) || keys.len() >= 16 {
            return None;
        }
        keys.push(key);
        let (v, r) = value(r)?;
        field(key, v)?;
        if let Some(r) = r.strip_prefix(" }") {
            return Some(r);
        }
        rest = r.strip_prefix(", ")?;
    }
}

fn value(s: &str) -> Option<(Value<'_>, &str)> {
    match s.as_bytes().first()? {
        b'"' => string(s).map(|(v, r)| (Value::Str(v), r)),
        b'[' => strings(s).map(|(v, r)| (Value::Strings(v), r)),
        b'{' => inline(s, |_, v| matches!(v, Value::Str(_)).then_some(())).map(|r| (Value::Table, r)),
        _ => None,
    }
}

fn source(s: &str) -> Option<(Source, &str)> {
    let mut src = Source { registry: None, editable: None, virtual_: None };
    let rest = inline(s, |k, v| {
        let slot = match k {
            "registry" => &mut src.registry,
            "editable" => &mut src.editable,
            "virtual" => &mut src.virtual_,
            _ => return matches!(v, Value::Str(_)).then_some(()),
        };
        let Value::Str(v) = v else { return None };
        *slot = Some(v.to_string());
        Some(())
    })?;
    Some((src, rest))
}

fn edge(s: &str) -> Option<(Edge, &str)> {
    let (mut name, mut version, mut marker, mut extra) = (None, None, None, Vec::new());
    let rest = inline(s, |k, v| match (k, v) {
        ("name", Value::Str(v)) => set(&mut name, v.to_string()),
        ("version", Value::Str(v)) => set(&mut version, v.to_string()),
        ("marker", Value::Str(v)) => set(&mut marker, v.to_string()),
        ("extra", Value::Strings(v)) => {
            extra = v;
            Some(())
        }
        ("name" | "version" | "marker" | "extra", _) => None,
        _ => Some(()),
    })?;
    Some((Edge { name: name?, version, marker, extra, resolved: Default::default() }, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: &str = "[[package]]\nname = \"a\"\nversion = \"1.0\"\nsource = { registry = \"https://pypi.org/simple\" }\nresolution-markers = [\n    \"platform_machine == 'x86_64'\",\n]\ndependencies = [\n    { name = \"b\" },\n    { name = \"c\", version = \"2\", source = { registry = \"https://x\" }, marker = \"sys_platform == 'linux'\", extra = [\"gpu\", \"cu\"] },\n]\nsdist = { url = \"https://x/a.tar.gz\", hash = \"sha256:00\", size = 3 }\nwheels = [\n    { url = \"https://x/a.whl\", hash = \"sha256:00\", size = 3, upload-time = 2024-01-01T00:00:00Z },\n]\n\n[package.optional-dependencies]\ngpu = [\n    { name = \"d\", marker = \"extra == 'gpu'\" },\n]\n\n[package.dev-dependencies]\ndev = []\n";

    #[test]
    fn reads_uvs_shape() {
        let t = table(BLOCK).expect("uv's shape");
        assert_eq!((t.name.as_str(), t.version.as_deref()), ("a", Some("1.0")));
        assert_eq!(t.source.unwrap().registry.as_deref(), Some("https://pypi.org/simple"));
        assert_eq!(t.resolution_markers, vec!["platform_machine == 'x86_64'"]);
        assert_eq!(t.dependencies.len(), 2);
        let c = &t.dependencies[1];
        assert_eq!((c.name.as_str(), c.version.as_deref(), c.extra.len()), ("c", Some("2"), 2));
        assert_eq!(c.marker.as_deref(), Some("sys_platform == 'linux'"));
        assert_eq!(t.optional["gpu"][0].name, "d");
        assert!(t.dev["dev"].is_empty());
    }

    #[test]
    fn anything_else_is_left_to_the_toml_parser() {
        for (from, to) in [
            ("name = \"a\"", "name = \"a\" # c"),
            ("name = \"a\"", "name = \"\\u0061\""),
            ("name = \"a\"", "\"name\" = \"a\""),
            ("name = \"a\"", "name = 'a'"),
            ("name = \"a\"", "name  = \"a\""),
            ("version = \"1.0\"", "version = \"1.0\"\nversion = \"1.0\""),
            ("version = \"1.0\"", "version = 1"),
            ("{ name = \"b\" }", "{ name = \"b\", name = \"b\" }"),
            ("{ name = \"b\" }", "{ name = \"b\", marker = 1 }"),
            ("{ name = \"b\" }", "{ version = \"1\" }"),
            ("{ name = \"b\" },", "{ name = \"b\" }"),
            ("{ name = \"b\" },", "{name = \"b\"},"),
            ("[package.dev-dependencies]", "[package.metadata]"),
            ("[package.dev-dependencies]", "[package.optional-dependencies]"),
            ("dev = []", "dev = [ ]"),
            ("\"platform_machine == 'x86_64'\"", "\"platform_machine == 'x86_64'\t\""),
        ] {
            assert!(BLOCK.contains(from), "{from}");
            let odd = BLOCK.replacen(from, to, 1);
            assert!(table(&odd).is_none(), "{to}");
        }
        assert!(table(&BLOCK.replace("name = \"a\"\n", "")).is_none(), "no name");
        assert!(table(&BLOCK.replace("'gpu'\" },\n]\n", "'gpu'\" },\n")).is_none(), "unclosed list");
    }
}
