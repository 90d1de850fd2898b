//! What uv really does with a DeepEP-like git dependency, one test per claim
//! that a `lock check` message makes (docs/findings.md). Real uv (the version
//! `.ci/setup-tools` pins), offline: the dependency is a local git repository
//! whose setup.py versions itself like DeepEP's (`1.2.1+<git rev-parse --short HEAD>`),
//! built by uv with setuptools from a find-links folder of wheels packed here
//! from the tools venv (no index, no network).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::*;

/// DeepEP's versioning, reduced: the label is `1.2.1+` the short sha of the checkout it is built in.
/// DeepEP's URL as pins.toml and pyproject.toml name it.
const DEEPEP_URL: &str = "https://github.com/deepseek-ai/DeepEP.git";

const SETUP_PY: &str = r#"import subprocess
from setuptools import setup
rev = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
setup(name="deep_ep", version="1.2.1+" + rev, packages=["deep_ep"])
"#;

/// Packs an installed distribution (by its RECORD) back into a wheel, so uv can
/// build offline with the tools venv's setuptools, wheel and packaging.
const REPACK_PY: &str = r#"import base64, glob, hashlib, os, sys, zipfile
site, dist, out = sys.argv[1:4]
info = glob.glob(os.path.join(site, dist + "-*.dist-info"))[0]
stem = os.path.basename(info)[: -len(".dist-info")]
skip = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
files = []
for line in open(os.path.join(info, "RECORD")):
    p = line.rsplit(",", 2)[0]
    if p and not p.startswith("..") and "__pycache__" not in p and not p.endswith(skip):
        files.append(p)
rec = []
with zipfile.ZipFile(os.path.join(out, stem + "-py3-none-any.whl"), "w") as z:
    for p in sorted(files):
        data = open(os.path.join(site, p), "rb").read()
        z.writestr(p, data)
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rec.append("%s,sha256=%s,%d" % (p, h, len(data)))
    rec.append(os.path.basename(info) + "/RECORD,,")
    z.writestr(os.path.basename(info) + "/RECORD", "\n".join(rec) + "\n")
"#;

const UNIFIED: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";

/// A consumer project next to a DeepEP-like repository with two commits.
struct Lab {
    dir: tempfile::TempDir,
    uv: PathBuf,
    python: PathBuf,
    repo: PathBuf,
    /// (full sha, short sha) of the two commits.
    first: (String, String),
    second: (String, String),
}

impl Lab {
    fn new() -> Option<Lab> {
        let venv = tools_venv()?;
        let uv = venv.join("bin/uv");
        let python = venv.join("bin/python");
        if !uv.exists() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let site = std::fs::read_dir(venv.join("lib"))
            .ok()?
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with("python"))?
            .path()
            .join("site-packages");
        let links = dir.path().join("links");
        std::fs::create_dir(&links).unwrap();
        std::fs::write(dir.path().join("repack.py"), REPACK_PY).unwrap();
        for dist in ["setuptools", "wheel", "packaging"] {
            let o = Command::new(&python).arg(dir.path().join("repack.py")).arg(&site).arg(dist).arg(&links).output();
            let o = o.unwrap();
            assert!(o.status.success(), "repacking {dist}: {}", stderr(&o));
        }
        let repo = dir.path().join("DeepEP");
        std::fs::create_dir_all(repo.join("deep_ep")).unwrap();
        std::fs::write(repo.join("setup.py"), SETUP_PY).unwrap();
        std::fs::write(repo.join("deep_ep/__init__.py"), "").unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "one"]);
        let first = head(&repo);
        std::fs::write(repo.join("deep_ep/__init__.py"), "VERSION = 2\n").unwrap();
        git(&repo, &["commit", "-qam", "two"]);
        let second = head(&repo);
        Some(Lab { dir, uv, python, repo, first, second })
    }

    fn project(&self) -> PathBuf {
        self.dir.path().join("consumer")
    }

    /// Write the consumer's pyproject.toml: DeepEP at `rev` with static label `label`
    /// (`None`: no DeepEP at all), and a pins.toml pinning `rev` for both architectures.
    fn write(&self, rev: &str, label: Option<&str>) {
        // pins.toml names only remote repositories: uv's git fetches this URL from the
        // local repository through `url.<local>.insteadOf` (see `uv`).
        let url = DEEPEP_URL;
        let p = self.project();
        std::fs::create_dir_all(&p).unwrap();
        let (deps, meta) = match label {
            Some(l) => (
                format!("\"deep_ep @ git+{url}@{rev}\""),
                format!(
                    "\n[[tool.uv.dependency-metadata]]\nname = \"deep_ep\"\nversion = \"{l}\"\nrequires-dist = []\n"
                ),
            ),
            None => (String::new(), String::new()),
        };
        std::fs::write(
            p.join("pyproject.toml"),
            format!(
                "[project]\nname = \"consumer\"\nversion = \"0.1.0\"\nrequires-python = \">=3.10\"\ndependencies = [{deps}]\n{meta}"
            ),
        )
        .unwrap();
        let pins = std::fs::read_to_string(root().join("pins.toml")).unwrap().replace(UNIFIED, rev);
        std::fs::write(self.dir.path().join("pins.toml"), pins).unwrap();
    }

    /// Real uv in the project, offline, setuptools from the find-links folder.
    fn uv(&self, args: &[&str]) -> Output {
        let mut c = Command::new(&self.uv);
        c.args(args)
            .current_dir(self.project())
            .env("UV_CACHE_DIR", self.dir.path().join("uv-cache"))
            .env("UV_OFFLINE", "1")
            .env("UV_NO_INDEX", "1")
            .env("UV_FIND_LINKS", self.dir.path().join("links"))
            .env("UV_PYTHON", &self.python)
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("UV_NO_PROGRESS", "1")
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", format!("url.file://{}.insteadOf", self.repo.display()))
            .env("GIT_CONFIG_VALUE_0", DEEPEP_URL)
            .env_remove("VIRTUAL_ENV")
            .env_remove("UV_INDEX_URL")
            .env_remove("UV_EXTRA_INDEX_URL");
        c.output().unwrap()
    }

    fn uv_ok(&self, args: &[&str]) -> String {
        let o = self.uv(args);
        assert_eq!(o.status.code(), Some(0), "uv {args:?}: {}{}", stdout(&o), stderr(&o));
        stderr(&o)
    }

    /// `deepep-forge lock check --format json` against the lab's pins.toml.
    fn check(&self) -> (i32, serde_json::Value) {
        let o = forge(self.dir.path(), &["lock", "check", "--format", "json", "--project", "consumer"]);
        let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
        (o.status.code().unwrap(), v)
    }

    /// `deepep-forge lock check --no-pins --format json`: the project's own intent.
    fn check_no_pins(&self) -> (i32, serde_json::Value) {
        let o = forge(self.dir.path(), &["lock", "check", "--format", "json", "--project", "consumer", "--no-pins"]);
        let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
        (o.status.code().unwrap(), v)
    }

    /// Versions of deep_ep installed in the project's environment (from dist-info folder names).
    fn installed(&self) -> Vec<String> {
        let lib = self.project().join(".venv/lib");
        let py = std::fs::read_dir(&lib).unwrap().flatten().next().unwrap().path();
        let mut v: Vec<String> = std::fs::read_dir(py.join("site-packages"))
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.strip_prefix("deep_ep-")?.strip_suffix(".dist-info").map(str::to_string)
            })
            .collect();
        v.sort();
        v
    }

    fn lock_text(&self) -> String {
        std::fs::read_to_string(self.project().join("uv.lock")).unwrap()
    }
}

fn head(repo: &Path) -> (String, String) {
    let full = git(repo, &["rev-parse", "HEAD"]).trim().to_string();
    let short = git(repo, &["rev-parse", "--short", "HEAD"]).trim().to_string();
    (full, short)
}

/// The messages of every finding with `rule`.
fn messages(v: &serde_json::Value, rule: &str) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == rule)
        .map(|f| f["message"].as_str().unwrap().to_string())
        .collect()
}

const LOCKED_FAILS: &str = "The lockfile at `uv.lock` needs to be updated, but `--locked` was provided.";

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_lock_at_another_revision_than_pyproject_fails_sync_locked() {
    let lab = require!(Lab::new(), "uv in the tools venv");
    let (first, second) = (lab.first.clone(), lab.second.clone());
    lab.write(&first.0, Some(&format!("1.2.1+{}", first.1)));
    lab.uv_ok(&["lock"]);
    // pyproject moves to the second commit (label right for it); the lock stays at the first
    lab.write(&second.0, Some(&format!("1.2.1+{}", second.1)));
    let o = lab.uv(&["sync", "--locked"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(LOCKED_FAILS), "{}", stderr(&o));
    assert!(!lab.project().join(".venv/lib").exists() || lab.installed().is_empty(), "nothing installed");

    let (code, v) = lab.check();
    assert_eq!(code, 1);
    let stale = messages(&v, "lock-stale");
    assert!(!stale.is_empty(), "{v:#}");
    assert!(
        stale.iter().all(|m| m.contains(&format!("pyproject.toml {}", second.1))
            && m.contains("`uv sync --locked` fails (\"The lockfile at `uv.lock` needs to be updated\")")),
        "{stale:#?}"
    );
    // the lock's label differs from pyproject's: also only a stale lock, with the same consequence
    // one cause: the lock was not regenerated; its fix is `uv lock`
    let ids: Vec<&str> = v["causes"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["lock-out-of-date"], "{v:#}");
    assert_eq!(v["causes"][0]["fix"], "uv lock --project consumer");
    let label = messages(&v, "lock-label");
    assert!(!label.is_empty() && label.iter().all(|m| m.contains("`uv sync --locked` fails")), "{label:#?}");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_lock_without_deep_ep_fails_sync_locked_once_pyproject_requires_it() {
    let lab = require!(Lab::new(), "uv in the tools venv");
    let second = lab.second.clone();
    lab.write(&second.0, None);
    lab.uv_ok(&["lock"]);
    lab.write(&second.0, Some(&format!("1.2.1+{}", second.1)));
    let o = lab.uv(&["sync", "--locked"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(LOCKED_FAILS), "{}", stderr(&o));
    let (code, v) = lab.check();
    assert_eq!(code, 1);
    let m = messages(&v, "lock-stale");
    assert!(
        m.iter().any(|m| m.contains("locks no deep-ep package") && m.contains("`uv sync --locked` fails")),
        "{v:#}"
    );
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_wrong_label_installs_the_real_version_keeps_the_label_in_the_lock_and_reinstalls_on_every_sync() {
    let lab = require!(Lab::new(), "uv in the tools venv");
    let (first, second) = (lab.first.clone(), lab.second.clone());
    // pinned to the second commit, labelled with the first's short sha (a rev bump that forgot the label)
    lab.write(&second.0, Some(&format!("1.2.1+{}", first.1)));
    lab.uv_ok(&["lock"]);
    let err = lab.uv_ok(&["sync", "--locked"]);
    assert!(err.contains(&format!("+ deep-ep==1.2.1+{}", second.1)), "{err}");
    assert_eq!(lab.installed(), [format!("1.2.1+{}", second.1)], "the real version is installed");
    let lock = lab.lock_text();
    let py = std::fs::read_to_string(lab.project().join("pyproject.toml")).unwrap();
    assert!(
        lock.contains(&format!("version = \"1.2.1+{}\"", first.1)),
        "the lock keeps the label's version: {lock}\n{py}"
    );
    assert!(!lock.contains(&format!("1.2.1+{}", second.1)), "{lock}");
    // every later sync uninstalls and reinstalls deep-ep
    for _ in 0..2 {
        let err = lab.uv_ok(&["sync"]);
        assert!(err.contains("Uninstalled 1 package"), "{err}");
        assert!(err.contains(&format!("~ deep-ep==1.2.1+{}", second.1)), "{err}");
    }
    let err = lab.uv_ok(&["sync", "--locked"]);
    assert!(err.contains("Uninstalled 1 package"), "--locked reinstalls too: {err}");

    // lock check: an error, saying exactly that
    let (code, v) = lab.check();
    assert_eq!(code, 1, "{v:#}");
    let m = messages(&v, "stale-label");
    assert_eq!(m.len(), 2, "one per architecture: {v:#}");
    for m in &m {
        assert!(m.contains(&format!("a build of {} for", second.1)), "{m}");
        assert!(m.contains(&format!("is 1.2.1+{}", second.1)), "{m}");
        assert!(m.contains("uv.lock records that version without building"), "{m}");
        assert!(m.contains("`uv sync` installs the real one anyway"), "{m}");
        assert!(m.contains("every later `uv sync` uninstalls and reinstalls deep-ep"), "{m}");
        assert!(m.contains("`uv lock --check` and `uv sync --locked` do not notice"), "{m}");
        assert!(!m.contains("fails"), "{m}");
    }
    assert!(messages(&v, "lock-label").iter().all(|m| m.contains("every later `uv sync` uninstalls")), "{v:#}");
    assert!(messages(&v, "lock-stale").is_empty(), "the lock is current: {v:#}");
    // one cause, whose fix rewrites the label and relocks
    assert_eq!(v["causes"].as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(v["causes"][0]["id"], "label-wrong");
    let fix = v["causes"][0]["fix"].as_str().unwrap();
    assert!(fix.starts_with(&format!("deepep-forge pin set {}", second.0)) && fix.ends_with("--relock"), "{fix}");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn with_the_right_label_the_second_sync_does_nothing() {
    let lab = require!(Lab::new(), "uv in the tools venv");
    let second = lab.second.clone();
    lab.write(&second.0, Some(&format!("1.2.1+{}", second.1)));
    lab.uv_ok(&["lock"]);
    lab.uv_ok(&["sync", "--locked"]);
    assert_eq!(lab.installed(), [format!("1.2.1+{}", second.1)]);
    let err = lab.uv_ok(&["sync"]);
    assert!(!err.contains("Uninstalled") && !err.contains("Installed"), "{err}");
    assert!(err.contains("Checked 1 package"), "{err}");
    let (code, v) = lab.check();
    assert_eq!(code, 0, "{v:#}");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn uv_lock_check_does_not_see_a_wrong_label() {
    let lab = require!(Lab::new(), "uv in the tools venv");
    let (first, second) = (lab.first.clone(), lab.second.clone());
    lab.write(&second.0, Some(&format!("1.2.1+{}", first.1)));
    lab.uv_ok(&["lock"]);
    let o = lab.uv(&["lock", "--check"]);
    assert_eq!(o.status.code(), Some(0), "uv lock --check passes a wrong label: {}", stderr(&o));
    let (code, v) = lab.check();
    assert_eq!(code, 1);
    assert!(!messages(&v, "stale-label").is_empty(), "{v:#}");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_lock_whose_label_differs_from_pyprojects_fails_sync_locked() {
    let lab = require!(Lab::new(), "uv in the tools venv");
    let (first, second) = (lab.first.clone(), lab.second.clone());
    lab.write(&second.0, Some(&format!("1.2.1+{}", second.1)));
    lab.uv_ok(&["lock"]);
    // only the label changes in pyproject.toml
    lab.write(&second.0, Some(&format!("1.2.1+{}", first.1)));
    let o = lab.uv(&["sync", "--locked"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(LOCKED_FAILS), "{}", stderr(&o));
    let (code, v) = lab.check();
    assert_eq!(code, 1);
    // the lock's label is right; pyproject.toml's is wrong and the lock is stale against it
    assert!(messages(&v, "lock-label").is_empty(), "{v:#}");
    let m = messages(&v, "stale-label");
    let want = format!("uv.lock still records 1.2.1+{}", second.1);
    assert!(!m.is_empty(), "{v:#}");
    for m in &m {
        assert!(m.contains(&want) && m.contains("`uv sync --locked` fails"), "{m}");
    }
}

#[test]
fn a_branch_pin_locks_the_commit_it_resolved_and_upgrade_moves_it_with_no_change_to_pyproject() {
    let lab = require!(Lab::new(), "uv in the tools venv");
    let (first, second) = (lab.first.clone(), lab.second.clone());
    git(&lab.repo, &["branch", "hybrid-ep", &first.0]);
    lab.write("hybrid-ep", None);
    let p = lab.project().join("pyproject.toml");
    let py = std::fs::read_to_string(&p)
        .unwrap()
        .replace("dependencies = []", &format!("dependencies = [\"deep_ep @ git+{DEEPEP_URL}@hybrid-ep\"]"));
    std::fs::write(&p, &py).unwrap();
    lab.uv_ok(&["lock"]);
    // the lock records the name and the commit it resolved to
    assert!(lab.lock_text().contains(&format!("?rev=hybrid-ep#{}", first.0)), "{}", lab.lock_text());
    let (code, v) = lab.check_no_pins();
    assert_eq!(code, 1, "{v:#}");
    let m = messages(&v, "branch-pin");
    assert!(
        m.len() == 1
            && m[0].contains("`hybrid-ep`")
            && m[0]
                .contains(&format!("uv.lock records the commit it resolved to when it was locked, {}", &first.0[..7]))
            && m[0].contains("`uv lock --upgrade` moves it to wherever `hybrid-ep` points then"),
        "{m:#?}"
    );
    // the branch moves; `uv lock --upgrade` follows it, pyproject.toml unchanged
    git(&lab.repo, &["branch", "-f", "hybrid-ep", &second.0]);
    lab.uv_ok(&["lock", "--upgrade"]);
    assert!(lab.lock_text().contains(&format!("?rev=hybrid-ep#{}", second.0)), "{}", lab.lock_text());
    assert_eq!(std::fs::read_to_string(&p).unwrap(), py);
}
