//! The run-time requirements of the wheels a publish index serves: the
//! variant's manifest (`<base>/<variant>/index.json`, read as data; its
//! signature is `lock check`'s business) names each wheel with the sha256 of
//! its PEP 658 `.metadata`, which is fetched, checked against that sha256, and
//! its `Requires-Dist` read. For `pin set --index` (the overrides it writes)
//! and `lock check` (whether uv.lock satisfies them). Bounded: manifest
//! [`manifest::MAX_BYTES`], each `.metadata` [`MAX_METADATA`], 30 s each.
use anyhow::Result;

use super::manifest::{self, Manifest, WheelEntry, PROJECT};
use forge_os::error::Failure;

/// The largest `.metadata` read.
pub const MAX_METADATA: u64 = 1 << 20;

/// One wheel of the index and its `Requires-Dist`.
#[derive(Debug, Clone, PartialEq)]
pub struct WheelRequires {
    pub wheel: String,
    pub sha256: String,
    pub requires: Vec<String>,
}

/// `<base>/<variant>/index.json` for the simple URL `<base>/<variant>/simple`.
fn manifest_url(simple: &str) -> Option<String> {
    let base = simple.trim_end_matches('/').strip_suffix("/simple")?;
    Some(format!("{base}/index.json"))
}

/// Bytes at `url`: a `file://` URL's path (percent-decoded: the `.metadata` of
/// `deep_ep-1.2.1%2B0bfa6c2-...` is the file `deep_ep-1.2.1+0bfa6c2-...`) read
/// through `input`, else [`manifest::fetch_capped`].
fn get(url: &str, cap: u64) -> Result<Vec<u8>> {
    match manifest::file_path(url) {
        Some(p) => forge_os::fs::named::read_bytes(&p, "index file", cap),
        None if url.starts_with("file:") => Err(Failure::usage(format!(
            "{}: a file URL names an absolute path (file:///srv/index/...)",
            forge_os::input::excerpt(url, 200)
        ))
        .into()),
        None => manifest::fetch_capped(url, cap, 30),
    }
}

/// The `Requires-Dist` of every wheel of the index at `simple` that `pick` selects.
pub fn requires(simple: &str, pick: impl Fn(&WheelEntry) -> bool) -> Result<Vec<WheelRequires>> {
    let m_url = manifest_url(simple).ok_or_else(|| {
        Failure::usage(format!(
            "{}: not a publish index URL (<base>/<variant>/simple)",
            forge_os::input::excerpt(simple, 200)
        ))
    })?;
    let m = Manifest::parse(&get(&m_url, manifest::MAX_BYTES)?)
        .map_err(|e| Failure::problems(format!("{}: {e}", forge_os::input::excerpt(&m_url, 200))))?;
    m.wheels.iter().filter(|w| pick(w)).map(|w| of_entry(simple, w)).collect()
}

/// The `Requires-Dist` of the manifest entry `w` of the index at `simple`:
/// its `.metadata`, checked against the sha256 the entry states.
pub fn of_entry(simple: &str, w: &WheelEntry) -> Result<WheelRequires> {
    crate::cache::check_wheel_name(&w.wheel)?;
    let url = format!("{}/{PROJECT}/{}.metadata", simple.trim_end_matches('/'), super::pages::href(&w.wheel));
    let bytes = get(&url, MAX_METADATA)?;
    if forge_os::input::sha256_hex(&bytes) != w.metadata_sha256 {
        return Err(Failure::problems(format!(
            "{}: its sha256 is not the one the index's manifest states for {}",
            forge_os::input::excerpt(&url, 200),
            w.wheel
        ))
        .into());
    }
    let text = String::from_utf8_lossy(&bytes);
    Ok(WheelRequires {
        wheel: w.wheel.clone(),
        sha256: w.sha256.clone(),
        requires: forge_wheel::wheel::metadata::requires_dist(&text),
    })
}
