//! `publish`, `pin set --index` and the lock-check chain, end to end with
//! real parts: the mini-deepep fixture built by real nvcc, a real ed25519
//! key, `python -m http.server` on 127.0.0.1 (a random port, started and
//! stopped here), real uv 0.13.9 (`uv lock`, `uv sync --locked`) and
//! `import deep_ep` in the synced venv. Then the attacks: a wheel swapped on
//! the server (pages rewritten to match), a tampered manifest, an unsigned
//! one, a signed one whose wheel name escapes the folder, a different file
//! under a published name, an unknown variant, a plain-http index URL.
use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::*;
use forge_store::cache::sign::{PublicKey, SecretKey};
use forge_store::index::manifest::Manifest;

const REV: &str = "0bfa6c27cc77e8266337c19f6f30e3f5be23a483";

struct Setup {
    dir: tempfile::TempDir,
    tools: PathBuf,
    cuda: PathBuf,
    pins: PathBuf,
    key: PathBuf,
    public: String,
}

impl Setup {
    fn new() -> Setup {
        let (Some(tools), Some(cuda)) = (tools_venv(), cuda_home()) else {
            support::missing("the tools venv (nvcc and uv)")
        };
        let dir = tempfile::tempdir().unwrap();
        let pins = dir.path().join("pins.toml");
        std::fs::copy(root().join("tests/fixtures/demo-pins.toml"), &pins).unwrap();
        let key = dir.path().join("publish.key");
        let o = forge(dir.path(), &["cache", "keygen", "--name", "test-index-1", "--out", key.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let public = stdout(&o).lines().next().unwrap().trim().to_string();
        Setup { dir, tools, cuda, pins, key, public }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The binary with the tools on PATH, CUDA, a cache in the temp dir and a clean build environment.
    fn forge(&self, args: &[&str]) -> Output {
        let mut c = bin();
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

    fn publish(&self, extra: &[&str]) -> Output {
        let (source, python, idx) =
            (root().join("tests/fixtures/mini-deepep"), self.tools.join("bin/python"), self.path("idx"));
        let mut args = vec![
            "publish",
            "--pins",
            self.pins.to_str().unwrap(),
            "--source",
            source.to_str().unwrap(),
            "--python",
            python.to_str().unwrap(),
            "--signing-key",
            self.key.to_str().unwrap(),
        ];
        if !extra.contains(&"--out") {
            args.extend(["--out", idx.to_str().unwrap()]);
        }
        args.extend_from_slice(extra);
        self.forge(&args)
    }

    fn check(&self) -> Output {
        let idx = self.path("idx");
        self.forge(&[
            "publish",
            "--check",
            idx.to_str().unwrap(),
            "--pins",
            self.pins.to_str().unwrap(),
            "--variant",
            "demo",
            "--trusted-key",
            &self.public,
        ])
    }

    fn lock_check(&self, manifest: &Path) -> Output {
        self.lock_check_at(manifest.to_str().unwrap())
    }

    fn lock_check_at(&self, manifest: &str) -> Output {
        self.forge(&[
            "lock",
            "check",
            "--project",
            self.path("consumer").to_str().unwrap(),
            "--pins",
            self.pins.to_str().unwrap(),
            "--index-manifest",
            manifest,
            "--trusted-key",
            &self.public,
        ])
    }

    /// `pin set REV --project consumer --index URL --variant VARIANT` from the fixture's repository.
    fn pin_set_index(&self, url: &str, variant: &str) -> Output {
        let (consumer, repo) = (self.path("consumer"), root().join("tests/fixtures/mini-deepep"));
        self.forge(&[
            "pin",
            "set",
            REV,
            "--project",
            consumer.to_str().unwrap(),
            "--pins",
            self.pins.to_str().unwrap(),
            "--source",
            repo.to_str().unwrap(),
            "--index",
            url,
            "--variant",
            variant,
        ])
    }

    fn uv(&self, args: &[&str]) -> Output {
        Command::new(self.tools.join("bin/uv"))
            .args(args)
            .arg("--python")
            .arg(self.tools.join("bin/python"))
            .current_dir(self.path("consumer"))
            .env("UV_CACHE_DIR", self.path("uv-cache"))
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env_remove("UV_INDEX_URL")
            .env_remove("UV_EXTRA_INDEX_URL")
            .env_remove("VIRTUAL_ENV")
            .output()
            .unwrap()
    }
}

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
    stdout(o)
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| (e.path().to_path_buf(), std::fs::read(e.path()).unwrap()))
        .collect()
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The fixture built here (Debian 12, glibc 2.36) needs GLIBC_2.34: build-wheel tags it for that policy.
const WHEEL: &str = "deep_ep-1.2.1+0bfa6c2-cp311-cp311-manylinux_2_34_x86_64.whl";

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn publish_pin_set_uv_lock_sync_and_the_lock_check_chain() {
    let s = Setup::new();
    // 1. publish: the index, signed; twice changes no byte; --check passes.
    let out = ok(&s.publish(&["--variant", "demo"]));
    assert!(out.contains(&format!("published demo: {WHEEL}")), "{out}");
    let files = s.path("idx/demo/simple/deep-ep");
    let wheel = std::fs::read(files.join(WHEEL)).unwrap();
    let sha = sha256(&wheel);
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(files.join("index.json")).unwrap()).unwrap();
    assert_eq!(json["files"][0]["hashes"]["sha256"], sha.as_str());
    let metadata = std::fs::read(files.join(format!("{WHEEL}.metadata"))).unwrap();
    assert!(metadata.starts_with(b"Metadata-Version:"), "{}", String::from_utf8_lossy(&metadata));
    assert_eq!(json["files"][0]["core-metadata"]["sha256"], sha256(&metadata).as_str());
    let html = std::fs::read_to_string(files.join("index.html")).unwrap();
    assert!(
        html.contains(&format!("#sha256={sha}\" data-dist-info-metadata=\"sha256={}", sha256(&metadata))),
        "{html}"
    );
    let statement: serde_json::Value =
        serde_json::from_slice(&std::fs::read(files.join(format!("{WHEEL}.intoto.json"))).unwrap()).unwrap();
    assert_eq!(statement["subject"][0]["digest"]["sha256"], sha.as_str());
    let manifest = Manifest::parse(&std::fs::read(s.path("idx/demo/index.json")).unwrap()).unwrap();
    let public = PublicKey::parse(&s.public).unwrap();
    assert_eq!(manifest.verify(std::slice::from_ref(&public)), Ok("test-index-1".to_string()));
    assert_eq!((manifest.wheels[0].sha256.as_str(), manifest.wheels[0].provenance.rev.as_str()), (sha.as_str(), REV));
    let before = snapshot(&s.path("idx"));
    let again: serde_json::Value = serde_json::from_str(&ok(&s.publish(&["--variant", "demo", "--format", "json"])))
        .expect("publish --format json prints one JSON document");
    assert_eq!((again["files_written"].as_u64(), again["files_unchanged"].as_u64()), (Some(0), Some(8)), "{again}");
    assert_eq!(again["wheels"][0]["sha256"], sha.as_str());
    assert_eq!(
        (again["wheels"][0]["index"].as_str(), again["wheels"][0]["arch"].as_str()),
        (Some("demo"), Some("x86_64"))
    );
    assert_eq!(snapshot(&s.path("idx")), before, "publishing twice changed bytes");
    assert!(ok(&s.check()).contains(": ok ("));
    let quiet = s.forge(&[
        "--quiet",
        "publish",
        "--check",
        s.path("idx").to_str().unwrap(),
        "--pins",
        s.pins.to_str().unwrap(),
        "--variant",
        "demo",
        "--trusted-key",
        &s.public,
        "--format",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&ok(&quiet)).unwrap();
    assert_eq!((doc["ok"].as_bool(), doc["problems"].as_array().map(Vec::len)), (Some(true), Some(0)), "{doc}");
    assert_eq!(stderr(&quiet), "", "--quiet hides the progress notes");

    // 2. pin set --index, real uv against a real HTTP server.
    let server = support::HttpServer::start(&s.tools.join("bin/python"), &s.path("idx"));
    let consumer = s.path("consumer");
    copy_dir(&root().join("tests/fixtures/consumer-index"), &consumer);
    let url = format!("http://127.0.0.1:{}", server.port);
    let o = s.pin_set_index(&url, "demo");
    ok(&o);
    let py = std::fs::read_to_string(consumer.join("pyproject.toml")).unwrap();
    assert!(py.contains("\"deep_ep==1.2.1+0bfa6c2\","), "{py}");
    assert!(py.contains("  # DeepEP, built by uv from git unless an index serves it\n"), "comment kept: {py}");
    assert!(py.contains(&format!("url = \"{url}/demo/simple\"\nexplicit = true")), "{py}");
    assert!(!py.contains("dependency-metadata"), "{py}");
    ok(&s.uv(&["lock"]));
    let lock = std::fs::read_to_string(consumer.join("uv.lock")).unwrap();
    assert!(lock.contains(&format!("hash = \"sha256:{sha}\"")), "{lock}");
    assert!(lock.contains(&format!("source = {{ registry = \"{url}/demo/simple\" }}")), "{lock}");
    ok(&s.uv(&["sync", "--locked"]));
    let import = Command::new(consumer.join(".venv/bin/python"))
        .args(["-c", "import deep_ep, importlib.metadata as m; print(m.version('deep-ep'))"])
        .output()
        .unwrap();
    assert_eq!(stdout(&import).trim(), "1.2.1+0bfa6c2", "{}", stderr(&import));

    // 3. lock check: clean with the signed manifest.
    let mpath = s.path("idx/demo/index.json");
    let clean = ok(&s.lock_check(&mpath));
    assert!(clean.contains("ok: 0 error(s)"), "{clean}");
    // The same manifest fetched from the index URL pyproject.toml names.
    let fetched = ok(&s.lock_check_at("index"));
    assert!(fetched.contains("ok: 0 error(s)"), "{fetched}");
    provenance_not_pinned(&s, &mpath);

    // verify of the index URL: the signed manifest, each wheel and its statement checked,
    // each rebuilt and compared (a wheel URL takes the same path for one wheel).
    let wheel_url = format!("{url}/demo/simple/deep-ep/{}", WHEEL.replace('+', "%2B"));
    let index_url = format!("{url}/demo/");
    let verify = |at: &str, extra: &[&str]| {
        let source = root().join("tests/fixtures/mini-deepep");
        let python = s.tools.join("bin/python");
        let mut args = vec!["verify", at, "--trusted-key", s.public.as_str()];
        args.extend_from_slice(&["--source", source.to_str().unwrap(), "--python", python.to_str().unwrap()]);
        args.extend_from_slice(extra);
        s.forge(&args)
    };
    let v = ok(&verify(&index_url, &["--wheel", WHEEL]));
    assert!(v.contains("verified:") && v.contains(&format!("{index_url}: every wheel verified")), "{v}");
    let o = verify(&index_url, &["--wheel", "deep_ep-9.9.9-cp311-cp311-linux_x86_64.whl"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("lists no wheel named deep_ep-9.9.9") && stderr(&o).contains(WHEEL));
    let other = s.path("other.key");
    let o = s.forge(&["cache", "keygen", "--name", "other-1", "--out", other.to_str().unwrap()]);
    let other_public = ok(&o).lines().next().unwrap().trim().to_string();
    let o = s.forge(&["verify", &index_url, "--trusted-key", &other_public]);
    assert_eq!(o.status.code(), Some(1), "an index signed by a key not trusted: {}", stderr(&o));
    assert!(stderr(&o).contains("signed only by keys you do not trust"), "{}", stderr(&o));

    // 4. The server's wheel swapped (pages rewritten to match, as an attacker would),
    //    the consumer relocks: lock check and publish --check exit 1 naming it.
    tamper_wheel(&s, &files);
    ok(&s.uv(&["lock", "--refresh-package", "deep-ep"]));
    let o = s.lock_check(&mpath);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!("error[lock-wheel-unattested]: uv.lock pins the deep-ep wheel {WHEEL} with sha256 ")),
        "{out}"
    );
    assert!(out.contains(&format!("the signed manifest lists it with sha256 {sha}")), "{out}");
    // The fix names the check that tells a changed server file from a stale lock, not "publish again".
    assert!(
        out.contains(&format!("fix: find which: `deepep-forge verify {index_url} --trusted-key '<NAME:BASE64>'`")),
        "{out}"
    );
    assert!(out.contains("uv.lock:"), "{out}");
    let o = s.check();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains(&format!("{WHEEL}: sha256 ")), "{}", stdout(&o));
    for at in [&wheel_url, &index_url] {
        let o = verify(at, &[]);
        assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
        // A longer wheel is refused when its headers announce more than the signed size; another by its digest.
        assert!(stderr(&o).contains(&format!("{wheel_url}: ")), "{}", stderr(&o));
        assert!(stderr(&o).contains("the wheel on the server was changed"), "{}", stderr(&o));
    }
    let o = verify(&index_url, &["--format", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!((doc["verified"].as_bool(), doc["wheels"][0]["url"].as_str()), (Some(false), Some(wheel_url.as_str())));
    drop(server);

    // 5. A different file under a published name: exit 1, nothing written.
    let before = snapshot(&s.path("idx"));
    let o = s.publish(&["--variant", "demo"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing published") && stderr(&o).contains(WHEEL), "{}", stderr(&o));
    assert_eq!(snapshot(&s.path("idx")), before);

    bad_manifests(&s, &mpath);
}

/// A consumer new to DeepEP (`uv init`, real uv) and one with a plain git
/// requirement move to the index with `pin set --index`; the `next:` line it
/// prints (its key placeholder filled in) passes after `uv lock`, and
/// `uv sync --locked` installs the published wheel.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn a_new_consumer_from_uv_init_moves_to_the_index_and_its_next_step_passes() {
    let s = Setup::new();
    ok(&s.publish(&["--variant", "demo"]));
    let server = support::HttpServer::start(&s.tools.join("bin/python"), &s.path("idx"));
    let url = format!("http://127.0.0.1:{}", server.port);
    let python = s.tools.join("bin/python");
    let init = Command::new(s.tools.join("bin/uv"))
        .args(["init", "--no-workspace", "--python", python.to_str().unwrap(), "consumer"])
        .current_dir(s.dir.path())
        .env("UV_PYTHON_DOWNLOADS", "never")
        .output()
        .unwrap();
    ok(&init);
    let o = s.pin_set_index(&url, "demo");
    let out = ok(&o);
    let py = std::fs::read_to_string(s.path("consumer/pyproject.toml")).unwrap();
    assert!(py.contains("dependencies = [\"deep_ep==1.2.1+0bfa6c2\"]"), "{py}");
    assert!(py.contains(&format!("url = \"{url}/demo/simple\"\nexplicit = true")), "{py}");
    assert!(out.contains("project.dependencies (added)"), "{out}");
    let next = out.lines().find_map(|l| l.strip_prefix("next: ")).expect("a next: line");
    assert!(stderr(&o).contains("<NAME:BASE64> in the next step is the public key"), "{}", stderr(&o));
    let (relock, check) = next.split_once(" && ").expect("uv lock && lock check");
    assert!(relock.starts_with("uv lock --project "), "{next}");
    let check = check.replace("'<NAME:BASE64>'", &s.public);
    let args: Vec<&str> = check.split_whitespace().skip(1).collect();
    assert_eq!(args[..2], ["lock", "check"], "{next}");
    assert!(check.contains(" --index-manifest index --trusted-key "), "{next}");
    ok(&s.uv(&["lock"]));
    ok(&s.uv(&["sync", "--locked"]));
    let import = Command::new(s.path("consumer/.venv/bin/python"))
        .args(["-c", "import deep_ep, importlib.metadata as m; print(m.version('deep-ep'))"])
        .output()
        .unwrap();
    assert_eq!(stdout(&import).trim(), "1.2.1+0bfa6c2", "{}", stderr(&import));
    let checked = ok(&s.forge(&args));
    assert!(checked.contains("ok: 0 error(s)"), "{checked}");
    assert!(!checked.contains("index-not-verified"), "the manifest was checked: {checked}");

    // A consumer with a plain git requirement (no revision, no label): moved too.
    let git = s.path("git-consumer");
    std::fs::create_dir(&git).unwrap();
    let text = "[project]\nname = \"g\"\nversion = \"0\"\nrequires-python = \">=3.11\"\ndependencies = [\n  \"numpy\",\n  \"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git\",\n]\n";
    std::fs::write(git.join("pyproject.toml"), text).unwrap();
    let repo = root().join("tests/fixtures/mini-deepep");
    let o = s.forge(&[
        "pin",
        "set",
        REV,
        "--project",
        git.to_str().unwrap(),
        "--pins",
        s.pins.to_str().unwrap(),
        "--source",
        repo.to_str().unwrap(),
        "--index",
        &url,
        "--variant",
        "demo",
    ]);
    ok(&o);
    let py = std::fs::read_to_string(git.join("pyproject.toml")).unwrap();
    assert!(py.contains("  \"numpy\",\n  \"deep_ep==1.2.1+0bfa6c2\",\n]"), "{py}");
    drop(server);
}

/// pins.toml moved to another revision: the published wheel's provenance no longer
/// matches it. `publish --check` and `lock check` exit 1 naming it; nothing is written.
fn provenance_not_pinned(s: &Setup, mpath: &Path) {
    let other = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let moved = s.path("moved-pins.toml");
    std::fs::write(&moved, std::fs::read_to_string(&s.pins).unwrap().replacen(REV, other, 1)).unwrap();
    let before = snapshot(s.dir.path());
    let idx = s.path("idx");
    let o = s.forge(&[
        "publish",
        "--check",
        idx.to_str().unwrap(),
        "--pins",
        moved.to_str().unwrap(),
        "--variant",
        "demo",
        "--trusted-key",
        &s.public,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("no x86_64 wheel of variant demo at pins.toml's revision {other}")),
        "{}",
        stdout(&o)
    );
    let o = s.forge(&[
        "lock",
        "check",
        "--project",
        s.path("consumer").to_str().unwrap(),
        "--pins",
        moved.to_str().unwrap(),
        "--index-manifest",
        mpath.to_str().unwrap(),
        "--trusted-key",
        &s.public,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains(&format!("error[lock-wheel-unattested] [x86_64]: the deep-ep wheel {WHEEL} was built from revision 0bfa6c2, not pins.toml's aaaaaaa")), "{out}");
    assert!(out.contains("error[index-label]"), "the label selects the old revision's wheel: {out}");
    assert_eq!(snapshot(s.dir.path()), before, "nothing written");
}

/// Rewrite the served wheel (one member changed) and the pages' hashes.
fn tamper_wheel(s: &Setup, files: &Path) {
    let w = files.join(WHEEL);
    let old = sha256(&std::fs::read(&w).unwrap());
    let script = "import sys, zipfile\np = sys.argv[1]\nz = zipfile.ZipFile(p)\nitems = [(i, z.read(i.filename)) for i in z.infolist()]\nz.close()\nwith zipfile.ZipFile(p, 'w') as out:\n    for i, data in items:\n        if i.filename == 'deep_ep/__init__.py':\n            data += b'# tampered\\n'\n        out.writestr(i, data)\n";
    let o = Command::new(s.tools.join("bin/python")).args(["-c", script]).arg(&w).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let new = sha256(&std::fs::read(&w).unwrap());
    for page in ["index.html", "index.json"] {
        let p = files.join(page);
        let text = std::fs::read_to_string(&p).unwrap().replace(&old, &new);
        std::fs::write(&p, text).unwrap();
    }
}

/// Tampered, unsigned and name-escaping manifests: exit 1 naming the file, nothing written.
fn bad_manifests(s: &Setup, good: &Path) {
    let text = std::fs::read_to_string(good).unwrap();
    let tampered = s.path("tampered.json");
    std::fs::write(&tampered, text.replacen("\"size\": ", "\"size\": 1", 1)).unwrap();
    let o = s.lock_check(&tampered);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("tampered.json: its signature by `test-index-1` does not verify"), "{}", stderr(&o));

    let mut m = Manifest::parse(text.as_bytes()).unwrap();
    m.signatures.clear();
    let unsigned = s.path("unsigned.json");
    std::fs::write(&unsigned, m.render()).unwrap();
    let o = s.lock_check(&unsigned);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unsigned.json: it is not signed"), "{}", stderr(&o));

    let key = SecretKey::load(&s.key).unwrap();
    m.wheels[0].wheel = "../../escape-1.0-py3-none-any.whl".into();
    m.sign(&key);
    let escaping = s.path("idx/demo/index.json");
    std::fs::write(&escaping, m.render()).unwrap();
    let before = snapshot(s.dir.path());
    let o = s.check();
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("is not a safe wheel file name"), "{}", stdout(&o));
    let o = s.lock_check(&escaping);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not a safe wheel file name"), "{}", stderr(&o));
    assert_eq!(snapshot(s.dir.path()).len(), before.len(), "nothing written outside");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn bad_publish_input_is_refused_before_anything_is_written() {
    let s = Setup::new();
    let o = s.publish(&["--variant", "nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("unknown variant `nope`"), "{}", stderr(&o));
    assert!(!s.path("idx").exists());
    // A consumer pointed at a plain-http index off this machine: exit 2, pyproject unchanged.
    let consumer = s.path("consumer");
    copy_dir(&root().join("tests/fixtures/consumer-index"), &consumer);
    let before = std::fs::read(consumer.join("pyproject.toml")).unwrap();
    let o = s.pin_set_index("http://example.org/deepep", "demo");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("http:// only on 127.0.0.1/localhost"), "{}", stderr(&o));
    assert_eq!(std::fs::read(consumer.join("pyproject.toml")).unwrap(), before);
    // An unknown variant for the index: exit 2.
    let o = s.pin_set_index("https://example.org/deepep", "nope");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(std::fs::read(consumer.join("pyproject.toml")).unwrap(), before);
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn an_index_whose_manifest_redirects_to_plain_http_is_refused() {
    let s = Setup::new();
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    let handle = std::thread::spawn(move || {
        // Every request (`pin set --index` reads the index too, then `lock check` the
        // manifest), answered with a redirect to plain http, until the test is done.
        let started = std::time::Instant::now();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) && started.elapsed().as_secs() < 300 {
            if let Ok(Some(req)) = server.recv_timeout(std::time::Duration::from_millis(200)) {
                let to = format!("http://127.0.0.1:{port}/elsewhere/index.json");
                let h = tiny_http::Header::from_bytes("Location", to.as_bytes()).unwrap();
                let _ = req.respond(tiny_http::Response::empty(302).with_header(h));
            }
        }
    });
    let consumer = s.path("consumer");
    copy_dir(&root().join("tests/fixtures/consumer-index"), &consumer);
    let url = format!("http://127.0.0.1:{port}");
    ok(&s.pin_set_index(&url, "demo"));
    let before = snapshot(s.dir.path());
    let o = s.lock_check_at("index");
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("http://127.0.0.1:{port}/demo/index.json")), "{err}");
    assert!(
        err.contains("a redirect to http://127.0.0.1:") && err.contains("/elsewhere/index.json leaves https"),
        "{err}"
    );
    assert_eq!(snapshot(s.dir.path()), before, "nothing written");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    handle.join().unwrap();
}

/// Issue 35 §1, writes outside the output: a variant or project folder that is
/// a link, a page whose place is a folder, a manifest that is a link: exit 2
/// before anything is written (the link's target untouched).
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn publish_never_writes_through_a_link_or_over_a_folder() {
    let s = Setup::new();
    let victim = s.path("victim");
    std::fs::create_dir_all(&victim).unwrap();
    type Plant<'a> = Box<dyn Fn(&Path) + 'a>;
    let cases: [(&str, Plant<'_>, &str); 5] = [
        (
            "variant folder a link",
            Box::new(|i: &Path| std::os::unix::fs::symlink(&victim, i.join("demo")).unwrap()),
            "demo: a symbolic link",
        ),
        (
            "project folder a link",
            Box::new(|i: &Path| {
                std::fs::create_dir_all(i.join("demo/simple")).unwrap();
                std::os::unix::fs::symlink(&victim, i.join("demo/simple/deep-ep")).unwrap()
            }),
            "deep-ep: a symbolic link",
        ),
        (
            "manifest a link",
            Box::new(|i: &Path| {
                std::fs::create_dir_all(i.join("demo")).unwrap();
                std::os::unix::fs::symlink(victim.join("index.json"), i.join("demo/index.json")).unwrap()
            }),
            "index.json: a symbolic link",
        ),
        (
            "a page's place is a folder",
            Box::new(|i: &Path| std::fs::create_dir_all(i.join("demo/simple/deep-ep/index.html")).unwrap()),
            "index.html: a folder where a file of the index goes",
        ),
        (
            "simple is a file",
            Box::new(|i: &Path| {
                std::fs::create_dir_all(i.join("demo")).unwrap();
                std::fs::write(i.join("demo/simple"), "x").unwrap()
            }),
            "simple: not a folder",
        ),
    ];
    for (name, plant, says) in cases {
        let idx = s.path("idx");
        let _ = std::fs::remove_dir_all(&idx);
        std::fs::create_dir_all(&idx).unwrap();
        plant(&idx);
        let before = (snapshot(&idx), snapshot(&victim));
        let o = s.publish(&["--variant", "demo"]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(says) && stderr(&o).contains("nothing published"), "{name}: {}", stderr(&o));
        assert_eq!((snapshot(&idx), snapshot(&victim)), before, "{name}: something was written");
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0, "{name}: written through the link");
    }
}

/// Issue 35 §1, lost updates: publish holds a lock on the index folder from
/// reading the manifest to the last rename; a second publish waits (and says
/// so), then its wheel is in the final signed manifest.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn two_publishes_into_one_folder_are_serialised() {
    use std::io::BufRead;
    let s = Setup::new();
    ok(&s.publish(&["--variant", "demo", "--out", s.path("warm").to_str().unwrap()])); // the wheel in the cache
    let idx = s.path("idx");
    std::fs::create_dir_all(&idx).unwrap();
    let held = std::fs::File::open(&idx).unwrap();
    held.lock().unwrap();
    // The same command `publish` runs, spawned so its stderr can be watched.
    let (source, python) = (root().join("tests/fixtures/mini-deepep"), s.tools.join("bin/python"));
    let mut child = bin()
        .args(["publish", "--pins", s.pins.to_str().unwrap(), "--source", source.to_str().unwrap()])
        .args(["--python", python.to_str().unwrap(), "--signing-key", s.key.to_str().unwrap()])
        .args(["--out", idx.to_str().unwrap(), "--variant", "demo"])
        .current_dir(s.dir.path())
        .env("DEEPEP_FORGE_CACHE_DIR", s.path("cache"))
        .env("CUDA_HOME", &s.cuda)
        .env("PATH", format!("{}:{}", s.tools.join("bin").display(), std::env::var("PATH").unwrap_or_default()))
        .env("XDG_CONFIG_HOME", s.path("config"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "publish ended without waiting: {seen}");
        seen.push_str(&line);
        if line.contains("waiting for another publish into") {
            break;
        }
    }
    assert!(!idx.join("demo").exists(), "written while another publish held the folder");
    drop(held);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{seen}{rest}");
    let m = Manifest::parse(&std::fs::read(idx.join("demo/index.json")).unwrap()).unwrap();
    assert_eq!(m.wheels.len(), 1);
    // Two at once into a fresh folder: both succeed, the manifest verifies and lists the wheel.
    let idx2 = s.path("idx2");
    let run = || s.publish(&["--variant", "demo", "--out", idx2.to_str().unwrap()]);
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(run);
        let b = sc.spawn(run);
        (a.join().unwrap(), b.join().unwrap())
    });
    ok(&a);
    ok(&b);
    let m = Manifest::parse(&std::fs::read(idx2.join("demo/index.json")).unwrap()).unwrap();
    assert_eq!(m.verify(&[PublicKey::parse(&s.public).unwrap()]), Ok("test-index-1".to_string()));
    assert_eq!(m.wheels.len(), 1);
}
