//! DeepEP's extensions built side by side (behaviour: `side_by_side`): the
//! plan's `pip wheel` builds `deep_ep_cpp` and then `hybrid_ep_cpp`, one after
//! the other; the side-by-side command (side_by_side.py, run with the plan's
//! interpreter, folder and environment) calls the same setuptools hooks pip
//! calls and compiles every extension at once, each with its own ninja folder
//! and MAX_JOBS shared between them. Every compile and link command and every
//! output path is the serial build's, so the wheel's bytes are too (tests/
//! side_by_side.rs builds both ways and compares): not in the cache key, shown
//! in the plan. Also keeps every ninja log of the build beside its log.
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::plan::{Plan, SideBySide};
use forge_os::fs::{Kind, Tree};

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
    pl.side_by_side = Some(SideBySide {
        extensions: pl.interface.extensions.clone(),
        jobs,
        argv,
        first_units: Vec::new(),
        order: None,
    });
}

/// The command the build runs: the side-by-side driver (written now) or the plan's own.
pub fn command(pl: &Plan) -> Result<&[String]> {
    match &pl.side_by_side {
        Some(s) => {
            Tree::open(pl.build_dir(), "build folder")?.write(DRIVER_FILE, DRIVER.as_bytes())?;
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
/// The tree is the pinned revision's (not ours) and read through its [`Tree`]:
/// `build` itself and every entry below it are taken only when they are not
/// links (a committed `build` symlink is not followed), each log is opened
/// without following links and copied up to [`MAX_NINJA_LOG`] bytes (a larger
/// one is cut, saying so); at most 64 logs, 6 folders deep, [`MAX_ENTRIES`]
/// entries. The copies are written through the log folder's tree. Best effort:
/// what cannot be read or written is left out.
pub fn keep_ninja_logs(tree: &Path, log: &Path) -> Vec<PathBuf> {
    let (Some(folder), Some(name)) = (log.parent(), log.file_stem()) else { return Vec::new() };
    let dest = PathBuf::from(format!("{}.ninja", name.to_string_lossy()));
    let Ok(logs) = Tree::open(folder, "log folder") else { return Vec::new() };
    if logs.remove_all(&dest).is_err() {
        return Vec::new();
    }
    let Ok(src) = Tree::open(tree, "build tree") else { return Vec::new() };
    if !matches!(src.kind("build"), Ok(Kind::Dir)) {
        return Vec::new();
    }
    let mut kept = Vec::new();
    for rel in ninja_logs(&src) {
        let parent = rel.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
        let to = dest.join(format!("{}.ninja_log", parent.unwrap_or_else(|| "build".into())));
        if logs.create_dir_all(&dest).is_ok() && copy_capped(&src, &rel, &logs, &to).is_ok() {
            kept.push(logs.join(&to));
        }
    }
    kept
}

/// The `.ninja_log` files below `build/` (regular files, never through a link),
/// depth first in sorted order, within the limits of [`keep_ninja_logs`].
fn ninja_logs(src: &Tree) -> Vec<PathBuf> {
    let (mut found, mut seen) = (Vec::new(), 0usize);
    let mut stack = vec![(PathBuf::from("build"), 1usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(listing) = src.list(&dir, MAX_ENTRIES) else { continue };
        let mut folders = Vec::new();
        for e in listing.entries {
            seen += 1;
            if seen > MAX_ENTRIES || found.len() == 64 {
                return found;
            }
            let rel = dir.join(&e.name);
            match e.kind {
                Kind::Dir if depth < 6 => folders.push(rel),
                Kind::File { .. } if e.name == ".ninja_log" => found.push(rel),
                _ => {}
            }
        }
        stack.extend(folders.into_iter().rev().map(|f| (f, depth + 1)));
    }
    found
}

/// Copy `rel` of `src` (a regular file, not a link) to `to` of `dest`, at most
/// [`MAX_NINJA_LOG`] bytes; a larger one is cut and a last line says so.
fn copy_capped(src: &Tree, rel: &Path, dest: &Tree, to: &Path) -> Result<()> {
    let (f, size) = src.open_file_nofollow(rel, u64::MAX)?;
    dest.write_with(to, forge_os::fs::PUBLIC, |out| {
        std::io::copy(&mut f.take(MAX_NINJA_LOG), out)?;
        if size > MAX_NINJA_LOG {
            out.write_all(
                format!(
                    "\n# deepep-forge: cut at {MAX_NINJA_LOG} of {size} bytes (a tree file is copied up to {MAX_NINJA_LOG} bytes)\n"
                )
                .as_bytes(),
            )?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    //! Hostile build trees: links never followed, huge logs cut.
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
