//! What to build, decided once. A [`BuildRequest`] is made at the command
//! edge: from `plan`/`build-wheel` flags ([`BuildOptions`], made by the CLI) or from a wheel's
//! provenance (`verify`); the rest of the builder takes it and never sees a
//! clap type (as maturin's `BuildOptions` -> `BuildContext`). Plain data:
//! must not parse arguments or build, nor read a file but the pins
//! ([`BuildOptions::request`]).
use std::path::PathBuf;

use super::registry;
use forge_model::pins::Pins;

/// Which variants of the pins to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Variants {
    /// Every variant (those of another architecture are skipped, with why).
    All,
    /// These, by name (none named is a usage error when planning).
    Named(Vec<String>),
}

/// Whether and where the compiler cache is (the wheel's bytes are the same either way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompilerCache {
    /// From `DEEPEP_FORGE_COMPILER_CACHE`, else the user config, else none.
    Default,
    /// This folder, or `<cache>/sccache` when `None`.
    At(Option<PathBuf>),
    /// None, whatever the environment or the user config say.
    Off,
}

impl Variants {
    /// Whether the selection can name more than one variant (`--all`, or
    /// `--variant` twice or more): then each variant's wheel goes into its own
    /// subfolder of `--out`, since every variant of one revision and
    /// architecture makes a wheel of the same file name.
    pub fn several(&self) -> bool {
        match self {
            Variants::All => true,
            Variants::Named(n) => n.len() > 1,
        }
    }
}

/// Where one variant's wheel goes: `out` for a build of one variant,
/// `<out>/<variant>/` when the selection names several ([`Variants::several`]).
/// A variant name is a validated pins.toml name (letters, digits, `-`, `_`),
/// so it is one path component.
pub fn out_folder(out: &std::path::Path, variants: &Variants, variant: &str) -> PathBuf {
    if variants.several() {
        out.join(variant)
    } else {
        out.to_path_buf()
    }
}

/// Everything a build depends on that the caller chooses.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    /// The validated pins (a file, or the one a provenance describes).
    pub pins: Pins,
    pub variants: Variants,
    /// Another source repository or folder than the pins' (`--source`).
    pub source: Option<String>,
    /// The Python that builds (system toolchain) or makes the registry one.
    pub python: Option<String>,
    pub toolchain: registry::Kind,
    /// Take torch's version from this project's uv.lock (registry toolchain).
    pub match_project: Option<PathBuf>,
    /// Where wheels and SHA256SUMS go.
    pub out: PathBuf,
    /// The wheel cache folder as given (`None`: the default folder).
    pub cache_dir: Option<PathBuf>,
    /// Neither read nor write the wheel cache.
    pub no_cache: bool,
    pub compiler_cache: CompilerCache,
    /// Reuse NCCL's build output stored for the same submodule commit, arch list and
    /// toolchain (`builder::nccl_reuse`); the wheel's bytes are the same either way.
    pub nccl_reuse: bool,
    /// Parallel compile jobs (`None`: the number of CPU cores).
    pub jobs: Option<usize>,
    /// Build the extensions one after another, as `pip wheel` does (`builder::side_by_side`
    /// otherwise builds them at once; the wheel's bytes are the same either way).
    pub serial_extensions: bool,
    /// A fork's record as a wheel's provenance carries it (`verify`): used as
    /// recorded, so the upstream, named only there, is never fetched.
    pub recorded_fork: Option<forge_wheel::provenance::Fork>,
    /// The remote cache (`--cache-url`), also asked for a revision's signed unit-time
    /// history when this cache has none (`unit_order`); None: not asked.
    pub remote: Option<forge_store::cache::RemoteRequest>,
}

/// How a build runs, whatever it builds (`--source`, `--python`, `--cache-dir`,
/// the compiler cache, NCCL reuse, jobs): the flags `plan`, `build-wheel` and
/// `verify` share, as plain data.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Another source repository or folder than the pins' (`--source`).
    pub source: Option<String>,
    /// The Python that builds (system toolchain) or makes the registry one.
    pub python: Option<String>,
    /// The wheel cache folder as given (`None`: the default folder).
    pub cache_dir: Option<PathBuf>,
    pub compiler_cache: CompilerCache,
    /// Reuse NCCL's stored build output (`--no-nccl-reuse` turns it off).
    pub nccl_reuse: bool,
    pub jobs: Option<usize>,
    pub serial_extensions: bool,
}

/// What `plan`, `build-wheel` and `publish` are asked, as plain data: the pins
/// file is read by [`BuildOptions::request`], when the command gets there.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The pins file.
    pub pins: PathBuf,
    /// `--variant`s, as named.
    pub variants: Vec<String>,
    /// `--all`: every variant of this host's architecture.
    pub all: bool,
    pub run: RunOptions,
    pub toolchain: registry::Kind,
    pub match_project: Option<PathBuf>,
    pub out: PathBuf,
    pub no_cache: bool,
    /// The remote cache (`--cache-url`, `--trusted-key`, transport).
    pub remote: forge_store::cache::RemoteRequest,
    pub format: forge_os::output::DataFormat,
}

impl BuildOptions {
    /// The build request (pins.toml read and validated here).
    pub fn request(&self) -> anyhow::Result<BuildRequest> {
        Ok(BuildRequest {
            pins: Pins::load(&self.pins)?,
            variants: if self.all { Variants::All } else { Variants::Named(self.variants.clone()) },
            source: self.run.source.clone(),
            python: self.run.python.clone(),
            toolchain: self.toolchain,
            match_project: self.match_project.clone(),
            out: self.out.clone(),
            cache_dir: self.run.cache_dir.clone(),
            no_cache: self.no_cache,
            compiler_cache: self.run.compiler_cache.clone(),
            nccl_reuse: self.run.nccl_reuse,
            jobs: self.run.jobs,
            serial_extensions: self.run.serial_extensions,
            recorded_fork: None,
            remote: Some(self.remote.clone()),
        })
    }
}

/// `build-wheel`: the build and where its JSON report goes.
#[derive(Debug, Clone)]
pub struct BuildWheelRequest {
    pub common: BuildOptions,
    /// Also write the JSON build report to this file.
    pub report: Option<PathBuf>,
}
