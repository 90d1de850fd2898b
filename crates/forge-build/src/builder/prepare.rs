//! From a [`BuildRequest`] to plans: the selected variants, the
//! source at the pin (fetched into the mirror, read with `git show`), DeepEP's
//! build interface at that revision (checked before any build work), the
//! toolchain (identified; for `plan` possibly missing, never provisioned),
//! and one [`Plan`] per variant. Must not run a build.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::plan::{self, EnvOrigin, Outputs, Plan, PlanSource, Root, Roots, Run, ToolchainPart};
use super::request::{BuildRequest, CompilerCache, Variants};
use super::toolchain::Toolchain;
use super::{cross, preflight, registry, toolchain};
use forge_model::interface::{self, Branch, Files, Interface, SetBy};
use forge_model::pins::{Arch, Pins, Transport, Variant};
use forge_os::error::{Exit, Failure};
use forge_os::fs::{TempTree, Tree};
use forge_store::source::{self, Origin};
use forge_wheel::provenance::VariantInfo;

/// `plan` reports a missing toolchain; `build-wheel` needs it (and provisions
/// a registry toolchain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Plan,
    Build,
}

/// A variant not planned here, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub variant: String,
    pub arch: String,
    pub reason: String,
}

pub struct Planned {
    pub cache_dir: PathBuf,
    pub plans: Vec<Plan>,
    /// The Python each plan was made with, beside `plans` (`--python` as given,
    /// else pins.toml's `[toolchain] python` for the registry toolchain): a matrix cell's Python.
    pub pythons: Vec<Option<String>>,
    pub skipped: Vec<Skipped>,
}

/// The source of one pinned revision: where it is and what its build reads.
struct Pinned {
    rev: String,
    commit_time: i64,
    interface: Interface,
    needs_torch: bool,
    /// pins.toml's repo is a fork: where the pin stands on its upstream.
    fork: Option<forge_wheel::provenance::Fork>,
}

/// The plans of the request: variant x Python. Without `--python`, the registry
/// toolchain builds every Python pins.toml's `[toolchain] python` lists, each
/// with its own provisioned environment (its key names the Python); with
/// `--python`, or the system toolchain, the one Python.
pub fn make_plans(c: &BuildRequest, mode: Mode) -> Result<Planned> {
    let listed = c.pins.toolchain.as_ref().map(|t| t.pythons.as_slice()).unwrap_or_default();
    let registry = c.toolchain == super::registry::Kind::Registry;
    if c.python.is_some() || !registry || listed.len() < 2 {
        let mut p = plans_for_python(c, mode)?;
        let python = c.python.clone().or_else(|| listed.first().filter(|_| registry).cloned());
        p.pythons = vec![python; p.plans.len()];
        return Ok(p);
    }
    let mut all: Option<Planned> = None;
    for py in listed {
        let one = BuildRequest { python: Some(py.clone()), ..c.clone() };
        let mut p = plans_for_python(&one, mode)?;
        p.pythons = vec![Some(py.clone()); p.plans.len()];
        match &mut all {
            None => all = Some(p),
            Some(a) => {
                a.plans.extend(p.plans);
                a.pythons.extend(p.pythons);
            }
        }
    }
    Ok(all.expect("pins.toml lists at least two Pythons here"))
}

/// The plans of the request for its one Python (`c.python`).
fn plans_for_python(c: &BuildRequest, mode: Mode) -> Result<Planned> {
    let pins = &c.pins;
    let (here, skipped) = split_by_host(c, select_variants(c)?)?;
    let cache_dir = forge_store::cache::resolve_dir(c.cache_dir.as_deref())?;
    let cache = Tree::create(&cache_dir, "cache folder")?;
    let cache_dir = cache.path().to_path_buf();
    let mut plans = Vec::new();
    if here.is_empty() {
        return Ok(Planned { cache_dir, plans, pythons: Vec::new(), skipped });
    }
    // Only --source may name a local folder; pins.toml's repo is a remote URL, never looked up on disk.
    let origin = match &c.source {
        Some(s) => source::resolve(s, &cache_dir)?,
        None => source::Origin { repo: pins_repo(pins), snapshot_of: None },
    };
    let mirror = source::mirror_path(&cache_dir, &origin.repo);
    let (sources, knob_envs) = sources_and_knobs(c, &here, &origin, &mirror, &cache)?;
    let caller = forge_os::environ::vars(caller_reads)?;
    let tc = identify(c, pins, &cache_dir, mode, nccl_need(&sources), &sources.keys().copied().collect::<Vec<_>>())?;
    let jobs = c.jobs.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let out_dir = std::path::absolute(&c.out)?;
    let host = Arch::host();
    let mut cross_tc = None;
    let revs_ordered = std::cell::RefCell::new(std::collections::BTreeSet::new());
    for (v, (knob_env, set)) in here.into_iter().zip(knob_envs) {
        let p = &sources[&v.arch];
        let python = c.python.as_deref().unwrap_or("python3");
        let ctx = Ctx {
            pins,
            python,
            origin: &origin,
            mirror: &mirror,
            cache_dir: &cache_dir,
            out_dir: &out_dir,
            revs_ordered: &revs_ordered,
        };
        let tc = if Some(v.arch) == host {
            &tc
        } else {
            if cross_tc.is_none() {
                cross_tc = Some(cross_toolchain(&tc, &cache_dir, mode)?);
            }
            cross_tc.as_ref().expect("set above")
        };
        let mut plan = plan_variant(&ctx, v, p, (knob_env, set), tc, jobs, c.no_cache, &caller)?;
        finish_plan(c, mode, &mut plan, &ctx, (&p.rev, &v.name))?;
        plan.outputs.out_dir = super::request::out_folder(&out_dir, &c.variants, &v.name);
        plans.push(plan);
    }
    Ok(Planned { cache_dir, plans, pythons: Vec::new(), skipped })
}

/// The variants named (`--variant`, repeatable, each once) or all (`--all`).
fn select_variants(c: &BuildRequest) -> Result<Vec<&Variant>> {
    let pins = &c.pins;
    Ok(match &c.variants {
        Variants::All => pins.variants.iter().collect(),
        Variants::Named(n) if n.is_empty() => {
            forge_os::bail_usage!(
                "name a variant with --variant NAME (repeatable) or pass --all; known: {}",
                names(pins)
            );
        }
        Variants::Named(n) => {
            let mut v: Vec<&Variant> = n.iter().map(|n| pins.variant(n)).collect::<Result<_>>()?;
            v.dedup_by(|a, b| a.name == b.name);
            v
        }
    })
}

/// The variants built here (the host's architecture, and aarch64 by
/// cross-compiling with the registry toolchain) and the others, skipped
/// under `--all` and refused when named.
fn split_by_host<'p>(c: &BuildRequest, selected: Vec<&'p Variant>) -> Result<(Vec<&'p Variant>, Vec<Skipped>)> {
    let host = Arch::host();
    let cross_ok = |v: &Variant| cross::is_cross(c.toolchain, host, v.arch) && cross_unsupported(v).is_none();
    let (here, other): (Vec<&Variant>, Vec<&Variant>) =
        selected.into_iter().partition(|v| Some(v.arch) == host || cross_ok(v));
    // Why an aarch64 variant is not built here: the DOCA path cannot be cross-built; otherwise
    // the hint names the cross path (x86_64 host) or the container path.
    let unsupported = |v: &Variant| cross_unsupported(v).filter(|_| cross::is_cross(c.toolchain, host, v.arch));
    let hint = |v: &Variant| {
        unsupported(v).unwrap_or_else(|| {
            let cross = if host == Some(Arch::X86_64) && v.arch == Arch::Aarch64 {
                ", or cross-compile it here with --toolchain registry"
            } else {
                ""
            };
            format!("build it on an {} host or through the container path (deepep-forge docker){cross}", v.arch)
        })
    };
    let why = |v: &Variant| {
        unsupported(v).unwrap_or_else(|| {
            format!("{} variant: build it on an {} host or through the container path", v.arch, v.arch)
        })
    };
    if c.variants != Variants::All && !other.is_empty() {
        let v = other[0];
        return Err(Failure::usage(format!(
            "variant `{}` builds for {}, this host is {}",
            v.name,
            v.arch,
            std::env::consts::ARCH
        ))
        .hint(hint(v))
        .into());
    }
    let skipped =
        other.iter().map(|v| Skipped { variant: v.name.clone(), arch: v.arch.to_string(), reason: why(v) }).collect();
    Ok((here, skipped))
}

/// A variant's knob environment and source patches.
type KnobsAndPatches = (BTreeMap<String, String>, Vec<forge_wheel::provenance::SourcePatch>);

/// Source and interface first: a variant the revision cannot build is
/// refused before any toolchain work or submodule fetch. The pinned source
/// per architecture, and each variant's knobs and patches (checked to apply).
fn sources_and_knobs(
    c: &BuildRequest,
    here: &[&Variant],
    origin: &Origin,
    mirror: &Path,
    cache: &Tree,
) -> Result<(BTreeMap<Arch, Pinned>, Vec<KnobsAndPatches>)> {
    let pins = &c.pins;
    let mut sources: BTreeMap<Arch, Pinned> = BTreeMap::new();
    let mut knob_envs = Vec::new();
    for v in here {
        let p = match sources.entry(v.arch) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(pinned(pins, v.arch, origin, mirror, c.recorded_fork.as_ref())?)
            }
        };
        let set = forge_store::patch::for_variant(pins, v)?;
        if !set.is_empty() {
            let scratch = TempTree::new_in(cache, "patch-check-")?;
            forge_store::patch::check_applies(mirror, &p.rev, &set, scratch.path())?;
        }
        knob_envs.push((knobs(pins, v, p)?, set));
    }
    Ok((sources, knob_envs))
}

/// This user's build root, its links and the compiler hooks (repro's
/// `canon`), NCCL reuse, side-by-side extensions, and the outputs.
fn finish_plan(c: &BuildRequest, mode: Mode, plan: &mut Plan, ctx: &Ctx, (rev, variant): (&str, &str)) -> Result<()> {
    let (flag, off) = match &c.compiler_cache {
        CompilerCache::Default => (None, false),
        CompilerCache::At(d) => (Some(d.clone()), false),
        CompilerCache::Off => (None, true),
    };
    let compiler_cache = super::canon::compiler_cache(flag, off, ctx.cache_dir)?;
    super::canon::apply(plan, compiler_cache, mode == Mode::Build)?;
    if plan.source.submodules.contains_key(super::nccl_reuse::SUBMODULE) {
        let setup = source::show(ctx.mirror, rev, "setup.py");
        super::nccl_reuse::attach(plan, setup.as_deref(), ctx.cache_dir, c.nccl_reuse);
    }
    super::side_by_side::attach(plan, c.serial_extensions);
    let remote = c.remote.as_ref().and_then(|r| r.connect(c.no_cache).ok().flatten());
    let earlier = ctx.revs_ordered.borrow().contains(rev);
    super::unit_order::attach(plan, ctx.cache_dir, remote.as_ref(), earlier);
    if super::unit_order::orderable(plan) {
        ctx.revs_ordered.borrow_mut().insert(rev.to_string());
    }
    set_outputs(plan, ctx.cache_dir, variant, c.no_cache);
    Ok(())
}

/// Why an aarch64 variant cannot be cross-compiled, if it cannot (the DOCA
/// multinode path builds NCCL's DOCA objects with make and links rdma-core: not for aarch64 yet).
fn cross_unsupported(v: &Variant) -> Option<String> {
    (v.multinode && v.transport == Transport::Doca).then(|| format!(
        "{} variant with the DOCA multinode path: cross-compiling NCCL's DOCA objects and rdma-core for aarch64 is not supported; build it on an aarch64 host or through the container path",
        v.arch
    ))
}

/// The toolchain of a cross plan: the registry toolchain `host` with the
/// aarch64 sysroot (provisioned by `build-wheel`; `plan` only looks it up
/// and reports it missing otherwise).
fn cross_toolchain(host: &ToolchainPart, cache_dir: &Path, mode: Mode) -> Result<ToolchainPart> {
    let Some(t) = host.known() else { return Ok(unprovisioned_cross(host)) };
    let r = t.registry.as_ref().context("cross builds use the registry toolchain")?;
    let preview = |m: &mut ToolchainPart| {
        if let ToolchainPart::Missing(ms) = m {
            ms.cross = Some(Box::new(cross::preview(&t.python_version, cross::root_for(r, t, cache_dir))));
        }
    };
    let found = match mode {
        Mode::Build => Some(cross::provision(r, t, cache_dir)?),
        Mode::Plan => match cross::lookup(r, t, cache_dir) {
            Ok(found) => found,
            Err(e) if forge_os::error::exit_of(&e) == Exit::Environment => {
                let mut m = missing("registry (cross)", &e, cross_needs(), None);
                preview(&mut m);
                return Ok(m);
            }
            Err(e) => return Err(e),
        },
    };
    match found {
        Some(s) => Ok(ToolchainPart::Known(Box::new(s.toolchain(t)))),
        None => {
            let e = anyhow::Error::from(Failure::env(format!(
                "the aarch64 sysroot for the registry toolchain {} is not provisioned yet",
                r.root.display()
            )));
            let mut m = missing("registry (cross)", &e, cross_needs(), None);
            if let ToolchainPart::Missing(ms) = &mut m {
                ms.hint =
                    Some("`deepep-forge build-wheel --toolchain registry` provisions it (plan never downloads)".into());
            }
            preview(&mut m);
            Ok(m)
        }
    }
}

/// A cross plan whose host toolchain is not provisioned yet is still a cross
/// plan: the host side that is missing, and the target side `build-wheel` would make.
fn unprovisioned_cross(host: &ToolchainPart) -> ToolchainPart {
    let ToolchainPart::Missing(m) = host else { return host.clone() };
    let mut m = m.clone();
    m.kind = format!("{} (cross)", m.kind);
    m.needs.extend(cross_needs());
    let python = m.would_provision.as_ref().map(|w| w.python.clone()).unwrap_or_default();
    m.cross = Some(Box::new(cross::preview(&python, None)));
    ToolchainPart::Missing(m)
}

fn cross_needs() -> Vec<String> {
    vec![
        format!("the cross compiler {}-g++ (Debian/Ubuntu: g++-aarch64-linux-gnu)", cross::TRIPLE),
        format!(
            "the registry reachable for {} wheels (torch and the nvidia-* packages at the host's versions)",
            cross::PYTHON_PLATFORM
        ),
        "apt-get/dpkg-deb and the host's apt sources reachable for Debian's arm64 Python (the same minor as --python)"
            .into(),
        "qemu-aarch64 (qemu-user-static) for the import check after the build".into(),
    ]
}

/// Fetch the pin of `arch` into the mirror and read its build interface (and,
/// for a fork, where the pin stands on its upstream: `recorded` when a
/// provenance says it, else fetched and computed).
fn pinned(
    pins: &Pins,
    arch: Arch,
    origin: &Origin,
    mirror: &Path,
    recorded: Option<&forge_wheel::provenance::Fork>,
) -> Result<Pinned> {
    let pin = pins.pin(arch)?;
    if let Some((dir, sha)) = &origin.snapshot_of {
        if *sha != pin.rev {
            return Err(Failure::usage(format!(
                "{} pins {} to {}, but the folder {} snapshots to commit {sha}",
                pins.path.display(),
                arch,
                pin.rev,
                dir.display()
            ))
            .hint(format!("set rev = \"{sha}\" under [pin.{arch}] in {} to build these files", pins.path.display()))
            .into());
        }
    }
    let commit_time = source::ensure_rev(mirror, &origin.repo, &pin.rev)?;
    let files = source::AtRev { mirror, rev: &pin.rev };
    let interface = interface::read(&files, &format!("{} at {}", origin.repo, pin.short()))?;
    let needs_torch = files.read("setup.py").is_some_and(|s| source::imports_torch(&s));
    let fork = match (&pins.source.upstream, recorded) {
        (None, _) => None,
        (Some(u), Some(r)) if r.upstream == u.repo && r.upstream_branch == u.branch => Some(r.clone()),
        (Some(u), _) => Some(source::fork_of(mirror, &pin.rev, u)?),
    };
    Ok(Pinned { rev: pin.rev.clone(), commit_time, interface, needs_torch, fork })
}

/// The knobs of DeepEP's build for `v`: derived from the variant's keys,
/// then its `env` table, each checked against what the build at the pinned
/// revision reads. Refuses (exit 2) a variant that needs HybridEP at a
/// revision without it, and an `env` name the build does not read.
fn knobs(pins: &Pins, v: &Variant, p: &Pinned) -> Result<BTreeMap<String, String>> {
    let i = &p.interface;
    let short = &p.rev[..7];
    if v.multinode && !i.branch.has_hybrid_ep() {
        return Err(Failure::usage(format!(
            "{}:{}: variant `{}` is multinode ({} transport), which needs HybridEP (hybrid_ep_cpp), but DeepEP at {short} is the `{}` interface and builds only {}",
            pins.path.display(),
            v.line,
            v.name,
            v.transport.as_str(),
            i.branch.as_str(),
            i.extensions.join(", ")
        ))
        .hint("pin a revision of DeepEP's `hybrid-ep` branch (e.g. 17cfb817), which builds hybrid_ep_cpp, or make the variant single-node")
        .into());
    }
    let mut env = BTreeMap::new();
    env.insert("TORCH_CUDA_ARCH_LIST".to_string(), v.cuda_arch_list.to_env());
    if i.branch == Branch::HybridEp {
        let flag = |b: bool| if b { "1" } else { "0" }.to_string();
        env.insert("HYBRID_EP_MULTINODE".into(), flag(v.multinode));
        env.insert("USE_NIXL".into(), flag(v.multinode && v.transport == Transport::Nixl));
        if let Some(r) = v.rdma_core_home.as_ref().filter(|_| v.multinode) {
            env.insert("RDMA_CORE_HOME".into(), r.clone());
        }
    }
    if let Some(n) = &v.nvshmem_dir {
        env.insert("NVSHMEM_DIR".into(), n.clone());
    }
    for e in &v.env {
        let at = format!("{}:{}", pins.path.display(), e.line);
        let read: Vec<&str> = i.read_names().into_iter().collect();
        let Some(k) = i.knob(&e.name).filter(|k| !k.read_at.is_empty()) else {
            return Err(Failure::usage(format!(
                "{at}: variant `{}` sets env {}, which DeepEP's build at {short} (`{}` interface) does not read",
                v.name,
                e.name,
                i.branch.as_str()
            ))
            .hint(format!("the build at this revision reads: {}", read.join(", ")))
            .into());
        };
        if k.set_by == SetBy::Variant {
            return Err(Failure::usage(format!(
                "{at}: variant `{}` sets env {}, which the variant key `{}` decides",
                v.name,
                e.name,
                k.key.as_deref().unwrap_or("?")
            ))
            .hint(format!("remove {} from env and set `{}` in the variant", e.name, k.key.as_deref().unwrap_or("?")))
            .into());
        }
        env.insert(e.name.clone(), e.value.clone());
    }
    if let Some(r) = i.refusal(&env) {
        return Err(Failure::usage(format!(
            "{}:{}: variant `{}` cannot be built at DeepEP {short}: {}",
            pins.path.display(),
            v.line,
            v.name,
            r.message
        ))
        .hint(r.hint)
        .into());
    }
    Ok(env)
}

struct Ctx<'a> {
    pins: &'a Pins,
    /// `--python` as given (default `python3`), for a plan without a toolchain.
    python: &'a str,
    origin: &'a Origin,
    mirror: &'a Path,
    cache_dir: &'a Path,
    out_dir: &'a Path,
    /// The revisions an earlier plan of this run orders (`unit_order`): a later plan's order is settled when it builds.
    revs_ordered: &'a std::cell::RefCell<std::collections::BTreeSet<String>>,
}

/// Names whose caller value is reported when the plan drops or replaces it:
/// the knobs of every interface, and what reaches a compiler.
const REPORTED: [&str; 16] = [
    "CUDA_HOME",
    "CUDA_PATH",
    "CPATH",
    "LIBRARY_PATH",
    "MAX_JOBS",
    "SOURCE_DATE_EPOCH",
    "NVCC_APPEND_FLAGS",
    "NVCC_PREPEND_FLAGS",
    "PYTORCH_NVCC",
    "NVCC_CCBIN",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "PYTHONPATH",
    "NIXL_HOME",
];

/// Whether a plan reads the caller's variable `name` (kept, reported or a knob):
/// one that is not UTF-8 is refused, naming it; any other is ignored.
fn caller_reads(name: &str) -> bool {
    super::plan::PASSTHROUGH.contains(&name)
        || REPORTED.contains(&name)
        || REPORTED_BY_NAME.iter().any(|p| name.starts_with(p))
        || forge_os::environ::VARIABLES.iter().any(|v| v.name == name)
        || [
            forge_model::interface::Branch::HybridEp,
            forge_model::interface::Branch::Main,
            forge_model::interface::Branch::MainLegacy,
        ]
        .iter()
        .any(|b| forge_model::interface::table(*b).iter().any(|k| k.name == name))
        || forge_model::interface::PLAN_OWNED.contains(&name)
}

/// Prefixes whose caller variables are reported by name only (values may be credentials).
/// The value reported for a dropped tool setting (a pip certificate or index URL may hold a secret).
pub const NOT_SHOWN: &str = "(not shown)";
const REPORTED_BY_NAME: [&str; 3] = ["PIP_", "UV_", "SETUPTOOLS_"];

// Over 120 lines: one variant's plan is assembled in the order its parts depend on
// each other (interface fit, toolchain, environment from empty, hooks, seal), and
// each step reads what the one before it decided; the steps' logic lives in helpers.
#[allow(clippy::too_many_arguments)]
fn plan_variant(
    ctx: &Ctx,
    v: &Variant,
    p: &Pinned,
    (knob_env, patches): (BTreeMap<String, String>, Vec<forge_wheel::provenance::SourcePatch>),
    tc: &ToolchainPart,
    jobs: usize,
    no_cache: bool,
    caller: &BTreeMap<String, String>,
) -> Result<Plan> {
    let pin = ctx.pins.pin(v.arch)?;
    let i = &p.interface;
    let subs: Vec<&str> = i
        .submodules
        .iter()
        .filter(|s| s.when == "always" || (s.when == "doca-multinode" && v.multinode && v.transport == Transport::Doca))
        .map(|s| s.path.as_str())
        .collect();
    let submodules = source::submodule_commits(ctx.mirror, &ctx.origin.repo, &p.rev, &subs)?;

    // The build folder: `<cache>/tmp/build-<pid>-<variant>` (a dead process's is
    // removed by the next run; the build creates it and fails if it exists).
    let build = ctx.cache_dir.join("tmp").join(format!("build-{}-{}", std::process::id(), v.name));
    let mut roots = build_roots(ctx, &build);
    let mut run = build_run(&build_python(ctx, tc), &build, caller, &knob_env, jobs, p.commit_time);
    let mut fixes = Vec::new();
    if let Some(t) = tc.known() {
        toolchain_env(t, &mut run, &mut roots, &mut fixes, caller);
        nccl_link_fix(t, i, &mut run, &mut fixes);
    }
    let dropped_env = dropped_env(caller, &run);
    let warnings = plan_warnings(ctx, i, &run, tc, pin.short());
    let mut plan = Plan {
        schema: plan::SCHEMA,
        variant: variant_info(v),
        source: PlanSource {
            repo: ctx.origin.repo.clone(),
            pinned_repo: pins_repo(ctx.pins),
            snapshot_of: ctx.origin.snapshot_of.as_ref().map(|(d, _)| d.clone()),
            rev: pin.rev.clone(),
            branch: ctx.pins.source.branch.clone(),
            version: forge_model::patches::label(&i.base_version, pin.short(), &patches),
            short: pin.short().to_string(),
            source_date_epoch: p.commit_time,
            submodules,
            mirror: ctx.mirror.to_path_buf(),
            patches,
            fork: p.fork.clone(),
        },
        interface: i.clone(),
        roots,
        run,
        dropped_env,
        fixes,
        warnings,
        toolchain: tc.clone(),
        environment: None,
        environment_from: BTreeMap::new(),
        requires_dist: None,
        needs_torch: p.needs_torch,
        portable: plan::Portable { argv: vec![], cwd: String::new(), env: BTreeMap::new() },
        hooks: None,
        nccl_reuse: None,
        side_by_side: None,
        platform: plan::PlanPlatform::new(ctx.pins.manylinux.clone()),
        cache_key: None,
        cache_key_unknown: None,
        outputs: Outputs { out_dir: ctx.out_dir.to_path_buf(), cache_entry: None, log: PathBuf::new() },
    };
    if let Some(t) = tc.known() {
        attach_environment(&mut plan, t, (ctx, v, pin.short()))?;
    }
    plan.requires_dist = requires_dist(&plan, v);
    plan.seal();
    set_outputs(&mut plan, ctx.cache_dir, &v.name, no_cache);
    Ok(plan)
}

/// The Requires-Dist the plan states: the installed environment's, else what
/// the registry toolchain would provision gives ([`closure::would`]).
fn requires_dist(plan: &Plan, v: &Variant) -> Option<plan::RequiresDist> {
    if let Some(r) = plan.environment.as_ref().and_then(|e| e.requires.clone()) {
        return Some(plan::RequiresDist { source: "installed".into(), requires: r });
    }
    let ToolchainPart::Missing(m) = &plan.toolchain else { return None };
    let w = m.would_provision.as_ref()?;
    let i = &plan.interface;
    Some(plan::RequiresDist {
        source: "would_provision".into(),
        requires: super::closure::would(w, &i.runtime, i.branch, v.runtime_requires),
    })
}

/// The plan's roots: the build folder, the cache, the output folder and, for
/// a local source, the source.
fn build_roots(ctx: &Ctx, build: &Path) -> Roots {
    let mut roots = Roots::default();
    roots.0.insert(Root::Build, build.to_path_buf());
    roots.0.insert(Root::Cache, ctx.cache_dir.to_path_buf());
    roots.0.insert(Root::Out, ctx.out_dir.to_path_buf());
    match &ctx.origin.snapshot_of {
        Some((dir, _)) => {
            roots.0.insert(Root::Source, dir.clone());
        }
        None if ctx.origin.repo.starts_with('/') => {
            roots.0.insert(Root::Source, PathBuf::from(&ctx.origin.repo));
        }
        None => {}
    }
    roots
}

/// The Python that runs the build: the toolchain's; without one, the one the
/// registry would provision, or `--python`.
fn build_python(ctx: &Ctx, tc: &ToolchainPart) -> String {
    match tc {
        ToolchainPart::Known(t) => t.python.to_string_lossy().into_owned(),
        ToolchainPart::Missing(m) => match m.would_provision.as_ref().filter(|w| !w.root.as_os_str().is_empty()) {
            Some(w) => w.root.join("env/bin/python").to_string_lossy().into_owned(),
            None => ctx.python.to_string(),
        },
    }
}

/// The pip command and its environment before the toolchain's: the caller's
/// passthrough variables, the knobs, MAX_JOBS, SOURCE_DATE_EPOCH, no pip config.
fn build_run(
    python: &str,
    build: &Path,
    caller: &BTreeMap<String, String>,
    knob_env: &BTreeMap<String, String>,
    jobs: usize,
    commit_time: i64,
) -> Run {
    let mut run = Run {
        argv: plan::pip_argv(python, &build.join("dist")),
        cwd: build.join("src"),
        env: BTreeMap::new(),
        env_origin: BTreeMap::new(),
    };
    for k in plan::PASSTHROUGH {
        if let Some(val) = caller.get(k).filter(|v| !v.is_empty()) {
            run.set(k, val.clone(), EnvOrigin::Caller);
        }
    }
    for (k, val) in knob_env {
        run.set(k, val.clone(), EnvOrigin::Knob);
    }
    run.set("MAX_JOBS", jobs.to_string(), EnvOrigin::Jobs);
    run.set("SOURCE_DATE_EPOCH", commit_time.to_string(), EnvOrigin::Epoch);
    // Temp files in the build root, removed with it (whatever a killed compiler leaves).
    run.set("TMPDIR", build.join(plan::SCRATCH).to_string_lossy(), EnvOrigin::Scratch);
    // pip reads no user or site configuration (an index URL there could change the build).
    run.set("PIP_CONFIG_FILE", "/dev/null", EnvOrigin::Tool);
    run
}

/// The caller's variables the build does not see as given, as far as they
/// are reported (knobs and [`REPORTED`] by value, [`REPORTED_BY_NAME`] by name).
fn dropped_env(caller: &BTreeMap<String, String>, run: &Run) -> BTreeMap<String, String> {
    caller
        .iter()
        .filter(|(k, val)| run.env.get(*k) != Some(*val))
        .filter_map(|(k, val)| {
            let knob = [Branch::HybridEp, Branch::Main, Branch::MainLegacy]
                .iter()
                .any(|b| interface::table(*b).iter().any(|r| r.name == k));
            if knob || REPORTED.contains(&k.as_str()) {
                Some((k.clone(), val.clone()))
            } else if REPORTED_BY_NAME.iter().any(|pre| k.starts_with(pre)) {
                Some((k.clone(), NOT_SHOWN.into()))
            } else {
                None
            }
        })
        .collect()
}

/// The interface's warnings and notes, the missing toolchain's, and a base
/// version that differs from pins.toml's.
fn plan_warnings(ctx: &Ctx, i: &Interface, run: &Run, tc: &ToolchainPart, short: &str) -> Vec<String> {
    let mut warnings = i.warnings.clone();
    warnings.extend(i.notes(&run.env));
    if let ToolchainPart::Missing(m) = tc {
        warnings.extend(m.warnings.iter().cloned());
    }
    if i.base_version != ctx.pins.source.base_version {
        warnings.push(format!(
            "{} says base_version = \"{}\", but the source at {short} gives {} ({}): the wheel will be {} \
             (`publish` refuses it until base_version says {})",
            ctx.pins.path.display(),
            ctx.pins.source.base_version,
            i.base_version,
            i.version_from,
            forge_model::patches::label(&i.base_version, short, &[]),
            i.base_version,
        ));
    }
    warnings
}

/// The environment the toolchain gives the build (and what it requires),
/// checked against what the variant states; torch's CUDA against nvcc.
fn attach_environment(plan: &mut Plan, t: &Toolchain, (ctx, v, short): (&Ctx, &Variant, &str)) -> Result<()> {
    let i = &plan.interface;
    let (mut e, from) = super::environment::of(t, &plan.run.env, i);
    // The registration path of the source as built: the pin's csrc with the variant's patches.
    e.needs.registration =
        e.needs.registration.as_ref().map(|r| forge_model::interface::registration::patched(r, &plan.source.patches));
    let root = |lib| super::environment::root(t, &plan.run.env, i.branch, lib);
    e.requires =
        Some(super::closure::derive(t, &e, root("NCCL").as_deref(), root("NVSHMEM").as_deref(), v.runtime_requires));
    below_stated((ctx, v, short), i, &e, &from)?;
    plan.environment = Some(e);
    plan.environment_from = from;
    // torch's CUDA against nvcc: a refusal (another major, in a build that imports torch) is
    // preflight's STOP; anything else is said here.
    if let Some(m) = preflight::toolchain_cuda(plan).filter(|m| !(m.refused && plan.needs_torch)) {
        let runs = if m.refused { " (this build does not import torch, so torch's check does not run)" } else { "" };
        plan.warnings.push(format!("{}{runs}", m.message));
    }
    Ok(())
}

/// The plan's log and (unless --no-cache) cache entry, from its cache key.
fn set_outputs(plan: &mut Plan, cache_dir: &Path, variant: &str, no_cache: bool) {
    plan.outputs.log = log_path(cache_dir, variant, plan.cache_key.as_deref());
    plan.outputs.cache_entry = plan
        .cache_key
        .as_deref()
        .filter(|_| !no_cache)
        .map(|k| forge_store::cache::Cache::at(cache_dir).wheels_dir().join(k));
}

/// The revision's stated torch and NVSHMEM minimums against what the build compiles
/// against ([`Interface::below_stated`]): exit 2, before anything compiles.
fn below_stated(
    (ctx, v, short): (&Ctx, &Variant, &str),
    i: &Interface,
    e: &forge_wheel::provenance::BuildEnvironment,
    from: &BTreeMap<String, String>,
) -> Result<()> {
    let read = |lib: &str| from.get(lib).map(String::as_str).unwrap_or("the build Python");
    let built = interface::Built {
        torch: e.torch.as_deref().map(|t| (t, read("torch"))),
        nvshmem: e.nvshmem.as_deref().map(|n| (n, read("NVSHMEM"))),
    };
    let Some(r) = i.below_stated(&built) else { return Ok(()) };
    Err(Failure::usage(format!(
        "{}:{}: variant `{}` cannot be built at DeepEP {}: {}",
        ctx.pins.path.display(),
        v.line,
        v.name,
        short,
        r.message
    ))
    .hint(r.hint)
    .into())
}

/// The environment the toolchain needs (CUDA_HOME, the registry's PATH and
/// LIBRARY_PATH, CUDA 13's cccl on CPATH) and its roots.
fn toolchain_env(
    t: &Toolchain,
    run: &mut Run,
    roots: &mut Roots,
    fixes: &mut Vec<String>,
    caller: &BTreeMap<String, String>,
) {
    let system_prefix = |p: &Path| ["/", "/usr", "/usr/local", "/opt"].iter().any(|s| p == Path::new(s));
    if !system_prefix(&t.cuda_home) {
        roots.0.insert(Root::Cuda, t.cuda_home.clone());
    }
    // A virtual environment's folder (pyvenv.cfg) is a root; a system prefix is not.
    if let Some(env) =
        t.python.parent().and_then(Path::parent).filter(|e| forge_os::fs::machine::is_file(&e.join("pyvenv.cfg")))
    {
        roots.0.insert(Root::Python, env.to_path_buf());
    }
    run.set("CUDA_HOME", t.cuda_home.to_string_lossy(), EnvOrigin::Toolchain);
    if let Some(r) = &t.registry {
        roots.0.insert(Root::Toolchain, r.root.clone());
        // torch's extension builder runs `ninja` from PATH; the link finds libcuda.so (the stub) and
        // the unversioned runtime names through LIBRARY_PATH.
        let path = caller.get("PATH").filter(|p| !p.is_empty()).map(|p| format!(":{p}")).unwrap_or_default();
        run.set("PATH", format!("{}{path}", r.bin().display()), EnvOrigin::Caller);
        run.set("LIBRARY_PATH", t.cuda_home.join("lib64").to_string_lossy(), EnvOrigin::Toolchain);
    }
    if let Some(x) = &t.cross {
        // The cross compilers (torch passes CC to nvcc as -ccbin; LDSHARED links), and the target's
        // sysconfig: extension suffix and wheel tag for the target Python.
        for (k, val) in x.build_env() {
            run.set(&k, val, EnvOrigin::Toolchain);
        }
    }
    if t.cuda_major() >= 13 {
        let cccl = t.cuda_home.join("include/cccl");
        run.set("CPATH", cccl.to_string_lossy(), EnvOrigin::Fix);
        fixes.push(format!(
            "CUDA {} >= 13: {} on CPATH (else `cuda/std/tuple: No such file`)",
            t.nvcc_version,
            cccl.display()
        ));
    }
}

/// EPv2's setup.py links `-l:libnccl.so.2` with an rpath but no `-L` to NCCL's
/// lib (dd758ca setup.py:124): a pip NCCL is not on the linker's search path
/// (`cannot find -l:libnccl.so.2`), so its `lib` goes on LIBRARY_PATH.
fn nccl_link_fix(t: &Toolchain, i: &Interface, run: &mut Run, fixes: &mut Vec<String>) {
    if i.branch != Branch::Main {
        return;
    }
    let Some(lib) = super::environment::root(t, &run.env, i.branch, "NCCL").map(|r| r.join("lib")) else { return };
    let value = match run.env.get("LIBRARY_PATH") {
        Some(v) => format!("{v}:{}", lib.display()),
        None => lib.display().to_string(),
    };
    run.set("LIBRARY_PATH", value, EnvOrigin::Fix);
    fixes.push(format!(
        "DeepEP's `main` links -l:libnccl.so.2 without -L to NCCL's lib: {} on LIBRARY_PATH (else `cannot find -l:libnccl.so.2`)",
        lib.display()
    ));
}

/// The toolchain `--toolchain` names. `plan` turns a missing one (exit 3)
/// into [`ToolchainPart::Missing`] and never provisions; `build-wheel`
/// provisions a registry toolchain and fails with exit 3 without one.
/// The highest NCCL any pinned revision needs, and where it says so.
fn nccl_need(sources: &BTreeMap<Arch, Pinned>) -> Option<(String, String)> {
    sources
        .values()
        .filter_map(|p| {
            let n = &p.interface.runtime;
            let min = n.nccl_min.clone()?;
            let at = n.evidence.iter().find(|e| e.contains(min.as_str())).cloned().unwrap_or_default();
            Some((min, at))
        })
        .max_by_key(|(m, _)| interface::version_key(m))
}

fn identify(
    c: &BuildRequest,
    pins: &Pins,
    cache_dir: &Path,
    mode: Mode,
    nccl: Option<(String, String)>,
    archs: &[Arch],
) -> Result<ToolchainPart> {
    let memo = cache_dir.join("toolchain");
    if c.toolchain == registry::Kind::System {
        if c.match_project.is_some() {
            forge_os::bail_usage!(
                "--match-project needs --toolchain registry (the system toolchain is what the build Python has)"
            );
        }
        let python = c.python.as_deref().unwrap_or("python3");
        return match toolchain::identify(python, None, &memo) {
            Ok(t) => Ok(ToolchainPart::Known(Box::new(t))),
            Err(e) if mode == Mode::Plan && forge_os::error::exit_of(&e) == Exit::Environment => {
                Ok(missing("system", &e, system_needs(python), None))
            }
            Err(e) => Err(e),
        };
    }
    let nccl = nccl.as_ref().map(|(m, at)| (m.as_str(), at.as_str()));
    let req = registry::request(pins, c.match_project.as_deref().map(|d| (d, archs)), c.python.as_deref(), nccl)?;
    let found = match mode {
        Mode::Build => Some(registry::provision(&req, cache_dir)?),
        Mode::Plan => match registry::lookup(&req, cache_dir) {
            Ok(found) => found,
            Err(e) if forge_os::error::exit_of(&e) == Exit::Environment => {
                let m = missing("registry", &e, registry_needs(&req), Some(would(&req, None)?));
                return Ok(warn_locked_cuda(m, &req));
            }
            Err(e) => return Err(e),
        },
    };
    let Some(mut p) = found else {
        let root = registry::root_for(&req, cache_dir)?;
        let e = anyhow::Error::from(Failure::env(format!(
            "the registry toolchain for {} (Python {}) is not provisioned yet",
            req.torch, req.python
        )));
        let mut m = missing("registry", &e, registry_needs(&req), Some(would(&req, Some(root))?));
        if let ToolchainPart::Missing(ms) = &mut m {
            ms.hint = Some(
                "`deepep-forge build-wheel --toolchain registry` provisions it with uv (plan never downloads)".into(),
            );
        }
        return Ok(warn_locked_cuda(m, &req));
    };
    p.notes.splice(0..0, req.notes);
    let mut tc = toolchain::identify(&p.python().to_string_lossy(), Some(&p.cuda_home()), &memo)?;
    tc.kind = registry::Kind::Registry;
    tc.registry = Some(p);
    Ok(ToolchainPart::Known(Box::new(tc)))
}

/// `--match-project`: the consumer's locked torch `+cuXYZ` against the registry toolchain's
/// nvcc, not known before it is provisioned (the CUDA minor the registry's torch carries:
/// PyPI's torch 2.11.0 is the CUDA 13.0 build): a plan warning ([`preflight::torch_cuda_vs_nvcc`]).
fn warn_locked_cuda(mut m: ToolchainPart, req: &registry::Request) -> ToolchainPart {
    let (ToolchainPart::Missing(ms), Some(from)) = (&mut m, &req.cuda_from) else { return m };
    let nvcc_from =
        format!("the registry toolchain's nvcc is the CUDA minor its {} carries, read once installed", req.torch);
    let torch = preflight::CudaSide { cuda: req.cuda.as_deref(), from };
    if let Some(w) = preflight::torch_cuda_vs_nvcc(torch, preflight::CudaSide { cuda: None, from: &nvcc_from }) {
        ms.warnings.push(format!(
            "{}; build-wheel refuses a registry torch of another CUDA than the lock's (to build for CUDA {}, set [toolchain] torch and cuda in pins.toml and build without --match-project)",
            w.message,
            req.cuda.as_deref().unwrap_or("?")
        ));
    }
    m
}

fn missing(
    kind: &str,
    e: &anyhow::Error,
    needs: Vec<String>,
    would_provision: Option<plan::WouldProvision>,
) -> ToolchainPart {
    let hint = e.chain().find_map(|c| c.downcast_ref::<Failure>()).and_then(|f| f.hint.clone());
    ToolchainPart::Missing(Box::new(plan::MissingToolchain {
        kind: kind.into(),
        missing: format!("{e:#}"),
        hint,
        needs,
        would_provision,
        cross: None,
        warnings: vec![],
    }))
}

fn system_needs(python: &str) -> Vec<String> {
    vec![
        format!("the build Python `{python}` with setuptools, wheel, pip and torch importable"),
        "nvcc: CUDA_HOME, nvcc on PATH, or the nvidia-cuda-nvcc wheel in the Python's site-packages".into(),
        "a C and C++ compiler (CC/CXX, default cc/c++) that links libstdc++ dynamically".into(),
        "(or, instead of all of this: --toolchain registry, torch and the CUDA compiler packages from PyPI, made with uv)".into(),
    ]
}

fn registry_needs(req: &registry::Request) -> Vec<String> {
    vec![
        format!("uv, and the Python `{}` to make the environment from", req.python),
        format!("the package registry reachable (PyPI): {} and the CUDA packages of its CUDA minor", req.torch),
        "a C compiler (CC, default cc) for the libcuda.so link stub, and a C++ compiler for the build".into(),
    ]
}

fn would(req: &registry::Request, root: Option<PathBuf>) -> Result<plan::WouldProvision> {
    let cuda = req.cuda.clone().unwrap_or_else(|| "X.Y".into());
    let mut packages = if let Some(from) = &req.cuda_from {
        // The lock's +cuXYZ is what the consumer runs; the registry's torch==X is one build
        // (PyPI's torch 2.11.0 is the CUDA 13.0 one): nvcc is never shown beside it as if they agreed.
        vec![format!(
            "the CUDA compiler packages of the CUDA minor {} carries (warning: {from} is a CUDA {cuda} build; build-wheel refuses a registry torch of another CUDA rather than compile with nvcc {cuda} beside it: to build for CUDA {cuda}, set [toolchain] torch and cuda in pins.toml and build without --match-project)",
            req.torch
        )]
    } else if req.cuda.is_some() {
        registry::cuda_requirements(&cuda)?
    } else {
        vec!["the CUDA compiler packages of the CUDA minor torch carries (read once torch is installed)".into()]
    };
    packages.extend(req.overrides.iter().map(|o| format!("{} (over torch's pin: {})", o.requirement(), o.why)));
    let overrides = req
        .overrides
        .iter()
        .map(|o| forge_wheel::provenance::Requirement {
            name: o.package.clone(),
            specifier: o.spec.clone(),
            why: o.why.clone(),
        })
        .collect();
    Ok(plan::WouldProvision {
        root: root.unwrap_or_default(),
        python: req.python.clone(),
        torch: req.torch.clone(),
        packages,
        overrides,
    })
}

/// pins.toml's repo: a remote URL (validated when pins.toml is read; local
/// paths come only from `--source`).
fn pins_repo(p: &Pins) -> String {
    p.source.repo.clone()
}

fn names(p: &Pins) -> String {
    p.variants.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", ")
}

pub fn variant_info(v: &Variant) -> VariantInfo {
    VariantInfo {
        name: v.name.clone(),
        arch: v.arch.as_str().into(),
        cuda_arch_list: v.cuda_arch_list.to_env(),
        multinode: v.multinode,
        transport: v.multinode.then(|| v.transport.as_str().to_string()),
        rdma_core_home: v.rdma_core_home.clone().filter(|_| v.multinode),
        env: v.env.iter().map(|e| (e.name.clone(), e.value.clone())).collect(),
    }
}

/// The build log's path: `<cache>/logs/<variant>-<key12>-<UTC time>-<pid>-<n>.log`, one
/// name per plan made, so that two builds of one variant and key (a build, then
/// `verify`'s rebuild; two runs at once) never write one file. Not part of the plan's seal.
fn log_path(cache_dir: &Path, variant: &str, key: Option<&str>) -> PathBuf {
    static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tag = key.map(|k| &k[..12]).unwrap_or("unknown");
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, mo, d, h, mi, s) = forge_wheel::provenance::utc_parts(secs as i64);
    let at = format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z");
    cache_dir.join("logs").join(format!("{variant}-{tag}-{at}-{}-{n}.log", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A consumer locking torch 2.11.0+cu129 (`--match-project`): the plan's would-provision
    /// never lists nvcc 12.9 beside the registry's torch==2.11.0 as if they agreed; it warns.
    #[test]
    fn a_locked_cuda_the_registry_torch_may_not_carry_is_a_warning_not_nvcc_beside_it() {
        let pins = Pins::parse(include_str!("../../../../pins.toml"), Path::new("pins.toml")).unwrap();
        let d = tempfile::tempdir().unwrap();
        let lock = include_str!("../../../../tests/fixtures/consumer-forks/uv.lock")
            .replace("version = \"2.11.0\"\n", "version = \"2.11.0+cu129\"\n")
            .replace("version = \"2.11.0\", source", "version = \"2.11.0+cu129\", source");
        std::fs::write(d.path().join("uv.lock"), lock).unwrap();
        let req = registry::request(&pins, Some((d.path(), &[Arch::X86_64])), None, None).unwrap();
        assert_eq!((req.torch.as_str(), req.cuda.as_deref()), ("torch==2.11.0", Some("12.9")));
        let w = would(&req, None).unwrap();
        let shown = w.packages.join(" ");
        assert!(!shown.contains("nvidia-cuda-nvcc"), "{shown}");
        assert!(shown.contains("warning: ") && shown.contains("torch 2.11.0+cu129 is a CUDA 12.9 build"), "{shown}");
        // pins.toml's own [toolchain] cuda is a choice: its packages are listed as before.
        let req = registry::request(&pins, None, None, None).unwrap();
        assert!(would(&req, None).unwrap().packages.join(" ").contains("13.0"));
    }
}
