//! The flags several commands share, each declared once (its long name, value
//! name, default and help) and flattened into every command that takes it:
//! `--pins`, `--trusted-key`, `--cache-url`. Each derefs to its value, so a
//! command edge reads `args.pins` as the path it always was. A command that
//! needs the flag's value differently says so with `mut_arg` (a requirement, a
//! conflict), never with another help text. Must not read files or decide
//! anything beyond the flag's shape.
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// `--pins FILE`, default `pins.toml`. Not a clap default: `probe` reads a pins
/// file only when one is given (its `pin` rule), so whether it was given is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct PinsArg {
    /// The pins file: DeepEP's repository, its revision per architecture and the build
    /// variants (docs/pins.md). Default: ./pins.toml (`verify`: when present; `probe`:
    /// only a file given here, for its `pin` rule).
    #[arg(long = "pins", value_name = "FILE")]
    pins: Option<PathBuf>,
}

impl PinsArg {
    /// A `--pins FILE` as if given on the command line.
    pub fn new(path: impl Into<PathBuf>) -> PinsArg {
        PinsArg { pins: Some(path.into()) }
    }

    /// The file given, else `pins.toml`.
    pub fn path(&self) -> &Path {
        self.pins.as_deref().unwrap_or(Path::new(crate::pins::DEFAULT_PATH))
    }

    /// The file, only when given.
    pub fn given(&self) -> Option<&Path> {
        self.pins.as_deref()
    }

    /// The file given, else `pins.toml` when it exists.
    pub fn if_present(&self) -> Option<&Path> {
        self.given().or_else(|| Some(self.path()).filter(|p| p.exists()))
    }
}

impl Deref for PinsArg {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.path()
    }
}

impl AsRef<Path> for PinsArg {
    fn as_ref(&self) -> &Path {
        self.path()
    }
}

/// `--trusted-key NAME:BASE64`, repeatable.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TrustedKeysArg {
    /// Trust what this ed25519 public key signed (`NAME:BASE64` as `cache keygen` prints it;
    /// repeatable): remote cache entries and `publish` index manifests. Added to
    /// DEEPEP_FORGE_TRUSTED_KEYS and `[cache] trusted-keys` in
    /// $XDG_CONFIG_HOME/deepep-forge/config.toml; never read from pins.toml or a project.
    #[arg(long = "trusted-key", value_name = "NAME:BASE64")]
    pub trusted_keys: Vec<String>,
}

impl Deref for TrustedKeysArg {
    type Target = Vec<String>;
    fn deref(&self) -> &Vec<String> {
        &self.trusted_keys
    }
}

/// `--cache-url URL` (or DEEPEP_FORGE_CACHE_URL).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CacheUrlArg {
    /// The remote wheel cache (an https:// server; docs/cache.md): `build-wheel` fetches
    /// signed wheels by key before building, `cache push` uploads with PUT.
    #[arg(long = "cache-url", env = "DEEPEP_FORGE_CACHE_URL", hide_env_values = true, value_name = "URL")]
    pub cache_url: Option<String>,
}

impl Deref for CacheUrlArg {
    type Target = Option<String>;
    fn deref(&self) -> &Option<String> {
        &self.cache_url
    }
}
