//! A verdict as Markdown, for the evidence a pull request carries (`probe
//! --format markdown`, a fleet's verdict above all): a heading with the
//! outcome, then one table row per check. Every value is escaped by
//! `forge_store::evidence::show::md`, so no evidence, fix or node name can
//! add markup, a mention or a line. Must not decide what is shown.
use forge_model::verdict::{Status, Verdict};
use forge_store::evidence::show::md;

/// `v` as a Markdown section.
pub fn render(v: &Verdict) -> String {
    let count = |s: Status| v.checks.iter().filter(|c| c.status == s).count();
    let outcome = if v.failed() { "MISMATCH" } else { "MATCH" };
    let mut out = format!(
        "### deepep-forge probe: {outcome}\n\n{}\n\n{} passed, {} warnings, {} failed\n\n| status | rule | evidence | fix |\n|---|---|---|---|\n",
        md(&v.subject),
        count(Status::Pass),
        count(Status::Warn),
        count(Status::Fail)
    );
    for c in &v.checks {
        let status = match c.status {
            Status::Pass => "pass",
            Status::Warn => "**warn**",
            Status::Fail => "**FAIL**",
            Status::Skip => "skip",
        };
        let fix = c.fix.as_deref().map(md).unwrap_or_default();
        out.push_str(&format!("| {status} | {} | {} | {fix} |\n", md(&c.rule), md(&c.evidence)));
    }
    out
}
