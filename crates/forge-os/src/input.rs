//! What every reader of an input shares, without opening anything (files are
//! opened by `fs`): the caps per kind of input, excerpts of values for
//! messages, and the one hasher (`sha256_stream`, under every hash of a file
//! or a stream). Must not parse anything.
use std::io::Read;

use anyhow::Result;

/// Caps per kind of input (bytes).
pub mod cap {
    /// pins.toml, pyproject.toml, a Dockerfile, a recipe, a small JSON document.
    pub const TEXT: u64 = 4 << 20;
    /// uv.lock (NeMo-RL's is about 2 MB).
    pub const LOCK: u64 = 64 << 20;
    /// A wheel file (members are bounded separately, see `probe::wheel`).
    pub const WHEEL: u64 = 4 << 30;
    /// A Debian rootfs tarball made by `docker::base`.
    pub const ROOTFS: u64 = 16 << 30;
}

/// At most `max` characters of `value` for a message, cut visibly
/// (`…(N more bytes)`), with control characters escaped.
pub fn excerpt(value: &str, max: usize) -> String {
    let mut out: String = value.chars().take(max).flat_map(char::escape_debug).collect();
    let shown: usize = value.chars().take(max).map(char::len_utf8).sum();
    if shown < value.len() {
        out.push_str(&format!("…({} more bytes)", value.len() - shown));
    }
    out
}

/// sha256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// sha256 (lowercase hex) of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha256(bytes))
}

/// Where [`sha256_stream`] stopped early.
#[derive(Debug)]
pub enum StreamError {
    /// Reading the stream failed.
    Read(std::io::Error),
    /// The sink refused a chunk (its own error).
    Sink(anyhow::Error),
    /// Ctrl-C between two chunks.
    Interrupted(anyhow::Error),
}

impl From<StreamError> for anyhow::Error {
    fn from(e: StreamError) -> Self {
        match e {
            StreamError::Read(e) => e.into(),
            StreamError::Sink(e) | StreamError::Interrupted(e) => e,
        }
    }
}

/// The one hashing loop: read `r` in chunks (checking for Ctrl-C between
/// them), hash each chunk and hand it to `sink`, until the end or until more
/// than `cap` bytes were read. The chunk that crosses `cap` is neither hashed
/// nor handed on, and the count returned is then over `cap`: the caller
/// refuses the stream. Returns the sha256 and the count of bytes read.
pub fn sha256_stream(
    r: &mut impl Read,
    cap: u64,
    mut sink: impl FnMut(&[u8]) -> Result<()>,
) -> std::result::Result<([u8; 32], u64), StreamError> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        crate::error::check_interrupted().map_err(StreamError::Interrupted)?;
        let k = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(StreamError::Read(e)),
        };
        n += k as u64;
        if n > cap {
            break;
        }
        h.update(&buf[..k]);
        sink(&buf[..k]).map_err(StreamError::Sink)?;
    }
    Ok((h.finalize().into(), n))
}

/// sha256 and length of the first `cap` bytes of `r` (callers that must
/// refuse a longer stream compare the length with their bound).
pub fn sha256_reader(r: impl Read, cap: u64) -> Result<([u8; 32], u64)> {
    Ok(sha256_stream(&mut r.take(cap), cap, |_| Ok(()))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_cut_visibly() {
        assert_eq!(excerpt("abc", 10), "abc");
        assert_eq!(excerpt("abcdef", 2), "ab…(4 more bytes)");
        assert_eq!(excerpt("a\nb", 5), "a\\nb");
    }
}
