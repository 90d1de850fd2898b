//! Many processes: rank detection from the launcher's environment and a small
//! TCP rendezvous (rank 0 serves, the others connect) with allgather and
//! barrier, every wait bounded by a deadline that names the missing rank.
//! Owns the wire protocol; must not touch a GPU.
//!
//! Wire format: frames of `u8 kind` + `u32 length (LE)` + bytes. kind 0 is
//! data, kind 1 an error message (a rank failed: the others stop and name it).
//! A leaf's hello is `DEFP1` + rank + world (u32 LE); rank 0 answers with a
//! data frame once everyone has arrived. An allgather is one data frame from
//! each leaf, answered by rank 0 with all `world` payloads in rank order.
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use forge_os::error::{check_interrupted, Failure};

const MAGIC: &[u8; 5] = b"DEFP1";
/// The largest rendezvous file read (one `HOST:PORT` line).
const ADDRESS: u64 = 4096;

/// Other ranks wait this much longer than rank 0, so rank 0's explanation
/// (which rank is missing) reaches them before their own deadline does.
const GRACE: Duration = Duration::from_secs(5);

/// This process's place in a job, from the launcher's environment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Ranks {
    pub rank: u32,
    pub local_rank: u32,
    pub world: u32,
    /// Which launcher's variables were read (`torchrun`, `mpirun`, `srun`).
    pub launcher: &'static str,
}

/// Read rank, local rank and world size: torchrun's `RANK/LOCAL_RANK/WORLD_SIZE`
/// first, then Open MPI's `OMPI_COMM_WORLD_*`, then Slurm's
/// `SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS`. None when no launcher set them.
pub fn detect(env: impl Fn(&str) -> Option<String>) -> Result<Option<Ranks>> {
    const SETS: [(&str, &str, &str, &str); 3] = [
        ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
        ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("srun", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
    ];
    for (launcher, rank, local, world) in SETS {
        let Some(r) = env(rank) else { continue };
        let num = |name: &str, v: String| -> Result<u32> {
            v.trim()
                .parse::<u32>()
                .map_err(|_| Failure::usage(format!("{name}={v:?} is not a rank number (set by {launcher})")).into())
        };
        let r = num(rank, r)?;
        let w = match env(world) {
            Some(w) => num(world, w)?,
            None => {
                return Err(Failure::usage(format!("{rank} is set but {world} is not"))
                    .hint(format!("set {world} to the number of processes (one per GPU)"))
                    .into())
            }
        };
        let l = match env(local) {
            Some(l) => num(local, l)?,
            None => r,
        };
        if w == 0 || r >= w {
            return Err(Failure::usage(format!("{rank}={r} is outside {world}={w}")).into());
        }
        return Ok(Some(Ranks { rank: r, local_rank: l, world: w, launcher }));
    }
    Ok(None)
}

/// Where the ranks meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendezvous {
    /// Rank 0 listens on this host:port (MASTER_ADDR:MASTER_PORT).
    Tcp(String),
    /// Rank 0 listens on an ephemeral port and writes `host:port` into this
    /// file on a shared filesystem; the others read it.
    File(PathBuf),
}

impl Rendezvous {
    /// From `--rendezvous` (`tcp://HOST:PORT`, `HOST:PORT`, `file:PATH`), else
    /// MASTER_ADDR and MASTER_PORT (default 29500).
    pub fn choose(flag: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Result<Rendezvous> {
        if let Some(f) = flag {
            if let Some(p) = f.strip_prefix("file:") {
                if p.is_empty() {
                    forge_os::bail_usage!("--rendezvous file: needs a path (file:/shared/dir/probe.addr)");
                }
                return Ok(Rendezvous::File(PathBuf::from(p)));
            }
            let hp = f.strip_prefix("tcp://").unwrap_or(f);
            if hp.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).is_none() {
                return Err(Failure::usage(format!(
                    "--rendezvous {f:?}: expected tcp://HOST:PORT, HOST:PORT or file:PATH"
                ))
                .into());
            }
            return Ok(Rendezvous::Tcp(hp.to_string()));
        }
        match env("MASTER_ADDR") {
            Some(addr) => {
                let port = env("MASTER_PORT").unwrap_or_else(|| "29500".into());
                if port.parse::<u16>().is_err() {
                    forge_os::bail_usage!("MASTER_PORT={port:?} is not a port number");
                }
                Ok(Rendezvous::Tcp(format!("{addr}:{port}")))
            }
            None => Err(Failure::usage("several ranks but no rendezvous: MASTER_ADDR is not set")
                .hint("export MASTER_ADDR=<rank 0's host> MASTER_PORT=29500, or pass --rendezvous file:/shared/path")
                .into()),
        }
    }
}

/// A connected group: rank 0 holds one stream per other rank.
pub struct Comm {
    pub rank: u32,
    pub world: u32,
    timeout: Duration,
    peers: Peers,
    /// The address file rank 0 wrote: its folder and name (removed when dropped).
    written: Option<(forge_os::fs::Tree, std::ffi::OsString)>,
}

enum Peers {
    Root(Vec<TcpStream>),
    Leaf(TcpStream),
}

fn resolve(hp: &str) -> Result<Vec<SocketAddr>> {
    Ok(hp.to_socket_addrs().with_context(|| format!("resolving rendezvous address {hp}"))?.collect())
}

fn names(ranks: &[u32]) -> String {
    let s: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    format!("{} {}", if ranks.len() == 1 { "rank" } else { "ranks" }, s.join(", "))
}

impl Comm {
    /// Meet the other ranks; every wait ends at `timeout`.
    pub fn connect(how: &Rendezvous, rank: u32, world: u32, timeout: Duration) -> Result<Comm> {
        let deadline = Instant::now() + timeout;
        if rank == 0 {
            let (listener, written) = match how {
                Rendezvous::Tcp(hp) => {
                    let addrs = resolve(hp)?;
                    // Listen on all interfaces at MASTER_PORT (MASTER_ADDR names this host).
                    let port = addrs.first().map(|a| a.port()).unwrap_or(29500);
                    let l = TcpListener::bind(("0.0.0.0", port))
                        .with_context(|| format!("rank 0 could not listen on port {port} (MASTER_PORT)"))?;
                    (l, None)
                }
                Rendezvous::File(path) => {
                    let l = TcpListener::bind("0.0.0.0:0").context("rank 0 could not open a listening socket")?;
                    let port = l.local_addr()?.port();
                    let written = write_address(path, &format!("{}:{port}", advertised_host()))?;
                    (l, Some(written))
                }
            };
            let mut comm = Comm { rank, world, timeout, peers: Peers::Root(Vec::new()), written };
            let streams = accept_all(&listener, world, deadline, timeout, how)?;
            comm.peers = Peers::Root(streams);
            let Peers::Root(streams) = &mut comm.peers else { unreachable!() };
            for s in streams.iter_mut() {
                send(s, 0, b"welcome")?;
            }
            Ok(comm)
        } else {
            let mut s = connect_leaf(how, deadline)?;
            let mut hello = MAGIC.to_vec();
            hello.extend(rank.to_le_bytes());
            hello.extend(world.to_le_bytes());
            send(&mut s, 0, &hello)?;
            let mut comm = Comm { rank, world, timeout, peers: Peers::Leaf(s), written: None };
            comm.leaf_recv("the start (every rank connected)", deadline + GRACE)?;
            Ok(comm)
        }
    }

    /// Everyone's `mine`, in rank order; `what` names the step in errors.
    pub fn allgather(&mut self, what: &str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let deadline = Instant::now() + self.timeout;
        let world = self.world;
        match &mut self.peers {
            Peers::Root(streams) => {
                let mut all = vec![mine.to_vec()];
                let mut failure = None;
                for (i, s) in streams.iter_mut().enumerate() {
                    let r = i as u32 + 1;
                    match recv(s, deadline) {
                        Ok((0, data)) => all.push(data),
                        Ok((_, msg)) => {
                            failure = Some(format!("rank {r} failed: {}", String::from_utf8_lossy(&msg)));
                            break;
                        }
                        Err(Wait::Timeout) => {
                            failure = Some(format!(
                                "rank {r} did not reach {what} within {} s (it hangs or was never started)",
                                self.timeout.as_secs()
                            ));
                            break;
                        }
                        Err(Wait::Closed(e)) => {
                            failure = Some(format!("rank {r} went away before {what} ({e}): it died or was killed"));
                            break;
                        }
                    }
                }
                if let Some(msg) = failure {
                    for s in streams.iter_mut() {
                        let _ = send(s, 1, msg.as_bytes());
                    }
                    return Err(Failure::problems(msg).into());
                }
                let mut reply = Vec::new();
                for d in &all {
                    reply.extend((d.len() as u32).to_le_bytes());
                    reply.extend(d);
                }
                for s in streams.iter_mut() {
                    send(s, 0, &reply)?;
                }
                Ok(all)
            }
            Peers::Leaf(s) => {
                send(s, 0, mine).with_context(|| format!("rank 0 went away before {what}"))?;
                let reply = self.leaf_recv(what, deadline + GRACE)?;
                let mut all = Vec::with_capacity(world as usize);
                let mut rest = &reply[..];
                while rest.len() >= 4 {
                    let n = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                    if rest.len() < 4 + n {
                        break;
                    }
                    all.push(rest[4..4 + n].to_vec());
                    rest = &rest[4 + n..];
                }
                if all.len() != world as usize {
                    bail!("rank 0 sent {} payloads for {what}, expected {world}", all.len());
                }
                Ok(all)
            }
        }
    }

    pub fn barrier(&mut self, what: &str) -> Result<()> {
        self.allgather(what, &[]).map(|_| ())
    }

    /// Tell the others this rank failed (best effort), so they stop at once.
    pub fn abort(&mut self, msg: &str) {
        match &mut self.peers {
            Peers::Root(streams) => {
                for s in streams.iter_mut() {
                    let _ = send(s, 1, format!("rank 0 failed: {msg}").as_bytes());
                }
            }
            Peers::Leaf(s) => {
                let _ = send(s, 1, msg.as_bytes());
            }
        }
    }

    fn leaf_recv(&mut self, what: &str, deadline: Instant) -> Result<Vec<u8>> {
        let Peers::Leaf(s) = &mut self.peers else { unreachable!("leaf_recv on rank 0") };
        match recv(s, deadline) {
            Ok((0, data)) => Ok(data),
            Ok((_, msg)) => Err(Failure::problems(String::from_utf8_lossy(&msg).into_owned()).into()),
            Err(Wait::Timeout) => Err(Failure::problems(format!(
                "rank 0 did not complete {what} within {} s (another rank hangs, or rank 0 does)",
                (self.timeout + GRACE).as_secs()
            ))
            .into()),
            Err(Wait::Closed(e)) => {
                Err(Failure::problems(format!("rank 0 went away before {what} ({e}): see rank 0's error")).into())
            }
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if let Some((folder, name)) = &self.written {
            let _ = folder.remove_file(name);
        }
    }
}

/// This host's name when it resolves, else 127.0.0.1.
fn advertised_host() -> String {
    let mut buf = [0u8; 256];
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).into_owned();
        if !name.is_empty() && (name.as_str(), 0).to_socket_addrs().map(|mut a| a.next().is_some()).unwrap_or(false) {
            return name;
        }
    }
    "127.0.0.1".into()
}

/// Write `addr` to the file `--rendezvous file:PATH` names (its folder made
/// when absent; a temporary file renamed over the name, so a reader sees all
/// of it or nothing). Returns its folder and name, for removing it.
fn write_address(path: &Path, addr: &str) -> Result<(forge_os::fs::Tree, std::ffi::OsString)> {
    let name = path.file_name().ok_or_else(|| {
        Failure::usage(format!("--rendezvous file:{}: not a file name", path.display()))
            .hint("pass file:PATH naming a file on a shared filesystem")
    })?;
    let folder = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let folder = forge_os::fs::Tree::create(folder, "rendezvous folder")?;
    folder.write(name, format!("{addr}\n").as_bytes())?;
    Ok((folder, name.to_os_string()))
}

fn accept_all(
    l: &TcpListener,
    world: u32,
    deadline: Instant,
    timeout: Duration,
    how: &Rendezvous,
) -> Result<Vec<TcpStream>> {
    l.set_nonblocking(true)?;
    let mut slots: Vec<Option<TcpStream>> = (1..world).map(|_| None).collect();
    while slots.iter().any(Option::is_none) {
        check_interrupted()?;
        match l.accept() {
            Ok((mut s, from)) => {
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                match recv(&mut s, Instant::now() + Duration::from_secs(5)) {
                    Ok((0, h)) if h.len() == 13 && &h[..5] == MAGIC => {
                        let r = u32::from_le_bytes(h[5..9].try_into().unwrap());
                        let w = u32::from_le_bytes(h[9..13].try_into().unwrap());
                        if w != world {
                            let msg = format!("rank {r} (from {from}) says the world size is {w}, rank 0 says {world}");
                            let _ = send(&mut s, 1, msg.as_bytes());
                            return Err(Failure::usage(msg).into());
                        }
                        match slots.get_mut(r.wrapping_sub(1) as usize) {
                            Some(slot @ None) => *slot = Some(s),
                            _ => {
                                let msg =
                                    format!("rank {r} (from {from}) arrived twice or is out of range (world {world})");
                                let _ = send(&mut s, 1, msg.as_bytes());
                                return Err(Failure::usage(msg).into());
                            }
                        }
                    }
                    _ => continue, // not one of ours (a port scanner, a stale client): ignore
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<u32> =
                        slots.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| i as u32 + 1).collect();
                    let err = format!(
                        "{} never arrived at the rendezvous ({}) within {} s",
                        names(&missing),
                        describe(how),
                        timeout.as_secs()
                    );
                    for s in slots.iter_mut().flatten() {
                        let _ = send(s, 1, err.as_bytes());
                    }
                    return Err(Failure::problems(err)
                        .hint("start one process per GPU with the same WORLD_SIZE and rendezvous, or raise --timeout")
                        .into());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).context("accepting a rank's connection"),
        }
    }
    Ok(slots.into_iter().map(|s| s.expect("all arrived")).collect())
}

fn describe(how: &Rendezvous) -> String {
    match how {
        Rendezvous::Tcp(hp) => format!("tcp {hp}"),
        Rendezvous::File(p) => format!("file {}", p.display()),
    }
}

fn connect_leaf(how: &Rendezvous, deadline: Instant) -> Result<TcpStream> {
    let mut last = String::from("nothing tried");
    loop {
        check_interrupted()?;
        let target = match how {
            Rendezvous::Tcp(hp) => Some(hp.clone()),
            Rendezvous::File(p) => match forge_os::fs::named::read_text(p, "rendezvous file", ADDRESS) {
                Ok(s) if s.ends_with('\n') => Some(s.trim().to_string()),
                Ok(_) => None,
                Err(e) => {
                    last = format!("{e:#}");
                    None
                }
            },
        };
        if let Some(hp) = target {
            match resolve(&hp).and_then(|a| {
                a.iter()
                    .find_map(|a| TcpStream::connect_timeout(a, Duration::from_millis(500)).ok())
                    .ok_or_else(|| anyhow!("connection refused"))
            }) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    return Ok(s);
                }
                Err(e) => last = format!("{hp}: {e}"),
            }
        }
        if Instant::now() >= deadline {
            return Err(Failure::problems(format!(
                "rank 0 never answered at the rendezvous ({}): {last}",
                describe(how)
            ))
            .hint("start rank 0 too (same MASTER_ADDR/MASTER_PORT or --rendezvous), or raise --timeout")
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn send(s: &mut TcpStream, kind: u8, data: &[u8]) -> Result<()> {
    let mut frame = Vec::with_capacity(5 + data.len());
    frame.push(kind);
    frame.extend((data.len() as u32).to_le_bytes());
    frame.extend(data);
    s.write_all(&frame).context("sending to a rank")?;
    Ok(())
}

/// Largest frame a rank accepts.
const MAX_FRAME: usize = 64 << 20;

enum Wait {
    Timeout,
    Closed(String),
}

/// One frame, waiting at most until `deadline` (Ctrl-C counts as closed).
fn recv(s: &mut TcpStream, deadline: Instant) -> std::result::Result<(u8, Vec<u8>), Wait> {
    let mut head = [0u8; 5];
    read_exact(s, &mut head, deadline)?;
    let n = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    // Frames carry small per-rank facts; a peer announcing more is not one of ours.
    if n > MAX_FRAME {
        return Err(Wait::Closed(format!("a frame of {n} bytes (more than {MAX_FRAME}) from a peer")));
    }
    let mut data = vec![0u8; n];
    read_exact(s, &mut data, deadline)?;
    Ok((head[0], data))
}

fn read_exact(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::result::Result<(), Wait> {
    let mut got = 0;
    while got < buf.len() {
        if check_interrupted().is_err() {
            return Err(Wait::Closed("interrupted".into()));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Wait::Timeout);
        }
        // Short slices so Ctrl-C is noticed.
        let _ = s.set_read_timeout(Some(left.min(Duration::from_millis(200))));
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(Wait::Closed("connection closed".into())),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => return Err(Wait::Closed(e.to_string())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn launchers_are_read_in_order() {
        assert_eq!(detect(env(&[])).unwrap(), None);
        let r = detect(env(&[("SLURM_PROCID", "5"), ("SLURM_LOCALID", "1"), ("SLURM_NTASKS", "8")])).unwrap().unwrap();
        assert_eq!((r.rank, r.local_rank, r.world, r.launcher), (5, 1, 8, "srun"));
        let r = detect(env(&[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4")])).unwrap().unwrap();
        assert_eq!((r.rank, r.local_rank, r.world, r.launcher), (2, 2, 4, "mpirun"));
        // torchrun inside srun: torchrun's own variables win.
        let r = detect(env(&[
            ("RANK", "3"),
            ("LOCAL_RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((r.rank, r.world, r.launcher), (3, 4, "torchrun"));
    }

    #[test]
    fn bad_launcher_values_are_usage_errors() {
        for (pairs, want) in [
            (&[("RANK", "x"), ("WORLD_SIZE", "2")][..], "not a rank number"),
            (&[("RANK", "2"), ("WORLD_SIZE", "2")][..], "outside"),
            (&[("RANK", "0")][..], "WORLD_SIZE is not"),
        ] {
            let e = detect(env(pairs)).unwrap_err();
            assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Usage, "{e:#}");
            assert!(format!("{e:#}").contains(want), "{e:#}");
        }
    }

    /// Rank 0's address file: its folder made, written whole, read back by a
    /// leaf; a folder on the way that is a file is bad input.
    #[test]
    fn the_address_file_is_written_whole_and_removed_with_its_tree() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("shared/rdzv");
        let (folder, name) = write_address(&path, "node-0:4242").unwrap();
        assert_eq!(forge_os::fs::named::read_text(&path, "rendezvous file", ADDRESS).unwrap(), "node-0:4242\n");
        assert_eq!(std::fs::read_dir(d.path().join("shared")).unwrap().count(), 1, "no temporary file left");
        folder.remove_file(&name).unwrap();
        assert!(!path.exists());
        std::fs::write(d.path().join("file"), b"x").unwrap();
        let e = write_address(&d.path().join("file/rdzv"), "h:1").unwrap_err();
        assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Usage, "{e:#}");
    }

    #[test]
    fn rendezvous_spec_from_flag_or_environment() {
        assert_eq!(Rendezvous::choose(Some("file:/s/a"), env(&[])).unwrap(), Rendezvous::File("/s/a".into()));
        assert_eq!(Rendezvous::choose(Some("tcp://h:1"), env(&[])).unwrap(), Rendezvous::Tcp("h:1".into()));
        assert_eq!(
            Rendezvous::choose(None, env(&[("MASTER_ADDR", "n1")])).unwrap(),
            Rendezvous::Tcp("n1:29500".into())
        );
        for bad in ["file:", "host", "h:notaport"] {
            assert!(Rendezvous::choose(Some(bad), env(&[])).is_err(), "{bad}");
        }
        assert!(Rendezvous::choose(None, env(&[])).is_err());
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    /// Run `f(comm)` for every rank of `world` on threads; results in rank order.
    fn group<T: Send + 'static>(
        world: u32,
        f: impl Fn(Comm) -> Result<T> + Send + Sync + Copy + 'static,
    ) -> Vec<Result<T>> {
        let how = Rendezvous::Tcp(format!("127.0.0.1:{}", free_port()));
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let how = how.clone();
                std::thread::spawn(move || f(Comm::connect(&how, r, world, Duration::from_secs(2))?))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn allgather_returns_every_payload_in_rank_order() {
        let out = group(4, |mut c| {
            let a = c.allgather("step one", format!("r{}", c.rank).as_bytes())?;
            c.barrier("step two")?;
            Ok(a)
        });
        for o in out {
            let got: Vec<String> = o.unwrap().iter().map(|b| String::from_utf8(b.clone()).unwrap()).collect();
            assert_eq!(got, ["r0", "r1", "r2", "r3"]);
        }
    }

    #[test]
    fn a_failing_or_vanishing_rank_is_named_to_everyone() {
        let out = group(3, |mut c| {
            if c.rank == 2 {
                c.abort("GPU on fire");
                return Ok(());
            }
            c.allgather("the dispatch", b"x").map(|_| ())
        });
        for r in [0, 1] {
            let e = format!("{:#}", out[r].as_ref().unwrap_err());
            assert!(e.contains("rank 2 failed: GPU on fire"), "rank {r}: {e}");
        }
        let out = group(3, |mut c| {
            if c.rank == 1 {
                return Ok(()); // drops the connection: died
            }
            c.allgather("the combine", b"x").map(|_| ())
        });
        for r in [0, 2] {
            let e = format!("{:#}", out[r].as_ref().unwrap_err());
            assert!(e.contains("rank 1 went away before the combine"), "rank {r}: {e}");
        }
    }

    #[test]
    fn a_hanging_rank_times_out_by_name() {
        let start = Instant::now();
        let out = group(2, |mut c| {
            if c.rank == 1 {
                std::thread::sleep(Duration::from_secs(4)); // alive but stuck past the 2 s timeout
                return Ok(());
            }
            c.allgather("the layout exchange", b"x").map(|_| ())
        });
        let e = format!("{:#}", out[0].as_ref().unwrap_err());
        assert!(e.contains("rank 1 did not reach the layout exchange within 2 s"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
