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
//! removes what was written and builds).
//!
//! `cache gc` collects it: [`Trees::list`] reads every entry as `cache ls`
//! shows it; [`Collector`] removes entries, then the objects no remaining
//! entry names (mark and sweep) and leftovers of killed stores in `tmp/`.
//! `store` and `restore` hold the store's lock (`trees/use.lock`) shared for
//! their whole run, `cache gc` takes it exclusive without waiting (a store or
//! restore running: nothing collected this time). Why a lock and not an age
//! rule for objects: a store reuses an object that is already there (same
//! hash, same size) without writing or dating it, so an old unreferenced
//! object may be named by the entry a running store is about to publish; only
//! excluding stores for the sweep makes "no entry names it" mean it stays
//! unnamed. Must not build anything.
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{dirfd, BadEntry, Key};

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

    /// The store's lock, held shared by `store` and `restore` and exclusive by `cache gc`.
    fn lock_path(&self) -> PathBuf {
        self.root.join("use.lock")
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
        let _use = super::lock::shared(&self.lock_path())?;
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
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        let _use = super::lock::shared(&self.lock_path())?;
        let Some(text) = read_bounded(&path, MAX_MANIFEST_BYTES)? else { return Ok(None) };
        let m = parse_manifest(&text, key)?;
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

/// A manifest read from its entry file, checked whole ([`check_manifest`]).
fn parse_manifest(text: &[u8], key: &Key) -> Result<Manifest> {
    let m: Manifest = serde_json::from_slice(text).context("the entry is not a tree manifest")?;
    check_manifest(&m, key)?;
    Ok(m)
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
pub(super) fn read_bounded(p: &Path, cap: u64) -> Result<Option<Vec<u8>>> {
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
    let (digest, n) = forge_os::input::sha256_stream(from, cap, |chunk| Ok(to.write_all(chunk)?))?;
    if n > cap {
        bail!("longer than the {cap} bytes recorded");
    }
    Ok((hex::encode(digest), n))
}

/// One stored entry as `cache ls` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TreeEntry {
    pub key: String,
    /// What the folder is (from the manifest, control characters escaped, cut at 80).
    pub label: String,
    pub files: usize,
    pub links: usize,
    /// Bytes of its objects, each counted once (a file stored twice is one object).
    pub bytes: u64,
    /// Of those, the bytes of objects another entry names too (they stay when this one goes).
    pub shared_bytes: u64,
    /// When the entry was stored (its file's modification time).
    pub created_secs: i64,
}

/// The tree store as `cache ls` and `cache gc` see it.
#[derive(Debug, Default)]
pub struct TreeListing {
    /// Good entries, newest first.
    pub entries: Vec<TreeEntry>,
    /// Entry files that are not entries (refused by `restore` too), and a `trees/` that is not a folder.
    pub bad: Vec<BadEntry>,
    /// Bytes of every regular file under `trees/` (links not followed).
    pub bytes: u64,
    /// Objects on disk (sha256 name -> bytes; 0 for what is not a regular file).
    objects: BTreeMap<String, u64>,
    /// How many entry files name each object. Entry files that fail a check but parse
    /// still mark what they name (a newer schema's entry is not swept from under it).
    marks: BTreeMap<String, usize>,
    /// Objects named by each good entry.
    named: BTreeMap<String, BTreeSet<String>>,
}

/// Objects a sweep removes (or would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub objects: usize,
    pub bytes: u64,
}

impl TreeListing {
    /// The objects that no entry would name once the entries `gone` are removed.
    pub fn freed_without(&self, gone: &BTreeSet<&str>) -> Swept {
        let mut marks = self.marks.clone();
        for k in gone {
            for sha in self.named.get(*k).into_iter().flatten() {
                if let Some(n) = marks.get_mut(sha) {
                    *n -= 1;
                }
            }
        }
        let mut s = Swept::default();
        for (sha, size) in &self.objects {
            if marks.get(sha).is_none_or(|n| *n == 0) {
                s.objects += 1;
                s.bytes = s.bytes.saturating_add(*size);
            }
        }
        s
    }
}

/// The sha256 names an entry file's JSON gives under `files[].sha256` (checked
/// names only), read leniently: marks for the sweep.
fn named_objects(text: &[u8]) -> BTreeSet<String> {
    let doc: serde_json::Value = serde_json::from_slice(text).unwrap_or_default();
    let files = doc.get("files").and_then(|f| f.as_array()).map(Vec::as_slice).unwrap_or_default();
    files.iter().filter_map(|f| f.get("sha256")?.as_str()).filter(|s| Key::parse(s).is_ok()).map(String::from).collect()
}

fn mtime_secs(md: &std::fs::Metadata) -> i64 {
    md.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Trees {
    /// Every entry (unverified objects), the objects on disk and what names them.
    /// Never follows a link, never blocks on a FIFO, reads each entry file bounded.
    pub fn list(&self) -> TreeListing {
        let mut out = TreeListing::default();
        let top = match dirfd::open(&self.root) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
            Err(e) => {
                out.bad.push(BadEntry::new(
                    "trees",
                    "",
                    format!("not read: not a folder (a link is never followed): {e}"),
                ));
                return out;
            }
        };
        out.bytes = super::disk_size(&self.root);
        if let Ok(objects) = dirfd::open_in(&top, "objects") {
            for name in dirfd::names(&objects).unwrap_or_default() {
                let Ok(st) = dirfd::stat_in(&objects, &name) else { continue };
                if Key::parse(&name).is_ok() && st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                    let size = if dirfd::is_file(&st) { u64::try_from(st.st_size).unwrap_or(0) } else { 0 };
                    out.objects.insert(name, size);
                }
            }
        }
        let names = dirfd::open_in(&top, "entries").and_then(|d| dirfd::names(&d)).unwrap_or_default();
        let mut good = Vec::new();
        for name in names {
            match self.read_entry(&name) {
                Ok((m, text, created)) => {
                    good.push((m, created));
                    for sha in named_objects(&text) {
                        *out.marks.entry(sha).or_default() += 1;
                    }
                }
                Err((why, text)) => {
                    for sha in text.map(|t| named_objects(&t)).unwrap_or_default() {
                        *out.marks.entry(sha).or_default() += 1;
                    }
                    out.bad.push(BadEntry::new("trees/entries", &name, format!("{why:#}")));
                }
            }
        }
        for (m, created) in good {
            let objs: BTreeMap<&str, u64> = m.files.iter().map(|f| (f.sha256.as_str(), f.size)).collect();
            let shared = objs.iter().filter(|(s, _)| out.marks.get(**s).is_some_and(|n| *n > 1));
            out.entries.push(TreeEntry {
                key: m.key.clone(),
                label: forge_os::input::excerpt(&m.label, 80),
                files: m.files.len(),
                links: m.links.len(),
                bytes: objs.values().fold(0u64, |a, b| a.saturating_add(*b)),
                shared_bytes: shared.map(|(_, b)| *b).fold(0u64, u64::saturating_add),
                created_secs: created,
            });
            out.named.insert(m.key, objs.keys().map(|s| s.to_string()).collect());
        }
        out.entries.sort_by(|a, b| b.created_secs.cmp(&a.created_secs).then(a.key.cmp(&b.key)));
        out
    }

    /// One entry file: its manifest (checked whole, as `restore` checks it), its bytes
    /// and its time; or why not, with its bytes when they could be read.
    #[allow(clippy::type_complexity)]
    fn read_entry(
        &self,
        name: &str,
    ) -> std::result::Result<(Manifest, Vec<u8>, i64), (anyhow::Error, Option<Vec<u8>>)> {
        let key = name
            .strip_suffix(".json")
            .and_then(|k| Key::parse(k).ok())
            .ok_or_else(|| (anyhow::anyhow!("not <key>.json (64 lowercase hex digits)"), None))?;
        let path = self.entry_path(&key);
        let md = std::fs::symlink_metadata(&path).map_err(|e| (e.into(), None))?;
        let text = match read_bounded(&path, MAX_MANIFEST_BYTES) {
            Ok(Some(t)) => t,
            Ok(None) => return Err((anyhow::anyhow!("gone while listed"), None)),
            Err(e) => return Err((e, None)),
        };
        match parse_manifest(&text, &key) {
            Ok(m) => Ok((m, text, mtime_secs(&md))),
            Err(e) => Err((e, Some(text))),
        }
    }

    /// The store's lock, exclusive, if no `store` or `restore` holds it now.
    /// `Ok(None)`: in use (or no store here: nothing to collect).
    pub fn collector(&self) -> Result<Option<Collector>> {
        match std::fs::symlink_metadata(&self.root) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => bail!("{} is not a folder (a link or a file): not collected", self.root.display()),
            Err(_) => return Ok(None),
        }
        let Some(lock) = super::lock::try_exclusive(&self.lock_path())? else { return Ok(None) };
        let top = dirfd::open(&self.root).with_context(|| format!("opening {}", self.root.display()))?;
        Ok(Some(Collector { trees: Trees { root: self.root.clone() }, top, _lock: lock }))
    }

    /// Whether the store exists (a `trees/` folder or something in its place).
    pub fn exists(&self) -> bool {
        std::fs::symlink_metadata(&self.root).is_ok()
    }
}

/// `cache gc` holding the tree store's lock exclusive: removals are made in the
/// folders it opened without following links ([`dirfd`]).
pub struct Collector {
    trees: Trees,
    top: File,
    _lock: File,
}

impl Collector {
    /// The store as it is now (no store or restore can change it while this lives).
    pub fn list(&self) -> TreeListing {
        self.trees.list()
    }

    /// Remove the entry `key` (its manifest; the objects go with [`Collector::sweep`]).
    pub fn remove(&self, key: &str) -> Result<()> {
        let key = Key::parse(key)?;
        let entries = dirfd::open_in(&self.top, "entries").context("opening trees/entries")?;
        match dirfd::unlink_in(&entries, &format!("{}.json", key.as_str())) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", self.trees.entry_path(&key).display()))
            }
            _ => Ok(()),
        }
    }

    /// Remove every object no entry names now (mark: [`Trees::list`]; sweep: here).
    pub fn sweep(&self) -> Result<Swept> {
        let listing = self.list();
        let Ok(objects) = dirfd::open_in(&self.top, "objects") else { return Ok(Swept::default()) };
        let mut s = Swept::default();
        for (sha, size) in &listing.objects {
            if listing.marks.get(sha).is_some_and(|n| *n > 0) {
                continue;
            }
            match dirfd::unlink_in(&objects, sha) {
                Ok(()) => {
                    s.objects += 1;
                    s.bytes = s.bytes.saturating_add(*size);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing {}", self.trees.object(sha).display())),
            }
        }
        Ok(s)
    }

    /// Remove what killed stores left in `trees/tmp/` (no store runs while the lock is
    /// held exclusive, so everything there is a leftover); folders are left alone.
    pub fn clean_tmp(&self) -> Result<usize> {
        let Ok(tmp) = dirfd::open_in(&self.top, "tmp") else { return Ok(0) };
        let mut n = 0;
        for name in dirfd::names(&tmp)? {
            let Ok(st) = dirfd::stat_in(&tmp, &name) else { continue };
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR && dirfd::unlink_in(&tmp, &name).is_ok() {
                n += 1;
            }
        }
        Ok(n)
    }
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
        let sha = forge_os::input::sha256_hex(b"object a");
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

    /// A store waits while `cache gc` holds the store's lock (so a sweep never sees an
    /// object a store is about to name), and gc gets no collector while a store or a
    /// restore holds it. (If the store did not wait, its entry would be there long
    /// before the lock is dropped; a slow machine can only make this pass, not fail.)
    #[test]
    fn a_store_waits_for_gc_and_gc_does_not_wait_for_a_store() {
        let t = tempfile::tempdir().unwrap();
        let trees = Trees::at(&t.path().join("cache"));
        sample(&t.path().join("build"));
        std::fs::create_dir_all(t.path().join("cache/trees")).unwrap();
        let gc = trees.collector().unwrap().expect("nobody holds the lock");
        let build = t.path().join("build");
        let storing = std::thread::spawn(move || {
            Trees::at(&build.parent().unwrap().join("cache")).store(&key(), "x", &build).unwrap()
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!trees.entry_path(&key()).exists(), "the store did not wait for gc");
        drop(gc);
        storing.join().unwrap();
        assert!(trees.entry_path(&key()).exists());
        let restoring = super::super::lock::shared(&trees.lock_path()).unwrap();
        assert!(trees.collector().unwrap().is_none(), "gc must not collect while a restore runs");
        drop(restoring);
        assert!(trees.collector().unwrap().is_some());
    }
}
