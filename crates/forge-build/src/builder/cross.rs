//! Cross builds: an aarch64 variant (GB200) built on an x86_64 host with
//! `--toolchain registry`. The host side is the registry toolchain (x86_64
//! Python and torch for setup.py's imports, nvcc of torch's CUDA minor); the
//! target side is a sysroot under `<cache>/toolchains/<key>/` (temp + rename,
//! one maker per key): the aarch64 torch and nvidia wheels (`uv pip install
//! --target --python-platform aarch64-manylinux_2_28`), Debian's arm64 Python
//! (headers, sysconfig data, the interpreter and its libraries for the import
//! check, unpacked with `apt-get download` + `dpkg-deb -x` from a private apt
//! state: the system's apt configuration is not touched), a CUDA_HOME whose
//! include/lib64 are the target's with an aarch64 `libcuda.so` link stub, and
//! compiler wrappers (the cross gcc/g++, and nvcc) that map the host paths
//! setup.py computes (torch, NVSHMEM, the Python headers) to the target's.
//! After the build, [`check_wheel`] resolves every NEEDED of the wheel's
//! extensions in the sysroot and imports the package under qemu-aarch64.
//! The sysroot is made in a staging folder through its [`Tree`] and published
//! by rename into `toolchains/` (a link planted there is refused, exit 2).
//! Owns the target side; must not decide variant settings or run the build.
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::registry::{self, Provisioned};
use super::toolchain::{Compiler, Toolchain};
use forge_model::pins::Arch;
use forge_os::error::{check_interrupted, Failure};
use forge_os::fs::{Kind, Tree, Walk};
use forge_os::process::lookup::which;
use forge_os::process::Cmd;
use forge_store::source;

/// Host packages whose paths the wrappers send to the target's copy.
const SITE_PACKAGES_MAPPED: [&str; 2] = ["torch", "nvidia/nvshmem"];
/// A path-map entry starting with this matches any `/.../site-packages/` prefix.
const SITE_PATTERN: &str = "*/site-packages/";

/// Version of `cross.json` and of the sysroot layout (part of the key).
const LAYOUT: u32 = 2;
const IDENTITY_FILE: &str = "cross.json";
/// The wheel platform uv resolves the target's packages for (torch 2.11's aarch64 wheels are manylinux_2_28).
pub const PYTHON_PLATFORM: &str = "aarch64-manylinux_2_28";
/// GNU triple of the cross compiler and of Debian's multiarch folders.
pub const TRIPLE: &str = "aarch64-linux-gnu";
/// Libraries a run machine's NVIDIA driver provides: never in a sysroot.
pub const DRIVER_LIBS: [&str; 2] = ["libcuda.so.1", "libnvidia-ml.so.1"];

/// Whether `v_arch` is built here by cross-compiling (host x86_64, target aarch64, registry toolchain).
pub fn is_cross(kind: registry::Kind, host: Option<Arch>, target: Arch) -> bool {
    kind == registry::Kind::Registry && host == Some(Arch::X86_64) && target == Arch::Aarch64
}

pub use super::toolchain::Sysroot;

impl Sysroot {
    /// The target's site-packages (aarch64 torch, nvidia-*).
    pub fn site(&self) -> PathBuf {
        self.root.join("site")
    }
    /// Debian's arm64 packages, unpacked.
    pub fn debian_root(&self) -> PathBuf {
        self.root.join("root")
    }
    pub fn cuda_home(&self) -> PathBuf {
        self.root.join("cuda-home")
    }
    pub fn bin(&self) -> PathBuf {
        self.root.join("bin")
    }
    fn sysconfig_dir(&self) -> PathBuf {
        self.root.join("python/sysconfig")
    }
    /// Folder holding `libcuda.so.1` (the stub) for the import check.
    fn driver_stub_dir(&self) -> PathBuf {
        self.root.join("driver-stub")
    }
    /// `3.11` of `3.11.2`.
    pub fn python_minor(&self) -> String {
        self.python_version.split('.').take(2).collect::<Vec<_>>().join(".")
    }
    /// Debian's arm64 interpreter (run under qemu with `-L root/`).
    pub fn python(&self) -> PathBuf {
        self.debian_root().join(format!("usr/bin/python{}", self.python_minor()))
    }

    /// The variables a cross build adds to the plan's environment: the
    /// wrappers as compilers (torch passes CC to nvcc as `-ccbin`, links with
    /// LDSHARED), and the target's sysconfig for extension names and the
    /// wheel's platform tag.
    pub fn build_env(&self) -> BTreeMap<String, String> {
        let s = |p: PathBuf| p.to_string_lossy().into_owned();
        let gcc = s(self.bin().join(format!("{TRIPLE}-gcc")));
        let gxx = s(self.bin().join(format!("{TRIPLE}-g++")));
        BTreeMap::from([
            ("CC".into(), gcc),
            ("CXX".into(), gxx.clone()),
            ("LDSHARED".into(), format!("{gxx} -shared")),
            ("_PYTHON_HOST_PLATFORM".into(), format!("linux-{}", self.target)),
            ("_PYTHON_SYSCONFIGDATA_NAME".into(), self.sysconfigdata.clone()),
            ("PYTHONPATH".into(), s(self.sysconfig_dir())),
        ])
    }

    pub fn provenance(&self) -> forge_wheel::provenance::CrossInfo {
        forge_wheel::provenance::CrossInfo {
            host: self.host.clone(),
            target: self.target.clone(),
            triple: self.triple.clone(),
            compilers: self.compilers.iter().map(|(k, c)| (k.clone(), c.version.clone())).collect(),
            python_platform: self.python_platform.clone(),
            python: self.python_version.clone(),
            ext_suffix: self.ext_suffix.clone(),
            packages: self.packages.clone(),
            debs: self.debs.clone(),
        }
    }

    /// The toolchain a cross plan builds with: the host's Python runs setup.py;
    /// compilers, CUDA_HOME, platform and site-packages (for RUNPATH
    /// relocation) are the target's.
    pub fn toolchain(&self, host: &Toolchain) -> Toolchain {
        let mut tc = host.clone();
        tc.platform = format!("linux-{}", self.target);
        tc.site_packages = vec![self.site()];
        tc.cuda_home = self.cuda_home();
        tc.compilers = self
            .compilers
            .iter()
            .map(|(k, c)| {
                let var = if k == "gcc" { "CC" } else { "CXX" };
                (
                    var.to_string(),
                    Compiler { path: self.bin().join(format!("{TRIPLE}-{k}")), version: c.version.clone() },
                )
            })
            .collect();
        tc.cross = Some(self.clone());
        tc
    }
}

/// The sysroot's key and folder for the registry toolchain `host` (Python `host_tc`).
fn keyed(
    host: &Provisioned,
    host_tc: &Toolchain,
    cache_dir: &Path,
) -> Result<(String, String, PathBuf, BTreeMap<String, Compiler>)> {
    let minor = host_tc.python_version.split('.').take(2).collect::<Vec<_>>().join(".");
    let compilers = cross_compilers()?;
    let key_text = serde_json::to_string(&(
        LAYOUT,
        &host.key,
        &minor,
        TRIPLE,
        PYTHON_PLATFORM,
        &compilers.values().map(|c| &c.version).collect::<Vec<_>>(),
        target_requirements(host)?,
    ))?;
    let key = format!("{}-{}", source::short_hash(&key_text), Arch::Aarch64.as_str());
    let root = cache_dir.join("toolchains").join(&key);
    Ok((minor, key, root, compilers))
}

/// The sysroot if it is provisioned (`plan` never downloads); exit 3 without the cross compiler.
pub fn lookup(host: &Provisioned, host_tc: &Toolchain, cache_dir: &Path) -> Result<Option<Sysroot>> {
    let (_, key, root, _) = keyed(host, host_tc, cache_dir)?;
    Ok(read_identity(cache_dir, &key, &root))
}

/// The target side for the registry toolchain `host` (Python `host_tc`), provisioned now unless cached.
pub fn provision(host: &Provisioned, host_tc: &Toolchain, cache_dir: &Path) -> Result<Sysroot> {
    let (minor, key, root, compilers) = keyed(host, host_tc, cache_dir)?;
    if let Some(s) = read_identity(cache_dir, &key, &root) {
        return Ok(s);
    }
    let _lock = source::lock(&cache_dir.join("locks").join(format!("toolchain-{key}.lock")))?;
    if let Some(s) = read_identity(cache_dir, &key, &root) {
        return Ok(s);
    }
    let toolchains = registry::toolchains(cache_dir)?;
    registry::check_publish_place(&toolchains, &key)?;
    let staging = forge_store::cache::Cache::at(cache_dir).stage()?;
    let tmp = Tree::open(staging.path(), "staging folder")?;
    let stage = tmp.sub_create("sysroot", "sysroot being made")?;
    let s = make(host, host_tc, &minor, compilers, &stage, &root, &key)?;
    stage.write(IDENTITY_FILE, &serde_json::to_vec_pretty(&s)?)?;
    check_interrupted()?;
    registry::publish(&tmp, "sysroot", &toolchains, &key)?;
    Ok(s)
}

/// Where the sysroot for the registry toolchain `host` will be (None without the cross compilers:
/// their versions are part of its key).
pub fn root_for(host: &Provisioned, host_tc: &Toolchain, cache_dir: &Path) -> Option<PathBuf> {
    keyed(host, host_tc, cache_dir).ok().map(|(_, _, root, _)| root)
}

/// Python minor of each Debian release's arm64 archive (`python3` there).
const DEBIAN_PYTHON: [(&str, &str); 3] = [("bullseye", "3.9"), ("bookworm", "3.11"), ("trixie", "3.13")];

/// `3.11` from `3.11`, `3.11.2`, `python3.11` or `/usr/bin/python3.11`; None for `python3`.
pub fn minor_of(python: &str) -> Option<String> {
    let name = python.rsplit('/').next().unwrap_or(python);
    let v = name.strip_prefix("python").unwrap_or(name);
    let mut parts = v.split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    let digits = |x: &str| !x.is_empty() && x.len() <= 3 && x.bytes().all(|b| b.is_ascii_digit());
    (digits(major) && digits(minor)).then(|| format!("{major}.{minor}"))
}

/// The host's Debian release from /etc/os-release (`bookworm`), if it is Debian.
fn debian_release() -> Option<String> {
    let text = forge_os::fs::named::read_text(Path::new("/etc/os-release"), "os-release", 64 << 10).ok()?;
    let field = |k: &str| {
        text.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix('=')).map(|v| v.trim_matches('"').to_string())
    };
    (field("ID").as_deref() == Some("debian")).then(|| field("VERSION_CODENAME")).flatten()
}

/// The target side of a cross plan before anything is provisioned: host and
/// target, the cross compilers and qemu as found on this host, what the
/// sysroot would hold, and what will stop `build-wheel` (exit 3). Runs only
/// the compilers' `--version`; never downloads.
pub fn preview(python: &str, sysroot: Option<PathBuf>) -> crate::builder::plan::CrossPreview {
    let minor = minor_of(python);
    let py = minor.clone().unwrap_or_else(|| "X.Y".into());
    let mut stops = Vec::new();
    let mut compilers = BTreeMap::new();
    for k in ["gcc", "g++"] {
        let name = format!("{TRIPLE}-{k}");
        let found = which(&name).map(|path| {
            let version = Cmd::new(&path, format!("read {name}'s version")).args(["--version"]).output();
            Compiler {
                path,
                version: version.ok().and_then(|v| v.lines().next().map(String::from)).unwrap_or_default(),
            }
        });
        if found.is_none() {
            stops.push(format!(
                "the cross compiler {name} is not on PATH (Debian/Ubuntu: apt-get install g++-{TRIPLE})"
            ));
        }
        compilers.insert(k.to_string(), found);
    }
    for tool in ["apt-get", "apt-cache", "dpkg-deb"] {
        if which(tool).is_none() {
            stops.push(format!(
                "{tool} not found: the target's Python and C libraries come from Debian's arm64 archive"
            ));
        }
    }
    match (debian_release(), &minor) {
        (Some(rel), Some(m)) => match DEBIAN_PYTHON.iter().find(|(r, _)| *r == rel) {
            Some((_, has)) if has != m => stops.push(format!(
                "Python {m} for aarch64 is not reachable: this host's Debian {rel} arm64 archive ships Python {has}; provisioning stops with exit 3 (pass --python python{has}: host and target Pythons are the same minor)"
            )),
            _ => {}
        },
        (_, None) => stops.push(format!(
            "the target Python's minor is not known before the host toolchain is (`{python}`); Debian's arm64 archive must have it (bookworm: 3.11)"
        )),
        _ => {}
    }
    let qemu = which("qemu-aarch64-static").or_else(|| which("qemu-aarch64"));
    if qemu.is_none() {
        stops.push(
            "qemu-aarch64 not found: the import check after the build cannot run (apt-get install qemu-user-static)"
                .into(),
        );
    }
    let sysroot_holds = vec![
        format!("site/: aarch64 wheels for {PYTHON_PLATFORM}, Python {py} (uv pip install --target): the host's torch version and its nvidia-cuda-runtime, -crt, -cccl, -profiler-api, nvidia-nvtx, nvidia-nvshmem"),
        format!("root/: Debian's arm64 python{py}-minimal, libpython{py}-stdlib, libpython{py}-dev, libstdc++6 and their dependencies (apt-get download + dpkg-deb -x, a private apt state)"),
        format!("python/: the target's headers (arm64 pyconfig.h) and _sysconfigdata__{TRIPLE}"),
        "cuda-home/: a wrapper of the host's nvcc, the target's CUDA headers and libraries, an aarch64 libcuda.so link stub".into(),
        format!("bin/: {TRIPLE}-gcc/-g++ wrappers that map host paths (torch, NVSHMEM, Python headers) to the target's"),
    ];
    crate::builder::plan::CrossPreview {
        host: Arch::X86_64.as_str().into(),
        target: Arch::Aarch64.as_str().into(),
        triple: TRIPLE.into(),
        python_platform: PYTHON_PLATFORM.into(),
        target_python: minor,
        compilers,
        qemu,
        sysroot,
        sysroot_holds,
        stops,
    }
}

/// The sysroot at `root` (`<cache>/toolchains/<key>`) when complete, of this
/// layout and still at that place (its wrappers hold absolute paths: a moved
/// cache makes a new one).
fn read_identity(cache_dir: &Path, key: &str, root: &Path) -> Option<Sysroot> {
    let s: Sysroot = serde_json::from_slice(&registry::read_in_cache(cache_dir, key, IDENTITY_FILE)?).ok()?;
    (s.layout == LAYOUT && s.root == root).then_some(s)
}

/// `aarch64-linux-gnu-gcc` and `-g++` on PATH, with their versions (exit 3 when missing).
fn cross_compilers() -> Result<BTreeMap<String, Compiler>> {
    let mut out = BTreeMap::new();
    for k in ["gcc", "g++"] {
        let name = format!("{TRIPLE}-{k}");
        let path = which(&name).ok_or_else(|| {
            Failure::env(format!(
                "the cross compiler {name} is not on PATH (an aarch64 variant on an x86_64 host is cross-compiled)"
            ))
            .hint(
                "install it, e.g. `apt-get install g++-aarch64-linux-gnu` (Debian/Ubuntu), or build on an aarch64 host",
            )
        })?;
        let v = Cmd::new(&path, format!("read {name}'s version")).args(["--version"]).output()?;
        out.insert(k.to_string(), Compiler { path, version: v.lines().next().unwrap_or("").to_string() });
    }
    Ok(out)
}

/// What the target's site-packages gets: the host's torch (same version) and
/// the CUDA packages whose headers and libraries the build uses, at the host's versions.
fn target_requirements(host: &Provisioned) -> Result<Vec<String>> {
    let pinned = |n: &str| -> Result<String> {
        let v = host.packages.get(n).ok_or_else(|| {
            Failure::problems(format!(
                "the registry toolchain {} has no {n} to match on the target",
                host.root.display()
            ))
        })?;
        // The versions come from the toolchain's identity in the (possibly shared) cache.
        forge_model::pep::requirement(n, forge_model::pep::Op::Exact, v)
            .map_err(|e| Failure::problems(format!("the registry toolchain {}: {n} {e}", host.root.display())).into())
    };
    let major = host.cuda.split('.').next().unwrap_or("");
    let mut v = vec![pinned("torch")?];
    for n in ["nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-profiler-api", "nvidia-nvtx"] {
        v.push(pinned(n)?);
    }
    v.push(pinned(&format!("nvidia-nvshmem-cu{major}"))?);
    Ok(v)
}

fn make(
    host: &Provisioned,
    host_tc: &Toolchain,
    minor: &str,
    compilers: BTreeMap<String, Compiler>,
    stage: &Tree,
    root: &Path,
    key: &str,
) -> Result<Sysroot> {
    // 1. Debian's arm64 Python and libraries.
    let debs = debian_root(minor, stage)?;
    check_interrupted()?;
    // 2. The target's wheels.
    let uv = registry::find_uv(&host_tc.python.to_string_lossy())?;
    let site = stage.join("site");
    let reqs = target_requirements(host)?;
    let mut c =
        Cmd::new(&uv, format!("install {} for {PYTHON_PLATFORM} (Python {minor}) into the sysroot", reqs.join(" ")));
    c.cmd.env_remove("VIRTUAL_ENV").env_remove("CONDA_PREFIX");
    c.args(["pip", "install", "--quiet", "--target"])
        .arg(&site)
        .args(["--python-platform", PYTHON_PLATFORM, "--python-version", minor, "--python"])
        .arg(&host_tc.python)
        .args(&reqs)
        .output()
        .map_err(|e| {
            Failure::env(format!("{e:#}")).hint(
                "check that the registry is reachable and has these packages for aarch64 (uv honours UV_INDEX_URL, UV_FIND_LINKS)",
            )
        })?;
    check_interrupted()?;
    let packages = dist_infos(stage, Path::new("site"))?;
    let droot = Path::new("root");
    let python_version = debs
        .get(&format!("python{minor}-minimal"))
        .map(|v| v.split(['-', '+', '~']).next().unwrap_or(v).to_string())
        .context("python-minimal version")?;
    // 3. The target Python's headers (Debian's pyconfig.h dispatches on the
    //    compiler's macros to a multiarch folder: put the arm64 one in place)
    //    and sysconfig data.
    let inc = PathBuf::from(format!("python/include/python{minor}"));
    copy_dir(stage, &droot.join(format!("usr/include/python{minor}")), &inc)?;
    stage
        .copy_to(
            droot.join(format!("usr/include/{TRIPLE}/python{minor}/pyconfig.h")),
            stage,
            inc.join("pyconfig.h"),
            forge_os::input::cap::TEXT,
            forge_os::fs::PUBLIC,
        )
        .context("the arm64 pyconfig.h (libpython-dev:arm64)")?;
    let sysconfigdata = format!("_sysconfigdata__{TRIPLE}");
    let scd_src = droot.join(format!("usr/lib/python{minor}/{sysconfigdata}.py"));
    let scd = stage.read_text(&scd_src, forge_os::input::cap::TEXT)?;
    let ext_suffix = config_var(&scd, "EXT_SUFFIX")
        .with_context(|| format!("{} has no EXT_SUFFIX", stage.join(&scd_src).display()))?;
    stage.create_dir_all("python/sysconfig")?;
    stage.write(format!("python/sysconfig/{sysconfigdata}.py"), scd.as_bytes())?;
    // 4. CUDA_HOME: the host's nvcc (through the wrapper), the target's headers and libraries.
    let major = host.cuda.split('.').next().unwrap_or("");
    let cu = PathBuf::from(format!("site/nvidia/cu{major}"));
    stage.create_dir_all("cuda-home/bin")?;
    stage.symlink(format!("../site/nvidia/cu{major}/include"), "cuda-home/include")?;
    let stub_symbols = lib64(stage, &cu, Path::new("cuda-home/lib64"), &compilers["gcc"].path)?;
    stage.create_dir_all("driver-stub")?;
    stage.symlink("../cuda-home/lib64/libcuda.so", "driver-stub/libcuda.so.1")?;
    // 5. The wrappers, with the final (published) paths.
    let final_site = root.join("site");
    // Host packages are matched by their place in any site-packages (`.../site-packages/torch`):
    // the build may see the host environment through a link (the build root's `toolchain`).
    let mut path_map: Vec<(String, String)> = SITE_PACKAGES_MAPPED
        .iter()
        .map(|p| (format!("{SITE_PATTERN}{p}"), final_site.join(p).to_string_lossy().into_owned()))
        .collect();
    for d in host_includes(&host_tc.python)? {
        let d = d.to_string_lossy().into_owned();
        if !path_map.iter().any(|(h, _)| *h == d) {
            path_map.push((d, root.join(format!("python/include/python{minor}")).to_string_lossy().into_owned()));
        }
    }
    stage.create_dir_all("bin")?;
    for (k, c) in &compilers {
        write_wrapper(stage, &format!("bin/{TRIPLE}-{k}"), &c.path, &path_map)?;
    }
    write_wrapper(stage, "cuda-home/bin/nvcc", &host_tc.cuda_home.join("bin/nvcc"), &path_map)?;
    Ok(Sysroot {
        layout: LAYOUT,
        root: root.to_path_buf(),
        key: key.to_string(),
        host: std::env::consts::ARCH.into(),
        target: Arch::Aarch64.as_str().into(),
        triple: TRIPLE.into(),
        python_platform: PYTHON_PLATFORM.into(),
        python_version,
        ext_suffix,
        sysconfigdata,
        packages,
        debs,
        compilers,
        path_map,
        stub_symbols,
    })
}

/// The host Python's header folders (sysconfig `include`, `platinclude`).
fn host_includes(python: &Path) -> Result<Vec<PathBuf>> {
    let out = Cmd::new(python, "ask the host Python for its header folders")
        .args([
            "-c",
            "import sysconfig as s, json; p = s.get_paths(); print(json.dumps([p['include'], p['platinclude']]))",
        ])
        .output()?;
    let v: Vec<PathBuf> = serde_json::from_str(out.trim()).context("the host Python's header folders")?;
    Ok(v)
}

/// `'NAME': 'value'` in a `_sysconfigdata_*.py`.
fn config_var(text: &str, name: &str) -> Option<String> {
    let pat = format!("'{name}': '");
    let rest = &text[text.find(&pat)? + pat.len()..];
    Some(rest[..rest.find('\'')?].to_string())
}

/// Package name -> version from the `*.dist-info` folders of `site` (in `stage`).
fn dist_infos(stage: &Tree, site: &Path) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for n in stage.names(site)? {
        if let Some(stem) = n.strip_suffix(".dist-info") {
            // Folder names are untrusted text: only a PEP 440 version is taken from one.
            let valid = |v: &str| <pep440_rs::Version as std::str::FromStr>::from_str(v).is_ok();
            if let Some((name, version)) = stem.rsplit_once('-').filter(|(_, v)| valid(v)) {
                out.insert(name.to_lowercase().replace('_', "-"), version.to_string());
            }
        }
    }
    Ok(out)
}

/// The Debian arm64 packages of Python `minor` (interpreter, stdlib, headers)
/// and libstdc++, with their dependencies, downloaded through a private apt
/// state under `stage/apt` (the system's sources, arm64 as the only
/// architecture) and unpacked into `stage/root`. Returns name -> version.
fn debian_root(minor: &str, stage: &Tree) -> Result<BTreeMap<String, String>> {
    for tool in ["apt-get", "apt-cache", "dpkg-deb"] {
        which(tool).ok_or_else(|| {
            Failure::env(format!("{tool} not found: the cross build takes the target's Python and C libraries from Debian's arm64 archive"))
                .hint("cross-build on a Debian or Ubuntu host, or build on an aarch64 host")
        })?;
    }
    let apt = stage.join("apt");
    for d in ["lists/partial", "cache/archives/partial", "debs"] {
        stage.create_dir_all(Path::new("apt").join(d))?;
    }
    let opts: Vec<String> = vec![
        format!("-oDir::State::Lists={}", apt.join("lists").display()),
        format!("-oDir::Cache={}", apt.join("cache").display()),
        "-oAPT::Architecture=arm64".into(),
        "-oAPT::Architectures::=arm64".into(),
        "-oDebug::NoLocking=1".into(),
        "-oAPT::Sandbox::User=root".into(),
    ];
    let run = |tool: &str, purpose: String, args: &[&str], dir: &Path| -> Result<String> {
        Cmd::new(tool, purpose).args(&opts).args(args).dir(dir).output().map_err(|e| {
            Failure::env(format!("{e:#}"))
                .hint("check that the host's apt sources (Debian/Ubuntu) are reachable and carry arm64 packages")
                .into()
        })
    };
    run("apt-get", "read the arm64 package lists (private apt state)".into(), &["-q", "update"], &apt)?;
    let roots = [
        format!("python{minor}-minimal"),
        format!("libpython{minor}-stdlib"),
        format!("libpython{minor}-dev"),
        "libstdc++6".into(),
    ];
    let root_refs: Vec<&str> = roots.iter().map(String::as_str).collect();
    let mut args = vec![
        "depends",
        "--recurse",
        "--no-recommends",
        "--no-suggests",
        "--no-conflicts",
        "--no-breaks",
        "--no-replaces",
        "--no-enhances",
    ];
    args.extend(&root_refs);
    let deps = run("apt-cache", format!("resolve the arm64 dependencies of {}", roots.join(" ")), &args, &apt)
        .map_err(|e| {
            anyhow::Error::from(
                Failure::env(format!("Debian's arm64 archive has no Python {minor} ({e:#})"))
                    .hint("pass --python with the minor Debian ships for arm64 (bookworm: 3.11); the host and target Pythons must be the same minor"),
            )
        })?;
    let names: BTreeSet<String> = deps
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('<') && !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .filter(|n| {
            n.starts_with(|c: char| c.is_ascii_alphanumeric())
                && n.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        })
        .collect();
    if !names.contains(&format!("libpython{minor}-dev")) {
        return Err(Failure::env(format!("Debian's arm64 archive has no Python {minor} (no libpython{minor}-dev for arm64 in the host's apt sources)"))
            .hint("pass --python with the minor Debian ships for arm64 (bookworm: 3.11); the host and target Pythons must be the same minor")
            .into());
    }
    let debs_dir = apt.join("debs");
    let mut dl: Vec<&str> = vec!["-q", "download"];
    dl.extend(names.iter().map(String::as_str));
    run("apt-get", format!("download {} arm64 packages", names.len()), &dl, &debs_dir)?;
    let mut out = BTreeMap::new();
    let droot = stage.join("root");
    stage.create_dir_all("root")?;
    for f in stage.names("apt/debs")? {
        let Some(stem) = f.strip_suffix("_arm64.deb").or_else(|| f.strip_suffix("_all.deb")) else { continue };
        let Some((name, version)) = stem.split_once('_') else { continue };
        Cmd::new("dpkg-deb", format!("unpack {f}")).arg("-x").arg(debs_dir.join(&f)).arg(&droot).output()?;
        out.insert(name.to_string(), version.replace("%3a", ":"));
    }
    stage.remove_all("apt")?;
    Ok(out)
}

/// Copy the folder `from` of `tree` to `to` (folders and regular files; links
/// are left out, never followed).
fn copy_dir(tree: &Tree, from: &Path, to: &Path) -> Result<()> {
    tree.create_dir_all(to)?;
    for e in tree.walk(from, Walk::default())? {
        let t = to.join(e.rel.strip_prefix(from).context("a walked name is below its start")?);
        match e.kind {
            Kind::Dir => tree.create_dir_all(&t)?,
            Kind::File { .. } => {
                tree.copy_to(&e.rel, tree, &t, forge_os::input::cap::WHEEL, forge_os::fs::PUBLIC)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// `lib64/`: links to the target's CUDA libraries (plus unversioned names)
/// and an aarch64 `libcuda.so` link stub compiled by the cross gcc; `cu` and
/// `lib64` inside `stage`. Returns the stub's symbol count.
fn lib64(stage: &Tree, cu: &Path, lib64: &Path, gcc: &Path) -> Result<usize> {
    stage.create_dir_all(lib64)?;
    let major = cu.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let names: BTreeSet<String> = stage.names(cu.join("lib"))?.into_iter().collect();
    for name in &names {
        stage.symlink(format!("../../site/nvidia/{major}/lib/{name}"), lib64.join(name))?;
    }
    registry::link_unversioned(stage, lib64, &names)?;
    registry::link_stub(stage, cu, lib64, gcc, "aarch64 libcuda.so link stub")
}

/// A bash wrapper that rewrites every argument, then runs `real`: a host
/// prefix of `map` becomes its target path; an entry `*/site-packages/P`
/// matches `P` under any absolute `.../site-packages/` (followed by `/`, the
/// end or a separator: `torch` never matches `torchgen`).
fn write_wrapper(tree: &Tree, rel: &str, real: &Path, map: &[(String, String)]) -> Result<()> {
    let q = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    type Pair = (String, String);
    let (pat, exact): (Vec<&Pair>, Vec<&Pair>) = map.iter().partition(|(h, _)| h.starts_with(SITE_PATTERN));
    let pairs = |v: &[&Pair], strip: usize| -> String {
        v.iter().map(|(h, t)| format!("{} {}", q(&h[strip..]), q(t))).collect::<Vec<_>>().join(" ")
    };
    let text = format!(
        r#"#!/bin/bash
# deepep-forge cross wrapper: host paths -> target sysroot, then {real}
m=({exact})
p=({pat})
a=()
for x in "$@"; do
  for ((i = 0; i < ${{#m[@]}}; i += 2)); do x="${{x//"${{m[i]}}"/"${{m[i+1]}}"}}"; done
  for ((i = 0; i < ${{#p[@]}}; i += 2)); do
    re="(/[^,:=[:space:]]*/site-packages/)${{p[i]}}(/|$|[,:=[:space:]])"
    while [[ $x =~ $re ]]; do
      x="${{x/"${{BASH_REMATCH[1]}}${{p[i]}}"/"${{p[i+1]}}"}}"
    done
  done
  a+=("$x")
done
exec {real_q} "${{a[@]}}"
"#,
        real = real.display(),
        exact = pairs(&exact, 0),
        pat = pairs(&pat, SITE_PATTERN.len()),
        real_q = q(&real.to_string_lossy()),
    );
    tree.write_with(rel, 0o755, |f| {
        forge_os::fs::set_file_mode(f, 0o755)?;
        Ok(f.write_all(text.as_bytes())?)
    })
}

/// What the post-build checks found.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    /// extension -> NEEDED -> where it resolved in the sysroot (or the driver's).
    pub needed: BTreeMap<String, BTreeMap<String, String>>,
    /// The import check's output under qemu, or why it was not run.
    pub import: String,
}

/// Check a built cross wheel against the sysroot: every NEEDED of its
/// extensions resolves (RUNPATH with `$ORIGIN` as installed into the target's
/// site-packages, the target's wheels, Debian's libraries), except the
/// driver's own; then `import deep_ep, hybrid_ep_cpp` under qemu-aarch64 with
/// Debian's arm64 Python, the target's site-packages and the libcuda stub.
pub fn check_wheel(wheel: &Path, s: &Sysroot, tmp: &Path) -> Result<Checked> {
    let dir = Tree::open(tmp, "build folder")?.sub_create("cross-check", "cross check folder")?;
    unpack(wheel, &dir)?;
    let sysroot = Tree::open(&s.root, "cross sysroot")?;
    // Installed beside the target's packages (RUNPATHs are `$ORIGIN`-relative to site-packages).
    for name in sysroot.names("site")? {
        if !dir.exists(&name) {
            dir.symlink(s.site().join(&name), &name)?;
        }
    }
    let mut needed = BTreeMap::new();
    let mut missing = Vec::new();
    let lib_dirs = library_dirs(s, &sysroot);
    for e in dir.list(".", forge_os::fs::MAX_NAMES)?.entries {
        let Some(name) =
            e.utf8().filter(|n| n.ends_with(".so") && matches!(e.kind, Kind::File { .. })).map(String::from)
        else {
            continue;
        };
        let data = dir.read(&name, forge_os::input::cap::WHEEL)?;
        let Some(elf) = super::relocate::ElfDynamic::parse(&data)? else { continue };
        let mut found = BTreeMap::new();
        for n in &elf.needed {
            if DRIVER_LIBS.contains(&n.as_str()) {
                found.insert(n.clone(), "the NVIDIA driver (run machine)".to_string());
                continue;
            }
            let runpath =
                elf.runpath.iter().map(|r| PathBuf::from(r.replace("$ORIGIN", &dir.path().to_string_lossy())));
            let exists = |p: &PathBuf| forge_os::fs::named::kind_through(p) != Kind::Missing;
            match runpath.chain(lib_dirs.iter().cloned()).map(|d| d.join(n)).find(exists) {
                Some(p) => {
                    let p = forge_os::fs::named::canonical_opt(&p).unwrap_or(p);
                    found.insert(n.clone(), p.strip_prefix(&s.root).unwrap_or(&p).display().to_string());
                }
                None => missing.push(format!("{name}: {n}")),
            }
        }
        needed.insert(name, found);
    }
    if !missing.is_empty() {
        return Err(Failure::problems(format!(
            "the cross-built wheel needs libraries the aarch64 sysroot {} does not have: {}",
            s.root.display(),
            missing.join(", ")
        ))
        .hint("a library the extensions link must come from the target's wheels (pins the same packages as the host) or the driver")
        .into());
    }
    let import = import_check(dir.path(), s)?;
    Ok(Checked { needed, import })
}

/// Every member of `wheel` written into `dir` (a member's name is a path
/// inside it: the wheel reader refuses one that leaves it).
fn unpack(wheel: &Path, dir: &Tree) -> Result<()> {
    let mut w = forge_wheel::wheel::open(wheel)?;
    for name in w.names() {
        if name.ends_with('/') {
            dir.create_dir_all(&name)?;
            continue;
        }
        let bytes = w.member(&name, forge_os::input::cap::WHEEL)?.context("a listed member")?;
        if let Some(parent) = Path::new(&name).parent().filter(|p| !p.as_os_str().is_empty()) {
            dir.create_dir_all(parent)?;
        }
        dir.write(&name, &bytes).with_context(|| format!("unpacking {}", wheel.display()))?;
    }
    Ok(())
}

/// Library folders of the target, as its loader would search them once the wheel is installed beside the target's packages.
fn library_dirs(s: &Sysroot, sysroot: &Tree) -> Vec<PathBuf> {
    let mut v = vec![s.site().join("torch/lib")];
    let nvidia = Path::new("site/nvidia");
    let libs = sysroot.names(nvidia).unwrap_or_default();
    v.extend(
        libs.iter()
            .filter(|n| sysroot.is_dir(nvidia.join(n).join("lib")))
            .map(|n| s.site().join("nvidia").join(n).join("lib")),
    );
    let r = s.debian_root();
    v.extend([r.join(format!("lib/{TRIPLE}")), r.join(format!("usr/lib/{TRIPLE}")), r.join("lib"), r.join("usr/lib")]);
    v
}

/// `import deep_ep` and `hybrid_ep_cpp` under qemu-aarch64 (exit 3 without qemu).
fn import_check(wheel_dir: &Path, s: &Sysroot) -> Result<String> {
    let qemu = which("qemu-aarch64-static").or_else(|| which("qemu-aarch64")).ok_or_else(|| {
        Failure::env(
            "qemu-aarch64 not found: the cross build's import check runs the wheel under Debian's arm64 Python",
        )
        .hint("install it, e.g. `apt-get install qemu-user-static` (Debian/Ubuntu)")
    })?;
    let code = "import deep_ep, hybrid_ep_cpp, sys; print('import ok:', deep_ep.__name__, hybrid_ep_cpp.__name__, 'under Python', sys.version.split()[0], sys.implementation._multiarch)";
    let mut c = Cmd::new(&qemu, "import deep_ep and hybrid_ep_cpp under qemu-aarch64");
    c.cmd.env_clear().env("PATH", forge_os::environ::var_os("PATH").unwrap_or_default());
    let out = c
        .arg("-L")
        .arg(s.debian_root())
        .arg(s.python())
        .args(["-c", code])
        .dir(wheel_dir)
        .env("PYTHONPATH", wheel_dir)
        .env("LD_LIBRARY_PATH", s.driver_stub_dir())
        .env("PYTHONNOUSERSITE", "1")
        .output()
        .map_err(|e| {
            Failure::problems(format!("{e:#}")).hint("the wheel does not import on aarch64: see the error above")
        })?;
    Ok(out.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minor_of_reads_versions_and_names() {
        assert_eq!(minor_of("3.12").as_deref(), Some("3.12"));
        assert_eq!(minor_of("3.11.2").as_deref(), Some("3.11"));
        assert_eq!(minor_of("/usr/bin/python3.11").as_deref(), Some("3.11"));
        assert_eq!(minor_of("python3"), None);
        assert_eq!(minor_of("/opt/py/bin/python"), None);
    }

    #[test]
    fn config_var_reads_sysconfigdata() {
        let t = "build_time_vars = {'ABIFLAGS': '',\n 'EXT_SUFFIX': '.cpython-311-aarch64-linux-gnu.so',\n}";
        assert_eq!(config_var(t, "EXT_SUFFIX").as_deref(), Some(".cpython-311-aarch64-linux-gnu.so"));
        assert_eq!(config_var(t, "SOABI"), None);
    }

    #[test]
    fn only_x86_registry_builds_aarch64_by_cross() {
        use registry::Kind::*;
        assert!(is_cross(Registry, Some(Arch::X86_64), Arch::Aarch64));
        assert!(!is_cross(System, Some(Arch::X86_64), Arch::Aarch64));
        assert!(!is_cross(Registry, Some(Arch::Aarch64), Arch::Aarch64));
        assert!(!is_cross(Registry, Some(Arch::X86_64), Arch::X86_64));
    }

    #[test]
    fn the_wrapper_maps_host_paths_in_every_argument() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("w");
        let map = vec![
            ("/usr/include/python3.11".to_string(), "/t/py".to_string()),
            (format!("{SITE_PATTERN}torch"), "/t/it's/torch".to_string()),
        ];
        let tree = Tree::open(d.path(), "test folder").unwrap();
        write_wrapper(&tree, "w", Path::new("/bin/echo"), &map).unwrap();
        let o = std::process::Command::new(&w)
            .args([
                "-I/h/lib/python3.11/site-packages/torch/include",
                "a b",
                "-Wl,-rpath,/root-link/env/site-packages/torch/lib",
                "-I/h/site-packages/torchgen",
                "-I/usr/include/python3.11",
                "-L/h/site-packages/torch",
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "-I/t/it's/torch/include a b -Wl,-rpath,/t/it's/torch/lib -I/h/site-packages/torchgen -I/t/py -L/t/it's/torch\n"
        );
    }
}
