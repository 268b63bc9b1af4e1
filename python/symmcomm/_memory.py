"""Symmetric allocations of one communicator and their lifetime.

The rules (also in symmetric_memory's docstring):

- Memory stays valid while anything references it on this rank: the tensor
  empty() returned, any view of it, a handle from rendezvous(), or a tensor
  from a handle's get_buffer()/get_signal_pad(). Every such tensor's
  storage holds one ``_KeepAlive`` per allocation (through the DLPack
  deleter); the registry holds only a weak reference to it.
- When the last reference dies nothing is called: freeing symmetric memory
  is collective (symmMemFree waits for every rank), so it must happen at a
  point of the program every rank reaches, never in a garbage-collector
  callback that runs on one rank only.
- Those points are collect() (explicit), every empty() (allocation is
  collective anyway: garbage is reclaimed before the new allocation, the
  safe default), free() and the end of a scope(). There the ranks agree,
  with one small all-reduce, on the allocations that no rank references
  any more, and free exactly those, in allocation order.
- destroy() frees everything locally (symmCommDestroy); it refuses while
  references remain unless forced. abort() always goes ahead. Both empty
  the tensors they handed out (``tensor.set_()``), so stale tensors read as
  empty instead of touching unmapped memory; views made by the user cannot
  be reached and must not be used after that.
"""

from __future__ import annotations

import threading
import weakref

from . import _dlpack
from ._args import _device_index
from ._torch import invalid, require_torch, shape_elements
from ._types import ReduceOp

# Every registry of a live communicator, to map an address to its owner.
_REGISTRIES: "weakref.WeakSet[Registry]" = weakref.WeakSet()
_REGISTRIES_LOCK = threading.Lock()


class _TensorRefs:
    """Weak references to tensors, by identity (a WeakSet would compare
    tensors with ==, which is elementwise)."""

    def __init__(self):
        self._refs: dict[int, weakref.ref] = {}

    def add(self, t) -> None:
        key, refs = id(t), self._refs

        def forget(r, key=key):
            if refs.get(key) is r:
                del refs[key]

        refs[key] = weakref.ref(t, forget)

    def __iter__(self):
        return iter([t for t in (r() for r in list(self._refs.values())) if t is not None])


class _KeepAlive:
    """Referenced by the storage of every tensor over one allocation."""

    __slots__ = ("allocation", "__weakref__")

    def __init__(self, allocation):
        self.allocation = allocation


class Allocation:
    """One symmMemAlloc of a communicator, as this rank holds it."""

    def __init__(self, registry: "Registry", seq: int, ptr: int, nbytes: int):
        self.registry = registry
        self.seq = seq
        self.ptr = ptr
        self.nbytes = nbytes
        self.freed = False
        self._keepalive_ref = None
        # Tensors handed out over this allocation (emptied on destroy/abort).
        self.tensors = _TensorRefs()
        self._peer_ptrs: list[int] | None = None
        self._table_dev: int | None = None

    @property
    def comm(self):
        return self.registry.comm

    def new_keepalive(self) -> _KeepAlive:
        ka = _KeepAlive(self)
        self._keepalive_ref = weakref.ref(ka)
        return ka

    def keepalive(self) -> _KeepAlive:
        """The live keep-alive (only while something references the memory)."""
        ka = self._keepalive_ref() if self._keepalive_ref is not None else None
        if ka is None or self.freed:
            raise invalid(f"symmetric allocation #{self.seq} is no longer referenced or was freed")
        return ka

    def referenced(self) -> bool:
        return self._keepalive_ref is not None and self._keepalive_ref() is not None

    def peer_ptrs(self) -> list[int]:
        """Every rank's address of this allocation, in this process."""
        if self._peer_ptrs is None:
            comm = self.comm
            lib, h = comm.library, comm.handle
            self._peer_ptrs = [self.ptr if r == comm.rank else lib.symmMemGetPeerPtr(h, self.ptr, r)
                               for r in range(comm.world_size)]
        return self._peer_ptrs

    def table_dev(self) -> int:
        if self._table_dev is None:
            comm = self.comm
            self._table_dev = comm.library.symmMemGetPeerTable(comm.handle, self.ptr)
        return self._table_dev

    def storage(self, rank: int, keepalive: _KeepAlive):
        """A new byte storage over rank ``rank``'s copy, holding ``keepalive``.
        (Never cached here: a cached storage would keep the allocation
        referenced forever.)"""
        return _dlpack.byte_storage(self.peer_ptrs()[rank], self.nbytes, self.comm.device_index, keepalive)

    def contains(self, ptr: int, nbytes: int = 1) -> int | None:
        """The rank whose copy (as mapped here) holds [ptr, ptr + nbytes), or
        None. Peers' copies are known once a handle asked for them."""
        if self._peer_ptrs is None:
            bases = [(self.comm.rank, self.ptr)]
        else:
            bases = list(enumerate(self._peer_ptrs))
        for r, base in bases:
            if base <= ptr and ptr + nbytes <= base + self.nbytes:
                return r
        return None

    def describe(self) -> str:
        return f"#{self.seq} ({self.nbytes} bytes at {self.ptr:#x})"


class Registry:
    """The symmetric allocations of one communicator."""

    def __init__(self, comm):
        self.comm = comm
        self._allocations: dict[int, Allocation] = {}
        self._seq = 0
        self._pad_keepalive = None
        self._pad_tensors = _TensorRefs()
        self._pads: list[tuple[int, int]] | None = None
        with _REGISTRIES_LOCK:
            _REGISTRIES.add(self)

    # -- allocation ---------------------------------------------------------
    def empty(self, size: tuple, dtype=None, device=None):
        """Collective: reclaim garbage, then allocate a symmetric tensor of
        ``size`` (a tuple of ints) and ``dtype`` (None: torch's default) on
        the communicator's device (``device``, when given, must be it)."""
        torch = require_torch("symmetric tensors")
        dtype = torch.get_default_dtype() if dtype is None else dtype
        index = _device_index(device)
        if index is not None and index != self.comm.device_index:
            raise invalid(f"device cuda:{index} is not the communicator's device cuda:{self.comm.device_index}")
        self._check_not_capturing("allocating symmetric memory")
        itemsize = dtype.itemsize
        nbytes = shape_elements(size, "size") * itemsize
        self.collect()
        comm = self.comm
        ptr = comm.library.symmMemAlloc(comm.handle, max(nbytes, itemsize))
        alloc = Allocation(self, self._seq, ptr, max(nbytes, itemsize))
        self._seq += 1
        self._allocations[alloc.seq] = alloc
        ka = alloc.new_keepalive()
        storage = _dlpack.byte_storage(ptr, alloc.nbytes, comm.device_index, ka)
        del ka  # from now on only tensors keep it alive
        t = _dlpack.tensor_on(storage, dtype, size)
        alloc.tensors.add(t)
        _note_in_scopes(t, comm)
        return t

    # -- reclaiming ---------------------------------------------------------
    def referenced(self) -> list[str]:
        """Descriptions of the allocations (and signal-pad views) still
        referenced on this rank."""
        live = [a.describe() for a in self._allocations.values() if a.referenced()]
        if self._pad_keepalive is not None and self._pad_keepalive() is not None:
            live.append("signal-pad views")
        return live

    def collect(self) -> int:
        """Collective: free the allocations no rank references; returns how
        many. Every rank holds the same list of allocations (they are made
        and freed collectively), so one all-reduce (min) of "unreferenced
        here" flags tells each rank the same answer."""
        if not self._allocations:
            return 0
        torch = require_torch("symmetric tensors")
        self._check_not_capturing("freeing symmetric memory")
        comm = self.comm
        allocs = list(self._allocations.values())
        flags = torch.tensor([0 if a.referenced() else 1 for a in allocs], dtype=torch.int32, device=comm.device)
        comm.all_reduce(flags, op=ReduceOp.Min)
        agreed = flags.tolist()  # waits for the all-reduce (current stream)
        freed = 0
        for alloc, unreferenced_everywhere in zip(allocs, agreed):
            if unreferenced_everywhere:
                comm.library.symmMemFree(comm.handle, alloc.ptr)
                alloc.freed = True
                del self._allocations[alloc.seq]
                freed += 1
        return freed

    def invalidate(self) -> None:
        """The communicator is going away: empty every tensor handed out and
        forget the allocations (symmCommDestroy/Abort free the memory)."""
        for alloc in list(self._allocations.values()):
            for t in list(alloc.tensors):
                detach(t)
            alloc.freed = True
        for t in list(self._pad_tensors):
            detach(t)
        self._allocations.clear()
        with _REGISTRIES_LOCK:
            _REGISTRIES.discard(self)

    def _check_not_capturing(self, what: str) -> None:
        torch = require_torch("symmetric tensors")
        if torch.cuda.is_current_stream_capturing():
            raise invalid(f"{what} is a collective host call and cannot happen during CUDA graph capture")

    # -- lookups --------------------------------------------------------------
    def pad_keepalive(self) -> _KeepAlive:
        ka = self._pad_keepalive() if self._pad_keepalive is not None else None
        if ka is None:
            ka = _KeepAlive(None)
            self._pad_keepalive = weakref.ref(ka)
        return ka

    def track_pad_tensor(self, t) -> None:
        self._pad_tensors.add(t)

    def find(self, ptr: int, nbytes: int = 1, local_only: bool = False) -> Allocation | None:
        for alloc in self._allocations.values():
            if local_only:
                if alloc.ptr <= ptr and ptr + nbytes <= alloc.ptr + alloc.nbytes:
                    return alloc
            elif alloc.contains(ptr, nbytes) is not None:
                return alloc
        return None

    def pad_ranges(self) -> list[tuple[int, int]]:
        """(address, bytes) of every rank's user signal area, as mapped here."""
        if self._pads is None:
            comm = self.comm
            self._pads = [comm.library.symmCommGetSignalPad(comm.handle, r) for r in range(comm.world_size)]
        return self._pads

    def owns_pad_address(self, ptr: int) -> bool:
        return any(base <= ptr < base + size for base, size in self.pad_ranges())


def registries() -> list[Registry]:
    with _REGISTRIES_LOCK:
        return [r for r in _REGISTRIES if not r.comm.destroyed]


def detach(t) -> None:
    """Point ``t`` at fresh empty storage (best effort)."""
    torch = require_torch("symmetric tensors")
    try:
        ctx = torch.inference_mode() if t.is_inference() else torch.no_grad()
        with ctx:
            t.set_()
    except RuntimeError:
        pass


# -- scopes -------------------------------------------------------------------
_SCOPES = threading.local()


def _note_in_scopes(t, comm) -> None:
    stack = getattr(_SCOPES, "stack", None)
    if stack:
        stack[-1].append((weakref.ref(t), comm))


def push_scope() -> list:
    stack = getattr(_SCOPES, "stack", None)
    if stack is None:
        stack = _SCOPES.stack = []
    entries: list = []
    stack.append(entries)
    return entries


def pop_scope(entries: list) -> None:
    stack = getattr(_SCOPES, "stack", [])
    if stack and stack[-1] is entries:
        stack.pop()
    else:
        # By identity: `in`/remove compare lists by value, and two empty
        # scopes are equal, so they could drop another (outer) scope.
        for i, e in enumerate(stack):
            if e is entries:
                del stack[i]
                break
