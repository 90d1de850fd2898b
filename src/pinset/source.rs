//! The DeepEP git source `pin set` asks: resolve a short rev to a full commit,
//! print the short sha as git does, read the base version from setup.py at a
//! revision. A URL is cloned (bare) into a temp dir first. Never guesses.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::error::Failure;
use crate::process::git::{git as hardened, Trust};

/// A git repository holding DeepEP's history.
pub struct GitSource {
    pub dir: PathBuf,
    /// Shown in messages: the path or URL the user gave.
    pub given: String,
    _clone: Option<tempfile::TempDir>,
}

/// git on the user's `--source` (named on the command line: local paths allowed).
fn git(dir: &Path, args: &[&str], purpose: &str) -> Result<std::process::Output> {
    hardened(dir, Trust::User, purpose).args(args).capture()
}

impl GitSource {
    /// Open `given`: an existing folder (a checkout or bare repo) or a URL to clone.
    pub fn open(given: &str) -> Result<GitSource> {
        let p = Path::new(given);
        if p.is_dir() {
            let out = git(p, &["rev-parse", "--git-dir"], "open the --source repository")?;
            if !out.status.success() {
                return Err(Failure::usage(format!("--source {given} is not a git repository"))
                    .hint("pass a DeepEP checkout or its URL")
                    .into());
            }
            return Ok(GitSource { dir: p.to_path_buf(), given: given.to_string(), _clone: None });
        }
        if !(given.contains("://") || given.starts_with("git@")) {
            return Err(Failure::usage(format!("--source {given}: no such directory, and not a URL"))
                .hint("pass a DeepEP checkout (PATH) or a URL such as https://github.com/deepseek-ai/DeepEP.git")
                .into());
        }
        let tmp = tempfile::tempdir().context("creating a temp dir for the --source clone")?;
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
        if !out.status.success() || !crate::pins::is_full_sha(&full) {
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
        Ok(crate::interface::version(&files, &setup).map(|(v, _)| v))
    }
}
