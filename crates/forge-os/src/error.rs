//! Exit codes and the one error type that carries them.
//!
//! Every command returns `anyhow::Result`. Code that knows *why* it failed wraps
//! the cause in a [`Failure`] with an [`Exit`] class and, where possible, a hint
//! that says what to do. `cli::main` finds the first `Failure` in the chain and
//! exits with its code; an error with none is a failed job (exit 1).
use std::fmt;

/// Process exit codes, the same for every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exit {
    /// 0: the job ran and found nothing wrong.
    Ok = 0,
    /// 1: the job ran and found problems, or the job itself failed (a build).
    Problems = 1,
    /// 2: bad input or usage: a malformed file, an unknown variant, a bad flag.
    Usage = 2,
    /// 3: missing environment: no GPU, no toolchain, no docker.
    Environment = 3,
    /// 130: interrupted (Ctrl-C, SIGTERM).
    Interrupted = 130,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// An error that knows its exit class and what the user should do about it.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Failure { exit, message: message.into(), hint: None }
    }
    /// Bad input or usage (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }
    /// Missing environment (exit 3).
    pub fn env(message: impl Into<String>) -> Self {
        Self::new(Exit::Environment, message)
    }
    /// The job ran and failed or found problems (exit 1).
    pub fn problems(message: impl Into<String>) -> Self {
        Self::new(Exit::Problems, message)
    }
    /// Interrupted by a signal (exit 130).
    pub fn interrupted() -> Self {
        Self::new(Exit::Interrupted, "interrupted")
    }
    /// The same failure in another exit class (a bad key in a file we wrote is
    /// a failed job, not bad input).
    pub fn with_exit(mut self, exit: Exit) -> Self {
        self.exit = exit;
        self
    }
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Shorthand: `bail_usage!("...")` returns a usage failure.
#[macro_export]
macro_rules! bail_usage {
    ($($t:tt)*) => { return Err($crate::error::Failure::usage(format!($($t)*)).into()) };
}

/// The exit class of an error chain: `Interrupted` once Ctrl-C/SIGTERM arrived (what
/// failed after it failed because of it, whatever a caller wrapped it in), else the
/// first `Failure` found, else `Problems`.
pub fn exit_of(err: &anyhow::Error) -> Exit {
    exit_given(err, INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst))
}

fn exit_given(err: &anyhow::Error, interrupted: bool) -> Exit {
    if interrupted {
        return Exit::Interrupted;
    }
    for cause in err.chain() {
        if let Some(f) = cause.downcast_ref::<Failure>() {
            return f.exit;
        }
        if cause.downcast_ref::<crate::environ::NotUtf8>().is_some() {
            return Exit::Usage;
        }
        if cause.downcast_ref::<serde_json::Error>().is_some_and(|e| e.to_string().contains(crate::output::NOT_UTF8)) {
            return Exit::Usage;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::Interrupted {
                return Exit::Interrupted;
            }
        }
    }
    Exit::Problems
}

/// Print `error: ...`, `caused by: ...` and `hint: ...` lines to stderr
/// (through the printer, so always shown, coloured on a terminal).
pub fn report(err: &anyhow::Error) {
    let label = crate::printer::label;
    crate::alert!("{}: {err}", label("error"));
    let mut hint = None;
    for (i, cause) in err.chain().enumerate() {
        if i > 0 {
            crate::alert!("  caused by: {cause}");
        }
        if let Some(f) = cause.downcast_ref::<Failure>() {
            if hint.is_none() {
                hint = f.hint.clone();
            }
        }
    }
    if let Some(h) = hint {
        crate::alert!("{}: {h}", label("hint"));
    }
}

/// Set by the signal handler; long-running work polls it and stops cleanly.
pub static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Return `Err(Failure::interrupted())` if Ctrl-C/SIGTERM arrived.
pub fn check_interrupted() -> anyhow::Result<()> {
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(Failure::interrupted().into());
    }
    Ok(())
}

/// Number of live [`Cooperative`] guards.
pub static COOPERATIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// While held, Ctrl-C does not exit the process at once: the holder polls
/// [`check_interrupted`] and cleans up (removes temp dirs, kills children).
pub struct Cooperative(());

impl Cooperative {
    pub fn enter() -> Cooperative {
        COOPERATIVE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Cooperative(())
    }
}

impl Drop for Cooperative {
    fn drop(&mut self) {
        COOPERATIVE.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_after_an_interrupt_is_the_interrupt_whatever_wraps_it() {
        let wrapped: anyhow::Error = Failure::env("read sccache's version: interrupted").into();
        assert_eq!(exit_given(&wrapped, false), Exit::Environment);
        assert_eq!(exit_given(&wrapped, true), Exit::Interrupted);
        let plain = anyhow::anyhow!("a failed job");
        assert_eq!(exit_given(&plain, false), Exit::Problems);
        assert_eq!(exit_given(&plain, true), Exit::Interrupted);
    }
}
