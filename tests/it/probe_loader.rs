//! `probe --python ENV` reports what the process would load (issue 30 §4):
//! the real nvidia-nccl-cu13 2.28.9 and nvidia-nvshmem-cu13 3.4.5 wheels
//! installed by real uv into a venv, and a small deep_ep whose `_C` extension
//! (built by gcc) NEEDs libnccl.so.2 and libnvshmem_host.so.3 through a
//! `$ORIGIN` RUNPATH, as a deepep-forge wheel does. The probe resolves both
//! without ldd or dlopen and reads their versions from their own `.rodata`;
//! a dist-info rewritten to another version, and a wheel whose provenance
//! says it was built against another NCCL (EPv2's exact rule), are findings,
//! also for the wheel file probed against the environment (`--wheel --python`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::tiny_wheel::tiny_wheel;
use crate::support::*;
use serde_json::{json, Value};

fn ok(c: &mut Command) -> String {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// A deep_ep wheel whose `_C` NEEDs the venv's NCCL and NVSHMEM (RUNPATH
/// `$ORIGIN/../nvidia/{nccl,nvshmem}/lib`) and whose provenance says NCCL `nccl`.
fn deep_ep_wheel(dir: &Path, site: &Path, nccl: &str) -> PathBuf {
    let work = dir.join(format!("deep-ep-{nccl}"));
    std::fs::create_dir_all(&work).unwrap();
    let so = work.join("_C.so");
    std::fs::write(work.join("c.c"), "int deep_ep_stand_in(void) { return 0; }\n").unwrap();
    ok(Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(work.join("c.c"))
        .arg(format!("-L{}", site.join("nvidia/nccl/lib").display()))
        .arg(format!("-L{}", site.join("nvidia/nvshmem/lib").display()))
        .args(["-Wl,--no-as-needed", "-l:libnccl.so.2", "-l:libnvshmem_host.so.3", "-Wl,--allow-shlib-undefined"])
        .arg("-Wl,--enable-new-dtags,-rpath,$ORIGIN/../nvidia/nccl/lib:$ORIGIN/../nvidia/nvshmem/lib"));
    let prov = json!({
        "schema": 2, "tool": "deepep-forge test",
        "source": {"repo": "https://github.com/deepseek-ai/DeepEP.git", "rev": "dd758ca".to_string() + &"0".repeat(33),
                   "branch": "main", "short": "dd758ca", "submodules": {}},
        "variant": {"name": "h100", "arch": "x86_64", "cuda_arch_list": "9.0", "multinode": false,
                    "transport": null, "rdma_core_home": null},
        "env": {}, "toolchain": {"kind": "registry", "torch": null, "cuda": "13.0", "environment": {
            "torch": null, "torch_cxx11_abi": null, "cuda": "13.0", "nvshmem": "3.4.5", "nccl": nccl,
            "needs": {"nccl_exact_below": "2.31", "nvshmem_same": true}}},
        "host": {"arch": "x86_64", "os": "linux"}, "times": {"source_date_epoch": 0},
        "cache_key": "test", "patches": []
    });
    tiny_wheel(
        &work,
        "deep_ep",
        "2.1.0",
        &[],
        &[
            ("deep_ep/__init__.py".to_string(), b"".to_vec()),
            ("deep_ep/_C.cpython-311-x86_64-linux-gnu.so".to_string(), std::fs::read(&so).unwrap()),
            (
                "deep_ep-2.1.0.dist-info/deepep-forge-provenance.json".to_string(),
                serde_json::to_vec_pretty(&prov).unwrap(),
            ),
        ],
    )
}

fn probe(python: &Path) -> (i32, Vec<Value>) {
    probe_args(&["--python", python.to_str().unwrap()])
}

/// `probe --format json ARGS`: its exit code and its `loaded-libraries` rows.
fn probe_args(args: &[&str]) -> (i32, Vec<Value>) {
    let o = forge(&root(), &[&["probe", "--format", "json"], args].concat());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    let rows = v["checks"].as_array().unwrap().iter().filter(|c| c["rule"] == "loaded-libraries").cloned().collect();
    (o.status.code().unwrap(), rows)
}

#[test]
#[cfg_attr(
    not(feature = "needs-env-wheels"),
    ignore = "needs the environment wheels (.ci/fetch-env-wheels) and the tools venv: bash .ci/run runs it"
)]
fn the_probe_names_the_libraries_the_process_would_load_and_their_own_versions() {
    let wheels = env_wheels().unwrap_or_else(|| missing("the environment wheels"));
    let tools = tools_venv().unwrap_or_else(|| missing("the tools venv"));
    let dir = tempfile::tempdir().unwrap();
    let uv = tools.join("bin/uv");
    let venv = dir.path().join("env");
    ok(Command::new(&uv).args(["venv", "-q", "--python"]).arg(tools.join("bin/python")).arg(&venv));
    let python = venv.join("bin/python");
    let install = |args: &[&str], w: &[PathBuf]| {
        ok(Command::new(&uv)
            .args(["pip", "install", "-q", "--no-deps", "--offline"])
            .args(args)
            .arg("--python")
            .arg(&python)
            .args(w)
            .env("UV_CACHE_DIR", dir.path().join("uv-cache")))
    };
    install(&[], &[wheel_in(&wheels, "nvidia_nccl_cu13-2.28.9-"), wheel_in(&wheels, "nvidia_nvshmem_cu13-3.4.5-")]);
    let site = venv.join("lib/python3.11/site-packages");
    install(&[], &[deep_ep_wheel(dir.path(), &site, "2.28.9")]);

    // As built: NCCL 2.28.9 and NVSHMEM 3.4.5 through the RUNPATH, by their own bytes.
    let (_, rows) = probe(&python);
    let nccl = site.join("nvidia/nccl/lib/libnccl.so.2");
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["status"], "pass", "{rows:#?}");
    let text = rows[0]["evidence"].as_str().unwrap();
    assert!(text.starts_with(&format!("libnccl.so.2 -> {} (RUNPATH): NCCL 2.28.9", nccl.display())), "{text}");
    assert_eq!(rows[1]["status"], "pass", "{rows:#?}");
    assert!(rows[1]["evidence"].as_str().unwrap().ends_with("(RUNPATH): NVSHMEM 3.4.5"), "{rows:#?}");

    // The dist-info rewritten to claim 2.30.7: the library is still 2.28.9.
    let meta = site.join("nvidia_nccl_cu13-2.28.9.dist-info/METADATA");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, text.replacen("Version: 2.28.9", "Version: 2.30.7", 1)).unwrap();
    let (code, rows) = probe(&python);
    assert_eq!(code, 1, "{rows:#?}");
    assert_eq!(rows[0]["status"], "fail", "{rows:#?}");
    let text = rows[0]["evidence"].as_str().unwrap();
    assert!(text.contains("is NCCL 2.28.9 by its own bytes, but the dist-info says nvidia-nccl-cu13 2.30.7"), "{text}");
    std::fs::write(&meta, std::fs::read_to_string(&meta).unwrap().replacen("Version: 2.30.7", "Version: 2.28.9", 1))
        .unwrap();

    // A wheel built against NCCL 2.30.7 (EPv2, below 2.31: the same NCCL at run time): named before any import.
    let built_2307 = deep_ep_wheel(dir.path(), &site, "2.30.7");
    install(&["--reinstall"], std::slice::from_ref(&built_2307));
    let (code, rows) = probe(&python);
    assert_eq!(code, 1, "{rows:#?}");
    let text = rows[0]["evidence"].as_str().unwrap();
    assert!(
        text.contains("is NCCL 2.28.9, the extension was built against NCCL 2.30.7: below NCCL 2.31 they must be the same version"),
        "{text}"
    );
    assert!(rows[0]["fix"].as_str().unwrap().contains("nvidia-nccl-cu13==2.30.7"), "{rows:#?}");

    // The wheel file against the environment (`--wheel --python`): its extension as it
    // would be installed there (the environment's platlib), the same finding.
    let (code, rows) = probe_args(&["--wheel", built_2307.to_str().unwrap(), "--python", python.to_str().unwrap()]);
    assert_eq!(code, 1, "{rows:#?}");
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let text = rows[0]["evidence"].as_str().unwrap();
    assert!(text.starts_with(&format!("libnccl.so.2 -> {} (RUNPATH) is NCCL 2.28.9", nccl.display())), "{text}");
    assert!(text.contains("the extension was built against NCCL 2.30.7"), "{text}");

    // With torch: deep_ep imports it first, and torch's libtorch_cuda.so loads NCCL through
    // its own RUNPATH; the loader then reuses that soname for the extension.
    let work = dir.path().join("torch-src");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("t.c"), "int torch_stand_in(void) { return 0; }\n").unwrap();
    ok(Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(work.join("libtorch_cuda.so"))
        .arg(work.join("t.c"))
        .arg(format!("-L{}", site.join("nvidia/nccl/lib").display()))
        .args(["-Wl,--no-as-needed", "-l:libnccl.so.2", "-Wl,--allow-shlib-undefined"])
        .arg("-Wl,--enable-new-dtags,-rpath,$ORIGIN/../../nvidia/nccl/lib"));
    let torch = tiny_wheel(
        &work,
        "torch",
        "2.11.0",
        &[],
        &[
            ("torch/__init__.py".to_string(), b"__version__ = '2.11.0'\n".to_vec()),
            ("torch/lib/libtorch_cuda.so".to_string(), std::fs::read(work.join("libtorch_cuda.so")).unwrap()),
        ],
    );
    install(&[], &[torch]);
    let (_, rows) = probe(&python);
    let text = rows[0]["evidence"].as_str().unwrap();
    assert!(
        text.starts_with(&format!(
            "libnccl.so.2 -> {} (loaded by torch first (its RUNPATH; the loader reuses the soname)) is NCCL 2.28.9",
            nccl.display()
        )),
        "{text}"
    );
}
