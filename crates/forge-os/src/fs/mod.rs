//! The one owner of the file system (as `process` owns child processes):
//! every open, create, rename, remove and directory walk of a tree the tool
//! works in (`--out`, a consumer project, the pins repository, the cache, an
//! evidence folder, the build root, an index folder, the host root) goes
//! through a [`Tree`], a folder opened once and then used only by paths
//! *relative* to it. Resolution never leaves the tree: a link or a `..` that
//! leads outside is refused (cap-std's `Dir`, `openat2(RESOLVE_BENEATH)` where
//! the kernel has it), so a link planted at `<out>/<variant>` or a project's
//! `docker/` cannot send a write, a read or a removal elsewhere.
//!
//! - Writes are a temporary file in the destination's own folder renamed over
//!   the name ([`Tree::write`]); a destination that exists and is not a
//!   regular file (a folder, a FIFO, a link, a device) is refused, exit 2.
//! - Deliveries of several files are staged first and renamed into place only
//!   when every one is staged and every destination checked ([`Delivery`]).
//! - Reads are of regular files only, never block (a FIFO is refused, not
//!   waited on) and are bounded by a cap; listings are sorted and bounded.
//! - Files the user names on the command line are read by [`named`], where the
//!   path is the user's own choice.
//!
//! The ambient entry points are [`Tree::open`], [`Tree::create`], [`TempTree`]
//! and [`named`]; `tests/it/structure.rs` lists the files that call them and
//! fails on `std::fs` anywhere else. Must not decide what to read or write.
use std::borrow::Cow;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use crate::error::Failure;

mod lock;
pub mod machine;
mod more;
pub mod named;
mod resolve;
mod temp;
mod walk;

pub use lock::lock_exclusive;
pub use more::set_mode_exact;
pub use resolve::{set_file_mode, Resolved};
/// The file a tree opens (a lock held, a file read) and why a lock was not
/// taken: the standard ones, named here.
pub use std::fs::TryLockError;
pub use temp::TempTree;
pub use walk::{Walk, Walked};

/// An opened file (what [`Tree::open_file`] and [`named::open`] give), and
/// its positioned reads: named here so that code outside this module never
/// names `std::fs`.
pub type File = std::fs::File;
pub use std::os::unix::fs::FileExt;

/// What a name in a tree is, never following a final link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Missing,
    File {
        len: u64,
    },
    Dir,
    Link,
    /// A FIFO, socket or device.
    Special,
}

impl Kind {
    pub fn is_file(self) -> bool {
        matches!(self, Kind::File { .. })
    }
    /// How a message names it.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Missing => "missing",
            Kind::File { .. } => "a regular file",
            Kind::Dir => "a folder",
            Kind::Link => "a symbolic link",
            Kind::Special => "a FIFO, socket or device",
        }
    }
}

/// One name of a listing ([`Tree::list`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: OsString,
    pub kind: Kind,
}

impl Entry {
    /// The name as UTF-8 (`None` for a name that is not).
    pub fn utf8(&self) -> Option<&str> {
        self.name.to_str()
    }
}

/// A folder's names, sorted by their bytes, at most `cap` of them.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub entries: Vec<Entry>,
    /// How many names the folder holds in all (more than `entries` when capped).
    pub total: usize,
}

impl Listing {
    /// Names left out by the cap.
    pub fn omitted(&self) -> usize {
        self.total - self.entries.len()
    }
}

/// A listing holds at most this many names before sorting: a folder with more
/// is refused rather than read in whatever order the file system gives.
pub const MAX_NAMES: usize = 1 << 16;

/// A folder opened once; every path below it is resolved inside it.
#[derive(Debug)]
pub struct Tree {
    dir: Dir,
    path: PathBuf,
    what: Cow<'static, str>,
}

/// The mode of a written file before the umask: public, like a wheel.
pub const PUBLIC: u32 = 0o666;

impl Tree {
    /// The existing folder `path` as a tree. `what` names it in messages
    /// ("output folder", "project", "cache"). The path itself may pass
    /// through links (it is the caller's choice); below it nothing escapes.
    pub fn open(path: &Path, what: impl Into<Cow<'static, str>>) -> Result<Tree> {
        let what = what.into();
        let dir =
            Dir::open_ambient_dir(path, cap_std::ambient_authority()).map_err(|e| not_a_folder(path, &what, e))?;
        Ok(Tree { dir, path: absolute(path), what })
    }

    /// `path` made (with its parents) when absent, then opened as [`Tree::open`].
    pub fn create(path: &Path, what: impl Into<Cow<'static, str>>) -> Result<Tree> {
        let what = what.into();
        match std::fs::create_dir_all(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists || e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(not_a_folder(path, &what, e));
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("creating {what} {}", path.display()))),
        }
        Self::open(path, what)
    }

    /// The folder's path, for child processes and messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the folder is, as messages name it.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// `rel` as a path outside the tree would name it (for messages and children).
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        let rel = rel.as_ref();
        if rel.as_os_str().is_empty() || rel == Path::new(".") {
            return self.path.clone();
        }
        self.path.join(rel)
    }

    /// The same folder, opened again (a second handle).
    pub fn try_clone(&self) -> Result<Tree> {
        Ok(Tree { dir: self.dir.try_clone()?, path: self.path.clone(), what: self.what.clone() })
    }

    /// The folder `rel` (existing) as a tree of its own: confined to itself.
    pub fn sub(&self, rel: impl AsRef<Path>, what: impl Into<Cow<'static, str>>) -> Result<Tree> {
        let rel = self.rel(rel.as_ref())?;
        let what = what.into();
        let dir = if is_here(&rel) { self.dir.try_clone() } else { self.dir.open_dir(&rel) };
        let dir = dir.map_err(|e| self.refused(&rel, e, &format!("opening {what}")))?;
        Ok(Tree { dir, path: self.join(&rel), what })
    }

    /// The folder `rel`, made with its parents when absent, as a tree of its own.
    pub fn sub_create(&self, rel: impl AsRef<Path>, what: impl Into<Cow<'static, str>>) -> Result<Tree> {
        self.create_dir_all(rel.as_ref())?;
        self.sub(rel, what)
    }

    /// What `rel` is, not following a final link (a link on the way that leads
    /// outside is refused).
    pub fn kind(&self, rel: impl AsRef<Path>) -> Result<Kind> {
        let rel = self.rel(rel.as_ref())?;
        match self.dir.symlink_metadata(&rel) {
            Ok(m) => Ok(kind_of(&m)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
                Ok(Kind::Missing)
            }
            Err(e) => Err(self.refused(&rel, e, "reading")),
        }
    }

    /// Whether `rel` names a regular file (a link to one counts only where
    /// it stays inside).
    pub fn is_file(&self, rel: impl AsRef<Path>) -> bool {
        self.rel(rel.as_ref()).is_ok_and(|r| self.dir.metadata(r).is_ok_and(|m| m.is_file()))
    }

    /// Whether `rel` names a folder (through links that stay inside).
    pub fn is_dir(&self, rel: impl AsRef<Path>) -> bool {
        self.rel(rel.as_ref()).is_ok_and(|r| is_here(&r) || self.dir.metadata(r).is_ok_and(|m| m.is_dir()))
    }

    /// Whether anything is at `rel` (a dangling link counts).
    pub fn exists(&self, rel: impl AsRef<Path>) -> bool {
        self.kind(rel).is_ok_and(|k| k != Kind::Missing)
    }

    /// `rel` opened for reading: a regular file (through links that stay
    /// inside) of at most `cap` bytes, opened without blocking. Returns it and its size.
    pub fn open_file(&self, rel: impl AsRef<Path>, cap: u64) -> Result<(std::fs::File, u64)> {
        let rel = self.rel(rel.as_ref())?;
        let mut o = OpenOptions::new();
        o.read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        let f = self.dir.open_with(&rel, &o).map_err(|e| self.refused(&rel, e, "reading"))?.into_std();
        let len = named::regular(&f, &self.join(&rel), self.what())?.len();
        if len > cap {
            return Err(self.usage(&rel, format!("{len} bytes, more than the {cap} bytes allowed")));
        }
        Ok((f, len))
    }

    /// `rel` opened for reading as [`Tree::open_file`], but a final link is
    /// refused (a tree the tool does not own: a build tree's log).
    pub fn open_file_nofollow(&self, rel: impl AsRef<Path>, cap: u64) -> Result<(std::fs::File, u64)> {
        let r = self.rel(rel.as_ref())?;
        if self.kind(&r)? == Kind::Link {
            return Err(self.usage(&r, "a symbolic link (never followed here)"));
        }
        self.open_file(r, cap)
    }

    /// The bytes of `rel` (see [`Tree::open_file`]).
    pub fn read(&self, rel: impl AsRef<Path>, cap: u64) -> Result<Vec<u8>> {
        let rel = rel.as_ref();
        let (f, _) = self.open_file(rel, cap)?;
        named::read_opened(f, &self.join(rel), self.what(), cap)
    }

    /// The UTF-8 text of `rel` (see [`Tree::open_file`]).
    pub fn read_text(&self, rel: impl AsRef<Path>, cap: u64) -> Result<String> {
        let rel = rel.as_ref();
        named::utf8(self.read(rel, cap)?, &self.join(rel), self.what())
    }

    /// Like [`Tree::read`], but nothing at `rel` is `Ok(None)`.
    pub fn read_opt(&self, rel: impl AsRef<Path>, cap: u64) -> Result<Option<Vec<u8>>> {
        let rel = rel.as_ref();
        if self.kind(rel)? == Kind::Missing {
            return Ok(None);
        }
        self.read(rel, cap).map(Some)
    }

    /// Like [`Tree::read_text`], but nothing at `rel` is `Ok(None)`.
    pub fn read_text_opt(&self, rel: impl AsRef<Path>, cap: u64) -> Result<Option<String>> {
        let rel = rel.as_ref();
        if self.kind(rel)? == Kind::Missing {
            return Ok(None);
        }
        self.read_text(rel, cap).map(Some)
    }

    /// Where a link at `rel` points (its text, not resolved).
    pub fn read_link(&self, rel: impl AsRef<Path>) -> Result<PathBuf> {
        let rel = self.rel(rel.as_ref())?;
        self.dir.read_link_contents(&rel).map_err(|e| self.refused(&rel, e, "reading the link"))
    }

    /// Write `bytes` to `rel` (mode 0666 less the umask): see [`Tree::write_with`].
    pub fn write(&self, rel: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
        self.write_with(rel, PUBLIC, |f| Ok(f.write_all(bytes)?))
    }

    /// Write `rel` by a temporary file in its own folder, filled by `fill`
    /// and renamed over the name: a reader sees the old file or the new one,
    /// never half of it, and a failure leaves the old one. `mode` before the
    /// umask. A destination that is not a regular file is refused before
    /// anything is written (exit 2).
    pub fn write_with(
        &self,
        rel: impl AsRef<Path>,
        mode: u32,
        fill: impl FnOnce(&mut std::fs::File) -> Result<()>,
    ) -> Result<()> {
        let staged = self.stage(rel, mode, fill)?;
        staged.commit()
    }

    /// A file for `rel`, written now into a temporary name beside it and put
    /// in place by [`Staged::commit`] (dropped uncommitted, it is removed).
    /// The destination is checked first: absent or a regular file.
    pub fn stage(
        &self,
        rel: impl AsRef<Path>,
        mode: u32,
        fill: impl FnOnce(&mut std::fs::File) -> Result<()>,
    ) -> Result<Staged<'_>> {
        let rel = self.rel(rel.as_ref())?;
        let (parent, name) = split(&rel).ok_or_else(|| self.usage(&rel, "not a file name"))?;
        self.check_destination(&rel)?;
        let folder = if is_here(parent) { self.dir.try_clone() } else { self.dir.open_dir(parent) };
        let folder = folder.map_err(|e| self.refused(parent, e, "opening the folder of"))?;
        let (file, temp) = create_temp(&folder, name, mode).map_err(|e| self.refused(&rel, e, "writing"))?;
        let staged = Staged { tree: self, folder, temp: Some(temp), name: name.to_os_string(), rel: rel.clone() };
        let mut std_file = file.into_std();
        fill(&mut std_file).with_context(|| format!("writing {}", self.join(&rel).display()))?;
        std_file.flush()?;
        drop(std_file);
        staged.check()?;
        Ok(staged)
    }

    /// Refuse a destination that exists and is not a regular file (a folder,
    /// a FIFO, a device, a link): exit 2, naming it.
    pub fn check_destination(&self, rel: impl AsRef<Path>) -> Result<()> {
        let rel = self.rel(rel.as_ref())?;
        match self.kind(&rel)? {
            Kind::Missing | Kind::File { .. } => Ok(()),
            k => Err(Failure::usage(format!("{} is {}, not a regular file", self.join(&rel).display(), k.noun()))
                .hint(format!("remove it, or choose another {}", self.what()))
                .into()),
        }
    }

    /// Make the folder `rel` with its parents (a link on the way that leads outside is refused).
    pub fn create_dir_all(&self, rel: impl AsRef<Path>) -> Result<()> {
        let rel = self.rel(rel.as_ref())?;
        if is_here(&rel) {
            return Ok(());
        }
        self.dir.create_dir_all(&rel).map_err(|e| self.refused_on_the_way(&rel, e, "creating the folder"))
    }

    /// An error on the way to `rel` as [`Tree::refused`] says it, but first
    /// the first part of `rel` that is a link leading outside, or is no
    /// folder, named as the cause (cap-std's `create_dir_all` says only
    /// "File exists" for a link it will not follow).
    fn refused_on_the_way(&self, rel: &Path, e: std::io::Error, doing: &str) -> anyhow::Error {
        let mut at = PathBuf::new();
        for part in rel.components() {
            at.push(part);
            match self.kind(&at) {
                Ok(Kind::Link) => match self.dir.open_dir(&at) {
                    Err(inner) if escapes(&inner) => return self.refused(&at, inner, doing),
                    Err(_) => return self.usage(&at, "a link where a folder is expected"),
                    Ok(_) => {}
                },
                Ok(Kind::Dir) | Ok(Kind::Missing) => {}
                Ok(k) => return self.usage(&at, format!("{}, where a folder is expected", k.noun())),
                Err(refusal) => return refusal,
            }
        }
        self.refused(rel, e, doing)
    }

    /// Make the one folder `rel` with permission bits `mode` (less the umask):
    /// its parent must exist, and anything already at `rel` (a link included)
    /// is an error, never followed or reused.
    pub fn create_dir(&self, rel: impl AsRef<Path>, mode: u32) -> Result<()> {
        use cap_std::fs::DirBuilderExt;
        let rel = self.rel(rel.as_ref())?;
        let mut b = cap_std::fs::DirBuilder::new();
        b.mode(mode);
        self.dir.create_dir_with(&rel, &b).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => self.usage(&rel, "already exists"),
            _ => self.refused(&rel, e, "creating the folder"),
        })
    }

    /// Remove the file (or link: the link itself) `rel`; absent is fine.
    pub fn remove_file(&self, rel: impl AsRef<Path>) -> Result<()> {
        let rel = self.rel(rel.as_ref())?;
        match cap_fs_ext::DirExt::remove_file_or_symlink(&self.dir, &rel) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(self.refused(&rel, e, "removing")),
            _ => Ok(()),
        }
    }

    /// Remove the folder `rel` and all inside it (links removed, never
    /// followed); absent is fine. A file or a link at `rel` is removed itself.
    pub fn remove_all(&self, rel: impl AsRef<Path>) -> Result<()> {
        let rel = self.rel(rel.as_ref())?;
        match self.kind(&rel)? {
            Kind::Missing => Ok(()),
            Kind::Dir => self.dir.remove_dir_all(&rel).map_err(|e| self.refused(&rel, e, "removing")),
            _ => self.remove_file(&rel),
        }
    }

    /// Rename `from` to `to`, both in this tree (the name at `to` is replaced).
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        let (from, to) = (self.rel(from.as_ref())?, self.rel(to.as_ref())?);
        self.dir.rename(&from, &self.dir, &to).map_err(|e| self.refused(&to, e, "renaming into"))
    }

    /// Rename `from` of this tree to `to` of `other` (the same file system).
    pub fn rename_to(&self, from: impl AsRef<Path>, other: &Tree, to: impl AsRef<Path>) -> Result<()> {
        let (from, to) = (self.rel(from.as_ref())?, other.rel(to.as_ref())?);
        self.dir.rename(&from, &other.dir, &to).map_err(|e| other.refused(&to, e, "renaming into"))
    }

    /// A link at `rel` whose text is `target` (kept as written: a link the
    /// tool makes may point anywhere; reading through it stays confined).
    pub fn symlink(&self, target: impl AsRef<Path>, rel: impl AsRef<Path>) -> Result<()> {
        let rel = self.rel(rel.as_ref())?;
        self.dir.symlink_contents(target.as_ref(), &rel).map_err(|e| self.refused(&rel, e, "making the link"))
    }

    /// A second name `to` (in `other`) for the file `from` of this tree.
    pub fn hard_link(&self, from: impl AsRef<Path>, other: &Tree, to: impl AsRef<Path>) -> Result<()> {
        let (from, to) = (self.rel(from.as_ref())?, other.rel(to.as_ref())?);
        self.dir.hard_link(&from, &other.dir, &to).map_err(|e| other.refused(&to, e, "linking"))
    }

    /// Set the permission bits of `rel` (through links that stay inside).
    pub fn set_mode(&self, rel: impl AsRef<Path>, mode: u32) -> Result<()> {
        use cap_std::fs::PermissionsExt;
        let rel = self.rel(rel.as_ref())?;
        self.dir
            .set_permissions(&rel, cap_std::fs::Permissions::from_mode(mode))
            .map_err(|e| self.refused(&rel, e, "setting the mode of"))
    }

    /// The permission bits and modification time of `rel` (not following a final link).
    pub fn stat(&self, rel: impl AsRef<Path>) -> Result<Stat> {
        use cap_std::fs::MetadataExt;
        let rel = self.rel(rel.as_ref())?;
        let m = self.dir.symlink_metadata(&rel).map_err(|e| self.refused(&rel, e, "reading"))?;
        Ok(Stat { kind: kind_of(&m), mode: m.mode(), mtime: m.mtime(), uid: m.uid(), dev: m.dev(), ino: m.ino() })
    }

    /// The names in the folder `rel`, sorted by their bytes, the first `cap`
    /// of them; a folder of more than [`MAX_NAMES`] names is refused.
    pub fn list(&self, rel: impl AsRef<Path>, cap: usize) -> Result<Listing> {
        let rel = self.rel(rel.as_ref())?;
        let folder = if is_here(&rel) { self.dir.try_clone() } else { self.dir.open_dir(&rel) };
        let folder = folder.map_err(|e| self.refused(&rel, e, "listing"))?;
        let mut entries = Vec::new();
        for e in folder.entries().map_err(|e| self.refused(&rel, e, "listing"))? {
            let e = e.map_err(|e| self.refused(&rel, e, "listing"))?;
            if entries.len() == MAX_NAMES {
                return Err(self.usage(&rel, format!("holds more than {MAX_NAMES} names; refused")));
            }
            let kind = match e.file_type() {
                Ok(t) if t.is_symlink() => Kind::Link,
                Ok(t) if t.is_dir() => Kind::Dir,
                Ok(t) if t.is_file() => Kind::File { len: e.metadata().map(|m| m.len()).unwrap_or(0) },
                Ok(_) => Kind::Special,
                Err(_) => Kind::Missing,
            };
            entries.push(Entry { name: e.file_name(), kind });
        }
        entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        let total = entries.len();
        entries.truncate(cap);
        Ok(Listing { entries, total })
    }

    /// The UTF-8 names in the folder `rel`, sorted (see [`Tree::list`]); an
    /// absent folder has none.
    pub fn names(&self, rel: impl AsRef<Path>) -> Result<Vec<String>> {
        let rel = rel.as_ref();
        if !self.is_dir(rel) {
            return Ok(Vec::new());
        }
        Ok(self.list(rel, MAX_NAMES)?.entries.into_iter().filter_map(|e| e.name.into_string().ok()).collect())
    }

    /// Every name below `rel`, depth first in sorted order, links reported
    /// and never followed; bounded by `walk`'s limits.
    pub fn walk(&self, rel: impl AsRef<Path>, walk: Walk) -> Result<Vec<Walked>> {
        walk::walk(self, rel.as_ref(), walk)
    }

    /// Copy the regular file `from` of this tree (at most `cap` bytes) to
    /// `to` of `other` by [`Tree::write_with`]; the copy's mode is `mode`.
    pub fn copy_to(
        &self,
        from: impl AsRef<Path>,
        other: &Tree,
        to: impl AsRef<Path>,
        cap: u64,
        mode: u32,
    ) -> Result<u64> {
        let (mut f, len) = self.open_file(from, cap)?;
        other.write_with(to, mode, |out| {
            std::io::copy(&mut (&mut f).take(cap), out)?;
            Ok(())
        })?;
        Ok(len)
    }

    /// The file `rel` opened for `flock` (created when absent), never through
    /// a final link and never blocking on a FIFO; a regular file or refused.
    pub fn open_lock(&self, rel: impl AsRef<Path>) -> Result<std::fs::File> {
        let rel = self.rel(rel.as_ref())?;
        let mut o = OpenOptions::new();
        o.create(true)
            .truncate(false)
            .write(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
        let f = self.dir.open_with(&rel, &o).map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => self.usage(&rel, "a symlink (lock files are never followed)"),
            Some(libc::ENXIO) => self.usage(&rel, "not a regular file (a FIFO)"),
            Some(libc::EISDIR) => self.usage(&rel, "a directory, not a regular file"),
            _ => self.refused(&rel, e, "opening the lock file"),
        })?;
        let f = f.into_std();
        named::regular(&f, &self.join(&rel), self.what())?;
        Ok(f)
    }

    /// An exclusive `flock` on the lock file `rel` (opened as [`Tree::open_lock`]:
    /// created when absent, never through a link, never a FIFO), waiting for its
    /// holder and checking for Ctrl-C every 100 ms; held until dropped.
    pub fn lock_exclusive(&self, rel: impl AsRef<Path>) -> Result<Locked> {
        let rel = rel.as_ref();
        let f = self.open_lock(rel)?;
        loop {
            match f.try_lock() {
                Ok(()) => return Ok(Locked(f)),
                Err(std::fs::TryLockError::WouldBlock) => {
                    crate::error::check_interrupted()?;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(anyhow::Error::new(e).context(format!("locking {}", self.join(rel).display())))
                }
            }
        }
    }

    /// A new regular file at `rel`, open for writing (mode `mode` before the
    /// umask): where a child process writes its output as it runs (a log), so
    /// it is not staged. Anything already at `rel` (a file, a link, a FIFO) is
    /// refused, exit 2: the name must be the tool's own, fresh.
    pub fn create_new(&self, rel: impl AsRef<Path>, mode: u32) -> Result<std::fs::File> {
        let rel = self.rel(rel.as_ref())?;
        let mut o = OpenOptions::new();
        o.write(true).create_new(true).mode(mode).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        match self.dir.open_with(&rel, &o) {
            Ok(f) => Ok(f.into_std()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(self.usage(&rel, format!("already exists ({}): not made here", self.kind(&rel)?.noun())))
            }
            Err(e) => Err(self.refused(&rel, e, "creating")),
        }
    }

    /// Take an exclusive `flock` on the folder itself (no file is made in it),
    /// without waiting: `None` when another process holds it. Held until the
    /// returned [`FolderLock`] is dropped.
    pub fn try_lock(&self) -> Result<Option<FolderLock>> {
        let mut o = OpenOptions::new();
        o.read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW);
        let f = self.dir.open_with(".", &o).map_err(|e| self.refused(Path::new("."), e, "locking"))?.into_std();
        match f.try_lock() {
            Ok(()) => Ok(Some(FolderLock(f))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(anyhow::Error::new(e).context(format!("locking {}", self.path.display())))
            }
        }
    }

    /// Flush the folder itself to disk (after renames that must survive a crash).
    pub fn sync(&self) -> Result<()> {
        let f = self.dir.try_clone()?.into_std_file();
        f.sync_all().with_context(|| format!("syncing {}", self.path.display()))
    }

    /// `rel` checked: relative, no `..`, no root; `.` and empty mean the tree itself.
    fn rel(&self, rel: &Path) -> Result<PathBuf> {
        let mut out = PathBuf::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => out.push(n),
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(Failure::usage(format!(
                        "{}: `{}` is not a path inside {} {}",
                        self.what,
                        crate::input::excerpt(&rel.to_string_lossy(), 200),
                        self.what,
                        self.path.display()
                    ))
                    .into());
                }
            }
        }
        if out.as_os_str().is_empty() {
            out.push(".");
        }
        Ok(out)
    }

    fn usage(&self, rel: &Path, why: impl std::fmt::Display) -> anyhow::Error {
        Failure::usage(format!("{} {}: {why}", self.what, self.join(rel).display()))
            .hint(format!("pass a {} whose entries are plain files and folders", self.what))
            .into()
    }

    /// An I/O error at `rel` as a message: a path that leads outside the tree
    /// (a link or `..`) is refused as bad input (exit 2), naming both.
    fn refused(&self, rel: &Path, e: std::io::Error, doing: &str) -> anyhow::Error {
        if escapes(&e) {
            return Failure::usage(format!(
                "{} leads outside the {} {} (through a link or `..`): refused",
                self.join(rel).display(),
                self.what,
                self.path.display()
            ))
            .hint(format!("remove the link, or choose another {}", self.what))
            .into();
        }
        match e.raw_os_error() {
            Some(libc::ENOTDIR) => self.usage(rel, "a part of the path is not a folder"),
            Some(libc::EISDIR) => self.usage(rel, "a folder, not a regular file"),
            Some(libc::ELOOP) => self.usage(rel, "a symlink loop"),
            Some(libc::ENOENT) if doing == "reading" => self.usage(rel, "not found"),
            _ => anyhow::Error::new(e).context(format!("{doing} {}", self.join(rel).display())),
        }
    }
}

/// A lock file held under an exclusive `flock` ([`Tree::lock_exclusive`]),
/// released when dropped (or when the process dies).
#[derive(Debug)]
pub struct Locked(#[allow(dead_code)] std::fs::File);

/// A folder's `flock`, held while this lives ([`Tree::try_lock`]).
#[derive(Debug)]
pub struct FolderLock(#[allow(dead_code)] std::fs::File);

/// What [`Tree::stat`] tells.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    pub kind: Kind,
    pub mode: u32,
    pub mtime: i64,
    pub uid: u32,
    pub dev: u64,
    pub ino: u64,
}

/// A file written under a temporary name, put in place by [`Staged::commit`].
pub struct Staged<'t> {
    tree: &'t Tree,
    folder: Dir,
    temp: Option<OsString>,
    name: OsString,
    rel: PathBuf,
}

impl Staged<'_> {
    /// The destination still absent or a regular file (checked again at commit).
    fn check(&self) -> Result<()> {
        self.tree.check_destination(&self.rel)
    }

    /// Rename the temporary file over the destination.
    pub fn commit(mut self) -> Result<()> {
        self.check()?;
        let temp = self.temp.take().expect("staged once");
        self.folder.rename(&temp, &self.folder, &self.name).map_err(|e| {
            let _ = self.folder.remove_file(&temp);
            self.tree.refused(&self.rel, e, "writing")
        })
    }

    /// Where the file will be.
    pub fn path(&self) -> PathBuf {
        self.tree.join(&self.rel)
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.temp.take() {
            let _ = self.folder.remove_file(t);
        }
    }
}

/// Several files put in place together: each is staged (written under a
/// temporary name, its destination checked) as it is added, and none is
/// renamed into place before [`Delivery::commit`], so a failure while staging
/// (a FIFO at one destination, a full disk) delivers nothing.
#[derive(Default)]
pub struct Delivery<'t> {
    staged: Vec<Staged<'t>>,
}

impl<'t> Delivery<'t> {
    pub fn new() -> Self {
        Delivery { staged: Vec::new() }
    }

    /// Stage `rel` of `tree` with `fill` (see [`Tree::stage`]).
    pub fn add(
        &mut self,
        tree: &'t Tree,
        rel: impl AsRef<Path>,
        mode: u32,
        fill: impl FnOnce(&mut std::fs::File) -> Result<()>,
    ) -> Result<PathBuf> {
        let s = tree.stage(rel, mode, fill)?;
        let path = s.path();
        self.staged.push(s);
        Ok(path)
    }

    /// Check every destination again, then rename each file into place.
    pub fn commit(self) -> Result<()> {
        for s in &self.staged {
            s.check()?;
        }
        for s in self.staged {
            s.commit()?;
        }
        Ok(())
    }
}

fn create_temp(folder: &Dir, name: &std::ffi::OsStr, mode: u32) -> std::io::Result<(cap_std::fs::File, OsString)> {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true).mode(mode).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    for _ in 0..64 {
        let mut temp = OsString::from(".");
        temp.push(name);
        temp.push(format!(".{}.partial", temp::random_suffix()));
        match folder.open_with(&temp, &o) {
            Ok(f) => return Ok((f, temp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free temporary name after 64 tries"))
}

fn kind_of(m: &cap_std::fs::Metadata) -> Kind {
    let t = m.file_type();
    if t.is_symlink() {
        Kind::Link
    } else if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File { len: m.len() }
    } else {
        Kind::Special
    }
}

/// `rel` split into its folder (`.` at the top) and its last name.
fn split(rel: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    let name = rel.file_name()?;
    let parent = rel.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some((parent, name))
}

fn is_here(rel: &Path) -> bool {
    rel.as_os_str().is_empty() || rel == Path::new(".")
}

/// Whether an I/O error says that resolution would have left the tree:
/// cap-std's own refusal, or the kernel's (`openat2(RESOLVE_BENEATH)`: EXDEV).
fn escapes(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EXDEV)
        || (e.kind() == std::io::ErrorKind::PermissionDenied && e.to_string().contains("outside"))
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Why `path` cannot be opened as a folder: exit 2 naming it (a file where a
/// folder is expected, missing, not allowed).
fn not_a_folder(path: &Path, what: &str, e: std::io::Error) -> anyhow::Error {
    let why = match e.raw_os_error() {
        Some(libc::ENOTDIR) | Some(libc::EEXIST) => "is not a folder".to_string(),
        Some(libc::ENOENT) => "does not exist".to_string(),
        Some(libc::EACCES) => "permission denied".to_string(),
        Some(libc::ELOOP) => "is a symlink loop".to_string(),
        _ => return anyhow::Error::new(e).context(format!("opening {what} {}", path.display())),
    };
    Failure::usage(format!("{what} {} {why}", path.display())).hint(format!("pass a folder as the {what}")).into()
}

#[cfg(test)]
mod tests;
