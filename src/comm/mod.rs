//! Communicator lifecycle: creation (one rank per process, or every local
//! GPU from one process), the checks that make a group usable, and teardown.

pub mod algo;
pub mod coll_state;
pub mod red_ops;

use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::bootstrap::local::LocalGroup;
use crate::bootstrap::{Bootstrap, BootstrapConfig, Transport, UniqueId};
use crate::config;
use crate::cuda::abi::{
    self, CollArgs, FlagArgs, OpId, P2PArgs, P2POp, Status, WaitCtx, MAX_RANKS, P2P_MAX_OPS,
};
use crate::cuda::buffer::{DeviceBuffer, HostMapped};
use crate::cuda::cu;
use crate::cuda::device::{self, Device};
use crate::error::{bail, err, symmResult_t, Error, Result};
use crate::memory::pad::{self, SignalPads};
use crate::memory::{symmetric, CommMemory, SymmSpace};
use coll_state::CollState;

/// What every rank tells the others at init.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// Same value on every process of one host (hostname + boot id).
    pub host_hash: u64,
    pub pid: u32,
    /// CUDA ordinal in the rank's own process (-1 if its set-up failed).
    pub device: i32,
    /// PCI bus id of the rank's GPU ("" if its set-up failed).
    pub pci_bus_id: String,
    /// Multiprocessors of the rank's GPU (0 if its set-up failed).
    pub sm_count: u32,
    /// The rank's local set-up outcome: `symmSuccess` or its error.
    pub status: symmResult_t,
    pub status_msg: String,
}

/// Per-communicator settings: from the environment at init, from the
/// parent (or a `symmConfig_t`) for a split. Every rank of a communicator
/// must use the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommSettings {
    /// Staging scratch bytes (`SYMM_SCRATCH_BYTES`): four halves of a quarter each.
    pub scratch_bytes: usize,
    /// How long a kernel waits for a peer (`SYMM_TIMEOUT`), in nanoseconds.
    pub timeout_ns: u64,
    /// All-gather and reduce-scatter on the copy engines (`SYMM_COPY_ENGINE`).
    pub copy_engine: bool,
}

impl CommSettings {
    pub fn from_env() -> CommSettings {
        let cfg = config::get();
        CommSettings {
            scratch_bytes: cfg.scratch_bytes,
            timeout_ns: cfg.timeout.as_nanos().min(u64::MAX as u128) as u64,
            copy_engine: cfg.copy_engine,
        }
    }
}

/// A communicator: one rank's view of a group of GPUs on one node.
///
/// Field order is drop order: memory is unmapped (with the device idle, see
/// `Drop`) before the link to the peers and the device go.
pub struct Comm {
    pub mem: CommMemory,
    pub pads: SignalPads,
    pub coll: CollState,
    /// Device-visible status: abort flag in, first device error out.
    status: HostMapped,
    status_dev: u64,
    pub timeout_ns: u64,
    /// The fused matmul ops' resources (cuBLASLt handle, streams, events,
    /// workspace), made at their first use. Typed in src/fused, which sits
    /// above this module; dropped before the device.
    pub fused: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    pub link: Transport,
    pub rank: usize,
    pub nranks: usize,
    pub peers: Vec<PeerInfo>,
    /// What it was made with (a split without a config inherits them).
    pub settings: CommSettings,
    /// GPUs of ranks living in this process, kept open for peer access.
    _local_peers: Vec<Arc<Device>>,
    pub device: Arc<Device>,
    last_error: Mutex<CString>,
    aborted: AtomicBool,
    /// Live device communicators (symmDevCommCreate): handle -> the
    /// symmetric allocation holding their slots.
    pub dev_comms: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// Reduction ops created on it (symmRedOpCreatePreMulSum).
    pub red_ops: red_ops::RedOps,
}

/// The parts made before the collective set-up of device state.
pub(crate) struct Parts {
    pub rank: usize,
    pub peers: Vec<PeerInfo>,
    pub device: Arc<Device>,
    pub link: Transport,
    pub mem: CommMemory,
    pub local_peers: Vec<Arc<Device>>,
    pub settings: CommSettings,
}

impl Comm {
    /// `symmCommInitRank`: join the group named by `id` as `rank` of `nranks`,
    /// on the calling thread's current CUDA device.
    ///
    /// The rendezvous runs before CUDA is touched, so argument problems
    /// (duplicate rank, mismatched nranks, ...) reach every rank even where a
    /// rank has no GPU; each rank's CUDA outcome is then shared, so either
    /// every rank succeeds or every rank fails.
    pub fn init_rank(nranks: i32, id: &UniqueId, rank: i32) -> Result<Arc<Comm>> {
        let boot = Bootstrap::connect(id, nranks, rank, &BootstrapConfig::from_env())?;
        let local = Device::current_ordinal().and_then(Device::open);
        Comm::from_bootstrap(boot, local, CommSettings::from_env())
    }

    /// Everything after the rendezvous of a communicator whose ranks are
    /// processes (or threads with their own bootstrap): share each rank's
    /// GPU and set-up outcome, check the group, reserve the symmetric space
    /// and set up device state, failing on every rank together. `local` is
    /// this rank's GPU (or why it has none).
    pub(crate) fn from_bootstrap(boot: Bootstrap, local: Result<Arc<Device>>, settings: CommSettings) -> Result<Arc<Comm>> {
        let rank = boot.rank();
        if boot.nranks() > MAX_RANKS {
            // Everyone computes the same verdict from the same nranks.
            bail!(symmNotSupported, "nranks {} exceeds the {MAX_RANKS} GPUs symmcomm supports in one group", boot.nranks());
        }
        let me = PeerInfo::local(local.as_ref());
        let peers = exchange(&boot, &me)?;
        let device = agree_on_status(&peers, rank, local)?;
        check_group(&peers)?;
        // Local steps that can fail on one rank alone; share the verdicts so
        // that all ranks fail together.
        let local_setup = check_my_pairs(&peers, rank, &device).and_then(|_| {
            let local_peers = open_same_process_peers(&peers, rank, &device)?;
            let space = SymmSpace::reserve(peers.len(), std::slice::from_ref(&device))?;
            Ok((local_peers, space))
        });
        let verdicts = boot.allgather(&encode_status(local_setup.as_ref().err().cloned()))?;
        for (r, v) in verdicts.iter().enumerate() {
            if let Some(e) = decode_status(v)? {
                return Err(if r == rank { e } else { e.context(format!("rank {r} reported")) });
            }
        }
        let (local_peers, space) = local_setup?;
        let mem = CommMemory::new(space, rank, device.clone(), vec![device.handle]);
        let link = Transport::Sockets(Box::new(boot));
        let comm = Comm::finish(Parts { rank, peers, device, link, mem, local_peers, settings })?;
        log::info!(
            target: "symmcomm::init",
            "rank {rank}/{} ready on device {} ({}), bus {}",
            comm.nranks, comm.device.ordinal, comm.device.name, comm.device.pci_bus_id
        );
        Ok(Arc::new(comm))
    }

    /// `symmCommInitAll`: one communicator per listed device, all in this
    /// process; rank i uses `devices[i]`.
    pub fn init_all(devices: &[i32]) -> Result<Vec<Arc<Comm>>> {
        if devices.is_empty() {
            bail!(symmInvalidArgument, "ndev must be at least 1");
        }
        if devices.len() > MAX_RANKS {
            bail!(symmNotSupported, "ndev {} exceeds the {MAX_RANKS} GPUs symmcomm supports in one group", devices.len());
        }
        if !config::get().test_shared_devices {
            for (i, d) in devices.iter().enumerate() {
                if let Some(j) = devices[..i].iter().position(|x| x == d) {
                    bail!(symmInvalidArgument, "devlist[{j}] and devlist[{i}] are both device {d}; each rank needs its own GPU");
                }
            }
        }
        let opened: Vec<Arc<Device>> = devices.iter().map(|&d| Device::open(d)).collect::<Result<_>>()?;
        for (i, a) in opened.iter().enumerate() {
            for b in &opened[i + 1..] {
                device::check_peer_pair(a.handle, b.handle).map_err(|e| pair_error(e, a, b))?;
                device::enable_peer_access(a, b)?;
                device::enable_peer_access(b, a)?;
            }
        }
        let host_hash = host_hash();
        let peers: Vec<PeerInfo> = opened.iter().map(|d| PeerInfo { host_hash, ..PeerInfo::local(Ok(d)) }).collect();
        let space = SymmSpace::reserve(opened.len(), &opened)?;
        let group = LocalGroup::new(opened.len(), config::get().bootstrap_timeout);
        let access: Vec<_> = opened.iter().map(|d| d.handle).collect();
        let settings = CommSettings::from_env();
        let parts: Vec<Parts> = opened
            .iter()
            .enumerate()
            .map(|(rank, dev)| Parts {
                rank,
                peers: peers.clone(),
                device: dev.clone(),
                link: Transport::InProcess(group.member(rank)),
                mem: CommMemory::new(space.clone(), rank, dev.clone(), access.clone()),
                local_peers: opened.clone(),
                settings,
            })
            .collect();
        // The device-state set-up is collective: one thread per rank.
        let results: Vec<Result<Comm>> = std::thread::scope(|s| {
            let handles: Vec<_> = parts.into_iter().map(|p| s.spawn(move || Comm::finish(p))).collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(err!(symmInternalError, "init thread panicked")))).collect()
        });
        let comms = results.into_iter().map(|r| r.map(Arc::new)).collect::<Result<Vec<_>>>()?;
        log::info!(target: "symmcomm::init", "InitAll: {} ranks on devices {devices:?}", devices.len());
        Ok(comms)
    }

    /// Collective: allocate the signal pad and the status word, then
    /// assemble the communicator.
    pub(crate) fn finish(p: Parts) -> Result<Comm> {
        let nranks = p.peers.len();
        let pad_addr = symmetric::alloc(&p.mem, &p.link, pad::PAD_BYTES, true)?;
        let offset = pad_addr - p.mem.space.slot(p.rank);
        let mut pads = [0u64; MAX_RANKS];
        for (r, slot) in pads.iter_mut().enumerate().take(nranks) {
            *slot = p.mem.space.slot(r) + offset;
        }
        let user: Vec<u64> = pads[..nranks].iter().map(|a| a + pad::USER_OFFSET as u64).collect();
        let user_table = DeviceBuffer::zeroed(&p.device, 8 * nranks)?;
        user_table.write(&user)?;
        let coll = coll_state::coll_state(&p)?;
        let status = HostMapped::zeroed(&p.device, std::mem::size_of::<Status>())?;
        let status_dev = status.device_ptr()?;
        Ok(Comm {
            mem: p.mem,
            pads: SignalPads { pads, user_table },
            coll,
            status,
            status_dev,
            timeout_ns: p.settings.timeout_ns,
            fused: Mutex::new(None),
            link: p.link,
            rank: p.rank,
            nranks,
            peers: p.peers,
            settings: p.settings,
            _local_peers: p.local_peers,
            device: p.device,
            last_error: Mutex::new(CString::default()),
            aborted: AtomicBool::new(false),
            dev_comms: Mutex::new(Default::default()),
            red_ops: Default::default(),
        })
    }

    pub fn set_last_error(&self, msg: CString) {
        *self.last_error.lock() = msg;
    }

    /// Valid until the next error is recorded on this communicator.
    pub fn last_error_ptr(&self) -> *const c_char {
        self.last_error.lock().as_ptr()
    }

    fn status(&self) -> Status {
        // SAFETY: the status block is live pinned memory that kernels write;
        // volatile reads see their stores.
        unsafe { std::ptr::read_volatile(self.status.host_ptr().cast::<Status>()) }
    }

    /// `symmCommGetAsyncError`: an error a kernel recorded (timeout, abort),
    /// as a code plus a message; success when there is none.
    pub fn async_error(&self) -> std::result::Result<(), Error> {
        let s = self.status();
        if s.error == abi::DEV_OK {
            return Ok(());
        }
        if s.op == OpId::Device as u32 {
            return Err(abi::device_status_error(&s, self.timeout_ns));
        }
        let op = OpId::from_raw(s.op).unwrap_or(OpId::None).name();
        let waited = s.waited_ns as f64 / 1e9;
        Err(match s.error {
            abi::DEV_TIMEOUT => err!(
                symmTimeout,
                "rank {}: {op} timed out after {waited:.1} s waiting for rank {} (SYMM_TIMEOUT={:.1} s; wait detail {:#x}, \
                 the kernel's code for which wait){}; the communicator is unusable, abort it",
                s.rank, s.peer, self.timeout_ns as f64 / 1e9, s.detail, mismatch_hint(s.op)
            ),
            abi::DEV_ABORTED => err!(symmRemoteError, "rank {}: {op} stopped because the communicator was aborted", s.rank),
            abi::DEV_MISMATCH => mismatch_error(&s),
            k => err!(symmInternalError, "unknown device error kind {k}"),
        })
    }

    /// The status block as kernels address it (device API: symmDevComm::status).
    pub fn status_device_ptr(&self) -> u64 {
        self.status_dev
    }

    /// How kernels of operation `op` bound their waits.
    pub fn wait_ctx(&self, op: OpId) -> WaitCtx {
        WaitCtx {
            status: self.status_dev,
            error_guard: self.pads.local(self.rank, pad::ERROR_GUARD_OFFSET),
            timeout_ns: self.timeout_ns,
            rank: self.rank as u32,
            op: op as u32,
        }
    }

    /// Collective kernel arguments that are the same for every call.
    pub fn coll_template(&self, op: OpId) -> CollArgs {
        let mut peer_flags = [0u64; MAX_RANKS];
        let mut peer_check = [0u64; MAX_RANKS];
        for r in 0..self.nranks {
            peer_flags[r] = self.pads.local(r, pad::COLL_FLAGS_OFFSET);
            peer_check[r] = self.pads.local(r, pad::COLL_CHECK_OFFSET);
        }
        CollArgs {
            wait: self.wait_ctx(op),
            flags: self.pads.local(self.rank, pad::COLL_FLAGS_OFFSET),
            peer_flags,
            epochs: self.pads.local(self.rank, pad::COLL_EPOCHS_OFFSET),
            check: self.pads.local(self.rank, pad::COLL_CHECK_OFFSET),
            peer_check,
            src: [0; MAX_RANKS],
            scratch: self.coll.scratch,
            ll: self.coll.ll,
            send: 0,
            recv: 0,
            progress: 0,
            timeline: self.coll.timeline.as_ref().map_or(0, |t| t.ptr),
            count: 0,
            chunk: 0,
            unit: 0,
            half: self.coll.half,
            ll_slot: self.coll.ll_slot,
            rank: self.rank as u32,
            nranks: self.nranks as u32,
            op: 0,
            root: 0,
            mode: 0,
            coll: 0,
            dtype: 0,
            elem_size: 1,
            token: 0,
            pad: 0,
        }
    }

    /// Point-to-point kernel arguments without operations.
    pub fn p2p_template(&self, op: OpId) -> P2PArgs {
        let mut peer_flags = [0u64; MAX_RANKS];
        for (r, f) in peer_flags.iter_mut().enumerate().take(self.nranks) {
            *f = self.pads.local(r, pad::P2P_OFFSET);
        }
        P2PArgs {
            wait: self.wait_ctx(op),
            flags: self.pads.local(self.rank, pad::P2P_OFFSET),
            peer_flags,
            slots: self.coll.p2p_slots[self.rank],
            peer_slots: self.coll.p2p_slots,
            slot_bytes: self.coll.p2p_slot_bytes,
            heap: std::array::from_fn(|r| if r < self.nranks { self.mem.space.slot(r) } else { 0 }),
            ops: [P2POp::default(); P2P_MAX_OPS],
            nops: 0,
            rank: self.rank as u32,
            nranks: self.nranks as u32,
            mode: 0,
            ll_offset: self.coll.p2p_ll_offset,
            ll_slot: self.coll.p2p_ll_slot,
        }
    }

    /// Flag-exchange arguments over the pad row at `offset` of every rank.
    pub fn flag_args(&self, op: OpId, offset: usize, peer: usize) -> FlagArgs {
        let mut remote = [0u64; MAX_RANKS];
        for (r, slot) in remote.iter_mut().enumerate().take(self.nranks) {
            *slot = self.pads.local(r, offset);
        }
        FlagArgs {
            wait: self.wait_ctx(op),
            local: self.pads.local(self.rank, offset),
            remote,
            nranks: self.nranks as u32,
            peer: peer as u32,
        }
    }

    /// `symmCommAbort`: make waiting kernels and host calls give up; the
    /// caller then drops the communicator.
    pub fn abort(&self) {
        self.abort_device();
        self.link.abort();
        log::info!(target: "symmcomm::init", "rank {} aborted", self.rank);
    }

    /// The device half of an abort: waiting kernels exit and later calls
    /// fail, but the host link to the peers stays up (a shrink with
    /// `SYMM_SHRINK_ABORT` still talks to them through it).
    pub fn abort_device(&self) {
        self.aborted.store(true, Ordering::Release);
        // SAFETY: live pinned memory; kernels poll this word.
        unsafe { std::ptr::write_volatile(self.status.host_ptr().cast::<u32>(), 1) };
    }

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // Nothing may still run on memory about to be unmapped. Waiting
        // kernels are bounded (SYMM_TIMEOUT) and leave at once after abort.
        if let Ok(_cur) = self.device.make_current() {
            if let Err(e) = cu!(cuCtxSynchronize()) {
                log::warn!(target: "symmcomm::init", "synchronising device {} before teardown: {e}", self.device.ordinal);
            }
            self.mem.release_all();
        }
        log::info!(target: "symmcomm::init", "rank {}/{} destroyed", self.rank, self.nranks);
    }
}

/// The most ranks any one GPU holds (more than 1 only in the test-only
/// shared-device mode). The grid is divided by it on every rank: blocks
/// pair up across ranks by index and split ranges by the grid size, so a
/// grid must not depend on which GPU a rank shares (a rank alone on its GPU
/// launching more blocks than its peers made them read unwritten ranges).
fn busiest_gpu_ranks<T: PartialEq>(gpu_of_rank: impl Iterator<Item = T> + Clone) -> usize {
    gpu_of_rank.clone().map(|g| gpu_of_rank.clone().filter(|o| *o == g).count()).max().unwrap_or(1)
}

/// Describe a call descriptor recorded by a kernel (kernels/coll.cuh).
fn describe_call(d: &[u32; abi::DESC_WORDS]) -> String {
    use crate::cuda::abi::CollId;
    if let Some(name) = fused_op_name(d[0] >> 24) {
        // src/fused: op << 24 | aType << 16 | cType << 8 | bType << 2 | transB;
        // mShard; a hash of the other shapes, layouts and chunks.
        let t = |v: u32| crate::types::symmDataType_t::from_raw(v as i32).map_or_else(|| format!("type {v}"), |t| format!("{t:?}"));
        return format!(
            "{name}(mShard={}, aType {}, bType {}, cType {}, transB={}, n/k/ld/chunks hash {:#010x})",
            d[1], t((d[0] >> 16) & 0xff), t((d[0] >> 2) & 0x3f), t((d[0] >> 8) & 0xff), d[0] & 1, d[2]
        );
    }
    let coll = CollId::from_raw(d[0] >> 24);
    let count = (d[1] as u64) | ((d[2] >> 16) as u64) << 32;
    let dtype = crate::types::symmDataType_t::from_raw(((d[2] >> 8) & 0xff) as i32)
        .map_or_else(|| format!("datatype {}", (d[2] >> 8) & 0xff), |t| format!("{t:?}"));
    let mut s = format!("{}(count={count}, {dtype}", coll.map_or("?", |c| c.name()));
    if matches!(coll, Some(CollId::AllReduce | CollId::ReduceScatter | CollId::Reduce)) {
        let op = crate::types::symmRedOp_t::from_raw((d[2] & 0xff) as i32);
        s += &op.map_or_else(|| format!(", op {}", d[2] & 0xff), |o| format!(", {o:?}"));
    }
    if matches!(coll, Some(CollId::Broadcast | CollId::Reduce)) {
        s += &format!(", root={}", d[0] & 0xffff);
    }
    s + ")"
}

/// The fused matmul ops' descriptor ids (src/fused writes them; this
/// module only names them, to stay below it).
fn fused_op_name(id: u32) -> Option<&'static str> {
    match id {
        abi::DESC_ALLGATHER_MATMUL => Some("symmAllGatherMatmul"),
        abi::DESC_MATMUL_REDUCE_SCATTER => Some("symmMatmulReduceScatter"),
        _ => None,
    }
}

/// The kernel protocol in a descriptor (bits 16-23 of word 0, abi::desc_protocol).
fn protocol_name(d: &[u32; abi::DESC_WORDS]) -> &'static str {
    use abi::{desc_protocol, MODE_PIPE, MODE_PUSH, MODE_TWO_SHOT, MODE_WRITE};
    const ONE_SHOT: u32 = desc_protocol(0);
    const TWO_SHOT: u32 = desc_protocol(MODE_TWO_SHOT);
    const PUSH: u32 = desc_protocol(MODE_TWO_SHOT | MODE_PUSH);
    const PIPE_TWO_SHOT: u32 = desc_protocol(MODE_TWO_SHOT | MODE_PIPE);
    const PIPE: u32 = desc_protocol(MODE_PIPE);
    const WRITE: u32 = desc_protocol(MODE_WRITE);
    match (d[0] >> 16) & 0xff {
        ONE_SHOT => "the one-shot kernel",
        TWO_SHOT => "the two-shot kernel",
        PUSH => "the two-shot push kernel",
        PIPE_TWO_SHOT => "the pipelined two-shot kernel",
        PIPE => "the pipelined kernel",
        WRITE => "the write-only two-shot kernel",
        _ => "an unknown kernel",
    }
}

/// What a collective's timeout may mean besides a dead or stalled peer.
/// The LL packets and the point-to-point engine do not compare the ranks'
/// calls (only SYMM_CHECK's synced kernels do), so ranks that disagree on
/// a count, a peer or a buffer class (symmetric on one rank, plain on
/// another: a different algorithm) wait for data that never comes.
fn mismatch_hint(op: u32) -> &'static str {
    if op == OpId::Collective as u32 {
        "; if that rank is alive and calling, the ranks' calls may differ (count, datatype, a send without its \
         receive, a buffer symmetric on one rank and plain on another): SYMM_CHECK=1 compares collectives' calls"
    } else if op == OpId::SendRecv as u32 {
        "; if that rank is alive, its matching symmRecv or symmSend may be missing, name another peer, or come \
         after a call that waits for this one"
    } else {
        ""
    }
}

fn mismatch_error(s: &Status) -> Error {
    let wide = |w: &[u32; 4]| w[1] as u64 | (w[2] as u64) << 32;
    if s.mine[0] == abi::A2AV_TAG {
        let (api, counts) = match s.mine[3] >> abi::A2AV_FORM_SHIFT {
            abi::A2AV_FORM_2D => ("symmAllToAllvDevice2d", "send counts are negative or run past the end of its sendbuff"),
            abi::A2AV_FORM_2D_OFFSET => (
                "symmAllToAllvDevice2dOffset",
                "inSplitsOffsets hold a negative count or offset, or a block past the end of its sendbuff",
            ),
            _ => ("symmAllToAllvDevice", "send counts are negative or run past the end of its sendbuff"),
        };
        let padding = if s.mine[3] >> abi::A2AV_FORM_SHIFT == abi::A2AV_FORM_2D { " (with the majorAlign padding)" } else { "" };
        return if s.mine[3] & 0xff == 2 {
            err!(
                symmInvalidUsage,
                "rank {}: {api} would receive {} rows{padding}, but recvCapacity is {} (rows of rowElems elements); nothing was moved",
                s.rank,
                wide(&s.mine),
                wide(&s.theirs)
            )
        } else {
            err!(symmInvalidUsage, "rank {}: {api}: rank {}'s {counts}; nothing was moved", s.rank, wide(&s.mine))
        };
    }
    if s.mine[0] == abi::P2P_SIZE_TAG {
        // mine[3]: 0 recorded by the sender, 1 by the receiver (told by
        // its sender: kernels/sendrecv.cu, NACK).
        let (does, to, other_does, moved, other_side) = if s.mine[3] == 0 {
            ("sends", "to", "receives", "sent", "receive")
        } else {
            ("receives", "from", "sends", "received", "send")
        };
        return err!(
            symmInvalidUsage,
            "rank {} {does} {} bytes {to} rank {}, which {other_does} {} bytes: a send and its receive must have the \
             same size (nothing was {moved}; the {other_side} fails too)",
            s.rank,
            wide(&s.mine),
            s.peer,
            wide(&s.theirs),
        );
    }
    // Blame the kernel only when the calls are otherwise the same: ranks that
    // called different collectives (or counts, types) often pick different
    // kernels too, and then the call is what the user must fix.
    let same_call = (s.mine[0] ^ s.theirs[0]) & !0x00ff_0000 == 0 && s.mine[1..3] == s.theirs[1..3];
    if same_call && fused_op_name(s.mine[0] >> 24).is_none() && (s.mine[0] ^ s.theirs[0]) & 0x00ff_0000 != 0 {
        return err!(
            symmInvalidUsage,
            "rank {} and rank {} disagree on the kernel of {}: this rank ran {}, rank {} ran {}; set SYMM_ALGO (or \
             symmCommSetAlgorithm) the same on every rank, and pass buffers of the same classes (symmetric/registered \
             or plain) for sendbuff and for recvbuff on every rank",
            s.rank,
            s.peer,
            abi::CollId::from_raw(s.mine[0] >> 24).map_or("the collective", |c| c.name()),
            protocol_name(&s.mine),
            s.peer,
            protocol_name(&s.theirs),
        );
    }
    if s.mine[..3] == s.theirs[..3] {
        let input = |token: u32| if token == 0 { "an ordinary buffer" } else { "a symmetric/registered buffer" };
        let theirs = if s.mine[3] != 0 && s.theirs[3] != 0 {
            "a different symmetric/registered buffer or offset"
        } else {
            input(s.theirs[3])
        };
        let coll = abi::CollId::from_raw(s.mine[0] >> 24);
        let rows = if coll == Some(abi::CollId::AllToAll) {
            " (the device-count all-to-alls also need the same rowElems on every rank)"
        } else {
            ""
        };
        return err!(
            symmInvalidUsage,
            "rank {} and rank {} disagree on where {} reads its input: this rank passed {}, rank {} passed {}; \
             pass symmetric or registered buffers at the same offset on every rank, or ordinary buffers on every \
             rank{rows}",
            s.rank,
            s.peer,
            coll.map(|c| c.name()).or(fused_op_name(s.mine[0] >> 24)).unwrap_or("the collective"),
            input(s.mine[3]),
            s.peer,
            theirs,
        );
    }
    err!(
        symmInvalidUsage,
        "collective mismatch (SYMM_CHECK): rank {} called {} but rank {} called {}",
        s.rank,
        describe_call(&s.mine),
        s.peer,
        describe_call(&s.theirs)
    )
}


/// Open the GPUs of other ranks that live in this process (threads calling
/// symmCommInitRank) and enable peer access to them, so their cudaMalloc
/// buffers can be registered without IPC (which refuses same-process use).
fn open_same_process_peers(peers: &[PeerInfo], rank: usize, dev: &Arc<Device>) -> Result<Vec<Arc<Device>>> {
    let mut out = Vec::new();
    for (r, p) in peers.iter().enumerate() {
        if r == rank || p.pid != peers[rank].pid || p.pci_bus_id == dev.pci_bus_id {
            continue;
        }
        if let Some(ord) = device::ordinal_by_pci_bus_id(&p.pci_bus_id)? {
            let other = Device::open(ord)?;
            device::enable_peer_access(dev, &other)?;
            out.push(other);
        }
    }
    Ok(out)
}

impl PeerInfo {
    fn local(device: std::result::Result<&Arc<Device>, &Error>) -> PeerInfo {
        let (dev, bus, sms, status, msg) = match device {
            Ok(d) => (d.ordinal, d.pci_bus_id.clone(), d.sm_count as u32, symmResult_t::symmSuccess, String::new()),
            Err(e) => (-1, String::new(), 0, e.code, e.msg.clone()),
        };
        PeerInfo {
            host_hash: host_hash(),
            pid: std::process::id(),
            device: dev,
            pci_bus_id: bus,
            sm_count: sms,
            status,
            status_msg: msg,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.host_hash.to_le_bytes());
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&self.device.to_le_bytes());
        b.extend_from_slice(&self.sm_count.to_le_bytes());
        b.extend_from_slice(&(self.status as i32).to_le_bytes());
        put_str(&mut b, &self.pci_bus_id);
        put_str(&mut b, &self.status_msg);
        b
    }

    fn decode(b: &[u8]) -> Result<PeerInfo> {
        let mut r = Reader(b);
        let host_hash = u64::from_le_bytes(r.take()?);
        let pid = u32::from_le_bytes(r.take()?);
        let device = i32::from_le_bytes(r.take()?);
        let sm_count = u32::from_le_bytes(r.take()?);
        let status = symmResult_t::from_raw(i32::from_le_bytes(r.take()?))
            .ok_or_else(|| err!(symmInternalError, "bad status in peer info"))?;
        let pci_bus_id = r.string()?;
        let status_msg = r.string()?;
        Ok(PeerInfo { host_hash, pid, device, pci_bus_id, sm_count, status, status_msg })
    }
}

/// All-gather every rank's `PeerInfo`.
fn exchange(boot: &Bootstrap, me: &PeerInfo) -> Result<Vec<PeerInfo>> {
    boot.allgather(&me.encode())?.iter().map(|b| PeerInfo::decode(b)).collect()
}

/// Fail on every rank if any rank's local set-up failed: this rank's own
/// error first, else a remote error naming the first rank that failed.
fn agree_on_status(peers: &[PeerInfo], rank: usize, local: Result<Arc<Device>>) -> Result<Arc<Device>> {
    let device = local?;
    if let Some((r, p)) = peers.iter().enumerate().find(|(_, p)| p.status != symmResult_t::symmSuccess) {
        bail!(symmRemoteError, "rank {r} (pid {}) failed to set up its GPU ({:?}): {}", p.pid, p.status, p.status_msg);
    }
    debug_assert_eq!(peers[rank].device, device.ordinal);
    Ok(device)
}

/// Group-wide rules every rank evaluates identically from the same table.
fn check_group(peers: &[PeerInfo]) -> Result<()> {
    for (r, p) in peers.iter().enumerate() {
        if p.host_hash != peers[0].host_hash {
            bail!(symmNotSupported, "rank {r} is on another host than rank 0; symmcomm only connects GPUs of one node");
        }
        if config::get().test_shared_devices {
            continue;
        }
        if let Some(q) = peers[..r].iter().position(|q| q.pci_bus_id == p.pci_bus_id) {
            bail!(
                symmInvalidUsage,
                "ranks {q} and {r} both use the GPU at PCI {} (device {} in pid {}); each rank needs its own GPU",
                p.pci_bus_id, p.device, p.pid
            );
        }
    }
    Ok(())
}

/// Peer access and native atomics between this rank's GPU and every other.
fn check_my_pairs(peers: &[PeerInfo], rank: usize, dev: &Device) -> Result<()> {
    for (r, p) in peers.iter().enumerate() {
        if r == rank || p.pci_bus_id == dev.pci_bus_id {
            continue;
        }
        match device::ordinal_by_pci_bus_id(&p.pci_bus_id)? {
            Some(theirs) => device::check_peer_pair(dev.handle, theirs).map_err(|e| {
                e.context(format!(
                    "rank {rank} (device {}, PCI {}) and rank {r} (PCI {})",
                    dev.ordinal, dev.pci_bus_id, p.pci_bus_id
                ))
            })?,
            None => log::warn!(
                target: "symmcomm::init",
                "rank {r}'s GPU (PCI {}) is not visible to rank {rank}'s process (CUDA_VISIBLE_DEVICES?); \
                 peer access to it cannot be verified in advance",
                p.pci_bus_id
            ),
        }
    }
    Ok(())
}

fn pair_error(e: Error, a: &Device, b: &Device) -> Error {
    e.context(format!("devices {} (PCI {}) and {} (PCI {})", a.ordinal, a.pci_bus_id, b.ordinal, b.pci_bus_id))
}

fn encode_status(e: Option<Error>) -> Vec<u8> {
    match e {
        None => vec![],
        Some(e) => {
            let mut b = (e.code as i32).to_le_bytes().to_vec();
            put_str(&mut b, &e.msg);
            b
        }
    }
}

fn decode_status(b: &[u8]) -> Result<Option<Error>> {
    if b.is_empty() {
        return Ok(None);
    }
    let mut r = Reader(b);
    let code = symmResult_t::from_raw(i32::from_le_bytes(r.take()?)).unwrap_or(symmResult_t::symmInternalError);
    Ok(Some(Error::new(code, r.string()?)))
}

/// Same on every process of one host: hostname plus the kernel's boot id.
pub fn host_hash() -> u64 {
    let mut name = [0u8; 256];
    // SAFETY: the buffer is valid for its length.
    unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
    let boot_id = std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    crate::fnv::fnv1a64(name.iter().copied().take_while(|&c| c != 0).chain(boot_id))
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// Minimal reader for the little-endian records above.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        if self.0.len() < N {
            bail!(symmInternalError, "truncated peer record");
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("split_at gave N bytes"))
    }

    fn string(&mut self) -> Result<String> {
        let n = u32::from_le_bytes(self.take()?) as usize;
        if self.0.len() < n {
            bail!(symmInternalError, "truncated peer record");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(String::from_utf8_lossy(head).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_divisor_is_the_same_on_every_rank() {
        // 3 ranks on 2 GPUs: GPU "a" holds two, so every rank divides by 2,
        // including rank 1, alone on "b".
        assert_eq!(busiest_gpu_ranks(["a", "b", "a"].iter()), 2);
        assert_eq!(busiest_gpu_ranks(["a", "b", "c", "d"].iter()), 1);
        assert_eq!(busiest_gpu_ranks(["a", "b", "a", "b", "a", "b", "a", "b"].iter()), 4);
        assert_eq!(busiest_gpu_ranks(std::iter::empty::<&str>()), 1);
    }

    #[test]
    fn peer_info_round_trip() {
        let p = PeerInfo {
            host_hash: 42,
            pid: 7,
            device: 1,
            pci_bus_id: "0000:18:00.0".into(),
            sm_count: 132,
            status: symmResult_t::symmUnhandledCudaError,
            status_msg: "no driver".into(),
        };
        assert_eq!(PeerInfo::decode(&p.encode()).unwrap(), p);
        assert!(PeerInfo::decode(&p.encode()[..10]).is_err());
    }

    #[test]
    fn status_round_trip() {
        assert_eq!(decode_status(&encode_status(None)).unwrap(), None);
        let e = Error::new(symmResult_t::symmNotSupported, "no atomics");
        assert_eq!(decode_status(&encode_status(Some(e.clone()))).unwrap(), Some(e));
    }

    #[test]
    fn group_rules() {
        let p = |bus: &str, host| PeerInfo {
            host_hash: host,
            pid: 1,
            device: 0,
            pci_bus_id: bus.into(),
            sm_count: 132,
            status: symmResult_t::symmSuccess,
            status_msg: String::new(),
        };
        assert!(check_group(&[p("a", 1), p("b", 1)]).is_ok());
        let e = check_group(&[p("a", 1), p("b", 2)]).unwrap_err();
        assert_eq!(e.code, symmResult_t::symmNotSupported);
        if !config::get().test_shared_devices {
            let e = check_group(&[p("a", 1), p("a", 1)]).unwrap_err();
            assert_eq!(e.code, symmResult_t::symmInvalidUsage);
            assert!(e.msg.contains("ranks 0 and 1"), "{}", e.msg);
        }
    }

    #[test]
    fn protocol_names_follow_the_kernels_encoding() {
        // kernels/coll.cuh: desc[0] bits 16-23 = (mode & SYMM_COLL_PROTO_BITS) >> 2.
        let name = |proto: u32| protocol_name(&[proto << 16, 0, 0, 0]);
        assert_eq!(name(1), "the two-shot kernel");
        assert_eq!(name(17), "the two-shot push kernel");
        assert_eq!(name(33), "the pipelined two-shot kernel");
        assert_eq!(name(32), "the pipelined kernel");
        assert_eq!(name(49), "the write-only two-shot kernel");
        assert_eq!(name(0), "the one-shot kernel");
    }

    #[test]
    fn mismatch_blames_the_kernel_only_for_the_same_call() {
        let status = |mine: [u32; 4], theirs: [u32; 4]| Status { rank: 1, peer: 0, mine, theirs, ..Default::default() };
        // All-reduce (id 1) of 1024 int32, sum: two-shot (1) against pipelined two-shot (33).
        let call = |proto: u32, dtype: u32| [1 << 24 | proto << 16, 1024, dtype << 8, 0];
        let e = mismatch_error(&status(call(1, 2), call(33, 2)));
        assert!(e.msg.contains("disagree on the kernel"), "{}", e.msg);
        // Different datatypes that also picked different kernels: the call is named.
        let e = mismatch_error(&status(call(1, 2), call(33, 7)));
        assert!(e.msg.contains("collective mismatch"), "{}", e.msg);
        // The same call with different input tokens: an all-to-all (id 6)
        // names rowElems too (the device-count forms fold it into the token).
        let a2a = |token: u32| [6 << 24, 0, 2 << 8, token];
        let e = mismatch_error(&status(a2a(0x11), a2a(0x23)));
        assert!(e.msg.contains("disagree on where") && e.msg.contains("same rowElems"), "{}", e.msg);
        let e = mismatch_error(&status([1 << 24, 1024, 2 << 8, 0x11], [1 << 24, 1024, 2 << 8, 0x23]));
        assert!(e.msg.contains("disagree on where") && !e.msg.contains("rowElems"), "{}", e.msg);
    }

    #[test]
    fn size_mismatch_names_both_sides_from_either_end() {
        let bytes = |b: u64, role: u32| [abi::P2P_SIZE_TAG, b as u32, (b >> 32) as u32, role];
        let sender = Status { rank: 0, peer: 1, mine: bytes(2 << 20, 0), theirs: bytes(1 << 20, 1), ..Default::default() };
        let e = mismatch_error(&sender);
        assert!(e.msg.contains("rank 0 sends 2097152 bytes to rank 1, which receives 1048576 bytes"), "{}", e.msg);
        assert!(e.msg.contains("same size") && e.msg.contains("nothing was sent"), "{}", e.msg);
        let receiver = Status { rank: 1, peer: 0, mine: bytes(1 << 20, 1), theirs: bytes(5 << 32, 0), ..Default::default() };
        let e = mismatch_error(&receiver);
        assert!(e.msg.contains("rank 1 receives 1048576 bytes from rank 0, which sends 21474836480 bytes"), "{}", e.msg);
        assert!(e.msg.contains("nothing was received; the send fails too"), "{}", e.msg);
    }

    #[test]
    fn host_hash_is_stable() {
        assert_eq!(host_hash(), host_hash());
    }

    #[test]
    fn timeouts_name_send_recv_and_hint_at_its_pairing() {
        assert_eq!(OpId::from_raw(OpId::SendRecv as u32), Some(OpId::SendRecv));
        assert_eq!(OpId::from_raw(OpId::Device as u32), Some(OpId::Device));
        assert_eq!(OpId::SendRecv.name(), "symmSend/symmRecv");
        assert!(mismatch_hint(OpId::SendRecv as u32).contains("matching symmRecv or symmSend"));
        assert!(mismatch_hint(OpId::Collective as u32).contains("SYMM_CHECK=1"));
        assert_eq!(mismatch_hint(OpId::Barrier as u32), "");
    }

    #[test]
    fn all_to_all_v_errors_name_their_form() {
        let a2av = |how: u32, mine: u64, cap: u64| Status {
            rank: 3,
            mine: [abi::A2AV_TAG, mine as u32, (mine >> 32) as u32, how],
            theirs: [abi::A2AV_TAG, cap as u32, (cap >> 32) as u32, how],
            ..Status::default()
        };
        let shift = abi::A2AV_FORM_SHIFT;
        let e = mismatch_error(&a2av(2, 5 << 32, 7));
        assert_eq!(e.code, symmResult_t::symmInvalidUsage);
        assert!(e.msg.contains("rank 3: symmAllToAllvDevice would receive 21474836480 rows, but recvCapacity is 7 (rows of rowElems elements)"), "{}", e.msg);
        let e = mismatch_error(&a2av(2 | abi::A2AV_FORM_2D << shift, 40, 39));
        assert!(e.msg.contains("symmAllToAllvDevice2d would receive 40 rows (with the majorAlign padding)"), "{}", e.msg);
        let e = mismatch_error(&a2av(1 | abi::A2AV_FORM_2D << shift, 1, 0));
        assert!(e.msg.contains("symmAllToAllvDevice2d: rank 1's send counts are negative"), "{}", e.msg);
        let e = mismatch_error(&a2av(1 | abi::A2AV_FORM_2D_OFFSET << shift, 0, 0));
        assert!(e.msg.contains("symmAllToAllvDevice2dOffset: rank 0's inSplitsOffsets hold a negative"), "{}", e.msg);
        let e = mismatch_error(&a2av(2 | abi::A2AV_FORM_2D_OFFSET << shift, 9, 8));
        assert!(e.msg.contains("symmAllToAllvDevice2dOffset would receive 9 rows, but"), "{}", e.msg);
    }
}
