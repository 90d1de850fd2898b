//! What an installed torch says about itself, read from its files (never
//! `import torch`, which takes seconds): `torch/version.py`'s `__version__` and
//! `cuda`, and the C++ ABI its extensions must compile with. One reading for the
//! build's environment (`builder`) and the probed one (`probe --python`), so the
//! two can never disagree on the same files. Files are read bounded through
//! `input`. Must not judge.
use std::path::{Path, PathBuf};

use crate::input::{self, cap};

/// The largest shared library scanned for the ABI (libc10.so is about 1.5 MB).
const MAX_LIB: u64 = 256 << 20;

/// torch's version file, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// `__version__` with its local label (`2.11.0+cu130`): the dist-info may drop the label.
    pub version: String,
    /// `cuda` (`13.0`); `None` for a CPU build.
    pub cuda: Option<String>,
}

/// `version.py` in the torch package folder `torch`.
pub fn version(torch: &Path) -> Option<Version> {
    let text = input::read_text(&torch.join("version.py"), "torch/version.py", cap::TEXT).ok()?;
    let value = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            let k = k.split(':').next()?.trim();
            let v = v.trim().trim_matches(|c| c == '\'' || c == '"');
            (k == key && !v.is_empty() && v != "None" && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_graphic()))
                .then(|| v.to_string())
        })
    };
    Some(Version { version: value("__version__")?, cuda: value("cuda") })
}

/// torch's C++ ABI (`true`: `_GLIBCXX_USE_CXX11_ABI=1`) and the file that says so:
/// `-D_GLIBCXX_USE_CXX11_ABI=N` in its CMake config (`TorchConfig.cmake`, older
/// torch `Caffe2Config.cmake`), else `lib/libc10.so`'s exported names: std::string
/// in the C++11 ABI mangles as `St7__cxx11`, in the old one as `Ss` (`_ZNSs`,
/// `_ZNKSs`); a library with neither says nothing.
pub fn abi(torch: &Path) -> Option<(bool, PathBuf)> {
    const FLAG: &str = "_GLIBCXX_USE_CXX11_ABI=";
    for f in ["share/cmake/Torch/TorchConfig.cmake", "share/cmake/Caffe2/Caffe2Config.cmake"] {
        let file = torch.join(f);
        let Ok(Some(t)) = input::read_text_opt(&file, "torch's CMake config", cap::TEXT) else { continue };
        match t.split(FLAG).nth(1).and_then(|r| r.chars().next()) {
            Some('1') => return Some((true, file)),
            Some('0') => return Some((false, file)),
            _ => {}
        }
    }
    let lib = torch.join("lib/libc10.so");
    let bytes = input::read_bytes_opt(&lib, "torch library", MAX_LIB).ok().flatten()?;
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if has(b"St7__cxx11") {
        Some((true, lib))
    } else if has(b"_ZNSs") || has(b"_ZNKSs") {
        Some((false, lib))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_with_its_local_label_and_cuda() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("version.py"), "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")
            .unwrap();
        let v = version(d.path()).unwrap();
        assert_eq!((v.version.as_str(), v.cuda.as_deref()), ("2.11.0+cu130", Some("13.0")));
        std::fs::write(d.path().join("version.py"), "__version__: str = \"2.10.0\"\ncuda = None\n").unwrap();
        assert_eq!(version(d.path()).map(|v| (v.version, v.cuda)), Some(("2.10.0".into(), None)));
        std::fs::write(d.path().join("version.py"), "git_version = 'x'\n").unwrap();
        assert_eq!(version(d.path()), None);
        assert_eq!(version(&d.path().join("missing")), None);
    }

    #[test]
    fn abi_from_cmake_then_library_names() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("lib")).unwrap();
        std::fs::write(d.path().join("lib/libc10.so"), b"\x7fELF...._ZNKSt7__cxx1112basic_string...").unwrap();
        assert_eq!(abi(d.path()).map(|(a, _)| a), Some(true));
        std::fs::write(d.path().join("lib/libc10.so"), b"\x7fELF...._ZNKSs4sizeEv...").unwrap();
        assert_eq!(abi(d.path()).map(|(a, _)| a), Some(false));
        std::fs::write(d.path().join("lib/libc10.so"), b"\x7fELF.... no strings").unwrap();
        assert_eq!(abi(d.path()), None, "neither ABI's names: no answer");
        std::fs::create_dir_all(d.path().join("share/cmake/Torch")).unwrap();
        std::fs::write(
            d.path().join("share/cmake/Torch/TorchConfig.cmake"),
            "set(TORCH_CXX_FLAGS \"-D_GLIBCXX_USE_CXX11_ABI=0\")\n",
        )
        .unwrap();
        assert_eq!(abi(d.path()), Some((false, d.path().join("share/cmake/Torch/TorchConfig.cmake"))));
    }
}
