"""Symmetric tensors, named as ``torch.distributed._symmetric_memory`` names
them, so a recipe written for PyTorch's symmetric memory ports by changing
its import::

    import symmcomm.symmetric_memory as symm_mem     # was: torch.distributed._symmetric_memory

    buf = symm_mem.empty(n, dtype=torch.bfloat16, device=device)
    hdl = symm_mem.rendezvous(buf, group)
    peer = hdl.get_buffer(peer_rank, (n,), torch.bfloat16)
    my_kernel[grid](hdl.buffer_ptrs_dev, hdl.signal_pad_ptrs_dev, ..., rank=hdl.rank, world_size=hdl.world_size)

Where symmcomm differs from PyTorch:

- **Allocation is collective.** empty() is a symmMemAlloc that every rank
  of the group makes in the same order (PyTorch allocates locally and
  exchanges at rendezvous). rendezvous() is local here: it only looks up
  the allocation's peer addresses (calling it on every rank, as PyTorch
  code does, is harmless). The group is fixed at empty() (``group=``;
  default: the default process group); rendezvous() with another group is
  an error.
- **Freeing is collective.** The memory of a symmetric tensor stays valid
  while the tensor, any view of it, a handle, or a tensor from
  get_buffer()/get_signal_pad() is referenced on this rank. When the last
  reference dies nothing happens at once (a garbage-collector callback runs
  on one rank only, and symmMemFree needs every rank). The memory is freed
  at the next point every rank reaches: collect(), free(), the end of a
  scope(), or the next empty() on that group (the safe default: garbage is
  reclaimed before each allocation), once no rank references it.
- **Signal pads belong to the communicator**, not to each allocation:
  every handle of one group shows the same pads (``signal_pad_size`` bytes
  per rank, zeroed at creation, never touched by the library), so two
  kernels that use them at once must use different slots.
- **Barriers and signals** are symmcomm's stream-ordered kernels, bounded by
  SYMM_TIMEOUT (``timeout_ms`` is accepted for compatibility; the process's
  SYMM_TIMEOUT applies). A wait that gives up makes the communicator's
  asynchronous error a timeout (see Communicator.check_async_error).
"""

from __future__ import annotations

import contextlib
import operator

from . import _dlpack, _memory
from ._args import _int_arg, _size_arg
from ._torch import check_tensor, invalid, require_torch, shape_elements, stream_handle
from ._types import SIGNAL_CHANNELS
from .communicator import Communicator, get_communicator, set_communicator
from .fused import fused_all_gather_matmul, fused_matmul_reduce_scatter

__all__ = [
    "SymmetricMemory",
    "empty",
    "rendezvous",
    "is_symm_mem_tensor",
    "free",
    "collect",
    "scope",
    "get_communicator",
    "set_communicator",
    "enable_symm_mem_for_group",
    "is_symm_mem_enabled_for_group",
    "stream_write_value32",
    "memset32",
    "all_to_all_vdev",
    "all_to_all_vdev_2d",
    "all_to_all_vdev_2d_offset",
    "one_shot_all_reduce",
    "one_shot_all_reduce_out",
    "two_shot_all_reduce_",
    "two_shot_all_reduce_out",
    "fused_all_gather_matmul",
    "fused_matmul_reduce_scatter",
]

def all_to_all_vdev(input, out, in_splits, out_splits_offsets, group_name=None):
    """``torch.ops.symm_mem.all_to_all_vdev(input, out, in_splits,
    out_splits_offsets, group_name)`` with the same arguments, on the
    communicator of ``group_name`` (a process group's name, a group, a
    Communicator, or None for the default): see
    Communicator.all_to_all_vdev."""
    return get_communicator(group_name).all_to_all_vdev(input, out, in_splits, out_splits_offsets)


def all_to_all_vdev_2d(input, out, in_splits, out_splits_offsets, group_name=None, major_align=None):
    """``torch.ops.symm_mem.all_to_all_vdev_2d(input, out, in_splits,
    out_splits_offsets, group_name, major_align=None)`` with the same
    arguments (the mixture-of-experts dispatch, expert-major output), on the
    communicator of ``group_name`` (a process group's name, a group, a
    Communicator, or None for the default): see
    Communicator.all_to_all_vdev_2d."""
    return get_communicator(group_name).all_to_all_vdev_2d(input, out, in_splits, out_splits_offsets,
                                                           major_align=major_align)


def all_to_all_vdev_2d_offset(input, out, in_splits_offsets, out_splits_offsets, group_name=None):
    """``torch.ops.symm_mem.all_to_all_vdev_2d_offset(input, out,
    in_splits_offsets, out_splits_offsets, group_name)`` with the same
    arguments (the combine, all_to_all_vdev_2d's inverse), on the
    communicator of ``group_name``: see
    Communicator.all_to_all_vdev_2d_offset."""
    return get_communicator(group_name).all_to_all_vdev_2d_offset(input, out, in_splits_offsets,
                                                                  out_splits_offsets)


# PyTorch's all-reduce ops on symmetric memory, by their names, so that code
# written for torch.ops.symm_mem (vLLM's and SGLang's symmetric-memory
# all-reduce) ports by changing the import. "one_shot" and "two_shot" name
# PyTorch's kernels; here both are the communicator's all-reduce, which
# chooses its algorithm by size and rank count (LL packets, one-shot,
# two-shot, push; SYMM_ALGO overrides). ``input`` may be any CUDA tensor of
# the communicator's device (PyTorch requires a symmetric one; a symmetric
# one here is read in place by the peers). No multimem_* forms: symmcomm
# never uses NVLink multicast.


def one_shot_all_reduce(input, reduce_op, group_name=None):
    """``torch.ops.symm_mem.one_shot_all_reduce(input, reduce_op,
    group_name)``: a new tensor holding ``reduce_op`` ("sum", "avg",
    "max", ...) of ``input`` over the ranks of ``group_name`` (a process
    group's name, a group, a Communicator, or None for the default)."""
    torch = require_torch("one_shot_all_reduce")
    return one_shot_all_reduce_out(input, reduce_op, group_name, torch.empty_like(input))


def one_shot_all_reduce_out(input, reduce_op, group_name, out):
    """``torch.ops.symm_mem.one_shot_all_reduce_out(input, reduce_op,
    group_name, out)``: the reduction into ``out`` (``input``'s shape and
    dtype); returns ``out``."""
    return get_communicator(group_name).all_reduce(input, reduce_op, out=out)


def two_shot_all_reduce_(input, reduce_op, group_name=None):
    """``torch.ops.symm_mem.two_shot_all_reduce_(input, reduce_op,
    group_name)``: the reduction in place; returns ``input``."""
    return get_communicator(group_name).all_reduce(input, reduce_op)


def two_shot_all_reduce_out(input, reduce_op, group_name, output):
    """``torch.ops.symm_mem.two_shot_all_reduce_out(input, reduce_op,
    group_name, output)``: the reduction into ``output``; returns it."""
    return get_communicator(group_name).all_reduce(input, reduce_op, out=output)


def enable_symm_mem_for_group(group_name) -> None:
    """PyTorch's name: create the group's communicator now (collective)."""
    get_communicator(group_name)


def is_symm_mem_enabled_for_group(group_name) -> bool:
    try:
        get_communicator(group_name, create=False)
        return True
    except Exception:
        return False


def empty(*size, dtype=None, device=None, group=None):
    """A new symmetric tensor (contiguous, uninitialised) on the group's
    communicator: ``empty(4, 1024, dtype=torch.bfloat16, device="cuda:0")``
    or ``empty((4, 1024), ...)``. Collective: every rank of the group calls
    it in the same order with the same size. ``device`` must be the
    communicator's device (default). Dead symmetric tensors are reclaimed
    first (see the module docstring)."""
    require_torch("symmetric tensors")
    shape = _size_arg(size)
    return get_communicator(group)._memory.empty(shape, dtype, device)


def _allocation_of(tensor, local_only: bool = True):
    ptr = tensor.data_ptr()
    nbytes = max(tensor.numel() * tensor.element_size(), 1)
    for reg in _memory.registries():
        alloc = reg.find(ptr, nbytes, local_only=local_only)
        if alloc is not None:
            return alloc
    return None


def is_symm_mem_tensor(tensor) -> bool:
    """Whether ``tensor`` lies in symmetric memory from empty() (this rank's copy)."""
    return _allocation_of(tensor) is not None


def rendezvous(tensor, group=None) -> "SymmetricMemory":
    """The handle of the symmetric allocation holding ``tensor`` (PyTorch's
    rendezvous). Local in symmcomm: the allocation was exchanged by empty().
    ``group``, when given, must be the group the tensor was allocated on."""
    require_torch("symmetric tensors")
    alloc = _allocation_of(tensor)
    if alloc is None:
        raise invalid("tensor is not in symmetric memory: allocate it with symmcomm.symmetric_memory.empty() "
                      "(plain tensors can still be passed to every collective)")
    if group is not None:
        try:
            want = get_communicator(group, create=False)
        except Exception:
            want = None
        if want is not alloc.comm:
            raise invalid("tensor was allocated on another group's communicator; symmetric memory belongs "
                          "to the communicator it was allocated on (pass that group, or allocate with group=)")
    return SymmetricMemory(alloc)


def free(tensor) -> bool:
    """Collective: release ``tensor``'s symmetric memory at this point, which
    every rank reaches. ``tensor`` itself is emptied (``tensor.set_()``);
    other references (views, handles, peer views here or on other ranks)
    keep the memory until a later collective point. Returns whether the
    memory was freed now."""
    alloc = _allocation_of(tensor)
    if alloc is None:
        raise invalid("tensor is not in symmetric memory from symmcomm.symmetric_memory.empty()")
    _memory.detach(tensor)
    del tensor
    alloc.registry.collect()
    return alloc.freed


def collect(group=None) -> int:
    """Collective: free every symmetric allocation of the group that no rank
    references any more. Returns how many were freed."""
    return get_communicator(group).collect()


@contextlib.contextmanager
def scope():
    """Symmetric tensors made by empty() inside the block are freed at its
    end, which every rank reaches: each is emptied (``set_()``), then the
    ranks agree and free what no one references (views that escaped the
    block keep their memory until a later collective point). When the block
    raises, nothing collective runs (other ranks may not be at this point);
    the tensors are still emptied and reclaimed later.

        with symm_mem.scope():
            buf = symm_mem.empty(n, dtype=torch.float32, device=dev)
            ...
    """
    entries = _memory.push_scope()
    ok = False
    try:
        yield
        ok = True
    finally:
        _memory.pop_scope(entries)
        comms = []
        for ref, comm in entries:
            t = ref()
            if t is not None:
                _memory.detach(t)
            if comm not in comms:
                comms.append(comm)
        del entries
        if ok:
            for comm in comms:
                if not comm.destroyed:
                    comm.collect()


def _comm_for_address(ptr: int, device_index: int, comm=None) -> Communicator:
    if comm is not None:
        return get_communicator(comm)
    regs = _memory.registries()
    for reg in regs:
        if reg.find(ptr) is not None or reg.owns_pad_address(ptr):
            return reg.comm
    for reg in regs:
        if reg.comm.device_index == device_index:
            return reg.comm
    raise invalid("no symmcomm communicator on this tensor's device; pass comm=")


def _word_address(tensor, offset: int, count: int = 1) -> int:
    if tensor.element_size() != 4:
        raise invalid(f"tensor is {tensor.dtype}; 32-bit word operations need a 4-byte dtype (torch.uint32/int32)")
    offset, count = _int_arg(offset, "offset"), _int_arg(count, "count")
    if offset < 0 or count < 0 or offset + count > tensor.numel():
        raise invalid(f"words [{offset}, {offset + count}) are outside the tensor's {tensor.numel()} elements")
    return tensor.data_ptr() + 4 * offset


def stream_write_value32(tensor, offset: int, val: int, *, stream=None, comm=None):
    """Store the 32-bit ``val`` at word ``offset`` of ``tensor`` once the
    stream's earlier work is done (release, system scope); ``tensor`` may be
    a local or peer symmetric tensor or a signal pad (symmStreamWriteValue32).
    Returns ``tensor``."""
    check_tensor(tensor, "tensor", tensor.device.index if tensor.is_cuda else -1, contiguous=False)
    addr = _word_address(tensor, offset)
    c = _comm_for_address(addr, tensor.device.index, comm)
    c.library.symmStreamWriteValue32(c.handle, addr, int(val) & 0xFFFFFFFF, stream_handle(stream, c.device_index))
    return tensor


def memset32(tensor, offset: int, val: int, count: int, *, stream=None, comm=None):
    """Fill ``count`` 32-bit words of ``tensor`` from word ``offset`` with
    ``val``, ordered on the stream (symmMemset32). Returns ``tensor``."""
    check_tensor(tensor, "tensor", tensor.device.index if tensor.is_cuda else -1, contiguous=False)
    addr = _word_address(tensor, offset, count)
    c = _comm_for_address(addr, tensor.device.index, comm)
    c.library.symmMemset32(addr, int(val) & 0xFFFFFFFF, count, c.handle, stream_handle(stream, c.device_index))
    return tensor


class SymmetricMemory:
    """The handle of one symmetric allocation (PyTorch's _SymmetricMemory).

    Attributes: ``rank``, ``world_size``, ``buffer_ptrs`` (every rank's
    address of the allocation, as mapped here), ``buffer_ptrs_dev`` (a device
    array of them: pass it to kernels), ``buffer_size``, ``signal_pad_ptrs``,
    ``signal_pad_ptrs_dev``, ``signal_pad_size``, ``comm``. The handle keeps
    the allocation's memory alive while it lives."""

    def __init__(self, alloc: "_memory.Allocation"):
        comm = alloc.comm
        self._alloc = alloc
        self._keepalive = alloc.keepalive()
        self._pad_keepalive = comm._memory.pad_keepalive()
        self._storages: dict = {}
        self.comm = comm
        self.rank = comm.rank
        self.world_size = comm.world_size
        self.buffer_ptrs = list(alloc.peer_ptrs())
        self.buffer_ptrs_dev = alloc.table_dev()
        self.buffer_size = alloc.nbytes
        pads = comm._memory.pad_ranges()
        self.signal_pad_ptrs = [p for p, _ in pads]
        self.signal_pad_size = pads[0][1]
        self.signal_pad_ptrs_dev = comm.library.symmCommGetSignalPadTable(comm.handle)

    def __repr__(self) -> str:
        return (f"<symmcomm SymmetricMemory rank {self.rank}/{self.world_size}, {self.buffer_size} bytes "
                f"at {self.buffer_ptrs[self.rank]:#x}>")

    def _rank(self, rank) -> int:
        rank = _int_arg(rank, "rank")
        if not 0 <= rank < self.world_size:
            raise invalid(f"rank {rank} is out of range for {self.world_size} ranks")
        return rank

    def _view(self, kind: str, rank: int, nbytes_total: int, sizes, dtype, storage_offset: int, make_storage):
        require_torch("symmetric tensors")
        if isinstance(sizes, int):
            sizes = (sizes,)
        sizes = tuple(operator.index(s) for s in sizes)
        storage_offset = _int_arg(storage_offset, "storage_offset")
        itemsize = dtype.itemsize
        numel = shape_elements(sizes, "sizes")
        if storage_offset < 0 or (storage_offset + numel) * itemsize > nbytes_total:
            raise invalid(f"{kind} view of {sizes} {dtype} at element offset {storage_offset} needs "
                          f"{(storage_offset + numel) * itemsize} bytes; the {kind} has {nbytes_total}")
        key = (kind, rank)
        st = self._storages.get(key)
        if st is None:
            st = self._storages[key] = make_storage()
        return _dlpack.tensor_on(st, dtype, sizes, storage_offset)

    def get_buffer(self, rank: int, sizes, dtype, storage_offset: int = 0):
        """A tensor over rank ``rank``'s copy of the allocation (``sizes`` of
        ``dtype`` from element ``storage_offset``), usable from this GPU."""
        rank = self._rank(rank)
        t = self._view("buffer", rank, self.buffer_size, sizes, dtype, storage_offset,
                       lambda: self._alloc.storage(rank, self._keepalive))
        self._alloc.tensors.add(t)
        return t

    def get_signal_pad(self, rank: int, sizes=None, dtype=None, storage_offset: int = 0):
        """A tensor over rank ``rank``'s user signal area (default: all of it
        as torch.uint32). The pads belong to the communicator: every handle of
        it shows the same ones."""
        torch = require_torch("symmetric tensors")
        rank = self._rank(rank)
        dtype = torch.uint32 if dtype is None else dtype
        if sizes is None or (not isinstance(sizes, int) and len(sizes) == 0):
            sizes = (self.signal_pad_size // dtype.itemsize - storage_offset,)
        ptr = self.signal_pad_ptrs[rank]
        t = self._view("signal pad", rank, self.signal_pad_size, sizes, dtype, storage_offset,
                       lambda: _dlpack.byte_storage(ptr, self.signal_pad_size, self.comm.device_index,
                                                    self._pad_keepalive))
        self.comm._memory.track_pad_tensor(t)
        return t

    def _channel(self, channel) -> int:
        channel = _int_arg(channel, "channel")
        if not 0 <= channel < SIGNAL_CHANNELS:
            raise invalid(f"channel {channel} is out of range [0, {SIGNAL_CHANNELS})")
        return channel

    def barrier(self, channel: int = 0, timeout_ms: int = 0, *, stream=None) -> None:
        """A device-side barrier of all ranks on the stream (symmBarrier).
        symmcomm has one barrier per communicator: ``channel`` is checked and
        otherwise ignored, so barriers (like collectives) of one communicator
        must be ordered (one stream, or streams ordered by events). Bounded by
        SYMM_TIMEOUT rather than ``timeout_ms``."""
        self._channel(channel)
        self.comm.library.symmBarrier(self.comm.handle, stream_handle(stream, self.comm.device_index))

    def put_signal(self, dst_rank: int, channel: int = 0, timeout_ms: int = 0, *, stream=None) -> None:
        """Signal ``dst_rank`` on ``channel`` once the stream's earlier work is
        done (release, system scope; waits until the previous signal on the
        channel was consumed). symmcomm's channels (0..1023) are per
        communicator and apart from the user signal pads."""
        dst = self._rank(dst_rank)
        self.comm.library.symmPutSignal(self.comm.handle, dst, self._channel(channel),
                                        stream_handle(stream, self.comm.device_index))

    def wait_signal(self, src_rank: int, channel: int = 0, timeout_ms: int = 0, *, stream=None) -> None:
        """Hold the stream until ``src_rank``'s signal on ``channel`` arrives,
        and consume it (acquire, system scope). Bounded by SYMM_TIMEOUT."""
        src = self._rank(src_rank)
        self.comm.library.symmWaitSignal(self.comm.handle, src, self._channel(channel),
                                         stream_handle(stream, self.comm.device_index))

    def stream_write_value32(self, tensor, offset: int, val: int, *, stream=None):
        """See the module's stream_write_value32 (on this handle's communicator)."""
        return stream_write_value32(tensor, offset, val, stream=stream, comm=self.comm)

    def memset32(self, tensor, offset: int, val: int, count: int, *, stream=None):
        """See the module's memset32 (on this handle's communicator)."""
        return memset32(tensor, offset, val, count, stream=stream, comm=self.comm)

