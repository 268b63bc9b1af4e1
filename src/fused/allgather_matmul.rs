//! `symmAllGatherMatmul`: C ((nranks * mShard) x n) = all_gather(A shard) * B.
//!
//! Pipeline (nranks > 1), on streams forked off the caller's:
//! - caller's stream: this rank's own rows first, one GEMM straight from
//!   the shard (no data to wait for);
//! - copy stream: a start sync (every rank's shard is ready; the ranks
//!   compare the call), then pulls of every peer's shard on the copy
//!   engines, chunk by chunk (chunk j of rank+1, rank+2, ..., then chunk
//!   j+1), into `aGathered` or a ring of workspace slots; an end barrier
//!   (no peer still reads this rank's shard);
//! - the two GEMM streams, alternately: one GEMM per pulled chunk, each
//!   ordered after its pull by an event; with the ring, a slot is pulled
//!   into again only once the GEMM that read it is done (another event).
//!
//! Where peers read a shard: a symmetric or registered A is read where it
//! is (zero-copy). A plain A is staged: each rank copies chunk j into one
//! of two workspace slots, the ranks meet, the peers pull it; slots
//! alternate, and round j's barrier (which every rank passes only after its
//! pulls of round j-1) makes round j+1's copy safe. All ranks must pass the
//! same kind of A (the start sync checks).
//!
//! With one rank the shard is cut into `chunksPerRank` GEMMs, alternating
//! between the two GEMM streams: the chunk GEMMs of an n-rank pipeline,
//! measurable on one GPU.

use cudarc::driver::sys::CUstream;

use super::blaslt::{pointer_align, GemmKey, GemmPtrs, Scale};
use super::desc::Matmul;
use super::state::{self, hash32, On, State, SLOT_EVENTS};
use super::{bounded_chunk_rows, chunk_rows, default_chunks, FUSED_ALLGATHER_MATMUL};
use crate::comm::Comm;
use crate::error::{bail, Result};

/// A checked call.
pub struct Call {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub m_shard: usize,
    pub n: usize,
    pub k: usize,
    pub mm: Matmul,
    pub stream: CUstream,
}

// SAFETY: device addresses and a stream handle, only passed to CUDA (a
// grouped first call runs on symmGroupEnd's thread).
unsafe impl Send for Call {}

/// Check the buffers against the communicator; `Ok(false)`: nothing to do.
pub fn check(comm: &Comm, call: &Call) -> Result<bool> {
    state::check_comm(comm, call.stream)?;
    if call.m_shard == 0 || call.n == 0 {
        return Ok(false);
    }
    let m = &call.mm;
    let rows = call.m_shard.checked_mul(comm.nranks).ok_or_else(|| crate::error::err!(symmInvalidArgument, "mShard x nranks overflows"))?;
    let [ea, eb, ec] = m.extents(call.m_shard, rows, call.n, call.k)?;
    state::check_buffer(comm, call.a, ea, "aShard")?;
    state::check_buffer(comm, call.b, eb, "b")?;
    state::check_buffer(comm, call.c, ec, "c")?;
    if m.a_gathered != 0 {
        let eg = Matmul::extent(rows, call.k, call.k, m.a_type.size())?;
        state::check_buffer(comm, m.a_gathered, eg, "desc->aGathered")?;
    }
    check_scales(comm, m, call.m_shard, call.n)?;
    Ok(true)
}

/// Scale vectors: one float each (tensor), or `rows` and `n` floats.
pub fn check_scales(comm: &Comm, m: &Matmul, rows: usize, n: usize) -> Result<()> {
    let (a, b) = match m.scale {
        Scale::None => return Ok(()),
        Scale::Tensor => (4, 4),
        Scale::Rowwise => (rows * 4, n * 4),
    };
    state::check_buffer(comm, m.a_scale, a, "desc->aScale")?;
    state::check_buffer(comm, m.b_scale, b, "desc->bScale")?;
    Ok(())
}

/// The plan key of a GEMM of `rows` rows of A (leading dimension `lda`)
/// into C rows with leading dimension `ldc`. Alignments are those every
/// chunk of the call shares: the base pointers' and the row strides'.
#[allow(clippy::too_many_arguments)]
pub(crate) fn key(m: &Matmul, n: usize, k: usize, rows: usize, lda: usize, ldc: usize, bases: [u64; 3], sm_target: u32) -> GemmKey {
    let stride_align = |base: u64, stride: usize| pointer_align(base).min(pointer_align(stride as u64));
    GemmKey {
        a_type: m.a_type,
        b_type: m.b_type,
        c_type: m.c_type,
        trans_b: m.trans_b,
        m: rows as u64,
        n: n as u64,
        k: k as u64,
        lda: lda as u64,
        ldb: m.ldb as u64,
        ldc: ldc as u64,
        scale: m.scale,
        align: [stride_align(bases[0], lda * m.a_type.size()), pointer_align(bases[1]), stride_align(bases[2], ldc * m.c_type.size())],
        sm_target,
    }
}

/// Enqueue the GEMM of `key` (rows of A at `a`, C rows at `c`) on `on`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm(st: &mut State, key: &GemmKey, m: &Matmul, a: u64, b: u64, c: u64, a_scale: u64, beta: f32, on: On) -> Result<()> {
    st.gemm(key, &GemmPtrs { a, b, c, a_scale, b_scale: m.b_scale }, beta, on)
}

/// One rank: the shard's GEMMs (chunked when asked); `m.a_gathered` (the
/// shard itself) is written too.
#[allow(clippy::too_many_arguments)]
pub(crate) fn single_rank(st: &mut State, call_a: u64, call_b: u64, call_c: u64, m: &Matmul, rows: usize, n: usize, k: usize) -> Result<()> {
    let chunks = m.chunks.max(1);
    let rc = chunk_rows(rows, chunks);
    let target = if chunks > 1 { st.sm_target } else { 0 };
    let es = m.a_type.size();
    let row_scale = |r: usize| if m.scale == Scale::Rowwise { m.a_scale + 4 * r as u64 } else { m.a_scale };
    let key_of = |nrows: usize| key(m, n, k, nrows, m.lda, m.ldc, [call_a, call_b, call_c], target);
    // Plans (and their failures) before anything is enqueued.
    st.blas.make_plan(&key_of(rc))?;
    st.blas.make_plan(&key_of(rows - (rows - 1) / rc * rc))?;
    if m.a_gathered != 0 {
        st.copy_rows(m.a_gathered, k * es, call_a, m.lda * es, k * es, rows, On::Caller)?;
    }
    if chunks > 1 {
        st.fork()?;
    }
    let mut row0 = 0;
    while row0 < rows {
        let nrows = rc.min(rows - row0);
        // Chunks alternate between the GEMM streams, as in the pipelines.
        let on = if chunks > 1 { On::gemm(row0 / rc) } else { On::Caller };
        let a = call_a + (row0 * m.lda * es) as u64;
        let c = call_c + (row0 * m.ldc * m.c_type.size()) as u64;
        gemm(st, &key_of(nrows), m, a, call_b, c, row_scale(row0), m.beta, on)?;
        row0 += nrows;
    }
    if chunks > 1 {
        st.join()?;
    }
    Ok(())
}

/// A call's workspace: [gathered row scales][my row scales] [staging
/// slots] [ring slots], each slot a chunk of A's rows.
struct Layout {
    scale_bytes: usize,
    /// Two when A is neither symmetric nor registered (peers pull a copy).
    staging: usize,
    /// Without aGathered, pulled chunks land in a ring of slots.
    ring_slots: usize,
    /// Chunks per rank's shard, before the workspace bound.
    want: usize,
}

impl Layout {
    fn of(call: &Call, nr: usize, direct: bool) -> Layout {
        let (m, ms) = (&call.mm, call.m_shard);
        Layout {
            scale_bytes: if m.scale == Scale::Rowwise { ((nr + 1) * ms * 4).next_multiple_of(256) } else { 0 },
            staging: if direct { 0 } else { 2 },
            ring_slots: if m.a_gathered == 0 { (2 * (nr - 1)).min(SLOT_EVENTS) } else { 0 },
            want: if m.chunks > 0 { m.chunks } else { default_chunks(ms, call.n) },
        }
    }
}

/// The workspace a checked call runs best with: its chunks unbounded (the
/// call grows the communicator's workspace to this where it may, see
/// state::lock). A symmetric or registered A with aGathered needs none.
pub fn workspace_want(comm: &Comm, call: &Call) -> usize {
    let nr = comm.nranks;
    if nr == 1 {
        return 0;
    }
    let es = call.mm.a_type.size();
    let direct = Matmul::extent(call.m_shard, call.k, call.mm.lda, es).is_ok_and(|x| comm.mem.find(call.a, x as u64).is_some());
    let l = Layout::of(call, nr, direct);
    let slot = chunk_rows(call.m_shard, l.want).saturating_mul(call.k * es);
    l.scale_bytes.saturating_add((l.staging + l.ring_slots).saturating_mul(slot))
}

pub fn run(comm: &Comm, st: &mut State, call: &Call) -> Result<()> {
    let m = &call.mm;
    let (nr, me, ms, k) = (comm.nranks, comm.rank, call.m_shard, call.k);
    st.begin(call.stream);
    if nr == 1 {
        return single_rank(st, call.a, call.b, call.c, m, ms, call.n, k);
    }
    let es = m.a_type.size();
    let row_bytes = k * es;
    let direct = comm.mem.find(call.a, Matmul::extent(ms, k, m.lda, es)? as u64);
    let ring = m.a_gathered == 0;
    let rowwise = m.scale == Scale::Rowwise;
    let Layout { scale_bytes, staging, ring_slots, want } = Layout::of(call, nr, direct.is_some());
    let slots = staging + ring_slots;
    let Some(avail) = st.ws_bytes.checked_sub(scale_bytes) else {
        bail!(symmNotSupported, "row-wise scales of {ms} rows need {scale_bytes} bytes of fused workspace; raise SYMM_FUSED_WORKSPACE_BYTES ({})", st.ws_bytes);
    };
    let mut rc = chunk_rows(ms, want);
    if slots > 0 {
        let fit = avail / (slots * row_bytes);
        if fit == 0 {
            bail!(
                symmNotSupported,
                "one row of A ({row_bytes} bytes) in {slots} workspace slots does not fit SYMM_FUSED_WORKSPACE_BYTES ({}); raise it, \
                 or pass desc->aGathered and a symmetric or registered aShard",
                st.ws_bytes
            );
        }
        rc = bounded_chunk_rows(ms, want, fit);
    }
    let chunks = ms.div_ceil(rc);
    let token = direct.map_or(0, |e| hash32(&[e.id, call.a - e.start]) | 1);
    let desc = [
        FUSED_ALLGATHER_MATMUL << 24 | (m.a_type as u32) << 16 | (m.c_type as u32) << 8 | (m.b_type as u32) << 2 | m.trans_b as u32,
        ms as u32,
        hash32(&[call.n as u64, k as u64, m.lda as u64, rc as u64, chunks as u64, m.scale as u64, ms as u64 >> 32]),
        token,
    ];

    let (ws, ws_peers, target) = (st.ws, st.ws_peers, st.sm_target);
    let peer_ws = |r: usize, off: usize| ws_peers[r] + off as u64;
    let scales_gathered = ws;
    let scales_mine = ws + (nr * ms * 4) as u64;
    let outbox = |p: usize| scale_bytes + p * rc * row_bytes;
    let ring_off = |q: usize| scale_bytes + (staging + q) * rc * row_bytes;
    let rows_of = |j: usize| rc.min(ms - j * rc);
    let a_pitch = m.lda * es;

    let es_c = m.c_type.size();
    let c_row = |row: usize| call.c + (row * m.ldc * es_c) as u64;
    let gathered_base = if ring { ws } else { m.a_gathered };
    let chunk_key = |rows: usize| key(m, call.n, k, rows, k, m.ldc, [gathered_base, call.b, call.c], target);
    // Load every GEMM kernel of the call before any flag kernel can spin:
    // CUDA loads a kernel lazily at its first launch, and loading waits for
    // the context's running kernels, so a first launch after this rank's
    // sync kernel would wait for the peers, which may be driven by this
    // very thread (see State::prime). The local GEMM too: its key holds
    // this rank's own alignments.
    let local = key(m, call.n, k, ms, m.lda, m.ldc, [call.a, call.b, call.c], target);
    for key in [chunk_key(rc), chunk_key(rows_of(chunks - 1)), local] {
        st.prime(&key, m, call.b, m.beta)?;
    }
    st.fork()?;
    // This rank's rows: no data to wait for.
    gemm(st, &local, m, call.a, call.b, c_row(me * ms), m.a_scale, m.beta, On::Caller)?;
    if rowwise {
        st.copy_rows(scales_mine, ms * 4, m.a_scale, ms * 4, ms * 4, 1, On::Copy)?;
    }
    if direct.is_none() {
        st.copy_rows(ws + outbox(0) as u64, row_bytes, call.a, a_pitch, row_bytes, rows_of(0), On::Copy)?;
    }
    st.sync(comm, desc)?;
    if rowwise {
        for r in (0..nr).filter(|&r| r != me) {
            let off = nr * ms * 4;
            st.copy_rows(scales_gathered + (r * ms * 4) as u64, ms * 4, peer_ws(r, off), ms * 4, ms * 4, 1, On::Copy)?;
        }
        // Each chunk's GEMM stream waits for the copy stream below.
    }
    if m.a_gathered != 0 {
        st.copy_rows(m.a_gathered + (me * ms * row_bytes) as u64, row_bytes, call.a, a_pitch, row_bytes, ms, On::Copy)?;
    }
    let mut pulled = 0usize;
    for j in 0..chunks {
        let (row0, rows) = (j * rc, rows_of(j));
        if direct.is_none() && j > 0 {
            // Round j-1's barrier let every peer finish round j-2's pulls.
            let a = call.a + (row0 * a_pitch) as u64;
            st.copy_rows(ws + outbox(j % 2) as u64, row_bytes, a, a_pitch, row_bytes, rows, On::Copy)?;
            st.barrier(comm, On::Copy)?;
        }
        for s in 1..nr {
            let r = (me + s) % nr;
            let (src, pitch) = match &direct {
                Some(e) => (e.peers[r] + (call.a - e.start) + (row0 * a_pitch) as u64, a_pitch),
                None => (peer_ws(r, outbox(j % 2)), row_bytes),
            };
            let slot = pulled % ring_slots.max(1);
            let dst = if ring {
                if pulled >= ring_slots {
                    st.wait_slot(slot, On::Copy)?;
                }
                ws + ring_off(slot) as u64
            } else {
                m.a_gathered + ((r * ms + row0) * row_bytes) as u64
            };
            st.copy_rows(dst, row_bytes, src, pitch, row_bytes, rows, On::Copy)?;
            let on = On::gemm(pulled);
            st.order(On::Copy, on)?;
            let scale = if rowwise { scales_gathered + ((r * ms + row0) * 4) as u64 } else { m.a_scale };
            gemm(st, &chunk_key(rows), m, dst, call.b, c_row(r * ms + row0), scale, m.beta, on)?;
            if ring {
                st.record_slot(slot, on)?;
            }
            pulled += 1;
        }
    }
    // No peer reads this rank's shard (or staging slots) any more.
    st.barrier(comm, On::Copy)?;
    st.join()
}
