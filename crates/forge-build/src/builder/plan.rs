//! The build plan: everything a build is, computed before anything compiles.
//! `build-wheel` executes exactly this object (argv, the whole environment,
//! the working folder); provenance and the cache key are derived from it, so
//! what `plan` prints is what runs.
//!
//! Paths: the plan holds absolute paths (what runs), and declares the roots
//! they live under ([`Roots`]: build, cache, out, toolchain, python, cuda). The
//! path-free form ([`Plan::portable`]) writes every path under a root as
//! `${root}/rest`; the cache key and the provenance carry that form, so the
//! same build in another folder keeps its key.
//! Must not run the build.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::toolchain::Toolchain;
use forge_model::interface::Interface;
use forge_wheel::provenance::{self, Patch, Provenance, VariantInfo};

/// Version of the plan / build report JSON. 2: `run` (argv, cwd, the whole
/// environment), `roots`, `portable`, `interface`, `toolchain.state`, a
/// `cache_key` that may be null (then `cache_key_unknown` says why).
pub const SCHEMA: u32 = 2;

/// A folder the plan's paths are relative to in the path-free form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Root {
    /// A local `--source` (a folder snapshot or a local repository).
    Source,
    /// The build's own folder: `src/` (the fresh checkout) and `dist/`.
    Build,
    /// `--cache-dir`: mirrors, logs, wheel entries, registry toolchains.
    Cache,
    /// `--out`.
    Out,
    /// The registry toolchain's folder (`<cache>/toolchains/<key>`).
    Toolchain,
    /// The build Python's environment (the folder above its `bin/`).
    Python,
    /// CUDA_HOME.
    Cuda,
}

impl Root {
    pub fn as_str(self) -> &'static str {
        match self {
            Root::Source => "source",
            Root::Build => "build",
            Root::Cache => "cache",
            Root::Out => "out",
            Root::Toolchain => "toolchain",
            Root::Python => "python",
            Root::Cuda => "cuda",
        }
    }
}

/// The declared roots, root -> absolute folder.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Roots(pub BTreeMap<Root, PathBuf>);

impl Roots {
    pub fn get(&self, r: Root) -> Option<&Path> {
        self.0.get(&r).map(PathBuf::as_path)
    }

    /// `text` with every root folder written as `${root}`: a root matches at
    /// the start of the text or after `:`, `=` or a space, and must be followed
    /// by `/`, `:`, a space or the end (so `/opt/x` never matches `/opt/xy`).
    /// The longest root wins (the build folder lives under the cache).
    pub fn portable(&self, text: &str) -> String {
        let mut roots: Vec<(String, Root)> = self
            .0
            .iter()
            .map(|(r, p)| (p.to_string_lossy().trim_end_matches('/').to_string(), *r))
            .filter(|(p, _)| p.len() > 1)
            .collect();
        roots.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        let bytes = text.as_bytes();
        'scan: while i < text.len() {
            let at_start = i == 0 || matches!(bytes[i - 1], b':' | b'=' | b' ');
            if at_start && bytes[i] == b'/' {
                for (p, r) in &roots {
                    if text[i..].starts_with(p.as_str()) {
                        let end = i + p.len();
                        if end == text.len() || matches!(bytes[end], b'/' | b':' | b' ') {
                            out.push_str("${");
                            out.push_str(r.as_str());
                            out.push('}');
                            i = end;
                            continue 'scan;
                        }
                    }
                }
            }
            let ch = text[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
        out
    }

    pub fn portable_path(&self, p: &Path) -> String {
        self.portable(&p.to_string_lossy())
    }
}

/// Why a variable is in the build environment, and whether it is in the cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnvOrigin {
    /// A knob of DeepEP's build interface, set from the variant (keyed).
    Knob,
    /// Where the toolchain is (CUDA_HOME, LIBRARY_PATH; keyed in path-free form).
    Toolchain,
    /// A known fix the plan applies (CPATH for CUDA >= 13; keyed).
    Fix,
    /// Fixed by the tool for every build (PIP_CONFIG_FILE; keyed).
    Tool,
    /// The pinned commit's time (keyed).
    Epoch,
    /// The caller's value of an allow-listed variable (PATH, HOME, ...; not
    /// keyed: the tools it selects are keyed by identity in `toolchain`).
    Caller,
    /// MAX_JOBS (no effect on the binary; not keyed).
    Jobs,
    /// A compiler hook (NVCC_APPEND_FLAGS, PYTORCH_NVCC) that changes the
    /// compiler's output (keyed).
    Hook,
    /// A hook that must not change the output (a compiler cache; not keyed).
    CacheHook,
    /// The build's own temp folder (TMPDIR), inside the build root and removed with
    /// it, so that what the compilers leave there (nvcc's `tmpxft_*` files when a build
    /// is interrupted) goes too (not keyed).
    Scratch,
}

impl EnvOrigin {
    pub fn keyed(self) -> bool {
        !matches!(self, EnvOrigin::Caller | EnvOrigin::Jobs | EnvOrigin::CacheHook | EnvOrigin::Scratch)
    }
}

/// The caller's variables a build keeps (everything else is not inherited).
pub const PASSTHROUGH: [&str; 8] = ["PATH", "HOME", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CC", "CXX", "CUDAHOSTCXX"];

/// The build's temp folder in the build root (TMPDIR; [`EnvOrigin::Scratch`]).
pub const SCRATCH: &str = "tmp";

/// The one command a build runs: argv in `cwd` with exactly `env`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// The whole environment of the build process: nothing else is inherited.
    pub env: BTreeMap<String, String>,
    /// Why each variable is there (and so whether it is keyed).
    pub env_origin: BTreeMap<String, EnvOrigin>,
}

impl Run {
    pub fn set(&mut self, name: &str, value: impl Into<String>, origin: EnvOrigin) {
        self.env.insert(name.to_string(), value.into());
        self.env_origin.insert(name.to_string(), origin);
    }
    pub fn remove(&mut self, name: &str) {
        self.env.remove(name);
        self.env_origin.remove(name);
    }
}

/// The build interpreter in the path-free form of the command: one name however
/// `--python` spelled it (the toolchain holds its identity).
pub const INTERPRETER: &str = "${python}/bin/python";

/// The path-free form of the run: what the cache key and provenance carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Portable {
    pub argv: Vec<String>,
    pub cwd: String,
    /// The keyed variables only.
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub schema: u32,
    pub variant: VariantInfo,
    pub source: PlanSource,
    /// DeepEP's build interface at the pinned revision (branch, version scheme, knobs).
    pub interface: Interface,
    pub roots: Roots,
    pub run: Run,
    /// Caller's variables the plan removed or replaced (name -> caller's value,
    /// or `(not shown)` for names that may carry credentials).
    pub dropped_env: BTreeMap<String, String>,
    /// Known fixes applied (CUDA >= 13: cccl on CPATH).
    pub fixes: Vec<String>,
    /// Things the plan noticed and could not settle (unknown env reads in the source, ...).
    pub warnings: Vec<String>,
    pub toolchain: ToolchainPart,
    /// What the build compiles against (torch + ABI, CUDA, NVSHMEM, NCCL) and
    /// what the revision needs of it; None while the toolchain is not known.
    /// Part of the cache key; copied into the provenance.
    #[serde(default)]
    pub environment: Option<forge_wheel::provenance::BuildEnvironment>,
    /// Where each of `environment`'s values was read (library -> file).
    #[serde(default)]
    pub environment_from: BTreeMap<String, String>,
    /// The wheel's `Requires-Dist` as known when planning (see [`RequiresDist`]);
    /// None when neither the toolchain nor what it would provision is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_dist: Option<RequiresDist>,
    /// The source's setup.py imports torch (then the Python must have it).
    pub needs_torch: bool,
    pub portable: Portable,
    /// The build root's links and compiler wrappers (`canon`), installed by the build.
    #[serde(default)]
    pub hooks: Option<Hooks>,
    /// The NCCL build output reused across builds (`nccl_reuse`): restored before the
    /// command when stored, stored after a fresh one. Not in the cache key: it changes no byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_reuse: Option<NcclReuse>,
    /// The extensions built at once (`side_by_side`): the command run instead of
    /// `run.argv`, with the same commands and bytes. Not in the cache key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side_by_side: Option<SideBySide>,
    /// The platform tag's rules (`retag`): pins.toml's manylinux floor and the
    /// libraries taken from the environment. Not in the cache key: it changes no
    /// byte the build compiles (the tag follows from the bytes).
    #[serde(default)]
    pub platform: PlanPlatform,
    /// sha256 of the canonical path-free plan; None when it depends on what is not known yet.
    pub cache_key: Option<String>,
    /// Why `cache_key` is None.
    pub cache_key_unknown: Option<String>,
    pub outputs: Outputs,
}

/// What the wheel's platform tag must respect (docs/platform-tags.md).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PlanPlatform {
    /// pins.toml `[toolchain] manylinux`: the newest policy the wheel may need (`2_28`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<String>,
    /// The libraries taken from the environment: soname prefix -> what provides it.
    #[serde(default)]
    pub externals: BTreeMap<String, String>,
}

impl PlanPlatform {
    /// The plan's platform rules: the floor given, the tool's externals.
    pub fn new(floor: Option<String>) -> PlanPlatform {
        let externals =
            forge_wheel::manylinux::EXTERNALS.iter().map(|e| (e.prefix.to_string(), e.from.to_string())).collect();
        PlanPlatform { floor, externals }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanSource {
    /// What git fetches (`--source` or pins.toml's repo; a snapshot repo for a folder).
    pub repo: String,
    /// pins.toml's repository: what the provenance names (a commit sha names
    /// its content, wherever the bytes were read from).
    #[serde(default)]
    pub pinned_repo: String,
    /// The folder a snapshot was taken of, when `--source` is a plain folder.
    pub snapshot_of: Option<PathBuf>,
    pub rev: String,
    pub branch: Option<String>,
    pub short: String,
    /// The version the wheel must have: `<base>+<short>`.
    pub version: String,
    pub source_date_epoch: i64,
    /// Path -> commit, for the submodules this variant's build needs.
    pub submodules: BTreeMap<String, String>,
    pub mirror: PathBuf,
    /// Source patches applied after checkout and submodules, in order (empty: exact, unpatched).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<forge_wheel::provenance::SourcePatch>,
    /// pins.toml's repo is a fork: its merge base with upstream (`[source] upstream`); None: not a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<forge_wheel::provenance::Fork>,
}

/// The toolchain, identified, or what is missing and what `build-wheel` will need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum ToolchainPart {
    Known(Box<Toolchain>),
    Missing(Box<MissingToolchain>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MissingToolchain {
    /// `system` or `registry`.
    pub kind: String,
    /// What was not found (the error `build-wheel` exits 3 with).
    pub missing: String,
    /// What to do about it.
    pub hint: Option<String>,
    /// What `build-wheel` will need.
    pub needs: Vec<String>,
    /// With `--toolchain registry`: what `build-wheel` would provision.
    pub would_provision: Option<WouldProvision>,
    /// A cross plan (aarch64 on x86_64): the target side `build-wheel` would provision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross: Option<Box<CrossPreview>>,
    /// What the plan warns about the toolchain it would make (a consumer's locked torch
    /// of a CUDA the registry's torch may not carry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The target side of a cross plan before it is provisioned (`plan` never
/// downloads): what `build-wheel` would make and what will stop it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrossPreview {
    pub host: String,
    pub target: String,
    pub triple: String,
    /// The wheel platform the target's packages would be resolved for.
    pub python_platform: String,
    /// The target Python's minor (the host Python's: the extensions are built for it), when known.
    pub target_python: Option<String>,
    /// The cross compilers (`gcc`, `g++`): where found, with their version line, or None when missing.
    pub compilers: BTreeMap<String, Option<super::toolchain::Compiler>>,
    /// `qemu-aarch64` for the import check after the build, when found.
    pub qemu: Option<PathBuf>,
    /// Where the sysroot would be made (None until the host toolchain is known: its key is part of the sysroot's).
    pub sysroot: Option<PathBuf>,
    /// What the sysroot would hold, one line a part.
    pub sysroot_holds: Vec<String>,
    /// What will stop `build-wheel` (exit 3) as this host stands.
    pub stops: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WouldProvision {
    /// `<cache>/toolchains/<key>`.
    pub root: PathBuf,
    pub python: String,
    pub torch: String,
    /// The CUDA packages, pinned to the CUDA minor of the installed torch.
    pub packages: Vec<String>,
    /// The packages it would install over torch's pins (pins.toml's `[toolchain]`
    /// nccl/nvshmem, the consumer's lock, the revision's need), as requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<forge_wheel::provenance::Requirement>,
}

/// The wheel's run-time requirements (`Requires-Dist`) as the plan states
/// them: read from the installed toolchain's environment (`installed`, the
/// same as `environment.requires`), or, before the registry toolchain is
/// provisioned, from what it would provision (`would_provision`: checked
/// again once installed, and what the wheel carries is the installed one's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequiresDist {
    /// `installed` or `would_provision`.
    pub source: String,
    #[serde(flatten)]
    pub requires: forge_wheel::provenance::RuntimeRequires,
}

impl ToolchainPart {
    pub fn known(&self) -> Option<&Toolchain> {
        match self {
            ToolchainPart::Known(t) => Some(t),
            ToolchainPart::Missing(_) => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outputs {
    pub out_dir: PathBuf,
    /// `<cache>/wheels/<key>` (None with --no-cache or without a key).
    pub cache_entry: Option<PathBuf>,
    pub log: PathBuf,
}

impl Plan {
    /// The fresh checkout the build runs in.
    pub fn tree(&self) -> &Path {
        &self.run.cwd
    }

    /// The build folder (its `src/` and `dist/`).
    pub fn build_dir(&self) -> &Path {
        self.roots.get(Root::Build).expect("every plan declares its build folder")
    }

    /// Where pip writes the wheel (`-w`).
    pub fn dist(&self) -> PathBuf {
        self.build_dir().join("dist")
    }

    pub fn toolchain(&self) -> Option<&Toolchain> {
        self.toolchain.known()
    }

    /// Add a compiler hook to the build's environment (NVCC_APPEND_FLAGS,
    /// PYTORCH_NVCC, a CXX wrapper): `keyed` when it changes the compiler's
    /// output (a `--frandom-seed`), not when it must not (a compiler cache).
    /// Re-seals the plan. This is the one place extra build environment goes.
    pub fn add_hook(&mut self, name: &str, value: impl Into<String>, keyed: bool) {
        let origin = if keyed { EnvOrigin::Hook } else { EnvOrigin::CacheHook };
        self.run.set(name, value, origin);
        self.seal();
    }

    /// Move the build to another folder (e.g. this user's build root, which
    /// the wheel records as the canonical one): argv's `-w`, the working folder and
    /// every variable that names a path in the old folder (TMPDIR).
    /// Re-seals the plan.
    pub fn set_build_dir(&mut self, dir: &Path) {
        let old = self.build_dir().to_path_buf();
        let swap = |s: &str| match Path::new(s).strip_prefix(&old) {
            Ok(rest) => dir.join(rest).to_string_lossy().into_owned(),
            Err(_) => s.to_string(),
        };
        self.run.argv = self.run.argv.iter().map(|a| swap(a)).collect();
        self.run.cwd = PathBuf::from(swap(&self.run.cwd.to_string_lossy()));
        for v in self.run.env.values_mut() {
            *v = swap(v);
        }
        self.roots.0.insert(Root::Build, dir.to_path_buf());
        self.seal();
    }

    /// Compute the path-free form and the cache key from the rest of the
    /// plan; call after every change to `run`, `roots` or `toolchain`.
    pub fn seal(&mut self) {
        let r = &self.roots;
        let pip = self.run.argv.get(1..4).is_some_and(|a| a == ["-m", "pip", "wheel"]);
        self.portable = Portable {
            // The interpreter by a fixed name: its identity (version, tag, ABI, platform) is the
            // toolchain's; how the caller spelled it (`python3`, `<venv>/bin/python`) changes no byte.
            argv: self
                .run
                .argv
                .iter()
                .enumerate()
                .map(|(i, a)| if i == 0 && pip { INTERPRETER.to_string() } else { r.portable(a) })
                .collect(),
            cwd: r.portable_path(&self.run.cwd),
            env: self
                .run
                .env
                .iter()
                .filter(|(k, _)| self.run.env_origin.get(*k).is_some_and(|o| o.keyed()))
                .map(|(k, v)| (k.clone(), r.portable(v)))
                .collect(),
        };
        let Some(tc) = self.toolchain.known() else {
            self.cache_key = None;
            self.cache_key_unknown =
                Some("the toolchain is not known yet (its identity is part of the key); see `toolchain`".into());
            return;
        };
        let key = cache_key(&KeyInput {
            tool: concat!("deepep-forge ", env!("CARGO_PKG_VERSION")),
            schema: SCHEMA,
            rev: &self.source.rev,
            submodules: &self.source.submodules,
            patches: self.source.patches.iter().map(|p| p.sha256.as_str()).collect(),
            fork: self.source.fork.as_ref(),
            interface: self.interface.branch.as_str(),
            variant: (&self.variant.cuda_arch_list, self.variant.multinode, self.variant.transport.as_deref()),
            run: &self.portable,
            python: (&tc.python_version, &tc.python_tag, &tc.platform, &tc.abi),
            torch: (tc.torch.as_deref(), tc.torch_cuda.as_deref()),
            cuda: &tc.nvcc_version,
            compilers: tc.compilers.iter().map(|(k, c)| (k.as_str(), c.version.as_str())).collect(),
            host: std::env::consts::ARCH,
            registry: tc.registry.as_ref().map(|r| (&r.packages, r.stub_symbols)),
            environment: self.environment.as_ref(),
            cross: tc.cross.as_ref().map(|x| CrossKey {
                target: &x.target,
                triple: &x.triple,
                python_platform: &x.python_platform,
                python: &x.python_version,
                packages: &x.packages,
                debs: &x.debs,
                stub_symbols: x.stub_symbols,
            }),
            recorded: &self.provenance("", &self.source.short, &[]),
        });
        self.cache_key = Some(key);
        self.cache_key_unknown = None;
    }
}

impl Plan {
    /// The provenance document of a build of this plan: every value from the plan
    /// (its path-free form), plus what only the build knows (the tree's short
    /// sha, the patches). No wall-clock time and no machine path: a rebuild gives
    /// the same document (the build report keeps the times).
    pub fn provenance(&self, key: &str, short: &str, patches: &[Patch]) -> Provenance {
        let pl = self;
        let tc = pl.toolchain();
        Provenance {
            schema: provenance::SCHEMA,
            tool: concat!("deepep-forge ", env!("CARGO_PKG_VERSION")).into(),
            source: provenance::SourceInfo {
                repo: provenance_repo(pl),
                rev: pl.source.rev.clone(),
                branch: pl.source.branch.clone(),
                short: short.to_string(),
                submodules: pl.source.submodules.clone(),
                patches: pl.source.patches.clone(),
                fork: pl.source.fork.clone(),
            },
            variant: pl.variant.clone(),
            env: pl.portable.env.clone(),
            toolchain: match tc {
                Some(t) => provenance::ToolchainInfo {
                    kind: t.kind.as_str().into(),
                    python: Some(t.python_version.clone()),
                    python_tag: Some(t.python_tag.clone()),
                    torch: t.torch.clone(),
                    cuda: Some(t.torch_cuda.clone().unwrap_or_else(|| t.cuda_major_minor())),
                    nvcc: Some(t.nvcc_version.clone()),
                    cxx: None,
                    cxx_version: t.compilers.get("CXX").map(|c| c.version.clone()),
                    sccache: pl.hooks.as_ref().map(|h| h.sccache_version.clone()),
                    packages: t.registry.as_ref().map(|r| r.packages.clone()).unwrap_or_default(),
                    cross: t.cross.as_ref().map(|x| x.provenance()),
                    overrides: t.registry.as_ref().map(|r| r.overrides.clone()).unwrap_or_default(),
                    environment: pl.environment.clone(),
                },
                None => provenance::ToolchainInfo::default(),
            },
            host: provenance::HostInfo { arch: std::env::consts::ARCH.into(), os: std::env::consts::OS.into() },
            times: provenance::Times { started: None, finished: None, source_date_epoch: pl.source.source_date_epoch },
            cache_key: key.to_string(),
            build: Some(provenance::BuildInfo {
                interface: pl.interface.branch.as_str().into(),
                argv: pl.portable.argv.clone(),
                cwd: pl.portable.cwd.clone(),
            }),
            patches: patches.to_vec(),
            platform: None,
        }
    }
}

/// The repository the provenance names: pins.toml's (a commit sha names its
/// content, so where the bytes were read from does not enter the wheel); for a
/// plan without it (older plan documents), the source without machine paths.
fn provenance_repo(pl: &Plan) -> String {
    match pl.source.pinned_repo.as_str() {
        "" => path_free_repo(&pl.source.repo, pl.source.snapshot_of.as_deref()),
        r => r.to_string(),
    }
}

/// The source without machine paths: a URL as it is, a local repository or
/// snapshotted folder by its folder name (`local:<name>`).
fn path_free_repo(repo: &str, snapshot_of: Option<&Path>) -> String {
    let url_like = repo.contains("://") || repo.starts_with("git@");
    if url_like && snapshot_of.is_none() {
        return repo.to_string();
    }
    let local = snapshot_of.unwrap_or(Path::new(repo));
    let name = local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "source".into());
    format!("local:{name}")
}

#[derive(Serialize)]
struct KeyInput<'a> {
    tool: &'a str,
    schema: u32,
    rev: &'a str,
    submodules: &'a BTreeMap<String, String>,
    /// The source patches' sha256s in order; absent for an exact build (its key as before).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    patches: Vec<&'a str>,
    /// A fork's record (the provenance holds it, so the wheel's bytes depend on
    /// it); absent for a repository that is not a fork (its key as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    fork: Option<&'a forge_wheel::provenance::Fork>,
    interface: &'a str,
    variant: (&'a str, bool, Option<&'a str>),
    /// argv, cwd and the keyed environment, path-free.
    run: &'a Portable,
    python: (&'a str, &'a str, &'a str, &'a str),
    torch: (Option<&'a str>, Option<&'a str>),
    cuda: &'a str,
    compilers: BTreeMap<&'a str, &'a str>,
    host: &'a str,
    /// The registry toolchain's packages and stub (absent for `system`).
    #[serde(skip_serializing_if = "Option::is_none")]
    registry: Option<(&'a BTreeMap<String, String>, usize)>,
    /// The libraries compiled against (a different NCCL or NVSHMEM is another build).
    #[serde(skip_serializing_if = "Option::is_none")]
    environment: Option<&'a forge_wheel::provenance::BuildEnvironment>,
    /// A cross build's target side (absent for native builds: their keys stay as they were).
    #[serde(skip_serializing_if = "Option::is_none")]
    cross: Option<CrossKey<'a>>,
    /// Everything the wheel records of the plan (its provenance but the key itself and
    /// what only the build knows): what the bytes record is keyed (variant name, repository,
    /// branch, knobs, toolchain), so a hit never names another variant or repository.
    recorded: &'a Provenance,
}

#[derive(Serialize)]
struct CrossKey<'a> {
    target: &'a str,
    triple: &'a str,
    python_platform: &'a str,
    python: &'a str,
    packages: &'a BTreeMap<String, String>,
    debs: &'a BTreeMap<String, String>,
    stub_symbols: usize,
}

fn cache_key(k: &KeyInput) -> String {
    forge_os::input::sha256_hex(&serde_json::to_vec(k).expect("plain data serialises"))
}

/// The build command: pip builds the checkout in `cwd` into `dist`.
pub fn pip_argv(python: &str, dist: &Path) -> Vec<String> {
    let mut c = vec![python.to_string()];
    c.extend(
        ["-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-input", "--disable-pip-version-check"]
            .map(String::from),
    );
    c.push("-w".into());
    c.push(dist.to_string_lossy().into_owned());
    c.push(".".into());
    c
}

/// Where the compiler cache lives (behaviour: `compiler_cache`): a folder, or a
/// remote storage of sccache's shared by many machines. Never holds credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CompilerCache {
    Dir { path: PathBuf },
    Remote { url: String, backend: Backend },
}

/// sccache's remote storages that `--compiler-cache` names by URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Redis,
    Memcached,
    S3,
    Webdav,
    Gha,
}

/// The side-by-side step of a plan (behaviour: `side_by_side`): DeepEP's extensions
/// built at once by a driver calling the same setuptools hooks and compile commands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideBySide {
    /// The extensions built at once (DeepEP's interface at the pin).
    pub extensions: Vec<String>,
    /// The plan's MAX_JOBS, shared between the extensions: through a jobserver the
    /// driver serves when the build's ninja is 1.13 or newer, else split evenly.
    pub jobs: usize,
    /// The command run instead of the plan's `pip wheel` (same interpreter, folder, environment).
    pub argv: Vec<String>,
    /// Units (their outputs under the build root) whose compiles get the cores first
    /// (behaviour: `unit_order`); empty: every unit alike.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_units: Vec<String>,
    /// Where the order comes from (`unit_order`); None: no order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Order>,
}

/// Where a plan's unit order comes from (behaviour: `unit_order`). Not keyed, not in
/// the provenance: the order changes no byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Order {
    /// A build of this revision measured it (`from`: this machine, the shared compiler cache, the team's cache).
    Measured { from: String },
    /// No history of the revision: `from` another revision's, or `source`.
    Predicted { from: String },
    /// Settled when the variant builds, from what an earlier variant of the run measured.
    AtBuild,
}

/// The plan's NCCL step (behaviour: `nccl_reuse`): before the command, the stored build
/// folder of this key is put in place in the fresh checkout (so the build's own
/// `make src.build` finds it up to date); after a fresh build, the folder is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclReuse {
    /// The submodule (`third-party/nccl`) and the folder its make writes (`build`).
    pub submodule: String,
    pub build_dir: String,
    pub commit: String,
    /// NVCC_GENCODE as setup.py derives it from TORCH_CUDA_ARCH_LIST.
    pub nvcc_gencode: String,
    /// sha256 of `inputs`.
    pub key: String,
    pub inputs: NcclKeyInputs,
    /// `<cache>/trees/entries/<key>.json`.
    pub entry: PathBuf,
}

/// What NCCL's build output depends on (path-free but for the root): the key of [`NcclReuse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclKeyInputs {
    pub tool: String,
    /// The build root: make's dependency files record its absolute paths, so a
    /// folder built under one user's root is reused only under that root.
    #[serde(default)]
    pub root: String,
    pub commit: String,
    pub nvcc_gencode: String,
    /// sha256 of setup.py's lines that derive NVCC_GENCODE and run `make src.build`.
    pub recipe: String,
    pub nvcc: String,
    pub compilers: BTreeMap<String, String>,
    pub host: String,
    /// The variables that reach NCCL's make (path-free): the plan's keyed ones but
    /// DeepEP's own knobs (unless NCCL's makefiles read the name) and SOURCE_DATE_EPOCH,
    /// PIP_CONFIG_FILE, PYTORCH_NVCC; plus MAKEFLAGS.
    pub env: BTreeMap<String, String>,
}

/// The compiler hooks of a plan (their behaviour: `canon`): wrapper scripts (content decided here) and
/// the environment that points the build at them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hooks {
    /// sccache (the nvcc driver) and its version.
    pub sccache: PathBuf,
    pub sccache_version: String,
    /// Where sccache stores compiles; None: it stores nothing.
    pub compiler_cache: Option<CompilerCache>,
    /// Wrapper file name in `<root>/bin` -> script.
    pub scripts: BTreeMap<String, String>,
    /// Links in the root -> the real toolchain folders ([`links`]).
    pub links: BTreeMap<String, PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> Roots {
        Roots(BTreeMap::from([
            (Root::Cache, PathBuf::from("/c/cache")),
            (Root::Build, PathBuf::from("/c/cache/tmp/build-1-sn")),
            (Root::Cuda, PathBuf::from("/opt/cuda")),
        ]))
    }

    #[test]
    fn portable_form_replaces_roots_on_path_boundaries_longest_first() {
        let r = roots();
        assert_eq!(r.portable("/c/cache/tmp/build-1-sn/src"), "${build}/src");
        assert_eq!(r.portable("/c/cache/logs/x.log"), "${cache}/logs/x.log");
        assert_eq!(r.portable("/opt/cuda/include/cccl:/opt/cuda2/include"), "${cuda}/include/cccl:/opt/cuda2/include");
        assert_eq!(r.portable("/opt/cuda"), "${cuda}");
        assert_eq!(r.portable("x/opt/cuda"), "x/opt/cuda", "not at a boundary");
        assert_eq!(r.portable("-w /opt/cuda/bin"), "-w ${cuda}/bin");
        assert_eq!(r.portable("NAME=/opt/cuda/lib64"), "NAME=${cuda}/lib64");
    }

    fn sample_plan(build: &Path) -> Plan {
        let mut roots = roots();
        roots.0.insert(Root::Build, build.to_path_buf());
        let mut run = Run {
            argv: pip_argv("/usr/bin/python3", &build.join("dist")),
            cwd: build.join("src"),
            env: BTreeMap::new(),
            env_origin: BTreeMap::new(),
        };
        run.set("TORCH_CUDA_ARCH_LIST", "9.0", EnvOrigin::Knob);
        run.set("CPATH", "/opt/cuda/include/cccl", EnvOrigin::Fix);
        run.set("PATH", "/usr/bin", EnvOrigin::Caller);
        let mut p = Plan {
            schema: SCHEMA,
            variant: VariantInfo {
                name: "sn".into(),
                arch: "x86_64".into(),
                cuda_arch_list: "9.0".into(),
                multinode: false,
                transport: None,
                rdma_core_home: None,
                env: BTreeMap::new(),
            },
            source: PlanSource {
                repo: "r".into(),
                pinned_repo: "https://example.invalid/r.git".into(),
                snapshot_of: None,
                rev: "a".repeat(40),
                branch: None,
                short: "aaaaaaa".into(),
                version: "1.2.1+aaaaaaa".into(),
                source_date_epoch: 0,
                submodules: BTreeMap::new(),
                mirror: PathBuf::from("/c/cache/git/m"),
                patches: Vec::new(),
                fork: None,
            },
            interface: Interface {
                branch: forge_model::interface::Branch::HybridEp,
                base_version: "1.2.1".into(),
                version_from: "setup.py:1".into(),
                extensions: vec![],
                submodules: vec![],
                needs: vec![],
                knobs: vec![],
                scanned: vec![],
                warnings: vec![],
                unread: vec![],
                missing_submodules: vec![],
                assigns: vec![],
                requires: vec![],
                switches: vec![],
                none_uses: vec![],
                runtime: Default::default(),
            },
            roots,
            run,
            dropped_env: BTreeMap::new(),
            fixes: vec![],
            warnings: vec![],
            toolchain: ToolchainPart::Missing(Box::new(MissingToolchain {
                kind: "system".into(),
                missing: "nvcc not found".into(),
                hint: None,
                needs: vec![],
                would_provision: None,
                cross: None,
                warnings: vec![],
            })),
            environment: None,
            environment_from: BTreeMap::new(),
            requires_dist: None,
            needs_torch: false,
            portable: Portable { argv: vec![], cwd: String::new(), env: BTreeMap::new() },
            hooks: None,
            nccl_reuse: None,
            side_by_side: None,
            platform: PlanPlatform::default(),
            cache_key: None,
            cache_key_unknown: None,
            outputs: Outputs { out_dir: PathBuf::from("/o"), cache_entry: None, log: PathBuf::from("/c/cache/logs/x") },
        };
        p.seal();
        p
    }

    #[test]
    fn the_portable_form_is_the_same_from_another_build_folder_and_only_keyed_vars_are_in_it() {
        let a = sample_plan(Path::new("/c/cache/tmp/build-1-sn"));
        assert_eq!(a.portable.cwd, "${build}/src");
        assert!(a.portable.argv.contains(&"${build}/dist".to_string()), "{:?}", a.portable.argv);
        assert_eq!(a.portable.env.get("CPATH").map(String::as_str), Some("${cuda}/include/cccl"));
        assert!(!a.portable.env.contains_key("PATH"), "caller variables are not keyed");
        assert!(a.cache_key.is_none() && a.cache_key_unknown.is_some(), "no toolchain, no key");
        let mut b = a.clone();
        b.set_build_dir(Path::new("/canonical/deepep-forge/build"));
        assert_eq!(b.run.cwd, Path::new("/canonical/deepep-forge/build/src"));
        assert!(b.run.argv.contains(&"/canonical/deepep-forge/build/dist".to_string()), "{:?}", b.run.argv);
        assert_eq!(a.portable, b.portable);
        b.add_hook("NVCC_APPEND_FLAGS", "--frandom-seed=x", true);
        assert_eq!(b.portable.env.get("NVCC_APPEND_FLAGS").map(String::as_str), Some("--frandom-seed=x"));
        let mut c = a.clone();
        c.add_hook("PYTORCH_NVCC", "sccache /opt/cuda/bin/nvcc", false);
        assert_eq!(c.portable, a.portable, "a cache hook is not in the path-free form");
        assert_eq!(c.run.env["PYTORCH_NVCC"], "sccache /opt/cuda/bin/nvcc");
    }

    #[test]
    fn a_fork_record_is_keyed_and_without_one_no_fork_is_hashed() {
        let subs = BTreeMap::new();
        let run = Portable { argv: vec!["py".into()], cwd: "${build}/src".into(), env: BTreeMap::new() };
        let fork = forge_wheel::provenance::Fork {
            upstream: "https://github.com/deepseek-ai/DeepEP".into(),
            upstream_branch: "main".into(),
            merge_base: Some("b".repeat(40)),
            ahead: Some(3),
        };
        let recorded = sample_plan(Path::new("/c/cache/tmp/build-1-sn")).provenance("", "s", &[]);
        let input = |fork| KeyInput {
            tool: "deepep-forge 0",
            schema: 1,
            rev: "r",
            submodules: &subs,
            patches: vec![],
            fork,
            interface: "hybrid-ep",
            variant: ("9.0", false, None),
            run: &run,
            python: ("3.12.3", "cp312", "linux_x86_64", "cpython cpython-312-x86_64-linux-gnu"),
            torch: (None, None),
            cuda: "13.0",
            compilers: BTreeMap::new(),
            host: "x86_64",
            registry: None,
            environment: None,
            cross: None,
            recorded: &recorded,
        };
        // A repository that is not a fork hashes no `fork` member.
        let plain = serde_json::to_string(&input(None)).unwrap();
        assert!(!plain.contains(r#""fork""#), "{plain}");
        let other = forge_wheel::provenance::Fork { ahead: Some(4), ..fork.clone() };
        let keys = [cache_key(&input(None)), cache_key(&input(Some(&fork))), cache_key(&input(Some(&other)))];
        assert!(keys[0] != keys[1] && keys[1] != keys[2], "the fork record is keyed: {keys:?}");
    }

    #[test]
    fn the_interpreter_is_one_name_however_it_was_spelled() {
        let a = sample_plan(Path::new("/c/cache/tmp/build-1-sn"));
        let mut b = a.clone();
        b.run.argv[0] = "/usr/bin/python3.12".into();
        b.seal();
        assert_eq!(a.portable.argv[0], INTERPRETER);
        assert_eq!(a.portable, b.portable);
    }

    #[test]
    fn only_keyed_origins_reach_the_key() {
        assert!(EnvOrigin::Knob.keyed() && EnvOrigin::Fix.keyed() && EnvOrigin::Hook.keyed());
        assert!(!EnvOrigin::Caller.keyed() && !EnvOrigin::Jobs.keyed() && !EnvOrigin::CacheHook.keyed());
        assert!(!EnvOrigin::Scratch.keyed());
    }
}
