//! Delivery: the wheels of one run put into `--out` together, all or nothing.
//! `--out` is a [`Tree`] (a variant's wheel goes into `<out>/<variant>/` when a
//! build selects several), so no write follows a link out of it. It is checked
//! before any build ([`Destination::check`]: a file where the folder goes, a
//! FIFO or link at SHA256SUMS, a link at a variant's folder, a report that
//! cannot be written), made only at delivery, and then every input (each
//! cache entry's wheel, hashed against its entry as it is copied) and every
//! destination (each wheel and its attestation, SHA256SUMS, the build report)
//! is checked and staged before the first file is renamed into place
//! ([`forge_os::fs::Delivery`]). Another variant's wheel is never replaced.
//! Must not build or look up the cache.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::prepare::Skipped;
use forge_os::error::Failure;
use forge_os::fs::{self, Delivery, Kind, Tree, PUBLIC};
use forge_os::input::cap;
use forge_store::cache;
use forge_store::source;
use forge_wheel::provenance::{Patch, Provenance};

/// One variant's result in the build report.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub variant: String,
    /// `built`, `cache-hit`, `remote-hit`.
    pub status: String,
    pub wheel: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub version: String,
    pub cache_key: String,
    pub seconds: f64,
    pub log: Option<PathBuf>,
    pub dropped_env: BTreeMap<String, String>,
    pub patches: Vec<Patch>,
    /// Notes (a rejected remote entry, a fix applied).
    pub notes: Vec<String>,
}

#[derive(Serialize)]
pub struct Report<'a> {
    pub schema: u32,
    pub results: &'a [Outcome],
    pub skipped: &'a [Skipped],
}

/// The patches a stamped wheel records (cache hits report what the build did).
pub fn recorded_patches(wheel: &Path) -> Result<Vec<Patch>> {
    Ok(read_provenance(wheel)?.patches)
}

/// The provenance document stamped into a wheel (bounded read).
pub fn read_provenance(wheel: &Path) -> Result<Provenance> {
    forge_wheel::wheel::read::provenance(wheel)
}

/// The checksum file of `--out`: one line per delivered wheel, by its path
/// relative to `--out` (so `sha256sum -c SHA256SUMS` there checks every variant's).
pub const SUMS: &str = "SHA256SUMS";
const OUT: &str = "output folder";

/// Where a run delivers: `--out` (made at delivery, never before), whether
/// each variant's wheel goes into a folder of its own, and the build report.
#[derive(Debug, Clone)]
pub struct Destination {
    pub out: PathBuf,
    /// `<out>/<variant>/` per variant ([`super::request::Variants::several`]).
    pub several: bool,
    /// `--report FILE`.
    pub report: Option<PathBuf>,
}

/// One variant's wheel, ready: its cache entry and the folder holding it (the
/// cache's, or an uncached build's staging folder).
pub struct Ready<'a> {
    pub entry: &'a cache::Entry,
    pub dir: &'a Path,
}

impl Destination {
    /// The variant's folder, relative to `--out` (empty: `--out` itself, for a build of one variant).
    fn folder(&self, variant: &str) -> PathBuf {
        if self.several {
            PathBuf::from(variant)
        } else {
            PathBuf::new()
        }
    }

    /// The delivered wheel's path as the report and the result line name it.
    pub fn wheel_path(&self, variant: &str, wheel: &str) -> PathBuf {
        match self.several {
            true => self.out.join(variant).join(wheel),
            false => self.out.join(wheel),
        }
    }

    /// Before any build: `--out` is a folder or nothing yet (below a folder),
    /// its SHA256SUMS a regular file or nothing, the report's place writable
    /// (exit 2, naming the path, nothing written). [`deliver`] checks again.
    pub fn check(&self) -> Result<()> {
        if let Some(out) = open_if_there(&self.out, OUT)? {
            read_sums(&out)?;
        }
        if let Some(r) = &self.report {
            let (folder, name) = split_report(r)?;
            if let Some(t) = open_if_there(&folder, "report folder")? {
                t.check_destination(&name)?;
            }
        }
        Ok(())
    }

    /// Once the variants are planned, before any build: no variant's folder
    /// in `--out` is anything but a folder or nothing (a link is refused).
    pub fn check_variants<'a>(&self, variants: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let Some(out) = open_if_there(&self.out, OUT)? else { return Ok(()) };
        for v in variants {
            check_folder(&out, &self.folder(v))?;
        }
        Ok(())
    }
}

/// Put every wheel of `ready` (with its attestation) into `--out`, record them
/// in SHA256SUMS and write the build report (`report`, when `--report` names a
/// file): all checked and staged first, then all renamed into place. Under
/// the `--out` folder's lock in the cache (`cache_dir`), so two runs into one
/// folder never interleave their SHA256SUMS.
pub fn deliver(to: &Destination, cache_dir: &Path, ready: &[Ready], report: Option<&[u8]>) -> Result<()> {
    let out_id = source::short_hash(&std::path::absolute(&to.out)?.to_string_lossy());
    let _lock = source::lock(&cache_dir.join("locks").join(format!("out-{out_id}.lock")))?;
    let out = Tree::create(&to.out, OUT)?;
    let mut sums = parse_sums(&read_sums(&out)?);
    // Every destination checked before anything is made or written.
    for r in ready {
        let folder = to.folder(&r.entry.variant);
        check_folder(&out, &folder)?;
        refuse_collision(&out, &folder.join(&r.entry.wheel), r.entry)?;
        out.check_destination(folder.join(attestation_name(&r.entry.wheel)))?;
    }
    let report_tree = match (&to.report, report) {
        (Some(r), Some(_)) => {
            let (folder, name) = split_report(r)?;
            let t = Tree::create(&folder, "report folder")?;
            t.check_destination(&name)?;
            Some((t, name))
        }
        _ => None,
    };
    let mut folders = Vec::new();
    for r in ready {
        let folder = to.folder(&r.entry.variant);
        out.create_dir_all(&folder)?;
        folders.push(out.sub(&folder, OUT)?);
    }
    let mut d = Delivery::new();
    for (r, tree) in ready.iter().zip(&folders) {
        stage_wheel(&mut d, tree, r)?;
        sums.insert(sums_name(&to.folder(&r.entry.variant), &r.entry.wheel), r.entry.sha256.clone());
    }
    let text: String = sums.iter().map(|(name, sha)| format!("{sha}  {name}\n")).collect();
    d.add(&out, SUMS, PUBLIC, |f| Ok(f.write_all(text.as_bytes())?))?;
    if let (Some((t, name)), Some(bytes)) = (&report_tree, report) {
        d.add(t, name, PUBLIC, |f| Ok(f.write_all(bytes)?))?;
    }
    d.commit()
}

/// The wheel of `r` copied from its entry into `to` (its bytes hashed on the
/// way: they must be the entry's sha256), and its attestation rendered from
/// the provenance inside it (one value, two renderings), both staged in `d`.
fn stage_wheel<'t>(d: &mut Delivery<'t>, to: &'t Tree, r: &Ready) -> Result<()> {
    let e = r.entry;
    let from = Tree::open(r.dir, "cache entry")?;
    let (mut src, _) = from.open_file(&e.wheel, cap::WHEEL)?;
    d.add(to, &e.wheel, PUBLIC, |f| {
        let (digest, _) = forge_os::input::sha256_stream(&mut src, cap::WHEEL, |chunk| Ok(f.write_all(chunk)?))?;
        match hex::encode(digest) {
            sha if sha == e.sha256 => Ok(()),
            sha => anyhow::bail!(
                "{} has sha256 {sha}, not the {} its cache entry records; nothing was delivered (run `deepep-forge cache verify`)",
                from.join(&e.wheel).display(),
                e.sha256
            ),
        }
    })?;
    let (file, size) = from.open_file(&e.wheel, cap::WHEEL)?;
    let (prov, _) = forge_wheel::wheel::read::opened(file, size, &from.join(&e.wheel))?.provenance()?;
    let statement = forge_wheel::attest::render(&prov, &e.wheel, &e.sha256);
    d.add(to, attestation_name(&e.wheel), PUBLIC, |f| Ok(f.write_all(statement.as_bytes())?))?;
    Ok(())
}

fn attestation_name(wheel: &str) -> String {
    format!("{wheel}{}", forge_wheel::attest::SUFFIX)
}

/// The folder `path` as a tree when something is there; `None` when nothing is
/// yet and the nearest thing above it is a folder (it is made at delivery).
/// A file (or FIFO, or dangling link) there or above it: exit 2, naming it.
fn open_if_there(path: &Path, what: &'static str) -> Result<Option<Tree>> {
    let (at, kind) = fs::machine::nearest(path);
    match kind {
        Kind::Dir if at == path => Tree::open(path, what).map(Some),
        Kind::Dir => Ok(None),
        k => {
            let on_its_way = if at == path { String::new() } else { format!(": {} on its way", at.display()) };
            Err(Failure::usage(format!("{what} {}{on_its_way} is {}, not a folder", path.display(), k.noun()))
                .hint(format!("pass a folder, or a new name, as the {what}"))
                .into())
        }
    }
}

/// The report's folder and file name.
fn split_report(report: &Path) -> Result<(PathBuf, std::ffi::OsString)> {
    let name = report.file_name().ok_or_else(|| {
        Failure::usage(format!("--report {}: not a file name", report.display()))
            .hint("pass a file, e.g. --report build.json")
    })?;
    let folder = report.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((folder.to_path_buf(), name.to_os_string()))
}

/// `<out>/SHA256SUMS`'s text: a regular file or nothing (a FIFO, a folder or a
/// link there is refused, never read through or waited on).
fn read_sums(out: &Tree) -> Result<String> {
    out.check_destination(SUMS)?;
    Ok(out.read_text_opt(SUMS, cap::LOCK)?.unwrap_or_default())
}

/// SHA256SUMS's lines by name (a line without a name is dropped).
fn parse_sums(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.nth(1)?.to_string(), l.split_whitespace().next()?.to_string()))
        })
        .collect()
}

/// The wheel's name in SHA256SUMS: its path relative to `--out`, `/`-separated.
fn sums_name(folder: &Path, wheel: &str) -> String {
    let mut parts: Vec<String> = folder
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.push(wheel.to_string());
    parts.join("/")
}

/// A variant's folder in `--out`: a folder or nothing. A link there is refused,
/// whatever it points at (a wheel goes into a folder of `--out` itself).
fn check_folder(out: &Tree, folder: &Path) -> Result<()> {
    if folder.as_os_str().is_empty() {
        return Ok(());
    }
    match out.kind(folder)? {
        Kind::Missing | Kind::Dir => Ok(()),
        k => Err(Failure::usage(format!(
            "{} is {}, not a folder: a variant's wheels go into a folder of the output folder {} itself",
            out.join(folder).display(),
            k.noun(),
            out.path().display()
        ))
        .hint("remove it, or pass another --out")
        .into()),
    }
}

/// A file already at `rel` is replaced only when it is this variant's wheel
/// (a rebuild, or the same bytes): the variant its provenance names is the
/// entry's. Another variant's wheel, a file whose provenance cannot be read,
/// or anything but a regular file is refused (exit 2) before anything is written.
fn refuse_collision(out: &Tree, rel: &Path, e: &cache::Entry) -> Result<()> {
    match out.kind(rel)? {
        Kind::Missing => return Ok(()),
        Kind::File { .. } => {}
        _ => return out.check_destination(rel),
    }
    let owner = out
        .open_file_nofollow(rel, cap::WHEEL)
        .and_then(|(f, size)| forge_wheel::wheel::read::opened(f, size, &out.join(rel))?.provenance())
        .ok()
        .map(|(p, _)| p.variant.name);
    if owner.as_deref() == Some(e.variant.as_str()) {
        return Ok(());
    }
    let what = match &owner {
        Some(v) => format!("variant `{v}`'s wheel"),
        None => "a file that is no wheel built by deepep-forge".to_string(),
    };
    let name = forge_os::input::excerpt(&e.wheel, 200);
    Err(Failure::usage(format!(
        "{} is {what}; variant `{}`'s wheel has the same file name ({name}) and would replace it",
        out.join(rel).display(),
        e.variant
    ))
    .hint(format!(
        "build the variants in one run (`--variant A --variant B` or `--all`: each goes into `<out>/<variant>/`), or pass another --out for `{}`",
        e.variant
    ))
    .into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sums_are_named_relative_to_out_and_parsed_back() {
        assert_eq!(super::sums_name(std::path::Path::new(""), "a.whl"), "a.whl");
        assert_eq!(super::sums_name(std::path::Path::new("demo"), "a.whl"), "demo/a.whl");
        let parsed = super::parse_sums("ab  demo/a.whl\ncd  b.whl\n\n");
        assert_eq!(parsed["demo/a.whl"], "ab");
        assert_eq!(parsed["b.whl"], "cd");
        assert_eq!(parsed.len(), 2);
    }
}
