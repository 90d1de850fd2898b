//! Which compile units get the cores first when a unit compiles several
//! gencodes at once (behaviour: `unit_order`). With nvcc `--threads N` every
//! unit of a side-by-side build starts its N device compiles at once, N times
//! more compile steps than cores, so the longest units (whose host compile comes
//! after their device compiles) wait at the start like every short one, and
//! cores go idle at the end while they finish. This machine's last build of the
//! same revision left each unit's compile time in its ninja logs; the plan names
//! as first its `jobs / N` longest units (`side_by_side.first_units`), as many
//! as fill the build's jobs with every gencode of each. Their compiles go to the
//! build's sccache server, every other CUDA unit's to a second server at a
//! lower CPU priority (nice [`LATER_NICE`]), which fill the cores the first
//! units leave. Which server and when change no byte (each runs the same
//! steps; tests/it/unit_order.rs): not keyed. Host C++ units (the C++ hook) are
//! not ordered: they compile on the first server.
//! History: `<cache>/unit-times/<revision>.json`, unit (its output's path
//! under the build root) -> milliseconds, from the last build that kept ninja
//! logs; hostile or oversized files are ignored. Owns the history and the
//! choice; the hook (`canon`) routes, `execute` starts the servers.
use forge_os::fs::{Kind, Tree};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::plan::{CompilerCache, Plan};

pub use super::canon::{FIRST_FILE, LATER_SOCKET};
/// The later server's niceness (its compiles get about a tenth of a contended core).
pub const LATER_NICE: i32 = 10;
/// Bounds on a history file: bytes, units, a unit's path length.
const MAX_BYTES: u64 = 1 << 20;
const MAX_UNITS: usize = 4096;
const MAX_NAME: usize = 512;

/// `<cache>/unit-times/<rev>.json`, or None for a revision that is not a hex commit.
pub fn history_file(cache_dir: &Path, rev: &str) -> Option<PathBuf> {
    let hex = (7..=64).contains(&rev.len()) && rev.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| cache_dir.join("unit-times").join(format!("{}.json", rev.to_ascii_lowercase())))
}

/// A unit name the hook can match line by line: a relative path of plain characters.
fn valid_unit(u: &str) -> bool {
    !u.is_empty()
        && u.len() <= MAX_NAME
        && !u.starts_with('/')
        && u.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && u.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-+/".contains(&b))
}

/// The history of a revision: unit -> ms. A missing, oversized, linked or malformed
/// file is no history (its units are dropped whole, never trusted in part).
pub fn load(file: &Path) -> Option<BTreeMap<String, u64>> {
    let (dir, name) = place(file, false)?;
    if !matches!(dir.kind(&name).ok()?, Kind::File { len } if len <= MAX_BYTES) {
        return None;
    }
    let text = dir.read_text(&name, MAX_BYTES).ok()?;
    let times: BTreeMap<String, u64> = serde_json::from_str(&text).ok()?;
    let ok = times.len() <= MAX_UNITS && times.iter().all(|(u, ms)| valid_unit(u) && *ms <= 86_400_000);
    ok.then_some(times)
}

/// The first units: the `jobs / threads` longest (at least one; longest first, ties by
/// name), as many as fill the build's jobs with every gencode of each at once. None when
/// one thread compiles each unit, or when every unit would be first.
pub fn choose(times: &BTreeMap<String, u64>, threads: usize, jobs: usize) -> Vec<String> {
    let longest = times.values().copied().max().unwrap_or(0);
    let k = (jobs / threads.max(1)).max(1);
    if threads <= 1 || longest == 0 || k >= times.len() {
        return Vec::new();
    }
    let mut first: Vec<(&String, &u64)> = times.iter().collect();
    first.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    first.into_iter().take(k).map(|(u, _)| u.clone()).collect()
}

/// Name the plan's first units from this machine's history of its revision: only for a
/// side-by-side build through the hooks with several nvcc threads and a compiler cache
/// that is local or off (a shared one's credentials reach one server only).
pub fn attach(pl: &mut Plan, cache_dir: &Path) {
    let remote = pl.hooks.as_ref().is_none_or(|h| matches!(h.compiler_cache, Some(CompilerCache::Remote { .. })));
    let threads: usize = pl.run.env.get(super::canon::NVCC_THREADS_ENV).and_then(|t| t.parse().ok()).unwrap_or(1);
    let Some(file) = history_file(cache_dir, &pl.source.rev) else { return };
    let Some(s) = pl.side_by_side.as_mut() else { return };
    if remote {
        return;
    }
    if let Some(times) = load(&file) {
        s.first_units = choose(&times, threads, s.jobs);
    }
}

/// Each unit's compile time from the build's kept ninja logs (the last entry of an
/// output wins; outputs outside the build root are left out), for [`store`].
pub fn read_logs(logs: &[PathBuf], root: &Path) -> BTreeMap<String, u64> {
    let mut times = BTreeMap::new();
    for log in logs {
        let Ok(text) = forge_os::fs::named::read_text(log, "a kept ninja log", super::side_by_side::MAX_NINJA_LOG)
        else {
            continue;
        };
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            if let [start, end, _, out, ..] = line.split('\t').collect::<Vec<_>>()[..] {
                let (Ok(s), Ok(e)) = (start.parse::<u64>(), end.parse::<u64>()) else { continue };
                let Ok(rel) = Path::new(out).strip_prefix(root) else { continue };
                let unit = rel.to_string_lossy().into_owned();
                if valid_unit(&unit) && times.len() < MAX_UNITS {
                    times.insert(unit, e.saturating_sub(s));
                }
            }
        }
    }
    times
}

/// Replace the revision's history (written beside it, then renamed). Nothing to store
/// (no ninja logs) leaves the old one; a failure to write is only a missed order next time.
pub fn store(file: &Path, times: &BTreeMap<String, u64>) {
    if times.is_empty() {
        return;
    }
    let Some((dir, name)) = place(file, true) else { return };
    let _ = dir.write(&name, &serde_json::to_vec_pretty(times).unwrap_or_default());
}

/// A history file's folder in the cache as a tree (made when `create`), and its name.
fn place(file: &Path, create: bool) -> Option<(Tree, std::ffi::OsString)> {
    let (folder, name) = (file.parent()?, file.file_name()?.to_os_string());
    let dir = if create { Tree::create(folder, "unit-time folder") } else { Tree::open(folder, "unit-time folder") };
    Some((dir.ok()?, name))
}

/// The plan's line about it, or None.
pub fn describe(first: &[String]) -> Option<String> {
    (!first.is_empty()).then(|| {
        format!(
            "{} unit(s) first, the longest in this machine's last build of the revision (jobs / nvcc threads): {}; every other CUDA unit compiles at nice {LATER_NICE} (not keyed: the same steps and bytes)",
            first.len(),
            first.iter().map(|u| u.rsplit('/').next().unwrap_or(u)).collect::<Vec<_>>().join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(v: &[(&str, u64)]) -> BTreeMap<String, u64> {
        v.iter().map(|(u, t)| (u.to_string(), *t)).collect()
    }

    #[test]
    fn one_thread_or_every_unit_first_orders_nothing() {
        let t = times(&[("a.o", 30), ("b.o", 20), ("c.o", 1)]);
        assert!(choose(&t, 1, 16).is_empty(), "one thread a unit");
        assert!(choose(&t, 2, 6).is_empty(), "6 jobs / 2 threads: all three units would be first");
        assert!(choose(&times(&[("a.o", 0), ("b.o", 0)]), 2, 2).is_empty(), "no times");
    }

    #[test]
    fn the_jobs_over_threads_longest_units_go_first() {
        let t = times(&[("s/a.o", 10), ("s/b.o", 90), ("s/c.o", 45), ("s/d.o", 90), ("s/e.o", 44)]);
        assert_eq!(choose(&t, 2, 4), ["s/b.o", "s/d.o"], "4 jobs, 2 threads: two units, ties by name");
        assert_eq!(choose(&t, 2, 6), ["s/b.o", "s/d.o", "s/c.o"]);
        assert_eq!(choose(&t, 3, 2), ["s/b.o"], "at least one");
        assert_eq!(choose(&t, 2, 16), Vec::<String>::new(), "8 would be first: all 5 are");
    }

    #[test]
    fn a_hostile_history_is_no_history() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("h.json");
        for bad in [
            r#"{"../x.o": 1}"#,
            r#"{"/abs.o": 1}"#,
            "{\"a\\nb.o\": 1}",
            r#"{"a.o": -1}"#,
            r#"{"a.o": 1e30}"#,
            r#"["a.o"]"#,
            r#"{"-e.o": 99999999999}"#,
        ] {
            std::fs::write(&f, bad).unwrap();
            assert_eq!(load(&f), None, "{bad}");
        }
        std::fs::write(&f, r#"{"src/build/a.o": 5}"#).unwrap();
        assert_eq!(load(&f), Some(times(&[("src/build/a.o", 5)])));
        std::fs::write(d.path().join("big.json"), vec![b' '; (MAX_BYTES + 1) as usize]).unwrap();
        assert_eq!(load(&d.path().join("big.json")), None);
        std::os::unix::fs::symlink(&f, d.path().join("l.json")).unwrap();
        assert_eq!(load(&d.path().join("l.json")), None, "a link is not followed");
    }

    #[test]
    fn only_a_hex_revision_names_a_history_file() {
        assert!(history_file(Path::new("/c"), "17cfb817").is_some());
        assert!(history_file(Path::new("/c"), "../../x").is_none());
        assert!(history_file(Path::new("/c"), "main").is_none());
    }

    #[test]
    fn ninja_logs_give_units_under_the_root_only() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("x.ninja_log");
        std::fs::write(
            &log,
            "# ninja log v7\n0\t1500\t0\t/r/src/build/a.o\t1\n10\t20\t0\t/elsewhere/b.o\t2\nx\ty\t0\t/r/c.o\t3\n100\t400\t0\t/r/src/build/a.o\t4\n",
        )
        .unwrap();
        assert_eq!(read_logs(&[log], Path::new("/r")), times(&[("src/build/a.o", 300)]));
    }
}
