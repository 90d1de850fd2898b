//! The signed manifest of one variant's index, `<DIR>/<variant>/index.json`:
//! pins.toml's digest, the variant, and per wheel its sha256, size, cache key,
//! the digests of its `.metadata` and provenance, and a provenance summary.
//!
//! What is signed ([`Manifest::message`]) is the line
//! `deepep-forge index manifest v1`, a newline, then the manifest's compact
//! JSON without `signatures` (fields in the order of these types; a reader
//! re-serialises the parsed value, and unknown fields are refused, so nothing
//! unsigned can ride along). Keys and signatures are the cache's
//! (`cache::sign`): readers trust only the keys they name. Owns the shape,
//! validation and signature check; must not read wheels or write files.
use serde::{Deserialize, Serialize};

use crate::cache::sign::{self, PublicKey, SecretKey, Verdict};
use forge_os::error::Failure;

/// The first line of the signed message.
pub const DOMAIN: &str = "deepep-forge index manifest v1";
/// The manifest's file name inside `<DIR>/<variant>/`.
pub const FILE: &str = "index.json";
/// Version of the manifest's shape.
pub const SCHEMA: u32 = 1;
/// The project every index serves (PEP 503 normalised).
pub const PROJECT: &str = "deep-ep";
/// The largest manifest read (a real one is a few KiB per wheel).
pub const MAX_BYTES: u64 = 4 << 20;
/// The most wheels one manifest may list.
pub const MAX_WHEELS: usize = 4096;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: u32,
    pub project: String,
    pub variant: String,
    /// sha256 of the pins.toml bytes the last publish read.
    pub pins_sha256: String,
    pub wheels: Vec<WheelEntry>,
    /// The wheels' evidence statements served beside them (docs/evidence.md);
    /// absent when there are none, so older manifests and their signatures stay as they were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Listed>,
    /// `publish --variant-wheels`: each version's `{name}-{version}-variants.json`
    /// (PEP 825) beside the wheels; absent in a per-variant index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants_json: Vec<VariantsFile>,
    /// `NAME:BASE64` ed25519 signatures over [`Manifest::message`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WheelEntry {
    pub wheel: String,
    pub sha256: String,
    pub size: u64,
    pub cache_key: String,
    /// sha256 of `<wheel>.metadata` (the wheel's METADATA, PEP 658).
    pub metadata_sha256: String,
    /// sha256 of the wheel's `.dist-info/deepep-forge-provenance.json`.
    pub provenance_sha256: String,
    pub provenance: Summary,
}

/// One evidence statement served beside a wheel (docs/evidence.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listed {
    /// The file beside the wheel: `<wheel>.<kind>-<id>.dsse.json`.
    pub file: String,
    /// sha256 of the file's bytes.
    pub sha256: String,
    /// The wheel it is about (listed in the same manifest).
    pub wheel: String,
    pub kind: String,
    pub origin: String,
    pub signer: String,
}

/// One `{name}-{version}-variants.json` of a variant index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantsFile {
    pub file: String,
    pub sha256: String,
}

/// The most statements one manifest lists.
pub const MAX_STATEMENTS: usize = 16_384;

/// What the provenance inside the wheel says, in brief.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub rev: String,
    pub variant: String,
    pub arch: String,
    pub cuda_arch_list: String,
    pub multinode: bool,
    pub transport: Option<String>,
    pub version: String,
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn short_text(s: &str, what: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 200 || s.chars().any(char::is_control) {
        return Err(format!("{what} `{}` is empty, over-long or has control characters", crate::cache::excerpt(s)));
    }
    Ok(())
}

/// A variant name safe as a folder name (pins.toml allows the same shape).
pub fn check_variant_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("variant `{}` is not a safe folder name", crate::cache::excerpt(name)))
    }
}

impl Manifest {
    /// The canonical bytes the signatures cover.
    pub fn message(&self) -> Vec<u8> {
        let body = Manifest { signatures: Vec::new(), ..self.clone() };
        let mut m = format!("{DOMAIN}\n").into_bytes();
        m.extend(serde_json::to_vec(&body).expect("plain JSON"));
        m
    }

    /// Replace the signatures by one from `key`.
    pub fn sign(&mut self, key: &SecretKey) {
        self.signatures.clear();
        self.signatures = vec![key.sign(&self.message())];
    }

    /// The file's bytes: pretty JSON, one trailing newline.
    pub fn render(&self) -> Vec<u8> {
        let mut s = serde_json::to_vec_pretty(self).expect("plain JSON");
        s.push(b'\n');
        s
    }

    /// Every name and digest well-formed (wheel names safe to join to a folder).
    pub fn validate(&self) -> Result<(), String> {
        if self.schema != SCHEMA {
            return Err(format!("schema {} (this deepep-forge reads {SCHEMA})", self.schema));
        }
        if self.project != PROJECT {
            return Err(format!("project `{}` (expected {PROJECT})", crate::cache::excerpt(&self.project)));
        }
        check_variant_name(&self.variant)?;
        if !is_hex64(&self.pins_sha256) {
            return Err("pins_sha256 is not 64 lowercase hex digits".into());
        }
        if self.wheels.len() > MAX_WHEELS {
            return Err(format!("{} wheels (at most {MAX_WHEELS})", self.wheels.len()));
        }
        for w in &self.wheels {
            crate::cache::check_wheel_name(&w.wheel).map_err(|e| e.to_string())?;
            for (d, what) in [(&w.sha256, "sha256"), (&w.metadata_sha256, "metadata_sha256")] {
                if !is_hex64(d) {
                    return Err(format!("{}: {what} is not 64 lowercase hex digits", w.wheel));
                }
            }
            if !is_hex64(&w.provenance_sha256) || !is_hex64(&w.cache_key) {
                return Err(format!("{}: provenance_sha256 or cache_key is not 64 lowercase hex digits", w.wheel));
            }
            let p = &w.provenance;
            for (v, what) in [(&p.rev, "rev"), (&p.variant, "variant"), (&p.arch, "arch"), (&p.version, "version")] {
                short_text(v, what)?;
            }
            short_text(&p.cuda_arch_list, "cuda_arch_list")?;
        }
        if self.evidence.len() > MAX_STATEMENTS {
            return Err(format!("{} statements (at most {MAX_STATEMENTS})", self.evidence.len()));
        }
        for e in &self.evidence {
            let ok_name = e.file.starts_with(&format!("{}.", e.wheel))
                && e.file.ends_with(crate::evidence::store::SUFFIX)
                && e.file.len() <= 300
                && e.file.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-!".contains(&b));
            if !ok_name || !self.wheels.iter().any(|w| w.wheel == e.wheel) {
                return Err(format!("statement `{}` is not named for a listed wheel", crate::cache::excerpt(&e.file)));
            }
            let short =
                [&e.kind, &e.origin, &e.signer].iter().all(|s| s.len() <= 64 && !s.chars().any(char::is_control));
            if !is_hex64(&e.sha256) || !short {
                return Err(format!("statement `{}`: a bad sha256, kind, origin or signer", e.file));
            }
        }
        for f in &self.variants_json {
            let ok = f.file.ends_with("-variants.json")
                && f.file.len() <= 200
                && !f.file.starts_with('.')
                && f.file.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-!".contains(&b));
            if !ok || !is_hex64(&f.sha256) {
                return Err(format!("variants file `{}`: a bad name or sha256", crate::cache::excerpt(&f.file)));
            }
        }
        let mut names: Vec<&str> = self.wheels.iter().map(|w| w.wheel.as_str()).collect();
        names.sort();
        if names.windows(2).any(|p| p[0] == p[1]) {
            return Err("a wheel is listed twice".into());
        }
        Ok(())
    }

    /// Parse and validate a manifest's bytes (no signature check); errors say what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        let m: Manifest =
            serde_json::from_slice(bytes).map_err(|e| format!("not a deepep-forge index manifest: {e}"))?;
        m.validate()?;
        Ok(m)
    }

    /// Whether a key in `trusted` signed it: `Ok(key name)`, else why not.
    pub fn verify(&self, trusted: &[PublicKey]) -> Result<String, String> {
        match sign::verify(trusted, &self.signatures, &self.message()) {
            Verdict::Trusted(k) => Ok(k),
            Verdict::Unsigned => Err("it is not signed".into()),
            Verdict::Untrusted(names) => Err(format!(
                "it is signed only by keys you do not trust ({}); the keys trusted here: {}",
                names.join(", "),
                match trusted.is_empty() {
                    true => "none".to_string(),
                    false => trusted.iter().map(|k| format!("`{}`", k.name)).collect::<Vec<_>>().join(", "),
                }
            )),
            Verdict::Invalid(k) => Err(format!("its signature by `{k}` does not verify: it was changed after signing")),
        }
    }

    /// The entry of a wheel with this sha256.
    pub fn by_sha256(&self, sha256: &str) -> Option<&WheelEntry> {
        self.wheels.iter().find(|w| w.sha256 == sha256)
    }
}

/// Read, parse and verify a manifest file against `trusted`; every failure is
/// exit 1 naming the file (a manifest is evidence, not a flag).
pub fn load_verified(path: &std::path::Path, trusted: &[PublicKey]) -> anyhow::Result<(Manifest, String)> {
    let (f, _) = forge_os::fs::named::open(path, "index manifest", u64::MAX)?;
    verified_file(f, path, trusted)
}

/// [`load_verified`] for a manifest the caller opened (`path` names it).
pub fn verified_file(
    f: forge_os::fs::File,
    path: &std::path::Path,
    trusted: &[PublicKey],
) -> anyhow::Result<(Manifest, String)> {
    use std::io::Read;
    // Over the bound is a refused manifest (exit 1, as for a URL), not an unreadable file.
    let st = forge_os::fs::Stat::of(&f)?;
    let forge_os::fs::Kind::File { len } = st.kind else {
        return Err(Failure::usage(format!("index manifest {}: not a regular file", path.display())).into());
    };
    if len > MAX_BYTES {
        return Err(Failure::problems(format!("{}: larger than {MAX_BYTES} bytes", path.display())).into());
    }
    let mut bytes = Vec::new();
    f.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::usage(format!("index manifest {}: {e}", path.display())))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Failure::problems(format!("{}: larger than {MAX_BYTES} bytes", path.display())).into());
    }
    verified(&bytes, &path.display().to_string(), trusted)
}

/// A manifest location: `https://...`, `http://127.0.0.1|localhost/...`, or a file.
pub fn is_url(s: &str) -> bool {
    s.starts_with("https://") || s.starts_with("http://")
}

/// An index location `verify` fetches: an http(s) URL or a `file://` URL (read
/// as the server would serve it: manifest first, every file checked against it).
pub fn is_index_url(s: &str) -> bool {
    is_url(s) || file_path(s).is_some()
}

/// `%XX` escapes decoded (`deep_ep-1.2.1%2B0bfa6c2` -> `deep_ep-1.2.1+0bfa6c2`),
/// as a URL's path names a file; a `%` not followed by two hex digits, and bytes
/// that do not decode to UTF-8, are kept as written.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

/// The local path a `file://` URL names, percent-decoded (`file:///srv/idx/x%2By`
/// -> `/srv/idx/x+y`; `file://localhost/...` too); `None` for anything else (another
/// scheme, another host, a relative path).
pub fn file_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    rest.starts_with('/').then(|| std::path::PathBuf::from(percent_decode(rest)))
}

/// A `file://` URL's file read as [`fetch_bounded`] reads a body: within
/// `bound` (a larger file is the error `too_large` makes of it), every
/// failure exit 1 naming the URL (an index on a shared file system, a mount).
fn read_file_url(
    path: &std::path::Path,
    url: &str,
    bound: forge_os::http::Bound,
    too_large: impl Fn(Failure) -> Failure,
) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let bad = |why: String| Failure::problems(format!("{url}: {why}"));
    let (f, len) = forge_os::fs::named::open(path, "index file", u64::MAX).map_err(|e| bad(format!("{e:#}")))?;
    if len > bound.bytes {
        return Err(too_large(bad(format!("{len} bytes, more than the {} allowed", bound.bytes))).into());
    }
    let mut body = Vec::new();
    f.take(bound.bytes.saturating_add(1)).read_to_end(&mut body).map_err(|e| bad(format!("reading it: {e}")))?;
    Ok(body)
}

/// Fetch a manifest over HTTPS (http only on 127.0.0.1/localhost). A redirect
/// must stay on https; the body is capped at [`MAX_BYTES`] (a larger announced
/// length is refused when the headers arrive); 30 s in all.
/// Every failure is exit 1 naming the URL.
pub fn fetch(url: &str) -> anyhow::Result<Vec<u8>> {
    fetch_capped(url, MAX_BYTES, 30)
}

/// [`fetch`] with another size cap and time limit.
pub fn fetch_capped(url: &str, cap: u64, secs: u64) -> anyhow::Result<Vec<u8>> {
    fetch_bounded(url, forge_os::http::Bound::cap(cap), secs, |f| f)
}

/// [`fetch`] of a file whose size a signed manifest states (a wheel): the
/// signed size bounds the request ([`forge_os::http::Client::get_bounded`]):
/// an announced length above it is refused when the headers arrive, a body
/// that runs past it is cut, and the deadline follows the signed size, not
/// what the server announces. `too_large` words that refusal for the caller.
pub fn fetch_signed(url: &str, size: u64, too_large: impl Fn(Failure) -> Failure) -> anyhow::Result<Vec<u8>> {
    fetch_bounded(url, forge_os::http::Bound::signed(size), 3600, too_large)
}

/// GET `url` for a body within `bound`, through the one HTTP client (so the
/// deadline covers the whole body, at most `secs`); a body over the bound
/// (announced or sent) is the error `too_large` makes of it.
fn fetch_bounded(
    url: &str,
    bound: forge_os::http::Bound,
    secs: u64,
    too_large: impl Fn(Failure) -> Failure,
) -> anyhow::Result<Vec<u8>> {
    use forge_os::http;
    use std::io::Read;
    if let Some(path) = file_path(url) {
        return read_file_url(&path, url, bound, too_large);
    }
    let u = http::parse(url).map_err(Failure::usage)?;
    let client = http::Client::new(std::time::Duration::from_secs(secs), http::Plain::Loopback)?;
    if client.check_scheme(&u).is_err() {
        return Err(Failure::usage(format!(
            "{}: an index manifest is fetched over https only (http on 127.0.0.1)",
            http::redact(url)
        ))
        .into());
    }
    let bad = |why: String| Failure::problems(format!("{}: {why}", http::redact(url)));
    let resp = match client.get_bounded(&u, bound) {
        Ok(r) => r,
        Err(e @ http::Unread::TooLarge { .. }) => return Err(too_large(bad(e.to_string())).into()),
        Err(http::Unread::Transport(why)) => return Err(bad(why).into()),
    };
    if !resp.status.is_success() {
        return Err(bad(format!("HTTP {}", resp.status)).into());
    }
    let mut body = Vec::new();
    match resp.take(bound.bytes.saturating_add(1)).read_to_end(&mut body) {
        Ok(_) => Ok(body),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(too_large(bad(e.to_string())).into()),
        Err(e) => Err(bad(format!("reading the body: {e}")).into()),
    }
}

/// [`load_verified`] for a file or a URL ([`fetch`]).
pub fn load_verified_any(at: &str, trusted: &[PublicKey]) -> anyhow::Result<(Manifest, String)> {
    if !is_url(at) {
        let path = file_path(at).unwrap_or_else(|| std::path::PathBuf::from(at));
        return load_verified(&path, trusted);
    }
    let bytes = fetch(at)?;
    verified(&bytes, &forge_os::http::redact(at), trusted)
}

pub fn verified(bytes: &[u8], shown: &str, trusted: &[PublicKey]) -> anyhow::Result<(Manifest, String)> {
    let m = Manifest::parse(bytes).map_err(|why| Failure::problems(format!("{shown}: {why}")))?;
    let key = m.verify(trusted).map_err(|why| {
        Failure::problems(format!("{shown}: {why}")).hint(
            "trust the publisher's key with --trusted-key NAME:BASE64 (or DEEPEP_FORGE_TRUSTED_KEYS), or republish with `deepep-forge publish --signing-key`",
        )
    })?;
    Ok((m, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_name_decoded_absolute_paths() {
        let p = |u: &str| file_path(u).map(|p| p.display().to_string());
        assert_eq!(
            p("file:///srv/idx/demo/simple/deep-ep/deep_ep-1.2.1%2B0bfa6c2-cp312-cp312-linux_x86_64.whl.metadata"),
            Some("/srv/idx/demo/simple/deep-ep/deep_ep-1.2.1+0bfa6c2-cp312-cp312-linux_x86_64.whl.metadata".into())
        );
        assert_eq!(p("file://localhost/a%20b/x%2bY"), Some("/a b/x+Y".into()));
        assert_eq!(p("file:///a/b?x#y"), Some("/a/b".into()));
        for not in ["file://host/a", "file:relative", "https://h/a", "/srv/idx"] {
            assert_eq!(p(not), None, "{not}");
        }
        // A `%` without two hex digits, and an escape that is no UTF-8, stay as written.
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%2"), "%zz%2");
        assert_eq!(percent_decode("%ff%2B"), "%ff%2B");
    }

    fn sample() -> Manifest {
        Manifest {
            schema: SCHEMA,
            project: PROJECT.into(),
            variant: "demo".into(),
            pins_sha256: "a".repeat(64),
            wheels: vec![WheelEntry {
                wheel: "deep_ep-1.2.1+0bfa6c2-cp311-cp311-linux_x86_64.whl".into(),
                sha256: "b".repeat(64),
                size: 10,
                cache_key: "c".repeat(64),
                metadata_sha256: "d".repeat(64),
                provenance_sha256: "e".repeat(64),
                provenance: Summary {
                    rev: "9".repeat(40),
                    variant: "demo".into(),
                    arch: "x86_64".into(),
                    cuda_arch_list: "9.0".into(),
                    multinode: false,
                    transport: None,
                    version: "1.2.1+0bfa6c2".into(),
                },
            }],
            evidence: vec![],
            variants_json: vec![],
            signatures: vec![],
        }
    }

    #[test]
    fn signed_manifest_round_trips_and_a_changed_byte_breaks_it() {
        let sk = SecretKey::generate("idx-1").unwrap();
        let mut m = sample();
        m.sign(&sk);
        let back = Manifest::parse(&m.render()).unwrap();
        assert_eq!(back.verify(&[sk.public()]), Ok("idx-1".into()));
        let mut t = back.clone();
        t.wheels[0].sha256 = "f".repeat(64);
        assert!(t.verify(&[sk.public()]).unwrap_err().contains("changed after signing"));
        assert!(back.verify(&[]).unwrap_err().contains("do not trust"));
        let mut unsigned = back;
        unsigned.signatures.clear();
        assert_eq!(unsigned.verify(&[sk.public()]), Err("it is not signed".into()));
    }

    #[test]
    fn unsafe_names_and_unknown_fields_are_refused() {
        let mut m = sample();
        m.wheels[0].wheel = "../../evil-1-py3-none-any.whl".into();
        assert!(m.validate().unwrap_err().contains("not a safe wheel file name"));
        let mut m = sample();
        m.variant = "../x".into();
        assert!(m.validate().is_err());
        let mut v = serde_json::to_value(sample()).unwrap();
        v["extra"] = serde_json::json!(1);
        assert!(Manifest::parse(&serde_json::to_vec(&v).unwrap()).is_err());
    }
}
