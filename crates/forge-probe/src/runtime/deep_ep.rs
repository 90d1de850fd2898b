//! `--deep-ep`: run the installed deep_ep's own round trip (one Python
//! process per GPU, script `deep_ep_roundtrip.py`): HybridEP's
//! `HybridEPBuffer`, or for an EPv2 deep_ep (DeepEP main: it has
//! `ElasticBuffer`) EPv2's `ElasticBuffer`, and turn it into one verdict row.
//! What the static probe already named against the libraries the process
//! loads (`loaded-libraries` failures: an NCCL that is not the build's) is
//! said with the import's or the round trip's failure. Owns the child processes (always reaped, killed at the
//! deadline); must not touch a GPU itself.
use std::path::Path;
use std::process::Child;

use forge_os::error::Failure;
use forge_os::process::Cmd;
use std::time::{Duration, Instant};

use serde::Serialize;

use forge_model::verdict::Check;

const SCRIPT: &str = include_str!("deep_ep_roundtrip.py");
/// The most of a rank's output read back (its last JSON line is the result).
const LOG: u64 = 64 << 20;

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
            Outcome::Ran { result, .. } if result["ok"] == true && result["api"] == "ElasticBuffer" => Check::pass(
                "deep-ep-roundtrip",
                format!(
                    "EPv2 ElasticBuffer combine(dispatch(x)) == x·(ranks reached) exactly on {} ranks (logical domain {}), {:.2} ms per round trip, run-time NCCL {} (ncclGetVersion of {})",
                    result["ranks"],
                    result["logical_domain"],
                    result["roundtrip_ms"].as_f64().unwrap_or(0.0),
                    result["nccl_runtime"].as_str().unwrap_or("?"),
                    result["nccl_library"].as_str().unwrap_or("?")
                ),
            ),
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
                format!("{} round trip wrong: {} mismatching elements", api(result), result["mismatches"]),
            ),
            Outcome::Failed { detail, .. } => Check::fail("deep-ep-roundtrip", format!("round trip failed: {detail}")),
        }
    }
}

/// The import's last line says deep_ep is not there at all (not: it is there and broken).
fn not_installed(last: &str) -> bool {
    last.starts_with("ModuleNotFoundError: No module named 'deep_ep'")
}

fn api(result: &serde_json::Value) -> &'static str {
    if result["api"] == "ElasticBuffer" {
        "EPv2 ElasticBuffer"
    } else {
        "HybridEP"
    }
}

/// Run the round trip on `world` GPUs (0..world) through `python`; `named`:
/// what the static probe found wrong with the libraries the process loads,
/// said with a failure (it was shown before anything was imported).
pub fn run(python: Option<&Path>, world: u32, timeout_s: u64, named: &[String]) -> Outcome {
    let py = python.map(|p| p.display().to_string()).unwrap_or_else(|| "python3".into());
    let because = |detail: String| match named {
        [] => detail,
        _ => format!("{detail} (named before the import: {})", named.join("; ")),
    };
    match Cmd::new(&py, "import deep_ep").args(["-c", "import deep_ep"]).capture() {
        Err(e) => return Outcome::Unavailable { python: py, detail: e.to_string() },
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("import failed").to_string();
            if named.is_empty() && not_installed(&last) {
                return Outcome::Unavailable { python: py, detail: last };
            }
            return Outcome::Failed { python: py, detail: because(format!("importing deep_ep fails: {last}")) };
        }
        Ok(_) => {}
    }
    match launch(&py, world, timeout_s) {
        Ok(result) if result["ok"] != true && !named.is_empty() => {
            Outcome::Failed { python: py, detail: because(format!("{} mismatching elements", result["mismatches"])) }
        }
        Ok(result) => Outcome::Ran { python: py, result },
        Err(e) => Outcome::Failed { python: py, detail: because(format!("{e:#}")) },
    }
}

fn launch(py: &str, world: u32, timeout_s: u64) -> anyhow::Result<serde_json::Value> {
    let dir = forge_os::fs::TempTree::new("deepep-forge-deep-ep")?;
    dir.write("deep_ep_roundtrip.py", SCRIPT.as_bytes())?;
    let script = dir.join("deep_ep_roundtrip.py");
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr())?.port();
    let mut children: Vec<Child> = Vec::new();
    for r in 0..world {
        let mut cmd = Cmd::same_group(py, format!("deep_ep round trip, rank {r}"));
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
            .stdout(log(&dir, r, "out")?)
            .stderr(log(&dir, r, "err")?);
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
        if Instant::now() >= deadline || forge_os::error::check_interrupted().is_err() {
            let running: Vec<String> =
                (0..status.len()).filter(|&i| status[i].is_none()).map(|i| i.to_string()).collect();
            reap(&mut children);
            return Err(
                Failure::problems(format!("rank(s) {} still running after {timeout_s} s", running.join(", "))).into()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let read = |ext: &str| {
        let bytes = dir.read(format!("rank0.{ext}"), LOG).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    };
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
fn log(dir: &forge_os::fs::Tree, rank: u32, ext: &str) -> anyhow::Result<std::process::Stdio> {
    dir.create_new(format!("rank{rank}.{ext}"), 0o600).map(std::process::Stdio::from)
}

/// Kill and wait for every child we started.
fn reap(children: &mut [Child]) {
    for c in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Python without deep_ep: with a library the static probe named, the import's
    /// failure is a FAIL that repeats it; without, the round trip is simply not run.
    #[test]
    fn an_import_failure_repeats_what_the_static_probe_named() {
        let py = Path::new("python3");
        let named = vec!["libnccl.so.2 -> /x/libnccl.so.2 (RUNPATH) is NCCL 2.28.9, built against 2.30.7".to_string()];
        let c = run(Some(py), 1, 30, &named).check();
        assert_eq!(c.status, forge_model::verdict::Status::Fail, "{c:?}");
        assert!(c.evidence.contains("importing deep_ep fails: ModuleNotFoundError"), "{c:?}");
        assert!(c.evidence.contains("(named before the import: libnccl.so.2 -> /x/libnccl.so.2"), "{c:?}");
        let c = run(Some(py), 1, 30, &[]).check();
        assert_eq!(c.status, forge_model::verdict::Status::Warn, "{c:?}");
    }

    /// An installed deep_ep whose import fails (an undefined symbol) is a FAIL
    /// even when nothing was named before: it is there and broken, not absent.
    #[test]
    fn an_installed_deep_ep_that_cannot_load_fails() {
        let dir = tempfile::tempdir().unwrap();
        let py = dir.path().join("python");
        std::fs::write(
            &py,
            "#!/bin/sh\necho 'ImportError: /x/deep_ep/_C.so: undefined symbol: nvshmem_selected_device_transport, version NVSHMEM' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&py, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let c = run(Some(&py), 1, 30, &[]).check();
        assert_eq!(c.status, forge_model::verdict::Status::Fail, "{c:?}");
        assert!(
            c.evidence.contains("importing deep_ep fails: ImportError: /x/deep_ep/_C.so: undefined symbol"),
            "{c:?}"
        );
    }

    #[test]
    fn an_epv2_result_reads_as_elastic_buffer() {
        let result = serde_json::json!({"ok": true, "api": "ElasticBuffer", "ranks": 8, "logical_domain": [1, 8],
                                        "roundtrip_ms": 1.5, "nccl_runtime": "2.30.7", "nccl_library": "/s/libnccl.so.2"});
        let c = Outcome::Ran { python: "p".into(), result }.check();
        assert!(
            c.evidence.starts_with("EPv2 ElasticBuffer combine(dispatch(x)) == x·(ranks reached) exactly on 8 ranks"),
            "{c:?}"
        );
        assert!(c.evidence.ends_with("run-time NCCL 2.30.7 (ncclGetVersion of /s/libnccl.so.2)"), "{c:?}");
    }
}
