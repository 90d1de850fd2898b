//! Issue #54 for the stores (forge-store): a link planted in the cache, in an
//! evidence folder or in a publish output folder never carries a read, a
//! write or a removal outside it (exit 2 naming the place, or the name left
//! alone and reported), a FIFO where a statement or its folder goes is
//! refused, and a download a signed manifest describes is bounded by the size
//! it signs (example 7: a server that announces 100 MB and sends a byte a
//! second is refused when its headers arrive, not held for 411 s). Each case
//! runs the real binary and asserts its exit code, its message and that
//! nothing outside changed (harness: tests/it/support/hostile.rs).
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::hostile::{run_all, snapshot, Case};
use crate::support::{self, stderr};
use forge_store::cache::sign::SecretKey;
use forge_store::index::manifest::{Manifest, Summary, WheelEntry};

/// A well-formed cache key (64 lowercase hex).
fn key(c: char) -> String {
    c.to_string().repeat(64)
}

const WHEEL: &str = "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl";

/// A valid cache entry for `key` whose wheel is the 3 bytes `abc`.
fn entry(key: &str) -> String {
    serde_json::json!({
        "schema": 1, "key": key, "wheel": WHEEL, "sha256": forge_os::input::sha256_hex(b"abc"), "size": 3,
        "variant": "sn", "version": "1.2.1+17cfb81", "created": "2026-11-30T00:00:00Z", "created_secs": 0,
    })
    .to_string()
}

fn link(target: &'static str, at: &'static str) -> impl Fn(&Path) + Send + Sync {
    move |d: &Path| {
        let at = d.join(at);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, at).unwrap()
    }
}

fn fifo(at: &'static str) -> impl Fn(&Path) + Send + Sync {
    move |d: &Path| {
        let p = d.join(at);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
    }
}

/// `victim/` outside the cache, holding a whole cache entry (a wheel gc would remove).
fn victim_entry(c: Case) -> Case {
    c.file("victim/entry.json", entry(&key('a'))).file(&format!("victim/{WHEEL}"), "abc")
}

/// The cache never reads, writes or removes through a link planted in it: a
/// link where an entry, its `wheels/`, `locks/`, `tmp/`, `trees/`, an image
/// base or a toolchain goes is reported or refused, and `cache gc` removes
/// nothing it points to.
#[test]
fn a_link_planted_in_the_cache_is_never_followed() {
    let k = key('a');
    let at_key: &'static str = Box::leak(format!("cache/wheels/{k}").into_boxed_str());
    let gc0 = ["cache", "gc", "--keep", "0", "--keep-toolchains", "0", "--keep-trees", "0", "--keep-bases", "0"];
    run_all(vec![
        victim_entry(Case::new("cache ls: wheels/<key> is a link out"))
            .setup(link("../../victim", at_key))
            .args(&["cache", "ls"])
            .exit(0)
            .says(&format!("not an entry: wheels/{}", &k[..40]))
            .says("a symbolic link (the cache holds no links; never followed)"),
        victim_entry(Case::new("cache gc: wheels/<key> is a link out"))
            .setup(link("../../victim", at_key))
            .args(&gc0)
            .exit(0)
            .says("0 wheels and 0 toolchains kept")
            .may_change("cache/"),
        victim_entry(Case::new("cache gc: wheels/ is a link out"))
            .file(&format!("victim/{k}/entry.json"), entry(&k))
            .file(&format!("victim/{k}/{WHEEL}"), "abc")
            .setup(link("../victim", "cache/wheels"))
            .args(&gc0)
            .exit(0)
            .says("0 wheels")
            .may_change("cache/"),
        Case::new("cache ls: wheels/ is a link out")
            .file(&format!("victim/{k}/entry.json"), entry(&k))
            .setup(link("../victim", "cache/wheels"))
            .args(&["cache", "ls"])
            .exit(0)
            .says("not an entry: wheels: not read: a symbolic link"),
        Case::new("cache gc: locks/ is a link out")
            .file(&format!("cache/wheels/{k}/entry.json"), entry(&k))
            .file(&format!("cache/wheels/{k}/{WHEEL}"), "abc")
            .file("victim/keep", "x")
            .setup(link("../victim", "cache/locks"))
            .args(&gc0)
            .says("cache/locks is a symbolic link")
            .says("refused")
            .may_change("cache/tmp"),
        Case::new("cache gc: tmp/ is a link out")
            .file("victim/build-0123456789abcdef/wheel.whl", "abc")
            .file("victim/build-0123456789abcdef.lock", "")
            .setup(link("../victim", "cache/tmp"))
            .args(&["cache", "gc"])
            .exit(0),
        Case::new("cache gc: a stale staging folder holds a link out")
            .file("victim/keep", "x")
            .setup(link("../../../victim", "cache/tmp/build-0123456789abcdef/out"))
            .args(&["cache", "gc"])
            .exit(0)
            .says("removed leftover")
            .may_change("cache/"),
        Case::new("cache gc: trees/ is a link out")
            .file(&format!("victim/entries/{k}.json"), "{}")
            .file(&format!("victim/objects/{}", key('b')), "object")
            .setup(link("../victim", "cache/trees"))
            .args(&gc0)
            .exit(0)
            .says("kept trees: not read")
            .says("symbolic link"),
        Case::new("cache gc: trees/objects is a link out")
            .file(&format!("victim/{}", key('b')), "an object nothing names")
            .setup(|d| std::fs::create_dir_all(d.join("cache/trees/entries")).unwrap())
            .setup(link("../../victim", "cache/trees/objects"))
            .args(&gc0)
            .exit(0)
            .may_change("cache/"),
        Case::new("cache gc: images/base-<key> is a link out")
            .file(
                "victim/base.json",
                serde_json::json!({"schema": 1, "key": key('0'), "suite": "bookworm", "mirror": "http://m", "arch": "amd64", "release_date": "x"})
                    .to_string(),
            )
            .file("victim/rootfs.tar", "rootfs")
            .setup(link("../../victim", "cache/images/base-0000000000000000"))
            .args(&gc0)
            .exit(0)
            .says("0 image bases kept")
            .may_change("cache/"),
        Case::new("cache keygen: --out is a link out")
            .file("victim/key", "keep")
            .setup(link("victim/key", "team.key"))
            .args(&["cache", "keygen", "--name", "team-1", "--out", "team.key"])
            .says("team.key: something is there")
            .hides("team-1:"),
        Case::new("cache gc: toolchains/<key> is a link out")
            .file("victim/toolchain.json", "{\"packages\": {\"torch\": \"2.9.0\"}}")
            .setup(link("../../victim", "cache/toolchains/0123456789abcdef"))
            .args(&gc0)
            .exit(0)
            .says("0 toolchains kept")
            .may_change("cache/"),
    ]);
}

/// A secret key file of the user's, mode 0600 (made by the tool's own code).
fn secret_key(d: &Path) {
    SecretKey::generate("team-1").unwrap().write_new(&d.join("k.key")).unwrap();
}

/// `evidence add` of a wheel by its sha256 into `ev` (or `--out` as given).
fn add(name: &str, out: &str) -> Case {
    Case::new(name).setup(secret_key).args(&[
        "evidence",
        "add",
        "--sha256",
        &key('c'),
        "--wheel-name",
        WHEEL,
        "--kind",
        "training",
        "--outcome",
        "20/20 steps",
        "--signing-key",
        "k.key",
        "--out",
        out,
    ])
}

/// An evidence folder is never written or read through a link, and a FIFO
/// where the folder or a wheel's folder goes is refused, not waited on.
#[test]
fn an_evidence_folder_is_never_written_or_read_through_a_link() {
    let sha_dir: &'static str = Box::leak(format!("ev/{}", key('c')).into_boxed_str());
    let signer = SecretKey::generate("team-1").unwrap();
    let public = signer.public().to_string();
    let pins = std::fs::read_to_string(support::root().join("tests/fixtures/demo-pins.toml")).unwrap();
    run_all(vec![
        add("evidence add: --out is a link out", "ev")
            .setup(|d| std::fs::create_dir_all(d.join("victim")).unwrap())
            .setup(link("victim", "ev"))
            .says("ev: is a symlink (evidence folders are never followed)"),
        add("evidence add: the wheel's folder is a link out", "ev")
            .setup(|d| std::fs::create_dir_all(d.join("victim")).unwrap())
            .setup(link("../victim", sha_dir))
            .says(sha_dir)
            .says("is a symbolic link, not a folder"),
        add("evidence add: the wheel's folder is a FIFO", "ev").setup(fifo(sha_dir)).says(sha_dir).says("FIFO"),
        add("evidence add: --out is a FIFO", "ev").setup(fifo("ev")).says("ev: is not a folder"),
        add("evidence add: --out is a file", "ev").file("ev", "x").says("ev: is not a folder"),
        Case::new("evidence show: a statement is a link out of the folder")
            .file("victim/training-0123456789abcdef.dsse.json", "{}")
            .file("pins.toml", pins)
            .setup(link(
                "../../victim/training-0123456789abcdef.dsse.json",
                Box::leak(format!("{sha_dir}/training-0123456789abcdef.dsse.json").into_boxed_str()),
            ))
            .args(&["evidence", "show", "--pins", "pins.toml", "--evidence", "ev", "--trusted-key", &public])
            .says("training-0123456789abcdef.dsse.json")
            .says("leads outside the evidence folder"),
    ]);
}

/// A signed manifest of variant `demo` listing one wheel of 634,517 bytes.
fn manifest(key: &SecretKey) -> (Vec<u8>, String) {
    let wheel = "deep_ep-1.2.1+0bfa6c2-cp311-cp311-linux_x86_64.whl".to_string();
    let mut m = Manifest {
        schema: forge_store::index::manifest::SCHEMA,
        project: "deep-ep".into(),
        variant: "demo".into(),
        pins_sha256: "a".repeat(64),
        wheels: vec![WheelEntry {
            wheel: wheel.clone(),
            sha256: "b".repeat(64),
            size: 634_517,
            cache_key: "c".repeat(64),
            metadata_sha256: "d".repeat(64),
            provenance_sha256: "e".repeat(64),
            provenance: Summary {
                rev: "9".repeat(40),
                variant: "demo".into(),
                arch: "x86_64".into(),
                cuda_arch_list: "9.0".into(),
                multinode: false,
                transport: None,
                version: "1.2.1+0bfa6c2".into(),
            },
        }],
        evidence: vec![],
        variants_json: vec![],
        signatures: vec![],
    };
    m.sign(key);
    (m.render(), wheel)
}

/// How the server answers for the wheel.
#[derive(Clone, Copy)]
enum Announce {
    /// `Content-Length: 100000000`.
    Huge,
    /// The signed size.
    Signed,
    /// No length (the body ends when the connection closes).
    Nothing,
}

/// An index on 127.0.0.1: `/demo/index.json` is `manifest`; every other path
/// is answered 200 as `how` says, then a byte a second for ten minutes.
fn trickling_index(manifest: Vec<u8>, how: Announce) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let manifest = manifest.clone();
            std::thread::spawn(move || {
                let mut req = [0u8; 8192];
                let n = s.read(&mut req).unwrap_or(0);
                let head = String::from_utf8_lossy(&req[..n]).into_owned();
                if head.starts_with("GET /demo/index.json ") {
                    let h =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", manifest.len());
                    let _ = s.write_all(h.as_bytes()).and_then(|_| s.write_all(&manifest));
                    return;
                }
                let len = match how {
                    Announce::Huge => "Content-Length: 100000000\r\n".to_string(),
                    Announce::Signed => "Content-Length: 634517\r\n".to_string(),
                    Announce::Nothing => String::new(),
                };
                let _ = s.write_all(format!("HTTP/1.1 200 OK\r\n{len}Connection: close\r\n\r\n").as_bytes());
                for _ in 0..600 {
                    if s.write_all(b"x").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
        }
    });
    url
}

/// Issue #54, example 7: `verify` of a wheel (or an index) whose server
/// announces 100 MB and sends a byte a second, although the signed manifest
/// says 634,517 bytes. Refused when the headers arrive (exit 1, the wheel's
/// URL and the signed size named); with the signed length announced, or
/// none, the deadline follows the signed size (2 s base here, +2 s for the
/// size), never the server. Nothing is written: not in the working folder,
/// not in the temporary folder.
#[test]
fn verify_is_bounded_by_the_size_the_manifest_signs() {
    let key = SecretKey::generate("idx-1").unwrap();
    let (bytes, wheel) = manifest(&key);
    let public = key.public().to_string();
    for how in [Announce::Huge, Announce::Signed, Announce::Nothing] {
        let base = trickling_index(bytes.clone(), how);
        let wheel_url = format!("{base}/demo/simple/deep-ep/{}", wheel.replace('+', "%2B"));
        let index_url = format!("{base}/demo/");
        for at in [&wheel_url, &index_url] {
            let (work, tmp, cfg) =
                (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let start = Instant::now();
            let o = support::bin()
                .args(["verify", at, "--trusted-key", &public])
                .current_dir(work.path())
                .env("TMPDIR", tmp.path())
                .env("XDG_CONFIG_HOME", cfg.path())
                .env("DEEPEP_FORGE_HTTP_BASE_TIMEOUT", "2")
                .env_remove("DEEPEP_FORGE_TRUSTED_KEYS")
                .output()
                .unwrap();
            let took = start.elapsed();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{at}: {err}");
            assert!(took < Duration::from_secs(20), "{at}: held for {took:?} (the trickle takes minutes): {err}");
            assert!(err.contains(&wheel_url), "{at}: the wheel's URL: {err}");
            match how {
                Announce::Huge => {
                    assert!(err.contains("announces 100000000 bytes, more than the 634517 bytes signed"), "{err}");
                    assert!(err.contains("the wheel on the server was changed"), "{err}");
                }
                Announce::Signed | Announce::Nothing => assert!(err.contains("timed out"), "{at}: {err}"),
            }
            assert!(snapshot(work.path()).is_empty(), "{at}: wrote into the working folder");
            assert!(snapshot(tmp.path()).is_empty(), "{at}: left something in the temporary folder");
        }
    }
}

/// `publish` never writes through a link planted where a variant's folder or
/// its `simple/` folder goes under `--out`: exit 2 naming it, nothing written
/// where the link points.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc): bash .ci/run runs it")]
fn publish_never_writes_through_a_link_in_its_output_folder() {
    let (Some(tools), Some(cuda)) = (support::tools_venv(), support::cuda_home()) else {
        support::missing("the tools venv (nvcc)")
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(support::root().join("tests/fixtures/demo-pins.toml"), d.join("pins.toml")).unwrap();
    SecretKey::generate("idx-1").unwrap().write_new(&d.join("idx.key")).unwrap();
    let (source, python) = (support::root().join("tests/fixtures/mini-deepep"), tools.join("bin/python"));
    let publish = || {
        let mut c = support::bin();
        c.args(["publish", "--variant", "demo", "--pins", "pins.toml", "--signing-key", "idx.key", "--out", "idx"])
            .arg("--source")
            .arg(&source)
            .arg("--python")
            .arg(&python)
            .current_dir(d)
            .env("DEEPEP_FORGE_CACHE_DIR", d.join("cache"))
            .env("CUDA_HOME", &cuda)
            .env("PATH", format!("{}:{}", tools.join("bin").display(), std::env::var("PATH").unwrap_or_default()))
            .env("XDG_CONFIG_HOME", d.join("config"))
            .env_remove("DEEPEP_FORGE_TRUSTED_KEYS")
            .env_remove("DEEPEP_FORGE_CACHE_URL");
        for k in ["TORCH_CUDA_ARCH_LIST", "HYBRID_EP_MULTINODE", "NVSHMEM_DIR", "MAX_JOBS", "CC", "CXX"] {
            c.env_remove(k);
        }
        c.output().unwrap()
    };
    std::fs::create_dir_all(d.join("victim")).unwrap();
    std::fs::create_dir_all(d.join("idx")).unwrap();
    for (at, target) in [("idx/demo", "../victim"), ("idx/demo/simple", "../../victim")] {
        std::fs::create_dir_all(d.join(at).parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, d.join(at)).unwrap();
        let o = publish();
        assert_eq!(o.status.code(), Some(2), "{at}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("{at}: ")) && stderr(&o).contains("symbolic link"), "{}", stderr(&o));
        assert!(stderr(&o).contains("nothing published"), "{}", stderr(&o));
        assert!(snapshot(&d.join("victim")).is_empty(), "{at}: written through the link");
        std::fs::remove_file(d.join(at)).unwrap();
        if at == "idx/demo" {
            std::fs::create_dir_all(d.join(at)).unwrap();
        }
    }
}
