//! The command-line edge of `deepep-forge evidence`: `add` (a reported
//! result, signed) and `show` (the validation boundary of pins.toml's wheels).
//! Owns the requests and finding each variant's wheel (the cache, or
//! `--wheel`); returns what was recorded or found (the command layer,
//! `src/commands/evidence.rs`, prints it). The shape is `statement`'s, the
//! layout `store`'s, the judgement and its renderers `show`'s.
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::show::{self, Need, Report, Section};
use super::statement::{self, Origin, Predicate, Producer, Reported};
use super::store::{self, Found};
use crate::cache::sign::{PublicKey, SecretKey};
use forge_model::ladder::Kind;
use forge_model::pins::{Pins, Variant};
use forge_os::error::Failure;

/// `evidence add`: a reported result about a wheel, signed.
#[derive(Debug, Clone)]
pub struct AddRequest {
    /// The wheel file (its name and sha256 are read from it) ...
    pub wheel: Option<PathBuf>,
    /// ... or its sha256 and file name, when the file is not at hand.
    pub sha256: Option<String>,
    pub wheel_name: Option<String>,
    pub kind: Kind,
    /// The topology the result was obtained on (flags, preset, recipe).
    pub topology: forge_model::topology::RequestFlags,
    pub outcome: String,
    pub url: Option<String>,
    pub text: Option<String>,
    /// The adder's ed25519 key file.
    pub signing_key: PathBuf,
    /// The evidence folder.
    pub out: PathBuf,
}

/// `evidence show`: the validation boundary of pins.toml's wheels.
#[derive(Debug, Clone)]
pub struct ShowRequest {
    pub pins: PathBuf,
    /// Only these variants; empty: all.
    pub variants: Vec<String>,
    pub recipes: Vec<PathBuf>,
    /// Wheel files to look at; empty: the wheel cache.
    pub wheels: Vec<PathBuf>,
    pub evidence: Vec<PathBuf>,
    /// `--trusted-key`s (with DEEPEP_FORGE_TRUSTED_KEYS and the cache config).
    pub trusted_keys: Vec<String>,
    /// `--cache-dir` as given (resolved when the cache is read).
    pub cache_dir: Option<PathBuf>,
    pub format: ShowFormat,
}

/// `evidence show --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ShowFormat {
    #[default]
    Human,
    /// A pull-request comment (every statement field escaped).
    Markdown,
    Json,
}

/// What `evidence add` kept.
#[derive(Debug, Clone)]
pub struct Added {
    pub kind: Kind,
    /// The name of the key that signed it.
    pub signer: String,
    pub path: PathBuf,
}

/// `evidence add`: everything checked, then one file written (or nothing).
pub fn add(a: AddRequest) -> Result<Added> {
    let (name, sha256) = match (&a.wheel, &a.sha256, &a.wheel_name) {
        (Some(w), _, _) => {
            let w = super::record::Wheel::of_file(w)?;
            (w.name, w.sha256)
        }
        (None, Some(h), Some(n)) => (n.clone(), h.clone()),
        _ => forge_os::bail_usage!("pass --wheel FILE, or --sha256 HEX with --wheel-name NAME"),
    };
    let request = a.topology.resolve()?;
    let judged = request.as_ref().map(|r| super::record::judged(r, a.topology.recipe.as_deref())).transpose()?;
    let predicate = Predicate {
        kind: a.kind,
        does_not_show: a.kind.does_not_show().into(),
        origin: Origin::Reported,
        producer: Producer {
            command: "evidence add".into(),
            mode: None,
            tool: statement::tool(),
            commit: statement::commit(),
        },
        time: forge_wheel::provenance::rfc3339(forge_wheel::provenance::now_secs()),
        request: judged,
        machine: None,
        result: None,
        reported: Some(Reported { outcome: a.outcome.clone(), url: a.url.clone(), text: a.text.clone() }),
    };
    let s = statement::new(&name, &sha256, predicate);
    statement::validate(&s).map_err(|f| f.hint("nothing was written; fix the value and run again"))?;
    let key = SecretKey::load(&a.signing_key)?;
    let dir = store::prepare(&a.out)?;
    let envelope = statement::sign(&s, &key)?;
    let path = store::write(&dir, &sha256, a.kind, &envelope)?;
    Ok(Added { kind: a.kind, signer: key.name.clone(), path })
}

/// Every trusted key: the flags, DEEPEP_FORGE_TRUSTED_KEYS and the cache config.
pub fn trusted(flags: &[String]) -> Result<Vec<PublicKey>> {
    crate::cache::config::trusted_keys(flags)
}

/// `evidence show`: the report (rendered by the command layer in `a.format`).
pub fn show(a: &ShowRequest) -> Result<Report> {
    let pins = Pins::load(&a.pins)?;
    let variants: Vec<&Variant> = if a.variants.is_empty() {
        pins.variants.iter().collect()
    } else {
        a.variants.iter().map(|v| pins.variant(v)).collect::<Result<_>>()?
    };
    let trusted = trusted(&a.trusted_keys)?;
    if trusted.is_empty() {
        return Err(Failure::usage("no trusted key: only statements signed by a key you trust count")
            .hint("pass --trusted-key NAME:BASE64 (`cache keygen` prints the public key)")
            .into());
    }
    let read = store::read_all(&a.evidence, &trusted)?;
    let given = a.wheels.iter().map(|w| given_wheel(w)).collect::<Result<Vec<_>>>()?;
    let mut sections = Vec::new();
    for v in variants {
        let pin = pins.pin(v.arch)?;
        let wheel = match given.iter().find(|g| g.is_for(v, &pin.rev)) {
            Some(g) => Some((g.name.clone(), g.sha256.clone(), g.from())),
            None if a.wheels.is_empty() => from_cache(a.cache_dir.as_deref(), &pins, v, &pin.rev)?,
            None => None,
        };
        let found: Vec<&Found> = match &wheel {
            Some((_, sha, _)) => read.found.iter().filter(|f| f.sha256() == sha).collect(),
            None => vec![],
        };
        let (mut boundary, mut configuration) = (Vec::new(), Vec::new());
        for need in needs(v, &a.recipes)? {
            boundary.extend(show::boundary(&found, &need));
            configuration.push(show::configuration(&found, &need));
        }
        sections.push(Section {
            variant: v.name.clone().into(),
            arch: v.arch.as_str().into(),
            rev: pin.rev.clone().into(),
            wheel: wheel.map(|(name, sha, from)| (name.into(), sha.into(), from.into())),
            statements: show::items(&found),
            boundary,
            configuration,
            summary: show::summary_line(&found),
        });
    }
    Ok(Report {
        schema: show::SCHEMA,
        sections,
        not_counted: read.untrusted.iter().map(|u| u.path.display().to_string().into()).collect(),
    })
}

/// A `--wheel` given to `show`: its provenance names the variant and revision
/// (a wheel without one is matched by its version label and platform).
struct Given {
    path: PathBuf,
    name: String,
    sha256: String,
    /// (variant, rev) from the wheel's provenance.
    provenance: Option<(String, String)>,
    /// `exact, unpatched` or `patched: ...`, from the provenance.
    build: Option<String>,
}

impl Given {
    fn is_for(&self, v: &Variant, rev: &str) -> bool {
        match &self.provenance {
            Some((variant, r)) => *variant == v.name && r == rev,
            None => forge_wheel::wheel::WheelName::parse(&self.name).is_some_and(|n| {
                forge_model::patches::local_of(&n.version)
                    .is_some_and(|l| l == forge_model::patches::normal_local(&rev[..7.min(rev.len())]))
                    && n.platform.ends_with(v.arch.as_str())
            }),
        }
    }

    fn from(&self) -> String {
        let how = match &self.build {
            Some(what) => format!("; {what}"),
            None => ", no provenance: matched by label and platform".into(),
        };
        format!("{}{how}", self.path.display())
    }
}

fn given_wheel(path: &Path) -> Result<Given> {
    let w = super::record::Wheel::of_file(path)?;
    let prov = forge_wheel::wheel::read::provenance(path).ok();
    let build = prov.as_ref().map(|p| forge_model::patches::describe(&p.source.patches));
    let provenance = prov.map(|p| (p.variant.name, p.source.rev));
    Ok(Given { path: path.to_path_buf(), name: w.name, sha256: w.sha256, provenance, build })
}

/// The newest verified cache entry of `v` built from the pinned commit `rev`
/// with the patches pins.toml lists for it, by the wheel's identity (the
/// provenance inside it names the variant, the commit and the patch set):
/// exact, patched (`+<short>.p<digest>`) and fork builds alike, whatever the
/// version label says. The third part says where it came from and what it is
/// (`the wheel cache; exact, unpatched` or `...; patched: ...`).
fn from_cache(dir: Option<&Path>, pins: &Pins, v: &Variant, rev: &str) -> Result<Option<(String, String, String)>> {
    let want = forge_model::patches::set_digest(&crate::patch::for_variant(pins, v)?);
    let cache = crate::cache::Cache::at(crate::cache::resolve_dir(dir)?);
    let (hits, _) = cache.entries();
    for h in hits.iter().filter(|h| h.entry.variant == v.name) {
        let Ok(prov) = forge_wheel::wheel::read::provenance(&h.dir.join(&h.entry.wheel)) else { continue };
        let same = prov.variant.name == v.name && prov.source.rev == rev;
        if !same || forge_model::patches::set_digest(&prov.source.patches) != want {
            continue;
        }
        let key = crate::cache::Key::parse(&h.entry.key)?;
        if let Some(hit) = cache.lookup(&key)? {
            let what = forge_model::patches::describe(&prov.source.patches);
            return Ok(Some((hit.entry.wheel.clone(), hit.entry.sha256.clone(), format!("the wheel cache; {what}"))));
        }
    }
    Ok(None)
}

/// What the variant's own topology (pins.toml) and each recipe need.
fn needs(v: &Variant, recipes: &[PathBuf]) -> Result<Vec<Need>> {
    let gpu = v.topology.as_ref().and_then(|t| t.gpu.first().copied());
    let mut out = Vec::new();
    if let Some(t) = &v.topology {
        out.push(Need {
            label: format!("{} (pins.toml)", v.name),
            gpu: gpu.map(|g| g.to_string()),
            sm: gpu.map(|g| g.sm()),
            ep: Some(t.ep),
            nodes: t.nodes,
        });
    } else {
        // No topology: a multinode variant still asks for more than one node.
        let sm = v.cuda_arch_list.sm_numbers().first().copied();
        let nodes = if v.multinode { 2 } else { 1 };
        out.push(Need { label: format!("{} (pins.toml)", v.name), gpu: None, sm, ep: None, nodes });
    }
    for r in recipes {
        let args = forge_model::topology::RequestFlags::of_recipe(r.clone(), gpu);
        let req = args.resolve()?.expect("a recipe is a request");
        out.push(Need {
            label: r.display().to_string(),
            gpu: req.gpu.map(|g| g.to_string()),
            sm: req.gpu.map(|g| g.sm()),
            ep: req.ep,
            nodes: req.nodes.unwrap_or(1),
        });
    }
    Ok(out)
}
