//! A unit's gencodes compiled at once (`builder::canon`, `DEEPEP_FORGE_NVCC_THREADS`):
//! the fixture's two-arch variant (`9.0 10.0`) plans nvcc `--threads 2` with two jobs
//! (origin `jobs`: not keyed), none with one job or with the caller's
//! `DEEPEP_FORGE_NVCC_THREADS=1`; a bad count is exit 2. The two-arch build with
//! `--threads 2` and with one thread (both two jobs, through the build's own
//! sccache) give the same wheel byte for byte and the same cache key.
use crate::build_support::*;
use crate::support::*;

fn run(lab: &Lab, cmd: &str, jobs: &str, threads: Option<&str>) -> serde_json::Value {
    let pins = lab.pins_with(&lab.rev, TWO_ARCH);
    let mut args = vec![cmd, "--variant", "two", "--format", "json", "--jobs", jobs, "--pins", pins.to_str().unwrap()];
    if cmd == "build-wheel" {
        args.extend(["--no-cache", "--no-compiler-cache"]);
    }
    let mut c = lab.forge(&args);
    c.env("CUDA_HOME", &lab.cuda_home);
    if let Some(t) = threads {
        c.env("DEEPEP_FORGE_NVCC_THREADS", t);
    }
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let _ = std::fs::remove_dir_all(&lab.out);
    let j = json(&o);
    if cmd == "plan" {
        j["plans"][0].clone()
    } else {
        j["results"][0].clone()
    }
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn two_arch_wheel_is_the_same_with_and_without_nvcc_threads() {
    let lab = Lab::new();
    let two = run(&lab, "plan", "2", None);
    let one = run(&lab, "plan", "1", None);
    let off = run(&lab, "plan", "2", Some("1"));
    let env = |p: &serde_json::Value, k: &str| p["run"]["env"][k].clone();
    let origin = |p: &serde_json::Value, k: &str| p["run"]["env_origin"][k].clone();
    assert_eq!(env(&two, "DEEPEP_FORGE_NVCC_THREADS"), "2", "{two:#}");
    assert_eq!(origin(&two, "DEEPEP_FORGE_NVCC_THREADS"), "jobs", "not keyed");
    assert!(env(&one, "DEEPEP_FORGE_NVCC_THREADS").is_null(), "one job: one thread");
    assert!(env(&off, "DEEPEP_FORGE_NVCC_THREADS").is_null(), "the caller's 1: one thread");
    assert_eq!(two["cache_key"], one["cache_key"]);
    assert_eq!(two["cache_key"], off["cache_key"]);
    let pins = lab.pins_with(&lab.rev, TWO_ARCH);
    let bad = lab
        .forge(&["plan", "--variant", "two", "--pins", pins.to_str().unwrap()])
        .env("CUDA_HOME", &lab.cuda_home)
        .env("DEEPEP_FORGE_NVCC_THREADS", "-t 9")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("DEEPEP_FORGE_NVCC_THREADS=-t 9 is not a thread count from 1 to 64"),
        "{}",
        stderr(&bad)
    );
    let script = two["hooks"]["scripts"]["nvcc"].as_str().expect("the nvcc hook");
    assert!(script.contains("--threads \"$threads\""), "{script}");

    let with = run(&lab, "build-wheel", "2", None);
    let without = run(&lab, "build-wheel", "2", Some("1"));
    assert!(with["sha256"].is_string(), "{with:#}");
    assert_eq!(with["sha256"], without["sha256"], "--threads 2 {with:#}\none thread {without:#}");
    assert_eq!(with["cache_key"], without["cache_key"]);
}
