"""The package imports without torch or Triton, exports what it documents,
and its pure-Python helpers check their arguments without a GPU."""

import importlib.util
import subprocess
import sys

import pytest

import symmcomm
from symmcomm import _types as T


def test_import_needs_neither_torch_nor_triton(repo_root):
    code = ("import sys, symmcomm, symmcomm.symmetric_memory, symmcomm.fused, symmcomm.communicator\n"
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(repo_root / "python"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_public_names():
    for name in symmcomm.__all__:
        assert hasattr(symmcomm, name), name
    assert symmcomm.symmetric_memory.empty is not None  # loaded on first use
    with pytest.raises(AttributeError):
        symmcomm.no_such_name


@pytest.mark.skipif(importlib.util.find_spec("triton") is not None, reason="Triton is installed here")
def test_triton_helpers_say_what_they_need():
    with pytest.raises(ImportError, match=r"symmcomm.triton needs Triton \(pip install triton\)"):
        import symmcomm.triton  # noqa: F401


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_tensor_features_say_they_need_torch():
    import symmcomm.symmetric_memory as symm_mem

    with pytest.raises(ImportError, match="needs PyTorch"):
        symm_mem.empty(4)
    with pytest.raises(ImportError, match="needs PyTorch"):
        symmcomm.Communicator()
    with pytest.raises(ImportError, match="needs PyTorch"):
        symmcomm.all_gather_matmul(None, weight=None)
    # torch.ops.symm_mem's all-reduce names: present, and they say what they need.
    for name in ("one_shot_all_reduce", "one_shot_all_reduce_out", "two_shot_all_reduce_", "two_shot_all_reduce_out"):
        assert name in symm_mem.__all__ and f"torch.ops.symm_mem.{name}" in getattr(symm_mem, name).__doc__
    with pytest.raises(ImportError, match="needs PyTorch"):
        symm_mem.two_shot_all_reduce_(None, "sum", "0")
    # ... and its fused matmul ops, by PyTorch's names.
    for name in ("fused_all_gather_matmul", "fused_matmul_reduce_scatter"):
        assert name in symm_mem.__all__ and f"torch.ops.symm_mem.{name}" in getattr(symm_mem, name).__doc__
    with pytest.raises(ImportError, match="needs PyTorch"):
        symm_mem.fused_all_gather_matmul(None, [None], 0, "0")
    with pytest.raises(ImportError, match="needs PyTorch"):
        symm_mem.fused_matmul_reduce_scatter(None, None, "sum", 0, "0")


def test_fused_dimensions():
    from symmcomm import fused

    assert fused._dim(-1, 3, "gather_dim") == 2 and fused._dim(1, 3, "gather_dim") == 1
    for bad in (3, -4, True, 1.0, None):
        with pytest.raises(symmcomm.SymmInvalidArgumentError, match="is not a dimension of a 3-D tensor"):
            fused._dim(bad, 3, "gather_dim")


def test_dtype_names_without_torch():
    assert T.datatype_for("float8_e4m3fn") == T.DataType.Float8e4m3
    assert T.datatype_for("torch.bfloat16") == T.DataType.Bfloat16
    assert T.datatype_for(T.DataType.Int64) == T.DataType.Int64
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match="no element type for torch.int16"):
        T.datatype_for("int16")


def test_enums_print_their_c_names():
    assert T.Result.Timeout.c_name == "symmTimeout"
    assert T.DataType.Float8e5m2.c_name == "symmFloat8e5m2"
    assert T.ReduceOp.AVG is T.ReduceOp.Avg and T.ReduceOp.Avg.c_name == "symmAvg"
    assert T.ScaleMode.ScaleRowwise.c_name == "symmScaleRowwise"
    assert T.Cmp.CmpGeq.c_name == "symmCmpGeq"
