//! Source patches as hostile input: every class of bad patch list, patch file
//! and patch text is exit 2 with a clear message naming pins.toml's line and the
//! patch, before any toolchain work, and writes nothing (the consumer's folder
//! byte for byte as before, no wheel, no build tree). Real git repositories
//! (the mini-deepep fixture committed), real `deepep-forge plan`, real `git apply`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::*;

/// A consumer repository (pins.toml + patches/) and the mini-deepep source repository.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub rev: String,
    pub consumer: PathBuf,
    pub cache: PathBuf,
}

pub const VARIANT: &str =
    "\n[[variant]]\nname = \"sn\"\narch = \"x86_64\"\ncuda_arch_list = \"9.0\"\nmultinode = false\n";

/// The patch every test starts from: a real `git diff` of a HybridEP source file in the fixture.
pub const FILE: &str = "csrc/hybrid_ep/hybrid_ep.cu";

impl Default for Setup {
    fn default() -> Setup {
        Setup::new()
    }
}

impl Setup {
    pub fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("DeepEP");
        let rev = git_repo_from_fixture("mini-deepep", &repo);
        let consumer = dir.path().join("consumer");
        std::fs::create_dir_all(consumer.join("patches")).unwrap();
        git(&consumer, &["init", "-q", "-b", "main"]);
        let cache = dir.path().join("cache");
        Setup { dir, repo, rev, consumer, cache }
    }

    /// `git diff` of `FILE` after replacing `from` with `to` in the source repository (left clean).
    pub fn diff(&self, from: &str, to: &str) -> String {
        let f = self.repo.join(FILE);
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.contains(from), "{from} not in {FILE}");
        std::fs::write(&f, text.replacen(from, to, 1)).unwrap();
        let d = git(&self.repo, &["diff"]);
        git(&self.repo, &["checkout", "--", FILE]);
        d
    }

    /// The honest patch: one more baked string in hybrid_ep_cpp.
    pub fn note_patch(&self) -> String {
        self.diff(
            "extern \"C\" const char* hybrid_ep_sm_arch()",
            "extern \"C\" const char* hybrid_ep_patch_note() { return \"forge-patch-note-1\"; }\n\nextern \"C\" const char* hybrid_ep_sm_arch()",
        )
    }

    /// consumer/pins.toml pinning `rev` with `patches` (TOML array body) under [pin.x86_64].
    pub fn pins(&self, rev: &str, patches: &str) -> PathBuf {
        let p = self.consumer.join("pins.toml");
        let text = format!(
            "schema = 2\n[source]\nname = \"deep_ep\"\nrepo = \"https://github.com/deepseek-ai/DeepEP.git\"\nbranch = \"main\"\nbase_version = \"1.2.1\"\n[pin.x86_64]\nrev = \"{rev}\"\npatches = [{patches}]\n[pin.aarch64]\nrev = \"{rev}\"\n{VARIANT}"
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn plan(&self, pins: &Path) -> std::process::Output {
        bin()
            .args(["plan", "--variant", "sn", "--pins"])
            .arg(pins)
            .arg("--source")
            .arg(&self.repo)
            .arg("--python")
            .arg("/nonexistent/python-not-needed-before-patches")
            .current_dir(&self.consumer)
            .env("DEEPEP_FORGE_CACHE_DIR", &self.cache)
            .output()
            .unwrap()
    }
}

/// Every file under `dir` (relative path -> bytes; links as their target).
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                out.insert(rel, std::fs::read_link(&p).unwrap().to_string_lossy().into_owned().into_bytes());
            } else if m.is_dir() {
                stack.push(p);
            } else if m.is_file() {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// `plan` on `pins`: exit 2, every needle in stderr, nothing changed in the consumer, no wheel or tree.
pub fn refused(s: &Setup, pins: &Path, needles: &[&str]) {
    let before = snapshot(&s.consumer);
    let o = s.plan(pins);
    assert_eq!(o.status.code(), Some(2), "expected exit 2 for {needles:?}: {}{}", stdout(&o), stderr(&o));
    for n in needles {
        assert!(stderr(&o).contains(n), "expected `{n}` in: {}", stderr(&o));
    }
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert_eq!(before, snapshot(&s.consumer), "the consumer's files changed");
    for d in ["wheels", "tmp"] {
        let n = std::fs::read_dir(s.cache.join(d)).map(|r| r.flatten().count()).unwrap_or(0);
        assert_eq!(n, 0, "{d}/ in the cache is not empty after a refusal");
    }
}

pub fn write(s: &Setup, rel: &str, text: &str) {
    let p = s.consumer.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn patch_paths_outside_pins_repository_are_refused() {
    let s = Setup::new();
    write(&s, "patches/ok.patch", &s.note_patch());
    std::fs::write(s.dir.path().join("outside.patch"), s.note_patch()).unwrap();
    let pins = s.pins(&s.rev, "\"../outside.patch\"");
    refused(&s, &pins, &["pins.toml:9:", "contains `..`"]);
    let pins = s.pins(&s.rev, "\"/etc/passwd\"");
    refused(&s, &pins, &["pins.toml:9:", "is absolute"]);
    let pins = s.pins(&s.rev, "\"patches/./ok.patch\"");
    refused(&s, &pins, &["pins.toml:9:", "plain folder and file names"]);
    // A link inside the repository to a file outside it.
    std::os::unix::fs::symlink(s.dir.path().join("outside.patch"), s.consumer.join("patches/link.patch")).unwrap();
    let pins = s.pins(&s.rev, "\"patches/link.patch\"");
    refused(&s, &pins, &["pins.toml:9", "patches/link.patch", "symbolic link"]);
    // A linked folder on the way.
    std::os::unix::fs::symlink(s.dir.path(), s.consumer.join("up")).unwrap();
    let pins = s.pins(&s.rev, "\"up/outside.patch\"");
    refused(&s, &pins, &["symbolic link"]);
    // pins.toml outside any git repository.
    let loose = s.dir.path().join("loose");
    std::fs::create_dir_all(loose.join("patches")).unwrap();
    std::fs::write(loose.join("patches/ok.patch"), s.note_patch()).unwrap();
    let text = std::fs::read_to_string(s.pins(&s.rev, "\"patches/ok.patch\"")).unwrap();
    std::fs::write(loose.join("pins.toml"), text).unwrap();
    let o = s.plan(&loose.join("pins.toml"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("not inside a git repository"), "{}", stderr(&o));
}

#[test]
fn a_list_naming_one_file_twice_and_too_many_patches_are_refused() {
    let s = Setup::new();
    write(&s, "patches/ok.patch", &s.note_patch());
    let pins = s.pins(&s.rev, "\"patches/ok.patch\", \"patches/ok.patch\"");
    refused(&s, &pins, &["pins.toml:9:", "listed twice"]);
    let many: Vec<String> = (0..65).map(|i| format!("\"patches/p{i}.patch\"")).collect();
    let pins = s.pins(&s.rev, &many.join(", "));
    refused(&s, &pins, &["more than 64 patches"]);
    // The pin's and the variant's lists together.
    let pins = s.pins(&s.rev, "\"patches/ok.patch\"");
    let text = std::fs::read_to_string(&pins).unwrap() + "patches = [\"patches/ok.patch\"]\n";
    std::fs::write(&pins, text).unwrap();
    refused(&s, &pins, &["variant `sn`", "listed twice", "its pin's and its own together"]);
}

#[test]
fn a_recorded_sha256_that_differs_from_the_file_is_refused() {
    let s = Setup::new();
    write(&s, "patches/ok.patch", &s.note_patch());
    let wrong = "0".repeat(64);
    let pins = s.pins(&s.rev, &format!("{{ path = \"patches/ok.patch\", sha256 = \"{wrong}\" }}"));
    refused(&s, &pins, &["pins.toml:9", "patches/ok.patch", "pins.toml records 0000", "review it"]);
    let pins = s.pins(&s.rev, "{ path = \"patches/ok.patch\", sha256 = \"abc\" }");
    refused(&s, &pins, &["pins.toml:9:", "64 lowercase hex"]);
}

#[test]
fn binary_huge_and_escaping_patch_texts_are_refused() {
    let s = Setup::new();
    let note = s.note_patch();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "binary",
            format!("{note}diff --git a/blob.bin b/blob.bin\nnew file mode 100644\nindex 0000000..1111111\nGIT binary patch\nliteral 3\nKcmZQzU|;|Q00aO5\n\nliteral 0\nHcmV?d00001\n\n"),
            "binary patches are refused",
        ),
        ("nul", format!("{note}\0"), "binary patches are refused"),
        ("create-outside", note.replace(FILE, "../escape.cu"), "leaves the tree"),
        (
            "create-absolute",
            "diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ /tmp/forge-escape\n@@ -0,0 +1 @@\n+x\n".into(),
            "absolute",
        ),
        (
            "delete-outside",
            "diff --git a/../x b/../x\ndeleted file mode 100644\n--- a/../x\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n".into(),
            "leaves the tree",
        ),
        (
            "rename-outside",
            format!("diff --git a/{FILE} b/../moved.cu\nsimilarity index 100%\nrename from {FILE}\nrename to ../moved.cu\n"),
            "leaves the tree",
        ),
        ("into-git", note.replace(FILE, ".git/hooks/post-checkout"), "leaves the tree"),
        (
            "make-link",
            "diff --git a/lnk b/lnk\nnew file mode 120000\n--- /dev/null\n+++ b/lnk\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n".into(),
            "symbolic link",
        ),
        ("quoted", note.replace(&format!("a/{FILE}"), "\"a/x\\tname\""), "quoted file name"),
        ("not-a-diff", "just some words\n".into(), "changes no file"),
    ];
    for (name, text, needle) in cases {
        let rel = format!("patches/{name}.patch");
        write(&s, &rel, &text);
        let pins = s.pins(&s.rev, &format!("\"{rel}\""));
        refused(&s, &pins, &[&rel, needle]);
    }
    // Over the bound: refused as bad input, not read whole.
    let huge = format!("{note}{}", "+".repeat(1 << 20));
    write(&s, "patches/huge.patch", &huge);
    let pins = s.pins(&s.rev, "\"patches/huge.patch\"");
    refused(&s, &pins, &["patches/huge.patch", "1024 KiB"]);
    // A FIFO never blocks.
    let fifo = s.consumer.join("patches/fifo.patch");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let pins = s.pins(&s.rev, "\"patches/fifo.patch\"");
    refused(&s, &pins, &["patches/fifo.patch"]);
}

#[test]
fn a_patch_through_a_link_in_the_tree_is_refused_by_git_apply() {
    let s = Setup::new();
    // The source has a link `lnk` -> a folder outside; the patch writes `lnk/x`.
    let target = s.dir.path().join("link-target");
    std::fs::create_dir_all(&target).unwrap();
    std::os::unix::fs::symlink(&target, s.repo.join("lnk")).unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "link"]);
    let rev = git(&s.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let text = "diff --git a/lnk/x b/lnk/x\nnew file mode 100644\n--- /dev/null\n+++ b/lnk/x\n@@ -0,0 +1 @@\n+pwned\n";
    write(&s, "patches/through.patch", text);
    let pins = s.pins(&rev, "\"patches/through.patch\"");
    refused(&s, &pins, &["patch `patches/through.patch` does not apply", "beyond a symbolic link"]);
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "the patch wrote through the link");
}

#[test]
fn a_patch_that_does_not_apply_names_the_patch_the_file_and_the_hunk() {
    let s = Setup::new();
    let stale = s.diff("return \"SM_ARCH=\" SM_ARCH;", "return \"SM=\" SM_ARCH;").replace("SM_ARCH=", "SM_ARCH:=");
    write(&s, "patches/stale.patch", &stale);
    let pins = s.pins(&s.rev, "\"patches/stale.patch\"");
    refused(
        &s,
        &pins,
        &["patch `patches/stale.patch` does not apply at", "patch failed: csrc/hybrid_ep/hybrid_ep.cu:"],
    );
}

#[test]
fn a_patch_already_contained_upstream_says_so_and_how_to_drop_it() {
    let s = Setup::new();
    let note = s.note_patch();
    write(&s, "patches/note.patch", &note);
    // Upstream takes the change: the patch now applies in reverse.
    std::fs::write(s.dir.path().join("n.patch"), &note).unwrap();
    git(&s.repo, &["apply", "../n.patch"]);
    git(&s.repo, &["commit", "-q", "-am", "upstream takes the note"]);
    let rev = git(&s.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let pins = s.pins(&rev, "\"patches/note.patch\"");
    refused(
        &s,
        &pins,
        &["patch `patches/note.patch` is already contained in", "remove \"patches/note.patch\" from the patches list"],
    );
}

#[test]
fn plan_lists_each_patch_its_sha256_files_and_loudly_a_build_file() {
    let s = Setup::new();
    let note = s.note_patch();
    write(&s, "patches/note.patch", &note);
    let f = s.repo.join("setup.py");
    let setup = std::fs::read_to_string(&f).unwrap();
    std::fs::write(&f, format!("{setup}\n# a comment a patch adds\n")).unwrap();
    let build = git(&s.repo, &["diff"]);
    git(&s.repo, &["checkout", "--", "setup.py"]);
    write(&s, "patches/build.patch", &build);
    let pins = s.pins(&s.rev, "\"patches/note.patch\", \"patches/build.patch\"");
    let o = s.plan(&pins);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let sha = |t: &str| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(t.as_bytes()))
    };
    assert!(out.contains("patches     patched: 2 patches (patches/note.patch "), "{out}");
    assert!(out.contains(&format!("patch 1     patches/note.patch sha256 {} touches {FILE}", sha(&note))), "{out}");
    assert!(out.contains(&format!("patch 2     patches/build.patch sha256 {} touches setup.py", sha(&build))), "{out}");
    assert!(out.contains("BUILD FILE  patches/build.patch changes setup.py"), "{out}");
    let short = &s.rev[..7];
    let version = out.lines().find(|l| l.trim_start().starts_with("version")).unwrap();
    assert!(version.contains(&format!("1.2.1+{short}.p")), "{version}");
    // Exact: says so, and the label is the exact one.
    let exact = s.pins(&s.rev, "");
    let o = s.plan(&exact);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("patches     exact, unpatched"), "{}", stdout(&o));
    assert!(stdout(&o).contains(&format!("version     1.2.1+{short}  ")), "{}", stdout(&o));
}

#[test]
fn the_example_deepep_patch_touches_one_hybrid_ep_source_and_matches_its_recorded_sha256() {
    let dir = root().join("docs/examples");
    let pins = forge_model::pins::Pins::load(&dir.join("pins-patched.toml")).unwrap();
    let pin = &pins.pins[&forge_model::pins::Arch::X86_64];
    let set = forge_model::patches::load(&pins.path, &pin.patches.iter().collect::<Vec<_>>()).unwrap();
    assert_eq!(set.len(), 1);
    assert_eq!(set[0].files, vec!["csrc/hybrid_ep/hybrid_ep.cu".to_string()]);
    assert!(set[0].build_files.is_empty());
    let label = forge_model::patches::label("1.2.1", "17cfb81", &set);
    assert!(label.starts_with("1.2.1+17cfb81.p"), "{label}");
}

#[test]
fn pin_set_checks_every_patch_at_the_new_revision_in_a_scratch_index() {
    let s = Setup::new();
    let note = s.note_patch();
    write(&s, "patches/note.patch", &note);
    std::fs::copy(root().join("tests/fixtures/consumer-unified/pyproject.toml"), s.consumer.join("pyproject.toml"))
        .unwrap();
    let pins = s.pins(&s.rev, "\"patches/note.patch\"");
    let commit = |msg: &str, f: &dyn Fn(&str) -> String| {
        git(&s.repo, &["checkout", "-q", &s.rev]);
        let p = s.repo.join(FILE);
        std::fs::write(&p, f(&std::fs::read_to_string(&p).unwrap())).unwrap();
        git(&s.repo, &["commit", "-qam", msg]);
        git(&s.repo, &["rev-parse", "HEAD"]).trim().to_string()
    };
    let conflicting = commit("rename", &|t| t.replace("hybrid_ep_sm_arch()", "hybrid_ep_sm_arch_v2()"));
    std::fs::write(s.dir.path().join("n.patch"), &note).unwrap();
    let contained = {
        git(&s.repo, &["checkout", "-q", &s.rev]);
        git(&s.repo, &["apply", "../n.patch"]);
        git(&s.repo, &["commit", "-qam", "upstream takes it"]);
        git(&s.repo, &["rev-parse", "HEAD"]).trim().to_string()
    };
    let fine = commit("unrelated", &|t| format!("// a comment at the top\n{t}"));
    let objects = |repo: &Path| git(repo, &["count-objects"]);
    let before_objects = objects(&s.repo);
    let pin_set = |rev: &str| {
        bin()
            .args(["pin", "set", rev, "--source"])
            .arg(&s.repo)
            .current_dir(&s.consumer)
            .env("DEEPEP_FORGE_CACHE_DIR", &s.cache)
            .output()
            .unwrap()
    };
    for (rev, needle) in [
        (&conflicting, "patch `patches/note.patch` does not apply at"),
        (&contained, "patch `patches/note.patch` is already contained in"),
    ] {
        let before = snapshot(&s.consumer);
        let o = pin_set(rev);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
        assert_eq!(before, snapshot(&s.consumer), "pin set wrote after a refusal");
    }
    assert!(stderr(&pin_set(&contained)).contains("remove \"patches/note.patch\" from the patches list"));
    let o = pin_set(&fine);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let after = std::fs::read_to_string(&pins).unwrap();
    assert!(after.contains(&format!("rev = \"{fine}\"\npatches = [\"patches/note.patch\"]")), "{after}");
    // The checks ran in a scratch index: the source repository gained no object, its tree is clean.
    assert_eq!(before_objects, objects(&s.repo));
    assert_eq!(git(&s.repo, &["status", "--porcelain"]), "");

    // --drop-patch / --patch edit the list through the same journal; bad ones write nothing.
    let edit = |extra: &[&str]| {
        bin()
            .args(["pin", "set", &fine, "--source"])
            .arg(&s.repo)
            .args(extra)
            .current_dir(&s.consumer)
            .env("DEEPEP_FORGE_CACHE_DIR", &s.cache)
            .output()
            .unwrap()
    };
    for (extra, needle) in [
        (&["--drop-patch", "patches/nope.patch"][..], "lists such a patch"),
        (&["--patch", "../n.patch"][..], "not beside or below"),
        (&["--patch", "patches/note.patch"][..], "already lists it"),
    ] {
        let before = snapshot(&s.consumer);
        let o = edit(extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{extra:?}: {}", stderr(&o));
        assert_eq!(before, snapshot(&s.consumer), "{extra:?} wrote");
    }
    let o = edit(&["--drop-patch", "patches/note.patch"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !std::fs::read_to_string(&pins).unwrap().contains("patches"),
        "{}",
        std::fs::read_to_string(&pins).unwrap()
    );
    let o = edit(&["--patch", "patches/note.patch"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(note.as_bytes()))
    };
    let text = std::fs::read_to_string(&pins).unwrap();
    assert!(text.contains(&format!("{{ path = \"patches/note.patch\", sha256 = \"{sha}\" }}")), "{text}");
    forge_model::pins::Pins::parse(&text, &pins).unwrap();
}
