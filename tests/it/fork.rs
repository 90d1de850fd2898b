//! Forks (`[source] upstream`, `upstream_branch`): pins.toml's checks, the
//! plan's merge base and ahead count (the upstream branch fetched into the
//! fork's mirror through git's `url.<local>.insteadOf`, as pins.toml names
//! only remote repositories), `lock check`'s `fork-pin` note, and a pins file
//! without `upstream` planning exactly as before.
use crate::build_support;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{git, git_repo_from_fixture, stderr, stdout};

const UPSTREAM: &str = "https://github.com/deepseek-ai/DeepEP";
const FORK: &str = "https://github.com/sgl-project/DeepEP";

/// An upstream repository (the mini-deepep fixture, branch `main`, plus one
/// upstream commit after the fork point) and its fork (a clone with `ahead`
/// commits of its own on branch `sgl-deepep`).
struct Forked {
    dir: tempfile::TempDir,
    upstream: PathBuf,
    fork: PathBuf,
    /// The fork point: the fixture's commit.
    base: String,
    /// The fork's tip (the pin).
    tip: String,
}

fn forked(ahead: usize) -> Forked {
    let dir = tempfile::tempdir().unwrap();
    let upstream = dir.path().join("upstream");
    let base = git_repo_from_fixture("mini-deepep", &upstream);
    let fork = dir.path().join("fork");
    let url = format!("file://{}", upstream.display());
    git(dir.path(), &["clone", "-q", &url, fork.to_str().unwrap()]);
    git(&fork, &["checkout", "-q", "-b", "sgl-deepep"]);
    for n in 0..ahead {
        std::fs::write(fork.join("FORK_NOTE"), format!("fork change {n}\n")).unwrap();
        git(&fork, &["add", "-A"]);
        git(&fork, &["commit", "-qm", &format!("fork change {n}")]);
    }
    // Upstream moves on after the fork point: the merge base stays the fork point.
    std::fs::write(upstream.join("UPSTREAM_NOTE"), "later upstream work\n").unwrap();
    git(&upstream, &["add", "-A"]);
    git(&upstream, &["commit", "-qm", "upstream moves on"]);
    let tip = git(&fork, &["rev-parse", "HEAD"]).trim().to_string();
    Forked { dir, upstream, fork, base, tip }
}

/// A pins file for `rev` of the fork, with `source_extra` added to `[source]`.
fn pins(dir: &Path, rev: &str, source_extra: &str) -> PathBuf {
    let p = dir.join("pins.toml");
    let text = format!(
        "schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"{FORK}\"\nbranch = \"sgl-deepep\"\nbase_version = \"1.2.1\"\n{source_extra}\n[pin.x86_64]\nrev = \"{rev}\"\n\n[[variant]]\nname = \"sn\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\n"
    );
    std::fs::write(&p, text).unwrap();
    p
}

const WITH_UPSTREAM: &str = "upstream = \"https://github.com/deepseek-ai/DeepEP\"\nupstream_branch = \"main\"";

/// `deepep-forge plan` of the fork (read through `--source`), the upstream
/// URL served by the local upstream repository.
fn plan(f: &Forked, pins: &Path, upstream: &Path, format: &str) -> Output {
    support::bin()
        .args(["plan", "--variant", "sn", "--format", format, "--pins"])
        .arg(pins)
        .arg("--source")
        .arg(&f.fork)
        .args(["--python", "/nonexistent/python3"])
        .current_dir(f.dir.path())
        .env("DEEPEP_FORGE_CACHE_DIR", f.dir.path().join("cache"))
        .env("DEEPEP_FORGE_GIT_ALLOW_LOCAL", "1")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", format!("url.file://{}.insteadOf", upstream.display()))
        .env("GIT_CONFIG_VALUE_0", UPSTREAM)
        .output()
        .unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(o), stderr(o)))
}

#[test]
fn the_plan_records_a_forks_merge_base_and_how_many_commits_it_carries() {
    let f = forked(3);
    let p = pins(f.dir.path(), &f.tip, WITH_UPSTREAM);
    let o = plan(&f, &p, &f.upstream, "json");
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let j = json(&o);
    let fork = &j["plans"][0]["source"]["fork"];
    assert_eq!(fork["upstream"], UPSTREAM);
    assert_eq!(fork["upstream_branch"], "main");
    assert_eq!(fork["merge_base"], f.base.as_str(), "the fork point, not upstream's later tip");
    assert_eq!(fork["ahead"], 3);
    // Fetched into the fork's mirror under its own namespace.
    let mirror = PathBuf::from(j["plans"][0]["source"]["mirror"].as_str().unwrap());
    let refs = git(&mirror, &["for-each-ref", "--format=%(refname)"]);
    assert!(refs.lines().any(|r| r == "refs/deepep-forge/upstream/main"), "{refs}");

    let o = plan(&f, &p, &f.upstream, "human");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let want = format!("fork        fork of {UPSTREAM}@main: merge base {}, 3 commits ahead", f.base);
    assert!(stdout(&o).contains(&want), "{want} in\n{}", stdout(&o));
}

#[test]
fn without_a_common_history_the_plan_says_so_and_guesses_nothing() {
    let f = forked(1);
    let unrelated = f.dir.path().join("unrelated");
    std::fs::create_dir(&unrelated).unwrap();
    std::fs::write(unrelated.join("README"), "another project\n").unwrap();
    git(&unrelated, &["init", "-q", "-b", "main"]);
    git(&unrelated, &["add", "-A"]);
    git(&unrelated, &["commit", "-qm", "unrelated"]);
    let p = pins(f.dir.path(), &f.tip, WITH_UPSTREAM);
    let o = plan(&f, &p, &unrelated, "json");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let fork = &json(&o)["plans"][0]["source"]["fork"];
    assert!(fork["merge_base"].is_null() && fork["ahead"].is_null(), "{fork}");
    let o = plan(&f, &p, &unrelated, "human");
    let want = format!("fork of {UPSTREAM}@main: no merge base found within the fetched history");
    assert!(stdout(&o).contains(&want), "{}", stdout(&o));
}

#[test]
fn an_unreachable_upstream_or_branch_is_exit_3_naming_it() {
    let f = forked(1);
    let p =
        pins(f.dir.path(), &f.tip, "upstream = \"https://github.com/deepseek-ai/DeepEP\"\nupstream_branch = \"nope\"");
    let o = plan(&f, &p, &f.upstream, "human");
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("cannot fetch branch nope of the upstream https://github.com/deepseek-ai/DeepEP"),
        "{}",
        stderr(&o)
    );
}

/// A pins file without `upstream` plans as before: no `fork` anywhere in the
/// plan, and the same cache key as with the upstream keys left out (the fork
/// record is keyed only when present: with it, the key differs).
#[test]
fn without_upstream_nothing_changes_and_with_it_the_fork_is_keyed() {
    let f = forked(2);
    let plain = pins(f.dir.path(), &f.tip, "");
    let o = plan(&f, &plain, &f.upstream, "json");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j = json(&o);
    assert!(!j.to_string().contains("\"fork\""), "no fork record without upstream: {j}");
    assert!(!j.to_string().contains("upstream"), "{j}");
    let mirror = PathBuf::from(j["plans"][0]["source"]["mirror"].as_str().unwrap());
    let refs = git(&mirror, &["for-each-ref", "--format=%(refname)"]);
    assert!(!refs.contains("deepep-forge/upstream"), "nothing fetched from upstream: {refs}");
    // The key is null without a toolchain here; the path-free source part is what
    // both share. The keyed input is checked by the unit test in src/builder/plan.rs.
    let forked_plan = json(&plan(&f, &pins(f.dir.path(), &f.tip, WITH_UPSTREAM), &f.upstream, "json"));
    let strip = |v: &serde_json::Value| {
        let mut s = v["plans"][0]["source"].clone();
        s.as_object_mut().unwrap().remove("fork");
        s
    };
    assert_eq!(strip(&j), strip(&forked_plan), "the fork record is the only difference in the source");
}

fn pins_check(dir: &Path, source_extra: &str) -> Output {
    let p = pins(dir, &"a".repeat(40), source_extra);
    support::bin().args(["pins", "check", "--pins"]).arg(&p).current_dir(dir).output().unwrap()
}

#[test]
fn bad_upstream_keys_are_exit_2_with_the_line() {
    let d = tempfile::tempdir().unwrap();
    let ok = pins_check(d.path(), WITH_UPSTREAM);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let show = support::bin()
        .args(["pins", "show", "--pins"])
        .arg(d.path().join("pins.toml"))
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(stdout(&show).contains(&format!("fork of: {UPSTREAM} (main)")), "{}", stdout(&show));
    // [source] starts at line 2: repo 4, branch 5, base_version 6, the extra keys from 7.
    for (extra, line, needle) in [
        ("upstream = \"https://github.com/deepseek-ai/DeepEP\"", 7, "source.upstream without source.upstream_branch"),
        ("upstream_branch = \"main\"", 7, "source.upstream_branch without source.upstream"),
        (
            "upstream = \"https://github.com/sgl-project/DeepEP.git\"\nupstream_branch = \"main\"",
            7,
            "is source.repo itself (line 4)",
        ),
        ("upstream = \"file:///tmp/DeepEP\"\nupstream_branch = \"main\"", 7, "the `file` scheme is not allowed"),
        ("upstream = \"/tmp/DeepEP\"\nupstream_branch = \"main\"", 7, "a local path is not allowed"),
        (
            "upstream = \"https://github.com/deepseek-ai/DeepEP\"\nupstream_branch = \"--upload-pack=x\"",
            8,
            "expected a plain branch name",
        ),
        (
            "upstream = \"https://github.com/deepseek-ai/DeepEP\"\nupstream_branch = \"a..b\"",
            8,
            "expected a plain branch name",
        ),
        (
            "upstream = \"https://github.com/deepseek-ai/DeepEP\"\nupstream_branch = \"main:refs/heads/x\"",
            8,
            "expected a plain branch name",
        ),
        (
            "upstream = \"https://github.com/deepseek-ai/DeepEP\"\nupstream_branch = \"\"",
            8,
            "expected a plain branch name",
        ),
        (
            "upstream = \"https://github.com/deepseek-ai/DeepEP\"\nupstream_branch = \"x.lock\"",
            8,
            "expected a plain branch name",
        ),
    ] {
        let o = pins_check(d.path(), extra);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{extra}: {err}");
        assert!(err.contains(&format!("pins.toml:{line}:")), "{extra}: line {line} in {err}");
        assert!(err.contains(needle), "{extra}: {needle} in {err}");
    }
}

/// A consumer that pins DeepEP from `repo`, checked against `pins` (or `--no-pins`).
fn lock_check(repo: &str, pins_extra: Option<&str>) -> serde_json::Value {
    let d = tempfile::tempdir().unwrap();
    let rev = "a".repeat(40);
    std::fs::write(
        d.path().join("pyproject.toml"),
        format!(
            "[project]\nname = \"consumer\"\nversion = \"0.1.0\"\ndependencies = [\"deep_ep @ git+{repo}@{rev}\"]\n"
        ),
    )
    .unwrap();
    let mut c = support::bin();
    c.args(["lock", "check", "--format", "json", "--project"]).arg(d.path()).current_dir(d.path());
    match pins_extra {
        Some(extra) => c.arg("--pins").arg(pins(d.path(), &rev, extra)),
        None => c.arg("--no-pins"),
    };
    let o = c.output().unwrap();
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)))
}

fn fork_notes(j: &serde_json::Value) -> Vec<String> {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "fork-pin")
        .map(|f| {
            assert_eq!(f["severity"], "note", "{f}");
            f["message"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn lock_check_notes_a_consumer_that_pins_a_fork() {
    // pins.toml is the fork: the consumer following it is told which fork and its upstream.
    let j = lock_check(&format!("{FORK}.git"), Some(WITH_UPSTREAM));
    let notes = fork_notes(&j);
    assert_eq!(notes.len(), 1, "{j}");
    assert!(
        notes[0].contains(&format!("the fork {FORK}.git (pins.toml's source), whose upstream is {UPSTREAM}@main")),
        "{notes:?}"
    );
    // Without upstream in pins.toml, a DeepEP of another owner is named a fork of pins.toml's.
    let j = lock_check(FORK, Some(""));
    assert!(fork_notes(&j).is_empty(), "pins.toml's own repo: {j}");
    let j = lock_check("ssh://git@github.com/someone/DeepEP.git", Some(""));
    let notes = fork_notes(&j);
    assert!(
        notes.len() == 1
            && notes[0].contains(&format!("the fork ssh://git@github.com/someone/DeepEP.git of pins.toml's {FORK}")),
        "{j}"
    );
    // --no-pins: deepseek-ai's is upstream; another owner's is a fork of it.
    let j = lock_check(&format!("{FORK}.git"), None);
    let notes = fork_notes(&j);
    assert!(notes.len() == 1 && notes[0].contains(&format!("of upstream {UPSTREAM}")), "{j}");
    assert!(fork_notes(&lock_check("https://github.com/deepseek-ai/DeepEP.git", None)).is_empty());
    assert!(fork_notes(&lock_check("https://gitlab.example/team/other.git", None)).is_empty());
}

/// Every wheel member whose path ends in `suffix`, from `wheel` unzipped under `dir`.
fn member(dir: &Path, wheel: &Path, suffix: &str) -> Vec<u8> {
    let u = dir.join("unzipped");
    if !u.exists() {
        build_support::run(Command::new("unzip").arg("-q").arg(wheel).arg("-d").arg(&u));
    }
    let mut stack = vec![u];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                return std::fs::read(p).unwrap();
            }
        }
    }
    panic!("no member ending in {suffix} in {}", wheel.display());
}

/// A fork built for real: its wheel's provenance and statement record the
/// merge base and the ahead count, `probe` shows `fork: ...`, and `verify`
/// rebuilds it from the wheel with the upstream unreachable (the record is
/// taken as the wheel carries it; the upstream is never fetched).
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_forks_wheel_records_it_probe_shows_it_and_verify_needs_no_upstream() {
    let lab = build_support::Lab::new();
    let upstream = lab.dir.path().join("upstream.git");
    git(lab.dir.path(), &["clone", "-q", "--bare", lab.repo.to_str().unwrap(), upstream.to_str().unwrap()]);
    std::fs::write(lab.repo.join("FORK_NOTE"), "the fork's own change\n").unwrap();
    git(&lab.repo, &["add", "-A"]);
    git(&lab.repo, &["commit", "-qm", "fork change"]);
    let tip = git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    // No nvshmem_dir: the build Python's NVSHMEM package is found (a variant `verify` rebuilds as is).
    let variant = "[[variant]]\nname = \"r\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\n";
    let pins = lab.pins_with(&tip, variant);
    let text = std::fs::read_to_string(&pins).unwrap().replace(
        "repo = \"https://github.com/deepseek-ai/DeepEP.git\"",
        &format!("repo = \"{FORK}\"\n{WITH_UPSTREAM}"),
    );
    std::fs::write(&pins, text).unwrap();
    let o = lab
        .forge(&["build-wheel", "--variant", "r", "--format", "json", "--pins", pins.to_str().unwrap()])
        .env("DEEPEP_FORGE_GIT_ALLOW_LOCAL", "1")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", format!("url.file://{}.insteadOf", upstream.display()))
        .env("GIT_CONFIG_VALUE_0", UPSTREAM)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let j = json(&o);
    let wheel = PathBuf::from(j["results"][0]["wheel"].as_str().unwrap());
    let prov: serde_json::Value =
        serde_json::from_slice(&member(lab.dir.path(), &wheel, "deepep-forge-provenance.json")).unwrap();
    let fork = &prov["source"]["fork"];
    assert_eq!(
        *fork,
        serde_json::json!({ "upstream": UPSTREAM, "upstream_branch": "main", "merge_base": lab.rev, "ahead": 1 }),
        "{prov}"
    );
    assert_eq!(prov["source"]["repo"], FORK);
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{}.intoto.json", wheel.display())).unwrap()).unwrap();
    let deps = st["predicate"]["buildDefinition"]["resolvedDependencies"].as_array().unwrap();
    let m = deps.iter().find(|d| d["name"] == "upstream").unwrap_or_else(|| panic!("{deps:?}"));
    assert_eq!(m["uri"], format!("git+{UPSTREAM}@{}", lab.rev));
    assert_eq!(m["digest"]["gitCommit"], lab.rev.as_str());
    assert_eq!(m["annotations"]["ahead"], 1);

    let probe = support::forge(lab.dir.path(), &["probe", "--wheel", wheel.to_str().unwrap()]);
    let want = format!("fork: {FORK}@{} on {UPSTREAM}@{} (+1)", &tip[..7], &lab.rev[..7]);
    assert!(stdout(&probe).contains(&want), "{want} in\n{}", stdout(&probe));

    // No insteadOf: the upstream URL is unreachable here, and verify never asks for it.
    let src = lab.repo.to_str().unwrap();
    let here = lab.dir.path().join("verify-out");
    let v = lab
        .forge(&["verify", wheel.to_str().unwrap(), "--source", src, "--out", here.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(v.status.code(), Some(0), "{}{}", stdout(&v), stderr(&v));
    assert!(stdout(&v).starts_with("verified: "), "{}", stdout(&v));
}
