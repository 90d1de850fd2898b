//! The provenance document build-wheel stamps into `<name>.dist-info/` and the
//! probes read back. Owns the schema; must not compute any of its values.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// File name inside the wheel's `.dist-info/`.
pub const FILE_NAME: &str = "deepep-forge-provenance.json";
/// Version of this document's shape.
pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub schema: u32,
    /// `deepep-forge <version>`.
    pub tool: String,
    pub source: SourceInfo,
    pub variant: VariantInfo,
    /// Every build-relevant environment variable as the build saw it.
    pub env: BTreeMap<String, String>,
    pub toolchain: ToolchainInfo,
    pub host: HostInfo,
    pub times: Times,
    pub cache_key: String,
    /// Changes made to the built wheel (RUNPATH rewrites, ...); empty for an exact build.
    #[serde(default)]
    pub patches: Vec<Patch>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub repo: String,
    pub rev: String,
    pub branch: Option<String>,
    /// `git rev-parse --short HEAD` in the build tree.
    pub short: String,
    /// Submodule path -> commit.
    #[serde(default)]
    pub submodules: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantInfo {
    pub name: String,
    pub arch: String,
    pub cuda_arch_list: String,
    pub multinode: bool,
    pub transport: Option<String>,
    pub rdma_core_home: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolchainInfo {
    pub kind: String,
    pub python: Option<String>,
    pub python_tag: Option<String>,
    pub torch: Option<String>,
    pub cuda: Option<String>,
    pub nvcc: Option<String>,
    pub cxx: Option<String>,
    pub cxx_version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub arch: String,
    pub os: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Times {
    /// RFC 3339 UTC.
    pub started: String,
    pub finished: String,
    pub source_date_epoch: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Patch {
    /// Wheel member changed.
    pub file: String,
    /// e.g. `runpath`.
    pub kind: String,
    pub from: String,
    pub to: String,
}
