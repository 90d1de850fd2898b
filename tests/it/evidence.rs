//! Evidence (docs/evidence.md): `probe --record` on real wheels, `evidence
//! add` and `evidence show`, `lock check --require-evidence`, and every class
//! of bad statement, each refused with nothing written.
use crate::build_support::files_under;
use crate::support;

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::support::*;
use base64::Engine;
use forge_model::ladder::Kind;
use forge_store::cache::sign::{PublicKey, SecretKey};
use forge_store::evidence::statement::{self, Opened, Origin};
use serde_json::{json, Value};

const B64: base64::engine::general_purpose::GeneralPurpose = base64::engine::general_purpose::STANDARD;
pub(crate) const WHEEL: &str = "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl";
pub(crate) const PINS: &str = include_str!("../../pins.toml");

/// A GPU statement produced by `probe --run --deep-ep --record` on the H200
/// (docs/evidence.md, "The kept GPU statement"), kept as produced.
const GPU_STATEMENT: &str = "tests/fixtures/evidence/h200-deep-ep-round-trip.dsse.json";
/// The public key that signed it (one line, `NAME:BASE64`).
const GPU_STATEMENT_KEY: &str = "tests/fixtures/evidence/h200.pub";
/// The EPv2 (DeepEP main dd758ca) `ElasticBuffer` round trip on the H200, in the
/// environment installed from the wheel's own Requires-Dist (docs/measurements.md).
const EPV2_STATEMENT: &str = "tests/fixtures/evidence/h200-epv2-deep-ep-round-trip.dsse.json";
const EPV2_STATEMENT_KEY: &str = "tests/fixtures/evidence/h200-epv2.pub";

/// A small wheel named like the project's (pure Python, a valid RECORD).
pub(crate) fn make_wheel(dir: &Path) -> PathBuf {
    let path = dir.join(WHEEL);
    let f = std::fs::File::create(&path).unwrap();
    let mut z = zip::ZipWriter::new(f);
    let opts = zip::write::SimpleFileOptions::default();
    let di = "deep_ep-1.2.1+17cfb81.dist-info";
    let members = [
        ("deep_ep/__init__.py".to_string(), b"x = 1\n".to_vec()),
        (format!("{di}/METADATA"), b"Metadata-Version: 2.1\nName: deep_ep\nVersion: 1.2.1+17cfb81\n".to_vec()),
        (format!("{di}/WHEEL"), b"Wheel-Version: 1.0\nTag: cp312-cp312-linux_x86_64\n".to_vec()),
    ];
    let mut record = String::new();
    for (name, bytes) in &members {
        z.start_file(name.as_str(), opts).unwrap();
        z.write_all(bytes).unwrap();
        let h = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(<sha2::Sha256 as sha2::Digest>::digest(bytes));
        record.push_str(&format!("{name},sha256={h},{}\n", bytes.len()));
    }
    record.push_str(&format!("{di}/RECORD,,\n"));
    z.start_file(format!("{di}/RECORD"), opts).unwrap();
    z.write_all(record.as_bytes()).unwrap();
    z.finish().unwrap();
    path
}

pub(crate) fn sha256_of(p: &Path) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(std::fs::read(p).unwrap()))
}

/// A signing key file and its public key.
fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let key = dir.join(format!("{name}.key"));
    let o = forge(dir, &["cache", "keygen", "--name", name, "--out", key.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    (key, stdout(&o).lines().next().unwrap().trim().to_string())
}

/// Run the binary with no trusted keys from the environment or a config file.
pub(crate) fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    bin()
        .args(args)
        .current_dir(dir)
        .env_remove("DEEPEP_FORGE_TRUSTED_KEYS")
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("DEEPEP_FORGE_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap()
}

fn open_file(path: &Path, public: &str) -> Opened {
    statement::open(&std::fs::read(path).unwrap(), &[PublicKey::parse(public).unwrap()]).unwrap()
}

/// Sign an arbitrary payload as a DSSE envelope (what an attacker holding a key can make).
fn envelope(payload: &[u8], key: &Path) -> Vec<u8> {
    let sk = SecretKey::load(key).unwrap();
    let signed = sk.sign(&statement::pae(statement::PAYLOAD_TYPE, payload));
    let (keyid, sig) = signed.split_once(':').unwrap();
    serde_json::to_vec(&json!({
        "payloadType": statement::PAYLOAD_TYPE,
        "payload": B64.encode(payload),
        "signatures": [{"keyid": keyid, "sig": sig}],
    }))
    .unwrap()
}

/// A reported statement's JSON (valid), for crafting variants of it.
fn reported_json(sha: &str) -> Value {
    json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": WHEEL, "digest": {"sha256": sha}}],
        "predicateType": statement::PREDICATE_TYPE,
        "predicate": {
            "kind": "training", "doesNotShow": "x", "origin": "reported",
            "producer": {"command": "evidence add", "mode": null, "tool": "deepep-forge 0.1.0", "commit": null},
            "time": "2026-12-01T00:00:00Z", "request": null, "machine": null, "result": null,
            "reported": {"outcome": "20/20 steps", "url": null, "text": null}
        }
    })
}

fn show(dir: &Path, ev: &Path, wheel: &Path, public: &str, format: &str) -> std::process::Output {
    std::fs::write(dir.join("pins.toml"), PINS).unwrap();
    run(
        dir,
        &[
            "evidence",
            "show",
            "--pins",
            "pins.toml",
            "--variant",
            "h100",
            "--wheel",
            wheel.to_str().unwrap(),
            "--evidence",
            ev.to_str().unwrap(),
            "--trusted-key",
            public,
            "--format",
            format,
        ],
    )
}

#[test]
fn static_probe_records_one_signed_statement_about_the_wheel() {
    let d = tempfile::tempdir().unwrap();
    let wheel = make_wheel(d.path());
    let (key, public) = keygen(d.path(), "ci-1");
    let ev = d.path().join("ev");
    let o = run(
        d.path(),
        &[
            "probe",
            "--wheel",
            wheel.to_str().unwrap(),
            "--preset",
            "h100-8g",
            "--record",
            "ev",
            "--signing-key",
            key.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    // No extensions: the verdict is a MISMATCH (exit 1), and it is kept all the same.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let verdict: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let sha = sha256_of(&wheel);
    let files = files_under(&ev);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].starts_with(ev.join(&sha)), "{files:?}");
    assert!(files[0].file_name().unwrap().to_str().unwrap().starts_with("static-"), "{files:?}");
    assert!(stderr(&o).contains("recorded the verdict: "), "{}", stderr(&o));
    let Opened::Trusted { signer, statement: s } = open_file(&files[0], &public) else { panic!("not trusted") };
    assert_eq!(signer, "ci-1");
    assert_eq!((s.subject[0].name.as_str(), s.subject[0].digest.sha256.as_str()), (WHEEL, sha.as_str()));
    let p = &s.predicate;
    assert_eq!((p.kind, p.origin, p.producer.mode.as_deref()), (Kind::Static, Origin::Observed, Some("static")));
    let r = p.request.as_ref().unwrap();
    assert_eq!((r.ep, r.nodes, r.gpus_per_node, r.gpu.as_deref()), (Some(8), Some(1), Some(8), Some("h100")));
    let m = p.machine.as_ref().unwrap();
    assert_eq!((m.ranks, m.gpu_model.as_ref(), m.host_arch.as_str()), (0, None, std::env::consts::ARCH));
    let out = p.result.as_ref().unwrap();
    assert_eq!(out.verdict, "MISMATCH");
    // every rule row of the printed verdict, with its status
    let rows: Vec<(String, String)> = verdict["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["rule"].as_str().unwrap().to_string(), c["status"].as_str().unwrap().to_string()))
        .collect();
    let kept: Vec<(String, String)> = out.rules.iter().map(|r| (r.rule.clone(), r.status.clone())).collect();
    assert_eq!(rows, kept);
    assert!(kept.contains(&("hybrid-ep-present".into(), "fail".into())), "{kept:?}");
    // Evidence never changes the wheel.
    assert_eq!(sha256_of(&wheel), sha);

    // show: the statement is listed, and a MISMATCH covers nothing.
    let o = show(d.path(), &ev, &wheel, &public, "json");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let sec = &j["sections"][0];
    assert_eq!(sec["wheel"][1], sha.as_str());
    assert_eq!(sec["statements"][0]["kind"], "static");
    assert_eq!(sec["statements"][0]["result"], "MISMATCH");
    assert_eq!(sec["boundary"][0]["kind"], "static");
    assert_eq!(sec["boundary"][0]["status"], "none", "{sec:#}");
}

#[test]
fn reported_evidence_is_shown_as_reported_and_draws_the_boundary() {
    let d = tempfile::tempdir().unwrap();
    let wheel = make_wheel(d.path());
    let (key, public) = keygen(d.path(), "lead-1");
    let o = run(
        d.path(),
        &[
            "evidence",
            "add",
            "--wheel",
            wheel.to_str().unwrap(),
            "--kind",
            "training",
            "--gpu",
            "h100",
            "--nodes",
            "16",
            "--gpus-per-node",
            "8",
            "--ep",
            "16",
            "--outcome",
            "20/20 steps",
            "--url",
            "https://ci.example.org/job/507030",
            "--text",
            "Qwen3 <img src=x onerror=alert(1)> [x](javascript:1) @team",
            "--signing-key",
            key.to_str().unwrap(),
            "--out",
            "ev",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let files = files_under(&d.path().join("ev"));
    assert_eq!(files.len(), 1);
    let Opened::Trusted { statement: s, .. } = open_file(&files[0], &public) else { panic!() };
    assert_eq!((s.predicate.kind, s.predicate.origin), (Kind::Training, Origin::Reported));
    assert!(s.predicate.machine.is_none() && s.predicate.result.is_none());

    let o = show(d.path(), &d.path().join("ev"), &wheel, &public, "human");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out.lines().find(|l| l.trim_start().starts_with("training")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("20/20 steps") && line.contains("reported") && !line.contains("observed"), "{line}");
    assert!(line.contains("https://ci.example.org/job/507030"), "{line}");
    // h100 (pins.toml: 1 node) is covered by a 16-node training run; a kernel round trip is not there.
    assert!(out.contains("boundary covered   one-node training run: 1 statement(s)"), "{out}");
    assert!(out.contains("boundary none      one-node kernel round trip: no evidence"), "{out}");

    // markdown: the hostile text reaches the comment escaped.
    let o = show(d.path(), &d.path().join("ev"), &wheel, &public, "markdown");
    let md = stdout(&o);
    for bad in ["<img", "](javascript", "@team"] {
        assert!(!md.contains(bad), "{bad} in {md}");
    }
    assert!(md.contains("&lt;img"), "{md}");
}

#[test]
fn hostile_fields_in_evidence_add_are_refused_and_nothing_is_written() {
    let d = tempfile::tempdir().unwrap();
    let wheel = make_wheel(d.path());
    let (key, _) = keygen(d.path(), "lead-1");
    let cases: [(&str, &str, &str); 5] = [
        ("--outcome", "\x1b]0;pwned\x07 20/20", "control character"),
        ("--text", "ok\n::error::planted", "workflow command"),
        ("--url", "javascript:alert(1)", "must be http(s)://"),
        ("--url", "https://x.org/a)(b", "must be http(s)://"),
        ("--text", "##[error]planted", "workflow command"),
    ];
    for (flag, value, want) in cases {
        let mut args = vec!["evidence", "add", "--wheel", wheel.to_str().unwrap(), "--kind", "training"];
        args.extend(["--signing-key", key.to_str().unwrap(), "--out", "ev"]);
        if flag != "--outcome" {
            args.extend(["--outcome", "20/20 steps"]);
        }
        args.extend([flag, value]);
        let o = run(d.path(), &args);
        assert_eq!(o.status.code(), Some(2), "{flag} {value:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{flag} {value:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains('\x1b'), "the escape reached the terminal: {:?}", stderr(&o));
        assert!(!d.path().join("ev").exists(), "{flag}: something was written");
    }
}

/// One trusted reported statement in `ev/<sha>/`, returned with its key.
pub(crate) fn one_statement(d: &Path) -> (PathBuf, PathBuf, String, PathBuf) {
    let wheel = make_wheel(d);
    let (key, public) = keygen(d, "lead-1");
    let o = run(
        d,
        &[
            "evidence",
            "add",
            "--wheel",
            wheel.to_str().unwrap(),
            "--kind",
            "training",
            "--gpu",
            "h100",
            "--outcome",
            "20/20 steps",
            "--signing-key",
            key.to_str().unwrap(),
            "--out",
            "ev",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let file = files_under(&d.join("ev")).remove(0);
    (wheel, key, public, file)
}

#[test]
fn forged_signatures_are_errors_and_untrusted_keys_do_not_count() {
    let d = tempfile::tempdir().unwrap();
    let (wheel, _, public, file) = one_statement(d.path());
    let ev = d.path().join("ev");
    // Untrusted: another key signed it. Listed as not counted; it covers nothing.
    let (_, other_public) = keygen(d.path(), "other-1");
    let o = show(d.path(), &ev, &wheel, &other_public, "human");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("not counted (no trusted signature)"), "{}", stdout(&o));
    assert!(stdout(&o).contains("boundary none      one-node training run: no evidence"), "{}", stdout(&o));
    // Forged: the payload changed under the trusted key's signature (a reported outcome made bigger).
    let mut env: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let payload = String::from_utf8(B64.decode(env["payload"].as_str().unwrap()).unwrap()).unwrap();
    env["payload"] = json!(B64.encode(payload.replace("20/20 steps", "200/200 steps")));
    std::fs::write(&file, serde_json::to_vec(&env).unwrap()).unwrap();
    let o = show(d.path(), &ev, &wheel, &public, "human");
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("does not verify") && stderr(&o).contains(file.to_str().unwrap()), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
}

#[test]
fn a_statement_replayed_onto_another_wheel_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (wheel, _, public, file) = one_statement(d.path());
    let other = "f".repeat(64);
    std::fs::create_dir_all(d.path().join("ev2").join(&other)).unwrap();
    std::fs::copy(&file, d.path().join("ev2").join(&other).join(file.file_name().unwrap())).unwrap();
    let o = show(d.path(), &d.path().join("ev2"), &wheel, &public, "human");
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("replayed onto a wheel it does not name"), "{}", stderr(&o));
}

/// Write `bytes` as a statement about the fixture wheel and run show on it.
fn show_crafted(d: &Path, bytes: &[u8], public: &str) -> std::process::Output {
    let wheel = make_wheel(d);
    let sha = sha256_of(&wheel);
    let dir = d.join("crafted").join(&sha);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("training-0000000000000000.dsse.json"), bytes).unwrap();
    show(d, &d.join("crafted"), &wheel, public, "human")
}

#[test]
fn unknown_predicate_types_and_versions_are_refused() {
    for (ptype, want) in [
        ("https://deepep-forge.dev/evidence/v2", "a version of the evidence predicate this deepep-forge does not read"),
        ("https://slsa.dev/provenance/v1", "not an evidence predicate"),
    ] {
        let d = tempfile::tempdir().unwrap();
        let (key, public) = keygen(d.path(), "lead-1");
        let sha = sha256_of(&make_wheel(d.path()));
        let mut v = reported_json(&sha);
        v["predicateType"] = json!(ptype);
        let o = show_crafted(d.path(), &envelope(&serde_json::to_vec(&v).unwrap(), &key), &public);
        assert_eq!(o.status.code(), Some(2), "{ptype}: {}", stdout(&o));
        assert!(stderr(&o).contains(want), "{ptype}: {}", stderr(&o));
    }
}

#[test]
fn a_reported_statement_cannot_claim_to_be_observed() {
    let d = tempfile::tempdir().unwrap();
    let (key, public) = keygen(d.path(), "lead-1");
    let sha = sha256_of(&make_wheel(d.path()));
    // Signed validly, but `observed` while made by `evidence add` with a reported outcome.
    let mut v = reported_json(&sha);
    v["predicate"]["origin"] = json!("observed");
    let o = show_crafted(d.path(), &envelope(&serde_json::to_vec(&v).unwrap(), &key), &public);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("claims `observed` but was made by `evidence add`"), "{}", stderr(&o));
    // `observed` from the probe, but of a kind the probe never observes.
    let mut v = reported_json(&sha);
    v["predicate"]["origin"] = json!("observed");
    v["predicate"]["producer"]["command"] = json!("probe");
    v["predicate"]["producer"]["mode"] = json!("run");
    let o = show_crafted(d.path(), &envelope(&serde_json::to_vec(&v).unwrap(), &key), &public);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("is not what probe mode `run` observes"), "{}", stderr(&o));
}

#[test]
fn huge_deep_and_non_utf8_statements_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let (key, public) = keygen(d.path(), "lead-1");
    let huge = vec![b' '; (statement::MAX_BYTES + 1) as usize];
    let o = show_crafted(d.path(), &huge, &public);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("more than the 1048576 bytes allowed"), "{}", stderr(&o));

    let o = show_crafted(d.path(), b"{\"payloadType\": \"\xff\xfe\"}", &public);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not UTF-8"), "{}", stderr(&o));

    // 100 000 levels of nesting, validly signed: refused by the parser's depth limit, no stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let o = show_crafted(d.path(), &envelope(deep.as_bytes(), &key), &public);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("recursion limit exceeded"), "{}", stderr(&o));
    // A huge list inside a valid shape is bounded too.
    let sha = sha256_of(&make_wheel(d.path()));
    let mut v = reported_json(&sha);
    v["predicate"]["reported"]["text"] = json!("a".repeat(statement::MAX_TEXT + 1));
    let o = show_crafted(d.path(), &envelope(&serde_json::to_vec(&v).unwrap(), &key), &public);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("the text: 4097 bytes, at most 4096"), "{}", stderr(&o));
}

#[test]
fn a_record_folder_that_is_a_symlink_or_not_writable_is_refused_before_probing() {
    let d = tempfile::tempdir().unwrap();
    let wheel = make_wheel(d.path());
    let (key, _) = keygen(d.path(), "ci-1");
    std::fs::create_dir(d.path().join("real")).unwrap();
    std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
    let probe = |dir: &str| {
        run(
            d.path(),
            &[
                "probe",
                "--wheel",
                wheel.to_str().unwrap(),
                "--preset",
                "h100-8g",
                "--record",
                dir,
                "--signing-key",
                key.to_str().unwrap(),
            ],
        )
    };
    let o = probe("link");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a symlink"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "the probe ran: {}", stdout(&o));
    assert!(files_under(&d.path().join("real")).is_empty());
    std::fs::write(d.path().join("file"), "").unwrap();
    let o = probe("file");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is not a folder"), "{}", stderr(&o));
    // --record without a key, and without a wheel: usage errors.
    let o = run(d.path(), &["probe", "--wheel", wheel.to_str().unwrap(), "--preset", "h100-8g", "--record", "real"]);
    assert_eq!(o.status.code(), Some(2));
    let o =
        run(d.path(), &["probe", "--preset", "h100-8g", "--record", "real", "--signing-key", key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--record needs --wheel"), "{}", stderr(&o));
}

#[test]
fn a_record_folder_this_user_cannot_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let d = tempfile::tempdir().unwrap();
    let wheel = make_wheel(d.path());
    let (key, _) = keygen(d.path(), "ci-1");
    let ro = d.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // root writes anywhere: then the probe runs as nobody, with its own key and a copy of the binary.
    let exe = d.path().join("deepep-forge");
    std::fs::copy(crate::support::exe(), &exe).unwrap();
    for p in [d.path(), &ro] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&wheel, std::fs::Permissions::from_mode(0o644)).unwrap();
    if root {
        std::os::unix::fs::chown(&key, Some(65534), Some(65534)).unwrap();
    } else {
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let mut c = std::process::Command::new(&exe);
    c.args(["probe", "--wheel", wheel.to_str().unwrap(), "--preset", "h100-8g", "--record"])
        .arg(&ro)
        .arg("--signing-key")
        .arg(&key)
        .env("XDG_CONFIG_HOME", d.path().join("config"))
        .env("HOME", d.path());
    if root {
        c.uid(65534).gid(65534);
    }
    // The copy was just written: a child forked meanwhile may hold it open (ETXTBSY).
    let o = crate::support::output_of_fresh_program(&mut c);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is not writable by this user"), "{}", stderr(&o));
    assert!(files_under(&ro).is_empty());
}

/// A consumer whose uv.lock pins the fixture wheel from a deepep-forge index (the shape uv writes).
fn consumer(d: &Path, sha: &str) -> PathBuf {
    consumer_at(d, sha, "http://127.0.0.1:8000/h100/simple")
}

/// [`consumer`] locked from the index at `url`.
pub(crate) fn consumer_at(d: &Path, sha: &str, url: &str) -> PathBuf {
    let c = d.join("consumer");
    std::fs::create_dir_all(&c).unwrap();
    std::fs::write(
        c.join("pyproject.toml"),
        format!(
            "[project]\nname = \"consumer\"\nversion = \"0.1.0\"\nrequires-python = \">=3.12\"\ndependencies = [\"deep_ep==1.2.1+17cfb81\"]\n\n[tool.uv.sources]\ndeep-ep = {{ index = \"deepep\" }}\n\n[[tool.uv.index]]\nname = \"deepep\"\nurl = \"{url}\"\nexplicit = true\n"
        ),
    )
    .unwrap();
    std::fs::write(
        c.join("uv.lock"),
        format!(
            "version = 1\nrevision = 3\nrequires-python = \">=3.12\"\n\n[[package]]\nname = \"consumer\"\nversion = \"0.1.0\"\nsource = {{ virtual = \".\" }}\ndependencies = [\n    {{ name = \"deep-ep\" }},\n]\n\n[package.metadata]\nrequires-dist = [{{ name = \"deep-ep\", specifier = \"==1.2.1+17cfb81\", index = \"{url}\" }}]\n\n[[package]]\nname = \"deep-ep\"\nversion = \"1.2.1+17cfb81\"\nsource = {{ registry = \"{url}\" }}\nwheels = [\n    {{ url = \"{url}/deep-ep/deep_ep-1.2.1%2B17cfb81-cp312-cp312-linux_x86_64.whl\", hash = \"sha256:{sha}\", size = 1 }},\n]\n"
        ),
    )
    .unwrap();
    std::fs::write(d.join("pins.toml"), PINS).unwrap();
    c
}

#[test]
fn lock_check_requires_trusted_evidence_of_a_kind() {
    let d = tempfile::tempdir().unwrap();
    let (wheel, _, public, _) = one_statement(d.path()); // a reported training run, no GPU named
    let sha = sha256_of(&wheel);
    consumer(d.path(), &sha);
    let check = |kind: &str, key: &str| {
        run(
            d.path(),
            &[
                "lock",
                "check",
                "--project",
                "consumer",
                "--pins",
                "pins.toml",
                "--require-evidence",
                kind,
                "--evidence",
                "ev",
                "--trusted-key",
                key,
            ],
        )
    };
    // training >= kernel: covered (the index URL names variant h100).
    let o = check("kernel", &public);
    assert!(!stdout(&o).contains("evidence-missing"), "{}", stdout(&o));
    // The same statement under a key nobody trusts: missing, with the command that would make it.
    let (_, other) = keygen(d.path(), "other-1");
    let o = check("kernel", &other);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "error[evidence-missing]: the locked deep-ep wheel {WHEEL} (variant h100) lacks `kernel` evidence"
        )),
        "{out}"
    );
    assert!(out.contains("uv.lock:"), "{out}");
    assert!(out.contains(&format!("deepep-forge probe --run --wheel {WHEEL} --record ev ")), "{out}");
    // --require-evidence without --evidence is a usage error.
    let o = run(d.path(), &["lock", "check", "--project", "consumer", "--require-evidence", "kernel"]);
    assert_eq!(o.status.code(), Some(2));
}

/// pins.toml with `policy` appended (the `[evidence]` table), written as `name` in `d`;
/// returns the 1-based line of the policy's first line.
pub(crate) fn pins_with(d: &Path, name: &str, base: &str, policy: &str) -> usize {
    std::fs::write(d.join(name), format!("{base}{policy}")).unwrap();
    base.lines().count() + policy.lines().take_while(|l| l.is_empty()).count() + 1
}

/// `lock check` with pins.toml `file`, the evidence folder and `keys` (no --require-evidence).
pub(crate) fn gate_with(d: &Path, file: &str, keys: &[&str], extra: &[&str]) -> std::process::Output {
    let mut a = vec!["lock", "check", "--project", "consumer", "--pins", file, "--evidence", "ev"];
    for k in keys {
        a.extend(["--trusted-key", k]);
    }
    a.extend(extra);
    run(d, &a)
}

/// pins.toml's `[evidence]` table gates `lock check` like --require-evidence
/// (the stricter of both wins), only with a folder and a trusted key, and a
/// bad table is exit 2 naming its line (the consumer's uv.lock as uv writes
/// it; the real uv chain is `recorded_statements_travel_...`).
#[test]
fn lock_check_applies_the_evidence_table_of_pins_toml() {
    let d = tempfile::tempdir().unwrap();
    let (wheel, _, public, _) = one_statement(d.path()); // a reported training run on h100
    consumer(d.path(), &sha256_of(&wheel));
    // (a key is trusted, and no index serves this consumer's manifest: `index-not-verified` is an error throughout)
    let ok = |o: &std::process::Output| {
        assert_eq!(o.status.code(), Some(1), "stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
        assert!(stdout(o).contains("error[index-not-verified]"), "{}", stdout(o));
        assert!(!stdout(o).contains("evidence-missing"), "{}", stdout(o));
    };
    // training on h100 meets `kernel` for variant h100; a rule naming h200 too (one generation, sm_90).
    pins_with(d.path(), "p.toml", PINS, "\n[evidence]\nrequire = \"kernel\"\n");
    ok(&gate_with(d.path(), "p.toml", &[&public], &[]));
    let rule = "\n[evidence]\nrequire = \"kernel\"\n\n[[evidence.rule]]\nvariants = [\"h100\"]\nkind = \"training\"\ngpu = \"h200\"\n";
    pins_with(d.path(), "p.toml", PINS, rule);
    ok(&gate_with(d.path(), "p.toml", &[&public], &[]));

    // --require-evidence is stricter than the table: the flag wins and is named.
    pins_with(d.path(), "p.toml", PINS, "\n[evidence]\nrequire = \"static\"\n");
    ok(&gate_with(d.path(), "p.toml", &[&public], &["--require-evidence", "training"]));
    ok(&gate_with(d.path(), "p.toml", &[&public], &["--require-evidence", "deep-ep-tests"])); // training >= deep-ep-tests

    // The table's GPU condition: a statement on h100 (sm_90) does not meet a rule for b200 (sm_100).
    let at = pins_with_b200_kernel_rule(d.path());
    let o = gate_with(d.path(), "p.toml", &[&public], &[]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let sha = sha256_of(&wheel);
    assert!(
        out.contains(&format!(
            "error[evidence-missing]: the locked deep-ep wheel {WHEEL} (variant h100) lacks `kernel` evidence: required by p.toml:{} [[evidence.rule]]; no statement of kind `kernel` or stronger on b200 (sm_100), signed by a trusted key, names sha256 {}; best present: none on b200 (sm_100) (`training` only for another GPU generation, request, or a MISMATCH)",
            at + 3,
            &sha[..16]
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "deepep-forge probe --run --wheel {WHEEL} --record ev --signing-key '<KEY_FILE>'   # on b200 (sm_100) GPUs"
        )),
        "{out}"
    );

    // A kind above what exists: exit 1 naming the wheel, the kind, who asks and the best present.
    let at = pins_with(
        d.path(),
        "p.toml",
        PINS,
        "\n[evidence]\nrequire = \"kernel\"\n\n[[evidence.rule]]\nvariants = [\"h100\"]\nkind = \"training\"\n",
    );
    ok(&gate_with(d.path(), "p.toml", &[&public], &[]));
    std::fs::write(d.path().join("p.toml"), format!("{PINS}\n[evidence]\nrequire = \"training\"\n")).unwrap();
    ok(&gate_with(d.path(), "p.toml", &[&public], &[]));
    let (_, other) = keygen(d.path(), "other-1");
    let o = gate_with(d.path(), "p.toml", &[&other], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!(
            "lacks `training` evidence: required by p.toml:{} [evidence] require; no statement of kind `training` or stronger on h100 (sm_90), signed by a trusted key, names sha256 {}; best present: none",
            at + 1,
            &sha[..16]
        )),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains(&format!("deepep-forge evidence add --sha256 {sha} --wheel-name {WHEEL} --kind training")),
        "{}",
        stdout(&o)
    );

    // No trusted key, no folder, or a folder nobody asked for: exit 2 saying what to pass.
    let o = gate_with(d.path(), "p.toml", &[], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("p.toml:{} [evidence] requires evidence, but no key is trusted", at + 1)),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("pass --trusted-key NAME:BASE64"), "{}", stderr(&o));
    let o = run(d.path(), &["lock", "check", "--project", "consumer", "--pins", "p.toml", "--trusted-key", &public]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no evidence folder is given") && stderr(&o).contains("pass --evidence DIR"),
        "{}",
        stderr(&o)
    );
    std::fs::write(d.path().join("plain.toml"), PINS).unwrap();
    let o = gate_with(d.path(), "plain.toml", &[&public], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--evidence is read only when evidence is required"), "{}", stderr(&o));

    // pins show renders the table.
    let o = run(d.path(), &["pins", "show", "--pins", "p.toml"]);
    assert!(
        stdout(&o).contains("evidence require training  (every locked deep-ep wheel, lock check)"),
        "{}",
        stdout(&o)
    );
}

/// A bad `[evidence]` table is exit 2 with file:line:column from `pins check`
/// and `lock check` alike, before anything is read.
#[test]
fn a_bad_evidence_table_is_refused_with_its_line() {
    let d = tempfile::tempdir().unwrap();
    let (wheel, _, public, _) = one_statement(d.path());
    consumer(d.path(), &sha256_of(&wheel));
    let rule = |body: &str| format!("\n[evidence]\nrequire = \"kernel\"\n\n[[evidence.rule]]\n{body}\n");
    let first = PINS.lines().count() + 2; // the line of `[evidence]`
    for (policy, line, col, msg) in [
        ("\n[evidence]\nrequire = \"gpu\"\n".to_string(), first + 1, 11, "evidence.require `gpu` is not a kind of evidence: expected one of configuration, static, kernel, deep-ep-round-trip, deep-ep-tests, training"),
        ("\n[evidence]\nrequire = \"kernel\"\ndirs = [\"ev\"]\n".to_string(), first + 2, 1, "unknown field `dirs`, expected `require` or `rule`"),
        (rule("variants = []\nkind = \"training\""), first + 4, 12, "evidence.rule.variants is empty"),
        (rule("variants = [\"h300\"]"), first + 4, 13, "evidence.rule names variant `h300`, which pins.toml does not declare"),
        (rule("variants = [\"h100\"]\nkind = \"static\""), first + 5, 8, "evidence.rule.kind `static` is weaker than evidence.require = `kernel`"),
        (format!("{}\n[[evidence.rule]]\nvariants = [\"h100\"]\n", rule("variants = [\"h100\"]\nkind = \"training\"")), first + 8, 13, "variant `h100` is already in the [[evidence.rule]] at line"),
    ] {
        pins_with(d.path(), "bad.toml", PINS, &policy);
        for args in [
            vec!["pins", "check", "--pins", "bad.toml"],
            vec!["lock", "check", "--project", "consumer", "--pins", "bad.toml", "--evidence", "ev", "--trusted-key", &public],
        ] {
            let o = run(d.path(), &args);
            assert_eq!(o.status.code(), Some(2), "{args:?} {policy}: {}", stderr(&o));
            assert!(stderr(&o).contains(&format!("error: bad.toml:{line}:{col}: {msg}")), "{args:?} {policy}: {}", stderr(&o));
        }
    }
}

/// A kept statement, opened with its key: it must verify as produced (bytes never edited).
fn kept(statement_path: &str, key_path: &str) -> forge_store::evidence::statement::Statement {
    let key = std::fs::read_to_string(root().join(key_path))
        .unwrap_or_else(|e| panic!("{key_path}: {e} (docs/evidence.md says how the lead makes it)"));
    let bytes = std::fs::read(root().join(statement_path)).unwrap_or_else(|e| panic!("{statement_path}: {e}"));
    let Opened::Trusted { statement, .. } = statement::open(&bytes, &[PublicKey::parse(key.trim()).unwrap()]).unwrap()
    else {
        panic!("{statement_path}: not signed by {key_path}")
    };
    statement
}

/// The GPU statement kept from the H200 run verifies as produced (bytes never
/// edited), and is what it says: a DeepEP round trip observed on H200s.
#[test]
fn the_kept_h200_statement_verifies() {
    let s = kept(GPU_STATEMENT, GPU_STATEMENT_KEY);
    let p = &s.predicate;
    assert_eq!((p.kind, p.origin), (Kind::DeepEpRoundTrip, Origin::Observed));
    let m = p.machine.as_ref().unwrap();
    assert!(m.gpu_model.as_deref().unwrap_or("").contains("H200"), "{m:?}");
    assert!(m.sm.contains(&90) && m.gpu_count >= 1 && m.ranks as usize == m.rank_gpus.len(), "{m:?}");
    assert!(m.rank_gpus.iter().all(|r| r.gpu.contains("H200") && r.sm == 90), "{m:?}");
    let out = p.result.as_ref().unwrap();
    assert!(out.rules.iter().any(|r| r.rule == "deep-ep-roundtrip" && r.status == "pass"), "{out:?}");
    assert!(s.subject[0].name.starts_with("deep_ep-1.2.1+17cfb81-"), "{}", s.subject[0].name);
}

/// The EPv2 statement kept from the H200 run: DeepEP main's `ElasticBuffer`
/// round trip exact, the verdict MATCH, with the NCCL the process loaded
/// (2.30.7, by its own ncclGetVersion) and the wheel's NVSHMEM/NCCL rows passing.
#[test]
fn the_kept_h200_epv2_statement_verifies() {
    let s = kept(EPV2_STATEMENT, EPV2_STATEMENT_KEY);
    let p = &s.predicate;
    assert_eq!((p.kind, p.origin), (Kind::DeepEpRoundTrip, Origin::Observed));
    assert!(s.subject[0].name.starts_with("deep_ep-2.1.0+dd758ca-"), "{}", s.subject[0].name);
    let m = p.machine.as_ref().unwrap();
    assert!(m.gpu_model.as_deref().unwrap_or("").contains("H200") && m.sm.contains(&90), "{m:?}");
    assert_eq!(m.nccl.as_deref(), Some("2.30.7"), "{m:?}");
    let out = p.result.as_ref().unwrap();
    assert_eq!(out.verdict, "MATCH", "{out:?}");
    let row = |rule: &str| out.rules.iter().find(|r| r.rule == rule).unwrap_or_else(|| panic!("no {rule}: {out:?}"));
    let rt = row("deep-ep-roundtrip");
    assert_eq!(rt.status, "pass", "{rt:?}");
    assert!(rt.evidence.starts_with("EPv2 ElasticBuffer combine(dispatch(x)) == x·(ranks reached) exactly"), "{rt:?}");
    for rule in ["nccl-version", "nvshmem-version", "loaded-libraries", "gpu-arch"] {
        assert_eq!(row(rule).status, "pass", "{rule}: {out:?}");
    }
}

/// The whole chain with real parts: the mini-deepep wheel built by `publish`
/// (real nvcc), a real static probe recorded, `evidence show` finding the
/// wheel in the cache, `publish --evidence` serving the statement beside the
/// wheel (and a second publish rewriting nothing), a consumer locked by real
/// uv from that index over HTTP, and `lock check --require-evidence` passing
/// for `static` and failing for `kernel`; then the same gate from pins.toml's
/// `[evidence]` table, and its GPU condition against an observed machine.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn recorded_statements_travel_through_the_index_to_the_consumers_lock_check() {
    let (Some(tools), Some(cuda)) = (tools_venv(), cuda_home()) else {
        support::missing("the tools venv (nvcc and uv)")
    };
    let d = tempfile::tempdir().unwrap();
    let p = |rel: &str| d.path().join(rel);
    std::fs::copy(root().join("tests/fixtures/demo-pins.toml"), p("pins.toml")).unwrap();
    let (key, public) = keygen(d.path(), "ci-1");
    let path_env = format!("{}:{}", tools.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let forge_in = |args: &[&str]| {
        let mut c = bin();
        c.args(args)
            .current_dir(d.path())
            .env("DEEPEP_FORGE_CACHE_DIR", p("cache"))
            .env("CUDA_HOME", &cuda)
            .env("PATH", &path_env)
            .env("XDG_CONFIG_HOME", p("config"))
            .env_remove("DEEPEP_FORGE_TRUSTED_KEYS");
        for k in ["TORCH_CUDA_ARCH_LIST", "HYBRID_EP_MULTINODE", "NVSHMEM_DIR", "MAX_JOBS", "CC", "CXX"] {
            c.env_remove(k);
        }
        c.output().unwrap()
    };
    let ok = |o: std::process::Output| {
        assert_eq!(o.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&o), stderr(&o));
        stdout(&o)
    };
    let (source, python) = (root().join("tests/fixtures/mini-deepep"), tools.join("bin/python"));
    let publish = |extra: &[&str]| {
        let mut a = vec!["publish", "--pins", "pins.toml", "--variant", "demo", "--source", source.to_str().unwrap()];
        a.extend(["--python", python.to_str().unwrap(), "--signing-key", key.to_str().unwrap(), "--out", "idx"]);
        a.extend(extra);
        forge_in(&a)
    };
    ok(publish(&[]));
    let wheel_name = "deep_ep-1.2.1+0bfa6c2-cp311-cp311-manylinux_2_34_x86_64.whl";
    let files = p("idx/demo/simple/deep-ep");
    let wheel = files.join(wheel_name);
    let sha = sha256_of(&wheel);

    // A real static probe of the built wheel, recorded: a MATCH for one H100 node.
    let o = forge_in(&[
        "probe",
        "--wheel",
        wheel.to_str().unwrap(),
        "--preset",
        "h100-8g",
        "--pins",
        "pins.toml",
        "--record",
        "ev",
        "--signing-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("MATCH"), "{}", stdout(&o));
    // show finds the wheel in the cache (where publish built it) and counts the statement.
    let out = ok(forge_in(&[
        "evidence",
        "show",
        "--pins",
        "pins.toml",
        "--variant",
        "demo",
        "--evidence",
        "ev",
        "--trusted-key",
        &public,
    ]));
    assert!(
        out.contains(&format!(
            "demo @ 0bfa6c2 (x86_64)  {wheel_name}  sha256 {}  (the wheel cache; exact, unpatched)",
            &sha[..16]
        )),
        "{out}"
    );
    assert!(out.contains("boundary covered   one-node static probe: 1 statement(s)"), "{out}");
    assert!(out.contains("boundary none      one-node kernel round trip: no evidence"), "{out}");

    // publish --evidence: the statement beside the wheel, in the signed manifest; nothing rewritten.
    let before: Vec<(PathBuf, Vec<u8>)> =
        files_under(&p("idx")).into_iter().map(|f| (f.clone(), std::fs::read(&f).unwrap())).collect();
    ok(publish(&["--evidence", "ev"]));
    let m = forge_store::index::manifest::Manifest::parse(&std::fs::read(p("idx/demo/index.json")).unwrap()).unwrap();
    assert_eq!(m.verify(&[PublicKey::parse(&public).unwrap()]), Ok("ci-1".to_string()));
    assert_eq!(m.evidence.len(), 1, "{m:?}");
    assert_eq!((m.evidence[0].kind.as_str(), m.evidence[0].wheel.as_str()), ("static", wheel_name));
    let served = files.join(&m.evidence[0].file);
    assert_eq!(std::fs::read(&served).unwrap(), std::fs::read(&files_under(&p("ev"))[0]).unwrap());
    for (f, bytes) in &before {
        if f.extension().is_some_and(|x| x == "whl") || f.to_str().unwrap().ends_with(".intoto.json") {
            assert_eq!(&std::fs::read(f).unwrap(), bytes, "{} was rewritten", f.display());
        }
    }
    let again: Value = serde_json::from_str(&ok(publish(&["--evidence", "ev", "--format", "json"]))).unwrap();
    assert_eq!(again["files_written"].as_u64(), Some(0), "{again}");
    let check = ok(forge_in(&[
        "publish",
        "--check",
        "idx",
        "--pins",
        "pins.toml",
        "--variant",
        "demo",
        "--trusted-key",
        &public,
    ]));
    assert!(check.contains(": ok ("), "{check}");
    assert_eq!(sha256_of(&wheel), sha, "evidence changed the wheel");

    // A consumer locked by real uv from the index over HTTP, gated on evidence.
    let server = support::HttpServer::start(&python, &p("idx"));
    let url = format!("http://127.0.0.1:{}", server.port);
    copy_dir(&root().join("tests/fixtures/consumer-index"), &p("consumer"));
    ok(forge_in(&[
        "pin",
        "set",
        "0bfa6c27cc77e8266337c19f6f30e3f5be23a483",
        "--project",
        "consumer",
        "--pins",
        "pins.toml",
        "--source",
        source.to_str().unwrap(),
        "--index",
        &url,
        "--variant",
        "demo",
    ]));
    let uv = std::process::Command::new(tools.join("bin/uv"))
        .args(["lock", "--python"])
        .arg(&python)
        .current_dir(p("consumer"))
        .env("UV_CACHE_DIR", p("uv-cache"))
        .env("UV_PYTHON_DOWNLOADS", "never")
        .env_remove("UV_INDEX_URL")
        .env_remove("UV_EXTRA_INDEX_URL")
        .output()
        .unwrap();
    assert!(uv.status.success(), "{}", stderr(&uv));
    let gate = |kind: &str| {
        forge_in(&[
            "lock",
            "check",
            "--project",
            "consumer",
            "--pins",
            "pins.toml",
            "--index-manifest",
            "index",
            "--trusted-key",
            &public,
            "--require-evidence",
            kind,
            "--evidence",
            "ev",
        ])
    };
    let out = ok(gate("static"));
    assert!(out.contains("ok: 0 error(s)"), "{out}");
    let o = gate("kernel");
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!(
            "error[evidence-missing]: the locked deep-ep wheel {wheel_name} (variant demo) lacks `kernel` evidence"
        )),
        "{}",
        stdout(&o)
    );

    // The same gate from pins.toml's [evidence] table, without --require-evidence.
    let base = std::fs::read_to_string(p("pins.toml")).unwrap();
    let policy = |table: &str| {
        let at = pins_with(d.path(), "pins.toml", &base, table);
        let o = forge_in(&[
            "lock",
            "check",
            "--project",
            "consumer",
            "--pins",
            "pins.toml",
            "--index-manifest",
            "index",
            "--trusted-key",
            &public,
            "--evidence",
            "ev",
        ]);
        (at, o)
    };
    let (_, o) = policy("\n[evidence]\nrequire = \"static\"\n");
    assert!(ok(o).contains("ok: 0 error(s)"));
    let (at, o) = policy("\n[evidence]\nrequire = \"kernel\"\n");
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let want = format!(
        "error[evidence-missing]: the locked deep-ep wheel {wheel_name} (variant demo) lacks `kernel` evidence: required by pins.toml:{} [evidence] require; no statement of kind `kernel` or stronger on h100 (sm_90), signed by a trusted key, names sha256 {}; best present: `static`",
        at + 1,
        &sha[..16]
    );
    assert!(stdout(&o).contains(&want), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("deepep-forge probe --run --wheel {wheel_name} --record ev ")),
        "{}",
        stdout(&o)
    );

    // A GPU condition against the machine a statement observed: the kept H200 DeepEP
    // round trip's statement (machine as observed: 1 x NVIDIA H200, sm 90), its subject
    // set to this wheel and signed again by ci-1 (the payload otherwise as produced).
    let kept: Value = serde_json::from_slice(&std::fs::read(root().join(GPU_STATEMENT)).unwrap()).unwrap();
    let mut payload: Value = serde_json::from_slice(&B64.decode(kept["payload"].as_str().unwrap()).unwrap()).unwrap();
    payload["subject"] = json!([{"name": wheel_name, "digest": {"sha256": sha}}]);
    let at_sha = p("ev").join(&sha);
    std::fs::write(
        at_sha.join("deep-ep-round-trip-0123456789abcdef.dsse.json"),
        envelope(&serde_json::to_vec(&payload).unwrap(), &key),
    )
    .unwrap();
    let rule = |gpu: &str| {
        format!("\n[evidence]\nrequire = \"static\"\n\n[[evidence.rule]]\nvariants = [\"demo\"]\nkind = \"deep-ep-round-trip\"\ngpu = \"{gpu}\"\n")
    };
    let (_, o) = policy(&rule("h100")); // an H200 is of the H100's generation (sm_90)
    assert!(ok(o).contains("ok: 0 error(s)"));
    let (at, o) = policy(&rule("b200"));
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let want = format!(
        "lacks `deep-ep-round-trip` evidence: required by pins.toml:{} [[evidence.rule]]; no statement of kind `deep-ep-round-trip` or stronger on b200 (sm_100), signed by a trusted key, names sha256 {}; best present: none on b200 (sm_100) (`deep-ep-round-trip` only for another GPU generation, request, or a MISMATCH)",
        at + 3,
        &sha[..16]
    );
    assert!(stdout(&o).contains(&want), "{}", stdout(&o));
    assert!(stdout(&o).contains("--record ev --signing-key '<KEY_FILE>'   # on b200 (sm_100) GPUs"), "{}", stdout(&o));
}

/// pins.toml whose `h100` builds for sm_100 too (`9.0 10.0`), with `[evidence]
/// require = "static"` and a rule asking `h100`'s wheels for a `kernel` statement
/// on b200: written as `p.toml` in `dir`; the rule's line.
pub(crate) fn pins_with_b200_kernel_rule(dir: &Path) -> usize {
    let fat = PINS.replacen(
        "cuda_arch_list = \"9.0\"\nmultinode = false\ntopology = { gpu = \"h100\", nodes = 1",
        "cuda_arch_list = \"9.0 10.0\"\nmultinode = false\ntopology = { gpu = \"h100\", nodes = 1",
        1,
    );
    assert_ne!(fat, PINS);
    pins_with(
        dir,
        "p.toml",
        &fat,
        "\n[evidence]\nrequire = \"static\"\n\n[[evidence.rule]]\nvariants = [\"h100\"]\nkind = \"kernel\"\ngpu = \"b200\"\n",
    )
}
