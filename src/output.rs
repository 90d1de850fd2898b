//! Output formats shared by every command that reports.
use clap::ValueEnum;

/// `--format`: how a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Format {
    /// Aligned text for people (default).
    #[default]
    Human,
    /// One JSON document on stdout, with a `schema` version field.
    Json,
    /// GitHub Actions workflow commands (`::error file=,line=::`), plus the human text.
    Github,
}

/// Escape a value for a GitHub workflow command's message (after `::`).
pub fn gh_escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// Escape a value for a GitHub workflow command's property (`file=`, `title=`).
pub fn gh_escape_prop(s: &str) -> String {
    gh_escape_data(s).replace(':', "%3A").replace(',', "%2C")
}
