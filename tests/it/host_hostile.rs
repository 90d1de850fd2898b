//! Held-out classes of the cluster check, through the real binary: GID
//! values that are not GIDs, traffic classes and GID indices that are not
//! integers 0-255 (from the environment and from a facts file), caps on every
//! listing (named in the facts and the verdict), and line breaks, CR, ESC and
//! workflow commands in every fact, read from a host tree or written into a
//! facts file by hand: rows stay rows in every format; a name that is not a
//! host name, an unknown variable, a wrong schema, an oversized list or a
//! FIFO is refused (exit 2), never a panic.
use std::path::Path;

use crate::host_facts::{facts, fleet, good, host, judge, rows, write, Node, GID_V2, MULTI};
use crate::support::*;

const PAYLOADS: [&str; 4] = ["\n  pass  forged  ok", "\r\u{1b}[2K", "\n::error::forged", "%0A::warning::x"];

fn probe_tree(root: &Path, env: &[(&str, &str)]) -> (Option<i32>, serde_json::Value) {
    let mut c = bin();
    c.arg("probe").args(MULTI).args(["--format", "json", "--host-root"]).arg(root);
    for v in ["NVSHMEM_IB_GID_INDEX", "NCCL_IB_GID_INDEX", "NVSHMEM_IB_TRAFFIC_CLASS", "NCCL_IB_TC"] {
        c.env_remove(v);
    }
    let o = c.envs(env.iter().copied()).output().unwrap();
    (o.status.code(), serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o))))
}

fn roce<'a>(name: &'a str, gids: Vec<(u32, &'a str, &'a str)>) -> Node<'a> {
    Node { layer: "Ethernet", gids, ..good(name) }
}

#[test]
fn gid_values_that_are_not_gids_do_not_count() {
    let zzzz = "zzzz:0000:0000:0000:0000:ffff:0a00:0001";
    for bad in ["not-a-gid", zzzz, "0000:0000:0000:0000:0000:ffff:0a00:0001:ffff", "1.2.3.4", ""] {
        let t = tempfile::tempdir().unwrap();
        host(t.path(), &roce("gpu-001", vec![(1, bad, "RoCE v2")]));
        let (code, v) = probe_tree(t.path(), &[]);
        let gid = rows(&v, "roce-gid")[0];
        assert_eq!((code, gid["status"].as_str()), (Some(1), Some("fail")), "{bad:?}: {gid}");
        if !bad.is_empty() {
            assert!(
                gid["evidence"].as_str().unwrap().contains("not GIDs (IPv6 addresses), not counted: mlx5_0/1 index 1"),
                "{gid}"
            );
        }
    }
    // a valid v2 GID beside a bad one passes and still names the bad one
    let t = tempfile::tempdir().unwrap();
    host(t.path(), &roce("gpu-001", vec![(1, "not-a-gid", "RoCE v2"), (3, GID_V2, "RoCE v2")]));
    let (_, v) = probe_tree(t.path(), &[]);
    let gid = rows(&v, "roce-gid")[0];
    assert_eq!(gid["status"], "pass");
    assert!(
        gid["evidence"].as_str().unwrap().contains("GID index 3; entries typed RoCE v2 that are not GIDs"),
        "{gid}"
    );
    // the same through a facts file, judged elsewhere
    let d = tempfile::tempdir().unwrap();
    fleet(d.path(), &[roce("gpu-001", vec![(1, zzzz, "RoCE v2")])]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&judge(d.path(), "json"))).unwrap();
    assert_eq!(rows(&v, "roce-gid")[0]["status"], "fail", "{v}");
}

#[test]
fn traffic_classes_and_gid_indices_must_be_integers_0_to_255() {
    let t = tempfile::tempdir().unwrap();
    host(t.path(), &roce("gpu-001", vec![(3, GID_V2, "RoCE v2")]));
    let bad = [
        ("NCCL_IB_TC", "not-a-number"),
        ("NVSHMEM_IB_TRAFFIC_CLASS", "106; rm -rf /"),
        ("NCCL_IB_TC", "256"),
        ("NCCL_IB_TC", "-1"),
        ("NCCL_IB_TC", " 106"),
        ("NVSHMEM_IB_GID_INDEX", "3x"),
        ("NCCL_IB_GID_INDEX", "99999999999"),
    ];
    for (n, value) in bad {
        let (code, v) = probe_tree(t.path(), &[(n, value)]);
        let s = rows(&v, "roce-settings")[0];
        assert_eq!((code, s["status"].as_str()), (Some(1), Some("fail")), "{n}={value:?}: {s}");
        assert!(s["evidence"].as_str().unwrap().starts_with(&format!("{n}=")), "{s}");
    }
    let good_env = [
        ("NCCL_IB_TC", "106"),
        ("NVSHMEM_IB_TRAFFIC_CLASS", "106"),
        ("NCCL_IB_GID_INDEX", "3"),
        ("NVSHMEM_IB_GID_INDEX", "3"),
    ];
    let (_, v) = probe_tree(t.path(), &good_env);
    assert_eq!(rows(&v, "roce-settings")[0]["status"], "pass", "{v}");
    // an InfiniBand node checks the values too; from a facts file as from the environment
    let ib = tempfile::tempdir().unwrap();
    host(ib.path(), &good("gpu-002"));
    let o = facts(ib.path(), &[("NVSHMEM_IB_TRAFFIC_CLASS", "106; rm -rf /")]);
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("gpu-002.json"), &o.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&judge(d.path(), "json"))).unwrap();
    let s = rows(&v, "roce-settings");
    assert!(s.iter().any(|c| c["status"] == "fail"), "{v}");
}

#[test]
fn listings_are_capped_sorted_and_the_cap_is_named() {
    let t = tempfile::tempdir().unwrap();
    host(t.path(), &roce("gpu-001", vec![]));
    let port = "sys/class/infiniband/mlx5_0/ports/1";
    for i in 0..300 {
        write(t.path(), &format!("{port}/gids/{i}"), &format!("{GID_V2}\n"));
        write(t.path(), &format!("{port}/gid_attrs/types/{i}"), "RoCE v2\n");
    }
    let a = stdout(&facts(t.path(), &[]));
    let b = stdout(&facts(t.path(), &[]));
    assert_eq!(a, b, "the same facts every time");
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    let p = &v["devices"][0]["ports"][0];
    assert_eq!((p["gids"].as_array().unwrap().len(), p["gids_left_out"].as_u64()), (256, Some(44)));
    assert_eq!(p["gids"][2]["index"], 2, "numeric order");
    let (_, j) = probe_tree(t.path(), &[]);
    assert!(rows(&j, "roce-gid")[0]["evidence"].as_str().unwrap().contains("read the first 256 of 300 GID entries"));
    // a facts file with more devices than host facts reads is refused
    let mut big = v.clone();
    big["devices"] = serde_json::Value::Array(vec![v["devices"][0].clone(); 65]);
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("x.json"), big.to_string()).unwrap();
    let o = judge(d.path(), "json");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("more than 64 devices"), "{}", stderr(&o));
    // more failing nodes than a row names: the rest are counted, in natural order
    let f = tempfile::tempdir().unwrap();
    let names: Vec<String> = (1..=20).map(|i| format!("gpu-{i}")).collect();
    let nodes: Vec<Node> = names.iter().map(|n| Node { peermem: false, ..good(n) }).collect();
    fleet(f.path(), &nodes);
    let v: serde_json::Value = serde_json::from_str(&stdout(&judge(f.path(), "json"))).unwrap();
    let reg = rows(&v, "gpu-memory-registration")[0]["evidence"].as_str().unwrap().to_string();
    assert!(reg.starts_with("gpu-1, gpu-2, gpu-3,") && reg.contains("gpu-16 and 4 more: "), "{reg}");
}

/// Every format's output holds no raw control character and no line a value
/// opened (a value's `::` may stand inside a row, escaped, never at a line's start).
fn clean(out: &str, format: &str) {
    assert!(!out.contains(['\r', '\u{1b}']), "{format}: {out:?}");
    for l in out.lines() {
        let l = l.trim_start();
        assert!(!l.starts_with("pass  forged"), "{format}: {out}");
        assert!(!l.starts_with("::error::forged") && !l.starts_with("::warning::x"), "{format}: {out}");
    }
}

#[test]
fn line_breaks_and_escapes_in_every_fact_stay_data() {
    for payload in PAYLOADS {
        // through the host tree: device, port, driver, kernel, hostname, NUMA, variables
        let t = tempfile::tempdir().unwrap();
        host(t.path(), &roce("gpu-001", vec![(3, GID_V2, "RoCE v2")]));
        let dev = format!("sys/class/infiniband/mlx5_0{payload}");
        std::fs::create_dir_all(t.path().join(&dev).join("ports/1")).unwrap();
        for (rel, text) in [
            (format!("{dev}/ports/1/state"), format!("4: ACTIVE{payload}")),
            (format!("{dev}/ports/1/link_layer"), format!("Ethernet{payload}")),
            ("proc/sys/kernel/osrelease".into(), format!("6.8.0{payload}")),
            ("proc/sys/kernel/numa_balancing".into(), format!("1{payload}")),
            ("proc/driver/nvidia/version".into(), format!("NVRM version: 570.1{payload}")),
            ("sys/class/infiniband/mlx5_0/ports/1/gids/3".into(), format!("{GID_V2}{payload}")),
            ("sys/class/infiniband/mlx5_0/ports/1/rate".into(), format!("400{payload}")),
        ] {
            write(t.path(), &rel, &text);
        }
        let env = [("NCCL_IB_HCA", format!("mlx5_0{payload}")), ("NCCL_IB_TC", format!("106{payload}"))];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let o = facts(t.path(), &env);
        assert_eq!(o.status.code(), Some(0), "{payload:?}: {}", stderr(&o));
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("gpu-001.json"), &o.stdout).unwrap();
        let mut second = String::from_utf8(o.stdout.clone()).unwrap();
        second = second.replace("\"gpu-001\"", "\"gpu-002\"");
        std::fs::write(d.path().join("gpu-002.json"), second).unwrap();
        for format in ["human", "json", "github", "markdown"] {
            let o = judge(d.path(), format);
            assert_eq!(o.status.code(), Some(1), "{format} {payload:?}: {}", stderr(&o));
            clean(&stdout(&o), format);
        }
        let human = bin().args(["host", "facts", "--host-root"]).arg(t.path()).output().unwrap();
        clean(&stdout(&human), "human");
        // a hostname that is not a host name is refused, naming the file
        write(t.path(), "proc/sys/kernel/hostname", &format!("gpu-001{payload}"));
        let o = facts(t.path(), &[]);
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("x.json"), &o.stdout).unwrap();
        let o = judge(d.path(), "json");
        assert_eq!(o.status.code(), Some(2), "{payload:?}: {}", stdout(&o));
        assert!(stderr(&o).contains("is not a host name") && stderr(&o).contains("x.json"), "{}", stderr(&o));
        assert!(!stderr(&o).contains(['\r', '\u{1b}']), "{:?}", stderr(&o));
    }
}

/// Hand-written facts: raw control characters in every string field are
/// escaped when read back; bad documents are exit 2.
#[test]
fn crafted_facts_files_are_data_or_refused() {
    let t = tempfile::tempdir().unwrap();
    host(t.path(), &roce("gpu-001", vec![(3, GID_V2, "RoCE v2")]));
    let v: serde_json::Value = serde_json::from_str(&stdout(&facts(t.path(), &[]))).unwrap();
    let mut raw = v.clone();
    let forged = "x\u{1b}[2K\r\n::error::forged";
    raw["kernel"] = forged.into();
    raw["driver_version"] = forged.into();
    raw["numa_balancing"] = forged.into();
    raw["container"] = forged.into();
    raw["devices"][0]["name"] = forged.into();
    raw["devices"][0]["ports"][0]["state"] = format!("4: ACTIVE{forged}").into();
    raw["devices"][0]["ports"][0]["gids"][0]["gid"] = forged.into();
    raw["gpus"] = serde_json::json!([{"address": forged, "numa_node": 7, "path": forged, "root": forged}]);
    raw["settings"] = serde_json::json!({"NCCL_IB_HCA": forged});
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.json"), raw.to_string()).unwrap();
    let mut other = raw.clone();
    other["hostname"] = "gpu-002".into();
    std::fs::write(d.path().join("b.json"), other.to_string()).unwrap();
    for format in ["human", "json", "github", "markdown"] {
        let o = judge(d.path(), format);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{format}: {}", stderr(&o));
        clean(&stdout(&o), format);
    }
    let refused = |doc: String, why: &str| {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("n.json"), doc).unwrap();
        let o = judge(d.path(), "json");
        assert_eq!(o.status.code(), Some(2), "{why}: {}", stdout(&o));
        assert!(stderr(&o).contains(why), "{why}: {}", stderr(&o));
    };
    let mut secret = v.clone();
    secret["settings"] = serde_json::json!({"AWS_SECRET_ACCESS_KEY": "x"});
    refused(secret.to_string(), "not one of the NCCL/NVSHMEM IB variables");
    let mut schema = v.clone();
    schema["schema"] = "deepep-forge.host-facts/9".into();
    refused(schema.to_string(), "expected \"deepep-forge.host-facts/1\"");
    refused("{\"schema\": 1".into(), "not a deepep-forge.host-facts/1 document");
    let mut comma = v.clone();
    comma["hostname"] = "gpu-1, gpu-2".into();
    refused(comma.to_string(), "is not a host name");
    // the same node twice
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.json"), v.to_string()).unwrap();
    std::fs::write(d.path().join("b.json"), v.to_string()).unwrap();
    let o = judge(d.path(), "json");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("both name the node gpu-001"), "{}", stderr(&o));
    // a FIFO named as a facts file is refused, not waited on
    let fifo = d.path().join("fifo.json");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let o = judge(&fifo, "json");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
