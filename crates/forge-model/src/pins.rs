//! `pins.toml`: the one place that pins DeepEP per architecture and declares
//! build variants. Owns parsing and validation (with file:line:column errors);
//! must not touch the network, git or a consumer project.
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::cuda_arch::{self, Cc, Code, Runs, Target};
use crate::ladder::Kind;
use forge_os::error::Failure;

/// The schema version this build of deepep-forge reads and writes.
///
/// Schema 2 (from schema 1): a variant's `topology` is optional (a variant
/// without one is probed only against what the user asks), `topology.gpu`
/// may name several GPU kinds for a fat build (`gpu = ["h100", "b200"]`),
/// GPU names are checked, and a variant may carry the keys this version adds
/// (build `env`, cross-build keys). A schema-1 file is valid schema 2 once
/// its first line says `schema = 2`.
pub const SCHEMA: i64 = 2;
/// Default location, relative to the directory the command runs in.
pub const DEFAULT_PATH: &str = "pins.toml";

/// A CPU architecture as Python's `platform_machine` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Arch {
    #[serde(rename = "x86_64")]
    X86_64,
    #[serde(rename = "aarch64")]
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }
    /// The architecture of the machine running this process, if it is one we know.
    pub fn host() -> Option<Arch> {
        match std::env::consts::ARCH {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" => Some(Arch::Aarch64),
            _ => None,
        }
    }
    /// Docker/OCI platform string.
    pub fn docker_platform(self) -> &'static str {
        match self {
            Arch::X86_64 => "linux/amd64",
            Arch::Aarch64 => "linux/arm64",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Arch {
    type Err = Failure;
    fn from_str(s: &str) -> Result<Self, Failure> {
        match s {
            "x86_64" | "amd64" => Ok(Arch::X86_64),
            "aarch64" | "arm64" => Ok(Arch::Aarch64),
            other => Err(Failure::usage(format!(
                "unknown architecture `{}`: expected `x86_64` or `aarch64`",
                forge_os::input::excerpt(other, 40)
            ))),
        }
    }
}

/// The GPU kinds `probe --gpu` and `topology.gpu` take, as messages list them.
pub const KNOWN_GPUS: &str = "h100, h200, b200, gb200, b300, gb300, or sm_XY (sm_90, sm_100, sm_103)";

/// A GPU kind: named products or a bare SM (pins.toml `topology.gpu`, `probe --gpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Gpu {
    H100,
    H200,
    B200,
    Gb200,
    /// Blackwell Ultra (compute capability 10.3): an 8-GPU x86 node.
    B300,
    /// Blackwell Ultra in NVL72 racks (10.3): aarch64 trays of 4 GPUs.
    Gb300,
    /// A bare compute capability as `sm_XY` (90, 100, ...).
    Sm(u32),
}

impl Gpu {
    /// SM number the GPU needs cubins for (90, 100, 103).
    pub fn sm(self) -> u32 {
        match self {
            Gpu::H100 | Gpu::H200 => 90,
            Gpu::B200 | Gpu::Gb200 => 100,
            Gpu::B300 | Gpu::Gb300 => 103,
            Gpu::Sm(n) => n,
        }
    }
    /// Its compute capability (`10.3`), which `cuda_arch::runs` judges code against.
    pub fn cc(self) -> Cc {
        Cc::from_sm(self.sm())
    }
    /// The CPU architecture of hosts that carry this GPU, where fixed.
    pub fn host_arch(self) -> Option<Arch> {
        match self {
            Gpu::H100 | Gpu::H200 | Gpu::B200 | Gpu::B300 => Some(Arch::X86_64),
            Gpu::Gb200 | Gpu::Gb300 => Some(Arch::Aarch64),
            Gpu::Sm(_) => None,
        }
    }
    /// The kind with its generation, as messages name it: `h100 (sm_90)`, `sm_90`.
    pub fn generation(self) -> String {
        match self {
            Gpu::Sm(_) => self.to_string(),
            g => format!("{g} (sm_{})", g.sm()),
        }
    }
    /// Whether systems of this kind have multi-node NVLink (NVL72 racks).
    pub fn mnnvl_capable(self) -> Option<bool> {
        match self {
            Gpu::H100 | Gpu::H200 | Gpu::B200 | Gpu::B300 => Some(false),
            Gpu::Gb200 | Gpu::Gb300 => Some(true),
            Gpu::Sm(_) => None,
        }
    }
}

impl fmt::Display for Gpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gpu::H100 => f.write_str("h100"),
            Gpu::H200 => f.write_str("h200"),
            Gpu::B200 => f.write_str("b200"),
            Gpu::Gb200 => f.write_str("gb200"),
            Gpu::B300 => f.write_str("b300"),
            Gpu::Gb300 => f.write_str("gb300"),
            Gpu::Sm(n) => write!(f, "sm_{n}"),
        }
    }
}

impl FromStr for Gpu {
    type Err = Failure;
    fn from_str(s: &str) -> Result<Self, Failure> {
        match s.to_ascii_lowercase().as_str() {
            "h100" => Ok(Gpu::H100),
            "h200" => Ok(Gpu::H200),
            "b200" => Ok(Gpu::B200),
            "gb200" => Ok(Gpu::Gb200),
            "b300" => Ok(Gpu::B300),
            "gb300" => Ok(Gpu::Gb300),
            other => other
                .strip_prefix("sm_")
                .filter(|n| (1..=3).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u32>().ok())
                .map(Gpu::Sm)
                .ok_or_else(|| Failure::usage(format!("unknown GPU `{s}`: expected {KNOWN_GPUS}"))),
        }
    }
}

/// One entry of `TORCH_CUDA_ARCH_LIST`: `9.0`, `10.0`, `9.0a`, `10.0+PTX`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaArch {
    pub major: u32,
    pub minor: u32,
    /// `a` (arch-specific) or `f` (family-specific) suffix.
    pub suffix: Option<char>,
    /// `+PTX`: also embed PTX for JIT on newer GPUs.
    pub ptx: bool,
}

impl CudaArch {
    /// `sm_90`, `sm_90a`, `sm_100`.
    pub fn sm(&self) -> String {
        format!("sm_{}{}{}", self.major, self.minor, self.suffix.map(String::from).unwrap_or_default())
    }
    /// The numeric SM as fatbins record it (90, 100).
    pub fn sm_number(&self) -> u32 {
        self.major * 10 + self.minor
    }
    /// The code this entry compiles: its cubin, and its PTX with `+PTX`.
    pub fn targets(&self) -> Vec<Target> {
        let cc = Cc::new(self.major, self.minor);
        let mut out = vec![Target { cc, suffix: self.suffix, code: Code::Cubin }];
        if self.ptx {
            out.push(Target { cc, suffix: self.suffix, code: Code::Ptx });
        }
        out
    }
    /// The exact target without `+PTX`: `9.0`, `10.0a`, `10.0f`.
    pub fn exact(&self) -> String {
        format!("{}.{}{}", self.major, self.minor, self.suffix.map(String::from).unwrap_or_default())
    }
}

impl fmt::Display for CudaArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)?;
        if let Some(s) = self.suffix {
            write!(f, "{s}")?;
        }
        if self.ptx {
            f.write_str("+PTX")?;
        }
        Ok(())
    }
}

impl FromStr for CudaArch {
    type Err = Failure;
    fn from_str(s: &str) -> Result<Self, Failure> {
        let bad = || {
            Failure::usage(format!(
                "`{}` is not a CUDA arch: expected forms like `9.0`, `10.0`, `9.0a`, `10.0+PTX`",
                forge_os::input::excerpt(s, 40)
            ))
        };
        let (body, ptx) = match s.strip_suffix("+PTX") {
            Some(b) => (b, true),
            None => (s, false),
        };
        let (major, rest) = body.split_once('.').ok_or_else(bad)?;
        let (minor, suffix) = match rest.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            Some((i, c)) if i + c.len_utf8() == rest.len() && (c == 'a' || c == 'f') => (&rest[..i], Some(c)),
            Some(_) => return Err(bad()),
            None => (rest, None),
        };
        let num = |t: &str| -> Result<u32, Failure> {
            if t.is_empty() || t.len() > 2 || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            t.parse().map_err(|_| bad())
        };
        let (major, minor) = (num(major)?, num(minor)?);
        if minor > 9 || !(3..=20).contains(&major) {
            return Err(bad());
        }
        Ok(CudaArch { major, minor, suffix, ptx })
    }
}

/// A whole `TORCH_CUDA_ARCH_LIST` (entries separated by spaces or `;`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchList(pub Vec<CudaArch>);

impl ArchList {
    /// The value for `TORCH_CUDA_ARCH_LIST`, space separated.
    pub fn to_env(&self) -> String {
        self.0.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" ")
    }
    pub fn has_ptx(&self) -> bool {
        self.0.iter().any(|a| a.ptx)
    }
    /// SM numbers (90, 100) this list compiles cubins for.
    pub fn sm_numbers(&self) -> Vec<u32> {
        self.0.iter().map(|a| a.sm_number()).collect()
    }
    /// The same entries in any order (`"9.0 10.0"` equals `"10.0;9.0"`).
    pub fn same_set(&self, other: &ArchList) -> bool {
        self.0.len() == other.0.len() && self.0.iter().all(|a| other.0.contains(a))
    }
    /// Every target this list compiles (cubins, and PTX for `+PTX` entries).
    pub fn targets(&self) -> Vec<Target> {
        self.0.iter().flat_map(|a| a.targets()).collect()
    }
    /// How a GPU of compute capability `cc` runs this build (`cuda_arch::runs`, best entry).
    pub fn on(&self, cc: Cc) -> Runs {
        cuda_arch::best(self.targets(), cc).0
    }
    /// A GPU of compute capability `cc` can run this build: a cubin that runs
    /// on it, or PTX the driver compiles for it.
    pub fn runs_on(&self, cc: Cc) -> bool {
        self.on(cc) != Runs::No
    }
    /// What to change so `cc` runs this build natively (`add 10.3 or 10.3a, or use 10.0f`).
    pub fn would_serve(&self, cc: Cc) -> String {
        let base = self.0.iter().map(|a| Cc::new(a.major, a.minor)).filter(|b| b.major == cc.major && *b <= cc).min();
        cuda_arch::would_serve(cc, base)
    }
}

impl FromStr for ArchList {
    type Err = Failure;
    fn from_str(s: &str) -> Result<Self, Failure> {
        let items: Vec<&str> = s.split(|c: char| c == ';' || c.is_whitespace()).filter(|t| !t.is_empty()).collect();
        if items.is_empty() {
            return Err(Failure::usage("empty arch list: expected e.g. \"9.0\" or \"9.0 10.0\""));
        }
        let mut out: Vec<CudaArch> = Vec::new();
        for it in items {
            let a: CudaArch = it.parse()?;
            if out.iter().any(|o| o.major == a.major && o.minor == a.minor && o.suffix == a.suffix) {
                return Err(Failure::usage(format!(
                    "`{}` appears twice in the arch list",
                    forge_os::input::excerpt(it, 40)
                )));
            }
            out.push(a);
        }
        Ok(ArchList(out))
    }
}

impl fmt::Display for ArchList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_env())
    }
}

/// The multinode transport compiled into hybrid_ep_cpp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Doca,
    Nixl,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Doca => "doca",
            Transport::Nixl => "nixl",
        }
    }
}

/// Where the DeepEP source comes from.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    /// Distribution name as consumers write it (`deep_ep`).
    pub name: String,
    pub repo: String,
    pub branch: Option<String>,
    /// `1.2.1`: the part of the version label before `+<short sha>`.
    pub base_version: String,
    /// The repository `repo` is a fork of (`upstream`, `upstream_branch`): the
    /// plan and the provenance record the pin's merge base with it. None: not a fork.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Upstream>,
}

/// `[source] upstream` and `upstream_branch`: what a fork is a fork of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Upstream {
    /// A remote URL (the same rules as `repo`), never `repo` itself.
    pub repo: String,
    /// A plain branch name (`check_branch_name`).
    pub branch: String,
}

/// One architecture's pin.
#[derive(Debug, Clone, Serialize)]
pub struct Pin {
    pub arch: Arch,
    /// Full 40-hex commit.
    pub rev: String,
    /// 1-based line of the `rev` value in pins.toml.
    pub line: usize,
    /// Source patches applied to every build of this pin, in order (`patches = [...]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<crate::patches::Entry>,
}

impl Pin {
    /// The short sha as `git rev-parse --short` prints it in a fresh clone (7 for DeepEP).
    pub fn short(&self) -> &str {
        &self.rev[..7]
    }
}

/// `[toolchain]`: what the registry toolchain provisions (see build-wheel).
#[derive(Debug, Clone, Serialize)]
pub struct Toolchain {
    pub torch: String,
    /// CUDA major.minor torch was built for (`13.0`).
    pub cuda: String,
    /// The first Python of `pythons` (what a build without `--python` uses when one is listed).
    pub python: Option<String>,
    /// Every Python `python` names: one version (`python = "3.12"`), or a list
    /// of minors (`python = ["3.11", "3.12"]`): the matrix's Python axis.
    pub pythons: Vec<String>,
    /// `python` is a list: the Pythons are a matrix `lock check` holds a lock to
    /// (a single version is only the registry toolchain's default interpreter).
    pub python_matrix: bool,
    /// NVSHMEM the registry toolchain provisions instead of what torch pins
    /// (`nvidia-nvshmem-cu*`, an exact PEP 440 version such as `3.7.2`).
    pub nvshmem: Option<String>,
    /// NCCL the registry toolchain provisions instead of what torch pins
    /// (`nvidia-nccl-cu*`, an exact PEP 440 version such as `2.30.7`).
    pub nccl: Option<String>,
    /// The manylinux floor (`2_28`): the oldest glibc the users of these wheels
    /// run; a build that needs a newer one fails (docs/platform-tags.md).
    pub manylinux: Option<String>,
}

/// `[rdma_core]`: the rdma-core release container images build.
#[derive(Debug, Clone, Serialize)]
pub struct RdmaCore {
    pub repo: String,
    pub git_ref: String,
}

/// The topology a variant is meant for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IntendedTopology {
    /// The GPU kinds it serves: one, or several for a fat build (`["h100", "b200"]`).
    pub gpu: Vec<Gpu>,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub ep: u32,
    pub ranks_per_domain: u32,
    pub mnnvl: bool,
}

impl IntendedTopology {
    /// The GPU kinds joined by `sep` (`h100 b200`).
    pub fn gpu_names(&self, sep: &str) -> String {
        self.gpu.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(sep)
    }
}

/// A build variant: everything that changes the binary, plus its intended use.
#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    pub name: String,
    pub arch: Arch,
    pub cuda_arch_list: ArchList,
    pub multinode: bool,
    pub transport: Transport,
    pub rdma_core_home: Option<String>,
    pub nvshmem_dir: Option<String>,
    pub description: Option<String>,
    /// The intended topology, if declared (probes without one judge only what the user asks).
    pub topology: Option<IntendedTopology>,
    /// Knobs of DeepEP's build set explicitly (`env = { NAME = "value" }`);
    /// whether the build reads them is checked by `plan` against the source
    /// at the pinned revision (`pins check` reads no source).
    pub env: Vec<EnvSetting>,
    /// The index its wheels are published into (`publish`): another variant's
    /// name, of the other architecture, so that one index serves both
    /// architectures' wheels; `None`: its own (`index_name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// Whether the wheel's METADATA gets the run-time requirements the build
    /// implies (`runtime_requires`, default true; `builder::closure`).
    pub runtime_requires: bool,
    /// Source patches applied after its pin's (`patches = [...]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<crate::patches::Entry>,
    /// 1-based line of the variant's `[[variant]]` table.
    pub line: usize,
}

impl Variant {
    /// The name of the index its wheels are published into: `index`, else its own name.
    pub fn index_name(&self) -> &str {
        self.index.as_deref().unwrap_or(&self.name)
    }
}

/// `[evidence]`: the evidence `lock check` requires of every locked deep-ep wheel
/// (docs/evidence.md), with per-variant refinements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvidencePolicy {
    /// The least kind every locked wheel needs.
    pub require: Kind,
    /// `[[evidence.rule]]`s, each variant in at most one.
    pub rules: Vec<EvidenceRule>,
    /// 1-based line of `require`.
    pub line: usize,
}

/// One `[[evidence.rule]]`: what its variants need beyond `require`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvidenceRule {
    pub variants: Vec<String>,
    /// At least `require`; `require` when not written.
    pub kind: Kind,
    /// The GPU generation statements must come from (matched by SM: h100 and h200 are one).
    pub gpu: Option<Gpu>,
    /// 1-based line of the rule's table.
    pub line: usize,
}

impl EvidencePolicy {
    /// The rule naming `variant`, if any.
    pub fn rule_for(&self, variant: &str) -> Option<&EvidenceRule> {
        self.rules.iter().find(|r| r.variants.iter().any(|v| v == variant))
    }
}

/// A validated pins.toml.
#[derive(Debug, Clone, Serialize)]
pub struct Pins {
    pub path: PathBuf,
    pub source: Source,
    pub pins: BTreeMap<Arch, Pin>,
    pub toolchain: Option<Toolchain>,
    /// `[toolchain] manylinux`, the glibc floor every toolchain reads (`2_28`):
    /// set with or without `torch` and `cuda` (docs/pins.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manylinux: Option<String>,
    pub rdma_core: Option<RdmaCore>,
    pub variants: Vec<Variant>,
    /// `[evidence]`, the policy `lock check` applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<EvidencePolicy>,
}

impl Pins {
    /// Read and validate a pins file. Errors are usage failures (exit 2) that
    /// name file, line and column.
    pub fn load(path: &Path) -> Result<Pins> {
        let Some(text) = forge_os::fs::named::read_text_opt(path, "pins file", forge_os::input::cap::TEXT)? else {
            return Err(Failure::usage(format!("pins file not found: {}", path.display()))
                .hint("pass --pins FILE, run from the directory that holds pins.toml, or use --no-pins where the command offers it")
                .into());
        };
        Self::parse(&text, path)
    }

    /// Parse pins from text; `path` is used in messages only.
    pub fn parse(text: &str, path: &Path) -> Result<Pins> {
        let raw: RawPins = toml::from_str(text).map_err(|e| {
            let at = e.span().map(|s| s.start);
            let (line, col) = at.map(|s| line_col(text, s)).unwrap_or((0, 0));
            let key = at.and_then(|s| key_at(text, s)).map(|k| format!(" (key `{k}`)")).unwrap_or_default();
            Failure::usage(format!("{}:{line}:{col}: {}{key}", path.display(), e.message().trim()))
                .hint("see the pins.toml shipped with deepep-forge for the expected shape")
        })?;
        validate(raw, text, path)
    }

    /// The pin for an architecture, or a usage error naming the file.
    pub fn pin(&self, arch: Arch) -> Result<&Pin> {
        self.pins.get(&arch).ok_or_else(|| {
            Failure::usage(format!("{} has no [pin.{arch}]", self.path.display()))
                .hint(format!(
                    "add [pin.{arch}] rev = \"<40-hex sha>\", or run `deepep-forge pin set REV --arch {arch}`"
                ))
                .into()
        })
    }

    /// The label an unpatched build of `arch`'s pin gets: `<base>+<short sha>`
    /// (`patches::label`; a variant with patches: `patch::variant_label`).
    pub fn label(&self, arch: Arch) -> Option<String> {
        self.pins.get(&arch).map(|p| crate::patches::label(&self.source.base_version, p.short(), &[]))
    }

    /// Look a variant up by name; an unknown name lists the known ones.
    pub fn variant(&self, name: &str) -> Result<&Variant> {
        self.variants.iter().find(|v| v.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.variants.iter().map(|v| v.name.as_str()).collect();
            Failure::usage(format!("unknown variant `{name}` in {}", self.path.display()))
                .hint(format!("known variants: {}", names.join(", ")))
                .into()
        })
    }

    /// The variants published into index `name` (the variant of that name and
    /// every variant whose `index` names it), at most one per architecture.
    pub fn index_members(&self, name: &str) -> Vec<&Variant> {
        self.variants.iter().filter(|v| v.index_name() == name).collect()
    }
}

/// The dotted key whose value holds byte `offset` (`toolchain.python`,
/// `variant.topology`): the last `[table]` / `[[table]]` header above it and
/// the key of its line. `None` when the line has no `key =`.
pub fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    if key.is_empty() || key.starts_with('[') || key.starts_with('#') {
        return None;
    }
    let table = text[..start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|h| h.trim_start_matches('[').split(']').next().unwrap_or("").trim().to_string());
    let key = forge_os::input::excerpt(key, 60);
    Some(match table {
        Some(t) if !t.is_empty() => format!("{}.{key}", forge_os::input::excerpt(&t, 60)),
        _ => key,
    })
}

/// Most nodes, GPUs per node, ranks per NVLink domain and EP ranks a
/// topology may name: far above any machine, small enough that no product of
/// them overflows a `u32`.
pub const MAX_NODES: u32 = 4096;
pub const MAX_GPUS_PER_NODE: u32 = 1024;
pub const MAX_EP: u32 = MAX_NODES * MAX_GPUS_PER_NODE;

/// Each topology number within its bound, named with what was expected.
fn topology_bounds(name: &str, t: &RawTopology, span: std::ops::Range<usize>, err: &Err) -> Result<()> {
    let fields = [
        ("nodes", t.nodes, MAX_NODES),
        ("gpus_per_node", t.gpus_per_node, MAX_GPUS_PER_NODE),
        ("ranks_per_domain", t.ranks_per_domain, MAX_GPUS_PER_NODE),
        ("ep", t.ep, MAX_EP),
    ];
    for (key, value, max) in fields {
        if value > max {
            return Err(err(
                span,
                format!("variant `{name}`: topology.{key} = {value}: expected 1 to {max} (e.g. nodes = 2, gpus_per_node = 8, ep = 16)"),
            ));
        }
    }
    Ok(())
}

/// 1-based (line, column) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, col)
}

// ---- raw (serde) shape ------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPins {
    schema: Spanned<i64>,
    source: RawSource,
    pin: BTreeMap<String, Spanned<RawPin>>,
    toolchain: Option<RawToolchain>,
    rdma_core: Option<RawRdmaCore>,
    #[serde(default)]
    variant: Vec<Spanned<RawVariant>>,
    evidence: Option<Spanned<RawEvidence>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvidence {
    require: Spanned<String>,
    #[serde(default)]
    rule: Vec<Spanned<RawEvidenceRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvidenceRule {
    variants: Spanned<Vec<Spanned<String>>>,
    kind: Option<Spanned<String>>,
    gpu: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: Spanned<String>,
    repo: Spanned<String>,
    branch: Option<String>,
    base_version: Spanned<String>,
    upstream: Option<Spanned<String>>,
    upstream_branch: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPin {
    rev: Spanned<String>,
    patches: Option<Vec<Spanned<RawPatch>>>,
}

/// A TOML value of one of several shapes (a string, a list, a table), read
/// without serde's `untagged` (whose error names only the Rust type): the
/// first variant whose shape matches is read; a value of no listed shape is
/// "expected WHAT, found a KIND", and a bad value of a listed shape says
/// WHAT too. `WHAT` holds an example. The caller's deserializer adds
/// file:line:column.
#[macro_export]
macro_rules! toml_shapes {
    ($(#[$m:meta])* $vis:vis enum $name:ident, $what:expr, { $($var:ident($ty:ty) if $shape:ident),+ $(,)? }) => {
        $(#[$m])*
        $vis enum $name { $($var($ty)),+ }
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                use serde::de::Error as _;
                let v = toml::Value::deserialize(d)?;
                $(
                    if v.$shape() {
                        return <$ty as serde::Deserialize>::deserialize(v)
                            .map($name::$var)
                            .map_err(|e| D::Error::custom(format!("expected {}: {}", $what, e.message().trim())));
                    }
                )+
                Err(D::Error::custom(format!("expected {}, found {}", $what, $crate::pins::toml_kind(&v))))
            }
        }
    };
}

/// What kind of TOML value `v` is, in words (`an integer`, `a list`).
pub fn toml_kind(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float (write versions as strings, e.g. \"3.12\")",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "a list",
        toml::Value::Table(_) => "a table",
    }
}

toml_shapes!(
    /// A `patches` entry: `"patches/x.patch"` or `{ path = "...", sha256 = "..." }`.
    enum RawPatch,
    "a patch path such as \"patches/fix.patch\" or a table such as { path = \"patches/fix.patch\", sha256 = \"<64 hex>\" }",
    { Path(String) if is_str, Recorded(RawRecordedPatch) if is_table }
);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecordedPatch {
    path: String,
    sha256: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolchain {
    torch: Option<Spanned<String>>,
    cuda: Option<Spanned<String>>,
    python: Option<Spanned<RawPythons>>,
    nvshmem: Option<Spanned<String>>,
    nccl: Option<Spanned<String>>,
    manylinux: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRdmaCore {
    repo: Spanned<String>,
    #[serde(rename = "ref")]
    git_ref: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVariant {
    name: Spanned<String>,
    arch: Spanned<String>,
    cuda_arch_list: Spanned<String>,
    multinode: bool,
    transport: Option<Spanned<String>>,
    rdma_core_home: Option<String>,
    nvshmem_dir: Option<String>,
    description: Option<String>,
    topology: Option<Spanned<RawTopology>>,
    env: Option<Spanned<BTreeMap<Spanned<String>, Spanned<String>>>>,
    index: Option<Spanned<String>>,
    runtime_requires: Option<bool>,
    patches: Option<Vec<Spanned<RawPatch>>>,
}

toml_shapes!(
    /// `python = "3.12"` or `python = ["3.11", "3.12"]`.
    enum RawPythons,
    "a Python version string such as \"3.12\", or a list of minor-version strings such as [\"3.11\", \"3.12\"]",
    { One(String) if is_str, Many(Vec<String>) if is_array }
);

toml_shapes!(
    /// `gpu = "h100"` or `gpu = ["h100", "b200"]`.
    enum RawGpus,
    "a GPU name string such as \"h100\", or a list of them such as [\"h100\", \"b200\"]",
    { One(String) if is_str, Many(Vec<String>) if is_array }
);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    gpu: Spanned<RawGpus>,
    nodes: u32,
    gpus_per_node: u32,
    ep: u32,
    ranks_per_domain: u32,
    mnnvl: bool,
}

/// The error of a pins.toml value: `file:line:column: message` (exit 2).
type Err<'e> = dyn Fn(std::ops::Range<usize>, String) -> anyhow::Error + 'e;

/// Every check of pins.toml, table by table; the first problem is exit 2 with file:line:column.
fn validate(raw: RawPins, text: &str, path: &Path) -> Result<Pins> {
    let err = |span: std::ops::Range<usize>, msg: String| -> anyhow::Error {
        let (line, col) = line_col(text, span.start);
        Failure::usage(format!("{}:{line}:{col}: {msg}", path.display())).into()
    };
    schema(&raw.schema, text, path, &err)?;
    let source = source(raw.source, text, &err)?;
    let pins = pin_tables(raw.pin, path, text, &err)?;
    let (toolchain, manylinux) = match raw.toolchain {
        Some(t) => toolchain(t, text, &err)?,
        None => (None, None),
    };
    let rdma_core = raw.rdma_core.map(|r| rdma_core(r, &err)).transpose()?;
    let mut variants: Vec<Variant> = Vec::new();
    let mut index_keys = Vec::new();
    for sv in raw.variant {
        index_keys.push(sv.get_ref().index.as_ref().map(|i| i.span()));
        let v = variant(sv, &pins, &variants, text, &err)?;
        variants.push(v);
    }
    variant_index(&variants, &index_keys, &err)?;
    let evidence = raw.evidence.map(|e| evidence(e, &variants, text, &err)).transpose()?;
    Ok(Pins { path: path.to_path_buf(), source, pins, toolchain, manylinux, rdma_core, variants, evidence })
}

/// `schema`: this deepep-forge reads schema 2; schema 1 gets how to update.
fn schema(schema: &Spanned<i64>, text: &str, path: &Path, err: &Err) -> Result<()> {
    if *schema.get_ref() == 1 {
        let (line, col) = line_col(text, schema.span().start);
        return Err(Failure::usage(format!(
            "{}:{line}:{col}: schema = 1 is the previous pins.toml format; this deepep-forge reads schema = {SCHEMA}",
            path.display()
        ))
        .hint(
            "write `schema = 2`: every schema-1 file is valid schema 2 (schema 2 makes a variant's `topology` optional, \
             lets `topology.gpu` list several GPUs for a fat build, e.g. gpu = [\"h100\", \"b200\"], and checks GPU names)",
        )
        .into());
    }
    if *schema.get_ref() != SCHEMA {
        return Err(err(
            schema.span(),
            format!("schema = {} is not supported: expected schema = {SCHEMA}", schema.get_ref()),
        ));
    }
    Ok(())
}

/// `[source]`: a distribution name, a remote repository, a base version without a local part.
fn source(mut s: RawSource, text: &str, err: &Err) -> Result<Source> {
    if s.name.get_ref().trim().is_empty() {
        return Err(err(
            s.name.span(),
            "source.name is empty: expected the distribution name, e.g. \"deep_ep\"".into(),
        ));
    }
    if let Err(why) = forge_os::process::git::check_file_url(s.repo.get_ref()) {
        return Err(err(s.repo.span(), format!("source.repo `{}`: {why}", forge_os::http::redact(s.repo.get_ref()))));
    }
    if pep440_rs::Version::from_str(s.base_version.get_ref()).is_err() || s.base_version.get_ref().contains('+') {
        return Err(err(
            s.base_version.span(),
            format!(
                "base_version `{}` is not a PEP 440 version without a local part (expected e.g. \"1.2.1\")",
                forge_os::input::excerpt(s.base_version.get_ref(), 80)
            ),
        ));
    }
    let upstream = upstream(s.upstream.take(), s.upstream_branch.take(), &s.repo, text, err)?;
    Ok(Source {
        name: s.name.into_inner(),
        repo: s.repo.into_inner(),
        branch: s.branch,
        base_version: s.base_version.into_inner(),
        upstream,
    })
}

/// `[source] upstream` and `upstream_branch`: both or neither; a remote URL
/// that is not `repo`; a plain branch name.
fn upstream(
    repo: Option<Spanned<String>>,
    branch: Option<Spanned<String>>,
    fork: &Spanned<String>,
    text: &str,
    err: &Err,
) -> Result<Option<Upstream>> {
    let (repo, branch) = match (repo, branch) {
        (None, None) => return Ok(None),
        (Some(r), Some(b)) => (r, b),
        (Some(r), None) => {
            return Err(err(
                r.span(),
                "source.upstream without source.upstream_branch: expected both (e.g. upstream_branch = \"main\"), or neither for a repository that is not a fork".into(),
            ))
        }
        (None, Some(b)) => {
            return Err(err(
                b.span(),
                "source.upstream_branch without source.upstream: expected both (e.g. upstream = \"https://github.com/deepseek-ai/DeepEP\"), or neither".into(),
            ))
        }
    };
    if let Err(why) = forge_os::process::git::check_file_url(repo.get_ref()) {
        return Err(err(repo.span(), format!("source.upstream `{}`: {why}", forge_os::http::redact(repo.get_ref()))));
    }
    if same_url(repo.get_ref(), fork.get_ref()) {
        let line = line_col(text, fork.span().start).0;
        return Err(err(
            repo.span(),
            format!(
                "source.upstream `{}` is source.repo itself (line {line}): a fork's upstream is the repository it was forked from; leave both upstream keys out for a repository that is not a fork",
                forge_os::input::excerpt(repo.get_ref(), 80)
            ),
        ));
    }
    if let Err(why) = check_branch_name(branch.get_ref()) {
        return Err(err(
            branch.span(),
            format!("source.upstream_branch `{}`: {why}", forge_os::input::excerpt(branch.get_ref(), 80)),
        ));
    }
    Ok(Some(Upstream { repo: repo.into_inner(), branch: branch.into_inner() }))
}

/// One spelling of a repository URL: no scheme, no trailing `/` or `.git`, lower case.
fn same_url(a: &str, b: &str) -> bool {
    let norm = |u: &str| {
        let u = u.trim().trim_end_matches('/');
        let u = u.strip_suffix(".git").unwrap_or(u);
        u.split_once("://").map(|(_, r)| r).unwrap_or(u).to_ascii_lowercase()
    };
    norm(a) == norm(b)
}

/// A branch name git fetches as `refs/heads/<name>` and that can never be
/// read as an option or a revision range: letters, digits, `.`, `_`, `/`,
/// `-`; not starting with `-`, `/` or `.`; no `..`, `//`, `/.`, `@{`; not
/// ending with `/`, `.` or `.lock`; at most 200 characters.
pub fn check_branch_name(b: &str) -> Result<(), Failure> {
    const EXPECTED: &str = "expected a plain branch name (letters, digits, `.`, `_`, `/`, `-`; not starting with `-`, `.` or `/`; no `..` or `//`), e.g. \"main\"";
    let ok = !b.is_empty()
        && b.len() <= 200
        && b.bytes().all(|c| c.is_ascii_alphanumeric() || b"._/-".contains(&c))
        && !b.starts_with(['-', '/', '.'])
        && !b.ends_with(['/', '.'])
        && !b.ends_with(".lock")
        && !b.contains("..")
        && !b.contains("//")
        && !b.contains("/.");
    if ok {
        Ok(())
    } else {
        Err(Failure::usage(EXPECTED))
    }
}

/// `[pin.<arch>]`: known architectures, full 40-hex revisions, at least one.
fn pin_tables(
    raw: BTreeMap<String, Spanned<RawPin>>,
    path: &Path,
    text: &str,
    err: &Err,
) -> Result<BTreeMap<Arch, Pin>> {
    let mut pins = BTreeMap::new();
    for (key, mut p) in raw {
        let patches = patch_list(p.get_mut().patches.take(), text, err)?;
        let arch: Arch = key.parse().map_err(|m: Failure| err(p.span(), format!("[pin.{key}]: {m}")))?;
        let rev = p.get_ref().rev.get_ref().clone();
        let rspan = p.get_ref().rev.span();
        if !is_full_sha(&rev) {
            return Err(err(
                rspan,
                format!(
                    "rev `{}` is not a full commit: expected 40 lowercase hex characters",
                    forge_os::input::excerpt(&rev, 80)
                ),
            ));
        }
        pins.insert(arch, Pin { arch, rev, line: line_col(text, rspan.start).0, patches });
    }
    if pins.is_empty() {
        return Err(Failure::usage(format!(
            "{}: no [pin.<arch>] table: expected [pin.x86_64] and/or [pin.aarch64]",
            path.display()
        ))
        .into());
    }
    Ok(pins)
}

/// `toolchain.manylinux`: a manylinux policy's glibc, `2_28` (or `manylinux_2_28`), one auditwheel knows.
fn manylinux_floor(m: Spanned<String>, err: &Err) -> Result<String> {
    let v = m.get_ref();
    let name = v.strip_prefix("manylinux_").unwrap_or(v);
    if forge_wheel::manylinux::table::POLICIES.iter().any(|r| r.name.strip_prefix("manylinux_") == Some(name)) {
        return Ok(name.to_string());
    }
    let known: Vec<&str> =
        forge_wheel::manylinux::table::POLICIES.iter().filter_map(|r| r.name.strip_prefix("manylinux_")).collect();
    Err(err(
        m.span(),
        format!(
            "toolchain.manylinux `{}`: expected a manylinux policy's glibc, one of {}",
            forge_os::input::excerpt(v, 40),
            known.join(", ")
        ),
    ))
}

/// `[toolchain]`: torch a PEP 440 version, cuda major.minor, python a version (never a path),
/// and the manylinux floor, which stands alone too (`[toolchain] manylinux = "2_28"`: the
/// floor of every toolchain, the registry's needs torch and cuda). Returns the registry
/// toolchain (None without torch and cuda) and the floor.
fn toolchain(t: RawToolchain, text: &str, err: &Err) -> Result<(Option<Toolchain>, Option<String>)> {
    let manylinux = t.manylinux.map(|m| manylinux_floor(m, err)).transpose()?;
    let (torch, cuda) = match (t.torch, t.cuda) {
        (Some(torch), Some(cuda)) => (torch, cuda),
        (None, None) => {
            let rest = [
                t.python.as_ref().map(|p| ("python", p.span())),
                t.nvshmem.as_ref().map(|n| ("nvshmem", n.span())),
                t.nccl.as_ref().map(|n| ("nccl", n.span())),
            ];
            if let Some((key, span)) = rest.into_iter().flatten().next() {
                return Err(err(span, format!("toolchain.{key} is the registry toolchain's: it needs toolchain.torch and toolchain.cuda too (only `manylinux` stands alone)")));
            }
            return Ok((None, manylinux));
        }
        (Some(one), None) | (None, Some(one)) => {
            return Err(err(one.span(), "toolchain.torch and toolchain.cuda go together: give both (e.g. torch = \"2.11.0\", cuda = \"13.0\"), or neither (only `manylinux` stands alone)".to_string()));
        }
    };
    if let Err(why) = crate::pep::check_version(torch.get_ref()) {
        return Err(err(torch.span(), format!("toolchain.torch {why}")));
    }
    let c = cuda.get_ref();
    let part = |p: &str| (1..=2).contains(&p.len()) && p.bytes().all(|x| x.is_ascii_digit());
    let ok = c.split_once('.').is_some_and(|(a, b)| part(a) && part(b) && a != "0" && !a.starts_with('0'));
    if !ok {
        return Err(err(
            cuda.span(),
            format!(
                "toolchain.cuda `{}`: expected CUDA major.minor, each 1 or 2 digits (major 1 to 99), e.g. \"13.0\"",
                forge_os::input::excerpt(c, 80)
            ),
        ));
    }
    let pythons = t.python.as_ref().map(|py| pythons(py, text, err)).transpose()?.unwrap_or_default();
    let nvshmem = package_version(t.nvshmem, "toolchain.nvshmem", err)?;
    let nccl = package_version(t.nccl, "toolchain.nccl", err)?;
    let tc = Toolchain {
        manylinux: manylinux.clone(),
        torch: torch.into_inner(),
        cuda: cuda.into_inner(),
        python: pythons.first().cloned(),
        python_matrix: matches!(t.python.as_ref().map(Spanned::get_ref), Some(RawPythons::Many(_))),
        pythons,
        nvshmem,
        nccl,
    };
    Ok((Some(tc), manylinux))
}

/// Most Pythons `[toolchain] python` may list (each is a column of the build matrix).
pub const MAX_PYTHONS: usize = 16;

/// `[toolchain] python`: one version (`"3.12"`, or `"3.12.1"` as before), or
/// a non-empty list of distinct minors `X.Y` (a wheel's `cpXY` tag names a
/// minor, so a patch release in a list would be a matrix column that builds
/// the same tag twice). Never a path: an interpreter path would be a program
/// a pull request chooses (paths come from --python on the command line).
fn pythons(py: &Spanned<RawPythons>, text: &str, err: &Err) -> Result<Vec<String>> {
    let list = match py.get_ref() {
        RawPythons::One(v) => {
            if !python_version(v, 3) {
                return Err(err(
                    py.span(),
                    format!(
                        "toolchain.python `{}`: expected a Python version such as \"3.12\" (an interpreter path goes to --python)",
                        forge_os::input::excerpt(v, 80)
                    ),
                ));
            }
            return Ok(vec![v.clone()]);
        }
        RawPythons::Many(list) => list,
    };
    if list.is_empty() || list.len() > MAX_PYTHONS {
        return Err(err(
            py.span(),
            format!(
                "toolchain.python lists {} Pythons: expected 1 to {MAX_PYTHONS} minors, e.g. [\"3.11\", \"3.12\"]",
                list.len()
            ),
        ));
    }
    let mut seen: Vec<(u32, u32)> = Vec::new();
    for (i, v) in list.iter().enumerate() {
        let at = item_span(text, py.span(), list, i);
        let minor = python_minor(v).ok_or_else(|| {
            err(
                at.clone(),
                format!(
                    "toolchain.python `{}`: a list holds Python minors such as \"3.12\" (major 3, no patch release: a wheel's cpXY tag names the minor; an interpreter path goes to --python)",
                    forge_os::input::excerpt(v, 80)
                ),
            )
        })?;
        if let Some(j) = seen.iter().position(|m| *m == minor) {
            return Err(err(
                at,
                format!(
                    "toolchain.python lists Python {}.{} twice (`{}` and `{v}`): each minor once",
                    minor.0, minor.1, list[j]
                ),
            ));
        }
        seen.push(minor);
    }
    Ok(list.clone())
}

/// Digits separated by dots, at most `parts` of them (each at most 3 digits).
fn python_version(v: &str, parts: usize) -> bool {
    !v.is_empty()
        && v.split('.').count() <= parts
        && v.split('.').all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `3.12` -> (3, 12); None unless exactly major 3 and a minor.
fn python_minor(v: &str) -> Option<(u32, u32)> {
    let (major, minor) = v.split_once('.')?;
    if !python_version(v, 2) || major != "3" {
        return None;
    }
    Some((3, minor.parse().ok()?))
}

/// Where the `i`-th string of a list value at `span` is: its quoted text found
/// in order within the value (serde's untagged list keeps no spans of its own).
fn item_span(text: &str, span: std::ops::Range<usize>, list: &[String], i: usize) -> std::ops::Range<usize> {
    let value = text.get(span.clone()).unwrap_or("");
    let mut from = 0;
    for (k, item) in list.iter().enumerate() {
        let Some(at) = value[from..].find(item.as_str()) else { break };
        let start = from + at;
        if k == i {
            let quote = start.saturating_sub(1);
            return span.start + quote..span.start + start + item.len() + 1;
        }
        from = start + item.len();
    }
    span
}

/// An exact package version (`toolchain.nvshmem`, `toolchain.nccl`): digits and dots only,
/// so it can only ever become `name==version`.
fn package_version(v: Option<Spanned<String>>, key: &str, err: &Err) -> Result<Option<String>> {
    let Some(v) = v else { return Ok(None) };
    let s = v.get_ref();
    let ok = !s.is_empty()
        && s.split('.').count() <= 4
        && s.split('.').all(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()));
    if !ok {
        return Err(err(
            v.span(),
            format!("{key} `{}`: expected an exact version such as \"2.30.7\"", forge_os::input::excerpt(s, 80)),
        ));
    }
    Ok(Some(v.into_inner()))
}

/// `[rdma_core]`: a remote repository and a plain ref.
fn rdma_core(r: RawRdmaCore, err: &Err) -> Result<RdmaCore> {
    if let Err(why) = forge_os::process::git::check_file_url(r.repo.get_ref()) {
        return Err(err(
            r.repo.span(),
            format!("rdma_core.repo `{}`: {why}", forge_os::http::redact(r.repo.get_ref())),
        ));
    }
    let g = r.git_ref.get_ref();
    let ref_ok = !g.is_empty()
        && !g.starts_with('-')
        && g.bytes().all(|b| b.is_ascii_alphanumeric() || b"._/-+".contains(&b))
        && !g.contains("..");
    if !ref_ok {
        return Err(err(
            r.git_ref.span(),
            format!(
                "rdma_core.ref `{}`: expected a tag, branch or commit (letters, digits, `.`, `_`, `/`, `-`, `+`; not starting with `-`)",
                forge_os::input::excerpt(g, 80)
            ),
        ));
    }
    Ok(RdmaCore { repo: r.repo.into_inner(), git_ref: r.git_ref.into_inner() })
}

/// One `[[variant]]`: name, architecture (pinned), arch list, transport, `env`, `topology`.
fn variant(
    sv: Spanned<RawVariant>,
    pins: &BTreeMap<Arch, Pin>,
    before: &[Variant],
    text: &str,
    err: &Err,
) -> Result<Variant> {
    let vspan = sv.span();
    let mut v = sv.into_inner();
    let name = variant_name(&v.name, before, err)?;
    let arch: Arch = v.arch.get_ref().parse().map_err(|m: Failure| err(v.arch.span(), m.message))?;
    if !pins.contains_key(&arch) {
        return Err(err(v.arch.span(), format!("variant `{name}` builds for {arch}, but there is no [pin.{arch}]")));
    }
    let cuda_arch_list: ArchList =
        v.cuda_arch_list.get_ref().parse().map_err(|m: Failure| err(v.cuda_arch_list.span(), m.message))?;
    let transport = transport(&v, &name, &cuda_arch_list, err)?;
    let env = variant_env(&v, &name, text, err)?;
    let patches = patch_list(v.patches.take(), text, err)?;
    if let Some(pin) = pins.get(&arch) {
        let all: Vec<&crate::patches::Entry> = pin.patches.iter().chain(&patches).collect();
        if let Some((line, msg)) = crate::patches::check_list(&all) {
            return Err(err(
                line_span(text, line),
                format!("variant `{name}`: {msg} (its pin's and its own together)"),
            ));
        }
    }
    let topology = match &v.topology {
        None => None,
        Some(t) => Some(topology(&name, arch, &cuda_arch_list, v.multinode, t, err)?),
    };
    Ok(Variant {
        name,
        arch,
        cuda_arch_list,
        multinode: v.multinode,
        transport,
        rdma_core_home: v.rdma_core_home.filter(|s| !s.is_empty()),
        nvshmem_dir: v.nvshmem_dir.filter(|s| !s.is_empty()),
        description: v.description,
        topology,
        env,
        index: v.index.map(Spanned::into_inner),
        runtime_requires: v.runtime_requires.unwrap_or(true),
        patches,
        line: line_col(text, vspan.start).0,
    })
}

/// `patches`: relative paths (no `..`, not absolute, plain names), optional
/// recorded sha256s, at most `patches::MAX_PATCHES`, each once. The files are
/// read when a build is planned (`patches::load`), never here.
fn patch_list(raw: Option<Vec<Spanned<RawPatch>>>, text: &str, err: &Err) -> Result<Vec<crate::patches::Entry>> {
    let mut out = Vec::new();
    for r in raw.unwrap_or_default() {
        let span = r.span();
        let (path, sha256) = match r.into_inner() {
            RawPatch::Path(p) => (p, None),
            RawPatch::Recorded(x) => (x.path, x.sha256),
        };
        if let Some(why) = crate::patches::check_path(&path) {
            return Err(err(span, format!("patch `{}` {why}", forge_os::input::excerpt(&path, 80))));
        }
        if let Some(why) = sha256.as_deref().and_then(crate::patches::check_sha256) {
            return Err(err(span, format!("patch `{path}`: sha256 {why}")));
        }
        out.push(crate::patches::Entry { path, sha256, line: line_col(text, span.start).0, text: None });
        let refs: Vec<&crate::patches::Entry> = out.iter().collect();
        if let Some((_, msg)) = crate::patches::check_list(&refs) {
            return Err(err(span, msg));
        }
    }
    Ok(out)
}

/// The byte span of 1-based `line` (for an error about an entry found by its line).
fn line_span(text: &str, line: usize) -> std::ops::Range<usize> {
    let start: usize = text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
    start..start
}

/// `index`: the variant whose index also serves this one's wheels: declared,
/// of another architecture, not itself published elsewhere; one variant per
/// architecture in an index (uv picks a wheel by platform, never by flags).
fn variant_index(variants: &[Variant], spans: &[Option<std::ops::Range<usize>>], err: &Err) -> Result<()> {
    for (v, span) in variants.iter().zip(spans) {
        let (Some(to), Some(span)) = (&v.index, span) else { continue };
        let at = |msg: String| {
            Err(err(
                span.clone(),
                format!("variant `{}`: index = \"{}\": {msg}", v.name, forge_os::input::excerpt(to, 80)),
            ))
        };
        let Some(host) = variants.iter().find(|h| &h.name == to) else {
            return at("no variant of that name; expected the name of the variant (of the other architecture) whose index serves this one's wheels too".into());
        };
        if host.index.as_ref().is_some_and(|h| h != &host.name) {
            return at(format!(
                "variant `{}` is itself published into index `{}`: name that one",
                host.name,
                host.index_name()
            ));
        }
        if let Some(other) = variants.iter().find(|o| o.name != v.name && o.arch == v.arch && o.index_name() == to) {
            return at(format!(
                "variant `{}` (line {}) is already index `{to}`'s {} variant: one variant per architecture in an index, because uv picks a wheel by platform, never by build flags",
                other.name, other.line, v.arch
            ));
        }
    }
    Ok(())
}

/// A variant name: lowercase letters, digits, `-`, `_`, declared once.
fn variant_name(name: &Spanned<String>, before: &[Variant], err: &Err) -> Result<String> {
    let span = name.span();
    let name = name.get_ref().clone();
    let valid_name = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if !valid_name {
        return Err(err(
            span,
            format!(
                "variant name `{}`: expected lowercase letters, digits, `-` and `_`",
                forge_os::input::excerpt(&name, 80)
            ),
        ));
    }
    if let Some(prev) = before.iter().find(|p| p.name == name) {
        return Err(err(span, format!("variant `{name}` is declared twice (first at line {})", prev.line)));
    }
    Ok(name)
}

/// `transport`: doca (default) or nixl, multinode only; DOCA multinode refuses +PTX.
fn transport(v: &RawVariant, name: &str, cuda_arch_list: &ArchList, err: &Err) -> Result<Transport> {
    let transport = match &v.transport {
        None => Transport::Doca,
        Some(t) => match t.get_ref().as_str() {
            "doca" => Transport::Doca,
            "nixl" => Transport::Nixl,
            other => {
                return Err(err(
                    t.span(),
                    format!("transport `{}`: expected \"doca\" or \"nixl\"", forge_os::input::excerpt(other, 40)),
                ))
            }
        },
    };
    if !v.multinode && transport == Transport::Nixl {
        let t = v.transport.as_ref().expect("nixl was written");
        return Err(err(
            t.span(),
            format!("variant `{name}` is single-node: transport applies only with multinode = true"),
        ));
    }
    if v.multinode && transport == Transport::Doca && cuda_arch_list.has_ptx() {
        return Err(err(
            v.cuda_arch_list.span(),
            format!(
                "variant `{name}`: the DOCA multinode build rejects +PTX entries in the arch list (DeepEP setup.py)"
            ),
        ));
    }
    Ok(transport)
}

/// A variant's `env`: variable names (A-Z, 0-9, _) and one-line values; what the build reads is checked at plan time.
fn variant_env(v: &RawVariant, name: &str, text: &str, err: &Err) -> Result<Vec<EnvSetting>> {
    let mut env = Vec::new();
    for (k, val) in v.env.as_ref().map(|e| e.get_ref().iter()).into_iter().flatten() {
        let n = k.get_ref();
        let ok = !n.is_empty()
            && n.len() <= 64
            && n.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && !n.as_bytes()[0].is_ascii_digit();
        if !ok {
            return Err(err(
                k.span(),
                format!(
                    "variant `{name}`: env name `{}`: expected an environment variable name (A-Z, 0-9, _)",
                    forge_os::input::excerpt(n, 80)
                ),
            ));
        }
        let value = val.get_ref();
        if value.len() > 4096 || value.contains(['\0', '\n']) {
            return Err(err(
                val.span(),
                format!("variant `{name}`: env {n}: the value must be one line of at most 4096 bytes"),
            ));
        }
        env.push(EnvSetting { name: n.clone(), value: value.clone(), line: line_col(text, k.span().start).0 });
    }
    Ok(env)
}

/// Validate a variant's `topology` table.
fn topology(
    name: &str,
    arch: Arch,
    list: &ArchList,
    multinode: bool,
    st: &Spanned<RawTopology>,
    err: &dyn Fn(std::ops::Range<usize>, String) -> anyhow::Error,
) -> Result<IntendedTopology> {
    let t = st.get_ref();
    let tspan = st.span();
    let names = match t.gpu.get_ref() {
        RawGpus::One(g) => vec![g.clone()],
        RawGpus::Many(v) => v.clone(),
    };
    let gspan = t.gpu.span();
    if names.is_empty() {
        return Err(err(
            gspan,
            format!("variant `{name}`: topology.gpu is empty: name at least one GPU, e.g. \"h100\""),
        ));
    }
    let mut gpus: Vec<Gpu> = Vec::new();
    for g in &names {
        let gpu: Gpu = g.parse().map_err(|m: Failure| err(gspan.clone(), format!("variant `{name}`: {m}")))?;
        if gpus.contains(&gpu) {
            return Err(err(gspan.clone(), format!("variant `{name}`: topology.gpu names {gpu} twice")));
        }
        if gpu.host_arch().is_some_and(|a| a != arch) {
            return Err(err(
                gspan.clone(),
                format!(
                    "variant `{name}` builds for {arch}, but {gpu} systems have {} hosts",
                    gpu.host_arch().expect("some")
                ),
            ));
        }
        if !list.runs_on(gpu.cc()) {
            return Err(err(
                gspan.clone(),
                format!(
                    "variant `{name}`: topology names {gpu} (sm_{}, compute capability {}), which cuda_arch_list \"{list}\" cannot run on: {}",
                    gpu.sm(),
                    gpu.cc(),
                    list.would_serve(gpu.cc())
                ),
            ));
        }
        gpus.push(gpu);
    }
    if t.ep == 0 || t.ranks_per_domain == 0 || t.nodes == 0 || t.gpus_per_node == 0 {
        return Err(err(tspan, format!("variant `{name}`: topology numbers must be at least 1")));
    }
    topology_bounds(name, t, tspan.clone(), err)?;
    if !t.ep.is_multiple_of(t.ranks_per_domain) {
        return Err(err(
            tspan,
            format!(
                "variant `{name}`: topology ep {} is not a multiple of ranks_per_domain {}",
                t.ep, t.ranks_per_domain
            ),
        ));
    }
    let total = u64::from(t.nodes) * u64::from(t.gpus_per_node);
    if u64::from(t.ep) > total {
        return Err(err(
            tspan,
            format!("variant `{name}`: topology ep {} exceeds nodes × gpus_per_node = {total}", t.ep),
        ));
    }
    if t.ep / t.ranks_per_domain > 1 && !multinode {
        return Err(err(
            tspan,
            format!(
                "variant `{name}`: its topology spans {} NVLink domains (ep {} / ranks_per_domain {}), which needs multinode = true",
                t.ep / t.ranks_per_domain,
                t.ep,
                t.ranks_per_domain
            ),
        ));
    }
    Ok(IntendedTopology {
        gpu: gpus,
        nodes: t.nodes,
        gpus_per_node: t.gpus_per_node,
        ep: t.ep,
        ranks_per_domain: t.ranks_per_domain,
        mnnvl: t.mnnvl,
    })
}

/// `[evidence]`: `require` a kind of the ladder, then each `[[evidence.rule]]`.
fn evidence(e: Spanned<RawEvidence>, variants: &[Variant], text: &str, err: &Err) -> Result<EvidencePolicy> {
    let e = e.into_inner();
    let require = evidence_kind(&e.require, "evidence.require", err)?;
    let mut rules: Vec<EvidenceRule> = Vec::new();
    for r in e.rule {
        let line = line_col(text, r.span().start).0;
        let r = r.into_inner();
        let names = evidence_rule_variants(&r.variants, variants, &rules, err)?;
        let kind = evidence_rule_kind(r.kind.as_ref(), require, err)?;
        let gpu = evidence_rule_gpu(r.gpu.as_ref(), &names, variants, err)?;
        rules.push(EvidenceRule { variants: names, kind, gpu, line });
    }
    Ok(EvidencePolicy { require, rules, line: line_col(text, e.require.span().start).0 })
}

/// A kind of the evidence ladder by name; anything else lists the valid ones.
fn evidence_kind(k: &Spanned<String>, key: &str, err: &Err) -> Result<Kind> {
    Kind::named(k.get_ref()).ok_or_else(|| {
        err(
            k.span(),
            format!(
                "{key} `{}` is not a kind of evidence: expected one of {} (docs/evidence.md, the ladder)",
                forge_os::input::excerpt(k.get_ref(), 40),
                Kind::names()
            ),
        )
    })
}

/// A rule's `variants`: at least one, each a declared variant, each in one rule only.
fn evidence_rule_variants(
    list: &Spanned<Vec<Spanned<String>>>,
    variants: &[Variant],
    before: &[EvidenceRule],
    err: &Err,
) -> Result<Vec<String>> {
    if list.get_ref().is_empty() {
        return Err(err(
            list.span(),
            "evidence.rule.variants is empty: name the variants the rule is for, e.g. [\"h100-multinode\"]".into(),
        ));
    }
    let mut names: Vec<String> = Vec::new();
    for n in list.get_ref() {
        let name = n.get_ref();
        if !variants.iter().any(|v| &v.name == name) {
            let known: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
            return Err(err(
                n.span(),
                format!(
                    "evidence.rule names variant `{}`, which pins.toml does not declare (known: {})",
                    forge_os::input::excerpt(name, 80),
                    known.join(", ")
                ),
            ));
        }
        if names.contains(name) {
            return Err(err(n.span(), format!("evidence.rule names variant `{name}` twice")));
        }
        if let Some(prev) = before.iter().find(|r| r.variants.contains(name)) {
            return Err(err(
                n.span(),
                format!(
                    "variant `{name}` is already in the [[evidence.rule]] at line {}: one rule per variant",
                    prev.line
                ),
            ));
        }
        names.push(name.clone());
    }
    Ok(names)
}

/// A rule's `kind`: a kind of the ladder, never below `require` (a rule only raises it).
fn evidence_rule_kind(kind: Option<&Spanned<String>>, require: Kind, err: &Err) -> Result<Kind> {
    let Some(k) = kind else { return Ok(require) };
    let kind = evidence_kind(k, "evidence.rule.kind", err)?;
    if kind < require {
        return Err(err(
            k.span(),
            format!(
                "evidence.rule.kind `{kind}` is weaker than evidence.require = `{require}`: a rule only raises what every wheel needs"
            ),
        ));
    }
    Ok(kind)
}

/// A rule's `gpu`: a GPU kind every variant of the rule builds for.
fn evidence_rule_gpu(
    gpu: Option<&Spanned<String>>,
    names: &[String],
    variants: &[Variant],
    err: &Err,
) -> Result<Option<Gpu>> {
    let Some(g) = gpu else { return Ok(None) };
    let parsed: Gpu = g.get_ref().parse().map_err(|m: Failure| err(g.span(), format!("evidence.rule.gpu: {m}")))?;
    for v in variants.iter().filter(|v| names.contains(&v.name)) {
        if !v.cuda_arch_list.runs_on(parsed.cc()) {
            return Err(err(
                g.span(),
                format!(
                    "evidence.rule.gpu = {}, but variant `{}` (cuda_arch_list \"{}\") does not build for it: no statement could meet the rule",
                    parsed.generation(),
                    v.name,
                    v.cuda_arch_list
                ),
            ));
        }
    }
    Ok(Some(parsed))
}

/// One `env` entry of a variant, with the line of its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvSetting {
    pub name: String,
    pub value: String,
    pub line: usize,
}

/// A full commit sha: exactly 40 lowercase hex characters.
pub fn is_full_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `pins show` for people: the source, one line per pin, one per variant.
impl Pins {
    pub fn render_human(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "source: {} ({})", self.source.repo, self.source.branch.as_deref().unwrap_or("-"));
        if let Some(u) = &self.source.upstream {
            let _ = writeln!(out, "fork of: {} ({})", u.repo, u.branch);
        }
        for pin in self.pins.values() {
            let label = self.label(pin.arch).unwrap_or_default();
            let _ = writeln!(out, "pin {:<8} {}  label {label}", pin.arch.as_str(), pin.rev);
        }
        for v in &self.variants {
            let intended = match &v.topology {
                Some(t) => format!(
                    "for {} EP {} over {}x{} (R {}, MNNVL {})",
                    t.gpu_names(","),
                    t.ep,
                    t.nodes,
                    t.gpus_per_node,
                    t.ranks_per_domain,
                    if t.mnnvl { "yes" } else { "no" }
                ),
                None => "no intended topology".into(),
            };
            let _ = writeln!(
                out,
                "variant {:<16} {:<8} arch-list {:<9} {:<11} {intended}",
                v.name,
                v.arch.as_str(),
                v.cuda_arch_list.to_env(),
                if v.multinode { format!("multi/{}", v.transport.as_str()) } else { "single-node".into() },
            );
        }
        if let Some(e) = &self.evidence {
            let _ = writeln!(out, "evidence require {}  (every locked deep-ep wheel, lock check)", e.require);
            for r in &e.rules {
                let gpu = r.gpu.map(|g| format!(" on {}", g.generation())).unwrap_or_default();
                let _ = writeln!(out, "evidence rule    {}{gpu}  for {}", r.kind, r.variants.join(", "));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = include_str!("../../../pins.toml");

    fn parse(t: &str) -> Result<Pins> {
        Pins::parse(t, Path::new("pins.toml"))
    }

    #[test]
    fn shipped_pins_are_valid_and_name_the_required_variants() {
        let p = parse(GOOD).unwrap();
        for (name, arch, list, multi) in [
            ("h100", Arch::X86_64, "9.0", false),
            ("h100-multinode", Arch::X86_64, "9.0", true),
            ("b200-multinode", Arch::X86_64, "10.0", true),
            ("gb200-nvl72", Arch::Aarch64, "10.0", false),
            ("gb200-multinode", Arch::Aarch64, "10.0", true),
        ] {
            let v = p.variant(name).unwrap();
            assert_eq!((v.arch, v.cuda_arch_list.to_env().as_str(), v.multinode), (arch, list, multi), "{name}");
        }
        for a in Arch::ALL {
            assert_eq!(p.pin(a).unwrap().rev, "17cfb817bccec3a9c247013360cc550c2bac441e");
            assert_eq!(p.label(a).unwrap(), "1.2.1+17cfb81");
        }
    }

    fn err_of(t: &str) -> String {
        format!("{:#}", parse(t).unwrap_err())
    }

    /// pins.toml with `[toolchain] python = <value>` (the shipped file's line replaced).
    fn with_python(value: &str) -> String {
        let line = GOOD.lines().find(|l| l.starts_with("python = ")).expect("the shipped pins name a python");
        GOOD.replacen(line, &format!("python = {value}"), 1)
    }

    #[test]
    fn toolchain_python_is_one_version_or_a_list_of_distinct_minors() {
        let one = parse(&with_python("\"3.12\"")).unwrap().toolchain.unwrap();
        assert_eq!((one.python.as_deref(), one.pythons.as_slice()), (Some("3.12"), &["3.12".to_string()][..]));
        let patch = parse(&with_python("\"3.12.1\"")).unwrap().toolchain.unwrap();
        assert_eq!(patch.pythons, ["3.12.1"], "a single version keeps today's rule");
        let many = parse(&with_python("[\"3.10\", \"3.11\", \"3.12\", \"3.13\"]")).unwrap().toolchain.unwrap();
        assert_eq!(many.pythons, ["3.10", "3.11", "3.12", "3.13"]);
        assert_eq!(many.python.as_deref(), Some("3.10"));
    }

    #[test]
    fn a_bad_python_list_names_the_entry_with_line_and_column() {
        let line = GOOD.lines().position(|l| l.starts_with("python = ")).unwrap() + 1;
        for (value, col, says) in [
            ("[\"3.11\", \"3.12\", \"3.11\"]", 27, "lists Python 3.11 twice (`3.11` and `3.11`)"),
            ("[\"3.11\", \"3.011\"]", 19, "lists Python 3.11 twice"),
            ("[\"3.11\", \"3\"]", 19, "toolchain.python `3`: a list holds Python minors"),
            ("[\"3.12.1\"]", 11, "toolchain.python `3.12.1`: a list holds Python minors"),
            ("[\"2.7\"]", 11, "toolchain.python `2.7`: a list holds Python minors"),
            ("[\"/usr/bin/python3\"]", 11, "an interpreter path goes to --python"),
            ("[\"3.12\", \"../x\"]", 19, "toolchain.python `../x`"),
            ("[]", 10, "lists 0 Pythons: expected 1 to 16 minors"),
            ("\"/usr/bin/python3\"", 10, "expected a Python version such as \"3.12\""),
            ("\"3.12a\"", 10, "toolchain.python `3.12a`"),
        ] {
            let e = err_of(&with_python(value));
            assert!(e.contains(&format!("pins.toml:{line}:{col}: ")), "{value}: {e}");
            assert!(e.contains(says), "{value}: {e}");
            assert_eq!(
                forge_os::error::exit_of(&parse(&with_python(value)).unwrap_err()),
                forge_os::error::Exit::Usage
            );
        }
        let many = format!("[{}]", (0..17).map(|m| format!("\"3.{m}\"")).collect::<Vec<_>>().join(", "));
        assert!(err_of(&with_python(&many)).contains("lists 17 Pythons"));
        let e = err_of(&with_python("[3.12]"));
        assert!(e.contains(&format!("pins.toml:{line}:")), "a number, not a string: {e}");
    }

    #[test]
    fn a_variant_joins_another_architectures_index_and_bad_joins_name_the_line() {
        let arm = "name = \"gb200-nvl72\"\n";
        let p = parse(&GOOD.replacen(arm, &format!("{arm}index = \"h100\"\n"), 1)).unwrap();
        let names: Vec<&str> = p.index_members("h100").iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["h100", "gb200-nvl72"]);
        assert_eq!(p.variant("gb200-nvl72").unwrap().index_name(), "h100");
        assert_eq!(p.variant("h100").unwrap().index_name(), "h100");
        let e = err_of(&GOOD.replacen(arm, &format!("{arm}index = \"nope\"\n"), 1));
        assert!(e.contains("pins.toml:60:9: variant `gb200-nvl72`: index = \"nope\": no variant of that name"), "{e}");
        let e = err_of(&GOOD.replacen(arm, &format!("{arm}index = \"gb200-multinode\"\n"), 1));
        assert!(e.contains("one variant per architecture in an index"), "{e}");
        let mn = "name = \"gb200-multinode\"\n";
        let t = GOOD.replacen(arm, &format!("{arm}index = \"gb200-multinode\"\n"), 1);
        let e = err_of(&t.replacen(mn, &format!("{mn}index = \"h100-multinode\"\n"), 1));
        assert!(e.contains("is itself published into index `h100-multinode`"), "{e}");
    }

    #[test]
    fn upstream_branch_names_are_plain_names_never_options_or_ranges() {
        for ok in ["main", "sgl-deepep", "release/1.2", "v1.2.1_fix"] {
            assert!(check_branch_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(201);
        for bad in [
            "",
            "--upload-pack=x",
            "-b",
            "a..b",
            "main:refs/heads/x",
            "a b",
            "/main",
            "main/",
            ".hidden",
            "a/.b",
            "a//b",
            "x.lock",
            "main.",
            "a@{1}",
            "HEAD~1",
            "a^",
            "a*",
            "a?",
            "a[b",
            "a\\b",
            &long,
        ] {
            assert!(check_branch_name(bad).is_err(), "{bad}");
        }
        let t = GOOD.replacen(
            "branch = \"hybrid-ep\"",
            "branch = \"hybrid-ep\"\nupstream = \"https://github.com/deepseek-ai/DeepEP\"\nupstream_branch = \"main\"",
            1,
        );
        let e = err_of(&t);
        assert!(e.contains("is source.repo itself"), "{e}");
        let t = t.replacen("https://github.com/deepseek-ai/DeepEP\"", "https://github.com/sgl-project/DeepEP\"", 1);
        let u = parse(&t).unwrap().source.upstream.unwrap();
        assert_eq!((u.repo.as_str(), u.branch.as_str()), ("https://github.com/sgl-project/DeepEP", "main"));
    }

    #[test]
    fn unknown_key_is_rejected_with_line_and_column() {
        let t = GOOD.replacen("branch = \"hybrid-ep\"", "branch = \"hybrid-ep\"\nbranhc = \"x\"", 1);
        let line = t.lines().position(|l| l.starts_with("branhc")).unwrap() + 1;
        let e = err_of(&t);
        assert!(e.contains(&format!("pins.toml:{line}:1:")), "{e}");
        assert!(e.contains("unknown field `branhc`"), "{e}");
    }

    #[test]
    fn short_or_uppercase_rev_is_rejected() {
        for bad in ["17cfb81", "17CFB817BCCEC3A9C247013360CC550C2BAC441E"] {
            let t = GOOD.replacen("17cfb817bccec3a9c247013360cc550c2bac441e", bad, 1);
            let e = err_of(&t);
            assert!(e.contains("40 lowercase hex"), "{e}");
            assert!(e.contains("pins.toml:"), "{e}");
        }
    }

    #[test]
    fn arch_lists_are_checked() {
        for (list, ok) in [
            ("9.0", true),
            ("9.0 10.0", true),
            ("9.0;10.0", true),
            ("9.0a", true),
            ("10.0+PTX", true),
            ("9", false),
            ("sm_90", false),
            ("9.0b", false),
            ("9.0 9.0", false),
            ("", false),
        ] {
            assert_eq!(list.parse::<ArchList>().is_ok(), ok, "{list:?}");
        }
        let a: ArchList = "9.0a 10.0+PTX".parse().unwrap();
        assert_eq!(a.0[0].sm(), "sm_90a");
        assert_eq!(a.sm_numbers(), vec![90, 100]);
    }

    #[test]
    fn doca_rejects_ptx_and_duplicates_are_rejected() {
        let t = GOOD.replacen(
            "cuda_arch_list = \"10.0\"\nmultinode = true",
            "cuda_arch_list = \"10.0+PTX\"\nmultinode = true",
            1,
        );
        assert!(err_of(&t).contains("rejects +PTX"), "{}", err_of(&t));
        let t = GOOD.replacen("name = \"h100-multinode\"", "name = \"h100\"", 1);
        assert!(err_of(&t).contains("declared twice"), "{}", err_of(&t));
        let t = GOOD.replacen("arch = \"aarch64\"", "arch = \"riscv64\"", 1);
        assert!(err_of(&t).contains("expected `x86_64` or `aarch64`"), "{}", err_of(&t));
    }

    #[test]
    fn schema_1_is_refused_with_what_changed_and_how_to_update() {
        let err = parse(&GOOD.replacen("schema = 2", "schema = 1", 1)).unwrap_err();
        let e = format!("{err:#}");
        assert!(e.contains("pins.toml:4:10: schema = 1 is the previous pins.toml format"), "{e}");
        let hint = err.downcast_ref::<Failure>().and_then(|f| f.hint.clone()).unwrap();
        assert!(hint.contains("write `schema = 2`") && hint.contains("topology` optional"), "{hint}");
        // and it is true: the same file as schema 2 parses
        assert!(parse(GOOD).is_ok());
        let e = err_of(&GOOD.replacen("schema = 2", "schema = 7", 1));
        assert!(e.contains("schema = 7 is not supported: expected schema = 2"), "{e}");
    }

    #[test]
    fn topology_is_optional_and_may_name_several_gpus() {
        let extra =
            "\n[[variant]]\nname = \"fat\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0;10.0\"\nmultinode = true\n";
        let p = parse(&format!("{GOOD}{extra}")).unwrap();
        assert!(p.variant("fat").unwrap().topology.is_none());
        let with = format!(
            "{GOOD}{extra}topology = {{ gpu = [\"h100\", \"b200\"], nodes = 2, gpus_per_node = 8, ep = 16, ranks_per_domain = 8, mnnvl = false }}\n"
        );
        let t = parse(&with).unwrap().variant("fat").unwrap().topology.clone().unwrap();
        assert_eq!(t.gpu, vec![Gpu::H100, Gpu::B200]);
        assert_eq!(t.gpu_names(" "), "h100 b200");
        // every named GPU must be built for and live on the variant's architecture
        for (gpus, list, msg) in [
            ("[\"h100\", \"b200\"]", "9.0", "b200 (sm_100, compute capability 10.0), which cuda_arch_list \"9.0\" cannot run on: add 10.0 or 10.0a"),
            ("[\"b300\"]", "10.0a", "b300 (sm_103, compute capability 10.3), which cuda_arch_list \"10.0a\" cannot run on: add 10.3 or 10.3a, or use 10.0f"),
            ("[\"b200\"]", "9.0a 10.3", "cuda_arch_list \"9.0a 10.3\" cannot run on: add 10.0 or 10.0a"),
            ("[\"gb200\"]", "10.0", "gb200 systems have aarch64 hosts"),
            ("[]", "9.0", "topology.gpu is empty"),
            ("[\"h100\", \"h100\"]", "9.0", "names h100 twice"),
            ("\"a100\"", "9.0", "unknown GPU `a100`"),
        ] {
            let t = with.replacen("[\"h100\", \"b200\"]", gpus, 1).replacen("\"9.0;10.0\"", &format!("\"{list}\""), 1);
            let e = err_of(&t);
            assert!(e.contains(msg), "{gpus} {list}: {e}");
        }
        // PTX of an older generic arch runs on newer GPUs
        assert!("9.0+PTX".parse::<ArchList>().unwrap().runs_on(Cc::new(10, 0)));
        assert!(!"9.0a+PTX".parse::<ArchList>().unwrap().runs_on(Cc::new(10, 0)));
        // CUDA's rules, not SM equality: a plain 10.0 cubin and a 10.0f one run on 10.3, 10.0a does not
        for (list, ok) in [("10.0", true), ("10.0f", true), ("10.0a", false), ("9.0 10.3", true), ("10.3a", true)] {
            assert_eq!(list.parse::<ArchList>().unwrap().runs_on(Cc::new(10, 3)), ok, "{list}");
        }
        for (gpus, list) in
            [("[\"b300\"]", "10.0f"), ("[\"h100\", \"b300\"]", "9.0 10.3"), ("[\"b200\", \"b300\"]", "10.0")]
        {
            let t = with.replacen("[\"h100\", \"b200\"]", gpus, 1).replacen("\"9.0;10.0\"", &format!("\"{list}\""), 1);
            assert!(parse(&t).is_ok(), "{gpus} {list}: {}", err_of(&t));
        }
        let (a, b): (ArchList, ArchList) = ("9.0 10.0".parse().unwrap(), "10.0;9.0".parse().unwrap());
        assert!(a.same_set(&b) && !a.same_set(&"9.0".parse().unwrap()));
    }

    const POLICY: &str = "\n[evidence]\nrequire = \"kernel\"\n\n[[evidence.rule]]\nvariants = [\"h100-multinode\"]\nkind = \"deep-ep-round-trip\"\ngpu = \"h100\"\n";

    /// The error of GOOD plus `extra`, and the 1-based line that starts with `needle` in that text.
    fn policy_err(extra: &str, needle: &str) -> (String, usize) {
        let t = format!("{GOOD}{extra}");
        let line = t.lines().position(|l| l.starts_with(needle)).expect("needle") + 1;
        (err_of(&t), line)
    }

    #[test]
    fn evidence_table_parses_and_renders() {
        let p = parse(&format!("{GOOD}{POLICY}")).unwrap();
        let e = p.evidence.as_ref().unwrap();
        assert_eq!(e.require, Kind::Kernel);
        let r = e.rule_for("h100-multinode").unwrap();
        assert_eq!(
            (r.kind, r.gpu, r.variants.as_slice()),
            (Kind::DeepEpRoundTrip, Some(Gpu::H100), &["h100-multinode".to_string()][..])
        );
        assert!(e.rule_for("h100").is_none());
        let shown = p.render_human();
        assert!(shown.contains("evidence require kernel"), "{shown}");
        assert!(shown.contains("evidence rule    deep-ep-round-trip on h100 (sm_90)  for h100-multinode"), "{shown}");
        // a rule without kind needs `require`; without the table there is no policy
        let p = parse(&format!("{GOOD}\n[evidence]\nrequire = \"static\"\n[[evidence.rule]]\nvariants = [\"b200-multinode\"]\ngpu = \"b200\"\n")).unwrap();
        assert_eq!(p.evidence.unwrap().rules[0].kind, Kind::Static);
        assert!(parse(GOOD).unwrap().evidence.is_none());
    }

    #[test]
    fn evidence_kind_must_be_on_the_ladder() {
        let (e, line) = policy_err(&POLICY.replace("\"kernel\"", "\"gpu\""), "require = \"gpu\"");
        assert!(e.contains(&format!("pins.toml:{line}:11: evidence.require `gpu` is not a kind of evidence: expected one of configuration, static, kernel, deep-ep-round-trip, deep-ep-tests, training")), "{e}");
        let (e, line) = policy_err(&POLICY.replace("deep-ep-round-trip", "deepep"), "kind = ");
        assert!(e.contains(&format!("pins.toml:{line}:8: evidence.rule.kind `deepep` is not a kind")), "{e}");
    }

    #[test]
    fn evidence_unknown_keys_are_refused() {
        let (e, line) = policy_err(&POLICY.replace("gpu = ", "gpus = "), "gpus = ");
        assert!(e.contains(&format!("pins.toml:{line}:1: unknown field `gpus`")), "{e}");
        let (e, line) = policy_err(&POLICY.replace("require = ", "requires = "), "requires = ");
        assert!(e.contains(&format!("pins.toml:{line}:1: unknown field `requires`")), "{e}");
    }

    #[test]
    fn evidence_rule_variants_are_declared_present_and_once() {
        let (e, line) = policy_err(&POLICY.replace("[\"h100-multinode\"]", "[]"), "variants = []");
        assert!(e.contains(&format!("pins.toml:{line}:12: evidence.rule.variants is empty")), "{e}");
        let (e, line) = policy_err(&POLICY.replace("\"h100-multinode\"", "\"h300\""), "variants = ");
        assert!(e.contains(&format!("pins.toml:{line}:13: evidence.rule names variant `h300`, which pins.toml does not declare (known: h100, h100-multinode")), "{e}");
        let (e, _) = policy_err(&POLICY.replace("\"h100-multinode\"", "\"h100\", \"h100\""), "variants = ");
        assert!(e.contains("names variant `h100` twice"), "{e}");
        let twice =
            format!("{POLICY}\n[[evidence.rule]]\nvariants = [\"h100\", \"h100-multinode\"]\nkind = \"training\"\n");
        let first = format!("{GOOD}{twice}").lines().position(|l| l == "[[evidence.rule]]").unwrap() + 1;
        let (e, line) = policy_err(&twice, "variants = [\"h100\", ");
        assert!(e.contains(&format!("pins.toml:{line}:21: variant `h100-multinode` is already in the [[evidence.rule]] at line {first}: one rule per variant")), "{e}");
    }

    #[test]
    fn evidence_rule_kind_only_raises_require() {
        let (e, line) = policy_err(&POLICY.replace("deep-ep-round-trip", "static"), "kind = ");
        assert!(
            e.contains(&format!(
                "pins.toml:{line}:8: evidence.rule.kind `static` is weaker than evidence.require = `kernel`"
            )),
            "{e}"
        );
    }

    #[test]
    fn evidence_rule_gpu_is_a_gpu_the_variants_build_for() {
        let (e, line) = policy_err(&POLICY.replace("gpu = \"h100\"", "gpu = \"a100\""), "gpu = \"a100\"");
        assert!(e.contains(&format!("pins.toml:{line}:7: evidence.rule.gpu: unknown GPU `a100`")), "{e}");
        let (e, line) = policy_err(&POLICY.replace("gpu = \"h100\"", "gpu = \"b200\""), "gpu = \"b200\"");
        assert!(e.contains(&format!("pins.toml:{line}:7: evidence.rule.gpu = b200 (sm_100), but variant `h100-multinode` (cuda_arch_list \"9.0\") does not build for it")), "{e}");
        // the generation is what counts: h200 is sm_90 like h100
        assert!(parse(&format!("{GOOD}{}", POLICY.replace("gpu = \"h100\"", "gpu = \"h200\""))).is_ok());
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
