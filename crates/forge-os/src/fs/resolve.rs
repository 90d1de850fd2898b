//! Where a name of a [`Tree`] leads, and what a writer asks of it before it
//! writes: [`Tree::resolve`] follows links one by one and says where the
//! name ends up inside the tree, or which link leads out of it (so a caller
//! that writes a link's target, `pin set`, names the link in its refusal);
//! [`Tree::canonical`] is the folder's own path with every link resolved (its
//! identity: journals and locks are keyed by it); [`Tree::writable`] is
//! access(2) on a name of the tree; [`set_file_mode`] gives a staged file the
//! exact mode of the one it replaces. Must not decide what to read or write.
use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};

use super::{Kind, Tree};

/// Where a name leads ([`Tree::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The path inside the tree the name ends at, every link followed (it
    /// may be missing: a dangling link, or a name not made yet).
    Inside(PathBuf),
    /// A link on the way leads out of the tree: the link (its path inside the
    /// tree) and where it leads (absolute, `..` taken away as written, not
    /// resolved further: nothing outside the tree is asked).
    Outside { link: PathBuf, target: PathBuf },
}

/// Links followed by one [`Tree::resolve`] before it calls the name a loop (Linux's own limit).
const MAX_LINKS: usize = 40;

impl Tree {
    /// Follow `rel` link by link: where it ends inside the tree, or the link
    /// that leads out (an absolute link text counts as outside, as every
    /// [`Tree`] read refuses it). A loop is refused (exit 2).
    pub fn resolve(&self, rel: impl AsRef<Path>) -> Result<Resolved> {
        let rel = self.rel(rel.as_ref())?;
        let mut todo: VecDeque<OsString> = parts(&rel).into();
        let mut done = PathBuf::new();
        let (mut links, mut last_link) = (0, PathBuf::new());
        while let Some(part) = todo.pop_front() {
            if part == ".." {
                // Only a link's text gives `..`; `done` holds no link, so popping it is exact.
                if !done.pop() {
                    let target = lexical(&self.path.join(".."));
                    return Ok(Resolved::Outside { link: last_link, target });
                }
                continue;
            }
            let next = done.join(&part);
            if self.kind(&next)? != Kind::Link {
                done = next;
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(self.usage(&next, "a symlink loop (more than 40 links on the way)"));
            }
            let text = self.read_link(&next)?;
            last_link = next.clone();
            let target = lexical(&self.join(&done).join(&text));
            if text.is_absolute() || !target.starts_with(lexical(&self.path)) {
                return Ok(Resolved::Outside { link: next, target });
            }
            for p in parts(&text).into_iter().rev() {
                todo.push_front(p);
            }
        }
        Ok(Resolved::Inside(if done.as_os_str().is_empty() { PathBuf::from(".") } else { done }))
    }

    /// The folder's path with every link resolved, read from the opened
    /// folder itself (`/proc/self/fd`), else from its path.
    pub fn canonical(&self) -> Result<PathBuf> {
        let fd = format!("/proc/self/fd/{}", self.dir.as_raw_fd());
        match std::fs::read_link(&fd) {
            Ok(p) if p.is_absolute() => Ok(p),
            _ => std::fs::canonicalize(&self.path).with_context(|| format!("reading {}", self.path.display())),
        }
    }

    /// Whether this process may write `rel` (access(2), through links that
    /// stay inside) and its mode gives someone write permission at all (root
    /// may write anything, but a file nobody may write is meant to stay).
    pub fn writable(&self, rel: impl AsRef<Path>) -> bool {
        let Ok(rel) = self.rel(rel.as_ref()) else { return false };
        let Ok(c) = std::ffi::CString::new(rel.as_os_str().as_bytes()) else { return false };
        // SAFETY: faccessat(2) on an open folder and a NUL-terminated relative path.
        let access = unsafe { libc::faccessat(self.dir.as_raw_fd(), c.as_ptr(), libc::W_OK, 0) == 0 };
        use cap_std::fs::PermissionsExt;
        access && self.dir.metadata(&rel).is_ok_and(|m| m.permissions().mode() & 0o222 != 0)
    }
}

/// Give an opened file exactly `mode` (not less the umask): a staged file
/// that replaces another keeps the old one's permission bits.
pub fn set_file_mode(f: &std::fs::File, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777)).context("setting a file's mode")
}

/// The names of `p` (`.` dropped, `..` kept as a name), as a link text or a checked path gives them.
fn parts(p: &Path) -> Vec<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

/// `a/./b/../c` as `a/c`, without asking the file system.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}
