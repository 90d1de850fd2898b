//! `diff` and `verify`: the commands that check a wheel's reproducibility.
//! `diff` tells where two wheels differ (`wheel::diff`); `verify` rebuilds a
//! wheel from its own provenance and compares. Owns these command edges
//! (arguments, printing, exit codes); must not build or compare by itself.
use std::path::PathBuf;

use anyhow::Result;

use crate::error::Exit;
use crate::output::Format;
use crate::wheel::diff;

/// Version of `diff --format json` and `verify --format json`.
pub const SCHEMA: u32 = 1;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit codes: 0 the two files are identical, 1 they differ, 2 bad input (not a file, not a zip).

Example: two builds of one variant on two machines should be identical:
  deepep-forge diff machine-a/deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl \\
                    machine-b/deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl")]
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

/// `deepep-forge diff A.whl B.whl`.
pub fn diff(args: DiffArgs) -> Result<Exit> {
    let d = diff::diff(&args.a, &args.b)?;
    if args.format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "schema": SCHEMA, "diff": d }))?);
    } else {
        print!("{}", diff::render(&d));
    }
    Ok(if d.identical { Exit::Ok } else { Exit::Problems })
}
