//! Whole-process tests of `pin set`: the NeMo-RL acceptance (PR #3436's
//! rewrite), per-arch pins, short revisions against a real git source,
//! invalid input changing nothing, and `--relock` with real uv on a small
//! project whose DeepEP is a local git repository.
use crate::support;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::*;

const X86: &str = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";
const ARM: &str = "a48493600c4886c1b297aaa78db0e1ebc2d8dd6c";
const UNIFIED: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";
/// DeepEP's URL (pins.toml names only remote repositories); git fetches it from
/// the local repo through `url.<local>.insteadOf` (see [`insteadof`]).
const DEEPEP_URL: &str = "https://github.com/deepseek-ai/DeepEP.git";

fn pins_text(repo: &str, x86: &str, arm: &str) -> String {
    let t = std::fs::read_to_string(root().join("pins.toml")).unwrap();
    t.replacen("https://github.com/deepseek-ai/DeepEP.git", repo, 1)
        .replacen(&format!("[pin.x86_64]\nrev = \"{UNIFIED}\""), &format!("[pin.x86_64]\nrev = \"{x86}\""), 1)
        .replacen(&format!("[pin.aarch64]\nrev = \"{UNIFIED}\""), &format!("[pin.aarch64]\nrev = \"{arm}\""), 1)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// A temp dir with pins.toml and a copy of `pyproject` (uv.lock too when given).
fn project(pyproject: &Path, pins: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("pyproject.toml"), read(pyproject)).unwrap();
    std::fs::write(d.path().join("pins.toml"), pins).unwrap();
    d
}

fn run(cwd: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = bin();
    c.args(args).current_dir(cwd);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nemo_rl_main_becomes_the_unified_pin_and_nothing_else_changes() {
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    // DeepEP's 17cfb817 is served by a stand-in commit (mini-deepep, version 1.2.1): the rewrite is
    // NeMo-RL's PR #3436 with that commit in place of 17cfb817.
    let tmp = tempfile::tempdir().unwrap();
    let (sha, env) = stand_in(tmp.path(), "mini-deepep");
    let short = &sha[..7];
    let as_stand_in = |t: String| t.replace(UNIFIED, &sha).replace("1.2.1+17cfb81", &format!("1.2.1+{short}"));
    let pins = as_stand_in(read(&root().join("pins.toml")));
    let d = project(&f.join("2026-08-22-main/pyproject.toml"), &pins);
    let o = run_env(d.path(), &["pin", "set", &sha], &env);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    // byte-identical to NeMo-RL's own result of PR #3436: DeepEP lines equal, no other line changed
    let got = read(&d.path().join("pyproject.toml"));
    let want = as_stand_in(read(&f.join("2026-08-17-unified-pin/pyproject.toml")));
    assert!(got == want, "differs from 2026-08-17-unified-pin:\n{}", diff(&want, &got));
    assert_eq!(read(&d.path().join("pins.toml")), pins, "pins.toml was already at that revision");
    assert!(
        stdout(&o).contains(&format!("label: 1.2.1+{short}")) && stdout(&o).contains("next: uv lock --project ."),
        "{}",
        stdout(&o)
    );
    // and the result passes the check
    let o = forge(d.path(), &["lock", "check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

fn diff(a: &str, b: &str) -> String {
    a.lines()
        .zip(b.lines())
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| format!("{}:\n- {x}\n+ {y}\n", i + 1))
        .collect()
}

#[test]
fn arch_pin_changes_only_that_architectures_requirements_and_its_pin() {
    let tmp = tempfile::tempdir().unwrap();
    let (rev, env) = stand_in(tmp.path(), "mini-deepep");
    let src = root().join("tests/fixtures/consumer-split/pyproject.toml");
    let d = project(&src, &pins_text(DEEPEP_URL, X86, ARM));
    let o = run_env(d.path(), &["pin", "set", &rev, "--arch", "aarch64"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("label-split"), "the split is announced: {}", stderr(&o));
    let (old, new) = (read(&src), read(&d.path().join("pyproject.toml")));
    assert_eq!(old.lines().count(), new.lines().count());
    for (o_line, n_line) in old.lines().zip(new.lines()) {
        if o_line.contains(ARM) {
            assert_eq!(n_line, o_line.replace(ARM, &rev), "the aarch64 requirement keeps its marker");
        } else if o_line.starts_with("version = \"v1.2.1") {
            assert_eq!(n_line, format!("version = \"1.2.1+{}\"", &rev[..7]));
        } else {
            assert_eq!(n_line, o_line);
        }
    }
    let pins = read(&d.path().join("pins.toml"));
    assert!(
        pins.contains(&format!("[pin.x86_64]\nrev = \"{X86}\""))
            && pins.contains(&format!("[pin.aarch64]\nrev = \"{rev}\"")),
        "{pins}"
    );
    assert!(pins.contains("# deepep-forge pins: the one place"), "comments stay");
}

/// Every file in `dir` with its bytes, to prove nothing changed.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    v.sort();
    v
}

#[test]
fn invalid_input_changes_no_file() {
    let unified = root().join("tests/fixtures/consumer-unified/pyproject.toml");
    let pins = pins_text("https://github.com/deepseek-ai/DeepEP.git", X86, ARM);
    let cases: Vec<(Option<String>, Vec<&str>, &str)> = vec![
        (None, vec!["17cfb81"], "there is no git source"),
        (None, vec!["not-a-sha"], "not a full 40-hex commit"),
        (None, vec![UNIFIED, "--arch", "aarch64"], "serves every architecture"),
        (Some(read(&unified).replacen("moe = [", "moe = [[", 1)), vec![UNIFIED], "pyproject.toml:"),
        (
            Some(read(&unified).replacen(
                &format!("@{UNIFIED}\",\n]\nserve"),
                &format!("@{UNIFIED} ; platform_machine == 'x86_64' and python_version >= '3.12'\",\n]\nserve"),
                1,
            )),
            vec![UNIFIED],
            "restricts DeepEP by more than the architecture",
        ),
        (None, vec![UNIFIED, "--source", "/does/not/exist"], "no such directory"),
        (None, vec![UNIFIED, "--arch", "riscv"], "expected `x86_64` or `aarch64`"),
        (
            Some("[project]\nname = \"x\"\ndependencies = [\"numpy\"]\n".into()),
            vec![UNIFIED],
            "does not reference DeepEP",
        ),
    ];
    for (text, args, msg) in cases {
        let d = project(&unified, &pins);
        if let Some(t) = text {
            std::fs::write(d.path().join("pyproject.toml"), t).unwrap();
        }
        let before = snapshot(d.path());
        let mut all = vec!["pin", "set"];
        all.extend(args.iter());
        let o = forge(d.path(), &all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(msg), "{args:?}: {}", stderr(&o));
        assert_eq!(snapshot(d.path()), before, "{args:?} changed a file");
    }
    // a malformed pins.toml changes no pyproject either
    let d = project(&unified, &pins.replacen("schema = 2", "schema = 3", 1));
    let before = snapshot(d.path());
    let o = forge(d.path(), &["pin", "set", UNIFIED]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("pins.toml:4:"), "{}", stderr(&o));
    assert_eq!(snapshot(d.path()), before);
}

/// A DeepEP stand-in with two commits; the second bumps setup.py's base version.
/// Returns (repo, first sha, second sha).
pub(crate) fn deepep_repo(dir: &Path) -> (PathBuf, String, String) {
    let repo = dir.join("DeepEP");
    let first = git_repo_from_fixture("mini-deepep", &repo);
    let setup = repo.join("setup.py");
    std::fs::write(&setup, read(&setup).replace("version=\"1.2.1\" + revision", "version=\"1.3.0\" + revision"))
        .unwrap();
    git(&repo, &["commit", "-qam", "bump"]);
    let second = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    (repo, first, second)
}

#[test]
fn short_revisions_resolve_only_against_a_git_source() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, second) = deepep_repo(tmp.path());
    let short = git(&repo, &["rev-parse", "--short", &second]).trim().to_string();
    let d = project(
        &root().join("tests/fixtures/consumer-unified/pyproject.toml"),
        &pins_text("https://github.com/deepseek-ai/DeepEP.git", UNIFIED, UNIFIED),
    );
    let o = forge(d.path(), &["pin", "set", &second[..10], "--source", repo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let py = read(&d.path().join("pyproject.toml"));
    assert_eq!(py.matches(&format!("DeepEP.git@{second}\"")).count(), 3, "{py}");
    // base version from setup.py at the new revision, short sha as git prints it
    assert!(py.contains(&format!("version = \"1.3.0+{short}\"")), "{py}");
    let pins = read(&d.path().join("pins.toml"));
    assert!(pins.contains("base_version = \"1.3.0\"") && pins.matches(&second).count() == 2, "{pins}");
    // a URL source is cloned
    let o = forge(d.path(), &["pin", "set", "main", "--source", &format!("file://{}", repo.display())]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // a revision the source lacks is refused
    let o = forge(d.path(), &["pin", "set", "0123456", "--source", repo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is not a commit in"), "{}", stderr(&o));
}

/// A third commit of `repo`: DeepEP `main`'s shape (EPv2, `__version__ = '2.1.0'`
/// in deep_ep/__init__.py, read by setup.py). Returns its sha.
fn commit_epv2(repo: &Path) -> String {
    for e in std::fs::read_dir(repo).unwrap().map(|e| e.unwrap().path()) {
        if e.file_name().is_some_and(|n| n != ".git") {
            if e.is_dir() {
                std::fs::remove_dir_all(&e).unwrap();
            } else {
                std::fs::remove_file(&e).unwrap();
            }
        }
    }
    copy_dir(&root().join("tests/fixtures/mini-deepep-v2"), repo);
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-qm", "epv2"]);
    git(repo, &["rev-parse", "HEAD"]).trim().to_string()
}

#[test]
fn without_source_the_label_base_is_read_at_the_revision_never_taken_from_the_old_label() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, second) = deepep_repo(tmp.path());
    let epv2 = commit_epv2(&repo);
    let env = insteadof(&repo);
    let unified = root().join("tests/fixtures/consumer-unified/pyproject.toml");
    assert!(read(&unified).contains("version = \"1.2.1+17cfb81\""), "the old label says 1.2.1");
    // (revision, the version its source says): setup.py's literal, and EPv2's deep_ep/__init__.py
    for (rev, base) in [(&second, "1.3.0"), (&epv2, "2.1.0")] {
        let d = project(&unified, &pins_text(DEEPEP_URL, UNIFIED, UNIFIED));
        let o = run_env(d.path(), &["pin", "set", rev], &env);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        let label = format!("{base}+{}", &rev[..7]);
        assert!(stdout(&o).contains(&format!("label: {label}")), "{}", stdout(&o));
        assert!(read(&d.path().join("pyproject.toml")).contains(&format!("version = \"{label}\"")));
        assert!(read(&d.path().join("pins.toml")).contains(&format!("base_version = \"{base}\"")));
        // --no-pins reads the repository pyproject.toml names
        let d = project(&unified, "");
        std::fs::remove_file(d.path().join("pins.toml")).unwrap();
        let o = run_env(d.path(), &["pin", "set", rev, "--no-pins"], &env);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        assert!(read(&d.path().join("pyproject.toml")).contains(&format!("version = \"{label}\"")), "--no-pins");
    }
}

#[test]
fn a_source_that_cannot_be_read_is_exit_3_and_no_label_is_written() {
    let unified = root().join("tests/fixtures/consumer-unified/pyproject.toml");
    // nothing listens on port 1: the repository cannot be reached (no guess from the old label)
    let dead = "https://127.0.0.1:1/deepseek-ai/DeepEP.git";
    let tmp = tempfile::tempdir().unwrap();
    let env = vec![("DEEPEP_FORGE_CACHE_DIR", tmp.path().join("cache").display().to_string())];
    let with_pins = project(&unified, &pins_text(dead, UNIFIED, UNIFIED));
    let no_pins = project(&unified, "");
    std::fs::write(no_pins.path().join("pyproject.toml"), read(&unified).replace(DEEPEP_URL, dead)).unwrap();
    std::fs::remove_file(no_pins.path().join("pins.toml")).unwrap();
    for (d, extra) in [(&with_pins, None), (&no_pins, Some("--no-pins"))] {
        let before = snapshot(d.path());
        let mut args = vec!["pin", "set", X86];
        args.extend(extra);
        let o = run_env(d.path(), &args, &env);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}{}", stdout(&o), stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("cannot be read") && err.contains(dead) && err.contains("--source"), "{err}");
        assert_eq!(snapshot(d.path()), before, "{args:?} changed a file");
    }
}

#[test]
fn under_no_pins_a_local_repository_named_in_pyproject_is_never_read() {
    // A pull request's pyproject.toml cannot make pin set read a local repository:
    // only --source (the user's command line) may name one.
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, second) = deepep_repo(tmp.path());
    let unified = root().join("tests/fixtures/consumer-unified/pyproject.toml");
    let local = format!("file://{}", repo.display());
    let d = project(&unified, "");
    std::fs::remove_file(d.path().join("pins.toml")).unwrap();
    std::fs::write(d.path().join("pyproject.toml"), read(&unified).replace(DEEPEP_URL, &local)).unwrap();
    let before = snapshot(d.path());
    let env = vec![("DEEPEP_FORGE_CACHE_DIR", tmp.path().join("cache").display().to_string())];
    let o = run_env(d.path(), &["pin", "set", &second, "--no-pins"], &env);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("is not usable") && stderr(&o).contains("--source"), "{}", stderr(&o));
    assert_eq!(snapshot(d.path()), before);
    assert!(!tmp.path().join("cache/git").exists(), "nothing was fetched");
    // named on the command line, the same repository is read
    let o = run_env(d.path(), &["pin", "set", &second, "--no-pins", "--source", repo.to_str().unwrap()], &env);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains(&format!("label: 1.3.0+{}", &second[..7])), "{}", stdout(&o));
}

#[test]
fn a_revision_that_does_not_say_its_version_gets_no_label() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, first, _) = deepep_repo(tmp.path());
    let setup = repo.join("setup.py");
    std::fs::write(&setup, read(&setup).replace("version=\"1.3.0\" + revision", "version=compute() + revision"))
        .unwrap();
    git(&repo, &["commit", "-qam", "version computed"]);
    let third = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let unified = root().join("tests/fixtures/consumer-unified/pyproject.toml");
    // with --source and without: the same refusal, nothing written
    for source in [None, Some(repo.to_str().unwrap())] {
        let d = project(&unified, &pins_text(DEEPEP_URL, UNIFIED, UNIFIED));
        let before = snapshot(d.path());
        let mut args = vec!["pin", "set", third.as_str()];
        if let Some(s) = source {
            args.extend(["--source", s]);
        }
        let o = run_env(d.path(), &args, &insteadof(&repo));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}{}", stdout(&o), stderr(&o));
        assert!(stderr(&o).contains("does not say its version"), "{}", stderr(&o));
        assert_eq!(snapshot(d.path()), before, "{args:?} changed a file");
    }
    // the revision before it says 1.2.1, and that is what it gets
    let d = project(&unified, &pins_text(DEEPEP_URL, UNIFIED, UNIFIED));
    let o = run_env(d.path(), &["pin", "set", &first], &insteadof(&repo));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("label: 1.2.1+{}", &first[..7])), "{}", stdout(&o));
}

/// Environment making git (under uv, and pin set's own fetch of the label's
/// source: the user's opt-in to local mirrors) fetch DEEPEP_URL from the local
/// `repo`; deepep-forge's cache (its git mirrors) beside `repo`.
pub(crate) fn insteadof(repo: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("GIT_CONFIG_COUNT", "1".into()),
        ("GIT_CONFIG_KEY_0", format!("url.file://{}.insteadOf", repo.display())),
        ("GIT_CONFIG_VALUE_0", DEEPEP_URL.into()),
        ("DEEPEP_FORGE_GIT_ALLOW_LOCAL", "1".into()),
        ("DEEPEP_FORGE_CACHE_DIR", repo.with_file_name("forge-cache").display().to_string()),
    ]
}

/// A DeepEP stand-in: `fixture` as a git repository in `dir` served at DEEPEP_URL;
/// (its commit, the environment that serves it).
fn stand_in(dir: &Path, fixture: &str) -> (String, Vec<(&'static str, String)>) {
    let repo = dir.join("DeepEP");
    let sha = git_repo_from_fixture(fixture, &repo);
    (sha, insteadof(&repo))
}

fn run_env(cwd: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut c = bin();
    c.args(args).current_dir(cwd).envs(env.iter().map(|(k, v)| (k, v)));
    c.output().unwrap()
}

/// A consumer project whose DeepEP is DEEPEP_URL (served by the local repo) at `rev`.
pub(crate) fn uv_project(dir: &Path, repo: &Path, rev: &str) -> PathBuf {
    let p = dir.join("consumer");
    std::fs::create_dir_all(&p).unwrap();
    let url = DEEPEP_URL;
    let short = git(repo, &["rev-parse", "--short", rev]).trim().to_string();
    std::fs::write(
        p.join("pyproject.toml"),
        format!(
            r#"[project]
name = "consumer"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = []

[project.optional-dependencies]
moe = [
  # DeepEP, pinned for every architecture
  "deep_ep @ git+{url}@{rev}",
]

[tool.uv]
override-dependencies = [
  "deep_ep @ git+{url}@{rev}",
]

[[tool.uv.dependency-metadata]]
name = "deep_ep"
version = "1.2.1+{short}"
requires-dist = []
"#
        ),
    )
    .unwrap();
    std::fs::write(dir.join("pins.toml"), pins_text(url, rev, rev)).unwrap();
    p
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn relock_runs_real_uv_then_the_lock_check() {
    let uv = require!(tools_venv().map(|v| v.join("bin/uv")).filter(|p| p.exists()), "uv");
    let python = require!(tools_python(), "python");
    let tmp = tempfile::tempdir().unwrap();
    let (repo, first, second) = deepep_repo(tmp.path());
    let proj = uv_project(tmp.path(), &repo, &first);
    let cache = tmp.path().join("uv-cache");
    let redirect = insteadof(&repo);
    let mut env: Vec<(&str, &Path)> = vec![
        ("DEEPEP_FORGE_UV", &uv),
        ("UV_PYTHON", &python),
        ("UV_CACHE_DIR", &cache),
        ("UV_OFFLINE", Path::new("1")),
    ];
    env.extend(redirect.iter().map(|(k, v)| (*k, Path::new(v.as_str()))));
    let o = run(tmp.path(), &["pin", "set", &first, "--project", "consumer", "--relock"], &env);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(read(&proj.join("uv.lock")).contains(&format!("#{first}")));

    let o = run(
        tmp.path(),
        &["pin", "set", &second[..8], "--source", repo.to_str().unwrap(), "--project", "consumer", "--relock"],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("uv lock: ok") && stdout(&o).contains("lock check: 0 error(s)"), "{}", stdout(&o));
    let lock = read(&proj.join("uv.lock"));
    let short = git(&repo, &["rev-parse", "--short", &second]).trim().to_string();
    assert!(lock.contains(&format!("?rev={second}#{second}")) && !lock.contains(&first), "{lock}");
    assert!(lock.contains(&format!("version = \"1.3.0+{short}\"")), "{lock}");
    let o = run(tmp.path(), &["lock", "check", "--project", "consumer"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));

    // uv failing (no Python satisfies the project) restores both files and exits 1
    let py = read(&proj.join("pyproject.toml")).replace("requires-python = \">=3.10\"", "requires-python = \">=99\"");
    std::fs::write(proj.join("pyproject.toml"), py).unwrap();
    let before = (read(&proj.join("pyproject.toml")), read(&tmp.path().join("pins.toml")), read(&proj.join("uv.lock")));
    let o = run(tmp.path(), &["pin", "set", &first, "--project", "consumer", "--relock"], &env);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("were restored"), "{}", stderr(&o));
    // the retry repeats the command: --project (and --pins, which is the default here)
    let retry = format!("run `deepep-forge pin set {first} --project consumer --relock` again");
    assert!(stderr(&o).contains(&retry), "the retry keeps --project and --pins: {}", stderr(&o));
    assert_eq!(
        (read(&proj.join("pyproject.toml")), read(&tmp.path().join("pins.toml")), read(&proj.join("uv.lock"))),
        before
    );
}

#[test]
fn relock_without_uv_exits_3_and_changes_nothing() {
    let d = project(
        &root().join("tests/fixtures/consumer-unified/pyproject.toml"),
        &pins_text("https://github.com/deepseek-ai/DeepEP.git", X86, X86),
    );
    let before = snapshot(d.path());
    let o = run(d.path(), &["pin", "set", UNIFIED, "--relock"], &[("DEEPEP_FORGE_UV", Path::new("/nonexistent/uv"))]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("hint:"), "{}", stderr(&o));
    assert_eq!(snapshot(d.path()), before);
    let o = bin()
        .args(["pin", "set", UNIFIED, "--relock"])
        .current_dir(d.path())
        .env_remove("DEEPEP_FORGE_UV")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("install it"), "{}", stderr(&o));
    assert_eq!(snapshot(d.path()), before);
}

/// A package index on 127.0.0.1 that holds every request until released
/// (then answers 404): real uv, made slow honestly by a slow network.
struct SlowIndex {
    url: String,
    seen: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    release: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SlowIndex {
    fn start() -> SlowIndex {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}/simple", server.server_addr().to_ip().unwrap());
        let seen = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(AtomicBool::new(false));
        let (s, r) = (Arc::clone(&seen), Arc::clone(&release));
        std::thread::spawn(move || {
            for req in server.incoming_requests() {
                s.fetch_add(1, Ordering::SeqCst);
                let r = Arc::clone(&r);
                std::thread::spawn(move || {
                    let t0 = std::time::Instant::now();
                    while !r.load(Ordering::SeqCst) && t0.elapsed() < std::time::Duration::from_secs(120) {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    let _ = req.respond(tiny_http::Response::empty(404));
                });
            }
        });
        SlowIndex { url, seen, release }
    }
}

impl Drop for SlowIndex {
    fn drop(&mut self) {
        self.release.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Processes whose working folder is `dir` (the uv a killed pin set left running).
fn running_in(dir: &Path) -> usize {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c == dir))
        .count()
}

/// Everything under `dir` (paths and bytes), but not uv's cache or the user state folder.
fn files_of(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_entry(|e| e.file_name() != "uv-cache" && e.file_name() != "state")
        .flatten()
        .filter(|e| !e.file_type().is_dir())
        .map(|e| (e.path().to_path_buf(), std::fs::read(e.path()).unwrap_or_default()))
        .collect();
    v.sort();
    v
}

/// A consumer locked at `first` by real uv, then given a dependency that only
/// the slow index serves; (tmp, repo, second sha, project, env for uv).
type SlowSetup = (tempfile::TempDir, PathBuf, String, PathBuf, Vec<(String, String)>);

fn slow_relock_setup(index: &SlowIndex) -> Option<SlowSetup> {
    let uv = tools_venv().map(|v| v.join("bin/uv")).filter(|p| p.exists())?;
    let python = tools_python()?;
    let tmp = tempfile::tempdir().unwrap();
    let (repo, first, second) = deepep_repo(tmp.path());
    let proj = uv_project(tmp.path(), &repo, &first);
    let mut env: Vec<(String, String)> = vec![
        ("DEEPEP_FORGE_UV".into(), uv.display().to_string()),
        ("UV_PYTHON".into(), python.display().to_string()),
        ("UV_CACHE_DIR".into(), tmp.path().join("uv-cache").display().to_string()),
        ("XDG_STATE_HOME".into(), tmp.path().join("state").display().to_string()),
    ];
    env.extend(insteadof(&repo).into_iter().map(|(k, v)| (k.to_string(), v)));
    let mut c = bin();
    c.args(["pin", "set", &first, "--project", "consumer", "--relock"]).current_dir(tmp.path()).env("UV_OFFLINE", "1");
    c.envs(env.iter().map(|(k, v)| (k, v)));
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let py = read(&proj.join("pyproject.toml")).replace("dependencies = []", "dependencies = [\"forge-slow-dep\"]");
    std::fs::write(proj.join("pyproject.toml"), py).unwrap();
    env.push(("UV_DEFAULT_INDEX".into(), index.url.clone()));
    env.push(("UV_HTTP_TIMEOUT".into(), "300".into()));
    Some((tmp, repo, second, proj, env))
}

/// Start `pin set <second> --relock` and return once uv is waiting on the index.
fn start_slow_pin_set(
    tmp: &Path,
    repo: &Path,
    second: &str,
    env: &[(String, String)],
    index: &SlowIndex,
) -> std::process::Child {
    let mut c = bin();
    c.args(["pin", "set", second, "--source", repo.to_str().unwrap(), "--project", "consumer", "--relock"])
        .current_dir(tmp)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c.envs(env.iter().map(|(k, v)| (k, v)));
    let mut child = c.spawn().unwrap();
    let t0 = std::time::Instant::now();
    while index.seen.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        if let Some(st) = child.try_wait().unwrap() {
            let o = child.wait_with_output().unwrap();
            panic!("pin set ended ({st}) before uv reached the index: {}{}", stdout(&o), stderr(&o));
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(120), "uv never reached the index");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn sigint_and_sigterm_during_relock_put_every_file_back() {
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let index = SlowIndex::start();
        let Some((tmp, repo, second, proj, env)) = slow_relock_setup(&index) else {
            support::missing("uv and the tools Python");
        };
        let before = files_of(tmp.path());
        let child = start_slow_pin_set(tmp.path(), &repo, &second, &env, &index);
        // Mid-change: pyproject.toml already names the new revision, the journal is there.
        assert!(read(&proj.join("pyproject.toml")).contains(&second), "{name}: not mid-change");
        assert_eq!(journals(tmp.path()).len(), 2, "{name}: a journal per folder (project, pins) in the state folder");
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(130), "{name}: {}{}", stdout(&o), stderr(&o));
        assert_eq!(running_in(&proj), 0, "{name}: uv outlived pin set");
        let after = files_of(tmp.path());
        assert!(after == before, "{name}: files differ after the signal:\n{:?}", diff_paths(&before, &after));
    }
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn sigkill_during_relock_leaves_whole_files_and_recover_undoes_it() {
    let index = SlowIndex::start();
    let Some((tmp, repo, second, proj, env)) = slow_relock_setup(&index) else {
        support::missing("uv and the tools Python");
    };
    let before = files_of(tmp.path());
    let old_py = read(&proj.join("pyproject.toml"));
    let mut child = start_slow_pin_set(tmp.path(), &repo, &second, &env, &index);
    let mid_py = read(&proj.join("pyproject.toml"));
    child.kill().unwrap(); // SIGKILL: no handler runs
    let _ = child.wait();
    // uv (its own process group) is left waiting; the index lets it fail now.
    index.release.store(true, std::sync::atomic::Ordering::SeqCst);
    let t0 = std::time::Instant::now();
    while running_in(&proj) > 0 {
        assert!(t0.elapsed() < std::time::Duration::from_secs(120), "uv kept running");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Each file whole: old or new, never a mix; the journal tells the next run.
    let py = read(&proj.join("pyproject.toml"));
    assert!(py == old_py || py == mid_py, "pyproject.toml is neither old nor new");
    assert_eq!(journals(tmp.path()).len(), 2, "the killed run's journal is in the user's state folder");
    let mut again = bin();
    again.args(["pin", "set", &second, "--project", "consumer"]).current_dir(tmp.path());
    again.envs(env.iter().map(|(k, v)| (k, v)));
    let o = again.output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("was killed before it finished")
            && stderr(&o).contains("deepep-forge pin recover --project consumer")
            && stderr(&o).contains("already changed"),
        "{}",
        stderr(&o)
    );
    let recover = || {
        bin()
            .args(["pin", "recover", "--project", "consumer"])
            .current_dir(tmp.path())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap()
    };
    // A pull request that now makes pyproject.toml a link out of the project gets nothing written through it.
    let now_py = std::fs::read(proj.join("pyproject.toml")).unwrap();
    std::fs::write(tmp.path().join("victim.toml"), &now_py).unwrap();
    std::fs::remove_file(proj.join("pyproject.toml")).unwrap();
    std::os::unix::fs::symlink("../victim.toml", proj.join("pyproject.toml")).unwrap();
    let o = recover();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("pin set writes only the project's own files"), "{}", stderr(&o));
    assert_eq!(std::fs::read(tmp.path().join("victim.toml")).unwrap(), now_py, "written through the link");
    assert_eq!(journals(tmp.path()).len(), 2, "a refused recover keeps the journal");
    std::fs::remove_file(proj.join("pyproject.toml")).unwrap();
    std::fs::rename(tmp.path().join("victim.toml"), proj.join("pyproject.toml")).unwrap();
    let o = recover();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(journals(tmp.path()).is_empty(), "recover removed the journal");
    assert!(
        stdout(&o).contains("restored") && stdout(&o).contains("to finish the change, run again"),
        "{}",
        stdout(&o)
    );
    let after = files_of(tmp.path());
    assert!(after == before, "files differ after recover:\n{:?}", diff_paths(&before, &after));
}

#[test]
fn a_symlinked_pyproject_has_its_target_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (rev, env) = stand_in(tmp.path(), "mini-deepep");
    let d = project(&root().join("tests/fixtures/consumer-unified/pyproject.toml"), &pins_text(DEEPEP_URL, X86, X86));
    let shared = d.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::rename(d.path().join("pyproject.toml"), shared.join("pyproject.toml")).unwrap();
    std::os::unix::fs::symlink("shared/pyproject.toml", d.path().join("pyproject.toml")).unwrap();
    let o = run_env(d.path(), &["pin", "set", &rev], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a symlink; its target"), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(d.path().join("pyproject.toml")).unwrap().file_type().is_symlink());
    let py = read(&shared.join("pyproject.toml"));
    assert!(py.contains(&rev) && !py.contains(UNIFIED), "{py}");
    let names: Vec<String> =
        std::fs::read_dir(d.path()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.starts_with(".deepep-forge")), "{names:?}");
}

/// A second `pin set` while the first is mid-change (real uv held by a slow
/// index) waits for the whole first change, then makes its own: the first's
/// rollback never undoes the second's work, and the second never reads the
/// first's half-written files.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (uv and its Python)")]
fn a_second_pin_set_waits_for_the_first_whole_change() {
    let index = SlowIndex::start();
    let Some((tmp, repo, second, proj, env)) = slow_relock_setup(&index) else {
        support::missing("the tools venv (uv and its Python)")
    };
    let first_py = read(&proj.join("pyproject.toml"));
    let a = start_slow_pin_set(tmp.path(), &repo, &second, &env, &index);
    assert!(read(&proj.join("pyproject.toml")).contains(&second), "the first run is not mid-change");
    let mut b = bin();
    b.args(["pin", "set", &second, "--source", repo.to_str().unwrap(), "--project", "consumer"])
        .current_dir(tmp.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    b.envs(env.iter().map(|(k, v)| (k, v)));
    let mut b = b.spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let err = b.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let waiting = rx.recv_timeout(std::time::Duration::from_secs(120)).unwrap_or_default();
    assert!(waiting.contains("waiting: another `pin set`"), "the second run did not wait: {waiting}");
    assert!(b.try_wait().unwrap().is_none(), "the second run ended while the first held the project");
    index.release.store(true, std::sync::atomic::Ordering::SeqCst); // the first run's uv fails now
    let a = a.wait_with_output().unwrap();
    assert_eq!(a.status.code(), Some(1), "{}", stderr(&a));
    assert!(stderr(&a).contains("were restored"), "{}", stderr(&a));
    let status = b.wait().unwrap();
    let b_err = reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{b_err}");
    // The second change stands, whole: pyproject.toml and pins.toml both at `second`.
    let py = read(&proj.join("pyproject.toml"));
    assert!(py != first_py && py.matches(&format!("@{second}\"")).count() == 2, "{py}");
    assert_eq!(read(&tmp.path().join("pins.toml")).matches(&second).count(), 2);
    assert!(journals(tmp.path()).is_empty());
}

/// Two `pin set`s started together, again and again (real processes): both
/// succeed, one after the other, so the files are one complete change, never
/// the original files restored by a loser's rollback.
#[test]
fn concurrent_pin_sets_leave_one_whole_change() {
    let src = tempfile::tempdir().unwrap();
    let (x86, env) = stand_in(src.path(), "mini-deepep");
    let repo = src.path().join("DeepEP");
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "second"]);
    let arm = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    for round in 0..6 {
        let d = project(
            &root().join("tests/fixtures/consumer-unified/pyproject.toml"),
            &pins_text("https://github.com/deepseek-ai/DeepEP.git", UNIFIED, UNIFIED),
        );
        let spawn = |rev: &str| {
            bin()
                .args(["pin", "set", rev])
                .current_dir(d.path())
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(&x86), spawn(&arm));
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        for o in [&a, &b] {
            assert_eq!(o.status.code(), Some(0), "round {round}: {}{}", stdout(o), stderr(o));
        }
        let py = read(&d.path().join("pyproject.toml"));
        let pins = read(&d.path().join("pins.toml"));
        let last = if py.contains(&x86) { x86.as_str() } else { arm.as_str() };
        assert!(
            !py.contains(UNIFIED) && pins.matches(last).count() == 2 && !pins.contains(UNIFIED),
            "round {round}:\n{py}\n{pins}"
        );
    }
}

/// A `--project` path that is not UTF-8 is refused (exit 2) naming its bytes exactly, nothing written.
#[test]
fn a_non_utf8_project_path_is_refused_and_named_exactly() {
    use std::os::unix::ffi::OsStrExt;
    let d = project(
        &root().join("tests/fixtures/consumer-unified/pyproject.toml"),
        &pins_text("https://github.com/deepseek-ai/DeepEP.git", UNIFIED, UNIFIED),
    );
    let src = tempfile::tempdir().unwrap();
    let (x86, env) = stand_in(src.path(), "mini-deepep");
    let name = std::ffi::OsStr::from_bytes(b"proj\xff");
    std::fs::create_dir(d.path().join(name)).unwrap();
    std::fs::rename(d.path().join("pyproject.toml"), d.path().join(name).join("pyproject.toml")).unwrap();
    let pin = || {
        bin()
            .args(["pin", "set", &x86, "--project"])
            .arg(name)
            .current_dir(d.path())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap()
    };
    // Refused before anything runs (a lossy name would be another folder's), nothing written.
    let before = read(&d.path().join(name).join("pyproject.toml"));
    let o = pin();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("proj\\xff") && stderr(&o).contains("not UTF-8"), "{}", stderr(&o));
    assert!(!stderr(&o).contains('\u{FFFD}') && !stdout(&o).contains('\u{FFFD}'), "{}", stderr(&o));
    assert_eq!(read(&d.path().join(name).join("pyproject.toml")), before);
}

/// The journals in the user state folder the slow tests give the binary (`<tmp>/state`).
fn journals(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp.join("state/deepep-forge/pin-set"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "journal"))
        .collect()
}

fn diff_paths(a: &[(PathBuf, Vec<u8>)], b: &[(PathBuf, Vec<u8>)]) -> Vec<String> {
    let mut out = Vec::new();
    for (p, v) in a {
        match b.iter().find(|(q, _)| q == p) {
            None => out.push(format!("gone {}", p.display())),
            Some((_, w)) if w != v => out.push(format!("changed {}", p.display())),
            _ => {}
        }
    }
    for (p, _) in b {
        if !a.iter().any(|(q, _)| q == p) {
            out.push(format!("appeared {}", p.display()));
        }
    }
    out
}

/// `pin set` to an EPv2 commit under `branch = "hybrid-ep"` removes the branch (which branch a
/// commit is on is not in its source) and says so; `lock check` then reads what the revision
/// is from the cache's mirror `pin set` fetched it into: EPv2, so an NCCL below its README's
/// minimum is an error (before: the branch name made `lock-nccl` silent).
#[test]
fn pin_set_to_an_epv2_commit_drops_the_branch_and_lock_check_reads_epv2_from_the_source() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, _) = deepep_repo(tmp.path());
    let epv2 = commit_epv2(&repo);
    let env = insteadof(&repo);
    let forks = root().join("tests/fixtures/consumer-forks");
    let pins = pins_text(DEEPEP_URL, UNIFIED, UNIFIED);
    assert!(pins.contains("branch = \"hybrid-ep\""));
    let d = project(&forks.join("pyproject.toml"), &pins);
    std::fs::copy(forks.join("uv.lock"), d.path().join("uv.lock")).unwrap();
    let o = run_env(d.path(), &["pin", "set", &epv2], &env);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let after = read(&d.path().join("pins.toml"));
    assert!(!after.contains("branch =") && after.matches(&epv2).count() == 2, "{after}");
    assert!(stderr(&o).contains("source.branch `hybrid-ep` removed"), "{}", stderr(&o));
    let o = run_env(d.path(), &["lock", "check", "--format", "json"], &env);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let nccl: Vec<&serde_json::Value> =
        v["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == "lock-nccl").collect();
    assert!(nccl.len() == 3 && nccl.iter().all(|f| f["severity"] == "error" && f["expected"] == ">=2.30.4"), "{v:#}");
}
