//! Every child process of deepep-forge starts here (xtask, developer tooling,
//! keeps xshell). Every child carries a one-line purpose that appears in its
//! errors, gets its arguments as separate argv entries (never through a shell),
//! has stdin closed unless it is interactive, runs in its own process group
//! (so a terminal's Ctrl-C reaches only deepep-forge, which then kills the
//! whole group and cleans up), and long ones stream their output to a log file
//! with a spinner on a TTY. `git` (hardened for untrusted repositories) is
//! [`git`]. Must not know what it runs.
pub mod engine;
pub mod git;
pub mod lookup;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::error::{check_interrupted, Failure};

/// A child process with a purpose ("fetch 17cfb81 from <repo>").
pub struct Cmd {
    pub cmd: Command,
    purpose: String,
}

impl Cmd {
    /// A child in its own process group (Ctrl-C reaches it through us).
    pub fn new(program: impl AsRef<std::ffi::OsStr>, purpose: impl Into<String>) -> Cmd {
        let mut c = Cmd::same_group(program, purpose);
        c.cmd.process_group(0);
        c
    }

    /// A child in our process group: a terminal's Ctrl-C reaches it directly
    /// (for children we do not wait on through this module, see [`Cmd::spawn`]).
    pub fn same_group(program: impl AsRef<std::ffi::OsStr>, purpose: impl Into<String>) -> Cmd {
        let mut cmd = Command::new(program);
        cmd.stdin(Stdio::null());
        Cmd { cmd, purpose: purpose.into() }
    }

    /// `argv` run in `cwd` with exactly `env` (nothing inherited): a plan's command.
    pub fn exact(
        argv: &[String],
        cwd: &Path,
        env: &std::collections::BTreeMap<String, String>,
        purpose: impl Into<String>,
    ) -> Result<Cmd> {
        let (program, args) = argv.split_first().context("empty command")?;
        let mut c = Cmd::new(program, purpose);
        c.cmd.args(args).current_dir(cwd).env_clear().envs(env);
        Ok(c)
    }

    pub fn purpose(&self) -> &str {
        &self.purpose
    }

    /// Run the child at a lower CPU priority: `nice` (0..=19) added to this process's
    /// niceness (capped at 19), set before it runs anything, so every thread and
    /// process it starts inherits it. Adding, never setting: a build run under
    /// `nice -n 15` keeps its children at 15 or lower, which needs no privilege.
    pub fn lower_priority(&mut self, nice: i32) -> &mut Cmd {
        use std::os::unix::process::CommandExt;
        let nice = nice.clamp(0, 19);
        // SAFETY: only nice(2) (getpriority + setpriority) runs between fork and exec.
        // Raising one's own niceness cannot be refused, and its result (the new
        // niceness, or -1 that may be one) is not needed.
        unsafe {
            self.cmd.pre_exec(move || {
                libc::nice(nice);
                Ok(())
            });
        }
        self
    }

    pub fn env(&mut self, key: impl AsRef<std::ffi::OsStr>, value: impl AsRef<std::ffi::OsStr>) -> &mut Cmd {
        self.cmd.env(key, value);
        self
    }

    fn start_error(&self, e: std::io::Error) -> anyhow::Error {
        let program = self.cmd.get_program().to_string_lossy().into_owned();
        let err = anyhow::Error::new(e).context(format!("{}: could not start {program}", self.purpose));
        if err.root_cause().downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            Failure::env(format!("{}: {program} not found", self.purpose))
                .hint(format!("install {program} or put it on PATH"))
                .into()
        } else {
            err
        }
    }

    /// Start the child and hand it over (the caller waits and reaps it).
    pub fn spawn(&mut self) -> Result<std::process::Child> {
        self.cmd.spawn().map_err(|e| self.start_error(e))
    }

    /// Start a child that serves while we work (a compiler cache server in the
    /// foreground): it is ours until the [`Background`] is dropped, which ends its
    /// group and reaps it, on every way out (success, failure, Ctrl-C).
    pub fn background(&mut self) -> Result<Background> {
        let child = self.cmd.spawn().map_err(|e| self.start_error(e))?;
        Ok(Background { child: Some(child) })
    }

    /// Run to completion with output captured, whatever its exit status (the
    /// caller judges); Ctrl-C/SIGTERM kills the child's group (exit 130).
    pub fn capture(&mut self) -> Result<std::process::Output> {
        self.cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = self.cmd.spawn().map_err(|e| self.start_error(e))?;
        let read_all = |r: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = read_all(child.stdout.take().map(|r| Box::new(r) as _));
        let err = read_all(child.stderr.take().map(|r| Box::new(r) as _));
        let status = wait_interruptible(child)?;
        Ok(std::process::Output {
            status,
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        })
    }

    /// Run with our stdout/stderr (a tool whose progress the user watches);
    /// interruptible like [`Cmd::capture`].
    pub fn run_inherit(&mut self) -> Result<std::process::ExitStatus> {
        let child = self.cmd.spawn().map_err(|e| self.start_error(e))?;
        wait_interruptible(child)
    }

    pub fn args<I, S>(&mut self, args: I) -> &mut Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn arg(&mut self, arg: impl AsRef<std::ffi::OsStr>) -> &mut Cmd {
        self.cmd.arg(arg);
        self
    }

    pub fn dir(&mut self, dir: &Path) -> &mut Cmd {
        self.cmd.current_dir(dir);
        self
    }

    /// Run to completion and return stdout; a failure names the purpose and
    /// carries stderr. Ctrl-C/SIGTERM kills the child's group (exit 130).
    pub fn output(&mut self) -> Result<String> {
        let o = self.capture()?;
        if !o.status.success() {
            anyhow::bail!("{} failed ({}): {}", self.purpose, o.status, String::from_utf8_lossy(&o.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// Run with stdout and stderr appended to `log`; on a TTY show a spinner
    /// with the elapsed time and the current compile step. Polls the interrupt
    /// flag: on Ctrl-C/SIGTERM the child's process group is terminated (then
    /// killed) and the result is an interrupted failure. A non-zero exit is a
    /// failure (exit 1) with the last 40 lines of the log and its path.
    pub fn run_logged(&mut self, log: &Path, label: &str) -> Result<()> {
        let (reader, writer) = std::io::pipe().context("pipe for the child's output")?;
        let writer2 = writer.try_clone()?;
        self.cmd.stdin(Stdio::null()).stdout(writer).stderr(writer2);
        let mut logf = crate::fs::named::create(log, "build log")?;
        let child = self.cmd.spawn().map_err(|e| self.start_error(e))?;
        // Drop our copies of the pipe's write end (held by `self.cmd`).
        self.cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let step = Arc::new(Mutex::new(String::new()));
        let step2 = Arc::clone(&step);
        let last_compiler_line = Arc::new(Mutex::new(String::new()));
        let last2 = Arc::clone(&last_compiler_line);
        let pump = std::thread::spawn(move || -> std::io::Result<()> {
            for line in BufReader::new(reader).split(b'\n') {
                let line = line?;
                logf.write_all(&line)?;
                logf.write_all(b"\n")?;
                let text = String::from_utf8_lossy(&line);
                if let Some(s) = compile_step(&text) {
                    *step2.lock().expect("step lock") = s;
                    *last2.lock().expect("line lock") = text.trim().to_string();
                }
            }
            logf.flush()
        });
        let bar = crate::printer::printer().spinner().then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {prefix} {wide_msg}")
                    .expect("template"),
            );
            b.set_prefix(label.to_string());
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        // Off a terminal (CI logs) there is no spinner: say where the log is, then
        // a heartbeat with the elapsed time and the last compiler line; `--quiet`: neither.
        let mut heartbeat = crate::printer::printer().heartbeat().then(|| Heartbeat::start(label, log));
        let waited = wait_with(child, || {
            if let Some(b) = &bar {
                b.set_message(step.lock().expect("step lock").clone());
            }
            if let Some(h) = &mut heartbeat {
                h.tick(&last_compiler_line.lock().expect("line lock"));
            }
        });
        if let Some(b) = &bar {
            b.finish_and_clear();
        }
        let status = match waited {
            Ok(s) => s,
            Err(e) => {
                let _ = pump.join();
                return Err(e);
            }
        };
        pump.join()
            .map_err(|_| anyhow::anyhow!("log writer panicked"))?
            .with_context(|| format!("writing log {}", log.display()))?;
        check_interrupted()?;
        if !status.success() {
            let text = log_tail(log);
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            // pip's verbose epilogue can push the compiler's message out of the tail.
            let first = lines
                .iter()
                .find(|l| l.contains("error:") || l.contains("Error:"))
                .map(|l| format!("first error in the log: {}\n", l.trim()))
                .unwrap_or_default();
            return Err(Failure::problems(format!(
                "{} failed ({status}); {first}last {} lines of the log:\n{tail}",
                self.purpose,
                lines.len().min(40)
            ))
            .hint(format!("full log: {}", log.display()))
            .into());
        }
        Ok(())
    }
}

/// The off-terminal progress of a long child: the log path at the start, then
/// every `DEEPEP_FORGE_HEARTBEAT_SECS` (default 30) seconds a line on stderr.
struct Heartbeat {
    label: String,
    started: Instant,
    every: Duration,
    next: Instant,
}

impl Heartbeat {
    fn start(label: &str, log: &Path) -> Heartbeat {
        let secs = crate::environ::var("DEEPEP_FORGE_HEARTBEAT_SECS").and_then(|s| s.parse::<u64>().ok());
        let every = Duration::from_secs(secs.filter(|s| (1..=3600).contains(s)).unwrap_or(30));
        crate::note!("{label}: running, full log in {}", log.display());
        let started = Instant::now();
        Heartbeat { label: label.to_string(), started, every, next: started + every }
    }

    fn tick(&mut self, last_line: &str) {
        if Instant::now() < self.next {
            return;
        }
        self.next += self.every;
        crate::note!("{}", heartbeat_line(&self.label, self.started.elapsed(), last_line));
    }
}

/// `LABEL: 1m30s so far; last compiler line: ...` (the line cut to 200 characters).
/// The end of a build log (its last 4 MiB at most) as text, for the failure
/// message; empty when it cannot be read.
fn log_tail(log: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 4 << 20;
    let Ok((mut f, len)) = crate::fs::named::open(log, "build log", u64::MAX) else { return String::new() };
    if f.seek(SeekFrom::Start(len.saturating_sub(TAIL))).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.take(TAIL).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

fn heartbeat_line(label: &str, elapsed: Duration, last_line: &str) -> String {
    let s = elapsed.as_secs();
    let took = if s >= 60 { format!("{}m{:02}s", s / 60, s % 60) } else { format!("{s}s") };
    let line: String = last_line.chars().take(200).collect();
    let cut = if last_line.chars().count() > 200 { " ..." } else { "" };
    if line.is_empty() {
        format!("{label}: {took} so far; no compiler line yet")
    } else {
        format!("{label}: {took} so far; last compiler line: {line}{cut}")
    }
}

/// Wait for a child (leader of its own process group), polling the
/// interrupt flag; on Ctrl-C/SIGTERM kill the group and fail with exit 130.
pub fn wait_interruptible(child: std::process::Child) -> Result<std::process::ExitStatus> {
    wait_with(child, || {})
}

fn wait_with(mut child: std::process::Child, mut tick: impl FnMut()) -> Result<std::process::ExitStatus> {
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(status) => {
                let status = status.context("waiting for a child process")?;
                check_interrupted()?;
                return Ok(status);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => anyhow::bail!("lost a child process"),
        }
        tick();
        if check_interrupted().is_err() {
            kill_group(pid, &rx);
            return Err(Failure::interrupted().into());
        }
    }
}

/// SIGTERM the process group, give it 3 s, then SIGKILL; reap the child.
fn kill_group(pid: i32, rx: &mpsc::Receiver<std::io::Result<std::process::ExitStatus>>) {
    // SAFETY: plain syscalls on a process group we created.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    if rx.recv_timeout(Duration::from_secs(3)).is_err() {
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = rx.recv_timeout(Duration::from_secs(5));
    }
    // Grandchildren that outlived the leader.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
}

/// A serving child (see [`Cmd::background`]), leader of its own process group.
pub struct Background {
    child: Option<std::process::Child>,
}

impl Background {
    /// Still running (not exited).
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Wait up to `limit` for it to exit on its own (after being asked to stop).
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while self.running() {
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }
}

impl Drop for Background {
    /// SIGTERM its group, 3 s, SIGKILL; reaped. Grandchildren go with the group.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pid = child.id() as i32;
        if matches!(child.try_wait(), Ok(None)) {
            // SAFETY: plain syscalls on a process group we created.
            unsafe { libc::kill(-pid, libc::SIGTERM) };
            let end = Instant::now() + Duration::from_secs(3);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = child.wait();
    }
}

/// The current compile step a build log line announces, if any.
fn compile_step(line: &str) -> Option<String> {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix("building '") {
        return Some(format!("building {}", rest.trim_end_matches(" extension").trim_end_matches('\'')));
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let tool = Path::new(words.first()?).file_name()?.to_string_lossy().into_owned();
    let compiler = ["nvcc", "gcc", "g++", "c++", "cc", "clang", "clang++"]
        .iter()
        .any(|c| tool == *c || tool.ends_with(&format!("-{c}")));
    if compiler {
        if let Some(i) = words.iter().position(|w| *w == "-c") {
            let src = words.get(i + 1)?;
            return Some(format!("{tool} {}", Path::new(src).file_name()?.to_string_lossy()));
        }
        return Some(format!("{tool} (link)"));
    }
    line.starts_with("make").then(|| "make".to_string())
}

/// Wait for a condition with the interrupt flag honoured.
pub fn sleep_checked(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        check_interrupted()?;
        std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
    }
    check_interrupted()
}

#[cfg(test)]
mod tests {
    use super::{compile_step, heartbeat_line};
    use std::time::Duration;

    #[test]
    fn heartbeat_lines_say_elapsed_time_and_the_last_compiler_line() {
        assert_eq!(
            heartbeat_line("demo", Duration::from_secs(95), "nvcc -c a.cu"),
            "demo: 1m35s so far; last compiler line: nvcc -c a.cu"
        );
        assert_eq!(heartbeat_line("demo", Duration::from_secs(30), ""), "demo: 30s so far; no compiler line yet");
        let long = "x".repeat(300);
        assert!(heartbeat_line("d", Duration::from_secs(1), &long).ends_with(&format!("{} ...", "x".repeat(200))));
    }
    #[test]
    fn a_lower_priority_is_added_to_this_processs_and_capped() {
        // SAFETY: getpriority(2) only reads.
        let ours = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let niceness = |add: i32| {
            let mut c = super::Cmd::new("sh", "print the niceness");
            c.args(["-c", "cut -d' ' -f19 /proc/self/stat"]).lower_priority(add);
            c.output().unwrap().trim().parse::<i32>().unwrap()
        };
        assert_eq!(niceness(3), (ours + 3).min(19));
        assert_eq!(niceness(40), 19, "capped");
        assert_eq!(niceness(0), ours);
        // A caller already at a lower priority: on Linux this sets the calling thread's
        // niceness only (this test's), and raising it needs no privilege.
        // SAFETY: setpriority(2) on this thread.
        assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, (ours + 4).min(19)) }, 0);
        assert_eq!(niceness(3), (ours + 7).min(19), "added to the caller's niceness, not set");
    }
    #[test]
    fn compile_steps_are_recognised() {
        assert_eq!(
            compile_step("/x/bin/nvcc -c csrc/kernels/layout.cu -o b/layout.o").as_deref(),
            Some("nvcc layout.cu")
        );
        assert_eq!(compile_step("building 'hybrid_ep_cpp' extension").as_deref(), Some("building hybrid_ep_cpp"));
        assert_eq!(compile_step("g++ -shared a.o -o x.so").as_deref(), Some("g++ (link)"));
        assert_eq!(compile_step("Processing ./x").as_deref(), None);
    }
}
