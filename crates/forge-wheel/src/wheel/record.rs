//! RECORD (binary distribution format spec): CSV of `path,sha256=<urlsafe b64
//! without padding>,size`; RECORD itself has empty hash and size.
use anyhow::{Context, Result};
use base64::Engine;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    /// `sha256=...` as written, or None (RECORD itself, signatures).
    pub hash: Option<String>,
    pub size: Option<u64>,
}

/// `sha256=<urlsafe base64, no padding>` of some bytes.
pub fn hash_bytes(data: &[u8]) -> String {
    hash_digest(&forge_os::input::sha256(data))
}

/// Format a finished sha256 digest the RECORD way.
pub fn hash_digest(digest: &[u8]) -> String {
    format!("sha256={}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest))
}

/// Parse RECORD text.
pub fn parse(text: &str) -> Result<Vec<Entry>> {
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    let mut out = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let rec = rec.with_context(|| format!("RECORD line {}", i + 1))?;
        if rec.len() != 3 {
            anyhow::bail!("RECORD line {}: expected 3 fields (path,hash,size), found {}", i + 1, rec.len());
        }
        let path = rec[0].to_string();
        let hash = (!rec[1].is_empty()).then(|| rec[1].to_string());
        let size = if rec[2].is_empty() {
            None
        } else {
            Some(
                rec[2]
                    .parse::<u64>()
                    .with_context(|| format!("RECORD line {}: size `{}` is not a number", i + 1, &rec[2]))?,
            )
        };
        out.push(Entry { path, hash, size });
    }
    Ok(out)
}

/// Write RECORD text (CSV quoting handled by the csv crate, `\n` line ends).
pub fn write(entries: &[Entry]) -> String {
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    for e in entries {
        let size = e.size.map(|s| s.to_string()).unwrap_or_default();
        w.write_record([e.path.as_str(), e.hash.as_deref().unwrap_or(""), size.as_str()]).expect("write to Vec");
    }
    String::from_utf8(w.into_inner().expect("flush Vec")).expect("csv of utf-8 is utf-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn round_trips_and_quotes_commas() {
        let e = vec![
            Entry { path: "a,b.py".into(), hash: Some(hash_bytes(b"x")), size: Some(1) },
            Entry { path: "d-1.dist-info/RECORD".into(), hash: None, size: None },
        ];
        let t = write(&e);
        assert!(t.starts_with("\"a,b.py\",sha256=LXEWQrcmsEQBYnyp-6wy9chTD7GQPMTbAiWHF5IaSIE,1\n"), "{t}");
        assert_eq!(parse(&t).unwrap(), e);
    }
}
