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
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{BadEntry, Cache, Key};
use forge_os::fs::{File, Kind, Tree, Walk};

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

/// The tree store of one cache folder (`<cache>/trees/`).
pub struct Trees {
    cache: Cache,
}

/// The store's folders, relative to `trees/`.
const OBJECTS: &str = "objects";
const ENTRIES: &str = "entries";
const TMP: &str = "tmp";
/// The store's lock, held shared by `store` and `restore` and exclusive by `cache gc`.
const USE_LOCK: &str = "use.lock";

impl Trees {
    pub fn at(cache_dir: &Path) -> Trees {
        Trees { cache: Cache::at(cache_dir) }
    }

    /// The tree store of `cache`.
    pub fn of(cache: &Cache) -> Trees {
        Trees { cache: cache.clone() }
    }

    pub fn entry_path(&self, key: &Key) -> PathBuf {
        self.cache.root().join("trees").join(entry_rel(key))
    }

    /// `trees/` as a tree: made when absent (`make`), else `None` when absent.
    /// A link or a file in its place is refused (exit 2): never followed.
    fn top(&self, make: bool) -> Result<Option<Tree>> {
        let cache = if make { Some(self.cache.tree()?) } else { self.cache.existing()? };
        let Some(cache) = cache else { return Ok(None) };
        match cache.kind("trees")? {
            Kind::Missing if make => Ok(Some(super::make_sub(cache, "trees", "tree store")?)),
            Kind::Missing => Ok(None),
            Kind::Dir => Ok(Some(cache.sub("trees", "tree store")?)),
            k => Err(forge_os::error::Failure::usage(format!(
                "{} is {}, not a folder: the cache never reads or writes through one",
                cache.join("trees").display(),
                k.noun()
            ))
            .hint("remove it (the store is rebuilt by the next build)")
            .into()),
        }
    }

    /// Remove a refused entry (its manifest; a bad object was removed when found), so the
    /// next fresh build stores a good one.
    pub fn forget(&self, key: &Key) {
        if let Ok(Some(top)) = self.top(false) {
            let _ = top.remove_file(entry_rel(key));
        }
    }

    /// [`Trees::store_tree`] of the folder `dir` (the build's, named by its path).
    pub fn store(&self, key: &Key, label: &str, dir: &Path) -> Result<Moved> {
        self.store_tree(key, label, &Tree::open(dir, "build folder")?)
    }

    /// Store the folder `src` under `key`: regular files and links to plain names
    /// only (anything else refuses the store), bounded; objects first, the entry last.
    pub fn store_tree(&self, key: &Key, label: &str, src: &Tree) -> Result<Moved> {
        let top = self.top(true)?.expect("made");
        for d in [OBJECTS, ENTRIES, TMP] {
            super::make_dir(&top, d)?;
        }
        let _use = super::lock::shared_in(&top, USE_LOCK)?;
        let mut m = Manifest {
            schema: TREE_SCHEMA,
            key: key.as_str().into(),
            label: label.into(),
            files: vec![],
            links: vec![],
        };
        let mut bytes = 0u64;
        let walk = src.walk(".", Walk { max_entries: MAX_FILES + 1, max_depth: MAX_DEPTH })?;
        for e in walk {
            let rel = e.rel.to_string_lossy().into_owned();
            match e.kind {
                Kind::Dir => continue,
                Kind::Link => {
                    check_name(&rel)?;
                    let target = Tree::read_link(src, &e.rel)?.to_string_lossy().into_owned();
                    check_link_target(&rel, &target)?;
                    m.links.push(LinkEntry { path: rel, target });
                }
                Kind::File { .. } => {
                    check_name(&rel)?;
                    let exec = src.stat(&e.rel)?.mode & 0o111 != 0;
                    let (sha256, size) = put_object(&top, src, &e.rel)?;
                    bytes = bytes.saturating_add(size);
                    m.files.push(FileEntry { path: rel, sha256, size, executable: exec });
                }
                _ => bail!("{} is not a regular file or a link: not stored", src.join(&e.rel).display()),
            }
            if m.files.len() + m.links.len() > MAX_FILES || bytes > MAX_BYTES {
                bail!("{} holds more than {MAX_FILES} files or {MAX_BYTES} bytes: not stored", src.path().display());
            }
        }
        top.write(entry_rel(key), &serde_json::to_vec(&m)?).context("publishing the tree entry")?;
        Ok(Moved { files: m.files.len(), bytes })
    }

    /// [`Trees::restore_into`] of a new folder `dest` (which must not exist;
    /// made only once the entry's manifest passed its checks).
    pub fn restore(&self, key: &Key, dest: &Path, mtime: std::time::SystemTime) -> Result<Option<Moved>> {
        let Some((top, m, _use)) = self.load(key)? else { return Ok(None) };
        let name = dest.file_name().with_context(|| format!("{} names no folder", dest.display()))?;
        let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let parent = Tree::open(parent, "build folder")?;
        if !parent.make_dir(name)? {
            bail!("{} exists: a tree is restored into a new folder only", dest.display());
        }
        restore_files(&top, &m, &parent.sub(name, "build folder")?, mtime).map(Some)
    }

    /// Restore the entry `key` into the empty folder `dest`, every file's
    /// modification time set to `mtime`. `Ok(None)`: no entry. `Err`: the entry is
    /// refused (why); `dest` may hold part of it, and the caller removes it.
    pub fn restore_into(&self, key: &Key, dest: &Tree, mtime: std::time::SystemTime) -> Result<Option<Moved>> {
        let Some((top, m, _use)) = self.load(key)? else { return Ok(None) };
        restore_files(&top, &m, dest, mtime).map(Some)
    }

    /// The store, the entry `key`'s manifest (checked whole) and the store's
    /// lock held shared; `None`: no entry.
    fn load(&self, key: &Key) -> Result<Option<(Tree, Manifest, File)>> {
        let Some(top) = self.top(false)? else { return Ok(None) };
        if top.kind(entry_rel(key))? == Kind::Missing {
            return Ok(None);
        }
        let lock = super::lock::shared_in(&top, USE_LOCK)?;
        let Some(text) = super::read_nofollow(&top, &entry_rel(key), MAX_MANIFEST_BYTES)? else { return Ok(None) };
        let m = parse_manifest(&text, key)?;
        Ok(Some((top, m, lock)))
    }
}

/// Write the files and links of `m` (from the objects of `top`) into `dest`, then date its folders.
fn restore_files(top: &Tree, m: &Manifest, dest: &Tree, mtime: std::time::SystemTime) -> Result<Moved> {
    {
        let mut bytes = 0u64;
        for f in &m.files {
            if let Some(parent) = Path::new(&f.path).parent() {
                dest.create_dir_all(parent)?;
            }
            let mode = if f.executable { 0o755 } else { 0o644 };
            let obj = Path::new(OBJECTS).join(&f.sha256);
            let (mut from, len) = top
                .open_file_nofollow(&obj, f.size.max(1))
                .map_err(|e| e.context(format!("object {} of {}", f.sha256, f.path)))?;
            if len != f.size {
                bail!(
                    "object {} of {}: {} has {len} bytes, the manifest says {}",
                    f.sha256,
                    f.path,
                    top.join(&obj).display(),
                    f.size
                );
            }
            let mut got = None;
            let copied = dest.write_with(&f.path, mode, |to| {
                let (sha, size) = copy_hashed(&mut from, to, f.size)?;
                if sha != f.sha256 || size != f.size {
                    got = Some((sha, size));
                    bail!("corrupt");
                }
                to.set_modified(mtime)?;
                Ok(())
            });
            if let Some((sha, size)) = got {
                let _ = top.remove_file(&obj);
                bail!("object {} of {} has the sha256 {sha} ({size} bytes): corrupt, removed", f.sha256, f.path);
            }
            copied?;
            bytes = bytes.saturating_add(f.size);
        }
        for l in &m.links {
            if let Some(parent) = Path::new(&l.path).parent() {
                dest.create_dir_all(parent)?;
            }
            dest.symlink(&l.target, &l.path).with_context(|| format!("linking {}", l.path))?;
        }
        // Folders last, the deepest first: make compares a folder's time too (NCCL's
        // objects depend on their `gensrc` folder), and writing into it moved it.
        let mut dirs: BTreeSet<&Path> = BTreeSet::new();
        for p in m.files.iter().map(|f| &f.path).chain(m.links.iter().map(|l| &l.path)) {
            dirs.extend(Path::new(p).ancestors().skip(1));
        }
        for d in dirs.iter().rev() {
            let dated = dest.sub(d, "build folder").and_then(|t| t.handle()).and_then(|h| Ok(h.set_modified(mtime)?));
            dated.with_context(|| format!("dating {}", dest.join(d).display()))?;
        }
        Ok(Moved { files: m.files.len(), bytes })
    }
}

/// `entries/<key>.json`, relative to `trees/`.
fn entry_rel(key: &Key) -> PathBuf {
    Path::new(ENTRIES).join(format!("{}.json", key.as_str()))
}

/// Copy the regular file `rel` of `src` (never through a link, a FIFO never
/// blocks) into the object store of `top`: hashed while copied into `tmp/`,
/// then renamed to its hash unless an object of that hash and size is there.
fn put_object(top: &Tree, src: &Tree, rel: &Path) -> Result<(String, u64)> {
    let (mut from, _) = src.open_file_nofollow(rel, MAX_BYTES)?;
    let staged = Path::new(TMP).join(format!("object-{}", std::process::id()));
    let mut digest = None;
    top.write_with(&staged, 0o644, |to| {
        digest = Some(copy_hashed(&mut from, to, MAX_BYTES)?);
        Ok(to.sync_all()?)
    })?;
    let (sha, size) = digest.expect("written");
    let dest = Path::new(OBJECTS).join(&sha);
    match top.kind(&dest)? {
        Kind::File { len } if len == size => top.remove_file(&staged)?,
        _ => top.rename(&staged, &dest).context("publishing a tree object")?,
    }
    Ok((sha, size))
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

impl Trees {
    /// Every entry (unverified objects), the objects on disk and what names them.
    /// Never follows a link, never blocks on a FIFO, reads each entry file bounded.
    pub fn list(&self) -> TreeListing {
        let mut out = TreeListing::default();
        match self.top(false) {
            Ok(Some(top)) => list_in(&top, &mut out),
            Ok(None) => {}
            Err(e) => out.bad.push(BadEntry::new(
                "trees",
                "",
                format!("not read: not a folder (a link is never followed): {e:#}"),
            )),
        }
        out
    }

    /// The store's lock, exclusive, if no `store` or `restore` holds it now.
    /// `Ok(None)`: in use (or no store here: nothing to collect).
    pub fn collector(&self) -> Result<Option<Collector>> {
        let Some(top) = self.top(false)? else { return Ok(None) };
        let Some(lock) = super::lock::try_exclusive_in(&top, USE_LOCK)? else { return Ok(None) };
        Ok(Some(Collector { top, _lock: lock }))
    }

    /// Whether the store is there (a `trees/` folder or something in its place).
    pub fn present(&self) -> bool {
        self.cache.existing().ok().flatten().is_some_and(|c| c.exists("trees"))
    }
}

/// The store `top` (`trees/`) as [`Trees::list`] sees it, into `out`.
fn list_in(top: &Tree, out: &mut TreeListing) {
    out.bytes = super::disk_size_in(top, Path::new("."));
    if top.kind(OBJECTS).ok() == Some(Kind::Dir) {
        for e in top.list(OBJECTS, forge_os::fs::MAX_NAMES).map(|l| l.entries).unwrap_or_default() {
            let Some(name) = e.utf8().filter(|n| Key::parse(n).is_ok()) else { continue };
            match e.kind {
                Kind::Dir => {}
                Kind::File { len } => drop(out.objects.insert(name.to_string(), len)),
                _ => drop(out.objects.insert(name.to_string(), 0)),
            }
        }
    }
    let names = if top.kind(ENTRIES).ok() == Some(Kind::Dir) { top.names(ENTRIES).unwrap_or_default() } else { vec![] };
    let mut good = Vec::new();
    for name in names {
        match read_entry(top, &name) {
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
}

/// One entry file of `top`: its manifest (checked whole, as `restore` checks it), its bytes
/// and its time; or why not, with its bytes when they could be read.
#[allow(clippy::type_complexity)]
fn read_entry(
    top: &Tree,
    name: &str,
) -> std::result::Result<(Manifest, Vec<u8>, i64), (anyhow::Error, Option<Vec<u8>>)> {
    let key = name
        .strip_suffix(".json")
        .and_then(|k| Key::parse(k).ok())
        .ok_or_else(|| (anyhow::anyhow!("not <key>.json (64 lowercase hex digits)"), None))?;
    let rel = entry_rel(&key);
    let st = top.stat(&rel).map_err(|e| (e, None))?;
    let text = match super::read_nofollow(top, &rel, MAX_MANIFEST_BYTES) {
        Ok(Some(t)) => t,
        Ok(None) => return Err((anyhow::anyhow!("gone while listed"), None)),
        Err(e) => return Err((e, None)),
    };
    match parse_manifest(&text, &key) {
        Ok(m) => Ok((m, text, st.mtime)),
        Err(e) => Err((e, Some(text))),
    }
}

/// `cache gc` holding the tree store's lock exclusive: removals are names in
/// the store's folder, opened once (a link is removed itself, never followed).
pub struct Collector {
    top: Tree,
    _lock: File,
}

impl Collector {
    /// The store as it is now (no store or restore can change it while this lives).
    pub fn list(&self) -> TreeListing {
        let mut out = TreeListing::default();
        list_in(&self.top, &mut out);
        out
    }

    /// Remove the entry `key` (its manifest; the objects go with [`Collector::sweep`]).
    pub fn remove(&self, key: &str) -> Result<()> {
        self.top.remove_file(entry_rel(&Key::parse(key)?))
    }

    /// Remove every object no entry names now (mark: [`Trees::list`]; sweep: here).
    pub fn sweep(&self) -> Result<Swept> {
        let listing = self.list();
        let mut s = Swept::default();
        for (sha, size) in &listing.objects {
            if listing.marks.get(sha).is_some_and(|n| *n > 0) {
                continue;
            }
            self.top.remove_file(Path::new(OBJECTS).join(sha))?;
            s.objects += 1;
            s.bytes = s.bytes.saturating_add(*size);
        }
        Ok(s)
    }

    /// Remove what killed stores left in `trees/tmp/` (no store runs while the lock is
    /// held exclusive, so everything there is a leftover); folders are left alone.
    pub fn clean_tmp(&self) -> Result<usize> {
        if self.top.kind(TMP)? != Kind::Dir {
            return Ok(0);
        }
        let mut n = 0;
        for e in self.top.list(TMP, forge_os::fs::MAX_NAMES)?.entries {
            if e.kind != Kind::Dir && self.top.remove_file(Path::new(TMP).join(&e.name)).is_ok() {
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
        let restoring = super::super::lock::shared(&t.path().join("cache/trees/use.lock")).unwrap();
        assert!(trees.collector().unwrap().is_none(), "gc must not collect while a restore runs");
        drop(restoring);
        assert!(trees.collector().unwrap().is_some());
    }
}
