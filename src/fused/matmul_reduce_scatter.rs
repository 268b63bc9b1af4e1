//! `symmMatmulReduceScatter`: C shard ((m / nranks) x n) = the sum over
//! ranks of rows [rank * m / nranks, ...) of A (m x kShard) * B (kShard x n).
//!
//! Pipeline (nranks > 1), in rounds: round j covers chunk j of every
//! destination's rows. In a round the compute stream computes the partial
//! for rank+1, rank+2, ... and this rank's own last (so the pushes of the
//! others overlap the following GEMMs and each link carries one partial at
//! a time, every rank sending to a different peer); each remote partial
//! goes into one of two outbox slots of the workspace, and the copy stream
//! pushes it with the copy engines into the destination's inbox slot
//! [round parity][source rank], then signals the destination. The caller's
//! stream waits for the round's partials from every peer, and reduces the
//! N slots (its own included) in rank order in fp32, plus beta * C, into
//! its C rows, then tells the peers the parity's slots are free again
//! (when a later round reuses them; a sender waits for that before pushing
//! round j+2). A closing barrier lets the next call push into slots this
//! call read.
//!
//! Partials are rounded to C's type before they are summed, as with the
//! unfused GEMM then symmReduceScatter, whose results this matches.
//!
//! With one rank: C = A * B + beta * C, cut into `chunksPerRank` GEMMs.

use cudarc::driver::sys::CUstream;

use super::allgather_matmul::{check_scales, gemm, key, single_rank};
use super::blaslt::Scale;
use super::desc::Matmul;
use super::state::{self, hash32, On, ReduceArgs, State, ALL_PEERS};
use super::{chunk_rows, default_chunks, FUSED_MATMUL_REDUCE_SCATTER};
use crate::comm::Comm;
use crate::cuda::abi::MAX_RANKS;
use crate::error::{bail, Result};
use crate::memory::pad;

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
    if call.m % comm.nranks != 0 {
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
    let (nr, me, k) = (comm.nranks, comm.rank, call.k_shard);
    st.begin(call.stream);
    if nr == 1 {
        return single_rank(st, call.a, call.b, call.c, m, call.m, call.n, k);
    }
    let ms = call.m / nr;
    let es_c = m.c_type.size();
    let prow = call.n * es_c; // a partial's packed row
    let slots = 2 + 2 * nr;
    let fit = st.ws_bytes / (slots * prow);
    if fit == 0 {
        bail!(
            symmNotSupported,
            "one row of C ({prow} bytes) in {slots} workspace slots does not fit SYMM_FUSED_WORKSPACE_BYTES ({}); raise it",
            st.ws_bytes
        );
    }
    let want = if m.chunks > 0 { m.chunks } else { default_chunks(ms, k, true) };
    let mut rc = chunk_rows(ms, want);
    if rc > fit {
        rc = if fit >= 16 { fit / 16 * 16 } else { fit };
    }
    let chunks = ms.div_ceil(rc);
    let desc = [
        FUSED_MATMUL_REDUCE_SCATTER << 24 | (m.a_type as u32) << 16 | (m.c_type as u32) << 8 | (m.b_type as u32) << 2 | m.trans_b as u32,
        ms as u32,
        hash32(&[call.n as u64, k as u64, rc as u64, chunks as u64, m.scale as u64, (m.beta != 0.0) as u64, ms as u64 >> 32]),
        0,
    ];
    let (ws, ws_peers, target) = (st.ws, st.ws_peers, st.sm_target);
    let outbox = |q: usize| ws + (q * rc * prow) as u64;
    let inbox_off = |p: usize, r: usize| ((2 + p * nr + r) * rc * prow) as u64;
    let es_a = m.a_type.size();
    let data = |p: usize| pad::FUSED_DATA_OFFSET + p * pad::ROW_BYTES;
    let free = |p: usize| pad::FUSED_FREE_OFFSET + p * pad::ROW_BYTES;
    // Partials are packed (ld = n) and start from zero: no beta there.
    let partial = Matmul { ldc: call.n, beta: 0.0, ..*m };

    let part_key = |rows: usize| key(&partial, call.n, k, rows, m.lda, call.n, [call.a, call.b, ws], target);
    // Load the GEMM kernels before any flag kernel can spin (see
    // allgather_matmul).
    for rows in [rc, (ms - (chunks - 1) * rc)] {
        st.prime(&part_key(rows), m, call.b)?;
    }
    st.fork()?;
    st.sync(comm, desc)?;
    let mut sent = 0usize;
    for j in 0..chunks {
        let (p, row0) = (j % 2, j * rc);
        let rows = rc.min(ms - row0);
        for s in 1..=nr {
            let d = (me + s) % nr;
            let first = d * ms + row0;
            let a = call.a + (first * m.lda * es_a) as u64;
            let scale = if m.scale == Scale::Rowwise { m.a_scale + 4 * first as u64 } else { m.a_scale };
            if d == me {
                let own = ws + inbox_off(p, me);
                gemm(st, &part_key(rows), &partial, a, call.b, own, scale, 0.0, On::Compute)?;
                st.order(On::Compute, On::Caller)?;
                continue;
            }
            let q = sent % 2;
            if sent >= 2 {
                st.wait_slot(q, On::Compute)?;
            }
            gemm(st, &part_key(rows), &partial, a, call.b, outbox(q), scale, 0.0, On::Compute)?;
            st.order(On::Compute, On::Copy)?;
            if j >= 2 {
                st.wait(comm, free(p), d as u32, On::Copy)?;
            }
            st.copy_rows(ws_peers[d] + inbox_off(p, me), prow, outbox(q), prow, prow, rows, On::Copy)?;
            st.put(comm, data(p), d as u32, On::Copy)?;
            st.record_slot(q, On::Copy)?;
            sent += 1;
        }
        st.wait(comm, data(p), ALL_PEERS, On::Caller)?;
        let mut src = [0u64; MAX_RANKS];
        for (r, x) in src.iter_mut().enumerate().take(nr) {
            *x = ws + inbox_off(p, r);
        }
        let out = call.c + (row0 * m.ldc * es_c) as u64;
        let args = ReduceArgs { src, out, rows: rows as u64, cols: call.n as u64, ld_out: m.ldc as u64, beta: m.beta, nsrc: nr as u32 };
        st.reduce(m.c_type, args, On::Caller)?;
        if j + 2 < chunks {
            st.put(comm, free(p), ALL_PEERS, On::Caller)?;
        }
    }
    st.join()?;
    // Every rank's reductions are done: the next call may push again.
    st.barrier(comm, On::Caller)
}
