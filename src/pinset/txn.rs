//! All-or-nothing writes for `pin set`: every file it touches (pyproject.toml,
//! pins.toml, uv.lock under `--relock`) ends up all new or all as it was.
//!
//! - Before anything is written: each file's real path is resolved (a symlink's
//!   target is what gets written; a dangling link is refused), and a read-only
//!   file or folder is refused (exit 2).
//! - Then a journal `.deepep-forge-pin-set.journal` is written (temp file,
//!   fsync, rename) next to pins.toml (or pyproject.toml with `--no-pins`),
//!   holding every file's old bytes, and locked (flock) for as long as the
//!   change runs. Each file is replaced by one rename of a fsynced temp file,
//!   so under SIGKILL every file is whole, old or new.
//! - On an error, Ctrl-C or SIGTERM the old bytes are written back the same
//!   way and the journal removed. When the process was killed instead, the
//!   journal stays: the next `pin set` finds it unlocked, refuses to start,
//!   and `pin recover` puts every file back (then `pin set` can run again).
//!
//! Temp files are named `.deepep-forge-pin-set-*.tmp`; `pin recover` removes
//! any a killed run left.
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Failure;

pub const JOURNAL: &str = ".deepep-forge-pin-set.journal";
const TMP_PREFIX: &str = ".deepep-forge-pin-set-";
const B64: base64::engine::general_purpose::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// One file of the change.
pub struct Change {
    /// As the user named it (for messages).
    pub shown: PathBuf,
    /// The file written (a symlink resolved to its target).
    pub real: PathBuf,
    /// The bytes before, `None` when the file did not exist.
    pub old: Option<Vec<u8>>,
    /// The bytes to write now, `None` when another program writes it (uv.lock).
    pub new: Option<Vec<u8>>,
}

#[derive(Serialize, Deserialize)]
struct JournalDoc {
    schema: u32,
    pid: u32,
    started: String,
    /// The command to run again to finish the change.
    command: String,
    files: Vec<JournalFile>,
}

#[derive(Serialize, Deserialize)]
struct JournalFile {
    path: PathBuf,
    /// base64 of the old bytes; absent: the file did not exist.
    old: Option<String>,
    new_sha256: Option<String>,
}

/// The file `shown` resolves to for writing: itself, or a symlink's target
/// (which must exist). `Ok(None)` when nothing is there (it may be created).
pub fn resolve(shown: &Path) -> Result<Option<PathBuf>> {
    match std::fs::symlink_metadata(shown) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Failure::usage(format!("cannot read {}: {e}", shown.display())).into()),
        Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(shown) {
            Ok(t) => Ok(Some(t)),
            Err(e) => {
                Err(Failure::usage(format!("{} is a symlink whose target cannot be written ({e})", shown.display()))
                    .hint("point the link at an existing file, or replace it with the file itself")
                    .into())
            }
        },
        Ok(_) => Ok(Some(shown.to_path_buf())),
    }
}

/// Writable by us (access(2)), and not marked read-only (no write bit at all:
/// root may write anything, but a file nobody may write is meant to stay).
fn writable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else { return false };
    // SAFETY: access(2) on a NUL-terminated path.
    let access = unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 };
    access && std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o222 != 0)
}

/// Refuse (exit 2) a read-only file, or a folder where the temp file cannot be made.
pub fn check_writable(c: &Change) -> Result<()> {
    let dir = parent(&c.real);
    let link =
        if c.real != c.shown { format!(" (the target of the symlink {})", c.shown.display()) } else { String::new() };
    if c.old.is_some() && !writable(&c.real) {
        return Err(Failure::usage(format!(
            "{}{link} is read-only: pin set would change it, so nothing was changed",
            c.real.display()
        ))
        .hint(format!("make it writable (chmod u+w {}) and run pin set again", c.real.display()))
        .into());
    }
    if !writable(dir) {
        return Err(Failure::usage(format!(
            "the folder {} is not writable: {}{link} is replaced through a temp file there, so nothing was changed",
            dir.display(),
            c.real.display()
        ))
        .hint("make the folder writable and run pin set again")
        .into());
    }
    Ok(())
}

fn parent(p: &Path) -> &Path {
    p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Write `data` to `path` by a fsynced temp file in its folder and one rename
/// (the old file's permissions kept).
pub fn replace(path: &Path, data: &[u8]) -> Result<()> {
    let dir = parent(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(TMP_PREFIX)
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temp file next to {}", path.display()))?;
    tmp.write_all(data).with_context(|| format!("writing the new {}", path.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        tmp.as_file().set_permissions(meta.permissions()).ok();
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).with_context(|| format!("replacing {}", path.display()))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A change in progress: its journal exists and is locked.
pub struct Txn {
    journal: PathBuf,
    _lock: std::fs::File,
    pub changes: Vec<Change>,
    done: bool,
}

/// Refuse to start while a journal is there: another run holds it, or a
/// killed one left it (say how to recover).
pub fn refuse_if_pending(journal: &Path, recover_cmd: &str) -> Result<()> {
    if std::fs::symlink_metadata(journal).is_err() {
        return Ok(());
    }
    let doc = read_journal(journal);
    let held = crate::input::open(journal, "pin set journal", crate::input::cap::LOCK * 3)
        .map(|(f, _)| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)));
    if held.unwrap_or(false) {
        return Err(Failure::usage(format!(
            "another `pin set` is changing these files now (journal {}, pid {})",
            journal.display(),
            doc.as_ref().map(|d| d.pid.to_string()).unwrap_or_else(|_| "?".into())
        ))
        .hint("wait for it to finish")
        .into());
    }
    let state = match &doc {
        Ok(d) => describe_state(d),
        Err(e) => format!("(the journal is unreadable: {e:#})"),
    };
    let again = doc.as_ref().map(|d| d.command.clone()).unwrap_or_else(|_| "deepep-forge pin set ...".into());
    Err(Failure::usage(format!(
        "a previous `pin set` was killed before it finished (journal {}): {state}",
        journal.display()
    ))
    .hint(format!(
        "undo it with `{recover_cmd}` (every file back as it was), then finish it by running `{again}` again"
    ))
    .into())
}

fn read_journal(path: &Path) -> Result<JournalDoc> {
    let text = crate::input::read_text(path, "pin set journal", crate::input::cap::LOCK * 3)?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Each file: new, old, or neither.
fn describe_state(d: &JournalDoc) -> String {
    d.files
        .iter()
        .map(|f| {
            let now = crate::input::read_bytes(&f.path, "project file", crate::input::cap::LOCK).ok();
            let now_sha = now.as_ref().map(|b| hex::encode(Sha256::digest(b)));
            let old = f.old.as_ref().and_then(|o| B64.decode(o).ok());
            let what = if now == old {
                "as it was"
            } else if now_sha.is_some() && now_sha == f.new_sha256 {
                "already changed"
            } else if f.new_sha256.is_none() {
                "rewritten by uv"
            } else {
                "changed since"
            };
            format!("{} {what}", f.path.display())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Txn {
    /// Write and lock the journal (the only thing written so far).
    pub fn begin(journal: PathBuf, command: String, changes: Vec<Change>) -> Result<Txn> {
        let doc = JournalDoc {
            schema: 1,
            pid: std::process::id(),
            started: crate::provenance::rfc3339(crate::provenance::now_secs()),
            command,
            files: changes
                .iter()
                .map(|c| JournalFile {
                    path: std::path::absolute(&c.real).unwrap_or_else(|_| c.real.clone()),
                    old: c.old.as_ref().map(|o| B64.encode(o)),
                    new_sha256: c.new.as_ref().map(|n| hex::encode(Sha256::digest(n))),
                })
                .collect(),
        };
        // Locked before it appears: nobody ever sees this journal unlocked while we run.
        let mut tmp = tempfile::Builder::new()
            .prefix(TMP_PREFIX)
            .suffix(".tmp")
            .tempfile_in(parent(&journal))
            .with_context(|| format!("creating the journal {}", journal.display()))?;
        tmp.write_all(&serde_json::to_vec_pretty(&doc)?)?;
        tmp.as_file().sync_all()?;
        let lock = tmp.as_file().try_clone()?;
        lock.lock().with_context(|| format!("locking {}", journal.display()))?;
        tmp.persist(&journal).with_context(|| format!("writing {}", journal.display()))?;
        if let Ok(d) = std::fs::File::open(parent(&journal)) {
            let _ = d.sync_all();
        }
        Ok(Txn { journal, _lock: lock, changes, done: false })
    }

    /// Write every file that has new bytes (one rename each), checking for
    /// Ctrl-C/SIGTERM between them.
    pub fn apply(&self) -> Result<()> {
        for c in &self.changes {
            crate::error::check_interrupted()?;
            if let Some(new) = &c.new {
                replace(&c.real, new)?;
            }
        }
        crate::error::check_interrupted()
    }

    /// Put every file back as it was and remove the journal. On a failure the
    /// journal stays (`pin recover` finishes the job).
    pub fn rollback(mut self) -> Result<()> {
        for c in self.changes.iter().rev() {
            match &c.old {
                Some(old) => {
                    if crate::input::read_bytes(&c.real, "project file", crate::input::cap::LOCK).ok().as_ref()
                        != Some(old)
                    {
                        replace(&c.real, old).with_context(|| format!("restoring {}", c.real.display()))?;
                    }
                }
                None => match std::fs::remove_file(&c.real) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("removing the new {}", c.real.display()))
                    }
                    _ => {}
                },
            }
        }
        std::fs::remove_file(&self.journal).with_context(|| format!("removing {}", self.journal.display()))?;
        self.done = true;
        Ok(())
    }

    /// The change stands: remove the journal.
    pub fn commit(mut self) -> Result<()> {
        std::fs::remove_file(&self.journal).with_context(|| format!("removing {}", self.journal.display()))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Txn {
    /// An early return (an error between begin and commit/rollback): undo.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut ok = true;
        for c in self.changes.iter().rev() {
            ok &= match &c.old {
                Some(old) => {
                    crate::input::read_bytes(&c.real, "project file", crate::input::cap::LOCK).ok().as_ref()
                        == Some(old)
                        || replace(&c.real, old).is_ok()
                }
                None => std::fs::remove_file(&c.real).is_ok() || !c.real.exists(),
            };
        }
        if ok {
            let _ = std::fs::remove_file(&self.journal);
        }
    }
}

/// `pin recover`: put every file the journal names back as it was, remove
/// temp files a killed run left, remove the journal. Only the files `pin set`
/// writes for these arguments (`allowed`, resolved like `pin set` resolves
/// them) may be named: a journal is a file in the repository, and one from a
/// pull request must not write anywhere else. Returns what was done.
pub fn recover(journal: &Path, allowed: &[PathBuf]) -> Result<Vec<String>> {
    if std::fs::symlink_metadata(journal).is_err() {
        return Err(Failure::usage(format!("no interrupted `pin set` here: {} does not exist", journal.display()))
            .hint("pass the --pins (or --project with --no-pins) of the interrupted run")
            .into());
    }
    let (f, _) = crate::input::open(journal, "pin set journal", crate::input::cap::LOCK * 3)?;
    if matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)) {
        return Err(Failure::usage(format!("a `pin set` is still running on {}", journal.display()))
            .hint("wait for it to finish")
            .into());
    }
    let doc = read_journal(journal)?;
    let allowed: Vec<PathBuf> = allowed
        .iter()
        .filter_map(|p| resolve(p).ok().map(|r| r.unwrap_or_else(|| p.clone())))
        .filter_map(|p| std::path::absolute(p).ok())
        .collect();
    if let Some(bad) = doc.files.iter().find(|f| !allowed.contains(&f.path)) {
        return Err(Failure::usage(format!(
            "{} names {}, which is not a file `pin set` writes here (pyproject.toml, uv.lock, the pins file): refusing to touch anything",
            journal.display(),
            crate::input::excerpt(&bad.path.to_string_lossy(), 80)
        ))
        .hint("delete the journal if you did not run an interrupted `pin set` here; check --project and --pins otherwise")
        .into());
    }
    let mut done = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for jf in doc.files.iter().rev() {
        dirs.insert(parent(&jf.path).to_path_buf());
        match &jf.old {
            Some(o) => {
                let old = B64.decode(o).with_context(|| format!("{}: damaged old content", journal.display()))?;
                if crate::input::read_bytes(&jf.path, "project file", crate::input::cap::LOCK).ok().as_ref()
                    == Some(&old)
                {
                    done.push(format!("{}: already as it was", jf.path.display()));
                } else {
                    replace(&jf.path, &old)?;
                    done.push(format!("{}: restored", jf.path.display()));
                }
            }
            None => {
                if jf.path.exists() {
                    std::fs::remove_file(&jf.path)?;
                    done.push(format!("{}: removed (it did not exist before)", jf.path.display()));
                }
            }
        }
    }
    for d in dirs {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(TMP_PREFIX) && n.ends_with(".tmp") {
                std::fs::remove_file(e.path())?;
                done.push(format!("{}: temp file removed", e.path().display()));
            }
        }
    }
    std::fs::remove_file(journal)?;
    done.push(format!("to finish the change, run again: {}", doc.command));
    Ok(done)
}
