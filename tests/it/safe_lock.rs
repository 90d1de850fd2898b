//! Issue 54 for `lock check`, `pin set` and `pin recover`, with the real
//! binary on a consumer whose DeepEP is a local git repository (served at
//! DeepEP's URL, as `pinset.rs` does):
//!
//! - every file of the project is read and written inside the project's tree:
//!   a link out of it (`docker/` itself, a Dockerfile, a folder below
//!   `docker/`, pyproject.toml, uv.lock) is refused, exit 2, naming it, and
//!   nothing is written anywhere (the case folder, the link's target
//!   included, is the same afterwards); a FIFO where a file is read never blocks;
//! - `pin set` edits tokens, not text: in a Dockerfile only the pin's own
//!   token moves (an image digest, a comment stay byte for byte; every place
//!   the reader reads as the pin moves), and a value that holds the old
//!   revision in a form the reader cannot read as the pin (`$(...)`) is
//!   refused with its file:line, nothing written; `lock check` reports the
//!   same Dockerfile (a finding at that line, exit 1), never silence.
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use crate::support::hostile::{run_all, Case};
use crate::support::*;

/// The two commits of the DeepEP stand-in (`pinset::deepep_repo`: fixed dates, so the same shas in every folder).
fn revs() -> &'static (String, String) {
    static REVS: OnceLock<(String, String)> = OnceLock::new();
    REVS.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let (_, first, second) = crate::pinset::deepep_repo(d.path());
        (first, second)
    })
}

/// In `d`: the DeepEP stand-in, `consumer/` pinned at the first commit, and pins.toml beside it.
fn consumer(d: &Path) -> PathBuf {
    let (repo, first, _) = crate::pinset::deepep_repo(d);
    assert_eq!(&first, &revs().0, "the stand-in's commits are the same in every folder");
    crate::pinset::uv_project(d, &repo, &first)
}

fn symlink(target: &str, link: &Path) {
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, link).unwrap();
}

fn fifo(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", p.display());
}

/// A Dockerfile that pins DeepEP at `rev` (the J7 shape).
fn dockerfile(rev: &str) -> String {
    format!(
        "FROM python:3.12-slim\nARG DEEPEP_REV={rev}\nRUN git clone https://github.com/deepseek-ai/DeepEP.git /deepep && cd /deepep && git checkout ${{DEEPEP_REV}}\n"
    )
}

/// The environment that serves the stand-in at DeepEP's URL (`{dir}`: the case folder).
fn served(c: Case) -> Case {
    c.env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "url.file://{dir}/DeepEP.insteadOf")
        .env("GIT_CONFIG_VALUE_0", "https://github.com/deepseek-ai/DeepEP.git")
        .env("DEEPEP_FORGE_GIT_ALLOW_LOCAL", "1")
        .may_change("cache/")
        .timeout(std::time::Duration::from_secs(60))
}

/// `pin set <second commit> --project consumer` on the consumer after `setup`.
fn pin_set(name: &str, setup: impl Fn(&Path) + Send + Sync + 'static) -> Case {
    served(Case::new(format!("pin set: {name}")))
        .setup(move |d| {
            consumer(d);
            setup(d)
        })
        .args(&["pin", "set", &revs().1, "--project", "consumer"])
}

/// `lock check --project consumer` on the consumer after `setup`.
fn lock_check(name: &str, setup: impl Fn(&Path) + Send + Sync + 'static) -> Case {
    served(Case::new(format!("lock check: {name}")))
        .setup(move |d| {
            consumer(d);
            setup(d)
        })
        .args(&["lock", "check", "--project", "consumer"])
}

/// `outside/` beside the project holding a Dockerfile at the first commit (and a pyproject.toml, a uv.lock).
fn outside(d: &Path) {
    std::fs::create_dir_all(d.join("outside/sub")).unwrap();
    std::fs::write(d.join("outside/Dockerfile"), dockerfile(&revs().0)).unwrap();
    std::fs::write(d.join("outside/sub/Dockerfile"), dockerfile(&revs().0)).unwrap();
    std::fs::write(d.join("outside/pyproject.toml"), std::fs::read(d.join("consumer/pyproject.toml")).unwrap())
        .unwrap();
    std::fs::write(d.join("outside/uv.lock"), "version = 1\n").unwrap();
}

/// Every way a file of the project can lead out of it: refused, exit 2,
/// naming the link, and the case folder (the link's target too) unchanged.
#[test]
fn a_link_out_of_the_project_is_refused_and_nothing_is_written_anywhere() {
    let docker_out = |d: &Path| {
        outside(d);
        symlink("../outside", &d.join("consumer/docker"));
    };
    let dockerfile_out = |d: &Path| {
        outside(d);
        symlink("../outside/Dockerfile", &d.join("consumer/Dockerfile"));
    };
    let folder_out = |d: &Path| {
        outside(d);
        std::fs::create_dir_all(d.join("consumer/docker")).unwrap();
        symlink("../../outside/sub", &d.join("consumer/docker/cuda"));
    };
    let pyproject_out = |d: &Path| {
        outside(d);
        std::fs::remove_file(d.join("consumer/pyproject.toml")).unwrap();
        symlink("../outside/pyproject.toml", &d.join("consumer/pyproject.toml"));
    };
    let lock_out = |d: &Path| {
        outside(d);
        symlink("../outside/uv.lock", &d.join("consumer/uv.lock"));
    };
    let absolute_out = |d: &Path| {
        outside(d);
        symlink(d.join("outside/Dockerfile").to_str().unwrap(), &d.join("consumer/Dockerfile.cuda"));
    };
    run_all(vec![
        pin_set("docker/ is a link out of the project", docker_out).says("consumer/docker").says("outside"),
        lock_check("docker/ is a link out of the project", docker_out).says("consumer/docker").says("outside"),
        pin_set("a Dockerfile is a link out of the project", dockerfile_out)
            .says("consumer/Dockerfile")
            .says("outside"),
        lock_check("a Dockerfile is a link out of the project", dockerfile_out).says("consumer/Dockerfile"),
        pin_set("a Dockerfile is an absolute link out", absolute_out).says("Dockerfile.cuda").says("outside"),
        pin_set("a folder below docker/ links out", folder_out).says("docker/cuda").says("outside"),
        lock_check("a folder below docker/ links out", folder_out).says("docker/cuda").says("outside"),
        pin_set("pyproject.toml is a link out of the project", pyproject_out)
            .says("consumer/pyproject.toml")
            .says("pin set writes only the project's own files"),
        lock_check("pyproject.toml is a link out of the project", pyproject_out)
            .says("consumer/pyproject.toml")
            .says("outside"),
        pin_set("--relock: uv.lock is a link out of the project", lock_out)
            .args(&["--relock"])
            .env("DEEPEP_FORGE_UV", "/bin/true")
            .says("consumer/uv.lock")
            .says("outside"),
        lock_check("uv.lock is a link out of the project", lock_out).says("consumer/uv.lock").says("outside"),
        served(Case::new("pin recover: docker/ is a link out of the project"))
            .setup(move |d| {
                consumer(d);
                docker_out(d)
            })
            .args(&["pin", "recover", "--project", "consumer"])
            .says("consumer/docker"),
    ]);
}

/// A FIFO where a Dockerfile or uv.lock is read: never waited on (the case's
/// timeout), a FIFO uv.lock refused (exit 2, named), a FIFO Dockerfile no
/// Dockerfile (nothing read from it, nothing written to it).
#[test]
fn a_fifo_in_the_project_never_blocks() {
    let lock_fifo = |d: &Path| fifo(&d.join("consumer/uv.lock"));
    let docker_fifo = |d: &Path| fifo(&d.join("consumer/docker/Dockerfile"));
    run_all(vec![
        lock_check("uv.lock is a FIFO", lock_fifo).says("uv.lock").says("not a regular file"),
        pin_set("--relock: uv.lock is a FIFO", lock_fifo)
            .args(&["--relock"])
            .env("DEEPEP_FORGE_UV", "/bin/true")
            .says("uv.lock")
            .says("not a regular file"),
        lock_check("a Dockerfile is a FIFO", docker_fifo)
            .exit(0)
            .says("checked: consumer/pyproject.toml, uv.lock not found"),
        pin_set("a Dockerfile is a FIFO", docker_fifo)
            .exit(0)
            .may_change("consumer/pyproject.toml")
            .may_change("pins.toml")
            .says("pinned DeepEP"),
    ]);
}

/// `ARG DEEPEP_REV="<old sha>$(...)"`: pin set cannot read it as the pin, so it
/// refuses (exit 2, file:line, what it did not understand) and writes nothing.
#[test]
fn a_revision_in_a_command_substitution_is_refused_with_its_line() {
    let (first, _) = revs();
    let text = format!("FROM python:3.12-slim\nARG DEEPEP_REV=\"{first}$(cat /etc/hostname)\"\nRUN pip install \"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@${{DEEPEP_REV}}\"\n");
    let joined = format!(
        "FROM python:3.12-slim\n{}LABEL org.opencontainers.image.revision=deepep-{first}\n",
        dockerfile(first).split_once('\n').unwrap().1
    );
    run_all(vec![
        pin_set("the revision in `$(...)`", move |d| std::fs::write(d.join("consumer/Dockerfile"), &text).unwrap())
            .says("consumer/Dockerfile:2")
            .says("a command substitution")
            .says("nothing was changed"),
        pin_set("the revision joined with other text", move |d| {
            std::fs::create_dir_all(d.join("consumer/docker")).unwrap();
            std::fs::write(d.join("consumer/docker/Dockerfile"), &joined).unwrap()
        })
        .says("consumer/docker/Dockerfile:4")
        .says("joined with other text"),
    ]);
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let repo = dir.join("DeepEP");
    let mut c = bin();
    c.args(args).current_dir(dir).envs(crate::pinset::insteadof(&repo));
    c.output().unwrap()
}

fn all(o: &Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

/// Only the pin's token moves: the image digest that starts with the old sha
/// and a comment naming it stay byte for byte; pyproject.toml's comment and
/// another table's value holding the old sha stay too.
#[test]
fn pin_set_moves_the_pins_token_and_nothing_else() {
    let (first, second) = revs();
    let d = tempfile::tempdir().unwrap();
    let proj = consumer(d.path());
    let digest = format!("{first}0123456789abcdef01234567");
    let text = format!(
        "# syntax=docker/dockerfile:1\nFROM ubuntu@sha256:{digest} AS base\n# was built from {first}\n{}",
        dockerfile(first).split_once('\n').unwrap().1
    );
    std::fs::write(proj.join("Dockerfile"), &text).unwrap();
    let py = std::fs::read_to_string(proj.join("pyproject.toml")).unwrap()
        + &format!("\n# DeepEP was {first}\n[tool.other]\nnote = \"{first}\"\n");
    std::fs::write(proj.join("pyproject.toml"), &py).unwrap();
    let o = run(d.path(), &["pin", "set", second, "--project", "consumer"]);
    assert_eq!(o.status.code(), Some(0), "{}", all(&o));
    let want = text.replacen(&format!("ARG DEEPEP_REV={first}"), &format!("ARG DEEPEP_REV={second}"), 1);
    assert_eq!(std::fs::read_to_string(proj.join("Dockerfile")).unwrap(), want, "only the ARG's token moved");
    let py_now = std::fs::read_to_string(proj.join("pyproject.toml")).unwrap();
    assert!(py_now.contains(&format!("# DeepEP was {first}\n[tool.other]\nnote = \"{first}\"\n")), "{py_now}");
    assert!(py_now.contains(&format!("DeepEP.git@{second}\"")), "{py_now}");
    assert_eq!(py_now.matches(first.as_str()).count(), 2, "the comment and the other table's value only: {py_now}");
}

/// A Dockerfile that writes the revision in two places the reader reads as
/// the pin (an ARG, a pip URL): both move, and `lock check` finds it clean.
#[test]
fn every_place_read_as_the_pin_moves() {
    let (first, second) = revs();
    let d = tempfile::tempdir().unwrap();
    let proj = consumer(d.path());
    std::fs::create_dir_all(proj.join("infra/docker")).unwrap();
    // docker/ is a link inside the project: followed.
    symlink("infra/docker", &proj.join("docker"));
    let text = format!(
        "FROM python:3.12-slim\nARG DEEPEP_REV=\"{first}\"\nRUN git clone https://github.com/deepseek-ai/DeepEP.git && cd DeepEP && git checkout ${{DEEPEP_REV}}\nRUN pip install \"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@{first}\"\n"
    );
    std::fs::write(proj.join("infra/docker/Dockerfile.cuda"), &text).unwrap();
    let o = run(d.path(), &["pin", "set", second, "--project", "consumer"]);
    assert_eq!(o.status.code(), Some(0), "{}", all(&o));
    assert!(stderr(&o).contains("consumer/docker/Dockerfile.cuda: its DeepEP pin moves"), "{}", all(&o));
    assert!(std::fs::symlink_metadata(proj.join("docker")).unwrap().file_type().is_symlink(), "the link stays a link");
    assert_eq!(
        std::fs::read_to_string(proj.join("infra/docker/Dockerfile.cuda")).unwrap(),
        text.replace(first.as_str(), second)
    );
    let o = run(d.path(), &["lock", "check", "--project", "consumer", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", all(&o)));
    let docker: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"].as_str().unwrap().starts_with("dockerfile"))
        .collect();
    assert!(docker.is_empty(), "{docker:#?}");
}

/// `lock check` on the Dockerfile `pin set` refused: a finding at the line
/// that holds the revision in `$(...)` (exit 1), never silence.
#[test]
fn lock_check_reports_a_revision_it_cannot_read_as_the_pin() {
    let (first, second) = revs();
    let d = tempfile::tempdir().unwrap();
    let proj = consumer(d.path());
    let text = format!("FROM python:3.12-slim\nARG DEEPEP_REV=\"{first}$(cat /etc/hostname)\"\nRUN pip install \"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@${{DEEPEP_REV}}\"\n");
    std::fs::write(proj.join("Dockerfile"), &text).unwrap();
    let o = run(d.path(), &["pin", "set", second, "--project", "consumer"]);
    assert_eq!(o.status.code(), Some(2), "{}", all(&o));
    let o = run(d.path(), &["lock", "check", "--project", "consumer", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", all(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", all(&o)));
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "dockerfile-unverifiable")
        .unwrap_or_else(|| panic!("no finding: {v:#}"));
    assert_eq!(f["line"], 2, "{f:#}");
    assert!(f["file"].as_str().unwrap().ends_with("consumer/Dockerfile"), "{f:#}");
    assert!(f["message"].as_str().unwrap().contains("a command substitution"), "{f:#}");
    // The same Dockerfile with a revision that is not the pin's is reported too.
    std::fs::write(proj.join("Dockerfile"), text.replace(first.as_str(), second)).unwrap();
    let o = run(d.path(), &["lock", "check", "--project", "consumer"]);
    assert_eq!(o.status.code(), Some(1), "{}", all(&o));
    assert!(
        stdout(&o).contains("dockerfile-unverifiable") && stdout(&o).contains("consumer/Dockerfile:2"),
        "{}",
        all(&o)
    );
}
