//! `probe --record DIR --signing-key KEY`: a verdict as one signed statement
//! (kind from the probe's mode, the request, the machine as observed, every
//! rule row and the measured figures). The folder and the key are checked
//! before the probe runs ([`Recorder::prepare`]), so a bad one costs nothing.
//! Owns the mapping from a verdict to a predicate; must not probe anything.
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::Value;

use super::statement::{self, Figure, Judged, Machine, Origin, Outcome, PeerLink, Predicate, Producer, RankGpu};
use super::store;
use crate::cache::sign::SecretKey;
use forge_model::ladder::Kind;
use forge_model::topology::Request;
use forge_model::verdict::{Status, Verdict};

/// `--record DIR` and `--signing-key FILE`, shared by every probe mode, as plain data.
#[derive(Debug, Clone, Default)]
pub struct RecordRequest {
    /// Keep the verdict as a signed statement under DIR/<wheel sha256>/.
    pub record: Option<PathBuf>,
    /// The ed25519 key that signs it (given whenever `record` is).
    pub signing_key: Option<PathBuf>,
}

/// A checked folder and a loaded key.
pub struct Recorder {
    dir: PathBuf,
    key: SecretKey,
}

/// The wheel a statement is about.
#[derive(Debug, Clone)]
pub struct Wheel {
    pub name: String,
    pub sha256: String,
}

impl Wheel {
    /// The wheel file at `path`: its name and sha256.
    pub fn of_file(path: &Path) -> Result<Wheel> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        crate::cache::check_wheel_name(&name)?;
        let (sha256, _) = forge_os::fs::named::sha256_file(path, "wheel", forge_os::input::cap::WHEEL)?;
        Ok(Wheel { name, sha256 })
    }
}

impl Recorder {
    /// None without `--record`; else the folder (not a symlink, writable) and the key, checked.
    pub fn prepare(args: &RecordRequest) -> Result<Option<Recorder>> {
        let Some(dir) = &args.record else { return Ok(None) };
        let key = SecretKey::load(args.signing_key.as_deref().expect("the CLI requires it with --record"))?;
        Ok(Some(Recorder { dir: store::prepare(dir)?, key }))
    }

    /// Sign and keep `verdict` about `wheel`, made in probe `mode`; returns the file.
    pub fn record(&self, wheel: &Wheel, mode: &str, verdict: &Verdict, recipe: Option<&Path>) -> Result<PathBuf> {
        let kind = kind_of(mode, verdict);
        let mode = match kind {
            Kind::Kernel if mode == "run --deep-ep" => "run", // DeepEP's round trip did not run
            _ => mode,
        };
        let predicate = Predicate {
            kind,
            does_not_show: kind.does_not_show().into(),
            origin: Origin::Observed,
            producer: Producer {
                command: "probe".into(),
                mode: Some(mode.into()),
                tool: statement::tool(),
                commit: statement::commit(),
            },
            time: forge_wheel::provenance::rfc3339(forge_wheel::provenance::now_secs()),
            request: verdict.request.as_ref().map(|r| judged(r, recipe)).transpose()?,
            machine: Some(machine(kind, &verdict.facts)),
            result: Some(outcome(verdict)),
            reported: None,
        };
        let s = statement::new(&wheel.name, &wheel.sha256, predicate);
        let envelope = statement::sign(&s, &self.key)?;
        store::write(&self.dir, &wheel.sha256, kind, &envelope)
    }
}

/// The kind a probe mode observed: `--deep-ep` counts only when DeepEP's round trip ran.
fn kind_of(mode: &str, v: &Verdict) -> Kind {
    let base = statement::mode_kind(mode).unwrap_or(Kind::Static);
    let deep_ep_ran =
        v.checks.iter().any(|c| c.rule == "deep-ep-roundtrip" && matches!(c.status, Status::Pass | Status::Fail))
            && v.facts["deep_ep"]["status"] == "ran";
    match base {
        Kind::DeepEpRoundTrip if !deep_ep_ran => Kind::Kernel,
        k => k,
    }
}

/// The request as a statement keeps it (a recipe by its path and sha256).
pub fn judged(r: &Request, recipe: Option<&Path>) -> Result<Judged> {
    let recipe = match recipe {
        Some(p) => {
            let bytes = forge_os::fs::named::read_bytes(p, "recipe", forge_os::input::cap::TEXT)?;
            Some(statement::Recipe { path: cut(&p.display().to_string()), sha256: forge_os::input::sha256_hex(&bytes) })
        }
        None => None,
    };
    Ok(Judged::of(r, recipe, cut))
}

/// A value for a short field: control characters dropped, at most 200 characters.
fn cut(s: &str) -> String {
    let clean: String = s.chars().filter(|c| !c.is_control()).take(200).collect();
    let l = clean.trim_start();
    if l.starts_with("::") || l.starts_with("##[") {
        format!("\\{clean}")
    } else {
        clean
    }
}

/// Free text for a rule row: control characters but newlines dropped, lines
/// that would start a workflow command marked, at most 4000 bytes.
fn cut_text(s: &str) -> String {
    let mut out = String::new();
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&cut(line.chars().take(statement::MAX_TEXT).collect::<String>().as_str()));
        if out.len() > 4000 {
            out.truncate(out.char_indices().take_while(|(i, _)| *i < 4000).last().map(|(i, _)| i).unwrap_or(0));
            break;
        }
    }
    out
}

/// The host's RDMA path as the probe read it (`facts.host`), one line per fact:
/// each port, then the registration path, IBGDA and the locked-memory limit.
fn rdma_lines(h: &Value) -> Vec<String> {
    if h.is_null() {
        return Vec::new();
    }
    let s = |v: &Value| v.as_str().map(cut).unwrap_or_else(|| "?".into());
    let mut out = Vec::new();
    for d in h["devices"].as_array().into_iter().flatten().take(statement::MAX_ITEMS / 2) {
        for p in d["ports"].as_array().into_iter().flatten().take(8) {
            out.push(cut(&format!(
                "{}/{} {} {} {} {} ({})",
                s(&d["name"]),
                s(&p["port"]),
                s(&d["driver"]),
                s(&p["state"]),
                s(&p["link_layer"]),
                s(&p["rate"]),
                s(&h["root"])
            )));
        }
    }
    if out.is_empty() {
        out.push(cut(&format!("no RDMA device ({})", s(&h["root"]))));
    }
    let flag = |v: &Value| match v.as_bool() {
        Some(true) => "yes",
        Some(false) => "no",
        None => "?",
    };
    out.push(format!(
        "nvidia_peermem {}, open module {}, kernel {}, ibv_reg_dmabuf_mr {}",
        flag(&h["peermem"]),
        flag(&h["open_module"]),
        s(&h["kernel"]),
        flag(&h["ibverbs_dmabuf"])
    ));
    out.push(format!(
        "EnableStreamMemOPs {}, PeerMappingOverride {}, gdrdrv {}, memlock {}",
        flag(&h["stream_memops"]),
        flag(&h["peer_mapping_override"]),
        flag(&h["gdrdrv"]),
        match h["memlock"].as_u64() {
            Some(u64::MAX) => "unlimited".to_string(),
            Some(b) => format!("{b} bytes"),
            None => "?".into(),
        }
    ));
    out.into_iter().map(|l| cut(&l)).collect()
}

/// The machine the verdict's facts describe: for a static probe the host only
/// (no GPU used); for `--run` the devices, links and every rank.
fn machine(kind: Kind, facts: &Value) -> Machine {
    let host_arch = std::env::consts::ARCH.to_string();
    let rdma = rdma_lines(&facts["host"]);
    if kind == Kind::Static {
        return Machine { host_arch, nodes: 1, rdma, ..Default::default() };
    }
    let devices = facts["devices"].as_array().cloned().unwrap_or_default();
    let hosts: Vec<String> =
        facts["hosts"].as_array().into_iter().flatten().filter_map(|h| h.as_str()).map(cut).collect();
    let rank_devices = facts["rank_devices"].as_array().cloned().unwrap_or_default();
    let rank_gpus: Vec<RankGpu> = if rank_devices.is_empty() {
        // one process drove every GPU of the group
        let group: Vec<i64> =
            facts["kernel_group"].as_array().into_iter().flatten().filter_map(Value::as_i64).collect();
        group
            .iter()
            .enumerate()
            .filter_map(|(i, &o)| devices.iter().find(|d| d["ordinal"].as_i64() == Some(o)).map(|d| (i, d)))
            .map(|(i, d)| rank_gpu(i, hosts.first().map(String::as_str).unwrap_or("?"), d))
            .collect()
    } else {
        rank_devices
            .iter()
            .take(statement::MAX_ITEMS)
            .enumerate()
            .map(|(i, disc)| {
                let devs = disc["devices"].as_array().cloned().unwrap_or_default();
                // each rank drives the GPU of its local rank: its place among the ranks of its host
                let host = hosts.get(i).map(String::as_str).unwrap_or("?");
                let local = hosts[..i.min(hosts.len())].iter().filter(|h| *h == host).count();
                rank_gpu(i, host, devs.get(local).unwrap_or(&Value::Null))
            })
            .collect()
    };
    let mut distinct = hosts.clone();
    distinct.sort();
    distinct.dedup();
    let mut sm: Vec<u32> = rank_gpus.iter().map(|r| r.sm).collect();
    sm.sort();
    sm.dedup();
    let links = facts["p2p"]
        .as_array()
        .into_iter()
        .flatten()
        .take(statement::MAX_ITEMS)
        .map(|p| PeerLink {
            from: p["from"].as_i64().unwrap_or(-1) as i32,
            to: p["to"].as_i64().unwrap_or(-1) as i32,
            access: p["access"].as_bool().unwrap_or(false),
            performance_rank: p["performance_rank"].as_i64().unwrap_or(0) as i32,
        })
        .collect();
    let deep_ep = &facts["deep_ep"]["result"];
    Machine {
        host_arch,
        nodes: distinct.len() as u32,
        ranks: rank_gpus.len() as u32,
        gpu_model: devices.first().and_then(|d| d["name"].as_str()).map(cut),
        gpu_count: devices.len() as u32,
        sm,
        driver: facts["driver"].as_str().map(cut),
        links,
        // The library the run loaded, by its own ncclGetVersion; never torch's
        // `torch.cuda.nccl.version()`, which is the NCCL torch was compiled against.
        nccl: deep_ep["nccl_runtime"].as_str().map(cut),
        nvshmem: deep_ep["nvshmem"].as_str().map(cut),
        rank_gpus,
        rdma,
    }
}

fn rank_gpu(rank: usize, host: &str, d: &Value) -> RankGpu {
    RankGpu {
        rank: rank as u32,
        host: cut(host),
        gpu: cut(d["name"].as_str().unwrap_or("?")),
        sm: d["sm"].as_u64().unwrap_or(0) as u32,
    }
}

fn outcome(v: &Verdict) -> Outcome {
    let rules = v
        .checks
        .iter()
        .take(statement::MAX_ITEMS)
        .map(|c| statement::RuleRow {
            rule: cut(&c.rule),
            status: match c.status {
                Status::Pass => "pass",
                Status::Warn => "warn",
                Status::Fail => "fail",
                Status::Skip => "skip",
            }
            .into(),
            evidence: cut_text(&c.evidence),
        })
        .collect();
    let f = &v.facts;
    let mut figures = Vec::new();
    let mut fig = |name: &str, value: Option<f64>, unit: &str| {
        if let Some(value) = value.filter(|x| x.is_finite()) {
            figures.push(Figure { name: name.into(), value, unit: unit.into() });
        }
    };
    fig("dispatch", f["bandwidth"]["dispatch_gbps"].as_f64(), "GB/s");
    fig("combine", f["bandwidth"]["combine_gbps"].as_f64(), "GB/s");
    fig("copy-engine", f["bandwidth"]["copy_engine_gbps"].as_f64(), "GB/s");
    fig("deep-ep-roundtrip", f["deep_ep"]["result"]["roundtrip_ms"].as_f64(), "ms");
    fig("probe-total", f["timings_ms"]["total"].as_f64(), "ms");
    Outcome { verdict: if v.failed() { "MISMATCH" } else { "MATCH" }.into(), rules, figures }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn disc(names: &[&str]) -> Value {
        let devices: Vec<Value> =
            names.iter().enumerate().map(|(i, n)| json!({"ordinal": i, "name": n, "sm": 90})).collect();
        json!({"driver": "13.0", "devices": devices, "p2p": []})
    }

    #[test]
    fn a_multi_rank_run_names_every_ranks_host_and_gpu() {
        // Four ranks on two hosts, as `runtime::judge` lays out its facts (rank 0's discovery at the top).
        let d0 = disc(&["NVIDIA H200", "NVIDIA H200 (1)"]);
        let d1 = disc(&["NVIDIA H200 b0", "NVIDIA H200 b1"]);
        let facts = json!({
            "hosts": ["node-a", "node-a", "node-b", "node-b"],
            "ranks": {"rank": 0, "local_rank": 0, "world": 4},
            "devices": d0["devices"], "driver": "13.0", "p2p": [{"from": 0, "to": 1, "access": true, "performance_rank": 0}],
            "rank_devices": [d0, d0, d1, d1],
            "deep_ep": {"status": "ran", "result": {"nccl": "2.28.9", "nccl_runtime": "2.30.7", "nvshmem": "libnvshmem_host.so.3"}},
        });
        let m = machine(Kind::Kernel, &facts);
        assert_eq!((m.nodes, m.ranks, m.gpu_count), (2, 4, 2));
        let seen: Vec<(u32, &str, &str)> =
            m.rank_gpus.iter().map(|r| (r.rank, r.host.as_str(), r.gpu.as_str())).collect();
        assert_eq!(
            seen,
            [
                (0, "node-a", "NVIDIA H200"),
                (1, "node-a", "NVIDIA H200 (1)"),
                (2, "node-b", "NVIDIA H200 b0"),
                (3, "node-b", "NVIDIA H200 b1")
            ]
        );
        assert_eq!((m.sm.as_slice(), m.links.len()), (&[90][..], 1));
        assert_eq!((m.nccl.as_deref(), m.nvshmem.as_deref()), (Some("2.30.7"), Some("libnvshmem_host.so.3")));
        // A static probe: the host only, no GPU.
        let s = machine(Kind::Static, &facts);
        assert_eq!((s.nodes, s.ranks, s.gpu_model), (1, 0, None));
    }

    #[test]
    fn a_multi_node_static_statement_names_the_host_rdma_path_and_an_old_machine_still_reads() {
        let facts = serde_json::json!({"host": {
            "root": "/",
            "devices": [{"name": "mlx5_0", "driver": "mlx5_core", "ports": [{"port": "1", "state": "4: ACTIVE",
                "link_layer": "InfiniBand", "rate": "400 Gb/sec (4X NDR)"}]}],
            "peermem": false, "open_module": true, "kernel": "6.8.0-45-generic", "ibverbs_dmabuf": true,
            "stream_memops": true, "peer_mapping_override": false, "gdrdrv": false, "memlock": u64::MAX,
        }});
        let m = machine(Kind::Static, &facts);
        assert_eq!(m.rdma[0], "mlx5_0/1 mlx5_core 4: ACTIVE InfiniBand 400 Gb/sec (4X NDR) (/)");
        assert_eq!(m.rdma[1], "nvidia_peermem no, open module yes, kernel 6.8.0-45-generic, ibv_reg_dmabuf_mr yes");
        assert!(m.rdma[2].ends_with("memlock unlimited"), "{m:?}");
        assert!(machine(Kind::Static, &serde_json::json!({})).rdma.is_empty(), "single-node: no host read");
        let old: Machine = serde_json::from_value(serde_json::json!({"hostArch": "x86_64", "nodes": 1, "ranks": 0,
            "rankGpus": [], "gpuModel": null, "gpuCount": 0, "sm": [], "driver": null, "links": [], "nccl": null,
            "nvshmem": null}))
        .unwrap();
        assert!(old.rdma.is_empty());
    }
}
