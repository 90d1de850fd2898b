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
use std::borrow::Cow;
use std::collections::BTreeMap;

use super::{Edge, Source, Table};

/// Where the key lines of a table go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Top,
    Optional,
    Dev,
    /// `[package.metadata]` and `[package.metadata.requires-dev]`: checked, not kept.
    Metadata,
    RequiresDev,
}

/// The table in `block` (from its `[[package]]` line to the next one), or `None`
/// when some line is not one uv writes.
pub(super) fn table(block: &str) -> Option<Table<'_>> {
    read(block).map(|(t, _)| t)
}

/// `block` with every list element line whose text `keep` rejects blanked (spaces,
/// so offsets and lines hold), when the table has uv's shape and no file lines
/// (each blanked line is then a whole element of a list: the TOML still parses,
/// to the same kept elements at the same places); `None` otherwise.
pub(super) fn thin(block: &str, keep: impl Fn(&str) -> bool) -> Option<String> {
    let (_, lines) = read(block)?;
    if lines.skipped_files {
        return None;
    }
    let mut out = block.as_bytes().to_vec();
    for (at, len) in lines.elements {
        if !keep(&block[at..at + len]) {
            out[at..at + len].fill(b' ');
        }
    }
    String::from_utf8(out).ok()
}

/// The table and the lines it read (element offsets, whether file lines were skipped).
fn read(block: &str) -> Option<(Table<'_>, Lines<'_>)> {
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
            Section::Metadata | Section::RequiresDev => t.metadata(section, key, rest, &mut lines)?,
        }
    }
    Some((t.finish()?, lines))
}

/// The block's lines as `without_files` keeps them (`sdist = ...`,
/// `wheels = [...]` on one line, and `wheels = [` to a lone `]`, dropped).
struct Lines<'a> {
    inner: RawLines<'a>,
    block: &'a str,
    /// (offset, length) of each list element line read.
    elements: Vec<(usize, usize)>,
    skipped_files: bool,
}

impl<'a> Lines<'a> {
    fn new(block: &'a str) -> Self {
        Lines { inner: RawLines(block), block, elements: Vec::new(), skipped_files: false }
    }

    /// Records `line` (one this iterator gave) as a list element.
    fn element(&mut self, line: &str) {
        let at = (line.as_ptr() as usize).wrapping_sub(self.block.as_ptr() as usize);
        if at.checked_add(line.len()).is_some_and(|end| end <= self.block.len()) {
            self.elements.push((at, line.len()));
        }
    }
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        loop {
            let line = self.inner.next()?;
            if line.starts_with("sdist = ") || (line.starts_with("wheels = [") && line.ends_with(']')) {
                self.skipped_files = true;
                continue;
            }
            if line == "wheels = [" {
                self.skipped_files = true;
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

/// `str::lines` (a line ends at `\n` or `\r\n`; a last line without `\n` keeps a
/// trailing `\r`), with each end found by SIMD `memchr` (uv's lines run to kilobytes).
struct RawLines<'a>(&'a str);

impl<'a> Iterator for RawLines<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.0.is_empty() {
            return None;
        }
        let Some(end) = memchr::memchr(b'\n', self.0.as_bytes()) else {
            return Some(std::mem::take(&mut self.0));
        };
        let (line, rest) = (&self.0[..end], &self.0[end + 1..]);
        self.0 = rest;
        Some(line.strip_suffix('\r').unwrap_or(line))
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

/// The table as read so far (its strings borrowed from the block: no copies).
#[derive(Default)]
struct Partial<'a> {
    name: Option<&'a str>,
    version: Option<&'a str>,
    source: Option<Source<'a>>,
    markers: Option<Vec<Cow<'a, str>>>,
    dependencies: Option<Vec<Edge<'a>>>,
    optional: BTreeMap<String, Vec<Edge<'a>>>,
    dev: BTreeMap<String, Vec<Edge<'a>>>,
    headers: Seen,
    /// Keys of `[package.metadata]` and of its `requires-dev` (duplicates are not uv's shape).
    meta_keys: Vec<(Section, &'a str)>,
}

impl<'a> Partial<'a> {
    /// One key of the table itself (`None`: unknown key, duplicate, or not uv's shape).
    fn top(&mut self, key: &str, rest: &'a str, lines: &mut Lines<'a>) -> Option<()> {
        match key {
            "name" => set(&mut self.name, whole_string(rest)?),
            "version" => set(&mut self.version, whole_string(rest)?),
            "source" => set(&mut self.source, whole(rest, source)?),
            "resolution-markers" => {
                set(&mut self.markers, list(rest, lines, |e| Some((Cow::Borrowed(whole_string(e)?), false)))?)
            }
            "dependencies" => set(&mut self.dependencies, list(rest, lines, |e| whole(e, edge))?),
            _ => None,
        }
    }

    /// One key of `[package.metadata]` or its `requires-dev`: a string, a list of
    /// strings or inline tables, or an inline table (checked, not kept).
    fn metadata(&mut self, section: Section, key: &'a str, rest: &'a str, lines: &mut Lines<'a>) -> Option<()> {
        // `requires-dev = ...` here and `[package.metadata.requires-dev]` would clash: left to toml.
        if (section == Section::Metadata && key == "requires-dev")
            || self.meta_keys.iter().any(|(s, k)| *s == section && *k == key)
        {
            return None;
        }
        self.meta_keys.push((section, key));
        if rest == "[" || rest == "[]" {
            return list(rest, lines, requirement).map(|_| ());
        }
        whole(rest, value).map(|_| ())
    }

    fn finish(self) -> Option<Table<'a>> {
        Some(Table {
            name: Cow::Borrowed(self.name?),
            version: self.version.map(Cow::Borrowed),
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

fn insert_list<'a>(
    map: &mut BTreeMap<String, Vec<Edge<'a>>>,
    key: &str,
    rest: &'a str,
    lines: &mut Lines<'a>,
) -> Option<()> {
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
        "[package.metadata]" => Some(Section::Metadata),
        "[package.metadata.requires-dev]" => Some(Section::RequiresDev),
        _ => None,
    }
}

fn is_bare_key(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `key = rest` with a bare key.
fn key_line(line: &str) -> Option<(&str, &str)> {
    let (key, rest) = split_eq(line)?;
    is_bare_key(key).then_some((key, rest))
}

/// `s.split_once(" = ")`, found by `memchr` on `=` (no substring searcher built per call).
fn split_eq(s: &str) -> Option<(&str, &str)> {
    let b = s.as_bytes();
    let at = memchr::memchr_iter(b'=', b).find(|&i| i > 0 && b[i - 1] == b' ' && b.get(i + 1) == Some(&b' '))?;
    Some((&s[..at - 1], &s[at + 2..]))
}

/// A list value: `[]`, or `[` then one `    <element>,` a line to a lone `]`; `element`
/// says whether its line may be blanked by [`thin`] (an edge or requirement whose
/// typed keys are well typed, so blanking it changes no error).
fn list<'a, T>(
    rest: &str,
    lines: &mut Lines<'a>,
    mut element: impl FnMut(&'a str) -> Option<(T, bool)>,
) -> Option<Vec<T>> {
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
        let (v, thinnable) = element(e)?;
        out.push(v);
        if thinnable {
            lines.element(line);
        }
    }
}

/// `parse` of all of `s` (nothing may follow).
fn whole<'a, T>(s: &'a str, parse: impl FnOnce(&'a str) -> Option<(T, &'a str)>) -> Option<T> {
    let (v, rest) = parse(s)?;
    rest.is_empty().then_some(v)
}

fn whole_string(s: &str) -> Option<&str> {
    whole(s, string)
}

/// A basic string without escapes or control characters (tab included), and what follows it.
fn string(s: &str) -> Option<(&str, &str)> {
    let body = s.strip_prefix('"')?;
    // The first quote or backslash (SIMD: uv's markers run to kilobytes), then no control character before it.
    let end = memchr::memchr2(b'"', b'\\', body.as_bytes())?;
    (body.as_bytes()[end] == b'"' && plain(&body.as_bytes()[..end])).then(|| (&body[..end], &body[end + 1..]))
}

/// No control character (tab included) and no DEL in `b`: one pass without early exit, so it vectorises.
fn plain(b: &[u8]) -> bool {
    b.iter().fold(0u8, |bad, &c| bad | u8::from(c < 0x20) | u8::from(c == 0x7f)) == 0
}

/// `["a", "b"]` (strings only), and what follows it.
fn strings(s: &str) -> Option<(Vec<&str>, &str)> {
    let mut rest = s.strip_prefix('[')?;
    let mut out = Vec::new();
    if let Some(r) = rest.strip_prefix(']') {
        return Some((out, r));
    }
    loop {
        let (v, r) = string(rest)?;
        out.push(v);
        if let Some(r) = r.strip_prefix(']') {
            return Some((out, r));
        }
        rest = r.strip_prefix(", ")?;
    }
}

/// One value of an inline table as uv writes them.
enum Value<'a> {
    Str(&'a str),
    Strings(Vec<&'a str>),
    /// An inline table; true when every value is a string.
    Table(bool),
}

/// `{ k = v, k = v }` (bare keys, no duplicates, values strings, string lists or
/// inline tables of those, [`MAX_DEPTH`] deep at most), each pair given to
/// `field`; and what follows.
fn inline<'a>(s: &'a str, mut field: impl FnMut(&'a str, Value<'a>) -> Option<()>) -> Option<&'a str> {
    inline_at(s, 0, &mut field)
}

/// Inline tables nested deeper than this are left to toml (no unbounded recursion).
const MAX_DEPTH: usize = 2;

fn inline_at<'a>(s: &'a str, depth: usize, field: &mut dyn FnMut(&'a str, Value<'a>) -> Option<()>) -> Option<&'a str> {
    let mut rest = s.strip_prefix("{ ")?;
    let mut keys: Vec<&str> = Vec::new();
    loop {
        let (key, r) = split_eq(rest)?;
        if !is_bare_key(key) || keys.contains(&key) || keys.len() >= 16 {
            return None;
        }
        keys.push(key);
        let (v, r) = value_at(r, depth)?;
        field(key, v)?;
        if let Some(r) = r.strip_prefix(" }") {
            return Some(r);
        }
        rest = r.strip_prefix(", ")?;
    }
}

fn value(s: &str) -> Option<(Value<'_>, &str)> {
    value_at(s, 0)
}

fn value_at(s: &str, depth: usize) -> Option<(Value<'_>, &str)> {
    match s.as_bytes().first()? {
        b'"' => string(s).map(|(v, r)| (Value::Str(v), r)),
        b'[' => strings(s).map(|(v, r)| (Value::Strings(v), r)),
        b'{' if depth < MAX_DEPTH => {
            let mut flat = true;
            let r = inline_at(s, depth + 1, &mut |_, v| {
                flat &= matches!(v, Value::Str(_));
                Some(())
            })?;
            Some((Value::Table(flat), r))
        }
        _ => None,
    }
}

fn source(s: &str) -> Option<(Source<'_>, &str)> {
    let mut src = Source { registry: None, editable: None, virtual_: None };
    let rest = inline(s, |k, v| {
        let slot = match k {
            "registry" => &mut src.registry,
            "editable" => &mut src.editable,
            "virtual" => &mut src.virtual_,
            _ => return matches!(v, Value::Str(_)).then_some(()),
        };
        let Value::Str(v) = v else { return None };
        *slot = Some(Cow::Borrowed(v));
        Some(())
    })?;
    Some((src, rest))
}

/// A dependency edge, whether uvlock's reading of it is well typed (a source
/// table of strings), and what follows.
fn edge(s: &str) -> Option<((Edge<'_>, bool), &str)> {
    let (mut name, mut version, mut marker, mut extra) = (None, None, None, Vec::new());
    let mut typed = true;
    let rest = inline(s, |k, v| match (k, v) {
        ("source", v) => {
            typed = matches!(v, Value::Table(true));
            Some(())
        }
        ("name", Value::Str(v)) => set(&mut name, Cow::Borrowed(v)),
        ("version", Value::Str(v)) => set(&mut version, Cow::Borrowed(v)),
        ("marker", Value::Str(v)) => set(&mut marker, Cow::Borrowed(v)),
        ("extra", Value::Strings(v)) => {
            extra = v.into_iter().map(Cow::Borrowed).collect();
            Some(())
        }
        ("name" | "version" | "marker" | "extra", _) => None,
        _ => Some(()),
    })?;
    Some(((Edge { name: name?, version, marker, extra, resolved: Default::default() }, typed), rest))
}

/// One element of a metadata list: any value uv writes; blankable when it is an
/// inline table with a string `name` and string `marker` / `git` if present.
fn requirement(e: &str) -> Option<((), bool)> {
    if !e.starts_with('{') {
        return whole(e, value).map(|_| ((), false));
    }
    let (mut named, mut typed) = (false, true);
    let rest = inline(e, |k, v| {
        match (k, v) {
            ("name", Value::Str(_)) => named = true,
            ("marker" | "git", Value::Str(_)) => {}
            ("name" | "marker" | "git", _) => typed = false,
            _ => {}
        }
        Some(())
    })?;
    rest.is_empty().then_some(((), named && typed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: &str = "[[package]]\nname = \"a\"\nversion = \"1.0\"\nsource = { registry = \"https://pypi.org/simple\" }\nresolution-markers = [\n    \"platform_machine == 'x86_64'\",\n]\ndependencies = [\n    { name = \"b\" },\n    { name = \"c\", version = \"2\", source = { registry = \"https://x\" }, marker = \"sys_platform == 'linux'\", extra = [\"gpu\", \"cu\"] },\n]\nsdist = { url = \"https://x/a.tar.gz\", hash = \"sha256:00\", size = 3 }\nwheels = [\n    { url = \"https://x/a.whl\", hash = \"sha256:00\", size = 3, upload-time = 2024-01-01T00:00:00Z },\n]\n\n[package.optional-dependencies]\ngpu = [\n    { name = \"d\", marker = \"extra == 'gpu'\" },\n]\n\n[package.dev-dependencies]\ndev = []\n";

    #[test]
    fn lines_and_key_splits_are_the_std_ones() {
        for text in ["", "a", "a\n", "a\r\nb\r", "\n\n\r\n", "x\r\r\ny", BLOCK] {
            assert_eq!(RawLines(text).collect::<Vec<_>>(), text.lines().collect::<Vec<_>>(), "{text:?}");
        }
        for s in ["a = b", "a=b = c", " = ", "a =b", "a= b", "=", "a == b = c", "a ==  = b", ""] {
            assert_eq!(split_eq(s), s.split_once(" = "), "{s:?}");
        }
    }

    #[test]
    fn reads_uvs_shape() {
        let t = table(BLOCK).expect("uv's shape");
        assert_eq!((&*t.name, t.version.as_deref()), ("a", Some("1.0")));
        assert_eq!(t.source.unwrap().registry.as_deref(), Some("https://pypi.org/simple"));
        assert_eq!(t.resolution_markers, vec!["platform_machine == 'x86_64'"]);
        assert_eq!(t.dependencies.len(), 2);
        let c = &t.dependencies[1];
        assert_eq!((&*c.name, c.version.as_deref(), c.extra.len()), ("c", Some("2"), 2));
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
            ("[package.dev-dependencies]", "[package.metadata]\nrequires-dev = []\n[package.metadata.requires-dev]"),
            ("[package.dev-dependencies]", "[package.metadata]\na = \"x\"\na = \"y\"\n[package.dev-dependencies]"),
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

    #[test]
    fn metadata_is_checked_and_thin_blanks_whole_elements() {
        let meta = "[package.metadata]\nrequires-dist = [\n    { name = \"torch\", specifier = \">=2\" },\n    { name = \"deep-ep\", git = \"https://x\" },\n]\nprovides-extras = [\"gpu\"]\n\n[package.metadata.requires-dev]\ndev = [{ name = \"x\" }]\n";
        let block = format!("[[package]]\nname = \"a\"\ndependencies = [\n    {{ name = \"deep-ep\" }},\n    {{ name = \"b\" }},\n]\n\n{meta}");
        assert!(table(&block).is_none(), "a list of inline tables on one line is left to toml");
        let block = block.replace("dev = [{ name = \"x\" }]", "dev = [\n    { name = \"x\" },\n]");
        assert_eq!(table(&block).expect("uv's shape").dependencies.len(), 2);
        let thinned = thin(&block, |l| l.contains("deep-ep")).unwrap();
        assert_eq!(thinned.len(), block.len());
        assert_eq!(thinned.lines().count(), block.lines().count());
        assert!(
            thinned.contains("deep-ep\" }") && !thinned.contains("\"b\"") && !thinned.contains("torch"),
            "{thinned}"
        );
        assert!(thin(BLOCK, |_| false).is_none(), "a table with file lines is not thinned");
        // resolution-markers and ill-typed elements (blanking them would hide an error) stay
        let odd = block
            .replace("dependencies = [", "resolution-markers = [\n    \"m\",\n]\ndependencies = [")
            .replace("{ name = \"b\" }", "{ name = \"b\", source = { git = { a = \"b\" } } }")
            .replace("{ name = \"torch\", specifier", "{ name = \"torch\", git = [\"x\"], specifier");
        let thinned = thin(&odd, |_| false).unwrap();
        assert!(thinned.contains("\"m\",") && thinned.contains("\"b\"") && thinned.contains("torch"), "{thinned}");
        assert!(!thinned.contains("deep-ep") && !thinned.contains("\"x\" }"), "{thinned}");
    }
}
