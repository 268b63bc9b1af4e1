"""A one-shot all-reduce written in Triton on symmcomm's symmetric memory.

Each rank writes its input into a symmetric buffer; one kernel then has
every block (1) meet the same block on every other rank at a barrier over
the signal pads, (2) read its slice of *every* rank's buffer straight from
peer memory and sum it in fp32, (3) store the result locally, and (4) meet
the peers again, so that no rank overwrites its buffer while another still
reads it. The barriers are symmcomm.triton's bounded ones: if a peer never
arrives, the kernel gives up after SYMM_TIMEOUT and check_status() raises
SymmTimeoutError instead of the GPU hanging.

    torchrun --nproc-per-node 2 examples/python/one_shot_all_reduce_triton.py [--numel N] [--dtype bf16]

(On one GPU, for testing only: SYMM_TEST_SHARED_DEVICES=1 lets the ranks
share it.) The script checks the result against an exact reference and
exits non-zero on a mismatch.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
import triton
import triton.language as tl

import symmcomm.symmetric_memory as symm_mem
import symmcomm.triton as symm_triton


@triton.jit
def one_shot_all_reduce_kernel(
    buffer_ptrs,  # handle.buffer_ptrs_dev: every rank's address of the buffer
    signal_pad_ptrs,  # handle.signal_pad_ptrs_dev
    out_ptr,
    numel,
    byte_offset,  # where the input starts inside the buffer
    status_ptr,
    timeout_ns,
    RANK: tl.constexpr,
    WORLD_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # Every rank's input is in place before any block reads a peer's.
    ok = symm_triton.blockwise_barrier(signal_pad_ptrs, None, RANK, WORLD_SIZE, status_ptr, timeout_ns)
    if ok != 0:
        elem = out_ptr.dtype.element_ty
        table = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        step = tl.num_programs(0) * BLOCK_SIZE
        for start in range(tl.program_id(0) * BLOCK_SIZE, numel, step):
            offs = start + tl.arange(0, BLOCK_SIZE)
            mask = offs < numel
            acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            for r in tl.static_range(WORLD_SIZE):
                base = tl.load(table + r).to(tl.int64) + byte_offset
                src = base.to(tl.pointer_type(elem))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(elem), mask=mask)
    # No rank reuses its buffer until every peer has read it. After a
    # timeout above this returns at once (the status already holds an error).
    symm_triton.blockwise_barrier(signal_pad_ptrs, None, RANK, WORLD_SIZE, status_ptr, timeout_ns)


def one_shot_all_reduce(inp: torch.Tensor, status: torch.Tensor, out: torch.Tensor | None = None,
                        block_size: int = 2048, max_blocks: int = 64) -> torch.Tensor:
    """Sum of ``inp`` over ranks; ``inp`` is a contiguous symmetric tensor
    (symm_mem.empty) of the same shape on every rank, bf16, fp16 or fp32.
    Enqueued on the current stream (graph-capturable); call
    symm_triton.check_status(status) to find out whether a wait gave up."""
    if inp.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"this example sums bf16, fp16 or fp32, not {inp.dtype}")
    if not inp.is_contiguous():
        raise ValueError("inp must be contiguous")
    hdl = symm_mem.rendezvous(inp)
    out = torch.empty_like(inp) if out is None else out
    byte_offset = inp.data_ptr() - hdl.buffer_ptrs[hdl.rank]
    numel = inp.numel()
    blocks = max(1, min(triton.cdiv(numel, block_size), max_blocks))
    assert blocks * hdl.world_size <= symm_triton.BARRIER_WORDS, "more blocks than barrier slots"
    one_shot_all_reduce_kernel[(blocks,)](
        hdl.buffer_ptrs_dev, hdl.signal_pad_ptrs_dev, out, numel, byte_offset, status,
        symm_triton.timeout_ns(),
        RANK=hdl.rank, WORLD_SIZE=hdl.world_size, BLOCK_SIZE=block_size, num_warps=8,
    )
    return out


def rank_input(rank: int, numel: int, dtype, device) -> torch.Tensor:
    """Multiples of 1/8 in [-1, 1]: exact in every dtype here, and so are
    their sums over up to 8 ranks."""
    i = torch.arange(numel, dtype=torch.int64, device=device)
    return (((i * 37 + rank * 11) % 17 - 8).to(torch.float32) / 8).to(dtype)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numel", type=int, default=1 << 20)
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--iters", type=int, default=3)
    args = p.parse_args(argv)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.init_process_group("gloo")  # any backend: it only carries symmcomm's unique id
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device())

    comm = symm_mem.get_communicator()  # the default group's communicator (collective)
    buf = symm_mem.empty(args.numel, dtype=dtype, device=device)
    status = symm_triton.new_status(device)
    expected = sum(rank_input(r, args.numel, torch.float64, device) for r in range(world)).to(dtype)
    ok = True
    for it in range(args.iters):
        buf.copy_(rank_input(rank, args.numel, dtype, device) * (1 if it % 2 == 0 else -1))
        out = one_shot_all_reduce(buf, status)
        symm_triton.check_status(status, "one-shot all-reduce")  # raises SymmTimeoutError if a wait gave up
        want = expected if it % 2 == 0 else -expected
        bad = (out != want).sum().item()
        if bad:
            ok = False
            print(f"rank {rank}: iteration {it}: {bad} of {args.numel} elements wrong", file=sys.stderr)
    print(f"rank {rank}/{world}: one-shot all-reduce (Triton) of {args.numel} {args.dtype}: "
          f"{'OK' if ok else 'WRONG'}", flush=True)
    del buf, out
    symm_mem.collect()
    comm.destroy()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
