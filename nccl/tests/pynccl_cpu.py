"""pynccl-style use of libsymmcomm_nccl.so (as vLLM/SGLang load NCCL): ctypes
by path, NCCL's argument types. GPU-free checks: version, unique id, error
strings, and that a communicator init without a GPU fails with a message
instead of crashing (with a GPU, a one-rank communicator is created)."""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


lib.ncclGetErrorString.restype = ctypes.c_char_p
lib.ncclGetLastError.restype = ctypes.c_char_p
lib.ncclGetLastError.argtypes = [ctypes.c_void_p]
lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, NcclUniqueId, ctypes.c_int]

version = ctypes.c_int()
assert lib.ncclGetVersion(ctypes.byref(version)) == 0
assert version.value == 22809, version.value
uid = NcclUniqueId()
assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0, lib.ncclGetLastError(None)
raw = bytes(b & 0xFF for b in uid.internal)
assert raw[:8] == b"SYMMNCCL" and raw[8] & 3 == 3, raw[:9]
assert lib.ncclGetErrorString(4) == b"invalid argument (run with SYMM_DEBUG=INFO for details)"
comm = ctypes.c_void_p()
rc = lib.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)
if rc == 0:
    assert lib.ncclCommDestroy(comm) == 0
else:
    msg = lib.ncclGetLastError(None)
    assert msg and comm.value is None, (rc, msg)
    print("init without a GPU:", rc, msg.decode())
print("pynccl_cpu: OK")
