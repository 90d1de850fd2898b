//! A revision's unit-time history: `<cache>/unit-times/<rev>.json`, each compile unit
//! (its output's path under the build root) -> milliseconds, as the builder's unit
//! order reads and writes it. Owns the file, its bounds and its validation (a history
//! is taken whole or not at all: one bad name or number and it is no history), its
//! signed form on a remote cache (`<url>/unit-times/<rev>.json`, [`Signed`]) and its
//! copy in a shared Redis compiler cache ([`redis`]). A history chooses only which
//! units compile first, never what is compiled: whatever it says, the bytes are the same.
//! Must not choose the order.
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use forge_os::fs::{Kind, Tree};

pub mod redis;

/// A history: unit -> milliseconds.
pub type Times = BTreeMap<String, u64>;
/// The folder of the histories in the cache (and on a remote cache).
pub const FOLDER: &str = "unit-times";
/// Bounds on a history: bytes of its file, units, a unit's path length, one unit's time.
pub const MAX_BYTES: u64 = 1 << 20;
pub const MAX_UNITS: usize = 4096;
pub const MAX_NAME: usize = 512;
pub const MAX_MS: u64 = 86_400_000;
/// The first line of a signed history's message (never that of a cache entry).
pub const DOMAIN: &str = "deepep-forge unit times v1";

/// The history file's name for a revision (`<rev>.json`, lowercase), or None for a
/// revision that is not a hex commit (7 to 64 digits).
pub fn file_name(rev: &str) -> Option<String> {
    let hex = (7..=64).contains(&rev.len()) && rev.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| format!("{}.json", rev.to_ascii_lowercase()))
}

/// A unit name the nvcc hook can match line by line: a relative path of plain characters.
pub fn valid_unit(u: &str) -> bool {
    !u.is_empty()
        && u.len() <= MAX_NAME
        && !u.starts_with('/')
        && u.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && u.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-+/".contains(&b))
}

/// Whether every unit and time of a history is within bounds.
pub fn valid(times: &Times) -> bool {
    times.len() <= MAX_UNITS && times.iter().all(|(u, ms)| valid_unit(u) && *ms <= MAX_MS)
}

/// A history from its bytes: None when oversized, malformed or out of bounds.
pub fn parse(bytes: &[u8]) -> Option<Times> {
    if bytes.len() as u64 > MAX_BYTES {
        return None;
    }
    let times: Times = serde_json::from_slice(bytes).ok()?;
    valid(&times).then_some(times)
}

/// The bytes a history is kept as (and whose sha256 a signature covers).
pub fn bytes(times: &Times) -> Vec<u8> {
    serde_json::to_vec_pretty(times).unwrap_or_default()
}

/// The history of `rev` in the cache folder `cache`: None when missing, linked, oversized or malformed.
pub fn load(cache: &Path, rev: &str) -> Option<Times> {
    let name = file_name(rev)?;
    let dir = Tree::open_if_exists(&cache.join(FOLDER), "unit-time folder").ok()??;
    if !matches!(dir.kind(&name).ok()?, Kind::File { len } if len <= MAX_BYTES) {
        return None;
    }
    parse(&dir.read(&name, MAX_BYTES).ok()?)
}

/// Replace the history of `rev` (written beside, then renamed). An empty or invalid
/// history leaves the old one; a failure to write is only a missed order next time.
pub fn store(cache: &Path, rev: &str, times: &Times) {
    let Some(name) = file_name(rev) else { return };
    if times.is_empty() || !valid(times) {
        return;
    }
    if let Ok(dir) = Tree::create(&cache.join(FOLDER), "unit-time folder") {
        let _ = dir.write(&name, &bytes(times));
    }
}

/// The most recently written history of another revision in the cache (its revision
/// and history): the nearest measurement a revision without one can predict from.
pub fn latest_other(cache: &Path, rev: &str) -> Option<(String, Times)> {
    let dir = Tree::open_if_exists(&cache.join(FOLDER), "unit-time folder").ok()??;
    let own = file_name(rev);
    let mut found: Vec<(i64, String)> = Vec::new();
    for name in dir.names(".").ok()? {
        let Some(other) = name.strip_suffix(".json") else { continue };
        if file_name(other).as_deref() != Some(name.as_str()) || own.as_deref() == Some(name.as_str()) {
            continue;
        }
        if let Ok(st) = dir.stat(&name) {
            found.push((st.mtime, other.to_string()));
        }
    }
    found.sort();
    found.into_iter().rev().find_map(|(_, other)| load(cache, &other).map(|t| (other, t)))
}

/// A history as a remote cache serves it: the revision, the history, and ed25519
/// signatures (`NAME:BASE64`) over [`message`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signed {
    pub rev: String,
    pub times: Times,
    #[serde(default)]
    pub signatures: Vec<String>,
}

/// The canonical bytes a history's signature covers: the format, the revision and the
/// sha256 of the history's bytes ([`bytes`]).
pub fn message(rev: &str, times: &Times) -> Vec<u8> {
    let digest = forge_os::input::sha256_hex(&bytes(times));
    format!("{DOMAIN}\nrev {}\nsha256 {digest}\n", rev.to_ascii_lowercase()).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_history_is_no_history() {
        for bad in [
            r#"{"../x.o": 1}"#,
            r#"{"/abs.o": 1}"#,
            "{\"a\\nb.o\": 1}",
            r#"{"a.o": -1}"#,
            r#"{"a.o": 1e30}"#,
            r#"["a.o"]"#,
            r#"{"-e.o": 99999999999}"#,
            r#"{"a b.o": 1}"#,
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
        assert!(parse(&vec![b' '; (MAX_BYTES + 1) as usize]).is_none());
        assert_eq!(parse(br#"{"src/a.o": 5}"#).map(|t| t.len()), Some(1));
    }

    #[test]
    fn a_signature_covers_the_revision_and_every_time() {
        let t: Times = [("a.o".to_string(), 5)].into();
        let mut u = t.clone();
        u.insert("a.o".into(), 6);
        assert_ne!(message("abcdef1", &t), message("abcdef1", &u));
        assert_ne!(message("abcdef1", &t), message("abcdef2", &t));
        assert!(String::from_utf8(message("abcdef1", &t)).unwrap().starts_with(DOMAIN));
    }

    #[test]
    fn the_latest_other_revision_is_the_prediction() {
        let d = tempfile::tempdir().unwrap();
        store(d.path(), "aaaaaaa", &[("a.o".to_string(), 1)].into());
        assert!(latest_other(d.path(), "aaaaaaa").is_none(), "its own history is not another's");
        let (rev, t) = latest_other(d.path(), "bbbbbbb").unwrap();
        assert_eq!((rev.as_str(), t.len()), ("aaaaaaa", 1));
        std::fs::write(d.path().join(FOLDER).join("ccccccc.json"), "not json").unwrap();
        assert_eq!(latest_other(d.path(), "bbbbbbb").unwrap().0, "aaaaaaa", "a bad one is skipped");
    }
}
