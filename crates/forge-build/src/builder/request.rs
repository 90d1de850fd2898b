//! What to build, decided once. A [`BuildRequest`] is made at the command
//! edge: from `plan`/`build-wheel` flags (`builder::Common`) or from a wheel's
//! provenance (`verify`); the rest of the builder takes it and never sees a
//! clap type (as maturin's `BuildOptions` -> `BuildContext`). Plain data:
//! must not parse arguments, read files or build.
use std::path::PathBuf;

use super::registry;
use crate::pins::Pins;

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
    pub recorded_fork: Option<crate::provenance::Fork>,
}
