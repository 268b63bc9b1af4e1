"""Device memory that symmcomm owns, seen as torch storage.

torch cannot wrap a raw device pointer with an owner through a public
Python API except DLPack, so this module builds a DLManagedTensor with
ctypes and hands torch the capsule. Two properties matter:

- The device is stated, not guessed from the pointer: a peer's memory
  mapped into this process is reported by the driver as living on the
  peer's GPU, but it must be used from this GPU (so
  ``__cuda_array_interface__``, which infers the device, would be wrong).
- torch calls the DLPack deleter when the last tensor or view of the
  storage dies. The deleter only drops a Python reference to ``owner``;
  it never calls into symmcomm (freeing symmetric memory is collective
  and happens elsewhere, at a point every rank reaches).
"""

from __future__ import annotations

import ctypes
import threading

KDL_CUDA = 2
KDL_UINT = 1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER_T = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER_T),
]

# Exported tensors not yet released by torch: address -> (struct, shape,
# strides, owner). Holding them here keeps the ctypes memory and the owner
# alive until torch calls the deleter.
_LIVE: dict[int, tuple] = {}
_LIVE_LOCK = threading.Lock()


@_DELETER_T
def _deleter(managed):
    # Called by torch (with the GIL taken by ctypes) when the storage dies.
    try:
        addr = ctypes.cast(managed, ctypes.c_void_p).value
        with _LIVE_LOCK:
            _LIVE.pop(addr, None)
    except Exception:  # never let an exception escape into C++
        pass


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def live_exports() -> int:
    """How many exported storages torch still holds (for tests)."""
    with _LIVE_LOCK:
        return len(_LIVE)


def byte_storage(ptr: int, nbytes: int, device_index: int, owner: object):
    """A torch.UntypedStorage of ``nbytes`` at device address ``ptr`` on CUDA
    device ``device_index``, keeping ``owner`` referenced while any tensor
    uses it."""
    import torch
    from torch.utils.dlpack import from_dlpack

    managed = _DLManagedTensor()
    shape = (ctypes.c_int64 * 1)(nbytes)
    strides = (ctypes.c_int64 * 1)(1)
    t = managed.dl_tensor
    t.data = ptr
    t.device = _DLDevice(KDL_CUDA, device_index)
    t.ndim = 1
    t.dtype = _DLDataType(KDL_UINT, 8, 1)
    t.shape = shape
    t.strides = strides
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _deleter
    addr = ctypes.addressof(managed)
    with _LIVE_LOCK:
        _LIVE[addr] = (managed, shape, strides, owner)
    try:
        capsule = _PyCapsule_New(addr, b"dltensor", None)
        tensor = from_dlpack(capsule)
    except BaseException:
        with _LIVE_LOCK:
            _LIVE.pop(addr, None)
        raise
    if tensor.device != torch.device("cuda", device_index) or tensor.data_ptr() != ptr:
        raise RuntimeError(f"DLPack import gave {tensor.device} at {tensor.data_ptr():#x}, expected "
                           f"cuda:{device_index} at {ptr:#x}")
    return tensor.untyped_storage()


def tensor_on(storage, dtype, size, storage_offset: int = 0, stride=None):
    """A tensor of ``dtype`` and ``size`` over ``storage`` (not a view of
    another tensor, so ``set_()`` can later detach it)."""
    import torch

    size = tuple(int(s) for s in size)
    if stride is None:
        stride, acc = [], 1
        for s in reversed(size):
            stride.append(acc)
            acc *= max(s, 1)
        stride = tuple(reversed(stride))
    with torch.no_grad():
        t = torch.empty(0, dtype=dtype, device=storage.device)
        t.set_(storage, storage_offset, size, stride)
    return t
