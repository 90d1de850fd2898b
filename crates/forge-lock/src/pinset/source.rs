//! The DeepEP git source `pin set` asks: resolve a short rev to a full commit,
//! print the short sha as git does, read the base version at a revision
//! (DeepEP's interface: setup.py, or `deep_ep/__init__.py` for EPv2). With
//! `--source`, a URL is cloned (bare) into a temp dir and a folder that is not
//! the top of a git repository is snapshotted as `plan` does; without it, the
//! revision is fetched from the repository the project names into the cache's
//! mirror, as `plan` does. Never guesses: a source that cannot be read is exit 3.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use forge_os::error::{Exit, Failure};
use forge_os::process::git::{git as hardened, Trust};
use forge_store::source as mirror;

/// A git repository holding DeepEP's history.
pub struct GitSource {
    pub dir: PathBuf,
    /// Shown in messages: the path or URL the user gave.
    pub given: String,
    _clone: Option<forge_os::fs::TempTree>,
}

/// git on the user's `--source` (named on the command line: local paths allowed).
fn git(dir: &Path, args: &[&str], purpose: &str) -> Result<std::process::Output> {
    hardened(dir, Trust::User, purpose).args(args).capture()
}

impl GitSource {
    /// Open `given`: an existing folder (a checkout or bare repo; any other
    /// folder is snapshotted under `cache` as `plan --source` does) or a URL to clone.
    pub fn open(given: &str, cache: &Path) -> Result<GitSource> {
        let p = Path::new(given);
        if forge_os::fs::named::is_dir(p) {
            let dir = PathBuf::from(mirror::resolve(given, cache)?.repo);
            let out = git(&dir, &["rev-parse", "--git-dir"], "open the --source repository")?;
            if !out.status.success() {
                return Err(Failure::usage(format!("--source {given} is not a git repository"))
                    .hint("pass a DeepEP checkout or its URL")
                    .into());
            }
            return Ok(GitSource { dir, given: given.to_string(), _clone: None });
        }
        if !(given.contains("://") || given.starts_with("git@")) {
            return Err(Failure::usage(format!("--source {given}: no such directory, and not a URL"))
                .hint("pass a DeepEP checkout (PATH) or a URL such as https://github.com/deepseek-ai/DeepEP.git")
                .into());
        }
        let tmp = forge_os::fs::TempTree::new("deepep-forge-source-")
            .context("creating a temp dir for the --source clone")?;
        let out = hardened(tmp.path(), Trust::User, format!("clone --source {given}"))
            .args(["clone", "--quiet", "--bare", "--", given])
            .arg(tmp.path().join("src.git"))
            .capture()?;
        if !out.status.success() {
            return Err(Failure::usage(format!(
                "cloning --source {given} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
            .hint("check the URL and the network, or pass a local checkout with --source PATH")
            .into());
        }
        Ok(GitSource { dir: tmp.path().join("src.git"), given: given.to_string(), _clone: Some(tmp) })
    }

    /// The full commit `rev` names (sha prefix, branch or tag), or a usage error.
    pub fn resolve(&self, rev: &str) -> Result<String> {
        let out = git(
            &self.dir,
            &["rev-parse", "--verify", "--quiet", "--end-of-options", &format!("{rev}^{{commit}}")],
            "resolve the revision",
        )?;
        let full = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || !forge_model::pins::is_full_sha(&full) {
            return Err(Failure::usage(format!(
                "revision `{rev}` is not a commit in {} (or is ambiguous)",
                self.given
            ))
            .hint("give the full 40-hex sha, or fetch the branch that holds it into the source first")
            .into());
        }
        Ok(full)
    }

    /// The short sha as `git rev-parse --short` prints it here.
    pub fn short(&self, full: &str) -> Result<String> {
        let out = git(&self.dir, &["rev-parse", "--short", "--end-of-options", full], "abbreviate the revision")?;
        anyhow::ensure!(out.status.success(), "git rev-parse --short {full} failed in {}", self.given);
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The base version the build at `full` gives (DeepEP's interface read
    /// there: the setup.py literal, or `__version__` of deep_ep/__init__.py for EPv2), if it says.
    pub fn base_version(&self, full: &str) -> Result<Option<String>> {
        let files = |p: &str| {
            git(&self.dir, &["show", "--end-of-options", &format!("{full}:{p}")], "read the source")
                .ok()
                .filter(|o| o.status.success() && o.stdout.len() <= 1 << 20)
                .and_then(|o| String::from_utf8(o.stdout).ok())
        };
        let Some(setup) = files("setup.py") else { return Ok(None) };
        Ok(forge_model::interface::version(&files, &setup).map(|(v, _)| v))
    }
}

/// The base version DeepEP at `rev` (a full sha) builds, read from `repo`
/// (pins.toml's, or the project's own under --no-pins: a remote URL) after
/// fetching `rev` into the cache's mirror as `plan` does. A repository that
/// cannot be reached is exit 3 naming `--source`; a revision that does not
/// say its version is exit 2: never a label from a guess.
pub fn base_version_at(cache: &Path, repo: &str, rev: &str) -> Result<String> {
    let short = rev.get(..7).unwrap_or(rev);
    let need = format!(
        "pin set reads DeepEP's version at {short} from its source for the dependency-metadata label and pins.toml's base_version"
    );
    let how = format!(
        "pass --source PATH|URL with a DeepEP repository (a checkout or mirror) that has {rev}; pin set never writes a label it did not read"
    );
    forge_os::process::git::check_file_url(repo).map_err(|why| {
        Failure::usage(format!(
            "{need}, but the repository the project names, `{}`, is not usable: {why}",
            forge_os::input::excerpt(repo, 120)
        ))
        .hint(how.clone())
    })?;
    let mirror_dir = mirror::mirror_path(cache, repo);
    if let Err(e) = mirror::ensure_rev(&mirror_dir, repo, rev) {
        if forge_os::error::exit_of(&e) != Exit::Environment {
            return Err(e);
        }
        return Err(Failure::env(format!("{need}, and {repo} cannot be read: {e:#}")).hint(how).into());
    }
    let files = |p: &str| mirror::show(&mirror_dir, rev, p);
    let version = files("setup.py").and_then(|setup| forge_model::interface::version(&files, &setup));
    match version {
        Some((v, _)) => Ok(v),
        None => Err(no_version(short, repo)),
    }
}

/// DeepEP at `short` does not say its version where DeepEP's builds say it.
pub fn no_version(short: &str, repo: &str) -> anyhow::Error {
    Failure::usage(format!(
        "DeepEP at {short} ({repo}) does not say its version (no version literal in setup.py, no `__version__` in \
         deep_ep/__init__.py that setup.py reads): pin set cannot write the dependency-metadata label or pins.toml's base_version"
    ))
    .hint("pin a revision that declares its version, or drop `version` from [[tool.uv.dependency-metadata]] and use --no-pins so uv builds to learn it")
    .into()
}
