//! One place reads the process environment (`crates/forge-os/src/environ.rs`), and it lists every
//! variable it reads with what it does; docs/environment.md shows the same list.
//! Here: no `std::env::var*` outside that module, every `DEEPEP_FORGE_*` name the
//! source names is listed, every listed name is read somewhere, and the page
//! lists each one.
use crate::support;

use forge_os::environ::VARIABLES;

/// (file, line number, line) of every non-comment line of the workspace's sources.
fn code() -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for (path, text) in support::workspace_sources() {
        let rel = path.display().to_string();
        for (n, line) in text.lines().enumerate() {
            if !line.trim_start().starts_with("//") {
                out.push((rel.clone(), n + 1, line.to_string()));
            }
        }
    }
    out
}

#[test]
fn only_environ_reads_the_environment() {
    let read = regex::Regex::new(r"\benv::(var|var_os|vars|vars_os)\(").unwrap();
    let found: Vec<String> = code()
        .into_iter()
        .filter(|(f, _, l)| !f.ends_with("/environ.rs") && read.is_match(l))
        .map(|(f, n, l)| format!("{f}:{n}: {}", l.trim()))
        .collect();
    assert!(found.is_empty(), "read the environment through crate::environ:\n{}", found.join("\n"));
    assert!(read.is_match("let x = std::env::var_os(\"HOME\");"), "the check sees what it must");
}

#[test]
fn every_variable_is_listed_and_every_listed_one_is_read() {
    let names: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
    let ours = regex::Regex::new(r#""(DEEPEP_FORGE_[A-Z0-9_]+)""#).unwrap();
    let mut unlisted = Vec::new();
    let all: Vec<(String, usize, String)> = code();
    for (f, n, l) in &all {
        for c in ours.captures_iter(l) {
            // the build's own variables (set by the plan, never read) are not ours to list
            if !names.contains(&&c[1]) && &c[1] != "DEEPEP_FORGE_NVCC_DRIVER" && &c[1] != "DEEPEP_FORGE_VARIANT" {
                unlisted.push(format!("{f}:{n}: {}", &c[1]));
            }
        }
    }
    assert!(unlisted.is_empty(), "variables src/environ.rs does not list:\n{}", unlisted.join("\n"));
    let text: String = all.iter().filter(|(f, _, _)| !f.ends_with("/environ.rs")).map(|(_, _, l)| l.as_str()).collect();
    let unread: Vec<&str> = names.iter().copied().filter(|n| !text.contains(&format!("\"{n}\""))).collect();
    assert!(unread.is_empty(), "listed in src/environ.rs but read nowhere: {unread:?}");
    for v in VARIABLES {
        assert!(!v.what.is_empty(), "{} says nothing", v.name);
    }
}

#[test]
fn the_page_lists_every_variable() {
    let page = std::fs::read_to_string(support::root().join("docs/environment.md")).unwrap();
    let missing: Vec<&str> =
        VARIABLES.iter().map(|v| v.name).filter(|n| !page.contains(&format!("| `{n}` |"))).collect();
    assert!(missing.is_empty(), "docs/environment.md lacks rows for {missing:?}");
}
