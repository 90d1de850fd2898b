//! The adversarial-suite harness: a table of [`Case`]s, each writing hostile
//! files into a fresh folder, running the real binary there (bounded time and
//! address space), and asserting its exit code, a message fragment, no panic,
//! and that nothing on disk changed or appeared (a snapshot of the case folder,
//! including its `cache/` and `out/`, before and after: paths, kinds, sizes,
//! content hashes, link targets).
//!
//! Placeholders in arguments, environment values and file contents:
//! `{dir}` is the case folder (absolute).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Extra preparation a file list cannot express (symlinks, FIFOs, git repos).
pub type Setup = Box<dyn Fn(&Path) + Send + Sync>;

/// One hostile input and what the tool must do with it.
pub struct Case {
    pub name: String,
    /// Files written (relative to the case folder) before the run.
    pub files: Vec<(String, Vec<u8>)>,
    pub setup: Vec<Setup>,
    pub args: Vec<std::ffi::OsString>,
    pub env: Vec<(String, String)>,
    pub exit: i32,
    /// Fragments that must all appear in stdout or stderr.
    pub says: Vec<String>,
    /// Fragments that must not appear (a secret, a whole hostile value).
    pub hides: Vec<String>,
    /// Paths (relative) that must not exist afterwards, e.g. a marker a
    /// smuggled command would have created.
    pub absent: Vec<String>,
    /// Paths (relative prefixes) allowed to change or appear.
    pub may_change: Vec<String>,
    /// Address-space limit of the child, bytes.
    pub memory: u64,
    pub timeout: Duration,
}

impl Case {
    pub fn new(name: impl Into<String>) -> Case {
        Case {
            name: name.into(),
            files: Vec::new(),
            setup: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            exit: 2,
            says: Vec::new(),
            hides: Vec::new(),
            absent: Vec::new(),
            may_change: Vec::new(),
            memory: 1 << 30,
            timeout: Duration::from_secs(30),
        }
    }
    pub fn file(mut self, path: &str, content: impl Into<Vec<u8>>) -> Case {
        self.files.push((path.to_string(), content.into()));
        self
    }
    pub fn setup(mut self, f: impl Fn(&Path) + Send + Sync + 'static) -> Case {
        self.setup.push(Box::new(f));
        self
    }
    pub fn args(mut self, args: &[&str]) -> Case {
        self.args.extend(args.iter().map(|s| s.into()));
        self
    }
    /// One argument that need not be UTF-8.
    pub fn arg_bytes(mut self, arg: &[u8]) -> Case {
        use std::os::unix::ffi::OsStrExt;
        self.args.push(std::ffi::OsStr::from_bytes(arg).to_os_string());
        self
    }
    pub fn hides(mut self, fragment: &str) -> Case {
        self.hides.push(fragment.to_string());
        self
    }
    pub fn timeout(mut self, d: Duration) -> Case {
        self.timeout = d;
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Case {
        self.env.push((k.to_string(), v.to_string()));
        self
    }
    pub fn exit(mut self, code: i32) -> Case {
        self.exit = code;
        self
    }
    pub fn says(mut self, fragment: &str) -> Case {
        self.says.push(fragment.to_string());
        self
    }
    pub fn absent(mut self, path: &str) -> Case {
        self.absent.push(path.to_string());
        self
    }
    pub fn may_change(mut self, prefix: &str) -> Case {
        self.may_change.push(prefix.to_string());
        self
    }
    pub fn memory(mut self, bytes: u64) -> Case {
        self.memory = bytes;
        self
    }
}

/// What a folder holds: relative path -> kind, size, sha256 (files), target (links).
pub type Snapshot = BTreeMap<PathBuf, String>;

/// Snapshot `dir` without following links or opening anything but regular files.
pub fn snapshot(dir: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().to_path_buf();
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        let ft = m.file_type();
        let desc = if ft.is_symlink() {
            format!("link -> {}", std::fs::read_link(&p).map(|t| t.display().to_string()).unwrap_or_default())
        } else if ft.is_dir() {
            walk(root, &p, out);
            "dir".to_string()
        } else if ft.is_file() && m.len() > 64 << 20 {
            // Big (usually sparse) inputs: size, mtime and inode instead of hashing gigabytes.
            use std::os::unix::fs::MetadataExt;
            format!("file {} mtime {}.{} ino {}", m.len(), m.mtime(), m.mtime_nsec(), m.ino())
        } else if ft.is_file() {
            let mut h = Sha256::new();
            if let Ok(mut f) = std::fs::File::open(&p) {
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(n) = f.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                }
            }
            format!("file {} {}", m.len(), hex::encode(h.finalize()))
        } else {
            "special".to_string()
        };
        out.insert(rel, desc);
    }
}

/// Differences between two snapshots, outside the `may_change` prefixes.
pub fn diff(before: &Snapshot, after: &Snapshot, may_change: &[String]) -> Vec<String> {
    let allowed = |p: &Path| may_change.iter().any(|m| p.starts_with(m));
    let mut d = Vec::new();
    for (p, v) in before {
        match after.get(p) {
            None if !allowed(p) => d.push(format!("removed {}", p.display())),
            Some(w) if w != v && !allowed(p) => d.push(format!("changed {}: {v} -> {w}", p.display())),
            _ => {}
        }
    }
    for p in after.keys() {
        if !before.contains_key(p) && !allowed(p) {
            d.push(format!("appeared {}", p.display()));
        }
    }
    d
}

fn fill(s: &str, dir: &Path) -> String {
    s.replace("{dir}", &dir.to_string_lossy())
}

/// Run one case in a fresh folder; `Err` says what went wrong.
pub fn run_case(case: &Case) -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = tmp.path().canonicalize().unwrap();
    for (rel, bytes) in &case.files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let text = String::from_utf8(bytes.clone()).map(|t| fill(&t, &dir).into_bytes()).unwrap_or(bytes.clone());
        std::fs::write(&p, text).unwrap();
    }
    for s in &case.setup {
        s(&dir);
    }
    let before = snapshot(&dir);
    // A host ready for multi-node (outside `dir`): these cases are about hostile input, not this machine's RDMA.
    let host = tempfile::tempdir().unwrap();
    crate::multinode_host::ready_host(host.path());
    let mut cmd = Command::new(crate::support::exe());
    cmd.env("DEEPEP_FORGE_HOST_ROOT", host.path());
    cmd.args(case.args.iter().map(|a| match a.to_str() {
        Some(s) => fill(s, &dir).into(),
        None => a.clone(),
    }))
    .current_dir(&dir)
    .env("DEEPEP_FORGE_CACHE_DIR", dir.join("cache"))
    .env_remove("DEEPEP_FORGE_CACHE_URL")
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .env("XDG_STATE_HOME", Path::new(env!("CARGO_TARGET_TMPDIR")).join("state"))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in &case.env {
        cmd.env(k, fill(v, &dir));
    }
    let limit = case.memory;
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            libc::setrlimit(libc::RLIMIT_AS, &r);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if start.elapsed() > case.timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {:?}", case.timeout));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = String::from_utf8_lossy(&t_out.join().unwrap()).into_owned();
    let err = String::from_utf8_lossy(&t_err.join().unwrap()).into_owned();
    let both = format!("{out}\n{err}");
    let mut problems = Vec::new();
    if status.code() != Some(case.exit) {
        problems.push(format!("exit {:?}, want {}", status.code(), case.exit));
    }
    if both.contains("panicked") || both.contains("RUST_BACKTRACE") {
        problems.push("panicked".to_string());
    }
    for s in &case.says {
        let s = fill(s, &dir);
        if !both.contains(&s) {
            problems.push(format!("output lacks {s:?}"));
        }
    }
    for h in &case.hides {
        if both.contains(h.as_str()) {
            problems.push(format!("output shows {:?}", h.chars().take(40).collect::<String>()));
        }
    }
    for a in &case.absent {
        if std::fs::symlink_metadata(dir.join(a)).is_ok() {
            problems.push(format!("{a} exists"));
        }
    }
    problems.extend(diff(&before, &snapshot(&dir), &case.may_change));
    if problems.is_empty() {
        Ok(())
    } else {
        let clip = |s: &str| s.chars().take(1500).collect::<String>();
        Err(format!("{}\n    stdout: {}\n    stderr: {}", problems.join("; "), clip(&out), clip(&err)))
    }
}

/// Run every case (two at a time) and fail once, listing every failed case.
pub fn run_all(cases: Vec<Case>) {
    let names: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), cases.len(), "case names must be unique");
    let n = cases.len();
    let cases = std::sync::Mutex::new(cases.iter().collect::<Vec<_>>());
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let Some(c) = cases.lock().unwrap().pop() else { break };
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_case(c)))
                    .unwrap_or_else(|_| Err("the case's own setup panicked".into()));
                if let Err(e) = r {
                    failures.lock().unwrap().push(format!("  {}: {e}", c.name));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(failures.is_empty(), "{} of {n} cases failed:\n{}", failures.len(), failures.join("\n"));
    eprintln!("{n} cases passed");
}
