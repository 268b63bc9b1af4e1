"""Fused communication and matmul (symmAllGatherMatmul,
symmMatmulReduceScatter) on torch tensors, returning tensors.

Shapes follow ``torch.matmul``: ``b`` is logically ``k x n``. A weight kept
as ``n x k`` (``nn.Linear.weight``) is passed as ``weight=w`` (the same as
``b=w.t()``, which is how ``torch._scaled_mm`` wants it): the layout of ``b`` (row-major ``k x n``, or
column-major, i.e. an ``n x k`` row-major buffer) picks the C call's
``transB``, so no copy is made. fp8 inputs (float8_e4m3fn/e5m2) take float32
scales as ``torch._scaled_mm`` does: one element each (per tensor), or one
per row of A and one per column of the output (row-wise), and produce
bf16 (default) or fp16.
"""

from __future__ import annotations

from . import _fused
from ._torch import check_tensor, invalid, require_torch
from ._types import ReduceOp, reduce_op_for
from .communicator import get_communicator

__all__ = ["all_gather_matmul", "matmul_reduce_scatter", "fused_all_gather_matmul", "fused_matmul_reduce_scatter"]


def all_gather_matmul(a_shard, b=None, *, comm=None, group=None, **options):
    """``all_gather(a_shard) @ b``, pipelined: each rank's ``a_shard``
    (``m_shard x k``, row-major) is gathered along rows while the matmul
    runs chunk by chunk (symmAllGatherMatmul), on ``comm`` (a Communicator)
    or the communicator of ``group`` (a process group, its name, or None
    for the default). ``b`` is ``k x n``; an ``n x k`` weight goes as
    ``weight=w`` (or ``b=w.t()``). Returns the ``(world_size * m_shard) x
    n`` output (``out=`` to supply it; with ``beta`` it accumulates ``beta
    * out``), or ``(output, gathered A)`` when ``return_gathered`` (or
    ``gathered_out=``) asks for the gathered A. fp8: see the module
    docstring; row-wise ``a_scale`` is per row of the shard (gathered along
    with it) or of the gathered A. The other options: ``out_dtype``,
    ``chunks_per_rank`` (0: the library's choice), ``stream``. Collective."""
    require_torch("fused ops")
    return _fused.all_gather_matmul(get_communicator(group if comm is None else comm), a_shard, b, **options)


def matmul_reduce_scatter(a, b=None, *, comm=None, group=None, **options):
    """``reduce_scatter(a @ b)`` over rows, summed, on ``comm`` or the
    communicator of ``group`` (as all_gather_matmul takes them): ``a`` is
    ``m x k_shard`` (row-major), ``b`` is ``k_shard x n`` (an ``n x
    k_shard`` weight goes as ``weight=w`` or ``b=w.t()``); each rank gets
    rows ``[rank * m / world_size, ...)``, an ``(m / world_size) x n``
    tensor (returned; ``out=`` to supply it). fp8 scales as in the module
    docstring (row-wise ``a_scale``: one per row of ``a``). The other
    options as all_gather_matmul's. Collective (symmMatmulReduceScatter)."""
    require_torch("fused ops")
    return _fused.matmul_reduce_scatter(get_communicator(group if comm is None else comm), a, b, **options)


# PyTorch's names (torch.ops.symm_mem.fused_all_gather_matmul and
# fused_matmul_reduce_scatter, as torch.distributed._symmetric_memory and
# its async-TP pass call them), with their arguments: tensors of any rank,
# the collective along any dimension. The fused C calls work on row-major
# matrices split by rows, so the collective's dimension is moved to the
# front (a copy unless it already is, as in PyTorch) and the results viewed
# back. Along the last dimension (the contraction of the all-gather, the
# output columns of the reduce-scatter) no row split exists: those run as
# the collective and a torch.matmul, unfused.


def _dim(d, ndim: int, name: str) -> int:
    if isinstance(d, bool) or not isinstance(d, int) or not -ndim <= d < ndim:
        raise invalid(f"{name} {d!r} is not a dimension of a {ndim}-D tensor")
    return d % ndim


def _tensor_and_dim(t, name: str, d, dim_name: str, comm) -> tuple[int, int]:
    """(dimensions of ``t``, dimension ``d`` of it made non-negative) for a
    tensor of at least 2 dimensions on ``comm``'s GPU."""
    check_tensor(t, name, comm.device_index, contiguous=False)
    nd = t.dim()
    if nd < 2:
        raise invalid(f"{name} must have at least 2 dimensions, not shape {tuple(t.shape)}")
    return nd, _dim(d, nd, dim_name)


def _rows_first(t, d: int):
    """``t`` with dimension ``d`` first, as a contiguous row-major matrix of
    its last dimension's columns, and the shape of that moved tensor."""
    moved = t.movedim(d, 0).contiguous()
    return moved.view(-1, moved.shape[-1]), tuple(moved.shape)


def fused_all_gather_matmul(A_shard, Bs, gather_dim: int, group_name=None, *, return_A: bool = True):
    """``torch.ops.symm_mem.fused_all_gather_matmul(A_shard, Bs, gather_dim,
    group_name, return_A=True)``: ``(A, [A @ B for B in Bs])`` with ``A``
    the all-gather of ``A_shard`` along ``gather_dim`` over the ranks of
    ``group_name`` (a process group's name, a group, a Communicator, or None
    for the default); ``A`` is None unless ``return_A``. The first B runs
    fused (symmAllGatherMatmul, which also gathers A); the other Bs multiply
    that gathered A with torch.matmul. Collective."""
    torch = require_torch("fused_all_gather_matmul")
    comm = get_communicator(group_name)
    if isinstance(Bs, torch.Tensor) or not isinstance(Bs, (list, tuple)) or not Bs:
        raise invalid("Bs is a non-empty list of k x n matrices (PyTorch's Tensor[] Bs)")
    nd, d = _tensor_and_dim(A_shard, "A_shard", gather_dim, "gather_dim", comm)
    W = comm.world_size
    if d == nd - 1:
        shard = A_shard.contiguous()
        parts = torch.empty((W,) + tuple(shard.shape), dtype=shard.dtype, device=comm.device)
        comm.all_gather_into_tensor(parts, shard)
        A = parts.movedim(0, -2).flatten(-2)  # rank-major along the last dimension
        return (A if return_A else None), [torch.matmul(A, B) for B in Bs]
    a2, moved = _rows_first(A_shard, d)
    gathered_shape = (W * moved[0],) + moved[1:]
    want_a = return_A or len(Bs) > 1
    first = _fused.all_gather_matmul(comm, a2, Bs[0], return_gathered=want_a)
    out0, gathered = first if want_a else (first, None)
    outs = [out0] + [torch.matmul(gathered, B) for B in Bs[1:]]
    outs = [o.view(gathered_shape[:-1] + (o.shape[-1],)).movedim(0, d) for o in outs]
    A = gathered.view(gathered_shape).movedim(0, d) if return_A else None
    return A, outs


def fused_matmul_reduce_scatter(A, B, reduce_op, scatter_dim: int, group_name=None):
    """``torch.ops.symm_mem.fused_matmul_reduce_scatter(A, B, reduce_op,
    scatter_dim, group_name)``: the reduce-scatter (``reduce_op`` "sum" or
    "avg") of ``A @ B`` along ``scatter_dim`` over the ranks of
    ``group_name`` (as fused_all_gather_matmul takes it); that dimension's
    size must be a multiple of the ranks. Fused (symmMatmulReduceScatter)
    unless ``scatter_dim`` is the last. Collective."""
    torch = require_torch("fused_matmul_reduce_scatter")
    comm = get_communicator(group_name)
    op = reduce_op_for(reduce_op)
    if op not in (ReduceOp.Sum, ReduceOp.Avg):
        raise invalid(f"reduce_op {reduce_op!r}: fused_matmul_reduce_scatter reduces with 'sum' or 'avg'")
    nd, d = _tensor_and_dim(A, "A", scatter_dim, "scatter_dim", comm)
    W = comm.world_size
    if d == nd - 1:
        C = torch.matmul(A, B).movedim(-1, 0).contiguous()
        if C.shape[0] % W:
            raise invalid(f"A @ B has {C.shape[0]} columns, not a multiple of {W} ranks")
        out = torch.empty((C.shape[0] // W,) + tuple(C.shape[1:]), dtype=C.dtype, device=comm.device)
        comm.reduce_scatter_tensor(out, C, op)
        return out.movedim(0, -1)
    if A.shape[d] % W:
        raise invalid(f"scatter_dim {scatter_dim} of A has size {A.shape[d]}, not a multiple of {W} ranks")
    a2, moved = _rows_first(A, d)
    out = _fused.matmul_reduce_scatter(comm, a2, B)
    if op == ReduceOp.Avg:
        out.div_(W)
    return out.view((moved[0] // W,) + moved[1:-1] + (out.shape[-1],)).movedim(0, d)
