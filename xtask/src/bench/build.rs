//! Build benchmarks on the mini-deepep fixture (tests/fixtures/demo-pins.toml),
//! each against a baseline measured in the same run:
//! - `cache-hit`: a cache-hit `build-wheel` (whole process) vs a fresh build
//!   of the same variant (targets: <= 0.5 s and <= 1% of the fresh build);
//! - `overhead`: `build-wheel --no-cache` (whole process) vs the same
//!   `pip wheel` command by hand in a fresh tree (target: <= 5% more);
//! - `stamp`: stamping a 200 MB wheel (rewrite + sha256 of the result) vs
//!   `sha256sum` of it (target: <= 1.5x).
//!
//! Needs `.ci/setup-tools` (nvcc, pip, setuptools in target/tools-venv).
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use xshell::{cmd, Cmd, Shell};

const VARIANT: &str = "demo";
const RUNS: usize = 5;

pub(super) struct Tools {
    pub(super) python: PathBuf,
    cuda_home: PathBuf,
}

impl Tools {
    pub(super) fn cuda_home(&self) -> &Path {
        &self.cuda_home
    }
}

pub(super) fn tools() -> Result<Tools> {
    let venv = std::env::var_os("DEEPEP_FORGE_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::project_root().join("target/tools-venv"));
    let python = venv.join("bin/python");
    let lib = std::fs::read_dir(venv.join("lib"))
        .with_context(|| format!("{} missing: run .ci/setup-tools", venv.display()))?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python"))
        .context("no lib/python3.* in the tools venv")?;
    let cuda_home = lib.path().join("site-packages/nvidia/cu13");
    anyhow::ensure!(cuda_home.join("bin/nvcc").exists(), "no nvcc in {}: run .ci/setup-tools", cuda_home.display());
    Ok(Tools { python, cuda_home })
}

/// `cargo xtask build-wheel ...` as a whole process (this very binary).
fn forge(t: &Tools, cache: &Path, out: &Path, extra: &[&str]) -> Result<Sample> {
    let sh = Shell::new()?;
    sh.change_dir(super::project_root());
    let exe = std::env::current_exe()?;
    let request = super::Request::fixture(&t.python, cache).args();
    let c = cmd!(sh, "{exe} build-wheel {request...}")
        .args(["--out".as_ref(), out.as_os_str()])
        .args(extra)
        .env("CUDA_HOME", &t.cuda_home);
    timed(c)
}

/// Wall time and CPU time (user + system of the process and its children).
#[derive(Clone, Copy)]
pub(super) struct Sample {
    pub(super) wall: Duration,
    pub(super) cpu: Duration,
}

/// CPU time so far of this process (`who` = RUSAGE_SELF) or its waited-for children.
fn cpu(who: i32) -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Run `c` to the end (output captured), timing wall and children's CPU.
pub(super) fn timed(c: Cmd<'_>) -> Result<Sample> {
    timed_output(c).map(|(s, _)| s)
}

/// [`timed`], also returning what the command printed.
pub(super) fn timed_output(c: Cmd<'_>) -> Result<(Sample, std::process::Output)> {
    let shown = c.to_string();
    let (t0, c0) = (Instant::now(), cpu(libc::RUSAGE_CHILDREN));
    let o = c.quiet().ignore_status().output().with_context(|| format!("running {shown}"))?;
    let s = Sample { wall: t0.elapsed(), cpu: cpu(libc::RUSAGE_CHILDREN) - c0 };
    anyhow::ensure!(
        o.status.success(),
        "{shown} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Ok((s, o))
}

/// Medians of wall and CPU time (each sorted on its own).
pub(super) fn median(v: &[Sample]) -> Sample {
    let mid = |mut d: Vec<Duration>| {
        d.sort();
        d[d.len() / 2]
    };
    Sample { wall: mid(v.iter().map(|s| s.wall).collect()), cpu: mid(v.iter().map(|s| s.cpu).collect()) }
}

pub(super) fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "OVER TARGET"
    }
}

pub fn cache_hit() -> Result<()> {
    let t = tools()?;
    let tmp = tempfile::tempdir()?;
    let cache = tmp.path().join("cache");
    let fresh = forge(&t, &cache, &tmp.path().join("out0"), &[])?;
    let mut hits = Vec::new();
    for i in 0..5 {
        hits.push(forge(&t, &cache, &tmp.path().join(format!("out{}", i + 1)), &[])?);
    }
    let hit = median(&hits);
    let (h, f) = (hit.wall.as_secs_f64(), fresh.wall.as_secs_f64());
    println!("fresh build of `{VARIANT}` (whole process): {f:.3} s wall, {:.3} s CPU", fresh.cpu.as_secs_f64());
    println!(
        "cache hit (whole process, median of 5):   {h:.3} s wall, {:.3} s CPU  [{} target <= 0.5 s]",
        hit.cpu.as_secs_f64(),
        verdict(h <= 0.5)
    );
    println!(
        "ratio hit/fresh: {:.2}% wall, {:.2}% CPU  [{} target <= 1%]",
        h / f * 100.0,
        hit.cpu.as_secs_f64() / fresh.cpu.as_secs_f64() * 100.0,
        verdict(h / f <= 0.01)
    );
    Ok(())
}

pub fn overhead() -> Result<()> {
    let t = tools()?;
    let tmp = tempfile::tempdir()?;
    let cache = tmp.path().join("cache");
    // Warm the mirror and the compiler check, as on any machine after its first build.
    forge(&t, &cache, &tmp.path().join("warm"), &["--no-cache"])?;
    let (mut ours, mut hand) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        ours.push(forge(&t, &cache, &tmp.path().join(format!("ours{i}")), &["--no-cache"])?);
        // By hand: the plan's own recipe (argv, cwd, the whole environment from
        // `plan --format json`) replayed in a fresh git tree of the same files.
        let recipe = plan_recipe(&t, &cache)?;
        let tree = PathBuf::from(&recipe.cwd);
        let _ = std::fs::remove_dir_all(tree.parent().context("build folder")?);
        copy_tree(&super::project_root().join("tests/fixtures/mini-deepep"), &tree)?;
        let sh = Shell::new()?;
        sh.change_dir(&tree);
        timed(cmd!(sh, "git init -q"))?;
        timed(cmd!(sh, "git add -A"))?;
        timed(cmd!(sh, "git -c user.name=b -c user.email=b@b commit -qm x"))?;
        std::fs::create_dir_all(tree.with_file_name("dist"))?;
        let (program, args) = (&recipe.argv[0], &recipe.argv[1..]);
        hand.push(timed(cmd!(sh, "{program} {args...}").env_clear().envs(&recipe.env))?);
        std::fs::remove_dir_all(tree.parent().context("build folder")?)?;
    }
    let (o, h) = (median(&ours), median(&hand));
    let over = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) / b.as_secs_f64();
    let (ow, oc) = (over(o.wall, h.wall), over(o.cpu, h.cpu));
    println!(
        "pip wheel by hand (median of {RUNS}):                     {:.3} s wall, {:.3} s CPU",
        h.wall.as_secs_f64(),
        h.cpu.as_secs_f64()
    );
    println!(
        "build-wheel --no-cache, whole process (median of {RUNS}): {:.3} s wall, {:.3} s CPU",
        o.wall.as_secs_f64(),
        o.cpu.as_secs_f64()
    );
    println!("orchestration overhead: {:+.1}% wall [{}], {:+.1}% CPU [{}]  (target <= 5%; CPU time is the stable figure on a loaded machine)", ow * 100.0, verdict(ow <= 0.05), oc * 100.0, verdict(oc <= 0.05));
    Ok(())
}

pub fn stamp() -> Result<()> {
    let t = tools()?;
    let tmp = tempfile::tempdir()?;
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    forge(&t, &cache, &out, &[])?;
    let small = std::fs::read_dir(&out)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .context("no wheel built")?;
    // A 200 MB wheel: the built one plus 200 MB of incompressible data, RECORD updated.
    let big = tmp.path().join("in").join(small.file_name().expect("name"));
    std::fs::create_dir_all(big.parent().expect("dir"))?;
    let script = r#"
import base64, hashlib, os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
blob = os.urandom(200 * 1024 * 1024)
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    record = [n for n in zin.namelist() if n.endswith(".dist-info/RECORD")][0]
    lines = zin.read(record).decode()
    for info in zin.infolist():
        if info.filename != record and not info.filename.endswith("deepep-forge-provenance.json"):
            zout.writestr(info, zin.read(info))
    zout.writestr("deep_ep/big.bin", blob, compress_type=zipfile.ZIP_STORED)
    h = base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(b"=").decode()
    lines = "".join(l + "\n" for l in lines.splitlines() if "deepep-forge-provenance.json" not in l)
    zout.writestr(record, f"deep_ep/big.bin,sha256={h},{len(blob)}\n" + lines)
"#;
    let sh = Shell::new()?;
    let python = &t.python;
    timed(cmd!(sh, "{python} -c {script} {small} {big}"))?;
    let size = std::fs::metadata(&big)?.len();
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        base.push(timed(cmd!(sh, "sha256sum {big}"))?);
        let dest = tmp.path().join(format!("stamped{i}.whl"));
        let mut changes = forge_wheel::wheel::stamp::Changes { epoch: 946_684_800, ..Default::default() };
        changes.add_dist_info.insert(forge_wheel::provenance::FILE_NAME.into(), b"{\"bench\": true}".to_vec());
        let (t0, c0) = (Instant::now(), cpu(libc::RUSAGE_SELF));
        forge_wheel::wheel::stamp::stamp(&big, &dest, &changes)?;
        forge_os::fs::named::sha256_file(&dest, "wheel", forge_os::input::cap::WHEEL)?;
        ours.push(Sample { wall: t0.elapsed(), cpu: cpu(libc::RUSAGE_SELF) - c0 });
        std::fs::remove_file(&dest)?;
    }
    let (o, b) = (median(&ours), median(&base));
    let r = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!("wheel: {:.0} MB", size as f64 / 1e6);
    println!(
        "sha256sum (median of {RUNS}):                   {:.3} s wall, {:.3} s CPU",
        b.wall.as_secs_f64(),
        b.cpu.as_secs_f64()
    );
    println!(
        "stamp + sha256 of the result (median of {RUNS}): {:.3} s wall, {:.3} s CPU",
        o.wall.as_secs_f64(),
        o.cpu.as_secs_f64()
    );
    println!(
        "ratio: {:.2}x wall [{}], {:.2}x CPU [{}]  (target <= 1.5x)",
        r(o.wall, b.wall),
        verdict(r(o.wall, b.wall) <= 1.5),
        r(o.cpu, b.cpu),
        verdict(r(o.cpu, b.cpu) <= 1.5)
    );
    Ok(())
}

/// The plan's command for the bench variant: argv, working folder, environment.
struct Recipe {
    argv: Vec<String>,
    cwd: String,
    env: std::collections::BTreeMap<String, String>,
}

fn plan_recipe(t: &Tools, cache: &Path) -> Result<Recipe> {
    let sh = Shell::new()?;
    sh.change_dir(super::project_root());
    let exe = std::env::current_exe()?;
    let request = super::Request::fixture(&t.python, cache).args();
    let o = cmd!(sh, "{exe} plan {request...} --format json")
        .env("CUDA_HOME", &t.cuda_home)
        .quiet()
        .ignore_status()
        .output()?;
    anyhow::ensure!(o.status.success(), "plan failed: {}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    let run = &j["plans"][0]["run"];
    Ok(Recipe {
        argv: serde_json::from_value(run["argv"].clone())?,
        cwd: serde_json::from_value(run["cwd"].clone())?,
        env: serde_json::from_value(run["env"].clone())?,
    })
}

pub(super) fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let name = e.file_name();
        if ["build", "deep_ep.egg-info"].contains(&name.to_string_lossy().as_ref())
            || (src.ends_with("deep_ep") && name == "backend")
        {
            continue;
        }
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &dst.join(&name))?;
        } else {
            std::fs::copy(e.path(), dst.join(&name))?;
        }
    }
    Ok(())
}
