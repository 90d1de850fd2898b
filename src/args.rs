//! The flags several commands share, each declared once (its long name, value
//! name, default and help) and flattened into every command that takes it:
//! `--pins`, `--trusted-key`, `--cache-url`, `--cache-dir`, the remote cache's
//! transport, `--project`/`--no-pins`. Each derefs to its value, so a command
//! reads `args.pins` as the path it always was. A command that needs the
//! flag's value differently says so with `mut_arg` (a requirement, a
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
        self.pins.as_deref().unwrap_or(Path::new(forge_model::pins::DEFAULT_PATH))
    }

    /// The file, only when given.
    pub fn given(&self) -> Option<&Path> {
        self.pins.as_deref()
    }

    /// The file given, else `pins.toml` when it exists.
    pub fn if_present(&self) -> Option<&Path> {
        self.given()
            .or_else(|| Some(self.path()).filter(|p| forge_os::fs::named::kind(p) != forge_os::fs::Kind::Missing))
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

/// `--cache-dir`, shared by every command that uses the cache.
#[derive(Debug, Clone, clap::Args)]
pub struct CacheDirArg {
    /// Cache folder (wheels, git mirrors, build logs). Default: $XDG_CACHE_HOME/deepep-forge
    /// (~/.cache/deepep-forge). A shared filesystem path lets a cluster build each wheel once.
    #[arg(long, env = "DEEPEP_FORGE_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

impl CacheDirArg {
    /// The folder: the one given, else the default (`cache::resolve_dir`).
    pub fn resolve(&self) -> anyhow::Result<PathBuf> {
        forge_store::cache::resolve_dir(self.cache_dir.as_deref())
    }
}

/// How `build-wheel` reaches a remote cache.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoteArgs {
    #[command(flatten)]
    pub cache_url: CacheUrlArg,
    #[command(flatten)]
    pub trusted_keys: TrustedKeysArg,
    #[command(flatten)]
    pub net: NetArgs,
}

/// Transport options shared by `build-wheel` and `cache push`.
#[derive(Debug, Clone, clap::Args)]
pub struct NetArgs {
    /// Accept a plain http:// cache URL (no TLS: anyone on the path can read the traffic;
    /// signatures are still required). Meant for a cache on localhost or a trusted network.
    #[arg(long)]
    pub allow_http: bool,
    /// Seconds each request to the remote cache may take in all (connecting: 10 s at most).
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub cache_timeout: u64,
}

impl RemoteArgs {
    /// The plain request `builder` and `publish` take.
    pub fn request(&self) -> forge_store::cache::RemoteRequest {
        forge_store::cache::RemoteRequest {
            cache_url: self.cache_url.cache_url.clone(),
            trusted_keys: self.trusted_keys.to_vec(),
            net: self.net.net(),
        }
    }
}

impl NetArgs {
    /// The client's transport settings.
    pub fn net(&self) -> forge_store::cache::remote::Net {
        forge_store::cache::remote::Net {
            allow_http: self.allow_http,
            timeout: std::time::Duration::from_secs(self.cache_timeout),
        }
    }
}

/// `--project DIR` and `--pins FILE` / `--no-pins`: the consumer project and
/// the pins it is held to, declared once and flattened into `lock check`,
/// `pin set` and `pin recover`, with one help text each.
#[derive(Debug, Clone, clap::Args)]
#[command(mut_arg("pins", |a| a.conflicts_with("no_pins")))]
pub struct ProjectArgs {
    /// The consumer project (holds pyproject.toml and, if locked, uv.lock).
    /// Relative paths resolve against the directory the command runs in.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub project: PathBuf,
    #[command(flatten)]
    pub pins: PinsArg,
    /// Keep no pins.toml: take the consumer's pyproject.toml as the intent
    /// (its override-dependencies entry per architecture, else its most common
    /// revision) and check everything else against it.
    #[arg(long)]
    pub no_pins: bool,
}

impl ProjectArgs {
    /// The project and its pins as plain data.
    pub fn place(&self) -> forge_lock::lock::ProjectPlace {
        forge_lock::lock::ProjectPlace {
            project: self.project.clone(),
            pins: self.pins.to_path_buf(),
            no_pins: self.no_pins,
        }
    }
}

/// Topology flags, shared by `probe` (static and `--run`) and `evidence add`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TopologyArgs {
    /// Expert-parallel group size (EP), 1 to 1048576.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=forge_model::topology::MAX_COUNT))]
    pub ep: Option<u32>,
    /// Number of nodes the job spans, 1 to 1048576.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=forge_model::topology::MAX_COUNT))]
    pub nodes: Option<u32>,
    /// GPUs per node, 1 to 1048576.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=forge_model::topology::MAX_COUNT))]
    pub gpus_per_node: Option<u32>,
    /// Ranks per NVLink domain (R; NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN), 1 to 1048576.
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=forge_model::topology::MAX_COUNT))]
    pub ranks_per_domain: Option<u32>,
    /// The system has multi-node NVLink (GB200/GB300 NVL72) and the job uses it.
    #[arg(long, overrides_with = "no_mnnvl")]
    pub mnnvl: bool,
    /// The job does not use multi-node NVLink (USE_MNNVL=0).
    #[arg(long)]
    pub no_mnnvl: bool,
    /// GPU kind: h100, h200, b200, gb200, b300, gb300, sm_90, sm_100, sm_103.
    #[arg(long, value_name = "GPU")]
    pub gpu: Option<forge_model::topology::Gpu>,
    /// A named topology: h100-8g, b200-8g, b300-8g, gb200-nvl72, gb300-nvl72 (flags override its values).
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// A NeMo-RL recipe (YAML), resolved through its `defaults:` chain. Missing
    /// HybridEP settings get NeMo-RL's defaults (R = min(EP, 64), USE_MNNVL = EP > 4),
    /// which the verdict names; recipes name no GPU, so add --gpu or --preset.
    #[arg(long, value_name = "PATH")]
    pub recipe: Option<PathBuf>,
    /// The folder a recipe's `defaults:` chain must stay in. Default: the git
    /// repository holding the recipe (else the recipe's own folder).
    #[arg(long, value_name = "DIR", requires = "recipe")]
    pub recipe_root: Option<PathBuf>,
}

impl TopologyArgs {
    /// The flags as plain data (`topology::RequestFlags::resolve` layers them).
    pub fn request(self) -> forge_model::topology::RequestFlags {
        forge_model::topology::RequestFlags {
            ep: self.ep,
            nodes: self.nodes,
            gpus_per_node: self.gpus_per_node,
            ranks_per_domain: self.ranks_per_domain,
            mnnvl: self.mnnvl,
            no_mnnvl: self.no_mnnvl,
            gpu: self.gpu,
            preset: self.preset,
            recipe: self.recipe,
            recipe_root: self.recipe_root,
        }
    }
}
