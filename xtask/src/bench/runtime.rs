//! `cargo xtask bench runtime`: the runtime probe's dispatch and combine
//! kernels against the copy engine (cuMemcpyPeerAsync), measured in the same
//! run with the same bytes and direction pattern, plus the probe's wall time.
//! Needs NVIDIA GPUs (exit 3 without a driver, like `probe --run`).
use std::time::Instant;

use anyhow::{Context, Result};
use forge_os::error::Exit;

pub fn run() -> Result<Exit> {
    let sh = xshell::Shell::new()?;
    xshell::cmd!(sh, "cargo build --release --locked -p deepep-forge").run()?;
    let bin = sh.current_dir().join("target/release/deepep-forge");
    let started = Instant::now();
    let out = xshell::cmd!(sh, "{bin} probe --run --format json")
        .quiet()
        .ignore_status()
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let wall = started.elapsed().as_secs_f64();
    if !out.status.success() {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        return Ok(match out.status.code() {
            Some(3) => Exit::Environment,
            _ => Exit::Problems,
        });
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("probe JSON")?;
    let b = &v["facts"]["bandwidth"];
    let t = &v["facts"]["timings_ms"];
    if b.is_null() {
        println!("one GPU: nothing crosses between GPUs, no bandwidth to compare");
        return Ok(Exit::Ok);
    }
    println!("copy engine (baseline)  {:>7.1} GB/s", b["copy_engine_gbps"].as_f64().unwrap_or(0.0));
    for phase in ["dispatch", "combine"] {
        println!(
            "{phase:<23} {:>7.1} GB/s  ratio {:.3}",
            b[format!("{phase}_gbps")].as_f64().unwrap_or(0.0),
            b[format!("{phase}_ratio")].as_f64().unwrap_or(0.0)
        );
    }
    println!(
        "probe wall {wall:.2} s (NVRTC {:.0} ms, round trip + timing {:.0} ms)",
        t["nvrtc"].as_f64().unwrap_or(0.0),
        t["roundtrip"].as_f64().unwrap_or(0.0)
    );
    Ok(Exit::Ok)
}
