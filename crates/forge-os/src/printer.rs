//! The one place that writes to the terminal (as uv's `Printer`): every
//! command's output goes through here, so which stream a line takes, whether
//! `--quiet` hides it, whether it is coloured and how JSON is written are
//! decided once.
//!
//! - Results (reports, plans, verdicts, JSON documents, what a command did) go
//!   to stdout and are never hidden: a script reads them.
//! - Notes and progress (what is being done, where the log is, heartbeats,
//!   things worth knowing) go to stderr and `--quiet` hides them.
//! - Warnings and errors go to stderr and are always shown.
//!
//! A closed stdout ends the process by SIGPIPE (`cli::restore_sigpipe`), never
//! by a panic: nothing here panics on a failed write. A write that fails
//! otherwise (a full disk behind `> file`) is remembered and turned into an
//! error at exit by `cli::finish` ([`write_error`]). Must not know any job's
//! types; no `println!` anywhere else in the workspace (tests/it/structure.rs).
use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// How much goes to the terminal, chosen once per process ([`init`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printer {
    /// Results, notes, warnings; a spinner for long children on a terminal.
    Default,
    /// As `Default`, but stderr is not a terminal (CI logs): no spinner; long
    /// children print the log path and a heartbeat line instead.
    NoProgress,
    /// `--quiet`: results, warnings and errors only; no notes, no progress.
    Quiet,
}

const UNSET: u8 = 0;
static MODE: AtomicU8 = AtomicU8::new(UNSET);

impl Printer {
    fn code(self) -> u8 {
        match self {
            Printer::Default => 1,
            Printer::NoProgress => 2,
            Printer::Quiet => 3,
        }
    }

    /// Whether notes and progress lines are printed.
    pub fn notes(self) -> bool {
        self != Printer::Quiet
    }

    /// Whether a long child shows a spinner (on a terminal only).
    pub fn spinner(self) -> bool {
        self == Printer::Default
    }

    /// Whether a long child prints its log path and a heartbeat (off a terminal).
    pub fn heartbeat(self) -> bool {
        self == Printer::NoProgress
    }
}

/// Choose the printer for this process (`cli` calls it once, after parsing).
pub fn init(quiet: bool) {
    MODE.store(detect(quiet).code(), Ordering::SeqCst);
}

fn detect(quiet: bool) -> Printer {
    if quiet {
        Printer::Quiet
    } else if std::io::stderr().is_terminal() {
        Printer::Default
    } else {
        Printer::NoProgress
    }
}

/// The printer of this process; before [`init`] (library use), detected
/// without `--quiet`.
pub fn printer() -> Printer {
    match MODE.load(Ordering::SeqCst) {
        1 => Printer::Default,
        2 => Printer::NoProgress,
        3 => Printer::Quiet,
        _ => detect(false),
    }
}

/// The first write that failed for a reason other than a closed pipe.
static WRITE_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// A failed write to stdout or stderr (other than a closed pipe), to be
/// reported at exit: results that did not arrive must not exit 0.
pub fn write_error() -> Option<String> {
    WRITE_ERROR.lock().map(|e| e.clone()).unwrap_or(None)
}

fn remember(stream: &str, r: std::io::Result<()>) {
    match r {
        Ok(()) => {}
        // Only seen where SIGPIPE is ignored (the library in a test): the reader left.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            if let Ok(mut slot) = WRITE_ERROR.lock() {
                slot.get_or_insert_with(|| format!("writing to {stream}: {e}"));
            }
        }
    }
}

/// Write bytes to stdout as they are (man pages, completion scripts).
pub fn stdout_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    remember("stdout", out.write_all(bytes).and_then(|_| out.flush()));
}

/// A result: to stdout, always. Use [`out!`](crate::out) / [`outln!`](crate::outln).
/// Every line passes `output::redact_urls` (no URL shows its credentials) and
/// `output::log_safe` (control characters shown escaped, a
/// line that would start a CI workflow command gets a leading `\`): a result
/// quotes values from files, in every format, and a line break inside such a
/// value cannot start a live `::error` line. Only [`workflow`] prints workflow
/// commands.
pub fn out(args: fmt::Arguments) {
    let text = crate::output::log_safe(&crate::output::redact_urls(&args.to_string()));
    let mut out = std::io::stdout().lock();
    remember("stdout", out.write_all(text.as_bytes()).and_then(|_| out.flush()));
}

/// `--format github`'s report: annotations built by `output::annotation`
/// (their values escaped there) and a human part wrapped by
/// `output::github_log`. Control characters are still shown escaped; the
/// workflow commands stay live.
pub fn workflow(text: &str) {
    let text = crate::output::controls_escaped(&crate::output::redact_urls(text));
    let mut out = std::io::stdout().lock();
    remember("stdout", out.write_all(text.as_bytes()).and_then(|_| out.flush()));
}

/// One JSON document, pretty, on stdout (`--format json`).
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    out(format_args!("{text}\n"));
    Ok(())
}

/// Every line to stderr passes `output::redact_urls` (no URL shows its
/// credentials) and `output::log_safe`: notes and errors quote
/// values from files, and stderr is outside the `--format github` report's
/// stopped-commands block.
fn stderr(args: fmt::Arguments) {
    let text = crate::output::log_safe(&crate::output::redact_urls(&args.to_string()));
    let mut err = std::io::stderr().lock();
    remember("stderr", err.write_all(text.as_bytes()).and_then(|_| err.flush()));
}

/// A note or progress line: to stderr unless `--quiet`. Use [`note!`](crate::note).
pub fn note(args: fmt::Arguments) {
    if printer().notes() {
        stderr(args);
    }
}

/// A warning, an error or the interrupt message: to stderr, always. Use
/// [`alert!`](crate::alert).
pub fn alert(args: fmt::Arguments) {
    stderr(args);
}

/// Whether stderr gets colour: on a terminal unless `NO_COLOR` is set;
/// `CLICOLOR_FORCE` (non-empty, not `0`) forces it off a terminal.
pub fn color() -> bool {
    let set = |n: &str| crate::environ::var_os(n).is_some_and(|v| !v.is_empty() && v != "0");
    if crate::environ::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
        return false;
    }
    set("CLICOLOR_FORCE") || std::io::stderr().is_terminal()
}

/// `error`, `warning`, `hint` as a line's lead-in, bold red/yellow/cyan when
/// [`color`] says so.
pub fn label(word: &str) -> String {
    if !color() {
        return word.to_string();
    }
    let code = match word {
        "error" => "1;31",
        "warning" => "1;33",
        _ => "1;36",
    };
    format!("\x1b[{code}m{word}\x1b[0m")
}

/// A result, as `print!`.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::printer::out(format_args!($($t)*)) };
}

/// A result line, as `println!`.
#[macro_export]
macro_rules! outln {
    () => { $crate::printer::out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::printer::out(format_args!("{}\n", format_args!($($t)*))) };
}

/// A note or progress line on stderr, hidden by `--quiet` (a newline is added).
#[macro_export]
macro_rules! note {
    ($($t:tt)*) => { $crate::printer::note(format_args!("{}\n", format_args!($($t)*))) };
}

/// A warning or error line on stderr, always shown (a newline is added).
#[macro_export]
macro_rules! alert {
    ($($t:tt)*) => { $crate::printer::alert(format_args!("{}\n", format_args!($($t)*))) };
}

/// `s` as one word of a printed shell command: as it is when it is plain, else single-quoted,
/// so a printed fix runs as printed (`sh -c`) whatever path or URL the user gave.
pub fn shell_word(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@+%,".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_hides_notes_and_progress_only() {
        assert!(!Printer::Quiet.notes() && !Printer::Quiet.spinner() && !Printer::Quiet.heartbeat());
        assert!(Printer::Default.notes() && Printer::Default.spinner() && !Printer::Default.heartbeat());
        assert!(Printer::NoProgress.notes() && !Printer::NoProgress.spinner() && Printer::NoProgress.heartbeat());
    }

    #[test]
    fn a_failed_write_is_kept_a_closed_pipe_is_not() {
        remember("stdout", Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)));
        assert_eq!(write_error(), None);
        remember("stdout", Err(std::io::Error::other("no space left on device")));
        assert_eq!(write_error().as_deref(), Some("writing to stdout: no space left on device"));
    }
}
