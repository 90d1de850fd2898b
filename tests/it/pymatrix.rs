//! The Python matrix (docs/pins.md, docs/registry-toolchain.md): pins.toml's
//! `[toolchain] python` as a list of minors makes `plan --all` variant x arch
//! x Python, each Python with its own registry toolchain (its key names the
//! Python), and `publish` serves every cell from one index that real uv 0.13.9
//! locks for a consumer whose `requires-python` spans the minors; `lock
//! check` holds that lock to the list. As in tests/it/registry.rs, torch is a
//! tiny real wheel on a find-links folder (the fixture does not import torch);
//! the CUDA compiler packages come from the registry through uv's cache.
//! Ignored ("needs Python 3.11, 3.12 and 3.13 ..."): the interpreters come
//! from PATH or pyenv's versions; `bash .ci/run` runs it where they are.
use crate::build_support;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::build_support::Lab;
use crate::support::*;
use serde_json::Value;

const PYTHONS: [&str; 3] = ["3.11", "3.12", "3.13"];

/// `sn` (x86_64) and `sn-arm` (aarch64, served from sn's index) for three Pythons.
const PINS: &str = r#"
[toolchain]
torch = "2.11.0+forgetest"
cuda = "13.0"
python = ["3.11", "3.12", "3.13"]

[[variant]]
name = "sn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
runtime_requires = false

[[variant]]
name = "sn-arm"
arch = "aarch64"
cuda_arch_list = "10.0"
multinode = false
index = "sn"
runtime_requires = false
"#;

/// The folder holding `python3.X` for each of [`PYTHONS`]: PATH first, then pyenv's versions.
fn python_dirs() -> Result<Vec<PathBuf>, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    let mut pyenv: Vec<PathBuf> = std::fs::read_dir(home.join(".pyenv/versions"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .collect();
    pyenv.sort();
    let dirs: Vec<PathBuf> =
        std::env::split_paths(&path).filter(|d| !d.to_string_lossy().contains("shims")).chain(pyenv).collect();
    PYTHONS
        .iter()
        .map(|v| {
            dirs.iter()
                .find(|d| d.join(format!("python{v}")).is_file())
                .cloned()
                .ok_or_else(|| format!("Python {v} (python{v} on PATH or in pyenv's versions)"))
        })
        .collect()
}

/// uv's cache: the caller's `UV_CACHE_DIR`, else target/uv-cache as tests/it/registry.rs uses.
fn uv_cache() -> PathBuf {
    std::env::var_os("UV_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target/uv-cache"))
}

/// The binary with a registry setup: the Pythons on PATH (uv finds `3.12` there,
/// never downloads one), the stand-in torch on find-links, no CUDA on the environment.
fn forge(lab: &Lab, links: &Path, dirs: &[PathBuf], args: &[&str]) -> Command {
    let mut c = bin();
    c.args(args);
    if matches!(args.first(), Some(&"plan" | &"build-wheel" | &"publish")) && !args.contains(&"--check") {
        c.arg("--source").arg(&lab.repo);
    }
    let path = std::env::join_paths(
        dirs.iter().map(PathBuf::as_path).chain(["/usr/local/bin", "/usr/bin", "/bin"].map(Path::new)),
    )
    .unwrap();
    c.current_dir(lab.dir.path())
        .env("DEEPEP_FORGE_CACHE_DIR", &lab.cache)
        .env("DEEPEP_FORGE_UV", lab.tools.join("bin/uv"))
        .env("UV_CACHE_DIR", uv_cache())
        .env("UV_FIND_LINKS", links)
        .env("UV_PYTHON_DOWNLOADS", "never")
        .env("PATH", path)
        .env_remove("CUDA_HOME")
        .env_remove("DEEPEP_FORGE_CACHE_URL");
    for k in ["HYBRID_EP_MULTINODE", "USE_NIXL", "TORCH_CUDA_ARCH_LIST", "NVSHMEM_DIR", "MAX_JOBS", "CXX", "CC"] {
        c.env_remove(k);
    }
    for k in ["CUDAHOSTCXX", "LDSHARED", "VIRTUAL_ENV", "PYTHONPATH", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL"] {
        c.env_remove(k);
    }
    c
}

fn ok(o: std::process::Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

#[test]
#[cfg_attr(
    not(feature = "needs-pythons"),
    ignore = "needs Python 3.11, 3.12 and 3.13 (PATH or pyenv) and the tools venv: bash .ci/run runs it when present"
)]
fn plan_all_is_variant_by_arch_by_python_each_python_its_own_toolchain() {
    let dirs = python_dirs().unwrap_or_else(|why| support::missing(&why));
    let lab = Lab::new();
    let links = stand_in_torch(lab.dir.path(), &lab.tools.join("bin/python"));
    let pins = lab.pins_with(&lab.rev, PINS);
    let args = ["plan", "--all", "--toolchain", "registry", "--pins", pins.to_str().unwrap(), "--format", "json"];
    let t0 = Instant::now();
    let doc: Value = serde_json::from_str(&ok(forge(&lab, &links, &dirs, &args).output().unwrap())).unwrap();
    eprintln!("plan --all, 2 variants x 3 Pythons: {:.1} s", t0.elapsed().as_secs_f64());
    let include = doc["matrix"]["include"].as_array().unwrap();
    let cells: Vec<(String, String, String, String)> = include
        .iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap().to_string();
            (s("variant"), s("arch"), s("python"), s("cell"))
        })
        .collect();
    let mut want = Vec::new();
    for py in PYTHONS {
        for (v, a) in [("sn", "x86_64"), ("sn-arm", "aarch64")] {
            want.push((v.to_string(), a.to_string(), py.to_string(), format!("{v}-py{py}")));
        }
    }
    assert_eq!(cells, want, "{include:?}");
    // Each Python its own toolchain (plan provisions nothing: it says what it would make).
    let roots: std::collections::BTreeSet<String> = doc["plans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["variant"]["arch"] == "x86_64")
        .map(|p| {
            let w = &p["toolchain"]["would_provision"];
            assert!(PYTHONS.contains(&w["python"].as_str().unwrap()), "{w}");
            w["root"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(roots.len(), 3, "one toolchain per Python: {roots:?}");
    // The aarch64 cells are cross plans whose target Python comes from Debian's arm64
    // archive: where it lacks the minor (bookworm: 3.11 only) the plan says the build stops.
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    for p in doc["plans"].as_array().unwrap().iter().filter(|p| p["variant"]["arch"] == "aarch64") {
        let py = p["toolchain"]["would_provision"]["python"].as_str().unwrap_or_default().to_string();
        let text = p["toolchain"].to_string();
        if release.contains("VERSION_CODENAME=bookworm") && py != "3.11" {
            assert!(text.contains(&format!("Python {py} for aarch64 is not reachable")), "{text}");
        }
    }
    assert!(!lab.cache.join("toolchains").exists(), "plan provisions nothing");
    // --python picks one cell's Python: the matrix's build job passes it.
    let one: Value =
        serde_json::from_str(&ok(forge(&lab, &links, &dirs, &args).args(["--python", "3.12"]).output().unwrap()))
            .unwrap();
    let pys: Vec<&Value> = one["matrix"]["include"].as_array().unwrap().iter().map(|m| &m["python"]).collect();
    assert_eq!(pys, [&Value::from("3.12"), &Value::from("3.12")]);
}

/// Bytes of the regular files under `dir` that nothing else links (a file uv
/// hard-linked from its cache has two or more links): what `dir` alone adds to the disk.
fn own_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.path().symlink_metadata().unwrap();
            if m.is_dir() {
                todo.push(e.path());
            } else if m.is_file() && m.nlink() == 1 {
                total += m.len();
            }
        }
    }
    total
}

/// The size on disk of `dir` as `du` counts it (hard links once per call).
fn du(dirs: &[&Path]) -> String {
    let o = Command::new("du").arg("-sch").args(dirs).output().unwrap();
    stdout(&o)
}

#[test]
#[cfg_attr(
    not(feature = "needs-pythons"),
    ignore = "needs Python 3.11, 3.12 and 3.13 (PATH or pyenv) and the tools venv: bash .ci/run runs it when present"
)]
fn three_pythons_publish_into_one_index_that_uv_locks_and_lock_check_holds_to_the_list() {
    let dirs = python_dirs().unwrap_or_else(|why| support::missing(&why));
    let lab = Lab::new();
    let links = stand_in_torch(lab.dir.path(), &lab.tools.join("bin/python"));
    let pins = lab.pins_with(&lab.rev, PINS);
    let pins_s = pins.to_str().unwrap();
    let key = lab.dir.path().join("publish.key");
    let keygen = ["cache", "keygen", "--name", "pymatrix-1", "--out", key.to_str().unwrap()];
    let public = ok(forge(&lab, &links, &dirs, &keygen).output().unwrap()).lines().next().unwrap().trim().to_string();

    // publish sn without --python: every Python of the list, each with its own toolchain.
    let idx = lab.dir.path().join("idx");
    let (key_s, idx_s) = (key.to_str().unwrap(), idx.to_str().unwrap());
    let publish = [
        "publish",
        "--variant",
        "sn",
        "--toolchain",
        "registry",
        "--pins",
        pins_s,
        "--signing-key",
        key_s,
        "--out",
        idx_s,
    ];
    let t0 = Instant::now();
    let out = ok(forge(&lab, &links, &dirs, &publish).output().unwrap());
    eprintln!("publish sn for 3 Pythons (3 toolchains provisioned, 3 builds): {:.1} s", t0.elapsed().as_secs_f64());
    let short = &lab.rev[..7];
    let files = idx.join("sn/simple/deep-ep");
    let wheel = |py: &str| {
        let t = py.replace('.', "");
        format!("deep_ep-1.2.1+{short}-cp{t}-cp{t}-manylinux_2_34_x86_64.whl")
    };
    for py in PYTHONS {
        assert!(files.join(wheel(py)).is_file(), "{} in sn's index: {out}", wheel(py));
    }
    let m = forge_store::index::manifest::Manifest::parse(&std::fs::read(idx.join("sn/index.json")).unwrap()).unwrap();
    let keys: std::collections::BTreeSet<&str> = m.wheels.iter().map(|w| w.cache_key.as_str()).collect();
    assert_eq!((m.wheels.len(), keys.len()), (3, 3), "three wheels, three cache keys: {m:?}");
    let toolchains: Vec<PathBuf> = std::fs::read_dir(lab.cache.join("toolchains"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(toolchains.len(), 3, "{toolchains:?}");
    use std::os::unix::fs::MetadataExt;
    let shared = std::fs::metadata(uv_cache()).is_ok_and(|m| m.dev() == std::fs::metadata(&lab.cache).unwrap().dev());
    for t in &toolchains {
        let own = own_bytes(t);
        eprintln!(
            "toolchain {}: {} apparent, {own} bytes of its own",
            t.display(),
            du(&[t]).lines().next().unwrap_or("")
        );
        // uv hard-links from its cache on the same filesystem: a Python's toolchain adds only its own few files.
        if shared {
            assert!(own < 32 << 20, "{}: {own} bytes not shared with uv's cache", t.display());
        }
    }
    eprintln!(
        "all three together (hard links counted once):\n{}",
        du(&toolchains.iter().map(PathBuf::as_path).collect::<Vec<_>>())
    );
    let check = ["publish", "--check", idx.to_str().unwrap(), "--pins", pins_s, "--trusted-key", &public];
    let o = forge(&lab, &links, &dirs, &check).args(["--variant", "sn"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));

    // A consumer for 3.11 to 3.13 moved to the index; uv locks one wheel per Python.
    let server = support::HttpServer::start(&lab.tools.join("bin/python"), &idx);
    let url = format!("http://127.0.0.1:{}", server.port);
    let consumer = lab.dir.path().join("consumer");
    copy_dir(&root().join("tests/fixtures/consumer-index"), &consumer);
    let py_path = consumer.join("pyproject.toml");
    let text = std::fs::read_to_string(&py_path).unwrap();
    let text = text.replace("requires-python = \"==3.11.*\"", "requires-python = \">=3.11,<3.14\"");
    let text = text.replace("0bfa6c27cc77e8266337c19f6f30e3f5be23a483", &lab.rev).replace("0bfa6c2", short);
    std::fs::write(&py_path, text).unwrap();
    let repo = lab.repo.to_str().unwrap();
    // verify of the index URL: every Python's wheel rebuilt (no --python: the registry
    // toolchain of the Python each provenance names) and found the same bytes.
    let t0 = Instant::now();
    let index_url = format!("{url}/sn/");
    let v = ok(forge(&lab, &links, &dirs, &["verify", &index_url, "--trusted-key", &public, "--source", repo])
        .args(["--format", "json"])
        .output()
        .unwrap());
    eprintln!("verify of the 3-Python index (3 rebuilds): {:.1} s", t0.elapsed().as_secs_f64());
    let doc: Value = serde_json::from_str(&v).unwrap();
    assert_eq!(doc["verified"].as_bool(), Some(true), "{doc}");
    let wheels = doc["wheels"].as_array().unwrap();
    assert_eq!(wheels.len(), 3, "{doc}");
    for py in PYTHONS {
        let w = wheels.iter().find(|w| w["diff"]["a"]["path"].as_str().is_some_and(|p| p.ends_with(&wheel(py))));
        let w = w.unwrap_or_else(|| panic!("{}: {doc}", wheel(py)));
        assert_eq!(w["diff"]["identical"].as_bool(), Some(true), "{w}");
    }
    let pin = ["pin", "set", &lab.rev, "--project", consumer.to_str().unwrap(), "--pins", pins_s, "--source", repo];
    ok(forge(&lab, &links, &dirs, &pin).args(["--index", &url, "--variant", "sn"]).output().unwrap());
    let path =
        std::env::join_paths(dirs.iter().map(PathBuf::as_path).chain([Path::new("/usr/bin"), Path::new("/bin")]))
            .unwrap();
    let uv = |args: &[&str]| {
        Command::new(lab.tools.join("bin/uv"))
            .args(args)
            .args(["--python", "3.12"])
            .current_dir(&consumer)
            .env("UV_CACHE_DIR", uv_cache())
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("PATH", &path)
            .env_remove("UV_INDEX_URL")
            .env_remove("UV_EXTRA_INDEX_URL")
            .env_remove("UV_FIND_LINKS")
            .env_remove("VIRTUAL_ENV")
            .output()
            .unwrap()
    };
    let o = uv(&["lock"]);
    assert_eq!(o.status.code(), Some(0), "uv lock: {}", stderr(&o));
    eprintln!("uv lock: {}", stderr(&o).trim());
    let lock = std::fs::read_to_string(consumer.join("uv.lock")).unwrap();
    for py in PYTHONS {
        let w = wheel(py).replace('+', "%2B");
        let line = lock.lines().find(|l| l.contains(&w)).unwrap_or_else(|| panic!("{w}: {lock}"));
        let sha = build_support::sha256sum(&files.join(wheel(py)));
        assert!(line.contains(&format!("hash = \"sha256:{sha}\"")), "{line}");
    }
    let lock_check = [
        "lock",
        "check",
        "--project",
        consumer.to_str().unwrap(),
        "--index-manifest",
        "index",
        "--trusted-key",
        &public,
    ];
    let o = forge(&lab, &links, &dirs, &lock_check).args(["--pins", pins_s, "--format", "json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));

    // A lock missing the 3.13 wheel: `uv sync` on 3.13 would find no deep-ep.
    let cp313 = wheel("3.13").replace('+', "%2B");
    let without: String = lock.lines().filter(|l| !l.contains(&cp313)).map(|l| format!("{l}\n")).collect();
    std::fs::write(consumer.join("uv.lock"), &without).unwrap();
    let o = forge(&lab, &links, &dirs, &lock_check).args(["--pins", pins_s]).output().unwrap();
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("lock-python-missing") && said.contains("none for Python 3.13"), "{said}");
    std::fs::write(consumer.join("uv.lock"), &lock).unwrap();

    // pins.toml that no longer lists 3.11: the locked cp311 wheel is a build it does not describe.
    let narrow = lab.dir.path().join("narrow.toml");
    std::fs::write(&narrow, std::fs::read_to_string(&pins).unwrap().replace("\"3.11\", ", "")).unwrap();
    let o = forge(&lab, &links, &dirs, &lock_check).args(["--pins", narrow.to_str().unwrap()]).output().unwrap();
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("lock-python-unlisted") && said.contains(&wheel("3.11")), "{said}");

    // A requires-python that admits a Python the index has no wheel for (3.10): what uv does.
    let text = std::fs::read_to_string(&py_path).unwrap().replace(">=3.11,<3.14", ">=3.10,<3.14");
    std::fs::write(&py_path, text).unwrap();
    let o = uv(&["lock"]);
    eprintln!("uv lock, requires-python >=3.10,<3.14 (exit {:?}):\n{}", o.status.code(), stderr(&o).trim());
    assert_eq!(o.status.code(), Some(0), "uv locks it without complaint: {}", stderr(&o));
    assert!(!std::fs::read_to_string(consumer.join("uv.lock")).unwrap().contains("cp310"));
    // lock check says so (a warning: the project may never run on 3.10).
    let o = forge(&lab, &links, &dirs, &lock_check).args(["--pins", pins_s]).output().unwrap();
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert!(said.contains("lock-python-uncovered") && said.contains("admits Python 3.10,"), "{said}");
    drop(server);
}

/// What the cross path needs here (tests/it/cross.rs says the same), or what is missing.
fn cross_prerequisites() -> Result<(), String> {
    if std::env::consts::ARCH != "x86_64" {
        return Err("an x86_64 host (cross builds are from x86_64)".into());
    }
    let on_path =
        |n: &str| ["/usr/local/bin", "/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(n)).find(|p| p.is_file());
    for tool in ["aarch64-linux-gnu-g++", "apt-get", "dpkg-deb", "python3.11"] {
        on_path(tool).ok_or(format!("{tool} (system packages for cross builds)"))?;
    }
    on_path("qemu-aarch64-static").or(on_path("qemu-aarch64")).map(|_| ()).ok_or("qemu-user-static".into())
}

/// Three Pythons x two architectures, as far as this host's Debian archive allows:
/// the x86_64 cells for 3.11, 3.12 and 3.13 built natively, the aarch64 cell for
/// 3.11 cross-built into the same index; the aarch64 cells of 3.12 and 3.13 need
/// Debian's arm64 Python of that minor, which bookworm lacks: `publish` stops
/// (exit 3) writing nothing, and `publish --check` names exactly the cells that
/// are missing (a consumer's lock of this index would be `lock-python-missing` for
/// aarch64 3.12 and 3.13: the rule's per-architecture check is shown on x86_64 above).
#[test]
#[cfg_attr(
    not(feature = "needs-pythons-cross"),
    ignore = "needs Python 3.11 to 3.13 and the cross build packages (python3.1x on PATH or pyenv; sudo .ci/setup-system): bash .ci/run runs it when present"
)]
fn three_pythons_by_two_architectures_publish_what_debian_allows_and_name_the_missing_cells() {
    let dirs = python_dirs().unwrap_or_else(|why| support::missing(&why));
    cross_prerequisites().unwrap_or_else(|why| support::missing(&why));
    let lab = Lab::new();
    let links = stand_in_torch(lab.dir.path(), &lab.tools.join("bin/python"));
    let pins = lab.pins_with(&lab.rev, PINS);
    let pins_s = pins.to_str().unwrap();
    let key = lab.dir.path().join("publish.key");
    let keygen = ["cache", "keygen", "--name", "pymatrix-2", "--out", key.to_str().unwrap()];
    let public = ok(forge(&lab, &links, &dirs, &keygen).output().unwrap()).lines().next().unwrap().trim().to_string();
    let idx = lab.dir.path().join("idx");
    let (key_s, idx_s) = (key.to_str().unwrap(), idx.to_str().unwrap());
    let publish = |extra: &[&str]| {
        let mut c = forge(&lab, &links, &dirs, &["publish", "--toolchain", "registry", "--pins", pins_s]);
        c.args(["--signing-key", key_s, "--out", idx_s]).args(extra);
        c.output().unwrap()
    };
    let t0 = Instant::now();
    ok(publish(&["--variant", "sn"]));
    let x86 = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    ok(publish(&["--variant", "sn-arm", "--python", "3.11"]));
    eprintln!(
        "x86_64 x 3 Pythons: {x86:.1} s; aarch64 x 3.11 (cross, sysroot provisioned): {:.1} s",
        t1.elapsed().as_secs_f64()
    );
    let manifest = std::fs::read(idx.join("sn/index.json")).unwrap();
    let m = forge_store::index::manifest::Manifest::parse(&manifest).unwrap();
    let mut cells: Vec<String> =
        m.wheels.iter().map(|w| w.wheel.split('-').skip(2).collect::<Vec<_>>().join("-")).collect();
    cells.sort();
    assert_eq!(
        cells,
        [
            "cp311-cp311-manylinux_2_34_aarch64.whl",
            "cp311-cp311-manylinux_2_34_x86_64.whl",
            "cp312-cp312-manylinux_2_34_x86_64.whl",
            "cp313-cp313-manylinux_2_34_x86_64.whl"
        ],
        "{m:?}"
    );
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    if release.contains("VERSION_CODENAME=bookworm") {
        let o = publish(&["--variant", "sn-arm", "--python", "3.12"]);
        let said = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{said}");
        assert!(said.contains("3.12") && said.contains("arm64"), "{said}");
        assert_eq!(std::fs::read(idx.join("sn/index.json")).unwrap(), manifest, "nothing written");
    }
    let check = ["publish", "--check", idx_s, "--pins", pins_s, "--trusted-key", &public];
    let o = forge(&lab, &links, &dirs, &check).output().unwrap();
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{said}");
    for py in ["3.12", "3.13"] {
        assert!(said.contains(&format!("no Python {py} wheel of variant sn-arm (aarch64)")), "{said}");
    }
    assert!(!said.contains("variant sn (x86_64)") && !said.contains("no Python 3.11"), "{said}");
}
