"""Triton helpers for kernels on symmcomm's symmetric memory: a block-wise
barrier over the signal pads, and point-to-point put/wait signals, all with
system-scope release/acquire and **bounded waits**.

Every wait here reads ``%globaltimer`` while it spins and gives up after
``timeout_ns``: instead of hanging the GPU it records what it waited for in
a small status tensor (``new_status()``), makes the call return 0, and lets
later waits of the same kernel give up at once. The Python side then calls
``check_status(status)``, which raises SymmTimeoutError naming the rank,
the operation and the peer. A kernel should skip work that depends on a
failed wait (``if ok: ...``) and still reach its remaining barriers (they
return 0 immediately).

Each helper is executed by every thread of the program (block) and returns
the same value on all of them; it contains its own ``bar.sync``, so it
orders the whole block's memory operations (the one thread per peer that
signals does so after the block's earlier stores, and the block's later
loads follow the acquiring thread). The result is *uniform*: use it in
``if`` conditions freely. Launch 1-D grids of 1-D blocks (Triton's default).

Signal-pad layout (32-bit words of each rank's user signal area, which
symmcomm never touches; all words start at 0 and are left at 0 by matched
operations, so replaying a CUDA graph needs no reset):

- words ``[0, BARRIER_WORDS)``: blockwise_barrier, word ``block_id *
  world_size + peer`` (so ``block_id < BARRIER_WORDS // world_size``);
- words ``[SIGNAL_BASE, ...)``: put_signal/wait_signal, word ``SIGNAL_BASE
  + channel * world_size + sender``.

Kernels that run at the same time on one communicator must not share slots
(different block ids or channels), as with PyTorch's recipes.
"""

from __future__ import annotations

import os

try:
    import triton
    import triton.language as tl
except ImportError as _e:  # pragma: no cover - exercised where triton is missing
    raise ImportError(f"symmcomm.triton needs Triton (pip install triton): {_e}") from _e

from ._types import Result
from .errors import error_for

__all__ = [
    "BARRIER_WORDS",
    "SIGNAL_BASE",
    "STATUS_WORDS",
    "blockwise_barrier",
    "put_signal",
    "wait_signal",
    "globaltimer",
    "flat_block_id",
    "sync_threads",
    "new_status",
    "check_status",
    "timeout_ns",
]

BARRIER_WORDS = 1 << 16
SIGNAL_BASE = BARRIER_WORDS
#: status tensor: [0] 1 after a timeout; [1] operation; [2] peer;
#: [3] block id or channel; [4] rank that gave up.
STATUS_WORDS = 8
OP_NAMES = {1: "blockwise_barrier (signalling the peer)", 2: "blockwise_barrier (waiting for the peer)",
            3: "put_signal (the peer's previous signal was never consumed)", 4: "wait_signal"}


def timeout_ns(seconds: float | None = None) -> int:
    """Nanoseconds a wait may spin: ``seconds``, else SYMM_TIMEOUT (the
    library's device-side bound, default 120 s)."""
    if seconds is None:
        try:
            seconds = float(os.environ.get("SYMM_TIMEOUT", "") or 120.0)
        except ValueError:
            seconds = 120.0
    return max(int(seconds * 1e9), 1)


def new_status(device):
    """A zeroed status tensor for the helpers' ``status_ptr`` argument."""
    import torch

    return torch.zeros(STATUS_WORDS, dtype=torch.int32, device=device)


def check_status(status, what: str = "Triton kernel") -> None:
    """Raise SymmTimeoutError when a wait of the kernel gave up (waits for
    the status tensor's stream). Zero the tensor to reuse it."""
    s = status.tolist()
    if s[0] == 0:
        return
    op = OP_NAMES.get(s[1], f"operation {s[1]}")
    where = "block" if s[1] in (1, 2) else "channel"
    raise error_for(
        int(Result.Timeout),
        f"{what}: rank {s[4]} timed out in {op} waiting for rank {s[2]} ({where} {s[3]}); "
        "the wait gave up after its bound (SYMM_TIMEOUT) instead of hanging",
        "symmcomm.triton",
    )


@triton.jit
def globaltimer():
    """The GPU's nanosecond clock (%globaltimer)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def sync_threads():
    """__syncthreads() for the whole block."""
    tl.inline_asm_elementwise("bar.sync 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def flat_block_id():
    return (tl.program_id(2) * tl.num_programs(1) * tl.num_programs(0)
            + tl.program_id(1) * tl.num_programs(0) + tl.program_id(0))


# One thread per peer (thread t < world_size, t != rank) signals peer t and
# waits for peer t; every thread then joins in bar.red.and, which makes the
# result uniform and orders the block after the acquiring threads.
# $0 ok | $1 pad table | $2 block | $3 rank | $4 world | $5 status | $6 timeout
_BARRIER_ASM = """
{
    .reg .u32 %t, %ok, %old, %slot, %st, %op;
    .reg .u64 %addr, %pad, %t0, %t1, %off;
    .reg .pred %p, %run, %done;
    bar.sync 0;
    mov.u32 %t, %tid.x;
    mov.u32 %ok, 1;
    setp.lt.u32 %run, %t, $4;
    setp.ne.u32 %p, %t, $3;
    and.pred %run, %run, %p;
    @!%run bra BWB_JOIN;
    ld.relaxed.sys.global.u32 %st, [$5];
    setp.ne.u32 %p, %st, 0;
    @%p bra BWB_QUIT;
    mul.wide.u32 %off, %t, 8;
    add.u64 %addr, $1, %off;
    ld.global.u64 %pad, [%addr];
    mad.lo.u32 %slot, $2, $4, $3;
    mul.wide.u32 %off, %slot, 4;
    add.u64 %addr, %pad, %off;
    mov.u64 %t0, %globaltimer;
BWB_SEND:
    atom.release.sys.global.cas.b32 %old, [%addr], 0, 1;
    setp.eq.u32 %p, %old, 0;
    @%p bra BWB_SENT;
    ld.relaxed.sys.global.u32 %st, [$5];
    setp.ne.u32 %p, %st, 0;
    @%p bra BWB_QUIT;
    mov.u64 %t1, %globaltimer;
    sub.u64 %t1, %t1, %t0;
    setp.lt.u64 %p, %t1, $6;
    @%p bra BWB_SEND;
    mov.u32 %op, 1;
    bra BWB_RECORD;
BWB_SENT:
    mul.wide.u32 %off, $3, 8;
    add.u64 %addr, $1, %off;
    ld.global.u64 %pad, [%addr];
    mad.lo.u32 %slot, $2, $4, %t;
    mul.wide.u32 %off, %slot, 4;
    add.u64 %addr, %pad, %off;
    mov.u64 %t0, %globaltimer;
BWB_WAIT:
    atom.acquire.sys.global.cas.b32 %old, [%addr], 1, 0;
    setp.eq.u32 %p, %old, 1;
    @%p bra BWB_JOIN;
    ld.relaxed.sys.global.u32 %st, [$5];
    setp.ne.u32 %p, %st, 0;
    @%p bra BWB_QUIT;
    mov.u64 %t1, %globaltimer;
    sub.u64 %t1, %t1, %t0;
    setp.lt.u64 %p, %t1, $6;
    @%p bra BWB_WAIT;
    mov.u32 %op, 2;
BWB_RECORD:
    atom.relaxed.sys.global.cas.b32 %old, [$5], 0, 1;
    setp.ne.u32 %p, %old, 0;
    @%p bra BWB_QUIT;
    st.relaxed.sys.global.u32 [$5+4], %op;
    st.relaxed.sys.global.u32 [$5+8], %t;
    st.relaxed.sys.global.u32 [$5+12], $2;
    st.relaxed.sys.global.u32 [$5+16], $3;
BWB_QUIT:
    mov.u32 %ok, 0;
BWB_JOIN:
    setp.ne.u32 %p, %ok, 0;
    bar.red.and.pred %done, 0, %p;
    selp.u32 $0, 1, 0, %done;
}
"""

# Thread 0 does one compare-and-swap on word $2 of rank $1's pad, retrying
# until it succeeds or the bound passes; the block then joins (bar.red.and).
# $0 ok | $1 pad table | $2 pad rank | $3 word | $4 status | $5 timeout
# | $6 peer (for the record) | $7 channel | $8 rank | CAS, op code: below.
_SIGNAL_ASM = """
{
    .reg .u32 %t, %ok, %old, %st;
    .reg .u64 %addr, %pad, %t0, %t1, %off;
    .reg .pred %p, %done;
    bar.sync 0;
    mov.u32 %t, %tid.x;
    mov.u32 %ok, 1;
    setp.ne.u32 %p, %t, 0;
    @%p bra SIG_JOIN;
    ld.relaxed.sys.global.u32 %st, [$4];
    setp.ne.u32 %p, %st, 0;
    @%p bra SIG_QUIT;
    mul.wide.u32 %off, $2, 8;
    add.u64 %addr, $1, %off;
    ld.global.u64 %pad, [%addr];
    mul.wide.u32 %off, $3, 4;
    add.u64 %addr, %pad, %off;
    mov.u64 %t0, %globaltimer;
SIG_TRY:
    atom.SEM.sys.global.cas.b32 %old, [%addr], EXPECT, DESIRED;
    setp.eq.u32 %p, %old, EXPECT;
    @%p bra SIG_JOIN;
    ld.relaxed.sys.global.u32 %st, [$4];
    setp.ne.u32 %p, %st, 0;
    @%p bra SIG_QUIT;
    mov.u64 %t1, %globaltimer;
    sub.u64 %t1, %t1, %t0;
    setp.lt.u64 %p, %t1, $5;
    @%p bra SIG_TRY;
    atom.relaxed.sys.global.cas.b32 %old, [$4], 0, 1;
    setp.ne.u32 %p, %old, 0;
    @%p bra SIG_QUIT;
    st.relaxed.sys.global.u32 [$4+4], OPCODE;
    st.relaxed.sys.global.u32 [$4+8], $6;
    st.relaxed.sys.global.u32 [$4+12], $7;
    st.relaxed.sys.global.u32 [$4+16], $8;
SIG_QUIT:
    mov.u32 %ok, 0;
SIG_JOIN:
    setp.ne.u32 %p, %ok, 0;
    bar.red.and.pred %done, 0, %p;
    selp.u32 $0, 1, 0, %done;
}
"""
# @triton.jit code may only read globals that are constexpr.
_BARRIER = tl.constexpr(_BARRIER_ASM)
_PUT = tl.constexpr(_SIGNAL_ASM.replace("SEM", "release").replace("EXPECT", "0").replace("DESIRED", "1")
                    .replace("OPCODE", "3").replace("SIG_", "PUT_"))
_WAIT = tl.constexpr(_SIGNAL_ASM.replace("SEM", "acquire").replace("EXPECT", "1").replace("DESIRED", "0")
                     .replace("OPCODE", "4").replace("SIG_", "WAIT_"))
_SIGNAL_BASE = tl.constexpr(SIGNAL_BASE)


@triton.jit
def blockwise_barrier(signal_pad_ptrs, block_id, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, status_ptr,
                      timeout_ns):
    """Barrier of this block with the blocks of the same ``block_id`` (None:
    this program's id) on every rank. Release/acquire at system scope: the
    block's stores before it are visible to the peers' blocks after theirs.
    Returns 1, or 0 when a wait gave up (recorded in ``status_ptr``).

    ``signal_pad_ptrs`` is a handle's ``signal_pad_ptrs_dev``; ``status_ptr``
    an int32 tensor from new_status(); ``timeout_ns`` from timeout_ns()."""
    if block_id is None:
        block_id = flat_block_id()
    return tl.inline_asm_elementwise(
        _BARRIER,
        "=r,l,r,r,r,l,l",
        [tl.cast(signal_pad_ptrs, tl.int64), tl.cast(block_id, tl.int32), tl.cast(RANK, tl.int32),
         tl.cast(WORLD_SIZE, tl.int32), tl.cast(status_ptr, tl.int64), tl.cast(timeout_ns, tl.int64)],
        dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def put_signal(signal_pad_ptrs, dst_rank, channel, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, status_ptr,
               timeout_ns):
    """Set this rank's flag on ``channel`` in ``dst_rank``'s pad (release,
    system scope) once the block's earlier stores are done, after the peer
    consumed the previous one. Returns 1, or 0 when that wait gave up."""
    word = _SIGNAL_BASE + channel * WORLD_SIZE + RANK
    return tl.inline_asm_elementwise(
        _PUT,
        "=r,l,r,r,l,l,r,r,r",
        [tl.cast(signal_pad_ptrs, tl.int64), tl.cast(dst_rank, tl.int32), tl.cast(word, tl.int32),
         tl.cast(status_ptr, tl.int64), tl.cast(timeout_ns, tl.int64), tl.cast(dst_rank, tl.int32),
         tl.cast(channel, tl.int32), tl.cast(RANK, tl.int32)],
        dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def wait_signal(signal_pad_ptrs, src_rank, channel, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, status_ptr,
                timeout_ns):
    """Wait for ``src_rank``'s flag on ``channel`` in this rank's pad and
    consume it (acquire, system scope); the block's later loads see what the
    sender stored before signalling. Returns 1, or 0 when the wait gave up."""
    word = _SIGNAL_BASE + channel * WORLD_SIZE + src_rank
    return tl.inline_asm_elementwise(
        _WAIT,
        "=r,l,r,r,l,l,r,r,r",
        [tl.cast(signal_pad_ptrs, tl.int64), tl.cast(RANK, tl.int32), tl.cast(word, tl.int32),
         tl.cast(status_ptr, tl.int64), tl.cast(timeout_ns, tl.int64), tl.cast(src_rank, tl.int32),
         tl.cast(channel, tl.int32), tl.cast(RANK, tl.int32)],
        dtype=tl.int32, is_pure=False, pack=1)
