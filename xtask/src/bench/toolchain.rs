//! `toolchain`: provisioning the registry toolchain (`plan --toolchain
//! registry` with an empty deepep-forge cache, whole process: uv venv, torch,
//! reading its CUDA, the CUDA packages of that minor, `uv pip freeze`, the
//! cuda-home layout and the driver stub, then the plan) vs the same package
//! set installed by hand with one `uv venv` + one `uv pip install`, both from
//! the same warm uv cache (`target/uv-cache`; the first, unmeasured run fills
//! it from PyPI). Also a plan that finds the toolchain cached. Target: <= 2x
//! the hand install.
use std::path::Path;

use anyhow::{Context, Result};
use xshell::{cmd, Shell};

use super::build::{median, timed, tools, verdict, Sample};

const RUNS: usize = 3;

pub fn run() -> Result<()> {
    let t = tools()?;
    let root = super::project_root();
    let venv = t.python.parent().and_then(Path::parent).context("tools venv")?.to_path_buf();
    let uv = venv.join("bin/uv");
    anyhow::ensure!(uv.exists(), "no uv in {}: run .ci/setup-tools", venv.display());
    let tmp = tempfile::tempdir()?;
    let uv_cache = root.join("target/uv-cache");
    let demo = std::fs::read_to_string(root.join("tests/fixtures/demo-pins.toml"))?;
    let pins = tmp.path().join("pins.toml");
    std::fs::write(&pins, format!("{demo}\n[toolchain]\ntorch = \"2.11.0\"\ncuda = \"13.0\"\npython = \"3.12\"\n"))?;
    let sh = Shell::new()?;
    let exe = std::env::current_exe()?;
    let python = &t.python;
    let ours = |cache: &Path| -> Result<Sample> {
        let request = super::Request { pins: pins.clone(), ..super::Request::fixture(python, cache) }.args();
        let c = cmd!(sh, "{exe} plan {request...} --toolchain registry --format json")
            .env("DEEPEP_FORGE_UV", &uv)
            .env("UV_CACHE_DIR", &uv_cache)
            .env_remove("CUDA_HOME");
        timed(c)
    };
    let mut set = vec!["torch==2.11.0".to_string()];
    set.extend(forge_build::builder::registry::cuda_requirements("13.0")?);
    // The same by hand: one `uv venv`, one `uv pip install` of the same set.
    let requirements = &set;
    let by_hand = |dir: &Path| -> Result<Sample> {
        let env = dir.join("env");
        let env_python = env.join("bin/python");
        let venv = timed(
            cmd!(sh, "{uv} venv -q --relocatable --python {python} {env}")
                .env("UV_CACHE_DIR", &uv_cache)
                .env_remove("VIRTUAL_ENV"),
        )?;
        let install = timed(
            cmd!(sh, "{uv} pip install -q --python {env_python} {requirements...}")
                .env("UV_CACHE_DIR", &uv_cache)
                .env_remove("VIRTUAL_ENV"),
        )?;
        Ok(Sample { wall: venv.wall + install.wall, cpu: venv.cpu + install.cpu })
    };
    // Fill uv's cache (downloads from PyPI the first time); not measured.
    ours(&tmp.path().join("warm"))?;
    let (mut a, mut b, mut cached) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..RUNS {
        let cache = tmp.path().join(format!("ours{i}"));
        a.push(ours(&cache)?);
        cached.push(ours(&cache)?);
        b.push(by_hand(&tmp.path().join(format!("hand{i}")))?);
    }
    let (a, b, cached) = (median(&a), median(&b), median(&cached));
    let ratio = a.wall.as_secs_f64() / b.wall.as_secs_f64();
    println!(
        "by hand: uv venv + uv pip install ({} requirements), median of {RUNS}: {:.2} s wall, {:.2} s CPU",
        set.len(),
        b.wall.as_secs_f64(),
        b.cpu.as_secs_f64()
    );
    println!(
        "plan --toolchain registry, empty forge cache, median of {RUNS}:  {:.2} s wall, {:.2} s CPU",
        a.wall.as_secs_f64(),
        a.cpu.as_secs_f64()
    );
    println!(
        "plan --toolchain registry, toolchain cached, median of {RUNS}:   {:.2} s wall, {:.2} s CPU",
        cached.wall.as_secs_f64(),
        cached.cpu.as_secs_f64()
    );
    println!(
        "ratio provisioning/by hand: {ratio:.2}x wall, {:.2}x CPU  [{} target <= 2x]",
        a.cpu.as_secs_f64() / b.cpu.as_secs_f64(),
        verdict(ratio <= 2.0)
    );
    Ok(())
}
