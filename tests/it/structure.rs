//! No import circles between the crate's modules (ARCHITECTURE.md, invariants):
//! every `crate::a::b` and `super::x` path in a module's non-test code is an
//! edge to the module file it names; a parent and its own submodules are one
//! unit (they share items by design); any strongly connected group of two or
//! more modules fails, naming them.
use crate::support;

use std::collections::{BTreeMap, BTreeSet};

/// The source folders of the workspace: the CLI's `src/` and each crate's
/// `crates/*/src/`. No two crates hold a top-level module of the same name, so
/// `crate::pins` inside forge-model and `forge_model::pins` elsewhere are one
/// module path (`forge_model::` is read as `crate::` below).
fn src_roots() -> Vec<std::path::PathBuf> {
    let root = support::root();
    let mut roots = vec![root.join("src")];
    let mut crates: Vec<_> =
        std::fs::read_dir(root.join("crates")).unwrap().flatten().map(|e| e.path().join("src")).collect();
    crates.sort();
    roots.extend(crates);
    roots
}

/// The folder (`src/` or `crates/<crate>/src/`) that holds module `m`.
fn src_of(m: &str) -> std::path::PathBuf {
    let top = m.split("::").next().unwrap();
    src_roots()
        .into_iter()
        .find(|s| s.join(format!("{top}.rs")).is_file() || s.join(top).join("mod.rs").is_file())
        .unwrap_or_else(|| panic!("module {m} is in no source folder"))
}

fn modules() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for src in src_roots() {
        for e in walkdir::WalkDir::new(&src).into_iter().flatten() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            if parts == ["lib"] || parts == ["main"] {
                continue;
            }
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            let text = std::fs::read_to_string(p).unwrap();
            // the unit tests at the end of a file may reach anywhere
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(&text);
            // comments may name any module (docs links); only code imports
            let code: String =
                code.lines().filter(|l| !l.trim_start().starts_with("//")).map(|l| format!("{l}\n")).collect();
            out.insert(parts.join("::"), code);
        }
    }
    out
}

fn resolve(path: &str, mods: &BTreeMap<String, String>) -> Option<String> {
    let segs: Vec<&str> = path.split("::").collect();
    (1..=segs.len()).rev().map(|n| segs[..n].join("::")).find(|m| mods.contains_key(m))
}

fn related(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

/// Every module's imports: module -> the modules it names (its own parent
/// and submodules left out).
fn import_edges(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let path = regex::Regex::new(r"\b(crate|super|forge_[a-z]+)::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)").unwrap();
    let braces = regex::Regex::new(r"\b(crate|super|forge_[a-z]+)::\{([^}]*)\}").unwrap();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, code) in mods {
        let file_is_mod_rs = src_of(m).join(m.replace("::", "/")).join("mod.rs").is_file();
        let parent: Vec<&str> = m.split("::").collect();
        let base = if file_is_mod_rs { parent.clone() } else { parent[..parent.len() - 1].to_vec() };
        let set = edges.entry(m.clone()).or_default();
        // `use crate::{a::X, b}` names each path in the braces
        let expanded: String = braces
            .captures_iter(code)
            .flat_map(|c| c[2].split(',').map(|p| format!(" {}::{} ", &c[1], p.trim())).collect::<Vec<_>>())
            .collect();
        let code = format!("{code}\n{expanded}");
        for c in path.captures_iter(&code) {
            let full = match &c[1] {
                "super" => {
                    // super:: from `a/b.rs` is `a`; from `a/b/mod.rs` it is also `a`
                    let up = if file_is_mod_rs { &base[..base.len().saturating_sub(1)] } else { &base[..] };
                    up.iter().map(|s| s.to_string()).chain([c[2].to_string()]).collect::<Vec<_>>().join("::")
                }
                // `crate::` and a workspace crate's name: one namespace (see `src_roots`)
                _ => c[2].to_string(),
            };
            if let Some(t) = resolve(&full, mods) {
                if !related(m, &t) {
                    set.insert(t);
                }
            }
        }
    }
    edges
}

/// Tarjan's strongly connected components of two or more nodes, each sorted.
fn rings(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct S<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit(s: &mut S, v: &str) {
        s.index.insert(v.into(), s.next);
        s.low.insert(v.into(), s.next);
        s.next += 1;
        s.stack.push(v.into());
        for w in s.edges.get(v).cloned().unwrap_or_default() {
            if !s.index.contains_key(&w) {
                visit(s, &w);
                let l = s.low[&w].min(s.low[v]);
                s.low.insert(v.into(), l);
            } else if s.stack.contains(&w) {
                let l = s.index[&w].min(s.low[v]);
                s.low.insert(v.into(), l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.found.push(comp);
            }
        }
    }
    let mut s =
        S { edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), next: 0, found: Vec::new() };
    for m in edges.keys() {
        if !s.index.contains_key(m) {
            visit(&mut s, m);
        }
    }
    s.found
}

#[test]
fn no_import_circles_between_modules() {
    let edges = import_edges(&modules());
    let found = rings(&edges);
    assert!(found.is_empty(), "modules that import each other (directly or in a ring): {found:?}");
    // the two circles this test was written for stay broken
    for (a, b) in [("runtime", "probe"), ("builder::registry", "builder::toolchain")] {
        assert!(!edges[a].contains(b), "{a} imports {b}");
    }
}

/// Rings between units that are known and have a reason; anything else fails.
/// (None today: `wheel` <-> `probe` ended when reading a wheel moved into `wheel::read`.)
const KNOWN_UNIT_RINGS: &[(&[&str], &str)] = &[];

/// No two units import each other, directly or through others (ARCHITECTURE.md,
/// invariants): a unit is a top-level module with all its submodules (`builder`,
/// `wheel`, `probe`, ...), so `wheel::diff -> probe::wheel -> wheel::record` is a
/// ring even though no two files import each other.
#[test]
fn no_import_circles_between_units() {
    let unit = |m: &str| m.split("::").next().unwrap().to_string();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, targets) in import_edges(&modules()) {
        let set = edges.entry(unit(&m)).or_default();
        set.extend(targets.iter().map(|t| unit(t)).filter(|t| *t != unit(&m)));
    }
    let found = rings(&edges);
    let unknown: Vec<_> = found
        .iter()
        .filter(|r| !KNOWN_UNIT_RINGS.iter().any(|(k, _)| r.iter().map(String::as_str).eq(k.iter().copied())))
        .collect();
    assert!(unknown.is_empty(), "units that import each other (directly or in a ring): {unknown:?}");
    for (k, why) in KNOWN_UNIT_RINGS {
        assert!(
            found.iter().any(|r| r.iter().map(String::as_str).eq(k.iter().copied())),
            "the listed ring {k:?} ({why}) is gone: remove it from KNOWN_UNIT_RINGS"
        );
    }
    // the check sees a ring through submodules
    let mut planted = edges.clone();
    planted.entry("error".into()).or_default().insert("cli".into());
    assert!(rings(&planted).iter().any(|r| r.contains(&"cli".to_string()) && r.contains(&"error".to_string())));
}

/// One printer (ARCHITECTURE.md, invariants): only `src/printer.rs` writes to
/// stdout or stderr; everything else goes through its `outln!`/`note!`/
/// `alert!`/`json`, so `--quiet`, the stream of each line and colour are
/// decided in one place.
#[test]
fn only_the_printer_prints() {
    let printing =
        regex::Regex::new(r"\b(e?print(ln)?!|dbg!|std::io::(stdout|stderr)\b|io::(stdout|stderr)\(\)|libc::write\()")
            .unwrap();
    let mut found = Vec::new();
    for e in src_roots().iter().flat_map(|src| walkdir::WalkDir::new(src).into_iter().flatten()) {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "rs") || p.ends_with("forge-os/src/printer.rs") {
            continue;
        }
        let text = std::fs::read_to_string(p).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//") && printing.is_match(code) {
                found.push(format!("{}:{}: {}", p.strip_prefix(support::root()).unwrap().display(), i + 1, code));
            }
        }
    }
    assert!(
        found.is_empty(),
        "printing outside src/printer.rs (use crate::outln!/note!/alert!):\n{}",
        found.join("\n")
    );
    // the check itself sees what it must
    assert!(printing.is_match("println!(\"x\")") && printing.is_match("let e = std::io::stderr();"));
}

/// One build request (ARCHITECTURE.md, code map): the builder takes a
/// `BuildOptions`/`BuildRequest`, never a clap type; the flags are declared in
/// the CLI crate (`src/commands/build.rs`). A value enum (`registry::Kind`) is
/// a domain value that clap may also parse (behind the `clap` feature).
#[test]
fn the_builder_sees_no_clap_type_but_at_its_edge() {
    let dir = support::root().join("crates/forge-build/src/builder");
    let clap_type =
        regex::Regex::new(r"\bclap::(Args|Parser|Subcommand|builder)\b|\b(Common|PlanArgs|BuildArgs|RunArgs|VerifyArgs|CacheDirArg|RemoteArgs|NetArgs)\b|#\[(arg|command)\(")
            .unwrap();
    let mut found = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//") && clap_type.is_match(code) {
                found.push(format!("{}:{}: {code}", p.file_name().unwrap().to_string_lossy(), i + 1));
            }
        }
    }
    assert!(found.is_empty(), "clap types inside the builder (take a BuildRequest instead):\n{}", found.join("\n"));
    assert!(clap_type.is_match("fn make_plans(c: &Common)"), "the check sees what it must");
}

/// The command edges (ARCHITECTURE.md, bird's-eye view): the only files that
/// declare clap types, all in the CLI crate (`src/`), each with the plain
/// request(s) it builds from them. Everything below an edge takes that
/// request; a new file with a clap type fails here, and a listed file that no
/// longer has one must leave the list.
const CLAP_EDGES: &[(&str, &str)] = &[
    ("cli.rs", "the root: `Cli`, `Command`, the `pins`/`lock`/`pin` groups, `completions`, `man`"),
    (
        "args.rs",
        "shared flags (`PinsArg`, `TrustedKeysArg`, `CacheUrlArg`, `CacheDirArg`, `RemoteArgs`/`NetArgs` -> `cache::RemoteRequest`, `ProjectArgs` -> `lock::ProjectPlace`, `TopologyArgs` -> `topology::RequestFlags`)",
    ),
    ("commands/build.rs", "`RunArgs`, `Common`, `PlanArgs`, `BuildArgs` -> `builder::{RunOptions, BuildOptions, BuildWheelRequest}`"),
    ("commands/cache.rs", "`cache ...` -> `cache::{LsRequest, GcRequest, PushRequest, KeygenRequest}`"),
    ("commands/docker.rs", "`docker bake`/`build`: -> `docker::bake::BakeRequest`, `docker::BuildRequest`"),
    ("commands/evidence.rs", "`evidence add|show` -> `evidence::{AddRequest, ShowRequest}`"),
    ("commands/host.rs", "`host facts`: `FactsArgs` -> the host root and a format (`probe::host::read`)"),
    ("commands/lock.rs", "`CheckArgs` -> `lock::CheckRequest`"),
    ("commands/pin.rs", "`pin set|recover` -> `pinset::{SetRequest, RecoverRequest}`"),
    ("commands/probe.rs", "`ProbeArgs`, `RunArgs`, `RecordArgs` -> `probe::ProbeRequest` (`runtime::Run`, `record::RecordRequest`)"),
    ("commands/publish.rs", "`PublishArgs` -> `publish::{PublishRequest, CheckRequest}`"),
    ("commands/repro.rs", "`diff`, `verify` -> `repro::{DiffRequest, VerifyRequest}`"),
];

/// Whether a line of a domain crate uses clap other than through its optional
/// `clap` feature (`#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]`).
fn uses_clap_outside_its_feature(line: &str) -> bool {
    let code = line.trim_start();
    !code.starts_with("//")
        && (code.contains("clap::")
            || code.starts_with("use clap")
            || code.contains("#[arg(")
            || code.contains("#[command("))
        && !code.starts_with("#[cfg_attr(feature = \"clap\"")
}

/// The domain crates (crates/*) take plain requests: clap is the CLI crate's
/// (`src/`), and a crate below it names clap only under `cfg_attr(feature =
/// "clap", ...)` (a value enum clap also parses), so each builds without clap.
#[test]
fn clap_lives_only_in_the_cli_crate() {
    let root = support::root();
    let mut found = Vec::new();
    for src in src_roots().into_iter().filter(|s| s.starts_with(root.join("crates"))) {
        for e in walkdir::WalkDir::new(&src).into_iter().flatten() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(p).unwrap();
            for (i, line) in text.lines().enumerate() {
                if uses_clap_outside_its_feature(line) {
                    found.push(format!("{}:{}: {}", p.strip_prefix(&root).unwrap().display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "clap below the CLI crate (declare the flags in src/ and hand over a plain request; a value enum derives clap::ValueEnum under #[cfg_attr(feature = \"clap\", ...)]):\n{}",
        found.join("\n")
    );
    // the check itself sees what it must
    assert!(uses_clap_outside_its_feature("#[derive(Debug, Clone, clap::Args)]"));
    assert!(uses_clap_outside_its_feature("    #[derive(Debug, Clone, Copy, clap::ValueEnum)]"));
    assert!(uses_clap_outside_its_feature("use clap::ValueEnum;"));
    assert!(uses_clap_outside_its_feature("    #[arg(long, value_name = \"N\")]"));
    assert!(!uses_clap_outside_its_feature("#[cfg_attr(feature = \"clap\", derive(clap::ValueEnum))]"));
    assert!(!uses_clap_outside_its_feature("/// parsed by clap::ValueEnum in the CLI"));
}

/// Clap types are declared only at the listed command edges.
#[test]
fn clap_types_are_declared_only_at_command_edges() {
    let clap = regex::Regex::new(r"derive\([^)]*\bclap::(Args|Parser|Subcommand)\b|#\[(arg|command)\(").unwrap();
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, n, line) in code_lines() {
        if clap.is_match(&line) {
            found.entry(file.clone()).or_default().push(format!("{file}:{n}: {}", line.trim()));
        }
    }
    let listed: BTreeSet<&str> = CLAP_EDGES.iter().map(|(f, _)| *f).collect();
    let beyond: Vec<_> = found.iter().filter(|(f, _)| !listed.contains(f.as_str())).flat_map(|(_, l)| l).collect();
    assert!(
        beyond.is_empty(),
        "clap types below a command edge (declare them at the edge and hand over a plain request, or list the file in CLAP_EDGES with why):\n{}",
        beyond.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
    let stale: Vec<_> = listed.iter().filter(|f| !found.contains_key(**f)).collect();
    assert!(stale.is_empty(), "listed in CLAP_EDGES but declares no clap type: {stale:?}");
    assert!(clap.is_match("#[derive(Debug, Clone, clap::Args)]") && clap.is_match("    #[arg(long)]"));
}

/// The non-comment lines of every src file before its unit tests, as (path
/// relative to src, line number, line).
fn code_lines() -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for src in src_roots() {
        for e in walkdir::WalkDir::new(&src).into_iter().flatten() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(p).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(&text);
            let rel = p.strip_prefix(&src).unwrap().display().to_string();
            for (i, line) in code.lines().enumerate() {
                if !line.trim_start().starts_with("//") {
                    out.push((rel.clone(), i + 1, line.to_string()));
                }
            }
        }
    }
    out
}

/// Whether a line of product code touches the file system other than through
/// `forge_os::fs`: `std::fs` (or `fs::` after `use std::fs`), `File::open`,
/// `File::create`, `OpenOptions`, `std::os::unix::fs`, walkdir, tempfile, and the
/// `Path` methods that ask the file system (`exists`, `is_file`, `is_dir`,
/// `is_symlink`, `symlink_metadata`, `canonicalize`, `read_dir`, `read_link`).
fn touches_the_file_system(line: &str) -> bool {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(
            r"\bstd::fs\b|(^|[^:\w])fs::(read|write|create_dir|remove|rename|copy|metadata|symlink_metadata|read_dir|read_link|canonicalize|set_permissions|File|OpenOptions|hard_link|DirBuilder)|\bFile::(open|create)\(|\bOpenOptions::new\(|\bstd::os::unix::fs\b|\bwalkdir::|\bWalkDir\b|\btempfile::|\.(exists|is_file|is_dir|is_symlink|symlink_metadata|canonicalize|read_dir|read_link)\(\)",
        )
        .unwrap()
    })
    .is_match(line)
}

/// One owner of the file system (ARCHITECTURE.md, invariants): every open,
/// create, rename, remove and walk goes through `forge_os::fs` (a `Tree`
/// confined to its root, or `fs::named` for a file the user names), never
/// `std::fs` or a `Path` method that asks the disk. The files outside
/// `crates/forge-os/src/fs/` that do: 0. Unit tests at the end of a file are
/// left out (they make their fixtures).
#[test]
fn only_fs_touches_the_file_system() {
    let found: Vec<String> = code_lines()
        .into_iter()
        .filter(|(file, _, line)| !file.starts_with("fs/") && touches_the_file_system(line))
        .map(|(file, n, line)| format!("{file}:{n}: {}", line.trim()))
        .collect();
    let files: BTreeSet<&str> = found.iter().map(|l| l.split(':').next().unwrap()).collect();
    assert!(
        found.is_empty(),
        "{} file(s) touch the file system outside forge_os::fs (open a Tree at the command's edge and go through it):\n{}",
        files.len(),
        found.join("\n")
    );
    for hit in [
        "std::fs::write(&p, b\"x\")",
        "let f = File::open(path)?;",
        "if dest.exists() {",
        "for e in walkdir::WalkDir::new(d) {",
        "use std::os::unix::fs::symlink;",
        "fs::create_dir_all(&d)?;",
        "let t = tempfile::tempdir()?;",
        "let real = p.canonicalize()?;",
        "for e in dir.read_dir()? {",
    ] {
        assert!(touches_the_file_system(hit), "the check sees {hit}");
    }
    for miss in [
        "forge_os::fs::named::read_text(p, \"pins\", cap)?",
        "tree.exists(\"x\")",
        "let m = f.metadata()?;",
        "tree.read_link(base.join(\"device/driver\"))",
    ] {
        assert!(!touches_the_file_system(miss), "the check passes {miss}");
    }
}

/// Where a path becomes a [`forge_os::fs::Tree`] or a named file is read (the
/// ambient authority, as cap-std's `ambient_authority()`): each file that does,
/// how many times, and why. A reviewer reads this list to find every entry point.
const AMBIENT: &[(&str, usize, &str)] = &[
    ("args.rs", 1, "whether ./pins.toml, the default --pins, is there"),
    ("builder/canon.rs", 2, "the build root's folder (DEEPEP_FORGE_BUILD_ROOT's parent, or /tmp); the user config file"),
    ("builder/cross.rs", 6, "the cache's staging folder, the build folder and the sysroot the plan names (made by the tool); /etc/os-release; a NEEDED library's candidate paths (RUNPATH, the sysroot's folders) asked and resolved as the loader would"),
    ("builder/deliver.rs", 4, "the --out folder the user names (checked, then made at delivery); the --report file's folder; the cache entry folder forge-store hands over"),
    ("builder/environment.rs", 1, "a library's version header in the toolchain (nccl.h, nvshmem_version.h)"),
    ("builder/execute.rs", 2, "the staging folder forge-store hands over; the build log's folder in the cache"),
    ("builder/prepare.rs", 2, "the cache folder (--cache-dir); a temporary folder in it for the source patches' check"),
    ("builder/registry.rs", 6, "the cache folder (--cache-dir) and its staging folder; --match-project's uv.lock; the --python interpreter resolved through its links"),
    ("builder/side_by_side.rs", 3, "the plan's build folder, the pinned revision's build tree and the build log's folder (made by the builder)"),
    ("builder/toolchain.rs", 3, "the toolchain memo folder in the cache (twice); a temporary folder for the libstdc++ probe"),
    ("builder/unit_order.rs", 2, "the unit-time history folder in the cache; a kept ninja log"),
    ("cache/config.rs", 1, "the user's config file (~/.config/deepep-forge/config.toml), named by the environment"),
    ("cache/lock.rs", 1, "a lock file another crate names by its path (a mirror's, the build root's): its folder is made and opened there"),
    ("cache/mod.rs", 3, "the cache folder (--cache-dir, DEEPEP_FORGE_CACHE_DIR, ~/.cache): made on the first write, opened if there for a read; and a staging folder the builder names by its path"),
    ("cache/sign.rs", 2, "the signing key file the user names (--signing-key), and the folder of the new key file `cache keygen --out` names"),
    ("cache/tree.rs", 2, "the NCCL build folder a build stores, and the folder above the one a tree is restored into, named by forge-build"),
    ("cache/unit_times.rs", 3, "the unit-time history folder of the cache folder forge-build names (opened if there for a read, twice; made for a write)"),
    ("cli.rs", 1, "the folder `man --out-dir` names"),
    ("commands/lock.rs", 1, "the --project folder of `lock check`"),
    ("commands/pin.rs", 2, "the --project folder and the folder of the --pins file, for `pin set` and `pin recover`"),
    ("docker/bake.rs", 3, "the folder of --out (the current folder for a relative path: a link out of it is refused)"),
    ("docker/base.rs", 8, "the cache folder (--cache-dir) and its staging folders; debootstrap's suite scripts and the host's CA folder"),
    ("docker/builder.rs", 9, "the current folder (the build context) and the folder of --file; the cache's staging folder; --source, --forge-binary and --pins as the user names them; binfmt_misc's qemu entry"),
    ("evidence/record.rs", 2, "the wheel file and the recipe the user names (--wheel, --recipe)"),
    ("evidence/store.rs", 4, "the evidence folder the user names (--out, --record, --evidence), and the folders above it (so a link in its own place is seen, never followed)"),
    ("index/check.rs", 3, "the index folder and the pins file `publish --check DIR --pins FILE` names"),
    ("index/closure.rs", 1, "a file:// URL of an index that pyproject.toml or --index names"),
    ("index/evidence.rs", 2, "a statement found under an --evidence folder, read again to be served; the index folder `publish --check` names"),
    ("index/facts.rs", 1, "a built wheel, by the path the builder delivered it to"),
    ("index/fetch.rs", 1, "a private temporary folder for the wheel `verify URL` downloads"),
    ("index/manifest.rs", 2, "the index manifest file the user names (a path or a file:// URL); a file of a file:// index verify reads"),
    ("index/out.rs", 1, "the --out folder `publish` writes the index into"),
    ("lock/dockerfile/mod.rs", 1, "a --dockerfile FILE the user names (it may lie outside the project)"),
    ("lock/mod.rs", 1, "a finding's path and $GITHUB_WORKSPACE (or the project) with links resolved, to tell whether one lies in the other"),
    ("patch.rs", 2, "the scratch folder and the patch folder forge-build makes, by their paths"),
    ("patches.rs", 3, "pins.toml's folder, resolved, the git repository around it, and the folder opened as the tree its patch files are read from"),
    ("pinset/patches.rs", 4, "the cache's temp folder (--cache-dir) and a scratch folder in it; pins.toml's folder and a --patch FILE, resolved, to tell that the patch lies beside or below it"),
    ("pinset/source.rs", 2, "whether --source names a folder, and the temporary folder a --source URL is cloned into"),
    ("pinset/txn.rs", 1, "the user's state folder ($XDG_STATE_HOME) for pin set's journals and locks"),
    ("probe/disk.rs", 7, "the files an installed environment names (--python's answers: site-packages, torch, libraries, RUNPATHs, the CUDA home), anywhere on the machine"),
    ("probe/fleet.rs", 3, "`probe --host-facts PATH`: what the path is, a facts file the user names (named, bounded) or a folder of them (one tree)"),
    ("probe/host.rs", 1, "the host root (/, or DEEPEP_FORGE_HOST_ROOT for tests): one tree for sysfs, procfs, /dev and the libraries"),
    ("probe/image.rs", 2, "the image's mount point (podman/buildah print it); its statement read from a file opened in that tree without following a link"),
    ("probe/mod.rs", 1, "whether dist/<the --wheel's file name> is there (build-wheel's default --out): a printed rebuild then gets its own --out"),
    ("pins.rs", 1, "the pins file the user names (--pins)"),
    ("process/lookup.rs", 4, "a program on PATH, or named by $DEEPEP_FORGE_UV or next to --python"),
    ("process/mod.rs", 2, "the build log the caller names, written and then its tail read"),
    ("publish.rs", 6, "--out (the index folder), --pins, and the wheels the build delivered into publish's own temporary folder"),
    ("repro.rs", 5, "verify's own temporary folder; --out and the wheel's folder compared; ./pins.toml and the user config"),
    ("runtime/deep_ep.rs", 1, "the tool's own temporary folder for the round trip's script and the ranks' logs"),
    ("runtime/rendezvous.rs", 2, "the --rendezvous file:PATH the user names: rank 0 writes it (its folder made), the others read it"),
    ("source.rs", 4, "the --source folder the user names; a git mirror's folder (mirror_path) and a fresh build tree, by the paths the plan gives; the mirror's objects, named in the checkout's alternates"),
    ("source/gitmodules.rs", 1, "the folder above a --source folder, where its submodules' sibling folders lie"),
    ("topology/recipe.rs", 5, "the recipe the user names (read as named) and --recipe-root, resolved, the git repository around the recipe, and that folder as the tree `defaults:` are read from"),
    ("torch.rs", 3, "an installed torch's version.py, CMake config and library, in the environment --python names"),
    ("wheel/read.rs", 1, "a wheel the caller names (`--wheel`, a built or fetched wheel)"),
    ("wheel/stamp.rs", 1, "the new wheel file in the folder the caller stages it in"),
];

#[test]
fn ambient_entry_points_are_the_listed_ones() {
    let ambient =
        regex::Regex::new(r"\b(Tree::(open|create)[a-z_]*|TempTree::(new|new_in)|fs::named::[a-z_0-9]+)\(").unwrap();
    let wrong = beyond_the_list(|file, line| !file.starts_with("fs/") && ambient.is_match(line), AMBIENT);
    assert!(
        wrong.is_empty(),
        "a path becomes a Tree (or a named file is read) where the list does not say so (take the Tree from the caller, or list the file in AMBIENT with why):\n{}",
        wrong.join("\n")
    );
}

/// Files with more matching lines than `list` allows them, each with its lines.
fn beyond_the_list(matches: impl Fn(&str, &str) -> bool, list: &[(&str, usize, &str)]) -> Vec<String> {
    let mut count: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, n, line) in code_lines() {
        if matches(&file, &line) {
            count.entry(file.clone()).or_default().push(format!("{file}:{n}: {}", line.trim()));
        }
    }
    let allowed = |file: &str| list.iter().find(|(f, _, _)| *f == file).map(|(_, n, _)| *n).unwrap_or(0);
    count
        .iter()
        .filter(|(file, sites)| sites.len() > allowed(file))
        .map(|(file, sites)| format!("{} found, {} listed:\n  {}", sites.len(), allowed(file), sites.join("\n  ")))
        .collect()
}

/// Errors are the one `Failure` type (src/error.rs) or anyhow chains of it; a
/// `Result<_, String>` is left only where the string is data, listed here.
const STRING_RESULTS: &[(&str, usize, &str)] = &[
    ("probe/wheel.rs", 6, "a member's ELF parse, provenance or platform audit result kept as a finding's text"),
    ("probe/elf.rs", 1, "malformed ELF bytes become a finding's text, never an error"),
    ("probe/fatbin.rs", 2, "malformed fatbin bytes become a finding's text, never an error"),
    (
        "cache/remote.rs",
        3,
        "why a remote entry is not used (a note; the build goes on); reading and checking a fetched wheel's provenance move to wheel/ in #21 section 2",
    ),
    ("runtime/mod.rs", 1, "the static checks, or why they could not run, carried into the verdict as data"),
    ("builder/compiler_cache.rs", 1, "why a shared compiler cache does not answer: a note, never an error (the build goes on)"),
    ("index/manifest.rs", 5, "why an untrusted manifest (or a name in it) is rejected: the caller names the file and picks the exit code (1 for a published index, 2 for a flag)"),
    ("index/facts.rs", 1, "what differs between a wheel's provenance and pins.toml, which the caller puts into its message"),
    ("topology/recipe.rs", 1, "what stayed unresolved in a recipe becomes a request note, never an error"),
    ("pep.rs", 3, "the grammar's verdict on a name or version, which the caller puts into its message naming the file"),
    (
        "source/gitmodules.rs",
        5,
        "why a `.gitmodules` path or url is not accepted, which the caller puts into its message naming the file and line (exit 2)",
    ),
    (
        "http.rs",
        5,
        "a transport failure as a sentence without credentials: the caller names the URL's role and picks the exit code (3 for a cache, 1 for a published index) or retries",
    ),
];

/// Whether `line` names a `Result<T, String>` (the error type, at the top
/// level of the brackets, is `String`).
fn names_string_result(line: &str) -> bool {
    line.match_indices("Result<").any(|(at, m)| {
        let (mut depth, mut comma) = (1, None);
        for (i, c) in line[at + m.len()..].char_indices() {
            match c {
                '<' | '(' => depth += 1,
                '>' | ')' => {
                    depth -= 1;
                    if depth == 0 {
                        let rest = &line[at + m.len()..at + m.len() + i];
                        return comma.is_some_and(|k: usize| rest[k + 1..].trim() == "String");
                    }
                }
                ',' if depth == 1 => comma = Some(i),
                _ => {}
            }
        }
        false
    })
}

#[test]
fn errors_are_failures_not_strings() {
    assert!(names_string_result("fn f() -> Result<u32, String> {"));
    assert!(names_string_result("x: Option<Result<(String, u64), String>>,"));
    assert!(!names_string_result("fn g() -> Result<BTreeMap<String, String>> {"));
    let wrong = beyond_the_list(|_, line| names_string_result(line), STRING_RESULTS);
    assert!(wrong.is_empty(), "return crate::error::Failure (or anyhow with one) instead:\n{}", wrong.join("\n"));
}

/// The crate graph is the map (ARCHITECTURE.md): what each crate of
/// `crates/` may import is the workspace crates its Cargo.toml names, and the
/// compiler refuses any other import. lock, build and probe do not depend on
/// each other; store sits on the models, the models on the wheel, the wheel on
/// os; os on none of ours.
const CRATE_GRAPH: &[(&str, &[&str])] = &[
    ("forge-os", &[]),
    ("forge-wheel", &["forge-os"]),
    ("forge-model", &["forge-os", "forge-wheel"]),
    ("forge-store", &["forge-os", "forge-wheel", "forge-model"]),
    ("forge-build", &["forge-os", "forge-wheel", "forge-model", "forge-store"]),
    ("forge-lock", &["forge-os", "forge-wheel", "forge-model", "forge-store"]),
    ("forge-probe", &["forge-os", "forge-wheel", "forge-model", "forge-store"]),
];

/// The workspace crates (`forge-*`) a Cargo.toml depends on, in any table.
fn forge_deps(manifest: &std::path::Path) -> BTreeSet<String> {
    let doc: toml::Table = std::fs::read_to_string(manifest).unwrap().parse().unwrap();
    ["dependencies", "dev-dependencies", "build-dependencies"]
        .iter()
        .filter_map(|t| doc.get(*t).and_then(|v| v.as_table()))
        .flat_map(|t| t.keys().filter(|k| k.starts_with("forge-")).cloned())
        .collect()
}

#[test]
fn the_crate_graph_is_the_map() {
    let root = support::root();
    let mut on_disk: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = CRATE_GRAPH.iter().map(|(c, _)| c.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every crate under crates/ has its line in CRATE_GRAPH");
    for (c, may) in CRATE_GRAPH {
        let deps = forge_deps(&root.join("crates").join(c).join("Cargo.toml"));
        let may: BTreeSet<String> = may.iter().map(|s| s.to_string()).collect();
        assert_eq!(deps, may, "{c} depends on workspace crates beyond the map (or lost one)");
    }
    // The CLI at the root wires them all.
    assert_eq!(forge_deps(&root.join("Cargo.toml")), listed.into_iter().collect::<BTreeSet<_>>());
    // The check sees an edge the map forbids.
    let t = tempfile::tempdir().unwrap();
    let bad = t.path().join("Cargo.toml");
    std::fs::write(&bad, "[dependencies]\nforge-build = { path = \"x\" }\nanyhow = \"1\"\n").unwrap();
    assert_eq!(forge_deps(&bad), BTreeSet::from(["forge-build".to_string()]));
}

/// Crate walls that are real (ARCHITECTURE.md): no crate re-exports another
/// crate's modules or items under its own name (`pub use forge_os::pins` made
/// `crate::pins` mean a module of another crate), so a path names the crate
/// that owns what it names. Counts every `pub use` of a workspace crate.
#[test]
fn no_crate_re_exports_another() {
    let reexport = regex::Regex::new(r"^\s*pub(\([^)]*\))?\s+use\s+(::)?(forge_[a-z]+|deepep_forge)\b").unwrap();
    let found: Vec<String> = code_lines()
        .into_iter()
        .filter(|(_, _, line)| reexport.is_match(line))
        .map(|(file, n, line)| format!("{file}:{n}: {}", line.trim()))
        .collect();
    assert!(
        found.is_empty(),
        "re-exported across a crate wall (name the owning crate at the use site):\n{}",
        found.join("\n")
    );
    assert!(
        reexport.is_match("pub use forge_os::{error, printer};")
            && reexport.is_match("pub(crate) use forge_model::pins;")
    );
    assert!(!reexport.is_match("use forge_os::error;") && !reexport.is_match("pub use self::inner::X;"));
}

/// Printing lives with the commands (uv's `crates/uv/src/commands/`): a
/// result (stdout: `out!`, `outln!`, `printer::out|json|workflow|stdout_bytes`)
/// is written only by the CLI crate (`src/`), and a domain crate never picks
/// a command's exit code (no function returns an `Exit`; an error's class,
/// `Failure`, is the error's own): it returns a report,
/// and the command renders it and chooses. Notes and progress on stderr
/// (`note!`, `alert!`) stay where the long work happens; `forge-os`'s error
/// and printer modules, which define them, are left out.
#[test]
fn results_and_exit_codes_are_the_commands() {
    let printing = regex::Regex::new(
        r"\b(out|outln)!\(|\bprinter::(out|json|workflow|stdout_bytes)\(|->\s*(anyhow::)?Result<Exit>|->\s*Exit\b|Ok\(\s*Exit::",
    )
    .unwrap();
    let root = support::root();
    let mut found = Vec::new();
    for src in src_roots().into_iter().filter(|s| s.starts_with(root.join("crates"))) {
        for e in walkdir::WalkDir::new(&src).into_iter().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(&root).unwrap().display().to_string();
            if p.extension().is_none_or(|x| x != "rs")
                || rel == "crates/forge-os/src/printer.rs"
                || rel == "crates/forge-os/src/error.rs"
            {
                continue;
            }
            let text = std::fs::read_to_string(p).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(&text);
            for (i, line) in code.lines().enumerate() {
                if !line.trim_start().starts_with("//") && printing.is_match(line) {
                    found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "results printed or exit codes chosen below the command layer (return a report; print and choose in src/commands/):\n{}",
        found.join("\n")
    );
    assert!(printing.is_match("forge_os::outln!(\"{x}\");") && printing.is_match("Ok(Exit::Problems)"));
    assert!(!printing.is_match("forge_os::note!(\"building\");"));
}
