//! Evidence in the index: each wheel's statements (`publish --evidence DIR`,
//! only those a trusted key signed) served beside it as
//! `<wheel>.<kind>-<id>.dsse.json` and listed in the signed manifest
//! (file, sha256, kind, origin, signer). Statement files are immutable like
//! the wheels: a later publish adds new ones and rewrites none (the name is
//! the envelope's digest). Owns this mapping; the statements' checks are
//! `evidence::store`'s.
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::manifest::Manifest;
use super::{Source, Write};
use crate::evidence::store::Found;

/// The most statements one manifest lists.
pub const MAX_STATEMENTS: usize = 16_384;

/// One statement in the signed manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listed {
    /// The file beside the wheel.
    pub file: String,
    /// sha256 of the file's bytes.
    pub sha256: String,
    /// The wheel it is about (listed in the same manifest).
    pub wheel: String,
    pub kind: String,
    pub origin: String,
    pub signer: String,
}

/// The statements about the manifest's wheels: new entries added to `m`, and
/// one immutable write per statement file (existing ones are skipped by `apply`).
pub(super) fn plan(files: &Path, m: &mut Manifest, found: &[Found]) -> Result<Vec<Write>> {
    let mut writes = Vec::new();
    for f in found {
        let Some(w) = m.wheels.iter().find(|w| w.sha256 == f.sha256()).map(|w| w.wheel.clone()) else { continue };
        let bytes = crate::input::read_bytes(&f.path, "evidence statement", crate::evidence::statement::MAX_BYTES)?;
        let p = &f.statement.predicate;
        let file = format!("{w}.{}", crate::evidence::store::file_name(p.kind, &bytes));
        let entry = Listed {
            file: file.clone(),
            sha256: super::facts::sha256_hex(&bytes),
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

/// The listed statements are well-formed and about listed wheels.
pub fn validate(m: &Manifest) -> Result<(), String> {
    if m.evidence.len() > MAX_STATEMENTS {
        return Err(format!("{} statements (at most {MAX_STATEMENTS})", m.evidence.len()));
    }
    for e in &m.evidence {
        let ok_name = e.file.starts_with(&format!("{}.", e.wheel))
            && e.file.ends_with(crate::evidence::store::SUFFIX)
            && e.file.len() <= 300
            && e.file.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-!".contains(&b));
        if !ok_name || !m.wheels.iter().any(|w| w.wheel == e.wheel) {
            return Err(format!("statement `{}` is not named for a listed wheel", crate::cache::excerpt(&e.file)));
        }
        let hex64 = e.sha256.len() == 64 && e.sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        let short = [&e.kind, &e.origin, &e.signer].iter().all(|s| s.len() <= 64 && !s.chars().any(char::is_control));
        if !hex64 || !short {
            return Err(format!("statement `{}`: a bad sha256, kind, origin or signer", e.file));
        }
    }
    Ok(())
}

/// `publish --check`: each listed statement file has the signed digest.
pub fn check(files: &Path, m: &Manifest, out: &mut Vec<String>) {
    for e in &m.evidence {
        let p = files.join(&e.file);
        match crate::input::read_bytes(&p, "evidence statement", crate::evidence::statement::MAX_BYTES) {
            Ok(b) if super::facts::sha256_hex(&b) == e.sha256 => {}
            Ok(_) => {
                out.push(format!("{}: not the statement the signed manifest lists (changed or replaced)", p.display()))
            }
            Err(e) => out.push(format!("{e:#}")),
        }
    }
}
