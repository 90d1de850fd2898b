//! The plan says what setup.py at the pin really does, or refuses (issue 20
//! §2), on variations of the mini-deepep fixture made here as git
//! repositories in a temp dir: one per class found in DeepEP's history (the
//! real revisions are in tests/it/deepep_history.rs, which needs a mirror). Plans
//! only, on a "machine without nvcc" (no build): real git, the real binary.

use std::path::PathBuf;
use std::process::Output;

use crate::support::*;

const VARIANTS: &str = r#"
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

/// The lines of mini-deepep's setup.py the variations start from.
const MULTINODE_READ: &str = "    multinode = os.getenv(\"HYBRID_EP_MULTINODE\", \"0\").strip().lower() in TRUE\n";
const USE_NIXL_READ: &str = "    use_nixl = os.getenv(\"USE_NIXL\", \"0\").strip().lower() in TRUE\n";
const ARCH_DEFAULT: &str = "    os.environ[\"TORCH_CUDA_ARCH_LIST\"] = os.getenv(\"TORCH_CUDA_ARCH_LIST\", \"10.0\")\n";
const NVSHMEM_READ: &str = "    nvshmem_dir = os.getenv(\"NVSHMEM_DIR\", None)\n";

/// A mini-deepep repository whose setup.py is changed by `edit` (and whose
/// tree gets `extra` files), committed; plans of it.
struct Variation {
    dir: tempfile::TempDir,
    repo: PathBuf,
    rev: String,
}

impl Variation {
    fn new(edit: impl Fn(&str) -> String, extra: &[(&str, &str)]) -> Variation {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("DeepEP");
        git_repo_from_fixture("mini-deepep", &repo);
        let setup = repo.join("setup.py");
        let before = std::fs::read_to_string(&setup).unwrap();
        let after = edit(&before);
        assert_ne!(before, after, "the variation changes setup.py");
        std::fs::write(&setup, after).unwrap();
        for (path, text) in extra {
            let p = repo.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "variation"]);
        let rev = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
        Variation { dir, repo, rev }
    }

    /// `setup.py` line of the first line containing `needle`.
    fn line_of(&self, needle: &str) -> usize {
        let text = std::fs::read_to_string(self.repo.join("setup.py")).unwrap();
        text.lines().position(|l| l.contains(needle)).expect("needle in setup.py") + 1
    }

    fn plan(&self, variant: &str, json: bool) -> Output {
        let pins = self.dir.path().join("pins.toml");
        std::fs::write(
            &pins,
            format!("schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbranch = \"hybrid-ep\"\nbase_version = \"1.2.1\"\n[pin.x86_64]\nrev = \"{}\"\n{VARIANTS}", self.rev),
        )
        .unwrap();
        let mut c = bin();
        c.args(["plan", "--pins", pins.to_str().unwrap(), "--source", self.repo.to_str().unwrap()])
            .args(["--python", "/usr/bin/python3", "--variant", variant])
            .args(if json { &["--format", "json"][..] } else { &[][..] })
            .current_dir(self.dir.path())
            .env("DEEPEP_FORGE_CACHE_DIR", self.dir.path().join("cache"))
            .env("PATH", "/usr/bin:/bin")
            .env_remove("CUDA_HOME")
            .env_remove("DEEPEP_FORGE_CACHE_URL");
        c.output().unwrap()
    }

    /// The plan of `variant` (exit 0) as JSON.
    fn plan_json(&self, variant: &str) -> serde_json::Value {
        let o = self.plan(variant, true);
        assert_eq!(o.status.code(), Some(0), "{variant}: {}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["plans"][0].clone()
    }

    /// `variant` is refused: exit 2, the error holds every needle, no plan printed.
    fn refused(&self, variant: &str, needles: &[&str]) {
        let o = self.plan(variant, false);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{variant}: {}{err}", stdout(&o));
        assert!(stdout(&o).is_empty(), "nothing planned: {}", stdout(&o));
        for n in needles {
            assert!(err.contains(n), "{variant}: {n:?} not in: {err}");
        }
    }
}

fn insert_after(text: &str, anchor: &str, added: &str) -> String {
    assert!(text.contains(anchor), "anchor {anchor:?}");
    text.replacen(anchor, &format!("{anchor}{added}"), 1)
}

fn needs(p: &serde_json::Value) -> Vec<String> {
    p["interface"]["needs"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
}

#[test]
fn the_unchanged_fixture_plans_every_variant_it_can_build() {
    let v = Variation::new(|t| t.replace("# mini-deepep:", "# mini-deepep (unchanged):"), &[]);
    let p = v.plan_json("sn");
    assert_eq!(p["interface"]["branch"], "hybrid-ep");
    assert_eq!(needs(&p), ["torch", "NVSHMEM (optional: internode kernels)"]);
    assert_eq!(p["warnings"], serde_json::json!([]), "no class fires on the fixture");
    assert_eq!(v.plan_json("b200")["run"]["env"]["TORCH_CUDA_ARCH_LIST"], "10.0");
    assert_eq!(v.plan_json("nixl")["run"]["env"]["USE_NIXL"], "1");
    // The fixture's `.gitmodules` declares third-party/nccl, but a copy committed
    // as is has no gitlink: the DOCA path's NCCL submodule is missing, said so.
    v.refused("doca", &["needs the submodule third-party/nccl (DOCA multinode builds): this revision lists third-party/nccl in .gitmodules but records no gitlink"]);
}

/// setup.py assigns TORCH_CUDA_ARCH_LIST itself: the variant's value would be ignored.
#[test]
fn setup_py_assigning_a_build_variable_refuses_a_variant_whose_value_it_ignores() {
    let v = Variation::new(|t| t.replace(ARCH_DEFAULT, "    os.environ[\"TORCH_CUDA_ARCH_LIST\"] = \"10.0\"\n"), &[]);
    let at = v.line_of("os.environ[\"TORCH_CUDA_ARCH_LIST\"] = \"10.0\"");
    v.refused(
        "sn",
        &[
            &format!("setup.py:{at} sets TORCH_CUDA_ARCH_LIST = \"10.0\" itself"),
            "TORCH_CUDA_ARCH_LIST=9.0 (from the variant's `cuda_arch_list`) would be ignored",
            "set `cuda_arch_list` = \"10.0\"",
        ],
    );
    // The same value as setup.py's: what the variant says is what is built.
    assert_eq!(v.plan_json("b200")["run"]["env"]["TORCH_CUDA_ARCH_LIST"], "10.0");
    // A default only (`if X is unset`) honours the variant.
    let d = Variation::new(
        |t| {
            t.replace(
                ARCH_DEFAULT,
                "    if os.getenv(\"TORCH_CUDA_ARCH_LIST\", None) is None:\n        os.environ[\"TORCH_CUDA_ARCH_LIST\"] = \"10.0\"\n",
            )
        },
        &[],
    );
    assert_eq!(d.plan_json("sn")["run"]["env"]["TORCH_CUDA_ARCH_LIST"], "9.0");
}

/// `assert not multinode, "Multinode is not supported yet"`: the multinode
/// variants are refused with that reason (not a missing submodule).
#[test]
fn setup_py_refusing_multinode_refuses_multinode_variants_with_its_reason() {
    let v = Variation::new(
        |t| insert_after(t, MULTINODE_READ, "    assert not multinode, \"Multinode is not supported yet\"\n"),
        &[(
            ".gitmodules",
            "[submodule \"third-party/nccl\"]\n\tpath = third-party/nccl\n\turl = https://github.com/NVIDIA/nccl.git\n",
        )],
    );
    let at = v.line_of("assert not multinode");
    let why =
        format!("refuses multinode builds: setup.py:{at} asserts multinode is off: \"Multinode is not supported yet\"");
    v.refused("doca", &[&why, "make the variant single-node"]);
    v.refused("nixl", &[&why]);
    let p = v.plan_json("sn");
    assert!(needs(&p).iter().any(|n| n.starts_with("single-node only (setup.py:")), "{:?}", needs(&p));
}

/// `assert nvshmem_dir is not None, 'Failed to find NVSHMEM'`: NVSHMEM is a
/// need (not optional), and a variant without nvshmem_dir is refused.
#[test]
fn setup_py_asserting_nvshmem_makes_it_a_need_and_refuses_a_variant_without_it() {
    let v = Variation::new(
        |t| {
            insert_after(
                t,
                NVSHMEM_READ,
                "    assert nvshmem_dir is not None and os.path.exists(nvshmem_dir), 'Failed to find NVSHMEM'\n",
            )
        },
        &[],
    );
    let at = v.line_of("'Failed to find NVSHMEM'");
    let p = v.plan_json("sn");
    assert_eq!(
        needs(&p),
        [
            "torch".to_string(),
            format!("NVSHMEM (required: setup.py:{at} asserts NVSHMEM_DIR is set: \"Failed to find NVSHMEM\")")
        ]
    );
    v.refused(
        "bare",
        &[
            &format!(
                "setup.py:{at} asserts NVSHMEM_DIR is set: \"Failed to find NVSHMEM\", and the plan leaves it unset"
            ),
            "set `nvshmem_dir`",
        ],
    );
}

/// An assert that NIXL's library path is set: a knob the variant's `env` sets.
#[test]
fn setup_py_asserting_nixl_lib_path_makes_it_a_knob_and_a_need() {
    let v = Variation::new(
        |t| {
            insert_after(
                t,
                USE_NIXL_READ,
                "    nixl_lib_path = os.getenv('NIXL_LIB_PATH', None)\n    assert nixl_lib_path and os.path.exists(nixl_lib_path), 'NIXL_LIB_PATH must be set and valid'\n",
            )
        },
        &[],
    );
    let at = v.line_of("'NIXL_LIB_PATH must be set and valid'");
    v.refused("sn", &[&format!("setup.py:{at} asserts NIXL_LIB_PATH is set"), "env = { NIXL_LIB_PATH = \"...\" }"]);
    let p = v.plan_json("nixl-lib");
    assert_eq!(p["run"]["env"]["NIXL_LIB_PATH"], "/opt/nixl/lib");
    assert!(
        needs(&p).iter().any(|n| n.starts_with(&format!("NIXL (required: setup.py:{at} asserts NIXL_LIB_PATH is set"))),
        "{:?}",
        needs(&p)
    );
    assert!(
        p["warnings"].as_array().unwrap().iter().all(|w| !w.as_str().unwrap().contains("NIXL_LIB_PATH")),
        "{}",
        p["warnings"]
    );
}

/// A committed `.use_nixl` turns NIXL on for multinode builds: a DOCA variant
/// (USE_NIXL=0) is refused; without the file in the tree it plans.
#[test]
fn a_committed_use_nixl_file_refuses_a_doca_variant() {
    let check = "    if multinode and not use_nixl and os.path.isfile(os.path.join(HERE, \".use_nixl\")):\n        use_nixl = True\n";
    let gitmodules =
        "[submodule \"third-party/nccl\"]\n\tpath = third-party/nccl\n\turl = https://github.com/NVIDIA/nccl.git\n";
    let with_file =
        Variation::new(|t| insert_after(t, USE_NIXL_READ, check), &[(".use_nixl", ""), (".gitmodules", gitmodules)]);
    let at = with_file.line_of("\".use_nixl\"");
    with_file.refused(
        "doca",
        &[
            &format!("the tree at this revision has `.use_nixl`, which setup.py:{at} checks: with HYBRID_EP_MULTINODE on it turns USE_NIXL on, but the plan has USE_NIXL=0"),
            "transport = \"nixl\"",
        ],
    );
    assert_eq!(with_file.plan_json("nixl")["run"]["env"]["USE_NIXL"], "1");
    assert_eq!(with_file.plan_json("sn")["interface"]["switches"][0]["file"], ".use_nixl");
    // Without the file, the check changes nothing: the DOCA variant gets as far as its submodule.
    let without = Variation::new(|t| insert_after(t, USE_NIXL_READ, check), &[(".gitmodules", gitmodules)]);
    assert_eq!(without.plan_json("sn")["interface"]["switches"], serde_json::json!([]));
    without.refused("doca", &["lists third-party/nccl in .gitmodules but records no gitlink"]);
}

/// A setup.py that builds with paddle's extension builder is no torch plan.
#[test]
fn another_frameworks_extension_builder_is_refused() {
    let v = Variation::new(
        |t| {
            t.replace(
                "import setuptools\n",
                "import setuptools\nfrom paddle.utils.cpp_extension import BuildExtension, CUDAExtension\n",
            )
        },
        &[],
    );
    let at = v.line_of("from paddle.utils.cpp_extension");
    v.refused(
        "sn",
        &[&format!("setup.py:{at} builds its extensions with `paddle.utils.cpp_extension`"), "not torch's"],
    );
}

/// Submodules come from `.gitmodules` and the gitlinks at the revision.
#[test]
fn submodules_come_from_gitmodules_and_gitlinks_only() {
    // A real gitlink + .gitmodules: the DOCA variant records its commit.
    let v = Variation::new(|t| t.replace("# mini-deepep:", "# mini-deepep (with nccl):"), &[]);
    let nccl = v.dir.path().join("nccl");
    let nccl_rev = git_repo_from_fixture("mini-nccl", &nccl);
    git(&v.repo, &["submodule", "add", "-q", nccl.to_str().unwrap(), "third-party/nccl"]);
    git(&v.repo, &["commit", "-qm", "nccl"]);
    let v = Variation { rev: git(&v.repo, &["rev-parse", "HEAD"]).trim().to_string(), ..v };
    let p = v.plan_json("doca");
    assert_eq!(p["source"]["submodules"]["third-party/nccl"], nccl_rev.as_str());
    assert_eq!(p["interface"]["missing_submodules"], serde_json::json!([]));
    // A gitlink without a .gitmodules entry is no submodule.
    let v2 = Variation::new(|t| t.replace("# mini-deepep:", "# mini-deepep (gitlink only):"), &[]);
    git(&v2.repo, &["rm", "-q", ".gitmodules"]);
    git(&v2.repo, &["update-index", "--add", "--cacheinfo", &format!("160000,{nccl_rev},third-party/nccl")]);
    git(&v2.repo, &["commit", "-qm", "bare gitlink"]);
    let v2 = Variation { rev: git(&v2.repo, &["rev-parse", "HEAD"]).trim().to_string(), ..v2 };
    assert_eq!(v2.plan_json("sn")["interface"]["submodules"], serde_json::json!([]));
    v2.refused("doca", &["has no third-party/nccl: neither a .gitmodules entry nor a gitlink"]);
}

/// `os.getenv(X, None)` then used as a string while the plan leaves X unset:
/// the plan says the build will fail there; a read checked first is no finding.
#[test]
fn a_none_default_used_as_a_string_is_said_in_the_plan() {
    let v = Variation::new(
        |t| {
            insert_after(
                t,
                USE_NIXL_READ,
                "    lib_path = os.getenv('LIBRARY_PATH', None)\n    if \"stubs\" in lib_path:\n        pass\n",
            )
        },
        &[],
    );
    let (read, used) = (v.line_of("os.getenv('LIBRARY_PATH', None)"), v.line_of("\"stubs\" in lib_path"));
    let p = v.plan_json("sn");
    let w: Vec<&str> = p["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    let want = format!("the build will fail: setup.py:{read} reads LIBRARY_PATH with default None and setup.py:{used} uses it as a string (`if \"stubs\" in lib_path:`), but the plan leaves LIBRARY_PATH unset");
    assert!(w.iter().any(|x| x.starts_with(&want)), "{w:?}");
    let o = v.plan("sn", false);
    assert!(stdout(&o).contains("warning     the build will fail: setup.py:"), "{}", stdout(&o));
    // Checked before use: nothing to say.
    let guarded = Variation::new(
        |t| {
            insert_after(t, USE_NIXL_READ, "    lib_path = os.getenv('LIBRARY_PATH', None)\n    if lib_path is not None and \"stubs\" in lib_path:\n        pass\n")
        },
        &[],
    );
    let p = guarded.plan_json("sn");
    assert!(
        p["warnings"].as_array().unwrap().iter().all(|w| !w.as_str().unwrap().contains("will fail")),
        "{}",
        p["warnings"]
    );
}

/// A variant key whose knob the revision does not read is refused (its value would be ignored).
#[test]
fn a_variant_key_the_revision_does_not_read_is_refused() {
    let v = Variation::new(|t| t.replace(USE_NIXL_READ, "    use_nixl = False\n"), &[]);
    v.refused("nixl", &["the variant's `transport` sets USE_NIXL=1, which the build at this revision does not read"]);
    assert!(v.plan_json("sn")["run"]["env"]["USE_NIXL"] == "0", "off is what the build does anyway");
}
