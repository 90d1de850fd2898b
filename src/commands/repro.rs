//! `diff` and `verify`: the flags, turned into `repro::{DiffRequest, VerifyRequest}`;
//! the results printed and the exit code chosen here.
use std::path::PathBuf;

use anyhow::Result;

use crate::args::{PinsArg, TrustedKeysArg};
use crate::commands::build::RunArgs;
use forge_build::repro::{DiffRequest, VerifyRequest};
use forge_os::error::Exit;
use forge_os::output::DataFormat as Format;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit codes: 0 the two files are identical, 1 they differ, 2 bad input (not
a file, not a zip).

Examples:
  # two builds of one variant, on two machines: should be identical
  deepep-forge diff machine-a/deep_ep-*.whl machine-b/deep_ep-*.whl
  deepep-forge diff a/deep_ep-*.whl b/deep_ep-*.whl --format json")]
pub struct DiffArgs {
    /// The first wheel.
    #[arg(value_name = "A.whl")]
    pub a: PathBuf,
    /// The second wheel.
    #[arg(value_name = "B.whl")]
    pub b: PathBuf,
    /// Output: human text, or one JSON document (schema 1).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

impl DiffArgs {
    /// The plain request `repro::diff` takes.
    pub fn request(&self) -> DiffRequest {
        DiffRequest { a: self.a.clone(), b: self.b.clone() }
    }
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Rebuilds the wheel from the provenance it carries (DeepEP revision,
submodules, variant, build environment), with the wheel cache off, and
compares the result byte for byte. The rebuild runs the setup.py of the
repository it fetches, so that repository must be one you name or trust
(--source; the [source] repo of --pins, default ./pins.toml;
DEEPEP_FORGE_TRUSTED_REPOS; `[verify] trusted-repos` in the user config): the
one the wheel's provenance names is otherwise refused before anything is
fetched. Exit codes: 0 identical (the wheel is what its provenance says), 1
different (the diff is printed), 2 bad input (not a deepep-forge wheel, a
repository not trusted), 3 missing toolchain.

Examples:
  # a wheel from a colleague's or CI's cache, rebuilt on this machine
  deepep-forge verify dist/deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl
  # every wheel of a published index, its signed manifest checked first
  deepep-forge verify https://host/wheels/h100/ --trusted-key NAME:BASE64")]
#[command(mut_arg("source", |a| a.help("Where to fetch the source (needed when the provenance names a local folder: provenance holds no machine paths); default: the provenance's repository URL, only when you trust it (see below)")))]
pub struct VerifyArgs {
    /// The wheel to check (built by deepep-forge: it carries a provenance document), or its
    /// URL in a `deepep-forge publish` index: downloaded, checked against the variant's signed
    /// manifest (keys from --trusted-key) and its .intoto.json subject, then rebuilt; or an
    /// index URL (`<base>/<variant>/`, `.../index.json`, `.../simple/deep-ep/`): every wheel
    /// its signed manifest lists (or `--wheel NAME`), each checked and rebuilt the same way.
    /// URLs are https, http on 127.0.0.1, or file:// (an index on a mounted file system).
    #[arg(value_name = "WHEEL|URL")]
    pub wheel: PathBuf,
    #[command(flatten)]
    pub trusted_keys: TrustedKeysArg,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub pins: PinsArg,
    /// The toolchain (as for build-wheel); default: the one the provenance names.
    #[arg(long, value_enum)]
    pub toolchain: Option<forge_build::builder::registry::Kind>,
    /// Keep the rebuilt wheel (and its statement) in DIR; default: a temporary folder.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Output: human text, or one JSON document (schema 1; for an index URL, `wheels` holds one per wheel).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// For an index URL: verify only this wheel (a file name the index's manifest lists).
    #[arg(long = "wheel", value_name = "NAME")]
    pub only_wheel: Option<String>,
}

impl VerifyArgs {
    /// The plain request `repro::verify` takes.
    pub fn request(self) -> VerifyRequest {
        VerifyRequest {
            trusted_keys: self.trusted_keys.trusted_keys.clone(),
            run: self.run.options(),
            pins: self.pins.if_present().map(PathBuf::from),
            toolchain: self.toolchain,
            out: self.out,
            only_wheel: self.only_wheel,
            wheel: self.wheel,
        }
    }
}

/// `deepep-forge diff A.whl B.whl`: 0 identical, 1 different.
pub fn diff(a: DiffArgs) -> Result<Exit> {
    let d = forge_build::repro::diff(&a.request())?;
    if a.format == Format::Json {
        forge_os::printer::json(&d.doc())?;
    } else {
        forge_os::out!("{}", d.render());
    }
    // 0 identical, 1 different
    Ok(if d.diff.identical { Exit::Ok } else { Exit::Problems })
}

/// `deepep-forge verify WHEEL|URL`: each wheel's lines as its rebuild is
/// compared, then (an index) the summary line, or one JSON document.
pub fn verify(a: VerifyArgs) -> Result<Exit> {
    let json = a.format == Format::Json;
    let outcome = forge_build::repro::verify(a.request(), |v| {
        if !json {
            forge_os::out!("{}", v.human);
        }
    })?;
    if json {
        forge_os::printer::json(&outcome.doc)?;
    } else if let Some(s) = &outcome.summary {
        forge_os::outln!("{s}");
    }
    // 0 every wheel is what its provenance says, 1 otherwise
    Ok(if outcome.ok { Exit::Ok } else { Exit::Problems })
}
