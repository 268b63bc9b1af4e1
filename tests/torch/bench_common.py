"""What the PyTorch benchmarks of this folder (eager_loop_bench.py,
host_cost_bench.py, the norm benches, ...) share: size and count lists on
the command line, sizes in tables, the timed back-to-back loop, the JSON
documents their `table` subcommands read, and finding torch and the
package. Imports torch only inside functions, so that tables are made
without it."""

import argparse
import json
import os
import sys
import time

# The exit status of a bench that cannot run here (CTest's and the device
# scripts' "skipped").
SKIP = 77
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def int_list(s):
    """A comma-separated list of integers: an argparse type."""
    return [int(x) for x in s.split(",") if x.strip()]


def torch_with_cuda():
    """torch, when it is installed and sees a CUDA device; else None, after
    saying why (the caller returns SKIP)."""
    try:
        import torch
    except ImportError:
        print("skipped: PyTorch is not installed", flush=True)
        return None
    if not torch.cuda.is_available():
        print("skipped: no CUDA device", flush=True)
        return None
    return torch


def import_symmcomm():
    """The symmcomm package: installed, or this checkout's python/."""
    try:
        import symmcomm
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "python"))
        import symmcomm
    return symmcomm


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B")
    return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


def parse_sizes(s):
    """A comma-separated list of sizes (8,4K,256K,4M; one size is a list of
    one), each a positive even number of bytes (bf16 elements), no size
    twice: an argparse type."""
    out = []
    for part in s.split(","):
        try:
            n = parse_bytes(part)
        except (ValueError, IndexError):
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a size (8, 4K, 256K, 4M)") from None
        if n < 2 or n % 2:
            raise argparse.ArgumentTypeError(f"{part.strip()!r}: sizes must be positive even numbers of bytes "
                                             "(bf16 elements)")
        out.append(n)
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{s!r} lists a size twice")
    return out


def human(n):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def load_docs(paths):
    """The JSON documents of earlier runs, in the order given."""
    docs = []
    for p in paths:
        with open(p) as f:
            docs.append(json.load(f))
    return docs


def table_command(argv, render, prog):
    """`PROG table OUT.json [...]`: print render(the documents) and return
    the exit status; None when argv is not a table command."""
    if argv[:1] != ["table"]:
        return None
    if len(argv) < 2:
        print(f"usage: {prog} table OUT.json [...]", file=sys.stderr)
        return 2
    print(render(load_docs(argv[1:])))
    return 0


def timed_loop(fn, n, barrier=None):
    """Issue fn n times back to back, no synchronisation inside; per-call
    wall (first call to the stream's end), host CPU of this thread, and the
    longest single call the host saw (µs). `barrier` (e.g. dist.barrier)
    lines the ranks up first."""
    import torch

    torch.cuda.synchronize()
    if barrier is not None:
        barrier()
        torch.cuda.synchronize()
    longest = 0
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    prev = t0
    for _ in range(n):
        fn()
        now = time.perf_counter_ns()
        longest = max(longest, now - prev)
        prev = now
    c1 = time.thread_time_ns()
    torch.cuda.synchronize()
    t2 = time.perf_counter_ns()
    return {"wall_us": (t2 - t0) / n / 1e3, "cpu_us": (c1 - c0) / n / 1e3, "longest_us": longest / 1e3}


def collective_runs(torch, dist, dev, fn, min_ms, runs):
    """Per run, µs per call of the collective fn issued back to back (the
    stream's end included), the slowest rank's. Every rank must issue the
    same number of calls, so the count comes from the slowest rank's
    three-call estimate: enough calls for min_ms there, at least 3."""
    import math

    def slowest(x):
        t = torch.tensor([x], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t)

    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    n = max(3, math.ceil(min_ms * 1e-3 / max(slowest((time.perf_counter() - t0) / 3), 1e-9)))
    out = []
    for _ in range(runs):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        out.append(slowest((time.perf_counter() - t0) * 1e6 / n))
    return out
