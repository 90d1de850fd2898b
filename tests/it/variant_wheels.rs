//! `publish --variant-wheels` end to end with real parts: the mini-deepep
//! fixture built by real nvcc for three variants (h100 = sm_90, b200 = sm_100,
//! h100-mn = sm_90 multinode over DOCA), one index of PEP 825 variant wheels
//! served by `python -m http.server` on 127.0.0.1, and real uv 0.13.9 with
//! `--preview-features wheel-variants` (its NVIDIA provider forced by
//! `NV_VARIANT_PROVIDER_FORCE_SM_ARCH`): what uv installs, what uv.lock
//! records, what pip and uv without the preview get, and `lock check` on the
//! lock. Then the bad inputs: a variant label pins.toml does not describe in
//! uv.lock, a wheel whose `variant.json` disagrees with pins.toml.
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::build_support::*;
use crate::support::*;

const VARIANTS: &str = r#"
[[variant]]
name = "h100"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }

[[variant]]
name = "b200"
arch = "x86_64"
cuda_arch_list = "10.0"
multinode = false
topology = { gpu = "b200", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }

[[variant]]
name = "h100-mn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = true
transport = "doca"
rdma_core_home = "/usr"
topology = { gpu = "h100", nodes = 2, gpus_per_node = 8, ep = 16, ranks_per_domain = 8, mnnvl = false }
"#;

/// uv's NVIDIA provider supports no property without a CUDA driver version (none on a
/// machine without a GPU): the tests force one as they force the GPU.
const DRIVER: (&str, &str) = ("NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION", "13.0");

struct Scene {
    lab: Lab,
    pins: PathBuf,
    key: PathBuf,
    public: String,
    idx: PathBuf,
}

impl Scene {
    /// The lab's repository with the mini-nccl submodule (DOCA builds it), pins.toml for it.
    fn new() -> Scene {
        if !Path::new("/usr/include/infiniband/verbs.h").exists() {
            support::missing("the rdma-core headers (libibverbs-dev)");
        }
        let lab = Lab::new();
        let uv = Command::new(lab.tools.join("bin/uv")).arg("--version").output().unwrap();
        if !stdout(&uv).starts_with("uv 0.13.9") {
            support::missing("uv 0.13.9 in the tools venv (its wheel-variants preview)");
        }
        let nccl = lab.dir.path().join("nccl");
        git_repo_from_fixture("mini-nccl", &nccl);
        git(&lab.repo, &["submodule", "add", "-q", nccl.to_str().unwrap(), "third-party/nccl"]);
        git(&lab.repo, &["commit", "-qm", "nccl submodule"]);
        let rev = git(&lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
        let pins = lab.pins_with(&rev, VARIANTS);
        let key = lab.dir.path().join("publish.key");
        let o = forge(lab.dir.path(), &["cache", "keygen", "--name", "variants-1", "--out", key.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let public = stdout(&o).lines().next().unwrap_or_default().trim().to_string();
        let idx = lab.dir.path().join("idx");
        Scene { lab, pins, key, public, idx }
    }

    fn publish(&self, extra: &[&str]) -> Output {
        let mut args = vec![
            "publish",
            "--variant-wheels",
            "--pins",
            self.pins.to_str().unwrap(),
            "--signing-key",
            self.key.to_str().unwrap(),
            "--out",
            self.idx.to_str().unwrap(),
            "--source",
            self.lab.repo.to_str().unwrap(),
        ];
        if !extra.contains(&"--variant") {
            args.push("--all");
        }
        args.extend_from_slice(extra);
        self.lab.forge(&args).output().unwrap()
    }

    /// `publish --check` of the index against pins.toml and the signing key.
    fn check(&self) -> Output {
        self.lab
            .forge(&[
                "publish",
                "--check",
                self.idx.to_str().unwrap(),
                "--pins",
                self.pins.to_str().unwrap(),
                "--trusted-key",
                &self.public,
            ])
            .output()
            .unwrap()
    }

    fn uv(&self, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(self.lab.tools.join("bin/uv"));
        c.args(args)
            .current_dir(cwd)
            .env("UV_CACHE_DIR", self.lab.dir.path().join("uv-cache"))
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env_remove("UV_INDEX_URL")
            .env_remove("UV_EXTRA_INDEX_URL")
            .env_remove("VIRTUAL_ENV")
            .env_remove("NV_VARIANT_PROVIDER_FORCE_SM_ARCH")
            .env_remove("NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// A fresh venv; `uv pip install --no-deps deep-ep` from `url` with `args` and `env`;
    /// returns uv's stderr and the installed build's variant (its provenance).
    fn install(&self, name: &str, url: &str, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
        let venv = self.lab.dir.path().join(name);
        let py = self.lab.tools.join("bin/python");
        ok(&self.uv(
            self.lab.dir.path(),
            &["venv", "-q", "--python", py.to_str().unwrap(), venv.to_str().unwrap()],
            &[],
        ));
        let vpy = venv.join("bin/python");
        let mut a = vec!["pip", "install", "--no-deps", "--python", vpy.to_str().unwrap(), "--index-url", url];
        a.extend_from_slice(args);
        a.push("deep-ep");
        let o = self.uv(self.lab.dir.path(), &a, env);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        (stderr(&o), installed_variant(&site_packages(&venv)))
    }
}

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
    stdout(o)
}

/// The variant the installed deep_ep's provenance names, and `+variant.json` when the
/// installed dist-info has one.
fn installed_variant(site: &Path) -> String {
    let di = std::fs::read_dir(site)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with("deep_ep-")
                && p.extension().is_some_and(|e| e == "dist-info")
        })
        .expect("deep_ep is installed");
    let prov: serde_json::Value =
        serde_json::from_slice(&std::fs::read(di.join("deepep-forge-provenance.json")).unwrap()).unwrap();
    let v = prov["variant"]["name"].as_str().unwrap().to_string();
    if di.join("variant.json").exists() {
        format!("{v}+variant.json")
    } else {
        v
    }
}

fn index_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// The uv proof of issue 33 §1, and what uv 0.13.9 does not do (yet).
#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools: nvcc, uv 0.13.9) and libibverbs-dev (.ci/setup-system): bash .ci/run runs it"
)]
fn uv_installs_the_variant_wheel_of_the_gpu_and_installers_without_variants_get_the_default() {
    let s = Scene::new();
    let first = ok(&s.publish(&["--default-variant", "h100", "--format", "json"]));
    let report: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert!(report["files_written"].as_u64().unwrap() > 0, "{first}");
    let files_dir = s.idx.join("variants/simple/deep-ep");
    let files = index_files(&files_dir);
    let wheels: Vec<&String> = files.iter().filter(|f| f.ends_with(".whl")).collect();
    assert_eq!(wheels.len(), 4, "three variant wheels and the default: {files:?}");
    for label in ["h100", "b200", "h100_mn"] {
        assert!(
            wheels.iter().any(|w| w.ends_with(&format!("-manylinux_2_34_x86_64-{label}.whl"))),
            "{label}: {files:?}"
        );
    }
    assert!(wheels.iter().any(|w| w.ends_with("-manylinux_2_34_x86_64.whl")), "the default: {files:?}");
    let vj = files.iter().find(|f| f.ends_with("-variants.json")).expect("variants.json").clone();
    let vjson: serde_json::Value = serde_json::from_slice(&std::fs::read(files_dir.join(&vj)).unwrap()).unwrap();
    assert_eq!(vjson["variants"]["h100_mn"]["deepep_forge"]["build"][0], "multinode");
    assert_eq!(vjson["variants"]["h100_mn"]["deepep_forge"]["transport"][0], "doca");
    assert_eq!(vjson["variants"]["b200"]["nvidia"]["sm_arch"][0], "100_real");
    for w in &wheels {
        assert!(files.contains(&format!("{w}.intoto.json")) && files.contains(&format!("{w}.metadata")), "{w}");
    }
    // Publishing again changes no byte: the variant wheels come out bit-identical.
    let again: serde_json::Value =
        serde_json::from_str(&ok(&s.publish(&["--default-variant", "h100", "--format", "json"]))).unwrap();
    assert_eq!(again["files_written"], 0, "{again}");
    // publish --check verifies the signed manifest, every wheel and the variants.json.
    let check = s.check();
    println!("publish --check: {}\n{}", stdout(&check), stderr(&check));
    assert_eq!(check.status.code(), Some(0), "{}\n{}", stdout(&check), stderr(&check));

    let server = HttpServer::start(&s.lab.tools.join("bin/python"), &s.idx);
    let url = format!("http://127.0.0.1:{}/variants/simple/", server.port);
    let preview = ["--preview-features", "wheel-variants"];
    let (out90, v90) = s.install("v90", &url, &preview, &[("NV_VARIANT_PROVIDER_FORCE_SM_ARCH", "9.0"), DRIVER]);
    println!("uv pip install, forced sm_arch 9.0:\n{out90}");
    assert_eq!(v90, "h100+variant.json", "{out90}");
    let (out100, v100) = s.install("v100", &url, &preview, &[("NV_VARIANT_PROVIDER_FORCE_SM_ARCH", "10.0"), DRIVER]);
    println!("uv pip install, forced sm_arch 10.0:\n{out100}");
    assert_eq!(v100, "b200+variant.json", "{out100}");
    // No GPU the provider knows (sm 8.0): no variant fits, uv takes the default wheel.
    let (_, v80) = s.install("v80", &url, &preview, &[("NV_VARIANT_PROVIDER_FORCE_SM_ARCH", "8.0"), DRIVER]);
    assert_eq!(v80, "h100", "the default wheel (h100's build, no variant.json)");
    // Without the preview: the default wheel, plain.
    let (plain, vplain) = s.install("vplain", &url, &[], &[("NV_VARIANT_PROVIDER_FORCE_SM_ARCH", "10.0"), DRIVER]);
    assert_eq!(vplain, "h100", "{plain}");
    // pip knows no variant labels: it skips them and gets the default.
    let target = s.lab.dir.path().join("pip-target");
    let pip = Command::new(s.lab.tools.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--index-url",
            &url,
            "--target",
        ])
        .arg(&target)
        .arg("deep-ep")
        .output()
        .unwrap();
    assert_eq!(pip.status.code(), Some(0), "{}", stderr(&pip));
    assert_eq!(installed_variant(&target), "h100", "{}", stdout(&pip));
    // The multinode build: uv 0.13.9 orders static properties as variants.json lists them
    // (singlenode first) and has no setting to choose one; its label reaches it by URL.
    let mn = wheels.iter().find(|w| w.ends_with("-h100_mn.whl")).unwrap();
    let mn_url = format!("http://127.0.0.1:{}/variants/simple/deep-ep/{}", server.port, mn.replace('+', "%2B"));
    let venv = s.lab.dir.path().join("vmn");
    ok(&s.uv(
        s.lab.dir.path(),
        &["venv", "-q", "--python", s.lab.tools.join("bin/python").to_str().unwrap(), venv.to_str().unwrap()],
        &[],
    ));
    let o = s.uv(
        s.lab.dir.path(),
        &[
            "pip",
            "install",
            "--no-deps",
            "--preview-features",
            "wheel-variants",
            "--python",
            venv.join("bin/python").to_str().unwrap(),
            &format!("deep-ep @ {mn_url}"),
        ],
        &[("NV_VARIANT_PROVIDER_FORCE_SM_ARCH", "9.0"), DRIVER],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(installed_variant(&site_packages(&venv)), "h100-mn+variant.json");

    // A project: uv lock (universal) with the preview records the default wheel only.
    let consumer = s.lab.dir.path().join("consumer");
    std::fs::create_dir_all(&consumer).unwrap();
    std::fs::write(
        consumer.join("pyproject.toml"),
        format!(
            "[project]\nname = \"consumer\"\nversion = \"0.1.0\"\nrequires-python = \">=3.10\"\ndependencies = [\"deep-ep\"]\n\n[tool.uv]\nenvironments = [\"sys_platform == 'linux' and platform_machine == 'x86_64'\"]\n\n[tool.uv.sources]\ndeep-ep = {{ index = \"deepep\" }}\n\n[[tool.uv.index]]\nname = \"deepep\"\nurl = \"http://127.0.0.1:{}/variants/simple\"\nexplicit = true\n",
            server.port
        ),
    )
    .unwrap();
    let lock = s.uv(
        &consumer,
        &["lock", "--preview-features", "wheel-variants", "--python", s.lab.tools.join("bin/python").to_str().unwrap()],
        &[("NV_VARIANT_PROVIDER_FORCE_SM_ARCH", "9.0"), DRIVER],
    );
    println!("uv lock --preview-features wheel-variants:\n{}", stderr(&lock));
    assert_eq!(lock.status.code(), Some(0), "{}", stderr(&lock));
    let text = std::fs::read_to_string(consumer.join("uv.lock")).unwrap();
    let locked: Vec<&str> = text.lines().filter(|l| l.contains("/simple/deep-ep/") || l.contains("deep_ep-")).collect();
    println!("uv.lock's deep-ep wheels:\n{}", locked.join("\n"));
    assert!(
        locked.iter().all(|l| !l.contains("-h100.whl") && !l.contains("-b200.whl")),
        "uv 0.13.9 locks no variant wheel: {text}"
    );
    let manifest = s.idx.join("variants/index.json");
    let check = |project: &Path| {
        forge(
            s.lab.dir.path(),
            &[
                "lock",
                "check",
                "--project",
                project.to_str().unwrap(),
                "--pins",
                s.pins.to_str().unwrap(),
                "--index-manifest",
                manifest.to_str().unwrap(),
                "--trusted-key",
                &s.public,
            ],
        )
    };
    let c = check(&consumer);
    println!("lock check (default wheel locked):\n{}{}", stdout(&c), stderr(&c));
    assert_eq!(c.status.code(), Some(0), "{}{}", stdout(&c), stderr(&c));
    // uv.lock naming the h100 variant wheel (as a uv that locks variants would): passes.
    let default = wheels.iter().find(|w| w.ends_with("-manylinux_2_34_x86_64.whl")).unwrap().to_string();
    let h100 = wheels.iter().find(|w| w.ends_with("-h100.whl")).unwrap().to_string();
    let sha = |w: &str| forge_os::fs::named::sha256_file(&files_dir.join(w), "wheel", u64::MAX).unwrap().0;
    let enc = |w: &str| w.replace('+', "%2B");
    let relabelled = text.replace(&enc(&default), &enc(&h100)).replace(&sha(&default), &sha(&h100));
    assert_ne!(relabelled, text);
    std::fs::write(consumer.join("uv.lock"), &relabelled).unwrap();
    let c = check(&consumer);
    assert_eq!(c.status.code(), Some(0), "{}{}", stdout(&c), stderr(&c));
    // ... and a label pins.toml does not describe: exit 1 at uv.lock's line, with the fix.
    let line = relabelled.lines().position(|l| l.contains(&enc(&h100))).unwrap() + 1;
    let foreign = relabelled.replace(&enc(&h100), &enc(&h100.replace("-h100.whl", "-h200.whl")));
    std::fs::write(consumer.join("uv.lock"), &foreign).unwrap();
    let c = check(&consumer);
    let out = format!("{}{}", stdout(&c), stderr(&c));
    println!("lock check (label h200):\n{out}");
    assert_eq!(c.status.code(), Some(1), "{out}");
    assert!(
        out.contains("lock-variant-unknown")
            && out.contains("label `h200`")
            && out.contains(&format!("uv.lock:{line}")),
        "{out}"
    );
    // uv 0.13.9 has no setting that selects a static property: `[tool.uv] variant` is unknown.
    let py = std::fs::read_to_string(consumer.join("pyproject.toml")).unwrap();
    std::fs::write(
        consumer.join("pyproject.toml"),
        py.replace("[tool.uv]\n", "[tool.uv]\nvariant = { deepep_forge = { build = [\"multinode\"] } }\n"),
    )
    .unwrap();
    let o = s.uv(
        &consumer,
        &["lock", "--preview-features", "wheel-variants", "--python", s.lab.tools.join("bin/python").to_str().unwrap()],
        &[],
    );
    println!("uv lock with [tool.uv] variant:\n{}", stderr(&o));
    assert!(stderr(&o).contains("unknown field `variant`"), "{}", stderr(&o));
    // verify: the b200 variant wheel is its rebuild plus its (checked) variant.json.
    let b200 = files_dir.join(wheels.iter().find(|w| w.ends_with("-b200.whl")).unwrap());
    let v =
        s.lab.forge(&["verify", b200.to_str().unwrap(), "--source", s.lab.repo.to_str().unwrap()]).output().unwrap();
    println!("verify {}:\n{}{}", b200.display(), stdout(&v), stderr(&v));
    assert_eq!(v.status.code(), Some(0), "{}{}", stdout(&v), stderr(&v));
    assert!(stdout(&v).starts_with("verified: "), "{}", stdout(&v));
}

/// Without --default-variant no plain wheel is written; an installer without
/// variant support then finds nothing (never a build that may not fit).
/// A wheel whose variant.json disagrees with pins.toml is refused, nothing written.
#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools: nvcc, uv 0.13.9) and libibverbs-dev (.ci/setup-system): bash .ci/run runs it"
)]
fn no_default_wheel_unless_named_and_a_disagreeing_variant_json_is_refused() {
    let s = Scene::new();
    ok(&s.publish(&["--format", "json"]));
    let files = index_files(&s.idx.join("variants/simple/deep-ep"));
    assert!(!files.iter().any(|f| f.ends_with("-manylinux_2_34_x86_64.whl")), "{files:?}");
    let server = HttpServer::start(&s.lab.tools.join("bin/python"), &s.idx);
    let url = format!("http://127.0.0.1:{}/variants/simple/", server.port);
    let venv = s.lab.dir.path().join("v");
    ok(&s.uv(
        s.lab.dir.path(),
        &["venv", "-q", "--python", s.lab.tools.join("bin/python").to_str().unwrap(), venv.to_str().unwrap()],
        &[],
    ));
    let o = s.uv(
        s.lab.dir.path(),
        &[
            "pip",
            "install",
            "--no-deps",
            "--python",
            venv.join("bin/python").to_str().unwrap(),
            "--index-url",
            &url,
            "deep-ep",
        ],
        &[],
    );
    println!("uv pip install without the preview, no default wheel:\n{}", stderr(&o));
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("has only unsupported wheel variants"), "{}", stderr(&o));
    // With the preview, a GPU no wheel was built for (sm 8.0): the same clear refusal.
    let o = s.uv(
        s.lab.dir.path(),
        &[
            "pip",
            "install",
            "--no-deps",
            "--preview-features",
            "wheel-variants",
            "--python",
            venv.join("bin/python").to_str().unwrap(),
            "--index-url",
            &url,
            "deep-ep",
        ],
        &[("NV_VARIANT_PROVIDER_FORCE_SM_ARCH", "8.0"), DRIVER],
    );
    println!("uv pip install --preview-features wheel-variants, forced sm_arch 8.0, no default wheel:\n{}", stderr(&o));
    assert!(stderr(&o).contains("has only unsupported wheel variants"), "{}", stderr(&o));
    // pins.toml moves b200 to sm_100 + PTX: the published b200 wheel's variant.json no
    // longer says what pins.toml describes; publishing again refuses, writing nothing.
    let text = std::fs::read_to_string(&s.pins).unwrap().replacen(
        "cuda_arch_list = \"10.0\"",
        "cuda_arch_list = \"10.0+PTX\"",
        1,
    );
    std::fs::write(&s.pins, text).unwrap();
    let before = index_files(&s.idx.join("variants/simple/deep-ep"));
    let o = s.publish(&["--variant", "b200"]);
    println!("publish after pins.toml changed b200:\n{}", stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(index_files(&s.idx.join("variants/simple/deep-ep")), before);
    // publish --check names the published b200 wheel whose variant.json pins.toml no longer describes.
    let check = s.check();
    let out = stdout(&check);
    println!("publish --check after the change:\n{out}");
    assert_eq!(check.status.code(), Some(1), "{out}");
    assert!(
        out.contains("-b200.whl: ")
            && out.contains("variant.json says ")
            && out.contains("pins.toml's variant `b200` is "),
        "{out}"
    );
}

/// Two variants whose names give one label, or a name that gives no label: exit 2
/// before anything is built, nothing written.
#[test]
fn colliding_or_unlabelable_variant_names_are_refused_before_building() {
    let d = tempfile::tempdir().unwrap();
    let key = d.path().join("k");
    let o = forge(d.path(), &["cache", "keygen", "--name", "k1", "--out", key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let base = std::fs::read_to_string(root().join("tests/fixtures/demo-pins.toml")).unwrap();
    let cases =
        [("demo_arm", "both give the variant label `demo_arm`"), ("x1234567890123456", "gives no PEP 825 label")];
    for (name, says) in cases {
        let pins = d.path().join("pins.toml");
        let extra = format!(
            "\n[[variant]]\nname = \"{name}\"\narch = \"aarch64\"\ncuda_arch_list = \"10.0\"\nmultinode = false\n"
        );
        std::fs::write(&pins, format!("{base}{extra}")).unwrap();
        let out = d.path().join("idx");
        let o = forge(
            d.path(),
            &[
                "publish",
                "--all",
                "--variant-wheels",
                "--pins",
                pins.to_str().unwrap(),
                "--signing-key",
                key.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{name}: {}", stderr(&o));
        assert!(!out.exists(), "{name}: nothing written");
    }
    // --default-variant needs --variant-wheels (clap) and a variant published.
    let o = forge(d.path(), &["publish", "--all", "--default-variant", "demo", "--signing-key", key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// The CUDA bounds `publish --variant-wheels` writes for `[toolchain] cuda = "13.0"`
/// (`cuda_version_lower_bound` 13.0, `cuda_version_upper_bound` 14), rendered by the
/// same code, on small real wheels: uv 0.13.9 installs the variant on a 13.x driver
/// and the default below 13.0 or from 14 on.
#[test]
#[cfg_attr(
    not(feature = "needs-tools-venv"),
    ignore = "needs the tools venv (.ci/setup-tools: uv 0.13.9): bash .ci/run runs it"
)]
fn uv_honours_the_cuda_bounds_of_the_toolchain() {
    use forge_store::index::variants;
    let tools = tools_venv().unwrap_or_else(|| support::missing("the tools venv (uv 0.13.9)"));
    let d = tempfile::tempdir().unwrap();
    let pins = forge_model::pins::Pins::parse(
        &std::fs::read_to_string(root().join("tests/fixtures/demo-pins.toml")).unwrap(),
        Path::new("pins.toml"),
    )
    .unwrap();
    let props = variants::properties(pins.variant("demo").unwrap(), Some("13.0"));
    let files = d.path().join("idx/simple/cuda-demo");
    let build = |tag: &str, extra: Vec<(String, Vec<u8>)>| {
        let mut f = vec![("cuda_demo/__init__.py".to_string(), format!("BUILD = {tag:?}\n").into_bytes())];
        f.extend(extra);
        support::tiny_wheel::tiny_wheel(&d.path().join(tag), "cuda-demo", "1.0", &[], &f)
    };
    let plain = build("default", vec![]);
    std::fs::create_dir_all(&files).unwrap();
    std::fs::rename(&plain, files.join("cuda_demo-1.0-py3-none-any.whl")).unwrap();
    let labelled =
        build("demo", vec![("cuda_demo-1.0.dist-info/variant.json".into(), variants::variant_json("demo", &props))]);
    std::fs::rename(&labelled, files.join("cuda_demo-1.0-py3-none-any-demo.whl")).unwrap();
    let all = std::collections::BTreeMap::from([("demo".to_string(), props)]);
    std::fs::write(files.join("cuda_demo-1.0-variants.json"), variants::variants_json(&all)).unwrap();
    let mut page = String::from("<html><body>\n");
    for f in index_files(&files) {
        page.push_str(&format!("<a href=\"{f}\">{f}</a>\n"));
    }
    std::fs::write(files.join("index.html"), page + "</body></html>\n").unwrap();
    let server = HttpServer::start(&tools.join("bin/python"), &d.path().join("idx"));
    let url = format!("http://127.0.0.1:{}/simple/", server.port);
    for (driver, want) in [("13.0", "demo"), ("13.2", "demo"), ("12.8", "default"), ("14.0", "default")] {
        let venv = d.path().join(format!("v{driver}"));
        let uv = |args: &[&str], env: &[(&str, &str)]| {
            let mut c = Command::new(tools.join("bin/uv"));
            c.args(args)
                .env("UV_CACHE_DIR", d.path().join("uv-cache"))
                .env("UV_PYTHON_DOWNLOADS", "never")
                .env_remove("VIRTUAL_ENV");
            for (k, v) in env {
                c.env(k, v);
            }
            c.output().unwrap()
        };
        ok(&uv(&["venv", "-q", "--python", tools.join("bin/python").to_str().unwrap(), venv.to_str().unwrap()], &[]));
        let py = venv.join("bin/python");
        let o = uv(
            &[
                "pip",
                "install",
                "--preview-features",
                "wheel-variants",
                "--python",
                py.to_str().unwrap(),
                "--index-url",
                &url,
                "cuda-demo",
            ],
            &[("NV_VARIANT_PROVIDER_FORCE_SM_ARCH", "9.0"), ("NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION", driver)],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let got = Command::new(&py).args(["-c", "import cuda_demo; print(cuda_demo.BUILD)"]).output().unwrap();
        assert_eq!(stdout(&got).trim(), want, "driver {driver}: {}", stderr(&o));
    }
}
