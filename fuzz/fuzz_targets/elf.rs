//! Any bytes as an extension module: facts or a one-line reason, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(facts) = forge_probe::probe::elf::parse(data) {
        let _ = facts.sms();
        for s in facts.defined.iter().chain(&facts.undefined) {
            let _ = forge_probe::probe::elf::demangle_prefix(s);
        }
    }
});
