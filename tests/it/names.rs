//! Names that hold (issue #55), as a user meets them: the mini-deepep fixture at a
//! commit whose short sha is all digits with a leading zero (PEP 440 writes its
//! label without the zero), built exact (`r`) and with a variant's own patch (`rp`),
//! under a glibc floor set alone (`[toolchain] manylinux`) at and below what the
//! binaries need (manylinux_2_34 on this machine: pthread_create@GLIBC_2.34).
//! Each label goes through build-wheel, the cache, publish, publish --check,
//! pin set, uv lock, lock check, uv pip install from the served index, docker
//! bake and verify; every command the tool prints is run as printed; the tag is
//! said in words wherever it is shown, and a floor below the needs refuses on
//! the cache hit, in publish and in publish --check.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::build_support::{files_under, files_with, Lab};
use crate::support;

/// The words a manylinux_2_34 tag is shown with.
const WORDS: &str = "loads where glibc >= 2.34 (e.g. RHEL 9, Ubuntu 22.04, Debian 12, Amazon Linux 2023; not RHEL 8";

const VARIANTS: &str = r#"
[[variant]]
name = "r"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false

[[variant]]
name = "rp"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
patches = ["patches/note.patch"]
"#;

/// A commit of `repo` on top of HEAD (same tree) whose 7-character short sha is
/// `0` and six digits; HEAD moved there. `git commit-tree` in a bounded loop
/// (about 270 tries on average: 1/16 x (10/16)^6).
fn leading_zero_commit(repo: &Path) -> String {
    for i in 0..20_000 {
        let o = Command::new("git")
            .args(["commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m"])
            .arg(format!("names: a leading-zero sha ({i})"))
            .current_dir(repo)
            .envs([("GIT_AUTHOR_NAME", "n"), ("GIT_AUTHOR_EMAIL", "n@invalid"), ("GIT_COMMITTER_NAME", "n")])
            .env("GIT_COMMITTER_EMAIL", "n@invalid")
            .env("GIT_AUTHOR_DATE", "2026-12-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2026-12-01T00:00:00Z")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", support::stderr(&o));
        let sha = support::stdout(&o).trim().to_string();
        let short = &sha[..7];
        if short.starts_with('0') && short.bytes().all(|b| b.is_ascii_digit()) {
            support::git(repo, &["reset", "-q", "--hard", &sha]);
            assert_eq!(support::git(repo, &["rev-parse", "--short=7", "HEAD"]).trim(), short);
            return sha;
        }
    }
    panic!("no leading-zero short sha in 20000 commits");
}

/// The patch the `rp` variant applies (one more baked string), made in the lab's repository.
fn note_patch(lab: &Lab) -> String {
    let file = "csrc/hybrid_ep/hybrid_ep.cu";
    let f = lab.repo.join(file);
    let text = std::fs::read_to_string(&f).unwrap();
    let at = "extern \"C\" const char* hybrid_ep_sm_arch()";
    let note = "extern \"C\" const char* hybrid_ep_names_note() { return \"names-note\"; }\n\n";
    std::fs::write(&f, text.replacen(at, &format!("{note}{at}"), 1)).unwrap();
    let d = support::git(&lab.repo, &["diff"]);
    support::git(&lab.repo, &["checkout", "--", file]);
    d
}

/// `ops/pins.toml` (a git repository with the committed patch beside it) for `rev`,
/// with the floor alone in `[toolchain]`.
fn write_pins(lab: &Lab, rev: &str, floor: &str) -> PathBuf {
    let ops = lab.dir.path().join("ops");
    let text = std::fs::read_to_string(lab.pins_with(rev, VARIANTS)).unwrap();
    let p = ops.join("pins.toml");
    std::fs::write(&p, format!("{text}\n[toolchain]\nmanylinux = \"{floor}\"\n")).unwrap();
    p
}

/// The operators' repository `ops/` with `patches/note.patch` committed.
fn ops_repo(lab: &Lab, patch: &str) {
    let ops = lab.dir.path().join("ops");
    std::fs::create_dir_all(ops.join("patches")).unwrap();
    std::fs::write(ops.join("patches/note.patch"), patch).unwrap();
    support::git(&ops, &["init", "-q", "-b", "main"]);
    support::git(&ops, &["add", "-A"]);
    support::git(&ops, &["commit", "-q", "-m", "patches"]);
}

fn out(o: &Output) -> String {
    format!("{}{}", support::stdout(o), support::stderr(o))
}

/// The journey's environment: DeepEP's URL served from the lab's repository, the lab's
/// cache, the tools venv's uv/python first on PATH, the index key trusted.
struct Env {
    vars: Vec<(String, String)>,
}

impl Env {
    fn new(lab: &Lab, trusted: Option<&str>) -> Env {
        let mut vars: Vec<(String, String)> = crate::pinset::insteadof(&lab.repo)
            .into_iter()
            .filter(|(k, _)| *k != "DEEPEP_FORGE_CACHE_DIR")
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let exe_dir = support::exe().parent().unwrap().display().to_string();
        vars.extend([
            (
                "PATH".into(),
                format!("{exe_dir}:{}:{}", lab.tools.join("bin").display(), std::env::var("PATH").unwrap()),
            ),
            ("CUDA_HOME".into(), lab.cuda_home.display().to_string()),
            ("DEEPEP_FORGE_CACHE_DIR".into(), lab.cache.display().to_string()),
            ("XDG_CONFIG_HOME".into(), lab.dir.path().join("config").display().to_string()),
            ("UV_CACHE_DIR".into(), lab.dir.path().join("uv-cache").display().to_string()),
            ("UV_PYTHON".into(), lab.tools.join("bin/python").display().to_string()),
            ("UV_PYTHON_DOWNLOADS".into(), "never".into()),
        ]);
        if let Some(k) = trusted {
            vars.push(("DEEPEP_FORGE_TRUSTED_KEYS".into(), k.to_string()));
        }
        Env { vars }
    }

    fn run(&self, cwd: &Path, argv: &[&str]) -> Output {
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..]).current_dir(cwd).envs(self.vars.clone());
        for k in [
            "TORCH_CUDA_ARCH_LIST",
            "HYBRID_EP_MULTINODE",
            "MAX_JOBS",
            "CC",
            "CXX",
            "UV_INDEX_URL",
            "UV_EXTRA_INDEX_URL",
            "VIRTUAL_ENV",
            "DEEPEP_FORGE_CACHE_URL",
        ] {
            c.env_remove(k);
        }
        c.output().unwrap()
    }

    /// A command line the tool printed, run as printed.
    fn printed(&self, cwd: &Path, line: &str) -> Output {
        self.run(cwd, &["sh", "-c", line])
    }
}

/// The wheels under `dir` (any depth), by variant folder.
fn wheel_of(dir: &Path, variant: &str) -> PathBuf {
    let w = files_with(&dir.join(variant), ".whl");
    assert_eq!(w.len(), 1, "{w:?}");
    w[0].clone()
}

fn version_of(wheel: &Path) -> String {
    forge_wheel::wheel::WheelName::parse(&wheel.file_name().unwrap().to_string_lossy()).unwrap().version
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, uv)")]
fn a_leading_zero_exact_and_patched_label_round_trips_under_a_floor_above_and_below_the_needs() {
    let lab = Lab::new();
    let patch = note_patch(&lab);
    let rev = leading_zero_commit(&lab.repo);
    let short = &rev[..7];
    let label = forge_model::patches::normal_local(short);
    assert!(!label.starts_with('0') && label.len() < 7, "{label}");
    ops_repo(&lab, &patch);
    let pins = write_pins(&lab, &rev, "2_34");
    let p = pins.to_str().unwrap();
    let exe = support::exe().to_str().unwrap().to_string();
    let env = Env::new(&lab, None);
    let forge = |env: &Env, args: &[&str]| env.run(lab.dir.path(), &[&[exe.as_str()][..], args].concat());
    let python = lab.python.to_str().unwrap();
    let source = lab.repo.to_str().unwrap();

    // The floor alone is accepted; the plan says who can load the wheel.
    let o = forge(&env, &["pins", "check", "--pins", p]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = forge(&env, &["plan", "--pins", p, "--variant", "r", "--source", source, "--python", python]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(out(&o).contains(&format!("platform    floor manylinux_2_34: the wheel {WORDS}")), "{}", out(&o));

    // Built at the floor: exact and patched labels in PEP 440's form, the words on the result lines.
    let build = |env: &Env, floor_out: &str| {
        forge(
            env,
            &[
                "build-wheel",
                "--pins",
                p,
                "--variant",
                "r",
                "--variant",
                "rp",
                "--source",
                source,
                "--python",
                python,
                "--no-compiler-cache",
                "--out",
                floor_out,
            ],
        )
    };
    let o = build(&env, "dist");
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(support::stdout(&o).matches(WORDS).count() == 2, "{}", out(&o));
    let dist = lab.dir.path().join("dist");
    let (exact, patched) = (wheel_of(&dist, "r"), wheel_of(&dist, "rp"));
    assert_eq!(version_of(&exact), format!("1.2.1+{label}"));
    let pv = version_of(&patched);
    assert!(pv.starts_with(&format!("1.2.1+{label}.p")) && pv.len() == format!("1.2.1+{label}.p").len() + 8, "{pv}");
    for w in [&exact, &patched] {
        assert!(w.to_string_lossy().ends_with("-manylinux_2_34_x86_64.whl"), "{}", w.display());
    }
    // Cached: a hit, the same words.
    let o = build(&env, "dist-again");
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(
        support::stdout(&o).contains("cache-hit") && support::stdout(&o).matches(WORDS).count() == 2,
        "{}",
        out(&o)
    );

    // The floor below the needs: the cache hit refuses (nothing delivered), as a fresh build would.
    write_pins(&lab, &rev, "2_28");
    let o = build(&env, "dist-low");
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let text = out(&o);
    assert!(
        text.contains("cache-hit") && text.contains("needs manylinux_2_34 but pins.toml's floor is manylinux_2_28"),
        "{text}"
    );
    assert!(text.contains("GLIBC_2.34 from libc.so.6"), "{text}");
    assert!(!lab.dir.path().join("dist-low/SHA256SUMS").exists(), "nothing delivered");

    // Published under the floor below: refused, nothing written.
    let key = lab.dir.path().join("names.key");
    let o = forge(&env, &["cache", "keygen", "--name", "names-1", "--out", key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let public = support::stdout(&o).lines().next().unwrap().trim().to_string();
    let publish = |env: &Env, fmt: &str| {
        forge(
            env,
            &[
                "publish",
                "--pins",
                p,
                "--variant",
                "r",
                "--variant",
                "rp",
                "--source",
                source,
                "--python",
                python,
                "--signing-key",
                key.to_str().unwrap(),
                "--out",
                "idx",
                "--format",
                fmt,
            ],
        )
    };
    let o = publish(&env, "human");
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("floor is manylinux_2_28"), "{}", out(&o));
    assert!(!lab.dir.path().join("idx/r").exists(), "nothing published");

    // At the floor: published, each wheel said in words (human and JSON).
    write_pins(&lab, &rev, "2_34");
    let o = publish(&env, "json");
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v: serde_json::Value = serde_json::from_str(&support::stdout(&o)).unwrap();
    let wheels = v["wheels"].as_array().unwrap();
    assert_eq!(wheels.len(), 2, "{v}");
    assert!(wheels.iter().all(|w| w["loads"].as_str().unwrap().starts_with(WORDS)), "{v}");
    let o = publish(&env, "human");
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(support::stdout(&o).matches(WORDS).count() == 2, "{}", out(&o));
    let o = forge(&env, &["publish", "--check", "idx", "--pins", p, "--trusted-key", &public]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    // publish --check holds the index to the floor too.
    write_pins(&lab, &rev, "2_28");
    let o = forge(&env, &["publish", "--check", "idx", "--pins", p, "--trusted-key", &public]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("floor is manylinux_2_28"), "{}", out(&o));
    write_pins(&lab, &rev, "2_34");

    // docker bake passes the label publish served.
    let o = forge(&env, &["docker", "bake", "--pins", p, "--out", "bake.json"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let bake: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lab.dir.path().join("bake.json")).unwrap()).unwrap();
    assert_eq!(bake["target"]["r"]["args"]["DEEPEP_VERSION"], version_of(&exact).as_str(), "{bake}");
    assert_eq!(bake["target"]["rp"]["args"]["DEEPEP_VERSION"], pv.as_str(), "{bake}");

    // A consumer: pin set to each variant's index, the printed next step run as printed, lock check clean.
    let server = support::HttpServer::start(&lab.tools.join("bin/python"), &lab.dir.path().join("idx"));
    let url = format!("http://127.0.0.1:{}", server.port);
    let consumer = lab.dir.path().join("consumer");
    support::copy_dir(&support::root().join("tests/fixtures/consumer-index"), &consumer);
    let c = consumer.to_str().unwrap();
    let trusting = Env::new(&lab, Some(&public));
    for (variant, want) in [("rp", pv.clone()), ("r", version_of(&exact))] {
        let o =
            forge(&trusting, &["pin", "set", &rev, "--project", c, "--pins", p, "--index", &url, "--variant", variant]);
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
        let py = std::fs::read_to_string(consumer.join("pyproject.toml")).unwrap();
        assert!(py.contains(&format!("deep_ep=={want}")), "{variant}: {py}");
        let next = support::stdout(&o)
            .lines()
            .find_map(|l| l.strip_prefix("next: ").map(str::to_string))
            .unwrap_or_else(|| panic!("no next step: {}", out(&o)));
        let o = trusting.printed(&consumer, &next);
        assert_eq!(o.status.code(), Some(0), "{variant}: `{next}` as printed: {}", out(&o));
        assert!(!out(&o).contains("another revision's wheel"), "{}", out(&o));
        let lock = std::fs::read_to_string(consumer.join("uv.lock")).unwrap();
        assert!(lock.contains(&format!("version = \"{want}\"")), "{variant}: {lock}");
    }

    // Installed from the served index by real uv, under the label publish gave.
    let venv = lab.dir.path().join("venv");
    let uv = lab.tools.join("bin/uv");
    let o = env.run(lab.dir.path(), &[uv.to_str().unwrap(), "venv", "-q", venv.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = env.run(
        lab.dir.path(),
        &[
            uv.to_str().unwrap(),
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--python",
            venv.join("bin/python").to_str().unwrap(),
            "--index-url",
            &format!("{url}/rp/simple"),
            &format!("deep_ep=={pv}"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let site = crate::build_support::site_packages(&venv);
    assert!(site.join(format!("deep_ep-{pv}.dist-info/METADATA")).is_file(), "{}", site.display());

    // verify: the patched wheel from the index, rebuilt from its provenance.
    let served = files_with(&lab.dir.path().join("idx/rp/simple/deep-ep"), ".whl").remove(0);
    let o = forge(&env, &["verify", served.to_str().unwrap(), "--source", source, "--python", python]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(support::stdout(&o).starts_with("verified:"), "{}", out(&o));
}

/// Issue 55, item 7: pins.toml's `base_version` gone stale (the pinned revision's setup.py says
/// 1.2.1, pins.toml 1.2.0). `plan` and `pins check` say so and name the label `docker bake`
/// would pass; `publish` serves nothing (no index version an image of the same pins would
/// not install), naming the value to write.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, uv)")]
fn a_stale_base_version_is_named_by_plan_and_pins_check_and_publish_serves_nothing() {
    let lab = Lab::new();
    let short = &lab.rev[..7];
    let label = forge_model::patches::normal_local(short);
    let pins = lab.pins_with(&lab.rev, VARIANTS);
    let text = std::fs::read_to_string(&pins).unwrap();
    assert!(text.contains("base_version = \"1.2.1\""), "{text}");
    std::fs::write(&pins, text.replace("base_version = \"1.2.1\"", "base_version = \"1.2.0\"")).unwrap();
    let p = pins.to_str().unwrap();
    let exe = support::exe().to_str().unwrap().to_string();
    let env = Env::new(&lab, None);
    let forge = |args: &[&str]| env.run(lab.dir.path(), &[&[exe.as_str()][..], args].concat());
    let (python, source) = (lab.python.to_str().unwrap(), lab.repo.to_str().unwrap());

    // The plan fetches DeepEP's URL (the lab's repository behind it) into the cache's mirror.
    let o = forge(&["plan", "--pins", p, "--variant", "r", "--python", python]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let said = format!("says base_version = \"1.2.0\", but the source at {short} gives 1.2.1");
    assert!(out(&o).contains(&said), "{}", out(&o));
    assert!(out(&o).contains("(`publish` refuses it until base_version says 1.2.1)"), "{}", out(&o));

    // pins check reads the revision the plan fetched into the cache's mirror.
    let o = forge(&["pins", "check", "--pins", p]);
    let text = out(&o);
    assert!(text.contains(&format!("base_version = \"1.2.0\", but the source at {short} gives 1.2.1")), "{text}");
    assert!(text.contains(&format!("DEEPEP_VERSION=1.2.0+{label}; set base_version = \"1.2.1\"")), "{text}");
    assert_ne!(o.status.code(), Some(2), "a warning, not bad input: {text}");

    let key = lab.dir.path().join("k.key");
    let o = forge(&["cache", "keygen", "--name", "k-1", "--out", key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let public = lab.dir.path().join("public");
    let o = forge(&[
        "publish",
        "--pins",
        p,
        "--variant",
        "r",
        "--source",
        source,
        "--python",
        python,
        "--no-compiler-cache",
        "--signing-key",
        key.to_str().unwrap(),
        "--out",
        public.to_str().unwrap(),
    ]);
    let text = out(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("nothing published") && text.contains("set base_version = \"1.2.1\""), "{text}");
    assert!(!files_under(&public).iter().any(|f| f.to_string_lossy().ends_with(".whl")), "a wheel was served: {text}");
}
