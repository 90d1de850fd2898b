//! The environment a plan's build compiles against, read from files the way
//! DeepEP's setup.py finds them (never `import torch`): torch's version and
//! C++ ABI (`TorchConfig.cmake`/`Caffe2Config.cmake`'s
//! `_GLIBCXX_USE_CXX11_ABI`, else whether `libc10.so` exports `std::__cxx11`
//! names), CUDA (nvcc's major.minor), NVSHMEM (`EP_NVSHMEM_ROOT_DIR` /
//! `NVSHMEM_DIR`, else the `nvidia/nvshmem` package: its `nvidia-nvshmem-cu*`
//! dist-info version, else `nvshmem_version.h`) and, for EPv2, NCCL
//! (`EP_NCCL_ROOT_DIR` / `NCCL_DIR`, else the `nvidia/nccl` package: nccl.h's
//! `NCCL_MAJOR/MINOR/PATCH`). With the revision's needs (from the
//! interface) this is the plan's [`BuildEnvironment`]: part of the cache key,
//! copied into the provenance. Must not build or decide anything.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::toolchain::Toolchain;
use forge_model::interface::{Branch, Interface};
use forge_os::fs::machine;
use forge_wheel::provenance::BuildEnvironment;

/// The build environment of a plan, and where each value was read (library -> file).
pub fn of(
    t: &Toolchain,
    env: &BTreeMap<String, String>,
    i: &Interface,
) -> (BuildEnvironment, BTreeMap<String, String>) {
    let mut from = BTreeMap::new();
    let torch_dir = t.site_packages.iter().map(|sp| sp.join("torch")).find(|d| machine::is_file(&d.join("version.py")));
    if let (Some(d), Some(_)) = (&torch_dir, &t.torch) {
        from.insert("torch".to_string(), d.join("version.py").display().to_string());
    }
    let torch_cxx11_abi = torch_dir.as_deref().and_then(|d| {
        let (abi, file) = torch_abi(d)?;
        from.insert("torch ABI".to_string(), file.display().to_string());
        Some(abi)
    });
    let nvshmem = root(t, env, i.branch, "NVSHMEM").and_then(|r| {
        let (v, file) = nvshmem_version(&r)?;
        from.insert("NVSHMEM".into(), file.display().to_string());
        Some(v)
    });
    let nccl = (i.branch == Branch::Main).then(|| root(t, env, i.branch, "NCCL")).flatten().and_then(|r| {
        let file = r.join("include/nccl.h");
        let v = nccl_h_version(&file);
        // Where it was looked for, also when it could not be read (preflight names it).
        from.insert("NCCL".into(), file.display().to_string());
        v
    });
    let mut needs = i.runtime.clone();
    if i.branch != Branch::Main && nvshmem.is_none() {
        // HybridEP and the classic interface link NVSHMEM only when the build finds it.
        needs.nvshmem_same = false;
        needs.nvshmem_min = None;
        needs.evidence.retain(|e| !e.contains("NVSHMEM"));
    }
    let e = BuildEnvironment {
        torch: t.torch.clone(),
        torch_cxx11_abi,
        cuda: Some(t.cuda_major_minor()),
        nvshmem,
        nccl,
        needs,
        requires: None,
    };
    (e, from)
}

/// Where the build finds `name` (`NCCL`, `NVSHMEM`): the variables setup.py
/// reads (EPv2: `EP_{NAME}_ROOT_DIR`, `{NAME}_DIR`; others: `NVSHMEM_DIR`),
/// else `nvidia/<name>` in the build Python's site-packages (first on its path).
pub fn root(t: &Toolchain, env: &BTreeMap<String, String>, b: Branch, name: &str) -> Option<PathBuf> {
    let vars = match b {
        Branch::Main => vec![format!("EP_{name}_ROOT_DIR"), format!("{name}_DIR")],
        _ => vec![format!("{name}_DIR")],
    };
    if let Some(v) = vars.iter().find_map(|k| env.get(k)) {
        return Some(PathBuf::from(v));
    }
    t.site_packages
        .iter()
        .map(|sp| sp.join("nvidia").join(name.to_lowercase()))
        .find(|d| machine::is_dir(&d.join("lib")))
}

fn text(p: &Path) -> Option<String> {
    forge_os::fs::named::read_text_opt(p, "header", forge_os::input::cap::TEXT).ok().flatten()
}

/// The value of `#define NAME value` in `text`.
fn define<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("#define") && w.next() == Some(name)).then(|| w.next()).flatten()
    })
}

/// `2.30.7` from nccl.h's NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH.
pub fn nccl_h_version(file: &Path) -> Option<String> {
    let t = text(file)?;
    let part = |n: &str| define(&t, n).filter(|v| v.chars().all(|c| c.is_ascii_digit()));
    Some(format!("{}.{}.{}", part("NCCL_MAJOR")?, part("NCCL_MINOR")?, part("NCCL_PATCH")?))
}

/// NVSHMEM's version under `root`: the `nvidia-nvshmem-cu*` dist-info beside
/// the `nvidia/nvshmem` package, else `nvshmem_version.h`.
pub fn nvshmem_version(root: &Path) -> Option<(String, PathBuf)> {
    if let Some(site) = root.parent().and_then(Path::parent).filter(|_| root.ends_with("nvidia/nvshmem")) {
        let mut infos: Vec<PathBuf> = machine::names(site)
            .into_iter()
            .filter(|n| n.starts_with("nvidia_nvshmem_cu") && n.ends_with(".dist-info"))
            .map(|n| site.join(n))
            .collect();
        infos.sort();
        // A folder name is untrusted text: only a PEP 440 version is taken from one.
        while let Some(info) = infos.pop() {
            let n = info.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let v = n.trim_end_matches(".dist-info").split_once('-').map(|(_, v)| v.to_string());
            if let Some(v) = v.filter(|v| <pep440_rs::Version as std::str::FromStr>::from_str(v).is_ok()) {
                return Some((v, info));
            }
        }
    }
    for h in ["include/non_abi/nvshmem_version.h", "include/nvshmem_version.h"] {
        let file = root.join(h);
        let Some(t) = text(&file) else { continue };
        let part = |n: &str| define(&t, n).filter(|v| v.chars().all(|c| c.is_ascii_digit()));
        if let (Some(a), Some(b), Some(c)) = (
            part("NVSHMEM_VENDOR_MAJOR_VERSION"),
            part("NVSHMEM_VENDOR_MINOR_VERSION"),
            part("NVSHMEM_VENDOR_PATCH_VERSION"),
        ) {
            return Some((format!("{a}.{b}.{c}"), file));
        }
    }
    None
}

/// torch's C++ ABI and the file that says so: read as `probe --python` reads it (`forge_model::torch`).
pub fn torch_abi(torch: &Path) -> Option<(bool, PathBuf)> {
    forge_model::torch::abi(torch).map(|a| (a.cxx11, a.file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_headers() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("include/non_abi")).unwrap();
        std::fs::write(
            d.path().join("include/nccl.h"),
            "#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n#define NCCL_SUFFIX \"\"\n",
        )
        .unwrap();
        assert_eq!(nccl_h_version(&d.path().join("include/nccl.h")).as_deref(), Some("2.28.9"));
        std::fs::write(
            d.path().join("include/non_abi/nvshmem_version.h"),
            "#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n#define NVSHMEM_VENDOR_MINOR_VERSION 4\n#define NVSHMEM_VENDOR_PATCH_VERSION 5\n",
        )
        .unwrap();
        assert_eq!(nvshmem_version(d.path()).map(|(v, _)| v).as_deref(), Some("3.4.5"));
        // A dist-info beside the package wins over the header.
        let site = d.path().join("site");
        std::fs::create_dir_all(site.join("nvidia/nvshmem/include")).unwrap();
        std::fs::create_dir_all(site.join("nvidia_nvshmem_cu13-3.7.2.dist-info")).unwrap();
        assert_eq!(nvshmem_version(&site.join("nvidia/nvshmem")).map(|(v, _)| v).as_deref(), Some("3.7.2"));
        // A folder name that is not a version (a line break planting a workflow command) is passed over.
        std::fs::create_dir_all(site.join("nvidia_nvshmem_cu13-9\n::error file=x::pwned.dist-info")).unwrap();
        assert_eq!(nvshmem_version(&site.join("nvidia/nvshmem")).map(|(v, _)| v).as_deref(), Some("3.7.2"));
        std::fs::write(d.path().join("bad.h"), "#define NCCL_MAJOR 2\n#define NCCL_MINOR x\n").unwrap();
        assert_eq!(nccl_h_version(&d.path().join("bad.h")), None);
    }

    #[test]
    fn abi_from_cmake_then_library_names() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("share/cmake/Torch")).unwrap();
        std::fs::create_dir_all(d.path().join("lib")).unwrap();
        std::fs::write(d.path().join("lib/libc10.so"), b"\x7fELF\0_ZNKSt7__cxx1112basic_string\0").unwrap();
        assert_eq!(torch_abi(d.path()).map(|(a, _)| a), Some(true));
        std::fs::write(
            d.path().join("share/cmake/Torch/TorchConfig.cmake"),
            "set(TORCH_CXX_FLAGS \"-D_GLIBCXX_USE_CXX11_ABI=0\")\n",
        )
        .unwrap();
        assert_eq!(torch_abi(d.path()).map(|(a, _)| a), Some(false));
    }
}
