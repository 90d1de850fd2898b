//! Folders opened without following a link, and removals and writes made
//! relative to the opened folder (`unlinkat`, `renameat`, `mkdirat`,
//! `openat`): what `cache gc` removes, and what `publish` writes under
//! `--out`, is always a name inside a folder it opened, so a link planted in
//! place of a folder, or swapped in after a check, never sends a removal or a
//! write outside. Must not decide what to remove or write.
use std::ffi::CString;
use std::fs::File;
use std::io::{Error, ErrorKind, Result};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

const DIR_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// `path` opened as a folder; its last component must be a folder, not a
/// link to one (refused with ENOTDIR or ELOOP). The cache folder above it is the user's
/// choice and may itself be a link.
pub fn open(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW).open(path)
}

/// One plain name: no `/`, NUL, `.` or `..` (a name read from a folder always is one).
fn cname(name: &str) -> Result<CString> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(Error::new(ErrorKind::InvalidInput, format!("`{}` is not one plain name", super::excerpt(name))));
    }
    CString::new(name).map_err(|_| Error::new(ErrorKind::InvalidInput, "a name with a NUL byte"))
}

/// The folder `name` inside `dir`, never through a link.
pub fn open_in(dir: &File, name: &str) -> Result<File> {
    let c = cname(name)?;
    // SAFETY: `c` is a NUL-terminated string and `dir` an open descriptor for the call's duration.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), DIR_FLAGS) };
    if fd < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and nobody else owns it.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Remove the file `name` of `dir` (a link is removed itself, never its target;
/// a folder is refused with EISDIR).
pub fn unlink_in(dir: &File, name: &str) -> Result<()> {
    let c = cname(name)?;
    // SAFETY: as in `open_in`.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
        return Err(Error::last_os_error());
    }
    Ok(())
}

/// Move `name` of `dir` to the path `to` (same filesystem) by rename.
pub fn rename_out(dir: &File, name: &str, to: &Path) -> Result<()> {
    let c = cname(name)?;
    let t =
        CString::new(to.as_os_str().as_bytes()).map_err(|_| Error::new(ErrorKind::InvalidInput, "NUL in a path"))?;
    // SAFETY: as in `open_in`; AT_FDCWD resolves `to` as a path.
    if unsafe { libc::renameat(dir.as_raw_fd(), c.as_ptr(), libc::AT_FDCWD, t.as_ptr()) } != 0 {
        return Err(Error::last_os_error());
    }
    Ok(())
}

/// The folder `name` inside `dir`, made (mode 0755 less the umask) when
/// absent, then opened as [`open_in`] does: never through a link.
pub fn make_in(dir: &File, name: &str) -> Result<File> {
    let c = cname(name)?;
    // SAFETY: as in `open_in`.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
        let e = Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    open_in(dir, name)
}

/// The regular file `name` of `dir` opened for reading: never through a link
/// (ELOOP), never blocking on a FIFO, refused (InvalidData) when the opened
/// file is not a regular file.
pub fn open_file_in(dir: &File, name: &str) -> Result<File> {
    let c = cname(name)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: as in `open_in`.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: as in `open_in`.
    let f = unsafe { File::from_raw_fd(fd) };
    if !f.metadata()?.is_file() {
        return Err(Error::new(ErrorKind::InvalidData, "not a regular file"));
    }
    Ok(f)
}

/// A new file in `dir` named `<prefix><random>`, created (O_EXCL, never
/// through a link) for writing with mode `mode` (set on the descriptor, so
/// the umask does not narrow it); returns it and its name.
pub fn create_temp_in(dir: &File, prefix: &str, mode: u32) -> Result<(File, String)> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    for _ in 0..64 {
        let name = format!("{prefix}{}", random_suffix());
        let c = cname(&name)?;
        // SAFETY: as in `open_in`; the mode is passed as the variadic argument open(2) reads with O_CREAT.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags, 0o600 as libc::c_uint) };
        if fd < 0 {
            let e = Error::last_os_error();
            if e.raw_os_error() == Some(libc::EEXIST) {
                continue;
            }
            return Err(e);
        }
        // SAFETY: as in `open_in`.
        let f = unsafe { File::from_raw_fd(fd) };
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        return Ok((f, name));
    }
    Err(Error::new(ErrorKind::AlreadyExists, "no free temporary name after 64 tries"))
}

/// 16 hex digits that differ between calls and processes.
fn random_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mix = nanos ^ (u64::from(std::process::id()) << 32) ^ COUNT.fetch_add(1, Ordering::Relaxed).rotate_left(17);
    format!("{:016x}", mix.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Rename `from` to `to`, both names in `dir`; with `replace` false an existing
/// `to` is never replaced (EEXIST): `renameat2(RENAME_NOREPLACE)`, or where
/// the filesystem lacks it a hard link then the removal of `from`.
pub fn rename_in(dir: &File, from: &str, to: &str, replace: bool) -> Result<()> {
    let (f, t) = (cname(from)?, cname(to)?);
    let fd = dir.as_raw_fd();
    if replace {
        // SAFETY: as in `open_in`.
        if unsafe { libc::renameat(fd, f.as_ptr(), fd, t.as_ptr()) } != 0 {
            return Err(Error::last_os_error());
        }
        return Ok(());
    }
    // SAFETY: as in `open_in`.
    if unsafe { libc::renameat2(fd, f.as_ptr(), fd, t.as_ptr(), libc::RENAME_NOREPLACE) } == 0 {
        return Ok(());
    }
    let e = Error::last_os_error();
    if ![Some(libc::EINVAL), Some(libc::ENOSYS)].contains(&e.raw_os_error()) {
        return Err(e);
    }
    // SAFETY: as in `open_in`; flags 0: a link named `from` is linked itself, never followed.
    if unsafe { libc::linkat(fd, f.as_ptr(), fd, t.as_ptr(), 0) } != 0 {
        return Err(Error::last_os_error());
    }
    unlink_in(dir, from)
}

/// What `name` of `dir` is (not following a link).
pub fn stat_in(dir: &File, name: &str) -> Result<libc::stat> {
    let c = cname(name)?;
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as in `open_in`; `st` is a valid place for fstatat to write.
    if unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(Error::last_os_error());
    }
    Ok(st)
}

/// Whether a `stat` is of a regular file.
pub fn is_file(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// The names in the folder `dir` (opened by [`open`] or [`open_in`]), read
/// through its descriptor; names that are not UTF-8 are left out (this cache
/// writes none).
pub fn names(dir: &File) -> Result<Vec<String>> {
    // A second descriptor: reading a folder moves its position.
    let again = open_in_self(dir)?;
    let fd = std::os::fd::IntoRawFd::into_raw_fd(again);
    // SAFETY: `fd` is ours; fdopendir takes it over (closedir closes it).
    let d = unsafe { libc::fdopendir(fd) };
    if d.is_null() {
        let e = Error::last_os_error();
        // SAFETY: fdopendir failed, so `fd` is still ours to close.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    let mut out = Vec::new();
    loop {
        // SAFETY: `d` is an open DIR*; readdir returns null at the end.
        let ent = unsafe { libc::readdir(d) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated within the entry readdir returned.
        let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) };
        if let Ok(s) = name.to_str() {
            if s != "." && s != ".." {
                out.push(s.to_string());
            }
        }
    }
    // SAFETY: `d` is open and closed once.
    unsafe { libc::closedir(d) };
    out.sort();
    Ok(out)
}

/// `dir` opened again (`.` relative to it).
fn open_in_self(dir: &File) -> Result<File> {
    // SAFETY: as in `open_in`, with the literal ".".
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c".".as_ptr(), DIR_FLAGS) };
    if fd < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: as in `open_in`.
    Ok(unsafe { File::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_in_place_of_a_folder_is_refused_and_removals_stay_inside() {
        let t = tempfile::tempdir().unwrap();
        let (inside, outside) = (t.path().join("inside"), t.path().join("outside"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("victim"), b"keep").unwrap();
        std::os::unix::fs::symlink(&outside, inside.join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.join("victim"), inside.join("victim")).unwrap();
        // O_NOFOLLOW with O_DIRECTORY: Linux says ENOTDIR for a link (ELOOP without O_DIRECTORY).
        let refused = |e: Error| [Some(libc::ELOOP), Some(libc::ENOTDIR)].contains(&e.raw_os_error());
        assert!(refused(open(&inside.join("sub")).unwrap_err()));
        let d = open(&inside).unwrap();
        assert!(refused(open_in(&d, "sub").unwrap_err()));
        assert_eq!(names(&d).unwrap(), ["sub", "victim"]);
        assert!(!is_file(&stat_in(&d, "victim").unwrap()), "a link is not a file");
        unlink_in(&d, "victim").unwrap();
        assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep", "the link went, not its target");
        for bad in ["", ".", "..", "a/b", "../outside/victim"] {
            assert!(unlink_in(&d, bad).is_err(), "{bad}");
        }
        assert!(outside.join("victim").exists());
    }
}
