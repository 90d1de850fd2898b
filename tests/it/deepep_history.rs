//! The plan against real DeepEP history: hybrid-ep 17cfb817 and its tip
//! 94a9f8f, main (EPv2) dd758ca, and a table of 29 revisions across branches,
//! the tag v1.2.1 and pull-request heads, each row written from that
//! revision's own source (`git show REV:setup.py`). The repository comes from
//! DEEPEP_FORGE_DEEPEP_MIRROR (a local clone or bare mirror of
//! github.com/deepseek-ai/DeepEP with its PR heads, `refs/pull/*/head`);
//! the tests are ignored since CI cannot reach GitHub (`bash .ci/run` runs
//! them when the variable names a folder; run by hand without it, each fails
//! saying so). Plans only (no build), made on a "machine without nvcc": PATH
//! without CUDA, CUDA_HOME unset, a Python without the nvidia-cuda-nvcc wheel.

use std::path::PathBuf;
use std::process::Output;

use crate::support::*;
use serde_json::Value;

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
#[cfg_attr(
    not(feature = "needs-deepep-clone"),
    ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"
)]
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
#[cfg_attr(
    not(feature = "needs-deepep-clone"),
    ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"
)]
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
#[cfg_attr(
    not(feature = "needs-deepep-clone"),
    ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"
)]
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
#[cfg_attr(
    not(feature = "needs-deepep-clone"),
    ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"
)]
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

/// What a history row exercises (issue 20 §2).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Class {
    /// A branch head or tag planned as its interface, nothing special.
    Baseline,
    /// setup.py assigns a build variable itself (overriding, or only as a default).
    Assigns,
    /// setup.py asserts a requirement (NVSHMEM, NIXL's library path, single-node).
    Asserts,
    /// A committed file switches the build (`.use_nixl`).
    FileSwitch,
    /// Another framework's extension builder (paddle's cpp_extension).
    ForeignBuilder,
    /// Submodules only from `.gitmodules` and gitlinks (present, absent, declared without a gitlink).
    Submodules,
    /// A variable read with default None, then used as a string (or checked first).
    NoneAsString,
    /// A variant key whose knob the revision does not read.
    UnreadKey,
}
use Class::*;

/// The plan of the `sn` variant, as read from the revision's source by hand.
struct Want {
    interface: &'static str,
    version: &'static str,
    extensions: &'static [&'static str],
    submodules: &'static [&'static str],
    needs: &'static [&'static str],
    /// Every knob the build at this revision reads (`read_at` not empty).
    knobs: &'static [&'static str],
}

struct Row {
    what: &'static str,
    rev: &'static str,
    classes: &'static [Class],
    /// None: the `sn` plan is refused (see `checks`).
    sn: Option<Want>,
    /// (variant, exit code, needles in its output).
    checks: &'static [(&'static str, i32, &'static [&'static str])],
}

const TABLE_VARIANTS: &str = r#"
[[variant]]
name = "sn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
nvshmem_dir = "/opt/nvshmem"

[[variant]]
name = "bare"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false

[[variant]]
name = "b200"
arch = "x86_64"
cuda_arch_list = "10.0"
multinode = false
nvshmem_dir = "/opt/nvshmem"

[[variant]]
name = "ptx"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
env = { DISABLE_AGGRESSIVE_PTX_INSTRS = "0" }

[[variant]]
name = "nixl-lib"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
env = { NIXL_LIB_PATH = "/opt/nixl/lib" }

[[variant]]
name = "doca"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = true
transport = "doca"

[[variant]]
name = "nixl"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = true
transport = "nixl"
"#;

const HEP_KNOBS: &[&str] = &[
    "DISABLE_AGGRESSIVE_PTX_INSTRS",
    "DISABLE_SM90_FEATURES",
    "DOCA_HOME",
    "HYBRID_EP_MULTINODE",
    "NIXL_HOME",
    "NVSHMEM_DIR",
    "RDMA_CORE_HOME",
    "TORCH_CUDA_ARCH_LIST",
    "UCX_HOME",
    "USE_NIXL",
];
const HEP_EARLY_KNOBS: &[&str] = &[
    "DISABLE_AGGRESSIVE_PTX_INSTRS",
    "DISABLE_SM90_FEATURES",
    "HYBRID_EP_MULTINODE",
    "NVSHMEM_DIR",
    "TORCH_CUDA_ARCH_LIST",
];
const EPV2_KNOBS: &[&str] = &[
    "DISABLE_AGGRESSIVE_PTX_INSTRS",
    "DISABLE_SM90_FEATURES",
    "EP_JIT_CACHE_DIR",
    "EP_JIT_PRINT_COMPILER_COMMAND",
    "EP_NCCL_ROOT_DIR",
    "EP_NUM_TOPK_IDX_BITS",
    "EP_NVSHMEM_ROOT_DIR",
    "NCCL_DIR",
    "NVSHMEM_DIR",
    "TOPK_IDX_BITS",
    "TORCH_CUDA_ARCH_LIST",
];
const V1_KNOBS: &[&str] =
    &["DISABLE_AGGRESSIVE_PTX_INSTRS", "DISABLE_SM90_FEATURES", "NVSHMEM_DIR", "TOPK_IDX_BITS", "TORCH_CUDA_ARCH_LIST"];
const HEP_EXT: &[&str] = &["deep_ep_cpp", "hybrid_ep_cpp"];
const OPTIONAL_NVSHMEM: &[&str] = &["torch", "NVSHMEM (optional: internode kernels)"];
const EPV2_NEEDS: &[&str] = &["torch", "NCCL", "NVSHMEM"];
const SINGLE_NODE_ONLY: &str =
    "single-node only (setup.py:21 asserts multinode is off: \"Multinode is not supported yet\")";
const REFUSES_MULTINODE: &[&str] =
    &["refuses multinode builds: setup.py:21 asserts multinode is off: \"Multinode is not supported yet\""];
const NEEDS_HYBRID_EP: &[&str] = &["which needs HybridEP (hybrid_ep_cpp)"];
const DOCA_PLANS: &[&str] = &["submodule   third-party/nccl @ "];
const USE_NIXL_FILE: &[&str] =
    &["has `.use_nixl`, which setup.py:50 checks: with HYBRID_EP_MULTINODE on it turns USE_NIXL on, but the plan has USE_NIXL=0"];
const PTX_NOTE: &str =
    "sets DISABLE_AGGRESSIVE_PTX_INSTRS = '1' under `if os.environ['TORCH_CUDA_ARCH_LIST'].strip() != '9.0':`";

const fn epv2(what: &'static str, rev: &'static str, version: &'static str) -> Row {
    Row {
        what,
        rev,
        classes: &[Baseline, Submodules],
        sn: Some(Want {
            interface: "main",
            version,
            extensions: &["deep_ep._C"],
            submodules: &["third-party/fmt"],
            needs: EPV2_NEEDS,
            knobs: EPV2_KNOBS,
        }),
        checks: &[("doca", 2, NEEDS_HYBRID_EP)],
    }
}

const fn v1(what: &'static str, rev: &'static str, version: &'static str, knobs: &'static [&'static str]) -> Row {
    Row {
        what,
        rev,
        classes: &[Baseline],
        sn: Some(Want {
            interface: "main-1.x",
            version,
            extensions: &["deep_ep_cpp"],
            submodules: &[],
            needs: OPTIONAL_NVSHMEM,
            knobs,
        }),
        checks: &[("nixl", 2, NEEDS_HYBRID_EP)],
    }
}

/// hybrid-ep before multinode: `assert not enable_multinode, "Multinode is not
/// supported yet"` at setup.py:21 and no third-party/nccl anywhere.
const fn hep_early(what: &'static str, rev: &'static str) -> Row {
    Row {
        what,
        rev,
        classes: &[Asserts, Submodules],
        sn: Some(Want {
            interface: "hybrid-ep",
            version: "1.2.1",
            extensions: HEP_EXT,
            submodules: &[],
            needs: &["torch", "NVSHMEM (optional: internode kernels)", SINGLE_NODE_ONLY],
            knobs: HEP_EARLY_KNOBS,
        }),
        checks: &[("doca", 2, REFUSES_MULTINODE), ("nixl", 2, REFUSES_MULTINODE)],
    }
}

/// hybrid-ep with a committed `.use_nixl` that setup.py:50 reads.
const fn hep_use_nixl(what: &'static str, rev: &'static str, classes: &'static [Class]) -> Row {
    Row {
        what,
        rev,
        classes,
        sn: Some(Want {
            interface: "hybrid-ep",
            version: "1.2.1",
            extensions: HEP_EXT,
            submodules: &["third-party/nccl"],
            needs: OPTIONAL_NVSHMEM,
            knobs: HEP_KNOBS,
        }),
        checks: &[("doca", 2, USE_NIXL_FILE), ("nixl", 0, &["HYBRID_EP_MULTINODE=1", "USE_NIXL=1"])],
    }
}

/// Each row as read from `git show REV:setup.py` (and deep_ep/__init__.py,
/// .gitmodules, `git ls-tree REV third-party/`, `.use_nixl`) at that revision.
const HISTORY: &[Row] = &[
    Row {
        what: "hybrid-ep tip",
        rev: "94a9f8f6b146c07d97ec58f67cd6d303296d6098",
        classes: &[Baseline, Submodules, Assigns],
        sn: Some(Want {
            interface: "hybrid-ep",
            version: "1.2.1",
            extensions: HEP_EXT,
            submodules: &["third-party/nccl"],
            needs: OPTIONAL_NVSHMEM,
            knobs: HEP_KNOBS,
        }),
        // setup.py:273 sets DISABLE_AGGRESSIVE_PTX_INSTRS itself for archs other than 9.0.
        checks: &[("doca", 0, DOCA_PLANS), ("nixl", 0, &["USE_NIXL=1"]), ("ptx", 0, &["setup.py:273 ", PTX_NOTE])],
    },
    Row {
        what: "hybrid-ep 17cfb817",
        rev: "17cfb817bccec3a9c247013360cc550c2bac441e",
        classes: &[Baseline, Submodules],
        sn: Some(Want {
            interface: "hybrid-ep",
            version: "1.2.1",
            extensions: HEP_EXT,
            submodules: &["third-party/nccl"],
            needs: OPTIONAL_NVSHMEM,
            knobs: HEP_KNOBS,
        }),
        checks: &[("doca", 0, DOCA_PLANS)],
    },
    Row {
        what: "PR 494 (hybrid-ep, DOCA only: no USE_NIXL read)",
        rev: "0fa8568c5923fcfc87f49ef0c3761dc013375a67",
        classes: &[Submodules, UnreadKey],
        sn: Some(Want {
            interface: "hybrid-ep",
            version: "1.2.1",
            extensions: HEP_EXT,
            submodules: &["third-party/nccl"],
            needs: OPTIONAL_NVSHMEM,
            knobs: &[
                "DISABLE_AGGRESSIVE_PTX_INSTRS",
                "DISABLE_SM90_FEATURES",
                "HYBRID_EP_MULTINODE",
                "NVSHMEM_DIR",
                "RDMA_CORE_HOME",
                "TORCH_CUDA_ARCH_LIST",
            ],
        }),
        checks: &[("doca", 0, DOCA_PLANS), ("nixl", 2, &["`transport` sets USE_NIXL=1, which the build at this revision does not read"])],
    },
    hep_early("PR 339 (hybrid-ep, single-node)", "5d64e36dd74c910b9f22d658a50527d23c8672fe"),
    hep_early("PR 341 (hybrid-ep, single-node)", "8d5bee360189479efee16c4d3726f546e17072b3"),
    Row {
        what: "PR 420 (hybrid-ep, single-node, reads USE_GB200)",
        rev: "235c78d1d735a9a58c579c42b578b94ae309121d",
        classes: &[Asserts, Submodules],
        sn: Some(Want {
            interface: "hybrid-ep",
            version: "1.2.1",
            extensions: HEP_EXT,
            submodules: &[],
            needs: &["torch", "NVSHMEM (optional: internode kernels)", SINGLE_NODE_ONLY],
            knobs: HEP_EARLY_KNOBS,
        }),
        checks: &[("doca", 2, REFUSES_MULTINODE), ("sn", 0, &["setup.py:19 reads USE_GB200, which is not in"])],
    },
    hep_use_nixl("PR 591 (.use_nixl committed)", "651ae1653e733fc784ccb53697b2b8b5727cb6b5", &[FileSwitch, Submodules]),
    hep_use_nixl("PR 607 (.use_nixl committed)", "f9fd885cfb684cced1c92de8d49746cab81e21c2", &[FileSwitch, Submodules]),
    Row {
        what: "PR 606 (.use_nixl committed, LIBRARY_PATH used as a string)",
        rev: "903f89b11f20a2052c633f6cb5a0abaaead3b608",
        classes: &[FileSwitch, NoneAsString, Submodules],
        sn: Some(Want {
            interface: "hybrid-ep",
            version: "1.2.1",
            extensions: HEP_EXT,
            submodules: &["third-party/nccl"],
            needs: OPTIONAL_NVSHMEM,
            knobs: HEP_KNOBS,
        }),
        checks: &[
            ("doca", 2, USE_NIXL_FILE),
            (
                "sn",
                0,
                &["the build will fail: setup.py:192 reads LIBRARY_PATH with default None and setup.py:193 uses it as a string (`if \"stubs\" in linrary_path_env:`)"],
            ),
        ],
    },
    Row {
        what: "PR 585 (paddle's extension builder)",
        rev: "d2c1cf2939a55aebfdb24c1c656a16bb3720bbda",
        classes: &[ForeignBuilder],
        sn: None,
        checks: &[("sn", 2, &["setup.py:10 builds its extensions with `paddle.utils.cpp_extension`", "not torch's"])],
    },
    epv2("main", "dd758caf451848bd150e1046af3d0a73e5fff38d", "2.1.0"),
    epv2("epv2-release", "018f21ea62c6c2888d9b46806aad6d90b399b23d", "2.0.0"),
    epv2("nccl-version-compat", "4112ce091de2659ded17d2bc1540cddcf13e7366", "2.1.0"),
    epv2("nvDev", "df891d86a26f2d79772dd02d1d4ed99c17ff6b86", "2.0.0"),
    epv2("update-main", "cec9a2acc35e38234c4fdfb677d306d6778b5a70", "2.1.0"),
    epv2("try-fix-cu128", "4315189e0f38995c86d4fca26ce708a9d2654dcd", "2.0.0"),
    epv2("PR 643", "28efbacdfb65da9699bf109c1049157fb60287b0", "2.0.0"),
    Row {
        what: "PR 610 (EPv2, fmt in .gitmodules without a gitlink)",
        rev: "64a8584df774f8857d9b7ab2bb24094a8af0852d",
        classes: &[Submodules],
        sn: None,
        checks: &[("sn", 2, &["needs the submodule third-party/fmt (every build): this revision lists third-party/fmt in .gitmodules but records no gitlink"])],
    },
    v1("tag v1.2.1", "9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee", "1.2.1", &["DISABLE_AGGRESSIVE_PTX_INSTRS", "DISABLE_SM90_FEATURES", "NVSHMEM_DIR", "TORCH_CUDA_ARCH_LIST"]),
    v1("antgroup-opt", "76f027117d76c69ee1862a1dc2a608dfc17dd652", "1.2.1", V1_KNOBS),
    v1("eager-rdma", "f4e0dd4f74888da182e748c677ff89eb99dfdd3c", "1.2.1", V1_KNOBS),
    v1("tencent-zcopy", "4bd6a8b1d6ecf9daa76b98804e31c2c6712b577d", "1.2.1", V1_KNOBS),
    v1("compat-old-torch", "cc79e4bee3ab5536055bdd0a443f96dd2b3cf3f9", "1.2.1", V1_KNOBS),
    v1("mori-ep (reads ROCM_PATH, HIP_PATH, DEEP_EP_BACKEND)", "86be3d574de0c24628ff07011286a4c2918db5b3", "1.2.1", V1_KNOBS),
    v1("PR 276", "9d82dd6553e1608fb4c97db92ccc661569f6b8cc", "1.1.0", &["DISABLE_AGGRESSIVE_PTX_INSTRS", "DISABLE_SM90_FEATURES", "NVSHMEM_DIR", "TORCH_CUDA_ARCH_LIST"]),
    Row {
        what: "PR 521 (NCCL_DIR read with default None, checked before use)",
        rev: "6d29f3434941f0858cc9517cb9fded1feb6fe926",
        classes: &[NoneAsString],
        sn: Some(Want {
            interface: "main-1.x",
            version: "1.2.1",
            extensions: &["deep_ep_cpp"],
            submodules: &[],
            needs: OPTIONAL_NVSHMEM,
            knobs: V1_KNOBS,
        }),
        checks: &[("sn", 0, &["setup.py:25 reads NCCL_DIR, which is not in"])],
    },
    Row {
        what: "PR 108 (TORCH_CUDA_ARCH_LIST = '9.0' set by setup.py; NVSHMEM asserted)",
        rev: "218c5a1f964e0ea79a571450384a26cbaec70042",
        classes: &[Assigns, Asserts, UnreadKey],
        sn: Some(Want {
            interface: "main-1.x",
            version: "1.0.0",
            extensions: &["deep_ep_cpp"],
            submodules: &[],
            needs: &["torch", "NVSHMEM (required: setup.py:9 asserts NVSHMEM_DIR is set: \"Failed to find NVSHMEM\")"],
            knobs: &["DISABLE_AGGRESSIVE_PTX_INSTRS", "NVSHMEM_DIR"],
        }),
        checks: &[
            (
                "b200",
                2,
                &["setup.py:13 sets TORCH_CUDA_ARCH_LIST = '9.0' itself, so the plan's TORCH_CUDA_ARCH_LIST=10.0 (from the variant's `cuda_arch_list`) would be ignored"],
            ),
            ("bare", 2, &["setup.py:9 asserts NVSHMEM_DIR is set: \"Failed to find NVSHMEM\", and the plan leaves it unset", "set `nvshmem_dir`"]),
        ],
    },
    Row {
        what: "PR 167 (TORCH_CUDA_ARCH_LIST defaulted only when unset; NVSHMEM asserted)",
        rev: "64285bad4fd543efb09ea6f69c97dbf795d5117f",
        classes: &[Assigns, Asserts],
        sn: Some(Want {
            interface: "main-1.x",
            version: "1.0.0",
            extensions: &["deep_ep_cpp"],
            submodules: &[],
            needs: &["torch", "NVSHMEM (required: setup.py:9 asserts NVSHMEM_DIR is set: \"Failed to find NVSHMEM\")"],
            knobs: &["DISABLE_AGGRESSIVE_PTX_INSTRS", "NVSHMEM_DIR", "TORCH_CUDA_ARCH_LIST"],
        }),
        checks: &[("b200", 0, &["TORCH_CUDA_ARCH_LIST=10.0"]), ("bare", 2, &["setup.py:9 asserts NVSHMEM_DIR is set"])],
    },
    Row {
        what: "PR 465 (NIXL_LIB_PATH asserted)",
        rev: "1f101747b3afabba9d11da753ab426b0b58683f2",
        classes: &[Asserts],
        sn: None,
        checks: &[
            ("bare", 2, &["setup.py:78 asserts NIXL_LIB_PATH is set: \"NIXL_LIB_PATH must be set and valid\", and the plan leaves it unset", "env = { NIXL_LIB_PATH"]),
            ("sn", 2, &["setup.py:78 asserts NIXL_LIB_PATH is set"]),
            ("nixl-lib", 0, &["NIXL (required: setup.py:78 asserts NIXL_LIB_PATH is set", "NIXL_LIB_PATH=/opt/nixl/lib"]),
        ],
    },
];

impl Scene {
    fn table_plan(&self, rev: &str, args: &[&str]) -> Output {
        let p = self.dir.path().join(format!("pins-table-{}.toml", &rev[..10]));
        std::fs::write(
            &p,
            format!("schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbase_version = \"1.2.1\"\n[pin.x86_64]\nrev = \"{rev}\"\n{TABLE_VARIANTS}"),
        )
        .unwrap();
        let mut c = bin();
        c.args(["plan", "--pins", p.to_str().unwrap(), "--source", self.mirror.to_str().unwrap()])
            .args(["--python", "/usr/bin/python3"])
            .args(args)
            .current_dir(self.dir.path())
            .env("DEEPEP_FORGE_CACHE_DIR", self.dir.path().join("cache"))
            .env("PATH", "/usr/bin:/bin")
            .env_remove("CUDA_HOME")
            .env_remove("DEEPEP_FORGE_CACHE_URL");
        c.output().unwrap()
    }
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

/// Issue 20 §2: the plan says what setup.py at the pin really does, or refuses,
/// over 29 revisions that exercise every class (the `classes` of each row).
#[test]
#[cfg_attr(
    not(feature = "needs-deepep-clone"),
    ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"
)]
fn history_table_each_revision_plans_as_its_source_says_or_is_refused() {
    let s = Scene::new();
    assert!(HISTORY.len() >= 25);
    for class in [Assigns, Asserts, FileSwitch, ForeignBuilder, Submodules, NoneAsString, UnreadKey, Baseline] {
        assert!(HISTORY.iter().any(|r| r.classes.contains(&class)), "no row exercises {class:?}");
    }
    let mut failures = Vec::new();
    for row in HISTORY {
        // Short shas in the table are resolved in the mirror (the test reads them there).
        let rev = git_in(&s.mirror, &["rev-parse", &format!("{}^{{commit}}", row.rev)]);
        if let Some(w) = &row.sn {
            let o = s.table_plan(&rev, &["--variant", "sn", "--format", "json"]);
            if o.status.code() != Some(0) {
                failures.push(format!("{}: sn exit {:?}: {}", row.what, o.status.code(), stderr(&o)));
                continue;
            }
            let p = serde_json::from_slice::<Value>(&o.stdout).unwrap()["plans"][0].clone();
            let i = &p["interface"];
            let got_subs: Vec<String> =
                i["submodules"].as_array().unwrap().iter().map(|x| x["path"].as_str().unwrap().to_string()).collect();
            // Issue 23 §1: EPv2 needs NCCL >= 2.30.4 (README.md:70) and, where nccl.cu:100-104 says so,
            // the same NCCL at run time below 2.31; its setup.py links NVSHMEM's device library.
            let rt = &i["runtime"];
            let opt = |v: &Value| v.as_str().map(String::from).into_iter().collect::<Vec<_>>();
            let epv2 = w.interface == "main";
            let want_min: Vec<String> = epv2.then(|| "2.30.4".to_string()).into_iter().collect();
            let want_exact: Vec<String> =
                (epv2 && EXACT_BELOW_2_31.contains(&&rev[..7])).then(|| "2.31".to_string()).into_iter().collect();
            if epv2 && rt["nvshmem_same"] != true {
                failures.push(format!("{} ({}): runtime.nvshmem_same: {rt}", row.what, &rev[..10]));
            }
            // Issue 30 §3: EPv2's README "PyTorch 2.10 and above" and docs/nvshmem.md "NVSHMEM v3.3.9 or later".
            let stated = |k: &str| (rt[k]["version"].as_str(), rt[k]["at"].as_str());
            if epv2
                && (stated("torch_min") != (Some("2.10"), Some("README.md:69"))
                    || stated("nvshmem_min") != (Some("3.3.9"), Some("docs/nvshmem.md:18")))
            {
                failures.push(format!("{} ({}): runtime.torch_min/nvshmem_min: {rt}", row.what, &rev[..10]));
            }
            let checks: [(&str, Vec<String>, Vec<String>); 8] = [
                ("runtime.nccl_min", opt(&rt["nccl_min"]), want_min),
                ("runtime.nccl_exact_below", opt(&rt["nccl_exact_below"]), want_exact),
                ("interface", vec![i["branch"].as_str().unwrap().into()], vec![w.interface.into()]),
                (
                    "version",
                    vec![p["source"]["version"].as_str().unwrap().into()],
                    vec![format!("{}+{}", w.version, &rev[..7])],
                ),
                ("extensions", strs(&i["extensions"]), w.extensions.iter().map(|x| x.to_string()).collect()),
                ("submodules", got_subs, w.submodules.iter().map(|x| x.to_string()).collect()),
                ("needs", strs(&i["needs"]), w.needs.iter().map(|x| x.to_string()).collect()),
                ("knobs", read_names(&p), w.knobs.iter().map(|x| x.to_string()).collect()),
            ];
            for (what, got, want) in checks {
                if got != want {
                    failures.push(format!("{} ({}): {what}: got {got:?}, want {want:?}", row.what, &rev[..10]));
                }
            }
        }
        for (variant, code, needles) in row.checks {
            let o = s.table_plan(&rev, &["--variant", variant]);
            let text = format!("{}{}", stdout(&o), stderr(&o));
            if o.status.code() != Some(*code) {
                failures.push(format!(
                    "{} ({}): {variant}: exit {:?}, want {code}: {text}",
                    row.what,
                    &rev[..10],
                    o.status.code()
                ));
            }
            for n in *needles {
                if !text.contains(n) {
                    failures.push(format!("{} ({}): {variant}: missing {n:?} in:\n{text}", row.what, &rev[..10]));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// EPv2 revisions whose nccl.cu (lines 100-104) asserts, below NCCL 2.31, that
/// the NCCL loaded at run time is the one compiled against (`git grep
/// NCCL_VERSION REV -- csrc/kernels/backend/nccl.cu`); the others print the
/// loaded version only.
const EXACT_BELOW_2_31: &[&str] = &["dd758ca", "4112ce0"];

fn git_in(dir: &std::path::Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// How many hybrid-ep revisions share one NCCL build (docs/reproducibility.md):
/// every revision of `git log hybrid-ep` with a `third-party/nccl` gitlink,
/// grouped by the submodule commit and the part of the NCCL key setup.py gives
/// (`nccl_reuse::recipe_digest`: the gencode function and the make command).
/// For one toolchain and arch list, each group is one NCCL build.
#[test]
#[cfg_attr(
    not(feature = "needs-deepep-clone"),
    ignore = "needs a DeepEP clone named by DEEPEP_FORGE_DEEPEP_MIRROR: bash .ci/run runs it when set"
)]
fn hybrid_ep_revisions_share_two_nccl_builds() {
    let m = mirror();
    let revs = git(&m, &["log", "--format=%H", "hybrid-ep"]);
    let mut groups: std::collections::BTreeMap<(String, String), Vec<String>> = Default::default();
    let mut without = 0;
    for rev in revs.lines() {
        let line = git(&m, &["ls-tree", rev, "third-party/nccl"]);
        let Some(commit) = line.split_whitespace().nth(2).filter(|_| line.starts_with("160000")) else {
            without += 1;
            continue;
        };
        let setup = git(&m, &["show", &format!("{rev}:setup.py")]);
        let recipe = forge_build::builder::nccl_reuse::recipe_digest(&setup);
        groups.entry((commit[..7].to_string(), recipe[..12].to_string())).or_default().push(rev[..7].to_string());
    }
    for ((commit, recipe), revs) in &groups {
        println!("nccl {commit} recipe {recipe}: {} revisions: {}", revs.len(), revs.join(" "));
    }
    println!("without the submodule: {without}");
    let counts: Vec<(&str, usize)> = groups.iter().map(|((c, _), r)| (c.as_str(), r.len())).collect();
    assert_eq!(counts, [("1e0c869", 12), ("fb32e0b", 5)], "{groups:?}");
    assert_eq!(without, 229);
}
