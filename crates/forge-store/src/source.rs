//! The source of a build: a bare mirror per repository under the cache dir,
//! the pinned revision fetched into it, and a fresh checkout per build
//! (DeepEP's `deep_ep/backend` copy and setuptools' `build/` leak between
//! builds of one tree, so a tree is never reused). A `--source` folder that is
//! not the top of a git repository is snapshotted into a commit with a fixed
//! identity and date, so the same files always give the same sha; the
//! submodules its `.gitmodules` declares become gitlinks to snapshots of the
//! sibling folders their `../NAME` urls name (`source/gitmodules.rs`).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cache::{self, Cache};
use forge_os::error::Failure;
use forge_os::fs::{File, Tree};
use forge_os::process::git::Trust;
use forge_os::process::{self, Cmd};

pub mod gitmodules;

/// Identity and date of a directory snapshot commit (fixed: same files, same sha).
const SNAPSHOT_DATE: &str = "2000-01-01T00:00:00Z";

/// A hardened git command for work inside our own repositories (no transport).
pub fn git(dir: &Path, purpose: impl Into<String>) -> Cmd {
    process::git::git(dir, Trust::File, purpose)
}

/// How far git may trust `repo` when fetching from it (and its submodules):
/// pins.toml's repo is validated as a remote URL when the file is read, so
/// anything else (a local path, `file://`) came from `--source`, the user's
/// command line, and may use local transports.
pub fn trust_of(repo: &str) -> Trust {
    if process::git::check_file_url(repo).is_ok() {
        Trust::File
    } else {
        Trust::User
    }
}

/// A hardened git command that talks to `repo`.
fn git_remote(dir: &Path, repo: &str, purpose: impl Into<String>) -> Cmd {
    process::git::git(dir, trust_of(repo), purpose)
}

/// Where the source comes from: the repo URL/path git fetches, and for a
/// snapshotted folder the folder itself.
#[derive(Debug, Clone)]
pub struct Origin {
    pub repo: String,
    /// For a snapshotted folder: the folder and the snapshot's commit.
    pub snapshot_of: Option<(PathBuf, String)>,
}

/// Resolve `--source` (or the pins' repo): a local folder that is not the top
/// of a git repository is committed into `<cache>/git/snapshots/...` first.
pub fn resolve(source: &str, cache: &Path) -> Result<Origin> {
    // Not a folder (a URL, a missing path, a file): git is given it as written.
    let Ok(Some(src)) = Tree::open_if_exists(Path::new(source), "--source folder") else {
        return Ok(Origin { repo: source.to_string(), snapshot_of: None });
    };
    let abs = src.real_path().with_context(|| format!("resolving --source {source}"))?;
    let is_repo_top = src.exists(".git") || (src.is_file("HEAD") && src.is_dir("objects"));
    if is_repo_top {
        return Ok(Origin { repo: abs.to_string_lossy().into_owned(), snapshot_of: None });
    }
    let (repo, sha) = snapshot(&src, &abs, &Cache::at(cache))?;
    Ok(Origin { repo: repo.to_string_lossy().into_owned(), snapshot_of: Some((abs, sha)) })
}

/// Commit the files of `src` (at `dir`, its real path; its .gitignore
/// honoured) into a bare repository with a fixed author, committer and date;
/// returns the repository and commit. The submodules its `.gitmodules`
/// declares ([`gitmodules`]) are committed as gitlinks to snapshots of the
/// sibling folders their urls name, each in a bare repository where git
/// resolves that url beside this one.
fn snapshot(src: &Tree, dir: &Path, cache: &Cache) -> Result<(PathBuf, String)> {
    let declared = gitmodules::declared(src)?;
    let home = Path::new("git/snapshots").join(short_hash(&dir.to_string_lossy()));
    let home = cache::make_sub(cache.tree()?, home, "snapshot folder")?;
    let _lock = cache::lock::exclusive_in(&home, "source.lock")?;
    let mut links = Vec::new();
    for d in &declared {
        let sub = cache::make_sub(&home, d.url.trim_start_matches("../"), "snapshot repository")?;
        let sha = commit_folder(&d.folder, &sub, &[])
            .with_context(|| format!("snapshotting {} for the submodule {} ({})", d.folder.display(), d.path, d.url))?;
        links.push((d.path.clone(), sha));
    }
    let repo = cache::make_sub(&home, "source.git", "snapshot repository")?;
    let sha = commit_folder(dir, &repo, &links)?;
    Ok((repo.path().to_path_buf(), sha))
}

/// Commit `dir`'s files and the gitlinks `links` (path, commit) into the bare
/// `repo` (initialised when empty) with the fixed identity and date; the caller
/// holds the lock. Returns the commit.
fn commit_folder(dir: &Path, repo: &Tree, links: &[(String, String)]) -> Result<String> {
    if !repo.exists("HEAD") {
        git(repo.path(), "create snapshot repository").args(["init", "-q", "--bare"]).output()?;
    }
    // The index persists between snapshots, so `git add` only rehashes changed files.
    let index = repo.join("snapshot.index");
    let with_env = |c: &mut Cmd| {
        c.cmd
            .env("GIT_DIR", repo.path())
            .env("GIT_WORK_TREE", dir)
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_AUTHOR_NAME", "deepep-forge snapshot")
            .env("GIT_AUTHOR_EMAIL", "snapshot@deepep-forge.invalid")
            .env("GIT_COMMITTER_NAME", "deepep-forge snapshot")
            .env("GIT_COMMITTER_EMAIL", "snapshot@deepep-forge.invalid")
            .env("GIT_AUTHOR_DATE", SNAPSHOT_DATE)
            .env("GIT_COMMITTER_DATE", SNAPSHOT_DATE);
    };
    let mut add = git(dir, format!("snapshot {}", dir.display()));
    add.args(["-c", "core.excludesFile=/dev/null", "-c", "core.autocrlf=false", "add", "-A", "."]);
    with_env(&mut add);
    add.output()?;
    for (path, sha) in links {
        // The path was checked (plain names, nothing there), the sha is the sibling's snapshot.
        let mut link = git(dir, format!("record the submodule {path}"));
        link.args(["update-index", "--add", "--cacheinfo", &format!("160000,{sha},{path}")]);
        with_env(&mut link);
        link.output()?;
    }
    let mut tree = git(dir, "write snapshot tree");
    tree.args(["write-tree"]);
    with_env(&mut tree);
    let tree = tree.output()?.trim().to_string();
    // `<tree> <commit>` of the last snapshot: the same tree is the same commit.
    let last = repo
        .read_text_opt("snapshot.last", forge_os::input::cap::TEXT)
        .ok()
        .flatten()
        .and_then(|l| l.trim().split_once(' ').map(|(t, c)| (t.to_string(), c.to_string())));
    if let Some((t, c)) = last {
        if t == tree {
            return Ok(c);
        }
    }
    let mut commit = git(dir, "commit snapshot");
    commit.args(["commit-tree", &tree, "-m", "deepep-forge snapshot"]);
    with_env(&mut commit);
    let sha = commit.output()?.trim().to_string();
    let mut refup = git(dir, "record snapshot");
    refup.args(["update-ref", &format!("refs/snapshots/{sha}"), &sha]);
    with_env(&mut refup);
    refup.output()?;
    repo.write("snapshot.last", format!("{tree} {sha}\n").as_bytes())?;
    Ok(sha)
}

/// First 16 hex of sha256(text): stable names for mirrors and snapshots.
pub fn short_hash(text: &str) -> String {
    hex::encode(&forge_os::input::sha256(text.as_bytes())[..8])
}

/// An exclusive lock file, held until dropped; waits (checking for Ctrl-C).
pub fn lock(path: &Path) -> Result<File> {
    cache::lock::exclusive(path)
}

/// The mirror `mirror` (made when absent) as a tree, with the folder it lies
/// in (the cache's `git/`) and the name of its lock file there (`<name>.lock`).
fn mirror_tree(mirror: &Path) -> Result<(Tree, Tree, String)> {
    let name =
        mirror.file_name().and_then(|n| n.to_str()).with_context(|| format!("{} names no mirror", mirror.display()))?;
    let lock = mirror.with_extension("lock").file_name().and_then(|n| n.to_str()).unwrap_or("mirror.lock").to_string();
    let parent = mirror.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let parent = Tree::create(parent, "git mirrors folder")?;
    let tree = cache::make_sub(&parent, name, "git mirror")?;
    Ok((parent, tree, lock))
}

/// The bare mirror of `repo` under the cache dir.
pub fn mirror_path(cache: &Path, repo: &str) -> PathBuf {
    let name: String = repo
        .trim_end_matches('/')
        .trim_end_matches(".git")
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("repo")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    cache.join("git").join(format!("{name}-{}.git", short_hash(repo)))
}

/// Make sure `rev` is in the mirror of `repo` (fetch it if not); returns the
/// commit time. Unreachable repo: exit 3; rev not in repo: exit 2.
pub fn ensure_rev(mirror: &Path, repo: &str, rev: &str) -> Result<i64> {
    let (parent, tree, lock_name) = mirror_tree(mirror)?;
    let _lock = cache::lock::exclusive_in(&parent, lock_name)?;
    if !tree.exists("HEAD") {
        git(mirror, "create mirror").args(["init", "-q", "--bare"]).output()?;
    }
    // Reading the commit doubles as the presence check. `show -s` reads that one
    // commit only, so a shallow source (parents absent) works too.
    let commit = format!("{rev}^{{commit}}");
    let time_of =
        || git(mirror, "read commit time").args(["show", "-s", "--format=%ct", "--end-of-options", &commit]).output();
    let commit_time = match time_of() {
        Ok(t) => t,
        Err(_) => {
            forge_os::error::check_interrupted()?;
            // Fetch by sha first (GitHub allows it); fall back to every ref for servers that refuse.
            let by_sha = git_remote(mirror, repo, format!("fetch {rev} from {repo}"))
                .args(["fetch", "-q", "--no-tags", "--update-shallow", "--end-of-options", repo, rev])
                .output();
            if by_sha.is_err() && !has_commit(mirror, rev) {
                forge_os::error::check_interrupted()?;
                let all = git_remote(mirror, repo, format!("fetch {repo}"))
                    .args([
                        "fetch",
                        "-q",
                        "--no-tags",
                        "--update-shallow",
                        "--end-of-options",
                        repo,
                        "+refs/*:refs/forge/*",
                    ])
                    .output();
                if let Err(e) = all {
                    forge_os::error::check_interrupted()?;
                    return Err(Failure::env(format!("cannot fetch {rev} from {repo}: {e:#}"))
                        .hint("check the URL and the network, or pass --source PATH|URL with a local mirror of the repository")
                        .into());
                }
            }
            if !has_commit(mirror, rev) {
                return Err(Failure::usage(format!("revision {rev} is not in {repo}"))
                    .hint("check the rev in pins.toml (a full 40-hex commit of that repository) or point --source at a repository that has it")
                    .into());
            }
            git(mirror, "keep the pinned rev")
                .args(["update-ref", "--end-of-options", &format!("refs/pins/{rev}"), rev])
                .output()?;
            time_of()?
        }
    };
    commit_time.trim().parse::<i64>().context("commit time")
}

/// The ref namespace a fork's upstream branch is fetched into, in the fork's
/// mirror (beside `refs/pins/` and `refs/forge/`, never mixed with them).
pub const UPSTREAM_REFS: &str = "refs/deepep-forge/upstream/";

/// Where the pinned commit `rev` (already in `mirror`) stands on `upstream`:
/// its branch is fetched into the same mirror under [`UPSTREAM_REFS`] (the
/// way the pin is: one ref, no tags, no prompt, interruptible; pins.toml's
/// rules for the URL), then `git merge-base` and `git rev-list --count`.
/// No merge base within the fetched history (a shallow mirror, unrelated
/// histories) is recorded as such, never guessed. Unreachable upstream or
/// missing branch: exit 3.
pub fn fork_of(
    mirror: &Path,
    rev: &str,
    upstream: &forge_model::pins::Upstream,
) -> Result<forge_wheel::provenance::Fork> {
    // pins.toml checked the name; checked again here, since it becomes part of a refspec.
    forge_model::pins::check_branch_name(&upstream.branch)
        .map_err(|why| Failure::usage(format!("upstream_branch `{}`: {why}", upstream.branch)))?;
    let local = format!("{UPSTREAM_REFS}{}", upstream.branch);
    {
        let _lock = lock(&mirror.with_extension("lock"))?;
        forge_os::error::check_interrupted()?;
        let spec = format!("+refs/heads/{}:{local}", upstream.branch);
        git_remote(mirror, &upstream.repo, format!("fetch {} of upstream {}", upstream.branch, upstream.repo))
            .args(["fetch", "-q", "--no-tags", "--update-shallow", "--end-of-options", &upstream.repo, &spec])
            .output()
            .map_err(|e| {
                Failure::env(format!(
                    "cannot fetch branch {} of the upstream {}: {e:#}",
                    upstream.branch, upstream.repo
                ))
                .hint("check [source] upstream and upstream_branch in pins.toml and the network; offline, point git's url.<base>.insteadOf at a local mirror and set DEEPEP_FORGE_GIT_ALLOW_LOCAL=1")
            })?;
    }
    let base = git(mirror, "merge base of the pin and upstream")
        .args(["merge-base", "--end-of-options", rev, &local])
        .capture()?;
    let merge_base = match base.status.code() {
        Some(0) => Some(String::from_utf8_lossy(&base.stdout).trim().to_string()),
        // 1: no common ancestor in the history the mirror holds.
        Some(1) if base.stderr.is_empty() => None,
        _ => anyhow::bail!(
            "git merge-base {rev} {local} failed ({}): {}",
            base.status,
            String::from_utf8_lossy(&base.stderr).trim()
        ),
    };
    let ahead = match &merge_base {
        Some(b) => {
            let n = git(mirror, "count the fork's commits")
                .args(["rev-list", "--count", &format!("{b}..{rev}"), "--"])
                .output()?;
            Some(n.trim().parse::<u64>().context("git rev-list --count")?)
        }
        None => None,
    };
    Ok(forge_wheel::provenance::Fork {
        upstream: upstream.repo.clone(),
        upstream_branch: upstream.branch.clone(),
        merge_base,
        ahead,
    })
}

/// The text of `path` at `rev` in the mirror (`git show`, never a checkout);
/// None when absent, not UTF-8 or over 1 MiB.
pub fn show(mirror: &Path, rev: &str, path: &str) -> Option<String> {
    let out = git(mirror, format!("read {path} at {rev}"))
        .args(["show", "--end-of-options", &format!("{rev}:{path}")])
        .output()
        .ok()?;
    (out.len() <= 1 << 20).then_some(out)
}

/// The files and gitlinks of one revision in a mirror (read with `git show` / `git ls-tree`).
pub struct AtRev<'a> {
    pub mirror: &'a Path,
    pub rev: &'a str,
}

impl forge_model::interface::Files for AtRev<'_> {
    fn read(&self, path: &str) -> Option<String> {
        show(self.mirror, self.rev, path)
    }
    fn gitlink(&self, path: &str) -> Option<String> {
        let line = git(self.mirror, format!("look up submodule {path}"))
            .args(["ls-tree", "--end-of-options", self.rev, "--", path])
            .output()
            .ok()?;
        line.split_whitespace().nth(2).filter(|_| line.starts_with("160000")).map(String::from)
    }
    fn list(&self, dir: &str) -> Option<Vec<String>> {
        let out = git(self.mirror, format!("list {dir} at {}", self.rev))
            .args(["ls-tree", "-r", "--name-only", "--end-of-options", self.rev, "--", dir])
            .output()
            .ok()?;
        Some(out.lines().map(str::to_string).collect())
    }
}

/// The commits `rev` records for the submodule `paths` (gitlinks in its tree).
pub fn submodule_commits(mirror: &Path, repo: &str, rev: &str, paths: &[&str]) -> Result<BTreeMap<String, String>> {
    let mut subs = BTreeMap::new();
    for path in paths {
        let line = git(mirror, format!("look up submodule {path}"))
            .args(["ls-tree", "--end-of-options", rev, "--", path])
            .output()?;
        let sha = line.split_whitespace().nth(2).filter(|_| line.starts_with("160000"));
        match sha {
            Some(s) => {
                subs.insert(path.to_string(), s.to_string());
            }
            None => {
                return Err(Failure::usage(format!(
                    "{repo} at {rev} has no submodule {path}, which this variant's build needs"
                ))
                .hint("pin a revision that carries it (DeepEP's hybrid-ep branch has third-party/nccl, main has third-party/fmt), or build a variant that does not need it")
                .into())
            }
        }
    }
    Ok(subs)
}

/// setup.py imports torch (`import torch` / `from torch`): the build Python needs it.
pub fn imports_torch(setup: &str) -> bool {
    setup.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("import torch") || l.starts_with("from torch")
    })
}

fn has_commit(mirror: &Path, rev: &str) -> bool {
    git(mirror, "look up rev")
        .args(["cat-file", "-e", "--end-of-options", &format!("{rev}^{{commit}}")])
        .output()
        .is_ok()
}

/// Check `rev` out of the mirror into a fresh `dest` (a new repository that
/// borrows the mirror's objects through `objects/info/alternates`), init the
/// submodules the plan names, and verify HEAD and every submodule commit
/// against the plan. Returns `git rev-parse --short HEAD` of the tree (the
/// label setup.py computes).
pub fn checkout(
    mirror: &Path,
    repo: &str,
    rev: &str,
    dest: &Path,
    submodules: &BTreeMap<String, String>,
) -> Result<String> {
    let tree = Tree::create(dest, "build tree")?;
    git(dest, "create the build tree").args(["init", "-q"]).output()?;
    let objects = Tree::open(&mirror.join("objects"), "git mirror objects")?.real_path()?;
    tree.write(".git/objects/info/alternates", format!("{}\n", objects.display()).as_bytes())?;
    // git < 2.43 (Debian 12's 2.39) rejects `checkout --detach --end-of-options`;
    // a full sha cannot be read as an option, so it is checked instead.
    anyhow::ensure!(forge_model::pins::is_full_sha(rev), "refusing to check out `{rev}`: not a full commit sha");
    git(dest, format!("check out {rev}")).args(["checkout", "-q", "--detach", rev]).output()?;
    // `rev-parse`, as setup.py does: it never walks history, so a shallow source
    // (parents absent) works.
    let ids = git(dest, "read HEAD").args(["rev-parse", "HEAD", "--short", "HEAD"]).output()?;
    let (head, short) = ids.trim().split_once('\n').context("git rev-parse output")?;
    if head != rev {
        anyhow::bail!("checkout of {rev} from {repo} has HEAD {head}");
    }
    if !submodules.is_empty() {
        // Relative submodule URLs resolve against the real repository.
        git(dest, "set origin").args(["remote", "add", "--end-of-options", "origin", repo]).output()?;
    }
    for (path, want) in submodules {
        git_remote(dest, repo, format!("init submodule {path}")).args(["submodule", "update", "--init", "--recursive", "--", path]).output().map_err(|e| {
            Failure::env(format!("cannot fetch submodule {path} ({want}) of {repo}: {e:#}"))
                .hint(format!("the submodule's URL (in .gitmodules) must be reachable; offline, point git's url.<base>.insteadOf at a local mirror and set {}=1 (local transports are refused for repositories named in files otherwise)", process::git::ALLOW_LOCAL_ENV))
        })?;
        let got = git(&dest.join(path), "read submodule HEAD").args(["rev-parse", "HEAD"]).output()?.trim().to_string();
        if &got != want {
            anyhow::bail!("submodule {path}: HEAD {got}, the superproject records {want}");
        }
    }
    Ok(short.to_string())
}
