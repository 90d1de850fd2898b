//! The provenance document build-wheel stamps into `<name>.dist-info/` and the
//! probes read back. Owns the schema; must not compute any of its values.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// File name inside the wheel's `.dist-info/`.
pub const FILE_NAME: &str = "deepep-forge-provenance.json";
/// Version of this document's shape (2: no wall-clock times, no machine paths).
pub const SCHEMA: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub schema: u32,
    /// `deepep-forge <version>`.
    pub tool: String,
    pub source: SourceInfo,
    pub variant: VariantInfo,
    /// Every build-relevant environment variable as the build saw it.
    pub env: BTreeMap<String, String>,
    pub toolchain: ToolchainInfo,
    pub host: HostInfo,
    pub times: Times,
    pub cache_key: String,
    /// The build as the plan ran it, path-free (`${build}/src`, ...): argv,
    /// working folder, DeepEP's build interface. Absent in older documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildInfo>,
    /// Changes made to the built wheel (RUNPATH rewrites, ...); empty for an exact build.
    #[serde(default)]
    pub patches: Vec<Patch>,
    /// The manylinux policy the binaries earned and the tag the wheel carries
    /// (`manylinux`); absent in documents of earlier versions (tagged `linux_*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// pins.toml's repository: with `rev`, it names the content. Where the
    /// bytes were read from (a local mirror, `--source`) is not recorded here
    /// (the build output says it), so mirrors of one commit give one wheel.
    /// Wheels of earlier versions may hold `local:<folder name>`.
    pub repo: String,
    pub rev: String,
    pub branch: Option<String>,
    /// `git rev-parse --short HEAD` in the build tree.
    pub short: String,
    /// Submodule path -> commit.
    #[serde(default)]
    pub submodules: BTreeMap<String, String>,
    /// The source patches applied after checkout, in order (pins.toml `patches`),
    /// each with its text, so the wheel alone rebuilds; empty: exact, unpatched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<SourcePatch>,
    /// `repo` is a fork (pins.toml `[source] upstream`): where it stands on
    /// its upstream. Absent for a repository that is not a fork (its document as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<Fork>,
}

/// A fork's pinned commit against its upstream, as `plan` read it from git
/// (the upstream branch fetched into the mirror of the fork).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fork {
    /// pins.toml's `[source] upstream`.
    pub upstream: String,
    /// pins.toml's `[source] upstream_branch`.
    pub upstream_branch: String,
    /// `git merge-base <pin> <upstream branch>`; None: no merge base within the fetched history.
    pub merge_base: Option<String>,
    /// `git rev-list --count <merge base>..<pin>`: the commits the fork carries beyond upstream.
    pub ahead: Option<u64>,
}

impl Fork {
    /// `fork of <upstream>@<branch>: merge base <sha>, N commits ahead`.
    pub fn describe(&self) -> String {
        match (&self.merge_base, self.ahead) {
            (Some(b), Some(n)) => format!(
                "fork of {}@{}: merge base {b}, {n} commit{} ahead",
                self.upstream,
                self.upstream_branch,
                if n == 1 { "" } else { "s" }
            ),
            _ => format!(
                "fork of {}@{}: no merge base found within the fetched history",
                self.upstream, self.upstream_branch
            ),
        }
    }
}

/// One source patch as the build applied it (`patches::load` computes it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcePatch {
    /// Its path relative to pins.toml, as pins.toml lists it.
    pub name: String,
    /// sha256 of `text`.
    pub sha256: String,
    /// The tree files it touches.
    pub files: Vec<String>,
    /// Those of `files` that change how DeepEP builds (setup.py, `*.cfg`, CMake, Makefiles).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub build_files: Vec<String>,
    /// The patch itself (UTF-8 text; binary patches are refused).
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantInfo {
    pub name: String,
    pub arch: String,
    pub cuda_arch_list: String,
    pub multinode: bool,
    pub transport: Option<String>,
    pub rdma_core_home: Option<String>,
    /// Knobs the variant sets explicitly (pins.toml `env`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolchainInfo {
    pub kind: String,
    pub python: Option<String>,
    pub python_tag: Option<String>,
    pub torch: Option<String>,
    pub cuda: Option<String>,
    pub nvcc: Option<String>,
    /// Deprecated: a machine path (schema 1 wheels); new wheels record only the version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cxx: Option<String>,
    pub cxx_version: Option<String>,
    /// sccache, the nvcc driver (its version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sccache: Option<String>,
    /// Every package of a registry toolchain, name -> version (empty for `system`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub packages: BTreeMap<String, String>,
    /// A cross build's target side (absent for native builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross: Option<CrossInfo>,
    /// Packages a registry toolchain installed over torch's own pins, name ->
    /// `2.30.7 (overrides torch's pin 2.28.9; asked ==2.30.7: pins.toml [toolchain] nccl)`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, String>,
    /// The libraries the wheel's compiled code was built against and meets again
    /// at run time (absent in wheels built before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<BuildEnvironment>,
}

/// What the extension was compiled against: the run-time environment must agree.
/// Each field is `None` when the build did not use it or could not read it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BuildEnvironment {
    /// torch's version (`torch/version.py`), e.g. `2.11.0+cu130`.
    pub torch: Option<String>,
    /// `torch._C._GLIBCXX_USE_CXX11_ABI` of that torch.
    pub torch_cxx11_abi: Option<bool>,
    /// CUDA toolkit version the nvcc belongs to, e.g. `13.0`.
    pub cuda: Option<String>,
    /// NVSHMEM whose device library was linked (`nvidia-nvshmem-cu*` version or
    /// `nvshmem_version.h`), e.g. `3.4.5`.
    pub nvshmem: Option<String>,
    /// NCCL whose headers were compiled against (nccl.h's version), e.g. `2.30.7`.
    pub nccl: Option<String>,
    /// What the revision needs of its run-time environment, read from its source.
    #[serde(default)]
    pub needs: RuntimeNeeds,
    /// The run-time requirements the build implies (the wheel's `Requires-Dist`,
    /// `builder::closure`); None in older plans and wheels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires: Option<RuntimeRequires>,
}

/// The wheel's run-time requirements, derived from the build environment.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RuntimeRequires {
    /// false: the variant says `runtime_requires = false`; METADATA is left as built.
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<Requirement>,
    /// What is not a requirement, and why (a system NCCL, no torch distribution, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl RuntimeRequires {
    /// The `Requires-Dist` lines the wheel carries (none when turned off).
    pub fn written(&self) -> &[Requirement] {
        if self.enabled {
            &self.requires
        } else {
            &[]
        }
    }
}

/// One `Requires-Dist`: a PEP 503 name, a PEP 440 specifier, and why.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Requirement {
    pub name: String,
    /// `==2.30.7`, `>=2.30.4`.
    pub specifier: String,
    pub why: String,
}

impl Requirement {
    /// `nvidia-nccl-cu13==2.30.7`.
    pub fn line(&self) -> String {
        format!("{}{}", self.name, self.specifier)
    }
}

/// A DeepEP revision's needs of the environment it runs in.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RuntimeNeeds {
    /// Lowest NCCL the revision builds and runs with (EPv2 / main: `2.30.4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_min: Option<String>,
    /// Below this NCCL version the NCCL loaded at run time must be the very
    /// version compiled against (EPv2's nccl.cu: `2.31`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_exact_below: Option<String>,
    /// The device code links NVSHMEM: the host library must be the same version.
    #[serde(default)]
    pub nvshmem_same: bool,
    /// Lowest torch the revision states (EPv2's README: "PyTorch 2.10 and above").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_min: Option<Stated>,
    /// Lowest NVSHMEM the revision states (docs/nvshmem.md: "NVSHMEM v3.3.9 or later").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvshmem_min: Option<Stated>,
    /// Requirement lines for torch, NCCL or NVSHMEM whose version could not be
    /// read (`file:line` and why): no minimum is taken from them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
    /// Where each need was read (file:line at the revision).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// How the compiled code registers GPU memory with the NIC, read from csrc
    /// at the revision with the build's patches applied; None in older plans
    /// and wheels (unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration: Option<Registration>,
    /// What the revision's run-time JIT needs beyond libraries (EPv2); None: no JIT read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jit: Option<JitNeeds>,
}

/// How a revision's csrc registers GPU memory with the NIC (multi-node RDMA).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Registration {
    /// The code calls `ibv_reg_dmabuf_mr` (DMA-BUF registration, no nvidia_peermem needed).
    pub dmabuf: bool,
    /// The code calls `cuMemGetHandleForAddressRange` (the DMA-BUF file descriptor of GPU memory).
    pub dmabuf_handle: bool,
    /// The code calls `ibv_reg_mr` (needs a peer-memory module for GPU memory).
    pub reg_mr: bool,
    /// Where each was seen (`csrc/...:line`, or `patch NAME adds ...`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
}

impl Registration {
    /// The code registers GPU memory through DMA-BUF (both calls present).
    pub fn uses_dmabuf(&self) -> bool {
        self.dmabuf && self.dmabuf_handle
    }
}

/// EPv2's run-time needs beyond libraries: `import deep_ep` asserts a CUDA home
/// (deep_ep/__init__.py's `find_cuda_home()`), and csrc/jit/compiler.hpp compiles
/// kernels with that home's nvcc and reads them with its cuobjdump, `-I <nccl root>/include`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JitNeeds {
    /// `import deep_ep` asserts a CUDA home (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda).
    pub cuda_home: bool,
    /// The lowest nvcc the JIT accepts (`12.3`), as the source asserts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvcc_min: Option<String>,
    /// `<CUDA home>/bin/cuobjdump` is run on the JIT's cubins.
    pub cuobjdump: bool,
    /// NCCL's headers: the JIT compiles with `-I <nccl root>/include`.
    pub nccl_headers: bool,
}

/// A minimum version the revision states in its own text, and where.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Stated {
    /// A PEP 440 version (`2.10`, `3.3.9`).
    pub version: String,
    /// `README.md:69`.
    pub at: String,
    /// The line as written (`PyTorch 2.10 and above`).
    pub text: String,
}

/// Host -> target of a cross build: the cross compiler, the target Python
/// and every package of the sysroot.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CrossInfo {
    pub host: String,
    pub target: String,
    pub triple: String,
    /// `gcc` / `g++` -> `--version` line.
    pub compilers: BTreeMap<String, String>,
    /// The platform the target's wheels were resolved for.
    pub python_platform: String,
    /// Debian's arm64 Python the extensions are built against.
    pub python: String,
    pub ext_suffix: String,
    /// Target wheels, name -> version.
    pub packages: BTreeMap<String, String>,
    /// Debian arm64 packages, name -> version.
    pub debs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildInfo {
    /// `hybrid-ep`, `main` (EPv2) or `main-1.x`.
    pub interface: String,
    pub argv: Vec<String>,
    pub cwd: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub arch: String,
    pub os: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Times {
    /// Wall-clock start and end (schema 1 wheels only: a wheel holds no build
    /// time now, so that a rebuild gives the same bytes; the build report has them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    pub source_date_epoch: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Patch {
    /// Wheel member changed.
    pub file: String,
    /// e.g. `runpath`.
    pub kind: String,
    pub from: String,
    pub to: String,
}

/// UTC (year, month, day, hour, minute, second) of seconds since 1970
/// (Howard Hinnant's days-to-civil).
pub fn utc_parts(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, (rem / 3600) as u32, (rem % 3600 / 60) as u32, (rem % 60) as u32)
}

/// RFC 3339 UTC of seconds since 1970 (`2026-08-17T12:00:00Z`).
pub fn rfc3339(secs: i64) -> String {
    let (y, mo, d, h, mi, s) = utc_parts(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// Seconds since 1970 now.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// What a wheel's binaries earn (the manylinux policy, `crate::manylinux`), recorded in the provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// `manylinux_2_34`, or `linux` when no policy allows the binaries.
    pub policy: String,
    /// The platform tag (set) of the file name: `manylinux_2_17_x86_64.manylinux2014_x86_64`.
    pub tag: String,
    /// External libraries the binaries need (sorted, unique).
    pub externals: Vec<String>,
    /// Libraries the policy allows that the binaries need (sorted, unique).
    pub system: Vec<String>,
    /// The symbol versions no older policy allows (what raised the policy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raised_by: Vec<Raise>,
}

/// One symbol version a member requires that a policy does not allow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Raise {
    pub member: String,
    pub library: String,
    pub version: String,
    /// Some of the symbols bound to that version (`__isoc23_strtol`), and how many there are.
    pub symbols: Vec<String>,
    pub count: usize,
}

impl std::fmt::Display for Raise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let syms = match (self.symbols.as_slice(), self.count) {
            ([], _) => String::new(),
            (s, n) if n > s.len() => format!(" ({} and {} more)", s.join(", "), n - s.len()),
            (s, _) => format!(" ({})", s.join(", ")),
        };
        write!(f, "{}: {} from {}{syms}", self.member, self.version, self.library)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_786_968_000), "2026-08-17T12:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
