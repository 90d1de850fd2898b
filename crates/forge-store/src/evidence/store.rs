//! An evidence folder: `<DIR>/<wheel sha256>/<kind>-<id>.dsse.json`, one
//! signed envelope per file (`id`: the first 16 hex digits of the envelope's
//! own sha256, so a statement is never written twice and two never collide).
//! Writing refuses a folder that is a symlink or not writable before anything
//! runs ([`prepare`]), and puts each file in place by rename, never over an
//! existing one. Reading is bounded (file count, bytes through `input`) and
//! checks every envelope ([`super::statement::open`]); a statement in another
//! wheel's folder (replayed) is an error. Owns the layout; must not decide
//! what a statement means.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::statement::{self, Opened, Statement};
use crate::cache::sign::PublicKey;
use forge_model::ladder::Kind;
use forge_os::error::Failure;

/// File name suffix of a statement.
pub const SUFFIX: &str = ".dsse.json";
/// The most statement files read from one folder tree.
pub const MAX_FILES: usize = 10_000;

/// A statement that verified.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub signer: String,
    pub statement: Statement,
}

impl Found {
    pub fn sha256(&self) -> &str {
        &self.statement.subject[0].digest.sha256
    }
}

/// A statement no trusted key signed (names of the keys that did).
#[derive(Debug, Clone)]
pub struct Untrusted {
    pub path: PathBuf,
    pub signers: Vec<String>,
}

/// Everything read from evidence folders.
#[derive(Debug, Default)]
pub struct Read {
    pub found: Vec<Found>,
    pub untrusted: Vec<Untrusted>,
}

/// `dir` as a place to record into (created by the first `write`, never here); refused (exit 2)
/// when it is a symlink, not a folder, or not writable by this user.
pub fn prepare(dir: &Path) -> Result<PathBuf> {
    let refuse = |why: &str| -> anyhow::Error {
        Failure::usage(format!("the evidence folder {}: {why}", dir.display()))
            .hint("pass a folder you own (not a symlink), e.g. --record evidence/")
            .into()
    };
    // Nothing is created here: the folder appears with the first statement
    // (`write`), after every other input was checked. A missing folder is
    // checked through the nearest folder above it that exists.
    let mut at = dir;
    loop {
        match std::fs::symlink_metadata(at) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                at = match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
            }
            Err(e) => return Err(refuse(&e.to_string())),
            Ok(m) if m.file_type().is_symlink() && at == dir => {
                return Err(refuse("is a symlink (evidence folders are never followed)"))
            }
            Ok(m) if !std::fs::metadata(at).map(|m| m.is_dir()).unwrap_or(m.is_dir()) => {
                return Err(refuse("is not a folder"))
            }
            Ok(_) => break,
        }
    }
    let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).map_err(|_| refuse("has a NUL byte"))?;
    // SAFETY: a valid C string; access(2) only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(refuse("is not writable by this user"));
    }
    Ok(dir.to_path_buf())
}

/// The file name of an envelope of `kind`.
pub fn file_name(kind: Kind, envelope: &[u8]) -> String {
    let id = forge_os::input::sha256_hex(envelope);
    format!("{}-{}{SUFFIX}", kind.as_str(), &id[..16])
}

/// Put a signed envelope about `sha256` into `dir` (prepared): temp file, then
/// rename, never over an existing file. Returns its path.
pub fn write(dir: &Path, sha256: &str, kind: Kind, envelope: &[u8]) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating the evidence folder {}", dir.display()))?;
    let sub = dir.join(sha256);
    match std::fs::symlink_metadata(&sub) {
        Ok(m) if !m.is_dir() => {
            return Err(Failure::usage(format!("{} is not a folder (a symlink or a file)", sub.display())).into())
        }
        Ok(_) => {}
        Err(_) => std::fs::create_dir(&sub).with_context(|| format!("creating {}", sub.display()))?,
    }
    let dest = sub.join(file_name(kind, envelope));
    if std::fs::symlink_metadata(&dest).is_ok() {
        return Ok(dest); // the same bytes (the name is their digest)
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".evidence-")
        .tempfile_in(&sub)
        .with_context(|| format!("writing into {}", sub.display()))?;
    std::io::Write::write_all(tmp.as_file_mut(), envelope)?;
    tmp.as_file().sync_all()?;
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    tmp.persist_noclobber(&dest).map_err(|e| anyhow::anyhow!("writing {}: {}", dest.display(), e.error))?;
    Ok(dest)
}

/// Read one envelope file (bounded) and check it; `expect` is the wheel
/// sha256 it must be about (its folder, or the wheel it sits beside).
pub fn read_file(path: &Path, trusted: &[PublicKey], expect: Option<&str>) -> Result<Option<Found>, Failure> {
    let fail = |f: Failure| Failure { message: format!("{}: {}", path.display(), f.message), ..f };
    let bytes = forge_os::fs::named::read_bytes(path, "evidence statement", statement::MAX_BYTES).map_err(|e| {
        e.downcast::<Failure>().unwrap_or_else(|e| Failure::usage(format!("{}: {e:#}", path.display())))
    })?;
    match statement::open(&bytes, trusted).map_err(fail)? {
        Opened::NotTrusted(_) => Ok(None),
        Opened::Trusted { signer, statement } => {
            let about = &statement.subject[0].digest.sha256;
            if let Some(want) = expect.filter(|w| *w != about) {
                return Err(fail(
                    Failure::usage(format!(
                        "a statement about sha256 {about} ({}) kept for the wheel with sha256 {want}: replayed onto a wheel it does not name",
                        statement.subject[0].name
                    ))
                    .hint("remove the file; evidence only counts for the wheel its subject names"),
                ));
            }
            Ok(Some(Found { path: path.to_path_buf(), signer, statement }))
        }
    }
}

/// Every statement under `dirs` (`<DIR>/<sha256>/*.dsse.json`); other files are ignored.
pub fn read_all(dirs: &[PathBuf], trusted: &[PublicKey]) -> Result<Read> {
    let mut out = Read::default();
    let mut seen = 0usize;
    for dir in dirs {
        let m = std::fs::symlink_metadata(dir)
            .map_err(|e| Failure::usage(format!("the evidence folder {}: {e}", dir.display())))?;
        if !m.is_dir() {
            return Err(Failure::usage(format!("the evidence folder {} is not a folder", dir.display())).into());
        }
        for (sha, path) in files(dir)? {
            seen += 1;
            if seen > MAX_FILES {
                return Err(Failure::usage(format!("more than {MAX_FILES} statements under the evidence folders"))
                    .hint("split them, or pass only the folders that matter")
                    .into());
            }
            match read_file(&path, trusted, Some(&sha))? {
                Some(f) => out.found.push(f),
                None => out.untrusted.push(Untrusted { path: path.clone(), signers: signers_of(&path) }),
            }
        }
    }
    out.found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// `(sha256, path)` of every statement file under `dir`, sorted; folders whose
/// name is not a sha256 and symlinks are skipped.
fn files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?.take(MAX_FILES) {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let is_sha = name.len() == 64 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !is_sha || !e.file_type()?.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(e.path())?.take(MAX_FILES + 1) {
            let f = f?;
            let fname = f.file_name().to_string_lossy().into_owned();
            if fname.ends_with(SUFFIX) && !fname.starts_with('.') {
                out.push((name.clone(), f.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The key names on an envelope that did not verify, for the note (escaped when printed).
fn signers_of(path: &Path) -> Vec<String> {
    let Ok(bytes) = forge_os::fs::named::read_bytes(path, "evidence statement", statement::MAX_BYTES) else {
        return vec![];
    };
    match statement::open(&bytes, &[]) {
        Ok(Opened::NotTrusted(n)) => n,
        _ => vec![],
    }
}
