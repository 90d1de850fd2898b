//! What an index says about one wheel, read from the wheel itself: its
//! sha256 and size, its METADATA (the PEP 658 `.metadata` file), its
//! provenance (digest and summary) and the in-toto statement rendered from
//! that provenance; and whether the provenance is what pins.toml describes.
//! Reads are bounded and go through `input`; must not write.
use std::path::Path;

use anyhow::{Context, Result};

use super::manifest::{Summary, WheelEntry};
use forge_model::pins::{Pins, Variant};
use forge_os::error::Failure;
use forge_wheel::provenance::Provenance;

/// The largest METADATA read from a wheel.
pub const MAX_METADATA_BYTES: u64 = 1 << 20;

/// One wheel's index files and manifest entry.
pub struct Facts {
    pub entry: WheelEntry,
    pub metadata: Vec<u8>,
    pub intoto: Vec<u8>,
}

/// The wheel's `.dist-info/METADATA` and provenance bytes, bounded, through the one
/// wheel reader (layout checked first).
fn read_members(wheel: &Path, name: &forge_wheel::wheel::WheelName) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut w = forge_wheel::wheel::read::open(wheel)?;
    let member = format!("{}/METADATA", name.dist_info());
    let metadata = w.member(&member, MAX_METADATA_BYTES)?.with_context(|| format!("has no {member}"))?;
    let prov = w.provenance_bytes()?;
    Ok((metadata, prov))
}

/// Everything the index needs from `wheel`; a wheel not built by
/// `build-wheel` (no provenance) or with an unsafe name is exit 1 naming it.
pub fn read(wheel: &Path) -> Result<Facts> {
    let bad = |why: String| Failure::problems(format!("{}: {why}", wheel.display()));
    let file = wheel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    crate::cache::check_wheel_name(file).map_err(|e| bad(e.to_string()))?;
    let name = forge_wheel::wheel::WheelName::parse(file).expect("checked above");
    let (sha256, size) = forge_os::fs::named::sha256_file(wheel, "wheel", forge_os::input::cap::WHEEL)?;
    let (metadata, prov_bytes) = read_members(wheel, &name).map_err(|e| bad(format!("{e:#}")))?;
    let prov: Provenance =
        serde_json::from_slice(&prov_bytes).map_err(|e| bad(format!("unreadable provenance: {e}")))?;
    let intoto = forge_wheel::attest::render(&prov, file, &sha256).into_bytes();
    let v = &prov.variant;
    let entry = WheelEntry {
        wheel: file.to_string(),
        sha256,
        size,
        cache_key: prov.cache_key.clone(),
        metadata_sha256: forge_os::input::sha256_hex(&metadata),
        provenance_sha256: forge_os::input::sha256_hex(&prov_bytes),
        provenance: Summary {
            rev: prov.source.rev.clone(),
            variant: v.name.clone(),
            arch: v.arch.clone(),
            cuda_arch_list: v.cuda_arch_list.clone(),
            multinode: v.multinode,
            transport: v.transport.clone(),
            version: name.version.clone(),
        },
    };
    Ok(Facts { entry, metadata, intoto })
}

/// Whether a wheel's provenance summary is `variant` at pins.toml's revision
/// for its architecture; `Err` says what differs.
pub fn matches_pins(s: &Summary, pins: &Pins, variant: &Variant) -> Result<(), String> {
    let mut diff = Vec::new();
    let want_rev = pins.pins.get(&variant.arch).map(|p| p.rev.as_str()).unwrap_or("(no pin)");
    if s.rev != want_rev {
        diff.push(format!("revision {} (pins.toml: {want_rev})", crate::cache::excerpt(&s.rev)));
    }
    if s.variant != variant.name {
        diff.push(format!("variant {} (expected {})", crate::cache::excerpt(&s.variant), variant.name));
    }
    if s.arch != variant.arch.as_str() {
        diff.push(format!("arch {} (variant: {})", crate::cache::excerpt(&s.arch), variant.arch.as_str()));
    }
    let list = variant.cuda_arch_list.to_env();
    if s.cuda_arch_list != list || s.multinode != variant.multinode {
        diff.push(format!(
            "flags {}/multinode={} (variant: {list}/multinode={})",
            crate::cache::excerpt(&s.cuda_arch_list),
            s.multinode,
            variant.multinode
        ));
    }
    if diff.is_empty() {
        Ok(())
    } else {
        Err(format!("its provenance does not match pins.toml: {}", diff.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provenance_of_another_revision_variant_or_flags_is_named() {
        let pins =
            Pins::parse(include_str!("../../../../tests/fixtures/demo-pins.toml"), Path::new("pins.toml")).unwrap();
        let v = pins.variant("demo").unwrap();
        let ok = Summary {
            rev: pins.pins[&v.arch].rev.clone(),
            variant: "demo".into(),
            arch: "x86_64".into(),
            cuda_arch_list: v.cuda_arch_list.to_env(),
            multinode: false,
            transport: None,
            version: "1.2.1+0bfa6c2".into(),
        };
        assert_eq!(matches_pins(&ok, &pins, v), Ok(()));
        let other = Summary { rev: "a".repeat(40), variant: "demo-arm".into(), multinode: true, ..ok };
        let e = matches_pins(&other, &pins, v).unwrap_err();
        assert!(e.starts_with("its provenance does not match pins.toml: revision aaaa"), "{e}");
        assert!(e.contains("variant demo-arm (expected demo)") && e.contains("/multinode=true (variant: "), "{e}");
    }
}
