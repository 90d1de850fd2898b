//! The one reader of wheel files: every command that opens a wheel (probe,
//! diff, verify, the cache's fetch and push, the build's stamp) asks here. A
//! wheel is opened through `input` (a regular file under the wheel cap, never
//! a FIFO or a device, never blocking), its zip directory is read, and its
//! layout is checked before any member is inflated (`check_layout`: member
//! count, names, overlapping data, declared sizes, per-member and whole-file
//! inflate ratios). Members are read with a cap each. Must not judge what a
//! wheel holds (that is `probe`).
use forge_os::fs::File;
use forge_os::fs::FileExt;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::provenance::{self, Provenance};
use forge_os::error::Failure;

/// Bounds on what a wheel may make us read (a hostile wheel is bounded work).
pub mod limits {
    /// Members at most, counted from the central directory.
    pub const MEMBERS: usize = 50_000;
    /// Uncompressed bytes of all members together.
    pub const TOTAL: u64 = 16 << 30;
    /// Uncompressed bytes of one member (streamed and hashed).
    pub const MEMBER: u64 = 4 << 30;
    /// Uncompressed bytes of a member kept in memory to be parsed (an
    /// extension module; METADATA, RECORD and provenance get [`DOC`]).
    pub const PARSED: u64 = 768 << 20;
    pub const DOC: u64 = 16 << 20;
    /// The provenance document.
    pub const PROVENANCE: u64 = 1 << 20;
    /// Uncompressed/compressed ratio above which a member larger than
    /// [`RATIO_FLOOR`] is refused (deflate's own maximum is about 1032), and
    /// above which the whole wheel (all members against the file's size) is
    /// refused once it inflates past [`RATIO_FLOOR`]: many members each just
    /// under the floor are one bomb.
    pub const RATIO: u64 = 200;
    pub const RATIO_FLOOR: u64 = 16 << 20;
    /// Longest member name (bytes).
    pub const NAME: usize = 1024;
}

/// An open wheel: a regular file, its zip directory read, its layout checked.
pub struct Wheel {
    path: PathBuf,
    file: File,
    size: u64,
    zip: zip::ZipArchive<BufReader<File>>,
}

/// Open `path` as a wheel. A missing file, a special file, a file that is not
/// a zip or whose layout is unbounded work is bad input (exit 2, named).
pub fn open(path: &Path) -> Result<Wheel> {
    let (file, size) = forge_os::fs::named::open(path, "wheel", forge_os::input::cap::WHEEL)?;
    opened(file, size, path)
}

/// Open the wheel `rel` of `tree` (a tree the tool does not own: an image's
/// `/wheels/`): a final link is refused, every other check as [`open`].
pub fn open_in(tree: &forge_os::fs::Tree, rel: &Path) -> Result<Wheel> {
    let (file, size) = tree.open_file_nofollow(rel, forge_os::input::cap::WHEEL)?;
    opened(file, size, &tree.join(rel))
}

/// A wheel already opened (through a `Tree`: a regular file of `size` bytes
/// under the wheel cap) as [`open`] reads it; `path` names it in messages.
pub fn opened(file: File, size: u64, path: &Path) -> Result<Wheel> {
    let reader = file.try_clone().map_err(|e| Failure::usage(format!("cannot read wheel {}: {e}", path.display())))?;
    let mut zip = zip::ZipArchive::new(BufReader::new(reader)).map_err(|e| {
        Failure::usage(format!("{} is not a readable wheel (zip): {e}", path.display()))
            .hint("a truncated download or a file that is not a wheel; fetch or build it again")
    })?;
    check_layout(&mut zip, path, size)?;
    Ok(Wheel { path: path.to_path_buf(), file, size, zip })
}

impl Wheel {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the file in bytes (as opened).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The zip archive (layout already checked).
    pub fn archive(&mut self) -> &mut zip::ZipArchive<BufReader<File>> {
        &mut self.zip
    }

    /// sha256 (hex) and size of the file, read from the opened file (never
    /// the path again, so what is hashed is what was checked).
    pub fn sha256(&self) -> Result<(String, u64)> {
        let mut at = At { file: &self.file, at: 0 };
        let cap = forge_os::input::cap::WHEEL;
        match forge_os::input::sha256_stream(&mut (&mut at).take(cap), cap, |_| Ok(())) {
            Ok((digest, n)) => Ok((hex::encode(digest), n)),
            Err(forge_os::input::StreamError::Read(e)) => {
                Err(Failure::usage(format!("cannot read wheel {}: {e}", self.path.display())).into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The `<name>.dist-info` folder.
    pub fn dist_info(&self) -> Result<String> {
        dist_info_dir(&self.zip).map_err(|e| Failure::usage(format!("{}: {e:#}", self.path.display())).into())
    }

    /// The bytes of member `name`, at most `cap` of them (`None`: no such member).
    pub fn member(&mut self, name: &str, cap: u64) -> Result<Option<Vec<u8>>> {
        let path = self.path.display().to_string();
        let Ok(m) = self.zip.by_name(name) else { return Ok(None) };
        let too_big = || Failure::usage(format!("{path}: member {name} is larger than {cap} bytes"));
        if m.size() > cap {
            return Err(too_big().into());
        }
        let mut buf = Vec::with_capacity(m.size() as usize);
        m.take(cap + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Failure::usage(format!("{path}: member {name} cannot be read: {e}")))?;
        if buf.len() as u64 > cap {
            return Err(too_big().into());
        }
        Ok(Some(buf))
    }

    /// The names of the members, in the archive's order.
    pub fn names(&self) -> Vec<String> {
        self.zip.file_names().map(String::from).collect()
    }

    /// Whether member `name` begins with `magic` (reads at most that many bytes).
    pub fn starts_with(&mut self, name: &str, magic: &[u8]) -> Result<bool> {
        let Ok(m) = self.zip.by_name(name) else { return Ok(false) };
        let mut head = Vec::with_capacity(magic.len());
        m.take(magic.len() as u64)
            .read_to_end(&mut head)
            .map_err(|e| Failure::usage(format!("{}: member {name} cannot be read: {e}", self.path.display())))?;
        Ok(head == magic)
    }

    /// The provenance document's bytes (`.dist-info/deepep-forge-provenance.json`).
    pub fn provenance_bytes(&mut self) -> Result<Vec<u8>> {
        let di = self.dist_info()?;
        let name = format!("{di}/{}", provenance::FILE_NAME);
        self.member(&name, limits::PROVENANCE)?.ok_or_else(|| {
            Failure::usage(format!(
                "{}: has no {name} (it was not built by deepep-forge build-wheel)",
                self.path.display()
            ))
            .into()
        })
    }

    /// The provenance document and the sha256 (hex) of its bytes.
    pub fn provenance(&mut self) -> Result<(Provenance, String)> {
        let bytes = self.provenance_bytes()?;
        let p = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::usage(format!("{}: the provenance document is unreadable: {e}", self.path.display()))
        })?;
        Ok((p, forge_os::input::sha256_hex(&bytes)))
    }
}

/// The `<name>.dist-info` folder of an open wheel.
pub fn dist_info_dir<R: Read + std::io::Seek>(zip: &zip::ZipArchive<R>) -> Result<String> {
    let mut dirs: Vec<&str> = zip
        .file_names()
        .filter_map(|n| n.strip_suffix("/RECORD"))
        .filter(|d| d.ends_with(".dist-info") && !d.contains('/'))
        .collect();
    dirs.sort();
    dirs.dedup();
    match dirs.as_slice() {
        [one] => Ok(one.to_string()),
        [] => anyhow::bail!("no <name>.dist-info/RECORD in the wheel"),
        many => anyhow::bail!("several .dist-info folders in the wheel: {}", many.join(", ")),
    }
}

/// The provenance stamped into the wheel at `path`.
pub fn provenance(path: &Path) -> Result<Provenance> {
    Ok(open(path)?.provenance()?.0)
}

/// Reads an opened file from `at` on, by offset (never moving the file's
/// cursor, which the zip reader's clone shares).
struct At<'a> {
    file: &'a File,
    at: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Why a member name cannot be a wheel member: absolute, a `..` step, a
/// backslash or NUL, empty steps, too long (pip refuses such wheels; an
/// installer that does not would write outside site-packages).
pub fn bad_member_name(name: &str) -> Option<&'static str> {
    if name.len() > limits::NAME {
        Some("a name longer than 1024 bytes")
    } else if name.starts_with('/') {
        Some("an absolute path")
    } else if name.contains('\\') {
        Some("a backslash (a Windows path)")
    } else if name.contains('\0') || name.chars().any(char::is_control) {
        Some("a control character")
    } else if name.split('/').any(|s| s == "..") {
        Some("a `..` step out of the wheel")
    } else if name.split('/').rev().skip(1).any(|s| s.is_empty() || s == ".") {
        Some("an empty or `.` step")
    } else {
        None
    }
}

/// Refuse a zip whose layout alone makes reading it unbounded or unsafe: too
/// many members, member names that leave the wheel, members whose data
/// overlap (a "zip bomb" reuses one stream for every entry), declared sizes
/// past the limits, a whole file that inflates far past its size.
pub fn check_layout<R: Read + Seek>(zip: &mut zip::ZipArchive<R>, path: &Path, file_size: u64) -> Result<()> {
    let bad = |why: String| -> anyhow::Error {
        Failure::usage(format!("{} is not a wheel this tool reads: {why}", path.display()))
            .hint("a wheel built by pip/setuptools/deepep-forge never looks like this; do not install it")
            .into()
    };
    if zip.len() > limits::MEMBERS {
        return Err(bad(format!("{} members, more than {}", zip.len(), limits::MEMBERS)));
    }
    let mut spans = Vec::with_capacity(zip.len());
    let mut total: u64 = 0;
    for i in 0..zip.len() {
        let m = zip.by_index_raw(i).map_err(|e| bad(format!("member #{i} cannot be read: {e}")))?;
        let (start, end) = (m.header_start(), m.data_start().saturating_add(m.compressed_size()));
        total = total.saturating_add(m.size());
        let name = forge_os::input::excerpt(m.name(), 80);
        if let Some(why) = bad_member_name(m.name()) {
            return Err(bad(format!("member {name} has {why}")));
        }
        if m.size() > limits::MEMBER {
            return Err(bad(format!("member {name} inflates to {} bytes, more than {}", m.size(), limits::MEMBER)));
        }
        if m.size() > limits::RATIO_FLOOR && m.size() / m.compressed_size().max(1) > limits::RATIO {
            return Err(bad(format!(
                "member {name} inflates {} bytes to {} (more than {}:1)",
                m.compressed_size(),
                m.size(),
                limits::RATIO
            )));
        }
        spans.push((start, end, name));
    }
    if total > limits::TOTAL {
        return Err(bad(format!("members inflate to {total} bytes together, more than {}", limits::TOTAL)));
    }
    if total > limits::RATIO_FLOOR && total / file_size.max(1) > limits::RATIO {
        return Err(bad(format!(
            "its members inflate to {total} bytes together from a file of {file_size} (more than {}:1)",
            limits::RATIO
        )));
    }
    spans.sort();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(bad(format!("members {} and {} overlap in the file", w[0].2, w[1].2)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_that_leave_the_wheel_are_named() {
        for (name, why) in [
            ("../../etc/x.so", "`..`"),
            ("deep_ep/../../x", "`..`"),
            ("/tmp/x.so", "absolute"),
            ("a\\b.so", "backslash"),
            ("a//b", "empty"),
            ("a/\n/b", "control"),
        ] {
            assert!(bad_member_name(name).is_some_and(|w| w.contains(why)), "{name}");
        }
        for ok in ["deep_ep/__init__.py", "deep_ep-1.2.1.dist-info/RECORD", "deep_ep/", "a..b/c"] {
            assert_eq!(bad_member_name(ok), None, "{ok}");
        }
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w.whl");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = open(&p).err().unwrap();
        assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
        assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Usage);
    }
}
