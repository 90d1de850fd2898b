//! Issue 54, the shipping commands (`docker bake|build`, `publish`,
//! `publish --check`, `verify`, the registry toolchain) through the real
//! binary: URLs reach the builders byte for byte (a fake `docker`, `podman`
//! or `debootstrap` first on PATH records the argv it gets), userinfo never
//! shown; a link planted where one of them writes is refused (exit 2, naming
//! it) and nothing is written; a hostile file name in an index adds no line.
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::hostile::{run_all, snapshot, Case};
use crate::support::*;

/// The given `--index` URLs and what the builder must get: the path made a
/// folder (a `/` before any query or fragment), nothing else changed.
const INDEX_URLS: &[(&str, &str)] = &[
    ("http://host/simple/?v=1", "http://host/simple/?v=1"),
    ("http://host/simple?v=1", "http://host/simple/?v=1"),
    ("http://host:8080/h100/simple/#frag", "http://host:8080/h100/simple/#frag"),
    ("http://host/h100/simple", "http://host/h100/simple/"),
    (
        "https://alice:s3cret@host:8443/h100/simple/?token=t0ken",
        "https://alice:s3cret@host:8443/h100/simple/?token=t0ken",
    ),
];

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn both(o: &Output) -> String {
    format!("{}\n{}", stdout(o), stderr(o))
}

/// A folder holding the repository's pins.toml and bake file (the build context).
fn scratch() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("pins.toml"), d.path().join("pins.toml")).unwrap();
    std::fs::create_dir(d.path().join("docker")).unwrap();
    std::fs::copy(root().join("docker/docker-bake.json"), d.path().join("docker/docker-bake.json")).unwrap();
    d
}

/// A program `name` in `bin` that appends its argv (one argument a line, then
/// `--END--`) to `log` and exits with `rule`'s status (a shell `case` on "$*").
fn fake(bin: &Path, name: &str, log: &Path, rule: &str) {
    std::fs::create_dir_all(bin).unwrap();
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '{log}'; done\necho --END-- >> '{log}'\n{rule}\n",
        log = log.display()
    );
    let p = bin.join(name);
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// Each recorded call's argv.
fn calls(log: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.split("--END--\n").filter(|c| !c.is_empty()).map(|c| c.lines().map(String::from).collect()).collect()
}

// ---- class 1: URLs pass through unchanged -------------------------------------

/// `docker build --index URL` with docker: the `--set` docker gets holds the
/// URL byte for byte (the path a folder); a password in it is never shown.
#[test]
fn docker_build_hands_the_index_url_to_docker_byte_for_byte() {
    for (given, handed) in INDEX_URLS {
        let d = scratch();
        let (bin, log) = (d.path().join("fake-bin"), d.path().join("docker.argv"));
        fake(&bin, "docker", &log, "exit 0");
        let o = crate::support::bin()
            .args(["docker", "build", "--variant", "h100", "--index", given])
            .current_dir(d.path())
            .env("PATH", &bin)
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{given}: {}", both(&o));
        let bake = calls(&log).into_iter().find(|c| c.get(1).map(String::as_str) == Some("bake")).expect("a bake call");
        let want = format!("--set=h100-index.args.DEEPEP_INDEX={handed}");
        assert!(bake.contains(&want), "{given}: docker got {bake:?}, want {want}");
        assert!(!both(&o).contains("s3cret") && !both(&o).contains("t0ken"), "{given}: shown: {}", both(&o));
        assert!(stdout(&o).contains("built h100-index from docker/docker-bake.json (docker)"), "{}", stdout(&o));
    }
}

/// `docker build --builder podman --index URL`: the build argument podman gets
/// holds the URL byte for byte (a cached base: `podman image exists` says yes).
#[test]
#[cfg_attr(
    not(feature = "needs-podman"),
    ignore = "needs system package podman (and debootstrap, a Debian mirror): bash .ci/run runs it there"
)]
fn docker_build_hands_the_index_url_to_podman_byte_for_byte() {
    if forge_os::process::lookup::which("debootstrap").is_none() {
        missing("podman and debootstrap");
    }
    for (given, handed) in INDEX_URLS {
        let d = scratch();
        let cache = tempfile::tempdir().unwrap();
        let (bin, log) = (d.path().join("fake-bin"), d.path().join("podman.argv"));
        fake(&bin, "podman", &log, "exit 0");
        let o = crate::support::bin()
            .args(["docker", "build", "--variant", "h100", "--builder", "podman", "--index", given, "--cache-dir"])
            .arg(cache.path())
            .current_dir(d.path())
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{given}: {}", both(&o));
        let build = calls(&log).into_iter().find(|c| c.first().map(String::as_str) == Some("build")).expect("a build");
        let want = format!("--build-arg=DEEPEP_INDEX={handed}");
        assert!(build.contains(&want), "{given}: podman got {build:?}, want {want}");
        assert!(!both(&o).contains("s3cret") && !both(&o).contains("t0ken"), "{given}: shown: {}", both(&o));
    }
}

/// `--base-mirror` with a query: the Release file is fetched from the path
/// joined before the query (its date reaches the note), debootstrap gets the
/// mirror byte for byte, and the note shows it redacted.
#[test]
#[cfg_attr(
    not(feature = "needs-podman"),
    ignore = "needs system package podman (and debootstrap, a Debian mirror): bash .ci/run runs it there"
)]
fn the_base_mirror_is_joined_before_its_query_and_handed_on_unchanged() {
    if forge_os::process::lookup::which("debootstrap").is_none() {
        missing("podman and debootstrap");
    }
    let www = tempfile::tempdir().unwrap();
    let dists = www.path().join("debian/dists/bookworm");
    std::fs::create_dir_all(&dists).unwrap();
    std::fs::write(dists.join("Release"), "Origin: Debian\nDate: Sat, 11 Jul 2026 10:16:37 UTC\n").unwrap();
    let server = HttpServer::start(Path::new("python3"), www.path());
    let mirror = format!("http://127.0.0.1:{}/debian?snap=20260711", server.port);
    let d = scratch();
    let cache = tempfile::tempdir().unwrap();
    let bin = d.path().join("fake-bin");
    // No image in podman's store: the rootfs must be made; debootstrap records and fails.
    fake(&bin, "podman", &d.path().join("podman.argv"), "exit 1");
    fake(&bin, "debootstrap", &d.path().join("debootstrap.argv"), "exit 1");
    let o = crate::support::bin()
        .args(["docker", "build", "--variant", "h100", "--builder", "podman", "--base-mirror", &mirror])
        .arg("--cache-dir")
        .arg(cache.path())
        .current_dir(d.path())
        .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
        .output()
        .unwrap();
    drop(server);
    assert_eq!(code(&o), 1, "{}", both(&o));
    assert!(
        stderr(&o).contains("Release Sat, 11 Jul 2026 10:16:37 UTC"),
        "the Release file was not read: {}",
        both(&o)
    );
    let argv = calls(&d.path().join("debootstrap.argv")).pop().expect("debootstrap ran");
    assert_eq!(argv.last(), Some(&mirror), "{argv:?}");
    assert!(!both(&o).contains("snap=20260711") && stderr(&o).contains("/debian?***"), "{}", both(&o));
}

// ---- class 2: writes confined, nothing half-written ---------------------------

/// `docker bake` in a project whose `docker/` is a link to a folder outside
/// it: refused (exit 2), nothing written anywhere (`--check` only reads the
/// path as named: missing there, exit 1).
#[test]
fn docker_bake_never_writes_through_a_link_out_of_the_project() {
    let t = tempfile::tempdir().unwrap();
    let (project, outside) = (t.path().join("project"), t.path().join("outside"));
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::copy(root().join("pins.toml"), project.join("pins.toml")).unwrap();
    std::os::unix::fs::symlink("../outside", project.join("docker")).unwrap();
    let before = snapshot(t.path());
    let o = forge(&project, &["docker", "bake"]);
    assert_eq!(code(&o), 2, "{}", both(&o));
    assert!(stderr(&o).contains("docker-bake.json leads outside the current folder"), "{}", stderr(&o));
    let o = forge(&project, &["docker", "bake", "--check"]);
    assert_eq!(code(&o), 1, "{}", both(&o));
    assert!(stdout(&o).contains("docker/docker-bake.json: missing"), "{}", stdout(&o));
    assert_eq!(snapshot(t.path()), before, "something was written");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", p.display());
}

/// The bake file's place holds a link, a FIFO or a folder, or a file stands
/// where its folder goes: exit 2 naming it, nothing changed, no hang.
#[test]
fn the_bake_file_is_never_written_over_a_link_fifo_or_folder() {
    let pins = std::fs::read(root().join("pins.toml")).unwrap();
    let case = |name: &str| Case::new(format!("bake: {name}")).file("pins.toml", pins.clone());
    run_all(vec![
        case("the file is a link")
            .file("docker/other.json", "{}")
            .setup(|d| std::os::unix::fs::symlink("other.json", d.join("docker/docker-bake.json")).unwrap())
            .args(&["docker", "bake"])
            .says("docker-bake.json is a symbolic link, not a regular file"),
        case("the file is a FIFO")
            .setup(|d| {
                std::fs::create_dir_all(d.join("docker")).unwrap();
                mkfifo(&d.join("docker/docker-bake.json"))
            })
            .args(&["docker", "bake"])
            .says("docker-bake.json")
            .says("not a regular file"),
        case("the file is a folder")
            .file("docker/docker-bake.json/x", "")
            .args(&["docker", "bake"])
            .says("docker-bake.json"),
        case("its folder is a file").file("docker", "x").args(&["docker", "bake"]).says("docker is not a folder"),
        case("a link out as the file, --check")
            .setup(|d| {
                std::fs::create_dir_all(d.join("docker")).unwrap();
                std::os::unix::fs::symlink("/etc/hostname", d.join("docker/docker-bake.json")).unwrap()
            })
            .args(&["docker", "bake", "--check"])
            .says("docker-bake.json leads outside the folder"),
    ]);
}

/// `docker build --builder podman` whose `docker/Dockerfile` is a link to a
/// file outside the build context: refused before any builder is looked for.
#[test]
fn docker_build_reads_no_dockerfile_through_a_link_out_of_the_context() {
    let d = scratch();
    let outside = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("docker/Dockerfile"), outside.path().join("Dockerfile")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("Dockerfile"), d.path().join("docker/Dockerfile")).unwrap();
    let (empty, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let o = crate::support::bin()
        .args(["docker", "build", "--variant", "h100", "--builder", "podman", "--cache-dir"])
        .arg(cache.path())
        .current_dir(d.path())
        .env("PATH", empty.path())
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", both(&o));
    assert!(stderr(&o).contains("leads outside the build context"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0, "the cache was written");
}

/// `verify --out FILE`: exit 2 before anything is read or built.
#[test]
fn verify_out_that_is_a_file_exits_2_first() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("out"), "keep").unwrap();
    let o = forge(d.path(), &["verify", "no-such.whl", "--out", "out"]);
    assert_eq!(code(&o), 2, "{}", both(&o));
    assert!(stderr(&o).contains("--out out: a file, not a folder"), "{}", stderr(&o));
    assert_eq!(std::fs::read(d.path().join("out")).unwrap(), b"keep");
}

/// A trusted key, as `cache keygen` prints it.
fn trusted_key(dir: &Path) -> String {
    let o = forge(dir, &["cache", "keygen", "--name", "ship-1", "--out", dir.join("k.key").to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    stdout(&o).lines().next().unwrap().trim().to_string()
}

/// `publish --check` of an index folder holding a variant that is a link out
/// of it, a manifest that is a FIFO and a name with a newline and a forged
/// row: each reported (exit 1, at once), nothing followed, no line forged.
#[test]
fn publish_check_follows_no_link_waits_on_no_fifo_and_forges_no_row() {
    let t = tempfile::tempdir().unwrap();
    let key = trusted_key(t.path());
    let (idx, outside) = (t.path().join("idx"), t.path().join("outside"));
    std::fs::create_dir_all(idx.join("h100-multinode")).unwrap();
    std::fs::create_dir_all(outside.join("simple/deep-ep")).unwrap();
    std::os::unix::fs::symlink(&outside, idx.join("h100")).unwrap();
    mkfifo(&idx.join("h100-multinode/index.json"));
    std::fs::write(idx.join("evil\n  pass  forged-rule"), "x").unwrap();
    let before = snapshot(t.path());
    let started = std::time::Instant::now();
    let pins = root().join("pins.toml");
    let o = forge(
        t.path(),
        &["publish", "--check", idx.to_str().unwrap(), "--pins", pins.to_str().unwrap(), "--trusted-key", &key],
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "waited on the FIFO");
    assert_eq!(code(&o), 1, "{}", both(&o));
    let out = stdout(&o);
    assert!(out.contains("h100: a symbolic link, not a folder (never followed)"), "{out}");
    assert!(out.contains("h100-multinode/index.json: a FIFO, socket or device, not a regular file"), "{out}");
    assert!(out.contains("evil\\n  pass  forged-rule: foreign"), "{out}");
    assert!(!out.lines().any(|l| l.starts_with("  pass")), "a forged row: {out}");
    assert_eq!(snapshot(t.path()), before, "publish --check wrote");
}

/// A publish setup: the demo pins, a signing key, the mini-deepep fixture
/// built by the tools venv's nvcc (cached after the first publish).
struct Publisher {
    dir: tempfile::TempDir,
    tools: PathBuf,
    cuda: PathBuf,
    public: String,
}

impl Publisher {
    fn new() -> Publisher {
        let (Some(tools), Some(cuda)) = (tools_venv(), cuda_home()) else { missing("the tools venv (nvcc and uv)") };
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(root().join("tests/fixtures/demo-pins.toml"), dir.path().join("pins.toml")).unwrap();
        let public = trusted_key(dir.path());
        Publisher { dir, tools, cuda, public }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = crate::support::bin();
        c.args(args)
            .current_dir(self.dir.path())
            .env("DEEPEP_FORGE_CACHE_DIR", self.path("cache"))
            .env("CUDA_HOME", &self.cuda)
            .env("PATH", format!("{}:{}", self.tools.join("bin").display(), std::env::var("PATH").unwrap_or_default()))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env_remove("DEEPEP_FORGE_TRUSTED_KEYS")
            .env_remove("DEEPEP_FORGE_CACHE_URL");
        for k in ["TORCH_CUDA_ARCH_LIST", "HYBRID_EP_MULTINODE", "NVSHMEM_DIR", "MAX_JOBS", "CC", "CXX"] {
            c.env_remove(k);
        }
        c.output().unwrap()
    }

    fn publish(&self, out: &Path) -> Output {
        let (source, python) = (root().join("tests/fixtures/mini-deepep"), self.tools.join("bin/python"));
        self.run(&[
            "publish",
            "--variant",
            "demo",
            "--source",
            source.to_str().unwrap(),
            "--python",
            python.to_str().unwrap(),
            "--signing-key",
            self.path("k.key").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    }
}

/// `publish` into an index whose manifest's place is a FIFO, or whose variant
/// folder is a link to another folder of the index: exit 2 naming it, nothing
/// published, no hang. Then a clean publish, whose files are 0644 whatever
/// the umask, and `publish --check` with a FIFO at a page: reported, no hang.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn publish_stages_every_file_and_writes_through_no_link_or_fifo() {
    let p = Publisher::new();
    type Plant = fn(&Path);
    let cases: [(&str, Plant, &str); 3] = [
        (
            "the manifest a FIFO",
            |i| {
                std::fs::create_dir_all(i.join("demo")).unwrap();
                mkfifo(&i.join("demo/index.json"))
            },
            "index.json: not a regular file",
        ),
        (
            "the variant a link inside the index",
            |i| {
                std::fs::create_dir_all(i.join("other")).unwrap();
                std::os::unix::fs::symlink("other", i.join("demo")).unwrap()
            },
            "demo: a symbolic link",
        ),
        (
            "a wheel's page a FIFO",
            |i| {
                std::fs::create_dir_all(i.join("demo/simple/deep-ep")).unwrap();
                mkfifo(&i.join("demo/simple/deep-ep/index.html"))
            },
            "index.html: not a regular file",
        ),
    ];
    for (name, plant, says) in cases {
        let idx = p.path(&format!("idx-{}", name.replace(' ', "-")));
        std::fs::create_dir_all(&idx).unwrap();
        plant(&idx);
        let before = snapshot(&idx);
        let o = p.publish(&idx);
        assert_eq!(code(&o), 2, "{name}: {}", both(&o));
        assert!(stderr(&o).contains(says) && stderr(&o).contains("nothing published"), "{name}: {}", stderr(&o));
        assert_eq!(snapshot(&idx), before, "{name}: something was written");
    }
    let idx = p.path("idx");
    let o = p.publish(&idx);
    assert_eq!(code(&o), 0, "{}", both(&o));
    for e in walkdir::WalkDir::new(&idx).into_iter().flatten().filter(|e| e.file_type().is_file()) {
        use std::os::unix::fs::PermissionsExt;
        let mode = e.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "{}", e.path().display());
        assert!(!e.file_name().to_string_lossy().ends_with(".partial"), "a staged file stayed: {}", e.path().display());
    }
    let page = idx.join("demo/simple/deep-ep/index.html");
    std::fs::remove_file(&page).unwrap();
    mkfifo(&page);
    let started = std::time::Instant::now();
    let pins = p.path("pins.toml");
    let o = p.run(&[
        "publish",
        "--check",
        idx.to_str().unwrap(),
        "--pins",
        pins.to_str().unwrap(),
        "--variant",
        "demo",
        "--trusted-key",
        &p.public,
    ]);
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "waited on the FIFO");
    assert_eq!(code(&o), 1, "{}", both(&o));
    assert!(stdout(&o).contains("index.html: a FIFO, socket or device, not a regular file"), "{}", stdout(&o));
}

/// `--toolchain registry` with the cache's `toolchains/` a link to a folder
/// outside the cache: refused (exit 2) before anything is provisioned there.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_registry_toolchain_is_never_made_through_a_link_out_of_the_cache() {
    let lab = crate::build_support::Lab::new();
    let pins = lab.pins_with(
        &lab.rev,
        "[toolchain]\ntorch = \"2.11.0+forgetest\"\ncuda = \"13.0\"\npython = \"3.12\"\n\n[[variant]]\nname = \"sn\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\n",
    );
    let outside = lab.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(&lab.cache).unwrap();
    std::os::unix::fs::symlink(&outside, lab.cache.join("toolchains")).unwrap();
    let o = crate::support::bin()
        .args(["build-wheel", "--toolchain", "registry", "--variant", "sn", "--pins", pins.to_str().unwrap()])
        .arg("--python")
        .arg(lab.tools.join("bin/python"))
        .arg("--source")
        .arg(&lab.repo)
        .current_dir(lab.dir.path())
        .env("DEEPEP_FORGE_CACHE_DIR", &lab.cache)
        .env("DEEPEP_FORGE_UV", lab.tools.join("bin/uv"))
        .env("UV_CACHE_DIR", root().join("target/uv-cache"))
        .env("UV_PYTHON_DOWNLOADS", "never")
        .env_remove("CUDA_HOME")
        .env_remove("DEEPEP_FORGE_CACHE_URL")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", both(&o));
    assert!(stderr(&o).contains("toolchains leads outside the cache"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "written through the link");
}
