//! Journeys (issue 42): what a team does in one afternoon, across commands,
//! with the real binary, real git, nvcc, uv and pip, each step's output
//! checked and every printed fix run exactly as printed (`sh -c` in the
//! user's folder).
//!
//! - J1 platform team: single-node and multi-node variants on two
//!   architectures; `build-wheel --all --out dist` keeps every variant's wheel
//!   (`dist/<variant>/`), SHA256SUMS complete; a collision in one `--out` is
//!   refused; `verify` each; `publish`; consumers on an http and a `file://`
//!   index (`uv lock`, `uv sync`); `lock check` reads the `file://` index's
//!   run-time requirements; `probe --python` of each installed environment.
//!   The aarch64 variants are planned here (skipped with why); their builds
//!   are the cross tests' (`needs-cross`).
//! - J3 exact and patched: both built, labels differ; `diff`, `verify`,
//!   `probe` and `evidence show` (from the wheel cache) say which is which.
//! - J4 evidence for a multi-node variant: its own static request recorded,
//!   a `configuration` and a `training` result added, the Markdown boundary
//!   against a golden file, and the gate passing with the right evidence and
//!   failing with the wrong (a 1-node probe of the multi-node wheel), the
//!   printed fix run as printed.
//!
//! J1 and J4 build a DOCA multi-node variant (mini-nccl as DeepEP's
//! `third-party/nccl`; the extension links libibverbs/libmlx5): they run in
//! the `needs-ibverbs` group, and fail there (never pass) without the tools
//! venv. One build per variant per journey, the rest cache hits.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::*;

/// A single-node and a multi-node x86_64 variant of one revision (the same wheel
/// file name), and both shapes for aarch64 (planned here, built by the cross tests).
const VARIANTS: &str = r#"
[[variant]]
name = "sn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }

[[variant]]
name = "mn"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = true
transport = "doca"
rdma_core_home = "/usr"
topology = { gpu = "h100", nodes = 2, gpus_per_node = 8, ep = 16, ranks_per_domain = 8, mnnvl = false }

[[variant]]
name = "arm"
arch = "aarch64"
cuda_arch_list = "10.0"
multinode = false
topology = { gpu = "gb200", nodes = 1, gpus_per_node = 4, ep = 4, ranks_per_domain = 4, mnnvl = false }

[[variant]]
name = "arm-mn"
arch = "aarch64"
cuda_arch_list = "10.0"
multinode = true
transport = "doca"
rdma_core_home = "/usr"
topology = { gpu = "gb200", nodes = 2, gpus_per_node = 4, ep = 8, ranks_per_domain = 4, mnnvl = false }
"#;

/// One team's afternoon: a folder, the tools, DeepEP's stand-in as a git
/// repository (with the NCCL stand-in as its `third-party/nccl` submodule when
/// multi-node variants are built), pins.toml, a signing key.
struct Team {
    dir: tempfile::TempDir,
    tools: PathBuf,
    cuda: PathBuf,
    repo: PathBuf,
    rev: String,
    key: PathBuf,
    public: String,
}

impl Team {
    fn new(multinode: bool) -> Team {
        let (Some(tools), Some(cuda)) = (tools_venv(), cuda_home()) else {
            missing("the tools venv (nvcc, uv and pip)")
        };
        if multinode && !Path::new("/usr/include/infiniband/verbs.h").exists() {
            missing("the rdma-core headers (libibverbs-dev)");
        }
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("DeepEP");
        let mut rev = git_repo_from_fixture("mini-deepep", &repo);
        if multinode {
            let nccl = dir.path().join("nccl");
            git_repo_from_fixture("mini-nccl", &nccl);
            git(&repo, &["submodule", "add", "-q", nccl.to_str().unwrap(), "third-party/nccl"]);
            git(&repo, &["commit", "-qm", "nccl submodule"]);
            rev = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
        }
        let key = dir.path().join("team.key");
        let t = Team { dir, tools, cuda, repo, rev, key: key.clone(), public: String::new() };
        let o = t.forge(&["cache", "keygen", "--name", "team-1", "--out", key.to_str().unwrap()]);
        let public = ok(&o).lines().next().unwrap().trim().to_string();
        Team { public, ..t }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn short(&self) -> &str {
        &self.rev[..7]
    }

    /// pins.toml at `rel` for the team's revision with `variants` (`patches`: the x86_64 pin's).
    fn pins(&self, rel: &str, variants: &str, patches: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let text = format!(
            "schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbranch = \"main\"\nbase_version = \"1.2.1\"\n[pin.x86_64]\nrev = \"{}\"\n{patches}[pin.aarch64]\nrev = \"{}\"\n{variants}",
            self.rev, self.rev
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The binary with the tools on PATH, CUDA, the team's cache, no trusted keys
    /// from outside, a clean build environment; run in the team's folder.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = bin();
        c.args(args)
            .current_dir(self.dir.path())
            .env("DEEPEP_FORGE_CACHE_DIR", self.path("cache"))
            .env("CUDA_HOME", &self.cuda)
            .env("PATH", self.path_var())
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env_remove("DEEPEP_FORGE_TRUSTED_KEYS")
            .env_remove("DEEPEP_FORGE_CACHE_URL");
        for k in ["TORCH_CUDA_ARCH_LIST", "HYBRID_EP_MULTINODE", "USE_NIXL", "RDMA_CORE_HOME", "NVSHMEM_DIR"] {
            c.env_remove(k);
        }
        for k in ["MAX_JOBS", "CC", "CXX", "CUDAHOSTCXX"] {
            c.env_remove(k);
        }
        c
    }

    /// PATH: this deepep-forge first (a printed fix names `deepep-forge`), then the tools.
    fn path_var(&self) -> String {
        let exe = support_exe_dir();
        format!("{}:{}:{}", exe.display(), self.tools.join("bin").display(), std::env::var("PATH").unwrap_or_default())
    }

    fn forge(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// A build-side command (`plan`, `build-wheel`, `publish`, `verify`) with the
    /// team's source and the tools' Python.
    fn build(&self, args: &[&str]) -> Output {
        let mut c = self.cmd(args);
        c.arg("--source").arg(&self.repo).arg("--python").arg(self.tools.join("bin/python"));
        c.output().unwrap()
    }

    /// uv in a consumer's folder, offline from every index but the ones its pyproject names.
    fn uv(&self, consumer: &Path, args: &[&str]) -> Output {
        Command::new(self.tools.join("bin/uv"))
            .args(args)
            .arg("--python")
            .arg(self.tools.join("bin/python"))
            .current_dir(consumer)
            .env("UV_CACHE_DIR", self.path("uv-cache"))
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env_remove("UV_INDEX_URL")
            .env_remove("UV_EXTRA_INDEX_URL")
            .env_remove("VIRTUAL_ENV")
            .output()
            .unwrap()
    }

    /// A consumer folder: DeepEP from git with a static label (NeMo-RL's shape), before `pin set --index`.
    fn consumer(&self, rel: &str) -> PathBuf {
        let c = self.path(rel);
        copy_dir(&root().join("tests/fixtures/consumer-index"), &c);
        c
    }

    /// Run a printed fix exactly as printed, in `cwd`, with the team's environment.
    fn run_fix(&self, fix: &str, cwd: &Path) -> Output {
        Command::new("sh")
            .arg("-c")
            .arg(fix)
            .current_dir(cwd)
            .env("PATH", self.path_var())
            .env("DEEPEP_FORGE_CACHE_DIR", self.path("cache"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("CUDA_HOME", &self.cuda)
            .env_remove("DEEPEP_FORGE_TRUSTED_KEYS")
            .output()
            .unwrap()
    }
}

/// A CUDA home as HybridEP's run-time compiler wants it (bin/nvcc, include,
/// lib64/libcudart.so), made of the registry's CUDA parts in the tools venv.
fn jit_cuda_home(t: &Team) -> PathBuf {
    let home = t.path("cuda-home");
    if !home.exists() {
        std::fs::create_dir_all(home.join("lib64")).unwrap();
        for d in ["bin", "include"] {
            std::os::unix::fs::symlink(t.cuda.join(d), home.join(d)).unwrap();
        }
        std::os::unix::fs::symlink(t.cuda.join("lib/libcudart.so.13"), home.join("lib64/libcudart.so")).unwrap();
    }
    home
}

/// The folder of the binary under test.
fn support_exe_dir() -> PathBuf {
    exe().parent().unwrap().to_path_buf()
}

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
    stdout(o)
}

fn sha256(p: &Path) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(std::fs::read(p).unwrap()))
}

fn wheels_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "whl")).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(o), stderr(o)))
}

/// The `fix: ...` lines of a lock check's human output.
fn fixes(out: &str) -> Vec<String> {
    out.lines().filter_map(|l| l.trim().strip_prefix("fix: ")).map(String::from).collect()
}

#[test]
#[cfg_attr(
    not(feature = "needs-ibverbs"),
    ignore = "needs system package libibverbs-dev (sudo .ci/setup-system): bash .ci/run runs it when present"
)]
fn j1_platform_team_builds_every_variant_publishes_and_consumers_install_the_right_one() {
    let t = Team::new(true);
    let pins = t.pins("platform/pins.toml", VARIANTS, "");
    let pins_s = pins.to_str().unwrap();
    let o = t.forge(&["pins", "check", "--pins", pins_s]);
    assert!(ok(&o).contains("ok (2 pins, 4 variants)"), "{}", stdout(&o));

    // The plan: each x86_64 variant into its own folder of --out; aarch64 skipped, saying why.
    let plan = json(&t.build(&["plan", "--all", "--pins", pins_s, "--out", "dist", "--format", "json"]));
    let planned: Vec<(String, String)> = plan["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["variant"]["name"].as_str().unwrap().into(), p["outputs"]["out_dir"].as_str().unwrap().into()))
        .collect();
    assert_eq!(planned.len(), 2, "{planned:?}");
    for (v, out) in &planned {
        assert!(out.ends_with(&format!("/dist/{v}")), "{v}: {out}");
    }
    let skipped: Vec<&str> =
        plan["skipped"].as_array().unwrap().iter().map(|s| s["variant"].as_str().unwrap()).collect();
    assert_eq!(skipped, ["arm", "arm-mn"], "{plan}");

    // build-wheel --all --out dist: both wheels, one file name, two folders, SHA256SUMS complete.
    let o = t.build(&["build-wheel", "--all", "--pins", pins_s, "--out", "dist", "--report", "report.json"]);
    let out = ok(&o);
    assert!(out.contains("skipped    arm (aarch64)") && out.contains("skipped    arm-mn (aarch64)"), "{out}");
    let (sn, mn) = (wheels_in(&t.path("dist/sn")), wheels_in(&t.path("dist/mn")));
    assert_eq!((sn.len(), mn.len()), (1, 1), "{sn:?} {mn:?}");
    let name = sn[0].file_name().unwrap().to_str().unwrap().to_string();
    assert_eq!(mn[0].file_name().unwrap().to_str().unwrap(), name, "one revision, one arch: one file name");
    assert!(name.starts_with(&format!("deep_ep-1.2.1+{}-", t.short())), "{name}");
    let (sn_sha, mn_sha) = (sha256(&sn[0]), sha256(&mn[0]));
    assert_ne!(sn_sha, mn_sha, "the multi-node build is another binary");
    assert!(wheels_in(&t.path("dist")).is_empty(), "nothing flat in dist when several variants are built");
    assert!(out.contains(&format!("dist/sn/{name}")) && out.contains(&format!("dist/mn/{name}")), "{out}");
    let sums = std::fs::read_to_string(t.path("dist/SHA256SUMS")).unwrap();
    assert_eq!(sums, format!("{mn_sha}  mn/{name}\n{sn_sha}  sn/{name}\n"));
    let check = Command::new("sha256sum").args(["-c", "SHA256SUMS"]).current_dir(t.path("dist")).output().unwrap();
    assert_eq!(stdout(&check), format!("mn/{name}: OK\nsn/{name}: OK\n"), "{}", stderr(&check));
    assert!(
        t.path(&format!("dist/mn/{name}.intoto.json")).is_file()
            && t.path(&format!("dist/sn/{name}.intoto.json")).is_file()
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.path("report.json")).unwrap()).unwrap();
    let rows: Vec<(&str, &str, &str)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["variant"].as_str().unwrap(), r["wheel"].as_str().unwrap(), r["sha256"].as_str().unwrap()))
        .collect();
    assert_eq!(rows.len(), 2, "{report}");
    for (v, w, s) in rows {
        assert!(w.ends_with(&format!("dist/{v}/{name}")), "{v}: {w}");
        assert_eq!(s, if v == "sn" { &sn_sha } else { &mn_sha });
    }

    // One variant at a time into one folder: the second would replace the first. Refused
    // (exit 2), nothing written; then the same build into its own folder works.
    ok(&t.build(&["build-wheel", "--variant", "sn", "--pins", pins_s, "--out", "flat"]));
    let o = t.build(&["build-wheel", "--variant", "mn", "--pins", pins_s, "--out", "flat"]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("flat/{name} is variant `sn`'s wheel; variant `mn`'s wheel has the same file name")),
        "{err}"
    );
    assert!(err.contains("`--variant A --variant B` or `--all`"), "{err}");
    assert_eq!(sha256(&t.path(&format!("flat/{name}"))), sn_sha, "the single-node wheel is still there");
    assert_eq!(std::fs::read_to_string(t.path("flat/SHA256SUMS")).unwrap(), format!("{sn_sha}  {name}\n"));
    let two = t.build(&["build-wheel", "--variant", "sn", "--variant", "mn", "--pins", pins_s, "--out", "flat"]);
    ok(&two);
    assert_eq!(sha256(&t.path(&format!("flat/mn/{name}"))), mn_sha);

    // verify each: rebuilt from its provenance, the same bytes; `verify --out` keeps the
    // rebuild and never over another variant's wheel.
    for (v, sha) in [("sn", &sn_sha), ("mn", &mn_sha)] {
        let w = t.path(&format!("dist/{v}/{name}"));
        let out = ok(&t.build(&["verify", w.to_str().unwrap(), "--out", &format!("verified/{v}")]));
        assert!(
            out.contains(&format!("rebuilt {v} @ {}", &t.rev[..12])) && out.contains("gives the same sha256"),
            "{out}"
        );
        assert_eq!(&sha256(&t.path(&format!("verified/{v}/{name}"))), sha);
    }

    // publish: one signed index per variant.
    let o = t.build(&["publish", "--all", "--pins", pins_s, "--signing-key", t.key.to_str().unwrap(), "--out", "idx"]);
    ok(&o);
    for (v, sha) in [("sn", &sn_sha), ("mn", &mn_sha)] {
        let m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(t.path(&format!("idx/{v}/index.json"))).unwrap()).unwrap();
        assert_eq!(m["wheels"][0]["sha256"], sha.as_str(), "{v}: {m}");
    }

    // Consumers: the multi-node job from the http index, the single-node one from a file:// index.
    let server = HttpServer::start(&t.tools.join("bin/python"), &t.path("idx"));
    let http = format!("http://127.0.0.1:{}", server.port);
    let file = format!("file://{}", t.path("idx").display());
    let label = format!("1.2.1+{}", t.short());
    for (consumer, url, variant, sha) in [("job-mn", &http, "mn", &mn_sha), ("job-sn", &file, "sn", &sn_sha)] {
        let c = t.consumer(consumer);
        let o = t.forge(&[
            "pin",
            "set",
            &t.rev,
            "--project",
            consumer,
            "--pins",
            pins_s,
            "--source",
            t.repo.to_str().unwrap(),
            "--index",
            url,
            "--variant",
            variant,
        ]);
        ok(&o);
        assert!(!stderr(&o).contains("cannot read the run-time requirements"), "{consumer}: {}", stderr(&o));
        let py = std::fs::read_to_string(c.join("pyproject.toml")).unwrap();
        assert!(py.contains(&format!("url = \"{url}/{variant}/simple\"")), "{consumer}: {py}");
        ok(&t.uv(&c, &["lock"]));
        let lock = std::fs::read_to_string(c.join("uv.lock")).unwrap();
        assert!(lock.contains(&format!("sha256:{sha}")), "{consumer}: {lock}");
        ok(&t.uv(&c, &["sync", "--locked"]));
        let v = Command::new(c.join(".venv/bin/python"))
            .args(["-c", "import deep_ep, importlib.metadata as m; print(m.version('deep-ep'))"])
            .output()
            .unwrap();
        assert_eq!(stdout(&v).trim(), label, "{consumer}: {}", stderr(&v));
        // lock check reads the index's signed manifest and each wheel's run-time requirements.
        let o = t.forge(&[
            "lock",
            "check",
            "--project",
            consumer,
            "--pins",
            pins_s,
            "--index-manifest",
            "index",
            "--trusted-key",
            &t.public,
        ]);
        let out = ok(&o);
        assert!(out.contains("ok: 0 error(s)"), "{consumer}: {out}");
        assert!(!out.contains("cannot read the run-time requirements") && !out.contains("requirements of  "), "{out}");
        // probe of the installed environment against the multi-node job's request (HybridEP's
        // JIT needs a CUDA home with lib64/libcudart.so: one made of the registry's parts).
        let venv = c.join(".venv/bin/python");
        let request = ["--gpu", "h100", "--ep", "16", "--nodes", "2", "--gpus-per-node", "8", "--no-host-check"];
        let mut probe = t.cmd(&[&["probe", "--python", venv.to_str().unwrap()][..], &request].concat());
        let o = probe.env("CUDA_HOME", jit_cuda_home(&t)).output().unwrap();
        let out = stdout(&o);
        if variant == "mn" {
            assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
            assert!(out.contains("MATCH:") && out.contains("pass  multinode-build"), "{out}");
        } else {
            assert_eq!(o.status.code(), Some(1), "a single-node wheel for a 2-node job: {out}{}", stderr(&o));
            assert!(out.contains("MISMATCH:") && out.contains("FAIL  multinode-build"), "{out}");
        }
    }
}

/// The Markdown boundary with what varies between runs named: the revision, the
/// wheel's sha256, the statements' times.
fn normalized_markdown(md: &str, t: &Team, sha: &str, times: &[String]) -> String {
    let mut md = md.replace(&sha[..16], "[SHA]").replace(t.short(), "[SHORT]");
    for time in times {
        md = md.replace(&forge_store::evidence::show::md(time), "[TIME]");
    }
    md
}

#[test]
#[cfg_attr(
    not(feature = "needs-ibverbs"),
    ignore = "needs system package libibverbs-dev (sudo .ci/setup-system): bash .ci/run runs it when present"
)]
fn j4_evidence_for_a_multinode_variant_is_its_own_request_and_the_gate_tells_right_from_wrong() {
    let t = Team::new(true);
    let pins = t.pins("pins.toml", VARIANTS, "");
    let pins_s = pins.to_str().unwrap();
    let o = t.build(&["build-wheel", "--variant", "mn", "--pins", pins_s, "--out", "dist", "--format", "json"]);
    let built = json(&o);
    let wheel = t.dir.path().join(built["results"][0]["wheel"].as_str().unwrap());
    let name = wheel.file_name().unwrap().to_str().unwrap().to_string();
    let sha = sha256(&wheel);
    let key = t.key.to_str().unwrap();

    // The consumer: the multi-node variant's index (file://), locked by uv.
    ok(&t.build(&["publish", "--variant", "mn", "--pins", pins_s, "--signing-key", key, "--out", "idx"]));
    t.consumer("job");
    let url = format!("file://{}", t.path("idx").display());
    ok(&t.forge(&[
        "pin",
        "set",
        &t.rev,
        "--project",
        "job",
        "--pins",
        pins_s,
        "--source",
        t.repo.to_str().unwrap(),
        "--index",
        &url,
        "--variant",
        "mn",
    ]));
    ok(&t.uv(&t.path("job"), &["lock"]));
    let gate = |ev: &str| {
        t.forge(&[
            "lock",
            "check",
            "--project",
            "job",
            "--pins",
            pins_s,
            "--index-manifest",
            "index",
            "--require-evidence",
            "static",
            "--evidence",
            ev,
            "--trusted-key",
            &t.public,
        ])
    };

    // The wrong evidence: a MATCH of a 1-node request (h100-8g) about the multi-node wheel.
    let o = t.forge(&[
        "probe",
        "--wheel",
        wheel.to_str().unwrap(),
        "--preset",
        "h100-8g",
        "--record",
        "ev",
        "--signing-key",
        key,
    ]);
    assert!(ok(&o).contains("MATCH:"), "{}", stdout(&o));
    let o = gate("ev");
    assert_eq!(o.status.code(), Some(1), "a 1-node probe does not stand for a 2-node variant: {}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "error[evidence-missing]: the locked deep-ep wheel {name} (variant mn) lacks `static` evidence"
        )),
        "{out}"
    );
    assert!(
        out.contains(
            "best present: none on h100 (sm_90) (`static` only for another GPU generation, request, or a MISMATCH)"
        ),
        "{out}"
    );
    let fix = fixes(&out);
    assert_eq!(fix.len(), 1, "{out}");
    assert_eq!(
        fix[0],
        format!("deepep-forge probe --wheel {name} --gpu h100 --ep 16 --nodes 2 --gpus-per-node 8 --ranks-per-domain 8 --no-mnnvl --no-host-check --record ev --signing-key '<KEY_FILE>'")
    );
    // The fix as printed, where the user has the wheel (downloaded from the index) and fills in their key file.
    std::fs::copy(&wheel, t.path(&name)).unwrap();
    let fix = [fix[0].replace("'<KEY_FILE>'", t.key.to_str().unwrap())];
    let o = t.run_fix(&fix[0], t.dir.path());
    assert!(ok(&o).contains("MATCH:"), "{}", stdout(&o));
    let out = ok(&gate("ev"));
    assert!(out.contains("ok: 0 error(s)"), "{out}");

    // A configuration and a training result for the variant's own request, then the boundary.
    let request = ["--gpu", "h100", "--ep", "16", "--nodes", "2", "--gpus-per-node", "8"];
    let mut add = vec!["evidence", "add", "--wheel", wheel.to_str().unwrap(), "--signing-key", key, "--out", "ev"];
    add.extend(request);
    let o = t.forge(&[&add[..], &["--kind", "configuration", "--outcome", "recipe resolved: EP16 on 2 x 8"]].concat());
    assert!(ok(&o).contains("recorded configuration (reported, signed by team-1)"), "{}", stdout(&o));
    let o = t.forge(
        &[
            &add[..],
            &[
                "--kind",
                "training",
                "--outcome",
                "PASS | 200/200 steps",
                "--text",
                "loss 2.13 at step 200",
                "--url",
                "https://ci.example/run/7",
            ],
        ]
        .concat(),
    );
    ok(&o);
    let show = |format: &str| {
        t.forge(&[
            "evidence",
            "show",
            "--pins",
            pins_s,
            "--variant",
            "mn",
            "--evidence",
            "ev",
            "--trusted-key",
            &t.public,
            "--format",
            format,
        ])
    };
    let j = json(&show("json"));
    let times: Vec<String> = j["sections"][0]["statements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["time"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(times.len(), 4, "{j}");
    let md = normalized_markdown(&ok(&show("markdown")), &t, &sha, &times);
    let golden = root().join("tests/fixtures/evidence/journey-multinode.md");
    if std::env::var_os("DEEPEP_FORGE_BLESS").is_some() {
        std::fs::write(&golden, &md).unwrap();
    }
    assert_eq!(md, std::fs::read_to_string(&golden).unwrap(), "DEEPEP_FORGE_BLESS=1 rewrites the golden file");
}

/// One single-node variant (J3).
const ONE: &str = r#"
[[variant]]
name = "r"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn j3_exact_and_patched_are_told_apart_by_every_command() {
    let t = Team::new(false);
    // A patch made as `git diff` writes it (one more baked string), the source left clean.
    let file = "csrc/hybrid_ep/hybrid_ep.cu";
    let text = std::fs::read_to_string(t.repo.join(file)).unwrap();
    let at = "extern \"C\" const char* hybrid_ep_sm_arch()";
    let note = "extern \"C\" const char* hybrid_ep_patch_note() { return \"journey-note\"; }\n\n";
    std::fs::write(t.repo.join(file), text.replacen(at, &format!("{note}{at}"), 1)).unwrap();
    let patch = git(&t.repo, &["diff"]);
    git(&t.repo, &["checkout", "--", file]);
    std::fs::create_dir_all(t.path("patched/patches")).unwrap();
    std::fs::write(t.path("patched/patches/note.patch"), &patch).unwrap();
    let exact_pins = t.pins("exact/pins.toml", ONE, "");
    let patched_pins = t.pins("patched/pins.toml", ONE, "patches = [\"patches/note.patch\"]\n");
    // A pins repository reviews its patches: they are committed beside pins.toml.
    git(&t.path("patched"), &["init", "-q", "-b", "main"]);
    git(&t.path("patched"), &["add", "-A"]);
    git(&t.path("patched"), &["commit", "-qm", "pins and a patch"]);

    let build = |pins: &Path, out: &str| {
        let o = t.build(&["build-wheel", "--variant", "r", "--pins", pins.to_str().unwrap(), "--out", out]);
        ok(&o);
        let w = wheels_in(&t.path(out));
        assert_eq!(w.len(), 1, "{w:?}");
        w[0].clone()
    };
    let exact = build(&exact_pins, "dist-exact");
    let patched = build(&patched_pins, "dist-patched");
    let version =
        |w: &Path| forge_wheel::wheel::WheelName::parse(w.file_name().unwrap().to_str().unwrap()).unwrap().version;
    assert_eq!(version(&exact), format!("1.2.1+{}", t.short()));
    assert!(version(&patched).starts_with(&format!("1.2.1+{}.p", t.short())), "{}", version(&patched));

    // diff: each side says what it is.
    let o = t.forge(&["diff", exact.to_str().unwrap(), patched.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let d = stdout(&o);
    assert!(d.contains("A  is exact, unpatched") && d.contains("B  is patched: 1 patch (patches/note.patch "), "{d}");
    // verify: the patched wheel rebuilds from its provenance alone (the patch text is in it).
    let v = ok(&t.build(&["verify", patched.to_str().unwrap()]));
    assert!(v.contains("verified:") && v.contains("patched: 1 patch (patches/note.patch"), "{v}");
    // probe: the provenance agrees with the binary and says which.
    let probe = |w: &Path| stdout(&t.forge(&["probe", "--wheel", w.to_str().unwrap()]));
    assert!(probe(&exact).contains(&format!("at {} (exact, unpatched) agrees with the binary", t.short())));
    assert!(probe(&patched).contains(&format!("at {} (patched: 1 patch (patches/note.patch ", t.short())));
    // evidence show, from the wheel cache, for each pins file: its own wheel, said what it is
    // (the patched wheel's label is not `+<short>`; it is found by its provenance).
    std::fs::create_dir_all(t.path("ev")).unwrap();
    let show = |pins: &Path| {
        ok(&t.forge(&[
            "evidence",
            "show",
            "--pins",
            pins.to_str().unwrap(),
            "--evidence",
            "ev",
            "--trusted-key",
            &t.public,
        ]))
    };
    let s = show(&patched_pins);
    let name = patched.file_name().unwrap().to_str().unwrap();
    assert!(s.contains(&format!("r @ {} (x86_64)  {name}  sha256 {}", t.short(), &sha256(&patched)[..16])), "{s}");
    assert!(s.contains("(the wheel cache; patched: 1 patch (patches/note.patch "), "{s}");
    let s = show(&exact_pins);
    let name = exact.file_name().unwrap().to_str().unwrap();
    assert!(s.contains(&format!("r @ {} (x86_64)  {name}  sha256 {}", t.short(), &sha256(&exact)[..16])), "{s}");
    assert!(s.contains("(the wheel cache; exact, unpatched)"), "{s}");
}
