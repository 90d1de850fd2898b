//! Where two wheels differ (diffoscope's idea, for wheels of compiled
//! extensions): members only in one, members whose bytes differ, members whose
//! zip metadata differs (time, mode, compression, order); for ELF members the
//! sections whose bytes differ and the symbols only one side has; for text
//! members the first differing line. Owns the comparison; must not print.
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

use anyhow::Result;
use object::{Object, ObjectSection, ObjectSymbol};
use serde::Serialize;

use forge_os::error::Failure;

/// At most this many names per list in a report (symbols, sections).
const LIST_MAX: usize = 20;
/// Members larger than this are compared byte by byte, streamed, without ELF
/// or line detail (two of them are held in memory at once).
pub const DETAIL_MAX: u64 = 128 << 20;

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
    /// Every field of the two provenance documents that differs (what was built
    /// differently: knobs first, then the variant, the toolchain, the rest); empty
    /// when either wheel carries none.
    pub plan: Vec<FieldDiff>,
}

/// One provenance field (a dotted path, `env.TORCH_CUDA_ARCH_LIST`) and both values
/// (JSON text; `absent` where one side lacks it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldDiff {
    pub field: String,
    pub a: String,
    pub b: String,
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

/// Compare two wheel files. Unreadable files, non-zip files and damaged
/// members are usage failures (exit 2) naming the file. Work is bounded: each
/// wheel's layout is checked first (`wheel::read`), each common member is
/// streamed once to compare (no copy in memory), and only members of at most
/// [`DETAIL_MAX`] bytes are read whole for ELF or line detail.
pub fn diff(a: &Path, b: &Path) -> Result<WheelDiff> {
    let (mut wa, mut wb) = (super::open(a)?, super::open(b)?);
    let side = |w: &super::Wheel| -> Result<Side> {
        let (sha256, size) = w.sha256()?;
        Ok(Side { path: w.path().display().to_string(), sha256, size })
    };
    let (sa, sb) = (side(&wa)?, side(&wb)?);
    let (ma, mb) = (members(&mut wa)?, members(&mut wb)?);
    let names_a: Vec<&String> = order(&ma);
    let names_b: Vec<&String> = order(&mb);
    let only_in_a: Vec<String> = names_a.iter().filter(|n| !mb.contains_key(**n)).map(|n| n.to_string()).collect();
    let only_in_b: Vec<String> = names_b.iter().filter(|n| !ma.contains_key(**n)).map(|n| n.to_string()).collect();
    let common_a: Vec<&&String> = names_a.iter().filter(|n| mb.contains_key(**n)).collect();
    let common_b: Vec<&&String> = names_b.iter().filter(|n| ma.contains_key(**n)).collect();
    let order_differs = common_a != common_b;
    let mut out = Vec::new();
    for name in &common_a {
        forge_os::error::check_interrupted()?;
        let (x, y) = (&ma[**name], &mb[**name]);
        if let Some(m) = member_diff(name, (&mut wa, x), (&mut wb, y))? {
            out.push(m);
        }
    }
    let plan = match (wa.provenance_bytes(), wb.provenance_bytes()) {
        (Ok(x), Ok(y)) => plan_diff(&x, &y),
        _ => Vec::new(),
    };
    Ok(WheelDiff {
        plan,
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

/// Every leaf of two provenance documents that differs, knobs (`env.*`) first, then
/// `variant.*`, `toolchain.*`, the rest, the cache key last (it differs whenever anything does).
pub fn plan_diff(a: &[u8], b: &[u8]) -> Vec<FieldDiff> {
    let parse = |x: &[u8]| serde_json::from_slice::<serde_json::Value>(x).unwrap_or(serde_json::Value::Null);
    let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
    flatten(&parse(a), String::new(), &mut fa);
    flatten(&parse(b), String::new(), &mut fb);
    let keys: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    let absent = "absent".to_string();
    let mut out: Vec<FieldDiff> = keys
        .into_iter()
        .filter(|k| fa.get(*k) != fb.get(*k))
        .map(|k| FieldDiff {
            field: k.clone(),
            a: fa.get(k).unwrap_or(&absent).clone(),
            b: fb.get(k).unwrap_or(&absent).clone(),
        })
        .collect();
    let rank = |f: &str| match f.split('.').next().unwrap_or("") {
        "env" => 0,
        "variant" => 1,
        "toolchain" => 2,
        "cache_key" => 4,
        _ => 3,
    };
    out.sort_by(|x, y| rank(&x.field).cmp(&rank(&y.field)).then(x.field.cmp(&y.field)));
    out
}

/// `value` as dotted path -> JSON text of each leaf (arrays by index), each text at most 200 characters.
fn flatten(value: &serde_json::Value, path: String, out: &mut BTreeMap<String, String>) {
    // A key with a control character is shown JSON-quoted (values are JSON text already).
    let join = |k: &str| {
        let k = if k.chars().any(char::is_control) { serde_json::Value::from(k).to_string() } else { k.to_string() };
        if path.is_empty() {
            k
        } else {
            format!("{path}.{k}")
        }
    };
    match value {
        serde_json::Value::Object(m) => m.iter().for_each(|(k, v)| flatten(v, join(k), out)),
        serde_json::Value::Array(v) => v.iter().enumerate().for_each(|(i, x)| flatten(x, join(&i.to_string()), out)),
        leaf => {
            let text = leaf.to_string();
            let text = match text.char_indices().nth(200) {
                Some((i, _)) => format!("{}...", &text[..i]),
                None => text,
            };
            out.insert(path, text);
        }
    }
}

/// Zip metadata that differs between two members of the same name.
fn metadata_diff(x: &Member, y: &Member) -> Vec<String> {
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
    metadata
}

/// How one common member differs (`None`: not at all).
fn member_diff(
    name: &str,
    (wa, x): (&mut super::Wheel, &Member),
    (wb, y): (&mut super::Wheel, &Member),
) -> Result<Option<MemberDiff>> {
    let metadata = metadata_diff(x, y);
    let (bytes_differ, first_offset) = compare(name, (wa, x.index), (wb, y.index))?;
    let content = bytes_differ > 0 || first_offset.is_some();
    if !content && metadata.is_empty() {
        return Ok(None);
    }
    let (mut elf, mut line) = (None, None);
    if content && x.size.max(y.size) <= DETAIL_MAX {
        let (da, db) = (read(wa, x.index)?, read(wb, y.index)?);
        elf = elf_diff(&da, &db);
        line = if elf.is_none() { first_line(&da, &db) } else { None };
    }
    Ok(Some(MemberDiff {
        name: name.to_string(),
        content,
        size_a: x.size,
        size_b: y.size,
        bytes_differ,
        first_offset,
        metadata,
        elf,
        line,
    }))
}

/// A damaged member is bad input naming the wheel and the member.
fn damaged(path: &Path, name: &str, e: impl std::fmt::Display) -> anyhow::Error {
    Failure::usage(format!("{}: member {name} is damaged: {e}", path.display()))
        .hint("a truncated or altered wheel; fetch or build it again")
        .into()
}

/// Stream two members side by side (64 KiB at a time, nothing kept): the
/// byte positions (up to the shorter length) that differ, and the first
/// offset where they differ or where the shorter ends (`None`: identical).
fn compare(
    name: &str,
    (wa, ia): (&mut super::Wheel, usize),
    (wb, ib): (&mut super::Wheel, usize),
) -> Result<(u64, Option<u64>)> {
    let pa = wa.path().to_path_buf();
    let pb = wb.path().to_path_buf();
    let mut fa = wa.archive().by_index(ia).map_err(|e| damaged(&pa, name, e))?;
    let mut fb = wb.archive().by_index(ib).map_err(|e| damaged(&pb, name, e))?;
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    let (mut na, mut nb) = (0usize, 0usize); // bytes buffered, not yet compared
    let (mut at, mut differ, mut first) = (0u64, 0u64, None);
    let (mut end_a, mut end_b) = (false, false);
    let bad = |p: &Path, e: std::io::Error| damaged(p, name, e);
    loop {
        if na == 0 && !end_a {
            na = fa.read(&mut ba).map_err(|e| bad(&pa, e))?;
            end_a = na == 0;
        }
        if nb == 0 && !end_b {
            nb = fb.read(&mut bb).map_err(|e| bad(&pb, e))?;
            end_b = nb == 0;
        }
        let k = na.min(nb);
        if k == 0 {
            if !(end_a && end_b) && first.is_none() {
                first = Some(at); // one side ended first
            }
            // Drain the longer side so its CRC is checked too.
            while !end_a {
                end_a = fa.read(&mut ba).map_err(|e| bad(&pa, e))? == 0;
            }
            while !end_b {
                end_b = fb.read(&mut bb).map_err(|e| bad(&pb, e))? == 0;
            }
            return Ok((differ, first));
        }
        for i in 0..k {
            if ba[i] != bb[i] {
                differ += 1;
                first.get_or_insert(at + i as u64);
            }
        }
        ba.copy_within(k..na, 0);
        bb.copy_within(k..nb, 0);
        (na, nb, at) = (na - k, nb - k, at + k as u64);
    }
}

fn members(w: &mut super::Wheel) -> Result<BTreeMap<String, Member>> {
    let mut m = BTreeMap::new();
    let path = w.path().to_path_buf();
    for i in 0..w.archive().len() {
        let f = w.archive().by_index_raw(i).map_err(|e| damaged(&path, &format!("#{i}"), e))?;
        if zip::read::ZipFile::is_dir(&f) {
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

/// A member read whole (at most [`DETAIL_MAX`] bytes; the caller checked its size).
fn read(w: &mut super::Wheel, i: usize) -> Result<Vec<u8>> {
    let path = w.path().to_path_buf();
    let f = w.archive().by_index(i).map_err(|e| damaged(&path, &format!("#{i}"), e))?;
    let name = f.name().to_string();
    let mut buf = Vec::with_capacity(f.size().min(DETAIL_MAX) as usize);
    f.take(DETAIL_MAX + 1).read_to_end(&mut buf).map_err(|e| damaged(&path, &name, e))?;
    Ok(buf)
}

/// Section and symbol differences when both sides are ELF files.
pub fn elf_diff(a: &[u8], b: &[u8]) -> Option<ElfDiff> {
    let (fa, fb) = (object::File::parse(a).ok()?, object::File::parse(b).ok()?);
    if fa.format() != object::BinaryFormat::Elf || fb.format() != object::BinaryFormat::Elf {
        return None;
    }
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

/// Section name -> (size, bytes in the file), borrowed from the member
/// (never copied: a section may be most of a large member).
fn sections<'a>(f: &object::File<'a>) -> BTreeMap<String, (u64, &'a [u8])> {
    f.sections()
        .filter_map(|s| {
            let name = s.name().ok()?.to_string();
            Some((name, (s.size(), s.data().unwrap_or_default())))
        })
        .collect()
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
    if !d.plan.is_empty() {
        w(&mut s, format!("built differently: {} provenance fields differ (A vs B)", d.plan.len()));
        for f in &d.plan {
            w(&mut s, format!("  plan       {}: {} vs {}", f.field, f.a, f.b));
        }
    }
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
    use super::plan_diff;
    #[test]
    fn every_differing_provenance_field_is_named_knobs_first() {
        let a = br#"{"cache_key":"k1","variant":{"name":"demo","cuda_arch_list":"9.0 10.0"},"env":{"TORCH_CUDA_ARCH_LIST":"9.0 10.0","HYBRID_EP_MULTINODE":"1","SAME":"x"}}"#;
        let b = br#"{"cache_key":"k2","variant":{"name":"demo-h100","cuda_arch_list":"9.0"},"env":{"TORCH_CUDA_ARCH_LIST":"9.0","SAME":"x"}}"#;
        let d = plan_diff(a, b);
        let fields: Vec<&str> = d.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "env.HYBRID_EP_MULTINODE",
                "env.TORCH_CUDA_ARCH_LIST",
                "variant.cuda_arch_list",
                "variant.name",
                "cache_key"
            ]
        );
        assert_eq!((d[0].a.as_str(), d[0].b.as_str()), (r#""1""#, "absent"));
        assert_eq!((d[1].a.as_str(), d[1].b.as_str()), (r#""9.0 10.0""#, r#""9.0""#));
    }

    #[test]
    fn first_differing_line() {
        let l = super::first_line(b"a\nb\nc\n", b"a\nB\nc\n").unwrap();
        assert_eq!(l, (2, "b".into(), "B".into()));
        assert_eq!(super::first_line(b"a\n", b"a\nb\n").unwrap().1, "<end of file>");
        assert!(super::first_line(&[0xff], b"x").is_none());
    }
}
