//! A build lab for build-wheel tests: the mini-deepep fixture as a real git
//! repository, a build Python (a venv whose `.pth` reaches the tools venv's
//! setuptools/wheel/pip) with a stand-in NVSHMEM library in its site-packages
//! (so the build bakes a RUNPATH into the build environment, as DeepEP does),
//! a pins file naming the repository's commit, cache and output folders.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;

/// The single-node `h100`-shaped variant `r` (arch list 9.0, 1 x 8 GPUs, EP 8) that the
/// build tests append to the lab's pins (`Lab::pins_with`).
pub const VARIANT_R: &str = r#"
[[variant]]
name = "r"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

pub struct Lab {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub rev: String,
    pub python: PathBuf,
    /// The build venv's site-packages.
    pub site: PathBuf,
    pub cache: PathBuf,
    pub out: PathBuf,
    pub tools: PathBuf,
    pub cuda_home: PathBuf,
}

/// A two-architecture variant (`9.0 10.0`: nvcc `--threads 2` with two jobs), named `two`.
pub const TWO_ARCH: &str = r#"
[[variant]]
name = "two"
arch = "x86_64"
cuda_arch_list = "9.0 10.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

/// Variant tables for pins files; `{nvshmem}` is replaced by the lab's NVSHMEM dir
/// (`sn` names it as nvshmem_dir).
pub const SINGLE: &str = r#"
[[variant]]
name = "sn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
nvshmem_dir = "{nvshmem}"
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }

[[variant]]
name = "arm"
arch = "aarch64"
cuda_arch_list = "10.0"
multinode = false
topology = { gpu = "gb200", nodes = 1, gpus_per_node = 4, ep = 4, ranks_per_domain = 4, mnnvl = false }
"#;

impl Lab {
    /// A lab in a fresh temp folder; the calling test FAILS, saying how to get
    /// it, when the tools venv or its nvcc is missing (such tests are
    /// ignored unless the `needs-tools-venv` feature is on).
    pub fn new() -> Lab {
        let tools = support::tools_venv().unwrap_or_else(|| support::missing("the tools venv"));
        let cuda_home = support::cuda_home().unwrap_or_else(|| support::missing("nvcc in the tools venv"));
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("DeepEP");
        let rev = support::git_repo_from_fixture("mini-deepep", &repo);
        let venv = dir.path().join("build-venv");
        run(Command::new(tools.join("bin/python")).args(["-m", "venv", "--without-pip"]).arg(&venv));
        let site = site_packages(&venv);
        let tools_site = site_packages(&tools);
        std::fs::write(site.join("forge-tools.pth"), format!("{}\n", tools_site.display())).unwrap();
        let nvshmem = site.join("nvidia/nvshmem/lib");
        fake_nvshmem(&nvshmem);
        // The `sn` variant names this folder as nvshmem_dir, and DeepEP then links
        // `-l:libnvshmem_host.so`: the unversioned name a system NVSHMEM has and the
        // pip package lacks (NeMo-RL's Dockerfile makes this same link).
        std::os::unix::fs::symlink("libnvshmem_host.so.3", nvshmem.join("libnvshmem_host.so")).unwrap();
        let lab = Lab {
            python: venv.join("bin/python"),
            site,
            cache: dir.path().join("cache"),
            out: dir.path().join("out"),
            repo,
            rev,
            tools,
            cuda_home,
            dir,
        };
        lab
    }

    pub fn nvshmem_dir(&self) -> PathBuf {
        self.site.join("nvidia/nvshmem")
    }

    /// `p` (inside the lab's build venv) as a build sees it: through this
    /// user's build root's `python/` link.
    pub fn in_build_root(&self, p: &Path) -> PathBuf {
        let venv = self.dir.path().join("build-venv");
        let root = forge_build::builder::canon::user_root().join("python");
        match p.strip_prefix(&venv) {
            Ok(rest) => root.join(rest),
            Err(_) => p.to_path_buf(),
        }
    }

    /// `p` (inside the lab's build venv) as a wheel records it (a RUNPATH the
    /// linker wrote, the provenance's patches): under the canonical root's `python/`.
    pub fn as_recorded(&self, p: &Path) -> PathBuf {
        let root = forge_build::builder::canon::user_root();
        let canonical = Path::new(forge_build::builder::canon::CANONICAL_ROOT);
        let seen = self.in_build_root(p);
        seen.strip_prefix(&root).map(|rest| canonical.join(rest)).unwrap_or(seen)
    }

    /// Write a pins file for `rev` with `variants` (see [`SINGLE`]). Its repo
    /// is DeepEP's URL (a pins file names only remote repositories); the lab's
    /// local repository is passed as `--source` by [`Lab::forge`].
    pub fn pins_with(&self, rev: &str, variants: &str) -> PathBuf {
        let p = self.dir.path().join("pins.toml");
        let text = format!(
            "schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbranch = \"main\"\nbase_version = \"1.2.1\"\n[pin.x86_64]\nrev = \"{rev}\"\n[pin.aarch64]\nrev = \"{rev}\"\n{}",
            variants.replace("{nvshmem}", &self.nvshmem_dir().to_string_lossy())
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn pins(&self) -> PathBuf {
        self.pins_with(&self.rev, SINGLE)
    }

    /// The binary with the lab's cache, CUDA, a clean build environment, and
    /// (unless `args` give their own) the lab's --python and --out.
    pub fn forge(&self, args: &[&str]) -> Command {
        let mut c = support::bin();
        c.args(args);
        if matches!(args.first(), Some(&"plan" | &"build-wheel")) && !args.contains(&"--source") {
            c.arg("--source").arg(&self.repo);
        }
        if !args.contains(&"--python") {
            c.arg("--python").arg(&self.python);
        }
        if !args.contains(&"--out") {
            c.arg("--out").arg(&self.out);
        }
        c.current_dir(self.dir.path())
            .env("DEEPEP_FORGE_CACHE_DIR", &self.cache)
            .env("CUDA_HOME", &self.cuda_home)
            .env("PATH", format!("{}:{}", self.tools.join("bin").display(), std::env::var("PATH").unwrap_or_default()))
            .env_remove("DEEPEP_FORGE_CACHE_URL");
        for k in [
            "HYBRID_EP_MULTINODE",
            "USE_NIXL",
            "TORCH_CUDA_ARCH_LIST",
            "RDMA_CORE_HOME",
            "NVSHMEM_DIR",
            "MAX_JOBS",
            "CXX",
            "CC",
            "CUDAHOSTCXX",
        ] {
            c.env_remove(k);
        }
        c
    }

    /// Wheels in the output folder.
    pub fn out_wheels(&self) -> Vec<PathBuf> {
        files_with(&self.out, ".whl")
    }

    /// Everything under the cache's wheels/ and tmp/ folders.
    pub fn cache_entries(&self) -> Vec<PathBuf> {
        ["wheels", "tmp"]
            .iter()
            .flat_map(|d| std::fs::read_dir(self.cache.join(d)).into_iter().flatten().flatten().map(|e| e.path()))
            .collect()
    }
}

/// Every file under `dir` at any depth, sorted (none when `dir` is absent).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect();
    v.sort();
    v
}

pub fn files_with(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

pub fn site_packages(venv: &Path) -> PathBuf {
    let lib = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python"))
        .unwrap();
    lib.path().join("site-packages")
}

/// A real shared library standing in for NVSHMEM's host library.
pub fn fake_nvshmem(lib_dir: &Path) {
    std::fs::create_dir_all(lib_dir).unwrap();
    let src = lib_dir.join("nvshmem.c");
    std::fs::write(&src, "int nvshmem_my_pe(void) { return 0; }\n").unwrap();
    run(Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libnvshmem_host.so.3", "-o"])
        .arg(lib_dir.join("libnvshmem_host.so.3"))
        .arg(&src));
    std::fs::remove_file(src).unwrap();
    std::fs::write(lib_dir.join("libnvshmem_device.a"), nvshmem_device_library()).unwrap();
}

/// A real device library (`nvcc -lib` of one relocatable sm_90 object), as NVSHMEM's
/// `libnvshmem_device.a` that DeepEP's device link names: compiled once per test process.
fn nvshmem_device_library() -> &'static [u8] {
    static LIB: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let nvcc = support::cuda_home().unwrap_or_else(|| support::missing("nvcc in the tools venv")).join("bin/nvcc");
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("device.cu"), "__device__ int nvshmem_stand_in_my_pe(void) { return 0; }\n")
            .unwrap();
        run(Command::new(&nvcc).current_dir(d.path()).args([
            "-rdc=true",
            "-Xcompiler",
            "-fPIC",
            "-c",
            "device.cu",
            "-o",
            "device.o",
            "-gencode",
            "arch=compute_90,code=sm_90",
        ]));
        run(Command::new(&nvcc).current_dir(d.path()).args(["-lib", "device.o", "-o", "libnvshmem_device.a"]));
        std::fs::read(d.path().join("libnvshmem_device.a")).unwrap()
    })
}

pub fn run(c: &mut Command) -> String {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The build report / JSON stdout of a successful command.
pub fn json(o: &std::process::Output) -> serde_json::Value {
    assert_eq!(o.status.code(), Some(0), "stderr: {}\nstdout: {}", support::stderr(o), support::stdout(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", support::stdout(o)))
}

/// sha256 hex of a file, by the system's `sha256sum`.
pub fn sha256sum(p: &Path) -> String {
    run(Command::new("sha256sum").arg(p)).split_whitespace().next().unwrap().to_string()
}
