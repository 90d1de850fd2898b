//! DeepEP's extensions built side by side (behaviour: `side_by_side`): the
//! plan's `pip wheel` builds `deep_ep_cpp` and then `hybrid_ep_cpp`, one after
//! the other; the side-by-side command (side_by_side.py, run with the plan's
//! interpreter, folder and environment) calls the same setuptools hooks pip
//! calls and compiles every extension at once, each with its own ninja folder
//! and MAX_JOBS shared between them. Every compile and link command and every
//! output path is the serial build's, so the wheel's bytes are too (tests/
//! side_by_side.rs builds both ways and compares): not in the cache key, shown
//! in the plan. Also keeps every ninja log of the build beside its log.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::plan::{Plan, SideBySide};

/// The driver, written into the build folder when the build runs.
pub const DRIVER: &str = include_str!("side_by_side.py");
const DRIVER_FILE: &str = "side-by-side.py";

/// Attach the step when the plan builds several extensions with pip natively
/// and the request did not ask for them one after another.
pub fn attach(pl: &mut Plan, serial: bool) {
    pl.side_by_side = None;
    let n = pl.interface.extensions.len();
    let pip = pl.run.argv.get(1..4).is_some_and(|a| a == ["-m", "pip", "wheel"]);
    let cross = pl.toolchain().is_some_and(|t| t.cross.is_some());
    if serial || n < 2 || !pip || cross {
        return;
    }
    let jobs: usize = pl.run.env.get("MAX_JOBS").and_then(|j| j.parse().ok()).unwrap_or(1);
    let argv = vec![
        pl.run.argv[0].clone(),
        pl.build_dir().join(DRIVER_FILE).to_string_lossy().into_owned(),
        pl.dist().to_string_lossy().into_owned(),
        jobs.to_string(),
        n.to_string(),
    ];
    pl.side_by_side = Some(SideBySide { extensions: pl.interface.extensions.clone(), jobs, argv });
}

/// The command the build runs: the side-by-side driver (written now) or the plan's own.
pub fn command(pl: &Plan) -> Result<&[String]> {
    match &pl.side_by_side {
        Some(s) => {
            let f = pl.build_dir().join(DRIVER_FILE);
            std::fs::write(&f, DRIVER).with_context(|| format!("writing {}", f.display()))?;
            Ok(&s.argv)
        }
        None => Ok(&pl.run.argv),
    }
}

/// The plan's line about it.
pub fn describe(s: &SideBySide) -> String {
    format!(
        "{} at once, each from its own ninja file, sharing MAX_JOBS {} (a jobserver with ninja >= 1.13, else split) (not keyed: the same commands and bytes as the command below; --serial-extensions: one after another)",
        s.extensions.join(", "),
        s.jobs
    )
}

/// Copy every `.ninja_log` of the build tree's `build/` folder (each extension's, or the
/// serial build's one) into `<log>.ninja/`, named after its folder; returns the copies.
/// Bounded: at most 64 logs, 6 folders deep; links are not followed.
pub fn keep_ninja_logs(tree: &Path, log: &Path) -> Vec<PathBuf> {
    let dest = log.with_extension("ninja");
    let _ = std::fs::remove_dir_all(&dest);
    let mut kept = Vec::new();
    let walk = walkdir::WalkDir::new(tree.join("build")).max_depth(6).follow_links(false);
    for e in walk.into_iter().filter_map(|e| e.ok()) {
        if kept.len() == 64 || !e.file_type().is_file() || e.file_name() != ".ninja_log" {
            continue;
        }
        let name = e.path().parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
        let to = dest.join(format!("{}.ninja_log", name.unwrap_or_else(|| "build".into())));
        if std::fs::create_dir_all(&dest).is_ok() && std::fs::copy(e.path(), &to).is_ok() {
            kept.push(to);
        }
    }
    kept
}
