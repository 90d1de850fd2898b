//! `docker bake` / `docker build`: container images from pins.toml. The
//! command edge (arguments, dispatch); `bake` owns the generated
//! `docker/docker-bake.json`, `builder` runs it with docker (buildx bake),
//! podman or buildah, `base` makes the registry-free base image for the last
//! two. Must not build wheels itself (the image runs `deepep-forge
//! build-wheel` or downloads from an index) nor parse consumer Dockerfiles
//! (that is `lock::dockerfile`).
use std::path::PathBuf;

use anyhow::Result;

use forge_os::error::Failure;

pub mod bake;
pub mod base;
pub mod builder;

pub use bake::{bake_json, BakeReport, BAKE_REPORT_SCHEMA};

/// Where `docker bake` writes and `docker build` reads, relative to the repository root.
pub const BAKE_FILE: &str = "docker/docker-bake.json";
/// The Dockerfile the bake targets build.
pub const DOCKERFILE: &str = "docker/Dockerfile";
/// The image definition shipped inside the binary: a daemonless `docker build` uses it
/// when the current folder has no `docker/Dockerfile` (an installed binary, no checkout
/// of this repository).
pub const DOCKERFILE_TEXT: &str = include_str!("../../../../docker/Dockerfile");
/// Image name the targets are tagged with (`<name>:<variant>-<version>`).
pub const IMAGE: &str = "deepep-forge/deep-ep";

/// What `docker build` is asked to do: the plain request `builder` takes,
/// made from the flags by the CLI.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    pub variant: Vec<String>,
    pub pins: PathBuf,
    pub file: PathBuf,
    pub builder: forge_os::process::engine::Builder,
    pub index: Option<String>,
    pub source: Option<String>,
    pub forge_binary: Option<PathBuf>,
    pub timestamp: Option<u64>,
    pub base: base::BaseRequest,
    /// `--cache-dir` as given (resolved when a daemonless build needs it).
    pub cache_dir: Option<PathBuf>,
    pub extra: Vec<String>,
}

/// An index URL for the image's pip: http or https, no spaces or control
/// characters (it becomes one build argument, never an option).
pub fn check_index_url(url: &str) -> Result<String> {
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 2048
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if !ok {
        return Err(Failure::usage(format!("--index {}: not an http(s) URL", forge_os::http::redact(url)))
            .hint("pass the variant's publish index as the image sees it, e.g. --index https://host/wheels/h100/simple/ (file:// is not reachable from inside a build)")
            .into());
    }
    Ok(if url.ends_with('/') { url.to_string() } else { format!("{url}/") })
}
