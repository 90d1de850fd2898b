//! `host facts`: this node's facts (`probe::host::HostFacts`, read once
//! through the host root) printed as a table or as the versioned JSON
//! document `probe --host-facts` judges. Exit 0 whatever the node lacks (an
//! absence is a fact); 2 for a host root that is not a folder.
use std::path::PathBuf;

use anyhow::Result;

use forge_os::error::Exit;
use forge_os::output::DataFormat;
use forge_probe::probe::host;

#[derive(Debug, clap::Subcommand)]
pub enum HostCommand {
    /// Read this node's facts (RDMA devices, ports, GIDs, NVIDIA driver, peermem, DMA-BUF, limits, NUMA).
    Facts(FactsArgs),
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  deepep-forge host facts
  deepep-forge host facts --format json > facts/$(hostname).json
  # in a container that mounts the host's /sys, /proc and /dev at /host
  deepep-forge host facts --host-root /host --format json")]
pub struct FactsArgs {
    /// Read the host's /sys, /proc, /dev and libraries under DIR (default /).
    #[arg(long, value_name = "DIR")]
    pub host_root: Option<PathBuf>,
    /// A readable list, or one JSON document (schema `deepep-forge.host-facts/1`).
    #[arg(long, value_enum, default_value_t)]
    pub format: DataFormat,
}

pub fn run(c: HostCommand) -> Result<Exit> {
    match c {
        HostCommand::Facts(a) => {
            let facts = host::read(&host::open(a.host_root.as_deref())?);
            match a.format {
                DataFormat::Json => forge_os::printer::json(&facts)?,
                DataFormat::Human => forge_os::out!("{}", host::render_human(&facts)),
            }
            Ok(Exit::Ok)
        }
    }
}
