//! The one HTTP client, with one policy for every transfer (the remote cache,
//! publish indexes and their manifests, `verify URL`, the Debian mirror of
//! `docker build`): a connect timeout (10 s at most), an idle timeout (no
//! byte for that long ends a body) and an overall deadline per body sized
//! from its length ([`Limits`], docs/network.md), under the caller's cap,
//! that covers the body however the server paces it; a body whose size is
//! known before it is asked for (a signed manifest's entry, a cap) is
//! bounded by that size ([`Bound`], [`Client::get_bounded`]): a larger
//! announced length is refused when the headers arrive, a longer body is cut
//! with an error, and the deadline follows the bound, never the length the
//! server announces; up to 5
//! redirects, never from https to plain http unless plain http was allowed;
//! bodies read against a size bound; the system's and the bundled root
//! certificates; socket writes that never raise SIGPIPE (a server that closes
//! during an upload is an error, not a dead process). URLs are shown only
//! through [`redact`]: credentials and queries never reach a message.
//! Owns transport; callers own what a status or body means.
use std::io::Read;
use std::time::{Duration, Instant};

pub use reqwest::StatusCode;
pub use reqwest::Url;

/// The longest connect phase, whatever the overall deadline.
const CONNECT: Duration = Duration::from_secs(10);

/// Where plain `http://` is accepted (as the first URL and after a redirect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plain {
    /// https only.
    Refused,
    /// http only to 127.0.0.1, ::1 or localhost (a test or local index).
    Loopback,
    /// Anywhere (the user passed `--allow-http`).
    Allowed,
}

/// A client with its deadline and plain-http policy.
pub struct Client {
    inner: reqwest::blocking::Client,
    timeout: Duration,
    plain: Plain,
    limits: Limits,
}

/// How long a transfer may take, besides the caller's overall cap: no byte
/// for `idle` ends it, and a body of known length must arrive by `base +
/// length / min_rate`. Settable by environment (docs/network.md):
/// `DEEPEP_FORGE_HTTP_IDLE_TIMEOUT` (seconds, default 30),
/// `DEEPEP_FORGE_HTTP_BASE_TIMEOUT` (seconds, default 30) and
/// `DEEPEP_FORGE_HTTP_MIN_RATE` (bytes per second, default 262144).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub idle: Duration,
    pub base: Duration,
    pub min_rate: u64,
}

pub const IDLE_ENV: &str = "DEEPEP_FORGE_HTTP_IDLE_TIMEOUT";
pub const BASE_ENV: &str = "DEEPEP_FORGE_HTTP_BASE_TIMEOUT";
pub const RATE_ENV: &str = "DEEPEP_FORGE_HTTP_MIN_RATE";

impl Limits {
    /// The defaults, each replaced by its environment variable when set; a
    /// value that is not a whole number in range is a usage error naming it.
    pub fn from_env() -> Result<Limits, crate::error::Failure> {
        let num = |name: &str, default: u64, max: u64| -> Result<u64, crate::error::Failure> {
            let Some(v) = crate::environ::var_os(name) else { return Ok(default) };
            v.to_str().and_then(|t| t.trim().parse::<u64>().ok()).filter(|n| (1..=max).contains(n)).ok_or_else(|| {
                crate::error::Failure::usage(format!(
                    "{name}={}: expected a whole number from 1 to {max}",
                    crate::input::excerpt(&v.to_string_lossy(), 40)
                ))
            })
        };
        Ok(Limits {
            idle: Duration::from_secs(num(IDLE_ENV, 30, 86_400)?),
            base: Duration::from_secs(num(BASE_ENV, 30, 86_400)?),
            min_rate: num(RATE_ENV, 256 << 10, 1 << 40)?,
        })
    }

    /// The deadline of a body of `len` bytes (unknown: `cap`), never past `cap`.
    pub fn deadline_for(&self, len: Option<u64>, cap: Duration) -> Duration {
        match len {
            Some(n) => self.base.saturating_add(Duration::from_secs(n / self.min_rate.max(1))).min(cap),
            None => cap,
        }
    }
}

/// A response whose body is read against the request's deadline (and its
/// [`Bound`], when the request had one).
pub struct Response {
    pub status: StatusCode,
    body: Deadlined,
    bound: Option<Bound>,
    read: u64,
}

/// What a body may hold, known before it is asked for: the size a signed
/// source states for it (a manifest entry's `size`: the body must not be
/// longer), or a cap the caller allows (an entry.json, a manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub bytes: u64,
    pub signed: bool,
}

impl Bound {
    /// The size a signed source states.
    pub fn signed(bytes: u64) -> Bound {
        Bound { bytes, signed: true }
    }

    /// The most the caller reads.
    pub fn cap(bytes: u64) -> Bound {
        Bound { bytes, signed: false }
    }
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.signed {
            write!(f, "the {} bytes signed for it", self.bytes)
        } else {
            write!(f, "the {} bytes allowed", self.bytes)
        }
    }
}

/// Why a bounded GET gave no body to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    /// The transport failed (connecting, TLS, a timeout): another try may do.
    Transport(String),
    /// The server announced a body longer than the bound: refused when the
    /// headers arrived, before a byte of it was read (another try gets the same).
    TooLarge { announced: u64, bound: Bound },
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unread::Transport(why) => f.write_str(why),
            Unread::TooLarge { announced, bound } => {
                write!(f, "the server announces {announced} bytes, more than {bound}: refused before reading the body")
            }
        }
    }
}

/// A URL given by the user or found in a file: no whitespace or control
/// character anywhere (a URL parser would silently drop a tab or newline
/// inside the host), at most 2048 bytes, and a URL. The error names the
/// redacted value.
pub fn parse(raw: &str) -> Result<Url, String> {
    if raw.len() > 2048 {
        return Err(format!("{}: longer than 2048 bytes", redact(raw)));
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{}: a URL holds no space, tab, newline or control character", redact(raw)));
    }
    Url::parse(raw).map_err(|e| format!("{}: not a URL ({e})", redact(raw)))
}

/// A URL as it may be shown: `user:password@` becomes `***@`, a query
/// `?***`, and the rest is escaped and cut ([`crate::input::excerpt`]). Works
/// on any text, a URL or not, so an unparsable value is redacted too.
pub fn redact(raw: &str) -> String {
    let (scheme, rest) = match raw.find("://") {
        Some(i) => raw.split_at(i + 3),
        None => ("", raw),
    };
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (auth, path) = rest.split_at(auth_end);
    let host = match auth.rfind('@') {
        Some(at) => format!("***@{}", &auth[at + 1..]),
        None => auth.to_string(),
    };
    let path = match path.find('?') {
        Some(q) => {
            let frag = path[q..].find('#').map(|f| &path[q + f..]).unwrap_or("");
            format!("{}?***{frag}", &path[..q])
        }
        None => path.to_string(),
    };
    crate::input::excerpt(&format!("{scheme}{host}{path}"), 300)
}

/// Whether `u` is plain http to this machine.
pub fn is_loopback(u: &Url) -> bool {
    matches!(u.host_str(), Some("127.0.0.1" | "localhost" | "[::1]" | "::1"))
}

impl Client {
    /// A client whose every request ends by `timeout` (connecting: 10 s at most).
    pub fn new(timeout: Duration, plain: Plain) -> anyhow::Result<Client> {
        let builder = reqwest::blocking::Client::builder()
            .connect_timeout(timeout.min(CONNECT))
            .timeout(timeout)
            .tls_built_in_webpki_certs(true)
            .tls_built_in_native_certs(true)
            .redirect(redirects(plain));
        // reqwest's blocking client runs its socket I/O on a thread it starts
        // here; that thread inherits this mask, so a write to a peer that has
        // closed (writev: no MSG_NOSIGNAL) is EPIPE, an error, never SIGPIPE.
        let inner = without_sigpipe(|| builder.build())
            .map_err(|e| crate::error::Failure::env(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Client { inner, timeout, plain, limits: Limits::from_env()? })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The scheme `u` may use under this client's policy (`Err`: why not).
    pub fn check_scheme(&self, u: &Url) -> Result<(), String> {
        match (u.scheme(), self.plain) {
            ("https", _) | ("http", Plain::Allowed) => Ok(()),
            ("http", Plain::Loopback) if is_loopback(u) => Ok(()),
            ("http", _) => Err(format!("{}: plain http:// is refused (https only)", shown(u))),
            (s, _) => Err(format!("{}: scheme `{s}` is not https", shown(u))),
        }
    }

    /// GET `u`; the error is a sentence without credentials.
    pub fn get(&self, u: &Url) -> Result<Response, String> {
        self.check_scheme(u)?;
        let start = Instant::now();
        let resp = self.inner.get(u.clone()).send().map_err(|e| describe(&e, self.timeout))?;
        let (status, total) = (resp.status(), self.limits.deadline_for(resp.content_length(), self.timeout));
        Ok(Response {
            status,
            body: Deadlined::new(resp, start + total, total, self.limits.idle),
            bound: None,
            read: 0,
        })
    }

    /// GET `u` for a body of at most `bound` bytes: the whole request (the
    /// headers and the body) must end by `base + bound / min_rate` (never past
    /// this client's timeout; sooner when the server announces less), whatever
    /// length the server announces; an
    /// announced length over the bound is refused as soon as the headers
    /// arrive, and a body that runs past it fails the read.
    pub fn get_bounded(&self, u: &Url, bound: Bound) -> Result<Response, Unread> {
        self.check_scheme(u).map_err(Unread::Transport)?;
        let start = Instant::now();
        let total = self.limits.deadline_for(Some(bound.bytes), self.timeout);
        let resp =
            self.inner.get(u.clone()).timeout(total).send().map_err(|e| Unread::Transport(describe(&e, total)))?;
        let status = resp.status();
        if let Some(announced) = resp.content_length().filter(|n| *n > bound.bytes && status.is_success()) {
            return Err(Unread::TooLarge { announced, bound });
        }
        // A shorter announced length shortens the deadline; a longer one never lengthens it.
        let len = resp.content_length().map_or(bound.bytes, |n| n.min(bound.bytes));
        let total = self.limits.deadline_for(Some(len), total);
        let body = Deadlined::new(resp, start + total, total, self.limits.idle);
        Ok(Response { status, body, bound: Some(bound), read: 0 })
    }

    /// PUT a file's bytes to `u` (sent once); the status, or why it failed.
    pub fn put(&self, u: &Url, body: crate::fs::File) -> Result<StatusCode, String> {
        self.check_scheme(u)?;
        let resp = self
            .inner
            .put(u.clone())
            .body(reqwest::blocking::Body::from(body))
            .send()
            .map_err(|e| describe(&e, self.timeout))?;
        Ok(resp.status())
    }
}

impl Response {
    /// The whole body, at most `cap` bytes (more is an error), by the deadline.
    pub fn read_capped(self, cap: u64) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        self.take(cap + 1).read_to_end(&mut body).map_err(|e| format!("reading the body: {e}"))?;
        if body.len() as u64 > cap {
            return Err(format!("larger than {cap} bytes"));
        }
        Ok(body)
    }
}

impl Read for Response {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.body.read(out)?;
        self.read = self.read.saturating_add(n as u64);
        match self.bound {
            Some(b) if self.read > b.bytes => {
                Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("the body is longer than {b}")))
            }
            _ => Ok(n),
        }
    }
}

/// A URL for messages: [`redact`]ed.
pub fn shown(u: &Url) -> String {
    redact(u.as_str())
}

/// Run `f` with SIGPIPE blocked on this thread (threads it starts inherit the mask).
fn without_sigpipe<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: plain sigset manipulation on this thread's mask; restored below.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        let out = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        out
    }
}

/// Up to 5 redirects, never onto plain http the policy refuses.
fn redirects(plain: Plain) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |a| {
        let http_ok = match plain {
            Plain::Allowed => true,
            Plain::Loopback | Plain::Refused => false,
        };
        if a.previous().len() >= 5 {
            a.error("more than 5 redirects")
        } else if a.url().scheme() != "https" && !http_ok {
            let to = shown(a.url());
            a.error(format!("a redirect to {to} leaves https"))
        } else {
            a.follow()
        }
    })
}

/// A transport error as a sentence (reqwest's chain of causes), without the URL
/// (reqwest's own text names it, credentials included).
fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("timed out after {} s", timeout.as_secs());
    }
    let mut s = if e.is_connect() {
        "cannot connect".to_string()
    } else if e.is_redirect() {
        "redirect refused".to_string()
    } else {
        "request failed".to_string()
    };
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s.push_str(&format!(": {c}"));
        src = c.source();
    }
    s
}

/// A body read against the request's deadline, however the server paces it:
/// a server that trickles a byte a second would pass every per-read timeout
/// of the HTTP client and keep the request alive for ever. The body is read
/// on a helper thread into a small channel; a read here waits at most until
/// the deadline, then fails with "timed out". The helper ends at its next
/// read (the client's per-read timeout) once this is dropped.
struct Deadlined {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
    done: bool,
    deadline: Instant,
    timeout: Duration,
    idle: Duration,
}

impl Deadlined {
    fn new(mut resp: reqwest::blocking::Response, deadline: Instant, timeout: Duration, idle: Duration) -> Deadlined {
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        std::thread::spawn(move || loop {
            let mut buf = vec![0u8; 1 << 16];
            let r = resp.read(&mut buf).map(|n| {
                buf.truncate(n);
                buf
            });
            let last = !matches!(&r, Ok(b) if !b.is_empty());
            if tx.send(r).is_err() || last {
                break;
            }
        });
        Deadlined { rx, chunk: Vec::new(), at: 0, done: false, deadline, timeout, idle }
    }
}

/// A body read that failed on the client's own timeout (reqwest wraps it as a "body
/// error") says "timed out", as the deadline here does: which of the two fires first is a race.
fn timed_out_or(e: std::io::Error, timeout: Duration) -> std::io::Error {
    let client_timeout = e.kind() == std::io::ErrorKind::TimedOut
        || e.get_ref().and_then(|i| i.downcast_ref::<reqwest::Error>()).is_some_and(reqwest::Error::is_timeout);
    match client_timeout {
        true => std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("timed out after {} s (the client's deadline for this body)", timeout.as_secs()),
        ),
        false => e,
    }
}

impl Read for Deadlined {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.chunk.len() && !self.done {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let idle = left > self.idle;
            match self.rx.recv_timeout(left.min(self.idle)) {
                Ok(Ok(c)) if c.is_empty() => self.done = true,
                Ok(Ok(c)) => (self.chunk, self.at) = (c, 0),
                Ok(Err(e)) => return Err(timed_out_or(e, self.timeout)),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if idle => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("timed out: no data for {} s (idle limit, {IDLE_ENV})", self.idle.as_secs()),
                    ))
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                        "timed out after {} s (the deadline for this body: {BASE_ENV} plus its length at {RATE_ENV})",
                        self.timeout.as_secs()
                    ),
                    ))
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(std::io::Error::other("the connection ended"))
                }
            }
        }
        let n = (self.chunk.len() - self.at).min(out.len());
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn credentials_and_queries_are_never_shown() {
        for (raw, want) in [
            ("https://user:PASS@h.example/x/", "https://***@h.example/x/"),
            ("https://PASS@h.example", "https://***@h.example"),
            ("https://h.example/x?token=PASS", "https://h.example/x?***"),
            ("https://h.example/x?token=PASS#f", "https://h.example/x?***#f"),
            ("https://u:p@ss@h.example/?a=PASS", "https://***@h.example/?***"),
            ("not a url ?PASS", "not a url ?***"),
            ("https://h.example/a\nb", "https://h.example/a\\nb"),
        ] {
            assert_eq!(redact(raw), want, "{raw}");
            assert!(!redact(raw).contains("PASS"));
        }
    }

    #[test]
    fn urls_with_whitespace_or_controls_are_refused_not_cleaned() {
        for raw in
            ["https://exa\nmple.org/", "https://exa\tmple.org/", "https://h/\r", "https://h/ x", "https://h/\u{1b}"]
        {
            assert!(parse(raw).is_err(), "{raw:?}");
        }
        assert_eq!(parse("https://h.example/x").unwrap().as_str(), "https://h.example/x");
    }

    /// A server that reads the request head, answers 405 and closes without
    /// reading the upload (the unread bytes make the kernel reset the
    /// connection: the client's next writes fail with EPIPE).
    fn rude_server() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/x", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let mut head = [0u8; 1024];
                let _ = std::io::Read::read(&mut s, &mut head);
                let _ =
                    s.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                // FIN first (the client is then in CLOSE_WAIT), read a little, then close
                // with bytes unread: the reset that follows makes the client's writes EPIPE.
                let _ = s.shutdown(std::net::Shutdown::Write);
                let _ = s.set_read_timeout(Some(Duration::from_millis(30)));
                let mut sink = [0u8; 1 << 16];
                for _ in 0..4 {
                    let _ = std::io::Read::read(&mut s, &mut sink);
                }
                drop(s);
            }
        });
        url
    }

    /// A server that announces `announced` bytes (or none: the body ends when
    /// it closes) and sends one byte every 200 ms for at most a minute.
    fn trickle(announced: Option<u64>) -> Url {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = Url::parse(&format!("http://{}/w.whl", listener.local_addr().unwrap())).unwrap();
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = std::io::Read::read(&mut s, &mut [0u8; 4096]);
                    let len = announced.map(|n| format!("Content-Length: {n}\r\n")).unwrap_or_default();
                    let _ = s.write_all(format!("HTTP/1.1 200 OK\r\n{len}Connection: close\r\n\r\n").as_bytes());
                    for _ in 0..300 {
                        if s.write_all(b"x").is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                });
            }
        });
        url
    }

    /// A body whose size a signed source states: a larger announced length is
    /// refused at the headers, and the deadline follows the signed size, not
    /// what the server announces (1 s base here, 1 byte at 1 byte/s).
    #[test]
    fn a_signed_size_bounds_the_announced_length_the_body_and_the_deadline() {
        let mut client = Client::new(Duration::from_secs(600), Plain::Loopback).unwrap();
        client.limits = Limits { idle: Duration::from_secs(30), base: Duration::from_secs(1), min_rate: 1 };
        let start = Instant::now();
        let e = client.get_bounded(&trickle(Some(100_000_000)), Bound::signed(634_517)).err().unwrap();
        assert_eq!(e, Unread::TooLarge { announced: 100_000_000, bound: Bound::signed(634_517) });
        assert!(e.to_string().contains("more than the 634517 bytes signed"), "{e}");
        // no length announced, or the signed one: the deadline is 1 s + 100 bytes at 100 bytes/s
        client.limits.min_rate = 100;
        for announced in [None, Some(100)] {
            let mut body = Vec::new();
            let e = client.get_bounded(&trickle(announced), Bound::signed(100)).unwrap().read_to_end(&mut body);
            assert!(e.unwrap_err().to_string().contains("timed out"), "{announced:?}");
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{:?}", start.elapsed());
        // past the bound: an error, not a longer body
        let mut body = Vec::new();
        client.limits.min_rate = 1 << 20;
        client.limits.base = Duration::from_secs(5);
        let e = client.get_bounded(&trickle(None), Bound::cap(2)).unwrap().read_to_end(&mut body).unwrap_err();
        assert!(e.to_string().contains("longer than the 2 bytes allowed"), "{e}");
    }

    /// The CLI runs with SIGPIPE at its default (`cli::restore_sigpipe`): this
    /// test runs itself again as a child with that disposition, where a PUT of
    /// 64 MiB to a server that closes mid-upload must come back as an error.
    #[test]
    fn an_upload_to_a_closing_server_is_an_error_not_sigpipe() {
        const CHILD: &str = "DFX_HTTP_TEST_SIGPIPE_CHILD";
        if let Some(marker) = crate::environ::var_os(CHILD) {
            // SAFETY: this process is the child started for this one test.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            let client = Client::new(Duration::from_secs(20), Plain::Allowed).unwrap();
            let f = tempfile::tempfile().unwrap();
            f.set_len(64 << 20).unwrap();
            let mut answers = Vec::new();
            for _ in 0..20 {
                answers.push(format!("{:?}", client.put(&Url::parse(&rude_server()).unwrap(), f.try_clone().unwrap())));
            }
            answers.push("survived".into());
            std::fs::write(marker, answers.join("\n")).unwrap();
            return;
        }
        let marker = tempfile::NamedTempFile::new().unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "http::tests::an_upload_to_a_closing_server_is_an_error_not_sigpipe"])
            .env(CHILD, marker.path())
            .output()
            .unwrap();
        let text = std::fs::read_to_string(marker.path()).unwrap_or_default();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), None, "killed by a signal after: {text}");
        assert!(out.status.success() && text.contains("survived"), "{text}");
    }
}
