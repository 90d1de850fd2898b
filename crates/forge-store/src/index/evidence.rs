//! Evidence in the index: each wheel's statements (`publish --evidence DIR`,
//! only those a trusted key signed) served beside it as
//! `<wheel>.<kind>-<id>.dsse.json` and listed in the signed manifest
//! (file, sha256, kind, origin, signer). Statement files are immutable like
//! the wheels: a later publish adds new ones and rewrites none (the name is
//! the envelope's digest). Owns this mapping; the statements' checks are
//! `evidence::store`'s.
use std::path::Path;

use super::manifest::{Listed, Manifest};
use super::{Source, Write};
use crate::evidence::store::Found;
use anyhow::Result;

/// The statements about the manifest's wheels: new entries added to `m`, and
/// one immutable write per statement file (existing ones are skipped by `apply`).
pub fn plan(files: &Path, m: &mut Manifest, found: &[Found]) -> Result<Vec<Write>> {
    let mut writes = Vec::new();
    for f in found {
        let Some(w) = m.wheels.iter().find(|w| w.sha256 == f.sha256()).map(|w| w.wheel.clone()) else { continue };
        let bytes =
            forge_os::fs::named::read_bytes(&f.path, "evidence statement", crate::evidence::statement::MAX_BYTES)?;
        let p = &f.statement.predicate;
        let file = format!("{w}.{}", crate::evidence::store::file_name(p.kind, &bytes));
        let entry = Listed {
            file: file.clone(),
            sha256: forge_os::input::sha256_hex(&bytes),
            wheel: w,
            kind: p.kind.as_str().into(),
            origin: p.origin.as_str().into(),
            signer: f.signer.clone(),
        };
        if !m.evidence.iter().any(|e| e.file == entry.file) {
            m.evidence.push(entry);
        }
        writes.push(Write { dest: files.join(file), bytes: Source::Bytes(bytes), immutable: true });
    }
    m.evidence.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(writes)
}

/// `publish --check`: each listed statement file has the signed digest
/// (see [`check_in`]; `files` is the variant's `simple/deep-ep/` folder).
pub fn check(files: &Path, m: &Manifest, out: &mut Vec<String>) {
    match forge_os::fs::Tree::open_if_exists(files, "index folder") {
        Ok(Some(tree)) => check_in(&tree, m, out),
        Ok(None) => out.extend(m.evidence.iter().map(|e| format!("{}: not found", files.join(&e.file).display()))),
        Err(e) => out.push(format!("{e:#}")),
    }
}

/// `publish --check` of the folder `files` (a tree): each listed statement
/// file is a regular file there (never read through a link that leads out)
/// with the signed digest.
pub fn check_in(files: &forge_os::fs::Tree, m: &Manifest, out: &mut Vec<String>) {
    for e in &m.evidence {
        match files.read(&e.file, crate::evidence::statement::MAX_BYTES) {
            Ok(b) if forge_os::input::sha256_hex(&b) == e.sha256 => {}
            Ok(_) => out.push(format!(
                "{}: not the statement the signed manifest lists (changed or replaced)",
                files.join(&e.file).display()
            )),
            Err(e) => out.push(format!("{e:#}")),
        }
    }
}
