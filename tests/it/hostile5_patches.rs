//! Hostile input, fifth pass, class 1: a patch may not create, retarget or
//! change a symbolic link (or submodule), in any spelling of the mode, nor
//! write through one. The text check reads modes as git does (octal, leading
//! zeros) and git's own reading of the applied patch (the scratch index
//! against the pinned tree) decides the rest. Each case: real `plan`, exit 2
//! naming the patch, nothing written.

use crate::adversarial_patches::{refused, write, Setup};
use crate::support::*;

/// The source repository with a committed link `lnk -> target`; the new revision.
fn with_link(s: &Setup) -> String {
    std::os::unix::fs::symlink("csrc", s.repo.join("lnk")).unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "link"]);
    git(&s.repo, &["rev-parse", "HEAD"]).trim().to_string()
}

#[test]
fn a_link_created_in_any_spelling_of_its_mode_is_refused() {
    let s = Setup::new();
    for (name, mode) in [
        ("octal0", "0120000"),
        ("octal00", "00120000"),
        ("plain", "120000"),
        ("perm", "120755"),
        ("gitlink", "0160000"),
    ] {
        let text = format!(
            "diff --git a/evil b/evil\nnew file mode {mode}\n--- /dev/null\n+++ b/evil\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
        );
        let rel = format!("patches/{name}.patch");
        write(&s, &rel, &text);
        let pins = s.pins(&s.rev, &format!("\"{rel}\""));
        refused(&s, &pins, &[&rel, "symbolic link", "pins.toml:"]);
    }
}

#[test]
fn a_link_retargeted_or_made_from_a_file_is_refused() {
    let s = Setup::new();
    let rev = with_link(&s);
    let cases = [
        // The `index a..b 120000` line of `git diff` for a link's new target.
        ("retarget-index", "diff --git a/lnk b/lnk\nindex 1111111..2222222 120000\n--- a/lnk\n+++ b/lnk\n@@ -1 +1 @@\n-csrc\n\\ No newline at end of file\n+/etc\n\\ No newline at end of file\n".to_string()),
        // No mode line at all: only git's reading of the result shows the link changed.
        ("retarget-bare", "diff --git a/lnk b/lnk\n--- a/lnk\n+++ b/lnk\n@@ -1 +1 @@\n-csrc\n\\ No newline at end of file\n+/etc\n\\ No newline at end of file\n".to_string()),
        ("file-to-link", "diff --git a/setup.py b/setup.py\nold mode 100644\nnew mode 0120000\n".to_string()),
        ("link-to-file", "diff --git a/lnk b/lnk\nold mode 0120000\nnew mode 100644\n".to_string()),
    ];
    for (name, text) in cases {
        let rel = format!("patches/{name}.patch");
        write(&s, &rel, &text);
        let pins = s.pins(&rev, &format!("\"{rel}\""));
        refused(&s, &pins, &[&rel, "symbolic link"]);
    }
}

#[test]
fn a_write_through_a_committed_link_is_refused() {
    let s = Setup::new();
    let rev = with_link(&s);
    let text = "diff --git a/lnk/new.cu b/lnk/new.cu\nnew file mode 100644\n--- /dev/null\n+++ b/lnk/new.cu\n@@ -0,0 +1 @@\n+x\n";
    write(&s, "patches/through.patch", text);
    let pins = s.pins(&rev, "\"patches/through.patch\"");
    refused(&s, &pins, &["patches/through.patch", "symbolic link"]);
}
