//! The consumer's own CI: the pre-commit hook (`.pre-commit-hooks.yaml`, run by
//! a real pre-commit through `try-repo` against this repository) and the GitHub
//! action's script (`action/lock-check.sh`, run with the GITHUB_* variables
//! pointing at temp files), each on a consumer git repository made in a temp
//! dir: consistent passes, drifted fails and shows the finding. Offline.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::*;

const PINNED: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";
const OTHER: &str = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";

/// A consumer project in NeMo-RL's shape with this repository's pins.toml, as
/// a git repository (pre-commit reads tracked files).
fn consumer(dir: &Path) {
    copy_dir(&root().join("tests/fixtures/consumer-unified"), dir);
    std::fs::copy(root().join("pins.toml"), dir.join("pins.toml")).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "consumer"]);
}

/// Move the `serve` extra's DeepEP to another revision (line 16).
fn drift(dir: &Path) {
    let p = dir.join("pyproject.toml");
    let text = std::fs::read_to_string(&p).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    assert!(lines[15].contains(PINNED), "fixture line 16 is the serve pin: {}", lines[15]);
    lines[15] = lines[15].replace(PINNED, OTHER);
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
}

/// PATH with this build's deepep-forge first.
pub(crate) fn path_with_forge() -> String {
    let bin = crate::support::exe().to_path_buf();
    format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default())
}

pub(crate) fn pre_commit() -> Option<PathBuf> {
    let venv = tools_venv().map(|v| v.join("bin/pre-commit")).filter(|p| p.is_file());
    venv.or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join("pre-commit")).find(|p| p.is_file())
    })
}

fn try_repo(pre_commit: &Path, consumer: &Path, home: &Path) -> Output {
    try_repo_with(pre_commit, consumer, home, &[])
}

/// The shipped hook, run by pre-commit in `consumer` with `env` added (the user's own
/// variables: XDG_CONFIG_HOME, PATH, ...).
pub(crate) fn try_repo_with(pre_commit: &Path, consumer: &Path, home: &Path, env: &[(String, String)]) -> Output {
    Command::new(pre_commit)
        .args(["try-repo"])
        .arg(root())
        .args(["deepep-forge-lock-check", "--all-files", "--color", "never", "--verbose"])
        .current_dir(consumer)
        .env("PATH", path_with_forge())
        .env("PRE_COMMIT_HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("PIP_NO_INDEX", "1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("pre-commit runs")
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn pre_commit_hook_passes_a_consistent_project_and_fails_a_drifted_one() {
    let pre_commit = require!(pre_commit(), "pre-commit");
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("consumer");
    consumer(&repo);

    let ok = try_repo(&pre_commit, &repo, &t.path().join("home"));
    let text = stdout(&ok) + &stderr(&ok);
    assert!(ok.status.success(), "a consistent project passes:\n{text}");
    assert!(text.contains("deepep-forge lock check") && text.contains("Passed"), "{text}");

    drift(&repo);
    let bad = try_repo(&pre_commit, &repo, &t.path().join("home"));
    let text = stdout(&bad) + &stderr(&bad);
    assert_eq!(bad.status.code(), Some(1), "a drifted project fails:\n{text}");
    assert!(text.contains("Failed"), "{text}");
    assert!(
        text.contains("error[rev-mismatch]") && text.contains("--> pyproject.toml:16"),
        "shows the finding:\n{text}"
    );

    // files: only pins.toml, pyproject.toml, uv.lock and Dockerfiles trigger it
    let hooks = std::fs::read_to_string(root().join(".pre-commit-hooks.yaml")).unwrap();
    let files = hooks.lines().find_map(|l| l.trim().strip_prefix("files: ")).expect("a files: filter");
    let re = regex::Regex::new(files).unwrap();
    for hit in ["pyproject.toml", "uv.lock", "pins.toml", "Dockerfile", "docker/Dockerfile.ngc", "sub/uv.lock"] {
        assert!(re.is_match(hit), "{hit} triggers the hook");
    }
    for miss in ["README.md", "src/main.py", "uv.lock.bak", "mypyproject.toml.txt"] {
        assert!(!re.is_match(miss), "{miss} does not trigger the hook");
    }
}

struct Gh {
    _t: tempfile::TempDir,
    workspace: PathBuf,
    summary: PathBuf,
    output: PathBuf,
}

fn gh() -> Gh {
    let t = tempfile::tempdir().unwrap();
    let workspace = t.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    consumer(&workspace.join("proj"));
    std::fs::rename(workspace.join("proj/pins.toml"), workspace.join("pins.toml")).unwrap();
    let (summary, output) = (t.path().join("summary.md"), t.path().join("output"));
    Gh { _t: t, workspace, summary, output }
}

fn action(g: &Gh, project: &str, install: &str) -> Output {
    Command::new("bash")
        .arg(root().join("action/lock-check.sh"))
        .current_dir(root()) // the script itself moves to the workspace
        .env("PATH", path_with_forge())
        .env("GITHUB_WORKSPACE", &g.workspace)
        .env("GITHUB_STEP_SUMMARY", &g.summary)
        .env("GITHUB_OUTPUT", &g.output)
        .env("RUNNER_TEMP", g.workspace.parent().unwrap())
        .env("DEEPEP_FORGE_PROJECT", project)
        .env("DEEPEP_FORGE_PINS", "pins.toml")
        .env("DEEPEP_FORGE_INSTALL", install)
        .output()
        .expect("bash runs")
}

/// A project folder whose name carries backticks and Markdown: the summary
/// shows it as text (code spans fenced past its backticks, markdown escaped),
/// never as an image, a link or a broken table.
#[test]
fn the_summary_escapes_values_it_quotes() {
    let g = gh();
    let name = "p`![i](javascript:alert(1))`|<b>x";
    std::fs::rename(g.workspace.join("proj"), g.workspace.join(name)).unwrap();
    drift(&g.workspace.join(name));
    let bad = action(&g, name, "path");
    assert_eq!(bad.status.code(), Some(1), "{}{}", stdout(&bad), stderr(&bad));
    let summary =
        std::fs::read_to_string(&g.summary).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&bad), stderr(&bad)));
    let shown = "``p`![i](javascript:alert(1))`\\|<b>x";
    let header = summary.lines().nth(2).unwrap_or_default();
    assert!(header.starts_with(&format!("{shown}``")), "the project as one code span: {header}");
    let row = summary.lines().find(|l| l.contains("rev-mismatch")).unwrap_or_else(|| panic!("a row:\n{summary}"));
    assert!(row.contains(&format!("{shown}/pyproject.toml:16``")), "{row}");
    // Outside code spans nothing of the name is live Markdown or HTML.
    let outside: String = summary.split("``").step_by(2).collect();
    assert!(!outside.contains("](") && !outside.contains("<b>"), "{summary}");
    assert_eq!(row.matches(" | ").count() + 2, 6, "five cells, the name's `|` escaped: {row}");
}

#[test]
fn action_script_annotates_relative_to_the_workspace_and_writes_a_summary() {
    let g = gh();
    let ok = action(&g, "proj", "path");
    assert_eq!(ok.status.code(), Some(0), "{}{}", stdout(&ok), stderr(&ok));
    let summary = std::fs::read_to_string(&g.summary).unwrap();
    assert!(summary.starts_with("## deepep-forge lock check: passed"), "{summary}");
    assert!(summary.contains("0 error(s)"), "{summary}");
    assert_eq!(std::fs::read_to_string(&g.output).unwrap(), "exit-code=0\n");

    drift(&g.workspace.join("proj"));
    std::fs::remove_file(&g.summary).unwrap();
    std::fs::remove_file(&g.output).unwrap();
    // an absolute --project still annotates workspace-relative paths
    let abs = g.workspace.join("proj").display().to_string();
    let col =
        regex::Regex::new(r"^::error file=proj/pyproject\.toml,line=16,col=\d+,title=deepep-forge rev-mismatch[ :]")
            .unwrap();
    for project in ["proj", abs.as_str()] {
        let bad = action(&g, project, "path");
        let out = stdout(&bad);
        assert_eq!(bad.status.code(), Some(1), "{out}{}", stderr(&bad));
        let line = out
            .lines()
            .find(|l| l.starts_with("::error ") && l.contains("rev-mismatch"))
            .unwrap_or_else(|| panic!("an ::error annotation for rev-mismatch:\n{out}"));
        assert!(col.is_match(line), "file, line, column and title, relative to the workspace: {line}");
        assert!(line.contains(OTHER) || line.contains(&OTHER[..7]), "{line}");
    }
    let summary = std::fs::read_to_string(&g.summary).unwrap();
    assert!(summary.starts_with("## deepep-forge lock check: FAILED"), "{summary}");
    let row = summary.lines().find(|l| l.contains("`rev-mismatch`")).unwrap_or_else(|| panic!("a row:\n{summary}"));
    assert!(row.contains("`proj/pyproject.toml:16`") && row.contains(":x:"), "{row}");
    let cause = summary.lines().find(|l| l.starts_with("- **")).unwrap_or_else(|| panic!("the causes:\n{summary}"));
    assert!(cause.contains("deepep-forge pin set "), "a cause names its fix: {cause}");
    assert_eq!(std::fs::read_to_string(&g.output).unwrap(), "exit-code=1\nexit-code=1\n");

    let wrong = action(&g, "proj", "magic");
    assert_eq!(wrong.status.code(), Some(2));
    assert!(stdout(&wrong).contains("::error title=deepep-forge action::install must be"), "{}", stdout(&wrong));
}
