//! `host facts`' readable form: one row per fact, absences said as such.
//! Every value is already a `Line`. Must not judge.
use super::{HostFacts, Pci, INFINIBAND, PCI_DEVICES};

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn opt(o: Option<bool>, unknown: &str) -> String {
    o.map_or(unknown.to_string(), |b| yes(b).to_string())
}

fn pci(p: &Pci) -> String {
    let numa = p.numa_node.map_or("?".to_string(), |n| n.to_string());
    format!("{} NUMA {numa} {}", p.address, p.path)
}

/// The facts as rows.
pub fn render_human(h: &HostFacts) -> String {
    let mut rows: Vec<(&str, String)> = vec![
        ("hostname", h.hostname.as_deref().unwrap_or("unknown").to_string()),
        ("root", h.root.to_string()),
        ("container", h.container.as_deref().unwrap_or("none seen").to_string()),
        ("kernel", h.kernel.as_deref().unwrap_or("unknown").to_string()),
        ("numa_balancing", h.numa_balancing.as_deref().unwrap_or("no such setting").to_string()),
    ];
    let driver = match (&h.driver_version, h.open_module) {
        (None, _) if h.nvidia_driver.is_none() => "none loaded (no /proc/driver/nvidia/version)".to_string(),
        (v, open) => format!(
            "{}{}",
            v.as_deref().unwrap_or("version unknown"),
            if open == Some(true) { " (open kernel module)" } else { "" }
        ),
    };
    rows.push(("NVIDIA driver", driver));
    rows.push(("nvidia_peermem", if h.peermem { "loaded" } else { "not loaded" }.into()));
    rows.push((
        "DMA-BUF",
        format!(
            "kernel CONFIG_DMA_SHARED_BUFFER: {}; ibv_reg_dmabuf_mr: {}",
            opt(h.kernel_dmabuf, "no /boot/config to read"),
            match &h.ibverbs {
                None => "no libibverbs.so.1".to_string(),
                Some(p) => format!("{} ({p})", opt(h.ibverbs_dmabuf, "unreadable")),
            }
        ),
    ));
    rows.push((
        "IBGDA",
        format!(
            "EnableStreamMemOPs=1: {}; PeerMappingOverride=1: {}; /dev/gdrdrv: {}",
            opt(h.stream_memops, "no params"),
            opt(h.peer_mapping_override, "no params"),
            yes(h.gdrdrv)
        ),
    ));
    let memlock = match h.memlock {
        None => "unknown".to_string(),
        Some(u64::MAX) => "unlimited".to_string(),
        Some(b) => format!("{} KiB", b / 1024),
    };
    rows.push(("memlock", format!("{memlock} (this process's limit: run it inside the job to see the job's)")));
    rows.push((
        "libmlx5 / libnixl",
        format!("{} / {}", h.mlx5.as_deref().unwrap_or("none"), h.nixl.as_deref().unwrap_or("none")),
    ));
    let settings: Vec<String> = h.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    rows.push(("IB variables", if settings.is_empty() { "none set".into() } else { settings.join(" ") }));
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{k:<18} {v}\n"));
    }
    if h.devices.is_empty() {
        out.push_str(&format!("{:<18} none in {INFINIBAND}\n", "RDMA devices"));
    }
    for d in &h.devices {
        let at = d.pci.as_ref().map(pci).unwrap_or_else(|| "PCIe path unknown".into());
        out.push_str(&format!(
            "RDMA device        {} ({}) {at}\n",
            d.name,
            d.driver.as_deref().unwrap_or("driver unknown")
        ));
        for p in &d.ports {
            let s = |o: &Option<forge_os::line::Line>| o.as_deref().unwrap_or("?").to_string();
            let gids: Vec<String> = p.gids.iter().map(|g| format!("{} {} ({})", g.index, g.gid, s(&g.kind))).collect();
            out.push_str(&format!("  port {}  {}  {}  {}\n", p.port, s(&p.state), s(&p.link_layer), s(&p.rate)));
            for g in gids {
                out.push_str(&format!("    gid {g}\n"));
            }
            if p.gids_left_out > 0 {
                out.push_str(&format!(
                    "    ({} GID entries past the cap of {} left out)\n",
                    p.gids_left_out,
                    super::MAX_GIDS
                ));
            }
        }
        if d.ports_left_out > 0 {
            out.push_str(&format!("  ({} ports past the cap of {} left out)\n", d.ports_left_out, super::MAX_ITEMS));
        }
    }
    if h.devices_left_out > 0 {
        out.push_str(&format!("({} devices past the cap of {} left out)\n", h.devices_left_out, super::MAX_ITEMS));
    }
    if h.gpus.is_empty() {
        out.push_str(&format!("{:<18} none in {PCI_DEVICES}\n", "GPUs"));
    }
    for g in &h.gpus {
        out.push_str(&format!("GPU                {}\n", pci(g)));
    }
    if h.pci_left_out > 0 {
        out.push_str(&format!("({} PCI devices past the cap of {} left out)\n", h.pci_left_out, super::MAX_PCI));
    }
    out
}
