//! Safe rows (issue #54, "forged verdict rows"): a value from outside (a
//! sysfs folder name or file, the kernel release, an environment variable, a
//! wheel's name, members, METADATA and provenance, a recipe, a project's
//! pyproject.toml and Dockerfiles, a signed statement) reaches a row only as a
//! `forge_os::line::Line`, escaped when made. A small table of payloads (line
//! breaks, carriage returns, ANSI erase-line and hyperlink sequences, GitHub
//! workflow commands) is crossed with every input slot, and the real binary's
//! output is held to the property in every format: no raw ESC or CR byte
//! anywhere; in the human text every line has one of the tool's own shapes and
//! each shape occurs exactly as often as the JSON document says (one row per
//! check, one `-->` per finding, ...); under `--format github` the lines
//! starting with `::` are exactly the annotations the JSON says there are and
//! the `::stop-commands::` pair around the human text; nothing starts `##[`.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use regex::Regex;
use serde_json::{json, Value};

use crate::support::*;

/// What every slot is fed: each would forge a row, rewrite a line or plant
/// an annotation if it reached the output raw (none holds a `/`: each is a
/// file name too).
const PAYLOADS: [&str; 10] = [
    "\n  pass  forged-rule  planted",
    "x\r  FAIL  forged-rule  planted",
    "\u{1b}[2K\r  pass  erased-and-forged",
    "\u{1b}]8;;https:evil.example\u{7}click\u{1b}]8;;\u{7}",
    "::error::forged annotation",
    "##[error]forged log command",
    "ok\n::error title=forged::planted",
    "ok\r\n##[warning]planted\n  error[forged]: x\n    --> y",
    "\u{1b}[31mred\u{1b}[0m\n  boundary covered  forged",
    "\n\n  WARN  forged-rule  x\n  skip  forged-rule  y\nMATCH: 99 passed",
];

/// Payloads without control characters: the ones a name that refuses control
/// characters (a wheel member, a signed statement's field) can still carry.
fn printable() -> impl Iterator<Item = &'static str> {
    PAYLOADS.iter().copied().filter(|p| !p.chars().any(char::is_control)).chain(["a::error::b", "x ##[group]y"])
}

fn re(s: &str) -> Regex {
    Regex::new(s).unwrap()
}

/// The output of one run in one format.
struct Run {
    code: i32,
    out: String,
    err: String,
}

fn run(mut c: Command) -> Run {
    let o = c.output().unwrap();
    let out = String::from_utf8(o.stdout.clone()).unwrap_or_else(|e| panic!("stdout is not UTF-8: {e}"));
    Run { code: o.status.code().unwrap_or(-1), out, err: stderr(&o) }
}

/// No raw ESC or CR anywhere, nothing that starts a runner command outside the
/// lines `allowed` accepts.
fn no_raw_controls(what: &str, out: &str, allowed: &dyn Fn(&str) -> bool) {
    assert!(!out.contains(['\u{1b}', '\r', '\u{7}']), "{what}: a raw control character in stdout:\n{out:?}");
    for l in out.lines() {
        let lead = l.trim_start();
        assert!(!lead.starts_with("##["), "{what}: a log command planted: {l:?}\n{out}");
        assert!(
            !lead.starts_with("::") || allowed(l),
            "{what}: a workflow command the tool did not make: {l:?}\n{out}"
        );
    }
}

/// Every line of `text` has exactly one of `shapes`, and each shape occurs as
/// often as `want` says (name, regex, count).
fn shapes(what: &str, text: &str, want: &[(&str, Regex, usize)]) {
    for l in text.lines() {
        let hits: Vec<&str> = want.iter().filter(|(_, r, _)| r.is_match(l)).map(|(n, _, _)| *n).collect();
        assert_eq!(hits.len(), 1, "{what}: the line {l:?} has the shapes {hits:?} (one expected):\n{text}");
    }
    for (name, r, n) in want {
        let got = text.lines().filter(|l| r.is_match(l)).count();
        assert_eq!(got, *n, "{what}: {got} line(s) of shape `{name}`, the JSON says {n}:\n{text}");
    }
}

/// A `--format github` report: the annotations (`annotations` of them, each
/// starting `::error`/`::warning`/`::notice`), then the human text between
/// `::stop-commands::TOKEN` and `::TOKEN::`. Returns the human text.
fn github(what: &str, out: &str, annotations: usize) -> String {
    let lines: Vec<&str> = out.lines().collect();
    let stop = lines.iter().position(|l| l.starts_with("::stop-commands::"));
    let Some(stop) = stop else {
        assert_eq!(lines.len(), annotations, "{what}: no human part, and not only annotations:\n{out}");
        return String::new();
    };
    let token = &lines[stop]["::stop-commands::".len()..];
    assert!(token.len() >= 16 && token.chars().all(|c| c.is_ascii_hexdigit()), "{what}: token {token:?}");
    assert_eq!(stop, annotations, "{what}: {stop} line(s) before the human part, {annotations} annotation(s):\n{out}");
    let annotation = re(r"^::(error|warning|notice) [^\n]*title=deepep-forge ");
    for l in &lines[..stop] {
        assert!(annotation.is_match(l), "{what}: not an annotation: {l:?}\n{out}");
    }
    assert_eq!(lines.last(), Some(&format!("::{token}::").as_str()), "{what}: the human part is not closed:\n{out}");
    let end = format!("::{token}::");
    no_raw_controls(what, out, &|l| annotation.is_match(l) || l.starts_with("::stop-commands::") || l == end);
    lines[stop + 1..lines.len() - 1].iter().map(|l| format!("{l}\n")).collect()
}

// ---------------------------------------------------------------- probe

/// The human verdict's shapes and how many of each the JSON verdict says.
fn verdict_shapes(v: &Value) -> Vec<(&'static str, Regex, usize)> {
    let checks = v["checks"].as_array().unwrap();
    let request = &v["request"];
    let notes = request["notes"].as_array().map_or(0, Vec::len);
    let considered = v["considered"].as_array().map_or(0, Vec::len);
    let fixes = checks.iter().filter(|c| c["fix"].is_string()).count();
    vec![
        ("verdict", re(r"^verdict for "), 1),
        ("request", re(r"^request \("), usize::from(!request.is_null())),
        ("note", re(r"^  note: "), notes),
        ("considered", re(r"^  considered: "), considered),
        ("row", re(r"^\s+(pass|WARN|FAIL|skip)\s"), checks.len()),
        ("fix", re(r"^ {10,}fix: "), fixes),
        ("summary", re(r"^(MATCH|MISMATCH): \d+ passed, \d+ warnings, \d+ failed$"), 1),
    ]
}

/// Run `probe args` in the three formats and hold each to the property; the JSON verdict.
fn probe(what: &str, args: &[&str], env: &[(&str, &str)], host: &Path) -> Option<Value> {
    let cmd = |format: &str| {
        let mut c = bin();
        c.arg("probe").args(args).args(["--format", format]).env("DEEPEP_FORGE_HOST_ROOT", host);
        for v in ["NVSHMEM_IB_GID_INDEX", "NCCL_IB_GID_INDEX", "NVSHMEM_IB_TRAFFIC_CLASS", "NCCL_IB_TC"] {
            c.env_remove(v);
        }
        c.envs(env.iter().copied());
        c
    };
    let j = run(cmd("json"));
    if j.code == 2 {
        // Refused as bad input: no verdict, nothing on stdout in any format.
        for format in ["json", "human", "github"] {
            let r = run(cmd(format));
            assert_eq!((r.code, r.out.as_str()), (2, ""), "{what} ({format}): {}", r.err);
        }
        return None;
    }
    assert!(matches!(j.code, 0 | 1), "{what}: exit {}: {}", j.code, j.err);
    no_raw_controls(what, &j.out, &|_| false);
    let v: Value = serde_json::from_str(&j.out).unwrap_or_else(|e| panic!("{what}: {e}: {}", j.out));
    let want = verdict_shapes(&v);
    let h = run(cmd("human"));
    assert_eq!(h.code, j.code, "{what}: human and JSON disagree: {}", h.err);
    no_raw_controls(&format!("{what} (human)"), &h.out, &|_| false);
    shapes(&format!("{what} (human)"), &h.out, &want);
    let g = run(cmd("github"));
    assert_eq!(g.code, j.code, "{what}: github and JSON disagree: {}", g.err);
    let checks = v["checks"].as_array().unwrap();
    let annotations = checks.iter().filter(|c| c["status"] == "fail" || c["status"] == "warn").count();
    let human = github(&format!("{what} (github)"), &g.out, annotations);
    shapes(&format!("{what} (github's human part)"), &human, &want);
    Some(v)
}

const MULTI: [&str; 8] = ["--ep", "16", "--nodes", "2", "--gpus-per-node", "8", "--gpu", "h200"];
const GID_V2: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";

fn write(root: &Path, rel: impl AsRef<Path>, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The host's input slots: where a payload goes in a RoCE host tree.
#[derive(Debug, Clone, Copy, PartialEq)]
enum HostSlot {
    DeviceName,
    DriverName,
    PortName,
    State,
    Rate,
    LinkLayer,
    GidType,
    GidName,
    Gid,
    OsRelease,
    DriverVersion,
    Params,
    Limits,
    Hostname,
    NumaBalancing,
    Cgroup,
}

const HOST_SLOTS: [HostSlot; 16] = [
    HostSlot::DeviceName,
    HostSlot::DriverName,
    HostSlot::PortName,
    HostSlot::State,
    HostSlot::Rate,
    HostSlot::LinkLayer,
    HostSlot::GidType,
    HostSlot::GidName,
    HostSlot::Gid,
    HostSlot::OsRelease,
    HostSlot::DriverVersion,
    HostSlot::Params,
    HostSlot::Limits,
    HostSlot::Hostname,
    HostSlot::NumaBalancing,
    HostSlot::Cgroup,
];

/// A RoCE host (mlx5, one ACTIVE Ethernet port with a RoCE v2 GID, no peermem)
/// with `payload` in the slots `hit` says.
fn roce_host(root: &Path, payload: &str, hit: &dyn Fn(HostSlot) -> bool) {
    let p = |slot: HostSlot, plain: &str| if hit(slot) { format!("{plain}{payload}") } else { plain.to_string() };
    let dev = PathBuf::from("sys/class/infiniband").join(p(HostSlot::DeviceName, "mlx5_0"));
    let driver = p(HostSlot::DriverName, "mlx5_core");
    std::fs::create_dir_all(root.join("sys/bus/pci/drivers").join(&driver)).unwrap();
    std::fs::create_dir_all(root.join(&dev).join("device")).unwrap();
    std::os::unix::fs::symlink(format!("../../../../bus/pci/drivers/{driver}"), root.join(&dev).join("device/driver"))
        .unwrap();
    let port = dev.join("ports").join(p(HostSlot::PortName, "1"));
    write(root, port.join("state"), &format!("{}\n", p(HostSlot::State, "4: ACTIVE")));
    write(root, port.join("rate"), &format!("{}\n", p(HostSlot::Rate, "100 Gb/sec (4X EDR)")));
    write(root, port.join("link_layer"), &format!("{}\n", p(HostSlot::LinkLayer, "Ethernet")));
    let gid = p(HostSlot::GidName, "3");
    write(root, port.join("gid_attrs/types").join(&gid), &format!("{}\n", p(HostSlot::GidType, "RoCE v2")));
    write(root, port.join("gids").join(&gid), &format!("{}\n", p(HostSlot::Gid, GID_V2)));
    write(root, "proc/sys/kernel/osrelease", &format!("{}\n", p(HostSlot::OsRelease, "6.8.0-45-generic")));
    write(
        root,
        "proc/driver/nvidia/version",
        &format!("NVRM version: {}  570.124.06\n", p(HostSlot::DriverVersion, "NVIDIA UNIX Open Kernel Module")),
    );
    write(
        root,
        "proc/driver/nvidia/params",
        &format!("EnableStreamMemOPs: 0\nRegistryDwords: \"{}\"\n", p(HostSlot::Params, "RMUseSwI2c=0x01")),
    );
    write(
        root,
        "proc/self/limits",
        &format!("Max locked memory         {}            unlimited            bytes\n", p(HostSlot::Limits, "65536")),
    );
    write(root, "proc/sys/kernel/hostname", &format!("{}\n", p(HostSlot::Hostname, "gpu-001")));
    write(root, "proc/sys/kernel/numa_balancing", &format!("{}\n", p(HostSlot::NumaBalancing, "1")));
    write(root, "proc/self/cgroup", &format!("{}\n", p(HostSlot::Cgroup, "0::/system.slice/docker-1.scope")));
}

/// Every host slot crossed with every payload (and every slot at once per
/// payload), judged for a request across NVLink domains in all three formats.
#[test]
fn host_values_cannot_forge_a_row_or_an_annotation() {
    for payload in PAYLOADS {
        let mut cases: Vec<(String, Box<dyn Fn(HostSlot) -> bool>)> =
            HOST_SLOTS.iter().map(|&s| (format!("{s:?}"), Box::new(move |x| x == s) as Box<dyn Fn(_) -> _>)).collect();
        cases.push(("every slot".into(), Box::new(|_| true)));
        for (slot, hit) in cases {
            let t = tempfile::tempdir().unwrap();
            roce_host(t.path(), payload, &*hit);
            let what = format!("host slot {slot}, payload {payload:?}");
            let v = probe(&what, &MULTI, &[], t.path()).unwrap_or_else(|| panic!("{what}: refused"));
            assert!(v["checks"].as_array().unwrap().iter().any(|c| c["rule"] == "rdma-port"), "{what}: {v}");
        }
        // The IB settings of the environment, each and all four at once.
        let t = tempfile::tempdir().unwrap();
        roce_host(t.path(), payload, &|_| false);
        let names = ["NVSHMEM_IB_GID_INDEX", "NCCL_IB_GID_INDEX", "NVSHMEM_IB_TRAFFIC_CLASS", "NCCL_IB_TC"];
        for n in names {
            let value = format!("3{payload}");
            probe(&format!("{n}, payload {payload:?}"), &MULTI, &[(n, value.as_str())], t.path());
        }
        let all: Vec<(&str, String)> = names.iter().map(|n| (*n, format!("7{payload}"))).collect();
        let all: Vec<(&str, &str)> = all.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let v = probe(&format!("every IB setting, payload {payload:?}"), &MULTI, &all, t.path()).unwrap();
        let settings = v["checks"].as_array().unwrap().iter().find(|c| c["rule"] == "roce-settings").unwrap();
        assert_eq!(settings["status"], "fail", "{settings}");
    }
}

/// The probe reads the host through one tree: a cut listing is said in its
/// row, in every format (the same text the JSON carries).
#[test]
fn a_cut_device_listing_is_named_in_every_format() {
    let t = tempfile::tempdir().unwrap();
    roce_host(t.path(), "", &|_| false);
    for i in 0..66 {
        std::fs::create_dir_all(t.path().join(format!("sys/class/infiniband/zz{i:02}"))).unwrap();
    }
    let v = probe("67 devices", &MULTI, &[], t.path()).unwrap();
    let device = v["checks"].as_array().unwrap().iter().find(|c| c["rule"] == "rdma-device").unwrap();
    let text = device["evidence"].as_str().unwrap();
    assert!(text.contains("read the first 64 of 67 devices in sys/class/infiniband (3 left out)"), "{text}");
    assert!(text.starts_with("mlx5_0 (mlx5_core), zz00 (driver unknown)"), "sorted by name: {text}");
    assert_eq!(v["facts"]["host"]["devices_left_out"], 3);
    let o = bin()
        .args(["probe", "--format", "human"])
        .args(MULTI)
        .env("DEEPEP_FORGE_HOST_ROOT", t.path())
        .output()
        .unwrap();
    assert!(stdout(&o).contains("(3 left out)"), "{}", stdout(&o));
}

/// A member and its bytes.
type Member = (String, Vec<u8>);

/// A wheel at `dir/name` holding `members` plus METADATA (version `version`),
/// WHEEL, the provenance `provenance` (when given) and a RECORD (with `extra_record` lines).
fn wheel(
    dir: &Path,
    name: &str,
    version: &str,
    members: &[Member],
    provenance: Option<Value>,
    extra_record: &str,
) -> PathBuf {
    let di = "deep_ep-1.2.1+17cfb81.dist-info";
    let mut all = members.to_vec();
    all.push((
        format!("{di}/METADATA"),
        format!("Metadata-Version: 2.1\nName: deep_ep\nVersion: {version}\n").into_bytes(),
    ));
    all.push((format!("{di}/WHEEL"), b"Wheel-Version: 1.0\nTag: cp312-cp312-linux_x86_64\n".to_vec()));
    if let Some(p) = provenance {
        all.push((format!("{di}/{}", forge_wheel::provenance::FILE_NAME), serde_json::to_vec(&p).unwrap()));
    }
    let mut record = String::new();
    for (p, b) in &all {
        let h = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(<sha2::Sha256 as sha2::Digest>::digest(b));
        record.push_str(&format!("{p},sha256={h},{}\n", b.len()));
    }
    record.push_str(extra_record);
    record.push_str(&format!("{di}/RECORD,,\n"));
    all.push((format!("{di}/RECORD"), record.into_bytes()));
    let path = dir.join(name);
    let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    for (p, b) in &all {
        z.start_file(p.as_str(), zip::write::SimpleFileOptions::default()).unwrap();
        z.write_all(b).unwrap();
    }
    z.finish().unwrap();
    path
}

/// A provenance document whose every free-text value carries `payload`.
fn provenance(payload: &str) -> Value {
    json!({
        "schema": 1, "tool": format!("deepep-forge test{payload}"),
        "source": {"repo": format!("https://example.invalid/DeepEP.git{payload}"), "rev": format!("17cfb81{}", "0".repeat(33)),
                   "branch": format!("hybrid-ep{payload}"), "short": format!("17cfb81{payload}"), "submodules": {}},
        "variant": {"name": format!("h100-multinode{payload}"), "arch": "x86_64", "cuda_arch_list": format!("9.0{payload}"),
                    "multinode": true, "transport": "doca", "rdma_core_home": format!("/opt/rdma{payload}")},
        "env": {}, "toolchain": {"kind": "system"}, "host": {"arch": "x86_64", "os": "linux"},
        "times": {"started": "2026-08-17T12:00:00Z", "finished": "2026-08-17T12:00:05Z", "source_date_epoch": 0},
        "cache_key": format!("k{payload}"), "patches": []
    })
}

/// A wheel's slots (its file name's tag set, its version, members, RECORD and
/// provenance) and a recipe's (its name, its values), each crossed with every
/// payload; the static probe in all three formats, with a request across
/// NVLink domains on a ready host so the host rules run too.
#[test]
fn wheel_and_recipe_values_cannot_forge_a_row_or_an_annotation() {
    let host = tempfile::tempdir().unwrap();
    crate::multinode_host::ready_host(host.path());
    let ext = |name: &str| (format!("deep_ep/{name}"), b"\x7fELF-not-really".to_vec());
    let plain = "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl";
    let mut n = 0;
    for payload in PAYLOADS {
        let d = tempfile::tempdir().unwrap();
        let base = vec![("deep_ep/__init__.py".to_string(), b"x = 1\n".to_vec()), ext("hybrid_ep_cpp.so")];
        let mut wheels: Vec<(&str, PathBuf)> = vec![
            (
                "tag set",
                wheel(
                    d.path(),
                    &format!("deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64{payload}.whl"),
                    "1.2.1+17cfb81",
                    &base,
                    None,
                    "",
                ),
            ),
            (
                "platform tag",
                wheel(
                    d.path(),
                    &format!("deep_ep-1.2.1+17cfb81-cp312-cp312-manylinux_2_28_{payload}.whl"),
                    "1.2.1+17cfb81",
                    &base,
                    None,
                    "",
                ),
            ),
        ];
        let sub = d.path().join(format!("v{n}"));
        std::fs::create_dir_all(&sub).unwrap();
        wheels.push(("version", wheel(&sub, plain, &format!("1.2.1+17cfb81{payload}"), &base, None, "")));
        let sub = d.path().join(format!("p{n}"));
        std::fs::create_dir_all(&sub).unwrap();
        wheels.push(("provenance", wheel(&sub, plain, "1.2.1+17cfb81", &base, Some(provenance(payload)), "")));
        let sub = d.path().join(format!("r{n}"));
        std::fs::create_dir_all(&sub).unwrap();
        wheels.push((
            "RECORD",
            wheel(&sub, plain, "1.2.1+17cfb81", &base, None, &format!("deep_ep/gone{payload}.py,sha256=x,1\n")),
        ));
        let sub = d.path().join(format!("m{n}"));
        std::fs::create_dir_all(&sub).unwrap();
        let members = vec![
            base[0].clone(),
            ext(&format!("hybrid_ep_cpp{payload}.so")),
            (format!("deep_ep/{payload}.py"), b"1".to_vec()),
        ];
        wheels.push(("member names", wheel(&sub, plain, "1.2.1+17cfb81", &members, None, "")));
        let sub = d.path().join(format!("folder{payload}"));
        std::fs::create_dir_all(&sub).unwrap();
        wheels.push(("folder", wheel(&sub, plain, "1.2.1+17cfb81", &base, None, "")));
        for (slot, w) in &wheels {
            let w = w.to_str().unwrap();
            for request in [&["--preset", "h100-8g"][..], &MULTI[..]] {
                let mut args = vec!["--wheel", w];
                args.extend_from_slice(request);
                let what = format!("wheel slot {slot}, payload {payload:?}");
                let v = probe(&what, &args, &[], host.path());
                // Only a member name with a control character is refused (the wheel's layout check).
                assert!(v.is_some() || *slot == "member names", "{what}: refused");
            }
        }
        // Recipes: the file's name, a dispatcher, an interpolation NeMo-RL resolves at run time.
        let recipes = d.path().join("recipes");
        std::fs::create_dir_all(&recipes).unwrap();
        let yaml = |v: &str| serde_json::to_string(v).unwrap();
        let named = recipes.join(format!("grpo{payload}.yaml"));
        std::fs::write(&named, "policy:\n  megatron_cfg:\n    enabled: true\n    expert_model_parallel_size: 16\n")
            .unwrap();
        let dispatcher = recipes.join(format!("d{n}.yaml"));
        std::fs::write(
            &dispatcher,
            format!(
                "policy:\n  megatron_cfg:\n    enabled: true\n    expert_model_parallel_size: 16\n    moe_token_dispatcher_type: {}\n",
                yaml(&format!("alltoall{payload}"))
            ),
        )
        .unwrap();
        let interpolated = recipes.join(format!("i{n}.yaml"));
        std::fs::write(
            &interpolated,
            format!("policy:\n  megatron_cfg:\n    enabled: true\n    expert_model_parallel_size: {}\n    moe_token_dispatcher_type: flex\n    moe_flex_dispatcher_backend: hybridep\n", yaml(&format!("${{mul:{payload}}}"))),
        )
        .unwrap();
        for (slot, r) in [("recipe name", &named), ("dispatcher", &dispatcher), ("interpolation", &interpolated)] {
            let r = r.to_str().unwrap();
            let what = format!("recipe slot {slot}, payload {payload:?}");
            let root = recipes.to_str().unwrap();
            let v = probe(&what, &["--recipe", r, "--recipe-root", root, "--gpu", "h100"], &[], host.path());
            let v = v.unwrap_or_else(|| panic!("{what}: refused"));
            let (source, notes) = (v["request"]["source"].to_string(), v["request"]["notes"].to_string());
            let carried = if slot == "recipe name" { &source } else { &notes };
            assert!(
                ["forged", "evil", "red"].iter().any(|m| carried.contains(m)),
                "{what}: the payload is not carried: {v}"
            );
            let args = ["--recipe", r, "--recipe-root", root, "--preset", "h100-8g", "--nodes", "2"];
            probe(&what, &args, &[], host.path()).unwrap_or_else(|| panic!("{what}: refused"));
        }
        n += 1;
    }
    // The printable payloads reach the rows (a control character in a member name is refused, exit 2).
    for payload in printable() {
        let d = tempfile::tempdir().unwrap();
        let members =
            vec![("deep_ep/__init__.py".to_string(), b"x = 1\n".to_vec()), ext(&format!("hybrid_ep_cpp{payload}.so"))];
        let w = wheel(d.path(), plain, "1.2.1+17cfb81", &members, None, "");
        let v = probe(
            &format!("member name {payload:?}"),
            &["--wheel", w.to_str().unwrap(), "--preset", "h100-8g"],
            &[],
            host.path(),
        );
        let v = v.unwrap_or_else(|| panic!("{payload:?}: refused"));
        assert!(v.to_string().contains(&payload.replace('"', "\\\"")), "{payload:?} is not in the verdict: {v}");
    }
}

// ---------------------------------------------------------------- lock check

/// The human `lock check` report's shapes and how many of each the JSON report says.
fn lock_shapes(v: &Value) -> Vec<(&'static str, Regex, usize)> {
    let causes = v["causes"].as_array().unwrap();
    let findings: Vec<(&Value, &Value)> =
        causes.iter().flat_map(|c| c["findings"].as_array().unwrap().iter().map(move |f| (c, f))).collect();
    let pairs = findings.iter().filter(|(_, f)| f["expected"].is_string() && f["found"].is_string()).count();
    let own_fix = findings.iter().filter(|(c, f)| f["fix"].is_string() && f["fix"] != c["fix"]).count();
    vec![
        ("header", re(r"^lock check "), 1),
        ("checked", re(r"^checked: "), 1),
        ("cause", re(r"^(CAUSE|cause \(warning\)|cause \(note\)) \d+/\d+ \["), causes.len()),
        ("cause fix", re(r"^  fix: "), causes.iter().filter(|c| c["fix"].is_string()).count()),
        ("finding", re(r"^  (error|warning|note)\["), findings.len()),
        ("location", re(r"^    --> "), findings.len()),
        ("expected", re(r"^    expected: "), pairs),
        ("found", re(r"^       found: "), pairs),
        ("finding fix", re(r"^    fix: "), own_fix),
        ("summary", re(r"^(FAILED|ok): \d+ error\(s\)"), 1),
    ]
}

/// `lock check` of `project` in the three formats, each held to the
/// property; whether it reported (false: refused as bad input, exit 2).
fn lock_check(what: &str, cwd: &Path, project: &Path) -> bool {
    let cmd = |format: &str| {
        let mut c = bin();
        c.args(["lock", "check", "--format", format, "--project"]).arg(project).current_dir(cwd);
        c.env_remove("GITHUB_WORKSPACE");
        c
    };
    let j = run(cmd("json"));
    if j.code == 2 {
        for format in ["json", "human", "github"] {
            let r = run(cmd(format));
            assert_eq!((r.code, r.out.as_str()), (2, ""), "{what} ({format}): {}", r.err);
        }
        return false;
    }
    assert!(matches!(j.code, 0 | 1), "{what}: exit {}: {}", j.code, j.err);
    no_raw_controls(what, &j.out, &|_| false);
    let v: Value = serde_json::from_str(&j.out).unwrap_or_else(|e| panic!("{what}: {e}: {}", j.out));
    let want = lock_shapes(&v);
    let h = run(cmd("human"));
    no_raw_controls(&format!("{what} (human)"), &h.out, &|_| false);
    shapes(&format!("{what} (human)"), &h.out, &want);
    let g = run(cmd("github"));
    let findings = v["causes"].as_array().unwrap().iter().map(|c| c["findings"].as_array().unwrap().len()).sum();
    let human = github(&format!("{what} (github)"), &g.out, findings);
    shapes(&format!("{what} (github's human part)"), &human, &want);
    true
}

/// A consumer project: pyproject.toml pinning DeepEP (its label carrying
/// `label`), a uv.lock, and `docker/<dockerfile>` whose DEEPEP_REV carries `rev_tail`.
fn consumer(dir: &Path, label: &str, dockerfile: &str, rev_tail: &str, lock_tail: Option<&str>) -> PathBuf {
    let p = dir.join("proj");
    std::fs::create_dir_all(p.join("docker")).unwrap();
    let toml = |s: &str| serde_json::to_string(s).unwrap();
    let dep = "deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@29d31c095796f3c8ece47ee9cdcc167051bbeed9";
    std::fs::write(
        p.join("pyproject.toml"),
        format!(
            "[project]\nname = \"c\"\nversion = \"0.1.0\"\ndependencies = [{}]\n\n[[tool.uv.dependency-metadata]]\nname = \"deep_ep\"\nversion = {}\nrequires-dist = [\"torch\"]\n",
            toml(dep),
            toml(&format!("v1.2.1+29d31c0{label}"))
        ),
    )
    .unwrap();
    if let Some(lock_tail) = lock_tail {
        std::fs::write(
        p.join("uv.lock"),
        format!(
            "version = 1\nrequires-python = \">=3.12\"\n\n[[package]]\nname = \"deep-ep\"\nversion = {}\nsource = {{ git = {} }}\n",
            toml(&format!("1.2.1+29d31c0{lock_tail}")),
            toml(&format!("https://github.com/deepseek-ai/DeepEP.git?rev=29d31c095796f3c8ece47ee9cdcc167051bbeed9#29d31c095796f3c8ece47ee9cdcc167051bbeed9{lock_tail}"))
        ),
    )
    .unwrap();
    }
    std::fs::write(
        p.join("docker").join(dockerfile),
        format!("FROM ubuntu:24.04\nARG DEEPEP_REV=\"29d31c095796f3c8ece47ee9cdcc167051bbeed9{rev_tail}\"\nRUN pip install \"git+https://github.com/deepseek-ai/DeepEP.git@${{DEEPEP_REV}}\"\n"),
    )
    .unwrap();
    p
}

/// pyproject.toml's label, uv.lock's version and source, a Dockerfile's name
/// and its DEEPEP_REV, each crossed with every payload.
#[test]
fn project_values_cannot_forge_a_finding_or_an_annotation() {
    for payload in PAYLOADS {
        for (slot, label, file, rev, lock) in [
            ("label", payload, "Dockerfile", "", None),
            ("Dockerfile name", "", &*format!("Dockerfile{payload}"), "", None),
            ("DEEPEP_REV", "", "Dockerfile", payload, None),
            ("uv.lock", "", "Dockerfile", "", Some(payload)),
            ("every slot", payload, &*format!("Dockerfile.{payload}"), payload, Some(payload)),
        ] {
            let d = tempfile::tempdir().unwrap();
            std::fs::write(d.path().join("pins.toml"), std::fs::read_to_string(root().join("pins.toml")).unwrap())
                .unwrap();
            let project = consumer(d.path(), label, file, rev, lock);
            let reported = lock_check(&format!("lock slot {slot}, payload {payload:?}"), d.path(), &project);
            assert!(reported || lock.is_some(), "lock slot {slot}, payload {payload:?}: refused as bad input");
        }
    }
}

// ---------------------------------------------------------------- evidence show

const WHEEL: &str = "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl";
/// A GPU statement as `probe --run --deep-ep --record` made it (docs/evidence.md).
const GPU_STATEMENT: &str = "tests/fixtures/evidence/h200-deep-ep-round-trip.dsse.json";

/// The fields of a signed statement a payload goes into (the JSON pointer and
/// whether the value is kept whole or has the payload appended).
const STATEMENT_SLOTS: [&str; 12] = [
    "/predicate/machine/gpuModel",
    "/predicate/machine/rankGpus/0/host",
    "/predicate/machine/rankGpus/0/gpu",
    "/predicate/machine/nccl",
    "/predicate/machine/driver",
    "/predicate/doesNotShow",
    "/predicate/time",
    "/predicate/request/source",
    "/predicate/request/gpu",
    "/predicate/result/verdict",
    "/predicate/producer/tool",
    "/predicate/machine/rdma",
];

/// The human `evidence show` shapes and counts of the JSON report.
fn evidence_human_shapes(v: &Value) -> Vec<(&'static str, Regex, usize)> {
    let sections = v["sections"].as_array().unwrap();
    let count = |k: &str| sections.iter().map(|s| s[k].as_array().unwrap().len()).sum::<usize>();
    let kinds: Vec<&str> = forge_model::ladder::Kind::ALL.iter().map(|k| k.as_str()).collect();
    vec![
        ("section", re(r"^[^ ].* @ .* \((x86_64|aarch64)\)  "), sections.len()),
        ("statement", re(&format!(r"^  ({}) *  ", kinds.join("|"))), count("statements")),
        ("boundary", re(r"^  boundary (covered|partial|none) "), count("boundary")),
        ("not counted", re(r"^not counted \(no trusted signature\): "), v["not_counted"].as_array().unwrap().len()),
    ]
}

/// The Markdown comment's shapes and counts of the JSON report.
fn evidence_markdown_shapes(v: &Value) -> Vec<(&'static str, Regex, usize)> {
    let sections = v["sections"].as_array().unwrap();
    let stmts: usize = sections.iter().map(|s| s["statements"].as_array().unwrap().len()).sum();
    let stmt_tables = sections.iter().filter(|s| !s["statements"].as_array().unwrap().is_empty()).count();
    let bounds: usize = sections
        .iter()
        .map(|s| s["boundary"].as_array().unwrap().len() + s["configuration"].as_array().unwrap().len())
        .sum();
    vec![
        ("title", re(r"^### DeepEP evidence$"), 1),
        ("blank", re(r"^$"), 1 + sections.len() * 3 + stmt_tables),
        ("section", re(r"^\*\*[^*]+\*\* @ `"), sections.len()),
        ("summary", re(r"^Summary: "), sections.len()),
        ("separator", re(r"^\|(---\|)+$"), stmt_tables + sections.len()),
        ("header or row", re(r"^\| "), stmt_tables + sections.len() + stmts + bounds),
        (
            "not counted",
            re(r"^\d+ statement file\(s\) not counted"),
            usize::from(!v["not_counted"].as_array().unwrap().is_empty()),
        ),
    ]
}

/// `evidence show` of `ev` in JSON, human and Markdown, each held to the
/// property; whether it rendered (false: the statements were refused).
fn evidence_show(what: &str, d: &Path, wheel: &Path, public: &str) -> bool {
    let cmd = |format: &str| {
        let mut c = bin();
        c.args(["evidence", "show", "--pins", "pins.toml", "--variant", "h100", "--wheel"])
            .arg(wheel)
            .args(["--evidence", "ev", "--trusted-key", public, "--format", format])
            .current_dir(d)
            .env_remove("DEEPEP_FORGE_TRUSTED_KEYS")
            .env("XDG_CONFIG_HOME", d.join("config"))
            .env("DEEPEP_FORGE_CACHE_DIR", d.join("cache"));
        c
    };
    let j = run(cmd("json"));
    if j.code != 0 {
        for format in ["json", "human", "markdown"] {
            let r = run(cmd(format));
            assert_eq!((r.code, r.out.as_str()), (j.code, ""), "{what} ({format}): {}", r.err);
        }
        return false;
    }
    no_raw_controls(what, &j.out, &|_| false);
    let v: Value = serde_json::from_str(&j.out).unwrap_or_else(|e| panic!("{what}: {e}: {}", j.out));
    let h = run(cmd("human"));
    no_raw_controls(&format!("{what} (human)"), &h.out, &|_| false);
    shapes(&format!("{what} (human)"), &h.out, &evidence_human_shapes(&v));
    let m = run(cmd("markdown"));
    no_raw_controls(&format!("{what} (markdown)"), &m.out, &|_| false);
    shapes(&format!("{what} (markdown)"), &m.out, &evidence_markdown_shapes(&v));
    for l in m.out.lines().filter(|l| l.starts_with('|')) {
        let borders = l.char_indices().filter(|&(i, c)| c == '|' && !l[..i].ends_with('\\')).count();
        assert!(borders == 6 || borders == 8, "{what}: {borders} cell borders (a `|` not escaped): {l}\n{}", m.out);
    }
    true
}

/// Sign `statement` as a DSSE envelope with the key file `key`.
fn envelope(statement: &Value, key: &Path) -> Vec<u8> {
    use forge_store::evidence::statement as st;
    let payload = serde_json::to_vec(statement).unwrap();
    let sk = forge_store::cache::sign::SecretKey::load(key).unwrap();
    let signed = sk.sign(&st::pae(st::PAYLOAD_TYPE, &payload));
    let (keyid, sig) = signed.split_once(':').unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    serde_json::to_vec(&json!({
        "payloadType": st::PAYLOAD_TYPE,
        "payload": b64.encode(&payload),
        "signatures": [{"keyid": keyid, "sig": sig}],
    }))
    .unwrap()
}

/// A small wheel named like the project's, and its sha256.
fn evidence_wheel(dir: &Path) -> (PathBuf, String) {
    let members = vec![("deep_ep/__init__.py".to_string(), b"x = 1\n".to_vec())];
    let w = wheel(dir, WHEEL, "1.2.1+17cfb81", &members, None, "");
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(std::fs::read(&w).unwrap()));
    (w, sha)
}

fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let key = dir.join(format!("{name}.key"));
    let o = forge(dir, &["cache", "keygen", "--name", name, "--out", key.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    (key, stdout(&o).lines().next().unwrap().trim().to_string())
}

/// A signed statement's fields (the GPU's model and the RDMA device names the
/// run saw, the hosts, versions, the request's source, the reported outcome,
/// URL and text) and a statement file's name, each crossed with every payload:
/// `evidence show` in JSON, human and Markdown.
#[test]
fn statement_fields_cannot_forge_an_evidence_row() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("pins.toml"), std::fs::read_to_string(root().join("pins.toml")).unwrap()).unwrap();
    let (w, sha) = evidence_wheel(d.path());
    let (key, public) = keygen(d.path(), "lead-1");
    let (other, _) = keygen(d.path(), "stranger-1");
    let envelope_json: Value = serde_json::from_slice(&std::fs::read(root().join(GPU_STATEMENT)).unwrap()).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut observed: Value =
        serde_json::from_slice(&b64.decode(envelope_json["payload"].as_str().unwrap()).unwrap()).unwrap();
    observed["subject"][0]["digest"]["sha256"] = json!(sha);
    observed["predicate"]["request"]["gpu"] = json!("h100");
    observed["predicate"]["machine"]["rdma"] = json!(["mlx5_0 (mlx5_core)", "mlx5_0/1 4: ACTIVE InfiniBand"]);
    let reported = json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": WHEEL, "digest": {"sha256": sha}}],
        "predicateType": forge_store::evidence::statement::PREDICATE_TYPE,
        "predicate": {
            "kind": "training", "doesNotShow": "x", "origin": "reported",
            "producer": {"command": "evidence add", "mode": null, "tool": "deepep-forge 0.1.0", "commit": null},
            "time": "2026-12-01T00:00:00Z", "request": null, "machine": null, "result": null,
            "reported": {"outcome": "20/20 steps", "url": null, "text": null}
        }
    });
    let fresh = |d: &Path| {
        let _ = std::fs::remove_dir_all(d.join("ev"));
        std::fs::create_dir_all(d.join("ev").join(&sha)).unwrap();
    };
    let put = |d: &Path, name: &str, statement: &Value, key: &Path| {
        std::fs::write(d.join("ev").join(&sha).join(name), envelope(statement, key)).unwrap();
    };
    let payloads: Vec<&str> = PAYLOADS.iter().copied().chain(printable()).collect();
    let mut rendered = Vec::new();
    for payload in payloads {
        for slot in STATEMENT_SLOTS {
            fresh(d.path());
            let mut s = observed.clone();
            let at = s.pointer_mut(slot).unwrap_or_else(|| panic!("{slot}"));
            *at = match at {
                Value::Array(_) => json!([format!("mlx5_0{payload}"), format!("{payload}/1 4: ACTIVE")]),
                Value::String(old) => json!(format!("{old}{payload}")),
                _ => json!(payload),
            };
            put(d.path(), "run.dsse.json", &s, &key);
            if evidence_show(&format!("statement slot {slot}, payload {payload:?}"), d.path(), &w, &public) {
                rendered.push(format!("{slot} {payload:?}"));
            }
        }
        for (slot, field, value) in [
            ("outcome", "outcome", json!(format!("20/20{payload}"))),
            ("url", "url", json!(format!("https://ci.example.org/{payload}"))),
            ("text", "text", json!(format!("loss 2.1{payload}"))),
        ] {
            fresh(d.path());
            let mut s = reported.clone();
            s["predicate"]["reported"][field] = value;
            put(d.path(), "training.dsse.json", &s, &key);
            if evidence_show(&format!("reported {slot}, payload {payload:?}"), d.path(), &w, &public) {
                rendered.push(format!("{slot} {payload:?}"));
            }
        }
        // A statement file no trusted key signed is listed by its name.
        fresh(d.path());
        put(d.path(), "run.dsse.json", &observed, &key);
        put(d.path(), &format!("x{payload}.dsse.json"), &reported, &other);
        let shown = evidence_show(&format!("untrusted file name, payload {payload:?}"), d.path(), &w, &public);
        assert!(shown, "a statement file no trusted key signed is listed, whatever its name: {payload:?}");
    }
    // Statement fields refuse control characters when signed and read: the
    // printable payloads (workflow commands, Markdown) reach the rendering.
    for slot in ["/predicate/machine/gpuModel", "/predicate/machine/rdma", "outcome", "text"] {
        assert!(
            rendered.iter().any(|r| r.starts_with(slot) && r.contains("::error::")),
            "no `::error::` payload reached the rendering through {slot}: {rendered:?}"
        );
    }
}
