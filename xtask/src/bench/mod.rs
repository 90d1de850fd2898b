//! `cargo xtask bench <name>`: each benchmark measures deepep-forge and a
//! baseline in the same run and prints the ratio. Never used as a test.
use anyhow::Result;
use forge_os::error::Exit;

mod build;
mod compiler_cache;
mod critical_path;
mod fleet;
mod host;
mod incremental;
mod install;
mod lock;
mod nccl_reuse;
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
    #[command(flatten)]
    pub incremental: incremental::IncrementalArgs,
    #[command(flatten)]
    pub lock: lock::LockArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Which {
    /// `lock check --no-pins` on NeMo-RL's largest uv.lock vs Python tomllib parsing the same
    /// two files, and on a lock of 4x the packages (exit 1 above `--max-ratio` / `--max-growth`).
    #[value(alias = "lock-check")]
    Lock,
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
    /// `host facts --format json` (every read of this node) vs `--version` of the same release binary.
    HostFacts,
    /// Rebuild with a warm compiler cache vs a fresh build (wheel cache off), a second variant
    /// after the first vs fresh, and the sha256 of every build (folders, cache on/off).
    BuildCache,
    /// NCCL built once per submodule commit: a multinode variant at another DeepEP revision
    /// with the same NCCL submodule, and a second multinode variant with the same arch list,
    /// each vs fresh (goal: <= 0.4x); the sha256 with and without the reuse (takes
    /// build-cache's options and --rev2; default: the fixture with mini-nccl as its submodule).
    NcclReuse,
    /// One compiler cache through a real Redis server: machine B (another checkout and
    /// wheel cache) warm from Redis vs machine A cold; the same sha256 (takes build-cache's options).
    FleetCache,
    /// The fleet on the fixture: machine B (a fresh cache folder against a shared Redis
    /// compiler cache machine A filled) vs a cold build, and a two-arch first build on a
    /// fresh cache vs the one-arch one (its unit order from history or predicted); prints
    /// `Fleet, fixture: machine B / cold = N.NNx` and `Two architectures / one, first build
    /// on a fresh cache: N.NNx`, and one sha256 for cold, A and B (takes --work).
    Fleet,
    /// Provisioning the registry toolchain (`plan --toolchain registry`, empty cache) vs `uv venv` + `uv pip install` of the same packages by hand.
    Toolchain,
    /// A build against its critical path: `build-wheel --serial-extensions` (pip's order)
    /// vs the default side-by-side build of the same variant: wall, the ninja logs' units,
    /// summed and longest compile, the ratios, one sha256 (takes build-cache's options).
    Build,
    /// A consumer's `uv sync` (fresh venv, uv cache empty): deep-ep from a `publish` index on
    /// 127.0.0.1 vs from its git source, which uv builds (goal: <= 0.05x).
    Install,
    /// `cargo test --workspace --no-run` after touching one file of lock, of probe and of the
    /// core, in this tree vs a baseline revision (`--baseline`, default the one-crate layout).
    Incremental,
}

/// One deepep-forge build request as the arguments after `plan` or
/// `build-wheel`, declared once for every bench that plans or builds (the
/// bench runs whole processes, so it states the request as flags).
pub(crate) struct Request {
    pub pins: std::path::PathBuf,
    pub source: Option<std::ffi::OsString>,
    pub variant: String,
    pub python: Option<std::ffi::OsString>,
    pub cache_dir: std::path::PathBuf,
}

impl Request {
    /// The fixture's: tests/fixtures/demo-pins.toml, variant `demo` from
    /// tests/fixtures/mini-deepep, built by `python` (the tools venv's).
    pub(crate) fn fixture(python: &std::path::Path, cache_dir: &std::path::Path) -> Request {
        let root = project_root();
        Request {
            pins: root.join("tests/fixtures/demo-pins.toml"),
            source: Some(root.join("tests/fixtures/mini-deepep").into()),
            variant: "demo".into(),
            python: Some(python.into()),
            cache_dir: cache_dir.to_path_buf(),
        }
    }

    /// `--pins P [--source S] --variant V [--python PY] --cache-dir C`.
    pub(crate) fn args(&self) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = vec!["--pins".into(), self.pins.clone().into()];
        if let Some(s) = &self.source {
            a.extend(["--source".into(), s.clone()]);
        }
        a.extend(["--variant".into(), self.variant.clone().into()]);
        if let Some(p) = &self.python {
            a.extend(["--python".into(), p.clone()]);
        }
        a.extend(["--cache-dir".into(), self.cache_dir.clone().into()]);
        a
    }
}

/// The workspace root (xtask lives one level below it).
pub(crate) fn project_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent").to_path_buf()
}

pub fn run(args: BenchArgs) -> Result<Exit> {
    match args.which {
        Which::Lock => return lock::run(&project_root(), &args.lock),
        Which::CacheHit => build::cache_hit()?,
        Which::Overhead => build::overhead()?,
        Which::Stamp => build::stamp()?,
        Which::Runtime => return runtime::run(),
        Which::ProbeWheel => return probe::run_bench(),
        Which::HostFacts => return host::run(),
        Which::Toolchain => toolchain::run()?,
        Which::Install => install::run()?,
        Which::BuildCache => compiler_cache::run(args.cache)?,
        Which::FleetCache => compiler_cache::fleet(args.cache)?,
        Which::Fleet => fleet::run(args.cache.work)?,
        Which::NcclReuse => nccl_reuse::run(args.cache)?,
        Which::Build => critical_path::run(args.cache)?,
        Which::Incremental => incremental::run(args.incremental)?,
    }
    Ok(Exit::Ok)
}
