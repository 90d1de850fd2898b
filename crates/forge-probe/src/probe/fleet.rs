//! `probe --host-facts`: a fleet of nodes judged where the wheel is. Each node's
//! facts come from a file `host facts --format json` wrote (read bounded,
//! parsed as [`HostFacts`], the schema, the node's name, the variable names
//! and every list's length checked); every node is judged by the same rule
//! functions as this host (`rules::rdma`), and the rows are grouped by (rule,
//! cause): "gpu-003, gpu-017: <cause>" with one fix per cause, nodes in
//! natural order and at most [`NAMES_SHOWN`] named. Nodes that disagree with
//! each other (driver, link layers, rates, IB variables) are a row of their
//! own (`fleet-consistency`). Owns loading and grouping; must not print.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use forge_model::verdict::{Check, Status};
use forge_os::error::Failure;
use forge_os::fs::{Kind, Tree};
use forge_os::line::Line;

use super::host::{HostFacts, IB_VARIABLES, MAX_GIDS, MAX_ITEMS, MAX_PCI, SCHEMA};
use super::rules::rdma::{Ctx, RDMA_RULES};

/// At most this many nodes are judged (the first by name); the verdict says how many were left out.
pub const MAX_NODES: usize = 4096;
/// At most this many nodes are named in one row.
pub const NAMES_SHOWN: usize = 16;
/// A facts file is small (a node with 64 devices of 64 ports is well under this).
const FACTS_CAP: u64 = 8 << 20;

/// One node: its name (the facts' hostname), the file it came from, its facts.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: Line,
    pub file: Line,
    pub facts: HostFacts,
}

/// The nodes of `paths` (files, or folders whose `*.json` files are read in
/// name order), sorted naturally by name, at most [`MAX_NODES`]; and how many were left out.
pub fn load(paths: &[PathBuf]) -> Result<(Vec<Node>, usize)> {
    let mut nodes: Vec<Node> = Vec::new();
    for p in paths {
        match forge_os::fs::named::kind_through(p) {
            Kind::Dir => {
                let tree = Tree::open(p, "host facts folder")?;
                let listing = tree.list(".", forge_os::fs::MAX_NAMES)?;
                for e in listing
                    .entries
                    .iter()
                    .filter(|e| matches!(e.kind, Kind::File { .. }) && e.utf8().is_some_and(|n| n.ends_with(".json")))
                {
                    let path = p.join(&e.name);
                    nodes.push(parse(&path, &tree.read(&e.name, FACTS_CAP)?)?);
                }
            }
            _ => nodes.push(parse(p, &forge_os::fs::named::read_bytes(p, "host facts file", FACTS_CAP)?)?),
        }
    }
    nodes.sort_by_key(|n| natural(&n.name));
    if let Some(w) = nodes.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Failure::usage(format!(
            "host facts {} and {} both name the node {}",
            w[0].file, w[1].file, w[0].name
        ))
        .hint("pass one facts file per node (write them as facts/$(hostname).json)")
        .into());
    }
    if nodes.is_empty() {
        return Err(Failure::usage("--host-facts: no facts file (*.json) in what was given")
            .hint("write one per node: srun -N 64 deepep-forge host facts --format json > facts/$(hostname).json")
            .into());
    }
    let left_out = nodes.len().saturating_sub(MAX_NODES);
    nodes.truncate(MAX_NODES);
    Ok((nodes, left_out))
}

/// One facts file, checked: the schema, a host name, known variable names, lists within the caps.
fn parse(path: &Path, bytes: &[u8]) -> Result<Node> {
    let bad = |why: String| -> anyhow::Error {
        Failure::usage(format!("host facts {}: {why}", path.display()))
            .hint("write it with `deepep-forge host facts --format json` on the node")
            .into()
    };
    let facts: HostFacts = serde_json::from_slice(bytes).map_err(|e| bad(format!("not a {SCHEMA} document ({e})")))?;
    if facts.schema != SCHEMA {
        return Err(bad(format!("schema {:?}, expected {SCHEMA:?}", Line::new(&facts.schema).as_str())));
    }
    let name = facts.hostname.clone().ok_or_else(|| bad("no hostname".into()))?;
    if !valid_host_name(&name) {
        return Err(bad(format!(
            "hostname {:?} is not a host name (1-253 letters, digits, '-', '_' and '.')",
            cut(&name)
        )));
    }
    if let Some(k) = facts.settings.keys().find(|k| !IB_VARIABLES.contains(&k.as_str())) {
        return Err(bad(format!("settings name {:?}, which is not one of the NCCL/NVSHMEM IB variables", cut(k))));
    }
    let over = facts.devices.len() > MAX_ITEMS
        || facts.gpus.len() > MAX_PCI
        || facts.devices.iter().any(|d| d.ports.len() > MAX_ITEMS || d.ports.iter().any(|p| p.gids.len() > MAX_GIDS));
    if over {
        return Err(bad(format!(
            "more than {MAX_ITEMS} devices or ports, {MAX_GIDS} GIDs a port or {MAX_PCI} GPUs (host facts reads no more)"
        )));
    }
    Ok(Node { name, file: Line::new(path.to_string_lossy()), facts })
}

/// At most 40 characters of a value for a message, escaped.
fn cut(s: &str) -> String {
    Line::new(s.chars().take(40).collect::<String>()).into_string()
}

/// RFC 1123 host names (and the `_` some clusters use): no spaces, commas or controls.
fn valid_host_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= 253 && n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A natural sort key: runs of digits compare as numbers (`gpu-2` before `gpu-10`).
pub fn natural(s: &str) -> Vec<(u8, u128, String)> {
    let mut key = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            let (d, r) = rest.split_at(digits);
            key.push((0, d.parse().unwrap_or(u128::MAX), d.to_string()));
            rest = r;
        } else {
            let text = rest.len() - rest.trim_start_matches(|c: char| !c.is_ascii_digit()).len();
            let (t, r) = rest.split_at(text);
            key.push((1, 0, t.to_string()));
            rest = r;
        }
    }
    key
}

/// `gpu-001, gpu-003 and 14 more` (names already in natural order).
pub fn names(nodes: &[&Line]) -> String {
    let shown: Vec<&str> = nodes.iter().take(NAMES_SHOWN).map(|n| n.as_str()).collect();
    match nodes.len().saturating_sub(NAMES_SHOWN) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// Every node judged by the host rules (`ctx` gives the wheel's side, the same
/// for all), grouped: per rule, one row per (status, cause, fix) that fails or
/// warns, naming its nodes, then one row for the nodes it passes on.
pub fn judge<'a>(nodes: &'a [Node], ctx: impl Fn(&'a HostFacts) -> Ctx<'a>) -> Vec<Check> {
    let judged: Vec<Vec<Check>> = nodes.iter().map(|n| super::rules::rdma::rdma_checks(&ctx(&n.facts))).collect();
    let mut rows = Vec::new();
    for (i, (rule, _)) in RDMA_RULES.iter().enumerate() {
        let mut groups: BTreeMap<(u8, Line, Option<Line>), Vec<&Line>> = BTreeMap::new();
        let (mut pass, mut skip) = (Vec::new(), Vec::new());
        for (n, checks) in nodes.iter().zip(&judged) {
            let c = &checks[i];
            match c.status {
                Status::Fail => groups.entry((0, c.evidence.clone(), c.fix.clone())).or_default().push(&n.name),
                Status::Warn => groups.entry((1, c.evidence.clone(), c.fix.clone())).or_default().push(&n.name),
                Status::Pass => pass.push(&n.name),
                Status::Skip => skip.push((&n.name, &c.evidence)),
            }
        }
        let mut grouped: Vec<_> = groups.into_iter().collect();
        grouped.sort_by(|((a, ..), na), ((b, ..), nb)| a.cmp(b).then(natural(na[0]).cmp(&natural(nb[0]))));
        for ((level, evidence, fix), on) in grouped {
            let text = format!("{}: {evidence}", names(&on));
            let mut c = if level == 0 { Check::fail(rule, text) } else { Check::warn(rule, text) };
            c.fix = fix;
            rows.push(c);
        }
        let of = nodes.len();
        if !pass.is_empty() {
            let text = if of == 1 {
                format!("the one node, {}", pass[0])
            } else if pass.len() == of {
                format!("all {of} nodes")
            } else {
                format!("{} of {of} nodes: {}", pass.len(), names(&pass))
            };
            rows.push(Check::pass(rule, text));
        } else if skip.len() == of {
            rows.push(Check::skip(rule, format!("every node: {}", skip[0].1)));
        }
    }
    rows
}

/// One node's value of a fact the fleet should share.
type Fact = fn(&HostFacts) -> String;

/// The facts every node should share: (what, the fact, a disagreement fails).
const SHARED: [(&str, Fact, bool); 3] = [
    ("NVIDIA driver version", |h| h.driver_version.as_deref().unwrap_or("none").to_string(), true),
    ("active link layers", |h| active(h, |p| p.link_layer.as_ref()), true),
    ("active port rates", |h| active(h, |p| p.rate.as_ref()), false),
];

/// The distinct values of `field` over the node's active ports, sorted (`none` when there are none).
fn active(h: &HostFacts, field: fn(&super::host::Port) -> Option<&Line>) -> String {
    let mut v: Vec<&str> = h
        .devices
        .iter()
        .flat_map(|d| d.ports.iter())
        .filter(|p| p.active())
        .map(|p| field(p).map_or("?", Line::as_str))
        .collect();
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(" + ")
    }
}

/// `fleet-consistency`: a row per fact the nodes disagree on, naming each value's nodes (the most common first).
pub fn consistency(nodes: &[Node]) -> Vec<Check> {
    const RULE: &str = "fleet-consistency";
    if nodes.len() < 2 {
        return vec![Check::skip(RULE, "one node: nothing to compare")];
    }
    let mut rows = Vec::new();
    let mut differ = |what: &str, value: &dyn Fn(&HostFacts) -> String, fails: bool| {
        let mut by: BTreeMap<String, Vec<&Line>> = BTreeMap::new();
        for n in nodes {
            by.entry(value(&n.facts)).or_default().push(&n.name);
        }
        if by.len() < 2 {
            return;
        }
        let mut by: Vec<_> = by.into_iter().collect();
        by.sort_by(|(a, na), (b, nb)| nb.len().cmp(&na.len()).then(a.cmp(b)));
        let parts: Vec<String> = by.iter().take(8).map(|(v, on)| format!("{} on {}", cut(v), names(on))).collect();
        let more = if by.len() > 8 { format!("; and {} more values", by.len() - 8) } else { String::new() };
        let text = format!("nodes disagree on {what}: {}{more}", parts.join("; "));
        let fix = format!("give every node of the job the same {what} (the odd nodes first: {})", names(&by[1].1));
        rows.push(if fails { Check::fail(RULE, text) } else { Check::warn(RULE, text) }.fix(fix));
    };
    for (what, f, fails) in SHARED {
        differ(what, &f, fails);
    }
    for v in IB_VARIABLES {
        differ(v, &|h: &HostFacts| h.settings.get(v).map_or("unset".to_string(), |x| x.to_string()), false);
    }
    if rows.is_empty() {
        rows.push(Check::pass(
            RULE,
            format!(
                "all {} nodes agree on the NVIDIA driver, active link layers, rates and NCCL/NVSHMEM IB variables",
                nodes.len()
            ),
        ));
    }
    rows
}

/// What the verdict's JSON keeps about the fleet: each node's name and file, the cap and what it left out.
pub fn facts(nodes: &[Node], left_out: usize) -> serde_json::Value {
    serde_json::json!({
        "nodes": nodes.iter().map(|n| serde_json::json!({"name": n.name, "file": n.file})).collect::<Vec<_>>(),
        "max_nodes": MAX_NODES,
        "nodes_left_out": left_out,
    })
}

/// The row that says the node cap cut the fleet (None when it did not).
pub fn cut_row(judged: usize, left_out: usize) -> Option<Check> {
    (left_out > 0).then(|| {
        Check::warn(
            "fleet-nodes",
            format!(
                "judged the first {judged} of {} nodes by name (the cap is {MAX_NODES}; {left_out} left out)",
                judged + left_out
            ),
        )
        .fix("split the facts into folders of at most 4096 nodes and judge each")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_puts_2_before_10() {
        let mut v = vec!["gpu-10", "gpu-2", "gpu-1", "a", "gpu-2b"];
        v.sort_by_key(|s| natural(s));
        assert_eq!(v, ["a", "gpu-1", "gpu-2", "gpu-2b", "gpu-10"]);
    }

    #[test]
    fn host_names_are_checked() {
        assert!(valid_host_name("gpu-003.cluster_a"));
        for bad in ["", "a b", "a,b", "x\ny", "::error::x", &"a".repeat(254)] {
            assert!(!valid_host_name(bad), "{bad:?}");
        }
    }
}
