"""symmcomm for Python: an NCCL-style communicator on CUDA symmetric memory,
over ctypes (no compiled extension).

- ``Communicator``: from a torch.distributed group or a unique id;
  collectives on torch tensors, on the caller's stream, graph-capturable.
- ``symmcomm.symmetric_memory``: symmetric tensors named as
  ``torch.distributed._symmetric_memory`` names them.
- ``all_gather_matmul`` / ``matmul_reduce_scatter``: the fused ops.
- ``symmcomm.triton``: barrier and signal helpers for Triton kernels, with
  bounded waits (imported on demand; needs Triton).

torch is imported only by the parts that need it; the library is found as
described in ``symmcomm._library`` (SYMMCOMM_LIBRARY first).
"""

from ._library import FUNCTIONS, SymmLibrary, discover, library
from ._types import (
    SIGNAL_CHANNELS, SPLIT_NOCOLOR, UNIQUE_ID_BYTES, Cmp, DataType, PreMulSum, ReduceOp, Result, ScalarResidence,
    ScaleMode, premul_sum,
)
from .communicator import Communicator, P2POp, get_unique_id, group, group_end, group_start
from .errors import (
    LibraryNotFoundError,
    SymmCudaError,
    SymmError,
    SymmInProgressError,
    SymmInternalError,
    SymmInvalidArgumentError,
    SymmInvalidUsageError,
    SymmNotSupportedError,
    SymmRemoteError,
    SymmSystemError,
    SymmTimeoutError,
)
from .fused import all_gather_matmul, matmul_reduce_scatter

__version__ = "0.1.0"

__all__ = [
    "Communicator",
    "P2POp",
    "get_unique_id",
    "group",
    "group_start",
    "group_end",
    "all_gather_matmul",
    "matmul_reduce_scatter",
    "library",
    "library_path",
    "library_version",
    "discover",
    "SymmLibrary",
    "FUNCTIONS",
    "ReduceOp",
    "PreMulSum",
    "premul_sum",
    "DataType",
    "Result",
    "Cmp",
    "ScalarResidence",
    "ScaleMode",
    "SPLIT_NOCOLOR",
    "SIGNAL_CHANNELS",
    "UNIQUE_ID_BYTES",
    "SymmError",
    "SymmCudaError",
    "SymmSystemError",
    "SymmInternalError",
    "SymmInvalidArgumentError",
    "SymmInvalidUsageError",
    "SymmRemoteError",
    "SymmInProgressError",
    "SymmTimeoutError",
    "SymmNotSupportedError",
    "LibraryNotFoundError",
]


def library_path() -> str:
    """The file of the loaded libsymmcomm (loading it if needed)."""
    return library().path


def library_version() -> str:
    """The loaded library's version, e.g. "0.1.0"."""
    return library().version


def __getattr__(name):
    # `symmcomm.symmetric_memory` and `symmcomm.triton` load on first use.
    if name in ("symmetric_memory", "triton"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'symmcomm' has no attribute {name!r}")
