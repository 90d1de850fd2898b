//! The wheel cache. Local: `<cache>/wheels/<key>/{<wheel>, entry.json}`,
//! content-addressed by the plan's cache key; entries are assembled in
//! `<cache>/tmp/` and published by one rename, so a reader sees a whole entry
//! or none; `<cache>/locks/<key>.lock` makes concurrent builders of one key
//! build once. Remote (`--cache-url`): `GET <url>/<key>/entry.json` then the
//! wheel, verified against the entry's sha256 before use; `cache push` PUTs.
//! Must not build anything.
pub mod remote;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::error::{Exit, Failure};
use crate::output::DataFormat as Format;
use crate::wheel::stamp::sha256_file;

/// Version of entry.json and of `cache ls --format json`.
pub const SCHEMA: u32 = 1;
pub const ENTRY_FILE: &str = "entry.json";

/// `--cache-dir`, shared by every command that uses the cache.
#[derive(Debug, Clone, clap::Args)]
pub struct CacheDirArg {
    /// Cache folder (wheels, git mirrors, build logs). Default: $XDG_CACHE_HOME/deepep-forge
    /// (~/.cache/deepep-forge). A shared filesystem path lets a cluster build each wheel once.
    #[arg(long, env = "DEEPEP_FORGE_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

impl CacheDirArg {
    pub fn resolve(&self) -> Result<PathBuf> {
        if let Some(d) = &self.cache_dir {
            return Ok(d.clone());
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .ok_or_else(|| {
                Failure::env("no cache folder: HOME and XDG_CACHE_HOME are unset").hint("pass --cache-dir DIR")
            })?;
        Ok(base.join("deepep-forge"))
    }
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

pub fn entry_dir(cache: &Path, key: &str) -> PathBuf {
    cache.join("wheels").join(key)
}

/// Read an entry's metadata (no hashing).
pub fn read_entry(dir: &Path) -> Result<Entry> {
    let p = dir.join(ENTRY_FILE);
    serde_json::from_slice(&std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?)
        .with_context(|| format!("parsing {}", p.display()))
}

/// The verified entry for `key`: entry.json readable and the wheel's sha256
/// and size as recorded. A damaged entry is removed (and reported as a miss).
pub fn lookup(cache: &Path, key: &str) -> Result<Option<Entry>> {
    let dir = entry_dir(cache, key);
    if !dir.join(ENTRY_FILE).exists() {
        return Ok(None);
    }
    let ok = read_entry(&dir)
        .ok()
        .filter(|e| e.key == key && sha256_file(&dir.join(&e.wheel)).ok() == Some((e.sha256.clone(), e.size)));
    if ok.is_none() {
        remove_entry(cache, &dir)?;
    }
    Ok(ok)
}

/// Remove an entry atomically: rename it into tmp/, then delete.
fn remove_entry(cache: &Path, dir: &Path) -> Result<()> {
    let tmp = tmp_dir(cache)?;
    let target = tmp.path().join("gone");
    match std::fs::rename(dir, &target) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", dir.display())),
    }
}

/// A fresh folder under `<cache>/tmp/` (same filesystem as the entries, so
/// publishing is a rename), named with our pid so [`clean_stale`] can tell
/// leftovers of dead processes; removed when dropped.
pub fn tmp_dir(cache: &Path) -> Result<tempfile::TempDir> {
    let base = cache.join("tmp");
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    Ok(tempfile::Builder::new().prefix(&format!("build-{}-", std::process::id())).tempdir_in(&base)?)
}

/// Remove tmp folders left by processes that no longer run (killed builds).
pub fn clean_stale(cache: &Path) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let Ok(rd) = std::fs::read_dir(cache.join("tmp")) else { return Ok(removed) };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix("build-").and_then(|r| r.split('-').next()).and_then(|p| p.parse::<i32>().ok());
        // SAFETY: signal 0 only checks whether the process exists.
        let dead = pid.is_none_or(
            |p| unsafe { libc::kill(p, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH),
        );
        if dead {
            std::fs::remove_dir_all(e.path()).with_context(|| format!("removing stale {}", e.path().display()))?;
            removed.push(e.path());
        }
    }
    Ok(removed)
}

/// Publish a staged folder (wheel + entry.json) as `<cache>/wheels/<key>` by
/// rename. If the key appeared meanwhile, the existing entry wins.
pub fn publish(cache: &Path, staged: &Path, key: &str) -> Result<PathBuf> {
    let dest = entry_dir(cache, key);
    std::fs::create_dir_all(dest.parent().expect("wheels dir"))?;
    match std::fs::rename(staged, &dest) {
        Ok(()) => Ok(dest),
        Err(_) if dest.join(ENTRY_FILE).exists() => Ok(dest),
        Err(e) => Err(e).with_context(|| format!("publishing {} as {}", staged.display(), dest.display())),
    }
}

/// Write entry.json into a staging folder.
pub fn write_entry(dir: &Path, e: &Entry) -> Result<()> {
    std::fs::write(dir.join(ENTRY_FILE), serde_json::to_vec_pretty(e)?)?;
    Ok(())
}

/// Every entry in the cache (unverified), newest first.
pub fn entries(cache: &Path) -> Result<Vec<(PathBuf, Entry)>> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(cache.join("wheels")) else { return Ok(out) };
    for e in rd.flatten() {
        if let Ok(en) = read_entry(&e.path()) {
            out.push((e.path(), en));
        }
    }
    out.sort_by(|a, b| b.1.created_secs.cmp(&a.1.created_secs).then(a.1.key.cmp(&b.1.key)));
    Ok(out)
}

#[derive(Debug, clap::Subcommand)]
pub enum CacheCommand {
    /// List cached wheels (key, variant, version, size, age).
    Ls(LsArgs),
    /// Remove old entries and leftovers of killed builds.
    Gc(GcArgs),
    /// Upload local entries to a remote HTTP cache (PUT <url>/<key>/<wheel>, then entry.json).
    Push(PushArgs),
}

#[derive(Debug, clap::Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Output: human text, or one JSON document (schema 1) listing the entries.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Debug, clap::Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Remove entries created more than DAYS days ago.
    #[arg(long, value_name = "DAYS")]
    pub older_than: Option<u64>,
    /// Keep only the N newest entries.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, clap::Args)]
pub struct PushArgs {
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Remote cache base URL (an HTTP server that accepts PUT).
    #[arg(long, env = "DEEPEP_FORGE_CACHE_URL", value_name = "URL")]
    pub cache_url: String,
    /// Keys (or unique key prefixes) to push; default: every local entry.
    #[arg(value_name = "KEY")]
    pub keys: Vec<String>,
}

pub fn run(cmd: CacheCommand) -> Result<Exit> {
    match cmd {
        CacheCommand::Ls(a) => ls(a),
        CacheCommand::Gc(a) => gc(a),
        CacheCommand::Push(a) => push(a),
    }
}

fn ls(a: LsArgs) -> Result<Exit> {
    let cache = a.cache.resolve()?;
    let list = entries(&cache)?;
    if a.format == Format::Json {
        let items: Vec<&Entry> = list.iter().map(|(_, e)| e).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "schema": SCHEMA, "cache_dir": cache, "entries": items })
            )?
        );
        return Ok(Exit::Ok);
    }
    if list.is_empty() {
        println!("{}: no cached wheels", cache.display());
    }
    for (_, e) in &list {
        println!("{}  {:<16} {:<40} {:>10}  {}", &e.key[..16], e.variant, e.wheel, human_size(e.size), e.created);
    }
    Ok(Exit::Ok)
}

fn gc(a: GcArgs) -> Result<Exit> {
    let cache = a.cache.resolve()?;
    let _guard = crate::error::Cooperative::enter();
    let list = entries(&cache)?;
    let now = crate::provenance::now_secs();
    let mut doomed = Vec::new();
    for (i, (dir, e)) in list.iter().enumerate() {
        let too_old = a.older_than.is_some_and(|d| now - e.created_secs > (d * 86_400) as i64);
        let beyond = a.keep.is_some_and(|k| i >= k);
        if too_old || beyond {
            doomed.push((dir, e));
        }
    }
    for (dir, e) in &doomed {
        println!(
            "{} {} ({}, {})",
            if a.dry_run { "would remove" } else { "removed" },
            &e.key[..16],
            e.variant,
            e.wheel
        );
        if !a.dry_run {
            let _lock = crate::build::source::lock(&lock_path(&cache, &e.key))?;
            remove_entry(&cache, dir)?;
        }
    }
    if !a.dry_run {
        for p in clean_stale(&cache)? {
            println!("removed leftover {}", p.display());
        }
    }
    println!("{} entr{} kept", list.len() - doomed.len(), if list.len() - doomed.len() == 1 { "y" } else { "ies" });
    Ok(Exit::Ok)
}

fn push(a: PushArgs) -> Result<Exit> {
    let cache = a.cache.resolve()?;
    let list = entries(&cache)?;
    let chosen: Vec<&(PathBuf, Entry)> = if a.keys.is_empty() {
        list.iter().collect()
    } else {
        let mut v = Vec::new();
        for k in &a.keys {
            let m: Vec<_> = list.iter().filter(|(_, e)| e.key.starts_with(k.as_str())).collect();
            match m.len() {
                1 => v.push(m[0]),
                0 => crate::bail_usage!("no cache entry with key {k} in {}", cache.display()),
                _ => crate::bail_usage!("key prefix {k} matches {} entries; give more characters", m.len()),
            }
        }
        v
    };
    let client = remote::Remote::new(&a.cache_url)?;
    for (dir, e) in chosen {
        let verified =
            lookup(&cache, &e.key)?.with_context(|| format!("entry {} failed verification and was removed", e.key))?;
        client.put(dir, &verified)?;
        println!("pushed {} {} -> {}", &e.key[..16], e.wheel, client.url_of(&e.key, &e.wheel));
    }
    Ok(Exit::Ok)
}

/// The per-key build lock file.
pub fn lock_path(cache: &Path, key: &str) -> PathBuf {
    cache.join("locks").join(format!("{key}.lock"))
}

pub fn human_size(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}
