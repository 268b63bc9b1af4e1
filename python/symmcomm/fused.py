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

import ctypes

from ._library import symmMatmulDesc_t
from ._torch import check_tensor, invalid, require_torch, stream_handle
from ._types import DataType, ReduceOp, ScaleMode, datatype_for, reduce_op_for

__all__ = ["all_gather_matmul", "matmul_reduce_scatter", "fused_all_gather_matmul", "fused_matmul_reduce_scatter"]

_FP8 = (DataType.Float8e4m3, DataType.Float8e5m2)


def _comm(comm, group):
    if comm is not None:
        return comm
    from .symmetric_memory import get_communicator

    return get_communicator(group)


def _matrix(t, name: str, comm):
    check_tensor(t, name, comm.device_index, contiguous=False)
    if t.dim() != 2:
        raise invalid(f"{name} must be a matrix (2-D), not {t.dim()}-D with shape {tuple(t.shape)}")
    return t


def _row_major_ld(t, name: str) -> int:
    """Leading dimension of a row-major matrix (0 when packed)."""
    rows, cols = t.shape
    if t.stride(1) != 1 and cols > 1:
        raise invalid(f"{name} must be row-major (stride(1) == 1); pass {name}.contiguous()")
    ld = t.stride(0)
    if rows > 1 and ld < cols:
        raise invalid(f"{name} has row stride {ld} < {cols} columns")
    return 0 if ld == cols or rows <= 1 else ld


def _b_layout(b) -> tuple[int, int]:
    """(transB, ldb) for a logical k x n ``b``: row-major k x n, or
    column-major (a row-major n x k buffer, e.g. weight.t())."""
    k, n = b.shape
    if b.stride(1) == 1 and (k <= 1 or b.stride(0) >= n):
        return 0, (0 if b.stride(0) == n or k <= 1 else b.stride(0))
    if b.stride(0) == 1 and (n <= 1 or b.stride(1) >= k):
        return 1, (0 if b.stride(1) == k or n <= 1 else b.stride(1))
    raise invalid(f"b (k x n = {k} x {n}, strides {tuple(b.stride())}) must be row-major k x n or "
                  "column-major (an n x k weight passed as weight.t()); pass b.contiguous()")


def _scales(a_scale, b_scale, a_rows: int, a_rows_gathered: int | None, n: int, fp8: bool, comm, stream):
    """(scale mode, a_scale pointer, b_scale pointer, tensors to keep alive)."""
    torch = require_torch("fused ops")
    if a_scale is None and b_scale is None:
        if fp8:
            raise invalid("fp8 inputs need a_scale and b_scale (float32 tensors, as torch._scaled_mm)")
        return ScaleMode.ScaleNone, None, None, []
    if a_scale is None or b_scale is None:
        raise invalid("pass both a_scale and b_scale, or neither")
    for name, s in (("a_scale", a_scale), ("b_scale", b_scale)):
        check_tensor(s, name, comm.device_index)
        if s.dtype != torch.float32:
            raise invalid(f"{name} is {s.dtype}; scales are torch.float32")
    if a_scale.numel() == 1 and b_scale.numel() == 1:
        return ScaleMode.ScaleTensor, a_scale.data_ptr(), b_scale.data_ptr(), []
    if b_scale.numel() != n:
        raise invalid(f"row-wise scaling needs one b_scale per output column ({n}), got {b_scale.numel()}")
    if a_rows_gathered is not None and a_scale.numel() == a_rows and a_rows != a_rows_gathered:
        # all-gather-matmul: the shard's row scales travel with the shard.
        gathered = torch.empty(a_rows_gathered, dtype=torch.float32, device=a_scale.device)
        comm.all_gather_into_tensor(gathered, a_scale.reshape(-1), stream=stream)
        return ScaleMode.ScaleRowwise, gathered.data_ptr(), b_scale.data_ptr(), [gathered]
    want = a_rows if a_rows_gathered is None else a_rows_gathered
    if a_scale.numel() != want:
        raise invalid(f"row-wise scaling needs one a_scale per row of A ({want}"
                      f"{'' if a_rows_gathered is None else f' gathered, or {a_rows} of the shard'}), "
                      f"got {a_scale.numel()}")
    return ScaleMode.ScaleRowwise, a_scale.data_ptr(), b_scale.data_ptr(), []


def _types(a, b, out, out_dtype):
    torch = require_torch("fused ops")
    a_type, b_type = datatype_for(a.dtype), datatype_for(b.dtype)
    fp8 = a_type in _FP8
    if (b_type in _FP8) != fp8:
        raise invalid(f"a is {a.dtype} and b {b.dtype}: fp8 inputs go together (e4m3 and e5m2 may mix)")
    if not fp8 and a_type != b_type:
        raise invalid(f"a is {a.dtype} and b {b.dtype}; they must match (except fp8 mixes)")
    if a_type not in (DataType.Bfloat16, DataType.Float16, DataType.Float32) + _FP8:
        raise invalid(f"the fused ops take bf16, fp16, fp32 or fp8 inputs, not {a.dtype}")
    if out is not None and out_dtype is not None and out.dtype != out_dtype:
        raise invalid(f"out is {out.dtype} but out_dtype is {out_dtype}")
    c_dtype = out.dtype if out is not None else out_dtype
    if c_dtype is None:
        c_dtype = torch.bfloat16 if fp8 else a.dtype
    c_type = datatype_for(c_dtype)
    if fp8 and c_type not in (DataType.Bfloat16, DataType.Float16):
        raise invalid(f"fp8 inputs produce bf16 or fp16, not {c_dtype}")
    if not fp8 and c_type != a_type:
        raise invalid(f"the output of {a.dtype} inputs is {a.dtype}, not {c_dtype}")
    return a_type, b_type, c_type, c_dtype, fp8


def _output(out, rows: int, n: int, c_dtype, comm, beta: float):
    torch = require_torch("fused ops")
    if out is None:
        if beta != 0:
            raise invalid("beta != 0 accumulates into out=; pass the output tensor")
        return torch.empty((rows, n), dtype=c_dtype, device=comm.device), 0
    _matrix(out, "out", comm)
    if tuple(out.shape) != (rows, n):
        raise invalid(f"out has shape {tuple(out.shape)}; expected {(rows, n)}")
    return out, _row_major_ld(out, "out")


def _desc(lib, a_type, b_type, c_type, trans_b, lda, ldb, ldc, beta, mode, a_scale, b_scale, gathered, chunks):
    desc = lib.symmMatmulDescInit(int(a_type))
    desc.structSize = ctypes.sizeof(symmMatmulDesc_t)
    desc.bType, desc.cType, desc.transB = int(b_type), int(c_type), trans_b
    desc.lda, desc.ldb, desc.ldc = lda, ldb, ldc
    desc.beta = float(beta)
    desc.scaleMode = int(mode)
    desc.aScale, desc.bScale, desc.aGathered = a_scale, b_scale, gathered
    desc.chunksPerRank = int(chunks)
    return desc


def _weight_or_b(b, weight):
    if weight is None:
        if b is None:
            raise invalid("pass b (k x n) or weight= (n x k, as nn.Linear keeps it)")
        return b
    if b is not None:
        raise invalid("pass b (k x n) or weight= (n x k), not both")
    if getattr(weight, "dim", lambda: 0)() != 2:
        raise invalid("weight must be a matrix (n x k)")
    return weight.t()


def all_gather_matmul(a_shard, b=None, *, weight=None, comm=None, group=None, out=None, out_dtype=None,
                      a_scale=None, b_scale=None, beta: float = 0.0, return_gathered: bool = False,
                      gathered_out=None, chunks_per_rank: int = 0, stream=None):
    """``all_gather(a_shard) @ b``, pipelined: each rank's ``a_shard``
    (``m_shard x k``, row-major) is gathered along rows while the matmul
    runs chunk by chunk (symmAllGatherMatmul). ``b`` is ``k x n``; an
    ``n x k`` weight goes as ``weight=w`` (or ``b=w.t()``). Returns the
    ``(world_size * m_shard) x n`` output (``out=`` to supply it; with
    ``beta`` it accumulates ``beta * out``), or ``(output, gathered A)``
    when ``return_gathered`` (or ``gathered_out=``) asks for the gathered A.
    fp8: see the module docstring; row-wise ``a_scale`` is per row of the
    shard (gathered along with it) or of the gathered A. Collective."""
    torch = require_torch("fused ops")
    comm = _comm(comm, group)
    lib = comm.library
    lib.fn("symmAllGatherMatmul")  # a clear error when the library predates the fused ops
    b = _weight_or_b(b, weight)
    _matrix(a_shard, "a_shard", comm)
    _matrix(b, "b", comm)
    m_shard, k = a_shard.shape
    if b.shape[0] != k:
        raise invalid(f"a_shard is {m_shard} x {k} but b is {b.shape[0]} x {b.shape[1]}: inner sizes differ")
    n = b.shape[1]
    rows = comm.world_size * m_shard
    a_type, b_type, c_type, c_dtype, fp8 = _types(a_shard, b, out, out_dtype)
    lda = _row_major_ld(a_shard, "a_shard")
    trans_b, ldb = _b_layout(b)
    out, ldc = _output(out, rows, n, c_dtype, comm, beta)
    sh = stream_handle(stream, comm.device_index)
    mode, a_sc, b_sc, keep = _scales(a_scale, b_scale, m_shard, rows, n, fp8, comm, stream)
    if gathered_out is not None:
        _matrix(gathered_out, "gathered_out", comm)
        if tuple(gathered_out.shape) != (rows, k) or gathered_out.dtype != a_shard.dtype \
                or not gathered_out.is_contiguous():
            raise invalid(f"gathered_out must be a contiguous {rows} x {k} {a_shard.dtype} tensor")
    elif return_gathered:
        gathered_out = torch.empty((rows, k), dtype=a_shard.dtype, device=comm.device)
    desc = _desc(lib, a_type, b_type, c_type, trans_b, lda, ldb, ldc, beta, mode, a_sc, b_sc,
                 None if gathered_out is None else gathered_out.data_ptr(), chunks_per_rank)
    lib.symmAllGatherMatmul(a_shard.data_ptr(), b.data_ptr(), out.data_ptr(), m_shard, n, k, desc, comm.handle, sh)
    _keep_until_stream_done(keep, comm, stream)
    return (out, gathered_out) if gathered_out is not None else out


def matmul_reduce_scatter(a, b=None, *, weight=None, comm=None, group=None, out=None, out_dtype=None,
                          a_scale=None, b_scale=None, beta: float = 0.0, chunks_per_rank: int = 0, stream=None):
    """``reduce_scatter(a @ b)`` over rows, summed: ``a`` is ``m x k_shard``
    (row-major), ``b`` is ``k_shard x n`` (an ``n x k_shard`` weight goes as
    ``weight=w`` or ``b=w.t()``); each rank gets rows ``[rank * m / world_size, ...)``,
    an ``(m / world_size) x n`` tensor (returned; ``out=`` to supply it).
    fp8 scales as in the module docstring (row-wise ``a_scale``: one per row
    of ``a``). Collective (symmMatmulReduceScatter)."""
    comm = _comm(comm, group)
    lib = comm.library
    lib.fn("symmMatmulReduceScatter")
    b = _weight_or_b(b, weight)
    _matrix(a, "a", comm)
    _matrix(b, "b", comm)
    m, k_shard = a.shape
    if b.shape[0] != k_shard:
        raise invalid(f"a is {m} x {k_shard} but b is {b.shape[0]} x {b.shape[1]}: inner sizes differ")
    n = b.shape[1]
    if m % comm.world_size:
        raise invalid(f"a has {m} rows, not a multiple of {comm.world_size} ranks")
    rows = m // comm.world_size
    a_type, b_type, c_type, c_dtype, fp8 = _types(a, b, out, out_dtype)
    lda = _row_major_ld(a, "a")
    trans_b, ldb = _b_layout(b)
    out, ldc = _output(out, rows, n, c_dtype, comm, beta)
    mode, a_sc, b_sc, keep = _scales(a_scale, b_scale, m, None, n, fp8, comm, stream)
    desc = _desc(lib, a_type, b_type, c_type, trans_b, lda, ldb, ldc, beta, mode, a_sc, b_sc, None, chunks_per_rank)
    lib.symmMatmulReduceScatter(a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, k_shard, desc, comm.handle,
                                stream_handle(stream, comm.device_index))
    _keep_until_stream_done(keep, comm, stream)
    return out


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
    comm = _comm(None, group_name)
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
    first = all_gather_matmul(a2, Bs[0], comm=comm, return_gathered=want_a)
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
    comm = _comm(None, group_name)
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
    out = matmul_reduce_scatter(a2, B, comm=comm)
    if op == ReduceOp.Avg:
        out.div_(W)
    return out.view((moved[0] // W,) + moved[1:-1] + (out.shape[-1],)).movedim(0, d)


def _keep_until_stream_done(tensors, comm, stream) -> None:
    """Temporaries read by enqueued work: tell torch's allocator they are in
    use on the stream, so their memory is not reused before it runs."""
    if not tensors:
        return
    s = comm._torch_stream(stream)
    for t in tensors:
        t.record_stream(s)
