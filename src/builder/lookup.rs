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
    std::env::split_paths(&crate::environ::var_os("PATH")?).map(|d| d.join(name)).find(|c| c.is_file())
}

/// `__version__` and `cuda` from torch/version.py (the file; `crate::torch` reads it).
pub fn read_torch_version(file: &Path) -> Option<(String, Option<String>)> {
    crate::torch::version(file.parent()?).map(|v| (v.version, v.cuda))
}
