//! The dispatch/combine round trip over peer pointers and its bandwidth,
//! against the copy engine in the same run. Owns buffer layout, the phase
//! order (with a barrier between phases) and the host mirror of the routing
//! (expected counts); must not decide verdicts or print.
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::gpu::{elapsed_ms, Arg, Ctx, Gpu, Stream};
use super::rendezvous::Comm;

/// Problem size of the round trip.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Shape {
    pub tokens: u32,
    pub hidden: u32,
    pub topk: u32,
    /// Timed repetitions of each phase.
    pub iters: u32,
    /// Blocks of 512 threads per multiprocessor for dispatch and combine.
    pub blocks_per_sm: u32,
}

/// Most ranks one kernel group may hold (MAX_RANKS in runtime/dispatch.cu).
pub const MAX_RANKS: usize = 16;

/// Host mirror of `expert_of` in runtime/dispatch.cu.
pub fn expert_of(src: u32, t: u32, j: u32, world: u32, topk: u32) -> u32 {
    let e = world * topk;
    let base = t.wrapping_mul(2654435761).wrapping_add(src.wrapping_mul(40503)) >> 7;
    base.wrapping_add(j * world) % e
}

/// Expected rows each rank sends each rank (`[src][dst]`) and, per rank, the
/// rows each of its `topk` local experts receives.
pub fn expected(world: u32, tokens: u32, topk: u32) -> (Vec<Vec<u32>>, Vec<Vec<i64>>) {
    let mut rows = vec![vec![0u32; world as usize]; world as usize];
    let mut experts = vec![vec![0i64; topk as usize]; world as usize];
    for s in 0..world {
        for t in 0..tokens {
            let mut mask = 0u32;
            for j in 0..topk {
                let e = expert_of(s, t, j, world, topk);
                mask |= 1 << (e / topk);
                experts[(e / topk) as usize][(e % topk) as usize] += 1;
            }
            for d in 0..world {
                if mask >> d & 1 == 1 {
                    rows[s as usize][d as usize] += 1;
                }
            }
        }
    }
    (rows, experts)
}

/// How the ranks of the kernel group talk: all GPUs in this process, or one
/// GPU per process through the rendezvous.
pub enum Link<'a> {
    Local,
    Procs(&'a mut Comm),
}

/// One rank's measured outcome (gathered to rank 0).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankReport {
    pub rank: u32,
    pub gpu: i32,
    /// Rows this rank's layout kernel sends to each rank.
    pub sent_rows: Vec<u32>,
    /// The same, from the host mirror of the routing.
    pub expected_sent_rows: Vec<u32>,
    /// Rows received per local expert (check kernel) and expected.
    pub expert_counts: Vec<i64>,
    pub expected_expert_counts: Vec<i64>,
    /// Elements of received rows that differ from the sender's tokens (+ bad meta rows).
    pub dispatch_mismatches: u64,
    /// Elements of combine(dispatch(x)) that differ from 2·x.
    pub combine_mismatches: u64,
    /// Bytes this rank writes into other GPUs per dispatch (the same per combine, reversed).
    pub cross_bytes: u64,
    pub dispatch_ms: f64,
    pub combine_ms: f64,
    pub copy_engine_ms: f64,
    /// One sender at a time: this rank to each peer (empty with one rank).
    pub pairs: Vec<PairReport>,
}

/// One ordered pair timed alone: the SM copy kernel through the peer pointer
/// against cuMemcpyPeerAsync, the same bytes, `iters` times each.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairReport {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub kernel_ms: f64,
    pub copy_engine_ms: f64,
}

impl PairReport {
    pub fn gbps(&self, iters: u32, ms: f64) -> f64 {
        if ms > 0.0 {
            (self.bytes * iters as u64) as f64 / (ms * 1e-3) / 1e9
        } else {
            0.0
        }
    }
}

struct Side {
    gpu: Gpu,
    rank: u32,
    x: u64,
    slot: u64,
    count: u64,
    recv: u64,
    meta: u64,
    comb: u64,
    out: u64,
    ecount: u64,
    bad: u64,
    recv_ptrs: u64,
    meta_ptrs: u64,
    comb_ptrs: u64,
    rows_from: u64,
    /// Peers' receive buffers as this side addresses them (and their contexts when local).
    peer_recv: Vec<u64>,
    peer_ctx: Vec<Option<Ctx>>,
    peer_streams: Vec<Stream>,
}

fn gather(link: &mut Link, what: &str, mine: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
    match link {
        Link::Local => Ok(mine),
        Link::Procs(c) => c.allgather(what, &mine[0]),
    }
}

/// Wait for every local GPU, then for every rank.
fn barrier(link: &mut Link, sides: &[Side], what: &str) -> Result<()> {
    for s in sides {
        s.gpu.sync().with_context(|| format!("before {what}"))?;
    }
    if let Link::Procs(c) = link {
        c.barrier(what)?;
    }
    Ok(())
}

/// The round trip's sizes, shared by every phase.
#[derive(Clone, Copy)]
struct Geo {
    w: usize,
    t: u32,
    h: u32,
    k: u32,
    /// Bytes of one token row (bf16).
    row: usize,
    /// Rows each source's region of a receive buffer holds (all its tokens).
    cap: u32,
    shape: Shape,
}

/// Run layout, dispatch, check, combine, reduce-check, then the timed loops.
/// `gpus`: all GPUs of the group (Local) or this process's one GPU (Procs).
/// Returns every rank's report (rank 0 gets all; other ranks too).
pub fn roundtrip(gpus: Vec<Gpu>, link: &mut Link, shape: Shape) -> Result<Vec<RankReport>> {
    let (world, first_rank) = match link {
        Link::Local => (gpus.len() as u32, 0),
        Link::Procs(c) => (c.world, c.rank),
    };
    if world as usize > MAX_RANKS {
        bail!("the kernel group has {world} ranks; runtime/dispatch.cu handles at most {MAX_RANKS}");
    }
    let Shape { tokens: t, hidden: h, topk: k, iters, .. } = shape;
    let g = Geo { w: world as usize, t, h, k, row: h as usize * 2, cap: t, shape };
    let mut sides = Vec::new();
    for (i, gpu) in gpus.into_iter().enumerate() {
        sides.push(alloc_side(gpu, first_rank + i as u32, &g)?);
    }
    connect(link, &mut sides, g.w)?;
    let counts = layout(link, &sides, &g)?;
    checked(link, &sides, &g)?;

    // Timed loops: every GPU sends at once, the same bytes each way.
    let d_ms = timed(link, &sides, "the dispatch timing", iters, &|s| dispatch(s, &g))?;
    let c_ms = timed(link, &sides, "the combine timing", iters, &|s| combine(s, &g))?;
    let e_ms = timed(link, &sides, "the copy-engine timing", iters, &|s| fork_join(s, &counts, &g))?;
    let mut pairs = pair_timings(link, &sides, &g)?;

    let mut mine = Vec::new();
    let (expected_rows, expected_experts) = expected(world, t, k);
    for (i, s) in sides.iter().enumerate() {
        let r = s.rank as usize;
        let bad: Vec<u64> = s.gpu.download(s.bad, 2)?;
        let ec: Vec<i32> = s.gpu.download(s.ecount, k as usize)?;
        let cross: u64 = (0..g.w).filter(|&d| d != r).map(|d| counts[r][d] as u64 * g.row as u64).sum();
        let rep = RankReport {
            rank: s.rank,
            gpu: s.gpu.ordinal,
            sent_rows: counts[r].clone(),
            expected_sent_rows: expected_rows[r].clone(),
            expert_counts: ec.iter().map(|&c| c as i64).collect(),
            expected_expert_counts: expected_experts[r].clone(),
            dispatch_mismatches: bad[0],
            combine_mismatches: bad[1],
            cross_bytes: cross,
            dispatch_ms: d_ms[i],
            combine_ms: c_ms[i],
            copy_engine_ms: e_ms[i],
            pairs: std::mem::take(&mut pairs[i]),
        };
        mine.push(serde_json::to_vec(&rep)?);
    }
    let all = gather(link, "the result exchange", mine)?;
    all.iter().map(|b| serde_json::from_slice(b).context("a rank's report")).collect()
}

/// One rank's buffers on its GPU.
fn alloc_side(gpu: Gpu, rank: u32, g: &Geo) -> Result<Side> {
    let (w, tu, ku, row) = (g.w, g.t as usize, g.k as usize, g.row);
    let a = |n: usize| gpu.alloc(n);
    Ok(Side {
        rank,
        x: a(tu * row)?,
        slot: a(tu * w * 4)?,
        count: a(w * 4)?,
        recv: a(w * tu * row)?,
        meta: a(w * tu * (ku + 1) * 4)?,
        comb: a(w * tu * row)?,
        out: a(tu * row)?,
        ecount: a(ku * 4)?,
        bad: a(16)?,
        recv_ptrs: a(w * 8)?,
        meta_ptrs: a(w * 8)?,
        comb_ptrs: a(w * 8)?,
        rows_from: a(w * 4)?,
        peer_recv: Vec::new(),
        peer_ctx: Vec::new(),
        peer_streams: Vec::new(),
        gpu,
    })
}

/// Everyone's buffers, as each side addresses them (peer access within this
/// process, CUDA IPC handles across processes), and one stream per peer.
fn connect(link: &mut Link, sides: &mut [Side], w: usize) -> Result<()> {
    match link {
        Link::Local => {
            for a in sides.iter() {
                for b in sides.iter() {
                    if a.gpu.ordinal != b.gpu.ordinal {
                        a.gpu.enable_peer(&b.gpu)?;
                    }
                }
            }
            let recv: Vec<u64> = sides.iter().map(|s| s.recv).collect();
            let meta: Vec<u64> = sides.iter().map(|s| s.meta).collect();
            let comb: Vec<u64> = sides.iter().map(|s| s.comb).collect();
            let ctxs: Vec<_> = sides.iter().map(|s| Some(s.gpu.ctx)).collect();
            for s in sides.iter_mut() {
                s.gpu.upload(s.recv_ptrs, &recv)?;
                s.gpu.upload(s.meta_ptrs, &meta)?;
                s.gpu.upload(s.comb_ptrs, &comb)?;
                s.peer_recv = recv.clone();
                s.peer_ctx = ctxs.clone();
            }
        }
        Link::Procs(c) => {
            let s = &mut sides[0];
            let mut mine = Vec::new();
            for p in [s.recv, s.meta, s.comb] {
                mine.extend(s.gpu.ipc_handle(p)?);
            }
            let all = c.allgather("the IPC handle exchange", &mine)?;
            let mut ptrs = [vec![0u64; w], vec![0u64; w], vec![0u64; w]];
            for (r, handles) in all.iter().enumerate() {
                for (b, p) in ptrs.iter_mut().enumerate() {
                    p[r] = if r as u32 == s.rank {
                        [s.recv, s.meta, s.comb][b]
                    } else {
                        s.gpu.ipc_open(&handles[b * 64..(b + 1) * 64]).with_context(|| {
                            format!(
                                "opening rank {r}'s buffers (CUDA IPC): are both GPUs on this host and P2P-connected?"
                            )
                        })?
                    };
                }
            }
            s.gpu.upload(s.recv_ptrs, &ptrs[0])?;
            s.gpu.upload(s.meta_ptrs, &ptrs[1])?;
            s.gpu.upload(s.comb_ptrs, &ptrs[2])?;
            s.peer_recv = ptrs[0].clone();
            s.peer_ctx = vec![None; w];
        }
    }
    for s in sides.iter_mut() {
        s.peer_streams = (0..w).map(|_| s.gpu.new_stream()).collect::<Result<_>>()?;
    }
    Ok(())
}

/// Layout: rows per destination, exchanged so receivers know their regions.
/// Returns counts[src][dst].
fn layout(link: &mut Link, sides: &[Side], g: &Geo) -> Result<Vec<Vec<u32>>> {
    let (t, h, w, k) = (g.t, g.h, g.w, g.k);
    for s in sides {
        let grid = s.gpu.multiprocessors as u32 * 4;
        s.gpu.launch("fill", grid, 512, &[Arg::I(s.rank as i32), Arg::I(t as i32), Arg::I(h as i32), Arg::P(s.x)])?;
        s.gpu.launch(
            "layout",
            1,
            512,
            &[
                Arg::I(s.rank as i32),
                Arg::I(t as i32),
                Arg::I(w as i32),
                Arg::I(k as i32),
                Arg::P(s.slot),
                Arg::P(s.count),
            ],
        )?;
    }
    let mut mine = Vec::new();
    for s in sides {
        let c: Vec<i32> = s.gpu.download(s.count, w)?;
        mine.push(c.iter().flat_map(|x| x.to_le_bytes()).collect());
    }
    let counts: Vec<Vec<u32>> = gather(link, "the layout exchange", mine)?
        .iter()
        .map(|b| b.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()).max(0) as u32).collect())
        .collect();
    for s in sides {
        let from: Vec<i32> = (0..w).map(|src| counts[src][s.rank as usize] as i32).collect();
        s.gpu.upload(s.rows_from, &from)?;
    }
    Ok(counts)
}

fn dispatch(s: &Side, g: &Geo) -> Result<()> {
    s.gpu.launch(
        "dispatch",
        s.gpu.multiprocessors as u32 * g.shape.blocks_per_sm,
        512,
        &[
            Arg::I(s.rank as i32),
            Arg::I(g.t as i32),
            Arg::I(g.h as i32),
            Arg::I(g.w as i32),
            Arg::I(g.k as i32),
            Arg::I(g.cap as i32),
            Arg::P(s.x),
            Arg::P(s.slot),
            Arg::P(s.recv_ptrs),
            Arg::P(s.meta_ptrs),
        ],
    )
}

fn combine(s: &Side, g: &Geo) -> Result<()> {
    s.gpu.launch(
        "combine",
        s.gpu.multiprocessors as u32 * g.shape.blocks_per_sm,
        512,
        &[
            Arg::I(s.rank as i32),
            Arg::I(g.h as i32),
            Arg::I(g.w as i32),
            Arg::I(g.cap as i32),
            Arg::P(s.rows_from),
            Arg::P(s.recv),
            Arg::P(s.comb_ptrs),
        ],
    )
}

/// The checked round trip: dispatch, check what arrived, combine, check the sums.
fn checked(link: &mut Link, sides: &[Side], g: &Geo) -> Result<()> {
    let (t, h, w, k, cap) = (g.t as i32, g.h as i32, g.w as i32, g.k as i32, g.cap as i32);
    barrier(link, sides, "dispatch")?;
    for s in sides {
        dispatch(s, g)?;
    }
    barrier(link, sides, "the receive check")?;
    for s in sides {
        let grid = s.gpu.multiprocessors as u32 * 4;
        s.gpu.launch(
            "check_recv",
            grid,
            512,
            &[
                Arg::I(s.rank as i32),
                Arg::I(h),
                Arg::I(w),
                Arg::I(k),
                Arg::I(cap),
                Arg::P(s.rows_from),
                Arg::P(s.recv),
                Arg::P(s.meta),
                Arg::P(s.ecount),
                Arg::P(s.bad),
            ],
        )?;
        combine(s, g)?;
    }
    barrier(link, sides, "the combine check")?;
    for s in sides {
        s.gpu.launch(
            "reduce_check",
            s.gpu.multiprocessors as u32 * 4,
            512,
            &[
                Arg::I(s.rank as i32),
                Arg::I(t),
                Arg::I(h),
                Arg::I(w),
                Arg::I(k),
                Arg::I(cap),
                Arg::P(s.slot),
                Arg::P(s.comb),
                Arg::P(s.out),
                Arg::P(s.bad + 8),
            ],
        )?;
    }
    Ok(())
}

/// `iters` runs of `f` on every side at once, timed by events on each side's stream.
fn timed(link: &mut Link, sides: &[Side], name: &str, iters: u32, f: &dyn Fn(&Side) -> Result<()>) -> Result<Vec<f64>> {
    barrier(link, sides, name)?;
    let mut ev = Vec::new();
    for s in sides {
        let (a, b) = (s.gpu.event()?, s.gpu.event()?);
        s.gpu.record(a, s.gpu.stream)?;
        for _ in 0..iters {
            f(s)?;
        }
        s.gpu.record(b, s.gpu.stream)?;
        ev.push((a, b));
    }
    ev.iter().map(|&(a, b)| elapsed_ms(a, b)).collect()
}

/// The copy engine moving the same rows as dispatch: copies go on one stream
/// per peer, forked from and joined into the main stream.
fn fork_join(s: &Side, counts: &[Vec<u32>], g: &Geo) -> Result<()> {
    let start = s.gpu.event()?;
    s.gpu.record(start, s.gpu.stream)?;
    for &ps in &s.peer_streams {
        s.gpu.wait(ps, start)?;
    }
    for (d, &rows) in counts[s.rank as usize].iter().enumerate() {
        let n = rows as usize * g.row;
        if d as u32 == s.rank || n == 0 {
            continue;
        }
        let dst = s.peer_recv[d] + (s.rank as u64 * g.cap as u64) * g.row as u64;
        s.gpu.copy_peer(s.peer_streams[d], dst, s.peer_ctx[d], s.x, n)?;
    }
    for &ps in &s.peer_streams {
        let done = s.gpu.event()?;
        s.gpu.record(done, ps)?;
        s.gpu.wait(s.gpu.stream, done)?;
    }
    Ok(())
}

/// Per ordered pair, one sender at a time (the others wait at the barrier):
/// the sender's whole token buffer into its region of the receiver's buffer,
/// by a copy kernel and by the copy engine. One list per local side.
fn pair_timings(link: &mut Link, sides: &[Side], g: &Geo) -> Result<Vec<Vec<PairReport>>> {
    let (w, iters) = (g.w, g.shape.iters);
    let pair_bytes = g.t as usize * g.row;
    let mut pairs: Vec<Vec<PairReport>> = vec![Vec::new(); sides.len()];
    for src in 0..w {
        for dst in (0..w).filter(|&d| d != src) {
            barrier(link, sides, "the per-pair timing")?;
            let Some(i) = sides.iter().position(|s| s.rank as usize == src) else { continue };
            let s = &sides[i];
            let to = s.peer_recv[dst] + (src as u64 * g.cap as u64) * g.row as u64;
            let grid = s.gpu.multiprocessors as u32 * g.shape.blocks_per_sm;
            let kernel =
                || s.gpu.launch("pair_copy", grid, 512, &[Arg::P(to), Arg::P(s.x), Arg::P((pair_bytes / 16) as u64)]);
            let engine = || s.gpu.copy_peer(s.gpu.stream, to, s.peer_ctx[dst], s.x, pair_bytes);
            let time = |f: &dyn Fn() -> Result<()>| -> Result<f64> {
                f()?; // warm-up
                let (a, b) = (s.gpu.event()?, s.gpu.event()?);
                s.gpu.record(a, s.gpu.stream)?;
                for _ in 0..iters {
                    f()?;
                }
                s.gpu.record(b, s.gpu.stream)?;
                elapsed_ms(a, b)
            };
            let kernel_ms = time(&kernel).with_context(|| format!("pair {src} -> {dst}: copy kernel"))?;
            let copy_engine_ms = time(&engine).with_context(|| format!("pair {src} -> {dst}: copy engine"))?;
            pairs[i].push(PairReport {
                src: src as u32,
                dst: dst as u32,
                bytes: pair_bytes as u64,
                kernel_ms,
                copy_engine_ms,
            });
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_picks_distinct_experts_and_counts_add_up() {
        for (world, topk) in [(1, 8), (2, 8), (8, 8), (3, 5), (16, 1)] {
            let tokens = 1000;
            for s in 0..world {
                for t in 0..tokens {
                    let mut seen: Vec<u32> = (0..topk).map(|j| expert_of(s, t, j, world, topk)).collect();
                    seen.sort();
                    seen.dedup();
                    assert_eq!(seen.len() as u32, topk, "world {world} topk {topk}: repeated expert");
                    assert!(seen.iter().all(|&e| e < world * topk));
                }
            }
            let (rows, experts) = expected(world, tokens, topk);
            let pairs: i64 = experts.iter().flatten().sum();
            assert_eq!(pairs, (world * tokens * topk) as i64);
            for r in &rows {
                // Every token goes somewhere, at most once per rank.
                let sent: u32 = r.iter().sum();
                assert!(sent >= tokens && sent <= tokens * world.min(topk), "{sent}");
            }
        }
    }
}
