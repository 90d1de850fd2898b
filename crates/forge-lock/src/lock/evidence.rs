//! `lock check`'s evidence gate: `--require-evidence KIND --evidence DIR`
//! and pins.toml's `[evidence]` table, the stricter of both per wheel. Every
//! deep-ep wheel uv.lock pins (by sha256) needs a statement of the required
//! kind or a stronger one, signed by a trusted key, that covers its variant's
//! GPU generation, or the generation its `[[evidence.rule]]` names (a
//! MISMATCH covers nothing). One `evidence-missing` error per wheel, at its
//! uv.lock line, naming what is required, by whom, the best kind present and
//! the command that would produce the evidence. Owns this rule only; what a
//! statement covers is `evidence::show::cover`'s.
use forge_os::printer::shell_word as sh_word;
use std::path::Path;

use anyhow::Result;

use super::index::{IndexSource, LockedWheel};
use forge_model::findings::{Finding, Severity};
use forge_model::ladder::Kind;
use forge_model::pins::{EvidencePolicy, Gpu, Pins, Variant};
use forge_store::evidence::show::{cover, Need};
use forge_store::evidence::store;

/// Who asks for evidence: `--require-evidence`, pins.toml's `[evidence]`, or both.
pub struct Gate<'a> {
    /// `--require-evidence`.
    pub flag: Option<Kind>,
    /// pins.toml's `[evidence]`, when `lock check` applies it.
    pub table: Option<&'a EvidencePolicy>,
    pub pins: Option<&'a Pins>,
}

impl Gate<'_> {
    /// The pins file as messages name it.
    fn file(&self) -> String {
        self.pins.map(|p| p.path.display().to_string()).unwrap_or_else(|| forge_model::pins::DEFAULT_PATH.into())
    }

    /// Who asks, for a usage error: `--require-evidence kernel`, `pins.toml:31 [evidence]`.
    pub fn asked_by(&self) -> String {
        let flag = self.flag.map(|k| format!("--require-evidence {k}"));
        let table = self.table.map(|t| format!("{}:{} [evidence]", self.file(), t.line));
        [table, flag].into_iter().flatten().collect::<Vec<_>>().join(" and ")
    }

    /// What a wheel of `variant` needs: the flag's kind and the table's (`require`, raised
    /// by the variant's rule), the stricter winning; both named on a tie.
    fn required(&self, variant: Option<&Variant>) -> Required {
        let table = self.table.map(|t| match variant.and_then(|v| t.rule_for(&v.name)) {
            Some(r) => (r.kind, r.gpu, format!("{}:{} [[evidence.rule]]", self.file(), r.line)),
            None => (t.require, None, format!("{}:{} [evidence] require", self.file(), t.line)),
        });
        let flag = "--require-evidence".to_string();
        match (self.flag, table) {
            (Some(f), Some((k, gpu, by))) if f == k => Required { kind: k, gpu, by: format!("{by} and {flag}") },
            (Some(f), Some((k, gpu, by))) if k > f => Required { kind: k, gpu, by },
            (Some(f), Some((_, gpu, _))) => Required { kind: f, gpu, by: flag },
            (Some(f), None) => Required { kind: f, gpu: None, by: flag },
            (None, Some((kind, gpu, by))) => Required { kind, gpu, by },
            (None, None) => Required { kind: Kind::Configuration, gpu: None, by: "nothing".into() },
        }
    }
}

impl<'a> Gate<'a> {
    /// What a wheel whose variant cannot be told needs (a PEP 825 variant index
    /// serves every variant's wheels under one URL, and uv.lock does not say
    /// which it resolved): every `[[evidence.rule]]` that could apply to it (a
    /// rule of a variant on the wheel's architecture), each as its own
    /// requirement with that variant's own request (a multi-node variant's
    /// nodes too), so the gate applies the strictest and never fails open.
    /// Without such a rule: `required(None)`.
    fn required_unknown(&self, w: &LockedWheel) -> Vec<(Required, Option<&'a Variant>)> {
        let base = || vec![(self.required(None), None)];
        let (Some(t), Some(pins)) = (self.table, self.pins) else { return base() };
        let could = |name: &String| {
            pins.variants.iter().find(|v| &v.name == name && w.arch.as_deref().is_none_or(|a| a == v.arch.as_str()))
        };
        let mut out = Vec::new();
        for r in &t.rules {
            for v in r.variants.iter().filter_map(could) {
                out.push((self.unknown_of(r, v), Some(v)));
            }
        }
        if out.is_empty() {
            return base();
        }
        out
    }

    /// Rule `r` as it applies to a wheel that may be `v`'s, saying why.
    fn unknown_of(&self, r: &forge_model::pins::EvidenceRule, v: &Variant) -> Required {
        Required {
            kind: self.flag.map_or(r.kind, |f| f.max(r.kind)),
            gpu: r.gpu,
            by: format!(
                "{}:{} [[evidence.rule]] (for {}; uv.lock does not tell which variant of the variant index it locked, so every rule that could apply does)",
                self.file(),
                r.line,
                v.name
            ),
        }
    }
}

/// The gate and what it reads.
pub struct Policy<'a> {
    pub gate: &'a Gate<'a>,
    pub dirs: &'a [std::path::PathBuf],
    pub trusted: &'a [forge_store::cache::sign::PublicKey],
}

/// What one locked wheel needs: the stricter kind, the GPU a rule names, and who asks.
struct Required {
    kind: Kind,
    gpu: Option<Gpu>,
    by: String,
}

/// `evidence-missing` findings for `wheels` (uv.lock's deep-ep wheels).
pub fn check(
    policy: &Policy,
    wheels: &[LockedWheel],
    src: Option<&IndexSource>,
    lock_path: &Path,
) -> Result<Vec<Finding>> {
    let read = store::read_all(policy.dirs, policy.trusted)?;
    let mut out = Vec::new();
    if wheels.is_empty() {
        let req = policy.gate.required(None);
        out.push(
            Finding::new(
                "evidence-missing",
                Severity::Error,
                lock_path,
                format!(
                    "`{}` evidence is required ({}), but uv.lock pins no deep-ep wheel (a sha256 is what evidence is about)",
                    req.kind, req.by
                ),
            )
            .fix("install DeepEP from a deepep-forge index: deepep-forge pin set REV --index URL"),
        );
        return Ok(out);
    }
    for w in wheels {
        let variant = variant_of(policy.gate.pins, src, w);
        let reqs = match variant {
            Some(_) => vec![(policy.gate.required(variant), variant)],
            None => policy.gate.required_unknown(w),
        };
        for (req, could_be) in reqs {
            out.extend(judge(&read, &req, (variant, could_be), w, (lock_path, policy.dirs)));
        }
    }
    Ok(out)
}

/// The finding for wheel `w` under `req`, or none when a trusted statement covers it.
fn judge(
    read: &store::Read,
    req: &Required,
    (variant, could_be): (Option<&Variant>, Option<&Variant>),
    w: &LockedWheel,
    at: (&Path, &[std::path::PathBuf]),
) -> Option<Finding> {
    // `variant`: the wheel's, when known (the finding names it); `could_be`: whose
    // request the statements must cover (the variant's, or a rule's when unknown).
    let need = need_of(could_be, req.gpu);
    let missing =
        |req: &Required, need: &Need, w: &LockedWheel, why: String| missing(req, need, w, (variant, could_be), at, why);
    let Some(sha) = &w.sha256 else {
        return Some(missing(req, &need, w, "it has no sha256 in uv.lock".into()));
    };
    let about: Vec<&store::Found> = read.found.iter().filter(|f| f.sha256() == sha).collect();
    // Only a statement that covers the whole request counts: a run on fewer
    // nodes than the variant's (`cover` = Some(false)) proves less than it asks.
    let covering = about.iter().filter(|f| cover(f, &need) == Some(true)).map(|f| f.statement.predicate.kind).max();
    if covering.is_some_and(|k| k >= req.kind) {
        return None;
    }
    let on = need.gpu.as_deref().map(|g| format!(" on {g}")).unwrap_or_default();
    let best = match (covering, about.iter().map(|f| f.statement.predicate.kind).max()) {
        (Some(k), _) => format!("`{k}`"),
        (None, Some(k)) => format!("none{on} (`{k}` only for another GPU generation, request, or a MISMATCH)"),
        (None, None) => "none".into(),
    };
    let why = format!(
        "required by {}; no statement of kind `{}` or stronger{on}, signed by a trusted key, names sha256 {}; best present: {best}",
        req.by,
        req.kind,
        &sha[..16.min(sha.len())]
    );
    Some(missing(req, &need, w, why))
}

/// The pins.toml variant a locked wheel is for: the index's (by URL) on the wheel's architecture.
fn variant_of<'a>(pins: Option<&'a Pins>, src: Option<&IndexSource>, w: &LockedWheel) -> Option<&'a Variant> {
    let index = src.and_then(|s| s.variant.as_deref())?;
    pins?.variants.iter().find(|v| v.index_name() == index && Some(v.arch.as_str()) == w.arch.as_deref())
}

/// What a wheel's statements must be about: the GPU generation (the rule's
/// `gpu`, else its variant's: the topology's first GPU, else its first cubin
/// SM) and the variant's own request (pins.toml `topology`: its EP size and
/// nodes), so a static MATCH of a 2-node request counts for a 2-node variant
/// and a 1-node one does not. A variant without a topology asks for one node.
fn need_of(v: Option<&Variant>, rule: Option<Gpu>) -> Need {
    let topology = v.and_then(|v| v.topology.as_ref());
    let gpu = rule.or_else(|| topology.and_then(|t| t.gpu.first().copied()));
    let sm = gpu.map(|g| g.sm()).or_else(|| v.and_then(|v| v.cuda_arch_list.sm_numbers().first().copied()));
    Need {
        label: v.map(|v| v.name.clone()).unwrap_or_else(|| "(variant unknown)".into()),
        gpu: gpu.map(Gpu::generation).or_else(|| sm.map(|s| format!("sm_{s}"))),
        sm,
        ep: topology.map(|t| t.ep),
        nodes: topology.map(|t| t.nodes).unwrap_or(1),
    }
}

fn missing(
    req: &Required,
    need: &Need,
    w: &LockedWheel,
    (shown, v): (Option<&Variant>, Option<&Variant>),
    (lock_path, dirs): (&Path, &[std::path::PathBuf]),
    why: String,
) -> Finding {
    let variant = match (shown, v) {
        (Some(s), _) => s.name.as_str(),
        (None, Some(_)) => "(unknown: uv.lock does not tell which variant of the variant index)",
        (None, None) => "(unknown: not from a deepep-forge index URL)",
    };
    let msg = format!("the locked deep-ep wheel {} (variant {variant}) lacks `{}` evidence: {why}", w.file, req.kind);
    let fix = produce(req.kind, w, v, need.gpu.as_deref(), dirs.first());
    Finding::new("evidence-missing", Severity::Error, lock_path, msg).at(w.line, 1).fix(fix)
}

/// The command that would produce the missing evidence (on a machine of `gpu`'s
/// generation): for a static statement, the variant's whole request (pins.toml
/// `topology`), the one [`need_of`] asks for; recorded into the evidence folder
/// the gate reads (`--evidence`, the first one). `KEY` is the signer's key file.
/// A static statement judges the wheel and the request, not the machine it is
/// recorded on: `--no-host-check` (the RDMA rules are for the run's own nodes).
fn produce(
    kind: Kind,
    w: &LockedWheel,
    v: Option<&Variant>,
    gpu: Option<&str>,
    dir: Option<&std::path::PathBuf>,
) -> String {
    let machine = gpu.map(|g| format!("   # on {g} GPUs")).unwrap_or_else(|| "   # on the GPUs".into());
    let preset = v
        .and_then(|v| v.topology.as_ref())
        .map(|t| {
            format!(
                "--gpu {} --ep {} --nodes {} --gpus-per-node {} --ranks-per-domain {} {}",
                t.gpu.first().map(|g| g.to_string()).unwrap_or_default(),
                t.ep,
                t.nodes,
                t.gpus_per_node,
                t.ranks_per_domain,
                if t.mnnvl { "--mnnvl" } else { "--no-mnnvl" }
            ) + if t.nodes > 1 && !t.mnnvl { " --no-host-check" } else { "" }
        })
        .unwrap_or_else(|| "--preset h100-8g".into());
    let dir = dir.map(|d| sh_word(&d.display().to_string())).unwrap_or_else(|| "evidence/".into());
    // The signing key's file where the environment names it, else the one value only the user knows.
    let key = forge_store::cache::cmd::signing_key_file_word().unwrap_or_else(|| "'<KEY_FILE>'".into());
    let rec = format!("--record {dir} --signing-key {key}");
    let sha = w.sha256.as_deref().map(sh_word).unwrap_or_else(|| "SHA256".into());
    let file = sh_word(&w.file);
    let w = LockedWheel { file, ..w.clone() };
    match kind {
        Kind::Configuration | Kind::Static => format!("deepep-forge probe --wheel {} {preset} {rec}", w.file),
        Kind::Kernel => format!("deepep-forge probe --run --wheel {} {rec}{machine}", w.file),
        Kind::DeepEpRoundTrip => {
            format!("deepep-forge probe --run --deep-ep --python .venv/bin/python --wheel {} {rec}{machine}", w.file)
        }
        Kind::DeepEpTests | Kind::Training => format!(
            "deepep-forge evidence add --sha256 {sha} --wheel-name {} --kind {kind} --outcome '<OUTCOME>' --url '<URL>' --signing-key {key} --out {dir}",
            w.file
        ),
    }
}
