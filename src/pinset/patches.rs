//! `pin set REV` and pins.toml's source patches: every patch set a moved pin
//! builds with (the pin's, and each variant's after it) must still apply at
//! REV, checked in a scratch index (`builder::patch::fits`), never in the
//! user's checkout. One that no longer applies, or that REV already contains
//! (it applies in reverse), is exit 2 before anything is written, naming it and
//! saying how to drop it. Must not write files.
use std::path::Path;

use anyhow::Result;

use crate::builder::patch;
use crate::pins::{Arch, Pins};

/// Check the patch sets of `arches`' pins at `rev` in the repository `repo_dir`.
pub fn check(pins: &Pins, arches: &[Arch], rev: &str, repo_dir: &Path, scratch_in: &Path) -> Result<()> {
    for arch in arches {
        let Some(pin) = pins.pins.get(arch) else { continue };
        let variants: Vec<_> = pins.variants.iter().filter(|v| v.arch == *arch).collect();
        let mut sets = vec![pin.patches.iter().collect::<Vec<_>>()];
        sets.extend(
            variants.iter().filter(|v| !v.patches.is_empty()).map(|v| pin.patches.iter().chain(&v.patches).collect()),
        );
        for entries in sets.into_iter().filter(|s| !s.is_empty()) {
            let set = crate::patches::load(&pins.path, &entries)?;
            std::fs::create_dir_all(scratch_in)?;
            let scratch = tempfile::Builder::new().prefix("pin-set-patches-").tempdir_in(scratch_in)?;
            for (p, fit) in set.iter().zip(patch::fits(repo_dir, rev, &set, scratch.path())?) {
                patch::refuse(p, rev, &fit)?;
            }
        }
    }
    Ok(())
}
