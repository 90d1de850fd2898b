//! Hostile inputs for the cache and `pin set`'s writes: cache entries with bad
//! keys and names, signing keys and trusted keys, remote URLs, gc arithmetic,
//! read-only and symlinked files, journals. Each case runs the real binary
//! and asserts the exit code, a message fragment, no panic, and that nothing
//! on disk changed or appeared (harness: tests/it/support/hostile.rs).
use std::os::unix::fs::PermissionsExt;

use crate::support::hostile::{run_all, Case};

const PINS: &str = include_str!("../../pins.toml");
const PYPROJECT: &str = include_str!("../fixtures/consumer-unified/pyproject.toml");
const X86: &str = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";

/// A well-formed key (64 lowercase hex).
fn key(c: char) -> String {
    c.to_string().repeat(64)
}

/// entry.json for `key` naming `wheel`, created at `created_secs`.
fn entry(key: &str, wheel: &str, created_secs: i64) -> String {
    serde_json::json!({
        "schema": 1, "key": key, "wheel": wheel, "sha256": "ab".repeat(32), "size": 3,
        "variant": "sn", "version": "1.2.1+17cfb81", "created": "2026-11-30T00:00:00Z", "created_secs": created_secs,
    })
    .to_string()
}

const WHEEL: &str = "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl";

/// A secret key file (`name:BASE64` of 32 bytes) with `mode`.
fn secret(path: &'static str, mode: u32) -> impl Fn(&std::path::Path) + Send + Sync {
    move |d: &std::path::Path| {
        std::fs::write(d.join(path), format!("k1:{}\n", "A".repeat(43) + "=")).unwrap();
        std::fs::set_permissions(d.join(path), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn chmod(path: &'static str, mode: u32) -> impl Fn(&std::path::Path) + Send + Sync {
    move |d: &std::path::Path| std::fs::set_permissions(d.join(path), std::fs::Permissions::from_mode(mode)).unwrap()
}

fn fifo(p: &std::path::Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
}

/// `pin set`'s state file for the project folder `d` (`<sha256(path)[..16]>.<ext>`
/// in `$XDG_STATE_HOME/deepep-forge/pin-set/`, made 0700 as the tool wants it).
fn state_file(d: &std::path::Path, ext: &str) -> std::path::PathBuf {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    let dir = d.join("state/deepep-forge/pin-set");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let key = hex::encode(&sha2::Sha256::digest(d.as_os_str().as_bytes())[..16]);
    dir.join(format!("{key}.{ext}"))
}

/// A FIFO or a device where the tool expects a file: refused at once (exit 2,
/// named), never waited on (a hang runs into the case's timeout) and never
/// read on (/dev/zero under the case's address-space limit).
fn special_file_cases() -> Vec<Case> {
    let at = |rel: &'static str| move |d: &std::path::Path| fifo(&d.join(rel));
    let zero = |rel: &'static str| {
        move |d: &std::path::Path| {
            std::fs::create_dir_all(d.join(rel).parent().unwrap()).unwrap();
            std::os::unix::fs::symlink("/dev/zero", d.join(rel)).unwrap()
        }
    };
    let build = |name: &str| {
        Case::new(name)
            .args(&["build-wheel", "--variant", "x", "--pins", "missing.toml", "--cache-url", "https://127.0.0.1:9/"])
            .env("XDG_CONFIG_HOME", "{dir}/cfg")
    };
    vec![
        Case::new("special: verify a FIFO")
            .setup(at(WHEEL))
            .args(&["verify", WHEEL])
            .says("not a regular file")
            .says(WHEEL),
        Case::new("special: verify /dev/zero").setup(zero(WHEEL)).args(&["verify", WHEEL]).says("not a regular file"),
        Case::new("special: diff a FIFO")
            .setup(at(WHEEL))
            .file("b.whl", "x")
            .args(&["diff", WHEEL, "b.whl"])
            .says("not a regular file")
            .says(WHEEL),
        Case::new("special: signing key is a FIFO")
            .setup(at("k.key"))
            .setup(chmod("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", "https://127.0.0.1:9/", "--signing-key", "k.key"])
            .says("not a regular file")
            .says("k.key"),
        Case::new("special: signing key is /dev/zero")
            .setup(zero("k.key"))
            .args(&["cache", "push", "--cache-url", "https://127.0.0.1:9/", "--signing-key", "k.key"])
            .says("not a regular file"),
        build("special: config file is a FIFO")
            .setup(at("cfg/deepep-forge/config.toml"))
            .says("not a regular file")
            .says("config.toml"),
        build("special: config file is /dev/zero")
            .setup(zero("cfg/deepep-forge/config.toml"))
            .says("not a regular file"),
        Case::new("special: a staging lock is a FIFO")
            .setup(at("cache/tmp/build-0123.lock"))
            .setup(|d| std::fs::create_dir_all(d.join("cache/tmp/build-0123")).unwrap())
            .args(&["cache", "gc"])
            .says("not a regular file")
            .says("build-0123.lock"),
        Case::new("special: a key lock is /dev/null")
            .setup(|d| {
                std::fs::create_dir_all(d.join("cache/tmp/build-0123")).unwrap();
                std::os::unix::fs::symlink("/dev/null", d.join("cache/tmp/build-0123.lock")).unwrap()
            })
            .args(&["cache", "gc"])
            .says("a symlink")
            .says("build-0123.lock"),
        Case::new("special: cache entry.json is a FIFO")
            .setup(move |d| fifo(&d.join(format!("cache/wheels/{}/entry.json", "a".repeat(64)))))
            .args(&["cache", "ls"])
            .exit(0)
            .says("not an entry"),
        Case::new("special: cache push of a wheel that is a FIFO")
            .file(&format!("cache/wheels/{}/entry.json", key('a')), entry(&key('a'), WHEEL, 0))
            .setup(move |d| fifo(&d.join(format!("cache/wheels/{}/{WHEEL}", key('a')))))
            .setup(secret("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", "https://127.0.0.1:9/", "--signing-key", "k.key", &key('a')])
            .exit(1)
            .says("failed verification")
            .may_change("cache/"),
        Case::new("special: pin set's project lock is a FIFO")
            .file("pyproject.toml", PYPROJECT)
            .file("pins.toml", PINS)
            .setup(|d| fifo(&state_file(d, "lock")))
            .env("XDG_STATE_HOME", "{dir}/state")
            .args(&["pin", "set", X86])
            .says("not a regular file")
            .says(".lock"),
        Case::new("special: pin recover's journal is a FIFO")
            .file("pyproject.toml", PYPROJECT)
            .file("pins.toml", PINS)
            .setup(|d| fifo(&state_file(d, "journal")))
            .env("XDG_STATE_HOME", "{dir}/state")
            .args(&["pin", "recover"])
            .says("not a regular file")
            .may_change("state/"),
    ]
}

fn ls_cases() -> Vec<Case> {
    let good = key('a');
    vec![
        Case::new("ls: a short key folder")
            .file("cache/wheels/abc/entry.json", entry("abc", WHEEL, 0))
            .args(&["cache", "ls"])
            .exit(0)
            .says("not an entry: wheels/abc")
            .says("cache key"),
        Case::new("ls: a non-ASCII key folder")
            .file(&format!("cache/wheels/{}/entry.json", "é".repeat(32)), entry(&"é".repeat(32), WHEEL, 0))
            .args(&["cache", "ls"])
            .exit(0)
            .says("not an entry"),
        Case::new("ls: an upper-case key folder")
            .file(&format!("cache/wheels/{}/entry.json", "A".repeat(64)), entry(&"A".repeat(64), WHEEL, 0))
            .args(&["cache", "ls"])
            .exit(0)
            .says("lowercase hex"),
        Case::new("ls: entry.json names another key")
            .file(&format!("cache/wheels/{good}/entry.json"), entry(&key('b'), WHEEL, 0))
            .args(&["cache", "ls"])
            .exit(0)
            .says("entry.json names key"),
        Case::new("ls: entry.json names a short key")
            .file(&format!("cache/wheels/{good}/entry.json"), entry("ab", WHEEL, 0))
            .args(&["cache", "ls"])
            .exit(0)
            .says("`ab` is not a cache key"),
        Case::new("ls: wheel name climbs out")
            .file(&format!("cache/wheels/{good}/entry.json"), entry(&good, "../../x.whl", 0))
            .args(&["cache", "ls"])
            .exit(0)
            .says("not a safe wheel file name"),
        Case::new("ls: wheel name with a slash")
            .file(&format!("cache/wheels/{good}/entry.json"), entry(&good, "sub/deep_ep-1-py3-none-any.whl", 0))
            .args(&["cache", "ls"])
            .exit(0)
            .says("not a safe wheel file name"),
        Case::new("ls: wheel name not a wheel")
            .file(&format!("cache/wheels/{good}/entry.json"), entry(&good, "notes.txt", 0))
            .args(&["cache", "ls"])
            .exit(0)
            .says("`notes.txt` is not a wheel file name"),
        Case::new("ls: entry.json garbage")
            .file(&format!("cache/wheels/{good}/entry.json"), "{\"schema\": [")
            .args(&["cache", "ls"])
            .exit(0)
            .says("parsing"),
        Case::new("ls: entry.json a directory")
            .setup(move |d| std::fs::create_dir_all(d.join(format!("cache/wheels/{}/entry.json", key('a')))).unwrap())
            .args(&["cache", "ls"])
            .exit(0)
            .says("not a regular file"),
        Case::new("ls: entry.json of 1 MiB")
            .file(&format!("cache/wheels/{good}/entry.json"), " ".repeat(1 << 20))
            .args(&["cache", "ls"])
            .exit(0)
            .says("at most 65536 bytes"),
        Case::new("ls: bad sha256 in entry")
            .file(
                &format!("cache/wheels/{good}/entry.json"),
                entry(&good, WHEEL, 0).replace(&"ab".repeat(32), "../../etc"),
            )
            .args(&["cache", "ls"])
            .exit(0)
            .says("sha256"),
        Case::new("ls json: bad entries listed")
            .file("cache/wheels/zz/entry.json", "x")
            .args(&["cache", "ls", "--format", "json"])
            .exit(0)
            .says("\"bad_entries\"")
            .says("\"toolchains\""),
        Case::new("ls: wheels is a file")
            .file("cache/wheels", "not a folder")
            .args(&["cache", "ls"])
            .exit(0)
            .says("WHEELS (0)"),
        Case::new("ls: toolchain folder with a bad name is skipped")
            .file("cache/toolchains/../../x/toolchain.json", "{}")
            .file("cache/toolchains/NOT-HEX/toolchain.json", "{}")
            .args(&["cache", "ls"])
            .exit(0)
            .says("TOOLCHAINS (0)"),
    ]
}

fn gc_cases() -> Vec<Case> {
    let good = key('c');
    let dir = format!("cache/wheels/{good}");
    vec![
        Case::new("gc: --older-than u64::MAX is refused, not wrapped")
            .file(&format!("{dir}/entry.json"), entry(&good, WHEEL, 1_700_000_000))
            .file(&format!("{dir}/{WHEEL}"), "abc")
            .args(&["cache", "gc", "--older-than", "18446744073709551615"])
            .says("0..=36500"),
        Case::new("gc: --older-than negative")
            .args(&["cache", "gc", "--older-than", "-1"])
            .says("unexpected argument '-1'"),
        Case::new("gc: --older-than 36500 keeps a fresh entry")
            .file(&format!("{dir}/entry.json"), entry(&good, WHEEL, 4_000_000_000))
            .file(&format!("{dir}/{WHEEL}"), "abc")
            .args(&["cache", "gc", "--older-than", "36500"])
            .exit(0)
            .says("1 wheel and 0 toolchains kept"),
        Case::new("gc: created in the far future is not old")
            .file(&format!("{dir}/entry.json"), entry(&good, WHEEL, i64::MAX))
            .file(&format!("{dir}/{WHEEL}"), "abc")
            .args(&["cache", "gc", "--older-than", "0"])
            .exit(0)
            .says("1 wheel and 0 toolchains kept"),
        Case::new("gc: --dry-run removes nothing")
            .file(&format!("{dir}/entry.json"), entry(&good, WHEEL, 0))
            .file(&format!("{dir}/{WHEEL}"), "abc")
            .args(&["cache", "gc", "--keep", "0", "--keep-toolchains", "0", "--dry-run"])
            .exit(0)
            .says("would remove wheel cccccccccccccccc"),
        Case::new("gc: a hostile entry is not an entry to remove")
            .file(&format!("{dir}/entry.json"), entry(&good, "../../../victim.whl", 0))
            .file("victim.whl", "keep me")
            .args(&["cache", "gc", "--keep", "0"])
            .exit(0)
            .says("0 wheels and 0 toolchains kept"),
        Case::new("gc: --keep not a number").args(&["cache", "gc", "--keep", "many"]).says("--keep"),
    ]
}

fn push_cases() -> Vec<Case> {
    let url = "https://127.0.0.1:9/cache";
    vec![
        Case::new("push: no signing key")
            .args(&["cache", "push", "--cache-url", url])
            .says("needs a signing key")
            .says("cache keygen"),
        Case::new("push: a world-readable signing key")
            .setup(secret("k.key", 0o644))
            .args(&["cache", "push", "--cache-url", url, "--signing-key", "k.key"])
            .says("readable by other users (mode 0644)")
            .says("chmod 600"),
        Case::new("push: a group-readable signing key")
            .setup(secret("k.key", 0o640))
            .args(&["cache", "push", "--cache-url", url, "--signing-key", "k.key"])
            .says("readable by other users"),
        Case::new("push: signing key is a folder")
            .setup(|d| std::fs::create_dir(d.join("k.key")).unwrap())
            .args(&["cache", "push", "--cache-url", url, "--signing-key", "k.key"])
            .says("not a regular file"),
        Case::new("push: signing key garbage")
            .file("k.key", "-----BEGIN OPENSSH PRIVATE KEY-----\nsecretbytes\n")
            .setup(chmod("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", url, "--signing-key", "k.key"])
            .says("is not a deepep-forge secret key"),
        Case::new("push: signing key missing")
            .args(&["cache", "push", "--cache-url", url, "--signing-key", "nope.key"])
            .says("cannot read the signing key"),
        Case::new("push: plain http refused")
            .setup(secret("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", "http://127.0.0.1:9/", "--signing-key", "k.key"])
            .says("--allow-http"),
        Case::new("push: ftp URL")
            .setup(secret("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", "ftp://127.0.0.1/", "--signing-key", "k.key"])
            .says("scheme `ftp`"),
        Case::new("push: URL with a query, credentials not echoed")
            .setup(secret("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", "https://u:hunter2@127.0.0.1/?a=b", "--signing-key", "k.key"])
            .says("https://***@127.0.0.1/?***: a base URL takes no ?query")
            .hides("hunter2"),
        Case::new("push: key prefix with a path")
            .setup(secret("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", url, "--signing-key", "k.key", "../etc"])
            .says("is not a cache key or key prefix"),
        Case::new("push: key prefix non-ASCII")
            .setup(secret("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", url, "--signing-key", "k.key", "ÿÿ"])
            .says("is not a cache key or key prefix"),
        Case::new("push: key prefix that matches nothing")
            .setup(secret("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", url, "--signing-key", "k.key", "abcdef"])
            .says("no cache entry with key abcdef"),
        Case::new("push: key prefix over 64 digits")
            .setup(secret("k.key", 0o600))
            .args(&["cache", "push", "--cache-url", url, "--signing-key", "k.key", &"a".repeat(65)])
            .says("is not a cache key or key prefix"),
        Case::new("push: --cache-timeout 0")
            .args(&["cache", "push", "--cache-url", url, "--cache-timeout", "0"])
            .says("0"),
        Case::new("keygen: a name with a slash")
            .args(&["cache", "keygen", "--name", "../x", "--out", "k.key"])
            .says("key name `../x`"),
        Case::new("keygen: a name starting with a dash")
            .args(&["cache", "keygen", "--name=-x", "--out", "k.key"])
            .says("key name `-x`"),
        Case::new("keygen: never over an existing file")
            .file("k.key", "precious")
            .args(&["cache", "keygen", "--name", "ok", "--out", "k.key"])
            .says("cannot create the key file"),
    ]
}

fn build_cases() -> Vec<Case> {
    let bw = |extra: &[&str]| {
        let mut v = vec!["build-wheel", "--variant", "x", "--pins", "missing.toml"];
        v.extend_from_slice(extra);
        v.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let case = |name: &str, extra: &[&str]| {
        let a = bw(extra);
        Case::new(name).args(&a.iter().map(String::as_str).collect::<Vec<_>>()).env("XDG_CONFIG_HOME", "{dir}/cfg")
    };
    vec![
        case("build: plain http cache URL", &["--cache-url", "http://127.0.0.1:9/"])
            .says("plain http:// is refused without --allow-http"),
        case("build: cache URL not a URL", &["--cache-url", "::::"]).says("not a URL"),
        case("build: trusted key garbage", &["--cache-url", "https://127.0.0.1:9/", "--trusted-key", "nonsense"])
            .says("trusted key from --trusted-key: expected NAME:BASE64"),
        case(
            "build: trusted key of the wrong length",
            &["--cache-url", "https://127.0.0.1:9/", "--trusted-key", "k:AAAA"],
        )
        .says("a public key is 32 bytes"),
        case("build: trusted keys env garbage", &["--cache-url", "https://127.0.0.1:9/"])
            .env("DEEPEP_FORGE_TRUSTED_KEYS", "k1:!!!")
            .says("trusted key from DEEPEP_FORGE_TRUSTED_KEYS"),
        case("build: config file garbage", &["--cache-url", "https://127.0.0.1:9/"])
            .file("cfg/deepep-forge/config.toml", "[cache\n")
            .says("config.toml"),
        case("build: config file unknown key", &["--cache-url", "https://127.0.0.1:9/"])
            .file("cfg/deepep-forge/config.toml", "[cache]\ntrust-everything = true\n")
            .says("unknown field"),
        case("build: config file is a folder", &["--cache-url", "https://127.0.0.1:9/"])
            .setup(|d| std::fs::create_dir_all(d.join("cfg/deepep-forge/config.toml")).unwrap())
            .says("config file")
            .says("a directory, not a regular file"),
        case("build: --cache-timeout too large", &["--cache-url", "https://127.0.0.1:9/", "--cache-timeout", "999999"])
            .says("--cache-timeout"),
    ]
}

fn pin_set_cases() -> Vec<Case> {
    let base = || Case::new("").file("pyproject.toml", PYPROJECT).file("pins.toml", PINS);
    let named = |name: &str| {
        let mut c = base();
        c.name = name.to_string();
        c
    };
    vec![
        named("pin set: read-only pins.toml")
            .setup(chmod("pins.toml", 0o444))
            .args(&["pin", "set", X86])
            .says("pins.toml is read-only"),
        named("pin set: read-only pyproject.toml")
            .setup(chmod("pyproject.toml", 0o444))
            .args(&["pin", "set", X86])
            .says("pyproject.toml is read-only"),
        named("pin set: read-only uv.lock under --relock")
            .file("uv.lock", "version = 1\n")
            .setup(chmod("uv.lock", 0o444))
            .env("DEEPEP_FORGE_UV", "/bin/true")
            .args(&["pin", "set", X86, "--relock"])
            .says("uv.lock is read-only"),
        named("pin set: read-only symlink target")
            .setup(|d| {
                std::fs::create_dir(d.join("real")).unwrap();
                std::fs::rename(d.join("pins.toml"), d.join("real/pins.toml")).unwrap();
                std::os::unix::fs::symlink("real/pins.toml", d.join("pins.toml")).unwrap();
                std::fs::set_permissions(d.join("real/pins.toml"), std::fs::Permissions::from_mode(0o444)).unwrap();
            })
            .args(&["pin", "set", X86])
            .says("(the target of the symlink pins.toml) is read-only"),
        // Journals live in the user's state folder; one in the project tree is
        // never read (more cases: tests/it/adversarial.rs, `journal_cases`).
        named("pin recover: a journal in the tree")
            .file(".deepep-forge-pin-set.journal", "{\"schema\":1,\"pid\":1,\"started\":\"x\",\"command\":\"deepep-forge pin set X\",\"files\":[]}")
            .args(&["pin", "recover"])
            .says("it is not trusted, so nothing was restored"),
        named("pin recover: a garbage journal in the tree")
            .file(".deepep-forge-pin-set.journal", "garbage")
            .args(&["pin", "recover"])
            .says("it is not trusted"),
        named("pin recover: nothing to recover").args(&["pin", "recover"]).says("no interrupted `pin set` here"),
        named("pin recover: a journal naming a file elsewhere")
            .file(
                ".deepep-forge-pin-set.journal",
                "{\"schema\":1,\"pid\":1,\"started\":\"x\",\"command\":\"c\",\"files\":[{\"path\":\"{dir}/victim\",\"old\":\"cHduZWQ=\",\"new_sha256\":null}]}",
            )
            .file("victim", "keep me")
            .args(&["pin", "recover"])
            .says("it is not trusted"),
        named("pin recover: a journal naming /etc/passwd")
            .file(
                ".deepep-forge-pin-set.journal",
                "{\"schema\":1,\"pid\":1,\"started\":\"x\",\"command\":\"c\",\"files\":[{\"path\":\"/etc/passwd\",\"old\":null,\"new_sha256\":null}]}",
            )
            .args(&["pin", "recover"])
            .says("it is not trusted"),
    ]
}

#[test]
fn hostile_cache_and_pin_set_inputs_are_refused_cleanly() {
    let mut cases = Vec::new();
    cases.extend(ls_cases());
    cases.extend(gc_cases());
    cases.extend(push_cases());
    cases.extend(build_cases());
    cases.extend(pin_set_cases());
    cases.extend(special_file_cases());
    assert!(cases.len() >= 30, "{} cases", cases.len());
    run_all(cases);
}

#[test]
fn secrets_are_never_echoed() {
    let d = tempfile::tempdir().unwrap();
    let key = d.path().join("k.key");
    let secret = "k1:SECRETSECRETSECRETSECRETSECRETSECRETSECRETQ=";
    for (mode, body) in [(0o644, secret), (0o600, "k1:SECRETSECRET-not-base64-SECRET\n")] {
        std::fs::write(&key, body).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        let o = std::process::Command::new(crate::support::exe())
            .args(["cache", "push", "--cache-url", "https://user:hunter2@127.0.0.1:9/?x=1", "--signing-key"])
            .arg(&key)
            .env("DEEPEP_FORGE_CACHE_DIR", d.path().join("cache"))
            .output()
            .unwrap();
        let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(2), "{all}");
        assert!(!all.contains("SECRET") && !all.contains("hunter2"), "{all}");
    }
    // A bad URL with credentials: the message shows the URL without them.
    std::fs::write(&key, secret).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = std::process::Command::new(crate::support::exe())
        .args(["cache", "push", "--cache-url", "http://user:hunter2@127.0.0.1:9/", "--signing-key"])
        .arg(&key)
        .env("DEEPEP_FORGE_CACHE_DIR", d.path().join("cache"))
        .output()
        .unwrap();
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(2), "{all}");
    assert!(all.contains("http://***@127.0.0.1:9/") && !all.contains("hunter2") && !all.contains("SECRET"), "{all}");
}
