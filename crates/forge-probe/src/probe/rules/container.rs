//! Where the facts were read, for fixes that must apply there: on the host, a
//! module is loaded with `modprobe` and a limit raised with `ulimit`; in a
//! container neither works (`modprobe` cannot load into the host's kernel,
//! `ulimit -l unlimited` fails with "Operation not permitted" above the hard
//! limit the container was started with), so the fix names the container's
//! own knob (`--ulimit memlock=-1:-1`, the runtime's `LimitMEMLOCK`) or the
//! host. Owns the wording of those fixes; must not judge.
use crate::probe::host::HostFacts;
use forge_os::line::Line;

/// Where the reading process ran.
#[derive(Debug, Clone, PartialEq)]
pub enum Where {
    /// On the host itself.
    Host,
    /// In a container of this kind (`docker`, `podman`, `kubernetes`, ...);
    /// `mounted`: the host's /sys and /proc were read under a host root
    /// (`--host-root /host`), so the module facts are the host's.
    Container { kind: Line, mounted: bool },
}

/// Where `h` was read.
pub fn of(h: &HostFacts) -> Where {
    match &h.container {
        None => Where::Host,
        Some(kind) => Where::Container { kind: kind.clone(), mounted: h.root.as_str() != "/" },
    }
}

impl Where {
    /// ` (in a docker container)`, or nothing on the host.
    pub fn here(&self) -> String {
        match self {
            Where::Host => String::new(),
            Where::Container { kind, .. } => format!(" (in a {kind} container)"),
        }
    }
    fn kubernetes(&self) -> bool {
        matches!(self, Where::Container { kind, .. } if kind.as_str() == "kubernetes")
    }
}

/// A command that changes the host's kernel, said so where the facts come from a container.
pub fn on_host(w: &Where, cmd: &str) -> String {
    match w {
        Where::Host => cmd.to_string(),
        _ if w.kubernetes() => {
            format!("on each node (a privileged DaemonSet, or the node image), not in the pod: {cmd}")
        }
        _ => format!("on the host, not in the container (it cannot change the host's kernel): {cmd}"),
    }
}

/// Raise the locked-memory limit where the job runs.
pub fn memlock_fix(w: &Where) -> String {
    match w {
        Where::Host => "ulimit -l unlimited   # for every login and job: limits.conf `* - memlock unlimited`; Slurm: LimitMEMLOCK=infinity in slurmd's unit".into(),
        _ if w.kubernetes() => "the pod's limit is the container runtime's: set LimitMEMLOCK=infinity in containerd's (or CRI-O's) systemd unit on the nodes, or CRI-O's default_ulimits = [\"memlock=-1:-1\"]; `ulimit -l` in the pod cannot raise it".into(),
        Where::Container { kind, .. } if kind.as_str() == "podman" => "podman run --ulimit memlock=-1:-1 ...   # the limit is set when the container starts; `ulimit -l` inside cannot raise it".into(),
        _ => "docker run --ulimit memlock=-1:-1 ...   # (podman: the same flag) the limit is set when the container starts; `ulimit -l` inside cannot raise it".into(),
    }
}

/// Load nvidia_peermem where it can be loaded.
pub fn peermem_fix(w: &Where) -> String {
    match w {
        _ if w.kubernetes() => "load nvidia_peermem on each node: the GPU Operator's driver.rdma.enabled=true, or `sudo modprobe nvidia_peermem` on the node, not in the pod".into(),
        _ => on_host(w, "sudo modprobe nvidia_peermem"),
    }
}

/// No NVIDIA driver where the facts were read.
pub fn driver_fix(w: &Where) -> String {
    match w {
        Where::Host => "run on GPU nodes with the NVIDIA driver loaded (`nvidia-smi` answers), then: sudo modprobe nvidia_peermem".into(),
        Where::Container { mounted: true, .. } => "the host has no NVIDIA driver loaded: run on GPU nodes with the driver loaded (`nvidia-smi` answers on the host), then load nvidia_peermem there".into(),
        _ if w.kubernetes() => "schedule the pod on GPU nodes with the driver (resources.limits nvidia.com/gpu, the NVIDIA device plugin or GPU Operator)".into(),
        _ => "start the container with the host's GPUs and driver: docker run --gpus all ... (NVIDIA Container Toolkit) or podman run --device nvidia.com/gpu=all ... (CDI); the host needs the driver loaded".into(),
    }
}
