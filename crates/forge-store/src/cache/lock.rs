//! Advisory file locks (flock(2) through `std::fs::File::lock`): one holder at
//! a time, released when the file is closed or the process dies, so a lock of
//! a killed process never lingers. On a shared filesystem (NFS v4) the lock is
//! seen by every node, which a process id is not.
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use forge_os::error::check_interrupted;

fn open(path: &Path) -> Result<File> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    // A lock file planted as a symlink, a FIFO or a device is refused, never followed or waited on.
    forge_os::fs::named::open_lock(path, "lock file").map_err(|e| {
        match e.downcast_ref::<std::io::Error>().filter(|io| io.kind() == std::io::ErrorKind::PermissionDenied) {
            Some(io) => not_yours(path, std::io::Error::from_raw_os_error(io.raw_os_error().unwrap_or(libc::EACCES))),
            None => e,
        }
    })
}

/// A lock file this user may not open for writing (another user's leftover in a
/// shared folder): missing environment (exit 3), saying whose it is and what to do.
fn not_yours(path: &Path, e: std::io::Error) -> anyhow::Error {
    let owner = std::fs::symlink_metadata(path).map(|m| format!("owned by uid {}", m.uid())).unwrap_or_default();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    forge_os::error::Failure::env(format!(
        "cannot take the lock {} ({owner}{}not writable by uid {me}: {e})",
        path.display(),
        if owner.is_empty() { "" } else { ", " }
    ))
    .hint(
        "another user's run left it: when no run of theirs is active, ask them (or root) to remove it; for a folder shared on purpose, give it a common group and mode 2775 (SECURITY.md, Shared caches); or use a folder of your own",
    )
    .into()
}

/// An exclusive lock on `path` (created if absent), held until the file is
/// dropped; waits for the holder, checking for Ctrl-C every 100 ms.
pub fn exclusive(path: &Path) -> Result<File> {
    let f = open(path)?;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => {
                check_interrupted()?;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()))
            }
        }
    }
}

/// A shared lock on `path` (created if absent), held until the file is dropped;
/// waits while an exclusive holder has it (`cache gc` holds it only briefly and never waits itself).
pub fn shared(path: &Path) -> Result<File> {
    let f = match open(path) {
        Ok(f) => f,
        Err(e) => read_only(path).ok_or(e)?,
    };
    f.lock_shared().with_context(|| format!("locking {}", path.display()))?;
    Ok(f)
}

/// An existing lock file opened for reading only (flock needs no write access: a
/// lock file another user of a shared cache made is still locked), never through a
/// link, never blocking, a regular file.
fn read_only(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
}

/// The lock on `path` if nobody holds it now (`None`: held elsewhere).
pub fn try_exclusive(path: &Path) -> Result<Option<File>> {
    let f = open(path)?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// Whether `f` (a locked file) is still the file at `path`: a cleaner may
/// have unlinked a lock file between its creation and our lock.
pub fn still_at(f: &File, path: &Path) -> bool {
    match (f.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}
