//! Issue 42's front door: the README installs the binary before its first use,
//! and a build names the pip/uv settings it ignores once, by name, never their values.

use crate::build_support::*;
use crate::support::*;

#[test]
fn the_readme_installs_deepep_forge_before_it_first_runs_it() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let install = text.lines().position(|l| l.trim_start().starts_with("cargo install")).expect("an install line");
    let first_use = text
        .lines()
        .position(|l| {
            let l = l.trim_start().trim_start_matches("$ ");
            l.starts_with("deepep-forge ") || l.contains(" deepep-forge build-wheel")
        })
        .expect("a deepep-forge command");
    assert!(
        install < first_use,
        "README.md line {}: deepep-forge is run before it is installed (line {})",
        first_use + 1,
        install + 1
    );
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_plan_names_the_ignored_pip_settings_once_without_their_values() {
    let lab = Lab::new();
    let pins = lab.pins();
    let o = lab
        .forge(&["plan", "--variant", "sn", "--pins", pins.to_str().unwrap()])
        .env("PIP_CERT", "certs/secret-ca.pem")
        .env("PIP_INDEX_URL", "https://me:hunter2@pypi.example.org/simple")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(!all.contains("secret-ca") && !all.contains("hunter2"), "a value was echoed: {all}");
    assert!(!all.contains("dropped     PIP_"), "one line per pip setting: {all}");
    let lines: Vec<&str> = all.lines().filter(|l| l.contains("PIP_CERT")).collect();
    assert_eq!(lines.len(), 1, "{all}");
    assert!(lines[0].contains("PIP_INDEX_URL") && lines[0].contains("reads no tool configuration"), "{all}");
}
