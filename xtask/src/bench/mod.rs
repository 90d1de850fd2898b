//! `cargo xtask bench <name>`: each benchmark measures deepep-forge and a
//! baseline in the same run and prints the ratio. Never used as a test.
use anyhow::Result;
use deepep_forge::error::Exit;

mod probe;

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
    /// `probe --wheel` (every member read once, RECORD hashes, ELF/fatbin parsing) vs `unzip -p` of the same wheel.
    ProbeWheel,
}

pub fn run(args: BenchArgs) -> Result<Exit> {
    match args.which {
        Which::LockCheck => anyhow::bail!("not implemented yet"),
        Which::ProbeWheel => probe::run_bench(),
    }
}
