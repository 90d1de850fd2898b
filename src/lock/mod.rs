//! `lock check`: consumer pyproject.toml + uv.lock (+ Dockerfiles) vs pins.toml.
use std::path::PathBuf;

use anyhow::Result;

use crate::error::Exit;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The consumer project (holds pyproject.toml and uv.lock).
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub project: PathBuf,
    /// The pins file.
    #[arg(long, default_value = crate::pins::DEFAULT_PATH, value_name = "FILE")]
    pub pins: PathBuf,
    #[arg(long, value_enum, default_value_t)]
    pub format: crate::output::Format,
}

pub fn check(_args: CheckArgs) -> Result<Exit> {
    crate::bail_usage!("lock check is not implemented yet")
}
