//! A revision's unit-time history kept in the Redis server a build's compiler cache
//! uses (`--compiler-cache redis://HOST:PORT[/DB]`), beside sccache's own entries:
//! key `<SCCACHE_REDIS_KEY_PREFIX>deepep-forge/unit-times/<rev>.json`, the history's
//! bytes as value. A tiny RESP client over one TCP connection (AUTH with sccache's
//! own credentials from the environment when set, SELECT for a database, then one
//! GET or SET), 3 s per step; `rediss://` (TLS) is not spoken here. The value read is
//! bounded and validated like a history file ([`super::parse`]). Must not decide
//! when to read or write.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::Times;
use forge_os::error::Failure;

/// Why a history could not be read or kept there (the storage answered otherwise, or not at all).
fn fail(why: impl Into<String>) -> Failure {
    Failure::env(why)
}

/// Each connect, read and write.
const LIMIT: Duration = Duration::from_secs(3);

/// Where a history lives in a Redis storage: its address, database and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub addr: String,
    pub db: Option<u32>,
    pub key: String,
}

/// The place of `rev`'s history in the storage `url` (`redis://HOST[:PORT][/DB][?db=N]`),
/// or why none (TLS, a revision that is not hex).
pub fn place(url: &str, rev: &str) -> Result<Place, Failure> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| fail("only redis:// (not rediss://) carries the unit-time history"))?;
    let name = super::file_name(rev).ok_or_else(|| fail("the revision is not a hex commit"))?;
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let addr = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        authority.to_string()
    } else {
        format!("{authority}:6379")
    };
    let path_db = tail.trim_start_matches('/').split(['?', '#']).next().unwrap_or("");
    let query_db = tail.split_once("?db=").map(|(_, n)| n.split(['&', '#']).next().unwrap_or(""));
    let db = [Some(path_db), query_db].into_iter().flatten().find(|s| !s.is_empty()).and_then(|s| s.parse().ok());
    let prefix = forge_os::environ::var("SCCACHE_REDIS_KEY_PREFIX").unwrap_or_default();
    Ok(Place { addr, db, key: format!("{prefix}deepep-forge/{}/{name}", super::FOLDER) })
}

/// The history at `p`: Ok(None) when the key is not set; a value that is not a valid
/// history is Err (why), as is a server that does not answer.
pub fn get(p: &Place) -> Result<Option<Times>, Failure> {
    let mut c = Conn::open(p)?;
    match c.call(&[b"GET", p.key.as_bytes()])? {
        Reply::Nil => Ok(None),
        Reply::Bulk(b) => super::parse(&b).map(Some).ok_or_else(|| fail("the stored history is not a valid one")),
        r => Err(fail(format!("unexpected reply to GET: {r:?}"))),
    }
}

/// Store `times` at `p` (replacing what was there).
pub fn set(p: &Place, times: &Times) -> Result<(), Failure> {
    let mut c = Conn::open(p)?;
    match c.call(&[b"SET", p.key.as_bytes(), &super::bytes(times)])? {
        Reply::Done => Ok(()),
        r => Err(fail(format!("unexpected reply to SET: {r:?}"))),
    }
}

#[derive(Debug)]
enum Reply {
    /// `+OK` or an integer: the command was done.
    Done,
    Bulk(Vec<u8>),
    Nil,
}

struct Conn {
    r: BufReader<TcpStream>,
}

impl Conn {
    /// Connected, authenticated with sccache's credentials when set, the database selected.
    fn open(p: &Place) -> Result<Conn, Failure> {
        let sock = p
            .addr
            .to_socket_addrs()
            .map_err(|e| fail(format!("{}: {e}", p.addr)))?
            .next()
            .ok_or_else(|| fail("no address"))?;
        let s = TcpStream::connect_timeout(&sock, LIMIT).map_err(|e| fail(format!("{}: {e}", p.addr)))?;
        s.set_read_timeout(Some(LIMIT)).ok();
        s.set_write_timeout(Some(LIMIT)).ok();
        let mut c = Conn { r: BufReader::new(s) };
        let user = forge_os::environ::var("SCCACHE_REDIS_USERNAME");
        if let Some(pass) = forge_os::environ::var("SCCACHE_REDIS_PASSWORD") {
            match &user {
                Some(u) => c.call(&[b"AUTH", u.as_bytes(), pass.as_bytes()])?,
                None => c.call(&[b"AUTH", pass.as_bytes()])?,
            };
        }
        if let Some(db) = p.db {
            c.call(&[b"SELECT", db.to_string().as_bytes()])?;
        }
        Ok(c)
    }

    /// One command as a RESP array of bulk strings, and its reply (an error reply is Err).
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, Failure> {
        let mut msg = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            msg.extend(format!("${}\r\n", a.len()).as_bytes());
            msg.extend_from_slice(a);
            msg.extend(b"\r\n");
        }
        self.r.get_mut().write_all(&msg).map_err(|e| fail(format!("writing to Redis: {e}")))?;
        self.reply()
    }

    fn reply(&mut self) -> Result<Reply, Failure> {
        let mut line = Vec::new();
        (&mut self.r).take(256).read_until(b'\n', &mut line).map_err(|e| fail(format!("reading from Redis: {e}")))?;
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        let (kind, rest) = text.split_at(text.len().min(1));
        match kind {
            "+" => Ok(Reply::Done),
            // An error reply's text is the server's: shown only as an excerpt.
            "-" => Err(fail(format!("Redis: {}", forge_os::input::excerpt(rest, 80)))),
            ":" => rest.parse::<i64>().map(|_| Reply::Done).map_err(|_| fail("a malformed integer reply")),
            "$" => match rest.parse::<i64>() {
                Ok(-1) => Ok(Reply::Nil),
                Ok(n) if n >= 0 && n as u64 <= super::MAX_BYTES => {
                    let mut b = vec![0; n as usize + 2];
                    self.r.read_exact(&mut b).map_err(|e| fail(format!("reading from Redis: {e}")))?;
                    b.truncate(n as usize);
                    Ok(Reply::Bulk(b))
                }
                _ => Err(fail(format!("a value over {} bytes, or malformed", super::MAX_BYTES))),
            },
            _ => Err(fail("not a Redis reply")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_place_follows_the_url() {
        let p = place("redis://10.0.0.1:7000/2", "ABCDEF1").unwrap();
        assert_eq!((p.addr.as_str(), p.db), ("10.0.0.1:7000", Some(2)));
        assert!(p.key.ends_with("deepep-forge/unit-times/abcdef1.json"), "{}", p.key);
        assert_eq!(place("redis://h", "abcdef1").unwrap().addr, "h:6379");
        assert_eq!(place("redis://h:1/?db=3", "abcdef1").unwrap().db, Some(3));
        assert!(place("rediss://h:1", "abcdef1").is_err());
        assert!(place("redis://h:1", "../x").is_err());
    }

    /// A fake server that answers every command with `reply`.
    fn serve(reply: &'static [u8]) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(reply);
            }
        });
        format!("redis://{addr}")
    }

    #[test]
    fn a_hostile_value_is_no_history() {
        for reply in [&b"$13\r\n{\"../a.o\": 1}\r\n"[..], b"$99999999999\r\n", b"hello\r\n", b"-ERR no\r\n"] {
            let p = place(&serve(reply), "abcdef1").unwrap();
            assert!(get(&p).is_err(), "{}", String::from_utf8_lossy(reply));
        }
        let p = place(&serve(b"$-1\r\n"), "abcdef1").unwrap();
        assert!(get(&p).unwrap().is_none());
        let p = place(&serve(b"$12\r\n{\"s/a.o\": 7}\r\n"), "abcdef1").unwrap();
        assert_eq!(get(&p).unwrap().unwrap().get("s/a.o"), Some(&7));
    }
}
