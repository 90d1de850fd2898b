//! The wheel cache: `cache ls/gc/push` and the remote HTTP cache against a real
//! HTTP server on 127.0.0.1 (tiny_http, GET and PUT into a folder).
mod build_support;
mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use build_support::*;

/// A tiny HTTP file store: PUT writes `<root>/<path>`, GET reads it (404 if absent).
struct Server {
    url: String,
    root: PathBuf,
    puts: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

fn serve() -> Server {
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

fn with_cache(lab: &Lab, cache: &Path, args: &[&str]) -> std::process::Output {
    lab.forge(args).env("DEEPEP_FORGE_CACHE_DIR", cache).output().unwrap()
}

#[test]
fn push_then_remote_hit_verifies_sha256_and_rejects_a_corrupt_wheel() {
    let lab = match Lab::new() {
        Some(l) => l,
        None => return,
    };
    let srv = serve();
    let pins = lab.pins();
    let pins = pins.to_str().unwrap();
    let build = ["build-wheel", "--variant", "sn", "--pins", pins, "--format", "json", "--cache-url", srv.url.as_str()];

    // Cache A: a miss everywhere, so it builds; then push.
    let a = json(&lab.forge(&build).output().unwrap());
    let res = &a["results"][0];
    assert_eq!(res["status"], "built");
    assert!(res["notes"].as_array().unwrap().iter().any(|n| n == "remote cache: miss"), "{res}");
    let key = res["cache_key"].as_str().unwrap().to_string();
    let sha = res["sha256"].as_str().unwrap().to_string();
    let o = cache_cmd(&lab, &["push", "--cache-url", &srv.url]);
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    assert_eq!(srv.puts.load(Ordering::SeqCst), 2, "wheel and entry.json");
    let wheel_name = Path::new(res["wheel"].as_str().unwrap()).file_name().unwrap().to_owned();
    assert_eq!(sha256sum(&srv.root.join(&key).join(&wheel_name)), sha);

    // Cache B (empty): fetched from the remote, verified, not built.
    let b_dir = lab.dir.path().join("cache-b");
    let out_b = lab.dir.path().join("out-b");
    let b = json(&with_cache(&lab, &b_dir, &[&build[..], &["--out", out_b.to_str().unwrap()]].concat()));
    assert_eq!(b["results"][0]["status"], "remote-hit");
    assert_eq!(b["results"][0]["sha256"], sha.as_str());
    assert_eq!(sha256sum(&out_b.join(&wheel_name)), sha);
    assert!(b_dir.join("wheels").join(&key).join("entry.json").exists());
    assert!(!b_dir.join("logs").exists(), "a remote hit must not build");

    // A corrupted remote wheel is rejected before use; cache C builds instead.
    let remote_wheel = srv.root.join(&key).join(&wheel_name);
    let mut data = std::fs::read(&remote_wheel).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    std::fs::write(&remote_wheel, data).unwrap();
    let c_dir = lab.dir.path().join("cache-c");
    let out_c = lab.dir.path().join("out-c");
    let c = json(&with_cache(&lab, &c_dir, &[&build[..], &["--out", out_c.to_str().unwrap()]].concat()));
    let res = &c["results"][0];
    assert_eq!(res["status"], "built");
    assert!(
        res["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("remote cache entry rejected")
            && n.as_str().unwrap().contains("sha256")),
        "{res}"
    );
    assert_ne!(sha256sum(&out_c.join(&wheel_name)), sha256sum(&remote_wheel));
}

/// `deepep-forge cache ...` on the lab's cache.
fn cache_cmd(lab: &Lab, args: &[&str]) -> std::process::Output {
    support::bin().arg("cache").args(args).env("DEEPEP_FORGE_CACHE_DIR", &lab.cache).output().unwrap()
}

#[test]
fn ls_gc_and_a_damaged_entry_is_rebuilt() {
    let lab = match Lab::new() {
        Some(l) => l,
        None => return,
    };
    let pins = lab.pins();
    let build = ["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap(), "--format", "json"];
    let first = json(&lab.forge(&build).output().unwrap());
    let key = first["results"][0]["cache_key"].as_str().unwrap().to_string();
    let ls = json(&cache_cmd(&lab, &["ls", "--format", "json"]));
    assert_eq!(ls["schema"], 1);
    assert_eq!(ls["entries"][0]["key"], key.as_str());
    assert_eq!(ls["entries"][0]["variant"], "sn");
    assert_eq!(ls["entries"][0]["sha256"], first["results"][0]["sha256"]);
    let human = support::stdout(&cache_cmd(&lab, &["ls"]));
    assert!(human.contains(&key[..16]) && human.contains("sn"), "{human}");

    // A damaged cached wheel is not used: the entry goes and the wheel is rebuilt.
    // That run also removes what a killed (SIGKILL) build of a dead process left in tmp/.
    let killed = lab.cache.join("tmp/build-999999998-xyz");
    std::fs::create_dir_all(killed.join("src")).unwrap();
    let entry = lab.cache.join("wheels").join(&key);
    let wheel = files_with(&entry, ".whl").pop().unwrap();
    let mut data = std::fs::read(&wheel).unwrap();
    data.push(0);
    std::fs::write(&wheel, data).unwrap();
    let again = json(&lab.forge(&build).output().unwrap());
    assert_eq!(again["results"][0]["status"], "built");
    assert!(!killed.exists(), "leftover of a dead build survived the next run");
    assert_eq!(sha256sum(&files_with(&entry, ".whl").pop().unwrap()), again["results"][0]["sha256"].as_str().unwrap());

    // gc: a leftover of a dead build process and the entries go; --dry-run removes nothing.
    let stale = lab.cache.join("tmp/build-999999999-abc");
    std::fs::create_dir_all(stale.join("src")).unwrap();
    let dry = support::stdout(&cache_cmd(&lab, &["gc", "--keep", "0", "--dry-run"]));
    assert!(dry.contains("would remove") && entry.exists() && stale.exists(), "{dry}");
    let o = cache_cmd(&lab, &["gc", "--keep", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    assert!(!entry.exists() && !stale.exists(), "{}", support::stdout(&o));
    assert_eq!(json(&cache_cmd(&lab, &["ls", "--format", "json"]))["entries"], serde_json::json!([]));
}
