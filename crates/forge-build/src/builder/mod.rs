//! `plan` and `build-wheel`: the plans and the built wheels, returned to the
//! command layer (`src/commands/build.rs`), which prints them (`render` makes
//! the text) and picks the exit code. The work is split by job: `prepare`
//! (arguments -> plans, DeepEP's interface read at the pin, the toolchain or
//! what is missing), `plan` (the plan type, its path-free form and cache key),
//! `execute` (one plan: cache, preflight, checkout, the plan's command, checks,
//! relocation, provenance), `deliver` (`--out`, SHA256SUMS, report, all at
//! once), `run` (the loop). Must not print, parse consumer lockfiles or touch a GPU.
pub mod canon;
pub mod closure;
pub mod compiler_cache;
pub mod cross;
pub mod deliver;
pub mod environment;
pub mod execute;
pub mod lookup;
pub mod nccl_reuse;
pub mod plan;
pub mod preflight;
pub mod prepare;
pub mod registry;
pub mod relocate;
pub mod render;
pub mod request;
pub mod retag;
pub mod run;
pub mod side_by_side;
pub mod toolchain;
pub mod unit_order;

use anyhow::Result;

use forge_os::error::Cooperative;
use forge_store::cache::{self, Cache};
use prepare::{make_plans, Mode};
pub use request::{BuildOptions, BuildRequest, BuildWheelRequest, CompilerCache, RunOptions, Variants};

/// `deepep-forge plan`: the plans (full build recipes), the skipped variants,
/// and whether each plan's wheel is cached. Runs without a toolchain: what is
/// missing is part of the plan.
pub fn plan(args: &BuildOptions) -> Result<render::Plans> {
    // Planning may fetch: Ctrl-C then stops git's process group, not just us.
    let _coop = Cooperative::enter();
    let planned = make_plans(&args.request()?, Mode::Plan)?;
    let store = Cache::at(&planned.cache_dir);
    let cached = planned
        .plans
        .iter()
        .map(|pl| {
            !args.no_cache
                && pl.cache_key.as_deref().and_then(|k| cache::Key::parse(k).ok()).is_some_and(|k| store.has(&k))
        })
        .collect();
    Ok(render::Plans { planned, cached })
}

/// `deepep-forge build-wheel`: every plan executed (exit 3 without a
/// toolchain), then every wheel delivered into `--out` at once, with the
/// report; `each` sees each outcome once delivered.
pub fn build(args: &BuildWheelRequest, each: impl FnMut(&deliver::Outcome)) -> Result<run::Built> {
    let _coop = Cooperative::enter();
    let c = &args.common;
    // Flags and trusted keys first: a bad --cache-url fails before any fetch or build.
    let remote = c.remote.connect(c.no_cache)?;
    let req = c.request()?;
    let to =
        deliver::Destination { out: req.out.clone(), several: req.variants.several(), report: args.report.clone() };
    run::build_to(&req, &to, remote.as_ref(), each)
}
