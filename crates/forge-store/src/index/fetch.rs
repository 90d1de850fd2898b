//! A wheel taken from a published index by URL (`verify URL`): the variant's
//! signed manifest fetched next to it (`<base>/<variant>/index.json` for
//! `<base>/<variant>/simple/deep-ep/<wheel>`) and verified against the
//! reader's trusted keys, the wheel downloaded and its sha256 and size
//! compared with the manifest, its `.intoto.json` subject compared with the
//! wheel. The wheel's download is bounded by the size the manifest signs (a
//! server announcing more is refused when the headers arrive, and the
//! deadline follows the signed size). Every failure is exit 1 naming the URL;
//! nothing is written but the temporary folder. Must not build or compare builds.
use std::path::PathBuf;

use anyhow::Result;

use super::manifest::{self, PROJECT};
use crate::cache::sign::PublicKey;
use forge_os::error::Failure;

/// The largest wheel downloaded.
pub const MAX_WHEEL_BYTES: u64 = 8 << 30;

/// `(manifest URL, wheel file name)` of a wheel URL in a publish index.
fn split(url: &str) -> Result<(String, String)> {
    let shape = || {
        Failure::usage(format!(
            "{}: expected a wheel URL of a `deepep-forge publish` index, <base>/<variant>/simple/{PROJECT}/<wheel>.whl",
            forge_os::http::redact(url)
        ))
    };
    let u = forge_os::http::parse(url).map_err(|_| shape())?;
    if u.query().is_some() {
        return Err(shape().into());
    }
    let segs: Vec<&str> = u.path_segments().map(|s| s.collect()).unwrap_or_default();
    let [.., variant, simple, project, file] = segs.as_slice() else { return Err(shape().into()) };
    if *simple != "simple" || *project != PROJECT {
        return Err(shape().into());
    }
    manifest::check_variant_name(variant).map_err(Failure::usage)?;
    let name = manifest::percent_decode(file);
    crate::cache::check_wheel_name(&name)?;
    let mut m = u.clone();
    m.set_fragment(None);
    m.path_segments_mut().expect("http(s) URL").pop().pop().pop().push(manifest::FILE);
    Ok((m.to_string(), name))
}

/// Download and check the wheel at `url`; returns the folder it lies in (kept
/// alive by the caller) and its path.
pub fn wheel(url: &str, trusted: &[PublicKey]) -> Result<(forge_os::fs::TempTree, PathBuf)> {
    let (murl, name) = split(url)?;
    let (url_shown, murl_shown) = (forge_os::http::redact(url), forge_os::http::redact(&murl));
    let bytes = manifest::fetch(&murl)?;
    let (m, key) = manifest::verified(&bytes, &murl_shown, trusted)?;
    let entry = m.wheels.iter().find(|w| w.wheel == name).ok_or_else(|| {
        Failure::problems(format!("{url_shown}: the signed manifest {murl_shown} does not list {name}"))
    })?;
    let changed = format!(
        "the manifest signed by `{key}` says sha256 {} ({} bytes): the wheel on the server was changed",
        entry.sha256, entry.size
    );
    if entry.size > MAX_WHEEL_BYTES {
        return Err(Failure::problems(format!(
            "{url_shown}: the manifest lists a wheel of {} bytes, more than {MAX_WHEEL_BYTES}",
            entry.size
        ))
        .into());
    }
    let wheel =
        manifest::fetch_signed(url, entry.size, |f| Failure { message: format!("{}; {changed}", f.message), ..f })?;
    let sha = forge_os::input::sha256_hex(&wheel);
    if sha != entry.sha256 || wheel.len() as u64 != entry.size {
        return Err(Failure::problems(format!(
            "{url_shown}: sha256 {sha} ({} bytes), the manifest signed by `{key}` says {} ({} bytes): the wheel on the server was changed",
            wheel.len(),
            entry.sha256,
            entry.size
        ))
        .into());
    }
    let surl = forge_os::url::with_suffix(url, forge_wheel::attest::SUFFIX);
    let st: serde_json::Value = serde_json::from_slice(&manifest::fetch(&surl)?)
        .map_err(|e| Failure::problems(format!("{}: not JSON: {e}", forge_os::http::redact(&surl))))?;
    let subject = &st["subject"][0];
    if subject["digest"]["sha256"].as_str() != Some(sha.as_str()) || subject["name"].as_str() != Some(name.as_str()) {
        return Err(Failure::problems(format!(
            "{}: its subject is not {name} with sha256 {sha}",
            forge_os::http::redact(&surl)
        ))
        .into());
    }
    let dir = forge_os::fs::TempTree::new("deepep-forge-verify-")?;
    dir.write(&name, &wheel)?;
    let path = dir.join(&name);
    Ok((dir, path))
}

/// A variant's index by URL (`verify URL` of an index): `<base>/<variant>/`,
/// `<base>/<variant>/index.json`, `<base>/<variant>/simple[/]` or
/// `<base>/<variant>/simple/deep-ep[/]`. Returns the manifest's URL and the
/// folder its wheels lie in (ending in `/`); `None` when `url` names a wheel.
pub fn index_urls(url: &str) -> Result<Option<(String, String)>> {
    let shape = || {
        Failure::usage(format!(
            "{}: expected a `deepep-forge publish` index URL (<base>/<variant>/, <base>/<variant>/index.json, <base>/<variant>/simple/{PROJECT}/) or a wheel URL in one",
            forge_os::http::redact(url)
        ))
    };
    let u = forge_os::http::parse(url).map_err(|_| shape())?;
    if u.query().is_some() || u.fragment().is_some() {
        return Err(shape().into());
    }
    let mut segs: Vec<&str> = u.path_segments().map(|s| s.collect()).unwrap_or_default();
    if segs.last().is_some_and(|l| l.ends_with(".whl")) {
        return Ok(None);
    }
    if segs.last() == Some(&"") {
        segs.pop();
    }
    match segs.as_slice() {
        [.., "simple", p] if *p == PROJECT => drop(segs.split_off(segs.len() - 2)),
        [.., "simple"] | [.., "index.json"] => drop(segs.pop()),
        _ => {}
    }
    let variant = *segs.last().ok_or_else(shape)?;
    manifest::check_variant_name(variant).map_err(Failure::usage)?;
    let mut base = u.clone();
    base.path_segments_mut().map_err(|_| shape())?.clear().extend(&segs);
    let m = format!("{}/{}", base.as_str().trim_end_matches('/'), manifest::FILE);
    let files = format!("{}/simple/{PROJECT}/", base.as_str().trim_end_matches('/'));
    Ok(Some((m, files)))
}

/// The signed manifest of an index URL ([`index_urls`]) and the wheel URLs it
/// lists (`only`: that one wheel, which it must list), each to be passed to [`wheel`].
pub fn index_wheels(url: &str, only: Option<&str>, trusted: &[PublicKey]) -> Result<Vec<String>> {
    let (murl, files) = index_urls(url)?
        .ok_or_else(|| Failure::usage(format!("{}: a wheel URL, not an index", forge_os::http::redact(url))))?;
    let murl_shown = forge_os::http::redact(&murl);
    let (m, _) = manifest::verified(&manifest::fetch(&murl)?, &murl_shown, trusted)?;
    let names: Vec<&str> = m.wheels.iter().map(|w| w.wheel.as_str()).filter(|w| only.is_none_or(|o| o == *w)).collect();
    if names.is_empty() {
        let listed: Vec<&str> = m.wheels.iter().map(|w| w.wheel.as_str()).collect();
        return Err(Failure::usage(format!(
            "{murl_shown}: lists no wheel{}",
            only.map(|o| format!(" named {}", crate::cache::excerpt(o))).unwrap_or_default()
        ))
        .hint(format!("it lists: {}", if listed.is_empty() { "nothing".into() } else { listed.join(", ") }))
        .into());
    }
    // Names were checked by the manifest's validation: safe as a last path segment.
    Ok(names.iter().map(|n| format!("{files}{}", n.replace('+', "%2B"))).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn index_urls_name_their_manifest_and_wheel_folder() {
        let want = ("https://h/x/demo/index.json".to_string(), "https://h/x/demo/simple/deep-ep/".to_string());
        for u in [
            "https://h/x/demo/",
            "https://h/x/demo",
            "https://h/x/demo/index.json",
            "https://h/x/demo/simple",
            "https://h/x/demo/simple/",
            "https://h/x/demo/simple/deep-ep/",
        ] {
            assert_eq!(super::index_urls(u).unwrap(), Some(want.clone()), "{u}");
        }
        assert_eq!(super::index_urls("https://h/x/demo/simple/deep-ep/deep_ep-1-py3-none-any.whl").unwrap(), None);
        assert!(super::index_urls("https://h/x/..%2F/").is_err());
        assert!(super::index_urls("https://h/x/demo/?a=1").is_err());
    }

    #[test]
    fn wheel_urls_name_their_manifest() {
        let (m, w) =
            super::split("https://h/x/demo/simple/deep-ep/deep_ep-1.2.1%2B0bfa6c2-cp311-cp311-linux_x86_64.whl")
                .unwrap();
        assert_eq!(m, "https://h/x/demo/index.json");
        assert_eq!(w, "deep_ep-1.2.1+0bfa6c2-cp311-cp311-linux_x86_64.whl");
        assert!(super::split("https://h/x/demo/simple/other/deep_ep-1-py3-none-any.whl").is_err());
        assert!(super::split("https://h/demo/simple/deep-ep/..%2F..%2Fx.whl").is_err());
    }
}
