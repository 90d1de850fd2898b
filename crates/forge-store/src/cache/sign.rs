//! Ed25519 signatures on remote cache entries, in the shape of Nix's binary
//! caches: a public key is written `NAME:BASE64` (32 bytes), a signature
//! `NAME:BASE64` (64 bytes), the secret key file holds `NAME:BASE64` (the
//! 32-byte seed). Readers trust only the public keys the user configured
//! ([`super::config`]); an entry without a signature by one of them is not used.
//!
//! What is signed ([`message`]) is one canonical byte string, UTF-8, each
//! field on its own line, no trailing spaces, in this order:
//!
//! ```text
//! deepep-forge cache entry v1
//! key <64 lowercase hex: the plan's cache key>
//! wheel <the wheel file name>
//! sha256 <64 lowercase hex of the wheel file>
//! size <the wheel's size in bytes, decimal>
//! provenance-sha256 <64 lowercase hex of the wheel's .dist-info provenance file>
//! ```
//!
//! Every field is validated before signing and verifying (a key and digests
//! are hex, the wheel name has no spaces or newlines), so the string has one
//! reading.
use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};

use forge_os::error::Failure;

const B64: base64::engine::general_purpose::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The first line of every signed message: the format's name and version.
pub const DOMAIN: &str = "deepep-forge cache entry v1";

/// The canonical bytes a signature covers.
pub fn message(key: &str, wheel: &str, sha256: &str, size: u64, provenance_sha256: &str) -> Vec<u8> {
    format!("{DOMAIN}\nkey {key}\nwheel {wheel}\nsha256 {sha256}\nsize {size}\nprovenance-sha256 {provenance_sha256}\n")
        .into_bytes()
}

/// A key name: 1-64 of `A-Z a-z 0-9 . _ -`, not starting with `-` or `.`.
pub fn check_name(name: &str) -> Result<(), Failure> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['-', '.'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "key name `{}` must be 1-64 letters, digits, `.`, `_` or `-` (e.g. cache.example.org-1)",
            super::excerpt(name)
        )))
    }
}

fn split(s: &str) -> Result<(&str, Vec<u8>), Failure> {
    let (name, b64) = s.trim().split_once(':').ok_or_else(|| Failure::usage("expected NAME:BASE64"))?;
    check_name(name)?;
    let bytes = B64.decode(b64).map_err(|_| Failure::usage(format!("the part after `{name}:` is not base64")))?;
    Ok((name, bytes))
}

/// A trusted public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub name: String,
    key: VerifyingKey,
}

impl PublicKey {
    /// `NAME:BASE64` of a 32-byte ed25519 public key.
    pub fn parse(s: &str) -> Result<PublicKey, Failure> {
        let (name, bytes) = split(s)?;
        let arr: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| Failure::usage(format!("a public key is 32 bytes, `{name}` has {}", b.len())))?;
        let key = VerifyingKey::from_bytes(&arr)
            .map_err(|_| Failure::usage(format!("`{name}` is not a valid ed25519 public key")))?;
        Ok(PublicKey { name: name.to_string(), key })
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name, B64.encode(self.key.as_bytes()))
    }
}

/// A signing (secret) key. Its bytes are never printed.
pub struct SecretKey {
    pub name: String,
    key: SigningKey,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey({}, <redacted>)", self.name)
    }
}

impl SecretKey {
    /// A new random key.
    pub fn generate(name: &str) -> Result<SecretKey> {
        check_name(name)?;
        let mut seed = [0u8; 32];
        getrandom::getrandom(&mut seed).map_err(|e| Failure::env(format!("no system randomness: {e}")))?;
        Ok(SecretKey { name: name.to_string(), key: SigningKey::from_bytes(&seed) })
    }

    pub fn public(&self) -> PublicKey {
        PublicKey { name: self.name.clone(), key: self.key.verifying_key() }
    }

    /// Write the key to a new file `path` with mode 0600 (never over anything
    /// there: a file, a link, a FIFO is refused, exit 2, and nothing is written).
    pub fn write_new(&self, path: &Path) -> Result<()> {
        let name = path.file_name().filter(|_| !path.as_os_str().as_encoded_bytes().ends_with(b"/"));
        let name = name.ok_or_else(|| Failure::usage(format!("{}: not a file name for the key", path.display())))?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        self.write_new_in(&forge_os::fs::Tree::open(dir, "folder of the key file")?, Path::new(name))
    }

    /// Write the key to the new file `rel` of `tree` (see [`SecretKey::write_new`]).
    pub fn write_new_in(&self, tree: &forge_os::fs::Tree, rel: &Path) -> Result<()> {
        let text = format!("{}:{}\n", self.name, B64.encode(self.key.to_bytes()));
        let taken = || {
            Failure::usage(format!("cannot create the key file {}: something is there", tree.join(rel).display()))
                .hint("choose another file name; an existing key is never overwritten")
        };
        if tree.exists(rel) {
            return Err(taken().into());
        }
        let staged = tree.stage(rel, 0o600, |f| {
            std::io::Write::write_all(f, text.as_bytes())?;
            Ok(f.sync_all()?)
        })?;
        if !staged.commit_new()? {
            return Err(taken().into());
        }
        Ok(())
    }

    /// Read a key file: a regular file no other user can read (like ssh, mode
    /// 0600 or stricter), holding `NAME:BASE64` of a 32-byte seed. Errors name
    /// the file and never quote its content.
    pub fn load(path: &Path) -> Result<SecretKey> {
        // Opened once, checked on the opened file (a FIFO or device never blocks, never reads on).
        let (f, _) = forge_os::fs::named::open(path, "signing key", 4096).map_err(|e| {
            let f = e.downcast::<Failure>().map(|f| f.message).unwrap_or_else(|e| format!("{e:#}"));
            Failure::usage(format!("cannot read the {f}"))
                .hint("make one with `deepep-forge cache keygen --name NAME --out FILE`")
        })?;
        let mode = forge_os::fs::Stat::of(&f).map(|m| m.mode & 0o777).unwrap_or(0o777);
        if mode & 0o077 != 0 {
            return Err(Failure::usage(format!(
                "the signing key {} is readable by other users (mode {mode:04o}): refusing to use it",
                path.display()
            ))
            .hint(format!(
                "run `chmod 600 {}`, and make a new key (`deepep-forge cache keygen`) if others may have copied it",
                path.display()
            ))
            .into());
        }
        let mut text = String::new();
        f.take(4096)
            .read_to_string(&mut text)
            .with_context(|| format!("reading the signing key {}", path.display()))?;
        let bad = || {
            Failure::usage(format!(
                "the signing key {} is not a deepep-forge secret key (NAME:BASE64 of 32 bytes)",
                path.display()
            ))
            .hint("make one with `deepep-forge cache keygen --name NAME --out FILE`")
        };
        let (name, bytes) = split(&text).map_err(|_| bad())?;
        let seed: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
        Ok(SecretKey { name: name.to_string(), key: SigningKey::from_bytes(&seed) })
    }

    /// `NAME:BASE64` signature of `msg`.
    pub fn sign(&self, msg: &[u8]) -> String {
        format!("{}:{}", self.name, B64.encode(self.key.sign(msg).to_bytes()))
    }
}

/// What the signatures on an entry prove to this reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A valid signature by this trusted key.
    Trusted(String),
    /// No signature at all.
    Unsigned,
    /// Signatures only by keys the user does not trust (names as given, cut).
    Untrusted(Vec<String>),
    /// A signature by a trusted key's name that does not verify.
    Invalid(String),
}

/// Check `sigs` (`NAME:BASE64`) over `msg` against the trusted keys.
pub fn verify(trusted: &[PublicKey], sigs: &[String], msg: &[u8]) -> Verdict {
    if sigs.is_empty() {
        return Verdict::Unsigned;
    }
    let mut unknown = Vec::new();
    let mut invalid = None;
    for s in sigs.iter().take(16) {
        let Ok((name, bytes)) = split(s) else {
            unknown.push(super::excerpt(s));
            continue;
        };
        let Some(pk) = trusted.iter().find(|k| k.name == name) else {
            unknown.push(name.to_string());
            continue;
        };
        let ok = <[u8; 64]>::try_from(bytes.as_slice())
            .map(|b| pk.key.verify(msg, &ed25519_dalek::Signature::from_bytes(&b)).is_ok())
            .unwrap_or(false);
        if ok {
            return Verdict::Trusted(name.to_string());
        }
        invalid.get_or_insert_with(|| name.to_string());
    }
    match invalid {
        Some(n) => Verdict::Invalid(n),
        None => Verdict::Untrusted(unknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_verify_and_tamper() {
        let sk = SecretKey::generate("test-1").unwrap();
        let pk = PublicKey::parse(&sk.public().to_string()).unwrap();
        let msg = message(&"a".repeat(64), "x-1-py3-none-any.whl", &"b".repeat(64), 10, &"c".repeat(64));
        let sig = sk.sign(&msg);
        assert_eq!(
            verify(std::slice::from_ref(&pk), std::slice::from_ref(&sig), &msg),
            Verdict::Trusted("test-1".into())
        );
        let other = message(&"a".repeat(64), "x-1-py3-none-any.whl", &"b".repeat(64), 11, &"c".repeat(64));
        assert_eq!(
            verify(std::slice::from_ref(&pk), std::slice::from_ref(&sig), &other),
            Verdict::Invalid("test-1".into())
        );
        assert_eq!(verify(&[], std::slice::from_ref(&sig), &msg), Verdict::Untrusted(vec!["test-1".into()]));
        assert_eq!(verify(&[pk], &[], &msg), Verdict::Unsigned);
    }

    #[test]
    fn the_signed_message_is_the_documented_byte_string() {
        let m = message(
            &"a".repeat(64),
            "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl",
            &"b".repeat(64),
            42,
            &"c".repeat(64),
        );
        let want = format!(
            "deepep-forge cache entry v1\nkey {}\nwheel deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl\nsha256 {}\nsize 42\nprovenance-sha256 {}\n",
            "a".repeat(64),
            "b".repeat(64),
            "c".repeat(64)
        );
        assert_eq!(String::from_utf8(m.clone()).unwrap(), want);
        // ed25519 is deterministic: a fixed seed gives a fixed signature, so readers of any version agree.
        let sk = SecretKey { name: "k".into(), key: SigningKey::from_bytes(&[7u8; 32]) };
        let sig = sk.sign(&m);
        assert_eq!(sig, sk.sign(&m));
        assert!(verify(&[sk.public()], std::slice::from_ref(&sig), &m) == Verdict::Trusted("k".into()));
    }

    #[test]
    fn bad_public_keys() {
        for bad in ["", "nokey", "-x:AAAA", "n:not base64!", "n:AAAA", "a b:AAAA"] {
            assert!(PublicKey::parse(bad).is_err(), "{bad}");
        }
    }
}
