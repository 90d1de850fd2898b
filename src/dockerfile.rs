//! Dockerfile scanning for `lock check`: ARG/ENV defaults that carry a DeepEP
//! rev, an arch list, the multinode flag, the transport, RDMA_CORE_HOME or the
//! rdma-core ref, compared with pins.toml. Owns a small Dockerfile reader
//! (continuations, comments, heredocs, quoting, `${VAR}` expansion with ARG
//! scoping across stages); must not run docker or read anything but the
//! Dockerfiles it is given.
//!
//! What is detected (values are the defaults written in the file; a
//! `--build-arg` given at build time is not visible here):
//! - a DeepEP rev: a variable whose name mentions DEEPEP/DEEP_EP and ends in
//!   REV/REF/COMMIT/SHA; any ARG/ENV value or RUN line holding a
//!   `.../DeepEP.git@<rev>` URL; `git checkout <rev>` / `git reset --hard <rev>`
//!   in a RUN that mentions DeepEP;
//! - the build configuration of each stage (and of global ARGs no stage uses):
//!   TORCH_CUDA_ARCH_LIST (else any `*CUDA_ARCH_LIST`), HYBRID_EP_MULTINODE,
//!   USE_NIXL, RDMA_CORE_HOME, checked *together* against the variants of
//!   pins.toml (arch lists as sets). A stage that names its variant
//!   (VARIANT/DEEPEP_VARIANT ARG) gets one finding per differing setting; any
//!   other build no variant declares gets `dockerfile-build-undeclared`, whose
//!   fix is a ready-to-paste `[[variant]]` per platform (never a narrowed build);
//! - the rdma-core ref (`RDMA_CORE_REF`, `*RDMA_CORE*_TAG|VERSION`) against `[rdma_core] ref`.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context, Result};

use crate::error::Failure;
use crate::findings::{Finding, Severity};
use crate::pins::{is_full_sha, Arch, ArchList, Pins, Transport, Variant};

/// Dockerfiles of a project: `Dockerfile*` at the root and `docker/**/Dockerfile*`
/// (each group sorted), then `extra` in the order given (a missing one is a usage error).
pub fn discover(project: &Path, extra: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let is_dockerfile = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("Dockerfile") && !n.ends_with(".dockerignore"))
    };
    let mut root: Vec<PathBuf> = match std::fs::read_dir(project) {
        Ok(rd) => rd.flatten().map(|e| e.path()).filter(|p| p.is_file() && is_dockerfile(p)).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::usage(format!("project folder not found: {}", project.display()))
                .hint("check --project")
                .into())
        }
        Err(e) => return Err(e).with_context(|| format!("listing {}", project.display())),
    };
    root.sort();
    // Bounded: a hostile tree cannot make discovery walk forever (links are not followed).
    let mut nested: Vec<PathBuf> = walkdir::WalkDir::new(project.join("docker"))
        .max_depth(16)
        .into_iter()
        .take(100_000)
        .flatten()
        .filter(|e| e.path().is_file() && is_dockerfile(e.path()))
        .map(|e| e.into_path())
        .collect();
    nested.sort();
    let mut out = root;
    out.extend(nested);
    for p in extra {
        if !p.is_file() {
            return Err(Failure::usage(format!("Dockerfile not found: {}", p.display()))
                .hint("check the path given to --dockerfile")
                .into());
        }
        let same = |q: &PathBuf| q.canonicalize().ok() == p.canonicalize().ok();
        if !out.iter().any(same) {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Check Dockerfiles. `revs` is the intended revision per architecture (from
/// pins.toml, or from pyproject.toml under --no-pins); `pins` is None under
/// --no-pins (then only revisions are checked).
pub fn check(files: &[PathBuf], pins: Option<&Pins>, revs: &BTreeMap<Arch, String>) -> Result<Vec<Finding>> {
    let mut out = Vec::new();
    for f in files {
        let text = crate::input::read_text(f, "Dockerfile", crate::input::cap::TEXT)?;
        out.extend(check_text(&text, f, pins, revs));
    }
    Ok(out)
}

/// Check one Dockerfile's text; `file` is used in findings.
pub fn check_text(text: &str, file: &Path, pins: Option<&Pins>, revs: &BTreeMap<Arch, String>) -> Vec<Finding> {
    let model = Model::read(text);
    let mut c = Checker { file, pins, revs, out: Vec::new(), seen: BTreeSet::new() };
    for d in &model.defs {
        c.def(d, model.platform_of(d));
    }
    for u in &model.unverifiable {
        c.unverifiable_def(u);
    }
    for r in &model.runs {
        c.run(r, model.stages[r.stage].platform);
    }
    for (cfg, platform) in model.configs() {
        c.config(&cfg, platform);
    }
    c.out
}

/// Every instruction named `keyword` (upper case: `RUN`, `COPY`): its 1-based
/// line and its arguments (continuations joined, heredoc bodies appended after a newline).
pub fn instructions_named(text: &str, keyword: &str) -> Vec<(usize, String)> {
    instructions(text).0.into_iter().filter(|i| i.keyword == keyword).map(|i| (i.line, i.args)).collect()
}

/// The variant a Dockerfile build needs: the one a stage names
/// (`DEEPEP_VARIANT`/`VARIANT`), else every declared variant its DeepEP build
/// settings agree with (for the stage's platform).
#[derive(Debug, Clone)]
pub struct Need {
    /// Any of these (a build two variants of different architectures describe).
    pub variants: Vec<String>,
    pub file: PathBuf,
    /// 1-based; 0 when the need has no line (a recipe).
    pub line: usize,
    /// What the file does, in words, before the variants are named.
    pub what: String,
}

const BUILDS: &str = "builds DeepEP as";

/// What the Dockerfiles' DeepEP builds need (stages that build none, or that
/// no variant describes, need nothing here: `check` reports those).
pub fn needs(files: &[PathBuf], pins: &Pins) -> Result<Vec<Need>> {
    let (revs, mut out) = (BTreeMap::new(), Vec::new());
    for f in files {
        let text = crate::input::read_text(f, "Dockerfile", crate::input::cap::TEXT)?;
        let model = Model::read(&text);
        let mut c = Checker { file: f, pins: Some(pins), revs: &revs, out: Vec::new(), seen: BTreeSet::new() };
        for (cfg, platform) in model.configs() {
            out.extend(c.need(pins, &cfg, platform));
        }
    }
    Ok(out)
}

// ---- reading ----------------------------------------------------------------

/// One instruction: keyword (upper case), arguments (continuations joined,
/// heredoc bodies appended after a newline), 1-based line of its keyword.
#[derive(Debug, Clone, PartialEq)]
struct Instruction {
    keyword: String,
    args: String,
    line: usize,
}

fn instructions(text: &str) -> (Vec<Instruction>, char) {
    let lines: Vec<&str> = text.lines().collect();
    let mut escape = '\\';
    for l in &lines {
        let Some(d) = l.trim().strip_prefix('#') else { break };
        match d.split_once('=') {
            Some((k, v)) if k.trim().eq_ignore_ascii_case("escape") => escape = v.trim().chars().next().unwrap_or('\\'),
            Some((k, _)) if !k.trim().contains(' ') => {}
            _ => break,
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim();
        if t.is_empty() || t.starts_with('#') {
            i += 1;
            continue;
        }
        let line = i + 1;
        let mut buf = String::new();
        let mut first = true;
        while i < lines.len() {
            let l = lines[i];
            i += 1;
            if !first && (l.trim().is_empty() || l.trim_start().starts_with('#')) {
                continue;
            }
            first = false;
            let end = l.trim_end();
            match end.strip_suffix(escape) {
                Some(body) => buf.push_str(body),
                None => {
                    buf.push_str(end);
                    break;
                }
            }
        }
        let buf = buf.trim_start();
        let (kw, args) = buf.split_once(char::is_whitespace).unwrap_or((buf, ""));
        let keyword = kw.to_ascii_uppercase();
        let mut args = args.trim().to_string();
        if keyword == "RUN" || keyword == "COPY" {
            for (delim, strip) in heredoc_delims(&args) {
                args.push('\n');
                while i < lines.len() {
                    let l = lines[i];
                    i += 1;
                    let cmp = if strip { l.trim_start_matches('\t') } else { l };
                    if cmp == delim {
                        break;
                    }
                    args.push_str(l);
                    args.push('\n');
                }
            }
        }
        out.push(Instruction { keyword, args, line });
    }
    (out, escape)
}

/// `<<EOF`, `<<-EOF`, `<<"EOF"`: (delimiter, strip leading tabs).
fn heredoc_delims(args: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut rest = args;
    while let Some(p) = rest.find("<<") {
        let mut s = &rest[p + 2..];
        let strip = s.starts_with('-');
        if strip {
            s = &s[1..];
        }
        let s = s.trim_start_matches(['"', '\'']);
        let name: String = s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !name.is_empty() {
            out.push((name.clone(), strip));
        }
        rest = &s[name.len()..];
    }
    out
}

/// Split on unquoted, unescaped whitespace, keeping quotes and escapes in the words.
fn split_words(s: &str, escape: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, c) if c == escape && quote != Some('\'') => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                cur.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                cur.push(c);
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A variable definition (ARG or ENV) in some scope.
#[derive(Debug)]
struct Def {
    kw: &'static str,
    name: String,
    line: usize,
    /// The default after expansion; None when it is only known at build time
    /// (an ARG without default, or a reference to one).
    value: Option<String>,
    /// The definition this value is copied from (`ENV A=${B}`, a stage `ARG B`
    /// re-declaring a global one).
    via: Option<Rc<Def>>,
    /// Index of the stage; None for global ARGs (before the first FROM).
    stage: Option<usize>,
}

impl Def {
    /// The definition whose line holds the literal value.
    fn source(self: &Rc<Self>) -> Rc<Def> {
        let mut d = self.clone();
        while let Some(v) = d.via.clone() {
            d = v;
        }
        d
    }
    /// `TORCH_CUDA_ARCH_LIST (ENV, line 14, from ARG DEEPEP_CUDA_ARCH_LIST at line 5)`.
    fn describe(self: &Rc<Self>) -> String {
        let mut s = format!("{} ({}, line {}", self.name, self.kw, self.line);
        let mut d = self.via.clone();
        while let Some(v) = d {
            s.push_str(&format!(", from {} {} at line {}", v.kw, v.name, v.line));
            d = v.via.clone();
        }
        s.push(')');
        s
    }
}

/// The result of expanding one word.
struct Expanded {
    text: Option<String>,
    /// Set when the word is exactly one variable reference.
    single: Option<Rc<Def>>,
    /// Every definition referenced (and used).
    refs: Vec<Rc<Def>>,
    /// Expansions this reader does not evaluate (`${A/x/y}`, `${A:1:7}`: not
    /// POSIX sh, so what they give depends on the image's shell), as written.
    unverifiable: Vec<String>,
}

/// Quote removal and `$VAR`, `${VAR}`, `${VAR:-w}`, `${VAR-w}`, `${VAR:+w}`,
/// `${VAR+w}` expansion, as Docker does for ARG/ENV/FROM. `lookup` returns the
/// definition in scope.
fn expand(word: &str, escape: char, lookup: &dyn Fn(&str) -> Option<Rc<Def>>) -> Expanded {
    let chars: Vec<char> = word.chars().collect();
    expand_chars(&chars, escape, lookup, 0)
}

/// `${A:-${A:-...}}` nested deeper than this is unknown (not expanded).
const MAX_NESTING: usize = 32;
/// An expansion longer than this is unknown (`B=${A}${A}`, `C=${B}${B}`, ...
/// would otherwise double at each step).
const MAX_EXPANDED: usize = 64 << 10;

/// [`expand`] on a slice: nested words are sub-slices (never copied), so a
/// deeply nested word costs linear time and memory.
fn expand_chars(chars: &[char], escape: char, lookup: &dyn Fn(&str) -> Option<Rc<Def>>, depth: usize) -> Expanded {
    if depth > MAX_NESTING {
        return Expanded { text: None, single: None, refs: Vec::new(), unverifiable: Vec::new() };
    }
    let mut out = String::new();
    let mut known = true;
    let mut refs: Vec<Rc<Def>> = Vec::new();
    let mut unverifiable: Vec<String> = Vec::new();
    let mut literal = false;
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if quote == Some('\'') {
            if c == '\'' {
                quote = None;
            } else {
                out.push(c);
                literal = true;
            }
            i += 1;
            continue;
        }
        if c == escape {
            if let Some(&n) = chars.get(i + 1) {
                out.push(n);
                literal = true;
            }
            i += 2;
            continue;
        }
        if (c == '"' || c == '\'') && quote.is_none() {
            quote = Some(c);
            i += 1;
            continue;
        }
        if quote == Some('"') && c == '"' {
            quote = None;
            i += 1;
            continue;
        }
        if c == '$' {
            let (name, op, (wa, wb), next) = parse_ref(chars, i);
            if name.is_empty() {
                out.push('$');
                literal = true;
                i += 1;
                continue;
            }
            let raw: String = chars[i..next].iter().collect();
            i = next;
            let def = lookup(&name);
            let val = def.as_ref().and_then(|d| d.value.clone());
            let set = def.is_some();
            let nonempty = val.as_deref().is_some_and(|v| !v.is_empty());
            let sub = || expand_chars(&chars[wa..wb], escape, lookup, depth + 1);
            match op.as_deref() {
                None => {
                    if let Some(d) = def {
                        refs.push(d);
                    }
                    match val {
                        Some(v) => out.push_str(&v),
                        None => known = false,
                    }
                }
                Some(":-") | Some("-") | Some(":=") | Some("=") => {
                    // An ARG without default counts as unset: the default is what a build gets without --build-arg.
                    let colon = op.as_deref().is_some_and(|o| o.starts_with(':'));
                    let use_default = if colon { !nonempty } else { !set || val.is_none() };
                    if use_default {
                        let e = sub();
                        unverifiable.extend(e.unverifiable);
                        literal = true;
                        match e.text {
                            Some(t) => out.push_str(&t),
                            None => known = false,
                        }
                    } else {
                        refs.push(def.expect("set"));
                        out.push_str(&val.expect("known"));
                    }
                }
                Some(":+") | Some("+") => {
                    let take = if op.as_deref() == Some(":+") { nonempty } else { set && val.is_some() };
                    literal = true;
                    if take {
                        let e = sub();
                        unverifiable.extend(e.unverifiable);
                        match e.text {
                            Some(t) => out.push_str(&t),
                            None => known = false,
                        }
                    } else if val.is_none() {
                        known = false;
                    }
                }
                Some(":?") | Some("?") => {
                    // Set: the value; unset: the build stops (nothing to check).
                    let ok = if op.as_deref() == Some(":?") { nonempty } else { set && val.is_some() };
                    match (ok, def) {
                        (true, Some(d)) => {
                            refs.push(d);
                            out.push_str(&val.expect("known"));
                        }
                        _ => known = false,
                    }
                }
                Some(LENGTH) => {
                    literal = true;
                    match val {
                        Some(v) => out.push_str(&v.chars().count().to_string()),
                        None => known = false,
                    }
                }
                Some(o @ ("#" | "##" | "%" | "%%")) => {
                    literal = true;
                    if let Some(d) = def.clone() {
                        refs.push(d);
                    }
                    let e = sub();
                    unverifiable.extend(e.unverifiable);
                    match (val, e.text) {
                        (Some(v), Some(pat)) => match strip_pattern(&v, &pat, o) {
                            Some(t) => out.push_str(&t),
                            None => {
                                known = false;
                                unverifiable.push(raw);
                            }
                        },
                        _ => known = false,
                    }
                }
                Some(_) => {
                    known = false;
                    unverifiable.push(raw);
                }
            }
            if out.len() > MAX_EXPANDED {
                return Expanded { text: None, single: None, refs, unverifiable };
            }
            continue;
        }
        out.push(c);
        literal = true;
        i += 1;
    }
    let single = (refs.len() == 1 && !literal).then(|| refs[0].clone());
    Expanded { text: known.then_some(out), single, refs, unverifiable }
}

/// The operator of `${#NAME}` (not a character sequence of the source).
const LENGTH: &str = "#len";
/// Values longer than this are not matched against patterns (cost is
/// quadratic in the value); such an expansion cannot be verified.
const MAX_PATTERN_VALUE: usize = 4096;

/// `${V#pat}`, `${V##pat}`, `${V%pat}`, `${V%%pat}` as sh evaluates them:
/// remove the shortest/longest prefix/suffix matching the glob `pat`. `None`:
/// too long to evaluate.
fn strip_pattern(v: &str, pat: &str, op: &str) -> Option<String> {
    let s: Vec<char> = v.chars().collect();
    let p: Vec<char> = pat.chars().collect();
    if s.len() > MAX_PATTERN_VALUE || p.len() > MAX_PATTERN_VALUE {
        return None;
    }
    let n = s.len();
    let cut = match op {
        "#" => (0..=n).find(|&k| glob(&p, &s[..k])).map(|k| (k, n)),
        "##" => (0..=n).rev().find(|&k| glob(&p, &s[..k])).map(|k| (k, n)),
        "%" => (0..=n).rev().find(|&k| glob(&p, &s[k..])).map(|k| (0, k)),
        _ => (0..=n).find(|&k| glob(&p, &s[k..])).map(|k| (0, k)),
    };
    Some(match cut {
        Some((a, b)) => s[a..b].iter().collect(),
        None => v.to_string(),
    })
}

/// Whether `s` matches the sh glob `p` (`*`, `?`, `[...]` with `!`/`^` and
/// ranges, `\x` literal). Iterative, with one backtrack point per `*`.
fn glob(p: &[char], s: &[char]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, si));
                pi += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => class(&p[pi..], s[si]),
            Some('\\') if pi + 1 < p.len() => (p[pi + 1] == s[si]).then_some(2),
            Some(c) => (*c == s[si]).then_some(1),
            None => None,
        };
        match (step, star) {
            (Some(k), _) => {
                pi += k;
                si += 1;
            }
            (None, Some((sp, ss))) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            (None, None) => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// A bracket expression at the start of `p` against `c`: the pattern
/// characters it spans when `c` matches; `None` when it does not. An unclosed
/// `[` is a literal `[`.
fn class(p: &[char], c: char) -> Option<usize> {
    let Some(end) = p.iter().skip(2).position(|x| *x == ']').map(|e| e + 2) else {
        return (c == '[').then_some(1);
    };
    let body = &p[1..end];
    let (neg, body) = match body.first() {
        Some('!') | Some('^') => (true, &body[1..]),
        _ => (false, body),
    };
    let mut hit = false;
    let mut k = 0;
    while k < body.len() {
        if k + 2 < body.len() && body[k + 1] == '-' {
            hit |= body[k] <= c && c <= body[k + 2];
            k += 3;
        } else {
            hit |= body[k] == c;
            k += 1;
        }
    }
    (hit != neg).then_some(end + 1)
}

/// Parse `$NAME` or `${NAME<op>word}` at `chars[i] == '$'`: (name, op, word's
/// range in `chars`, index after).
fn parse_ref(chars: &[char], i: usize) -> (String, Option<String>, (usize, usize), usize) {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if chars.get(i + 1) == Some(&'{') && chars.get(i + 2) == Some(&'#') && chars.get(i + 3).is_some_and(|c| is_name(*c))
    {
        // `${#NAME}`: the length of the value.
        let mut j = i + 3;
        let mut name = String::new();
        while j < chars.len() && is_name(chars[j]) {
            name.push(chars[j]);
            j += 1;
        }
        if chars.get(j) == Some(&'}') {
            return (name, Some(LENGTH.to_string()), (j, j), j + 1);
        }
    }
    if chars.get(i + 1) == Some(&'{') {
        let mut j = i + 2;
        let mut name = String::new();
        while j < chars.len() && is_name(chars[j]) {
            name.push(chars[j]);
            j += 1;
        }
        // The operator: `:-` `:=` `:?` `:+` (`:` alone: a substring), `-` `=` `?` `+`,
        // `#` `##` `%` `%%`, `/` `//` `/#` `/%`; anything else (`^`, `,`, `@`) as one character.
        let mut op = String::new();
        if let Some(&c) = chars.get(j).filter(|c| **c != '}') {
            op.push(c);
            j += 1;
            let second = match c {
                ':' => chars.get(j).filter(|n| "-=?+".contains(**n)),
                '#' | '%' => chars.get(j).filter(|n| **n == c),
                '/' => chars.get(j).filter(|n| "/#%".contains(**n)),
                _ => None,
            };
            if let Some(&n) = second {
                op.push(n);
                j += 1;
            }
        }
        let mut depth = 1;
        let w = j;
        while j < chars.len() {
            match chars[j] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        (name, (!op.is_empty()).then_some(op), (w, j.min(chars.len())), (j + 1).min(chars.len()))
    } else {
        let mut j = i + 1;
        let mut name = String::new();
        while j < chars.len() && is_name(chars[j]) {
            name.push(chars[j]);
            j += 1;
        }
        (name, None, (j, j), j)
    }
}

#[derive(Debug, Default)]
struct Stage {
    name: Option<String>,
    platform: Option<Arch>,
    args: BTreeMap<String, Rc<Def>>,
    envs: BTreeMap<String, Rc<Def>>,
}

impl Stage {
    /// ENV wins over ARG of the same name (Docker's rule).
    fn get(&self, name: &str) -> Option<Rc<Def>> {
        self.envs.get(name).or_else(|| self.args.get(name)).cloned()
    }
}

struct Run {
    stage: usize,
    line: usize,
    /// The RUN text with ARG/ENV references in scope replaced by their values.
    text: String,
    /// Words of the text (expanded where every reference is known), each with
    /// the definitions it references.
    words: Vec<(String, Vec<Rc<Def>>)>,
    /// Expansions in it this reader cannot evaluate (see [`Expanded`]).
    unverifiable: Vec<String>,
}

/// An ARG/ENV whose value goes through an expansion this reader cannot evaluate.
struct Unverifiable {
    kw: &'static str,
    name: String,
    line: usize,
    expr: String,
}

/// What a Dockerfile declares, as the checks need it.
#[derive(Default)]
struct Model {
    global: BTreeMap<String, Rc<Def>>,
    /// Global ARGs some stage re-declares (their value is checked there).
    used_globals: BTreeSet<usize>,
    stages: Vec<Stage>,
    /// Definitions whose value cannot be evaluated here.
    unverifiable: Vec<Unverifiable>,
    /// Every definition in file order.
    defs: Vec<Rc<Def>>,
    runs: Vec<Run>,
}

impl Model {
    fn read(text: &str) -> Model {
        let (ins, escape) = instructions(text);
        let mut m = Model::default();
        for inst in ins {
            let line = inst.line;
            match inst.keyword.as_str() {
                "FROM" => {
                    let words = split_words(&inst.args, escape);
                    let global = |n: &str| m.global.get(n).cloned();
                    let mut platform = None;
                    let mut rest = Vec::new();
                    for w in &words {
                        match w.strip_prefix("--platform=") {
                            Some(p) => platform = expand(p, escape, &global).text.and_then(|p| platform_arch(&p)),
                            None if w.starts_with("--") => {}
                            None => rest.push(w.clone()),
                        }
                    }
                    let image = rest
                        .first()
                        .and_then(|w| expand(w, escape, &global).text)
                        .unwrap_or_default()
                        .to_ascii_lowercase();
                    let name = match rest.as_slice() {
                        [_, as_, n, ..] if as_.eq_ignore_ascii_case("as") => Some(n.to_ascii_lowercase()),
                        _ => None,
                    };
                    let mut stage = Stage { name, platform, ..Stage::default() };
                    if let Some(parent) = m.stages.iter().find(|s| s.name.as_deref() == Some(image.as_str())) {
                        stage.envs = parent.envs.clone();
                        stage.platform = stage.platform.or(parent.platform);
                    }
                    m.stages.push(stage);
                }
                "ARG" => m.arg(&inst.args, line, escape),
                "ENV" => m.env(&inst.args, line, escape),
                "RUN" => m.run(&inst.args, line, escape),
                _ => {}
            }
        }
        m
    }

    /// `ARG NAME[=default] ...`: a global ARG before the first FROM, else a
    /// stage ARG (re-declaring a global one follows it).
    fn arg(&mut self, args: &str, line: usize, escape: char) {
        let m = self;
        let idx = m.stages.len().checked_sub(1);
        for w in split_words(args, escape) {
            let (name, default) = match w.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (w.clone(), None),
            };
            let def = match (default, idx) {
                (Some(v), _) => {
                    let e = match idx {
                        Some(s) => expand(&v, escape, &|n| m.stages[s].get(n)),
                        None => expand(&v, escape, &|n| m.global.get(n).cloned()),
                    };
                    if let Some(expr) = e.unverifiable.first() {
                        let expr = expr.clone();
                        m.unverifiable.push(Unverifiable { kw: "ARG", name: name.clone(), line, expr });
                    }
                    Def { kw: "ARG", name: name.clone(), line, value: e.text, via: e.single, stage: idx }
                }
                (None, Some(_)) => {
                    let g = m.global.get(&name).cloned();
                    if let Some(g) = &g {
                        m.used_globals.insert(g.line);
                    }
                    Def {
                        kw: "ARG",
                        name: name.clone(),
                        line,
                        value: g.as_ref().and_then(|g| g.value.clone()),
                        via: g,
                        stage: idx,
                    }
                }
                (None, None) => Def { kw: "ARG", name: name.clone(), line, value: None, via: None, stage: None },
            };
            let def = Rc::new(def);
            m.defs.push(def.clone());
            match idx {
                Some(s) => m.stages[s].args.insert(name, def),
                None => m.global.insert(name, def),
            };
        }
    }

    /// `ENV K=V ...` or the legacy `ENV K V`: all pairs see the scope before
    /// the instruction.
    fn env(&mut self, args: &str, line: usize, escape: char) {
        let m = self;
        let Some(s) = m.stages.len().checked_sub(1) else { return };
        let words = split_words(args, escape);
        let pairs: Vec<(String, String)> = if words.first().is_some_and(|w| w.contains('=')) {
            words.iter().filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
        } else {
            match args.split_once(char::is_whitespace) {
                Some((k, v)) => vec![(k.to_string(), v.trim().to_string())],
                None => Vec::new(),
            }
        };
        // All pairs of one ENV see the scope before it (Docker's rule).
        let mut unverifiable = Vec::new();
        let defs: Vec<Rc<Def>> = pairs
            .into_iter()
            .map(|(k, v)| {
                let e = expand(&v, escape, &|n| m.stages[s].get(n));
                if let Some(expr) = e.unverifiable.first() {
                    let (name, expr) = (k.clone(), expr.clone());
                    unverifiable.push(Unverifiable { kw: "ENV", name, line, expr });
                }
                Rc::new(Def { kw: "ENV", name: k, line, value: e.text, via: e.single, stage: Some(s) })
            })
            .collect();
        m.unverifiable.extend(unverifiable);
        for d in defs {
            m.defs.push(d.clone());
            m.stages[s].envs.insert(d.name.clone(), d);
        }
    }

    /// `RUN ...`: its words with ARG/ENV references in scope expanded, and the
    /// expansions that cannot be evaluated.
    fn run(&mut self, args: &str, line: usize, escape: char) {
        let m = self;
        let Some(s) = m.stages.len().checked_sub(1) else { return };
        let scope = &m.stages[s];
        // Shell variables (not ARG/ENV) stay as written: Docker does not expand RUN.
        let mut unverifiable = Vec::new();
        let words: Vec<(String, Vec<Rc<Def>>)> = split_words(args, escape)
            .into_iter()
            .map(|w| {
                let e = expand(&w, escape, &|n| scope.get(n));
                unverifiable.extend(e.unverifiable);
                (e.text.unwrap_or(w), e.refs)
            })
            .collect();
        let text = words.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>().join(" ");
        m.runs.push(Run { stage: s, line, text, words, unverifiable });
    }

    fn platform_of(&self, d: &Def) -> Option<Arch> {
        d.stage.and_then(|s| self.stages[s].platform)
    }

    /// Build configurations to check: each stage's scope at its end, then the
    /// global ARGs no stage re-declares.
    fn configs(&self) -> Vec<(Config, Option<Arch>)> {
        let mut out: Vec<(Config, Option<Arch>)> = self
            .stages
            .iter()
            .map(|s| (Config::from_scope(&|n| s.get(n), s.envs.keys().chain(s.args.keys())), s.platform))
            .collect();
        let unused: BTreeMap<String, Rc<Def>> = self
            .global
            .iter()
            .filter(|(_, d)| !self.used_globals.contains(&d.line))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.push((Config::from_scope(&|n| unused.get(n).cloned(), unused.keys()), None));
        out
    }
}

fn platform_arch(p: &str) -> Option<Arch> {
    p.strip_prefix("linux/").unwrap_or(p).split('/').next()?.parse().ok()
}

/// The DeepEP build settings in one scope (resolved values only).
#[derive(Default)]
struct Config {
    variant: Option<Rc<Def>>,
    arch_list: Option<Rc<Def>>,
    multinode: Option<Rc<Def>>,
    nixl: Option<Rc<Def>>,
    rdma_home: Option<Rc<Def>>,
}

impl Config {
    fn from_scope<'a>(get: &dyn Fn(&str) -> Option<Rc<Def>>, names: impl Iterator<Item = &'a String>) -> Config {
        let known = |n: &str| get(n).filter(|d| d.value.is_some());
        let names: BTreeSet<&String> = names.collect();
        let arch_list = known("TORCH_CUDA_ARCH_LIST")
            .or_else(|| names.iter().filter(|n| n.ends_with("CUDA_ARCH_LIST")).find_map(|n| known(n)));
        Config {
            variant: ["DEEPEP_VARIANT", "DEEPEP_FORGE_VARIANT", "VARIANT"].iter().find_map(|n| known(n)),
            arch_list,
            multinode: known("HYBRID_EP_MULTINODE"),
            nixl: known("USE_NIXL"),
            rdma_home: known("RDMA_CORE_HOME"),
        }
    }
}

/// DeepEP's setup.py reading of a boolean environment variable.
fn truthy(v: &str) -> bool {
    matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "t" | "yes" | "y" | "on")
}

fn value(d: &Rc<Def>) -> &str {
    d.value.as_deref().unwrap_or_default()
}

// ---- checking ---------------------------------------------------------------

struct Checker<'a> {
    file: &'a Path,
    pins: Option<&'a Pins>,
    revs: &'a BTreeMap<Arch, String>,
    out: Vec<Finding>,
    /// (rule, line) already reported: a value is reported once, at the line that holds it.
    seen: BTreeSet<(String, usize)>,
}

impl Checker<'_> {
    fn push(&mut self, f: Finding) {
        let key = (f.rule.clone(), f.line.unwrap_or(0));
        if self.seen.insert(key) {
            self.out.push(f);
        }
    }

    fn def(&mut self, d: &Rc<Def>, platform: Option<Arch>) {
        let Some(v) = d.value.as_deref() else { return };
        let upper = d.name.to_ascii_uppercase();
        let src = d.source();
        if (upper.contains("DEEPEP") || upper.contains("DEEP_EP"))
            && ["REV", "REF", "COMMIT", "SHA"].iter().any(|s| upper.ends_with(s))
        {
            self.rev(v.trim(), src.line, &d.describe(), platform);
        } else if let Some(r) = url_rev(v) {
            self.rev(&r, src.line, &d.describe(), platform);
        }
        if upper.contains("RDMA_CORE") && ["REF", "TAG", "VERSION"].iter().any(|s| upper.ends_with(s)) {
            if let Some(rc) = self.pins.and_then(|p| p.rdma_core.as_ref()) {
                if v.trim() != rc.git_ref {
                    let f = Finding::new(
                        "dockerfile-rdma-core-ref",
                        Severity::Error,
                        self.file,
                        format!("{} builds rdma-core `{v}`, pins.toml [rdma_core] says `{}`", d.describe(), rc.git_ref),
                    )
                    .line(src.line)
                    .expected_found(&rc.git_ref, v)
                    .fix(format!(
                        "set {}={} at {}:{}",
                        src.name,
                        rc.git_ref,
                        self.file.display(),
                        src.line
                    ));
                    self.push(f);
                }
            }
        }
    }

    /// `dockerfile-unverifiable`: a DeepEP setting goes through a shell
    /// expansion this reader does not evaluate: never "ok", an error saying so.
    fn unverifiable(&mut self, what: &str, expr: &str, line: usize) {
        let f = Finding::new(
            "dockerfile-unverifiable",
            Severity::Error,
            self.file,
            format!(
                "cannot verify: {what} uses `{}`, an expansion deepep-forge does not evaluate (not POSIX sh: the image's shell decides what DeepEP is built)",
                crate::input::excerpt(expr, 80)
            ),
        )
        .line(line)
        .fix(format!(
            "write the DeepEP revision and build settings as plain values (`ARG DEEPEP_REV=<full sha>`, then `${{DEEPEP_REV}}`) at {}:{line}",
            self.file.display()
        ));
        self.push(f);
    }

    fn unverifiable_def(&mut self, u: &Unverifiable) {
        let upper = u.name.to_ascii_uppercase();
        let deepep = ["DEEPEP", "DEEP_EP", "ARCH_LIST", "HYBRID_EP", "USE_NIXL", "RDMA_CORE", "VARIANT"];
        if deepep.iter().any(|k| upper.contains(k)) {
            self.unverifiable(&format!("{} ({}, line {})", u.name, u.kw, u.line), &u.expr, u.line);
        }
    }

    fn run(&mut self, r: &Run, platform: Option<Arch>) {
        let lower = r.text.to_ascii_lowercase();
        if !(lower.contains("deepep") || lower.contains("deep_ep") || lower.contains("deep-ep")) {
            return;
        }
        if let Some(expr) = r.unverifiable.first() {
            self.unverifiable(&format!("RUN (line {})", r.line), expr, r.line);
        }
        if let Some(rev) = url_rev(&r.text) {
            // A rev that comes from a variable is reported at the line that holds it.
            let from = r
                .words
                .iter()
                .filter(|(w, _)| url_rev(w).as_deref() == Some(rev.as_str()))
                .flat_map(|(_, refs)| refs.iter())
                // The value itself, not one a shell expansion changed on the way (`${REV%?}`).
                .find(|d| {
                    d.value.as_deref().is_some_and(|v| v.trim() == rev || url_rev(v).as_deref() == Some(rev.as_str()))
                });
            match from {
                Some(d) => self.rev(&rev, d.source().line, &d.describe(), platform),
                None => self.rev(&rev, r.line, &format!("RUN (line {})", r.line), platform),
            }
        }
        // `git [-C dir] checkout [-q|--detach|-f] <rev>`, `git reset --hard <rev>`, per shell command.
        let mut git = false;
        let mut i = 0;
        while i < r.words.len() {
            let w = r.words[i].0.as_str();
            if matches!(w, "&&" | "||" | ";" | "|") || w.ends_with(';') {
                git = false;
            } else if w == "git" {
                git = true;
            } else if git && (w == "checkout" || (w == "reset" && r.words.get(i + 1).is_some_and(|n| n.0 == "--hard")))
            {
                let target = r.words[i + 1..].iter().find(|(t, _)| !t.starts_with('-'));
                if let Some((t, refs)) = target {
                    let t = t.trim_end_matches(';');
                    match refs.iter().find(|d| d.value.as_deref() == Some(t)) {
                        Some(d) => self.rev(t, d.source().line, &d.describe(), platform),
                        None => self.rev(t, r.line, &format!("`git {w}` in RUN (line {})", r.line), platform),
                    }
                }
                git = false;
            }
            i += 1;
        }
    }

    /// Compare one DeepEP rev with the intended revs.
    fn rev(&mut self, found: &str, line: usize, what: &str, platform: Option<Arch>) {
        if found.is_empty() || found.contains('$') || self.revs.is_empty() {
            return;
        }
        let wanted: Vec<(Arch, &String)> = match platform {
            Some(a) => self.revs.get(&a).map(|r| vec![(a, r)]).unwrap_or_default(),
            None => self.revs.iter().map(|(a, r)| (*a, r)).collect(),
        };
        if wanted.is_empty() {
            return;
        }
        let mut by_rev: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (a, r) in &wanted {
            by_rev.entry(r.as_str()).or_default().push(a.as_str());
        }
        let expected = by_rev.iter().map(|(r, a)| format!("{r} ({})", a.join(", "))).collect::<Vec<_>>().join(", ");
        let fix_to = |r: &str| format!("write the full pinned sha {r} at {}:{line}", self.file.display());
        let hex = found.bytes().all(|b| b.is_ascii_hexdigit());
        let f = if hex && found.len() < 40 && found.len() >= 4 {
            let full = wanted.iter().find(|(_, r)| r.starts_with(&found.to_ascii_lowercase())).map(|(_, r)| r.as_str());
            let target = full.unwrap_or(wanted[0].1);
            Finding::new(
                "dockerfile-rev",
                Severity::Error,
                self.file,
                format!(
                    "{what} names DeepEP by the short sha `{found}`: full sha required (a short sha is ambiguous and is not what uv.lock and pins.toml record){}",
                    if full.is_some() { "" } else { "; it is not a prefix of the pin either" }
                ),
            )
            .expected_found(expected, found)
            .fix(fix_to(target))
        } else if !is_full_sha(found) {
            Finding::new(
                "dockerfile-rev",
                Severity::Error,
                self.file,
                format!("{what} names DeepEP by `{found}`, a branch or tag, not a commit: the image would build whatever it points to at build time"),
            )
            .expected_found(expected, found)
            .fix(fix_to(wanted[0].1))
        } else {
            let bad: Vec<&(Arch, &String)> = wanted.iter().filter(|(_, r)| r.as_str() != found).collect();
            if bad.is_empty() {
                return;
            }
            let mut msg = format!("{what} builds DeepEP {found}, ");
            if bad.len() < wanted.len() {
                let ok: Vec<&str> =
                    wanted.iter().filter(|(_, r)| r.as_str() == found).map(|(a, _)| a.as_str()).collect();
                msg.push_str(&format!(
                    "which is the {} pin but not the {} one ({}); the Dockerfile names no platform (`FROM --platform=...`), so it must match every architecture's pin",
                    ok.join("/"),
                    bad.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>().join("/"),
                    bad.iter().map(|(_, r)| r.as_str()).collect::<Vec<_>>().join(", ")
                ));
            } else {
                msg.push_str("not the pinned revision");
            }
            let mut f = Finding::new("dockerfile-rev", Severity::Error, self.file, msg)
                .expected_found(expected, found)
                .fix(fix_to(bad[0].1));
            if bad.len() == 1 {
                f = f.arch(bad[0].0);
            }
            f
        };
        self.push(f.line(line));
    }

    /// One stage's build settings against the variants of pins.toml: the
    /// named variant (`dockerfile-variant`, `dockerfile-platform`), then the
    /// settings judged together (`dockerfile-arch-list`, `dockerfile-multinode`,
    /// `dockerfile-transport`, `dockerfile-rdma-core-home`) against the named
    /// variant, or `dockerfile-build-undeclared` when no variant is named and
    /// none builds them.
    fn config(&mut self, cfg: &Config, platform: Option<Arch>) {
        let Some(pins) = self.pins else { return };
        let Some(named) = self.dockerfile_variant(pins, cfg) else { return };
        self.dockerfile_platform(named, platform, cfg);
        let Some(Settings { list, is_multi, nixl, rdma, fields }) = self.settings(cfg) else { return };
        let candidates: Vec<&Variant> = match named {
            Some(v) => vec![v],
            None => pins.variants.iter().filter(|v| platform.is_none_or(|p| v.arch == p)).collect(),
        };
        let Some((best, diffs)) = closest(&candidates, &fields) else { return };
        if diffs.is_empty() {
            return;
        }
        match named {
            Some(v) => self.settings_differ(v, best, diffs),
            None => {
                let build = Build {
                    list: list.as_ref().map(|(_, l)| l.clone()),
                    multinode: is_multi,
                    nixl: nixl.is_some_and(|(_, n)| n),
                    rdma_home: rdma.map(|d| value(d).to_string()),
                };
                self.dockerfile_build_undeclared(pins, &build, &fields, platform)
            }
        }
    }

    /// A stage's DeepEP build settings, each a field a variant must agree with;
    /// `None` when it sets neither an arch list nor the multinode flag.
    fn settings<'c>(&mut self, cfg: &'c Config) -> Option<Settings<'c>> {
        let list = self.dockerfile_arch_list(cfg);
        let multinode = cfg.multinode.as_ref().map(|d| (d, truthy(value(d))));
        let nixl = cfg.nixl.as_ref().map(|d| (d, truthy(value(d))));
        let is_multi = multinode.is_some_and(|(_, m)| m);
        // RDMA_CORE_HOME and USE_NIXL only matter to a multinode build.
        let rdma = cfg.rdma_home.as_ref().filter(|_| is_multi && !nixl.is_some_and(|(_, n)| n));
        let nixl = nixl.filter(|_| is_multi);
        if list.is_none() && multinode.is_none() {
            return None;
        }
        // Each present setting is a field; a variant matches when all agree.
        let fields: Vec<Field> = [
            list.as_ref().map(|(d, l)| arch_list_field(d, l)),
            multinode.map(|(d, m)| dockerfile_multinode(d, m)),
            nixl.map(|(d, n)| dockerfile_transport(d, n)),
            rdma.map(dockerfile_rdma_core_home),
        ]
        .into_iter()
        .flatten()
        .collect();
        Some(Settings { list, is_multi, nixl, rdma, fields })
    }

    /// The variants a stage's build is (see [`needs`]).
    fn need(&mut self, pins: &Pins, cfg: &Config, platform: Option<Arch>) -> Option<Need> {
        let file = self.file.to_path_buf();
        if let Some(d) = &cfg.variant {
            let v = pins.variants.iter().find(|v| v.name == value(d))?;
            return Some(Need { variants: vec![v.name.clone()], file, line: d.line, what: BUILDS.into() });
        }
        let s = self.settings(cfg)?;
        let line = s.fields.iter().map(|f| f.def.line).min()?;
        let variants: Vec<String> = pins
            .variants
            .iter()
            .filter(|v| platform.is_none_or(|p| v.arch == p))
            .filter(|v| s.fields.iter().all(|f| (f.differs)(v).is_none()))
            .map(|v| v.name.clone())
            .collect();
        (!variants.is_empty()).then_some(Need { variants, file, line, what: BUILDS.into() })
    }

    /// `dockerfile-variant`: the variant a stage names must be declared.
    /// `Some(None)`: no variant named; `None`: an unknown one (reported).
    fn dockerfile_variant<'p>(&mut self, pins: &'p Pins, cfg: &Config) -> Option<Option<&'p Variant>> {
        let Some(d) = &cfg.variant else { return Some(None) };
        if let Some(v) = pins.variants.iter().find(|v| v.name == value(d)) {
            return Some(Some(v));
        }
        let names: Vec<&str> = pins.variants.iter().map(|v| v.name.as_str()).collect();
        let f = Finding::new(
            "dockerfile-variant",
            Severity::Error,
            self.file,
            format!("{} names variant `{}`, which {} does not declare", d.describe(), value(d), pins.path.display()),
        )
        .line(d.source().line)
        .fix(format!("use one of: {}", names.join(", ")));
        self.push(f);
        None
    }

    /// `dockerfile-platform`: the named variant's architecture is the stage's `--platform`.
    fn dockerfile_platform(&mut self, named: Option<&Variant>, platform: Option<Arch>, cfg: &Config) {
        let (Some(v), Some(p), Some(d)) = (named, platform, &cfg.variant) else { return };
        if v.arch == p {
            return;
        }
        let f = Finding::new(
            "dockerfile-platform",
            Severity::Error,
            self.file,
            format!(
                "{} names variant `{}` ({}), but the stage is built for {}",
                d.describe(),
                v.name,
                v.arch,
                p.docker_platform()
            ),
        )
        .line(d.source().line)
        .expected_found(v.arch.docker_platform(), p.docker_platform());
        self.push(f);
    }

    /// `dockerfile-arch-list` (the list itself): it must parse as pins.toml's
    /// lists do; the parsed list, compared with variants by [`arch_list_field`].
    fn dockerfile_arch_list<'c>(&mut self, cfg: &'c Config) -> Option<(&'c Rc<Def>, ArchList)> {
        let d = cfg.arch_list.as_ref()?;
        match value(d).parse::<ArchList>() {
            Ok(l) => Some((d, l)),
            Err(e) => {
                let f =
                    Finding::new("dockerfile-arch-list", Severity::Error, self.file, format!("{}: {e}", d.describe()))
                        .line(d.source().line)
                        .fix("write the CUDA archs as pins.toml does, e.g. \"9.0\" or \"10.0\"");
                self.push(f);
                None
            }
        }
    }

    /// `dockerfile-build-undeclared`: the Dockerfile decides its own build and
    /// no variant builds it: declare it, never narrow it to a variant it is not.
    fn dockerfile_build_undeclared(&mut self, pins: &Pins, build: &Build, fields: &[Field], platform: Option<Arch>) {
        let settings = settings_of(fields);
        let at = fields[0].def.source();
        let archs: Vec<Arch> = match platform {
            Some(p) => vec![p],
            None => pins.pins.keys().copied().collect(),
        };
        let blocks: Vec<String> = archs.iter().map(|a| build.variant_block(pins, *a, self.file, at.line)).collect();
        let msg = format!(
            "{} builds DeepEP with {settings} ({}): no variant in {} builds that{}, so pins.toml does not describe the wheel this image ships",
            self.file.display(),
            fields.iter().map(|f| f.def.describe()).collect::<Vec<_>>().join("; "),
            pins.path.display(),
            platform.map(|p| format!(" for {}", p.docker_platform())).unwrap_or_default(),
        );
        let fix = format!(
            "declare the build in {} ({}), add:\n{}",
            pins.path.display(),
            if archs.len() > 1 {
                "one variant per platform; the stage names none, so every pinned architecture"
            } else {
                "one variant"
            },
            blocks.join("\n")
        );
        let mut f = Finding::new("dockerfile-build-undeclared", Severity::Error, self.file, msg)
            .line(at.line)
            .expected_found("a [[variant]] with this build", settings)
            .fix(fix);
        if let Some(p) = platform {
            f = f.arch(p);
        }
        self.push(f);
    }

    /// One finding per setting that differs from the variant the stage names,
    /// under the setting's rule id (from its [`Field`]).
    fn settings_differ(&mut self, named: &Variant, best: &Variant, diffs: Vec<(&Field, String)>) {
        for (field, expected) in diffs {
            let (d, found) = (field.def, &field.found);
            let src = d.source();
            let msg = format!(
                "{} = {found:?}, but the variant it names, `{}`, builds with {expected:?}",
                d.describe(),
                named.name
            );
            let fix = format!(
                "set {}={expected:?} at {}:{} to build `{}`",
                src.name,
                self.file.display(),
                src.line,
                best.name
            );
            let f = Finding::new(field.rule, Severity::Error, self.file, msg)
                .line(src.line)
                .expected_found(expected, found.clone())
                .fix(fix)
                .arch(best.arch);
            self.push(f);
        }
    }
}

/// One build setting of a stage: its rule id, where it is set, its value, and
/// what a variant would need instead (`None`: the variant agrees).
struct Field<'d> {
    rule: &'static str,
    def: &'d Rc<Def>,
    found: String,
    differs: Differs<'d>,
}

/// A stage's build settings (see `Checker::settings`).
struct Settings<'c> {
    list: Option<(&'c Rc<Def>, ArchList)>,
    is_multi: bool,
    nixl: Option<(&'c Rc<Def>, bool)>,
    rdma: Option<&'c Rc<Def>>,
    fields: Vec<Field<'c>>,
}

/// What a variant would need instead of a stage's setting (`None`: it agrees).
type Differs<'d> = Box<dyn Fn(&Variant) -> Option<String> + 'd>;

/// `dockerfile-arch-list` (against a variant): the same archs, as sets.
fn arch_list_field<'d>(d: &'d Rc<Def>, l: &ArchList) -> Field<'d> {
    let mine = sorted_list(l);
    let differs = move |v: &Variant| (sorted_list(&v.cuda_arch_list) != mine).then(|| v.cuda_arch_list.to_env());
    Field { rule: "dockerfile-arch-list", def: d, found: l.to_env(), differs: Box::new(differs) }
}

/// `dockerfile-multinode`: HYBRID_EP_MULTINODE as the variant's `multinode`.
fn dockerfile_multinode(d: &Rc<Def>, m: bool) -> Field<'_> {
    let differs = move |v: &Variant| (v.multinode != m).then(|| if v.multinode { "1" } else { "0" }.to_string());
    Field { rule: "dockerfile-multinode", def: d, found: value(d).to_string(), differs: Box::new(differs) }
}

/// `dockerfile-transport`: USE_NIXL as the variant's transport (multinode builds).
fn dockerfile_transport(d: &Rc<Def>, n: bool) -> Field<'_> {
    let differs = move |v: &Variant| {
        (v.multinode && (v.transport == Transport::Nixl) != n)
            .then(|| if v.transport == Transport::Nixl { "1" } else { "0" }.to_string())
    };
    Field { rule: "dockerfile-transport", def: d, found: value(d).to_string(), differs: Box::new(differs) }
}

/// `dockerfile-rdma-core-home`: RDMA_CORE_HOME as a DOCA multinode variant's.
fn dockerfile_rdma_core_home(d: &Rc<Def>) -> Field<'_> {
    let mine = value(d).trim_end_matches('/').to_string();
    let differs = move |v: &Variant| {
        let theirs = v.rdma_core_home.as_deref().map(|h| h.trim_end_matches('/'));
        (v.multinode && v.transport == Transport::Doca && theirs != Some(mine.as_str()))
            .then(|| v.rdma_core_home.clone().unwrap_or_else(|| "(unset)".into()))
    };
    Field { rule: "dockerfile-rdma-core-home", def: d, found: value(d).to_string(), differs: Box::new(differs) }
}

/// The candidate closest to the stage's settings and the fields it differs in.
/// The arch list and the multinode flag shape the binary: a variant that
/// differs in them is farther.
fn closest<'v, 'f, 'd>(
    candidates: &[&'v Variant],
    fields: &'f [Field<'d>],
) -> Option<(&'v Variant, Vec<(&'f Field<'d>, String)>)> {
    let weight = |f: &Field| if matches!(f.rule, "dockerfile-arch-list" | "dockerfile-multinode") { 2 } else { 1 };
    candidates
        .iter()
        .map(|v| (*v, fields.iter().filter_map(|f| (f.differs)(v).map(|exp| (f, exp))).collect::<Vec<_>>()))
        .min_by_key(|(_, d)| d.iter().map(|(f, _)| weight(f)).sum::<u32>())
}

/// `NAME="value", ...` of every field, for messages.
fn settings_of(fields: &[Field]) -> String {
    fields.iter().map(|f| format!("{}={:?}", f.def.name, f.found)).collect::<Vec<_>>().join(", ")
}

/// What a Dockerfile stage builds, as pins.toml would declare it.
struct Build {
    /// None: the stage sets no arch list (DeepEP's setup.py then builds 9.0).
    list: Option<ArchList>,
    multinode: bool,
    nixl: bool,
    rdma_home: Option<String>,
}

impl Build {
    /// A ready-to-paste `[[variant]]` table for `arch`, named after the Dockerfile.
    fn variant_block(&self, pins: &Pins, arch: Arch, file: &Path, line: usize) -> String {
        let mut name = format!("dockerfile-{arch}");
        let mut n = 1;
        while pins.variants.iter().any(|v| v.name == name) {
            n += 1;
            name = format!("dockerfile-{arch}-{n}");
        }
        let toml_str = |s: &str| toml::Value::String(s.to_string()).to_string();
        let mut b = format!(
            "[[variant]]\nname = \"{name}\"\ndescription = {}\narch = \"{arch}\"\n",
            toml_str(&format!("as {}:{line} builds it", file.display()))
        );
        match &self.list {
            Some(l) => b.push_str(&format!("cuda_arch_list = {}\n", toml_str(&l.to_env()))),
            None => b.push_str("cuda_arch_list = \"9.0\"                 # the stage sets none: DeepEP's default\n"),
        }
        b.push_str(&format!("multinode = {}\n", self.multinode));
        if self.multinode {
            b.push_str(&format!("transport = \"{}\"\n", if self.nixl { "nixl" } else { "doca" }));
            if let Some(h) = self.rdma_home.as_deref().filter(|_| !self.nixl) {
                b.push_str(&format!("rdma_core_home = {}\n", toml_str(h)));
            }
        }
        b
    }
}

fn sorted_list(l: &ArchList) -> Vec<String> {
    let mut v: Vec<String> = l.0.iter().map(|a| a.to_string()).collect();
    v.sort();
    v
}

/// The rev of a `.../DeepEP.git@<rev>` (or `DeepEP@<rev>`) URL in `s`, if any.
fn url_rev(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    for pat in ["deepep.git@", "deepep@"] {
        if let Some(p) = lower.find(pat) {
            let rest = &s[p + pat.len()..];
            let rev: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '$' | '{' | '}'))
                .collect();
            return (!rev.is_empty()).then_some(rev);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";
    const OTHER: &str = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";

    fn pins() -> Pins {
        Pins::parse(include_str!("../pins.toml"), Path::new("pins.toml")).unwrap()
    }

    fn revs(x: &str, a: &str) -> BTreeMap<Arch, String> {
        BTreeMap::from([(Arch::X86_64, x.to_string()), (Arch::Aarch64, a.to_string())])
    }

    fn run(text: &str) -> Vec<Finding> {
        check_text(text, Path::new("Dockerfile"), Some(&pins()), &revs(PIN, PIN))
    }

    fn rules(f: &[Finding]) -> Vec<(String, usize)> {
        f.iter().map(|f| (f.rule.clone(), f.line.unwrap_or(0))).collect()
    }

    #[test]
    fn continuations_comments_and_heredocs() {
        let (ins, _) =
            instructions("FROM x AS a\nRUN echo a \\\n  # comment\n\n  b\nRUN <<EOF\ngit checkout abc\nEOF\nENV A=1\n");
        assert_eq!(ins.len(), 4);
        assert_eq!(ins[1], Instruction { keyword: "RUN".into(), args: "echo a   b".into(), line: 2 });
        assert_eq!(ins[2].args, "<<EOF\ngit checkout abc\n");
        assert_eq!((ins[3].keyword.as_str(), ins[3].line), ("ENV", 9));
        let (ins, esc) = instructions("# escape=`\nFROM x\nRUN a `\n b\n");
        assert_eq!((esc, ins[1].args.as_str()), ('`', "a  b"));
    }

    #[test]
    fn expansion_follows_quotes_defaults_and_scopes() {
        let d = Rc::new(Def {
            kw: "ARG",
            name: "A".into(),
            line: 3,
            value: Some("9.0 10.0".into()),
            via: None,
            stage: None,
        });
        let lookup = |n: &str| (n == "A").then(|| d.clone());
        let e = expand("\"${A}\"", '\\', &lookup);
        assert_eq!(e.text.as_deref(), Some("9.0 10.0"));
        assert_eq!(e.single.unwrap().line, 3);
        assert_eq!(expand("'$A'", '\\', &lookup).text.as_deref(), Some("$A"));
        assert_eq!(expand("x$A", '\\', &lookup).text.as_deref(), Some("x9.0 10.0"));
        assert!(expand("x$A", '\\', &lookup).single.is_none());
        assert_eq!(expand("${B:-9.0}", '\\', &lookup).text.as_deref(), Some("9.0"));
        assert_eq!(expand("${A:+set}", '\\', &lookup).text.as_deref(), Some("set"));
        assert_eq!(expand("\\$A", '\\', &lookup).text.as_deref(), Some("$A"));
        assert!(expand("$B", '\\', &lookup).text.is_none(), "an undeclared variable is only known at build time");
    }

    #[test]
    fn nemo_rl_shape_is_checked_as_one_combination() {
        let text = "FROM base AS wheel\nARG DEEPEP_CUDA_ARCH_LIST=\"9.0 10.0\"\nARG RDMA_CORE_REF=v60.0\nENV HYBRID_EP_MULTINODE=1\nENV RDMA_CORE_HOME=/opt/rdma-core/build\nENV TORCH_CUDA_ARCH_LIST=${DEEPEP_CUDA_ARCH_LIST}\n";
        let f = run(text);
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
        assert!(
            f[0].message.contains("TORCH_CUDA_ARCH_LIST (ENV, line 6, from ARG DEEPEP_CUDA_ARCH_LIST at line 2)"),
            "{}",
            f[0].message
        );
        // never narrowed to the closest variant: the fix declares the build as it is
        let fix = f[0].fix.as_deref().unwrap();
        assert!(!fix.contains("gb200-multinode") && fix.contains("cuda_arch_list = \"9.0 10.0\""), "{fix}");
        assert!(fix.contains("rdma_core_home = \"/opt/rdma-core/build\""), "{fix}");
        // The same shape for Hopper with the system rdma-core is h100-multinode: clean.
        let good = text.replace("\"9.0 10.0\"", "\"9.0\"").replace("/opt/rdma-core/build", "/usr");
        assert!(run(&good).is_empty(), "{:#?}", run(&good));
    }

    #[test]
    fn global_arg_redeclared_in_a_stage_is_followed() {
        let text = "ARG ARCHS=\"9.0\"\nFROM base\nARG ARCHS\nENV TORCH_CUDA_ARCH_LIST=$ARCHS HYBRID_EP_MULTINODE=0\n";
        assert!(run(text).is_empty(), "{:#?}", run(text));
        let f = run(&text.replace("\"9.0\"", "\"8.0\""));
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 1)], "{f:#?}");
        // Without the re-declaration the global is not visible in the stage.
        let f = run("ARG ARCHS=\"9.0\"\nFROM base\nENV TORCH_CUDA_ARCH_LIST=$ARCHS\n");
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn named_variant_and_platform_narrow_the_candidates() {
        let f = run("FROM base\nARG VARIANT=h100-multinode\nENV TORCH_CUDA_ARCH_LIST=10.0 HYBRID_EP_MULTINODE=1 RDMA_CORE_HOME=/usr\n");
        assert_eq!(rules(&f), vec![("dockerfile-arch-list".into(), 3)], "{f:#?}");
        assert!(f[0].message.contains("`h100-multinode`"), "{}", f[0].message);
        let f = run("FROM base\nARG VARIANT=h200\n");
        assert_eq!(rules(&f), vec![("dockerfile-variant".into(), 2)]);
        // 10.0 multinode on arm64 with /usr: closest is gb200-multinode, which wants /opt/rdma-core/build.
        let f = run("FROM --platform=linux/arm64 base\nENV TORCH_CUDA_ARCH_LIST=10.0 HYBRID_EP_MULTINODE=1 RDMA_CORE_HOME=/usr\n");
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
        assert_eq!(f[0].arch, Some(Arch::Aarch64));
        assert!(f[0].fix.as_deref().unwrap().contains("rdma_core_home = \"/usr\""), "{f:#?}");
        let f = run("FROM --platform=linux/arm64 base\nENV TORCH_CUDA_ARCH_LIST=9.0 HYBRID_EP_MULTINODE=0\n");
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
    }

    #[test]
    fn multinode_flag_and_legacy_env_form() {
        let f = run("FROM base\nENV TORCH_CUDA_ARCH_LIST 10.0\nENV HYBRID_EP_MULTINODE yes\nENV RDMA_CORE_HOME=/usr\nENV USE_NIXL=1\n");
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
        assert!(f[0].fix.as_deref().unwrap().contains("transport = \"nixl\""), "{f:#?}");
        let f =
            run("FROM base\nENV TORCH_CUDA_ARCH_LIST=\"9.0\"\nENV HYBRID_EP_MULTINODE=1\nENV RDMA_CORE_HOME=/opt/x\n");
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
    }

    #[test]
    fn revs_full_short_branch_and_per_platform() {
        assert!(run(&format!("FROM b\nARG DEEPEP_REV={PIN}\n")).is_empty());
        let f = run("FROM b\nARG DEEPEP_REV=17cfb81\n");
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 2)]);
        assert!(f[0].message.contains("full sha required"), "{}", f[0].message);
        assert!(f[0].fix.as_deref().unwrap().contains(PIN));
        let f = run("FROM b\nARG DEEPEP_REF=hybrid-ep\n");
        assert!(f[0].message.contains("branch or tag"), "{}", f[0].message);
        let url = format!("FROM b\nENV DEEPEP_URL=git+https://github.com/deepseek-ai/DeepEP.git@{OTHER}\n");
        assert_eq!(rules(&run(&url)), vec![("dockerfile-rev".into(), 2)]);
        // Different pins per arch: no platform means it must match both.
        let r = revs(PIN, OTHER);
        let f = check_text(&format!("FROM b\nARG DEEPEP_COMMIT={PIN}\n"), Path::new("D"), None, &r);
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("x86_64 pin but not the aarch64"), "{}", f[0].message);
        assert_eq!(f[0].arch, Some(Arch::Aarch64));
        let f =
            check_text(&format!("FROM --platform=linux/amd64 b\nARG DEEPEP_COMMIT={PIN}\n"), Path::new("D"), None, &r);
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn run_checkout_is_checked_once_at_the_value() {
        let text = format!("FROM b\nARG DEEPEP_REV={OTHER}\nRUN git clone https://github.com/deepseek-ai/DeepEP && cd DeepEP && git checkout ${{DEEPEP_REV}}\nRUN cd DeepEP && git -C . checkout -q 17cfb81\n");
        let f = run(&text);
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 2), ("dockerfile-rev".into(), 4)], "{f:#?}");
        assert!(run("FROM b\nRUN git checkout abc1234\n").is_empty(), "a RUN that does not mention DeepEP is not ours");
        // Any variable spliced into a DeepEP URL is followed to its line.
        let text = format!("FROM b\nARG REV={OTHER}\nRUN uv pip install \"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@${{REV}}\"\n");
        let f = run(&text);
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 2)], "{f:#?}");
        assert!(f[0].message.starts_with("REV (ARG, line 2)"), "{}", f[0].message);
        let f = run(&format!(
            "FROM b\nRUN pip install git+https://github.com/deepseek-ai/DeepEP.git@{OTHER}#egg=deep_ep\n"
        ));
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 2)], "{f:#?}");
    }

    /// Every POSIX parameter-expansion class in a RUN that builds DeepEP is
    /// evaluated as sh does (a changed revision is `dockerfile-rev`), and what
    /// is not POSIX is `dockerfile-unverifiable`, never ok.
    #[test]
    fn shell_expansions_in_run_are_evaluated_or_refused() {
        let url = |e: &str| {
            format!("FROM b\nARG DEEPEP_REV={PIN}\nARG PFX=x{PIN}\nRUN pip install \"git+https://github.com/deepseek-ai/DeepEP.git@{e}\"\n")
        };
        let last = &PIN[39..];
        for (expr, ok) in [
            ("${DEEPEP_REV}", true),
            ("${DEEPEP_REV%?}0", false),                 // shortest suffix
            (&format!("${{DEEPEP_REV%{last}}}"), false), // literal suffix
            ("${DEEPEP_REV%%c*}", false),                // longest suffix
            ("${DEEPEP_REV#?}", false),                  // shortest prefix
            ("${DEEPEP_REV##*7}", false),                // longest prefix
            ("${PFX#x}", true),                          // a prefix removed gives the pin
            ("${PFX#[!0-9]}", true),                     // bracket negation
            ("${PFX#[a-z]}", true),                      // bracket range
            ("${DEEPEP_REV%[0-9]}", true),               // no match: unchanged (the pin ends in e)
            ("${DEEPEP_REV:-main}", true),
            ("${UNSET:-main}", false), // the default is a branch
            ("${UNSET:=main}", false),
            ("${DEEPEP_REV:?unset}", true),
            ("${DEEPEP_REV:+main}", false),
            ("${#DEEPEP_REV}", false), // "40"
        ] {
            let f = run(&url(expr));
            if ok {
                assert!(f.is_empty(), "{expr}: {f:#?}");
            } else {
                assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 4)], "{expr}: {f:#?}");
            }
        }
        for expr in [
            "${DEEPEP_REV/17/29}",
            "${DEEPEP_REV//c/d}",
            "${DEEPEP_REV:0:7}",
            "${DEEPEP_REV^^}",
            "${UNSET:-${DEEPEP_REV/1/2}}",
        ] {
            let f = run(&url(expr));
            assert_eq!(rules(&f), vec![("dockerfile-unverifiable".into(), 4)], "{expr}: {f:#?}");
            assert!(f[0].message.starts_with("cannot verify: RUN (line 4)"), "{}", f[0].message);
        }
        // In an ARG/ENV that names DeepEP, too; elsewhere not ours.
        let f = run(&format!("FROM b\nARG R={PIN}\nENV DEEPEP_REV=${{R/1/2}}\n"));
        assert_eq!(rules(&f), vec![("dockerfile-unverifiable".into(), 3)], "{f:#?}");
        assert!(run("FROM b\nARG V=3.12.1\nENV PY=${V/./}\nRUN echo ${V/./}\n").is_empty());
        // The checkout form, and a value too long to match is refused, not guessed.
        let f = run(&format!("FROM b\nARG DEEPEP_REV={PIN}\nRUN cd DeepEP && git checkout ${{DEEPEP_REV%??}}\n"));
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 3)], "{f:#?}");
        let long = "a".repeat(5000);
        let f = run(&format!("FROM b\nARG X={long}\nRUN cd DeepEP && git checkout ${{X%a}}\n"));
        assert_eq!(rules(&f), vec![("dockerfile-unverifiable".into(), 3)], "{f:#?}");
    }

    #[test]
    fn globs_match_as_sh_does() {
        let g = |p: &str, s: &str| glob(&p.chars().collect::<Vec<_>>(), &s.chars().collect::<Vec<_>>());
        assert!(g("*", "") && g("a*c", "abbc") && g("?b", "ab") && g("[!x]y", "ay") && g("\\*", "*"));
        assert!(!g("a*c", "abbd") && !g("[a-c]", "d") && !g("\\*", "x") && !g("?", ""));
        assert!(g("[", "[") && g("*.*", "1.2.3"));
        assert_eq!(strip_pattern("1.2.3", "*.", "#").as_deref(), Some("2.3"));
        assert_eq!(strip_pattern("1.2.3", "*.", "##").as_deref(), Some("3"));
        assert_eq!(strip_pattern("1.2.3", ".*", "%").as_deref(), Some("1.2"));
        assert_eq!(strip_pattern("1.2.3", ".*", "%%").as_deref(), Some("1"));
    }

    #[test]
    fn rdma_core_ref_must_match_pins() {
        assert!(run("FROM b\nARG RDMA_CORE_REF=v60.0\n").is_empty());
        let f = run("FROM b\nARG RDMA_CORE_REF=v59.0\n");
        assert_eq!(rules(&f), vec![("dockerfile-rdma-core-ref".into(), 2)]);
    }

    #[test]
    fn truncated_and_odd_input_never_panics() {
        let text = format!(
            "# escape=\\\nARG A=\"${{B:-x}}\" C='${{D}}'\nFROM --platform=$P b AS s\nENV TORCH_CUDA_ARCH_LIST=\"${{A:+9.0}}\" \\\n  HYBRID_EP_MULTINODE=on\nRUN <<-EOF git checkout {PIN}\n\tDeepEP\n\tEOF\nENV K ${{UNCLOSED\nRUN git -C DeepEP checkout\nARG DEEPEP_REV=é😀\n"
        );
        for (i, _) in text.char_indices() {
            let _ = run(&text[..i]);
        }
    }

    #[test]
    fn build_time_only_values_are_not_judged() {
        assert!(run("FROM b\nARG TORCH_CUDA_ARCH_LIST\nARG HYBRID_EP_MULTINODE\nARG DEEPEP_REV\nENV X=${TORCH_CUDA_ARCH_LIST}\n").is_empty());
    }
}
