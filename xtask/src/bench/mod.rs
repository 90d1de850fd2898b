//! `cargo xtask bench <name>`: each benchmark measures deepep-forge and a
//! baseline in the same run and prints the ratio. Never used as a test.
use anyhow::Result;
use deepep_forge::error::Exit;

mod build;

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
    /// build-wheel cache hit (whole process) vs a fresh build of the same variant.
    CacheHit,
    /// build-wheel --no-cache (whole process) vs the same `pip wheel` by hand.
    Overhead,
    /// Stamping a 200 MB wheel vs `sha256sum` of it.
    Stamp,
}

pub fn run(args: BenchArgs) -> Result<Exit> {
    match args.which {
        Which::LockCheck => anyhow::bail!("not implemented yet"),
        Which::CacheHit => build::cache_hit()?,
        Which::Overhead => build::overhead()?,
        Which::Stamp => build::stamp()?,
    }
    Ok(Exit::Ok)
}
