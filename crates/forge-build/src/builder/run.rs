//! The one loop that plans, executes and delivers a [`BuildRequest`], for
//! `build-wheel`, `publish` and `verify` alike: plans from `prepare`, each
//! executed by `execute` (from the cache or built), then every wheel delivered
//! at once by `deliver` (nothing reaches `--out` before every variant is ready
//! and every destination checked), an outcome per variant. Must not parse
//! arguments or print.
use std::time::Instant;

use anyhow::Result;

use super::deliver::{self, Destination, Outcome, Ready, Report};
use super::execute;
use super::plan::{Plan, SCHEMA};
use super::prepare::{make_plans, Mode, Skipped};
use super::request::BuildRequest;
use forge_os::error::check_interrupted;
use forge_store::cache::{remote::Remote, Cache};

/// What one run of [`build`] did.
pub struct Built {
    pub results: Vec<Outcome>,
    pub skipped: Vec<Skipped>,
}

impl Built {
    /// The build report (JSON), as `--report` writes it and `--format json` prints it.
    pub fn report_json(&self) -> Result<String> {
        report_json(&self.results, &self.skipped)
    }
}

fn report_json(results: &[Outcome], skipped: &[Skipped]) -> Result<String> {
    Ok(serde_json::to_string_pretty(&Report { schema: SCHEMA, results, skipped })?)
}

/// [`build_to`] the request's `--out`, without a report (`publish`, `verify`).
pub fn build(req: &BuildRequest, remote: Option<&Remote>, each: impl FnMut(&Outcome)) -> Result<Built> {
    let to = Destination { out: req.out.clone(), several: req.variants.several(), report: None };
    build_to(req, &to, remote, each)
}

/// The one loop that plans, executes and delivers: `to` is checked before
/// anything is planned (and its variant folders once they are), every planned
/// variant is built (or taken from a cache) in turn, then all are delivered
/// together with the report; `each` sees each outcome once it is delivered.
/// Stops at Ctrl-C/SIGTERM between variants.
pub fn build_to(
    req: &BuildRequest,
    to: &Destination,
    remote: Option<&Remote>,
    mut each: impl FnMut(&Outcome),
) -> Result<Built> {
    to.check()?;
    let p = make_plans(req, Mode::Build)?;
    to.check_variants(p.plans.iter().map(|pl| pl.variant.name.as_str()))?;
    Cache::at(&p.cache_dir).clean_stale()?;
    let target = execute::Target { cache_dir: &p.cache_dir, no_cache: req.no_cache, remote };
    let mut done = Vec::new();
    for pl in &p.plans {
        check_interrupted()?;
        let t0 = Instant::now();
        let mut notes: Vec<String> =
            pl.toolchain().and_then(|t| t.registry.as_ref()).map(|r| r.notes.clone()).unwrap_or_default();
        notes.extend(pl.warnings.iter().map(|w| format!("warning: {w}")));
        // A later variant of a revision: its unit order from what the earlier ones just measured.
        let settled = super::unit_order::settle(pl, &p.cache_dir, remote);
        if let Some(s) = settled.as_ref().and_then(|s| s.side_by_side.as_ref()) {
            notes.push(super::unit_order::settled_note(s));
        }
        let x = execute::execute(settled.as_ref().unwrap_or(pl), &target, &mut notes)?;
        let o = outcome(pl, &x, to, t0, notes);
        done.push((x, o));
    }
    check_interrupted()?;
    let results: Vec<Outcome> = done.iter().map(|(_, o)| o.clone()).collect();
    let report = to.report.as_ref().map(|_| report_json(&results, &p.skipped)).transpose()?;
    let ready: Vec<Ready> = done.iter().map(|(x, _)| Ready { entry: &x.entry, dir: &x.dir }).collect();
    deliver::deliver(to, &p.cache_dir, &ready, report.as_deref().map(str::as_bytes))?;
    results.iter().for_each(&mut each);
    Ok(Built { results, skipped: p.skipped })
}

fn outcome(pl: &Plan, x: &execute::Executed, to: &Destination, t0: Instant, notes: Vec<String>) -> Outcome {
    Outcome {
        variant: pl.variant.name.clone(),
        status: x.status.into(),
        wheel: to.wheel_path(&pl.variant.name, &x.entry.wheel),
        sha256: x.entry.sha256.clone(),
        size: x.entry.size,
        version: x.entry.version.clone(),
        cache_key: x.entry.key.clone(),
        seconds: t0.elapsed().as_secs_f64(),
        log: x.log.clone(),
        dropped_env: pl.dropped_env.clone(),
        patches: x.patches.clone(),
        notes,
    }
}
