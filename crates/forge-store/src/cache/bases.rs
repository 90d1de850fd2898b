//! The podman/buildah base images' files in the cache, as `cache ls` and
//! `cache gc` see them: `<cache>/images/base-<key16>/` holds the debootstrap
//! rootfs (`rootfs.tar`) and its record (`base.json`), made under the flock
//! `images/base-<key16>.lock`; `images/debs/` is debootstrap's .deb cache and
//! `images/*.log` its logs. Read here without depending on the code that
//! writes them (`docker::base`): the cache does not import `docker`.
//!
//! Removing a base removes only these files: the images imported from it stay
//! in podman's (or buildah's) own store, which is not ours to delete (the
//! caller says how: [`podman_hint`]). A base whose lock is held is being made
//! or used and is kept. Must not run podman or buildah.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{BadEntry, Cache, Key};
use forge_os::fs::{Kind, Tree};

/// The largest base.json read (a real one is under 1 KiB).
pub const MAX_RECORD_BYTES: u64 = 64 * 1024;
/// The base.json schema this reads (`docker::base`'s `SCHEMA`).
pub const RECORD_SCHEMA: u32 = 1;

/// One base folder as `cache ls` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Base {
    /// The first 16 digits of the key, as the folder and the image tags name it.
    pub key16: String,
    pub key: String,
    pub suite: String,
    pub arch: String,
    pub mirror: String,
    /// The `Date:` of the suite's Release file when the base was made.
    pub release_date: String,
    /// Bytes of rootfs.tar (0 when it is missing).
    pub rootfs_bytes: u64,
    /// Bytes of every regular file in the folder.
    pub bytes: u64,
    /// When the base was made (base.json's modification time).
    pub created_secs: i64,
    #[serde(skip)]
    pub dir: PathBuf,
}

/// What `images/` holds.
#[derive(Debug, Default)]
pub struct BaseListing {
    /// Good bases, newest first.
    pub bases: Vec<Base>,
    pub bad: Vec<BadEntry>,
    /// Bytes of every regular file under `images/` (bases, .deb cache, logs, locks).
    pub bytes: u64,
    /// Bytes of `images/debs/` and the logs (kept by `cache gc`; debootstrap reuses the .debs).
    pub other_bytes: u64,
}

/// base.json as `docker::base` writes it (the fields listed; others ignored).
#[derive(Debug, Deserialize)]
struct Record {
    schema: u32,
    key: String,
    suite: String,
    mirror: String,
    arch: String,
    release_date: String,
}

/// What removing a base did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    Gone,
    /// Its lock is held: a base is being made or read from it.
    InUse,
}

/// `images/` of the cache as a tree (`None`: absent); a link or a file in its place is refused.
fn images(cache: &Cache) -> Result<Option<Tree>> {
    let Some(tree) = cache.existing()? else { return Ok(None) };
    match tree.kind("images")? {
        Kind::Missing => Ok(None),
        Kind::Dir => Ok(Some(tree.sub("images", "image bases folder")?)),
        k => bail!("{} is {} (a link is never followed)", tree.join("images").display(), k.noun()),
    }
}

/// The key prefix of a folder name `base-<16 lowercase hex>` (its lock file is not one).
fn key16(name: &str) -> Option<&str> {
    let k = name.strip_prefix("base-")?;
    (k.len() == 16 && k.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(k)
}

/// The shell command that removes the images a base was imported as (`cache gc` never does).
pub fn podman_hint(key16: &str) -> String {
    format!(
        "podman rmi localhost/deepep-forge-debian:{key16} (and the CUDA layers made from it: podman images localhost/deepep-forge-cuda)"
    )
}

/// Every base folder under `images/`, the folders that are not bases, and the bytes.
pub fn list(cache: &Cache) -> BaseListing {
    let mut out = BaseListing::default();
    let images = match images(cache) {
        Ok(Some(t)) => t,
        Ok(None) => return out,
        Err(e) => {
            out.bad.push(BadEntry::new(
                "images",
                "",
                format!("not read: not a folder (a link is never followed): {e:#}"),
            ));
            return out;
        }
    };
    out.bytes = super::disk_size_in(&images, Path::new("."));
    for name in images.names(".").unwrap_or_default() {
        if name == "debs" || name.ends_with(".log") {
            out.other_bytes = out.other_bytes.saturating_add(super::disk_size_in(&images, Path::new(&name)));
            continue;
        }
        if !name.starts_with("base-") || name.ends_with(".lock") {
            continue;
        }
        match read_base(&images, &name) {
            Ok(b) => out.bases.push(b),
            Err(why) => out.bad.push(BadEntry::new("images", &name, format!("{why:#}"))),
        }
    }
    out.bases.sort_by(|a, b| b.created_secs.cmp(&a.created_secs).then(a.key.cmp(&b.key)));
    out
}

/// One base folder: a real folder named `base-<key16>` with a valid base.json for that key.
fn read_base(images: &Tree, name: &str) -> Result<Base> {
    let k16 = key16(name).context("not base-<16 lowercase hex digits>")?;
    if images.kind(name)? != Kind::Dir {
        bail!("not a folder (a link or a file): not read");
    }
    let dir = Path::new(name);
    let path = dir.join("base.json");
    let st = images.stat(&path).context("no base.json (an unfinished or foreign folder)")?;
    let text = super::read_nofollow(images, &path, MAX_RECORD_BYTES)?.context("base.json gone while listed")?;
    let r: Record = serde_json::from_slice(&text).context("base.json is not a base record")?;
    check_record(&r, k16)?;
    let rootfs = match images.kind(dir.join("rootfs.tar")) {
        Ok(Kind::File { len }) => len,
        _ => 0,
    };
    Ok(Base {
        key16: k16.to_string(),
        key: r.key,
        suite: r.suite,
        arch: r.arch,
        mirror: r.mirror,
        release_date: r.release_date,
        rootfs_bytes: rootfs,
        bytes: super::disk_size_in(images, dir),
        created_secs: st.mtime,
        dir: images.join(dir),
    })
}

/// The record's schema, its key (for this folder), and its text fields: bounded, no
/// control characters (they are printed).
fn check_record(r: &Record, k16: &str) -> Result<()> {
    if r.schema != RECORD_SCHEMA {
        bail!("base.json schema {} (this deepep-forge reads {RECORD_SCHEMA})", r.schema);
    }
    Key::parse(&r.key).map_err(|e| anyhow::anyhow!("base.json: {e}"))?;
    if !r.key.starts_with(k16) {
        bail!("base.json names the key {}, not base-{k16}", super::excerpt(&r.key));
    }
    for (field, v, max) in [
        ("suite", &r.suite, 32),
        ("arch", &r.arch, 16),
        ("mirror", &r.mirror, 1024),
        ("release_date", &r.release_date, 64),
    ] {
        if v.is_empty() || v.len() > max || v.chars().any(char::is_control) {
            bail!("base.json: {field} `{}` is not 1 to {max} printable characters", super::excerpt(v));
        }
    }
    Ok(())
}

/// Remove the base folder `b` unless its lock is held. The folder is renamed out of
/// the `images/` folder opened without following a link, into a staging folder,
/// then deleted there (no link inside is followed). The lock file stays: a maker
/// waiting on it would otherwise lock a name nobody else sees.
pub fn remove(cache: &Cache, b: &Base) -> Result<Removed> {
    let Some(images) = images(cache)? else { return Ok(Removed::Gone) };
    let Some(_lock) = super::lock::try_exclusive_in(&images, format!("base-{}.lock", b.key16))? else {
        return Ok(Removed::InUse);
    };
    let name = format!("base-{}", b.key16);
    match images.kind(&name)? {
        Kind::Missing => return Ok(Removed::Gone),
        Kind::Dir => {}
        _ => bail!("{} is not a folder (a link or a file): not removed", images.join(&name).display()),
    }
    let stage = cache.stage()?;
    images
        .rename_to(&name, stage.tree(), "gone")
        .with_context(|| format!("removing {}", images.join(&name).display()))?;
    Ok(Removed::Gone)
}
