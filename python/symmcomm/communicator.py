"""Communicator: a symmcomm communicator driven from Python, with
collectives on torch tensors.

Everything is enqueued on a CUDA stream (``stream=`` is a torch.cuda.Stream,
a raw cudaStream_t, or None for torch's current stream) and returns at once;
nothing synchronises the host, so every collective can be captured in a
CUDA graph. Errors raise SymmError subclasses carrying the result code and
the library's message.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterable, NamedTuple

from . import _fused, _library, _memory
from ._args import (
    _device_index,
    _experts_per_rank,
    _int_arg,
    _major_align,
    _row_elems,
    _size_arg,
    _unique_id_bytes,
)
from ._torch import (
    check_tensor,
    current_device,
    invalid,
    movement_type,
    optional_torch,
    reduction_type,
    require_torch,
    stream_handle,
)
from ._premul import premul_op
from ._types import SPLIT_NOCOLOR, PreMulSum, ReduceOp, Result, reduce_op_for
from .errors import SymmInvalidUsageError, error_for

__all__ = [
    "Communicator",
    "P2POp",
    "get_communicator",
    "get_unique_id",
    "group",
    "group_start",
    "group_end",
    "set_communicator",
]


def get_unique_id(library: _library.SymmLibrary | None = None) -> bytes:
    """A new 128-byte unique id (symmGetUniqueId). This process then hosts
    the rendezvous root until the group forms or SYMM_BOOTSTRAP_TIMEOUT
    passes; hand the bytes to every rank (``uid.hex()`` travels as text)."""
    return (library or _library.library()).symmGetUniqueId()


class P2POp(NamedTuple):
    """One send or receive of a batch (see Communicator.batch_isend_irecv).
    ``op`` is "send"/"recv" (or isend/irecv/send/recv functions, matched by
    name); ``peer`` is a rank of the communicator."""

    op: object
    tensor: object
    peer: int


_GROUP_DEPTH = threading.local()


def group_start(library: _library.SymmLibrary | None = None) -> None:
    """symmGroupStart: queue this thread's collective host calls and sends/
    receives until the matching group_end (nestable, as NCCL's)."""
    (library or _library.library()).symmGroupStart()
    _GROUP_DEPTH.n = getattr(_GROUP_DEPTH, "n", 0) + 1


def group_end(library: _library.SymmLibrary | None = None) -> None:
    """symmGroupEnd: run what the outermost group queued."""
    _GROUP_DEPTH.n = max(getattr(_GROUP_DEPTH, "n", 0) - 1, 0)
    (library or _library.library()).symmGroupEnd()


@contextlib.contextmanager
def group(library: _library.SymmLibrary | None = None):
    """``with symmcomm.group(): ...`` = group_start() ... group_end(). The
    group is ended also when the body raises (the body's error wins)."""
    group_start(library)
    try:
        yield
    except BaseException:
        try:
            group_end(library)
        except Exception:
            pass
        raise
    group_end(library)


def in_group() -> bool:
    return getattr(_GROUP_DEPTH, "n", 0) > 0


class Communicator:
    """A symmcomm communicator for this process's rank.

    Make one from a torch.distributed process group (any backend; the
    unique id travels over the group, or through ``store`` when given)::

        comm = Communicator(group)            # or Communicator() for WORLD

    or from an id every rank received by its own means::

        comm = Communicator.from_unique_id(uid, rank, world_size, device=0)

    The device is, in order: ``device=``, the group's bound device
    (``init_process_group(device_id=...)``), torch's current device.
    Destroy it explicitly (``destroy()``/``abort()``, or use it as a context
    manager) as with NCCL; a communicator is never destroyed by the garbage
    collector.
    """

    _group_counters: dict = {}
    _counter_lock = threading.Lock()

    def __init__(self, group=None, device=None, *, store=None, library: _library.SymmLibrary | None = None):
        torch = require_torch("Communicator(group)")
        dist = torch.distributed
        if not dist.is_available() or not dist.is_initialized():
            raise invalid(
                "torch.distributed is not initialized: call init_process_group() first, "
                "or use Communicator.from_unique_id(uid, rank, world_size)"
            )
        group = dist.group.WORLD if group is None else group
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise invalid("this process is not a member of the group")
        index = _device_index(device)
        if index is None:
            bound = getattr(group, "bound_device_id", None)
            index = bound.index if bound is not None and bound.index is not None else torch.cuda.current_device()
        lib = library or _library.library()
        with current_device(index):
            uid = lib.symmGetUniqueId() if rank == 0 else None
            uid = self._exchange_unique_id(uid, group, rank, store)
        self._init(lib, world, uid, rank, index)
        self.group = group
        # The group's first communicator is also the one its symmetric
        # tensors use (symmetric_memory.empty(..., group=group)).
        _register_default(group, self)

    @classmethod
    def from_group(cls, group=None, device=None, *, store=None, library=None) -> "Communicator":
        """Same as ``Communicator(group, device, store=...)``."""
        return cls(group, device, store=store, library=library)

    @classmethod
    def from_unique_id(cls, unique_id, rank: int, world_size: int, device=None, *,
                       library: _library.SymmLibrary | None = None) -> "Communicator":
        """Join the group of ``unique_id`` (from get_unique_id on one process,
        bytes or its hex) as ``rank`` of ``world_size`` (symmCommInitRank).
        Collective: every rank calls it."""
        uid = _unique_id_bytes(unique_id)
        rank, world_size = _int_arg(rank, "rank"), _int_arg(world_size, "world_size")
        index = _device_index(device)
        if index is None:
            torch = optional_torch()
            index = torch.cuda.current_device() if torch is not None else None
        self = cls.__new__(cls)
        self._init(library or _library.library(), world_size, uid, rank, index)
        self.group = None
        return self

    @classmethod
    def _from_handle(cls, lib, handle: int, group=None) -> "Communicator":
        self = cls.__new__(cls)
        self._adopt(lib, handle)
        self.group = group
        return self

    def _init(self, lib, nranks: int, uid: bytes, rank: int, index: int | None) -> None:
        if index is None:
            handle = lib.symmCommInitRank(nranks, uid, rank)
        else:
            with current_device(index):
                handle = lib.symmCommInitRank(nranks, uid, rank)
        self._adopt(lib, handle)

    def _adopt(self, lib, handle: int) -> None:
        self._lib = lib
        self._handle = handle
        self._aborted = False
        try:
            self.rank = lib.symmCommUserRank(handle)
            self.world_size = lib.symmCommCount(handle)
            self.device_index = lib.symmCommCuDevice(handle)
        except BaseException:
            lib.symmCommDestroy(handle)
            raise
        self._memory = _memory.Registry(self)

    @staticmethod
    def _exchange_unique_id(uid, group, rank: int, store) -> bytes:
        torch = require_torch("Communicator(group)")
        dist = torch.distributed
        if store is not None:
            with Communicator._counter_lock:
                key_base = f"symmcomm/unique_id/{getattr(group, 'group_name', id(group))}"
                n = Communicator._group_counters.get(key_base, 0)
                Communicator._group_counters[key_base] = n + 1
            key = f"{key_base}/{n}"
            if rank == 0:
                store.set(key, uid)
                return uid
            got = store.get(key)
            return bytes(got)
        objs = [uid]
        dist.broadcast_object_list(objs, src=dist.get_global_rank(group, 0), group=group)
        return _unique_id_bytes(objs[0])

    # ------------------------------------------------------------ state ---
    @property
    def handle(self) -> int:
        """The symmComm_t (an int); SymmInvalidUsageError once destroyed."""
        if self._handle is None:
            raise SymmInvalidUsageError(int(Result.InvalidUsage), "the communicator was destroyed or aborted")
        return self._handle

    @property
    def library(self) -> _library.SymmLibrary:
        return self._lib

    @property
    def device(self):
        """torch.device('cuda', index) (the int index without torch)."""
        torch = optional_torch()
        return torch.device("cuda", self.device_index) if torch is not None else self.device_index

    @property
    def destroyed(self) -> bool:
        return self._handle is None

    def __repr__(self) -> str:
        state = "destroyed" if self._handle is None else f"handle={self._handle:#x}"
        return (f"<symmcomm.Communicator rank {getattr(self, 'rank', '?')}/{getattr(self, 'world_size', '?')} "
                f"on cuda:{getattr(self, 'device_index', '?')} {state}>")

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._handle is not None:
            if exc_type is None:
                self.destroy()
            else:
                self.abort()

    def split(self, color: int | None, key: int | None = None) -> "Communicator | None":
        """symmCommSplit: a new communicator of the ranks that pass the same
        ``color``, ordered by ``key`` (default: this rank) then by rank.
        ``color=None`` (or SPLIT_NOCOLOR) takes no part and returns None.
        Collective over this communicator."""
        color = SPLIT_NOCOLOR if color is None else _int_arg(color, "color")
        if color < 0 and color != SPLIT_NOCOLOR:
            raise invalid(f"color {color} is negative; use a color >= 0 or None (no color)")
        key = self.rank if key is None else _int_arg(key, "key")
        handle = self._lib.symmCommSplit(self.handle, color, key)
        return None if handle is None else Communicator._from_handle(self._lib, handle)

    def destroy(self, force: bool = False) -> None:
        """symmCommDestroy (local; waits for this device's work, then frees
        everything, symmetric memory included). Refuses while symmetric
        tensors, views or handles of this communicator are still referenced
        here, since their memory would go with it; ``force=True`` destroys
        anyway and empties the tensors it handed out (views of them must not
        be used afterwards)."""
        if self._handle is None:
            return
        if not force:
            live = self._memory.referenced()
            if live:
                raise SymmInvalidUsageError(
                    int(Result.InvalidUsage),
                    f"{len(live)} symmetric allocation(s) of this communicator are still referenced "
                    f"({', '.join(live[:4])}{', ...' if len(live) > 4 else ''}): drop those tensors, views "
                    "and handles (del) before destroy(), or pass force=True",
                )
        self._memory.invalidate()
        handle, self._handle = self._handle, None
        self._lib.symmCommDestroy(handle)

    def abort(self) -> None:
        """symmCommAbort: unblock anything waiting on this communicator, then
        release it. Always goes ahead; symmetric tensors handed out are
        emptied, and views of them must not be used afterwards."""
        if self._handle is None:
            return
        self._aborted = True
        self._memory.invalidate()
        handle, self._handle = self._handle, None
        self._lib.symmCommAbort(handle)

    def get_async_error(self) -> Result:
        """The asynchronous error (device timeout, abort, mismatch) or
        Result.Success; never raises for the error itself."""
        return Result(self._lib.symmCommGetAsyncError(self.handle))

    def check_async_error(self) -> None:
        """Raise the asynchronous error, if any, with the library's message
        (e.g. SymmTimeoutError naming the rank, operation and peer)."""
        code = self._lib.symmCommGetAsyncError(self.handle)
        if code != 0:
            raise error_for(code, self._lib.symmGetLastError(self.handle), "symmCommGetAsyncError")

    def synchronize(self, stream=None, timeout: float | None = None, poll_interval: float = 1e-3) -> None:
        """Wait for ``stream``'s work while polling the asynchronous error:
        returns when the work is done, raises the error as soon as there is
        one (a device wait that gave up, an abort), or SymmTimeoutError after
        ``timeout`` seconds."""
        torch = require_torch("synchronize")
        s = self._torch_stream(stream)
        event = torch.cuda.Event()
        event.record(s)
        start = time.monotonic()
        while not event.query():
            self.check_async_error()
            if timeout is not None and time.monotonic() - start > timeout:
                raise error_for(int(Result.Timeout), f"the stream's work did not finish within {timeout} s",
                                "synchronize")
            time.sleep(poll_interval)
        self.check_async_error()

    def set_copy_engine(self, enable: bool) -> None:
        """symmCommSetCopyEngine: all-gather and reduce-scatter on the copy
        engines (set it the same on every rank)."""
        self._lib.symmCommSetCopyEngine(self.handle, enable)

    # ---------------------------------------------------------- helpers ---
    def _stream(self, stream) -> int | None:
        return stream_handle(stream, self.device_index)

    def _torch_stream(self, stream):
        torch = require_torch("streams")
        if stream is None:
            return torch.cuda.current_stream(self.device_index)
        if isinstance(stream, int):
            return torch.cuda.ExternalStream(stream, device=self.device)
        return stream

    def _tensor(self, t, name: str):
        return check_tensor(t, name, self.device_index)

    def _peer(self, peer, name: str) -> int:
        peer = _int_arg(peer, name)
        if not 0 <= peer < self.world_size:
            raise invalid(f"{name} {peer} is out of range for {self.world_size} ranks")
        return peer

    # ------------------------------------------------------ collectives ---
    def all_reduce(self, tensor, op=ReduceOp.SUM, *, out=None, stream=None):
        """out = op over ranks of ``tensor`` (in place when ``out`` is None).
        Every op of symmRedOp_t; bool as logical or/and, complex sum/avg;
        ``symmcomm.premul_sum(factor)`` or torch's
        ``_make_nccl_premul_sum(factor)``: the sum of each rank's input times
        its own factor. Returns the output tensor."""
        self._tensor(tensor, "tensor")
        out = tensor if out is None else self._same_as(out, tensor, "out")
        rop = reduce_op_for(op)
        if type(rop) is PreMulSum:
            with premul_op(self, rop, tensor.dtype) as (dt, factor, number):
                self._lib.symmAllReduce(tensor.data_ptr(), out.data_ptr(), tensor.numel() * factor, dt, number,
                                        self.handle, self._stream(stream))
            return out
        dt, factor, rop = reduction_type(tensor.dtype, rop)
        # The raw ctypes function and the result check inline: the most
        # frequent call of a training step skips the wrapper's two frames.
        handle = self.handle
        rc = self._lib.fn("symmAllReduce")(tensor.data_ptr(), out.data_ptr(), tensor.numel() * factor, dt, rop,
                                           handle, self._stream(stream))
        if rc:
            self._lib.check("symmAllReduce", rc, handle)
        return out

    def all_reduce_add_rms_norm(self, input, residual, weight, eps: float = 1e-6, *, out=None, residual_out=None,
                                out_dtype=None, scale=None, stream=None):
        """The end of a tensor-parallel layer at inference, in one call
        (symmAllReduceAddRMSNorm; what vLLM's fused_add_rms_norm does after
        its all-reduce, and FlashInfer's allreduce fusion):
        ``residual_out = all_reduce(input) + residual`` and
        ``out = rms_norm(residual_out) * weight`` over the last dimension
        (``hidden``; ``weight`` has ``hidden`` elements), fp32 arithmetic,
        bfloat16, float16 or float32. By default in place as vLLM does it:
        ``out`` is ``input`` and ``residual_out`` is ``residual``. Returns
        ``(out, residual_out)``. ``residual`` is expected to be the same on
        every rank, as tensor parallelism keeps it (the forms where a rank
        owns rows, the two-shot LL form and, above the LL forms, the form by
        stores, add the owning rank's).

        ``out_dtype=torch.float8_e4m3fn`` (symmAllReduceAddRMSNormFp8): ``out``
        in fp8 e4m3 (a new tensor unless given), divided by ``scale`` (a
        float32 tensor of one element: a static per-tensor scale) or, without
        ``scale``, by a per-token scale the call computes (the row's largest
        |y| / 448); returns ``(out, residual_out, scales)`` (``scales``:
        ``scale``, or float32 of one per token, as ``torch._scaled_mm``'s
        row-wise scales). ``input`` is the call's workspace then: its
        contents afterwards are unspecified."""
        torch = require_torch("all_reduce_add_rms_norm")
        for t, name in ((input, "input"), (residual, "residual"), (weight, "weight")):
            self._tensor(t, name)
        fp8 = out_dtype is not None
        if fp8 and out_dtype != torch.float8_e4m3fn:
            raise invalid(f"out_dtype {out_dtype}: the fused norm writes torch.float8_e4m3fn (or the input's dtype)")
        if not fp8 and scale is not None:
            raise invalid("scale goes with out_dtype=torch.float8_e4m3fn")
        if fp8:
            out = torch.empty(input.shape, dtype=out_dtype, device=input.device) if out is None else out
            self._tensor(out, "out")
            if out.dtype != out_dtype or out.numel() != input.numel():
                raise invalid(f"out ({out.dtype}, {out.numel()} elements) must be {out_dtype} with {input.numel()}")
        else:
            out = input if out is None else self._same_as(out, input, "out")
        residual_out = residual if residual_out is None else self._same_as(residual_out, residual, "residual_out")
        self._same_as(residual, input, "residual")
        hidden = input.shape[-1] if input.dim() > 0 else 1
        if weight.numel() != hidden:
            raise invalid(f"weight has {weight.numel()} elements; the rows of input have {hidden}")
        if weight.dtype != input.dtype:
            raise invalid(f"weight is {weight.dtype} and input {input.dtype}; they must match")
        if str(input.dtype) not in ("torch.bfloat16", "torch.float16", "torch.float32"):
            raise invalid(f"all_reduce_add_rms_norm takes bfloat16, float16 or float32 tensors, not {input.dtype}")
        dt, _, _ = reduction_type(input.dtype, ReduceOp.SUM)
        tokens = input.numel() // max(hidden, 1)
        if not fp8:
            self._lib.symmAllReduceAddRMSNorm(input.data_ptr(), residual.data_ptr(), weight.data_ptr(),
                                              out.data_ptr(), residual_out.data_ptr(), tokens, hidden, float(eps), dt,
                                              self.handle, self._stream(stream))
            return out, residual_out
        if scale is None:
            scales = torch.empty(tokens, dtype=torch.float32, device=input.device)
        else:
            self._tensor(scale, "scale")
            if scale.dtype != torch.float32 or scale.numel() != 1:
                raise invalid(f"scale must be one float32, not {scale.dtype} with {scale.numel()} elements")
            scales = scale
        self._lib.symmAllReduceAddRMSNormFp8(input.data_ptr(), residual.data_ptr(), weight.data_ptr(), out.data_ptr(),
                                             residual_out.data_ptr(), scales.data_ptr(), scale is None, tokens,
                                             hidden, float(eps), dt, self.handle, self._stream(stream))
        return out, residual_out, scales

    def all_gather_into_tensor(self, output, input, *, stream=None):
        """``output`` (world_size x input.numel() elements, rank r's block at r)
        = every rank's ``input``. In place when ``input`` is this rank's block
        of ``output``. Any dtype."""
        self._tensor(output, "output")
        self._tensor(input, "input")
        self._same_dtype(output, input)
        if output.numel() != input.numel() * self.world_size:
            raise invalid(f"output has {output.numel()} elements; all-gather of {input.numel()} per rank "
                          f"needs {input.numel() * self.world_size}")
        dt, factor = movement_type(input.dtype)
        self._lib.symmAllGather(input.data_ptr(), output.data_ptr(), input.numel() * factor, dt,
                                self.handle, self._stream(stream))
        return output

    def reduce_scatter_tensor(self, output, input, op=ReduceOp.SUM, *, stream=None):
        """``output`` = op over ranks of block ``rank`` of ``input`` (input has
        world_size x output.numel() elements). ``op`` as all_reduce takes it."""
        self._tensor(output, "output")
        self._tensor(input, "input")
        self._same_dtype(output, input)
        if input.numel() != output.numel() * self.world_size:
            raise invalid(f"input has {input.numel()} elements; reduce-scatter to {output.numel()} per rank "
                          f"needs {output.numel() * self.world_size}")
        rop = reduce_op_for(op)
        with self._op_number(rop, input.dtype) as (dt, factor, number):
            self._lib.symmReduceScatter(input.data_ptr(), output.data_ptr(), output.numel() * factor, dt, number,
                                        self.handle, self._stream(stream))
        return output

    def broadcast(self, tensor, src: int, *, out=None, stream=None):
        """Every rank's ``tensor`` (or ``out``) = rank ``src``'s ``tensor``."""
        self._tensor(tensor, "tensor")
        src = self._peer(src, "src")
        out = tensor if out is None else self._same_as(out, tensor, "out")
        dt, factor = movement_type(tensor.dtype)
        self._lib.symmBroadcast(tensor.data_ptr(), out.data_ptr(), tensor.numel() * factor, dt, src,
                                self.handle, self._stream(stream))
        return out

    def reduce(self, tensor, dst: int, op=ReduceOp.SUM, *, out=None, stream=None):
        """Rank ``dst``'s ``tensor`` (or ``out``) = op over ranks of ``tensor``;
        other ranks' outputs are not written. ``op`` as all_reduce takes it."""
        self._tensor(tensor, "tensor")
        dst = self._peer(dst, "dst")
        out = tensor if out is None else self._same_as(out, tensor, "out")
        with self._op_number(reduce_op_for(op), tensor.dtype) as (dt, factor, number):
            self._lib.symmReduce(tensor.data_ptr(), out.data_ptr(), tensor.numel() * factor, dt, number, dst,
                                 self.handle, self._stream(stream))
        return out

    def all_to_all_vdev(self, input, out, in_splits, out_splits_offsets, *, stream=None):
        """PyTorch's ``torch.ops.symm_mem.all_to_all_vdev`` on this
        communicator (symmAllToAllvDevice): ``in_splits`` (int64, world_size,
        on the GPU) gives the rows of ``input`` (dim 0) for each rank, in rank
        order; the rows received land in ``out`` in rank order, and
        ``out_splits_offsets`` (int64, 2 x world_size) gets the rows received
        from each rank and where they start. The counts never reach the host:
        CUDA graphs replay with new counts. ``input`` must be a symmetric
        tensor (symmcomm.symmetric_memory.empty) or in a registered buffer;
        ``out``'s rows are its capacity. Returns ``out``."""
        torch = require_torch("all_to_all_vdev")
        dt, row, unit, _ = self._vdev_args(torch, input, out, in_splits, "in_splits", out_splits_offsets)
        self._lib.symmAllToAllvDevice(input.data_ptr(), in_splits.data_ptr(), out.data_ptr(), out.numel() // row,
                                      out_splits_offsets.data_ptr(), unit, dt, self.handle, self._stream(stream))
        return out

    def all_to_all_vdev_2d(self, input, out, in_splits, out_splits_offsets, *, major_align=None, stream=None):
        """PyTorch's ``torch.ops.symm_mem.all_to_all_vdev_2d`` on this
        communicator (symmAllToAllvDevice2d), the mixture-of-experts
        dispatch: with ne = ``in_splits.numel() // world_size`` local experts
        per rank, ``in_splits`` (int64, on the GPU) gives at [q*ne+e] the rows
        of ``input`` (dim 0) for expert e of rank q, back to back in that
        order. The rows received land in ``out`` expert-major (for e, for
        each rank p, the rows from p for local expert e), each expert's
        group starting at a multiple of ``major_align`` rows (None: 1) and,
        as in PyTorch, at least ``major_align`` rows long even when the
        expert receives nothing (0: packed; the padding is not written);
        ``out_splits_offsets`` (int64, 2 x ne*world_size) gets at
        [e*world_size+p] the rows received and where they start. At most 1024 splits. The counts never reach the host:
        CUDA graphs replay with new counts. ``input`` must be a symmetric
        tensor or in a registered buffer; ``out``'s rows are its capacity.
        Returns ``out``."""
        torch = require_torch("all_to_all_vdev_2d")
        align = _major_align(major_align)
        dt, row, unit, ne = self._vdev_args(torch, input, out, in_splits, "in_splits", out_splits_offsets, rows=1)
        self._lib.symmAllToAllvDevice2d(input.data_ptr(), in_splits.data_ptr(), out.data_ptr(), out.numel() // row,
                                        out_splits_offsets.data_ptr(), ne, align, unit, dt, self.handle,
                                        self._stream(stream))
        return out

    def all_to_all_vdev_2d_offset(self, input, out, in_splits_offsets, out_splits_offsets, *, stream=None):
        """PyTorch's ``torch.ops.symm_mem.all_to_all_vdev_2d_offset`` on this
        communicator (symmAllToAllvDevice2dOffset), the combine that undoes
        all_to_all_vdev_2d: ``in_splits_offsets`` (int64, 2 x ne*world_size,
        on the GPU; ne = its columns // world_size) gives at [e*world_size+p]
        the rows this rank's local expert e sends back to rank p (row 0) and
        where they start in ``input`` (row 1; padding between blocks is
        fine: pass the dispatch's out_splits_offsets). Each rank receives
        rank-major, packed: for each rank q, for e, the rows from q's expert
        e; ``out_splits_offsets`` (int64, 2 x world_size*ne) gets at [q*ne+e]
        the rows received and where they start, as PyTorch's. ``input`` must
        be a symmetric tensor or in a registered buffer. Returns ``out``."""
        torch = require_torch("all_to_all_vdev_2d_offset")
        dt, row, unit, ne = self._vdev_args(torch, input, out, in_splits_offsets, "in_splits_offsets",
                                            out_splits_offsets, rows=2)
        self._lib.symmAllToAllvDevice2dOffset(input.data_ptr(), in_splits_offsets.data_ptr(), out.data_ptr(),
                                              out.numel() // row, out_splits_offsets.data_ptr(), ne, unit, dt,
                                              self.handle, self._stream(stream))
        return out

    def _vdev_args(self, torch, input, out, splits, name: str, out_splits_offsets, rows: int = 0):
        """The checks every device-count all-to-all shares: (library
        datatype, tensor elements per row, library elements per row, local
        experts). ``rows``: 0 for the 1-D form (world_size counts), else the
        2-D forms' rows of ``splits`` (1: counts; 2: counts and offsets),
        whose columns give the local experts."""
        self._tensor(input, "input")
        self._tensor(out, "out")
        self._tensor(splits, name)
        self._tensor(out_splits_offsets, "out_splits_offsets")
        if out.dtype != input.dtype or out.shape[1:] != input.shape[1:]:
            raise invalid(f"out ({out.dtype}, rows of {tuple(out.shape[1:])}) must match input "
                          f"({input.dtype}, rows of {tuple(input.shape[1:])})")
        W = self.world_size
        if rows == 0:
            if splits.dtype != torch.int64 or splits.numel() != W:
                raise invalid(f"{name} must be int64 with {W} elements, not {splits.dtype} with {splits.numel()}")
            ne = 1
        else:
            if splits.dtype != torch.int64:
                raise invalid(f"{name} must be int64, not {splits.dtype}")
            if rows == 2 and (splits.dim() != 2 or splits.shape[0] != 2):
                raise invalid(f"{name} must have shape (2, local_experts x world_size), not {tuple(splits.shape)}")
            ne = _experts_per_rank(splits.numel() // rows, W, name)
        nsplits = ne * W
        if out_splits_offsets.dtype != torch.int64 or out_splits_offsets.numel() != 2 * nsplits:
            raise invalid(f"out_splits_offsets must be int64 with 2 x {nsplits} elements, not "
                          f"{out_splits_offsets.dtype} with {out_splits_offsets.numel()}")
        if not (splits.is_contiguous() and out_splits_offsets.is_contiguous()):
            raise invalid(f"{name} and out_splits_offsets must be contiguous")
        dt, factor = movement_type(input.dtype)
        row = _row_elems(input)
        return dt, row, row * factor, ne

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, *, stream=None):
        """All-to-all along dim 0, as torch.distributed's: without split sizes
        block r of ``output`` = block ``rank`` of rank r's ``input`` (equal
        blocks); with them, ``input_split_sizes[r]`` rows of ``input`` go to
        rank r and ``output_split_sizes[r]`` rows come from it, in rank order
        (symmAllToAllv; a size left out means equal splits). Any dtype."""
        self._tensor(output, "output")
        self._tensor(input, "input")
        self._same_dtype(output, input)
        dt, factor = movement_type(input.dtype)
        if output_split_sizes is None and input_split_sizes is None:
            if output.numel() != input.numel():
                raise invalid(f"output has {output.numel()} elements and input {input.numel()}; they must be equal")
            if input.numel() % self.world_size:
                raise invalid(f"input has {input.numel()} elements, not a multiple of {self.world_size} ranks")
            self._lib.symmAllToAll(input.data_ptr(), output.data_ptr(), input.numel() // self.world_size * factor,
                                   dt, self.handle, self._stream(stream))
            return output
        send_counts, send_displs = self._splits(input, input_split_sizes, "input_split_sizes", factor)
        recv_counts, recv_displs = self._splits(output, output_split_sizes, "output_split_sizes", factor)
        self._lib.symmAllToAllv(input.data_ptr(), send_counts, send_displs, output.data_ptr(), recv_counts,
                                recv_displs, dt, self.handle, self._stream(stream))
        return output

    def _splits(self, t, splits, name: str, factor: int):
        """Element counts and displacements per rank of ``t`` split along dim 0
        by ``splits`` (rows; None: equal)."""
        rows = t.shape[0] if t.dim() else 1
        row = t.numel() // rows if rows else 0
        if splits is None:
            if rows % self.world_size:
                raise invalid(f"{name} is None but dim 0 of the tensor ({rows}) is not a multiple of "
                              f"{self.world_size} ranks")
            splits = [rows // self.world_size] * self.world_size
        splits = [_int_arg(v, name) for v in splits]
        if len(splits) != self.world_size:
            raise invalid(f"{name} has {len(splits)} entries; it needs one per rank ({self.world_size})")
        if any(v < 0 for v in splits):
            raise invalid(f"{name}={splits}: split sizes cannot be negative")
        if sum(splits) != rows:
            raise invalid(f"{name}={splits} sums to {sum(splits)} rows; the tensor has {rows}")
        counts, displs, at = [], [], 0
        for v in splits:
            counts.append(v * row * factor)
            displs.append(at)
            at += v * row * factor
        return counts, displs

    def send(self, tensor, dst: int, *, stream=None) -> None:
        """Send ``tensor`` to rank ``dst`` (matched in order with its recv;
        the receiver passes a tensor of the same size)."""
        self._tensor(tensor, "tensor")
        dst = self._peer(dst, "dst")
        dt, factor = movement_type(tensor.dtype)
        self._lib.symmSend(tensor.data_ptr(), tensor.numel() * factor, dt, dst, self.handle, self._stream(stream))

    def recv(self, tensor, src: int, *, stream=None):
        """Receive into ``tensor`` from rank ``src``. Returns ``tensor``."""
        self._tensor(tensor, "tensor")
        src = self._peer(src, "src")
        dt, factor = movement_type(tensor.dtype)
        self._lib.symmRecv(tensor.data_ptr(), tensor.numel() * factor, dt, src, self.handle, self._stream(stream))
        return tensor

    def batch_isend_irecv(self, p2p_ops: Iterable, *, stream=None) -> None:
        """Sends and receives launched together (one symmGroupStart/End), so
        exchanges in both directions and rings progress at once. Each item is
        a P2POp(op, tensor, peer) or a torch.distributed.P2POp (its peer, a
        global rank, is translated through this communicator's group)."""
        ops = []
        for item in p2p_ops:
            op, tensor, peer = item.op, item.tensor, item.peer
            kind = op if isinstance(op, str) else getattr(op, "__name__", str(op))
            kind = kind.lower().lstrip("i")
            if kind not in ("send", "recv"):
                raise invalid(f"P2P op {op!r} is neither send nor recv")
            if getattr(item, "group_peer", None) is not None:  # torch.distributed.P2POp, newer torch
                peer = item.group_peer
            elif type(item).__module__.startswith("torch."):  # its peer is a global rank
                peer = self._group_rank(peer)
            ops.append((kind, tensor, peer))
        with group(self._lib):
            for kind, tensor, peer in ops:
                if kind == "send":
                    self.send(tensor, peer, stream=stream)
                else:
                    self.recv(tensor, peer, stream=stream)

    def _group_rank(self, global_rank: int) -> int:
        if self.group is None:
            return global_rank
        dist = require_torch("torch.distributed.P2POp").distributed
        return dist.get_group_rank(self.group, global_rank)

    def group_start(self) -> None:
        """symmGroupStart (pynccl's spelling; see symmcomm.group())."""
        group_start(self._lib)

    def group_end(self) -> None:
        group_end(self._lib)

    def barrier(self, *, stream=None) -> None:
        """symmBarrier: a device-side barrier of all ranks on ``stream``."""
        self._lib.symmBarrier(self.handle, self._stream(stream))

    # ------------------------------------------------------------ memory ---
    def empty(self, *size, dtype=None, device=None):
        """A symmetric tensor of this communicator (see
        symmcomm.symmetric_memory.empty). Collective."""
        return self._memory.empty(_size_arg(size), dtype, device)

    def collect(self) -> int:
        """Collective: free every symmetric allocation of this communicator
        that no rank references any more. Returns how many were freed."""
        return self._memory.collect()

    # -------------------------------------------------------- fused ops ---
    def all_gather_matmul(self, a_shard, b=None, **kwargs):
        """See symmcomm.all_gather_matmul."""
        return _fused.all_gather_matmul(self, a_shard, b, **kwargs)

    def matmul_reduce_scatter(self, a, b=None, **kwargs):
        """See symmcomm.matmul_reduce_scatter."""
        return _fused.matmul_reduce_scatter(self, a, b, **kwargs)

    # ---------------------------------------------------------- checks ---
    @contextlib.contextmanager
    def _op_number(self, op, dtype):
        """(element type, elements per torch element, op number) to reduce
        ``dtype`` with ``op`` (a ReduceOp or a PreMulSum, made for this call)."""
        if type(op) is PreMulSum:
            with premul_op(self, op, dtype) as found:
                yield found
        else:
            yield reduction_type(dtype, op)

    def _same_dtype(self, a, b) -> None:
        if a.dtype != b.dtype:
            raise invalid(f"output is {a.dtype} and input {b.dtype}; they must match")

    def _same_as(self, out, like, name: str):
        self._tensor(out, name)
        if out.dtype != like.dtype or out.numel() != like.numel():
            raise invalid(f"{name} ({out.dtype}, {out.numel()} elements) must match the input "
                          f"({like.dtype}, {like.numel()} elements)")
        return out


# ------------------------------------------------------------- groups ---
# The communicator each process group's symmetric tensors and PyTorch-named
# functions use (symmcomm.symmetric_memory, symmcomm.fused): the first one
# made for the group, one made on first use, or the one set_communicator()
# names.
_COMMS: dict = {}  # group name (or a Communicator's id) -> Communicator
_COMMS_LOCK = threading.Lock()


def _group_key(group) -> str:
    name = getattr(group, "group_name", None)
    return name if isinstance(name, str) else f"pg-{id(group)}"


def _world_group():
    torch = require_torch("process groups")
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.group.WORLD


def get_communicator(group=None, create: bool = True) -> "Communicator":
    """The communicator symmetric tensors of ``group`` live on: a
    Communicator (itself), a process group or its name (the communicator
    made for it, created on first use: collective), or None (the default
    process group, or the communicator given to set_communicator(None, ...))."""
    if isinstance(group, Communicator):
        return group
    with _COMMS_LOCK:
        if group is None and None in _COMMS and not _COMMS[None].destroyed:
            return _COMMS[None]
    if group is None:
        group = _world_group()
        if group is None:
            raise invalid("no communicator: pass group= (a Communicator or a process group), "
                          "call set_communicator(None, comm), or initialise torch.distributed")
    if isinstance(group, str):
        key = group
        with _COMMS_LOCK:
            comm = _COMMS.get(key)
        if comm is not None and not comm.destroyed:
            return comm
        dist = require_torch("group names").distributed
        try:
            group = dist.distributed_c10d._resolve_process_group(key)
        except Exception as e:
            raise invalid(f"no process group named {key!r}: {e}") from None
    key = _group_key(group)
    with _COMMS_LOCK:
        comm = _COMMS.get(key)
    if comm is not None and not comm.destroyed:
        return comm
    if not create:
        raise invalid(f"symmetric memory is not enabled for group {key!r}")
    comm = Communicator(group)
    with _COMMS_LOCK:
        _COMMS[key] = comm
    return comm


def set_communicator(group, comm: Communicator) -> None:
    """Use ``comm`` for ``group`` (a process group, its name, or None for
    the default) instead of creating one."""
    if not isinstance(comm, Communicator):
        raise invalid(f"comm must be a symmcomm.Communicator, not {type(comm).__name__}")
    key = None if group is None else (group if isinstance(group, str) else _group_key(group))
    with _COMMS_LOCK:
        _COMMS[key] = comm


def _register_default(group, comm: Communicator) -> None:
    key = _group_key(group)
    with _COMMS_LOCK:
        current = _COMMS.get(key)
        if current is None or current.destroyed:
            _COMMS[key] = comm
