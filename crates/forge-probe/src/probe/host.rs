//! The host's RDMA path, read without a GPU and without root: sysfs
//! (`/sys/class/infiniband`, `/sys/module/nvidia_peermem`), procfs (the NVIDIA
//! driver's version and parameters, the kernel release, this process's
//! limits), `/dev/gdrdrv`, rdma-core's libibverbs (its dynamic symbols) and
//! the NVSHMEM/NCCL RoCE settings of the environment. Every path is under a
//! root: `/`, or `DEEPEP_FORGE_HOST_ROOT` (for tests: a tree shaped like the
//! kernel's documented layout). Reads are bounded; no link is followed out of
//! the root (the one link whose name is read is `device/driver`). Owns
//! reading; must not judge (`rules::rdma` judges).
use std::path::{Path, PathBuf};

use serde::Serialize;

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
/// At most this many RDMA devices, ports per device and GIDs per port are read.
const MAX_ITEMS: usize = 64;
const MAX_GIDS: usize = 256;
/// sysfs and procfs files read here are small.
const SMALL: u64 = 64 << 10;
/// A shared library read for its symbols.
const LIBRARY: u64 = 64 << 20;

#[derive(Debug, Clone, Default, Serialize)]
pub struct HostFacts {
    /// The root read (`/` on a real host).
    pub root: String,
    pub devices: Vec<RdmaDevice>,
    /// `/sys/module/nvidia_peermem` exists.
    pub peermem: bool,
    /// First line of `/proc/driver/nvidia/version`; None: no NVIDIA driver loaded.
    pub nvidia_driver: Option<String>,
    /// The driver is NVIDIA's open kernel module ("Open Kernel Module" in its version).
    pub open_module: Option<bool>,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: Option<String>,
    /// libibverbs.so.1 found (its path under the root).
    pub ibverbs: Option<String>,
    /// libibverbs exports `ibv_reg_dmabuf_mr` (None: no libibverbs, or unreadable).
    pub ibverbs_dmabuf: Option<bool>,
    /// libmlx5.so.1 found (DOCA transport).
    pub mlx5: Option<String>,
    /// libnixl.so found (NIXL transport).
    pub nixl: Option<String>,
    /// `/proc/driver/nvidia/params`: EnableStreamMemOPs (None: no params file).
    pub stream_memops: Option<bool>,
    /// `PeerMappingOverride=1` in RegistryDwords (None: no params file).
    pub peer_mapping_override: Option<bool>,
    /// `/dev/gdrdrv` exists (GDRCopy).
    pub gdrdrv: bool,
    /// "Max locked memory" soft limit in bytes; `u64::MAX` for unlimited; None unknown.
    pub memlock: Option<u64>,
    /// The RoCE settings given in the environment (name, value).
    pub settings: Vec<(String, String)>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RdmaDevice {
    pub name: String,
    /// `device/driver`'s link name (`mlx5_core`).
    pub driver: Option<String>,
    pub ports: Vec<Port>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Port {
    pub port: String,
    /// `4: ACTIVE`.
    pub state: Option<String>,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: Option<String>,
    /// `400 Gb/sec (4X NDR)`.
    pub rate: Option<String>,
    /// GID indices whose type is `RoCE v2` and whose GID is not all zero.
    pub roce_v2_gids: Vec<u32>,
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

/// Read the host under `root`.
pub fn read(root: &Path) -> HostFacts {
    let r = Reader { root: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()) };
    let (nvidia_driver, open_module) = r.nvidia_version();
    let (stream_memops, peer_mapping_override) = r.params();
    let ibverbs = r.library("libibverbs.so.1");
    HostFacts {
        root: root.display().to_string(),
        devices: r.devices(),
        peermem: r.exists("sys/module/nvidia_peermem"),
        nvidia_driver,
        open_module,
        kernel: r.text("proc/sys/kernel/osrelease").map(|t| t.trim().to_string()),
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
fn settings() -> Vec<(String, String)> {
    ROCE_SETTINGS.iter().filter_map(|n| forge_os::environ::var(n).map(|v| (n.to_string(), v))).collect()
}

struct Reader {
    root: PathBuf,
}

impl Reader {
    /// `rel` under the root, None when it does not exist or resolves out of the root.
    fn inside(&self, rel: &str) -> Option<PathBuf> {
        let p = self.root.join(rel).canonicalize().ok()?;
        p.starts_with(&self.root).then_some(p)
    }
    fn exists(&self, rel: &str) -> bool {
        self.inside(rel).is_some()
    }
    /// The path as shown: relative to a test root, absolute on a real host.
    fn show(&self, p: &Path) -> String {
        match p.strip_prefix(&self.root) {
            Ok(rel) if self.root != Path::new("/") => format!("{}/{}", self.root.display(), rel.display()),
            _ => p.display().to_string(),
        }
    }
    /// A small text file (sysfs, procfs): regular, bounded, never blocking.
    fn text(&self, rel: &str) -> Option<String> {
        let p = self.inside(rel)?;
        forge_os::fs::named::read_text(&p, "host file", SMALL).ok()
    }
    /// The names in a folder, sorted, at most `max`.
    fn names(&self, rel: &str, max: usize) -> Vec<String> {
        let Some(dir) = self.inside(rel) else { return Vec::new() };
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .take(max * 4)
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        v.sort_by_key(|n| (n.parse::<u64>().unwrap_or(u64::MAX), n.clone()));
        v.truncate(max);
        v
    }

    fn devices(&self) -> Vec<RdmaDevice> {
        self.names("sys/class/infiniband", MAX_ITEMS).into_iter().map(|d| self.device(&d)).collect()
    }

    fn device(&self, name: &str) -> RdmaDevice {
        let base = format!("sys/class/infiniband/{name}");
        // The driver is a link into /sys/bus/...: only its name is read.
        let driver = self
            .inside(&format!("{base}/device"))
            .and_then(|d| std::fs::read_link(d.join("driver")).ok())
            .and_then(|l| l.file_name().and_then(|n| n.to_str()).map(str::to_string));
        let ports = self.names(&format!("{base}/ports"), MAX_ITEMS).into_iter().map(|p| self.port(&base, &p)).collect();
        RdmaDevice { name: name.into(), driver, ports }
    }

    fn port(&self, base: &str, n: &str) -> Port {
        let at = format!("{base}/ports/{n}");
        let line = |f: &str| self.text(&format!("{at}/{f}")).map(|t| t.trim().to_string());
        let mut roce_v2_gids = Vec::new();
        for i in self.names(&format!("{at}/gid_attrs/types"), MAX_GIDS) {
            let v2 = self.text(&format!("{at}/gid_attrs/types/{i}")).is_some_and(|t| t.trim() == "RoCE v2");
            let gid = self.text(&format!("{at}/gids/{i}")).unwrap_or_default();
            let zero = gid.trim().chars().all(|c| c == '0' || c == ':');
            if let (true, false, Ok(i)) = (v2, zero, i.parse()) {
                roce_v2_gids.push(i);
            }
        }
        Port { port: n.into(), state: line("state"), link_layer: line("link_layer"), rate: line("rate"), roce_v2_gids }
    }

    fn nvidia_version(&self) -> (Option<String>, Option<bool>) {
        let Some(t) = self.text("proc/driver/nvidia/version") else { return (None, None) };
        let first = t.lines().next().unwrap_or("").trim().to_string();
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

    fn library(&self, name: &str) -> Option<PathBuf> {
        LIB_DIRS.iter().find_map(|d| self.inside(&format!("{d}/{name}")))
    }

    /// Whether the ELF at `path` exports `symbol` in its dynamic symbols.
    fn exports(&self, path: &Path, symbol: &str) -> Option<bool> {
        use object::{Object, ObjectSymbol};
        let bytes = forge_os::fs::named::read_bytes(path, "shared library", LIBRARY).ok()?;
        let file = object::File::parse(&*bytes).ok()?;
        let found = file.dynamic_symbols().any(|s| !s.is_undefined() && s.name().is_ok_and(|n| n == symbol));
        Some(found)
    }
}

/// `6.8.0-45-generic` is at least `major.minor`.
pub fn kernel_at_least(release: &str, major: u32, minor: u32) -> Option<bool> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let a: u32 = it.next()?.parse().ok()?;
    let b: u32 = it.next()?.parse().ok()?;
    Some((a, b) >= (major, minor))
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
#[cfg(test)]
pub mod fixture {
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
