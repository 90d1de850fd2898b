//! Reader of the CUDA fatbin container (`.nv_fatbin`, `__nv_relfatbin`):
//! lists cubin SM archs and PTX versions without decompressing anything.
//!
//! Layout, checked against `cuobjdump` on nvcc 13.0 output (tests/it/probe.rs, fatbin_reader_agrees_with_cuobjdump):
//! a section holds containers back to back (8-byte aligned, zero padding);
//! container header (16 bytes): u32 magic `0xBA55ED50`, u16 version, u16 header
//! size, u64 payload size. The payload is a run of entries, each a header then
//! its data: u16 kind (1 PTX, 2 ELF cubin) at 0, u32 header size at 4, u64 data
//! size at 8, u32 compressed size at 16, u16 minor + u16 major (the PTX ISA
//! version for PTX entries) at 24, u32 SM number at 28, u64 flags at 40
//! (0x2000 LZ4, 0x8000 Zstd, 0x10_0000 arch-specific `a`, 0x20_0000
//! family-specific `f`), u64 uncompressed size at 56.
use serde::Serialize;

pub const MAGIC: u32 = 0xBA55_ED50;
const CONTAINER_HEADER: usize = 16;
/// Bytes of an entry header this reader needs (up to and including the flags).
const ENTRY_MIN: usize = 48;

pub const FLAG_LZ4: u64 = 0x2000;
pub const FLAG_ZSTD: u64 = 0x8000;
pub const FLAG_ARCH_SPECIFIC: u64 = 0x10_0000;
pub const FLAG_FAMILY_SPECIFIC: u64 = 0x20_0000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Ptx,
    Cubin,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Lz4,
    Zstd,
}

/// One entry of a fatbin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub kind: Kind,
    /// SM number (90, 100, 120).
    pub sm: u32,
    /// `a` (arch-specific) or `f` (family-specific).
    pub suffix: Option<char>,
    /// Entry format version; for PTX the PTX ISA version (9.0 for CUDA 13.0).
    pub version: (u16, u16),
    pub compression: Option<Compression>,
    /// Bytes stored in the container (compressed size when compressed).
    pub size: u64,
}

impl Entry {
    /// `sm_90`, `sm_100a`, `sm_100f`.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.sm, self.suffix.map(String::from).unwrap_or_default())
    }
}

/// Everything read from one section: the entries and what was wrong with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Fatbin {
    pub containers: usize,
    pub entries: Vec<Entry>,
    /// Malformed input (wrong magic, truncation, sizes past the end); reading
    /// stops at the first one, keeping the entries read before it.
    pub problems: Vec<String>,
}

impl Fatbin {
    pub fn cubins(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.kind == Kind::Cubin)
    }
    pub fn ptx(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.kind == Kind::Ptx)
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Read a whole fatbin section. Never panics; malformed input becomes `problems`.
pub fn parse(section: &[u8]) -> Fatbin {
    let mut out = Fatbin::default();
    let mut pos = 0usize;
    while pos < section.len() {
        // Containers are 8-byte aligned; the linker pads with zeros.
        if section[pos] == 0 && u32_at(section, pos) != Some(MAGIC) {
            pos += 1;
            continue;
        }
        match container(section, pos, &mut out.entries) {
            Ok(next) => {
                out.containers += 1;
                pos = next;
            }
            Err(e) => {
                out.problems.push(e);
                break;
            }
        }
    }
    if out.containers == 0 && out.problems.is_empty() {
        out.problems.push("no fatbin container in the section (all zero bytes)".into());
    }
    out
}

/// Parse the container at `start`; returns the offset just past it.
fn container(b: &[u8], start: usize, entries: &mut Vec<Entry>) -> Result<usize, String> {
    let magic = u32_at(b, start).ok_or_else(|| format!("truncated container header at offset {start:#x}"))?;
    if magic != MAGIC {
        return Err(format!("wrong magic {magic:#010x} at offset {start:#x} (expected {MAGIC:#010x})"));
    }
    let (Some(header), Some(payload)) = (u16_at(b, start + 6), u64_at(b, start + 8)) else {
        return Err(format!("truncated container header at offset {start:#x}"));
    };
    let header = header as usize;
    if header < CONTAINER_HEADER {
        return Err(format!("container at {start:#x}: header size {header} is below {CONTAINER_HEADER}"));
    }
    let body = start.checked_add(header).filter(|&s| s <= b.len());
    let end = body.and_then(|s| usize::try_from(payload).ok().and_then(|p| s.checked_add(p))).filter(|&e| e <= b.len());
    let (Some(mut at), Some(end)) = (body, end) else {
        return Err(format!(
            "container at {start:#x} claims {payload} payload bytes but the section ends at {:#x} (truncated)",
            b.len()
        ));
    };
    while at < end {
        let (entry, next) = entry(&b[..end], at)?;
        entries.push(entry);
        at = next;
    }
    Ok(end)
}

fn entry(b: &[u8], at: usize) -> Result<(Entry, usize), String> {
    let h = b.get(at..).unwrap_or_default();
    if h.len() < ENTRY_MIN {
        return Err(format!("truncated entry header at offset {at:#x} ({} bytes left, need {ENTRY_MIN})", h.len()));
    }
    // The length check above makes every read below succeed.
    let r16 = |o| u16_at(h, o).unwrap_or(0);
    let r32 = |o| u32_at(h, o).unwrap_or(0);
    let r64 = |o| u64_at(h, o).unwrap_or(0);
    let (kind_raw, header, size) = (r16(0), u64::from(r32(4)), r64(8));
    let (version, sm, flags) = ((r16(26), r16(24)), r32(28), r64(40));
    let kind = match kind_raw {
        1 => Kind::Ptx,
        2 => Kind::Cubin,
        k => return Err(format!("entry at {at:#x}: unknown kind {k} (expected 1 PTX or 2 ELF)")),
    };
    if (header as usize) < ENTRY_MIN {
        return Err(format!("entry at {at:#x}: header size {header} is below {ENTRY_MIN}"));
    }
    let next =
        (at as u64).checked_add(header).and_then(|v| v.checked_add(size)).filter(|&n| n <= h.len() as u64 + at as u64);
    let Some(next) = next else {
        return Err(format!(
            "entry at {at:#x} ({kind_raw}, sm {sm}) claims {size} bytes past the end of its container (truncated)"
        ));
    };
    let compression = if flags & FLAG_ZSTD != 0 {
        Some(Compression::Zstd)
    } else if flags & FLAG_LZ4 != 0 {
        Some(Compression::Lz4)
    } else {
        None
    };
    let suffix = if flags & FLAG_ARCH_SPECIFIC != 0 {
        Some('a')
    } else if flags & FLAG_FAMILY_SPECIFIC != 0 {
        Some('f')
    } else {
        None
    };
    Ok((Entry { kind, sm, suffix, version, compression, size }, next as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_bytes(kind: u16, sm: u32, flags: u64, data: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&0x101u16.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        h[8..16].copy_from_slice(&(data.len() as u64).to_le_bytes());
        h[24..26].copy_from_slice(&0u16.to_le_bytes());
        h[26..28].copy_from_slice(&9u16.to_le_bytes());
        h[28..32].copy_from_slice(&sm.to_le_bytes());
        h[40..48].copy_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(data);
        h
    }

    fn container_bytes(entries: &[Vec<u8>]) -> Vec<u8> {
        let payload: Vec<u8> = entries.concat();
        let mut c = Vec::new();
        c.extend_from_slice(&MAGIC.to_le_bytes());
        c.extend_from_slice(&1u16.to_le_bytes());
        c.extend_from_slice(&16u16.to_le_bytes());
        c.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        c.extend_from_slice(&payload);
        c
    }

    #[test]
    fn reads_two_padded_containers() {
        let mut s = container_bytes(&[entry_bytes(2, 90, 0x11, &[1; 8]), entry_bytes(1, 120, 0x8011, &[2; 5])]);
        s.extend_from_slice(&[0, 0, 0]);
        s.extend(container_bytes(&[entry_bytes(2, 100, 0x10_0011 | FLAG_LZ4, &[3; 8])]));
        let f = parse(&s);
        assert_eq!(f.problems, Vec::<String>::new());
        assert_eq!(f.containers, 2);
        let names: Vec<String> = f.entries.iter().map(|e| e.arch()).collect();
        assert_eq!(names, ["sm_90", "sm_120", "sm_100a"]);
        assert_eq!(f.entries[1].kind, Kind::Ptx);
        assert_eq!(f.entries[1].version, (9, 0));
        assert_eq!(f.entries[1].compression, Some(Compression::Zstd));
        assert_eq!(f.entries[2].compression, Some(Compression::Lz4));
    }

    #[test]
    fn wrong_magic_and_truncation_are_problems_not_panics() {
        assert!(parse(b"\x01\x02\x03\x04garbage").problems[0].contains("wrong magic"));
        let good = container_bytes(&[entry_bytes(2, 90, 0, &[1; 32])]);
        for cut in 1..good.len() {
            let f = parse(&good[..cut]);
            assert!(!f.problems.is_empty(), "cut at {cut} not reported");
        }
        assert!(parse(&[0u8; 64]).problems[0].contains("no fatbin container"));
    }
}
