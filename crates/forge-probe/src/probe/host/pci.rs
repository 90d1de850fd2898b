//! Where a PCI function sits: its `sys/devices/...` path (a device link of
//! sysfs followed inside the host tree), the root complex that path starts
//! at, and its `numa_node`. Owns reading; must not judge.
use std::path::{Component, Path};

use forge_os::fs::{Resolved, Tree};
use forge_os::line::Line;

use super::Pci;

/// The PCI function `rel` leads to (a `device` link of an RDMA device, or an
/// entry of `sys/bus/pci/devices`); None when it does not lead under `sys/devices/pci*`.
pub fn of(tree: &Tree, rel: &Path) -> Option<Pci> {
    let Ok(Resolved::Inside(at)) = tree.resolve(rel) else { return None };
    let below = at.strip_prefix("sys/devices").ok()?;
    let parts: Vec<String> = below
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let root = parts.first().filter(|r| r.starts_with("pci"))?;
    let address = parts.last()?;
    let numa_node = tree.read_text(at.join("numa_node"), 64).ok().and_then(|t| t.trim().parse().ok());
    Some(Pci { address: Line::new(address), numa_node, path: Line::new(parts.join("/")), root: Line::new(root) })
}
