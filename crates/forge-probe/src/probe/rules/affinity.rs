//! Multi-node readiness of the node's layout: the kernel's NUMA balancer
//! (`numa-balancing`: DeepEP's own issue #624 measured `task_numa_work` on
//! `internode_dispatch`'s path; PRs #644 and #679 add a warning at init) and
//! whether each GPU has an RDMA NIC on its PCIe root complex or at least its
//! NUMA node (`gpu-nic-affinity`: GPUDirect RDMA between a GPU and a NIC on
//! different root complexes crosses the CPU). One function per rule; they
//! judge [`HostFacts`] only.
use forge_model::verdict::Check;

use super::container;
use crate::probe::host::{HostFacts, Pci, PCI_DEVICES};

/// `numa-balancing`.
pub fn numa_balancing(h: &HostFacts) -> Check {
    const RULE: &str = "numa-balancing";
    match h.numa_balancing.as_deref() {
        None => Check::skip(RULE, "no /proc/sys/kernel/numa_balancing (a kernel without automatic NUMA balancing)"),
        Some("0") => Check::pass(RULE, "automatic NUMA balancing is off (kernel.numa_balancing=0)"),
        Some(v) => Check::warn(
            RULE,
            format!(
                "kernel.numa_balancing={}: the kernel's NUMA balancer (task_numa_work) rewrites page tables under the running job, stalls measured on DeepEP's internode_dispatch path (deepseek-ai/DeepEP#624)",
                v.chars().take(16).collect::<String>()
            ),
        )
        .fix(container::on_host(
            &container::of(h),
            "sudo sysctl -w kernel.numa_balancing=0   # and `kernel.numa_balancing = 0` in /etc/sysctl.d/ to keep it",
        )),
    }
}

/// A NUMA node as a row shows it (`?` when the firmware does not say).
fn numa(p: &Pci) -> String {
    p.numa_node.filter(|n| *n >= 0).map_or("?".into(), |n| n.to_string())
}

/// `gpu-nic-affinity`.
pub fn gpu_nic_affinity(h: &HostFacts) -> Check {
    const RULE: &str = "gpu-nic-affinity";
    let nics: Vec<(&str, &Pci)> =
        h.devices.iter().filter_map(|d| d.pci.as_ref().map(|p| (d.name.as_str(), p))).collect();
    if h.gpus.is_empty() {
        return Check::skip(RULE, format!("no NVIDIA GPU in {PCI_DEVICES}"));
    }
    if nics.is_empty() {
        return Check::skip(RULE, "no RDMA device with a PCIe path");
    }
    let known = |p: &Pci| p.numa_node.filter(|n| *n >= 0);
    let mut far = Vec::new();
    for g in &h.gpus {
        if nics.iter().any(|(_, n)| n.root == g.root) {
            continue;
        }
        let same_numa = nics.iter().find(|(_, n)| known(n).is_some() && known(n) == known(g));
        far.push(match same_numa {
            Some((name, _)) => {
                format!("GPU {} ({}, NUMA {}): nearest NIC {name} on another root complex", g.address, g.root, numa(g))
            }
            None => format!("GPU {} ({}, NUMA {}): no NIC on its NUMA node", g.address, g.root, numa(g)),
        });
    }
    let cut = if h.pci_left_out > 0 {
        format!("; read the first {} PCI devices ({} left out)", super::super::host::MAX_PCI, h.pci_left_out)
    } else {
        String::new()
    };
    if far.is_empty() {
        return Check::pass(
            RULE,
            format!("each of {} GPUs has an RDMA NIC on its PCIe root complex{cut}", h.gpus.len()),
        );
    }
    let shown = far.len().min(4);
    let more = if far.len() > shown { format!("; and {} more", far.len() - shown) } else { String::new() };
    Check::warn(
        RULE,
        format!(
            "{} of {} GPUs have no RDMA NIC on their root complex: {}{more}: GPUDirect RDMA crosses the CPU there{cut}",
            far.len(),
            h.gpus.len(),
            far[..shown].join("; ")
        ),
    )
    .fix("check the wiring with `nvidia-smi topo -m` (a NIC per GPU under one PCIe switch: PIX/PXB); give each rank the NIC beside its GPU (NCCL_IB_HCA, NVSHMEM_HCA_LIST)")
}
