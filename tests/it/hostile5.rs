//! Hostile input, fifth pass (classes 3, 4, 6, 7, 8, 9, 10, 11): each case runs
//! the real binary in a fresh folder (support::hostile) and asserts the exit
//! code, a clear message naming file, line and key, no panic, nothing written,
//! nothing run (a `git` on PATH that would leave a marker), nothing echoed.

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::hostile::{run_all, Case};

const PINS: &str = include_str!("../../pins.toml");
const CUDA: &str = "cuda = \"13.0\"";
const PYTHON: &str = "python = \"3.12\"";
const TOPOLOGY: &str = "nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8";
const REPO: &str = "repo = \"https://github.com/deepseek-ai/DeepEP.git\"";

fn swap(from: &str, to: &str) -> String {
    assert!(PINS.contains(from), "the shipped pins.toml no longer holds {from:?}");
    PINS.replacen(from, to, 1)
}

/// The 1-based line of the shipped pins.toml that holds `needle`.
fn line_of(needle: &str) -> usize {
    PINS.lines().position(|l| l.contains(needle)).expect("in pins.toml") + 1
}

/// A `git` first on PATH that leaves `git-ran` in the case folder: a case
/// that must run no git asserts it `absent`.
fn trap_git(d: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let bin = d.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let git = bin.join("git");
    std::fs::write(&git, format!("#!/bin/sh\ntouch '{}/git-ran'\nexit 1\n", d.display())).unwrap();
    std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn trapped_path() -> String {
    format!("{{dir}}/bin:{}", std::env::var("PATH").unwrap_or_default())
}

/// Class 3: numbers from pins.toml are bounded where parsed, with file:line:column and the key.
#[test]
fn numbers_from_pins_toml_are_bounded_where_parsed() {
    let cuda_line = format!("pins.toml:{}:", line_of(CUDA));
    let topo_line = format!("pins.toml:{}:", line_of(TOPOLOGY));
    let mut v = Vec::new();
    for bad in ["4294967295.0", "13.4294967295", "100.0", "013.0", "0.0", "18446744073709551616.1"] {
        let publish = &[
            "publish",
            "--all",
            "--variant-wheels",
            "--default-variant",
            "h100",
            "--signing-key",
            "k.key",
            "--out",
            "site",
        ][..];
        for args in [&["pins", "check"][..], publish] {
            v.push(
                Case::new(format!("cuda {bad} under {}", args[..2].join(" ")))
                    .file("pins.toml", swap(CUDA, &format!("cuda = \"{bad}\"")))
                    .setup(keygen)
                    .absent("site")
                    .args(args)
                    .says("toolchain.cuda")
                    .says(&cuda_line)
                    .says("e.g. \"13.0\""),
            );
        }
    }
    for (key, value) in
        [("nodes", "4294967295"), ("gpus_per_node", "4294967295"), ("ep", "4294967295"), ("ranks_per_domain", "65536")]
    {
        let t = TOPOLOGY
            .split(", ")
            .map(|kv| if kv.starts_with(&format!("{key} = ")) { format!("{key} = {value}") } else { kv.to_string() })
            .collect::<Vec<_>>()
            .join(", ");
        v.push(
            Case::new(format!("topology.{key} = {value}"))
                .file("pins.toml", swap(TOPOLOGY, &t))
                .args(&["pins", "check"])
                .says(&format!("topology.{key} = {value}"))
                .says(&topo_line)
                .says("expected 1 to"),
        );
    }
    v.push(
        Case::new("topology.nodes beyond u64")
            .file("pins.toml", swap("nodes = 1,", "nodes = 99999999999999999999,"))
            .args(&["pins", "check"])
            .says(&topo_line),
    );
    run_all(v);
}

/// Class 8: every shape error of pins.toml names file:line:column, the key, what was expected and an example.
#[test]
fn pins_toml_shape_errors_name_the_key_what_was_expected_and_an_example() {
    let py = format!("pins.toml:{}:", line_of(PYTHON));
    let cases = [
        (
            "python nested list",
            PYTHON,
            "python = [3.12, [\"3.13\"]]",
            "toolchain.python",
            "[\"3.11\", \"3.12\"]",
            py.clone(),
        ),
        ("python integer", PYTHON, "python = 3", "toolchain.python", "\"3.12\"", py.clone()),
        ("python table", PYTHON, "python = { v = \"3.12\" }", "toolchain.python", "found a table", py.clone()),
        (
            "gpu integer",
            "gpu = \"h100\", nodes = 1,",
            "gpu = 100, nodes = 1,",
            "topology",
            "\"h100\"",
            format!("pins.toml:{}:", line_of(TOPOLOGY)),
        ),
        (
            "gpu nested",
            "gpu = \"h100\", nodes = 1,",
            "gpu = [[\"h100\"]], nodes = 1,",
            "topology",
            "[\"h100\", \"b200\"]",
            format!("pins.toml:{}:", line_of(TOPOLOGY)),
        ),
    ];
    let mut v = Vec::new();
    for (name, from, to, key, example, at) in cases {
        v.push(
            Case::new(format!("shape: {name}"))
                .file("pins.toml", swap(from, to))
                .args(&["pins", "check"])
                .says(key)
                .says("expected")
                .says(example)
                .says(&at)
                .hides("untagged")
                .hides("did not match any variant"),
        );
    }
    let pin = "[pin.x86_64]\nrev = ";
    for (name, patches, says) in [
        ("patch integer", "patches = [3]", "found an integer"),
        ("patch list", "patches = [[\"a.patch\"]]", "found a list"),
        ("patch table unknown key", "patches = [{ file = \"a.patch\" }]", "unknown field `file`"),
    ] {
        let text = PINS.replacen(pin, &format!("[pin.x86_64]\n{patches}\nrev = "), 1);
        assert_ne!(text, PINS);
        v.push(
            Case::new(format!("shape: {name}"))
                .file("pins.toml", text)
                .args(&["pins", "check"])
                .says("pin.x86_64.patches")
                .says(says)
                .says("\"patches/fix.patch\"")
                .hides("untagged"),
        );
    }
    run_all(v);
}

/// Class 11: option-shaped users and hosts never reach git; the error names pins.toml's line.
#[test]
fn option_shaped_hosts_and_users_are_refused_before_any_git_runs() {
    let at = format!("pins.toml:{}:", line_of(REPO));
    let mut v = Vec::new();
    for (name, url) in [
        ("ssh user option", "ssh://-oProxyCommand=touch${IFS}pwned@host/x"),
        ("ssh host option", "ssh://user@-oProxyCommand=x/x"),
        ("ssh encoded user", "ssh://%2DoProxyCommand=x@host/x"),
        ("ssh user:pw option", "ssh://-oProxy:pw@host/x"),
        ("scp user option", "-oProxyCommand=x@host:x"),
        ("scp host option", "git@-oProxyCommand=x:x"),
        ("https user option", "https://-user@github.com/x/y"),
    ] {
        for args in [&["pins", "check"][..], &["plan", "--variant", "h100"][..]] {
            v.push(
                Case::new(format!("url: {name} under {}", args.join(" ")))
                    .file("pins.toml", swap(REPO, &format!("repo = \"{url}\"")))
                    .setup(trap_git)
                    .env("PATH", &trapped_path())
                    .args(args)
                    .says("source.repo")
                    .says("starts with `-`")
                    .says(&at)
                    .absent("git-ran")
                    .absent("pwned"),
            );
        }
    }
    run_all(v);
}

/// Class 6: a token in a repository URL is never printed, errors included.
#[test]
fn tokens_in_repository_urls_are_never_echoed() {
    let mut v = Vec::new();
    for (name, url) in [
        ("user:token", "https://x-access-token:ghs_SECRETTOKEN1@127.0.0.1:9/DeepEP.git"),
        ("token@", "https://ghp_SECRETTOKEN2@127.0.0.1:9/DeepEP.git"),
        ("query token", "https://127.0.0.1:9/DeepEP.git?access_token=SECRETTOKEN3"),
    ] {
        let secret = url.split("SECRETTOKEN").nth(1).map(|n| format!("SECRETTOKEN{}", &n[..1])).unwrap();
        v.push(
            Case::new(format!("secret: {name} in a failing fetch"))
                .file("pins.toml", swap(REPO, &format!("repo = \"{url}\"")))
                .args(&["plan", "--variant", "h100", "--python", "/nonexistent/python"])
                .env("GIT_SSH_COMMAND", "false")
                .exit(3)
                .may_change("cache")
                .says("127.0.0.1")
                .hides(&secret)
                .hides("SECRETTOKEN"),
        );
    }
    // A fork's upstream with a token, rejected by the URL check: the message shows it redacted.
    v.push(
        Case::new("secret: upstream with a token and a bad scheme")
            .file("pins.toml", swap(REPO, &format!("{REPO}\nupstream = \"http://u:SECRETTOKEN4@example.org/x.git?access_token=SECRETTOKEN5\"\nupstream_branch = \"main\"")))
            .args(&["pins", "check"])
            .says("source.upstream")
            .hides("SECRETTOKEN"),
    );
    run_all(v);
}

/// Class 7: a usage error leaves no folder behind, in every command that creates output folders.
#[test]
fn usage_errors_create_no_output_folder() {
    let v = vec![
        Case::new("probe --record without --wheel")
            .setup(keygen)
            .args(&["probe", "--record", "ev/new", "--signing-key", "k.key", "--preset", "h100-8g"])
            .says("--record needs --wheel")
            .absent("ev"),
        Case::new("probe --record with a missing wheel")
            .setup(keygen)
            .args(&["probe", "--record", "ev", "--signing-key", "k.key", "--wheel", "nope.whl", "--preset", "h100-8g"])
            .says("nope.whl")
            .absent("ev"),
        Case::new("probe --record with a bad key")
            .file("k.key", "not a key")
            .args(&["probe", "--record", "ev", "--signing-key", "k.key", "--wheel", "nope.whl"])
            .absent("ev"),
        Case::new("build-wheel --out with an unknown variant")
            .file("pins.toml", PINS)
            .args(&["build-wheel", "--variant", "nope", "--out", "dist/new"])
            .says("unknown variant")
            .absent("dist"),
        Case::new("verify --out with a missing wheel")
            .args(&["verify", "nope.whl", "--out", "rebuilt"])
            .absent("rebuilt"),
        Case::new("publish --out with an unknown variant")
            .file("pins.toml", PINS)
            .setup(keygen)
            .args(&["publish", "--pins", "pins.toml", "--variant", "nope", "--signing-key", "k.key", "--out", "site"])
            .absent("site"),
    ];
    run_all(v);
}

fn keygen(d: &Path) {
    let o = std::process::Command::new(crate::support::exe())
        .args(["cache", "keygen", "--name", "k-1", "--out"])
        .arg(d.join("k.key"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Class 4: a line break in a value from a file (a uv.lock wheel URL) never
/// starts a live workflow-command line, in any format of `lock check`.
#[test]
fn a_line_break_in_a_value_never_starts_a_workflow_command() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("pins.toml"), PINS).unwrap();
    let c = d.path().join("consumer");
    std::fs::create_dir_all(&c).unwrap();
    let url = "https://h.example/h100/simple";
    std::fs::write(
        c.join("pyproject.toml"),
        format!("[project]\nname = \"consumer\"\nversion = \"0.1.0\"\nrequires-python = \">=3.12\"\ndependencies = [\"deep_ep==1.2.1+17cfb81\"]\n\n[tool.uv.sources]\ndeep-ep = {{ index = \"deepep\" }}\n\n[[tool.uv.index]]\nname = \"deepep\"\nurl = \"{url}\"\nexplicit = true\n"),
    )
    .unwrap();
    // No hash: `lock-wheel-unattested` names the wheel whatever the index's manifest (none is given here).
    let evil = "deep_ep-1.2.1%2B17cfb81-cp312-cp312-linux_x86_64.whl\\n::error file=x::pwned\\r\\n##[error]pwned";
    std::fs::write(
        c.join("uv.lock"),
        format!("version = 1\nrevision = 3\nrequires-python = \">=3.12\"\n\n[[package]]\nname = \"consumer\"\nversion = \"0.1.0\"\nsource = {{ virtual = \".\" }}\ndependencies = [\n    {{ name = \"deep-ep\" }},\n]\n\n[package.metadata]\nrequires-dist = [{{ name = \"deep-ep\", specifier = \"==1.2.1+17cfb81\", index = \"{url}\" }}]\n\n[[package]]\nname = \"deep-ep\"\nversion = \"1.2.1+17cfb81\"\nsource = {{ registry = \"{url}\" }}\nwheels = [\n    {{ url = \"{url}/deep-ep/{evil}\", size = 1 }},\n]\n"),
    )
    .unwrap();
    for format in ["human", "json", "github"] {
        let o = crate::support::bin()
            .args(["lock", "check", "--project", "consumer", "--format", format])
            .current_dir(d.path())
            .env("DEEPEP_FORGE_CACHE_DIR", d.path().join("cache"))
            .output()
            .unwrap();
        let (out, err) = (crate::support::stdout(&o), crate::support::stderr(&o));
        assert!(!out.contains("panicked") && !err.contains("panicked"), "{err}");
        for line in out.lines().chain(err.lines()) {
            let l = line.trim_start();
            let planted = (l.starts_with("::error file=x") || l.starts_with("##[error]")) && l.contains("pwned");
            assert!(!planted, "--format {format}: a live workflow command: {line:?}\n{out}\n{err}");
            assert!(!line.contains('\r'), "--format {format}: a raw CR: {line:?}");
        }
        if format == "human" {
            // The value stays on its line, its line breaks shown escaped.
            assert!(out.contains(".whl\\n::error file=x::pwned\\r\\n"), "{out}");
        }
    }
}

/// Class 9: a path that is not UTF-8 is refused (exit 2) in every format, named by its bytes.
#[test]
fn non_utf8_paths_are_refused_in_every_format() {
    let mut v = Vec::new();
    for format in ["human", "json"] {
        v.push(
            Case::new(format!("plan --format {format} --pins non-UTF-8"))
                .args(&["plan", "--all", "--format", format, "--pins"])
                .arg_bytes(b"p\xffins.toml")
                .says("p\\xffins.toml")
                .says("not UTF-8")
                .hides("\u{fffd}"),
        );
        v.push(
            Case::new(format!("verify --format {format} non-UTF-8 wheel"))
                .args(&["verify", "--format", format])
                .arg_bytes(b"w\xfe.whl")
                .says("w\\xfe.whl")
                .hides("\u{fffd}"),
        );
    }
    run_all(v);
}

/// A server on 127.0.0.1 that answers every request with headers announcing
/// `len` bytes, then sends one byte every `every` (never, when `None`).
fn trickle_server(len: usize, every: Option<Duration>) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nContent-Type: application/json\r\n\r\n");
                let _ = s.flush();
                for _ in 0..len {
                    match every {
                        Some(d) => std::thread::sleep(d),
                        None => std::thread::sleep(Duration::from_secs(600)),
                    }
                    if s.write_all(b" ").is_err() {
                        break;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

/// Class 10: a slow server does not hold `verify` of an index URL: the idle
/// limit and the length-sized deadline end it quickly, with a clear error.
#[test]
fn a_slow_server_is_given_up_on_quickly() {
    let run = |url: &str, env: &[(&str, &str)]| {
        let t = Instant::now();
        let d = tempfile::tempdir().unwrap();
        let o = crate::support::bin()
            .args(["verify", &format!("{url}/h100/index.json"), "--format", "json"])
            .current_dir(d.path())
            .env("DEEPEP_FORGE_CACHE_DIR", d.path().join("cache"))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (o, t.elapsed())
    };
    // A byte every 200 ms into a body of 100000: the deadline is 2 s + 100000 B / 1 MB/s = 2 s.
    let slow = trickle_server(100_000, Some(Duration::from_millis(200)));
    let (o, took) = run(&slow, &[("DEEPEP_FORGE_HTTP_BASE_TIMEOUT", "2"), ("DEEPEP_FORGE_HTTP_MIN_RATE", "1000000")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("timed out after 2 s") && err.contains("DEEPEP_FORGE_HTTP_BASE_TIMEOUT"), "{err}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // Headers, then nothing: the idle limit.
    let stalled = trickle_server(100, None);
    let (o, took) = run(&stalled, &[("DEEPEP_FORGE_HTTP_IDLE_TIMEOUT", "1")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no data for 1 s") && err.contains("DEEPEP_FORGE_HTTP_IDLE_TIMEOUT"), "{err}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // A bad limit is a usage error naming the variable.
    let (o, _) = run(&stalled, &[("DEEPEP_FORGE_HTTP_IDLE_TIMEOUT", "0")]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("DEEPEP_FORGE_HTTP_IDLE_TIMEOUT=0"));
}
