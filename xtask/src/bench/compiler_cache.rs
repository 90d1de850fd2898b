//! `cargo xtask bench build-cache`: what the compiler cache saves, and that it
//! changes no byte. Every figure is a whole `build-wheel --no-cache` process
//! (wheel cache off), each ratio against a baseline measured in the same run:
//! 1. fresh build of VARIANT, no compiler cache, checkout folder 1, cache folder 1 (baseline);
//! 2. the same with an empty compiler cache, from checkout folder 2 and cache folder 2 (cold);
//! 3. again with that cache now warm, from folder 1 (warm): goal <= 0.25 x fresh;
//! 4. with `--then VARIANT2`: VARIANT2 with the cache warm from VARIANT (after),
//!    and VARIANT2 fresh without a cache (baseline): goal <= 0.7 x;
//!
//! and determinism: every build of VARIANT gives the same sha256 (two folders,
//! with and without the cache). Default: the mini-deepep fixture; `--pins`,
//! `--source` and `--python` point it at real DeepEP (e.g. on a GPU machine).
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::build::{timed_output, verdict, Sample};
use xshell::{cmd, Shell};

#[derive(Debug, Clone, clap::Args)]
pub struct CacheBenchArgs {
    /// The pins file (default: the fixture's tests/fixtures/demo-pins.toml).
    #[arg(long, value_name = "FILE")]
    pub pins: Option<PathBuf>,
    /// build-wheel's --source (default: the pins' repo).
    #[arg(long, value_name = "PATH|URL")]
    pub source: Option<String>,
    /// build-wheel's --python (default: the tools venv's, for the fixture).
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<String>,
    /// The variant rebuilt (default: `demo`).
    #[arg(long, default_value = "demo")]
    pub variant: String,
    /// A second variant built after the first with the cache warm (e.g. h100-multinode after h100).
    #[arg(long, value_name = "VARIANT2")]
    pub then: Option<String>,
    /// Work folder (default: a temporary one); keeps the wheels and logs.
    #[arg(long, value_name = "DIR")]
    pub work: Option<PathBuf>,
    /// Run only these steps (e.g. `4` then, in a second command on the same machine, `5`):
    /// each step's time and sha256 are kept in `--work`, and the ratios are printed from
    /// whatever steps that folder holds (one machine command may not fit all five
    /// builds of real DeepEP).
    #[arg(long, value_delimiter = ',', value_name = "N,...", requires = "work")]
    pub steps: Vec<u8>,
    /// nccl-reuse with --pins: another DeepEP revision (full sha) with the same NCCL
    /// submodule commit as the pin (docs/reproducibility.md lists them).
    #[arg(long, value_name = "REV")]
    pub rev2: Option<String>,
    /// build: a second variant built side by side after `--variant` (e.g. two
    /// architectures after one), with and without nvcc `--threads` (steps 2, 3, 4), and
    /// in the unit order step 2's build left (step 5; alternate: `--steps 2,5,2,5,2`).
    #[arg(long, value_name = "VARIANT2")]
    pub compare_variant: Option<String>,
}

struct Build {
    sample: Sample,
    sha256: String,
    note: String,
}

fn forge(a: &CacheBenchArgs, work: &Path, folder: &str, variant: &str, cc: Option<&std::ffi::OsStr>) -> Result<Build> {
    let dir = work.join(folder);
    let out = dir.join(format!("out-{variant}-{}", if cc.is_some() { "cc" } else { "plain" }));
    let exe = std::env::current_exe()?;
    let (request, env) = request(a, &dir, variant)?;
    let mut args: Vec<OsString> =
        ["build-wheel", "--no-cache", "--format", "json"].iter().map(OsString::from).collect();
    args.extend(request.args());
    args.extend(["--out".into(), out.clone().into()]);
    match cc {
        Some(d) => args.extend(["--compiler-cache".into(), d.into()]),
        None => args.push("--no-compiler-cache".into()),
    };
    // Checkout folder: the fixture's pins name a folder relative to the pins file, so
    // the process runs from `folder` (its own working directory) either way.
    std::fs::create_dir_all(&dir)?;
    let sh = Shell::new()?;
    sh.change_dir(&dir);
    let c = cmd!(sh, "{exe} {args...}").envs(env);
    let (sample, output) = timed_output(c)?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let j: serde_json::Value = serde_json::from_str(&stdout).context("build-wheel --format json output")?;
    let r = &j["results"][0];
    let note = r["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str())
        .find(|n| n.starts_with("compiler cache"))
        .unwrap_or("")
        .to_string();
    Ok(Build { sample, sha256: r["sha256"].as_str().unwrap_or("").to_string(), note })
}

/// The build request these options make (real DeepEP with `--pins`, else the fixture
/// built by the tools venv's Python with its CUDA) and the environment it needs.
pub(super) fn request(
    a: &CacheBenchArgs,
    dir: &Path,
    variant: &str,
) -> Result<(super::Request, Vec<(&'static str, PathBuf)>)> {
    let mut env: Vec<(&str, PathBuf)> = Vec::new();
    let pins = match &a.pins {
        Some(p) => std::path::absolute(p)?,
        None => super::project_root().join("tests/fixtures/demo-pins.toml"),
    };
    let python: Option<OsString> = match (&a.python, a.pins.is_none()) {
        (Some(p), _) => Some(p.into()),
        (None, true) => {
            let t = super::build::tools()?;
            env.push(("CUDA_HOME", t.cuda_home().to_path_buf()));
            Some(t.python.clone().into())
        }
        _ => None,
    };
    let request = super::Request {
        pins,
        source: match (&a.source, a.pins.is_none()) {
            (Some(s), _) => Some(s.into()),
            // the fixture's pins name DeepEP's URL (pins files name remote repositories only)
            (None, true) => Some(super::project_root().join("tests/fixtures/mini-deepep").into()),
            _ => None,
        },
        variant: variant.to_string(),
        python,
        cache_dir: dir.join("cache"),
    };
    Ok((request, env))
}

pub fn run(a: CacheBenchArgs) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let work = a.work.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&work)?;
    let cc = work.join("compiler-cache");
    let v = a.variant.as_str();
    let v2 = a.then.as_deref();
    let steps: Vec<u8> = if a.steps.is_empty() {
        if v2.is_some() {
            vec![1, 2, 3, 4, 5]
        } else {
            vec![1, 2, 3]
        }
    } else {
        a.steps.clone()
    };
    for n in steps {
        let (label, folder, variant, cache) = match (n, v2) {
            (1, _) => (format!("1. {v} fresh, no compiler cache (folder 1)"), "folder-1", v, None),
            (2, _) => (format!("2. {v} cold compiler cache (folder 2)"), "folder-2", v, Some(cc.as_os_str())),
            (3, _) => (format!("3. {v} warm compiler cache (folder 1)"), "folder-1", v, Some(cc.as_os_str())),
            (4, Some(v2)) => (format!("4. {v2} after {v} (cache warm from {v})"), "folder-2", v2, Some(cc.as_os_str())),
            (5, Some(v2)) => (format!("5. {v2} fresh, no compiler cache (folder 1)"), "folder-1", v2, None),
            _ => anyhow::bail!("step {n}: steps are 1-3, and 4-5 with --then VARIANT2"),
        };
        let b = forge(&a, &work, folder, variant, cache)?;
        println!(
            "{label:<48} {:>8.1} s wall {:>8.1} s CPU  sha256 {}  {}",
            b.sample.wall.as_secs_f64(),
            b.sample.cpu.as_secs_f64(),
            b.sha256,
            b.note
        );
        let rec = serde_json::json!({ "step": n, "variant": variant, "wall": b.sample.wall.as_secs_f64(), "sha256": b.sha256 });
        std::fs::write(work.join(format!("step-{n}.json")), rec.to_string())?;
    }
    report(&work, v, v2)
}

/// Ratios and sha256 agreement from the steps recorded in `work`.
fn report(work: &Path, v: &str, v2: Option<&str>) -> Result<()> {
    let step = |n: u8| -> Option<(f64, String)> {
        let j: serde_json::Value =
            serde_json::from_slice(&std::fs::read(work.join(format!("step-{n}.json"))).ok()?).ok()?;
        Some((j["wall"].as_f64()?, j["sha256"].as_str()?.to_string()))
    };
    let mut ok = true;
    if let (Some((f, _)), Some((w, _))) = (step(1), step(3)) {
        let r = w / f;
        println!("warm rebuild / fresh build: {r:.3}x  [{} goal <= 0.25x]", verdict(r <= 0.25));
    }
    if let (Some(v2), Some((after, _)), Some((fresh, _))) = (v2, step(4), step(5)) {
        let r = after / fresh;
        println!("{v2} after {v} / {v2} fresh: {r:.3}x  [{} goal <= 0.7x]", verdict(r <= 0.7));
    }
    for (name, ns) in [(v, &[1u8, 2, 3][..]), (v2.unwrap_or(""), &[4, 5][..])] {
        let shas: Vec<(u8, String)> = ns.iter().filter_map(|n| step(*n).map(|(_, s)| (*n, s))).collect();
        if shas.len() < 2 {
            continue;
        }
        let same = shas.iter().all(|(_, s)| *s == shas[0].1 && !s.is_empty());
        ok &= same;
        let list: Vec<String> = shas.iter().map(|(n, _)| n.to_string()).collect();
        println!(
            "determinism {name} (steps {}): {}",
            list.join(", "),
            if same { format!("ok, one sha256 {}", shas[0].1) } else { "DIFFERENT sha256s".to_string() }
        );
    }
    anyhow::ensure!(ok, "builds of one plan gave different wheels");
    Ok(())
}

/// `cargo xtask bench fleet-cache`: one compiler cache shared through a real Redis
/// server (Debian's `redis-server`, started on a free 127.0.0.1 port and stopped
/// after). "Machine A" (checkout folder 1, its own wheel cache) builds cold through
/// Redis; "machine B" (folder 2, another wheel cache) builds warm from it. Ratio B / A
/// in the same run (goal <= 0.3x) and one sha256 for both.
pub fn fleet(a: CacheBenchArgs) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let work = a.work.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&work)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut redis = std::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("starting redis-server (apt-get install redis-server)")?;
    let url = format!("redis://127.0.0.1:{port}");
    let t = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && t.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let v = a.variant.as_str();
    let run = || -> Result<(Build, Build)> {
        let ma = forge(&a, &work, "machine-a", v, Some(std::ffi::OsStr::new(&url)))?;
        let mb = forge(&a, &work, "machine-b", v, Some(std::ffi::OsStr::new(&url)))?;
        Ok((ma, mb))
    };
    let res = run();
    let _ = redis.kill();
    let _ = redis.wait();
    let (ma, mb) = res?;
    for (label, b) in [
        (format!("A. {v} cold, shared Redis cache (machine A)"), &ma),
        (format!("B. {v} warm from Redis (machine B)"), &mb),
    ] {
        println!(
            "{label:<48} {:>8.1} s wall {:>8.1} s CPU  sha256 {}  {}",
            b.sample.wall.as_secs_f64(),
            b.sample.cpu.as_secs_f64(),
            b.sha256,
            b.note
        );
    }
    let r = mb.sample.wall.as_secs_f64() / ma.sample.wall.as_secs_f64();
    println!("machine B / machine A: {r:.3}x  [{} goal <= 0.3x]", verdict(r <= 0.3));
    let same = ma.sha256 == mb.sha256 && !ma.sha256.is_empty();
    println!(
        "determinism {v} (A, B): {}",
        if same { format!("ok, one sha256 {}", ma.sha256) } else { "DIFFERENT sha256s".into() }
    );
    anyhow::ensure!(same, "machines A and B built different wheels");
    Ok(())
}
