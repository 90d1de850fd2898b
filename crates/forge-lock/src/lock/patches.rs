//! `lock check`'s `hand-patched-deepep` rule: Dockerfile RUN lines, and the
//! scripts inside the project that they run (directly, or COPY'd into the
//! image first), that patch DeepEP's source before building it (`git apply`,
//! `patch`, `sed -i`, `curl ... | git apply`), each with file:line and the fix:
//! the patch into pins.toml. DeepEP context: the command names DeepEP (its
//! patch file or target), or runs after a `cd`/`pushd` into a DeepEP folder,
//! or inside a shell function named after DeepEP. Reads through
//! `dockerfile::instructions_named` and the project's tree (a script linked
//! out of the project is refused, exit 2); never applies, runs or fetches
//! anything. Must not judge anything but hand patches.
use std::path::{Path, PathBuf};

use anyhow::Result;

use forge_model::findings::{Finding, Severity};
use forge_os::fs::{Kind, Resolved, Tree};

use super::dockerfile::Dockerfile;

pub const RULE: &str = "hand-patched-deepep";
/// At most this many scripts read per Dockerfile.
const MAX_SCRIPTS: usize = 64;

/// The findings of every Dockerfile in `dockerfiles` and the project scripts
/// they run (`shown`: the project as messages name it).
pub fn check(dockerfiles: &[Dockerfile], project: &Tree, shown: &Path) -> Result<Vec<Finding>> {
    let mut out = Vec::new();
    for f in dockerfiles {
        let copies = copies(&f.text);
        let mut scripts = Vec::new();
        for (line, run) in forge_model::dockerfile::instructions_named(&f.text, "RUN") {
            let mounts = mounts(&run);
            for (_, cmd) in patch_commands(&run) {
                out.push(finding(&f.path, line, &cmd, &mounts));
            }
            for s in script_refs(&run) {
                match resolve(project, shown, &s, &copies)? {
                    Some(p) if !scripts.contains(&p) && scripts.len() < MAX_SCRIPTS => scripts.push(p),
                    _ => {}
                }
            }
        }
        for (rel, real) in &scripts {
            // A script the reader refuses (a FIFO, too big, not UTF-8) is skipped: it is not a Dockerfile.
            let Ok(body) = project.read_text(real.as_path(), forge_os::input::cap::TEXT) else { continue };
            for (line, cmd) in patch_commands(&body) {
                out.push(finding(&shown.join(rel), line, &cmd, &[]));
            }
        }
    }
    Ok(out)
}

fn finding(file: &Path, line: usize, cmd: &str, mounts: &[(String, String)]) -> Finding {
    let cmd = forge_os::input::excerpt(cmd.trim(), 120);
    let from = mounts.iter().find(|(_, target)| cmd.contains(target.as_str())).map(|(src, _)| src.clone());
    let save = match &from {
        Some(src) => format!("move {src} beside pins.toml (e.g. patches/deepep.patch)"),
        None => "save the change as a patch file beside pins.toml (`git diff > patches/deepep.patch` in the patched DeepEP tree)".into(),
    };
    Finding::new(
        RULE,
        Severity::Warning,
        file,
        format!(
            "patches DeepEP's source by hand before building it (`{cmd}`): the wheel is not the pinned commit, its label says it is, and nothing records the patch"
        ),
    )
    .line(line)
    .fix(format!(
        "move the patch into pins.toml: {save}, list it under [pin.<arch>] as patches = [\"patches/deepep.patch\"], and build with deepep-forge (the plan lists it, the label says patched, verify rebuilds it)"
    ))
}

/// Each command that patches DeepEP: (1-based line in `text`, the command).
pub fn patch_commands(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut dirs: Vec<bool> = vec![false];
    let mut in_function = false;
    for (n, line) in logical_lines(text) {
        let t = line.trim();
        if let Some(name) = function_name(t) {
            in_function = mentions_deepep(name);
        } else if t == "}" {
            in_function = false;
        }
        for pipeline in commands(&line) {
            let found = pipeline.split('|').map(str::trim).any(|cmd| {
                let words: Vec<String> = cmd.split_whitespace().map(unquote).collect();
                is_patch(&words)
            });
            let words: Vec<String> = pipeline.split_whitespace().map(unquote).collect();
            let Some(first) = words.first() else { continue };
            match first.as_str() {
                "cd" | "pushd" => {
                    let deep = words.get(1).is_some_and(|d| mentions_deepep(d));
                    if first == "cd" {
                        *dirs.last_mut().expect("never empty") = deep;
                    } else {
                        dirs.push(deep);
                    }
                }
                "popd" if dirs.len() > 1 => {
                    dirs.pop();
                }
                _ => {}
            }
            let here = *dirs.last().expect("never empty") || in_function;
            if found && (here || mentions_deepep(pipeline)) {
                out.push((n, pipeline.to_string()));
                break;
            }
        }
    }
    out
}

/// `git [-C dir] apply`, `patch`, `sed -i` / `sed --in-place`.
fn is_patch(words: &[String]) -> bool {
    match words.first().map(String::as_str) {
        Some("git") => words.iter().skip(1).take(4).any(|w| w == "apply"),
        Some("patch") => true,
        Some("sed") => words.iter().any(|w| w.starts_with("-i") || w.starts_with("--in-place")),
        _ => false,
    }
}

fn mentions_deepep(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    l.contains("deepep") || l.contains("deep_ep") || l.contains("deep-ep")
}

/// `name() {` or `function name {`: the function's name.
fn function_name(line: &str) -> Option<&str> {
    let l = line.strip_prefix("function ").unwrap_or(line);
    let (name, rest) = l.split_once(['(', ' ', '{'])?;
    let named = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (named && (rest.starts_with(')') || line.starts_with("function ")) && line.trim_end().ends_with('{'))
        .then_some(name)
}

/// Physical lines with backslash continuations joined, each with its first line's number.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (i, l) in text.lines().enumerate() {
        let (body, cont) = match l.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (l, false),
        };
        match (open, out.last_mut()) {
            (true, Some(last)) => {
                last.1.push(' ');
                last.1.push_str(body);
            }
            _ => out.push((i + 1, body.to_string())),
        }
        open = cont;
    }
    out
}

/// The pipelines of a line: split at `&&`, `||`, `;`, a leading `then`/`do`/`else` dropped.
fn commands(line: &str) -> Vec<&str> {
    line.split("&&")
        .flat_map(|s| s.split("||"))
        .flat_map(|s| s.split(';'))
        .map(|c| {
            let c = c.trim();
            ["then ", "do ", "else "].iter().fold(c, |c, k| c.strip_prefix(k).unwrap_or(c)).trim()
        })
        .filter(|c| !c.is_empty() && !c.starts_with('#'))
        .collect()
}

fn unquote(w: &str) -> String {
    w.trim_matches(|c| c == '"' || c == '\'').to_string()
}

/// `--mount=type=bind,source=X,target=Y` of a RUN: (X, Y).
fn mounts(run: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for w in run.split_whitespace().filter_map(|w| w.strip_prefix("--mount=")) {
        let field = |k: &str| {
            w.split(',').find_map(|kv| kv.split_once('=').filter(|(key, _)| *key == k).map(|(_, v)| v.to_string()))
        };
        let src = field("source").or_else(|| field("src"));
        let dst = field("target").or_else(|| field("dst")).or_else(|| field("destination"));
        if let (Some(s), Some(d)) = (src, dst) {
            out.push((s, d));
        }
    }
    out
}

/// `COPY src... dest` without `--from` (files of the build context): (src, dest) pairs.
fn copies(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (_, args) in forge_model::dockerfile::instructions_named(text, "COPY") {
        let words: Vec<String> = args.split_whitespace().map(unquote).collect();
        if words.iter().any(|w| w.starts_with("--from")) {
            continue;
        }
        let plain: Vec<&String> = words.iter().filter(|w| !w.starts_with("--")).collect();
        if let Some((dest, srcs)) = plain.split_last() {
            out.extend(srcs.iter().map(|s| (s.to_string(), dest.to_string())));
        }
    }
    out
}

/// The shell scripts a RUN names (`*.sh` words).
fn script_refs(run: &str) -> Vec<String> {
    run.split_whitespace().map(unquote).filter(|w| w.ends_with(".sh") && !w.contains("://")).collect()
}

/// A script the image runs, as a file of the project: through a COPY that puts it
/// there, else the same path in the project; a regular file, its name and where
/// its links lead inside the project. One linked out of the project is refused.
fn resolve(
    project: &Tree,
    shown: &Path,
    script: &str,
    copies: &[(String, String)],
) -> Result<Option<(PathBuf, PathBuf)>> {
    let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let copied = copies.iter().find_map(|(src, dest)| {
        let into_dir = dest.ends_with('/') && format!("{dest}{}", base(src)) == script;
        (dest == script || into_dir).then(|| src.clone())
    });
    let rel = copied.unwrap_or_else(|| script.to_string());
    let rel = rel.trim_start_matches("./").trim_start_matches('/');
    if rel.is_empty() || rel.split('/').any(|p| p == "..") {
        return Ok(None);
    }
    match project.resolve(rel).unwrap_or_else(|_| Resolved::Inside(PathBuf::new())) {
        Resolved::Inside(real) if real.as_os_str().is_empty() => Ok(None),
        Resolved::Outside { link, target } => Err(super::dockerfile::outside(shown, &link, &target)),
        Resolved::Inside(real) => {
            Ok(matches!(project.kind(&real)?, Kind::File { .. }).then(|| (PathBuf::from(rel), real)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_commands_in_deepep_context_only() {
        let run = "git clone https://github.com/deepseek-ai/DeepEP.git && pushd DeepEP && git checkout FETCH_HEAD && patch -p1 < /opt/x.patch && popd";
        assert_eq!(patch_commands(run).len(), 1);
        // nvshmem's own patch is not DeepEP's source.
        assert!(patch_commands("pushd nvshmem_src && git apply -vvv nvshmem.patch && popd").is_empty());
        assert_eq!(patch_commands("curl -L https://x/deepep-fix.diff | git apply").len(), 1);
        let script = "deepep_fix() {\n    sed -i \"s|a|b|\" setup.py\n}\nother() {\n    sed -i s/a/b/ setup.py\n}\n";
        assert_eq!(patch_commands(script), vec![(2, "sed -i \"s|a|b|\" setup.py".to_string())]);
        assert_eq!(
            patch_commands("cd DeepEP && curl -fsSL https://x/fix.diff | git apply")[0].1,
            "curl -fsSL https://x/fix.diff | git apply"
        );
        assert_eq!(
            patch_commands("cd DeepEP && curl -fsSL https://x/fix.diff | git apply")[0].1,
            "curl -fsSL https://x/fix.diff | git apply"
        );
        assert_eq!(patch_commands("git -C DeepEP apply ../fix.patch").len(), 1);
        assert!(patch_commands("cd DeepEP && pip install --no-build-isolation .").is_empty());
    }

    #[test]
    fn mounts_and_copies() {
        assert_eq!(
            mounts("--mount=type=bind,source=docker/patches/deepep.patch,target=/opt/deepep.patch \\ true"),
            vec![("docker/patches/deepep.patch".into(), "/opt/deepep.patch".into())]
        );
        assert_eq!(
            copies("FROM x\nCOPY tools/a.sh /tmp/a.sh\nCOPY --from=b /x /y\n"),
            vec![("tools/a.sh".into(), "/tmp/a.sh".into())]
        );
    }
}
