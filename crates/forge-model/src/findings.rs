//! Findings: what `lock check` (pyproject.toml, uv.lock, Dockerfiles) reports.
//! Owns the finding and cause types and their renderings; must not decide
//! rules or how findings group into causes (`lock::causes`).
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::pins::Arch;
use forge_os::line::{Line, Lines};
use forge_os::output::{self, Annotation, Format, Level};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Breaks a build or an install: exit 1.
    Error,
    /// Suspicious, does not fail the check.
    Warning,
    /// Information (e.g. a transitive pin an override replaces).
    Note,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable rule id, e.g. `rev-mismatch`, `stale-label`.
    pub rule: Line,
    pub severity: Severity,
    #[serde(serialize_with = "forge_os::output::path_lossy")]
    pub file: PathBuf,
    /// 1-based line, where known.
    pub line: Option<usize>,
    /// 1-based column, where known.
    pub column: Option<usize>,
    pub arch: Option<Arch>,
    pub expected: Option<Line>,
    pub found: Option<Line>,
    /// What is wrong, in one line (escaped when made: see `forge_os::line`).
    pub message: Line,
    /// What to do, usually an exact command.
    pub fix: Option<Lines>,
    /// The id of the cause this finding belongs to (see [`Cause`]); set by the grouping.
    pub cause: Option<String>,
    /// Internal: the kind of root cause the rule that made it saw (`pin-not-adopted`, ...).
    #[serde(skip)]
    pub cause_kind: Option<&'static str>,
}

/// One root cause: the findings one fix removes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// Stable within a report: the cause kind (`pin-not-adopted`, `label-split`, ...) or the rule id,
    /// with `-<arch>` or `-<n>` appended where one report holds several.
    pub id: String,
    /// The worst severity among its findings.
    pub severity: Severity,
    pub summary: Line,
    /// The one command (or edit) that removes every finding under it.
    pub fix: Option<Lines>,
    pub findings: Vec<Finding>,
}

impl Finding {
    pub fn new(rule: &str, severity: Severity, file: impl Into<PathBuf>, message: impl Into<Line>) -> Self {
        Finding {
            rule: rule.into(),
            severity,
            file: file.into(),
            line: None,
            column: None,
            arch: None,
            expected: None,
            found: None,
            message: message.into(),
            fix: None,
            cause: None,
            cause_kind: None,
        }
    }
    /// Mark the kind of root cause (see `lock::causes`).
    pub fn cause_kind(mut self, kind: &'static str) -> Self {
        self.cause_kind = Some(kind);
        self
    }
    pub fn line(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }
    /// Line and column.
    pub fn at(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }
    pub fn arch(mut self, arch: Arch) -> Self {
        self.arch = Some(arch);
        self
    }
    pub fn expected_found(mut self, expected: impl Into<Line>, found: impl Into<Line>) -> Self {
        self.expected = Some(expected.into());
        self.found = Some(found.into());
        self
    }
    pub fn fix(mut self, fix: impl Into<Lines>) -> Self {
        self.fix = Some(fix.into());
        self
    }
    /// `file:line[:column]` for a row (the file's name escaped: it is a
    /// name from the project, and may hold a line break).
    pub fn location(&self) -> Line {
        let file = Line::new(self.file.to_string_lossy());
        match (self.line, self.column) {
            (Some(l), Some(c)) => Line::new(format!("{file}:{l}:{c}")),
            (Some(l), None) => Line::new(format!("{file}:{l}")),
            _ => file,
        }
    }
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// One finding as text, each line prefixed by `indent`; its fix is left out when it equals `skip_fix`.
fn human_finding(f: &Finding, indent: &str, skip_fix: Option<&Lines>) -> String {
    let mut out = String::new();
    let arch = f.arch.map(|a| format!(" [{a}]")).unwrap_or_default();
    out.push_str(&format!(
        "{indent}{}[{}]{arch}: {}\n{indent}  --> {}\n",
        f.severity.as_str(),
        f.rule,
        f.message,
        f.location()
    ));
    if let (Some(e), Some(g)) = (&f.expected, &f.found) {
        out.push_str(&format!("{indent}  expected: {e}\n{indent}     found: {g}\n"));
    }
    if let Some(fix) = f.fix.as_ref().filter(|x| Some(*x) != skip_fix) {
        out.push_str(&format!("{indent}  fix: {}\n", fix.indented(&format!("{indent}       "))));
    }
    out
}

/// Render findings as text for people.
pub fn render_human(findings: &[Finding]) -> String {
    findings.iter().map(|f| human_finding(f, "", None)).collect()
}

/// Render causes as text: each cause, its one fix, then the findings under it.
pub fn render_human_causes(causes: &[Cause]) -> String {
    let mut out = String::new();
    for (i, c) in causes.iter().enumerate() {
        out.push_str(&format!(
            "{} {}/{} [{}]: {} ({} finding{})\n",
            match c.severity {
                Severity::Error => "CAUSE",
                Severity::Warning => "cause (warning)",
                Severity::Note => "cause (note)",
            },
            i + 1,
            causes.len(),
            c.id,
            c.summary,
            c.findings.len(),
            if c.findings.len() == 1 { "" } else { "s" }
        ));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("  fix: {}\n", fix.indented("       ")));
        }
        for f in &c.findings {
            out.push_str(&human_finding(f, "  ", c.fix.as_ref()));
        }
    }
    out
}

/// GitHub workflow commands for causes: one annotation per finding, naming its cause and the cause's fix.
/// `path` turns a finding's file into the path GitHub expects (relative to the workspace).
pub fn render_github_causes(causes: &[Cause], path: &dyn Fn(&Path) -> PathBuf) -> String {
    let mut out = String::new();
    for c in causes {
        for f in &c.findings {
            let mut msg = f.message.to_string();
            if let (Some(e), Some(g)) = (&f.expected, &f.found) {
                msg.push_str(&format!("\nexpected: {e}\nfound: {g}"));
            }
            msg.push_str(&format!("\ncause {}: {}", c.id, c.summary));
            if let Some(fix) = c.fix.as_ref().or(f.fix.as_ref()) {
                msg.push_str(&format!("\nfix: {fix}"));
            }
            out.push_str(&annotation(f, &path(&f.file), &format!("deepep-forge {} (cause {})", f.rule, c.id), &msg));
        }
    }
    out
}

/// One finding as a GitHub annotation, written by `output::annotation` (the one writer).
fn annotation(f: &Finding, file: &Path, title: &str, msg: &str) -> String {
    let level = match f.severity {
        Severity::Error => Level::Error,
        Severity::Warning => Level::Warning,
        Severity::Note => Level::Notice,
    };
    let a = Annotation {
        file: Some(file),
        line: f.line,
        column: f.column,
        title: title.to_string(),
        message: msg.to_string(),
    };
    output::annotation(level, &a)
}

/// Render findings as GitHub Actions workflow commands.
pub fn render_github(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let mut msg = f.message.to_string();
        if let (Some(e), Some(g)) = (&f.expected, &f.found) {
            msg.push_str(&format!("\nexpected: {e}\nfound: {g}"));
        }
        if let Some(fix) = &f.fix {
            msg.push_str(&format!("\nfix: {fix}"));
        }
        out.push_str(&annotation(f, &f.file, &format!("deepep-forge {}", f.rule), &msg));
    }
    out
}

/// Render in the chosen format (JSON is the bare array; commands wrap it).
pub fn render(findings: &[Finding], format: Format) -> String {
    match format {
        Format::Human => render_human(findings),
        Format::Github => render_github(findings),
        Format::Json => serde_json::to_string_pretty(findings).expect("findings serialize"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_escapes_and_carries_location() {
        let f = Finding::new("rev-mismatch", Severity::Error, "a,b/pyproject.toml", "50% wrong\nreally")
            .line(12)
            .fix("deepep-forge pin set X");
        let s = render_github(&[f]);
        assert!(
            s.starts_with(
                "::error file=a%2Cb/pyproject.toml,line=12,title=deepep-forge rev-mismatch::50%25 wrong\\nreally%0Afix: "
            ),
            "{s}"
        );
        assert!(s.contains("fix: deepep-forge pin set X"));
    }

    /// A value from a project file (a Dockerfile's name, an expected or found
    /// value, a message) cannot start a line of its own in the human report.
    #[test]
    fn no_value_starts_a_row_of_its_own() {
        let forged = "x\nerror[forged]: planted\r\u{1b}[2K::error::y";
        let f = Finding::new("rev-mismatch", Severity::Error, format!("docker/{forged}/Dockerfile"), forged)
            .at(3, 1)
            .expected_found(forged, forged)
            .fix(forged);
        let cause = Cause {
            id: "rev-mismatch".into(),
            severity: Severity::Error,
            summary: forged.into(),
            fix: Some(forged.into()),
            findings: vec![f.clone()],
        };
        for text in [render_human(std::slice::from_ref(&f)), render_human_causes(&[cause])] {
            assert!(!text.contains(['\r', '\u{1b}']), "{text:?}");
            assert!(text.lines().all(|l| !l.trim_start().starts_with("error[forged]")), "{text}");
            assert!(text.lines().all(|l| !l.trim_start().starts_with("::")), "{text}");
        }
        assert_eq!(f.location(), "docker/x\\nerror[forged]: planted\\r\\u{1b}[2K::error::y/Dockerfile:3:1");
    }
}
