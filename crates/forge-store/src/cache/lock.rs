//! Advisory file locks (flock(2) through `std::fs::File::lock`): one holder at
//! a time, released when the file is closed or the process dies, so a lock of
//! a killed process never lingers. On a shared filesystem (NFS v4) the lock is
//! seen by every node, which a process id is not.
//!
//! A lock file is a name inside a [`Tree`] (the cache, a mirror's folder):
//! its folders are made inside the tree, and a lock file planted as a link, a
//! FIFO or a device is refused, never followed or waited on (exit 2). The
//! `&Path` forms open the lock's folder as a tree first (for callers that
//! name a lock by its path).
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use forge_os::error::check_interrupted;
use forge_os::fs::{File, Tree, TryLockError};

/// The lock file `rel` of `tree`, its folders made when absent.
fn open(tree: &Tree, rel: &Path) -> Result<File> {
    if let Some(d) = rel.parent().filter(|d| !d.as_os_str().is_empty()) {
        super::make_dir(tree, d)?;
    }
    tree.open_lock(rel).map_err(|e| {
        match e.downcast_ref::<std::io::Error>().filter(|io| io.kind() == std::io::ErrorKind::PermissionDenied) {
            Some(io) => {
                not_yours(tree, rel, std::io::Error::from_raw_os_error(io.raw_os_error().unwrap_or(libc::EACCES)))
            }
            None => e,
        }
    })
}

/// A lock file this user may not open for writing (another user's leftover in a
/// shared folder): missing environment (exit 3), saying whose it is and what to do.
fn not_yours(tree: &Tree, rel: &Path, e: std::io::Error) -> anyhow::Error {
    let owner = tree.stat(rel).map(|s| format!("owned by uid {}", s.uid)).unwrap_or_default();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    forge_os::error::Failure::env(format!(
        "cannot take the lock {} ({owner}{}not writable by uid {me}: {e})",
        tree.join(rel).display(),
        if owner.is_empty() { "" } else { ", " }
    ))
    .hint(
        "another user's run left it: when no run of theirs is active, ask them (or root) to remove it; for a folder shared on purpose, give it a common group and mode 2775 (SECURITY.md, Shared caches); or use a folder of your own",
    )
    .into()
}

/// An exclusive lock on `rel` of `tree` (created if absent), held until the
/// file is dropped; waits for the holder, checking for Ctrl-C every 100 ms.
pub fn exclusive_in(tree: &Tree, rel: impl AsRef<Path>) -> Result<File> {
    let rel = rel.as_ref();
    let f = open(tree, rel)?;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(TryLockError::WouldBlock) => {
                check_interrupted()?;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", tree.join(rel).display()))
            }
        }
    }
}

/// A shared lock on `rel` of `tree` (created if absent), held until the file
/// is dropped; waits while an exclusive holder has it (`cache gc` holds it
/// only briefly and never waits itself). An existing lock file this user may
/// not write (another user's, in a shared cache) is opened for reading: flock
/// needs no write access.
pub fn shared_in(tree: &Tree, rel: impl AsRef<Path>) -> Result<File> {
    let rel = rel.as_ref();
    let f = match open(tree, rel) {
        Ok(f) => f,
        Err(e) => tree.open_file_nofollow(rel, 1 << 20).map(|(f, _)| f).map_err(|_| e)?,
    };
    f.lock_shared().with_context(|| format!("locking {}", tree.join(rel).display()))?;
    Ok(f)
}

/// The lock on `rel` of `tree` if nobody holds it now (`None`: held elsewhere).
pub fn try_exclusive_in(tree: &Tree, rel: impl AsRef<Path>) -> Result<Option<File>> {
    let rel = rel.as_ref();
    let f = open(tree, rel)?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", tree.join(rel).display())),
    }
}

/// Whether `f` (a locked file) is still the file at `rel` of `tree`: a
/// cleaner may have unlinked a lock file between its creation and our lock.
pub fn still_in(f: &File, tree: &Tree, rel: impl AsRef<Path>) -> bool {
    match (forge_os::fs::Stat::of(f), tree.stat(rel)) {
        (Ok(a), Ok(b)) => a.dev == b.dev && a.ino == b.ino,
        _ => false,
    }
}

/// The folder of the lock file `path` (made when absent) as a tree, and the lock's name in it.
fn folder_of(path: &Path) -> Result<(Tree, &std::ffi::OsStr)> {
    let name = path.file_name().with_context(|| format!("{} names no lock file", path.display()))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((Tree::create(dir, "lock folder")?, name))
}

/// [`exclusive_in`] for a lock named by its path.
pub fn exclusive(path: &Path) -> Result<File> {
    let (tree, name) = folder_of(path)?;
    exclusive_in(&tree, name)
}

/// [`shared_in`] for a lock named by its path.
pub fn shared(path: &Path) -> Result<File> {
    let (tree, name) = folder_of(path)?;
    shared_in(&tree, name)
}

/// [`try_exclusive_in`] for a lock named by its path.
pub fn try_exclusive(path: &Path) -> Result<Option<File>> {
    let (tree, name) = folder_of(path)?;
    try_exclusive_in(&tree, name)
}
