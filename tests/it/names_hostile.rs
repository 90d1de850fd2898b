//! Held-out shapes of issue #55's classes on the paths that accept a wheel
//! without building it (`probe --wheel`, `verify`): a tag set read by its
//! every tag (both orders), `linux_*` anywhere in the set, a member that cannot
//! be read (fail closed, never a pass), a member that needs musl's libc in a
//! manylinux wheel. Wheels hold a shared library gcc compiles here.
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::tiny_wheel::{shared_library, tiny_wheel};
use crate::support::{exe, stderr, stdout};

const PTHREAD: &str = "#include <pthread.h>\nstatic void *f(void *x) { return x; }\n\
    int go(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }\n";

/// A wheel named with `tag` holding `fx/_ext.so` (compiled from [`PTHREAD`]) and `extra`.
fn wheel(dir: &Path, tag: &str, extra: &[(String, Vec<u8>)]) -> PathBuf {
    let ext = shared_library(&dir.join("ext"), "_ext.so", PTHREAD);
    let mut files = vec![("fx/_ext.so".to_string(), ext)];
    files.extend(extra.iter().cloned());
    let w = tiny_wheel(&dir.join("w"), "fx", "1.0", &[], &files);
    let named = dir.join(format!("fx-1.0-cp311-cp311-{tag}.whl"));
    std::fs::rename(w, &named).unwrap();
    named
}

/// `probe --wheel --format json`: (exit code, checks of `rule`).
fn probe(wheel: &Path, rule: &str) -> (i32, Vec<serde_json::Value>) {
    let o = Command::new(exe()).args(["probe", "--wheel"]).arg(wheel).args(["--format", "json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let checks = v["checks"].as_array().unwrap().iter().filter(|c| c["rule"] == rule).cloned().collect();
    (o.status.code().unwrap_or(-1), checks)
}

fn has(checks: &[serde_json::Value], status: &str, text: &str) -> bool {
    checks.iter().any(|c| c["status"] == status && c["evidence"].as_str().unwrap_or_default().contains(text))
}

#[test]
fn every_tag_of_a_set_is_judged_in_either_order() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, set) in ["manylinux_2_38_x86_64.manylinux_2_38_aarch64", "manylinux_2_38_aarch64.manylinux_2_38_x86_64"]
        .iter()
        .enumerate()
    {
        let w = wheel(&tmp.path().join(format!("m{i}")), set, &[]);
        let (code, machine) = probe(&w, "elf-machine");
        assert!(machine.iter().any(|c| c["status"] == "fail"), "{set}: {machine:?}");
        let (_, tag) = probe(&w, "platform-tag");
        assert!(has(&tag, "fail", "names aarch64 but the ELF machine"), "{set}: {tag:?}");
        assert_eq!(code, 1, "{set}");
    }
    for (i, set) in ["linux_x86_64.manylinux_2_38_x86_64", "manylinux_2_38_x86_64.linux_x86_64"].iter().enumerate() {
        let w = wheel(&tmp.path().join(format!("l{i}")), set, &[]);
        let (_, tag) = probe(&w, "platform-tag");
        assert!(has(&tag, "warn", "linux_x86_64 claims any Linux"), "{set}: {tag:?}");
        assert!(!tag.iter().any(|c| c["status"] == "pass"), "{set}: {tag:?}");
    }
    for (i, set) in
        ["manylinux_2_17_x86_64.manylinux_2_38_x86_64", "manylinux_2_38_x86_64.manylinux2014_x86_64"].iter().enumerate()
    {
        let w = wheel(&tmp.path().join(format!("g{i}")), set, &[]);
        let (code, tag) = probe(&w, "platform-tag");
        assert!(has(&tag, "fail", "claims less than the binaries need: manylinux_2_34_x86_64"), "{set}: {tag:?}");
        assert_eq!(code, 1, "{set}");
    }
    // A pass says who can load it.
    let w = wheel(&tmp.path().join("ok"), "manylinux_2_34_x86_64", &[]);
    let (_, tag) = probe(&w, "platform-tag");
    assert!(has(&tag, "pass", "loads where glibc >= 2.34 (e.g. RHEL 9, Ubuntu 22.04, Debian 12"), "{tag:?}");
}

#[test]
fn an_unreadable_member_fails_closed_and_musl_in_a_manylinux_wheel_fails() {
    let tmp = tempfile::tempdir().unwrap();
    // A renamed wheel with a truncated ELF member: FAIL (never the MATCH an unread member gave).
    let junk = ("fx/junk.so".to_string(), b"\x7fELF\x02\x01\x01\0\0\0".to_vec());
    let w = wheel(&tmp.path().join("t"), "manylinux_2_17_x86_64", &[junk]);
    let (code, tag) = probe(&w, "platform-tag");
    assert!(has(&tag, "fail", "fx/junk.so cannot be read"), "{tag:?}");
    assert!(has(&tag, "fail", "claims less than the binaries need"), "the rest is judged too: {tag:?}");
    assert_eq!(code, 1);
    // A member that needs musl's libc (its DT_NEEDED, made by linking a stub of that soname).
    let d = tmp.path().join("musl");
    std::fs::create_dir_all(&d).unwrap();
    let stub = shared_library(&d.join("stub"), "libc.musl-x86_64.so.1", "int musl_fn(void) { return 1; }\n");
    std::fs::write(d.join("libmuslstub.so"), stub).unwrap();
    std::fs::write(d.join("m.c"), "int musl_fn(void);\nint go(void) { return musl_fn(); }\n").unwrap();
    let o = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(d.join("m.so"))
        .arg(d.join("m.c"))
        .arg(format!("-L{}", d.display()))
        .arg("-lmuslstub")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let m = ("fx/m.so".to_string(), std::fs::read(d.join("m.so")).unwrap());
    let w = wheel(&tmp.path().join("mw"), "manylinux_2_34_x86_64", &[m]);
    let (code, tag) = probe(&w, "platform-tag");
    assert!(has(&tag, "fail", "needs musl's libc"), "{tag:?}");
    assert_eq!(code, 1);
}

/// One label function: no product source but `patches::label` writes a `{..}+{..}`
/// version (torch's own `<version>+<cuda>` in lock check's environment rule is torch's).
#[test]
fn labels_are_made_only_by_patches_label() {
    let re = regex::Regex::new(r"\{[A-Za-z_.0-9:()]*\}\+\{").unwrap();
    let mut found = Vec::new();
    for (path, text) in crate::support::workspace_sources() {
        let p = path.to_string_lossy().replace('\\', "/");
        if p.ends_with("/tests.rs") || p.contains("/tests/") || p.ends_with("forge-model/src/patches.rs") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            if re.is_match(line) && !line.contains("tc.torch") {
                found.push(format!("{p}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "a label built outside forge_model::patches::label:\n{}", found.join("\n"));
}
