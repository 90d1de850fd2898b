//! `plan` and `build-wheel`.
use anyhow::Result;

use crate::error::Exit;

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Variant(s) to plan.
    #[arg(long)]
    pub variant: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// Variant(s) to build.
    #[arg(long)]
    pub variant: Vec<String>,
}

pub fn plan(_args: PlanArgs) -> Result<Exit> {
    crate::bail_usage!("plan is not implemented yet")
}

pub fn build(_args: BuildArgs) -> Result<Exit> {
    crate::bail_usage!("build-wheel is not implemented yet")
}
