//! Any bytes as a NeMo-RL recipe and its parents: a topology or a usage
//! error, never a panic, never a read outside the recipe's folder. The input
//! is split on `\n%%\n` into `r.yaml`, `p1.yaml`, `p2.yaml`, ... so `defaults:`
//! chains, cycles and fan-outs between them are explored.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let dir = tempfile::tempdir().unwrap();
    for (i, part) in text.split("\n%%\n").take(8).enumerate() {
        let name = if i == 0 { "r.yaml".to_string() } else { format!("p{i}.yaml") };
        std::fs::write(dir.path().join(name), part).unwrap();
    }
    let _ = forge_model::topology::recipe::read_within(&dir.path().join("r.yaml"), Some(dir.path()));
});
