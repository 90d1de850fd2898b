//! Rewriting a wheel: replace some members (patched ELF files), add files to
//! its `.dist-info/` (the provenance document), and write RECORD again by the
//! spec. Unchanged members are copied byte for byte (zip raw copy, their RECORD
//! lines kept) with their time set to SOURCE_DATE_EPOCH and their mode to
//! 0644/0755; members are sorted by name, `.dist-info/` last and RECORD last of all; signatures
//! (`RECORD.jws`, `RECORD.p7s`) are dropped because the content changed.
use std::collections::BTreeMap;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use anyhow::{Context, Result};
use zip::write::SimpleFileOptions;

use super::record::{self, Entry};
use forge_os::error::check_interrupted;

/// What to change in a wheel.
#[derive(Debug, Default)]
pub struct Changes {
    /// Member path -> new content.
    pub replace: BTreeMap<String, Vec<u8>>,
    /// File name inside `.dist-info/` -> content.
    pub add_dist_info: BTreeMap<String, Vec<u8>>,
    /// Modification time of new entries (SOURCE_DATE_EPOCH), seconds since 1970.
    pub epoch: i64,
    /// A new version for the wheel (old, new): `.dist-info/` renamed, METADATA's
    /// `Version:` rewritten (a patched build's label, `patches::label`).
    pub relabel: Option<(String, String)>,
}

pub use super::read::dist_info_dir;

/// Read one member of a wheel.
pub fn read_member(wheel: &Path, member: &str) -> Result<Vec<u8>> {
    super::open(wheel)?
        .member(member, super::limits::PARSED)?
        .with_context(|| format!("{} has no {member}", wheel.display()))
}

/// Write `input` with `changes` applied to `output` (a new file; the caller
/// renames it into place). Checks for Ctrl-C between members.
pub fn stamp(input: &Path, output: &Path, changes: &Changes) -> Result<()> {
    let mut wheel = super::open(input)?;
    let zin = wheel.archive();
    let di = dist_info_dir(zin)?;
    let record_path = format!("{di}/RECORD");
    let old_record: BTreeMap<String, Entry> = {
        let mut text = String::new();
        zin.by_name(&record_path)?.take(super::limits::DOC).read_to_string(&mut text)?;
        record::parse(&text)
            .with_context(|| format!("{record_path} in {}", input.display()))?
            .into_iter()
            .map(|e| (e.path.clone(), e))
            .collect()
    };
    for member in changes.replace.keys() {
        if zin.index_for_name(member).is_none() {
            anyhow::bail!("{} has no member {member} to replace", input.display());
        }
    }
    let dropped = [record_path.clone(), format!("{di}/RECORD.jws"), format!("{di}/RECORD.p7s")];
    let new_di = match &changes.relabel {
        Some((old, new)) => relabelled(&di, old, new)?,
        None => di.clone(),
    };
    let record_path_out = format!("{new_di}/RECORD");
    // Members in output order: the package first, then .dist-info.
    let names: Vec<String> = zin.file_names().map(String::from).collect();
    // Sorted by name (the file system's listing order, which setuptools follows, varies).
    let mut order: Vec<usize> = (0..names.len()).filter(|i| !dropped.contains(&names[*i])).collect();
    order.sort_by(|a, b| {
        let key = |i: &usize| (names[*i].starts_with(&format!("{di}/")), names[*i].as_str());
        key(a).cmp(&key(b))
    });

    let out = forge_os::fs::named::create_new(output, "stamped wheel")?;
    let mut zout = zip::ZipWriter::new(BufWriter::with_capacity(1 << 20, out));
    let time = zip_time(changes.epoch);
    let mut new_record = Vec::new();
    for i in order {
        check_interrupted()?;
        let name = &names[i];
        if let Some(data) = changes.replace.get(name) {
            let mode = normal_mode(zin.by_index_raw(i)?.unix_mode());
            // A replaced `.dist-info` member (METADATA with Requires-Dist) moves with its
            // folder when the wheel is relabelled, its `Version:` line too.
            let (path, data) = match name.strip_prefix(&format!("{di}/")) {
                Some(rest) if new_di != di => {
                    (format!("{new_di}/{rest}"), relabel_text(rest, data.clone(), changes.relabel.as_ref())?)
                }
                _ => (name.clone(), data.clone()),
            };
            let opts = SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated)
                .last_modified_time(time)
                .unix_permissions(mode)
                .large_file(data.len() as u64 >= u32::MAX as u64);
            zout.start_file(path.as_str(), opts)?;
            zout.write_all(&data)?;
            new_record.push(Entry { path, hash: Some(record::hash_bytes(&data)), size: Some(data.len() as u64) });
            continue;
        }
        if new_di != di && name.starts_with(&format!("{di}/")) {
            let (path, data) = relabel_member(zin, i, &di, &new_di, changes.relabel.as_ref())?;
            let opts = SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated)
                .last_modified_time(time)
                .unix_permissions(0o644);
            zout.start_file(path.as_str(), opts)?;
            zout.write_all(&data)?;
            new_record.push(Entry { path, hash: Some(record::hash_bytes(&data)), size: Some(data.len() as u64) });
            continue;
        }
        let f = zin.by_index_raw(i)?;
        // Time and mode as every build gives them: SOURCE_DATE_EPOCH, 0644/0755 (not the umask's).
        let mode = normal_mode(f.unix_mode());
        if zip::read::ZipFile::is_dir(&f) {
            zout.raw_copy_file_touch(f, time, Some(0o755))?;
            continue;
        }
        let e = old_record.get(name).filter(|e| e.hash.is_some()).cloned();
        let e = e.with_context(|| format!("{} is not in {record_path} with a hash; the wheel is malformed", name))?;
        zout.raw_copy_file_touch(f, time, Some(mode))?;
        new_record.push(e);
    }
    for (file, data) in &changes.add_dist_info {
        let path = format!("{new_di}/{file}");
        if names.contains(&format!("{di}/{file}")) {
            anyhow::bail!("{} already has {path}: it was stamped before", input.display());
        }
        let opts = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(time)
            .unix_permissions(0o644);
        zout.start_file(path.as_str(), opts)?;
        zout.write_all(data)?;
        new_record.push(Entry { path, hash: Some(record::hash_bytes(data)), size: Some(data.len() as u64) });
    }
    new_record.push(Entry { path: record_path_out.clone(), hash: None, size: None });
    let opts = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .last_modified_time(time)
        .unix_permissions(0o644);
    zout.start_file(record_path_out.as_str(), opts)?;
    zout.write_all(record::write(&new_record).as_bytes())?;
    zout.finish()?.flush()?;
    Ok(())
}

/// `<dist>-<old>.dist-info` as `<dist>-<new>.dist-info`.
fn relabelled(di: &str, old: &str, new: &str) -> Result<String> {
    let dist = di
        .strip_suffix(&format!("-{old}.dist-info"))
        .with_context(|| format!("{di} is not the .dist-info of version {old}"))?;
    Ok(format!("{dist}-{new}.dist-info"))
}

/// A `.dist-info/` member under its new folder, METADATA's `Version:` line rewritten.
fn relabel_member<R: Read + std::io::Seek>(
    zin: &mut zip::ZipArchive<R>,
    i: usize,
    di: &str,
    new_di: &str,
    relabel: Option<&(String, String)>,
) -> Result<(String, Vec<u8>)> {
    let mut f = zin.by_index(i)?;
    let rest = f.name()[di.len()..].trim_start_matches('/').to_string();
    let mut data = Vec::new();
    (&mut f).take(super::limits::DOC).read_to_end(&mut data)?;
    Ok((format!("{new_di}/{rest}"), relabel_text(&rest, data, relabel)?))
}

/// A `.dist-info` member's bytes under the new label: METADATA's `Version:` line rewritten.
fn relabel_text(member: &str, data: Vec<u8>, relabel: Option<&(String, String)>) -> Result<Vec<u8>> {
    let Some((old, new)) = relabel.filter(|_| member == "METADATA") else { return Ok(data) };
    let text = String::from_utf8(data).context("METADATA is not UTF-8")?;
    let from = format!("\nVersion: {old}\n");
    anyhow::ensure!(text.contains(&from), "METADATA has no `Version: {old}` line");
    Ok(text.replacen(&from, &format!("\nVersion: {new}\n"), 1).into_bytes())
}

/// 0755 when any execute bit is set, else 0644: a member's mode does not depend on the umask.
fn normal_mode(mode: Option<u32>) -> u32 {
    if mode.is_some_and(|m| m & 0o111 != 0) {
        0o755
    } else {
        0o644
    }
}

fn zip_time(epoch: i64) -> zip::DateTime {
    let (y, mo, d, h, mi, s) = crate::provenance::utc_parts(epoch.max(315_532_800)); // zip starts in 1980
    zip::DateTime::from_date_and_time(y as u16, mo as u8, d as u8, h as u8, mi as u8, s as u8).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    /// A wheel of `members` with a RECORD (sha256 of each) in `<dir>/w.whl`.
    fn wheel(dir: &Path, members: &[(&str, &str)]) -> std::path::PathBuf {
        let di = "deep_ep-1.2.1+abc1234.dist-info";
        let mut entries: Vec<Entry> = members
            .iter()
            .map(|(p, d)| Entry {
                path: p.to_string(),
                hash: Some(record::hash_bytes(d.as_bytes())),
                size: Some(d.len() as u64),
            })
            .collect();
        entries.push(Entry { path: format!("{di}/RECORD"), hash: None, size: None });
        let path = dir.join("w.whl");
        let mut z = zip::ZipWriter::new(File::create(&path).unwrap());
        for (p, d) in
            members.iter().copied().chain([(format!("{di}/RECORD").as_str(), record::write(&entries).as_str())])
        {
            z.start_file(p, SimpleFileOptions::default()).unwrap();
            z.write_all(d.as_bytes()).unwrap();
        }
        z.finish().unwrap();
        path
    }

    #[test]
    fn a_relabelled_wheel_moves_its_replaced_metadata_with_the_new_version() {
        let tmp = tempfile::tempdir().unwrap();
        let di = "deep_ep-1.2.1+abc1234.dist-info";
        let meta = "Metadata-Version: 2.1\nName: deep_ep\nVersion: 1.2.1+abc1234\n";
        let input = wheel(
            tmp.path(),
            &[
                ("deep_ep/__init__.py", "x = 1\n"),
                (&format!("{di}/METADATA"), meta),
                (&format!("{di}/WHEEL"), "Wheel-Version: 1.0\n"),
            ],
        );
        let mut changes = Changes { epoch: 946_684_800, ..Default::default() };
        changes.relabel = Some(("1.2.1+abc1234".into(), "1.2.1+abc1234.p0123abcd".into()));
        let with_requires = format!("{meta}Requires-Dist: torch==2.11.0\n");
        changes.replace.insert(format!("{di}/METADATA"), with_requires.into_bytes());
        let out = tmp.path().join("out.whl");
        stamp(&input, &out, &changes).unwrap();
        let z = zip::ZipArchive::new(File::open(&out).unwrap()).unwrap();
        let names: Vec<&str> = z.file_names().collect();
        assert!(
            names.iter().all(|n| !n.starts_with(&format!("{di}/"))),
            "nothing left in the old .dist-info: {names:?}"
        );
        let new_di = "deep_ep-1.2.1+abc1234.p0123abcd.dist-info";
        let metadata = String::from_utf8(read_member(&out, &format!("{new_di}/METADATA")).unwrap()).unwrap();
        assert!(metadata.contains("\nVersion: 1.2.1+abc1234.p0123abcd\n"), "{metadata}");
        assert!(metadata.contains("Requires-Dist: torch==2.11.0"), "{metadata}");
        let record = String::from_utf8(read_member(&out, &format!("{new_di}/RECORD")).unwrap()).unwrap();
        assert!(record.contains(&format!("{new_di}/METADATA,sha256=")), "{record}");
        assert!(!record.contains(&format!("{di}/")), "{record}");
    }
}
