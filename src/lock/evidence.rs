//! `lock check --require-evidence KIND --evidence DIR`: every deep-ep wheel
//! uv.lock pins (by sha256) needs a statement of that kind or a stronger one,
//! signed by a trusted key, that covers its variant's GPU generation (a
//! MISMATCH covers nothing). One `evidence-missing` error per wheel, at its
//! uv.lock line, with the command that would produce the evidence. Owns this
//! rule only; what a statement covers is `evidence::show::cover`'s.
use std::path::Path;

use anyhow::Result;

use super::index::{IndexSource, LockedWheel};
use crate::evidence::show::{cover, Need};
use crate::evidence::statement::Kind;
use crate::evidence::store;
use crate::findings::{Finding, Severity};
use crate::pins::{Pins, Variant};

/// What the flags ask for.
pub struct Policy<'a> {
    pub kind: Kind,
    pub dirs: &'a [std::path::PathBuf],
    pub trusted: &'a [crate::cache::sign::PublicKey],
}

/// `evidence-missing` findings for `wheels` (uv.lock's deep-ep wheels).
pub fn check(
    policy: &Policy,
    wheels: &[LockedWheel],
    pins: Option<&Pins>,
    src: Option<&IndexSource>,
    lock_path: &Path,
) -> Result<Vec<Finding>> {
    let read = store::read_all(policy.dirs, policy.trusted)?;
    let mut out = Vec::new();
    if wheels.is_empty() {
        out.push(
            Finding::new(
                "evidence-missing",
                Severity::Error,
                lock_path,
                format!(
                    "`{}` evidence is required, but uv.lock pins no deep-ep wheel (a sha256 is what evidence is about)",
                    policy.kind
                ),
            )
            .fix("install DeepEP from a deepep-forge index: deepep-forge pin set REV --index URL"),
        );
        return Ok(out);
    }
    for w in wheels {
        let variant = variant_of(pins, src, w);
        let need = need_of(variant);
        let Some(sha) = &w.sha256 else {
            out.push(missing(policy, w, variant, lock_path, "it has no sha256 in uv.lock".into()));
            continue;
        };
        let ok = read
            .found
            .iter()
            .any(|f| f.sha256() == sha && f.statement.predicate.kind >= policy.kind && cover(f, &need).is_some());
        if !ok {
            let gpu = need.gpu.as_deref().map(|g| format!(" on {g}")).unwrap_or_default();
            out.push(missing(
                policy,
                w,
                variant,
                lock_path,
                format!(
                    "no statement of kind `{}` or stronger{gpu}, signed by a trusted key, names sha256 {}",
                    policy.kind,
                    &sha[..16.min(sha.len())]
                ),
            ));
        }
    }
    Ok(out)
}

/// The pins.toml variant a locked wheel is for: the index's (by URL) on the wheel's architecture.
fn variant_of<'a>(pins: Option<&'a Pins>, src: Option<&IndexSource>, w: &LockedWheel) -> Option<&'a Variant> {
    let index = src.and_then(|s| s.variant.as_deref())?;
    pins?.variants.iter().find(|v| v.index_name() == index && Some(v.arch.as_str()) == w.arch.as_deref())
}

/// The GPU generation a variant is for (its topology's first GPU, else its first cubin SM).
fn need_of(v: Option<&Variant>) -> Need {
    let gpu = v.and_then(|v| v.topology.as_ref()).and_then(|t| t.gpu.first().copied());
    let sm = gpu.map(|g| g.sm()).or_else(|| v.and_then(|v| v.cuda_arch_list.sm_numbers().first().copied()));
    Need {
        label: v.map(|v| v.name.clone()).unwrap_or_else(|| "(variant unknown)".into()),
        gpu: gpu.map(|g| g.to_string()).or_else(|| sm.map(|s| format!("sm_{s}"))),
        sm,
        ep: None,
        nodes: 1,
    }
}

fn missing(policy: &Policy, w: &LockedWheel, v: Option<&Variant>, lock_path: &Path, why: String) -> Finding {
    let variant = v.map(|v| v.name.as_str()).unwrap_or("(unknown: not from a deepep-forge index URL)");
    let msg =
        format!("the locked deep-ep wheel {} (variant {variant}) lacks `{}` evidence: {why}", w.file, policy.kind);
    Finding::new("evidence-missing", Severity::Error, lock_path, msg).at(w.line, 1).fix(produce(policy.kind, w, v))
}

/// The command that would produce the missing evidence.
fn produce(kind: Kind, w: &LockedWheel, v: Option<&Variant>) -> String {
    let preset = v
        .and_then(|v| v.topology.as_ref())
        .map(|t| {
            format!(
                "--gpu {} --ep {} --nodes {} --gpus-per-node {}",
                t.gpu.first().map(|g| g.to_string()).unwrap_or_default(),
                t.ep,
                t.nodes,
                t.gpus_per_node
            )
        })
        .unwrap_or_else(|| "--preset h100-8g".into());
    let rec = "--record evidence/ --signing-key KEY";
    let sha = w.sha256.as_deref().unwrap_or("SHA256");
    match kind {
        Kind::Configuration | Kind::Static => format!("deepep-forge probe --wheel {} {preset} {rec}", w.file),
        Kind::Kernel => format!("deepep-forge probe --run --wheel {} {rec}   # on the GPUs", w.file),
        Kind::DeepEpRoundTrip => {
            format!("deepep-forge probe --run --deep-ep --python .venv/bin/python --wheel {} {rec}   # on the GPUs", w.file)
        }
        Kind::DeepEpTests | Kind::Training => format!(
            "deepep-forge evidence add --sha256 {sha} --wheel-name {} --kind {kind} --outcome \"...\" --url URL --signing-key KEY --out evidence/",
            w.file
        ),
    }
}
