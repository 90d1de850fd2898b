//! Plain lookups the toolchain code shares: a program on PATH, torch's
//! version file. No policy and no imports from the rest of `build`, so that
//! `toolchain` (identity, preflight) and `registry` (the uv-made toolchain)
//! both use it without importing each other.
use std::path::{Path, PathBuf};

/// `name` if it is a path, else the first match on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let p = Path::new(name);
    if name.contains('/') {
        return p.is_file().then(|| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|c| c.is_file())
}

/// `__version__` and `cuda` from torch/version.py.
pub fn read_torch_version(file: &Path) -> Option<(String, Option<String>)> {
    let text = std::fs::read_to_string(file).ok()?;
    let value = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            let k = k.split(':').next()?.trim();
            (k == key).then(|| v.trim().trim_matches(|c| c == '\'' || c == '"').to_string()).filter(|v| v != "None")
        })
    };
    Some((value("__version__")?, value("cuda")))
}
