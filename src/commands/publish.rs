//! `publish`: the flags, turned into `publish::{PublishRequest, CheckRequest}`;
//! the reports printed and the exit code chosen here.
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::commands::build::Common;
use forge_build::publish::{CheckRequest, PublishRequest};
use forge_os::error::Exit;
use forge_os::output::DataFormat;

#[derive(Debug, clap::Args)]
#[command(mut_arg("out", |a| a
    .help("The index folder: <DIR>/<variant>/simple/deep-ep/ and <DIR>/<variant>/index.json")
    .default_value("index")))]
#[command(after_help = "\
Examples:
  deepep-forge publish --variant h100 --signing-key publish.key --out public/
  # both architectures in one index (gb200-nvl72 has `index = \"h100\"`)
  deepep-forge publish --variant h100 --variant gb200-nvl72 --signing-key k
  # a wheel per Python of pins.toml's [toolchain] python list, one index
  deepep-forge publish --variant h100 --toolchain registry --signing-key k
  # one index of PEP 825 variant wheels (uv --preview-features wheel-variants)
  # and h100's plain wheel for installers without variant support
  deepep-forge publish --all --variant-wheels --default-variant h100 \\
    --signing-key k
  deepep-forge publish --check public/ --trusted-key NAME:BASE64
  deepep-forge verify https://host/wheels/h100/ --trusted-key NAME:BASE64")]
pub struct PublishArgs {
    #[command(flatten)]
    pub common: Common,
    /// The ed25519 key that signs each variant's index.json (`cache keygen` makes one);
    /// with --check, only named in the `publish` commands it prints.
    #[arg(long, value_name = "FILE", required_unless_present = "check")]
    pub signing_key: Option<PathBuf>,
    /// Verify the index in DIR against pins.toml instead of publishing: every variant
    /// present with a wheel at the pinned revision, hashes and signatures right, no
    /// foreign files (reported, never deleted). Exit 1 naming each file.
    #[arg(long, value_name = "DIR")]
    pub check: Option<PathBuf>,
    /// Evidence folders (repeatable, docs/evidence.md): statements a trusted key
    /// signed about the index's wheels are served beside them and listed in the manifest.
    #[arg(long = "evidence", value_name = "DIR", conflicts_with = "check")]
    pub evidence: Vec<PathBuf>,
    /// Write one index, <DIR>/variants/, holding every variant as a PEP 825 variant
    /// wheel (label = variant name, `-` as `_`) and `deep_ep-<version>-variants.json`
    /// (docs/publish.md: how uv picks one).
    #[arg(long, conflicts_with = "check")]
    pub variant_wheels: bool,
    /// With --variant-wheels: the variant whose plain wheel (no label) installers
    /// without variant support get. Without it no plain wheel is written: such an
    /// installer finds nothing rather than a build that may not fit.
    #[arg(long, value_name = "VARIANT", requires = "variant_wheels")]
    pub default_variant: Option<String>,
}

/// `publish`, or `publish --check DIR`.
pub fn run(a: PublishArgs) -> Result<Exit> {
    let format = a.common.format;
    let Some(dir) = a.check else {
        let report = forge_build::publish::run(PublishRequest {
            build: a.common.options(),
            signing_key: a.signing_key.context("--signing-key is required without --check")?,
            evidence: a.evidence,
            variant_wheels: a.variant_wheels,
            default_variant: a.default_variant,
        })?;
        if format == DataFormat::Json {
            forge_os::printer::json(&report)?;
        } else {
            forge_os::out!("{}", report.render());
        }
        return Ok(Exit::Ok);
    };
    let c = &a.common;
    let report = forge_build::publish::check(CheckRequest {
        dir,
        pins: c.pins.to_path_buf(),
        trusted_keys: c.remote.trusted_keys.to_vec(),
        variants: c.variants.clone(),
        signing_key: a.signing_key,
    })?;
    if format == DataFormat::Json {
        forge_os::printer::json(&report)?;
    } else {
        forge_os::out!("{}", report.render());
    }
    Ok(if report.ok { Exit::Ok } else { Exit::Problems })
}
