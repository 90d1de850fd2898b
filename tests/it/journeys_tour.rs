//! J12 of issue 56: README.md's tour from a fresh clone, offline. The
//! README's ```console blocks (parsed from the page, never copied here) run in
//! a copy of the checkout's tracked files, one bash per block, with uv offline
//! (`UV_OFFLINE=1`, no Python downloads, its cache in the temp folder) and git
//! allowed only local transports (`GIT_ALLOW_PROTOCOL=file`): DeepEP's URL (and
//! its NCCL submodule's, beside it) resolve through `url.<local>.insteadOf` to
//! local repositories of the tests/fixtures/mini-deepep commit the demo pins
//! name. Every `next:` and `fix:` any command prints (its full output, not the
//! page's elided one) then runs exactly as printed (`support::sh_printed`) in
//! the clone, the folder the user is in, and so on for what those print.
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;

const DEEPEP_URL: &str = "https://github.com/deepseek-ai/DeepEP.git";
/// `../mini-nccl` of mini-deepep's .gitmodules, resolved against DEEPEP_URL.
const NCCL_URL: &str = "https://github.com/deepseek-ai/mini-nccl";

/// A copy of the checkout's tracked files (as they are in the work tree) in `dest`.
fn fresh_clone(dest: &Path) {
    let root = support::root();
    let listed = support::git(&root, &["ls-files", "-z"]);
    for f in listed.split('\0').filter(|f| !f.is_empty()) {
        let from = root.join(f);
        if !from.is_file() {
            continue; // deleted in the work tree, or a submodule
        }
        let to = dest.join(f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, &to).unwrap();
    }
}

/// A bare repository at `dest` whose `main` is `rev` of `from`.
fn bare_with(from: &Path, rev: &str, dest: &Path) {
    support::git(dest.parent().unwrap(), &["init", "-q", "--bare", "-b", "main", dest.to_str().unwrap()]);
    support::git(from, &["push", "-q", dest.to_str().unwrap(), &format!("{rev}:refs/heads/main")]);
}

/// The one commit under `refs/snapshots/` of the snapshot repository `repo`.
fn snapshot_commit(repo: &Path) -> String {
    let refs = support::git(repo, &["for-each-ref", "--format=%(objectname)", "refs/snapshots/"]);
    let mut revs: Vec<&str> = refs.lines().collect();
    revs.dedup();
    assert_eq!(revs.len(), 1, "one snapshot in {}: {refs}", repo.display());
    revs[0].to_string()
}

/// The tour's machine: the clone, the user's environment (offline).
struct Tour {
    _tmp: tempfile::TempDir,
    clone: PathBuf,
    env: Vec<(String, String)>,
}

impl Tour {
    fn new() -> Tour {
        let tools = support::tools_venv().unwrap_or_else(|| support::missing("the tools venv"));
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().to_path_buf();
        let clone = t.join("clone");
        fresh_clone(&clone);
        // .ci/setup-tools' venv, where the README names it.
        std::fs::create_dir_all(clone.join("target")).unwrap();
        std::os::unix::fs::symlink(&tools, clone.join("target/tools-venv")).unwrap();
        for d in ["home", "tmp", "state", "config"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        let mut tour = Tour { _tmp: tmp, clone, env: Vec::new() };
        let path = format!(
            "{}:{}:/usr/local/bin:/usr/bin:/bin",
            support::exe().parent().unwrap().display(),
            tools.join("bin").display()
        );
        let dir = |d: &str| t.join(d).display().to_string();
        tour.env = vec![
            ("HOME".into(), dir("home")),
            ("USER".into(), std::env::var("USER").unwrap_or_else(|_| "tour".into())),
            ("LANG".into(), "C.UTF-8".into()),
            ("PATH".into(), path),
            ("NO_COLOR".into(), "1".into()),
            ("COLUMNS".into(), "100".into()),
            ("TMPDIR".into(), dir("tmp")),
            ("XDG_STATE_HOME".into(), dir("state")),
            ("XDG_CONFIG_HOME".into(), dir("config")),
            ("DEEPEP_FORGE_HEARTBEAT_SECS".into(), "3600".into()),
            ("DEEPEP_FORGE_CACHE_DIR".into(), dir("seed-cache")),
            // Offline: uv neither downloads a Python nor reaches an index.
            ("UV_OFFLINE".into(), "1".into()),
            ("UV_PYTHON_DOWNLOADS".into(), "never".into()),
            ("UV_CACHE_DIR".into(), dir("uv-cache")),
            // git (under deepep-forge and uv): local transports only.
            ("GIT_ALLOW_PROTOCOL".into(), "file".into()),
        ];
        // DeepEP's stand-in at the demo pins' commit: the snapshot the tool makes
        // of tests/fixtures/mini-deepep (mini-nccl as its third-party/nccl), in a
        // cache of its own, served as DEEPEP_URL (and its submodule's URL).
        let python = tools.join("bin/python").display().to_string();
        let o = tour
            .sh(&format!(
                "deepep-forge plan --pins tests/fixtures/demo-pins.toml --source tests/fixtures/mini-deepep --variant demo-multinode --python {python}"
            ))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}{}", support::stdout(&o), support::stderr(&o));
        let snaps: Vec<PathBuf> = std::fs::read_dir(t.join("seed-cache/git/snapshots"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("source.git").is_dir())
            .collect();
        assert_eq!(snaps.len(), 1, "{snaps:?}");
        let rev = snapshot_commit(&snaps[0].join("source.git"));
        let pins = std::fs::read_to_string(tour.clone.join("tests/fixtures/demo-pins.toml")).unwrap();
        assert!(pins.contains(&format!("rev = \"{rev}\"")), "the demo pins name the snapshot {rev}");
        bare_with(&snaps[0].join("source.git"), &rev, &t.join("DeepEP.git"));
        let nccl = snaps[0].join("mini-nccl");
        bare_with(&nccl, &snapshot_commit(&nccl), &t.join("mini-nccl.git"));
        tour.env.retain(|(k, _)| k != "DEEPEP_FORGE_CACHE_DIR");
        tour.env.extend([
            ("DEEPEP_FORGE_CACHE_DIR".into(), dir("cache")),
            ("GIT_CONFIG_COUNT".into(), "2".into()),
            ("GIT_CONFIG_KEY_0".into(), format!("url.file://{}.insteadOf", t.join("DeepEP.git").display())),
            ("GIT_CONFIG_VALUE_0".into(), DEEPEP_URL.into()),
            ("GIT_CONFIG_KEY_1".into(), format!("url.file://{}.insteadOf", t.join("mini-nccl.git").display())),
            ("GIT_CONFIG_VALUE_1".into(), NCCL_URL.into()),
            // the user's opt-in to local mirrors of repositories named in files
            ("DEEPEP_FORGE_GIT_ALLOW_LOCAL".into(), "1".into()),
        ]);
        tour
    }

    /// `sh` (bash for `script`) in the clone with the user's environment and nothing else.
    fn command(&self, shell: &str) -> Command {
        let mut c = Command::new(shell);
        c.env_clear().current_dir(&self.clone).envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    fn sh(&self, script: &str) -> Command {
        let mut c = self.command("bash");
        c.arg("-c").arg(script);
        c
    }

    /// One block's commands in one bash: (command, output, exit status) per step.
    fn block(&self, commands: &[String]) -> Vec<(String, String, i32)> {
        const MARK: &str = "\u{1e}tour-step";
        let mut script = String::from("exec 2>&1\n");
        for c in commands {
            script.push_str(&format!("{c}\n__s=$?; printf '\\n{MARK} %d\\n' \"$__s\"; (exit $__s)\n"));
        }
        let o = self.sh(&script).output().unwrap();
        let text = support::stdout(&o);
        let mut rest = text.as_str();
        let mut out = Vec::new();
        for c in commands {
            let at = rest.find(MARK).unwrap_or_else(|| panic!("`{c}` did not finish: {rest}"));
            let (body, tail) = rest.split_at(at);
            let (code, tail) = tail[MARK.len()..].split_once('\n').unwrap_or(("", ""));
            out.push((c.clone(), body.trim_end().to_string(), code.trim().parse().unwrap_or(-1)));
            rest = tail;
        }
        out
    }
}

/// The `next:` and `fix:` lines of `output`: (kind, the command as printed).
/// The probe's fixes carry a label (`rebuild: deepep-forge ...`): the command is what follows it.
fn printed(output: &str) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    for line in output.lines().map(str::trim) {
        for kind in ["next", "fix"] {
            let Some(rest) = line.strip_prefix(kind).and_then(|r| r.strip_prefix(": ")) else { continue };
            let command = match rest.split_once(": ") {
                Some((label, cmd)) if label == "rebuild" => cmd,
                _ => rest,
            };
            found.push((kind, command.to_string()));
        }
    }
    found
}

/// `line` with each placeholder in the documented form `'<NAME>'` filled from `values`;
/// a `<` in any other form fails the test.
fn filled(line: &str, values: &[(&str, String)]) -> String {
    let mut line = line.to_string();
    for (name, value) in values {
        line = line.replace(&format!("'<{name}>'"), value);
    }
    assert!(!line.contains('<'), "a placeholder the tour has no value for, or not in the form '<NAME>': {line}");
    line
}

#[test]
#[cfg_attr(
    not(feature = "needs-ibverbs"),
    ignore = "needs system package libibverbs-dev (sudo .ci/setup-system) and the tools venv: bash .ci/run runs it when present"
)]
fn j12_the_readme_tour_runs_offline_with_every_printed_next_and_fix() {
    let root = support::root();
    let status_before = support::git(&root, &["--no-optional-locks", "status", "--porcelain", "--untracked-files=all"]);
    let tour = Tour::new();

    // The README's console blocks up to the end of the tour: the tour builds on
    // the main job's wheel (dist/deep_ep-*.whl).
    let page = std::fs::read_to_string(tour.clone.join("README.md")).unwrap();
    let lines: Vec<&str> = page.lines().collect();
    let tour_at = lines.iter().position(|l| *l == "## A tour").expect("README.md has `## A tour`");
    let tour_end =
        lines[tour_at + 1..].iter().position(|l| l.starts_with("## ")).map_or(lines.len(), |e| tour_at + 1 + e);
    let blocks: Vec<_> =
        crate::docs::blocks(&lines).into_iter().filter(|b| b.lang == "console" && b.start < tour_end).collect();
    assert!(blocks.iter().filter(|b| b.start > tour_at).count() >= 6, "the tour's console blocks");

    let mut todo: Vec<(&str, String, String)> = Vec::new(); // (kind, command, who printed it)
    for b in &blocks {
        let commands: Vec<String> = b.steps.iter().map(|s| s.command.clone()).collect();
        let ran = tour.block(&commands);
        for (k, (cmd, said, code)) in ran.iter().enumerate() {
            eprintln!("$ {cmd}\n{said}\n(exit {code})");
            let shows_status = commands.get(k + 1).is_some_and(|n| n.trim() == "echo $?");
            // A check that reports findings exits 1, shown on the page with `echo $?`.
            assert!(
                *code == 0 || (shows_status && *code == 1),
                "README.md:{}: `{cmd}` exited {code}:\n{said}",
                b.start
            );
            todo.extend(printed(said).into_iter().map(|(kind, c)| (kind, c, cmd.clone())));
        }
    }
    // What the tour prints for the user to run next (each checked below).
    let kinds: Vec<String> = todo.iter().map(|(k, c, _)| format!("{k}: {c}")).collect();
    let has = |what: &str| kinds.iter().any(|k| k.contains(what));
    assert!(has("fix: deepep-forge pin set ") && has("--no-pins --relock"), "lock check's fix: {kinds:#?}");
    assert!(
        has("next: uv lock --project ") && has("&& deepep-forge lock check --project "),
        "pin set's next: {kinds:#?}"
    );
    assert!(has("fix: deepep-forge build-wheel ") && has("--variant demo-multinode"), "probe's fix: {kinds:#?}");

    // Every printed line, exactly as printed, in the clone; then what those print.
    let values: Vec<(&str, String)> = Vec::new();
    let mut done: Vec<(String, i32)> = Vec::new();
    while let Some((kind, line, from)) = (!todo.is_empty()).then(|| todo.remove(0)) {
        if done.iter().any(|(l, _)| *l == line) {
            continue;
        }
        assert!(done.len() < 20, "printed commands keep printing more: {done:?}");
        let run = filled(&line, &values);
        let (code, said) = support::sh_printed(tour.command("sh"), &run);
        assert_eq!(code, 0, "{kind}: `{line}` (printed by `{from}`) as printed: {said}");
        assert!(!said.contains("not found"), "`{line}`: {said}");
        todo.extend(printed(&said).into_iter().map(|(k, c)| (k, c, line.clone())));
        done.push((line, code));
    }
    eprintln!("ran as printed: {done:#?}");

    // What they did: the split project is on one revision, the multi-node wheel beside demo's.
    let o = tour.sh("deepep-forge lock check --project tests/fixtures/tour-split --no-pins").output().unwrap();
    assert!(o.status.success(), "after its fix: {}{}", support::stdout(&o), support::stderr(&o));
    let wheels = |d: &str| -> Vec<String> {
        std::fs::read_dir(tour.clone.join(d))
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".whl"))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(wheels("dist").len(), 1, "demo's wheel stays: {:?}", wheels("dist"));
    assert_eq!(wheels("dist/demo-multinode").len(), 1, "the rebuild's wheel: {:?}", wheels("dist/demo-multinode"));

    let status_after = support::git(&root, &["--no-optional-locks", "status", "--porcelain", "--untracked-files=all"]);
    assert_eq!(status_after, status_before, "the tour wrote into the checkout");
}
