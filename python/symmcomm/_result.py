"""symmResult_t, the codes every call returns, and the enum base that
knows its C names. It is the package's lowest module: errors.py makes one
exception class per code, and _types.py (the other C enums, which raise
those exceptions when a torch dtype or op has no match) builds on both.
"""

from __future__ import annotations

import enum


class _CEnum(enum.IntEnum):
    """An enum whose members also know their C enumerator name."""

    @property
    def c_name(self) -> str:
        return self._c_prefix() + self.name

    @classmethod
    def _c_prefix(cls) -> str:
        return "symm"


class Result(_CEnum):
    """symmResult_t (fixed numbers; 0-6 as NCCL's ncclResult_t)."""

    Success = 0
    UnhandledCudaError = 1
    SystemError = 2
    InternalError = 3
    InvalidArgument = 4
    InvalidUsage = 5
    RemoteError = 6
    InProgress = 7
    Timeout = 8
    NotSupported = 9
