//! The `--out` folder as `publish` reads and writes it: one descriptor of the
//! folder (held with its flock), every folder below it opened from its parent
//! with O_NOFOLLOW|O_DIRECTORY and every file read, created and renamed
//! relative to an opened folder (`cache::dirfd`). A link planted for a variant
//! or project folder or a file is refused (exit 2) before anything is written;
//! one swapped in after that check is never followed either: a folder is
//! either opened without following a link (a link there is refused) or was
//! opened before the swap, and the files go through that descriptor. Must not
//! decide what to write.
use std::collections::BTreeMap;
use std::fs::File;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};

use crate::cache::dirfd;
use forge_os::error::Failure;

/// `--out`, opened and locked.
pub struct Out {
    path: PathBuf,
    root: File,
}

/// The folders the writes go into, each opened (made when absent) once.
pub struct Dirs(BTreeMap<PathBuf, File>);

/// A place under `--out` that is not what the index needs there: exit 2.
fn refuse(at: &Path, why: &str) -> anyhow::Error {
    Failure::usage(format!("{}: {why}: nothing published", at.display()))
        .hint("remove it, or publish into another --out folder")
        .into()
}

/// Why an open of a folder without following a link failed, as a refusal
/// when the place is a link or not a folder.
fn refuse_open(at: &Path, e: std::io::Error) -> anyhow::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
            refuse(at, "not a folder, or a symbolic link (publish never writes through a link)")
        }
        _ => anyhow::Error::new(e).context(format!("opening {}", at.display())),
    }
}

/// The plain names of a relative path (the index's own paths always are).
fn names(rel: &Path) -> Vec<&str> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => n.to_str().expect("index paths are UTF-8"),
            _ => panic!("index paths are plain relative names: {}", rel.display()),
        })
        .collect()
}

/// Split `rel` into its folder and its file name.
pub fn split(rel: &Path) -> (&Path, &str) {
    let name = rel.file_name().and_then(|n| n.to_str()).expect("index files have UTF-8 names");
    (rel.parent().unwrap_or(Path::new("")), name)
}

impl Out {
    /// `--out` opened and locked exclusively (flock on its descriptor, so no
    /// file appears in the index), made when absent; waits for another
    /// publish into it, checking for Ctrl-C. `--out` itself is the user's
    /// choice and may be a link to a folder; nothing below it may.
    pub fn lock(out: &Path) -> Result<Out> {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let root = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(out)
        }
        .with_context(|| format!("opening {}", out.display()))?;
        let mut told = false;
        loop {
            match root.try_lock() {
                Ok(()) => return Ok(Out { path: out.to_path_buf(), root }),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if !std::mem::replace(&mut told, true) {
                        forge_os::note!("waiting for another publish into {} to finish", out.display());
                    }
                    forge_os::error::check_interrupted()?;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", out.display()))
                }
            }
        }
    }

    /// The full path of `rel`, for messages.
    pub fn show(&self, rel: &Path) -> PathBuf {
        self.path.join(rel)
    }

    /// The folder `rel`, walked from `--out` one name at a time without
    /// following a link; `make`: each absent folder is made, else an absent
    /// one is `None`. A link or a file on the way is exit 2 naming it.
    fn walk(&self, rel: &Path, make: bool) -> Result<Option<File>> {
        let mut dir = self.root.try_clone().with_context(|| format!("opening {}", self.path.display()))?;
        let mut at = self.path.clone();
        for name in names(rel) {
            at.push(name);
            dir = match if make { dirfd::make_in(&dir, name) } else { dirfd::open_in(&dir, name) } {
                Ok(d) => d,
                Err(e) if !make && e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(refuse_open(&at, e)),
            };
        }
        Ok(Some(dir))
    }

    /// Every folder from `--out` down to `rel` is a real folder or absent
    /// (never a link: a link planted for a variant or project folder would
    /// carry the writes to another site), and `rel` a regular file or absent.
    /// Exit 2 naming the place.
    pub fn check(&self, rel: &Path) -> Result<()> {
        let (folder, name) = split(rel);
        let mut dir = self.root.try_clone().with_context(|| format!("opening {}", self.path.display()))?;
        let mut at = self.path.clone();
        let all = names(folder).into_iter().map(|n| (n, false)).chain([(name, true)]);
        for (n, last) in all {
            at.push(n);
            let st = match dirfd::stat_in(&dir, n) {
                Ok(st) => st,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {}", at.display()))),
            };
            let kind = st.st_mode & libc::S_IFMT;
            let why = match kind {
                libc::S_IFLNK => "a symbolic link (publish never writes through a link)",
                libc::S_IFDIR if !last => {
                    dir = dirfd::open_in(&dir, n).map_err(|e| refuse_open(&at, e))?;
                    continue;
                }
                libc::S_IFREG if last => continue,
                _ if !last => "not a folder",
                libc::S_IFDIR => "a folder where a file of the index goes",
                _ => "not a regular file",
            };
            return Err(refuse(&at, why));
        }
        Ok(())
    }

    /// The file `rel` opened for reading (never through a link), `None` when
    /// it or a folder above it is absent.
    pub fn open_file(&self, rel: &Path) -> Result<Option<File>> {
        let (folder, name) = split(rel);
        let Some(dir) = self.walk(folder, false)? else { return Ok(None) };
        match dirfd::open_file_in(&dir, name) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                Err(refuse(&self.show(rel), "a symbolic link (publish never writes through a link)"))
            }
            Err(e) => Err(refuse(&self.show(rel), &e.to_string())),
        }
    }

    /// What is at `rel` now: `None` when nothing, else its sha256; a link,
    /// special file or folder under a published name counts as different.
    pub fn digest(&self, rel: &Path) -> Option<String> {
        let (folder, name) = split(rel);
        match self.walk(folder, false) {
            Ok(Some(dir)) => digest_in(&dir, name),
            Ok(None) => None,
            Err(e) => Some(format!("({e:#})")),
        }
    }

    /// Every folder of `rels` made when absent and opened, before any file is
    /// written: a link met here (planted after [`Out::check`]) stops the
    /// publish with nothing written, and later writes go through these
    /// descriptors only.
    pub fn open_dirs<'a>(&self, rels: impl IntoIterator<Item = &'a Path>) -> Result<Dirs> {
        let mut dirs = BTreeMap::new();
        for rel in rels {
            let folder = split(rel).0;
            if !dirs.contains_key(folder) {
                let d = self.walk(folder, true)?.expect("made when absent");
                dirs.insert(folder.to_path_buf(), d);
            }
        }
        Ok(Dirs(dirs))
    }
}

/// The sha256 of `name` in `dir` (see [`Out::digest`]).
fn digest_in(dir: &File, name: &str) -> Option<String> {
    let f = match dirfd::open_file_in(dir, name) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return None,
        Err(_) => return Some("(not a regular file)".into()),
    };
    Some(match forge_os::input::sha256_reader(f, forge_os::input::cap::WHEEL) {
        Ok((d, _)) => hex::encode(d),
        Err(e) => format!("({e})"),
    })
}

impl Dirs {
    /// The opened folder of `rel` and its file name.
    fn of<'a>(&self, rel: &'a Path) -> (&File, &'a str) {
        let (folder, name) = split(rel);
        (&self.0[folder], name)
    }

    /// What is at `rel` now (see [`Out::digest`]).
    pub fn digest(&self, rel: &Path) -> Option<String> {
        let (dir, name) = self.of(rel);
        digest_in(dir, name)
    }

    /// Put a file at `rel`: a temporary file (mode 0644: static hosts serve
    /// what they can read) in its opened folder, filled by `fill`, synced,
    /// then renamed to its name; with `replace` false an existing file is
    /// never replaced (exit 1: it appeared while publishing). The temporary
    /// file is removed on any failure.
    pub fn put(
        &self,
        rel: &Path,
        shown: &Path,
        replace: bool,
        fill: impl FnOnce(&mut File) -> Result<()>,
    ) -> Result<()> {
        let (dir, name) = self.of(rel);
        let (mut f, tmp) =
            dirfd::create_temp_in(dir, ".publish-", 0o644).with_context(|| format!("writing {}", shown.display()))?;
        let result = fill(&mut f)
            .and_then(|()| f.sync_all().with_context(|| format!("writing {}", shown.display())))
            .and_then(|()| {
                dirfd::rename_in(dir, &tmp, name, replace).map_err(|e| match e.raw_os_error() {
                    Some(libc::EEXIST) => {
                        Failure::problems(format!("{}: appeared while publishing ({e})", shown.display())).into()
                    }
                    _ => anyhow::Error::new(e).context(format!("writing {}", shown.display())),
                })
            });
        if result.is_err() {
            let _ = dirfd::unlink_in(dir, &tmp);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree with `out/demo/simple/deep-ep/` and an empty `victim/` beside it.
    fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let (out, victim) = (t.path().join("out"), t.path().join("victim"));
        std::fs::create_dir_all(out.join("demo/simple/deep-ep")).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        (t, out, victim)
    }

    fn write(dirs: &Dirs, rel: &str) -> Result<()> {
        let rel = Path::new(rel);
        dirs.put(rel, rel, false, |f| Ok(std::io::Write::write_all(f, b"x")?))
    }

    fn exit(e: &anyhow::Error) -> Option<forge_os::error::Exit> {
        e.downcast_ref::<Failure>().map(|f| f.exit)
    }

    /// A link swapped in for the variant folder after the check and before the
    /// folders are opened: the open refuses it (exit 2), nothing is written.
    #[test]
    fn a_link_swapped_in_after_the_check_is_refused() {
        let (_t, out, victim) = tree();
        let o = Out::lock(&out).unwrap();
        let rel = Path::new("demo/simple/deep-ep/index.html");
        o.check(rel).unwrap();
        std::fs::rename(out.join("demo"), out.join("demo.old")).unwrap();
        std::os::unix::fs::symlink(&victim, out.join("demo")).unwrap();
        let e = o.open_dirs([rel]).err().expect("refused");
        assert_eq!(exit(&e), Some(forge_os::error::Exit::Usage), "{e:#}");
        assert!(format!("{e:#}").contains("demo: not a folder, or a symbolic link"), "{e:#}");
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(out.join("demo.old/simple/deep-ep")).unwrap().count(), 0);
    }

    /// A link swapped in after the folders were opened: the writes go through
    /// the opened folder (now under its new name), never through the link.
    #[test]
    fn a_link_swapped_in_after_the_open_is_never_followed() {
        let (_t, out, victim) = tree();
        let o = Out::lock(&out).unwrap();
        let rels = ["demo/simple/deep-ep/index.html", "demo/index.json"];
        for r in rels {
            o.check(Path::new(r)).unwrap();
        }
        let dirs = o.open_dirs(rels.iter().map(Path::new)).unwrap();
        std::fs::rename(out.join("demo"), out.join("demo.old")).unwrap();
        std::os::unix::fs::symlink(&victim, out.join("demo")).unwrap();
        std::fs::create_dir_all(victim.join("simple/deep-ep")).unwrap();
        for r in rels {
            write(&dirs, r).unwrap();
        }
        assert_eq!(std::fs::read(out.join("demo.old/simple/deep-ep/index.html")).unwrap(), b"x");
        assert_eq!(std::fs::read(out.join("demo.old/index.json")).unwrap(), b"x");
        assert_eq!(
            walkdir::WalkDir::new(&victim).into_iter().filter(|e| e.as_ref().unwrap().file_type().is_file()).count(),
            0
        );
    }

    /// The check names what is wrong; an immutable name is never replaced and
    /// no temporary file stays; new files are 0644 whatever the umask.
    #[test]
    fn checks_name_the_place_and_writes_leave_no_temporary_file() {
        let (_t, out, victim) = tree();
        std::os::unix::fs::symlink(&victim, out.join("demo/simple/link")).unwrap();
        std::fs::write(out.join("demo/file"), "x").unwrap();
        std::fs::create_dir_all(out.join("demo/index.json")).unwrap();
        let o = Out::lock(&out).unwrap();
        for (rel, says) in [
            ("demo/simple/link/index.html", "link: a symbolic link"),
            ("demo/simple/link", "link: a symbolic link"),
            ("demo/file/x", "file: not a folder"),
            ("demo/index.json", "index.json: a folder where a file of the index goes"),
        ] {
            let e = o.check(Path::new(rel)).err().unwrap_or_else(|| panic!("{rel} passed"));
            assert!(format!("{e:#}").contains(says) && exit(&e) == Some(forge_os::error::Exit::Usage), "{rel}: {e:#}");
        }
        o.check(Path::new("demo/simple/deep-ep/new/x")).unwrap();
        let dirs = o.open_dirs([Path::new("demo/simple/deep-ep/a")]).unwrap();
        write(&dirs, "demo/simple/deep-ep/a").unwrap();
        let e = write(&dirs, "demo/simple/deep-ep/a").unwrap_err();
        assert!(format!("{e:#}").contains("appeared while publishing"), "{e:#}");
        let names: Vec<_> =
            std::fs::read_dir(out.join("demo/simple/deep-ep")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["a"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("demo/simple/deep-ep/a")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        assert_eq!(
            dirs.digest(Path::new("demo/simple/deep-ep/a")).as_deref(),
            Some(&*forge_os::input::sha256_hex(b"x"))
        );
    }
}
