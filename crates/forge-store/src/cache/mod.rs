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
pub mod dirfd;
pub mod lock;
pub mod remote;
pub mod sign;
pub mod tree;

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use forge_os::error::Failure;

pub use cmd::{gc, keygen, ls, push, GcRequest, KeygenRequest, LsRequest, PushRequest, RemoteRequest};

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

/// Read and validate an entry's metadata (no hashing); refuses a file over
/// [`MAX_ENTRY_BYTES`] or one that is not a regular file.
pub fn read_entry(dir: &Path) -> Result<Entry> {
    let p = dir.join(ENTRY_FILE);
    let meta = std::fs::symlink_metadata(&p).with_context(|| format!("reading {}", p.display()))?;
    if !meta.is_file() || meta.len() > MAX_ENTRY_BYTES {
        anyhow::bail!("{} is not a regular file of at most {MAX_ENTRY_BYTES} bytes", p.display());
    }
    // Read through `input` (checked again on the opened file: a FIFO swapped in never blocks).
    let e: Entry = serde_json::from_slice(&forge_os::fs::named::read_bytes(&p, "cache entry", MAX_ENTRY_BYTES)?)
        .with_context(|| format!("parsing {}", p.display()))?;
    e.validate().map_err(|why| anyhow::anyhow!("{}: {why}", p.display()))?;
    Ok(e)
}

/// Write entry.json into a staging folder.
pub fn write_entry(dir: &Path, e: &Entry) -> Result<()> {
    std::fs::write(dir.join(ENTRY_FILE), serde_json::to_vec_pretty(e)?)?;
    Ok(())
}

/// A folder under `<cache>/tmp/` for assembling an entry (same filesystem as
/// the entries, so publishing is a rename). Its sibling `<name>.lock` is locked
/// for as long as this value lives: a cleaner on any node removes only folders
/// whose lock it can take, so a live build on another host is never touched.
/// Dropping it removes the folder and the lock file.
pub struct Staging {
    dir: PathBuf,
    lock_path: PathBuf,
    _lock: File,
}

impl Staging {
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.lock_path);
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

/// The cache folder.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// The cache at `root` (nothing is created until something is written).
    pub fn at(root: impl Into<PathBuf>) -> Cache {
        Cache { root: root.into() }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn wheels_dir(&self) -> PathBuf {
        self.root.join("wheels")
    }
    pub fn toolchains_dir(&self) -> PathBuf {
        self.root.join("toolchains")
    }
    fn tmp_root(&self) -> PathBuf {
        self.root.join("tmp")
    }
    pub fn entry_dir(&self, key: &Key) -> PathBuf {
        self.wheels_dir().join(key.as_str())
    }
    /// Whether an entry is published for `key` (not verified).
    pub fn has(&self, key: &Key) -> bool {
        self.entry_dir(key).join(ENTRY_FILE).is_file()
    }

    /// The verified entry for `key`: entry.json valid and for this key, and
    /// the wheel's sha256 and size as recorded. A damaged entry is removed
    /// (under the key's lock when it is free) and reported as a miss.
    pub fn lookup(&self, key: &Key) -> Result<Option<Hit>> {
        let dir = self.entry_dir(key);
        if std::fs::symlink_metadata(dir.join(ENTRY_FILE)).is_err() {
            return Ok(None);
        }
        let ok = read_entry(&dir).ok().filter(|e| {
            e.key == key.as_str()
                && std::fs::symlink_metadata(dir.join(&e.wheel)).is_ok_and(|m| m.is_file())
                && forge_os::fs::named::sha256_file(&dir.join(&e.wheel), "wheel", forge_os::input::cap::WHEEL).ok()
                    == Some((e.sha256.clone(), e.size))
        });
        match ok {
            Some(entry) => Ok(Some(Hit { dir, entry })),
            None => {
                self.remove_entry(&dir)?;
                Ok(None)
            }
        }
    }

    /// The key's build lock (waits for another builder of the same key).
    pub fn lock(&self, key: &Key) -> Result<KeyLock> {
        Ok(KeyLock(lock::exclusive(&self.lock_path(key))?))
    }
    fn lock_path(&self, key: &Key) -> PathBuf {
        self.root.join("locks").join(format!("{key}.lock"))
    }

    /// A fresh, locked staging folder under `<cache>/tmp/`.
    pub fn stage(&self) -> Result<Staging> {
        let base = self.tmp_root();
        std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        for _ in 0..16 {
            let mut rnd = [0u8; 8];
            getrandom::getrandom(&mut rnd).map_err(|e| anyhow::anyhow!("no randomness for a temp name: {e}"))?;
            let name = format!("build-{}", hex::encode(rnd));
            let lock_path = base.join(format!("{name}.lock"));
            let f = match File::options().write(true).create_new(true).open(&lock_path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("creating {}", lock_path.display())),
            };
            if f.try_lock().is_err() || !lock::still_at(&f, &lock_path) {
                continue; // a cleaner took it between create and lock
            }
            let dir = base.join(&name);
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            return Ok(Staging { dir, lock_path, _lock: f });
        }
        anyhow::bail!("could not create a staging folder under {}", base.display())
    }

    /// The staging folder a build plan names (`<cache>/tmp/<name>`), created
    /// empty and locked like [`Cache::stage`]; fails if it exists.
    pub fn stage_at(&self, dir: &Path) -> Result<Staging> {
        let base = self.tmp_root();
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| dir.parent() == Some(base.as_path()) && !n.ends_with(".lock"))
            .with_context(|| format!("the build folder {} is not a folder of {}", dir.display(), base.display()))?;
        std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        let lock_path = base.join(format!("{name}.lock"));
        let f = File::options()
            .write(true)
            .create_new(true)
            .open(&lock_path)
            .with_context(|| format!("creating {}", lock_path.display()))?;
        if f.try_lock().is_err() || !lock::still_at(&f, &lock_path) {
            anyhow::bail!("{} is taken by another process", lock_path.display());
        }
        std::fs::create_dir(dir).with_context(|| format!("creating the build folder {}", dir.display()))?;
        Ok(Staging { dir: dir.to_path_buf(), lock_path, _lock: f })
    }

    /// Publish a staged folder (wheel + entry.json) as `<cache>/wheels/<key>`
    /// by rename, and return what is published there now: ours, or, when
    /// another process published the key meanwhile, theirs (verified), so the
    /// caller never reports our sha256 for their bytes.
    pub fn publish(&self, staged: &Path, key: &Key) -> Result<Hit> {
        let dest = self.entry_dir(key);
        std::fs::create_dir_all(self.wheels_dir())?;
        match std::fs::rename(staged, &dest) {
            Ok(()) => return Ok(Hit { entry: read_entry(&dest)?, dir: dest }),
            Err(_) if dest.join(ENTRY_FILE).exists() => {}
            Err(e) => return Err(e).with_context(|| format!("publishing {} as {}", staged.display(), dest.display())),
        }
        self.lookup(key)?.ok_or_else(|| {
            anyhow::anyhow!("{} appeared while publishing and does not verify; run the build again", dest.display())
        })
    }

    /// Remove an entry folder atomically: rename it into a staging folder, then delete.
    pub fn remove_entry(&self, dir: &Path) -> Result<()> {
        let tmp = self.stage()?;
        match std::fs::rename(dir, tmp.path().join("gone")) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing {}", dir.display())),
        }
    }

    /// Remove staging folders nobody holds (killed builds, on any host): a
    /// folder goes only when its `<name>.lock` can be taken without waiting.
    pub fn clean_stale(&self) -> Result<Vec<PathBuf>> {
        let mut removed = Vec::new();
        let Ok(rd) = std::fs::read_dir(self.tmp_root()) else { return Ok(removed) };
        let names: Vec<String> = rd.flatten().filter_map(|e| e.file_name().to_str().map(String::from)).collect();
        for name in names.iter().filter(|n| !n.ends_with(".lock")) {
            let dir = self.tmp_root().join(name);
            let lock_path = self.tmp_root().join(format!("{name}.lock"));
            let Some(f) = lock::try_exclusive(&lock_path)? else { continue };
            if !lock::still_at(&f, &lock_path) {
                continue;
            }
            let gone = match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&dir),
                Ok(_) => std::fs::remove_file(&dir),
                Err(_) => Ok(()),
            };
            gone.with_context(|| format!("removing stale {}", dir.display()))?;
            let _ = std::fs::remove_file(&lock_path);
            removed.push(dir);
        }
        // Lock files whose folder is gone (a kill between the two removals).
        for name in names.iter().filter_map(|n| n.strip_suffix(".lock")) {
            let lock_path = self.tmp_root().join(format!("{name}.lock"));
            if self.tmp_root().join(name).exists() {
                continue;
            }
            if let Some(f) = lock::try_exclusive(&lock_path)? {
                if lock::still_at(&f, &lock_path) {
                    let _ = std::fs::remove_file(&lock_path);
                }
            }
        }
        Ok(removed)
    }

    /// Every readable entry (unverified), newest first, and the folders that are not entries.
    pub fn entries(&self) -> (Vec<Hit>, Vec<BadEntry>) {
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        let Ok(rd) = std::fs::read_dir(self.wheels_dir()) else { return (good, bad) };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let checked = Key::parse(&name).map_err(anyhow::Error::msg).and_then(|k| {
                let en = read_entry(&e.path())?;
                if en.key != k.as_str() {
                    anyhow::bail!("entry.json names key {}", excerpt(&en.key));
                }
                Ok(en)
            });
            match checked {
                Ok(entry) => good.push(Hit { dir: e.path(), entry }),
                Err(why) => bad.push(BadEntry::new("wheels", &name, format!("{why:#}"))),
            }
        }
        good.sort_by(|a, b| b.entry.created_secs.cmp(&a.entry.created_secs).then(a.entry.key.cmp(&b.entry.key)));
        bad.sort_by(|a, b| a.name.cmp(&b.name));
        (good, bad)
    }

    /// The registry toolchains, newest first (a folder without a readable
    /// `toolchain.json` is an unfinished or foreign one and is skipped).
    pub fn toolchains(&self) -> Vec<Toolchain> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(self.toolchains_dir()) else { return out };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let valid = name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
            let ident = e.path().join("toolchain.json");
            let Some(meta) = std::fs::symlink_metadata(&ident).ok().filter(|m| m.is_file() && m.len() < 1 << 20) else {
                continue;
            };
            if !valid {
                continue;
            }
            let doc: serde_json::Value =
                forge_os::fs::named::read_bytes(&ident, "toolchain identity", forge_os::input::cap::TEXT)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or_default();
            let packages = doc["packages"].as_object();
            out.push(Toolchain {
                key: name,
                torch: packages.and_then(|p| p.get("torch")).and_then(|v| v.as_str()).map(String::from),
                cuda: doc["cuda"].as_str().map(String::from),
                packages: packages.map(|p| p.len()).unwrap_or(0),
                size: disk_size(&e.path()),
                created_secs: meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_secs() as i64)
                    .unwrap_or(0),
                dir: e.path(),
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
        let path = self.root.join("locks").join(format!("toolchain-{key}.use"));
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let f = File::options().create(true).truncate(false).write(true).open(&path)?;
        f.lock_shared().with_context(|| format!("locking {}", path.display()))?;
        HELD.lock().unwrap_or_else(|p| p.into_inner()).push(f);
        Ok(())
    }

    /// Remove a toolchain unless a process uses it (its in-use lock is taken
    /// without waiting). `Ok(false)`: in use, kept.
    pub fn remove_toolchain(&self, t: &Toolchain) -> Result<bool> {
        let Some(_use) = lock::try_exclusive(&self.root.join("locks").join(format!("toolchain-{}.use", t.key)))? else {
            return Ok(false);
        };
        let Some(_make) = lock::try_exclusive(&self.root.join("locks").join(format!("toolchain-{}.lock", t.key)))?
        else {
            return Ok(false);
        };
        self.remove_entry(&t.dir)?;
        Ok(true)
    }
}

/// Bytes of every regular file under `dir` (links not followed, `dir` itself
/// included: a link in its place counts 0; a regular file counts its size).
pub fn disk_size(dir: &Path) -> u64 {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(m) if m.is_file() => return m.len(),
        _ => return 0,
    }
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
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
