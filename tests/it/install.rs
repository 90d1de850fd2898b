//! The ways in: the CLI as a Python wheel (maturin, `bindings = "bin"`)
//! installed into a fresh venv and run through uvx; shell completions sourced
//! by a real bash; the man page read by a real groff.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// A tool from the tools venv (`.ci/setup-tools`), else from PATH.
fn tool(name: &str) -> Option<PathBuf> {
    if let Some(p) = tools_venv().map(|v| v.join("bin").join(name)).filter(|p| p.is_file()) {
        return Some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

fn run(cmd: &mut Command, what: &str) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(o.status.success(), "{what} failed ({}):\n{}\n{}", o.status, stdout(&o), stderr(&o));
    stdout(&o) + &stderr(&o)
}

/// Build the wheel the way `pip install .` / `maturin build` does. The dev
/// profile reuses what `cargo test` just compiled (seconds instead of a release
/// build with LTO; the published wheel is `maturin build --release`, same files).
fn build_wheel(maturin: &Path, out: &Path) -> PathBuf {
    run(
        Command::new(maturin)
            .args(["build", "--profile", "dev", "--locked", "--quiet", "-o"])
            .arg(out)
            .current_dir(root()),
        "maturin build",
    );
    let wheel =
        std::fs::read_dir(out).unwrap().flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "whl"));
    wheel.expect("maturin wrote a wheel")
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_wheel_installs_into_a_fresh_venv_and_runs_with_pip_and_uvx() {
    let maturin = require!(tool("maturin"), "maturin");
    let uv = require!(tool("uv"), "uv");
    let t = tempfile::tempdir().unwrap();
    let wheel = build_wheel(&maturin, &t.path().join("wheels"));
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("deepep_forge-") && name.contains("-py3-none-"), "{name}");

    // pip: a fresh venv, offline, nothing but the wheel
    let venv = t.path().join("venv");
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv), "python3 -m venv");
    run(
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check"])
            .arg(&wheel),
        "pip install the wheel",
    );
    let exe = venv.join("bin/deepep-forge");
    assert!(exe.is_file(), "the wheel installs bin/deepep-forge");
    let v = run(Command::new(&exe).arg("--version"), "deepep-forge --version");
    assert_eq!(v.trim(), concat!("deepep-forge ", env!("CARGO_PKG_VERSION")));
    let ok = run(Command::new(&exe).args(["pins", "check", "--pins", "pins.toml"]).current_dir(root()), "pins check");
    assert!(ok.starts_with("pins.toml: ok ("), "{ok}");

    // uvx --from <wheel>, offline, with an empty uv cache
    let out = run(
        Command::new(&uv)
            .args(["tool", "run", "--offline", "--from"])
            .arg(&wheel)
            .args(["deepep-forge", "--version"])
            .env("UV_CACHE_DIR", t.path().join("uv-cache"))
            .env("UV_TOOL_DIR", t.path().join("uv-tools"))
            .env_remove("UV_INDEX_URL"),
        "uvx --from the wheel",
    );
    assert!(out.contains(concat!("deepep-forge ", env!("CARGO_PKG_VERSION"))), "{out}");
}

#[test]
fn bash_completes_subcommands_and_flags() {
    let script = stdout(&bin().args(["completions", "bash"]).output().unwrap());
    assert!(script.contains("complete -F"), "a bash completion script: {}", &script[..script.len().min(200)]);
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("deepep-forge.bash");
    std::fs::write(&f, script).unwrap();
    let complete = |words: &str| {
        let probe = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); \
             _deepep__forge deepep-forge \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            f.display()
        );
        run(Command::new("bash").arg("-c").arg(probe), "bash completion")
    };
    let top = complete("deepep-forge l");
    assert!(top.lines().any(|l| l == "lock"), "`deepep-forge l<TAB>` offers lock: {top}");
    let flags = complete("deepep-forge lock check --fo");
    assert!(flags.lines().any(|l| l == "--format"), "`lock check --fo<TAB>` offers --format: {flags}");
    for shell in ["zsh", "fish"] {
        let o = bin().args(["completions", shell]).output().unwrap();
        assert!(o.status.success() && stdout(&o).contains("deepep-forge"), "{shell}: {}", stderr(&o));
    }
    let bad = bin().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "an unknown shell is a usage error");
}

#[test]
#[cfg_attr(
    not(feature = "needs-groff"),
    ignore = "needs system package groff (sudo .ci/setup-system): bash .ci/run runs it when present"
)]
fn the_man_pages_render_without_warnings_one_per_command() {
    let groff = require!(tool("groff"), "groff");
    let t = tempfile::tempdir().unwrap();
    let o = bin().args(["man", "--out-dir"]).arg(t.path()).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let mut names: Vec<String> =
        std::fs::read_dir(t.path()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    for want in
        ["deepep-forge.1", "deepep-forge-lock-check.1", "deepep-forge-build-wheel.1", "deepep-forge-completions.1"]
    {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    // every page a parent names under SUBCOMMANDS exists; groff warns about
    // nothing but lines it cannot justify (a long unbreakable example line)
    for n in &names {
        let text = std::fs::read_to_string(t.path().join(n)).unwrap();
        for line in text.lines().filter(|l| l.ends_with("(1)")) {
            let page = line.trim_end_matches("(1)").replace("\\-", "-") + ".1";
            assert!(names.contains(&page), "{n} names {page}, which was not written");
        }
        let r = Command::new(&groff)
            .args(["-man", "-Tutf8", "-ww", "-Wbreak", "-z"])
            .arg(t.path().join(n))
            .output()
            .unwrap();
        assert!(r.status.success() && r.stderr.is_empty(), "groff warnings for {n}: {}", stderr(&r));
    }
    let top = stdout(&bin().arg("man").output().unwrap());
    assert_eq!(top.as_bytes(), std::fs::read(t.path().join("deepep-forge.1")).unwrap(), "`man` prints the top page");
    assert!(top.contains("Exit codes"), "the page says what exit codes mean");
}
