//! Issue 42, class 8: the closure is stated before the toolchain is
//! installed. `plan --toolchain registry` with an empty cache (nothing
//! provisioned, nothing downloaded) states the wheel's `Requires-Dist` from
//! what the registry toolchain would provision (`requires_dist.source`
//! `would_provision`): torch's exact version and pins.toml's exact NCCL and
//! NVSHMEM, with the revision's reasons; the human plan says the same on its
//! `requires` line.
use std::path::Path;

use crate::support::*;

/// DeepEP main's stand-in (EPv2: NCCL `==` below 2.31) as a git repository with
/// its `third-party/fmt` submodule, and pins.toml with a `[toolchain]`.
fn epv2_with_toolchain(dir: &Path) -> std::path::PathBuf {
    let fmt = dir.join("fmt");
    std::fs::create_dir_all(fmt.join("include/fmt")).unwrap();
    std::fs::write(fmt.join("include/fmt/format.h"), "#pragma once\n").unwrap();
    git(&fmt, &["init", "-q", "-b", "main"]);
    git(&fmt, &["add", "-A"]);
    git(&fmt, &["commit", "-q", "-m", "fmt-like"]);
    let repo = dir.join("DeepEP");
    git_repo_from_fixture("mini-deepep-v2", &repo);
    git(&repo, &["submodule", "add", "-q", fmt.to_str().unwrap(), "third-party/fmt"]);
    git(&repo, &["commit", "-q", "-m", "fmt submodule"]);
    let rev = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let pins = dir.join("pins.toml");
    std::fs::write(
        &pins,
        format!(
            "schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbranch = \"main\"\nbase_version = \"2.1.0\"\n\n[toolchain]\ntorch = \"2.11.0\"\ncuda = \"13.0\"\npython = \"3.12\"\nnccl = \"2.30.7\"\nnvshmem = \"3.7.2\"\n\n[pin.x86_64]\nrev = \"{rev}\"\n[pin.aarch64]\nrev = \"{rev}\"\n\n[[variant]]\nname = \"v2\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\ntopology = {{ gpu = \"h100\", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }}\n"
        ),
    )
    .unwrap();
    pins
}

#[test]
fn the_plan_states_the_wheels_requires_dist_before_the_toolchain_is_installed() {
    let d = tempfile::tempdir().unwrap();
    let pins = epv2_with_toolchain(d.path());
    let cache = d.path().join("cache");
    let plan = |format: &[&str]| {
        bin()
            .args(["plan", "--variant", "v2", "--toolchain", "registry", "--pins"])
            .arg(&pins)
            .arg("--source")
            .arg(d.path().join("DeepEP"))
            .args(format)
            .env("DEEPEP_FORGE_CACHE_DIR", &cache)
            .current_dir(d.path())
            .output()
            .unwrap()
    };
    let o = plan(&["--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &j["plans"][0];
    // Nothing is installed: no environment, the toolchain is what would be provisioned.
    assert_eq!(p["environment"], serde_json::Value::Null, "{p:#}");
    assert_eq!(p["toolchain"]["state"], "missing", "{p:#}");
    assert!(p["toolchain"]["would_provision"].is_object(), "{p:#}");
    // ...and the wheel's Requires-Dist is stated all the same, marked where it comes from.
    let r = &p["requires_dist"];
    assert_eq!(r["source"], "would_provision", "{r:#}");
    assert_eq!(r["enabled"], true, "{r:#}");
    let lines: Vec<String> = r["requires"]
        .as_array()
        .unwrap_or_else(|| panic!("{r:#}"))
        .iter()
        .map(|q| format!("{}{}", q["name"].as_str().unwrap(), q["specifier"].as_str().unwrap()))
        .collect();
    assert!(lines.contains(&"torch==2.11.0".to_string()), "{lines:?}");
    assert!(lines.contains(&"nvidia-nccl-cu13==2.30.7".to_string()), "{lines:?}");
    let nccl = r["requires"].as_array().unwrap().iter().find(|q| q["name"] == "nvidia-nccl-cu13").unwrap();
    assert!(nccl["why"].as_str().unwrap().contains("below NCCL 2.31"), "{nccl}");
    // NVSHMEM is required only where the revision links its device library statically
    // (this one does not): the same rule as after the install.
    let nvshmem = lines.contains(&"nvidia-nvshmem-cu13==3.7.2".to_string());
    assert_eq!(nvshmem, p["interface"]["runtime"]["nvshmem_same"] == true, "{lines:?}");
    assert!(r["notes"].to_string().contains("read again from it once installed"), "says it is checked again: {r:#}");
    // Nothing was provisioned or downloaded.
    assert!(
        !cache.join("toolchains").exists() || std::fs::read_dir(cache.join("toolchains")).unwrap().next().is_none()
    );

    // The human plan says the same.
    let o = plan(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let line = text.lines().find(|l| l.starts_with("  requires    ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("torch==2.11.0") && line.contains("nvidia-nccl-cu13==2.30.7"), "{line}");
    assert!(line.ends_with("(from what the registry toolchain would provision)"), "{line}");
}
