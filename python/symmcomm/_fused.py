"""The bodies of the fused communication + matmul ops (symmAllGatherMatmul,
symmMatmulReduceScatter) on one communicator, given: checks of the torch
tensors, their layouts and fp8 scales, then the C call on the caller's
stream. Communicator's methods call them directly; symmcomm.fused (and its
PyTorch names) first find the communicator of a group. Shapes, layouts and
scales: see symmcomm.fused's docstring.
"""

from __future__ import annotations

import ctypes

from ._library import symmMatmulDesc_t
from ._torch import check_tensor, invalid, require_torch, stream_handle
from ._types import DataType, ScaleMode, datatype_for

__all__ = ["all_gather_matmul", "matmul_reduce_scatter"]

_FP8 = (DataType.Float8e4m3, DataType.Float8e5m2)


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


def _operands(comm, a, a_name: str, b, weight):
    """(b, rows of a, inner size, n): both operands checked as matrices on
    ``comm``'s device with matching inner sizes; ``b`` taken from ``weight``
    when given as nn.Linear keeps it."""
    b = _weight_or_b(b, weight)
    _matrix(a, a_name, comm)
    _matrix(b, "b", comm)
    rows, k = a.shape
    if b.shape[0] != k:
        raise invalid(f"{a_name} is {rows} x {k} but b is {b.shape[0]} x {b.shape[1]}: inner sizes differ")
    return b, rows, k, b.shape[1]


def all_gather_matmul(comm, a_shard, b=None, *, weight=None, out=None, out_dtype=None,
                      a_scale=None, b_scale=None, beta: float = 0.0, return_gathered: bool = False,
                      gathered_out=None, chunks_per_rank: int = 0, stream=None):
    """symmcomm.all_gather_matmul on ``comm``."""
    torch = require_torch("fused ops")
    lib = comm.library
    lib.fn("symmAllGatherMatmul")  # a clear error when the library predates the fused ops
    b, m_shard, k, n = _operands(comm, a_shard, "a_shard", b, weight)
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


def matmul_reduce_scatter(comm, a, b=None, *, weight=None, out=None, out_dtype=None,
                          a_scale=None, b_scale=None, beta: float = 0.0, chunks_per_rank: int = 0, stream=None):
    """symmcomm.matmul_reduce_scatter on ``comm``."""
    lib = comm.library
    lib.fn("symmMatmulReduceScatter")
    b, m, k_shard, n = _operands(comm, a, "a", b, weight)
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


def _keep_until_stream_done(tensors, comm, stream) -> None:
    """Temporaries read by enqueued work: tell torch's allocator they are in
    use on the stream, so their memory is not reused before it runs."""
    if not tensors:
        return
    s = comm._torch_stream(stream)
    for t in tensors:
        t.record_stream(s)
