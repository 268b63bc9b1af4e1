//! Symmetric memory: buffers that exist on every rank at the same offset of
//! a per-group address layout, so a peer's copy is found by arithmetic.
//!
//! Layout: one virtual-address reservation per group in this process, made
//! of `nranks` slots of `stride` bytes. Rank r's copy of every symmetric
//! allocation lives at `base + r * stride + offset`, with the same `offset`
//! on every rank. For communicators of one process (`symmCommInitAll`) the
//! ranks share that reservation and each maps its own slot for every GPU of
//! the group; across processes each rank maps its own memory and imports the
//! peers' (file descriptors over the bootstrap's Unix channel).
//!
//! - [`vmm`]: RAII over the CUDA virtual-memory calls.
//! - [`heap`]: the offset allocator every rank replicates.
//! - [`symmetric`]: collective `symmMemAlloc` / `symmMemFree`.
//! - [`register`]: making existing buffers reachable by peers.
//! - [`index`] + [`snapshot`]: the lock-free buffer lookup collectives use.
//! - [`pad`]: per-communicator signal pads and their layout.

pub mod heap;
pub mod index;
pub mod pad;
pub mod register;
pub mod snapshot;
pub mod symmetric;
pub mod vmm;

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::sys::{CUdevice, CUdeviceptr};
use parking_lot::Mutex;

use crate::cuda::device::Device;
use crate::cuda::{abi::MAX_RANKS, cu};
use crate::error::{bail, Result};
use heap::OffsetAllocator;
use index::{BufferEntry, BufferIndex};
use snapshot::SnapshotCell;

/// The address layout of one group's symmetric memory in this process.
pub struct SymmSpace {
    va: Option<vmm::VaRange>,
    pub stride: usize,
    pub nranks: usize,
    pub granularity: usize,
    /// Keeps a context alive for the reservation's release.
    device: Arc<Device>,
}

impl SymmSpace {
    /// Reserve `nranks` slots, each as large as the biggest device's memory
    /// (rounded up to a power of two), halving on failure.
    pub fn reserve(nranks: usize, devices: &[Arc<Device>]) -> Result<Arc<SymmSpace>> {
        let first = devices.first().expect("a group has at least one device");
        let _cur = first.make_current()?;
        let mut granularity = 1;
        let mut mem = 0usize;
        for d in devices {
            granularity = granularity.max(vmm::granularity(d.handle)?);
            let mut total = 0usize;
            cu!(cuDeviceTotalMem_v2(&mut total, d.handle))?;
            mem = mem.max(total);
        }
        let mut stride = mem.next_power_of_two().max(granularity);
        loop {
            match vmm::VaRange::reserve(stride * nranks, granularity) {
                Ok(va) => {
                    log::info!(
                        target: "symmcomm::memory",
                        "symmetric space: {nranks} slots of {} GiB at {:#x} (granularity {} KiB)",
                        stride >> 30, va.base, granularity >> 10
                    );
                    return Ok(Arc::new(SymmSpace { va: Some(va), stride, nranks, granularity, device: first.clone() }));
                }
                Err(e) if stride > (4 << 30) => {
                    log::info!(target: "symmcomm::memory", "reserving {nranks} x {stride} bytes failed ({e}); halving");
                    stride /= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn base(&self) -> CUdeviceptr {
        self.va.as_ref().map_or(0, |v| v.base)
    }

    /// Where rank `rank`'s copy of offset 0 lives.
    pub fn slot(&self, rank: usize) -> CUdeviceptr {
        self.base() + (rank * self.stride) as u64
    }

    pub fn round(&self, size: usize) -> Option<usize> {
        size.checked_next_multiple_of(self.granularity)
    }
}

impl Drop for SymmSpace {
    fn drop(&mut self) {
        let _cur = self.device.make_current();
        self.va.take();
    }
}

/// One communicator's symmetric memory and registrations.
pub struct CommMemory {
    pub space: Arc<SymmSpace>,
    pub rank: usize,
    pub nranks: usize,
    pub device: Arc<Device>,
    /// Devices that may touch memory this communicator maps: its own, or
    /// every GPU of an in-process group.
    pub access: Vec<CUdevice>,
    state: Mutex<MemState>,
    /// What collectives consult on their hot path: no lock, no allocation.
    pub index: SnapshotCell<BufferIndex>,
}

struct MemState {
    heap: OffsetAllocator,
    allocs: BTreeMap<CUdeviceptr, symmetric::SymmAlloc>,
    regs: BTreeMap<u64, register::Registration>,
    /// Sequence number of the next collective host operation; every rank
    /// counts the same calls, so a mismatch means the ranks diverged.
    op_seq: u64,
    next_reg_id: u64,
}

impl CommMemory {
    pub fn new(space: Arc<SymmSpace>, rank: usize, device: Arc<Device>, access: Vec<CUdevice>) -> CommMemory {
        let nranks = space.nranks;
        assert!(nranks <= MAX_RANKS);
        let heap = OffsetAllocator::new(space.stride);
        CommMemory {
            space,
            rank,
            nranks,
            device,
            access,
            state: Mutex::new(MemState {
                heap,
                allocs: BTreeMap::new(),
                regs: BTreeMap::new(),
                op_seq: 0,
                next_reg_id: 1,
            }),
            index: SnapshotCell::new(BufferIndex::default()),
        }
    }

    /// The symmetric or registered buffer holding `[addr, addr + len)`.
    pub fn find(&self, addr: u64, len: u64) -> Option<BufferEntry> {
        self.index.read(|idx| idx.find(addr, len).copied())
    }

    /// Whether `[addr, addr + len)` is in our or a peer's copy of a buffer.
    pub fn reachable(&self, addr: u64, len: u64) -> bool {
        self.index.read(|idx| idx.reachable(addr, len, self.nranks))
    }

    /// `addr` as seen on rank `peer` (in this process's address space).
    pub fn peer_ptr(&self, addr: u64, peer: usize) -> Result<u64> {
        if peer >= self.nranks {
            bail!(symmInvalidArgument, "peer {peer} is out of range for {} ranks", self.nranks);
        }
        match self.find(addr, 1) {
            Some(e) => Ok(e.peers[peer] + (addr - e.start)),
            None => bail!(symmInvalidArgument, "{addr:#x} is not inside a symmetric or registered buffer of this communicator"),
        }
    }

    /// A collective step of its own (not an allocation): every rank
    /// contributes `(a, b)` and its local verdict; fails on every rank if
    /// any rank failed (see [`agree`]), else returns every rank's record.
    pub(crate) fn agree_op(
        &self,
        link: &crate::bootstrap::Transport,
        op: HostOp,
        a: u64,
        b: u64,
        local: Option<crate::error::Error>,
    ) -> Result<Vec<Agreement>> {
        let mut st = self.state.lock();
        let seq = st.op_seq;
        st.op_seq += 1;
        let mut mine = Agreement::new(op, seq, a, b);
        mine.error = local;
        agree(link, &mine)
    }

    fn publish(&self, st: &MemState) {
        let entries = st.allocs.values().map(|a| a.entry).chain(st.regs.values().map(|r| r.entry)).collect();
        self.index.update(|_| BufferIndex::new(entries));
    }

    /// The number of a collective host call that is not a memory call
    /// (symmCommSplit, symmCommShrink), counted with the memory calls so
    /// that ranks doing different collective host calls notice.
    pub(crate) fn next_op_seq(&self) -> u64 {
        let mut st = self.state.lock();
        st.op_seq += 1;
        st.op_seq - 1
    }

    /// Unmap and free everything. Called with the device idle (the
    /// communicator synchronised it) and its context current.
    pub fn release_all(&self) {
        let mut st = self.state.lock();
        let regs = std::mem::take(&mut st.regs);
        let allocs = std::mem::take(&mut st.allocs);
        drop(regs);
        drop(allocs);
        self.publish(&st);
    }
}

impl Drop for CommMemory {
    fn drop(&mut self) {
        let _cur = self.device.make_current();
        self.release_all();
    }
}

/// The record every rank contributes to a collective host operation, so
/// that all of them can check they are doing the same thing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Agreement {
    pub op: HostOp,
    pub seq: u64,
    pub a: u64,
    pub b: u64,
    pub blob: Vec<u8>,
    pub error: Option<crate::error::Error>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum HostOp {
    Alloc = 1,
    Free = 2,
    Register = 3,
    Status = 4,
    DevComm = 5,
    Split = 6,
}

impl HostOp {
    fn name(self) -> &'static str {
        match self {
            HostOp::Alloc => "symmMemAlloc",
            HostOp::Free => "symmMemFree",
            HostOp::Register => "symmCommRegister",
            HostOp::Status => "status exchange",
            HostOp::DevComm => "symmDevCommCreate",
            HostOp::Split => "symmCommSplit",
        }
    }
}

impl Agreement {
    pub fn new(op: HostOp, seq: u64, a: u64, b: u64) -> Self {
        Agreement { op, seq, a, b, blob: Vec::new(), error: None }
    }

    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(40 + self.blob.len());
        v.extend_from_slice(&(self.op as u32).to_le_bytes());
        v.extend_from_slice(&self.seq.to_le_bytes());
        v.extend_from_slice(&self.a.to_le_bytes());
        v.extend_from_slice(&self.b.to_le_bytes());
        let (code, msg) = match &self.error {
            None => (0i32, String::new()),
            Some(e) => (e.code as i32, e.msg.clone()),
        };
        v.extend_from_slice(&code.to_le_bytes());
        v.extend_from_slice(&(msg.len() as u32).to_le_bytes());
        v.extend_from_slice(msg.as_bytes());
        v.extend_from_slice(&self.blob);
        v
    }

    fn decode(b: &[u8]) -> Result<Agreement> {
        let bad = || crate::error::err!(symmInternalError, "malformed agreement record ({} bytes)", b.len());
        let u32_at = |o: usize| b.get(o..o + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap())).ok_or_else(bad);
        let u64_at = |o: usize| b.get(o..o + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap())).ok_or_else(bad);
        let op = match u32_at(0)? {
            1 => HostOp::Alloc,
            2 => HostOp::Free,
            3 => HostOp::Register,
            4 => HostOp::Status,
            5 => HostOp::DevComm,
            6 => HostOp::Split,
            _ => return Err(bad()),
        };
        let (seq, a, bb) = (u64_at(4)?, u64_at(12)?, u64_at(20)?);
        let code = u32_at(28)? as i32;
        let len = u32_at(32)? as usize;
        let msg = b.get(36..36 + len).ok_or_else(bad)?;
        let error = (code != 0).then(|| {
            let code = crate::error::symmResult_t::from_raw(code).unwrap_or(crate::error::symmResult_t::symmInternalError);
            crate::error::Error::new(code, String::from_utf8_lossy(msg).into_owned())
        });
        Ok(Agreement { op, seq, a, b: bb, blob: b[36 + len..].to_vec(), error })
    }
}

/// All-gather `mine` and check that every rank is doing the same operation
/// (same op and sequence number); then surface the first failure: this
/// rank's own error, else the first failed peer's as a remote error.
pub(crate) fn agree(link: &crate::bootstrap::Transport, mine: &Agreement) -> Result<Vec<Agreement>> {
    let all: Vec<Agreement> = link.allgather(&mine.encode())?.iter().map(|b| Agreement::decode(b)).collect::<Result<_>>()?;
    for (r, x) in all.iter().enumerate() {
        if x.op != mine.op || x.seq != mine.seq {
            bail!(
                symmInvalidUsage,
                "ranks are out of step: this rank is in {} #{} but rank {r} is in {} #{} \
                 (every rank must make the same collective memory calls in the same order)",
                mine.op.name(), mine.seq, x.op.name(), x.seq
            );
        }
    }
    if let Some(e) = &mine.error {
        return Err(e.clone());
    }
    if let Some((r, e)) = all.iter().enumerate().find_map(|(r, x)| x.error.as_ref().map(|e| (r, e))) {
        bail!(symmRemoteError, "rank {r} failed in {}: {} ({:?})", mine.op.name(), e.msg, e.code);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{symmResult_t, Error};

    /// Cross-rank agreement over an in-process group (no GPU needed): the
    /// same call passes; different sizes or different calls fail on every
    /// rank with a message naming the ranks.
    #[test]
    fn agreement_across_ranks() {
        use crate::bootstrap::{local::LocalGroup, Transport};
        use crate::memory::symmetric::check_same;
        let run = |mk: fn(usize) -> Agreement| -> Vec<Result<Vec<Agreement>>> {
            let g = LocalGroup::new(3, std::time::Duration::from_secs(20));
            let handles: Vec<_> = (0..3)
                .map(|r| {
                    let link = Transport::InProcess(g.member(r));
                    std::thread::spawn(move || agree(&link, &mk(r)).and_then(|all| check_same(&all, "asked for", |a| a.a).map(|_| all)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        };
        for r in run(|_| Agreement::new(HostOp::Alloc, 0, 4096, 0)) {
            assert_eq!(r.unwrap().len(), 3);
        }
        for r in run(|r| Agreement::new(HostOp::Alloc, 0, if r == 2 { 8192 } else { 4096 }, 0)) {
            let e = r.unwrap_err();
            assert_eq!(e.code, symmResult_t::symmInvalidUsage);
            assert!(e.msg.contains("rank 0 asked for 4096") && e.msg.contains("rank 2 asked for 8192"), "{}", e.msg);
        }
        for r in run(|r| Agreement::new(if r == 1 { HostOp::Free } else { HostOp::Alloc }, 0, 4096, 0)) {
            let e = r.unwrap_err();
            assert_eq!(e.code, symmResult_t::symmInvalidUsage);
            assert!(e.msg.contains("out of step"), "{}", e.msg);
        }
        // One rank failed locally: it reports its own error, the others a remote one.
        let res = run(|r| {
            let mut a = Agreement::new(HostOp::Alloc, 0, 4096, 0);
            if r == 1 {
                a.error = Some(Error::new(symmResult_t::symmSystemError, "out of memory"));
            }
            a
        });
        assert_eq!(res[1].as_ref().unwrap_err().code, symmResult_t::symmSystemError);
        for r in [0, 2] {
            let e = res[r].as_ref().unwrap_err();
            assert_eq!(e.code, symmResult_t::symmRemoteError);
            assert!(e.msg.contains("rank 1") && e.msg.contains("out of memory"), "{}", e.msg);
        }
    }

    #[test]
    fn agreement_round_trip() {
        let mut a = Agreement::new(HostOp::Register, 7, 1 << 40, 3);
        a.blob = vec![1, 2, 3];
        assert_eq!(Agreement::decode(&a.encode()).unwrap(), a);
        a.error = Some(Error::new(symmResult_t::symmSystemError, "out of memory"));
        assert_eq!(Agreement::decode(&a.encode()).unwrap(), a);
        assert!(Agreement::decode(&a.encode()[..20]).is_err());
    }
}
