//! Any bytes as an extension module: facts or a one-line reason, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(facts) = deepep_forge::probe::elf::parse(data) {
        let _ = facts.sms();
        for s in facts.defined.iter().chain(&facts.undefined) {
            let _ = deepep_forge::probe::elf::demangle_prefix(s);
        }
    }
});
