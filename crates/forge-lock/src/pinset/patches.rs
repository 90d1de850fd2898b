//! `pin set REV` and pins.toml's source patches: every patch set a moved pin
//! builds with (the pin's, and each variant's after it) must still apply at
//! REV, checked in a scratch index (`builder::patch::fits`), never in the
//! user's checkout. One that no longer applies, or that REV already contains
//! (it applies in reverse), is exit 2 before anything is written, naming it and
//! saying how to drop it. Must not write files.
use std::path::Path;

use anyhow::Result;

use forge_model::pins::{Arch, Pins};
use forge_store::patch;

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
            let set = forge_model::patches::load(&pins.path, &entries)?;
            let tmp = forge_os::fs::Tree::create(scratch_in, "cache's temp folder")?;
            let scratch = forge_os::fs::TempTree::new_in(&tmp, "pin-set-patches-")?;
            for (p, fit) in set.iter().zip(patch::fits(repo_dir, rev, &set, scratch.path())?) {
                patch::refuse(p, rev, &fit)?;
            }
        }
    }
    Ok(())
}

/// pins.toml `text` with `--patch FILE`s appended to (each with its sha256) and
/// `--drop-patch NAME`s removed from the `patches` of every `[pin.<arch>]` in
/// `arches`. A FILE outside pins.toml's folder, a bad patch, a name listed
/// twice or a name not listed is exit 2 (nothing written: the caller writes).
pub fn edit_list(
    pins_path: &Path,
    text: &str,
    arches: &[Arch],
    add: &[std::path::PathBuf],
    drop: &[String],
) -> Result<String> {
    if add.is_empty() && drop.is_empty() {
        return Ok(text.to_string());
    }
    let usage = |m: String| -> anyhow::Error { forge_os::error::Failure::usage(m).into() };
    let dir = pins_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let base = forge_os::fs::named::canonical(dir, "pins folder")?;
    let mut new = Vec::new();
    for f in add {
        let real = forge_os::fs::named::canonical(f, "--patch")?;
        let rel = real.strip_prefix(&base).map_err(|_| {
            usage(format!(
                "--patch {}: not beside or below {} (patches live in pins.toml's repository)",
                f.display(),
                pins_path.display()
            ))
        })?;
        let rel = rel.to_string_lossy().into_owned();
        let entry = forge_model::patches::Entry { path: rel.clone(), sha256: None, line: 0, text: None };
        let loaded = forge_model::patches::load(pins_path, &[&entry])?;
        new.push((rel, loaded[0].sha256.clone()));
    }
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| usage(format!("{}: {e}", pins_path.display())))?;
    let mut dropped = Vec::new();
    for arch in arches {
        let key = arch.to_string();
        let Some(pin) = doc.get_mut("pin").and_then(|p| p.get_mut(&key)).and_then(|t| t.as_table_like_mut()) else {
            continue;
        };
        let list = pin.entry("patches").or_insert(toml_edit::value(toml_edit::Array::new()));
        let Some(arr) = list.as_array_mut() else {
            return Err(usage(format!("{}: [pin.{key}] patches is not a list", pins_path.display())));
        };
        let name_of = |v: &toml_edit::Value| match v {
            toml_edit::Value::String(s) => Some(s.value().clone()),
            toml_edit::Value::InlineTable(t) => t.get("path").and_then(|p| p.as_str()).map(String::from),
            _ => None,
        };
        for d in drop {
            let at = arr.iter().position(|v| name_of(v).as_deref() == Some(d.as_str()));
            if let Some(i) = at {
                arr.remove(i);
                dropped.push(d.clone());
            }
        }
        for (rel, sha) in &new {
            if arr.iter().any(|v| name_of(v).as_deref() == Some(rel.as_str())) {
                return Err(usage(format!("--patch {rel}: [pin.{key}] already lists it")));
            }
            let mut t = toml_edit::InlineTable::new();
            t.insert("path", rel.as_str().into());
            t.insert("sha256", sha.as_str().into());
            arr.push(t);
        }
        if arr.is_empty() {
            pin.remove("patches");
        }
    }
    if let Some(d) = drop.iter().find(|d| !dropped.contains(d)) {
        return Err(usage(format!("--drop-patch {d}: no moved pin in {} lists such a patch", pins_path.display())));
    }
    Ok(doc.to_string())
}
