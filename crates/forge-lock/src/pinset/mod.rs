//! `pin set`: rewrite pins.toml and the consumer's pyproject.toml to one
//! DeepEP revision (both architectures, or one with --arch), optionally relock
//! with real uv and re-run `lock check`. Validates everything first, writes
//! temp files and renames them only at the end: bad input changes no file.
//! Every file is read and written through the folders the command opened
//! ([`Folders`]); what was done comes back as data ([`Pinned`], [`Next`]) for
//! the command to print.
use std::path::{Path, PathBuf};

use anyhow::Result;
use pep508_rs::PackageName;

use crate::lock::{pyproject, Kind, ProjectPlace};
use forge_model::pins::{is_full_sha, Arch, Pins};
use forge_os::error::Failure;
use forge_os::fs::Tree;
use txn::Root;

pub mod closure;
pub mod edit;
pub mod index;
pub mod patches;
pub mod source;
pub mod txn;

/// `pin set`, as plain data (made from the flags by the CLI).
#[derive(Debug, Clone)]
pub struct SetRequest {
    /// The new DeepEP revision: a full 40-hex commit, or a short sha, branch or
    /// tag that --source resolves (short revisions are never guessed).
    pub rev: String,
    /// Pin only this architecture (x86_64 or aarch64): only requirements whose marker selects it
    /// change. Without it both architectures get one unmarked requirement per place.
    pub arch: Option<Arch>,
    pub place: ProjectPlace,
    /// A DeepEP git checkout (PATH) or URL: resolves short revisions, gives the
    /// short sha as `git rev-parse --short` prints it and the label's base version
    /// at the new revision. Without it the revision is fetched from pins.toml's
    /// repository (under --no-pins, pyproject.toml's) into the cache's git mirror,
    /// as `plan` does; a source that cannot be read is exit 3, never a guess.
    pub source: Option<String>,
    /// Run `uv lock` in the project afterwards (uv from $DEEPEP_FORGE_UV or PATH),
    /// then `lock check`; without it the exact commands are printed. All or nothing:
    /// if uv fails, or on Ctrl-C/SIGTERM, pyproject.toml, pins.toml and uv.lock are
    /// put back as they were (after a kill, `pin recover` does it).
    pub relock: bool,
    /// `--cache-dir` as given (resolved here).
    pub cache_dir: Option<PathBuf>,
    /// Install DeepEP from the package index `deepep-forge publish` wrote, served at URL
    /// (its base: https://, file://, or http:// on 127.0.0.1): requirements become
    /// `deep_ep==LABEL`, a named `[[tool.uv.index]]` (explicit) and `[tool.uv.sources]`
    /// entry point at `URL/<variant>/simple`, the DeepEP dependency-metadata is dropped.
    pub index: Option<String>,
    /// The variant whose index the consumer installs from (with --index).
    pub variant: Option<String>,
    /// Back from an index to DeepEP's git source (pins.toml's repository) at REV.
    pub git: bool,
    /// Add a source patch (a file beside or below pins.toml) to the moved pins'
    /// `patches`, with its sha256 (repeatable; checked to apply at REV).
    pub patch: Vec<PathBuf>,
    /// Remove the source patch listed as NAME from the moved pins' `patches` (repeatable).
    pub drop_patch: Vec<String>,
}

/// `pin recover`, as plain data.
#[derive(Debug, Clone)]
pub struct RecoverRequest {
    pub place: ProjectPlace,
}

/// The folders `pin set` and `pin recover` work in, opened by the command:
/// the project and (unless --no-pins) the pins file's folder.
pub struct Folders {
    pub project: Tree,
    pub pins: Option<Tree>,
}

/// The pins file's name in its folder.
pub fn pins_name(pins: &Path) -> Result<&Path> {
    pins.file_name().map(Path::new).ok_or_else(|| {
        Failure::usage(format!("--pins {}: not a file name", pins.display())).hint("pass the path of pins.toml").into()
    })
}

/// The project's folders, locked for the whole change (waits for another
/// `pin set` or `pin recover` on them).
fn hold(place: &ProjectPlace, folders: &Folders) -> Result<txn::Held> {
    let pins = match (&folders.pins, place.no_pins) {
        (Some(t), false) => Some((t, pins_name(&place.pins)?)),
        _ => None,
    };
    txn::hold(txn::Place::new(&folders.project, pins)?)
}

/// `--project P --pins F` / `--no-pins` as the user gave them, for commands we print.
fn place_flags(project: &Path, pins: &Path, no_pins: bool) -> String {
    let mut s = format!(" --project {}", project.display());
    if no_pins {
        s.push_str(" --no-pins");
    } else if pins != Path::new(forge_model::pins::DEFAULT_PATH) {
        s.push_str(&format!(" --pins {}", pins.display()));
    }
    s
}

/// `deepep-forge pin recover`: undo a `pin set` that was killed half-way.
/// Returns what was done, a line each.
pub fn recover(args: RecoverRequest, folders: &Folders) -> Result<Vec<String>> {
    let _guard = forge_os::error::Cooperative::enter();
    let held = hold(&args.place, folders)?;
    let dockerfiles = crate::lock::dockerfile::discover(&held.place.project, &args.place.project, &[])?;
    let dockerfiles: Vec<PathBuf> = dockerfiles.into_iter().filter_map(|d| d.rel).collect();
    txn::recover(held, &dockerfiles)
}

/// Until the journal is gone a signal still undoes the change (exit 130).
fn commit_unless_interrupted(t: txn::Txn) -> Result<()> {
    if let Err(e) = forge_os::error::check_interrupted() {
        t.rollback()?;
        return Err(e);
    }
    t.commit()
}

/// uv as every command finds it (`builder::registry::find_uv_for`): `$DEEPEP_FORGE_UV`, else PATH.
pub fn find_uv() -> Result<PathBuf> {
    forge_os::process::lookup::find_uv_for(None, "--relock runs `uv lock`")
}

/// The note before a `next:` line that asks for the index's key (`Next::Commands`).
pub const KEY_NOTE: &str = "note: <NAME:BASE64> in the next step is the public key of the index's signing key (what `deepep-forge cache keygen` printed for it; ask the index's publisher); put it in `[cache] trusted-keys` of the user config or DEEPEP_FORGE_TRUSTED_KEYS to leave --trusted-key out";

/// What `lock check` needs to attest an index's wheels: the signed manifest
/// next to the index pyproject.toml now names (`--index-manifest index`) and
/// the signer's public key, unless the reader already trusts keys
/// (DEEPEP_FORGE_TRUSTED_KEYS, the user config); whether to say [`KEY_NOTE`].
fn index_check_flags() -> (String, bool) {
    // A broken config is `lock check`'s to report; here it only means "no key trusted yet".
    if forge_store::cache::config::trusted_keys(&[]).is_ok_and(|k| !k.is_empty()) {
        return (" --index-manifest index".into(), false);
    }
    (" --index-manifest index --trusted-key '<NAME:BASE64>'".into(), true)
}

/// The repository DeepEP's source is read from without `--source`: pins.toml's,
/// else (--no-pins) the one pyproject.toml's DeepEP requirements name.
fn repo_of(pins: Option<&Pins>, py: &pyproject::Pyproject, py_path: &Path) -> Result<String> {
    if let Some(p) = pins {
        return Ok(p.source.repo.clone());
    }
    py.refs.iter().find_map(|r| r.git.as_ref().map(|g| g.repo.clone())).ok_or_else(|| {
        Failure::usage(format!(
            "{} names no git repository for DeepEP, so pin set cannot read the version the label needs",
            py_path.display()
        ))
        .hint("pass --source PATH|URL with DeepEP's git repository")
        .into()
    })
}

/// A file of the change: its tree, its name there, and as messages name it.
type FileAt<'a> = (Root, &'a Path, &'a Path);

/// A read-only pyproject.toml or pins.toml whose revision changes, or (with --relock) uv.lock,
/// is refused before the source is fetched (a change of the label alone is refused after it).
fn precheck_writable(place: &txn::Place, files: &[Option<FileAt>]) -> Result<()> {
    for (root, named, shown) in files.iter().flatten().copied() {
        let Some(rel) = place.resolve(root, named, shown)? else { continue };
        let change = txn::Change {
            shown: shown.to_path_buf(),
            root,
            named: named.to_path_buf(),
            rel,
            old: Some(Vec::new()),
            new: None,
        };
        txn::check_writable(place, &change)?;
    }
    Ok(())
}

/// What `pin set` moved, for the command to print (in this order).
#[derive(Debug, Clone)]
pub struct Pinned {
    pub rev: String,
    pub short: String,
    /// `x86_64 and aarch64`, or the one `--arch`.
    pub arches: String,
    /// pyproject.toml as messages name it.
    pub pyproject: PathBuf,
    /// The places changed there; `None`: no pyproject.toml (pins.toml alone
    /// moves); empty: already at that revision.
    pub places: Option<Vec<String>>,
    pub label: Option<String>,
    /// pins.toml as messages name it, and whether it changed.
    pub pins: Option<(PathBuf, bool)>,
    /// A note after the pins line: `source.branch` removed.
    pub branch_note: Option<String>,
    /// With --arch the other architecture keeps another revision, so one
    /// static label fits only these architectures (`label-split` follows).
    pub split: Option<String>,
}

/// What comes after the files moved.
#[derive(Debug)]
pub enum Next {
    /// pins.toml alone moved: what the pins build now (`deepep-forge plan` and these flags).
    Plan(String),
    /// The commands to run next; `key_note`: say [`KEY_NOTE`] first.
    Commands { command: String, key_note: bool },
    /// `--relock` ran `uv lock`: the `lock check` to run now, on the same project folder.
    Relocked(crate::lock::CheckRequest),
}

/// The files moved, the change not yet final: [`Applied::finish`] commits it
/// (or relocks, then commits); dropped unfinished, every file is put back.
pub struct Applied {
    pub pinned: Pinned,
    txn: txn::Txn,
    then: Then,
    _guard: forge_os::error::Cooperative,
}

/// What finishing a change does.
enum Then {
    Commit(Next),
    Relock { uv: PathBuf, again: String, check: crate::lock::CheckRequest, lock_cmd: UvLock, check_cmd: String },
}

impl Applied {
    /// Make the change final: commit it, or run `uv lock` first (a failed
    /// `uv lock` or Ctrl-C puts every file back, uv.lock too).
    pub fn finish(self) -> Result<Next> {
        match self.then {
            Then::Commit(next) => {
                commit_unless_interrupted(self.txn)?;
                Ok(next)
            }
            Then::Relock { uv, again, check, lock_cmd, check_cmd } => {
                relock(&lock_cmd, &uv, self.txn, &again, &check_cmd)?;
                Ok(Next::Relocked(check))
            }
        }
    }
}

/// `deepep-forge pin set`: everything validated, every file staged and
/// moved; the command prints [`Applied::pinned`], then calls [`Applied::finish`].
// The one transaction of `pin set`, in the order its guarantee needs (1.
// everything validated and the label's source read, 2. every file resolved
// and journalled, 3. written); its validation and source reading live in
// helpers below.
pub fn set(args: SetRequest, folders: &Folders) -> Result<Applied> {
    // 1. Everything that can fail on input, before any write.
    let flags = place_flags(&args.place.project, &args.place.pins, args.place.no_pins);
    // Locked from before the first read to the end of the change: a second run waits here.
    let held = hold(&args.place, folders)?;
    held.warn_legacy();
    held.refuse_if_pending()?;
    let c = read_consumer(&args, &held.place)?;
    let uv = if args.relock { Some(find_uv()?) } else { None };
    let r = resolve_revision(&args)?;
    precheck(&args, &held.place, &c, &r, uv.is_some())?;
    let (index_variant, index_url) = index_of(&args, c.pins.as_ref())?;
    let (base, label) = version_label(&args, &c, &r)?;
    let (new_py, places) = rewrite_pyproject(&args, &c, &r, (index_variant.as_deref(), index_url), label.as_deref())?;
    let after = pyproject::read(&c.py_path, &new_py, &c.name)?; // the result must read back cleanly
    let new_pins = rewrite_pins(&args, &c, &r, base.as_deref())?;
    let split = label_split(&after, &r.rev);

    // 2. Every file it will touch: resolved (a symlink's target is written), writable, its old bytes kept.
    let mut changes = changes(&held.place, &c, &new_py, new_pins.as_ref(), uv.is_some())?;
    changes.extend(dockerfiles(&args, &held.place, &c, &r)?);
    let again = again_command(&args, &r.rev);
    // From here to the end, Ctrl-C/SIGTERM only set a flag: we stop at the next check and roll back.
    let guard = forge_os::error::Cooperative::enter();
    // From an index: its page for DeepEP asked again, not answered from uv's cache.
    let from_index = crate::lock::index::source(&c.py_path, &new_py, &c.name)?.is_some();
    let lock_cmd = UvLock { project: args.place.project.clone(), refresh: from_index.then(|| c.name.to_string()) };
    let t = held.begin(again.clone(), format!("deepep-forge pin recover{flags}"), changes)?;

    // 3. Written: every file staged, then each renamed into place.
    if let Err(e) = t.apply() {
        t.rollback()?;
        return Err(e);
    }
    let pinned = pinned(&args, &c, &r, (places, label, new_pins.as_ref(), split));
    let (check, check_cmd) = lock_check_of(&args);
    let then = match uv {
        Some(uv) => Then::Relock { uv, again, check, lock_cmd, check_cmd },
        None if c.pins_only => Then::Commit(Next::Plan(pins_flag(&args))),
        None => {
            let (attest, key_note) = if args.index.is_some() { index_check_flags() } else { (String::new(), false) };
            let command = format!("{} && {check_cmd}{attest}", lock_cmd.command_line());
            Then::Commit(Next::Commands { command, key_note })
        }
    };
    Ok(Applied { pinned, txn: t, then, _guard: guard })
}

/// What `pin set` reads of the consumer: pins.toml (unless --no-pins), the
/// package name, pyproject.toml's text and its DeepEP references.
struct Consumer {
    pins: Option<Pins>,
    /// pins.toml's text as read (what its rewrite starts from).
    pins_text: Option<String>,
    name: PackageName,
    py_path: PathBuf,
    py_text: String,
    before: pyproject::Pyproject,
    /// No pyproject.toml: a pins repository, pins.toml alone moves.
    pins_only: bool,
}

/// Read the consumer; a pyproject.toml that does not reference DeepEP is
/// refused unless `--index` adds the requirement.
fn read_consumer(args: &SetRequest, place: &txn::Place) -> Result<Consumer> {
    let pins_text = match &place.pins {
        Some((_, name)) => Some(place.read_text(Root::Pins, name, &args.place.pins, forge_os::input::cap::TEXT)?.ok_or_else(|| {
            Failure::usage(format!("pins file not found: {}", args.place.pins.display()))
                .hint("pass --pins FILE, run from the directory that holds pins.toml, or use --no-pins where the command offers it")
        })?),
        None => None,
    };
    let pins = pins_text.as_deref().map(|t| Pins::parse(t, &args.place.pins)).transpose()?;
    let name = PackageName::new(pins.as_ref().map(|p| p.source.name.clone()).unwrap_or_else(|| "deep_ep".into()))
        .map_err(|e| Failure::usage(format!("source.name: {e}")))?;
    let py_path = crate::lock::shown(&args.place.project.join("pyproject.toml"));
    let py_text = place.read_text(Root::Project, Path::new("pyproject.toml"), &py_path, forge_os::input::cap::TEXT)?;
    let Some(py_text) = py_text else {
        // A platform team's pins repository (the project is pins.toml's own folder): pins.toml alone moves.
        let pins_repo = pins.is_some() && place.pins_in_project();
        if pins_repo && args.index.is_none() && !args.git && !args.relock {
            forge_os::note!("note: no {}: only pins.toml moves", py_path.display());
            let before = pyproject::read(&py_path, "", &name)?;
            return Ok(Consumer { pins, pins_text, name, py_path, py_text: String::new(), before, pins_only: true });
        }
        let why = if pins_repo && args.relock {
            "--relock needs a pyproject.toml to lock (without --relock, pin set moves pins.toml alone)"
        } else {
            "--project must name a folder with a pyproject.toml (in pins.toml's own folder, without --index, --git and --relock, pins.toml alone is moved)"
        };
        return Err(Failure::usage(format!("cannot read {}: not found", py_path.display())).hint(why).into());
    };
    let before = pyproject::read(&py_path, &py_text, &name)?;
    // `--index` on a consumer new to DeepEP adds the requirement; every other edit needs one.
    if before.refs.is_empty() && args.index.is_none() {
        return Err(Failure::usage(format!(
            "{} does not reference DeepEP (`{name}`) anywhere: nothing to pin",
            py_path.display()
        ))
        .hint("add a requirement such as `deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@<40-hex sha>` first, or pass --index URL --variant NAME to install DeepEP from a `deepep-forge publish` index")
        .into());
    }
    Ok(Consumer { pins, pins_text, name, py_path, py_text, before, pins_only: false })
}

/// The revision pinned: the full sha and its short form, with the cache and
/// the git source (`--source`) they were resolved with.
struct Revision {
    cache: PathBuf,
    src: Option<source::GitSource>,
    rev: String,
    short: String,
}

fn resolve_revision(args: &SetRequest) -> Result<Revision> {
    let cache = forge_store::cache::resolve_dir(args.cache_dir.as_deref())?;
    let src = args.source.as_deref().map(|s| source::GitSource::open(s, &cache)).transpose()?;
    let rev = match &src {
        Some(s) => s.resolve(&args.rev)?,
        None if is_full_sha(&args.rev) => args.rev.clone(),
        None => return Err(Failure::usage(format!(
            "`{}` is not a full 40-hex commit, and there is no git source to resolve it against",
            args.rev
        ))
        .hint("give the full sha, or pass --source PATH|URL (e.g. --source https://github.com/deepseek-ai/DeepEP.git)")
        .into()),
    };
    let short = match &src {
        Some(s) => s.short(&rev)?,
        None => rev[..7].to_string(),
    };
    Ok(Revision { cache, src, rev, short })
}

/// Whether pinning `rev` (for `arch`, else both) moves any of `p`'s pins.
fn arches_moved(p: &Pins, arch: Option<Arch>, rev: &str) -> bool {
    arch.map(|a| vec![a]).unwrap_or(Arch::ALL.to_vec()).iter().any(|a| p.pins.get(a).is_none_or(|x| x.rev != rev))
}

/// Everything that can be refused without the source is refused before any fetch:
/// the rewrite itself (label filled in later) and files pin set cannot write.
fn precheck(args: &SetRequest, place: &txn::Place, c: &Consumer, r: &Revision, relock: bool) -> Result<()> {
    let target = edit::Target { rev: &r.rev, arch: args.arch, label: None };
    let moved_py = match c.pins_only {
        true => c.py_text.clone(),
        false => edit::pyproject(&c.py_path, &c.py_text, &c.name, &target)?.0,
    };
    let lock_path = args.place.project.join("uv.lock");
    let relocked = (relock && place.project.exists("uv.lock")).then_some((
        Root::Project,
        Path::new("uv.lock"),
        lock_path.as_path(),
    ));
    let pins_moved = match (&place.pins, &c.pins) {
        (Some((_, name)), Some(p)) if arches_moved(p, args.arch, &r.rev) => {
            Some((Root::Pins, name.as_path(), p.path.as_path()))
        }
        _ => None,
    };
    let py = (moved_py != c.py_text).then_some((Root::Project, Path::new("pyproject.toml"), c.py_path.as_path()));
    precheck_writable(place, &[py, pins_moved, relocked])
}

/// The index's variant and URL (with `--index`), checked before any fetch too.
/// A variant published into another variant's index (pins.toml `index`) is served from that one.
fn index_of(args: &SetRequest, pins: Option<&Pins>) -> Result<(Option<String>, Option<String>)> {
    let index_variant = match (&args.variant, pins) {
        (Some(v), Some(p)) if args.index.is_some() => Some(p.variant(v)?.index_name().to_string()),
        (v, _) => v.clone(),
    };
    let index_url = match &args.index {
        Some(url) => {
            let variant = index_variant.as_deref().expect("clap requires --variant with --index");
            Some(index::index_url(url, variant)?)
        }
        None => None,
    };
    Ok((index_variant, index_url))
}

/// The base version at REV (when a label or pins.toml needs it) and the label
/// `<base>+<short>` (when the consumer has one, or `--index` needs one).
fn version_label(args: &SetRequest, c: &Consumer, r: &Revision) -> Result<(Option<String>, Option<String>)> {
    let old_label = c.before.refs.iter().find(|x| x.kind == Kind::Label).and_then(|x| x.version.clone());
    // The label's base (and pins.toml's base_version) come from the source at REV, never from the old label.
    // `deep_ep==LABEL` needs the label even where the consumer had none (a git or new consumer).
    let wants_label = old_label.is_some() || args.index.is_some();
    let base = if wants_label || c.pins.is_some() {
        Some(match &r.src {
            Some(s) => s.base_version(&r.rev)?.ok_or_else(|| source::no_version(&r.short, &s.given))?,
            None => {
                let repo = repo_of(c.pins.as_ref(), &c.before, &c.py_path)?;
                source::base_version_at(&r.cache, &repo, &r.rev)?
            }
        })
    } else {
        None
    };
    // The index serves the variant's wheel: a variant with source patches is labelled with its
    // set, as pins.toml will list it (after this command's --patch / --drop-patch).
    let patches = match (&args.index, &args.variant, &c.pins) {
        (Some(_), Some(v), Some(p)) if args.patch.is_empty() && args.drop_patch.is_empty() => {
            forge_store::patch::for_variant(p, p.variant(v)?)?
        }
        (Some(_), Some(v), Some(p)) => {
            let text = c.pins_text.as_deref().unwrap_or_default();
            let arches = args.arch.map(|a| vec![a]).unwrap_or_else(|| Arch::ALL.to_vec());
            let edited = patches::edit_list(&p.path, text, &arches, &args.patch, &args.drop_patch)?;
            let edited = Pins::parse(&edited, &p.path)?;
            forge_store::patch::for_variant(&edited, edited.variant(v)?)?
        }
        _ => Vec::new(),
    };
    let label = base.as_ref().filter(|_| wants_label).map(|b| forge_model::patches::label(b, &r.short, &patches));
    // The label is written into a requirement line uv reads: PEP 440 or nothing.
    if let Some(why) = label.as_deref().and_then(|l| forge_model::pep::check_version(l).err()) {
        return Err(Failure::usage(format!("DeepEP's version label {why}"))
            .hint("the source's base version (setup.py, pins.toml source.base_version) must be a PEP 440 version")
            .into());
    }
    Ok((base, label))
}

/// pyproject.toml's new text and the places changed: to the index (`--index`),
/// back to git (`--git`), or the git revision moved.
fn rewrite_pyproject(
    args: &SetRequest,
    c: &Consumer,
    r: &Revision,
    (index_variant, index_url): (Option<&str>, Option<String>),
    label: Option<&str>,
) -> Result<(String, Vec<String>)> {
    let (py_path, py_text, name) = (&c.py_path, &c.py_text, &c.name);
    match (&args.index, args.git) {
        (Some(_), _) => {
            let variant = index_variant.expect("clap requires --variant with --index");
            let url = index_url.expect("checked above");
            let label = label.ok_or_else(|| {
                Failure::usage("cannot tell DeepEP's version label for `deep_ep==LABEL`")
                    .hint("keep a pins.toml (its source.base_version), or pass --source with DeepEP's repository")
            })?;
            let iname = index::index_name(variant);
            let (text, mut places) =
                index::pyproject(py_path, py_text, name, &index::Dest::Index { name: &iname, url: &url, label })?;
            let (text, over) = with_overrides(py_path, text, &url, label)?;
            places.extend(over);
            Ok((text, places))
        }
        (None, true) => {
            let repo = c.pins.as_ref().map(|p| p.source.repo.as_str()).ok_or_else(|| {
                Failure::usage("--git needs pins.toml's source.repo").hint("drop --no-pins, or pass --pins FILE")
            })?;
            index::pyproject(py_path, py_text, name, &index::Dest::Git { repo, rev: &r.rev })
        }
        (None, false) if c.pins_only => Ok((String::new(), Vec::new())),
        (None, false) => edit::pyproject(py_path, py_text, name, &edit::Target { rev: &r.rev, arch: args.arch, label }),
    }
}

/// pins.toml's path, old text and new text.
type PinsEdit = (PathBuf, String, String);

/// The pins.toml edit (None under --no-pins): the revs
/// (and base version) moved, the patches edited, a branch dropped; every
/// patch the moved pins will build with checked to apply at REV.
fn rewrite_pins(args: &SetRequest, c: &Consumer, r: &Revision, base: Option<&str>) -> Result<Option<PinsEdit>> {
    let (Some(p), Some(text)) = (&c.pins, &c.pins_text) else { return Ok(None) };
    let arches: Vec<Arch> = args.arch.map(|a| vec![a]).unwrap_or_else(|| Arch::ALL.to_vec());
    let text = text.clone();
    let base_change = base.filter(|b| *b != p.source.base_version);
    let new = edit::pins(&p.path, &text, &r.rev, &arches, base_change)?;
    let new = patches::edit_list(&p.path, &new, &arches, &args.patch, &args.drop_patch)?;
    let new = match arches_moved(p, args.arch, &r.rev) {
        true => edit::without_branch(&p.path, &new)?,
        false => new,
    };
    let parsed = Pins::parse(&new, &p.path)?; // still valid
                                              // Every patch the moved pins will build with must apply at REV (a scratch index, never the user's checkout).
    if arches.iter().any(|a| parsed.pins.get(a).is_some_and(|x| !x.patches.is_empty())) {
        let dir = match &r.src {
            Some(s) => s.dir.clone(),
            None => forge_store::source::mirror_path(&r.cache, &repo_of(Some(p), &c.before, &c.py_path)?),
        };
        patches::check(&parsed, &arches, &r.rev, &dir, &r.cache.join("tmp"))?;
    }
    Ok(Some((p.path.clone(), text, new)))
}

/// With --arch, the other architecture may keep another revision: one static label cannot serve both.
fn label_split(after: &pyproject::Pyproject, rev: &str) -> bool {
    after.refs.iter().any(|r| {
        matches!(r.kind, Kind::Requirement | Kind::Source)
            && r.git.as_ref().and_then(|g| g.rev.as_deref()).is_some_and(|r| r != rev)
    }) && after.refs.iter().any(|r| r.kind == Kind::Label)
}

/// The files the change writes, each resolved (a symlink's target is
/// written, never one out of its folder), checked writable, its old bytes
/// kept; uv.lock (with --relock) is kept to be restored, never written here.
fn changes(
    place: &txn::Place,
    c: &Consumer,
    new_py: &str,
    new_pins: Option<&PinsEdit>,
    relock: bool,
) -> Result<Vec<txn::Change>> {
    let mut changes = Vec::new();
    let mut add = |(root, named, shown): FileAt, old: Option<Vec<u8>>, new: Option<Vec<u8>>| -> Result<()> {
        let rel = place.resolve(root, named, shown)?.unwrap_or_else(|| named.to_path_buf());
        if rel != named {
            let real = match root {
                Root::Project => place.project.join(&rel),
                Root::Pins => place.pins.as_ref().map_or_else(|| rel.clone(), |(t, _)| t.join(&rel)),
            };
            forge_os::note!("note: {} is a symlink; its target {} is written", shown.display(), real.display());
        }
        let c = txn::Change { shown: shown.to_path_buf(), root, named: named.to_path_buf(), rel, old, new };
        txn::check_writable(place, &c)?;
        changes.push(c);
        Ok(())
    };
    if new_py != c.py_text {
        let py = (Root::Project, Path::new("pyproject.toml"), c.py_path.as_path());
        add(py, Some(c.py_text.clone().into_bytes()), Some(new_py.as_bytes().to_vec()))?;
    }
    if let (Some((path, old, new)), Some((_, name))) = (new_pins, &place.pins) {
        if old != new {
            add((Root::Pins, name, path), Some(old.clone().into_bytes()), Some(new.clone().into_bytes()))?;
        }
    }
    if relock {
        let shown = shown_lock(c);
        let at = (Root::Project, Path::new("uv.lock"), shown.as_path());
        let old = place.read_text(Root::Project, Path::new("uv.lock"), &shown, forge_os::input::cap::LOCK)?;
        add(at, old.map(String::into_bytes), None)?;
    }
    Ok(changes)
}

/// uv.lock as messages name it: beside pyproject.toml.
fn shown_lock(c: &Consumer) -> PathBuf {
    c.py_path.with_file_name("uv.lock")
}

/// The consumer's Dockerfiles (those `lock check` reads) whose DeepEP pin moves with
/// pins.toml's: each rewritten in the same transaction (only the pin's own tokens),
/// or the change refused before anything is written (`lock::dockerfile::moved`).
fn dockerfiles(args: &SetRequest, place: &txn::Place, c: &Consumer, r: &Revision) -> Result<Vec<txn::Change>> {
    let Some(pins) = c.pins.as_ref() else { return Ok(Vec::new()) };
    let old: std::collections::BTreeMap<Arch, String> = pins.pins.iter().map(|(a, p)| (*a, p.rev.clone())).collect();
    let mut new = old.clone();
    for a in args.arch.map(|a| vec![a]).unwrap_or(Arch::ALL.to_vec()) {
        new.insert(a, r.rev.clone());
    }
    if new == old {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for f in crate::lock::dockerfile::discover(&place.project, &args.place.project, &[])? {
        let Some(rel) = f.rel else { continue };
        let Some(moved) = crate::lock::dockerfile::moved(&f.text, &f.path, Some(pins), &old, &new)? else { continue };
        let change = txn::Change {
            shown: f.path.clone(),
            root: Root::Project,
            named: rel.clone(),
            rel,
            old: Some(f.text.into_bytes()),
            new: Some(moved.into_bytes()),
        };
        txn::check_writable(place, &change)?;
        forge_os::note!("note: {}: its DeepEP pin moves with pins.toml", f.path.display());
        out.push(change);
    }
    Ok(out)
}

/// The command that does this change again (kept with the transaction, printed
/// in every hint): [`SetRequest::command_line`] at the resolved revision.
fn again_command(args: &SetRequest, rev: &str) -> String {
    args.command_line(rev)
}

impl SetRequest {
    /// This request as a `deepep-forge pin set` command line at `rev`: every
    /// flag the user gave, each value shell-quoted. The one renderer of a
    /// rerun: a hint or fix that says "run pin set again" prints this, so it
    /// cannot drop `--index`, `--variant`, `--source` or `--relock`.
    pub fn command_line(&self, rev: &str) -> String {
        // Carried only when given as a flag: $DEEPEP_FORGE_CACHE_DIR reaches the rerun by itself.
        let inherited = forge_os::environ::var_os("DEEPEP_FORGE_CACHE_DIR").map(PathBuf::from);
        crate::lock::PinSetLine {
            rev,
            source: self.source.as_deref(),
            arch: self.arch,
            project: Some(&self.place.project),
            pins: (!self.place.no_pins).then_some(self.place.pins.as_path()),
            cache_dir: self.cache_dir.as_deref().filter(|d| inherited.as_deref() != Some(*d)),
            index: self.index.as_deref().zip(self.variant.as_deref()),
            git: self.git,
            patch: &self.patch,
            drop_patch: &self.drop_patch,
            relock: self.relock,
        }
        .render()
    }
}

/// What was pinned, where, and the label (see [`Pinned`]).
fn pinned(
    args: &SetRequest,
    c: &Consumer,
    r: &Revision,
    (places, label, new_pins, split): (Vec<String>, Option<String>, Option<&PinsEdit>, bool),
) -> Pinned {
    let which = args.arch.map(|a| a.to_string()).unwrap_or_else(|| "x86_64 and aarch64".into());
    Pinned {
        rev: r.rev.clone(),
        short: r.short.clone(),
        pyproject: c.py_path.clone(),
        places: (!c.pins_only).then_some(places),
        label,
        pins: new_pins.map(|(path, old, new)| (path.clone(), old != new)),
        branch_note: new_pins.and_then(|(path, _, new)| branch_note(c.pins.as_ref(), path, new, &r.short)),
        split: split.then(|| which.clone()),
        arches: which,
    }
}

/// ` --pins FILE` when it is not the default.
fn pins_flag(args: &SetRequest) -> String {
    match args.place.pins != Path::new(forge_model::pins::DEFAULT_PATH) {
        true => format!(" --pins {}", forge_os::printer::shell_word(&args.place.pins.display().to_string())),
        false => String::new(),
    }
}

/// The `lock check` to run after relocking, and its command line.
fn lock_check_of(args: &SetRequest) -> (crate::lock::CheckRequest, String) {
    let mut check =
        crate::lock::CheckRequest::new(&args.place.project, (!args.place.no_pins).then_some(&*args.place.pins));
    // From an index: its signed manifest, where the reader trusts keys (else `index-not-verified`).
    if args.index.is_some() && forge_store::cache::config::trusted_keys(&[]).is_ok_and(|k| !k.is_empty()) {
        check.index_manifests.push("index".into());
    }
    check.source = args.source.clone();
    check.cache_dir = forge_store::cache::resolve_dir(args.cache_dir.as_deref()).ok();
    let check_cmd = format!(
        "deepep-forge lock check --project {}{}",
        args.place.project.display(),
        if args.place.no_pins {
            " --no-pins".to_string()
        } else if args.place.pins != Path::new(forge_model::pins::DEFAULT_PATH) {
            format!(" --pins {}", args.place.pins.display())
        } else {
            String::new()
        }
    );
    (check, check_cmd)
}

/// The `uv lock` of a moved pin: the project's lock, DeepEP's index pages
/// asked again (`--refresh-package`: a revision published since uv cached
/// the page is seen), run by `--relock` and printed for a hand run alike.
struct UvLock {
    project: PathBuf,
    /// DeepEP's package name (validated: never an option), when it comes from an index.
    refresh: Option<String>,
}

impl UvLock {
    /// The arguments after `uv`, run in the project.
    fn args(&self) -> Vec<&str> {
        let mut a = vec!["lock"];
        if let Some(p) = &self.refresh {
            a.extend(["--refresh-package", p.as_str()]);
        }
        a
    }

    /// As printed: `uv lock --project P [--refresh-package NAME]`.
    fn command_line(&self) -> String {
        let project = forge_os::printer::shell_word(&self.project.display().to_string());
        match &self.refresh {
            Some(p) => format!("uv lock --project {project} --refresh-package {p}"),
            None => format!("uv lock --project {project}"),
        }
    }
}

/// --relock: real uv, then commit. Ctrl-C/SIGTERM stop uv; every file is
/// then restored (exit 130), as on a failed `uv lock`.
fn relock(lock: &UvLock, uv: &Path, t: txn::Txn, again: &str, check_cmd: &str) -> Result<()> {
    let project = &lock.project;
    forge_os::note!("running {} {} in {} ...", uv.display(), lock.args().join(" "), project.display());
    let out = forge_os::process::Cmd::new(uv, format!("relock {} with uv", project.display()))
        .args(lock.args())
        .dir(t.tree(Root::Project).path())
        .capture();
    let failed = !out.as_ref().is_ok_and(|o| o.status.success());
    if failed || forge_os::error::check_interrupted().is_err() {
        // All or nothing: every file back as it was (uv.lock too).
        t.rollback()?;
        forge_os::error::check_interrupted()?;
        let why = match &out {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => format!("{e:#}"),
        };
        return Err(Failure::problems(format!(
            "`uv lock` failed in {}; pyproject.toml, pins.toml and uv.lock were restored:\n{why}",
            project.display()
        ))
        .hint(format!(
            "fix what uv reports, then run `{again}` again, or by hand: {} && {check_cmd}",
            lock.command_line()
        ))
        .into());
    }
    commit_unless_interrupted(t)
}

/// `pin set` moved the pin and removed pins.toml's `source.branch`: which branch a commit is
/// on is not in its source (and what it is, EPv2 or HybridEP, is read from its setup.py).
fn branch_note(pins: Option<&Pins>, path: &Path, new: &str, short: &str) -> Option<String> {
    let b = pins.and_then(|p| p.source.branch.as_deref())?;
    Pins::parse(new, path).is_ok_and(|p| p.source.branch.is_none()).then(|| format!(
        "note: {}: source.branch `{}` removed: which branch {short} is on is not in its source (what it is, EPv2 or HybridEP, is read from its setup.py; the branch name decides nothing)",
        path.display(),
        forge_os::input::excerpt(b, 60)
    ))
}

/// `[tool.uv] override-dependencies` for the exact NCCL/NVSHMEM the index's
/// wheels of `label` require (`closure`); an index whose wheels cannot be read
/// is a warning (nothing written for them: uv's lock says what conflicts).
fn with_overrides(py_path: &Path, text: String, simple: &str, label: &str) -> Result<(String, Vec<String>)> {
    let same = |v: &str| match (v.parse::<pep440_rs::Version>(), label.parse::<pep440_rs::Version>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => v == label,
    };
    let wheels = match forge_store::index::closure::requires(simple, |w| same(&w.provenance.version)) {
        Ok(w) => w,
        Err(e) => {
            forge_os::alert!(
                "warning: cannot read the run-time requirements of deep_ep {label} from the index ({e}); no override-dependencies written"
            );
            return Ok((text, Vec::new()));
        }
    };
    let over = closure::overrides(&wheels)?;
    if over.is_empty() {
        return Ok((text, Vec::new()));
    }
    let new = closure::write(py_path, &text, &over)?;
    Ok((new, vec![format!("[tool.uv] override-dependencies {}", over.join(", "))]))
}
