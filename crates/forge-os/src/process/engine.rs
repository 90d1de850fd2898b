//! The container engines deepep-forge drives (docker, podman, buildah) and how
//! each is found: `docker build` builds images with one, `probe --image` reads
//! an image with a daemonless one.
use std::path::PathBuf;

use anyhow::Result;

use super::lookup::which;
use crate::error::Failure;

/// Who builds the images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Builder {
    /// `docker buildx bake` (a Docker daemon with the buildx plugin).
    #[default]
    Docker,
    /// `podman build --isolation chroot` (no daemon, no registry).
    Podman,
    /// `buildah build --isolation chroot` (no daemon, no registry).
    Buildah,
}

/// Who reads an image for `probe --image`: only the daemonless builders mount one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ImageReader {
    /// `podman image mount`.
    #[default]
    Podman,
    /// A buildah working container (`buildah from`, `buildah mount`).
    Buildah,
}

impl From<ImageReader> for Builder {
    fn from(r: ImageReader) -> Builder {
        match r {
            ImageReader::Podman => Builder::Podman,
            ImageReader::Buildah => Builder::Buildah,
        }
    }
}

impl Builder {
    pub fn program(self) -> &'static str {
        match self {
            Builder::Docker => "docker",
            Builder::Podman => "podman",
            Builder::Buildah => "buildah",
        }
    }
}

/// The builder's program, or exit 3 saying what to install.
pub fn find(builder: Builder) -> Result<PathBuf> {
    which(builder.program()).ok_or_else(|| {
        let hint = match builder {
            Builder::Docker => "install Docker Engine with the buildx plugin (https://docs.docker.com/engine/install/), build daemonless with `--builder podman` or `--builder buildah`, or build one variant without images: `deepep-forge build-wheel --variant NAME`",
            Builder::Podman => "install podman (Debian/Ubuntu: apt-get install podman debootstrap), or pick another `--builder`",
            Builder::Buildah => "install buildah (Debian/Ubuntu: apt-get install buildah debootstrap), or pick another `--builder`",
        };
        let what = match builder {
            Builder::Docker => "docker not found on PATH: `docker build` runs `docker buildx bake`".to_string(),
            b => format!("{} not found on PATH: `docker build --builder {}` runs it", b.program(), b.program()),
        };
        Failure::env(what).hint(hint).into()
    })
}
