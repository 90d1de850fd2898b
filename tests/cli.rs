//! Whole-process tests of the shared CLI: exit codes and pins validation.
mod support;
use support::*;

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
