//! `lock check`'s environment rules (lock-torch, lock-nvshmem, lock-nccl, lock-torch-min,
//! lock-nvshmem-min) on NeMo-RL's
//! real uv.lock (main, 2026-08-22: torch 2.11.0+cu130, nvidia-nvshmem-cu13 3.7.2,
//! nvidia-nccl-cu13 2.30.7), as it is and with one version changed, against
//! pins.toml files that build an EPv2 (`main`) or a `hybrid-ep` pin.
use std::path::Path;

use crate::support::*;

const X86: &str = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";
const ARM: &str = "a48493600c4886c1b297aaa78db0e1ebc2d8dd6c";

/// DeepEP stand-ins as git repositories, each (repository, commit): EPv2 (mini-deepep-v2)
/// and HybridEP (mini-deepep). What a revision is comes from its source (`lock check
/// --source`), never from pins.toml's `branch`.
struct Deepep {
    _dir: tempfile::TempDir,
    v2: (std::path::PathBuf, String),
    hybrid: (std::path::PathBuf, String),
}

fn deepep() -> Deepep {
    let dir = tempfile::tempdir().unwrap();
    let v2 = dir.path().join("DeepEP-v2");
    let v2_rev = git_repo_from_fixture("mini-deepep-v2", &v2);
    let hybrid = dir.path().join("DeepEP-hybrid");
    let hybrid_rev = git_repo_from_fixture("mini-deepep", &hybrid);
    Deepep { _dir: dir, v2: (v2, v2_rev), hybrid: (hybrid, hybrid_rev) }
}

/// A pins.toml pinning `rev` for both architectures, on `branch` with `base`, and this `[toolchain]`.
fn pins_at(rev: &str, branch: &str, base: &str, toolchain: &str) -> String {
    pins(branch, base, toolchain).replace(X86, rev).replace(ARM, rev)
}

/// A pins.toml pinning NeMo-RL main's revisions, on `branch` with `base`, and this `[toolchain]`.
fn pins(branch: &str, base: &str, toolchain: &str) -> String {
    format!(
        "schema = 2\n\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\n\
         branch = \"{branch}\"\nbase_version = \"{base}\"\n\n[pin.x86_64]\nrev = \"{X86}\"\n\n[pin.aarch64]\nrev = \"{ARM}\"\n\n\
         [toolchain]\n{toolchain}\n\n\
         [[variant]]\nname = \"h100\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\n\n\
         [[variant]]\nname = \"gb200\"\narch = \"aarch64\"\ncuda_arch_list = \"10.0\"\nmultinode = false\n"
    )
}

const EXACT: &str = "torch = \"2.11.0\"\ncuda = \"13.0\"\nnvshmem = \"3.7.2\"\nnccl = \"2.30.7\"";

/// NeMo-RL main's pyproject.toml and uv.lock (the lock through `edit`) and `pins` in a temp folder.
fn project(pins_text: &str, edit: &dyn Fn(String) -> String) -> tempfile::TempDir {
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl").join("2026-08-22-main");
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(f.join("pyproject.toml"), d.path().join("pyproject.toml")).unwrap();
    let lock = std::fs::read_to_string(f.join("uv.lock")).unwrap();
    let edited = edit(lock);
    std::fs::write(d.path().join("uv.lock"), edited).unwrap();
    std::fs::write(d.path().join("pins.toml"), pins_text).unwrap();
    d
}

/// Replace the `version = ...` line right after `name = "<name>"` in uv.lock.
fn set_version(lock: String, name: &str, from: &str, to: &str) -> String {
    let old = format!("name = \"{name}\"\nversion = \"{from}\"\n");
    assert!(lock.contains(&old), "{old}");
    lock.replacen(&old, &format!("name = \"{name}\"\nversion = \"{to}\"\n"), 1)
}

/// `lock check --format json` reading DeepEP's revisions from `source` (a cache in `dir`).
fn check_with(dir: &Path, source: &Path) -> (i32, serde_json::Value) {
    let o = bin()
        .args(["lock", "check", "--format", "json", "--project", ".", "--source"])
        .arg(source)
        .current_dir(dir)
        .env("XDG_CACHE_HOME", dir.join(".cache"))
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    (o.status.code().unwrap(), v)
}

/// The findings of the environment rules: (rule, severity, arch, line, expected, found, fix).
fn env_findings(v: &serde_json::Value) -> Vec<(String, String, String, u64, String, String, String)> {
    let s = |f: &serde_json::Value, k: &str| f[k].as_str().unwrap_or("").to_string();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            let ids = ["lock-torch", "lock-nvshmem", "lock-nccl", "lock-torch-min", "lock-nvshmem-min"];
            f["rule"].as_str().is_some_and(|r| ids.contains(&r))
        })
        .map(|f| {
            (
                s(f, "rule"),
                s(f, "severity"),
                s(f, "arch"),
                f["line"].as_u64().unwrap_or(0),
                s(f, "expected"),
                s(f, "found"),
                s(f, "fix"),
            )
        })
        .collect()
}

fn line_of(dir: &Path, needle: &str) -> u64 {
    std::fs::read_to_string(dir.join("uv.lock")).unwrap().lines().position(|l| l == needle).unwrap() as u64 + 1
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nemo_rl_main_locks_the_environment_an_epv2_build_with_its_versions_needs() {
    let dp = deepep();
    let d = project(&pins_at(&dp.v2.1, "main", "2.1.0", EXACT), &|t| t);
    let (_, v) = check_with(d.path(), &dp.v2.0);
    assert_eq!(env_findings(&v), vec![], "{v:#}");
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn an_older_nccl_in_the_lock_fails_an_epv2_pin_with_the_override_fix() {
    let dp = deepep();
    // torch 2.11's own pin: what uv locks without NeMo-RL's override.
    let older = |t: String| set_version(t, "nvidia-nccl-cu13", "2.30.7", "2.28.9");
    let no_nccl = "torch = \"2.11.0\"\ncuda = \"13.0\"\nnvshmem = \"3.7.2\"";
    let d = project(&pins_at(&dp.v2.1, "main", "2.1.0", no_nccl), &older);
    let line = line_of(d.path(), "name = \"nvidia-nccl-cu13\"");
    let (code, v) = check_with(d.path(), &dp.v2.0);
    assert_eq!(code, 1, "{v:#}");
    let fix = "add \"nvidia-nccl-cu13>=2.30.4\" to [tool.uv] override-dependencies in pyproject.toml (torch pins its own NCCL), then uv lock";
    let want: Vec<_> = ["x86_64", "aarch64"]
        .iter()
        .map(|a| {
            ("lock-nccl".into(), "error".into(), a.to_string(), line, ">=2.30.4".into(), "2.28.9".into(), fix.into())
        })
        .collect();
    assert_eq!(env_findings(&v), want, "{v:#}");
    // both architectures' findings form one cause with that one fix
    let cause = v["causes"].as_array().unwrap().iter().find(|c| c["id"] == "lock-nccl").expect("a lock-nccl cause");
    assert_eq!((cause["fix"].as_str(), cause["findings"].as_array().unwrap().len()), (Some(fix), 2), "{cause:#}");

    // With the build's NCCL recorded below 2.31, the run time must be that very version.
    let d = project(&pins_at(&dp.v2.1, "main", "2.1.0", EXACT), &|t| {
        set_version(t, "nvidia-nccl-cu13", "2.30.7", "2.30.4")
    });
    let (code, v) = check_with(d.path(), &dp.v2.0);
    let f = env_findings(&v);
    assert!(code == 1 && f.len() == 2 && f[0].4 == "==2.30.7" && f[0].5 == "2.30.4", "{f:?}");
    assert!(f[0].6.contains("\"nvidia-nccl-cu13==2.30.7\""), "{f:?}");
    assert!(f[0].6.ends_with("; or set [toolchain] nccl = \"2.30.4\" in pins.toml and rebuild the variants"), "{f:?}");

    // A [toolchain] nccl below the need cannot build main (build-wheel's preflight): the lock meets the need.
    let d = project(
        &pins_at(
            &dp.v2.1,
            "main",
            "2.1.0",
            "torch = \"2.11.0\"\ncuda = \"13.0\"\nnvshmem = \"3.7.2\"\nnccl = \"2.28.9\"",
        ),
        &|t| t,
    );
    assert_eq!(env_findings(&check_with(d.path(), &dp.v2.0).1), vec![]);

    // A hybrid-ep pin has no NCCL need: the same lock says nothing about NCCL.
    let d = project(&pins_at(&dp.hybrid.1, "hybrid-ep", "1.2.1", no_nccl), &older);
    assert_eq!(env_findings(&check_with(d.path(), &dp.hybrid.0).1), vec![]);
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nvshmem_and_torch_differing_from_the_build_are_errors_at_their_lock_lines() {
    let dp = deepep();
    // The case: the registry toolchain built with torch's NVSHMEM 3.4.5, the lock has 3.7.2.
    let tc = "torch = \"2.11.0\"\ncuda = \"13.0\"\nnvshmem = \"3.4.5\"\nnccl = \"2.30.7\"";
    let d = project(&pins_at(&dp.v2.1, "main", "2.1.0", tc), &|t| t);
    let (code, v) = check_with(d.path(), &dp.v2.0);
    let f = env_findings(&v);
    let line = line_of(d.path(), "name = \"nvidia-nvshmem-cu13\"");
    assert!(code == 1 && f.len() == 2, "{f:?}");
    assert_eq!((f[0].0.as_str(), f[0].1.as_str(), f[0].3), ("lock-nvshmem", "error", line));
    assert_eq!((f[0].4.as_str(), f[0].5.as_str()), ("3.4.5", "3.7.2"));
    assert!(f[0].6.starts_with("set [toolchain] nvshmem = \"3.7.2\""), "{}", f[0].6);
    assert!(f[0].6.contains("\"nvidia-nvshmem-cu13==3.4.5\" to [tool.uv] override-dependencies"), "{}", f[0].6);

    // Without [toolchain] nvshmem the build's NVSHMEM is torch's pin: said as a note, not guessed.
    let d =
        project(&pins_at(&dp.v2.1, "main", "2.1.0", "torch = \"2.11.0\"\ncuda = \"13.0\"\nnccl = \"2.30.7\""), &|t| t);
    let f = env_findings(&check_with(d.path(), &dp.v2.0).1);
    assert!(f.len() == 2 && f.iter().all(|x| x.0 == "lock-nvshmem" && x.1 == "note"), "{f:?}");

    // torch: another release, and the same release for another CUDA.
    let torch_line = line_of(d.path(), "name = \"torch\"");
    for (toolchain, found) in [
        ("torch = \"2.10.0\"\ncuda = \"13.0\"\nnvshmem = \"3.7.2\"", "2.11.0+cu130"),
        ("torch = \"2.11.0\"\ncuda = \"12.8\"\nnvshmem = \"3.7.2\"", "2.11.0+cu130"),
    ] {
        let d = project(&pins_at(&dp.hybrid.1, "hybrid-ep", "1.2.1", toolchain), &|t| t);
        let (code, v) = check_with(d.path(), &dp.hybrid.0);
        let f = env_findings(&v);
        assert!(code == 1 && f.len() == 2, "{toolchain}: {f:?}");
        assert_eq!((f[0].0.as_str(), f[0].3, f[0].5.as_str()), ("lock-torch", torch_line, found), "{f:?}");
        let human = stdout(&forge(d.path(), &["lock", "check", "--project", "."]));
        assert!(human.contains("fails with `undefined symbol`"), "{human}");
    }
}

/// Issue 30 §3: the mini-deepep-v2 revision states "PyTorch 2.10 and above" (README.md:29) and
/// "NVSHMEM v3.3.9 or later" (docs/nvshmem.md:6); a lock below either is an error at the
/// package's table, even when pins.toml's [toolchain] builds with the same old version.
#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn a_torch_or_nvshmem_older_than_the_pinned_revision_states_is_an_error_at_its_table() {
    let dp = deepep();
    let older_torch = |t: String| set_version(t, "torch", "2.11.0+cu130", "2.9.1+cu130");
    let tc = "torch = \"2.9.1\"\ncuda = \"13.0\"\nnvshmem = \"3.7.2\"\nnccl = \"2.30.7\"";
    let d = project(&pins_at(&dp.v2.1, "main", "2.1.0", tc), &older_torch);
    let line = line_of(d.path(), "name = \"torch\"");
    let (code, v) = check_with(d.path(), &dp.v2.0);
    assert_eq!(code, 1, "{v:#}");
    let f = env_findings(&v);
    let got: Vec<_> =
        f.iter().map(|x| (x.0.as_str(), x.1.as_str(), x.2.as_str(), x.3, x.4.as_str(), x.5.as_str())).collect();
    assert_eq!(
        got,
        vec![
            ("lock-torch-min", "error", "x86_64", line, ">=2.10", "2.9.1+cu130"),
            ("lock-torch-min", "error", "aarch64", line, ">=2.10", "2.9.1+cu130"),
        ],
        "{v:#}"
    );
    assert!(f[0].6.starts_with("lock torch>=2.10"), "{}", f[0].6);
    let msg =
        v["findings"].as_array().unwrap().iter().find(|x| x["rule"] == "lock-torch-min").unwrap()["message"].clone();
    assert!(
        msg.as_str().unwrap().contains("states \"PyTorch 2.10 and above\" (README.md:29 at that revision)"),
        "{msg}"
    );
    // The hybrid-ep stand-in states no torch minimum: nothing to judge.
    let d = project(&pins_at(&dp.hybrid.1, "hybrid-ep", "1.2.1", tc), &older_torch);
    assert!(env_findings(&check_with(d.path(), &dp.hybrid.0).1).iter().all(|x| x.0 != "lock-torch-min"));

    // NVSHMEM 3.3.0 locked (and built: no lock-nvshmem), below the revision's 3.3.9.
    let older_nvshmem = |t: String| set_version(t, "nvidia-nvshmem-cu13", "3.7.2", "3.3.0");
    let tc = "torch = \"2.11.0\"\ncuda = \"13.0\"\nnvshmem = \"3.3.0\"\nnccl = \"2.30.7\"";
    let d = project(&pins_at(&dp.v2.1, "main", "2.1.0", tc), &older_nvshmem);
    let line = line_of(d.path(), "name = \"nvidia-nvshmem-cu13\"");
    let (code, v) = check_with(d.path(), &dp.v2.0);
    let f = env_findings(&v);
    assert!(code == 1 && f.len() == 2, "{f:?}");
    assert!(f.iter().all(|x| x.0 == "lock-nvshmem-min" && x.3 == line && x.4 == ">=3.3.9" && x.5 == "3.3.0"), "{f:?}");
}

#[test]
fn too_many_environment_tables_are_bad_input_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["pyproject.toml", "uv.lock"] {
        std::fs::copy(root().join("tests/fixtures/consumer-unified").join(f), dir.path().join(f)).unwrap();
    }
    let mut lock = std::fs::read_to_string(dir.path().join("uv.lock")).unwrap();
    for i in 0..65 {
        lock.push_str(&format!(
            "\n[[package]]\nname = \"torch\"\nversion = \"2.{i}.0\"\nsource = {{ registry = \"https://pypi.org/simple\" }}\n"
        ));
    }
    std::fs::write(dir.path().join("uv.lock"), lock).unwrap();
    let o = forge(dir.path(), &["lock", "check", "--no-pins", "--project", "."]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("uv.lock: more than 64 torch/nvidia-nvshmem/nvidia-nccl package tables"),
        "{}",
        stderr(&o)
    );
}

/// Real `uv lock` of `project`, offline, from the stand-in wheels in `links` only.
fn uv_lock_offline(tools: &Path, project: &Path, links: &Path, cache: &Path) {
    let o = std::process::Command::new(tools.join("bin/uv"))
        .args(["lock", "-q", "--offline", "--no-index", "--find-links"])
        .arg(links)
        .arg("--python")
        .arg(tools.join("bin/python"))
        .current_dir(project)
        .env("UV_CACHE_DIR", cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "uv lock: {}", String::from_utf8_lossy(&o.stderr));
}

/// A metadata-only wheel in `links` (uv resolves from its METADATA).
fn stub_wheel(links: &Path, name: &str, version: &str, requires: &[&str]) {
    use std::io::Write;
    let dist = name.replace('-', "_");
    let di = format!("{dist}-{version}.dist-info");
    let mut meta = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
    for r in requires {
        meta.push_str(&format!("Requires-Dist: {r}\n"));
    }
    let members = [
        (format!("{di}/METADATA"), meta),
        (
            format!("{di}/WHEEL"),
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n".into(),
        ),
        (format!("{di}/RECORD"), format!("{di}/METADATA,,\n{di}/WHEEL,,\n{di}/RECORD,,\n")),
    ];
    let mut z =
        zip::ZipWriter::new(std::fs::File::create(links.join(format!("{dist}-{version}-py3-none-any.whl"))).unwrap());
    for (n, b) in members {
        z.start_file(n, zip::write::SimpleFileOptions::default()).unwrap();
        z.write_all(b.as_bytes()).unwrap();
    }
    z.finish().unwrap();
}

/// What uv does with torch's own NCCL pin, and that `lock-nccl`'s printed fix, applied as
/// printed and relocked with real uv, clears it (stand-in wheels: torch 2.11.0 requiring
/// `nvidia-nccl-cu13==2.28.9` as the real one does, and NCCL 2.28.9 / 2.30.7).
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn torchs_nccl_pin_is_what_uv_locks_and_the_printed_override_fixes_it() {
    let dp = deepep();
    let tools = require!(tools_venv(), "the tools venv");
    let d = tempfile::tempdir().unwrap();
    let links = d.path().join("links");
    std::fs::create_dir(&links).unwrap();
    stub_wheel(&links, "torch", "2.11.0", &["nvidia-nccl-cu13==2.28.9"]);
    stub_wheel(&links, "nvidia-nccl-cu13", "2.28.9", &[]);
    stub_wheel(&links, "nvidia-nccl-cu13", "2.30.7", &[]);
    let project = d.path().join("consumer");
    std::fs::create_dir(&project).unwrap();
    let head = "[project]\nname = \"consumer\"\nversion = \"0.1.0\"\nrequires-python = \">=3.10\"\ndependencies = [\"torch==2.11.0\"]\n";
    let deep_ep = format!(
        "\n[project.optional-dependencies]\nep = [\"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@{X86}\"]\n"
    );
    let uv_lock = |pyproject: &str| {
        std::fs::write(project.join("pyproject.toml"), pyproject).unwrap();
        uv_lock_offline(&tools, &project, &links, &d.path().join("uv-cache"));
    };
    std::fs::write(
        project.join("pins.toml"),
        pins_at(&dp.v2.1, "main", "2.1.0", "torch = \"2.11.0\"\ncuda = \"13.0\""),
    )
    .unwrap();
    // uv locks torch's pin.
    uv_lock(head);
    let lock = std::fs::read_to_string(project.join("uv.lock")).unwrap();
    assert!(lock.contains("name = \"nvidia-nccl-cu13\"\nversion = \"2.28.9\"\n"), "{lock}");
    // The project adds DeepEP main (after locking: the check reads the files, uv is offline).
    std::fs::write(project.join("pyproject.toml"), format!("{head}{deep_ep}")).unwrap();
    let (code, v) = check_with(&project, &dp.v2.0);
    let f = env_findings(&v);
    assert!(code == 1 && !f.is_empty() && f.iter().all(|x| x.0 == "lock-nccl" && x.5 == "2.28.9"), "{v:#}");
    let fix = &f[0].6;
    let entry = fix.strip_prefix("add \"").and_then(|r| r.split_once('"')).map(|(e, _)| e).unwrap();
    assert!(
        fix.contains("to [tool.uv] override-dependencies in pyproject.toml") && fix.ends_with("then uv lock"),
        "{fix}"
    );
    // The fix as printed: the override entry, then uv lock.
    let fixed = format!("{head}\n[tool.uv]\noverride-dependencies = [\"{entry}\"]\n");
    uv_lock(&fixed);
    let lock = std::fs::read_to_string(project.join("uv.lock")).unwrap();
    assert!(lock.contains("name = \"nvidia-nccl-cu13\"\nversion = \"2.30.7\"\n"), "uv overrides torch's pin: {lock}");
    std::fs::write(project.join("pyproject.toml"), format!("{fixed}{deep_ep}")).unwrap();
    assert_eq!(env_findings(&check_with(&project, &dp.v2.0).1), vec![]);
}

/// tests/fixtures/consumer-forks (uv 0.13.9's lock of its pyproject.toml, see
/// `uv_writes_the_forks_fixture_as_it_is`) and `pins` in a temp folder.
fn forks(pins_text: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for f in ["pyproject.toml", "uv.lock"] {
        std::fs::copy(root().join("tests/fixtures/consumer-forks").join(f), d.path().join(f)).unwrap();
    }
    std::fs::write(d.path().join("pins.toml"), pins_text).unwrap();
    d
}

/// A table without resolution-markers installs only where the project's dependency edges
/// reach it: `nvidia-nccl-cu12` (through vllm's `platform_machine == 'x86_64'` edge) is judged
/// on x86_64 only; the darwin torch is judged nowhere; `nvidia-nccl-cu13` (torch's unmarked
/// edge, torch on linux) on both.
#[test]
fn a_table_reached_only_through_x86_64_edges_is_judged_on_x86_64_only() {
    let dp = deepep();
    let d = forks(&pins_at(&dp.v2.1, "main", "2.1.0", "torch = \"2.11.0\"\ncuda = \"13.0\""));
    let (code, v) = check_with(d.path(), &dp.v2.0);
    let cu12 = line_of(d.path(), "name = \"nvidia-nccl-cu12\"");
    let cu13 = line_of(d.path(), "name = \"nvidia-nccl-cu13\"");
    let got: Vec<(String, String, u64)> = env_findings(&v).into_iter().map(|f| (f.0, f.2, f.3)).collect();
    let want: Vec<(String, String, u64)> = [("x86_64", cu12), ("x86_64", cu13), ("aarch64", cu13)]
        .iter()
        .map(|(a, l)| ("lock-nccl".to_string(), a.to_string(), *l))
        .collect();
    let mut sorted = got.clone();
    sorted.sort();
    let mut want_sorted = want;
    want_sorted.sort();
    assert_eq!((code, sorted), (1, want_sorted), "{v:#}");
    // torch 2.11.0 on linux is the toolchain's: the darwin-only 2.9.0 table is no finding.
    assert!(!got.iter().any(|f| f.0 == "lock-torch"), "{v:#}");
}

/// The fixture is what uv 0.13.9 writes for its pyproject.toml (stand-in wheels with the
/// markers real ones carry): the shapes the graph reads are uv's, not invented.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn uv_writes_the_forks_fixture_as_it_is() {
    let tools = require!(tools_venv(), "the tools venv");
    let d = tempfile::tempdir().unwrap();
    let links = d.path().join("links");
    std::fs::create_dir(&links).unwrap();
    stub_wheel(&links, "torch", "2.11.0", &["nvidia-nccl-cu13==2.28.9; platform_system == 'Linux'"]);
    stub_wheel(&links, "torch", "2.9.0", &[]);
    stub_wheel(&links, "nvidia-nccl-cu13", "2.28.9", &[]);
    stub_wheel(&links, "nvidia-nccl-cu12", "2.27.3", &[]);
    stub_wheel(
        &links,
        "vllm",
        "0.11.0",
        &["torch==2.11.0; sys_platform == 'linux'", "nvidia-nccl-cu12==2.27.3; platform_machine == 'x86_64'"],
    );
    let project = d.path().join("consumer");
    std::fs::create_dir(&project).unwrap();
    let fixture = root().join("tests/fixtures/consumer-forks");
    // DeepEP's git requirement is added after locking (uv is offline), as in the fixture's history.
    let py = std::fs::read_to_string(fixture.join("pyproject.toml")).unwrap();
    let without_ep: String = py.lines().filter(|l| !l.starts_with("ep = ")).map(|l| format!("{l}\n")).collect();
    std::fs::write(project.join("pyproject.toml"), without_ep).unwrap();
    uv_lock_offline(&tools, &project, &links, &d.path().join("uv-cache"));
    let lock = std::fs::read_to_string(project.join("uv.lock")).unwrap();
    let want = std::fs::read_to_string(fixture.join("uv.lock")).unwrap();
    let links = links.to_str().unwrap();
    let as_fixture = lock.replace(&format!("{links}/"), "").replace(links, "https://pypi.org/simple");
    assert_eq!(as_fixture, want);
}

/// What a revision is comes from its source, never from pins.toml's `branch`: an EPv2 commit
/// left under `branch = "hybrid-ep"` (what `pin set` used to leave) is judged as EPv2, a
/// HybridEP commit under `branch = "main"` is not; a revision whose source is not read gets
/// a note, not a guess.
#[test]
fn the_generation_comes_from_the_source_not_the_branch_name() {
    let dp = deepep();
    let tc = "torch = \"2.11.0\"\ncuda = \"13.0\"";
    let d = forks(&pins_at(&dp.v2.1, "hybrid-ep", "1.2.1", tc));
    let (code, v) = check_with(d.path(), &dp.v2.0);
    let f = env_findings(&v);
    assert!(code == 1 && f.len() == 3 && f.iter().all(|x| x.0 == "lock-nccl" && x.1 == "error"), "{v:#}");
    let d = forks(&pins_at(&dp.hybrid.1, "main", "2.1.0", tc));
    assert_eq!(env_findings(&check_with(d.path(), &dp.hybrid.0).1), vec![]);
    // Without --source and with nothing in the cache's mirror: a note per architecture, the fix names --source.
    let o = bin()
        .args(["lock", "check", "--format", "json", "--project", "."])
        .current_dir(d.path())
        .env("XDG_CACHE_HOME", d.path().join(".cache"))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = env_findings(&v);
    assert!(f.len() == 2 && f.iter().all(|x| x.0 == "lock-nccl" && x.1 == "note"), "{v:#}");
    assert!(f[0].6.starts_with("deepep-forge lock check --source "), "{f:?}");
}
