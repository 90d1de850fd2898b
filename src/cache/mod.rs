//! The wheel cache: local (content-addressed by plan key) and remote (HTTP).
use anyhow::Result;

use crate::error::Exit;

#[derive(Debug, clap::Subcommand)]
pub enum CacheCommand {
    /// List cached wheels.
    Ls,
}

pub fn run(_cmd: CacheCommand) -> Result<Exit> {
    crate::bail_usage!("cache is not implemented yet")
}
