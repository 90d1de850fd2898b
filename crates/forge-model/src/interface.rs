//! DeepEP's build interface, read from the source at the pinned revision:
//! which branch's interface it is (`hybrid-ep`, `main` = EPv2, or a pre-EPv2
//! `main`), the version scheme, the extension modules, the submodules a
//! build needs, and the knobs: every environment variable the build reads.
//!
//! The per-branch knob tables live here. [`read`] checks the table statically
//! against the source: setup.py and the modules it loads are scanned for
//! getenv-like reads (`os.getenv`, `os.environ.get`, `os.environ[...]`,
//! `... in os.environ`), names built by f-strings are expanded from the literal
//! arguments of the calls that reach them, names read in a loop from the
//! tuple the loop walks. A read the table does not know becomes a warning.
//! What setup.py does besides reading knobs (its own assignments, asserts,
//! committed files that switch the build, None defaults used as strings) is
//! read by `setup_py` and judged against a plan's environment by `fit`;
//! submodules are those `.gitmodules` declares with a gitlink at the revision;
//! a setup.py that builds with another framework's extension builder is refused.
//! Pure: files and gitlinks come through a [`Files`] reader (git at the revision).
//! Must not run git, build, or decide variant settings beyond the knobs.
use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use forge_os::error::Failure;

mod fit;
pub mod registration;
mod runtime;
mod setup_py;
pub use fit::{on, Built, Refusal};
pub use runtime::{below, version_key, STATING};
pub use setup_py::{Assign, Must, NoneUse, Require, Switch};

/// The source files at one revision.
pub trait Files {
    /// The text of `path`, None when absent (or not text).
    fn read(&self, path: &str) -> Option<String>;
    /// The commit the gitlink at `path` records, None when `path` is no gitlink.
    fn gitlink(&self, _path: &str) -> Option<String> {
        None
    }
    /// Every file under the folder `dir` (paths from the root), None when the
    /// reader cannot list (what needs a listing stays unknown).
    fn list(&self, _dir: &str) -> Option<Vec<String>> {
        None
    }
}

impl<F: Fn(&str) -> Option<String>> Files for F {
    fn read(&self, path: &str) -> Option<String> {
        self(path)
    }
}

/// Which DeepEP build interface a revision has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Branch {
    /// Branch `hybrid-ep` (17cfb817, 94a9f8f): `deep_ep_cpp` + `hybrid_ep_cpp`.
    #[serde(rename = "hybrid-ep")]
    HybridEp,
    /// Branch `main` since EPv2 (dd758ca): one `deep_ep._C`.
    #[serde(rename = "main")]
    Main,
    /// `main` before EPv2 (29d31c0, bfded34): `deep_ep_cpp` only, no HybridEP.
    #[serde(rename = "main-1.x")]
    MainLegacy,
}

impl Branch {
    pub fn as_str(self) -> &'static str {
        match self {
            Branch::HybridEp => "hybrid-ep",
            Branch::Main => "main",
            Branch::MainLegacy => "main-1.x",
        }
    }
    pub fn has_hybrid_ep(self) -> bool {
        self == Branch::HybridEp
    }
}

/// Who sets a knob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetBy {
    /// Derived from a variant key (`cuda_arch_list`, `multinode`, ...).
    Variant,
    /// Only a variant's `env = { ... }` table sets it; otherwise it is absent.
    VariantEnv,
}

/// One row of a knob table.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    pub name: &'static str,
    /// The variant key that sets it, for [`SetBy::Variant`].
    pub key: Option<&'static str>,
    pub effect: &'static str,
}

impl Knob {
    pub fn set_by(&self) -> SetBy {
        if self.key.is_some() {
            SetBy::Variant
        } else {
            SetBy::VariantEnv
        }
    }
}

const fn k(name: &'static str, key: Option<&'static str>, effect: &'static str) -> Knob {
    Knob { name, key, effect }
}

const ARCH: Knob = k("TORCH_CUDA_ARCH_LIST", Some("cuda_arch_list"), "GPU generations compiled (-gencode)");
const NVSHMEM: Knob = k("NVSHMEM_DIR", Some("nvshmem_dir"), "NVSHMEM to link (else the pip package is searched)");
const SM90: Knob = k("DISABLE_SM90_FEATURES", None, "1: build without SM90 features (FP8, TMA)");
const PTX: Knob = k("DISABLE_AGGRESSIVE_PTX_INSTRS", None, "0: keep the aggressive PTX loads (sm_90 only)");

const HYBRID_EP: &[Knob] = &[
    k("HYBRID_EP_MULTINODE", Some("multinode"), "compiles HybridEP's RDMA path"),
    k("USE_NIXL", Some("transport"), "multinode over NIXL instead of DOCA"),
    k("RDMA_CORE_HOME", Some("rdma_core_home"), "DOCA path: rdma-core, baked in and on RUNPATH"),
    ARCH,
    NVSHMEM,
    k("NIXL_HOME", None, "NIXL install (NIXL transport)"),
    k("UCX_HOME", None, "UCX install (NIXL transport)"),
    k("DOCA_HOME", None, "DOCA install (DOCA transport)"),
    SM90,
    PTX,
];

const MAIN: &[Knob] = &[
    ARCH,
    NVSHMEM,
    k("EP_NVSHMEM_ROOT_DIR", None, "NVSHMEM root, read before NVSHMEM_DIR"),
    k("EP_NCCL_ROOT_DIR", None, "NCCL root, read before NCCL_DIR; baked into deep_ep/envs.py"),
    k("NCCL_DIR", None, "NCCL root (else the pip package is searched)"),
    SM90,
    PTX,
    k("EP_NUM_TOPK_IDX_BITS", None, "bits of topk_idx (32 or 64); baked into deep_ep/envs.py"),
    k("TOPK_IDX_BITS", None, "legacy name of EP_NUM_TOPK_IDX_BITS"),
    k("EP_JIT_CACHE_DIR", None, "JIT cache folder, baked into deep_ep/envs.py"),
    k("EP_JIT_PRINT_COMPILER_COMMAND", None, "baked into deep_ep/envs.py"),
];

const MAIN_LEGACY: &[Knob] = &[ARCH, NVSHMEM, SM90, PTX, k("TOPK_IDX_BITS", None, "bits of topk_idx (32 or 64)")];

/// The knob table of each interface (DOMAIN: "Build interface by branch").
pub fn table(b: Branch) -> &'static [Knob] {
    match b {
        Branch::HybridEp => HYBRID_EP,
        Branch::Main => MAIN,
        Branch::MainLegacy => MAIN_LEGACY,
    }
}

/// Variables a build may read that the plan itself owns (the toolchain's, and
/// the compiler hooks `builder::canon` sets: PYTORCH_NVCC as torch reads it, NVCC
/// as NCCL's makefiles do): reading them is no knob.
pub const PLAN_OWNED: [&str; 11] = [
    "CUDA_HOME",
    "CUDA_PATH",
    "CXX",
    "CC",
    "CUDAHOSTCXX",
    "MAX_JOBS",
    "PATH",
    "HOME",
    "SOURCE_DATE_EPOCH",
    "PYTORCH_NVCC",
    "NVCC",
];

/// The extension modules each interface builds.
pub fn extensions(b: Branch) -> &'static [&'static str] {
    match b {
        Branch::HybridEp => &["deep_ep_cpp", "hybrid_ep_cpp"],
        Branch::Main => &["deep_ep._C"],
        Branch::MainLegacy => &["deep_ep_cpp"],
    }
}

/// A submodule a build needs, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmoduleNeed {
    pub path: String,
    /// `always` or `doca-multinode`.
    pub when: String,
}

/// A submodule the interface's build needs that the revision does not carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingSubmodule {
    pub path: String,
    /// `always` or `doca-multinode`.
    pub when: String,
    /// What the revision has instead (no `.gitmodules` entry, or no gitlink).
    pub why: String,
}

/// A knob as read at this revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnobRead {
    pub name: String,
    pub set_by: SetBy,
    /// The variant key that sets it (for `variant`).
    pub key: Option<String>,
    pub effect: String,
    /// `file:line` of every read found (empty: the table has it, the source does not read it).
    pub read_at: Vec<String>,
}

/// The interface of one revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    pub branch: Branch,
    /// `1.2.1` (setup.py literal) or `2.1.0` (`__version__` in deep_ep/__init__.py).
    pub base_version: String,
    /// `file:line` the base version was read from.
    pub version_from: String,
    pub extensions: Vec<String>,
    pub submodules: Vec<SubmoduleNeed>,
    /// What the build needs installed besides the compiler.
    pub needs: Vec<String>,
    pub knobs: Vec<KnobRead>,
    /// The files scanned for environment reads.
    pub scanned: Vec<String>,
    /// Reads the table does not know, computed names that could not be expanded.
    pub warnings: Vec<String>,
    /// Knobs of the table the source at this revision does not read (a
    /// variant cannot set them here).
    pub unread: Vec<String>,
    /// Submodules the interface's build needs that this revision lacks.
    #[serde(default)]
    pub missing_submodules: Vec<MissingSubmodule>,
    /// Build variables setup.py assigns itself (not as a default).
    #[serde(default)]
    pub assigns: Vec<Assign>,
    /// Unconditional asserts on build variables.
    #[serde(default)]
    pub requires: Vec<Require>,
    /// Files committed at this revision that switch the build.
    #[serde(default)]
    pub switches: Vec<Switch>,
    /// Variables read with a None default and used as strings.
    #[serde(default)]
    pub none_uses: Vec<NoneUse>,
    /// What the revision needs of the environment its wheel runs in (NCCL,
    /// NVSHMEM), read from its source with `file:line` evidence.
    #[serde(default)]
    pub runtime: forge_wheel::provenance::RuntimeNeeds,
}

impl Interface {
    pub fn knob(&self, name: &str) -> Option<&KnobRead> {
        self.knobs.iter().find(|k| k.name == name)
    }
    /// Knobs the build at this revision really reads.
    pub fn read_names(&self) -> BTreeSet<&str> {
        self.knobs.iter().filter(|k| !k.read_at.is_empty()).map(|k| k.name.as_str()).collect()
    }
}

/// Largest file read (setup.py and friends are a few kB).
const MAX_FILE: usize = 1 << 20;

/// Read the interface of the source `files` give (`what` names it in errors).
pub fn read(files: &dyn Files, what: &str) -> Result<Interface> {
    let setup = files.read("setup.py").filter(|t| t.len() <= MAX_FILE).ok_or_else(|| {
        Failure::usage(format!("{what} has no setup.py: not a DeepEP source"))
            .hint("pin a DeepEP revision (branch hybrid-ep or main)")
    })?;
    if let Some((line, module)) = setup_py::foreign_builder(&setup) {
        return Err(Failure::usage(format!(
            "{what}: setup.py:{line} builds its extensions with `{module}`, another framework's extension builder, not torch's (torch.utils.cpp_extension): deepep-forge plans torch builds only"
        ))
        .hint("pin a DeepEP revision that builds with torch (branch hybrid-ep or main)")
        .into());
    }
    let found = extension_names(&setup);
    let branch = if found.iter().any(|e| e == "hybrid_ep_cpp") {
        Branch::HybridEp
    } else if found.iter().any(|e| e == "deep_ep._C") {
        Branch::Main
    } else if found.iter().any(|e| e == "deep_ep_cpp") {
        Branch::MainLegacy
    } else {
        return Err(Failure::usage(format!(
            "{what}: setup.py builds none of DeepEP's extensions (deep_ep_cpp, hybrid_ep_cpp, deep_ep._C){}",
            if found.is_empty() { String::new() } else { format!("; it names {}", found.join(", ")) }
        ))
        .hint("pin a DeepEP revision of branch hybrid-ep (HybridEP) or main (EPv2)")
        .into());
    };
    let (base_version, version_from) = version(files, &setup).ok_or_else(|| {
        Failure::usage(format!("{what}: cannot tell the version its setup.py gives (no `version='X'` literal, no `__version__` in deep_ep/__init__.py)"))
            .hint("pin a DeepEP revision; deepep-forge reads the version the build will give before building")
    })?;
    let mut scanned = vec![("setup.py".to_string(), setup.clone())];
    for m in loaded_modules(&setup) {
        if let Some(t) = files.read(&m).filter(|t| t.len() <= MAX_FILE) {
            scanned.push((m, t));
        }
    }
    let behaviour = Behaviour::of(files, &scanned);
    let (reads, unresolved) = env_reads(&scanned);
    let mut warnings: Vec<String> = unresolved
        .into_iter()
        .map(|(at, text)| format!("{at} reads an environment variable whose name is computed (`{text}`) and could not be expanded: it is not inherited by the build (the plan starts from an empty environment)"))
        .collect();
    let rows = table(branch);
    let mut knobs: Vec<KnobRead> = rows
        .iter()
        .map(|r| KnobRead {
            name: r.name.into(),
            set_by: r.set_by(),
            key: r.key.map(String::from),
            effect: r.effect.into(),
            read_at: reads.get(r.name).cloned().unwrap_or_default(),
        })
        .collect();
    for (name, at) in &reads {
        if rows.iter().any(|r| r.name == name) || PLAN_OWNED.contains(&name.as_str()) {
            continue;
        }
        // A variable setup.py asserts is set is a knob at this revision: the variant's `env` sets it.
        if let Some(r) = behaviour.requires.iter().find(|r| r.name == *name && r.must == Must::Set) {
            knobs.push(KnobRead {
                name: name.clone(),
                set_by: SetBy::VariantEnv,
                key: None,
                effect: format!("required at this revision: {} asserts it is set", r.at),
                read_at: at.clone(),
            });
            continue;
        }
        warnings.push(format!(
            "{} reads {name}, which is not in deepep-forge's {} knob table: it is not inherited by the build and no variant can set it",
            at.join(", "),
            branch.as_str()
        ));
    }
    knobs.sort_by(|a, b| a.name.cmp(&b.name));
    let unread = knobs.iter().filter(|k| k.read_at.is_empty()).map(|k| k.name.clone()).collect();
    let (submodules, missing_submodules) = submodules(files, branch);
    let needs = needs(branch, &reads, &behaviour.requires);
    Ok(Interface {
        branch,
        base_version,
        version_from,
        extensions: extensions(branch).iter().map(|s| s.to_string()).collect(),
        submodules,
        needs,
        knobs,
        scanned: scanned.into_iter().map(|(p, _)| p).collect(),
        warnings,
        unread,
        missing_submodules,
        assigns: behaviour.assigns,
        requires: behaviour.requires,
        switches: behaviour.switches,
        none_uses: behaviour.none_uses,
        runtime: runtime::needs(files, branch, &setup),
    })
}

/// What the scanned files do with the environment besides reading knobs.
struct Behaviour {
    assigns: Vec<Assign>,
    requires: Vec<Require>,
    switches: Vec<Switch>,
    none_uses: Vec<NoneUse>,
}

impl Behaviour {
    fn of(files: &dyn Files, scanned: &[(String, String)]) -> Behaviour {
        let present = |p: &str| files.read(p).is_some();
        let mut b = Behaviour { assigns: vec![], requires: vec![], switches: vec![], none_uses: vec![] };
        for (f, text) in scanned {
            b.assigns.extend(setup_py::assigns(f, text));
            b.requires.extend(setup_py::requires(f, text));
            b.switches.extend(setup_py::switches(f, text, &present));
            b.none_uses.extend(setup_py::none_uses(f, text));
        }
        b
    }
}

/// The submodules an interface's build needs, and when (others a revision
/// declares are fetched for every build).
fn needed_submodules(b: Branch) -> &'static [(&'static str, &'static str)] {
    match b {
        Branch::HybridEp => &[("third-party/nccl", "doca-multinode")],
        Branch::Main => &[("third-party/fmt", "always")],
        Branch::MainLegacy => &[],
    }
}

/// The submodules of a revision: the paths its `.gitmodules` declares that
/// have a gitlink at that revision; and the ones the interface needs that it lacks.
fn submodules(files: &dyn Files, b: Branch) -> (Vec<SubmoduleNeed>, Vec<MissingSubmodule>) {
    let declared: Vec<String> = files
        .read(".gitmodules")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("path")?.trim_start().strip_prefix('=').map(|p| p.trim().to_string()))
        .filter(|p| !p.is_empty() && !p.starts_with('/') && !p.split('/').any(|c| c == ".." || c.is_empty()))
        .collect();
    let when = |p: &str| needed_submodules(b).iter().find(|(n, _)| *n == p).map(|(_, w)| *w).unwrap_or("always");
    let mut have = Vec::new();
    for p in &declared {
        if files.gitlink(p).is_some() && !have.iter().any(|s: &SubmoduleNeed| s.path == *p) {
            have.push(SubmoduleNeed { path: p.clone(), when: when(p).into() });
        }
    }
    let missing = needed_submodules(b)
        .iter()
        .filter(|(p, _)| !have.iter().any(|s| s.path == *p))
        .map(|(p, w)| MissingSubmodule {
            path: p.to_string(),
            when: w.to_string(),
            why: if declared.iter().any(|d| d == p) {
                format!("lists {p} in .gitmodules but records no gitlink (commit) for it")
            } else {
                format!("has no {p}: neither a .gitmodules entry nor a gitlink")
            },
        })
        .collect();
    (have, missing)
}

/// The library a variable locates (`NIXL_LIB_PATH` -> NIXL).
fn library_of(name: &str) -> &str {
    ["_ROOT_DIR", "_LIB_PATH", "_DIR", "_HOME", "_PATH"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name)
}

/// What the build needs installed, from the revision: torch, NCCL/NVSHMEM
/// as the interface finds them, and whatever setup.py asserts is set.
fn needs(b: Branch, reads: &Reads, requires: &[Require]) -> Vec<String> {
    let mut out = vec!["torch".to_string()];
    let asserted = |n: &str| requires.iter().find(|r| r.name == n && r.must == Must::Set);
    match b {
        Branch::Main => out.extend(["NCCL".to_string(), "NVSHMEM".to_string()]),
        Branch::HybridEp | Branch::MainLegacy if reads.contains_key("NVSHMEM_DIR") => {
            out.push(match asserted("NVSHMEM_DIR") {
                Some(r) => format!("NVSHMEM (required: {} asserts NVSHMEM_DIR is set: {:?})", r.at, r.message),
                None => "NVSHMEM (optional: internode kernels)".to_string(),
            })
        }
        _ => {}
    }
    for r in requires {
        match r.must {
            Must::Set if r.name != "NVSHMEM_DIR" && !PLAN_OWNED.contains(&r.name.as_str()) => out.push(format!(
                "{} (required: {} asserts {} is set: {:?})",
                library_of(&r.name),
                r.at,
                r.name,
                r.message
            )),
            Must::Off if r.name == "HYBRID_EP_MULTINODE" => {
                out.push(format!("single-node only ({} asserts multinode is off: {:?})", r.at, r.message))
            }
            _ => {}
        }
    }
    out
}

/// Extension module names in setup.py: the first positional literal of an
/// `...Extension(` call, or a `name=` literal on that line or the next three.
fn extension_names(setup: &str) -> Vec<String> {
    let lines: Vec<&str> = setup.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(p) = l.find("Extension(") else { continue };
        if l.trim_start().starts_with("class ") || l.trim_start().starts_with('#') {
            continue;
        }
        let call: String = std::iter::once(&l[p + "Extension(".len()..])
            .chain(lines.iter().skip(i + 1).take(3).copied())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some((s, _)) = literal_at(call.trim_start()) {
            out.push(s);
            continue;
        }
        for m in lines.iter().skip(i).take(4) {
            if let Some(q) = m.find("name=").or_else(|| m.find("name =")) {
                let rest = m[q..].split_once('=').map(|x| x.1.trim_start()).unwrap_or("");
                if let Some((s, _)) = literal_at(rest) {
                    out.push(s);
                    break;
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The base version and where it was read: a `version='X'` literal in
/// setup.py, else `__version__ = 'X'` in deep_ep/__init__.py when setup.py
/// reads it from there.
pub fn version(files: &dyn Files, setup: &str) -> Option<(String, String)> {
    if let Some((v, line)) = setup_py_version(setup) {
        return Some((v, format!("setup.py:{line}")));
    }
    if !(setup.contains("__init__.py") && setup.contains("__version__")) {
        return None;
    }
    let init = files.read("deep_ep/__init__.py")?;
    init.lines().enumerate().find_map(|(i, l)| {
        let rest = l.strip_prefix("__version__")?.trim_start().strip_prefix('=')?.trim_start();
        let (v, _) = literal_at(rest)?;
        is_version(&v).then(|| (v, format!("deep_ep/__init__.py:{}", i + 1)))
    })
}

fn is_version(v: &str) -> bool {
    <pep440_rs::Version as std::str::FromStr>::from_str(v).is_ok()
}

/// The first `version = '<x>'` / `version="<x>"` literal in setup.py that is
/// a PEP 440 version, with its 1-based line.
pub fn setup_py_version(text: &str) -> Option<(String, usize)> {
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(i) = rest.find("version") {
            rest = &rest[i + "version".len()..];
            let Some(after) = rest.trim_start().strip_prefix('=').filter(|a| !a.starts_with('=')) else { continue };
            if let Some((v, _)) = literal_at(after.trim_start()) {
                if is_version(&v) {
                    return Some((v, n + 1));
                }
            }
        }
    }
    None
}

/// A plain string literal at the start of `s` ('x' or "x"): its text and the rest.
fn literal_at(s: &str) -> Option<(String, &str)> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let end = s[1..].find(q)?;
    Some((s[1..1 + end].to_string(), &s[2 + end..]))
}

/// Files setup.py loads from the source tree: `spec_from_file_location(...,
/// os.path.join(current_dir, 'a', 'b.py'))` and `exec(open(...))` with literal parts.
fn loaded_modules(setup: &str) -> Vec<String> {
    let mut out = Vec::new();
    for l in setup.lines() {
        if l.trim_start().starts_with('#') || !(l.contains("spec_from_file_location") || l.contains("open(")) {
            continue;
        }
        let Some(j) = l.find("os.path.join(") else { continue };
        let mut parts = Vec::new();
        let mut rest = &l[j + "os.path.join(".len()..];
        loop {
            rest = rest.trim_start().trim_start_matches(',').trim_start();
            if let Some((s, r)) = literal_at(rest) {
                parts.push(s);
                rest = r;
            } else if let Some(r) = rest.strip_prefix(|c: char| c.is_alphanumeric() || c == '_') {
                // A variable (the setup.py folder): skip the identifier.
                rest = r.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_');
            } else {
                break;
            }
        }
        let path = parts.join("/");
        if path.ends_with(".py") && !path.contains("..") && !path.starts_with('/') {
            out.push(path);
        }
    }
    out.dedup();
    out
}

/// How an environment read names its variable.
enum Arg {
    Literal(String),
    Template(String),
    Variable(String),
}

/// One getenv-like read.
struct Read {
    file: String,
    line: usize,
    arg: Arg,
}

/// Variable name -> the `file:line`s reading it.
type Reads = BTreeMap<String, Vec<String>>;

/// Every variable name read in `files`, and the reads whose names could not
/// be computed (`file:line`, the expression).
fn env_reads(files: &[(String, String)]) -> (Reads, Vec<(String, String)>) {
    let mut raw = Vec::new();
    for (f, text) in files {
        for (i, l) in text.lines().enumerate() {
            if l.trim_start().starts_with('#') {
                continue;
            }
            for a in reads_in_line(l) {
                raw.push(Read { file: f.clone(), line: i + 1, arg: a });
            }
        }
    }
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unresolved = Vec::new();
    for r in raw {
        let at = format!("{}:{}", r.file, r.line);
        let text = files.iter().find(|(f, _)| *f == r.file).map(|(_, t)| t.as_str()).unwrap_or("");
        let expanded = match &r.arg {
            Arg::Literal(s) => Some(vec![s.clone()]),
            Arg::Variable(v) => loop_values(text, r.line, v).and_then(|items| {
                let mut names = Vec::new();
                for a in items {
                    match a {
                        Arg::Literal(s) => names.push(s),
                        Arg::Template(t) => names.extend(template_values(files, text, r.line, &t)?),
                        Arg::Variable(_) => return None,
                    }
                }
                Some(names)
            }),
            Arg::Template(t) => template_values(files, text, r.line, t),
        };
        match expanded {
            Some(v) => {
                for n in v {
                    let e = names.entry(n).or_default();
                    if !e.contains(&at) {
                        e.push(at.clone());
                    }
                }
            }
            None => unresolved.push((
                at,
                match &r.arg {
                    Arg::Literal(s) | Arg::Variable(s) => s.clone(),
                    Arg::Template(t) => format!("f'{t}'"),
                },
            )),
        }
    }
    (names, unresolved)
}

/// The arguments of the environment reads on one line (writes
/// `os.environ['X'] = v` are not reads).
fn reads_in_line(l: &str) -> Vec<Arg> {
    let mut out = Vec::new();
    for pat in ["getenv(", "environ.get(", "environ["] {
        let mut from = 0;
        while let Some(p) = l[from..].find(pat) {
            let start = from + p + pat.len();
            from = start;
            let rest = l[start..].trim_start();
            let Some((arg, after)) = arg_at(rest) else { continue };
            if pat == "environ[" {
                let after = after.trim_start().trim_start_matches(']').trim_start();
                if after.starts_with('=') && !after.starts_with("==") {
                    continue;
                }
            }
            out.push(arg);
        }
    }
    let mut from = 0;
    while let Some(p) = l[from..].find(" in os.environ") {
        let end = from + p;
        from = end + 1;
        let before = l[..end].trim_end();
        let before = before.strip_suffix(" not").unwrap_or(before).trim_end();
        if let Some(a) = arg_before(before) {
            out.push(a);
        }
    }
    out
}

fn arg_at(s: &str) -> Option<(Arg, &str)> {
    if let Some(r) = s.strip_prefix('f') {
        if let Some((t, rest)) = literal_at(r) {
            return Some((Arg::Template(t), rest));
        }
    }
    if let Some((t, rest)) = literal_at(s) {
        return Some((Arg::Literal(t), rest));
    }
    let n = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    (n > 0 && !s.starts_with(|c: char| c.is_ascii_digit())).then(|| (Arg::Variable(s[..n].to_string()), &s[n..]))
}

fn arg_before(s: &str) -> Option<Arg> {
    let q = s.chars().last()?;
    if q == '\'' || q == '"' {
        let body = &s[..s.len() - 1];
        let open = body.rfind(q)?;
        let text = body[open + 1..].to_string();
        return Some(if body[..open].ends_with('f') { Arg::Template(text) } else { Arg::Literal(text) });
    }
    let start = s.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map(|i| i + 1).unwrap_or(0);
    (start < s.len()).then(|| Arg::Variable(s[start..].to_string()))
}

/// Values of loop variable `v` at `line`: the nearest `for v in X` above it,
/// X a tuple/list literal (of strings or f-strings) or a name assigned one in the same file.
fn loop_values(text: &str, line: usize, v: &str) -> Option<Vec<Arg>> {
    let lines: Vec<&str> = text.lines().collect();
    let head = format!("for {v} in ");
    let l = lines[..line.min(lines.len())].iter().rev().find_map(|l| l.trim_start().strip_prefix(&head))?;
    let expr = l.trim_end().trim_end_matches(':').trim();
    if expr.starts_with('(') || expr.starts_with('[') {
        return literals(expr);
    }
    let assign = format!("{expr} = ");
    let (i, first) = lines.iter().enumerate().find_map(|(i, l)| l.strip_prefix(&assign).map(|r| (i, r)))?;
    // The literal may span lines until its closing bracket.
    let mut body = first.to_string();
    for l in lines.iter().skip(i + 1) {
        if body.contains(')') || body.contains(']') {
            break;
        }
        body.push_str(l);
    }
    literals(&body)
}

/// The string literals (plain or f-strings) of a tuple/list expression (None if it has none).
fn literals(expr: &str) -> Option<Vec<Arg>> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find(['\'', '"']) {
        let f = rest[..i].ends_with('f');
        let (s, r) = literal_at(&rest[i..])?;
        out.push(if f { Arg::Template(s) } else { Arg::Literal(s) });
        rest = r;
    }
    (!out.is_empty()).then_some(out)
}

/// Names an f-string read produces: its one placeholder `{x}` is the
/// enclosing function's parameter (or `x = param.upper()`/`.lower()`), and
/// the function's callers in the scanned files pass literals.
fn template_values(files: &[(String, String)], text: &str, line: usize, t: &str) -> Option<Vec<String>> {
    let open = t.find('{')?;
    let close = t[open..].find('}')? + open;
    if t[close + 1..].contains('{') {
        return None;
    }
    let var = &t[open + 1..close];
    let lines: Vec<&str> = text.lines().collect();
    let def = lines[..line.min(lines.len())].iter().rev().find_map(|l| l.trim_start().strip_prefix("def "))?;
    let (func, params) = def.split_once('(')?;
    let param = params.split([',', ')', ':', '=']).next()?.trim();
    let body = &lines[..line.min(lines.len())];
    let transform: fn(&str) -> String = if var == param {
        |s| s.to_string()
    } else if body.iter().any(|l| l.trim() == format!("{var} = {param}.upper()")) {
        |s| s.to_uppercase()
    } else if body.iter().any(|l| l.trim() == format!("{var} = {param}.lower()")) {
        |s| s.to_lowercase()
    } else {
        return None;
    };
    let call = format!("{func}(");
    let mut out = Vec::new();
    for (_, src) in files {
        for l in src.lines() {
            if l.trim_start().starts_with("def ") || l.trim_start().starts_with('#') {
                continue;
            }
            let mut rest = l;
            while let Some(p) = rest.find(&call) {
                rest = &rest[p + call.len()..];
                if let Some((s, _)) = literal_at(rest.trim_start()) {
                    out.push(transform(&s));
                }
            }
        }
    }
    let out: Vec<String> = out.into_iter().map(|mid| format!("{}{mid}{}", &t[..open], &t[close + 1..])).collect();
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_deepep_style_setup_py_versions() {
        assert_eq!(setup_py_version("    version='1.2.1' + revision,"), Some(("1.2.1".into(), 1)));
        assert_eq!(setup_py_version("x = version\nsetup(version = \"2.1.0\" + rev)"), Some(("2.1.0".into(), 2)));
        assert_eq!(setup_py_version("if version == '1': pass\nsetup(version=get())"), None);
    }

    #[test]
    fn reads_literals_loops_and_fstrings() {
        let setup = "names = ('EP_A', 'EP_B')\nfor name in names:\n    x = os.environ[name] if name in os.environ else ''\nos.environ['W'] = os.getenv('R', '1')\nif 'L' in os.environ: pass\n";
        let find = "def find_root(name, lib=None):\n    upper = name.upper()\n    for env_name in (f'EP_{upper}_ROOT_DIR', f'{upper}_DIR'):\n        if env_name in os.environ:\n            return os.environ[env_name]\ndef a():\n    return find_root('nccl')\ndef b():\n    return find_root('nvshmem')\n";
        let files = vec![("setup.py".to_string(), setup.to_string()), ("f.py".to_string(), find.to_string())];
        let (names, unresolved) = env_reads(&files);
        let got: Vec<&str> = names.keys().map(String::as_str).collect();
        assert_eq!(
            got,
            ["EP_A", "EP_B", "EP_NCCL_ROOT_DIR", "EP_NVSHMEM_ROOT_DIR", "L", "NCCL_DIR", "NVSHMEM_DIR", "R"],
            "{unresolved:?}"
        );
        assert_eq!(names["R"], ["setup.py:4"]);
        assert!(unresolved.is_empty(), "{unresolved:?}");
    }

    #[test]
    fn extension_names_in_the_shapes_deepep_writes_them() {
        let mini = "class CudaExtension(setuptools.Extension):\n    pass\n    return CudaExtension(\n        \"hybrid_ep_cpp\", sources)\n";
        assert_eq!(extension_names(mini), ["hybrid_ep_cpp"]);
        let hybrid = "    ext = CUDAExtension(\n        name='deep_ep_cpp',\n        sources=s)\n";
        assert_eq!(extension_names(hybrid), ["deep_ep_cpp"]);
        let main = "            CUDAExtension(name='deep_ep._C',\n                          include_dirs=i)\n";
        assert_eq!(extension_names(main), ["deep_ep._C"]);
    }

    #[test]
    fn a_computed_name_that_cannot_be_expanded_is_reported() {
        let files = vec![("setup.py".to_string(), "k = input()\nv = os.getenv(k)\n".to_string())];
        let (names, unresolved) = env_reads(&files);
        assert!(names.is_empty());
        assert_eq!(unresolved, [("setup.py:2".to_string(), "k".to_string())]);
    }
}
