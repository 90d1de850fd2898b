//! A patched build end to end with real nvcc, git apply, pip and patchelf: the
//! mini-deepep fixture built exact and with one honest source patch (one more
//! baked string in hybrid_ep_cpp). The patched wheel has its own label
//! (`<base>+<short>.p<set>`) and sha256, installs under that version, carries
//! the patch text in its provenance and as a material of its statement, is
//! bit-identical when built from another checkout in another folder, `verify`s
//! from the wheel alone (the patch file deleted), `diff` names only the
//! patched extension, and `probe` says which is which.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::build_support::*;
use crate::support::*;

const VARIANT: &str = VARIANT_R;

const FILE: &str = "csrc/hybrid_ep/hybrid_ep.cu";

/// The patch as `git diff` writes it, made in the lab's source repository (left clean).
fn note_patch(lab: &Lab) -> String {
    let f = lab.repo.join(FILE);
    let text = std::fs::read_to_string(&f).unwrap();
    let at = "extern \"C\" const char* hybrid_ep_sm_arch()";
    let note = "extern \"C\" const char* hybrid_ep_patch_note() { return \"forge-patch-note-1\"; }\n\n";
    std::fs::write(&f, text.replacen(at, &format!("{note}{at}"), 1)).unwrap();
    let d = git(&lab.repo, &["diff"]);
    git(&lab.repo, &["checkout", "--", FILE]);
    d
}

/// A consumer repository in the lab with pins.toml listing the patch; returns pins.toml.
fn patched_pins(lab: &Lab, patch: &str) -> PathBuf {
    let consumer = lab.dir.path().join("consumer");
    std::fs::create_dir_all(consumer.join("patches")).unwrap();
    git(&consumer, &["init", "-q", "-b", "main"]);
    std::fs::write(consumer.join("patches/note.patch"), patch).unwrap();
    let exact = std::fs::read_to_string(lab.pins_with(&lab.rev, VARIANT)).unwrap();
    let pin = format!("[pin.x86_64]\nrev = \"{}\"\n", lab.rev);
    assert!(exact.contains(&pin));
    let text = exact.replacen(&pin, &format!("{pin}patches = [\"patches/note.patch\"]\n"), 1);
    std::fs::write(consumer.join("pins.toml"), text).unwrap();
    consumer.join("pins.toml")
}

fn build(lab: &Lab, pins: &Path, out: &Path) -> PathBuf {
    let o = lab
        .forge(&[
            "build-wheel",
            "--variant",
            "r",
            "--no-cache",
            "--no-compiler-cache",
            "--pins",
            pins.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let w = files_with(out, ".whl");
    assert_eq!(w.len(), 1, "{w:?}");
    w[0].clone()
}

fn unzip_member(lab: &Lab, wheel: &Path, suffix: &str) -> Vec<u8> {
    let u = lab.dir.path().join(format!("u-{}", sha256sum(wheel)));
    if !u.exists() {
        run(Command::new("unzip").arg("-q").arg(wheel).arg("-d").arg(&u));
    }
    let mut stack = vec![u];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                return std::fs::read(p).unwrap();
            }
        }
    }
    panic!("no member ending in {suffix} in {}", wheel.display());
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn exact_and_patched_builds_differ_in_label_and_bytes_each_verifies_and_the_patched_one_reproduces() {
    let (a, b) = (Lab::new(), Lab::new());
    assert_ne!(a.repo, b.repo);
    let patch = note_patch(&a);
    let short = &a.rev[..7];

    let exact = build(&a, &a.pins_with(&a.rev, VARIANT), &a.dir.path().join("exact"));
    let pins_a = patched_pins(&a, &patch);
    let patched = build(&a, &pins_a, &a.dir.path().join("patched"));
    // Another checkout, another lab folder, another cache: the same bytes.
    let again = build(&b, &patched_pins(&b, &patch), &b.dir.path().join("patched"));
    assert_eq!(sha256sum(&patched), sha256sum(&again), "a patched build depends on where it ran");
    assert_ne!(sha256sum(&exact), sha256sum(&patched));

    // Labels: exact `<base>+<short>`, patched `<base>+<short>.p<8 hex>`.
    let name = |w: &Path| forge_wheel::wheel::WheelName::parse(&w.file_name().unwrap().to_string_lossy()).unwrap();
    assert_eq!(name(&exact).version, format!("1.2.1+{short}"));
    let pv = name(&patched).version;
    let digest = pv.strip_prefix(&format!("1.2.1+{short}.p")).unwrap_or_else(|| panic!("{pv}"));
    assert!(digest.len() == 8 && digest.bytes().all(|c| c.is_ascii_hexdigit()), "{pv}");
    // pip installs it under that version (dist-info renamed, METADATA and RECORD agree).
    let target = a.dir.path().join("installed");
    let o = Command::new(a.tools.join("bin/python"))
        .args(["-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target"])
        .arg(&target)
        .arg(&patched)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(target.join(format!("deep_ep-{pv}.dist-info/METADATA")).is_file());

    // The patch is in the binary, and only in the patched wheel.
    let hep = |w: &Path| {
        let u = a.dir.path().join(format!("u-{}", sha256sum(w)));
        let _ = unzip_member(&a, w, "METADATA");
        let so = files_with(&u, ".so").into_iter().find(|p| p.to_string_lossy().contains("hybrid_ep_cpp")).unwrap();
        std::fs::read(so).unwrap()
    };
    assert!(contains(&hep(&patched), "forge-patch-note-1"));
    assert!(!contains(&hep(&exact), "forge-patch-note-1"));

    // Provenance: name, sha256, files and the text itself; the statement lists it as a material.
    let prov: serde_json::Value =
        serde_json::from_slice(&unzip_member(&a, &patched, "deepep-forge-provenance.json")).unwrap();
    let p = &prov["source"]["patches"][0];
    assert_eq!(p["name"], "patches/note.patch");
    assert_eq!(p["text"], patch.as_str());
    assert_eq!(p["files"][0], FILE);
    let sha = p["sha256"].as_str().unwrap().to_string();
    let exact_prov: serde_json::Value =
        serde_json::from_slice(&unzip_member(&a, &exact, "deepep-forge-provenance.json")).unwrap();
    assert!(exact_prov["source"].get("patches").is_none(), "an exact wheel's provenance is as before");
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{}.intoto.json", patched.display())).unwrap()).unwrap();
    let deps = st["predicate"]["buildDefinition"]["resolvedDependencies"].as_array().unwrap();
    let m = deps.iter().find(|d| d["name"] == "patch/1").unwrap_or_else(|| panic!("{deps:?}"));
    assert_eq!(m["digest"]["sha256"], sha.as_str());
    assert_eq!(m["uri"], "patch:patches/note.patch");

    // diff: only the patched extension (and the dist-info) differ; each side says what it is.
    let d = forge(a.dir.path(), &["diff", "--format", "json", exact.to_str().unwrap(), patched.to_str().unwrap()]);
    assert_eq!(d.status.code(), Some(1), "{}", stderr(&d));
    let j: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
    assert_eq!(j["built"]["a"], "exact, unpatched");
    assert!(j["built"]["b"].as_str().unwrap().starts_with("patched: 1 patch (patches/note.patch "), "{j}");
    let human = stdout(&forge(a.dir.path(), &["diff", exact.to_str().unwrap(), patched.to_str().unwrap()]));
    assert!(human.contains("A  is exact, unpatched") && human.contains("B  is patched: 1 patch"), "{human}");
    let members: Vec<String> = j["diff"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["content"] == true)
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!members.iter().any(|m| m.contains("deep_ep_cpp")), "deep_ep_cpp changed: {members:?}");
    assert!(members.iter().any(|m| m.starts_with("hybrid_ep_cpp")), "{members:?}");

    // probe: the provenance agrees with the binary and says patched / exact.
    let probe = |w: &Path| {
        let o = forge(a.dir.path(), &["probe", "--wheel", w.to_str().unwrap()]);
        stdout(&o)
    };
    let pp = probe(&patched);
    assert!(
        pp.contains(&format!("at {short} (patched: 1 patch (patches/note.patch "))
            && pp.contains("agrees with the binary"),
        "{pp}"
    );
    assert!(probe(&exact).contains(&format!("at {short} (exact, unpatched) agrees with the binary")));

    // verify from the wheel alone: the consumer's patch file is gone.
    std::fs::remove_dir_all(a.dir.path().join("consumer")).unwrap();
    let check = a.dir.path().join("check");
    std::fs::create_dir_all(&check).unwrap();
    let copy = check.join(patched.file_name().unwrap());
    std::fs::copy(&patched, &copy).unwrap();
    let v = a.forge(&["verify", copy.to_str().unwrap(), "--source", a.repo.to_str().unwrap()]).output().unwrap();
    assert_eq!(v.status.code(), Some(0), "{}{}", stdout(&v), stderr(&v));
    assert!(stdout(&v).contains("patched: 1 patch (patches/note.patch"), "{}", stdout(&v));
}
