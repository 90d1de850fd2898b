//! `probe`: static (wheel / installed environment) and, with `--run`, runtime.
use std::path::PathBuf;

use anyhow::Result;

use crate::error::Exit;
use crate::pins::Arch;
use crate::topology::Request;
use crate::verdict::Verdict;

#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// A wheel file to inspect.
    #[arg(long, value_name = "WHEEL")]
    pub wheel: Option<PathBuf>,
    /// A Python whose environment has deep_ep installed.
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<PathBuf>,
    #[command(flatten)]
    pub topology: crate::topology::RequestArgs,
    #[command(flatten)]
    pub runtime: crate::runtime::RunArgs,
    #[arg(long, value_enum, default_value_t)]
    pub format: crate::output::Format,
}

/// What the runtime probe needs to know about the binary under test
/// (filled by the static probe from `--wheel` or `--python`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BinaryFacts {
    /// The wheel path or the environment's deep_ep location.
    pub subject: String,
    /// SM numbers (90, 100) with a cubin in hybrid_ep_cpp.
    pub cubin_sms: Vec<u32>,
    /// SM numbers with PTX only.
    pub ptx_sms: Vec<u32>,
    /// Built with HYBRID_EP_MULTINODE (None: could not tell).
    pub multinode: Option<bool>,
    /// ELF machine of the extensions.
    pub machine: Option<Arch>,
}

/// Facts about the binary named by `--wheel`/`--python`; None when neither is given.
pub fn binary_facts(_args: &ProbeArgs) -> Result<Option<BinaryFacts>> {
    Ok(None)
}

/// The static verdict for `--wheel`/`--python` against `request` (rules of DOMAIN.md §2).
pub fn static_verdict(_args: &ProbeArgs, request: Option<Request>) -> Result<Verdict> {
    Ok(Verdict::new("nothing", request))
}

pub fn run(args: ProbeArgs) -> Result<Exit> {
    if args.runtime.run {
        return crate::runtime::run(&args);
    }
    crate::bail_usage!("the static probe is not implemented yet")
}
