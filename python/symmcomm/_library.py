"""libsymmcomm over ctypes: finding the library, the table of C functions
(one place, checked against include/symmcomm.h by the tests), and thin
methods that turn result codes into exceptions, in the style of vLLM's
pynccl wrapper.

Discovery order (the first that loads wins):

1. ``SYMMCOMM_LIBRARY``: a path to libsymmcomm.so. When set it is the only
   candidate: an explicit choice never silently falls back to another
   library.
2. The package's own copy, ``symmcomm/lib/libsymmcomm.so`` (present when the
   package was installed with ``SYMMCOMM_BUNDLE_LIBRARY=<path>``).
3. The source repository's ``target/release/libsymmcomm.so`` (the checkout
   the package was installed from, or the one it is imported from).
4. The system's: ``libsymmcomm.so.0`` then ``libsymmcomm.so`` through the
   dynamic loader (``cmake --install`` puts them in ``<prefix>/lib``).

When none loads, LibraryNotFoundError lists every step and why it failed.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from ._types import UNIQUE_ID_BYTES, Result
from .errors import LibraryNotFoundError, SymmNotSupportedError, error_for

#: The library major version this package speaks (SYMM_MAJOR).
SUPPORTED_MAJOR = 0
LIBRARY_NAME = "libsymmcomm.so"
SYSTEM_NAMES = ("libsymmcomm.so.0", "libsymmcomm.so")

# ------------------------------------------------------------- C types ---

symmResult_t = ctypes.c_int
symmDataType_t = ctypes.c_int
symmRedOp_t = ctypes.c_int
symmCmp_t = ctypes.c_int
symmScalarResidence_t = ctypes.c_int
symmComm_t = ctypes.c_void_p
cudaStream_t = ctypes.c_void_p  # struct CUstream_st *
buffer_t = ctypes.c_void_p


class symmUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class symmMatmulDesc_t(ctypes.Structure):
    """The fused ops' descriptor (CONTRACTS: later versions only append)."""

    _fields_ = [
        ("structSize", ctypes.c_size_t),
        ("aType", ctypes.c_int),
        ("bType", ctypes.c_int),
        ("cType", ctypes.c_int),
        ("transB", ctypes.c_int),
        ("lda", ctypes.c_size_t),
        ("ldb", ctypes.c_size_t),
        ("ldc", ctypes.c_size_t),
        ("beta", ctypes.c_float),
        ("scaleMode", ctypes.c_int),
        ("aScale", ctypes.c_void_p),
        ("bScale", ctypes.c_void_p),
        ("aGathered", ctypes.c_void_p),
        ("chunksPerRank", ctypes.c_int),
    ]


class Function(NamedTuple):
    name: str
    restype: Any
    argtypes: list


P = ctypes.POINTER
c_int, c_size_t, c_uint32, c_char_p, c_void_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_void_p

#: Every C function the package calls, with its signature. The tests parse
#: include/symmcomm.h and check that each prototype there is here with the
#: same argument types, and the other way round. Calling one that the
#: loaded library lacks (an older libsymmcomm) raises SymmNotSupportedError.
FUNCTIONS: list[Function] = [
    Function("symmGetVersion", symmResult_t, [P(c_int)]),
    Function("symmGetErrorString", c_char_p, [symmResult_t]),
    Function("symmGetLastError", c_char_p, [symmComm_t]),
    Function("symmGetUniqueId", symmResult_t, [P(symmUniqueId)]),
    Function("symmCommInitRank", symmResult_t, [P(symmComm_t), c_int, symmUniqueId, c_int]),
    Function("symmCommInitAll", symmResult_t, [P(symmComm_t), c_int, P(c_int)]),
    Function("symmCommSplit", symmResult_t, [symmComm_t, c_int, c_int, c_void_p, P(symmComm_t)]),
    Function("symmConfigInit", symmResult_t, [c_void_p, c_size_t]),
    Function("symmCommShrink", symmResult_t, [symmComm_t, P(c_int), c_int, c_void_p, c_int, P(symmComm_t)]),
    Function("symmCommDestroy", symmResult_t, [symmComm_t]),
    Function("symmCommAbort", symmResult_t, [symmComm_t]),
    Function("symmCommGetAsyncError", symmResult_t, [symmComm_t, P(symmResult_t)]),
    Function("symmCommCount", symmResult_t, [symmComm_t, P(c_int)]),
    Function("symmCommCuDevice", symmResult_t, [symmComm_t, P(c_int)]),
    Function("symmCommUserRank", symmResult_t, [symmComm_t, P(c_int)]),
    Function("symmMemset32", symmResult_t, [buffer_t, c_uint32, c_size_t, symmComm_t, cudaStream_t]),
    Function("symmBarrier", symmResult_t, [symmComm_t, cudaStream_t]),
    Function("symmPutSignal", symmResult_t, [symmComm_t, c_int, c_int, cudaStream_t]),
    Function("symmWaitSignal", symmResult_t, [symmComm_t, c_int, c_int, cudaStream_t]),
    Function("symmStreamWriteValue32", symmResult_t, [symmComm_t, buffer_t, c_uint32, cudaStream_t]),
    Function("symmStreamWaitValue32", symmResult_t, [symmComm_t, buffer_t, c_uint32, symmCmp_t, cudaStream_t]),
    Function("symmMemAlloc", symmResult_t, [symmComm_t, c_size_t, P(c_void_p)]),
    Function("symmMemFree", symmResult_t, [symmComm_t, buffer_t]),
    Function("symmMemGetPeerPtr", symmResult_t, [symmComm_t, buffer_t, c_int, P(c_void_p)]),
    Function("symmMemGetPeerTable", symmResult_t, [symmComm_t, buffer_t, P(c_void_p)]),
    Function("symmCommRegister", symmResult_t, [symmComm_t, buffer_t, c_size_t, P(c_void_p)]),
    Function("symmCommDeregister", symmResult_t, [symmComm_t, c_void_p]),
    Function("symmCommGetSignalPad", symmResult_t, [symmComm_t, c_int, P(c_void_p), P(c_size_t)]),
    Function("symmCommGetSignalPadTable", symmResult_t, [symmComm_t, P(c_void_p)]),
    Function("symmGroupStart", symmResult_t, []),
    Function("symmGroupEnd", symmResult_t, []),
    Function("symmAllReduce", symmResult_t,
             [buffer_t, buffer_t, c_size_t, symmDataType_t, symmRedOp_t, symmComm_t, cudaStream_t]),
    Function("symmAllReduceAddRMSNorm", symmResult_t,
             [buffer_t, buffer_t, buffer_t, buffer_t, buffer_t, c_size_t, c_size_t, ctypes.c_float, symmDataType_t,
              symmComm_t, cudaStream_t]),
    Function("symmAllReduceAddRMSNormFp8", symmResult_t,
             [buffer_t, buffer_t, buffer_t, buffer_t, buffer_t, buffer_t, c_int, c_size_t, c_size_t, ctypes.c_float,
              symmDataType_t, symmComm_t, cudaStream_t]),
    Function("symmAllGather", symmResult_t, [buffer_t, buffer_t, c_size_t, symmDataType_t, symmComm_t, cudaStream_t]),
    Function("symmAllGatherWithProgress", symmResult_t,
             [buffer_t, buffer_t, c_size_t, symmDataType_t, P(c_uint32), c_size_t, symmComm_t, cudaStream_t]),
    Function("symmReduceScatter", symmResult_t,
             [buffer_t, buffer_t, c_size_t, symmDataType_t, symmRedOp_t, symmComm_t, cudaStream_t]),
    Function("symmBroadcast", symmResult_t,
             [buffer_t, buffer_t, c_size_t, symmDataType_t, c_int, symmComm_t, cudaStream_t]),
    Function("symmReduce", symmResult_t,
             [buffer_t, buffer_t, c_size_t, symmDataType_t, symmRedOp_t, c_int, symmComm_t, cudaStream_t]),
    Function("symmAllToAll", symmResult_t, [buffer_t, buffer_t, c_size_t, symmDataType_t, symmComm_t, cudaStream_t]),
    Function("symmAllToAllv", symmResult_t,
             [buffer_t, P(c_size_t), P(c_size_t), buffer_t, P(c_size_t), P(c_size_t), symmDataType_t, symmComm_t,
              cudaStream_t]),
    Function("symmAllToAllvDevice", symmResult_t,
             [buffer_t, buffer_t, buffer_t, c_size_t, buffer_t, c_size_t, symmDataType_t, symmComm_t, cudaStream_t]),
    Function("symmAllToAllvDevice2d", symmResult_t,
             [buffer_t, buffer_t, buffer_t, c_size_t, buffer_t, ctypes.c_int64, ctypes.c_int64, c_size_t,
              symmDataType_t, symmComm_t, cudaStream_t]),
    Function("symmAllToAllvDevice2dOffset", symmResult_t,
             [buffer_t, buffer_t, buffer_t, c_size_t, buffer_t, ctypes.c_int64, c_size_t, symmDataType_t,
              symmComm_t, cudaStream_t]),
    Function("symmSend", symmResult_t, [buffer_t, c_size_t, symmDataType_t, c_int, symmComm_t, cudaStream_t]),
    Function("symmRecv", symmResult_t, [buffer_t, c_size_t, symmDataType_t, c_int, symmComm_t, cudaStream_t]),
    Function("symmCommSetCopyEngine", symmResult_t, [symmComm_t, c_int]),
    Function("symmRedOpCreatePreMulSum", symmResult_t,
             [P(symmRedOp_t), c_void_p, symmDataType_t, symmScalarResidence_t, symmComm_t]),
    Function("symmRedOpDestroy", symmResult_t, [symmRedOp_t, symmComm_t]),
    Function("symmCommSetAlgorithm", symmResult_t, [symmComm_t, c_char_p]),
    Function("symmCommGetTimeline", symmResult_t, [symmComm_t, c_void_p, c_size_t, P(c_size_t)]),
    # The device API's host half; its structs are for CUDA C++ kernels, so
    # Python passes them as opaque memory.
    Function("symmDevCommCreate", symmResult_t, [symmComm_t, c_void_p, c_void_p]),
    Function("symmDevCommDestroy", symmResult_t, [symmComm_t, c_void_p]),
    Function("symmMatmulDescInit", symmResult_t, [P(symmMatmulDesc_t), symmDataType_t]),
    Function("symmAllGatherMatmul", symmResult_t,
             [buffer_t, buffer_t, buffer_t, c_size_t, c_size_t, c_size_t, P(symmMatmulDesc_t), symmComm_t,
              cudaStream_t]),
    Function("symmMatmulReduceScatter", symmResult_t,
             [buffer_t, buffer_t, buffer_t, c_size_t, c_size_t, c_size_t, P(symmMatmulDesc_t), symmComm_t,
              cudaStream_t]),
]


# ------------------------------------------------------------ discovery ---

def _package_dir() -> Path:
    return Path(__file__).resolve().parent


def _repository_roots() -> list[Path]:
    """Source checkouts whose target/release to search: the one recorded when
    the package was installed, then the one it is imported from."""
    roots: list[Path] = []
    try:
        # Written by python/setup.py at install time; absent in a checkout.
        from ._install_info import SOURCE_REPOSITORY as recorded

        if recorded:
            roots.append(Path(recorded))
    except ImportError:
        pass
    here = _package_dir().parents[1]
    if (here / "Cargo.toml").is_file():
        roots.append(here)
    unique: list[Path] = []
    for r in roots:
        if r not in unique:
            unique.append(r)
    return unique


def _try_load(path: str) -> tuple[ctypes.CDLL | None, str]:
    """(library, "") or (None, why not)."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        return None, f"dlopen failed: {e}"
    try:
        get_version = lib.symmGetVersion
    except AttributeError:
        return None, f"{path} loads but is not symmcomm (no symmGetVersion)"
    get_version.restype, get_version.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]
    v = ctypes.c_int(-1)
    rc = get_version(ctypes.byref(v))
    if rc != 0:
        return None, f"symmGetVersion failed with result {rc}"
    major = v.value // 10000
    if major != SUPPORTED_MAJOR:
        return None, f"it is symmcomm {_version_string(v.value)}; this package needs {SUPPORTED_MAJOR}.x"
    return lib, ""


def _version_string(code: int) -> str:
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def discover(
    environ: dict | None = None,
    package_dir: Path | None = None,
    repository_roots: Sequence[Path] | None = None,
    system_names: Sequence[str] = SYSTEM_NAMES,
) -> tuple[str, ctypes.CDLL]:
    """Find and load libsymmcomm (see the module docstring for the order).
    Returns (what was loaded, the library). The arguments exist for tests."""
    environ = os.environ if environ is None else environ
    package_dir = _package_dir() if package_dir is None else Path(package_dir)
    repository_roots = _repository_roots() if repository_roots is None else [Path(r) for r in repository_roots]

    explicit = environ.get("SYMMCOMM_LIBRARY", "")
    if explicit:
        if not os.path.exists(explicit):
            why = "the file does not exist"
        else:
            lib, why = _try_load(os.path.abspath(explicit))
            if lib is not None:
                return os.path.abspath(explicit), lib
        raise LibraryNotFoundError(
            f"could not load symmcomm from SYMMCOMM_LIBRARY={explicit}: {why}. "
            "Point it at a libsymmcomm.so built by scripts/setup (target/release/libsymmcomm.so), "
            "or unset it to search the package, the source repository and the system."
        )

    steps = ["1. SYMMCOMM_LIBRARY: not set"]

    bundled = package_dir / "lib" / LIBRARY_NAME
    if bundled.is_file():
        lib, why = _try_load(str(bundled))
        if lib is not None:
            return str(bundled), lib
        steps.append(f"2. the package's own copy {bundled}: {why}")
    else:
        steps.append(
            f"2. the package's own copy: {bundled} does not exist (the package carries a library only when "
            "installed with SYMMCOMM_BUNDLE_LIBRARY=<path to libsymmcomm.so>)"
        )

    if not repository_roots:
        steps.append("3. the source repository's build: no source repository is known (installed without one)")
    for root in repository_roots:
        built = root / "target" / "release" / LIBRARY_NAME
        if built.is_file():
            lib, why = _try_load(str(built))
            if lib is not None:
                return str(built), lib
            steps.append(f"3. the source repository's build {built}: {why}")
        else:
            steps.append(
                f"3. the source repository's build: {built} does not exist "
                "(build it with scripts/setup, or cargo build --release)"
            )

    failures = []
    for name in system_names:
        lib, why = _try_load(name)
        if lib is not None:
            return _loaded_path(lib, name), lib
        failures.append(f"{name}: {why}")
    steps.append(
        "4. the system's: " + "; ".join(failures)
        + " (after cmake --install, add <prefix>/lib to LD_LIBRARY_PATH or the loader's configuration)"
    )
    raise LibraryNotFoundError("could not load libsymmcomm. Tried, in order:\n  " + "\n  ".join(steps))


def _loaded_path(lib: ctypes.CDLL, fallback: str) -> str:
    """The file the dynamic loader picked for ``lib`` (via dladdr)."""
    try:
        class DlInfo(ctypes.Structure):
            _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                        ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

        libdl = ctypes.CDLL(None)
        dladdr = libdl.dladdr
        dladdr.argtypes, dladdr.restype = [ctypes.c_void_p, ctypes.POINTER(DlInfo)], ctypes.c_int
        info = DlInfo()
        addr = ctypes.cast(lib.symmGetVersion, ctypes.c_void_p).value
        if dladdr(addr, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode())
    except (OSError, AttributeError):
        pass
    return fallback


# -------------------------------------------------------------- library ---

class SymmLibrary:
    """The loaded C library: every function of FUNCTIONS with its signature
    set, and a thin method per function (same name as in C) that checks the
    result code and returns the outputs."""

    def __init__(self, path: str | None = None, lib: ctypes.CDLL | None = None):
        if lib is None:
            if path is None:
                path, lib = discover()
            else:
                loaded, why = _try_load(path)
                if loaded is None:
                    raise LibraryNotFoundError(f"could not load symmcomm from {path}: {why}")
                lib = loaded
        self.path = path or "<unknown>"
        self._lib = lib
        self._funcs: dict[str, Any] = {}
        self.missing: list[str] = []
        for f in FUNCTIONS:
            try:
                fn = getattr(lib, f.name)
            except AttributeError:
                self.missing.append(f.name)
                continue
            fn.restype, fn.argtypes = f.restype, f.argtypes
            self._funcs[f.name] = fn
        self.version_code = self.symmGetVersion()
        self.version = _version_string(self.version_code)

    def __repr__(self) -> str:
        return f"SymmLibrary({self.path!r}, version {self.version})"

    def has(self, name: str) -> bool:
        """Whether the loaded library exports ``name``."""
        return name in self._funcs

    def fn(self, name: str):
        """The raw ctypes function ``name``; SymmNotSupportedError when the
        loaded library lacks it."""
        try:
            return self._funcs[name]
        except KeyError:
            if name not in {f.name for f in FUNCTIONS}:
                raise AttributeError(name) from None
            raise SymmNotSupportedError(
                int(Result.NotSupported),
                f"{name} is not in the loaded library {self.path} (symmcomm {self.version}); "
                "it was built before this function existed: rebuild it (scripts/setup) "
                "or point SYMMCOMM_LIBRARY at a newer build",
                name,
            ) from None

    def check(self, name: str, rc: int, comm=None) -> None:
        """Raise the exception for result ``rc`` of ``name``, with the message
        recorded on ``comm`` (or on this thread when comm is None)."""
        if rc != 0:
            raise error_for(rc, self.symmGetLastError(comm), name)

    def call(self, name: str, *args, comm=None) -> None:
        """Call ``name`` and raise on failure; ``comm`` says where the
        library recorded the message."""
        self.check(name, self.fn(name)(*args), comm)

    # -- version and errors ------------------------------------------------
    def symmGetVersion(self) -> int:
        v = ctypes.c_int()
        self.call("symmGetVersion", ctypes.byref(v))
        return v.value

    def symmGetErrorString(self, result: int) -> str:
        return self.fn("symmGetErrorString")(result).decode(errors="replace")

    def symmGetLastError(self, comm) -> str:
        raw = self.fn("symmGetLastError")(comm)
        return raw.decode(errors="replace") if raw else ""

    # -- communicators -----------------------------------------------------
    def symmGetUniqueId(self) -> bytes:
        uid = symmUniqueId()
        self.call("symmGetUniqueId", ctypes.byref(uid))
        return ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES)

    def symmCommInitRank(self, nranks: int, unique_id: bytes, rank: int) -> int:
        uid = symmUniqueId()
        ctypes.memmove(ctypes.addressof(uid), unique_id, UNIQUE_ID_BYTES)
        comm = symmComm_t()
        self.call("symmCommInitRank", ctypes.byref(comm), nranks, uid, rank)
        return comm.value

    def symmCommInitAll(self, devices: Sequence[int]) -> list[int]:
        n = len(devices)
        comms = (symmComm_t * max(n, 1))()
        devlist = (ctypes.c_int * max(n, 1))(*devices)
        self.call("symmCommInitAll", comms, n, devlist)
        return [comms[i] for i in range(n)]

    def symmCommSplit(self, comm: int, color: int, key: int) -> int | None:
        out = symmComm_t()
        self.call("symmCommSplit", comm, color, key, None, ctypes.byref(out), comm=comm)
        return out.value or None

    def symmCommDestroy(self, comm: int) -> None:
        self.call("symmCommDestroy", comm)

    def symmCommAbort(self, comm: int) -> None:
        self.call("symmCommAbort", comm)

    def symmCommGetAsyncError(self, comm: int) -> int:
        out = symmResult_t()
        self.call("symmCommGetAsyncError", comm, ctypes.byref(out), comm=comm)
        return out.value

    def _query(self, name: str, comm: int) -> int:
        out = ctypes.c_int()
        self.call(name, comm, ctypes.byref(out), comm=comm)
        return out.value

    def symmCommCount(self, comm: int) -> int:
        return self._query("symmCommCount", comm)

    def symmCommCuDevice(self, comm: int) -> int:
        return self._query("symmCommCuDevice", comm)

    def symmCommUserRank(self, comm: int) -> int:
        return self._query("symmCommUserRank", comm)

    def symmCommSetCopyEngine(self, comm: int, enable: bool) -> None:
        self.call("symmCommSetCopyEngine", comm, int(bool(enable)), comm=comm)

    def symmRedOpCreatePreMulSum(self, scalar: int, dtype, residence, comm: int) -> int:
        """A pre-multiplied sum's op number, for symmAllReduce, symmReduceScatter
        and symmReduce of `dtype` on `comm`; `scalar` is the address of one
        element (host memory with ScalarHostImmediate, device memory with
        ScalarDevice)."""
        op = ctypes.c_int()
        self.call("symmRedOpCreatePreMulSum", ctypes.byref(op), scalar, dtype, residence, comm, comm=comm)
        return op.value

    def symmRedOpDestroy(self, op: int, comm: int) -> None:
        self.call("symmRedOpDestroy", op, comm, comm=comm)

    # -- stream-ordered primitives -----------------------------------------
    def symmMemset32(self, dst: int, value: int, count: int, comm: int, stream: int | None) -> None:
        self.call("symmMemset32", dst, value, count, comm, stream, comm=comm)

    def symmBarrier(self, comm: int, stream: int | None) -> None:
        self.call("symmBarrier", comm, stream, comm=comm)

    def symmPutSignal(self, comm: int, peer: int, channel: int, stream: int | None) -> None:
        self.call("symmPutSignal", comm, peer, channel, stream, comm=comm)

    def symmWaitSignal(self, comm: int, peer: int, channel: int, stream: int | None) -> None:
        self.call("symmWaitSignal", comm, peer, channel, stream, comm=comm)

    def symmStreamWriteValue32(self, comm: int, addr: int, value: int, stream: int | None) -> None:
        self.call("symmStreamWriteValue32", comm, addr, value, stream, comm=comm)

    def symmStreamWaitValue32(self, comm: int, addr: int, value: int, cond: int, stream: int | None) -> None:
        self.call("symmStreamWaitValue32", comm, addr, value, cond, stream, comm=comm)

    # -- symmetric memory, registration, signal pads -------------------------
    def symmMemAlloc(self, comm: int, size: int) -> int:
        out = c_void_p()
        self.call("symmMemAlloc", comm, size, ctypes.byref(out), comm=comm)
        return out.value

    def symmMemFree(self, comm: int, ptr: int) -> None:
        self.call("symmMemFree", comm, ptr, comm=comm)

    def symmMemGetPeerPtr(self, comm: int, ptr: int, peer: int) -> int:
        out = c_void_p()
        self.call("symmMemGetPeerPtr", comm, ptr, peer, ctypes.byref(out), comm=comm)
        return out.value

    def symmMemGetPeerTable(self, comm: int, ptr: int) -> int:
        out = c_void_p()
        self.call("symmMemGetPeerTable", comm, ptr, ctypes.byref(out), comm=comm)
        return out.value

    def symmCommRegister(self, comm: int, buff: int, size: int) -> int:
        out = c_void_p()
        self.call("symmCommRegister", comm, buff, size, ctypes.byref(out), comm=comm)
        return out.value

    def symmCommDeregister(self, comm: int, handle: int) -> None:
        self.call("symmCommDeregister", comm, handle, comm=comm)

    def symmCommGetSignalPad(self, comm: int, peer: int) -> tuple[int, int]:
        pad, size = c_void_p(), c_size_t()
        self.call("symmCommGetSignalPad", comm, peer, ctypes.byref(pad), ctypes.byref(size), comm=comm)
        return pad.value, size.value

    def symmCommGetSignalPadTable(self, comm: int) -> int:
        out = c_void_p()
        self.call("symmCommGetSignalPadTable", comm, ctypes.byref(out), comm=comm)
        return out.value

    # -- groups ------------------------------------------------------------
    def symmGroupStart(self) -> None:
        self.call("symmGroupStart")

    def symmGroupEnd(self) -> None:
        self.call("symmGroupEnd")

    # -- collectives ---------------------------------------------------------
    def symmAllReduce(self, send, recv, count, dtype, op, comm, stream) -> None:
        self.call("symmAllReduce", send, recv, count, dtype, op, comm, stream, comm=comm)

    def symmAllToAllvDevice(self, send, splits, recv, recv_capacity, out_splits_offsets, row_elems, dtype, comm,
                            stream) -> None:
        self.call("symmAllToAllvDevice", send, splits, recv, recv_capacity, out_splits_offsets, row_elems, dtype,
                  comm, stream, comm=comm)

    def symmAllToAllvDevice2d(self, send, splits, recv, recv_capacity, out_splits_offsets, local_experts,
                              major_align, row_elems, dtype, comm, stream) -> None:
        self.call("symmAllToAllvDevice2d", send, splits, recv, recv_capacity, out_splits_offsets, local_experts,
                  major_align, row_elems, dtype, comm, stream, comm=comm)

    def symmAllToAllvDevice2dOffset(self, send, splits_offsets, recv, recv_capacity, out_splits_offsets,
                                    local_experts, row_elems, dtype, comm, stream) -> None:
        self.call("symmAllToAllvDevice2dOffset", send, splits_offsets, recv, recv_capacity, out_splits_offsets,
                  local_experts, row_elems, dtype, comm, stream, comm=comm)

    def symmAllReduceAddRMSNorm(self, input, residual, weight, out, residual_out, tokens, hidden, eps, dtype, comm,
                                stream) -> None:
        self.call("symmAllReduceAddRMSNorm", input, residual, weight, out, residual_out, tokens, hidden, eps, dtype,
                  comm, stream, comm=comm)

    def symmAllReduceAddRMSNormFp8(self, input, residual, weight, out, residual_out, scales, per_token, tokens,
                                   hidden, eps, dtype, comm, stream) -> None:
        self.call("symmAllReduceAddRMSNormFp8", input, residual, weight, out, residual_out, scales, int(per_token),
                  tokens, hidden, eps, dtype, comm, stream, comm=comm)

    def symmAllGather(self, send, recv, sendcount, dtype, comm, stream) -> None:
        self.call("symmAllGather", send, recv, sendcount, dtype, comm, stream, comm=comm)

    def symmAllGatherWithProgress(self, send, recv, sendcount, dtype, flags, chunk_count, comm, stream) -> None:
        self.call("symmAllGatherWithProgress", send, recv, sendcount, dtype, ctypes.cast(flags, P(c_uint32)),
                  chunk_count, comm, stream, comm=comm)

    def symmReduceScatter(self, send, recv, recvcount, dtype, op, comm, stream) -> None:
        self.call("symmReduceScatter", send, recv, recvcount, dtype, op, comm, stream, comm=comm)

    def symmBroadcast(self, send, recv, count, dtype, root, comm, stream) -> None:
        self.call("symmBroadcast", send, recv, count, dtype, root, comm, stream, comm=comm)

    def symmReduce(self, send, recv, count, dtype, op, root, comm, stream) -> None:
        self.call("symmReduce", send, recv, count, dtype, op, root, comm, stream, comm=comm)

    def symmAllToAll(self, send, recv, count, dtype, comm, stream) -> None:
        self.call("symmAllToAll", send, recv, count, dtype, comm, stream, comm=comm)

    def symmAllToAllv(self, send, sendcounts, sdispls, recv, recvcounts, rdispls, dtype, comm, stream) -> None:
        """Counts and displacements: sequences of one int per rank (elements)."""
        arrays = [(c_size_t * len(a))(*a) for a in (sendcounts, sdispls, recvcounts, rdispls)]
        self.call("symmAllToAllv", send, arrays[0], arrays[1], recv, arrays[2], arrays[3], dtype, comm, stream,
                  comm=comm)

    def symmSend(self, send, count, dtype, peer, comm, stream) -> None:
        self.call("symmSend", send, count, dtype, peer, comm, stream, comm=comm)

    def symmRecv(self, recv, count, dtype, peer, comm, stream) -> None:
        self.call("symmRecv", recv, count, dtype, peer, comm, stream, comm=comm)

    # -- fused ops -----------------------------------------------------------
    def symmMatmulDescInit(self, dtype: int) -> symmMatmulDesc_t:
        desc = symmMatmulDesc_t()
        self.call("symmMatmulDescInit", ctypes.byref(desc), dtype)
        return desc

    def symmAllGatherMatmul(self, a_shard, b, c, m_shard, n, k, desc: symmMatmulDesc_t, comm, stream) -> None:
        self.call("symmAllGatherMatmul", a_shard, b, c, m_shard, n, k, ctypes.byref(desc), comm, stream, comm=comm)

    def symmMatmulReduceScatter(self, a, b, c_shard, m, n, k_shard, desc: symmMatmulDesc_t, comm, stream) -> None:
        self.call("symmMatmulReduceScatter", a, b, c_shard, m, n, k_shard, ctypes.byref(desc), comm, stream,
                  comm=comm)


_LIBRARY: SymmLibrary | None = None
_LOCK = threading.Lock()


def library() -> SymmLibrary:
    """The process's libsymmcomm, found on first use (see the module
    docstring); LibraryNotFoundError explains every failed step."""
    global _LIBRARY
    if _LIBRARY is None:
        with _LOCK:
            if _LIBRARY is None:
                _LIBRARY = SymmLibrary()
    return _LIBRARY
