//! What each DeepEP revision `lock check` judges is, read from its source at
//! that revision (`interface::read`: the extensions setup.py builds decide the
//! generation, setup.py / `deep_ep/__init__.py` the base version, the README
//! and sources the run-time needs), never from pins.toml's `branch` name.
//! The source is `--source` (a checkout, a folder or a URL, fetched like
//! `plan --source`), else the cache's mirror of pins.toml's repository when it
//! already holds the revision (`plan`, `build-wheel` and `pin set` put it
//! there): `lock check` itself never fetches pins.toml's repository. A
//! revision that cannot be read is said so, never guessed. Must not judge.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use forge_model::interface::Interface;
use forge_model::pins::Pins;
use forge_store::source;

/// Most revisions read (the pins' and the lock's: a handful).
pub const MAX_REVISIONS: usize = 16;

/// One revision: its interface, or why its source could not be read.
#[derive(Debug)]
pub enum Entry {
    Read(Box<Interface>),
    Unread(String),
}

/// The revisions read.
#[derive(Debug, Default)]
pub struct Revisions {
    read: BTreeMap<String, Entry>,
}

impl Revisions {
    /// DeepEP's interface at `rev` (a full sha), when its source was read.
    pub fn get(&self, rev: &str) -> Option<&Interface> {
        match self.read.get(rev)? {
            Entry::Read(i) => Some(i),
            Entry::Unread(_) => None,
        }
    }

    /// Why `rev` was not read (None when it was, or was never asked for).
    pub fn unread(&self, rev: &str) -> Option<&str> {
        match self.read.get(rev)? {
            Entry::Unread(why) => Some(why),
            Entry::Read(_) => None,
        }
    }
}

/// Read each full-sha revision of `revs` (at most [`MAX_REVISIONS`]) from `given`
/// (`--source`) or pins.toml's repository's mirror under `cache`.
pub fn read<'r>(
    pins: Option<&Pins>,
    given: Option<&str>,
    cache: Option<PathBuf>,
    revs: impl Iterator<Item = &'r str>,
) -> Result<Revisions> {
    let mut out = Revisions::default();
    let mut wanted: Vec<&str> = revs.filter(|r| forge_model::pins::is_full_sha(r)).collect();
    wanted.sort();
    wanted.dedup();
    wanted.truncate(MAX_REVISIONS);
    let Some(cache) = cache else {
        for r in wanted {
            out.read.insert(r.to_string(), Entry::Unread("no cache folder (HOME and XDG_CACHE_HOME unset)".into()));
        }
        return Ok(out);
    };
    let (repo, fetch) = match (given, pins) {
        (Some(g), _) => (source::resolve(g, &cache)?.repo, true),
        (None, Some(p)) => (p.source.repo.clone(), false),
        (None, None) => return Ok(out),
    };
    let mirror = source::mirror_path(&cache, &repo);
    for rev in wanted {
        out.read.insert(rev.to_string(), one(&mirror, &repo, rev, fetch));
    }
    Ok(out)
}

/// `pins check`: each pinned revision whose own version (setup.py, read from the cache's
/// mirror as `lock check` reads it, never fetched) is not pins.toml's `base_version`, the
/// one value the labels of `publish` and `docker bake` are made from. Returns (warnings,
/// notes: revisions that could not be read).
pub fn stale_base_version(pins: &Pins, cache: Option<PathBuf>) -> Result<(Vec<String>, Vec<String>)> {
    let revs = read(Some(pins), None, cache, pins.pins.values().map(|p| p.rev.as_str()))?;
    let (mut warnings, mut notes) = (Vec::new(), Vec::new());
    let mut seen = std::collections::BTreeSet::new();
    for pin in pins.pins.values().filter(|p| seen.insert(p.rev.clone())) {
        let short = pin.short();
        match (revs.get(&pin.rev), revs.unread(&pin.rev)) {
            (Some(i), _) if i.base_version != pins.source.base_version => warnings.push(format!(
                "{}: base_version = \"{}\", but the source at {short} gives {} ({}): `publish` refuses its wheels \
                 and `docker bake` would pass DEEPEP_VERSION={}; set base_version = \"{}\"",
                pins.path.display(),
                pins.source.base_version,
                i.base_version,
                i.version_from,
                forge_model::patches::label(&pins.source.base_version, short, &[]),
                i.base_version
            )),
            (Some(_), _) => {}
            (None, Some(why)) => notes.push(format!("the version at {short} was not compared: {why}")),
            (None, None) => {}
        }
    }
    Ok((warnings, notes))
}

/// DeepEP's interface at `rev` in `mirror` (fetched from `repo` first only for `--source`).
fn one(mirror: &Path, repo: &str, rev: &str, fetch: bool) -> Entry {
    let short = rev.get(..7).unwrap_or(rev);
    if fetch {
        if let Err(e) = source::ensure_rev(mirror, repo, rev) {
            return Entry::Unread(format!("{e:#}"));
        }
    } else if source::show(mirror, rev, "setup.py").is_none() {
        return Entry::Unread(format!(
            "{short} is not in the cache's mirror of {} (lock check does not fetch; `deepep-forge plan`, `build-wheel` and `pin set` put it there)",
            forge_os::input::excerpt(repo, 120)
        ));
    }
    let files = source::AtRev { mirror, rev };
    match forge_model::interface::read(&files, &format!("DeepEP at {short}")) {
        Ok(i) => Entry::Read(Box::new(i)),
        Err(e) => Entry::Unread(format!("{e:#}")),
    }
}
