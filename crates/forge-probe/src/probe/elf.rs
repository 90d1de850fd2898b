//! What one extension module's ELF says: machine, DT_NEEDED, RUNPATH/RPATH,
//! dynamic symbols, `.rodata` strings and the CUDA fatbins. Reads bytes only;
//! must not decide whether any of it is right (that is `rules`).
use object::read::elf::{Dyn, ElfFile64, FileHeader};
use object::{elf, Endianness, Object, ObjectSection, ObjectSymbol};
use serde::Serialize;

use super::fatbin::{self, Fatbin};
use forge_model::pins::Arch;

/// Sections that hold fatbins (`__nv_relfatbin` for `-rdc` device code).
pub const FATBIN_SECTIONS: [&str; 2] = [".nv_fatbin", "__nv_relfatbin"];
/// Shortest `.rodata` string kept.
const MIN_STRING: usize = 6;

#[derive(Debug, Clone, Default, Serialize)]
pub struct ElfFacts {
    /// `x86_64`, `aarch64`, or `e_machine N` for others.
    pub machine: String,
    pub needed: Vec<String>,
    pub runpath: Vec<String>,
    pub rpath: Vec<String>,
    /// Undefined dynamic symbols (what the loader must find elsewhere).
    #[serde(skip)]
    pub undefined: Vec<String>,
    /// Defined, exported dynamic symbols (mangled; see [`demangle_prefix`]).
    #[serde(skip)]
    pub defined: Vec<String>,
    /// Printable NUL-terminated strings of `.rodata`.
    #[serde(skip)]
    pub strings: Vec<String>,
    /// Fatbin sections by name.
    pub fatbins: Vec<(String, Fatbin)>,
    /// Symbol versions the loader must find, per library (`.gnu.version_r`):
    /// `libstdc++.so.6` -> `GLIBCXX_3.4.29`, ... (bounded: [`MAX_VERSION_NEEDS`] in all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub version_needs: Vec<(String, Vec<String>)>,
}

/// Most `.gnu.version_r` entries kept (libraries x versions); a real extension has a few dozen.
pub const MAX_VERSION_NEEDS: usize = 512;

impl ElfFacts {
    pub fn arch(&self) -> Option<Arch> {
        self.machine.parse().ok()
    }
    pub fn needs(&self, prefix: &str) -> bool {
        self.needed.iter().any(|n| n.starts_with(prefix))
    }
    pub fn has_string(&self, needle: &str) -> Option<&str> {
        self.strings.iter().find(|s| s.contains(needle)).map(String::as_str)
    }
    pub fn defines(&self, needle: &str) -> Option<&str> {
        self.defined.iter().find(|s| s.contains(needle)).map(String::as_str)
    }
    /// The fatbin a loader uses: `.nv_fatbin` when present, else `__nv_relfatbin`
    /// (what `cuobjdump --list-elf` lists).
    pub fn device_code(&self) -> Option<&Fatbin> {
        FATBIN_SECTIONS.iter().find_map(|want| self.fatbins.iter().find(|(n, _)| n == want).map(|(_, f)| f))
    }
    /// SM numbers with a cubin / with PTX, sorted and unique.
    pub fn sms(&self) -> (Vec<u32>, Vec<u32>) {
        let Some(f) = self.device_code() else { return (Vec::new(), Vec::new()) };
        let mut c: Vec<u32> = f.cubins().map(|e| e.sm).collect();
        let mut p: Vec<u32> = f.ptx().map(|e| e.sm).collect();
        for v in [&mut c, &mut p] {
            v.sort_unstable();
            v.dedup();
        }
        (c, p)
    }
    /// Cubin / PTX targets with their suffix (`sm_100a`), sorted and unique.
    pub fn archs(&self) -> (Vec<String>, Vec<String>) {
        let Some(f) = self.device_code() else { return (Vec::new(), Vec::new()) };
        let mut c: Vec<String> = f.cubins().map(|e| e.arch()).collect();
        let mut p: Vec<String> = f.ptx().map(|e| e.arch()).collect();
        for v in [&mut c, &mut p] {
            v.sort_by_key(|a| {
                (a.trim_start_matches("sm_").trim_end_matches(['a', 'f']).parse::<u32>().ok(), a.clone())
            });
            v.dedup();
        }
        (c, p)
    }
    /// Every target the device code holds, as `cuda_arch` judges them.
    pub fn targets(&self) -> Vec<forge_model::cuda_arch::Target> {
        use forge_model::cuda_arch::{Cc, Code, Target};
        let Some(f) = self.device_code() else { return Vec::new() };
        f.entries
            .iter()
            .map(|e| Target {
                cc: Cc::from_sm(e.sm),
                suffix: e.suffix,
                code: match e.kind {
                    super::fatbin::Kind::Cubin => Code::Cubin,
                    super::fatbin::Kind::Ptx => Code::Ptx,
                },
            })
            .collect()
    }
}

/// Parse an extension module. An error is a one-line reason (not ELF, not 64-bit, truncated).
pub fn parse(data: &[u8]) -> Result<ElfFacts, String> {
    if !data.starts_with(b"\x7fELF") {
        return Err("not an ELF file (no \\x7fELF magic)".into());
    }
    if data.get(4) != Some(&elf::ELFCLASS64) {
        return Err("32-bit ELF: DeepEP extensions are 64-bit".into());
    }
    let file = ElfFile64::<Endianness>::parse(data).map_err(|e| format!("malformed ELF: {e}"))?;
    let endian = file.endian();
    let header = file.elf_header();
    let machine = match header.e_machine(endian) {
        elf::EM_X86_64 => "x86_64".to_string(),
        elf::EM_AARCH64 => "aarch64".to_string(),
        m => format!("e_machine {m}"),
    };
    let mut facts = ElfFacts { machine, ..Default::default() };

    let sections = file.elf_section_table();
    if let Some((dyns, strtab)) =
        sections.dynamic(endian, data).map_err(|e| format!("malformed dynamic section: {e}"))?
    {
        let strings =
            sections.strings(endian, data, strtab).map_err(|e| format!("malformed dynamic string table: {e}"))?;
        for d in dyns {
            let tag = d.tag32(endian);
            let list = match tag {
                Some(elf::DT_NEEDED) => &mut facts.needed,
                Some(elf::DT_RUNPATH) => &mut facts.runpath,
                Some(elf::DT_RPATH) => &mut facts.rpath,
                _ => continue,
            };
            let s = d.string(endian, strings).map_err(|e| format!("malformed dynamic entry: {e}"))?;
            let s = String::from_utf8_lossy(s).into_owned();
            if tag == Some(elf::DT_NEEDED) {
                list.push(s);
            } else {
                list.extend(s.split(':').filter(|p| !p.is_empty()).map(str::to_string));
            }
        }
    }
    facts.version_needs = version_needs(sections, endian, data);
    for sym in file.dynamic_symbols() {
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        if sym.is_undefined() {
            facts.undefined.push(name.to_string());
        } else if sym.is_global() {
            facts.defined.push(name.to_string());
        }
    }
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        if name == ".rodata" {
            let bytes = section.data().map_err(|e| format!(".rodata: {e}"))?;
            facts.strings = printable_strings(bytes);
        } else if FATBIN_SECTIONS.contains(&name) {
            let bytes = section.data().map_err(|e| format!("{name}: {e}"))?;
            facts.fatbins.push((name.to_string(), fatbin::parse(bytes)));
        }
    }
    Ok(facts)
}

/// `.gnu.version_r`: each library and the symbol versions needed from it, at most
/// [`MAX_VERSION_NEEDS`] names in all; reading stops at the first malformed entry
/// (what was read before it is kept: the section is evidence, not a requirement).
fn version_needs(
    sections: &object::read::elf::SectionTable<'_, object::elf::FileHeader64<Endianness>>,
    endian: Endianness,
    data: &[u8],
) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let Ok(Some((mut needs, link))) = sections.gnu_verneed(endian, data) else { return out };
    let Ok(strings) = sections.strings(endian, data, link) else { return out };
    let mut count = 0;
    while let Ok(Some((need, mut auxs))) = needs.next() {
        let Ok(file) = need.file(endian, strings) else { break };
        let mut versions = Vec::new();
        while let Ok(Some(aux)) = auxs.next() {
            count += 1;
            let Ok(name) = aux.name(endian, strings) else { break };
            if count > MAX_VERSION_NEEDS {
                break;
            }
            versions.push(String::from_utf8_lossy(name).into_owned());
        }
        versions.sort();
        out.push((String::from_utf8_lossy(file).into_owned(), versions));
        if count > MAX_VERSION_NEEDS {
            break;
        }
    }
    out
}

fn printable_strings(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&b| b == 0)
        .filter(|s| {
            s.len() >= MIN_STRING && s.iter().all(|&b| matches!(b, b'\t' | b'\n' | b'\r') || (0x20..0x7f).contains(&b))
        })
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// The readable head of an Itanium-mangled nested name, enough for evidence:
/// `_ZN9hybrid_ep15RDMACoordinator4initEv` -> `hybrid_ep::RDMACoordinator::init`,
/// `_ZNSt6thread6_StateD2Ev` -> `std::thread::_State`; other names unchanged.
pub fn demangle_prefix(name: &str) -> String {
    let Some(rest) = name.strip_prefix("_Z") else { return name.to_string() };
    let (mut parts, mut rest): (Vec<String>, &str) = (Vec::new(), rest);
    if let Some(r) = rest.strip_prefix("St") {
        parts.push("std".into());
        rest = r;
    } else if let Some(r) = rest.strip_prefix('N') {
        rest = r.strip_prefix('K').unwrap_or(r);
        if let Some(r) = rest.strip_prefix("St") {
            parts.push("std".into());
            rest = r;
        }
    }
    loop {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let Some(n) = rest[..digits].parse::<usize>().ok() else { break };
        let Some(id) = rest.get(digits..digits + n) else { break };
        parts.push(id.to_string());
        rest = &rest[digits + n..];
    }
    if parts.is_empty() {
        name.to_string()
    } else {
        parts.join("::")
    }
}

/// Whether a mangled name is in namespace `std` (libstdc++'s own symbols).
pub fn is_std_symbol(name: &str) -> bool {
    ["_ZNSt", "_ZNKSt", "_ZSt", "_ZTISt", "_ZTSSt", "_ZTVSt", "_ZNSo", "_ZNSi", "_ZNKSo", "_ZNKSi"]
        .iter()
        .any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn demangles_nested_names_for_evidence() {
        assert_eq!(demangle_prefix("_ZN9hybrid_ep15RDMACoordinator4initEv"), "hybrid_ep::RDMACoordinator::init");
        assert_eq!(demangle_prefix("_ZNSt6thread6_StateD2Ev"), "std::thread::_State");
        assert_eq!(demangle_prefix("_ZNKSt5ctypeIcE8do_widenEc"), "std::ctype");
        assert_eq!(demangle_prefix("_Z9999x"), "_Z9999x");
        assert_eq!(demangle_prefix("cuInit"), "cuInit");
        assert!(is_std_symbol("_ZSt4cout") && !is_std_symbol("_ZN9hybrid_ep1xEv"));
    }
    #[test]
    fn non_elf_is_an_error_not_a_panic() {
        assert!(parse(b"hello").unwrap_err().contains("not an ELF"));
        assert!(parse(b"\x7fELF\x01").unwrap_err().contains("32-bit"));
        assert!(parse(b"\x7fELF\x02\x01\x01").unwrap_err().contains("malformed"));
    }
}
