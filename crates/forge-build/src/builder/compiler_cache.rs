//! Where the compiler cache lives: a folder, or one of sccache's remote storages
//! (Redis, memcached, S3, WebDAV, GitHub Actions), so a fleet of machines shares one
//! cache. sccache is configured through its own variables: the endpoint (never with
//! credentials) joins the build's environment as a cache hook (not keyed: a cache
//! changes no byte); credentials and backend settings come only from the caller's
//! environment, by name, and reach only the sccache server this module starts: never
//! the plan, the build's environment, logs, provenance or the attestation.
//!
//! A server that is down or stops answering never fails a build. Before the build its
//! endpoint is checked (Redis and memcached: a TCP probe with a 3 s limit; the others:
//! sccache's own start-up check); if it does not answer, a note, and the compiler
//! wrappers use a local sccache server that stores nothing. During the build a watcher
//! probes it every 2 s and, after two failed probes, switches the wrappers the same way
//! (sccache itself would wait about 60 s on every compile against a dead Redis).
//! Owns the storage choice and its server; the type lives in `plan` (`CompilerCache`).
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

pub use super::plan::{Backend, CompilerCache};
use forge_os::error::Failure;
use forge_os::fs::Tree;
use forge_os::process::{Background, Cmd};

/// The file whose presence turns the remote cache off for the rest of a build
/// (the wrappers test it before every compile).
pub const OFF_MARKER: &str = "compiler-cache-off";
/// The socket of the local, storing-nothing sccache server used once it is off.
pub const LOCAL_SOCKET: &str = "sccache-local.sock";
/// The file in `<root>/bin` naming the units that compile first (`unit_order`; the nvcc
/// hook reads it): removed when the storage is turned off, so every compile goes local.
pub const FIRST_FILE: &str = "units-first";

const SCHEMES: &str = "a folder, redis://HOST:PORT[/DB], rediss://..., memcached://HOST:PORT, s3://BUCKET[/PREFIX], webdav+https://HOST/PATH or gha";

/// Parse `--compiler-cache`'s value (also `$DEEPEP_FORGE_COMPILER_CACHE` and the user
/// config): a URL of a remote backend, else a folder.
pub fn parse(value: &str) -> Result<CompilerCache> {
    if value == "gha" || value == "gha://" {
        return Ok(CompilerCache::Remote { url: "gha".into(), backend: Backend::Gha });
    }
    let Some((scheme, rest)) = value.split_once("://") else {
        return Ok(CompilerCache::Dir { path: PathBuf::from(value) });
    };
    let bad = |what: &str| -> anyhow::Error {
        Failure::usage(format!("--compiler-cache {}: {what}", forge_os::input::excerpt(&redacted(value), 120)))
            .hint(format!("give {SCHEMES}; credentials come from sccache's own variables in the environment (SCCACHE_REDIS_PASSWORD, AWS_SECRET_ACCESS_KEY, SCCACHE_WEBDAV_TOKEN, ACTIONS_RUNTIME_TOKEN, ...), never from the URL"))
            .into()
    };
    if value.chars().any(|c| c.is_control() || c.is_whitespace() || c == '\'' || c == '"' || c == '\\') {
        return Err(bad("a URL with a space, quote or control character"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(bad("credentials in the URL would be shown in plans and logs"));
    }
    if rest.contains('?') && !(matches!(scheme, "redis" | "rediss") && query_is_db_only(rest)) {
        return Err(bad("a query string (only redis's ?db=N is accepted)"));
    }
    if authority.is_empty() {
        return Err(bad("no host or bucket"));
    }
    let backend = match scheme {
        "redis" | "rediss" => Backend::Redis,
        "memcached" => Backend::Memcached,
        "s3" => Backend::S3,
        "webdav+https" | "webdav+http" => Backend::Webdav,
        _ => return Err(bad(&format!("unknown storage `{scheme}://`"))),
    };
    Ok(CompilerCache::Remote { url: value.to_string(), backend })
}

/// The value as a message may show it: user info and query replaced by `***`.
fn redacted(value: &str) -> String {
    let Some((scheme, rest)) = value.split_once("://") else { return value.to_string() };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, _)) => format!("{path}?***"),
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

fn query_is_db_only(rest: &str) -> bool {
    let q = rest.split_once('?').map(|(_, q)| q).unwrap_or("");
    let q = q.split('#').next().unwrap_or("");
    q.split('&')
        .all(|kv| kv.strip_prefix("db=").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
}

impl Backend {
    /// Variables read from the caller's environment by name and given only to the
    /// sccache server: credentials and backend settings (values never shown).
    pub fn server_only(self) -> &'static [&'static str] {
        match self {
            Backend::Redis => {
                &["SCCACHE_REDIS_USERNAME", "SCCACHE_REDIS_PASSWORD", "SCCACHE_REDIS_TTL", "SCCACHE_REDIS_KEY_PREFIX"]
            }
            Backend::Memcached => {
                &["SCCACHE_MEMCACHED_USERNAME", "SCCACHE_MEMCACHED_PASSWORD", "SCCACHE_MEMCACHED_EXPIRATION"]
            }
            Backend::S3 => &[
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN",
                "AWS_PROFILE",
                "AWS_REGION",
                "SCCACHE_REGION",
                "SCCACHE_ENDPOINT",
                "SCCACHE_S3_USE_SSL",
                "SCCACHE_S3_NO_CREDENTIALS",
            ],
            Backend::Webdav => &["SCCACHE_WEBDAV_USERNAME", "SCCACHE_WEBDAV_PASSWORD", "SCCACHE_WEBDAV_TOKEN"],
            Backend::Gha => &[
                "ACTIONS_CACHE_URL",
                "ACTIONS_RESULTS_URL",
                "ACTIONS_RUNTIME_TOKEN",
                "ACTIONS_CACHE_SERVICE_V2",
                "SCCACHE_GHA_VERSION",
            ],
        }
    }
}

impl CompilerCache {
    /// The folder made absolute (a relative folder names the caller's directory).
    pub fn absolute(self) -> Result<CompilerCache> {
        match self {
            CompilerCache::Dir { path } => Ok(CompilerCache::Dir {
                path: std::path::absolute(&path)
                    .map_err(|e| Failure::usage(format!("resolving {}: {e}", path.display())))?,
            }),
            remote => Ok(remote),
        }
    }

    /// sccache's variables for this storage (no credentials): (name, value).
    pub fn env(&self) -> Vec<(String, String)> {
        let v = |k: &str, s: String| (k.to_string(), s);
        match self {
            CompilerCache::Dir { path } => vec![v("SCCACHE_DIR", path.to_string_lossy().into_owned())],
            CompilerCache::Remote { url, backend } => match backend {
                Backend::Redis => vec![v("SCCACHE_REDIS_ENDPOINT", url.clone())],
                Backend::Memcached => {
                    vec![v("SCCACHE_MEMCACHED_ENDPOINT", format!("tcp://{}", url.trim_start_matches("memcached://")))]
                }
                Backend::S3 => {
                    let rest = url.trim_start_matches("s3://");
                    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                    let mut e = vec![v("SCCACHE_BUCKET", bucket.to_string())];
                    if !prefix.trim_matches('/').is_empty() {
                        e.push(v("SCCACHE_S3_KEY_PREFIX", prefix.trim_matches('/').to_string()));
                    }
                    e
                }
                Backend::Webdav => vec![v("SCCACHE_WEBDAV_ENDPOINT", url.trim_start_matches("webdav+").to_string())],
                Backend::Gha => vec![v("SCCACHE_GHA_ENABLED", "on".into())],
            },
        }
    }

    /// The caller's server-only variables that are set: (name, value). Values are
    /// secret: never printed, never in the plan; given only to the servers this module
    /// and `execute` start for the build (the first and, with a unit order, the later one).
    pub fn server_env(&self) -> Vec<(String, String)> {
        let CompilerCache::Remote { backend, .. } = self else { return Vec::new() };
        backend.server_only().iter().filter_map(|k| forge_os::environ::var(k).map(|v| (k.to_string(), v))).collect()
    }

    /// Refuse (exit 2, naming it) a credential of the storage set to a value that
    /// is not UTF-8: the server would start without it, and the plan would say it found it.
    pub fn check_credentials(&self) -> Result<()> {
        let CompilerCache::Remote { backend, .. } = self else { return Ok(()) };
        for k in backend.server_only() {
            if forge_os::environ::var_os(k).is_some_and(|v| v.to_str().is_none()) {
                return Err(Failure::usage(format!("the environment variable {k} is not UTF-8 text"))
                    .hint(format!("set {k} to UTF-8 text, or unset it"))
                    .into());
            }
        }
        Ok(())
    }

    /// What a plan shows: the folder or URL, and the names of the credentials found.
    pub fn describe(&self) -> String {
        match self {
            CompilerCache::Dir { path } => path.display().to_string(),
            CompilerCache::Remote { url, backend } => {
                let found: Vec<&str> =
                    backend.server_only().iter().copied().filter(|k| forge_os::environ::var_os(k).is_some()).collect();
                if found.is_empty() {
                    format!("{url} (shared; no credentials in the environment)")
                } else {
                    format!("{url} (shared; from the environment, values not shown: {})", found.join(", "))
                }
            }
        }
    }

    /// host:port a TCP probe can reach (Redis and memcached), else None.
    fn probe_address(&self) -> Option<(String, bool)> {
        let CompilerCache::Remote { url, backend } = self else { return None };
        let (rest, default_port, redis) = match backend {
            Backend::Redis => (url.split_once("://")?.1, 6379, true),
            Backend::Memcached => (url.split_once("://")?.1, 11211, false),
            _ => return None,
        };
        let authority = rest.split(['/', '?', '#']).next()?;
        let addr = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
            authority.to_string()
        } else {
            format!("{authority}:{default_port}")
        };
        // rediss:// speaks TLS: a plain TCP connect is the probe.
        Some((addr, redis && url.starts_with("redis://")))
    }
}

/// Does the storage answer? Redis gets a PING (any RESP reply counts: `-NOAUTH` is
/// an answer), memcached a connect; 3 s in all. `Ok` for storages that cannot be
/// probed this way (sccache checks them when its server starts).
pub fn reachable(cache: &CompilerCache) -> std::result::Result<(), String> {
    let Some((addr, ping)) = cache.probe_address() else { return Ok(()) };
    let limit = Duration::from_secs(3);
    let sock = addr.to_socket_addrs().map_err(|e| format!("cannot resolve {addr}: {e}"))?.next().ok_or("no address")?;
    let mut s = TcpStream::connect_timeout(&sock, limit).map_err(|e| format!("{addr}: {e}"))?;
    if ping {
        s.set_read_timeout(Some(limit)).ok();
        s.set_write_timeout(Some(limit)).ok();
        s.write_all(b"PING\r\n").map_err(|e| format!("{addr}: {e}"))?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).map_err(|e| format!("{addr}: no reply to PING ({e})"))?;
        if !matches!(b[0], b'+' | b'-') {
            return Err(format!("{addr}: not a Redis server"));
        }
    }
    Ok(())
}

/// The running remote cache of one build: the watcher thread, stopped on drop.
pub struct Session {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Before the build: probe the storage and start the sccache server with the
/// credentials (the build's own environment never holds them). Anything that does not
/// answer turns the remote cache off for this build (the marker) with a note; never an
/// error. `env` is the build's sccache environment (socket, endpoint).
pub fn start(
    cache: &CompilerCache,
    sccache: &Path,
    root: &Tree,
    env: &[(String, String)],
    servers: &mut Vec<Background>,
    notes: &mut Vec<String>,
) -> Option<Session> {
    if !matches!(cache, CompilerCache::Remote { .. }) {
        return None;
    }
    let off = |why: String, notes: &mut Vec<String>| {
        let _ = root.write(OFF_MARKER, why.as_bytes());
        notes.push(format!("compiler cache {}: {why}; compiled without it (the wheel is the same)", cache_url(cache)));
    };
    if let Err(e) = reachable(cache) {
        off(format!("not reachable ({e})"), notes);
        return None;
    }
    // The local server that stores nothing, ready for the wrappers once the storage is off.
    let local: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| !k.starts_with("SCCACHE_") || k == "SCCACHE_IDLE_TIMEOUT")
        .cloned()
        .chain([("SCCACHE_NO_CACHE".to_string(), "1".to_string())])
        .collect();
    match serve(sccache, &root.join(LOCAL_SOCKET), &local, &[]) {
        Ok(s) => servers.push(s),
        Err(e) => notes.push(format!("the stand-by sccache server did not start: {e:#}")),
    }
    match serve(sccache, &socket(env, root.path()), env, &cache.server_env()) {
        Ok(s) => servers.push(s),
        Err(e) => {
            // sccache's message names the endpoint, never the credentials (they are not in the URL)
            let first = format!("{e:#}").lines().next().unwrap_or("").to_string();
            off(format!("the sccache server did not start ({first})"), notes);
            return None;
        }
    }
    cache.probe_address()?;
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, c2) = (stop.clone(), cache.clone());
    let Ok(root) = root.try_clone() else { return None };
    let thread = std::thread::spawn(move || watch(&c2, &flag, &root));
    Some(Session { stop, thread: Some(thread) })
}

/// The socket the build's wrappers talk to (`SCCACHE_SERVER_UDS` of `env`).
pub fn socket(env: &[(String, String)], root: &Path) -> PathBuf {
    env.iter()
        .find(|(k, _)| k == "SCCACHE_SERVER_UDS")
        .map(|(_, v)| PathBuf::from(v))
        .unwrap_or_else(|| root.join("sccache.sock"))
}

/// sccache's server in the foreground (`SCCACHE_NO_DAEMON`), a child of this command
/// listening on `socket`, with exactly `env` (the build's) and `secret` (a shared
/// storage's credentials, which only the server sees): the wrappers find it there and
/// start no server of their own, and it ends when the returned [`Background`] is
/// dropped, on every way out (sccache's own daemon outlives `--stop-server` at times
/// and idles on for 10 minutes on a socket that is gone).
pub fn serve(
    sccache: &Path,
    socket: &Path,
    env: &[(String, String)],
    secret: &[(String, String)],
) -> Result<Background> {
    serve_at(sccache, socket, env, secret, 0)
}

/// [`serve`] at a lower CPU priority (`nice`): the server and every compile it runs.
pub fn serve_at(
    sccache: &Path,
    socket: &Path,
    env: &[(String, String)],
    secret: &[(String, String)],
    nice: i32,
) -> Result<Background> {
    let mut c = Cmd::new(sccache, format!("start sccache's server on {}", socket.display()));
    if nice > 0 {
        c.lower_priority(nice);
    }
    c.cmd.env_clear().envs(env.iter().cloned()).envs(secret.iter().cloned());
    c.cmd.env("SCCACHE_SERVER_UDS", socket).env("SCCACHE_START_SERVER", "1").env("SCCACHE_NO_DAEMON", "1");
    c.cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut server = c.background()?;
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while !forge_os::fs::machine::exists(socket) {
        forge_os::error::check_interrupted()?;
        if !server.running() {
            anyhow::bail!("sccache's server exited before listening on {}", socket.display());
        }
        if std::time::Instant::now() >= end {
            anyhow::bail!("sccache's server did not listen on {} within 20 s", socket.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(server)
}

/// Every 2 s while the build runs: two failed probes in a row turn the cache off.
fn watch(cache: &CompilerCache, stop: &AtomicBool, root: &Tree) {
    let mut failed = 0;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..20 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        match reachable(cache) {
            Ok(()) => failed = 0,
            Err(e) => {
                failed += 1;
                if failed >= 2 {
                    let _ = root.write(OFF_MARKER, format!("stopped answering during the build ({e})").as_bytes());
                    // No unit order from now on: every compile goes to the local server (`canon::route`).
                    let _ = root.remove_file(Path::new("bin").join(FIRST_FILE));
                    return;
                }
            }
        }
    }
}

/// After the build: a note if the cache was turned off while it ran, and the local
/// server (started by the wrappers once it was off) stopped.
pub fn finish(cache: Option<&CompilerCache>, sccache: &Path, root: &Tree, started_off: bool, notes: &mut Vec<String>) {
    let Ok(Some(why)) = root.read_text_opt(OFF_MARKER, 4096) else { return };
    if let (Some(c), false) = (cache, started_off) {
        notes.push(format!(
            "compiler cache {}: {why}; the rest compiled without it (the wheel is the same)",
            cache_url(c)
        ));
    }
    let mut stop = Cmd::new(sccache, "stop the build's local sccache server");
    stop.args(["--stop-server"]);
    stop.cmd.env("SCCACHE_SERVER_UDS", root.join(LOCAL_SOCKET));
    let _ = stop.output();
}

fn cache_url(c: &CompilerCache) -> String {
    match c {
        CompilerCache::Dir { path } => path.display().to_string(),
        CompilerCache::Remote { url, .. } => url.clone(),
    }
}

/// The lines every compiler wrapper runs first: once the marker exists, compile
/// through a local server that stores nothing. The same text for every build (the
/// wrappers are part of the cache key; the storage is not).
pub fn wrapper_guard(root: &Path) -> String {
    let q = |p: PathBuf| format!("'{}'", p.display());
    format!(
        "if [ -e {marker} ]; then\n\
         \x20 SCCACHE_SERVER_UDS={local}; SCCACHE_NO_CACHE=1; export SCCACHE_SERVER_UDS SCCACHE_NO_CACHE\n\
         \x20 unset SCCACHE_DIR SCCACHE_REDIS_ENDPOINT SCCACHE_MEMCACHED_ENDPOINT SCCACHE_BUCKET SCCACHE_WEBDAV_ENDPOINT SCCACHE_GHA_ENABLED\n\
         fi\n",
        marker = q(root.join(OFF_MARKER)),
        local = q(root.join(LOCAL_SOCKET)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_a_backend_and_credentials_in_them_are_refused() {
        assert!(matches!(parse("/srv/cc").unwrap(), CompilerCache::Dir { .. }));
        assert!(matches!(
            parse("redis://127.0.0.1:6379").unwrap(),
            CompilerCache::Remote { backend: Backend::Redis, .. }
        ));
        assert!(matches!(parse("redis://h:1/?db=2").unwrap(), CompilerCache::Remote { backend: Backend::Redis, .. }));
        assert!(matches!(parse("s3://bucket/pre").unwrap(), CompilerCache::Remote { backend: Backend::S3, .. }));
        assert!(matches!(parse("gha").unwrap(), CompilerCache::Remote { backend: Backend::Gha, .. }));
        for bad in [
            "redis://:secret@h:1",
            "redis://u:p@h",
            "s3://AKIA:x@b",
            "ftp://h",
            "redis://",
            "redis://h?password=x",
            "webdav+https://h/x?token=1",
            "redis://h\n::error::x",
        ] {
            let e = format!("{:#}", parse(bad).unwrap_err());
            assert!(!e.contains("secret") && !e.contains("\n::error"), "{e}");
        }
        let e = parse("redis://:hunter2@h:1").unwrap_err();
        assert!(!format!("{e:#}").contains("hunter2"), "the message must not echo the password");
    }

    #[test]
    fn endpoints_go_to_sccache_variables_without_credentials() {
        let s3 = parse("s3://b/team/cc/").unwrap();
        assert_eq!(
            s3.env(),
            vec![("SCCACHE_BUCKET".into(), "b".into()), ("SCCACHE_S3_KEY_PREFIX".into(), "team/cc".into())]
        );
        let m = parse("memcached://10.0.0.1:11211").unwrap();
        assert_eq!(m.env(), vec![("SCCACHE_MEMCACHED_ENDPOINT".into(), "tcp://10.0.0.1:11211".into())]);
        let w = parse("webdav+https://cache.example/cc").unwrap();
        assert_eq!(w.env(), vec![("SCCACHE_WEBDAV_ENDPOINT".into(), "https://cache.example/cc".into())]);
    }

    #[test]
    fn a_closed_port_is_not_reachable_in_bounded_time() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let t = std::time::Instant::now();
        assert!(reachable(&parse(&format!("redis://127.0.0.1:{port}")).unwrap()).is_err());
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}
