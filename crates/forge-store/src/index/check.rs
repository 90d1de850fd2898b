//! `publish --check DIR`: a published index verified against pins.toml and
//! the keys the reader trusts. Every selected variant (default: all) must
//! have a manifest signed by a trusted key, listing a wheel at pins.toml's
//! revision for the variant's architecture; every listed file must be there
//! with the signed digests (wheel, `.metadata` = the wheel's METADATA,
//! `.intoto.json` = the statement of the wheel's own provenance); the pages
//! must be what the manifest renders to; anything else is foreign (reported,
//! never deleted). Variants published into one index (pins.toml `index`)
//! are checked in it, each for its architecture. The folder is read through
//! its [`Tree`]: a file of the index that is a link (or a FIFO, a folder) is
//! reported, never followed or waited on. Returns a report the command
//! prints. Must not write.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::manifest::{self, Manifest, WheelEntry, PROJECT};
use super::{facts, pages};
use crate::cache::sign::PublicKey;
use forge_model::pins::{Pins, Variant};
use forge_os::error::Failure;
use forge_os::fs::{Kind, Tree, Walk};
use forge_os::line::Line;
use forge_os::printer::shell_word;

/// Most entries walked under one index folder before giving up.
const MAX_FILES: usize = 100_000;

/// What `publish --check DIR` is asked, as its command edge (`publish::run`) hands it over.
pub struct Request<'a> {
    pub pins: &'a Path,
    /// `--trusted-key` values, as given.
    pub trusted_keys: &'a [String],
    /// `--variant` values (empty: every variant).
    pub variants: &'a [String],
    /// `--signing-key`, when given: the key the printed `publish` commands name.
    pub signing_key: Option<&'a Path>,
}

/// The index folder being checked: its tree and its path as the user gave it.
struct Index<'a> {
    tree: Tree,
    dir: &'a Path,
}

impl Index<'_> {
    /// `rel` as the user's DIR names it (messages, and readers that take a path).
    fn show(&self, rel: &Path) -> PathBuf {
        self.dir.join(rel)
    }

    /// `None` when `rel` is a regular file of the index (never through a
    /// final link), else what it is, as a problem naming it.
    fn not_regular(&self, rel: &Path) -> Option<String> {
        match self.tree.kind(rel) {
            Ok(Kind::File { .. }) => None,
            Ok(Kind::Missing) => Some(format!("{}: not found", self.show(rel).display())),
            Ok(k) => Some(format!("{}: {}, not a regular file (never followed)", self.show(rel).display(), k.noun())),
            Err(e) => Some(format!("{e:#}")),
        }
    }

    /// The bytes of the regular file `rel` (at most `cap`); an error is the problem's text.
    fn read(&self, rel: &Path, cap: u64) -> Result<Vec<u8>> {
        if let Some(p) = self.not_regular(rel) {
            anyhow::bail!(p);
        }
        self.tree.read(rel, cap)
    }
}

/// `publish --check DIR`.
pub fn run(c: &Request, dir: &Path) -> Result<CheckReport> {
    let pins = Pins::load(c.pins)?;
    let pins_sha256 =
        forge_os::input::sha256_hex(&forge_os::fs::named::read_bytes(c.pins, "pins file", forge_os::input::cap::TEXT)?);
    let trusted = crate::cache::config::trusted_keys(c.trusted_keys)?;
    if trusted.is_empty() {
        return Err(Failure::usage("publish --check trusts no key: a manifest signed by anyone would do")
            .hint("name the publisher's key: --trusted-key NAME:BASE64 (or DEEPEP_FORGE_TRUSTED_KEYS)")
            .into());
    }
    if forge_os::fs::named::kind_through(dir) != Kind::Dir {
        return Err(Failure::usage(format!("{}: not a folder", dir.display())).into());
    }
    let ix = Index { tree: Tree::open(dir, "index folder")?, dir };
    let selected: Vec<&Variant> = if c.variants.is_empty() {
        pins.variants.iter().collect()
    } else {
        c.variants.iter().map(|n| pins.variant(n)).collect::<Result<_>>()?
    };
    let mut problems = Vec::new();
    // One index per name: the variants published into it (pins.toml `index`) are checked together.
    let mut indexes: Vec<&str> = Vec::new();
    for v in &selected {
        if !indexes.contains(&v.index_name()) {
            indexes.push(v.index_name());
        }
    }
    // `publish --variant-wheels`: one index holds every variant.
    let variant_index = ix.tree.kind(super::VARIANT_INDEX)? == Kind::Dir;
    if variant_index {
        indexes = vec![super::VARIANT_INDEX];
    }
    for name in indexes {
        if variant_index {
            forge_os::note!("checking the variant index in {}", dir.display());
            check_variant(&ix, name, &selected, &pins, &pins_sha256, &trusted, &mut problems);
            continue;
        }
        let members: Vec<&Variant> = selected.iter().copied().filter(|v| v.index_name() == name).collect();
        // Unasked, an unpublished index of another architecture is not this host's to publish.
        if let Some(arch) = foreign_arch(&members).filter(|_| c.variants.is_empty()) {
            if ix.tree.kind(name)? == Kind::Missing {
                forge_os::note!(
                    "skipped index {name}: not published, and its variants are for {arch}, not this host's {} (publish it on an {arch} host or cross-build it, docs/cross-build.md; --variant {} checks it)",
                    forge_model::pins::Arch::host().map_or("architecture".to_string(), |a| a.to_string()),
                    members.first().map_or(name, |v| v.name.as_str())
                );
                continue;
            }
        }
        forge_os::note!("checking index {name} in {}", dir.display());
        check_variant(&ix, name, &members, &pins, &pins_sha256, &trusted, &mut problems);
    }
    let mut known: BTreeSet<&str> = pins.variants.iter().map(|v| v.name.as_str()).collect();
    if variant_index {
        known.insert(super::VARIANT_INDEX);
    }
    let top = ix.tree.list(".", MAX_FILES)?;
    for e in &top.entries {
        if !e.utf8().is_some_and(|n| known.contains(n)) {
            problems.push(format!(
                "{}: foreign (no variant of pins.toml has this name; not deleted)",
                ix.show(Path::new(&e.name)).display()
            ));
        }
    }
    if top.omitted() > 0 {
        problems.push(format!("{}: more than {MAX_FILES} entries; stopped looking", dir.display()));
    }
    let problems: Vec<String> = problems.into_iter().map(|p| complete(&p, c, dir)).collect();
    Ok(CheckReport {
        schema: super::REPORT_SCHEMA,
        dir: dir.to_path_buf(),
        variants: selected.iter().map(|v| v.name.clone()).collect(),
        ok: problems.is_empty(),
        problems,
    })
}

/// The one architecture of `members` when it is not this host's.
fn foreign_arch(members: &[&Variant]) -> Option<forge_model::pins::Arch> {
    let arch = members.first()?.arch;
    let host = forge_model::pins::Arch::host()?;
    (arch != host && members.iter().all(|v| v.arch == arch)).then_some(arch)
}

/// What `publish --check --format json` prints.
#[derive(Debug, serde::Serialize)]
pub struct CheckReport {
    pub schema: u32,
    pub dir: PathBuf,
    /// The variants checked.
    pub variants: Vec<String>,
    pub ok: bool,
    /// One line per problem, each naming its file.
    pub problems: Vec<String>,
}

impl CheckReport {
    /// The human report: one line per problem (escaped: a file name cannot
    /// add a line), then the count; or the one line that says all is well.
    pub fn render(&self) -> String {
        let dir = Line::new(self.dir.to_string_lossy());
        if self.ok {
            return format!(
                "{dir}: ok ({} variant(s), signed, every file as its manifest says)\n",
                self.variants.len()
            );
        }
        let mut s: String = self.problems.iter().map(|p| format!("{}\n", Line::new(p))).collect();
        s.push_str(&format!("{dir}: {} problem(s)\n", self.problems.len()));
        s
    }
}

/// A problem's `deepep-forge publish ...` command made whole with what this check was
/// given: the same pins file and folder (`--out`), the signing key file when `--signing-key`
/// was given, else the one `DEEPEP_FORGE_SIGNING_KEY_FILE` names, else the placeholder
/// `<SIGNING_KEY_FILE>` the user fills (the check never reads a secret key).
fn complete(problem: &str, c: &Request, dir: &Path) -> String {
    let key = c
        .signing_key
        .map(|k| shell_word(&k.to_string_lossy()))
        .or_else(crate::cache::cmd::signing_key_file_word)
        .unwrap_or_else(|| "<SIGNING_KEY_FILE>".into());
    problem.replace(
        "`deepep-forge publish ",
        &format!(
            "`deepep-forge publish --pins {} --out {} --signing-key {key} ",
            shell_word(&c.pins.to_string_lossy()),
            shell_word(&dir.to_string_lossy())
        ),
    )
}

/// One index (`name`) and the selected variants published into it.
fn check_variant(
    ix: &Index,
    name: &str,
    members: &[&Variant],
    pins: &Pins,
    pins_sha256: &str,
    trusted: &[PublicKey],
    out: &mut Vec<String>,
) {
    let vdir = PathBuf::from(name);
    let mrel = vdir.join(manifest::FILE);
    let mpath = ix.show(&mrel);
    match ix.tree.kind(&vdir) {
        Ok(Kind::Dir) => {}
        Ok(Kind::Missing) => {
            let names: Vec<String> = members.iter().map(|v| format!("--variant {}", v.name)).collect();
            out.push(format!(
                "{}: missing (index {name} is not published; run `deepep-forge publish {}`)",
                ix.show(&vdir).display(),
                names.join(" ")
            ));
            return;
        }
        Ok(k) => {
            out.push(format!("{}: {}, not a folder (never followed)", ix.show(&vdir).display(), k.noun()));
            return;
        }
        Err(e) => return out.push(format!("{e:#}")),
    }
    if let Some(p) = ix.not_regular(&mrel) {
        return out.push(p);
    }
    let m = match ix.tree.open_file(&mrel, u64::MAX).and_then(|(f, _)| manifest::verified_file(f, &mpath, trusted)) {
        Ok((m, _)) => m,
        Err(e) => return out.push(format!("{e:#}")),
    };
    if m.variant != name {
        out.push(format!("{}: the manifest is for variant `{}`", mpath.display(), m.variant));
    }
    if m.pins_sha256 != pins_sha256 {
        out.push(format!(
            "{}: published from another pins.toml (sha256 {}, {} has {pins_sha256}); republish",
            mpath.display(),
            m.pins_sha256,
            pins.path.display()
        ));
    }
    let files = vdir.join("simple").join(PROJECT);
    if name == super::VARIANT_INDEX {
        check_variant_wheels(ix, &files, &mpath, &m, members, pins, out);
    } else {
        for v in members {
            check_pinned(&mpath, &m, v, pins, out);
        }
    }
    for w in &m.wheels {
        check_wheel(ix, &files, w, pins.manylinux.as_deref(), out);
    }
    for e in &m.evidence {
        let rel = files.join(&e.file);
        match ix.read(&rel, crate::evidence::statement::MAX_BYTES) {
            Ok(b) if forge_os::input::sha256_hex(&b) == e.sha256 => {}
            Ok(_) => out.push(format!(
                "{}: not the statement the signed manifest lists (changed or replaced)",
                ix.show(&rel).display()
            )),
            Err(e) => out.push(format!("{e:#}")),
        }
    }
    for (rel, bytes) in pages::render(&m) {
        let rel = vdir.join(&rel);
        match ix.read(&rel, manifest::MAX_BYTES) {
            Ok(have) if have == bytes => {}
            Ok(_) => out.push(format!("{}: differs from what the signed manifest renders to", ix.show(&rel).display())),
            Err(e) => out.push(format!("{e:#}")),
        }
    }
    foreign(ix, &vdir, &expected(&vdir, &m), out);
}

/// The index lists a wheel of variant `v` at pins.toml's revision for its
/// architecture, and, when pins.toml's `[toolchain] python` is a list, one for each Python.
fn check_pinned(mpath: &Path, m: &Manifest, v: &Variant, pins: &Pins, out: &mut Vec<String>) {
    let pinned: Vec<&WheelEntry> =
        m.wheels.iter().filter(|w| facts::matches_pins(&w.provenance, pins, v).is_ok()).collect();
    if !pinned.is_empty() {
        let listed =
            pins.toolchain.as_ref().filter(|t| t.python_matrix).map(|t| t.pythons.as_slice()).unwrap_or_default();
        for py in listed {
            let tag = forge_wheel::wheel::WheelName::parse;
            let has =
                pinned.iter().any(|w| tag(&w.wheel).and_then(|n| n.cpython_minor()).as_deref() == Some(py.as_str()));
            if !has {
                out.push(format!(
                    "{}: no Python {py} wheel of variant {} ({}) at pins.toml's revision: pins.toml's [toolchain] python lists {py}; run `deepep-forge publish --variant {} --toolchain registry`",
                    mpath.display(),
                    v.name,
                    v.arch.as_str(),
                    v.name
                ));
            }
        }
        return;
    }
    let rev = pins.pins.get(&v.arch).map(|p| p.rev.as_str()).unwrap_or("(no pin)");
    out.push(format!(
        "{}: no {} wheel of variant {} at pins.toml's revision {rev}; run `deepep-forge publish --variant {}`",
        mpath.display(),
        v.arch.as_str(),
        v.name,
        v.name
    ));
}

/// The variant index: each selected variant has its labelled wheel at pins.toml's
/// revision; every labelled wheel's `variant.json` says its label and what
/// pins.toml describes for it; each variants.json is what the manifest's
/// wheels and pins.toml render to, with the signed sha256.
fn check_variant_wheels(
    ix: &Index,
    files: &Path,
    mpath: &Path,
    m: &Manifest,
    members: &[&Variant],
    pins: &Pins,
    out: &mut Vec<String>,
) {
    for v in members {
        let label = match super::variants::label(&v.name) {
            Ok(l) => l,
            Err(e) => {
                out.push(format!("{}: {e}", pins.path.display()));
                continue;
            }
        };
        let labelled = |w: &&WheelEntry| {
            forge_wheel::wheel::WheelName::parse(&w.wheel).and_then(|n| n.variant).as_deref() == Some(label.as_str())
        };
        if !m.wheels.iter().filter(labelled).any(|w| facts::matches_pins(&w.provenance, pins, v).is_ok()) {
            out.push(format!(
                "{}: no variant wheel `{label}` of variant {} at pins.toml's revision; run `deepep-forge publish --variant {} --variant-wheels`",
                mpath.display(),
                v.name,
                v.name
            ));
        }
    }
    for w in
        m.wheels.iter().filter(|w| forge_wheel::wheel::WheelName::parse(&w.wheel).is_some_and(|n| n.variant.is_some()))
    {
        let rel = files.join(&w.wheel);
        if let Some(p) = ix.not_regular(&rel) {
            out.push(p);
        } else if let Err(e) = super::variants::check_wheel(&ix.show(&rel), pins) {
            out.push(e.to_string());
        }
    }
    let want = match super::variants_files(m, pins) {
        Ok(w) => w,
        Err(e) => return out.push(format!("{}: {e}", mpath.display())),
    };
    let listed: BTreeSet<(&str, &str)> = m.variants_json.iter().map(|f| (f.file.as_str(), f.sha256.as_str())).collect();
    for (name, bytes) in want {
        let rel = files.join(&name);
        let p = ix.show(&rel);
        let sha = forge_os::input::sha256_hex(&bytes);
        if !listed.contains(&(name.as_str(), sha.as_str())) {
            out.push(format!(
                "{}: the signed manifest does not list it as pins.toml and the wheels give it",
                p.display()
            ));
        }
        match ix.read(&rel, super::variants::MAX_VARIANTS_JSON) {
            Ok(have) if have == bytes => {}
            Ok(_) => out.push(format!("{}: differs from what the wheels and pins.toml give", p.display())),
            Err(e) => out.push(format!("{e:#}")),
        }
    }
}

/// One listed wheel: its three files with the signed digests.
fn check_wheel(ix: &Index, files: &Path, w: &WheelEntry, floor: Option<&str>, out: &mut Vec<String>) {
    let rel = files.join(&w.wheel);
    if let Some(p) = ix.not_regular(&rel) {
        return out.push(p);
    }
    let path = ix.show(&rel);
    match facts::read(&path) {
        Err(e) => out.push(format!("{e:#}")),
        Ok(f) if f.entry.sha256 != w.sha256 || f.entry.size != w.size => out.push(format!(
            "{}: sha256 {}, the signed manifest says {} (the wheel was changed or replaced)",
            path.display(),
            f.entry.sha256,
            w.sha256
        )),
        Ok(f) => {
            if f.entry != *w {
                out.push(format!("{}: its METADATA or provenance differs from the signed manifest", path.display()));
            }
            check_tag(&path, floor, out);
            let side = [
                (format!("{}.metadata", w.wheel), f.metadata),
                (format!("{}{}", w.wheel, forge_wheel::attest::SUFFIX), f.intoto),
            ];
            for (name, want) in side {
                let rel = files.join(&name);
                match ix.read(&rel, manifest::MAX_BYTES) {
                    Ok(have) if have == want => {}
                    Ok(_) => out.push(format!(
                        "{}: does not match {} (it must be derived from the wheel)",
                        ix.show(&rel).display(),
                        w.wheel
                    )),
                    Err(e) => out.push(format!("{e:#}")),
                }
            }
        }
    }
}

/// The wheel's platform tag set against its members: the one judgment (`manylinux::judge`)
/// every path that delivers or accepts a wheel makes, with pins.toml's floor; a failure is
/// a problem of the index.
fn check_tag(path: &Path, floor: Option<&str>, out: &mut Vec<String>) {
    match forge_wheel::manylinux::judge::wheel(path, floor) {
        Err(e) => out.push(format!("{e:#}")),
        Ok(j) => {
            for why in j.texts(forge_wheel::manylinux::judge::Level::Fail) {
                out.push(format!("{}: {why}: installers would put it where it cannot load", path.display()));
            }
        }
    }
}

fn expected(vdir: &Path, m: &Manifest) -> BTreeSet<PathBuf> {
    let files = vdir.join("simple").join(PROJECT);
    let mut set: BTreeSet<PathBuf> = pages::render(m).into_iter().map(|(rel, _)| vdir.join(rel)).collect();
    set.insert(vdir.join(manifest::FILE));
    for w in &m.wheels {
        for suffix in ["", ".metadata", forge_wheel::attest::SUFFIX] {
            set.insert(files.join(format!("{}{suffix}", w.wheel)));
        }
    }
    set.extend(m.evidence.iter().map(|e| files.join(&e.file)));
    set.extend(m.variants_json.iter().map(|f| files.join(&f.file)));
    set
}

/// Files (and links, FIFOs, ...) under `vdir` that the manifest does not explain.
fn foreign(ix: &Index, vdir: &Path, expected: &BTreeSet<PathBuf>, out: &mut Vec<String>) {
    let walked = match ix.tree.walk(vdir, Walk { max_entries: MAX_FILES, ..Walk::default() }) {
        Ok(w) => w,
        Err(e) => return out.push(format!("{e:#}; stopped looking")),
    };
    for e in walked {
        if e.kind == Kind::Dir || expected.contains(&e.rel) && matches!(e.kind, Kind::File { .. }) {
            continue;
        }
        out.push(format!("{}: foreign (not in the signed manifest; not deleted)", ix.show(&e.rel).display()));
    }
}
