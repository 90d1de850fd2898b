//! Delivery: a cache entry's wheel copied into `--out` (temp file + rename)
//! and recorded in `<out>/SHA256SUMS`; the build report (per-variant
//! outcomes) written atomically. Must not build or look up the cache.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::prepare::Skipped;
use super::source;
use crate::cache;
use crate::provenance::{Patch, Provenance};

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
    crate::wheel::read::provenance(wheel)
}

/// Copy the entry's wheel into the output folder (temp file + rename) and
/// record it in `<out>/SHA256SUMS` (rewritten the same way).
pub fn deliver(entry_dir: &Path, e: &cache::Entry, out: &Path, cache_dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating output folder {}", out.display()))?;
    let _lock = source::lock(
        &cache_dir
            .join("locks")
            .join(format!("out-{}.lock", source::short_hash(&std::path::absolute(out)?.to_string_lossy()))),
    )?;
    let dest = out.join(&e.wheel);
    let tmp = out.join(format!(".{}.{}.partial", e.wheel, std::process::id()));
    let copied = std::fs::copy(entry_dir.join(&e.wheel), &tmp).and_then(|_| std::fs::rename(&tmp, &dest));
    if let Err(err) = copied {
        let _ = std::fs::remove_file(&tmp);
        return Err(err).with_context(|| format!("writing {}", dest.display()));
    }
    // The attestation, rendered from the provenance inside the wheel (one value, two renderings).
    let prov = read_provenance(&dest)?;
    write_atomic(
        &out.join(format!("{}{}", e.wheel, crate::attest::SUFFIX)),
        crate::attest::render(&prov, &e.wheel, &e.sha256).as_bytes(),
    )?;
    let sums = out.join("SHA256SUMS");
    let old = crate::input::read_text_opt(&sums, "SHA256SUMS", crate::input::cap::LOCK)?.unwrap_or_default();
    let mut lines: Vec<String> =
        old.lines().filter(|l| l.split_whitespace().nth(1) != Some(e.wheel.as_str())).map(String::from).collect();
    lines.push(format!("{}  {}", e.sha256, e.wheel));
    lines.sort_by(|a, b| a.split_whitespace().nth(1).cmp(&b.split_whitespace().nth(1)));
    write_atomic(&sums, (lines.join("\n") + "\n").as_bytes())?;
    Ok(dest)
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
