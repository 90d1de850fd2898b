//! Output formats shared by every command that reports, and the one place that
//! writes GitHub workflow-command annotations.
use std::path::{Path, PathBuf};

/// `--format`: how a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// Aligned text for people (default).
    #[default]
    Human,
    /// One JSON document on stdout, with a `schema` version field.
    Json,
    /// GitHub Actions workflow commands (`::error file=,line=::`), plus the human text.
    Github,
}

/// `--format` of commands whose output is data but has nothing to annotate
/// (`plan`, `build-wheel`, `cache ls`, `pins show`): no `github` to offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum DataFormat {
    /// Aligned text for people (default).
    #[default]
    Human,
    /// One JSON document on stdout, with a `schema` version field.
    Json,
}

/// Make text safe for a CI log (GitHub Actions, GitLab, a terminal): the one
/// escaping function every path to the log goes through (stderr notes and
/// errors via `printer`, the human report under `--format github`, annotation
/// messages). A line that would start a workflow command (`::` or `##[` after
/// leading blanks) gets a leading `\`; CR, ESC and other control characters
/// are shown escaped (`\r`, `\u{1b}`), except colour codes (`ESC [ digits ; m`)
/// and tab and newline. Values from files can neither plant an annotation,
/// rewrite a line already printed, nor send terminal commands.
pub fn log_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let lead = line.trim_start();
        if lead.starts_with("::") || lead.starts_with("##[") {
            out.push('\\');
        }
        push_controls_escaped(&mut out, line);
    }
    out
}

/// `text` (a message, a report, any line the tool prints) with every URL in it
/// shown without secrets: `user:password@` / `token@` becomes `***@` (also in
/// scp-like `user:token@host:path`; a plain ssh user such as `git@` stays), and the value of each token-like query
/// parameter (`token`, `access_token`, `key`, `sig`, `signature`, `password`,
/// `secret`, `X-Amz-*`, any name holding `token`, `secret`, `passw`,
/// `signature`, `credential` or `auth`) becomes `***`. The printer passes every
/// line through it, so no URL reaches stdout or stderr with its secrets.
pub fn redact_urls(text: &str) -> String {
    if !text.contains('@') && !text.contains('?') {
        return text.to_string();
    }
    let delim = |c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '`' | '<' | '>' | '(' | ')' | '[' | ']' | ',');
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    for c in text.chars() {
        if delim(c) {
            out.push_str(&redact_word(&word));
            word.clear();
            out.push(c);
        } else {
            word.push(c);
        }
    }
    out.push_str(&redact_word(&word));
    out
}

/// One word of a text: a URL (or scp-like git address) without its secrets.
fn redact_word(w: &str) -> String {
    let (scheme, rest) = match w.find("://") {
        Some(i) => w.split_at(i + 3),
        None if w.contains('@') && w.contains(':') => ("", w),
        None => return w.to_string(),
    };
    let auth_end = if scheme.is_empty() {
        // scp-like: `user:token@host:path`, the `@` before the path's `:`.
        rest.rfind('@').map(|at| at + 1 + rest[at + 1..].find(':').unwrap_or(rest.len() - at - 1)).unwrap_or(0)
    } else {
        rest.find(['/', '?', '#']).unwrap_or(rest.len())
    };
    let (auth, tail) = rest.split_at(auth_end);
    let plain_user =
        |user: &str| !user.contains(':') && (scheme.is_empty() || matches!(scheme, "ssh://" | "git+ssh://"));
    let auth = match auth.rfind('@') {
        Some(at) if plain_user(&auth[..at]) => auth.to_string(),
        Some(at) => format!("***@{}", &auth[at + 1..]),
        None => auth.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, frag) =
                query.split_once('#').map(|(q, f)| (q, format!("#{f}"))).unwrap_or((query, String::new()));
            let params: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if secret_param(k) => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            format!("{path}?{}{frag}", params.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}{auth}{tail}")
}

/// A query parameter whose value is a credential.
fn secret_param(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    matches!(k.as_str(), "key" | "sig" | "signature" | "token" | "password" | "secret" | "code" | "apikey" | "api_key")
        || k.starts_with("x-amz-")
        || k.starts_with("x-goog-")
        || ["token", "secret", "passw", "signature", "credential", "auth"].iter().any(|n| k.contains(n))
}

/// `s` with CR, ESC (other than a colour code) and every other control
/// character but newline and tab shown escaped (`\r`, `\u{1b}`): what every
/// result line on stdout passes (a value from a file can neither rewrite a
/// line, which a CI runner splits at CR, nor send terminal commands), while
/// the workflow commands `--format github` prints on purpose stay as they are.
pub fn controls_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        push_controls_escaped(&mut out, line);
    }
    out
}

fn push_controls_escaped(out: &mut String, line: &str) {
    let mut chars = line.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c == '\x1b' {
            if let Some(len) = colour_code(&line[at..]) {
                out.push_str(&line[at..at + len]);
                for _ in 1..len {
                    chars.next();
                }
                continue;
            }
        }
        if c.is_control() && c != '\t' {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
}

/// Length of an SGR colour code (`ESC [ 1;31 m`) at the start of `s`.
fn colour_code(s: &str) -> Option<usize> {
    let body = s.strip_prefix("\x1b[")?;
    let n = body.bytes().take_while(|b| b.is_ascii_digit() || *b == b';').count();
    (n <= 16 && body.as_bytes().get(n) == Some(&b'm')).then_some(2 + n + 1)
}

/// Escape a value for a GitHub workflow command's message (after `::`):
/// `%`, CR and LF as the runner decodes them, other control characters shown
/// escaped (an ESC never reaches the log raw).
pub fn gh_escape_data(s: &str) -> String {
    let s = s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A");
    s.chars().flat_map(|c| if c.is_control() && c != '\t' { c.escape_debug().collect() } else { vec![c] }).collect()
}

/// Escape a value for a GitHub workflow command's property (`file=`, `title=`).
pub fn gh_escape_prop(s: &str) -> String {
    gh_escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// An annotation's level (`::error`, `::warning`, `::notice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Warning,
    Notice,
}

/// One GitHub annotation: where (file, line, column when known), a title and
/// a message (may span lines).
#[derive(Debug, Clone, Default)]
pub struct Annotation<'a> {
    pub file: Option<&'a Path>,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub title: String,
    pub message: String,
}

/// `::level file=F,line=L,col=C,title=T::message` with escaping; the file is made
/// relative to `$GITHUB_WORKSPACE` (annotations only attach to workspace paths).
pub fn annotation(level: Level, a: &Annotation) -> String {
    let cmd = match level {
        Level::Error => "error",
        Level::Warning => "warning",
        Level::Notice => "notice",
    };
    let mut props = Vec::new();
    if let Some(f) = a.file {
        let f = workspace_relative(f, crate::environ::var_os("GITHUB_WORKSPACE").map(PathBuf::from).as_deref());
        props.push(format!("file={}", gh_escape_prop(&f.display().to_string())));
        if let Some(l) = a.line {
            props.push(format!("line={l}"));
            if let Some(c) = a.column {
                props.push(format!("col={c}"));
            }
        }
    }
    props.push(format!("title={}", gh_escape_prop(&a.title)));
    format!("::{cmd} {}::{}\n", props.join(","), gh_escape_data(&a.message))
}

/// The human report printed after the annotations under `--format github`,
/// with workflow commands switched off around it (`::stop-commands::`). The
/// report quotes values from files a pull request controls, and the runner
/// takes any log line starting with `::` (after leading blanks) for a command:
/// a label like `1.2.1\n::error::...` would otherwise plant an annotation.
/// The end token is random, so no file can name it.
pub fn github_log(human: &str) -> String {
    if human.is_empty() {
        return String::new();
    }
    let token = random_token();
    let nl = if human.ends_with('\n') { "" } else { "\n" };
    format!("::stop-commands::{token}\n{}{nl}::{token}::\n", log_safe(human))
}

/// 128 random bits as hex, from the kernel (std's hasher keys as a fallback).
fn random_token() -> String {
    let mut b = [0u8; 16];
    // SAFETY: getrandom(2) writes at most `b.len()` bytes into `b`.
    let got = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if got != b.len() as isize {
        use std::hash::{BuildHasher, Hasher};
        for (i, chunk) in b.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i ^ std::process::id() as usize);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `path` relative to the workspace when it lies inside it (relative paths are
/// taken from the current directory); otherwise unchanged.
pub fn workspace_relative(path: &Path, workspace: Option<&Path>) -> PathBuf {
    workspace.and_then(|ws| relative_to(path, ws)).unwrap_or_else(|| path.to_path_buf())
}

/// `path` relative to the folder `base` when it lies inside it, both taken
/// as written (relative paths from the current directory, `.` and `..` taken
/// away without asking the file system); `None` when it does not (or `base`
/// is empty). A caller that must see through links resolves both first.
pub fn relative_to(path: &Path, base: &Path) -> Option<PathBuf> {
    if base.as_os_str().is_empty() {
        return None;
    }
    let abs = |p: &Path| std::path::absolute(p).ok().map(|a| lexical(&a));
    abs(path)?.strip_prefix(abs(base)?).ok().map(Path::to_path_buf)
}

/// `a/./b/../c` -> `a/c` without touching the filesystem.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// A path in a JSON document: as text, exactly. A path that is not UTF-8 is
/// an error naming its bytes escaped (`\xff`), never a lossy U+FFFD that
/// would name another folder (the CLI refuses such arguments and current
/// folders first; this holds for paths found inside trees).
pub fn path_lossy<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    match p.to_str() {
        Some(t) => s.serialize_str(t),
        None => Err(serde::ser::Error::custom(format!(
            "{NOT_UTF8}: `{}`: rename it to a UTF-8 name",
            p.as_os_str().as_encoded_bytes().escape_ascii()
        ))),
    }
}

/// The words of [`path_lossy`]'s error (`error::exit_of` makes it exit 2).
pub const NOT_UTF8: &str = "a path in the report is not UTF-8 text and JSON cannot carry it exactly";

/// [`path_lossy`] for a list of paths.
pub fn paths_lossy<S: serde::Serializer>(p: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(p.len()))?;
    for one in p {
        seq.serialize_element(&Exact(one))?;
    }
    seq.end()
}

struct Exact<'a>(&'a Path);

impl serde::Serialize for Exact<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        path_lossy(self.0, s)
    }
}

/// [`path_lossy`] for an optional path.
pub fn opt_path_lossy<S: serde::Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => path_lossy(p, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_urls_hides_every_credential_in_a_text() {
        let t = super::redact_urls(
            "cannot fetch from https://x-access-token:ghp_SECRET1@github.com/a/b.git: \
             'https://TOKEN2@h/x?ref=main&access_token=SECRET3&X-Amz-Signature=SECRET4#f' \
             oauth2:SECRET5@github.com:a/b.git (ssh://git:SECRET6@host/x) git@github.com:a/b.git",
        );
        for s in ["SECRET1", "TOKEN2", "SECRET3", "SECRET4", "SECRET5", "SECRET6"] {
            assert!(!t.contains(s), "{s} in {t}");
        }
        assert!(t.contains("https://***@github.com/a/b.git") && t.contains("ref=main&access_token=***"), "{t}");
        assert!(t.contains("git@github.com:a/b.git"), "{t}");
        assert_eq!(super::redact_urls("ssh://git@github.com/a/b.git"), "ssh://git@github.com/a/b.git");
        assert_eq!(super::redact_urls("plain words, a@b and x?y"), "plain words, a@b and x?y");
    }

    use super::*;

    #[test]
    fn annotations_carry_file_line_column_title_and_escape() {
        let a = Annotation {
            file: Some(Path::new("a,b/pins.toml")),
            line: Some(3),
            column: Some(7),
            title: "deepep-forge pins".into(),
            message: "50% wrong\nreally".into(),
        };
        assert_eq!(
            annotation(Level::Error, &a),
            "::error file=a%2Cb/pins.toml,line=3,col=7,title=deepep-forge pins::50%25 wrong%0Areally\n"
        );
        let none = Annotation { title: "t".into(), message: "m".into(), ..Default::default() };
        assert_eq!(annotation(Level::Notice, &none), "::notice title=t::m\n");
    }

    #[test]
    fn the_human_report_under_github_runs_no_workflow_command() {
        let planted = "error: label 1.2.1+abc\n::error file=x::pwned\n";
        let out = github_log(planted);
        let mut lines = out.lines();
        let first = lines.next().unwrap();
        let token = first.strip_prefix("::stop-commands::").expect("commands stopped first");
        assert_eq!(token.len(), 32);
        assert_eq!(out.lines().last().unwrap(), format!("::{token}::"), "resumed with the same token last");
        assert!(out.contains("\n\\::error file=x::pwned\n"), "a planted command is escaped as well");
        assert_ne!(github_log("x").lines().next(), github_log("x").lines().next(), "a fresh token each time");
        assert_eq!(github_log(""), "");
    }

    #[test]
    fn log_text_cannot_plant_commands_or_terminal_escapes() {
        let planted =
            "label 1.2.1\n::error file=x::pwned\n  ##[warning]old syntax\r::notice::cr\x1b]0;title\x07\x1b[2J";
        let safe = log_safe(planted);
        for line in safe.lines() {
            let lead = line.trim_start();
            assert!(!lead.starts_with("::") && !lead.starts_with("##["), "{line:?}");
        }
        assert!(!safe.contains('\r') && !safe.contains('\x1b') && !safe.contains('\x07'), "{safe:?}");
        assert!(safe.contains("\\r::notice::cr\\u{1b}]0;title\\u{7}\\u{1b}[2J"), "{safe:?}");
        // Colour codes of our own labels stay; tabs stay.
        assert_eq!(log_safe("\x1b[1;31merror\x1b[0m:\tx"), "\x1b[1;31merror\x1b[0m:\tx");
        assert_eq!(gh_escape_data("a\x1b[2Jb\r\n%"), "a\\u{1b}[2Jb%0D%0A%25");
    }

    #[test]
    fn paths_become_workspace_relative() {
        let ws = Path::new("/ws/repo");
        assert_eq!(workspace_relative(Path::new("/ws/repo/sub/uv.lock"), Some(ws)), Path::new("sub/uv.lock"));
        assert_eq!(workspace_relative(Path::new("/elsewhere/uv.lock"), Some(ws)), Path::new("/elsewhere/uv.lock"));
        assert_eq!(workspace_relative(Path::new("/ws/repo/./a/../uv.lock"), Some(ws)), Path::new("uv.lock"));
        assert_eq!(workspace_relative(Path::new("x/uv.lock"), None), Path::new("x/uv.lock"));
    }
}
