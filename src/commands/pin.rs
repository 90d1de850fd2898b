//! `pin set|recover`: the flags, turned into `pinset::{SetRequest, RecoverRequest}`.
use std::path::PathBuf;

use crate::args::{CacheDirArg, ProjectArgs};
use forge_lock::pinset::{RecoverRequest, SetRequest};

#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The new DeepEP revision: a full 40-hex commit, or a short sha, branch or
    /// tag that --source resolves (short revisions are never guessed).
    pub rev: String,
    /// Pin only this architecture (x86_64 or aarch64): only requirements whose marker selects it
    /// change. Without it both architectures get one unmarked requirement per place.
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<forge_model::pins::Arch>,
    #[command(flatten)]
    pub place: ProjectArgs,
    /// A DeepEP git checkout (PATH) or URL: resolves short revisions, gives the
    /// short sha as `git rev-parse --short` prints it and the label's base version
    /// at the new revision. Without it the revision is fetched from pins.toml's
    /// repository (under --no-pins, pyproject.toml's) into the cache's git mirror,
    /// as `plan` does; a source that cannot be read is exit 3, never a guess.
    #[arg(long, value_name = "PATH|URL")]
    pub source: Option<String>,
    /// Run `uv lock` in the project afterwards (uv from $DEEPEP_FORGE_UV or PATH),
    /// then `lock check`; without it the exact commands are printed. All or nothing:
    /// if uv fails, or on Ctrl-C/SIGTERM, pyproject.toml, pins.toml and uv.lock are
    /// put back as they were (after a kill, `pin recover` does it).
    #[arg(long)]
    pub relock: bool,
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Install DeepEP from the package index `deepep-forge publish` wrote, served at URL
    /// (its base: https://, file://, or http:// on 127.0.0.1): requirements become
    /// `deep_ep==LABEL`, a named `[[tool.uv.index]]` (explicit) and `[tool.uv.sources]`
    /// entry point at `URL/<variant>/simple`, the DeepEP dependency-metadata is dropped.
    #[arg(long, value_name = "URL", requires = "variant", conflicts_with_all = ["git", "arch"])]
    pub index: Option<String>,
    /// The variant whose index the consumer installs from (with --index).
    #[arg(long, value_name = "NAME", requires = "index")]
    pub variant: Option<String>,
    /// Back from an index to DeepEP's git source (pins.toml's repository) at REV.
    #[arg(long, conflicts_with = "arch")]
    pub git: bool,
    /// Add a source patch (a file beside or below pins.toml) to the moved pins'
    /// `patches`, with its sha256 (repeatable; checked to apply at REV).
    #[arg(long = "patch", value_name = "FILE")]
    pub patch: Vec<PathBuf>,
    /// Remove the source patch listed as NAME from the moved pins' `patches` (repeatable).
    #[arg(long = "drop-patch", value_name = "NAME")]
    pub drop_patch: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct RecoverArgs {
    #[command(flatten)]
    pub place: ProjectArgs,
}

impl SetArgs {
    /// The plain request `pinset::set` takes.
    pub fn request(self) -> SetRequest {
        SetRequest {
            rev: self.rev,
            arch: self.arch,
            place: self.place.place(),
            source: self.source,
            relock: self.relock,
            cache_dir: self.cache.cache_dir,
            index: self.index,
            variant: self.variant,
            git: self.git,
            patch: self.patch,
            drop_patch: self.drop_patch,
        }
    }
}

impl RecoverArgs {
    /// The plain request `pinset::recover` takes.
    pub fn request(self) -> RecoverRequest {
        RecoverRequest { place: self.place.place() }
    }
}
