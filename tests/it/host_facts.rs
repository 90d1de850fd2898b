//! Cluster readiness (docs/probe.md, "Cluster check"): a fleet of fixture host
//! trees (shaped like the kernel's `sysfs-class-infiniband` and `sysfs-bus-pci`
//! layouts and NVIDIA's procfs files) goes through the real binary: `host
//! facts --host-root T --format json` on each node, then `probe --host-facts
//! facts/` judges them all where the wheel is, grouping the failing nodes by
//! cause with one fix each, in every format.
use std::path::Path;

use crate::support::*;

pub const MULTI: [&str; 8] = ["--ep", "16", "--nodes", "2", "--gpus-per-node", "8", "--gpu", "h200"];
pub const GID_V2: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";

pub fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn link(root: &Path, target: &str, rel: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, p).unwrap();
}

/// What a fixture node differs in.
#[derive(Default, Clone)]
pub struct Node<'a> {
    pub name: &'a str,
    pub peermem: bool,
    pub state: &'a str,
    pub layer: &'a str,
    /// (index, gid, type) entries of port 1.
    pub gids: Vec<(u32, &'a str, &'a str)>,
    pub driver: &'a str,
    pub numa_balancing: &'a str,
}

/// A good H200 node: mlx5_0 (PCIe 0000:17:00.0 beside GPU 0000:18:00.0 under
/// root complex pci0000:15, NUMA 0), port 1 ACTIVE NDR InfiniBand, peermem,
/// the IBGDA parameters, memlock unlimited, NUMA balancing off.
pub fn good(name: &str) -> Node<'_> {
    Node {
        name,
        peermem: true,
        state: "4: ACTIVE",
        layer: "InfiniBand",
        gids: vec![],
        driver: "570.124.06",
        numa_balancing: "0",
    }
}

pub fn host(root: &Path, n: &Node) {
    let nic = "sys/devices/pci0000:15/0000:15:01.0/0000:17:00.0";
    let gpu = "sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0";
    std::fs::create_dir_all(root.join("sys/bus/pci/drivers/mlx5_core")).unwrap();
    write(root, &format!("{nic}/numa_node"), "0\n");
    link(root, "../../../../bus/pci/drivers/mlx5_core", &format!("{nic}/driver"));
    write(root, &format!("{gpu}/numa_node"), "0\n");
    write(root, &format!("{gpu}/vendor"), "0x10de\n");
    write(root, &format!("{gpu}/class"), "0x030200\n");
    link(root, "../../../devices/pci0000:15/0000:15:01.0/0000:18:00.0", "sys/bus/pci/devices/0000:18:00.0");
    link(root, "../../../devices/pci0000:15/0000:15:01.0/0000:17:00.0", "sys/bus/pci/devices/0000:17:00.0");
    let dev = "sys/class/infiniband/mlx5_0";
    link(root, "../../../devices/pci0000:15/0000:15:01.0/0000:17:00.0", &format!("{dev}/device"));
    write(root, &format!("{dev}/ports/1/state"), &format!("{}\n", n.state));
    write(root, &format!("{dev}/ports/1/link_layer"), &format!("{}\n", n.layer));
    write(root, &format!("{dev}/ports/1/rate"), "400 Gb/sec (4X NDR)\n");
    for (i, gid, ty) in &n.gids {
        write(root, &format!("{dev}/ports/1/gids/{i}"), &format!("{gid}\n"));
        write(root, &format!("{dev}/ports/1/gid_attrs/types/{i}"), &format!("{ty}\n"));
    }
    if n.peermem {
        write(root, "sys/module/nvidia_peermem/refcnt", "0\n");
    }
    write(
        root,
        "proc/driver/nvidia/version",
        &format!("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {}  Release Build\n", n.driver),
    );
    write(root, "proc/driver/nvidia/params", "EnableStreamMemOPs: 1\nRegistryDwords: \"PeerMappingOverride=1;\"\n");
    write(root, "proc/sys/kernel/osrelease", "5.15.0-122-generic\n");
    write(root, "proc/sys/kernel/hostname", &format!("{}\n", n.name));
    write(root, "proc/sys/kernel/numa_balancing", &format!("{}\n", n.numa_balancing));
    write(root, "proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units     \nMax locked memory         unlimited            unlimited            bytes     \n");
}

/// `host facts --host-root root --format json`, the IB variables unset.
pub fn facts(root: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut c = bin();
    c.args(["host", "facts", "--format", "json", "--host-root"]).arg(root);
    for v in ["NVSHMEM_IB_GID_INDEX", "NCCL_IB_GID_INDEX", "NVSHMEM_IB_TRAFFIC_CLASS", "NCCL_IB_TC", "NCCL_IB_HCA"] {
        c.env_remove(v);
    }
    c.env_remove("DEEPEP_FORGE_HOST_ROOT").envs(env.iter().copied());
    c.output().unwrap()
}

/// Each node's facts written as `dir/<name>.json`, as `srun ... > facts/$(hostname).json` does.
pub fn fleet(dir: &Path, nodes: &[Node]) {
    std::fs::create_dir_all(dir).unwrap();
    for n in nodes {
        let t = tempfile::tempdir().unwrap();
        host(t.path(), n);
        let o = facts(t.path(), &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        std::fs::write(dir.join(format!("{}.json", n.name)), &o.stdout).unwrap();
    }
}

pub fn judge(dir: &Path, format: &str) -> std::process::Output {
    bin().arg("probe").args(MULTI).arg("--host-facts").arg(dir).args(["--format", format]).output().unwrap()
}

pub fn rows<'a>(v: &'a serde_json::Value, rule: &str) -> Vec<&'a serde_json::Value> {
    v["checks"].as_array().unwrap().iter().filter(|c| c["rule"] == rule).collect()
}

/// The fleet of the issue: good nodes, two without nvidia_peermem, a port
/// down, RoCE without a v2 GID, one driver behind.
#[test]
fn a_fleet_is_judged_by_cause_with_one_fix_each() {
    let d = tempfile::tempdir().unwrap();
    let facts_dir = d.path().join("facts");
    let roce = Node {
        layer: "Ethernet",
        gids: vec![(0, "fe80:0000:0000:0000:0a00:00ff:fe00:0001", "IB/RoCE v1")],
        ..good("gpu-005")
    };
    let nodes = vec![
        good("gpu-001"),
        good("gpu-002"),
        Node { peermem: false, ..good("gpu-017") },
        Node { peermem: false, ..good("gpu-003") },
        Node { state: "1: DOWN", ..good("gpu-004") },
        roce,
        Node { driver: "565.57.01", ..good("gpu-010") },
    ];
    fleet(&facts_dir, &nodes);
    let o = judge(&facts_dir, "json");
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["facts"]["fleet"]["nodes"].as_array().unwrap().len(), 7);
    assert_eq!(v["facts"]["fleet"]["nodes"][2]["name"], "gpu-003", "natural order");

    let reg = rows(&v, "gpu-memory-registration");
    let fail = reg.iter().find(|c| c["status"] == "fail").unwrap();
    let text = fail["evidence"].as_str().unwrap();
    assert!(text.starts_with("gpu-003, gpu-017: this host has no nvidia_peermem"), "{text}");
    assert!(text.contains("expect `ibv_reg_mr errno=14`"), "{text}");
    assert_eq!(fail["fix"], "sudo modprobe nvidia_peermem");
    assert!(
        reg.iter()
            .any(|c| c["status"] == "pass"
                && c["evidence"] == "5 of 7 nodes: gpu-001, gpu-002, gpu-004, gpu-005, gpu-010"),
        "{reg:?}"
    );

    let port = rows(&v, "rdma-port");
    let down = port.iter().find(|c| c["status"] == "fail").unwrap();
    assert!(
        down["evidence"].as_str().unwrap().starts_with("gpu-004: no ACTIVE port: mlx5_0/1 1: DOWN InfiniBand"),
        "{down}"
    );
    assert!(down["fix"].as_str().unwrap().contains("ibstat"));

    let gid = rows(&v, "roce-gid");
    let no_v2 = gid.iter().find(|c| c["status"] == "fail").unwrap();
    assert!(no_v2["evidence"].as_str().unwrap().starts_with("gpu-005: no RoCE v2 GID on mlx5_0/1"), "{no_v2}");
    assert!(no_v2["fix"].as_str().unwrap().contains("IP address"));

    let fleet = rows(&v, "fleet-consistency");
    let driver = fleet.iter().find(|c| c["evidence"].as_str().unwrap().contains("NVIDIA driver version")).unwrap();
    assert_eq!(driver["status"], "fail");
    let text = driver["evidence"].as_str().unwrap();
    assert!(
        text.contains("570.124.06 on gpu-001, gpu-002, gpu-003, gpu-004, gpu-005, gpu-017; 565.57.01 on gpu-010"),
        "{text}"
    );
    assert!(driver["fix"].as_str().unwrap().contains("(the odd nodes first: gpu-010)"));
    let layers = fleet.iter().find(|c| c["evidence"].as_str().unwrap().contains("active link layers")).unwrap();
    assert!(layers["evidence"].as_str().unwrap().contains("Ethernet on gpu-005"), "{layers}");

    // the same grouping in the other formats
    let human = stdout(&judge(&facts_dir, "human"));
    assert!(
        human.contains("on 7 nodes (host facts)")
            && human.contains("FAIL  gpu-memory-registration  gpu-003, gpu-017: "),
        "{human}"
    );
    assert!(human.contains("fix: sudo modprobe nvidia_peermem"), "{human}");
    let gh = stdout(&judge(&facts_dir, "github"));
    assert!(
        gh.contains("::error title=deepep-forge rdma-port::gpu-004%3A no ACTIVE port")
            || gh.contains("::error title=deepep-forge rdma-port::gpu-004: no ACTIVE port"),
        "{gh}"
    );
    let md = stdout(&judge(&facts_dir, "markdown"));
    assert!(md.starts_with("### deepep-forge probe: MISMATCH"), "{md}");
    assert!(md.contains("| **FAIL** | gpu\\-memory\\-registration | gpu\\-003, gpu\\-017&#58; this host"), "{md}");

    // a single file judges that node alone; a good one passes
    let one = judge(&facts_dir.join("gpu-001.json"), "json");
    assert_eq!(one.status.code(), Some(0), "{}", stdout(&one));
}

/// `--record` keeps the fleet verdict as a signed statement about the wheel.
#[test]
fn the_fleet_verdict_is_recorded_as_a_statement() {
    let d = tempfile::tempdir().unwrap();
    let facts_dir = d.path().join("facts");
    fleet(&facts_dir, &[good("gpu-001"), Node { peermem: false, ..good("gpu-002") }]);
    let key = d.path().join("ci.key");
    let o = bin().args(["cache", "keygen", "--name", "ci-1", "--out"]).arg(&key).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let wheel = crate::evidence::make_wheel(d.path());
    let mut args = vec!["probe", "--wheel", wheel.to_str().unwrap(), "--host-facts", "facts", "--record", "ev"];
    args.extend(MULTI);
    args.extend(["--signing-key", key.to_str().unwrap()]);
    let o = crate::evidence::run(d.path(), &args);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("recorded the verdict"), "{}", stderr(&o));
    let sha = crate::evidence::sha256_of(&wheel);
    let kept: Vec<_> = std::fs::read_dir(d.path().join("ev").join(&sha)).unwrap().flatten().collect();
    assert_eq!(kept.len(), 1, "one statement about the wheel");
    let text = std::fs::read_to_string(kept[0].path()).unwrap();
    assert!(text.contains("payload"), "{text}");
}

/// This machine (no RDMA, no GPU here): every absence reported, exit 0, in both formats.
#[test]
fn host_facts_on_this_machine_reports_absences_and_exits_0() {
    for format in ["human", "json"] {
        let o =
            bin().args(["host", "facts", "--format", format]).env_remove("DEEPEP_FORGE_HOST_ROOT").output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{format}: {}", stderr(&o));
    }
    let o = bin().args(["host", "facts", "--format", "json"]).env_remove("DEEPEP_FORGE_HOST_ROOT").output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["schema"], "deepep-forge.host-facts/1");
    assert_eq!(v["root"], "/");
    // Those facts judged as a fleet of one: the subject counts one node, and nothing is compared.
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("this.json"), stdout(&o)).unwrap();
    let facts = d.path().join("this.json");
    let o = bin()
        .args(["probe", "--ep", "16", "--nodes", "2", "--gpus-per-node", "8", "--ranks-per-domain", "8"])
        .args(["--no-mnnvl", "--gpu", "h100", "--host-facts", facts.to_str().unwrap()])
        .output()
        .unwrap();
    let human = stdout(&o);
    assert!(human.contains("on 1 node (host facts)"), "{human}");
    assert!(human.contains("fleet-consistency") && human.contains("one node: nothing to compare"), "{human}");
    let o = bin().args(["host", "facts", "--host-root", "/nonexistent-root"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `--host-root` judges the tree it names, as the test variable does; in a
/// container the fixes are the container's.
#[test]
fn probe_host_root_reads_that_tree_and_container_fixes_apply_there() {
    let t = tempfile::tempdir().unwrap();
    host(t.path(), &Node { peermem: false, numa_balancing: "1", ..good("gpu-001") });
    write(t.path(), "proc/self/limits", "Max locked memory         65536                65536                bytes\n");
    write(t.path(), ".dockerenv", "");
    let o = bin()
        .arg("probe")
        .args(MULTI)
        .args(["--format", "json", "--host-root"])
        .arg(t.path())
        .env_remove("DEEPEP_FORGE_HOST_ROOT")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let memlock = rows(&v, "memlock")[0];
    assert!(memlock["fix"].as_str().unwrap().starts_with("docker run --ulimit memlock=-1:-1"), "{memlock}");
    let reg = rows(&v, "gpu-memory-registration")[0];
    assert!(reg["fix"].as_str().unwrap().starts_with("on the host, not in the container"), "{reg}");
    let numa = rows(&v, "numa-balancing")[0];
    assert_eq!(numa["status"], "warn");
    assert!(numa["evidence"].as_str().unwrap().contains("deepseek-ai/DeepEP#624"), "{numa}");
    assert_eq!(rows(&v, "gpu-nic-affinity")[0]["status"], "pass", "{v}");
    assert_eq!(v["facts"]["host"]["gpus"][0]["root"], "pci0000:15");
}
