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
        3 | 4 => a.compare_variant.as_deref().context("steps 3 and 4 need --compare-variant")?,
        _ => &a.variant,
    };
    let (request, mut env) = super::compiler_cache::request(a, &dir, variant)?;
    if step == 4 {
        env.push(("DEEPEP_FORGE_NVCC_THREADS", PathBuf::from("1")));
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
    let mut done = BTreeMap::new();
    for n in steps {
        anyhow::ensure!(
            (1..=4).contains(&n),
            "step {n}: steps are 1 (serial), 2 (side by side), 3 and 4 (--compare-variant with and without nvcc --threads)"
        );
        done.insert(n, build(&a, &work, n)?);
    }
    let base = done.get(&1).map(|m| m.wall);
    let two = a.compare_variant.as_deref().unwrap_or("");
    for (n, m) in &done {
        let label = match n {
            1 => format!("1. {} serial (pip's order)", a.variant),
            2 => format!("2. {} side by side", a.variant),
            3 => format!("3. {two} side by side"),
            _ => format!("4. {two}, nvcc --threads 1"),
        };
        print(&label, m, if *n == 2 { base } else { None });
    }
    if let (Some(s), Some(p)) = (done.get(&1), done.get(&2)) {
        println!("sha256 1, 2: {}", if s.sha256 == p.sha256 { "one (bit-identical)" } else { "DIFFERENT" });
    }
    if let (Some(one), Some(t)) = (done.get(&2), done.get(&3)) {
        println!("{two} / {}: {:.2}x wall (goal <= 1.15x)", a.variant, t.wall / one.wall);
    }
    if let (Some(t), Some(o)) = (done.get(&3), done.get(&4)) {
        println!("{two} with / without nvcc --threads: {:.2}x wall", t.wall / o.wall);
        println!("sha256 3, 4: {}", if t.sha256 == o.sha256 { "one (bit-identical)" } else { "DIFFERENT" });
    }
    Ok(())
}
