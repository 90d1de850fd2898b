//! `docker bake`, `docker build` and the Dockerfile rules of `lock check`,
//! through the built binary and the library, on real files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::*;
use forge_lock::lock::dockerfile;
use forge_model::pins::{Arch, Pins};

const PIN: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";

fn code(o: &std::process::Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// A temp dir holding the repository's pins.toml and bake file.
fn scratch() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("pins.toml"), d.path().join("pins.toml")).unwrap();
    std::fs::create_dir(d.path().join("docker")).unwrap();
    std::fs::copy(root().join("docker/docker-bake.json"), d.path().join("docker/docker-bake.json")).unwrap();
    std::fs::copy(root().join("docker/Dockerfile"), d.path().join("docker/Dockerfile")).unwrap();
    d
}

#[test]
fn committed_bake_file_is_up_to_date() {
    let o = forge(&root(), &["docker", "bake", "--check"]);
    assert_eq!(
        code(&o),
        0,
        "docker/docker-bake.json is stale: run `deepep-forge docker bake` (or `cargo xtask docker bake` in this repository) and commit it\n{}{}",
        stdout(&o),
        stderr(&o)
    );
}

#[test]
fn check_reports_a_stale_file_and_writes_nothing() {
    let d = scratch();
    let pins = d.path().join("pins.toml");
    let other = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";
    std::fs::write(&pins, std::fs::read_to_string(&pins).unwrap().replacen(PIN, other, 1)).unwrap();
    let before = std::fs::read(d.path().join("docker/docker-bake.json")).unwrap();
    let o = forge(d.path(), &["docker", "bake", "--check"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("stale"), "{out}");
    assert!(out.contains(&format!("target.h100.args.DEEPEP_REV: \"{PIN}\" -> \"{other}\"")), "{out}");
    assert!(out.contains("fix: run `deepep-forge docker bake"), "{out}");
    assert_eq!(std::fs::read(d.path().join("docker/docker-bake.json")).unwrap(), before, "--check wrote the file");
    let o = forge(d.path(), &["docker", "bake", "--check", "--format", "json"]);
    assert_eq!(code(&o), 1);
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!((j["schema"].as_u64(), j["status"].as_str()), (Some(1), Some("stale")));
    let changes: Vec<&str> = j["changes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    for t in ["h100", "h100-multinode", "b200-multinode"] {
        assert!(
            changes.contains(&format!("target.{t}.args.DEEPEP_REV: \"{PIN}\" -> \"{other}\"").as_str()),
            "{changes:#?}"
        );
    }
    assert!(!changes.iter().any(|c| c.contains("gb200")), "aarch64 targets did not move: {changes:#?}");
    let o = forge(d.path(), &["docker", "bake", "--check", "--format", "github"]);
    assert!(
        stdout(&o).starts_with("::error file=docker/docker-bake.json,title=deepep-forge docker-bake::"),
        "{}",
        stdout(&o)
    );
    assert_eq!(std::fs::read(d.path().join("docker/docker-bake.json")).unwrap(), before, "--check wrote the file");

    // Without --check it regenerates; then --check passes.
    let o = forge(d.path(), &["docker", "bake"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.path().join("docker/docker-bake.json")).unwrap()).unwrap();
    assert_eq!(j["target"]["h100"]["args"]["DEEPEP_REV"], other);
    assert_eq!(j["target"]["gb200-nvl72"]["args"]["DEEPEP_REV"], PIN, "only x86_64 moved");
    assert_eq!(code(&forge(d.path(), &["docker", "bake", "--check"])), 0);
}

#[test]
fn bad_pins_exit_2_and_write_nothing() {
    let d = scratch();
    let pins = d.path().join("pins.toml");
    std::fs::write(
        &pins,
        std::fs::read_to_string(&pins).unwrap().replacen("cuda_arch_list = \"9.0\"", "cuda_arch_list = \"sm_90\"", 1),
    )
    .unwrap();
    std::fs::remove_file(d.path().join("docker/docker-bake.json")).unwrap();
    std::fs::remove_file(d.path().join("docker/Dockerfile")).unwrap();
    let o = forge(d.path(), &["docker", "bake"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("pins.toml:"), "{}", stderr(&o));
    assert!(std::fs::read_dir(d.path().join("docker")).unwrap().next().is_none(), "something was written");
    let o = forge(d.path(), &["docker", "bake", "--check"]);
    assert_eq!(code(&o), 2);
}

#[test]
fn build_without_docker_exits_3() {
    let empty = tempfile::tempdir().unwrap();
    let o = bin()
        .args(["docker", "build", "--variant", "h100"])
        .current_dir(root())
        .env("PATH", empty.path())
        .output()
        .unwrap();
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("docker not found on PATH"), "{}", stderr(&o));
    assert!(stderr(&o).contains("hint:"), "{}", stderr(&o));
}

#[test]
fn build_checks_variants_and_staleness_first() {
    let o = forge(&root(), &["docker", "build", "--variant", "h300"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("unknown variant `h300`"), "{}", stderr(&o));
    let d = scratch();
    let f = d.path().join("docker/docker-bake.json");
    std::fs::write(&f, std::fs::read_to_string(&f).unwrap().replace("\"9.0\"", "\"8.0\"")).unwrap();
    let o = forge(d.path(), &["docker", "build"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("stale"), "{}", stderr(&o));
}

/// Where the real docker client is installed without the buildx plugin (as on
/// the development machine), `docker build` says so and exits 3.
#[test]
#[cfg_attr(
    not(feature = "needs-docker-client"),
    ignore = "needs a docker client without buildx: bash .ci/run runs it there"
)]
fn build_with_docker_but_no_buildx_exits_3() {
    let has_docker = std::process::Command::new("docker").arg("--version").output().is_ok_and(|o| o.status.success());
    let has_buildx =
        std::process::Command::new("docker").args(["buildx", "version"]).output().is_ok_and(|o| o.status.success());
    if !has_docker || has_buildx {
        panic!("not run: needs a docker client without buildx (docker: {has_docker}, buildx: {has_buildx})");
    }
    let o = forge(&root(), &["docker", "build", "--variant", "h100"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("docker buildx is not available"), "{}", stderr(&o));
}

// ---- podman / buildah: bad input before anything is pulled or built ------------

/// `docker build` in `dir` with PATH holding nothing (no builder, no debootstrap).
fn build_without_tools(dir: &Path, args: &[&str]) -> std::process::Output {
    let empty = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let o = bin()
        .args(["docker", "build"])
        .args(args)
        .arg("--cache-dir")
        .arg(cache.path())
        .current_dir(dir)
        .env("PATH", empty.path())
        .output()
        .unwrap();
    assert!(std::fs::read_dir(cache.path()).unwrap().next().is_none(), "the cache was written: {}", stderr(&o));
    o
}

#[test]
fn a_missing_daemonless_builder_exits_3_naming_what_to_install() {
    let d = scratch();
    for (builder, says) in [("podman", "apt-get install podman"), ("buildah", "apt-get install buildah")] {
        let o = build_without_tools(d.path(), &["--variant", "h100", "--builder", builder]);
        assert_eq!(code(&o), 3, "{}", stderr(&o));
        assert!(stderr(&o).contains(&format!("{builder} not found on PATH")), "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
    }
}

#[test]
fn a_flag_that_contradicts_the_bake_file_exits_2_before_anything_runs() {
    let d = scratch();
    for (extra, says) in [
        (&["--build-arg", "PROBE_EP=16"][..], "PROBE_EP=16: the bake file sets it from pins.toml"),
        (&["--build-arg=NO_SUCH_ARG=1"][..], "docker/Dockerfile declares no such ARG"),
        (&["--platform=linux/arm64"][..], "not a flag `docker build` passes to podman/buildah"),
    ] {
        let mut args = vec!["--variant", "h100", "--builder", "podman", "--"];
        args.extend(extra);
        let o = build_without_tools(d.path(), &args);
        assert_eq!(code(&o), 2, "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{extra:?}: {}", stderr(&o));
    }
    let o = build_without_tools(d.path(), &["--variant", "h100", "--index", "file:///srv/wheels/h100/simple"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("not an http(s) URL"), "{}", stderr(&o));
    let o = build_without_tools(d.path(), &["--variant", "h100", "--source", "."]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--builder podman|buildah"), "{}", stderr(&o));
    let o = build_without_tools(d.path(), &["--variant", "h100", "--builder", "podman", "--source", "no-such-clone"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--source no-such-clone: no such folder"), "{}", stderr(&o));
}

#[test]
fn a_pins_file_outside_the_build_context_exits_2_before_anything_runs() {
    let d = scratch();
    let ctx = d.path().join("ctx");
    std::fs::create_dir_all(ctx.join("docker")).unwrap();
    std::fs::copy(d.path().join("docker/Dockerfile"), ctx.join("docker/Dockerfile")).unwrap();
    assert_eq!(code(&forge(&ctx, &["docker", "bake", "--pins", "../pins.toml"])), 0);
    let o = build_without_tools(&ctx, &["--pins", "../pins.toml", "--variant", "h100", "--builder", "podman"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("the pins file ../pins.toml is outside the build context"), "{}", stderr(&o));
}

/// The aarch64 variants on an x86_64 host: exit 3 naming qemu and binfmt
/// unless qemu-aarch64 is registered (then the build goes on to the next
/// check: here the missing podman).
#[test]
fn a_foreign_platform_without_qemu_binfmt_exits_3() {
    let d = scratch();
    let o = build_without_tools(d.path(), &["--variant", "gb200-nvl72", "--builder", "podman"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let registered = std::env::consts::ARCH == "aarch64"
        || std::fs::read_to_string("/proc/sys/fs/binfmt_misc/qemu-aarch64").is_ok_and(|s| s.starts_with("enabled"));
    if registered {
        assert!(stderr(&o).contains("podman not found"), "{}", stderr(&o));
    } else {
        assert!(stderr(&o).contains("linux/arm64, but this host is x86_64"), "{}", stderr(&o));
        assert!(stderr(&o).contains("apt-get install qemu-user-static binfmt-support"), "{}", stderr(&o));
    }
}

/// A suite debootstrap does not know, and one the mirror does not have: exit
/// 2 before debootstrap runs (the second asks deb.debian.org for its Release file).
#[test]
#[cfg_attr(
    not(feature = "needs-podman"),
    ignore = "needs system package podman (and debootstrap, a Debian mirror): bash .ci/run runs it there"
)]
fn a_base_suite_that_does_not_exist_exits_2() {
    if forge_os::process::lookup::which("podman").is_none() || forge_os::process::lookup::which("debootstrap").is_none()
    {
        missing("podman and debootstrap");
    }
    let d = scratch();
    let cache = tempfile::tempdir().unwrap();
    for (suite, says) in [
        ("nosuchsuite", "debootstrap knows no such suite"),
        ("lucid", "the suite does not exist at the mirror"),
        ("-rf", "not a Debian suite name"),
    ] {
        let o = forge(
            d.path(),
            &[
                "docker",
                "build",
                "--variant",
                "h100",
                "--builder",
                "podman",
                &format!("--base-suite={suite}"),
                "--cache-dir",
                cache.path().to_str().unwrap(),
            ],
        );
        assert_eq!(code(&o), 2, "{suite}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{suite}: {}", stderr(&o));
    }
    assert!(std::fs::read_dir(cache.path()).unwrap().next().is_none(), "something was made");
}

/// The mirror is asked only for a base that must be made: planned against a
/// mirror (a local HTTP server with a Release file) the Release date is read;
/// once the rootfs is cached, planning needs no mirror (the server is gone, as
/// on an air-gapped runner); with nothing cached, the unreachable mirror is exit 3.
#[test]
fn a_cached_base_is_planned_without_asking_the_mirror() {
    use forge_build::docker::base;
    use forge_os::process::engine::Builder;
    use forge_store::cache::Cache;
    let www = tempfile::tempdir().unwrap();
    let dists = www.path().join("debian/dists/bookworm");
    std::fs::create_dir_all(&dists).unwrap();
    std::fs::write(dists.join("Release"), "Origin: Debian\nDate: Sat, 11 Jul 2026 10:16:37 UTC\n").unwrap();
    let server = HttpServer::start(Path::new("python3"), www.path());
    let b = base::Base { suite: "bookworm".into(), mirror: format!("http://127.0.0.1:{}/debian", server.port) };
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (cache, empty) = (Cache::at(d1.path()), Cache::at(d2.path()));
    // `false` as the builder: no image is in its store, so only the rootfs tar can be cached.
    let no_store = Path::new("/bin/false");
    let p = base::plan(Builder::Podman, no_store, &cache, &b, base::Arch::Amd64).unwrap();
    assert_eq!(p.release.as_ref().map(|r| r.date.as_str()), Some("Sat, 11 Jul 2026 10:16:37 UTC"));
    let tar = p.rootfs_tar(&cache);
    std::fs::create_dir_all(tar.parent().unwrap()).unwrap();
    std::fs::write(&tar, b"a rootfs").unwrap();
    drop(server);
    let cached = base::plan(Builder::Podman, no_store, &cache, &b, base::Arch::Amd64).unwrap();
    assert!(cached.release.is_none(), "the mirror was asked for a cached base");
    assert_eq!(cached.cuda_ref, p.cuda_ref);
    let e = base::plan(Builder::Podman, no_store, &empty, &b, base::Arch::Amd64).unwrap_err();
    assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Environment, "{e:#}");
    assert!(format!("{e:#}").contains("cannot reach the Debian mirror"), "{e:#}");
}

// ---- Dockerfile rules (lock check) --------------------------------------------

fn fixtures() -> PathBuf {
    root().join("tests/fixtures/dockerfiles")
}

/// The Dockerfiles `lock check` finds in `project` (opened as the command opens it).
fn discover(project: &Path, extra: &[PathBuf]) -> anyhow::Result<Vec<dockerfile::Dockerfile>> {
    dockerfile::discover(&forge_os::fs::Tree::open(project, "project")?, project, extra)
}

/// One Dockerfile as `--dockerfile FILE` reads it.
fn given(file: &Path) -> dockerfile::Dockerfile {
    let text = std::fs::read_to_string(file).unwrap();
    dockerfile::Dockerfile { path: file.to_path_buf(), rel: None, text }
}

fn pins_and_revs() -> (Pins, BTreeMap<Arch, String>) {
    let p = Pins::load(&root().join("pins.toml")).unwrap();
    let revs = p.pins.iter().map(|(a, pin)| (*a, pin.rev.clone())).collect();
    (p, revs)
}

#[test]
fn discover_finds_root_and_docker_dockerfiles_then_extras() {
    let project = fixtures().join("project");
    let extra = fixtures().join("revs.Dockerfile");
    let found = discover(&project, &[extra.clone(), project.join("Dockerfile")]).unwrap();
    let rel: Vec<String> =
        found.iter().map(|d| d.path.strip_prefix(fixtures()).unwrap().display().to_string()).collect();
    assert_eq!(rel, ["project/Dockerfile", "project/docker/hopper/Dockerfile.multinode", "revs.Dockerfile"]);
    let e = discover(&project, &[fixtures().join("nope/Dockerfile")]).unwrap_err();
    assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Usage);
    assert!(format!("{e:#}").contains("nope/Dockerfile"), "{e:#}");
    let e = discover(&fixtures().join("no-such-project"), &[]).unwrap_err();
    assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Usage);
}

#[test]
fn nemo_rl_shaped_image_is_judged_against_the_variants() {
    let (p, revs) = pins_and_revs();
    let project = fixtures().join("project");
    let files = discover(&project, &[]).unwrap();
    let f = dockerfile::check(&files, Some(&p), &revs);
    let got: Vec<(String, String, usize)> = f
        .iter()
        .map(|f| (f.file.file_name().unwrap().to_string_lossy().into_owned(), f.rule.to_string(), f.line.unwrap()))
        .collect();
    // The fat "9.0 10.0" multinode build: one finding, at the ARG that holds the value;
    // the Hopper multinode image matches h100-multinode and is clean.
    assert_eq!(
        got,
        [("Dockerfile".to_string(), "dockerfile-build-undeclared".to_string(), 12)],
        "{}",
        forge_model::findings::render_human(&f)
    );
    let m = &f[0].message;
    assert!(m.contains("TORCH_CUDA_ARCH_LIST (ENV, line 16, from ARG DEEPEP_CUDA_ARCH_LIST at line 12)"), "{m}");
    assert!(m.contains("TORCH_CUDA_ARCH_LIST=\"9.0 10.0\", HYBRID_EP_MULTINODE=\"1\""), "{m}");
    // The fix never narrows the build: one [[variant]] block per platform (the stage names none:
    // every pinned architecture), carrying the Dockerfile's arch list, multinode flag, transport, rdma-core home.
    let fix = f[0].fix.clone().unwrap().to_string();
    let blocks = paste_blocks(&fix);
    assert_eq!(blocks.len(), 2, "{fix}");
    for (block, arch) in blocks.iter().zip(["x86_64", "aarch64"]) {
        for line in [
            format!("arch = \"{arch}\""),
            "cuda_arch_list = \"9.0 10.0\"".into(),
            "multinode = true".into(),
            "transport = \"doca\"".into(),
            "rdma_core_home = \"/opt/rdma-core/build\"".into(),
        ] {
            assert!(block.lines().any(|l| l == line), "{line} in {block}");
        }
        assert!(!block.contains("topology"), "a Dockerfile determines no topology: {block}");
    }
    // Pasting the blocks into pins.toml makes the same image clean.
    let text = std::fs::read_to_string(root().join("pins.toml")).unwrap() + "\n" + &blocks.join("\n");
    let p2 = Pins::parse(&text, Path::new("pins.toml")).unwrap();
    assert!(dockerfile::check(&files, Some(&p2), &revs).is_empty());

    // Declare NeMo-RL's combination as a variant with a fat topology and the same image is clean.
    let text = std::fs::read_to_string(root().join("pins.toml")).unwrap()
        + "\n[[variant]]\nname = \"nemo-rl\"\narch = \"x86_64\"\ncuda_arch_list = \"10.0;9.0\"\nmultinode = true\nrdma_core_home = \"/opt/rdma-core/build\"\ntopology = { gpu = [\"h100\", \"b200\"], nodes = 2, gpus_per_node = 8, ep = 16, ranks_per_domain = 8, mnnvl = false }\n";
    let p2 = Pins::parse(&text, Path::new("pins.toml")).unwrap();
    assert!(dockerfile::check(&files, Some(&p2), &revs).is_empty());
}

/// The `[[variant]]` tables of a fix, as a user would paste them.
fn paste_blocks(fix: &str) -> Vec<String> {
    let body = fix.split_once("add:\n").map(|(_, b)| b).unwrap_or("");
    body.split("[[variant]]").skip(1).map(|b| format!("[[variant]]{}", b.trim_end())).map(|b| b + "\n").collect()
}

#[test]
fn a_platform_stage_gets_one_block_and_arch_lists_compare_as_sets() {
    let (p, revs) = pins_and_revs();
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("Dockerfile");
    // A fat single-node build for amd64 only.
    std::fs::write(
        &file,
        "FROM --platform=linux/amd64 ubuntu:24.04 AS wheel\nENV TORCH_CUDA_ARCH_LIST=\"10.0;9.0\"\nENV HYBRID_EP_MULTINODE=0\nRUN uv sync --locked\n",
    )
    .unwrap();
    let f = dockerfile::check(&[given(&file)], Some(&p), &revs);
    assert_eq!(f.len(), 1, "{}", forge_model::findings::render_human(&f));
    assert_eq!((f[0].rule.as_str(), f[0].arch), ("dockerfile-build-undeclared", Some(Arch::X86_64)));
    let blocks = paste_blocks(&f[0].fix.as_ref().unwrap().to_string());
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    assert!(
        blocks[0].contains("cuda_arch_list = \"10.0 9.0\"") && blocks[0].contains("multinode = false"),
        "{}",
        blocks[0]
    );
    assert!(!blocks[0].contains("transport"), "single-node: {}", blocks[0]);
    let text = std::fs::read_to_string(root().join("pins.toml")).unwrap() + "\n" + &blocks[0];
    let p2 = Pins::parse(&text, Path::new("pins.toml")).unwrap();
    assert!(dockerfile::check(&[given(&file)], Some(&p2), &revs).is_empty());
    // The shipped h100-multinode build written with another separator and spacing: no finding.
    std::fs::write(
        &file,
        "FROM ubuntu:24.04\nARG LIST=\" 9.0; \"\nENV TORCH_CUDA_ARCH_LIST=${LIST} HYBRID_EP_MULTINODE=1 RDMA_CORE_HOME=/usr\n",
    )
    .unwrap();
    let f = dockerfile::check(&[given(&file)], Some(&p), &revs);
    assert!(f.is_empty(), "{}", forge_model::findings::render_human(&f));
}

#[test]
fn revisions_are_full_shas_matching_the_pins() {
    let (p, revs) = pins_and_revs();
    let f = dockerfile::check(&[given(&fixtures().join("revs.Dockerfile"))], Some(&p), &revs);
    let got: Vec<(&str, usize)> = f.iter().map(|f| (f.rule.as_str(), f.line.unwrap())).collect();
    assert_eq!(
        got,
        [("dockerfile-rev", 4), ("dockerfile-rev", 6), ("dockerfile-rev", 8), ("dockerfile-rdma-core-ref", 10)],
        "{}",
        forge_model::findings::render_human(&f)
    );
    assert!(f[0].message.contains("full sha required"));
    assert!(f[1].message.contains("branch or tag"));
    assert_eq!(f[2].found.as_deref(), Some("29d31c095796f3c8ece47ee9cdcc167051bbeed9"));
    assert!(f.iter().all(|f| f.fix.is_some()));
}

#[test]
fn the_shipped_dockerfile_passes_its_own_rules() {
    let (p, revs) = pins_and_revs();
    let files = discover(&root(), &[]).unwrap();
    assert!(files.iter().any(|d| d.path == root().join("docker/Dockerfile")), "{files:?}");
    let f = dockerfile::check(&files, Some(&p), &revs);
    assert!(f.is_empty(), "{}", forge_model::findings::render_human(&f));
}

#[test]
fn bake_probes_each_gpu_of_a_fat_topology_and_only_the_pins_without_one() {
    let text = std::fs::read_to_string(root().join("pins.toml")).unwrap()
        + "\n[[variant]]\nname = \"fat\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0 10.0\"\nmultinode = true\nrdma_core_home = \"/usr\"\ntopology = { gpu = [\"h100\", \"b200\"], nodes = 2, gpus_per_node = 8, ep = 16, ranks_per_domain = 8, mnnvl = false }\n"
        + "\n[[variant]]\nname = \"bare\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\n";
    let p = Pins::parse(&text, Path::new("pins.toml")).unwrap();
    let j: serde_json::Value = serde_json::from_str(&forge_build::docker::bake_json(&p, "pins.toml").unwrap()).unwrap();
    let args = |t: &str, k: &str| j["target"][t]["args"][k].as_str().unwrap().to_string();
    assert_eq!(args("fat", "PROBE_GPU"), "h100 b200");
    assert_eq!((args("fat", "PROBE_EP"), args("fat", "TORCH_CUDA_ARCH_LIST")), ("16".into(), "9.0 10.0".into()));
    for k in ["PROBE_GPU", "PROBE_EP", "PROBE_NODES", "PROBE_GPUS_PER_NODE", "PROBE_RANKS_PER_DOMAIN", "PROBE_MNNVL"] {
        assert_eq!(args("bare", k), "", "{k}: a variant without topology is probed against pins.toml only");
    }
    // The image's last step loops over PROBE_GPU and drops the topology flags when PROBE_EP is empty.
    let dockerfile = std::fs::read_to_string(root().join("docker/Dockerfile")).unwrap();
    assert!(dockerfile.contains("for gpu in $PROBE_GPU; do") && dockerfile.contains("if [ -z \"$PROBE_EP\" ]; then"));
}
