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
//! logs (the file and its bounds: `forge_store::cache::unit_times`). Where the
//! order comes from, first found wins ([`Order`] in the plan): this machine's history
//! of the revision; the copy in the shared Redis compiler cache the build uses
//! (written there after every build through it); the signed copy on the team's
//! remote cache (`--cache-url`, pushed by `cache push`); else predicted: from the
//! history of the most recently measured other revision in this cache, else from the
//! source (the `.cu` files setup.py names, their size as the cost: every unit
//! compiles the same gencodes). A history that is not valid is ignored with a
//! warning: it can only choose an order, never a byte. In one run, a variant that
//! follows another of the same revision has its order settled when it builds
//! ([`settle`], from what the earlier one just measured): its plan says so.
//! Owns the choice; the hook (`canon`) routes, `execute` starts the servers.
use forge_os::fs::Tree;
use forge_store::cache::remote::{History, Remote};
use forge_store::cache::unit_times::{self, redis, Times};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::plan::{Backend, CompilerCache, Order, Plan};

pub use super::canon::{FIRST_FILE, LATER_SOCKET};
/// The later server's niceness (its compiles get about a tenth of a contended core).
pub const LATER_NICE: i32 = 10;
/// Where a measured order came from, as the plan says it.
pub const FROM_HERE: &str = "this machine's last build of the revision";
pub const FROM_SHARED: &str = "the shared compiler cache's history of the revision";
pub const FROM_TEAM: &str = "the team's cache (signed)";
/// A predicted order from the source.
pub const FROM_SOURCE: &str = "source";

/// `<cache>/unit-times/<rev>.json`, or None for a revision that is not a hex commit.
pub fn history_file(cache_dir: &Path, rev: &str) -> Option<PathBuf> {
    unit_times::file_name(rev).map(|n| cache_dir.join(unit_times::FOLDER).join(n))
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

/// nvcc threads of the plan (1 when unset).
fn threads(pl: &Plan) -> usize {
    pl.run.env.get(super::canon::NVCC_THREADS_ENV).and_then(|t| t.parse().ok()).unwrap_or(1)
}

/// Whether the plan can order its units: side by side, through the hooks, several nvcc threads.
pub fn orderable(pl: &Plan) -> bool {
    pl.hooks.is_some() && pl.side_by_side.is_some() && threads(pl) > 1
}

/// Name the plan's first units and where their order comes from (the sources above).
/// `earlier`: another variant of the same revision builds before this one in the run:
/// the order is then settled at build time ([`settle`]).
pub fn attach(pl: &mut Plan, cache_dir: &Path, remote: Option<&Remote>, earlier: bool) {
    if !orderable(pl) {
        return;
    }
    let (order, first) = if earlier { (Some(Order::AtBuild), Vec::new()) } else { resolve(pl, cache_dir, remote) };
    if let Some(s) = pl.side_by_side.as_mut() {
        (s.order, s.first_units) = (order, first);
    }
}

/// At build time, a plan whose order is settled then: its first units from what is
/// known now (an earlier variant of the run has just measured the revision). The
/// plan's line said so; the provenance and the key hold none of it.
pub fn settle(pl: &Plan, cache_dir: &Path, remote: Option<&Remote>) -> Option<Plan> {
    let s = pl.side_by_side.as_ref()?;
    if s.order != Some(Order::AtBuild) {
        return None;
    }
    let mut settled = pl.clone();
    let (order, first) = resolve(&mut settled, cache_dir, remote);
    let s = settled.side_by_side.as_mut()?;
    (s.order, s.first_units) = (order, first);
    Some(settled)
}

/// The order and the first units from the first source that has a history of the
/// revision, else a prediction; a history that is not used is a warning of the plan.
fn resolve(pl: &mut Plan, cache_dir: &Path, remote: Option<&Remote>) -> (Option<Order>, Vec<String>) {
    let (rev, jobs, th) = (pl.source.rev.clone(), pl.side_by_side.as_ref().map_or(1, |s| s.jobs), threads(pl));
    let measured = |from: &str, t: &Times| (Some(Order::Measured { from: from.into() }), choose(t, th, jobs));
    if let Some(t) = unit_times::load(cache_dir, &rev) {
        return measured(FROM_HERE, &t);
    }
    if history_file(cache_dir, &rev)
        .and_then(|f| Tree::open(f.parent()?, "unit-time folder").ok()?.kind(f.file_name()?).ok())
        .is_some()
    {
        pl.warnings.push(format!(
            "the unit-time history of {rev} in this cache is not a valid one: ignored (it can only choose an order)"
        ));
    }
    if let Some(place) = shared_place(pl) {
        match redis::get(&place) {
            Ok(Some(t)) => return measured(FROM_SHARED, &t),
            Ok(None) => {}
            Err(why) => pl.warnings.push(format!("the shared compiler cache's unit-time history not used: {why}")),
        }
    }
    if let Some(r) = remote {
        match r.history(&rev) {
            Ok(History::Trusted(t)) => return measured(FROM_TEAM, &t),
            Ok(History::Missing) => {}
            Ok(History::Rejected(why)) => pl.warnings.push(format!("the remote unit-time history not used: {why}")),
            Err(e) => pl.warnings.push(format!("the remote unit-time history not used: {e:#}")),
        }
    }
    if let Some((other, t)) = unit_times::latest_other(cache_dir, &rev) {
        let first = choose(&t, th, jobs);
        if !first.is_empty() {
            return (Some(Order::Predicted { from: other }), first);
        }
    }
    let first = from_source(pl, th, jobs);
    if first.is_empty() {
        return (None, first);
    }
    (Some(Order::Predicted { from: FROM_SOURCE.into() }), first)
}

/// The Redis place of the revision's history when the build's compiler cache is a Redis storage.
fn shared_place(pl: &Plan) -> Option<redis::Place> {
    let h = pl.hooks.as_ref()?;
    let Some(CompilerCache::Remote { url, backend: Backend::Redis }) = &h.compiler_cache else { return None };
    redis::place(url, &pl.source.rev).ok()
}

/// A predicted order from the source at the pin: the `.cu` files setup.py names, the
/// longest (by size) first, each under the object paths a build gives it (torch's
/// `build_temp/<source>.o`, and `build_temp/<extension>/<stem>.o`).
fn from_source(pl: &Plan, threads: usize, jobs: usize) -> Vec<String> {
    let (Some(tc), Ok(tree)) = (pl.toolchain(), pl.tree().strip_prefix(pl.build_dir())) else { return Vec::new() };
    let Some(setup) = forge_store::source::show(&pl.source.mirror, &pl.source.rev, "setup.py") else {
        return Vec::new();
    };
    let mut sizes = Times::new();
    for cu in setup.split(['"', '\'']).filter(|t| t.ends_with(".cu") && unit_times::valid_unit(t)).take(256) {
        if let Some(text) = forge_store::source::show(&pl.source.mirror, &pl.source.rev, cu) {
            sizes.insert(cu.to_string(), text.len() as u64);
        }
    }
    let temp = format!("build/temp.linux-{}-cpython-{}", pl.variant.arch, tc.python_tag.trim_start_matches("cp"));
    let base = tree.join(&temp);
    let mut names = Vec::new();
    for cu in choose(&sizes, threads, jobs) {
        let stem = cu.trim_end_matches(".cu");
        names.push(base.join(format!("{stem}.o")));
        let file = stem.rsplit('/').next().unwrap_or(stem);
        names.extend(pl.interface.extensions.iter().map(|e| base.join(e).join(format!("{file}.o"))));
    }
    names.into_iter().map(|n| n.to_string_lossy().into_owned()).filter(|n| unit_times::valid_unit(n)).collect()
}

/// Each unit's compile time from the build's kept ninja logs (the last entry of an
/// output wins; outputs outside the build root are left out), for [`keep`].
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
                if unit_times::valid_unit(&unit) && times.len() < unit_times::MAX_UNITS {
                    times.insert(unit, e.saturating_sub(s));
                }
            }
        }
    }
    times
}

/// After a build: its measured history replaces the revision's in this cache and, when
/// the build's compiler cache is a Redis storage that stayed on, in that storage (a
/// failure there is a note). Nothing measured (no ninja logs) leaves the old ones.
pub fn keep(pl: &Plan, cache_dir: &Path, times: &Times, shared_on: bool, notes: &mut Vec<String>) {
    if times.is_empty() {
        return;
    }
    unit_times::store(cache_dir, &pl.source.rev, times);
    if let (Some(place), true) = (shared_place(pl), shared_on) {
        if let Err(why) = redis::set(&place, times) {
            notes.push(format!("the unit-time history was not kept in the shared compiler cache: {why}"));
        }
    }
}

/// The build's note when its order was settled at build time ([`settle`]).
pub fn settled_note(s: &super::plan::SideBySide) -> String {
    let order = s.order.as_ref().map_or("none: no history and no prediction".into(), describe_order);
    match describe(&s.first_units, s.order.as_ref()) {
        Some(first) => format!("unit order settled at build time: {order}; {first}"),
        None => format!("unit order settled at build time: {order}; no unit first"),
    }
}

/// The plan's line about the order's source.
pub fn describe_order(order: &Order) -> String {
    match order {
        Order::Measured { from } => format!("measured ({from})"),
        Order::Predicted { from } if from == FROM_SOURCE => "predicted (from source: the .cu files setup.py names, by size)".into(),
        Order::Predicted { from } => format!("predicted (from {}: the most recently measured revision in this cache)", &from[..from.len().min(12)]),
        Order::AtBuild => "settled at build time (from what an earlier variant of this run measures; else as for a first build); the build's notes say it".into(),
    }
}

/// The plan's line about the first units, or None.
pub fn describe(first: &[String], order: Option<&Order>) -> Option<String> {
    let here = "the longest in this machine's last build of the revision";
    let source = match order {
        None => here,
        Some(Order::Measured { from }) if from == FROM_HERE => here,
        Some(Order::Measured { .. }) => "the longest in the revision's measured history",
        _ => "the longest predicted",
    };
    let mut stems: Vec<&str> = first.iter().map(|u| u.rsplit('/').next().unwrap_or(u)).collect();
    stems.dedup();
    (!first.is_empty()).then(|| {
        format!(
            "{} unit(s) first, {source} (jobs / nvcc threads): {}; every other CUDA unit compiles at nice {LATER_NICE} (not keyed: the same steps and bytes)",
            stems.len(),
            stems.join(", ")
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
