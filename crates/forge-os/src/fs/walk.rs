//! A bounded walk of a folder inside a [`Tree`]: depth first, every folder's
//! names in sorted order (the same tree walks the same way on every file
//! system), links reported and never followed, and refused past its limits
//! (names in all, depth) rather than cut where a directory order happens to end.
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{Kind, Tree};
use crate::error::Failure;

/// A walk's limits.
#[derive(Debug, Clone, Copy)]
pub struct Walk {
    /// Names in all, below the start.
    pub max_entries: usize,
    /// Folders below the start (the start's own names are depth 1).
    pub max_depth: usize,
}

impl Default for Walk {
    fn default() -> Self {
        Walk { max_entries: 200_000, max_depth: 64 }
    }
}

/// One name found by a walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked {
    /// Relative to the tree (not to the start).
    pub rel: PathBuf,
    pub kind: Kind,
    pub depth: usize,
}

pub(super) fn walk(tree: &Tree, start: &Path, limits: Walk) -> Result<Vec<Walked>> {
    let mut out = Vec::new();
    let start = tree.rel(start)?;
    if tree.kind(&start)? != Kind::Dir && start != Path::new(".") {
        return Ok(out);
    }
    let mut stack = vec![(start, 1usize)];
    while let Some((dir, depth)) = stack.pop() {
        crate::error::check_interrupted()?;
        if depth > limits.max_depth {
            return Err(too_much(tree, &dir, format!("deeper than {} folders", limits.max_depth)));
        }
        let listing = tree.list(&dir, super::MAX_NAMES)?;
        let mut folders = Vec::new();
        for e in listing.entries {
            let rel = if dir == Path::new(".") { PathBuf::from(&e.name) } else { dir.join(&e.name) };
            if out.len() == limits.max_entries {
                return Err(too_much(tree, &dir, format!("more than {} names", limits.max_entries)));
            }
            if e.kind == Kind::Dir {
                folders.push(rel.clone());
            }
            out.push(Walked { rel, kind: e.kind, depth });
        }
        // depth first, in sorted order: push in reverse
        for f in folders.into_iter().rev() {
            stack.push((f, depth + 1));
        }
    }
    Ok(out)
}

fn too_much(tree: &Tree, at: &Path, why: String) -> anyhow::Error {
    Failure::usage(format!("{} {}: {why}; refused", tree.what(), tree.join(at).display())).into()
}
