"""The host's cost per call of the Python package's all-reduce: calls issued
back to back from Python on a CUDA torch tensor, no synchronisation inside
the loop, one torch.cuda.synchronize() after, timed per call on the host
(wall and the issuing thread's CPU time):

    python3 tests/torch/host_cost_bench.py run OUT.json [--sizes 8,4K,256K,4M] \\
        [--runs 5] [--calls 2000] [--warmup 20]
    torchrun --standalone --nproc-per-node=N tests/torch/host_cost_bench.py run OUT.json ...
    python3 tests/torch/host_cost_bench.py table OUT.json [...]

Plain python: world size 1 (Communicator.from_unique_id on GPU 0, no
torch.distributed at all). Under torchrun: one process per GPU (rank r on
GPU LOCAL_RANK), the communicator made over a gloo process group (so that
no NCCL is loaded), and each run's figures are the slowest rank's (MAX over
ranks, exchanged after the timing).

Three ways to issue the same in-place bf16 sum, per size, each on its own
tensor:

  Communicator.all_reduce     comm.all_reduce(t): the package's API (tensor
                              checks, dtype and op mapping, torch's current
                              stream looked up per call);
  SymmLibrary.symmAllReduce   the package's thin wrapper of the C function
                              (result code checked), arguments precomputed;
  ctypes symmAllReduce        the raw ctypes function (SymmLibrary.fn),
                              arguments precomputed: what any Python caller
                              pays at least.

Each timed --runs times of --calls calls, the APIs and sizes alternating
within a run (a stall that comes and goes shows as a spread), so every
figure is min / median / max over the runs. Host CPU: time.thread_time (a
call that spins in the driver counts; one that sleeps does not). Outputs
are checked: zeros stay zeros through every loop, then ones sum to the
world size.

"run" writes OUT.json on rank 0 (kind "host_cost"); "table" prints its
markdown table (scripts/perf-tables uses render() too, and its host table
takes the Communicator.all_reduce row: target at most 10 µs of host CPU per
call). Without PyTorch or a CUDA device, "run" says so and exits 77
(skipped). SYMMCOMM_LIBRARY names the library to load (see the package's
discovery order); the package is imported from python/ of this checkout
when it is not installed.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

# This folder's shared helpers, also when perf-tables loads the file by path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import SKIP, human, import_symmcomm, parse_sizes, table_command, timed_loop  # noqa: E402

#: The APIs timed, in the table's order; the first is the package's API.
APIS = ("Communicator.all_reduce", "SymmLibrary.symmAllReduce", "ctypes symmAllReduce")
#: The issue's target for the package's API: host CPU per call, median of runs (µs).
TARGET_US = 10.0


def spread(values):
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def skip(why):
    print(f"skipped: {why}", flush=True)
    return SKIP


def run(a, argv):
    try:
        import torch
    except ImportError:
        return skip("PyTorch is not installed (host_cost_bench times the package on torch tensors)")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return skip("no CUDA device")
    symmcomm = import_symmcomm()

    dist = None
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        import torch.distributed as dist

        dist.init_process_group("gloo")
        comm = symmcomm.Communicator(dist.group.WORLD, device=local)
    else:
        comm = symmcomm.Communicator.from_unique_id(symmcomm.get_unique_id(), 0, 1, device=local)
    rank, world = comm.rank, comm.world_size
    lib = comm.library
    raw = lib.fn("symmAllReduce")
    handle = comm.handle
    dtype, op = int(symmcomm.DataType.Bfloat16), int(symmcomm.ReduceOp.Sum)
    stream = torch.cuda.current_stream(dev).cuda_stream or None

    # One tensor per size, all-reduced in place: zeros stay exact whatever
    # the number of calls; ones are checked once after the runs.
    tensors = {b: torch.zeros(b // 2, dtype=torch.bfloat16, device=dev) for b in a.sizes}
    failed = []

    def callers(t):
        ptr, n = t.data_ptr(), t.numel()

        def api():
            comm.all_reduce(t)

        def wrapper():
            lib.symmAllReduce(ptr, ptr, n, dtype, op, handle, stream)

        def ctypes_call():
            rc = raw(ptr, ptr, n, dtype, op, handle, stream)
            if rc:
                failed.append(rc)

        return dict(zip(APIS, (api, wrapper, ctypes_call)))

    calls = {b: callers(t) for b, t in tensors.items()}

    def timed(fn, n):
        return timed_loop(fn, n, dist.barrier if dist is not None else None)

    def slowest(m):
        """The run's figures, each the MAX over ranks (after the timing)."""
        if dist is None:
            return m
        keys = sorted(m)
        t = torch.tensor([m[k] for k in keys], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return dict(zip(keys, t.tolist()))

    # Warm-up: first calls pay lazy set-up (kernel loads, buffer checks).
    for by_api in calls.values():
        for fn in by_api.values():
            for _ in range(a.warmup):
                fn()
    torch.cuda.synchronize()

    runs = {(api, b): [] for api in APIS for b in a.sizes}
    for r in range(a.runs):
        for api in APIS:
            for b in a.sizes:
                runs[(api, b)].append(slowest(timed(calls[b][api], a.calls)))
        if rank == 0:
            first = runs[(APIS[0], a.sizes[0])][-1]
            print(f"[host_cost n{world}] run {r}: {APIS[0]} {a.sizes[0]} B: {first['wall_us']:.2f} us/call wall, "
                  f"{first['cpu_us']:.2f} CPU, longest {first['longest_us']:.0f}", flush=True)

    # Correctness: zeros stayed zeros; ones sum to the world size.
    ok = not failed
    for t in tensors.values():
        ok = ok and bool((t == 0).all().item())
        t.fill_(1.0)
        comm.all_reduce(t)
        torch.cuda.synchronize()
        ok = ok and bool((t == float(world)).all().item())
    if dist is not None:
        flag = torch.tensor([0 if ok else 1])
        dist.all_reduce(flag)
        ok = flag.item() == 0

    if rank == 0:
        env = {k: os.environ[k] for k in sorted(os.environ) if k.startswith(("SYMM_", "SYMMCOMM_"))}
        launcher = ("torchrun --nproc-per-node=%d " % world) if dist is not None else "python3 "
        doc = {
            "kind": "host_cost", "env": env,
            "command": " ".join(f"{k}={v}" for k, v in env.items()) + (" " if env else "") + launcher
            + " ".join([os.path.relpath(__file__)] + argv),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "world": world, "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
            "python": sys.version.split()[0], "symmcomm": lib.version, "library": lib.path,
            "sizes": a.sizes, "calls": a.calls, "runs_per_row": a.runs, "dtype": "bfloat16", "correct": ok,
            "rows": [{"api": api, "bytes": b, "runs": runs[(api, b)],
                      "summary": {k: spread([x[k] for x in runs[(api, b)]]) for k in ("wall_us", "cpu_us", "longest_us")}}
                     for api in APIS for b in a.sizes],
        }
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"[host_cost n{world}] outputs {'correct' if ok else 'WRONG'}", flush=True)
    if dist is not None:
        dist.barrier()
    comm.destroy()
    if dist is not None:
        dist.destroy_process_group()
    return 0 if ok else 1


def target_met(doc):
    """Whether Communicator.all_reduce's host CPU (median of runs) is within
    TARGET_US at every size: (met, [sizes over it])."""
    over = [r["bytes"] for r in doc["rows"] if r["api"] == APIS[0] and r["summary"]["cpu_us"]["median"] > TARGET_US]
    return not over, over


def render(docs):
    """The markdown table of one or more runs. scripts/perf-tables uses this too."""
    out = ["| API | ranks | size | wall per call, min / median / max (µs) | host CPU per call, min / median / max (µs) "
           "| longest call, max (µs) | target (host CPU, median) |",
           "|---|---:|---:|---|---|---:|---|"]
    for d in docs:
        for r in d["rows"]:
            s = r["summary"]
            target = "—"
            if r["api"] == APIS[0]:
                met = s["cpu_us"]["median"] <= TARGET_US
                target = f"≤ {TARGET_US:g} µs: {'met' if met else '**not met**'}"
            out.append(f"| `{r['api']}` | {d['world']} | {human(r['bytes'])} | {s['wall_us']['min']:.2f} / "
                       f"{s['wall_us']['median']:.2f} / {s['wall_us']['max']:.2f} | {s['cpu_us']['min']:.2f} / "
                       f"{s['cpu_us']['median']:.2f} / {s['cpu_us']['max']:.2f} | {s['longest_us']['max']:.0f} | "
                       f"{target} |")
    out.append("")
    for d in docs:
        wrong = "" if d["correct"] else " **OUTPUTS WRONG.**"
        out.append(f"`{d['command']}`: {d['date']}; {d['world']} x {d['gpu']}; PyTorch {d['torch']}, Python "
                   f"{d['python']}, symmcomm {d['symmcomm']} ({d['library']}); {d['runs_per_row']} runs of "
                   f"{d['calls']} calls per API and size, in place, {d['dtype']} sum.{wrong}")
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    status = table_command(argv, render, "host_cost_bench.py")
    if status is not None:
        return status
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("run",))
    ap.add_argument("out", help="JSON results (rank 0)")
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes("8,4K,256K,4M"),
                    help="comma-separated sizes (default 8,4K,256K,4M)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args(argv)
    for name in ("runs", "calls"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if a.warmup < 0:
        ap.error("--warmup must be 0 or more")
    return run(a, argv)


if __name__ == "__main__":
    sys.exit(main())
