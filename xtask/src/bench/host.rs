//! `cargo xtask bench host-facts`: `host facts --format json` on this machine
//! (every read of the node: sysfs, procfs, libibverbs' symbols, the PCI
//! devices) against `deepep-forge --version` (process start only) of the same
//! binary, in the same run: the ratio says what the reads cost over starting
//! the tool, which `srun -N 64` or a DaemonSet pays once per node.
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use forge_os::error::Exit;
use xshell::{cmd, Shell};

const RUNS: usize = 15;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn run() -> Result<Exit> {
    let root = super::project_root();
    let sh = Shell::new()?;
    sh.change_dir(&root);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    cmd!(sh, "{cargo} build --release --quiet --bin deepep-forge").run()?;
    let forge = root.join("target/release/deepep-forge");
    let time = |args: &[&str]| -> Result<Duration> {
        let mut times = Vec::new();
        for _ in 0..RUNS {
            let start = Instant::now();
            let out = cmd!(sh, "{forge} {args...}").quiet().ignore_stdout().output()?;
            times.push(start.elapsed());
            ensure!(out.status.success(), "{} {args:?} failed", forge.display());
        }
        Ok(median(times))
    };
    let base = time(&["--version"])?;
    let facts = time(&["host", "facts", "--format", "json"])?;
    println!(
        "host facts --format json: {:.1} ms; --version: {:.1} ms; ratio {:.2}x (median of {RUNS})",
        facts.as_secs_f64() * 1e3,
        base.as_secs_f64() * 1e3,
        facts.as_secs_f64() / base.as_secs_f64()
    );
    Ok(Exit::Ok)
}
