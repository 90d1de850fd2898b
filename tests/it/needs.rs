//! What a test needs from outside the checkout is a cargo feature, not a string
//! a script parses: such a test is
//! `#[cfg_attr(not(feature = "needs-<group>"), ignore = "needs <what>...")]`,
//! so a plain `cargo test` lists it as ignored with what it needs, and
//! `--features needs-<group>` (what `.ci/run` turns on when the need is here)
//! runs it, failing, naming what to get, when the need is missing. No test
//! prints a skip and returns as a pass.
use std::collections::BTreeMap;

use crate::support;

/// Every attribute of a Rust file that starts a line (`#[...]`, over as many
/// lines as rustfmt wraps it to), with its line number, its lines joined by `\n`.
fn attributes(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, i32)> = None;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        let (start, attr, mut depth) = match open.take() {
            Some((start, attr, depth)) => (start, attr + "\n" + t, depth),
            None if t.starts_with("#[") => (n + 1, t.to_string(), 0),
            None => continue,
        };
        let mut in_string = false;
        let mut escaped = false;
        for c in t.chars() {
            match c {
                _ if escaped => escaped = false,
                '\\' if in_string => escaped = true,
                '"' => in_string = !in_string,
                '[' | '(' if !in_string => depth += 1,
                ']' | ')' if !in_string => depth -= 1,
                _ => {}
            }
        }
        if depth > 0 {
            open = Some((start, attr, depth));
        } else {
            out.push((start, attr));
        }
    }
    out
}

/// What one attribute says about ignoring a test: `None` when it ignores
/// nothing, `Ok((feature, reason))` for the one accepted form (the reason
/// without its `needs `), `Err(why)` for any other attribute that ignores.
fn ignore_attr(attr: &str) -> Option<Result<(String, String), String>> {
    let words = regex::Regex::new(r#""([^"\\]|\\.)*""#).unwrap().replace_all(attr, "\"\"");
    let ignores = regex::Regex::new(r"\bignore\b").unwrap().is_match(&words);
    if !(attr.starts_with("#[ignore") || (attr.starts_with("#[cfg_attr") && ignores)) {
        return None;
    }
    let form = regex::Regex::new(
        r#"^#\[cfg_attr\(\s*not\(feature = "(needs-[a-z0-9]+(?:-[a-z0-9]+)*)"\),\s*ignore = "needs ([^"\\]+)",?\s*\)\]$"#,
    )
    .unwrap();
    Some(match form.captures(attr) {
        Some(c) => Ok((c[1].to_string(), c[2].to_string())),
        None => Err(format!(
            "must be #[cfg_attr(not(feature = \"needs-<group>\"), ignore = \"needs <what>...\")]: {}",
            attr.replace('\n', " ")
        )),
    })
}

/// `.ci/run`'s `groups=(...)` table: each group's needs- feature and its name
/// (what a reason starts with after `needs `).
fn ci_groups() -> BTreeMap<String, String> {
    let run = std::fs::read_to_string(support::root().join(".ci/run")).unwrap();
    let table = run.split_once("groups=(\n").expect(".ci/run has a groups=( table").1;
    let table = table.split_once("\n)").unwrap().0;
    table
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.trim().trim_matches('"').split('|').collect();
            assert!(f.len() >= 4, ".ci/run: a group line is `name|ci or -|needs-feature|check`: {l}");
            (f[2].to_string(), f[0].to_string())
        })
        .collect()
}

/// The root package's `[features]` whose names start with `needs-`.
fn declared_features() -> Vec<String> {
    let text = std::fs::read_to_string(support::root().join("Cargo.toml")).unwrap();
    let manifest: toml::Table = text.parse().unwrap();
    let features = manifest.get("features").and_then(|f| f.as_table()).expect("Cargo.toml has [features]");
    features.keys().filter(|k| k.starts_with("needs-")).cloned().collect()
}

#[test]
fn every_ignored_test_names_a_group_ci_runs_and_none_skips_silently() {
    // The matcher itself: the accepted form (one line, or as rustfmt wraps it)
    // and forms it must refuse.
    let wrapped = "#[cfg_attr(\n    not(feature = \"needs-tools-venv\"),\n    ignore = \"needs the tools venv (x)\"\n)]\nfn f() {}";
    let attrs = attributes(wrapped);
    assert_eq!(attrs.len(), 1, "{attrs:?}");
    assert_eq!(ignore_attr(&attrs[0].1), Some(Ok(("needs-tools-venv".to_string(), "the tools venv (x)".to_string()))));
    assert_eq!(
        ignore_attr("#[cfg_attr(not(feature = \"needs-gpus\"), ignore = \"needs 2 NVIDIA GPUs\")]"),
        Some(Ok(("needs-gpus".to_string(), "2 NVIDIA GPUs".to_string())))
    );
    for bad in [
        "#[ignore]",
        "#[ignore = \"needs the tools venv\"]",
        "#[cfg_attr(feature = \"needs-tools-venv\", ignore = \"needs the tools venv\")]",
        "#[cfg_attr(not(feature = \"tools-venv\"), ignore = \"needs the tools venv\")]",
        "#[cfg_attr(not(feature = \"needs-tools-venv\"), ignore = \"the tools venv\")]",
        "#[cfg_attr(not(feature = \"needs-tools-venv\"), ignore)]",
        "#[cfg_attr(not(ci), ignore = \"needs the tools venv\")]",
    ] {
        assert!(matches!(ignore_attr(bad), Some(Err(_))), "accepted: {bad}");
    }
    for fine in ["#[test]", "#[cfg_attr(test, allow(dead_code))]", "#[doc = \"ignore\"]"] {
        assert_eq!(ignore_attr(fine), None, "{fine}");
    }

    let groups = ci_groups();
    let declared = declared_features();
    assert!(groups.contains_key("needs-tools-venv"), "{groups:?}");
    let mut bad = Vec::new();
    for f in &declared {
        if !groups.contains_key(f) {
            bad.push(format!("Cargo.toml: feature {f} is in no group of .ci/run (so CI never turns it on)"));
        }
    }
    for f in groups.keys() {
        if !declared.contains(f) {
            bad.push(format!(".ci/run: feature {f} is not declared in Cargo.toml's [features]"));
        }
    }
    let mut ignored = 0;
    let root = support::root();
    for e in walkdir::WalkDir::new(root.join("tests/it")).into_iter().flatten() {
        if e.path().extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        let name = e.path().strip_prefix(&root).unwrap().display().to_string();
        for (n, line) in text.lines().enumerate() {
            if line.contains(concat!("eprint", "ln!")) && line.to_ascii_lowercase().contains("skip") {
                bad.push(format!("{name}:{}: a skip message: make it a needs- feature (or a failure)", n + 1));
            }
        }
        for (n, attr) in attributes(&text) {
            let at = format!("{name}:{n}");
            match ignore_attr(&attr) {
                None => {}
                Some(Err(why)) => bad.push(format!("{at}: {why}")),
                Some(Ok((feature, reason))) => {
                    ignored += 1;
                    match groups.get(&feature) {
                        None => bad.push(format!("{at}: {feature} is no group of .ci/run ({:?})", groups.keys())),
                        Some(group) if !reason.starts_with(group.as_str()) => {
                            bad.push(format!("{at}: `needs {reason}` does not start with {feature}'s group `{group}`"))
                        }
                        Some(_) => {}
                    }
                    if !declared.contains(&feature) {
                        bad.push(format!("{at}: {feature} is not declared in Cargo.toml's [features]"));
                    }
                }
            }
        }
    }
    assert!(ignored > 0, "no test with a need found: is the scan looking at tests/it?");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
