//! The topology rules (docs/design.md, "Topology rules"): one function per rule
//! id, registered in [`HYBRIDEP_RULES`] and [`CLASSIC_RULES`], each judging one
//! concrete request. [`topology_checks`] judges every rule over every value the
//! request admits for what it leaves unknown (`topology::admit`): FAIL when every
//! admissible value fails, WARN naming the values that fail when some do, pass
//! only when none does.
use forge_model::pins::Pins;
use forge_model::topology::{Considered, Input, Request};
use forge_model::verdict::{list_values, Check, Status};

use super::{rebuild, Evidence, MAX_RANKS_PER_DOMAIN, MAX_REMOTE_DOMAINS};

/// What a topology rule sees: one concrete request, the binary's evidence, pins.toml.
pub struct Ctx<'a> {
    pub r: &'a Request,
    pub ev: Option<&'a Evidence>,
    pub pins: Option<&'a Pins>,
}

/// One topology rule: its id, the inputs its status depends on, its judgement.
pub struct TopologyRule {
    pub id: &'static str,
    pub reads: &'static [Input],
    pub judge: fn(&Ctx) -> Check,
}

use Input::{Ep, GpusPerNode, Mnnvl, Ranks};

/// HybridEP's rules, in the order the verdict shows them.
pub const HYBRIDEP_RULES: [TopologyRule; 7] = [
    TopologyRule { id: "ep-divisible", reads: &[Ep, Ranks], judge: ep_divisible },
    TopologyRule { id: "multinode-build", reads: &[Ep, Ranks], judge: multinode_build },
    TopologyRule { id: "ranks-per-domain-max", reads: &[Ranks], judge: ranks_per_domain_max },
    TopologyRule { id: "ranks-per-node", reads: &[Mnnvl, GpusPerNode, Ranks], judge: ranks_per_node },
    TopologyRule { id: "mnnvl-system", reads: &[Mnnvl], judge: mnnvl_system },
    TopologyRule { id: "domains-max", reads: &[Ep, Ranks], judge: domains_max },
    TopologyRule { id: "ep-fits-nodes", reads: &[Ep, GpusPerNode], judge: ep_fits_nodes },
];

/// DeepEP's classic Buffer (`dispatcher: deepep`).
pub const CLASSIC_RULES: [TopologyRule; 2] = [
    TopologyRule { id: "deepep-internode", reads: &[Ep, GpusPerNode], judge: deepep_internode },
    TopologyRule { id: "ep-fits-nodes", reads: &[Ep, GpusPerNode], judge: ep_fits_nodes },
];

/// DeepEP `main` (EPv2: one `deep_ep._C`): no NVLink-domain size R and no MNNVL
/// switch to judge; across nodes it runs the NCCL Gin backend (legacy methods: NVSHMEM).
pub const EPV2_RULES: [TopologyRule; 3] = [
    TopologyRule { id: "epv2-internode", reads: &[Ep, GpusPerNode], judge: epv2_internode },
    TopologyRule { id: "epv2-legacy-internode", reads: &[Ep, GpusPerNode], judge: epv2_legacy_internode },
    TopologyRule { id: "ep-fits-nodes", reads: &[Ep, GpusPerNode], judge: ep_fits_nodes },
];

/// Rules about the request against the binary, and the values considered for
/// what the request leaves unknown.
pub fn topology_checks(r: &Request, ev: Option<&Evidence>, pins: Option<&Pins>) -> (Vec<Check>, Vec<Considered>) {
    let epv2 = ev.is_some_and(|e| e.epv2);
    let (rules, mut out): (&[TopologyRule], Vec<Check>) = match r.dispatcher.as_deref() {
        None | Some("hybridep" | "deepep") if epv2 => (&EPV2_RULES, vec![Check::pass(
            "dispatcher",
            "an EPv2 wheel (DeepEP main, deep_ep._C): EPv2's rules apply (NCCL Gin across nodes); HybridEP's R and MNNVL do not",
        )]),
        None | Some("hybridep") => (&HYBRIDEP_RULES, Vec::new()),
        Some("deepep") => (&CLASSIC_RULES, vec![Check::pass(
            "dispatcher",
            "MoE dispatcher deepep: DeepEP's classic Buffer (deep_ep_cpp); the HybridEP rules do not apply",
        )]),
        Some("automodel-default") => {
            return (vec![Check::warn(
                "dispatcher",
                "the recipe sets no policy.dtensor_cfg.automodel_kwargs.backend.dispatcher: Automodel's default applies, \
                 so whether DeepEP is used is unknown here",
            )], Vec::new())
        }
        Some(d) => {
            return (vec![Check::skip(
                "dispatcher",
                format!("the request uses no HybridEP or DeepEP dispatcher (MoE dispatcher: {d}): topology rules do not apply"),
            )], Vec::new())
        }
    };
    let hybridep = r.dispatcher.as_deref() != Some("deepep") && !epv2;
    let admissible = r.admissible(hybridep);
    let unknown = r.unknown_inputs(hybridep);
    for rule in rules {
        out.push(judge_over(rule, &admissible.scenarios, &unknown, ev, pins));
    }
    (out, admissible.considered)
}

/// One rule over every admissible request: one verdict per distinct value of
/// the unknown inputs the rule reads, then FAIL when all fail, WARN naming the
/// failing values when some do, the common status otherwise.
fn judge_over(
    rule: &TopologyRule,
    scenarios: &[Request],
    unknown: &[Input],
    ev: Option<&Evidence>,
    pins: Option<&Pins>,
) -> Check {
    let shown: Vec<Input> = rule.reads.iter().copied().filter(|i| unknown.contains(i)).collect();
    // The last request of each value wins: the largest of the inputs the rule does not read.
    let mut seen: Vec<(String, Check)> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for s in scenarios {
        let label = label(&shown, s);
        let check = (rule.judge)(&Ctx { r: s, ev, pins });
        match index.get(&label) {
            Some(&i) => seen[i] = (label, check),
            None => {
                index.insert(label.clone(), seen.len());
                seen.push((label, check));
            }
        }
    }
    let first = &seen[0].1;
    if seen.iter().all(|(_, c)| c.status == first.status && c.evidence == first.evidence) {
        return first.clone();
    }
    let of = |st: Status| seen.iter().filter(move |(_, c)| c.status == st);
    let names = |v: Vec<&String>| values_text(&v);
    let fails: Vec<&(String, Check)> = of(Status::Fail).collect();
    let all: Vec<&String> = seen.iter().map(|(l, _)| l).collect();
    if fails.len() == seen.len() {
        let (l, c) = fails[fails.len() - 1];
        let mut out = c.clone();
        out.evidence = format!("fails for {}; e.g. {l}: {}", every(names(all)), c.evidence).into();
        out.fails_for = fails.iter().map(|(l, _)| l.into()).collect();
        return out;
    }
    if !fails.is_empty() {
        let (l, c) = fails[fails.len() - 1];
        let rest: Vec<&String> = seen.iter().filter(|(_, c)| c.status != Status::Fail).map(|(l, _)| l).collect();
        let mut out = Check::warn(
            rule.id,
            format!(
                "fails for {}, not for {}; e.g. {l}: {}",
                names(fails.iter().map(|(l, _)| l).collect()),
                names(rest),
                c.evidence
            ),
        );
        out.fix = c.fix.clone();
        out.fails_for = fails.iter().map(|(l, _)| l.into()).collect();
        return out;
    }
    // No value fails: a warning wins over a pass, a pass over a skip; each named with its values.
    let present: Vec<Status> =
        [Status::Warn, Status::Pass, Status::Skip].into_iter().filter(|st| of(*st).next().is_some()).collect();
    let status = present[0];
    let (l, c) = of(status).next_back().unwrap_or(&seen[0]);
    let word = |st: Status| match st {
        Status::Warn => "not proven",
        Status::Skip => "not applicable",
        _ => "passes",
    };
    let what = if present.len() == 1 {
        format!("{} for {}", word(status), every(names(all)))
    } else {
        present
            .iter()
            .map(|st| format!("{} for {}", word(*st), names(of(*st).map(|(l, _)| l).collect())))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = c.clone();
    out.evidence = format!("{what}; e.g. {l}: {}", c.evidence).into();
    out
}

/// "every admissible value (R 1, 2, 4, 8)", or without the list when it is long
/// (the verdict's `considered` lines name every value).
fn every(values: String) -> String {
    if values.len() <= 60 {
        format!("every admissible value ({values})")
    } else {
        "every admissible value considered".into()
    }
}

/// `R 4`, `MNNVL no · R 8`: the unknown inputs a rule reads, as one value names them
/// (an input that stays unknown, `any`, is left out).
fn label(shown: &[Input], s: &Request) -> String {
    shown
        .iter()
        .map(|i| (i, i.show(s)))
        .filter(|(_, v)| v != "any")
        .map(|(i, v)| format!("{} {v}", i.name()))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// Labels as one list, grouped by all but their last input:
/// `R 1, 2, 4` or `MNNVL no · R 1, 2, 4, 8; MNNVL yes · R 16`.
fn values_text(labels: &[&String]) -> String {
    let mut groups: Vec<(String, Vec<forge_os::line::Line>)> = Vec::new();
    for l in labels.iter().filter(|l| !l.is_empty()) {
        let (prefix, last) = l.rsplit_once(" · ").map(|(p, x)| (format!("{p} · "), x)).unwrap_or((String::new(), l));
        let (name, value) = last.rsplit_once(' ').unwrap_or(("", last));
        let key = format!("{prefix}{name} ");
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(value.into()),
            None => groups.push((key, vec![value.into()])),
        }
    }
    if groups.is_empty() {
        return "the one value left".into();
    }
    let shown: Vec<String> = groups.iter().take(12).map(|(k, v)| format!("{k}{}", list_values(v))).collect();
    match groups.len() {
        n if n > 12 => format!("{}; and {} more", shown.join("; "), n - 12),
        _ => shown.join("; "),
    }
}

fn domains(r: &Request) -> Option<u32> {
    match (r.ep, r.ranks_per_domain) {
        (Some(e), Some(rr)) if rr > 0 => Some(e.div_ceil(rr)),
        _ => None,
    }
}

/// Why D = EP/R is not known.
fn no_domains(r: &Request) -> String {
    match (r.ep, r.ranks_per_domain) {
        (None, _) => "unknown: EP not given".into(),
        (_, None) => "unknown: R not given".into(),
        _ => "unknown: R = 0 ranks per NVLink domain (see ep-divisible)".into(),
    }
}

/// 1. EP must be divisible by R.
pub fn ep_divisible(cx: &Ctx) -> Check {
    match (cx.r.ep, cx.r.ranks_per_domain) {
        (Some(_), Some(0)) => Check::fail("ep-divisible", "R = 0 ranks per NVLink domain"),
        (Some(e), Some(rr)) if e % rr == 0 => Check::pass("ep-divisible", format!("EP {e} is divisible by R {rr}")),
        (Some(e), Some(rr)) => {
            Check::fail("ep-divisible", format!("EP {e} is not divisible by R {rr} (DeepEP asserts it)"))
                .fix("choose NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN dividing the EP size")
        }
        (None, _) => Check::warn("ep-divisible", "unknown: EP not given"),
        _ => Check::warn("ep-divisible", "unknown: R not given"),
    }
}

/// 2. D > 1 NVLink domains needs a HYBRID_EP_MULTINODE=1 build.
pub fn multinode_build(cx: &Ctx) -> Check {
    let (ev, multinode) = (cx.ev, cx.ev.and_then(|e| e.multinode));
    match (domains(cx.r), multinode) {
        (None, _) => Check::warn("multinode-build", no_domains(cx.r)),
        (Some(1), _) => Check::pass("multinode-build", "D = 1 NVLink domain: a single-node build suffices"),
        (Some(d), Some(true)) => Check::pass("multinode-build", format!("D = {d} NVLink domains and the binary is multinode ({})", ev.and_then(|e| e.transport).map(|t| t.as_str()).unwrap_or("?"))),
        (Some(d), Some(false)) => Check::fail("multinode-build", format!(
            "D = EP/R = {d} NVLink domains but the binary is single-node: it aborts with \"Inter-node communication is not supported\""
        ))
        .fix(rebuild(cx.r.gpu, true, cx.pins)),
        (Some(d), None) if ev.is_none() => Check::warn("multinode-build", format!("D = {d} NVLink domains: needs a HYBRID_EP_MULTINODE=1 build (no binary given)")),
        (Some(d), None) => Check::warn("multinode-build", format!("D = {d} NVLink domains but the binary shows no multinode evidence either way")),
    }
}

/// 3. R <= 72 (the largest NVLink domain).
pub fn ranks_per_domain_max(cx: &Ctx) -> Check {
    match cx.r.ranks_per_domain {
        Some(rr) if rr <= MAX_RANKS_PER_DOMAIN => {
            Check::pass("ranks-per-domain-max", format!("R {rr} <= {MAX_RANKS_PER_DOMAIN}"))
        }
        Some(rr) => {
            Check::fail("ranks-per-domain-max", format!("R {rr} > {MAX_RANKS_PER_DOMAIN} (the largest NVLink domain)"))
                .fix("set NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN <= 72")
        }
        None => Check::warn("ranks-per-domain-max", "unknown: R not given"),
    }
}

/// 4. Without MNNVL, R <= GPUs per node.
pub fn ranks_per_node(cx: &Ctx) -> Check {
    match (cx.r.mnnvl, cx.r.ranks_per_domain, cx.r.gpus_per_node) {
        (Some(true), _, _) => Check::skip("ranks-per-node", "MNNVL: an NVLink domain may span nodes"),
        (Some(false), Some(rr), Some(g)) if rr <= g => {
            Check::pass("ranks-per-node", format!("R {rr} <= {g} GPUs per node (no MNNVL)"))
        }
        (Some(false), Some(rr), Some(g)) => Check::fail(
            "ranks-per-node",
            format!("R {rr} > {g} GPUs per node with USE_MNNVL=0: an NVLink domain cannot span nodes without MNNVL"),
        )
        .fix(format!("set NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={g} (and a multinode build if EP > {g})")),
        (None, _, _) => Check::warn("ranks-per-node", "unknown: MNNVL not given"),
        _ => Check::warn("ranks-per-node", "unknown: R or GPUs per node not given"),
    }
}

/// 5. MNNVL only on GB200-class (NVL) systems.
pub fn mnnvl_system(cx: &Ctx) -> Check {
    let r = cx.r;
    match (r.mnnvl, r.gpu.map(|g| (g, g.mnnvl_capable()))) {
        (Some(false), _) => Check::skip("mnnvl-system", "MNNVL not used"),
        (None, _) => Check::warn("mnnvl-system", "unknown: MNNVL not given"),
        (Some(true), Some((g, Some(true)))) => {
            Check::pass("mnnvl-system", format!("{g} systems have multi-node NVLink"))
        }
        (Some(true), Some((g, Some(false)))) => {
            Check::fail("mnnvl-system", format!("USE_MNNVL=1 but {g} systems have no multi-node NVLink")).fix(
                match r.gpus_per_node {
                    Some(n) => format!("set USE_MNNVL=0 and NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={n}"),
                    None => "set USE_MNNVL=0 and R to the GPUs per node".into(),
                },
            )
        }
        (Some(true), _) => Check::warn("mnnvl-system", "unknown: MNNVL on, but no GB200-class GPU named (pass --gpu)"),
    }
}

/// 6. The multinode JIT code allows D - 1 <= 32 remote domains.
pub fn domains_max(cx: &Ctx) -> Check {
    match domains(cx.r) {
        Some(d) if d <= 1 => Check::skip("domains-max", "one NVLink domain"),
        Some(d) if d - 1 <= MAX_REMOTE_DOMAINS => {
            Check::pass("domains-max", format!("D-1 = {} remote domains <= {MAX_REMOTE_DOMAINS}", d - 1))
        }
        Some(d) => Check::fail(
            "domains-max",
            format!("D-1 = {} remote NVLink domains > {MAX_REMOTE_DOMAINS} (multinode JIT limit)", d - 1),
        )
        .fix("use larger NVLink domains (MNNVL) or a smaller EP"),
        None => Check::warn("domains-max", no_domains(cx.r)),
    }
}

/// 7. EP ranks need EP GPUs: nodes x GPUs per node must hold them.
///
/// Products are in u64 (65536 nodes x 65536 GPUs does not wrap to 0). For
/// HybridEP the evidence and fix name the NVLink domains.
pub fn ep_fits_nodes(cx: &Ctx) -> Check {
    let r = cx.r;
    let hybridep = r.dispatcher.as_deref() != Some("deepep") && !cx.ev.is_some_and(|e| e.epv2);
    match (r.ep, r.nodes, r.gpus_per_node) {
        (Some(e), Some(n), Some(g)) if u64::from(e) <= u64::from(n) * u64::from(g) => {
            Check::pass("ep-fits-nodes", format!("EP {e} ranks fit {n} node(s) x {g} GPUs"))
        }
        (Some(e), Some(n), Some(g)) if g > 0 => {
            let need = e.div_ceil(g);
            let have = u64::from(n) * u64::from(g);
            let d = domains(r).filter(|_| hybridep);
            let dtext = d
                .map(|d| format!(" ({d} NVLink domains of R {})", r.ranks_per_domain.unwrap_or(0)))
                .unwrap_or_default();
            let evidence = if hybridep {
                format!("EP {e} ranks need {e} GPUs but {n} node(s) x {g} GPUs have {have}: EP {e}{dtext} needs {need} nodes")
            } else {
                format!("EP {e} ranks need {e} GPUs but {n} node(s) x {g} GPUs have {have}")
            };
            Check::fail("ep-fits-nodes", evidence).fix(format!(
                "run on {need} nodes{}, or lower EP to {have}",
                if d.is_some_and(|d| d > 1) { " with a multinode build" } else { "" },
            ))
        }
        _ => Check::skip("ep-fits-nodes", "nodes or GPUs per node not given"),
    }
}

/// DeepEP's classic Buffer: an EP group that spans nodes runs the internode
/// kernels of deep_ep_cpp, which exist only when it was built with NVSHMEM.
pub fn deepep_internode(cx: &Ctx) -> Check {
    let r = cx.r;
    let spans = match (r.ep, r.gpus_per_node) {
        (Some(e), Some(g)) if g > 0 => Some(e > g),
        _ => None,
    };
    let (ep, gpn) = (r.ep.unwrap_or(0), r.gpus_per_node.unwrap_or(0));
    let fix = || {
        let cmd = rebuild(r.gpu, false, cx.pins);
        format!(
            "rebuild with NVSHMEM linked into deep_ep_cpp: {} --toolchain registry (it installs nvidia-nvshmem), or give the variant an nvshmem_dir",
            cmd.trim_start_matches("rebuild: ")
        )
    };
    match (spans, cx.ev.and_then(|e| e.nvshmem)) {
        (None, _) => Check::warn("deepep-internode", "unknown: EP not given"),
        (Some(false), _) => Check::pass(
            "deepep-internode",
            format!("EP {ep} fits one node of {gpn} GPUs: DeepEP's intranode kernels (NVLink) suffice"),
        ),
        (Some(true), Some(true)) => Check::pass(
            "deepep-internode",
            format!("EP {ep} spans nodes and deep_ep_cpp links NVSHMEM (internode kernels built)"),
        ),
        (Some(true), Some(false)) => Check::fail(
            "deepep-internode",
            format!(
                "EP {ep} spans {} nodes of {gpn} GPUs, but deep_ep_cpp was built without NVSHMEM (DeepEP's setup.py: \"All internode and low-latency features are disabled\"): a Buffer across nodes has no internode kernels to run",
                ep.div_ceil(gpn.max(1)),
            ),
        )
        .fix(fix()),
        (Some(true), None) if cx.ev.is_none() => Check::warn(
            "deepep-internode",
            format!("EP {ep} spans nodes: needs deep_ep_cpp built with NVSHMEM (no binary given)"),
        ),
        (Some(true), None) => Check::warn(
            "deepep-internode",
            format!("EP {ep} spans nodes, and the binary has no deep_ep_cpp to read"),
        ),
    }
}

/// Whether the EP group spans nodes (None: EP or GPUs per node unknown).
fn spans_nodes(r: &Request) -> Option<bool> {
    match (r.ep, r.gpus_per_node) {
        (Some(e), Some(g)) if g > 0 => Some(e > g),
        _ => None,
    }
}

/// EPv2 across nodes: DeepEP main's README ("V2 has also switched from the NVSHMEM
/// backend to the more lightweight NCCL Gin backend"; "NCCL 2.30.4 and above",
/// "RDMA network for internode communication"); csrc/kernels/backend/nccl.cu
/// asserts Gin is available when there is more than one rank.
pub fn epv2_internode(cx: &Ctx) -> Check {
    let (ep, gpn) = (cx.r.ep.unwrap_or(0), cx.r.gpus_per_node.unwrap_or(0));
    match (spans_nodes(cx.r), cx.ev.and_then(|e| e.nccl)) {
        (None, _) => Check::warn("epv2-internode", "unknown: EP or GPUs per node not given"),
        (Some(false), _) => Check::pass("epv2-internode", format!("EP {ep} fits one node of {gpn} GPUs (NVLink)")),
        (Some(true), Some(true)) => Check::pass(
            "epv2-internode",
            format!("EP {ep} spans nodes: deep_ep._C links NCCL, whose Gin backend EPv2 runs across nodes (needs an RDMA network; nccl-version checks NCCL >= 2.30.4 with --python)"),
        ),
        (Some(true), Some(false)) => Check::fail(
            "epv2-internode",
            format!("EP {ep} spans nodes, but deep_ep._C does not link NCCL: EPv2's internode path is NCCL Gin"),
        )
        .fix("rebuild with NCCL >= 2.30.4 in the build environment: deepep-forge build-wheel --variant <variant> --toolchain registry"),
        (Some(true), None) => Check::warn("epv2-internode", format!("EP {ep} spans nodes: needs EPv2's NCCL Gin backend (deep_ep._C not readable)")),
    }
}

/// EPv2's legacy methods (the V1 Buffer, deep_ep/buffers/legacy.py) across nodes run
/// the NVSHMEM internode kernels (setup.py builds csrc/kernels/legacy/internode*.cu with NVSHMEM).
pub fn epv2_legacy_internode(cx: &Ctx) -> Check {
    let ep = cx.r.ep.unwrap_or(0);
    match (spans_nodes(cx.r), cx.ev.and_then(|e| e.nvshmem)) {
        (None, _) => Check::warn("epv2-legacy-internode", "unknown: EP or GPUs per node not given"),
        (Some(false), _) => Check::skip("epv2-legacy-internode", format!("EP {ep} fits one node: the legacy internode kernels are not used")),
        (Some(true), Some(true)) => Check::pass(
            "epv2-legacy-internode",
            "deep_ep._C links NVSHMEM: the legacy (V1) internode and low-latency methods are available across nodes",
        ),
        (Some(true), Some(false)) => Check::warn(
            "epv2-legacy-internode",
            format!("EP {ep} spans nodes and deep_ep._C does not link NVSHMEM: only EPv2's own (NCCL Gin) methods work across nodes, not the legacy (V1) ones"),
        ),
        (Some(true), None) => Check::skip("epv2-legacy-internode", "deep_ep._C not readable"),
    }
}
