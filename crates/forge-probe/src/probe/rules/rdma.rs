//! Multi-node readiness: the host's RDMA path (read by `probe::host`) against
//! a request that spans more than one NVLink domain and the wheel's code. One
//! function per rule id, registered in [`RDMA_RULES`]. The reasons are public
//! issues (docs/probe.md, "Multi-node readiness"): HybridEP has no DMA-BUF
//! fallback and fails with `ibv_reg_mr errno=14` without nvidia_peermem
//! (NeMo-RL PR #3436, deepseek-ai/DeepEP#367, PR #750); IBGDA needs driver
//! parameters or GDRCopy (#55, #484); only mlx5 NICs work (#759); RoCE needs
//! a v2 GID, its index and a traffic class (#608, #724).
use crate::pins::Transport;
use crate::provenance::Registration;
use crate::topology::Request;
use crate::verdict::Check;

use super::super::host::{kernel_at_least, HostFacts, Port, RdmaDevice};

/// What the rules see.
pub struct Ctx<'a> {
    pub host: &'a HostFacts,
    /// `17cfb81` (the wheel's revision), or the wheel's name.
    pub code: String,
    /// How the wheel's code registers GPU memory (None: its provenance does not say).
    pub registration: Option<&'a Registration>,
    /// The multinode transport the wheel was built for (None: unknown or single-node).
    pub transport: Option<Transport>,
    /// Multinode variants of pins.toml whose patches add DMA-BUF registration: (variant, patches).
    pub dmabuf_variants: &'a [(String, Vec<String>)],
}

pub type RdmaRule = (&'static str, fn(&Ctx) -> Check);

pub const RDMA_RULES: [RdmaRule; 9] = [
    ("rdma-device", rdma_device),
    ("rdma-driver", rdma_driver),
    ("rdma-port", rdma_port),
    ("roce-gid", roce_gid),
    ("roce-settings", roce_settings),
    ("gpu-memory-registration", gpu_memory_registration),
    ("ibgda", ibgda),
    ("memlock", memlock),
    ("rdma-transport", rdma_transport),
];

/// The request spans more than one NVLink domain: EP > R when both are known,
/// else more than one node without multi-node NVLink, else EP > GPUs per node.
pub fn spans_domains(r: &Request) -> bool {
    match (r.ep, r.ranks_per_domain, r.nodes, r.gpus_per_node) {
        (Some(e), Some(rr), _, _) if rr > 0 => e > rr,
        (_, _, Some(n), _) if n > 1 => r.mnnvl != Some(true),
        (Some(e), _, _, Some(g)) if g > 0 => e > g && r.mnnvl != Some(true),
        _ => false,
    }
}

pub fn rdma_checks(cx: &Ctx) -> Vec<Check> {
    RDMA_RULES.iter().map(|(_, f)| f(cx)).collect()
}

fn dev_list(d: &[RdmaDevice]) -> String {
    d.iter()
        .map(|d| format!("{} ({})", d.name, d.driver.as_deref().unwrap_or("driver unknown")))
        .collect::<Vec<_>>()
        .join(", ")
}

fn ports(h: &HostFacts) -> impl Iterator<Item = (&RdmaDevice, &Port)> {
    h.devices.iter().flat_map(|d| d.ports.iter().map(move |p| (d, p)))
}

fn port_line(d: &RdmaDevice, p: &Port) -> String {
    let s = |o: &Option<String>| o.clone().unwrap_or_else(|| "?".into());
    format!("{}/{} {} {} {}", d.name, p.port, s(&p.state), s(&p.link_layer), s(&p.rate))
}

fn rdma_device(cx: &Ctx) -> Check {
    if cx.host.devices.is_empty() {
        return Check::fail(
            "rdma-device",
            format!(
                "no RDMA device in {}/sys/class/infiniband: a request across NVLink domains sends over an RDMA NIC (InfiniBand or RoCE)",
                cx.host.root.trim_end_matches('/')
            ),
        )
        .fix("run on nodes with an RDMA NIC and its driver loaded (mlx5_core, mlx5_ib); in a container pass --device /dev/infiniband and mount /sys");
    }
    Check::pass("rdma-device", dev_list(&cx.host.devices))
}

fn rdma_driver(cx: &Ctx) -> Check {
    let d = &cx.host.devices;
    if d.is_empty() {
        return Check::skip("rdma-driver", "no RDMA device");
    }
    if d.iter().any(|d| d.driver.as_deref().is_some_and(|n| n.starts_with("mlx5"))) {
        return Check::pass("rdma-driver", format!("a Mellanox mlx5 NIC: {}", dev_list(d)));
    }
    if d.iter().all(|d| d.driver.is_none()) {
        return Check::warn("rdma-driver", format!("no device/driver link to read: {}", dev_list(d)));
    }
    Check::fail(
        "rdma-driver",
        format!("no mlx5 NIC ({}): HybridEP's DOCA path (mlx5dv) and NVSHMEM's IBGDA drive Mellanox mlx5 NICs only (deepseek-ai/DeepEP#759)", dev_list(d)),
    )
    .fix("run on nodes with NVIDIA/Mellanox ConnectX NICs (driver mlx5_core)")
}

fn rdma_port(cx: &Ctx) -> Check {
    if cx.host.devices.is_empty() {
        return Check::skip("rdma-port", "no RDMA device");
    }
    let active: Vec<String> = ports(cx.host).filter(|(_, p)| p.active()).map(|(d, p)| port_line(d, p)).collect();
    if active.is_empty() {
        let all: Vec<String> = ports(cx.host).map(|(d, p)| port_line(d, p)).collect();
        return Check::fail(
            "rdma-port",
            format!("no ACTIVE port: {}", if all.is_empty() { "no ports".into() } else { all.join("; ") }),
        )
        .fix("bring a link up: check `ibstat` (InfiniBand: cable, subnet manager) or `ip link` (RoCE)");
    }
    Check::pass("rdma-port", active.join("; "))
}

fn active_ethernet(h: &HostFacts) -> Vec<(&RdmaDevice, &Port)> {
    ports(h).filter(|(_, p)| p.active() && p.ethernet()).collect()
}

fn roce_gid(cx: &Ctx) -> Check {
    let eth = active_ethernet(cx.host);
    if eth.is_empty() {
        return Check::skip("roce-gid", "no active RoCE (Ethernet) port");
    }
    let without: Vec<String> =
        eth.iter().filter(|(_, p)| p.roce_v2_gids.is_empty()).map(|(d, p)| format!("{}/{}", d.name, p.port)).collect();
    if without.len() == eth.len() {
        return Check::fail(
            "roce-gid",
            format!("no RoCE v2 GID on {} (gid_attrs/types): NVSHMEM and NCCL need a routable RoCE v2 GID (deepseek-ai/DeepEP#608)", without.join(", ")),
        )
        .fix("give the RoCE interface an IP address (its RoCE v2 GID comes from it), then check gid_attrs/types");
    }
    let with: Vec<String> = eth
        .iter()
        .filter(|(_, p)| !p.roce_v2_gids.is_empty())
        .map(|(d, p)| format!("{}/{} RoCE v2 GID index {}", d.name, p.port, join(&p.roce_v2_gids)))
        .collect();
    Check::pass("roce-gid", with.join("; "))
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

fn roce_settings(cx: &Ctx) -> Check {
    let eth = active_ethernet(cx.host);
    let Some(v2) = eth.iter().find_map(|(_, p)| p.roce_v2_gids.first().copied()) else {
        return Check::skip("roce-settings", "no active RoCE port with a RoCE v2 GID");
    };
    let all_v2: Vec<u32> = eth.iter().flat_map(|(_, p)| p.roce_v2_gids.iter().copied()).collect();
    let given = |n: &str| cx.host.settings.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    for n in ["NVSHMEM_IB_GID_INDEX", "NCCL_IB_GID_INDEX"] {
        if let Some(v) = given(n).filter(|v| v.trim().parse::<u32>().map_or(true, |i| !all_v2.contains(&i))) {
            return Check::fail(
                "roce-settings",
                format!(
                    "{n}={} is not a RoCE v2 GID index of an active port (RoCE v2: {})",
                    crate::input::excerpt(v, 20),
                    join(&all_v2)
                ),
            )
            .fix(format!("export NVSHMEM_IB_GID_INDEX={v2} NCCL_IB_GID_INDEX={v2}"));
        }
    }
    let missing: Vec<&str> = super::super::host::ROCE_SETTINGS.iter().copied().filter(|n| given(n).is_none()).collect();
    if missing.is_empty() {
        return Check::pass("roce-settings", "GID index and traffic class given to NVSHMEM and NCCL");
    }
    Check::warn(
        "roce-settings",
        format!("RoCE without {}: the defaults may pick a RoCE v1 or link-local GID and a lossy class (deepseek-ai/DeepEP#608, #724)", missing.join(", ")),
    )
    .fix(format!(
        "export NVSHMEM_IB_GID_INDEX={v2} NCCL_IB_GID_INDEX={v2} NVSHMEM_IB_TRAFFIC_CLASS=<your fabric's lossless class> NCCL_IB_TC=<the same>"
    ))
}

/// What this host lacks for DMA-BUF registration (empty: it supports it).
fn dmabuf_missing(h: &HostFacts) -> Vec<String> {
    let mut m = Vec::new();
    match h.open_module {
        Some(true) => {}
        Some(false) => m.push("the NVIDIA driver is not the open kernel module".to_string()),
        None => m.push("no NVIDIA driver loaded (/proc/driver/nvidia/version)".into()),
    }
    match h.kernel.as_deref().and_then(|k| kernel_at_least(k, 5, 12)) {
        Some(true) => {}
        Some(false) => m.push(format!("kernel {} is older than 5.12", h.kernel.as_deref().unwrap_or("?"))),
        None => m.push("the kernel release is unknown".into()),
    }
    match (&h.ibverbs, h.ibverbs_dmabuf) {
        (None, _) => m.push("no libibverbs.so.1 (rdma-core)".into()),
        (Some(_), Some(true)) => {}
        (Some(p), _) => m.push(format!("{p} has no ibv_reg_dmabuf_mr (rdma-core older than v34)")),
    }
    m
}

fn dmabuf_pointer(cx: &Ctx) -> String {
    match cx.dmabuf_variants.first() {
        Some((v, p)) => {
            format!("; the patched variant `{v}` (patch {}) uses DMA-BUF, which this host supports", p.join(", "))
        }
        None => String::new(),
    }
}

fn gpu_memory_registration(cx: &Ctx) -> Check {
    const RULE: &str = "gpu-memory-registration";
    let h = cx.host;
    if h.peermem {
        return Check::pass(RULE, "nvidia_peermem is loaded: ibv_reg_mr registers GPU memory with the NIC");
    }
    let missing = dmabuf_missing(h);
    let uses = cx.registration.map(Registration::uses_dmabuf);
    let peermem = "sudo modprobe nvidia_peermem";
    if !missing.is_empty() {
        let code = match uses {
            Some(true) => format!("{} uses DMA-BUF, but", cx.code),
            _ => "and".into(),
        };
        return Check::fail(
            RULE,
            format!(
                "this host has no nvidia_peermem {code} no DMA-BUF path ({}): expect `ibv_reg_mr errno=14` (NeMo-RL PR #3436, deepseek-ai/DeepEP#367)",
                missing.join("; ")
            ),
        )
        .fix(peermem);
    }
    match uses {
        Some(true) => Check::pass(
            RULE,
            format!("no nvidia_peermem, but {} registers GPU memory with ibv_reg_dmabuf_mr and this host supports DMA-BUF", cx.code),
        ),
        Some(false) => {
            let fix = match cx.dmabuf_variants.first() {
                Some((v, _)) => format!("{peermem}   # or build the DMA-BUF variant: deepep-forge build-wheel --variant {v}"),
                None => format!("{peermem}   # or use a DeepEP with a DMA-BUF path (deepseek-ai/DeepEP PR #750)"),
            };
            Check::fail(
                RULE,
                format!(
                    "this host has no nvidia_peermem; {} registers GPU memory with ibv_reg_mr only: expect `ibv_reg_mr errno=14`{}",
                    cx.code,
                    dmabuf_pointer(cx)
                ),
            )
            .fix(fix)
        }
        None => Check::warn(
            RULE,
            format!(
                "this host has no nvidia_peermem but supports DMA-BUF; whether {} uses DMA-BUF is not recorded (a wheel built before the registration path was recorded): with ibv_reg_mr only, expect `ibv_reg_mr errno=14`{}",
                cx.code,
                dmabuf_pointer(cx)
            ),
        )
        .fix(peermem),
    }
}

fn ibgda(cx: &Ctx) -> Check {
    let h = cx.host;
    if h.gdrdrv {
        return Check::pass("ibgda", "/dev/gdrdrv: GDRCopy is loaded");
    }
    let fix = "echo 'options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords=\"PeerMappingOverride=1;\"' | sudo tee /etc/modprobe.d/nvidia-ibgda.conf && sudo update-initramfs -u && sudo reboot";
    match (h.stream_memops, h.peer_mapping_override) {
        (Some(true), Some(true)) => {
            Check::pass("ibgda", "driver parameters EnableStreamMemOPs=1 and PeerMappingOverride=1 (/proc/driver/nvidia/params)")
        }
        (None, _) | (_, None) => Check::warn(
            "ibgda",
            "no /proc/driver/nvidia/params (no NVIDIA driver loaded here) and no /dev/gdrdrv: IBGDA readiness unknown (deepseek-ai/DeepEP#55, #484)",
        ),
        (Some(m), Some(p)) => {
            let lack: Vec<&str> =
                [(m, "EnableStreamMemOPs=1"), (p, "PeerMappingOverride=1 in RegistryDwords")].iter().filter(|(ok, _)| !ok).map(|(_, n)| *n).collect();
            Check::warn(
                "ibgda",
                format!("the NVIDIA driver lacks {} and there is no /dev/gdrdrv: NVSHMEM's IBGDA (GPU-initiated RDMA) cannot run (deepseek-ai/DeepEP#55, #484)", lack.join(" and ")),
            )
            .fix(fix)
        }
    }
}

/// Below this a locked-memory limit cannot hold RDMA buffers (Docker's default is 64 KiB or 8 MiB).
const MEMLOCK_FLOOR: u64 = 64 << 20;

fn memlock(cx: &Ctx) -> Check {
    let fix = "ulimit -l unlimited   # limits.conf: `* - memlock unlimited`; docker run --ulimit memlock=-1";
    match cx.host.memlock {
        None => Check::warn("memlock", "the locked-memory limit is unknown (/proc/self/limits)").fix(fix),
        Some(u64::MAX) => Check::pass("memlock", "locked memory unlimited"),
        Some(b) if b < MEMLOCK_FLOOR => Check::fail(
            "memlock",
            format!("locked memory is limited to {} KiB: registering RDMA buffers fails (ibv_reg_mr ENOMEM)", b / 1024),
        )
        .fix(fix),
        Some(b) => {
            Check::warn("memlock", format!("locked memory is limited to {} MiB, not unlimited", b >> 20)).fix(fix)
        }
    }
}

fn rdma_transport(cx: &Ctx) -> Check {
    let h = cx.host;
    match cx.transport {
        None => Check::skip("rdma-transport", "the wheel's multinode transport is not known (see multinode-build)"),
        Some(Transport::Doca) => match (&h.ibverbs, &h.mlx5) {
            (Some(i), Some(m)) => Check::pass("rdma-transport", format!("DOCA transport: {i}, {m}")),
            _ => Check::fail(
                "rdma-transport",
                "the wheel was built for the DOCA transport (libibverbs, libmlx5), and rdma-core's libibverbs.so.1 / libmlx5.so.1 are not in the loader's default paths",
            )
            .fix("install rdma-core (Debian/Ubuntu: apt-get install libibverbs1 ibverbs-providers)"),
        },
        Some(Transport::Nixl) => match &h.nixl {
            Some(n) => Check::pass("rdma-transport", format!("NIXL transport: {n}")),
            None => Check::warn(
                "rdma-transport",
                "the wheel was built for the NIXL transport, and libnixl.so is not in the loader's default paths: it must come from LD_LIBRARY_PATH or the Python environment",
            ),
        },
    }
}
