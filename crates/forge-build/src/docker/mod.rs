//! `docker bake` / `docker build`: container images from pins.toml. The
//! command edge (arguments, dispatch); `bake` owns the generated
//! `docker/docker-bake.json`, `builder` runs it with docker (buildx bake),
//! podman or buildah, `base` makes the registry-free base image for the last
//! two. Must not build wheels itself (the image runs `deepep-forge
//! build-wheel` or downloads from an index) nor parse consumer Dockerfiles
//! (that is `lock::dockerfile`).
use std::path::{Path, PathBuf};

use anyhow::Result;

use forge_os::error::Failure;

pub mod bake;
pub mod base;
pub mod builder;

pub use bake::{bake_json, render_bake, BakeReport, BAKE_REPORT_SCHEMA};

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
/// characters (it becomes one build argument, never an option). Returned as
/// a folder ([`forge_os::url::folder`]: a `/` ending its path, before any
/// query or fragment); otherwise byte for byte as given.
pub fn check_index_url(url: &str) -> Result<String> {
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 2048
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if !ok {
        return Err(Failure::usage(format!("--index {}: not an http(s) URL", forge_os::http::redact(url)))
            .hint("pass the variant's publish index as the image sees it, e.g. --index https://host/wheels/h100/simple/ (file:// is not reachable from inside a build)")
            .into());
    }
    Ok(forge_os::url::folder(url).into_owned())
}

/// A file path the user gives (`--out FILE`, `--file FILE`) as the folder it
/// lies in and its name there, for a [`forge_os::fs::Tree`]: a relative path
/// stays inside the folder it starts from (the current folder, or the one its
/// leading `..` name), so a link on the way (a planted `docker/`) that leads
/// out of it is refused; an absolute path's folder is the user's own choice.
pub fn place(path: &Path) -> Result<(PathBuf, PathBuf)> {
    use std::path::Component;
    let bad = || Failure::usage(format!("{}: not a file path", path.display()));
    if path.is_absolute() {
        let name = path.file_name().ok_or_else(bad)?;
        let dir = path.parent().ok_or_else(bad)?;
        return Ok((dir.to_path_buf(), PathBuf::from(name)));
    }
    let (mut root, mut rel) = (PathBuf::from("."), PathBuf::new());
    for c in path.components() {
        match c {
            Component::ParentDir if rel.as_os_str().is_empty() => root.push(".."),
            Component::CurDir => {}
            Component::Normal(n) => rel.push(n),
            _ => return Err(bad().hint("name the file without `..` after a folder name").into()),
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(bad().into());
    }
    Ok((root, rel))
}

/// A file path the user gives, to be read (`docker bake --check`, the bake
/// file `docker build` reads): the folder it names (links on the way are the
/// user's choice, as for any file named on the command line) and its name
/// there; a link at the name that leads out of that folder is refused.
pub fn place_read(path: &Path) -> Result<(PathBuf, PathBuf)> {
    let name = path.file_name().ok_or_else(|| Failure::usage(format!("{}: not a file path", path.display())))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((dir.to_path_buf(), PathBuf::from(name)))
}

/// How messages name the folder [`place`] gives: the current folder (the
/// build context), or the folder the user's path names.
pub fn folder_name(root: &Path) -> &'static str {
    if root == Path::new(".") {
        "current folder"
    } else {
        "folder"
    }
}
