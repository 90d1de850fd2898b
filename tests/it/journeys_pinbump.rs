//! Journey J2 (issue 42), the pin bump: a consumer in NeMo-RL's shape
//! (consumer-split: extras, conflicts, overrides, a third party's own pin, one
//! static label) with per-architecture pins in pins.toml; every DeepEP
//! revision served by a local stand-in repository at DeepEP's URL, real uv
//! offline against a find-links folder (`lock::FixLab`: the consumer's own
//! `[tool.uv]` says so, no `UV_*` variable is set). Each step's output is
//! checked, and every fix `lock check` prints is executed verbatim with `sh -c`
//! in the user's folder (`deepep-forge` and `uv` on PATH): the split, the bump
//! with `pin set --relock`, then pyproject.toml, uv.lock, a Dockerfile and
//! pins.toml each broken by hand and repaired by the printed fix.
//! Also class 7's pins repository (pins.toml without pyproject.toml).

use std::path::Path;

use crate::lock::{FixLab, ARM, FIXTURE_REVS, X86};
use crate::support::*;

/// Run `fix` exactly as printed (`sh -c`) in `dir`, with the lab's environment; it must succeed.
fn run_printed(lab: &FixLab, dir: &Path, fix: &str) -> String {
    let (code, out) = run_printed_code(lab, dir, fix);
    assert_eq!(code, 0, "`{fix}` failed as printed: {out}");
    out
}

/// `fix` run as printed: its exit code and output. `deepep-forge`, `uv` and
/// `python3` on PATH; no `UV_*` variable: uv's settings are the consumer's own.
fn run_printed_code(lab: &FixLab, dir: &Path, fix: &str) -> (i32, String) {
    let mut sh = lab.command("sh");
    sh.current_dir(dir);
    sh_printed(sh, fix)
}

/// The error causes of a `lock check --format json` verdict.
fn errors(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["causes"].as_array().unwrap().iter().filter(|c| c["severity"] != "note").cloned().collect()
}

/// Run every error cause's fix as printed, then `lock check` must pass.
fn fix_until_clean(lab: &FixLab, dir: &Path, extra: &[&str], step: &str) -> Vec<String> {
    let (_, v) = lab.check(dir, extra);
    let mut ran = Vec::new();
    for c in errors(&v) {
        let fix = c["fix"].as_str().unwrap_or_else(|| panic!("{step}: cause {} has no fix: {v:#}", c["id"]));
        // one cause, one fix: each of its findings prints the same
        for f in c["findings"].as_array().unwrap() {
            assert_eq!(f["fix"].as_str(), Some(fix), "{step}: a finding's fix differs from its cause's: {c:#}");
        }
        // `pin set --relock` ends with its own lock check: exit 1 there is another cause still
        // open (a Dockerfile's, fixed next), never its own change failing.
        let (code, out) = run_printed_code(lab, dir, fix);
        let relocked = fix.ends_with("--relock") && out.contains("uv lock: ok");
        assert!(code == 0 || (code == 1 && relocked), "{step}: `{fix}` failed as printed: {out}");
        ran.push(fix.to_string());
    }
    let (code, v) = lab.check(dir, extra);
    assert!(code == 0 && errors(&v).is_empty(), "{step}: after {ran:?}: {v:#}");
    ran
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn j2_the_pin_bump_every_printed_fix_runs_as_printed() {
    let lab = require!(FixLab::new(), "uv in the tools venv");
    // uv is steered by the consumer's [tool.uv] alone: no UV_* variable reaches a fix.
    assert!(lab.env.iter().all(|(k, _)| !k.starts_with("UV_")), "{:?}", lab.env);
    let root_pins = std::fs::read_to_string(root().join("pins.toml")).unwrap();
    let unified = FIXTURE_REVS[0];
    let split_pins = root_pins.replacen(unified, X86, 1).replacen(unified, ARM, 1);
    assert!(split_pins.contains(X86) && split_pins.contains(ARM));
    let same = |_: &str, t: String| t;
    let dir = lab.scenario("j2", "consumer-split", &same, Some(split_pins));
    let (x86, arm) = (lab.rev(X86).to_string(), lab.rev(ARM).to_string());

    // 1. Split pins under one static label: one cause, one fix covering both architectures.
    let (code, v) = lab.check(&dir, &[]);
    assert_eq!(code, 1, "{v:#}");
    let split = errors(&v).into_iter().find(|c| c["id"] == "label-split").unwrap_or_else(|| panic!("{v:#}"));
    let fix = split["fix"].as_str().unwrap();
    assert!(fix.starts_with(&format!("deepep-forge pin set {x86}")) && !fix.contains("--arch"), "{fix}");
    assert!(!split["summary"].as_str().unwrap().is_empty());
    let ran = fix_until_clean(&lab, &dir, &[], "split");
    assert!(ran.iter().any(|f| f.ends_with("--relock")), "{ran:?}");
    let pins = std::fs::read_to_string(dir.join("pins.toml")).unwrap();
    assert!(!pins.contains(&arm), "the fix pinned one revision for both: {pins}");

    // 2. The bump: pin set --relock, then lock check passes.
    let bump = lab.rev(FIXTURE_REVS[2]).to_string();
    let out = run_printed(&lab, &dir, &format!("deepep-forge pin set {bump} --project consumer --relock"));
    assert!(out.contains("uv lock: ok") && out.contains("lock check: 0 error(s)"), "{out}");
    assert!(std::fs::read_to_string(dir.join("consumer/uv.lock")).unwrap().contains(&format!("#{bump}")));

    // 3. pyproject.toml broken by hand (one extra's requirement moved to another revision).
    let py = dir.join("consumer/pyproject.toml");
    let text = std::fs::read_to_string(&py).unwrap();
    let at = text.find("serve = [").unwrap();
    let (head, tail) = text.split_at(at);
    std::fs::write(&py, format!("{head}{}", tail.replacen(&bump, &x86, 1))).unwrap();
    let (code, v) = lab.check(&dir, &[]);
    assert_eq!(code, 1, "{v:#}");
    fix_until_clean(&lab, &dir, &[], "pyproject.toml");

    // 4. uv.lock broken by hand: the deep-ep package's commit fragment edited.
    let lock = dir.join("consumer/uv.lock");
    let text = std::fs::read_to_string(&lock).unwrap();
    let needle = format!("?rev={bump}#{bump}\" }}");
    let line =
        text.lines().position(|l| l.starts_with("source = ") && l.contains(&needle)).expect("the package source") + 1;
    let edited: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == line { l.replace(&format!("#{bump}"), &format!("#{x86}")) } else { l.to_string() })
        .collect();
    std::fs::write(&lock, edited.join("\n") + "\n").unwrap();
    let (code, v) = lab.check(&dir, &[]);
    assert_eq!(code, 1, "{v:#}");
    let frag = errors(&v)
        .into_iter()
        .find(|c| c["id"].as_str().unwrap().starts_with("fragment-mismatch"))
        .unwrap_or_else(|| panic!("{v:#}"));
    assert!(frag["summary"].as_str().unwrap().contains("uv.lock was changed after uv wrote it"), "the cause: {frag:#}");
    assert!(!frag["summary"].as_str().unwrap().contains("after pyproject.toml changed"), "{frag:#}");
    assert_eq!(frag["findings"][0]["line"], line, "the edited line: {frag:#}");
    fix_until_clean(&lab, &dir, &[], "uv.lock");

    // 5. A Dockerfile that builds DeepEP at a short sha, then at another revision.
    std::fs::write(
        dir.join("consumer/Dockerfile"),
        format!("FROM ubuntu:24.04\nARG DEEPEP_REF={}\nRUN echo $DEEPEP_REF\n", &bump[..7]),
    )
    .unwrap();
    let df: &[&str] = &["--dockerfile", "consumer/Dockerfile"];
    let (code, v) = lab.check(&dir, df);
    assert_eq!(code, 1, "{v:#}");
    let ran = fix_until_clean(&lab, &dir, df, "Dockerfile");
    assert!(ran.iter().any(|f| f.starts_with("sed -i '2s/")), "{ran:?}");
    assert!(std::fs::read_to_string(dir.join("consumer/Dockerfile")).unwrap().contains(&format!("DEEPEP_REF={bump}")));

    // 6. pins.toml moved by hand (the platform team's bump): the consumer adopts it.
    let next = lab.rev(FIXTURE_REVS[1]).to_string();
    let pins = std::fs::read_to_string(dir.join("pins.toml")).unwrap().replace(&bump, &next);
    std::fs::write(dir.join("pins.toml"), pins).unwrap();
    let (code, v) = lab.check(&dir, df);
    assert_eq!(code, 1, "{v:#}");
    let ran = fix_until_clean(&lab, &dir, df, "pins.toml");
    assert!(ran.iter().any(|f| f.starts_with(&format!("deepep-forge pin set {next}"))), "{ran:?}");
}

#[test]
fn a_printed_fix_carries_the_users_source_and_cache_dir() {
    // --no-pins with a short revision: the fix resolves it through the user's own --source.
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("consumer");
    std::fs::create_dir(&p).unwrap();
    let py = std::fs::read_to_string(root().join("tests/fixtures/consumer-unified/pyproject.toml")).unwrap();
    let unified = FIXTURE_REVS[0];
    std::fs::write(p.join("pyproject.toml"), py.replace(&format!("DeepEP.git@{unified}"), "DeepEP.git@17cfb81"))
        .unwrap();
    let src = d.path().join("my DeepEP");
    std::fs::create_dir(&src).unwrap();
    let cache = d.path().join("cache");
    let o = bin()
        .args(["lock", "check", "--project", "consumer", "--no-pins", "--format", "json", "--source"])
        .arg(&src)
        .arg("--cache-dir")
        .arg(&cache)
        .current_dir(d.path())
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    let fixes: Vec<&str> = v["causes"].as_array().unwrap().iter().filter_map(|c| c["fix"].as_str()).collect();
    let pin_set: Vec<&&str> = fixes.iter().filter(|f| f.starts_with("deepep-forge pin set")).collect();
    assert!(!pin_set.is_empty(), "{v:#}");
    for f in pin_set {
        assert!(f.contains(&format!("--source '{}'", src.display())), "the user's --source, quoted: {f}");
        assert!(f.contains(&format!("--cache-dir {}", cache.display())), "the user's --cache-dir: {f}");
    }
}

#[test]
fn pin_set_moves_a_pins_repository_without_pyproject() {
    let d = tempfile::tempdir().unwrap();
    let pins = std::fs::read_to_string(root().join("tests/fixtures/demo-pins.toml")).unwrap();
    std::fs::write(d.path().join("pins.toml"), &pins).unwrap();
    std::fs::write(d.path().join("Dockerfile"), "FROM ubuntu:24.04\n").unwrap();
    let repo = d.path().join("DeepEP");
    let rev = git_repo_from_fixture("mini-deepep", &repo);
    let o = bin()
        .args(["pin", "set", &rev, "--source"])
        .arg(&repo)
        .env("DEEPEP_FORGE_CACHE_DIR", d.path().join("cache"))
        .current_dir(d.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("pins.toml: updated") && stdout(&o).contains("next: deepep-forge plan"),
        "{}",
        stdout(&o)
    );
    let after = std::fs::read_to_string(d.path().join("pins.toml")).unwrap();
    assert_eq!(after.matches(&format!("rev = \"{rev}\"")).count(), 2, "both architectures moved: {after}");
    assert!(!d.path().join("pyproject.toml").exists(), "no pyproject.toml written");
    assert_eq!(std::fs::read_to_string(d.path().join("Dockerfile")).unwrap(), "FROM ubuntu:24.04\n");
    // --relock has nothing to lock: exit 2, nothing changed
    let o = bin()
        .args(["pin", "set", &rev, "--relock", "--source"])
        .arg(&repo)
        .env("DEEPEP_FORGE_CACHE_DIR", d.path().join("cache"))
        .current_dir(d.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--relock needs a pyproject.toml"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(d.path().join("pins.toml")).unwrap(), after);
}
