//! Journey J5 (issue 42): DeepEP main (EPv2) needs more than libraries at run
//! time. With the mini-deepep-v2 fixture (real git, nvcc, pip, uv): the plan
//! states the whole closure, the JIT's needs read from the source included;
//! the wheel is built and installed into a fresh environment; `probe --python`
//! of that environment without a CUDA home (and then without NCCL's headers)
//! FAILs before anything is imported, naming what is missing and the registry
//! packages that provide it; with the CUDA home and the headers the rule passes.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::build_support::*;
use crate::epv2::{v2, SINGLE_V2};
use crate::support::*;

/// `probe --python <python> --format json` with exactly `env` as the CUDA/NCCL environment
/// (PATH without any nvcc, no CUDA_HOME/CUDA_PATH unless given).
fn probe_env(python: &Path, env: &[(&str, &Path)]) -> (i32, serde_json::Value) {
    let mut c = bin();
    c.args(["probe", "--python"]).arg(python).args(["--format", "json"]);
    for k in ["CUDA_HOME", "CUDA_PATH", "EP_NCCL_ROOT_DIR", "NCCL_DIR", "EP_JIT_NVCC_COMPILER"] {
        c.env_remove(k);
    }
    c.env("PATH", "/usr/bin:/bin");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    (o.status.code().unwrap_or(-1), v)
}

/// The `epv2-jit` rows of a verdict.
fn jit_rows(v: &serde_json::Value) -> Vec<serde_json::Value> {
    let checks = v["checks"].as_array().unwrap_or_else(|| panic!("{v}"));
    checks.iter().filter(|c| c["rule"] == "epv2-jit").cloned().collect()
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn j5_epv2_plan_states_the_closure_and_probe_fails_without_a_cuda_home_or_nccl_headers() {
    let v = v2();
    let pins = v.pins(SINGLE_V2);
    let pins = pins.to_str().unwrap();

    // 1. The plan states the run-time needs beyond libraries, read at the pin, with their lines.
    let o = v.forge(&["plan", "--variant", "v2", "--pins", pins, "--format", "json"]).output().unwrap();
    let p = json(&o);
    let p = p["plans"][0].clone();
    let jit = &p["interface"]["runtime"]["jit"];
    assert_eq!(jit["cuda_home"], true, "{p:#}");
    assert_eq!(jit["nvcc_min"], "12.3", "{p:#}");
    assert_eq!((jit["cuobjdump"].clone(), jit["nccl_headers"].clone()), (true.into(), true.into()), "{p:#}");
    let evidence = p["interface"]["runtime"]["evidence"].to_string();
    assert!(evidence.contains("csrc/jit/compiler.hpp:") && evidence.contains("deep_ep/__init__.py:"), "{evidence}");
    let o = v.forge(&["plan", "--variant", "v2", "--pins", pins]).output().unwrap();
    let text = stdout(&o);
    assert!(
        text.contains("a CUDA home at import") && text.contains("nvcc >= 12.3") && text.contains("NCCL's headers"),
        "the human plan names the JIT's needs: {text}"
    );

    // 2. Built, and installed into a fresh environment with uv.
    let o = v.forge(&["build-wheel", "--variant", "v2", "--pins", pins, "--format", "json"]).output().unwrap();
    let r = json(&o);
    assert_eq!(r["results"][0]["status"], "built", "{r}");
    let wheel = PathBuf::from(r["results"][0]["wheel"].as_str().unwrap());
    let wheel = if wheel.is_absolute() { wheel } else { v.lab.dir.path().join(wheel) };
    let env = v.lab.dir.path().join("job-env");
    let uv = v.lab.tools.join("bin/uv");
    let status = Command::new(&uv)
        .args(["venv", "-q", "--python"])
        .arg(v.lab.tools.join("bin/python"))
        .arg(&env)
        .env("UV_PYTHON_DOWNLOADS", "never")
        .status()
        .unwrap();
    assert!(status.success());
    let o = Command::new(&uv)
        .args(["pip", "install", "-q", "--offline", "--no-deps", "--python"])
        .arg(env.join("bin/python"))
        .arg(&wheel)
        .env("UV_CACHE_DIR", v.lab.dir.path().join("uv-cache"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let python = env.join("bin/python");

    // 3. No CUDA home (no CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda): FAIL, with the packages.
    if Path::new("/usr/local/cuda").exists() {
        missing("a machine without /usr/local/cuda (it is a CUDA home EPv2 finds)");
    }
    let nccl = v.nccl.clone();
    let (code, out) = probe_env(&python, &[("EP_NCCL_ROOT_DIR", &nccl)]);
    let rows = jit_rows(&out);
    let home =
        rows.iter().find(|r| r["status"] == "fail").unwrap_or_else(|| panic!("no failing epv2-jit row: {out:#}"));
    assert_eq!(code, 1, "{out:#}");
    let why = home["evidence"].as_str().unwrap_or_default();
    assert!(why.contains("no CUDA home") && why.contains("CUDA_PATH") && why.contains("/usr/local/cuda"), "{home}");
    let fix = home["fix"].as_str().unwrap_or_default();
    for pkg in ["nvidia-cuda-nvcc==13.0.*", "nvidia-cuda-crt==13.0.*", "nvidia-cuda-cuobjdump", "CUDA_HOME="] {
        assert!(fix.contains(pkg), "{pkg} not in the fix: {fix}");
    }
    // the packages named are the ones that make the tools venv's CUDA home (.ci/setup-tools installs them by these names)
    assert!(v.lab.cuda_home.join("bin/cuobjdump").is_file() && v.lab.cuda_home.join("bin/nvcc").is_file());
    assert!(
        rows.iter().any(|r| r["status"] == "pass" && r["evidence"].as_str().unwrap_or_default().contains("nccl.h")),
        "{out:#}"
    );
    // nothing about HybridEP's JIT for an EPv2 wheel
    assert!(!out["checks"].as_array().unwrap().iter().any(|c| c["rule"] == "jit-cuda-home"), "{out:#}");

    // 4. The CUDA home the fix makes (the registry's nvcc and cuobjdump): that row passes.
    let cuda = v.lab.cuda_home.clone();
    let (_, out) = probe_env(&python, &[("CUDA_HOME", &cuda), ("EP_NCCL_ROOT_DIR", &nccl)]);
    let rows = jit_rows(&out);
    assert_eq!(rows.len(), 2, "{out:#}");
    assert!(rows.iter().all(|r| r["status"] == "pass"), "{rows:#?}");
    assert!(rows[0]["evidence"].as_str().unwrap().contains("nvcc 13."), "{rows:#?}");

    // 5. nvcc on PATH is a CUDA home too (its parent's parent).
    let mut c = bin();
    c.args(["probe", "--python"]).arg(&python).args(["--format", "json"]);
    c.env_remove("CUDA_HOME").env_remove("CUDA_PATH").env("EP_NCCL_ROOT_DIR", &nccl);
    c.env("PATH", format!("{}:/usr/bin:/bin", cuda.join("bin").display()));
    let out: serde_json::Value = serde_json::from_slice(&c.output().unwrap().stdout).unwrap();
    assert!(jit_rows(&out)[0]["evidence"].as_str().unwrap().contains("(nvcc on PATH)"), "{out:#}");

    // 6. A CUDA home but no NCCL headers: FAIL naming the NCCL package.
    let none = v.lab.dir.path().join("no-nccl");
    let (code, out) = probe_env(&python, &[("CUDA_HOME", &cuda), ("EP_NCCL_ROOT_DIR", &none)]);
    let rows = jit_rows(&out);
    let headers = rows.iter().find(|r| r["status"] == "fail").unwrap_or_else(|| panic!("{out:#}"));
    assert_eq!(code, 1);
    assert!(headers["evidence"].as_str().unwrap().contains("no NCCL headers"), "{headers}");
    assert!(headers["fix"].as_str().unwrap().contains("nvidia-nccl-cu13"), "{headers}");
}
