//! The remote HTTP cache: `<url>/<key>/entry.json` (the local entry plus
//! `provenance_sha256` and ed25519 `signatures`) and `<url>/<key>/<wheel>`.
//!
//! A fetched entry is used only when, in this order: its names and digests are
//! well-formed; a key the user trusts signed it ([`super::sign`]); the wheel's
//! sha256 and size match; the wheel's own provenance (in its `.dist-info`)
//! hashes to the signed digest and describes the plan it was fetched for
//! (cache key, revision, variant flags). Anything else is a note and the build
//! goes on locally.
//!
//! The network: HTTPS unless `--allow-http`; the system's root certificates
//! (and `SSL_CERT_FILE`/`SSL_CERT_DIR`) as well as the bundled web roots; a
//! connect timeout and a total timeout per request, and each body bounded
//! before it is asked for (entry.json by [`super::MAX_ENTRY_BYTES`], the wheel
//! by the size its signed entry states: a server that announces more is
//! refused when the headers arrive, exit 3, and the deadline follows the
//! signed size, not the announced one); GETs retried (3 attempts,
//! backoff 0.25 s, 0.5 s) on connection errors, timeouts, 429 and 5xx; PUT is
//! sent once.
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use forge_os::fs::Tree;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::sign::{self, PublicKey, SecretKey, Verdict};
use super::{Cache, Entry, Hit, Key};
use forge_os::error::{check_interrupted, Failure};
use forge_os::http::{self, shown};
use forge_wheel::provenance::VariantInfo;

/// GET attempts (the first plus retries).
pub const ATTEMPTS: u32 = 3;
/// The largest wheel accepted from a remote cache.
pub const MAX_WHEEL_BYTES: u64 = 8 << 30;
/// The largest provenance file read from a wheel.
pub const MAX_PROVENANCE_BYTES: u64 = 1 << 20;

/// How the client talks to the server (the `--allow-http` and
/// `--cache-timeout` flags, as the CLI hands them over).
#[derive(Debug, Clone, Copy)]
pub struct Net {
    /// Plain http:// is accepted.
    pub allow_http: bool,
    /// What each request may take in all.
    pub timeout: Duration,
}

/// A remote cache client.
pub struct Remote {
    base: http::Url,
    client: http::Client,
    trusted: Vec<PublicKey>,
}

/// What a fetch by key found.
pub enum Fetched {
    Miss,
    /// Verified and published into the local cache.
    Hit(Hit),
    /// The server had the key but the entry is not used (why).
    Rejected(String),
}

/// What a fetched wheel must be: the plan's revision and variant flags.
pub struct Expect<'a> {
    pub rev: &'a str,
    pub variant: &'a VariantInfo,
}

/// entry.json on a remote cache.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteEntry {
    #[serde(flatten)]
    pub entry: Entry,
    /// sha256 of the wheel's `.dist-info/deepep-forge-provenance.json`.
    pub provenance_sha256: String,
    /// `NAME:BASE64` ed25519 signatures over [`sign::message`].
    #[serde(default)]
    pub signatures: Vec<String>,
}

impl RemoteEntry {
    pub fn message(&self) -> Vec<u8> {
        let e = &self.entry;
        sign::message(&e.key, &e.wheel, &e.sha256, e.size, &self.provenance_sha256)
    }
}

/// One attempt's failure: worth another try, or not.
enum Attempt {
    Retry(String),
    Fatal(anyhow::Error),
}

impl Remote {
    pub fn new(url: &str, net: Net, trusted: Vec<PublicKey>) -> Result<Remote> {
        let base = http::parse(url).map_err(|why| {
            Failure::usage(format!("--cache-url {why}"))
                .hint("give the cache's base URL, e.g. https://cache.example.org/deepep")
        })?;
        match base.scheme() {
            "https" => {}
            "http" if net.allow_http => {}
            "http" => {
                return Err(Failure::usage(format!(
                    "--cache-url {}: plain http:// is refused without --allow-http (no TLS: the traffic can be read and changed on the way)",
                    shown(&base)
                ))
                .hint("use an https:// URL, or pass --allow-http for a cache on localhost or a network you trust")
                .into())
            }
            s => {
                return Err(Failure::usage(format!("--cache-url {}: scheme `{s}` is not https", shown(&base)))
                    .hint("give an https:// URL")
                    .into())
            }
        }
        if base.query().is_some() || base.fragment().is_some() {
            forge_os::bail_usage!("--cache-url {}: a base URL takes no ?query or #fragment", shown(&base));
        }
        let timeout = net.timeout;
        let plain = if net.allow_http { http::Plain::Allowed } else { http::Plain::Refused };
        let client = http::Client::new(timeout, plain)?;
        Ok(Remote { base, client, trusted })
    }

    /// `<base>/<key>/<file>` (both validated names).
    pub fn url_of(&self, key: &Key, file: &str) -> http::Url {
        let mut u = self.base.clone();
        {
            let mut segs = u.path_segments_mut().expect("http(s) URLs have paths");
            segs.pop_if_empty().push(key.as_str()).push(file);
        }
        u
    }

    /// The URL as shown in messages (without user:password).
    pub fn shown_url(&self, key: &Key, file: &str) -> String {
        shown(&self.url_of(key, file))
    }

    /// GET with retries, the body bounded by `bound`; `f` reads the response
    /// (a body error is retried too). An announced length over the bound is
    /// not retried: exit 3 naming the URL and the bound.
    fn get_with<T>(
        &self,
        url: &http::Url,
        bound: http::Bound,
        mut f: impl FnMut(http::Response) -> Result<T, Attempt>,
    ) -> Result<Option<T>> {
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            check_interrupted()?;
            if attempt > 0 {
                forge_os::process::sleep_checked(Duration::from_millis(250 << (attempt - 1)))?;
            }
            let resp =
                match self.client.get_bounded(url, bound) {
                    Ok(r) => r,
                    Err(http::Unread::Transport(why)) => {
                        last = why;
                        continue;
                    }
                    Err(too_large) => return Err(Failure::env(format!("remote cache {}: {too_large}", shown(url)))
                        .hint(
                            "the server does not serve what its signed entry describes; check --cache-url, or drop it",
                        )
                        .into()),
                };
            let st = resp.status;
            if st == http::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if st.is_server_error() || st == http::StatusCode::TOO_MANY_REQUESTS {
                last = format!("HTTP {st}");
                continue;
            }
            if !st.is_success() {
                return Err(unreachable(&shown(url), &format!("HTTP {st}")));
            }
            match f(resp) {
                Ok(v) => return Ok(Some(v)),
                Err(Attempt::Retry(why)) => last = why,
                Err(Attempt::Fatal(e)) => return Err(e),
            }
        }
        Err(unreachable(&shown(url), &format!("{last} ({ATTEMPTS} attempts)")))
    }

    /// The remote entry for `key` (`None`: not there). The body is capped and
    /// the entry validated; a malformed one is `Err` with a usage class.
    pub fn entry(&self, key: &Key) -> Result<Option<Result<RemoteEntry, String>>> {
        let url = self.url_of(key, super::ENTRY_FILE);
        let body = self.get_with(&url, http::Bound::cap(super::MAX_ENTRY_BYTES), |resp| {
            let mut buf = Vec::new();
            match resp.take(super::MAX_ENTRY_BYTES + 1).read_to_end(&mut buf) {
                Ok(_) => Ok(buf),
                Err(e) => Err(Attempt::Retry(format!("reading the body: {e}"))),
            }
        })?;
        let Some(body) = body else { return Ok(None) };
        if body.len() as u64 > super::MAX_ENTRY_BYTES {
            return Ok(Some(Err(format!("{}: more than {} bytes", shown(&url), super::MAX_ENTRY_BYTES))));
        }
        let parsed = serde_json::from_slice::<RemoteEntry>(&body)
            .map_err(|e| format!("{}: not an entry ({e})", shown(&url)))
            .and_then(|re| {
                re.entry.validate().map_err(|w| format!("{}: {w}", shown(&url)))?;
                if re.entry.key != key.as_str() {
                    return Err(format!("{}: describes another key", shown(&url)));
                }
                if !super::is_sha256_hex(&re.provenance_sha256) {
                    return Err(format!("{}: provenance_sha256 is not 64 lowercase hex digits", shown(&url)));
                }
                Ok(re)
            });
        Ok(Some(parsed))
    }

    /// Download `url` as `name` of `dir`, at most `size` bytes (the size its
    /// signed entry states: the bound of the request), within the timeout;
    /// retried from the start. Returns (sha256, bytes).
    fn download(&self, url: &http::Url, dir: &Tree, name: &str, size: u64) -> Result<Option<(String, u64)>> {
        self.get_with(url, http::Bound::signed(size), |mut resp| {
            let mut retry = None;
            let mut got = None;
            let written = dir.write_with(name, forge_os::fs::PUBLIC, |f| {
                // More than the signed size stops the read: rejected by the caller.
                let (digest, n) = forge_os::input::sha256_stream(&mut resp, size, |chunk| Ok(f.write_all(chunk)?))
                    .map_err(|e| match e {
                        // Past the signed size: the server sends more than the entry says (not retried).
                        forge_os::input::StreamError::Read(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                            Failure::env(format!("remote cache {}: {e}", shown(url))).into()
                        }
                        forge_os::input::StreamError::Read(e) => {
                            retry = Some(format!("reading the body: {e}"));
                            anyhow::anyhow!("reading the body: {e}")
                        }
                        e => e.into(),
                    })?;
                f.sync_all()?;
                got = Some((hex::encode(digest), n));
                Ok(())
            });
            match (written, retry, got) {
                (Ok(()), _, Some(v)) => Ok(v),
                (_, Some(why), _) => Err(Attempt::Retry(why)),
                (Err(e), _, _) => Err(Attempt::Fatal(e)),
                (Ok(()), None, None) => Err(Attempt::Fatal(anyhow::anyhow!("nothing downloaded"))),
            }
        })
    }

    /// PUT the file `rel` of `tree` (sent once; PUT is not retried).
    fn put_file(&self, url: &http::Url, tree: &Tree, rel: &Path) -> Result<()> {
        let (body, _) = tree.open_file_nofollow(rel, forge_os::input::cap::WHEEL)?;
        let status = self.client.put(url, body).map_err(|why| unreachable(&shown(url), &why))?;
        if !status.is_success() {
            return Err(Failure::problems(format!("PUT {}: HTTP {status}", shown(url)))
                .hint("the server must accept PUT for `cache push`")
                .into());
        }
        Ok(())
    }

    /// Sign and upload a verified local entry: the wheel first, then entry.json,
    /// so a visible entry always has its wheel.
    pub fn push(&self, cache: &Cache, hit: &Hit, key: &SecretKey) -> Result<RemoteEntry> {
        let e = &hit.entry;
        let k = Key::parse(&e.key)?;
        let tree = cache.tree()?;
        let wheel = Path::new("wheels").join(k.as_str()).join(&e.wheel);
        let (_, provenance_sha256) =
            forge_wheel::wheel::open(&tree.join(&wheel)).and_then(|mut w| w.provenance()).map_err(|why| {
                Failure::problems(format!("{why:#}"))
                    .hint("only wheels built by deepep-forge (with provenance) can be pushed")
            })?;
        let mut re = RemoteEntry { entry: e.clone(), provenance_sha256, signatures: Vec::new() };
        re.signatures.push(key.sign(&re.message()));
        self.put_file(&self.url_of(&k, &e.wheel), tree, &wheel)?;
        let staged = cache.stage()?;
        staged.tree().write(super::ENTRY_FILE, &serde_json::to_vec_pretty(&re)?)?;
        self.put_file(&self.url_of(&k, super::ENTRY_FILE), staged.tree(), Path::new(super::ENTRY_FILE))?;
        Ok(re)
    }
}

/// What a remote cache said of a revision's unit-time history.
pub enum History {
    Missing,
    /// Signed by a trusted key, for this revision, a valid history.
    Trusted(super::unit_times::Times),
    /// Served, but not used (why).
    Rejected(String),
}

impl Remote {
    /// `<base>/unit-times/<rev>.json`.
    fn history_url(&self, name: &str) -> http::Url {
        let mut u = self.base.clone();
        {
            let mut segs = u.path_segments_mut().expect("http(s) URLs have paths");
            segs.pop_if_empty().push(super::unit_times::FOLDER).push(name);
        }
        u
    }

    /// The signed unit-time history of `rev`: used only when a trusted key signed it,
    /// it names this revision and every unit and time is within bounds.
    pub fn history(&self, rev: &str) -> Result<History> {
        use super::unit_times as ut;
        let Some(name) = ut::file_name(rev) else { return Ok(History::Missing) };
        let url = self.history_url(&name);
        let cap = ut::MAX_BYTES + 64 * 1024;
        let body = self.get_with(&url, http::Bound::cap(cap), |resp| {
            let mut buf = Vec::new();
            match resp.take(cap + 1).read_to_end(&mut buf) {
                Ok(_) => Ok(buf),
                Err(e) => Err(Attempt::Retry(format!("reading the body: {e}"))),
            }
        })?;
        let Some(body) = body else { return Ok(History::Missing) };
        let shown = shown(&url);
        if body.len() as u64 > cap {
            return Ok(History::Rejected(format!("{shown}: more than {cap} bytes")));
        }
        let Ok(s) = serde_json::from_slice::<ut::Signed>(&body) else {
            return Ok(History::Rejected(format!("{shown}: not a signed unit-time history")));
        };
        if s.rev.to_ascii_lowercase() != rev.to_ascii_lowercase() {
            return Ok(History::Rejected(format!("{shown}: names another revision")));
        }
        if !ut::valid(&s.times) {
            return Ok(History::Rejected(format!("{shown}: a unit name or time out of bounds")));
        }
        match sign::verify(&self.trusted, &s.signatures, &ut::message(rev, &s.times)) {
            Verdict::Trusted(_) => Ok(History::Trusted(s.times)),
            Verdict::Unsigned => Ok(History::Rejected(format!("{shown}: unsigned"))),
            Verdict::Untrusted(names) => {
                Ok(History::Rejected(format!("{shown}: signed only by keys not trusted here: {}", names.join(", "))))
            }
            Verdict::Invalid(name) => Ok(History::Rejected(format!(
                "{shown}: the signature by {name} does not match (changed after signing?)"
            ))),
        }
    }

    /// Sign and upload the cache's history of `rev`, if it has one: the URL it went to.
    pub fn push_history(&self, cache: &Cache, rev: &str, key: &SecretKey) -> Result<Option<String>> {
        use super::unit_times as ut;
        let (Some(name), Some(times)) = (ut::file_name(rev), ut::load(cache.root(), rev)) else { return Ok(None) };
        let signed =
            ut::Signed { rev: rev.to_ascii_lowercase(), signatures: vec![key.sign(&ut::message(rev, &times))], times };
        let staged = cache.stage()?;
        staged.tree().write(&name, &serde_json::to_vec_pretty(&signed)?)?;
        let url = self.history_url(&name);
        self.put_file(&url, staged.tree(), Path::new(&name))?;
        Ok(Some(shown(&url)))
    }
}

impl Cache {
    /// Fetch `key` from `remote` into a staging folder, check it (signature,
    /// digests, provenance against `expect`) and publish it locally.
    pub fn fetch(&self, remote: &Remote, key: &Key, expect: &Expect) -> Result<Fetched> {
        let re = match remote.entry(key)? {
            None => return Ok(Fetched::Miss),
            Some(Err(why)) => return Ok(Fetched::Rejected(why)),
            Some(Ok(re)) => re,
        };
        let e = &re.entry;
        let entry_url = remote.shown_url(key, super::ENTRY_FILE);
        match sign::verify(&remote.trusted, &re.signatures, &re.message()) {
            Verdict::Trusted(_) => {}
            Verdict::Unsigned => return Ok(Fetched::Rejected(format!("{entry_url} is unsigned"))),
            Verdict::Untrusted(names) if remote.trusted.is_empty() => {
                return Ok(Fetched::Rejected(format!(
                    "{entry_url} is signed by {} but no key is trusted (pass --trusted-key NAME:BASE64, set {}, or add it to {})",
                    names.join(", "),
                    super::config::TRUSTED_KEYS_ENV,
                    super::config::config_path().map(|p| p.display().to_string()).unwrap_or_else(|| "the config file".into())
                )))
            }
            Verdict::Untrusted(names) => {
                return Ok(Fetched::Rejected(format!(
                    "{entry_url} is signed only by keys you do not trust: {}",
                    names.join(", ")
                )))
            }
            Verdict::Invalid(name) => {
                return Ok(Fetched::Rejected(format!(
                    "{entry_url}: the signature by {name} does not match the entry (changed after signing?)"
                )))
            }
        }
        if e.size > MAX_WHEEL_BYTES {
            return Ok(Fetched::Rejected(format!("{entry_url}: a wheel of {} bytes is too large", e.size)));
        }
        let stage = self.stage()?;
        let dir = stage.tree().sub_create("entry", "cache staging folder")?;
        let wurl = remote.url_of(key, &e.wheel);
        let Some((sha, n)) = remote.download(&wurl, &dir, &e.wheel, e.size)? else {
            return Ok(Fetched::Rejected(format!("{}: not found, though its entry is", shown(&wurl))));
        };
        if sha != e.sha256 || n != e.size {
            return Ok(Fetched::Rejected(format!(
                "{}: sha256 {sha} ({n} bytes), the signed entry says {} ({} bytes)",
                shown(&wurl),
                e.sha256,
                e.size
            )));
        }
        if let Err(why) = check_provenance(&dir.join(&e.wheel), &re, key, expect) {
            return Ok(Fetched::Rejected(format!("{}: {why}", shown(&wurl))));
        }
        super::write_entry_in(&dir, e)?;
        Ok(Fetched::Hit(self.publish_staged(&stage, "entry", key)?))
    }
}

/// The wheel's own provenance hashes to the signed digest and describes this plan.
fn check_provenance(wheel: &Path, re: &RemoteEntry, key: &Key, expect: &Expect) -> Result<(), String> {
    let (p, digest) = forge_wheel::wheel::open(wheel).and_then(|mut w| w.provenance()).map_err(|e| format!("{e:#}"))?;
    if digest != re.provenance_sha256 {
        return Err("its provenance does not hash to the signed provenance_sha256".into());
    }
    let (v, w) = (&p.variant, expect.variant);
    let mut diff = Vec::new();
    if p.cache_key != key.as_str() {
        diff.push(format!("cache key {} (plan {})", super::excerpt(&p.cache_key), key.short()));
    }
    if p.source.rev != expect.rev {
        diff.push(format!("revision {} (plan {})", super::excerpt(&p.source.rev), expect.rev));
    }
    if (&v.arch, &v.cuda_arch_list, v.multinode, &v.transport)
        != (&w.arch, &w.cuda_arch_list, w.multinode, &w.transport)
    {
        diff.push(format!(
            "variant flags {}/{}/multinode={}/{} (plan {}/{}/multinode={}/{})",
            super::excerpt(&v.arch),
            super::excerpt(&v.cuda_arch_list),
            v.multinode,
            super::excerpt(v.transport.as_deref().unwrap_or("-")),
            w.arch,
            w.cuda_arch_list,
            w.multinode,
            w.transport.as_deref().unwrap_or("-")
        ));
    }
    if diff.is_empty() {
        Ok(())
    } else {
        Err(format!("its provenance does not match the plan: {}", diff.join(", ")))
    }
}

fn unreachable(url: &str, why: &str) -> anyhow::Error {
    Failure::env(format!("remote cache unreachable: {url}: {why}"))
        .hint("check --cache-url and the network (proxies, SSL_CERT_FILE for a private CA), or drop --cache-url")
        .into()
}

#[cfg(test)]
mod tests {
    //! The client against real servers on 127.0.0.1: one that never answers,
    //! one that answers 503 before it answers, one that always fails.
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    fn remote(url: &str, timeout: u64) -> Remote {
        Remote::new(url, Net { allow_http: true, timeout: Duration::from_secs(timeout) }, Vec::new()).unwrap()
    }

    fn key() -> Key {
        Key::parse(&"ab".repeat(32)).unwrap()
    }

    fn entry_json() -> String {
        serde_json::json!({
            "schema": 1, "key": "ab".repeat(32), "wheel": "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl",
            "sha256": "cd".repeat(32), "size": 10, "variant": "sn", "version": "1.2.1+17cfb81",
            "created": "2026-11-30T00:00:00Z", "created_secs": 0, "provenance_sha256": "ef".repeat(32),
        })
        .to_string()
    }

    /// A server answering `503` to the first `fail` requests, then `entry_json()`.
    fn flaky(fail: usize) -> (String, Arc<AtomicUsize>) {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let n = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&n);
        std::thread::spawn(move || {
            for req in server.incoming_requests() {
                let i = seen.fetch_add(1, Ordering::SeqCst);
                let _ = if i < fail {
                    req.respond(tiny_http::Response::empty(503))
                } else {
                    req.respond(tiny_http::Response::from_string(entry_json()))
                };
            }
        });
        (url, n)
    }

    #[test]
    fn a_stalled_server_times_out_after_bounded_attempts() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let a = Arc::clone(&accepted);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in listener.incoming().flatten() {
                a.fetch_add(1, Ordering::SeqCst);
                held.push(s); // accept, read nothing, answer nothing
            }
        });
        let err = remote(&url, 1).entry(&key()).expect_err("a stalled server is an error");
        let msg = format!("{err:#}");
        assert!(msg.contains("timed out after 1 s") && msg.contains("3 attempts"), "{msg}");
        assert_eq!(forge_os::error::exit_of(&err), forge_os::error::Exit::Environment);
        // The accepting thread may run late on a loaded machine: wait for it, not for more.
        for _ in 0..50 {
            if accepted.load(Ordering::SeqCst) >= ATTEMPTS as usize {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), ATTEMPTS as usize);
    }

    /// A server that answers 200 with a 60 000-byte body (within entry.json's
    /// bound: a longer one is refused at its headers) and sends it one
    /// byte every 50 ms (at most 200 bytes, then it closes): each request must
    /// end at its total timeout, not when the body ends. Returns the bytes each
    /// connection took before the client hung up.
    fn trickling() -> (String, Arc<std::sync::Mutex<Vec<usize>>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&sent);
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    let mut req = [0u8; 4096];
                    let _ = s.read(&mut req);
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 60000\r\n\r\n");
                    let mut n = 0;
                    while n < 200 && s.write_all(b"x").is_ok() {
                        n += 1;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    log.lock().unwrap().push(n);
                });
            }
        });
        (url, sent)
    }

    #[test]
    fn a_trickling_server_is_cut_at_the_total_timeout() {
        let (url, sent) = trickling();
        let err = remote(&url, 1).entry(&key()).expect_err("a body that outlasts the timeout is an error");
        let msg = format!("{err:#}");
        assert!(msg.contains("timed out after 1 s") && msg.contains("3 attempts"), "{msg}");
        assert_eq!(forge_os::error::exit_of(&err), forge_os::error::Exit::Environment);
        // Every connection was hung up on long before the server's 200 bytes.
        for _ in 0..100 {
            if sent.lock().unwrap().len() == ATTEMPTS as usize {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let sent = sent.lock().unwrap().clone();
        assert_eq!(sent.len(), ATTEMPTS as usize, "{sent:?}");
        assert!(sent.iter().all(|n| *n < 200), "a connection was read to the end: {sent:?}");
    }

    /// An entry.json announced longer than the bound: refused when the headers
    /// arrive (exit 3, the URL and the bound named), once, not retried or read.
    #[test]
    fn an_announced_length_over_the_bound_is_refused_at_the_headers() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let a = Arc::clone(&accepted);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for mut s in listener.incoming().flatten() {
                a.fetch_add(1, Ordering::SeqCst);
                let _ = s.read(&mut [0u8; 4096]);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\nx");
                held.push(s); // never sends the rest
            }
        });
        let start = std::time::Instant::now();
        let err = remote(&url, 60).entry(&key()).expect_err("refused");
        let msg = format!("{err:#}");
        assert!(msg.contains(&format!("{url}/{}/entry.json", "ab".repeat(32))), "{msg}");
        assert!(msg.contains("announces 100000000 bytes, more than the 65536 bytes allowed"), "{msg}");
        assert_eq!(forge_os::error::exit_of(&err), forge_os::error::Exit::Environment);
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "not retried");
        assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    }

    /// Issue #54, example 7, for the remote cache: the signed entry says the wheel
    /// is 634,517 bytes, the server announces 100,000,000 and sends a byte at a
    /// time. The fetch ends when the headers arrive (exit 3, the wheel's URL and
    /// the signed size named), and nothing is published in the cache.
    #[test]
    fn a_wheel_is_bounded_by_the_size_its_signed_entry_states() {
        let sk = SecretKey::generate("cache-1").unwrap();
        let wheel = "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl";
        let mut re: RemoteEntry = serde_json::from_str(&entry_json()).unwrap();
        re.entry.size = 634_517;
        re.signatures.push(sk.sign(&re.message()));
        let body = serde_json::to_vec(&re).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let body = body.clone();
                std::thread::spawn(move || {
                    let mut req = [0u8; 4096];
                    let n = s.read(&mut req).unwrap_or(0);
                    if String::from_utf8_lossy(&req[..n]).contains("entry.json") {
                        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                        let _ = s.write_all(head.as_bytes()).and_then(|_| s.write_all(&body));
                        return;
                    }
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n");
                    while s.write_all(b"x").is_ok() {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                });
            }
        });
        let remote =
            Remote::new(&url, Net { allow_http: true, timeout: Duration::from_secs(600) }, vec![sk.public()]).unwrap();
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::at(d.path().join("cache"));
        let variant = VariantInfo {
            name: "sn".into(),
            arch: "x86_64".into(),
            cuda_arch_list: "9.0".into(),
            multinode: false,
            transport: None,
            rdma_core_home: None,
            env: Default::default(),
        };
        let start = std::time::Instant::now();
        let err = cache.fetch(&remote, &key(), &Expect { rev: "x", variant: &variant }).err().expect("refused");
        let msg = format!("{err:#}");
        assert!(msg.contains(&format!("{url}/{}/{wheel}", "ab".repeat(32))), "{msg}");
        assert!(msg.contains("more than the 634517 bytes signed"), "{msg}");
        assert_eq!(forge_os::error::exit_of(&err), forge_os::error::Exit::Environment);
        assert!(start.elapsed() < Duration::from_secs(20), "{:?}", start.elapsed());
        assert!(!d.path().join("cache/wheels").exists(), "nothing published");
        assert_eq!(std::fs::read_dir(d.path().join("cache/tmp")).unwrap().count(), 0, "no staging left");
    }

    #[test]
    fn a_503_is_retried_then_the_answer_is_used() {
        let (url, n) = flaky(2);
        let got = remote(&url, 5).entry(&key()).unwrap().unwrap().unwrap();
        assert_eq!(got.entry.key, "ab".repeat(32));
        assert_eq!(n.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_server_that_keeps_failing_is_given_up_on() {
        let (url, n) = flaky(usize::MAX);
        let err = remote(&url, 5).entry(&key()).err().unwrap();
        assert!(format!("{err:#}").contains("HTTP 503 Service Unavailable (3 attempts)"), "{err:#}");
        assert_eq!(n.load(Ordering::SeqCst), ATTEMPTS as usize);
    }

    #[test]
    fn nothing_listening_is_a_connect_error_not_a_hang() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let err = remote(&format!("http://127.0.0.1:{port}"), 5).entry(&key()).err().unwrap();
        assert!(format!("{err:#}").contains("cannot connect"), "{err:#}");
    }

    #[test]
    fn urls_are_checked_and_credentials_never_shown() {
        let net = Net { allow_http: false, timeout: Duration::from_secs(5) };
        for (url, want) in [
            ("http://cache.example", "--allow-http"),
            ("ftp://cache.example", "scheme `ftp`"),
            ("notaurl", "not a URL"),
            ("https://cache.exa\nmple/", "no space, tab, newline"),
            ("https://cache.example/?x=1", "no ?query"),
        ] {
            let e = Remote::new(url, net, Vec::new()).err().unwrap();
            assert!(format!("{e:#}").contains(want), "{url}: {e:#}");
            assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Usage);
        }
        let r = Remote::new("https://user:s3cret@cache.example/base/", net, Vec::new()).unwrap();
        let shown = r.shown_url(&key(), "entry.json");
        assert_eq!(shown, format!("https://***@cache.example/base/{}/entry.json", "ab".repeat(32)));
        assert!(!shown.contains("s3cret"));
    }
}
