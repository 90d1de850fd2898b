//! The remote HTTP cache: `<url>/<key>/entry.json` and `<url>/<key>/<wheel>`.
//! A downloaded wheel is used only after its sha256 and size match the entry.
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use super::Entry;
use crate::error::{check_interrupted, Failure};

pub struct Remote {
    base: String,
    client: reqwest::blocking::Client,
}

/// What a GET by key found.
pub enum Fetched {
    Miss,
    /// The wheel was downloaded into the staging folder and verified.
    Hit(Entry),
    /// The server had the key but the wheel did not match its sha256/size.
    Rejected(String),
}

impl Remote {
    pub fn new(url: &str) -> Result<Remote> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            crate::bail_usage!("--cache-url {url}: expected an http:// or https:// URL");
        }
        let client =
            reqwest::blocking::Client::builder().connect_timeout(Duration::from_secs(10)).timeout(None).build()?;
        Ok(Remote { base: url.trim_end_matches('/').to_string(), client })
    }

    pub fn url_of(&self, key: &str, file: &str) -> String {
        format!("{}/{key}/{file}", self.base)
    }

    /// GET entry.json and the wheel for `key` into `stage` (wheel + entry.json).
    pub fn get(&self, key: &str, stage: &Path) -> Result<Fetched> {
        let url = self.url_of(key, super::ENTRY_FILE);
        let resp = self.client.get(&url).send().map_err(|e| unreachable(&url, e))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(Fetched::Miss);
        }
        let resp = resp.error_for_status().with_context(|| format!("GET {url}"))?;
        let entry: Entry = serde_json::from_slice(&resp.bytes()?).with_context(|| format!("parsing {url}"))?;
        if entry.key != key || entry.wheel.contains('/') || !entry.wheel.ends_with(".whl") {
            return Ok(Fetched::Rejected(format!("{url} describes another key or a bad wheel name")));
        }
        let wurl = self.url_of(key, &entry.wheel);
        let mut resp = self
            .client
            .get(&wurl)
            .send()
            .map_err(|e| unreachable(&wurl, e))?
            .error_for_status()
            .with_context(|| format!("GET {wurl}"))?;
        let path = stage.join(&entry.wheel);
        let mut f = std::fs::File::create_new(&path)?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        loop {
            check_interrupted()?;
            let k = resp.read(&mut buf).with_context(|| format!("reading {wurl}"))?;
            if k == 0 {
                break;
            }
            h.update(&buf[..k]);
            f.write_all(&buf[..k])?;
            n += k as u64;
        }
        f.sync_all()?;
        let got = hex::encode(h.finalize());
        if got != entry.sha256 || n != entry.size {
            std::fs::remove_file(&path)?;
            return Ok(Fetched::Rejected(format!(
                "{wurl}: sha256 {got} ({n} bytes), entry says {} ({} bytes)",
                entry.sha256, entry.size
            )));
        }
        super::write_entry(stage, &entry)?;
        Ok(Fetched::Hit(entry))
    }

    /// PUT the wheel, then entry.json (so a visible entry always has its wheel).
    pub fn put(&self, dir: &Path, entry: &Entry) -> Result<()> {
        for file in [entry.wheel.as_str(), super::ENTRY_FILE] {
            let url = self.url_of(&entry.key, file);
            let body = std::fs::File::open(dir.join(file))?;
            self.client
                .put(&url)
                .body(reqwest::blocking::Body::from(body))
                .send()
                .map_err(|e| unreachable(&url, e))?
                .error_for_status()
                .with_context(|| format!("PUT {url}"))?;
        }
        Ok(())
    }
}

fn unreachable(url: &str, e: reqwest::Error) -> anyhow::Error {
    Failure::env(format!("remote cache unreachable: {url}: {e}"))
        .hint("check --cache-url and the network, or drop --cache-url")
        .into()
}
