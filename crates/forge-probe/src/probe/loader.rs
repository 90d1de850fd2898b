//! What the process would load (`probe --python ENV`): the NCCL
//! (`libnccl.so.2`) and NVSHMEM host library (`libnvshmem_host.so.*`) that
//! deep_ep's extensions get, found as the dynamic loader finds them, and their
//! versions read from the libraries' own bytes. No ldd, no dlopen, no code of
//! the probed environment runs:
//! - deep_ep imports torch first, so a library torch's `libtorch_cuda.so` /
//!   `libtorch_global_deps.so` NEEDs and resolves through its own RUNPATH/RPATH
//!   is loaded before the extension, and the loader then reuses it for the
//!   extension's NEEDED of the same soname (ld.so matches loaded sonames
//!   first); those ELF files are read through a cache (headers and the
//!   dynamic section only, never the whole 1 GB library);
//! - else the extension's own resolution (`env::resolve`: RPATH,
//!   LD_LIBRARY_PATH, RUNPATH, ld.so.cache, default folders).
//!
//! Versions: NCCL's `.rodata` holds "NCCL version X.Y.Z+cudaA.B" (the string
//! its `NCCL_DEBUG=INFO` banner prints, `ncclGetVersion`'s value in text);
//! NVSHMEM's holds "NVSHMEM vX.Y.Z". Only `.rodata` is read, capped. The
//! dist-info version of the distribution whose folder holds the library is
//! kept beside it. Must not judge.
use std::path::{Path, PathBuf};

use object::read::elf::{Dyn, ElfFile64};
use object::{elf, Endianness, Object, ObjectSection};
use serde::Serialize;

use std::collections::BTreeMap;

/// Largest library looked into (libtorch_cuda.so is about 1.5 GB; only parts are read).
const MAX_LIBRARY: u64 = 8 << 30;
/// Largest `.rodata` scanned for a version string.
const MAX_RODATA: u64 = 256 << 20;

/// The libraries reported: (soname prefix, what it is, distribution name prefix, version marker).
const LIBRARIES: [(&str, &str, &str, &str); 2] = [
    ("libnccl.so", "NCCL", "nvidia-nccl-cu", "NCCL version "),
    ("libnvshmem_host.so", "NVSHMEM", "nvidia-nvshmem-cu", "NVSHMEM v"),
];

/// One library the process would load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Loaded {
    /// `NCCL` or `NVSHMEM`.
    pub what: String,
    /// The soname the extension NEEDs (`libnccl.so.2`).
    pub soname: String,
    /// Where it would come from, None when not found.
    pub path: Option<String>,
    /// How (`loaded by torch first (its RUNPATH)`, `RUNPATH`, `ld.so.cache`, ...).
    pub how: String,
    /// The version the library's own bytes state.
    pub version: Option<String>,
    /// The installed distribution whose folder holds it: (name, dist-info version).
    pub dist: Option<(String, String)>,
}

/// The NCCL and NVSHMEM libraries deep_ep's extensions would get in a
/// process whose torch is `torch` (its `__init__.py`) and whose installed
/// distributions are `packages` (name -> dist-info version); `needed`: each
/// extension NEEDED (soname, how `env` resolved it: `RUNPATH /path`, ...).
pub fn loaded(
    torch: Option<&Path>,
    packages: &BTreeMap<String, String>,
    needed: &[(String, Option<String>)],
) -> Vec<Loaded> {
    let torch_libs = torch.map(torch_loads).unwrap_or_default();
    let mut out: Vec<Loaded> = Vec::new();
    for (library, found) in needed {
        let Some((_, what, dist, marker)) = LIBRARIES.iter().find(|l| library.starts_with(l.0)) else {
            continue;
        };
        if out.iter().any(|l| l.soname == *library) {
            continue;
        }
        let by_torch = torch_libs.iter().find(|(n, _)| n == library);
        let (path, how) = match (by_torch, found) {
            (Some((_, p)), _) => {
                (Some(p.clone()), "loaded by torch first (its RUNPATH; the loader reuses the soname)".to_string())
            }
            (None, Some(found)) => match found.find(" /") {
                Some(i) => (Some(normalise(Path::new(&found[i + 1..]))), found[..i].to_string()),
                None => (None, found.clone()),
            },
            (None, None) => (None, "not found".to_string()),
        };
        let version = path.as_deref().and_then(|p| library_version(p, marker));
        let owner = path.as_deref().and_then(|p| owner(p, what, dist, packages));
        out.push(Loaded {
            what: what.to_string(),
            soname: library.clone(),
            path: path.map(|p| p.display().to_string()),
            how,
            version,
            dist: owner,
        });
    }
    out
}

/// The distribution (name, version) of `packages` whose `nvidia/<lib>/lib` folder holds `path`.
fn owner(path: &Path, what: &str, dist: &str, packages: &BTreeMap<String, String>) -> Option<(String, String)> {
    let folder = format!("nvidia/{}/lib", what.to_lowercase());
    if !path.parent()?.ends_with(&folder) {
        return None;
    }
    packages.iter().find(|(n, _)| n.starts_with(dist)).map(|(n, v)| (n.clone(), v.clone()))
}

/// Sonames torch's CUDA libraries NEED, resolved through their own RUNPATH/RPATH.
fn torch_loads(init: &Path) -> Vec<(String, PathBuf)> {
    let Some(lib) = init.parent().map(|t| t.join("lib")) else { return Vec::new() };
    let mut out = Vec::new();
    for name in ["libtorch_cuda.so", "libtorch_global_deps.so"] {
        let file = lib.join(name);
        let Some(d) = dynamic(&file) else { continue };
        let dirs: Vec<PathBuf> = if d.runpath.is_empty() { &d.rpath } else { &d.runpath }
            .iter()
            .map(|p| {
                PathBuf::from(
                    p.replace("$ORIGIN", &lib.display().to_string()).replace("${ORIGIN}", &lib.display().to_string()),
                )
            })
            .collect();
        for n in d.needed.iter().filter(|n| LIBRARIES.iter().any(|l| n.starts_with(l.0))) {
            if let Some(p) = dirs.iter().map(|dir| dir.join(n)).find(|p| super::disk::is_file(p)) {
                if !out.iter().any(|(o, _)| o == n) {
                    out.push((n.clone(), normalise(&p)));
                }
            }
        }
    }
    out
}

/// The real path (`deep_ep/../nvidia/nccl/lib/x` -> `nvidia/nccl/lib/x`, links resolved).
fn normalise(p: &Path) -> PathBuf {
    super::disk::canonical(p).unwrap_or_else(|| p.to_path_buf())
}

/// DT_NEEDED, DT_RUNPATH and DT_RPATH of an ELF file.
#[derive(Debug, Default)]
struct Dynamic {
    needed: Vec<String>,
    runpath: Vec<String>,
    rpath: Vec<String>,
}

/// The dynamic entries of the 64-bit ELF at `path`, reading only what they need.
fn dynamic(path: &Path) -> Option<Dynamic> {
    let (f, _) = super::disk::open(path, "library", MAX_LIBRARY).ok()?;
    let cache = object::ReadCache::new(f);
    let file = ElfFile64::<Endianness, _>::parse(&cache).ok()?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let (dyns, strtab) = sections.dynamic(endian, &cache).ok()??;
    let strings = sections.strings(endian, &cache, strtab).ok()?;
    let mut d = Dynamic::default();
    for e in dyns.iter().take(4096) {
        let tag = e.tag32(endian);
        let Some(Ok(s)) = u32::try_from(e.d_val(endian)).ok().map(|o| strings.get(o)) else { continue };
        let s = String::from_utf8_lossy(s).into_owned();
        match tag {
            Some(elf::DT_NEEDED) => d.needed.push(s),
            Some(elf::DT_RUNPATH) => d.runpath.extend(s.split(':').filter(|p| !p.is_empty()).map(str::to_string)),
            Some(elf::DT_RPATH) => d.rpath.extend(s.split(':').filter(|p| !p.is_empty()).map(str::to_string)),
            _ => {}
        }
    }
    Some(d)
}

/// The version after `marker` ("NCCL version " -> `2.28.9`) in the library's `.rodata`.
pub fn library_version(path: &Path, marker: &str) -> Option<String> {
    let (f, _) = super::disk::open(path, "library", MAX_LIBRARY).ok()?;
    let cache = object::ReadCache::new(f);
    let file = ElfFile64::<Endianness, _>::parse(&cache).ok()?;
    let rodata = file.section_by_name(".rodata").filter(|s| s.size() <= MAX_RODATA)?;
    version_after(rodata.data().ok()?, marker)
}

/// `X.Y.Z` right after the first `marker` in `bytes` that is followed by a digit.
fn version_after(bytes: &[u8], marker: &str) -> Option<String> {
    let m = marker.as_bytes();
    let mut from = 0;
    while let Some(i) = bytes[from..].windows(m.len()).position(|w| w == m) {
        let start = from + i + m.len();
        let v: String = bytes[start..]
            .iter()
            .take(32)
            .take_while(|b| b.is_ascii_digit() || **b == b'.')
            .map(|b| *b as char)
            .collect();
        let v = v.trim_end_matches('.');
        if v.split('.').count() >= 3 && v.split('.').all(|p| !p.is_empty()) {
            return Some(v.to_string());
        }
        from = start;
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_are_read_after_their_marker() {
        let b = b"Mismatched NCCL version detected\0NCCL version 2.28.9+cuda13.0\0";
        assert_eq!(super::version_after(b, "NCCL version ").as_deref(), Some("2.28.9"));
        assert_eq!(
            super::version_after(b"NVSHMEM version in\0NVSHMEM v3.4.5\0", "NVSHMEM v").as_deref(),
            Some("3.4.5")
        );
        assert_eq!(super::version_after(b"NCCL version 2.\0", "NCCL version "), None);
    }
}
