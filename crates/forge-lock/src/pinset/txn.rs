//! All-or-nothing writes for `pin set`: every file it touches (pyproject.toml,
//! pins.toml, the project's Dockerfiles, uv.lock under `--relock`) ends up all
//! new or all as it was.
//!
//! - Every file lies in a [`Tree`]: the project's folder or the pins file's
//!   folder, each opened once by the command. A file's links are followed
//!   inside its tree (a symlink's target is what gets written); a link that
//!   leads out of it, or a dangling one, is refused (exit 2) before anything is
//!   written, and a read-only file or folder is refused too.
//! - The project is locked first, for the whole change: one lock per folder
//!   whose files change (the project's, the pins file's), taken in path order.
//!   A second `pin set` (or `pin recover`) on the same folder waits, saying so,
//!   and then reads the files the first one left.
//! - Then a journal holding every file's old bytes is written (temp file,
//!   fsync, rename) into the user's own state folder
//!   (`$XDG_STATE_HOME/deepep-forge/pin-set/`, else
//!   `~/.local/state/deepep-forge/pin-set/`, mode 0700, checked to be this
//!   user's, itself a tree), named by the sha256 of each locked folder's
//!   canonical path, and bound to the project: it records the canonical
//!   project folder and pins file. A pull request cannot put a file there; a
//!   journal found in the project tree (`.deepep-forge-pin-set.journal`, where
//!   older versions kept it) is never read.
//! - Every new file is staged first (a fsynced temp file beside it, with the
//!   old file's mode); only when all are staged is each renamed into place, so
//!   under SIGKILL every file is whole, old or new.
//! - On an error, Ctrl-C or SIGTERM the old bytes are written back the same
//!   way and the journal removed. When the process was killed instead, the
//!   journal stays: the next `pin set` on that folder refuses to start, and
//!   `pin recover` puts every file back (only files `pin set` writes for that
//!   project, resolved again in their trees; then `pin set` can run again).
//!
//! Temp files are named `.<name>.<16 hex>.partial` (older versions:
//! `.deepep-forge-pin-set-*.tmp`); `pin recover` removes any a killed run left.
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};

use forge_os::error::Failure;
use forge_os::fs::{Kind, Resolved, Tree};

/// Where versions before journals were bound to the user kept them: in the
/// project tree. Never read; only named in a warning.
pub const LEGACY_JOURNAL: &str = ".deepep-forge-pin-set.journal";
const LEGACY_TMP_PREFIX: &str = ".deepep-forge-pin-set-";
const B64: base64::engine::general_purpose::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const SCHEMA: u32 = 2;
/// A journal holds the old bytes of a few files (uv.lock the largest).
const JOURNAL_CAP: u64 = forge_os::input::cap::LOCK * 3;

/// Which tree a file of the change lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Root {
    Project,
    Pins,
}

/// One file of the change.
pub struct Change {
    /// As the user named it (for messages).
    pub shown: PathBuf,
    pub root: Root,
    /// Its name inside its tree, as found (before links are followed).
    pub named: PathBuf,
    /// The file written, inside its tree (a symlink resolved to its target).
    pub rel: PathBuf,
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
pub fn state_dir() -> Result<Tree> {
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
    let env = |e: anyhow::Error| anyhow::Error::from(Failure::env(format!("{e:#}")));
    let ours = forge_os::fs::Tree::create(&base.join("deepep-forge"), "state folder").map_err(env)?;
    if ours.kind("pin-set").map_err(env)? == Kind::Missing {
        ours.create_dir_all("pin-set").map_err(env)?;
        ours.set_mode("pin-set", 0o700).map_err(env)?;
    }
    let dir = ours.join("pin-set");
    let m = ours.stat("pin-set").map_err(env)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.kind != Kind::Dir || m.uid != me || m.mode & 0o077 != 0 {
        return Err(Failure::env(format!(
            "{} is not a private folder of this user's (a real folder, owned by uid {me}, mode 0700): the pin set journal is kept only there",
            dir.display()
        ))
        .hint("remove it (or chmod 700 it if it is yours), or set XDG_STATE_HOME to a folder of yours")
        .into());
    }
    ours.sub("pin-set", "state folder").map_err(env)
}

/// The trees a `pin set` or `pin recover` works in, with their canonical paths.
pub struct Place {
    pub project: Tree,
    /// The pins file's folder and the file's name there; `None` with --no-pins.
    pub pins: Option<(Tree, PathBuf)>,
    project_c: PathBuf,
    pins_dir_c: Option<PathBuf>,
}

impl Place {
    /// The project folder and (unless --no-pins) the pins file's folder with
    /// the file's name, as the command opened them.
    pub fn new(project: &Tree, pins: Option<(&Tree, &Path)>) -> Result<Place> {
        let pins = pins.map(|(t, name)| Ok::<_, anyhow::Error>((t.try_clone()?, name.to_path_buf()))).transpose()?;
        let pins_dir_c = pins.as_ref().map(|(t, _)| t.canonical()).transpose()?;
        Ok(Place { project: project.try_clone()?, project_c: project.canonical()?, pins, pins_dir_c })
    }

    /// Whether pins.toml lies in the project's own folder (a pins repository).
    pub fn pins_in_project(&self) -> bool {
        self.pins_dir_c.as_ref() == Some(&self.project_c)
    }

    /// The canonical pins file (its folder canonical, its own name kept).
    fn pins_file(&self) -> Option<PathBuf> {
        Some(self.pins_dir_c.as_ref()?.join(&self.pins.as_ref()?.1))
    }

    /// The folders whose files change, in path order (the lock order).
    fn dirs(&self) -> Vec<PathBuf> {
        let mut v = vec![self.project_c.clone()];
        v.extend(self.pins_dir_c.clone());
        v.sort();
        v.dedup();
        v
    }

    fn tree(&self, root: Root) -> &Tree {
        match (root, &self.pins) {
            (Root::Pins, Some((t, _))) => t,
            _ => &self.project,
        }
    }

    /// A file's canonical path (for the journal).
    fn canonical(&self, root: Root, rel: &Path) -> PathBuf {
        let dir = match root {
            Root::Pins => self.pins_dir_c.as_ref().unwrap_or(&self.project_c),
            Root::Project => &self.project_c,
        };
        if rel == Path::new(".") {
            dir.clone()
        } else {
            dir.join(rel)
        }
    }

    /// Where a canonical path lies: its tree and its path there.
    fn locate(&self, path: &Path) -> Option<(Root, PathBuf)> {
        let inside = |root: Root, dir: &Path| path.strip_prefix(dir).ok().map(|r| (root, r.to_path_buf()));
        inside(Root::Project, &self.project_c).or_else(|| inside(Root::Pins, self.pins_dir_c.as_ref()?))
    }

    /// The file `rel` of `root` resolves to for writing: itself, or a
    /// symlink's target inside the same tree. `Ok(None)` when nothing is
    /// there (it may be created). A link out of the tree, or a dangling one,
    /// is refused (exit 2). `shown` names it in messages.
    pub fn resolve(&self, root: Root, rel: &Path, shown: &Path) -> Result<Option<PathBuf>> {
        let tree = self.tree(root);
        match tree.resolve(rel)? {
            Resolved::Outside { link, target } => {
                let named = if link == rel { shown.to_path_buf() } else { tree.join(&link) };
                Err(Failure::usage(format!(
                    "{} is a symlink to {}, outside {}: pin set writes only the project's own files, never through a link out of it, so nothing was changed",
                    named.display(),
                    target.display(),
                    tree.path().display()
                ))
                .hint("replace the link with the file itself (or a link inside the same folder)")
                .into())
            }
            Resolved::Inside(real) if tree.exists(&real) => Ok(Some(real)),
            Resolved::Inside(real) if real != rel => Err(Failure::usage(format!(
                "{} is a symlink whose target cannot be written (it does not exist)",
                shown.display()
            ))
            .hint("point the link at an existing file, or replace it with the file itself")
            .into()),
            Resolved::Inside(_) => Ok(None),
        }
    }

    /// The text of `rel` of `root`, read where [`Place::resolve`] says (`None`: nothing there).
    pub fn read_text(&self, root: Root, rel: &Path, shown: &Path, cap: u64) -> Result<Option<String>> {
        match self.resolve(root, rel, shown)? {
            Some(real) => self.tree(root).read_text(&real, cap).map(Some),
            None => Ok(None),
        }
    }

    /// The files `pin set` may write here, as it resolves them: pyproject.toml,
    /// uv.lock, the pins file, and `dockerfiles` (the project's, as `lock check` finds them).
    fn allowed(&self, dockerfiles: &[PathBuf]) -> Result<Vec<(Root, PathBuf)>> {
        let mut out = Vec::new();
        for name in ["pyproject.toml", "uv.lock"] {
            let real = self.resolve(Root::Project, Path::new(name), &self.project.join(name))?;
            out.push((Root::Project, real.unwrap_or_else(|| PathBuf::from(name))));
        }
        if let Some((t, name)) = &self.pins {
            let real = self.resolve(Root::Pins, name, &t.join(name))?;
            out.push((Root::Pins, real.unwrap_or_else(|| name.clone())));
        }
        out.extend(dockerfiles.iter().map(|d| (Root::Project, d.clone())));
        Ok(out)
    }
}

/// Refuse (exit 2) a read-only file, or a folder where the temp file cannot be made.
pub fn check_writable(place: &Place, c: &Change) -> Result<()> {
    let tree = place.tree(c.root);
    let real = tree.join(&c.rel);
    let dir = parent(&c.rel);
    let link =
        if c.named != c.rel { format!(" (the target of the symlink {})", c.shown.display()) } else { String::new() };
    if c.old.is_some() && !tree.writable(&c.rel) {
        return Err(Failure::usage(format!(
            "{}{link} is read-only: pin set would change it, so nothing was changed",
            real.display()
        ))
        .hint(format!("make it writable (chmod u+w {}) and run pin set again", real.display()))
        .into());
    }
    if !tree.writable(dir) {
        return Err(Failure::usage(format!(
            "the folder {} is not writable: {}{link} is replaced through a temp file there, so nothing was changed",
            tree.join(dir).display(),
            real.display()
        ))
        .hint("make the folder writable and run pin set again")
        .into());
    }
    Ok(())
}

fn parent(p: &Path) -> &Path {
    p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Write `data` to `rel` of `tree` by a fsynced temp file beside it and one
/// rename (the old file's mode kept, else `mode`), then flush the folder.
fn replace(tree: &Tree, rel: &Path, data: &[u8], mode: u32) -> Result<()> {
    stage(tree, rel, data, mode)?.commit()?;
    sync_folder(tree, rel);
    Ok(())
}

/// `data` staged for `rel` of `tree` (see [`replace`]), not yet in place.
fn stage<'t>(tree: &'t Tree, rel: &Path, data: &[u8], mode: u32) -> Result<forge_os::fs::Staged<'t>> {
    let mode = tree.stat(rel).ok().filter(|s| matches!(s.kind, Kind::File { .. })).map_or(mode, |s| s.mode & 0o7777);
    tree.stage(rel, 0o600, |f| {
        f.write_all(data)?;
        forge_os::fs::set_file_mode(f, mode)?;
        f.sync_all()?;
        Ok(())
    })
}

/// Flush the folder of `rel` (renames that must survive a crash); best effort.
fn sync_folder(tree: &Tree, rel: &Path) {
    if let Ok(d) = tree.sub(parent(rel), "folder") {
        let _ = d.sync();
    }
}

fn key(dir: &Path) -> String {
    hex::encode(&forge_os::input::sha256(dir.as_os_str().as_bytes())[..16])
}

/// The project's locks, held: nobody else changes its files meanwhile.
pub struct Held {
    pub place: Place,
    state: Tree,
    _locks: Vec<forge_os::fs::File>,
}

/// Lock every folder of `place` (in path order), waiting for a holder and
/// saying so once; Ctrl-C while waiting is exit 130.
pub fn hold(place: Place) -> Result<Held> {
    let state = state_dir()?;
    let mut locks = Vec::new();
    for d in place.dirs() {
        let name = format!("{}.lock", key(&d));
        let f = state.open_lock(&name)?;
        forge_os::fs::lock_exclusive(&f, &state.join(&name), || {
            forge_os::note!("waiting: another `pin set` or `pin recover` is changing the files in {} ...", d.display())
        })?;
        locks.push(f);
    }
    Ok(Held { place, state, _locks: locks })
}

impl Held {
    /// This project's journal, one copy per locked folder (so a run that shares
    /// only the pins folder still sees it): names in the state folder.
    fn journals(&self) -> Vec<String> {
        self.place.dirs().iter().map(|d| format!("{}.journal", key(d))).collect()
    }

    fn pending(&self) -> Option<String> {
        self.journals().into_iter().find(|j| self.state.exists(j))
    }

    /// A journal in the project tree (or the pins folder), which is never trusted.
    fn legacy(&self) -> Vec<PathBuf> {
        let mut trees = vec![&self.place.project];
        trees.extend(self.place.pins.as_ref().map(|(t, _)| t));
        let mut found: Vec<PathBuf> =
            trees.into_iter().filter(|t| t.exists(LEGACY_JOURNAL)).map(|t| t.join(LEGACY_JOURNAL)).collect();
        found.dedup();
        found
    }

    /// Warn about a journal in the project tree: never trusted, never read.
    pub fn warn_legacy(&self) {
        for j in self.legacy() {
            forge_os::alert!(
                "{}: {} is ignored: a journal in the project tree is never trusted (a pull request can commit one); this deepep-forge keeps journals in {}. Delete it.",
                forge_os::printer::label("warning"),
                j.display(),
                self.state.path().display()
            );
        }
    }

    /// Refuse to start while a killed run's journal is there (we hold the
    /// locks, so its run is gone): say how to recover.
    pub fn refuse_if_pending(&self) -> Result<()> {
        let Some(journal) = self.pending() else { return Ok(()) };
        let doc = read_journal(&self.state, &journal);
        let state = match &doc {
            Ok(d) => self.describe_state(d),
            Err(e) => format!("(the journal is unreadable: {e:#})"),
        };
        let (recover, again) = match &doc {
            Ok(d) => (d.recover.clone(), d.command.clone()),
            Err(_) => ("deepep-forge pin recover ...".into(), "deepep-forge pin set ...".into()),
        };
        Err(Failure::usage(format!(
            "a previous `pin set` on these files was killed before it finished (journal {}): {state}",
            self.state.join(&journal).display()
        ))
        .hint(format!(
            "undo it with `{recover}` (every file back as it was), then finish it by running `{again}` again"
        ))
        .into())
    }

    /// The bytes of the file at the canonical `path` now (`None`: absent, unreadable or not ours).
    fn now(&self, path: &Path) -> Option<Vec<u8>> {
        let (root, rel) = self.place.locate(path)?;
        self.place.tree(root).read_opt(&rel, forge_os::input::cap::LOCK).ok().flatten()
    }

    /// Each file: new, old, or neither.
    fn describe_state(&self, d: &JournalDoc) -> String {
        d.files
            .iter()
            .map(|f| {
                let path = dec_path(&f.path).unwrap_or_default();
                let now = self.now(&path);
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

    /// Write the journal (the only thing written so far) and start the change.
    pub fn begin(self, command: String, recover: String, changes: Vec<Change>) -> Result<Txn> {
        let doc = JournalDoc {
            schema: SCHEMA,
            pid: std::process::id(),
            started: forge_wheel::provenance::rfc3339(forge_wheel::provenance::now_secs()),
            command,
            recover,
            project: enc_path(&self.place.project_c),
            pins: self.place.pins_file().as_deref().map(enc_path),
            files: changes
                .iter()
                .map(|c| JournalFile {
                    path: enc_path(&self.place.canonical(c.root, &c.rel)),
                    old: c.old.as_ref().map(|o| B64.encode(o)),
                    new_sha256: c.new.as_ref().map(|n| forge_os::input::sha256_hex(n)),
                })
                .collect(),
        };
        let bytes = serde_json::to_vec_pretty(&doc)?;
        let journals = self.journals();
        for j in &journals {
            replace(&self.state, Path::new(j), &bytes, 0o600)
                .with_context(|| format!("writing the journal {}", self.state.join(j).display()))?;
        }
        Ok(Txn { journals, held: self, changes, done: false })
    }

    fn remove_journals(&self, journals: &[String]) -> Result<()> {
        for j in journals {
            self.state.remove_file(j)?;
        }
        Ok(())
    }
}

/// A change in progress: its journal exists, the project is locked.
pub struct Txn {
    journals: Vec<String>,
    held: Held,
    pub changes: Vec<Change>,
    done: bool,
}

fn read_journal(state: &Tree, name: &str) -> Result<JournalDoc> {
    let text = state.read_text(name, JOURNAL_CAP)?;
    let doc: JournalDoc =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", state.join(name).display()))?;
    if doc.schema != SCHEMA {
        anyhow::bail!(
            "{}: journal schema {}, this deepep-forge reads {SCHEMA}",
            state.join(name).display(),
            doc.schema
        );
    }
    Ok(doc)
}

impl Txn {
    /// The folder a file of the change lies in.
    pub fn tree(&self, root: Root) -> &Tree {
        self.held.place.tree(root)
    }

    /// Write every file that has new bytes: all staged first (checking for
    /// Ctrl-C/SIGTERM between them), then each renamed into place.
    pub fn apply(&self) -> Result<()> {
        let mut staged = Vec::new();
        for c in &self.changes {
            forge_os::error::check_interrupted()?;
            if let Some(new) = &c.new {
                staged.push((c, stage(self.tree(c.root), &c.rel, new, 0o644)?));
            }
        }
        for (c, s) in staged {
            forge_os::error::check_interrupted()?;
            s.commit()?;
            sync_folder(self.tree(c.root), &c.rel);
        }
        forge_os::error::check_interrupted()
    }

    /// Put every file back as it was; false where one could not be.
    fn restore(&self) -> Result<()> {
        for c in self.changes.iter().rev() {
            let tree = self.tree(c.root);
            match &c.old {
                Some(old) => {
                    if tree.read_opt(&c.rel, forge_os::input::cap::LOCK).ok().flatten().as_ref() != Some(old) {
                        replace(tree, &c.rel, old, 0o644)
                            .with_context(|| format!("restoring {}", tree.join(&c.rel).display()))?;
                    }
                }
                None => tree.remove_file(&c.rel).with_context(|| format!("removing the new {}", c.shown.display()))?,
            }
        }
        Ok(())
    }

    /// Put every file back as it was and remove the journal. On a failure the
    /// journal stays (`pin recover` finishes the job).
    pub fn rollback(mut self) -> Result<()> {
        self.restore()?;
        self.held.remove_journals(&self.journals)?;
        self.done = true;
        Ok(())
    }

    /// The change stands: remove the journal (the locks go with `self`).
    pub fn commit(mut self) -> Result<()> {
        self.held.remove_journals(&self.journals)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Txn {
    /// An early return (an error between begin and commit/rollback): undo.
    fn drop(&mut self) {
        if !self.done && self.restore().is_ok() {
            let _ = self.held.remove_journals(&self.journals);
        }
    }
}

/// `pin recover`: put every file the journal of this project names back as it
/// was, remove temp files a killed run left, remove the journal. Only this
/// user's journal of this very project (canonical folder and pins file) is
/// read, and it may name only the files `pin set` writes here (`dockerfiles`:
/// the project's, found again), resolved again now in their trees (never
/// through a link out of them). Returns what was done.
pub fn recover(held: Held, dockerfiles: &[PathBuf]) -> Result<Vec<String>> {
    let Some(journal) = held.pending() else {
        if let Some(j) = held.legacy().first() {
            return Err(Failure::usage(format!(
                "{} lies in the project tree, where a pull request can put it: it is not trusted, so nothing was restored",
                j.display()
            ))
            .hint(format!(
                "deepep-forge keeps the journal of an interrupted `pin set` in {}, and there is none for {}; delete {}",
                held.state.path().display(),
                held.place.project.path().display(),
                j.display()
            ))
            .into());
        }
        return Err(Failure::usage(format!(
            "no interrupted `pin set` here: no journal for {} in {}",
            held.place.project.path().display(),
            held.state.path().display()
        ))
        .hint("pass the --project and --pins (or --no-pins) of the interrupted run")
        .into());
    };
    let shown = held.state.join(&journal);
    let doc = read_journal(&held.state, &journal)?;
    let bound = dec_path(&doc.project).as_deref() == Some(held.place.project_c.as_path())
        && doc.pins.as_deref().map(dec_path) == held.place.pins_file().map(Some);
    if !bound {
        return Err(Failure::usage(format!(
            "the journal {} belongs to another run's files (project {})",
            shown.display(),
            dec_path(&doc.project).unwrap_or_default().display()
        ))
        .hint(format!("run `{}`", doc.recover))
        .into());
    }
    let allowed = held.place.allowed(dockerfiles)?;
    let mut files = Vec::new();
    for f in &doc.files {
        let path = dec_path(&f.path).unwrap_or_default();
        let at = held.place.locate(&path).filter(|a| allowed.contains(a)).ok_or_else(|| {
            Failure::usage(format!(
                "{} names {}, which is not a file `pin set` writes here (pyproject.toml, uv.lock, the pins file, the project's Dockerfiles): refusing to touch anything",
                shown.display(),
                forge_os::input::excerpt(&path.to_string_lossy(), 80)
            ))
            .hint("check --project and --pins")
        })?;
        let old = f
            .old
            .as_ref()
            .map(|o| B64.decode(o))
            .transpose()
            .with_context(|| format!("{}: damaged old content", shown.display()))?;
        files.push((path, at, old));
    }
    let mut done = Vec::new();
    for (path, (root, rel), old) in files.iter().rev() {
        let tree = held.place.tree(*root);
        match old {
            Some(old) => {
                if tree.read_opt(rel, forge_os::input::cap::LOCK).ok().flatten().as_ref() == Some(old) {
                    done.push(format!("{}: already as it was", path.display()));
                } else {
                    replace(tree, rel, old, 0o644)?;
                    done.push(format!("{}: restored", path.display()));
                }
            }
            None => {
                if tree.exists(rel) {
                    tree.remove_file(rel)?;
                    done.push(format!("{}: removed (it did not exist before)", path.display()));
                }
            }
        }
    }
    for (root, rel) in files.iter().map(|(_, at, _)| at).collect::<std::collections::BTreeSet<_>>() {
        done.extend(remove_temp_files(held.place.tree(*root), rel)?);
    }
    held.remove_journals(&held.journals())?;
    done.push(format!("to finish the change, run again: {}", doc.command));
    Ok(done)
}

/// The temp files a killed run left beside `rel`: `.<name>.<16 hex>.partial`
/// (staged writes), `.deepep-forge-pin-set-*.tmp` (older versions).
fn remove_temp_files(tree: &Tree, rel: &Path) -> Result<Vec<String>> {
    let (dir, name) = (parent(rel), rel.file_name().unwrap_or_default().to_string_lossy().into_owned());
    let ours = |n: &str| {
        let staged = n.strip_prefix(&format!(".{name}.")).and_then(|r| r.strip_suffix(".partial"));
        staged.is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            || (n.starts_with(LEGACY_TMP_PREFIX) && n.ends_with(".tmp"))
    };
    let mut done = Vec::new();
    for e in tree.list(dir, forge_os::fs::MAX_NAMES)?.entries {
        let Some(n) = e.utf8().filter(|n| ours(n)) else { continue };
        if matches!(e.kind, Kind::File { .. }) {
            let rel = dir.join(n);
            tree.remove_file(&rel)?;
            done.push(format!("{}: temp file removed", tree.join(&rel).display()));
        }
    }
    Ok(done)
}
