//! Progress off a terminal: a build whose stderr is a pipe (a CI log) says
//! where its log is at the start and then prints a heartbeat with the elapsed
//! time and the last compiler line (every 30 s; 1 s here through
//! DEEPEP_FORGE_HEARTBEAT_SECS), instead of nothing until the end.

use crate::support::*;

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_build_off_a_terminal_prints_the_log_path_and_a_heartbeat() {
    let python = require!(tools_python(), "the tools venv");
    let t = tempfile::tempdir().unwrap();
    let o = bin()
        .args(["build-wheel", "--pins", "tests/fixtures/demo-pins.toml", "--source", "tests/fixtures/mini-deepep"])
        .args(["--variant", "demo", "--no-cache"])
        .arg("--python")
        .arg(&python)
        .arg("--cache-dir")
        .arg(t.path().join("cache"))
        .arg("--out")
        .arg(t.path().join("out"))
        .env("DEEPEP_FORGE_HEARTBEAT_SECS", "1")
        .env_remove("CUDA_HOME")
        .current_dir(root())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{}{err}", stdout(&o));
    let lines: Vec<&str> = err.lines().collect();
    let start = lines.iter().position(|l| l.starts_with("build demo: running, full log in ")).expect(&err);
    let log = lines[start].rsplit(' ').next().unwrap();
    assert!(log.ends_with(".log") && std::path::Path::new(log).is_file(), "the named log exists: {log}");
    let beats: Vec<&&str> =
        lines.iter().filter(|l| l.starts_with("build demo: ") && l.contains("s so far; ")).collect();
    assert!(!beats.is_empty(), "a heartbeat during a multi-second build:\n{err}");
    let compiled = beats.iter().find(|l| l.contains("last compiler line: ")).unwrap_or_else(|| panic!("{err}"));
    assert!(compiled.contains("nvcc") || compiled.contains("c++") || compiled.contains("gcc"), "{compiled}");
    assert!(!stdout(&o).contains("so far"), "progress goes to stderr, results to stdout");
}
