//! An evidence folder: `<DIR>/<wheel sha256>/<kind>-<id>.dsse.json`, one
//! signed envelope per file (`id`: the first 16 hex digits of the envelope's
//! own sha256, so a statement is never written twice and two never collide).
//! Writing refuses a folder that is a symlink or not writable before anything
//! runs ([`prepare`]), and puts each file in place by rename, never over an
//! existing one; the folder is a [`Tree`], so a link planted inside it never
//! sends a write or a read outside. Reading is bounded (file count, bytes) and
//! checks every envelope ([`super::statement::open`]); a statement in another
//! wheel's folder (replayed) is an error. Owns the layout; must not decide
//! what a statement means.
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::statement::{self, Opened, Statement};
use crate::cache::sign::PublicKey;
use forge_model::ladder::Kind;
use forge_os::error::Failure;
use forge_os::fs::{self, Tree};

/// File name suffix of a statement.
pub const SUFFIX: &str = ".dsse.json";
/// The most statement files read from one folder tree.
pub const MAX_FILES: usize = 10_000;

/// A statement that verified.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub signer: String,
    pub statement: Statement,
}

impl Found {
    pub fn sha256(&self) -> &str {
        &self.statement.subject[0].digest.sha256
    }
}

/// A statement no trusted key signed (names of the keys that did).
#[derive(Debug, Clone)]
pub struct Untrusted {
    pub path: PathBuf,
    pub signers: Vec<String>,
}

/// Everything read from evidence folders.
#[derive(Debug, Default)]
pub struct Read {
    pub found: Vec<Found>,
    pub untrusted: Vec<Untrusted>,
}

fn refuse(dir: &Path, why: &str) -> anyhow::Error {
    Failure::usage(format!("the evidence folder {}: {why}", dir.display()))
        .hint("pass a folder you own (not a symlink), e.g. --record evidence/")
        .into()
}

/// The folder above `dir` as a tree and `dir`'s name in it (`None` for a
/// path that ends in `.`, `..` or `/`: `dir` is then opened itself).
fn parent_of(dir: &Path) -> Result<Option<(Tree, &std::ffi::OsStr)>> {
    let Some(name) = dir.file_name() else { return Ok(None) };
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok(Some((Tree::open(parent, "folder of the evidence folder")?, name)))
}

/// `dir` as a place to record into (created by the first `write`, never here); refused (exit 2)
/// when it is a symlink, not a folder, or not writable by this user.
pub fn prepare(dir: &Path) -> Result<PathBuf> {
    // Nothing is created here: the folder appears with the first statement
    // (`write`), after every other input was checked. A missing folder is
    // checked through the nearest folder above it that exists.
    let writable = match parent_of(dir) {
        Ok(Some((parent, name))) => match parent.kind(name)? {
            fs::Kind::Link => return Err(refuse(dir, "is a symlink (evidence folders are never followed)")),
            fs::Kind::Dir => dir.to_path_buf(),
            fs::Kind::Missing => parent.path().to_path_buf(),
            _ => return Err(refuse(dir, "is not a folder")),
        },
        Ok(None) => {
            Tree::open(dir, "evidence folder").map_err(|e| refuse(dir, &format!("{e:#}")))?.path().to_path_buf()
        }
        // The folder above is missing too: the nearest one that exists is written into.
        Err(_) => nearest(dir)?,
    };
    let c =
        std::ffi::CString::new(writable.as_os_str().as_encoded_bytes()).map_err(|_| refuse(dir, "has a NUL byte"))?;
    // SAFETY: a valid C string; access(2) only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(refuse(dir, "is not writable by this user"));
    }
    Ok(dir.to_path_buf())
}

/// The nearest folder above `dir` that exists (a file there is refused).
fn nearest(dir: &Path) -> Result<PathBuf> {
    for up in dir.ancestors().skip(1) {
        let up = if up.as_os_str().is_empty() { Path::new(".") } else { up };
        if let Some(t) =
            Tree::open_if_exists(up, "folder above the evidence folder").map_err(|_| refuse(dir, "is not a folder"))?
        {
            return Ok(t.path().to_path_buf());
        }
    }
    Err(refuse(dir, "has no folder above it"))
}

/// `dir` (made when absent) as a tree: never through a link in its own place.
pub fn open(dir: &Path, make: bool) -> Result<Tree> {
    let Some((parent, name)) = parent_of(dir)? else { return Tree::open(dir, "evidence folder") };
    match parent.kind(name)? {
        fs::Kind::Link => return Err(refuse(dir, "is a symlink (evidence folders are never followed)")),
        fs::Kind::Missing if make => parent.create_dir_all(name)?,
        fs::Kind::Dir | fs::Kind::Missing => {}
        _ => return Err(refuse(dir, "is not a folder")),
    }
    parent.sub(name, "evidence folder").map_err(|e| refuse(dir, &format!("{e:#}")))
}

/// The file name of an envelope of `kind`.
pub fn file_name(kind: Kind, envelope: &[u8]) -> String {
    let id = forge_os::input::sha256_hex(envelope);
    format!("{}-{}{SUFFIX}", kind.as_str(), &id[..16])
}

/// Put a signed envelope about `sha256` into `dir` (prepared; made now when
/// absent): see [`write_in`]. Returns its path.
pub fn write(dir: &Path, sha256: &str, kind: Kind, envelope: &[u8]) -> Result<PathBuf> {
    // Named as the caller named the folder (`evidence/<sha256>/...`), not by its absolute path.
    let tree = open(dir, true)?;
    let path = write_in(&tree, sha256, kind, envelope)?;
    Ok(path.strip_prefix(tree.path()).map(|rel| dir.join(rel)).unwrap_or(path))
}

/// Put a signed envelope about `sha256` into the evidence folder `tree`:
/// `<sha256>/<kind>-<id>.dsse.json`, written under a temporary name and put in
/// place only under a free name. The same file there already (the name is
/// the digest of its bytes) is kept; a link, a FIFO or a folder where the
/// statement or its folder goes is refused (exit 2), and nothing is written.
pub fn write_in(tree: &Tree, sha256: &str, kind: Kind, envelope: &[u8]) -> Result<PathBuf> {
    crate::cache::Key::parse(sha256)?;
    match tree.kind(sha256)? {
        fs::Kind::Dir => {}
        fs::Kind::Missing => {
            tree.make_dir(sha256)?;
        }
        k => {
            return Err(Failure::usage(format!("{} is {}, not a folder", tree.join(sha256).display(), k.noun()))
                .hint("remove it; a statement is kept in a folder named by its wheel's sha256")
                .into())
        }
    }
    let rel = Path::new(sha256).join(file_name(kind, envelope));
    match tree.kind(&rel)? {
        fs::Kind::File { .. } => return Ok(tree.join(&rel)), // the same bytes (the name is their digest)
        fs::Kind::Missing => {}
        k => {
            return Err(Failure::usage(format!("{} is {}, not a statement", tree.join(&rel).display(), k.noun()))
                .hint("remove it; nothing was written")
                .into())
        }
    }
    let staged = tree.stage(&rel, 0o644, |f| {
        fs::set_mode_exact(f, 0o644)?;
        std::io::Write::write_all(f, envelope)?;
        Ok(f.sync_all()?)
    })?;
    staged.commit_new()?;
    Ok(tree.join(&rel))
}

/// Read the envelope file `rel` of `tree` (bounded, a regular file) and check
/// it; `expect` is the wheel sha256 it must be about (its folder). Returns the
/// statement when a trusted key signed it, else the key names that did.
fn read_in(
    tree: &Tree,
    rel: &Path,
    trusted: &[PublicKey],
    expect: &str,
) -> Result<Result<Found, Vec<String>>, Failure> {
    let path = tree.join(rel);
    let fail = |f: Failure| Failure { message: format!("{}: {}", path.display(), f.message), ..f };
    let bytes = tree.read(rel, statement::MAX_BYTES).map_err(|e| {
        e.downcast::<Failure>().unwrap_or_else(|e| Failure::usage(format!("{}: {e:#}", path.display())))
    })?;
    match statement::open(&bytes, trusted).map_err(fail)? {
        Opened::NotTrusted(_) => Ok(Err(signers_of(&bytes))),
        Opened::Trusted { signer, statement } => {
            let about = &statement.subject[0].digest.sha256;
            if expect != about {
                return Err(fail(
                    Failure::usage(format!(
                        "a statement about sha256 {about} ({}) kept for the wheel with sha256 {expect}: replayed onto a wheel it does not name",
                        statement.subject[0].name
                    ))
                    .hint("remove the file; evidence only counts for the wheel its subject names"),
                ));
            }
            Ok(Ok(Found { path, signer, statement }))
        }
    }
}

/// Every statement under `dirs` (`<DIR>/<sha256>/*.dsse.json`); other files are ignored.
pub fn read_all(dirs: &[PathBuf], trusted: &[PublicKey]) -> Result<Read> {
    let mut out = Read::default();
    let mut seen = 0usize;
    for dir in dirs {
        let tree = open(dir, false)?;
        for (sha, rel) in files(&tree)? {
            seen += 1;
            if seen > MAX_FILES {
                return Err(Failure::usage(format!("more than {MAX_FILES} statements under the evidence folders"))
                    .hint("split them, or pass only the folders that matter")
                    .into());
            }
            match read_in(&tree, &rel, trusted, &sha)? {
                Ok(f) => out.found.push(f),
                Err(signers) => out.untrusted.push(Untrusted { path: tree.join(&rel), signers }),
            }
        }
    }
    out.found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// `(sha256, path)` of every statement file in `tree`, sorted; folders whose
/// name is not a sha256 and links are skipped.
fn files(tree: &Tree) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for e in tree.list(".", MAX_FILES)?.entries {
        let Some(name) = e.utf8() else { continue };
        let is_sha = name.len() == 64 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !is_sha || e.kind != fs::Kind::Dir {
            continue;
        }
        for f in tree.list(name, MAX_FILES + 1)?.entries {
            let Some(fname) = f.utf8() else { continue };
            if fname.ends_with(SUFFIX) && !fname.starts_with('.') {
                out.push((name.to_string(), Path::new(name).join(fname)));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The key names on an envelope that did not verify, for the note (escaped when printed).
fn signers_of(bytes: &[u8]) -> Vec<String> {
    match statement::open(bytes, &[]) {
        Ok(Opened::NotTrusted(n)) => n,
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement's own name taken by a FIFO, a link or a folder: refused
    /// (exit 2, naming it), never opened or written through; the same file
    /// there already is kept as it is.
    #[test]
    fn what_sits_at_a_statements_name_is_refused_unless_it_is_that_statement() {
        let t = tempfile::tempdir().unwrap();
        let (sha, env) = ("c".repeat(64), b"{\"payload\": 1}".to_vec());
        let rel = Path::new(&sha).join(file_name(Kind::Training, &env));
        std::fs::create_dir_all(t.path().join("ev").join(&sha)).unwrap();
        std::fs::write(t.path().join("outside"), b"keep").unwrap();
        let tree = Tree::open(&t.path().join("ev"), "evidence folder").unwrap();
        let at = t.path().join("ev").join(&rel);
        let fifo = |p: &Path| {
            let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        };
        type Plant = Box<dyn Fn(&Path)>;
        let plants: [(&str, Plant); 3] = [
            ("FIFO", Box::new(fifo)),
            ("symbolic link", Box::new(|p: &Path| std::os::unix::fs::symlink("../../outside", p).unwrap())),
            ("folder", Box::new(|p: &Path| std::fs::create_dir(p).unwrap())),
        ];
        for (what, plant) in plants {
            plant(&at);
            let e = write_in(&tree, &sha, Kind::Training, &env).unwrap_err();
            assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Usage, "{what}: {e:#}");
            assert!(format!("{e:#}").contains(&rel.display().to_string()) && format!("{e:#}").contains(what), "{e:#}");
            assert_eq!(std::fs::read(t.path().join("outside")).unwrap(), b"keep");
            let _ = std::fs::remove_file(&at).or_else(|_| std::fs::remove_dir(&at));
        }
        let path = write_in(&tree, &sha, Kind::Training, &env).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), env);
        assert_eq!(write_in(&tree, &sha, Kind::Training, &env).unwrap(), path, "the same statement is kept");
        assert_eq!(std::fs::read_dir(t.path().join("ev").join(&sha)).unwrap().count(), 1, "no temporary left");
    }
}
