//! Files the user names (`--pins`, `--wheel`, a recipe, a signing key): the
//! one ambient read of a single file, where the path is the user's own choice
//! (a link they name is followed). Bounded as every read here: a file is
//! refused (exit 2, naming it) when it is missing, not a regular file (a
//! directory, a FIFO, `/dev/zero`), a symlink loop, larger than its cap, or
//! (for text) not UTF-8. Opening never blocks (O_NONBLOCK, so a FIFO cannot
//! hang us) and the size is checked on the opened file, then again while
//! reading (a file that grows is cut at the cap). A file inside a tree the
//! tool works in is read through its `Tree` instead. Must not parse anything.
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Result;

use crate::error::Failure;
use crate::input::{sha256_stream, StreamError};

/// Why a file was refused, as the message says it.
fn refuse(path: &Path, what: &str, why: impl std::fmt::Display) -> anyhow::Error {
    Failure::usage(format!("{what} {}: {why}", path.display()))
        .hint(format!("pass a readable regular file as the {what}"))
        .into()
}

/// Open `path` as a regular file of at most `cap` bytes; `what` names the
/// input in messages ("pins file", "uv.lock", "recipe").
pub fn open(path: &Path, what: &str, cap: u64) -> Result<(File, u64)> {
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path).map_err(
        |e| match e.raw_os_error() {
            Some(libc::ENOENT) => refuse(path, what, "not found"),
            Some(libc::ELOOP) => refuse(path, what, "a symlink loop"),
            Some(libc::EISDIR) => refuse(path, what, "a directory, not a regular file"),
            Some(libc::EACCES) => refuse(path, what, "permission denied"),
            _ => refuse(path, what, e),
        },
    )?;
    let m = regular(&f, path, what)?;
    if m.len() > cap {
        return Err(refuse(path, what, format!("{} bytes, more than the {} bytes allowed", m.len(), cap)));
    }
    Ok((f, m.len()))
}

/// Copy a file of a tree deepep-forge does not own (a build tree's log) to
/// `to`: opened without following a link (O_NOFOLLOW: a planted link is
/// refused, not read), never blocking, a regular file, and at most `cap`
/// bytes copied (a larger one is cut, and a last line says so). Returns
/// (bytes copied, the file's size).
pub fn copy_capped(from: &Path, to: &Path, cap: u64) -> Result<(u64, u64)> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(from)
        .map_err(|e| refuse(from, "tree file", e))?;
    let size = regular(&f, from, "tree file")?.len();
    let mut out = std::fs::File::create(to)?;
    let copied = std::io::copy(&mut f.take(cap), &mut out)?;
    if size > cap {
        std::io::Write::write_all(
            &mut out,
            format!("\n# deepep-forge: cut at {cap} of {size} bytes (a tree file is copied up to {cap} bytes)\n")
                .as_bytes(),
        )?;
    }
    Ok((copied, size))
}

/// Open (creating it if absent) the lock file `path` for `flock`: never
/// through a symlink (O_NOFOLLOW: a planted link is refused, not followed),
/// never blocking (O_NONBLOCK: a FIFO planted there cannot hang the open),
/// and checked on the opened file to be a regular file (a FIFO with a reader
/// or a device opens, and is refused here). Exit 2 naming the file otherwise.
pub fn open_lock(path: &Path, what: &str) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse(path, what, "a symlink (lock files are never followed)"),
            Some(libc::ENXIO) => refuse(path, what, "not a regular file (a FIFO)"),
            Some(libc::EISDIR) => refuse(path, what, "a directory, not a regular file"),
            _ => anyhow::Error::new(e).context(format!("opening {what} {}", path.display())),
        })?;
    regular(&f, path, what)?;
    Ok(f)
}

/// Refuse an opened file that is not a regular file (checked on the file
/// descriptor, so a name swapped after opening changes nothing).
pub fn regular(f: &File, path: &Path, what: &str) -> Result<std::fs::Metadata> {
    let m = f.metadata().map_err(|e| refuse(path, what, e))?;
    if m.is_dir() {
        return Err(refuse(path, what, "a directory, not a regular file"));
    }
    if !m.is_file() {
        return Err(refuse(path, what, "not a regular file (a device, FIFO or socket)"));
    }
    Ok(m)
}

/// The bytes of `path` (a regular file of at most `cap` bytes).
pub fn read_bytes(path: &Path, what: &str, cap: u64) -> Result<Vec<u8>> {
    let (f, _) = open(path, what, cap)?;
    read_opened(f, path, what, cap)
}

/// The bytes of a file the caller opened (`path` names it in messages; e.g.
/// opened relative to a folder descriptor): checked a regular file of at most
/// `cap` bytes on the descriptor, then read against the cap.
pub fn read_opened(f: File, path: &Path, what: &str, cap: u64) -> Result<Vec<u8>> {
    let len = regular(&f, path, what)?.len();
    if len > cap {
        return Err(refuse(path, what, format!("{len} bytes, more than the {cap} bytes allowed")));
    }
    let mut buf = Vec::with_capacity(len as usize);
    f.take(cap + 1).read_to_end(&mut buf).map_err(|e| refuse(path, what, e))?;
    if buf.len() as u64 > cap {
        return Err(refuse(path, what, format!("grew past the {cap} bytes allowed while being read")));
    }
    Ok(buf)
}

/// The UTF-8 text of `path` (a regular file of at most `cap` bytes).
pub fn read_text(path: &Path, what: &str, cap: u64) -> Result<String> {
    utf8(read_bytes(path, what, cap)?, path, what)
}

/// `bytes` read from `path` as UTF-8 text, or refused naming the line.
pub fn utf8(bytes: Vec<u8>, path: &Path, what: &str) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|b| **b == b'\n').count() + 1;
        refuse(path, what, format!("not UTF-8 text (invalid byte at line {line}, byte offset {at})"))
    })
}

/// Like [`read_bytes`], but a missing file is `Ok(None)`.
pub fn read_bytes_opt(path: &Path, what: &str, cap: u64) -> Result<Option<Vec<u8>>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => read_bytes(path, what, cap).map(Some),
    }
}

/// Like [`read_text`], but a missing file is `Ok(None)`.
pub fn read_text_opt(path: &Path, what: &str, cap: u64) -> Result<Option<String>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => read_text(path, what, cap).map(Some),
    }
}

/// What the user-named `path` is, a link followed (the path is the user's
/// choice): `Kind::Missing` when nothing is there (or it cannot be reached).
pub fn kind_through(path: &Path) -> super::Kind {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => super::Kind::Dir,
        Ok(m) if m.is_file() => super::Kind::File { len: m.len() },
        Ok(_) => super::Kind::Special,
        Err(_) => super::Kind::Missing,
    }
}

/// `path` with every link and `..` resolved (one program or folder however
/// it is spelled), `None` when it does not resolve.
pub fn canonical_opt(path: &Path) -> Option<std::path::PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// sha256 (hex) and size of a user file read through [`open`] (regular, at
/// most `cap`, never blocks; a file that grows is cut at the cap); a read
/// error names the file.
pub fn sha256_file(path: &Path, what: &str, cap: u64) -> Result<(String, u64)> {
    let (f, _) = open(path, what, cap)?;
    match sha256_stream(&mut f.take(cap), cap, |_| Ok(())) {
        Ok((digest, n)) => Ok((hex::encode(digest), n)),
        Err(StreamError::Read(e)) => Err(refuse(path, what, format!("cannot be read: {e}"))),
        Err(e) => Err(e.into()),
    }
}

/// What `path` is, not following a final link (missing, a file, a folder, a
/// link, a FIFO/socket/device): a path the user or the environment names.
pub fn kind(path: &Path) -> super::Kind {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => super::Kind::Link,
        Ok(m) if m.is_dir() => super::Kind::Dir,
        Ok(m) if m.is_file() => super::Kind::File { len: m.len() },
        Ok(_) => super::Kind::Special,
        Err(_) => super::Kind::Missing,
    }
}

/// Whether `path` is a regular file, through links (a program on `PATH`,
/// `$DEEPEP_FORGE_UV`: the environment's own choice).
pub fn is_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// Whether `path` is a folder, through links (`--source PATH`).
pub fn is_dir(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_dir())
}

/// `path` with every link resolved (a path the user names, for identity and
/// for the folder that bounds what it may reach); exit 2 naming it when it
/// cannot be resolved.
pub fn canonical(path: &Path, what: &str) -> Result<std::path::PathBuf> {
    std::fs::canonicalize(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => refuse(path, what, "not found"),
        Some(libc::ELOOP) => refuse(path, what, "a symlink loop"),
        _ => refuse(path, what, e),
    })
}

/// A new file at `path` that must not exist yet (a link, a FIFO, anything
/// there is refused, never followed): a file the caller names for the tool's
/// output that it renames into place itself (a stamped wheel in a staging folder).
pub fn create_new(path: &Path, what: &str) -> Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EEXIST) => refuse(path, what, "already exists"),
            _ => anyhow::Error::new(e).context(format!("creating {what} {}", path.display())),
        })
}

/// A new file at `path`, made for writing (an existing one is emptied; a
/// final link, a FIFO or a folder there is refused, never followed or waited
/// on): a file the caller names for the tool's own output, such as a build log.
pub fn create(path: &Path, what: &str) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse(path, what, "a symlink (never followed here)"),
            Some(libc::ENXIO) => refuse(path, what, "not a regular file (a FIFO)"),
            Some(libc::EISDIR) => refuse(path, what, "a directory, not a regular file"),
            _ => anyhow::Error::new(e).context(format!("creating {what} {}", path.display())),
        })?;
    regular(&f, path, what)?;
    Ok(f)
}

/// `path` with every link and `..` resolved (realpath(3)): where a path the
/// user or an environment names really leads. Refused (exit 2, naming it)
/// when it leads nowhere or a part of it cannot be read.
pub fn resolve(path: &Path) -> Result<std::path::PathBuf> {
    std::fs::canonicalize(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => refuse(path, "path", "not found"),
        Some(libc::ELOOP) => refuse(path, "path", "a symlink loop"),
        _ => refuse(path, "path", e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::cap;

    #[test]
    fn refuses_what_is_not_a_small_regular_utf8_file() {
        let d = tempfile::tempdir().unwrap();
        let msg = |r: Result<String>| format!("{:#}", r.unwrap_err());
        assert!(msg(read_text(d.path(), "recipe", cap::TEXT)).contains("a directory"));
        assert!(msg(read_text(Path::new("/dev/zero"), "pins file", cap::TEXT)).contains("not a regular file"));
        let big = d.path().join("big");
        std::fs::write(&big, vec![b'a'; 100]).unwrap();
        assert!(msg(read_text(&big, "pins file", 10)).contains("more than the 10 bytes"));
        std::fs::write(&big, b"ok\n\xff").unwrap();
        assert!(msg(read_text(&big, "pins file", 10)).contains("line 2"));
        let l = d.path().join("loop");
        std::os::unix::fs::symlink(&l, &l).unwrap();
        assert!(msg(read_text(&l, "pins file", 10)).contains("symlink loop"));
        assert!(read_text_opt(&d.path().join("none"), "x", 10).unwrap().is_none());
    }

    #[test]
    fn kind_never_follows_a_final_link_and_resolve_follows_every_link() {
        use super::super::Kind;
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("real")).unwrap();
        std::fs::write(d.path().join("real/f"), b"abc").unwrap();
        std::os::unix::fs::symlink("real", d.path().join("link")).unwrap();
        std::os::unix::fs::symlink("nowhere", d.path().join("dangling")).unwrap();
        assert_eq!(kind(&d.path().join("real")), Kind::Dir);
        assert_eq!(kind(&d.path().join("real/f")), Kind::File { len: 3 });
        assert_eq!(kind(&d.path().join("link")), Kind::Link);
        assert_eq!(kind(&d.path().join("dangling")), Kind::Link);
        assert_eq!(kind(&d.path().join("none")), Kind::Missing);
        assert_eq!(kind(Path::new("/dev/null")), Kind::Special);
        let real = std::fs::canonicalize(d.path().join("real/f")).unwrap();
        assert_eq!(resolve(&d.path().join("link/f")).unwrap(), real);
        assert_eq!(resolve(&d.path().join("link/../link/f")).unwrap(), real);
        for bad in ["dangling", "none"] {
            let e = resolve(&d.path().join(bad)).unwrap_err();
            assert_eq!(crate::error::exit_of(&e), crate::error::Exit::Usage);
            assert!(format!("{e:#}").contains("not found"), "{e:#}");
        }
    }

    #[test]
    fn lock_files_are_regular_files_never_followed_never_waited_on() {
        let d = tempfile::tempdir().unwrap();
        let msg = |r: Result<File>| format!("{:#}", r.unwrap_err());
        let fifo = d.path().join("fifo.lock");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // No reader: the open itself fails at once (ENXIO) instead of waiting for one.
        assert!(msg(open_lock(&fifo, "lock file")).contains("not a regular file"));
        // With a reader the open succeeds; the check on the opened file refuses it.
        let _reader = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
        assert!(msg(open_lock(&fifo, "lock file")).contains("not a regular file"));
        let link = d.path().join("null.lock");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        assert!(msg(open_lock(&link, "lock file")).contains("a symlink"));
        let ok = d.path().join("ok.lock");
        open_lock(&ok, "lock file").unwrap();
        assert!(std::fs::metadata(&ok).unwrap().is_file());
    }

    #[test]
    fn a_fifo_with_a_writer_is_refused_not_read() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("journal");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let r = read_bytes(&fifo, "journal", cap::TEXT);
        assert!(format!("{:#}", r.unwrap_err()).contains("not a regular file"));
    }
}
