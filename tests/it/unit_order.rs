//! Units first (`builder::unit_order`): with several nvcc threads a unit, the plan
//! names the jobs / threads longest units of this machine's last build of the revision (the
//! history in `<cache>/unit-times/<rev>.json`) as first; the nvcc hook sends every
//! other unit to a second sccache server at a lower priority. The fixture's
//! two-arch wheel is the same bytes with and without the order, and the build
//! says how many compiles each server ran. One thread: no order; no history, or a
//! hostile one (a warning): an order predicted from the source.
use crate::build_support::*;
use crate::support::*;

fn forge(lab: &Lab, args: &[&str], threads: Option<&str>) -> std::process::Output {
    let pins = lab.pins_with(&lab.rev, TWO_ARCH);
    let mut all = args.to_vec();
    all.extend(["--variant", "two", "--jobs", "2", "--pins", pins.to_str().unwrap()]);
    if args[0] == "build-wheel" {
        all.extend(["--no-cache", "--no-compiler-cache"]);
    }
    let mut c = lab.forge(&all);
    if let Some(t) = threads {
        c.env("DEEPEP_FORGE_NVCC_THREADS", t);
    }
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{:?}\n{}{}", args, stdout(&o), stderr(&o));
    let _ = std::fs::remove_dir_all(&lab.out);
    o
}

fn plan(lab: &Lab, threads: Option<&str>) -> serde_json::Value {
    json(&forge(lab, &["plan", "--format", "json"], threads))["plans"][0].clone()
}

fn build(lab: &Lab) -> serde_json::Value {
    json(&forge(lab, &["build-wheel", "--format", "json"], None))["results"][0].clone()
}

/// The fixture's nvcc units as the hook and the ninja logs name them: their outputs'
/// paths under the build root (setup.py's `build_temp/<extension>/<stem>.o`).
fn units(p: &serde_json::Value) -> (String, String) {
    let cwd = std::path::PathBuf::from(p["run"]["cwd"].as_str().unwrap());
    let tree = cwd.strip_prefix(forge_build::builder::canon::user_root()).expect("the tree is under the root");
    let tag = p["toolchain"]["python_tag"].as_str().expect("python tag");
    let temp = format!("build/temp.linux-x86_64-cpython-{}", tag.trim_start_matches("cp"));
    let unit =
        |ext: &str, stem: &str| tree.join(&temp).join(ext).join(format!("{stem}.o")).to_string_lossy().into_owned();
    (unit("hybrid_ep_cpp", "hybrid_ep"), unit("deep_ep_cpp", "layout"))
}

fn notes(r: &serde_json::Value) -> Vec<String> {
    r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_units_named_first_compile_on_the_first_server_and_the_wheel_is_the_same() {
    let lab = Lab::new();
    let bare = plan(&lab, None);
    assert!(bare["side_by_side"].is_object(), "the fixture builds side by side: {bare:#}");
    assert_eq!(
        bare["side_by_side"]["order"],
        serde_json::json!({"kind": "predicted", "from": "source"}),
        "no history: an order predicted from the source (tests/it/fleet_history.rs): {bare:#}"
    );
    let without = build(&lab);

    let (hybrid, layout) = units(&bare);
    let history = lab.cache.join("unit-times").join(format!("{}.json", lab.rev));
    std::fs::create_dir_all(history.parent().unwrap()).unwrap();
    let times = serde_json::json!({ hybrid.clone(): 9000, layout.clone(): 4000, "src/elsewhere.o": 10 });
    std::fs::write(&history, times.to_string()).unwrap();

    let ordered = plan(&lab, None);
    assert_eq!(
        ordered["side_by_side"]["first_units"],
        serde_json::json!([hybrid]),
        "--jobs 2 over two nvcc threads: the one longest unit first"
    );
    assert_eq!(ordered["cache_key"], bare["cache_key"], "the order is not keyed");
    let human = stdout(&forge(&lab, &["plan"], None));
    assert!(human.contains("unit order  1 unit(s) first, the longest in this machine's last build of the revision (jobs / nvcc threads): hybrid_ep.o; every other CUDA unit compiles at nice 10"), "{human}");
    let one_thread = plan(&lab, Some("1"));
    assert!(one_thread["side_by_side"].get("first_units").is_none(), "one thread a unit: no order");

    let with = build(&lab);
    assert_eq!(with["sha256"], without["sha256"], "the order changes no byte: {with:#}\n{without:#}");
    let said = notes(&with);
    assert!(
        said.iter().any(|n| n == "unit order: 3 compile request(s) on the first server, 1 on the later one (nice 10)"),
        "hybrid_ep.cu and the two C++ units (never ordered) on the first server, layout.cu on the later one: {said:#?}"
    );

    std::fs::write(&history, format!("{{\"../{hybrid}\": 9000, \"{layout}\": 1}}")).unwrap();
    let hostile = plan(&lab, None);
    assert_eq!(hostile["side_by_side"]["order"]["kind"], "predicted", "a hostile history is no history: {hostile:#}");
    assert!(hostile["warnings"].to_string().contains("is not a valid one: ignored"), "{hostile:#}");
}
