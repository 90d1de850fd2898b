//! `cargo xtask bench <name>`: each benchmark measures deepep-forge and a
//! baseline in the same run and prints the ratio. Never used as a test.
use anyhow::Result;
use deepep_forge::error::Exit;

mod lock;
mod runtime;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Which benchmark.
    #[arg(value_enum)]
    pub which: Which,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Which {
    /// `lock check` on NeMo-RL's 2026-08-22-main vs Python tomllib parsing the same files.
    LockCheck,
    /// `probe --run` dispatch/combine kernels vs the copy engine on the same GPUs (needs NVIDIA GPUs).
    Runtime,
}

/// The workspace root (xtask lives one level below it).
fn project_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent").to_path_buf()
}

pub fn run(args: BenchArgs) -> Result<Exit> {
    match args.which {
        Which::LockCheck => lock::run(&project_root()).map(|()| Exit::Ok),
        Which::Runtime => runtime::run(),
    }
}
