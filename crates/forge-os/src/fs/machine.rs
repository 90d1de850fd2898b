//! This machine's own files, looked at without opening them: a toolchain's
//! programs, folders and libraries (the build Python's environment,
//! `CUDA_HOME`, a program on `PATH`, rdma-core's headers), or whether a folder
//! the user names (`--out`) exists yet. Links are followed as the system
//! follows them: these are paths the tool does not own and never writes. The
//! one ambient stat and listing of such a path; nothing here reads a file's
//! bytes (that is [`super::named`]) or writes anything (a folder the tool
//! writes in is a [`super::Tree`]). Must not decide what a path means.
use std::path::{Path, PathBuf};

use super::{Kind, MAX_NAMES};

/// What [`facts`] tells of a path (links followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Never [`Kind::Link`]: the link's target is described.
    pub kind: Kind,
    pub len: u64,
    /// Modification and change times, nanoseconds since the epoch.
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub dev: u64,
    pub ino: u64,
}

/// What is at `path`, following links; `None` when nothing is (a dangling link
/// included) or it cannot be looked at.
pub fn facts(path: &Path) -> Option<Facts> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    let t = m.file_type();
    let kind = if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File { len: m.len() }
    } else {
        Kind::Special
    };
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Some(Facts {
        kind,
        len: m.len(),
        mtime_ns: ns(m.mtime(), m.mtime_nsec()),
        ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// What is at `path` itself, a final link not followed ([`Kind::Link`]).
pub fn kind(path: &Path) -> Kind {
    match std::fs::symlink_metadata(path) {
        Err(_) => Kind::Missing,
        Ok(m) if m.file_type().is_symlink() => Kind::Link,
        Ok(_) => facts(path).map_or(Kind::Missing, |f| f.kind),
    }
}

/// Whether `path` is a regular file (through links).
pub fn is_file(path: &Path) -> bool {
    facts(path).is_some_and(|f| f.kind.is_file())
}

/// Whether `path` is a folder (through links).
pub fn is_dir(path: &Path) -> bool {
    facts(path).is_some_and(|f| f.kind == Kind::Dir)
}

/// Whether anything is at `path` (through links: a dangling link is nothing).
pub fn exists(path: &Path) -> bool {
    facts(path).is_some()
}

/// `path` with every link and `..` resolved, when it exists.
pub fn real(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// The UTF-8 names in the folder `dir`, sorted by their bytes, at most
/// [`MAX_NAMES`] (the first ones read); none when it is no readable folder.
pub fn names(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> =
        rd.take(MAX_NAMES).flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    names
}

/// The nearest of `path` and its parents at which something is, and what
/// that is, links followed (a dangling link stays [`Kind::Link`]); a relative
/// path ends at the working folder (`.`).
pub fn nearest(path: &Path) -> (PathBuf, Kind) {
    let mut p = path;
    loop {
        match kind(p) {
            Kind::Missing => {}
            Kind::Link => return (p.to_path_buf(), facts(p).map_or(Kind::Link, |f| f.kind)),
            k => return (p.to_path_buf(), k),
        }
        match p.parent() {
            Some(up) if !up.as_os_str().is_empty() => p = up,
            _ => return (PathBuf::from("."), kind(Path::new("."))),
        }
    }
}
