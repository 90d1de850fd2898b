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
    pl.side_by_side =
        Some(SideBySide { extensions: pl.interface.extensions.clone(), jobs, argv, first_units: Vec::new() });
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

/// Most bytes of one `.ninja_log` kept (a larger one is cut, saying so).
pub const MAX_NINJA_LOG: u64 = 16 << 20;
/// Most entries of the build tree the walk looks at.
const MAX_ENTRIES: usize = 100_000;

/// Copy every `.ninja_log` of the build tree's `build/` folder (each extension's, or the
/// serial build's one) into `<log>.ninja/`, named after its folder; returns the copies.
/// The tree is the pinned revision's (not ours): `build` itself and every
/// entry below it are taken only when they are not links (a committed `build`
/// symlink is not followed), each log is opened without following links and
/// copied up to [`MAX_NINJA_LOG`] bytes (`input::copy_capped`); at most 64
/// logs, 6 folders deep, [`MAX_ENTRIES`] entries.
pub fn keep_ninja_logs(tree: &Path, log: &Path) -> Vec<PathBuf> {
    let dest = log.with_extension("ninja");
    let _ = std::fs::remove_dir_all(&dest);
    let mut kept = Vec::new();
    let root = tree.join("build");
    if !std::fs::symlink_metadata(&root).is_ok_and(|m| m.is_dir()) {
        return kept;
    }
    let walk = walkdir::WalkDir::new(&root).max_depth(6).follow_links(false).follow_root_links(false);
    for e in walk.into_iter().take(MAX_ENTRIES).filter_map(|e| e.ok()) {
        if kept.len() == 64 || !e.file_type().is_file() || e.file_name() != ".ninja_log" || e.path_is_symlink() {
            continue;
        }
        let name = e.path().parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
        let to = dest.join(format!("{}.ninja_log", name.unwrap_or_else(|| "build".into())));
        if std::fs::create_dir_all(&dest).is_ok()
            && forge_os::fs::named::copy_capped(e.path(), &to, MAX_NINJA_LOG).is_ok()
        {
            kept.push(to);
        }
    }
    kept
}

#[cfg(test)]
mod hostile_trees {
    use super::*;

    #[test]
    fn a_linked_build_folder_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let (tree, outside) = (d.path().join("tree"), d.path().join("outside"));
        std::fs::create_dir_all(outside.join("x")).unwrap();
        std::fs::write(outside.join("x/.ninja_log"), "secret").unwrap();
        std::fs::create_dir_all(&tree).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("build")).unwrap();
        assert!(keep_ninja_logs(&tree, &d.path().join("b.log")).is_empty());
        assert!(!d.path().join("b.ninja").exists());
    }

    #[test]
    fn a_linked_log_or_folder_inside_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let (tree, outside) = (d.path().join("tree"), d.path().join("outside"));
        std::fs::create_dir_all(outside.join("y")).unwrap();
        std::fs::write(outside.join("y/.ninja_log"), "secret").unwrap();
        std::fs::create_dir_all(tree.join("build/a")).unwrap();
        std::os::unix::fs::symlink(outside.join("y/.ninja_log"), tree.join("build/a/.ninja_log")).unwrap();
        std::os::unix::fs::symlink(outside.join("y"), tree.join("build/b")).unwrap();
        assert!(keep_ninja_logs(&tree, &d.path().join("b.log")).is_empty());
    }

    #[test]
    fn a_huge_sparse_log_is_cut_and_says_so() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        std::fs::create_dir_all(tree.join("build/ext")).unwrap();
        let f = std::fs::File::create(tree.join("build/ext/.ninja_log")).unwrap();
        f.set_len(1 << 30).unwrap();
        let kept = keep_ninja_logs(&tree, &d.path().join("b.log"));
        assert_eq!(kept.len(), 1);
        let len = std::fs::metadata(&kept[0]).unwrap().len();
        assert!(len > MAX_NINJA_LOG && len < MAX_NINJA_LOG + 200, "{len}");
        let tail = forge_os::fs::named::read_bytes(&kept[0], "kept log", 1 << 30).unwrap();
        let tail = String::from_utf8_lossy(&tail[tail.len() - 120..]).into_owned();
        assert!(tail.contains(&format!("cut at {MAX_NINJA_LOG} of {} bytes", 1u64 << 30)), "{tail}");
    }
}
