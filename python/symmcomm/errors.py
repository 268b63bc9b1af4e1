"""Exceptions: one class per symmcomm result code, all under SymmError.

Every failed C call raises the class of its result code with the message
symmGetLastError(comm) recorded for it; the code is in ``err.code``. Errors
that the Python layer finds itself (a CPU tensor, a shape that does not fit)
use the same classes, with the code the C library would have returned.
Some classes also derive from the built-in exception a Python user would
catch (ValueError, TimeoutError, NotImplementedError).
"""

from __future__ import annotations

from ._result import Result

__all__ = [
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
    "error_for",
]


class SymmError(Exception):
    """A symmcomm call failed. ``code`` is the symmResult_t value, ``name``
    its C name, ``message`` the library's explanation (symmGetLastError)."""

    code: int = -1

    def __init__(self, code: int, message: str = "", api: str | None = None):
        self.code = int(code)
        self.message = message
        self.api = api
        super().__init__(str(self))

    @property
    def name(self) -> str:
        try:
            return Result(self.code).c_name
        except ValueError:
            return f"unknown result {self.code}"

    def __str__(self) -> str:
        text = self.message or "(no message)"
        return f"{self.name} ({self.code}): {text}"

    def __reduce__(self):  # picklable, e.g. across multiprocessing
        return (error_for, (self.code, self.message, self.api))


class SymmCudaError(SymmError):
    """symmUnhandledCudaError: a CUDA driver call failed, or no usable driver or device."""


class SymmSystemError(SymmError):
    """symmSystemError: a system call failed (sockets, file descriptors, memory)."""


class SymmInternalError(SymmError):
    """symmInternalError: a bug in symmcomm."""


class SymmInvalidArgumentError(SymmError, ValueError):
    """symmInvalidArgument: a bad argument (null, out of range, wrong type or shape)."""


class SymmInvalidUsageError(SymmError):
    """symmInvalidUsage: the call does not fit the state (destroyed communicator,
    mismatched ranks, wrong order)."""


class SymmRemoteError(SymmError):
    """symmRemoteError: a peer rank failed or went away."""


class SymmInProgressError(SymmError):
    """symmInProgress: the operation has not completed yet."""


class SymmTimeoutError(SymmError, TimeoutError):
    """symmTimeout: a bounded wait expired (rendezvous, or a device-side wait
    that gave up after SYMM_TIMEOUT)."""

    def __str__(self) -> str:  # OSError's __str__ would hide the message
        return SymmError.__str__(self)


class SymmNotSupportedError(SymmError, NotImplementedError):
    """symmNotSupported: not implemented here, or not available in the loaded
    library (e.g. a library built before the function existed)."""


class LibraryNotFoundError(SymmError, OSError):
    """libsymmcomm could not be loaded; the message lists every place tried
    and why each failed."""

    def __init__(self, message: str):
        super().__init__(int(Result.SystemError), message, "load")

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (LibraryNotFoundError, (self.message,))


_BY_CODE = {
    Result.UnhandledCudaError: SymmCudaError,
    Result.SystemError: SymmSystemError,
    Result.InternalError: SymmInternalError,
    Result.InvalidArgument: SymmInvalidArgumentError,
    Result.InvalidUsage: SymmInvalidUsageError,
    Result.RemoteError: SymmRemoteError,
    Result.InProgress: SymmInProgressError,
    Result.Timeout: SymmTimeoutError,
    Result.NotSupported: SymmNotSupportedError,
}


def error_for(code: int, message: str = "", api: str | None = None) -> SymmError:
    """The exception instance for result ``code`` (SymmError for unknown codes)."""
    cls = _BY_CODE.get(code, SymmError) if code in Result._value2member_map_ else SymmError
    return cls(code, message, api)
