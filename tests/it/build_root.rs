//! Each user builds in a root of their own (`/tmp/deepep-forge-build-<uid>`,
//! or `DEEPEP_FORGE_BUILD_ROOT`), and the wheel records none of it: two roots,
//! two caches, one wheel, no root's path in any member's bytes (the .so files
//! included). A root that is not a private folder of this user's is refused
//! (exit 3) and nothing is written.
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::build_support::*;
use crate::support::*;

/// The plan (JSON) of variant `r` in `lab`, built under `root` (None: the default root).
fn plan(lab: &Lab, root: Option<&Path>) -> serde_json::Value {
    let pins = lab.pins_with(&lab.rev, VARIANT_R);
    let mut c = lab.forge(&["plan", "--variant", "r", "--format", "json", "--pins", pins.to_str().unwrap()]);
    c.env_remove("DEEPEP_FORGE_BUILD_ROOT");
    if let Some(r) = root {
        c.env("DEEPEP_FORGE_BUILD_ROOT", r);
    }
    json(&c.output().unwrap())["plans"][0].clone()
}

/// Build variant `r` in `lab` under `root`; returns the wheel.
fn build_under(lab: &Lab, root: &Path) -> PathBuf {
    let pins = lab.pins_with(&lab.rev, VARIANT_R);
    let o = lab
        .forge(&["build-wheel", "--variant", "r", "--no-compiler-cache", "--pins", pins.to_str().unwrap()])
        .env("DEEPEP_FORGE_BUILD_ROOT", root)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(!root.exists(), "the root goes with the build");
    let w = lab.out_wheels();
    assert_eq!(w.len(), 1, "{w:?}");
    w[0].clone()
}

/// The members of `wheel` (unpacked under `dir`) whose bytes hold `needle`.
fn members_holding(wheel: &Path, dir: &Path, needle: &str) -> Vec<String> {
    run(Command::new("unzip").arg("-q").arg("-o").arg(wheel).arg("-d").arg(dir));
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p).unwrap().windows(needle.len()).any(|w| w == needle.as_bytes()) {
                hits.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    hits
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn each_user_has_a_build_root_and_two_roots_give_the_same_wheel() {
    let (a, b) = (Lab::new(), Lab::new());
    // The default root is this user's; the plan, and so the cache key, is the same under any root.
    let me = forge_build::builder::canon::user_root();
    let uid = run(Command::new("id").arg("-u")).trim().to_string();
    assert_eq!(me, Path::new(&format!("/tmp/deepep-forge-build-{uid}")));
    let default = plan(&a, None);
    assert_eq!(default["run"]["cwd"], me.join("src").to_str().unwrap(), "{default}");
    let root_a = a.dir.path().join("ra");
    let root_b = b.dir.path().join("a-much-longer-build-root-for-b");
    let (pa, pb) = (plan(&a, Some(&root_a)), plan(&b, Some(&root_b)));
    assert_eq!(pa["run"]["cwd"], root_a.join("src").to_str().unwrap());
    assert_eq!(pa["cache_key"], default["cache_key"]);
    assert_eq!(pa["cache_key"], pb["cache_key"], "two roots, one key");

    let (wa, wb) = (build_under(&a, &root_a), build_under(&b, &root_b));
    let (sa, sb) = (sha256sum(&wa), sha256sum(&wb));
    eprintln!("wheel sha256 under {}: {sa}\nwheel sha256 under {}: {sb}", root_a.display(), root_b.display());
    let d = forge(a.dir.path(), &["diff", wa.to_str().unwrap(), wb.to_str().unwrap()]);
    assert_eq!(sa, sb, "two roots give two wheels:\n{}", stdout(&d));
    for root in [&root_a, &root_b] {
        let needle = root.to_str().unwrap();
        let hits = members_holding(&wa, &a.dir.path().join("unpacked"), needle);
        assert!(hits.is_empty(), "{needle} is recorded in {hits:?}");
    }
    let hits = members_holding(&wa, &a.dir.path().join("unpacked"), "deepep-forge-build-");
    assert!(hits.is_empty(), "a user's root is recorded in {hits:?}");
    // DeepEP's device link names NVSHMEM's folder in the build Python (`-L`), which
    // nvlink records in the fatbin: the hook spells it relative to the working folder.
    let hits = members_holding(&wa, &a.dir.path().join("unpacked"), "../python/lib/python3");
    assert!(hits.len() == 1 && hits[0].starts_with("deep_ep_cpp."), "NVSHMEM's -L, relative, in {hits:?}");
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_root_not_private_to_this_user_is_refused_and_nothing_is_written() {
    let lab = Lab::new();
    let pins = lab.pins_with(&lab.rev, VARIANT_R);
    let target = lab.dir.path().join("theirs");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), "x").unwrap();
    let link = lab.dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let open = lab.dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o775)).unwrap();
    std::fs::write(open.join("keep"), "x").unwrap();
    let mut cases = vec![
        (link.clone(), "is a symbolic link".to_string()),
        (open.clone(), "has mode 0775: group or others may write into it".to_string()),
    ];
    // Another user's folder: only root can make one here (the unit test of `foreign` covers the rule).
    if run(Command::new("id").arg("-u")).trim() == "0" {
        let other = lab.dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(other.join("keep"), "x").unwrap();
        std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
        cases.push((other, "is owned by uid 65534".to_string()));
    }
    for (root, why) in &cases {
        let o = lab
            .forge(&["build-wheel", "--variant", "r", "--pins", pins.to_str().unwrap()])
            .env("DEEPEP_FORGE_BUILD_ROOT", root)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert!(err.contains(&root.display().to_string()) && err.contains(why), "{err}");
        assert!(err.contains("DEEPEP_FORGE_BUILD_ROOT"), "the hint names the way out: {err}");
        assert_eq!(std::fs::read_to_string(root.join("keep")).unwrap(), "x", "{} untouched", root.display());
        assert!(!root.with_extension("lock").exists(), "no lock beside {}", root.display());
        assert!(lab.out_wheels().is_empty() && lab.cache_entries().is_empty(), "nothing written");
    }
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    // A lock beside the root that another user made (root only, as above): refused, never taken.
    if run(Command::new("id").arg("-u")).trim() == "0" {
        let fresh = lab.dir.path().join("fresh");
        let lock = fresh.with_extension("lock");
        std::fs::write(&lock, "").unwrap();
        std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o666)).unwrap();
        std::os::unix::fs::chown(&lock, Some(65534), Some(65534)).unwrap();
        let o = lab
            .forge(&["build-wheel", "--variant", "r", "--pins", pins.to_str().unwrap()])
            .env("DEEPEP_FORGE_BUILD_ROOT", &fresh)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert!(err.contains(&format!("{} is owned by uid 65534", lock.display())), "{err}");
        assert!(!fresh.exists() && lab.out_wheels().is_empty(), "nothing written");
    }
}

/// The README's demo build (`--pins tests/fixtures/demo-pins.toml --source
/// tests/fixtures/mini-deepep --variant demo`: two architectures, nvcc
/// `--threads 2`) under `root`, with its own cache and output folder in `dir`.
fn demo_under(dir: &Path, root: &Path) -> PathBuf {
    let tools = tools_venv().unwrap_or_else(|| missing("the tools venv"));
    let cuda = cuda_home().unwrap_or_else(|| missing("nvcc in the tools venv"));
    let out = dir.join("out");
    let o = bin()
        .args(["build-wheel", "--pins", "tests/fixtures/demo-pins.toml", "--source", "tests/fixtures/mini-deepep"])
        .args(["--variant", "demo", "--no-compiler-cache", "--python"])
        .arg(tools.join("bin/python"))
        .arg("--out")
        .arg(&out)
        .current_dir(crate::support::root())
        .env("DEEPEP_FORGE_CACHE_DIR", dir.join("cache"))
        .env("DEEPEP_FORGE_BUILD_ROOT", root)
        .env("CUDA_HOME", &cuda)
        .env("PATH", format!("{}:{}", tools.join("bin").display(), std::env::var("PATH").unwrap_or_default()))
        .env_remove("DEEPEP_FORGE_CACHE_URL")
        .env_remove("MAX_JOBS")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let w = files_with(&out, ".whl");
    assert_eq!(w.len(), 1, "{w:?}");
    w[0].clone()
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn the_readme_demo_gives_the_same_wheel_under_two_roots() {
    let t = tempfile::tempdir().unwrap();
    let (da, db) = (t.path().join("a"), t.path().join("b"));
    let (ra, rb) = (da.join("root"), db.join("a-longer-build-root"));
    let (wa, wb) = (demo_under(&da, &ra), demo_under(&db, &rb));
    let (sa, sb) = (sha256sum(&wa), sha256sum(&wb));
    eprintln!("demo wheel sha256 under {}: {sa}\ndemo wheel sha256 under {}: {sb}", ra.display(), rb.display());
    assert_eq!(sa, sb);
    for root in [&ra, &rb] {
        let hits = members_holding(&wa, &t.path().join("unpacked"), root.to_str().unwrap());
        assert!(hits.is_empty(), "{} is recorded in {hits:?}", root.display());
    }
}
