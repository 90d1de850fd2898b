//! ARG/ENV definitions (`Def`, each with the definition its value comes
//! from) and POSIX sh parameter expansion of a word against the definitions
//! in scope: `${VAR}`, `:-`, `:=`, `:+`, `:?`, `${#VAR}`, `#`/`##`/`%`/`%%`
//! with globs; anything else is "cannot verify" (`Expanded`). Bounded
//! (nesting, expanded size, pattern value). Must not read files or judge.
use std::rc::Rc;

/// A variable definition (ARG or ENV) in some scope.
#[derive(Debug)]
pub struct Def {
    pub kw: &'static str,
    pub name: String,
    pub line: usize,
    /// The default after expansion; None when it is only known at build time
    /// (an ARG without default, or a reference to one).
    pub value: Option<String>,
    /// The definition this value is copied from (`ENV A=${B}`, a stage `ARG B`
    /// re-declaring a global one).
    pub via: Option<Rc<Def>>,
    /// Index of the stage; None for global ARGs (before the first FROM).
    pub stage: Option<usize>,
}

impl Def {
    /// The definition whose line holds the literal value.
    pub fn source(self: &Rc<Self>) -> Rc<Def> {
        let mut d = self.clone();
        while let Some(v) = d.via.clone() {
            d = v;
        }
        d
    }
    /// `TORCH_CUDA_ARCH_LIST (ENV, line 14, from ARG DEEPEP_CUDA_ARCH_LIST at line 5)`.
    pub fn describe(self: &Rc<Self>) -> String {
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
pub struct Expanded {
    pub text: Option<String>,
    /// Set when the word is exactly one variable reference.
    pub single: Option<Rc<Def>>,
    /// Every definition referenced (and used).
    pub refs: Vec<Rc<Def>>,
    /// Expansions this reader does not evaluate (`${A/x/y}`, `${A:1:7}`: not
    /// POSIX sh, so what they give depends on the image's shell), as written.
    pub unverifiable: Vec<String>,
}

/// Quote removal and `$VAR`, `${VAR}`, `${VAR:-w}`, `${VAR-w}`, `${VAR:+w}`,
/// `${VAR+w}` expansion, as Docker does for ARG/ENV/FROM. `lookup` returns the
/// definition in scope.
pub fn expand(word: &str, escape: char, lookup: &dyn Fn(&str) -> Option<Rc<Def>>) -> Expanded {
    let chars: Vec<char> = word.chars().collect();
    expand_chars(&chars, escape, lookup, 0)
}

/// `${A:-${A:-...}}` nested deeper than this is unknown (not expanded).
pub const MAX_NESTING: usize = 32;
/// An expansion longer than this is unknown (`B=${A}${A}`, `C=${B}${B}`, ...
/// would otherwise double at each step).
pub const MAX_EXPANDED: usize = 64 << 10;

/// [`expand`] on a slice: nested words are sub-slices (never copied), so a
/// deeply nested word costs linear time and memory.
pub fn expand_chars(chars: &[char], escape: char, lookup: &dyn Fn(&str) -> Option<Rc<Def>>, depth: usize) -> Expanded {
    if depth > MAX_NESTING {
        return Expanded { text: None, single: None, refs: Vec::new(), unverifiable: Vec::new() };
    }
    let mut acc = Acc { known: true, ..Acc::default() };
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if quote == Some('\'') {
            if c == '\'' {
                quote = None;
            } else {
                acc.literal(c);
            }
            i += 1;
        } else if c == escape {
            if let Some(&n) = chars.get(i + 1) {
                acc.literal(n);
            }
            i += 2;
        } else if (c == '"' || c == '\'') && quote.is_none() {
            quote = Some(c);
            i += 1;
        } else if quote == Some('"') && c == '"' {
            quote = None;
            i += 1;
        } else if c == '$' {
            let (next, expanded) = reference(&mut acc, chars, i, escape, lookup, depth);
            i = next;
            if expanded && acc.out.len() > MAX_EXPANDED {
                return Expanded { text: None, single: None, refs: acc.refs, unverifiable: acc.unverifiable };
            }
        } else {
            acc.literal(c);
            i += 1;
        }
    }
    let single = (acc.refs.len() == 1 && !acc.literal).then(|| acc.refs[0].clone());
    Expanded { text: acc.known.then_some(acc.out), single, refs: acc.refs, unverifiable: acc.unverifiable }
}

/// What expanding a word has given so far.
#[derive(Default)]
struct Acc {
    out: String,
    /// Every reference's value is known.
    known: bool,
    /// Some of the text is not one variable's value (a literal, a default, an operator's result).
    literal: bool,
    refs: Vec<Rc<Def>>,
    unverifiable: Vec<String>,
}

impl Acc {
    fn literal(&mut self, c: char) {
        self.out.push(c);
        self.literal = true;
    }

    /// A value appended; `None`: only known at build time.
    fn value(&mut self, v: Option<&str>) {
        match v {
            Some(v) => self.out.push_str(v),
            None => self.known = false,
        }
    }

    /// A nested word's expansion appended.
    fn nested(&mut self, e: Expanded) {
        self.unverifiable.extend(e.unverifiable);
        self.value(e.text.as_deref());
    }
}

/// One reference as [`reference`] evaluates it: the definition in scope, its
/// value, the nested word (expanded on demand) and the text as written.
struct Ref<'a> {
    def: Option<Rc<Def>>,
    val: Option<String>,
    sub: &'a dyn Fn() -> Expanded,
    raw: String,
}

impl Ref<'_> {
    fn set(&self) -> bool {
        self.def.is_some()
    }

    fn nonempty(&self) -> bool {
        self.val.as_deref().is_some_and(|v| !v.is_empty())
    }
}

/// `$NAME` or `${NAME<op>word}` at `chars[i]`, appended to `acc`: the index
/// after it, and whether it was a reference (a lone `$` is a literal).
fn reference(
    acc: &mut Acc,
    chars: &[char],
    i: usize,
    escape: char,
    lookup: &dyn Fn(&str) -> Option<Rc<Def>>,
    depth: usize,
) -> (usize, bool) {
    let (name, op, (wa, wb), next) = parse_ref(chars, i);
    if name.is_empty() {
        acc.literal('$');
        return (i + 1, false);
    }
    let def = lookup(&name);
    let val = def.as_ref().and_then(|d| d.value.clone());
    let sub = || expand_chars(&chars[wa..wb], escape, lookup, depth + 1);
    let r = Ref { def, val, sub: &sub, raw: chars[i..next].iter().collect() };
    match op.as_deref() {
        None => {
            if let Some(d) = r.def {
                acc.refs.push(d);
            }
            acc.value(r.val.as_deref());
        }
        Some(o @ (":-" | "-" | ":=" | "=")) => default(acc, o.starts_with(':'), r),
        Some(o @ (":+" | "+")) => alternative(acc, o == ":+", r),
        Some(o @ (":?" | "?")) => {
            // Set: the value; unset: the build stops (nothing to check).
            let ok = if o == ":?" { r.nonempty() } else { r.set() && r.val.is_some() };
            match (ok, r.def) {
                (true, Some(d)) => {
                    acc.refs.push(d);
                    acc.out.push_str(&r.val.expect("known"));
                }
                _ => acc.known = false,
            }
        }
        Some(LENGTH) => {
            acc.literal = true;
            acc.value(r.val.map(|v| v.chars().count().to_string()).as_deref());
        }
        Some(o @ ("#" | "##" | "%" | "%%")) => pattern(acc, o, r),
        Some(_) => {
            acc.known = false;
            acc.unverifiable.push(r.raw);
        }
    }
    (next, true)
}

/// `${V:-w}`, `${V-w}`, `${V:=w}`, `${V=w}`: the value, or the word when unset
/// (`colon`: or empty).
fn default(acc: &mut Acc, colon: bool, r: Ref) {
    // An ARG without default counts as unset: the default is what a build gets without --build-arg.
    let use_default = if colon { !r.nonempty() } else { !r.set() || r.val.is_none() };
    if use_default {
        acc.literal = true;
        acc.nested((r.sub)());
    } else {
        acc.refs.push(r.def.expect("set"));
        acc.out.push_str(&r.val.expect("known"));
    }
}

/// `${V:+w}`, `${V+w}`: the word when set (`colon`: and not empty), else nothing.
fn alternative(acc: &mut Acc, colon: bool, r: Ref) {
    let take = if colon { r.nonempty() } else { r.set() && r.val.is_some() };
    acc.literal = true;
    if take {
        acc.nested((r.sub)());
    } else if r.val.is_none() {
        acc.known = false;
    }
}

/// `${V#p}`, `${V##p}`, `${V%p}`, `${V%%p}`: the value with the pattern removed
/// (a value too long to match is unverifiable).
fn pattern(acc: &mut Acc, op: &str, r: Ref) {
    acc.literal = true;
    if let Some(d) = r.def.clone() {
        acc.refs.push(d);
    }
    let e = (r.sub)();
    acc.unverifiable.extend(e.unverifiable);
    match (r.val, e.text) {
        (Some(v), Some(pat)) => match strip_pattern(&v, &pat, op) {
            Some(t) => acc.out.push_str(&t),
            None => {
                acc.known = false;
                acc.unverifiable.push(r.raw);
            }
        },
        _ => acc.known = false,
    }
}

/// The operator of `${#NAME}` (not a character sequence of the source).
pub const LENGTH: &str = "#len";
/// Values longer than this are not matched against patterns (cost is
/// quadratic in the value); such an expansion cannot be verified.
pub const MAX_PATTERN_VALUE: usize = 4096;

/// `${V#pat}`, `${V##pat}`, `${V%pat}`, `${V%%pat}` as sh evaluates them:
/// remove the shortest/longest prefix/suffix matching the glob `pat`. `None`:
/// too long to evaluate.
pub fn strip_pattern(v: &str, pat: &str, op: &str) -> Option<String> {
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
pub fn glob(p: &[char], s: &[char]) -> bool {
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
pub fn class(p: &[char], c: char) -> Option<usize> {
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
pub fn parse_ref(chars: &[char], i: usize) -> (String, Option<String>, (usize, usize), usize) {
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
