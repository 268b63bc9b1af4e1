"""The 2-D device-count all-to-all-v (all_to_all_vdev_2d and
all_to_all_vdev_2d_offset, PyTorch's mixture-of-experts dispatch and
combine) without a GPU: the signatures match torch.ops.symm_mem's, the
argument checks that need no tensor, and the library's own checks through
the ctypes table. tests/gpu/multirank.py moves data on GPUs."""

import importlib.util
import inspect

import pytest

import symmcomm
import symmcomm.symmetric_memory as symm_mem
from symmcomm import communicator as C
from symmcomm._types import DataType


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


P = inspect.Parameter


def test_module_functions_take_torchs_arguments():
    # torch.ops.symm_mem.all_to_all_vdev_2d(Tensor input, Tensor(a!) out, Tensor in_splits,
    #     Tensor(a!) out_splits_offsets, str group_name, int? major_align=None)
    assert [n for n, _, _ in _params(symm_mem.all_to_all_vdev_2d)] == [
        "input", "out", "in_splits", "out_splits_offsets", "group_name", "major_align"]
    assert inspect.signature(symm_mem.all_to_all_vdev_2d).parameters["major_align"].default is None
    # torch.ops.symm_mem.all_to_all_vdev_2d_offset(Tensor input, Tensor(a!) out,
    #     Tensor in_splits_offsets, Tensor(a!) out_splits_offsets, str group_name)
    assert [n for n, _, _ in _params(symm_mem.all_to_all_vdev_2d_offset)] == [
        "input", "out", "in_splits_offsets", "out_splits_offsets", "group_name"]
    assert {"all_to_all_vdev_2d", "all_to_all_vdev_2d_offset"} <= set(symm_mem.__all__)


def test_communicator_methods_mirror_all_to_all_vdev():
    one_d = _params(symmcomm.Communicator.all_to_all_vdev)
    assert one_d[-1] == ("stream", P.KEYWORD_ONLY, None)
    assert _params(symmcomm.Communicator.all_to_all_vdev_2d) == [
        ("self", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("input", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("out", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("in_splits", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("out_splits_offsets", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("major_align", P.KEYWORD_ONLY, None),
        ("stream", P.KEYWORD_ONLY, None),
    ]
    assert _params(symmcomm.Communicator.all_to_all_vdev_2d_offset) == [
        ("self", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("input", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("out", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("in_splits_offsets", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("out_splits_offsets", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("stream", P.KEYWORD_ONLY, None),
    ]


@pytest.mark.parametrize("nsplits, world, ne", [(8, 8, 1), (16, 8, 2), (12, 4, 3), (1024, 8, 128), (3, 1, 3)])
def test_experts_per_rank_is_numel_over_world_size(nsplits, world, ne):
    assert C._experts_per_rank(nsplits, world, "in_splits") == ne


@pytest.mark.parametrize("nsplits, world", [(0, 4), (6, 4), (3, 8)])
def test_splits_must_be_a_multiple_of_world_size(nsplits, world):
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match=f"in_splits has {nsplits} splits per row"):
        C._experts_per_rank(nsplits, world, "in_splits")


def test_major_align():
    assert C._major_align(None) == 1
    assert C._major_align(0) == 0
    assert C._major_align(16) == 16
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match="major_align is -1"):
        C._major_align(-1)
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match="not bool"):
        C._major_align(True)
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match="not float"):
        C._major_align(8.0)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_tensor_forms_say_they_need_torch():
    comm = object.__new__(symmcomm.Communicator)  # no communicator: the torch check comes first
    with pytest.raises(ImportError, match="needs PyTorch"):
        comm.all_to_all_vdev_2d(None, None, None, None, major_align=8)
    with pytest.raises(ImportError, match="needs PyTorch"):
        comm.all_to_all_vdev_2d_offset(None, None, None, None)
    with pytest.raises(ImportError, match="needs PyTorch"):
        symm_mem.all_to_all_vdev_2d(None, None, None, None)


@pytest.mark.parametrize("api", ["symmAllToAllvDevice2d", "symmAllToAllvDevice2dOffset"])
def test_library_checks_the_communicator_first(lib, api):
    fake = 1 << 20  # never dereferenced: the communicator is checked first
    args = [fake, fake, fake, 4, fake, 2] + ([1] if api == "symmAllToAllvDevice2d" else []) + [7168]
    with pytest.raises(symmcomm.SymmInvalidArgumentError) as e:
        getattr(lib, api)(*args, DataType.Int32, None, None)
    assert e.value.api == api
    assert "comm" in e.value.message


def test_library_takes_64_bit_expert_counts(lib):
    # localExperts and majorAlign are int64_t: a value past 32 bits reaches
    # the library intact (and is refused there, after the communicator).
    with pytest.raises(symmcomm.SymmInvalidArgumentError, match="comm"):
        lib.symmAllToAllvDevice2d(8, 8, 8, 4, 8, 1 << 40, -(1 << 40), 1, DataType.Int8, None, None)
