//! `cargo xtask bench fleet`: the two rows on the mini-deepep fixture, each
//! ratio against a baseline measured in the same run, every figure a whole
//! `build-wheel --no-cache` process in its own folder (its own wheel cache and working
//! directory; the build root is the user's, emptied by each build):
//! 1. cold: `demo-one` (9.0) on a fresh cache folder, no compiler cache;
//! 2. machine A: `demo-one` on a fresh cache folder through a shared Redis compiler
//!    cache (Debian's `redis-server`, started on a free 127.0.0.1 port, stopped after);
//! 3. machine B: the same plan from another fresh cache folder against that Redis;
//! 4. two architectures: `demo` (9.0 10.0) on a fresh cache folder, no compiler cache,
//!    its unit order from what is there (the fixture keeps no ninja log: predicted from
//!    the source);
//!
//! and prints `Fleet, fixture: machine B / cold = N.NNx` (B over 1),
//! `Two architectures / one, first build on a fresh cache: N.NNx` (4 over 1), each
//! build's order line, and that 1, 2 and 3 gave one sha256.
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use xshell::{cmd, Shell};

use super::build::{timed_output, verdict, Sample};

/// The one-arch variant this bench adds to a copy of the fixture's pins.
const ONE: &str = "\n[[variant]]\nname = \"demo-one\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\ntopology = { gpu = \"h100\", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }\n";

struct Built {
    sample: Sample,
    sha256: String,
    notes: Vec<String>,
}

pub fn run(work: Option<PathBuf>) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let work = work.unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&work)?;
    let root = super::project_root();
    let pins = work.join("pins.toml");
    let text = std::fs::read_to_string(root.join("tests/fixtures/demo-pins.toml"))?;
    std::fs::write(&pins, format!("{text}{ONE}"))?;
    let mut redis = Redis::start(&work)?;
    let url = redis.url();
    let steps = || -> Result<[Built; 4]> {
        Ok([
            build(&work, &pins, "cold", "demo-one", None)?,
            build(&work, &pins, "machine-a", "demo-one", Some(&url))?,
            build(&work, &pins, "machine-b", "demo-one", Some(&url))?,
            build(&work, &pins, "two-fresh", "demo", None)?,
        ])
    };
    let res = steps();
    redis.stop();
    let [cold, a, b, two] = res?;
    for (label, x) in [
        ("1. demo-one cold (fresh cache, no compiler cache)", &cold),
        ("2. demo-one machine A (fresh cache, shared Redis)", &a),
        ("3. demo-one machine B (fresh cache, shared Redis)", &b),
        ("4. demo (two archs), fresh cache", &two),
    ] {
        let order = x.notes.iter().find(|n| n.starts_with("unit order")).map(String::as_str).unwrap_or("no unit order");
        let cc = x.notes.iter().find(|n| n.starts_with("compiler cache")).map(String::as_str).unwrap_or("");
        println!(
            "{label:<52} {:>7.1} s wall {:>7.1} s CPU  sha256 {}  {order}  {cc}",
            x.sample.wall.as_secs_f64(),
            x.sample.cpu.as_secs_f64(),
            x.sha256
        );
    }
    let wall = |x: &Built| x.sample.wall.as_secs_f64();
    let fleet = wall(&b) / wall(&cold);
    println!("Fleet, fixture: machine B / cold = {fleet:.2}x  [{} goal <= 0.30x]", verdict(fleet <= 0.30));
    let arch = wall(&two) / wall(&cold);
    println!(
        "Two architectures / one, first build on a fresh cache: {arch:.2}x  [{} goal <= 1.15x]",
        verdict(arch <= 1.15)
    );
    let same = [&a, &b].iter().all(|x| x.sha256 == cold.sha256) && !cold.sha256.is_empty();
    println!(
        "determinism demo-one (cold, A, B): {}",
        if same { format!("ok, one sha256 {}", cold.sha256) } else { "DIFFERENT sha256s".into() }
    );
    anyhow::ensure!(same, "cold, machine A and machine B built different wheels");
    Ok(())
}

/// One `build-wheel --no-cache` of the fixture in `work/<folder>` (its own cache folder).
fn build(work: &Path, pins: &Path, folder: &str, variant: &str, redis: Option<&str>) -> Result<Built> {
    let dir = work.join(folder);
    std::fs::create_dir_all(&dir)?;
    let tools = super::build::tools()?;
    let req = super::Request {
        pins: pins.to_path_buf(),
        source: Some(super::project_root().join("tests/fixtures/mini-deepep").into()),
        variant: variant.into(),
        python: Some(tools.python.clone().into()),
        cache_dir: dir.join("cache"),
    };
    let mut args: Vec<OsString> =
        ["build-wheel", "--no-cache", "--format", "json"].iter().map(OsString::from).collect();
    args.extend(req.args());
    args.extend(["--out".into(), dir.join("out").into()]);
    match redis {
        Some(u) => args.extend(["--compiler-cache".into(), u.into()]),
        None => args.push("--no-compiler-cache".into()),
    }
    let exe = std::env::current_exe()?;
    let sh = Shell::new()?;
    sh.change_dir(&dir);
    let c = cmd!(sh, "{exe} {args...}").env("CUDA_HOME", tools.cuda_home());
    let (sample, output) = timed_output(c)?;
    let j: serde_json::Value = serde_json::from_slice(&output.stdout).context("build-wheel --format json output")?;
    let r = &j["results"][0];
    let notes = r["notes"].as_array().into_iter().flatten().filter_map(|n| n.as_str().map(String::from)).collect();
    Ok(Built { sample, sha256: r["sha256"].as_str().unwrap_or("").to_string(), notes })
}

/// redis-server on a free loopback port, in `work`; stopped by [`Redis::stop`] or on drop.
struct Redis {
    child: std::process::Child,
    port: u16,
}

impl Redis {
    fn start(work: &Path) -> Result<Redis> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(work)
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("starting redis-server (apt-get install redis-server)")?;
        let t = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            anyhow::ensure!(t.elapsed().as_secs() < 20, "redis-server did not listen on port {port} within 20 s");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(Redis { child, port })
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
