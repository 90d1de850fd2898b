//! The host's RDMA path, read without a GPU and without root: sysfs
//! (`/sys/class/infiniband`, `/sys/module/nvidia_peermem`), procfs (the NVIDIA
//! driver's version and parameters, the kernel release, this process's
//! limits), `/dev/gdrdrv`, rdma-core's libibverbs (its dynamic symbols) and
//! the NVSHMEM/NCCL RoCE settings of the environment. Everything is read
//! through ONE [`Tree`] of the host root (`/`, or `DEEPEP_FORGE_HOST_ROOT` for
//! tests: a tree shaped like the kernel's documented layout): sysfs links are
//! relative and stay inside it, and no link is followed out of it (the one
//! link whose name is read is `device/driver`). Listings (devices, ports, GID
//! entries) are [`Tree::list`]s: sorted by name and capped, and a cut listing
//! says how much it left out, so the facts never depend on directory order.
//! Every value read is a [`Line`] (a folder name or a file's text can hold a
//! line break). Owns reading; must not judge (`rules::rdma` judges).
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use forge_os::fs::{Kind, Tree};
use forge_os::line::Line;

/// The variables NVSHMEM and NCCL read for RoCE (GID index, traffic class).
pub const ROCE_SETTINGS: [&str; 4] =
    ["NVSHMEM_IB_GID_INDEX", "NCCL_IB_GID_INDEX", "NVSHMEM_IB_TRAFFIC_CLASS", "NCCL_IB_TC"];
/// The NCCL and NVSHMEM InfiniBand/RoCE variables whose values the facts keep:
/// only these names, never another variable's value (none of them holds a
/// secret: device lists, indices, levels).
pub const IB_VARIABLES: [&str; 12] = [
    "NCCL_IB_DISABLE",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_HCA",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_SL",
    "NCCL_IB_TC",
    "NCCL_NET_GDR_LEVEL",
    "NVSHMEM_HCA_LIST",
    "NVSHMEM_IB_ENABLE_IBGDA",
    "NVSHMEM_IB_GID_INDEX",
    "NVSHMEM_IB_SL",
    "NVSHMEM_IB_TRAFFIC_CLASS",
];
/// The facts' schema: a reader refuses another.
pub const SCHEMA: &str = "deepep-forge.host-facts/1";
/// Where libraries are looked for under the root (the loader's default paths).
const LIB_DIRS: [&str; 8] = [
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "lib64",
    "lib",
];
/// The RDMA devices' folder under the root.
pub const INFINIBAND: &str = "sys/class/infiniband";
/// The PCI devices' folder under the root (GPUs are found there).
pub const PCI_DEVICES: &str = "sys/bus/pci/devices";
/// At most this many RDMA devices, and ports per device, are read.
pub const MAX_ITEMS: usize = 64;
/// At most this many GID entries per port are read.
pub const MAX_GIDS: usize = 256;
/// At most this many PCI devices are looked at for GPUs.
pub const MAX_PCI: usize = 1024;
/// sysfs and procfs files read here are small.
const SMALL: u64 = 64 << 10;
/// A shared library read for its symbols.
const LIBRARY: u64 = 64 << 20;

/// One node's facts, read once ([`read`]) and judged by every host rule
/// (`rules::rdma`), here or, from a file `host facts` wrote, on another machine.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HostFacts {
    /// [`SCHEMA`].
    pub schema: String,
    /// The root read (`/` on a real host).
    pub root: Line,
    /// `/proc/sys/kernel/hostname`.
    pub hostname: Option<Line>,
    /// The reading process runs in a container (`docker`, `podman`,
    /// `kubernetes`, `containerd`, `lxc` or `container`): from `/.dockerenv`,
    /// `/run/.containerenv` and `/proc/{1,self}/cgroup` under the root. None: not seen.
    #[serde(default)]
    pub container: Option<Line>,
    /// The first [`MAX_ITEMS`] devices of `sys/class/infiniband`, by name.
    pub devices: Vec<RdmaDevice>,
    /// Devices past the cap, not read (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub devices_left_out: usize,
    /// NVIDIA GPUs (vendor 0x10de, class 0x0300/0x0302) of `sys/bus/pci/devices`, by address.
    #[serde(default)]
    pub gpus: Vec<Pci>,
    /// PCI devices past [`MAX_PCI`], not looked at (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pci_left_out: usize,
    /// `/sys/module/nvidia_peermem` exists.
    pub peermem: bool,
    /// First line of `/proc/driver/nvidia/version`; None: no NVIDIA driver loaded.
    pub nvidia_driver: Option<Line>,
    /// The driver's version (`570.124.06`): from that line, else `/sys/module/nvidia/version`.
    #[serde(default)]
    pub driver_version: Option<Line>,
    /// The driver is NVIDIA's open kernel module ("Open Kernel Module" in its version).
    pub open_module: Option<bool>,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: Option<Line>,
    /// `CONFIG_DMA_SHARED_BUFFER` in `/boot/config-<kernel>` (None: no config file to read).
    #[serde(default)]
    pub kernel_dmabuf: Option<bool>,
    /// `/proc/sys/kernel/numa_balancing` (`0` off; any other value runs the balancer).
    #[serde(default)]
    pub numa_balancing: Option<Line>,
    /// libibverbs.so.1 found (its path under the root).
    pub ibverbs: Option<Line>,
    /// libibverbs exports `ibv_reg_dmabuf_mr` (None: no libibverbs, or unreadable).
    pub ibverbs_dmabuf: Option<bool>,
    /// libmlx5.so.1 found (DOCA transport).
    pub mlx5: Option<Line>,
    /// libnixl.so found (NIXL transport).
    pub nixl: Option<Line>,
    /// `/proc/driver/nvidia/params`: EnableStreamMemOPs (None: no params file).
    pub stream_memops: Option<bool>,
    /// `PeerMappingOverride=1` in RegistryDwords (None: no params file).
    pub peer_mapping_override: Option<bool>,
    /// `/dev/gdrdrv` exists (GDRCopy).
    pub gdrdrv: bool,
    /// The soft "Max locked memory" of the process that read the facts
    /// (`/proc/self/limits`: the job's own limit when the job reads them) in
    /// bytes; `u64::MAX` for unlimited; None unknown.
    pub memlock: Option<u64>,
    /// The NCCL/NVSHMEM IB variables set ([`IB_VARIABLES`] only), by name.
    pub settings: BTreeMap<String, Line>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RdmaDevice {
    /// The folder's name under `sys/class/infiniband`.
    pub name: Line,
    /// `device/driver`'s link name (`mlx5_core`).
    pub driver: Option<Line>,
    /// Where the device sits on PCIe (None: its `device` link does not lead to one).
    #[serde(default)]
    pub pci: Option<Pci>,
    /// The first [`MAX_ITEMS`] ports, by name (shown in numeric order).
    pub ports: Vec<Port>,
    /// Ports past the cap, not read (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ports_left_out: usize,
}

/// A PCI function: its address, NUMA node and path from its root complex.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pci {
    /// `0000:17:00.0`.
    pub address: Line,
    /// `numa_node` (-1: the firmware does not say; None: unreadable).
    pub numa_node: Option<i64>,
    /// The device's path under `sys/devices` (`pci0000:15/0000:15:01.0/0000:17:00.0`).
    pub path: Line,
    /// Its root complex: the path's first part (`pci0000:15`).
    pub root: Line,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Port {
    pub port: Line,
    /// `4: ACTIVE`.
    pub state: Option<Line>,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: Option<Line>,
    /// `400 Gb/sec (4X NDR)`.
    pub rate: Option<Line>,
    /// The GID table's entries that are not all zero (by index), with their types.
    #[serde(default)]
    pub gids: Vec<Gid>,
    /// GID entries past the cap ([`MAX_GIDS`]), not read (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gids_left_out: usize,
}

/// One GID table entry: `gids/<index>` and `gid_attrs/types/<index>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Gid {
    pub index: u32,
    /// The entry as the kernel wrote it (`0000:0000:0000:0000:0000:ffff:0a00:0001`).
    pub gid: Line,
    /// `RoCE v2`, `IB/RoCE v1` (None: no type file).
    pub kind: Option<Line>,
}

impl Gid {
    /// The entry as an IPv6 address (a GID is one; None: not a GID).
    pub fn address(&self) -> Option<std::net::Ipv6Addr> {
        self.gid.trim().parse().ok()
    }
    /// A routable RoCE v2 GID: typed `RoCE v2` and a valid, non-zero address.
    pub fn roce_v2(&self) -> bool {
        self.kind.as_deref() == Some("RoCE v2") && self.address().is_some_and(|a| !a.is_unspecified())
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Port {
    pub fn active(&self) -> bool {
        self.state.as_deref().is_some_and(|s| s.contains("ACTIVE"))
    }
    pub fn ethernet(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }
    /// The indices of its routable RoCE v2 GIDs ([`Gid::roce_v2`]), ascending.
    pub fn roce_v2_gids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.gids.iter().filter(|g| g.roce_v2()).map(|g| g.index).collect();
        v.sort_unstable();
        v
    }
    /// Entries typed `RoCE v2` whose value is not a GID (an IPv6 address).
    pub fn invalid_gids(&self) -> Vec<&Gid> {
        self.gids.iter().filter(|g| g.kind.as_deref() == Some("RoCE v2") && g.address().is_none()).collect()
    }
}

/// The root: `--host-root` when given, else `DEEPEP_FORGE_HOST_ROOT` (for tests), else `/`.
pub fn root(given: Option<&Path>) -> PathBuf {
    given.map(Path::to_path_buf).unwrap_or_else(|| {
        forge_os::environ::nonempty_os("DEEPEP_FORGE_HOST_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"))
    })
}

/// The host root ([`root`]) as the one tree every host fact is read through
/// (a root that is not a folder is bad input, exit 2).
pub fn open(given: Option<&Path>) -> Result<Tree> {
    Tree::open(&root(given), "host root")
}

/// Read the host through `host` (its root: see [`open`]).
pub fn read(host: &Tree) -> HostFacts {
    let r = Reader { tree: host };
    let (nvidia_driver, open_module) = r.nvidia_version();
    let (stream_memops, peer_mapping_override) = r.params();
    let ibverbs = r.library("libibverbs.so.1");
    let (devices, devices_left_out) = r.devices();
    let (gpus, pci_left_out) = r.gpus();
    let kernel = r.line("proc/sys/kernel/osrelease");
    HostFacts {
        schema: SCHEMA.into(),
        root: Line::new(host.path().to_string_lossy()),
        hostname: r.line("proc/sys/kernel/hostname"),
        container: r.container(),
        devices,
        devices_left_out,
        gpus,
        pci_left_out,
        peermem: r.exists("sys/module/nvidia_peermem"),
        driver_version: r.driver_version(nvidia_driver.as_deref()),
        nvidia_driver,
        open_module,
        kernel_dmabuf: kernel.as_deref().and_then(|k| r.kernel_config(k, "CONFIG_DMA_SHARED_BUFFER")),
        kernel,
        numa_balancing: r.line("proc/sys/kernel/numa_balancing"),
        ibverbs_dmabuf: ibverbs.as_deref().and_then(|p| r.exports(p, "ibv_reg_dmabuf_mr")),
        ibverbs: ibverbs.map(|p| r.show(&p)),
        mlx5: r.library("libmlx5.so.1").map(|p| r.show(&p)),
        nixl: r.library("libnixl.so").map(|p| r.show(&p)),
        stream_memops,
        peer_mapping_override,
        gdrdrv: r.exists("dev/gdrdrv"),
        memlock: r.memlock(),
        settings: settings(),
    }
}

/// The IB settings of this process's environment ([`IB_VARIABLES`] only).
fn settings() -> BTreeMap<String, Line> {
    IB_VARIABLES.iter().filter_map(|n| forge_os::environ::var(n).map(|v| (n.to_string(), Line::new(v)))).collect()
}

mod pci;
mod render;

pub use render::render_human;

struct Reader<'t> {
    tree: &'t Tree,
}

impl Reader<'_> {
    /// Something is at `rel` (a link counts where it leads to something inside the root).
    fn exists(&self, rel: impl AsRef<Path>) -> bool {
        let rel = rel.as_ref();
        match self.tree.kind(rel) {
            Ok(Kind::Missing) | Err(_) => false,
            Ok(Kind::Link) => self.tree.is_file(rel) || self.tree.is_dir(rel),
            Ok(_) => true,
        }
    }
    /// The path as shown: under a test root, absolute on a real host.
    fn show(&self, rel: &Path) -> Line {
        Line::new(self.tree.join(rel).to_string_lossy())
    }
    /// A small text file (sysfs, procfs): regular, bounded, never blocking.
    fn text(&self, rel: impl AsRef<Path>) -> Option<String> {
        self.tree.read_text(rel, SMALL).ok()
    }
    /// A small text file's text, trimmed, as a value.
    fn line(&self, rel: impl AsRef<Path>) -> Option<Line> {
        self.text(rel).map(|t| Line::new(t.trim()))
    }
    /// The names in the folder `rel`, sorted by name, the first `cap`, and how
    /// many were left out (a folder that is absent or unreadable has none).
    fn names(&self, rel: &Path, cap: usize) -> (Vec<std::ffi::OsString>, usize) {
        match self.tree.list(rel, cap) {
            Ok(l) => {
                let left_out = l.omitted();
                (l.entries.into_iter().map(|e| e.name).collect(), left_out)
            }
            Err(_) => (Vec::new(), 0),
        }
    }

    fn devices(&self) -> (Vec<RdmaDevice>, usize) {
        let (names, left_out) = self.names(Path::new(INFINIBAND), MAX_ITEMS);
        (names.iter().map(|d| self.device(d)).collect(), left_out)
    }

    fn device(&self, name: &OsStr) -> RdmaDevice {
        let base = Path::new(INFINIBAND).join(name);
        // The driver is a link into /sys/bus/...: only its name is read.
        let driver = self
            .tree
            .read_link(base.join("device/driver"))
            .ok()
            .and_then(|l| l.file_name().map(|n| Line::new(n.to_string_lossy())));
        let (mut ports, ports_left_out) = self.names(&base.join("ports"), MAX_ITEMS);
        ports.sort_by_key(|n| numeric(n));
        let ports = ports.iter().map(|p| self.port(&base.join("ports").join(p), p)).collect();
        let pci = pci::of(self.tree, &base.join("device"));
        RdmaDevice { name: Line::new(name.to_string_lossy()), driver, pci, ports, ports_left_out }
    }

    fn port(&self, at: &Path, n: &OsStr) -> Port {
        let (mut types, gids_left_out) = self.names(&at.join("gid_attrs/types"), MAX_GIDS);
        types.sort_by_key(numeric);
        let gids = types
            .iter()
            .filter_map(|i| {
                let index = i.to_str()?.parse().ok()?;
                let gid = self.line(at.join("gids").join(i))?;
                let zero = gid.chars().all(|c| c == '0' || c == ':');
                (!zero).then(|| Gid { index, gid, kind: self.line(at.join("gid_attrs/types").join(i)) })
            })
            .collect();
        Port {
            port: Line::new(n.to_string_lossy()),
            state: self.line(at.join("state")),
            link_layer: self.line(at.join("link_layer")),
            rate: self.line(at.join("rate")),
            gids,
            gids_left_out,
        }
    }

    fn nvidia_version(&self) -> (Option<Line>, Option<bool>) {
        let Some(t) = self.text("proc/driver/nvidia/version") else { return (None, None) };
        let first = Line::new(t.lines().next().unwrap_or("").trim());
        (Some(first), Some(t.contains("Open Kernel Module")))
    }

    /// `EnableStreamMemOPs: 1` and `RegistryDwords: "...PeerMappingOverride=1..."`.
    fn params(&self) -> (Option<bool>, Option<bool>) {
        let Some(t) = self.text("proc/driver/nvidia/params") else { return (None, None) };
        let value = |key: &str| {
            t.lines()
                .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == key).map(|(_, v)| v.trim().to_string()))
        };
        let memops = value("EnableStreamMemOPs").is_some_and(|v| v == "1");
        let dwords = value("RegistryDwords").unwrap_or_default();
        let pmo = dwords.trim_matches('"').split(';').any(|kv| kv.trim().replace(' ', "") == "PeerMappingOverride=1");
        (Some(memops), Some(pmo))
    }

    /// The soft "Max locked memory" of `/proc/self/limits` (the process's own RLIMIT_MEMLOCK).
    fn memlock(&self) -> Option<u64> {
        let t = self.text("proc/self/limits")?;
        let line = t.lines().find(|l| l.starts_with("Max locked memory"))?;
        let soft = line["Max locked memory".len()..].split_whitespace().next()?;
        if soft == "unlimited" {
            Some(u64::MAX)
        } else {
            soft.parse().ok()
        }
    }

    /// The NVIDIA GPUs among the first [`MAX_PCI`] PCI devices, and how many devices were left out.
    fn gpus(&self) -> (Vec<Pci>, usize) {
        let (names, left_out) = self.names(Path::new(PCI_DEVICES), MAX_PCI);
        let gpus = names
            .iter()
            .map(|n| Path::new(PCI_DEVICES).join(n))
            .filter(|at| {
                let vendor = self.text(at.join("vendor")).is_some_and(|v| v.trim() == "0x10de");
                let class = self.text(at.join("class")).unwrap_or_default();
                vendor && (class.trim().starts_with("0x0302") || class.trim().starts_with("0x0300"))
            })
            .filter_map(|at| pci::of(self.tree, &at))
            .collect();
        (gpus, left_out)
    }

    /// The container the reading process runs in, as far as the root shows it.
    fn container(&self) -> Option<Line> {
        let cgroup = |rel: &str| self.text(rel).unwrap_or_default();
        let groups = format!("{}\n{}", cgroup("proc/1/cgroup"), cgroup("proc/self/cgroup"));
        let named = ["kubepods", "libpod", "docker", "containerd", "lxc"].into_iter().find(|k| groups.contains(k));
        let kind = match named {
            Some("kubepods") => Some("kubernetes"),
            Some("libpod") => Some("podman"),
            Some(k) => Some(k),
            None if self.exists("run/.containerenv") => Some("podman"),
            None if self.exists(".dockerenv") => Some("docker"),
            None => None,
        };
        kind.map(Line::new)
    }

    /// The driver's version: the first `N.N[.N]` word of the version line, else `/sys/module/nvidia/version`.
    fn driver_version(&self, line: Option<&str>) -> Option<Line> {
        let word = line.and_then(|l| {
            l.split_whitespace().find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        });
        word.map(Line::new).or_else(|| self.line("sys/module/nvidia/version"))
    }

    /// `key` in `/boot/config-<release>`: `=y`/`=m` true, absent or `is not set` false; None: no file.
    fn kernel_config(&self, release: &str, key: &str) -> Option<bool> {
        if release.contains('/') || release.starts_with('.') {
            return None;
        }
        let t = self.tree.read_text(Path::new("boot").join(format!("config-{release}")), 1 << 20).ok()?;
        Some(t.lines().any(|l| l == format!("{key}=y") || l == format!("{key}=m")))
    }

    /// `name` in the first of the loader's default folders that holds it (relative to the root).
    fn library(&self, name: &str) -> Option<PathBuf> {
        LIB_DIRS.iter().map(|d| Path::new(d).join(name)).find(|rel| self.tree.is_file(rel))
    }

    /// Whether the ELF at `rel` exports `symbol` in its dynamic symbols.
    fn exports(&self, rel: &Path, symbol: &str) -> Option<bool> {
        use object::{Object, ObjectSymbol};
        let bytes = self.tree.read(rel, LIBRARY).ok()?;
        let file = object::File::parse(&*bytes).ok()?;
        let found = file.dynamic_symbols().any(|s| !s.is_undefined() && s.name().is_ok_and(|n| n == symbol));
        Some(found)
    }
}

/// A port or GID folder name in numeric order (`2` before `10`; other names after, by name).
fn numeric(name: &std::ffi::OsString) -> (u64, Vec<u8>) {
    use std::os::unix::ffi::OsStrExt;
    let n = name.to_str().and_then(|n| n.parse::<u64>().ok()).unwrap_or(u64::MAX);
    (n, name.as_bytes().to_vec())
}

/// `6.8.0-45-generic` is at least `major.minor`.
pub fn kernel_at_least(release: &str, major: u32, minor: u32) -> Option<bool> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let a: u32 = it.next()?.parse().ok()?;
    let b: u32 = it.next()?.parse().ok()?;
    Some((a, b) >= (major, minor))
}
