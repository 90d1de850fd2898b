//! Blackwell Ultra (issue 58): the mini-deepep fixture built by real nvcc 13
//! for a `9.0 10.3` variant (H100 and B300/GB300) and a `10.0a` variant (B200
//! only), published as PEP 825 variant wheels; the static probe and real uv
//! 0.13.9 (its NVIDIA provider forced per GPU) pick the wheel that runs on an
//! H100, a B200 and a GB300; `cuobjdump` agrees with the tool's fatbin reader
//! on the cubins; `pins check` refuses an arch list its own GPU cannot run,
//! naming the list that would; every command the tool prints is run as printed.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::build_support::*;
use crate::support::*;

const VARIANTS: &str = r#"
[[variant]]
name = "hopper-b300"
arch = "x86_64"
cuda_arch_list = "9.0 10.3"
multinode = false
topology = { gpu = ["h100", "b300"], nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }

[[variant]]
name = "b200a"
arch = "x86_64"
cuda_arch_list = "10.0a"
multinode = false
topology = { gpu = "b200", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

/// The wheel each GPU kind must get: (probe --gpu, uv's forced compute capability, variant).
const PICKS: [(&str, &str, &str); 3] =
    [("h100", "9.0", "hopper-b300"), ("b200", "10.0", "b200a"), ("gb300", "10.3", "hopper-b300")];

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
    stdout(o)
}

/// `deepep-forge probe --wheel W --gpu G --format json`: the cubin-arch and provenance rows.
fn probe(lab: &Lab, wheel: &Path, gpu: &str) -> Vec<serde_json::Value> {
    let pins = lab.dir.path().join("pins.toml");
    let o = forge(
        lab.dir.path(),
        &[
            "probe",
            "--wheel",
            wheel.to_str().unwrap(),
            "--gpu",
            gpu,
            "--pins",
            pins.to_str().unwrap(),
            "--format",
            "json",
            "--no-host-check",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["rule"] == "cubin-arch" || c["rule"] == "provenance")
        .cloned()
        .collect()
}

/// The extension `name` of `wheel`, unpacked into `dir`.
fn extension(wheel: &Path, name: &str, dir: &Path) -> PathBuf {
    let mut z = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    let member = (0..z.len()).map(|i| z.by_index(i).unwrap().name().to_string()).find(|n| n.starts_with(name)).unwrap();
    let out = dir.join(&member);
    std::io::copy(&mut z.by_name(&member).unwrap(), &mut std::fs::File::create(&out).unwrap()).unwrap();
    out
}

/// `cuobjdump --list-elf`: the cubin archs (`sm_100a`), sorted.
fn cuobjdump_cubins(cuda_home: &Path, so: &Path) -> Vec<String> {
    let o = Command::new(cuda_home.join("bin/cuobjdump")).arg("--list-elf").arg(so).output().unwrap();
    let mut v: Vec<String> = ok(&o)
        .lines()
        .filter_map(|l| l.rsplit('.').nth(1).map(str::to_string))
        .filter(|a| a.starts_with("sm_"))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The variant the installed deep_ep's provenance names.
fn installed_variant(venv: &Path) -> String {
    let site = site_packages(venv);
    let di = std::fs::read_dir(&site)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with("deep_ep-")
                && p.extension().is_some_and(|e| e == "dist-info")
        })
        .expect("deep_ep is installed");
    let prov: serde_json::Value =
        serde_json::from_slice(&std::fs::read(di.join("deepep-forge-provenance.json")).unwrap()).unwrap();
    prov["variant"]["name"].as_str().unwrap().to_string()
}

#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools: nvcc 13, cuobjdump, uv 0.13.9): bash .ci/run runs it"
)]
fn a_9_0_10_3_and_a_10_0a_build_each_go_to_the_gpus_they_run_on() {
    let lab = Lab::new();
    let uv_version = Command::new(lab.tools.join("bin/uv")).arg("--version").output().unwrap();
    if !stdout(&uv_version).starts_with("uv 0.13.9") {
        missing("uv 0.13.9 in the tools venv (its wheel-variants preview)");
    }
    let pins = lab.pins_with(&lab.rev, VARIANTS);
    let pins_s = pins.to_str().unwrap();

    // 1. pins check: both variants run on their own GPUs; a 10.0a list for a B300 does not.
    ok(&forge(lab.dir.path(), &["pins", "check", "--pins", pins_s]));
    let bad = lab.dir.path().join("bad-pins.toml");
    std::fs::write(&bad, std::fs::read_to_string(&pins).unwrap().replace("gpu = \"b200\"", "gpu = \"b300\"")).unwrap();
    let o = forge(lab.dir.path(), &["pins", "check", "--pins", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "b300 (sm_103, compute capability 10.3), which cuda_arch_list \"10.0a\" cannot run on: add 10.3 or 10.3a, or use 10.0f"
        ),
        "{}",
        stderr(&o)
    );

    // 2. The plan carries the exact targets.
    let plan: serde_json::Value = serde_json::from_str(&ok(&lab
        .forge(&["plan", "--pins", pins_s, "--variant", "b200a", "--format", "json"])
        .output()
        .unwrap()))
    .unwrap();
    assert!(plan.to_string().contains("\"TORCH_CUDA_ARCH_LIST\":\"10.0a\""), "{plan:#}");

    // 3. Build both and publish them as variant wheels.
    let key = lab.dir.path().join("publish.key");
    let o = forge(lab.dir.path(), &["cache", "keygen", "--name", "blackwell-1", "--out", key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let idx = lab.dir.path().join("idx");
    let started = std::time::Instant::now();
    let published = lab
        .forge(&[
            "publish",
            "--variant-wheels",
            "--all",
            "--default-variant",
            "hopper-b300",
            "--pins",
            pins_s,
            "--signing-key",
            key.to_str().unwrap(),
            "--out",
            idx.to_str().unwrap(),
            "--source",
            lab.repo.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    println!("publish (two fixture builds): {:.1} s\n{}", started.elapsed().as_secs_f64(), stderr(&published));
    ok(&published);
    let files = idx.join("variants/simple/deep-ep");
    let wheel = |label: &str| -> PathBuf {
        files_with(&files, &format!("-{label}.whl")).into_iter().next().unwrap_or_else(|| panic!("no {label} wheel"))
    };
    let (w_hb, w_a) = (wheel("hopper_b300"), wheel("b200a"));
    let vj = files_with(&files, "-variants.json").into_iter().next().expect("variants.json");
    let vjson: serde_json::Value = serde_json::from_slice(&std::fs::read(vj).unwrap()).unwrap();
    assert_eq!(vjson["variants"]["hopper_b300"]["nvidia"]["sm_arch"], serde_json::json!(["103_real", "90_real"]));
    assert_eq!(vjson["variants"]["hopper_b300"]["deepep_forge"]["cuda_arch"], serde_json::json!(["sm_103", "sm_90"]));
    assert_eq!(vjson["variants"]["b200a"]["deepep_forge"]["cuda_arch"], serde_json::json!(["sm_100a"]));

    // 4. cuobjdump and the tool's reader agree on the cubins; the provenance agrees with them.
    let unpack = lab.dir.path().join("unpacked");
    for (w, want) in [(&w_hb, vec!["sm_103", "sm_90"]), (&w_a, vec!["sm_100a"])] {
        let d = unpack.join(w.file_name().unwrap());
        std::fs::create_dir_all(&d).unwrap();
        for ext in ["deep_ep_cpp", "hybrid_ep_cpp"] {
            let so = extension(w, ext, &d);
            assert_eq!(cuobjdump_cubins(&lab.cuda_home, &so), want, "{ext} in {}", w.display());
        }
        let rows = probe(&lab, w, "h100");
        let mut sorted = want.clone();
        sorted.sort_by_key(|a| a.trim_start_matches("sm_").trim_end_matches('a').parse::<u32>().unwrap());
        let listed = format!("cubin [{}]", sorted.join(" "));
        for r in rows.iter().filter(|r| r["rule"] == "cubin-arch") {
            assert!(r["evidence"].as_str().unwrap().contains(&listed), "{listed}: {r:#}");
        }
        let prov = rows.iter().find(|r| r["rule"] == "provenance").unwrap();
        assert_eq!(prov["status"], "pass", "{prov:#}");
    }

    // 5. The static probe picks, per GPU, the one wheel whose code runs there.
    for (gpu, _, variant) in PICKS {
        let mut runs = Vec::new();
        for (w, name) in [(&w_hb, "hopper-b300"), (&w_a, "b200a")] {
            let rows: Vec<serde_json::Value> =
                probe(&lab, w, gpu).into_iter().filter(|r| r["rule"] == "cubin-arch").collect();
            assert_eq!(rows.len(), 2, "{rows:#?}");
            if rows.iter().all(|r| r["status"] == "pass") {
                runs.push(name);
            } else {
                for r in &rows {
                    assert_eq!(r["status"], "fail", "{gpu} {name}: {r:#}");
                }
            }
        }
        assert_eq!(runs, [variant], "{gpu}");
    }
    // The GB300 row of the 10.0a wheel says why and what list would run; its fix runs as printed.
    let rows = probe(&lab, &w_a, "gb300");
    let r = rows.iter().find(|r| r["rule"] == "cubin-arch").unwrap();
    let ev = r["evidence"].as_str().unwrap();
    assert!(
        ev.contains("no code that runs on gb300 (compute capability 10.3)")
            && ev.contains("cubin [sm_100a]")
            && ev.contains("the arch list must add 10.3 or 10.3a, or use 10.0f"),
        "{r:#}"
    );
    let fix = r["fix"].as_str().unwrap();
    assert_eq!(fix, format!("rebuild: deepep-forge build-wheel --pins {} --variant hopper-b300", shell_quote(pins_s)));
    // Run as printed: deepep-forge and the tools on PATH, git serving DeepEP's URL from the
    // lab's repository (`url.insteadOf`), the interpreter the user's PATH gives.
    let printed = fix.strip_prefix("rebuild: ").unwrap();
    let path = format!(
        "{}:{}:{}",
        exe().parent().unwrap().display(),
        lab.tools.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    let o = Command::new("sh")
        .arg("-c")
        .arg(printed)
        .current_dir(lab.dir.path())
        .env("PATH", path)
        .env("DEEPEP_FORGE_CACHE_DIR", &lab.cache)
        .env("CUDA_HOME", &lab.cuda_home)
        .env("DEEPEP_FORGE_GIT_ALLOW_LOCAL", "1")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", format!("url.file://{}.insteadOf", lab.repo.display()))
        .env("GIT_CONFIG_VALUE_0", "https://github.com/deepseek-ai/DeepEP.git")
        .env_remove("TORCH_CUDA_ARCH_LIST")
        .output()
        .unwrap();
    println!("{printed}:\n{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "`{printed}` as printed: {}{}", stdout(&o), stderr(&o));
    let rebuilt = files_with(&lab.dir.path().join("dist"), ".whl");
    assert_eq!(rebuilt.len(), 1, "{rebuilt:?}");
    let rows = probe(&lab, &rebuilt[0], "gb300");
    assert!(rows.iter().all(|r| r["status"] == "pass"), "{rows:#?}");

    // The presets: b300-8g runs the 9.0 10.3 wheel as it is; gb300-nvl72 is one NVLink domain
    // of 72 over multi-node NVLink, on aarch64 hosts (this x86_64 wheel is the wrong platform).
    let preset = |w: &Path, name: &str| {
        let o = forge(
            lab.dir.path(),
            &[
                "probe",
                "--wheel",
                w.to_str().unwrap(),
                "--preset",
                name,
                "--pins",
                pins_s,
                "--format",
                "json",
                "--no-host-check",
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
        (o.status.code(), v)
    };
    let rule = |v: &serde_json::Value, id: &str| -> serde_json::Value {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["rule"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no {id}: {v:#}"))
    };
    let (code, v) = preset(&w_hb, "b300-8g");
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(rule(&v, "cubin-arch")["status"], "pass");
    let (code, v) = preset(&w_hb, "gb300-nvl72");
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(rule(&v, "cubin-arch")["status"], "pass", "{v:#}");
    assert_eq!(rule(&v, "mnnvl-system")["status"], "pass", "{v:#}");
    assert_eq!(rule(&v, "multinode-build")["status"], "pass", "EP 72 = R 72: one domain, a single-node build: {v:#}");
    assert_eq!(rule(&v, "target-arch")["status"], "fail", "{v:#}");

    // 6. uv 0.13.9 with the variant preview installs the same pick per forced GPU.
    let server = HttpServer::start(&lab.tools.join("bin/python"), &idx);
    let url = format!("http://127.0.0.1:{}/variants/simple/", server.port);
    for (_, cc, variant) in PICKS {
        let venv = lab.dir.path().join(format!("v{cc}"));
        let uv = |args: &[&str]| {
            Command::new(lab.tools.join("bin/uv"))
                .args(args)
                .current_dir(lab.dir.path())
                .env("UV_CACHE_DIR", lab.dir.path().join("uv-cache"))
                .env("UV_PYTHON_DOWNLOADS", "never")
                .env_remove("UV_INDEX_URL")
                .env_remove("UV_EXTRA_INDEX_URL")
                .env_remove("VIRTUAL_ENV")
                .env("NV_VARIANT_PROVIDER_FORCE_SM_ARCH", cc)
                .env("NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION", "13.0")
                .output()
                .unwrap()
        };
        ok(&uv(&["venv", "-q", "--python", lab.tools.join("bin/python").to_str().unwrap(), venv.to_str().unwrap()]));
        let o = uv(&[
            "pip",
            "install",
            "--no-deps",
            "--preview-features",
            "wheel-variants",
            "--python",
            venv.join("bin/python").to_str().unwrap(),
            "--index-url",
            &url,
            "deep-ep",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(installed_variant(&venv), variant, "forced sm_arch {cc}: {}", stderr(&o));
    }
}

/// `s` as a shell word, as the tool prints paths in a command.
fn shell_quote(s: &str) -> String {
    if s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
