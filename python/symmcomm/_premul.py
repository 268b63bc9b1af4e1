"""Pre-multiplied sums for Communicator's reductions: a PreMulSum becomes a
symmcomm op (symmRedOpCreatePreMulSum) for the one call that uses it and
is destroyed right after it is issued, as PyTorch's NCCL backend does with
ncclRedOpCreatePreMulSum. The library reads a host factor when the op is
made and a device factor when the collective runs, so destroying the op
after the call (even under CUDA graph capture) is safe.
"""

from __future__ import annotations

import contextlib

from ._torch import check_tensor, invalid, reduction_type, require_torch
from ._types import TORCH_DTYPES, PreMulSum, ReduceOp, ScalarResidence, dtype_name


@contextlib.contextmanager
def premul_op(comm, op: PreMulSum, dtype):
    """Yields (element type, elements per torch element, op number) to
    reduce ``dtype`` with ``op`` on ``comm``; the op is destroyed on exit."""
    if dtype_name(dtype) == "bool":
        raise invalid("a pre-multiplied sum of torch.bool is not defined; use sum (or) or prod (and)")
    dt, per, _ = reduction_type(dtype, ReduceOp.Sum)
    torch = require_torch("pre-multiplied sums")
    # The factor has the type the kernels compute on: a complex tensor's real type.
    factor_dtype = getattr(torch, next(n for n, d in TORCH_DTYPES.items() if d == dt))
    factor = op.factor
    if isinstance(factor, (int, float)):
        try:
            held = torch.tensor([factor], dtype=torch.float64 if isinstance(factor, float) else torch.int64)
            held = held.to(factor_dtype)
        except (RuntimeError, OverflowError) as e:
            raise invalid(f"pre-multiplied sum factor {factor!r} does not convert to {factor_dtype}: {e}") from None
        residence = ScalarResidence.ScalarHostImmediate
    else:
        held = check_tensor(factor, "the pre-multiplied sum's factor", comm.device_index, contiguous=False)
        if held.dtype != factor_dtype:
            raise invalid(f"the pre-multiplied sum's factor is {held.dtype}; reducing {dtype} needs "
                          f"a {factor_dtype} factor (or a Python number)")
        residence = ScalarResidence.ScalarDevice
    lib, handle = comm.library, comm.handle
    number = lib.symmRedOpCreatePreMulSum(held.data_ptr(), dt, residence, handle)
    try:
        yield dt, per, number
    finally:
        lib.symmRedOpDestroy(number, handle)
