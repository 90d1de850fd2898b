//! The adversarial suite, third pass (issue 35 §1): each class of hostile
//! input run through the real binary, in the real shapes (a consumer's
//! uv.lock, pins.toml, a publish index, an installed environment, HTTP
//! servers on 127.0.0.1). Every case asserts the exit code, a message
//! fragment, no panic, and that nothing on disk changed or appeared
//! (harness: tests/it/support/hostile.rs).
use crate::support;
use std::path::Path;
use std::sync::OnceLock;

use crate::support::hostile::{run_all, Case};

const PINS: &str = include_str!("../../pins.toml");
const REV: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";

/// The commit `git_repo_from_fixture("mini-deepep", ..)` makes (fixed dates
/// and identity: the same in every case folder).
fn mini_rev() -> &'static str {
    static REV_OF: OnceLock<String> = OnceLock::new();
    REV_OF.get_or_init(|| {
        let t = tempfile::tempdir().unwrap();
        support::git_repo_from_fixture("mini-deepep", &t.path().join("deepep"))
    })
}

/// A consumer's uv.lock in uv's shape, locking torch and one NVIDIA library.
fn uv_lock(torch: &str, lib_name: &str, lib_version: &str) -> String {
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    format!(
        "version = 1\nrevision = 3\nrequires-python = \">=3.12\"\n\n\
         [[package]]\nname = \"torch\"\nversion = {}\nsource = {{ registry = \"https://pypi.org/simple\" }}\n\n\
         [[package]]\nname = {}\nversion = {}\nsource = {{ registry = \"https://pypi.org/simple\" }}\n",
        q(torch),
        q(lib_name),
        q(lib_version)
    )
}

/// `build-wheel --toolchain registry --match-project proj` (and `plan`) on a
/// consumer lock: the pinned source is the mini-deepep fixture (a real git
/// repository), so the run reaches the toolchain request.
fn match_project(cmd: &str, name: &str, lock: String) -> Case {
    Case::new(format!("{cmd} --match-project: {name}"))
        .file("pins.toml", PINS.replace(REV, mini_rev()))
        .file("proj/uv.lock", lock)
        .file("evil/setup.py", "open('PWNED', 'w').write('ran')\n")
        .setup(|d| {
            support::git_repo_from_fixture("mini-deepep", &d.join("deepep"));
        })
        .args(&[cmd, "--toolchain", "registry", "--match-project", "proj", "--pins", "pins.toml"])
        .args(&["--source", "{dir}/deepep", "--variant", "h100", "--python", "python3"])
        .may_change("cache")
        .absent("PWNED")
        .absent("evil/PWNED")
        .absent("cache/toolchains")
        .timeout(std::time::Duration::from_secs(120))
}

/// Class 1: names and versions from a consumer's uv.lock (and pins.toml)
/// reach uv's override file or command line only when they match their grammar.
fn uv_lock_cases() -> Vec<Case> {
    let good = ("2.11.0", "nvidia-nccl-cu13", "2.30.7");
    let mut cases = Vec::new();
    for cmd in ["build-wheel", "plan"] {
        let hostile: [(&str, (&str, &str, &str), &str); 8] = [
            (
                "a name carrying a newline and -e",
                (good.0, "nvidia-nccl-cu13\n-e file://{dir}/evil", good.2),
                "is not a package name",
            ),
            (
                "a name with a direct URL",
                (good.0, "nvidia-nccl-cu13 @ file://{dir}/evil-cu13", good.2),
                "is not a package name",
            ),
            (
                "a name with a false marker and a comment",
                (good.0, "nvidia-nvshmem-cu13 ; python_version < '0' # -cu13", good.2),
                "is not a package name",
            ),
            (
                "a name with a CR and an annotation",
                (good.0, "nvidia-nccl-cu13\r::warning::x-cu13", good.2),
                "is not a package name",
            ),
            (
                "a library version with a false marker",
                (good.0, good.1, "2.30.7 ; python_version < '0'"),
                "is not a PEP 440 version",
            ),
            (
                "a torch version with a false marker",
                ("2.11.0 ; python_version < '0'", good.1, good.2),
                "is not a PEP 440 version",
            ),
            (
                "a torch version with a newline and -e",
                ("2.11.0\n-e file://{dir}/evil", good.1, good.2),
                "is not a PEP 440 version",
            ),
            (
                "a torch version with a direct URL",
                ("2.11.0 @ file://{dir}/evil", good.1, good.2),
                "is not a PEP 440 version",
            ),
        ];
        for (name, (t, n, v), says) in hostile {
            cases.push(match_project(cmd, name, uv_lock(t, n, v)).says(says).hides("\n-e file://"));
        }
    }
    // The same grammar for pins.toml's [toolchain] torch (it becomes `torch==VERSION` on uv's command line).
    for (name, torch) in
        [("a marker", "2.11.0 ; python_version < '0'"), ("a trailing space", "2.11.0 "), ("-e", "2.11.0\n-e .")]
    {
        let pins = PINS
            .replace(REV, mini_rev())
            .replace("torch = \"2.11.0\"", &format!("torch = {}", toml::Value::String(torch.into())));
        let mut c =
            match_project("plan", &format!("pins.toml toolchain.torch with {name}"), uv_lock(good.0, good.1, good.2))
                .says("toolchain.torch")
                .says("is not a PEP 440 version");
        c.files[0].1 = pins.into_bytes();
        cases.push(c);
    }
    cases
}

#[test]
fn uv_lock_names_and_versions_never_reach_uv_unchecked() {
    run_all(uv_lock_cases());
}

fn fifo(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", p.display());
}

/// A sparse file of `len` bytes (costs no disk, reads as zeros).
fn sparse(p: &Path, len: u64) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::File::create(p).unwrap().set_len(len).unwrap();
}

/// `probe --python python3` on an environment (`site/` on PYTHONPATH) with an
/// installed deep_ep 1.2.1 whose RECORD lists its METADATA.
fn probed_env(name: &str) -> Case {
    Case::new(format!("probe --python: {name}"))
        .file("site/deep_ep/__init__.py", "")
        .file("site/deep_ep-1.2.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: deep_ep\nVersion: 1.2.1\n")
        .file("site/deep_ep-1.2.1.dist-info/RECORD", "deep_ep-1.2.1.dist-info/METADATA,,\ndeep_ep/__init__.py,,\n")
        .env("PYTHONPATH", "{dir}/site")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(&["probe", "--python", "python3"])
}

/// Class 5 and 6: special and huge files in a probed environment are never
/// opened for a blocking read, nor read whole.
fn probe_env_cases() -> Vec<Case> {
    vec![
        probed_env("deep_ep's METADATA is a FIFO")
            .file("site/deep_ep-1.2.1.dist-info/METADATA", "")
            .setup(|d| {
                let p = d.join("site/deep_ep-1.2.1.dist-info/METADATA");
                std::fs::remove_file(&p).unwrap();
                fifo(&p);
            })
            .says("METADATA: not a regular file"),
        probed_env("deep_ep's RECORD is a FIFO")
            .setup(|d| {
                let p = d.join("site/deep_ep-1.2.1.dist-info/RECORD");
                std::fs::remove_file(&p).unwrap();
                fifo(&p);
            })
            .says("RECORD: not a regular file"),
        probed_env("another package's METADATA is a FIFO")
            .setup(|d| fifo(&d.join("site/torch-2.11.0.dist-info/METADATA")))
            .exit(1)
            .says("not read: ")
            .says("torch-2.11.0.dist-info/METADATA: not a regular file"),
        probed_env("deep_ep's METADATA is 3 GiB")
            .setup(|d| sparse(&d.join("site/deep_ep-1.2.1.dist-info/METADATA"), 3 << 30))
            .says("more than 16777216"),
        probed_env("another package's METADATA is 3 GiB")
            .setup(|d| sparse(&d.join("site/nvidia_nccl_cu13-2.30.7.dist-info/METADATA"), 3 << 30))
            .exit(1)
            .says("nvidia_nccl_cu13-2.30.7.dist-info/METADATA: 3221225472 bytes"),
        probed_env("torch's libc10.so is 3 GiB")
            .file("site/torch/__init__.py", "")
            .setup(|d| sparse(&d.join("site/torch/lib/libc10.so"), 3 << 30))
            .memory(768 << 20)
            .exit(1),
        probed_env("torch's libc10.so is 700 MiB")
            .file("site/torch/__init__.py", "")
            .setup(|d| sparse(&d.join("site/torch/lib/libc10.so"), 700 << 20))
            .memory(512 << 20)
            .exit(1),
    ]
}

#[test]
fn probed_environments_never_block_or_read_whole() {
    run_all(probe_env_cases());
}

/// A server on 127.0.0.1 that answers every request `200` with a 100 000-byte
/// body sent one byte every 100 ms (within every idle timeout).
fn trickling_server() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut req = [0u8; 4096];
                let _ = s.read(&mut req);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
                while s.write_all(b"{").is_ok() {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            });
        }
    });
    url
}

/// A consumer pinned to a publish index at `url` (`<base>/h100/simple`).
fn index_consumer(url: &str) -> String {
    format!(
        "[project]\nname = \"c\"\nversion = \"0.1.0\"\nrequires-python = \">=3.12\"\ndependencies = [\"deep_ep==1.2.1+17cfb81\"]\n\n\
         [[tool.uv.index]]\nname = \"deepep-forge-h100\"\nurl = \"{url}/h100/simple\"\nexplicit = true\n\n\
         [tool.uv.sources]\ndeep_ep = {{ index = \"deepep-forge-h100\" }}\n"
    )
}

const WHEEL_PATH: &str = "h100/simple/deep-ep/deep_ep-1.2.1%2B17cfb81-cp312-cp312-linux_x86_64.whl";

/// Class 4 and 9: credentials and queries in a URL are never printed, in any
/// place a URL is refused or reported; a URL with a tab or newline is refused.
fn secret_cases() -> Vec<Case> {
    let secret = "hunter2SECRET";
    let pin_set = |name: &str, index: &str| {
        Case::new(format!("pin set --index: {name}"))
            .file("pins.toml", PINS)
            .file("consumer/pyproject.toml", include_str!("../fixtures/consumer-unified/pyproject.toml"))
            .args(&["pin", "set", REV, "--project", "consumer", "--variant", "h100", "--index", index])
            .hides(secret)
    };
    let closed = "127.0.0.1:9";
    vec![
        pin_set("user:password", &format!("https://user:{secret}@h.example/deepep"))
            .says("https://***@h.example/deepep"),
        pin_set("a token query", &format!("https://h.example/deepep?token={secret}"))
            .says("https://h.example/deepep?***"),
        pin_set("a tab in the host", "https://h.exa\tmple/deepep").says("no space, tab, newline"),
        pin_set("a newline in the host", "https://h.exa\nmple/deepep").says("no space, tab, newline"),
        pin_set("a newline and a secret", &format!("https://u:{secret}@h.exa\nmple/deepep")).says("https://***@h.exa"),
        Case::new("verify: a wheel URL with user:password")
            .args(&["verify", &format!("https://u:{secret}@{closed}/{WHEEL_PATH}")])
            .exit(1)
            .says("https://***@127.0.0.1:9/h100/index.json: cannot connect")
            .hides(secret),
        Case::new("verify: an index URL with a token")
            .args(&["verify", &format!("https://{closed}/h100/?token={secret}")])
            .says("https://127.0.0.1:9/h100/?***")
            .hides(secret),
        Case::new("verify: an index URL with user:password")
            .args(&["verify", &format!("https://u:{secret}@{closed}/h100/")])
            .exit(1)
            .says("https://***@127.0.0.1:9/h100/index.json")
            .hides(secret),
        Case::new("lock check --index-manifest: user:password and a token")
            .file("pins.toml", PINS)
            .file("c/pyproject.toml", index_consumer("https://h.example"))
            .args(&["lock", "check", "--project", "c"])
            .args(&["--index-manifest", &format!("https://u:{secret}@{closed}/h100/index.json?token={secret}")])
            .exit(1)
            .says("https://***@127.0.0.1:9/h100/index.json?***: cannot connect")
            .hides(secret),
        Case::new("docker build --base-mirror: user:password, token and a space")
            .file("pins.toml", PINS)
            .args(&["docker", "build", "--builder", "podman", "--variant", "h100"])
            .args(&["--base-mirror", &format!("https://u:{secret}@deb.exa mple/debian?token={secret}")])
            .hides(secret),
        Case::new("cache push: credentials in the URL")
            .args(&["cache", "push", "--cache-url", &format!("https://u:{secret}@{closed}/c/?token={secret}")])
            .hides(secret),
    ]
}

#[test]
fn credentials_in_urls_are_never_printed() {
    run_all(secret_cases());
}

/// Class 5: a server that sends the manifest one byte at a time (inside every
/// idle timeout) is cut at the overall deadline (30 s for a manifest), exit 1.
#[test]
fn a_trickling_index_server_is_cut_at_the_deadline() {
    let url = trickling_server();
    run_all(vec![
        Case::new("verify: a trickling manifest")
            .args(&["verify", &format!("{url}/{WHEEL_PATH}")])
            .exit(1)
            .says("timed out after 30 s")
            .timeout(std::time::Duration::from_secs(120)),
        Case::new("lock check --index-manifest: a trickling manifest")
            .file("pins.toml", PINS)
            .file("c/pyproject.toml", index_consumer(&url))
            .args(&["lock", "check", "--project", "c", "--index-manifest", &format!("{url}/h100/index.json")])
            .exit(1)
            .says("timed out after 30 s")
            .timeout(std::time::Duration::from_secs(120)),
    ]);
}

/// A secret key made by the real `cache keygen` (mode 0600).
fn keygen(d: &Path) {
    let o = std::process::Command::new(crate::support::exe())
        .args(["cache", "keygen", "--name", "idx-1", "--out"])
        .arg(d.join("k.key"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Class 2 and 9: `publish --out FILE` is a usage error before anything is
/// built; a manifest over its 4 MiB bound is refused as SECURITY.md says (exit 1).
fn out_and_manifest_cases() -> Vec<Case> {
    vec![
        Case::new("publish --out is a file")
            .file("pins.toml", PINS)
            .file("out", "not a folder")
            .setup(keygen)
            .args(&["publish", "--pins", "pins.toml", "--variant", "h100", "--signing-key", "k.key", "--out", "out"])
            .says("--out out: a file, not a folder")
            .hides("os error"),
        Case::new("publish --out is a link to a file")
            .file("pins.toml", PINS)
            .file("target-file", "x")
            .setup(|d| {
                keygen(d);
                std::os::unix::fs::symlink(d.join("target-file"), d.join("out")).unwrap();
            })
            .args(&["publish", "--pins", "pins.toml", "--variant", "h100", "--signing-key", "k.key", "--out", "out"])
            .says("a file, not a folder"),
        Case::new("lock check --index-manifest: a manifest over 4 MiB")
            .file("pins.toml", PINS)
            .file("c/pyproject.toml", index_consumer("https://h.example"))
            .setup(|d| sparse(&d.join("index.json"), 5 << 20))
            .args(&["lock", "check", "--project", "c", "--index-manifest", "index.json"])
            .exit(1)
            .says("index.json: larger than 4194304 bytes"),
    ]
}

#[test]
fn publish_out_and_manifest_bounds_keep_their_promises() {
    run_all(out_and_manifest_cases());
}

/// Class 7: values from files carrying CR, ESC or a workflow command reach
/// stdout escaped, in every format (a runner splits lines at CR).
fn injection_cases() -> Vec<Case> {
    let value = "x\\r::warning::pwned\\u001b[2J\\u001b]0;title\\u0007";
    let plan = |format: &str| {
        let pins = PINS.replace(REV, mini_rev()).replacen(
            "name = \"h100\"\n",
            &format!("name = \"h100\"\nenv = {{ NIXL_HOME = \"{value}\" }}\n"),
            1,
        );
        Case::new(format!("plan --format {format}: a pins.toml env value with CR and ESC"))
            .file("pins.toml", pins)
            .setup(|d| {
                support::git_repo_from_fixture("mini-deepep", &d.join("deepep"));
            })
            .args(&["plan", "--pins", "pins.toml", "--variant", "h100", "--source", "{dir}/deepep", "--format", format])
            .may_change("cache")
            .exit(0)
            .hides("\r")
            .hides("\x1b")
            .hides("\x07")
            .timeout(std::time::Duration::from_secs(120))
    };
    vec![
        plan("human").says("NIXL_HOME=x\\r::warning::pwned\\u{1b}[2J"),
        plan("json").says("x\\r::warning::pwned\\u001b[2J"),
        probed_env("torch's version carries ESC, --format json")
            .file(
                "site/torch-2.11.0.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\x1b[2J\n",
            )
            .args(&["--format", "json"])
            .exit(1)
            .hides("\x1b"),
        probed_env("torch's version carries ESC and CR")
            .file(
                "site/torch-2.11.0.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\x1b[2J\x1b]0;t\x07\n",
            )
            .exit(1)
            .hides("\x1b")
            .hides("\x07"),
    ]
}

#[test]
fn values_from_files_reach_stdout_escaped() {
    run_all(injection_cases());
}

/// Class 8: the build root's lock planted by someone else (a link to a
/// victim file, a FIFO) is a missing environment, exit 3, saying what to do;
/// the victim is untouched and nothing is built.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn a_planted_build_root_lock_is_exit_3_with_what_to_do() {
    let (Some(tools), Some(cuda)) = (support::tools_venv(), support::cuda_home()) else {
        support::missing("the tools venv (nvcc and uv)")
    };
    let build = |name: &str| {
        let pins = PINS.replace(REV, mini_rev());
        Case::new(format!("build-wheel: the build root's lock is {name}"))
            .file("pins.toml", pins)
            .file("victim", "keep me")
            .setup(|d| {
                support::git_repo_from_fixture("mini-deepep", &d.join("deepep"));
                std::fs::create_dir_all(d.join("tmp")).unwrap();
            })
            .args(&["build-wheel", "--pins", "pins.toml", "--variant", "h100", "--source", "{dir}/deepep"])
            .args(&["--python", tools.join("bin/python").to_str().unwrap(), "--out", "{dir}/wheels"])
            .env("DEEPEP_FORGE_BUILD_ROOT", "{dir}/tmp/root")
            .env("CUDA_HOME", cuda.to_str().unwrap())
            .env("PATH", &format!("{}:/usr/local/bin:/usr/bin:/bin", tools.join("bin").display()))
            .may_change("cache")
            .absent("wheels")
            .exit(3)
            .says("the build root's lock")
            .says("remove it (as its owner, or root)")
            .says("DEEPEP_FORGE_BUILD_ROOT")
            .timeout(std::time::Duration::from_secs(300))
    };
    run_all(vec![
        build("a link to a victim")
            .setup(|d| std::os::unix::fs::symlink(d.join("victim"), d.join("tmp/root.lock")).unwrap()),
        build("a dangling link")
            .setup(|d| std::os::unix::fs::symlink(d.join("nowhere"), d.join("tmp/root.lock")).unwrap()),
        build("a FIFO").setup(|d| fifo(&d.join("tmp/root.lock"))),
    ]);
}

/// Class 9: a `--project` path that is not UTF-8 works with `--format json`
/// as with the human format (shown lossily, U+FFFD).
#[test]
fn a_non_utf8_project_path_is_refused_in_every_format() {
    let project = |format: &str| {
        Case::new(format!("lock check --format {format}: a non-UTF-8 --project"))
            .file("pins.toml", PINS)
            .setup(|d| {
                use std::os::unix::ffi::OsStrExt;
                let dir = d.join(std::ffi::OsStr::from_bytes(b"p\xffx"));
                std::fs::create_dir(&dir).unwrap();
                std::fs::write(dir.join("pyproject.toml"), include_str!("../fixtures/consumer-unified/pyproject.toml"))
                    .unwrap();
            })
            .args(&["lock", "check", "--format", format, "--project"])
            .arg_bytes(b"p\xffx")
            .exit(2)
            .says("p\\xffx")
            .says("not UTF-8")
            .hides("\u{fffd}")
    };
    run_all(vec![project("human"), project("json"), project("github")]);
}
