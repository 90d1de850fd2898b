//! `publish --check DIR`: a published index verified against pins.toml and
//! the keys the reader trusts. Every selected variant (default: all) must
//! have a manifest signed by a trusted key, listing a wheel at pins.toml's
//! revision for the variant's architecture; every listed file must be there
//! with the signed digests (wheel, `.metadata` = the wheel's METADATA,
//! `.intoto.json` = the statement of the wheel's own provenance); the pages
//! must be what the manifest renders to; anything else is foreign (reported,
//! never deleted). Must not write.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::manifest::{self, Manifest, WheelEntry, PROJECT};
use super::{facts, pages};
use crate::cache::sign::PublicKey;
use crate::error::{Exit, Failure};
use crate::pins::{Pins, Variant};

/// Most entries walked under one index folder before giving up.
const MAX_FILES: usize = 100_000;

/// `publish --check DIR`.
pub fn run(c: &crate::builder::Common, dir: &Path) -> Result<Exit> {
    let pins = Pins::load(&c.pins)?;
    let pins_sha256 = facts::sha256_hex(&crate::input::read_bytes(&c.pins, "pins file", crate::input::cap::TEXT)?);
    let trusted = crate::cache::config::trusted_keys(&c.remote.trusted_keys)?;
    if trusted.is_empty() {
        return Err(Failure::usage("publish --check trusts no key: a manifest signed by anyone would do")
            .hint("name the publisher's key: --trusted-key NAME:BASE64 (or DEEPEP_FORGE_TRUSTED_KEYS)")
            .into());
    }
    if !dir.is_dir() {
        return Err(Failure::usage(format!("{}: not a folder", dir.display())).into());
    }
    let selected: Vec<&Variant> = if c.variants.is_empty() {
        pins.variants.iter().collect()
    } else {
        c.variants.iter().map(|n| pins.variant(n)).collect::<Result<_>>()?
    };
    let mut problems = Vec::new();
    for v in &selected {
        check_variant(dir, v, &pins, &pins_sha256, &trusted, &mut problems);
    }
    let known: BTreeSet<&str> = pins.variants.iter().map(|v| v.name.as_str()).collect();
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !known.contains(name.as_str()) {
            problems
                .push(format!("{}: foreign (no variant of pins.toml has this name; not deleted)", e.path().display()));
        }
    }
    if problems.is_empty() {
        crate::outln!("{}: ok ({} variant(s), signed, every file as its manifest says)", dir.display(), selected.len());
        return Ok(Exit::Ok);
    }
    for p in &problems {
        crate::outln!("{p}");
    }
    crate::outln!("{}: {} problem(s)", dir.display(), problems.len());
    Ok(Exit::Problems)
}

fn check_variant(
    dir: &Path,
    v: &Variant,
    pins: &Pins,
    pins_sha256: &str,
    trusted: &[PublicKey],
    out: &mut Vec<String>,
) {
    let vdir = dir.join(&v.name);
    let mpath = vdir.join(manifest::FILE);
    if !vdir.is_dir() {
        out.push(format!(
            "{}: missing (variant {} is not published; run `deepep-forge publish --variant {}`)",
            vdir.display(),
            v.name,
            v.name
        ));
        return;
    }
    let m = match manifest::load_verified(&mpath, trusted) {
        Ok((m, _)) => m,
        Err(e) => {
            out.push(format!("{e:#}"));
            return;
        }
    };
    if m.variant != v.name {
        out.push(format!("{}: the manifest is for variant `{}`", mpath.display(), m.variant));
    }
    if m.pins_sha256 != pins_sha256 {
        out.push(format!(
            "{}: published from another pins.toml (sha256 {}, {} has {pins_sha256}); republish",
            mpath.display(),
            m.pins_sha256,
            pins.path.display()
        ));
    }
    let files = vdir.join("simple").join(PROJECT);
    let pinned = m.wheels.iter().any(|w| facts::matches_pins(&w.provenance, pins, v).is_ok());
    if !pinned {
        let rev = pins.pins.get(&v.arch).map(|p| p.rev.as_str()).unwrap_or("(no pin)");
        out.push(format!(
            "{}: no {} wheel of variant {} at pins.toml's revision {rev}; run `deepep-forge publish --variant {}`",
            mpath.display(),
            v.arch.as_str(),
            v.name,
            v.name
        ));
    }
    for w in &m.wheels {
        check_wheel(&files, w, out);
    }
    for (rel, bytes) in pages::render(&m) {
        let p = vdir.join(&rel);
        match crate::input::read_bytes(&p, "index page", manifest::MAX_BYTES) {
            Ok(have) if have == bytes => {}
            Ok(_) => out.push(format!("{}: differs from what the signed manifest renders to", p.display())),
            Err(e) => out.push(format!("{}: {e:#}", p.display())),
        }
    }
    foreign(&vdir, &expected(&vdir, &m), out);
}

/// One listed wheel: its three files with the signed digests.
fn check_wheel(files: &Path, w: &WheelEntry, out: &mut Vec<String>) {
    let path = files.join(&w.wheel);
    match facts::read(&path) {
        Err(e) => out.push(format!("{e:#}")),
        Ok(f) if f.entry.sha256 != w.sha256 || f.entry.size != w.size => out.push(format!(
            "{}: sha256 {}, the signed manifest says {} (the wheel was changed or replaced)",
            path.display(),
            f.entry.sha256,
            w.sha256
        )),
        Ok(f) => {
            if f.entry != *w {
                out.push(format!("{}: its METADATA or provenance differs from the signed manifest", path.display()));
            }
            let side = [
                (format!("{}.metadata", w.wheel), f.metadata),
                (format!("{}{}", w.wheel, crate::attest::SUFFIX), f.intoto),
            ];
            for (name, want) in side {
                let p = files.join(&name);
                match crate::input::read_bytes(&p, "index file", manifest::MAX_BYTES) {
                    Ok(have) if have == want => {}
                    Ok(_) => out.push(format!(
                        "{}: does not match {} (it must be derived from the wheel)",
                        p.display(),
                        w.wheel
                    )),
                    Err(e) => out.push(format!("{e:#}")),
                }
            }
        }
    }
}

fn expected(vdir: &Path, m: &Manifest) -> BTreeSet<PathBuf> {
    let files = vdir.join("simple").join(PROJECT);
    let mut set: BTreeSet<PathBuf> = pages::render(m).into_iter().map(|(rel, _)| vdir.join(rel)).collect();
    set.insert(vdir.join(manifest::FILE));
    for w in &m.wheels {
        for suffix in ["", ".metadata", crate::attest::SUFFIX] {
            set.insert(files.join(format!("{}{suffix}", w.wheel)));
        }
    }
    set
}

/// Files (and links, FIFOs, ...) under `vdir` that the manifest does not explain.
fn foreign(vdir: &Path, expected: &BTreeSet<PathBuf>, out: &mut Vec<String>) {
    for (i, e) in walkdir::WalkDir::new(vdir).follow_links(false).into_iter().enumerate() {
        if i > MAX_FILES {
            out.push(format!("{}: more than {MAX_FILES} entries; stopped looking", vdir.display()));
            return;
        }
        let Ok(e) = e else { continue };
        if e.file_type().is_dir() || expected.contains(e.path()) && e.file_type().is_file() {
            continue;
        }
        out.push(format!("{}: foreign (not in the signed manifest; not deleted)", e.path().display()));
    }
}
