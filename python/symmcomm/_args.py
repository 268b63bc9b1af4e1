"""Checks of the arguments the Python layer takes before they reach the C
calls: ints, device ordinals, unique ids, sizes, and the all-to-all-v
split shapes, each refused with SymmInvalidArgumentError and a message
naming the argument."""

from __future__ import annotations

import operator

from ._torch import invalid, require_torch
from ._types import UNIQUE_ID_BYTES


def _unique_id_bytes(unique_id) -> bytes:
    if isinstance(unique_id, str):
        try:
            unique_id = bytes.fromhex(unique_id)
        except ValueError:
            raise invalid("unique_id is a str but not hex (pass the bytes, or bytes.hex())") from None
    try:
        raw = bytes(memoryview(unique_id))
    except TypeError:
        raise invalid(f"unique_id must be bytes from get_unique_id(), not {type(unique_id).__name__}") from None
    if len(raw) != UNIQUE_ID_BYTES:
        raise invalid(f"unique_id has {len(raw)} bytes; a symmcomm unique id has {UNIQUE_ID_BYTES}")
    return raw


def _int_arg(value, name: str) -> int:
    if isinstance(value, bool):
        raise invalid(f"{name} must be an int, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise invalid(f"{name} must be an int, not {type(value).__name__}") from None


def _experts_per_rank(nsplits: int, world_size: int, name: str) -> int:
    """Local experts per rank of a 2-D all-to-all-v whose ``name`` holds
    ``nsplits`` splits per row: nsplits // world_size, as PyTorch infers
    it (``in_splits.numel() // world_size``), the rest refused."""
    if nsplits <= 0 or nsplits % world_size:
        raise invalid(f"{name} has {nsplits} splits per row: it needs local_experts x world_size ({world_size}), "
                      f"local_experts at least 1")
    return nsplits // world_size


def _row_elems(t) -> int:
    """Elements per row along dim 0 (1 for a 1-D tensor; an empty row
    counts 1): the device-count all-to-alls count rows, and the library
    takes the row's size instead of scaled counts."""
    n = 1
    for d in t.shape[1:]:
        n *= int(d)
    return max(n, 1)


def _major_align(major_align) -> int:
    """all_to_all_vdev_2d's ``major_align``: None (PyTorch's default) is 1;
    0 packs the experts' groups (PyTorch refuses 0)."""
    if major_align is None:
        return 1
    align = _int_arg(major_align, "major_align")
    if align < 0:
        raise invalid(f"major_align is {align}; it must be 0 or more (rows)")
    return align


def _device_index(device) -> int | None:
    """An int device ordinal from an int, "cuda:N", or a torch.device."""
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise invalid(f"device {device} is negative")
        return device
    if isinstance(device, str):
        if device == "cuda":
            torch = require_torch("device='cuda'")
            return torch.cuda.current_device()
        if device.startswith("cuda:") and device[5:].isdigit():
            return int(device[5:])
        raise invalid(f"device {device!r} is not a CUDA device (use an int, 'cuda:N' or torch.device)")
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if kind == "cuda":
        if index is None:
            return require_torch("torch.device('cuda')").cuda.current_device()
        return int(index)
    raise invalid(f"device {device!r} is not a CUDA device")


def _size_arg(size) -> tuple:
    if len(size) == 1 and not isinstance(size[0], int):
        size = tuple(size[0])
    try:
        return tuple(operator.index(s) for s in size)
    except TypeError:
        raise invalid(f"size must be ints or one sequence of ints, not {size!r}") from None
