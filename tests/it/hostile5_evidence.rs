//! Hostile input, fifth pass, class 5: the evidence gate never fails open. A
//! wheel locked from the PEP 825 variant index (`<base>/variants/simple`)
//! does not say which variant it is; the gate then applies every
//! `[[evidence.rule]]` that could apply to it (the strictest wins) and says
//! why, where before it applied only `require` and let a statement from any
//! GPU count. Real `evidence add`, real `lock check`.

use crate::evidence::{
    consumer_at, gate_with, one_statement, pins_with, pins_with_b200_kernel_rule, sha256_of, PINS, WHEEL,
};
use crate::support::*;

const VARIANT_INDEX: &str = "http://127.0.0.1:8000/variants/simple";

#[test]
fn a_wheel_from_the_variant_index_meets_every_rule_that_could_apply() {
    let d = tempfile::tempdir().unwrap();
    let (wheel, _, public, _) = one_statement(d.path()); // a reported training run on h100
    consumer_at(d.path(), &sha256_of(&wheel), VARIANT_INDEX);
    // h100 builds for sm_100 too, so a rule may ask for b200 statements.
    let at = pins_with_b200_kernel_rule(d.path());
    let o = gate_with(d.path(), "p.toml", &[&public], &[]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{}", stderr(&o));
    assert!(
        out.contains(&format!("error[evidence-missing]: the locked deep-ep wheel {WHEEL} (variant (unknown")),
        "{out}"
    );
    assert!(out.contains(&format!("required by p.toml:{} [[evidence.rule]] (for h100;", at + 3)), "{out}");
    assert!(out.contains("does not tell which variant of the variant index it locked"), "{out}");
    assert!(out.contains("on b200 (sm_100)"), "{out}");

    // A rule of a variant on another architecture cannot apply to an x86_64 wheel: `require` alone.
    pins_with(
        d.path(),
        "p.toml",
        PINS,
        "\n[evidence]\nrequire = \"kernel\"\n\n[[evidence.rule]]\nvariants = [\"gb200-nvl72\"]\nkind = \"training\"\ngpu = \"gb200\"\n",
    );
    let o = gate_with(d.path(), "p.toml", &[&public], &[]);
    assert!(!stdout(&o).contains("evidence-missing"), "{}", stdout(&o));

    // Met by a statement that covers the rule: the training run on h100 meets a rule for h100 of kind kernel.
    pins_with(
        d.path(),
        "p.toml",
        PINS,
        "\n[evidence]\nrequire = \"static\"\n\n[[evidence.rule]]\nvariants = [\"h100\"]\nkind = \"kernel\"\ngpu = \"h100\"\n",
    );
    let o = gate_with(d.path(), "p.toml", &[&public], &[]);
    assert!(!stdout(&o).contains("evidence-missing"), "{}", stdout(&o));
}
