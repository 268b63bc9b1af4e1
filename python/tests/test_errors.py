"""Errors: the exception classes, the library's messages reaching Python,
and argument errors that need no GPU."""

import pickle

import pytest

import symmcomm
from symmcomm import Result
from symmcomm.errors import error_for


def test_one_class_per_result_code():
    classes = {}
    for code in Result:
        if code == Result.Success:
            continue
        e = error_for(code, "msg", "api")
        assert isinstance(e, symmcomm.SymmError)
        assert e.code == code and e.message == "msg" and e.api == "api"
        assert str(e) == f"{code.c_name} ({int(code)}): msg"
        classes[code] = type(e)
    assert len(set(classes.values())) == len(classes)
    assert issubclass(classes[Result.Timeout], TimeoutError)
    assert issubclass(classes[Result.InvalidArgument], ValueError)
    assert issubclass(classes[Result.NotSupported], NotImplementedError)
    assert type(error_for(42, "x")) is symmcomm.SymmError
    assert "unknown result 42" in str(error_for(42, "x"))


def test_errors_pickle():
    e = error_for(Result.Timeout, "rank 1 timed out", "symmAllReduce")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and back.code == e.code and back.message == e.message


def test_error_strings_from_the_library(lib):
    for code in Result:
        assert lib.symmGetErrorString(code), code
    assert lib.symmGetErrorString(99) == "unknown result code"


def test_c_message_reaches_python(lib):
    # A call that fails in the library before touching a GPU: nranks 0.
    uid = lib.symmGetUniqueId()
    with pytest.raises(symmcomm.SymmInvalidArgumentError) as e:
        lib.symmCommInitRank(0, uid, 0)
    assert e.value.code == Result.InvalidArgument
    assert e.value.api == "symmCommInitRank"
    assert "nranks is 0" in e.value.message


def test_null_communicator(lib):
    with pytest.raises(symmcomm.SymmInvalidArgumentError) as e:
        lib.symmCommCount(None)
    assert "comm" in e.value.message


def test_unique_id(lib):
    a, b = lib.symmGetUniqueId(), symmcomm.get_unique_id(lib)
    assert isinstance(a, bytes) and len(a) == symmcomm.UNIQUE_ID_BYTES
    assert a != b


@pytest.mark.parametrize("uid, why", [
    (b"short", "has 5 bytes"),
    ("zz" * 128, "not hex"),
    (12345, "must be bytes"),
])
def test_bad_unique_id(lib, uid, why):
    with pytest.raises(symmcomm.SymmInvalidArgumentError) as e:
        symmcomm.Communicator.from_unique_id(uid, 0, 2, device=0, library=lib)
    assert why in str(e.value)


def test_bad_rank_types(lib):
    uid = lib.symmGetUniqueId()
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match="rank must be an int"):
        symmcomm.Communicator.from_unique_id(uid, "0", 2, library=lib)
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match="world_size must be an int, not bool"):
        symmcomm.Communicator.from_unique_id(uid, 0, True, library=lib)
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match="device -1 is negative"):
        symmcomm.Communicator.from_unique_id(uid, 0, 2, device=-1, library=lib)
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match="not a CUDA device"):
        symmcomm.Communicator.from_unique_id(uid, 0, 2, device="cpu", library=lib)


def test_world_size_zero_is_the_librarys_error(lib):
    # Python passes it through; the library's message comes back.
    uid = lib.symmGetUniqueId().hex()
    with pytest.raises(symmcomm.SymmInvalidArgumentError) as e:
        symmcomm.Communicator.from_unique_id(uid, 0, 0, library=lib)
    assert "nranks is 0; it must be at least 1" in e.value.message


def test_missing_function_is_not_supported(lib, monkeypatch):
    monkeypatch.delitem(lib._funcs, "symmCommSplit", raising=False)
    with pytest.raises(symmcomm.SymmNotSupportedError) as e:
        lib.symmCommSplit(None, 0, 0)
    assert "symmCommSplit is not in the loaded library" in str(e.value)
    assert lib.path in str(e.value)
    with pytest.raises(AttributeError):
        lib.fn("symmNoSuchFunction")


def test_group_calls_balance(lib):
    with symmcomm.group(lib):
        with symmcomm.group(lib):
            pass
    # A body that raises still ends the group, and its own error wins.
    with pytest.raises(KeyError):
        with symmcomm.group(lib):
            raise KeyError("body")
    symmcomm.group_start(lib)
    symmcomm.group_end(lib)
    # Every level above was closed: one more end has no start to match.
    with pytest.raises(symmcomm.SymmInvalidUsageError):
        symmcomm.group_end(lib)


def _has_cuda_driver() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_has_cuda_driver(), reason="this machine has a CUDA driver")
def test_no_driver_is_a_cuda_error_with_the_reason(lib):
    # One rank needs no peer: the call reaches the device step and says why it failed.
    with pytest.raises(symmcomm.SymmCudaError) as e:
        symmcomm.Communicator.from_unique_id(symmcomm.get_unique_id(lib), 0, 1, library=lib)
    assert e.value.code == Result.UnhandledCudaError
    assert "libcuda.so.1" in e.value.message
