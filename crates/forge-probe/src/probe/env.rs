//! An installed environment (`probe --python PATH`): ask that Python where
//! deep_ep and its extensions live (without importing them or torch), read the
//! dist-info, verify its RECORD, and check what the extensions need at run
//! time: NEEDED libraries (RPATH, LD_LIBRARY_PATH, RUNPATH, ld.so.cache,
//! default dirs), the baked RDMA_CORE_HOME, and what HybridEP's run-time JIT
//! reads (DeepEP 17cfb817, csrc/hybrid_ep/jit/compiler.cu): `$CUDA_HOME` with no
//! fallback (`bin/nvcc`, `include`, `lib64` + `-lcudart`) and the cache folder
//! `$HYBRID_EP_CACHE_DIR` or the user's home. Must not judge, must not write.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::disk;
use super::wheel::{self, WheelFacts};
use forge_os::error::Failure;
use forge_os::fs::Kind;
use forge_os::process::Cmd;
use forge_wheel::wheel::record;

/// Most names read from one folder of the environment (torch's `nvidia/`, deep_ep's own).
const MAX_NAMES: usize = 4096;

/// Printed as JSON by the interpreter under test. `find_spec` locates modules
/// without executing them (deep_ep is top level, so nothing is imported).
const SCRIPT: &str = r#"
import importlib.util, importlib.metadata as md, json, os, platform, re, stat, sys, sysconfig
mods = {}
for m in ("deep_ep", "hybrid_ep_cpp", "deep_ep_cpp", "torch"):
    try:
        s = importlib.util.find_spec(m)
        mods[m] = s.origin if s else None
    except Exception:
        mods[m] = None
# A dist-info's files are read only when each is a regular file of at most
# 16 MiB (stat, never open: a FIFO must not block, a huge file not be read).
LIMIT = 16 << 20
def refused(d):
    p = getattr(d, "_path", None)
    if p is None:
        return "no dist-info folder"
    for f in ("METADATA", "PKG-INFO", "RECORD", "top_level.txt"):
        q = os.path.join(str(p), f)
        try:
            st = os.stat(q)
        except FileNotFoundError:
            continue
        except OSError as e:
            return q + ": " + str(e)
        if not stat.S_ISREG(st.st_mode):
            return q + ": not a regular file"
        if st.st_size > LIMIT:
            return q + ": " + str(st.st_size) + " bytes, more than " + str(LIMIT)
    return None
def folder_name(d):
    p = getattr(d, "_path", None)
    n = os.path.basename(str(p)).split("-")[0] if p is not None else ""
    return re.sub(r"[-_.]+", "_", n).lower()
sane, bad = [], []
for d in md.distributions():
    why = refused(d)
    (bad.append((d, why)) if why else sane.append(d))
# torch and the NVIDIA libraries DeepEP's extensions meet at run time: their
# installed dist-info versions (names only; nothing imported).
pkgs = {}
for d in sane:
    n = (d.metadata["Name"] or "").lower().replace("_", "-")
    if n == "torch" or n.startswith("nvidia-nvshmem-cu") or n.startswith("nvidia-nccl-cu"):
        pkgs.setdefault(n, d.version)
    if len(pkgs) > 16:
        break
dist = None
mine = [d for d in sane + [b for b, _ in bad] if folder_name(d) == "deep_ep"]
if not mine:
    # Another distribution name for the deep_ep package (SGLang's sgl-deep-ep).
    mine = [d for d in sane if "deep_ep" in (d.read_text("top_level.txt") or "").split()]
if mine and refused(mine[0]):
    dist = {"refused": refused(mine[0])}
elif mine:
    d = mine[0]
    files = [str(f) for f in (d.files or [])]
    info = [f for f in files if f.endswith(".dist-info/METADATA")]
    dist = {"version": d.version, "location": str(d.locate_file("")),
            "dist_info": str(d.locate_file(info[0]).parent) if info else None}
# The C library and libstdc++ this interpreter's machine gives an extension.
try:
    glibc = os.confstr("CS_GNU_LIBC_VERSION")
except (ValueError, OSError, AttributeError):
    glibc = None
libstdcxx = None
try:
    import ctypes
    ctypes.CDLL("libstdc++.so.6")
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "/libstdc++.so" in line:
                libstdcxx = line.split(None, 5)[-1].strip()
                break
except Exception:
    pass
print(json.dumps({"glibc": glibc, "libstdcxx": libstdcxx, "python": sys.executable, "version": platform.python_version(),
                  "machine": platform.machine(), "modules": mods, "dist": dist,
                  "packages": pkgs, "refused": [w for _, w in bad][:16],
                  "platlib": sysconfig.get_paths().get("platlib")}))
"#;

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Interpreter {
    pub python: String,
    pub version: String,
    pub machine: String,
    pub modules: BTreeMap<String, Option<String>>,
    pub dist: Option<Dist>,
    /// dist-info folders whose files were not read (a FIFO, a device, a
    /// file over 16 MiB), and why.
    #[serde(default)]
    pub refused: Vec<String>,
    /// torch, `nvidia-nvshmem-cu*`, `nvidia-nccl-cu*`: dist-info name -> version.
    #[serde(default)]
    pub packages: BTreeMap<String, String>,
    /// Where a wheel installed into this environment puts its extensions (sysconfig's platlib).
    #[serde(default)]
    pub platlib: Option<String>,
    /// `os.confstr('CS_GNU_LIBC_VERSION')`: `glibc 2.36` (None: not glibc).
    #[serde(default)]
    pub glibc: Option<String>,
    /// The libstdc++ the interpreter loads (its path), when it loads one.
    #[serde(default)]
    pub libstdcxx: Option<String>,
}

/// The versions of what a DeepEP extension meets at run time, as the
/// environment's files say them (dist-info, torch's own files; nothing imported).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Versions {
    /// The interpreter asked.
    pub python: String,
    /// torch's dist-info version (`2.11.0+cu130`).
    pub torch: Option<String>,
    /// torch's `_GLIBCXX_USE_CXX11_ABI`, and the file that said it.
    pub torch_cxx11_abi: Option<(bool, String)>,
    /// `nvidia-nvshmem-cu13` -> version, when installed.
    pub nvshmem: Option<(String, String)>,
    /// `nvidia-nccl-cu13` -> version, when installed.
    pub nccl: Option<(String, String)>,
    /// With `--wheel`: the NCCL and NVSHMEM libraries the wheel's extensions
    /// would load once installed into this environment (`loader`); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loaded: Vec<super::loader::Loaded>,
    /// The environment's glibc (`2.36`), from the interpreter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glibc: Option<String>,
    /// The environment's libstdc++: its path and the symbol versions it defines (`GLIBCXX_3.4.30`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libstdcxx: Option<(String, Vec<String>)>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Dist {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub location: String,
    pub dist_info: Option<String>,
    /// deep_ep's own dist-info was not read: why.
    #[serde(default)]
    pub refused: Option<String>,
}

/// How one NEEDED library resolved.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved {
    pub extension: String,
    pub library: String,
    /// Where it was found and through what (`RUNPATH /usr/lib`), or None.
    pub found: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EnvFacts {
    pub interpreter: Interpreter,
    pub needed: Vec<Resolved>,
    /// RUNPATH/RPATH entries that do not exist here, per extension.
    pub missing_runpaths: Vec<(String, String)>,
    /// What HybridEP's JIT will find.
    pub jit: JitEnv,
    /// What EPv2's run-time JIT finds here (applies to an EPv2 wheel only).
    pub epv2_jit: Epv2Jit,
    /// torch, NVSHMEM and NCCL as installed.
    pub versions: Versions,
    /// `--driver-at-run-time`: the NVIDIA driver's libraries are not expected here.
    pub driver_at_run_time: bool,
    /// The NCCL and NVSHMEM libraries the process would load, with their own versions (`loader`).
    #[serde(default)]
    pub loaded: Vec<super::loader::Loaded>,
}

/// HybridEP's JIT runs `$CUDA_HOME/bin/nvcc -I$CUDA_HOME/include
/// -L$CUDA_HOME/lib64 -lcudart` and writes under `<cache>/.deepep/hybrid_ep/jit`.
#[derive(Debug, Clone, Serialize)]
pub struct JitEnv {
    /// `$CUDA_HOME` as this process sees it; None when unset (the JIT then runs `/bin/nvcc`).
    pub cuda_home: Option<String>,
    /// The parts of `$CUDA_HOME` the JIT uses that are missing.
    pub missing: Vec<String>,
    /// `$HYBRID_EP_CACHE_DIR`, else the passwd home directory, else /tmp.
    pub cache_dir: String,
    /// Where the cache folder comes from (`HYBRID_EP_CACHE_DIR`, `home`, `fallback`).
    pub cache_from: String,
    /// The nearest existing path on the way to `<cache>/.deepep/hybrid_ep/jit`, and
    /// whether it is a folder this user may write.
    pub cache_writable: Option<(String, bool)>,
}

/// EPv2's run-time needs beyond libraries (deep_ep/__init__.py's `find_cuda_home()` assertion,
/// csrc/jit/compiler.hpp): a CUDA home with nvcc >= 12.3 and cuobjdump, and NCCL's headers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Epv2Jit {
    /// The CUDA home `import deep_ep` finds, and how (`CUDA_HOME`, `CUDA_PATH`, `nvcc on PATH`, `/usr/local/cuda`).
    pub cuda_home: Option<(String, String)>,
    /// `nvcc --version`'s release (`13.0`), when nvcc ran.
    pub nvcc: Option<String>,
    /// What the JIT uses that is missing or too old, one line each.
    pub missing: Vec<String>,
    /// `<nccl root>/include` holding nccl.h (EP_NCCL_ROOT_DIR, NCCL_DIR, else the pip NCCL's).
    pub nccl_include: Option<String>,
}

/// The lowest nvcc EPv2's JIT compiles with (csrc/jit/compiler.hpp).
pub const EPV2_NVCC_MIN: (u64, u64) = (12, 3);

/// What EPv2's JIT finds, found the way it looks: torch's `find_cuda_home()` order, then
/// `bin/nvcc` (its release) and `bin/cuobjdump` there; NCCL's root as find_pkgs does.
pub fn epv2_jit(platlib: Option<&str>) -> Epv2Jit {
    let var = |n: &str| forge_os::environ::var(n).filter(|s| !s.is_empty());
    let home = var("CUDA_HOME")
        .map(|h| (h, "CUDA_HOME"))
        .or_else(|| var("CUDA_PATH").map(|h| (h, "CUDA_PATH")))
        .or_else(|| {
            let nvcc = forge_os::process::lookup::which("nvcc")?;
            let home = disk::canonical(&nvcc)?.parent()?.parent()?.display().to_string();
            Some((home, "nvcc on PATH"))
        })
        .or_else(|| {
            disk::is_dir(Path::new("/usr/local/cuda")).then(|| ("/usr/local/cuda".to_string(), "/usr/local/cuda"))
        });
    let mut j = Epv2Jit { cuda_home: home.map(|(h, f)| (h, f.to_string())), ..Default::default() };
    if let Some((h, _)) = &j.cuda_home {
        let h = Path::new(h);
        // EP_JIT_NVCC_COMPILER replaces the home's nvcc (cuobjdump stays the home's).
        let nvcc = var("EP_JIT_NVCC_COMPILER").map(PathBuf::from).unwrap_or_else(|| h.join("bin/nvcc"));
        j.nvcc = nvcc_release(&nvcc);
        match &j.nvcc {
            None => j.missing.push("bin/nvcc (it compiles EPv2's kernels at run time)".into()),
            Some(v) if release_key(v) < EPV2_NVCC_MIN => {
                j.missing.push(format!("nvcc >= {}.{} (bin/nvcc is {v})", EPV2_NVCC_MIN.0, EPV2_NVCC_MIN.1))
            }
            Some(_) => {}
        }
        if !disk::is_file(&h.join("bin/cuobjdump")) {
            j.missing.push("bin/cuobjdump (the JIT reads its cubins with it)".into());
        }
    }
    let nccl_root = var("EP_NCCL_ROOT_DIR")
        .or_else(|| var("NCCL_DIR"))
        .or_else(|| platlib.map(|p| Path::new(p).join("nvidia/nccl").display().to_string()));
    j.nccl_include = nccl_root
        .map(|r| Path::new(&r).join("include"))
        .filter(|i| disk::is_file(&i.join("nccl.h")))
        .map(|i| i.display().to_string());
    j
}

/// `release X.Y` of `nvcc --version`, None when it does not run.
fn nvcc_release(nvcc: &Path) -> Option<String> {
    if !disk::is_file(nvcc) {
        return None;
    }
    let out = Cmd::new(nvcc, "ask nvcc its version").arg("--version").output().ok()?;
    let at = out.find("release ")? + "release ".len();
    Some(out[at..].split(|c: char| c == ',' || c.is_whitespace()).next()?.to_string())
}

fn release_key(v: &str) -> (u64, u64) {
    let mut it = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Run [`SCRIPT`] with `python`: what it says about its modules and packages.
fn ask(python: &Path) -> Result<Interpreter> {
    let out = Cmd::new(python, format!("ask {} about its deep_ep", python.display()))
        .arg("-c")
        .arg(SCRIPT)
        .capture()
        .map_err(|e| {
        Failure::usage(format!("cannot run {}: {e:#}", python.display()))
            .hint("pass the python of the environment to inspect, e.g. .venv/bin/python")
    })?;
    if !out.status.success() {
        return Err(Failure::usage(format!(
            "{} failed to describe its environment: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .into());
    }
    let interp: Interpreter = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{} printed something other than the expected JSON", python.display()))?;
    if let Some(why) = interp.dist.as_ref().and_then(|d| d.refused.as_deref()) {
        return Err(Failure::usage(format!(
            "the installed deep_ep's dist-info is not read: {}",
            forge_os::input::excerpt(why, 300)
        ))
        .hint("a dist-info file must be a regular file of at most 16 MiB; reinstall deep_ep into that environment")
        .into());
    }
    for why in &interp.refused {
        forge_os::note!("not read: {}", forge_os::input::excerpt(why, 300));
    }
    Ok(interp)
}

/// torch, NVSHMEM and NCCL in `python`'s environment (`probe --wheel W --python ENV`:
/// deep_ep need not be installed there).
pub fn versions(python: &Path) -> Result<Versions> {
    Ok(versions_of(&ask(python)?))
}

/// [`versions`], plus what `wheel`'s extensions would load once installed
/// into `python`'s environment (at its platlib, where an installer puts them).
pub fn versions_for_wheel(python: &Path, wheel: &WheelFacts) -> Result<Versions> {
    let interp = ask(python)?;
    let mut v = versions_of(&interp);
    if let Some(site) = interp.platlib.as_deref() {
        let mut installed = wheel.clone();
        for e in &mut installed.extensions {
            e.path = Path::new(site).join(&e.path).display().to_string();
        }
        v.loaded = resolve(&interp, &installed).loaded;
    }
    Ok(v)
}

fn versions_of(interp: &Interpreter) -> Versions {
    let find =
        |prefix: &str| interp.packages.iter().find(|(n, _)| n.starts_with(prefix)).map(|(n, v)| (n.clone(), v.clone()));
    let torch_dir =
        interp.modules.get("torch").cloned().flatten().and_then(|o| Some(Path::new(&o).parent()?.to_path_buf()));
    Versions {
        python: interp.python.clone(),
        torch: torch_dir.as_deref().and_then(torch_version).or_else(|| interp.packages.get("torch").cloned()),
        torch_cxx11_abi: torch_dir.as_deref().and_then(torch_abi),
        nvshmem: find("nvidia-nvshmem-cu"),
        nccl: find("nvidia-nccl-cu"),
        loaded: Vec::new(),
        glibc: interp.glibc.as_deref().and_then(|g| g.strip_prefix("glibc ")).map(|v| v.trim().to_string()),
        libstdcxx: interp.libstdcxx.as_ref().and_then(|p| Some((p.clone(), defined_versions(Path::new(p))?))),
    }
}

/// The symbol versions a shared library defines (`.gnu.version_d`), read bounded; None when unreadable.
fn defined_versions(lib: &Path) -> Option<Vec<String>> {
    use object::read::elf::ElfFile64;
    let data = disk::read_bytes(lib, "libstdc++", forge_os::input::cap::LOCK).ok()?;
    let file = ElfFile64::<object::Endianness>::parse(&*data).ok()?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let (mut defs, link) = sections.gnu_verdef(endian, &*data).ok()??;
    let strings = sections.strings(endian, &*data, link).ok()?;
    let mut out = Vec::new();
    while let Ok(Some((_, mut auxs))) = defs.next() {
        if let Ok(Some(aux)) = auxs.next() {
            out.push(String::from_utf8_lossy(aux.name(endian, strings).ok()?).into_owned());
        }
        if out.len() > 4096 {
            break;
        }
    }
    Some(out)
}

/// torch's `__version__` from `torch/version.py`, the file the build records it from
/// (`2.11.0+cu130`): the dist-info may carry the version without its local label
/// (`2.11.0`) for the very same build, so comparing it with provenance would be a false FAIL.
pub fn torch_version(torch: &Path) -> Option<String> {
    forge_model::torch::version(torch).map(|v| v.version)
}

/// torch's C++ ABI and the file that says so, read as the build reads it (`forge_model::torch`).
pub fn torch_abi(torch: &Path) -> Option<(bool, String)> {
    forge_model::torch::abi(torch).map(|a| (a.cxx11, format!("{}: {}", a.file.display(), a.why)))
}

/// Ask `python` about its deep_ep; read the installed files as a [`WheelFacts`].
pub fn inspect(python: &Path) -> Result<(WheelFacts, EnvFacts)> {
    let interp = ask(python)?;
    let Some(dist) = interp.dist.clone() else {
        return Err(Failure::usage(format!("deep_ep is not installed for {}", interp.python))
            .hint("install the wheel into that environment, or probe the wheel file with --wheel")
            .into());
    };
    let mut facts = WheelFacts {
        file: dist.location.clone(),
        name: None,
        platform: None,
        version: Some(dist.version.clone()),
        provenance: None,
        record_problems: Vec::new(),
        record_verified: 0,
        extensions: Vec::new(),
        members: Vec::new(),
        image_wheel: None,
        platform_audit: None,
    };
    if let Some(info) = &dist.dist_info {
        read_dist_info(Path::new(info), Path::new(&dist.location), &mut facts);
    } else {
        facts.record_problems.push("the installed deep_ep lists no .dist-info/METADATA".into());
    }
    for m in ["hybrid_ep_cpp", "deep_ep_cpp"] {
        if let Some(Some(origin)) = interp.modules.get(m) {
            facts.extensions.push(wheel::extension_from_disk(Path::new(origin))?);
        }
    }
    // EPv2's `deep_ep._C` lives inside the package: finding its spec would run
    // deep_ep/__init__.py (and import torch), so it is looked for beside it.
    if let Some(c) = interp.modules.get("deep_ep").cloned().flatten().and_then(|o| epv2_extension(Path::new(&o))) {
        facts.extensions.push(wheel::extension_from_disk(&c)?);
    }
    let env = resolve(&interp, &facts);
    Ok((facts, env))
}

/// `deep_ep/_C.<abi tag>.so` beside deep_ep's `__init__.py` (the first in name order).
fn epv2_extension(init: &Path) -> Option<PathBuf> {
    let dir = init.parent()?;
    disk::names(dir, MAX_NAMES)
        .into_iter()
        .filter(|n| n.starts_with("_C.") && n.ends_with(".so"))
        .map(|n| dir.join(n))
        .find(|p| disk::is_file(p))
}

fn read_dist_info(info: &Path, location: &Path, facts: &mut WheelFacts) {
    use forge_os::input::cap;
    if let Ok(wheel) = disk::read_text(&info.join("WHEEL"), "WHEEL", cap::TEXT) {
        facts.platform = wheel
            .lines()
            .find_map(|l| l.strip_prefix("Tag:"))
            .and_then(|t| t.trim().rsplit('-').next())
            .map(str::to_string);
    }
    if let Ok(bytes) = disk::read_bytes(&info.join(forge_wheel::provenance::FILE_NAME), "provenance", cap::TEXT) {
        facts.provenance =
            Some(serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", forge_wheel::provenance::FILE_NAME)));
    }
    let text = match disk::read_text(&info.join("RECORD"), "RECORD", cap::LOCK) {
        Ok(t) => t,
        Err(e) => return facts.record_problems.push(format!("{e:#}")),
    };
    let entries = match record::parse(&text) {
        Ok(e) => e,
        Err(e) => return facts.record_problems.push(format!("{}/RECORD: {e:#}", info.display())),
    };
    for e in entries {
        facts.members.push(e.path.clone());
        let Some(want) = e.hash else { continue };
        match hash_file(&location.join(&e.path)) {
            Err(err) => facts.record_problems.push(format!("{}: listed in RECORD but unreadable ({err:#})", e.path)),
            Ok((hash, len)) if hash != want || e.size.is_some_and(|s| s != len) => {
                facts.record_problems.push(format!("{}: content differs from RECORD (changed after install)", e.path))
            }
            Ok(_) => facts.record_verified += 1,
        }
    }
}

/// RECORD's hash and the size of an installed file, streamed (a regular file
/// of at most the wheel member limit: RECORD may name `/dev/zero`).
fn hash_file(path: &Path) -> Result<(String, u64)> {
    let cap = forge_wheel::wheel::limits::MEMBER;
    let (f, _) = disk::open(path, "installed file", cap)?;
    let (digest, len) = forge_os::input::sha256_reader(f, cap)?;
    Ok((record::hash_digest(&digest), len))
}

/// The loader cache: soname -> path (`ldconfig -p`).
fn ld_cache() -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for ldconfig in ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"] {
        let Ok(out) = Cmd::new(ldconfig, "list the loader cache").arg("-p").capture() else { continue };
        for line in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
            if let Some((left, path)) = line.split_once(" => ") {
                let name = left.trim().split(' ').next().unwrap_or_default().to_string();
                map.entry(name).or_insert_with(|| path.trim().to_string());
            }
        }
        break;
    }
    map
}

fn expand_origin(dir: &str, ext: &Path) -> PathBuf {
    let origin = ext.parent().map(|p| p.display().to_string()).unwrap_or_default();
    PathBuf::from(dir.replace("$ORIGIN", &origin).replace("${ORIGIN}", &origin))
}

fn resolve(interp: &Interpreter, facts: &WheelFacts) -> EnvFacts {
    let cache = ld_cache();
    let ld_path: Vec<PathBuf> = forge_os::environ::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    // torch loads its own libraries (libc10, libtorch*, the pip CUDA runtime) before deep_ep.
    let torch_dirs: Vec<PathBuf> = interp
        .modules
        .get("torch")
        .cloned()
        .flatten()
        .map(PathBuf::from)
        .and_then(|t| {
            let torch = t.parent()?.to_path_buf();
            let nvidia = torch.parent()?.join("nvidia");
            let mut dirs = vec![torch.join("lib")];
            dirs.extend(disk::names(&nvidia, MAX_NAMES).into_iter().map(|n| nvidia.join(n).join("lib")));
            Some(dirs)
        })
        .unwrap_or_default();
    let defaults: Vec<PathBuf> = [
        "/lib",
        "/usr/lib",
        "/lib64",
        "/usr/lib64",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let mut needed = Vec::new();
    let mut missing_runpaths = Vec::new();
    for ext in &facts.extensions {
        let Ok(elf) = &ext.elf else { continue };
        let here = Path::new(&ext.path);
        for dir in elf.runpath.iter().chain(&elf.rpath) {
            let d = expand_origin(dir, here);
            if !disk::is_dir(&d) {
                missing_runpaths.push((ext.path.clone(), dir.clone()));
            }
        }
        for lib in &elf.needed {
            let search = |how: &str, dirs: &[PathBuf]| {
                dirs.iter()
                    .map(|d| d.join(lib))
                    .find(|p| disk::kind(p) != Kind::Missing)
                    .map(|p| format!("{how} {}", p.display()))
            };
            let runpath: Vec<PathBuf> = elf.runpath.iter().map(|d| expand_origin(d, here)).collect();
            let rpath: Vec<PathBuf> = if runpath.is_empty() {
                elf.rpath.iter().map(|d| expand_origin(d, here)).collect()
            } else {
                Vec::new()
            };
            let found = search("RPATH", &rpath)
                .or_else(|| search("LD_LIBRARY_PATH", &ld_path))
                .or_else(|| search("RUNPATH", &runpath))
                .or_else(|| cache.get(lib).map(|p| format!("ld.so.cache {p}")))
                .or_else(|| search("default dir", &defaults))
                .or_else(|| search("loaded by torch from", &torch_dirs));
            needed.push(Resolved { extension: ext.path.clone(), library: lib.clone(), found });
        }
    }
    let torch = interp.modules.get("torch").cloned().flatten().map(PathBuf::from);
    let sonames: Vec<(String, Option<String>)> = needed.iter().map(|r| (r.library.clone(), r.found.clone())).collect();
    let loaded = super::loader::loaded(torch.as_deref(), &interp.packages, &sonames);
    EnvFacts {
        interpreter: interp.clone(),
        loaded,
        needed,
        missing_runpaths,
        jit: jit_env(),
        epv2_jit: epv2_jit(interp.platlib.as_deref()),
        versions: versions_of(interp),
        driver_at_run_time: false,
    }
}

/// What HybridEP's JIT reads, the way it reads it: `getenv("CUDA_HOME")` with
/// no fallback; the cache in `HYBRID_EP_CACHE_DIR`, else `getpwuid(getuid())->pw_dir`, else /tmp.
pub fn jit_env() -> JitEnv {
    let cuda_home = forge_os::environ::var("CUDA_HOME").filter(|s| !s.is_empty());
    let mut missing = Vec::new();
    if let Some(h) = &cuda_home {
        let h = Path::new(h);
        if !present(&h.join("bin/nvcc")) {
            missing.push("bin/nvcc".to_string());
        }
        if !present(&h.join("include/cuda_runtime.h")) {
            missing.push("include/cuda_runtime.h".to_string());
        }
        if !["lib64/libcudart.so", "lib64/libcudart_static.a", "lib64/libcudart.a"].iter().any(|f| present(&h.join(f)))
        {
            missing.push("lib64/libcudart.so (the JIT links -L$CUDA_HOME/lib64 -lcudart)".to_string());
        }
    }
    let (cache_dir, cache_from) = match forge_os::environ::var("HYBRID_EP_CACHE_DIR").filter(|s| !s.is_empty()) {
        Some(d) => (d, "HYBRID_EP_CACHE_DIR"),
        None => match passwd_home() {
            Some(h) => (h, "home"),
            None => ("/tmp".to_string(), "fallback"),
        },
    };
    let target = Path::new(&cache_dir).join(".deepep/hybrid_ep/jit");
    // The nearest thing that exists on the way; a file there blocks create_directories.
    let cache_writable =
        target.ancestors().find(|a| disk::exists(a)).map(|a| (a.display().to_string(), disk::is_dir(a) && writable(a)));
    JitEnv { cuda_home, missing, cache_dir, cache_from: cache_from.to_string(), cache_writable }
}

/// Something is at `path`, links followed (`Path::exists`).
fn present(path: &Path) -> bool {
    disk::kind(path) != Kind::Missing
}

/// `getpwuid(getuid())->pw_dir`, as HybridEP asks (not `$HOME`).
fn passwd_home() -> Option<String> {
    // SAFETY: getpwuid returns a pointer into static storage or null; the
    // string is copied before any other passwd call can overwrite it.
    unsafe {
        let pw = libc::getpwuid(libc::getuid());
        if pw.is_null() || (*pw).pw_dir.is_null() {
            return None;
        }
        let s = std::ffi::CStr::from_ptr((*pw).pw_dir).to_string_lossy().into_owned();
        (!s.is_empty()).then_some(s)
    }
}

/// access(2) W_OK|X_OK for this user: checks without writing anything.
fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: c is a valid NUL-terminated path for the duration of the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_version_is_read_from_version_py_with_its_local_label() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("version.py"),
            "from typing import Optional\n__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n",
        )
        .unwrap();
        assert_eq!(torch_version(d.path()).as_deref(), Some("2.11.0+cu130"));
        std::fs::write(d.path().join("version.py"), "__version__: str = \"2.10.0\"\n").unwrap();
        assert_eq!(torch_version(d.path()).as_deref(), Some("2.10.0"));
        std::fs::write(d.path().join("version.py"), "git_version = 'x'\n").unwrap();
        assert_eq!(torch_version(d.path()), None);
        assert_eq!(torch_version(&d.path().join("missing")), None);
    }
}
