//! `cargo xtask bench lock-check`: `deepep-forge lock check` as a whole
//! process on NeMo-RL's 2026-08-22-main, against `python3 -c "import tomllib"`
//! parsing the same two files as a whole process, in the same run. Prints
//! both medians and the ratio (goal: <= 0.10). `DEEPEP_FORGE_NEMO_RL` overrides
//! the fixtures folder, `DEEPEP_FORGE_BENCH_RUNS` the number of runs.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Cmd, Shell};

const RUNS_DEFAULT: usize = 21;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Run the command `make` gives `runs` times (after one warm-up), returning the wall time of each.
fn time<'a>(runs: usize, mut make: impl FnMut() -> Cmd<'a>, ok: impl Fn(i32) -> bool) -> Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(runs);
    for i in 0..=runs {
        let c = make().quiet().ignore_status();
        let shown = c.to_string();
        let t = Instant::now();
        let o = c.output().with_context(|| format!("running {shown}"))?;
        let dt = t.elapsed();
        let code = o.status.code().unwrap_or(-1);
        if !ok(code) {
            bail!("{shown} exited {code}: {}", String::from_utf8_lossy(&o.stderr));
        }
        if i > 0 {
            out.push(dt);
        }
    }
    Ok(out)
}

pub fn run(root: &Path) -> Result<()> {
    let fixtures = std::env::var_os("DEEPEP_FORGE_NEMO_RL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/fixtures/nemo-rl"));
    let case = fixtures.join("2026-08-22-main");
    if !case.join("uv.lock").exists() {
        bail!(
            "{} is missing: the benchmark needs NeMo-RL's fixtures (set DEEPEP_FORGE_NEMO_RL to their folder)",
            case.display()
        );
    }
    let runs: usize =
        std::env::var("DEEPEP_FORGE_BENCH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(RUNS_DEFAULT);
    let sh = Shell::new()?;
    sh.change_dir(root);
    cmd!(sh, "cargo build --quiet --release -p deepep-forge").run()?;
    let exe: PathBuf = root.join("target/release/deepep-forge");
    let pins = root.join("pins.toml");

    // The check finds problems on this case (exit 1); anything else is a failure.
    let (pyproject, lock) = (case.join("pyproject.toml"), case.join("uv.lock"));
    let forge = time(
        runs,
        || cmd!(sh, "{exe} lock check --format json --pins {pins} --project {case}"),
        |code| code == 0 || code == 1,
    )?;
    let script = "import sys, tomllib\nfor f in sys.argv[1:]:\n    tomllib.load(open(f, 'rb'))";
    let python = time(runs, || cmd!(sh, "python3 -c {script} {pyproject} {lock}"), |code| code == 0)?;
    let (f, p) = (median(forge), median(python));
    println!("lock check on {} ({runs} runs each, whole processes)", case.display());
    println!("  deepep-forge lock check      median {:8.2} ms", f.as_secs_f64() * 1e3);
    println!("  python3 tomllib (same files) median {:8.2} ms", p.as_secs_f64() * 1e3);
    println!("  ratio {:.3} (goal <= 0.10)", f.as_secs_f64() / p.as_secs_f64());
    Ok(())
}
