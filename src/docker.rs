//! `docker bake` / `docker build`: container images from pins.toml.
use anyhow::Result;

use crate::error::Exit;

#[derive(Debug, clap::Subcommand)]
pub enum DockerCommand {
    /// Generate docker/docker-bake.json from pins.toml.
    Bake,
}

pub fn run(_cmd: DockerCommand) -> Result<Exit> {
    crate::bail_usage!("docker is not implemented yet")
}
