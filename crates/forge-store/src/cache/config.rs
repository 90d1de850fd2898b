//! Which public keys this user trusts for remote cache entries. Only the user
//! decides: `--trusted-key`, `DEEPEP_FORGE_TRUSTED_KEYS`, and the user's config
//! file `$XDG_CONFIG_HOME/deepep-forge/config.toml` (else
//! `~/.config/deepep-forge/config.toml`):
//!
//! ```toml
//! [cache]
//! trusted-keys = ["cache.example.org-1:BASE64..."]
//! ```
//!
//! The three are added together. Never pins.toml or anything in a project,
//! which a pull request can edit.
use std::path::PathBuf;

use anyhow::Result;
use serde::Deserialize;

use super::sign::PublicKey;
use forge_os::error::Failure;

/// The environment variable with trusted keys (separated by spaces, commas or newlines).
pub const TRUSTED_KEYS_ENV: &str = "DEEPEP_FORGE_TRUSTED_KEYS";

/// The user's config file, if a home is known.
pub fn config_path() -> Option<PathBuf> {
    forge_os::environ::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            forge_os::environ::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".config"))
        })
        .map(|d| d.join("deepep-forge").join("config.toml"))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    cache: CacheSection,
    /// `[build]` (compiler-cache): read by `builder::canon`.
    #[serde(default)]
    #[allow(dead_code)]
    build: Option<toml::Table>,
    /// `[verify]` (trusted-repos): read by `repro`.
    #[serde(default)]
    #[allow(dead_code)]
    verify: Option<toml::Table>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct CacheSection {
    #[serde(default)]
    trusted_keys: Vec<String>,
}

/// The trusted keys, with where each came from; a malformed key or config
/// file is a usage error naming its source.
pub fn trusted_keys(flags: &[String]) -> Result<Vec<PublicKey>> {
    let mut out = Vec::new();
    let mut add = |s: &str, from: &str| -> Result<()> {
        let k = PublicKey::parse(s).map_err(|why| {
            Failure::usage(format!("trusted key from {from}: {why}"))
                .hint("a trusted key looks like `name:BASE64` as `deepep-forge cache keygen` prints it")
        })?;
        if !out.contains(&k) {
            out.push(k);
        }
        Ok(())
    };
    for f in flags {
        add(f, "--trusted-key")?;
    }
    if let Some(v) = forge_os::environ::var_os(TRUSTED_KEYS_ENV) {
        let v = v.to_str().ok_or_else(|| Failure::usage(format!("{TRUSTED_KEYS_ENV} is not UTF-8")))?.to_string();
        for k in v.split(|c: char| c.is_whitespace() || c == ',').filter(|k| !k.is_empty()) {
            add(k, TRUSTED_KEYS_ENV)?;
        }
    }
    if let Some(path) = config_path() {
        // Checked on the opened file: a FIFO or device there never blocks and is refused (exit 2).
        if let Some(text) = forge_os::fs::named::read_text_opt(&path, "config file", 1 << 20)? {
            let cfg: ConfigFile = toml::from_str(&text).map_err(|e| {
                Failure::usage(format!("{}: {}", path.display(), e.message())).hint(
                    "the config file takes `[cache]` with `trusted-keys = [\"name:BASE64\", ...]`; fix or remove it",
                )
            })?;
            let from = path.display().to_string();
            for k in &cfg.cache.trusted_keys {
                add(k, &from)?;
            }
        }
    }
    Ok(out)
}
