//! Whole-process tests of `lock check`: NeMo-RL's real files (when its
//! fixture folder next to the checkout is present) and our own consumer fixtures.
use crate::support;
use std::path::{Path, PathBuf};

use crate::support::*;

pub(crate) const X86: &str = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";
pub(crate) const ARM: &str = "a48493600c4886c1b297aaa78db0e1ebc2d8dd6c";
const UNIFIED: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";

/// The shipped pins.toml with each architecture pinned as given.
fn pins_text(x86: &str, arm: &str) -> String {
    let t = std::fs::read_to_string(root().join("pins.toml")).unwrap();
    let t = t.replacen(&format!("[pin.x86_64]\nrev = \"{UNIFIED}\""), &format!("[pin.x86_64]\nrev = \"{x86}\""), 1);
    let t = t.replacen(&format!("[pin.aarch64]\nrev = \"{UNIFIED}\""), &format!("[pin.aarch64]\nrev = \"{arm}\""), 1);
    assert!(t.contains(x86) && t.contains(arm));
    t
}

/// A temp dir holding pins.toml; returns it as the working directory.
fn workdir(x86: &str, arm: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("pins.toml"), pins_text(x86, arm)).unwrap();
    d
}

fn json(cwd: &Path, project: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec!["lock", "check", "--format", "json", "--project", project.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = forge(cwd, &args);
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    (o.status.code().unwrap(), v)
}

/// (rule, arch, file name, line) of every finding.
fn rules(v: &serde_json::Value) -> Vec<(String, String, String, u64)> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let file = PathBuf::from(f["file"].as_str().unwrap()).file_name().unwrap().to_string_lossy().into_owned();
            (
                f["rule"].as_str().unwrap().into(),
                f["arch"].as_str().unwrap_or("-").into(),
                file,
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn has(v: &serde_json::Value, rule: &str, arch: &str, file: &str) -> bool {
    rules(v).iter().any(|(r, a, f, _)| r == rule && a == arch && f == file)
}

/// The 1-based line of the first line of `file` containing `needle`.
fn line_of(file: &Path, needle: &str) -> u64 {
    std::fs::read_to_string(file).unwrap().lines().position(|l| l.contains(needle)).unwrap() as u64 + 1
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nemo_rl_2026_06_08_stale_label_has_stale_label_and_stale_lock() {
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    let dir = workdir(X86, ARM);
    let p = f.join("2026-06-08-stale-label");
    let (code, v) = json(dir.path(), &p, &[]);
    assert_eq!(code, 1);
    let label_line = line_of(&p.join("pyproject.toml"), "version = \"v1.2.1+bfded34\"");
    for arch in ["x86_64", "aarch64"] {
        assert!(
            rules(&v).contains(&("stale-label".into(), arch.into(), "pyproject.toml".into(), label_line)),
            "{:#?}",
            rules(&v)
        );
    }
    let override_line = line_of(&p.join("uv.lock"), "rev=bfded34800dfec415b71503f8205181de90b2480\" }");
    assert!(
        rules(&v).contains(&("lock-stale".into(), "x86_64".into(), "uv.lock".into(), override_line)),
        "{:#?}",
        rules(&v)
    );
    assert!(!has(&v, "lock-stale", "aarch64", "uv.lock"), "the lock is right for aarch64: {:#?}", rules(&v));
    assert!(has(&v, "label-split", "-", "pyproject.toml"));
    assert_eq!(v["checked"]["uv_lock"].as_str().map(|s| s.ends_with("uv.lock")), Some(true));
}

/// `lock` with a comment on the `name = ` line of each `[[package]]` table: the
/// same TOML on the same lines, but not the shape uv writes, so every table is
/// read by the `toml` parser instead of lockgraph's hand scanner.
fn every_table_by_toml(lock: &str) -> String {
    let mut out = String::with_capacity(lock.len() + 8 * 1024);
    let mut after = false;
    for l in lock.split_inclusive('\n') {
        match l.strip_suffix('\n') {
            Some(body) if after && body.starts_with("name = ") => out.push_str(&format!("{body} # toml\n")),
            _ => out.push_str(l),
        }
        after = l == "[[package]]\n";
    }
    out
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nemo_rl_locks_give_the_same_graph_by_the_scanner_and_by_toml() {
    use forge_model::lockgraph::installs;
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    let mut locks = 0;
    for e in std::fs::read_dir(&f).unwrap() {
        let Ok(text) = std::fs::read_to_string(e.unwrap().path().join("uv.lock")) else { continue };
        locks += 1;
        let tables = text.matches("\n[[package]]\n").count();
        let odd = every_table_by_toml(&text);
        for project in [Some("nemo-rl"), None, Some("not-there")] {
            let path = Path::new("uv.lock");
            let (a, b) = (installs(path, &text, project).unwrap(), installs(path, &odd, project).unwrap());
            // nearly every table is uv's shape (the members' with [package.metadata] are not)
            assert!(a.scanned * 10 >= tables * 9 && b.scanned == 0, "{} of {tables}, {}", a.scanned, b.scanned);
            assert!(a.tables.len() > 100 || project == Some("not-there"), "{}", a.tables.len());
            assert_eq!((a.rooted, &a.tables), (b.rooted, &b.tables), "{project:?}");
        }
        // The DeepEP references: thinned tables against the whole file parsed by toml
        // (a triple quote in a trailing comment forces the whole parse).
        let name = "deep_ep".parse().unwrap();
        let read = |t: &str| {
            let r = forge_lock::lock::uvlock::read(Path::new("uv.lock"), t, &name, Some("nemo-rl")).unwrap();
            format!("{r:?}")
        };
        assert_eq!(read(&text), read(&format!("{text}# '''\n")));
    }
    assert!(locks >= 3, "{locks} locks under {}", f.display());
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nemo_rl_2026_06_08_label_fixed_still_has_a_stale_lock() {
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    let dir = workdir(X86, ARM);
    let (code, v) = json(dir.path(), &f.join("2026-06-08-label-fixed"), &[]);
    assert_eq!(code, 1);
    assert!(!has(&v, "stale-label", "x86_64", "pyproject.toml"), "the x86 label is fixed: {:#?}", rules(&v));
    assert!(has(&v, "stale-label", "aarch64", "pyproject.toml"));
    assert!(has(&v, "lock-stale", "x86_64", "uv.lock"));
    assert!(has(&v, "lock-label", "x86_64", "uv.lock"));
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nemo_rl_2026_08_22_main_has_aarch64_label_mismatch_and_split() {
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    let dir = workdir(X86, ARM);
    let p = f.join("2026-08-22-main");
    let (code, v) = json(dir.path(), &p, &[]);
    assert_eq!(code, 1);
    let r = rules(&v);
    assert!(
        has(&v, "stale-label", "aarch64", "pyproject.toml") && !has(&v, "stale-label", "x86_64", "pyproject.toml"),
        "{r:#?}"
    );
    assert!(has(&v, "label-split", "-", "pyproject.toml"), "{r:#?}");
    // the aarch64 package is labelled with the x86 short sha
    assert!(has(&v, "lock-label", "aarch64", "uv.lock"), "{r:#?}");
    assert!(!r.iter().any(|(rule, ..)| rule == "lock-stale" || rule == "rev-mismatch"), "revisions agree: {r:#?}");
    // the transitive deep-ep under nemo-automodel's moe extra is a note, not an error
    let notes: Vec<&serde_json::Value> =
        v["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == "transitive-pin").collect();
    assert_eq!(notes.len(), 2);
    assert!(notes.iter().all(|n| n["severity"] == "note" && n["found"] == "7febc6e25660af0f54d95dd781ecdcd62265ecca"));
    assert_eq!(
        v["errors"].as_u64().unwrap(),
        v["findings"].as_array().unwrap().iter().filter(|f| f["severity"] == "error").count() as u64
    );
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nemo_rl_2026_08_17_unified_pin_is_clean_against_the_shipped_pins() {
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    let o = forge(&root(), &["lock", "check", "--project", f.join("2026-08-17-unified-pin").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("uv.lock not found (lock not checked)"), "{}", stdout(&o));
    // the same pyproject against another pin is not clean
    let dir = workdir(X86, X86);
    let (code, v) = json(dir.path(), &f.join("2026-08-17-unified-pin"), &[]);
    assert_eq!(code, 1);
    assert!(has(&v, "rev-mismatch", "x86_64", "pyproject.toml") && has(&v, "stale-label", "aarch64", "pyproject.toml"));
}

#[test]
fn own_unified_fixture_is_clean_and_the_transitive_pin_is_a_note() {
    let (code, v) = json(&root(), Path::new("tests/fixtures/consumer-unified"), &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["schema"], 2);
    assert_eq!(v["checked"]["pyproject"], "tests/fixtures/consumer-unified/pyproject.toml");
    assert_eq!(v["checked"]["uv_lock"], "tests/fixtures/consumer-unified/uv.lock");
    assert_eq!(v["checked"]["dockerfiles"], serde_json::json!([]));
    assert_eq!(v["intent"]["x86_64"], UNIFIED);
    assert_eq!(rules(&v).iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["transitive-pin", "transitive-pin"]);
}

#[test]
fn own_split_fixture_against_its_own_intent_reports_the_split() {
    let dir = workdir(X86, ARM);
    let p = root().join("tests/fixtures/consumer-split");
    for extra in [&[][..], &["--no-pins"][..]] {
        let (code, v) = json(dir.path(), &p, extra);
        assert_eq!(code, 1);
        let r = rules(&v);
        let label = line_of(&p.join("pyproject.toml"), "version = \"v1.2.1+29d31c0\"");
        assert!(r.contains(&("stale-label".into(), "aarch64".into(), "pyproject.toml".into(), label)), "{r:#?}");
        assert!(r.contains(&("label-split".into(), "-".into(), "pyproject.toml".into(), label)), "{r:#?}");
        assert!(has(&v, "lock-label", "aarch64", "uv.lock") && !has(&v, "lock-label", "x86_64", "uv.lock"), "{r:#?}");
        assert!(!r.iter().any(|(rule, ..)| rule == "lock-stale"), "{r:#?}");
    }
}

/// Copy a fixture into a temp dir, editing file texts on the way.
fn edited(fixture: &str, edit: impl Fn(&str, String) -> String) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for f in ["pyproject.toml", "uv.lock"] {
        let t = std::fs::read_to_string(root().join("tests/fixtures").join(fixture).join(f)).unwrap();
        std::fs::write(d.path().join(f), edit(f, t)).unwrap();
    }
    d
}

#[test]
fn stale_lock_is_found_at_every_line_and_github_annotates_it() {
    let old = "bfded34800dfec415b71503f8205181de90b2480";
    let d = edited("consumer-unified", |f, t| {
        if f == "uv.lock" {
            t.replace(UNIFIED, old).replace("1.2.1+17cfb81", "1.2.1+bfded34")
        } else {
            t
        }
    });
    let o = forge(&root(), &["lock", "check", "--format", "github", "--project", d.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let lock = d.path().join("uv.lock");
    let first = line_of(&lock, &format!("rev={old}\" }}"));
    let ann = out
        .lines()
        .find(|l| l.starts_with("::error ") && l.contains("deepep-forge lock-stale"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(ann.contains(&format!("uv.lock,line={first},")), "{ann}");
    assert!(ann.contains("expected: 17cfb817bccec3a9c247013360cc550c2bac441e%0Afound: bfded348"), "{ann}");
    assert!(ann.contains("fix: uv lock --project"), "{ann}");
    assert!(out.contains("::error ") && out.contains("deepep-forge lock-label"), "{out}");
    // every place is named: the package, the project's requires-dist
    let text = std::fs::read_to_string(&lock).unwrap();
    let places = text.lines().filter(|l| l.contains(&format!("rev={old}"))).count();
    let also =
        ann.split("(also at lines ").nth(1).map(|s| s.split(')').next().unwrap().split(", ").count()).unwrap_or(0);
    assert_eq!(also + 1, places, "{ann}");
    // the human text follows the annotations
    assert!(out.contains("FAILED:"), "{out}");
}

#[test]
fn short_revs_unpinned_requirements_and_forks_are_reported() {
    let d = edited("consumer-unified", |f, t| {
        if f == "pyproject.toml" {
            t.replacen(&format!("DeepEP.git@{UNIFIED}\",\n]\nserve"), "DeepEP.git@17cfb81\",\n]\nserve", 1)
                .replacen(&format!("\"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@{UNIFIED}\",\n  \"uvicorn\""), "\"deep-ep>=1 ; python_version >= '3.12'\",\n  \"uvicorn\"", 1)
                .replacen(&format!("\"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@{UNIFIED}\",\n]\n\n[tool.uv.sources]"), &format!("\"deep_ep @ git+https://github.com/fork/DeepEP.git@{UNIFIED}\",\n]\n\n[tool.uv.sources]"), 1)
        } else {
            t
        }
    });
    let (code, v) = json(&root(), d.path(), &[]);
    assert_eq!(code, 1);
    let py = d.path().join("pyproject.toml");
    let r = rules(&v);
    assert!(
        r.contains(&(
            "rev-not-full-sha".into(),
            "-".into(),
            "pyproject.toml".into(),
            line_of(&py, "DeepEP.git@17cfb81\"")
        )),
        "{r:#?}"
    );
    assert!(
        r.contains(&("source-repo".into(), "-".into(), "pyproject.toml".into(), line_of(&py, "fork/DeepEP"))),
        "{r:#?}"
    );
    // the bare requirement is pinned by the (fork) override, so it is not `unpinned`
    assert!(!r.iter().any(|x| x.0 == "unpinned"), "{r:#?}");
    let d2 = edited("consumer-unified", |f, t| {
        if f == "pyproject.toml" {
            t.replace(
                &format!(
                    "  \"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@{UNIFIED}\",\n]\n\n[tool.uv.sources]"
                ),
                "]\n\n[tool.uv.sources]",
            )
            .replacen(
                &format!("\"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@{UNIFIED}\",\n  \"uvicorn\""),
                "\"deep_ep\",\n  \"uvicorn\"",
                1,
            )
        } else {
            t
        }
    });
    let (_, v) = json(&root(), d2.path(), &[]);
    assert!(
        has(&v, "unpinned", "x86_64", "pyproject.toml") && has(&v, "unpinned", "aarch64", "pyproject.toml"),
        "{:#?}",
        rules(&v)
    );
}

#[test]
fn missing_lock_checks_pyproject_only_and_says_so() {
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("tests/fixtures/consumer-unified/pyproject.toml"), d.path().join("pyproject.toml"))
        .unwrap();
    let (code, v) = json(&root(), d.path(), &[]);
    assert_eq!(code, 0, "{v:#}");
    assert!(v["checked"]["uv_lock"].is_null());
    assert!(has(&v, "lock-not-checked", "-", "uv.lock"));
}

#[test]
fn bad_input_exits_2_with_file_and_line() {
    // malformed TOML
    let d =
        edited("consumer-unified", |f, t| if f == "pyproject.toml" { t.replacen("moe = [", "moe = [[", 1) } else { t });
    let o = forge(&root(), &["lock", "check", "--project", d.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("pyproject.toml:") && stdout(&o).is_empty(), "{}", stderr(&o));
    // a DeepEP requirement that is not PEP 508
    let d = edited("consumer-unified", |f, t| {
        if f == "pyproject.toml" {
            t.replacen(
                "DeepEP.git@17cfb817bccec3a9c247013360cc550c2bac441e\",\n]\nserve",
                "DeepEP.git@17cfb817bccec3a9c247013360cc550c2bac441e ; platform_machine ==\",\n]\nserve",
                1,
            )
        } else {
            t
        }
    });
    let o = forge(&root(), &["lock", "check", "--project", d.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let line = line_of(&d.path().join("pyproject.toml"), "platform_machine ==\"");
    assert!(stderr(&o).contains(&format!("pyproject.toml:{line}: not a valid PEP 508 requirement")), "{}", stderr(&o));
    // a broken uv.lock
    let d = edited("consumer-unified", |f, t| {
        if f == "uv.lock" {
            t.replacen("[[package]]\nname = \"deep-ep\"", "[[package]]\nname = deep-ep", 1)
        } else {
            t
        }
    });
    let o = forge(&root(), &["lock", "check", "--project", d.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("uv.lock:"), "{}", stderr(&o));
    // no pins.toml where the command runs, no project
    let empty = tempfile::tempdir().unwrap();
    let o = forge(empty.path(), &["lock", "check", "--project", d.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("pins file not found") && stderr(&o).contains("--no-pins"), "{}", stderr(&o));
    let o = forge(&root(), &["lock", "check", "--project", "does/not/exist"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn relative_paths_resolve_against_the_working_directory() {
    let dir = workdir(UNIFIED, UNIFIED);
    support::copy_dir(&root().join("tests/fixtures/consumer-unified"), &dir.path().join("sub/consumer"));
    std::fs::rename(dir.path().join("pins.toml"), dir.path().join("sub/my-pins.toml")).unwrap();
    let o = forge(dir.path(), &["lock", "check", "--project", "sub/consumer", "--pins", "sub/my-pins.toml"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("checked: sub/consumer/pyproject.toml, sub/consumer/uv.lock"), "{}", stdout(&o));
}

#[test]
fn help_documents_every_flag() {
    let o = forge(&root(), &["lock", "check", "--help"]);
    let h = stdout(&o);
    for flag in ["--project", "--pins", "--no-pins", "--dockerfile", "--format"] {
        assert!(h.contains(flag), "{flag}: {h}");
    }
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nemo_rl_fast_path_reports_exactly_what_a_full_parse_reports() {
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    for case in ["2026-06-08-stale-label", "2026-08-22-main"] {
        let dir = workdir(X86, ARM);
        let full = dir.path().join("full");
        std::fs::create_dir(&full).unwrap();
        std::fs::copy(f.join(case).join("pyproject.toml"), full.join("pyproject.toml")).unwrap();
        // a multi-line string delimiter in a comment makes the reader parse the whole lock
        std::fs::write(full.join("uv.lock"), read_to(&f.join(case).join("uv.lock")) + "# '''\n").unwrap();
        let (c1, fast) = json(dir.path(), &f.join(case), &[]);
        let (c2, slow) = json(dir.path(), &full, &[]);
        assert_eq!(c1, c2);
        let strip = |v: &serde_json::Value| {
            rules(v).into_iter().map(|(r, a, f, l)| format!("{r} {a} {f}:{l}")).collect::<Vec<_>>()
        };
        assert_eq!(strip(&fast), strip(&slow), "{case}");
        assert_eq!(
            fast["findings"].as_array().unwrap().iter().map(|x| x["message"].clone()).collect::<Vec<_>>(),
            slow["findings"].as_array().unwrap().iter().map(|x| x["message"].clone()).collect::<Vec<_>>()
        );
    }
}

fn read_to(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn named_dockerfiles_are_listed_as_checked() {
    let d = tempfile::tempdir().unwrap();
    support::copy_dir(&root().join("tests/fixtures/consumer-unified"), d.path());
    std::fs::write(d.path().join("Dockerfile.extra"), "FROM scratch\n").unwrap();
    let extra = d.path().join("Dockerfile.extra");
    let (code, v) = json(&root(), d.path(), &["--dockerfile", extra.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    let listed: Vec<&str> =
        v["checked"]["dockerfiles"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
    assert!(listed.contains(&extra.to_str().unwrap()), "{listed:?}");
}

/// (cause id, severity, number of findings) of every cause.
fn causes(v: &serde_json::Value) -> Vec<(String, String, usize)> {
    v["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().into(),
                c["severity"].as_str().unwrap().into(),
                c["findings"].as_array().unwrap().len(),
            )
        })
        .collect()
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn nemo_rl_main_against_the_shipped_pins_is_one_cause_with_one_fix() {
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    let p = f.join("2026-08-22-main");
    let ps = p.to_str().unwrap();
    let fix = format!("deepep-forge pin set {UNIFIED} --project {ps} --relock");
    // human: the cause leads, its one fix, then the 8 errors under it
    let o = forge(&root(), &["lock", "check", "--project", ps]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[2].starts_with("CAUSE 1/3 [pin-not-adopted]: the project never adopted pins.toml's revision"),
        "{out}"
    );
    assert!(lines[2].contains("x86_64 29d31c0, aarch64 a484936, pins.toml 17cfb81 for every architecture"), "{out}");
    assert_eq!(lines[3], format!("  fix: {fix}"), "{out}");
    let second = lines.iter().position(|l| l.starts_with("cause (note) 2/3 [transitive-pin]")).unwrap();
    assert_eq!(lines[..second].iter().filter(|l| l.starts_with("  error[")).count(), 8, "{out}");
    assert!(!lines[..second].iter().any(|l| l.starts_with("    fix:")), "findings repeat no fix of their cause: {out}");
    assert!(
        out.ends_with("FAILED: 8 error(s), 0 warning(s), 4 note(s) from 1 cause(s): run each cause's fix\n"),
        "{out}"
    );

    // json: causes with their findings, every finding names its cause
    let (code, v) = json(&root(), &p, &[]);
    assert_eq!(code, 1);
    assert_eq!(v["schema"], 2);
    assert_eq!(
        causes(&v),
        [
            ("pin-not-adopted".into(), "error".into(), 8),
            ("transitive-pin".into(), "note".into(), 2),
            ("lock-nvshmem".into(), "note".into(), 2)
        ]
    );
    assert_eq!(v["causes"][0]["fix"], fix.as_str());
    let all = v["findings"].as_array().unwrap();
    assert_eq!(all.len(), 12);
    assert!(all.iter().all(|f| f["cause"].is_string()), "{v:#}");
    let rules_under: Vec<&str> =
        v["causes"][0]["findings"].as_array().unwrap().iter().map(|f| f["rule"].as_str().unwrap()).collect();
    for r in ["rev-mismatch", "stale-label", "lock-stale", "lock-label"] {
        assert_eq!(rules_under.iter().filter(|x| **x == r).count(), 2, "{r}: {rules_under:?}");
    }

    // github: one annotation per finding, naming its cause; paths relative to the project, or to the workspace
    let o = forge(&root(), &["lock", "check", "--format", "github", "--project", ps]);
    let out = stdout(&o);
    let ann: Vec<&str> =
        out.lines().filter(|l| ["::error ", "::warning ", "::notice "].iter().any(|p| l.starts_with(p))).collect();
    assert_eq!(ann.len(), 12, "{out}");
    assert_eq!(ann.iter().filter(|a| a.contains("(cause pin-not-adopted)::")).count(), 8, "{out}");
    assert!(
        ann.iter().all(|a| a.starts_with("::error file=pyproject.toml,line=")
            || a.starts_with("::error file=uv.lock,line=")
            || a.starts_with("::notice file=uv.lock,line=")),
        "{out}"
    );
    assert!(ann[0].contains("%0Acause pin-not-adopted: the project never adopted"), "{}", ann[0]);
    // the column of the requirement string on its line
    let l = line_of(&p.join("pyproject.toml"), "DeepEP.git@29d31c0");
    assert!(ann[0].starts_with(&format!("::error file=pyproject.toml,line={l},col=3,title=")), "{}", ann[0]);
    assert!(ann[0].contains(&format!("%0Afix: {fix}")), "{}", ann[0]);
    let o = bin()
        .args(["lock", "check", "--format", "github", "--project", ps])
        .current_dir(root())
        .env("GITHUB_WORKSPACE", &f)
        .output()
        .unwrap();
    assert!(stdout(&o).starts_with("::error file=2026-08-22-main/pyproject.toml,line="), "{}", stdout(&o));
}

#[test]
#[cfg_attr(
    not(feature = "needs-nemo-rl"),
    ignore = "needs the NeMo-RL fixtures (../shared beside the checkout, or DEEPEP_FORGE_NEMO_RL=<folder>): bash .ci/run runs it when present"
)]
fn every_nemo_rl_fixture_groups_into_root_causes_only() {
    let f = require!(nemo_rl_fixtures(), "../shared/fixtures/nemo-rl");
    let shipped = workdir(UNIFIED, UNIFIED);
    let split = workdir(X86, ARM);
    for (case, dir, want) in [
        ("2026-06-08-stale-label", &shipped, vec!["pin-not-adopted"]),
        ("2026-06-08-label-fixed", &shipped, vec!["pin-not-adopted"]),
        ("2026-08-22-main", &shipped, vec!["pin-not-adopted"]),
        ("2026-08-17-unified-pin", &shipped, vec![]),
        ("2026-06-08-stale-label", &split, vec!["label-split", "lock-out-of-date"]),
        ("2026-06-08-label-fixed", &split, vec!["label-split", "lock-out-of-date"]),
        ("2026-08-22-main", &split, vec!["label-split"]),
        ("2026-08-17-unified-pin", &split, vec!["label-split"]),
    ] {
        let (code, v) = json(dir.path(), &f.join(case), &[]);
        let c = causes(&v);
        let errors: Vec<&str> = c.iter().filter(|c| c.1 == "error").map(|c| c.0.as_str()).collect();
        assert_eq!(errors, want, "{case}: {c:#?}");
        assert_eq!(code, if want.is_empty() { 0 } else { 1 }, "{case}");
        // every finding sits under exactly one cause, and every cause has one fix
        let under: usize = c.iter().map(|c| c.2).sum();
        assert_eq!(under, v["findings"].as_array().unwrap().len(), "{case}");
        for cause in v["causes"].as_array().unwrap().iter().filter(|c| c["severity"] == "error") {
            assert!(cause["fix"].is_string(), "{case}: {cause:#}");
            assert!(cause["findings"].as_array().unwrap().iter().all(|f| f["cause"] == cause["id"]), "{case}");
        }
    }
}

#[test]
fn an_empty_lock_or_one_without_uvs_header_exits_2_naming_the_file() {
    for (text, msg) in [
        ("", "uv.lock is empty: not a uv lockfile"),
        ("\n  \n", "uv.lock is empty: not a uv lockfile"),
        ("[[package]]\nname = \"x\"\nversion = \"1\"\n", "uv.lock has no `version = N` header"),
        ("# written by hand\nrequires-python = \">=3.10\"\n", "uv.lock has no `version = N` header"),
        ("version = \"one\"\n", "is not uv's lockfile header"),
    ] {
        let d = edited("consumer-unified", |f, t| if f == "uv.lock" { text.to_string() } else { t });
        let o = forge(&root(), &["lock", "check", "--project", d.path().to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{text:?}: {}{}", stdout(&o), stderr(&o));
        let want = format!("{}", d.path().join("uv.lock").display());
        assert!(stderr(&o).contains(&want) && stderr(&o).contains(msg), "{text:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("locks no deep-ep") && stdout(&o).is_empty(), "{}", stdout(&o));
    }
}

/// A value from a pull request's file that quotes a workflow command must not
/// run as one: under `--format github` the human report is printed with
/// workflow commands stopped (a random end token), and annotations escape it.
#[test]
fn a_planted_workflow_command_in_a_label_is_never_a_command() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("pyproject.toml"),
        "[project]\nname = \"x\"\nversion = \"0.1\"\ndependencies = [\"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@17cfb817bccec3a9c247013360cc550c2bac441e\"]\n\n[[tool.uv.dependency-metadata]]\nname = \"deep_ep\"\nversion = \"1.2.1+abc\\n::error file=x::pwned\"\n",
    )
    .unwrap();
    let o = forge(&root(), &["lock", "check", "--format", "github", "--project", d.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let mut stopped: Option<String> = None;
    for l in out.lines() {
        let t = l.trim_start();
        match &stopped {
            Some(token) if t == format!("::{token}::") => stopped = None,
            Some(_) => {}
            None if t.starts_with("::stop-commands::") => stopped = Some(t["::stop-commands::".len()..].to_string()),
            None => {
                assert!(!t.contains("pwned") || !t.starts_with("::error file=x"), "a live planted command: {l}\n{out}")
            }
        }
    }
    assert!(stopped.is_none(), "workflow commands resumed at the end: {out}");
    // The label is a `Line`: its line break is shown as `\n` in the message, never a line of its own.
    assert!(out.contains("1.2.1+abc\\n::error file=x::pwned` is not"), "the annotation escapes the newline: {out}");
}

/// Makes `name-version-py3-none-any.whl` stand-ins (no code, no dependencies) in a find-links folder.
const STUB_WHEELS_PY: &str = r#"import base64, hashlib, sys, zipfile
out = sys.argv[1]
for spec in sys.argv[2:]:
    name, version = spec.split("==")
    info = "%s-%s.dist-info" % (name, version)
    files = {
        info + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version),
        info + "/WHEEL": "Wheel-Version: 1.0\nGenerator: stub\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rec = []
    with zipfile.ZipFile("%s/%s-%s-py3-none-any.whl" % (out, name, version), "w") as z:
        for p, text in sorted(files.items()):
            data = text.encode()
            z.writestr(p, data)
            h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rec.append("%s,sha256=%s,%d" % (p, h, len(data)))
        rec.append(info + "/RECORD,,")
        z.writestr(info + "/RECORD", "\n".join(rec) + "\n")
"#;

/// The DeepEP revisions the consumer fixtures name, each served by a stand-in commit.
pub(crate) const FIXTURE_REVS: [&str; 5] =
    [UNIFIED, X86, "50fd14a7b75be31ef5002b60af866e6273feff39", "7febc6e25660af0f54d95dd781ecdcd62265ecca", ARM];

/// A place where every fix `lock check` prints can run as printed: the consumer
/// fixtures' DeepEP revisions served by a local stand-in repository (mini-deepep
/// commits, version 1.2.1, and a branch `hybrid-ep`) at DeepEP's URL, real uv
/// offline against a find-links folder of stand-in wheels for the fixtures' other
/// dependencies, deepep-forge's cache in the temp dir. uv is never steered by a
/// `UV_*` variable (none is set, any inherited one removed): the consumer's copy
/// says offline, the find-links folder, the cache and the Python in its own
/// `[tool.uv]` ([`FixLab::UV_SETTINGS`]), so a printed `uv lock` or `pin set
/// --relock` runs exactly as a user would type it.
pub(crate) struct FixLab {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) uv: PathBuf,
    /// Fixture revision -> stand-in commit.
    map: Vec<(String, String)>,
    pub(crate) env: Vec<(String, String)>,
}

impl FixLab {
    pub(crate) fn new() -> Option<FixLab> {
        let venv = tools_venv()?;
        let (uv, python) = (venv.join("bin/uv"), venv.join("bin/python"));
        if !uv.exists() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("DeepEP");
        let mut shas = vec![git_repo_from_fixture("mini-deepep", &repo)];
        for n in 1..FIXTURE_REVS.len() {
            std::fs::write(repo.join("STAND_IN"), format!("{n}\n")).unwrap();
            git(&repo, &["add", "-A"]);
            git(&repo, &["commit", "-qm", &format!("stand-in {n}")]);
            shas.push(git(&repo, &["rev-parse", "HEAD"]).trim().to_string());
        }
        git(&repo, &["branch", "hybrid-ep", &shas[0]]);
        let map: Vec<(String, String)> = FIXTURE_REVS.iter().map(|r| r.to_string()).zip(shas).collect();
        let links = dir.path().join("links");
        std::fs::create_dir(&links).unwrap();
        std::fs::write(dir.path().join("stub.py"), STUB_WHEELS_PY).unwrap();
        let wheels = ["numpy==2.3.0", "uvicorn==0.35.0", "torch==2.11.0", "packaging==25.0", "ninja==1.13.0"];
        let o = std::process::Command::new(&python).arg(dir.path().join("stub.py")).arg(&links).args(wheels).output();
        assert!(o.as_ref().is_ok_and(|o| o.status.success()), "stub wheels: {o:?}");
        let d = |p: &str| dir.path().join(p).display().to_string();
        let env: Vec<(String, String)> = [
            ("DEEPEP_FORGE_UV", uv.display().to_string()),
            ("DEEPEP_FORGE_CACHE_DIR", d("forge-cache")),
            ("DEEPEP_FORGE_GIT_ALLOW_LOCAL", "1".into()),
            ("GIT_CONFIG_COUNT", "1".into()),
            ("GIT_CONFIG_KEY_0", format!("url.file://{}.insteadOf", repo.display())),
            ("GIT_CONFIG_VALUE_0", "https://github.com/deepseek-ai/DeepEP.git".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        // The tools venv's Python first on PATH (as `python3`): the one uv finds for the project.
        let path_bin = dir.path().join("path-bin");
        std::fs::create_dir_all(&path_bin).unwrap();
        std::os::unix::fs::symlink(exe(), path_bin.join("deepep-forge")).unwrap();
        std::os::unix::fs::symlink(&uv, path_bin.join("uv")).unwrap();
        std::os::unix::fs::symlink(&python, path_bin.join("python3")).unwrap();
        Some(FixLab { dir, uv, map, env })
    }

    /// What the consumer's copy says in `[tool.uv]` so uv locks offline here:
    /// no index, the find-links folder, a cache in the lab, a system Python.
    pub(crate) const UV_SETTINGS: &'static str = "offline = true\nno-index = true\nfind-links = [\"{links}\"]\ncache-dir = \"{cache}\"\npython-downloads = \"never\"\npython-preference = \"only-system\"\n";

    /// [`FixLab::UV_SETTINGS`] with the lab's folders.
    fn uv_settings(&self) -> String {
        let d = |p: &str| self.dir.path().join(p).display().to_string();
        Self::UV_SETTINGS.replace("{links}", &d("links")).replace("{cache}", &d("uv-cache"))
    }

    /// PATH for a printed fix: `deepep-forge` (this build), `uv` and `python3` (the
    /// tools venv's), then the system's.
    pub(crate) fn path(&self) -> String {
        format!("{}:/usr/local/bin:/usr/bin:/bin", self.dir.path().join("path-bin").display())
    }

    /// A command with the lab's environment and nothing of uv's from the caller's.
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        let mut c = std::process::Command::new(program);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("UV_") {
                c.env_remove(k);
            }
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v))).env("PATH", self.path());
        c
    }

    /// The stand-in commit of a fixture revision.
    pub(crate) fn rev(&self, fixture_rev: &str) -> &str {
        &self.map.iter().find(|(f, _)| f == fixture_rev).expect("a fixture revision").1
    }

    /// `text` with every fixture revision (full and as a label's short sha) replaced by its
    /// stand-in, all at once (a stand-in may equal another fixture revision).
    pub(crate) fn mapped(&self, text: &str) -> String {
        let mut t = text.to_string();
        for (i, (f, _)) in self.map.iter().enumerate() {
            t = t.replace(f.as_str(), &format!("@@{i}@@")).replace(&format!("+{}", &f[..7]), &format!("+@@{i}s@@"));
        }
        for (i, (_, s)) in self.map.iter().enumerate() {
            t = t.replace(&format!("@@{i}@@"), s).replace(&format!("@@{i}s@@"), &s[..7]);
        }
        t
    }

    /// A fresh scenario folder: `consumer/` (a copy of `fixture`, mapped, `edit`ed), the
    /// third-party package it names, and pins.toml (mapped from `pins`, when given).
    pub(crate) fn scenario(
        &self,
        name: &str,
        fixture: &str,
        edit: &dyn Fn(&str, String) -> String,
        pins: Option<String>,
    ) -> PathBuf {
        let s = self.dir.path().join(name);
        let p = s.join("consumer");
        std::fs::create_dir_all(p.join("3rdparty/thirdparty")).unwrap();
        for f in ["pyproject.toml", "uv.lock"] {
            let text = std::fs::read_to_string(root().join("tests/fixtures").join(fixture).join(f)).unwrap();
            // the tools venv's Python (3.11) resolves the project
            let text = self.mapped(&text).replace("requires-python = \">=3.12\"", "requires-python = \">=3.11\"");
            let text = if f == "pyproject.toml" {
                assert!(text.contains("\n[tool.uv]\n"), "{fixture} has a [tool.uv] table");
                text.replacen("\n[tool.uv]\n", &format!("\n[tool.uv]\n{}", self.uv_settings()), 1)
            } else {
                text
            };
            std::fs::write(p.join(f), edit(f, text)).unwrap();
        }
        let third = format!(
            "[project]\nname = \"thirdparty\"\nversion = \"2.0.0\"\n\n[project.optional-dependencies]\n\
             moe = [\"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@{}\"]\n",
            self.rev(FIXTURE_REVS[3])
        );
        std::fs::write(p.join("3rdparty/thirdparty/pyproject.toml"), third).unwrap();
        if let Some(pins) = pins {
            std::fs::write(s.join("pins.toml"), self.mapped(&pins)).unwrap();
        }
        s
    }

    /// `lock check --format json --project consumer` (+ `extra`) in `dir`.
    pub(crate) fn check(&self, dir: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
        let mut c = self.command(exe());
        c.args(["lock", "check", "--format", "json", "--project", "consumer"]).args(extra).current_dir(dir);
        let o = c.output().unwrap();
        let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
        (o.status.code().unwrap(), v)
    }

    /// Run a printed fix as printed: `deepep-forge ...` is this binary, `uv ...` the tools venv's uv.
    fn run_fix(&self, dir: &Path, fix: &str) {
        let words: Vec<&str> = fix.split_whitespace().collect();
        let mut c = match words.first() {
            Some(&"deepep-forge") => self.command(exe()),
            Some(&"uv") => self.command(&self.uv),
            _ => panic!("a printed fix that is not a command: {fix}"),
        };
        let o = c.args(&words[1..]).current_dir(dir).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "`{fix}` failed: {}{}", stdout(&o), stderr(&o));
    }
}

#[test]
fn every_printed_fix_runs_as_printed_and_the_next_check_is_clean() {
    let lab = require!(FixLab::new(), "uv in the tools venv");
    let root_pins = std::fs::read_to_string(root().join("pins.toml")).unwrap();
    let pins_at = |rev: &str| root_pins.replace(UNIFIED, rev);
    let same = |_: &str, t: String| t;
    let (a, b) = (lab.rev(UNIFIED).to_string(), lab.rev(X86).to_string());
    let to_branch = |f: &str, t: String| {
        let t = t.replace(&format!("DeepEP.git@{a}"), "DeepEP.git@hybrid-ep");
        if f == "uv.lock" {
            t.replace(&format!("?rev={a}"), "?rev=hybrid-ep")
        } else {
            t
        }
    };
    let to_short = |f: &str, t: String| {
        let t = t.replace(&format!("DeepEP.git@{a}"), &format!("DeepEP.git@{}", &a[..7]));
        if f == "uv.lock" {
            t.replace(&format!("?rev={a}"), &format!("?rev={}", &a[..7]))
        } else {
            t
        }
    };
    let moved = |f: &str, t: String| {
        if f == "pyproject.toml" {
            t.replace(&a, &b).replace(&format!("+{}", &a[..7]), &format!("+{}", &b[..7]))
        } else {
            t
        }
    };
    let wrong_label = |_: &str, t: String| t.replace(&format!("1.2.1+{}", &a[..7]), &format!("1.2.0+{}", &a[..7]));
    let x86_only = format!(
        "schema = 2\n\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\n\
         base_version = \"1.2.1\"\n\n[pin.x86_64]\nrev = \"{UNIFIED}\"\n"
    );
    // (scenario, fixture, edit, pins.toml or --no-pins, the cause it must show)
    type Edit<'e> = &'e dyn Fn(&str, String) -> String;
    let cases: Vec<(&str, &str, Edit, Option<String>, &str)> = vec![
        ("adopt", "consumer-unified", &same, Some(pins_at(X86)), "pin-not-adopted"),
        ("split", "consumer-split", &same, None, "label-split"),
        ("relock", "consumer-unified", &moved, Some(pins_at(X86)), "lock-out-of-date"),
        ("label", "consumer-unified", &wrong_label, Some(root_pins.clone()), "label-wrong"),
        ("branch", "consumer-unified", &to_branch, None, "branch-pin"),
        ("branch-pinned", "consumer-unified", &to_branch, Some(root_pins.clone()), "pin-not-adopted"),
        ("short", "consumer-unified", &to_short, None, "rev-not-full-sha"),
        ("arch", "consumer-unified", &same, Some(x86_only), "arch-unpinned"),
    ];
    let mut ran = Vec::new();
    for (name, fixture, edit, pins, want) in cases {
        let extra: &[&str] = if pins.is_some() { &[] } else { &["--no-pins"] };
        let dir = lab.scenario(name, fixture, edit, pins);
        let (_, v) = lab.check(&dir, extra);
        let causes = v["causes"].as_array().unwrap();
        assert!(causes.iter().any(|c| c["id"] == want), "{name}: no {want} cause: {v:#}");
        let lock_before = std::fs::read_to_string(dir.join("consumer/uv.lock")).unwrap();
        for c in causes.iter().filter(|c| c["severity"] != "note") {
            let fix = c["fix"].as_str().unwrap_or_else(|| panic!("{name}: cause {} has no fix: {v:#}", c["id"]));
            lab.run_fix(&dir, fix);
            ran.push(format!("{name}: {fix}"));
        }
        let (code, v) = lab.check(&dir, extra);
        let left: Vec<&serde_json::Value> =
            v["causes"].as_array().unwrap().iter().filter(|c| c["severity"] != "note").collect();
        assert!(code == 0 && left.is_empty(), "{name}: after the fixes: {v:#}");
        // the fixes that change pyproject.toml relocked with real uv
        if name != "arch" {
            assert_ne!(std::fs::read_to_string(dir.join("consumer/uv.lock")).unwrap(), lock_before, "{name}");
        }
    }
    let ran = ran.join("\n");
    for want in [
        format!("adopt: deepep-forge pin set {b} --project consumer --relock"),
        "relock: uv lock --project consumer".to_string(),
        format!("branch: deepep-forge pin set {a} --project consumer --no-pins --relock"),
        format!("short: deepep-forge pin set {a} --project consumer --no-pins --relock"),
        format!("arch: deepep-forge pin set {a} --project consumer"),
    ] {
        assert!(ran.contains(&want), "{want} not among the fixes run:\n{ran}");
    }
}

/// A consumer moved to a publish index (as `pin set --index` writes it), with a Dockerfile.
fn index_consumer(label: &str, variant: &str, dockerfile: &str, pins_edit: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let pins = std::fs::read_to_string(root().join("tests/fixtures/demo-pins.toml")).unwrap();
    let arm = "name = \"demo-arm\"\n";
    std::fs::write(d.path().join("pins.toml"), pins.replacen(arm, &format!("{arm}{pins_edit}"), 1)).unwrap();
    let project = d.path().join("consumer");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("pyproject.toml"),
        format!(
            "[project]\nname = \"c\"\nversion = \"0.1.0\"\nrequires-python = \"==3.11.*\"\ndependencies = [\n  \"deep_ep=={label}\",\n]\n\n[tool.uv.sources]\ndeep-ep = {{ index = \"deepep-forge-{variant}\" }}\n\n[[tool.uv.index]]\nname = \"deepep-forge-{variant}\"\nurl = \"https://deepep.example.org/wheels/{variant}/simple\"\nexplicit = true\n"
        ),
    )
    .unwrap();
    std::fs::write(project.join("Dockerfile"), dockerfile).unwrap();
    d
}

fn index_findings(d: &tempfile::TempDir) -> (i32, serde_json::Value) {
    json(d.path(), &d.path().join("consumer"), &["--pins", "pins.toml"])
}

#[test]
fn an_index_sourced_deepep_gets_the_label_rule_and_the_variant_its_dockerfile_builds() {
    let named_arm = "FROM ubuntu:24.04 AS arm\nARG DEEPEP_VARIANT=demo-arm\n";
    // A label of another revision, and a Dockerfile that builds demo-arm while the index is demo's.
    let d = index_consumer("1.2.1+aaaaaaa", "demo", named_arm, "");
    let (code, v) = index_findings(&d);
    assert_eq!(code, 1, "{v}");
    for arch in ["x86_64", "aarch64"] {
        assert!(has(&v, "index-label", arch, "pyproject.toml"), "{arch}: {:?}", rules(&v));
    }
    let f = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "index-label").unwrap();
    assert_eq!((f["expected"].as_str(), f["found"].as_str()), (Some("1.2.1+0bfa6c2"), Some("1.2.1+aaaaaaa")), "{f}");
    assert!(
        f["fix"].as_str().unwrap().contains(
            "pin set 0bfa6c27cc77e8266337c19f6f30e3f5be23a483 --index https://deepep.example.org/wheels --variant demo"
        ),
        "{f}"
    );
    let m = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "index-variant-mismatch").expect("mismatch");
    let msg = m["message"].as_str().unwrap();
    assert!(msg.contains("Dockerfile:2 builds DeepEP as variant `demo-arm`"), "{msg}");
    assert_eq!(m["line"].as_u64(), Some(line_of(&d.path().join("consumer/pyproject.toml"), "deep-ep = {")));

    // demo-arm published into demo's index (pins.toml `index`), the label right: clean.
    let d = index_consumer("1.2.1+0bfa6c2", "demo", named_arm, "index = \"demo\"\n");
    let (code, v) = index_findings(&d);
    assert!(!rules(&v).iter().any(|r| r.0.starts_with("index-")), "{:?}", rules(&v));
    assert_eq!(code, 0, "{v}");

    // A build no stage names, told by its settings: demo's flags, while the index is demo-arm's.
    let by_flags = "FROM ubuntu:24.04\nARG TORCH_CUDA_ARCH_LIST=\"9.0 10.0\"\nARG HYBRID_EP_MULTINODE=0\n";
    let d = index_consumer("1.2.1+0bfa6c2", "demo-arm", by_flags, "");
    let (code, v) = index_findings(&d);
    assert_eq!(code, 1, "{v}");
    let m = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "index-variant-mismatch").expect("mismatch");
    assert!(m["message"].as_str().unwrap().contains("Dockerfile:2 builds DeepEP as variant `demo`"), "{m}");
    let d = index_consumer("1.2.1+0bfa6c2", "demo", by_flags, "");
    let (code, v) = index_findings(&d);
    assert_eq!(code, 0, "{:?}", rules(&v));
}

#[test]
fn an_index_of_a_single_node_variant_does_not_fit_a_recipe_over_two_nvlink_domains() {
    let d = index_consumer("1.2.1+0bfa6c2", "demo", "FROM ubuntu:24.04\n", "");
    let pins = d.path().join("pins.toml");
    let multinode = "\n[[variant]]\nname = \"demo-mn\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = true\ntransport = \"nixl\"\n";
    std::fs::write(&pins, std::fs::read_to_string(&pins).unwrap() + multinode).unwrap();
    let recipes = root().join("tests/fixtures/recipes-automodel");
    let two_domains = recipes.join("ep16-hybridep-2n8g.yaml");
    let (code, v) =
        json(d.path(), &d.path().join("consumer"), &["--pins", "pins.toml", "--recipe", two_domains.to_str().unwrap()]);
    assert_eq!(code, 1, "{v}");
    let m = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "index-variant-mismatch").expect("mismatch");
    let msg = m["message"].as_str().unwrap();
    assert!(msg.contains("ep16-hybridep-2n8g.yaml runs HybridEP with EP 16 over 2 NVLink domains (R 8), which needs a multinode build: variant `demo-multinode` or `demo-mn`"), "{msg}");
    // The multinode variant's index fits it; a recipe whose R is not known asks nothing.
    let text = std::fs::read_to_string(d.path().join("consumer/pyproject.toml")).unwrap();
    std::fs::write(d.path().join("consumer/pyproject.toml"), text.replace("/demo/simple", "/demo-mn/simple")).unwrap();
    let (_, v) =
        json(d.path(), &d.path().join("consumer"), &["--pins", "pins.toml", "--recipe", two_domains.to_str().unwrap()]);
    assert!(!rules(&v).iter().any(|r| r.0 == "index-variant-mismatch"), "{:?}", rules(&v));
    std::fs::write(d.path().join("consumer/pyproject.toml"), text).unwrap();
    let unknown_r = recipes.join("ep16-hybridep-2n8g-no-env.yaml");
    let (_, v) =
        json(d.path(), &d.path().join("consumer"), &["--pins", "pins.toml", "--recipe", unknown_r.to_str().unwrap()]);
    assert!(!rules(&v).iter().any(|r| r.0 == "index-variant-mismatch"), "{:?}", rules(&v));
}

/// A label message names the version a build of a revision gets only where it knows it: the
/// base is read from the source at that revision, not taken from pins.toml's `base_version`
/// (the pin's). The project installs a HybridEP commit (setup.py: 1.2.1) with its right label;
/// pins.toml pins an EPv2 commit (base_version 2.1.0).
#[test]
fn a_label_message_reads_a_non_pinned_revisions_base_from_its_source() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("DeepEP");
    let hybrid = git_repo_from_fixture("mini-deepep", &repo);
    for e in std::fs::read_dir(&repo).unwrap().map(|e| e.unwrap().path()) {
        if e.file_name().is_some_and(|n| n != ".git") {
            if e.is_dir() {
                std::fs::remove_dir_all(&e).unwrap();
            } else {
                std::fs::remove_file(&e).unwrap();
            }
        }
    }
    copy_dir(&root().join("tests/fixtures/mini-deepep-v2"), &repo);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "epv2"]);
    let epv2 = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let d = tempfile::tempdir().unwrap();
    let py = std::fs::read_to_string(root().join("tests/fixtures/consumer-unified/pyproject.toml"))
        .unwrap()
        .replace("17cfb817bccec3a9c247013360cc550c2bac441e", &hybrid)
        .replace("1.2.1+17cfb81", &format!("1.2.1+{}", &hybrid[..7]));
    std::fs::write(d.path().join("pyproject.toml"), py).unwrap();
    let pins = pins_text(&epv2, &epv2).replace("base_version = \"1.2.1\"", "base_version = \"2.1.0\"");
    assert!(pins.contains("base_version = \"2.1.0\""), "{pins}");
    std::fs::write(d.path().join("pins.toml"), pins).unwrap();
    let messages = |extra: &[&str]| {
        let o = bin()
            .args(["lock", "check", "--format", "json", "--project", "."])
            .args(extra)
            .current_dir(d.path())
            .env("DEEPEP_FORGE_CACHE_DIR", tmp.path().join("cache"))
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["rule"] == "stale-label")
            .map(|f| f["message"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let wrong = format!("2.1.0+{}", &hybrid[..7]);
    // Read from the source: the project's label is right for the commit it installs today.
    let read = messages(&["--source", repo.to_str().unwrap()]);
    assert!(!read.is_empty() && read.iter().all(|m| m.contains("right for the") && !m.contains(&wrong)), "{read:?}");
    assert!(read[0].contains(&format!("makes it 2.1.0+{}", &epv2[..7])), "{read:?}");
    // Not read (no --source, nothing in the cache): no label is claimed for the unread commit.
    let unread = messages(&[]);
    assert!(!unread.is_empty() && unread.iter().all(|m| !m.contains(&wrong)), "{unread:?}");
}
