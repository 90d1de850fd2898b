//! `lock check`'s `hand-patched-deepep` rule on our own consumer fixture in the
//! real shapes (tests/fixtures/consumer-hand-patched): a Megatron-Bridge-style
//! Dockerfile that bind-mounts a patch and runs `patch -p1` inside DeepEP, and a
//! vLLM-style image that runs a COPY'd install script which seds DeepEP's
//! setup.py in a helper function and pipes a downloaded diff into `git apply`,
//! next to an NVSHMEM patch that is not DeepEP's source. Whole process, real
//! files; the check never applies or runs anything.

use std::path::Path;

use crate::support::*;

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&root().join("tests/fixtures/consumer-hand-patched"), d.path());
    for f in ["pyproject.toml", "uv.lock"] {
        std::fs::copy(root().join("tests/fixtures/consumer-unified").join(f), d.path().join(f)).unwrap();
    }
    std::fs::copy(root().join("pins.toml"), d.path().join("pins.toml")).unwrap();
    d
}

fn line_of(file: &Path, needle: &str) -> u64 {
    std::fs::read_to_string(file).unwrap().lines().position(|l| l.contains(needle)).unwrap() as u64 + 1
}

fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in walk(dir) {
        out.push((e.strip_prefix(dir).unwrap().to_string_lossy().into_owned(), std::fs::read(&e).unwrap()));
    }
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn hand_patches_of_deepep_are_found_with_file_line_and_the_fix() {
    let d = project();
    let before = tree(d.path());
    let o = forge(d.path(), &["lock", "check", "--format", "json", "--project", "."]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let hits: Vec<(String, u64, String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "hand-patched-deepep")
        .map(|f| {
            (
                f["file"].as_str().unwrap().to_string(),
                f["line"].as_u64().unwrap(),
                f["message"].as_str().unwrap().to_string(),
                f["fix"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let script = d.path().join("tools/ep_kernels/install_ep.sh");
    let ci = d.path().join("docker/Dockerfile.ci");
    let at = |file: &str, line: u64| hits.iter().find(|h| h.0.ends_with(file) && h.1 == line);
    // Megatron-Bridge's shape: the RUN's line, and the fix names the mounted patch file.
    let run = line_of(&ci, "RUN --mount");
    let h = at("docker/Dockerfile.ci", run).unwrap_or_else(|| panic!("{hits:#?}"));
    assert!(h.2.contains("patch -p1 < /opt/deepep.patch"), "{}", h.2);
    assert!(h.3.contains("move docker/patches/deepep.patch beside pins.toml"), "{}", h.3);
    assert!(h.3.contains("patches = ["), "{}", h.3);
    // vLLM's shape: the script's sed in the DeepEP helper and the piped download.
    let sed = line_of(&script, "sed -i");
    let curl = line_of(&script, "| git apply");
    assert!(at("install_ep.sh", sed).is_some(), "{hits:#?}");
    assert!(at("install_ep.sh", curl).is_some(), "{hits:#?}");
    // NVSHMEM's own patch is not DeepEP's source.
    let nvshmem = line_of(&script, "git apply -vvv nvshmem.patch");
    assert!(at("install_ep.sh", nvshmem).is_none(), "{hits:#?}");
    assert_eq!(hits.len(), 3, "{hits:#?}");
    // A warning: the exit code is the other rules' (1 here: the fixture's ARG and arch lists are not judged by this test).
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    // Nothing applied, run or written.
    assert_eq!(before, tree(d.path()), "lock check changed the project");
}
