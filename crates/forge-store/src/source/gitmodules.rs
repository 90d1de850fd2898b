//! The submodules a `--source` folder declares in its `.gitmodules`, checked
//! before the snapshot commits them: a folder has no gitlinks, so each
//! submodule's commit is the snapshot of a sibling folder its `url` names
//! (`../mini-nccl`), and git resolves that URL beside the snapshot repository
//! the same way. Only that shape is accepted: a simple `[submodule "NAME"]`
//! section with `path` (relative, inside the folder, nothing there yet) and
//! `url` (`../` and plain names, a folder beside the source folder). Anything
//! else (a path that escapes, an absolute or option-like value, a URL outside
//! the folder's parent, a remote URL) is refused with the file and line.
//!
//! Must not run git.
use std::path::{Path, PathBuf};

use forge_os::error::Failure;
use forge_os::fs::{Kind, Tree};

/// One declared submodule: where it goes in the snapshot, which folder fills it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub path: String,
    /// The url as written (`../mini-nccl`): git resolves it beside the snapshot repository.
    pub url: String,
    /// The folder the url names, beside the source folder (canonical).
    pub folder: PathBuf,
}

/// At most this many submodules in one folder's `.gitmodules`.
const MAX: usize = 32;

/// The submodules `.gitmodules` of the source folder `src` declares, checked;
/// empty without the file.
pub fn declared(src: &Tree) -> anyhow::Result<Vec<Declared>> {
    let file = src.join(".gitmodules");
    match src.kind(".gitmodules")? {
        Kind::Missing => return Ok(vec![]),
        Kind::File { .. } => {}
        _ => return Err(refuse(&file, 0, "is not a regular file (a symlink or a folder)").into()),
    }
    let text = src.read_text(".gitmodules", forge_os::input::cap::TEXT)?;
    let entries = parse(&text).map_err(|(line, why)| refuse(&file, line, &why))?;
    if entries.is_empty() {
        return Ok(vec![]);
    }
    let dir = src.real_path()?;
    let parent = dir.parent().ok_or_else(|| refuse(&file, 0, "the source folder has no parent folder"))?;
    let parent = Tree::open(parent, "folder above the source folder")?;
    let mut out: Vec<Declared> = Vec::new();
    for e in entries {
        check_path(&e.path).map_err(|why| refuse(&file, e.path_line, &format!("path `{}`: {why}", e.path)))?;
        check_url(&e.url).map_err(|why| refuse(&file, e.url_line, &format!("url `{}`: {why}", e.url)))?;
        if out.iter().any(|d| d.path == e.path) {
            return Err(refuse(&file, e.path_line, &format!("path `{}` is declared twice", e.path)).into());
        }
        check_free(src, &e.path).map_err(|why| refuse(&file, e.path_line, &format!("path `{}`: {why}", e.path)))?;
        let folder = sibling(&dir, &parent, &e.url)
            .map_err(|why| refuse(&file, e.url_line, &format!("url `{}`: {why}", e.url)))?;
        out.push(Declared { path: e.path, url: e.url, folder });
    }
    Ok(out)
}

fn refuse(file: &Path, line: usize, why: &str) -> Failure {
    let at = if line > 0 { format!("{}:{line}", file.display()) } else { file.display().to_string() };
    Failure::usage(format!("{at}: {why}")).hint(
        "a snapshotted --source folder may declare submodules only as `[submodule \"NAME\"]` with `path = DIR` \
         (relative, inside the folder, absent there) and `url = ../FOLDER` (a folder beside the source folder, \
         whose files become the submodule's commit); for other submodules pass a git clone as --source",
    )
}

/// One `[submodule]` section as written.
struct Entry {
    path: String,
    path_line: usize,
    url: String,
    url_line: usize,
}

/// A `[submodule]` section being read: its header's line, path and url with their lines.
struct Open {
    at: usize,
    path: Option<(String, usize)>,
    url: Option<(String, usize)>,
}

/// The section read so far, complete (path and url) or refused at its header's line.
fn close(open: Option<Open>, out: &mut Vec<Entry>) -> Result<(), (usize, String)> {
    let Some(o) = open else { return Ok(()) };
    match (o.path, o.url) {
        (Some((path, path_line)), Some((url, url_line))) => {
            out.push(Entry { path, path_line, url, url_line });
            Ok(())
        }
        (None, _) => Err((o.at, "this submodule has no `path = ...`".into())),
        (_, None) => Err((o.at, "this submodule has no `url = ...`".into())),
    }
}

/// `[submodule "NAME"]` sections with `key = value` lines, `#`/`;` comments;
/// keys other than path and url are kept out (git reads them, the snapshot
/// does not need them). Err: (1-based line, what is wrong).
fn parse(text: &str) -> Result<Vec<Entry>, (usize, String)> {
    let mut out: Vec<Entry> = Vec::new();
    let mut open: Option<Open> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.contains('\\') || line.contains('\0') {
            return Err((n, "expected a plain line: escapes and continuations are not accepted here".into()));
        }
        if let Some(head) = line.strip_prefix('[') {
            close(open.take(), &mut out)?;
            let name = head
                .strip_suffix(']')
                .and_then(|h| h.strip_prefix("submodule \""))
                .and_then(|h| h.strip_suffix('"'))
                .filter(|name| !name.is_empty() && !name.contains('"'));
            if name.is_none() {
                return Err((n, format!("expected `[submodule \"NAME\"]`, found `{line}`")));
            }
            if out.len() >= MAX {
                return Err((n, format!("more than {MAX} submodules")));
            }
            open = Some(Open { at: n, path: None, url: None });
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err((n, format!("expected `key = value`, found `{line}`")));
        };
        let Some(section) = open.as_mut() else {
            return Err((n, "a value outside any `[submodule \"NAME\"]` section".into()));
        };
        let value = value.trim();
        if value.contains('"') || value.contains('#') || value.contains(';') {
            return Err((n, "expected an unquoted value without comments".into()));
        }
        let slot = match key.trim().to_ascii_lowercase().as_str() {
            "path" => &mut section.path,
            "url" => &mut section.url,
            _ => continue,
        };
        if slot.is_some() {
            return Err((n, format!("`{}` is given twice in this submodule", key.trim())));
        }
        *slot = Some((value.to_string(), n));
    }
    close(open, &mut out)?;
    Ok(out)
}

/// A name git and every shell read the same way: ASCII letters, digits, `._-`, not starting with `-` or `.`.
fn plain_component(c: &str) -> Result<(), String> {
    if c.is_empty() || c == "." || c == ".." {
        return Err(format!("`{c}` is not a folder name (expected plain names separated by `/`)"));
    }
    if c.starts_with('-') {
        return Err(format!("`{c}` starts with `-` (git would read it as an option)"));
    }
    if c.eq_ignore_ascii_case(".git") {
        return Err("names git's own folder".into());
    }
    if !c.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '.' | '_' | '-')) {
        return Err(format!("`{c}` has characters other than letters, digits, `.`, `_` and `-`"));
    }
    Ok(())
}

fn check_path(path: &str) -> Result<(), String> {
    if path.starts_with('/') {
        return Err("is absolute; expected a folder inside the source folder".into());
    }
    path.split('/')
        .try_for_each(plain_component)
        .map_err(|why| format!("{why}; expected a folder inside the source folder"))
}

fn check_url(url: &str) -> Result<(), String> {
    let Some(rest) = url.strip_prefix("../") else {
        return Err(if url.starts_with('-') {
            "starts with `-` (git would read it as an option); expected `../FOLDER`, a folder beside the source folder"
                .into()
        } else {
            "expected `../FOLDER`, a folder beside the source folder (a remote or absolute URL is not snapshotted)"
                .into()
        });
    };
    rest.split('/')
        .try_for_each(plain_component)
        .map_err(|why| format!("{why}; expected `../FOLDER` inside the source folder's parent"))
}

/// Nothing in the folder at `path` (the gitlink goes there), and no file or link on the way to it.
fn check_free(src: &Tree, path: &str) -> Result<(), String> {
    let parts: Vec<&str> = path.split('/').collect();
    for k in 1..=parts.len() {
        let rel = parts[..k].join("/");
        let shown = src.join(&rel);
        match src.kind(&rel).map_err(|e| format!("{e:#}"))? {
            Kind::Missing => return Ok(()),
            Kind::Dir => {}
            _ => return Err(format!("{} is a file or a link, not a folder", shown.display())),
        }
        if k == parts.len() && src.list(&rel, 1).map(|l| l.total > 0).unwrap_or(true) {
            return Err(format!(
                "{} has files: the submodule's files come from the folder its url names, so this one must be empty or absent",
                shown.display()
            ));
        }
    }
    Ok(())
}

/// The folder `url` names beside `dir` (canonical): it exists inside `parent`
/// (a link that leads out of it is refused on the way), and, links resolved,
/// it lies outside `dir` itself.
fn sibling(dir: &Path, parent: &Tree, url: &str) -> Result<PathBuf, String> {
    let rest = url.trim_start_matches("../");
    let want = parent.join(rest);
    let sub = parent.sub(rest, "submodule folder").map_err(|e| match format!("{e:#}") {
        e if e.contains("leads outside") => {
            format!("{} lies outside {} (a link leads out)", want.display(), parent.path().display())
        }
        e => format!("{}: {e}", want.display()),
    })?;
    let folder = sub.real_path().map_err(|e| format!("{}: {e:#}", want.display()))?;
    let top = parent.real_path().map_err(|e| format!("{}: {e:#}", parent.path().display()))?;
    if !folder.starts_with(&top) || folder == top {
        return Err(format!("{} lies outside {} (a link leads out)", folder.display(), top.display()));
    }
    if folder.starts_with(dir) || dir.starts_with(&folder) {
        return Err(format!("{} is the source folder, inside it or above it", folder.display()));
    }
    Ok(folder)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Result<(String, String), (usize, String)> {
        let e = parse(text)?;
        Ok((e[0].path.clone(), e[0].url.clone()))
    }

    #[test]
    fn a_plain_section_parses() {
        let t =
            "# c\n[submodule \"third-party/nccl\"]\n\tpath = third-party/nccl\n\turl = ../mini-nccl\n\tbranch = x\n";
        assert_eq!(one(t), Ok(("third-party/nccl".into(), "../mini-nccl".into())));
    }

    #[test]
    fn odd_shapes_are_refused_with_their_line() {
        for (t, line) in [
            ("[submodule.x]\npath = a\nurl = ../b\n", 1),
            ("path = a\n", 1),
            ("[submodule \"x\"]\npath = a\n", 1),
            ("[submodule \"x\"]\npath = a\nurl = ../b\npath = c\n", 4),
            ("[submodule \"x\"]\npath = \"a\"\nurl = ../b\n", 2),
            ("[submodule \"x\"]\npath = a \\\nurl = ../b\n", 2),
            ("[include]\npath = x\n", 1),
        ] {
            assert_eq!(one(t).map_err(|e| e.0), Err(line), "{t}");
        }
    }

    #[test]
    fn paths_and_urls_outside_the_shape_are_refused() {
        for p in ["/etc", "../x", "a/../../b", "a//b", "-u", ".git/hooks", "a b", ""] {
            assert!(check_path(p).is_err(), "{p}");
        }
        assert!(check_path("third-party/nccl").is_ok());
        for u in [
            "-uhostile",
            "https://github.com/NVIDIA/nccl.git",
            "/srv/nccl",
            "../../etc",
            "../a/../../b",
            "./x",
            "../-u",
            "../",
        ] {
            assert!(check_url(u).is_err(), "{u}");
        }
        assert!(check_url("../mini-nccl").is_ok());
    }
}
