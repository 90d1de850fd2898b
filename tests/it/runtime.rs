//! `probe --run` without a GPU: the no-driver path (exit 3, no panic), rank
//! detection and the rendezvous with several real processes on 127.0.0.1,
//! NVRTC compiling the kernels (when libnvrtc loads); and, ignored here, the
//! GPU runs made through the device tool.
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

fn driver_present() -> bool {
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Start rank `rank` of `world` with torchrun's variables.
fn rank(rank: u32, world: u32, port: u16, extra: &[&str]) -> Child {
    let mut c = bin();
    c.args(["probe", "--run"])
        .args(extra)
        .env_remove("SLURM_PROCID")
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().expect("deepep-forge starts")
}

/// Wait for all, failing the test (and killing them) if they outlive `limit`: never a hang.
fn wait_all(children: Vec<Child>, limit: Duration) -> Vec<Output> {
    let start = Instant::now();
    let mut children = children;
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        if start.elapsed() > limit {
            for c in &mut children {
                let _ = c.kill();
            }
            panic!("ranks still running after {limit:?}: the rendezvous hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
}

#[test]
#[cfg_attr(
    not(feature = "needs-no-driver"),
    ignore = "needs a machine without a CUDA driver: bash .ci/run runs it there"
)]
fn no_driver_exits_3_with_a_message_not_a_panic() {
    if driver_present() {
        panic!("not run: libcuda loads on this machine; the no-driver path needs a machine without it");
    }
    let o = bin()
        .args(["probe", "--run"])
        .env_remove("RANK")
        .env_remove("SLURM_PROCID")
        .env_remove("OMPI_COMM_WORLD_RANK")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("no CUDA driver"), "{err}");
    assert!(err.contains("hint:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let o = bin().args(["probe", "--run", "--format", "json"]).env_remove("RANK").output().unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert!(stdout(&o).is_empty(), "nothing half-written on stdout: {}", stdout(&o));
}

#[test]
fn bad_shapes_and_launcher_env_are_usage_errors() {
    for (args, want) in [
        (&["--hidden", "100"][..], "multiple of 8"),
        (&["--topk", "17"][..], "between 1 and 16"),
        (&["--tokens", "0"][..], "must be positive"),
    ] {
        let o = bin().args(["probe", "--run"]).args(args).env_remove("RANK").output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    // RANK without WORLD_SIZE, and several ranks with no rendezvous.
    let o = bin().args(["probe", "--run"]).env("RANK", "1").env_remove("WORLD_SIZE").output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("WORLD_SIZE is not"), "{}", stderr(&o));
    let o = bin()
        .args(["probe", "--run"])
        .env_remove("RANK")
        .env("SLURM_PROCID", "0")
        .env("SLURM_NTASKS", "4")
        .env_remove("MASTER_ADDR")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("MASTER_ADDR is not set"), "{}", stderr(&o));
    // --tokens without --run is refused by clap.
    let o = bin().args(["probe", "--tokens", "5"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
#[cfg_attr(
    not(feature = "needs-no-driver"),
    ignore = "needs a machine without a CUDA driver: bash .ci/run runs it there"
)]
fn three_processes_meet_over_tcp_and_report_the_missing_driver_once() {
    if driver_present() {
        panic!("not run: libcuda loads here; this test checks the ranks' shared no-driver verdict");
    }
    let port = free_port();
    let kids = (0..3).map(|r| rank(r, 3, port, &["--timeout", "20"])).collect();
    let outs = wait_all(kids, Duration::from_secs(40));
    for (r, o) in outs.iter().enumerate() {
        let err = stderr(o);
        assert_eq!(o.status.code(), Some(3), "rank {r}: {err}");
        // Every rank learnt every other rank's state through the allgather.
        assert!(err.contains("no CUDA on rank(s) 0, 1, 2"), "rank {r}: {err}");
        assert!(err.contains(&format!("rank {r} of 3")), "rank {r}: {err}");
    }
}

#[test]
fn a_rank_that_never_arrives_is_named_after_the_timeout() {
    let port = free_port();
    let start = Instant::now();
    let kids = vec![rank(0, 3, port, &["--timeout", "2"]), rank(1, 3, port, &["--timeout", "2"])];
    let outs = wait_all(kids, Duration::from_secs(30));
    let took = start.elapsed();
    let e0 = stderr(&outs[0]);
    assert_eq!(outs[0].status.code(), Some(1), "{e0}");
    assert!(e0.contains("rank 2 never arrived"), "{e0}");
    assert!(e0.contains("tcp 127.0.0.1:"), "{e0}");
    // Rank 1 hears rank 0's explanation instead of timing out on its own.
    let e1 = stderr(&outs[1]);
    assert_eq!(outs[1].status.code(), Some(1), "{e1}");
    assert!(e1.contains("rank 2 never arrived"), "{e1}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[test]
fn rank_0_alone_never_hangs_and_a_lone_leaf_names_rank_0() {
    let port = free_port();
    let outs = wait_all(vec![rank(1, 2, port, &["--timeout", "1"])], Duration::from_secs(20));
    let e = stderr(&outs[0]);
    assert_eq!(outs[0].status.code(), Some(1), "{e}");
    assert!(e.contains("rank 0 never answered"), "{e}");
}

#[test]
#[cfg_attr(
    not(feature = "needs-no-driver"),
    ignore = "needs a machine without a CUDA driver: bash .ci/run runs it there"
)]
fn file_rendezvous_works_and_cleans_up() {
    if driver_present() {
        panic!("not run: libcuda loads here; this test checks the ranks' shared no-driver verdict");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared/probe.addr");
    let spec = format!("file:{}", path.display());
    let kids = (0..2)
        .map(|r| {
            let mut c = bin();
            c.args(["probe", "--run", "--timeout", "20", "--rendezvous", &spec])
                .env_remove("RANK")
                .env_remove("WORLD_SIZE")
                .env("OMPI_COMM_WORLD_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_SIZE", "2")
                .env_remove("MASTER_ADDR")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let outs = wait_all(kids, Duration::from_secs(40));
    for (r, o) in outs.iter().enumerate() {
        let err = stderr(o);
        assert_eq!(o.status.code(), Some(3), "rank {r}: {err}");
        assert!(err.contains("no CUDA on rank(s) 0, 1"), "rank {r}: {err}");
        assert!(err.contains("(mpirun)") || r > 0, "rank {r}: {err}");
    }
    assert!(!path.exists(), "rank 0 removes its address file");
}

#[test]
#[cfg_attr(
    not(feature = "needs-nvrtc"),
    ignore = "needs libnvrtc.so.13 on LD_LIBRARY_PATH (pip: nvidia-cuda-nvrtc): bash .ci/run runs it when it loads"
)]
fn nvrtc_compiles_the_kernels_to_cubins() {
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        panic!("not run: libnvrtc does not load; run with LD_LIBRARY_PATH=<folder of libnvrtc.so.13> (pip: nvidia-cuda-nvrtc)");
    }
    for sm in [90, 100] {
        let t = Instant::now();
        let cubin = forge_probe::runtime::gpu::compile(sm).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "sm_{sm}: not an ELF cubin");
        let text = String::from_utf8_lossy(&cubin);
        for k in ["fill", "layout", "dispatch", "check_recv", "combine", "reduce_check", "pair_copy"] {
            assert!(text.contains(k), "sm_{sm} cubin lacks kernel {k}");
        }
        eprintln!("sm_{sm}: {} bytes in {:?}", cubin.len(), t.elapsed());
    }
}

/// The probe's JSON on rank 0, asserted to be a clean pass with real bandwidth.
fn assert_gpu_verdict(o: &Output, ranks: usize) {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], 1);
    let rules: Vec<(&str, &str)> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["rule"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert!(rules.contains(&("dispatch-roundtrip", "pass")), "{rules:?}");
    assert!(rules.contains(&("expert-counts", "pass")), "{rules:?}");
    assert_eq!(v["facts"]["roundtrip"].as_array().unwrap().len(), ranks);
    let ratio = v["facts"]["bandwidth"]["dispatch_ratio"].as_f64().unwrap();
    assert!(ratio > 0.0, "bandwidth measured: {}", v["facts"]["bandwidth"]);
    assert!(rules.contains(&("pair-bandwidth", "pass")), "{rules:?}");
    let pairs = v["facts"]["bandwidth"]["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), ranks * (ranks - 1), "every ordered pair timed alone");
    assert!(pairs
        .iter()
        .all(|p| p["kernel_gbps"].as_f64().unwrap() > 0.0 && p["copy_engine_gbps"].as_f64().unwrap() > 0.0));
}

#[test]
#[cfg_attr(not(feature = "needs-gpus"), ignore = "needs 2 NVIDIA GPUs: run through the device tool")]
fn single_process_round_trip_on_two_gpus() {
    let o = bin()
        .args(["probe", "--run", "--format", "json", "--ranks-per-domain", "2"])
        .env_remove("RANK")
        .output()
        .unwrap();
    assert_gpu_verdict(&o, 2);
}

#[test]
#[cfg_attr(not(feature = "needs-gpus"), ignore = "needs 2 NVIDIA GPUs: run through the device tool")]
fn two_processes_round_trip_over_cuda_ipc() {
    let port = free_port();
    let outs = wait_all((0..2).map(|r| rank(r, 2, port, &["--format", "json"])).collect(), Duration::from_secs(120));
    assert_gpu_verdict(&outs[0], 2);
    assert_eq!(outs[1].status.code(), Some(0), "{}", stderr(&outs[1]));
    assert!(outs[1].stdout.is_empty(), "only rank 0 prints");
}
