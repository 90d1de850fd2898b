//! The unit-time history travels with the team's caches (`builder::unit_order`,
//! `forge_store::cache::unit_times`): signed on the remote cache by `cache push` and
//! used by a fresh cache only when a trusted key signed it for this revision; kept in a
//! shared Redis compiler cache (a real `redis-server` on 127.0.0.1) so machine B's plan
//! has machine A's order; predicted from the source when no history exists anywhere;
//! and in one `build-wheel` of two variants of a revision, the later one's order is
//! settled at build time from what the earlier one just measured, as its plan says. A
//! hostile history is ignored with a warning. The wheels are the same bytes with and
//! without any of it. The labs' mini-deepep keeps a `.ninja_log` of its nvcc compiles,
//! as torch's ninja build of DeepEP does ([`lab`]): what a build measures.
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::build_support::*;
use crate::support::*;

/// Two variants of the same flags (two gencodes: nvcc `--threads 2`): `two-b` builds first.
const TWO_TWICE: &str = r#"
[[variant]]
name = "two-b"
arch = "x86_64"
cuda_arch_list = "9.0 10.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

/// A lab whose mini-deepep, committed once more, writes each extension's nvcc compiles
/// into `<build_temp>/<extension>/.ninja_log` (ninja's v5 format, as torch's ninja build
/// leaves it), so a build measures its units' times.
fn lab() -> Lab {
    let mut lab = Lab::new();
    let setup = lab.repo.join("setup.py");
    let text = std::fs::read_to_string(&setup).unwrap();
    let compile = "            subprocess.run(cmd, check=True)\n            objs.append(obj)\n";
    assert!(text.contains(compile), "mini-deepep's nvcc loop changed: update fleet_history::lab");
    let timed = "            start = int((time.monotonic() - T0) * 1000)\n            subprocess.run(cmd, check=True)\n            \
                 end = int((time.monotonic() - T0) * 1000)\n            \
                 with open(os.path.join(os.path.dirname(obj), \".ninja_log\"), \"a\") as log:\n                \
                 log.write(f\"{start}\\t{end}\\t0\\t{os.path.abspath(obj)}\\t0\\n\")\n            objs.append(obj)\n";
    let text = text.replacen(compile, timed, 1).replacen(
        "import sysconfig\n",
        "import sysconfig\nimport time\nT0 = time.monotonic()\n",
        1,
    );
    std::fs::write(&setup, text).unwrap();
    git(&lab.repo, &["commit", "-q", "-am", "keep a ninja log of the nvcc compiles"]);
    lab.rev = git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    lab
}

fn pins(lab: &Lab) -> PathBuf {
    lab.pins_with(&lab.rev, &format!("{TWO_TWICE}{TWO_ARCH}"))
}

/// The binary on the lab with `args`, the lab's pins and `--jobs 2`, exit 0 asserted.
fn forge(lab: &Lab, args: &[&str], env: &[(&str, &str)]) -> Output {
    let p = pins(lab);
    let mut all = args.to_vec();
    all.extend(["--jobs", "2", "--pins", p.to_str().unwrap()]);
    let mut c = lab.forge(&all);
    c.env_remove("DEEPEP_FORGE_NVCC_THREADS").env_remove("DEEPEP_FORGE_TRUSTED_KEYS");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{args:?}\n{}{}", stdout(&o), stderr(&o));
    o
}

fn plans(lab: &Lab, extra: &[&str], env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let mut args = vec!["plan", "--format", "json"];
    args.extend(extra);
    json(&forge(lab, &args, env))["plans"].as_array().unwrap().clone()
}

fn build(lab: &Lab, extra: &[&str], env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let mut args = vec!["build-wheel", "--format", "json"];
    args.extend(extra);
    let r = json(&forge(lab, &args, env))["results"].as_array().unwrap().clone();
    let _ = std::fs::remove_dir_all(&lab.out);
    r
}

fn notes(r: &serde_json::Value) -> Vec<String> {
    r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
}

fn warnings(p: &serde_json::Value) -> String {
    p["warnings"].as_array().map(|w| format!("{w:?}")).unwrap_or_default()
}

fn order(p: &serde_json::Value) -> serde_json::Value {
    p["side_by_side"]["order"].clone()
}

fn measured(from: &str) -> serde_json::Value {
    serde_json::json!({ "kind": "measured", "from": from })
}

const PREDICTED: &str = r#"{"kind":"predicted","from":"source"}"#;

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_first_build_is_predicted_and_a_later_variant_settles_its_order_at_build_time() {
    let lab = lab();
    let first = plans(&lab, &["--variant", "two"], &[]);
    assert_eq!(order(&first[0]), serde_json::from_str::<serde_json::Value>(PREDICTED).unwrap(), "{:#}", first[0]);
    assert!(first[0]["side_by_side"]["first_units"].as_array().is_some_and(|u| !u.is_empty()), "{:#}", first[0]);
    let human = stdout(&forge(&lab, &["plan", "--variant", "two"], &[]));
    assert!(human.contains("  order       predicted (from source: the .cu files setup.py names, by size)"), "{human}");

    let both = plans(&lab, &["--variant", "two-b", "--variant", "two"], &[]);
    assert_eq!(order(&both[1]), serde_json::json!({ "kind": "at_build" }), "{:#}", both[1]);
    assert!(both[1]["side_by_side"].get("first_units").is_none(), "nothing settled before the build: {:#}", both[1]);
    assert_eq!(both[1]["cache_key"], first[0]["cache_key"], "the order is not keyed");
    let human = stdout(&forge(&lab, &["plan", "--variant", "two-b", "--variant", "two"], &[]));
    assert!(
        human.contains("  order       settled at build time (from what an earlier variant of this run measures"),
        "{human}"
    );

    let r = build(&lab, &["--variant", "two-b", "--variant", "two", "--no-cache", "--no-compiler-cache"], &[]);
    let said = notes(&r[1]);
    assert!(
        said.iter().any(|n| n.starts_with(
            "unit order settled at build time: measured (this machine's last build of the revision); 1 unit(s) first"
        )),
        "the second variant uses what the first just measured: {said:#?}"
    );
    assert!(said.iter().any(|n| n.starts_with("unit order: ")), "and the build ran it: {said:#?}");

    // Another cache, one thread a unit: no order at all, the same bytes.
    let fresh = tempfile::tempdir().unwrap();
    let plain = build(
        &lab,
        &["--variant", "two", "--no-cache", "--no-compiler-cache"],
        &[("DEEPEP_FORGE_CACHE_DIR", fresh.path().to_str().unwrap()), ("DEEPEP_FORGE_NVCC_THREADS", "1")],
    );
    assert!(!notes(&plain[0]).iter().any(|n| n.starts_with("unit order")), "{:#}", plain[0]);
    assert_eq!(plain[0]["sha256"], r[1]["sha256"], "the order changes no byte");
}

/// `cache keygen` into the lab: (secret key file, public key line).
fn keygen(lab: &Lab, name: &str) -> (PathBuf, String) {
    let file = lab.dir.path().join(format!("{name}.key"));
    let o = bin().args(["cache", "keygen", "--name", name, "--out"]).arg(&file).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    (file, stdout(&o).trim().to_string())
}

/// Sign `times` for `rev` with the key file, as `cache push` does, and serve it at `file`.
fn serve_signed(key: &Path, rev: &str, times: &str, file: &Path) {
    use forge_store::cache::unit_times;
    let times: unit_times::Times = serde_json::from_str(times).unwrap();
    let sk = forge_store::cache::sign::SecretKey::load(key).unwrap();
    let s = unit_times::Signed { rev: rev.into(), signatures: vec![sk.sign(&unit_times::message(rev, &times))], times };
    std::fs::write(file, serde_json::to_vec(&s).unwrap()).unwrap();
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_history_travels_signed_with_cache_push_and_a_hostile_one_is_ignored() {
    let a = lab();
    build(&a, &["--variant", "two", "--no-compiler-cache"], &[]);
    let at_a = plans(&a, &["--variant", "two"], &[]);
    assert_eq!(order(&at_a[0]), measured("this machine's last build of the revision"));
    let server = crate::cache::serve();
    let (key, public) = keygen(&a, "team-1");
    let o = bin()
        .args(["cache", "push", "--cache-url", &server.url, "--allow-http", "--signing-key"])
        .arg(&key)
        .env("DEEPEP_FORGE_CACHE_DIR", &a.cache)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let pushed =
        format!("pushed the unit-time history of {} -> {}/unit-times/{}.json", &a.rev[..12], server.url, a.rev);
    assert!(stdout(&o).contains(&pushed), "{}", stdout(&o));

    // Machine B: a fresh cache folder; the plan takes A's order from the team's cache.
    let b_cache = tempfile::tempdir().unwrap();
    let b = |trusted: &str| {
        plans(
            &a,
            &["--variant", "two", "--cache-url", &server.url, "--allow-http", "--trusted-key", trusted],
            &[("DEEPEP_FORGE_CACHE_DIR", b_cache.path().to_str().unwrap())],
        )
        .remove(0)
    };
    let at_b = b(&public);
    assert_eq!(order(&at_b), measured("the team's cache (signed)"), "{at_b:#}");
    assert_eq!(at_b["side_by_side"]["first_units"], at_a[0]["side_by_side"]["first_units"]);
    let human = stdout(&forge(
        &a,
        &["plan", "--variant", "two", "--cache-url", &server.url, "--allow-http", "--trusted-key", &public],
        &[("DEEPEP_FORGE_CACHE_DIR", b_cache.path().to_str().unwrap())],
    ));
    assert!(human.contains("  order       measured (the team's cache (signed))"), "{human}");

    let (_, other) = keygen(&a, "someone-else");
    let untrusted = b(&other);
    assert!(warnings(&untrusted).contains("signed only by keys not trusted here: team-1"), "{untrusted:#}");
    assert_eq!(order(&untrusted), serde_json::from_str::<serde_json::Value>(PREDICTED).unwrap());

    let served = server.root.join("unit-times").join(format!("{}.json", a.rev));
    let mut signed: serde_json::Value = serde_json::from_slice(&std::fs::read(&served).unwrap()).unwrap();
    let first = at_a[0]["side_by_side"]["first_units"][0].as_str().unwrap().to_string();
    signed["times"][&first] = serde_json::json!(1);
    std::fs::write(&served, signed.to_string()).unwrap();
    let changed = b(&public);
    assert!(warnings(&changed).contains("does not match (changed after signing?)"), "{changed:#}");
    assert_eq!(order(&changed), serde_json::from_str::<serde_json::Value>(PREDICTED).unwrap());

    for (hostile, why) in [
        (r#"{"../../etc/x.o": 99}"#, "a unit name or time out of bounds"),
        ("{\"a\\n::error::x.o\": 1}", "a unit name or time out of bounds"),
        (r#"{"src/a.o": 99999999999}"#, "a unit name or time out of bounds"),
    ] {
        serve_signed(&key, &a.rev, hostile, &served);
        let p = b(&public);
        assert!(warnings(&p).contains(why), "{hostile}: {p:#}");
        assert!(!warnings(&p).contains("::error::"), "{p:#}");
        assert_eq!(order(&p), serde_json::from_str::<serde_json::Value>(PREDICTED).unwrap(), "{hostile}");
    }
    serve_signed(&key, "0000000", "{}", &served);
    assert!(warnings(&b(&public)).contains("names another revision"));
    std::fs::write(&served, vec![b'{'; 2 << 20]).unwrap();
    let big = b(&public);
    assert!(
        warnings(&big).contains("the remote unit-time history not used"),
        "an oversized history is refused: {big:#}"
    );
}

/// A redis-server child on a free loopback port; killed on drop.
struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Redis {
        if Command::new("redis-server").arg("--version").output().is_err() {
            missing("system package redis-server");
        }
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(20), "redis-server did not come up on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Redis { child, port, _dir: dir }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SET key value, as any client of the storage could.
    fn set(&self, key: &str, value: &[u8]) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        let mut msg = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n", key.len(), value.len()).into_bytes();
        msg.extend_from_slice(value);
        msg.extend(b"\r\n");
        s.write_all(&msg).unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"+OK\r\n");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[cfg_attr(not(feature = "needs-redis"), ignore = "needs system package redis-server (and the tools venv)")]
fn machine_b_gets_machine_a_order_from_the_shared_redis_and_the_same_bytes() {
    let (a, b) = (lab(), lab());
    let redis = Redis::start();
    let shared = ["--variant", "two", "--no-cache", "--compiler-cache", &redis.url()];
    let ra = build(&a, &shared, &[]);
    assert!(notes(&ra[0]).iter().any(|n| n.starts_with("unit order: ")), "ordered through Redis too: {:#}", ra[0]);
    let at_b = plans(&b, &["--variant", "two", "--compiler-cache", &redis.url()], &[]);
    assert_eq!(order(&at_b[0]), measured("the shared compiler cache's history of the revision"), "{:#}", at_b[0]);
    let human = stdout(&forge(&b, &["plan", "--variant", "two", "--compiler-cache", &redis.url()], &[]));
    assert!(human.contains("  order       measured (the shared compiler cache's history of the revision)"), "{human}");
    let rb = build(&b, &shared, &[]);
    assert_eq!(rb[0]["sha256"], ra[0]["sha256"], "A and B through the shared cache: the same bytes");
    assert!(notes(&rb[0]).iter().any(|n| n.contains(" hits, 0 misses")), "B is warm: {:#}", rb[0]);
    let alone = build(&b, &["--variant", "two", "--no-cache", "--no-compiler-cache"], &[]);
    assert_eq!(alone[0]["sha256"], ra[0]["sha256"], "with and without the shared cache: the same bytes");

    // A hostile history in the storage: a warning, and the order is predicted.
    let key = format!("deepep-forge/unit-times/{}.json", a.rev);
    let fresh = tempfile::tempdir().unwrap();
    let env = [("DEEPEP_FORGE_CACHE_DIR", fresh.path().to_str().unwrap())];
    for hostile in [&br#"{"../x.o": 1}"#[..], b"\x1b[31m not json", &vec![b' '; 2 << 20]] {
        redis.set(&key, hostile);
        let p = plans(&b, &["--variant", "two", "--compiler-cache", &redis.url()], &env).remove(0);
        assert!(warnings(&p).contains("the shared compiler cache's unit-time history not used"), "{p:#}");
        assert!(!warnings(&p).contains('\x1b'), "{p:#}");
        assert_eq!(order(&p), serde_json::from_str::<serde_json::Value>(PREDICTED).unwrap());
    }
}
