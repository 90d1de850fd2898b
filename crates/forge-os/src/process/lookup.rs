//! Finding the programs deepep-forge runs: a name on PATH (or a path), and
//! the one lookup of uv. No policy beyond where to look.
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::Failure;

/// `name` if it is a path, else the first match on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let p = Path::new(name);
    if name.contains('/') {
        return crate::fs::named::is_file(p).then(|| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
    }
    std::env::split_paths(&crate::environ::var_os("PATH")?).map(|d| d.join(name)).find(|c| crate::fs::named::is_file(c))
}

/// The one lookup of uv (`pin set --relock`, the registry toolchain, cross builds):
/// `$DEEPEP_FORGE_UV` (set and not a file: exit 3), else the first `uv` on PATH, else
/// the one next to `python` (a venv's uv); none: exit 3 saying `why` uv is needed.
pub fn find_uv_for(python: Option<&str>, why: &str) -> Result<PathBuf> {
    if let Some(u) = crate::environ::var_os("DEEPEP_FORGE_UV").filter(|u| !u.is_empty()) {
        let p = PathBuf::from(&u);
        return if crate::fs::named::is_file(&p) {
            Ok(p)
        } else {
            Err(Failure::env(format!("DEEPEP_FORGE_UV={} is not a file", p.display()))
                .hint("point it at a uv binary, or unset it to use uv from PATH")
                .into())
        };
    }
    let beside = python.and_then(which).and_then(|p| p.parent().map(|d| d.join("uv")));
    which("uv").or(beside.filter(|p| crate::fs::named::is_file(p))).ok_or_else(|| {
        let beside = if python.is_some() { ", not next to the build Python" } else { "" };
        Failure::env(format!("uv not found ({why}): not on PATH{beside}, DEEPEP_FORGE_UV unset"))
            .hint("install it with `pip install uv` (or see https://docs.astral.sh/uv/), or set DEEPEP_FORGE_UV=/path/to/uv")
            .into()
    })
}
