"""GPU checks of the symmcomm Python package, one process per rank under
torchrun (ranks may share one GPU with SYMM_TEST_SHARED_DEVICES=1):

    torchrun --standalone --nproc-per-node 4 python/tests/gpu/multirank.py [--only NAME,...]

Every check runs on every rank; each rank compares its own results with a
reference it computes itself (exact, or fp64 rounded to the dtype), and the
ranks agree on pass/fail over a gloo group (independent of symmcomm), so a
failure on one rank never leaves the others waiting. Rank 0 prints one line
per check: PASS, FAIL (with the first failing rank's reason) or SKIP (with
the reason); the exit code is 1 when anything failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))

import symmcomm  # noqa: E402
import symmcomm.symmetric_memory as symm_mem  # noqa: E402
from symmcomm import ReduceOp  # noqa: E402

CHECKS = []

try:  # Triton kernels of the checks are module-level (Triton resolves globals)
    import triton
    import triton.language as tl

    import symmcomm.triton as symm_triton

    TRITON_MISSING = ""

    @triton.jit
    def _wait_forever(pads, src, status, timeout, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr):
        ok = symm_triton.wait_signal(pads, src, 77, RANK, WORLD_SIZE, status, timeout)
        # After a recorded timeout every later wait gives up at once.
        ok2 = symm_triton.blockwise_barrier(pads, 60000 // WORLD_SIZE, RANK, WORLD_SIZE, status, timeout)
        tl.store(status + 7, ok + 10 * ok2)
except ImportError as _e:
    TRITON_MISSING = str(_e)


class Skip(Exception):
    pass


def check(fn):
    CHECKS.append(fn)
    return fn


class Ctx:
    def __init__(self):
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.comm: symmcomm.Communicator | None = None
        self.failures: list[str] = []

    def expect(self, cond: bool, what: str) -> None:
        if not cond:
            self.failures.append(what)
            if len(self.failures) > 20:
                raise AssertionError("; ".join(self.failures[:20]) + " ... (more)")


# ----------------------------------------------------------------- data ---

MOVE_DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
               "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "complex64", "int16"]
REDUCE_DTYPES = MOVE_DTYPES
OPS = [ReduceOp.Sum, ReduceOp.Prod, ReduceOp.Max, ReduceOp.Min, ReduceOp.Avg]
SIZES = [7, 4099, 150_001]


def values(rank: int, n: int, dtype: torch.dtype, salt: int, device) -> torch.Tensor:
    """Small integers (exact in every dtype, sums and products too), as
    float64 (or complex128) on the device: the reference's inputs."""
    i = torch.arange(n, dtype=torch.int64, device=device)
    v = (i * 7 + rank * 13 + salt * 5) % 7 - 3  # [-3, 3]
    if dtype == torch.bool:
        v = v.remainder(2)
    elif not dtype.is_signed and not dtype.is_complex and not dtype.is_floating_point:
        v = v.remainder(4)  # unsigned: [0, 3]
    v = v.to(torch.float64)
    if dtype.is_complex:
        w = ((i * 3 + rank * 5 + salt) % 5 - 2).to(torch.float64)
        return torch.complex(v, w)
    return v


def as_dtype(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return ref != 0
    if dtype in (torch.uint32, torch.uint64):
        return ref.to(torch.int64).to(dtype)
    return ref.to(dtype)


def to_ref(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as float64/complex128 for comparison."""
    if t.dtype.is_complex:
        return t.to(torch.complex128)
    if t.dtype in (torch.uint32, torch.uint64):
        return t.to(torch.int64).to(torch.float64)
    return t.to(torch.float64)


def reference_reduce(inputs: list[torch.Tensor], op: ReduceOp, dtype) -> torch.Tensor:
    stack = torch.stack(inputs)
    if dtype == torch.bool:
        op = {ReduceOp.Sum: ReduceOp.Max, ReduceOp.Prod: ReduceOp.Min}.get(op, op)
    if op == ReduceOp.Sum:
        r = stack.sum(0)
    elif op == ReduceOp.Prod:
        r = stack.prod(0)
    elif op == ReduceOp.Max:
        r = stack.max(0).values
    elif op == ReduceOp.Min:
        r = stack.min(0).values
    else:
        s = stack.sum(0)
        if dtype.is_floating_point or dtype.is_complex:
            r = s / len(inputs)
        else:
            r = torch.trunc(s / len(inputs))
    return as_dtype(r, dtype)


def same(got: torch.Tensor, want: torch.Tensor, dtype, op=None, world=1) -> bool:
    g, w = to_ref(got), to_ref(want)
    if op == ReduceOp.Avg and (dtype.is_floating_point or dtype.is_complex) and world & (world - 1):
        # avg over a non-power-of-two rank count may round twice: one unit.
        eps = torch.finfo(dtype if not dtype.is_complex else torch.float32).eps
        return bool(torch.allclose(g, w, rtol=2 * eps, atol=2 * eps))
    return bool(torch.equal(g, w))


def dtype_of(name: str) -> torch.dtype:
    return getattr(torch, name)


def reducible(name: str, op: ReduceOp) -> bool:
    if name == "int16":
        return False
    if name == "bool":
        return op != ReduceOp.Avg
    if name.startswith("complex"):
        return op in (ReduceOp.Sum, ReduceOp.Avg)
    return True


# --------------------------------------------------------------- checks ---

@check
def collectives_every_dtype(c: Ctx):
    """all_reduce (every op, in place and out of place), reduce_scatter_tensor,
    reduce, all_gather_into_tensor, broadcast, all_to_all_single (equal and
    uneven splits), send/recv (grouped ring and plain pair), every dtype, three sizes, fp64/exact
    reference; dtypes symmcomm cannot reduce must raise."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    unsupported = []
    for name in REDUCE_DTYPES:
        try:
            dtype = dtype_of(name)
            probe = as_dtype(torch.zeros(2, dtype=torch.float64, device=dev), dtype)
            to_ref(probe.clone())
            torch.empty(2, dtype=dtype, device=dev).copy_(probe)
        except (RuntimeError, TypeError, AttributeError) as e:
            unsupported.append(f"{name} ({e.__class__.__name__})")
            continue
        for n in SIZES:
            ins = [values(r, n, dtype, 1, dev) for r in range(W)]
            mine = as_dtype(ins[R], dtype)
            for op in OPS:
                tag = f"{name} n={n} {op.name}"
                if not reducible(name, op):
                    try:
                        comm.all_reduce(mine.clone(), op)
                        c.expect(False, f"all_reduce {tag}: no error for an unsupported reduction")
                    except symmcomm.SymmInvalidArgumentError:
                        pass
                    continue
                want = reference_reduce(ins, op, dtype)
                x = mine.clone()
                comm.all_reduce(x, op)
                c.expect(same(x, want, dtype, op, W), f"all_reduce in place {tag}")
                out = torch.empty_like(mine)
                comm.all_reduce(mine, op, out=out)
                c.expect(same(out, want, dtype, op, W), f"all_reduce out of place {tag}")
                # reduce-scatter: input W*n, block b of rank r = values(r, ..) shifted.
                rs_in = [values(r, n * W, dtype, 2, dev) for r in range(W)]
                rs_out = torch.empty(n, dtype=dtype, device=dev)
                comm.reduce_scatter_tensor(rs_out, as_dtype(rs_in[R], dtype), op)
                rs_want = reference_reduce([x_[R * n:(R + 1) * n] for x_ in rs_in], op, dtype)
                c.expect(same(rs_out, rs_want, dtype, op, W), f"reduce_scatter_tensor {tag}")
                root = W - 1
                red = mine.clone()
                comm.reduce(red, root, op)
                if R == root:
                    c.expect(same(red, want, dtype, op, W), f"reduce {tag}")
            # Data movement (every dtype, bit for bit).
            tag = f"{name} n={n}"
            gathered = torch.empty(W * n, dtype=dtype, device=dev)
            comm.all_gather_into_tensor(gathered, mine)
            c.expect(same(gathered, as_dtype(torch.cat(ins), dtype), dtype), f"all_gather_into_tensor {tag}")
            inplace = torch.empty(W * n, dtype=dtype, device=dev)
            inplace[R * n:(R + 1) * n].copy_(mine)
            comm.all_gather_into_tensor(inplace, inplace[R * n:(R + 1) * n])
            c.expect(same(inplace, gathered, dtype), f"all_gather_into_tensor in place {tag}")
            src = 1 % W
            b = mine.clone()
            comm.broadcast(b, src)
            c.expect(same(b, as_dtype(ins[src], dtype), dtype), f"broadcast {tag}")
            a2a_in = [values(r, n * W, dtype, 3, dev) for r in range(W)]
            a2a_out = torch.empty(n * W, dtype=dtype, device=dev)
            comm.all_to_all_single(a2a_out, as_dtype(a2a_in[R], dtype))
            a2a_want = as_dtype(torch.cat([a2a_in[r][R * n:(R + 1) * n] for r in range(W)]), dtype)
            c.expect(same(a2a_out, a2a_want, dtype), f"all_to_all_single {tag}")
            # Uneven splits (symmAllToAllv): rank r sends (r + q) % 3 rows of 2
            # to rank q (none for some pairs), rows of value 10 r + q.
            rows_to = [(R + q) % 3 for q in range(W)]
            rows_from = [(q + R) % 3 for q in range(W)]

            def rows(counts, value):
                return torch.cat([torch.full((k, 2), value(q), dtype=torch.int64, device=dev)
                                  for q, k in enumerate(counts)])

            v_in = as_dtype(rows(rows_to, lambda q: 10 * R + q), dtype)
            v_out = torch.empty((sum(rows_from), 2), dtype=dtype, device=dev)
            comm.all_to_all_single(v_out, v_in, output_split_sizes=rows_from, input_split_sizes=rows_to)
            v_want = as_dtype(rows(rows_from, lambda q: 10 * q + R), dtype)
            c.expect(same(v_out, v_want, dtype), f"all_to_all_single with uneven splits {tag}")
            recv = torch.empty_like(mine)
            comm.batch_isend_irecv([symmcomm.P2POp("send", mine, (R + 1) % W),
                                    symmcomm.P2POp("recv", recv, (R - 1) % W)])
            c.expect(same(recv, as_dtype(ins[(R - 1) % W], dtype), dtype), f"grouped send/recv ring {tag}")
            if W >= 2 and R in (0, 1):
                if R == 0:
                    comm.send(mine, 1)
                else:
                    got = comm.recv(torch.empty_like(mine), 0)
                    c.expect(same(got, as_dtype(ins[0], dtype), dtype), f"send/recv pair {tag}")
        torch.cuda.synchronize()
    if unsupported:
        print(f"rank {R}: this torch cannot handle {', '.join(unsupported)} on CUDA; not checked", flush=True)


@check
def collectives_on_symmetric_tensors(c: Ctx):
    """The same collectives with inputs and outputs in symmetric memory (the
    zero-copy path: 1.2 MB, above the LL limit, 1 MiB a rank at 2 ranks)."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    n = 300_003
    ins = [values(r, n, torch.float32, 4, dev) for r in range(W)]
    x = symm_mem.empty(n, dtype=torch.float32, device=dev)
    x.copy_(ins[R].float())
    comm.all_reduce(x)
    c.expect(same(x, sum(ins).float(), torch.float32), "all_reduce sum, symmetric")
    y = symm_mem.empty(W * n, dtype=torch.float32, device=dev)
    x.copy_(ins[R].float())
    comm.all_gather_into_tensor(y, x)
    c.expect(same(y, torch.cat(ins).float(), torch.float32), "all_gather, symmetric")
    out = symm_mem.empty(n, dtype=torch.float32, device=dev)
    comm.reduce_scatter_tensor(out, y)  # block R of y is ins[R] on every rank
    c.expect(same(out, (ins[R] * W).float(), torch.float32), "reduce_scatter, symmetric")
    comm.all_to_all_single(y, torch.cat([ins[R]] * W).float().contiguous())
    c.expect(same(y, torch.cat(ins).float(), torch.float32), "all_to_all_single into a symmetric tensor")
    torch.cuda.synchronize()
    del x, y, out
    symm_mem.collect()


@check
def torch_symm_mem_all_reduce_names(c: Ctx):
    """symmcomm.symmetric_memory's one_shot_all_reduce(_out) and
    two_shot_all_reduce_(out), with torch.ops.symm_mem's arguments (the
    communicator named by the group's name), sum and max, out of place and
    in place, at sizes on both sides of the LL limit."""
    dev, W, R = c.device, c.world, c.rank
    name = dist.group.WORLD.group_name
    for n in (4099, 600_001):  # 8 KB and 1.2 MB: the LL limit is 1 MiB at 2 ranks
        ins = [values(r, n, torch.bfloat16, 6, dev) for r in range(W)]
        x = symm_mem.empty(n, dtype=torch.bfloat16, device=dev)
        x.copy_(ins[R].to(torch.bfloat16))
        want = sum(ins).to(torch.bfloat16)
        got = symm_mem.one_shot_all_reduce(x, "sum", name)
        c.expect(got is not x and same(got, want, torch.bfloat16), f"one_shot_all_reduce sum, {n}")
        c.expect(same(x, ins[R].to(torch.bfloat16), torch.bfloat16), f"one_shot_all_reduce left its input, {n}")
        out = torch.empty_like(x)
        r = symm_mem.one_shot_all_reduce_out(x, "max", name, out)
        want_max = torch.stack(ins).amax(0).to(torch.bfloat16)
        c.expect(r is out and same(out, want_max, torch.bfloat16), f"one_shot_all_reduce_out max, {n}")
        r = symm_mem.two_shot_all_reduce_out(x, "sum", name, out)
        c.expect(r is out and same(out, want, torch.bfloat16), f"two_shot_all_reduce_out sum, {n}")
        r = symm_mem.two_shot_all_reduce_(x, "sum", name)
        c.expect(r is x and same(x, want, torch.bfloat16), f"two_shot_all_reduce_ sum in place, {n}")
        torch.cuda.synchronize()
        del x, got, out, r
    symm_mem.collect()
    try:
        symm_mem.two_shot_all_reduce_(torch.empty(8, device=dev), "median", name)
        c.expect(False, "reduce_op 'median' was accepted")
    except symmcomm.SymmError as e:
        c.expect("median" in str(e), f"the bad reduce_op's message does not name it: {e}")


@check
def all_reduce_add_rms_norm(c: Ctx):
    """Communicator.all_reduce_add_rms_norm against torch: the sum plus the
    residual, then torch's rms_norm, for bf16/fp16/fp32, 1 and 300 tokens
    (the fused kernel and the two-kernel form), in place (the default) and
    into new tensors."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    hidden = 2048
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for tokens in (1, 300):
            g = torch.Generator(device="cpu").manual_seed(11)
            ins = [torch.randn(tokens, hidden, generator=g) / 4 for _ in range(W)]
            res = torch.randn(tokens, hidden, generator=g)
            w = 1 + torch.rand(hidden, generator=g)
            x = sum(i.to(dtype).double() for i in ins) + res.to(dtype).double()
            want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w.to(dtype).double()
            tol = {torch.bfloat16: 3e-2, torch.float16: 4e-3, torch.float32: 1e-4}[dtype]
            for in_place in (True, False):
                inp, r = ins[R].to(dtype).to(dev), res.to(dtype).to(dev)
                kw = {} if in_place else {"out": torch.empty_like(inp), "residual_out": torch.empty_like(r)}
                out, rout = comm.all_reduce_add_rms_norm(inp, r, w.to(dtype).to(dev), 1e-6, **kw)
                torch.cuda.synchronize()
                tag = f"{dtype} {tokens} tokens {'in place' if in_place else 'into new tensors'}"
                c.expect((out is inp) == in_place and (rout is r) == in_place, f"returned tensors, {tag}")
                c.expect(torch.allclose(rout.double().cpu(), x, rtol=tol, atol=tol), f"residual_out, {tag}")
                c.expect(torch.allclose(out.double().cpu(), want, rtol=tol, atol=tol), f"out, {tag}")
    # fp8 out with per-token scales: out * scale reproduces the norm within
    # e4m3's half step (1/16) plus its smallest step.
    g = torch.Generator(device="cpu").manual_seed(12)
    for tokens in (3, 300):
        ins = [torch.randn(tokens, hidden, generator=g) / 4 for _ in range(W)]
        res = torch.randn(tokens, hidden, generator=g)
        w = (1 + torch.rand(hidden, generator=g)).to(torch.bfloat16)
        x = sum(i.to(torch.bfloat16).double() for i in ins) + res.to(torch.bfloat16).double()
        want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
        out, rout, scales = comm.all_reduce_add_rms_norm(ins[R].to(torch.bfloat16).to(dev),
                                                         res.to(torch.bfloat16).to(dev), w.to(dev), 1e-6,
                                                         out_dtype=torch.float8_e4m3fn)
        torch.cuda.synchronize()
        got = out.double().cpu() * scales.double().cpu()[:, None]
        ok = bool(((got - want).abs() <= want.abs() / 16 + scales.double().cpu()[:, None] / 512 + 1e-2).all())
        c.expect(out.dtype == torch.float8_e4m3fn and scales.shape == (tokens,) and ok,
                 f"fp8 out with per-token scales, {tokens} tokens")
    try:
        comm.all_reduce_add_rms_norm(torch.zeros(4, 12, device=dev, dtype=torch.bfloat16),
                                     torch.zeros(4, 12, device=dev, dtype=torch.bfloat16),
                                     torch.ones(12, device=dev, dtype=torch.bfloat16))
        c.expect(False, "hidden 12 was accepted")
    except symmcomm.SymmInvalidArgumentError as e:
        c.expect("multiple of 8" in str(e), f"hidden 12: {e}")


@check
def all_to_all_vdev(c: Ctx):
    """all_to_all_vdev with the splits on the GPU, as torch.ops.symm_mem's:
    rows of a 2-D bf16 tensor and a 1-D int32 one, zero splits included,
    against a reference built from every rank's splits; and the same call
    captured in a CUDA graph, replayed with new splits."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank

    def splits_of(rank, salt):
        g = torch.Generator().manual_seed(1000 * salt + rank)
        s = torch.randint(0, 9, (W,), generator=g)
        s[(rank + salt) % W] = 0
        return s

    for dtype, row in ((torch.bfloat16, 16), (torch.int32, 1)):
        for salt in (1, 2):
            mine = splits_of(R, salt)
            send_rows = int(mine.sum())
            shape = (64,) if row == 1 else (64, row)
            inp = symm_mem.empty(*shape, dtype=dtype, device=dev)
            base = torch.arange(64 * row, device=dev).reshape(shape)
            inp.copy_((base + 1000 * R).to(dtype))
            out = torch.full(shape, -1, dtype=dtype, device=dev)
            in_splits = mine.to(dev)
            oso = torch.empty(2, W, dtype=torch.int64, device=dev)
            symm_mem.all_to_all_vdev(inp, out, in_splits, oso, comm)
            torch.cuda.synchronize()
            got_rows, want = 0, []
            for p in range(W):
                theirs = splits_of(p, salt)
                start = int(theirs[:R].sum())
                n = int(theirs[R])
                src = (base + 1000 * p).to(dtype)
                want.append(src[start:start + n])
                c.expect(int(oso[0, p]) == n and int(oso[1, p]) == got_rows,
                         f"out_splits_offsets[:, {p}] = {oso[:, p].tolist()}, want [{n}, {got_rows}] ({dtype})")
                got_rows += n
            c.expect(torch.equal(out[:got_rows], torch.cat(want)), f"rows received ({dtype}, salt {salt})")
            c.expect(bool((out[got_rows:] == -1).all()), f"rows past the received ones were written ({dtype})")
            c.expect(send_rows <= 64, "test set-up")
    # Graph: captured once, replayed with new splits in the same tensor.
    inp = symm_mem.empty(64, dtype=torch.int32, device=dev)
    inp.copy_(torch.arange(64, device=dev, dtype=torch.int32) + 1000 * R)
    out = torch.empty(64, dtype=torch.int32, device=dev)
    in_splits = splits_of(R, 3).to(dev)
    oso = torch.empty(2, W, dtype=torch.int64, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        comm.all_to_all_vdev(inp, out, in_splits, oso)
    for salt in (4, 5):
        in_splits.copy_(splits_of(R, salt))
        out.fill_(-1)
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        got = 0
        for p in range(W):
            theirs = splits_of(p, salt)
            start, n = int(theirs[:R].sum()), int(theirs[R])
            ok = torch.equal(out[got:got + n].cpu(), torch.arange(start, start + n, dtype=torch.int32) + 1000 * p)
            c.expect(ok and int(oso[0, p]) == n, f"graph replay with salt {salt}: rows from rank {p}")
            got += n
    torch.cuda.synchronize()
    del inp, out
    symm_mem.collect()


@check
def all_to_all_vdev_2d(c: Ctx):
    """all_to_all_vdev_2d (the mixture-of-experts dispatch: expert-major,
    major_align) and all_to_all_vdev_2d_offset (the combine) as
    torch.ops.symm_mem's: rows of a 2-D bf16 tensor and a 1-D int32 one, 1-3
    local experts, zero splits included, against a reference built from
    every rank's splits; the combine, given the dispatch's output and
    out_splits_offsets, returns every row to where it came from; and both
    captured in one CUDA graph, replayed with new splits."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    ROWS, CAP = 96, 128

    def splits_of(rank, ne, salt):
        g = torch.Generator().manual_seed(7919 * salt + 31 * ne + rank)
        s = torch.randint(0, 4, (W * ne,), generator=g)  # at most 3 x 8 x 3 = 72 rows <= ROWS
        s[(rank + salt) % (W * ne)] = 0
        return s

    def expected(ne, align, salt):
        """This rank's dispatch: [(rank p, expert e, start in p's input, rows, offset here)], rows in all."""
        blocks, at, start = [], 0, 0
        for e in range(ne):
            if e and align >= 1:  # PyTorch's groups: padded, and at least `align` rows
                at = max((at + align - 1) // align * align, start + align)
            start = at
            for p in range(W):
                theirs = splits_of(p, ne, salt)
                n = int(theirs[R * ne + e])
                blocks.append((p, e, int(theirs[:R * ne + e].sum()), n, at))
                at += n
        return blocks, at

    def check_round(inp, out, back, oso, oso2, src_of, ne, align, salt, what):
        blocks, total = expected(ne, align, salt)
        written = torch.zeros(out.shape[0], dtype=torch.bool)
        for k, (p, e, start, n, at) in enumerate(blocks):
            c.expect(int(oso[0, k]) == n and int(oso[1, k]) == at,
                     f"{what}: out_splits_offsets[:, {k}] = {oso[:, k].tolist()}, want [{n}, {at}]")
            c.expect(torch.equal(out[at:at + n].cpu(), src_of(p)[start:start + n].cpu()),
                     f"{what}: rows from rank {p} for expert {e}")
            written[at:at + n] = True
        c.expect(bool((out.cpu()[~written] == -1).all()), f"{what}: padding or rows past {total} were written")
        mine = splits_of(R, ne, salt)
        sent = int(mine.sum())
        c.expect(torch.equal(back[:sent].cpu(), inp[:sent].cpu()), f"{what}: the combine's rows differ from the input")
        c.expect(bool((back[sent:] == -1).all()), f"{what}: the combine wrote past {sent} rows")
        offs = torch.cumsum(mine, 0) - mine
        c.expect(torch.equal(oso2.cpu(), torch.stack([mine, offs])),
                 f"{what}: the combine's out_splits_offsets {oso2.tolist()}, want {[mine.tolist(), offs.tolist()]}")

    for dtype, row in ((torch.bfloat16, 16), (torch.int32, 1)):
        for ne, align in ((1, None), (2, 8), (3, 1), (3, 4)):
            salt = ne + 10 * (align or 0)
            shape = (ROWS,) if row == 1 else (ROWS, row)
            cap = (CAP,) if row == 1 else (CAP, row)
            base = torch.arange(ROWS * row, device=dev).reshape(shape)

            def src_of(p, base=base, dtype=dtype):
                return (base + 1000 * p).to(dtype)

            inp = symm_mem.empty(*shape, dtype=dtype, device=dev)
            inp.copy_(src_of(R))
            out = symm_mem.empty(*cap, dtype=dtype, device=dev)  # the combine reads it
            out.fill_(-1)
            back = torch.full(shape, -1, dtype=dtype, device=dev)
            in_splits = splits_of(R, ne, salt).to(dev)
            oso = torch.full((2, W * ne), -5, dtype=torch.int64, device=dev)
            oso2 = torch.full((2, W * ne), -5, dtype=torch.int64, device=dev)
            symm_mem.all_to_all_vdev_2d(inp, out, in_splits, oso, comm, major_align=align)
            symm_mem.all_to_all_vdev_2d_offset(out, back, oso, oso2, comm)
            torch.cuda.synchronize()
            check_round(inp, out, back, oso.cpu(), oso2, src_of, ne, align or 1, salt,
                        f"{dtype}, {ne} expert(s), major_align {align}")
            del inp, out
            symm_mem.collect()
    # Graph: dispatch + combine captured once, replayed with new splits.
    ne, align = 2, 8
    inp = symm_mem.empty(ROWS, dtype=torch.int32, device=dev)
    inp.copy_(torch.arange(ROWS, device=dev, dtype=torch.int32) + 1000 * R)
    out = symm_mem.empty(CAP, dtype=torch.int32, device=dev)
    back = torch.empty(ROWS, dtype=torch.int32, device=dev)
    in_splits = splits_of(R, ne, 40).to(dev)
    oso = torch.empty(2, W * ne, dtype=torch.int64, device=dev)
    oso2 = torch.empty(2, W * ne, dtype=torch.int64, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        comm.all_to_all_vdev_2d(inp, out, in_splits, oso, major_align=align)
        comm.all_to_all_vdev_2d_offset(out, back, oso, oso2)
    for salt in (41, 42):
        in_splits.copy_(splits_of(R, ne, salt))
        out.fill_(-1)
        back.fill_(-1)
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        check_round(inp, out, back, oso.cpu(), oso2, lambda p: torch.arange(ROWS, dtype=torch.int32) + 1000 * p,
                    ne, align, salt, f"graph replay with salt {salt}")
    torch.cuda.synchronize()
    del inp, out
    symm_mem.collect()


@check
def moe_round_trip(c: Ctx):
    """A mixture-of-experts layer end to end, as an expert-parallel model
    runs it: a router picks the top-2 of world x 2 experts per token (with
    softmax weights), all_to_all_vdev_2d sends each token's copies to its
    experts' ranks (major_align 4), each rank multiplies every group of rows
    by its expert's weight matrix (torch.matmul, fp32), all_to_all_vdev_2d_offset
    brings the results back, and the router's weights combine them; against
    the same layer computed on this rank alone (no communication)."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    T, H, NE, K, ALIGN = 24, 32, 2, 2, 4
    E = W * NE
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator().manual_seed(4242)  # the same weights on every rank
    experts = torch.randn(E, H, H, generator=gen, dtype=torch.float64).to(torch.float32).to(dev) / H ** 0.5
    router = torch.randn(H, E, generator=gen, dtype=torch.float64).to(torch.float32).to(dev)
    x = torch.randn(T, H, generator=torch.Generator().manual_seed(77 + R), dtype=torch.float64).to(torch.float32).to(dev)
    probs = torch.softmax(x @ router, dim=1)
    weight, chosen = probs.topk(K, dim=1)  # [T, K]
    flat = chosen.flatten()
    order = torch.argsort(flat, stable=True)  # copies sorted by expert: rank-major, expert-minor
    token = torch.arange(T, device=dev).repeat_interleave(K)[order]
    in_splits = torch.bincount(flat, minlength=E).to(torch.int64)
    rows_cap = W * T * K + E * ALIGN
    send = symm_mem.empty(T * K, H, dtype=torch.float32, device=dev)
    send.copy_(x[token])
    got = symm_mem.empty(rows_cap, H, dtype=torch.float32, device=dev)
    done = symm_mem.empty(rows_cap, H, dtype=torch.float32, device=dev)  # the combine reads it
    back = torch.empty(T * K, H, dtype=torch.float32, device=dev)
    oso = torch.empty(2, E, dtype=torch.int64, device=dev)
    oso2 = torch.empty(2, E, dtype=torch.int64, device=dev)
    symm_mem.all_to_all_vdev_2d(send, got, in_splits, oso, comm, major_align=ALIGN)
    splits, offsets = oso.tolist()
    for e in range(NE):  # this rank's experts: one matmul per group of rows
        lo = offsets[e * W]
        hi = offsets[e * W + W - 1] + splits[e * W + W - 1]
        c.expect(lo % ALIGN == 0, f"expert {e}'s rows start at {lo}, not a multiple of {ALIGN}")
        done[lo:hi] = got[lo:hi] @ experts[R * NE + e]
    symm_mem.all_to_all_vdev_2d_offset(done, back, oso, oso2, comm)
    y = torch.zeros(T, H, dtype=torch.float32, device=dev)
    y.index_add_(0, token, back * weight.flatten()[order].unsqueeze(1))
    ref = torch.zeros(T, H, dtype=torch.float64, device=dev)
    for k in range(K):
        ref += weight[:, k:k + 1].double() * torch.bmm(x.double().unsqueeze(1), experts[chosen[:, k]].double()).squeeze(1)
    err = float(((y.double() - ref).abs().max() / ref.abs().max()).item())
    if R == 0:
        print(f"    moe_round_trip: {W} ranks x {NE} experts, top-{K}, largest error relative to the output's "
              f"largest value {err:.2e}", flush=True)
    c.expect(err < 1e-5, f"MoE output differs from the one-rank reference by {err:.2e} (relative)")
    torch.cuda.synchronize()
    del send, got, done
    symm_mem.collect()


@check
def graph_capture(c: Ctx):
    """all_reduce, all_gather_into_tensor and reduce_scatter_tensor captured
    in one CUDA graph, replayed 10 times with new inputs."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    n = 65_537
    x = torch.zeros(n, dtype=torch.float32, device=dev)
    g_out = torch.zeros(W * n, dtype=torch.float32, device=dev)
    rs_out = torch.zeros(n, dtype=torch.float32, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture, as torch recommends
        comm.all_reduce(x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.all_reduce(x)
        comm.all_gather_into_tensor(g_out, x)
        comm.reduce_scatter_tensor(rs_out, g_out)
    for it in range(10):
        ins = [values(r, n, torch.float32, 10 + it, dev) for r in range(W)]
        x.copy_(ins[R].float())
        graph.replay()
        total = sum(ins)
        c.expect(same(x, total.float(), torch.float32), f"graph replay {it}: all_reduce")
        c.expect(same(g_out, total.repeat(W).float(), torch.float32), f"graph replay {it}: all_gather")
        c.expect(same(rs_out, (total * W).float(), torch.float32), f"graph replay {it}: reduce_scatter")
    torch.cuda.synchronize()


@check
def premul_sum_through_the_library(c: Ctx):
    """symmRedOpCreatePreMulSum through SymmLibrary: each rank's own host
    scalar on a float32 all-reduce, then one device scalar on a
    reduce-scatter."""
    import ctypes

    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    lib, handle, n = comm._lib, comm.handle, 4099
    f32 = symmcomm.DataType.Float32
    ins = [values(r, W * n, torch.float32, 21, dev) for r in range(W)]
    x = ins[R].float()
    out = torch.empty(W * n, dtype=torch.float32, device=dev)
    stream = torch.cuda.current_stream().cuda_stream
    mine = ctypes.c_float(0.5 * (R + 1))
    op = lib.symmRedOpCreatePreMulSum(ctypes.addressof(mine), f32, symmcomm.ScalarResidence.ScalarHostImmediate, handle)
    c.expect(op >= 5, f"premul op {op} is a built-in op's number")
    lib.symmAllReduce(x.data_ptr(), out.data_ptr(), W * n, f32, op, handle, stream)
    torch.cuda.synchronize()
    lib.symmRedOpDestroy(op, handle)
    want = sum(0.5 * (r + 1) * ins[r] for r in range(W))
    c.expect(same(out, want.float(), torch.float32), "premul all-reduce with per-rank host scalars")
    quarter = torch.full((1,), 0.25, dtype=torch.float32, device=dev)
    op = lib.symmRedOpCreatePreMulSum(quarter.data_ptr(), f32, symmcomm.ScalarResidence.ScalarDevice, handle)
    rs = torch.empty(n, dtype=torch.float32, device=dev)
    lib.symmReduceScatter(x.data_ptr(), rs.data_ptr(), n, f32, op, handle, stream)
    torch.cuda.synchronize()
    lib.symmRedOpDestroy(op, handle)
    want = 0.25 * sum(ins)[R * n:(R + 1) * n]
    c.expect(same(rs, want.float(), torch.float32), "premul reduce-scatter with a device scalar")


@check
def premul_sum_through_the_communicator(c: Ctx):
    """Communicator's reductions with symmcomm.premul_sum and torch's
    _make_nccl_premul_sum: per-rank host factors (float32, and an int factor
    on bfloat16), a device factor on a reduce-scatter, a torch op on reduce,
    a graph replayed with a rewritten device factor, and bad factors."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    n = 5003
    ins = [values(r, W * n, torch.float32, 23, dev) for r in range(W)]
    x = ins[R].float()
    out = torch.empty_like(x)
    comm.all_reduce(x, symmcomm.premul_sum(0.5 * (R + 1)), out=out)
    want = sum(0.5 * (r + 1) * ins[r] for r in range(W))
    c.expect(same(out, want.float(), torch.float32), "all_reduce premul_sum, per-rank host factors")
    xb = ins[R].to(torch.bfloat16)
    comm.all_reduce(xb, symmcomm.premul_sum(R + 1))
    c.expect(same(xb, sum((r + 1) * ins[r] for r in range(W)).to(torch.bfloat16), torch.bfloat16),
             "all_reduce bfloat16 in place, int host factors")
    make = getattr(dist, "_make_nccl_premul_sum", None) or symmcomm.premul_sum
    quarter = torch.full((), 0.25, dtype=torch.float32, device=dev)
    rs = torch.empty(n, dtype=torch.float32, device=dev)
    comm.reduce_scatter_tensor(rs, x, make(quarter))
    c.expect(same(rs, (0.25 * sum(ins))[R * n:(R + 1) * n].float(), torch.float32),
             "reduce_scatter_tensor with a device factor")
    root = W - 1
    red = torch.full_like(x, -7.0)
    comm.reduce(x, root, make(2.0), out=red)
    want = 2.0 * sum(ins) if R == root else torch.full_like(x, -7.0, dtype=torch.float64)
    c.expect(same(red, want.float(), torch.float32), f"reduce to {root} with torch's op, factor 2")
    # Graph: the device factor is read at each replay.
    factor = torch.ones((), dtype=torch.float32, device=dev)
    g_in = x.clone()
    g_out = torch.empty_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        comm.all_reduce(g_in, symmcomm.premul_sum(factor), out=g_out)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.all_reduce(g_in, symmcomm.premul_sum(factor), out=g_out)
    for it in range(3):
        factor.fill_(0.5 * (it + 1) * (R + 1))
        graph.replay()
        want = sum(0.5 * (it + 1) * (r + 1) * ins[r] for r in range(W))
        c.expect(same(g_out, want.float(), torch.float32), f"graph replay {it} with a rewritten device factor")
    torch.cuda.synchronize()
    bad = [(torch.ones((), dtype=torch.float64, device=dev), "a torch.float32 factor"),
           (torch.ones((), dtype=torch.float32), "is on cpu"),
           (torch.ones(2, dtype=torch.float32, device=dev), "a number or a one-element tensor")]
    for factor, why in bad:
        try:
            comm.all_reduce(x, symmcomm.premul_sum(factor), out=out)
            c.expect(False, f"premul_sum with a bad factor ({why}) raised nothing")
        except symmcomm.SymmInvalidArgumentError as e:
            c.expect(why in str(e), f"bad factor's message names {why!r}: {e}")
    try:
        comm.all_reduce(torch.ones(8, dtype=torch.bool, device=dev), symmcomm.premul_sum(2))
        c.expect(False, "premul_sum of bool raised nothing")
    except symmcomm.SymmInvalidArgumentError as e:
        c.expect("torch.bool" in str(e), f"bool premul's message: {e}")


@check
def symmetric_memory_handles(c: Ctx):
    """empty + rendezvous + get_buffer reading every peer's tensor; the
    handle's pointer tables; storage offsets and dtype views."""
    dev, W, R = c.device, c.world, c.rank
    n = 4096
    t = symm_mem.empty(n, dtype=torch.float32, device=dev)
    c.expect(symm_mem.is_symm_mem_tensor(t), "is_symm_mem_tensor")
    t.copy_(torch.arange(n, device=dev, dtype=torch.float32) + 1000 * R)
    hdl = symm_mem.rendezvous(t, dist.group.WORLD)
    c.expect((hdl.rank, hdl.world_size) == (R, W), "rank/world_size")
    c.expect(hdl.buffer_ptrs[R] == t.data_ptr(), "buffer_ptrs[rank] is the tensor")
    c.expect(hdl.buffer_size >= n * 4, "buffer_size")
    # The device tables hold the host-side pointers.
    table = symmcomm._dlpack.tensor_on(symmcomm._dlpack.byte_storage(hdl.buffer_ptrs_dev, 8 * W, dev.index, None),
                                       torch.int64, (W,))
    c.expect(table.tolist() == hdl.buffer_ptrs, "buffer_ptrs_dev matches buffer_ptrs")
    pads = symmcomm._dlpack.tensor_on(symmcomm._dlpack.byte_storage(hdl.signal_pad_ptrs_dev, 8 * W, dev.index, None),
                                      torch.int64, (W,))
    c.expect(pads.tolist() == hdl.signal_pad_ptrs, "signal_pad_ptrs_dev matches signal_pad_ptrs")
    hdl.barrier()
    for peer in range(W):
        v = hdl.get_buffer(peer, (n,), torch.float32)
        c.expect(v.device == dev, f"get_buffer({peer}) is on {v.device}")
        want = torch.arange(n, device=dev, dtype=torch.float32) + 1000 * peer
        c.expect(torch.equal(v, want), f"get_buffer({peer}) reads the peer's values")
        part = hdl.get_buffer(peer, (2, 8), torch.float32, storage_offset=100)
        c.expect(torch.equal(part.flatten(), want[100:116]), f"get_buffer({peer}) with storage_offset")
        raw = hdl.get_buffer(peer, (n,), torch.int32)
        c.expect(torch.equal(raw, want.view(torch.int32)), f"get_buffer({peer}) as int32")
    try:
        hdl.get_buffer(0, (hdl.buffer_size,), torch.float32)
        c.expect(False, "get_buffer past the end raised nothing")
    except symmcomm.SymmInvalidArgumentError:
        pass
    hdl.barrier()  # nobody overwrites its buffer while a peer reads it
    # A peer writes into this rank's buffer through its view.
    dst = (R + 1) % W
    hdl.get_buffer(dst, (16,), torch.float32, storage_offset=n - 16).fill_(-1.0 - R)
    hdl.barrier()
    c.expect(torch.equal(t[n - 16:], torch.full((16,), -1.0 - (R - 1) % W, device=dev)), "peer wrote into my buffer")
    hdl.barrier()
    torch.cuda.synchronize()
    del t, hdl, v, part, raw, table, pads
    symm_mem.collect()


@check
def signals_and_stream_values(c: Ctx):
    """put_signal/wait_signal order a peer's store before the reader's load;
    stream_write_value32 into a peer's signal pad; memset32."""
    dev, W, R = c.device, c.world, c.rank
    n = 1 << 16
    t = symm_mem.empty(n, dtype=torch.float32, device=dev)
    t.zero_()
    hdl = symm_mem.rendezvous(t)
    pad = hdl.get_signal_pad(R)
    c.expect(pad.dtype == torch.uint32 and pad.numel() * 4 == hdl.signal_pad_size, "signal pad view")
    hdl.barrier()
    nxt, prv = (R + 1) % W, (R - 1) % W
    for it in range(5):
        # Write into the next rank's buffer, then signal it.
        hdl.get_buffer(nxt, (n,), torch.float32).fill_(float(100 * it + R))
        hdl.put_signal(nxt, channel=5)
        hdl.wait_signal(prv, channel=5)
        c.expect(bool((t == float(100 * it + prv)).all()), f"iteration {it}: data before the signal")
        hdl.barrier()
    # stream_write_value32 into word 200000 + R of the next rank's pad.
    word = 200_000
    peer_pad = hdl.get_signal_pad(nxt)
    symm_mem.stream_write_value32(peer_pad, word + R, 7 + R)
    hdl.barrier()
    words = pad.view(torch.int32)  # uint32 has few CUDA kernels in torch
    c.expect(int(words[word + prv]) == 7 + prv, "stream_write_value32 into a peer's pad")
    hdl.memset32(pad, word, 0, W)
    torch.cuda.synchronize()
    c.expect(int(words[word:word + W].abs().sum()) == 0, "memset32 cleared the words")
    hdl.barrier()
    torch.cuda.synchronize()
    del t, hdl, pad, peer_pad, words
    symm_mem.collect()


@check
def lifetime_rules(c: Ctx):
    """Memory lives while any tensor, view or handle references it on any
    rank; collect/free/scope release it collectively; destroy refuses while
    referenced."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    reg = comm._memory
    symm_mem.collect()  # start from no garbage
    base = len(reg._allocations)
    a = symm_mem.empty(1024, dtype=torch.float32, device=dev)
    view = a[10:20]
    del a
    c.expect(symm_mem.collect() == 0 and len(reg._allocations) == base + 1, "a live view keeps the memory")
    del view
    c.expect(symm_mem.collect() == 1 and len(reg._allocations) == base, "collect frees it once unreferenced")
    b = symm_mem.empty(4, 4, dtype=torch.bfloat16, device=dev)
    c.expect(symm_mem.free(b) is True and b.numel() == 0, "free() releases and empties the tensor")
    with symm_mem.scope():
        s1 = symm_mem.empty(100, dtype=torch.int32, device=dev)
        s1.fill_(3)
    c.expect(s1.numel() == 0 and len(reg._allocations) == base, "scope() frees at its end")
    # A peer's view here keeps the allocation for everyone.
    d = symm_mem.empty(256, dtype=torch.float32, device=dev)
    hdl = symm_mem.rendezvous(d)
    keep = hdl.get_buffer((R + 1) % W, (256,), torch.float32) if R == 0 else None
    del d, hdl
    c.expect(symm_mem.collect() == 0, "rank 0's peer view keeps the allocation on every rank")
    del keep
    c.expect(symm_mem.collect() == 1, "released once rank 0 drops its view")
    # Garbage is reclaimed by the next empty() (the safe default).
    e = symm_mem.empty(64, dtype=torch.float32, device=dev)
    del e
    f = symm_mem.empty(64, dtype=torch.float32, device=dev)
    c.expect(len(reg._allocations) == base + 1, "empty() reclaimed the dead allocation first")
    del f
    symm_mem.collect()
    # destroy() refuses while a tensor of the communicator lives.
    uid = [symmcomm.get_unique_id() if R == 0 else None]
    dist.broadcast_object_list(uid, src=0)
    other = symmcomm.Communicator.from_unique_id(uid[0], R, W, device=dev)
    # Communicator.empty: a symmetric tensor of that communicator.
    h = other.empty((8, 4), dtype=torch.float16)
    c.expect(tuple(h.shape) == (8, 4) and h.dtype == torch.float16 and symm_mem.is_symm_mem_tensor(h)
             and symm_mem.rendezvous(h, other).world_size == W, "Communicator.empty makes a symmetric tensor")
    try:
        other.empty(4, device="cuda:999")
        c.expect(False, "Communicator.empty on another device raised nothing")
    except symmcomm.SymmInvalidArgumentError:
        pass
    del h
    g = symm_mem.empty(32, dtype=torch.float32, device=dev, group=other)
    try:
        other.destroy()
        c.expect(False, "destroy() with a live symmetric tensor raised nothing")
    except symmcomm.SymmInvalidUsageError as err:
        c.expect("still referenced" in str(err), f"destroy refusal message: {err}")
    del g
    other.destroy()
    c.expect(other.destroyed, "destroy() after the tensor died")
    try:
        other.all_reduce(torch.zeros(1, device=dev))
        c.expect(False, "a destroyed communicator accepted a collective")
    except symmcomm.SymmInvalidUsageError:
        pass


@check
def communicators(c: Ctx):
    """From the group's store, from an explicit id, from a subgroup, split
    (when the library has symmCommSplit), async-error polling."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    c.expect(comm.get_async_error() == symmcomm.Result.Success, "no async error")
    comm.check_async_error()
    store = dist.distributed_c10d._get_default_store()
    via_store = symmcomm.Communicator(dist.group.WORLD, store=store)
    x = torch.full((10,), float(R + 1), device=dev)
    via_store.all_reduce(x)
    via_store.synchronize(timeout=60)
    c.expect(torch.equal(x, torch.full((10,), W * (W + 1) / 2, device=dev)), "communicator from the store")
    via_store.destroy()
    if W >= 3:
        members = [0, 2]
        sub = dist.new_group(members, backend="gloo")
        if R in members:
            sc = symmcomm.Communicator(sub)
            y = torch.full((4,), float(R), device=dev)
            sc.all_reduce(y)
            c.expect(torch.equal(y, torch.full((4,), 2.0, device=dev)), "communicator of a subgroup")
            sc.destroy()
    if not comm.library.has("symmCommSplit"):
        raise Skip(f"the library {comm.library.path} has no symmCommSplit")
    child = comm.split(R % 2)
    z = torch.full((8,), float(R), device=dev)
    child.all_reduce(z)
    want = float(sum(r for r in range(W) if r % 2 == R % 2))
    c.expect(child.world_size == len([r for r in range(W) if r % 2 == R % 2]), "split size")
    c.expect(torch.equal(z, torch.full((8,), want, device=dev)), "all_reduce on a split")
    child.destroy()
    none = comm.split(None if R == 0 else 0, key=W - R)
    c.expect((none is None) == (R == 0), "NOCOLOR gives None")
    if none is not None:
        c.expect(none.rank == W - 1 - R, "split ordered by key")
        none.destroy()


def _load_example():
    path = REPO / "examples" / "python" / "one_shot_all_reduce_triton.py"
    spec = importlib.util.spec_from_file_location("one_shot_all_reduce_triton", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@check
def triton_one_shot_example(c: Ctx):
    """examples/python/one_shot_all_reduce_triton.py: right for bf16/fp16/fp32
    and several sizes, eagerly and replayed from a CUDA graph."""
    if TRITON_MISSING:
        raise Skip(TRITON_MISSING)
    ex = _load_example()
    dev, W, R = c.device, c.world, c.rank
    status = symm_triton.new_status(dev)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for n in (1, 1000, 1 << 20):
            buf = symm_mem.empty(n, dtype=dtype, device=dev)
            want = sum(ex.rank_input(r, n, torch.float64, dev) for r in range(W)).to(dtype)
            buf.copy_(ex.rank_input(R, n, dtype, dev))
            out = ex.one_shot_all_reduce(buf, status)
            symm_triton.check_status(status)
            c.expect(torch.equal(out, want), f"triton one-shot {dtype} n={n}")
            del buf, out
    n = 1 << 16
    buf = symm_mem.empty(n, dtype=torch.bfloat16, device=dev)
    out = torch.empty_like(buf)
    buf.copy_(ex.rank_input(R, n, torch.bfloat16, dev))
    ex.one_shot_all_reduce(buf, status, out=out)  # compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ex.one_shot_all_reduce(buf, status, out=out)
    for it in range(5):
        sign = 1 if it % 2 == 0 else -1
        buf.copy_(ex.rank_input(R, n, torch.bfloat16, dev) * sign)
        graph.replay()
        want = sign * sum(ex.rank_input(r, n, torch.float64, dev) for r in range(W))
        c.expect(torch.equal(out, want.to(torch.bfloat16)), f"triton one-shot graph replay {it}")
    symm_triton.check_status(status)
    del buf, out, graph
    symm_mem.collect()


@check
def triton_bounded_wait(c: Ctx):
    """A Triton wait for a signal that never comes gives up after its bound,
    and check_status raises SymmTimeoutError naming the peer."""
    if TRITON_MISSING:
        raise Skip(TRITON_MISSING)
    dev, W, R = c.device, c.world, c.rank
    t = symm_mem.empty(16, dtype=torch.float32, device=dev)
    hdl = symm_mem.rendezvous(t)
    if R == 0:
        status = symm_triton.new_status(dev)
        start = time.monotonic()
        _wait_forever[(1,)](hdl.signal_pad_ptrs_dev, 1, status, symm_triton.timeout_ns(0.5), RANK=0, WORLD_SIZE=W)
        try:
            symm_triton.check_status(status, "bounded-wait test")
            c.expect(False, "the wait did not give up")
        except symmcomm.SymmTimeoutError as e:
            took = time.monotonic() - start
            c.expect("wait_signal" in str(e) and "rank 1" in str(e), f"message: {e}")
            c.expect(took < 5, f"gave up after {took:.1f} s (bound 0.5 s)")
        c.expect(int(status[7]) == 0, "both waits returned 0 (the second at once)")
    del t, hdl
    symm_mem.collect()


@check
def fused_ops(c: Ctx):
    """all_gather_matmul and matmul_reduce_scatter against an unfused fp32
    reference: bf16, fp16, fp32, weights n x k passed as weight.t(), fp8 with
    per-tensor scales."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    lib = comm.library
    if not (lib.has("symmAllGatherMatmul") and lib.has("symmMatmulReduceScatter")):
        raise Skip(f"the library {lib.path} has no fused ops (symmAllGatherMatmul, symmMatmulReduceScatter)")
    torch.backends.cuda.matmul.allow_tf32 = False
    tol = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 5e-3}

    def rand(seed, shape, dtype):
        g = torch.Generator(device=dev).manual_seed(seed)
        return torch.randn(shape, generator=g, device=dev, dtype=torch.float32).to(dtype)

    def close(got, want, rtol):
        err = (got.float() - want).abs().max().item()
        return err <= rtol * max(want.abs().max().item(), 1.0), err

    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for m_shard, k, n in ((64, 96, 80), (33, 130, 70)):
            shards = [rand(100 + r, (m_shard, k), dtype) for r in range(W)]
            weight = rand(7, (n, k), dtype)  # n x k, as nn.Linear keeps it
            a_full = torch.cat(shards).float()
            want = a_full @ weight.float().t()
            out = comm.all_gather_matmul(shards[R], weight.t())
            ok, err = close(out, want, tol[dtype])
            c.expect(out.shape == (W * m_shard, n) and out.dtype == dtype and ok,
                     f"all_gather_matmul {dtype} {m_shard}x{k}x{n} (weight.t()): max error {err}")
            out2, gathered = comm.all_gather_matmul(shards[R], weight.t().contiguous(), return_gathered=True)
            ok, err = close(out2, want, tol[dtype])
            c.expect(ok and torch.equal(gathered, torch.cat(shards)),
                     f"all_gather_matmul {dtype} {m_shard}x{k}x{n} (row-major b, gathered A): {err}")
            m = m_shard * W
            a_parts = [rand(200 + r, (m, k), dtype) for r in range(W)]
            w_parts = [rand(300 + r, (n, k), dtype) for r in range(W)]
            total = sum(a_parts[r].float() @ w_parts[r].float().t() for r in range(W))
            rs = comm.matmul_reduce_scatter(a_parts[R], weight=w_parts[R])
            ok, err = close(rs, total[R * m_shard:(R + 1) * m_shard], tol[dtype] * W)
            c.expect(rs.shape == (m_shard, n) and ok, f"matmul_reduce_scatter {dtype} {m}x{k}x{n}: {err}")
    # The module-level forms find their communicator from comm= or group=
    # (a Communicator is its own group).
    bf16 = torch.bfloat16
    shards = [rand(500 + r, (16, 32), bf16) for r in range(W)]
    weight = rand(11, (24, 32), bf16)
    want = torch.cat(shards).float() @ weight.float().t()
    a_parts = [rand(600 + r, (16 * W, 32), bf16) for r in range(W)]
    total = sum(a_parts[r].float() @ weight.float().t() for r in range(W))
    for how in ({"comm": comm}, {"group": comm}):
        out = symmcomm.all_gather_matmul(shards[R], weight=weight, **how)
        ok, err = close(out, want, tol[bf16])
        c.expect(ok, f"symmcomm.all_gather_matmul({next(iter(how))}=): max error {err}")
        rs = symmcomm.matmul_reduce_scatter(a_parts[R], weight=weight, **how)
        ok, err = close(rs, total[R * 16:(R + 1) * 16], tol[bf16] * W)
        c.expect(ok, f"symmcomm.matmul_reduce_scatter({next(iter(how))}=): max error {err}")
    # Operands whose inner sizes differ are refused, naming the operand.
    for name, call in (("a_shard", lambda: comm.all_gather_matmul(shards[R], weight=weight[:, :31])),
                       ("a", lambda: comm.matmul_reduce_scatter(a_parts[R], rand(12, (33, 24), bf16)))):
        try:
            call()
            c.expect(False, f"{name} against a b of another inner size raised nothing")
        except symmcomm.SymmInvalidArgumentError as e:
            c.expect(f"{name} is " in str(e) and "inner sizes differ" in str(e), f"inner-size message: {e}")
    fp8 = torch.float8_e4m3fn
    m_shard, k, n = 64, 128, 96
    shards = [rand(400 + r, (m_shard, k), torch.float32) for r in range(W)]
    weight = rand(9, (n, k), torch.float32)
    sa, sb = torch.tensor([0.5], device=dev), torch.tensor([0.25], device=dev)
    qa = [(s / sa).to(fp8) for s in shards]
    qw = (weight / sb).to(fp8)
    want = (torch.cat(qa).float() * sa) @ (qw.float() * sb).t()
    try:
        out = comm.all_gather_matmul(qa[R], qw.t(), a_scale=sa, b_scale=sb, out_dtype=torch.bfloat16)
    except symmcomm.SymmNotSupportedError as e:
        raise Skip(f"fp8: {e}")
    ok, err = close(out, want, 3e-2)
    c.expect(out.dtype == torch.bfloat16 and ok, f"all_gather_matmul fp8 e4m3 per-tensor scales: {err}")
    torch.cuda.synchronize()


@check
def fused_ops_by_torch_names(c: Ctx):
    """symm_mem.fused_all_gather_matmul / fused_matmul_reduce_scatter with
    PyTorch's arguments: 3-D tensors, the collective along every dimension
    (the last one unfused), two Bs, return_A, sum and avg, against an fp32
    reference built from every rank's inputs."""
    comm, dev, W, R = c.comm, c.device, c.world, c.rank
    lib = comm.library
    if not (lib.has("symmAllGatherMatmul") and lib.has("symmMatmulReduceScatter")):
        raise Skip(f"the library {lib.path} has no fused ops")
    torch.backends.cuda.matmul.allow_tf32 = False

    def rand(seed, shape):
        g = torch.Generator(device=dev).manual_seed(seed)
        return torch.randn(shape, generator=g, device=dev, dtype=torch.float32)

    def close(got, want, rtol=5e-3):
        err = (got.float() - want).abs().max().item()
        return got.shape == want.shape and err <= rtol * max(want.abs().max().item(), 1.0), err

    shape, n = (2 * W, 3, 40), 24  # (batch, seq, k), every dimension divisible where it must be
    for gather_dim in (0, 1, -1):
        shards = [rand(500 + r, shape) for r in range(W)]
        k = shape[-1] * (W if gather_dim == -1 else 1)  # along the last dimension A gathers k
        Bs = [rand(600, (k, n)), rand(601, (k, n + 8))]
        A_full = torch.cat(shards, dim=gather_dim)
        A, outs = symm_mem.fused_all_gather_matmul(shards[R], Bs, gather_dim, comm)
        c.expect(torch.equal(A, A_full), f"fused_all_gather_matmul gather_dim {gather_dim}: the gathered A")
        for i, (got, B) in enumerate(zip(outs, Bs)):
            ok, err = close(got, A_full @ B)
            c.expect(ok, f"fused_all_gather_matmul gather_dim {gather_dim}, B {i}: {tuple(got.shape)}, error {err}")
        none_a, outs = symm_mem.fused_all_gather_matmul(shards[R], Bs[:1], gather_dim, comm, return_A=False)
        c.expect(none_a is None and close(outs[0], A_full @ Bs[0])[0], f"return_A=False, gather_dim {gather_dim}")
    for scatter_dim, op in ((0, "sum"), (1, "avg"), (2, "sum")):
        rs_shape = (2 * W, 3 * W, 32)
        As = [rand(700 + r, rs_shape) for r in range(W)]
        Bs = [rand(800 + r, (32, 8 * W)) for r in range(W)]
        total = sum(As[r] @ Bs[r] for r in range(W)) / (W if op == "avg" else 1)
        want = total.chunk(W, dim=scatter_dim)[R]
        got = symm_mem.fused_matmul_reduce_scatter(As[R], Bs[R], op, scatter_dim, comm)
        ok, err = close(got, want, 5e-3 * W)
        c.expect(ok, f"fused_matmul_reduce_scatter {op} scatter_dim {scatter_dim}: {tuple(got.shape)}, error {err}")
    try:
        symm_mem.fused_matmul_reduce_scatter(rand(1, (W + 1, 4, 8)), rand(2, (8, 8)), "sum", 0, comm)
        c.expect(W == 1, "a scatter dimension not divisible by the ranks raised nothing")
    except symmcomm.SymmInvalidArgumentError as e:
        c.expect("not a multiple of" in str(e), f"indivisible scatter_dim's message: {e}")
    torch.cuda.synchronize()


# ----------------------------------------------------------------- main ---

def agree(ok: bool, detail: str, skipped: str | None):
    results = [None] * dist.get_world_size()
    dist.all_gather_object(results, (ok, detail, skipped))
    return results


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated check names")
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group("gloo")
    ctx = Ctx()
    if ctx.rank == 0:
        print(f"symmcomm {symmcomm.__version__} from {symmcomm.library_path()}; {ctx.world} ranks on "
              f"{torch.cuda.device_count()} GPU(s) ({torch.cuda.get_device_name()}), torch {torch.__version__}",
              flush=True)
    ctx.comm = symmcomm.Communicator()
    failed = 0
    only = set(filter(None, args.only.split(",")))
    for fn in CHECKS:
        if only and fn.__name__ not in only:
            continue
        ctx.failures = []
        skipped = None
        start = time.monotonic()
        try:
            fn(ctx)
            torch.cuda.synchronize()
            ctx.comm.check_async_error()
        except Skip as s:
            skipped = str(s)
        except Exception as e:
            ctx.failures.append(f"{type(e).__name__}: {e} [{traceback.extract_tb(e.__traceback__)[-1].lineno}]")
        results = agree(not ctx.failures, "; ".join(ctx.failures)[:600], skipped)
        took = time.monotonic() - start
        if ctx.rank == 0:
            bad = [(r, d) for r, (ok, d, _) in enumerate(results) if not ok]
            skips = [s for _, _, s in results if s]
            if bad:
                failed += 1
                print(f"FAIL {fn.__name__} ({took:.1f} s): rank {bad[0][0]}: {bad[0][1]}", flush=True)
                for r, d in bad[1:3]:
                    print(f"     rank {r}: {d}", flush=True)
            elif skips:
                print(f"SKIP {fn.__name__}: {skips[0]}", flush=True)
            else:
                print(f"PASS {fn.__name__} ({took:.1f} s)", flush=True)
        else:
            failed += int(any(not ok for ok, _, _ in results))
    try:
        ctx.comm.destroy()
    except symmcomm.SymmInvalidUsageError:
        ctx.comm.destroy(force=True)
    dist.destroy_process_group()
    if ctx.rank == 0:
        print(f"{'FAILED' if failed else 'OK'}: {len(CHECKS) if not only else len(only)} checks at {ctx.world} ranks, "
              f"{failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
