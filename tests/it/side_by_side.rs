//! Extensions built side by side (`builder::side_by_side`): the fixture built
//! with its two extensions at once and one after another (`--serial-extensions`,
//! the plan's own `pip wheel`) gives the same bytes and the same cache key; the
//! build log shows both extensions started before either was linked; the plan
//! says so, and `--serial-extensions` turns it off.
use crate::support;

use crate::build_support::*;
use crate::support::*;

const VARIANT: &str = VARIANT_R;

/// build-wheel of variant `r` (wheel cache off, no compiler cache): the JSON result.
fn build(lab: &Lab, extra: &[&str]) -> serde_json::Value {
    let pins = lab.pins_with(&lab.rev, VARIANT);
    let mut args = vec![
        "build-wheel",
        "--variant",
        "r",
        "--no-cache",
        "--no-compiler-cache",
        "--format",
        "json",
        "--jobs",
        "2",
        "--pins",
        pins.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = lab.forge(&args).env("CUDA_HOME", &lab.cuda_home).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let _ = std::fs::remove_dir_all(&lab.out);
    json(&o)["results"][0].clone()
}

/// The byte offsets in the build log where each extension starts and where the first link runs.
fn starts_and_first_link(log: &str) -> (Vec<usize>, usize) {
    let starts = ["building 'deep_ep_cpp' extension", "building 'hybrid_ep_cpp' extension"]
        .iter()
        .map(|s| log.find(s).unwrap_or_else(|| panic!("no `{s}` in the build log:\n{log}")))
        .collect();
    let link = log.find(" -shared ").unwrap_or_else(|| panic!("no link command in the build log:\n{log}"));
    (starts, link)
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn side_by_side_and_serial_builds_give_the_same_wheel() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, VARIANT);
    let plan = |extra: &[&str]| {
        let mut a = vec!["plan", "--variant", "r", "--format", "json", "--jobs", "4", "--pins", pins.to_str().unwrap()];
        a.extend_from_slice(extra);
        let o = lab.forge(&a).env("CUDA_HOME", &lab.cuda_home).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        json(&o)["plans"][0].clone()
    };
    let p = plan(&[]);
    assert_eq!(p["side_by_side"]["extensions"], serde_json::json!(["deep_ep_cpp", "hybrid_ep_cpp"]), "{p:#}");
    assert_eq!(p["side_by_side"]["jobs"], 4, "MAX_JOBS 4 shared between two extensions");
    let s = plan(&["--serial-extensions"]);
    assert!(s.get("side_by_side").is_none(), "{s:#}");
    assert_eq!(p["cache_key"], s["cache_key"], "not keyed");
    let o = lab.forge(&["plan", "--variant", "r", "--pins", pins.to_str().unwrap()]).output().unwrap();
    assert!(stdout(&o).contains("extensions  deep_ep_cpp, hybrid_ep_cpp at once"), "{}", stdout(&o));

    let side = build(&lab, &[]);
    let serial = build(&lab, &["--serial-extensions"]);
    assert_eq!(side["sha256"], serial["sha256"], "side by side {side:#}\nserial {serial:#}");
    assert_eq!(side["cache_key"], serial["cache_key"]);
    let read = |r: &serde_json::Value| std::fs::read_to_string(r["log"].as_str().expect("a log")).unwrap();
    // Side by side, the driver hands both extensions to setuptools' thread pool at once
    // (its line below). Which thread's first line reaches the log first is the
    // scheduler's: on a loaded machine the small deep_ep_cpp can compile and link before
    // hybrid_ep_cpp's thread prints, so the order of log lines is not asserted here.
    let side_log = read(&side);
    assert!(
        side_log.contains("deepep-forge: 2 extensions share 2 jobs"),
        "side by side: one jobserver for both:\n{side_log}"
    );
    let (starts, _) = starts_and_first_link(&side_log);
    assert_eq!(starts.len(), 2);
    assert!(!read(&serial).contains("extensions share"), "serial: no side-by-side driver");
    let (starts, link) = starts_and_first_link(&read(&serial));
    assert!(starts[1] > link, "serial: hybrid_ep_cpp starts after deep_ep_cpp is linked");
}

/// torch's own ninja path (tests/fixtures/torch-ninja, a stand-in with torch's
/// BuildExtension structure, compiling real C with `cc -g`): the side-by-side driver
/// builds both extensions at once, each from its own build file, with ninja in the
/// folder where the serial build runs it, so the debug information, and the wheel,
/// are the serial `pip wheel`'s byte for byte; the ninja runs share one jobserver.
#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools, with ninja): bash .ci/run runs it"
)]
fn torch_ninja_builds_side_by_side_give_the_serial_wheel() {
    let venv = require!(support::tools_venv(), "the tools venv");
    if !venv.join("bin/ninja").exists() {
        support::missing("the tools venv (ninja in it: rerun .ci/setup-tools)");
    }
    let tmp = tempfile::tempdir().unwrap();
    let stand_in = tmp.path().join("torch-ninja");
    support::copy_dir(&support::root().join("tests/fixtures/torch-ninja"), &stand_in);
    let project = stand_in.join("project");
    let path = format!("{}:/usr/bin:/bin", venv.join("bin").display());
    let build = |argv: &[&std::ffi::OsStr]| {
        let _ = std::fs::remove_dir_all(project.join("build"));
        let o = std::process::Command::new(venv.join("bin/python"))
            .args(argv)
            .current_dir(&project)
            .env_clear()
            .env("PATH", &path)
            .env("PYTHONPATH", &stand_in)
            .env("SOURCE_DATE_EPOCH", "946684800")
            .env("MAX_JOBS", "2")
            .env("HOME", tmp.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        format!("{}{}", stdout(&o), stderr(&o))
    };
    let (serial, side) = (tmp.path().join("serial"), tmp.path().join("side"));
    build(
        &["-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w"]
            .map(std::ffi::OsStr::new)
            .iter()
            .copied()
            .chain([serial.as_os_str(), std::ffi::OsStr::new(".")])
            .collect::<Vec<_>>(),
    );
    let driver = support::root().join("crates/forge-build/src/builder/side_by_side.py");
    let log = build(&[driver.as_os_str(), side.as_os_str(), "4".as_ref(), "2".as_ref()]);
    let temp = std::fs::read_dir(project.join("build"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("temp."))
        .expect("a build_temp folder")
        .path();
    for ext in ["one_cpp", "two_cpp"] {
        assert!(temp.join(format!("build-{ext}.ninja")).is_file(), "{ext}'s own build file in {}", temp.display());
        assert!(temp.join(".ninja").join(ext).join(".ninja_log").is_file(), "{ext}'s own ninja log");
    }
    assert!(!temp.join("build.ninja").exists(), "no shared build.ninja");
    assert!(log.contains("2 extensions share 4 jobs through a jobserver"), "{log}");
    assert!(log.contains("Jobserver mode detected"), "ninja joined the jobserver: {log}");
    let one = |d: &std::path::Path| {
        let w: Vec<_> = std::fs::read_dir(d).unwrap().flatten().map(|e| e.path()).collect();
        assert_eq!(w.len(), 1, "{w:?}");
        sha256sum(&w[0])
    };
    assert_eq!(one(&serial), one(&side), "the side-by-side wheel differs from pip's serial one");
}

/// The side-by-side driver's jobserver FIFO lives in a folder of the system's temp
/// folder: it is gone after a build that succeeds and after one that deepep-forge
/// interrupts (SIGTERM to the build's process group, as `process` does on Ctrl-C or
/// a timeout), here with every compile still running (a `cc` that sleeps).
#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools, with ninja): bash .ci/run runs it"
)]
fn the_jobserver_folder_is_removed_after_a_build_and_after_an_interrupted_one() {
    use std::os::unix::process::CommandExt;
    let venv = require!(support::tools_venv(), "the tools venv");
    let tmp = tempfile::tempdir().unwrap();
    let stand_in = tmp.path().join("torch-ninja");
    support::copy_dir(&support::root().join("tests/fixtures/torch-ninja"), &stand_in);
    let (temp_root, slow_bin) = (tmp.path().join("tmp"), tmp.path().join("slow-bin"));
    std::fs::create_dir_all(&temp_root).unwrap();
    std::fs::create_dir_all(&slow_bin).unwrap();
    std::fs::write(slow_bin.join("cc"), "#!/bin/sh\nexec sleep 120\n").unwrap();
    std::fs::set_permissions(slow_bin.join("cc"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let driver = support::root().join("crates/forge-build/src/builder/side_by_side.py");
    let start = |path: String| {
        let _ = std::fs::remove_dir_all(stand_in.join("project/build"));
        std::process::Command::new(venv.join("bin/python"))
            .arg(&driver)
            .arg(tmp.path().join("dist"))
            .args(["4", "2"])
            .current_dir(stand_in.join("project"))
            .env_clear()
            .env("PATH", path)
            .env("PYTHONPATH", &stand_in)
            .env("TMPDIR", &temp_root)
            .env("HOME", tmp.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let jobserver_folders = || {
        std::fs::read_dir(&temp_root)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("deepep-forge-jobserver-"))
            .count()
    };
    let venv_path = format!("{}:/usr/bin:/bin", venv.join("bin").display());
    let status = start(venv_path.clone()).wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(jobserver_folders(), 0, "a successful build left its jobserver folder");

    let mut child = start(format!("{}:{venv_path}", slow_bin.display()));
    let t = std::time::Instant::now();
    while jobserver_folders() == 0 {
        assert!(t.elapsed().as_secs() < 60, "the build made no jobserver folder in 60 s");
        assert!(child.try_wait().unwrap().is_none(), "the build ended before its compiles");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500)); // the compiles start
                                                               // SAFETY: signals the process group this test started.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed().as_secs() > 30 {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            panic!("the interrupted build did not end within 30 s of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(!status.success(), "{status:?}");
    assert_eq!(jobserver_folders(), 0, "the interrupted build left its jobserver folder");
}
