//! Where two wheels differ (diffoscope's idea, for wheels of compiled
//! extensions): members only in one, members whose bytes differ, members whose
//! zip metadata differs (time, mode, compression, order); for ELF members the
//! sections whose bytes differ and the symbols only one side has; for text
//! members the first differing line. Owns the comparison; must not print.
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{Context, Result};
use object::{Object, ObjectSection, ObjectSymbol};
use serde::Serialize;

use crate::error::Failure;

/// At most this many names per list in a report (symbols, sections).
const LIST_MAX: usize = 20;
/// Members larger than this are compared by hash only (no ELF or line detail).
const DETAIL_MAX: u64 = 1 << 30;

#[derive(Debug, Clone, Serialize)]
pub struct WheelDiff {
    pub a: Side,
    pub b: Side,
    /// The two files are byte for byte the same.
    pub identical: bool,
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// The members both have, in a different order.
    pub order_differs: bool,
    pub members: Vec<MemberDiff>,
    /// Members both sides have (for "N of M differ").
    pub common: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub path: String,
    pub sha256: String,
    pub size: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemberDiff {
    pub name: String,
    /// Content differs (else only zip metadata does).
    pub content: bool,
    pub size_a: u64,
    pub size_b: u64,
    /// Byte positions (up to the shorter length) that differ.
    pub bytes_differ: u64,
    pub first_offset: Option<u64>,
    /// Zip metadata that differs: `time`, `mode`, `compression`, `compressed bytes`.
    pub metadata: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elf: Option<ElfDiff>,
    /// For text members: the first differing line (1-based) and both versions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<(usize, String, String)>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ElfDiff {
    /// Sections whose bytes differ: (name, size in A, size in B).
    pub sections: Vec<(String, u64, u64)>,
    pub sections_only_in_a: Vec<String>,
    pub sections_only_in_b: Vec<String>,
    /// Symbol names (.symtab and .dynsym) only one side has.
    pub symbols_only_in_a: Vec<String>,
    pub symbols_only_in_b: Vec<String>,
    /// How many symbol names each list had before truncation.
    pub symbols_only_counts: (usize, usize),
    /// Symbols both have whose address or size differs (count, examples).
    pub symbols_moved: usize,
    pub symbols_moved_examples: Vec<String>,
}

struct Member {
    index: usize,
    time: Option<(u16, u8, u8, u8, u8, u8)>,
    mode: Option<u32>,
    compression: String,
    compressed: u64,
    size: u64,
    crc: u32,
}

/// Compare two wheel files. Unreadable files and non-zip files are usage failures (exit 2).
pub fn diff(a: &Path, b: &Path) -> Result<WheelDiff> {
    let side = |p: &Path| -> Result<Side> {
        // A regular file under the wheel cap (never /dev/zero or a FIFO) before hashing it.
        crate::input::open(p, "wheel", crate::input::cap::WHEEL)?;
        let (sha256, size) =
            super::stamp::sha256_file(p).map_err(|e| Failure::usage(format!("cannot read {}: {e:#}", p.display())))?;
        Ok(Side { path: p.display().to_string(), sha256, size })
    };
    let (sa, sb) = (side(a)?, side(b)?);
    let open = |p: &Path| -> Result<zip::ZipArchive<BufReader<File>>> {
        zip::ZipArchive::new(BufReader::new(File::open(p)?)).map_err(|e| {
            Failure::usage(format!("{} is not a wheel (zip): {e}", p.display()))
                .hint("pass two .whl files, e.g. the same variant built on two machines")
                .into()
        })
    };
    let (mut za, mut zb) = (open(a)?, open(b)?);
    // Overlapping members, bombs and absurd member counts are refused before any member is read.
    crate::probe::wheel::check_layout(&mut za, a)?;
    crate::probe::wheel::check_layout(&mut zb, b)?;
    let (ma, mb) = (members(&mut za)?, members(&mut zb)?);
    let names_a: Vec<&String> = order(&ma);
    let names_b: Vec<&String> = order(&mb);
    let only_in_a: Vec<String> = names_a.iter().filter(|n| !mb.contains_key(**n)).map(|n| n.to_string()).collect();
    let only_in_b: Vec<String> = names_b.iter().filter(|n| !ma.contains_key(**n)).map(|n| n.to_string()).collect();
    let common_a: Vec<&&String> = names_a.iter().filter(|n| mb.contains_key(**n)).collect();
    let common_b: Vec<&&String> = names_b.iter().filter(|n| ma.contains_key(**n)).collect();
    let order_differs = common_a != common_b;
    let mut out = Vec::new();
    for name in &common_a {
        crate::error::check_interrupted()?;
        let (x, y) = (&ma[**name], &mb[**name]);
        let mut metadata = Vec::new();
        if x.time != y.time {
            metadata.push("time".to_string());
        }
        if x.mode != y.mode {
            metadata.push(format!(
                "mode ({} vs {})",
                x.mode.map(|m| format!("{m:o}")).unwrap_or("-".into()),
                y.mode.map(|m| format!("{m:o}")).unwrap_or("-".into())
            ));
        }
        if x.compression != y.compression {
            metadata.push(format!("compression ({} vs {})", x.compression, y.compression));
        } else if x.compressed != y.compressed && x.crc == y.crc && x.size == y.size {
            metadata.push("compressed bytes".to_string());
        }
        let same_content = x.crc == y.crc && x.size == y.size && {
            // CRC32 equal: confirm byte for byte (cheap next to a build).
            read(&mut za, x.index)? == read(&mut zb, y.index)?
        };
        if same_content {
            if !metadata.is_empty() {
                out.push(MemberDiff {
                    name: name.to_string(),
                    content: false,
                    size_a: x.size,
                    size_b: y.size,
                    bytes_differ: 0,
                    first_offset: None,
                    metadata,
                    elf: None,
                    line: None,
                });
            }
            continue;
        }
        let (da, db) = if x.size.max(y.size) <= DETAIL_MAX {
            (read(&mut za, x.index)?, read(&mut zb, y.index)?)
        } else {
            (Vec::new(), Vec::new())
        };
        let bytes_differ = da.iter().zip(&db).filter(|(p, q)| p != q).count() as u64;
        let first_offset = da
            .iter()
            .zip(&db)
            .position(|(p, q)| p != q)
            .map(|i| i as u64)
            .or_else(|| (da.len() != db.len()).then_some(da.len().min(db.len()) as u64));
        let elf = elf_diff(&da, &db);
        let line = if elf.is_none() { first_line(&da, &db) } else { None };
        out.push(MemberDiff {
            name: name.to_string(),
            content: true,
            size_a: x.size,
            size_b: y.size,
            bytes_differ,
            first_offset,
            metadata,
            elf,
            line,
        });
    }
    Ok(WheelDiff {
        identical: sa.sha256 == sb.sha256,
        a: sa,
        b: sb,
        only_in_a,
        only_in_b,
        order_differs,
        common: common_a.len(),
        members: out,
    })
}

fn members<R: Read + std::io::Seek>(z: &mut zip::ZipArchive<R>) -> Result<BTreeMap<String, Member>> {
    let mut m = BTreeMap::new();
    for i in 0..z.len() {
        let f = z.by_index_raw(i)?;
        if f.is_dir() {
            continue;
        }
        let t = f.last_modified().map(|t| (t.year(), t.month(), t.day(), t.hour(), t.minute(), t.second()));
        m.insert(
            f.name().to_string(),
            Member {
                index: i,
                time: t,
                mode: f.unix_mode(),
                compression: format!("{:?}", f.compression()),
                compressed: f.compressed_size(),
                size: f.size(),
                crc: f.crc32(),
            },
        );
    }
    Ok(m)
}

/// Member names in archive order.
fn order(m: &BTreeMap<String, Member>) -> Vec<&String> {
    let mut v: Vec<(&String, usize)> = m.iter().map(|(n, x)| (n, x.index)).collect();
    v.sort_by_key(|(_, i)| *i);
    v.into_iter().map(|(n, _)| n).collect()
}

fn read<R: Read + std::io::Seek>(z: &mut zip::ZipArchive<R>, i: usize) -> Result<Vec<u8>> {
    let f = z.by_index(i)?;
    let name = f.name().to_string();
    let mut buf = Vec::new();
    f.take(DETAIL_MAX + 1).read_to_end(&mut buf).with_context(|| format!("reading member {name}"))?;
    Ok(buf)
}

/// Section and symbol differences when both sides are ELF files.
pub fn elf_diff(a: &[u8], b: &[u8]) -> Option<ElfDiff> {
    let (fa, fb) = (object::File::parse(a).ok()?, object::File::parse(b).ok()?);
    if fa.format() != object::BinaryFormat::Elf || fb.format() != object::BinaryFormat::Elf {
        return None;
    }
    let sections = |f: &object::File| -> BTreeMap<String, (u64, Vec<u8>)> {
        f.sections()
            .filter_map(|s| {
                let name = s.name().ok()?.to_string();
                let data = s.data().map(<[u8]>::to_vec).unwrap_or_default();
                Some((name, (s.size(), data)))
            })
            .collect()
    };
    let (sa, sb) = (sections(&fa), sections(&fb));
    let mut d = ElfDiff::default();
    for (name, (size, data)) in &sa {
        match sb.get(name) {
            None => d.sections_only_in_a.push(name.clone()),
            Some((size_b, data_b)) if size != size_b || data != data_b => {
                d.sections.push((name.clone(), *size, *size_b))
            }
            _ => {}
        }
    }
    d.sections_only_in_b = sb.keys().filter(|n| !sa.contains_key(*n)).cloned().collect();
    let symbols = |f: &object::File| -> BTreeMap<String, (u64, u64)> {
        f.symbols()
            .chain(f.dynamic_symbols())
            .filter_map(|s| {
                let n = s.name().ok()?;
                (!n.is_empty()).then(|| (n.to_string(), (s.address(), s.size())))
            })
            .collect()
    };
    let (ya, yb) = (symbols(&fa), symbols(&fb));
    let only_a: Vec<String> = ya.keys().filter(|n| !yb.contains_key(*n)).cloned().collect();
    let only_b: Vec<String> = yb.keys().filter(|n| !ya.contains_key(*n)).cloned().collect();
    d.symbols_only_counts = (only_a.len(), only_b.len());
    d.symbols_only_in_a = only_a.into_iter().take(LIST_MAX).collect();
    d.symbols_only_in_b = only_b.into_iter().take(LIST_MAX).collect();
    let moved: Vec<&String> = ya.iter().filter(|(n, v)| yb.get(*n).is_some_and(|w| w != *v)).map(|(n, _)| n).collect();
    d.symbols_moved = moved.len();
    d.symbols_moved_examples = moved.into_iter().take(5).cloned().collect();
    d.sections.truncate(LIST_MAX * 3);
    Some(d)
}

/// The first differing line of two UTF-8 texts (lines cut at 200 characters).
fn first_line(a: &[u8], b: &[u8]) -> Option<(usize, String, String)> {
    let (ta, tb) = (std::str::from_utf8(a).ok()?, std::str::from_utf8(b).ok()?);
    let cut = |s: &str| s.chars().take(200).collect::<String>();
    let (la, lb): (Vec<&str>, Vec<&str>) = (ta.lines().collect(), tb.lines().collect());
    (0..la.len().max(lb.len())).find(|i| la.get(*i) != lb.get(*i)).map(|i| {
        (i + 1, cut(la.get(i).copied().unwrap_or("<end of file>")), cut(lb.get(i).copied().unwrap_or("<end of file>")))
    })
}

/// The human rendering (the command edge prints it).
pub fn render(d: &WheelDiff) -> String {
    let mut s = String::new();
    let w = |s: &mut String, l: String| {
        s.push_str(&l);
        s.push('\n');
    };
    w(&mut s, format!("A  {}  sha256 {}  {} bytes", d.a.path, d.a.sha256, d.a.size));
    w(&mut s, format!("B  {}  sha256 {}  {} bytes", d.b.path, d.b.sha256, d.b.size));
    if d.identical {
        w(&mut s, "identical: the two files are byte for byte the same".into());
        return s;
    }
    let content = d.members.iter().filter(|m| m.content).count();
    w(
        &mut s,
        format!(
            "different: {content} of {} common members differ in content, {} only in zip metadata; {} only in A, {} only in B{}",
            d.common,
            d.members.len() - content,
            d.only_in_a.len(),
            d.only_in_b.len(),
            if d.order_differs { "; member order differs" } else { "" }
        ),
    );
    for n in &d.only_in_a {
        w(&mut s, format!("  only in A  {n}"));
    }
    for n in &d.only_in_b {
        w(&mut s, format!("  only in B  {n}"));
    }
    for m in &d.members {
        if !m.content {
            w(&mut s, format!("  metadata   {}: {}", m.name, m.metadata.join(", ")));
            continue;
        }
        let sizes = if m.size_a == m.size_b {
            format!("{} bytes", m.size_a)
        } else {
            format!("{} vs {} bytes", m.size_a, m.size_b)
        };
        let first = m.first_offset.map(|o| format!(", first at offset {o:#x}")).unwrap_or_default();
        w(&mut s, format!("  content    {} ({sizes}): {} bytes differ{first}", m.name, m.bytes_differ));
        if !m.metadata.is_empty() {
            w(&mut s, format!("             zip metadata: {}", m.metadata.join(", ")));
        }
        if let Some((n, x, y)) = &m.line {
            w(&mut s, format!("             line {n}: A {x}"));
            w(&mut s, format!("             line {n}: B {y}"));
        }
        if let Some(e) = &m.elf {
            if !e.sections.is_empty() {
                let list: Vec<String> = e
                    .sections
                    .iter()
                    .map(|(n, x, y)| if x == y { n.clone() } else { format!("{n} ({x:#x} vs {y:#x})") })
                    .collect();
                w(&mut s, format!("             ELF sections differ: {}", list.join(", ")));
            }
            for (label, v) in [("only in A", &e.sections_only_in_a), ("only in B", &e.sections_only_in_b)] {
                if !v.is_empty() {
                    w(&mut s, format!("             ELF sections {label}: {}", v.join(", ")));
                }
            }
            for (label, v, n) in [
                ("A", &e.symbols_only_in_a, e.symbols_only_counts.0),
                ("B", &e.symbols_only_in_b, e.symbols_only_counts.1),
            ] {
                if n > 0 {
                    let more = if n > v.len() { format!(" (and {} more)", n - v.len()) } else { String::new() };
                    w(&mut s, format!("             symbols only in {label}: {}{more}", v.join(", ")));
                }
            }
            if e.symbols_moved > 0 {
                w(
                    &mut s,
                    format!(
                        "             {} symbols at another address or size, e.g. {}",
                        e.symbols_moved,
                        e.symbols_moved_examples.join(", ")
                    ),
                );
            }
        }
    }
    s
}

/// Names of ELF sections that differ, for tests and summaries.
pub fn differing_sections(d: &WheelDiff) -> BTreeSet<String> {
    d.members.iter().filter_map(|m| m.elf.as_ref()).flat_map(|e| e.sections.iter().map(|s| s.0.clone())).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_differing_line() {
        let l = super::first_line(b"a\nb\nc\n", b"a\nB\nc\n").unwrap();
        assert_eq!(l, (2, "b".into(), "B".into()));
        assert_eq!(super::first_line(b"a\n", b"a\nb\n").unwrap().1, "<end of file>");
        assert!(super::first_line(&[0xff], b"x").is_none());
    }
}
