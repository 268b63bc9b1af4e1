//! Collective allocation and release of symmetric buffers.

use std::os::fd::AsRawFd;

use cudarc::driver::sys::CUdeviceptr;

use super::index::{BufferEntry, BufferKind};
use super::vmm::{Mapping, PhysMem};
use super::{agree, Agreement, CommMemory, HostOp};
use crate::bootstrap::Transport;
use crate::cuda::abi::MAX_RANKS;
use crate::cuda::buffer::DeviceBuffer;
use crate::cuda::cu;
use crate::error::{bail, err, Error, Result};

/// One live symmetric allocation, as this rank holds it.
pub struct SymmAlloc {
    pub offset: usize,
    /// Bytes mapped per rank (the requested size rounded to the granularity).
    pub mapped: usize,
    /// Not freeable by users (the signal pad).
    pub internal: bool,
    pub entry: BufferEntry,
    // Field order is drop order: unmap (each mapping holds its memory)
    // before the pointer table goes.
    _mappings: Vec<Mapping>,
    _table: DeviceBuffer,
}

/// fd messages of allocation #seq carry this tag.
fn fd_tag(seq: u64) -> u64 {
    (1 << 62) | seq
}

/// Collective `symmMemAlloc`: every rank asks for the same `size`; returns
/// this rank's address. On any failure, every rank fails and nothing leaks.
pub fn alloc(mem: &CommMemory, link: &Transport, size: usize, internal: bool) -> Result<CUdeviceptr> {
    let space = &mem.space;
    let Some(rounded) = space.round(size).filter(|&r| r <= space.stride) else {
        bail!(symmInvalidArgument, "size {size} is larger than the symmetric heap ({} bytes per rank)", space.stride);
    };
    let _cur = mem.device.make_current()?;
    let mut st = mem.state.lock();
    let seq = st.op_seq;
    st.op_seq += 1;

    // This rank's memory first, so the agreement can carry its outcome.
    let offset = st.heap.alloc(rounded);
    let local = match offset {
        None => Err(err!(symmSystemError, "symmetric heap exhausted: no {rounded}-byte range left")),
        Some(off) => create_local(mem, link, off, rounded),
    };
    let mut mine = Agreement::new(HostOp::Alloc, seq, size as u64, offset.map_or(u64::MAX, |o| o as u64));
    mine.error = local.as_ref().err().cloned();
    let release = |st: &mut super::MemState| {
        if let Some(off) = offset {
            st.heap.free(off, rounded);
        }
    };
    let all = match agree(link, &mine).and_then(|all| check_same(&all, "asked for", |a| a.a).map(|_| all)) {
        Ok(all) => all,
        Err(e) => {
            release(&mut st);
            return Err(e);
        }
    };
    if let Err(e) = check_same(&all, "placed it at heap offset", |a| a.b) {
        release(&mut st);
        return Err(e.context("ranks disagree on the symmetric heap layout; did every rank make the same symmMemAlloc/symmMemFree calls?"));
    }
    let (local_map, fd) = local.expect("agree() returned the local error already");
    let off = offset.expect("offset exists when the local step succeeded");

    // Peers' memory: in-process peers map their own slots; remote ones send
    // a file descriptor that we import into their slot here.
    let mut mappings = vec![local_map];
    let step = import_peers(mem, link, seq, off, rounded, fd.as_ref(), &mut mappings)
        .and_then(|_| pointer_table(mem, off));
    let mut status = Agreement::new(HostOp::Status, seq, 0, 0);
    status.error = step.as_ref().err().cloned();
    // Also the barrier after which every rank's slot is mapped.
    let table = match agree(link, &status).and(step) {
        Ok(t) => t,
        Err(e) => {
            drop(mappings);
            release(&mut st);
            return Err(e);
        }
    };
    let addr = space.slot(mem.rank) + off as u64;
    let mut peers = [0u64; MAX_RANKS];
    for (r, p) in peers.iter_mut().enumerate().take(mem.nranks) {
        *p = space.slot(r) + off as u64;
    }
    let entry =
        BufferEntry { start: addr, len: size as u64, kind: BufferKind::Symmetric, peers, table: table.ptr, id: off as u64 };
    st.allocs.insert(addr, SymmAlloc { offset: off, mapped: rounded, internal, entry, _mappings: mappings, _table: table });
    mem.publish(&st);
    log::info!(target: "symmcomm::memory", "rank {}: symmetric alloc #{seq} of {size} bytes at {addr:#x} (offset {off:#x})", mem.rank);
    Ok(addr)
}

/// Create and map this rank's memory; export it if peers are in other
/// processes.
fn create_local(
    mem: &CommMemory,
    link: &Transport,
    off: usize,
    size: usize,
) -> Result<(Mapping, Option<std::os::fd::OwnedFd>)> {
    let phys = PhysMem::create(mem.device.handle, size)?;
    let fd = if link.shares_address_space() { None } else { Some(phys.export_fd()?) };
    let map = Mapping::new(mem.space.slot(mem.rank) + off as u64, phys, &mem.access)?;
    // cuMemCreate memory is not zeroed; symmetric buffers start at zero so
    // that pads and flags begin in a known state.
    cu!(cuMemsetD8_v2(map.addr, 0, size))?;
    cu!(cuCtxSynchronize())?;
    Ok((map, fd))
}

fn import_peers(
    mem: &CommMemory,
    link: &Transport,
    seq: u64,
    off: usize,
    size: usize,
    fd: Option<&std::os::fd::OwnedFd>,
    mappings: &mut Vec<Mapping>,
) -> Result<()> {
    let Some(fd) = fd else { return Ok(()) };
    for p in (0..mem.nranks).filter(|&p| p != mem.rank) {
        link.send_fds(p, fd_tag(seq), &[fd.as_raw_fd()])?;
    }
    for p in (0..mem.nranks).filter(|&p| p != mem.rank) {
        let fds = link.recv_fds(p, fd_tag(seq))?;
        let Some(peer_fd) = fds.first() else { bail!(symmRemoteError, "rank {p} sent no memory handle") };
        let phys = PhysMem::import_fd(peer_fd, size).map_err(|e| e.context(format!("importing rank {p}'s memory")))?;
        mappings.push(Mapping::new(mem.space.slot(p) + off as u64, phys, &[mem.device.handle])?);
    }
    Ok(())
}

fn pointer_table(mem: &CommMemory, off: usize) -> Result<DeviceBuffer> {
    let ptrs: Vec<u64> = (0..mem.nranks).map(|r| mem.space.slot(r) + off as u64).collect();
    let t = DeviceBuffer::zeroed(&mem.device, 8 * mem.nranks)?;
    t.write(&ptrs)?;
    Ok(t)
}

/// Fail with a message naming every rank's value unless all agree.
pub(crate) fn check_same(all: &[Agreement], what: &str, f: impl Fn(&Agreement) -> u64) -> Result<()> {
    if all.iter().all(|a| f(a) == f(&all[0])) {
        return Ok(());
    }
    let list: Vec<String> = all.iter().enumerate().map(|(r, a)| format!("rank {r} {what} {}", f(a))).collect();
    let op = all[0].op.name();
    bail!(symmInvalidUsage, "{op}: ranks differ: {}", list.join(", "))
}

/// Collective `symmMemFree`. `ptr` must be the address symmMemAlloc gave.
pub fn free(mem: &CommMemory, link: &Transport, ptr: CUdeviceptr) -> Result<()> {
    free_impl(mem, link, ptr, false)
}

/// Collective release of one of the library's own allocations (made with
/// `internal`), e.g. a device communicator's slots.
pub fn free_internal(mem: &CommMemory, link: &Transport, ptr: CUdeviceptr) -> Result<()> {
    free_impl(mem, link, ptr, true)
}

fn free_impl(mem: &CommMemory, link: &Transport, ptr: CUdeviceptr, internal: bool) -> Result<()> {
    let _cur = mem.device.make_current()?;
    let mut st = mem.state.lock();
    let Some(a) = st.allocs.get(&ptr) else {
        bail!(symmInvalidArgument, "{ptr:#x} is not a live symmetric allocation of this communicator (symmMemAlloc returns the only valid addresses)");
    };
    if a.internal && !internal {
        bail!(symmInvalidArgument, "{ptr:#x} is memory the library owns (the signal pad or a device communicator's slots), freed with its owner");
    }
    if !a.internal && internal {
        bail!(symmInternalError, "{ptr:#x} is a user allocation, not the library's");
    }
    let (offset, mapped) = (a.offset, a.mapped);
    let seq = st.op_seq;
    st.op_seq += 1;
    let all = agree(link, &Agreement::new(HostOp::Free, seq, offset as u64, 0))?;
    check_same(&all, "frees offset", |a| a.a).map_err(|e| e.context("nothing was freed"))?;
    // No kernel of this device may still use the memory, and after the
    // barrier no peer's kernel either.
    cu!(cuCtxSynchronize()).map_err(Error::from)?;
    link.barrier()?;
    st.allocs.remove(&ptr);
    st.heap.free(offset, mapped);
    mem.publish(&st);
    log::info!(target: "symmcomm::memory", "rank {}: freed symmetric alloc at {ptr:#x}", mem.rank);
    Ok(())
}
