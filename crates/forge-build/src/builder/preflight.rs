//! Preflight: everything a plan's build will need, checked before anything
//! compiles (exit 3 with what is missing and how to get it): the toolchain's
//! imports and compilers, NVSHMEM as DeepEP links it, NCCL and NVSHMEM for
//! EPv2 (`main`), rdma-core for the DOCA multinode path. Must not build.
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::plan::Plan;
use super::relocate;
use super::toolchain::{self, Toolchain};
use forge_model::interface::Branch;
use forge_model::pins::Transport;
use forge_os::error::Failure;
use forge_os::fs::machine;

/// Preflight checks that need more than the toolchain: build imports,
/// compilers, NVSHMEM (and NCCL for EPv2), rdma-core for DOCA.
pub fn check(pl: &Plan, tc: &Toolchain, cache_dir: &Path) -> Result<()> {
    toolchain::preflight(tc, pl.needs_torch, &cache_dir.join("toolchain"))?;
    epv2_libraries(pl, tc)?;
    // With NVSHMEM_DIR set DeepEP's setup.py links `-l:libnvshmem_host.so`, the
    // unversioned name, which the pip package (nvidia-nvshmem-cu13) does not
    // ship; without it setup.py finds the pip package and links its soname file.
    if let Some(n) = pl.run.env.get("NVSHMEM_DIR") {
        let lib = Path::new(n).join("lib");
        if !machine::exists(&lib.join("libnvshmem_host.so")) {
            let versioned: Vec<String> =
                machine::names(&lib).into_iter().filter(|f| f.starts_with("libnvshmem_host.so.")).collect();
            let what = if !machine::is_dir(&lib) {
                format!("{} does not exist", lib.display())
            } else if versioned.is_empty() {
                format!("{} has no libnvshmem_host.so", lib.display())
            } else {
                format!(
                    "{} has {} but not the unversioned libnvshmem_host.so that DeepEP links (`-l:libnvshmem_host.so`) when NVSHMEM_DIR is set",
                    lib.display(),
                    versioned.join(", ")
                )
            };
            let hint = if versioned.is_empty() {
                "install nvidia-nvshmem-cu13 into the build Python and drop nvshmem_dir from the variant (DeepEP then finds the package itself), or point nvshmem_dir at an NVSHMEM install".to_string()
            } else {
                format!(
                    "drop nvshmem_dir from the variant when it is the pip package (DeepEP then finds it and links {}), or add the link: ln -s {} {}/libnvshmem_host.so",
                    versioned[0],
                    versioned[0],
                    lib.display()
                )
            };
            return Err(Failure::env(format!("NVSHMEM_DIR={n}: {what}")).hint(hint).into());
        }
    }
    // DeepEP links NVSHMEM from NVSHMEM_DIR, else from the build Python's
    // `nvidia/nvshmem` package, with an absolute RUNPATH into site-packages that
    // must be rewritten after the build: find patchelf now, not after compiling.
    let nvshmem_in_site = match pl.run.env.get("NVSHMEM_DIR") {
        Some(n) => tc.site_packages.iter().any(|sp| Path::new(n).starts_with(sp)),
        None => tc.site_packages.iter().any(|sp| machine::is_dir(&sp.join("nvidia/nvshmem/lib"))),
    };
    if nvshmem_in_site {
        relocate::require_patchelf(&tc.python, "deep_ep_cpp (links NVSHMEM from the build Python's site-packages)")?;
    }
    let v = &pl.variant;
    if v.multinode && v.transport.as_deref() == Some(Transport::Doca.as_str()) {
        let home = pl.run.env.get("RDMA_CORE_HOME").map(PathBuf::from);
        let mut inc = vec![PathBuf::from("/usr/include")];
        let mut libs: Vec<PathBuf> =
            ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"]
                .map(PathBuf::from)
                .to_vec();
        if let Some(h) = &home {
            inc.insert(0, h.join("include"));
            libs.insert(0, h.join("lib"));
        }
        let header = inc
            .iter()
            .any(|d| machine::exists(&d.join("infiniband/verbs.h")) && machine::exists(&d.join("infiniband/mlx5dv.h")));
        let lib = |n: &str| libs.iter().any(|d| machine::exists(&d.join(format!("lib{n}.so"))));
        if !header || !lib("ibverbs") || !lib("mlx5") {
            return Err(Failure::env(format!(
                "the DOCA multinode build needs rdma-core (infiniband/verbs.h, infiniband/mlx5dv.h, libibverbs.so, libmlx5.so) under {} or the system dirs",
                home.as_deref().map(|h| h.display().to_string()).unwrap_or_else(|| "RDMA_CORE_HOME".into())
            ))
            .hint("install libibverbs-dev (Debian/Ubuntu) or build rdma-core and set rdma_core_home in the variant")
            .into());
        }
    }
    Ok(())
}

/// EPv2's setup.py finds NCCL and NVSHMEM (`EP_{NAME}_ROOT_DIR`, `{NAME}_DIR`,
/// else the `nvidia-{name}` pip package) and fails without either.
fn epv2_libraries(pl: &Plan, tc: &Toolchain) -> Result<()> {
    if pl.interface.branch != Branch::Main {
        return Ok(());
    }
    for (name, lib, pkg) in
        [("NCCL", "libnccl.so", "nvidia-nccl-cu13"), ("NVSHMEM", "libnvshmem_host.so", "nvidia-nvshmem-cu13")]
    {
        let from_env = [format!("EP_{name}_ROOT_DIR"), format!("{name}_DIR")]
            .into_iter()
            .find_map(|k| pl.run.env.get(&k).map(|v| (k, v.clone())));
        let has_lib = |dir: &Path| machine::names(&dir.join("lib")).iter().any(|n| n.starts_with(lib));
        let ok = match &from_env {
            Some((_, v)) => has_lib(Path::new(v)),
            None => tc.site_packages.iter().any(|sp| has_lib(&sp.join("nvidia").join(name.to_lowercase()))),
        };
        if !ok {
            let where_ = match &from_env {
                Some((k, v)) => format!("{k}={v} has no lib/{lib}*"),
                None => format!("no {pkg} in the build Python's site-packages and no EP_{name}_ROOT_DIR/{name}_DIR"),
            };
            return Err(Failure::env(format!("DeepEP's `main` (EPv2) build needs {name}: {where_}"))
                .hint(format!("install {pkg} into the build Python (`python -m pip install {pkg}`), or set it in the variant (env = {{ EP_{name}_ROOT_DIR = \"/path\" }} for NCCL, nvshmem_dir for NVSHMEM)"))
                .into());
        }
    }
    Ok(())
}

/// Something the revision needs that the build environment does not give.
#[derive(Debug, Clone, PartialEq)]
pub struct Gap {
    pub what: String,
    pub fix: String,
}

/// The first of [`environment_gaps`] as an exit-3 error: checked before the
/// build root is taken, so it answers in seconds even while another build runs.
pub fn environment(pl: &Plan) -> Result<()> {
    match environment_gaps(pl).into_iter().next() {
        Some(g) => Err(Failure::env(g.what).hint(g.fix).into()),
        None => Ok(()),
    }
}

/// The plan's build environment against the revision's needs (pure: `plan`
/// prints these, `build-wheel` stops on the first, exit 3, before compiling).
pub fn environment_gaps(pl: &Plan) -> Vec<Gap> {
    let (Some(e), Some(t)) = (&pl.environment, pl.toolchain()) else { return vec![] };
    let mut gaps = Vec::new();
    // torch's own check runs only in a build that imports torch (else the plan warns).
    if let Some(m) = toolchain_cuda(pl).filter(|m| m.refused && pl.needs_torch) {
        gaps.push(Gap {
            what: m.message,
            fix: format!(
                "build with nvcc of torch's CUDA ({}: CUDA_HOME or the nvidia-cuda-nvcc wheel of that minor), or with a torch built for CUDA {}; --toolchain registry provisions nvcc of the CUDA minor its torch carries",
                t.torch_cuda.as_deref().unwrap_or("?"),
                t.cuda_major_minor()
            ),
        });
    }
    if let Some(min) = &e.needs.nccl_min {
        let why =
            e.needs.evidence.iter().find(|x| x.contains(min.as_str())).map(|x| format!(" ({x})")).unwrap_or_default();
        let at = pl.environment_from.get("NCCL").map(|f| format!(" ({f})")).unwrap_or_default();
        let found = match &e.nccl {
            Some(v) if forge_model::interface::version_key(v) < forge_model::interface::version_key(min) => {
                Some(format!("the build compiles against NCCL {v}{at}"))
            }
            Some(_) => None,
            None => Some(format!("the build's NCCL version could not be read{at}")),
        };
        if let Some(found) = found {
            gaps.push(Gap {
                what: format!("DeepEP at {} needs NCCL >= {min}{why}, but {found}", pl.source.short),
                fix: nccl_fix(pl, t, min),
            });
        }
    }
    gaps
}

/// One side of [`torch_cuda_vs_nvcc`]: a CUDA version (None: not known yet) and where it was read.
#[derive(Debug, Clone, Copy)]
pub struct CudaSide<'a> {
    pub cuda: Option<&'a str>,
    pub from: &'a str,
}

/// torch's CUDA against the build's nvcc, and whether torch refuses the build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaMismatch {
    /// torch's extension builder stops the build (another CUDA major).
    pub refused: bool,
    pub message: String,
}

/// The rule torch's extension builder applies (torch/utils/cpp_extension.py
/// `_check_cuda_version`, torch 2.x): nvcc's `release X.Y` against
/// `torch.version.cuda`; another major raises RuntimeError ("The detected CUDA
/// version ... mismatches the version that was used to compile PyTorch"),
/// another minor only warns. An nvcc not known yet (the registry toolchain
/// before it is provisioned: its nvcc is the CUDA minor its torch carries) is a
/// warning that the two are not proven equal.
pub fn torch_cuda_vs_nvcc(torch: CudaSide, nvcc: CudaSide) -> Option<CudaMismatch> {
    let mm = |v: &str| {
        let mut p = v.trim().split('.').map(|x| x.parse::<u32>().ok());
        Some((p.next()??, p.next()??))
    };
    let t = mm(torch.cuda?)?;
    let shown = |v: (u32, u32)| format!("{}.{}", v.0, v.1);
    let Some(n) = nvcc.cuda.map(mm) else {
        return Some(CudaMismatch {
            refused: false,
            message: format!(
                "torch is a CUDA {} build ({}), and the build's nvcc is not known yet ({}): not proven the same CUDA",
                shown(t),
                torch.from,
                nvcc.from
            ),
        });
    };
    let n = n?;
    if n == t {
        return None;
    }
    let refused = n.0 != t.0;
    let what = if refused {
        "another CUDA major: torch's extension builder refuses it (cpp_extension `_check_cuda_version` raises RuntimeError)"
    } else {
        "another CUDA minor: torch's extension builder only warns, and the extension is compiled by a CUDA other than torch's"
    };
    Some(CudaMismatch {
        refused,
        message: format!(
            "torch is a CUDA {} build ({}), and the build's nvcc is CUDA {} ({}): {what}",
            shown(t),
            torch.from,
            shown(n),
            nvcc.from
        ),
    })
}

/// The plan's toolchain: its torch's CUDA against its nvcc ([`torch_cuda_vs_nvcc`]).
pub fn toolchain_cuda(pl: &Plan) -> Option<CudaMismatch> {
    let t = pl.toolchain()?;
    let torch_from = pl
        .environment_from
        .get("torch")
        .map(|f| format!("torch {}, {f}", t.torch.as_deref().unwrap_or("?")))
        .unwrap_or_else(|| format!("torch {}", t.torch.as_deref().unwrap_or("?")));
    let nvcc_from = format!("`nvcc --version` {}, {}", t.nvcc_version, t.cuda_home.join("bin/nvcc").display());
    let nvcc_mm = t.cuda_major_minor();
    torch_cuda_vs_nvcc(
        CudaSide { cuda: t.torch_cuda.as_deref(), from: &torch_from },
        CudaSide { cuda: Some(&nvcc_mm), from: &nvcc_from },
    )
}

/// How to get NCCL >= `min` for this plan: the variable that names NCCL's
/// root, else the registry toolchain's `[toolchain] nccl`, else the package
/// into the build Python (its real path, not the build root's link).
fn nccl_fix(pl: &Plan, t: &Toolchain, min: &str) -> String {
    let pkg = format!("nvidia-nccl-cu{}", t.cuda_major());
    if let Some((k, v)) = ["EP_NCCL_ROOT_DIR", "NCCL_DIR"].iter().find_map(|k| pl.run.env.get(*k).map(|v| (k, v))) {
        return format!("the variant's env sets {k}={v}: point it at an NCCL >= {min} (e.g. the nvidia/nccl folder of {pkg}>={min}), or drop it to use the build Python's {pkg}");
    }
    match t.kind {
        super::registry::Kind::Registry => format!(
            "set `nccl = \"X.Y.Z\"` (a version >= {min}) under [toolchain] in pins.toml: the registry toolchain then installs {pkg}==X.Y.Z over torch's pin"
        ),
        super::registry::Kind::System => {
            // The build root's links (`python/` -> the real environment) exist only during a build.
            let real = pl.hooks.as_ref().and_then(|h| {
                h.links.iter().find_map(|(name, to)| Some(to.join(t.python.strip_prefix(pl.build_dir().join(name)).ok()?)))
            });
            let python = real.unwrap_or_else(|| t.python.clone());
            format!(
                "install it into the build Python: `{} -m pip install \"{pkg}>={min}\" --no-deps` (torch pins its own {pkg}; the NCCL loaded at run time must then be this one), or set EP_NCCL_ROOT_DIR in the variant's env to an NCCL >= {min}, or build with --toolchain registry",
                python.display()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(cuda: Option<&str>) -> CudaSide<'_> {
        CudaSide { cuda, from: "here" }
    }

    #[test]
    fn torch_cuda_against_nvcc_by_torchs_own_rule() {
        assert_eq!(torch_cuda_vs_nvcc(side(Some("13.0")), side(Some("13.0"))), None);
        let major = torch_cuda_vs_nvcc(side(Some("13.0")), side(Some("12.9"))).unwrap();
        assert!(
            major.refused
                && major.message.contains(
                    "torch is a CUDA 13.0 build (here), and the build's nvcc is CUDA 12.9 (here): another CUDA major"
                ),
            "{major:?}"
        );
        let minor = torch_cuda_vs_nvcc(side(Some("12.8")), side(Some("12.9"))).unwrap();
        assert!(!minor.refused && minor.message.contains("another CUDA minor"), "{minor:?}");
        let unknown = torch_cuda_vs_nvcc(side(Some("12.9")), side(None)).unwrap();
        assert!(!unknown.refused && unknown.message.contains("not known yet"), "{unknown:?}");
        // A CPU torch or an unreadable version: nothing to compare.
        assert_eq!(torch_cuda_vs_nvcc(side(None), side(Some("13.0"))), None);
        assert_eq!(torch_cuda_vs_nvcc(side(Some("thirteen")), side(Some("13.0"))), None);
    }
}
