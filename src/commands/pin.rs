//! `pin set|recover`: the flags, turned into `pinset::{SetRequest, RecoverRequest}`;
//! the project and the pins file's folder opened as trees (the one place their
//! paths become ones); what was done printed, and the exit code.
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::args::{CacheDirArg, ProjectArgs};
use forge_lock::lock::ProjectPlace;
use forge_lock::pinset::{Folders, Next, Pinned, RecoverRequest, SetRequest};
use forge_os::error::{Exit, Failure};
use forge_os::fs::Tree;

#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The new DeepEP revision: a full 40-hex commit, or a short sha, branch or
    /// tag that --source resolves (short revisions are never guessed).
    pub rev: String,
    /// Pin only this architecture (x86_64 or aarch64): only requirements whose marker selects it
    /// change. Without it both architectures get one unmarked requirement per place.
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<forge_model::pins::Arch>,
    #[command(flatten)]
    pub place: ProjectArgs,
    /// A DeepEP git checkout (PATH) or URL: resolves short revisions, gives the
    /// short sha as `git rev-parse --short` prints it and the label's base version
    /// at the new revision. Without it the revision is fetched from pins.toml's
    /// repository (under --no-pins, pyproject.toml's) into the cache's git mirror,
    /// as `plan` does; a source that cannot be read is exit 3, never a guess.
    #[arg(long, value_name = "PATH|URL")]
    pub source: Option<String>,
    /// Run `uv lock` in the project afterwards (uv from $DEEPEP_FORGE_UV or PATH),
    /// then `lock check`; without it the exact commands are printed. All or nothing:
    /// if uv fails, or on Ctrl-C/SIGTERM, pyproject.toml, pins.toml and uv.lock are
    /// put back as they were (after a kill, `pin recover` does it).
    #[arg(long)]
    pub relock: bool,
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Install DeepEP from the package index `deepep-forge publish` wrote, served at URL
    /// (its base: https://, file://, or http:// on 127.0.0.1): requirements become
    /// `deep_ep==LABEL`, a named `[[tool.uv.index]]` (explicit) and `[tool.uv.sources]`
    /// entry point at `URL/<variant>/simple`, the DeepEP dependency-metadata is dropped.
    #[arg(long, value_name = "URL", requires = "variant", conflicts_with_all = ["git", "arch"])]
    pub index: Option<String>,
    /// The variant whose index the consumer installs from (with --index).
    #[arg(long, value_name = "NAME", requires = "index")]
    pub variant: Option<String>,
    /// Back from an index to DeepEP's git source (pins.toml's repository) at REV.
    #[arg(long, conflicts_with = "arch")]
    pub git: bool,
    /// Add a source patch (a file beside or below pins.toml) to the moved pins'
    /// `patches`, with its sha256 (repeatable; checked to apply at REV).
    #[arg(long = "patch", value_name = "FILE")]
    pub patch: Vec<PathBuf>,
    /// Remove the source patch listed as NAME from the moved pins' `patches` (repeatable).
    #[arg(long = "drop-patch", value_name = "NAME")]
    pub drop_patch: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct RecoverArgs {
    #[command(flatten)]
    pub place: ProjectArgs,
}

impl SetArgs {
    /// The plain request `pinset::set` takes.
    pub fn request(self) -> SetRequest {
        SetRequest {
            rev: self.rev,
            arch: self.arch,
            place: self.place.place(),
            source: self.source,
            relock: self.relock,
            cache_dir: self.cache.cache_dir,
            index: self.index,
            variant: self.variant,
            git: self.git,
            patch: self.patch,
            drop_patch: self.drop_patch,
        }
    }
}

impl RecoverArgs {
    /// The plain request `pinset::recover` takes.
    pub fn request(self) -> RecoverRequest {
        RecoverRequest { place: self.place.place() }
    }
}

/// The project folder, and the pins file's folder unless --no-pins (a
/// missing one is "pins file not found", as every command says it).
fn folders(place: &ProjectPlace) -> Result<Folders> {
    let project = Tree::open(&place.project, "project")?;
    if place.no_pins {
        return Ok(Folders { project, pins: None });
    }
    let dir = place.pins.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let pins = Tree::open(dir, "pins folder").map_err(|_| {
        Failure::usage(format!("pins file not found: {}", place.pins.display()))
            .hint("pass --pins FILE, run from the directory that holds pins.toml, or use --no-pins where the command offers it")
    })?;
    Ok(Folders { project, pins: Some(pins) })
}

/// `deepep-forge pin set`: move the pin, print what moved, then finish (commit,
/// or relock and check).
pub fn set(a: SetArgs) -> Result<Exit> {
    let req = a.request();
    let folders = folders(&req.place)?;
    let applied = forge_lock::pinset::set(req, &folders)?;
    print_pinned(&applied.pinned);
    match applied.finish()? {
        Next::Plan(pins) => forge_os::outln!("next: deepep-forge plan --all{pins}"),
        Next::Commands { command, key_note } => {
            if key_note {
                forge_os::note!("{}", forge_lock::pinset::KEY_NOTE);
            }
            forge_os::outln!("next: {command}");
        }
        Next::Relocked(check) => {
            forge_os::outln!("uv lock: ok");
            let report = forge_lock::lock::run_check(&check, &folders.project)?;
            forge_os::out!("{}", forge_model::findings::render_human(&report.findings));
            forge_os::outln!(
                "lock check: {} error(s), {} warning(s), {} note(s)",
                report.errors,
                report.warnings,
                report.notes
            );
            return Ok(if report.errors > 0 { Exit::Problems } else { Exit::Ok });
        }
    }
    Ok(Exit::Ok)
}

/// What moved, where, and the label; a label split is warned about.
fn print_pinned(p: &Pinned) {
    forge_os::outln!("pinned DeepEP {} ({}) for {}", p.rev, p.short, p.arches);
    match &p.places {
        None => forge_os::outln!("{}: none (pins.toml alone)", p.pyproject.display()),
        Some(places) if places.is_empty() => forge_os::outln!("{}: already at that revision", p.pyproject.display()),
        Some(places) => forge_os::outln!("{}: {}", p.pyproject.display(), places.join(", ")),
    }
    if let Some(l) = &p.label {
        forge_os::outln!("label: {l}");
    }
    if let Some((path, changed)) = &p.pins {
        forge_os::outln!("{}: {}", path.display(), if *changed { "updated" } else { "already at that revision" });
    }
    if let Some(n) = &p.branch_note {
        forge_os::note!("{n}");
    }
    if let Some(which) = &p.split {
        forge_os::alert!("{}: the other architecture keeps another revision, so the one static dependency-metadata label fits only {which}; `lock check` will report label-split", forge_os::printer::label("warning"));
    }
}

/// `deepep-forge pin recover`: every file back as it was, a line each.
pub fn recover(a: RecoverArgs) -> Result<Exit> {
    let req = a.request();
    let folders = folders(&req.place)?;
    for line in forge_lock::pinset::recover(req, &folders)? {
        forge_os::outln!("{line}");
    }
    Ok(Exit::Ok)
}
