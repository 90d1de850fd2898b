//! `deepep-forge cache ls|gc|push|keygen` over [`Cache`]: the requests, what
//! each finds or does as data, and the renderers of its text (the command
//! layer, `src/commands/cache.rs`, prints them and picks the exit code).
use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use super::bases::{self, Base, Removed};
use super::remote::{Net, Remote};
use super::sign::SecretKey;
use super::tree::{TreeEntry, TreeListing, Trees};
use super::{human_size, BadEntry, Cache, Entry, Hit, Key, Toolchain};
use forge_os::error::Failure;
use forge_os::output::DataFormat as Format;

/// How a build reaches a remote cache (`--cache-url`, `--trusted-key`,
/// `--allow-http`, `--cache-timeout`), as plain data.
#[derive(Debug, Clone)]
pub struct RemoteRequest {
    pub cache_url: Option<String>,
    /// `--trusted-key`s (added to the environment's and the user config's).
    pub trusted_keys: Vec<String>,
    pub net: Net,
}

impl RemoteRequest {
    /// The remote cache, or `None` without `--cache-url` (or with `--no-cache`).
    /// A bad URL or trusted key is a usage error (exit 2) before anything runs.
    pub fn connect(&self, no_cache: bool) -> Result<Option<Remote>> {
        let Some(url) = self.cache_url.as_deref().filter(|_| !no_cache) else { return Ok(None) };
        let trusted = super::config::trusted_keys(&self.trusted_keys)?;
        Remote::new(url, self.net, trusted).map(Some)
    }
}

/// The environment variable naming the signing key file for `cache push`.
pub const SIGNING_KEY_ENV: &str = "DEEPEP_FORGE_SIGNING_KEY_FILE";

/// The signing key's file as a printed command names it: the file `DEEPEP_FORGE_SIGNING_KEY_FILE`
/// names, as one shell word; None when it is unset or empty (the caller prints its placeholder).
pub fn signing_key_file_word() -> Option<String> {
    forge_os::environ::var_os(SIGNING_KEY_ENV)
        .filter(|v| !v.is_empty())
        .map(|v| forge_os::printer::shell_word(&v.to_string_lossy()))
}
/// The most days `--older-than` takes (about 100 years).
pub const MAX_DAYS: u64 = 36_500;
/// Version of `cache ls --format json` (2: `trees`, `bases`, `bad_entries[].store`, `total_bytes`).
pub const LS_SCHEMA: u32 = 2;

/// `cache ls`.
#[derive(Debug, Clone)]
pub struct LsRequest {
    /// `--cache-dir` as given (resolved here).
    pub cache_dir: Option<PathBuf>,
    pub format: Format,
}

/// `cache gc`: what to remove.
#[derive(Debug, Clone, Default)]
pub struct GcRequest {
    /// `--cache-dir` as given (resolved here).
    pub cache_dir: Option<PathBuf>,
    /// Remove what was created more than this many days ago.
    pub older_than: Option<u64>,
    /// Keep only the N newest wheels, toolchains, NCCL trees, image bases.
    pub keep: Option<usize>,
    pub keep_toolchains: Option<usize>,
    pub keep_trees: Option<usize>,
    pub keep_bases: Option<usize>,
    /// Say what would be removed; remove nothing.
    pub dry_run: bool,
}

/// `cache push`: sign local entries and upload them.
#[derive(Debug, Clone)]
pub struct PushRequest {
    /// `--cache-dir` as given (resolved here).
    pub cache_dir: Option<PathBuf>,
    pub cache_url: String,
    /// The secret key file (`--signing-key` or its environment variable).
    pub signing_key: Option<PathBuf>,
    pub net: Net,
    /// Keys (or unique prefixes) to push; empty: every local entry.
    pub keys: Vec<String>,
}

/// `cache keygen`.
#[derive(Debug, Clone)]
pub struct KeygenRequest {
    pub name: String,
    pub out: PathBuf,
}

/// `cache ls --format json`.
#[derive(Serialize)]
pub struct Listing<'a> {
    schema: u32,
    cache_dir: &'a std::path::Path,
    entries: Vec<&'a Entry>,
    toolchains: &'a [Toolchain],
    trees: &'a [TreeEntry],
    bases: &'a [Base],
    bad_entries: &'a [BadEntry],
    wheels_bytes: u64,
    toolchains_bytes: u64,
    /// Every file under `trees/` (objects shared by entries counted once).
    trees_bytes: u64,
    /// Objects no entry names (`cache gc` removes them).
    trees_unreferenced_bytes: u64,
    /// Every file under `images/` (bases, debootstrap's .deb cache, logs).
    bases_bytes: u64,
    total_bytes: u64,
}

fn age(now: i64, then: i64) -> String {
    let s = now.saturating_sub(then).max(0);
    match s {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3600 => format!("{}h", s / 3600),
        s => format!("{}m", s / 60),
    }
}

/// Everything `cache ls` shows, read once.
pub struct Seen {
    pub cache_dir: PathBuf,
    pub entries: Vec<Hit>,
    pub toolchains: Vec<Toolchain>,
    pub trees: TreeListing,
    pub bases: bases::BaseListing,
    pub bad: Vec<BadEntry>,
}

impl Seen {
    fn read(cache: &Cache) -> Seen {
        let (entries, mut bad) = cache.entries();
        let trees = Trees::of(cache).list();
        let bases = bases::list(cache);
        bad.extend(trees.bad.iter().cloned());
        bad.extend(bases.bad.iter().cloned());
        Seen { cache_dir: cache.root().to_path_buf(), entries, toolchains: cache.toolchains(), trees, bases, bad }
    }
    fn wheels_bytes(&self) -> u64 {
        self.entries.iter().map(|h| h.entry.size).fold(0u64, u64::saturating_add)
    }
    fn toolchains_bytes(&self) -> u64 {
        self.toolchains.iter().map(|t| t.size).fold(0u64, u64::saturating_add)
    }
    fn total(&self) -> u64 {
        [self.wheels_bytes(), self.toolchains_bytes(), self.trees.bytes, self.bases.bytes]
            .into_iter()
            .fold(0u64, u64::saturating_add)
    }
}

/// `cache ls`: what the cache holds (the format is the command layer's).
pub fn ls(a: &LsRequest) -> Result<Seen> {
    let cache = Cache::at(super::resolve_dir(a.cache_dir.as_deref())?);
    Ok(Seen::read(&cache))
}

impl Seen {
    /// The JSON document of `cache ls --format json`.
    pub fn json(&self) -> Listing<'_> {
        Listing {
            schema: LS_SCHEMA,
            cache_dir: &self.cache_dir,
            entries: self.entries.iter().map(|h| &h.entry).collect(),
            toolchains: &self.toolchains,
            trees: &self.trees.entries,
            bases: &self.bases.bases,
            bad_entries: &self.bad,
            wheels_bytes: self.wheels_bytes(),
            toolchains_bytes: self.toolchains_bytes(),
            trees_bytes: self.trees.bytes,
            trees_unreferenced_bytes: self.trees.freed_without(&BTreeSet::new()).bytes,
            bases_bytes: self.bases.bytes,
            total_bytes: self.total(),
        }
    }

    /// The human listing, as of `now`.
    pub fn render(&self, now: i64) -> String {
        let mut o = String::new();
        o += &format!("cache {}\n\n", self.cache_dir.display());
        ls_wheels(&mut o, &self.entries, now);
        o += "\n";
        ls_toolchains(&mut o, &self.toolchains, now);
        o += "\n";
        ls_trees(&mut o, &self.trees, now);
        o += "\n";
        ls_bases(&mut o, &self.bases, now);
        for b in &self.bad {
            o += &format!("not an entry: {}: {}\n", b.place(), b.problem);
        }
        o += "\n";
        o += &format!(
            "total {} (wheels {}, toolchains {}, NCCL trees {}, image bases {})\n",
            human_size(self.total()),
            human_size(self.wheels_bytes()),
            human_size(self.toolchains_bytes()),
            human_size(self.trees.bytes),
            human_size(self.bases.bytes)
        );
        o
    }
}

fn ls_wheels(o: &mut String, entries: &[Hit], now: i64) {
    *o += &format!("WHEELS ({})\n", entries.len());
    if !entries.is_empty() {
        *o += &format!("{:<16}  {:<16}  {:>10}  {:>5}  WHEEL\n", "KEY", "VARIANT", "SIZE", "AGE");
    }
    for h in entries {
        let e = &h.entry;
        *o += &format!(
            "{:<16}  {:<16}  {:>10}  {:>5}  {}\n",
            &e.key[..16],
            e.variant,
            human_size(e.size),
            age(now, e.created_secs),
            e.wheel
        );
    }
}

fn ls_toolchains(o: &mut String, toolchains: &[Toolchain], now: i64) {
    *o += &format!("TOOLCHAINS ({})\n", toolchains.len());
    if !toolchains.is_empty() {
        *o += &format!(
            "{:<16}  {:<24}  {:<6}  {:>8}  {:>10}  {:>5}\n",
            "KEY", "TORCH", "CUDA", "PACKAGES", "SIZE", "AGE"
        );
    }
    for t in toolchains {
        *o += &format!(
            "{:<16}  {:<24}  {:<6}  {:>8}  {:>10}  {:>5}\n",
            t.key,
            t.torch.as_deref().unwrap_or("-"),
            t.cuda.as_deref().unwrap_or("-"),
            t.packages,
            human_size(t.size),
            age(now, t.created_secs)
        );
    }
}

fn ls_trees(o: &mut String, l: &TreeListing, now: i64) {
    *o += &format!("NCCL BUILD TREES ({})\n", l.entries.len());
    if !l.entries.is_empty() {
        *o += &format!("{:<16}  {:>7}  {:>10}  {:>10}  {:>5}  LABEL\n", "KEY", "FILES", "SIZE", "SHARED", "AGE");
    }
    for t in &l.entries {
        *o += &format!(
            "{:<16}  {:>7}  {:>10}  {:>10}  {:>5}  {}\n",
            &t.key[..16],
            t.files,
            human_size(t.bytes),
            human_size(t.shared_bytes),
            age(now, t.created_secs),
            t.label
        );
    }
    let loose = l.freed_without(&BTreeSet::new());
    if loose.objects > 0 {
        *o += &format!(
            "objects no tree names: {} ({}; `cache gc` removes them)\n",
            loose.objects,
            human_size(loose.bytes)
        );
    }
}

/// Said on stderr when `cache ls` lists image bases.
pub fn bases_note() -> String {
    format!(
        "the images made from these bases are in podman's (or buildah's) own store, which `cache gc` leaves alone: {}",
        bases::podman_hint("KEY")
    )
}

fn ls_bases(o: &mut String, l: &bases::BaseListing, now: i64) {
    *o += &format!("IMAGE BASES ({})\n", l.bases.len());
    if !l.bases.is_empty() {
        *o += &format!(
            "{:<16}  {:<10}  {:<6}  {:>10}  {:>5}  {:<29}  MIRROR\n",
            "KEY", "SUITE", "ARCH", "ROOTFS", "AGE", "RELEASE"
        );
    }
    for b in &l.bases {
        *o += &format!(
            "{:<16}  {:<10}  {:<6}  {:>10}  {:>5}  {:<29}  {}\n",
            b.key16,
            b.suite,
            b.arch,
            human_size(b.rootfs_bytes),
            age(now, b.created_secs),
            b.release_date,
            b.mirror
        );
    }
    if l.other_bytes > 0 {
        *o +=
            &format!("debootstrap's .deb cache and logs (images/debs, images/*.log): {}\n", human_size(l.other_bytes));
    }
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

/// Whether gc removes the `i`-th newest item created at `created`: older than
/// `--older-than`, or beyond its `--keep*` count.
fn chosen(a: &GcRequest, now: i64, i: usize, created: i64, keep: Option<usize>) -> bool {
    a.older_than.is_some_and(|d| older_than(now, created, d)) || keep.is_some_and(|k| i >= k)
}

/// `cache gc`.
pub fn gc(a: GcRequest, say: &mut dyn FnMut(String)) -> Result<()> {
    let cache = Cache::at(super::resolve_dir(a.cache_dir.as_deref())?);
    let _guard = forge_os::error::Cooperative::enter();
    let now = forge_wheel::provenance::now_secs();
    let kept = gc_wheels(&cache, &a, now, say)?;
    let tc_kept = gc_toolchains(&cache, &a, now, say)?;
    let trees_kept = gc_trees(&cache, &a, now, say)?;
    let bases_kept = gc_bases(&cache, &a, now, say)?;
    if !a.dry_run {
        for p in cache.clean_stale()? {
            say(format!("removed leftover {}", p.display()));
        }
    }
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    say(format!(
        "{} and {} kept; {} and {} kept",
        plural(kept, "wheel", "wheels"),
        plural(tc_kept, "toolchain", "toolchains"),
        plural(trees_kept, "NCCL tree", "NCCL trees"),
        plural(bases_kept, "image base", "image bases")
    ));
    Ok(())
}

fn verb(a: &GcRequest) -> &'static str {
    if a.dry_run {
        "would remove"
    } else {
        "removed"
    }
}

fn gc_wheels(cache: &Cache, a: &GcRequest, now: i64, say: &mut dyn FnMut(String)) -> Result<usize> {
    let (entries, _) = cache.entries();
    let mut kept = entries.len();
    for (i, h) in entries.iter().enumerate() {
        if !chosen(a, now, i, h.entry.created_secs, a.keep) {
            continue;
        }
        forge_os::error::check_interrupted()?;
        let e = &h.entry;
        if !a.dry_run {
            let key = Key::parse(&e.key)?;
            let _lock = cache.lock(&key)?;
            cache.remove_key(&key)?;
        }
        kept -= 1;
        say(format!("{} wheel {} ({}, {}, {})", verb(a), &e.key[..16], e.variant, e.wheel, human_size(e.size)));
    }
    Ok(kept)
}

fn gc_toolchains(cache: &Cache, a: &GcRequest, now: i64, say: &mut dyn FnMut(String)) -> Result<usize> {
    let toolchains = cache.toolchains();
    let mut kept = toolchains.len();
    for (i, t) in toolchains.iter().enumerate() {
        if !chosen(a, now, i, t.created_secs, a.keep_toolchains) {
            continue;
        }
        forge_os::error::check_interrupted()?;
        if !a.dry_run && !cache.remove_toolchain(t)? {
            say(format!("kept toolchain {}: a running build uses it", t.key));
            continue;
        }
        kept -= 1;
        say(format!(
            "{} toolchain {} (torch {}, {})",
            verb(a),
            t.key,
            t.torch.as_deref().unwrap_or("-"),
            human_size(t.size)
        ));
    }
    Ok(kept)
}

/// The NCCL build trees gc removes from `l` (by age and `--keep-trees`).
fn trees_chosen<'a>(a: &GcRequest, now: i64, l: &'a TreeListing) -> Vec<&'a TreeEntry> {
    l.entries
        .iter()
        .enumerate()
        .filter(|(i, t)| chosen(a, now, *i, t.created_secs, a.keep_trees))
        .map(|(_, t)| t)
        .collect()
}

fn say_tree(a: &GcRequest, t: &TreeEntry, say: &mut dyn FnMut(String)) {
    say(format!(
        "{} NCCL tree {} ({}, {} files, {}, {} shared)",
        verb(a),
        &t.key[..16],
        t.label,
        t.files,
        human_size(t.bytes),
        human_size(t.shared_bytes)
    ));
}

/// Trees: entries by the rules, then (not in a dry run) a sweep of the objects no
/// remaining entry names and of killed stores' leftovers, all under the store's
/// lock; while a build stores or restores a tree, nothing is collected.
fn gc_trees(cache: &Cache, a: &GcRequest, now: i64, say: &mut dyn FnMut(String)) -> Result<usize> {
    let trees = Trees::of(cache);
    let seen = trees.list();
    if let Some(b) = seen.bad.iter().find(|b| b.name.is_empty()) {
        say(format!("kept {}: {}", b.place(), b.problem));
        return Ok(0);
    }
    if !trees.present() {
        return Ok(0);
    }
    if a.dry_run {
        let gone = trees_chosen(a, now, &seen);
        gone.iter().for_each(|t| say_tree(a, t, say));
        let freed = seen.freed_without(&gone.iter().map(|t| t.key.as_str()).collect());
        if freed.objects > 0 {
            say(format!(
                "would remove {} tree objects no tree names then ({})",
                freed.objects,
                human_size(freed.bytes)
            ));
        }
        return Ok(seen.entries.len() - gone.len());
    }
    let Some(c) = trees.collector()? else {
        say("kept NCCL trees: in use (a build is storing or restoring one); run `cache gc` again later".to_string());
        return Ok(seen.entries.len());
    };
    let l = c.list();
    let gone = trees_chosen(a, now, &l);
    for t in &gone {
        forge_os::error::check_interrupted()?;
        c.remove(&t.key)?;
        say_tree(a, t, say);
    }
    let swept = c.sweep()?;
    if swept.objects > 0 {
        say(format!("removed {} tree objects no tree names ({})", swept.objects, human_size(swept.bytes)));
    }
    let left = c.clean_tmp()?;
    if left > 0 {
        say(format!("removed {left} leftovers of killed tree stores (trees/tmp)"));
    }
    Ok(l.entries.len() - gone.len())
}

fn gc_bases(cache: &Cache, a: &GcRequest, now: i64, say: &mut dyn FnMut(String)) -> Result<usize> {
    let l = bases::list(cache);
    let mut kept = l.bases.len();
    for (i, b) in l.bases.iter().enumerate() {
        if !chosen(a, now, i, b.created_secs, a.keep_bases) {
            continue;
        }
        forge_os::error::check_interrupted()?;
        if !a.dry_run && bases::remove(cache, b)? == Removed::InUse {
            say(format!("kept image base {}: in use (its lock is held: a base is being made)", b.key16));
            continue;
        }
        kept -= 1;
        say(format!(
            "{} image base {} ({} {}, {}); podman's store keeps its images: {}",
            verb(a),
            b.key16,
            b.suite,
            b.arch,
            human_size(b.bytes),
            bases::podman_hint(&b.key16)
        ));
    }
    Ok(kept)
}

/// `cache push`.
pub fn push(a: PushRequest, say: &mut dyn FnMut(String)) -> Result<()> {
    let cache = Cache::at(super::resolve_dir(a.cache_dir.as_deref())?);
    let key_file = a.signing_key.clone().ok_or_else(|| {
        Failure::usage("cache push signs every entry and needs a signing key")
            .hint(format!("pass --signing-key FILE or set {SIGNING_KEY_ENV}; make a key with `deepep-forge cache keygen --name NAME --out FILE`"))
    })?;
    let secret = SecretKey::load(&key_file)?;
    let client = Remote::new(&a.cache_url, a.net, Vec::new())?;
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
                forge_os::bail_usage!("`{}` is not a cache key or key prefix (lowercase hex)", super::excerpt(k));
            }
            let m: Vec<&Hit> = list.iter().filter(|h| h.entry.key.starts_with(k.as_str())).collect();
            match m.as_slice() {
                [one] => chosen.push(one),
                [] => forge_os::bail_usage!("no cache entry with key {k} in {}", cache.root().display()),
                _ => forge_os::bail_usage!("key prefix {k} matches {} entries; give more characters", m.len()),
            }
        }
    }
    let mut revs = std::collections::BTreeSet::new();
    for h in chosen {
        let key = Key::parse(&h.entry.key)?;
        let Some(verified) = cache.lookup(&key)? else {
            return Err(Failure::problems(format!("entry {key} failed verification and was removed")).into());
        };
        client.push(&cache, &verified, &secret)?;
        say(format!(
            "pushed {} {} -> {} (signed by {})",
            key.short(),
            verified.entry.wheel,
            client.shown_url(&key, &verified.entry.wheel),
            secret.name
        ));
        let wheel = cache.root().join("wheels").join(key.as_str()).join(&verified.entry.wheel);
        if let Ok((p, _)) = forge_wheel::wheel::open(&wheel).and_then(|mut w| w.provenance()) {
            revs.insert(p.source.rev);
        }
    }
    // Each revision's unit-time history travels with its wheels (signed the same way).
    for rev in revs {
        if let Some(url) = client.push_history(&cache, &rev, &secret)? {
            say(format!("pushed the unit-time history of {} -> {url} (signed by {})", short_rev(&rev), secret.name));
        }
    }
    Ok(())
}

/// A revision as a line shows it: its first 12 characters.
fn short_rev(rev: &str) -> &str {
    &rev[..rev.len().min(12)]
}

/// `cache keygen`: the key written (mode 0600), its public half returned.
pub fn keygen(a: KeygenRequest) -> Result<super::sign::PublicKey> {
    let sk = SecretKey::generate(&a.name)?;
    sk.write_new(&a.out)?;
    Ok(sk.public())
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
