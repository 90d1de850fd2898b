//! `cache ls|gc|push|keygen`: the flags, turned into `cache::{LsRequest,
//! GcRequest, PushRequest, KeygenRequest}`; what each finds or does printed
//! here, and its exit code.
use std::path::PathBuf;

use anyhow::Result;

use crate::args::{CacheDirArg, CacheUrlArg, NetArgs};
use forge_os::error::Exit;
use forge_os::output::DataFormat as Format;
use forge_store::cache::{GcRequest, KeygenRequest, LsRequest, PushRequest};

#[derive(Debug, clap::Subcommand)]
pub enum CacheCommand {
    /// List cached wheels, registry toolchains, NCCL build trees and image bases (key, what, size, age) and the space they use.
    #[command(after_help = "\
Examples:
  deepep-forge cache ls
  deepep-forge cache ls --cache-dir /mnt/ci-cache --format json")]
    Ls(LsArgs),
    /// Remove old wheels, toolchains, NCCL build trees and image bases, and leftovers of killed builds.
    #[command(after_help = "\
Examples:
  # what would go, nothing removed
  deepep-forge cache gc --older-than 30 --dry-run
  deepep-forge cache gc --keep 20 --keep-toolchains 2 --keep-trees 4")]
    Gc(GcArgs),
    /// Sign local entries and upload them to a remote HTTP cache (PUT <url>/<key>/<wheel>, then entry.json).
    #[command(after_help = "\
Examples:
  deepep-forge cache push --cache-url https://cache.example --signing-key k
  # readers: build-wheel --cache-url URL --trusted-key NAME:BASE64")]
    Push(PushArgs),
    /// Make an ed25519 signing key for `cache push`; prints the public key readers trust.
    #[command(after_help = "\
Examples:
  # the secret key to team.key (mode 0600), the public key to team.pub
  deepep-forge cache keygen --name team-1 --out team.key > team.pub")]
    Keygen(KeygenArgs),
}

#[derive(Debug, clap::Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Output: human text, or one JSON document (schema 2: wheels, toolchains, NCCL build trees, image bases, bad entries, totals).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Debug, clap::Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Remove wheels, toolchains, NCCL build trees and image bases created more than DAYS days ago (0 to 36500).
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u64).range(0..=forge_store::cache::cmd::MAX_DAYS))]
    pub older_than: Option<u64>,
    /// Keep only the N newest wheels.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Keep only the N newest registry toolchains (each is several GB). A toolchain a running
    /// build uses is never removed.
    #[arg(long, value_name = "N")]
    pub keep_toolchains: Option<usize>,
    /// Keep only the N newest NCCL build trees (`<cache>/trees/`); objects no remaining
    /// tree names are removed. Nothing is collected while a build stores or restores one.
    #[arg(long, value_name = "N")]
    pub keep_trees: Option<usize>,
    /// Keep only the N newest image bases (`<cache>/images/base-*`, the debootstrap rootfs of
    /// `docker build --builder podman|buildah`). A base being made is never removed, and the
    /// images in podman's own store stay.
    #[arg(long, value_name = "N")]
    pub keep_bases: Option<usize>,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, clap::Args)]
#[command(mut_arg("cache_url", |a| a.required(true)))]
pub struct PushArgs {
    #[command(flatten)]
    pub cache: CacheDirArg,
    #[command(flatten)]
    pub cache_url: CacheUrlArg,
    /// The secret key that signs each entry (made by `cache keygen`; mode 0600). Its content is never printed.
    #[arg(long, env = forge_store::cache::cmd::SIGNING_KEY_ENV, value_name = "FILE")]
    pub signing_key: Option<PathBuf>,
    #[command(flatten)]
    pub net: NetArgs,
    /// Keys (or unique key prefixes) to push; default: every local entry.
    #[arg(value_name = "KEY")]
    pub keys: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// The key's name, carried by every signature (e.g. cache.example.org-1: a host and a number to rotate).
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Where to write the secret key (a new file, mode 0600; never overwritten).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// Run a `cache` subcommand.
pub fn run(cmd: CacheCommand) -> Result<Exit> {
    let mut say = |line: String| forge_os::outln!("{line}");
    match cmd {
        CacheCommand::Ls(a) => ls(&LsRequest { cache_dir: a.cache.cache_dir, format: a.format })?,
        CacheCommand::Gc(a) => forge_store::cache::gc(a.request(), &mut say)?,
        CacheCommand::Push(a) => forge_store::cache::push(a.request(), &mut say)?,
        CacheCommand::Keygen(a) => {
            let out = a.out.clone();
            let public = forge_store::cache::keygen(KeygenRequest { name: a.name, out: a.out })?;
            forge_os::note!("wrote the secret key to {} (mode 0600; keep it private)", out.display());
            forge_os::note!("readers trust the public key below: --trusted-key, DEEPEP_FORGE_TRUSTED_KEYS, or");
            forge_os::note!("`[cache] trusted-keys = [...]` in their ~/.config/deepep-forge/config.toml");
            forge_os::outln!("{public}");
        }
    }
    Ok(Exit::Ok)
}

/// `cache ls`: the listing, as text or one JSON document.
fn ls(a: &LsRequest) -> Result<()> {
    let seen = forge_store::cache::ls(a)?;
    if a.format == Format::Json {
        return Ok(forge_os::printer::json(&seen.json())?);
    }
    if !seen.bases.bases.is_empty() {
        forge_os::note!("{}", forge_store::cache::cmd::bases_note());
    }
    forge_os::out!("{}", seen.render(forge_wheel::provenance::now_secs()));
    Ok(())
}

impl GcArgs {
    /// The plain request `cache::gc` takes.
    pub fn request(self) -> GcRequest {
        GcRequest {
            cache_dir: self.cache.cache_dir,
            older_than: self.older_than,
            keep: self.keep,
            keep_toolchains: self.keep_toolchains,
            keep_trees: self.keep_trees,
            keep_bases: self.keep_bases,
            dry_run: self.dry_run,
        }
    }
}

impl PushArgs {
    /// The plain request `cache::push` takes.
    pub fn request(self) -> PushRequest {
        PushRequest {
            cache_dir: self.cache.cache_dir,
            net: self.net.net(),
            cache_url: self.cache_url.cache_url.expect("clap requires --cache-url for cache push"),
            signing_key: self.signing_key,
            keys: self.keys,
        }
    }
}
