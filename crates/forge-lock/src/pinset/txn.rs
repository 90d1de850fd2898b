//! All-or-nothing writes for `pin set`: every file it touches (pyproject.toml,
//! pins.toml, uv.lock under `--relock`) ends up all new or all as it was.
//!
//! - The project is locked first, for the whole change: one lock per folder
//!   whose files change (the project's, the pins file's), taken in path order.
//!   A second `pin set` (or `pin recover`) on the same folder waits, saying so,
//!   and then reads the files the first one left.
//! - Before anything is written: each file's real path is resolved (a symlink's
//!   target is what gets written; a dangling link, or one leading out of the
//!   repository that holds the link, is refused), and a read-only file or
//!   folder is refused (exit 2).
//! - Then a journal holding every file's old bytes is written (temp file,
//!   fsync, rename) into the user's own state folder
//!   (`$XDG_STATE_HOME/deepep-forge/pin-set/`, else
//!   `~/.local/state/deepep-forge/pin-set/`, mode 0700, checked to be this
//!   user's), named by the sha256 of each locked folder's canonical path, and
//!   bound to the project: it records the canonical project folder and pins
//!   file. A pull request cannot put a file there; a journal found in the
//!   project tree (`.deepep-forge-pin-set.journal`, where older versions kept
//!   it) is never read.
//! - Each file is replaced by one rename of a fsynced temp file, so under
//!   SIGKILL every file is whole, old or new.
//! - On an error, Ctrl-C or SIGTERM the old bytes are written back the same
//!   way and the journal removed. When the process was killed instead, the
//!   journal stays: the next `pin set` on that folder refuses to start, and
//!   `pin recover` puts every file back (only files `pin set` writes for that
//!   project, resolved again; then `pin set` can run again).
//!
//! Temp files are named `.deepep-forge-pin-set-*.tmp`; `pin recover` removes
//! any a killed run left.
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};

use forge_os::error::Failure;

/// Where versions before journals were bound to the user kept them: in the
/// project tree. Never read; only named in a warning.
pub const LEGACY_JOURNAL: &str = ".deepep-forge-pin-set.journal";
const TMP_PREFIX: &str = ".deepep-forge-pin-set-";
const B64: base64::engine::general_purpose::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const SCHEMA: u32 = 2;

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
    /// `pin recover` with the flags of this run.
    recover: String,
    /// base64 of the canonical project folder's bytes (paths need not be UTF-8).
    project: String,
    /// base64 of the canonical pins file's bytes; absent with --no-pins.
    pins: Option<String>,
    files: Vec<JournalFile>,
}

#[derive(Serialize, Deserialize)]
struct JournalFile {
    /// base64 of the canonical path's bytes.
    path: String,
    /// base64 of the old bytes; absent: the file did not exist.
    old: Option<String>,
    new_sha256: Option<String>,
}

fn enc_path(p: &Path) -> String {
    B64.encode(p.as_os_str().as_bytes())
}

fn dec_path(s: &str) -> Option<PathBuf> {
    B64.decode(s).ok().map(|b| PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b)))
}

/// The user's private folder for journals and locks (created 0700; refused,
/// exit 3, when it is not a folder of this user's that only they can enter).
pub fn state_dir() -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let base = forge_os::environ::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            forge_os::environ::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".local/state"))
        })
        .ok_or_else(|| {
            Failure::env("no state folder for the pin set journal: HOME and XDG_STATE_HOME are unset")
                .hint("set XDG_STATE_HOME to a folder of yours")
        })?;
    let dir = base.join("deepep-forge").join("pin-set");
    std::fs::create_dir_all(base.join("deepep-forge"))
        .map_err(|e| Failure::env(format!("cannot create {}: {e}", base.join("deepep-forge").display())))?;
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(Failure::env(format!("cannot create {}: {e}", dir.display())).into())
        }
        _ => {}
    }
    let m = std::fs::symlink_metadata(&dir).map_err(|e| Failure::env(format!("cannot read {}: {e}", dir.display())))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != me || m.permissions().mode() & 0o077 != 0 {
        return Err(Failure::env(format!(
            "{} is not a private folder of this user's (a real folder, owned by uid {me}, mode 0700): the pin set journal is kept only there",
            dir.display()
        ))
        .hint("remove it (or chmod 700 it if it is yours), or set XDG_STATE_HOME to a folder of yours")
        .into());
    }
    Ok(dir)
}

/// The folder that bounds a project's files: the git repository holding
/// `dir` (the nearest ancestor with `.git`, found without running git), else
/// `dir` itself. `dir` is canonical.
fn boundary(dir: &Path) -> PathBuf {
    dir.ancestors().find(|a| a.join(".git").exists()).unwrap_or(dir).to_path_buf()
}

/// `p` with its folder made canonical (the file itself may not exist, and a
/// link in the last component is kept).
fn canonical_file(p: &Path) -> Result<PathBuf> {
    let dir = std::fs::canonicalize(parent(p))
        .map_err(|e| Failure::usage(format!("cannot read the folder of {}: {e}", p.display())))?;
    Ok(match p.file_name() {
        Some(n) => dir.join(n),
        None => dir,
    })
}

/// The file `shown` resolves to for writing: itself, or a symlink's target
/// (which must exist, and lie inside the repository that holds the link).
/// `Ok(None)` when nothing is there (it may be created).
pub fn resolve(shown: &Path) -> Result<Option<PathBuf>> {
    match std::fs::symlink_metadata(shown) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Failure::usage(format!("cannot read {}: {e}", shown.display())).into()),
        Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(shown) {
            Ok(t) => {
                let within = boundary(&std::fs::canonicalize(parent(shown))?);
                if !t.starts_with(&within) {
                    return Err(Failure::usage(format!(
                        "{} is a symlink to {}, outside {}: pin set writes only the project's own files, never through a link out of it, so nothing was changed",
                        shown.display(),
                        t.display(),
                        within.display()
                    ))
                    .hint("replace the link with the file itself (or a link inside the repository)")
                    .into());
                }
                Ok(Some(t))
            }
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

/// The project a `pin set` or `pin recover` works on: canonical folders.
pub struct Place {
    pub project: PathBuf,
    /// The pins file (its folder canonical); `None` with --no-pins.
    pub pins: Option<PathBuf>,
}

impl Place {
    /// `--project` and `--pins` as given; a folder that does not exist is exit 2.
    pub fn new(project: &Path, pins: Option<&Path>) -> Result<Place> {
        let project_c = std::fs::canonicalize(project).map_err(|e| {
            Failure::usage(format!("cannot read the project folder {}: {e}", project.display()))
                .hint("--project must name a folder with a pyproject.toml")
        })?;
        let pins = pins.map(canonical_file).transpose()?;
        Ok(Place { project: project_c, pins })
    }

    /// The folders whose files change, in path order (the lock order).
    fn dirs(&self) -> Vec<PathBuf> {
        let mut v = vec![self.project.clone()];
        v.extend(self.pins.as_ref().map(|p| parent(p).to_path_buf()));
        v.sort();
        v.dedup();
        v
    }

    /// The files `pin set` may write here, as it resolves them (links followed,
    /// never out of their repository), canonical.
    fn allowed(&self) -> Result<Vec<PathBuf>> {
        let mut shown = vec![self.project.join("pyproject.toml"), self.project.join("uv.lock")];
        shown.extend(self.pins.clone());
        let mut out = Vec::new();
        for s in shown {
            let real = resolve(&s)?.unwrap_or(s);
            out.push(canonical_file(&real)?);
        }
        Ok(out)
    }
}

fn key(dir: &Path) -> String {
    hex::encode(&forge_os::input::sha256(dir.as_os_str().as_bytes())[..16])
}

/// The project's locks, held: nobody else changes its files meanwhile.
pub struct Held {
    pub place: Place,
    state: PathBuf,
    _locks: Vec<std::fs::File>,
}

/// Lock every folder of `place` (in path order), waiting for a holder and
/// saying so once; Ctrl-C while waiting is exit 130.
pub fn hold(place: Place) -> Result<Held> {
    let state = state_dir()?;
    let mut locks = Vec::new();
    for d in place.dirs() {
        let path = state.join(format!("{}.lock", key(&d)));
        let f = match forge_store::cache::lock::try_exclusive(&path)? {
            Some(f) => f,
            None => {
                forge_os::note!(
                    "waiting: another `pin set` or `pin recover` is changing the files in {} ...",
                    d.display()
                );
                forge_store::cache::lock::exclusive(&path)?
            }
        };
        locks.push(f);
    }
    Ok(Held { place, state, _locks: locks })
}

impl Held {
    /// This project's journal, one copy per locked folder (so a run that shares
    /// only the pins folder still sees it).
    fn journals(&self) -> Vec<PathBuf> {
        self.place.dirs().iter().map(|d| self.state.join(format!("{}.journal", key(d)))).collect()
    }

    fn pending(&self) -> Option<PathBuf> {
        self.journals().into_iter().find(|j| std::fs::symlink_metadata(j).is_ok())
    }

    /// Warn about a journal in the project tree: never trusted, never read.
    pub fn warn_legacy(&self) {
        for d in self.place.dirs() {
            let j = d.join(LEGACY_JOURNAL);
            if std::fs::symlink_metadata(&j).is_ok() {
                forge_os::alert!(
                    "{}: {} is ignored: a journal in the project tree is never trusted (a pull request can commit one); this deepep-forge keeps journals in {}. Delete it.",
                    forge_os::printer::label("warning"),
                    j.display(),
                    self.state.display()
                );
            }
        }
    }

    /// Refuse to start while a killed run's journal is there (we hold the
    /// locks, so its run is gone): say how to recover.
    pub fn refuse_if_pending(&self) -> Result<()> {
        let Some(journal) = self.pending() else { return Ok(()) };
        let doc = read_journal(&journal);
        let state = match &doc {
            Ok(d) => describe_state(d),
            Err(e) => format!("(the journal is unreadable: {e:#})"),
        };
        let (recover, again) = match &doc {
            Ok(d) => (d.recover.clone(), d.command.clone()),
            Err(_) => ("deepep-forge pin recover ...".into(), "deepep-forge pin set ...".into()),
        };
        Err(Failure::usage(format!(
            "a previous `pin set` on these files was killed before it finished (journal {}): {state}",
            journal.display()
        ))
        .hint(format!(
            "undo it with `{recover}` (every file back as it was), then finish it by running `{again}` again"
        ))
        .into())
    }

    /// Write the journal (the only thing written so far) and start the change.
    pub fn begin(self, command: String, recover: String, changes: Vec<Change>) -> Result<Txn> {
        let doc = JournalDoc {
            schema: SCHEMA,
            pid: std::process::id(),
            started: forge_wheel::provenance::rfc3339(forge_wheel::provenance::now_secs()),
            command,
            recover,
            project: enc_path(&self.place.project),
            pins: self.place.pins.as_deref().map(enc_path),
            files: changes
                .iter()
                .map(|c| {
                    Ok(JournalFile {
                        path: enc_path(&canonical_file(&c.real)?),
                        old: c.old.as_ref().map(|o| B64.encode(o)),
                        new_sha256: c.new.as_ref().map(|n| forge_os::input::sha256_hex(n)),
                    })
                })
                .collect::<Result<_>>()?,
        };
        let bytes = serde_json::to_vec_pretty(&doc)?;
        let journals = self.journals();
        for j in &journals {
            replace(j, &bytes).with_context(|| format!("writing the journal {}", j.display()))?;
        }
        Ok(Txn { journals, _held: self, changes, done: false })
    }
}

/// A change in progress: its journal exists, the project is locked.
pub struct Txn {
    journals: Vec<PathBuf>,
    _held: Held,
    pub changes: Vec<Change>,
    done: bool,
}

fn read_journal(path: &Path) -> Result<JournalDoc> {
    let text = forge_os::fs::named::read_text(path, "pin set journal", forge_os::input::cap::LOCK * 3)?;
    let doc: JournalDoc = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if doc.schema != SCHEMA {
        anyhow::bail!("{}: journal schema {}, this deepep-forge reads {SCHEMA}", path.display(), doc.schema);
    }
    Ok(doc)
}

/// Each file: new, old, or neither.
fn describe_state(d: &JournalDoc) -> String {
    d.files
        .iter()
        .map(|f| {
            let path = dec_path(&f.path).unwrap_or_default();
            let now = forge_os::fs::named::read_bytes(&path, "project file", forge_os::input::cap::LOCK).ok();
            let now_sha = now.as_ref().map(|b| forge_os::input::sha256_hex(b));
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
            format!("{} {what}", path.display())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn remove_all(journals: &[PathBuf]) -> Result<()> {
    for j in journals {
        match std::fs::remove_file(j) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", j.display()))
            }
            _ => {}
        }
    }
    Ok(())
}

impl Txn {
    /// Write every file that has new bytes (one rename each), checking for
    /// Ctrl-C/SIGTERM between them.
    pub fn apply(&self) -> Result<()> {
        for c in &self.changes {
            forge_os::error::check_interrupted()?;
            if let Some(new) = &c.new {
                replace(&c.real, new)?;
            }
        }
        forge_os::error::check_interrupted()
    }

    /// Put every file back as it was and remove the journal. On a failure the
    /// journal stays (`pin recover` finishes the job).
    pub fn rollback(mut self) -> Result<()> {
        for c in self.changes.iter().rev() {
            match &c.old {
                Some(old) => {
                    if forge_os::fs::named::read_bytes(&c.real, "project file", forge_os::input::cap::LOCK)
                        .ok()
                        .as_ref()
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
        remove_all(&self.journals)?;
        self.done = true;
        Ok(())
    }

    /// The change stands: remove the journal (the locks go with `self`).
    pub fn commit(mut self) -> Result<()> {
        remove_all(&self.journals)?;
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
                    forge_os::fs::named::read_bytes(&c.real, "project file", forge_os::input::cap::LOCK).ok().as_ref()
                        == Some(old)
                        || replace(&c.real, old).is_ok()
                }
                None => std::fs::remove_file(&c.real).is_ok() || !c.real.exists(),
            };
        }
        if ok {
            let _ = remove_all(&self.journals);
        }
    }
}

/// `pin recover`: put every file the journal of this project names back as it
/// was, remove temp files a killed run left, remove the journal. Only this
/// user's journal of this very project (canonical folder and pins file) is
/// read, and it may name only the files `pin set` writes here, resolved again
/// now (never through a link out of the repository). Returns what was done.
pub fn recover(held: Held) -> Result<Vec<String>> {
    let Some(journal) = held.pending() else {
        let legacy: Vec<PathBuf> =
            held.place.dirs().iter().map(|d| d.join(LEGACY_JOURNAL)).filter(|j| j.symlink_metadata().is_ok()).collect();
        if let Some(j) = legacy.first() {
            return Err(Failure::usage(format!(
                "{} lies in the project tree, where a pull request can put it: it is not trusted, so nothing was restored",
                j.display()
            ))
            .hint(format!(
                "deepep-forge keeps the journal of an interrupted `pin set` in {}, and there is none for {}; delete {}",
                held.state.display(),
                held.place.project.display(),
                j.display()
            ))
            .into());
        }
        return Err(Failure::usage(format!(
            "no interrupted `pin set` here: no journal for {} in {}",
            held.place.project.display(),
            held.state.display()
        ))
        .hint("pass the --project and --pins (or --no-pins) of the interrupted run")
        .into());
    };
    let doc = read_journal(&journal)?;
    let bound = dec_path(&doc.project).as_deref() == Some(held.place.project.as_path())
        && doc.pins.as_deref().map(dec_path) == held.place.pins.clone().map(Some);
    if !bound {
        return Err(Failure::usage(format!(
            "the journal {} belongs to another run's files (project {})",
            journal.display(),
            dec_path(&doc.project).unwrap_or_default().display()
        ))
        .hint(format!("run `{}`", doc.recover))
        .into());
    }
    let allowed = held.place.allowed()?;
    let mut files = Vec::new();
    for f in &doc.files {
        let path = dec_path(&f.path).filter(|p| allowed.contains(p)).ok_or_else(|| {
            Failure::usage(format!(
                "{} names {}, which is not a file `pin set` writes here (pyproject.toml, uv.lock, the pins file): refusing to touch anything",
                journal.display(),
                forge_os::input::excerpt(&dec_path(&f.path).unwrap_or_default().to_string_lossy(), 80)
            ))
            .hint("check --project and --pins")
        })?;
        let old = f
            .old
            .as_ref()
            .map(|o| B64.decode(o))
            .transpose()
            .with_context(|| format!("{}: damaged old content", journal.display()))?;
        files.push((path, old));
    }
    let mut done = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for (path, old) in files.iter().rev() {
        dirs.insert(parent(path).to_path_buf());
        match old {
            Some(old) => {
                if forge_os::fs::named::read_bytes(path, "project file", forge_os::input::cap::LOCK).ok().as_ref()
                    == Some(old)
                {
                    done.push(format!("{}: already as it was", path.display()));
                } else {
                    replace(path, old)?;
                    done.push(format!("{}: restored", path.display()));
                }
            }
            None => {
                if path.symlink_metadata().is_ok() {
                    std::fs::remove_file(path)?;
                    done.push(format!("{}: removed (it did not exist before)", path.display()));
                }
            }
        }
    }
    for d in dirs {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(TMP_PREFIX) && n.ends_with(".tmp") && e.file_type().is_ok_and(|t| t.is_file()) {
                std::fs::remove_file(e.path())?;
                done.push(format!("{}: temp file removed", e.path().display()));
            }
        }
    }
    remove_all(&held.journals())?;
    done.push(format!("to finish the change, run again: {}", doc.command));
    Ok(done)
}
