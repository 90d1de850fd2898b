//! Build outputs kept by content (NCCL's build folder, `builder::nccl_reuse`):
//! `<cache>/trees/objects/<sha256>` holds one file's bytes, named by their
//! hash; `<cache>/trees/entries/<key>.json` (a [`Manifest`]) maps each
//! relative path of the stored folder to an object, and each link to a plain
//! name beside it. Objects appear by rename before the entry that names them,
//! and the entry appears by rename, so a reader sees a whole entry or none.
//!
//! A restore trusts nothing it reads: the manifest is bounded and every name
//! checked (relative, no `..`, no control characters, bounded depth, count
//! and total size) before a byte is written; every object is opened without
//! following links, must be a regular file of the recorded size, and is
//! hashed while it is copied: a mismatch refuses the whole entry (the caller
//! removes what was written and builds). Must not build anything.
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Key;

/// Version of a tree manifest.
pub const TREE_SCHEMA: u32 = 1;
/// The most files one entry may hold (NCCL's build folder holds about 1,500).
pub const MAX_FILES: usize = 200_000;
/// The most bytes one entry may hold.
pub const MAX_BYTES: u64 = 64 << 30;
/// The largest manifest read.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// The deepest path in an entry.
pub const MAX_DEPTH: usize = 32;
const MAX_NAME: usize = 1024;

/// One stored folder: what each relative path holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: u32,
    pub key: String,
    /// What the folder is (said in notes), e.g. `third-party/nccl/build at 1e0c869`.
    pub label: String,
    pub files: Vec<FileEntry>,
    #[serde(default)]
    pub links: Vec<LinkEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    pub path: String,
    pub sha256: String,
    pub size: u64,
    pub executable: bool,
}

/// A symbolic link whose target is a plain name in the same folder (NCCL's `libnccl.so -> libnccl.so.2`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkEntry {
    pub path: String,
    pub target: String,
}

/// What a store or a restore moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    pub files: usize,
    pub bytes: u64,
}

/// The tree store of one cache folder.
pub struct Trees {
    root: PathBuf,
}

impl Trees {
    pub fn at(cache_dir: &Path) -> Trees {
        Trees { root: cache_dir.join("trees") }
    }

    pub fn entry_path(&self, key: &Key) -> PathBuf {
        self.root.join("entries").join(format!("{}.json", key.as_str()))
    }

    fn object(&self, sha: &str) -> PathBuf {
        self.root.join("objects").join(sha)
    }

    /// Remove a refused entry (its manifest; a bad object was removed when found), so the
    /// next fresh build stores a good one.
    pub fn forget(&self, key: &Key) {
        let _ = std::fs::remove_file(self.entry_path(key));
    }

    /// Store the folder `dir` under `key`: regular files and links to plain names
    /// only (anything else refuses the store), bounded; objects first, the entry last.
    pub fn store(&self, key: &Key, label: &str, dir: &Path) -> Result<Moved> {
        let (objects, entries, tmp) = (self.root.join("objects"), self.root.join("entries"), self.root.join("tmp"));
        for d in [&objects, &entries, &tmp] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let mut m = Manifest {
            schema: TREE_SCHEMA,
            key: key.as_str().into(),
            label: label.into(),
            files: vec![],
            links: vec![],
        };
        let mut bytes = 0u64;
        let walk = walkdir::WalkDir::new(dir).follow_links(false).max_depth(MAX_DEPTH).sort_by_file_name();
        for e in walk {
            let e = e.with_context(|| format!("reading {}", dir.display()))?;
            let rel = e.path().strip_prefix(dir).expect("under dir").to_string_lossy().into_owned();
            let t = e.file_type();
            if t.is_dir() {
                continue;
            }
            check_name(&rel)?;
            if t.is_symlink() {
                let target = std::fs::read_link(e.path())?.to_string_lossy().into_owned();
                check_link_target(&rel, &target)?;
                m.links.push(LinkEntry { path: rel, target });
            } else if t.is_file() {
                let exec = e.metadata()?.permissions().mode() & 0o111 != 0;
                let (sha256, size) = self.put_object(e.path(), &tmp)?;
                bytes = bytes.saturating_add(size);
                m.files.push(FileEntry { path: rel, sha256, size, executable: exec });
            } else {
                bail!("{} is not a regular file or a link: not stored", e.path().display());
            }
            if m.files.len() + m.links.len() > MAX_FILES || bytes > MAX_BYTES {
                bail!("{} holds more than {MAX_FILES} files or {MAX_BYTES} bytes: not stored", dir.display());
            }
        }
        let staged = tmp.join(format!("entry-{}-{}.json", std::process::id(), key.as_str()));
        std::fs::write(&staged, serde_json::to_vec(&m)?)?;
        std::fs::rename(&staged, self.entry_path(key)).context("publishing the tree entry")?;
        Ok(Moved { files: m.files.len(), bytes })
    }

    /// Copy `src` into the object store (hashed while copied; renamed to its hash).
    fn put_object(&self, src: &Path, tmp: &Path) -> Result<(String, u64)> {
        // The build's own output, opened as an object is (no link followed, a FIFO never blocks).
        let mut from = open_regular(src)?;
        let staged = tmp.join(format!("object-{}", std::process::id()));
        let mut to = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&staged)?;
        let (sha, size) = copy_hashed(&mut from, &mut to, u64::MAX)?;
        to.sync_all()?;
        let dest = self.object(&sha);
        match std::fs::symlink_metadata(&dest) {
            Ok(md) if md.is_file() && md.len() == size => std::fs::remove_file(&staged)?,
            _ => std::fs::rename(&staged, &dest).context("publishing a tree object")?,
        }
        Ok((sha, size))
    }

    /// Restore the entry `key` as the new folder `dest` (which must not exist), every
    /// file's modification time set to `mtime`. `Ok(None)`: no entry. `Err`: the entry is
    /// refused (why); `dest` may hold part of it, and the caller removes it.
    pub fn restore(&self, key: &Key, dest: &Path, mtime: std::time::SystemTime) -> Result<Option<Moved>> {
        let path = self.entry_path(key);
        let Some(text) = read_bounded(&path, MAX_MANIFEST_BYTES)? else { return Ok(None) };
        let m: Manifest = serde_json::from_slice(&text).context("the entry is not a tree manifest")?;
        check_manifest(&m, key)?;
        std::fs::create_dir(dest).with_context(|| format!("creating {}", dest.display()))?;
        let mut bytes = 0u64;
        for f in &m.files {
            let to_path = dest.join(&f.path);
            if let Some(parent) = to_path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mode = if f.executable { 0o755 } else { 0o644 };
            let mut to = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&to_path)?;
            let obj = self.object(&f.sha256);
            let mut from = match open_object(&obj, f.size) {
                Ok(from) => from,
                Err(e) => return Err(e.context(format!("object {} of {}", f.sha256, f.path))),
            };
            let (sha, size) = copy_hashed(&mut from, &mut to, f.size)?;
            if sha != f.sha256 || size != f.size {
                let _ = std::fs::remove_file(&obj);
                bail!("object {} of {} has the sha256 {sha} ({size} bytes): corrupt, removed", f.sha256, f.path);
            }
            to.set_modified(mtime)?;
            bytes = bytes.saturating_add(size);
        }
        for l in &m.links {
            let at = dest.join(&l.path);
            if let Some(parent) = at.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::os::unix::fs::symlink(&l.target, &at).with_context(|| format!("linking {}", l.path))?;
        }
        // Folders last, the deepest first: make compares a folder's time too (NCCL's
        // objects depend on their `gensrc` folder), and writing into it moved it.
        let mut dirs: BTreeSet<&Path> = BTreeSet::new();
        for p in m.files.iter().map(|f| &f.path).chain(m.links.iter().map(|l| &l.path)) {
            dirs.extend(Path::new(p).ancestors().skip(1));
        }
        for d in dirs.iter().rev() {
            let dir = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(dest.join(d))
                .with_context(|| format!("dating {}", dest.join(d).display()))?;
            dir.set_modified(mtime)?;
        }
        Ok(Some(Moved { files: m.files.len(), bytes }))
    }
}

/// The manifest's own checks: schema, key, every name, hash format, bounds, no path twice.
fn check_manifest(m: &Manifest, key: &Key) -> Result<()> {
    if m.schema != TREE_SCHEMA {
        bail!("manifest schema {} (this deepep-forge reads {TREE_SCHEMA})", m.schema);
    }
    if m.key != key.as_str() {
        bail!("the manifest names the key {} but is stored under {}", super::excerpt(&m.key), key.as_str());
    }
    if m.files.len() + m.links.len() > MAX_FILES {
        bail!("more than {MAX_FILES} files");
    }
    let total = m.files.iter().try_fold(0u64, |a, f| a.checked_add(f.size));
    if total.is_none_or(|t| t > MAX_BYTES) {
        bail!("more than {MAX_BYTES} bytes");
    }
    let mut seen = BTreeSet::new();
    for f in &m.files {
        check_name(&f.path)?;
        Key::parse(&f.sha256).map_err(|_| anyhow::anyhow!("{}: not a sha256", super::excerpt(&f.path)))?;
        if !seen.insert(f.path.as_str()) {
            bail!("{} is listed twice", f.path);
        }
    }
    for l in &m.links {
        check_name(&l.path)?;
        check_link_target(&l.path, &l.target)?;
        if !seen.insert(l.path.as_str()) {
            bail!("{} is listed twice", l.path);
        }
    }
    // A file under a link's name would be written through the link: refused.
    for f in &m.files {
        if m.links.iter().any(|l| f.path.starts_with(&format!("{}/", l.path))) {
            bail!("{} lies under a link", f.path);
        }
    }
    Ok(())
}

/// A relative path of plain components: no `/` at either end, no `.`, `..` or
/// empty component, no control character or backslash, bounded length and depth.
fn check_name(p: &str) -> Result<()> {
    let parts: Vec<&str> = p.split('/').collect();
    let bad_part = |c: &&str| c.is_empty() || *c == "." || *c == "..";
    if p.is_empty()
        || p.len() > MAX_NAME
        || parts.len() > MAX_DEPTH
        || parts.iter().any(bad_part)
        || p.chars().any(|c| c.is_control() || c == '\\')
    {
        bail!("`{}` is not a plain relative path", super::excerpt(p));
    }
    Ok(())
}

/// A link's target: one plain name (it stays in the link's own folder).
fn check_link_target(path: &str, target: &str) -> Result<()> {
    if target.contains('/') || check_name(target).is_err() {
        bail!("the link {} points to `{}`, not a plain name beside it", super::excerpt(path), super::excerpt(target));
    }
    Ok(())
}

/// A regular file, opened without following a link (a FIFO never blocks).
fn open_regular(p: &Path) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .with_context(|| format!("opening {}", p.display()))?;
    if !f.metadata()?.is_file() {
        bail!("{} is not a regular file", p.display());
    }
    Ok(f)
}

/// An object: [`open_regular`], of `size` bytes.
fn open_object(p: &Path, size: u64) -> Result<File> {
    let f = open_regular(p)?;
    let md = f.metadata()?;
    if md.len() != size {
        bail!("{} has {} bytes, the manifest says {size}", p.display(), md.len());
    }
    Ok(f)
}

/// A file this cache wrote, at most `cap` bytes (opened as [`open_object`] does); None when absent.
fn read_bounded(p: &Path, cap: u64) -> Result<Option<Vec<u8>>> {
    let f = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("opening {}", p.display()))),
    };
    let md = f.metadata()?;
    if !md.is_file() || md.len() > cap {
        bail!("{} is not a regular file of at most {cap} bytes", p.display());
    }
    let mut buf = Vec::new();
    f.take(cap + 1).read_to_end(&mut buf)?;
    Ok(Some(buf))
}

/// Copy at most `cap` bytes (one more is an error), returning the sha256 and size of what was copied.
fn copy_hashed(from: &mut impl Read, to: &mut impl Write, cap: u64) -> Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = from.read(&mut buf)?;
        if k == 0 {
            break;
        }
        n += k as u64;
        if n > cap {
            bail!("longer than the {cap} bytes recorded");
        }
        h.update(&buf[..k]);
        to.write_all(&buf[..k])?;
    }
    Ok((hex::encode(h.finalize()), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::parse(&"ab".repeat(32)).unwrap()
    }

    fn sample(dir: &Path) {
        std::fs::create_dir_all(dir.join("obj/sub")).unwrap();
        std::fs::write(dir.join("obj/sub/a.o"), b"object a").unwrap();
        std::fs::write(dir.join("obj/b.o"), b"object b").unwrap();
        std::os::unix::fs::symlink("b.o", dir.join("obj/b-link.o")).unwrap();
    }

    #[test]
    fn a_stored_folder_comes_back_whole_with_the_given_times() {
        let t = tempfile::tempdir().unwrap();
        let trees = Trees::at(&t.path().join("cache"));
        sample(&t.path().join("build"));
        let stored = trees.store(&key(), "x", &t.path().join("build")).unwrap();
        assert_eq!(stored, Moved { files: 2, bytes: 16 });
        let when = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(2_000_000_000);
        let back = trees.restore(&key(), &t.path().join("again"), when).unwrap().unwrap();
        assert_eq!(back, stored);
        assert_eq!(std::fs::read(t.path().join("again/obj/sub/a.o")).unwrap(), b"object a");
        assert_eq!(std::fs::read_link(t.path().join("again/obj/b-link.o")).unwrap(), Path::new("b.o"));
        for p in ["again/obj/b.o", "again/obj/sub", "again/obj", "again"] {
            assert_eq!(std::fs::metadata(t.path().join(p)).unwrap().modified().unwrap(), when, "{p}");
        }
        let other = Key::parse(&"cd".repeat(32)).unwrap();
        assert!(trees.restore(&other, &t.path().join("none"), when).unwrap().is_none());
    }

    #[test]
    fn a_corrupt_object_or_a_hostile_manifest_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let trees = Trees::at(&t.path().join("cache"));
        sample(&t.path().join("build"));
        trees.store(&key(), "x", &t.path().join("build")).unwrap();
        let now = std::time::SystemTime::now();
        // Same size, other bytes: found by the hash, and the object is removed.
        let sha = hex::encode(Sha256::digest(b"object a"));
        let obj = t.path().join("cache/trees/objects").join(&sha);
        std::fs::write(&obj, b"object A").unwrap();
        let e = trees.restore(&key(), &t.path().join("r1"), now).unwrap_err();
        assert!(format!("{e:#}").contains("corrupt"), "{e:#}");
        assert!(!obj.exists());
        // Hostile manifests: escaping names, links out, a key that is not its own.
        let entry = trees.entry_path(&key());
        let good = std::fs::read_to_string(&entry).unwrap();
        for (from, to, says) in [
            ("obj/b.o", "../../escape.o", "plain relative path"),
            ("obj/b.o", "/etc/passwd", "plain relative path"),
            ("\"b.o\"", "\"../b.o\"", "not a plain name"),
            (&"ab".repeat(32), &"ef".repeat(32), "stored under"),
        ] {
            std::fs::write(&entry, good.replacen(from, to, 1)).unwrap();
            let e = trees.restore(&key(), &t.path().join("r2"), now).unwrap_err();
            assert!(format!("{e:#}").contains(says), "{from} -> {to}: {e:#}");
            assert!(!t.path().join("r2").exists(), "nothing written before the manifest is checked");
        }
        std::fs::write(&entry, "{not json").unwrap();
        assert!(trees.restore(&key(), &t.path().join("r3"), now).is_err());
        // A FIFO as the entry never blocks.
        std::fs::remove_file(&entry).unwrap();
        let c = std::ffi::CString::new(entry.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(trees.restore(&key(), &t.path().join("r4"), now).is_err());
    }
}
