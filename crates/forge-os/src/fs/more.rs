//! Additions to [`Tree`] for the stores (the cache, an index, an evidence
//! folder): what must not replace what is there (a folder made only when its
//! name is free, [`Tree::create_dir`]; a staged file put in place only under
//! a free name, [`Staged::commit_new`]: a key file, an immutable file of an
//! index), a folder that may not exist yet ([`Tree::open_if_exists`]: a read
//! never creates it), its real path ([`Tree::real_path`]), and [`Tree::handle`] (a lock on the folder itself, its
//! times). Must not decide names.
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::Result;

use super::{Kind, Staged, Stat, Tree};

impl Tree {
    /// [`Tree::open`], but nothing at `path` is `Ok(None)` (a listing of a
    /// cache that was never written creates nothing). Anything else there
    /// that is not a folder is refused as `open` refuses it.
    pub fn open_if_exists(path: &Path, what: impl Into<std::borrow::Cow<'static, str>>) -> Result<Option<Tree>> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            _ => Tree::open(path, what).map(Some),
        }
    }

    /// The folder's path with every link resolved (realpath(3) of [`Tree::path`]):
    /// to tell whether two folders are one, or to name it the same way however it was reached.
    pub fn real_path(&self) -> Result<std::path::PathBuf> {
        std::fs::canonicalize(&self.path).map_err(|e| self.refused(Path::new("."), e, "resolving"))
    }

    /// Make the folder `rel` (its parent must exist). `Ok(false)`: something
    /// is at `rel` already (a folder, a file, a link), and nothing changed.
    pub fn make_dir(&self, rel: impl AsRef<Path>) -> Result<bool> {
        let rel = self.rel(rel.as_ref())?;
        match self.dir.create_dir(&rel) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(self.refused(&rel, e, "creating the folder")),
        }
    }

    /// The folder's own descriptor (a second handle): for `flock` on the
    /// folder itself, or to set its times. Never a way to a path outside.
    pub fn handle(&self) -> Result<std::fs::File> {
        use cap_std::fs::{OpenOptions, OpenOptionsExt};
        // A descriptor opened for reading (the tree's own is O_PATH: no flock, no futimens).
        let mut o = OpenOptions::new();
        o.read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC);
        let f = self.dir.open_with(".", &o).map_err(|e| self.refused(Path::new("."), e, "opening"))?;
        Ok(f.into_std())
    }
}

impl Stat {
    /// What the opened file `f` is (read on its descriptor, so a name swapped
    /// after opening changes nothing): a lock still at its name, a key file's mode.
    pub fn of(f: &std::fs::File) -> Result<Stat> {
        use std::os::unix::fs::MetadataExt;
        let m = f.metadata()?;
        let t = m.file_type();
        let kind = if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File { len: m.len() }
        } else {
            Kind::Special
        };
        Ok(Stat { kind, mode: m.mode(), mtime: m.mtime(), uid: m.uid(), dev: m.dev(), ino: m.ino() })
    }
}

impl Staged<'_> {
    /// Put the file in place only while nothing is at its name (a file, a
    /// folder, a dangling link: never replaced): `renameat2(RENAME_NOREPLACE)`,
    /// or where the file system lacks it a hard link then the temporary
    /// removed. `Ok(false)`: the name was taken; nothing changed there, and
    /// the temporary is gone.
    pub fn commit_new(mut self) -> Result<bool> {
        let temp = self.temp.take().expect("staged once");
        let made = rename_noreplace(&self.folder, &temp, &self.name).or_else(|e| match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::ENOSYS) => {
                let linked = self.folder.hard_link(&temp, &self.folder, &self.name);
                let _ = self.folder.remove_file(&temp);
                linked
            }
            _ => Err(e),
        });
        match made {
            Ok(()) => Ok(true),
            Err(e) => {
                let _ = self.folder.remove_file(&temp);
                match e.kind() {
                    std::io::ErrorKind::AlreadyExists => Ok(false),
                    _ => Err(self.tree.refused(&self.rel, e, "writing")),
                }
            }
        }
    }
}

/// Set the permission bits of the opened file `f` to exactly `mode` (the
/// umask does not narrow them): a file a static host serves must be readable by it.
pub fn set_mode_exact(f: &std::fs::File, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    Ok(f.set_permissions(std::fs::Permissions::from_mode(mode))?)
}

/// `from` renamed to `to`, both plain names in `folder`, never over an existing name.
fn rename_noreplace(folder: &cap_std::fs::Dir, from: &std::ffi::OsStr, to: &std::ffi::OsStr) -> std::io::Result<()> {
    let c = |n: &std::ffi::OsStr| {
        std::ffi::CString::new(n.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (f, t) = (c(from)?, c(to)?);
    let fd = folder.as_raw_fd();
    // SAFETY: two NUL-terminated names (one component each, no `/`: resolved in
    // `folder` only) and a descriptor that lives for the call.
    if unsafe { libc::renameat2(fd, f.as_ptr(), fd, t.as_ptr(), libc::RENAME_NOREPLACE) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
