//! `--deep-ep`: run the installed deep_ep's own HybridEP round trip (one
//! Python process per GPU, script `hybrid_ep_roundtrip.py`) and turn it into
//! one verdict row. Owns the child processes (always reaped, killed at the
//! deadline); must not touch a GPU itself.
use std::path::Path;
use std::process::Child;

use crate::error::Failure;
use crate::process::Cmd;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::verdict::Check;

const SCRIPT: &str = include_str!("hybrid_ep_roundtrip.py");

/// What the HybridEP round trip gave.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    /// deep_ep could not be imported (or no Python): nothing was run.
    Unavailable { python: String, detail: String },
    /// It ran; `result` is rank 0's JSON line.
    Ran { python: String, result: serde_json::Value },
    /// It ran and failed (a rank died, timed out or printed an error).
    Failed { python: String, detail: String },
}

impl Outcome {
    pub fn check(&self) -> Check {
        match self {
            Outcome::Unavailable { python, detail } => {
                Check::warn("deep-ep-roundtrip", format!("not run: {python} cannot import deep_ep ({detail})"))
                    .fix("pass --python with the environment that has the DeepEP wheel installed")
            }
            Outcome::Ran { result, .. } if result["ok"] == true => Check::pass(
                "deep-ep-roundtrip",
                format!(
                    "HybridEP combine(dispatch(x)) == topk·x exactly on {} ranks (R = {}), {:.2} ms per round trip",
                    result["ranks"],
                    result["ranks_per_domain"],
                    result["roundtrip_ms"].as_f64().unwrap_or(0.0)
                ),
            ),
            Outcome::Ran { result, .. } => Check::fail(
                "deep-ep-roundtrip",
                format!("HybridEP round trip wrong: {} mismatching elements", result["mismatches"]),
            ),
            Outcome::Failed { detail, .. } => {
                Check::fail("deep-ep-roundtrip", format!("HybridEP round trip failed: {detail}"))
            }
        }
    }
}

/// Run the round trip on `world` GPUs (0..world) through `python`.
pub fn run(python: Option<&Path>, world: u32, timeout_s: u64) -> Outcome {
    let py = python.map(|p| p.display().to_string()).unwrap_or_else(|| "python3".into());
    match Cmd::new(&py, "import deep_ep").args(["-c", "import deep_ep"]).capture() {
        Err(e) => return Outcome::Unavailable { python: py, detail: e.to_string() },
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("import failed").to_string();
            return Outcome::Unavailable { python: py, detail: last };
        }
        Ok(_) => {}
    }
    match launch(&py, world, timeout_s) {
        Ok(result) => Outcome::Ran { python: py, result },
        Err(e) => Outcome::Failed { python: py, detail: format!("{e:#}") },
    }
}

fn launch(py: &str, world: u32, timeout_s: u64) -> anyhow::Result<serde_json::Value> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("hybrid_ep_roundtrip.py");
    std::fs::write(&script, SCRIPT)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr())?.port();
    let mut children: Vec<Child> = Vec::new();
    for r in 0..world {
        let mut cmd = Cmd::same_group(py, format!("HybridEP round trip, rank {r}"));
        cmd.arg(&script);
        cmd.cmd
            .env("RANK", r.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("PROBE_TOKENS", "4096")
            .env("PROBE_HIDDEN", "7168")
            .env("PROBE_TOPK", "8")
            .stdout(log(dir.path(), r, "out")?)
            .stderr(log(dir.path(), r, "err")?);
        let child = cmd.spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                reap(&mut children);
                return Err(Failure::problems(format!("starting rank {r}: {e}")).into());
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(timeout_s);
    let mut status = vec![None; children.len()];
    while status.iter().any(Option::is_none) {
        for (i, c) in children.iter_mut().enumerate() {
            if status[i].is_none() {
                status[i] = c.try_wait().ok().flatten();
            }
        }
        if Instant::now() >= deadline || crate::error::check_interrupted().is_err() {
            let running: Vec<String> =
                (0..status.len()).filter(|&i| status[i].is_none()).map(|i| i.to_string()).collect();
            reap(&mut children);
            return Err(
                Failure::problems(format!("rank(s) {} still running after {timeout_s} s", running.join(", "))).into()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let read = |ext: &str| std::fs::read_to_string(dir.path().join(format!("rank0.{ext}"))).unwrap_or_default();
    let out0 = read("out");
    let last = out0.lines().rev().find(|l| l.starts_with('{')).unwrap_or("");
    let result: serde_json::Value = serde_json::from_str(last).unwrap_or(serde_json::Value::Null);
    let failed: Vec<String> = status
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_some_and(|s| s.success()))
        .map(|(i, s)| format!("rank {i} exited with {}", s.map(|s| s.to_string()).unwrap_or_default()))
        .collect();
    if !failed.is_empty() || result.is_null() {
        let err0 = read("err");
        let why = result["error"]
            .as_str()
            .map(str::to_string)
            .or_else(|| err0.lines().last().map(str::to_string))
            .unwrap_or_default();
        return Err(Failure::problems(format!("{}: {why}", failed.join(", "))).into());
    }
    Ok(result)
}

/// A file for a rank's stdout or stderr (files, not pipes: a chatty rank never blocks).
fn log(dir: &Path, rank: u32, ext: &str) -> std::io::Result<std::fs::File> {
    std::fs::File::create(dir.join(format!("rank{rank}.{ext}")))
}

/// Kill and wait for every child we started.
fn reap(children: &mut [Child]) {
    for c in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}
