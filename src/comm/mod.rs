//! Communicator lifecycle: creation (one rank per process, or every local
//! GPU from one process), the checks that make a group usable, and teardown.

pub mod algo;
pub mod coll_state;
mod device_errors;
mod p2p_shape;
mod peers;
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
use crate::error::{bail, err, Error, Result};
use crate::memory::pad::{self, SignalPads};
use crate::memory::{symmetric, CommMemory, SymmSpace};
use coll_state::CollState;
use peers::{agree_on_status, check_group, check_my_pairs, decode_status, encode_status, exchange, open_same_process_peers, pair_error};
pub use peers::{host_hash, PeerInfo};

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
        Err(device_errors::status_error(&s, self.timeout_ns))
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
