//! Any text as a consumer's pyproject.toml and as a uv.lock: DeepEP
//! references (with lines inside the file) or a usage error, never a panic.
#![no_main]
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use pep508_rs::PackageName;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let name = PackageName::new("deep_ep".to_string()).unwrap();
    let lines = text.lines().count() + 1;
    if let Ok(py) = forge_lock::lock::pyproject::read(Path::new("pyproject.toml"), text, &name) {
        for r in &py.refs {
            assert!(r.line <= lines, "pyproject reference at line {} of {lines}", r.line);
        }
    }
    if let Ok(lock) = forge_lock::lock::uvlock::read(Path::new("uv.lock"), text, &name, Some("consumer")) {
        for r in &lock.refs {
            assert!(r.line <= lines, "uv.lock reference at line {} of {lines}", r.line);
        }
    }
});
