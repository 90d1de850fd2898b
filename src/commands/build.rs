//! `plan` and `build-wheel` (and the build flags `publish` and `verify`
//! share): the flags, turned into `builder::request::{BuildOptions, RunOptions}`;
//! the two commands run, their results printed and their exit codes chosen here.
use std::path::PathBuf;

use anyhow::Result;

use crate::args::{CacheDirArg, PinsArg, RemoteArgs};
use forge_build::builder::render::{self, Line};
use forge_build::builder::request::{BuildOptions, CompilerCache, RunOptions};
use forge_os::error::Exit;
use forge_os::output::DataFormat as Format;

/// `deepep-forge plan`: the plans, as JSON (with a CI matrix) or the human listing.
pub fn plan(args: PlanArgs) -> Result<Exit> {
    let opts = args.common.options();
    let plans = forge_build::builder::plan(&opts)?;
    match opts.format {
        Format::Json => forge_os::printer::json(&plans.json()?)?,
        _ => forge_os::out!("{}", plans.human()),
    }
    Ok(Exit::Ok)
}

/// `deepep-forge build-wheel`: each wheel's result lines as it is delivered
/// (human), the skipped variants, or the build report (JSON).
pub fn build_wheel(args: BuildArgs) -> Result<Exit> {
    let req = args.request();
    let human = req.common.format != Format::Json;
    let mut first = true;
    let built = forge_build::builder::build(&req, |o| {
        if human {
            for line in render::outcome(o, std::mem::replace(&mut first, false)) {
                match line {
                    Line::Out(l) => forge_os::outln!("{l}"),
                    Line::Note(l) => forge_os::note!("{l}"),
                }
            }
        }
    })?;
    if human {
        for s in &built.skipped {
            forge_os::outln!("{}", render::skipped(s));
        }
    } else {
        forge_os::outln!("{}", built.report_json()?);
    }
    Ok(Exit::Ok)
}

/// How a build runs, whatever it builds: declared once, flattened into `plan`,
/// `build-wheel` and `verify`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Override the source repository: a git URL, a local git repository, or a
    /// plain folder (committed into a snapshot repository with a fixed identity
    /// and date, so the same files always give the same sha; the pin must name it).
    #[arg(long, value_name = "PATH|URL")]
    pub source: Option<String>,
    /// The Python that builds (needs setuptools, wheel, pip; torch for DeepEP);
    /// default `python3`. With `--toolchain registry`: the interpreter the managed
    /// environment is made from (default: pins.toml's `[toolchain].python`, found by uv).
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<String>,
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Compiler cache (sccache): a folder, or a storage a fleet shares
    /// (redis://HOST:PORT, rediss://, memcached://HOST:PORT, s3://BUCKET/PREFIX,
    /// webdav+https://HOST/PATH, gha; credentials only from sccache's own variables in
    /// the environment, e.g. SCCACHE_REDIS_PASSWORD, AWS_SECRET_ACCESS_KEY, never shown).
    /// A warm cache makes a rebuild, or another variant that shares sources, cheap; a
    /// storage that does not answer is a note, never a failed build. Without a value:
    /// `<cache>/sccache`. Also `DEEPEP_FORGE_COMPILER_CACHE` or `compiler-cache = "..."`
    /// in `$XDG_CONFIG_HOME/deepep-forge/config.toml` (never pins.toml). The wheel's bytes
    /// and its cache key are the same with and without it.
    #[arg(long, value_name = "DIR|URL", num_args = 0..=1)]
    pub compiler_cache: Option<Option<PathBuf>>,
    /// No compiler cache, whatever the environment or the user config say.
    #[arg(long, conflicts_with = "compiler_cache")]
    pub no_compiler_cache: bool,
    /// Build NCCL from source in every DOCA multinode build: neither reuse nor store its
    /// build output (by default it is stored in the cache once per NCCL submodule commit,
    /// arch list, nvcc, host compiler and make variables, and put in place before
    /// setup.py's `make src.build`; the wheel's bytes and cache key are the same either way).
    #[arg(long)]
    pub no_nccl_reuse: bool,
    /// Parallel compile jobs (MAX_JOBS), 1 to 4096. Default: the number of CPU cores.
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub jobs: Option<usize>,
    /// Build DeepEP's extensions one after another, as `pip wheel` does. By default they
    /// are built at once (each with its own ninja folder, MAX_JOBS split between them),
    /// through the same setuptools hooks and compile commands: the wheel's bytes and its
    /// cache key are the same either way.
    #[arg(long)]
    pub serial_extensions: bool,
}

impl RunArgs {
    /// `--compiler-cache [DIR]` / `--no-compiler-cache` as the request states it.
    pub fn compiler_cache(&self) -> CompilerCache {
        match (&self.compiler_cache, self.no_compiler_cache) {
            (_, true) => CompilerCache::Off,
            (Some(d), false) => CompilerCache::At(d.clone()),
            (None, false) => CompilerCache::Default,
        }
    }

    /// The plain options these flags make.
    pub fn options(&self) -> RunOptions {
        RunOptions {
            source: self.source.clone(),
            python: self.python.clone(),
            cache_dir: self.cache.cache_dir.clone(),
            compiler_cache: self.compiler_cache(),
            nccl_reuse: !self.no_nccl_reuse,
            jobs: self.jobs,
            serial_extensions: self.serial_extensions,
        }
    }
}

/// Options shared by `plan` and `build-wheel`.
#[derive(Debug, clap::Args)]
pub struct Common {
    #[command(flatten)]
    pub pins: PinsArg,
    /// Variant to build (repeatable); `deepep-forge pins show` lists them.
    #[arg(long = "variant", value_name = "NAME")]
    pub variants: Vec<String>,
    /// Every variant of this host's architecture; the others are listed as skipped.
    #[arg(long, conflicts_with = "variants")]
    pub all: bool,
    #[command(flatten)]
    pub run: RunArgs,
    /// Where torch, nvcc and the CUDA headers come from: `system` (the build
    /// Python's environment and the CUDA on this machine) or `registry` (a cached
    /// environment made with uv from PyPI: torch from pins.toml's `[toolchain]`,
    /// the CUDA compiler packages of torch's own CUDA minor; no CUDA install needed).
    #[arg(long, value_enum, default_value_t)]
    pub toolchain: forge_build::builder::registry::Kind,
    /// With `--toolchain registry`: take torch's version from this project's
    /// uv.lock (so the wheel's torch ABI matches the project that installs it).
    #[arg(long, value_name = "DIR")]
    pub match_project: Option<PathBuf>,
    /// Output folder for wheels and SHA256SUMS.
    #[arg(long, default_value = "dist", value_name = "DIR")]
    pub out: PathBuf,
    /// Build without reading or writing the wheel cache (git mirrors and logs still live there).
    #[arg(long)]
    pub no_cache: bool,
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// Output: human text, or one JSON document (schema 2: `plan` prints plans
    /// (each a full, replayable build recipe: argv, cwd, the whole environment),
    /// skipped variants and a CI matrix; `build-wheel` prints the build report).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

impl Common {
    /// The plain options these flags make (pins.toml is read by `BuildOptions::request`).
    pub fn options(&self) -> BuildOptions {
        BuildOptions {
            pins: self.pins.to_path_buf(),
            variants: self.variants.clone(),
            all: self.all,
            run: self.run.options(),
            toolchain: self.toolchain,
            match_project: self.match_project.clone(),
            out: self.out.clone(),
            no_cache: self.no_cache,
            remote: self.remote.request(),
            format: self.format,
        }
    }
}

#[derive(Debug, clap::Args)]
#[command(mut_arg("variants", |a| a.help("Variant to plan (repeatable); `deepep-forge pins show` lists them")))]
#[command(after_help = "\
Examples:
  deepep-forge plan --variant h100
  # every variant, JSON with a CI matrix (`matrix.include`)
  deepep-forge plan --all --format json
  # variant x arch x Python ([toolchain] python a list)
  deepep-forge plan --all --toolchain registry --format json
  # torch and nvcc from PyPI: what would be provisioned
  deepep-forge plan --variant h100 --toolchain registry --python python3.12")]
pub struct PlanArgs {
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  # torch and a CUDA toolkit on this machine
  deepep-forge build-wheel --variant h100
  # every variant of pins.toml
  deepep-forge build-wheel --all --out dist --report build.json
  # torch and nvcc from PyPI (needs uv)
  deepep-forge build-wheel --variant h100 --toolchain registry --python 3.12
  # from a local clone instead of GitHub
  deepep-forge build-wheel --variant h100 --source ../DeepEP
  # a signed remote cache first
  deepep-forge build-wheel --variant h100 --cache-url https://cache.example/x
`deepep-forge plan` takes the same arguments and prints what a build would
use.")]
pub struct BuildArgs {
    #[command(flatten)]
    pub common: Common,
    /// Also write the JSON build report to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

impl BuildArgs {
    /// The plain request `builder::build` takes.
    pub fn request(self) -> forge_build::builder::BuildWheelRequest {
        forge_build::builder::BuildWheelRequest { common: self.common.options(), report: self.report }
    }
}
