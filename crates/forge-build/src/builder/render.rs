//! What `plan` and `build-wheel` show, as text: the human plan (one aligned
//! listing per plan, docs/plan.md shows it), the plan document (JSON, with a
//! CI matrix), and a built wheel's result lines. Renderers only: they return
//! strings, and the command layer (`src/commands/build.rs`) prints them and
//! picks the exit code. Must not plan, build or print.
use std::collections::BTreeMap;

use serde::Serialize;

use super::deliver::Outcome;
use super::plan::{self, Plan, ToolchainPart};
use super::prepare::{self, Planned};
use super::{canon, cross, preflight, side_by_side, toolchain, unit_order};
use forge_store::cache;
use forge_wheel::provenance;

/// One line of `writeln!` into a `String` (which cannot fail).
macro_rules! put {
    ($buf:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($buf, $($t)*);
    }};
}

/// The plans of one `plan` run, and whether each one's wheel is cached.
pub struct Plans {
    pub planned: Planned,
    pub cached: Vec<bool>,
}

impl Plans {
    /// The plan document: full build recipes, the skipped variants and a CI
    /// matrix, as a JSON value (its keys sorted); a path that is not UTF-8 is an
    /// error, never a panic.
    pub fn json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self.document())
    }

    fn document(&self) -> PlanDocument<'_> {
        let p = &self.planned;
        let include = p
            .plans
            .iter()
            .zip(&p.pythons)
            .zip(&self.cached)
            .map(|((pl, py), cached)| Cell {
                variant: &pl.variant.name,
                arch: &pl.variant.arch,
                python: py.as_deref(),
                cell: cell(&pl.variant.name, py.as_deref()),
                cache_key: pl.cache_key.as_deref(),
                cached: *cached,
            })
            .collect();
        PlanDocument { schema: plan::SCHEMA, plans: &p.plans, skipped: &p.skipped, matrix: Matrix { include } }
    }

    /// The human listing: each plan, then each skipped variant.
    pub fn human(&self) -> String {
        let mut buf = String::new();
        for (pl, cached) in self.planned.plans.iter().zip(&self.cached) {
            put_plan(&mut buf, pl, *cached);
        }
        for s in &self.planned.skipped {
            put!(buf, "skipped {} ({}): {}", s.variant, s.arch, s.reason);
        }
        buf
    }
}

/// `plan --format json`: schema 2.
#[derive(Serialize)]
struct PlanDocument<'a> {
    schema: u32,
    plans: &'a [Plan],
    skipped: &'a [prepare::Skipped],
    matrix: Matrix<'a>,
}

/// The CI matrix: a cell per plan (`matrix.include`).
#[derive(Serialize)]
struct Matrix<'a> {
    include: Vec<Cell<'a>>,
}

#[derive(Serialize)]
struct Cell<'a> {
    variant: &'a str,
    arch: &'a str,
    python: Option<&'a str>,
    cell: String,
    cache_key: Option<&'a str>,
    cached: bool,
}

/// Where a line of a built wheel's result goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A result (stdout).
    Out(String),
    /// A note (stderr, hidden by `--quiet`).
    Note(String),
}

/// One built or cached wheel: the result line (and patches) for stdout, what
/// was dropped and the notes for stderr; the tool settings dropped (pip's,
/// uv's) once per run (`first`), by name only.
pub fn outcome(o: &Outcome, first: bool) -> Vec<Line> {
    let mut v = vec![Line::Out(format!(
        "{:<10} {} ({}) sha256 {} in {:.2} s",
        o.status,
        o.wheel.display(),
        cache::human_size(o.size),
        &o.sha256[..o.sha256.len().min(16)],
        o.seconds
    ))];
    if let Some(tag) =
        o.wheel.file_name().and_then(|n| forge_wheel::wheel::WheelName::parse(&n.to_string_lossy())).map(|n| n.platform)
    {
        v.push(Line::Out(format!("           {tag}: {}", forge_wheel::manylinux::words::loads_where(&tag))));
    }
    let (shown, settings) = split_dropped(&o.dropped_env);
    for (k, val) in shown {
        v.push(Line::Note(format!("           dropped {k}={val} from the environment (the plan decides it)")));
    }
    if first && !settings.is_empty() {
        v.push(Line::Note(format!("           note: {}", settings_note(&settings))));
    }
    // A cache hit reuses a wheel patched when it was built: its patches are in
    // the report and the provenance, not news.
    for pa in o.patches.iter().filter(|_| o.status == "built") {
        let to = if pa.to.is_empty() { "(removed)" } else { &pa.to };
        v.push(Line::Out(format!("           patched {} {}: {} -> {to}", pa.file, pa.kind, pa.from)));
    }
    v.extend(o.notes.iter().map(|n| Line::Note(format!("           note: {n}"))));
    v
}

/// A skipped variant's line of `build-wheel`.
pub fn skipped(s: &prepare::Skipped) -> String {
    format!("skipped    {} ({}): {}", s.variant, s.arch, s.reason)
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
fn put_cross(buf: &mut String, x: &cross::Sysroot) {
    let pick = |n: &str| format!("{n} {}", x.packages.get(n).map(String::as_str).unwrap_or("-"));
    put!(
        buf,
        "  cross       {} -> {} ({}, wheels for {}, Python {} {})",
        x.host,
        x.target,
        x.triple,
        x.python_platform,
        x.python_version,
        x.ext_suffix
    );
    put!(
        buf,
        "  sysroot     {} ({} wheels: {}, ...; {} Debian arm64 packages)",
        x.root.display(),
        x.packages.len(),
        ["torch", "nvidia-cuda-runtime", "nvidia-nvshmem-cu13"].map(pick).join(", "),
        x.debs.len()
    );
    for (h, tg) in &x.path_map {
        put!(buf, "  path map    {h} -> {tg}");
    }
}

/// The target side of a cross plan that is not provisioned yet.
fn put_cross_preview(buf: &mut String, x: &plan::CrossPreview) {
    let py = x.target_python.as_deref().unwrap_or("of the build Python's minor");
    put!(buf, "  cross       {} -> {} ({}, wheels for {}, Python {py})", x.host, x.target, x.triple, x.python_platform);
    for (k, c) in &x.compilers {
        match c {
            Some(c) => put!(buf, "  cross {k:<5} {} ({})", c.path.display(), c.version),
            None => put!(buf, "  cross {k:<5} MISSING: {}-{k} not on PATH", x.triple),
        }
    }
    match &x.sysroot {
        Some(r) => put!(buf, "  sysroot     would make {}:", r.display()),
        None => put!(
            buf,
            "  sysroot     would make <cache>/toolchains/<key>-{} (its key follows the host toolchain's):",
            x.target
        ),
    }
    for h in &x.sysroot_holds {
        put!(buf, "              {h}");
    }
    match &x.qemu {
        Some(q) => {
            put!(buf, "  qemu        {} (imports the wheel under Debian's arm64 Python after the build)", q.display())
        }
        None => put!(buf, "  qemu        MISSING: qemu-aarch64 (the import check after the build)"),
    }
    for s in &x.stops {
        put!(buf, "  will stop   {s}");
    }
}

// Over 120 lines: the human plan is one aligned listing, a line per part of the
// plan in a fixed order (docs/plan.md shows it); splitting it would only scatter
// the order across functions.
fn put_plan(buf: &mut String, pl: &Plan, cached: bool) {
    put_what(buf, pl);
    put_decisions(buf, pl);
    match &pl.toolchain {
        ToolchainPart::Known(t) => put_toolchain(buf, t, pl.needs_torch),
        ToolchainPart::Missing(m) => put_missing_toolchain(buf, m),
    }
    put_environment(buf, pl);
    put_build(buf, pl, cached);
}

/// The variant, its source (fork, interface, version, submodules, patches).
fn put_what(buf: &mut String, pl: &Plan) {
    let v = &pl.variant;
    let kind = if v.multinode {
        format!("multinode/{}", v.transport.as_deref().unwrap_or("doca"))
    } else {
        "single-node".into()
    };
    put!(buf, "plan {} ({}, TORCH_CUDA_ARCH_LIST={}, {kind})", v.name, v.arch, v.cuda_arch_list);
    let s = &pl.source;
    let snap = s.snapshot_of.as_ref().map(|p| format!(" (snapshot of {})", p.display())).unwrap_or_default();
    put!(buf, "  source      {}{snap} @ {}", s.repo, s.rev);
    if let Some(f) = &s.fork {
        put!(buf, "  fork        {}", f.describe());
    }
    let i = &pl.interface;
    put!(
        buf,
        "  interface   {} (version from {}; extensions {}; needs {})",
        i.branch.as_str(),
        i.version_from,
        i.extensions.join(", "),
        i.needs.join(", ")
    );
    put!(
        buf,
        "  version     {}  (SOURCE_DATE_EPOCH {} = {})",
        s.version,
        s.source_date_epoch,
        provenance::rfc3339(s.source_date_epoch)
    );
    for (p, c) in &s.submodules {
        put!(buf, "  submodule   {p} @ {c}");
    }
    put_patches(buf, &s.patches);
    put!(buf, "  platform    {}", platform_words(pl.platform.floor.as_deref()));
}

/// The plan's platform line: the floor in words (who can load the wheel), or that the
/// tag is the one the binaries earn.
fn platform_words(floor: Option<&str>) -> String {
    use forge_wheel::manylinux::{glibc, words};
    match floor.and_then(|f| glibc(&format!("manylinux_{f}"))) {
        Some(g) => format!("floor manylinux_{}: the wheel {}", floor.unwrap_or_default(), words::glibc_words(g)),
        None => "no floor: the tag is the policy the binaries earn (pins.toml `[toolchain] manylinux` sets one)".into(),
    }
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
fn put_decisions(buf: &mut String, pl: &Plan) {
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
    put!(buf, "  knobs       {}", knobs.join(" "));
    let (shown, settings) = split_dropped(&pl.dropped_env);
    for (k, val) in shown {
        put!(buf, "  dropped     {k}={val} (from your environment; the plan decides it)");
    }
    if !settings.is_empty() {
        put!(buf, "  ignored     {}", settings_note(&settings));
    }
    for f in &pl.fixes {
        put!(buf, "  fix         {f}");
    }
    for w in &pl.warnings {
        put!(buf, "  warning     {w}");
    }
}

/// A toolchain found (or made): Python, torch, nvcc, the registry, cross, compilers.
fn put_toolchain(buf: &mut String, t: &toolchain::Toolchain, needs_torch: bool) {
    put!(
        buf,
        "  python      {} ({} {}, {}), torch {}{}",
        t.python.display(),
        t.python_version,
        t.python_tag,
        t.platform,
        t.torch.as_deref().unwrap_or("-"),
        if needs_torch { " (the build imports torch)" } else { "" }
    );
    put!(buf, "  nvcc        {} ({})", t.nvcc_version, t.cuda_home.display());
    if let Some(r) = &t.registry {
        let pick = |n: &str| format!("{n} {}", r.packages.get(n).map(String::as_str).unwrap_or("-"));
        put!(
            buf,
            "  toolchain   registry {} ({} packages: {}, ...)",
            r.root.display(),
            r.packages.len(),
            ["torch", "nvidia-cuda-nvcc", "nvidia-cuda-cccl", "nvidia-nvshmem-cu13"].map(pick).join(", ")
        );
        put!(
            buf,
            "  stub        libcuda.so (soname libcuda.so.1) defining {} driver functions from cuda.h",
            r.stub_symbols
        );
        for n in &r.notes {
            put!(buf, "  note        {n}");
        }
    }
    if let Some(x) = &t.cross {
        put_cross(buf, x);
    }
    for (k, c) in &t.compilers {
        put!(buf, "  {k:<11} {} ({})", c.path.display(), c.version);
    }
}

/// A missing toolchain: what is missing, what the build needs, what would be made.
fn put_missing_toolchain(buf: &mut String, m: &plan::MissingToolchain) {
    put!(buf, "  toolchain   {} MISSING: {}", m.kind, m.missing);
    if let Some(h) = &m.hint {
        put!(buf, "              hint: {h}");
    }
    for n in &m.needs {
        put!(buf, "  build needs {n}");
    }
    if let Some(w) = &m.would_provision {
        let host = if m.cross.is_some() { " (the host side, x86_64)" } else { "" };
        put!(buf, "  would make  {}{host} with Python {}: {}", w.root.display(), w.python, w.torch);
        put!(buf, "              then {}", w.packages.join(" "));
    }
    if let Some(x) = &m.cross {
        put_cross_preview(buf, x);
    }
}

/// The build root and hooks, NCCL reuse, extensions, the command, the cache key, the outputs.
fn put_build(buf: &mut String, pl: &Plan, cached: bool) {
    if let Some(h) = &pl.hooks {
        put!(
            buf,
            "  build root  {} (this user's, one build at a time; the wheel records it as {}; links: {})",
            pl.build_dir().display(),
            canon::CANONICAL_ROOT,
            h.links.iter().map(|(n, t)| format!("{n} -> {}", t.display())).collect::<Vec<_>>().join(", ")
        );
        put!(
        buf,
            "  hooks       nvcc and C++ compiles through sccache {} (per-unit --frandom-seed, -ffile-prefix-map); compiler cache: {}",
            h.sccache_version,
            h.compiler_cache.as_ref().map(|c| c.describe()).unwrap_or_else(|| "off".into())
        );
    }
    if let Some(n) = &pl.nccl_reuse {
        put!(
            buf,
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
        put!(buf, "  extensions  {}", side_by_side::describe(s));
        if let Some(order) = unit_order::describe(&s.first_units, s.order.as_ref()) {
            put!(buf, "  unit order  {order}");
        }
        if let Some(o) = &s.order {
            put!(buf, "  order       {}", unit_order::describe_order(o));
        }
    }
    put!(buf, "  cwd         {}", pl.run.cwd.display());
    put!(buf, "  command     {}", pl.run.argv.join(" "));
    put!(
        buf,
        "  env         {} variables, nothing inherited: {}",
        pl.run.env.len(),
        pl.run.env.keys().cloned().collect::<Vec<_>>().join(" ")
    );
    match &pl.cache_key {
        Some(k) => put!(buf, "  cache key   {k}{}", if cached { " (cached)" } else { "" }),
        None => put!(buf, "  cache key   unknown: {}", pl.cache_key_unknown.as_deref().unwrap_or("-")),
    }
    put!(buf, "  output      {}  log {}", pl.outputs.out_dir.display(), pl.outputs.log.display());
}

/// What the build compiles against, what the revision needs, and what
/// build-wheel's preflight will stop on.
/// `exact, unpatched`, or each source patch with its sha256, its files and, loudly, any build file it changes.
fn put_patches(buf: &mut String, set: &[forge_wheel::provenance::SourcePatch]) {
    put!(buf, "  patches     {}", forge_model::patches::describe(set));
    for (n, p) in set.iter().enumerate() {
        put!(buf, "  patch {:<5} {} sha256 {} touches {}", n + 1, p.name, p.sha256, p.files.join(", "));
        for f in &p.build_files {
            put!(buf, "  BUILD FILE  {} changes {f}: it changes how DeepEP builds; review it as build code", p.name);
        }
    }
}

fn put_environment(buf: &mut String, pl: &Plan) {
    if let Some(e) = &pl.environment {
        let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let abi = match e.torch_cxx11_abi {
            Some(true) => " (C++11 ABI)",
            Some(false) => " (pre-C++11 ABI)",
            None => "",
        };
        put!(
            buf,
            "  found       torch {}{abi}, CUDA {}, NVSHMEM {}, NCCL {}",
            or(&e.torch),
            or(&e.cuda),
            or(&e.nvshmem),
            or(&e.nccl)
        );
        for (lib, f) in &pl.environment_from {
            put!(buf, "              {lib} read from {f}");
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
        put!(buf, "  needs       {}", needed.join("; "));
        for ev in &n.evidence {
            put!(buf, "              {ev}");
        }
    }
    put_unstated(buf, pl, n);
    put_requires(buf, pl);
    for g in preflight::environment_gaps(pl) {
        put!(buf, "  preflight   STOP (build-wheel exits 3): {}", g.what);
        put!(buf, "              fix: {}", g.fix);
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
fn put_unstated(buf: &mut String, pl: &Plan, n: &forge_wheel::provenance::RuntimeNeeds) {
    let links_nvshmem = n.nvshmem_same || pl.interface.branch == forge_model::interface::Branch::Main;
    let mut unstated = Vec::new();
    if n.torch_min.is_none() {
        unstated.push("torch");
    }
    if n.nvshmem_min.is_none() && links_nvshmem {
        unstated.push("NVSHMEM");
    }
    if !unstated.is_empty() {
        put!(
            buf,
            "  no minimum  {}: none stated in {} at this revision (none taken)",
            unstated.join(", "),
            forge_model::interface::STATING.join(", ")
        );
    }
    for u in &n.unread {
        put!(buf, "  unread      {u}");
    }
}

/// The wheel's run-time requirements (`Requires-Dist`) and what is not one.
fn put_requires(buf: &mut String, pl: &Plan) {
    let Some(d) = &pl.requires_dist else { return };
    let r = &d.requires;
    if r.enabled && r.requires.is_empty() && r.notes.is_empty() {
        return;
    }
    let lines: Vec<String> = r.requires.iter().map(|q| q.line()).collect();
    let shown = if lines.is_empty() { "none".to_string() } else { lines.join(", ") };
    let off = if r.enabled { "" } else { " (not written: runtime_requires = false)" };
    let from = if d.source == "installed" { "" } else { " (from what the registry toolchain would provision)" };
    put!(buf, "  requires    {shown}{off}{from}");
    for q in &r.requires {
        put!(buf, "              {}: {}", q.line(), q.why);
    }
    for n in &r.notes {
        put!(buf, "              note: {n}");
    }
}
