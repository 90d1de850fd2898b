//! What an installed torch says about itself, read from its files (never
//! `import torch`, which takes seconds): `torch/version.py`'s `__version__` and
//! `cuda`, and the C++ ABI its extensions must compile with. One reading for the
//! build's environment (`builder`) and the probed one (`probe --python`), so the
//! two can never disagree on the same files. Files are read bounded through
//! `input`. Must not judge.
use std::path::{Path, PathBuf};

use forge_os::input::cap;

/// The largest shared library scanned for the ABI (libc10.so is about 1.5 MB; a larger
/// one is not read, so a hostile environment cannot make the probe read gigabytes).
const MAX_LIB: u64 = 64 << 20;

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
    let text = forge_os::fs::named::read_text(&torch.join("version.py"), "torch/version.py", cap::TEXT).ok()?;
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

/// torch's C++ ABI, the file that says so and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abi {
    /// `_GLIBCXX_USE_CXX11_ABI=1`.
    pub cxx11: bool,
    pub file: PathBuf,
    /// What in the file says so: `_GLIBCXX_USE_CXX11_ABI=1`, `12 exports use std::__cxx11`.
    pub why: String,
}

/// `-D_GLIBCXX_USE_CXX11_ABI=N` in torch's CMake config (`TorchConfig.cmake`, older
/// torch `Caffe2Config.cmake`: what extensions are told to compile with), else
/// `lib/libc10.so`'s mangled names: std::string in the C++11 ABI mangles as
/// `St7__cxx11`, in the old one as `Ss`; a library with neither says nothing.
pub fn abi(torch: &Path) -> Option<Abi> {
    const FLAG: &str = "_GLIBCXX_USE_CXX11_ABI=";
    for f in ["share/cmake/Torch/TorchConfig.cmake", "share/cmake/Caffe2/Caffe2Config.cmake"] {
        let file = torch.join(f);
        let Ok(Some(t)) = forge_os::fs::named::read_text_opt(&file, "torch's CMake config", cap::TEXT) else {
            continue;
        };
        if let Some(v @ ('0' | '1')) = t.split(FLAG).nth(1).and_then(|r| r.chars().next()) {
            return Some(Abi { cxx11: v == '1', file, why: format!("{FLAG}{v}") });
        }
    }
    let lib = torch.join("lib/libc10.so");
    let bytes = forge_os::fs::named::read_bytes_opt(&lib, "torch library", MAX_LIB).ok().flatten()?;
    // The NUL-terminated names of the file's string tables that are mangled C++.
    let names = bytes.split(|b| *b == 0).filter(|n| n.starts_with(b"_Z"));
    let has = |n: &[u8], needle: &[u8]| n.windows(needle.len()).any(|w| w == needle);
    let (mut cxx11, mut old) = (0, 0);
    for n in names {
        if has(n, b"St7__cxx11") {
            cxx11 += 1;
        } else if has(n, b"Ss") {
            old += 1;
        }
    }
    match (cxx11, old) {
        (0, 0) => None,
        (n, _) if n > 0 => Some(Abi { cxx11: true, file: lib, why: format!("{n} exports use std::__cxx11") }),
        (_, n) => {
            Some(Abi { cxx11: false, file: lib, why: format!("{n} exports use the old std::string (no std::__cxx11)") })
        }
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
        std::fs::write(d.path().join("lib/libc10.so"), b"\x7fELF\0_ZNKSt7__cxx1112basic_string\0").unwrap();
        assert_eq!(abi(d.path()).map(|a| a.cxx11), Some(true));
        std::fs::write(d.path().join("lib/libc10.so"), b"\x7fELF\0_Z11c10_versionRKSs\0").unwrap();
        assert_eq!(
            abi(d.path()).map(|a| (a.cxx11, a.why)),
            Some((false, "1 exports use the old std::string (no std::__cxx11)".into()))
        );
        std::fs::write(d.path().join("lib/libc10.so"), b"\x7fELF.... no strings").unwrap();
        assert_eq!(abi(d.path()), None, "neither ABI's names: no answer");
        std::fs::create_dir_all(d.path().join("share/cmake/Torch")).unwrap();
        std::fs::write(
            d.path().join("share/cmake/Torch/TorchConfig.cmake"),
            "set(TORCH_CXX_FLAGS \"-D_GLIBCXX_USE_CXX11_ABI=0\")\n",
        )
        .unwrap();
        let a = abi(d.path()).unwrap();
        assert_eq!(
            (a.cxx11, a.file, a.why.as_str()),
            (false, d.path().join("share/cmake/Torch/TorchConfig.cmake"), "_GLIBCXX_USE_CXX11_ABI=0")
        );
    }
}
