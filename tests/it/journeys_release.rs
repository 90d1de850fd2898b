//! The platform team's release, end to end (issue 46): one identity per wheel
//! whatever the interpreter's spelling, variants that never share an entry,
//! nothing left running after a command, `diff` naming every knob, printed
//! commands that run as printed. Real binary, git, uv, nvcc, sccache.
use std::process::Command;

use crate::build_support::{self, Lab};
use crate::support;

/// Every process of ours whose environment carries `marker` (a variable's
/// `NAME=value` entry unique to one test): what a command left running.
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
        if env.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            found.push(format!("{pid}: {}", String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    found
}

/// A folder unique to this test as the build's TMPDIR (a variable every build
/// passes on): the marker of what the command started.
fn marked(lab: &Lab, c: &mut Command) -> String {
    let tmp = lab.dir.path().join("marker-tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    c.env("TMPDIR", &tmp);
    format!("TMPDIR={}", tmp.display())
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
    assert_eq!(files(), at_first, "pinning back restores pyproject.toml, uv.lock, the Dockerfile and pins.toml");
    let o = forge(&["lock", "check", "--project", "consumer"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
}
