//! Extensions built side by side (`builder::side_by_side`): the fixture built
//! with its two extensions at once and one after another (`--serial-extensions`,
//! the plan's own `pip wheel`) gives the same bytes and the same cache key; the
//! build log shows both extensions started before either was linked; the plan
//! says so, and `--serial-extensions` turns it off.
mod build_support;
mod support;

use build_support::*;
use support::*;

const VARIANT: &str = r#"
[[variant]]
name = "r"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

/// build-wheel of variant `r` (wheel cache off, no compiler cache): the JSON result.
fn build(lab: &Lab, extra: &[&str]) -> serde_json::Value {
    let pins = lab.pins_with(&lab.rev, VARIANT);
    let mut args = vec![
        "build-wheel",
        "--variant",
        "r",
        "--no-cache",
        "--no-compiler-cache",
        "--format",
        "json",
        "--jobs",
        "2",
        "--pins",
        pins.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = lab.forge(&args).env("CUDA_HOME", &lab.cuda_home).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let _ = std::fs::remove_dir_all(&lab.out);
    json(&o)["results"][0].clone()
}

/// The byte offsets in the build log where each extension starts and where the first link runs.
fn starts_and_first_link(log: &str) -> (Vec<usize>, usize) {
    let starts = ["building 'deep_ep_cpp' extension", "building 'hybrid_ep_cpp' extension"]
        .iter()
        .map(|s| log.find(s).unwrap_or_else(|| panic!("no `{s}` in the build log:\n{log}")))
        .collect();
    let link = log.find(" -shared ").unwrap_or_else(|| panic!("no link command in the build log:\n{log}"));
    (starts, link)
}

#[test]
#[ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it"]
fn side_by_side_and_serial_builds_give_the_same_wheel() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, VARIANT);
    let plan = |extra: &[&str]| {
        let mut a = vec!["plan", "--variant", "r", "--format", "json", "--jobs", "4", "--pins", pins.to_str().unwrap()];
        a.extend_from_slice(extra);
        let o = lab.forge(&a).env("CUDA_HOME", &lab.cuda_home).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        json(&o)["plans"][0].clone()
    };
    let p = plan(&[]);
    assert_eq!(p["side_by_side"]["extensions"], serde_json::json!(["deep_ep_cpp", "hybrid_ep_cpp"]), "{p:#}");
    assert_eq!(p["side_by_side"]["jobs"], 4, "MAX_JOBS 4 shared between two extensions");
    let s = plan(&["--serial-extensions"]);
    assert!(s.get("side_by_side").is_none(), "{s:#}");
    assert_eq!(p["cache_key"], s["cache_key"], "not keyed");
    let o = lab.forge(&["plan", "--variant", "r", "--pins", pins.to_str().unwrap()]).output().unwrap();
    assert!(stdout(&o).contains("extensions  deep_ep_cpp, hybrid_ep_cpp at once"), "{}", stdout(&o));

    let side = build(&lab, &[]);
    let serial = build(&lab, &["--serial-extensions"]);
    assert_eq!(side["sha256"], serial["sha256"], "side by side {side:#}\nserial {serial:#}");
    assert_eq!(side["cache_key"], serial["cache_key"]);
    let read = |r: &serde_json::Value| std::fs::read_to_string(r["log"].as_str().expect("a log")).unwrap();
    let (starts, link) = starts_and_first_link(&read(&side));
    assert!(starts.iter().all(|s| *s < link), "side by side: both extensions start before the first link");
    let (starts, link) = starts_and_first_link(&read(&serial));
    assert!(starts[1] > link, "serial: hybrid_ep_cpp starts after deep_ep_cpp is linked");
}
