//! `probe --wheel W --python ENV` and `probe --python ENV`: the wheel's recorded build
//! environment (provenance `toolchain.environment`) against the environment it runs in.
//!
//! Real parts: SGLang's EPv2 wheel `sgl-deep-ep` 0.1.2.post1 (built without provenance;
//! the tests add one the way tests/it/probe.rs crafts wheels), the real
//! `nvidia-nvshmem-cu13` 3.4.5 and `nvidia-nccl-cu13` 2.28.9 wheels installed with uv
//! (`.ci/fetch-env-wheels`), and a stand-in torch whose `lib/libc10.so` g++ builds with
//! either C++ ABI (real torch wheels are ~900 MB). The ABI risk itself is shown with g++:
//! a library built with `_GLIBCXX_USE_CXX11_ABI=1` and a consumer built with `=0` fail to
//! load with `undefined symbol`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::support::*;
use forge_wheel::wheel::record;
use serde_json::{json, Value};

fn ok(c: &mut Command) -> String {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A shared library exporting std::string functions, built by g++ with `_GLIBCXX_USE_CXX11_ABI=abi`.
fn cxx_lib(dir: &Path, name: &str, abi: u8) -> PathBuf {
    let src = dir.join(format!("{name}-{abi}.cpp"));
    std::fs::write(
        &src,
        "#include <string>\nstd::string c10_version(const std::string& s) { return s + \"-c10\"; }\n\
         int c10_count(const std::string& s) { return (int)s.size(); }\n",
    )
    .unwrap();
    let out = dir.join(name);
    ok(Command::new("g++")
        .args(["-shared", "-fPIC", &format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"), "-o"])
        .arg(&out)
        .arg(&src));
    out
}

/// Write a wheel from members (RECORD computed).
fn write_wheel(path: &Path, dist_info: &str, mut members: Vec<(String, Vec<u8>)>) {
    let record_path = format!("{dist_info}/RECORD");
    let mut entries: Vec<record::Entry> = members
        .iter()
        .map(|(n, b)| record::Entry { path: n.clone(), hash: Some(record::hash_bytes(b)), size: Some(b.len() as u64) })
        .collect();
    entries.push(record::Entry { path: record_path.clone(), hash: None, size: None });
    members.push((record_path, record::write(&entries).into_bytes()));
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (n, b) in members {
        z.start_file(n, zip::write::SimpleFileOptions::default()).unwrap();
        z.write_all(&b).unwrap();
    }
    z.finish().unwrap();
}

/// A stand-in torch wheel: `torch/version.py` and a g++-built `torch/lib/libc10.so` of that ABI.
fn torch_wheel(dir: &Path, version: &str, abi: u8) -> PathBuf {
    let lib = cxx_lib(dir, &format!("libc10-{abi}.so"), abi);
    let di = format!("torch-{version}.dist-info");
    let path = dir.join(format!("torch-{version}-py3-none-any.whl"));
    write_wheel(
        &path,
        &di,
        vec![
            ("torch/__init__.py".into(), b"".to_vec()),
            ("torch/version.py".into(), format!("__version__ = '{version}'\n").into_bytes()),
            ("torch/lib/libc10.so".into(), std::fs::read(lib).unwrap()),
            (
                format!("{di}/METADATA"),
                format!("Metadata-Version: 2.1\nName: torch\nVersion: {version}\n").into_bytes(),
            ),
            (
                format!("{di}/WHEEL"),
                b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-any\n".to_vec(),
            ),
        ],
    );
    path
}

/// A venv (the tools venv's Python) with `wheels` installed by uv, offline, without dependencies.
fn venv(dir: &Path, name: &str, wheels: &[PathBuf]) -> PathBuf {
    let tools = tools_venv().unwrap_or_else(|| missing("the tools venv"));
    let uv = tools.join("bin/uv");
    let venv = dir.join(name);
    ok(Command::new(&uv).args(["venv", "-q", "--python"]).arg(tools.join("bin/python")).arg(&venv));
    if !wheels.is_empty() {
        ok(Command::new(&uv)
            .args(["pip", "install", "-q", "--no-deps", "--offline", "--python"])
            .arg(venv.join("bin/python"))
            .args(wheels)
            .env("UV_CACHE_DIR", dir.join("uv-cache")));
    }
    venv.join("bin/python")
}

/// The sgl-deep-ep wheel with a deepep-forge provenance whose `toolchain.environment` is `env`.
fn with_provenance(src: &Path, dst: &Path, env: Value) {
    let prov = json!({
        "schema": 2, "tool": "deepep-forge test",
        "source": {"repo": "https://github.com/deepseek-ai/DeepEP.git", "rev": "dd758ca".to_string() + &"0".repeat(33),
                   "branch": "main", "short": "dd758ca", "submodules": {}},
        "variant": {"name": "h100", "arch": "x86_64", "cuda_arch_list": "9.0 10.0", "multinode": false,
                    "transport": null, "rdma_core_home": null},
        "env": {}, "toolchain": {"kind": "registry", "torch": "2.11.0+cu130", "cuda": "13.0", "environment": env},
        "host": {"arch": "x86_64", "os": "linux"}, "times": {"source_date_epoch": 0},
        "cache_key": "test", "patches": []
    });
    let mut zin = zip::ZipArchive::new(std::fs::File::open(src).unwrap()).unwrap();
    let mut members = Vec::new();
    let mut dist_info = String::new();
    for i in 0..zin.len() {
        let mut m = zin.by_index(i).unwrap();
        let name = m.name().to_string();
        if name.ends_with(".dist-info/RECORD") {
            dist_info = name.trim_end_matches("/RECORD").to_string();
            continue;
        }
        let mut b = Vec::new();
        m.read_to_end(&mut b).unwrap();
        members.push((name, b));
    }
    members.push((format!("{dist_info}/deepep-forge-provenance.json"), serde_json::to_vec_pretty(&prov).unwrap()));
    write_wheel(dst, &dist_info, members);
}

/// What a build with torch 2.11.0+cu130 (C++11 ABI), NVSHMEM `nvshmem` and NCCL `nccl` records.
fn built(nvshmem: &str, nccl: &str, needs: Value) -> Value {
    json!({"torch": "2.11.0+cu130", "torch_cxx11_abi": true, "cuda": "13.0", "nvshmem": nvshmem, "nccl": nccl, "needs": needs})
}

/// EPv2's needs as DeepEP main dd758ca states them.
fn epv2_needs() -> Value {
    json!({"nccl_min": "2.30.4", "nccl_exact_below": "2.31", "nvshmem_same": true,
           "evidence": ["README.md: NCCL 2.30.4 and above", "csrc/kernels/backend/nccl.cu:100-104"]})
}

struct Lab {
    dir: PathBuf,
    /// sgl-deep-ep as published (no provenance).
    sgl: PathBuf,
    /// torch 2.11.0+cu130 (C++11 ABI), nvidia-nvshmem-cu13 3.4.5, nvidia-nccl-cu13 2.28.9, and
    /// deep_ep installed from an sgl-deep-ep wheel whose provenance says NVSHMEM 3.7.2.
    env: PathBuf,
}

/// The shared environment (one NCCL/NVSHMEM install for every test).
fn lab() -> &'static Lab {
    static L: OnceLock<Lab> = OnceLock::new();
    L.get_or_init(|| {
        let wheels = env_wheels().unwrap_or_else(|| missing("the environment wheels"));
        let dir = process_tempdir();
        let sgl = wheel_in(&wheels, "sgl_deep_ep-0.1.2.post1-");
        let torch = torch_wheel(&dir, "2.11.0+cu130", 1);
        let installed = dir.join("sgl_deep_ep-0.1.2.post1-cp311-cp311-manylinux_2_28_x86_64.whl");
        with_provenance(&sgl, &installed, built("3.7.2", "2.28.9", json!({})));
        let env = venv(
            &dir,
            "env",
            &[
                torch,
                wheel_in(&wheels, "nvidia_nvshmem_cu13-3.4.5-"),
                wheel_in(&wheels, "nvidia_nccl_cu13-2.28.9-"),
                installed,
            ],
        );
        Lab { dir, sgl, env }
    })
}

fn probe(args: &[&str]) -> (i32, Value) {
    let mut full = vec!["probe", "--format", "json"];
    full.extend_from_slice(args);
    let o = forge(&root(), &full);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    (o.status.code().unwrap(), v)
}

fn row<'a>(v: &'a Value, rule: &str) -> &'a Value {
    v["checks"].as_array().unwrap().iter().find(|c| c["rule"] == rule).unwrap_or_else(|| panic!("no {rule}: {v:#}"))
}

fn has_row(v: &Value, rule: &str) -> bool {
    v["checks"].as_array().unwrap().iter().any(|c| c["rule"] == rule)
}

fn text<'a>(v: &'a Value, rule: &str, key: &str) -> &'a str {
    row(v, rule)[key].as_str().unwrap_or("")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A provenance'd copy of the sgl wheel in the lab's folder.
fn wheel_with(name: &str, env: Value) -> PathBuf {
    let l = lab();
    let dst = l.dir.join(format!("{name}.whl"));
    with_provenance(&l.sgl, &dst, env);
    dst
}

#[test]
#[cfg_attr(
    not(feature = "needs-env-wheels"),
    ignore = "needs the environment wheels (.ci/fetch-env-wheels) and the tools venv: bash .ci/run runs it"
)]
fn an_environment_with_the_builds_versions_passes_each_rule() {
    let w = wheel_with("same", built("3.4.5", "2.28.9", json!({})));
    let (code, v) = probe(&["--wheel", s(&w), "--python", s(&lab().env)]);
    assert_eq!(text(&v, "torch-abi", "status"), "pass", "{v:#}");
    assert!(text(&v, "torch-abi", "evidence").contains("_GLIBCXX_USE_CXX11_ABI=1 as built"), "{v:#}");
    assert!(text(&v, "torch-abi", "evidence").contains("libc10.so: "), "the ABI is read from the library: {v:#}");
    assert_eq!(text(&v, "nvshmem-version", "status"), "pass", "{v:#}");
    assert_eq!(text(&v, "nccl-version", "status"), "pass", "{v:#}");
    assert_eq!(text(&v, "build-environment", "status"), "pass", "{v:#}");
    assert_eq!(v["facts"]["versions"]["nccl"], json!(["nvidia-nccl-cu13", "2.28.9"]));
    assert_eq!(code, 0, "{v:#}");
}

#[test]
#[cfg_attr(
    not(feature = "needs-env-wheels"),
    ignore = "needs the environment wheels (.ci/fetch-env-wheels) and the tools venv: bash .ci/run runs it"
)]
fn a_mismatched_nvshmem_fails_with_the_fix_for_a_wheel_and_for_an_installed_deep_ep() {
    // The Automodel report's pair: device code built with 3.7.2's... here the wheel says 3.7.2, the host library is 3.4.5.
    let w = wheel_with("nvshmem", built("3.7.2", "2.28.9", json!({"nvshmem_same": true})));
    let l = lab();
    for args in [vec!["--wheel", s(&w), "--python", s(&l.env)], vec!["--python", s(&l.env)]] {
        let (code, v) = probe(&args);
        assert_eq!(code, 1, "{args:?}: {v:#}");
        assert_eq!(text(&v, "nvshmem-version", "status"), "fail", "{v:#}");
        assert!(text(&v, "nvshmem-version", "evidence").contains("linked with NVSHMEM 3.7.2"), "{v:#}");
        assert!(text(&v, "nvshmem-version", "evidence").contains("nvidia-nvshmem-cu13 3.4.5"), "{v:#}");
        assert_eq!(text(&v, "nvshmem-version", "fix"), "uv pip install --no-deps nvidia-nvshmem-cu13==3.7.2");
    }
    // The installed sgl-deep-ep (distribution name other than deep_ep) is read as EPv2: its deep_ep/_C.
    let (_, v) = probe(&["--python", s(&l.env)]);
    assert!(text(&v, "interface", "evidence").starts_with("DeepEP `main` (EPv2) wheel: deep_ep._C"), "{v:#}");
    assert_eq!(text(&v, "record", "status"), "pass", "{v:#}");
}

#[test]
#[cfg_attr(
    not(feature = "needs-env-wheels"),
    ignore = "needs the environment wheels (.ci/fetch-env-wheels) and the tools venv: bash .ci/run runs it"
)]
fn an_older_nccl_fails_an_epv2_wheel_with_the_fix() {
    // Built as DeepEP main asks (NCCL 2.30.7), run with torch 2.11's own pin 2.28.9.
    let w = wheel_with("nccl", built("3.4.5", "2.30.7", epv2_needs()));
    let (code, v) = probe(&["--wheel", s(&w), "--python", s(&lab().env)]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(text(&v, "nccl-version", "status"), "fail", "{v:#}");
    assert!(text(&v, "nccl-version", "evidence").contains("nvidia-nccl-cu13 2.28.9 is older than the 2.30.4"), "{v:#}");
    // below 2.31 the run-time NCCL must be the build's: the fix names that version
    assert!(
        text(&v, "nccl-version", "fix").starts_with("uv pip install --no-deps \"nvidia-nccl-cu13==2.30.7\""),
        "{v:#}"
    );
    assert!(text(&v, "build-environment", "evidence").contains("its revision needs NCCL >= 2.30.4"), "{v:#}");

    // Built against 2.28.9 with the exact-version need: the environment's 2.28.9 is the one.
    let w = wheel_with("nccl-same", built("3.4.5", "2.28.9", json!({"nccl_exact_below": "2.31"})));
    let (_, v) = probe(&["--wheel", s(&w), "--python", s(&lab().env)]);
    assert_eq!(text(&v, "nccl-version", "status"), "pass", "{v:#}");
    // ... and another 2.2x NCCL is not.
    let w = wheel_with("nccl-other", built("3.4.5", "2.28.3", json!({"nccl_exact_below": "2.31"})));
    let (_, v) = probe(&["--wheel", s(&w), "--python", s(&lab().env)]);
    assert_eq!(text(&v, "nccl-version", "status"), "fail", "{v:#}");
    assert!(text(&v, "nccl-version", "evidence").contains("compile-time and run-time NCCL must be the same"), "{v:#}");
}

#[test]
#[cfg_attr(
    not(feature = "needs-env-wheels"),
    ignore = "needs the environment wheels (.ci/fetch-env-wheels) and the tools venv: bash .ci/run runs it"
)]
fn another_torch_or_torch_abi_fails_naming_undefined_symbols() {
    let w = wheel_with("torch", built("3.4.5", "2.28.9", json!({})));
    let d = tempfile::tempdir().unwrap();
    let old_abi = venv(d.path(), "abi0", &[torch_wheel(d.path(), "2.11.0+cu130", 0)]);
    let (code, v) = probe(&["--wheel", s(&w), "--python", s(&old_abi)]);
    assert_eq!((code, text(&v, "torch-abi", "status")), (1, "fail"), "{v:#}");
    let ev = text(&v, "torch-abi", "evidence");
    assert!(ev.contains("built with _GLIBCXX_USE_CXX11_ABI=1 and the environment's torch is 0"), "{ev}");
    assert!(ev.contains("`undefined symbol`"), "{ev}");
    let other = venv(d.path(), "torch210", &[torch_wheel(d.path(), "2.10.0+cu130", 1)]);
    let (code, v) = probe(&["--wheel", s(&w), "--python", s(&other)]);
    assert_eq!((code, text(&v, "torch-abi", "status")), (1, "fail"), "{v:#}");
    assert!(text(&v, "torch-abi", "evidence")
        .contains("built against torch 2.11.0+cu130, the environment has torch 2.10.0+cu130"));
    assert!(text(&v, "torch-abi", "fix").starts_with("install torch==2.11.0+cu130"), "{v:#}");
    // no NCCL/NVSHMEM packages there: said, not guessed
    assert_eq!(text(&v, "nvshmem-version", "status"), "warn", "{v:#}");
    assert_eq!(text(&v, "nccl-version", "status"), "warn", "{v:#}");
}

/// The mechanism behind `torch-abi`: one std::string function, exported by a library built
/// with the C++11 ABI, asked for by a consumer built with the old one: the loader refuses it.
#[test]
fn the_cxx11_abi_mismatch_is_an_undefined_symbol_at_load_time_and_the_probe_reads_each_abi() {
    let d = tempfile::tempdir().unwrap();
    cxx_lib(d.path(), "libc10.so", 1);
    let consumer = d.path().join("consumer.cpp");
    std::fs::write(&consumer, "#include <string>\nint c10_count(const std::string& s);\nextern \"C\" int use() { return c10_count(\"x\"); }\n").unwrap();
    for abi in [0u8, 1] {
        let so = d.path().join(format!("ext{abi}.so"));
        ok(Command::new("g++")
            .args(["-shared", "-fPIC", &format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"), "-o"])
            .arg(&so)
            .arg(&consumer)
            .arg(format!("-L{}", d.path().display()))
            .args(["-l:libc10.so", &format!("-Wl,-rpath,{}", d.path().display())]));
        // dlopen with RTLD_NOW (what Python's import of an extension does: every symbol bound at load)
        let loader = format!(
            "import ctypes, os\nctypes.CDLL({:?}, mode=os.RTLD_NOW)\nprint('loaded')",
            so.display().to_string()
        );
        let o = Command::new("python3").args(["-c", &loader]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        if abi == 1 {
            assert!(o.status.success(), "{err}");
        } else {
            assert!(!o.status.success() && err.contains("undefined symbol: _Z9c10_countRKSs"), "{err}");
        }
    }
    // env::torch_abi reads each library's ABI from its exports.
    for abi in [0u8, 1] {
        let torch = d.path().join(format!("torch{abi}"));
        std::fs::create_dir_all(torch.join("lib")).unwrap();
        std::fs::copy(cxx_lib(d.path(), &format!("c10-{abi}.so"), abi), torch.join("lib/libc10.so")).unwrap();
        let (got, from) = forge_probe::probe::env::torch_abi(&torch).expect("an ABI");
        assert_eq!(got, abi == 1, "{from}");
    }
    // TorchConfig.cmake, when present, is what torch tells extensions to compile with.
    let torch = d.path().join("torch0");
    std::fs::create_dir_all(torch.join("share/cmake/Torch")).unwrap();
    std::fs::write(
        torch.join("share/cmake/Torch/TorchConfig.cmake"),
        "if(NOT TORCH_CXX_FLAGS)\n  set(TORCH_CXX_FLAGS \"-D_GLIBCXX_USE_CXX11_ABI=1\")\nendif()\n",
    )
    .unwrap();
    let (got, from) = forge_probe::probe::env::torch_abi(&torch).unwrap();
    assert!(got && from.ends_with("TorchConfig.cmake: _GLIBCXX_USE_CXX11_ABI=1"), "{from}");
}

#[test]
#[cfg_attr(
    not(feature = "needs-env-wheels"),
    ignore = "needs the environment wheels (.ci/fetch-env-wheels) and the tools venv: bash .ci/run runs it"
)]
fn a_wheel_without_provenance_says_what_its_elf_shows_and_what_is_not_known() {
    let l = lab();
    let (code, v) = probe(&["--wheel", s(&l.sgl), "--python", s(&l.env)]);
    let ev = text(&v, "build-environment", "evidence");
    assert_eq!(text(&v, "build-environment", "status"), "warn", "{v:#}");
    for want in [
        "_C.cpython-311-x86_64-linux-gnu.so: NEEDED [",
        "libnvshmem_host.so.3",
        "libnccl.so.2",
        "libstdc++.so.6 GLIBCXX_3.4.",
        "RUNPATH /opt/python/cp311-cp311/lib/python3.11/site-packages/nvidia/nvshmem/lib",
        "C++11 std::string ABI (_GLIBCXX_USE_CXX11_ABI=1)",
        "not known (no deepep-forge provenance): the torch version, the NVSHMEM and NCCL versions it was compiled against",
    ] {
        assert!(ev.contains(want), "{want}: {ev}");
    }
    for rule in ["torch-abi", "nvshmem-version", "nccl-version"] {
        assert!(!has_row(&v, rule), "{rule} cannot be judged without a record: {v:#}");
    }
    assert_eq!(code, 0, "{v:#}");
    // Without --python it is information, not a warning.
    let (_, v) = probe(&["--wheel", s(&l.sgl)]);
    assert_eq!(text(&v, "build-environment", "status"), "skip", "{v:#}");
}

#[test]
#[cfg_attr(
    not(feature = "needs-env-wheels"),
    ignore = "needs the environment wheels (.ci/fetch-env-wheels) and the tools venv: bash .ci/run runs it"
)]
fn epv2_across_two_nodes_gets_epv2s_rules_without_r_or_mnnvl_unknowns() {
    let l = lab();
    let (code, v) = probe(&[
        "--wheel",
        s(&l.sgl),
        "--ep",
        "16",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--gpu",
        "h100",
        "--no-host-check",
    ]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(text(&v, "epv2-internode", "status"), "pass", "{v:#}");
    assert!(text(&v, "epv2-internode", "evidence").contains("Gin"), "{v:#}");
    assert_eq!(text(&v, "epv2-legacy-internode", "status"), "pass", "{v:#}");
    assert_eq!(text(&v, "ep-fits-nodes", "status"), "pass", "{v:#}");
    for rule in
        ["ep-divisible", "multinode-build", "ranks-per-domain-max", "ranks-per-node", "mnnvl-system", "domains-max"]
    {
        assert!(!has_row(&v, rule), "{rule}: {v:#}");
    }
    let unknowns = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["evidence"].as_str().unwrap_or("").contains("R not given"))
        .count();
    assert_eq!(unknowns, 0, "{v:#}");
}
