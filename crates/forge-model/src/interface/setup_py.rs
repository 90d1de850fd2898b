//! What setup.py at a revision does with its environment besides reading
//! knobs, read statically from its lines: build variables it assigns itself,
//! what it asserts about them, files in the tree that switch the build,
//! variables read with a `None` default and then used as strings, and the
//! extension builder it imports. Each finding carries its `file:line`.
//! Pure text scanning: no git, no Python.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A build variable setup.py assigns itself (`os.environ['X'] = ...`),
/// other than as a default (`os.getenv('X', d)`, or under `if X is unset`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assign {
    pub name: String,
    pub at: String,
    /// The right-hand side as written.
    pub value: String,
    /// The literal value, when the right-hand side is one.
    pub literal: Option<String>,
    /// The `if`/`else` line it sits under (None: every build runs it).
    pub when: Option<String>,
}

/// What an `assert` of setup.py demands of a build variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Must {
    /// Set (not None, not empty): `assert x is not None`, `assert x and ...`.
    Set,
    /// Off: `assert not flag` where the flag is read from the variable.
    Off,
    /// Absent: `assert 'X' not in os.environ`.
    Absent,
}

/// An unconditional `assert` on a build variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Require {
    pub name: String,
    pub must: Must,
    pub at: String,
    /// The assert's message (empty when it has none).
    pub message: String,
}

/// A file whose presence in the tree changes the build (`if ... and
/// os.path.isfile(os.path.join(current_dir, '.use_nixl')): use_nixl = True`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    /// The file, relative to the source root; present at this revision.
    pub file: String,
    pub at: String,
    /// The variable whose effect it turns on (None: not recognised).
    pub turns_on: Option<String>,
    /// Variables that must be on for the switch to apply (the other terms of its `if`).
    pub when_on: Vec<String>,
}

/// A variable read with a `None` default and used as a string before any check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoneUse {
    pub name: String,
    pub read_at: String,
    pub used_at: String,
    /// The line that uses it.
    pub usage: String,
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

fn code(l: &str) -> bool {
    let t = l.trim_start();
    !t.is_empty() && !t.starts_with('#')
}

/// A plain string literal at the start of `s`.
fn literal_at(s: &str) -> Option<(String, &str)> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let end = s[1..].find(q)?;
    Some((s[1..1 + end].to_string(), &s[2 + end..]))
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit()) && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// For each line, the nearest code line above it with less indentation (its
/// block header), computed in one pass with a stack of open blocks.
fn headers(lines: &[&str]) -> Vec<Option<usize>> {
    let mut open: Vec<usize> = Vec::new();
    let mut out = Vec::with_capacity(lines.len());
    for (i, l) in lines.iter().enumerate() {
        let level = indent(l);
        while open.last().is_some_and(|&j| indent(lines[j]) >= level) {
            open.pop();
        }
        out.push(open.last().copied());
        if code(l) {
            open.push(i);
        }
    }
    out
}

/// The block header line (index) that decides whether line `i` runs: the
/// nearest enclosing `if`/`elif`/`else`/`for`/`while`/`except`, or None
/// when it runs whenever its function (or the `__main__` block) does.
/// `try:` and `with` are looked through.
fn guard(lines: &[&str], heads: &[Option<usize>], i: usize) -> Option<usize> {
    let mut j = heads[i];
    while let Some(h) = j {
        let t = lines[h].trim();
        if t.starts_with("def ") || t.starts_with("class ") || t.starts_with("if __name__") {
            return None;
        }
        if !(t.starts_with("try:") || t.starts_with("with ")) {
            return Some(h);
        }
        j = heads[h];
    }
    None
}

/// How far below a read its first use is looked for (bounds the work on a hostile file).
const USE_WINDOW: usize = 400;

/// Local variables assigned from an environment read: name -> (variable, line, the read has a None default).
fn env_vars(lines: &[&str]) -> BTreeMap<String, (String, usize, bool)> {
    let mut out = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim();
        let Some((lhs, rhs)) = t.split_once('=') else { continue };
        let (lhs, rhs) = (lhs.trim(), rhs.trim());
        if !is_ident(lhs) || rhs.starts_with('=') {
            continue;
        }
        for pat in ["os.getenv(", "os.environ.get("] {
            let Some(p) = rhs.find(pat) else { continue };
            let Some((name, rest)) = literal_at(rhs[p + pat.len()..].trim_start()) else { continue };
            let rest = rest.trim_start();
            let none = p == 0 && (rest == ")" || rest.replace(' ', "") == ",None)");
            out.insert(lhs.to_string(), (name, i + 1, none));
        }
    }
    out
}

/// `os.environ['X'] = value` at line start: (X, value).
fn assignment(t: &str) -> Option<(String, String)> {
    let rest = t.strip_prefix("os.environ[")?;
    let (name, rest) = literal_at(rest)?;
    let rest = rest.trim_start().strip_prefix(']')?.trim_start().strip_prefix('=')?;
    (!rest.starts_with('=')).then(|| (name, rest.trim().to_string()))
}

/// A header that only runs when `name` is unset (`if os.getenv('X', None) is None:`, `if 'X' not in os.environ:`).
fn only_when_unset(header: &str, name: &str) -> bool {
    let h = header.replace('"', "'");
    let q = format!("'{name}'");
    h.starts_with("if ")
        && h.contains(&q)
        && (h.contains("is None") || h.contains(&format!("{q} not in os.environ")) || h.starts_with("if not os."))
}

/// Build variables assigned in `file` other than as defaults.
pub fn assigns(file: &str, text: &str) -> Vec<Assign> {
    let lines: Vec<&str> = text.lines().collect();
    let heads = headers(&lines);
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some((name, value)) = assignment(l.trim()) else { continue };
        let quoted = [format!("'{name}'"), format!("\"{name}\"")];
        let defaults = (value.starts_with("os.getenv(") || value.starts_with("os.environ.get("))
            && quoted.iter().any(|q| value.contains(q.as_str()));
        let when = guard(&lines, &heads, i).map(|h| lines[h].trim().to_string());
        if defaults || when.as_deref().is_some_and(|h| only_when_unset(h, &name)) {
            continue;
        }
        let literal = literal_at(&value).filter(|(_, rest)| rest.trim().is_empty()).map(|(s, _)| s);
        out.push(Assign { name, at: format!("{file}:{}", i + 1), value, literal, when });
    }
    out
}

/// `assert <cond>, <message>`: the condition and the message literal.
fn split_assert(t: &str) -> Option<(String, String)> {
    let body = t.strip_prefix("assert ")?;
    for (p, _) in body.match_indices(',').collect::<Vec<_>>().into_iter().rev() {
        let m = body[p + 1..].trim_start();
        let m = m.strip_prefix('f').unwrap_or(m);
        if let Some((msg, rest)) = literal_at(m) {
            if rest.trim().is_empty() {
                return Some((body[..p].trim().to_string(), msg));
            }
        }
    }
    Some((body.trim().to_string(), String::new()))
}

/// Unconditional asserts on build variables in `file`.
pub fn requires(file: &str, text: &str) -> Vec<Require> {
    let lines: Vec<&str> = text.lines().collect();
    let heads = headers(&lines);
    let vars = env_vars(&lines);
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some((cond, message)) = split_assert(l.trim()) else { continue };
        if guard(&lines, &heads, i).is_some() {
            continue;
        }
        let at = format!("{file}:{}", i + 1);
        for term in cond.split(" and ").map(str::trim) {
            let term = term.trim_start_matches('(').trim_end_matches(')');
            let found = if let Some(v) = term.strip_prefix("not ") {
                vars.get(v.trim()).map(|(n, _, _)| (n.clone(), Must::Off))
            } else if let Some(v) = term.strip_suffix(" is not None") {
                vars.get(v.trim()).map(|(n, _, _)| (n.clone(), Must::Set))
            } else if let Some(n) = term.strip_suffix(" not in os.environ").and_then(|q| literal_at(q.trim())) {
                Some((n.0, Must::Absent))
            } else {
                vars.get(term).map(|(n, _, _)| (n.clone(), Must::Set))
            };
            if let Some((name, must)) = found {
                if !out.iter().any(|r: &Require| r.name == name && r.must == must) {
                    out.push(Require { name, must, at: at.clone(), message: message.clone() });
                }
            }
        }
    }
    out
}

/// The last string literal argument of an `isfile(`/`exists(` call on `t`
/// (directly or through `os.path.join(...)`): a path relative to the source root.
fn checked_file(t: &str) -> Option<String> {
    let p = t
        .find("isfile(")
        .map(|p| p + "isfile(".len())
        .or_else(|| t.find("path.exists(").map(|p| p + "path.exists(".len()))?;
    let args = &t[p..];
    let args = args.strip_prefix("os.path.join(").unwrap_or(args);
    let close = args.find(')')?;
    let last = args[..close].rsplit(',').next()?.trim();
    let (s, rest) = literal_at(last)?;
    let ok =
        rest.is_empty() && !s.is_empty() && !s.starts_with('/') && !s.split('/').any(|c| c == ".." || c.is_empty());
    ok.then_some(s)
}

/// Files `file` checks for with `if ... isfile(...)` that are present at
/// this revision (`present`), and what they turn on.
pub fn switches(file: &str, text: &str, present: &dyn Fn(&str) -> bool) -> Vec<Switch> {
    let lines: Vec<&str> = text.lines().collect();
    let vars = env_vars(&lines);
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim();
        if !t.starts_with("if ") || !t.ends_with(':') {
            continue;
        }
        let Some(path) = checked_file(t) else { continue };
        if !present(&path) {
            continue;
        }
        // The body: a `flag = True` on a variable read from the environment.
        let body = lines[i + 1..].iter().take(USE_WINDOW).take_while(|b| !code(b) || indent(b) > indent(l));
        let turns_on = body
            .filter_map(|b| b.trim().strip_suffix("= True"))
            .find_map(|v| vars.get(v.trim()))
            .map(|(n, _, _)| n.clone());
        let cond = t["if ".len()..t.len() - 1].to_string();
        let when_on = cond
            .split(" and ")
            .map(str::trim)
            .filter(|term| !term.starts_with("not ") && is_ident(term))
            .filter_map(|term| vars.get(term).map(|(n, _, _)| n.clone()))
            .collect();
        out.push(Switch { file: path, at: format!("{file}:{}", i + 1), turns_on, when_on });
    }
    out
}

/// Whether `line` uses `v` as a string (a TypeError when it is None).
fn string_use(line: &str, v: &str) -> bool {
    let words = |s: &str| s.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|w| w == v);
    if !words(line) {
        return false;
    }
    let l = line.replace(' ', "");
    [
        format!("in{v}:"),
        format!("in{v})"),
        format!("{v}."),
        format!("{v}+"),
        format!("+{v}"),
        format!("join({v}"),
        format!("exists({v})"),
        format!("Path({v})"),
    ]
    .iter()
    .any(|p| l.contains(p.as_str()) && !l.contains(&format!("{v}.get(")))
}

/// Whether `line` checks `v` for None/emptiness before using it.
fn guards(line: &str, v: &str) -> bool {
    let t = line.trim();
    let w = |p: &str| t.contains(&p.replace('V', v));
    t.starts_with("assert ")
        || w("V is None")
        || w("V is not None")
        || w("if V")
        || w("if not V")
        || w("V or ")
        || w("and V")
        || w("or V")
        || t.starts_with(&format!("{v} ="))
}

/// Variables read with a None default whose first use is as a string.
pub fn none_uses(file: &str, text: &str) -> Vec<NoneUse> {
    let lines: Vec<&str> = text.lines().collect();
    // One pass: the lines each identifier appears on, and each code line's indentation.
    let mut words: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        for w in l.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| is_ident(w)) {
            let at = words.entry(w).or_default();
            if at.last() != Some(&i) {
                at.push(i);
            }
        }
    }
    let levels: Vec<Option<usize>> = lines.iter().map(|l| code(l).then(|| indent(l))).collect();
    let mut out = Vec::new();
    for (v, (name, line, none)) in env_vars(&lines) {
        if !none {
            continue;
        }
        // `line` is 1-based: the lines after the read start at index `line`.
        let base = indent(lines[line - 1]);
        let Some(seen) = words.get(v.as_str()) else { continue };
        let next = seen.partition_point(|&j| j < line);
        let Some(&j) = seen.get(next).filter(|&&j| j < line + USE_WINDOW) else { continue };
        if levels[line..j].iter().flatten().any(|&lv| lv < base) || guards(lines[j], &v) || !string_use(lines[j], &v) {
            continue;
        }
        out.push(NoneUse {
            name,
            read_at: format!("{file}:{line}"),
            used_at: format!("{file}:{}", j + 1),
            usage: lines[j].trim().to_string(),
        });
    }
    out
}

/// An extension builder imported from another framework than torch
/// (`from paddle.utils.cpp_extension import ...`): (line, module).
pub fn foreign_builder(text: &str) -> Option<(usize, String)> {
    text.lines().enumerate().find_map(|(i, l)| {
        let t = l.trim_start();
        let module = t
            .strip_prefix("from ")
            .and_then(|r| r.split_whitespace().next())
            .or_else(|| t.strip_prefix("import ").and_then(|r| r.split([' ', ',']).next()))?;
        let foreign = module.split('.').any(|c| c == "cpp_extension") && module.split('.').next() != Some("torch");
        foreign.then(|| (i + 1, module.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_that_override_and_those_that_only_default() {
        let s = "if __name__ == '__main__':\n    os.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'\n    os.environ['A'] = os.getenv('A', '1')\n    if os.getenv('B', None) is None:\n        os.environ['B'] = '9.0'\n    if x != '9.0':\n        os.environ['C'] = '1'\n";
        let a = assigns("setup.py", s);
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(
            (a[0].name.as_str(), a[0].at.as_str(), a[0].literal.as_deref(), a[0].when.as_deref()),
            ("TORCH_CUDA_ARCH_LIST", "setup.py:2", Some("9.0"), None)
        );
        assert_eq!((a[1].name.as_str(), a[1].when.as_deref()), ("C", Some("if x != '9.0':")));
    }

    #[test]
    fn asserts_become_requirements_only_when_unconditional() {
        let s = "def f():\n    m = os.getenv(\"HYBRID_EP_MULTINODE\", \"0\").strip() in {'1'}\n    assert not m, \"Multinode is not supported yet\"\n    d = os.getenv('NVSHMEM_DIR', None)\n    assert d is not None and os.path.exists(d), 'Failed to find NVSHMEM'\n    if z:\n        assert not d\n";
        let r = requires("setup.py", s);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(
            (r[0].name.as_str(), r[0].must, r[0].at.as_str(), r[0].message.as_str()),
            ("HYBRID_EP_MULTINODE", Must::Off, "setup.py:3", "Multinode is not supported yet")
        );
        assert_eq!(
            (r[1].name.as_str(), r[1].must, r[1].message.as_str()),
            ("NVSHMEM_DIR", Must::Set, "Failed to find NVSHMEM")
        );
    }

    #[test]
    fn a_committed_file_that_turns_a_flag_on() {
        let s = "def f():\n    cur = x\n    multi = os.getenv(\"HYBRID_EP_MULTINODE\", \"0\") == '1'\n    use_nixl = os.getenv(\"USE_NIXL\", \"0\") == '1'\n    if multi and not use_nixl and os.path.isfile(os.path.join(cur, \".use_nixl\")):\n        use_nixl = True\n";
        let sw = switches("setup.py", s, &|p| p == ".use_nixl");
        assert_eq!(
            sw,
            [Switch {
                file: ".use_nixl".into(),
                at: "setup.py:5".into(),
                turns_on: Some("USE_NIXL".into()),
                when_on: vec!["HYBRID_EP_MULTINODE".into()]
            }]
        );
        assert!(switches("setup.py", s, &|_| false).is_empty(), "absent at the revision: no switch");
    }

    #[test]
    fn a_none_default_used_as_a_string_and_one_checked_first() {
        let s = "def f():\n    lp=os.getenv('LIBRARY_PATH', None)\n    if \"stubs\" in lp:\n        pass\n    d = os.getenv('NVSHMEM_DIR', None)\n    if d is None:\n        d = 'x'\n    e = os.getenv('E', '')\n    e.split(':')\n";
        let u = none_uses("setup.py", s);
        assert_eq!(u.len(), 1, "{u:?}");
        assert_eq!(
            (u[0].name.as_str(), u[0].read_at.as_str(), u[0].used_at.as_str()),
            ("LIBRARY_PATH", "setup.py:2", "setup.py:3")
        );
    }

    #[test]
    fn a_large_flat_file_is_read_in_bounded_time() {
        // Lines of assignments and None reads at one level: no quadratic walk.
        const N: usize = 30_000;
        let body: String =
            (0..N).map(|i| format!("    os.environ['A{i}'] = '1'\n    v{i} = os.getenv('B{i}', None)\n")).collect();
        let text = format!("def f():\n{body}");
        assert_eq!(assigns("setup.py", &text).len(), N);
        assert!(none_uses("setup.py", &text).is_empty());
        assert!(requires("setup.py", &text).is_empty());
    }

    #[test]
    fn another_frameworks_extension_builder() {
        assert_eq!(
            foreign_builder("import os\nfrom paddle.utils.cpp_extension import BuildExtension\n"),
            Some((2, "paddle.utils.cpp_extension".into()))
        );
        assert_eq!(foreign_builder("from torch.utils.cpp_extension import BuildExtension\nfrom setuptools.command.build_ext import build_ext\n"), None);
    }
}
