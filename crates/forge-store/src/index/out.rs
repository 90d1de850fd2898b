//! The `--out` folder as `publish` reads and writes it: a [`Tree`] of the
//! folder (held with a flock on the folder itself), every path below it
//! resolved inside it. A link planted for a variant or project folder or a
//! file is refused (exit 2) before anything is written ([`Out::check`]);
//! every folder the writes go into is opened once ([`Out::open_dirs`]) and
//! the files go through those opened folders only, so a link swapped in
//! after the check is either refused when the folder is opened or never
//! followed. A file is written under a temporary name in its folder and
//! renamed into place; an immutable one never over an existing name. Must
//! not decide what to write.
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};

use forge_os::error::Failure;
use forge_os::fs::{File, Kind, Tree};

/// `--out`, opened and locked.
pub struct Out {
    tree: Tree,
    _lock: File,
}

/// The folders the writes go into, each opened (made when absent) once.
pub struct Dirs(BTreeMap<PathBuf, Tree>);

/// A place under `--out` that is not what the index needs there: exit 2.
fn refuse(at: &Path, why: &str) -> anyhow::Error {
    Failure::usage(format!("{}: {why}: nothing published", at.display()))
        .hint("remove it, or publish into another --out folder")
        .into()
}

/// What `kind` at `at` means where a folder of the index goes (`None`: a folder).
fn not_a_folder(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Dir | Kind::Missing => None,
        Kind::Link => Some("not a folder, or a symbolic link (publish never writes through a link)"),
        _ => Some("not a folder"),
    }
}

/// The plain names of a relative path (the index's own paths always are).
fn names(rel: &Path) -> Result<Vec<&str>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => n.to_str().context("index paths are UTF-8"),
            _ => anyhow::bail!("index paths are plain relative names: {}", rel.display()),
        })
        .collect()
}

/// Split `rel` into its folder and its file name.
pub fn split(rel: &Path) -> (&Path, &str) {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    (rel.parent().unwrap_or(Path::new("")), name)
}

impl Out {
    /// `--out` opened and locked exclusively (flock on the folder, so no
    /// file appears in the index), made when absent; waits for another
    /// publish into it, checking for Ctrl-C. `--out` itself is the user's
    /// choice and may be a link to a folder; nothing below it may.
    pub fn lock(out: &Path) -> Result<Out> {
        Out::of(Tree::create(out, "output folder")?)
    }

    /// [`Out::lock`] of a folder the caller opened.
    pub fn of(tree: Tree) -> Result<Out> {
        let lock = tree.handle()?;
        let mut told = false;
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(Out { tree, _lock: lock }),
                Err(forge_os::fs::TryLockError::WouldBlock) => {
                    if !std::mem::replace(&mut told, true) {
                        forge_os::note!("waiting for another publish into {} to finish", tree.path().display());
                    }
                    forge_os::error::check_interrupted()?;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(forge_os::fs::TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", tree.path().display()))
                }
            }
        }
    }

    /// The folder as a tree.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// The full path of `rel`, for messages.
    pub fn show(&self, rel: &Path) -> PathBuf {
        self.tree.join(rel)
    }

    /// The folder `rel`, walked from `--out` one name at a time, never through
    /// a link; `make`: each absent folder is made, else an absent one is
    /// `None`. A link or a file on the way is exit 2 naming it.
    fn walk(&self, rel: &Path, make: bool) -> Result<Option<Tree>> {
        let mut at = PathBuf::new();
        for name in names(rel)? {
            at.push(name);
            let mut kind = self.tree.kind(&at)?;
            if kind == Kind::Missing && make {
                self.tree.make_dir(&at)?;
                kind = self.tree.kind(&at)?;
            }
            if kind == Kind::Missing {
                return Ok(None);
            }
            if let Some(why) = not_a_folder(kind) {
                return Err(refuse(&self.show(&at), why));
            }
        }
        Ok(Some(self.tree.sub(rel, "output folder")?))
    }

    /// Every folder from `--out` down to `rel` is a real folder or absent
    /// (never a link: a link planted for a variant or project folder would
    /// carry the writes to another site), and `rel` a regular file or absent.
    /// Exit 2 naming the place.
    pub fn check(&self, rel: &Path) -> Result<()> {
        let mut at = PathBuf::new();
        let all = names(rel)?;
        for (i, n) in all.iter().enumerate() {
            at.push(n);
            let last = i + 1 == all.len();
            let why = match self.tree.kind(&at)? {
                Kind::Missing => return Ok(()),
                Kind::Link => "a symbolic link (publish never writes through a link)",
                Kind::Dir if !last => continue,
                Kind::File { .. } if last => continue,
                _ if !last => "not a folder",
                Kind::Dir => "a folder where a file of the index goes",
                _ => "not a regular file",
            };
            return Err(refuse(&self.show(&at), why));
        }
        Ok(())
    }

    /// The file `rel` opened for reading (never through a link), `None` when
    /// it or a folder above it is absent.
    pub fn open_file(&self, rel: &Path) -> Result<Option<File>> {
        let (folder, name) = split(rel);
        let Some(dir) = self.walk(folder, false)? else { return Ok(None) };
        match dir.kind(name)? {
            Kind::Missing => Ok(None),
            Kind::Link => Err(refuse(&self.show(rel), "a symbolic link (publish never writes through a link)")),
            _ => Ok(Some(dir.open_file_nofollow(name, u64::MAX)?.0)),
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
    /// opened folders only.
    pub fn open_dirs<'a>(&self, rels: impl IntoIterator<Item = &'a Path>) -> Result<Dirs> {
        let mut dirs = BTreeMap::new();
        for rel in rels {
            let folder = split(rel).0;
            if !dirs.contains_key(folder) {
                let d = self.walk(folder, true)?.context("made when absent")?;
                dirs.insert(folder.to_path_buf(), d);
            }
        }
        Ok(Dirs(dirs))
    }
}

/// The sha256 of `name` in `dir` (see [`Out::digest`]).
fn digest_in(dir: &Tree, name: &str) -> Option<String> {
    match dir.kind(name) {
        Ok(Kind::Missing) => return None,
        Ok(Kind::File { .. }) => {}
        _ => return Some("(not a regular file)".into()),
    }
    let f = match dir.open_file_nofollow(name, forge_os::input::cap::WHEEL) {
        Ok((f, _)) => f,
        Err(e) => return Some(format!("({e:#})")),
    };
    Some(match forge_os::input::sha256_reader(f, forge_os::input::cap::WHEEL) {
        Ok((d, _)) => hex::encode(d),
        Err(e) => format!("({e})"),
    })
}

impl Dirs {
    /// The opened folder of `rel` and its file name.
    fn of<'a>(&self, rel: &'a Path) -> Result<(&Tree, &'a str)> {
        let (folder, name) = split(rel);
        let dir = self.0.get(folder).with_context(|| format!("{} was not opened for writing", folder.display()))?;
        Ok((dir, name))
    }

    /// What is at `rel` now (see [`Out::digest`]).
    pub fn digest(&self, rel: &Path) -> Option<String> {
        let (dir, name) = self.of(rel).ok()?;
        digest_in(dir, name)
    }

    /// Put a file at `rel`: a temporary file (mode 0644 whatever the umask:
    /// static hosts serve what they can read) in its opened folder, filled by
    /// `fill`, synced, then renamed to its name; with `replace` false an
    /// existing file is never replaced (exit 1: it appeared while publishing).
    /// The temporary file is removed on any failure.
    pub fn put(
        &self,
        rel: &Path,
        shown: &Path,
        replace: bool,
        fill: impl FnOnce(&mut File) -> Result<()>,
    ) -> Result<()> {
        let (dir, name) = self.of(rel)?;
        let staged = dir
            .stage(name, 0o644, |f| {
                forge_os::fs::set_mode_exact(f, 0o644)?;
                fill(f)?;
                Ok(f.sync_all()?)
            })
            .with_context(|| format!("writing {}", shown.display()))?;
        if replace {
            return staged.commit();
        }
        if !staged.commit_new()? {
            return Err(Failure::problems(format!("{}: appeared while publishing", shown.display())).into());
        }
        Ok(())
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
