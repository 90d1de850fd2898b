//! Multi-node readiness (docs/probe.md, "Multi-node readiness"): the real
//! binary judges the host's RDMA path for a request across NVLink domains,
//! reading a host tree (`DEEPEP_FORGE_HOST_ROOT`, shaped like the kernel's
//! `Documentation/ABI/stable/sysfs-class-infiniband` layout and NVIDIA's
//! procfs files) or this machine; a single-node request is untouched. The
//! registration path is read from the mini-deepep fixture's csrc with a patch
//! that adds DMA-BUF registration, and recorded in the plan.
use std::path::Path;

use crate::support::*;

const MULTI: [&str; 10] = ["probe", "--ep", "16", "--nodes", "2", "--gpus-per-node", "8", "--gpu", "h200", "--format"];
const SINGLE: [&str; 10] = ["probe", "--ep", "8", "--nodes", "1", "--gpus-per-node", "8", "--gpu", "h200", "--format"];
const RDMA_RULES: [&str; 9] = [
    "rdma-device",
    "rdma-driver",
    "rdma-port",
    "roce-gid",
    "roce-settings",
    "gpu-memory-registration",
    "ibgda",
    "memlock",
    "rdma-transport",
];

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// An InfiniBand host: mlx5_0 port 1 ACTIVE at NDR, nvidia_peermem loaded, the
/// IBGDA driver parameters, memlock unlimited (sysfs-class-infiniband, sysfs-module,
/// proc(5), NVIDIA's procfs interface).
fn ib_host(root: &Path) {
    let dev = "sys/class/infiniband/mlx5_0";
    std::fs::create_dir_all(root.join("sys/bus/pci/drivers/mlx5_core")).unwrap();
    std::fs::create_dir_all(root.join(dev).join("device")).unwrap();
    std::os::unix::fs::symlink("../../../../bus/pci/drivers/mlx5_core", root.join(dev).join("device/driver")).unwrap();
    write(root, &format!("{dev}/ports/1/state"), "4: ACTIVE\n");
    write(root, &format!("{dev}/ports/1/link_layer"), "InfiniBand\n");
    write(root, &format!("{dev}/ports/1/rate"), "400 Gb/sec (4X NDR)\n");
    write(root, "sys/module/nvidia_peermem/refcnt", "0\n");
    write(
        root,
        "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build\n",
    );
    write(root, "proc/driver/nvidia/params", "EnableStreamMemOPs: 1\nRegistryDwords: \"PeerMappingOverride=1;\"\n");
    write(root, "proc/sys/kernel/osrelease", "6.8.0-45-generic\n");
    write(root, "proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units     \nMax locked memory         unlimited            unlimited            bytes     \n");
}

/// A host ready for a multi-node run: [`ib_host`] with rdma-core's and NIXL's
/// libraries present (empty stand-ins: only their presence is read).
pub fn ready_host(root: &Path) {
    ib_host(root);
    for lib in ["libibverbs.so.1", "libmlx5.so.1", "libnixl.so"] {
        write(root, &format!("usr/lib/x86_64-linux-gnu/{lib}"), "");
    }
}

fn probe(args: &[&str], format: &str, root: Option<&Path>) -> std::process::Output {
    let mut c = bin();
    c.args(args).arg(format);
    for v in ["NVSHMEM_IB_GID_INDEX", "NCCL_IB_GID_INDEX", "NVSHMEM_IB_TRAFFIC_CLASS", "NCCL_IB_TC"] {
        c.env_remove(v);
    }
    match root {
        Some(r) => c.env("DEEPEP_FORGE_HOST_ROOT", r),
        None => c.env_remove("DEEPEP_FORGE_HOST_ROOT"),
    };
    c.output().unwrap()
}

fn status_of(v: &serde_json::Value, rule: &str) -> String {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["rule"] == rule)
        .map(|c| c["status"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

#[test]
fn on_this_cpu_machine_a_multi_node_request_fails_naming_what_is_missing() {
    if Path::new("/sys/class/infiniband").exists() || Path::new("/sys/module/nvidia_peermem").exists() {
        // A machine with an RDMA path judges it: the point here is the machine without one.
        assert!(std::env::var("CI").is_err(), "this test expects a CI machine without RDMA devices");
        return;
    }
    let o = probe(&MULTI, "human", None);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    assert!(out.contains("FAIL  rdma-device") && out.contains("no RDMA device in /sys/class/infiniband"), "{out}");
    // no NVIDIA driver here: that is the cause named, not a missing nvidia_peermem
    assert!(out.contains("FAIL  gpu-memory-registration") && out.contains("no NVIDIA driver is loaded"), "{out}");
    let gh = stdout(&probe(&MULTI, "github", None));
    assert!(gh.contains("::error title=deepep-forge rdma-device::"), "{gh}");
    let j: serde_json::Value = serde_json::from_str(&stdout(&probe(&MULTI, "json", None))).unwrap();
    assert_eq!(status_of(&j, "rdma-device"), "fail");
    assert_eq!(j["facts"]["host"]["root"], "/");
}

#[test]
fn a_single_node_request_is_untouched_by_the_host() {
    let t = tempfile::tempdir().unwrap();
    ib_host(t.path());
    for format in ["human", "json", "github"] {
        let here = probe(&SINGLE, format, None);
        let tree = probe(&SINGLE, format, Some(t.path()));
        // the github format's stop-commands token is new in every run
        let same = |o: &std::process::Output| {
            stdout(o)
                .lines()
                .filter(|l| {
                    !(l.starts_with("::stop-commands::") || (l.len() == 36 && l.starts_with("::") && l.ends_with("::")))
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(same(&here), same(&tree), "{format}: the host is not read for one NVLink domain");
        assert_eq!(here.status.code(), Some(0));
        for r in RDMA_RULES {
            assert!(!stdout(&here).contains(r), "{format}: {r} in a single-node verdict");
        }
    }
    let j: serde_json::Value = serde_json::from_str(&stdout(&probe(&SINGLE, "json", None))).unwrap();
    assert!(j.get("facts").is_none(), "no host facts for a single-node request: {j}");
}

#[test]
fn an_infiniband_host_tree_passes_and_a_port_down_fails_it() {
    let t = tempfile::tempdir().unwrap();
    ib_host(t.path());
    let j: serde_json::Value = serde_json::from_str(&stdout(&probe(&MULTI, "json", Some(t.path())))).unwrap();
    for r in ["rdma-device", "rdma-driver", "rdma-port", "gpu-memory-registration", "ibgda", "memlock"] {
        assert_eq!(status_of(&j, r), "pass", "{r}: {j:#}");
    }
    assert_eq!(status_of(&j, "roce-gid"), "skip");
    assert_eq!(j["facts"]["host"]["devices"][0]["ports"][0]["rate"], "400 Gb/sec (4X NDR)");
    write(t.path(), "sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
    let o = probe(&MULTI, "human", Some(t.path()));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("FAIL  rdma-port") && stdout(&o).contains("mlx5_0/1 1: DOWN InfiniBand"),
        "{}",
        stdout(&o)
    );
}

/// The patch a DMA-BUF fallback makes: the DOCA coordinator registers GPU memory
/// through a DMA-BUF file descriptor (deepseek-ai/DeepEP PR #750's approach).
const DMABUF: &str = "int RDMACoordinator::create_and_place_qps() { return pd_ ? 0 : -1; }";

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_plan_records_the_registration_path_of_the_source_as_patched() {
    use crate::build_support::*;
    let lab = Lab::new();
    let file = "csrc/hybrid_ep/internode_doca.cpp";
    let f = lab.repo.join(file);
    let text = std::fs::read_to_string(&f).unwrap();
    assert!(text.contains(DMABUF), "the fixture's DOCA coordinator changed: {file}");
    let add = "int RDMACoordinator::create_and_place_qps() {\n    int fd = -1; CUdeviceptr p = 0; size_t n = 0;\n    cuMemGetHandleForAddressRange(&fd, p, n, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);\n    ibv_mr* mr = ibv_reg_dmabuf_mr(pd_, 0, n, p, fd, 0);\n    return mr ? 0 : -1;\n}";
    std::fs::write(&f, text.replacen(DMABUF, add, 1)).unwrap();
    let patch = git(&lab.repo, &["diff"]);
    git(&lab.repo, &["checkout", "--", file]);
    let consumer = lab.dir.path().join("consumer");
    std::fs::create_dir_all(consumer.join("patches")).unwrap();
    git(&consumer, &["init", "-q", "-b", "main"]);
    std::fs::write(consumer.join("patches/dmabuf.patch"), patch).unwrap();
    let exact = std::fs::read_to_string(lab.pins()).unwrap();
    let pin = format!("[pin.x86_64]\nrev = \"{}\"\n", lab.rev);
    std::fs::write(
        consumer.join("pins.toml"),
        exact.replacen(&pin, &format!("{pin}patches = [\"patches/dmabuf.patch\"]\n"), 1),
    )
    .unwrap();
    let registration = |pins: &Path| {
        let o = lab
            .forge(&["plan", "--variant", "sn", "--format", "json", "--pins", pins.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = stdout(&o);
        let at = text.find("\"registration\"").unwrap_or_else(|| panic!("no registration in the plan: {text}"));
        text[at..at + text[at..].find('}').unwrap()].to_string()
    };
    let exact = registration(&lab.pins());
    assert!(exact.contains("\"dmabuf\": false") && exact.contains("\"reg_mr\": false"), "{exact}");
    let patched = registration(&consumer.join("pins.toml"));
    assert!(patched.contains("\"dmabuf\": true") && patched.contains("\"dmabuf_handle\": true"), "{patched}");
}
