//! `deepep-forge publish`: each variant's wheels (from the wheel cache, or
//! built through `builder::build_quiet`) written into a static package index,
//! one per variant: `<DIR>/<variant>/simple/deep-ep/` with the wheels, their
//! `.metadata` (PEP 658/714) and `.intoto.json`, the PEP 503/691 pages
//! ([`pages`]) and `<DIR>/<variant>/index.json`, the signed manifest
//! ([`manifest`]). Immutable like PyPI: a file under an existing name is never
//! rewritten (a different one is exit 1 with nothing written); every file
//! appears by rename, the manifest last; publishing twice changes no byte.
//! `publish --check DIR` ([`check`]) verifies an index against pins.toml.
//! `publish --variant-wheels` ([`variants`]) writes one index, `<DIR>/variants/`,
//! of PEP 825 variant wheels (and `--default-variant`'s plain wheel) instead.
//! Must not build by itself (the builder does), nor serve anything.
use forge_store::index::{
    check, evidence, facts, manifest, out, pages, variants, variants_files, Source, Write, REPORT_SCHEMA, VARIANT_INDEX,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use facts::Facts;
use forge_model::pins::Pins;
use forge_os::error::{Exit, Failure};
use forge_store::cache::sign::{PublicKey, SecretKey};
use manifest::{Manifest, PROJECT};
use out::Out;

/// `publish`: each variant's wheels into a signed index, as plain data.
#[derive(Debug, Clone)]
pub struct PublishRequest {
    /// The variants, the build and the index folder (`out`).
    pub build: crate::builder::request::BuildOptions,
    /// The ed25519 key that signs each variant's index.json.
    pub signing_key: PathBuf,
    /// Evidence folders whose trusted statements are served with the wheels.
    pub evidence: Vec<PathBuf>,
    /// One index of PEP 825 variant wheels.
    pub variant_wheels: bool,
    /// With `variant_wheels`: the variant whose plain wheel is served too.
    pub default_variant: Option<String>,
}

/// `publish --check DIR`: verify an index against pins.toml.
#[derive(Debug, Clone)]
pub struct CheckRequest {
    pub dir: PathBuf,
    pub pins: PathBuf,
    pub trusted_keys: Vec<String>,
    pub variants: Vec<String>,
    /// `--signing-key`, when given: named in the printed `publish` commands.
    pub signing_key: Option<PathBuf>,
    pub format: forge_os::output::DataFormat,
}

/// `deepep-forge publish --check DIR`.
pub fn check(c: CheckRequest) -> Result<Exit> {
    let request = check::Request {
        pins: &c.pins,
        trusted_keys: &c.trusted_keys,
        variants: &c.variants,
        signing_key: c.signing_key.as_deref(),
        format: c.format,
    };
    check::run(&request, &c.dir)
}

/// `deepep-forge publish`.
pub fn run(mut args: PublishRequest) -> Result<Exit> {
    let pins = Pins::load(&args.build.pins)?;
    for v in &args.build.variants {
        pins.variant(v)?;
    }
    // Labels are checked before anything is built: two variants, one label is bad input.
    let labelled = if args.variant_wheels { Some(variants::labels(&pins.variants)?) } else { None };
    let pins_sha256 = forge_os::input::sha256_hex(&forge_os::fs::named::read_bytes(
        &args.build.pins,
        "pins file",
        forge_os::input::cap::TEXT,
    )?);
    let key = SecretKey::load(&args.signing_key)?;
    check_out(&args.build.out)?;
    let mut trusted = forge_store::cache::config::trusted_keys(&args.build.remote.trusted_keys)?;
    trusted.push(key.public());
    let found = forge_store::evidence::store::read_all(&args.evidence, &trusted)?.found;
    let index = std::mem::replace(&mut args.build.out, PathBuf::new());
    let built = tempfile::tempdir().context("creating a temporary folder for the wheels")?;
    args.build.out = built.path().to_path_buf();
    let remote = args.build.remote.connect(args.build.no_cache)?;
    // Variants of one architecture give wheels of one file name: a build of
    // several variants delivers each into `<out>/<variant>/` (`builder::request::out_folder`).
    let outcomes = crate::builder::run::build(&args.build.request()?, remote.as_ref(), |_| {})?.results;
    let mut by_variant: BTreeMap<String, Vec<(PathBuf, Facts)>> = BTreeMap::new();
    if let Some(d) = &args.default_variant {
        pins.variant(d)?;
        if !args.build.variants.contains(d) && !args.build.all {
            return Err(Failure::usage(format!("--default-variant {d} is not among the variants published"))
                .hint(format!("add --variant {d}"))
                .into());
        }
    }
    for o in &outcomes {
        let f = facts::read(&o.wheel)?;
        let variant = pins.variant(&o.variant)?;
        facts::matches_pins(&f.entry.provenance, &pins, variant)
            .map_err(|why| Failure::problems(format!("{}: {why}", o.wheel.display())))?;
        // Variants of one index (pins.toml `index`) share its folder: uv picks by platform.
        if labelled.is_some() {
            let vw = variant_wheel(&pins, &o.wheel, variant, built.path())?;
            let group = by_variant.entry(VARIANT_INDEX.to_string()).or_default();
            group.push(vw);
            if args.default_variant.as_deref() == Some(variant.name.as_str()) {
                group.push((o.wheel.clone(), f));
            }
            continue;
        }
        by_variant.entry(variant.index_name().to_string()).or_default().push((o.wheel.clone(), f));
    }
    // Read-manifest -> write -> rename under one lock on the folder: a second
    // publish into it waits, then adds its wheels to the manifest this one wrote.
    check_out(&index)?;
    let out = Out::lock(&index)?;
    let mut writes = Vec::new();
    let mut summary = Vec::new();
    for (variant, wheels) in &by_variant {
        check_places(&out, variant)?;
        let vpins = labelled.as_ref().map(|_| &pins);
        let (w, s) = plan_variant(&out, variant, wheels, &pins_sha256, (&key, &trusted), &found, vpins)?;
        writes.extend(w);
        summary.extend(s);
    }
    for w in &writes {
        out.check(&w.dest)?;
    }
    let conflicts = conflicts(&out, &writes);
    if !conflicts.is_empty() {
        return Err(Failure::problems(format!(
            "nothing published: a different file exists under a published name (published files are immutable):\n  {}",
            conflicts.join("\n  ")
        ))
        .hint("publish a new revision (a new version label) instead, or publish into a new folder")
        .into());
    }
    let written = apply(&out, &writes)?;
    let report = Report {
        schema: REPORT_SCHEMA,
        out: index.clone(),
        wheels: summary,
        files_written: written,
        files_unchanged: writes.len() - written,
    };
    print_report(&report, args.build.format)?;
    Ok(Exit::Ok)
}

/// `--out` must be a folder or absent (a file there is a usage error, before anything is built).
fn check_out(out: &Path) -> Result<()> {
    match std::fs::metadata(out) {
        Ok(m) if !m.is_dir() => Err(Failure::usage(format!("--out {}: a file, not a folder", out.display()))
            .hint("pass the index folder (it is created when absent), e.g. --out public/")
            .into()),
        _ => Ok(()),
    }
}

/// The variant's folders and manifest, checked before the manifest is read.
fn check_places(out: &Out, variant: &str) -> Result<()> {
    let vdir = Path::new(variant);
    out.check(&vdir.join(manifest::FILE))?;
    out.check(&vdir.join("simple").join(PROJECT).join("index.html"))
}

/// What `publish` did (`--format json`).
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub schema: u32,
    /// The index folder.
    pub out: PathBuf,
    pub wheels: Vec<Published>,
    pub files_written: usize,
    pub files_unchanged: usize,
}

/// One wheel in an index.
#[derive(Debug, serde::Serialize)]
pub struct Published {
    /// The index it is in (`<out>/<index>/simple/deep-ep/`).
    pub index: String,
    pub variant: String,
    pub arch: String,
    pub wheel: String,
    pub sha256: String,
}

fn print_report(r: &Report, format: forge_os::output::DataFormat) -> Result<()> {
    if format == forge_os::output::DataFormat::Json {
        return Ok(forge_os::printer::json(r)?);
    }
    for w in &r.wheels {
        forge_os::outln!("published {}: {} sha256 {}", w.index, w.wheel, &w.sha256[..16]);
    }
    forge_os::outln!("{} files written, {} unchanged, into {}", r.files_written, r.files_unchanged, r.out.display());
    Ok(())
}

/// The files of one variant's index: the new wheels and their files, the
/// pages and the signed manifest (old entries kept from the existing
/// manifest, which must verify).
fn plan_variant(
    out: &Out,
    variant: &str,
    wheels: &[(PathBuf, Facts)],
    pins_sha256: &str,
    (key, trusted): (&SecretKey, &[PublicKey]),
    found: &[forge_store::evidence::store::Found],
    variant_index: Option<&Pins>,
) -> Result<(Vec<Write>, Vec<Published>)> {
    manifest::check_variant_name(variant).map_err(Failure::usage)?;
    let vdir = PathBuf::from(variant);
    let mpath = out.show(&vdir.join(manifest::FILE));
    let mut m = if let Some(f) = out.open_file(&vdir.join(manifest::FILE))? {
        manifest::verified_file(f, &mpath, trusted)?.0
    } else {
        Manifest {
            schema: manifest::SCHEMA,
            project: PROJECT.into(),
            variant: variant.into(),
            pins_sha256: String::new(),
            wheels: vec![],
            evidence: vec![],
            variants_json: vec![],
            signatures: vec![],
        }
    };
    if m.variant != variant {
        return Err(Failure::problems(format!("{}: is the index of variant `{}`", mpath.display(), m.variant)).into());
    }
    let files = vdir.join("simple").join(PROJECT);
    let mut writes = Vec::new();
    let mut summary = Vec::new();
    for (path, f) in wheels {
        let e = &f.entry;
        match m.wheels.iter().find(|w| w.wheel == e.wheel) {
            Some(old) if old != e => {
                return Err(Failure::problems(format!(
                    "{}: the signed manifest lists {} with sha256 {}, this build gives {}: nothing published",
                    mpath.display(),
                    e.wheel,
                    old.sha256,
                    e.sha256
                ))
                .hint("published files are immutable: publish a new revision instead")
                .into())
            }
            Some(_) => {}
            None => m.wheels.push(e.clone()),
        }
        summary.push(Published {
            index: variant.to_string(),
            variant: e.provenance.variant.clone(),
            arch: e.provenance.arch.clone(),
            wheel: e.wheel.clone(),
            sha256: e.sha256.clone(),
        });
        let imm = |name: String, bytes: Source| Write { dest: files.join(name), bytes, immutable: true };
        writes.push(imm(e.wheel.clone(), Source::File(path.clone())));
        writes.push(imm(format!("{}.metadata", e.wheel), Source::Bytes(f.metadata.clone())));
        writes.push(imm(format!("{}{}", e.wheel, forge_wheel::attest::SUFFIX), Source::Bytes(f.intoto.clone())));
    }
    m.wheels.sort_by(|a, b| a.wheel.cmp(&b.wheel));
    writes.extend(evidence::plan(&files, &mut m, found)?);
    if let Some(pins) = variant_index {
        for (name, bytes) in variants_files(&m, pins).map_err(|e| anyhow::anyhow!("{}: {e}", mpath.display()))? {
            m.variants_json.retain(|f| f.file != name);
            m.variants_json
                .push(manifest::VariantsFile { file: name.clone(), sha256: forge_os::input::sha256_hex(&bytes) });
            writes.push(Write { dest: files.join(name), bytes: Source::Bytes(bytes), immutable: false });
        }
        m.variants_json.sort_by(|a, b| a.file.cmp(&b.file));
    }
    m.pins_sha256 = pins_sha256.to_string();
    m.sign(key);
    for (rel, bytes) in pages::render(&m) {
        writes.push(Write { dest: vdir.join(rel), bytes: Source::Bytes(bytes), immutable: false });
    }
    // The manifest last: a reader that trusts it finds every file it names.
    writes.push(Write { dest: vdir.join(manifest::FILE), bytes: Source::Bytes(m.render()), immutable: false });
    Ok((writes, summary))
}

/// The variant wheel of a built wheel, in `dir`: labelled, `variant.json` added,
/// its facts read back from the new file and its properties checked against pins.toml.
fn variant_wheel(pins: &Pins, built: &Path, v: &forge_model::pins::Variant, dir: &Path) -> Result<(PathBuf, Facts)> {
    let label = variants::label(&v.name)?;
    let file = built.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let path = dir.join(variants::wheel_name(file, &label)?);
    if !path.exists() {
        let props = variants::properties(v, pins.toolchain.as_ref().map(|t| t.cuda.as_str()));
        variants::relabel(built, &path, &label, &props)?;
    }
    variants::check_wheel(&path, pins)?;
    Ok((path.clone(), facts::read(&path)?))
}

fn digest_of(s: &Source) -> Result<String> {
    match s {
        Source::File(p) => Ok(forge_os::fs::named::sha256_file(p, "wheel", forge_os::input::cap::WHEEL)?.0),
        Source::Bytes(b) => Ok(forge_os::input::sha256_hex(b)),
    }
}

/// Immutable files that exist with other bytes.
fn conflicts(out: &Out, writes: &[Write]) -> Vec<String> {
    writes
        .iter()
        .filter(|w| w.immutable)
        .filter_map(|w| {
            let have = out.digest(&w.dest)?;
            let want = digest_of(&w.bytes).ok()?;
            (have != want).then(|| format!("{}: sha256 {have}, this publish has {want}", out.show(&w.dest).display()))
        })
        .collect()
}

/// Put every file in place (temp file in its folder, then rename; immutable
/// ones never over an existing file); skips files already identical. Every
/// folder is opened (made when absent) without following a link before the
/// first file is written, and the files go through those descriptors only
/// ([`out`]). Returns how many were written.
fn apply(out: &Out, writes: &[Write]) -> Result<usize> {
    let dirs = out.open_dirs(writes.iter().map(|w| w.dest.as_path()))?;
    let mut n = 0;
    for w in writes {
        let want = digest_of(&w.bytes)?;
        if dirs.digest(&w.dest).as_deref() == Some(want.as_str()) {
            continue;
        }
        dirs.put(&w.dest, &out.show(&w.dest), !w.immutable, |f| {
            match &w.bytes {
                Source::File(p) => {
                    let (src, _) = forge_os::fs::named::open(p, "wheel", forge_os::input::cap::WHEEL)?;
                    std::io::copy(&mut std::io::Read::take(src, forge_os::input::cap::WHEEL), f)?;
                }
                Source::Bytes(b) => std::io::Write::write_all(f, b)?,
            }
            Ok(())
        })?;
        n += 1;
    }
    Ok(n)
}
