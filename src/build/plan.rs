//! The build plan: everything a build needs, computed before anything
//! compiles: source (repo, rev, submodules, commit time), the exact build
//! environment (and what of the caller's environment was dropped), the
//! toolchain, the pip command, the cache key and the output paths. The cache
//! key is sha256 over the canonical JSON of everything that changes the binary.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::source::{self, Origin};
use super::toolchain::Toolchain;
use crate::pins::{Pins, Transport, Variant};
use crate::provenance::VariantInfo;

/// Version of the plan / build report JSON.
pub const SCHEMA: u32 = 1;

/// The variables the variant decides. Any of them in the caller's environment
/// that the plan does not set is removed, so a stray `HYBRID_EP_MULTINODE=1`
/// in a shell cannot change a build.
pub const VARIANT_VARS: [&str; 8] = [
    "HYBRID_EP_MULTINODE",
    "USE_NIXL",
    "TORCH_CUDA_ARCH_LIST",
    "RDMA_CORE_HOME",
    "NVSHMEM_DIR",
    "NIXL_HOME",
    "MAX_JOBS",
    "SOURCE_DATE_EPOCH",
];

/// The submodule DeepEP's DOCA multinode build compiles.
pub const NCCL_SUBMODULE: &str = "third-party/nccl";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub variant: VariantInfo,
    pub source: PlanSource,
    /// The build's environment variables, set explicitly (in addition to the caller's others).
    pub env: BTreeMap<String, String>,
    /// Caller's variables the plan removed or replaced (name -> caller's value).
    pub dropped_env: BTreeMap<String, String>,
    /// Known fixes applied (CUDA >= 13: cccl on CPATH).
    pub fixes: Vec<String>,
    pub toolchain: Toolchain,
    /// The source's setup.py imports torch (then the Python must have it).
    pub needs_torch: bool,
    pub command: Vec<String>,
    pub cache_key: String,
    pub outputs: Outputs,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanSource {
    /// What git fetches (`--source` or pins.toml's repo; a snapshot repo for a folder).
    pub repo: String,
    /// The folder a snapshot was taken of, when `--source` is a plain folder.
    pub snapshot_of: Option<PathBuf>,
    pub rev: String,
    pub branch: Option<String>,
    pub short: String,
    /// The version the wheel must have: `<base>+<short>`.
    pub version: String,
    pub source_date_epoch: i64,
    /// Path -> commit, for the submodules this variant needs.
    pub submodules: BTreeMap<String, String>,
    pub mirror: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outputs {
    pub out_dir: PathBuf,
    /// `<cache>/wheels/<key>` (None with --no-cache).
    pub cache_entry: Option<PathBuf>,
    pub log: PathBuf,
}

/// Inputs that do not come from pins.toml.
pub struct Settings<'a> {
    pub cache_dir: &'a Path,
    pub out_dir: &'a Path,
    pub no_cache: bool,
    pub jobs: usize,
    /// The caller's environment (variables the plan decides are dropped from it).
    pub caller_env: &'a BTreeMap<String, String>,
}

/// Compute the plan of one variant (fetches the pinned rev into the mirror if absent).
pub fn plan(pins: &Pins, v: &Variant, origin: &Origin, tc: &Toolchain, s: &Settings) -> Result<Plan> {
    let pin = pins.pin(v.arch)?;
    if let Some((dir, sha)) = &origin.snapshot_of {
        if *sha != pin.rev {
            return Err(crate::error::Failure::usage(format!(
                "{} pins {} to {}, but the folder {} snapshots to commit {sha}",
                pins.path.display(),
                v.arch,
                pin.rev,
                dir.display()
            ))
            .hint(format!("set rev = \"{sha}\" under [pin.{}] in {} to build these files", v.arch, pins.path.display()))
            .into());
        }
    }
    let mirror = source::mirror_path(s.cache_dir, &origin.repo);
    let needs_nccl = v.multinode && v.transport == Transport::Doca;
    let subs: Vec<&str> = if needs_nccl { vec![NCCL_SUBMODULE] } else { vec![] };
    let commit = source::ensure_rev(&mirror, &origin.repo, &pin.rev, &subs)?;

    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let flag = |b: bool| if b { "1" } else { "0" }.to_string();
    env.insert("HYBRID_EP_MULTINODE".into(), flag(v.multinode));
    env.insert("USE_NIXL".into(), flag(v.multinode && v.transport == Transport::Nixl));
    env.insert("TORCH_CUDA_ARCH_LIST".into(), v.cuda_arch_list.to_env());
    if v.multinode {
        if let Some(r) = &v.rdma_core_home {
            env.insert("RDMA_CORE_HOME".into(), r.clone());
        }
    }
    if let Some(n) = &v.nvshmem_dir {
        env.insert("NVSHMEM_DIR".into(), n.clone());
    }
    env.insert("MAX_JOBS".into(), s.jobs.to_string());
    env.insert("SOURCE_DATE_EPOCH".into(), commit.commit_time.to_string());
    env.insert("CUDA_HOME".into(), tc.cuda_home.to_string_lossy().into_owned());
    if let Some(r) = &tc.registry {
        // torch's extension builder runs `ninja` from PATH; the link finds libcuda.so (the stub) and
        // the unversioned runtime names through LIBRARY_PATH.
        let path = s.caller_env.get("PATH").filter(|p| !p.is_empty()).map(|p| format!(":{p}")).unwrap_or_default();
        env.insert("PATH".into(), format!("{}{path}", r.bin().display()));
        env.insert("LIBRARY_PATH".into(), tc.cuda_home.join("lib64").to_string_lossy().into_owned());
    }
    if let Some(x) = &tc.cross {
        env.extend(x.build_env());
    }
    let mut fixes = Vec::new();
    if tc.cuda_major() >= 13 {
        let cccl = tc.cuda_home.join("include/cccl");
        let mut cpath = cccl.to_string_lossy().into_owned();
        if let Some(c) = s.caller_env.get("CPATH").filter(|c| !c.is_empty()) {
            cpath = format!("{cpath}:{c}");
        }
        env.insert("CPATH".into(), cpath);
        fixes.push(format!(
            "CUDA {} >= 13: {} on CPATH (else `cuda/std/tuple: No such file`)",
            tc.nvcc_version,
            cccl.display()
        ));
    }
    let dropped_env = VARIANT_VARS
        .iter()
        .filter_map(|k| {
            s.caller_env.get(*k).filter(|val| env.get(*k) != Some(*val)).map(|val| (k.to_string(), val.clone()))
        })
        .collect();

    let short = pin.short().to_string();
    let key = cache_key(&KeyInput {
        tool: concat!("deepep-forge ", env!("CARGO_PKG_VERSION")),
        rev: &pin.rev,
        submodules: &commit.submodules,
        env: env
            .iter()
            .filter(|(k, _)| {
                !["MAX_JOBS", "CUDA_HOME", "CPATH", "PATH", "LIBRARY_PATH", "CC", "CXX", "LDSHARED", "PYTHONPATH"]
                    .contains(&k.as_str())
            })
            .collect(),
        python: (&tc.python_version, &tc.python_tag, &tc.platform),
        torch: (tc.torch.as_deref(), tc.torch_cuda.as_deref()),
        cuda: &tc.nvcc_version,
        compilers: tc.compilers.iter().map(|(k, c)| (k.as_str(), c.version.as_str())).collect(),
        host: std::env::consts::ARCH,
        registry: tc.registry.as_ref().map(|r| (&r.packages, r.stub_symbols)),
        cross: tc.cross.as_ref().map(|x| CrossKey {
            target: &x.target,
            triple: &x.triple,
            python_platform: &x.python_platform,
            python: &x.python_version,
            packages: &x.packages,
            debs: &x.debs,
            stub_symbols: x.stub_symbols,
        }),
    });
    let log = s.cache_dir.join("logs").join(format!("{}-{}.log", v.name, &key[..12]));
    Ok(Plan {
        variant: variant_info(v),
        source: PlanSource {
            repo: origin.repo.clone(),
            snapshot_of: origin.snapshot_of.as_ref().map(|(d, _)| d.clone()),
            rev: pin.rev.clone(),
            branch: pins.source.branch.clone(),
            version: format!("{}+{short}", pins.source.base_version),
            short,
            source_date_epoch: commit.commit_time,
            submodules: commit.submodules,
            mirror,
        },
        env,
        dropped_env,
        fixes,
        needs_torch: commit.imports_torch,
        command: pip_command(&tc.python),
        toolchain: tc.clone(),
        cache_key: key.clone(),
        outputs: Outputs {
            out_dir: s.out_dir.to_path_buf(),
            cache_entry: (!s.no_cache).then(|| crate::cache::entry_dir(s.cache_dir, &key)),
            log,
        },
    })
}

/// The build command; `<tmp>` is the build's temporary folder.
pub fn pip_command(python: &Path) -> Vec<String> {
    let mut c = vec![python.to_string_lossy().into_owned()];
    c.extend(
        [
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-build-isolation",
            "--no-deps",
            "--no-input",
            "--disable-pip-version-check",
            "-w",
            "<tmp>/dist",
            ".",
        ]
        .map(String::from),
    );
    c
}

pub fn variant_info(v: &Variant) -> VariantInfo {
    VariantInfo {
        name: v.name.clone(),
        arch: v.arch.as_str().into(),
        cuda_arch_list: v.cuda_arch_list.to_env(),
        multinode: v.multinode,
        transport: v.multinode.then(|| v.transport.as_str().to_string()),
        rdma_core_home: v.rdma_core_home.clone().filter(|_| v.multinode),
    }
}

#[derive(Serialize)]
struct KeyInput<'a> {
    tool: &'a str,
    rev: &'a str,
    submodules: &'a BTreeMap<String, String>,
    env: BTreeMap<&'a String, &'a String>,
    python: (&'a str, &'a str, &'a str),
    torch: (Option<&'a str>, Option<&'a str>),
    cuda: &'a str,
    compilers: BTreeMap<&'a str, &'a str>,
    host: &'a str,
    /// The registry toolchain's packages and stub (absent for `system`: its keys stay as they were).
    #[serde(skip_serializing_if = "Option::is_none")]
    registry: Option<(&'a BTreeMap<String, String>, usize)>,
    /// The cross build's target side (absent for native builds: their keys stay as they were).
    #[serde(skip_serializing_if = "Option::is_none")]
    cross: Option<CrossKey<'a>>,
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
    hex::encode(Sha256::digest(serde_json::to_vec(k).expect("plain data serialises")))
}
