//! `cargo xtask bench <name>`: each benchmark measures deepep-forge and a
//! baseline in the same run and prints the ratio. Never used as a test.
use anyhow::Result;
use deepep_forge::error::Exit;

mod build;
mod compiler_cache;
mod lock;
mod probe;
mod runtime;
mod toolchain;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Which benchmark.
    #[arg(value_enum)]
    pub which: Which,
    /// Options of `build-cache` (real DeepEP instead of the fixture, a second variant).
    #[command(flatten)]
    pub cache: compiler_cache::CacheBenchArgs,
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
    /// `probe --run` dispatch/combine kernels vs the copy engine on the same GPUs (needs NVIDIA GPUs).
    Runtime,
    /// `probe --wheel` (every member read once, RECORD hashes, ELF/fatbin parsing) vs `unzip -p` of the same wheel.
    ProbeWheel,
    /// Rebuild with a warm compiler cache vs a fresh build (wheel cache off), a second variant
    /// after the first vs fresh, and the sha256 of every build (folders, cache on/off).
    BuildCache,
    /// One compiler cache through a real Redis server: machine B (another checkout and
    /// wheel cache) warm from Redis vs machine A cold; the same sha256 (takes build-cache's options).
    FleetCache,
    /// Provisioning the registry toolchain (`plan --toolchain registry`, empty cache) vs `uv venv` + `uv pip install` of the same packages by hand.
    Toolchain,
}

/// The workspace root (xtask lives one level below it).
pub(crate) fn project_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent").to_path_buf()
}

pub fn run(args: BenchArgs) -> Result<Exit> {
    match args.which {
        Which::LockCheck => lock::run(&project_root())?,
        Which::CacheHit => build::cache_hit()?,
        Which::Overhead => build::overhead()?,
        Which::Stamp => build::stamp()?,
        Which::Runtime => return runtime::run(),
        Which::ProbeWheel => return probe::run_bench(),
        Which::Toolchain => toolchain::run()?,
        Which::BuildCache => compiler_cache::run(args.cache)?,
        Which::FleetCache => compiler_cache::fleet(args.cache)?,
    }
    Ok(Exit::Ok)
}
