//! The one loop that plans and executes a [`BuildRequest`], for `build-wheel`
//! and `verify` alike: plans from `prepare`, each executed by `execute`, an
//! outcome per variant. Must not parse arguments or print.
use std::time::Instant;

use anyhow::Result;

use super::deliver::Outcome;
use super::execute;
use super::plan::Plan;
use super::prepare::{make_plans, Mode, Skipped};
use super::request::{out_folder, BuildRequest};
use forge_os::error::check_interrupted;
use forge_store::cache::{remote::Remote, Cache};

/// What one run of [`build`] did.
pub struct Built {
    pub results: Vec<Outcome>,
    pub skipped: Vec<Skipped>,
}

/// The one loop that plans and executes: every planned variant is built (or
/// taken from a cache) in turn; `each` sees each outcome as it is done.
/// Stops at Ctrl-C/SIGTERM between variants.
pub fn build(req: &BuildRequest, remote: Option<&Remote>, mut each: impl FnMut(&Outcome)) -> Result<Built> {
    let p = make_plans(req, Mode::Build)?;
    Cache::at(&p.cache_dir).clean_stale()?;
    let mut results = Vec::new();
    for pl in &p.plans {
        check_interrupted()?;
        let folder = out_folder(&req.out, &req.variants, &pl.variant.name);
        let target =
            execute::Target { cache_dir: &p.cache_dir, out: &req.out, folder: &folder, no_cache: req.no_cache, remote };
        let t0 = Instant::now();
        let mut notes: Vec<String> =
            pl.toolchain().and_then(|t| t.registry.as_ref()).map(|r| r.notes.clone()).unwrap_or_default();
        notes.extend(pl.warnings.iter().map(|w| format!("warning: {w}")));
        let d = execute::execute(pl, &target, &mut notes)?;
        let o = outcome(pl, d, t0, notes);
        each(&o);
        results.push(o);
    }
    Ok(Built { results, skipped: p.skipped })
}

fn outcome(pl: &Plan, d: execute::Delivered, t0: Instant, notes: Vec<String>) -> Outcome {
    Outcome {
        variant: pl.variant.name.clone(),
        status: d.status.into(),
        wheel: d.wheel,
        sha256: d.entry.sha256,
        size: d.entry.size,
        version: d.entry.version,
        cache_key: d.entry.key,
        seconds: t0.elapsed().as_secs_f64(),
        log: d.log,
        dropped_env: pl.dropped_env.clone(),
        patches: d.patches,
        notes,
    }
}
