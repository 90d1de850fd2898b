//! `pin set`: rewrite pins.toml and the consumer's pyproject.toml, optionally relock.
use anyhow::Result;

use crate::error::Exit;

#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The new DeepEP revision (full 40-hex sha; a short one needs --source).
    pub rev: String,
}

pub fn set(_args: SetArgs) -> Result<Exit> {
    crate::bail_usage!("pin set is not implemented yet")
}
