//! `lock check`: the flags, turned into `lock::CheckRequest`; the project
//! opened as a tree (the one place its path becomes one); the report printed
//! in the format asked, and the exit code (1 with an error finding).
use std::path::PathBuf;

use anyhow::Result;

use crate::args::{CacheDirArg, ProjectArgs, TrustedKeysArg};
use forge_lock::lock::CheckRequest;
use forge_os::error::Exit;
use forge_os::output::Format;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub place: ProjectArgs,
    /// A Dockerfile to check as well (repeatable); Dockerfile* at the project
    /// root and docker/**/Dockerfile* are found on their own.
    #[arg(long = "dockerfile", value_name = "PATH")]
    pub dockerfiles: Vec<PathBuf>,
    /// Report format: human text, one JSON document, or GitHub annotations plus text.
    #[arg(long, value_enum, default_value_t)]
    pub format: forge_os::output::Format,
    /// For DeepEP from a `deepep-forge publish` index: its signed manifest (`<variant>/index.json`),
    /// a FILE (offline CI) or an https URL (repeatable); every deep-ep wheel uv.lock pins must be
    /// in one, built at pins.toml's revision. `index` fetches `<variant>/index.json` next to the
    /// index URL pyproject.toml names.
    #[arg(long = "index-manifest", value_name = "FILE|URL|index")]
    pub index_manifests: Vec<String>,
    #[command(flatten)]
    pub trusted_keys: TrustedKeysArg,
    /// For DeepEP from an index: a NeMo-RL recipe the project runs (repeatable); an EP group
    /// over more than one NVLink domain needs a multinode variant's index (`index-variant-mismatch`).
    #[arg(long = "recipe", value_name = "FILE")]
    pub recipes: Vec<PathBuf>,
    /// DeepEP's repository to read the pinned revisions from (a checkout, a folder or a URL):
    /// what each revision is (EPv2 or HybridEP) and its version come from its source, never
    /// from pins.toml's `branch`. Default: the cache's mirror of pins.toml's repository, when
    /// it holds the revision (`plan`, `build-wheel` and `pin set` fetch it there).
    #[arg(long, value_name = "PATH|URL")]
    pub source: Option<String>,
    /// Where the mirrors of DeepEP's repository are (read, never fetched, without --source).
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Every deep-ep wheel uv.lock pins needs a statement of this kind or a stronger
    /// one (docs/evidence.md), signed by a --trusted-key, covering its variant's GPU
    /// generation; else `evidence-missing` (exit 1) with the command that would make it.
    /// pins.toml's `[evidence]` table asks the same without the flag; with both, the
    /// stricter kind wins per wheel. Either needs --evidence DIR and a trusted key (exit 2).
    #[arg(long, value_enum, value_name = "KIND", requires = "evidence")]
    pub require_evidence: Option<forge_model::ladder::Kind>,
    /// Evidence folders for --require-evidence and pins.toml's `[evidence]` (repeatable).
    #[arg(long = "evidence", value_name = "DIR")]
    pub evidence: Vec<PathBuf>,
}

impl CheckArgs {
    /// The plain request `lock::check` takes.
    pub fn request(&self) -> CheckRequest {
        let a = self;
        CheckRequest {
            project: a.place.project.clone(),
            pins: (!a.place.no_pins).then(|| a.place.pins.to_path_buf()),
            dockerfiles: a.dockerfiles.clone(),
            index_manifests: a.index_manifests.clone(),
            trusted_keys: a.trusted_keys.to_vec(),
            recipes: a.recipes.clone(),
            source: a.source.clone(),
            cache_dir: a.cache.resolve().ok(),
            require_evidence: a.require_evidence,
            evidence: a.evidence.clone(),
            evidence_policy: true,
        }
    }
}

/// `deepep-forge lock check`: check, then print the report.
pub fn run(a: &CheckArgs) -> Result<Exit> {
    let req = a.request();
    let project = forge_os::fs::Tree::open(&req.project, "project")?;
    let report = forge_lock::lock::run_check(&req, &project)?;
    match a.format {
        Format::Json => forge_os::printer::json(&report)?,
        Format::Human => forge_os::out!("{}", forge_lock::lock::render_human(&report)),
        Format::Github => forge_os::printer::workflow(&forge_lock::lock::render_github(&report)),
    }
    Ok(if report.errors > 0 { Exit::Problems } else { Exit::Ok })
}
