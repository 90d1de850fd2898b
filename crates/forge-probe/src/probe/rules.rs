//! The static verdict: the rules of docs/design.md ("What a binary can do") applied to what `wheel`/`env`
//! read and to a topology request. Owns every rule id, status, evidence line
//! and fix; must not read files or run anything.
use forge_model::cuda_arch::{self, Runs, Target};
use forge_model::pins::{Arch, Pins, Transport};
use forge_model::topology::{Gpu, Request};
use forge_model::verdict::Check;

use super::elf::{demangle_prefix, is_std_symbol, ElfFacts};
use super::env::{EnvFacts, Versions};
use super::wheel::{local_label, platform_arch, Extension, WheelFacts};

pub mod affinity;
pub mod container;
pub mod environment;
pub mod loader;
pub mod platform;
pub mod rdma;
pub mod topology;
pub use topology::topology_checks;

/// DeepEP's abort message in single-node builds.
pub const SINGLE_NODE_STRING: &str =
    "Inter-node communication is not supported. Please rebuild with HYBRID_EP_MULTINODE flag";
pub const MULTINODE_DEFINE: &str = "-DHYBRID_EP_BUILD_MULTINODE_ENABLE";
/// Largest NVLink domain (GB200/GB300 NVL72).
pub const MAX_RANKS_PER_DOMAIN: u32 = 72;
/// Multinode JIT code handles at most 32 remote domains.
pub const MAX_REMOTE_DOMAINS: u32 = 32;

/// What the binary shows about how it was built (docs/design.md, "Evidence in the binary").
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Evidence {
    /// Built with HYBRID_EP_MULTINODE (None: no signal either way, or signals disagree).
    pub multinode: Option<bool>,
    pub transport: Option<Transport>,
    /// The signals seen, for the evidence column.
    pub signals: Vec<String>,
    /// `deep_ep/backend/nccl/` shipped by a single-node binary: built in a reused tree.
    pub leaked_nccl_backend: bool,
    /// The arch list baked into hybrid_ep_cpp for its JIT (a `SM_ARCH=<list>` string).
    pub sm_arch: Option<String>,
    /// RDMA_CORE_HOME as baked into the JIT flags (` -I<home>/include`).
    pub rdma_core_home: Option<String>,
    /// deep_ep_cpp (EPv2: deep_ep._C) links NVSHMEM (NEEDED libnvshmem_host): DeepEP's classic
    /// Buffer (EPv2: its legacy methods) has its internode and low-latency kernels. None: no
    /// such extension to read.
    pub nvshmem: Option<bool>,
    /// An EPv2 wheel (DeepEP `main`: one `deep_ep._C`, no hybrid_ep_cpp).
    pub epv2: bool,
    /// EPv2's deep_ep._C links NCCL (NEEDED libnccl): the NCCL Gin backend. None: not EPv2.
    pub nccl: Option<bool>,
}

pub fn hybrid_ep(b: &WheelFacts) -> Option<&Extension> {
    b.extensions.iter().find(|e| e.module == "hybrid_ep_cpp")
}

/// The extension whose GPU code runs the kernels: HybridEP's `hybrid_ep_cpp`,
/// else EPv2's `deep_ep/_C`, else `deep_ep_cpp` (DeepEP 1.x).
pub fn kernel_extension(b: &WheelFacts) -> Option<&Extension> {
    hybrid_ep(b)
        .or_else(|| b.extensions.iter().find(|e| is_deep_ep_c(e)))
        .or_else(|| b.extensions.iter().find(|e| e.module == "deep_ep_cpp"))
}

/// DeepEP's build interface a wheel was built from, by its extensions:
/// `main` (EPv2: `deep_ep/_C`), `hybrid-ep` (`hybrid_ep_cpp`), `main-1.x`
/// (`deep_ep_cpp` alone); None when it has none of them.
pub fn interface_of(b: &WheelFacts) -> Option<forge_model::interface::Branch> {
    use forge_model::interface::Branch;
    let has = |m: &str| b.extensions.iter().any(|e| e.module == m);
    if b.extensions.iter().any(is_deep_ep_c) {
        Some(Branch::Main)
    } else if has("hybrid_ep_cpp") {
        Some(Branch::HybridEp)
    } else if has("deep_ep_cpp") {
        Some(Branch::MainLegacy)
    } else {
        None
    }
}

/// EPv2's one extension, `deep_ep/_C.*.so` (a wheel member, or installed under `.../deep_ep/`).
pub fn is_deep_ep_c(e: &Extension) -> bool {
    e.module == "_C" && (e.path.starts_with("deep_ep/") || e.path.contains("/deep_ep/_C."))
}

pub fn evidence(b: &WheelFacts) -> Evidence {
    let epv2 = interface_of(b) == Some(forge_model::interface::Branch::Main);
    let core = b
        .extensions
        .iter()
        .find(|e| if epv2 { is_deep_ep_c(e) } else { e.module == "deep_ep_cpp" })
        .and_then(|e| e.elf.as_ref().ok());
    let nvshmem = core.map(|elf| elf.needs("libnvshmem_host"));
    let nccl = core.filter(|_| epv2).map(|elf| elf.needs("libnccl"));
    let mut ev = Evidence { nvshmem, epv2, nccl, ..Default::default() };
    let Some(Ok(elf)) = hybrid_ep(b).map(|e| &e.elf) else { return ev };
    let mut doca = Vec::new();
    for lib in ["libibverbs", "libmlx5", "libnvidia-ml"] {
        if elf.needs(lib) {
            doca.push(format!("NEEDED {lib}"));
        }
    }
    let ibv = elf.undefined.iter().filter(|s| s.starts_with("ibv_") || s.starts_with("mlx5dv_")).count();
    if ibv > 0 {
        doca.push(format!("{ibv} undefined ibv_*/mlx5dv_*"));
    }
    for sym in ["RDMACoordinator", "create_and_place_qps"] {
        if let Some(s) = elf.defines(sym) {
            doca.push(format!("defines {}", demangle_prefix(s)));
        }
    }
    let mut nixl = Vec::new();
    if elf.needs("libnixl") {
        nixl.push("NEEDED libnixl".to_string());
    }
    if let Some(s) = elf.defines("NIXLCoordinator") {
        nixl.push(format!("defines {}", demangle_prefix(s)));
    }
    if elf.has_string("-DUSE_NIXL").is_some() {
        nixl.push("string -DUSE_NIXL".into());
    }
    let define = elf.has_string(MULTINODE_DEFINE).is_some();
    let single = elf.has_string(SINGLE_NODE_STRING).is_some();
    let nccl_files = b.members.iter().any(|m| m.contains("deep_ep/backend/nccl/"));
    let multi_signals = define || !doca.is_empty() || !nixl.is_empty();
    if define {
        ev.signals.push(format!("string \"{MULTINODE_DEFINE}\""));
    }
    ev.signals.extend(doca.iter().cloned());
    ev.signals.extend(nixl.iter().cloned());
    if single {
        ev.signals.push("string \"Inter-node communication is not supported...\"".into());
    }
    ev.multinode = match (multi_signals, single) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    };
    if ev.multinode == Some(true) {
        ev.transport = if !nixl.is_empty() { Some(Transport::Nixl) } else { Some(Transport::Doca) };
    }
    ev.leaked_nccl_backend = ev.multinode == Some(false) && nccl_files;
    ev.sm_arch = elf.strings.iter().find_map(|s| s.strip_prefix("SM_ARCH=")).map(str::to_string);
    ev.rdma_core_home = baked_rdma_home(elf);
    ev
}

/// The cubins a list names (`sm_100a`) against those a binary has; a family
/// `sm_100f` cubin may be recorded without its flag, so it also matches `sm_100`.
fn same_cubins(want: &[String], have: &[String]) -> bool {
    let plain = |s: &str| s.strip_suffix('f').unwrap_or(s).to_string();
    let matches = |w: &String, h: &String| w == h || (w.ends_with('f') && plain(w) == plain(h));
    want.len() == have.len()
        && want.iter().all(|w| have.iter().any(|h| matches(w, h)))
        && have.iter().all(|h| want.iter().any(|w| matches(w, h)))
}

/// The `rebuild: ...` fix for a variant that matches the request.
fn rebuild(gpu: Option<Gpu>, multinode: bool, pins: Option<&Pins>) -> String {
    let family = gpu.map(family_of).filter(|f| !f.is_empty());
    // A variant of this GPU's family, else one whose arch list runs natively on it (cuda_arch).
    let from_pins = pins.and_then(|p| {
        let same_build = || p.variants.iter().filter(|v| v.multinode == multinode);
        same_build()
            .find(|v| v.topology.as_ref().is_some_and(|t| t.gpu.iter().any(|g| Some(family_of(*g)) == family)))
            .or_else(|| {
                let g = gpu?;
                same_build().find(|v| v.cuda_arch_list.on(g.cc()) == forge_model::cuda_arch::Runs::Native)
            })
            .map(|v| v.name.clone())
    });
    // The user's own pins file: named on the command line when it is not the default,
    // and never a variant it does not have.
    let flag = pins
        .filter(|p| p.path != std::path::Path::new(forge_model::pins::DEFAULT_PATH))
        .map(|p| format!(" --pins {}", forge_os::printer::shell_word(&p.path.display().to_string())))
        .unwrap_or_default();
    if let (Some(p), None) = (pins, &from_pins) {
        return format!(
            "{} has no {} variant for this GPU: add a [[variant]] with multinode = {multinode} and its topology (pins.md), then rebuild: deepep-forge build-wheel{flag} --variant <its name>",
            p.path.display(),
            if multinode { "multi-node" } else { "single-node" }
        );
    }
    let name = from_pins.unwrap_or_else(|| match (family, multinode) {
        (Some("gb200"), false) => "gb200-nvl72".into(),
        (Some("gb300"), false) => "gb300-nvl72".into(),
        (Some("b200"), _) => "b200-multinode".into(),
        (Some(f), true) => format!("{f}-multinode"),
        (Some(f), false) => f.into(),
        (None, true) => "<gpu>-multinode".into(),
        (None, false) => "<variant>".into(),
    });
    format!("rebuild: deepep-forge build-wheel{flag} --variant {name}")
}

/// The variant family name of a GPU kind (`h100` for H100/H200/sm_90).
fn family_of(g: Gpu) -> &'static str {
    match g {
        Gpu::H100 | Gpu::H200 | Gpu::Sm(90) => "h100",
        Gpu::B200 | Gpu::Sm(100) => "b200",
        Gpu::Gb200 => "gb200",
        Gpu::B300 | Gpu::Sm(103) => "b300",
        Gpu::Gb300 => "gb300",
        Gpu::Sm(_) => "",
    }
}

fn elfs(b: &WheelFacts) -> impl Iterator<Item = (&Extension, &ElfFacts)> {
    b.extensions.iter().filter_map(|e| e.elf.as_ref().ok().map(|f| (e, f)))
}

fn short(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// What every binary rule sees: the binary, the installed environment
/// (`--python`), the evidence, the request and pins.toml.
#[derive(Clone, Copy)]
pub struct Bx<'a> {
    pub b: &'a WheelFacts,
    pub env: Option<&'a EnvFacts>,
    /// torch, NVSHMEM and NCCL of `--python`'s environment.
    pub versions: Option<&'a Versions>,
    pub ev: &'a Evidence,
    pub request: Option<&'a Request>,
    pub pins: Option<&'a Pins>,
    pub gpu: Option<Gpu>,
}

impl Bx<'_> {
    /// The ELF machine of the first readable extension.
    fn elf_arch(&self) -> Option<Arch> {
        elfs(self.b).find_map(|(_, f)| f.arch())
    }
    fn tag_arch(&self) -> Option<Arch> {
        self.b.platform.as_deref().and_then(platform_arch)
    }
    fn hep(&self) -> Option<&ElfFacts> {
        hybrid_ep(self.b).and_then(|e| e.elf.as_ref().ok())
    }
    fn modules(&self) -> Vec<&str> {
        self.b.extensions.iter().map(|e| short(&e.path)).collect()
    }
}

/// One rule about the binary: its id and its rows (none when it does not apply).
pub type BinaryRule = (&'static str, fn(&Bx) -> Vec<Check>);

/// Every binary rule, in the order the verdict shows them (docs/probe.md names each id).
pub const BINARY_RULES: [BinaryRule; 29] = [
    ("record", record),
    ("extension-elf", extension_elf),
    ("interface", interface),
    ("hybrid-ep-present", hybrid_ep_present),
    ("elf-machine", elf_machine),
    ("target-arch", target_arch),
    ("host-arch", host_arch),
    ("cubin-arch", cubin_arch),
    ("jit-sm-arch", jit_sm_arch),
    ("cuda-driver-link", cuda_driver_link),
    ("libstdcxx", libstdcxx),
    ("runpath", runpath),
    ("provenance", provenance),
    ("fork", fork),
    ("reused-tree", reused_tree),
    ("pin", pin),
    ("needed-libs", needed_libs),
    ("rdma-core-home", rdma_core_home),
    ("nvshmem", nvshmem),
    ("jit-cuda-home", jit_cuda_home),
    ("jit-cache", jit_cache),
    ("epv2-jit", epv2_jit),
    ("build-environment", environment::build_environment),
    ("torch-abi", environment::torch_abi),
    ("nvshmem-version", environment::nvshmem_version),
    ("nccl-version", environment::nccl_version),
    ("loaded-libraries", loader::loaded_libraries),
    ("platform-tag", platform::platform_tag),
    ("glibc", platform::glibc),
];

/// What the static probe read: the binary, the installed environment (`--python`
/// alone), the environment's versions (any `--python`) and the evidence.
#[derive(Clone, Copy)]
pub struct Subject<'a> {
    pub b: &'a WheelFacts,
    pub env: Option<&'a EnvFacts>,
    pub versions: Option<&'a Versions>,
    pub ev: &'a Evidence,
}

/// Rules about the binary alone (the request only names the GPU and the dispatcher).
pub fn binary_checks(s: Subject, request: Option<&Request>, pins: Option<&Pins>) -> Vec<Check> {
    let Subject { b, env, versions, ev } = s;
    let cx = Bx { b, env, versions, ev, request, pins, gpu: request.and_then(|r| r.gpu) };
    BINARY_RULES.iter().flat_map(|(_, rule)| rule(&cx)).collect()
}

/// `cubin-arch`: one row per extension.
fn cubin_arch(cx: &Bx) -> Vec<Check> {
    cubin_checks(cx.b, cx.gpu, cx.ev, cx.pins)
}

/// `provenance`: the provenance file against the evidence.
fn provenance(cx: &Bx) -> Vec<Check> {
    vec![provenance_check(cx.b, cx.ev, cx.hep())]
}

/// `fork`: a wheel whose provenance records a fork says where it stands on its
/// upstream; a wheel of a repository that is not a fork shows nothing.
fn fork(cx: &Bx) -> Vec<Check> {
    let Some(Ok(p)) = &cx.b.provenance else { return Vec::new() };
    let Some(f) = &p.source.fork else { return Vec::new() };
    let on = match (&f.merge_base, f.ahead) {
        (Some(b), Some(n)) => format!("{}@{} (+{n})", f.upstream, &b[..b.len().min(7)]),
        _ => format!("{}@{} (no merge base found within the fetched history)", f.upstream, f.upstream_branch),
    };
    vec![Check::pass("fork", format!("fork: {}@{} on {on}", p.source.repo, p.source.short))]
}

/// `pin` (with `--pins`): the wheel's revision against pins.toml.
fn pin(cx: &Bx) -> Vec<Check> {
    let Some(pins) = cx.pins else { return Vec::new() };
    vec![pin_check(cx.b, cx.elf_arch().or(cx.tag_arch()), pins, cx.gpu, cx.ev)]
}

/// The environment, for HybridEP's JIT rules: none for an EPv2 wheel (no HybridEP; `epv2-jit` is its own).
fn hybrid_ep_env<'a>(cx: &Bx<'a>) -> Option<&'a EnvFacts> {
    cx.env.filter(|_| interface_of(cx.b) != Some(forge_model::interface::Branch::Main))
}

/// `jit-cuda-home` (with `--python`).
fn jit_cuda_home(cx: &Bx) -> Vec<Check> {
    hybrid_ep_env(cx).map(|e| jit_cuda_home_check(&e.jit)).into_iter().collect()
}

/// `jit-cache` (with `--python`).
fn jit_cache(cx: &Bx) -> Vec<Check> {
    hybrid_ep_env(cx).map(|e| jit_cache_check(&e.jit)).into_iter().collect()
}

/// `epv2-jit` (with `--python`, an EPv2 wheel): `import deep_ep` asserts a CUDA home, and the
/// kernels are compiled at run time by its nvcc (>= 12.3) and read with its cuobjdump, with
/// `-I <nccl root>/include`. Without them the import or the first kernel fails: a FAIL
/// before any import, naming what is missing and the registry packages that provide it.
fn epv2_jit(cx: &Bx) -> Vec<Check> {
    let Some(e) = cx.env.filter(|_| interface_of(cx.b) == Some(forge_model::interface::Branch::Main)) else {
        return Vec::new();
    };
    let j = &e.epv2_jit;
    // The CUDA minor of the build (its nvcc), else 13.0: the packages of that minor.
    let minor = recorded_cuda(cx).unwrap_or_else(|| "13.0".into());
    let major = minor.split('.').next().unwrap_or("13").to_string();
    let toolkit = format!(
        "pip install \"nvidia-cuda-nvcc=={minor}.*\" \"nvidia-cuda-crt=={minor}.*\" \"nvidia-cuda-cccl=={minor}.*\" \"nvidia-cuda-runtime=={minor}.*\" nvidia-cuda-cuobjdump && export CUDA_HOME=<site-packages>/nvidia/cu{major}"
    );
    let mut out = Vec::new();
    out.push(match &j.cuda_home {
        None => Check::fail(
            "epv2-jit",
            "no CUDA home (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda): `import deep_ep` (EPv2) asserts one, and its kernels are compiled at run time by its nvcc and cuobjdump",
        )
        .fix(toolkit),
        Some((h, from)) if !j.missing.is_empty() => Check::fail(
            "epv2-jit",
            format!("the CUDA home {h} ({from}) lacks {}: EPv2 compiles its kernels at run time with it", j.missing.join(", ")),
        )
        .fix(toolkit),
        Some((h, from)) => Check::pass(
            "epv2-jit",
            format!("CUDA home {h} ({from}): nvcc {} and cuobjdump for EPv2's run-time JIT", j.nvcc.as_deref().unwrap_or("?")),
        ),
    });
    let nccl = match cx.versions.and_then(|v| v.nccl.as_ref()) {
        Some((name, v)) => format!("pip install \"{name}=={v}\""),
        None => format!("pip install nvidia-nccl-cu{major}"),
    };
    out.push(match &j.nccl_include {
        Some(i) => Check::pass("epv2-jit", format!("NCCL headers for the JIT's -I: {i}/nccl.h")),
        None => Check::fail(
            "epv2-jit",
            "no NCCL headers (<nccl root>/include/nccl.h from EP_NCCL_ROOT_DIR, NCCL_DIR or the environment's nvidia-nccl package): EPv2's JIT compiles with -I <nccl root>/include",
        )
        .fix(format!("{nccl} (its wheel ships include/nccl.h), or export EP_NCCL_ROOT_DIR=<an NCCL root with include/nccl.h>")),
    });
    out
}

/// The CUDA minor (`13.0`) the wheel's provenance records it was built with.
fn recorded_cuda(cx: &Bx) -> Option<String> {
    let Some(Ok(p)) = &cx.b.provenance else { return None };
    let c = p.toolchain.environment.as_ref()?.cuda.as_deref()?;
    let mut it = c.split('.');
    Some(format!("{}.{}", it.next()?, it.next()?))
}

/// `record`.
fn record(cx: &Bx) -> Vec<Check> {
    let (b, is_wheel) = (cx.b, cx.env.is_none());
    let mut out = Vec::new();
    // RECORD.
    let what = if is_wheel { "wheel members" } else { "installed files" };
    out.push(if b.record_problems.is_empty() {
        Check::pass("record", format!("{} {what} verified against RECORD (sha256 and size)", b.record_verified))
    } else {
        let n = b.record_problems.len();
        Check::fail(
            "record",
            format!("{n} problem(s): {}", b.record_problems.iter().take(3).cloned().collect::<Vec<_>>().join("; ")),
        )
        .fix(if is_wheel {
            "the wheel was changed after it was built: rebuild it, or fetch it again"
        } else {
            "reinstall deep_ep: files changed after installation"
        })
    });

    out
}

/// `extension-elf`.
fn extension_elf(cx: &Bx) -> Vec<Check> {
    let b = cx.b;
    let mut out = Vec::new();
    for e in &b.extensions {
        if let Err(why) = &e.elf {
            out.push(
                Check::fail("extension-elf", format!("{}: {why}", e.path))
                    .fix("the member is not a loadable extension: rebuild the wheel"),
            );
        }
    }
    out
}

/// `interface`.
fn interface(cx: &Bx) -> Vec<Check> {
    let interface = interface_of(cx.b);
    let modules = cx.modules();
    let mut out = Vec::new();
    out.push(match interface {
        Some(forge_model::interface::Branch::Main) => Check::pass(
            "interface",
            format!("DeepEP `main` (EPv2) wheel: deep_ep._C ({}); its rules apply (record, extension-elf, elf-machine, target-arch, cubin, NVSHMEM/NCCL linkage); the HybridEP rules (hybrid-ep-present, multinode, transport, JIT) do not", modules.join(", ")),
        ),
        Some(forge_model::interface::Branch::HybridEp) => Check::pass(
            "interface",
            format!("DeepEP `hybrid-ep` wheel ({}): every rule applies, HybridEP's included", modules.join(", ")),
        ),
        Some(forge_model::interface::Branch::MainLegacy) => Check::pass(
            "interface",
            format!("DeepEP `main` before EPv2 ({}): no HybridEP; the deep_ep_cpp rules apply", modules.join(", ")),
        ),
        None => Check::warn(
            "interface",
            format!("none of DeepEP's extensions (deep_ep_cpp, hybrid_ep_cpp, deep_ep._C) found: {}", if modules.is_empty() { "no extension".into() } else { modules.join(", ") }),
        ),
    });
    out
}

/// `hybrid-ep-present`.
fn hybrid_ep_present(cx: &Bx) -> Vec<Check> {
    let (b, request, interface) = (cx.b, cx.request, interface_of(cx.b));
    let modules = cx.modules();
    let wants_hybridep = request.is_some_and(|r| r.dispatcher.as_deref().is_none_or(|d| d == "hybridep"));
    let asks_hybridep = request.is_some_and(|r| r.dispatcher.as_deref() == Some("hybridep"));
    let mut out = Vec::new();
    out.push(match hybrid_ep(b) {
        Some(e) => Check::pass("hybrid-ep-present", format!("{} present", short(&e.path))),
        None if interface == Some(forge_model::interface::Branch::Main) && !asks_hybridep => Check::skip(
            "hybrid-ep-present",
            "not applicable: an EPv2 wheel (deep_ep._C) has no HybridEP, and the request does not ask for the hybridep dispatcher",
        ),
        None => {
            let c = if wants_hybridep { Check::fail } else { Check::warn };
            c("hybrid-ep-present", format!(
                "no hybrid_ep_cpp extension (found: {}): this DeepEP revision has no HybridEP",
                if modules.is_empty() { "none".into() } else { modules.join(", ") }
            ))
            .fix("pin a revision of DeepEP's hybrid-ep branch (deepep-forge pin set REV), then rebuild: deepep-forge build-wheel --variant <variant>")
        }
    });

    out
}

/// `elf-machine`.
fn elf_machine(cx: &Bx) -> Vec<Check> {
    let Bx { b, ev, pins, gpu, .. } = *cx;
    let mut out = Vec::new();
    let machines: Vec<(String, String)> =
        elfs(b).map(|(e, f)| (short(&e.path).to_string(), f.machine.clone())).collect();
    let elf_arch = elfs(b).find_map(|(_, f)| f.arch());
    let distinct: std::collections::BTreeSet<&str> = machines.iter().map(|(_, m)| m.as_str()).collect();
    // Every tag of the set: the first that names another architecture than the ELF machine.
    let tag_archs: Vec<Arch> =
        b.platform.as_deref().map(|p| p.split('.').filter_map(platform_arch).collect()).unwrap_or_default();
    let tag_arch = tag_archs.iter().copied().find(|t| Some(*t) != elf_arch).or(tag_archs.first().copied());
    let listing = machines.iter().map(|(p, m)| format!("{p} {m}")).collect::<Vec<_>>().join(", ");
    out.push(match (distinct.len(), b.platform.as_deref(), tag_arch) {
        (0, _, _) => Check::skip("elf-machine", "no readable extension"),
        (n, _, _) if n > 1 => Check::fail("elf-machine", format!("extensions disagree: {listing}"))
            .fix("rebuild the wheel on one architecture"),
        (_, Some(p), Some(t)) if Some(t) != elf_arch => Check::fail(
            "elf-machine",
            format!("platform tag {p} names {t} but the ELF machine is {listing}: mislabelled wheel"),
        )
        .fix(format!(
            "do not install it under this name; {}",
            rebuild(gpu.filter(|g| g.host_arch() == Some(t)), ev.multinode.unwrap_or(false), pins)
        )),
        (_, Some(p), _) => Check::pass("elf-machine", format!("platform tag {p} and ELF machine agree ({listing})")),
        (_, None, _) => Check::warn("elf-machine", format!("no platform tag to compare with ({listing})")),
    });
    out
}

/// `target-arch`.
fn target_arch(cx: &Bx) -> Vec<Check> {
    let Bx { ev, pins, gpu, .. } = *cx;
    let elf_arch = cx.elf_arch();
    let mut out = Vec::new();
    out.push(match (gpu, gpu.and_then(Gpu::host_arch), elf_arch) {
        (None, _, _) => Check::warn("target-arch", "unknown: no GPU named (pass --gpu or --preset)"),
        (Some(g), None, _) => {
            Check::warn("target-arch", format!("unknown: {g} does not fix the host CPU architecture"))
        }
        (_, _, None) => Check::warn("target-arch", "unknown: no readable extension"),
        (Some(g), Some(want), Some(have)) if want == have => {
            Check::pass("target-arch", format!("{g} hosts are {want}, the binary is {have}"))
        }
        (Some(g), Some(want), Some(have)) => Check::fail(
            "target-arch",
            format!("{g} hosts are {want} but the binary is {have}"),
        )
        .fix(rebuild(Some(g), ev.multinode.unwrap_or(false), pins)),
    });

    out
}

/// `host-arch`.
fn host_arch(cx: &Bx) -> Vec<Check> {
    let (env, elf_arch) = (cx.env, cx.elf_arch());
    let mut out = Vec::new();
    // Host machine vs binary (installed environments run here).
    if let Some(env) = env {
        let m = &env.interpreter.machine;
        out.push(match (m.parse::<Arch>().ok(), elf_arch) {
            (Some(h), Some(a)) if h == a => Check::pass("host-arch", format!("this machine ({m}) runs {a} binaries")),
            (Some(_), Some(a)) => Check::fail("host-arch", format!("this machine is {m} but the extensions are {a}"))
                .fix("install the wheel built for this architecture"),
            _ => Check::warn("host-arch", format!("unknown: machine {m}")),
        });
    }

    out
}

/// `jit-sm-arch`.
fn jit_sm_arch(cx: &Bx) -> Vec<Check> {
    let Bx { b, ev, pins, gpu, .. } = *cx;
    let mut out = Vec::new();
    // HybridEP's JIT compiles for the SM_ARCH baked from TORCH_CUDA_ARCH_LIST. Real
    // DeepEP passes it as `std::string(SM_ARCH)`: gcc builds strings of up to 15
    // bytes in code (SSO), so "9.0" is not in .rodata; the stamped provenance
    // records the same TORCH_CUDA_ARCH_LIST (and the provenance rule checks it
    // against the cubins).
    let prov_list = b
        .provenance
        .as_ref()
        .and_then(|p| p.as_ref().ok())
        .map(|p| p.variant.cuda_arch_list.clone())
        .filter(|l| !l.is_empty());
    let sm_arch = ev.sm_arch.clone().map(|l| (l, "baked")).or_else(|| prov_list.map(|l| (l, "provenance's")));
    if let Some(g) = gpu {
        out.push(match sm_arch {
            Some((list, how)) => {
                // The JIT compiles cubins for SM_ARCH: one must run natively (a 10.0 list serves 10.3).
                let has = list
                    .parse::<forge_model::pins::ArchList>()
                    .map(|l| l.on(g.cc()) == Runs::Native)
                    .unwrap_or(false);
                if has {
                    Check::pass("jit-sm-arch", format!("{how} SM_ARCH \"{list}\" covers {g} (sm_{})", g.sm()))
                } else {
                    Check::fail(
                        "jit-sm-arch",
                        format!(
                            "{how} SM_ARCH \"{list}\" does not cover {g} (sm_{}): HybridEP's JIT compiles for the wrong GPU",
                            g.sm()
                        ),
                    )
                    .fix(rebuild(Some(g), ev.multinode.unwrap_or(false), pins))
                }
            }
            None => Check::skip(
                "jit-sm-arch",
                "SM_ARCH is not readable from this binary (short strings are built in code) and there is no provenance: cubin-arch stands in (both come from TORCH_CUDA_ARCH_LIST)",
            ),
        });
    }

    out
}

/// `cuda-driver-link`.
fn cuda_driver_link(cx: &Bx) -> Vec<Check> {
    let b = cx.b;
    let mut out = Vec::new();
    // Driver symbols without libcuda.
    for (e, f) in elfs(b) {
        let cu: Vec<&String> = f.undefined.iter().filter(|s| is_driver_symbol(s)).collect();
        if !cu.is_empty() && !f.needs("libcuda.so") {
            out.push(
                Check::fail("cuda-driver-link", format!(
                    "{}: {} undefined driver symbols ({}...) but no NEEDED libcuda.so.1: import fails with an undefined symbol",
                    short(&e.path),
                    cu.len(),
                    cu.iter().take(3).map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                ))
                .fix("link against a libcuda.so stub that defines the driver API (an empty stub is dropped by --as-needed), then rebuild"),
            );
        }
    }
    if !out.iter().any(|c| c.rule == "cuda-driver-link") {
        out.push(Check::pass("cuda-driver-link", "every extension that uses cu* driver symbols NEEDs libcuda.so.1"));
    }

    out
}

/// `libstdcxx`.
fn libstdcxx(cx: &Bx) -> Vec<Check> {
    let b = cx.b;
    let mut out = Vec::new();
    // Static libstdc++.
    for (e, f) in elfs(b) {
        let std_syms: Vec<&String> = f.defined.iter().filter(|s| is_std_symbol(s)).collect();
        if !f.needs("libstdc++") && std_syms.len() > 5 {
            out.push(
                Check::fail("libstdcxx", format!(
                    "{}: no NEEDED libstdc++.so.6 and {} exported std:: symbols (e.g. {}): statically linked libstdc++, measured to crash HybridEPBuffer",
                    short(&e.path),
                    std_syms.len(),
                    demangle_prefix(std_syms[0])
                ))
                .fix("rebuild with the system g++ (no -static-libstdc++)"),
            );
        }
    }
    if !out.iter().any(|c| c.rule == "libstdcxx") {
        out.push(Check::pass("libstdcxx", "libstdc++ is linked dynamically"));
    }

    out
}

/// `runpath`.
fn runpath(cx: &Bx) -> Vec<Check> {
    let Bx { b, env, ev, .. } = *cx;
    let mut out = Vec::new();
    // RUNPATH / RPATH.
    // RDMA_CORE_HOME/lib is meant to exist where the wheel runs (the JIT needs it too).
    let rdma_lib = b
        .provenance
        .as_ref()
        .and_then(|p| p.as_ref().ok())
        .and_then(|p| p.variant.rdma_core_home.clone())
        .or_else(|| ev.rdma_core_home.clone())
        .map(|h| format!("{}/lib", h.trim_end_matches('/')));
    match env {
        Some(env) if !env.missing_runpaths.is_empty() => {
            for (ext, dir) in &env.missing_runpaths {
                out.push(
                    Check::warn("runpath", format!("{}: RUNPATH {dir} does not exist on this machine", short(ext)))
                        .fix(
                            "set LD_LIBRARY_PATH to where those libraries live here, or rebuild with the run-time path",
                        ),
                );
            }
        }
        Some(_) => out.push(Check::pass("runpath", "every RUNPATH/RPATH directory exists here")),
        None => {
            let mut build_paths = Vec::new();
            for (e, f) in elfs(b) {
                for d in f.runpath.iter().chain(&f.rpath) {
                    if d.starts_with('/') && !is_system_dir(d) && Some(d) != rdma_lib.as_ref() {
                        build_paths.push(format!("{} {d}", short(&e.path)));
                    }
                }
            }
            out.push(if build_paths.is_empty() {
                Check::pass("runpath", "no build-machine RUNPATH/RPATH")
            } else {
                Check::warn(
                    "runpath",
                    format!("absolute build-machine paths that will not exist at run time: {}", build_paths.join(", ")),
                )
                .fix("set LD_LIBRARY_PATH on the run machine (e.g. to its nvshmem lib dir), or patch the RUNPATH")
            });
        }
    }

    out
}

/// `reused-tree`.
fn reused_tree(cx: &Bx) -> Vec<Check> {
    let ev = cx.ev;
    let mut out = Vec::new();
    if ev.leaked_nccl_backend {
        out.push(
            Check::warn(
                "reused-tree",
                "single-node binary ships deep_ep/backend/nccl/: built in a source tree reused after a DOCA build",
            )
            .fix("build in a fresh checkout"),
        );
    }

    out
}

/// `needed-libs`.
fn needed_libs(cx: &Bx) -> Vec<Check> {
    let Some(env) = cx.env else { return Vec::new() };
    let unresolved: Vec<(&str, String)> = env
        .needed
        .iter()
        .filter(|r| r.found.is_none())
        .map(|r| (r.library.as_str(), format!("{} (by {})", r.library, short(&r.extension))))
        .collect();
    // The driver's own libraries come with the driver (the NVIDIA Container
    // Toolkit mounts them into a container): with --driver-at-run-time (an
    // image build) their absence is said, not failed.
    let (driver, missing): (Vec<_>, Vec<_>) =
        unresolved.into_iter().partition(|(lib, _)| env.driver_at_run_time && DRIVER_LIBS.contains(lib));
    let driver: Vec<String> = driver.into_iter().map(|(_, s)| s).collect();
    let missing: Vec<String> = missing.into_iter().map(|(_, s)| s).collect();
    let check = if !missing.is_empty() {
        Check::fail(
            "needed-libs",
            format!("not found via RPATH, LD_LIBRARY_PATH, RUNPATH, ld.so.cache or default dirs: {}", missing.join(", ")),
        )
        .fix(if missing.iter().any(|u| u.starts_with("libnvshmem_host")) {
            "install nvidia-nvshmem-cu13 into this environment (the wheel's RUNPATH looks in site-packages/nvidia/nvshmem/lib), or point LD_LIBRARY_PATH at an NVSHMEM lib folder"
        } else {
            "install the missing libraries or point LD_LIBRARY_PATH at them"
        })
    } else if !driver.is_empty() {
        Check::warn(
            "needed-libs",
            format!(
                "{} of {} NEEDED libraries resolve; not here: {}: the NVIDIA driver's, which this environment gets at run time (--driver-at-run-time: the driver's install or the NVIDIA Container Toolkit provides it)",
                env.needed.len() - driver.len(),
                env.needed.len(),
                driver.join(", ")
            ),
        )
    } else {
        Check::pass("needed-libs", format!("all {} NEEDED libraries resolve", env.needed.len()))
    };
    vec![check]
}

/// Libraries the NVIDIA driver installs (not CUDA, not a wheel).
const DRIVER_LIBS: &[&str] = &["libcuda.so.1", "libnvidia-ml.so.1"];

/// `rdma-core-home`.
fn rdma_core_home(cx: &Bx) -> Vec<Check> {
    let Bx { b, ev, .. } = *cx;
    if cx.env.is_none() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if ev.transport == Some(Transport::Doca) {
        let home = b
            .provenance
            .as_ref()
            .and_then(|p| p.as_ref().ok())
            .and_then(|p| p.variant.rdma_core_home.clone())
            .or_else(|| ev.rdma_core_home.clone());
        out.push(match home {
            Some(h) if super::disk::is_dir(std::path::Path::new(&h)) => {
                Check::pass("rdma-core-home", format!("baked RDMA_CORE_HOME {h} exists"))
            }
            Some(h) => Check::fail(
                "rdma-core-home",
                format!("baked RDMA_CORE_HOME {h} does not exist here: the HybridEP JIT cannot find rdma-core"),
            )
            .fix(format!("install rdma-core at {h}, or rebuild with this machine's RDMA_CORE_HOME")),
            None => Check::warn("rdma-core-home", "DOCA build but the baked RDMA_CORE_HOME could not be read"),
        });
    }
    out
}

/// `nvshmem`.
fn nvshmem(cx: &Bx) -> Vec<Check> {
    let b = cx.b;
    let Some(env) = cx.env else { return Vec::new() };
    let mut out = Vec::new();
    // deep_ep_cpp links NVSHMEM by its soname (DeepEP's setup.py: `-l:libnvshmem_host.so.3`
    // from the pip package, `-l:libnvshmem_host.so` from NVSHMEM_DIR; NEEDED is the
    // soname either way). HybridEP does not use NVSHMEM. Nothing opens the
    // unversioned name at run time: the loader needs only NEEDED (needed-libs).
    let nvshmem: Vec<&super::env::Resolved> =
        env.needed.iter().filter(|r| r.library.starts_with("libnvshmem_host.so")).collect();
    let has_deep_ep_cpp = b.extensions.iter().any(|e| short(&e.path).starts_with("deep_ep_cpp"));
    if let Some(r) = nvshmem.first() {
        if let Some(found) = &r.found {
            out.push(Check::pass(
                "nvshmem",
                format!(
                    "{} NEEDs {}: {found} (internode and low-latency kernels available)",
                    short(&r.extension),
                    r.library
                ),
            ));
        }
    } else if has_deep_ep_cpp {
        out.push(Check::skip(
                "nvshmem",
                "deep_ep_cpp was built without NVSHMEM: DeepEP's internode and low-latency Buffer modes are disabled (HybridEP does not need it)",
            ));
    }
    out
}

/// HybridEP's run-time JIT (csrc/hybrid_ep/jit/compiler.cu): `$CUDA_HOME/bin/nvcc`
/// with `-I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lcudart`, no fallback when
/// CUDA_HOME is unset; output under `<cache>/.deepep/hybrid_ep/jit/proc-<pid>`.
fn jit_cuda_home_check(jit: &super::env::JitEnv) -> Check {
    match (&jit.cuda_home, jit.missing.is_empty()) {
        (None, _) => Check::fail(
            "jit-cuda-home",
            "CUDA_HOME is unset in this environment: HybridEP's JIT runs `$CUDA_HOME/bin/nvcc`, i.e. /bin/nvcc, and its first dispatch fails",
        )
        .fix("export CUDA_HOME=<a CUDA toolkit with bin/nvcc, include/ and lib64/libcudart.so> in the job's environment (usually /usr/local/cuda)"),
        (Some(h), true) => Check::pass(
            "jit-cuda-home",
            format!("CUDA_HOME={h} has bin/nvcc, include/cuda_runtime.h and lib64/libcudart for HybridEP's JIT"),
        ),
        (Some(h), false) => Check::fail(
            "jit-cuda-home",
            format!("CUDA_HOME={h} lacks {}: HybridEP compiles its kernels at run time with it", jit.missing.join(", ")),
        )
        .fix("point CUDA_HOME at a full CUDA toolkit (nvcc, headers, lib64/libcudart.so)"),
    }
}

/// `<cache>/.deepep/hybrid_ep/jit` must be creatable (HYBRID_EP_CACHE_DIR, else the passwd home, else /tmp).
fn jit_cache_check(jit: &super::env::JitEnv) -> Check {
    let target = format!("{}/.deepep/hybrid_ep/jit", jit.cache_dir.trim_end_matches('/'));
    let from = match jit.cache_from.as_str() {
        "HYBRID_EP_CACHE_DIR" => "from HYBRID_EP_CACHE_DIR",
        "home" => "the user's home from passwd, HYBRID_EP_CACHE_DIR unset",
        _ => "/tmp: no HYBRID_EP_CACHE_DIR, no home in passwd",
    };
    match &jit.cache_writable {
        Some((dir, true)) => Check::pass("jit-cache", format!("{target} ({from}) can be created: {dir} is writable")),
        Some((dir, false)) => Check::fail(
            "jit-cache",
            format!("{target} ({from}) cannot be created: {dir} is not a folder this user can write"),
        )
        .fix("export HYBRID_EP_CACHE_DIR to a writable folder (node-local disk) in the job's environment"),
        None => Check::fail("jit-cache", format!("{target} ({from}): no existing parent folder"))
            .fix("export HYBRID_EP_CACHE_DIR to a writable folder in the job's environment"),
    }
}

/// `cu` followed by an upper-case letter: the driver API (`cuInit`), not the runtime (`cudaMalloc`).
pub fn is_driver_symbol(s: &str) -> bool {
    s.strip_prefix("cu").and_then(|r| r.chars().next()).is_some_and(|c| c.is_ascii_uppercase())
}

fn is_system_dir(d: &str) -> bool {
    let d = d.trim_end_matches('/');
    ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/local/cuda/lib64", "/usr/local/cuda/lib"]
        .contains(&d)
        || d.starts_with("/usr/lib/") && d.ends_with("-linux-gnu")
        || d.starts_with("/lib/") && d.ends_with("-linux-gnu")
}

/// RDMA_CORE_HOME as the binary bakes it: ` -I<home>/include` in the JIT flags.
fn baked_rdma_home(hep: &ElfFacts) -> Option<String> {
    let s = hep.has_string(MULTINODE_DEFINE)?;
    let after = s.split(" -I").nth(1)?;
    Some(after.split_whitespace().next()?.strip_suffix("/include")?.to_string())
}

/// One `cubin-arch` row per extension, judged by CUDA's rules (`cuda_arch::runs`):
/// a cubin that runs on the GPU (pass), PTX the driver would JIT (warn), or nothing.
fn cubin_checks(b: &WheelFacts, gpu: Option<Gpu>, ev: &Evidence, pins: Option<&Pins>) -> Vec<Check> {
    let mut out = Vec::new();
    for (e, f) in elfs(b) {
        let (c, p) = f.archs();
        let problems: Vec<String> =
            f.fatbins.iter().flat_map(|(n, fb)| fb.problems.iter().map(move |p| format!("{n}: {p}"))).collect();
        let seen = format!(
            "{}: cubin [{}]{}",
            short(&e.path),
            c.join(" "),
            if p.is_empty() { String::new() } else { format!(" ptx [{}]", p.join(" ")) }
        );
        let fix = || rebuild(gpu, ev.multinode.unwrap_or(false), pins);
        out.push(if !problems.is_empty() {
            Check::fail("cubin-arch", format!("{seen}; malformed fatbin: {}", problems.join("; ")))
                .fix("rebuild the wheel")
        } else if f.device_code().is_none() {
            Check::fail("cubin-arch", format!("{}: no .nv_fatbin/__nv_relfatbin section: no GPU code", short(&e.path)))
                .fix(fix())
        } else {
            match gpu {
                None => Check::warn("cubin-arch", format!("unknown: no GPU named; {seen}")),
                Some(g) => cubin_verdict(g, f.targets(), &seen, fix),
            }
        });
    }
    if out.is_empty() {
        out.push(Check::skip("cubin-arch", "no readable extension"));
    }
    out
}

/// The `cubin-arch` row of one extension whose GPU code is `targets`, for `g`.
fn cubin_verdict(g: Gpu, targets: Vec<Target>, seen: &str, fix: impl Fn() -> String) -> Check {
    let cc = g.cc();
    let base = targets.iter().map(|t| t.cc).filter(|b| b.major == cc.major && *b <= cc).min();
    let needs = || format!("the arch list must {}", cuda_arch::would_serve(cc, base));
    match cuda_arch::best(targets, cc) {
        (Runs::Native, Some(t)) if t.cc == cc => {
            Check::pass("cubin-arch", format!("{} cubin for {g}: {seen}", t.name()))
        }
        (Runs::Native, Some(t)) => Check::pass(
            "cubin-arch",
            format!("{} cubin for {g}: runs on compute capability {cc} (same major, newer minor): {seen}", t.name()),
        ),
        (Runs::Jit, Some(t)) => Check::warn(
            "cubin-arch",
            format!(
                "{g} (sm_{}) would JIT from {} PTX only (a slow first call; measured elsewhere to fail): {seen}; {}",
                g.sm(),
                t.name(),
                needs()
            ),
        )
        .fix(fix()),
        _ => Check::fail(
            "cubin-arch",
            format!("no code that runs on {g} (compute capability {cc}): {seen}; {}", needs()),
        )
        .fix(fix()),
    }
}

fn provenance_check(b: &WheelFacts, ev: &Evidence, hep: Option<&ElfFacts>) -> Check {
    let p = match &b.provenance {
        None => return Check::skip("provenance", "no deepep-forge provenance file (not built by deepep-forge)"),
        Some(Err(e)) => {
            return Check::fail("provenance", format!("unreadable provenance: {e}"))
                .fix("rebuild: deepep-forge build-wheel --variant <variant>")
        }
        Some(Ok(p)) => p,
    };
    let mut disagree = Vec::new();
    if let Some(m) = ev.multinode {
        if m != p.variant.multinode {
            disagree.push(format!(
                "says multinode={} but the binary is {}",
                p.variant.multinode,
                if m { "multinode" } else { "single-node" }
            ));
        }
    }
    if let (Some(t), Some(pt)) = (ev.transport, p.variant.transport.as_deref()) {
        if t.as_str() != pt {
            disagree.push(format!("says transport {pt} but the binary uses {}", t.as_str()));
        }
    }
    let elf_arch = elfs(b).find_map(|(_, f)| f.arch());
    if let Some(a) = elf_arch {
        if a.as_str() != p.variant.arch {
            disagree.push(format!("says arch {} but the ELF machine is {a}", p.variant.arch));
        }
    }
    if let (Ok(list), Some(h)) = (p.variant.cuda_arch_list.parse::<forge_model::pins::ArchList>(), hep) {
        // Exact targets, `a` included: a 10.0a list with a plain sm_100 cubin disagrees.
        let mut want: Vec<String> = list.0.iter().map(|a| a.sm()).collect();
        want.sort();
        want.dedup();
        let (have, _) = h.archs();
        if h.device_code().is_some() && !same_cubins(&want, &have) {
            disagree.push(format!(
                "says cuda_arch_list {} but hybrid_ep_cpp has cubins [{}]",
                p.variant.cuda_arch_list,
                have.join(" ")
            ));
        }
    }
    if let (Some(home), Some(h), Some(Transport::Doca)) = (&p.variant.rdma_core_home, hep, ev.transport) {
        let want = format!("{}/lib", home.trim_end_matches('/'));
        if !h.runpath.iter().chain(&h.rpath).any(|d| *d == want) {
            disagree
                .push(format!("says RDMA_CORE_HOME {home} but hybrid_ep_cpp's RUNPATH is [{}]", h.runpath.join(":")));
        }
    }
    if let Some(label) = b.version.as_deref().and_then(local_label) {
        // `<short>` exact, `<short>.p<set digest>` patched (patches::label).
        let want = forge_model::patches::label("", &p.source.short, &p.source.patches);
        let want = want.trim_start_matches('+');
        if forge_model::patches::normal_local(label) != want {
            disagree.push(format!(
                "says +{want} ({}) but the version label is +{label}",
                forge_model::patches::describe(&p.source.patches)
            ));
        }
    }
    if disagree.is_empty() {
        Check::pass(
            "provenance",
            format!(
                "variant {} ({}, {}, {}) at {} ({}) agrees with the binary",
                p.variant.name,
                p.variant.arch,
                p.variant.cuda_arch_list,
                if p.variant.multinode { "multinode" } else { "single-node" },
                p.source.short,
                forge_model::patches::describe(&p.source.patches)
            ),
        )
    } else {
        Check::fail(
            "provenance",
            format!("provenance and binary disagree (mislabelled or tampered wheel): {}", disagree.join("; ")),
        )
        .fix(format!("do not use this wheel; rebuild: deepep-forge build-wheel --variant {}", p.variant.name))
    }
}

fn pin_check(b: &WheelFacts, arch: Option<Arch>, pins: &Pins, gpu: Option<Gpu>, ev: &Evidence) -> Check {
    let Some(arch) = arch else { return Check::warn("pin", "unknown: the wheel's architecture is unknown") };
    let Some(pin) = pins.pins.get(&arch) else {
        return Check::warn("pin", format!("{} has no [pin.{arch}]", pins.path.display()));
    };
    let prov_rev = b.provenance.as_ref().and_then(|p| p.as_ref().ok()).map(|p| p.source.rev.clone());
    let label = b.version.as_deref().and_then(local_label);
    let fix = || rebuild(gpu, ev.multinode.unwrap_or(false), Some(pins));
    match (prov_rev, label) {
        (Some(rev), _) if rev == pin.rev => Check::pass("pin", format!("provenance rev {rev} is the {arch} pin")),
        (Some(rev), _) => {
            Check::fail("pin", format!("built from {rev}, but {} pins {arch} to {}", pins.path.display(), pin.rev))
                .fix(fix())
        }
        (None, Some(l)) if forge_model::patches::normal_local(l) == forge_model::patches::normal_local(pin.short()) => {
            Check::pass("pin", format!("version label +{l} matches the {arch} pin {}", pin.short()))
        }
        (None, Some(l)) => Check::fail(
            "pin",
            format!("version label +{l}, but {} pins {arch} to {} (+{})", pins.path.display(), pin.rev, pin.short()),
        )
        .fix(fix()),
        (None, None) => Check::warn(
            "pin",
            format!("version {} carries no revision (built from a tarball?)", b.version.as_deref().unwrap_or("?")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ep: u32, r: u32, gpn: u32, mnnvl: bool, gpu: Gpu) -> Request {
        Request {
            source: "test".into(),
            ep: Some(ep),
            nodes: None,
            gpus_per_node: Some(gpn),
            ranks_per_domain: Some(r),
            mnnvl: Some(mnnvl),
            gpu: Some(gpu),
            dispatcher: None,
            defaults_follow_ep: false,
            notes: vec![],
        }
    }
    fn status(cs: &[Check], rule: &str) -> forge_model::verdict::Status {
        cs.iter().find(|c| c.rule == rule).unwrap_or_else(|| panic!("no {rule}")).status
    }
    use forge_model::verdict::Status::*;

    /// `cubin-arch` by CUDA's rules: plain and family cubins run on a newer minor, `a` ones
    /// only on their own GPU, PTX is a warning, `a` PTX does not carry forward.
    #[test]
    fn cubin_arch_follows_cudas_compatibility_rules() {
        use forge_model::cuda_arch::{Cc, Code};
        let t = |sm: u32, suffix: Option<char>, code: Code| Target { cc: Cc::from_sm(sm), suffix, code };
        let judge = |g: Gpu, ts: Vec<Target>| {
            let c = cubin_verdict(g, ts, "x.so: cubin [..]", || "rebuild: deepep-forge build-wheel --variant v".into());
            (c.status, c.evidence.as_str().to_string(), c.fix.map(|f| f.as_str().to_string()))
        };
        let (st, ev, _) = judge(Gpu::Gb300, vec![t(100, None, Code::Cubin)]);
        assert_eq!(st, Pass, "{ev}");
        assert!(
            ev.contains("sm_100 cubin for gb300: runs on compute capability 10.3 (same major, newer minor)"),
            "{ev}"
        );
        assert_eq!(judge(Gpu::B300, vec![t(100, Some('f'), Code::Cubin)]).0, Pass);
        assert_eq!(judge(Gpu::Sm(103), vec![t(103, Some('a'), Code::Cubin)]).0, Pass);
        let (st, ev, fix) = judge(Gpu::Gb300, vec![t(100, Some('a'), Code::Cubin), t(100, Some('a'), Code::Ptx)]);
        assert_eq!(st, Fail, "{ev}");
        assert!(ev.contains("the arch list must add 10.3 or 10.3a, or use 10.0f"), "{ev}");
        assert_eq!(fix.as_deref(), Some("rebuild: deepep-forge build-wheel --variant v"), "the fix stays a command");
        let (st, ev, _) = judge(Gpu::B200, vec![t(90, None, Code::Cubin), t(90, None, Code::Ptx)]);
        assert_eq!(st, Warn, "{ev}");
        assert!(ev.contains("would JIT from compute_90 PTX only"), "{ev}");
        assert_eq!(judge(Gpu::H100, vec![t(100, None, Code::Cubin), t(103, None, Code::Cubin)]).0, Fail);
        assert_eq!(judge(Gpu::B200, vec![t(103, None, Code::Cubin)]).0, Fail);
    }

    #[test]
    fn the_provenance_compares_exact_cubins() {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(same_cubins(&v(&["sm_100a"]), &v(&["sm_100a"])));
        assert!(!same_cubins(&v(&["sm_100a"]), &v(&["sm_100"])), "a 10.0a list with a plain cubin disagrees");
        assert!(same_cubins(&v(&["sm_100f"]), &v(&["sm_100"])), "nvcc records a family cubin without its flag");
        assert!(!same_cubins(&v(&["sm_103", "sm_90"]), &v(&["sm_90"])));
    }

    fn tc(r: &Request, ev: Option<&Evidence>, pins: Option<&Pins>) -> Vec<Check> {
        topology_checks(r, ev, pins).0
    }

    /// `probe --run`'s gpu-arch reads the cubins of the extension that runs the
    /// kernels: HybridEP's, else EPv2's `deep_ep/_C` (on the H200 it read none
    /// for an EPv2 wheel and failed "cubins for []"), else DeepEP 1.x's.
    #[test]
    fn the_kernel_extension_is_found_for_every_interface() {
        let ext = |path: &str| Extension {
            path: path.into(),
            module: crate::probe::wheel::module_of(path).unwrap(),
            elf: Err("not read".into()),
        };
        let facts = |paths: &[&str]| WheelFacts {
            file: "w.whl".into(),
            name: None,
            platform: None,
            version: None,
            provenance: None,
            record_problems: vec![],
            record_verified: 0,
            extensions: paths.iter().map(|p| ext(p)).collect(),
            members: vec![],
            image_wheel: None,
            platform_audit: None,
        };
        let k = |paths: &[&str]| kernel_extension(&facts(paths)).map(|e| e.path.clone());
        let hybrid = ["deep_ep_cpp.cpython-312-x86_64-linux-gnu.so", "hybrid_ep_cpp.cpython-312-x86_64-linux-gnu.so"];
        assert_eq!(k(&hybrid).as_deref(), Some(hybrid[1]));
        assert_eq!(
            k(&["deep_ep/_C.cpython-312-x86_64-linux-gnu.so"]).as_deref(),
            Some("deep_ep/_C.cpython-312-x86_64-linux-gnu.so")
        );
        assert_eq!(
            k(&["/s/deep_ep/_C.cpython-312-x86_64-linux-gnu.so"]).as_deref(),
            Some("/s/deep_ep/_C.cpython-312-x86_64-linux-gnu.so")
        );
        assert_eq!(k(&[hybrid[0]]).as_deref(), Some(hybrid[0]));
        assert_eq!(k(&["other/_C.cpython-312-x86_64-linux-gnu.so"]), None);
    }

    #[test]
    fn a_rebuild_fix_names_only_the_users_variants_and_their_pins_file() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/demo-pins.toml"))
            .unwrap();
        let path = std::path::Path::new("tests/fixtures/demo-pins.toml");
        let mut pins = Pins::parse(&text, path).unwrap();
        pins.variants.retain(|v| !v.multinode);
        let fix = rebuild(Some(Gpu::H100), true, Some(&pins));
        assert!(!fix.contains("h100-multinode"), "a variant the pins lack: {fix}");
        assert!(fix.contains("tests/fixtures/demo-pins.toml has no multi-node variant"), "{fix}");
        assert!(fix.contains("build-wheel --pins tests/fixtures/demo-pins.toml --variant <its name>"), "{fix}");
    }

    #[test]
    fn domain_rules() {
        let single = Evidence { multinode: Some(false), ..Default::default() };
        let multi = Evidence { multinode: Some(true), transport: Some(Transport::Doca), ..Default::default() };
        let c = tc(&req(16, 8, 8, false, Gpu::H100), Some(&single), None);
        assert_eq!(status(&c, "multinode-build"), Fail);
        assert!(c
            .iter()
            .any(|c| c.fix.as_deref() == Some("rebuild: deepep-forge build-wheel --variant h100-multinode")));
        assert_eq!(status(&tc(&req(16, 8, 8, false, Gpu::H100), Some(&multi), None), "multinode-build"), Pass);
        assert_eq!(status(&tc(&req(12, 8, 8, false, Gpu::H100), None, None), "ep-divisible"), Fail);
        assert_eq!(status(&tc(&req(16, 8, 4, false, Gpu::H100), None, None), "ranks-per-node"), Fail);
        assert_eq!(status(&tc(&req(16, 16, 8, true, Gpu::H100), None, None), "mnnvl-system"), Fail);
        assert_eq!(status(&tc(&req(72, 72, 4, true, Gpu::Gb200), Some(&single), None), "multinode-build"), Pass);
        assert_eq!(status(&tc(&req(80, 80, 4, true, Gpu::Gb200), None, None), "ranks-per-domain-max"), Fail);
        assert_eq!(status(&tc(&req(8 * 34, 8, 8, false, Gpu::H100), None, None), "domains-max"), Fail);
        assert_eq!(status(&tc(&req(8 * 33, 8, 8, false, Gpu::H100), None, None), "domains-max"), Pass);
        // EP 16 on one 8-GPU node: two domains of R 8 need a second node (and a multinode build).
        let one_node = Request { nodes: Some(1), ..req(16, 8, 8, false, Gpu::H200) };
        let c = tc(&one_node, Some(&single), None);
        assert_eq!(status(&c, "ep-fits-nodes"), Fail);
        let row = c.iter().find(|c| c.rule == "ep-fits-nodes").unwrap();
        assert!(row.evidence.contains("EP 16 (2 NVLink domains of R 8) needs 2 nodes"), "{}", row.evidence);
        assert_eq!(row.fix.as_deref(), Some("run on 2 nodes with a multinode build, or lower EP to 8"));
        assert_eq!(status(&c, "multinode-build"), Fail);
        let two = Request { nodes: Some(2), ..req(16, 8, 8, false, Gpu::H200) };
        assert_eq!(status(&tc(&two, Some(&multi), None), "ep-fits-nodes"), Pass);
        assert_eq!(status(&tc(&req(16, 8, 8, false, Gpu::H200), None, None), "ep-fits-nodes"), Skip);
    }

    #[test]
    fn epv2_rules_replace_hybridep_rules_and_need_nccl_across_nodes() {
        let two_nodes =
            Request { nodes: Some(2), ranks_per_domain: None, mnnvl: None, ..req(16, 8, 8, false, Gpu::H100) };
        let no_nccl = Evidence { epv2: true, nccl: Some(false), nvshmem: Some(false), ..Default::default() };
        let c = tc(&two_nodes, Some(&no_nccl), None);
        assert_eq!(status(&c, "epv2-internode"), Fail);
        assert_eq!(status(&c, "epv2-legacy-internode"), Warn);
        assert_eq!(status(&c, "ep-fits-nodes"), Pass);
        for hybridep in ["ep-divisible", "multinode-build", "ranks-per-node", "mnnvl-system", "domains-max"] {
            assert!(!c.iter().any(|x| x.rule == hybridep), "{hybridep}");
        }
        let one_node = Request { nodes: Some(1), ..req(8, 8, 8, false, Gpu::H100) };
        assert_eq!(status(&tc(&one_node, Some(&no_nccl), None), "epv2-internode"), Pass);
        let full = Evidence { epv2: true, nccl: Some(true), nvshmem: Some(true), ..Default::default() };
        let c = tc(&two_nodes, Some(&full), None);
        assert_eq!((status(&c, "epv2-internode"), status(&c, "epv2-legacy-internode")), (Pass, Pass));
    }

    #[test]
    fn driver_symbols_are_cu_upper() {
        assert!(is_driver_symbol("cuInit") && is_driver_symbol("cuMemAlloc_v2"));
        assert!(!is_driver_symbol("cudaMalloc") && !is_driver_symbol("cublasCreate") && !is_driver_symbol("cu"));
    }
}
