//! `cargo xtask bench nccl-reuse`: what building NCCL once per submodule commit
//! saves (`builder::nccl_reuse`), and that it changes no byte. Every figure is
//! a whole `build-wheel --no-cache` process (wheel cache off), each ratio
//! against a fresh build measured in the same run:
//! 1. VARIANT at the pin, fresh: no compiler cache, no NCCL reuse (folder 1; baseline);
//! 2. VARIANT at the pin, cold: an empty compiler cache and NCCL store, both filled (folder 2);
//! 3. VARIANT at REV2 (another DeepEP revision, the same NCCL submodule), both warm
//!    (folder 2): goal <= 0.4x of 1;
//! 4. VARIANT2 (another multinode variant, the same arch list) at the pin, both warm
//!    (folder 2): goal <= 0.4x of 5;
//! 5. VARIANT2 at the pin, fresh (folder 1; baseline);
//! 6. VARIANT at REV2, the compiler cache warm but `--no-nccl-reuse` (folder 2): what
//!    the compiler cache alone gives, for comparison with 3;
//!
//! and determinism: 1 and 2 give one sha256, 4 and 5 another. `--steps` splits the
//! run across commands (each step's time and sha256 are kept in `--work`). Default:
//! the mini-deepep fixture made into a git repository with mini-nccl as its
//! `third-party/nccl` submodule, a second revision, and variants `mn`/`mn2`;
//! `--pins`, `--source`, `--python`, `--variant`, `--then` and `--rev2` point it at
//! real DeepEP (e.g. on a GPU machine, from the release build of xtask).
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use xshell::{cmd, Shell};

use super::build::{timed_output, verdict, Sample};
use super::compiler_cache::CacheBenchArgs;

/// The fixture's two multinode variants (one arch list; `mn2` differs in a DeepEP knob only).
const FIXTURE_VARIANTS: &str = include_str!("../../../tests/fixtures/multinode-variants.toml");

/// What the steps build: the pins of the first revision and of REV2, the source, the
/// Python, the variants, extra environment.
struct Setup {
    pins_a: PathBuf,
    pins_b: PathBuf,
    source: Option<OsString>,
    python: Option<OsString>,
    v: String,
    v2: String,
    env: Vec<(&'static str, PathBuf)>,
}

struct Build {
    sample: Sample,
    sha256: String,
    notes: Vec<String>,
}

pub fn run(a: CacheBenchArgs) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let work = std::path::absolute(a.work.clone().unwrap_or_else(|| tmp.path().to_path_buf()))?;
    std::fs::create_dir_all(&work)?;
    let s = if a.pins.is_none() { fixture(&work)? } else { real(&a, &work)? };
    let cc = work.join("compiler-cache");
    let steps = if a.steps.is_empty() { vec![1, 2, 3, 4, 5, 6] } else { a.steps.clone() };
    let (v, v2) = (s.v.as_str(), s.v2.as_str());
    for n in steps {
        let (label, folder, variant, pins, warm, reuse) = match n {
            1 => (format!("1. {v} fresh (no compiler cache, no NCCL reuse)"), "folder-1", v, &s.pins_a, false, false),
            2 => (format!("2. {v} cold (compiler cache and NCCL store filled)"), "folder-2", v, &s.pins_a, true, true),
            3 => (format!("3. {v} at REV2, same NCCL submodule (warm)"), "folder-2", v, &s.pins_b, true, true),
            4 => (format!("4. {v2} after {v}, same arch list (warm)"), "folder-2", v2, &s.pins_a, true, true),
            5 => (format!("5. {v2} fresh (no compiler cache, no NCCL reuse)"), "folder-1", v2, &s.pins_a, false, false),
            6 => (
                format!("6. {v} at REV2, compiler cache only (--no-nccl-reuse)"),
                "folder-2",
                v,
                &s.pins_b,
                true,
                false,
            ),
            _ => anyhow::bail!("step {n}: steps are 1-6"),
        };
        let b = forge(&s, &work.join(folder), variant, pins, warm.then_some(cc.as_path()), reuse)?;
        let notes: Vec<&str> = b
            .notes
            .iter()
            .filter(|n| n.starts_with("nccl reuse") || n.starts_with("compiler cache"))
            .map(String::as_str)
            .collect();
        println!("{label:<60} {:>8.1} s wall  sha256 {}  {}", b.sample.wall.as_secs_f64(), b.sha256, notes.join("; "));
        let rec = serde_json::json!({ "step": n, "variant": variant, "wall": b.sample.wall.as_secs_f64(), "sha256": b.sha256 });
        std::fs::write(work.join(format!("nccl-step-{n}.json")), rec.to_string())?;
    }
    report(&work, v, v2)
}

/// One whole `build-wheel --no-cache` process in `dir` (its own wheel cache folder and
/// NCCL store), the compiler cache `cc` or none, the NCCL reuse on or off.
fn forge(s: &Setup, dir: &Path, variant: &str, pins: &Path, cc: Option<&Path>, reuse: bool) -> Result<Build> {
    std::fs::create_dir_all(dir)?;
    let out = dir.join(format!("out-{variant}"));
    let _ = std::fs::remove_dir_all(&out);
    let request = super::Request {
        pins: pins.to_path_buf(),
        source: s.source.clone(),
        variant: variant.to_string(),
        python: s.python.clone(),
        cache_dir: dir.join("cache"),
    };
    let mut args: Vec<OsString> =
        ["build-wheel", "--no-cache", "--format", "json"].iter().map(OsString::from).collect();
    args.extend(request.args());
    args.extend(["--out".into(), out.into()]);
    match cc {
        Some(d) => args.extend(["--compiler-cache".into(), d.into()]),
        None => args.push("--no-compiler-cache".into()),
    }
    if !reuse {
        args.push("--no-nccl-reuse".into());
    }
    let exe = std::env::current_exe()?;
    let sh = Shell::new()?;
    sh.change_dir(dir);
    let (sample, output) = timed_output(cmd!(sh, "{exe} {args...}").envs(s.env.clone()))?;
    let j: serde_json::Value = serde_json::from_slice(&output.stdout).context("build-wheel --format json output")?;
    let r = &j["results"][0];
    let notes = r["notes"].as_array().into_iter().flatten().filter_map(|n| n.as_str()).map(String::from).collect();
    Ok(Build { sample, sha256: r["sha256"].as_str().unwrap_or("").to_string(), notes })
}

/// Real DeepEP: the given pins, and a copy of them with the x86_64 pin moved to `--rev2`.
fn real(a: &CacheBenchArgs, work: &Path) -> Result<Setup> {
    let pins_a = std::path::absolute(a.pins.as_ref().expect("real pins"))?;
    let rev2 = a.rev2.as_deref().context("--rev2 REV: a DeepEP revision with the same NCCL submodule as the pin")?;
    anyhow::ensure!(rev2.len() == 40 && rev2.bytes().all(|b| b.is_ascii_hexdigit()), "--rev2 takes a full commit sha");
    let pins = forge_model::pins::Pins::load(&pins_a)?;
    let rev = pins.pin(forge_model::pins::Arch::X86_64)?.rev.clone();
    let text = std::fs::read_to_string(&pins_a)?;
    let pins_b = work.join("pins-rev2.toml");
    std::fs::write(&pins_b, text.replace(&rev, rev2))?;
    Ok(Setup {
        pins_a,
        pins_b,
        // Each build runs in its own folder: a relative local path is made absolute here.
        source: a.source.as_deref().map(here),
        python: a.python.as_deref().map(here),
        v: a.variant.clone(),
        v2: a.then.clone().context("--then VARIANT2: a second multinode variant with the same arch list")?,
        env: vec![],
    })
}

/// `p` made absolute when it names something in the current folder (a URL or a
/// command name found on PATH stays as it is).
fn here(p: &str) -> OsString {
    match std::path::absolute(p) {
        Ok(abs) if Path::new(p).exists() => abs.into(),
        _ => p.into(),
    }
}

/// The fixture as real DeepEP is laid out: mini-deepep with mini-nccl as its
/// `third-party/nccl` submodule (commit A), then one more commit that leaves the
/// submodule alone (REV2). Made once in `work/fixture` and reused by later steps.
fn fixture(work: &Path) -> Result<Setup> {
    let t = super::build::tools()?;
    let root = work.join("fixture");
    let (repo, nccl) = (root.join("DeepEP"), root.join("nccl"));
    let revs = root.join("revs.json");
    if !revs.exists() {
        let _ = std::fs::remove_dir_all(&root);
        let project = super::project_root();
        super::build::copy_tree(&project.join("tests/fixtures/mini-nccl"), &nccl)?;
        super::build::copy_tree(&project.join("tests/fixtures/mini-deepep"), &repo)?;
        git(&nccl, &["init", "-q", "-b", "main"])?;
        git(&nccl, &["add", "-A"])?;
        git(&nccl, &["commit", "-qm", "mini-nccl"])?;
        git(&repo, &["init", "-q", "-b", "main"])?;
        git(&repo, &["add", "-A"])?;
        git(&repo, &["commit", "-qm", "mini-deepep"])?;
        git(&repo, &["submodule", "add", "-q", &nccl.to_string_lossy(), "third-party/nccl"])?;
        git(&repo, &["commit", "-qm", "nccl submodule"])?;
        let a = git(&repo, &["rev-parse", "HEAD"])?;
        std::fs::write(repo.join("NEWS"), "another DeepEP revision, the same NCCL\n")?;
        git(&repo, &["add", "NEWS"])?;
        git(&repo, &["commit", "-qm", "news"])?;
        let b = git(&repo, &["rev-parse", "HEAD"])?;
        std::fs::write(&revs, serde_json::json!({ "a": a.trim(), "b": b.trim() }).to_string())?;
    }
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&revs)?)?;
    let pins = |name: &str, rev: &str| -> Result<PathBuf> {
        let p = root.join(name);
        let text = format!(
            "schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbranch = \"main\"\nbase_version = \"1.2.1\"\n[pin.x86_64]\nrev = \"{rev}\"\n[pin.aarch64]\nrev = \"{rev}\"\n{FIXTURE_VARIANTS}"
        );
        std::fs::write(&p, text)?;
        Ok(p)
    };
    Ok(Setup {
        pins_a: pins("pins-a.toml", j["a"].as_str().context("revs.json")?)?,
        pins_b: pins("pins-b.toml", j["b"].as_str().context("revs.json")?)?,
        source: Some(repo.into()),
        python: Some(t.python.clone().into()),
        v: "mn".into(),
        v2: "mn2".into(),
        env: vec![("CUDA_HOME", t.cuda_home().to_path_buf())],
    })
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let sh = Shell::new()?;
    sh.change_dir(dir);
    let id = ["-c", "user.name=bench", "-c", "user.email=bench@invalid", "-c", "protocol.file.allow=always"];
    Ok(cmd!(sh, "git {id...} {args...}")
        .env("GIT_AUTHOR_DATE", "2026-08-17T12:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-08-17T12:00:00Z")
        .quiet()
        .read()?)
}

/// Ratios and sha256 agreement from the steps recorded in `work`.
fn report(work: &Path, v: &str, v2: &str) -> Result<()> {
    let step = |n: u8| -> Option<(f64, String)> {
        let j: serde_json::Value =
            serde_json::from_slice(&std::fs::read(work.join(format!("nccl-step-{n}.json"))).ok()?).ok()?;
        Some((j["wall"].as_f64()?, j["sha256"].as_str()?.to_string()))
    };
    if let (Some((f, _)), Some((w, _))) = (step(1), step(3)) {
        let r = w / f;
        println!("{v} at REV2 (same NCCL) / {v} fresh: {r:.3}x  [{} goal <= 0.4x]", verdict(r <= 0.4));
    }
    if let (Some((w, _)), Some((f, _))) = (step(4), step(5)) {
        let r = w / f;
        println!("{v2} after {v} (same arch list) / {v2} fresh: {r:.3}x  [{} goal <= 0.4x]", verdict(r <= 0.4));
    }
    if let (Some((f, _)), Some((w, _))) = (step(1), step(6)) {
        println!("{v} at REV2, compiler cache only / {v} fresh: {:.3}x  (for comparison with step 3)", w / f);
    }
    let mut ok = true;
    for (name, ns) in [(v, [1u8, 2]), (&format!("{v} at REV2"), [3, 6]), (v2, [4, 5])] {
        let (Some((_, x)), Some((_, y))) = (step(ns[0]), step(ns[1])) else { continue };
        let same = x == y && !x.is_empty();
        ok &= same;
        println!(
            "determinism {name} (steps {}, {}): {}",
            ns[0],
            ns[1],
            if same { format!("ok, one sha256 {x}") } else { "DIFFERENT sha256s".into() }
        );
    }
    anyhow::ensure!(ok, "builds with and without the NCCL reuse gave different wheels");
    Ok(())
}
