"""symmcomm's C enums and the tables that map torch's dtypes and reduction
ops onto them. Nothing here imports torch: dtypes are matched by name
(``str(torch.float16)`` is ``"torch.float16"``), so the tables can be
checked against include/symmcomm.h on a machine without torch.
"""

from __future__ import annotations

from ._result import Result, _CEnum
from .errors import SymmInvalidArgumentError, SymmNotSupportedError

# Sizes and limits, as #defined in include/symmcomm.h.
UNIQUE_ID_BYTES = 128
SIGNAL_CHANNELS = 1024
SPLIT_NOCOLOR = -1


class DataType(_CEnum):
    """symmDataType_t (numbered as ncclDataType_t)."""

    Int8 = 0
    Uint8 = 1
    Int32 = 2
    Uint32 = 3
    Int64 = 4
    Uint64 = 5
    Float16 = 6
    Float32 = 7
    Float64 = 8
    Bfloat16 = 9
    Float8e4m3 = 10
    Float8e5m2 = 11

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]


_ITEMSIZE = {
    DataType.Int8: 1, DataType.Uint8: 1, DataType.Float8e4m3: 1, DataType.Float8e5m2: 1,
    DataType.Float16: 2, DataType.Bfloat16: 2,
    DataType.Int32: 4, DataType.Uint32: 4, DataType.Float32: 4,
    DataType.Int64: 8, DataType.Uint64: 8, DataType.Float64: 8,
}


class ReduceOp(_CEnum):
    """symmRedOp_t (numbered as ncclRedOp_t, not as torch's ReduceOp)."""

    Sum = 0
    Prod = 1
    Max = 2
    Min = 3
    Avg = 4

    # torch.distributed spellings, for `symmcomm.ReduceOp.SUM` etc.
    SUM = 0
    PRODUCT = 1
    MAX = 2
    MIN = 3
    AVG = 4


class Cmp(_CEnum):
    """symmCmp_t, the conditions of symmStreamWaitValue32."""

    CmpEq = 0
    CmpGeq = 1


class ScaleMode(_CEnum):
    """symmScaleMode_t of the fused matmul ops."""

    ScaleNone = 0
    ScaleTensor = 1
    ScaleRowwise = 2


class ScalarResidence(_CEnum):
    """symmScalarResidence_t (numbered as ncclScalarResidence_t): where a
    pre-multiplied sum's scalar is."""

    ScalarDevice = 0
    ScalarHostImmediate = 1


# ---------------------------------------------------------------- dtypes ---

#: torch dtype name -> the symmcomm element type it is computed as. Every
#: symmDataType_t has exactly one torch dtype here (checked by the tests
#: against the header). e4m3 is NVIDIA's/OCP's "fn" variant (no infinities,
#: max 448), which is torch.float8_e4m3fn; the "fnuz" variants differ.
TORCH_DTYPES: dict[str, DataType] = {
    "int8": DataType.Int8,
    "uint8": DataType.Uint8,
    "int32": DataType.Int32,
    "uint32": DataType.Uint32,
    "int64": DataType.Int64,
    "uint64": DataType.Uint64,
    "float16": DataType.Float16,
    "float32": DataType.Float32,
    "float64": DataType.Float64,
    "bfloat16": DataType.Bfloat16,
    "float8_e4m3fn": DataType.Float8e4m3,
    "float8_e5m2": DataType.Float8e5m2,
}

#: torch dtypes carried as pairs of a real type (PyTorch's NCCL backend does
#: the same): data movement, sum and average work; other reductions do not.
COMPLEX_DTYPES: dict[str, DataType] = {
    "complex32": DataType.Float16,
    "complex64": DataType.Float32,
    "complex128": DataType.Float64,
}

#: bool is carried as uint8; reductions become logical ops as in PyTorch's
#: NCCL backend: sum and max are OR (max), product and min are AND (min).
BOOL_OPS = {ReduceOp.Sum: ReduceOp.Max, ReduceOp.Max: ReduceOp.Max,
            ReduceOp.Prod: ReduceOp.Min, ReduceOp.Min: ReduceOp.Min}

#: torch.distributed ReduceOp names -> symmcomm ops; the others get a reason.
OP_NAMES: dict[str, ReduceOp] = {
    "SUM": ReduceOp.Sum,
    "PRODUCT": ReduceOp.Prod,
    "PROD": ReduceOp.Prod,
    "MAX": ReduceOp.Max,
    "MIN": ReduceOp.Min,
    "AVG": ReduceOp.Avg,
}
UNSUPPORTED_OPS: dict[str, str] = {
    "BAND": "bitwise reductions are not supported (NCCL has none either)",
    "BOR": "bitwise reductions are not supported (NCCL has none either)",
    "BXOR": "bitwise reductions are not supported (NCCL has none either)",
    "UNUSED": "not a reduction",
}


def dtype_name(dtype) -> str:
    """'float16' for torch.float16 (or for the string 'float16')."""
    s = str(dtype)
    return s[len("torch."):] if s.startswith("torch.") else s


def datatype_for(dtype) -> DataType:
    """The symmcomm element type computing on ``dtype`` (a torch dtype, its
    name, or a DataType); SymmInvalidArgumentError for the rest."""
    if isinstance(dtype, DataType):
        return dtype
    name = dtype_name(dtype)
    dt = TORCH_DTYPES.get(name)
    if dt is None:
        raise SymmInvalidArgumentError(
            int(Result.InvalidArgument),
            f"symmcomm has no element type for torch.{name}; it computes on "
            + ", ".join(f"torch.{n}" for n in TORCH_DTYPES)
            + " (bool and complex are carried for data movement, sum and avg)",
        )
    return dt


class PreMulSum:
    """A pre-multiplied sum: out = sum over ranks of factor_r * x_r, each rank
    with its own ``factor`` (NCCL's ncclRedOpCreatePreMulSum, what torch's
    ``torch.distributed._make_nccl_premul_sum(factor)`` asks for). ``factor``
    is a Python number, converted to the reduced tensor's type when the
    collective is issued, or a one-element tensor on the communicator's GPU
    of that type, read when the collective runs (so a CUDA graph replays
    with the value it holds then). Make one with ``symmcomm.premul_sum``."""

    __slots__ = ("factor",)

    def __init__(self, factor):
        if isinstance(factor, bool) or not (isinstance(factor, (int, float)) or _one_element_tensor(factor)):
            raise SymmInvalidArgumentError(
                int(Result.InvalidArgument),
                f"a pre-multiplied sum's factor is a number or a one-element tensor, not {factor!r}",
            )
        self.factor = factor

    def __repr__(self) -> str:
        return f"premul_sum({self.factor!r})"


def premul_sum(factor) -> PreMulSum:
    """The reduction op ``sum over ranks of factor * x`` (see PreMulSum), for
    Communicator.all_reduce, reduce_scatter_tensor and reduce."""
    return PreMulSum(factor)


def _one_element_tensor(t) -> bool:
    numel = getattr(t, "numel", None)
    return callable(numel) and hasattr(t, "data_ptr") and numel() == 1


def _torch_op_state(op):
    """(kind, factor) from a torch.distributed.ReduceOp's pickled state, or
    (None, None) for anything else."""
    getstate = getattr(op, "__getstate__", None)
    try:
        state = getstate() if callable(getstate) else None
    except TypeError:
        return None, None
    if isinstance(state, tuple) and len(state) == 2:
        return state
    return None, None


def reduce_op_for(op) -> ReduceOp | PreMulSum:
    """Map ``op`` to a symmcomm ReduceOp, or to a PreMulSum. Accepts
    symmcomm.ReduceOp, a plain int (symmcomm/NCCL numbering), a name ("sum",
    "avg", "product"...), a PreMulSum, or a torch.distributed.ReduceOp
    (matched by name: torch numbers its ops differently from NCCL; PREMUL_SUM
    with the factor torch keeps in it)."""
    if isinstance(op, (ReduceOp, PreMulSum)):
        return op
    if type(op) is int:
        try:
            return ReduceOp(op)
        except ValueError:
            raise SymmInvalidArgumentError(
                int(Result.InvalidArgument), f"reduction op {op} is not a symmRedOp_t (0..4)"
            ) from None
    factor = None
    if isinstance(op, str):
        name = op
    else:
        # torch.distributed.ReduceOp.SUM is a pybind11 enum (RedOpType) with
        # .name. A ReduceOp instance pickles as (RedOpType, factor), the
        # factor set only for PREMUL_SUM (_make_nccl_premul_sum).
        name = getattr(op, "name", None)
        if not isinstance(name, str):
            kind, factor = _torch_op_state(op)
            name = getattr(kind, "name", None)
        if not isinstance(name, str):
            inner = getattr(op, "op", None)
            name = getattr(inner, "name", None) if inner is not None else None
        if not isinstance(name, str):
            name = str(op)
    key = name.rsplit(".", 1)[-1].upper()
    if key in OP_NAMES:
        return OP_NAMES[key]
    if key == "PREMUL_SUM":
        if factor is None and not isinstance(op, str):
            factor = _torch_op_state(op)[1]
        if factor is None:
            raise SymmInvalidArgumentError(
                int(Result.InvalidArgument),
                f"reduction op {name} needs its factor: pass symmcomm.premul_sum(factor) "
                "or torch.distributed._make_nccl_premul_sum(factor)",
            )
        return PreMulSum(factor)
    if key in UNSUPPORTED_OPS:
        raise SymmNotSupportedError(int(Result.NotSupported), f"reduction op {name}: {UNSUPPORTED_OPS[key]}")
    raise SymmInvalidArgumentError(
        int(Result.InvalidArgument),
        f"unknown reduction op {op!r}; use one of sum, prod, max, min, avg or symmcomm.premul_sum(factor)",
    )
