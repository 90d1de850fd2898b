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

use anyhow::Result;
use serde::Serialize;

use forge_os::fs::{Kind, Tree};
use forge_os::line::Line;

/// The variables NVSHMEM and NCCL read for RoCE (GID index, traffic class).
pub const ROCE_SETTINGS: [&str; 4] =
    ["NVSHMEM_IB_GID_INDEX", "NCCL_IB_GID_INDEX", "NVSHMEM_IB_TRAFFIC_CLASS", "NCCL_IB_TC"];
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
/// At most this many RDMA devices, and ports per device, are read.
pub const MAX_ITEMS: usize = 64;
/// At most this many GID entries per port are read.
pub const MAX_GIDS: usize = 256;
/// sysfs and procfs files read here are small.
const SMALL: u64 = 64 << 10;
/// A shared library read for its symbols.
const LIBRARY: u64 = 64 << 20;

#[derive(Debug, Clone, Default, Serialize)]
pub struct HostFacts {
    /// The root read (`/` on a real host).
    pub root: Line,
    /// The first [`MAX_ITEMS`] devices of `sys/class/infiniband`, by name.
    pub devices: Vec<RdmaDevice>,
    /// Devices past the cap, not read (0: none).
    #[serde(skip_serializing_if = "is_zero")]
    pub devices_left_out: usize,
    /// `/sys/module/nvidia_peermem` exists.
    pub peermem: bool,
    /// First line of `/proc/driver/nvidia/version`; None: no NVIDIA driver loaded.
    pub nvidia_driver: Option<Line>,
    /// The driver is NVIDIA's open kernel module ("Open Kernel Module" in its version).
    pub open_module: Option<bool>,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: Option<Line>,
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
    /// "Max locked memory" soft limit in bytes; `u64::MAX` for unlimited; None unknown.
    pub memlock: Option<u64>,
    /// The RoCE settings given in the environment (name, value).
    pub settings: Vec<(String, Line)>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RdmaDevice {
    /// The folder's name under `sys/class/infiniband`.
    pub name: Line,
    /// `device/driver`'s link name (`mlx5_core`).
    pub driver: Option<Line>,
    /// The first [`MAX_ITEMS`] ports, by name (shown in numeric order).
    pub ports: Vec<Port>,
    /// Ports past the cap, not read (0: none).
    #[serde(skip_serializing_if = "is_zero")]
    pub ports_left_out: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Port {
    pub port: Line,
    /// `4: ACTIVE`.
    pub state: Option<Line>,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: Option<Line>,
    /// `400 Gb/sec (4X NDR)`.
    pub rate: Option<Line>,
    /// GID indices whose type is `RoCE v2` and whose GID is not all zero.
    pub roce_v2_gids: Vec<u32>,
    /// GID entries past the cap ([`MAX_GIDS`]), not read (0: none).
    #[serde(skip_serializing_if = "is_zero")]
    pub gids_left_out: usize,
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
}

/// The root named by `DEEPEP_FORGE_HOST_ROOT` (for tests), else `/`.
pub fn root() -> PathBuf {
    forge_os::environ::nonempty_os("DEEPEP_FORGE_HOST_ROOT").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"))
}

/// The host root ([`root`]) as the one tree every host fact is read through
/// (a root that is not a folder is bad input, exit 2).
pub fn open() -> Result<Tree> {
    Tree::open(&root(), "host root")
}

/// Read the host through `host` (its root: see [`open`]).
pub fn read(host: &Tree) -> HostFacts {
    let r = Reader { tree: host };
    let (nvidia_driver, open_module) = r.nvidia_version();
    let (stream_memops, peer_mapping_override) = r.params();
    let ibverbs = r.library("libibverbs.so.1");
    let (devices, devices_left_out) = r.devices();
    HostFacts {
        root: Line::new(host.path().to_string_lossy()),
        devices,
        devices_left_out,
        peermem: r.exists("sys/module/nvidia_peermem"),
        nvidia_driver,
        open_module,
        kernel: r.line("proc/sys/kernel/osrelease"),
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

/// The RoCE settings of this process's environment.
fn settings() -> Vec<(String, Line)> {
    ROCE_SETTINGS.iter().filter_map(|n| forge_os::environ::var(n).map(|v| (n.to_string(), Line::new(v)))).collect()
}

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
        RdmaDevice { name: Line::new(name.to_string_lossy()), driver, ports, ports_left_out }
    }

    fn port(&self, at: &Path, n: &OsStr) -> Port {
        let mut roce_v2_gids = Vec::new();
        let (types, gids_left_out) = self.names(&at.join("gid_attrs/types"), MAX_GIDS);
        for i in &types {
            let v2 = self.text(at.join("gid_attrs/types").join(i)).is_some_and(|t| t.trim() == "RoCE v2");
            let gid = self.text(at.join("gids").join(i)).unwrap_or_default();
            let zero = gid.trim().chars().all(|c| c == '0' || c == ':');
            if let (true, false, Some(Ok(i))) = (v2, zero, i.to_str().map(str::parse)) {
                roce_v2_gids.push(i);
            }
        }
        roce_v2_gids.sort_unstable();
        Port {
            port: Line::new(n.to_string_lossy()),
            state: self.line(at.join("state")),
            link_layer: self.line(at.join("link_layer")),
            rate: self.line(at.join("rate")),
            roce_v2_gids,
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
