//! `probe --run`: topology discovery and a dispatch/combine kernel on the GPUs.
use anyhow::Result;

use crate::error::Exit;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// Run on this machine's GPUs (discovery, dispatch/combine kernel, bandwidth).
    #[arg(long)]
    pub run: bool,
}

pub fn run(_args: &crate::probe::ProbeArgs) -> Result<Exit> {
    crate::bail_usage!("probe --run is not implemented yet")
}
