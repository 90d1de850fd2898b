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
