//! DeepEP's `main` branch (EPv2) from the mini-deepep-v2 fixture: a real git
//! repository with a real fmt-like submodule, real nvcc and pip builds, a
//! real NCCL stand-in library. The plan reads the build interface at the
//! pinned revision (version from `deep_ep/__init__.py`, `deep_ep._C`, the
//! fmt submodule, knobs named by f-strings and loops); build-wheel builds it;
//! the static probe recognises the wheel.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::build_support::*;
use crate::support::tiny_wheel;
use crate::support::*;

/// The EPv2 lab: the fixture as a git repository whose `third-party/fmt` is a
/// submodule (a real repository made here), and an NCCL stand-in.
pub(crate) struct V2 {
    pub(crate) lab: Lab,
    repo: PathBuf,
    pub(crate) rev: String,
    fmt_rev: String,
    pub(crate) nccl: PathBuf,
}

/// Real NCCL headers of `version` (`include/` of the nvidia-nccl-cu13 wheel,
/// kept by `.ci/setup-tools` under `<tools venv>/nccl-headers/<version>`;
/// `DEEPEP_FORGE_NCCL_HEADERS` names another folder of `<version>/include`).
fn nccl_headers(version: &str) -> PathBuf {
    let base = std::env::var_os("DEEPEP_FORGE_NCCL_HEADERS")
        .map(PathBuf::from)
        .or_else(|| tools_venv().map(|t| t.join("nccl-headers")))
        .unwrap_or_else(|| missing("the tools venv"));
    let inc = base.join(version).join("include");
    if !inc.join("nccl.h").is_file() {
        missing(&format!("NCCL {version}'s headers from the tools venv ({})", inc.display()));
    }
    inc
}

pub(crate) fn v2() -> V2 {
    v2_with_nccl("2.30.7")
}

/// The lab with an NCCL root of `version`: its real headers, and a stand-in
/// `libnccl.so.2` whose ncclGetVersion says the same version.
fn v2_with_nccl(version: &str) -> V2 {
    let lab = Lab::new();
    let fmt = lab.dir.path().join("fmt");
    std::fs::create_dir_all(fmt.join("include/fmt")).unwrap();
    std::fs::write(
        fmt.join("include/fmt/format.h"),
        "// fmt-like header for the mini-deepep-v2 tests.\n#pragma once\n#define FMT_LIKE_TAG \"fmt-like-submodule-1\"\n",
    )
    .unwrap();
    git(&fmt, &["init", "-q", "-b", "main"]);
    git(&fmt, &["add", "-A"]);
    git(&fmt, &["commit", "-q", "-m", "fmt-like"]);
    let fmt_rev = git(&fmt, &["rev-parse", "HEAD"]).trim().to_string();
    let repo = lab.dir.path().join("DeepEP-v2");
    git_repo_from_fixture("mini-deepep-v2", &repo);
    git(&repo, &["submodule", "add", "-q", fmt.to_str().unwrap(), "third-party/fmt"]);
    git(&repo, &["commit", "-q", "-m", "fmt submodule"]);
    let rev = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let nccl = lab.dir.path().join("nccl");
    std::fs::create_dir_all(nccl.join("lib")).unwrap();
    copy_dir(&nccl_headers(version), &nccl.join("include"));
    let code: Vec<u32> = version.split('.').map(|p| p.parse().unwrap()).collect();
    let src = nccl.join("nccl.c");
    std::fs::write(
        &src,
        format!("int ncclGetVersion(int* v) {{ *v = {}; return 0; }}\n", code[0] * 10000 + code[1] * 100 + code[2]),
    )
    .unwrap();
    run(Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o"])
        .arg(nccl.join("lib/libnccl.so.2"))
        .arg(&src));
    V2 { lab, repo, rev, fmt_rev, nccl }
}

impl V2 {
    /// A schema-2 pins file for the fixture's commit with `variants`
    /// (`{nvshmem}`, `{nccl}` replaced).
    pub(crate) fn pins(&self, variants: &str) -> PathBuf {
        let p = self.lab.dir.path().join("pins-v2.toml");
        let text = format!(
            "schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbranch = \"main\"\nbase_version = \"2.1.0\"\n[pin.x86_64]\nrev = \"{}\"\n[pin.aarch64]\nrev = \"{}\"\n{}",
            self.rev,
            self.rev,
            variants
                .replace("{nvshmem}", &self.lab.nvshmem_dir().to_string_lossy())
                .replace("{nccl}", &self.nccl.to_string_lossy())
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    pub(crate) fn forge(&self, args: &[&str]) -> Command {
        let mut all = args.to_vec();
        all.extend(["--source", self.repo.to_str().unwrap()]);
        self.lab.forge(&all)
    }
}

pub(crate) const SINGLE_V2: &str = r#"
[[variant]]
name = "v2"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
nvshmem_dir = "{nvshmem}"
env = { EP_NCCL_ROOT_DIR = "{nccl}" }
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

const MULTINODE: &str = r#"
[[variant]]
name = "mn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = true
transport = "doca"
topology = { gpu = "h100", nodes = 2, gpus_per_node = 8, ep = 16, ranks_per_domain = 8, mnnvl = false }
"#;

fn knob<'a>(p: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    p["interface"]["knobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == name)
        .unwrap_or_else(|| panic!("{name}: {p}"))
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn epv2_plans_from_the_source_at_the_pin() {
    let v = v2();
    let pins = v.pins(SINGLE_V2);
    let o =
        v.forge(&["plan", "--variant", "v2", "--pins", pins.to_str().unwrap(), "--format", "json"]).output().unwrap();
    let j = json(&o);
    let p = &j["plans"][0];
    let i = &p["interface"];
    assert_eq!(i["branch"], "main", "{i}");
    assert_eq!(i["base_version"], "2.1.0");
    assert!(i["version_from"].as_str().unwrap().starts_with("deep_ep/__init__.py:"), "{i}");
    assert_eq!(i["extensions"], serde_json::json!(["deep_ep._C"]));
    assert_eq!(p["source"]["version"], format!("2.1.0+{}", &v.rev[..7]));
    assert_eq!(p["source"]["submodules"]["third-party/fmt"], v.fmt_rev.as_str());
    assert!(i["needs"].as_array().unwrap().iter().any(|n| n == "NCCL"), "{i}");
    // Names a grep for os.getenv misses: f-strings in find_pkgs.py, a loop in setup.py.
    for name in ["EP_NCCL_ROOT_DIR", "NCCL_DIR", "EP_NVSHMEM_ROOT_DIR", "NVSHMEM_DIR"] {
        let at = knob(p, name)["read_at"].as_array().unwrap();
        assert!(at.iter().any(|a| a.as_str().unwrap().starts_with("deep_ep/utils/find_pkgs.py:")), "{name}: {at:?}");
    }
    for name in ["EP_JIT_CACHE_DIR", "EP_JIT_PRINT_COMPILER_COMMAND", "TOPK_IDX_BITS", "EP_NUM_TOPK_IDX_BITS"] {
        assert!(!knob(p, name)["read_at"].as_array().unwrap().is_empty(), "{name} not found in the source");
    }
    assert_eq!(p["warnings"], serde_json::json!([]), "every read is in the table");
    assert_eq!(p["run"]["env"]["EP_NCCL_ROOT_DIR"], v.nccl.to_str().unwrap());
    assert_eq!(p["run"]["env_origin"]["EP_NCCL_ROOT_DIR"], "knob");
    assert!(p["run"]["env"].get("HYBRID_EP_MULTINODE").is_none(), "no hybrid-ep knobs at an EPv2 revision: {p}");
    // Issue 23 §1: the revision's run-time needs, read from its nccl.cu and README with file:line.
    let n = &i["runtime"];
    assert_eq!(n["nccl_min"], "2.30.4", "{n}");
    assert_eq!(n["nccl_exact_below"], "2.31", "{n}");
    let ev = strs_of(&n["evidence"]);
    assert!(ev.iter().any(|e| e.starts_with("README.md:") && e.contains("NCCL 2.30.4 and above")), "{ev:?}");
    assert!(
        ev.iter().any(|e| e.starts_with("csrc/kernels/backend/nccl.cu:") && e.contains("below NCCL 2.31")),
        "{ev:?}"
    );
    assert!(ev.iter().any(|e| e.contains("`#error` below NCCL 2.30.4")), "{ev:?}");
    // What the build compiles against: the real nccl.h of the NCCL root the variant names.
    let e = &p["environment"];
    assert_eq!(e["nccl"], "2.30.7", "{e}");
    assert_eq!(e["cuda"], "13.0", "{e}");
    assert_eq!(e["nvshmem"], serde_json::Value::Null, "the lab's NVSHMEM is a stand-in without a version: {e}");
    assert_eq!(e["needs"], *n, "the plan's environment carries the revision's needs");
    assert!(p["environment_from"]["NCCL"].as_str().unwrap().ends_with("include/nccl.h"), "{p}");
}

fn strs_of(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

/// Issue 23 §2: NCCL 2.28.9's real headers (torch 2.11's own pin) under a
/// revision that needs 2.30.4: `plan` shows what it found and what is needed,
/// `build-wheel` exits 3 before compiling, naming the package to install; the
/// same plan over NCCL 2.30.7 has another cache key.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn an_nccl_older_than_the_revision_needs_stops_the_build_before_compiling() {
    let v = v2_with_nccl("2.28.9");
    let pins = v.pins(SINGLE_V2);
    let pins = pins.to_str().unwrap();
    let o = v.forge(&["plan", "--variant", "v2", "--pins", pins]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("NCCL 2.28.9"), "{text}");
    assert!(text.contains("needs       NCCL >= 2.30.4"), "{text}");
    assert!(text.contains("preflight   STOP (build-wheel exits 3)"), "{text}");
    let old_key = json(&v.forge(&["plan", "--variant", "v2", "--pins", pins, "--format", "json"]).output().unwrap())
        ["plans"][0]["cache_key"]
        .clone();

    let o = v.forge(&["build-wheel", "--variant", "v2", "--pins", pins]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("needs NCCL >= 2.30.4") && err.contains("NCCL 2.28.9"), "{err}");
    assert!(err.contains("nvidia-nccl-cu13>=2.30.4"), "names what to install: {err}");
    assert!(!err.contains("nvcc -c"), "nothing compiled: {err}");
    assert!(v.lab.out_wheels().is_empty() && v.lab.cache_entries().is_empty());

    // The same pins over NCCL 2.30.7's headers: another build, another key.
    let newer = v2_with_nccl("2.30.7");
    let pins = newer.pins(SINGLE_V2);
    let p = json(
        &newer
            .forge(&["plan", "--variant", "v2", "--pins", pins.to_str().unwrap(), "--format", "json"])
            .output()
            .unwrap(),
    );
    assert_eq!(p["plans"][0]["environment"]["nccl"], "2.30.7");
    assert!(old_key.is_string() && p["plans"][0]["cache_key"].is_string());
    assert_ne!(p["plans"][0]["cache_key"], old_key, "a different NCCL is a different cache key");
}

/// A torch package in the lab's build Python whose version.py says `version` and `cuda`.
fn torch_in(v: &V2, version: &str, cuda: &str) -> PathBuf {
    let t = v.lab.site.join("torch");
    std::fs::create_dir_all(&t).unwrap();
    std::fs::write(t.join("__init__.py"), "from .version import __version__\n").unwrap();
    std::fs::write(
        t.join("version.py"),
        format!("from typing import Optional\n__version__ = '{version}'\ncuda: Optional[str] = '{cuda}'\n"),
    )
    .unwrap();
    t.join("version.py")
}

/// The lab's NVSHMEM (the variant's nvshmem_dir, `nvidia/nvshmem`) says `version` through its dist-info.
fn nvshmem_version_in(v: &V2, version: &str) {
    for e in std::fs::read_dir(&v.lab.site).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("nvidia_nvshmem_cu13-") {
            std::fs::remove_dir_all(e.path()).unwrap();
        }
    }
    std::fs::create_dir_all(v.lab.site.join(format!("nvidia_nvshmem_cu13-{version}.dist-info"))).unwrap();
}

/// Issue 30 §3: the revision's own "PyTorch 2.10 and above" (README.md) and "NVSHMEM v3.3.9
/// or later" (docs/nvshmem.md) are needs the plan shows with their lines; a build below
/// either is refused with exit 2 before anything compiles, naming the line and what to do.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_stated_torch_and_nvshmem_minimums_are_shown_and_a_build_below_them_exits_2() {
    let v = v2();
    let pins = v.pins(SINGLE_V2);
    let pins = pins.to_str().unwrap();
    let o = v.forge(&["plan", "--variant", "v2", "--pins", pins]).output().unwrap();
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(text.contains("; torch >= 2.10; NVSHMEM >= 3.3.9"), "{text}");
    assert!(text.contains("              README.md:29: PyTorch 2.10 and above\n"), "{text}");
    assert!(text.contains("              docs/nvshmem.md:6: NVSHMEM v3.3.9 or later\n"), "{text}");
    assert!(!text.contains("no minimum"), "{text}");
    let p = json(&v.forge(&["plan", "--variant", "v2", "--pins", pins, "--format", "json"]).output().unwrap());
    let n = &p["plans"][0]["interface"]["runtime"];
    assert_eq!(
        (n["torch_min"]["version"].as_str(), n["torch_min"]["at"].as_str()),
        (Some("2.10"), Some("README.md:29"))
    );
    assert_eq!(n["nvshmem_min"]["at"], "docs/nvshmem.md:6", "{n}");

    let file = torch_in(&v, "2.9.1+cu130", "13.0");
    for cmd in ["plan", "build-wheel"] {
        let o = v.forge(&[cmd, "--variant", "v2", "--pins", pins]).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert!(err.contains("README.md:29 states \"PyTorch 2.10 and above\""), "{cmd}: {err}");
        assert!(err.contains(&format!("torch 2.9.1+cu130 (read from {})", file.display())), "{cmd}: {err}");
        assert!(err.contains("build against torch 2.10 or newer"), "{cmd}: {err}");
        assert!(err.contains("pins-v2.toml:"), "names the variant's line: {err}");
    }
    assert!(v.lab.out_wheels().is_empty() && v.lab.cache_entries().is_empty(), "nothing built");

    // torch meets it; the NVSHMEM the build links does not, then does.
    torch_in(&v, "2.11.0+cu130", "13.0");
    nvshmem_version_in(&v, "3.3.0");
    let o = v.forge(&["plan", "--variant", "v2", "--pins", pins]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("docs/nvshmem.md:6 states \"NVSHMEM v3.3.9 or later\", and the build links NVSHMEM 3.3.0"),
        "{err}"
    );
    assert!(err.contains("NVSHMEM 3.3.9 or newer"), "{err}");
    nvshmem_version_in(&v, "3.4.5");
    let o = v.forge(&["plan", "--variant", "v2", "--pins", pins]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Issue 30 §3: torch's CUDA against the build's nvcc (13.0 in the tools venv), by torch's
/// own rule: another minor is a plan warning; another major is a warning while the build
/// does not import torch, and `preflight STOP` (build-wheel exits 3 before compiling) once it
/// does, because torch's extension builder would raise. Both versions and where each was read.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_torch_of_another_cuda_than_nvcc_is_a_warning_or_a_stop_with_both_versions() {
    let mut v = v2();
    let file = torch_in(&v, "2.11.0+cu130", "13.1");
    let plan = |v: &V2| {
        let pins = v.pins(SINGLE_V2);
        let o = v.forge(&["plan", "--variant", "v2", "--pins", pins.to_str().unwrap()]).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
    };
    let text = plan(&v);
    let torch_side =
        |cuda: &str, version: &str| format!("torch is a CUDA {cuda} build (torch {version}, {})", file.display());
    assert!(
        text.contains(&format!(
            "  warning     {}, and the build's nvcc is CUDA 13.0 (`nvcc --version` 13.0.",
            torch_side("13.1", "2.11.0+cu130")
        )),
        "{text}"
    );
    assert!(text.contains("another CUDA minor: torch's extension builder only warns"), "{text}");
    assert!(!text.contains("STOP"), "{text}");
    torch_in(&v, "2.11.0+cu129", "12.9");
    let text = plan(&v);
    assert!(text.contains(&torch_side("12.9", "2.11.0+cu129")), "{text}");
    assert!(
        text.contains("another CUDA major: torch's extension builder refuses it")
            && text.contains("does not import torch"),
        "{text}"
    );
    assert!(!text.contains("STOP"), "{text}");

    // The build imports torch (as DeepEP's setup.py does): torch would raise, so preflight stops.
    let setup = v.repo.join("setup.py");
    let body = std::fs::read_to_string(&setup).unwrap();
    std::fs::write(&setup, format!("import torch  # as DeepEP's setup.py\n{body}")).unwrap();
    git(&v.repo, &["commit", "-q", "-am", "the build imports torch"]);
    v.rev = git(&v.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let text = plan(&v);
    assert!(
        text.contains(&format!("  preflight   STOP (build-wheel exits 3): {}", torch_side("12.9", "2.11.0+cu129"))),
        "{text}"
    );
    assert!(text.contains("and the build's nvcc is CUDA 13.0"), "{text}");
    let pins = v.pins(SINGLE_V2);
    let o = v.forge(&["build-wheel", "--variant", "v2", "--pins", pins.to_str().unwrap()]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("torch is a CUDA 12.9 build") && err.contains("build with nvcc of torch's CUDA (12.9"),
        "{err}"
    );
    assert!(v.lab.out_wheels().is_empty() && v.lab.cache_entries().is_empty(), "nothing built");
}

/// A variant that needs HybridEP at an EPv2 revision is refused before any
/// toolchain work or submodule fetch (here: no nvcc, no uv anywhere, and the
/// registry toolchain asked for: still exit 2, nothing provisioned).
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_multinode_variant_at_an_epv2_revision_exits_2_naming_the_hybrid_ep_branch() {
    let v = v2();
    let pins = v.pins(MULTINODE);
    for extra in [&[][..], &["--toolchain", "registry"]] {
        for cmd in ["plan", "build-wheel"] {
            let mut args = vec![cmd, "--variant", "mn", "--pins", pins.to_str().unwrap()];
            args.extend(extra);
            let o = v.forge(&args).env("PATH", "/usr/bin:/bin").env_remove("CUDA_HOME").output().unwrap();
            assert_eq!(o.status.code(), Some(2), "{cmd} {extra:?}: {}", stderr(&o));
            let e = stderr(&o);
            assert!(e.contains("variant `mn` is multinode") && e.contains("needs HybridEP (hybrid_ep_cpp)"), "{e}");
            assert!(e.contains("`main` interface") && e.contains("`hybrid-ep` branch"), "{e}");
            assert!(e.contains("pins-v2.toml:"), "names the variant's line: {e}");
        }
    }
    assert!(!v.lab.cache.join("toolchains").exists(), "nothing provisioned");
    assert!(!v.lab.cache.join("tmp").exists() || std::fs::read_dir(v.lab.cache.join("tmp")).unwrap().next().is_none());
}

/// The fixture builds: version from `__init__.py`, the fmt header from the
/// submodule compiled in, NCCL and NVSHMEM linked, the EP_* baked into
/// deep_ep/envs.py; the static probe says it is an EPv2 wheel and which rules
/// apply. Without NCCL, the preflight refuses before compiling.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn epv2_builds_with_its_submodule_and_the_probe_recognises_deep_ep_c() {
    let v = v2();
    let pins = v.pins(SINGLE_V2);
    let pins = pins.to_str().unwrap();
    let o = v.forge(&["build-wheel", "--variant", "v2", "--pins", pins, "--format", "json"]).output().unwrap();
    let r = json(&o);
    let res = &r["results"][0];
    assert_eq!(res["status"], "built", "{r}");
    assert_eq!(res["version"], format!("2.1.0+{}", &v.rev[..7]));
    let wheel = Path::new(res["wheel"].as_str().unwrap());
    let wheel = if wheel.is_absolute() { wheel.to_path_buf() } else { v.lab.dir.path().join(wheel) };
    let members = zip_members(&wheel);
    let ext = members.iter().find(|m| m.starts_with("deep_ep/_C.") && m.ends_with(".so")).expect("deep_ep/_C*.so");
    let so = member(&wheel, ext);
    assert!(contains(&so, b"fmt-like-submodule-1"), "the submodule's header was not compiled in");
    assert!(contains(&so, b"forge-ptx-mode=conservative"), "DISABLE_AGGRESSIVE_PTX_INSTRS defaults to 1");
    let envs = String::from_utf8(member(&wheel, "deep_ep/envs.py")).unwrap();
    assert!(envs.contains(&format!("persistent_envs['EP_NCCL_ROOT_DIR'] = '{}'", v.nccl.display())), "{envs}");
    let prov: serde_json::Value = serde_json::from_slice(&member(
        &wheel,
        members.iter().find(|m| m.ends_with(".dist-info/deepep-forge-provenance.json")).unwrap(),
    ))
    .unwrap();
    assert_eq!(prov["source"]["submodules"]["third-party/fmt"], v.fmt_rev.as_str());
    assert_eq!(prov["build"]["interface"], "main");
    assert_eq!(prov["variant"]["env"]["EP_NCCL_ROOT_DIR"], v.nccl.to_str().unwrap());
    // Issue 23 §1: what the extension was compiled against, and what its revision needs.
    let env = &prov["toolchain"]["environment"];
    assert_eq!(env["nccl"], "2.30.7", "{prov}");
    assert_eq!(env["needs"]["nccl_min"], "2.30.4", "{prov}");
    assert_eq!(env["needs"]["nccl_exact_below"], "2.31", "{prov}");
    let statement = std::fs::read_to_string(format!("{}.intoto.json", wheel.display())).unwrap();
    let st: serde_json::Value = serde_json::from_str(&statement).unwrap();
    let internal = &st["predicate"]["buildDefinition"]["internalParameters"];
    assert_eq!(internal["buildEnvironment"], *env, "the in-toto statement carries the same environment");

    let o = bin()
        .args(["probe", "--wheel"])
        .arg(&wheel)
        .args(["--preset", "h100-8g", "--format", "json"])
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    let checks = j["checks"].as_array().unwrap_or_else(|| panic!("{j}"));
    let rule = |id: &str| checks.iter().find(|c| c["rule"] == id).unwrap_or_else(|| panic!("{id}: {j}"));
    assert_eq!(rule("interface")["status"], "pass", "{j}");
    assert!(rule("interface")["evidence"].as_str().unwrap().contains("EPv2"), "{j}");
    assert_eq!(rule("hybrid-ep-present")["status"], "skip", "{j}");

    // The same variant without NCCL: exit 3 before compiling.
    let pins = v.pins(&SINGLE_V2.replace("env = { EP_NCCL_ROOT_DIR = \"{nccl}\" }\n", ""));
    let o =
        v.forge(&["build-wheel", "--variant", "v2", "--pins", pins.to_str().unwrap(), "--no-cache"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("needs NCCL") && stderr(&o).contains("nvidia-nccl-cu13"), "{}", stderr(&o));
}

fn zip_members(wheel: &Path) -> Vec<String> {
    let zip = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    zip.file_names().map(String::from).collect()
}

fn member(wheel: &Path, name: &str) -> Vec<u8> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    let mut f = zip.by_name(name).unwrap();
    let mut v = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut v).unwrap();
    v
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// `pin set` reads the version the build at the new revision gives: an EPv2
/// source's label is `2.1.0+<short>`, from `deep_ep/__init__.py`.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn pin_set_writes_the_epv2_label() {
    let v = v2();
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("tests/fixtures/consumer-unified/pyproject.toml"), d.path().join("pyproject.toml"))
        .unwrap();
    std::fs::copy(root().join("pins.toml"), d.path().join("pins.toml")).unwrap();
    let o = forge(d.path(), &["pin", "set", &v.rev, "--source", v.repo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let short = git(&v.repo, &["rev-parse", "--short", &v.rev]).trim().to_string();
    let py = std::fs::read_to_string(d.path().join("pyproject.toml")).unwrap();
    assert!(py.contains(&format!("version = \"2.1.0+{short}\"")), "{py}");
    let pins = std::fs::read_to_string(d.path().join("pins.toml")).unwrap();
    assert!(pins.contains("base_version = \"2.1.0\""), "{pins}");
}

/// The lab with NCCL 2.30.7 installed as pip installs it (a stand-in
/// `nvidia-nccl-cu13` wheel with NCCL's real headers, installed by real uv into
/// the build venv) and the variant naming no NCCL folder: the build takes the
/// pip distribution. Returns the lab, its pins and the stand-in wheel's folder.
fn v2_with_pip_nccl(extra: &str) -> (V2, PathBuf, PathBuf) {
    let v = v2();
    let links = v.lab.dir.path().join("links");
    let whl = tiny_wheel::stand_in_nccl(&links, "2.30.7", Some(&nccl_headers("2.30.7")));
    let uv = v.lab.tools.join("bin/uv");
    run(Command::new(&uv).args(["pip", "install", "--offline", "--no-deps", "--python"]).arg(&v.lab.python).arg(&whl));
    let variant = SINGLE_V2.replace("env = { EP_NCCL_ROOT_DIR = \"{nccl}\" }\n", extra);
    let pins = v.pins(&variant);
    (v, pins, links)
}

/// Issue 30 §1: the wheel's METADATA requires the NCCL distribution the build
/// took, exactly (the revision's nccl.cu requires the run-time NCCL to equal
/// the build's below 2.31); the plan shows it with why, the provenance and the
/// cache key carry it; `runtime_requires = false` turns it off (the plan says
/// so, another key), and a system NCCL is a note, never a requirement.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_wheel_requires_the_pip_nccl_it_was_built_with() {
    let (v, pins, _) = v2_with_pip_nccl("");
    let pins = pins.to_str().unwrap();
    let o = v.forge(&["plan", "--variant", "v2", "--pins", pins]).output().unwrap();
    let text = stdout(&o);
    assert!(text.contains("requires    nvidia-nccl-cu13==2.30.7"), "{text}");
    assert!(text.contains("below NCCL 2.31 the revision requires the run-time NCCL"), "{text}");
    let p = json(&v.forge(&["plan", "--variant", "v2", "--pins", pins, "--format", "json"]).output().unwrap());
    let req = &p["plans"][0]["environment"]["requires"];
    assert_eq!(req["enabled"], true, "{p}");
    assert_eq!(req["requires"][0]["name"], "nvidia-nccl-cu13", "{p}");
    assert_eq!(req["requires"][0]["specifier"], "==2.30.7", "{p}");
    let key = p["plans"][0]["cache_key"].clone();

    let r = json(&v.forge(&["build-wheel", "--variant", "v2", "--pins", pins, "--format", "json"]).output().unwrap());
    let res = &r["results"][0];
    assert_eq!(res["status"], "built", "{r}");
    let wheel = PathBuf::from(res["wheel"].as_str().unwrap());
    let wheel = if wheel.is_absolute() { wheel } else { v.lab.dir.path().join(wheel) };
    let members = zip_members(&wheel);
    let meta = String::from_utf8(member(&wheel, members.iter().find(|m| m.ends_with(".dist-info/METADATA")).unwrap()))
        .unwrap();
    assert!(meta.contains("\nRequires-Dist: nvidia-nccl-cu13==2.30.7\n"), "{meta}");
    // RECORD states METADATA's new hash: pip installs the wheel (it checks RECORD).
    let target = v.lab.dir.path().join("installed");
    run(Command::new(v.lab.tools.join("bin/python"))
        .args(["-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target"])
        .arg(&target)
        .arg(&wheel));
    let prov: serde_json::Value = serde_json::from_slice(&member(
        &wheel,
        members.iter().find(|m| m.ends_with(".dist-info/deepep-forge-provenance.json")).unwrap(),
    ))
    .unwrap();
    assert_eq!(prov["toolchain"]["environment"]["requires"], *req, "{prov}");
    assert_eq!(prov["cache_key"], key);

    // Turned off: the plan says so, the key differs.
    let off = v.pins(&SINGLE_V2.replace("env = { EP_NCCL_ROOT_DIR = \"{nccl}\" }\n", "runtime_requires = false\n"));
    let o = v.forge(&["plan", "--variant", "v2", "--pins", off.to_str().unwrap()]).output().unwrap();
    assert!(stdout(&o).contains("(not written: runtime_requires = false)"), "{}", stdout(&o));
    let p = json(
        &v.forge(&["plan", "--variant", "v2", "--pins", off.to_str().unwrap(), "--format", "json"]).output().unwrap(),
    );
    assert_ne!(p["plans"][0]["cache_key"], key, "runtime_requires is in the cache key");

    // A system NCCL (the variant names its folder): a note, no requirement.
    let sys = v.pins(SINGLE_V2);
    let o = v.forge(&["plan", "--variant", "v2", "--pins", sys.to_str().unwrap()]).output().unwrap();
    let text = stdout(&o);
    assert!(text.contains("requires    none"), "{text}");
    assert!(text.contains("NCCL is not from a pip distribution"), "{text}");
}

/// A PEP 503 simple index under `root/pypi` serving `wheels` (one project per wheel name).
fn simple_index(root: &Path, wheels: &[PathBuf]) {
    let files = root.join("pypi/files");
    std::fs::create_dir_all(&files).unwrap();
    let mut projects: std::collections::BTreeMap<String, String> = Default::default();
    for w in wheels {
        let name = w.file_name().unwrap().to_string_lossy().into_owned();
        std::fs::copy(w, files.join(&name)).unwrap();
        let project = name.split('-').next().unwrap().replace('_', "-").to_lowercase();
        projects
            .entry(project)
            .or_default()
            .push_str(&format!("<a href=\"../../files/{}\">{name}</a>\n", name.replace('+', "%2B")));
    }
    for (p, links) in projects {
        let dir = root.join("pypi/simple").join(&p);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.html"), format!("<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"))
            .unwrap();
    }
}

/// Issue 30 §2, with real uv 0.13.9 against indexes served on 127.0.0.1: a
/// consumer of torch 2.11 (a stand-in that pins `nvidia-nccl-cu13==2.28.9` as
/// the real one does) and of the EPv2 wheel built against the pip NCCL 2.30.7
/// (its METADATA requires `nvidia-nccl-cu13==2.30.7`). Without the override
/// `uv lock` fails with uv's conflict; `pin set --index` reads the wheel's
/// requirements from the index (its PEP 658 `.metadata`, checked against the
/// manifest) and writes `[tool.uv] override-dependencies`; then it locks,
/// `uv sync --locked` installs NCCL 2.30.7, and `import deep_ep` loads it.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn uv_refuses_torchs_nccl_for_the_epv2_wheel_until_pin_set_writes_the_override() {
    let (v, pins, links) = v2_with_pip_nccl("");
    let dir = v.lab.dir.path();
    let key = dir.join("publish.key");
    let keygen = forge(dir, &["cache", "keygen", "--name", "closure-1", "--out", key.to_str().unwrap()]);
    assert_eq!(keygen.status.code(), Some(0), "{}", stderr(&keygen));
    let idx = dir.join("srv");
    let o = v
        .forge(&[
            "publish",
            "--pins",
            pins.to_str().unwrap(),
            "--signing-key",
            key.to_str().unwrap(),
            "--out",
            idx.to_str().unwrap(),
            "--variant",
            "v2",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    // torch 2.11 pins its NCCL exactly; NCCL 2.28.9 and 2.30.7, NVSHMEM 3.4.5 (the host library the build linked).
    let torch = tiny_wheel::tiny_wheel(
        &links,
        "torch",
        "2.11.0",
        &["nvidia-nccl-cu13==2.28.9"],
        &[("torch/__init__.py".to_string(), b"__version__ = '2.11.0'\n".to_vec())],
    );
    let old = tiny_wheel::stand_in_nccl(&links, "2.28.9", None);
    let new = links.join("nvidia_nccl_cu13-2.30.7-py3-none-any.whl");
    let nvshmem = tiny_wheel::tiny_wheel(
        &links,
        "nvidia-nvshmem-cu13",
        "3.4.5",
        &[],
        &[(
            "nvidia/nvshmem/lib/libnvshmem_host.so.3".to_string(),
            tiny_wheel::shared_library(
                &dir.join("nvshmem-src"),
                "libnvshmem_host.so.3",
                "int nvshmem_my_pe(void) { return 0; }\n",
            ),
        )],
    );
    simple_index(&idx, &[torch, old, new, nvshmem]);
    let server = HttpServer::start(&v.lab.tools.join("bin/python"), &idx);
    let url = format!("http://127.0.0.1:{}", server.port);
    let consumer = dir.join("consumer");
    std::fs::create_dir_all(&consumer).unwrap();
    let short = &v.rev[..7];
    std::fs::write(
        consumer.join("pyproject.toml"),
        format!(
            "[project]\nname = \"consumer-closure\"\nversion = \"0.1.0\"\nrequires-python = \"==3.11.*\"\ndependencies = [\n  \"torch==2.11.0\",\n  \"nvidia-nvshmem-cu13==3.4.5\",\n  \"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@{}\",\n]\n\n[[tool.uv.index]]\nname = \"local\"\nurl = \"{url}/pypi/simple\"\ndefault = true\n\n[[tool.uv.dependency-metadata]]\nname = \"deep_ep\"\nversion = \"2.1.0+{short}\"\nrequires-dist = []\n",
            v.rev
        ),
    )
    .unwrap();
    let o = bin()
        .current_dir(dir)
        .env("DEEPEP_FORGE_CACHE_DIR", &v.lab.cache)
        .env("PATH", format!("{}:{}", v.lab.tools.join("bin").display(), std::env::var("PATH").unwrap_or_default()))
        .args([
            "pin",
            "set",
            &v.rev,
            "--project",
            consumer.to_str().unwrap(),
            "--pins",
            pins.to_str().unwrap(),
            "--source",
            v.repo.to_str().unwrap(),
            "--index",
            &url,
            "--variant",
            "v2",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("[tool.uv] override-dependencies nvidia-nccl-cu13==2.30.7"), "{}", stdout(&o));
    let py = std::fs::read_to_string(consumer.join("pyproject.toml")).unwrap();
    assert!(py.contains("[tool.uv]\noverride-dependencies = [\"nvidia-nccl-cu13==2.30.7\"]"), "{py}");
    assert!(py.contains(&format!("\"deep_ep==2.1.0+{short}\"")), "{py}");

    let uv = |args: &[&str]| {
        Command::new(v.lab.tools.join("bin/uv"))
            .args(args)
            .arg("--python")
            .arg(v.lab.tools.join("bin/python"))
            .current_dir(&consumer)
            .env("UV_CACHE_DIR", dir.join("uv-cache"))
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env_remove("UV_INDEX_URL")
            .env_remove("UV_EXTRA_INDEX_URL")
            .env_remove("UV_DEFAULT_INDEX")
            .env_remove("VIRTUAL_ENV")
            .output()
            .unwrap()
    };
    // Without the override: uv's conflict, at lock time.
    let without = py.replace("[tool.uv]\noverride-dependencies = [\"nvidia-nccl-cu13==2.30.7\"]\n", "");
    std::fs::write(consumer.join("pyproject.toml"), &without).unwrap();
    let o = uv(&["lock"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("No solution found when resolving dependencies"), "{err}");
    assert!(err.contains("nvidia-nccl-cu13==2.28.9") && err.contains("nvidia-nccl-cu13==2.30.7"), "{err}");
    assert!(err.contains("requirements are unsatisfiable"), "{err}");
    eprintln!("uv lock without the override:\n{err}");
    assert!(!consumer.join("uv.lock").exists());
    // With it: locks, syncs NCCL 2.30.7, and the extension loads it.
    std::fs::write(consumer.join("pyproject.toml"), &py).unwrap();
    let o = uv(&["lock"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lock = std::fs::read_to_string(consumer.join("uv.lock")).unwrap();
    assert!(lock.contains("name = \"nvidia-nccl-cu13\"\nversion = \"2.30.7\""), "{lock}");
    assert!(!lock.contains("version = \"2.28.9\""), "{lock}");
    let o = uv(&["sync", "--locked"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = Command::new(consumer.join(".venv/bin/python"))
        .args([
            "-c",
            "import deep_ep, importlib.metadata as m, ctypes, os\n\
             lib = ctypes.CDLL(os.path.join(os.path.dirname(deep_ep.__file__), '..', 'nvidia', 'nccl', 'lib', 'libnccl.so.2'))\n\
             v = ctypes.c_int(); lib.ncclGetVersion(ctypes.byref(v))\n\
             print(m.version('deep-ep'), m.version('nvidia-nccl-cu13'), v.value)",
        ])
        .output()
        .unwrap();
    assert_eq!(stdout(&o).trim(), format!("2.1.0+{short} 2.30.7 23007"), "{}", stderr(&o));

    // lock check reads the locked wheel's own requirements from the index: satisfied here.
    let public = stdout(&keygen).lines().next().unwrap().trim().to_string();
    let check = || {
        let o = bin()
            .current_dir(dir)
            .env("DEEPEP_FORGE_CACHE_DIR", &v.lab.cache)
            .args(["lock", "check", "--project", consumer.to_str().unwrap(), "--pins", pins.to_str().unwrap()])
            .args(["--index-manifest", "index", "--trusted-key", &public, "--format", "json"])
            .output()
            .unwrap();
        let j: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
        (o.status.code(), j)
    };
    let unmet = |j: &serde_json::Value| -> Vec<serde_json::Value> {
        j["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == "lock-requires-unmet").cloned().collect()
    };
    let (_, j) = check();
    assert!(unmet(&j).is_empty(), "{j}");
    // A lock made with DeepEP's requirements hidden (dependency-metadata, as for a git
    // source) takes torch's NCCL 2.28.9: lock-requires-unmet at that table, with the override.
    let hidden = format!(
        "{without}\n[[tool.uv.dependency-metadata]]\nname = \"deep-ep\"\nversion = \"2.1.0+{short}\"\nrequires-dist = []\n"
    );
    std::fs::write(consumer.join("pyproject.toml"), &hidden).unwrap();
    let o = uv(&["lock"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lock = std::fs::read_to_string(consumer.join("uv.lock")).unwrap();
    let line = lock.lines().position(|l| l == "name = \"nvidia-nccl-cu13\"").unwrap() + 1;
    assert_eq!(lock.lines().nth(line), Some("version = \"2.28.9\""), "{lock}");
    let (code, j) = check();
    assert_eq!(code, Some(1), "{j}");
    let f = unmet(&j);
    assert_eq!(f.len(), 1, "{j}");
    assert_eq!(f[0]["line"], line, "{j}");
    assert!(f[0]["file"].as_str().unwrap().ends_with("uv.lock"), "{j}");
    assert_eq!((f[0]["expected"].as_str(), f[0]["found"].as_str()), (Some("nvidia-nccl-cu13==2.30.7"), Some("2.28.9")));
    assert!(f[0]["fix"].as_str().unwrap().contains("override-dependencies = [\"nvidia-nccl-cu13==2.30.7\"]"), "{j}");
    drop(server);
}
