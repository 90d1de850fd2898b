//! `plan` and `build-wheel` are safe by construction (#54): no write under
//! `--out` leaves it (a link at `<out>/<variant>`, at SHA256SUMS, at a wheel or
//! its attestation is refused, exit 2, nothing written anywhere); nothing is
//! half-delivered (a FIFO at SHA256SUMS, `--out` a file: exit 2 before any
//! build, nothing in `--out`); the build root is emptied and removed without
//! following a link in it; a non-UTF-8 environment value never panics (a
//! variable the tool does not read is ignored, one it reads is exit 2 naming
//! it). Each case runs the real binary on the README's mini-deepep fixture.
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::hostile::{snapshot, Snapshot};
use crate::support::{bin, cuda_home, missing, process_tempdir, root, stderr, stdout, tools_venv};

/// The README demo's pins with two single-node variants of one architecture:
/// `--all` delivers each into `<out>/<variant>/`.
fn two_variants() -> String {
    let demo = std::fs::read_to_string(root().join("tests/fixtures/demo-pins.toml")).unwrap();
    let head = &demo[..demo.find("[[variant]]").expect("demo pins declare variants")];
    let variant = |name: &str| {
        format!(
            "[[variant]]\nname = \"{name}\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\n\
             topology = {{ gpu = \"h100\", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }}\n\n"
        )
    };
    format!("{head}{}{}", variant("demo"), variant("demo-b"))
}

/// One test's folder: the pins, a build root of its own, and the cache every
/// test shares (built once: later runs are cache hits and still deliver).
struct Case {
    dir: tempfile::TempDir,
    pins: PathBuf,
    cache: PathBuf,
}

impl Case {
    fn new() -> Case {
        Case::with_cache(warm_cache().to_path_buf())
    }

    /// A case with its own empty cache: a refusal there proves nothing was built.
    fn cold() -> Case {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cold-cache");
        Case { pins: write_pins(dir.path()), cache, dir }
    }

    fn with_cache(cache: PathBuf) -> Case {
        let dir = tempfile::tempdir().unwrap();
        Case { pins: write_pins(dir.path()), cache, dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The binary on the fixture, with the tools venv's Python and nvcc, this
    /// case's build root and the cache.
    fn forge(&self, args: &[&str]) -> Command {
        let tools = tools_venv().unwrap_or_else(|| missing("the tools venv"));
        let cuda = cuda_home().unwrap_or_else(|| missing("nvcc in the tools venv"));
        let mut c = bin();
        c.args(args)
            .args(["--pins", self.pins.to_str().unwrap(), "--source", "tests/fixtures/mini-deepep"])
            .args(["--no-compiler-cache", "--python"])
            .arg(tools.join("bin/python"))
            .current_dir(root())
            .env("DEEPEP_FORGE_CACHE_DIR", &self.cache)
            .env("DEEPEP_FORGE_BUILD_ROOT", self.path("build-root"))
            .env("CUDA_HOME", &cuda)
            .env("PATH", format!("{}:{}", tools.join("bin").display(), std::env::var("PATH").unwrap_or_default()))
            .env_remove("DEEPEP_FORGE_CACHE_URL")
            .env_remove("MAX_JOBS");
        c
    }

    /// `build-wheel --all --out <out>` plus `extra`.
    fn build_all(&self, out: &Path, extra: &[&str]) -> Output {
        let mut c = self.forge(&["build-wheel", "--all", "--out", out.to_str().unwrap()]);
        c.args(extra);
        bounded(&mut c, Duration::from_secs(600)).0
    }

    /// Wheels and entries in the case's cache (a cold case's must stay empty).
    fn cached_wheels(&self) -> usize {
        std::fs::read_dir(self.cache.join("wheels")).map(|d| d.count()).unwrap_or(0)
    }
}

fn write_pins(dir: &Path) -> PathBuf {
    let p = dir.join("pins.toml");
    std::fs::write(&p, two_variants()).unwrap();
    p
}

/// The shared cache, with both variants built into it once (a fresh build
/// delivered into a folder of its own, checked here).
fn warm_cache() -> &'static Path {
    static CACHE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| {
        let cache = process_tempdir().join("cache");
        let c = Case::with_cache(cache.clone());
        let out = c.path("out");
        let o = c.build_all(&out, &[]);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("built "), "a fresh build: {}", stdout(&o));
        assert_eq!(wheels(&out.join("demo")).len(), 1);
        assert_eq!(wheels(&out.join("demo-b")).len(), 1);
        cache
    })
}

/// Run `c`, killed (and the test failed) after `limit`; its output and how long it took.
fn bounded(c: &mut Command, limit: Duration) -> (Output, Duration) {
    let t0 = Instant::now();
    let mut child = c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?} (blocked?): {c:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let o = Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() };
    (o, t0.elapsed())
}

fn wheels(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    v.sort();
    v
}

/// A refusal: exit 2, no panic, the message names `path`.
fn refused(o: &Output, path: &Path) {
    let (out, err) = (stdout(o), stderr(o));
    assert_eq!(o.status.code(), Some(2), "stdout: {out}\nstderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(&path.display().to_string()), "names {}: {err}", path.display());
}

/// A folder outside `--out` holding one file: what a planted link points at.
fn victim(c: &Case) -> (PathBuf, Snapshot) {
    let v = c.path("victim");
    std::fs::create_dir_all(&v).unwrap();
    std::fs::write(v.join("keep"), "keep me").unwrap();
    std::fs::write(v.join("x.whl"), "not a wheel").unwrap();
    let s = snapshot(&v);
    (v, s)
}

#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it when present"
)]
fn a_link_at_a_variant_folder_is_refused_before_any_build_and_nothing_is_written() {
    let c = Case::cold();
    let (target, before) = victim(&c);
    let out = c.path("out");
    std::fs::create_dir(&out).unwrap();
    for link in [target.clone(), PathBuf::from("../victim")] {
        let _ = std::fs::remove_file(out.join("demo"));
        std::os::unix::fs::symlink(&link, out.join("demo")).unwrap();
        let o = c.build_all(&out, &[]);
        refused(&o, &out.join("demo"));
        assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
        assert_eq!(snapshot(&target), before, "the link's target is unchanged");
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, ["demo"], "nothing in --out but the link");
        assert_eq!(c.cached_wheels(), 0, "refused before any build");
    }
    // `demo-b` a link too, the other variant's folder fine: still nothing anywhere.
    std::fs::remove_file(out.join("demo")).unwrap();
    std::os::unix::fs::symlink(&target, out.join("demo-b")).unwrap();
    let o = c.build_all(&out, &[]);
    refused(&o, &out.join("demo-b"));
    assert!(!out.join("demo").exists() && !out.join("SHA256SUMS").exists());
    assert_eq!(snapshot(&target), before);
}

#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it when present"
)]
fn a_link_at_sha256sums_a_wheel_or_its_attestation_is_refused_and_nothing_is_delivered() {
    let c = Case::new();
    let out = c.path("out");
    let o = c.build_all(&out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let wheel = wheels(&out.join("demo")).pop().expect("demo's wheel");
    let name = wheel.file_name().unwrap().to_str().unwrap().to_string();
    let statement = out.join("demo").join(format!("{name}.intoto.json"));
    assert!(statement.is_file(), "the attestation is delivered beside the wheel");
    for planted in [out.join("SHA256SUMS"), wheel.clone(), statement.clone(), out.join("demo-b").join(&name)] {
        let (target, before) = victim(&c);
        let saved = std::fs::read(&planted).unwrap();
        std::fs::remove_file(&planted).unwrap();
        let to = if planted == wheel { target.join("x.whl") } else { target.join("keep") };
        std::os::unix::fs::symlink(&to, &planted).unwrap();
        let out_before = snapshot(&out);
        let o = c.build_all(&out, &["--report", c.path("report.json").to_str().unwrap()]);
        refused(&o, &planted);
        assert_eq!(snapshot(&target), before, "{}: the link's target is unchanged", planted.display());
        assert_eq!(snapshot(&out), out_before, "{}: nothing in --out changed", planted.display());
        assert!(!c.path("report.json").exists(), "{}: no report either", planted.display());
        std::fs::remove_file(&planted).unwrap();
        std::fs::write(&planted, saved).unwrap();
    }
    // Put back, the same run delivers again (a cache hit still goes through delivery).
    let o = c.build_all(&out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("cache-hit"), "{}", stdout(&o));
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    assert!(sums.contains(&format!("  demo/{name}")) && sums.contains(&format!("  demo-b/{name}")), "{sums}");
}

#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it when present"
)]
fn a_fifo_at_sha256sums_or_the_report_is_refused_at_once_and_out_stays_empty() {
    let c = Case::cold();
    let out = c.path("out");
    std::fs::create_dir(&out).unwrap();
    mkfifo(&out.join("SHA256SUMS"));
    let mut cmd = c.forge(&["build-wheel", "--all", "--out", out.to_str().unwrap()]);
    let (o, took) = bounded(&mut cmd, Duration::from_secs(60));
    refused(&o, &out.join("SHA256SUMS"));
    assert!(took < Duration::from_secs(10), "refused before planning, never waiting on the FIFO: {took:?}");
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, ["SHA256SUMS"], "out/demo/ is never made");
    assert_eq!(c.cached_wheels(), 0, "refused before any build");
    // The report a FIFO: the same, and --out is not even made.
    let report = c.path("report.json");
    mkfifo(&report);
    let fresh = c.path("fresh-out");
    let mut cmd =
        c.forge(&["build-wheel", "--all", "--out", fresh.to_str().unwrap(), "--report", report.to_str().unwrap()]);
    let (o, took) = bounded(&mut cmd, Duration::from_secs(60));
    refused(&o, &report);
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(!fresh.exists() && c.cached_wheels() == 0);
}

#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it when present"
)]
fn out_that_is_a_file_is_refused_in_seconds_before_any_build() {
    let c = Case::cold();
    let file = c.path("dist");
    std::fs::write(&file, "a file, not a folder").unwrap();
    for (out, names) in [(file.clone(), file.clone()), (file.join("sub"), file.join("sub"))] {
        for variant in [&["--all"][..], &["--variant", "demo"]] {
            let mut cmd = c.forge(&["build-wheel", "--out", out.to_str().unwrap()]);
            let (o, took) = bounded(cmd.args(variant), Duration::from_secs(60));
            refused(&o, &names);
            assert!(stderr(&o).contains("not a folder"), "{}", stderr(&o));
            assert!(took < Duration::from_secs(5), "before the build: {took:?}");
        }
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "a file, not a folder");
    assert_eq!(c.cached_wheels(), 0, "nothing built");
}

#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it when present"
)]
fn links_in_the_build_root_are_removed_never_followed_and_a_linked_root_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let c = Case::cold();
    let (target, before) = victim(&c);
    // A root of this user's left behind, with links planted inside it that lead out.
    let root = c.path("build-root");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
    for name in ["src", "bin", "dist", "tmp", "python", "cuda"] {
        std::os::unix::fs::symlink(&target, root.join(name)).unwrap();
    }
    std::fs::write(root.join("stale"), "x").unwrap();
    let out = c.path("out");
    let o = bounded(
        &mut c.forge(&["build-wheel", "--variant", "demo", "--out", out.to_str().unwrap()]),
        Duration::from_secs(600),
    )
    .0;
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(snapshot(&target), before, "a link in the root is removed, never followed");
    assert!(!root.exists(), "the root goes with the build");
    assert_eq!(wheels(&out).len(), 1);
    // The root itself a link that leads elsewhere: refused (exit 3), nothing touched.
    std::os::unix::fs::symlink(&target, &root).unwrap();
    let out2 = c.path("out2");
    let o = bounded(
        &mut c.forge(&["build-wheel", "--variant", "demo", "--no-cache", "--out", out2.to_str().unwrap()]),
        Duration::from_secs(600),
    )
    .0;
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains(&root.display().to_string()) && stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    assert_eq!(snapshot(&target), before);
    assert!(!out2.exists(), "nothing delivered");
}

/// A value that is not UTF-8.
const BAD: &[u8] = b"\xff";

/// `plan` (JSON) of the demo variant with `name` set to a value that is not
/// UTF-8; runs without the tools venv (a missing toolchain is part of a plan).
fn plan_with(name: &str, value: &[u8], cmd: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let pins = write_pins(dir.path());
    let mut c = bin();
    c.args([cmd, "--variant", "demo", "--pins", pins.to_str().unwrap(), "--source", "tests/fixtures/mini-deepep"])
        .args(["--out", dir.path().join("out").to_str().unwrap()])
        .current_dir(root())
        .env("DEEPEP_FORGE_CACHE_DIR", dir.path().join("cache"))
        .env("DEEPEP_FORGE_BUILD_ROOT", dir.path().join("root"))
        .env_remove("DEEPEP_FORGE_CACHE_URL")
        .env(name, std::ffi::OsStr::from_bytes(value));
    if cmd == "plan" {
        c.args(["--format", "json"]);
    }
    let o = bounded(&mut c, Duration::from_secs(300)).0;
    assert!(!dir.path().join("out").exists(), "{name}: nothing in --out");
    o
}

#[test]
fn a_variable_the_tool_does_not_read_is_ignored_whatever_its_bytes() {
    for name in ["FOO", "DEEPEP_FORGE_NOT_A_SETTING", "LC_NOT_READ"] {
        let o = plan_with(name, BAD, "plan");
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("the plan document");
        assert_eq!(doc["plans"][0]["variant"]["name"], "demo", "{name}");
        let text = stdout(&o);
        assert!(!text.contains(name), "{name} never reaches the plan");
    }
}

#[test]
fn a_variable_the_tool_reads_that_is_not_utf8_is_refused_naming_it() {
    // Read by the tool (checked at startup), passed through to the build, or a build knob.
    let names = [
        "DEEPEP_FORGE_BUILD_ROOT",
        "PATH",
        "CC",
        "HOME",
        "LANG",
        "HYBRID_EP_MULTINODE",
        "TORCH_CUDA_ARCH_LIST",
        "CUDA_HOME",
        "NVCC_APPEND_FLAGS",
    ];
    for cmd in ["plan", "build-wheel"] {
        for name in names {
            for value in [BAD, b"ok\xfe\xff"] {
                let o = plan_with(name, value, cmd);
                let err = stderr(&o);
                assert_eq!(o.status.code(), Some(2), "{cmd} with {name}: {err}");
                assert!(err.contains(name) && err.contains("not UTF-8"), "{cmd} with {name}: {err}");
                assert!(!err.contains("panicked"), "{err}");
            }
        }
    }
}

#[test]
fn a_compiler_cache_credential_that_is_not_utf8_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let pins = write_pins(dir.path());
    let o = bounded(
        bin()
            .args(["plan", "--variant", "demo", "--pins", pins.to_str().unwrap(), "--source"])
            .args(["tests/fixtures/mini-deepep", "--compiler-cache", "redis://127.0.0.1:9"])
            .current_dir(root())
            .env("DEEPEP_FORGE_CACHE_DIR", dir.path().join("cache"))
            .env("SCCACHE_REDIS_PASSWORD", std::ffi::OsStr::from_bytes(BAD)),
        Duration::from_secs(300),
    )
    .0;
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("SCCACHE_REDIS_PASSWORD") && err.contains("not UTF-8"), "{err}");
}

#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it when present"
)]
fn build_wheel_ignores_a_variable_it_does_not_read() {
    let c = Case::new();
    let out = c.path("out");
    let mut cmd = c.forge(&["build-wheel", "--all", "--out", out.to_str().unwrap()]);
    cmd.env("FOO", std::ffi::OsStr::from_bytes(BAD));
    let o = bounded(&mut cmd, Duration::from_secs(600)).0;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(wheels(&out.join("demo")).len() + wheels(&out.join("demo-b")).len(), 2);
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string; mkfifo has no other preconditions.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", p.display());
}
