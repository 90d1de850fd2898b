//! `docker bake|build`: the flags, turned into `docker::bake::BakeRequest`
//! and `docker::BuildRequest`; the reports printed and the exit code chosen here.
use std::path::PathBuf;

use anyhow::Result;

use crate::args::{CacheDirArg, PinsArg};
use forge_build::docker::bake::BakeReport;
use forge_os::error::Exit;
use forge_os::output::{annotation, Annotation, Format, Level};
use forge_os::process::engine::Builder;

#[derive(Debug, clap::Subcommand)]
pub enum DockerCommand {
    /// Generate docker/docker-bake.json from pins.toml: one buildx target per variant,
    /// platform from the variant's arch, build args (rev, arch list, multinode,
    /// transport, rdma-core, probe topology) from pins.
    #[command(after_help = "\
Examples:
  deepep-forge docker bake
  # in CI: exit 1 when docker/docker-bake.json is not what pins.toml gives
  deepep-forge docker bake --check")]
    Bake(BakeArgs),
    /// Build images from the bake file (which must be up to date) with `docker
    /// buildx bake`, or daemonless with podman or buildah on a base the tool makes.
    #[command(after_help = "\
Examples:
  # docker buildx bake (a Docker daemon with buildx)
  deepep-forge docker build --variant h100
  # no daemon: podman on a base the tool makes from Debian
  deepep-forge docker build --variant h100 --builder podman
  # install DeepEP from a `publish` index instead of compiling it
  deepep-forge docker build --variant h100 --builder podman --index URL")]
    Build(Box<BuildArgs>),
}

#[derive(Debug, clap::Args)]
pub struct BakeArgs {
    /// Compare the generated file with the one on disk and write nothing; exit 1 when they differ.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub pins: PinsArg,
    /// Where to write the bake file.
    #[arg(long, default_value = forge_build::docker::BAKE_FILE, value_name = "FILE")]
    pub out: PathBuf,
    /// Report format; `json` prints {schema, file, pins, status, targets, changes};
    /// `github` adds an `::error` annotation on a stale or missing file.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

impl BakeArgs {
    /// The plain request `docker::bake::bake` takes.
    pub fn request(&self) -> forge_build::docker::bake::BakeRequest {
        forge_build::docker::bake::BakeRequest {
            check: self.check,
            pins: self.pins.to_path_buf(),
            out: self.out.clone(),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// Variant(s) to build (bake targets); repeatable. Default: every variant.
    #[arg(long, value_name = "NAME")]
    pub variant: Vec<String>,
    #[command(flatten)]
    pub pins: PinsArg,
    /// The bake file.
    #[arg(long, default_value = forge_build::docker::BAKE_FILE, value_name = "FILE")]
    pub file: PathBuf,
    /// Who builds: `docker` (`docker buildx bake`, base `CUDA_BASE_IMAGE`),
    /// `podman` or `buildah` (no daemon, no registry: `--isolation chroot` on a
    /// Debian base made by debootstrap plus the CUDA registry wheels, cached).
    #[arg(long, value_enum, default_value_t)]
    pub builder: Builder,
    /// Build the variants' index targets (`<variant>-index`): deep-ep is
    /// downloaded from this publish index (`URL/<variant>/simple/` of
    /// `deepep-forge publish`, http or https) instead of built in the image.
    #[arg(long, value_name = "URL")]
    pub index: Option<String>,
    /// podman/buildah: DeepEP's source instead of pins.toml's repository, as every
    /// `--source` takes it: a git URL, a local git repository, or a plain folder
    /// (snapshotted as `build-wheel --source` does); cloned bare into the build context
    /// (only committed objects) as DEEPEP_SOURCE.
    #[arg(long, value_name = "PATH|URL")]
    pub source: Option<String>,
    /// podman/buildah: the deepep-forge binary put in the image (default: this one).
    #[arg(long, value_name = "FILE")]
    pub forge_binary: Option<PathBuf>,
    /// Layer and image times (seconds since 1970) for reproducible images;
    /// default `SOURCE_DATE_EPOCH` when set.
    #[arg(long, value_name = "EPOCH", env = "SOURCE_DATE_EPOCH")]
    pub timestamp: Option<u64>,
    #[command(flatten)]
    pub base: BaseArgs,
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Extra arguments for the builder, after `--` (docker: `-- --push`, `-- --set
    /// '*.cache-to=...'`; podman/buildah: `--build-arg NAME=VALUE` for an ARG the
    /// bake file does not set, `--no-cache`, `--pull=never`, `--squash`, `--quiet`).
    #[arg(last = true, value_name = "BUILDER ARGS")]
    pub extra: Vec<String>,
}

#[derive(Debug, Clone, clap::Args)]
/// The base flags of podman/buildah builds, turned into a `docker::base::BaseRequest`.
pub struct BaseArgs {
    /// podman/buildah: the Debian suite of the base image (debootstrap).
    #[arg(long, default_value = "bookworm", value_name = "SUITE")]
    pub base_suite: String,
    /// podman/buildah: the Debian mirror of the base (http/https); a
    /// snapshot.debian.org URL (`.../archive/debian/20261101T000000Z`) pins the date.
    #[arg(long, default_value = forge_build::docker::base::DEFAULT_MIRROR, value_name = "URL")]
    pub base_mirror: String,
}

impl BuildArgs {
    /// The plain request, built once here.
    pub fn request(self) -> forge_build::docker::BuildRequest {
        forge_build::docker::BuildRequest {
            variant: self.variant,
            pins: self.pins.to_path_buf(),
            file: self.file,
            builder: self.builder,
            index: self.index,
            source: self.source,
            forge_binary: self.forge_binary,
            timestamp: self.timestamp,
            base: forge_build::docker::base::BaseRequest { suite: self.base.base_suite, mirror: self.base.base_mirror },
            cache_dir: self.cache.cache_dir,
            extra: self.extra,
        }
    }
}

/// Run a `docker` subcommand.
pub fn run(cmd: DockerCommand) -> Result<Exit> {
    match cmd {
        DockerCommand::Bake(a) => {
            let report = forge_build::docker::bake::bake(&a.request())?;
            print_bake(&report, a.format)?;
            Ok(if report.is_problem() { Exit::Problems } else { Exit::Ok })
        }
        DockerCommand::Build(a) => {
            forge_build::docker::builder::build(a.request(), |b| forge_os::outln!("{}", b.render()))?;
            Ok(Exit::Ok)
        }
    }
}

/// `docker bake`'s report: one JSON document, or the human lines (with an
/// `::error` annotation first for a stale or missing file under `--format github`).
fn print_bake(r: &BakeReport, format: Format) -> Result<()> {
    if format == Format::Json {
        return Ok(forge_os::printer::json(r)?);
    }
    let human = forge_build::docker::render_bake(r);
    if format == Format::Github && r.is_problem() {
        let msg = format!("{} is {}: regenerate it from {}", r.file.display(), r.status, r.pins.display());
        let note = Annotation {
            file: Some(&r.file),
            title: "deepep-forge docker-bake".into(),
            message: format!("{msg}\n{human}"),
            ..Default::default()
        };
        forge_os::printer::workflow(&annotation(Level::Error, &note));
    }
    forge_os::out!("{human}");
    Ok(())
}
