//! `probe --run`: topology discovery and a dispatch/combine kernel on this
//! machine's GPUs (one process driving all, or one process per GPU through a
//! launcher), judged against the topology request and the wheel's facts.
//! Owns the runtime verdict rules; must not read wheels itself: `probe` hands
//! it the static facts and rows in an [`Input`], computed once. Must not edit
//! the request, and does not import `probe`.
pub mod deep_ep;
pub mod engine;
pub mod gpu;
pub mod nvml;
pub mod rendezvous;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use engine::{Link, RankReport, Shape};
use forge_model::topology::Request;
use forge_model::verdict::{BinaryFacts, Check, Verdict};
use forge_os::error::Failure;
use gpu::{Discovery, Gpu};
use rendezvous::{Comm, Ranks, Rendezvous};

/// How the round trip runs: `probe --run`'s flags, turned into this plain
/// request by the CLI and checked ([`Run::check`]) before anything runs.
#[derive(Debug, Clone)]
pub struct Run {
    /// Tokens per GPU.
    pub tokens: u32,
    /// Hidden size in bf16 elements (a positive multiple of 8).
    pub hidden: u32,
    /// Experts per token (1..=16).
    pub topk: u32,
    /// Timed repetitions.
    pub iters: u32,
    /// Blocks of 512 threads per multiprocessor.
    pub blocks_per_sm: u32,
    /// Where the processes of a launched job meet (`--rendezvous`).
    pub rendezvous: Option<String>,
    /// Seconds any rank waits for another.
    pub timeout: u64,
    /// Also run the installed deep_ep's own round trip.
    pub deep_ep: bool,
}

impl Run {
    /// The ranges clap does not check, before anything is read or run (exit 2).
    pub fn check(&self) -> Result<()> {
        if self.hidden == 0 || !self.hidden.is_multiple_of(8) {
            forge_os::bail_usage!(
                "--hidden {} must be a positive multiple of 8 (rows move as 16-byte vectors)",
                self.hidden
            );
        }
        if !(1..=16).contains(&self.topk) {
            forge_os::bail_usage!("--topk {} must be between 1 and 16", self.topk);
        }
        if self.tokens == 0 || self.iters == 0 || self.timeout == 0 || self.blocks_per_sm == 0 {
            forge_os::bail_usage!("--tokens, --iters, --blocks-per-sm and --timeout must be positive");
        }
        Ok(())
    }
}

/// What `probe` hands the runtime probe: its flags, the resolved request, and
/// the static facts and verdict rows of `--wheel`/`--python` (computed once).
/// What `--record` does with rank 0's verdict.
pub type Record<'a> = dyn Fn(&Verdict) -> Result<()> + 'a;

pub struct Input<'a> {
    pub run: Run,
    /// The Python whose deep_ep `--deep-ep` runs (`--python`).
    pub python: Option<std::path::PathBuf>,
    pub request: Option<Request>,
    pub binary: Option<BinaryFacts>,
    /// The static probe's rows; an error there becomes a warning row.
    pub static_checks: Option<std::result::Result<Vec<Check>, String>>,
    /// Keeps rank 0's verdict (`probe --record`) before it is printed.
    pub record: Option<&'a Record<'a>>,
}

/// The runtime verdict: rank 0's (or the one process's), None on the other
/// ranks of a launched job. Prints nothing (the command prints the verdict,
/// with [`render_links`] under it for people).
pub fn run(args: &Input) -> Result<Option<Verdict>> {
    let started = Instant::now();
    let ra = &args.run;
    let request = args.request.clone();
    let env = |k: &str| forge_os::environ::var(k);
    let ranks = rendezvous::detect(env)?.filter(|r| r.world > 1);
    let how = match &ranks {
        Some(_) => Some(Rendezvous::choose(ra.rendezvous.as_deref(), env)?),
        None => None,
    };
    let shape =
        Shape { tokens: ra.tokens, hidden: ra.hidden, topk: ra.topk, iters: ra.iters, blocks_per_sm: ra.blocks_per_sm };
    let binary = args.binary.clone();
    let _guard = forge_os::error::Cooperative::enter();
    let outcome = match (ranks, how) {
        (Some(r), Some(how)) => multi(args, &r, &how, shape, request.clone(), binary.as_ref(), started)?,
        _ => Some(single(args, shape, request.clone(), binary.as_ref(), started)?),
    };
    let Some(verdict) = outcome else {
        return Ok(None); // not rank 0: rank 0 carries the verdict
    };
    if let Some(record) = args.record {
        record(&verdict)?;
    }
    Ok(Some(verdict))
}

/// The kernel group's link matrix for people: per ordered pair the copy kernel's
/// and the copy engine's GB/s when timed alone, else P2P access (performance
/// rank), `-` without P2P. From `facts` (kernel_group, p2p, bandwidth.pairs);
/// None for a verdict without a kernel group of two GPUs (a static one). Only
/// numbers reach it: GPU ordinals and GB/s.
pub fn render_links(facts: &serde_json::Value) -> Option<String> {
    let group: Vec<i64> = facts["kernel_group"].as_array()?.iter().filter_map(|g| g.as_i64()).collect();
    if group.len() < 2 {
        return None;
    }
    let p2p = facts["p2p"].as_array().cloned().unwrap_or_default();
    let access = |a: i64, b: i64| {
        p2p.iter()
            .find(|p| p["from"].as_i64() == Some(a) && p["to"].as_i64() == Some(b))
            .map(|p| (p["access"].as_bool().unwrap_or(false), p["performance_rank"].as_i64().unwrap_or(0)))
    };
    let pairs = facts["bandwidth"]["pairs"].as_array().cloned().unwrap_or_default();
    let measured = |i: usize, j: usize| {
        pairs.iter().find(|p| p["src"].as_u64() == Some(i as u64) && p["dst"].as_u64() == Some(j as u64)).map(|p| {
            format!(
                "{:.0}/{:.0}",
                p["kernel_gbps"].as_f64().unwrap_or(0.0),
                p["copy_engine_gbps"].as_f64().unwrap_or(0.0)
            )
        })
    };
    let mut cells = vec![vec![String::new(); group.len()]; group.len()];
    for (i, &a) in group.iter().enumerate() {
        for (j, &b) in group.iter().enumerate() {
            cells[i][j] = if i == j {
                "X".into()
            } else if let Some(m) = measured(i, j) {
                m
            } else {
                match access(a, b) {
                    Some((true, r)) => format!("p2p r{r}"),
                    Some((false, _)) => "-".into(),
                    None => "?".into(),
                }
            };
        }
    }
    let w = cells.iter().flatten().map(|c| c.len()).max().unwrap_or(1).max(5);
    let mut out = String::from(if pairs.is_empty() {
        "links (P2P access, performance rank):\n"
    } else {
        "links (each ordered pair alone, GB/s: copy kernel / copy engine; row sends to column):\n"
    });
    out.push_str(&format!("  {:>6}", ""));
    for &b in &group {
        out.push_str(&format!("  {:>w$}", format!("GPU{b}")));
    }
    out.push('\n');
    for (i, &a) in group.iter().enumerate() {
        out.push_str(&format!("  {:>6}", format!("GPU{a}")));
        for c in &cells[i] {
            out.push_str(&format!("  {c:>w$}"));
        }
        out.push('\n');
    }
    Some(out)
}

/// Timings of one probe, for `facts.timings_ms`.
#[derive(Default)]
struct Timings {
    discover: f64,
    nvrtc: f64,
    roundtrip: f64,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// The largest set of same-arch devices (from device 0 on) that all reach each other.
fn kernel_group(d: &Discovery) -> Vec<i32> {
    let mut group: Vec<i32> = Vec::new();
    for dev in &d.devices {
        if group.len() < engine::MAX_RANKS
            && group.iter().all(|&g| d.peer_access(g, dev.ordinal) && d.peer_access(dev.ordinal, g))
            && group.first().is_none_or(|&g| d.devices[g as usize].sm == dev.sm)
        {
            group.push(dev.ordinal);
        }
    }
    group
}

fn single(
    args: &Input,
    shape: Shape,
    request: Option<Request>,
    binary: Option<&BinaryFacts>,
    started: Instant,
) -> Result<Verdict> {
    gpu::require_libraries()?;
    let mut tm = Timings::default();
    let t0 = Instant::now();
    let disc = gpu::discover()?;
    tm.discover = ms(t0);
    if disc.devices.is_empty() {
        return Err(Failure::env("no CUDA device is visible (the driver loaded but reports 0 GPUs)")
            .hint("check nvidia-smi and CUDA_VISIBLE_DEVICES")
            .into());
    }
    let group = kernel_group(&disc);
    let sm = disc.devices[group[0] as usize].sm;
    let t0 = Instant::now();
    let cubin = gpu::compile(sm)?;
    tm.nvrtc = ms(t0);
    let t0 = Instant::now();
    let gpus = group.iter().map(|&o| Gpu::open(o, &cubin)).collect::<Result<Vec<_>>>()?;
    let reports = engine::roundtrip(gpus, &mut Link::Local, shape)?;
    tm.roundtrip = ms(t0);
    let deep_ep = if args.run.deep_ep {
        Some(deep_ep::run(args.python.as_deref(), group.len() as u32, args.run.timeout, &named_libraries(args)))
    } else {
        None
    };
    let hosts = vec![hostname()];
    Ok(judge(
        request,
        binary,
        args,
        &disc,
        &group,
        &hosts,
        None,
        shape,
        &reports,
        deep_ep.as_ref(),
        tm,
        started,
        std::slice::from_ref(&disc),
    ))
}

/// One process per GPU. Returns the verdict on rank 0, None elsewhere.
fn multi(
    args: &Input,
    ranks: &Ranks,
    how: &Rendezvous,
    shape: Shape,
    request: Option<Request>,
    binary: Option<&BinaryFacts>,
    started: Instant,
) -> Result<Option<Verdict>> {
    let timeout = Duration::from_secs(args.run.timeout);
    let mut comm = Comm::connect(how, ranks.rank, ranks.world, timeout)
        .with_context(|| format!("rank {} of {} ({})", ranks.rank, ranks.world, ranks.launcher))?;
    let body = multi_body(args, ranks, &mut comm, shape, request, binary, started);
    if let Err(e) = &body {
        // Tell the others at once (a no-op when the connection is already gone).
        comm.abort(&format!("{e:#}"));
    }
    body.with_context(|| format!("rank {} of {} ({})", ranks.rank, ranks.world, ranks.launcher))
}

fn multi_body(
    args: &Input,
    ranks: &Ranks,
    comm: &mut Comm,
    shape: Shape,
    request: Option<Request>,
    binary: Option<&BinaryFacts>,
    started: Instant,
) -> Result<Option<Verdict>> {
    // Every rank says whether it has a driver, so a missing one is reported once, by number.
    let present = gpu::require_libraries();
    let mine = match &present {
        Ok(()) => Vec::new(),
        Err(e) => format!("{e:#}").into_bytes(),
    };
    let all = comm.allgather("the driver check", &mine)?;
    let missing: Vec<String> =
        all.iter().enumerate().filter(|(_, m)| !m.is_empty()).map(|(r, _)| r.to_string()).collect();
    if !missing.is_empty() {
        let first = String::from_utf8_lossy(all.iter().find(|m| !m.is_empty()).expect("one is missing"));
        return Err(Failure::env(format!("no CUDA on rank(s) {}: {first}", missing.join(", ")))
            .hint("run `probe --run` where every rank has an NVIDIA GPU and its driver")
            .into());
    }
    let mut tm = Timings::default();
    let t0 = Instant::now();
    let disc = gpu::discover()?;
    tm.discover = ms(t0);
    let ordinal = ranks.local_rank as i32;
    if ordinal as usize >= disc.devices.len() {
        return Err(Failure::env(format!(
            "rank {} has local rank {} but sees only {} GPU(s)",
            ranks.rank,
            ranks.local_rank,
            disc.devices.len()
        ))
        .hint("start one process per visible GPU on each host")
        .into());
    }
    let me = json!({"host": hostname(), "discovery": disc});
    let all = comm.allgather("the discovery exchange", &serde_json::to_vec(&me)?)?;
    let all: Vec<serde_json::Value> = all.iter().map(|b| serde_json::from_slice(b)).collect::<Result<_, _>>()?;
    let hosts: Vec<String> = all.iter().map(|v| v["host"].as_str().unwrap_or("?").to_string()).collect();
    let discs: Vec<Discovery> =
        all.iter().map(|v| serde_json::from_value(v["discovery"].clone())).collect::<Result<_, _>>()?;
    let one_host = hosts.iter().all(|h| *h == hosts[0]);
    let reports = if one_host {
        let t0 = Instant::now();
        let cubin = gpu::compile(disc.devices[ordinal as usize].sm)?;
        tm.nvrtc = ms(t0);
        let t0 = Instant::now();
        let g = Gpu::open(ordinal, &cubin)?;
        let r = engine::roundtrip(vec![g], &mut Link::Procs(comm), shape)?;
        tm.roundtrip = ms(t0);
        r
    } else {
        Vec::new()
    };
    if ranks.rank != 0 {
        return Ok(None);
    }
    let group: Vec<i32> = (0..ranks.world as i32).collect();
    Ok(Some(judge(
        request,
        binary,
        args,
        &disc,
        &group,
        &hosts,
        Some(ranks),
        shape,
        &reports,
        None,
        tm,
        started,
        &discs,
    )))
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } != 0 {
        return "?".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Aggregate bandwidth of one phase: all ranks' crossing bytes over the slowest rank's time.
fn gbps(reports: &[RankReport], iters: u32, ms_of: impl Fn(&RankReport) -> f64) -> f64 {
    let bytes: u64 = reports.iter().map(|r| r.cross_bytes).sum::<u64>() * iters as u64;
    let ms = reports.iter().map(&ms_of).fold(0.0, f64::max);
    if ms > 0.0 {
        bytes as f64 / (ms * 1e-3) / 1e9
    } else {
        0.0
    }
}

/// One ordered pair's bandwidth, timed alone (facts.bandwidth.pairs).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PairRow {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub kernel_gbps: f64,
    pub copy_engine_gbps: f64,
    pub ratio: f64,
}

fn pair_rows(reports: &[RankReport], iters: u32) -> Vec<PairRow> {
    let mut rows: Vec<PairRow> = reports
        .iter()
        .flat_map(|r| &r.pairs)
        .map(|p| {
            let (k, e) = (p.gbps(iters, p.kernel_ms), p.gbps(iters, p.copy_engine_ms));
            PairRow {
                src: p.src,
                dst: p.dst,
                bytes: p.bytes,
                kernel_gbps: k,
                copy_engine_gbps: e,
                ratio: if e > 0.0 { k / e } else { 0.0 },
            }
        })
        .collect();
    rows.sort_by_key(|r| (r.src, r.dst));
    rows
}

/// Every ordered pair alone: a link far slower than the others is a warning
/// (a degraded NVLink, or a pair routed over PCIe).
fn pair_check(rows: &[PairRow]) -> Check {
    if rows.is_empty() {
        return Check::skip("pair-bandwidth", "no pairs timed");
    }
    let stats = |f: &dyn Fn(&PairRow) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        (v[0], v[v.len() / 2], v[v.len() - 1])
    };
    let (kmin, kmed, kmax) = stats(&|r| r.kernel_gbps);
    let (emin, emed, emax) = stats(&|r| r.copy_engine_gbps);
    let (rmin, _, _) = stats(&|r| r.ratio);
    let summary = format!(
        "{} ordered pairs, one at a time, {:.0} MiB each: copy kernel {kmin:.0}/{kmed:.0}/{kmax:.0} GB/s (min/median/max), copy engine {emin:.0}/{emed:.0}/{emax:.0} GB/s, lowest ratio {rmin:.2}x",
        rows.len(),
        rows[0].bytes as f64 / 1048576.0
    );
    let slow: Vec<String> = rows
        .iter()
        .filter(|r| r.copy_engine_gbps < 0.5 * emed || r.kernel_gbps < 0.5 * kmed)
        .map(|r| format!("{}->{} ({:.0}/{:.0} GB/s)", r.src, r.dst, r.kernel_gbps, r.copy_engine_gbps))
        .collect();
    if slow.is_empty() {
        Check::pass("pair-bandwidth", summary)
    } else {
        Check::warn("pair-bandwidth", format!("{summary}; below half the median: {}", slow.join(", ")))
            .fix("check `nvidia-smi topo -m` and `nvidia-smi nvlink -s` for these GPUs")
    }
}

/// Everything the runtime verdict is judged from.
struct Judged<'a> {
    request: Option<&'a Request>,
    binary: Option<&'a BinaryFacts>,
    args: &'a Input<'a>,
    disc: &'a Discovery,
    group: &'a [i32],
    hosts: &'a [String],
    ranks: Option<&'a Ranks>,
    shape: Shape,
    reports: &'a [RankReport],
    deep_ep: Option<&'a deep_ep::Outcome>,
    discs: &'a [Discovery],
}

/// One runtime rule: its id (docs/probe-run.md) and its rows.
type RuntimeRule = (&'static str, fn(&Judged) -> Vec<Check>);

/// Every runtime rule, in the order the verdict shows them; the static
/// probe's rows for --wheel/--python follow.
const RUNTIME_RULES: [RuntimeRule; 12] = [
    ("cuda-devices", cuda_devices),
    ("gpu-arch", gpu_arch),
    ("request-gpu", request_gpu),
    ("nvlink-domain", nvlink_domain),
    ("gpus-per-node", gpus_per_node),
    ("mnnvl", mnnvl),
    ("dispatch-roundtrip", dispatch_roundtrip),
    ("expert-counts", expert_counts),
    ("bandwidth", bandwidth),
    ("pair-bandwidth", pair_bandwidth),
    ("deep-ep-roundtrip", deep_ep_roundtrip),
    ("static-probe", static_probe),
];

#[allow(clippy::too_many_arguments)]
fn judge(
    request: Option<Request>,
    binary: Option<&BinaryFacts>,
    args: &Input,
    disc: &Discovery,
    group: &[i32],
    hosts: &[String],
    ranks: Option<&Ranks>,
    shape: Shape,
    reports: &[RankReport],
    deep_ep: Option<&deep_ep::Outcome>,
    tm: Timings,
    started: Instant,
    discs: &[Discovery],
) -> Verdict {
    let subject = match ranks {
        Some(r) => format!("{} ranks on {} ({})", r.world, hosts[0], r.launcher),
        None => format!("{} GPU(s) on {}", disc.devices.len(), hosts[0]),
    };
    let mut v = Verdict::new(subject, request.clone());
    let j =
        Judged { request: request.as_ref(), binary, args, disc, group, hosts, ranks, shape, reports, deep_ep, discs };
    for (_, rule) in RUNTIME_RULES {
        v.checks.extend(rule(&j));
    }
    let bw = match bandwidth_of(&j) {
        Some(b) => json!({"dispatch_gbps": b.d, "combine_gbps": b.c, "copy_engine_gbps": b.e,
               "dispatch_ratio": b.d / b.e, "combine_ratio": b.c / b.e, "bytes_per_phase": b.bytes,
               "iters": shape.iters, "summary": b.summary, "pairs": pair_rows(reports, shape.iters)}),
        None => serde_json::Value::Null,
    };
    v.facts = json!({
        "mode": if ranks.is_some() { "multi-process" } else { "single-process" },
        "ranks": ranks,
        "hosts": hosts,
        "driver": disc.driver,
        "devices": disc.devices,
        "p2p": disc.p2p,
        "rank_devices": if ranks.is_some() { serde_json::to_value(discs).unwrap_or_default() } else { serde_json::Value::Null },
        "kernel_group": group,
        "shape": shape,
        "roundtrip": reports,
        "bandwidth": bw,
        "binary": binary,
        "deep_ep": deep_ep,
        "timings_ms": {"discover": tm.discover, "nvrtc": tm.nvrtc, "roundtrip": tm.roundtrip, "total": ms(started)},
    });
    v
}

/// `cuda-devices`: what the driver shows.
fn cuda_devices(j: &Judged) -> Vec<Check> {
    let (disc, mut v) = (j.disc, Vec::new());
    let devs = &disc.devices;
    let d0 = &devs[0];
    v.push(Check::pass(
        "cuda-devices",
        format!(
            "{} x {} (sm_{}, {} GiB), driver API {}",
            devs.len(),
            d0.name,
            d0.sm,
            d0.memory_bytes >> 30,
            disc.driver
        ),
    ));

    v
}

/// `gpu-arch`: the wheel's cubins against the devices.
fn gpu_arch(j: &Judged) -> Vec<Check> {
    let (discs, binary, mut v) = (j.discs, j.binary, Vec::new());
    let sms: std::collections::BTreeSet<u32> = discs.iter().flat_map(|d| d.devices.iter().map(|x| x.sm)).collect();
    match binary {
        None => v.push(Check::skip("gpu-arch", "no --wheel/--python given: the binary's arch list is unknown")),
        Some(b) => {
            for sm in &sms {
                if b.cubin_sms.contains(sm) {
                    v.push(Check::pass("gpu-arch", format!("{} has a sm_{sm} cubin for these GPUs", b.subject)));
                } else if b.ptx_sms.iter().any(|p| p <= sm) {
                    v.push(Check::warn(
                        "gpu-arch",
                        format!("{}: no sm_{sm} cubin, only PTX (JIT at first use)", b.subject),
                    ));
                } else {
                    v.push(
                        Check::fail(
                            "gpu-arch",
                            format!("{} has cubins for {:?} but these GPUs are sm_{sm}", b.subject, b.cubin_sms),
                        )
                        .fix(format!(
                            "rebuild with TORCH_CUDA_ARCH_LIST including \"{}.{}\"",
                            sm / 10,
                            sm % 10
                        )),
                    );
                }
            }
        }
    }
    v
}

/// `request-gpu`: the requested GPU kind against the devices.
fn request_gpu(j: &Judged) -> Vec<Check> {
    let (req, mut v) = (j.request, Vec::new());
    let sms = sms_of(j.discs);
    if let Some(g) = req.and_then(|r| r.gpu) {
        if sms.iter().all(|&s| s == g.sm()) {
            v.push(Check::pass("request-gpu", format!("requested {g} (sm_{}) matches the devices", g.sm())));
        } else {
            v.push(Check::fail("request-gpu", format!("requested {g} (sm_{}) but the devices are {:?}", g.sm(), sms)));
        }
    }

    v
}

/// `nvlink-domain`: R against the GPUs that see each other.
fn nvlink_domain(j: &Judged) -> Vec<Check> {
    let (req, group, ranks, mut v) = (j.request, j.group, j.ranks, Vec::new());
    // R against the GPUs that see each other.
    let domain = group.len() as u32;
    let how_seen = if ranks.is_some() {
        "ranks that opened each other's memory (CUDA IPC)"
    } else {
        "GPUs with P2P access to each other"
    };
    match req.and_then(|r| r.ranks_per_domain) {
        None => v.push(Check::skip("nvlink-domain", format!("R not requested; {domain} {how_seen}"))),
        Some(r) if r <= domain => {
            v.push(Check::pass("nvlink-domain", format!("R = {r} fits the {domain} {how_seen}")))
        }
        Some(r) if req.and_then(|q| q.mnnvl) == Some(true) => v.push(Check::warn(
            "nvlink-domain",
            format!("R = {r} > the {domain} {how_seen} here; the rest must come over MNNVL (only a run across nodes proves it)"),
        )),
        Some(r) => v.push(
            Check::fail("nvlink-domain", format!("R = {r} but only {domain} {how_seen}"))
                .fix(format!("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={domain} (--ranks-per-domain {domain})")),
        ),
    }
    v
}

/// `gpus-per-node`: the request against this node.
fn gpus_per_node(j: &Judged) -> Vec<Check> {
    let (req, ranks, hosts, devs, mut v) = (j.request, j.ranks, j.hosts, &j.disc.devices, Vec::new());
    if let Some(n) = req.and_then(|r| r.gpus_per_node) {
        let here =
            if ranks.is_some() { hosts.iter().filter(|h| **h == hosts[0]).count() as u32 } else { devs.len() as u32 };
        if n == here {
            v.push(Check::pass("gpus-per-node", format!("{here} GPUs per node as requested")));
        } else {
            v.push(Check::warn(
                "gpus-per-node",
                format!("requested {n} GPUs per node, this node has {here} in the probe"),
            ));
        }
    }
    v
}

/// `mnnvl`: MNNVL requested against the GPUs' fabric handles.
fn mnnvl(j: &Judged) -> Vec<Check> {
    let (req, discs, mut v) = (j.request, j.discs, Vec::new());
    let fabric = discs.iter().all(|d| d.devices.iter().all(|x| x.fabric_handles));
    match req.and_then(|r| r.mnnvl) {
        Some(true) if fabric => v.push(Check::pass("mnnvl", "MNNVL requested; every GPU supports fabric handles")),
        Some(true) => v.push(
            Check::fail("mnnvl", "MNNVL requested but these GPUs do not support fabric handles (no multi-node NVLink)")
                .fix("USE_MNNVL=0 (--no-mnnvl) and R <= GPUs per node"),
        ),
        _ => v.push(Check::skip(
            "mnnvl",
            format!("not requested; fabric handles {}", if fabric { "supported" } else { "not supported" }),
        )),
    }

    v
}

/// SM numbers of every device of every rank.
fn sms_of(discs: &[Discovery]) -> std::collections::BTreeSet<u32> {
    discs.iter().flat_map(|d| d.devices.iter().map(|x| x.sm)).collect()
}

/// `dispatch-roundtrip`: combine(dispatch(x)) == 2x on every rank (not run across hosts).
fn dispatch_roundtrip(j: &Judged) -> Vec<Check> {
    let (reports, shape) = (j.reports, j.shape);
    if reports.is_empty() {
        let mut h = j.hosts.to_vec();
        h.sort();
        h.dedup();
        return vec![Check::warn(
            "dispatch-roundtrip",
            format!("not run: the ranks span {} hosts (CUDA IPC works within one host)", h.len()),
        )];
    }
    let bad_d: u64 = reports.iter().map(|r| r.dispatch_mismatches).sum();
    let bad_c: u64 = reports.iter().map(|r| r.combine_mismatches).sum();
    let what = format!(
        "{} ranks, {} tokens x {} bf16 each, top-{} of {} experts",
        reports.len(),
        shape.tokens,
        shape.hidden,
        shape.topk,
        shape.topk as usize * reports.len()
    );
    vec![if bad_d == 0 && bad_c == 0 {
        Check::pass("dispatch-roundtrip", format!("combine(dispatch(x)) == 2x exactly; {what}"))
    } else {
        Check::fail("dispatch-roundtrip", format!("{bad_d} dispatched and {bad_c} combined elements wrong; {what}"))
    }]
}

/// `expert-counts`: per-expert counts and rows sent match the routing's host mirror.
fn expert_counts(j: &Judged) -> Vec<Check> {
    let reports = j.reports;
    if reports.is_empty() {
        return Vec::new();
    }
    let wrong: Vec<String> = reports
        .iter()
        .filter(|r| r.expert_counts != r.expected_expert_counts || r.sent_rows != r.expected_sent_rows)
        .map(|r| {
            format!(
                "rank {}: experts {:?} expected {:?}, rows {:?} expected {:?}",
                r.rank, r.expert_counts, r.expected_expert_counts, r.sent_rows, r.expected_sent_rows
            )
        })
        .collect();
    vec![if wrong.is_empty() {
        let total: i64 = reports.iter().flat_map(|r| r.expert_counts.iter()).sum();
        Check::pass("expert-counts", format!("per-expert counts match the routing ({total} token-expert pairs)"))
    } else {
        Check::fail("expert-counts", wrong.join("; "))
    }]
}

/// The all-GPUs-at-once bandwidth figures (None without a round trip or with one GPU).
struct Bandwidth {
    d: f64,
    c: f64,
    e: f64,
    bytes: u64,
    summary: String,
}

fn bandwidth_of(j: &Judged) -> Option<Bandwidth> {
    let (reports, iters) = (j.reports, j.shape.iters);
    let bytes: u64 = reports.iter().map(|r| r.cross_bytes).sum();
    if reports.is_empty() || bytes == 0 {
        return None;
    }
    let d = gbps(reports, iters, |r| r.dispatch_ms);
    let c = gbps(reports, iters, |r| r.combine_ms);
    let e = gbps(reports, iters, |r| r.copy_engine_ms);
    let summary = format!(
        "dispatch {d:.0} GB/s ({:.2}x), combine {c:.0} GB/s ({:.2}x), copy engine {e:.0} GB/s; all {} GPUs sending at once, {:.0} MiB crossing per phase",
        d / e,
        c / e,
        reports.len(),
        bytes as f64 / 1048576.0
    );
    Some(Bandwidth { d, c, e, bytes, summary })
}

/// `bandwidth`: dispatch and combine against the copy engine, all GPUs at once.
fn bandwidth(j: &Judged) -> Vec<Check> {
    if j.reports.is_empty() {
        return Vec::new();
    }
    vec![match bandwidth_of(j) {
        None => Check::skip("bandwidth", "one GPU: nothing crosses between GPUs"),
        Some(b) if b.d / b.e < 0.5 || b.c / b.e < 0.5 => {
            Check::warn("bandwidth", format!("{}: far below the copy engine", b.summary))
        }
        Some(b) => Check::pass("bandwidth", b.summary),
    }]
}

/// `pair-bandwidth`: each ordered pair alone (with a bandwidth row only).
fn pair_bandwidth(j: &Judged) -> Vec<Check> {
    match bandwidth_of(j) {
        Some(_) => vec![pair_check(&pair_rows(j.reports, j.shape.iters))],
        None => Vec::new(),
    }
}

/// `deep-ep-roundtrip`: the wheel's own HybridEP round trip (`--deep-ep`).
fn deep_ep_roundtrip(j: &Judged) -> Vec<Check> {
    match j.deep_ep {
        Some(o) => vec![o.check()],
        None if j.args.run.deep_ep => vec![Check::skip(
            "deep-ep-roundtrip",
            "not run under a launcher: run `probe --run --deep-ep` as one process, it starts one Python per GPU",
        )],
        None => Vec::new(),
    }
}

/// The static probe's rows for --wheel/--python (`static-probe` when it could not run).
fn static_probe(j: &Judged) -> Vec<Check> {
    match &j.args.static_checks {
        Some(Ok(rows)) => rows.clone(),
        Some(Err(e)) => vec![Check::warn("static-probe", e.clone())],
        None => Vec::new(),
    }
}

/// The static probe's failures that predict a failed import (an NCCL or
/// NVSHMEM that is not the build's, by dist-info or by the library the
/// process would load; another torch ABI), for `--deep-ep` to repeat.
fn named_libraries(args: &Input) -> Vec<String> {
    const RULES: [&str; 4] = ["loaded-libraries", "nccl-version", "nvshmem-version", "torch-abi"];
    let Some(Ok(checks)) = &args.static_checks else { return Vec::new() };
    checks
        .iter()
        .filter(|c| RULES.contains(&c.rule.as_str()) && c.status == forge_model::verdict::Status::Fail)
        .map(|c| format!("{}: {}", c.rule, c.evidence))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(src: u32, dst: u32, kernel_ms: f64, copy_engine_ms: f64) -> engine::PairReport {
        engine::PairReport { src, dst, bytes: 1 << 28, kernel_ms, copy_engine_ms }
    }

    fn report(rank: u32, pairs: Vec<engine::PairReport>) -> RankReport {
        RankReport {
            rank,
            gpu: rank as i32,
            sent_rows: vec![],
            expected_sent_rows: vec![],
            expert_counts: vec![],
            expected_expert_counts: vec![],
            dispatch_mismatches: 0,
            combine_mismatches: 0,
            cross_bytes: 0,
            dispatch_ms: 1.0,
            combine_ms: 1.0,
            copy_engine_ms: 1.0,
            pairs,
        }
    }

    #[test]
    fn pair_bandwidth_is_bytes_over_time_and_a_slow_link_is_named() {
        // 256 MiB x 20 in 14.0 ms = 383 GB/s.
        let even = vec![
            report(0, vec![pair(0, 1, 14.0, 13.0), pair(0, 2, 14.0, 13.0)]),
            report(1, vec![pair(1, 0, 14.0, 13.0), pair(1, 2, 14.0, 13.0)]),
            report(2, vec![pair(2, 0, 14.0, 13.0), pair(2, 1, 14.0, 13.0)]),
        ];
        let rows = pair_rows(&even, 20);
        assert_eq!(rows.len(), 6);
        assert_eq!((rows[0].src, rows[0].dst), (0, 1));
        assert!((rows[0].kernel_gbps - (20u64 << 28) as f64 / 0.014 / 1e9).abs() < 1e-6);
        assert!((rows[0].ratio - 13.0 / 14.0).abs() < 1e-9);
        let c = pair_check(&rows);
        assert_eq!(c.status, forge_model::verdict::Status::Pass, "{}", c.evidence);
        assert!(c.evidence.starts_with("6 ordered pairs, one at a time, 256 MiB each"), "{}", c.evidence);

        // One link three times slower (PCIe instead of NVLink): warned by name.
        let mut slow = even.clone();
        slow[2].pairs[1] = pair(2, 1, 42.0, 39.0);
        let c = pair_check(&pair_rows(&slow, 20));
        assert_eq!(c.status, forge_model::verdict::Status::Warn, "{}", c.evidence);
        assert!(c.evidence.contains("below half the median: 2->1"), "{}", c.evidence);
        assert_eq!(pair_check(&[]).status, forge_model::verdict::Status::Skip);
    }

    #[test]
    fn the_link_matrix_shows_measured_pairs_and_p2p_access() {
        let facts = json!({
            "kernel_group": [0, 1, 2],
            "p2p": [{"from": 0, "to": 1, "access": true, "performance_rank": 0},
                    {"from": 1, "to": 0, "access": true, "performance_rank": 0},
                    {"from": 0, "to": 2, "access": false, "performance_rank": 0}],
            "bandwidth": {"pairs": [{"src": 0, "dst": 1, "kernel_gbps": 368.6, "copy_engine_gbps": 394.4}]},
        });
        let m = render_links(&facts).unwrap();
        let lines: Vec<&str> = m.lines().collect();
        assert!(lines[0].starts_with("links (each ordered pair alone"), "{m}");
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["GPU0", "GPU1", "GPU2"]);
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["GPU0", "X", "369/394", "-"]);
        assert_eq!(lines[3].split_whitespace().collect::<Vec<_>>(), ["GPU1", "p2p", "r0", "X", "?"]);
        assert!(render_links(&json!({"kernel_group": [0]})).is_none());
    }
}
