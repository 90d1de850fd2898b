//! The wheel cache as a type: [`Cache`] owns `<cache>/wheels/<key>/{<wheel>,
//! entry.json}` (content-addressed by the plan's cache key), the per-key build
//! lock `<cache>/locks/<key>.lock`, staging folders under `<cache>/tmp/`
//! (publishing is one rename, so a reader sees a whole entry or none) and the
//! toolchains' in-use locks. Remote (`--cache-url`, [`remote`]): signed entries
//! ([`sign`]) fetched into a staging folder, checked, then published the same way.
//!
//! Every name read from disk or from a server is validated before it is joined
//! to a path ([`Key`], [`check_wheel_name`]); a bad entry is skipped or reported,
//! never a panic. Must not build anything and must not call into `build`.
pub mod bases;
pub mod cmd;
pub mod config;
pub mod lock;
pub mod remote;
pub mod sign;
pub mod tree;
pub mod unit_times;

use forge_os::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use forge_os::error::Failure;
use forge_os::fs::{Kind, Tree};

pub use cmd::{gc, keygen, ls, push, GcRequest, KeygenRequest, LsRequest, PushRequest, RemoteRequest, Seen};

/// Version of entry.json and of `cache ls --format json`.
pub const SCHEMA: u32 = 1;
pub const ENTRY_FILE: &str = "entry.json";
/// The largest entry.json read (local or remote): a real one is under 1 KiB.
pub const MAX_ENTRY_BYTES: u64 = 64 * 1024;

/// The cache folder: `given` (`--cache-dir`, `DEEPEP_FORGE_CACHE_DIR`), else
/// `$XDG_CACHE_HOME/deepep-forge`, else `~/.cache/deepep-forge`.
pub fn resolve_dir(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(d) = given {
        return Ok(d.to_path_buf());
    }
    let base = forge_os::environ::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| forge_os::environ::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or_else(|| {
            Failure::env("no cache folder: HOME and XDG_CACHE_HOME are unset").hint("pass --cache-dir DIR")
        })?;
    Ok(base.join("deepep-forge"))
}

/// A cache key: the plan's sha256, 64 lowercase hex digits. Anything else
/// (shorter, upper case, non-ASCII, a path) is refused before it names a file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(String);

impl Key {
    pub const LEN: usize = 64;

    pub fn parse(s: &str) -> Result<Key, Failure> {
        if s.len() == Self::LEN && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            Ok(Key(s.to_string()))
        } else {
            Err(Failure::usage(format!("`{}` is not a cache key ({} lowercase hex digits)", excerpt(s), Self::LEN)))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The first 16 digits, as listings show them.
    pub fn short(&self) -> &str {
        &self.0[..16]
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// At most 40 characters of an untrusted value, cut visibly, control characters escaped.
pub fn excerpt(s: &str) -> String {
    forge_os::input::excerpt(s, 40)
}

/// A wheel file name that is safe to join to a folder: one path component
/// (no `/`, `\`, NUL, `..`, leading `.`), ASCII letters, digits and `._+-!`,
/// at most 200 bytes, and a PEP 427 shape `{dist}-{version}(-{build})?-{py}-{abi}-{plat}.whl`.
pub fn check_wheel_name(name: &str) -> Result<(), Failure> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-!".contains(&b));
    if name.is_empty() || name.len() > 200 || !ok_chars || name.starts_with('.') || name.contains("..") {
        return Err(Failure::usage(format!("`{}` is not a safe wheel file name", excerpt(name))));
    }
    forge_wheel::wheel::WheelName::parse(name).map(|_| ()).ok_or_else(|| {
        Failure::usage(format!("`{}` is not a wheel file name (dist-version-python-abi-platform.whl)", excerpt(name)))
    })
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A published cache entry (entry.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub schema: u32,
    pub key: String,
    /// Wheel file name inside the entry folder.
    pub wheel: String,
    pub sha256: String,
    pub size: u64,
    pub variant: String,
    pub version: String,
    /// RFC 3339 UTC.
    pub created: String,
    pub created_secs: i64,
}

impl Entry {
    /// The entry's names and digests are well-formed (key, wheel name, sha256):
    /// nothing from it reaches a path or a message unchecked.
    pub fn validate(&self) -> Result<Key, Failure> {
        let key = Key::parse(&self.key)?;
        check_wheel_name(&self.wheel)?;
        if !is_sha256_hex(&self.sha256) {
            return Err(Failure::usage(format!("sha256 `{}` is not 64 lowercase hex digits", excerpt(&self.sha256))));
        }
        if self.variant.len() > 200 || self.version.len() > 200 || self.created.len() > 64 {
            return Err(Failure::usage("an over-long variant, version or created value"));
        }
        if [&self.variant, &self.version, &self.created].iter().any(|s| s.chars().any(char::is_control)) {
            return Err(Failure::usage("control characters in the variant, version or created value"));
        }
        Ok(key)
    }
}

/// Read and validate the entry folder `rel` of `tree` (no hashing): entry.json
/// a regular file of at most [`MAX_ENTRY_BYTES`] (never through a link, a FIFO
/// never blocks), well-formed.
pub fn read_entry_in(tree: &Tree, rel: &Path) -> Result<Entry> {
    let p = rel.join(ENTRY_FILE);
    let bytes =
        read_nofollow(tree, &p, MAX_ENTRY_BYTES)?.with_context(|| format!("{} is missing", tree.join(&p).display()))?;
    let e: Entry = serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", tree.join(&p).display()))?;
    e.validate().map_err(|why| anyhow::anyhow!("{}: {why}", tree.join(&p).display()))?;
    Ok(e)
}

/// Write entry.json into the staging folder `tree`.
pub fn write_entry_in(tree: &Tree, e: &Entry) -> Result<()> {
    tree.write(ENTRY_FILE, &serde_json::to_vec_pretty(e)?)
}

/// [`write_entry_in`] for a staging folder named by its path (the builder's).
pub fn write_entry(dir: &Path, e: &Entry) -> Result<()> {
    write_entry_in(&Tree::open(dir, "cache staging folder")?, e)
}

/// The bytes of `rel` of `tree`, a regular file of at most `cap` bytes opened
/// without following a final link (never blocking); `None` when nothing is there.
pub fn read_nofollow(tree: &Tree, rel: &Path, cap: u64) -> Result<Option<Vec<u8>>> {
    match tree.kind(rel)? {
        Kind::Missing => return Ok(None),
        Kind::File { len } if len <= cap => {}
        _ => bail!("{} is not a regular file of at most {cap} bytes", tree.join(rel).display()),
    }
    let (f, _) = tree.open_file_nofollow(rel, cap)?;
    let mut buf = Vec::new();
    f.take(cap + 1).read_to_end(&mut buf).with_context(|| format!("reading {}", tree.join(rel).display()))?;
    if buf.len() as u64 > cap {
        bail!("{} grew past {cap} bytes while being read", tree.join(rel).display());
    }
    Ok(Some(buf))
}

/// A folder under `<cache>/tmp/` for assembling an entry (same filesystem as
/// the entries, so publishing is a rename). Its sibling `<name>.lock` is locked
/// for as long as this value lives: a cleaner on any node removes only folders
/// whose lock it can take, so a live build on another host is never touched.
/// Dropping it removes the folder (links inside removed, never followed) and
/// the lock file.
pub struct Staging {
    tmp: Tree,
    name: String,
    tree: Tree,
    _lock: File,
}

impl Staging {
    /// Its path (for child processes and messages).
    pub fn path(&self) -> &Path {
        self.tree.path()
    }
    /// The folder as a tree (what this process writes into it).
    pub fn tree(&self) -> &Tree {
        &self.tree
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = self.tmp.remove_all(&self.name);
        let _ = self.tmp.remove_file(format!("{}.lock", self.name));
    }
}

/// The per-key build lock: one builder per key; released when dropped.
pub struct KeyLock(#[allow(dead_code)] File);

/// A verified local hit: the entry folder and its entry.
#[derive(Debug, Clone)]
pub struct Hit {
    pub dir: PathBuf,
    pub entry: Entry,
}

/// An entry that could not be listed, and why.
#[derive(Debug, Clone, Serialize)]
pub struct BadEntry {
    /// The folder of the cache it lies in: `wheels`, `trees/entries`, `images` (or
    /// `trees` / `images` itself, with an empty name, when that is not a folder).
    pub store: String,
    /// Its name in that folder (cut and escaped).
    pub name: String,
    pub problem: String,
}

impl BadEntry {
    pub fn new(store: &str, name: &str, problem: impl Into<String>) -> BadEntry {
        BadEntry { store: store.into(), name: excerpt(name), problem: problem.into() }
    }
    /// Where it is, relative to the cache folder.
    pub fn place(&self) -> String {
        if self.name.is_empty() {
            self.store.clone()
        } else {
            format!("{}/{}", self.store, self.name)
        }
    }
}

/// A registry toolchain under `<cache>/toolchains/<key>/` (read from its
/// `toolchain.json` without depending on the code that made it).
#[derive(Debug, Clone, Serialize)]
pub struct Toolchain {
    pub key: String,
    pub torch: Option<String>,
    pub cuda: Option<String>,
    pub packages: usize,
    /// Bytes on disk (every regular file under the folder).
    pub size: u64,
    pub created_secs: i64,
    #[serde(skip)]
    pub dir: PathBuf,
}

/// The cache folder (uv's `Cache`): its path, and once opened the folder as a
/// [`Tree`] every read, write, lock and removal goes through (a link planted
/// in the cache never sends one outside). Nothing is created until something
/// is written ([`Cache::tree`]); reads of a cache that is not there find nothing.
#[derive(Debug)]
pub struct Cache {
    root: PathBuf,
    tree: OnceLock<Tree>,
}

impl Clone for Cache {
    fn clone(&self) -> Cache {
        Cache::at(self.root.clone())
    }
}

/// The names the cache gives its parts.
const WHEELS: &str = "wheels";
const TOOLCHAINS: &str = "toolchains";
const LOCKS: &str = "locks";
const TMP: &str = "tmp";

impl Cache {
    /// The cache at `root` (nothing is opened or created until it is used).
    pub fn at(root: impl Into<PathBuf>) -> Cache {
        Cache { root: root.into(), tree: OnceLock::new() }
    }

    /// The cache folder the caller opened.
    pub fn open(tree: Tree) -> Cache {
        let root = tree.path().to_path_buf();
        Cache { root, tree: OnceLock::from(tree) }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The cache folder as a tree, made (with its parents) when absent.
    pub fn tree(&self) -> Result<&Tree> {
        if let Some(t) = self.tree.get() {
            return Ok(t);
        }
        let t = Tree::create(&self.root, "cache")?;
        Ok(self.tree.get_or_init(|| t))
    }

    /// The cache folder as a tree when it exists (a read never makes it).
    pub fn existing(&self) -> Result<Option<&Tree>> {
        if let Some(t) = self.tree.get() {
            return Ok(Some(t));
        }
        Ok(Tree::open_if_exists(&self.root, "cache")?.map(|t| self.tree.get_or_init(|| t)))
    }

    pub fn wheels_dir(&self) -> PathBuf {
        self.root.join(WHEELS)
    }
    pub fn toolchains_dir(&self) -> PathBuf {
        self.root.join(TOOLCHAINS)
    }
    pub fn entry_dir(&self, key: &Key) -> PathBuf {
        self.root.join(entry_rel(key))
    }

    /// Whether an entry is published for `key` (not verified).
    pub fn has(&self, key: &Key) -> bool {
        self.existing().ok().flatten().is_some_and(|t| t.kind(entry_rel(key).join(ENTRY_FILE)).is_ok_and(Kind::is_file))
    }

    /// The verified entry for `key`: entry.json valid and for this key, and
    /// the wheel's sha256 and size as recorded. A damaged entry is removed
    /// (under the key's lock when it is free) and reported as a miss. A link
    /// in place of the entry's folder is refused (exit 2): the cache holds none.
    pub fn lookup(&self, key: &Key) -> Result<Option<Hit>> {
        let Some(tree) = self.existing()? else { return Ok(None) };
        let rel = entry_rel(key);
        match tree.kind(&rel)? {
            Kind::Missing => return Ok(None),
            Kind::Link => return Err(planted(tree, &rel)),
            Kind::Dir if tree.kind(rel.join(ENTRY_FILE))? == Kind::Missing => return Ok(None),
            _ => {}
        }
        let ok = read_entry_in(tree, &rel).ok().filter(|e| {
            e.key == key.as_str() && wheel_digest(tree, &rel.join(&e.wheel)) == Some((e.sha256.clone(), e.size))
        });
        match ok {
            Some(entry) => Ok(Some(Hit { dir: tree.join(&rel), entry })),
            None => {
                self.remove_rel(&rel)?;
                Ok(None)
            }
        }
    }

    /// The key's build lock (waits for another builder of the same key).
    pub fn lock(&self, key: &Key) -> Result<KeyLock> {
        Ok(KeyLock(lock::exclusive_in(self.tree()?, Path::new(LOCKS).join(format!("{key}.lock")))?))
    }

    /// The cache's `tmp/` folder as a tree, made when absent.
    fn tmp(&self) -> Result<Tree> {
        make_sub(self.tree()?, TMP, "cache staging folder")
    }

    /// A fresh, locked staging folder under `<cache>/tmp/`.
    pub fn stage(&self) -> Result<Staging> {
        let tmp = self.tmp()?;
        for _ in 0..16 {
            let mut rnd = [0u8; 8];
            getrandom::getrandom(&mut rnd).map_err(|e| anyhow::anyhow!("no randomness for a temp name: {e}"))?;
            let name = format!("build-{}", hex::encode(rnd));
            if let Some(s) = Self::take(&tmp, &name)? {
                return Ok(s);
            }
        }
        bail!("could not create a staging folder under {}", tmp.path().display())
    }

    /// `name` in `tmp` as a new staging folder: its lock file made and locked
    /// (still the file at that name), then the folder made; `None` when the
    /// name is taken (a lock held, or a folder there).
    fn take(tmp: &Tree, name: &str) -> Result<Option<Staging>> {
        let lock_rel = format!("{name}.lock");
        let Some(f) = lock::try_exclusive_in(tmp, &lock_rel)? else { return Ok(None) };
        if !lock::still_in(&f, tmp, &lock_rel) || !tmp.make_dir(name)? {
            return Ok(None); // a cleaner took it between create and lock, or a leftover is there
        }
        let tree = tmp.sub(name, "cache staging folder")?;
        let tmp = tmp.try_clone()?;
        Ok(Some(Staging { tmp, name: name.to_string(), tree, _lock: f }))
    }

    /// The staging folder a build plan names (`<cache>/tmp/<name>`), created
    /// empty and locked like [`Cache::stage`]; fails if it exists.
    pub fn stage_at(&self, dir: &Path) -> Result<Staging> {
        let base = std::path::absolute(self.root.join(TMP))?;
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| {
                dir.parent().and_then(|p| std::path::absolute(p).ok()).as_deref() == Some(base.as_path())
                    && !n.ends_with(".lock")
            })
            .with_context(|| format!("the build folder {} is not a folder of {}", dir.display(), base.display()))?;
        let tmp = self.tmp()?;
        Self::take(&tmp, name)?
            .with_context(|| format!("the build folder {} is taken by another process", dir.display()))
    }

    /// Publish a staged folder (wheel + entry.json) as `<cache>/wheels/<key>`
    /// by rename, and return what is published there now: ours, or, when
    /// another process published the key meanwhile, theirs (verified), so the
    /// caller never reports our sha256 for their bytes. `staged` is a folder
    /// below `<cache>/tmp/` (a [`Staging`]'s, or one inside it).
    pub fn publish(&self, staged: &Path, key: &Key) -> Result<Hit> {
        let base = std::path::absolute(self.root.join(TMP))?;
        let rel = std::path::absolute(staged)?
            .strip_prefix(&base)
            .map(Path::to_path_buf)
            .map_err(|_| anyhow::anyhow!("{} is not a staging folder of {}", staged.display(), base.display()))?;
        self.publish_rel(&rel, key)
    }

    /// [`Cache::publish`] of the folder `rel` of `staging`.
    pub fn publish_staged(&self, staging: &Staging, rel: &str, key: &Key) -> Result<Hit> {
        self.publish_rel(&Path::new(&staging.name).join(rel), key)
    }

    /// Publish `<cache>/tmp/<rel>` as the key's entry.
    fn publish_rel(&self, rel: &Path, key: &Key) -> Result<Hit> {
        let tree = self.tree()?;
        let dest = entry_rel(key);
        make_dir(tree, WHEELS)?;
        if tree.kind(&dest)? == Kind::Link {
            return Err(planted(tree, &dest));
        }
        match tree.rename(Path::new(TMP).join(rel), &dest) {
            Ok(()) => return Ok(Hit { entry: read_entry_in(tree, &dest)?, dir: tree.join(&dest) }),
            Err(_) if tree.kind(dest.join(ENTRY_FILE))? != Kind::Missing => {}
            Err(e) => {
                return Err(e.context(format!(
                    "publishing {} as {}",
                    tree.join(TMP).join(rel).display(),
                    tree.join(&dest).display()
                )))
            }
        }
        self.lookup(key)?.ok_or_else(|| {
            anyhow::anyhow!(
                "{} appeared while publishing and does not verify; run the build again",
                tree.join(&dest).display()
            )
        })
    }

    /// Remove the entry of `key`, if any (see [`Cache::remove_rel`]).
    pub fn remove_key(&self, key: &Key) -> Result<()> {
        self.remove_rel(&entry_rel(key))
    }

    /// Remove `rel` of the cache atomically: renamed into a staging folder
    /// (a link is moved itself, never followed), then deleted with it.
    fn remove_rel(&self, rel: &Path) -> Result<()> {
        let tree = self.tree()?;
        if tree.kind(rel)? == Kind::Missing {
            return Ok(());
        }
        let gone = self.stage()?;
        tree.rename_to(rel, gone.tree(), "gone").with_context(|| format!("removing {}", tree.join(rel).display()))
    }

    /// Remove staging folders nobody holds (killed builds, on any host): a
    /// folder goes only when its `<name>.lock` can be taken without waiting.
    pub fn clean_stale(&self) -> Result<Vec<PathBuf>> {
        let mut removed = Vec::new();
        let Some(tree) = self.existing()? else { return Ok(removed) };
        if tree.kind(TMP)? != Kind::Dir {
            return Ok(removed);
        }
        let tmp = tree.sub(TMP, "cache staging folder")?;
        let names = tmp.names(".")?;
        for name in names.iter().filter(|n| !n.ends_with(".lock")) {
            let lock_rel = format!("{name}.lock");
            let Some(f) = lock::try_exclusive_in(&tmp, &lock_rel)? else { continue };
            if !lock::still_in(&f, &tmp, &lock_rel) {
                continue;
            }
            tmp.remove_all(name).with_context(|| format!("removing stale {}", tmp.join(name).display()))?;
            let _ = tmp.remove_file(&lock_rel);
            removed.push(tmp.join(name));
        }
        // Lock files whose folder is gone (a kill between the two removals).
        for name in names.iter().filter_map(|n| n.strip_suffix(".lock")) {
            let lock_rel = format!("{name}.lock");
            if tmp.exists(name) {
                continue;
            }
            if let Some(f) = lock::try_exclusive_in(&tmp, &lock_rel)? {
                if lock::still_in(&f, &tmp, &lock_rel) {
                    let _ = tmp.remove_file(&lock_rel);
                }
            }
        }
        Ok(removed)
    }

    /// Every readable entry (unverified), newest first, and the names in
    /// `wheels/` that are not entries (a link among them is reported, never followed).
    pub fn entries(&self) -> (Vec<Hit>, Vec<BadEntry>) {
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        let tree = match self.existing() {
            Ok(Some(t)) => t,
            Ok(None) => return (good, bad),
            Err(e) => {
                bad.push(BadEntry::new(WHEELS, "", format!("not read: {e:#}")));
                return (good, bad);
            }
        };
        match tree.kind(WHEELS) {
            Ok(Kind::Dir) => {}
            Ok(Kind::Missing) => return (good, bad),
            Ok(k) => {
                bad.push(BadEntry::new(WHEELS, "", format!("not read: {} (a link is never followed)", k.noun())));
                return (good, bad);
            }
            Err(e) => {
                bad.push(BadEntry::new(WHEELS, "", format!("not read: {e:#}")));
                return (good, bad);
            }
        }
        let listing = tree.list(WHEELS, forge_os::fs::MAX_NAMES).map(|l| l.entries).unwrap_or_default();
        for e in listing {
            let name = e.name.to_string_lossy().into_owned();
            let rel = Path::new(WHEELS).join(&e.name);
            let checked = Key::parse(&name).map_err(anyhow::Error::msg).and_then(|k| {
                if e.kind != Kind::Dir {
                    bail!("{} (the cache holds no links; never followed)", e.kind.noun());
                }
                let en = read_entry_in(tree, &rel)?;
                if en.key != k.as_str() {
                    bail!("entry.json names key {}", excerpt(&en.key));
                }
                Ok(en)
            });
            match checked {
                Ok(entry) => good.push(Hit { dir: tree.join(&rel), entry }),
                Err(why) => bad.push(BadEntry::new(WHEELS, &name, format!("{why:#}"))),
            }
        }
        good.sort_by(|a, b| b.entry.created_secs.cmp(&a.entry.created_secs).then(a.entry.key.cmp(&b.entry.key)));
        bad.sort_by(|a, b| a.name.cmp(&b.name));
        (good, bad)
    }

    /// The registry toolchains, newest first (a folder without a readable
    /// `toolchain.json` is an unfinished or foreign one and is skipped; a
    /// link is never followed).
    pub fn toolchains(&self) -> Vec<Toolchain> {
        let mut out = Vec::new();
        let Ok(Some(tree)) = self.existing() else { return out };
        if tree.kind(TOOLCHAINS).ok() != Some(Kind::Dir) {
            return out;
        }
        for name in tree.names(TOOLCHAINS).unwrap_or_default() {
            let valid = name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
            let rel = Path::new(TOOLCHAINS).join(&name);
            if !valid || tree.kind(&rel).ok() != Some(Kind::Dir) {
                continue;
            }
            let ident = rel.join("toolchain.json");
            let Some(stat) = tree.stat(&ident).ok().filter(|s| matches!(s.kind, Kind::File { len } if len < 1 << 20))
            else {
                continue;
            };
            let doc: serde_json::Value = read_nofollow(tree, &ident, forge_os::input::cap::TEXT)
                .ok()
                .flatten()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            let packages = doc["packages"].as_object();
            out.push(Toolchain {
                key: name,
                torch: packages.and_then(|p| p.get("torch")).and_then(|v| v.as_str()).map(String::from),
                cuda: doc["cuda"].as_str().map(String::from),
                packages: packages.map(|p| p.len()).unwrap_or(0),
                size: disk_size_in(tree, &rel),
                created_secs: stat.mtime,
                dir: tree.join(&rel),
            });
        }
        out.sort_by(|a, b| b.created_secs.cmp(&a.created_secs).then(a.key.cmp(&b.key)));
        out
    }

    /// Mark the toolchain `key` in use for the rest of this process (a shared
    /// lock on `<cache>/locks/toolchain-<key>.use`): `cache gc` skips it.
    /// Take it before reading the toolchain, so gc cannot remove it in between.
    pub fn use_toolchain(&self, key: &str) -> Result<()> {
        static HELD: std::sync::Mutex<Vec<File>> = std::sync::Mutex::new(Vec::new());
        let f = lock::shared_in(self.tree()?, Path::new(LOCKS).join(format!("toolchain-{key}.use")))?;
        HELD.lock().unwrap_or_else(|p| p.into_inner()).push(f);
        Ok(())
    }

    /// Remove a toolchain unless a process uses it (its in-use lock is taken
    /// without waiting). `Ok(false)`: in use, kept.
    pub fn remove_toolchain(&self, t: &Toolchain) -> Result<bool> {
        let tree = self.tree()?;
        let locks = Path::new(LOCKS);
        let Some(_use) = lock::try_exclusive_in(tree, locks.join(format!("toolchain-{}.use", t.key)))? else {
            return Ok(false);
        };
        let Some(_make) = lock::try_exclusive_in(tree, locks.join(format!("toolchain-{}.lock", t.key)))? else {
            return Ok(false);
        };
        self.remove_rel(&Path::new(TOOLCHAINS).join(&t.key))?;
        Ok(true)
    }
}

/// The folder `rel` of `tree` and the folders above it, each made when absent;
/// a link or a file on the way is refused (exit 2, naming it): the stores
/// hold no links, and a folder is never made through one.
pub fn make_dir(tree: &Tree, rel: impl AsRef<Path>) -> Result<()> {
    let mut at = PathBuf::new();
    for c in rel.as_ref().components() {
        at.push(c);
        match tree.kind(&at)? {
            Kind::Dir => continue,
            Kind::Missing if tree.make_dir(&at)? => continue,
            Kind::Missing if tree.kind(&at)? == Kind::Dir => continue, // made meanwhile by another process
            Kind::Link => return Err(planted(tree, &at)),
            k => {
                return Err(Failure::usage(format!("{} is {}, not a folder", tree.join(&at).display(), k.noun()))
                    .hint(format!("remove it, or choose another folder than {}", tree.path().display()))
                    .into())
            }
        }
    }
    Ok(())
}

/// The folder `rel` of `tree` as a tree of its own, made when absent (see [`make_dir`]).
pub fn make_sub(tree: &Tree, rel: impl AsRef<Path>, what: &'static str) -> Result<Tree> {
    make_dir(tree, rel.as_ref())?;
    tree.sub(rel, what)
}

/// `wheels/<key>`, relative to the cache.
fn entry_rel(key: &Key) -> PathBuf {
    Path::new(WHEELS).join(key.as_str())
}

/// The sha256 and size of the regular file `rel` (never through a final link).
fn wheel_digest(tree: &Tree, rel: &Path) -> Option<(String, u64)> {
    let (f, _) = tree.open_file_nofollow(rel, forge_os::input::cap::WHEEL).ok()?;
    let (d, n) = forge_os::input::sha256_reader(f, forge_os::input::cap::WHEEL).ok()?;
    Some((hex::encode(d), n))
}

/// A link where the cache keeps a folder of its own: refused (exit 2), naming it.
fn planted(tree: &Tree, rel: &Path) -> anyhow::Error {
    Failure::usage(format!(
        "{} is a symbolic link: the cache holds none, and never reads or writes through one: refused",
        tree.join(rel).display()
    ))
    .hint(format!(
        "remove the link (the cache rebuilds what it held), or pass another --cache-dir than {}",
        tree.path().display()
    ))
    .into()
}

/// Bytes of every regular file under `rel` of `tree` (links not followed,
/// `rel` itself included: a link in its place counts 0; a regular file counts its size).
pub fn disk_size_in(tree: &Tree, rel: &Path) -> u64 {
    match tree.kind(rel) {
        Ok(Kind::Dir) => {}
        Ok(Kind::File { len }) => return len,
        _ => return 0,
    }
    tree.walk(rel, forge_os::fs::Walk::default())
        .unwrap_or_default()
        .iter()
        .filter_map(|w| match w.kind {
            Kind::File { len } => Some(len),
            _ => None,
        })
        .fold(0u64, u64::saturating_add)
}

pub fn human_size(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_64_lowercase_hex() {
        assert!(Key::parse(&"a".repeat(64)).is_ok());
        for bad in ["", "abc", &"A".repeat(64), &"a".repeat(65), &"é".repeat(32), "../../etc/passwd"] {
            assert!(Key::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wheel_names_are_one_safe_component() {
        assert!(check_wheel_name("deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl").is_ok());
        for bad in [
            "../../x.whl",
            "a/b-1-py3-none-any.whl",
            ".hidden-1-py3-none-any.whl",
            "x.whl",
            "deep_ep-1..2-py3-none-any.whl",
            "deep_ep-1-py3-none-any.whl\0",
            "",
        ] {
            assert!(check_wheel_name(bad).is_err(), "{bad}");
        }
    }

    /// A link planted for an entry's folder: the lookup refuses it (exit 2,
    /// naming it) and never reads, hashes or removes what it points to; a
    /// listing reports it; publishing over it is refused too.
    #[test]
    fn a_link_in_place_of_an_entry_is_refused_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let key = Key::parse(&"a".repeat(64)).unwrap();
        let victim = d.path().join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::create_dir_all(d.path().join("cache/wheels")).unwrap();
        std::fs::write(victim.join("entry.json"), b"{}").unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("cache/wheels").join(key.as_str())).unwrap();
        let c = Cache::at(d.path().join("cache"));
        let e = c.lookup(&key).unwrap_err();
        assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Usage, "{e:#}");
        assert!(format!("{e:#}").contains(&format!("wheels/{key} is a symbolic link")), "{e:#}");
        assert!(!c.has(&key));
        let (good, bad) = c.entries();
        assert!(good.is_empty() && bad[0].problem.contains("symbolic link"), "{bad:?}");
        let stage = c.stage().unwrap();
        stage.tree().make_dir("entry").unwrap();
        assert!(c.publish_staged(&stage, "entry", &key).is_err());
        assert_eq!(std::fs::read(victim.join("entry.json")).unwrap(), b"{}");
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);
    }

    #[test]
    fn a_killed_stage_is_cleaned_a_live_one_kept() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::at(d.path());
        let live = c.stage().unwrap();
        std::fs::create_dir_all(d.path().join("tmp/build-deadbeef/src")).unwrap();
        let removed = c.clean_stale().unwrap();
        assert_eq!(removed, vec![d.path().join("tmp/build-deadbeef")]);
        assert!(live.path().is_dir());
        let p = live.path().to_path_buf();
        drop(live);
        assert!(!p.exists());
        assert_eq!(std::fs::read_dir(d.path().join("tmp")).unwrap().count(), 0);
    }
}
