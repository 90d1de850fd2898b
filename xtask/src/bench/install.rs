//! `install`: a consumer's `uv sync` (lock + install into a fresh venv, uv's
//! cache empty each time) with deep-ep from a `deepep-forge publish` index
//! served by `python -m http.server` on 127.0.0.1, vs the same consumer with
//! deep-ep from its git source, which uv builds (the mini fixture: real nvcc,
//! setuptools from PyPI as uv's build isolation fetches it). Goal: <= 0.05x.
use std::io::BufRead;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use xshell::{cmd, Shell};

use super::build::{median, timed, tools, verdict, Sample};

const RUNS: usize = 3;
const GOAL: f64 = 0.05;

/// `python -m http.server` on a port the kernel picks; killed when dropped.
struct Server(std::process::Child, u16);

impl Server {
    fn start(python: &Path, dir: &Path) -> Result<Server> {
        let mut c = std::process::Command::new(python)
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory"])
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let mut line = String::new();
        std::io::BufReader::new(c.stdout.take().context("server stdout")?).read_line(&mut line)?;
        let port = line.split(" port ").nth(1).and_then(|r| r.split_whitespace().next()).context("no port")?.parse()?;
        Ok(Server(c, port))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const HEAD: &str = "[project]\nname = \"bench-consumer\"\nversion = \"0.1.0\"\nrequires-python = \"==3.11.*\"\n";

pub fn run() -> Result<()> {
    let t = tools()?;
    let root = super::project_root();
    let uv = t.python.parent().context("tools venv")?.join("uv");
    let tmp = tempfile::tempdir()?;
    let d = tmp.path();
    let sh = Shell::new()?;
    sh.change_dir(&root);
    let exe = std::env::current_exe()?;
    let (python, cuda) = (&t.python, t.cuda_home());
    let (key, idx, cache) = (d.join("publish.key"), d.join("idx"), d.join("cache"));
    cmd!(sh, "{exe} cache keygen --name bench-1 --out {key}").quiet().ignore_stderr().read()?;
    eprintln!("publishing the demo variant (built once, not measured) ...");
    cmd!(sh, "{exe} publish --pins tests/fixtures/demo-pins.toml --source tests/fixtures/mini-deepep --variant demo --python {python} --signing-key {key} --out {idx} --cache-dir {cache}")
        .env("CUDA_HOME", cuda)
        .quiet()
        .run()?;
    let repo = d.join("DeepEP");
    copy_dir(&root.join("tests/fixtures/mini-deepep"), &repo)?;
    let git = |args: &[&str]| {
        cmd!(sh, "git -c user.name=bench -c user.email=bench@invalid -C {repo}")
            .args(args)
            .quiet()
            .ignore_stderr()
            .read()
    };
    git(&["init", "-q", "-b", "main"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "fixture"])?;
    let rev = git(&["rev-parse", "HEAD"])?;
    let server = Server::start(python, &idx)?;
    let index = d.join("from-index");
    let source = d.join("from-git");
    std::fs::create_dir_all(&index)?;
    std::fs::create_dir_all(&source)?;
    std::fs::write(
        index.join("pyproject.toml"),
        format!("{HEAD}dependencies = [\"deep_ep==1.2.1+0bfa6c2\"]\n[tool.uv.sources]\ndeep-ep = {{ index = \"deepep-forge-demo\" }}\n[[tool.uv.index]]\nname = \"deepep-forge-demo\"\nurl = \"http://127.0.0.1:{}/demo/simple\"\nexplicit = true\n", server.1),
    )?;
    std::fs::write(
        source.join("pyproject.toml"),
        format!("{HEAD}dependencies = [\"deep_ep @ git+file://{}@{rev}\"]\n", repo.display()),
    )?;
    let sync = |project: &Path, n: usize| -> Result<Sample> {
        let uv_cache = d.join(format!("uv-cache-{}-{n}", project.file_name().unwrap().to_string_lossy()));
        let _ = std::fs::remove_dir_all(project.join(".venv"));
        let _ = std::fs::remove_file(project.join("uv.lock"));
        let c = cmd!(sh, "{uv} sync --project {project} --python {python}")
            .env("UV_CACHE_DIR", &uv_cache)
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("CUDA_HOME", cuda)
            .env("TORCH_CUDA_ARCH_LIST", "9.0 10.0");
        timed(c)
    };
    let t0 = Instant::now();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for n in 0..RUNS {
        a.push(sync(&index, n)?);
        b.push(sync(&source, n)?);
    }
    let (a, b) = (median(&a), median(&b));
    let ratio = a.wall.as_secs_f64() / b.wall.as_secs_f64();
    println!(
        "bench install ({RUNS} runs each, medians, uv cache empty, fresh venv; {:.0} s in all)",
        t0.elapsed().as_secs_f64()
    );
    println!("  uv sync, deep-ep from the index (http.server on 127.0.0.1) {:>8.2} s wall", a.wall.as_secs_f64());
    println!("  uv sync, deep-ep from git (uv builds the mini fixture)       {:>8.2} s wall", b.wall.as_secs_f64());
    println!("  ratio {ratio:.3}x (goal <= {GOAL}x): {}", verdict(ratio <= GOAL));
    Ok(())
}

fn copy_dir(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let to = dst.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &to)?;
        } else {
            std::fs::copy(e.path(), &to)?;
        }
    }
    Ok(())
}
