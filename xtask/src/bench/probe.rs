//! `cargo xtask bench probe-wheel`: the static probe of a wheel (release
//! binary, `probe --wheel W --format json`: every member read once, hashed
//! against RECORD, extensions parsed) against `unzip -p W` of the same members
//! to /dev/null, in the same run. The wheel is the mini-deepep single-node
//! fixture built with pip and nvcc, plus a 60 MB real ELF (libnvvm from the
//! CUDA toolkit) as a third extension, the size of a real hybrid_ep_cpp.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use forge_os::error::Exit;
use xshell::{cmd, Cmd, Shell};

const RUNS: usize = 7;

/// Adds `deep_ep/big_cpp...so` (the bytes of `big`) to a wheel and rewrites RECORD.
const AUGMENT: &str = r#"
import base64, hashlib, sys, zipfile
src, dst, big = sys.argv[1:4]
data = open(big, "rb").read()
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    members = [(i.filename, zin.read(i)) for i in zin.infolist()]
    record = next(n for n, _ in members if n.endswith(".dist-info/RECORD"))
    members = [(n, b) for n, b in members if n != record]
    members.append(("deep_ep/big_cpp.cpython-311-x86_64-linux-gnu.so", data))
    lines = []
    for n, b in members:
        zout.writestr(n, b)
        h = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
        lines.append(f"{n},sha256={h},{len(b)}")
    lines.append(f"{record},,")
    zout.writestr(record, "\n".join(lines) + "\n")
"#;

fn tools() -> Result<PathBuf> {
    let root = super::project_root();
    let venv =
        std::env::var_os("DEEPEP_FORGE_TOOLS").map(PathBuf::from).unwrap_or_else(|| root.join("target/tools-venv"));
    ensure!(
        venv.join("bin/nvcc-ok").exists(),
        "no tools venv at {}: run .ci/setup-tools (or set DEEPEP_FORGE_TOOLS)",
        venv.display()
    );
    Ok(venv)
}

fn run(cmd: Cmd<'_>, what: &str) -> Result<()> {
    let out = cmd.quiet().ignore_status().output().with_context(|| format!("{what}: cannot start"))?;
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median wall time of RUNS runs, output discarded (not read: the baseline
/// must not pay for a pipe the real use does not have).
fn time<'a>(cmd: &mut dyn FnMut() -> Cmd<'a>) -> Result<Duration> {
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let c = cmd().quiet().ignore_status().ignore_stdout().ignore_stderr();
        let shown = c.to_string();
        let start = Instant::now();
        let status = c.output()?.status;
        times.push(start.elapsed());
        ensure!(status.code().is_some_and(|c| c <= 1), "{shown} exited {status}");
    }
    Ok(median(times))
}

pub fn run_bench() -> Result<Exit> {
    let root = super::project_root();
    let venv = tools()?;
    let python = venv.join("bin/python");
    let cuda = std::fs::read_dir(venv.join("lib"))?
        .flatten()
        .map(|e| e.path().join("site-packages/nvidia/cu13"))
        .find(|p| p.join("bin/nvcc").exists())
        .context("no nvidia/cu13 in the tools venv")?;
    let work = root.join("target/bench-probe");
    let _ = std::fs::remove_dir_all(&work);
    let src = work.join("mini-deepep");
    std::fs::create_dir_all(&work)?;
    let sh = Shell::new()?;
    let fixture = root.join("tests/fixtures/mini-deepep");
    run(cmd!(sh, "cp -r {fixture} {src}"), "copy fixture")?;
    {
        let _in_src = sh.push_dir(&src);
        run(cmd!(sh, "git init -q"), "git init")?;
        run(cmd!(sh, "git add -A"), "git add")?;
        run(cmd!(sh, "git -c user.name=bench -c user.email=bench@invalid commit -qm bench"), "git commit")?;
        eprintln!("bench: building the fixture wheel (pip + nvcc) and the release binary");
        let out = work.join("out");
        run(
            cmd!(sh, "{python} -m pip wheel --no-build-isolation --no-deps -q -w {out} .")
                .env("CUDA_HOME", &cuda)
                .env("TORCH_CUDA_ARCH_LIST", "9.0 10.0"),
            "pip wheel",
        )?;
    }
    let built = std::fs::read_dir(work.join("out"))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("no wheel built")?;
    let wheel = work.join(built.file_name().unwrap());
    let big = cuda.join("lib/libnvvm.so.4");
    run(cmd!(sh, "{python} -c {AUGMENT} {built} {wheel} {big}"), "augment wheel")?;
    {
        let _in_root = sh.push_dir(&root);
        let cargo = env!("CARGO");
        run(cmd!(sh, "{cargo} build --release --quiet --bin deepep-forge"), "cargo build --release")?;
    }
    let forge = root.join("target/release/deepep-forge");
    let w: &Path = &wheel;

    let probe = time(&mut || cmd!(sh, "{forge} probe --format json --preset h100-8g --wheel {w}"))?;
    let unzip = time(&mut || cmd!(sh, "unzip -p {w}"))?;
    let size = std::fs::metadata(w)?.len();
    println!("wheel: {} ({:.1} MB, {} + 1 large extension)", w.display(), size as f64 / 1e6, built.display());
    println!(
        "probe --wheel (read, hash, parse every member once): {:>8.1} ms (median of {RUNS})",
        probe.as_secs_f64() * 1e3
    );
    println!(
        "unzip -p (decompress every member once):             {:>8.1} ms (median of {RUNS})",
        unzip.as_secs_f64() * 1e3
    );
    let ratio = probe.as_secs_f64() / unzip.as_secs_f64();
    println!("ratio probe/unzip: {ratio:.2}x (target <= 1.5x)");
    Ok(if ratio <= 1.5 { Exit::Ok } else { Exit::Problems })
}
