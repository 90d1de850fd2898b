//! Findings: what `lock check` (pyproject.toml, uv.lock, Dockerfiles) reports.
//! Owns the finding type and its three renderings; must not decide rules.
use std::path::PathBuf;

use serde::Serialize;

use crate::output::{annotation, Annotation, Format, Level};
use crate::pins::Arch;

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
    pub rule: String,
    pub severity: Severity,
    pub file: PathBuf,
    /// 1-based line, where known.
    pub line: Option<usize>,
    pub arch: Option<Arch>,
    pub expected: Option<String>,
    pub found: Option<String>,
    pub message: String,
    /// What to do, usually an exact command.
    pub fix: Option<String>,
}

impl Finding {
    pub fn new(rule: &str, severity: Severity, file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Finding {
            rule: rule.to_string(),
            severity,
            file: file.into(),
            line: None,
            arch: None,
            expected: None,
            found: None,
            message: message.into(),
            fix: None,
        }
    }
    pub fn line(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }
    pub fn arch(mut self, arch: Arch) -> Self {
        self.arch = Some(arch);
        self
    }
    pub fn expected_found(mut self, expected: impl Into<String>, found: impl Into<String>) -> Self {
        self.expected = Some(expected.into());
        self.found = Some(found.into());
        self
    }
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
    /// `file:line` for messages.
    pub fn location(&self) -> String {
        match self.line {
            Some(l) => format!("{}:{l}", self.file.display()),
            None => self.file.display().to_string(),
        }
    }
}

/// Render findings as text for people.
pub fn render_human(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        let arch = f.arch.map(|a| format!(" [{a}]")).unwrap_or_default();
        out.push_str(&format!("{sev}[{}]{arch}: {}\n  --> {}\n", f.rule, f.message, f.location()));
        if let (Some(e), Some(g)) = (&f.expected, &f.found) {
            out.push_str(&format!("  expected: {e}\n     found: {g}\n"));
        }
        if let Some(fix) = &f.fix {
            out.push_str(&format!("  fix: {fix}\n"));
        }
    }
    out
}

/// Render findings as GitHub Actions workflow commands (one per finding).
pub fn render_github(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let level = match f.severity {
            Severity::Error => Level::Error,
            Severity::Warning => Level::Warning,
            Severity::Note => Level::Notice,
        };
        let mut message = f.message.clone();
        if let (Some(e), Some(g)) = (&f.expected, &f.found) {
            message.push_str(&format!("\nexpected: {e}\nfound: {g}"));
        }
        if let Some(fix) = &f.fix {
            message.push_str(&format!("\nfix: {fix}"));
        }
        let a = Annotation {
            file: Some(&f.file),
            line: f.line,
            column: None,
            title: format!("deepep-forge {}", f.rule),
            message,
        };
        out.push_str(&annotation(level, &a));
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
                "::error file=a%2Cb/pyproject.toml,line=12,title=deepep-forge rev-mismatch::50%25 wrong%0Areally"
            ),
            "{s}"
        );
        assert!(s.contains("fix: deepep-forge pin set X"));
    }
}
