"""torch, imported only when a feature needs it, and the tensor checks the
collectives share."""

from __future__ import annotations

import contextlib
import ctypes

from ._types import BOOL_OPS, COMPLEX_DTYPES, TORCH_DTYPES, DataType, ReduceOp, Result, dtype_name
from .errors import SymmInvalidArgumentError, SymmNotSupportedError


def require_torch(feature: str = "this feature"):
    """The torch module, or ImportError saying what needs it."""
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"symmcomm: {feature} needs PyTorch (pip install torch): {e}") from e
    return torch


_TORCH = None


def optional_torch():
    """The torch module, or None without PyTorch (looked up once: this is
    on every collective's path)."""
    global _TORCH
    if _TORCH is None:
        try:
            import torch
        except ImportError:
            return None
        _TORCH = torch
    return _TORCH


_RAW_STREAM = []  # [getter or None], looked up once


def _raw_stream_getter(torch):
    """torch's current stream of a device as a raw handle, without building
    a torch.cuda.Stream object (a third of the Python cost of a small
    collective); None on a torch without it."""
    if not _RAW_STREAM:
        _RAW_STREAM.append(getattr(torch._C, "_cuda_getCurrentRawStream", None))
    return _RAW_STREAM[0]


def invalid(msg: str) -> SymmInvalidArgumentError:
    return SymmInvalidArgumentError(int(Result.InvalidArgument), msg)


def not_supported(msg: str) -> SymmNotSupportedError:
    return SymmNotSupportedError(int(Result.NotSupported), msg)


def stream_handle(stream, device_index: int) -> int | None:
    """The raw cudaStream_t for ``stream``: a torch.cuda.Stream (or
    ExternalStream), an int handle, or None for torch's current stream on
    the device (the legacy default stream, NULL, without torch)."""
    if stream is None:
        torch = optional_torch()
        if torch is None:
            return None
        raw = _raw_stream_getter(torch)
        if raw is not None:
            return raw(device_index) or None
        return torch.cuda.current_stream(device_index).cuda_stream or None
    if isinstance(stream, int):
        return stream or None
    handle = getattr(stream, "cuda_stream", None)
    if handle is None:
        raise invalid(f"stream must be a torch.cuda.Stream, a raw cudaStream_t (int) or None, not {type(stream).__name__}")
    return handle or None


def check_tensor(t, name: str, device_index: int, contiguous: bool = True):
    """A CUDA tensor on the communicator's device (contiguous unless said)."""
    torch = optional_torch()
    # The usual case in one expression (get_device: an int, where .device
    # builds a torch.device); the checks below word what is wrong.
    if (torch is not None and isinstance(t, torch.Tensor) and t.is_cuda and t.get_device() == device_index
            and (not contiguous or t.is_contiguous())):
        return t
    if torch is None or not isinstance(t, torch.Tensor):
        raise invalid(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cuda":
        raise invalid(f"{name} is on {t.device}; symmcomm needs CUDA tensors (cuda:{device_index})")
    if t.device.index != device_index:
        raise invalid(f"{name} is on {t.device} but the communicator is on cuda:{device_index}")
    if contiguous and not t.is_contiguous():
        raise invalid(f"{name} is not contiguous; pass tensor.contiguous() (collectives work on dense buffers)")
    return t


def shape_elements(size, what: str) -> int:
    """Elements of a tensor of shape ``size``; an error naming a negative
    dimension."""
    numel = 1
    for s in size:
        if s < 0:
            raise invalid(f"negative dimension {s} in {what} {tuple(size)}")
        numel *= s
    return numel


def movement_type(dtype) -> tuple[DataType, int]:
    """(element type, elements per torch element) to move ``dtype`` bit for
    bit: its own type, the real type of a complex, or bytes for any other."""
    name = dtype_name(dtype)
    if name in TORCH_DTYPES:
        return TORCH_DTYPES[name], 1
    if name in COMPLEX_DTYPES:
        return COMPLEX_DTYPES[name], 2
    require_torch("moving tensors")
    return DataType.Uint8, dtype.itemsize


_REDUCTION_TYPES: dict = {}


def reduction_type(dtype, op: ReduceOp) -> tuple[DataType, int, ReduceOp]:
    """(element type, elements per torch element, op) to reduce ``dtype``
    with ``op``, or an error naming what symmcomm cannot reduce. Remembered
    per (dtype, op): a training loop asks the same every step."""
    key = (dtype, op)
    found = _REDUCTION_TYPES.get(key)
    if found is None:
        found = _REDUCTION_TYPES[key] = _reduction_type(dtype, op)
    return found


def _reduction_type(dtype, op: ReduceOp) -> tuple[DataType, int, ReduceOp]:
    name = dtype_name(dtype)
    if name in TORCH_DTYPES:
        return TORCH_DTYPES[name], 1, op
    if name == "bool":
        if op not in BOOL_OPS:
            raise invalid(f"{op.name} of torch.bool is not defined; use sum/max (or) or prod/min (and)")
        return DataType.Uint8, 1, BOOL_OPS[op]
    if name in COMPLEX_DTYPES:
        if op not in (ReduceOp.Sum, ReduceOp.Avg):
            raise invalid(f"{op.name} of torch.{name} is not defined; complex tensors reduce with sum or avg only")
        return COMPLEX_DTYPES[name], 2, op
    raise invalid(
        f"symmcomm cannot reduce torch.{name}: it has no such element type "
        f"(reductions work on {', '.join('torch.' + n for n in TORCH_DTYPES)}, bool and complex); "
        "data movement (all-gather, broadcast, all-to-all, send/recv) works on every dtype"
    )


@contextlib.contextmanager
def current_device(index: int):
    """Make CUDA device ``index`` current for the calling thread (through
    torch when it is there, else the driver's primary context)."""
    torch = optional_torch()
    if torch is not None:
        with torch.cuda.device(index):
            yield
        return
    cuda = _driver()
    dev = ctypes.c_int()
    ctx, prev = ctypes.c_void_p(), ctypes.c_void_p()
    _cu(cuda.cuInit(0), "cuInit")
    _cu(cuda.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
    _cu(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    try:
        _cu(cuda.cuCtxGetCurrent(ctypes.byref(prev)), "cuCtxGetCurrent")
        _cu(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        try:
            yield
        finally:
            cuda.cuCtxSetCurrent(prev)
    finally:
        cuda.cuDevicePrimaryCtxRelease(dev)


_CUDA = None


def _driver():
    global _CUDA
    if _CUDA is None:
        try:
            _CUDA = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            from .errors import SymmCudaError

            raise SymmCudaError(int(Result.UnhandledCudaError), f"no CUDA driver (libcuda.so.1): {e}") from e
    return _CUDA


def _cu(rc: int, what: str) -> None:
    if rc != 0:
        from .errors import SymmCudaError

        raise SymmCudaError(int(Result.UnhandledCudaError), f"{what} failed with CUresult {rc}")
