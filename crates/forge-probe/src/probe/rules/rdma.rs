//! Multi-node readiness: the host's RDMA path (read by `probe::host`) against
//! a request that spans more than one NVLink domain and the wheel's code. One
//! function per rule id, registered in [`RDMA_RULES`]. The reasons are public
//! issues (docs/probe.md, "Multi-node readiness"): HybridEP has no DMA-BUF
//! fallback and fails with `ibv_reg_mr errno=14` without nvidia_peermem
//! (NeMo-RL PR #3436, deepseek-ai/DeepEP#367, PR #750); IBGDA needs driver
//! parameters or GDRCopy (#55, #484); only mlx5 NICs work (#759); RoCE needs
//! a v2 GID, its index and a traffic class (#608, #724).
use forge_model::pins::Transport;
use forge_model::topology::Request;
use forge_model::verdict::Check;
use forge_wheel::provenance::Registration;

use super::super::host::{kernel_at_least, HostFacts, Port, RdmaDevice, INFINIBAND, MAX_GIDS};
use super::container;
use forge_os::line::Line;

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

pub const RDMA_RULES: [RdmaRule; 11] = [
    ("rdma-device", rdma_device),
    ("rdma-driver", rdma_driver),
    ("rdma-port", rdma_port),
    ("roce-gid", roce_gid),
    ("roce-settings", roce_settings),
    ("gpu-memory-registration", gpu_memory_registration),
    ("ibgda", ibgda),
    ("memlock", memlock),
    ("rdma-transport", rdma_transport),
    ("numa-balancing", |cx| super::affinity::numa_balancing(cx.host)),
    ("gpu-nic-affinity", |cx| super::affinity::gpu_nic_affinity(cx.host)),
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

/// The devices as a row lists them, and what the cap left out.
fn dev_list(h: &HostFacts) -> String {
    let list = h
        .devices
        .iter()
        .map(|d| format!("{} ({})", d.name, d.driver.as_deref().unwrap_or("driver unknown")))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{list}{}", devices_cut(h))
}

/// `; read the first 64 of 70 devices (6 left out)` when the device listing was cut, else nothing.
fn devices_cut(h: &HostFacts) -> String {
    cut(h.devices.len(), h.devices_left_out, &format!("devices in {INFINIBAND}"))
}

/// `; read the first N of M <what> (K left out)` when a listing was cut at its cap.
fn cut(read: usize, left_out: usize, what: &str) -> String {
    if left_out == 0 {
        return String::new();
    }
    format!("; read the first {read} of {} {what} ({left_out} left out)", read + left_out)
}

/// Every listing of ports that its cap cut, as one note (empty when none was).
fn ports_cut(h: &HostFacts) -> String {
    let cuts: String =
        h.devices.iter().map(|d| cut(d.ports.len(), d.ports_left_out, &format!("ports of {}", d.name))).collect();
    format!("{}{cuts}", devices_cut(h))
}

fn ports(h: &HostFacts) -> impl Iterator<Item = (&RdmaDevice, &Port)> {
    h.devices.iter().flat_map(|d| d.ports.iter().map(move |p| (d, p)))
}

fn port_line(d: &RdmaDevice, p: &Port) -> String {
    let s = |o: &Option<Line>| o.as_ref().map_or("?", Line::as_str).to_string();
    format!("{}/{} {} {} {}", d.name, p.port, s(&p.state), s(&p.link_layer), s(&p.rate))
}

/// Every GID listing of `eth`'s ports that its cap cut, as one note (empty when none was).
fn gids_cut(h: &HostFacts, eth: &[(&RdmaDevice, &Port)]) -> String {
    let cuts: String = eth
        .iter()
        .map(|(d, p)| cut(MAX_GIDS, p.gids_left_out, &format!("GID entries of {}/{}", d.name, p.port)))
        .collect();
    format!("{}{cuts}", ports_cut(h))
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
    Check::pass("rdma-device", dev_list(cx.host))
}

fn rdma_driver(cx: &Ctx) -> Check {
    let (d, list) = (&cx.host.devices, dev_list(cx.host));
    if d.is_empty() {
        return Check::skip("rdma-driver", "no RDMA device");
    }
    if d.iter().any(|d| d.driver.as_deref().is_some_and(|n| n.starts_with("mlx5"))) {
        return Check::pass("rdma-driver", format!("a Mellanox mlx5 NIC: {list}"));
    }
    if d.iter().all(|d| d.driver.is_none()) {
        return Check::warn("rdma-driver", format!("no device/driver link to read: {list}"));
    }
    Check::fail(
        "rdma-driver",
        format!("no mlx5 NIC ({list}): HybridEP's DOCA path (mlx5dv) and NVSHMEM's IBGDA drive Mellanox mlx5 NICs only (deepseek-ai/DeepEP#759)"),
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
            format!(
                "no ACTIVE port: {}{}",
                if all.is_empty() { "no ports".into() } else { all.join("; ") },
                ports_cut(cx.host)
            ),
        )
        .fix("bring a link up: check `ibstat` (InfiniBand: cable, subnet manager) or `ip link` (RoCE)");
    }
    Check::pass("rdma-port", format!("{}{}", active.join("; "), ports_cut(cx.host)))
}

fn active_ethernet(h: &HostFacts) -> Vec<(&RdmaDevice, &Port)> {
    ports(h).filter(|(_, p)| p.active() && p.ethernet()).collect()
}

fn roce_gid(cx: &Ctx) -> Check {
    let eth = active_ethernet(cx.host);
    if eth.is_empty() {
        return Check::skip("roce-gid", "no active RoCE (Ethernet) port");
    }
    let without: Vec<String> = eth
        .iter()
        .filter(|(_, p)| p.roce_v2_gids().is_empty())
        .map(|(d, p)| format!("{}/{}", d.name, p.port))
        .collect();
    let invalid = invalid_gids(&eth);
    if without.len() == eth.len() {
        return Check::fail(
            "roce-gid",
            format!("no RoCE v2 GID on {} (gid_attrs/types){invalid}: NVSHMEM and NCCL need a routable RoCE v2 GID (deepseek-ai/DeepEP#608){}", without.join(", "), gids_cut(cx.host, &eth)),
        )
        .fix("give the RoCE interface an IP address (its RoCE v2 GID comes from it), then check gid_attrs/types");
    }
    let with: Vec<String> = eth
        .iter()
        .filter(|(_, p)| !p.roce_v2_gids().is_empty())
        .map(|(d, p)| format!("{}/{} RoCE v2 GID index {}", d.name, p.port, join(&p.roce_v2_gids())))
        .collect();
    Check::pass("roce-gid", format!("{}{invalid}{}", with.join("; "), gids_cut(cx.host, &eth)))
}

/// `; entries typed RoCE v2 that are not GIDs (IPv6 addresses): mlx5_0/1 index 2 (not-a-gid)`, at most 4 named.
fn invalid_gids(eth: &[(&RdmaDevice, &Port)]) -> String {
    let bad: Vec<String> = eth
        .iter()
        .flat_map(|(d, p)| p.invalid_gids().into_iter().map(move |g| (d, p, g)))
        .map(|(d, p, g)| format!("{}/{} index {} ({})", d.name, p.port, g.index, cut_at(&g.gid, 48)))
        .collect();
    match bad.len() {
        0 => String::new(),
        n if n <= 4 => {
            format!("; entries typed RoCE v2 that are not GIDs (IPv6 addresses), not counted: {}", bad.join(", "))
        }
        n => format!(
            "; entries typed RoCE v2 that are not GIDs (IPv6 addresses), not counted: {}, and {} more",
            bad[..4].join(", "),
            n - 4
        ),
    }
}

/// The first `max` characters of an (already escaped) value, `…` when cut.
fn cut_at(v: &str, max: usize) -> String {
    let shown: String = v.chars().take(max).collect();
    if shown.len() < v.len() {
        format!("{shown}…")
    } else {
        shown
    }
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// A value a setting must hold, checked wherever it is set: a GID index is a
/// table index (0-255: the kernel's RoCE GID tables hold at most 256
/// entries), a traffic class an 8-bit integer (NCCL's and NVSHMEM's docs).
fn setting_error(name: &str, value: &str) -> Option<&'static str> {
    let n = value.trim().parse::<u32>().ok();
    let ok = n.is_some_and(|n| n <= 255) && value.trim() == value;
    let what =
        if name.contains("GID_INDEX") { "a GID index, an integer 0-255" } else { "a traffic class, an integer 0-255" };
    (!ok && (name.contains("GID_INDEX") || name.ends_with("_TC") || name.ends_with("TRAFFIC_CLASS"))).then_some(what)
}

fn roce_settings(cx: &Ctx) -> Check {
    for (n, v) in &cx.host.settings {
        if let Some(want) = setting_error(n, v) {
            return Check::fail(
                "roce-settings",
                format!("{n}={} is not {want}: NCCL and NVSHMEM reject or misread it", cut_at(v, 20)),
            )
            .fix(format!(
                "export {n}=<{want}> (ask the fabric's owner for the lossless class; the GID index from roce-gid)"
            ));
        }
    }
    let eth = active_ethernet(cx.host);
    let Some(v2) = eth.iter().find_map(|(_, p)| p.roce_v2_gids().first().copied()) else {
        return Check::skip("roce-settings", "no active RoCE port with a RoCE v2 GID");
    };
    let all_v2: Vec<u32> = eth.iter().flat_map(|(_, p)| p.roce_v2_gids()).collect();
    let given = |n: &str| cx.host.settings.get(n).map(Line::as_str);
    for n in ["NVSHMEM_IB_GID_INDEX", "NCCL_IB_GID_INDEX"] {
        if let Some(v) = given(n).filter(|v| v.trim().parse::<u32>().map_or(true, |i| !all_v2.contains(&i))) {
            return Check::fail(
                "roce-settings",
                format!(
                    "{n}={} is not a RoCE v2 GID index of an active port (RoCE v2: {})",
                    cut_at(v, 20),
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
        None => m.push("no NVIDIA driver (/proc/driver/nvidia/version)".into()),
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
    let place = container::of(h);
    if h.nvidia_driver.is_none() {
        return Check::fail(
            RULE,
            format!(
                "no NVIDIA driver is loaded{} (no /proc/driver/nvidia/version): there is no GPU memory to register with the NIC, and nvidia_peermem needs the driver first",
                place.here()
            ),
        )
        .fix(container::driver_fix(&place));
    }
    let missing = dmabuf_missing(h);
    let uses = cx.registration.map(Registration::uses_dmabuf);
    let peermem = container::peermem_fix(&place);
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
    let fix = container::on_host(&container::of(h), "echo 'options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords=\"PeerMappingOverride=1;\"' | sudo tee /etc/modprobe.d/nvidia-ibgda.conf && sudo update-initramfs -u && sudo reboot");
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
    let place = container::of(cx.host);
    let fix = container::memlock_fix(&place);
    let whose = "the locked-memory limit of the process that read the facts (the job's, when the job reads them)";
    match cx.host.memlock {
        None => Check::warn("memlock", format!("{whose} is unknown (/proc/self/limits)")).fix(fix),
        Some(u64::MAX) => Check::pass("memlock", "locked memory unlimited"),
        Some(b) if b < MEMLOCK_FLOOR => Check::fail(
            "memlock",
            format!(
                "locked memory is limited to {} KiB{}: registering RDMA buffers fails (ibv_reg_mr ENOMEM)",
                b / 1024,
                place.here()
            ),
        )
        .fix(fix),
        Some(b) => Check::warn(
            "memlock",
            format!("locked memory is limited to {} MiB{}, not unlimited", b >> 20, place.here()),
        )
        .fix(fix),
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

#[cfg(test)]
mod tests {
    use super::super::super::host;
    use super::*;
    use forge_model::verdict::Status;

    const GID_V2: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";
    const GID_LINK: &str = "fe80:0000:0000:0000:0a00:00ff:fe00:0001";

    fn read(root: &std::path::Path) -> HostFacts {
        host::read(&forge_os::fs::Tree::open(root, "host root").unwrap())
    }

    fn judge(
        root: &std::path::Path,
        registration: Option<Registration>,
        variants: &[(String, Vec<String>)],
    ) -> Vec<Check> {
        let mut h = read(root);
        h.settings.clear();
        judge_host(&h, registration, variants)
    }

    fn judge_host(h: &HostFacts, registration: Option<Registration>, variants: &[(String, Vec<String>)]) -> Vec<Check> {
        let cx = Ctx {
            host: h,
            code: "17cfb81".into(),
            registration: registration.as_ref(),
            transport: Some(Transport::Doca),
            dmabuf_variants: variants,
        };
        rdma_checks(&cx)
    }

    fn rule<'a>(cs: &'a [Check], id: &str) -> &'a Check {
        cs.iter().find(|c| c.rule == id).unwrap()
    }

    fn reg(dmabuf: bool) -> Registration {
        Registration { dmabuf, dmabuf_handle: dmabuf, reg_mr: true, evidence: vec![] }
    }

    /// A good InfiniBand host: mlx5 NDR ACTIVE, peermem, IBGDA params, memlock unlimited.
    fn good(root: &std::path::Path) {
        fixture::device(root, "mlx5_0", "mlx5_core", "4: ACTIVE", "InfiniBand", "400 Gb/sec (4X NDR)", &[]);
        fixture::write(root, "sys/module/nvidia_peermem/refcnt", "0\n");
        fixture::driver(root, false, "5.15.0-122-generic", "unlimited");
        fixture::params(root, 1, "PeerMappingOverride=1;");
        fixture::ibverbs(root, false);
        fixture::write(root, "usr/lib/x86_64-linux-gnu/libmlx5.so.1", "");
    }

    #[test]
    fn no_rdma_device_fails_and_names_what_is_missing() {
        let t = tempfile::tempdir().unwrap();
        let cs = judge(t.path(), None, &[]);
        assert_eq!(rule(&cs, "rdma-device").status, Status::Fail);
        assert!(rule(&cs, "rdma-device").evidence.contains("/sys/class/infiniband"), "{cs:?}");
        assert_eq!(rule(&cs, "gpu-memory-registration").status, Status::Fail);
        // no driver: the cause is the driver, and the fix loads it first (not only nvidia_peermem)
        let g = rule(&cs, "gpu-memory-registration");
        assert!(g.evidence.starts_with("no NVIDIA driver is loaded"), "{cs:?}");
        assert!(g.fix.as_deref().unwrap().starts_with("run on GPU nodes with the NVIDIA driver loaded"), "{cs:?}");
        assert_eq!(rule(&cs, "memlock").status, Status::Warn, "no /proc/self/limits: unknown");
        assert_eq!(rule(&cs, "rdma-transport").status, Status::Fail);
    }

    #[test]
    fn mlx5_infiniband_active_400g_with_peermem_passes() {
        let t = tempfile::tempdir().unwrap();
        good(t.path());
        let cs = judge(t.path(), Some(reg(false)), &[]);
        for c in &cs {
            assert!(matches!(c.status, Status::Pass | Status::Skip), "{c:?}");
        }
        assert!(
            rule(&cs, "rdma-port").evidence.contains("mlx5_0/1 4: ACTIVE InfiniBand 400 Gb/sec (4X NDR)"),
            "{cs:?}"
        );
        assert!(rule(&cs, "rdma-driver").evidence.contains("mlx5_core"));
        assert_eq!(rule(&cs, "roce-gid").status, Status::Skip);
    }

    #[test]
    fn a_port_down_fails() {
        let t = tempfile::tempdir().unwrap();
        good(t.path());
        fixture::write(t.path(), "sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
        let cs = judge(t.path(), None, &[]);
        assert_eq!(rule(&cs, "rdma-port").status, Status::Fail);
        assert!(rule(&cs, "rdma-port").evidence.contains("1: DOWN"), "{cs:?}");
    }

    #[test]
    fn a_non_mlx5_driver_fails() {
        let t = tempfile::tempdir().unwrap();
        fixture::device(
            t.path(),
            "irdma0",
            "irdma",
            "4: ACTIVE",
            "Ethernet",
            "100 Gb/sec (4X EDR)",
            &[(1, GID_V2, "RoCE v2")],
        );
        let cs = judge(t.path(), None, &[]);
        assert_eq!(rule(&cs, "rdma-driver").status, Status::Fail);
        assert!(
            rule(&cs, "rdma-driver").evidence.contains("irdma0 (irdma)")
                && rule(&cs, "rdma-driver").evidence.contains("#759")
        );
    }

    #[test]
    fn roce_without_a_v2_gid_fails_and_with_one_but_no_settings_warns() {
        let t = tempfile::tempdir().unwrap();
        good(t.path());
        let eth = |gids: &[(u32, &str, &str)]| {
            let _ = std::fs::remove_dir_all(t.path().join("sys/class/infiniband"));
            fixture::device(t.path(), "mlx5_2", "mlx5_core", "4: ACTIVE", "Ethernet", "200 Gb/sec (4X HDR)", gids);
        };
        // v1 GIDs only, and an empty (all-zero) table entry typed RoCE v2
        eth(&[
            (0, GID_LINK, "IB/RoCE v1"),
            (1, "0000:0000:0000:0000:0000:0000:0000:0000", "RoCE v2"),
            (2, GID_V2, "IB/RoCE v1"),
        ]);
        let cs = judge(t.path(), None, &[]);
        assert_eq!(rule(&cs, "roce-gid").status, Status::Fail, "{cs:?}");
        eth(&[(0, GID_LINK, "IB/RoCE v1"), (3, GID_V2, "RoCE v2")]);
        let mut h = read(t.path());
        h.settings.clear();
        let cs = judge_host(&h, None, &[]);
        assert_eq!(rule(&cs, "roce-gid").status, Status::Pass);
        assert!(rule(&cs, "roce-gid").evidence.contains("GID index 3"), "{cs:?}");
        let s = rule(&cs, "roce-settings");
        assert_eq!(s.status, Status::Warn);
        assert!(
            s.evidence.contains("NVSHMEM_IB_GID_INDEX") && s.fix.as_deref().unwrap().contains("NCCL_IB_GID_INDEX=3")
        );
        h.settings = [("NVSHMEM_IB_GID_INDEX".to_string(), "0".into())].into();
        assert_eq!(rule(&judge_host(&h, None, &[]), "roce-settings").status, Status::Fail);
        h.settings = host::ROCE_SETTINGS
            .iter()
            .map(|n| (n.to_string(), if n.contains("GID") { "3" } else { "106" }.into()))
            .collect();
        assert_eq!(rule(&judge_host(&h, None, &[]), "roce-settings").status, Status::Pass);
    }

    /// No nvidia_peermem, the open module, kernel 6.x, rdma-core with ibv_reg_dmabuf_mr.
    fn dmabuf_host(root: &std::path::Path) {
        good(root);
        std::fs::remove_dir_all(root.join("sys/module/nvidia_peermem")).unwrap();
        fixture::driver(root, true, "6.8.0-45-generic", "unlimited");
        fixture::ibverbs(root, true);
    }

    #[test]
    fn no_peermem_and_a_wheel_without_dmabuf_fails_with_errno_14_and_names_the_dmabuf_variant() {
        let t = tempfile::tempdir().unwrap();
        dmabuf_host(t.path());
        let h = read(t.path());
        assert_eq!((h.open_module, h.ibverbs_dmabuf, h.peermem), (Some(true), Some(true), false), "{h:?}");
        let variants = vec![("h100-multinode-dmabuf".to_string(), vec!["patches/dmabuf.patch".to_string()])];
        let cs = judge(t.path(), Some(reg(false)), &variants);
        let c = rule(&cs, "gpu-memory-registration");
        assert_eq!(c.status, Status::Fail);
        assert!(c.evidence.contains("this host has no nvidia_peermem; 17cfb81 registers GPU memory with ibv_reg_mr only: expect `ibv_reg_mr errno=14`"), "{c:?}");
        assert!(c.evidence.contains("the patched variant `h100-multinode-dmabuf` (patch patches/dmabuf.patch) uses DMA-BUF, which this host supports"), "{c:?}");
        assert!(c.fix.as_deref().unwrap().contains("build-wheel --variant h100-multinode-dmabuf"));
        // the same host with a wheel whose code uses DMA-BUF
        assert_eq!(rule(&judge(t.path(), Some(reg(true)), &variants), "gpu-memory-registration").status, Status::Pass);
        // a wheel whose provenance predates the record: not proven
        assert_eq!(rule(&judge(t.path(), None, &variants), "gpu-memory-registration").status, Status::Warn);
        // the proprietary module, or an old kernel: no DMA-BUF path, whatever the wheel
        fixture::driver(t.path(), false, "5.4.0-150-generic", "unlimited");
        let c = judge(t.path(), Some(reg(true)), &[]);
        let c = rule(&c, "gpu-memory-registration");
        assert_eq!(c.status, Status::Fail);
        assert!(c.evidence.contains("not the open kernel module") && c.evidence.contains("older than 5.12"), "{c:?}");
    }

    #[test]
    fn ibgda_needs_the_driver_params_or_gdrdrv() {
        let t = tempfile::tempdir().unwrap();
        good(t.path());
        assert_eq!(rule(&judge(t.path(), None, &[]), "ibgda").status, Status::Pass);
        fixture::params(t.path(), 0, "RMUseSwI2c=0x01");
        let cs = judge(t.path(), None, &[]);
        let c = rule(&cs, "ibgda");
        assert_eq!(c.status, Status::Warn);
        assert!(c.evidence.contains("EnableStreamMemOPs=1 and PeerMappingOverride=1"), "{c:?}");
        assert!(c.fix.as_deref().unwrap().contains("NVreg_EnableStreamMemOPs=1"));
        fixture::write(t.path(), "dev/gdrdrv", "");
        assert_eq!(rule(&judge(t.path(), None, &[]), "ibgda").status, Status::Pass);
        std::fs::remove_file(t.path().join("proc/driver/nvidia/params")).unwrap();
        std::fs::remove_file(t.path().join("dev/gdrdrv")).unwrap();
        assert_eq!(rule(&judge(t.path(), None, &[]), "ibgda").status, Status::Warn);
    }

    #[test]
    fn a_small_memlock_fails() {
        let t = tempfile::tempdir().unwrap();
        good(t.path());
        fixture::driver(t.path(), false, "5.15.0-122-generic", "65536");
        let c = judge(t.path(), None, &[]);
        let c = rule(&c, "memlock");
        assert_eq!(c.status, Status::Fail);
        assert!(c.evidence.contains("64 KiB") && c.fix.as_deref().unwrap().starts_with("ulimit -l unlimited"));
        // in a container, `ulimit -l` cannot raise it: the container's own flag is the fix
        fixture::write(t.path(), ".dockerenv", "");
        let c = judge(t.path(), None, &[]);
        let c = rule(&c, "memlock");
        assert!(c.evidence.contains("in a docker container"), "{c:?}");
        assert!(c.fix.as_deref().unwrap().starts_with("docker run --ulimit memlock=-1:-1"), "{c:?}");
        fixture::write(t.path(), "proc/self/cgroup", "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-1.scope\n");
        let c = judge(t.path(), None, &[]);
        assert!(rule(&c, "memlock").fix.as_deref().unwrap().contains("LimitMEMLOCK=infinity"), "{c:?}");
    }

    #[test]
    fn a_link_out_of_the_root_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fixture::write(outside.path(), "osrelease", "6.8.0\n");
        std::fs::create_dir_all(t.path().join("proc/sys/kernel")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("osrelease"), t.path().join("proc/sys/kernel/osrelease"))
            .unwrap();
        assert_eq!(read(t.path()).kernel, None);
    }

    /// Device folder names, port files and the kernel release with line
    /// breaks, CR and ESC: every value is a `Line`, so no row holds one raw.
    #[test]
    fn values_read_from_the_host_cannot_break_a_row() {
        let t = tempfile::tempdir().unwrap();
        let forged = "x\n  pass  forged-rule  ok\r\u{1b}[2K";
        fixture::device(
            t.path(),
            &format!("mlx5_0{forged}"),
            "mlx5_core",
            &format!("4: ACTIVE{forged}"),
            forged,
            forged,
            &[],
        );
        fixture::driver(t.path(), true, &format!("6.8.0{forged}"), "unlimited");
        let h = read(t.path());
        assert_eq!(h.devices.len(), 1);
        assert!(h.kernel.as_deref().unwrap().starts_with("6.8.0x\\n"), "{h:?}");
        for c in judge(t.path(), None, &[]) {
            for text in [c.evidence.as_str(), c.fix.as_deref().unwrap_or("")] {
                assert!(!text.contains(['\n', '\r', '\u{1b}']), "{c:?}");
            }
        }
        assert!(rule(&judge(t.path(), None, &[]), "rdma-port").evidence.contains("mlx5_0x\\n  pass  forged-rule"));
    }

    /// More devices, ports and GID entries than the caps: the first ones by
    /// name are read, and the rows say how many were left out.
    #[test]
    fn a_cut_listing_is_named_in_its_row() {
        let t = tempfile::tempdir().unwrap();
        for i in 0..host::MAX_ITEMS + 3 {
            fixture::device(t.path(), &format!("mlx5_{i:03}"), "mlx5_core", "1: DOWN", "Ethernet", "1 Gb/sec", &[]);
        }
        let base = "sys/class/infiniband/mlx5_000/ports";
        for p in 2..=host::MAX_ITEMS + 5 {
            fixture::write(t.path(), &format!("{base}/{p}/state"), "1: DOWN\n");
        }
        fixture::write(t.path(), &format!("{base}/1/state"), "4: ACTIVE\n");
        for g in 0..host::MAX_GIDS + 7 {
            fixture::write(t.path(), &format!("{base}/1/gid_attrs/types/{g}"), "RoCE v2\n");
            fixture::write(t.path(), &format!("{base}/1/gids/{g}"), &format!("{GID_V2}\n"));
        }
        let h = read(t.path());
        assert_eq!((h.devices.len(), h.devices_left_out), (host::MAX_ITEMS, 3));
        assert_eq!(h.devices[0].name, "mlx5_000");
        assert_eq!(h.devices.last().unwrap().name, format!("mlx5_{:03}", host::MAX_ITEMS - 1));
        let d0 = &h.devices[0];
        assert_eq!((d0.ports.len(), d0.ports_left_out), (host::MAX_ITEMS, 5));
        assert_eq!(d0.ports[0].port, "1", "ports in numeric order");
        assert_eq!((d0.ports[0].roce_v2_gids().len(), d0.ports[0].gids_left_out), (host::MAX_GIDS, 7));
        let cs = judge(t.path(), None, &[]);
        let device = &rule(&cs, "rdma-device").evidence;
        assert!(device.contains("read the first 64 of 67 devices in sys/class/infiniband (3 left out)"), "{device}");
        let port = &rule(&cs, "rdma-port").evidence;
        assert!(port.contains("read the first 64 of 69 ports of mlx5_000 (5 left out)"), "{port}");
        let gid = &rule(&cs, "roce-gid").evidence;
        assert!(gid.contains("read the first 256 of 263 GID entries of mlx5_000/1 (7 left out)"), "{gid}");
    }

    #[test]
    fn only_requests_across_nvlink_domains_are_judged() {
        let r = |ep, rr, nodes, gpn, mnnvl| Request {
            ep,
            ranks_per_domain: rr,
            nodes,
            gpus_per_node: gpn,
            mnnvl,
            ..Default::default()
        };
        assert!(spans_domains(&r(Some(16), None, Some(2), Some(8), None)));
        assert!(spans_domains(&r(Some(16), Some(8), None, None, None)));
        assert!(!spans_domains(&r(Some(8), None, Some(1), Some(8), None)));
        assert!(!spans_domains(&r(Some(72), Some(72), Some(18), Some(4), Some(true))), "one NVL72 domain");
        assert!(!spans_domains(&r(None, None, None, None, None)));
    }

    /// Host trees shaped like the kernel's and the drivers' documented layouts, for tests:
    /// - `Documentation/ABI/stable/sysfs-class-infiniband`: `/sys/class/infiniband/<dev>/ports/<n>/`
    ///   `state` ("4: ACTIVE"), `link_layer` ("InfiniBand", "Ethernet"), `rate`
    ///   ("400 Gb/sec (4X NDR)"), `gids/<i>`, `gid_attrs/types/<i>` ("IB/RoCE v1", "RoCE v2"),
    ///   and `device/driver`, a link to the bus driver (`.../drivers/mlx5_core`);
    /// - `Documentation/ABI/testing/sysfs-module`: a loaded module is `/sys/module/<name>`;
    /// - proc(5): `/proc/sys/kernel/osrelease`, `/proc/self/limits` ("Max locked memory");
    /// - NVIDIA's driver README ("Procfs interface"): `/proc/driver/nvidia/version`
    ///   ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64 ..." for the open
    ///   modules), `/proc/driver/nvidia/params` (`EnableStreamMemOPs: 1`, `RegistryDwords: "..."`);
    /// - GDRCopy's README: the `gdrdrv` module creates `/dev/gdrdrv`.
    mod fixture {
        use std::path::Path;

        pub fn write(root: &Path, rel: &str, text: &str) {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }

        /// An RDMA device with one port; `gids`: (index, gid, type).
        pub fn device(
            root: &Path,
            name: &str,
            driver: &str,
            state: &str,
            layer: &str,
            rate: &str,
            gids: &[(u32, &str, &str)],
        ) {
            let base = format!("sys/class/infiniband/{name}");
            let drv = root.join("sys/bus/pci/drivers").join(driver);
            std::fs::create_dir_all(&drv).unwrap();
            std::fs::create_dir_all(root.join(&base).join("device")).unwrap();
            std::os::unix::fs::symlink(
                format!("../../../../bus/pci/drivers/{driver}"),
                root.join(&base).join("device/driver"),
            )
            .unwrap();
            write(root, &format!("{base}/ports/1/state"), &format!("{state}\n"));
            write(root, &format!("{base}/ports/1/link_layer"), &format!("{layer}\n"));
            write(root, &format!("{base}/ports/1/rate"), &format!("{rate}\n"));
            for (i, gid, ty) in gids {
                write(root, &format!("{base}/ports/1/gids/{i}"), &format!("{gid}\n"));
                write(root, &format!("{base}/ports/1/gid_attrs/types/{i}"), &format!("{ty}\n"));
            }
        }

        /// rdma-core's libibverbs.so.1 stand-in, compiled by the system C compiler:
        /// exports `ibv_reg_mr`, and `ibv_reg_dmabuf_mr` when `dmabuf` (rdma-core v34+).
        pub fn ibverbs(root: &Path, dmabuf: bool) {
            let dir = root.join("usr/lib/x86_64-linux-gnu");
            std::fs::create_dir_all(&dir).unwrap();
            let mut c = String::from("int ibv_reg_mr(void) { return 0; }\n");
            if dmabuf {
                c.push_str("int ibv_reg_dmabuf_mr(void) { return 0; }\n");
            }
            let src = root.join("ibverbs.c");
            std::fs::write(&src, c).unwrap();
            let ok = std::process::Command::new("cc")
                .args(["-shared", "-fPIC", "-o"])
                .arg(dir.join("libibverbs.so.1"))
                .arg(&src)
                .status()
                .unwrap();
            assert!(ok.success());
        }

        /// A host with the NVIDIA driver (`open`: the open kernel module), kernel `kernel`, memlock `memlock`.
        pub fn driver(root: &Path, open: bool, kernel: &str, memlock: &str) {
            let kind = if open { "NVIDIA UNIX Open Kernel Module" } else { "NVIDIA UNIX x86_64 Kernel Module" };
            write(root, "proc/driver/nvidia/version", &format!("NVRM version: {kind}  570.124.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar  4 11:18:16 UTC 2025\nGCC version:  gcc version 12.3.0\n"));
            write(root, "proc/sys/kernel/osrelease", &format!("{kernel}\n"));
            write(
                root,
                "proc/self/limits",
                &format!("Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1048576              1048576              files     \nMax locked memory         {memlock}            {memlock}            bytes     \n"),
            );
        }

        pub fn params(root: &Path, memops: u32, dwords: &str) {
            write(
                root,
                "proc/driver/nvidia/params",
                &format!("ResmanDebugLevel: 4294967295\nEnableStreamMemOPs: {memops}\nRegistryDwords: \"{dwords}\"\nRegistryDwordsPerDevice: \"\"\n"),
            );
        }
    }
}
