//! Whole-process tests of the shared CLI: exit codes and pins validation.
use crate::support;
use crate::support::*;

#[test]
fn help_teaches_and_exits_zero() {
    let o = bin().arg("--help").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    for cmd in ["lock", "pin", "plan", "build-wheel", "probe", "cache", "docker", "Exit codes"] {
        assert!(s.contains(cmd), "--help lacks {cmd}: {s}");
    }
}

#[test]
fn unknown_flag_is_usage_error() {
    let o = bin().args(["pins", "check", "--frobnicate"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn shipped_pins_check_ok_and_broken_pins_exit_2_with_location() {
    let o = forge(&root(), &["pins", "check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dir = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(root().join("pins.toml")).unwrap().replacen("arch = \"x86_64\"", "arch = \"x86\"", 1);
    std::fs::write(dir.path().join("pins.toml"), &text).unwrap();
    let o = forge(dir.path(), &["pins", "check"]);
    assert_eq!(o.status.code(), Some(2));
    let line = text.lines().position(|l| l == "arch = \"x86\"").unwrap() + 1;
    assert!(stderr(&o).contains(&format!("pins.toml:{line}:")), "{}", stderr(&o));
}

#[test]
fn missing_pins_is_usage_error_with_hint() {
    let dir = tempfile::tempdir().unwrap();
    let o = forge(dir.path(), &["pins", "show"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("pins file not found") && stderr(&o).contains("hint:"), "{}", stderr(&o));
}

/// `--quiet`/`-q` is global: every command, at any position, accepts it.
#[test]
fn quiet_is_accepted_by_every_command() {
    use clap::CommandFactory;
    let mut cmd = deepep_forge::cli::Cli::command();
    cmd.build();
    fn leaves(c: &clap::Command, path: String, out: &mut Vec<(String, bool)>) {
        let subs: Vec<_> = c.get_subcommands().filter(|s| s.get_name() != "help").collect();
        if subs.is_empty() {
            out.push((path.clone(), c.get_arguments().any(|a| a.get_id() == "quiet" && a.get_short() == Some('q'))));
        }
        for s in subs {
            leaves(s, format!("{path} {}", s.get_name()), out);
        }
    }
    let mut all = Vec::new();
    leaves(&cmd, "deepep-forge".into(), &mut all);
    assert!(all.len() > 15, "{all:?}");
    let without: Vec<_> = all.iter().filter(|(_, q)| !q).collect();
    assert!(without.is_empty(), "commands without --quiet: {without:?}");
    for args in [&["-q", "pins", "check"][..], &["pins", "check", "--quiet"]] {
        let o = forge(&root(), args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).starts_with("pins.toml: ok"), "{args:?}: the result stays: {}", stdout(&o));
    }
}

/// Results on stdout, notes on stderr; `--quiet` hides the notes, never the
/// result, a warning or an error.
#[test]
fn results_go_to_stdout_notes_to_stderr_and_quiet_hides_only_notes() {
    let dir = tempfile::tempdir().unwrap();
    let o = bin().args(["cache", "keygen", "--name", "ci", "--out"]).arg(dir.path().join("a.key")).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 1, "only the public key on stdout: {}", stdout(&o));
    assert!(stdout(&o).starts_with("ci:"), "{}", stdout(&o));
    assert!(stderr(&o).contains("wrote the secret key to"), "the note is on stderr: {}", stderr(&o));

    let o =
        bin().args(["-q", "cache", "keygen", "--name", "ci", "--out"]).arg(dir.path().join("b.key")).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "--quiet: no notes");
    assert!(stdout(&o).starts_with("ci:") && stdout(&o).lines().count() == 1, "{}", stdout(&o));

    let o = bin().args(["pins", "show", "-q"]).current_dir(dir.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("error: ") && stderr(&o).contains("hint: "), "errors survive --quiet: {}", stderr(&o));
}

/// The printer decides colour: plain off a terminal, `CLICOLOR_FORCE` forces
/// it, `NO_COLOR` wins.
#[test]
fn colour_is_decided_once_and_no_color_wins() {
    let dir = tempfile::tempdir().unwrap();
    let run = |env: &[(&str, &str)]| {
        let mut c = bin();
        c.args(["pins", "show"]).current_dir(dir.path()).env_remove("NO_COLOR").env_remove("CLICOLOR_FORCE");
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(2));
        stderr(&o)
    };
    assert!(run(&[]).starts_with("error: pins file not found"), "{}", run(&[]));
    let forced = run(&[("CLICOLOR_FORCE", "1")]);
    assert!(forced.starts_with("\x1b[1;31merror\x1b[0m: pins file not found"), "{forced:?}");
    assert!(forced.contains("\x1b[1;36mhint\x1b[0m: "), "{forced:?}");
    assert!(run(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]).starts_with("error: "));
}

/// A result that cannot be written (stdout on a full device) is a failed job
/// (exit 1, said on stderr), not a panic and not a silent exit 0.
#[test]
fn a_result_that_cannot_be_written_fails_the_command() {
    // Every Linux has /dev/full: without it the test fails (it never passes unrun).
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("needs /dev/full (Linux)");
    let o = bin().args(["pins", "show"]).current_dir(root()).stdout(full).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("error: writing to stdout: No space left on device"), "{}", stderr(&o));
}

/// The build flags are declared once (`builder::RunArgs`): `--jobs 0` is
/// refused alike by `plan`, `build-wheel` and `verify` (it used to parse in
/// `verify`), before any file is read.
#[test]
fn build_flags_mean_the_same_in_plan_build_wheel_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["plan", "--all"][..], &["build-wheel", "--all"], &["verify", "x.whl"]] {
        for bad in [&["--jobs", "0"][..], &["--jobs", "4097"], &["--compiler-cache", "--no-compiler-cache"]] {
            let o = bin().args(args).args(bad).current_dir(dir.path()).output().unwrap();
            assert_eq!(o.status.code(), Some(2), "{args:?} {bad:?}: {}", stderr(&o));
            assert!(stderr(&o).contains(bad[0]), "{args:?} {bad:?}: {}", stderr(&o));
        }
    }
}

/// `--project`, `--pins` and `--no-pins` are declared once (`lock::ProjectArgs`)
/// and mean the same in `lock check`, `pin set` and `pin recover`.
#[test]
fn project_flags_mean_the_same_in_lock_check_pin_set_and_pin_recover() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["lock", "check"][..], &["pin", "set", "0123456"], &["pin", "recover"]] {
        let o = bin().args(args).args(["--pins", "p.toml", "--no-pins"]).current_dir(dir.path()).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("cannot be used with"), "{args:?}: {}", stderr(&o));
        let o = bin().args(args).arg("--help").output().unwrap();
        for flag in ["--project <DIR>", "--pins <FILE>", "--no-pins"] {
            assert!(stdout(&o).contains(flag), "{args:?} --help lacks {flag}");
        }
    }
}

/// The user config ($XDG_CONFIG_HOME/deepep-forge/config.toml) is read through
/// the one bounded reader: a FIFO there is refused (exit 2, named), never
/// waited on, both where trusted keys are read and where the compiler cache is.
#[test]
fn a_user_config_that_is_a_fifo_is_refused_not_waited_on() {
    use support::hostile::{run_all, Case};
    let fifo = |d: &std::path::Path| {
        std::fs::create_dir_all(d.join("cfg/deepep-forge")).unwrap();
        let c = std::ffi::CString::new(d.join("cfg/deepep-forge/config.toml").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    };
    run_all(vec![
        Case::new("trusted keys: config a FIFO")
            .setup(fifo)
            .env("XDG_CONFIG_HOME", "{dir}/cfg")
            .args(&["build-wheel", "--all", "--cache-url", "https://cache.invalid/"])
            .says("config file")
            .says("not a regular file"),
        Case::new("compiler cache: config a FIFO")
            .setup(fifo)
            .env("XDG_CONFIG_HOME", "{dir}/cfg")
            .env("DEEPEP_FORGE_COMPILER_CACHE", "")
            .args(&[
                "plan",
                "--pins",
                &root().join("tests/fixtures/demo-pins.toml").display().to_string(),
                "--source",
                &root().join("tests/fixtures/mini-deepep").display().to_string(),
                "--variant",
                "demo",
            ])
            .may_change("cache")
            .says("config file")
            .says("not a regular file"),
    ]);
}
