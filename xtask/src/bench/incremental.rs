//! `cargo xtask bench incremental`: what one edit costs a developer.
//! `cargo test --workspace --no-run` after touching one file of lock
//! (`lock/uvlock.rs`), of probe (`probe/elf.rs`) and of the core (`input.rs`),
//! in this checkout and, in the same run, in a baseline revision (default
//! 66c09d8, the last one-crate layout) checked out as a git worktree under
//! `target/bench-incremental/` with its own target folder. Each tree is built
//! once untimed first; each figure is the median of `DEEPEP_FORGE_BENCH_RUNS`
//! (default 3) touch-and-rebuild runs; prints both and the ratio.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

/// The baseline: the last commit of the one-crate layout.
pub const BASELINE_DEFAULT: &str = "66c09d8";
/// The files touched, by the tail of their path (the same in both layouts).
const TOUCHED: [(&str, &str); 3] = [("lock", "lock/uvlock.rs"), ("probe", "probe/elf.rs"), ("core", "/input.rs")];

#[derive(Debug, clap::Args)]
pub struct IncrementalArgs {
    /// The baseline revision (a commit of this repository).
    #[arg(long, default_value = BASELINE_DEFAULT, value_name = "REV")]
    pub baseline: String,
}

/// The first `.rs` file under `tree`'s `src/` or `crates/` whose path ends with `tail`.
fn find(tree: &Path, tail: &str) -> Result<PathBuf> {
    let mut hits: Vec<PathBuf> = ["src", "crates"]
        .iter()
        .flat_map(|d| walk(&tree.join(d)))
        .filter(|p| p.to_string_lossy().ends_with(tail))
        .collect();
    hits.sort();
    hits.into_iter().next().with_context(|| format!("no file ending in {tail} under {}", tree.display()))
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `cargo test --workspace --no-run` in `tree` with `target` as its target folder.
fn build(sh: &Shell, tree: &Path, target: &Path) -> Result<Duration> {
    let _d = sh.push_dir(tree);
    let _t = sh.push_env("CARGO_TARGET_DIR", target);
    let t = Instant::now();
    cmd!(sh, "cargo test --workspace --locked --no-run --quiet").quiet().ignore_stderr().run()?;
    Ok(t.elapsed())
}

fn touch(p: &Path) -> Result<()> {
    let f = std::fs::OpenOptions::new().append(true).open(p)?;
    f.set_modified(std::time::SystemTime::now())?;
    Ok(())
}

/// The median seconds of `runs` touch-and-rebuild runs per touched file.
fn measure(sh: &Shell, tree: &Path, target: &Path, runs: usize) -> Result<Vec<f64>> {
    build(sh, tree, target)?;
    let mut out = Vec::new();
    for (_, tail) in TOUCHED {
        let file = find(tree, tail)?;
        let mut v = Vec::new();
        for _ in 0..runs {
            touch(&file)?;
            v.push(build(sh, tree, target)?.as_secs_f64());
        }
        v.sort_by(f64::total_cmp);
        out.push(v[v.len() / 2]);
    }
    Ok(out)
}

/// A worktree of `rev` under `target/bench-incremental/`, made once.
fn baseline_tree(sh: &Shell, root: &Path, rev: &str) -> Result<PathBuf> {
    if rev.starts_with('-') || !rev.chars().all(|c| c.is_ascii_hexdigit()) {
        bail!("--baseline {rev}: give a commit hash");
    }
    let tree = root.join("target/bench-incremental").join(rev);
    if !tree.join("Cargo.toml").exists() {
        let _d = sh.push_dir(root);
        cmd!(sh, "git worktree add --force --detach {tree} {rev}").quiet().run()?;
    }
    Ok(tree)
}

pub fn run(a: IncrementalArgs) -> Result<()> {
    let root = super::project_root();
    let runs: usize = std::env::var("DEEPEP_FORGE_BENCH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let sh = Shell::new()?;
    let base = baseline_tree(&sh, &root, &a.baseline)?;
    let here = measure(&sh, &root, &root.join("target"), runs)?;
    let then = measure(&sh, &base, &base.join("target"), runs)?;
    println!("cargo test --workspace --no-run after touching one file (median of {runs}, seconds)");
    println!("  {:<8} {:>10} {:>10} {:>7}", "file", "this tree", a.baseline, "ratio");
    for (i, (what, tail)) in TOUCHED.iter().enumerate() {
        println!("  {:<8} {:>10.1} {:>10.1} {:>7.2}  (*{tail})", what, here[i], then[i], here[i] / then[i]);
    }
    Ok(())
}
