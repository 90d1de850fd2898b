//! What one ELF member needs of the machine that loads it: its architecture,
//! its DT_NEEDED libraries, the symbol versions it requires of each library
//! (`.gnu.version_r`, as auditwheel reads them) and which undefined dynamic
//! symbols carry each version (`.gnu.version`), so a policy can be explained
//! symbol by symbol. Reads bytes only; bounded by [`MAX_VERSIONS`] and
//! [`MAX_SYMBOLS_PER_VERSION`].
use std::collections::BTreeMap;

use object::read::elf::{Dyn, ElfFile64, FileHeader, Sym};
use object::{elf, Endianness};

/// Most `.gnu.version_r` entries read (libraries x versions); a real extension has a few dozen.
pub const MAX_VERSIONS: usize = 4096;
/// Symbols kept per (library, version) to explain it (the rest are counted).
pub const MAX_SYMBOLS_PER_VERSION: usize = 3;

/// One ELF member's needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ElfNeeds {
    /// The member's path in the wheel.
    pub member: String,
    /// `x86_64`, `aarch64`, or `e_machine N`.
    pub machine: String,
    pub needed: Vec<String>,
    /// (library, version) -> (up to [`MAX_SYMBOLS_PER_VERSION`] symbols, how many in all).
    pub versions: BTreeMap<(String, String), (Vec<String>, usize)>,
    /// Undefined dynamic symbols (for the policies' forbidden symbols).
    #[serde(skip)]
    pub undefined: Vec<String>,
}

/// Parse one ELF member. An error is a one-line reason (malformed bytes).
pub fn read(member: &str, data: &[u8]) -> anyhow::Result<ElfNeeds> {
    if data.get(4) != Some(&elf::ELFCLASS64) {
        anyhow::bail!("a 32-bit ELF file (DeepEP wheels hold 64-bit code)");
    }
    let file = ElfFile64::<Endianness>::parse(data).map_err(|e| anyhow::anyhow!("malformed ELF: {e}"))?;
    let endian = file.endian();
    let machine = match file.elf_header().e_machine(endian) {
        elf::EM_X86_64 => "x86_64".to_string(),
        elf::EM_AARCH64 => "aarch64".to_string(),
        m => format!("e_machine {m}"),
    };
    let sections = file.elf_section_table();
    let mut out = ElfNeeds { member: member.to_string(), machine, ..Default::default() };
    if let Some((dyns, strtab)) =
        sections.dynamic(endian, data).map_err(|e| anyhow::anyhow!("malformed dynamic section: {e}"))?
    {
        let strings =
            sections.strings(endian, data, strtab).map_err(|e| anyhow::anyhow!("malformed string table: {e}"))?;
        for d in dyns.iter().filter(|d| d.tag32(endian) == Some(elf::DT_NEEDED)) {
            let s = d.string(endian, strings).map_err(|e| anyhow::anyhow!("malformed DT_NEEDED: {e}"))?;
            out.needed.push(String::from_utf8_lossy(s).into_owned());
        }
    }
    let index = version_needs(sections, endian, data, &mut out)?;
    symbols(sections, endian, data, &index, &mut out)?;
    Ok(out)
}

type Sections<'a> = object::read::elf::SectionTable<'a, elf::FileHeader64<Endianness>>;

/// `.gnu.version_r` into `out.versions` (auditwheel skips the loader's own
/// versions: `ld-linux*`, `ld64.so.*`); returns version index -> (library, version).
fn version_needs(
    sections: &Sections,
    endian: Endianness,
    data: &[u8],
    out: &mut ElfNeeds,
) -> anyhow::Result<BTreeMap<u16, (String, String)>> {
    let mut index = BTreeMap::new();
    let Some((mut needs, link)) =
        sections.gnu_verneed(endian, data).map_err(|e| anyhow::anyhow!("malformed verneed: {e}"))?
    else {
        return Ok(index);
    };
    let strings =
        sections.strings(endian, data, link).map_err(|e| anyhow::anyhow!("malformed verneed strings: {e}"))?;
    let mut count = 0;
    while let Some((need, mut auxs)) = needs.next().map_err(|e| anyhow::anyhow!("malformed verneed: {e}"))? {
        let file = need.file(endian, strings).map_err(|e| anyhow::anyhow!("malformed verneed: {e}"))?;
        let file = String::from_utf8_lossy(file).into_owned();
        while let Some(aux) = auxs.next().map_err(|e| anyhow::anyhow!("malformed vernaux: {e}"))? {
            count += 1;
            if count > MAX_VERSIONS {
                anyhow::bail!("more than {MAX_VERSIONS} symbol version requirements");
            }
            let name = String::from_utf8_lossy(
                aux.name(endian, strings).map_err(|e| anyhow::anyhow!("malformed vernaux name: {e}"))?,
            )
            .into_owned();
            index.insert(aux.vna_other.get(endian) & 0x7fff, (file.clone(), name.clone()));
            if !(file.starts_with("ld-linux") || file == "ld64.so.1" || file == "ld64.so.2") {
                out.versions.entry((file.clone(), name)).or_default();
            }
        }
    }
    Ok(index)
}

/// Undefined dynamic symbols, each counted under its version (`.gnu.version`).
fn symbols(
    sections: &Sections,
    endian: Endianness,
    data: &[u8],
    index: &BTreeMap<u16, (String, String)>,
    out: &mut ElfNeeds,
) -> anyhow::Result<()> {
    let table =
        sections.symbols(endian, data, elf::SHT_DYNSYM).map_err(|e| anyhow::anyhow!("malformed .dynsym: {e}"))?;
    let versym = sections.gnu_versym(endian, data).map_err(|e| anyhow::anyhow!("malformed .gnu.version: {e}"))?;
    for (i, sym) in table.symbols().iter().enumerate() {
        if !sym.is_undefined(endian) {
            continue;
        }
        let Ok(name) = sym.name(endian, table.strings()) else { continue };
        if name.is_empty() {
            continue;
        }
        let name = String::from_utf8_lossy(name).into_owned();
        let v = versym.as_ref().and_then(|(vs, _)| vs.get(i)).map(|v| v.0.get(endian) & 0x7fff);
        if let Some(key) = v.and_then(|v| index.get(&v)) {
            if let Some((kept, n)) = out.versions.get_mut(key) {
                *n += 1;
                if kept.len() < MAX_SYMBOLS_PER_VERSION {
                    kept.push(name.clone());
                }
            }
        }
        out.undefined.push(name);
    }
    Ok(())
}
