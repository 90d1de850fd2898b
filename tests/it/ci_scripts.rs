//! The scripts under `.ci/` that are not CI itself, run for real:
//! - `.ci/tally` sums cargo test's per-binary "test result:" lines into the
//!   last line `bash .ci/run` prints (`N passed, M failed, K not run`, K the
//!   ignored tests: those whose needs- feature `.ci/run` left off);
//! - `.ci/fetch-nemo-rl` fetches the NeMo-RL fixtures by commit and checks each
//!   sha256. GitHub is not reachable from a test, so it runs against `file://`
//!   mirrors laid out as GitHub's raw URLs are (`<commit>/<path>`): a made-up
//!   list here, and every file of the real list (mirrored from the fixtures)
//!   where they are present.
use crate::support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::*;

fn tally(input: &str, args: &[&str]) -> Output {
    let mut child = Command::new("bash")
        .arg(root().join(".ci/tally"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn tally_sums_every_test_binary_and_adds_what_was_not_run() {
    let cargo = "\
     Running tests/a.rs (target/debug/deps/a-0123)

running 13 tests
test x ... ok
test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 3 filtered out; finished in 0.02s

     Running tests/b.rs (target/debug/deps/b-4567)
test y ... FAILED
test result: FAILED. 30 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 11.50s

   Doc-tests deepep_forge
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";
    let o = tally(cargo, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "42 passed, 2 failed, 1 not run\n");
    // Nothing ran (a compile error): zeros, never a missing line.
    assert_eq!(stdout(&tally("error[E0425]: cannot find value\n", &[])), "0 passed, 0 failed, 0 not run\n");
    // What is not run is what cargo ignored: no count from outside (the old skip count) is taken.
    let o = tally("", &["7"]);
    assert_eq!(o.status.code(), Some(2), "an argument is usage: {}", stdout(&o));
}

#[test]
fn ci_run_ends_with_the_tally() {
    let run = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let last = run.lines().rev().find(|l| l.starts_with("echo ")).unwrap();
    assert!(last.contains(".ci/tally"), "the last line .ci/run prints is the tally: {last}");
    assert!(run.contains("| tee \"$log\""), "cargo test's output is kept for the tally");
    // The tests whose need is missing stay ignored (cargo counts them), never skipped by name.
    assert!(run.contains("--features \"${features[*]}\""), "cargo test runs with the needs- features");
    assert!(!run.contains("--include-ignored") && !run.contains("--skip"), "no test is un-ignored or skipped by name");
}

/// `.ci/fetch-nemo-rl DEST` with the list and the base URL given.
fn fetch(list: &Path, base: &str, dest: &Path) -> Output {
    Command::new("bash")
        .arg(root().join(".ci/fetch-nemo-rl"))
        .arg(dest)
        .env("DEEPEP_FORGE_NEMO_RL_LIST", list)
        .env("DEEPEP_FORGE_NEMO_RL_BASE", base)
        .env_remove("DEEPEP_FORGE_NEMO_RL")
        .output()
        .unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

const COMMIT: &str = "7ea279abfbeb698b092856d0dab61e7cf39bc909";

#[test]
fn fetch_nemo_rl_checks_every_sha256_and_writes_nothing_on_a_mismatch() {
    let t = tempfile::tempdir().unwrap();
    let mirror = t.path().join("mirror");
    let text = b"[project]\nname = \"nemo-rl\"\n";
    std::fs::create_dir_all(mirror.join(COMMIT)).unwrap();
    std::fs::write(mirror.join(COMMIT).join("pyproject.toml"), text).unwrap();
    let list = t.path().join("list");
    std::fs::write(
        &list,
        format!(
            "# a comment\nsource  main  {COMMIT}  Sat Aug 22 10:39:06 2026 -0700 | fix: a | b\n{}  main  {COMMIT}  pyproject.toml\n",
            sha256(text)
        ),
    )
    .unwrap();
    let base = format!("file://{}", mirror.display());

    let dest = t.path().join("fixtures");
    let o = fetch(&list, &base, &dest);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("fetched 1 NeMo-RL files"), "{}", stdout(&o));
    assert_eq!(std::fs::read(dest.join("main/pyproject.toml")).unwrap(), text);
    assert_eq!(
        std::fs::read_to_string(dest.join("main/SOURCE")).unwrap(),
        format!("{COMMIT}\nSat Aug 22 10:39:06 2026 -0700\nfix: a | b\n")
    );
    // DEST exists: refused, left as it is.
    let o = fetch(&list, &base, &dest);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // The server's file changed: exit 1 naming its URL, nothing written, no temp left.
    std::fs::write(mirror.join(COMMIT).join("pyproject.toml"), b"[project]\nname = \"evil\"\n").unwrap();
    let dest2 = t.path().join("fixtures2");
    let o = fetch(&list, &base, &dest2);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{base}/{COMMIT}/pyproject.toml: sha256 ")), "{}", stderr(&o));
    assert!(!dest2.exists());
    let left: Vec<PathBuf> = std::fs::read_dir(t.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert!(!left.iter().any(|p| p.to_string_lossy().contains(".fetch-nemo-rl")), "{left:?}");

    // A file missing on the server: exit 3, nothing written.
    std::fs::remove_file(mirror.join(COMMIT).join("pyproject.toml")).unwrap();
    let o = fetch(&list, &base, &dest2);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(!dest2.exists());

    // A list line whose path leaves DEST: exit 2 before any fetch.
    std::fs::write(&list, format!("{}  main  {COMMIT}  ../escape\n", sha256(text))).unwrap();
    let o = fetch(&list, &base, &dest2);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!dest2.exists() && !t.path().join("escape").exists());
}

#[test]
#[cfg_attr(not(feature = "needs-nemo-rl"), ignore = "needs the NeMo-RL fixtures: every listed file mirrored from them")]
fn fetch_nemo_rl_rebuilds_the_fixtures_byte_for_byte() {
    let Some(fixtures) = nemo_rl_fixtures() else { support::missing("the NeMo-RL fixtures") };
    let t = tempfile::tempdir().unwrap();
    let list = root().join(".ci/nemo-rl.sha256");
    let mut listed = 0;
    for line in std::fs::read_to_string(&list).unwrap().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f[0].starts_with('#') || f[0] == "source" {
            continue;
        }
        let to = t.path().join("mirror").join(f[2]).join(f[3]);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(fixtures.join(f[1]).join(f[3]), &to).unwrap();
        listed += 1;
    }
    let dest = t.path().join("nemo-rl");
    let o = fetch(&list, &format!("file://{}", t.path().join("mirror").display()), &dest);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("fetched {listed} NeMo-RL files")), "{}", stdout(&o));
    // Every file the tests read, with its SOURCE, as the fixture folder has it (its NOTES.md is ours).
    let files = |d: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        let mut v: Vec<_> = walkdir::WalkDir::new(d)
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file() && e.file_name() != "NOTES.md")
            .map(|e| (e.path().strip_prefix(d).unwrap().to_path_buf(), std::fs::read(e.path()).unwrap()))
            .collect();
        v.sort();
        v
    };
    let (got, want) = (files(&dest), files(&fixtures));
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the fetched tree differs from the fixtures");
}
