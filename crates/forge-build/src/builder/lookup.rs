//! Plain lookups the toolchain code shares: a program on PATH, torch's
//! version file. No policy and no imports from the rest of `build`, so that
//! `toolchain` (identity, preflight) and `registry` (the uv-made toolchain)
//! both use it without importing each other.
use std::path::Path;

/// `__version__` and `cuda` from torch/version.py (the file; `forge_model::torch` reads it).
pub fn read_torch_version(file: &Path) -> Option<(String, Option<String>)> {
    forge_model::torch::version(file.parent()?).map(|v| (v.version, v.cuda))
}
