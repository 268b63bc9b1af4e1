"""PyTorch's fused matmul ops on symmetric memory, timed at fused_bench's shapes.

    torchrun --standalone --nproc-per-node=W tests/torch/fused_torch_bench.py \
        [--dtype bf16,e4m3] [--shape M,N,K]... [--op ag|rs|both] [--iters 20] \
        [--warmup 5] [--json OUT.json]

One process per GPU (W ranks, rank r on GPU LOCAL_RANK). Per dtype, op and
shape, TFLOP/s per GPU (the FLOPs one rank computes over the slowest rank's
mean time per call), with the same shapes and layouts as
c_tests/bench/fused_bench.c:

  ag  C = all_gather(A_shard) @ B: A_shard M/W x K per rank, B = W.t() with
      W an N x K row-major weight (column-major B, what fp8 needs);
      torch.ops.symm_mem.fused_all_gather_matmul (bf16) or
      fused_all_gather_scaled_matmul (fp8 e4m3, per-tensor scales of 1,
      bf16 output) against all_gather_into_tensor (NCCL) then mm / _scaled_mm.
      FLOPs per rank 2*M*N*K.
  rs  C_shard = reduce_scatter(A @ B) over rows: A M x K/W, B K/W x N
      (column-major); torch.ops.symm_mem.fused_matmul_reduce_scatter or
      fused_scaled_matmul_reduce_scatter against mm then reduce_scatter_tensor.
      FLOPs per rank 2*M*N*K/W.

Default shapes: the seeds, M = 8192*W, N = K = 8192 and M = 32768,
N = 8192, K = 16384. The fused op and its unfused reference run once on
the same inputs and the largest difference, relative to the reference's
largest magnitude, is reported (a wrong call shows up there).

NVLink multicast is never used: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are forced
before anything starts. Rank 0 prints a markdown table and, with --json,
writes the numbers for scripts/perf-tables (kind "fused_torch").
"""
import argparse
import datetime
import json
import os
import sys
import warnings

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="bf16,e4m3", help="bf16, e4m3 or both, comma-separated")
    ap.add_argument("--op", choices=("ag", "rs", "both"), default="both")
    ap.add_argument("--shape", action="append", default=[], help="M,N,K (total rows, columns, inner dimension)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", help="write the results here (rank 0)")
    return ap.parse_args(argv)


def enable_symm_mem(group_name):
    """Make the group's symmetric memory usable on its CUDA backend, whichever
    PyTorch this is: releases that have set_backend get "CUDA" (before any
    allocation, as it requires), older ones need enable_symm_mem_for_group
    (later ones deprecate it as unnecessary). Returns the backend in use."""
    import torch.distributed._symmetric_memory as symm_mem

    get = getattr(symm_mem, "get_backend", None)
    device = torch.device("cuda", torch.cuda.current_device())
    current = get(device) if get is not None else None
    # When CUDA is already the default, PyTorch registers it directly and not
    # as a selectable backend, so set_backend("CUDA") would fail.
    if hasattr(symm_mem, "set_backend") and current != "CUDA":
        symm_mem.set_backend("CUDA")
    fn = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if fn is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(group_name)
    backend = get(device) if get is not None else None
    return backend or "CUDA (the default)"


def call_by_schema(op, **kwargs):
    """Call a torch.ops overload with the keyword arguments its schema names
    (the scaled ops' signatures changed between releases); fails with the
    schema when one it needs is missing."""
    schema = op.default._schema
    args = {}
    for a in schema.arguments:
        if a.name in kwargs:
            args[a.name] = kwargs[a.name]
        elif not a.has_default_value():
            raise TypeError(f"{schema}: no value for argument {a.name}")
    return op(**args)


def timed(fn, iters, warmup):
    """Slowest rank's mean milliseconds per call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    t = torch.tensor([start.elapsed_time(end) / iters], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def rel_diff(a, b):
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def main(argv=None):
    a = parse_args(argv)
    dtypes = a.dtype.split(",")
    if not dtypes or any(d not in ("bf16", "e4m3") for d in dtypes):
        raise SystemExit(f"--dtype {a.dtype}: bf16, e4m3 or both")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    group_name = group.group_name
    backend = enable_symm_mem(group_name)
    symm = torch.ops.symm_mem

    shapes = [tuple(int(x) for x in s.split(",")) for s in a.shape] or [(8192 * world, 8192, 8192), (32768, 8192, 16384)]
    ops = ("ag", "rs") if a.op == "both" else (a.op,)
    one = torch.ones((), device=dev, dtype=torch.float32)
    gen = torch.Generator(device=dev)

    def rand(shape, seed, dtype):
        gen.manual_seed(seed)
        return (torch.rand(shape, device=dev, generator=gen, dtype=torch.float32) * 2 - 1).to(dtype)

    rows = []
    for dname, (M, N, K), op in [(d, s, o) for d in dtypes for s in shapes for o in ops]:
        fp8 = dname == "e4m3"
        in_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
        if M % world or (op == "rs" and K % world):
            if rank == 0:
                print(f"skipping {op} {M}x{N}x{K}: not divisible by {world} ranks", flush=True)
            continue
        if op == "ag":
            A = rand((M // world, K), 1 + rank, in_dtype)
            W = rand((N, K), 1000, in_dtype)  # the same weight on every rank
            B = W.t()
            flops = 2.0 * M * N * K
            if fp8:
                def fused():
                    return call_by_schema(symm.fused_all_gather_scaled_matmul, A=A, Bs=[B], A_scale=one,
                                          B_scales=[one], gather_dim=0, group_name=group_name, biases=[None],
                                          result_scales=[None], out_dtypes=[torch.bfloat16],
                                          use_fast_accum=[False])[1][0]

                def unfused():
                    full = torch.empty((M, K), device=dev, dtype=torch.uint8)
                    dist.all_gather_into_tensor(full, A.view(torch.uint8))
                    return torch._scaled_mm(full.view(in_dtype), B, scale_a=one, scale_b=one,
                                            out_dtype=torch.bfloat16)
            else:
                def fused():
                    return symm.fused_all_gather_matmul(A, [B], 0, group_name)[1][0]

                def unfused():
                    full = torch.empty((M, K), device=dev, dtype=in_dtype)
                    dist.all_gather_into_tensor(full, A)
                    return full @ B
        else:
            A = rand((M, K // world), 1 + rank, in_dtype)
            W = rand((N, K // world), 1000 + rank, in_dtype)  # this rank's K-slice of the weight
            B = W.t()
            flops = 2.0 * M * N * (K // world)
            if fp8:
                def fused():
                    return call_by_schema(symm.fused_scaled_matmul_reduce_scatter, A=A, B=B, A_scale=one,
                                          B_scale=one, reduce_op="sum", scatter_dim=0, orig_scatter_dim=0,
                                          scatter_dim_after_maybe_reshape=0, group_name=group_name,
                                          output_shape=[M, N], bias=None, result_scale=None,
                                          out_dtype=torch.bfloat16, use_fast_accum=False)

                def unfused():
                    part = torch._scaled_mm(A, B, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                    out = torch.empty((M // world, N), device=dev, dtype=torch.bfloat16)
                    dist.reduce_scatter_tensor(out, part)
                    return out
            else:
                def fused():
                    return symm.fused_matmul_reduce_scatter(A, B, "sum", 0, group_name)

                def unfused():
                    part = A @ B
                    out = torch.empty((M // world, N), device=dev, dtype=torch.bfloat16)
                    dist.reduce_scatter_tensor(out, part)
                    return out
        diff = rel_diff(fused(), unfused())
        t_fused = timed(fused, a.iters, a.warmup)
        t_unfused = timed(unfused, a.iters, a.warmup)
        rows.append({"op": op, "dtype": dname, "M": M, "N": N, "K": K, "fused_ms": t_fused, "unfused_ms": t_unfused,
                     "fused_tflops": flops / t_fused / 1e9, "unfused_tflops": flops / t_unfused / 1e9,
                     "max_rel_diff": diff})
        del A, W, B
        torch.cuda.empty_cache()

    if rank == 0:
        doc = {
            "kind": "fused_torch",
            "command": "torchrun --nproc-per-node=%d %s" % (world, " ".join([os.path.relpath(__file__)] + (argv or sys.argv[1:]))),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "world": world, "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "backend": backend, "rows": rows,
        }
        print(f"# PyTorch fused ops: {doc['command']}\n# {doc['date']}; {world} x {doc['gpu']}; PyTorch "
              f"{doc['torch']}, NCCL {doc['nccl']}, symmetric memory backend {backend}; TFLOP/s per GPU\n")
        print("| op | type | M × N × K | fused | NCCL + mm | fused / unfused | max rel. diff |")
        print("|:---|:---|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['op']} | {r['dtype']} | {r['M']} × {r['N']} × {r['K']} | {r['fused_tflops']:.1f} | "
                  f"{r['unfused_tflops']:.1f} | {r['fused_tflops'] / r['unfused_tflops']:.2f} | {r['max_rel_diff']:.2e} |")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(doc, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
