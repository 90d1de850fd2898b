//! `plan` and `build-wheel`, the command edge: arguments, printing, the
//! report. The work is split by job: `prepare` (arguments -> plans, DeepEP's
//! interface read at the pin, the toolchain or what is missing), `plan` (the
//! plan type, its path-free form and cache key), `execute` (one plan: cache,
//! preflight, checkout, the plan's command, checks, relocation, provenance),
//! `deliver` (`--out`, SHA256SUMS, report). Must not parse consumer
//! lockfiles or touch a GPU.
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
pub mod request;
pub mod retag;
pub mod run;
pub mod side_by_side;
pub mod toolchain;
pub mod unit_order;

use std::collections::BTreeMap;

use anyhow::Result;

use deliver::{Outcome, Report};
use forge_os::error::{Cooperative, Exit};
use forge_os::output::DataFormat as Format;
use forge_store::cache::{self, Cache};
use forge_wheel::provenance;
use plan::{Plan, ToolchainPart};
use prepare::{make_plans, Mode};
pub use request::{BuildOptions, BuildRequest, BuildWheelRequest, CompilerCache, RunOptions, Variants};

/// `deepep-forge plan`: print the plans (JSON: full build recipes and a CI
/// matrix). Runs without a toolchain: what is missing is part of the plan.
pub fn plan(args: BuildOptions) -> Result<Exit> {
    // Planning may fetch: Ctrl-C then stops git's process group, not just us.
    let _coop = Cooperative::enter();
    let c = &args;
    let p = make_plans(&c.request()?, Mode::Plan)?;
    let store = Cache::at(&p.cache_dir);
    let cached = |pl: &Plan| {
        !c.no_cache && pl.cache_key.as_deref().and_then(|k| cache::Key::parse(k).ok()).is_some_and(|k| store.has(&k))
    };
    if c.format == Format::Json {
        let include: Vec<_> = p
            .plans
            .iter()
            .zip(&p.pythons)
            .map(|(pl, py)| {
                serde_json::json!({ "variant": pl.variant.name, "arch": pl.variant.arch, "python": py, "cell": cell(&pl.variant.name, py.as_deref()), "cache_key": pl.cache_key, "cached": cached(pl) })
            })
            .collect();
        let doc = serde_json::json!({ "schema": plan::SCHEMA, "plans": p.plans, "skipped": p.skipped, "matrix": { "include": include } });
        forge_os::printer::json(&doc)?;
        return Ok(Exit::Ok);
    }
    for pl in &p.plans {
        print_plan(pl, cached(pl));
    }
    for s in &p.skipped {
        forge_os::outln!("skipped {} ({}): {}", s.variant, s.arch, s.reason);
    }
    Ok(Exit::Ok)
}

/// A matrix cell's name, safe as a file and artifact name: the variant, and
/// `-py3.12` when its Python is a version (a path given as --python adds nothing).
fn cell(variant: &str, python: Option<&str>) -> String {
    match python.filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit() || b == b'.')) {
        Some(p) => format!("{variant}-py{p}"),
        None => variant.to_string(),
    }
}

/// A cross plan's target side: host -> target, the sysroot, the path map.
fn print_cross(x: &cross::Sysroot) {
    let pick = |n: &str| format!("{n} {}", x.packages.get(n).map(String::as_str).unwrap_or("-"));
    forge_os::outln!(
        "  cross       {} -> {} ({}, wheels for {}, Python {} {})",
        x.host,
        x.target,
        x.triple,
        x.python_platform,
        x.python_version,
        x.ext_suffix
    );
    forge_os::outln!(
        "  sysroot     {} ({} wheels: {}, ...; {} Debian arm64 packages)",
        x.root.display(),
        x.packages.len(),
        ["torch", "nvidia-cuda-runtime", "nvidia-nvshmem-cu13"].map(pick).join(", "),
        x.debs.len()
    );
    for (h, tg) in &x.path_map {
        forge_os::outln!("  path map    {h} -> {tg}");
    }
}

/// The target side of a cross plan that is not provisioned yet.
fn print_cross_preview(x: &plan::CrossPreview) {
    let py = x.target_python.as_deref().unwrap_or("of the build Python's minor");
    forge_os::outln!(
        "  cross       {} -> {} ({}, wheels for {}, Python {py})",
        x.host,
        x.target,
        x.triple,
        x.python_platform
    );
    for (k, c) in &x.compilers {
        match c {
            Some(c) => forge_os::outln!("  cross {k:<5} {} ({})", c.path.display(), c.version),
            None => forge_os::outln!("  cross {k:<5} MISSING: {}-{k} not on PATH", x.triple),
        }
    }
    match &x.sysroot {
        Some(r) => forge_os::outln!("  sysroot     would make {}:", r.display()),
        None => forge_os::outln!(
            "  sysroot     would make <cache>/toolchains/<key>-{} (its key follows the host toolchain's):",
            x.target
        ),
    }
    for h in &x.sysroot_holds {
        forge_os::outln!("              {h}");
    }
    match &x.qemu {
        Some(q) => {
            forge_os::outln!(
                "  qemu        {} (imports the wheel under Debian's arm64 Python after the build)",
                q.display()
            )
        }
        None => forge_os::outln!("  qemu        MISSING: qemu-aarch64 (the import check after the build)"),
    }
    for s in &x.stops {
        forge_os::outln!("  will stop   {s}");
    }
}

// Over 120 lines: the human plan is one aligned listing, a line per part of the
// plan in a fixed order (docs/plan.md shows it); splitting it would only scatter
// the order across functions.
fn print_plan(pl: &Plan, cached: bool) {
    print_what(pl);
    print_decisions(pl);
    match &pl.toolchain {
        ToolchainPart::Known(t) => print_toolchain(t, pl.needs_torch),
        ToolchainPart::Missing(m) => print_missing_toolchain(m),
    }
    print_environment(pl);
    print_build(pl, cached);
}

/// The variant, its source (fork, interface, version, submodules, patches).
fn print_what(pl: &Plan) {
    let v = &pl.variant;
    let kind = if v.multinode {
        format!("multinode/{}", v.transport.as_deref().unwrap_or("doca"))
    } else {
        "single-node".into()
    };
    forge_os::outln!("plan {} ({}, TORCH_CUDA_ARCH_LIST={}, {kind})", v.name, v.arch, v.cuda_arch_list);
    let s = &pl.source;
    let snap = s.snapshot_of.as_ref().map(|p| format!(" (snapshot of {})", p.display())).unwrap_or_default();
    forge_os::outln!("  source      {}{snap} @ {}", s.repo, s.rev);
    if let Some(f) = &s.fork {
        forge_os::outln!("  fork        {}", f.describe());
    }
    let i = &pl.interface;
    forge_os::outln!(
        "  interface   {} (version from {}; extensions {}; needs {})",
        i.branch.as_str(),
        i.version_from,
        i.extensions.join(", "),
        i.needs.join(", ")
    );
    forge_os::outln!(
        "  version     {}  (SOURCE_DATE_EPOCH {} = {})",
        s.version,
        s.source_date_epoch,
        provenance::rfc3339(s.source_date_epoch)
    );
    for (p, c) in &s.submodules {
        forge_os::outln!("  submodule   {p} @ {c}");
    }
    print_patches(&s.patches);
}

/// What the plan dropped from the caller's environment: the variables that change a
/// build (shown with their values), and the tool settings it never reads (pip's,
/// uv's, setuptools': named only, their values may be secrets).
fn split_dropped(dropped: &BTreeMap<String, String>) -> (Vec<(&String, &String)>, Vec<&str>) {
    let (settings, shown): (Vec<_>, Vec<_>) = dropped.iter().partition(|(_, v)| v.as_str() == prepare::NOT_SHOWN);
    (shown, settings.into_iter().map(|(k, _)| k.as_str()).collect())
}

/// One line for the tool settings a build does not read (the build's pip reads no configuration).
fn settings_note(names: &[&str]) -> String {
    format!("your pip/uv settings ({}) do not reach the build: it reads no tool configuration", names.join(", "))
}

/// The knobs as set, and what the plan dropped, fixed and warns about.
fn print_decisions(pl: &Plan) {
    let i = &pl.interface;
    let knobs: Vec<String> = i
        .knobs
        .iter()
        .filter(|k| !k.read_at.is_empty())
        .map(|k| match pl.run.env.get(&k.name) {
            Some(val) => format!("{}={val}", k.name),
            None => format!("{} (unset)", k.name),
        })
        .collect();
    forge_os::outln!("  knobs       {}", knobs.join(" "));
    let (shown, settings) = split_dropped(&pl.dropped_env);
    for (k, val) in shown {
        forge_os::outln!("  dropped     {k}={val} (from your environment; the plan decides it)");
    }
    if !settings.is_empty() {
        forge_os::outln!("  ignored     {}", settings_note(&settings));
    }
    for f in &pl.fixes {
        forge_os::outln!("  fix         {f}");
    }
    for w in &pl.warnings {
        forge_os::outln!("  warning     {w}");
    }
}

/// A toolchain found (or made): Python, torch, nvcc, the registry, cross, compilers.
fn print_toolchain(t: &toolchain::Toolchain, needs_torch: bool) {
    forge_os::outln!(
        "  python      {} ({} {}, {}), torch {}{}",
        t.python.display(),
        t.python_version,
        t.python_tag,
        t.platform,
        t.torch.as_deref().unwrap_or("-"),
        if needs_torch { " (the build imports torch)" } else { "" }
    );
    forge_os::outln!("  nvcc        {} ({})", t.nvcc_version, t.cuda_home.display());
    if let Some(r) = &t.registry {
        let pick = |n: &str| format!("{n} {}", r.packages.get(n).map(String::as_str).unwrap_or("-"));
        forge_os::outln!(
            "  toolchain   registry {} ({} packages: {}, ...)",
            r.root.display(),
            r.packages.len(),
            ["torch", "nvidia-cuda-nvcc", "nvidia-cuda-cccl", "nvidia-nvshmem-cu13"].map(pick).join(", ")
        );
        forge_os::outln!(
            "  stub        libcuda.so (soname libcuda.so.1) defining {} driver functions from cuda.h",
            r.stub_symbols
        );
        for n in &r.notes {
            forge_os::outln!("  note        {n}");
        }
    }
    if let Some(x) = &t.cross {
        print_cross(x);
    }
    for (k, c) in &t.compilers {
        forge_os::outln!("  {k:<11} {} ({})", c.path.display(), c.version);
    }
}

/// A missing toolchain: what is missing, what the build needs, what would be made.
fn print_missing_toolchain(m: &plan::MissingToolchain) {
    forge_os::outln!("  toolchain   {} MISSING: {}", m.kind, m.missing);
    if let Some(h) = &m.hint {
        forge_os::outln!("              hint: {h}");
    }
    for n in &m.needs {
        forge_os::outln!("  build needs {n}");
    }
    if let Some(w) = &m.would_provision {
        let host = if m.cross.is_some() { " (the host side, x86_64)" } else { "" };
        forge_os::outln!("  would make  {}{host} with Python {}: {}", w.root.display(), w.python, w.torch);
        forge_os::outln!("              then {}", w.packages.join(" "));
    }
    if let Some(x) = &m.cross {
        print_cross_preview(x);
    }
}

/// The build root and hooks, NCCL reuse, extensions, the command, the cache key, the outputs.
fn print_build(pl: &Plan, cached: bool) {
    if let Some(h) = &pl.hooks {
        forge_os::outln!(
            "  build root  {} (this user's, one build at a time; the wheel records it as {}; links: {})",
            pl.build_dir().display(),
            canon::CANONICAL_ROOT,
            h.links.iter().map(|(n, t)| format!("{n} -> {}", t.display())).collect::<Vec<_>>().join(", ")
        );
        forge_os::outln!(
            "  hooks       nvcc and C++ compiles through sccache {} (per-unit --frandom-seed, -ffile-prefix-map); compiler cache: {}",
            h.sccache_version,
            h.compiler_cache.as_ref().map(|c| c.describe()).unwrap_or_else(|| "off".into())
        );
    }
    if let Some(n) = &pl.nccl_reuse {
        forge_os::outln!(
            "  nccl        {}/{} at {} ({}) reused when stored under key {} ({}), else stored after the build",
            n.submodule,
            n.build_dir,
            &n.commit[..n.commit.len().min(7)],
            n.nvcc_gencode,
            &n.key[..12],
            n.entry.display()
        );
    }
    if let Some(s) = &pl.side_by_side {
        forge_os::outln!("  extensions  {}", side_by_side::describe(s));
        if let Some(order) = unit_order::describe(&s.first_units) {
            forge_os::outln!("  unit order  {order}");
        }
    }
    forge_os::outln!("  cwd         {}", pl.run.cwd.display());
    forge_os::outln!("  command     {}", pl.run.argv.join(" "));
    forge_os::outln!(
        "  env         {} variables, nothing inherited: {}",
        pl.run.env.len(),
        pl.run.env.keys().cloned().collect::<Vec<_>>().join(" ")
    );
    match &pl.cache_key {
        Some(k) => forge_os::outln!("  cache key   {k}{}", if cached { " (cached)" } else { "" }),
        None => forge_os::outln!("  cache key   unknown: {}", pl.cache_key_unknown.as_deref().unwrap_or("-")),
    }
    forge_os::outln!("  output      {}  log {}", pl.outputs.out_dir.display(), pl.outputs.log.display());
}

/// What the build compiles against, what the revision needs, and what
/// build-wheel's preflight will stop on.
/// `exact, unpatched`, or each source patch with its sha256, its files and, loudly, any build file it changes.
fn print_patches(set: &[forge_wheel::provenance::SourcePatch]) {
    forge_os::outln!("  patches     {}", forge_model::patches::describe(set));
    for (n, p) in set.iter().enumerate() {
        forge_os::outln!("  patch {:<5} {} sha256 {} touches {}", n + 1, p.name, p.sha256, p.files.join(", "));
        for f in &p.build_files {
            forge_os::outln!(
                "  BUILD FILE  {} changes {f}: it changes how DeepEP builds; review it as build code",
                p.name
            );
        }
    }
}

fn print_environment(pl: &Plan) {
    if let Some(e) = &pl.environment {
        let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let abi = match e.torch_cxx11_abi {
            Some(true) => " (C++11 ABI)",
            Some(false) => " (pre-C++11 ABI)",
            None => "",
        };
        forge_os::outln!(
            "  found       torch {}{abi}, CUDA {}, NVSHMEM {}, NCCL {}",
            or(&e.torch),
            or(&e.cuda),
            or(&e.nvshmem),
            or(&e.nccl)
        );
        for (lib, f) in &pl.environment_from {
            forge_os::outln!("              {lib} read from {f}");
        }
    }
    // The revision's needs (the environment's copy: NVSHMEM's only when the build links it).
    let n = pl.environment.as_ref().map(|e| &e.needs).unwrap_or(&pl.interface.runtime);
    let mut needed = Vec::new();
    if let Some(m) = &n.nccl_min {
        needed.push(format!("NCCL >= {m}"));
    }
    if let Some(b) = &n.nccl_exact_below {
        needed.push(format!("below NCCL {b} the same NCCL at run time as at build"));
    }
    if n.nvshmem_same {
        needed.push("the NVSHMEM host library at run time = the version built with".into());
    }
    if let Some(m) = &n.torch_min {
        needed.push(format!("torch >= {}", m.version));
    }
    if let Some(m) = &n.nvshmem_min {
        needed.push(format!("NVSHMEM >= {}", m.version));
    }
    if let Some(j) = &n.jit {
        needed.push(jit_line(j));
    }
    if !needed.is_empty() {
        forge_os::outln!("  needs       {}", needed.join("; "));
        for ev in &n.evidence {
            forge_os::outln!("              {ev}");
        }
    }
    print_unstated(pl, n);
    print_requires(pl);
    for g in preflight::environment_gaps(pl) {
        forge_os::outln!("  preflight   STOP (build-wheel exits 3): {}", g.what);
        forge_os::outln!("              fix: {}", g.fix);
    }
}

/// EPv2's run-time needs beyond libraries, in one phrase (`probe --python` checks them: `epv2-jit`).
fn jit_line(j: &forge_wheel::provenance::JitNeeds) -> String {
    let mut parts = Vec::new();
    if j.cuda_home {
        parts.push("a CUDA home at import (CUDA_HOME, CUDA_PATH, nvcc on PATH or /usr/local/cuda)".to_string());
    }
    match &j.nvcc_min {
        Some(v) => parts.push(format!("its nvcc >= {v} for the run-time JIT")),
        None => parts.push("its nvcc for the run-time JIT".to_string()),
    }
    if j.cuobjdump {
        parts.push("its cuobjdump".into());
    }
    if j.nccl_headers {
        parts.push("NCCL's headers (-I <nccl root>/include)".into());
    }
    format!("at run time {}", parts.join(", "))
}

/// A torch or NVSHMEM minimum the revision does not state (or states unreadably): none is
/// taken, and the plan says so.
fn print_unstated(pl: &Plan, n: &forge_wheel::provenance::RuntimeNeeds) {
    let links_nvshmem = n.nvshmem_same || pl.interface.branch == forge_model::interface::Branch::Main;
    let mut unstated = Vec::new();
    if n.torch_min.is_none() {
        unstated.push("torch");
    }
    if n.nvshmem_min.is_none() && links_nvshmem {
        unstated.push("NVSHMEM");
    }
    if !unstated.is_empty() {
        forge_os::outln!(
            "  no minimum  {}: none stated in {} at this revision (none taken)",
            unstated.join(", "),
            forge_model::interface::STATING.join(", ")
        );
    }
    for u in &n.unread {
        forge_os::outln!("  unread      {u}");
    }
}

/// The wheel's run-time requirements (`Requires-Dist`) and what is not one.
fn print_requires(pl: &Plan) {
    let Some(d) = &pl.requires_dist else { return };
    let r = &d.requires;
    if r.enabled && r.requires.is_empty() && r.notes.is_empty() {
        return;
    }
    let lines: Vec<String> = r.requires.iter().map(|q| q.line()).collect();
    let shown = if lines.is_empty() { "none".to_string() } else { lines.join(", ") };
    let off = if r.enabled { "" } else { " (not written: runtime_requires = false)" };
    let from = if d.source == "installed" { "" } else { " (from what the registry toolchain would provision)" };
    forge_os::outln!("  requires    {shown}{off}{from}");
    for q in &r.requires {
        forge_os::outln!("              {}: {}", q.line(), q.why);
    }
    for n in &r.notes {
        forge_os::outln!("              note: {n}");
    }
}

/// `deepep-forge build-wheel`: execute each plan (exit 3 without a toolchain).
pub fn build(args: BuildWheelRequest) -> Result<Exit> {
    let _coop = Cooperative::enter();
    let c = &args.common;
    // Flags and trusted keys first: a bad --cache-url fails before any fetch or build.
    let remote = c.remote.connect(c.no_cache)?;
    let human = c.format != Format::Json;
    let mut said_settings = false;
    let built = run::build(&c.request()?, remote.as_ref(), |o| {
        if human {
            print_outcome(o, !std::mem::replace(&mut said_settings, true))
        }
    })?;
    if human {
        for s in &built.skipped {
            forge_os::outln!("skipped    {} ({}): {}", s.variant, s.arch, s.reason);
        }
    }
    let report = Report { schema: plan::SCHEMA, results: &built.results, skipped: &built.skipped };
    let text = serde_json::to_string_pretty(&report)?;
    if !human {
        forge_os::outln!("{text}");
    }
    if let Some(r) = &args.report {
        deliver::write_atomic(r, text.as_bytes())?;
    }
    Ok(Exit::Ok)
}

/// One built or cached wheel: the result line (and patches) on stdout, what
/// was dropped and the notes on stderr; the tool settings dropped (pip's, uv's)
/// once per run (`first`), by name only.
fn print_outcome(o: &Outcome, first: bool) {
    forge_os::outln!(
        "{:<10} {} ({}) sha256 {} in {:.2} s",
        o.status,
        o.wheel.display(),
        cache::human_size(o.size),
        &o.sha256[..16],
        o.seconds
    );
    let (shown, settings) = split_dropped(&o.dropped_env);
    for (k, v) in shown {
        forge_os::note!("           dropped {k}={v} from the environment (the plan decides it)");
    }
    if first && !settings.is_empty() {
        forge_os::note!("           note: {}", settings_note(&settings));
    }
    // A cache hit reuses a wheel patched when it was built: its patches are in
    // the report and the provenance, not news.
    for pa in o.patches.iter().filter(|_| o.status == "built") {
        let to = if pa.to.is_empty() { "(removed)" } else { &pa.to };
        forge_os::outln!("           patched {} {}: {} -> {to}", pa.file, pa.kind, pa.from);
    }
    for n in &o.notes {
        forge_os::note!("           note: {n}");
    }
}
