//! `cargo xtask bench build`: a build against its critical path. Two whole
//! `build-wheel --no-cache --no-compiler-cache` processes of one variant, in
//! this order: 1. `--serial-extensions` (the plan's own `pip wheel`, extensions
//! one after another: the baseline), 2. side by side (the default). For each:
//! wall time, the ninja logs the build kept (`<log>.ninja/`, one per extension
//! or the serial build's one): compile units, their summed time, the longest
//! unit (the critical path's compile part: link and packing come on top), the
//! ratio of wall to that longest unit and to the baseline, and the sha256
//! (which must be one). Takes build-cache's options (`--pins`, `--source`,
//! `--python`, `--variant`, `--work`, `--steps`); default: the fixture, which
//! has no ninja logs (its setup.py compiles without torch).
//!
//! With `--compare-variant V2` (e.g. `h100-b200`, `9.0 10.0`, after `h100`,
//! `9.0`): 2. `--variant` side by side, 3. V2 side by side (its units'
//! gencodes at once: nvcc `--threads`, the plan's default), 4. V2 with
//! `DEEPEP_FORGE_NVCC_THREADS=1` (one gencode after the other, as before);
//! prints V2 / `--variant` (goal <= 1.15x) and whether 3 and 4 are one sha256.
//! Step 5: V2 in the unit order (`builder::unit_order`) that the last step-2
//! build of the same revision left (its `unit-times` copied into step 5's
//! cache): what a two-arch build gets on a machine that built the revision before.
//! Steps may repeat, in the order given: `--steps 2,3,2,3,2` alternates the two
//! builds on one machine, whose speed drifts from build to build; the ratio is
//! then of the medians, and each step-3 (and step-5) run is also set against the mean of the
//! step-2 runs just before and after it (`run-NN-step-S.json` in `--work` keeps each run).
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use xshell::{cmd, Shell};

use super::build::timed_output;
use super::compiler_cache::CacheBenchArgs;

/// One ninja log: its units (output -> start, end in ms, the last entry per output).
struct NinjaLog {
    name: String,
    units: BTreeMap<String, (u64, u64)>,
}

impl NinjaLog {
    fn read(p: &Path) -> Result<NinjaLog> {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let mut units = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split('\t').collect();
            if let [start, end, _, out, ..] = f[..] {
                units.insert(out.to_string(), (start.parse()?, end.parse()?));
            }
        }
        let name = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(NinjaLog { name: name.trim_end_matches(".ninja_log").to_string(), units })
    }

    fn summed(&self) -> f64 {
        self.units.values().map(|(s, e)| e.saturating_sub(*s)).sum::<u64>() as f64 / 1000.0
    }

    /// The longest unit: seconds and its output's file name.
    fn longest(&self) -> (f64, String) {
        self.units
            .iter()
            .map(|(o, (s, e))| (e.saturating_sub(*s) as f64 / 1000.0, o.rsplit('/').next().unwrap_or(o).to_string()))
            .fold((0.0, String::new()), |a, b| if b.0 > a.0 { b } else { a })
    }
}

struct Measured {
    wall: f64,
    sha256: String,
    logs: Vec<NinjaLog>,
}

fn build(a: &CacheBenchArgs, work: &Path, step: u8) -> Result<Measured> {
    let dir = work.join(format!("build-{step}"));
    std::fs::create_dir_all(&dir)?;
    let variant = match step {
        3..=5 => a.compare_variant.as_deref().context("steps 3, 4 and 5 need --compare-variant")?,
        _ => &a.variant,
    };
    let (request, mut env) = super::compiler_cache::request(a, &dir, variant)?;
    if step == 4 {
        env.push(("DEEPEP_FORGE_NVCC_THREADS", PathBuf::from("1")));
    }
    // Only step 5 builds in an order: the others forget the history their last run left.
    let _ = std::fs::remove_dir_all(dir.join("cache/unit-times"));
    if step == 5 {
        copy_unit_times(work, &dir)?;
    }
    let mut args: Vec<OsString> =
        ["build-wheel", "--no-cache", "--no-compiler-cache", "--format", "json"].iter().map(OsString::from).collect();
    args.extend(request.args());
    args.extend(["--out".into(), dir.join("out").into()]);
    if step == 1 {
        args.push("--serial-extensions".into());
    }
    let sh = Shell::new()?;
    sh.change_dir(&dir);
    let exe = std::env::current_exe()?;
    let (sample, output) = timed_output(cmd!(sh, "{exe} {args...}").envs(env))?;
    let j: serde_json::Value = serde_json::from_slice(&output.stdout).context("build-wheel --format json output")?;
    let r = &j["results"][0];
    for n in r["notes"].as_array().into_iter().flatten().filter_map(|n| n.as_str()) {
        if n.starts_with("unit order") {
            println!("step {step}: {n}");
        }
    }
    let log = PathBuf::from(r["log"].as_str().context("build-wheel reported no log")?);
    let mut logs = Vec::new();
    if let Ok(rd) = std::fs::read_dir(log.with_extension("ninja")) {
        for e in rd.flatten() {
            logs.push(NinjaLog::read(&e.path())?);
        }
    }
    let rec = serde_json::json!({ "step": step, "variant": variant, "wall": sample.wall.as_secs_f64(), "sha256": r["sha256"], "log": log });
    std::fs::write(work.join(format!("step-{step}.json")), rec.to_string())?;
    Ok(Measured { wall: sample.wall.as_secs_f64(), sha256: r["sha256"].as_str().unwrap_or("").into(), logs })
}

/// Step 5's history: step 2's unit times, when its build kept any (ninja logs: a
/// torch build; the fixture has none, so step 5 builds as step 3 and says so).
fn copy_unit_times(work: &Path, dir: &Path) -> Result<()> {
    let times = work.join("build-2/cache/unit-times");
    let Ok(rd) = std::fs::read_dir(&times) else {
        eprintln!("step 5: no unit times from step 2 ({} is missing): built without an order", times.display());
        return Ok(());
    };
    let to = dir.join("cache/unit-times");
    std::fs::create_dir_all(&to)?;
    for e in rd.flatten() {
        std::fs::copy(e.path(), to.join(e.file_name()))?;
    }
    Ok(())
}

fn print(label: &str, m: &Measured, baseline: Option<f64>) {
    let longest = m.logs.iter().map(|l| l.longest()).fold((0.0, String::new()), |a, b| if b.0 > a.0 { b } else { a });
    let vs = baseline.map(|b| format!("  {:.2}x the serial build", m.wall / b)).unwrap_or_default();
    let cp = if longest.0 > 0.0 { format!("  {:.2}x the longest unit", m.wall / longest.0) } else { String::new() };
    println!("{label:<26} {:>8.1} s wall{cp}{vs}  sha256 {}", m.wall, m.sha256);
    for l in &m.logs {
        let (s, o) = l.longest();
        println!(
            "    ninja {:<24} {:>4} units, {:>8.1} s summed, longest {:>6.1} s ({o})",
            l.name,
            l.units.len(),
            l.summed(),
            s
        );
    }
}

pub fn run(a: CacheBenchArgs) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let work = a.work.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&work)?;
    let steps = match (a.steps.is_empty(), &a.compare_variant) {
        (false, _) => a.steps.clone(),
        (true, None) => vec![1, 2],
        (true, Some(_)) => vec![2, 3, 4],
    };
    let mut done: Vec<(u8, Measured)> = Vec::new();
    let total = steps.len();
    for (i, n) in steps.into_iter().enumerate() {
        anyhow::ensure!(
            (1..=5).contains(&n),
            "step {n}: steps are 1 (serial), 2 (side by side), 3 and 4 (--compare-variant with and without nvcc --threads), 5 (--compare-variant in step 2's unit order)"
        );
        let m = build(&a, &work, n)?;
        std::fs::copy(work.join(format!("step-{n}.json")), work.join(format!("run-{:02}-step-{n}.json", i + 1)))?;
        // Progress on stderr as each build ends (a sequence takes many minutes); the table comes last.
        eprintln!("run {}/{total}: step {n} {:.1} s wall, sha256 {}", i + 1, m.wall, m.sha256);
        done.push((n, m));
    }
    let two = a.compare_variant.as_deref().unwrap_or("");
    let label = |n: u8| match n {
        1 => format!("1. {} serial (pip's order)", a.variant),
        2 => format!("2. {} side by side", a.variant),
        3 => format!("3. {two} side by side"),
        4 => format!("4. {two}, nvcc --threads 1"),
        _ => format!("5. {two}, unit order of 2"),
    };
    let base = median(&walls(&done, 1));
    for (n, m) in &done {
        print(&label(*n), m, if *n == 2 { base } else { None });
    }
    summarize(&done, &a.variant, two);
    Ok(())
}

fn walls(done: &[(u8, Measured)], step: u8) -> Vec<f64> {
    done.iter().filter(|(n, _)| *n == step).map(|(_, m)| m.wall).collect()
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let k = v.len();
    (k > 0).then(|| if k % 2 == 1 { v[k / 2] } else { (v[k / 2 - 1] + v[k / 2]) / 2.0 })
}

/// Whether every run of each step in `steps` gave one sha256.
fn one_sha(done: &[(u8, Measured)], steps: &[u8]) -> &'static str {
    let shas: std::collections::BTreeSet<&str> =
        done.iter().filter(|(n, _)| steps.contains(n)).map(|(_, m)| m.sha256.as_str()).collect();
    if shas.len() == 1 {
        "one (bit-identical)"
    } else {
        "DIFFERENT"
    }
}

/// Each run of `step` against the mean of the step-2 runs just before and after it
/// (the machine drifts between builds: a bracket cancels a steady drift).
fn bracketed(done: &[(u8, Measured)], step: u8) -> Vec<f64> {
    let mut r = Vec::new();
    for (i, (n, m)) in done.iter().enumerate() {
        let before = done[..i].iter().rev().find(|(k, _)| *k == 2);
        let after = done[i + 1..].iter().find(|(k, _)| *k == 2);
        if let (true, Some((_, b)), Some((_, c))) = (*n == step, before, after) {
            r.push(m.wall / ((b.wall + c.wall) / 2.0));
        }
    }
    r
}

/// The ratios: medians of each step's runs (several runs of a step, alternated with
/// step 2, e.g. `--steps 2,3,2,3,2`), bracketed ratios, sha256 agreement.
fn summarize(done: &[(u8, Measured)], variant: &str, two: &str) {
    let med = |s: u8| median(&walls(done, s));
    if let (Some(_), Some(_)) = (med(1), med(2)) {
        println!("sha256 1, 2: {}", one_sha(done, &[1, 2]));
    }
    for (step, how) in [(3, ""), (5, " in the unit order of 2")] {
        against_one_arch(done, step, &format!("{two}{how}"), variant);
    }
    if med(2).is_some() {
        println!("sha256 of every {variant} run: {}", one_sha(done, &[2]));
    }
    if [3, 4, 5].iter().any(|s| med(*s).is_some()) {
        println!("sha256 of every {two} run: {}", one_sha(done, &[3, 4, 5]));
    }
    if let (Some(t), Some(o)) = (med(3), med(4)) {
        println!("{two} with / without nvcc --threads: {:.2}x wall", t / o);
    }
}

/// A two-arch step against step 2: the ratio of the medians, and each run against the
/// step-2 runs around it.
fn against_one_arch(done: &[(u8, Measured)], step: u8, two: &str, variant: &str) {
    let (Some(one), Some(t)) = (median(&walls(done, 2)), median(&walls(done, step))) else { return };
    let (n2, n) = (walls(done, 2).len(), walls(done, step).len());
    println!("{two} / {variant}: {:.2}x wall, medians of {n} and {n2} runs (goal <= 1.15x)", t / one);
    let b = bracketed(done, step);
    if let Some(m) = median(&b) {
        let each: Vec<String> = b.iter().map(|x| format!("{x:.2}")).collect();
        println!(
            "{two} / {variant}, each run against the {variant} runs around it: {} (median {m:.2}x)",
            each.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(wall: f64) -> Measured {
        Measured { wall, sha256: "s".into(), logs: Vec::new() }
    }

    #[test]
    fn a_run_is_set_against_the_runs_around_it() {
        let done = vec![(2, m(80.0)), (3, m(99.0)), (2, m(100.0)), (3, m(110.0))];
        assert_eq!(bracketed(&done, 3), vec![1.1], "the last run has no step 2 after it");
        assert_eq!(median(&walls(&done, 2)), Some(90.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(one_sha(&done, &[2, 3]), "one (bit-identical)");
    }
}
