//! Small but real wheels with real distribution names (PEP 427: WHEEL,
//! METADATA with `Requires-Dist`, RECORD with sha256), for resolving and
//! installing with real uv and pip: a stand-in `nvidia-nccl-cu13` whose
//! `nvidia/nccl` package holds NCCL's real headers and a `libnccl.so.2`
//! answering `ncclGetVersion`, a stand-in torch that pins NCCL as torch 2.11 does.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use sha2::{Digest, Sha256};

/// Write `<dir>/<name>-<version>-py3-none-any.whl` with `files` (path, bytes)
/// and `requires` as `Requires-Dist`; returns its path.
pub fn tiny_wheel(dir: &Path, name: &str, version: &str, requires: &[&str], files: &[(String, Vec<u8>)]) -> PathBuf {
    let stem = format!("{}-{version}", name.replace('-', "_"));
    let di = format!("{stem}.dist-info");
    let mut metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
    for r in requires {
        metadata.push_str(&format!("Requires-Dist: {r}\n"));
    }
    let mut all: Vec<(String, Vec<u8>)> = files.to_vec();
    all.push((format!("{di}/METADATA"), metadata.into_bytes()));
    all.push((
        format!("{di}/WHEEL"),
        b"Wheel-Version: 1.0\nGenerator: deepep-forge-tests\nRoot-Is-Purelib: false\nTag: py3-none-any\n".to_vec(),
    ));
    let mut record = String::new();
    for (p, data) in &all {
        let h = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(data));
        record.push_str(&format!("{p},sha256={h},{}\n", data.len()));
    }
    record.push_str(&format!("{di}/RECORD,,\n"));
    all.push((format!("{di}/RECORD"), record.into_bytes()));
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{stem}-py3-none-any.whl"));
    let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    for (p, data) in &all {
        let mode = if p.contains(".so") { 0o755 } else { 0o644 };
        z.start_file(p.as_str(), zip::write::SimpleFileOptions::default().unix_permissions(mode)).unwrap();
        z.write_all(data).unwrap();
    }
    z.finish().unwrap();
    path
}

/// A shared library named `soname` whose C source is `c`, compiled by gcc in `work`.
pub fn shared_library(work: &Path, soname: &str, c: &str) -> Vec<u8> {
    std::fs::create_dir_all(work).unwrap();
    let src = work.join(format!("{soname}.c"));
    let out = work.join(soname);
    std::fs::write(&src, c).unwrap();
    let o = Command::new("gcc")
        .args(["-shared", "-fPIC", &format!("-Wl,-soname,{soname}"), "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {}", String::from_utf8_lossy(&o.stderr));
    std::fs::read(out).unwrap()
}

/// A stand-in `nvidia-nccl-cu13` wheel of `version` into `dir`: `nvidia/nccl/include`
/// from `headers` (NCCL's real headers of that version, when given) and a
/// `nvidia/nccl/lib/libnccl.so.2` whose `ncclGetVersion` and version string say `version`.
pub fn stand_in_nccl(dir: &Path, version: &str, headers: Option<&Path>) -> PathBuf {
    let code: Vec<u32> = version.split('.').map(|p| p.parse().unwrap()).collect();
    let c = format!(
        "const char ncclVersionString[] = \"NCCL version {version}+cuda13.0\";\nint ncclGetVersion(int* v) {{ *v = {}; return 0; }}\n",
        code[0] * 10000 + code[1] * 100 + code[2]
    );
    let lib = shared_library(&dir.join(format!("nccl-{version}-src")), "libnccl.so.2", &c);
    let mut files = vec![("nvidia/nccl/lib/libnccl.so.2".to_string(), lib)];
    if let Some(h) = headers {
        for e in walkdir::WalkDir::new(h).into_iter().flatten().filter(|e| e.file_type().is_file()) {
            let rel = e.path().strip_prefix(h).unwrap().to_string_lossy().into_owned();
            files.push((format!("nvidia/nccl/include/{rel}"), std::fs::read(e.path()).unwrap()));
        }
    }
    files.sort();
    tiny_wheel(dir, "nvidia-nccl-cu13", version, &[], &files)
}
