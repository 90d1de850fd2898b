//! Delivery: a cache entry's wheel copied into `--out` (temp file + rename;
//! `<out>/<variant>/` when a build selects several variants), never over
//! another variant's wheel, and recorded in `<out>/SHA256SUMS`; the build report (per-variant
//! outcomes) written atomically. Must not build or look up the cache.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::prepare::Skipped;
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

/// Copy the entry's wheel into its folder of `--out` (`out` itself, or
/// `<out>/<variant>/`: [`super::request::out_folder`]) by temp file + rename,
/// and record it in `<out>/SHA256SUMS` by its path relative to `out` (so
/// `sha256sum -c SHA256SUMS` in `out` checks every variant's wheel). A file of
/// the same name that another variant made (or that is no wheel of ours) is
/// never replaced: exit 2, nothing written.
pub fn deliver(entry_dir: &Path, e: &cache::Entry, out: &Path, folder: &Path, cache_dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(folder).with_context(|| format!("creating output folder {}", folder.display()))?;
    let _lock = source::lock(
        &cache_dir
            .join("locks")
            .join(format!("out-{}.lock", source::short_hash(&std::path::absolute(out)?.to_string_lossy()))),
    )?;
    let dest = folder.join(&e.wheel);
    refuse_collision(&dest, e)?;
    let tmp = folder.join(format!(".{}.{}.partial", e.wheel, std::process::id()));
    let copied = std::fs::copy(entry_dir.join(&e.wheel), &tmp).and_then(|_| std::fs::rename(&tmp, &dest));
    if let Err(err) = copied {
        let _ = std::fs::remove_file(&tmp);
        return Err(err).with_context(|| format!("writing {}", dest.display()));
    }
    // The attestation, rendered from the provenance inside the wheel (one value, two renderings).
    let prov = read_provenance(&dest)?;
    write_atomic(
        &folder.join(format!("{}{}", e.wheel, forge_wheel::attest::SUFFIX)),
        forge_wheel::attest::render(&prov, &e.wheel, &e.sha256).as_bytes(),
    )?;
    record_sum(out, &sums_name(out, &dest), &e.sha256)?;
    Ok(dest)
}

/// The wheel's name in SHA256SUMS: its path relative to `out`, `/`-separated.
fn sums_name(out: &Path, dest: &Path) -> String {
    let rel = dest.strip_prefix(out).unwrap_or(dest);
    rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/")
}

/// `<out>/SHA256SUMS` with `name`'s line replaced (rewritten by temp + rename, sorted by name).
fn record_sum(out: &Path, name: &str, sha256: &str) -> Result<()> {
    let sums = out.join("SHA256SUMS");
    let old = forge_os::fs::named::read_text_opt(&sums, "SHA256SUMS", forge_os::input::cap::LOCK)?.unwrap_or_default();
    let mut lines: Vec<String> =
        old.lines().filter(|l| l.split_whitespace().nth(1) != Some(name)).map(String::from).collect();
    lines.push(format!("{sha256}  {name}"));
    lines.sort_by(|a, b| a.split_whitespace().nth(1).cmp(&b.split_whitespace().nth(1)));
    write_atomic(&sums, (lines.join("\n") + "\n").as_bytes())
}

/// A file already at `dest` is replaced only when it is this variant's wheel
/// (a rebuild, or the same bytes): the variant its provenance names is the
/// entry's. Another variant's wheel, or a file whose provenance cannot be
/// read, is refused (exit 2) before anything is written.
fn refuse_collision(dest: &Path, e: &cache::Entry) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(dest) else { return Ok(()) };
    let owner = if meta.is_file() { read_provenance(dest).ok().map(|p| p.variant.name) } else { None };
    if owner.as_deref() == Some(e.variant.as_str()) {
        return Ok(());
    }
    let what = match &owner {
        Some(v) => format!("variant `{v}`'s wheel"),
        None => "a file that is no wheel built by deepep-forge".to_string(),
    };
    let name = forge_os::input::excerpt(&e.wheel, 200);
    Err(forge_os::error::Failure::usage(format!(
        "{} is {what}; variant `{}`'s wheel has the same file name ({name}) and would replace it",
        dest.display(),
        e.variant
    ))
    .hint(format!(
        "build the variants in one run (`--variant A --variant B` or `--all`: each goes into `<out>/<variant>/`), or pass another --out for `{}`",
        e.variant
    ))
    .into())
}

/// Write a file by temp + rename in its folder. The file is public, like the
/// wheel beside it: mode 0666 less the umask (0644 under umask 022), not the
/// 0600 of a temp file.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut f = tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .with_context(|| format!("writing {}", path.display()))?;
    std::io::Write::write_all(&mut f, data)?;
    f.persist(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    /// This process's umask, read from /proc (setting it would race other tests).
    fn umask() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:")).expect("Umask in /proc/self/status");
        u32::from_str_radix(line.trim(), 8).unwrap()
    }

    #[test]
    fn written_files_are_public_like_the_wheel() {
        let dir = tempfile::tempdir().unwrap();
        let sums = dir.path().join("SHA256SUMS");
        super::write_atomic(&sums, b"x\n").unwrap();
        let mode = std::fs::metadata(&sums).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask(), "SHA256SUMS mode {mode:o}");
        // A new file by plain create gets the same mode (what the wheel's copy gets).
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"").unwrap();
        assert_eq!(mode, std::fs::metadata(&plain).unwrap().permissions().mode() & 0o777);
    }
}
