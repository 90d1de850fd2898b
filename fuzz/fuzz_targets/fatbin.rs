//! Any bytes as a fatbin section: entries or problems, never a panic, and
//! every entry read lies inside the input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = forge_probe::probe::fatbin::parse(data);
    let total: u64 = f.entries.iter().map(|e| e.size).sum();
    assert!(total <= data.len() as u64);
    assert!(f.containers > 0 || !f.problems.is_empty());
});
