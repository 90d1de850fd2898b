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
//! The index folder is one [`Tree`], locked (flock on the folder) from reading
//! the manifest to the last rename: no place of the index may be a link (a
//! planted link, a folder where a file goes, a file where a folder goes is
//! exit 2 before anything is written), and every file is staged first and
//! renamed into place only when all are ([`Delivery`]). Returns reports; the
//! command prints them. Must not build by itself (the builder does), nor
//! serve anything.
use forge_store::index::{
    check, evidence, facts, manifest, pages, variants, variants_files, Source, Write, REPORT_SCHEMA, VARIANT_INDEX,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use facts::Facts;
use forge_model::pins::Pins;
use forge_os::error::Failure;
use forge_os::fs::{Delivery, FolderLock, Kind, TempTree, Tree};
use forge_store::cache::sign::{PublicKey, SecretKey};
use manifest::{Manifest, PROJECT};

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
}

/// `deepep-forge publish --check DIR`: what the check found (the command prints it).
pub fn check(c: CheckRequest) -> Result<check::CheckReport> {
    let request = check::Request {
        pins: &c.pins,
        trusted_keys: &c.trusted_keys,
        variants: &c.variants,
        signing_key: c.signing_key.as_deref(),
    };
    check::run(&request, &c.dir)
}

/// `deepep-forge publish`: what was published (the command prints it).
pub fn run(mut args: PublishRequest) -> Result<Report> {
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
    let built = TempTree::new("deepep-forge-publish-").context("creating a temporary folder for the wheels")?;
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
        one_label(&pins, variant, &o.wheel)?;
        // Variants of one index (pins.toml `index`) share its folder: uv picks by platform.
        if labelled.is_some() {
            let vw = variant_wheel(&pins, &o.wheel, variant, &built)?;
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
    let out = Out { tree: Tree::create(&index, "index folder")?, shown: index.clone() };
    let _lock = out.lock()?;
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
    Ok(Report {
        schema: REPORT_SCHEMA,
        out: index.clone(),
        wheels: summary,
        files_written: written,
        files_unchanged: writes.len() - written,
    })
}

/// The wheel's version is the label pins.toml gives (`patch::variant_label`: the one
/// `docker bake` passes as `DEEPEP_VERSION`): an index never serves a version an image
/// built from the same pins.toml would not install. A source whose own version moved
/// (pins.toml's `base_version` stale) is refused, naming the value to write.
fn one_label(pins: &Pins, v: &forge_model::pins::Variant, wheel: &Path) -> Result<()> {
    let want = forge_store::patch::variant_label(pins, v)?;
    let file = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some(have) = forge_wheel::wheel::WheelName::parse(&file).map(|n| n.version) else { return Ok(()) };
    let same = |a: &str, b: &str| a.parse::<pep440_rs::Version>().ok() == b.parse::<pep440_rs::Version>().ok();
    if same(&have, &want) {
        return Ok(());
    }
    let base = have.split('+').next().unwrap_or(&have);
    Err(Failure::problems(format!(
        "{file}: version {have}, but pins.toml's base_version gives {want} (what `docker bake` passes as \
         DEEPEP_VERSION): the source at the pin says {base}; nothing published"
    ))
    .hint(format!(
        "set base_version = \"{base}\" in [source] of {} (the version the pinned revision's own setup.py \
         gives), then publish again",
        pins.path.display()
    ))
    .into())
}

/// `--out` must be a folder or absent (a file there is a usage error, before anything is built).
fn check_out(out: &Path) -> Result<()> {
    match forge_os::fs::named::kind_through(out) {
        Kind::Missing | Kind::Dir => Ok(()),
        _ => Err(Failure::usage(format!("--out {}: a file, not a folder", out.display()))
            .hint("pass the index folder (it is created when absent), e.g. --out public/")
            .into()),
    }
}

/// The index folder (`--out`) as publish writes it: its [`Tree`] and its
/// path as the user gave it (for messages).
struct Out {
    tree: Tree,
    shown: PathBuf,
}

/// A place under `--out` that is not what the index needs there: exit 2.
fn refuse(at: &Path, why: &str) -> anyhow::Error {
    Failure::usage(format!("{}: {why}: nothing published", at.display()))
        .hint("remove it, or publish into another --out folder")
        .into()
}

impl Out {
    /// The folder locked exclusively (flock on the folder itself, so no file
    /// appears in the index); waits for another publish into it, checking for Ctrl-C.
    fn lock(&self) -> Result<FolderLock> {
        let mut told = false;
        loop {
            if let Some(l) = self.tree.try_lock()? {
                return Ok(l);
            }
            if !std::mem::replace(&mut told, true) {
                forge_os::note!("waiting for another publish into {} to finish", self.shown.display());
            }
            forge_os::error::check_interrupted()?;
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// The path of `rel` as the user's `--out` names it, for messages.
    fn show(&self, rel: &Path) -> PathBuf {
        self.shown.join(rel)
    }

    /// Every folder from `--out` down to `rel` is a real folder or absent
    /// (never a link: a link planted for a variant or project folder would
    /// carry the writes to another place), and `rel` a regular file or
    /// absent. Exit 2 naming the place.
    fn check(&self, rel: &Path) -> Result<()> {
        let names: Vec<_> = rel.components().collect();
        let mut at = PathBuf::new();
        for (i, n) in names.iter().enumerate() {
            at.push(n);
            let last = i + 1 == names.len();
            let why = match self.tree.kind(&at)? {
                Kind::Missing => return Ok(()),
                Kind::Link => "a symbolic link (publish never writes through a link)",
                Kind::Dir if !last => continue,
                Kind::File { .. } if last => continue,
                _ if !last => "not a folder",
                Kind::Dir => "a folder where a file of the index goes",
                _ => "not a regular file",
            };
            return Err(refuse(&self.show(&at), why));
        }
        Ok(())
    }

    /// What is at `rel` now: `None` when nothing, else its sha256; a link,
    /// special file or folder under a published name counts as different.
    fn digest(&self, rel: &Path) -> Option<String> {
        match self.tree.kind(rel) {
            Ok(Kind::Missing) => None,
            Ok(Kind::File { .. }) => Some(match self.tree.open_file(rel, forge_os::input::cap::WHEEL) {
                Ok((f, _)) => match forge_os::input::sha256_reader(f, forge_os::input::cap::WHEEL) {
                    Ok((d, _)) => hex::encode(d),
                    Err(e) => format!("({e:#})"),
                },
                Err(e) => format!("({e:#})"),
            }),
            Ok(_) => Some("(not a regular file)".into()),
            Err(e) => Some(format!("({e:#})")),
        }
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
    /// Who can load it: its platform tag in words (`manylinux::words`).
    pub loads: String,
}

/// The wheel file name's platform tag in words.
pub fn loads(wheel: &str) -> String {
    forge_wheel::wheel::WheelName::parse(wheel)
        .map(|n| forge_wheel::manylinux::words::loads_where(&n.platform))
        .unwrap_or_default()
}

impl Report {
    /// The human lines: one per wheel, then the count of files.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for w in &self.wheels {
            s.push_str(&format!("published {}: {} sha256 {}\n", w.index, w.wheel, &w.sha256[..16]));
            s.push_str(&format!("          {}\n", w.loads));
        }
        s.push_str(&format!(
            "{} files written, {} unchanged, into {}\n",
            self.files_written,
            self.files_unchanged,
            forge_os::line::Line::new(self.out.to_string_lossy())
        ));
        s
    }
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
    let mut m = if out.tree.kind(vdir.join(manifest::FILE))? != Kind::Missing {
        let (f, _) = out.tree.open_file_nofollow(vdir.join(manifest::FILE), u64::MAX)?;
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
        // The one judgment of a wheel's name (the builder made it on a build or cache hit with
        // the floor); an index never serves a wheel under a tag its members refuse.
        if let Some(why) = forge_wheel::manylinux::judge::wheel(path, None)?.refusal() {
            return Err(Failure::problems(format!("{}: nothing published:\n  {why}", e.wheel))
                .hint("never rename a wheel by hand; rebuild it (deepep-forge build-wheel)")
                .into());
        }
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
            loads: loads(&e.wheel),
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
fn variant_wheel(pins: &Pins, built: &Path, v: &forge_model::pins::Variant, dir: &Tree) -> Result<(PathBuf, Facts)> {
    let label = variants::label(&v.name)?;
    let file = built.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let name = variants::wheel_name(file, &label)?;
    let path = dir.join(&name);
    if !dir.exists(&name) {
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

/// Put every file in place, skipping those already identical: each folder
/// made (inside the tree) and each file staged beside its place (mode 0644
/// whatever the umask: static hosts serve what they can read; synced), and
/// only when every one is staged and every place checked again are they
/// renamed into place, the manifest last ([`Delivery`]): a failure while
/// staging (a full disk, a wheel that cannot be read) publishes nothing.
/// Immutable files were compared under the lock ([`conflicts`]). Returns how
/// many were written.
fn apply(out: &Out, writes: &[Write]) -> Result<usize> {
    let mut delivery = Delivery::new();
    let mut n = 0;
    for w in writes {
        let want = digest_of(&w.bytes)?;
        if out.digest(&w.dest).as_deref() == Some(want.as_str()) {
            continue;
        }
        if let Some(folder) = w.dest.parent().filter(|f| !f.as_os_str().is_empty()) {
            out.tree.create_dir_all(folder)?;
        }
        out.check(&w.dest)?;
        delivery.add(&out.tree, &w.dest, 0o644, |f| {
            forge_os::fs::set_file_mode(f, 0o644)?;
            match &w.bytes {
                Source::File(p) => {
                    let (src, _) = forge_os::fs::named::open(p, "wheel", forge_os::input::cap::WHEEL)?;
                    std::io::copy(&mut std::io::Read::take(src, forge_os::input::cap::WHEEL), f)?;
                }
                Source::Bytes(b) => std::io::Write::write_all(f, b)?,
            }
            Ok(f.sync_all()?)
        })?;
        n += 1;
    }
    delivery.commit()?;
    Ok(n)
}
