//! The signed static package index deepep-forge publishes and reads: the PEP
//! 503/691 pages ([`pages`]), the wheels' facts ([`facts`]), the signed manifest
//! ([`manifest`]), fetching an index over HTTP or `file://` ([`fetch`]), the
//! run-time closure of its wheels ([`closure`]), the evidence beside it
//! ([`evidence`]), PEP 825 variant wheels ([`variants`]), checking a published
//! index ([`check`]) and writing into one without overwriting ([`out`]). The
//! `publish` command that builds and writes an index lives in forge-build.
use std::collections::BTreeMap;
use std::path::PathBuf;

use forge_model::pins::Pins;
use forge_os::error::Failure;
use manifest::Manifest;

pub mod check;
pub mod closure;
pub mod evidence;
pub mod facts;
pub mod fetch;
pub mod manifest;
pub mod out;
pub mod pages;
pub mod variants;

/// The folder of the variant index under `--out`.
pub const VARIANT_INDEX: &str = "variants";

/// Every version's variants.json for the labelled wheels the manifest lists;
/// a label pins.toml does not describe is an error.
pub fn variants_files(m: &Manifest, pins: &Pins) -> Result<Vec<(String, Vec<u8>)>, Failure> {
    let by_label = variants::labels(&pins.variants)?;
    let cuda = pins.toolchain.as_ref().map(|t| t.cuda.as_str());
    let mut by_version: BTreeMap<(String, String), BTreeMap<String, variants::Properties>> = BTreeMap::new();
    for w in &m.wheels {
        let Some(n) = forge_wheel::wheel::WheelName::parse(&w.wheel) else { continue };
        let Some(label) = n.variant.clone() else { continue };
        let v = by_label.get(&label).ok_or_else(|| {
            Failure::problems(format!(
                "the index lists {} whose label `{label}` no variant of pins.toml gives",
                w.wheel
            ))
            .hint("publish into a new folder, or restore the variant in pins.toml")
        })?;
        by_version.entry((n.dist, n.version)).or_default().insert(label, variants::properties(v, cuda));
    }
    Ok(by_version
        .into_iter()
        .map(|((dist, version), all)| (variants::variants_json_name(&dist, &version), variants::variants_json(&all)))
        .collect())
}

/// Version of the JSON document `publish --format json` prints.
pub const REPORT_SCHEMA: u32 = 1;

/// A file the publish will put in place.
pub struct Write {
    /// Its place relative to `--out`.
    pub dest: PathBuf,
    pub bytes: Source,
    /// Immutable files (wheel, .metadata, .intoto.json) are never rewritten.
    pub immutable: bool,
}

pub enum Source {
    File(PathBuf),
    Bytes(Vec<u8>),
}
