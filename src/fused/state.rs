//! Per-communicator resources of the fused ops, made at the first fused
//! call: a cuBLASLt handle, three internal streams (two for GEMMs, one for
//! copies and flag kernels), events, three cuBLASLt workspaces, and the
//! symmetric workspace (grown later when a call wants more, see `lock`).
//! Also the small enqueue helpers the pipelines share (fork/join, copies,
//! flag kernels, the reduction).
//!
//! The symmetric workspace (`SYMM_FUSED_WORKSPACE_BYTES` per rank, 256 MiB
//! by default, or what the first call wants up to
//! `SYMM_FUSED_WORKSPACE_MAX_BYTES`) is allocated collectively, like
//! symmMemAlloc, so the first fused call on a communicator is a collective
//! host call: every rank makes it (they do anyway; the fused calls are
//! collectives), a thread driving several ranks makes it inside
//! symmGroupStart/End, and it cannot be captured into a graph (it
//! allocates). A later call that wants more grows it the same way (uncaptured
//! only); other calls only enqueue.
//!
//! Never block the host once a flag kernel may spin. A rank's call enqueues
//! kernels that wait for its peers, and a thread driving several ranks
//! reaches the next rank's call only when this one returns; so no driver
//! call after a rank's first flag kernel (nor, in State::new, after the
//! collective allocation, when a peer's thread may already be enqueueing)
//! may wait for the device's running kernels. The driver does wait for
//! them when it loads a kernel (CUDA loads lazily, at the first launch, by
//! default) and when it first sets up some kinds of work in a context. So
//! every GEMM is primed before the call's first flag kernel (State::prime),
//! State::new does its local setup and a first copy of each kind (local and
//! from a peer) before the allocation, and a host step that still takes
//! long is logged with its name (`slow`). Where several ranks share one
//! context (the test-only shared-device mode driven by one thread), a
//! rank's first launch also waits for the other ranks' spinning kernels;
//! priming covers that as long as the ranks' calls need the same kernels
//! (same shapes and alignments), which the tests' calls do.

use std::collections::HashSet;
use std::ffi::{c_void, CStr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUevent, CUstream};
use parking_lot::MutexGuard;

use super::blaslt::{Blas, GemmKey, GemmPtrs};
use crate::comm::Comm;
use crate::config;
use crate::cuda::abi::{FlagArgs, OpId, MAX_RANKS};
use crate::cuda::buffer::DeviceBuffer;
use crate::cuda::cu;
use crate::cuda::device::Device;
use crate::cuda::launch::{self, LaunchConfig};
use crate::error::{bail, Result};
use crate::memory::{pad, symmetric};
use crate::types::symmDataType_t;

/// cuBLASLt workspace per GEMM stream (what cuBLAS uses on Hopper).
const BLAS_WORKSPACE: usize = 32 << 20;
/// Events that outlive one enqueue step (ring slots, outbox slots).
pub(crate) const SLOT_EVENTS: usize = 2 * MAX_RANKS;

/// `SymmFusedSyncArgs` (kernels/fused.cu).
#[repr(C)]
#[derive(Clone, Copy)]
struct SyncArgs {
    flags: FlagArgs,
    desc: u64,
    peer_desc: [u64; MAX_RANKS],
    mine: [u32; 4],
}
const _: () = assert!(std::mem::size_of::<SyncArgs>() == std::mem::size_of::<FlagArgs>() + 8 + 8 * MAX_RANKS + 16);

/// `SymmFusedReduceArgs` (kernels/fused.cu).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ReduceArgs {
    pub src: [u64; MAX_RANKS],
    pub out: u64,
    pub rows: u64,
    pub cols: u64,
    pub ld_out: u64,
    pub beta: f32,
    pub nsrc: u32,
}
const _: () = assert!(std::mem::size_of::<ReduceArgs>() == 8 * MAX_RANKS + 8 + 24 + 8);

/// Flag kernels target every peer with this `peer`.
pub(crate) const ALL_PEERS: u32 = u32::MAX;

/// Which internal stream.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum On {
    Caller,
    /// Two GEMM streams: a pipeline alternates its chunk GEMMs between
    /// them, so the next GEMM fills the SMs the last wave of the previous
    /// one leaves idle (measured on one H100: +2 to +7 % over one stream
    /// at 4-8 chunks of 8192 x 8192 x 1024-4096 bf16, docs/PERFORMANCE.md).
    Compute,
    Compute2,
    Copy,
}

impl On {
    /// The GEMM stream of a pipeline's `i`-th chunk GEMM.
    pub fn gemm(i: usize) -> On {
        if i.is_multiple_of(2) {
            On::Compute
        } else {
            On::Compute2
        }
    }
}

pub struct State {
    device: Arc<Device>,
    /// Dropped first, with the device current (see Drop).
    pub blas: std::mem::ManuallyDrop<Blas>,
    compute: [CUstream; 2],
    copy: CUstream,
    /// [0]: fork/relay; then SLOT_EVENTS that persist across steps.
    events: Vec<CUevent>,
    /// cuBLASLt workspaces of the caller's and the two GEMM streams.
    blas_ws: [DeviceBuffer; 3],
    /// This rank's symmetric workspace and every rank's, as seen here.
    pub ws: u64,
    pub ws_peers: [u64; MAX_RANKS],
    pub ws_bytes: usize,
    /// SMs the pipelined GEMMs target (0: all).
    pub sm_target: u32,
    /// The caller's stream of the call being enqueued.
    caller: CUstream,
    /// GEMMs run once already (key, beta != 0): their kernels are loaded.
    primed: HashSet<(GemmKey, bool)>,
}

// SAFETY: driver handles, used under the communicator's fused lock.
unsafe impl Send for State {}

/// The communicator's fused state, made first if needed, with a workspace
/// grown to `want` bytes where the call wants more and may grow it (see
/// `grown_size`). Making or growing it is collective: every rank makes the
/// same call with the same shapes, so every rank does it at the same call.
pub fn lock(comm: &Comm, stream: CUstream, want: usize) -> Result<StateGuard<'_>> {
    let mut g = comm.fused.lock();
    match g.as_mut().and_then(|b| b.downcast_mut::<State>()) {
        None => {
            if is_capturing(stream)? {
                bail!(
                    symmInvalidUsage,
                    "the first fused call on a communicator allocates its workspace and cannot be captured in a CUDA graph; \
                     make one call (a warm-up) before capturing"
                );
            }
            let bytes = grown_size(0, want).unwrap_or(config::get().fused_workspace_bytes);
            *g = Some(Box::new(State::new(comm, bytes)?));
        }
        Some(st) => {
            if let Some(bytes) = grown_size(st.ws_bytes, want) {
                if is_capturing(stream)? {
                    log::info!(
                        target: "symmcomm::fused",
                        "rank {}: a captured fused call wants {} MiB of workspace, the communicator has {}: it runs in smaller \
                         chunks (an uncaptured call of this shape first grows the workspace)",
                        comm.rank, want >> 20, st.ws_bytes >> 20
                    );
                } else {
                    st.grow(comm, bytes)?;
                }
            }
        }
    }
    Ok(StateGuard { guard: g })
}

/// The size a workspace of `have` bytes grows to for a call that wants
/// `want` (None: it does not grow): at least SYMM_FUSED_WORKSPACE_BYTES,
/// at most SYMM_FUSED_WORKSPACE_MAX_BYTES.
fn grown_size(have: usize, want: usize) -> Option<usize> {
    let cfg = config::get();
    grown_within(have, want, cfg.fused_workspace_bytes, cfg.fused_workspace_max_bytes)
}

fn grown_within(have: usize, want: usize, first: usize, max: usize) -> Option<usize> {
    let to = want.clamp(first, max.max(first));
    (to > have).then_some(to)
}

/// Whether a call wanting `want` bytes of workspace only enqueues: the
/// state exists and needs no growing (or cannot grow: under capture).
pub fn ready(comm: &Comm, want: usize, stream: CUstream) -> Result<bool> {
    let have = comm.fused.lock().as_ref().and_then(|b| b.downcast_ref::<State>()).map(|st| st.ws_bytes);
    Ok(match have {
        None => false,
        Some(have) => grown_size(have, want).is_none() || is_capturing(stream)?,
    })
}

pub struct StateGuard<'a> {
    guard: MutexGuard<'a, Option<Box<dyn std::any::Any + Send>>>,
}

impl StateGuard<'_> {
    pub fn get(&mut self) -> &mut State {
        self.guard.as_mut().and_then(|b| b.downcast_mut::<State>()).expect("the fused slot holds a fused::State")
    }
}

fn is_capturing(stream: CUstream) -> Result<bool> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    cu!(cuStreamIsCapturing(stream, &mut status))?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

impl State {
    fn new(comm: &Comm, bytes: usize) -> Result<State> {
        let dev = comm.device.clone();
        let _cur = dev.make_current()?;
        // Local setup first (see the module comment): once this rank is
        // through the collective allocation below, a peer driven by another
        // thread may enqueue kernels that wait for this rank, and a driver
        // call that waits for the running kernels would then wait for them.
        // Every rank reaches the allocation even if this fails.
        let local = State::local(comm);
        let ws = alloc_workspace(comm, bytes);
        // A local failure leaves the workspace with the communicator (freed
        // when it is destroyed).
        let mut state = local?;
        state.attach(comm, ws?, bytes);
        log::info!(
            target: "symmcomm::fused",
            "rank {}: fused ops ready (cuBLASLt {}, {} MiB symmetric workspace at {:#x})",
            comm.rank, state.blas.version(), bytes >> 20, state.ws
        );
        Ok(state)
    }

    fn attach(&mut self, comm: &Comm, ws: u64, bytes: usize) {
        let off = ws - comm.mem.space.slot(comm.rank);
        for (r, p) in self.ws_peers.iter_mut().enumerate().take(comm.nranks) {
            *p = comm.mem.space.slot(r) + off;
        }
        self.ws = ws;
        self.ws_bytes = bytes;
    }

    /// Replace the workspace by one of `bytes` (collective, see `lock`).
    /// The old one goes first, so the GPU never holds both: freeing waits
    /// for this device's work and meets the peers, so no kernel of any
    /// rank still uses it. A host step like the first call's allocation;
    /// later calls of the shape only enqueue.
    fn grow(&mut self, comm: &Comm, bytes: usize) -> Result<()> {
        let old = std::mem::replace(&mut self.ws, 0);
        self.ws_bytes = 0;
        if old != 0 {
            symmetric::free_internal(&comm.mem, &comm.link, old).map_err(|e| e.context("freeing the fused workspace to grow it"))?;
        }
        let ws = alloc_workspace(comm, bytes)?;
        self.attach(comm, ws, bytes);
        log::info!(target: "symmcomm::fused", "rank {}: fused workspace grown to {} MiB at {ws:#x}", comm.rank, bytes >> 20);
        Ok(())
    }

    /// Everything but the symmetric workspace.
    fn local(comm: &Comm) -> Result<State> {
        let dev = &comm.device;
        let name = format!("{} (sm_{}{})", dev.name, dev.compute_capability.0, dev.compute_capability.1);
        let blas = Blas::new(name, BLAS_WORKSPACE)?;
        let cfg = config::get();
        let (mut least, mut greatest) = (0, 0);
        cu!(cuCtxGetStreamPriorityRange(&mut least, &mut greatest))?;
        let mut state = State {
            device: dev.clone(),
            blas: std::mem::ManuallyDrop::new(blas),
            compute: [std::ptr::null_mut(); 2],
            copy: std::ptr::null_mut(),
            events: Vec::new(),
            blas_ws: [
                DeviceBuffer::zeroed(dev, BLAS_WORKSPACE)?,
                DeviceBuffer::zeroed(dev, BLAS_WORKSPACE)?,
                DeviceBuffer::zeroed(dev, BLAS_WORKSPACE)?,
            ],
            ws: 0,
            ws_peers: [0; MAX_RANKS],
            ws_bytes: 0,
            sm_target: (dev.sm_count as u32).saturating_sub(cfg.fused_reserve_sms).max(1),
            caller: std::ptr::null_mut(),
            primed: HashSet::new(),
        };
        // Non-blocking: never ordered behind the legacy default stream.
        // The copy stream carries the flag kernels: high priority, so they
        // get the next free SM slot next to the GEMMs.
        for s in &mut state.compute {
            cu!(cuStreamCreateWithPriority(s, 1, least))?;
        }
        cu!(cuStreamCreateWithPriority(&mut state.copy, 1, greatest))?;
        for _ in 0..1 + SLOT_EVENTS {
            let mut e: CUevent = std::ptr::null_mut();
            cu!(cuEventCreate(&mut e, 0x2))?; // CU_EVENT_DISABLE_TIMING
            state.events.push(e);
        }
        // One copy of each kind the pipelines make (packed and pitched,
        // which the driver may run differently; from here and from a peer,
        // read from its signal pad, mapped since the communicator was made)
        // on the stream that makes them, while nothing of ours can spin.
        // Into a GEMM stream's cuBLASLt workspace, which its first GEMM
        // then waits for.
        let scratch = state.blas_ws[1].ptr;
        let mut sources = vec![scratch + 4096];
        if comm.nranks > 1 {
            sources.push(comm.pads.local((comm.rank + 1) % comm.nranks, pad::FUSED_OFFSET));
        }
        for src in sources {
            state.copy_rows(scratch, 256, src, 256, 256, 2, On::Copy)?;
            state.copy_rows(scratch, 192, src, 160, 144, 2, On::Copy)?;
        }
        state.order(On::Copy, On::Compute)?;
        Ok(state)
    }

    pub fn begin(&mut self, caller: CUstream) {
        self.caller = caller;
    }

    pub fn stream(&self, on: On) -> CUstream {
        match on {
            On::Caller => self.caller,
            On::Compute => self.compute[0],
            On::Compute2 => self.compute[1],
            On::Copy => self.copy,
        }
    }

    /// `to` waits for everything enqueued on `from` so far.
    pub fn order(&self, from: On, to: On) -> Result<()> {
        // One event serves every relay: a wait takes the event's state when
        // it is enqueued, right after the record.
        let e = self.events[0];
        cu!(cuEventRecord(e, self.stream(from)))?;
        cu!(cuStreamWaitEvent(self.stream(to), e, 0))?;
        Ok(())
    }

    /// The internal streams start after the caller's earlier work.
    pub fn fork(&self) -> Result<()> {
        for on in [On::Compute, On::Compute2, On::Copy] {
            self.order(On::Caller, on)?;
        }
        Ok(())
    }

    /// The caller's stream continues after the internal streams.
    pub fn join(&self) -> Result<()> {
        for on in [On::Compute, On::Compute2, On::Copy] {
            self.order(on, On::Caller)?;
        }
        Ok(())
    }

    pub fn record_slot(&self, slot: usize, on: On) -> Result<()> {
        cu!(cuEventRecord(self.events[1 + slot], self.stream(on)))?;
        Ok(())
    }

    pub fn wait_slot(&self, slot: usize, on: On) -> Result<()> {
        cu!(cuStreamWaitEvent(self.stream(on), self.events[1 + slot], 0))?;
        Ok(())
    }

    /// A GEMM on `on`, with that stream's cuBLASLt workspace.
    pub fn gemm(&mut self, key: &GemmKey, p: &GemmPtrs, beta: f32, on: On) -> Result<()> {
        let ws = self.blas_ws[match on {
            On::Compute => 1,
            On::Compute2 => 2,
            On::Caller | On::Copy => 0,
        }]
        .ptr;
        let stream = self.stream(on);
        let blas = &mut self.blas;
        slow("cublasLtMatmul", || blas.gemm(key, p, beta, ws, stream))
    }

    /// Load the kernels of `key`'s GEMM with this `beta` before the call
    /// enqueues anything that waits for a peer (see the module comment):
    /// make the plan and, the first time, run it on the caller's stream
    /// with A and C in the symmetric workspace, at the key's alignments
    /// (garbage in, garbage out; B and the scales are the call's). cuBLASLt
    /// may launch other kernels when beta != 0 (a split-K reduction that
    /// reads C, say), so each kind of beta is primed. Only as many rows as
    /// fit the workspace run: the same algorithm, so the same kernels. The
    /// workspace is free here: peers touch it only after this call's start
    /// sync, and the previous call's end barrier is ordered before. Under
    /// capture nothing runs: a graph's kernels load when it is
    /// instantiated, before any replay can spin.
    pub fn prime(&mut self, key: &GemmKey, m: &super::desc::Matmul, b: u64, beta: f32) -> Result<()> {
        let tag = (*key, beta != 0.0);
        if self.primed.contains(&tag) {
            return Ok(());
        }
        self.blas.make_plan(key)?;
        if is_capturing(self.caller)? {
            return Ok(());
        }
        // The workspace is at least 256-byte aligned: an offset of `align`
        // bytes gives a pointer aligned exactly as the key says.
        let at = |align: u32| if align >= 256 { 0u64 } else { align as u64 };
        let (a_at, c_at) = (at(key.align[0]), at(key.align[2]));
        let row_bytes = (key.lda as usize * key.a_type.size()).max(key.ldc as usize * key.c_type.size()).max(1);
        let rows = (key.m as usize).min(self.ws_bytes.saturating_sub(512) / row_bytes);
        if rows == 0 {
            log::debug!(target: "symmcomm::fused", "one row of {key:?} does not fit the workspace: not primed");
            return Ok(());
        }
        let p = GemmPtrs { a: self.ws + a_at, b, c: self.ws + c_at, a_scale: m.a_scale, b_scale: m.b_scale };
        let (ws, stream) = (self.blas_ws[0].ptr, self.caller);
        let blas = &mut self.blas;
        slow("priming a cuBLASLt GEMM", || blas.gemm_rows(key, rows as u64, &p, beta, ws, stream))?;
        self.primed.insert(tag);
        Ok(())
    }

    /// `rows` rows of `width` bytes, on the copy engines.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_rows(&self, dst: u64, dpitch: usize, src: u64, spitch: usize, width: usize, rows: usize, on: On) -> Result<()> {
        if rows == 0 || width == 0 || dst == src {
            return Ok(());
        }
        if dpitch == width && spitch == width {
            return slow("cuMemcpyDtoDAsync", || Ok(cu!(cuMemcpyDtoDAsync_v2(dst, src, width * rows, self.stream(on)))?));
        }
        let p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            srcPitch: spitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: dpitch,
            WidthInBytes: width,
            Height: rows,
        };
        slow("cuMemcpy2DAsync", || Ok(cu!(cuMemcpy2DAsync_v2(&p, self.stream(on)))?))
    }

    fn launch<T>(&self, kernel: &'static CStr, grid: u32, block: u32, args: &mut T, on: On) -> Result<()> {
        let f = self.device.module().function(kernel)?;
        let mut params = [(args as *mut T).cast::<c_void>()];
        slow(kernel.to_str().unwrap_or("a kernel launch"), || {
            launch::launch(f, LaunchConfig { grid, block, shared_mem: 0 }, self.stream(on), &mut params)
        })
    }

    /// Start sync on the copy stream: meet every rank and compare `desc`.
    pub fn sync(&self, comm: &Comm, desc: [u32; 4]) -> Result<()> {
        let mut peer_desc = [0u64; MAX_RANKS];
        for (r, d) in peer_desc.iter_mut().enumerate().take(comm.nranks) {
            *d = comm.pads.local(r, pad::FUSED_DESC_OFFSET);
        }
        let mut a = SyncArgs {
            flags: comm.flag_args(OpId::Collective, pad::FUSED_SYNC_OFFSET, 0),
            desc: comm.pads.local(comm.rank, pad::FUSED_DESC_OFFSET),
            peer_desc,
            mine: desc,
        };
        self.launch(c"symm_fused_sync", 1, 32, &mut a, On::Copy)
    }

    /// Barrier of all ranks on `on` (the fused ops' own row).
    pub fn barrier(&self, comm: &Comm, on: On) -> Result<()> {
        let mut a = comm.flag_args(OpId::Collective, pad::FUSED_BARRIER_OFFSET, 0);
        self.launch(c"symm_barrier", 1, 32, &mut a, on)
    }

    /// Signal `peer` (or ALL_PEERS) on the row at `offset`.
    pub fn put(&self, comm: &Comm, offset: usize, peer: u32, on: On) -> Result<()> {
        let mut a = comm.flag_args(OpId::Collective, offset, 0);
        a.peer = peer;
        self.launch(c"symm_fused_put", 1, 32, &mut a, on)
    }

    /// Wait for and consume `peer`'s (or every peer's) signal at `offset`.
    pub fn wait(&self, comm: &Comm, offset: usize, peer: u32, on: On) -> Result<()> {
        let mut a = comm.flag_args(OpId::Collective, offset, 0);
        a.peer = peer;
        self.launch(c"symm_fused_wait", 1, 32, &mut a, on)
    }

    /// The reduce-scatter's local reduction of landed partials, on `on`.
    pub fn reduce(&self, dtype: symmDataType_t, mut a: ReduceArgs, on: On) -> Result<()> {
        let kernel = match dtype {
            symmDataType_t::symmBfloat16 => c"symm_fused_reduce_bf16",
            symmDataType_t::symmFloat16 => c"symm_fused_reduce_f16",
            symmDataType_t::symmFloat32 => c"symm_fused_reduce_f32",
            t => bail!(symmInternalError, "no fused reduction for {t:?}"),
        };
        let vec = (16 / dtype.size()) as u64;
        let work = (a.rows * a.cols).div_ceil(vec);
        let grid = work.div_ceil(256).clamp(1, self.device.sm_count as u64) as u32;
        self.launch(kernel, grid, 256, &mut a, on)
    }
}

impl Drop for State {
    fn drop(&mut self) {
        let Ok(_cur) = self.device.make_current() else { return };
        // SAFETY: dropped once, here; never used after.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.blas) };
        // The communicator synchronised its device before dropping us.
        for &e in &self.events {
            let _ = cu!(cuEventDestroy_v2(e));
        }
        for s in [self.compute[0], self.compute[1], self.copy] {
            if !s.is_null() {
                let _ = cu!(cuStreamDestroy_v2(s));
            }
        }
    }
}

/// A host step of an enqueue that took this long waited for the device.
const SLOW_HOST_STEP: Duration = Duration::from_millis(500);

/// Run one host step of an enqueue and warn, naming it, when it held the
/// thread: an enqueue returns in microseconds unless the driver waited for
/// running kernels (see the module comment), and a thread that drives
/// several ranks then stalls until this rank's waits for its peers time out.
fn slow<T>(what: &str, step: impl FnOnce() -> Result<T>) -> Result<T> {
    let start = Instant::now();
    let out = step();
    let took = start.elapsed();
    if took > SLOW_HOST_STEP {
        log::warn!(
            target: "symmcomm::fused",
            "{what} held the host for {:.2} s while enqueueing a fused op: the driver waited for running kernels \
             (a kernel loaded at its first launch?); a thread driving several ranks stalls like this until the flag waits time out",
            took.as_secs_f64()
        );
    }
    out
}

/// The fused ops' symmetric workspace (collective, like symmMemAlloc).
fn alloc_workspace(comm: &Comm, bytes: usize) -> Result<u64> {
    symmetric::alloc(&comm.mem, &comm.link, bytes, true).map_err(|e| {
        e.context(format!(
            "allocating the fused ops' symmetric workspace of {bytes} bytes (SYMM_FUSED_WORKSPACE_BYTES and _MAX_BYTES bound it)"
        ))
    })
}

/// The state every fused call requires of the communicator: the
/// collectives' checks (cached driver queries).
pub fn check_comm(comm: &Comm, stream: CUstream) -> Result<()> {
    comm.check_usable()?;
    comm.check_stream(stream)
}

/// A device buffer of this communicator's GPU (symmetric, registered or
/// plain). Plain buffers are asked of the driver every call, not through
/// the collectives' cache: a fused call costs milliseconds of GEMM, and
/// the cache would let a smaller buffer allocated where a remembered one
/// was freed through (coll::CheckCache).
pub fn check_buffer(comm: &Comm, ptr: u64, bytes: usize, name: &str) -> Result<()> {
    comm.check_buffer_uncached(ptr as *const c_void, bytes, name).map(|_| ())
}

/// FNV-1a of some words folded to 32 bits, for the call descriptors.
pub fn hash32(words: &[u64]) -> u32 {
    let h = crate::fnv::fnv1a64_words(words.iter().copied());
    (h as u32) ^ (h >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::grown_within;

    #[test]
    fn the_workspace_grows_to_what_a_call_wants_within_the_bound() {
        let mib = 1usize << 20;
        // The first call: at least the first size, at most the bound.
        assert_eq!(grown_within(0, 0, 256 * mib, 2048 * mib), Some(256 * mib));
        assert_eq!(grown_within(0, 768 * mib, 256 * mib, 2048 * mib), Some(768 * mib));
        assert_eq!(grown_within(0, 4096 * mib, 256 * mib, 2048 * mib), Some(2048 * mib));
        // Later calls: only up, only when they want more.
        assert_eq!(grown_within(768 * mib, 512 * mib, 256 * mib, 2048 * mib), None);
        assert_eq!(grown_within(768 * mib, 1280 * mib, 256 * mib, 2048 * mib), Some(1280 * mib));
        assert_eq!(grown_within(2048 * mib, 4096 * mib, 256 * mib, 2048 * mib), None);
        // A pinned size (bound = first size) never grows.
        assert_eq!(grown_within(8 * mib, 768 * mib, 8 * mib, 8 * mib), None);
    }
}
