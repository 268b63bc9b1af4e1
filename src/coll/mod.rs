//! Collectives on the caller's stream: argument checks, how each rank's
//! input reaches the others, algorithm and grid choice, and the launch.
//! One file per collective builds its kernel arguments from a [`Call`].
//!
//! Inputs reach peers in one of two ways:
//! - **direct** (zero-copy): the input lies in a symmetric or registered
//!   buffer, so peers read it where it is; the kernel then ends with a sync
//!   so the buffer is not overwritten while peers still read it;
//! - **staged**: the kernel first copies the input into this rank's
//!   symmetric scratch, in rounds of at most half the scratch, alternating
//!   halves so that copying round k+1 overlaps peers reading round k.
//!
//! Kernels compare a token naming the direct buffer at their first sync, so
//! ranks that disagree (one passes a registered buffer, another does not)
//! fail with an error instead of reading the wrong memory.

pub mod allgather;
mod allgather_write;
pub mod allreduce;
pub mod allreduce_norm;
mod allreduce_norm_write;
mod allreduce_rsag;
mod allreduce_write;
pub mod alltoall;
pub mod alltoallv;
pub mod alltoallv_2d;
pub mod alltoallv_device;
pub mod broadcast;
pub mod copy_engine;
mod defaults;
pub mod one_rank;
pub mod p2p;
pub mod premul_sum;
mod ranges;
pub mod reduce;
pub mod reduce_scatter;
mod reduce_scatter_write;
pub mod timeline;

pub use crate::comm::algo::{self, Algo, AlgoCell, Base, P2PShape};
pub use crate::comm::coll_state::{CheckCache, CollState};
pub use crate::cuda::abi::CollId;
#[cfg(test)]
mod pipe_model;

use std::ffi::{c_void, CStr};

use cudarc::driver::sys::CUstream;

use crate::comm::Comm;
use crate::cuda::abi::{self, CollArgs, OpId, COLL_THREADS};
use crate::cuda::launch::{self, LaunchConfig};
use crate::error::{bail, Result};
use crate::types::{symmDataType_t, symmRedOp_t, RawDataType, RawRedOp};
use crate::memory::index::{BufferEntry, BufferKind};

use defaults::*;
pub(crate) use defaults::{
    allgather_push_by_default, push_before_write, push_by_default, reduce_scatter_write_by_default, write_by_default,
};

/// A validated collective call, as every collective's file sees it.
pub struct Call<'a> {
    pub comm: &'a Comm,
    pub coll: CollId,
    pub dtype: symmDataType_t,
    pub op: symmRedOp_t,
    /// A pre-multiplied sum's scalar ([`premul_sum`]); `op` is then a sum.
    pub premul: Option<crate::comm::red_ops::Scalar>,
    pub root: usize,
    /// Elements: per rank block for all-gather (send count), reduce-scatter
    /// (recv count) and all-to-all (per peer); the whole vector otherwise.
    pub count: u64,
    pub send: u64,
    pub recv: u64,
    pub stream: CUstream,
    /// The symmetric or registered buffer holding the input, if any.
    pub send_buf: Option<BufferEntry>,
    /// ... and the one holding the output.
    pub recv_buf: Option<BufferEntry>,
    /// The algorithm for this call: the communicator's choice, or where
    /// that is `auto`, the measured defaults (`default_algo`).
    pub algo: Algo,
    /// The communicator's choice was `auto`: collectives may apply their
    /// measured per-size defaults (e.g. the two-rank push all-reduce).
    pub defaulted: bool,
}

impl Call<'_> {
    pub fn elem_size(&self) -> u64 {
        self.dtype.size() as u64
    }

    /// The arguments every kernel shares; collectives fill in the rest.
    pub fn args(&self) -> CollArgs {
        let c = self.comm;
        let mut a = c.coll_template(OpId::Collective);
        a.send = self.send;
        a.recv = self.recv;
        a.count = self.count;
        a.chunk = self.count.max(1);
        a.op = self.op as u32;
        a.root = self.root as u32;
        a.coll = self.coll as u32;
        a.dtype = self.dtype as u32;
        a.elem_size = self.dtype.size() as u32;
        if c.coll.check {
            a.mode |= abi::MODE_CHECK;
        }
        if self.algo.classic {
            a.mode |= abi::MODE_CLASSIC;
        }
        if self.algo.light_sync {
            a.mode |= abi::MODE_LIGHT_SYNC;
        }
        if self.algo.serial {
            a.mode |= abi::MODE_SERIAL_ROUNDS;
        }
        a
    }

    /// Let peers write this call's output where it is: every rank's copy of
    /// the recv buffer in `a.scratch` (the push kernel reads them there),
    /// and a token naming both buffers. Only when the input is direct
    /// ([`Call::direct`] first) and the output lies in a symmetric or
    /// registered buffer too.
    pub fn direct_output(&self, a: &mut CollArgs) -> bool {
        let Some(s) = &self.send_buf else { return false };
        let Some((rid, roff)) = self.peer_outputs(a) else { return false };
        a.token = layout_token(&[s.id, self.send - s.start, rid, roff, 0x5055_5348]);
        true
    }

    /// Every rank's copy of the recv buffer into `a.scratch` (where the
    /// push kernels store), and the output's buffer id and offset for the
    /// caller's token; `None` (nothing set) when the output is not in a
    /// symmetric or registered buffer.
    pub fn peer_outputs(&self, a: &mut CollArgs) -> Option<(u64, u64)> {
        let r = self.recv_buf.as_ref()?;
        let roff = self.recv - r.start;
        for k in 0..self.comm.nranks {
            a.scratch[k] = r.peers[k] + roff;
        }
        Some((r.id, roff))
    }

    /// Let peers read the input where it is: every rank's copy, plus the
    /// token peers compare. Only when the input is in a symmetric or
    /// registered buffer (`offset` bytes into it for this call's part).
    pub fn direct(&self, a: &mut CollArgs) -> bool {
        let Some(e) = &self.send_buf else { return false };
        self.note(InputPath::InPlace(e.kind));
        let off = self.send - e.start;
        for r in 0..self.comm.nranks {
            a.src[r] = e.peers[r] + off;
        }
        // Nonzero; equal on two ranks only for the same buffer at the same offset.
        a.token = layout_token(&[e.id, off]);
        a.mode |= abi::MODE_END_SYNC;
        true
    }

    /// Stage the input through scratch, in rounds of at most `max_chunk`
    /// elements.
    pub fn staged(&self, a: &mut CollArgs, max_chunk: u64) -> Result<()> {
        self.staged_in_steps(a, max_chunk, self.vec_elems())
    }

    /// Stage the input through scratch, in rounds of whole `step`s of
    /// elements, at most `max_chunk` (a multiple of `step`).
    pub fn staged_in_steps(&self, a: &mut CollArgs, max_chunk: u64, step: u64) -> Result<()> {
        if max_chunk == 0 {
            bail!(symmInternalError, "scratch too small for one element");
        }
        a.mode |= abi::MODE_STAGED;
        a.chunk = even_rounds(self.count, max_chunk, step);
        self.note(InputPath::Staged);
        Ok(())
    }

    /// Elements in one 16-byte vector, the unit kernels split work in.
    pub fn vec_elems(&self) -> u64 {
        (16 / self.elem_size()).max(1)
    }

    /// Elements of this call's type that fit in `parts` equal parts of a
    /// scratch half, rounded down to whole 16-byte vectors (so a multiple
    /// of `vec_elems`).
    pub fn scratch_elems(&self, parts: u64) -> u64 {
        let sz = self.elem_size();
        let per = self.comm.coll.half / parts / 16 * 16;
        per / sz
    }

    /// Whether this call's per-rank contribution of `bytes` goes as LL
    /// packets. Never with SYMM_CHECK: only the synced kernels compare the
    /// call across ranks. The choice depends on nothing that may differ
    /// between ranks (such as the buffers' kind).
    pub fn use_ll(&self, bytes: u64) -> bool {
        let c = self.comm;
        let limit = match self.algo.base {
            Base::Auto => ll_auto_limit(self.coll, c.nranks),
            Base::Ll => c.coll.ll_max(),
            Base::OneShot | Base::TwoShot => 0,
        };
        c.nranks > 1 && !c.coll.check && bytes <= limit.min(c.coll.ll_max())
    }

    /// Whether the two-shot LL forms may run at all (the all-reduce's and
    /// the fused norm's; each op checks its own fit): by default at
    /// [`LL_TWO_SHOT_DEFAULT_RANKS`], with `SYMM_ALGO=ll` from 3 ranks, and
    /// never with SYMM_CHECK (LL packets compare nothing across ranks).
    pub fn ll_two_shot_allowed(&self) -> bool {
        let by_default = self.defaulted && self.comm.nranks == LL_TWO_SHOT_DEFAULT_RANKS;
        (self.algo.base == Base::Ll || by_default) && !self.comm.coll.check
    }

    /// Whether an all-reduce of `bytes` above the one-shot LL limit goes as
    /// the two-shot LL kernel (kernels/allreduce.cu `allreduce_ll2`): from 3
    /// ranks (at 2 it would fit no more than the one-shot), where every
    /// rank owns an 8-byte unit and a slot holds a share twice (16-byte
    /// packets).
    pub fn use_ll_two_shot(&self, bytes: u64) -> bool {
        let c = self.comm;
        let n = c.nranks as u64;
        let units = bytes.div_ceil(8);
        self.ll_two_shot_allowed() && c.nranks >= 3 && units >= n && 2 * units.div_ceil(n) * 16 <= c.coll.ll_slot
    }

    /// Launch an LL kernel over `bytes` bytes per rank: one 8-byte unit per
    /// thread, as many blocks as that takes.
    pub fn launch_ll(&self, kernel: &'static CStr, bytes: u64) -> Result<()> {
        let units = bytes.div_ceil(8);
        let max = self.comm.coll.max_grid as u64;
        let block = if units <= LL_SMALL_BLOCK as u64 * max { LL_SMALL_BLOCK } else { COLL_THREADS };
        let grid = units.div_ceil(block as u64).clamp(1, max) as u32;
        let mut a = self.args();
        self.note(InputPath::Ll);
        self.mark_dependent(&mut a);
        self.launch_with(kernel, grid, block, &mut a)
    }

    /// Mark an LL kernel's arguments for a programmatic dependent launch
    /// (MODE_PDL) and say whether it goes out as one: not `nopdl`, where
    /// the communicator allows it (CollState::programmatic_launch).
    pub fn mark_dependent(&self, a: &mut CollArgs) -> bool {
        let dependent = self.algo.pdl && self.comm.coll.programmatic_launch;
        if dependent {
            a.mode |= abi::MODE_PDL;
        }
        dependent
    }

    /// Log how this call's input reaches the peers: at INFO the first time
    /// each collective takes each path on this communicator, at TRACE
    /// every time. (How to tell from a log that a registered buffer was
    /// really read in place.)
    fn note(&self, path: InputPath) {
        let c = self.comm;
        let bit = 1u64 << ((self.coll as u32 as u64 * 4 + path.index()) % 64);
        let first = c.coll.paths.fetch_or(bit, std::sync::atomic::Ordering::Relaxed) & bit == 0;
        let level = if first { log::Level::Info } else { log::Level::Trace };
        log::log!(
            target: "symmcomm::coll",
            level,
            "rank {}/{}: {} of {} bytes {}",
            c.rank,
            c.nranks,
            self.coll.name(),
            self.count * self.elem_size(),
            path.describe()
        );
    }

    /// Blocks for moving `bytes` per rank: enough to keep the links busy,
    /// never more than the slowest rank's SM count allows (nor `grid=N`),
    /// the same on every rank.
    pub fn grid(&self, bytes: u64) -> u32 {
        let max = self.comm.coll.max_grid.min(self.algo.grid_cap()) as u64;
        bytes.div_ceil(BYTES_PER_BLOCK).clamp(1, max) as u32
    }

    /// Launch `kernel` on the call's stream.
    pub fn launch(&self, kernel: &'static CStr, grid: u32, a: &mut CollArgs) -> Result<()> {
        self.launch_with(kernel, grid, COLL_THREADS, a)
    }

    /// Launch with `block` threads per block (at most COLL_THREADS), with
    /// the communicator's context current (see [`Request::validate`]).
    fn launch_with(&self, kernel: &'static CStr, grid: u32, block: u32, a: &mut CollArgs) -> Result<()> {
        let f = self.comm.device.module().function(kernel)?;
        let dependent = a.mode & abi::MODE_PDL != 0; // LL kernels only (launch_ll)
        let mut params = [(a as *mut CollArgs).cast::<c_void>()];
        launch::launch_as(f, LaunchConfig { grid, block, shared_mem: 0 }, self.stream, &mut params, dependent)
    }
}

/// How a collective's input reaches the peers.
#[derive(Clone, Copy, Debug)]
enum InputPath {
    /// Peers read it where it is (zero-copy): a buffer of this kind.
    InPlace(BufferKind),
    /// Copied through this rank's symmetric scratch first.
    Staged,
    /// Sent as LL packets (small messages).
    Ll,
}

impl InputPath {
    fn index(self) -> u64 {
        match self {
            InputPath::InPlace(BufferKind::Symmetric) => 0,
            InputPath::InPlace(BufferKind::Registered) => 1,
            InputPath::Staged => 2,
            InputPath::Ll => 3,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            InputPath::InPlace(BufferKind::Symmetric) => "read in place by the peers from a symmetric buffer (zero-copy)",
            InputPath::InPlace(BufferKind::Registered) => "read in place by the peers from a registered buffer (zero-copy)",
            InputPath::Staged => "staged through scratch (ordinary buffer, or in place)",
            InputPath::Ll => "sent as LL packets (small message)",
        }
    }
}

/// Round size for `count` elements in rounds of at most `max_chunk`: as
/// even as whole `step`s allow. Kernels split every round among their blocks
/// as if it were full, so that each block stages to the same part of scratch
/// in every round (coll.cuh, round_share); an uneven last round would leave
/// most blocks idle. `max_chunk` must be a multiple of `step`.
pub(crate) fn even_rounds(count: u64, max_chunk: u64, step: u64) -> u64 {
    if count <= max_chunk {
        return max_chunk;
    }
    let rounds = count.div_ceil(max_chunk);
    (count.div_ceil(rounds).div_ceil(step) * step).min(max_chunk)
}

/// The token a kernel's peers compare at its first sync: the words (the
/// buffers' ids and offsets, a kernel's salt) hashed and folded to 32 bits,
/// never 0 (0 means staged: no user buffer read by peers).
fn layout_token(words: &[u64]) -> u32 {
    let h = crate::fnv::fnv1a64_words(words.iter().copied());
    (h as u32 ^ (h >> 32) as u32) | 1
}

/// How many `count`-element blocks a buffer holds, relative to the
/// communicator (resolved in [`Request::validate`], which has it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocks {
    One,
    /// One per rank (all-gather output, reduce-scatter input, all-to-all).
    PerRank,
    /// One on the root, none elsewhere (broadcast input, reduce output).
    RootOnly,
}

impl Blocks {
    fn resolve(self, comm: &Comm, root: usize) -> usize {
        match self {
            Blocks::One => 1,
            Blocks::PerRank => comm.nranks,
            Blocks::RootOnly => (comm.rank == root) as usize,
        }
    }
}

/// The checks every collective makes before it enqueues anything.
pub struct Request {
    pub coll: CollId,
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: usize,
    pub dtype: RawDataType,
    /// `None` for collectives without a reduction.
    pub op: Option<RawRedOp>,
    pub root: Option<i32>,
    /// Elements of `send` and of `recv`, as multiples of `count`.
    pub send_blocks: Blocks,
    pub recv_blocks: Blocks,
}

impl Request {
    /// A collective on `count` elements with one block of input and output
    /// and no reduction or root; the builders below adjust it.
    pub fn new(coll: CollId, send: *const c_void, recv: *mut c_void, count: usize, dtype: RawDataType) -> Request {
        Request { coll, send, recv, count, dtype, op: None, root: None, send_blocks: Blocks::One, recv_blocks: Blocks::One }
    }

    pub fn op(self, op: RawRedOp) -> Request {
        Request { op: Some(op), ..self }
    }

    pub fn root(self, root: i32) -> Request {
        Request { root: Some(root), ..self }
    }

    /// `send` and `recv` hold these many blocks of `count` elements.
    pub fn blocks(self, send_blocks: Blocks, recv_blocks: Blocks) -> Request {
        Request { send_blocks, recv_blocks, ..self }
    }

    /// Validate everything and classify the input; `Ok(None)` when there
    /// is nothing to do (count 0). The communicator's context must be
    /// current, from here through the launch.
    pub fn validate<'a>(self, comm: &'a Comm, stream: CUstream) -> Result<Option<Call<'a>>> {
        let Some(dtype) = symmDataType_t::from_raw(self.dtype) else {
            bail!(symmInvalidArgument, "datatype {} is not a symmDataType_t (0..{})", self.dtype, symmDataType_t::ALL.len() - 1);
        };
        let (op, premul) = match self.op {
            None => (symmRedOp_t::symmSum, None),
            Some(raw) => premul_sum::resolve(comm, raw, dtype)?,
        };
        let root = match self.root {
            None => 0,
            Some(r) if r >= 0 && (r as usize) < comm.nranks => r as usize,
            Some(r) => bail!(symmInvalidArgument, "root {r} is out of range for {} ranks", comm.nranks),
        };
        comm.check_usable()?;
        let bytes = |blocks: Blocks| -> Result<usize> {
            let blocks = blocks.resolve(comm, root);
            self.count
                .checked_mul(dtype.size())
                .and_then(|b| b.checked_mul(blocks))
                .filter(|&b| b <= isize::MAX as usize)
                .ok_or_else(|| crate::error::err!(symmInvalidArgument, "count {} x {} bytes x {blocks} overflows", self.count, dtype.size()))
        };
        let (send_bytes, recv_bytes) = (bytes(self.send_blocks)?, bytes(self.recv_blocks)?);
        comm.check_stream(stream)?;
        if self.count == 0 {
            return Ok(None);
        }
        let send_buf = if send_bytes > 0 { comm.check_buffer(self.send, send_bytes, "sendbuff")? } else { None };
        // In place the output is the input, already checked.
        let same = send_bytes == recv_bytes && std::ptr::eq(self.send, self.recv);
        let recv_buf = if recv_bytes == 0 {
            None
        } else if same {
            send_buf
        } else {
            comm.check_buffer(self.recv, recv_bytes, "recvbuff")?
        };
        let chosen = comm.coll.algo.get();
        Ok(Some(Call {
            comm,
            coll: self.coll,
            dtype,
            op,
            premul,
            root,
            count: self.count as u64,
            send: self.send as u64,
            recv: self.recv as u64,
            stream,
            send_buf,
            recv_buf,
            algo: default_algo(chosen, comm.nranks),
            defaulted: chosen.is_auto(),
        }))
    }
}

/// The per-call checks every collective and fused op makes of its
/// communicator, stream and buffers.
impl Comm {
    /// Refuse a communicator that was aborted or has an asynchronous error.
    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.is_aborted() {
            bail!(symmInvalidUsage, "the communicator was aborted");
        }
        if let Err(e) = self.async_error() {
            bail!(symmInvalidUsage, "the communicator has an asynchronous error and must be aborted: {}", e.msg);
        }
        Ok(())
    }

    /// A non-null buffer of `bytes` usable by this rank's GPU: a symmetric
    /// or registered buffer (returned), or plain device memory of this GPU
    /// (cached, see [`CheckCache`]).
    pub(crate) fn check_buffer(&self, ptr: *const c_void, bytes: usize, name: &str) -> Result<Option<BufferEntry>> {
        self.check_buffer_cached(ptr, bytes, name, !self.coll.check)
    }

    /// `check_buffer` asking the driver about a plain buffer every call:
    /// for calls whose work dwarfs the query (the fused ops' GEMMs), so a
    /// smaller buffer allocated where a remembered one was freed is caught.
    pub(crate) fn check_buffer_uncached(&self, ptr: *const c_void, bytes: usize, name: &str) -> Result<Option<BufferEntry>> {
        self.check_buffer_cached(ptr, bytes, name, false)
    }

    fn check_buffer_cached(&self, ptr: *const c_void, bytes: usize, name: &str, use_cache: bool) -> Result<Option<BufferEntry>> {
        if ptr.is_null() {
            bail!(symmInvalidArgument, "{name} is NULL");
        }
        if let Some(e) = self.mem.find(ptr as u64, bytes as u64) {
            return Ok(Some(e));
        }
        let checks = &self.coll.checks;
        if use_cache && checks.knows_range(ptr as u64, bytes as u64) {
            return Ok(None);
        }
        let range = launch::check_device_buffer(&self.device, ptr, bytes, name)?;
        checks.remember_range(range);
        Ok(None)
    }

    /// Reject a stream of another device (cached, see [`CheckCache`]).
    pub(crate) fn check_stream(&self, stream: CUstream) -> Result<()> {
        let checks = &self.coll.checks;
        if !self.coll.check && !stream.is_null() && checks.knows_stream(stream) {
            return Ok(());
        }
        launch::check_stream(&self.device, stream)?;
        checks.remember_stream(stream);
        Ok(())
    }
}

/// Kernel name for a reduction family and element type.
pub fn reduce_kernel(family: usize, dtype: symmDataType_t) -> &'static CStr {
    macro_rules! names {
        ($($f:literal),*) => {
            [$([
                concat!("symm_", $f, "_i8\0"), concat!("symm_", $f, "_u8\0"), concat!("symm_", $f, "_i32\0"),
                concat!("symm_", $f, "_u32\0"), concat!("symm_", $f, "_i64\0"), concat!("symm_", $f, "_u64\0"),
                concat!("symm_", $f, "_f16\0"), concat!("symm_", $f, "_f32\0"), concat!("symm_", $f, "_f64\0"),
                concat!("symm_", $f, "_bf16\0"), concat!("symm_", $f, "_f8e4m3\0"), concat!("symm_", $f, "_f8e5m2\0"),
            ]),*]
        };
    }
    static NAMES: [[&str; 12]; 12] = names!(
        "allreduce",
        "reduce_scatter",
        "reduce",
        "allreduce_ll",
        "reduce_scatter_ll",
        "allreduce_push",
        "allreduce_pipe",
        "reduce_scatter_pipe",
        "allreduce_ll2",
        "allreduce_write",
        "reduce_scatter_write",
        "premul_scale"
    );
    let s = NAMES[family][dtype as usize];
    CStr::from_bytes_with_nul(s.as_bytes()).expect("kernel names are NUL-terminated")
}

pub(crate) const FAMILY_ALLREDUCE: usize = 0;
pub(crate) const FAMILY_REDUCE_SCATTER: usize = 1;
pub(crate) const FAMILY_REDUCE: usize = 2;
pub(crate) const FAMILY_ALLREDUCE_LL: usize = 3;
pub(crate) const FAMILY_REDUCE_SCATTER_LL: usize = 4;
pub(crate) const FAMILY_ALLREDUCE_PUSH: usize = 5;
pub(crate) const FAMILY_ALLREDUCE_PIPE: usize = 6;
pub(crate) const FAMILY_REDUCE_SCATTER_PIPE: usize = 7;
pub(crate) const FAMILY_ALLREDUCE_LL_TWO_SHOT: usize = 8;
pub(crate) const FAMILY_ALLREDUCE_WRITE: usize = 9;
pub(crate) const FAMILY_REDUCE_SCATTER_WRITE: usize = 10;
/// Not a reduction: the pre-multiplied sum's scaling pass.
pub(crate) const FAMILY_PREMUL_SCALE: usize = 11;

/// Element types the opt-in push and pipelined kernels are built for
/// (kernels/pipe.cuh, SYMM_FOR_EACH_OPT_IN_TYPE); other types run the
/// default kernels whatever SYMM_ALGO says.
pub(crate) fn opt_in_dtype(dtype: symmDataType_t) -> bool {
    matches!(dtype, symmDataType_t::symmFloat16 | symmDataType_t::symmFloat32 | symmDataType_t::symmBfloat16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names() {
        assert_eq!(reduce_kernel(FAMILY_ALLREDUCE, symmDataType_t::symmBfloat16), c"symm_allreduce_bf16");
        assert_eq!(reduce_kernel(FAMILY_REDUCE, symmDataType_t::symmFloat8e5m2), c"symm_reduce_f8e5m2");
        assert_eq!(reduce_kernel(FAMILY_REDUCE_SCATTER, symmDataType_t::symmInt8), c"symm_reduce_scatter_i8");
        assert_eq!(reduce_kernel(FAMILY_ALLREDUCE_LL, symmDataType_t::symmFloat64), c"symm_allreduce_ll_f64");
        assert_eq!(reduce_kernel(FAMILY_REDUCE_SCATTER_LL, symmDataType_t::symmUint32), c"symm_reduce_scatter_ll_u32");
        assert_eq!(reduce_kernel(FAMILY_ALLREDUCE_PUSH, symmDataType_t::symmFloat16), c"symm_allreduce_push_f16");
        assert_eq!(reduce_kernel(FAMILY_ALLREDUCE_PIPE, symmDataType_t::symmBfloat16), c"symm_allreduce_pipe_bf16");
        assert!(opt_in_dtype(symmDataType_t::symmFloat32) && !opt_in_dtype(symmDataType_t::symmInt32));
        assert_eq!(reduce_kernel(FAMILY_REDUCE_SCATTER_PIPE, symmDataType_t::symmFloat32), c"symm_reduce_scatter_pipe_f32");
        assert_eq!(reduce_kernel(FAMILY_ALLREDUCE_LL_TWO_SHOT, symmDataType_t::symmFloat64), c"symm_allreduce_ll2_f64");
        assert_eq!(reduce_kernel(FAMILY_PREMUL_SCALE, symmDataType_t::symmInt64), c"symm_premul_scale_i64");
        assert_eq!(reduce_kernel(FAMILY_ALLREDUCE_WRITE, symmDataType_t::symmBfloat16), c"symm_allreduce_write_bf16");
        assert_eq!(
            reduce_kernel(FAMILY_REDUCE_SCATTER_WRITE, symmDataType_t::symmFloat16),
            c"symm_reduce_scatter_write_f16"
        );
    }

    #[test]
    fn rounds_are_even_whole_steps() {
        // One round: the whole scratch share, as before.
        assert_eq!(even_rounds(100, 4096, 8), 4096);
        assert_eq!(even_rounds(4096, 4096, 8), 4096);
        // Just over one round: two halves, not a full round and a sliver.
        assert_eq!(even_rounds(4097, 4096, 8), 2056);
        for (count, max, step) in [(3_000_001u64, 1_048_576u64, 8u64), (12_000_004, 262_144, 16), (999, 64, 2), (10, 4, 4)] {
            let chunk = even_rounds(count, max, step);
            let rounds = count.div_ceil(chunk);
            assert_eq!(chunk % step, 0, "{count} in {max}: {chunk} is not whole steps");
            assert!(chunk <= max, "{count} in {max}: {chunk} overflows the scratch share");
            assert_eq!(rounds, count.div_ceil(max), "{count} in {max}: {chunk} takes more rounds than needed");
            let last = count - (rounds - 1) * chunk;
            assert!(chunk - last <= step * rounds, "{count} in {max}: last round {last} of {chunk}");
        }
    }
}
