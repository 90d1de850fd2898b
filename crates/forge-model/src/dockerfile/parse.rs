//! Reading a Dockerfile into instructions: lines, `\` (or `# escape=`)
//! continuations, comments, heredocs (`<<EOF`, `<<-EOF`, quoted delimiters),
//! and words split as the shell quotes them. Must not expand or judge.

/// One instruction: keyword (upper case), arguments (continuations joined,
/// heredoc bodies appended after a newline), 1-based line of its keyword.
#[derive(Debug, Clone, PartialEq)]
pub struct Instruction {
    pub keyword: String,
    pub args: String,
    pub line: usize,
}

pub fn instructions(text: &str) -> (Vec<Instruction>, char) {
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
pub fn heredoc_delims(args: &str) -> Vec<(String, bool)> {
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
pub fn split_words(s: &str, escape: char) -> Vec<String> {
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

/// Every instruction named `keyword` (upper case: `RUN`, `COPY`): its 1-based
/// line and its arguments (continuations joined, heredoc bodies appended after a newline).
pub fn instructions_named(text: &str, keyword: &str) -> Vec<(usize, String)> {
    instructions(text).0.into_iter().filter(|i| i.keyword == keyword).map(|i| (i.line, i.args)).collect()
}
