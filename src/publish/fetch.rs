//! A wheel taken from a published index by URL (`verify URL`): the variant's
//! signed manifest fetched next to it (`<base>/<variant>/index.json` for
//! `<base>/<variant>/simple/deep-ep/<wheel>`) and verified against the
//! reader's trusted keys, the wheel downloaded and its sha256 and size
//! compared with the manifest, its `.intoto.json` subject compared with the
//! wheel. Every failure is exit 1 naming the URL; nothing is written but the
//! temporary folder. Must not build or compare builds.
use std::path::PathBuf;

use anyhow::Result;

use super::manifest::{self, PROJECT};
use crate::cache::sign::PublicKey;
use crate::error::Failure;

/// The largest wheel downloaded.
pub const MAX_WHEEL_BYTES: u64 = 8 << 30;

/// `(manifest URL, wheel file name)` of a wheel URL in a publish index.
fn split(url: &str) -> Result<(String, String)> {
    let shape = || {
        Failure::usage(format!(
            "{}: expected a wheel URL of a `deepep-forge publish` index, <base>/<variant>/simple/{PROJECT}/<wheel>.whl",
            crate::cache::excerpt(url)
        ))
    };
    let u = reqwest::Url::parse(url).map_err(|_| shape())?;
    if u.query().is_some() {
        return Err(shape().into());
    }
    let segs: Vec<&str> = u.path_segments().map(|s| s.collect()).unwrap_or_default();
    let [.., variant, simple, project, file] = segs.as_slice() else { return Err(shape().into()) };
    if *simple != "simple" || *project != PROJECT {
        return Err(shape().into());
    }
    manifest::check_variant_name(variant).map_err(Failure::usage)?;
    let name = file.replace("%2B", "+").replace("%2b", "+");
    crate::cache::check_wheel_name(&name)?;
    let mut m = u.clone();
    m.set_fragment(None);
    m.path_segments_mut().expect("http(s) URL").pop().pop().pop().push(manifest::FILE);
    Ok((m.to_string(), name))
}

/// Download and check the wheel at `url`; returns the folder it lies in (kept
/// alive by the caller) and its path.
pub fn wheel(url: &str, trusted: &[PublicKey]) -> Result<(tempfile::TempDir, PathBuf)> {
    let (murl, name) = split(url)?;
    let bytes = manifest::fetch(&murl)?;
    let (m, key) = manifest::verified(&bytes, &murl, trusted)?;
    let entry = m
        .wheels
        .iter()
        .find(|w| w.wheel == name)
        .ok_or_else(|| Failure::problems(format!("{url}: the signed manifest {murl} does not list {name}")))?;
    // A little over the signed size, so that a swapped wheel is reported by its digest.
    let wheel = manifest::fetch_capped(url, entry.size.saturating_add(1 << 20).min(MAX_WHEEL_BYTES), 3600)?;
    let sha = super::facts::sha256_hex(&wheel);
    if sha != entry.sha256 || wheel.len() as u64 != entry.size {
        return Err(Failure::problems(format!(
            "{url}: sha256 {sha} ({} bytes), the manifest signed by `{key}` says {} ({} bytes): the wheel on the server was changed",
            wheel.len(),
            entry.sha256,
            entry.size
        ))
        .into());
    }
    let surl = format!("{url}{}", crate::attest::SUFFIX);
    let st: serde_json::Value = serde_json::from_slice(&manifest::fetch(&surl)?)
        .map_err(|e| Failure::problems(format!("{surl}: not JSON: {e}")))?;
    let subject = &st["subject"][0];
    if subject["digest"]["sha256"].as_str() != Some(sha.as_str()) || subject["name"].as_str() != Some(name.as_str()) {
        return Err(Failure::problems(format!("{surl}: its subject is not {name} with sha256 {sha}")).into());
    }
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(&name);
    std::fs::write(&path, &wheel)?;
    Ok((dir, path))
}

#[cfg(test)]
mod tests {
    #[test]
    fn wheel_urls_name_their_manifest() {
        let (m, w) =
            super::split("https://h/x/demo/simple/deep-ep/deep_ep-1.2.1%2B9dce5ac-cp311-cp311-linux_x86_64.whl")
                .unwrap();
        assert_eq!(m, "https://h/x/demo/index.json");
        assert_eq!(w, "deep_ep-1.2.1+9dce5ac-cp311-cp311-linux_x86_64.whl");
        assert!(super::split("https://h/x/demo/simple/other/deep_ep-1-py3-none-any.whl").is_err());
        assert!(super::split("https://h/demo/simple/deep-ep/..%2F..%2Fx.whl").is_err());
    }
}
