//! ARCHITECTURE.md stays true in what a machine can check: every path it
//! names (in backticks: `src/lock/rules.rs`, `tests/fixtures/mini-deepep/`,
//! `.ci/run`) exists, and every code symbol it names exists in the source:
//! a path `cli::main_from` (the module and the item), a type or variant
//! (`RunArgs`, `RuntimeNeeds`), a constant (`RUNTIME_RULES`), a function or
//! field with an underscore (`environment_gaps`, `nccl_reuse`). Where a
//! symbol is named with its module (`provenance::RuntimeNeeds`), the module
//! must be where it is defined.
use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Every `.rs` file of the workspace's crates (the CLI's `src/`, `crates/*/src/`) and of xtask, with its text.
fn sources() -> Vec<(PathBuf, String)> {
    files_under(&["src", "crates", "xtask/src"])
}

/// The source folders whose files are modules: `src/` and each `crates/<crate>/src/`.
fn src_roots(root: &Path) -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| PathBuf::from("crates").join(e.file_name()).join("src"))
        .collect();
    crates.sort();
    v.extend(crates);
    v
}

fn files_under(dirs: &[&str]) -> Vec<(PathBuf, String)> {
    let root = support::root();
    let mut out = Vec::new();
    for dir in dirs {
        for e in walkdir::WalkDir::new(root.join(dir)).into_iter().flatten() {
            if e.path().extension().is_some_and(|x| x == "rs") {
                out.push((e.path().strip_prefix(&root).unwrap().to_path_buf(), read(e.path())));
            }
        }
    }
    out
}

/// The backticked spans of the text, each with its line number.
fn spans(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        // ```` ```console ```` and the like are markup, not names.
        let parts: Vec<&str> = line.split('`').collect();
        for (i, p) in parts.iter().enumerate() {
            if i % 2 == 1 && !p.is_empty() && i + 1 < parts.len() {
                out.push((n + 1, p.to_string()));
            }
        }
    }
    out
}

const ROOTS: [&str; 10] =
    ["src/", "crates/", "tests/", "docs/", "xtask/", "fuzz/", "docker/", ".ci/", "action/", "README"];

fn is_path(s: &str) -> bool {
    !s.contains(' ')
        && !s.contains('<')
        && !s.contains('*')
        && (ROOTS.iter().any(|r| s.starts_with(r))
            || ["pyproject.toml", "action.yml", ".pre-commit-hooks.yaml", "rustfmt.toml", "Cargo.toml"].contains(&s))
}

/// The item names the source defines: fns, types, traits, consts, statics, modules,
/// macros, enum variants and struct fields (a line `NAME,` / `NAME(` / `NAME {` /
/// `pub NAME:` / `NAME: T,`).
fn defined(sources: &[(PathBuf, String)]) -> BTreeSet<String> {
    let item = regex::Regex::new(
        r"(?m)\b(?:fn|struct|enum|trait|type|const|static|mod|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)",
    )
    .unwrap();
    let member =
        regex::Regex::new(r"(?m)^\s*(?:pub(?:\([a-z]+\))?\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?:[,({]|:[^:])").unwrap();
    let mut out = BTreeSet::new();
    for (_, text) in sources {
        out.extend(item.captures_iter(text).map(|c| c[1].to_string()));
        out.extend(member.captures_iter(text).map(|c| c[1].to_string()));
    }
    out
}

/// The file of module path `a::b`: src/a/b.rs or src/a/b/mod.rs, else (a path
/// relative to the module the line is about, `plan::Hooks` in builder's lines)
/// the one module file under src/ whose path ends in a/b.
fn module_file(root: &Path, segs: &[&str]) -> Option<PathBuf> {
    if segs.is_empty() {
        return Some(root.join("src/lib.rs"));
    }
    let rel = segs.join("/");
    let direct = src_roots(root)
        .into_iter()
        .flat_map(|s| [s.join(format!("{rel}.rs")), s.join(format!("{rel}/mod.rs"))])
        .map(|p| root.join(p))
        .find(|p| p.is_file());
    direct.or_else(|| {
        let ends = [format!("/{rel}.rs"), format!("/{rel}/mod.rs")];
        let found: Vec<PathBuf> = src_roots(root)
            .into_iter()
            .flat_map(|s| walkdir::WalkDir::new(root.join(s)).into_iter())
            .flatten()
            .map(|e| e.path().to_path_buf())
            .filter(|p| ends.iter().any(|e| p.to_string_lossy().ends_with(e.as_str())))
            .collect();
        (found.len() == 1).then(|| found[0].clone())
    })
}

/// What is wrong with the symbol span `s`, if it is one this test judges.
fn judge_symbol(s: &str, root: &Path, defs: &BTreeSet<String>, all: &str) -> Option<String> {
    let path_sym = regex::Regex::new(r"^[a-z_][a-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+$").unwrap();
    let camel = regex::Regex::new(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$|^[A-Z][a-z0-9]{2,}$").unwrap();
    let upper = regex::Regex::new(r"^[A-Z][A-Z0-9]*_[A-Z0-9_]+$").unwrap();
    let snake = regex::Regex::new(r"^[a-z][a-z0-9]*_[a-z0-9_]+$").unwrap();
    if path_sym.is_match(s) {
        let segs: Vec<&str> = s.split("::").collect();
        // Another crate's path (`std::process::Command`, `clap::Args`) is not ours to check.
        let manifest = read(&root.join("Cargo.toml"));
        let dep = |c: &str| manifest.lines().any(|l| l.replace('-', "_").starts_with(&format!("{c} =")));
        if ["std", "core", "alloc"].contains(&segs[0]) || dep(segs[0]) {
            return None;
        }
        let (last, mods) = segs.split_last().unwrap();
        // `a::b::c`: the longest module prefix that is a file must define `c` (or `c` is a module).
        for k in (1..=mods.len()).rev() {
            let Some(file) = module_file(root, &mods[..k]) else { continue };
            let text = read(&file);
            let is_mod = module_file(root, &segs).is_some();
            let rest = &mods[k..];
            let found = is_mod
                || if rest.is_empty() {
                    regex::Regex::new(&format!(
                        r"\b(fn|struct|enum|trait|type|const|static|mod)\s+{last}\b|pub use [^;]*\b{last}\b|macro_rules!\s*{last}\b"
                    ))
                    .unwrap()
                    .is_match(&text)
                } else {
                    // `Type::method` or `Enum::Variant` in that file.
                    text.contains(&format!(" {}", rest[0])) && defs.contains(*last)
                };
            return (!found)
                .then(|| format!("`{s}`: {} defines no `{last}`", file.strip_prefix(root).unwrap().display()));
        }
        return Some(format!("`{s}`: no module file for `{}`", mods.join("::")));
    }
    // A type of a dependency the code names (`toml::Spanned`, `clap::Args`) counts.
    if camel.is_match(s) && !defs.contains(s) && !all.contains(&format!("::{s}")) {
        return Some(format!("`{s}`: no type, variant or item of that name in src/ or xtask/"));
    }
    if upper.is_match(s) && !defs.contains(s) && !all.contains(&format!("\"{s}\"")) {
        return Some(format!("`{s}`: neither a constant nor a variable name the code reads"));
    }
    // Names of keys and functions of other programs the code reads (`find_spec`,
    // `expert_parallel_size`) and of crates (`toml_edit`) appear in the source too.
    if snake.is_match(s) && !defs.contains(s) && !all.contains(s) {
        return Some(format!("`{s}`: no function, field or module of that name in src/ or xtask/"));
    }
    None
}

#[test]
fn every_path_and_symbol_architecture_md_names_exists() {
    let root = support::root();
    let text = read(&root.join("ARCHITECTURE.md"));
    assert!(text.contains("## Code map"), "ARCHITECTURE.md has no code map");
    let sources = sources();
    let defs = defined(&sources);
    // Variables the tests read (`DEEPEP_FORGE_DEEPEP_MIRROR`) and the manifests count as read by the code.
    let mut all: String = sources.iter().map(|(_, t)| t.as_str()).collect();
    all.extend(files_under(&["tests"]).iter().map(|(_, t)| t.clone()));
    all.push_str(&read(&root.join("Cargo.toml")));
    let mut bad = Vec::new();
    let mut checked = (0, 0);
    for (line, s) in spans(&text) {
        if is_path(&s) {
            checked.0 += 1;
            let p = root.join(s.trim_end_matches('/'));
            if !p.exists() {
                bad.push(format!("ARCHITECTURE.md:{line}: `{s}` does not exist"));
            }
            continue;
        }
        // `a.rs` after a folder or file on the same line: a sibling (`src/cache/sign.rs`, `config.rs`).
        if !s.contains('/') && !s.contains(' ') && s.ends_with(".rs") {
            checked.0 += 1;
            let l = text.lines().nth(line - 1).unwrap();
            let base = spans(l)
                .into_iter()
                .map(|(_, x)| x)
                .find(|x| x.starts_with("src/") || x.starts_with("crates/") || x.starts_with("tests/"));
            let dir = base.map(|b| {
                let b = b.trim_end_matches('/');
                if b.ends_with(".rs") {
                    Path::new(b).parent().unwrap().to_path_buf()
                } else {
                    PathBuf::from(b)
                }
            });
            let stem = s.trim_end_matches(".rs");
            let ok = dir
                .is_some_and(|d| root.join(&d).join(&s).is_file() || root.join(&d).join(stem).join("mod.rs").is_file())
                || sources.iter().any(|(p, _)| p.file_name().is_some_and(|f| f == s.as_str()));
            if !ok {
                bad.push(format!("ARCHITECTURE.md:{line}: `{s}` is in no folder the line names"));
            }
            continue;
        }
        if let Some(why) = judge_symbol(&s, &root, &defs, &all) {
            bad.push(format!("ARCHITECTURE.md:{line}: {why}"));
        }
        checked.1 += 1;
    }
    assert!(checked.0 > 50 && checked.1 > 50, "too few names checked: {checked:?}");
    assert!(bad.is_empty(), "ARCHITECTURE.md names what is not there:\n{}", bad.join("\n"));
}

#[test]
fn every_source_file_is_on_the_map() {
    // A module without a line in the code map is a map that is no longer true. A line
    // names a file by its path, by its folder (`src/pinset/`), or relative to the folder
    // of a file the same line names (`src/cache/sign.rs`, `config.rs`).
    let root = support::root();
    let text = read(&root.join("ARCHITECTURE.md"));
    let mut named: BTreeSet<PathBuf> = BTreeSet::new();
    for line in text.lines() {
        let sp: Vec<String> = spans(line).into_iter().map(|(_, s)| s).collect();
        let bases: Vec<PathBuf> = sp
            .iter()
            .filter(|s| s.starts_with("src/") || s.starts_with("crates/"))
            .map(|s| Path::new(s.trim_end_matches('/')).to_path_buf())
            .collect();
        for s in &sp {
            named.insert(PathBuf::from(s.trim_end_matches('/')));
            if s.ends_with(".rs") && !s.starts_with("src/") && !s.starts_with("crates/") {
                for b in &bases {
                    named.insert(b.parent().unwrap().join(s));
                }
            }
        }
    }
    let mut missing = Vec::new();
    let roots = src_roots(&root);
    for (path, _) in sources().into_iter().filter(|(p, _)| p.starts_with("src") || p.starts_with("crates")) {
        let dir = path.parent().unwrap();
        let in_named_dir = path.file_name().is_some_and(|f| f == "mod.rs") && named.contains(dir)
            || !roots.iter().any(|r| r == dir)
                && named.contains(dir)
                && text.contains(&format!("`{}/`", dir.display()));
        if !named.contains(&path) && !in_named_dir {
            missing.push(path.display().to_string());
        }
    }
    assert!(missing.is_empty(), "source files the code map does not name: {missing:?}");
}

#[test]
fn the_check_catches_a_wrong_name() {
    let root = support::root();
    let sources = sources();
    let defs = defined(&sources);
    let all: String = sources.iter().map(|(_, t)| t.as_str()).collect();
    assert!(judge_symbol("cli::main_from", &root, &defs, &all).is_none());
    assert!(judge_symbol("cli::no_such_function", &root, &defs, &all).is_some());
    assert!(
        judge_symbol("interface::runtime::RuntimeNeeds", &root, &defs, &all).is_some(),
        "RuntimeNeeds lives in provenance"
    );
    assert!(judge_symbol("provenance::RuntimeNeeds", &root, &defs, &all).is_none());
    assert!(judge_symbol("NoSuchTypeAnywhere", &root, &defs, &all).is_some());
    assert!(
        is_path("crates/forge-lock/src/lock/rules/environment.rs")
            && root.join("crates/forge-lock/src/lock/rules/environment.rs").exists()
    );
}

#[test]
fn no_module_builds_another_commands_clap_arguments() {
    // Request types at command edges: a command that runs another's job builds its
    // request (`lock::CheckRequest`), never a faked clap struct (`CheckArgs { .. }`).
    let sources = sources();
    let derive =
        regex::Regex::new(r"(?s)#\[derive\([^)]*clap::Args[^)]*\)\]\s*(?:#\[[^\]]*\]\s*)*pub struct (\w+)").unwrap();
    let mut owners: Vec<(String, PathBuf)> = Vec::new();
    for (p, t) in &sources {
        owners.extend(derive.captures_iter(t).map(|c| (c[1].to_string(), p.clone())));
    }
    assert!(owners.iter().any(|(n, _)| n == "CheckArgs"), "{owners:?}");
    let mut bad = Vec::new();
    for (name, owner) in &owners {
        let literal = regex::Regex::new(&format!(r"\b{name}\s*\{{\s*\w+\s*:")).unwrap();
        for (p, t) in &sources {
            if p != owner && literal.is_match(t) {
                bad.push(format!("{} builds {name} (declared in {})", p.display(), owner.display()));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
