//! `deepep-forge cache ls|gc|push|keygen`: arguments and printing over [`Cache`].
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use super::remote::{NetArgs, Remote};
use super::sign::SecretKey;
use super::{human_size, BadEntry, Cache, CacheDirArg, Entry, Hit, Key, Toolchain, SCHEMA};
use crate::error::{Exit, Failure};
use crate::output::DataFormat as Format;

/// The environment variable naming the signing key file for `cache push`.
pub const SIGNING_KEY_ENV: &str = "DEEPEP_FORGE_SIGNING_KEY_FILE";
/// The most days `--older-than` takes (about 100 years).
pub const MAX_DAYS: u64 = 36_500;

#[derive(Debug, clap::Subcommand)]
pub enum CacheCommand {
    /// List cached wheels and registry toolchains (key, what, size, age) and the space they use.
    Ls(LsArgs),
    /// Remove old wheels and toolchains, and leftovers of killed builds.
    Gc(GcArgs),
    /// Sign local entries and upload them to a remote HTTP cache (PUT <url>/<key>/<wheel>, then entry.json).
    Push(PushArgs),
    /// Make an ed25519 signing key for `cache push`; prints the public key readers trust.
    Keygen(KeygenArgs),
}

#[derive(Debug, clap::Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Output: human text, or one JSON document (schema 1: wheels, toolchains, bad entries, totals).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Debug, clap::Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Remove wheels and toolchains created more than DAYS days ago (0 to 36500).
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u64).range(0..=MAX_DAYS))]
    pub older_than: Option<u64>,
    /// Keep only the N newest wheels.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Keep only the N newest registry toolchains (each is several GB). A toolchain a running
    /// build uses is never removed.
    #[arg(long, value_name = "N")]
    pub keep_toolchains: Option<usize>,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, clap::Args)]
pub struct PushArgs {
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Remote cache base URL (an https:// server that accepts PUT).
    #[arg(long, env = "DEEPEP_FORGE_CACHE_URL", hide_env_values = true, value_name = "URL")]
    pub cache_url: String,
    /// The secret key that signs each entry (made by `cache keygen`; mode 0600). Its content is never printed.
    #[arg(long, env = SIGNING_KEY_ENV, value_name = "FILE")]
    pub signing_key: Option<PathBuf>,
    #[command(flatten)]
    pub net: NetArgs,
    /// Keys (or unique key prefixes) to push; default: every local entry.
    #[arg(value_name = "KEY")]
    pub keys: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// The key's name, carried by every signature (e.g. cache.example.org-1: a host and a number to rotate).
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Where to write the secret key (a new file, mode 0600; never overwritten).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(cmd: CacheCommand) -> Result<Exit> {
    match cmd {
        CacheCommand::Ls(a) => ls(a),
        CacheCommand::Gc(a) => gc(a),
        CacheCommand::Push(a) => push(a),
        CacheCommand::Keygen(a) => keygen(a),
    }
}

#[derive(Serialize)]
struct Listing<'a> {
    schema: u32,
    cache_dir: &'a std::path::Path,
    entries: Vec<&'a Entry>,
    toolchains: &'a [Toolchain],
    bad_entries: &'a [BadEntry],
    wheels_bytes: u64,
    toolchains_bytes: u64,
}

fn age(now: i64, then: i64) -> String {
    let s = now.saturating_sub(then).max(0);
    match s {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3600 => format!("{}h", s / 3600),
        s => format!("{}m", s / 60),
    }
}

fn ls(a: LsArgs) -> Result<Exit> {
    let cache = Cache::at(a.cache.resolve()?);
    let (entries, bad) = cache.entries();
    let toolchains = cache.toolchains();
    let wheels_bytes = entries.iter().map(|h| h.entry.size).fold(0u64, u64::saturating_add);
    let toolchains_bytes = toolchains.iter().map(|t| t.size).fold(0u64, u64::saturating_add);
    if a.format == Format::Json {
        let doc = Listing {
            schema: SCHEMA,
            cache_dir: cache.root(),
            entries: entries.iter().map(|h| &h.entry).collect(),
            toolchains: &toolchains,
            bad_entries: &bad,
            wheels_bytes,
            toolchains_bytes,
        };
        crate::printer::json(&doc)?;
        return Ok(Exit::Ok);
    }
    let now = crate::provenance::now_secs();
    crate::outln!("cache {}", cache.root().display());
    crate::outln!();
    crate::outln!("WHEELS ({})", entries.len());
    if !entries.is_empty() {
        crate::outln!("{:<16}  {:<16}  {:>10}  {:>5}  WHEEL", "KEY", "VARIANT", "SIZE", "AGE");
    }
    for h in &entries {
        let e = &h.entry;
        crate::outln!(
            "{:<16}  {:<16}  {:>10}  {:>5}  {}",
            &e.key[..16],
            e.variant,
            human_size(e.size),
            age(now, e.created_secs),
            e.wheel
        );
    }
    crate::outln!();
    crate::outln!("TOOLCHAINS ({})", toolchains.len());
    if !toolchains.is_empty() {
        crate::outln!("{:<16}  {:<24}  {:<6}  {:>8}  {:>10}  {:>5}", "KEY", "TORCH", "CUDA", "PACKAGES", "SIZE", "AGE");
    }
    for t in &toolchains {
        crate::outln!(
            "{:<16}  {:<24}  {:<6}  {:>8}  {:>10}  {:>5}",
            t.key,
            t.torch.as_deref().unwrap_or("-"),
            t.cuda.as_deref().unwrap_or("-"),
            t.packages,
            human_size(t.size),
            age(now, t.created_secs)
        );
    }
    for b in &bad {
        crate::outln!("not an entry: wheels/{}: {}", b.name, b.problem);
    }
    crate::outln!();
    crate::outln!(
        "total {} (wheels {}, toolchains {})",
        human_size(wheels_bytes.saturating_add(toolchains_bytes)),
        human_size(wheels_bytes),
        human_size(toolchains_bytes)
    );
    Ok(Exit::Ok)
}

/// Created more than `days` days before `now` (never wraps: a cutoff before
/// the epoch selects nothing older than it).
fn older_than(now: i64, created: i64, days: u64) -> bool {
    let Some(cutoff) = days.checked_mul(86_400).and_then(|s| i64::try_from(s).ok()).and_then(|s| now.checked_sub(s))
    else {
        return false;
    };
    created < cutoff
}

fn gc(a: GcArgs) -> Result<Exit> {
    let cache = Cache::at(a.cache.resolve()?);
    let _guard = crate::error::Cooperative::enter();
    let (entries, _) = cache.entries();
    let toolchains = cache.toolchains();
    let now = crate::provenance::now_secs();
    let verb = if a.dry_run { "would remove" } else { "removed" };
    let mut kept = entries.len();
    for (i, h) in entries.iter().enumerate() {
        let too_old = a.older_than.is_some_and(|d| older_than(now, h.entry.created_secs, d));
        let beyond = a.keep.is_some_and(|k| i >= k);
        if !(too_old || beyond) {
            continue;
        }
        crate::error::check_interrupted()?;
        let e = &h.entry;
        if !a.dry_run {
            let key = Key::parse(&e.key)?;
            let _lock = cache.lock(&key)?;
            cache.remove_entry(&h.dir)?;
        }
        kept -= 1;
        crate::outln!("{verb} wheel {} ({}, {}, {})", &e.key[..16], e.variant, e.wheel, human_size(e.size));
    }
    let mut tc_kept = toolchains.len();
    for (i, t) in toolchains.iter().enumerate() {
        let too_old = a.older_than.is_some_and(|d| older_than(now, t.created_secs, d));
        let beyond = a.keep_toolchains.is_some_and(|k| i >= k);
        if !(too_old || beyond) {
            continue;
        }
        crate::error::check_interrupted()?;
        if !a.dry_run && !cache.remove_toolchain(t)? {
            crate::outln!("kept toolchain {}: a running build uses it", t.key);
            continue;
        }
        tc_kept -= 1;
        crate::outln!(
            "{verb} toolchain {} (torch {}, {})",
            t.key,
            t.torch.as_deref().unwrap_or("-"),
            human_size(t.size)
        );
    }
    if !a.dry_run {
        for p in cache.clean_stale()? {
            crate::outln!("removed leftover {}", p.display());
        }
    }
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    crate::outln!("{} and {} kept", plural(kept, "wheel", "wheels"), plural(tc_kept, "toolchain", "toolchains"));
    Ok(Exit::Ok)
}

fn push(a: PushArgs) -> Result<Exit> {
    let cache = Cache::at(a.cache.resolve()?);
    let key_file = a.signing_key.clone().ok_or_else(|| {
        Failure::usage("cache push signs every entry and needs a signing key")
            .hint(format!("pass --signing-key FILE or set {SIGNING_KEY_ENV}; make a key with `deepep-forge cache keygen --name NAME --out FILE`"))
    })?;
    let secret = SecretKey::load(&key_file)?;
    let client = Remote::new(&a.cache_url, &a.net, Vec::new())?;
    let (list, _) = cache.entries();
    let mut chosen: Vec<&Hit> = Vec::new();
    if a.keys.is_empty() {
        chosen.extend(list.iter());
    } else {
        for k in &a.keys {
            if k.is_empty()
                || k.len() > Key::LEN
                || !k.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                crate::bail_usage!("`{}` is not a cache key or key prefix (lowercase hex)", super::excerpt(k));
            }
            let m: Vec<&Hit> = list.iter().filter(|h| h.entry.key.starts_with(k.as_str())).collect();
            match m.as_slice() {
                [one] => chosen.push(one),
                [] => crate::bail_usage!("no cache entry with key {k} in {}", cache.root().display()),
                _ => crate::bail_usage!("key prefix {k} matches {} entries; give more characters", m.len()),
            }
        }
    }
    for h in chosen {
        let key = Key::parse(&h.entry.key)?;
        let Some(verified) = cache.lookup(&key)? else {
            return Err(Failure::problems(format!("entry {key} failed verification and was removed")).into());
        };
        client.push(&verified, &secret)?;
        crate::outln!(
            "pushed {} {} -> {} (signed by {})",
            key.short(),
            verified.entry.wheel,
            client.shown_url(&key, &verified.entry.wheel),
            secret.name
        );
    }
    Ok(Exit::Ok)
}

fn keygen(a: KeygenArgs) -> Result<Exit> {
    let sk = SecretKey::generate(&a.name)?;
    sk.write_new(&a.out)?;
    crate::note!("wrote the secret key to {} (mode 0600; keep it private)", a.out.display());
    crate::note!("readers trust the public key below: --trusted-key, DEEPEP_FORGE_TRUSTED_KEYS, or");
    crate::note!("`[cache] trusted-keys = [...]` in their ~/.config/deepep-forge/config.toml");
    crate::outln!("{}", sk.public());
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    #[test]
    fn older_than_never_wraps() {
        let now = 1_800_000_000;
        assert!(super::older_than(now, now - 2 * 86_400, 1));
        assert!(!super::older_than(now, now, 1));
        assert!(!super::older_than(now, 0, u64::MAX));
        assert!(super::older_than(now, i64::MIN, 1));
    }
}
