//! The files an installed environment names (`probe --python PATH`): its
//! interpreter says where deep_ep, torch, site-packages and the libraries
//! are, the extensions' RUNPATHs and `LD_LIBRARY_PATH` name folders, the
//! environment names a CUDA home. Those are paths anywhere on this machine,
//! chosen by the environment under test (as `--wheel` is chosen by the user),
//! so they are asked ambiently, through `forge_os::fs` only, and only here:
//! every read is bounded, never blocks and is of a regular file; a folder is
//! listed sorted and capped. Links are followed, as the dynamic loader and
//! Python follow them. Must not decide what to read (`env`, `loader` do).
use std::path::{Path, PathBuf};

use anyhow::Result;
use forge_os::fs::{Kind, Tree};

/// What `path` leads to, links followed (`Missing` when nothing does, or it cannot be asked).
pub fn kind(path: &Path) -> Kind {
    forge_os::fs::named::resolve(path).map_or(Kind::Missing, |real| forge_os::fs::named::kind(&real))
}

/// `path` leads to a regular file.
pub fn is_file(path: &Path) -> bool {
    matches!(kind(path), Kind::File { .. })
}

/// `path` leads to a folder.
pub fn is_dir(path: &Path) -> bool {
    kind(path) == Kind::Dir
}

/// Something is at `path` itself (a link counts, even one that leads nowhere).
pub fn exists(path: &Path) -> bool {
    forge_os::fs::named::kind(path) != Kind::Missing
}

/// `path` with every link resolved (None when it leads nowhere).
pub fn canonical(path: &Path) -> Option<PathBuf> {
    forge_os::fs::named::resolve(path).ok()
}

/// The UTF-8 names in the folder `dir`, sorted, at most `cap` (none when it is not a folder).
pub fn names(dir: &Path, cap: usize) -> Vec<String> {
    let Ok(tree) = Tree::open(dir, "folder") else { return Vec::new() };
    let Ok(listing) = tree.list(".", cap) else { return Vec::new() };
    listing.entries.into_iter().filter_map(|e| e.name.into_string().ok()).collect()
}

/// The bytes of the regular file `path` (at most `cap`).
pub fn read_bytes(path: &Path, what: &str, cap: u64) -> Result<Vec<u8>> {
    forge_os::fs::named::read_bytes(path, what, cap)
}

/// The UTF-8 text of the regular file `path` (at most `cap` bytes).
pub fn read_text(path: &Path, what: &str, cap: u64) -> Result<String> {
    forge_os::fs::named::read_text(path, what, cap)
}

/// The regular file `path` opened for reading (at most `cap` bytes), and its size.
pub fn open(path: &Path, what: &str, cap: u64) -> Result<(impl std::io::Read + std::io::Seek, u64)> {
    forge_os::fs::named::open(path, what, cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_followed_listings_sorted_and_capped() {
        let d = tempfile::tempdir().unwrap();
        for n in ["b", "a", "c"] {
            std::fs::write(d.path().join(n), n).unwrap();
        }
        std::fs::create_dir(d.path().join("dir")).unwrap();
        std::os::unix::fs::symlink("dir", d.path().join("to-dir")).unwrap();
        std::os::unix::fs::symlink("nowhere", d.path().join("dangling")).unwrap();
        assert!(is_dir(&d.path().join("to-dir")) && is_file(&d.path().join("a")) && !is_file(&d.path().join("dir")));
        assert_eq!(kind(&d.path().join("dangling")), Kind::Missing);
        assert!(exists(&d.path().join("dangling")) && !exists(&d.path().join("none")));
        assert_eq!(names(d.path(), 3), ["a", "b", "c"]);
        assert!(names(&d.path().join("a"), 10).is_empty(), "a file has no names");
        assert_eq!(canonical(&d.path().join("to-dir")), Some(std::fs::canonicalize(d.path().join("dir")).unwrap()));
    }
}
