//! Source patches in a build: a variant's set read and checked
//! (`for_variant`: its pin's patches, then its own), checked to apply at the
//! pinned revision before any toolchain or submodule work (`check_applies`: a
//! scratch index of the revision's tree in the mirror, never a checkout of
//! the user's), and applied in order to the fresh build tree after checkout
//! and submodules, before anything compiles (`apply`). git apply runs through
//! `process::git` with its own safety on (no `--unsafe-paths`: nothing
//! outside the tree, nothing through a symbolic link), after
//! `patches::inspect` refused binary hunks, links and escaping paths. Must not
//! decide what a patch is for.
use std::path::Path;

use anyhow::Result;

use crate::source;
use forge_model::patches;
use forge_model::pins::{Pins, Variant};
use forge_os::error::Failure;
use forge_os::fs::Tree;
use forge_wheel::provenance::SourcePatch;

/// The patches of a build of `v`: its pin's, then the variant's, read beside pins.toml.
pub fn for_variant(pins: &Pins, v: &Variant) -> Result<Vec<SourcePatch>> {
    let pin = pins.pin(v.arch)?;
    let entries: Vec<&patches::Entry> = pin.patches.iter().chain(&v.patches).collect();
    patches::load(&pins.path, &entries)
}

/// The version label a build of `v` gets (`patches::label` over its patch set): what the
/// wheel, the bake file and the image carry.
pub fn variant_label(pins: &Pins, v: &Variant) -> Result<String> {
    Ok(patches::label(&pins.source.base_version, pins.pin(v.arch)?.short(), &for_variant(pins, v)?))
}

/// What `patch` does at `rev`, in a scratch index of the revision's tree (which already
/// holds the earlier patches of the set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    Applies,
    /// The revision already contains it: it applies in reverse.
    Contained,
    /// git's words: the file and the hunk that failed.
    Fails(String),
    /// It applies, but what git made of it touches a link or submodule (created,
    /// retargeted, a mode change to or from one, or a write below one).
    Refused(String),
}

/// What the patches applied so far in the scratch index did, as git read them
/// (not a text match): the first path whose old or new mode is a symbolic link
/// or submodule, or that lies below a link of the pinned tree or of the
/// result. `None`: no link touched.
fn links_touched(git: &dyn Fn(&str) -> forge_os::process::Cmd, rev: &str) -> Result<Option<String>> {
    let raw = git("read what the patches changed")
        .args(["diff-index", "--cached", "--raw", "-z", "--no-renames", rev, "--"])
        .output()?;
    let mut changed = Vec::new();
    let mut fields = raw.split('\0');
    while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
        let mut m = meta.trim_start_matches(':').split(' ');
        let (old, new) = (m.next().unwrap_or(""), m.next().unwrap_or(""));
        for mode in [old, new] {
            if u32::from_str_radix(mode, 8).map_or(true, patches::is_link_or_submodule) && mode != "000000" {
                return Ok(Some(format!(
                    "`{}`: git reads it as a symbolic link or submodule (mode {old} -> {new}): a patch may not create, retarget or change one",
                    forge_os::input::excerpt(path, 120)
                )));
            }
        }
        changed.push(path.to_string());
    }
    let tree = git("list the pinned tree's links").args(["ls-tree", "-r", "-z", rev]).output()?;
    let index = git("list the patched tree's links").args(["ls-files", "-s", "-z"]).output()?;
    let links: Vec<&str> = tree
        .split('\0')
        .chain(index.split('\0'))
        .filter_map(|e| e.split_once('\t'))
        .filter(|(meta, _)| {
            meta.split(' ')
                .next()
                .and_then(|m| u32::from_str_radix(m, 8).ok())
                .is_some_and(patches::is_link_or_submodule)
        })
        .map(|(_, path)| path)
        .collect();
    for path in &changed {
        if let Some(link) = links.iter().find(|l| path.strip_prefix(**l).is_some_and(|r| r.starts_with('/'))) {
            return Ok(Some(format!(
                "`{}` lies beyond the symbolic link or submodule `{}`: a patch may not write through one",
                forge_os::input::excerpt(path, 120),
                forge_os::input::excerpt(link, 120)
            )));
        }
    }
    Ok(None)
}

/// Apply `set` in order to a scratch index of `rev`'s tree in the repository `mirror`
/// (a bare mirror, or a `--source` checkout: nothing in it is written); each patch's fit.
/// `scratch` is an empty folder of ours (the index, new objects and patch files go there).
pub fn fits(mirror: &Path, rev: &str, set: &[SourcePatch], scratch: &Path) -> Result<Vec<Fit>> {
    anyhow::ensure!(forge_model::pins::is_full_sha(rev), "refusing to read `{rev}`: not a full commit sha");
    let index = scratch.join("index");
    // New objects (the patched blobs) go to the scratch folder, never into the repository.
    let common = source::git(mirror, "find the repository's objects")
        .args(["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .output()?;
    let objects = Path::new(common.trim()).join("objects");
    let scratch_tree = Tree::open(scratch, "scratch folder")?;
    scratch_tree.create_dir_all("objects")?;
    let scratch_objects = scratch_tree.join("objects");
    let git = |purpose: &str| {
        let mut c = source::git(mirror, purpose.to_string());
        c.env("GIT_INDEX_FILE", &index)
            .env("GIT_OBJECT_DIRECTORY", &scratch_objects)
            .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", &objects);
        c
    };
    git("read the pinned tree into a scratch index").args(["read-tree", rev]).output()?;
    let mut out = Vec::new();
    for (n, p) in set.iter().enumerate() {
        let file = write_patch(&scratch_tree, n, p)?;
        let applied = git(&format!("apply patch {}", p.name)).args(apply_args(true, &[])).arg(&file).capture()?;
        if applied.status.success() {
            out.push(match links_touched(&git, rev)? {
                Some(why) => Fit::Refused(why),
                None => Fit::Applies,
            });
            continue;
        }
        let reverse = git(&format!("reverse-check patch {}", p.name))
            .args(apply_args(true, &["--check", "-R"]))
            .arg(&file)
            .capture()?;
        out.push(if reverse.status.success() {
            Fit::Contained
        } else {
            Fit::Fails(String::from_utf8_lossy(&applied.stderr).trim().to_string())
        });
    }
    Ok(out)
}

/// `set` applies at `rev`, in order: else exit 2 naming the patch and git's file and hunk.
pub fn check_applies(mirror: &Path, rev: &str, set: &[SourcePatch], scratch: &Path) -> Result<()> {
    for (p, fit) in set.iter().zip(fits(mirror, rev, set, scratch)?) {
        refuse(p, rev, &fit)?;
    }
    Ok(())
}

/// A patch that does not fit `rev` as an error (exit 2), or nothing.
pub fn refuse(p: &SourcePatch, rev: &str, fit: &Fit) -> Result<()> {
    let short = &rev[..rev.len().min(7)];
    match fit {
        Fit::Applies => Ok(()),
        Fit::Contained => {
            Err(Failure::usage(format!("patch `{}` is already contained in {short}: it applies in reverse", p.name))
                .hint(format!("drop it: remove \"{}\" from the patches list in pins.toml", p.name))
                .into())
        }
        Fit::Refused(why) => Err(Failure::usage(format!("patch `{}` is refused at {short}: {why}", p.name))
            .hint("a patch changes the contents of regular files only; make link changes in a fork")
            .into()),
        Fit::Fails(why) => Err(Failure::usage(format!(
            "patch `{}` does not apply at {short}: {}",
            p.name,
            forge_os::input::excerpt(why, 400)
        ))
        .hint("refresh the patch against the pinned revision (git apply -3, then git diff), or move the pin back")
        .into()),
    }
}

/// Apply `set` in order to the checked-out `tree` (files written to `dir`, outside the tree).
pub fn apply(tree: &Path, set: &[SourcePatch], dir: &Path) -> Result<()> {
    if set.is_empty() {
        return Ok(());
    }
    let dir = Tree::create(dir, "patch folder")?;
    for (n, p) in set.iter().enumerate() {
        let file = write_patch(&dir, n, p)?;
        let o =
            source::git(tree, format!("apply patch {}", p.name)).args(apply_args(false, &[])).arg(&file).capture()?;
        if !o.status.success() {
            let why = String::from_utf8_lossy(&o.stderr);
            return Err(Failure::usage(format!(
                "patch `{}` does not apply to the build tree: {}",
                p.name,
                forge_os::input::excerpt(why.trim(), 400)
            ))
            .into());
        }
    }
    Ok(())
}

/// `git apply` with the user's configuration overridden where it changes what applies.
fn apply_args(cached: bool, extra: &[&'static str]) -> Vec<&'static str> {
    let mut a = vec!["-c", "apply.whitespace=nowarn", "apply", "--whitespace=nowarn", "-p1"];
    if cached {
        a.push("--cached");
    }
    a.extend(extra);
    a.push("--");
    a
}

/// The patch `p` as the file `<n>.patch` of `dir` (for git); its path.
fn write_patch(dir: &Tree, n: usize, p: &SourcePatch) -> Result<std::path::PathBuf> {
    let name = format!("{n:02}.patch");
    dir.write(&name, p.text.as_bytes())?;
    Ok(dir.join(name))
}
