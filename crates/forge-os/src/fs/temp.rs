//! A fresh private folder of the tool's own (mode 0700, in the temp folder or
//! a named parent), as a [`Tree`], removed with all inside it when dropped.
use std::path::Path;

use anyhow::{Context, Result};

use super::Tree;

/// A temporary folder, removed on drop (links inside removed, never followed).
pub struct TempTree {
    tree: Tree,
    _dir: tempfile::TempDir,
}

impl TempTree {
    /// A new folder in the temp folder (`TMPDIR`), named `<prefix>…`.
    pub fn new(prefix: &str) -> Result<TempTree> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().context("making a temporary folder")?;
        Self::from(dir)
    }

    /// A new folder inside `parent` (same file system: a rename out of it is atomic).
    pub fn new_in(parent: &Tree, prefix: &str) -> Result<TempTree> {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(parent.path())
            .with_context(|| format!("making a temporary folder in {}", parent.path().display()))?;
        Self::from(dir)
    }

    fn from(dir: tempfile::TempDir) -> Result<TempTree> {
        let tree = Tree::open(dir.path(), "temporary folder")?;
        Ok(TempTree { tree, _dir: dir })
    }

    /// Its path (for child processes).
    pub fn path(&self) -> &Path {
        self.tree.path()
    }
}

impl std::ops::Deref for TempTree {
    type Target = Tree;
    fn deref(&self) -> &Tree {
        &self.tree
    }
}

/// 16 hex digits that differ between calls and processes (temporary names).
pub(super) fn random_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mix = nanos ^ (u64::from(std::process::id()) << 32) ^ COUNT.fetch_add(1, Ordering::Relaxed).rotate_left(17);
    format!("{:016x}", mix.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}
