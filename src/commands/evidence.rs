//! `evidence add|show`: the flags, turned into `evidence::{AddRequest,
//! ShowRequest}`; what was recorded, or the report, printed here.
use std::path::PathBuf;

use anyhow::Result;

use crate::args::{CacheDirArg, PinsArg, TrustedKeysArg};
use forge_os::error::Exit;
use forge_store::evidence::{show, AddRequest, ShowFormat, ShowRequest};

#[derive(Debug, clap::Subcommand)]
pub enum EvidenceCommand {
    /// Record a result the tool did not observe (a training run, a cluster job), signed, marked `reported`.
    Add(AddArgs),
    /// The validation boundary: each variant's wheel, every trusted statement about it, and what is missing.
    Show(ShowArgs),
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  # a training run, by the wheel file
  deepep-forge evidence add --wheel dist/deep_ep-*.whl --kind training \\
    --gpu h100 --nodes 16 --gpus-per-node 8 --ep 16 \\
    --outcome \"20/20 steps\" --url https://ci.example.org/job/507030 \\
    --signing-key me.key --out evidence/
  # by its sha256 and name, when the file is not at hand
  deepep-forge evidence add --sha256 976ca0de... --wheel-name NAME.whl \\
    --kind deep-ep-tests --outcome \"59/59 passed\" \\
    --signing-key me.key --out evidence/")]
pub struct AddArgs {
    /// The wheel the result is about (its name and sha256 are read from the file).
    #[arg(long, value_name = "WHEEL", conflicts_with_all = ["sha256", "wheel_name"], required_unless_present = "sha256")]
    pub wheel: Option<PathBuf>,
    /// The wheel's sha256 (64 lowercase hex), with --wheel-name, when the file is not at hand.
    #[arg(long, value_name = "HEX", requires = "wheel_name")]
    pub sha256: Option<String>,
    /// The wheel's file name, with --sha256.
    #[arg(long, value_name = "NAME", requires = "sha256")]
    pub wheel_name: Option<String>,
    /// What was shown (the ladder in docs/evidence.md).
    #[arg(long, value_enum)]
    pub kind: forge_model::ladder::Kind,
    #[command(flatten)]
    pub topology: crate::args::TopologyArgs,
    /// The result, short (`20/20 steps`, `59/59 passed`).
    #[arg(long, value_name = "TEXT")]
    pub outcome: String,
    /// Where the run can be read (http or https).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Free text (what ran, what it did not cover).
    #[arg(long, value_name = "TEXT")]
    pub text: Option<String>,
    /// Your ed25519 key (`cache keygen`): the statement is signed by whoever adds it.
    #[arg(long, value_name = "FILE")]
    pub signing_key: PathBuf,
    /// The evidence folder (written under DIR/<sha256>/).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  deepep-forge evidence show --evidence evidence/ --trusted-key ci-1:BASE64
  # one variant's wheel, as a pull-request comment
  deepep-forge evidence show --variant h100-multinode \\
    --wheel dist/deep_ep-*.whl --evidence evidence/ \\
    --trusted-key ci-1:BASE64 --format markdown")]
pub struct ShowArgs {
    #[command(flatten)]
    pub pins: PinsArg,
    /// Only these variants (repeatable); default: all.
    #[arg(long = "variant", value_name = "NAME")]
    pub variants: Vec<String>,
    /// Also judge against this recipe's topology (repeatable; the variant's GPU is assumed).
    #[arg(long = "recipe", value_name = "PATH")]
    pub recipes: Vec<PathBuf>,
    /// Wheel files to look at (matched to variants by their provenance); without one, the wheel cache.
    #[arg(long = "wheel", value_name = "WHEEL")]
    pub wheels: Vec<PathBuf>,
    /// Evidence folders (repeatable).
    #[arg(long = "evidence", value_name = "DIR", required = true)]
    pub evidence: Vec<PathBuf>,
    /// Only statements signed by these keys count (with DEEPEP_FORGE_TRUSTED_KEYS and the cache config).
    #[command(flatten)]
    pub trusted_keys: TrustedKeysArg,
    #[command(flatten)]
    pub cache: CacheDirArg,
    #[arg(long, value_enum, default_value_t)]
    pub format: forge_store::evidence::ShowFormat,
}

/// Run an `evidence` subcommand.
pub fn run(c: EvidenceCommand) -> Result<Exit> {
    match c {
        EvidenceCommand::Add(a) => {
            let r = forge_store::evidence::cmd::add(a.request())?;
            forge_os::outln!("recorded {} (reported, signed by {}): {}", r.kind, r.signer, r.path.display());
        }
        EvidenceCommand::Show(a) => {
            let a = a.request();
            let report = forge_store::evidence::cmd::show(&a)?;
            match a.format {
                ShowFormat::Json => forge_os::printer::json(&report)?,
                ShowFormat::Markdown => forge_os::out!("{}", show::render_markdown(&report)),
                ShowFormat::Human => forge_os::out!("{}", show::render_human(&report)),
            }
        }
    }
    Ok(Exit::Ok)
}

impl AddArgs {
    /// The plain request `evidence::cmd::add` takes.
    pub fn request(self) -> AddRequest {
        AddRequest {
            wheel: self.wheel,
            sha256: self.sha256,
            wheel_name: self.wheel_name,
            kind: self.kind,
            topology: self.topology.request(),
            outcome: self.outcome,
            url: self.url,
            text: self.text,
            signing_key: self.signing_key,
            out: self.out,
        }
    }
}

impl ShowArgs {
    /// The plain request `evidence::cmd::show` takes.
    pub fn request(self) -> ShowRequest {
        ShowRequest {
            pins: self.pins.to_path_buf(),
            variants: self.variants,
            recipes: self.recipes,
            wheels: self.wheels,
            evidence: self.evidence,
            trusted_keys: self.trusted_keys.trusted_keys,
            cache_dir: self.cache.cache_dir,
            format: self.format,
        }
    }
}
