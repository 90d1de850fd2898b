//! The verdict table both probes print: one row per rule with pass/warn/fail,
//! the evidence and the fix. Owns rendering and the exit code of a verdict;
//! must not decide rules itself.
use serde::Serialize;

use crate::topology::{Considered, Request};
use forge_os::line::Line;

/// Version of the JSON document `probe --format json` prints.
pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    /// Not proven wrong, but not proven right either (unknown input, PTX-only...).
    Warn,
    Fail,
    /// Not applicable to this request.
    Skip,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable rule id, e.g. `ep-divisible`, `multinode-build`, `cubin-arch`.
    pub rule: Line,
    pub status: Status,
    /// What was seen, in one line (escaped when made: see `forge_os::line`).
    pub evidence: Line,
    /// What to do, usually an exact command.
    pub fix: Option<Line>,
    /// Where the request left inputs unknown: the admissible values this rule
    /// fails for (`R 1`, `EP 8 · R 4`); empty when it fails for none or nothing was unknown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fails_for: Vec<Line>,
}

impl Check {
    pub fn new(rule: &str, status: Status, evidence: impl Into<Line>) -> Self {
        Check { rule: rule.into(), status, evidence: evidence.into(), fix: None, fails_for: Vec::new() }
    }
    pub fn pass(rule: &str, evidence: impl Into<Line>) -> Self {
        Self::new(rule, Status::Pass, evidence)
    }
    pub fn warn(rule: &str, evidence: impl Into<Line>) -> Self {
        Self::new(rule, Status::Warn, evidence)
    }
    pub fn fail(rule: &str, evidence: impl Into<Line>) -> Self {
        Self::new(rule, Status::Fail, evidence)
    }
    pub fn skip(rule: &str, evidence: impl Into<Line>) -> Self {
        Self::new(rule, Status::Skip, evidence)
    }
    pub fn fix(mut self, fix: impl Into<Line>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// A whole verdict: what was judged, against what, and the rows.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub schema: u32,
    /// The wheel, environment or machine judged.
    pub subject: Line,
    pub request: Option<Request>,
    /// The inputs the request left unknown and every value the rules were judged over.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub considered: Vec<Considered>,
    pub checks: Vec<Check>,
    /// Extra facts for JSON consumers (wheel facts, discovered devices, bandwidth).
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub facts: serde_json::Value,
}

impl Verdict {
    pub fn new(subject: impl Into<Line>, request: Option<Request>) -> Self {
        Verdict {
            schema: SCHEMA,
            subject: subject.into(),
            request,
            considered: Vec::new(),
            checks: Vec::new(),
            facts: serde_json::Value::Null,
        }
    }
    pub fn push(&mut self, c: Check) {
        self.checks.push(c);
    }
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }
    /// The aligned table people read.
    /// GitHub annotations: a failed check is an error, a warning a warning,
    /// evidence and fix in the message (the same shape as `lock check`'s).
    pub fn render_github(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let level = match c.status {
                Status::Fail => forge_os::output::Level::Error,
                Status::Warn => forge_os::output::Level::Warning,
                _ => continue,
            };
            let mut message = c.evidence.to_string();
            if let Some(fix) = &c.fix {
                message.push_str(&format!("\nfix: {fix}"));
            }
            let title = format!("deepep-forge {}", c.rule);
            out.push_str(&forge_os::output::annotation(
                level,
                &forge_os::output::Annotation { title, message, ..Default::default() },
            ));
        }
        out
    }

    pub fn render_human(&self) -> String {
        let mut out = format!("verdict for {}\n", self.subject);
        if let Some(r) = &self.request {
            let show = |v: Option<u32>| v.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
            out.push_str(&format!(
                "request ({}): EP {} · nodes {} · GPUs/node {} · R {} · MNNVL {} · GPU {}\n",
                r.source,
                show(r.ep),
                show(r.nodes),
                show(r.gpus_per_node),
                show(r.ranks_per_domain),
                r.mnnvl.map(|b| if b { "yes" } else { "no" }).unwrap_or("?"),
                r.gpu.map(|g| g.to_string()).unwrap_or_else(|| "?".into()),
            ));
            for n in &r.notes {
                out.push_str(&format!("  note: {n}\n"));
            }
        }
        for c in &self.considered {
            out.push_str(&format!("  considered: {} {} ({})\n", c.input, list_values(&c.values), c.why));
        }
        let w = self.checks.iter().map(|c| c.rule.len()).max().unwrap_or(4).max(4);
        for c in &self.checks {
            let s = match c.status {
                Status::Pass => "pass",
                Status::Warn => "WARN",
                Status::Fail => "FAIL",
                Status::Skip => "skip",
            };
            out.push_str(&format!("  {s}  {:<w$}  {}\n", c.rule, c.evidence));
            if let Some(f) = &c.fix {
                out.push_str(&format!("        {:<w$}  fix: {f}\n", ""));
            }
        }
        let (p, wn, f) = self.checks.iter().fold((0, 0, 0), |(p, w, f), c| match c.status {
            Status::Pass => (p + 1, w, f),
            Status::Warn => (p, w + 1, f),
            Status::Fail => (p, w, f + 1),
            Status::Skip => (p, w, f),
        });
        out.push_str(&format!("{}: {p} passed, {wn} warnings, {f} failed\n", if f > 0 { "MISMATCH" } else { "MATCH" }));
        out
    }
}

/// A list of values as the human verdict shows it: long lists keep their ends.
pub fn list_values(v: &[Line]) -> String {
    let join = |v: &[Line]| v.iter().map(Line::as_str).collect::<Vec<_>>().join(", ");
    if v.len() <= 16 {
        join(v)
    } else {
        format!("{}, ..., {} ({} values)", join(&v[..8]), join(&v[v.len() - 4..]), v.len())
    }
}

/// What the runtime probe needs to know about the binary under test
/// (computed once by the static probe from `--wheel` or `--python`, handed to
/// `probe --run`; it lives here so that neither probe imports the other).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BinaryFacts {
    /// The wheel path or the environment's deep_ep location (a runtime row names it).
    pub subject: Line,
    /// SM numbers (90, 100) with a cubin in hybrid_ep_cpp.
    pub cubin_sms: Vec<u32>,
    /// SM numbers with PTX only.
    pub ptx_sms: Vec<u32>,
    /// Built with HYBRID_EP_MULTINODE (None: could not tell).
    pub multinode: Option<bool>,
    /// ELF machine of the extensions.
    pub machine: Option<crate::pins::Arch>,
    /// `deep_ep` version (`1.2.1+17cfb81`), as the wheel's METADATA says it.
    pub version: Option<Line>,
    /// Multinode transport seen in the binary (`doca`, `nixl`).
    pub transport: Option<crate::pins::Transport>,
}
