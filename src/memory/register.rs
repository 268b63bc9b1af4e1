//! `symmCommRegister`: make an existing device buffer reachable by the
//! peers without copying. The whole underlying allocation is shared (found
//! with cuMemGetAddressRange) and the buffer's offset in it remembered.
//!
//! How a peer reaches rank r's buffer depends on how rank r allocated it:
//! - inside the symmetric heap: already mapped, by arithmetic;
//! - cudaMalloc (legacy IPC capable): cuIpcGetMemHandle / cuIpcOpenMemHandle,
//!   or the same address with peer access when both ranks share a process;
//! - cuMem (VMM): the allocation's file descriptor, imported and mapped, or
//!   the same address with access granted when the ranks share the process.

use std::os::fd::AsRawFd;

use cudarc::driver::sys::{self, CUdeviceptr, CUipcMemHandle, CUpointer_attribute};

use super::index::{BufferEntry, BufferKind};
use super::vmm::{self, Mapping, PhysMem, VaRange};
use super::{agree, Agreement, CommMemory, HostOp};
use crate::bootstrap::Transport;
use crate::cuda::abi::MAX_RANKS;
use crate::cuda::buffer::DeviceBuffer;
use crate::cuda::cu;
use crate::error::{bail, err, Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Symmetric = 1,
    Ipc = 2,
    Vmm = 3,
}

/// What each rank tells the others about its buffer.
#[derive(Clone, Debug)]
struct Desc {
    kind: Kind,
    ptr: u64,
    /// The allocation holding it, and the buffer's offset inside.
    alloc_base: u64,
    alloc_size: u64,
    /// Kind::Symmetric: offset in the symmetric heap slot.
    heap_offset: u64,
    pid: u32,
    ipc: [u8; 64],
}

impl Desc {
    fn encode(&self) -> Vec<u8> {
        let mut v = vec![self.kind as u8];
        for x in [self.ptr, self.alloc_base, self.alloc_size, self.heap_offset] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&self.ipc);
        v
    }

    fn decode(b: &[u8]) -> Result<Desc> {
        if b.len() != 1 + 32 + 4 + 64 {
            bail!(symmInternalError, "malformed registration record ({} bytes)", b.len());
        }
        let kind = match b[0] {
            1 => Kind::Symmetric,
            2 => Kind::Ipc,
            3 => Kind::Vmm,
            k => bail!(symmInternalError, "unknown registration kind {k}"),
        };
        let u = |i: usize| u64::from_le_bytes(b[1 + 8 * i..9 + 8 * i].try_into().unwrap());
        Ok(Desc {
            kind,
            ptr: u(0),
            alloc_base: u(1),
            alloc_size: u(2),
            heap_offset: u(3),
            pid: u32::from_le_bytes(b[33..37].try_into().unwrap()),
            ipc: b[37..101].try_into().unwrap(),
        })
    }
}

/// A peer's allocation opened in this process.
enum Import {
    Ipc(CUdeviceptr),
    // Held for their Drop; field order is drop order: unmap, then free
    // the addresses.
    Vmm { _map: Mapping, _va: VaRange },
}

impl Drop for Import {
    fn drop(&mut self) {
        if let Import::Ipc(p) = self {
            if let Err(e) = cu!(cuIpcCloseMemHandle(*p)) {
                log::warn!(target: "symmcomm::memory", "cuIpcCloseMemHandle: {e}");
            }
        }
    }
}

pub struct Registration {
    pub entry: BufferEntry,
    _imports: Vec<Import>,
    _table: DeviceBuffer,
}

fn fd_tag(seq: u64) -> u64 {
    (2 << 60) | seq
}

/// Collective registration of `[ptr, ptr + size)`; returns the handle id.
pub fn register(mem: &CommMemory, link: &Transport, ptr: CUdeviceptr, size: usize) -> Result<u64> {
    let _cur = mem.device.make_current()?;
    // Local checks first: these fail on this rank alone, at once.
    let (alloc_base, alloc_size) = locate(mem, ptr, size)?;
    let mut st = mem.state.lock();
    let seq = st.op_seq;
    st.op_seq += 1;

    let described = describe(mem, link, ptr, alloc_base, alloc_size);
    let mut mine = Agreement::new(HostOp::Register, seq, size as u64, 0);
    let mut fd = None;
    match described {
        Ok((d, f)) => {
            mine.blob = d.encode();
            fd = f;
        }
        Err(e) => mine.error = Some(e),
    }
    let all = agree(link, &mine)?;
    if let Some((r, a)) = all.iter().enumerate().find(|(_, a)| a.a != size as u64) {
        bail!(
            symmInvalidUsage,
            "symmCommRegister #{seq}: rank {} registers {size} bytes but rank {r} registers {} bytes",
            mem.rank, a.a
        );
    }
    let descs: Vec<Desc> = all.iter().map(|a| Desc::decode(&a.blob)).collect::<Result<_>>()?;

    let mut imports = Vec::new();
    let step = open_peers(mem, link, seq, &descs, fd.as_ref(), &mut imports);
    let table_and_peers = step.and_then(|peers| {
        let t = DeviceBuffer::zeroed(&mem.device, 8 * mem.nranks)?;
        t.write(&peers[..mem.nranks])?;
        Ok((t, peers))
    });
    let mut status = Agreement::new(HostOp::Status, seq, 0, 0);
    status.error = table_and_peers.as_ref().err().cloned();
    agree(link, &status)?;
    let (table, peers) = table_and_peers?;

    let id = st.next_reg_id;
    st.next_reg_id += 1;
    let entry = BufferEntry {
        start: ptr,
        len: size as u64,
        kind: BufferKind::Registered,
        peers,
        table: table.ptr,
        id: (1 << 63) | seq,
    };
    st.regs.insert(id, Registration { entry, _imports: imports, _table: table });
    mem.publish(&st);
    log::info!(target: "symmcomm::memory", "rank {}: registered {size} bytes at {ptr:#x} as #{id}", mem.rank);
    Ok(id)
}

/// `symmCommDeregister`: local; waits for this device's work first.
pub fn deregister(mem: &CommMemory, id: u64) -> Result<()> {
    let _cur = mem.device.make_current()?;
    let mut st = mem.state.lock();
    if !st.regs.contains_key(&id) {
        bail!(symmInvalidArgument, "handle is not a live registration of this communicator");
    }
    cu!(cuCtxSynchronize()).map_err(Error::from)?;
    st.regs.remove(&id);
    mem.publish(&st);
    Ok(())
}

/// The allocation holding `[ptr, ptr + size)`; it must be on our device.
fn locate(mem: &CommMemory, ptr: CUdeviceptr, size: usize) -> Result<(u64, u64)> {
    let mut ordinal: i32 = -1;
    // SAFETY: the driver only inspects the address.
    let res = unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    if res != sys::CUresult::CUDA_SUCCESS {
        bail!(symmInvalidArgument, "buff ({ptr:#x}) is not device memory known to CUDA");
    }
    if ordinal != mem.device.ordinal {
        bail!(symmInvalidArgument, "buff ({ptr:#x}) is on device {ordinal}; the communicator uses device {}", mem.device.ordinal);
    }
    let (mut base, mut asize) = (0u64, 0usize);
    cu!(cuMemGetAddressRange_v2(&mut base, &mut asize, ptr))?;
    if ptr.checked_add(size as u64).is_none_or(|end| end > base + asize as u64) {
        bail!(symmInvalidArgument, "buff ({ptr:#x}) + {size} bytes runs past its allocation ({asize} bytes at {base:#x})");
    }
    Ok((base, asize as u64))
}

fn describe(
    mem: &CommMemory,
    link: &Transport,
    ptr: u64,
    alloc_base: u64,
    alloc_size: u64,
) -> Result<(Desc, Option<std::os::fd::OwnedFd>)> {
    let mut d = Desc { kind: Kind::Ipc, ptr, alloc_base, alloc_size, heap_offset: 0, pid: std::process::id(), ipc: [0; 64] };
    let slot = mem.space.slot(mem.rank);
    if ptr >= slot && ptr < slot + mem.space.stride as u64 {
        if mem.find(ptr, 1).is_none() {
            bail!(symmInvalidArgument, "buff ({ptr:#x}) is in the symmetric heap but not in a live allocation");
        }
        d.kind = Kind::Symmetric;
        d.heap_offset = ptr - slot;
        return Ok((d, None));
    }
    let mut ipc_capable: i32 = 0;
    cu!(cuPointerGetAttribute(
        (&mut ipc_capable as *mut i32).cast(),
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        ptr
    ))?;
    if ipc_capable != 0 {
        let mut h = CUipcMemHandle { reserved: [0; 64] };
        cu!(cuIpcGetMemHandle(&mut h, alloc_base))?;
        d.ipc.iter_mut().zip(h.reserved.iter()).for_each(|(o, i)| *o = *i as u8);
        return Ok((d, None));
    }
    d.kind = Kind::Vmm;
    if link.shares_address_space() {
        // Peers use the same address; let their GPUs in.
        vmm::set_access(alloc_base, alloc_size as usize, &mem.access)?;
        return Ok((d, None));
    }
    let phys = PhysMem::retain_at(alloc_base, alloc_size as usize)?;
    let fd = phys.export_fd().map_err(|e| {
        Error::new(
            crate::error::symmResult_t::symmNotSupported,
            format!(
                "buff ({ptr:#x}) is cuMem memory that cannot be exported ({}); allocate it with \
                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes, or use symmMemAlloc",
                e.msg
            ),
        )
    })?;
    Ok((d, Some(fd)))
}

/// Every rank's buffer address as seen from this process.
fn open_peers(
    mem: &CommMemory,
    link: &Transport,
    seq: u64,
    descs: &[Desc],
    my_fd: Option<&std::os::fd::OwnedFd>,
    imports: &mut Vec<Import>,
) -> Result<[u64; MAX_RANKS]> {
    if let Some(fd) = my_fd {
        for p in (0..mem.nranks).filter(|&p| p != mem.rank) {
            link.send_fds(p, fd_tag(seq), &[fd.as_raw_fd()])?;
        }
    }
    let mut peers = [0u64; MAX_RANKS];
    for (p, d) in descs.iter().enumerate() {
        peers[p] = if p == mem.rank {
            d.ptr
        } else {
            match d.kind {
                Kind::Symmetric => mem.space.slot(p) + d.heap_offset,
                Kind::Vmm if link.shares_address_space() => d.ptr,
                Kind::Vmm => import_vmm(mem, link, seq, p, d, imports)?,
                // Same process: the address works as is; peer access between
                // the contexts was enabled when the communicator was made.
                Kind::Ipc if link.shares_address_space() || d.pid == std::process::id() => d.ptr,
                Kind::Ipc => {
                    let mut h = CUipcMemHandle { reserved: [0; 64] };
                    h.reserved.iter_mut().zip(d.ipc.iter()).for_each(|(o, i)| *o = *i as _);
                    let mut base: CUdeviceptr = 0;
                    // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
                    cu!(cuIpcOpenMemHandle_v2(&mut base, h, 1))
                        .map_err(|e| Error::from(e).context(format!("opening rank {p}'s cudaMalloc buffer")))?;
                    imports.push(Import::Ipc(base));
                    base + (d.ptr - d.alloc_base)
                }
            }
        };
    }
    Ok(peers)
}

fn import_vmm(mem: &CommMemory, link: &Transport, seq: u64, p: usize, d: &Desc, imports: &mut Vec<Import>) -> Result<u64> {
    let fds = link.recv_fds(p, fd_tag(seq))?;
    let fd = fds.first().ok_or_else(|| err!(symmRemoteError, "rank {p} sent no memory handle"))?;
    let size = d.alloc_size as usize;
    let phys = PhysMem::import_fd(fd, size)?;
    let va = VaRange::reserve(size, mem.space.granularity)?;
    let map = Mapping::new(va.base, phys, &[mem.device.handle])?;
    let addr = va.base + (d.ptr - d.alloc_base);
    imports.push(Import::Vmm { _map: map, _va: va });
    Ok(addr)
}
