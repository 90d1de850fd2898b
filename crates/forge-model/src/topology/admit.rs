//! The values a request admits for what it leaves unknown: each unknown input
//! (MNNVL, GPUs per node, EP, R) is replaced by every value the hardware and
//! the rest of the request allow, so a rule is judged over all of them instead
//! of warning "unknown". Owns the admissible sets and why each holds; must not
//! judge rules.
//!
//! What the hardware admits (docs/design.md, "Topology rules"): multi-node
//! NVLink only on GB200/GB300 NVL systems; an HGX/DGX node (H100, H200, B200)
//! holds at most 8 GPUs and a GB200/GB300 compute tray 4; an NVLink domain is at most
//! the node's GPUs without MNNVL and at most 72 with it; R divides EP; EP
//! divides the job's GPUs (nodes x GPUs per node).
use forge_os::line::Line;
use serde::Serialize;

use super::{Gpu, Request};

/// Largest NVLink domain (GB200/GB300 NVL72).
pub const MAX_DOMAIN: u32 = 72;
/// Most concrete requests one verdict considers; past it EP stays unknown
/// (work per hostile request stays bounded).
pub const MAX_SCENARIOS: usize = 100_000;

/// One input the request did not give, and the values considered for it (a
/// verdict row: its values are `Line`s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Considered {
    /// `EP`, `GPUs/node`, `R`, `MNNVL`.
    pub input: &'static str,
    /// Every value considered, ascending (`any` when no bound is known).
    pub values: Vec<Line>,
    /// Why exactly these values.
    pub why: Line,
}

/// The concrete requests a request stands for.
#[derive(Debug, Clone)]
pub struct Admissible {
    /// Every concrete request (one: the request itself, when nothing is unknown).
    pub scenarios: Vec<Request>,
    /// The unknown inputs and the values considered for each (empty when none).
    pub considered: Vec<Considered>,
}

/// The inputs a rule may read (for naming the values a rule fails for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    Ep,
    GpusPerNode,
    Mnnvl,
    Ranks,
}

impl Input {
    pub const ALL: [Input; 4] = [Input::Ep, Input::GpusPerNode, Input::Mnnvl, Input::Ranks];

    pub fn name(self) -> &'static str {
        match self {
            Input::Ep => "EP",
            Input::GpusPerNode => "GPUs/node",
            Input::Mnnvl => "MNNVL",
            Input::Ranks => "R",
        }
    }

    /// The value of this input in a request, as the verdict shows it.
    pub fn show(self, r: &Request) -> String {
        let n = |v: Option<u32>| v.map(|n| n.to_string()).unwrap_or_else(|| "any".into());
        match self {
            Input::Ep => n(r.ep),
            Input::GpusPerNode => n(r.gpus_per_node),
            Input::Mnnvl => r.mnnvl.map(|b| if b { "yes" } else { "no" }).unwrap_or("any").into(),
            Input::Ranks => n(r.ranks_per_domain),
        }
    }

    fn given(self, r: &Request) -> bool {
        match self {
            Input::Ep => r.ep.is_some(),
            Input::GpusPerNode => r.gpus_per_node.is_some(),
            Input::Mnnvl => r.mnnvl.is_some(),
            Input::Ranks => r.ranks_per_domain.is_some(),
        }
    }
}

/// Most GPUs a node of this kind holds (HGX/DGX: 8; a GB200/GB300 compute tray: 4;
/// an unknown kind: 8, the largest of these).
pub fn max_gpus_per_node(gpu: Option<Gpu>) -> u32 {
    match gpu {
        Some(Gpu::Gb200 | Gpu::Gb300) => 4,
        _ => 8,
    }
}

/// The MNNVL values a GPU kind admits.
fn mnnvl_values(gpu: Option<Gpu>) -> (Vec<bool>, String) {
    match (gpu, gpu.and_then(Gpu::mnnvl_capable)) {
        (Some(g), Some(false)) => (vec![false], format!("not given; {g} systems have no multi-node NVLink")),
        (Some(g), Some(true)) => {
            (vec![false, true], format!("not given; {g} NVL systems may use multi-node NVLink or not"))
        }
        (Some(g), None) => {
            (vec![false, true], format!("not given; {g} does not say whether the system has multi-node NVLink"))
        }
        (None, _) => {
            (vec![false, true], "not given, and no GPU named: multi-node NVLink may exist (GB200/GB300 NVL)".into())
        }
    }
}

fn divisors(n: u32) -> Vec<u32> {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut d = 1u32;
    while u64::from(d) * u64::from(d) <= u64::from(n) {
        if n.is_multiple_of(d) {
            small.push(d);
            if d != n / d {
                large.push(n / d);
            }
        }
        d += 1;
    }
    small.extend(large.into_iter().rev());
    small
}

/// EP values for one (nodes, GPUs per node): the divisors of the job's GPUs, or any.
fn ep_values(r: &Request) -> Vec<Option<u32>> {
    match (r.ep, r.nodes, r.gpus_per_node) {
        (Some(e), _, _) => vec![Some(e)],
        (None, Some(n), Some(g)) => match u32::try_from(u64::from(n) * u64::from(g)) {
            Ok(world) if world > 0 => divisors(world).into_iter().map(Some).collect(),
            _ => vec![None],
        },
        _ => vec![None],
    }
}

/// R values for one (EP, GPUs per node, MNNVL): R divides EP, R <= GPUs per node
/// without MNNVL, R <= 72 with it.
fn ranks_values(r: &Request) -> Vec<Option<u32>> {
    if let Some(v) = r.ranks_per_domain {
        return vec![Some(v)];
    }
    let limit = match (r.mnnvl, r.gpus_per_node) {
        (Some(false), Some(g)) => g.min(MAX_DOMAIN),
        _ => MAX_DOMAIN,
    };
    let v: Vec<Option<u32>> = (1..=limit).filter(|d| r.ep.is_none_or(|e| e.is_multiple_of(*d))).map(Some).collect();
    // 0 GPUs per node (a hostile recipe) admits no R: R stays unknown.
    if v.is_empty() {
        vec![None]
    } else {
        v
    }
}

impl Request {
    /// Every concrete request this one admits. `hybridep` is false where only
    /// EP and GPUs per node matter (DeepEP's classic Buffer): R and MNNVL stay as given.
    pub fn admissible(&self, hybridep: bool) -> Admissible {
        let mut scenarios = vec![self.clone()];
        let mut considered = Vec::new();
        let follow = hybridep && self.defaults_follow_ep;
        if hybridep && self.mnnvl.is_none() && !follow {
            let (values, why) = mnnvl_values(self.gpu);
            scenarios =
                expand(scenarios, |s| values.iter().map(|&m| Request { mnnvl: Some(m), ..s.clone() }).collect());
            considered.push((Input::Mnnvl, why));
        }
        if self.gpus_per_node.is_none() {
            let max = max_gpus_per_node(self.gpu);
            scenarios =
                expand(scenarios, |s| (1..=max).map(|g| Request { gpus_per_node: Some(g), ..s.clone() }).collect());
            let kind = self.gpu.map(|g| format!("one {g} node")).unwrap_or_else(|| "one HGX/DGX node".into());
            considered.push((Input::GpusPerNode, format!("not given; {kind} holds at most {max} GPUs")));
        }
        let r_unknown = hybridep && self.ranks_per_domain.is_none() && !follow;
        if self.ep.is_none() {
            let with_ep = expand(scenarios.clone(), |s| {
                ep_values(s).into_iter().map(|e| Request { ep: e, ..s.clone() }).collect()
            });
            let total: usize =
                if r_unknown { with_ep.iter().map(|s| ranks_values(s).len()).sum() } else { with_ep.len() };
            let why = if total > MAX_SCENARIOS {
                format!("not given; more than {MAX_SCENARIOS} combinations with it, so left unknown (any EP)")
            } else {
                let bounded = with_ep.iter().all(|s| s.ep.is_some());
                scenarios = with_ep;
                match (self.nodes, bounded) {
                    (Some(_), true) => "not given; EP divides the job's GPUs (nodes x GPUs per node)".to_string(),
                    (Some(_), false) => {
                        "not given; nodes x GPUs per node is too large to list its divisors: any EP".to_string()
                    }
                    (None, _) => "not given, and nodes unknown: any EP".to_string(),
                }
            };
            considered.push((Input::Ep, why));
        }
        if r_unknown {
            scenarios = expand(scenarios, |s| {
                ranks_values(s).into_iter().map(|r| Request { ranks_per_domain: r, ..s.clone() }).collect()
            });
            considered.push((
                Input::Ranks,
                format!("not given; R divides EP, R <= GPUs per node without MNNVL, R <= {MAX_DOMAIN} with it"),
            ));
        }
        if follow {
            scenarios = scenarios.into_iter().map(nemo_rl_defaults).collect();
            let why = "not given; NeMo-RL's default from each admissible EP";
            if self.mnnvl.is_none() {
                considered.push((Input::Mnnvl, format!("{why}: USE_MNNVL = EP > 4")));
            }
            if self.ranks_per_domain.is_none() {
                considered.push((Input::Ranks, format!("{why}: R = min(EP, 64)")));
            }
        }
        if scenarios.is_empty() {
            scenarios.push(self.clone());
        }
        let considered = considered
            .into_iter()
            .map(|(input, why)| Considered {
                input: input.name(),
                values: values_of(&scenarios, input),
                why: why.into(),
            })
            .collect();
        Admissible { scenarios, considered }
    }

    /// The inputs this request leaves unknown (they vary across its admissible values).
    pub fn unknown_inputs(&self, hybridep: bool) -> Vec<Input> {
        Input::ALL
            .into_iter()
            .filter(|i| hybridep || matches!(i, Input::Ep | Input::GpusPerNode))
            .filter(|i| !i.given(self))
            .collect()
    }
}

/// NeMo-RL's HybridEP defaults for what a Megatron recipe leaves unset, from the scenario's EP.
fn nemo_rl_defaults(mut s: Request) -> Request {
    if let Some(e) = s.ep {
        s.ranks_per_domain = s.ranks_per_domain.or(Some(e.min(64)));
        s.mnnvl = s.mnnvl.or(Some(e > 4));
    }
    s
}

fn expand(scenarios: Vec<Request>, f: impl Fn(&Request) -> Vec<Request>) -> Vec<Request> {
    scenarios.iter().flat_map(f).collect()
}

/// The distinct values of one input across scenarios, numbers ascending.
fn values_of(scenarios: &[Request], input: Input) -> Vec<Line> {
    let mut v: Vec<(u8, u32, String)> = scenarios
        .iter()
        .map(|s| {
            let key = match input {
                Input::Ep => s.ep,
                Input::GpusPerNode => s.gpus_per_node,
                Input::Ranks => s.ranks_per_domain,
                Input::Mnnvl => s.mnnvl.map(u32::from),
            };
            (u8::from(key.is_none()), key.unwrap_or(0), input.show(s))
        })
        .collect();
    v.sort();
    v.dedup();
    v.into_iter().map(|(_, _, s)| Line::new(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ep: Option<u32>, nodes: Option<u32>, gpn: Option<u32>, gpu: Option<Gpu>) -> Request {
        Request { source: "test".into(), ep, nodes, gpus_per_node: gpn, gpu, ..Default::default() }
    }

    #[test]
    fn h100_ep16_admits_r_dividing_16_up_to_8_without_mnnvl() {
        let a = req(Some(16), Some(2), Some(8), Some(Gpu::H100)).admissible(true);
        let rs: Vec<_> = a.scenarios.iter().map(|s| (s.ranks_per_domain, s.mnnvl)).collect();
        assert_eq!(rs, [1, 2, 4, 8].map(|r| (Some(r), Some(false))));
        assert_eq!(a.considered.iter().map(|c| c.input).collect::<Vec<_>>(), ["MNNVL", "R"]);
    }

    #[test]
    fn gb200_admits_mnnvl_and_r_up_to_72() {
        let a = req(Some(144), Some(36), Some(4), Some(Gpu::Gb200)).admissible(true);
        let with: Vec<u32> =
            a.scenarios.iter().filter(|s| s.mnnvl == Some(true)).filter_map(|s| s.ranks_per_domain).collect();
        let without: Vec<u32> =
            a.scenarios.iter().filter(|s| s.mnnvl == Some(false)).filter_map(|s| s.ranks_per_domain).collect();
        assert_eq!(without, [1, 2, 3, 4]);
        assert_eq!(*with.last().unwrap(), 72);
        assert!(!with.contains(&5) && with.contains(&48));
    }

    #[test]
    fn unknown_ep_divides_the_jobs_gpus_and_unknown_gpus_per_node_is_bounded() {
        let a = req(None, Some(2), Some(8), Some(Gpu::H100)).admissible(false);
        assert_eq!(a.scenarios.iter().map(|s| s.ep.unwrap()).collect::<Vec<_>>(), [1, 2, 4, 8, 16]);
        let a = req(Some(16), Some(2), None, Some(Gpu::H200)).admissible(false);
        assert_eq!(a.considered[0].values, (1..=8).map(|n| n.to_string()).collect::<Vec<_>>());
        let a = req(None, None, Some(8), None).admissible(true);
        assert!(a.scenarios.iter().all(|s| s.ep.is_none()));
        assert_eq!(a.considered.iter().find(|c| c.input == "EP").unwrap().values, ["any"]);
        // The largest request stays bounded.
        let big = req(None, Some(1 << 20), None, None).admissible(true);
        assert!(big.scenarios.len() <= MAX_SCENARIOS, "{}", big.scenarios.len());
    }

    #[test]
    fn zero_counts_from_a_recipe_never_leave_nothing_to_judge() {
        for (ep, nodes, gpn) in [(Some(0), Some(0), Some(0)), (Some(16), Some(2), Some(0)), (None, Some(0), Some(8))] {
            let a = req(ep, nodes, gpn, Some(Gpu::H100)).admissible(true);
            assert!(!a.scenarios.is_empty(), "{ep:?} {nodes:?} {gpn:?}");
        }
    }

    #[test]
    fn divisors_are_ascending() {
        assert_eq!(divisors(16), [1, 2, 4, 8, 16]);
        assert_eq!(divisors(1), [1]);
        assert_eq!(divisors(12), [1, 2, 3, 4, 6, 12]);
    }
}
