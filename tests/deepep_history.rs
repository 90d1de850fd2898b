//! The plan against real DeepEP history: hybrid-ep 17cfb817 and its tip
//! 94a9f8f, main (EPv2) dd758ca. The repository comes from
//! DEEPEP_FORGE_DEEPEP_MIRROR (a local clone or bare mirror of
//! github.com/deepseek-ai/DeepEP holding those commits); the tests are
//! ignored (`bash .ci/run` runs them when the variable names a folder; run by
//! hand without it, each fails saying so). Plans only (no build), made on a
//! "machine without nvcc": PATH without CUDA, CUDA_HOME unset, a Python without
//! the nvidia-cuda-nvcc wheel.
mod support;

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;
use support::*;

const HYBRID: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";
const HYBRID_TIP: &str = "94a9f8f6b146c07d97ec58f67cd6d303296d6098";
const MAIN: &str = "dd758caf451848bd150e1046af3d0a73e5fff38d";

fn mirror() -> PathBuf {
    let m = std::env::var_os("DEEPEP_FORGE_DEEPEP_MIRROR").map(PathBuf::from);
    match m {
        Some(m) if m.is_dir() => m,
        _ => panic!("not run: DEEPEP_FORGE_DEEPEP_MIRROR does not name a local DeepEP repository (clone github.com/deepseek-ai/DeepEP and point it there)"),
    }
}

const VARIANTS: &str = r#"
[[variant]]
name = "h100"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }

[[variant]]
name = "h100-multinode"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = true
transport = "doca"
topology = { gpu = "h100", nodes = 2, gpus_per_node = 8, ep = 16, ranks_per_domain = 8, mnnvl = false }
"#;

struct Scene {
    dir: tempfile::TempDir,
    mirror: PathBuf,
    multinode: std::cell::Cell<bool>,
}

impl Scene {
    fn new() -> Scene {
        Scene { dir: tempfile::tempdir().unwrap(), mirror: mirror(), multinode: false.into() }
    }

    /// Pins for `rev`: both variants on hybrid-ep; on main only the single-node
    /// one unless `multinode` (main cannot build the other: `--all` would refuse).
    fn pins(&self, rev: &str, branch: &str) -> PathBuf {
        let p = self.dir.path().join(format!("pins-{}.toml", &rev[..7]));
        let variants = if branch == "main" && !self.multinode.get() {
            VARIANTS.split("\n[[variant]]").take(2).collect::<Vec<_>>().join("\n[[variant]]")
        } else {
            VARIANTS.to_string()
        };
        std::fs::write(
            &p,
            format!("schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbranch = \"{branch}\"\nbase_version = \"1.2.1\"\n[pin.x86_64]\nrev = \"{rev}\"\n{variants}"),
        )
        .unwrap();
        p
    }

    /// `deepep-forge plan ...` with no CUDA anywhere (system Python, no nvcc on PATH).
    fn plan(&self, rev: &str, branch: &str, args: &[&str]) -> Output {
        let pins = self.pins(rev, branch);
        let mut c = bin();
        c.args(["plan", "--pins", pins.to_str().unwrap(), "--source", self.mirror.to_str().unwrap()])
            .args(["--python", "/usr/bin/python3"])
            .args(args)
            .current_dir(self.dir.path())
            .env("DEEPEP_FORGE_CACHE_DIR", self.dir.path().join("cache"))
            .env("PATH", "/usr/bin:/bin")
            .env_remove("CUDA_HOME")
            .env_remove("DEEPEP_FORGE_CACHE_URL");
        c.output().unwrap()
    }

    fn plan_json(&self, rev: &str, branch: &str, variant: &str) -> Value {
        let o = self.plan(rev, branch, &["--variant", variant, "--format", "json"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()["plans"][0].clone()
    }
}

fn read_names(p: &Value) -> Vec<String> {
    p["interface"]["knobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| !k["read_at"].as_array().unwrap().is_empty())
        .map(|k| k["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
#[ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"]
fn hybrid_ep_17cfb817_and_its_tip_plan_as_the_hybrid_ep_interface() {
    let s = Scene::new();
    for rev in [HYBRID, HYBRID_TIP] {
        let p = s.plan_json(rev, "hybrid-ep", "h100");
        let i = &p["interface"];
        assert_eq!(i["branch"], "hybrid-ep", "{rev}: {i}");
        assert_eq!(i["extensions"], serde_json::json!(["deep_ep_cpp", "hybrid_ep_cpp"]));
        assert_eq!(p["source"]["version"], format!("1.2.1+{}", &rev[..7]));
        assert!(i["version_from"].as_str().unwrap().starts_with("setup.py:"), "{i}");
        let names = read_names(&p);
        for k in [
            "HYBRID_EP_MULTINODE",
            "USE_NIXL",
            "NIXL_HOME",
            "UCX_HOME",
            "DOCA_HOME",
            "RDMA_CORE_HOME",
            "TORCH_CUDA_ARCH_LIST",
            "NVSHMEM_DIR",
            "DISABLE_SM90_FEATURES",
            "DISABLE_AGGRESSIVE_PTX_INSTRS",
        ] {
            assert!(names.contains(&k.to_string()), "{rev}: {k} not read: {names:?}");
        }
        assert_eq!(p["warnings"], serde_json::json!([]), "{rev}: every read is in the table");
        assert_eq!(p["run"]["env"]["HYBRID_EP_MULTINODE"], "0");
        assert_eq!(p["source"]["submodules"], serde_json::json!({}), "single-node needs no submodule");
        // On a machine without nvcc: the toolchain says so, the key waits for it.
        assert_eq!(p["toolchain"]["state"], "missing", "{}", p["toolchain"]);
        assert!(p["cache_key"].is_null() && p["cache_key_unknown"].is_string());
    }
    // The DOCA multinode variant needs the nccl submodule (recorded, not fetched).
    let p = s.plan_json(HYBRID, "hybrid-ep", "h100-multinode");
    assert_eq!(p["source"]["submodules"]["third-party/nccl"], "1e0c869c39bb33f1034cb9920bd2a8a8406f04a3");
}

#[test]
#[ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"]
fn main_dd758ca_plans_as_epv2_with_every_knob_its_build_reads() {
    let s = Scene::new();
    let p = s.plan_json(MAIN, "main", "h100");
    let i = &p["interface"];
    assert_eq!(i["branch"], "main", "{i}");
    assert_eq!(i["extensions"], serde_json::json!(["deep_ep._C"]));
    assert_eq!(i["version_from"], "deep_ep/__init__.py:97");
    assert_eq!(p["source"]["version"], "2.1.0+dd758ca");
    assert_eq!(p["source"]["submodules"]["third-party/fmt"], "a4c7e17133ee9cb6a2f45545f6e974dd3c393efa");
    assert_eq!(i["needs"], serde_json::json!(["torch", "NCCL", "NVSHMEM"]));
    // The six a grep of setup.py for os.getenv misses, and the rest.
    let names = read_names(&p);
    for k in [
        "EP_NCCL_ROOT_DIR",
        "NCCL_DIR",
        "EP_NVSHMEM_ROOT_DIR",
        "NVSHMEM_DIR",
        "EP_JIT_CACHE_DIR",
        "EP_JIT_PRINT_COMPILER_COMMAND",
        "EP_NUM_TOPK_IDX_BITS",
        "TOPK_IDX_BITS",
        "TORCH_CUDA_ARCH_LIST",
        "DISABLE_SM90_FEATURES",
        "DISABLE_AGGRESSIVE_PTX_INSTRS",
    ] {
        assert!(names.contains(&k.to_string()), "{k} not read: {names:?}");
    }
    let find_pkgs = |k: &str| {
        p["interface"]["knobs"].as_array().unwrap().iter().find(|x| x["name"] == k).unwrap()["read_at"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().starts_with("deep_ep/utils/find_pkgs.py:"))
    };
    assert!(find_pkgs("EP_NCCL_ROOT_DIR") && find_pkgs("NVSHMEM_DIR"), "f-string names expanded");
    assert!(
        p["warnings"].as_array().unwrap().iter().all(|w| w.as_str().unwrap().contains("base_version")),
        "{}",
        p["warnings"]
    );
    assert!(p["run"]["env"].get("HYBRID_EP_MULTINODE").is_none());

    // A variant that needs HybridEP: exit 2, naming the branch that has it.
    s.multinode.set(true);
    let o = s.plan(MAIN, "main", &["--variant", "h100-multinode"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("`hybrid-ep` branch") && stderr(&o).contains("dd758ca"), "{}", stderr(&o));
}

/// `plan --all` on a machine without nvcc exits 0 and prints what is missing.
#[test]
#[ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"]
fn plan_all_without_nvcc_exits_0_for_every_revision() {
    let s = Scene::new();
    for (rev, branch) in [(HYBRID, "hybrid-ep"), (MAIN, "main")] {
        let o = s.plan(rev, branch, &["--all"]);
        assert_eq!(o.status.code(), Some(0), "{rev}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("toolchain   system MISSING: nvcc not found"), "{out}");
        assert!(out.contains("cache key   unknown:"), "{out}");
    }
}

#[test]
#[ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"]
fn pin_set_writes_the_label_the_pinned_revision_builds() {
    let s = Scene::new();
    for (rev, label) in [(MAIN, "2.1.0+dd758ca"), (HYBRID_TIP, "1.2.1+94a9f8f")] {
        let d = tempfile::tempdir().unwrap();
        std::fs::copy(root().join("tests/fixtures/consumer-unified/pyproject.toml"), d.path().join("pyproject.toml"))
            .unwrap();
        std::fs::copy(root().join("pins.toml"), d.path().join("pins.toml")).unwrap();
        let o = forge(d.path(), &["pin", "set", rev, "--source", s.mirror.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let py = std::fs::read_to_string(d.path().join("pyproject.toml")).unwrap();
        assert!(py.contains(&format!("version = \"{label}\"")), "{py}");
    }
}
