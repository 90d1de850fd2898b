//! The adversarial suite: hostile pins.toml, consumer files, Dockerfiles,
//! recipes and wheels, each run through the real binary. Every case asserts
//! the exit code, a message fragment, no panic, and that nothing on disk
//! changed or appeared (harness: tests/support/hostile.rs).
mod support;
use support::hostile::{run_all, Case};

const PINS: &str = include_str!("../pins.toml");

fn pins_cases() -> Vec<Case> {
    vec![
        Case::new("pins: not TOML").file("pins.toml", "schema = [").args(&["pins", "check"]).says("pins.toml:1:"),
        Case::new("pins: directory")
            .setup(|d| std::fs::create_dir(d.join("pins.toml")).unwrap())
            .args(&["pins", "check"])
            .says("pins.toml"),
        Case::new("pins: shipped file is fine").file("pins.toml", PINS).args(&["pins", "check"]).exit(0).says("ok"),
    ]
}

#[test]
fn hostile_inputs_are_refused_cleanly() {
    let mut cases = Vec::new();
    cases.extend(pins_cases());
    run_all(cases);
}
