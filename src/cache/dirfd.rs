//! Folders of the cache opened without following a link, and removals made
//! relative to the opened folder (`unlinkat`, `renameat`): what `cache gc`
//! removes is always a name inside the folder it opened, so a link planted in
//! place of a folder, or swapped in after a check, never sends a removal
//! outside the cache. Must not decide what to remove.
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
