//! `symmMatmulReduceScatter`: C shard ((m / nranks) x n) = the sum over
//! ranks of rows [rank * m / nranks, ...) of A (m x kShard) * B (kShard x n).
//!
//! Pipeline (nranks > 1), in rounds: round j covers chunk j of every
//! destination's rows (by default one chunk, the whole block, when the
//! workspace holds it: see `rounds`; a call grows the workspace to that,
//! see `workspace_want`). In a round the GEMM streams compute the partial
//! for rank+1, rank+2, ... and this rank's own last, alternating between
//! the two streams (so the pushes of the others overlap the following
//! GEMMs, each link carries one partial at a time, every rank sending to a
//! different peer, and each GEMM's last wave shares the SMs with the next);
//! each remote partial goes into one of two outbox slots of the workspace,
//! and the copy stream pushes it with the copy engines into the
//! destination's inbox slot [round parity][source rank], then signals the
//! destination. The caller's stream waits for the round's partials from
//! every peer, and reduces the N slots (its own included) in rank order in
//! fp32, plus beta * C, into its C rows.
//!
//! Slot reuse, for three rounds and more (round j+2 uses round j's
//! parity): an outbox slot is computed into again only after the copy that
//! read it (an event on the copy stream); a peer pushes round j+2 into this
//! rank's inbox only after this rank's round-j reduction told it the
//! parity's slots are free (a flag); this rank's own round-j+2 partial is
//! computed only after that reduction too (an event on the caller's
//! stream: the GEMM streams are otherwise ordered only after the copies).
//! Flags are binary and consumed (see kernels/fused.cu), each put matched
//! by one wait: data(p) once per round and peer, free(p) after rounds
//! 0 .. chunks-3, waited for before rounds 2 .. chunks-1. A closing barrier
//! lets the next call push into slots this call read.
//!
//! Partials are rounded to C's type before they are summed, as with the
//! unfused GEMM then symmReduceScatter, whose results this matches.
//!
//! With one rank: C = A * B + beta * C, cut into `chunksPerRank` GEMMs.

use cudarc::driver::sys::CUstream;

use super::allgather_matmul::{check_scales, gemm, key, single_rank};
use super::blaslt::Scale;
use super::desc::Matmul;
use super::state::{self, hash32, On, ReduceArgs, State, ALL_PEERS, SLOT_EVENTS};
use super::{bounded_chunk_rows, chunk_rows, FUSED_MATMUL_REDUCE_SCATTER, REDUCE_SCATTER_DEFAULT_CHUNKS};
use crate::comm::Comm;
use crate::cuda::abi::MAX_RANKS;
use crate::error::{bail, Result};
use crate::memory::pad;

/// Event slots (State::record_slot): 0 and 1 free the two outbox slots
/// (after their copy); OWN_SLOT + parity frees this rank's own inbox slot
/// of that parity (after the reduction that read it).
const OWN_SLOT: usize = 2;
const _: () = assert!(OWN_SLOT + 2 <= SLOT_EVENTS);

/// Rows per round and rounds for a shard of `ms` rows of `prow`-byte
/// partial rows: `want` chunks per destination where the workspace holds
/// them, else the fewest balanced rounds that fit. The workspace holds 2
/// outbox slots and `nr` inbox slots (one per source rank) per round in
/// flight: one round needs 2 + nr slots, more alternate two parities,
/// 2 + 2 nr. So one chunk per destination needs (2 + nr) * ms * prow bytes
/// (m = 32768, n = 8192, bf16 at 4 ranks: 768 MiB).
fn rounds(ms: usize, prow: usize, nr: usize, ws_bytes: usize, want: usize) -> Result<(usize, usize)> {
    let slot_rows = |slots: usize| ws_bytes / (slots * prow);
    let rc = chunk_rows(ms, want);
    if round_bytes(ms, prow, nr, want) <= ws_bytes {
        return Ok((rc, ms.div_ceil(rc)));
    }
    let fit = slot_rows(2 + 2 * nr);
    if fit == 0 {
        bail!(
            symmNotSupported,
            "one row of C ({prow} bytes) in {} workspace slots does not fit SYMM_FUSED_WORKSPACE_BYTES ({ws_bytes}); raise it",
            2 + 2 * nr
        );
    }
    let rc = bounded_chunk_rows(ms, want.max(2), fit);
    Ok((rc, ms.div_ceil(rc)))
}

/// Workspace for `want` chunks per destination of `ms` rows, all in the
/// workspace at once (see `rounds`).
fn round_bytes(ms: usize, prow: usize, nr: usize, want: usize) -> usize {
    let rc = chunk_rows(ms, want);
    let slots = if rc >= ms { 2 + nr } else { 2 + 2 * nr };
    slots.saturating_mul(rc).saturating_mul(prow)
}

/// The workspace a checked call runs best with: its chunks unbounded.
/// The call grows the communicator's workspace to this where it may
/// (state::lock); one chunk per destination needs (2 + nranks) partial
/// blocks, m = 32768, n = 8192 bf16 at 4 ranks 768 MiB, and cut into
/// smaller rounds the per-destination GEMMs lose 10-40 % on one H100
/// (docs/PERFORMANCE.md).
pub fn workspace_want(comm: &Comm, call: &Call) -> usize {
    let nr = comm.nranks;
    if nr == 1 {
        return 0;
    }
    let want = if call.mm.chunks > 0 { call.mm.chunks } else { REDUCE_SCATTER_DEFAULT_CHUNKS };
    round_bytes(call.m / nr, call.n * call.mm.c_type.size(), nr, want)
}

/// A checked call.
pub struct Call {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub m: usize,
    pub n: usize,
    pub k_shard: usize,
    pub mm: Matmul,
    pub stream: CUstream,
}

// SAFETY: device addresses and a stream handle, only passed to CUDA (a
// grouped first call runs on symmGroupEnd's thread).
unsafe impl Send for Call {}

/// Check shapes and buffers against the communicator; `Ok(false)`:
/// nothing to do.
pub fn check(comm: &Comm, call: &Call) -> Result<bool> {
    state::check_comm(comm, call.stream)?;
    if !call.m.is_multiple_of(comm.nranks) {
        bail!(symmInvalidArgument, "m {} is not a multiple of nranks {}: every rank gets m / nranks rows", call.m, comm.nranks);
    }
    if call.m == 0 || call.n == 0 {
        return Ok(false);
    }
    let m = &call.mm;
    let [ea, eb, ec] = m.extents(call.m, call.m / comm.nranks, call.n, call.k_shard)?;
    state::check_buffer(comm, call.a, ea, "a")?;
    state::check_buffer(comm, call.b, eb, "b")?;
    state::check_buffer(comm, call.c, ec, "cShard")?;
    check_scales(comm, m, call.m, call.n)?;
    Ok(true)
}

pub fn run(comm: &Comm, st: &mut State, call: &Call) -> Result<()> {
    let m = &call.mm;
    let (nr, k) = (comm.nranks, call.k_shard);
    st.begin(call.stream);
    if nr == 1 {
        return single_rank(st, call.a, call.b, call.c, m, call.m, call.n, k);
    }
    let ms = call.m / nr;
    let prow = call.n * m.c_type.size(); // a partial's packed row
    let want = if m.chunks > 0 { m.chunks } else { REDUCE_SCATTER_DEFAULT_CHUNKS };
    let (rc, chunks) = rounds(ms, prow, nr, st.ws_bytes, want)?;
    let desc = [
        FUSED_MATMUL_REDUCE_SCATTER << 24 | (m.a_type as u32) << 16 | (m.c_type as u32) << 8 | (m.b_type as u32) << 2 | m.trans_b as u32,
        ms as u32,
        hash32(&[call.n as u64, k as u64, rc as u64, chunks as u64, m.scale as u64, (m.beta != 0.0) as u64, ms as u64 >> 32]),
        0,
    ];
    let plan = Rounds { nr, me: comm.rank, ms, rc, chunks, prow, ws: st.ws, ws_peers: st.ws_peers };
    let mut steps = Enqueue {
        comm,
        call,
        // Partials are packed (ld = n) and start from zero: no beta there.
        partial: Matmul { ldc: call.n, beta: 0.0, ..*m },
        target: st.sm_target,
        desc,
        st,
    };
    // Load the GEMM kernels before any flag kernel can spin (State::prime).
    for rows in [rc, ms - (chunks - 1) * rc] {
        let key = steps.key(rows);
        steps.st.prime(&key, m, call.b, 0.0)?;
    }
    enqueue_rounds(&mut steps, &plan)
}

/// One call's rounds and workspace layout: [2 outbox slots][inbox slots
/// [parity][source rank]], each slot `rc` partial rows.
#[derive(Clone, Copy)]
struct Rounds {
    nr: usize,
    me: usize,
    /// Rows per rank (m / nranks), rows per round, rounds.
    ms: usize,
    rc: usize,
    chunks: usize,
    /// Bytes of a partial's (packed) row.
    prow: usize,
    /// This rank's workspace, and every rank's as seen here.
    ws: u64,
    ws_peers: [u64; MAX_RANKS],
}

impl Rounds {
    fn outbox(&self, q: usize) -> u64 {
        self.ws + (q * self.rc * self.prow) as u64
    }

    fn inbox_off(&self, p: usize, r: usize) -> u64 {
        ((2 + p * self.nr + r) * self.rc * self.prow) as u64
    }
}

/// The flag rows of the rounds: partials of parity p landed / slots free.
fn data(p: usize) -> usize {
    pad::FUSED_DATA_OFFSET + p * pad::ROW_BYTES
}
fn free(p: usize) -> usize {
    pad::FUSED_FREE_OFFSET + p * pad::ROW_BYTES
}

/// What the rounds enqueue: State's streams for a call, or (tests) a model
/// that runs them in every order the dependencies allow.
trait Steps {
    /// The internal streams after the caller's work, then the start sync
    /// (copy stream).
    fn start(&mut self) -> Result<()>;
    /// The partial of A's rows [first, first + rows) into `dst` (packed
    /// rows), on the GEMM stream `on`.
    fn partial(&mut self, first: usize, rows: usize, dst: u64, on: On) -> Result<()>;
    fn order(&mut self, from: On, to: On) -> Result<()>;
    fn record_slot(&mut self, slot: usize, on: On) -> Result<()>;
    fn wait_slot(&mut self, slot: usize, on: On) -> Result<()>;
    /// Signal `peer` (or ALL_PEERS) / wait for and consume its signal, on
    /// the flag row at `offset`.
    fn put(&mut self, offset: usize, peer: u32, on: On) -> Result<()>;
    fn wait(&mut self, offset: usize, peer: u32, on: On) -> Result<()>;
    /// `rows` packed partial rows from `src` (here) to `dst` (a peer's
    /// workspace), on the copy stream.
    fn push(&mut self, dst: u64, src: u64, rows: usize) -> Result<()>;
    /// C rows [row0, row0 + rows) = sum of the sources (+ beta * C), on the
    /// caller's stream.
    fn reduce(&mut self, src: [u64; MAX_RANKS], row0: usize, rows: usize) -> Result<()>;
    /// The caller's stream after the internal streams, then the closing
    /// barrier on it.
    fn finish(&mut self) -> Result<()>;
}

/// The pipeline (see the module comment).
fn enqueue_rounds(s: &mut impl Steps, r: &Rounds) -> Result<()> {
    let (nr, me) = (r.nr, r.me);
    s.start()?;
    let (mut sent, mut gemms) = (0usize, 0usize);
    for j in 0..r.chunks {
        let (p, row0) = (j % 2, j * r.rc);
        let rows = r.rc.min(r.ms - row0);
        for step in 1..=nr {
            let d = (me + step) % nr;
            let first = d * r.ms + row0;
            let on = On::gemm(gemms);
            gemms += 1;
            if d == me {
                if j >= 2 {
                    // Round j-2's reduction (caller's stream) read this
                    // slot; nothing else orders the GEMM streams after it.
                    s.wait_slot(OWN_SLOT + p, on)?;
                }
                s.partial(first, rows, r.ws + r.inbox_off(p, me), on)?;
                s.order(on, On::Caller)?;
                continue;
            }
            let q = sent % 2;
            if sent >= 2 {
                // The copy that read this outbox slot is done.
                s.wait_slot(q, on)?;
            }
            s.partial(first, rows, r.outbox(q), on)?;
            s.order(on, On::Copy)?;
            if j >= 2 {
                s.wait(free(p), d as u32, On::Copy)?;
            }
            s.push(r.ws_peers[d] + r.inbox_off(p, me), r.outbox(q), rows)?;
            s.put(data(p), d as u32, On::Copy)?;
            s.record_slot(q, On::Copy)?;
            sent += 1;
        }
        s.wait(data(p), ALL_PEERS, On::Caller)?;
        let mut src = [0u64; MAX_RANKS];
        for (i, x) in src.iter_mut().enumerate().take(nr) {
            *x = r.ws + r.inbox_off(p, i);
        }
        s.reduce(src, row0, rows)?;
        if j + 2 < r.chunks {
            // Round j+2 reuses the parity's slots: this rank's own partial
            // (its GEMM stream waits for this event) and the peers'
            // (they wait for this flag).
            s.record_slot(OWN_SLOT + p, On::Caller)?;
            s.put(free(p), ALL_PEERS, On::Caller)?;
        }
    }
    // Every rank's reductions are done: the next call may push again.
    s.finish()
}

/// The rounds on a communicator's fused state.
struct Enqueue<'a> {
    comm: &'a Comm,
    st: &'a mut State,
    call: &'a Call,
    partial: Matmul,
    target: u32,
    desc: [u32; 4],
}

impl Enqueue<'_> {
    fn key(&self, rows: usize) -> crate::fused::blaslt::GemmKey {
        let c = self.call;
        key(&self.partial, c.n, c.k_shard, rows, c.mm.lda, c.n, [c.a, c.b, self.st.ws], self.target)
    }
}

impl Steps for Enqueue<'_> {
    fn start(&mut self) -> Result<()> {
        self.st.fork()?;
        self.st.sync(self.comm, self.desc)
    }

    fn partial(&mut self, first: usize, rows: usize, dst: u64, on: On) -> Result<()> {
        let (m, c) = (&self.call.mm, self.call);
        let a = c.a + (first * m.lda * m.a_type.size()) as u64;
        let scale = if m.scale == Scale::Rowwise { m.a_scale + 4 * first as u64 } else { m.a_scale };
        let key = self.key(rows);
        gemm(self.st, &key, &self.partial, a, c.b, dst, scale, 0.0, on)
    }

    fn order(&mut self, from: On, to: On) -> Result<()> {
        self.st.order(from, to)
    }

    fn record_slot(&mut self, slot: usize, on: On) -> Result<()> {
        self.st.record_slot(slot, on)
    }

    fn wait_slot(&mut self, slot: usize, on: On) -> Result<()> {
        self.st.wait_slot(slot, on)
    }

    fn put(&mut self, offset: usize, peer: u32, on: On) -> Result<()> {
        self.st.put(self.comm, offset, peer, on)
    }

    fn wait(&mut self, offset: usize, peer: u32, on: On) -> Result<()> {
        self.st.wait(self.comm, offset, peer, on)
    }

    fn push(&mut self, dst: u64, src: u64, rows: usize) -> Result<()> {
        let prow = self.call.n * self.call.mm.c_type.size();
        self.st.copy_rows(dst, prow, src, prow, prow, rows, On::Copy)
    }

    fn reduce(&mut self, src: [u64; MAX_RANKS], row0: usize, rows: usize) -> Result<()> {
        let (m, c) = (&self.call.mm, self.call);
        let out = c.c + (row0 * m.ldc * m.c_type.size()) as u64;
        let nsrc = self.comm.nranks as u32;
        let args = ReduceArgs { src, out, rows: rows as u64, cols: c.n as u64, ld_out: m.ldc as u64, beta: m.beta, nsrc };
        self.st.reduce(m.c_type, args, On::Caller)
    }

    fn finish(&mut self) -> Result<()> {
        self.st.join()?;
        self.st.barrier(self.comm, On::Caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, VecDeque};

    #[test]
    fn one_round_per_destination_when_the_workspace_holds_it() {
        let mib = 1usize << 20;
        // 4 ranks, 1024 rows of 8 KiB partials (n = 4096 bf16): one round
        // needs 6 slots of 8 MiB.
        assert_eq!(rounds(1024, 8192, 4, 48 * mib, 1).unwrap(), (1024, 1));
        // 47 MiB: the double-buffered layout (10 slots) and balanced rounds.
        let (rc, chunks) = rounds(1024, 8192, 4, 47 * mib, 1).unwrap();
        assert!(chunks >= 2 && rc * 10 * 8192 <= 47 * mib, "{rc} rows x {chunks}");
        assert!(1024 - (chunks - 1) * rc >= rc / 2, "balanced: {rc} rows x {chunks}");
        // The seed shape in 256 MiB: m = 32768, n = 8192 bf16.
        let (rc, chunks) = rounds(8192, 16384, 4, 256 * mib, 1).unwrap();
        assert_eq!((rc, chunks), (1376, 6));
        // What that call asks the workspace to grow to: one round.
        assert_eq!(round_bytes(8192, 16384, 4, 1), 768 * mib);
        assert_eq!(rounds(8192, 16384, 4, round_bytes(8192, 16384, 4, 1), 1).unwrap(), (8192, 1));
        assert_eq!(round_bytes(8192, 16384, 8, 1), 1280 * mib);
        // Asked for more: as asked where it fits.
        assert_eq!(rounds(1024, 8192, 4, 256 * mib, 4).unwrap(), (256, 4));
        // Not one row.
        let e = rounds(1024, 1 << 30, 4, 256 * mib, 1).unwrap_err();
        assert!(e.msg.contains("SYMM_FUSED_WORKSPACE_BYTES"), "{}", e.msg);
    }

    // ---- a model of the streams, events and flags ----------------------
    //
    // Every rank's calls are enqueued through `enqueue_rounds` into three
    // queues per rank; then operations run one at a time, each picked at
    // random among those whose dependencies (stream order, events, flags,
    // the start sync and the closing barrier) allow it, so over many seeds
    // any missing dependency shows up as a wrong order. Memory holds, per
    // slot, which partial is in it; each reduction checks that every
    // source slot holds this call's partial for its rows from that rank.

    /// Rank `writer`'s partial of A's rows from `first`, in call `call`.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    struct Tag {
        call: usize,
        writer: usize,
        first: usize,
    }

    #[derive(Debug)]
    enum Op {
        /// The start sync (kind 0) or the closing barrier (1), generation.
        Meet(usize, usize),
        Write(u64, Option<Tag>),
        Copy(u64, u64),
        Reduce(Vec<u64>, Vec<Tag>, usize, usize),
        Record(usize),
        WaitEvent(usize, usize),
        Put(usize, Vec<usize>),
        Wait(usize, Vec<usize>),
    }

    #[derive(Default)]
    struct Rank {
        streams: [VecDeque<Op>; 4],
        recorded: HashMap<usize, usize>,
        done: HashMap<usize, usize>,
        relays: usize,
        meets: [usize; 2],
        arrived: [usize; 2],
        reduced: HashMap<(usize, usize), usize>,
    }

    struct World {
        ranks: Vec<Rank>,
        /// Slot address -> partial held (None: garbage).
        mem: HashMap<u64, Option<Tag>>,
        /// (owner, row offset, from rank) -> set.
        flags: HashMap<(usize, usize, usize), bool>,
        errors: Vec<String>,
    }

    fn stream(on: On) -> usize {
        match on {
            On::Caller => 0,
            On::Compute => 1,
            On::Compute2 => 2,
            On::Copy => 3,
        }
    }

    struct Model<'a> {
        w: &'a mut World,
        me: usize,
        nr: usize,
        ms: usize,
        call: usize,
    }

    impl Model<'_> {
        fn push(&mut self, on: On, op: Op) {
            self.w.ranks[self.me].streams[stream(on)].push_back(op);
        }
        fn peers(&self, peer: u32) -> Vec<usize> {
            (0..self.nr).filter(|&p| p != self.me && (peer == ALL_PEERS || p == peer as usize)).collect()
        }
    }

    impl Steps for Model<'_> {
        fn start(&mut self) -> Result<()> {
            for on in [On::Compute, On::Compute2, On::Copy] {
                self.order(On::Caller, on)?;
            }
            let r = &mut self.w.ranks[self.me];
            r.meets[0] += 1;
            let gen = r.meets[0];
            self.push(On::Copy, Op::Meet(0, gen));
            Ok(())
        }
        fn partial(&mut self, first: usize, _rows: usize, dst: u64, on: On) -> Result<()> {
            assert!(matches!(on, On::Compute | On::Compute2), "a partial on {on:?}");
            let tag = Tag { call: self.call, writer: self.me, first };
            self.push(on, Op::Write(dst, Some(tag)));
            Ok(())
        }
        fn order(&mut self, from: On, to: On) -> Result<()> {
            let r = &mut self.w.ranks[self.me];
            r.relays += 1;
            let ev = 1000 + r.relays;
            r.recorded.insert(ev, 1);
            self.push(from, Op::Record(ev));
            self.push(to, Op::WaitEvent(ev, 1));
            Ok(())
        }
        fn record_slot(&mut self, slot: usize, on: On) -> Result<()> {
            *self.w.ranks[self.me].recorded.entry(slot).or_default() += 1;
            self.push(on, Op::Record(slot));
            Ok(())
        }
        fn wait_slot(&mut self, slot: usize, on: On) -> Result<()> {
            let n = self.w.ranks[self.me].recorded.get(&slot).copied().unwrap_or(0);
            self.push(on, Op::WaitEvent(slot, n));
            Ok(())
        }
        fn put(&mut self, offset: usize, peer: u32, on: On) -> Result<()> {
            let peers = self.peers(peer);
            self.push(on, Op::Put(offset, peers));
            Ok(())
        }
        fn wait(&mut self, offset: usize, peer: u32, on: On) -> Result<()> {
            let peers = self.peers(peer);
            self.push(on, Op::Wait(offset, peers));
            Ok(())
        }
        fn push(&mut self, dst: u64, src: u64, _rows: usize) -> Result<()> {
            Model::push(self, On::Copy, Op::Copy(dst, src));
            Ok(())
        }
        fn reduce(&mut self, src: [u64; MAX_RANKS], row0: usize, _rows: usize) -> Result<()> {
            let expect = (0..self.nr).map(|r| Tag { call: self.call, writer: r, first: self.me * self.ms + row0 }).collect();
            let (call, nr) = (self.call, self.nr);
            Model::push(self, On::Caller, Op::Reduce(src[..nr].to_vec(), expect, call, row0));
            Ok(())
        }
        fn finish(&mut self) -> Result<()> {
            for on in [On::Compute, On::Compute2, On::Copy] {
                self.order(on, On::Caller)?;
            }
            let r = &mut self.w.ranks[self.me];
            r.meets[1] += 1;
            let gen = r.meets[1];
            Model::push(self, On::Caller, Op::Meet(1, gen));
            Ok(())
        }
    }

    impl World {
        /// Whether rank `r`'s stream `s` may run its first operation.
        fn ready(&self, r: usize, s: usize) -> bool {
            let rank = &self.ranks[r];
            let Some(op) = rank.streams[s].front() else { return false };
            match op {
                Op::Meet(kind, gen) => self.ranks.iter().all(|x| x.arrived[*kind] >= *gen),
                Op::WaitEvent(ev, n) => rank.done.get(ev).copied().unwrap_or(0) >= *n,
                Op::Put(flag, peers) => peers.iter().all(|&d| !self.flags.get(&(d, *flag, r)).copied().unwrap_or(false)),
                Op::Wait(flag, peers) => peers.iter().all(|&p| self.flags.get(&(r, *flag, p)).copied().unwrap_or(false)),
                _ => true,
            }
        }

        fn run_one(&mut self, r: usize, s: usize) {
            let op = self.ranks[r].streams[s].pop_front().expect("ready means present");
            match op {
                Op::Meet(..) => {}
                Op::Write(at, tag) => {
                    self.mem.insert(at, tag);
                }
                Op::Copy(dst, src) => {
                    let v = self.mem.get(&src).copied().flatten();
                    self.mem.insert(dst, v);
                }
                Op::Reduce(src, expect, call, row0) => {
                    for (i, (a, want)) in src.iter().zip(&expect).enumerate() {
                        let got = self.mem.get(a).copied().flatten();
                        if got != Some(*want) {
                            self.errors.push(format!("rank {r} call {call} rows {row0}..: source {i} holds {got:?}, not {want:?}"));
                        }
                    }
                    *self.ranks[r].reduced.entry((call, row0)).or_default() += 1;
                }
                Op::Record(ev) => *self.ranks[r].done.entry(ev).or_default() += 1,
                Op::WaitEvent(..) => {}
                Op::Put(flag, peers) => {
                    for d in peers {
                        self.flags.insert((d, flag, r), true);
                    }
                }
                Op::Wait(flag, peers) => {
                    for p in peers {
                        self.flags.insert((r, flag, p), false);
                    }
                }
            }
        }
    }

    /// `calls` back-to-back calls of `nr` ranks with `rows` rows per rank
    /// in rounds of `rc`, run in an order drawn from `seed`. Returns the
    /// errors.
    fn run_model(nr: usize, rows: usize, rc: usize, calls: usize, seed: u64) -> Vec<String> {
        let chunks = rows.div_ceil(rc);
        let prow = 16;
        let base = |r: usize| ((r as u64) + 1) << 40;
        let mut ws_peers = [0u64; MAX_RANKS];
        for (r, p) in ws_peers.iter_mut().enumerate().take(nr) {
            *p = base(r);
        }
        let mut w = World {
            ranks: (0..nr).map(|_| Rank::default()).collect(),
            mem: HashMap::new(),
            flags: HashMap::new(),
            errors: Vec::new(),
        };
        for call in 0..calls {
            for me in 0..nr {
                let plan = Rounds { nr, me, ms: rows, rc, chunks, prow, ws: base(me), ws_peers };
                // The priming GEMM may write anywhere in the workspace, on
                // the caller's stream, before the call's work.
                for slot in 0..2 + 2 * nr {
                    let at = plan.ws + (slot * rc * prow) as u64;
                    w.ranks[me].streams[0].push_back(Op::Write(at, None));
                }
                let mut m = Model { w: &mut w, me, nr, ms: rows, call };
                enqueue_rounds(&mut m, &plan).unwrap();
            }
        }
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        loop {
            for r in 0..nr {
                for s in 0..4 {
                    if let Some(Op::Meet(kind, gen)) = w.ranks[r].streams[s].front() {
                        let (kind, gen) = (*kind, *gen);
                        let a = &mut w.ranks[r].arrived[kind];
                        *a = (*a).max(gen);
                    }
                }
            }
            let ready: Vec<(usize, usize)> = (0..nr).flat_map(|r| (0..4).map(move |s| (r, s))).filter(|&(r, s)| w.ready(r, s)).collect();
            if ready.is_empty() {
                if w.ranks.iter().any(|r| r.streams.iter().any(|s| !s.is_empty())) {
                    let heads: Vec<String> =
                        w.ranks.iter().enumerate().flat_map(|(r, x)| x.streams.iter().enumerate().map(move |(s, q)| format!("rank {r} stream {s}: {:?}", q.front()))).collect();
                    w.errors.push(format!("deadlock: {}", heads.join("; ")));
                }
                break;
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let (r, s) = ready[(rng % ready.len() as u64) as usize];
            w.run_one(r, s);
        }
        for (r, rank) in w.ranks.iter().enumerate() {
            for call in 0..calls {
                for j in 0..chunks {
                    let n = rank.reduced.get(&(call, j * rc)).copied().unwrap_or(0);
                    if n != 1 {
                        w.errors.push(format!("rank {r} call {call}: rows {}.. reduced {n} times", j * rc));
                    }
                }
            }
        }
        if let Some(k) = w.flags.iter().find(|(_, &v)| v).map(|(k, _)| *k) {
            w.errors.push(format!("flag {k:?} left set"));
        }
        w.errors
    }

    #[test]
    fn rounds_never_read_a_slot_before_it_lands_or_after_it_is_reused() {
        for nr in [2, 3, 4] {
            for (rows, rc) in [(4, 4), (8, 4), (12, 4), (13, 4), (20, 4), (34, 5)] {
                for seed in 0..150 {
                    let errors = run_model(nr, rows, rc, 2, seed);
                    assert!(errors.is_empty(), "{nr} ranks, {rows} rows in rounds of {rc}, seed {seed}: {}", errors.join("\n"));
                }
            }
        }
    }
}
