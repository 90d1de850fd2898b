//! Any text as a Dockerfile checked against the shipped pins: findings,
//! never a panic, and every finding's line inside the file.
#![no_main]
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use forge_model::pins::{Arch, Pins};
use libfuzzer_sys::fuzz_target;

fn pins() -> &'static Pins {
    static P: OnceLock<Pins> = OnceLock::new();
    P.get_or_init(|| Pins::parse(include_str!("../../pins.toml"), Path::new("pins.toml")).unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let p = pins();
    let revs: BTreeMap<Arch, String> = p.pins.iter().map(|(a, pin)| (*a, pin.rev.clone())).collect();
    let lines = text.lines().count().max(1);
    for f in forge_lock::lock::dockerfile::check_text(text, Path::new("Dockerfile"), Some(p), &revs) {
        let line = f.line.unwrap_or(0);
        assert!(line <= lines + 1, "finding at line {line} of {lines}");
    }
});
