"""Eager collectives as users issue them: back to back from Python, no
synchronisation inside the loop, one torch.cuda.synchronize() after, timed
per call on the host and end to end. Run it under torchrun once as is
(PyTorch's NCCL) and once with symmcomm's libnccl.so.2 stand-in preloaded
(in each SYMM_NCCL_MODE), then compare:

    torchrun --standalone --nproc-per-node=N tests/torch/eager_loop_bench.py run OUT.json \
        [--runs 5] [--calls 2000] [--steps 500] [--bytes 256K | --bytes 8,4K,256K,4M] [--tokens 16] \
        [--hidden 8192] [--ffn 4096] [--profile PREFIX]
    LD_PRELOAD=.../libsymmcomm_nccl.so torchrun ... eager_loop_bench.py run OUT2.json ...
    python3 tests/torch/eager_loop_bench.py table OUT.json OUT2.json [...]

One process per GPU (rank r on GPU LOCAL_RANK). Two loops, each timed
--runs times in the same process, alternating (a stall that comes and goes
shows as a spread between runs, so every figure is min / median / max over
the runs, never one mean):

  allreduce  --calls x dist.all_reduce of one tensor of --bytes (bf16), in
             place, the same tensor every call; --bytes may list several
             sizes (8,4K,256K,4M): one such loop per size, each on its own
             tensor, all in the same process;
  step       --steps x an eager tensor-parallel MLP step: x[tokens x hidden]
             @ W1[hidden x ffn], GELU, @ W2[ffn x hidden], dist.all_reduce
             of the (new) output.

Per run and rank: wall time per call (the loop plus the final
synchronize, over the calls), host CPU time per call of the issuing thread
(time.thread_time: a call that blocks in a spinning driver wait counts;
one that sleeps does not), and the longest single call as the host saw it.
--pin gives each rank its own share of the CPUs (the same for every path).
A run's figure is the slowest rank's (MAX over ranks, exchanged after the
timing with dist.all_reduce). Outputs are checked: every all-reduce of the
first loop adds the same tensor to itself (values stay exact: 2^k fits
bf16), and the step's output is compared across runs.

--profile PREFIX: after the timed runs, 200 all-reduce calls (of the first
size) and 100 steps
under torch.profiler; each rank writes PREFIX.rank<R>.txt: per GPU kernel
(name, device, count, median / max duration), the gaps between
consecutive kernels on each device, and the host-side calls (launches,
event records/waits) with their median / max duration. What this finds
(which device each rank's kernels run on, whether the GPU or the host
waits) is what docs/PERFORMANCE.md cites.

"run" writes OUT.json on rank 0 (kind "eager_loop"; "path" names what
served the calls: nccl, or the stand-in and its mode; one size: "bytes" is
that size and "runs" / "summary" have the loops "allreduce" and "step", as
always; several sizes: "bytes" is their list and the all-reduce loops are
"allreduce@<bytes>", one per size); "table" prints the markdown table of
several runs side by side with the ratio of each to the first (per loop and
size, where the first has it). NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 are forced: NVLink multicast is never used.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

# This folder's shared helpers, also when perf-tables loads the file by path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import human, parse_sizes, table_command, timed_loop  # noqa: E402

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v


def allreduce_loops(doc):
    """[(loop key, bytes)] of a document's all-reduce loops: "allreduce" for
    a run of one size (every document before the size lists), else
    "allreduce@<bytes>" per size."""
    if isinstance(doc["bytes"], list):
        return [(f"allreduce@{b}", b) for b in doc["bytes"]]
    return [("allreduce", doc["bytes"])]


def path_name():
    """What serves this process's NCCL calls: "nccl", or "symm-<mode>"."""
    if "symmcomm_nccl" not in os.environ.get("LD_PRELOAD", ""):
        return "nccl"
    return "symm-" + (os.environ.get("SYMM_NCCL_MODE") or "auto").lower()


def pin_cpus(local_rank, local_world):
    """--pin: this process (every thread) on its own share of the CPUs the
    process may use, the same for every path, so that two ranks' threads
    never compete for a core and a run is not slower only because the OS
    moved it (the runs' spread then shows the library, not the scheduler)."""
    cpus = sorted(os.sched_getaffinity(0))
    share = max(1, len(cpus) // max(1, local_world))
    mine = cpus[local_rank * share:(local_rank + 1) * share] or cpus
    os.sched_setaffinity(0, mine)


def spread(values):
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def run(a, argv):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if a.pin:
        pin_cpus(local, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()

    # Loop 1: one tensor per size, all-reduced in place. Zeros stay exact
    # whatever the number of calls (ones would double each call and
    # overflow); a nonzero value is checked once after the runs.
    sizes = a.bytes
    ar_bufs = [torch.zeros(b // 2, dtype=torch.bfloat16, device=dev) for b in sizes]
    loop_key = {b: ("allreduce" if len(sizes) == 1 else f"allreduce@{b}") for b in sizes}

    gen = torch.Generator(device=dev)

    def rand(shape, seed, scale):
        gen.manual_seed(seed)
        return ((torch.rand(shape, device=dev, generator=gen) * 2 - 1) * scale).to(torch.bfloat16)

    x = rand((a.tokens, a.hidden), 7, 1.0)
    w1 = rand((a.hidden, a.ffn), 100 + rank, a.hidden ** -0.5)
    w2 = rand((a.ffn, a.hidden), 200 + rank, a.ffn ** -0.5)

    def ar_caller(buf):
        def ar_call():
            dist.all_reduce(buf)
        return ar_call

    ar_calls = [ar_caller(buf) for buf in ar_bufs]
    ar_call = ar_calls[0]  # the profiled stretch's (the first size)

    def step_call():
        y = F.gelu(x @ w1, approximate="tanh") @ w2
        dist.all_reduce(y)
        return y

    def timed(fn, n):
        return timed_loop(fn, n, dist.barrier)

    def slowest(m):
        """The run's figures, each the MAX over ranks (after the timing)."""
        keys = sorted(m)
        t = torch.tensor([m[k] for k in keys], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return dict(zip(keys, t.tolist()))

    # Warm-up: first calls pay lazy set-up (kernel loads, buffer checks).
    for _ in range(a.warmup):
        for call in ar_calls:
            call()
        step_call()
    torch.cuda.synchronize()
    reference = step_call().float().sum().item()

    runs = {**{loop_key[b]: [] for b in sizes}, "step": []}
    for r in range(a.runs):
        for b, call in zip(sizes, ar_calls):
            runs[loop_key[b]].append(slowest(timed(call, a.calls)))
        runs["step"].append(slowest(timed(step_call, a.steps)))
        if rank == 0:
            st = runs["step"][-1]
            ars = "; ".join(f"all_reduce {b} B: {ar['wall_us']:.1f} us/call wall, {ar['cpu_us']:.1f} CPU, longest "
                            f"{ar['longest_us']:.0f}" for b in sizes for ar in [runs[loop_key[b]][-1]])
            print(f"[{path_name()} n{world}] run {r}: {ars}; step: {st['wall_us']:.1f} us wall, "
                  f"{st['cpu_us']:.1f} CPU, longest {st['longest_us']:.0f}", flush=True)

    # Correctness: zeros stay zeros; a known value sums exactly; the step
    # gives the same output every time.
    ok = True
    for buf in ar_bufs:
        ok = ok and bool((buf == 0).all().item())
        buf.fill_(1.0)
        dist.all_reduce(buf)
        ok = ok and bool((buf == float(world)).all().item())
    again = step_call().float().sum().item()
    ok = ok and again == reference
    flag = torch.tensor([0 if ok else 1], device=dev)
    dist.all_reduce(flag)
    correct = flag.item() == 0

    if a.profile:
        profile(a, rank, dev, ar_call, step_call)

    doc = None
    if rank == 0:
        preload = os.environ.get("LD_PRELOAD", "")
        env = {k: os.environ[k] for k in sorted(os.environ) if k.startswith("SYMM_")}
        doc = {
            "kind": "eager_loop", "path": path_name(), "label": a.label or path_name(), "env": env,
            "ld_preload": preload,
            "command": " ".join(f"{k}={v}" for k, v in env.items())
            + (f" LD_PRELOAD={preload}" if preload else "")
            + " torchrun --nproc-per-node=%d %s" % (world, " ".join([os.path.relpath(__file__)] + argv)),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "world": world, "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "bytes": sizes[0] if len(sizes) == 1 else sizes, "calls": a.calls, "steps": a.steps, "tokens": a.tokens, "hidden": a.hidden,
            "ffn": a.ffn, "correct": correct, "pinned": a.pin,
            "runs": runs,
            "summary": {loop: {k: spread([r[k] for r in rs]) for k in ("wall_us", "cpu_us", "longest_us")}
                        for loop, rs in runs.items()},
        }
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"[{path_name()} n{world}] outputs {'correct' if correct else 'WRONG'}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if correct else 1


def profile(a, rank, dev, ar_call, step_call):
    """A short profiled stretch of both loops; a per-rank text summary."""
    import torch
    from torch.profiler import ProfilerActivity, profile as tprofile

    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(200):
            ar_call()
        torch.cuda.synchronize()
        for _ in range(100):
            step_call()
        torch.cuda.synchronize()
    kernels, host, per_device = {}, {}, {}
    for e in prof.events():
        dur = e.time_range.end - e.time_range.start  # µs
        if e.device_type == torch.autograd.DeviceType.CUDA:
            key = (e.name[:90], e.device_index)
            kernels.setdefault(key, []).append(dur)
            per_device.setdefault(e.device_index, []).append((e.time_range.start, e.time_range.end, e.name[:40]))
        elif any(s in e.name for s in ("Launch", "EventRecord", "StreamWaitEvent", "Synchronize", "Memcpy",
                                       "all_reduce", "allreduce", "Query", "Malloc", "Free")):
            host.setdefault(e.name[:70], []).append(dur)
    lines = [f"rank {rank} (device {dev.index}): torch.profiler over 200 all_reduce calls then 100 steps"]
    lines.append("\n## GPU kernels: name | device | count | median us | max us | total us")
    for (name, d), ds in sorted(kernels.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"{name} | {d} | {len(ds)} | {statistics.median(ds):.1f} | {max(ds):.1f} | {sum(ds):.0f}")
    lines.append("\n## Gaps between consecutive kernels, per device (any stream): device | count | median us | "
                 "max us | the kernel after the largest gap")
    for key, ks in sorted(per_device.items()):
        ks.sort()
        gaps = [(ks[i][0] - ks[i - 1][1], ks[i][2]) for i in range(1, len(ks))]
        if gaps:
            big = max(gaps)
            lines.append(f"{key} | {len(gaps)} | {statistics.median(g for g, _ in gaps):.1f} | {big[0]:.1f} | {big[1]}")
    lines.append("\n## Host calls: name | count | median us | max us | total us")
    for name, ds in sorted(host.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"{name} | {len(ds)} | {statistics.median(ds):.1f} | {max(ds):.1f} | {sum(ds):.0f}")
    # The first collective kernels with absolute times (ns since the epoch,
    # where the profiler says when its trace started), to line the ranks up.
    try:
        base_ns = prof.profiler.kineto_results.trace_start_ns()
    except Exception:  # older PyTorch: relative times only
        base_ns = 0
    lines.append(f"\n## First collective kernels (trace start {base_ns} ns): start us | end us | name")
    colls = sorted((e.time_range.start, e.time_range.end, e.name[:60]) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and ("symm_" in e.name or "nccl" in e.name.lower()))
    for st, en, name in colls[:80]:
        lines.append(f"{st:.1f} | {en:.1f} | {name}")
    with open(f"{a.profile}.rank{rank}.txt", "w") as f:
        f.write("\n".join(lines) + "\n")


def loops(doc):
    """[(loop key, what the table calls it, (kind, bytes) to match loops
    across documents)] of a document, all-reduces first."""
    out = []
    for key, b in allreduce_loops(doc):
        out.append((key, f"all_reduce {human(b)}", ("allreduce", b)))
    out.append(("step", f"MLP step, {doc['tokens']} tokens", ("step", None)))
    return out


def render(docs):
    """The markdown table of several runs (the first is the reference of the
    ratio column, for the loops it has). scripts/perf-tables uses this too."""
    base = docs[0]
    base_loops = {match: key for key, _, match in loops(base)}
    out = [f"| path | ranks | loop | wall per call, min / median / max (µs) | host CPU per call, min / median / max "
           f"(µs) | longest call, max (µs) | {base.get('label', base['path'])} / this (median) | correct |",
           "|---|---:|---|---|---|---:|---:|---|"]
    for d in docs:
        for loop, what, match in loops(d):
            s = d["summary"][loop]
            ratio = "—"
            if match in base_loops:
                b = base["summary"][base_loops[match]]
                ratio = f"{b['wall_us']['median'] / s['wall_us']['median']:.2f}"
            out.append(f"| {d.get('label', d['path'])} | {d['world']} | {what} | {s['wall_us']['min']:.1f} / {s['wall_us']['median']:.1f} / "
                       f"{s['wall_us']['max']:.1f} | {s['cpu_us']['min']:.1f} / {s['cpu_us']['median']:.1f} / "
                       f"{s['cpu_us']['max']:.1f} | {s['longest_us']['max']:.0f} | "
                       f"{ratio} | {'yes' if d['correct'] else 'NO'} |")
    out.append("")
    for d in docs:
        out.append(f"- {d.get('label', d['path'])}: `{d['command']}`")
    out.append(f"\n{base['date']}; {base['world']} x {base['gpu']}; PyTorch {base['torch']}, NCCL {base['nccl']}; "
               f"{len(base['runs']['step'])} runs of {base['calls']} all_reduce calls (per size) and "
               f"{base['steps']} steps each; hidden {base['hidden']}, FFN per rank {base['ffn']}, bf16.")
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    status = table_command(argv, render, "eager_loop_bench.py")
    if status is not None:
        return status
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("run",))
    ap.add_argument("out", help="JSON results (rank 0)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--bytes", type=parse_sizes, default=[256 << 10],
                    help="all-reduce size, or a comma-separated list of sizes (8,4K,256K,4M): one loop per size")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--ffn", type=int, default=4096, help="FFN width of this rank's slice (W1 is hidden x ffn)")
    ap.add_argument("--pin", action="store_true", help="pin each rank to its own share of the CPUs")
    ap.add_argument("--label", default="", help="what the table calls this run (default: the path)")
    ap.add_argument("--profile", default="", help="write PREFIX.rank<R>.txt with a profiled stretch")
    a = ap.parse_args(argv)
    return run(a, argv)


if __name__ == "__main__":
    sys.exit(main())
