//! `probe`: static (wheel / installed environment) and, with `--run`, runtime.
use std::path::PathBuf;

use anyhow::Result;

use crate::error::Exit;

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

pub fn run(args: ProbeArgs) -> Result<Exit> {
    if args.runtime.run {
        return crate::runtime::run(&args);
    }
    crate::bail_usage!("the static probe is not implemented yet")
}
