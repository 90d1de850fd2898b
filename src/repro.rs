//! `diff` and `verify`: the commands that check a wheel's reproducibility.
//! `diff` tells where two wheels differ (`wheel::diff`); `verify` rebuilds a
//! wheel from its own provenance and compares. Owns these command edges
//! (arguments, printing, exit codes); must not build or compare by itself.
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::error::Exit;
use crate::output::DataFormat as Format;
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
        crate::printer::json(&serde_json::json!({ "schema": SCHEMA, "diff": d }))?;
    } else {
        crate::out!("{}", diff::render(&d));
    }
    Ok(if d.identical { Exit::Ok } else { Exit::Problems })
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Rebuilds the wheel from the provenance it carries (DeepEP revision, submodules, variant,
build environment), with the wheel cache off, and compares the result byte for byte.
Exit codes: 0 identical (the wheel is what its provenance says), 1 different (the diff is
printed), 2 bad input (not a deepep-forge wheel), 3 missing toolchain.

Example: check a wheel from a colleague's or CI's cache on this machine:
  deepep-forge verify dist/deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl")]
#[command(mut_arg("source", |a| a.help("Where to fetch the source (needed when the provenance names a local folder: provenance holds no machine paths); default: the provenance's repository URL")))]
pub struct VerifyArgs {
    /// The wheel to check (built by deepep-forge: it carries a provenance document).
    #[arg(value_name = "WHEEL")]
    pub wheel: PathBuf,
    #[command(flatten)]
    pub run: crate::builder::RunArgs,
    /// The toolchain (as for build-wheel); default: the one the provenance names.
    #[arg(long, value_enum)]
    pub toolchain: Option<crate::builder::registry::Kind>,
    /// Keep the rebuilt wheel (and its statement) in DIR; default: a temporary folder.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Output: human text, or one JSON document (schema 1).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `deepep-forge verify WHEEL`.
pub fn verify(args: VerifyArgs) -> Result<Exit> {
    let _coop = crate::error::Cooperative::enter();
    let prov = crate::builder::deliver::read_provenance(&args.wheel).map_err(|e| {
        crate::error::Failure::usage(format!("{e:#}")).hint("verify needs a wheel built by deepep-forge build-wheel")
    })?;
    if prov.schema < 2 {
        return Err(crate::error::Failure::usage(format!(
            "{} carries a provenance of schema {}: wheels of that deepep-forge held their build times and machine paths, so no rebuild can match them",
            args.wheel.display(),
            prov.schema
        ))
        .hint("rebuild it with this deepep-forge (build-wheel), then verify that wheel")
        .into());
    }
    let name = crate::wheel::WheelName::parse(&args.wheel.file_name().unwrap_or_default().to_string_lossy())
        .ok_or_else(|| crate::error::Failure::usage(format!("{} is not a wheel file name", args.wheel.display())))?;
    let work = tempfile::tempdir()?;
    let pins = crate::pins::Pins::parse(
        &pins_of(&prov, &name)?,
        &PathBuf::from(format!("{} (its provenance)", args.wheel.display())),
    )?;
    let source = match (&args.run.source, prov.source.repo.strip_prefix("local:")) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(folder)) => {
            return Err(crate::error::Failure::usage(format!(
                "the wheel was built from a local source (`{folder}`), which its provenance names without a path"
            ))
            .hint(format!("pass --source PATH to that repository or folder (commit {})", prov.source.rev))
            .into())
        }
        (None, None) => None,
    };
    let toolchain = args.toolchain.unwrap_or(match prov.toolchain.kind.as_str() {
        "registry" => crate::builder::registry::Kind::Registry,
        _ => crate::builder::registry::Kind::System,
    });
    let out = args.out.clone().unwrap_or_else(|| work.path().join("out"));
    let same_dir = |a: &std::path::Path, b: &std::path::Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b))
    {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    };
    if args
        .wheel
        .parent()
        .is_some_and(|p| same_dir(if p.as_os_str().is_empty() { std::path::Path::new(".") } else { p }, &out))
    {
        return Err(crate::error::Failure::usage(format!(
            "--out {} is the folder of the wheel being verified: the rebuild would replace it",
            out.display()
        ))
        .hint("pass another --out, or none (a temporary folder)")
        .into());
    }
    // The request the provenance makes: its pins, its variant, no wheel cache.
    let req = crate::builder::BuildRequest {
        pins,
        variants: crate::builder::Variants::Named(vec![prov.variant.name.clone()]),
        source,
        python: args.run.python.clone(),
        toolchain,
        match_project: None,
        out: out.clone(),
        cache_dir: args.run.cache.cache_dir.clone(),
        no_cache: true,
        compiler_cache: args.run.compiler_cache(),
        jobs: args.run.jobs,
    };
    let built = crate::builder::run::build(&req, None, |_| {})?;
    let outcome = built.results.into_iter().next().context("the rebuild produced no wheel")?;
    let d = diff::diff(&args.wheel, &outcome.wheel)?;
    if args.format == Format::Json {
        let doc = serde_json::json!({ "schema": SCHEMA, "verified": d.identical, "rebuilt": outcome, "diff": d });
        crate::printer::json(&doc)?;
    } else if d.identical {
        crate::outln!(
            "verified: {} is what its provenance says: rebuilt {} @ {} ({}) gives the same sha256 {}",
            args.wheel.display(),
            prov.variant.name,
            &prov.source.rev[..prov.source.rev.len().min(12)],
            outcome.status,
            d.a.sha256
        );
    } else {
        crate::outln!("NOT verified: the rebuild from the wheel's provenance differs");
        crate::out!("{}", diff::render(&d).replace(&outcome.wheel.display().to_string(), "(rebuilt)"));
    }
    Ok(if d.identical { Exit::Ok } else { Exit::Problems })
}

/// A pins file that names exactly what the provenance says (values serialised by
/// `toml`, never spliced into text; `Pins::parse` validates them again).
fn pins_of(p: &crate::provenance::Provenance, name: &crate::wheel::WheelName) -> Result<String> {
    use toml::Value;
    let version = name.version.split('+').next().unwrap_or(&name.version).to_string();
    let mut source = toml::Table::new();
    source.insert("name".into(), Value::String(name.dist.clone()));
    // A local source is fetched from --source (required then); pins files name remote
    // repositories only, so it stands there under a reserved, never-fetched host.
    let repo = match p.source.repo.strip_prefix("local:") {
        Some(name) => format!(
            "https://local.invalid/{}",
            name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_' && c != '.', "_")
        ),
        None => p.source.repo.clone(),
    };
    source.insert("repo".into(), Value::String(repo));
    if let Some(b) = &p.source.branch {
        source.insert("branch".into(), Value::String(b.clone()));
    }
    source.insert("base_version".into(), Value::String(version));
    let mut pin = toml::Table::new();
    pin.insert(
        p.variant.arch.clone(),
        Value::Table([("rev".to_string(), Value::String(p.source.rev.clone()))].into_iter().collect()),
    );
    let v = &p.variant;
    let mut variant = toml::Table::new();
    variant.insert("name".into(), Value::String(v.name.clone()));
    variant.insert("arch".into(), Value::String(v.arch.clone()));
    variant.insert("cuda_arch_list".into(), Value::String(v.cuda_arch_list.clone()));
    variant.insert("multinode".into(), Value::Boolean(v.multinode));
    if let Some(t) = &v.transport {
        variant.insert("transport".into(), Value::String(t.clone()));
    }
    if let Some(r) = &v.rdma_core_home {
        variant.insert("rdma_core_home".into(), Value::String(r.clone()));
    }
    if let Some(n) = p.env.get("NVSHMEM_DIR") {
        variant.insert("nvshmem_dir".into(), Value::String(n.clone()));
    }
    let mut doc = toml::Table::new();
    doc.insert("schema".into(), Value::Integer(crate::pins::SCHEMA));
    doc.insert("source".into(), Value::Table(source));
    doc.insert("pin".into(), Value::Table(pin));
    if let (Some(torch), Some(cuda)) = (&p.toolchain.torch, &p.toolchain.cuda) {
        let mut tc = toml::Table::new();
        tc.insert("torch".into(), Value::String(torch.split('+').next().unwrap_or(torch).to_string()));
        tc.insert("cuda".into(), Value::String(cuda.clone()));
        if let Some(py) = &p.toolchain.python {
            let minor: Vec<&str> = py.split('.').take(2).collect();
            tc.insert("python".into(), Value::String(minor.join(".")));
        }
        doc.insert("toolchain".into(), Value::Table(tc));
    }
    doc.insert("variant".into(), Value::Array(vec![Value::Table(variant)]));
    Ok(toml::to_string(&doc)?)
}
