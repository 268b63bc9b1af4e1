"""A tensor-parallel MLP step in PyTorch, timed end to end: run it once as
is (NCCL) and once with symmcomm's libnccl.so.2 stand-in preloaded, then
compare.

    torchrun --standalone --nproc-per-node=N tests/torch/tp_mlp_bench.py run OUT.json \
        [--hidden 8192] [--ffn 4*hidden] [--tokens 16,4096] [--iters 50] [--warmup 10]
    LD_PRELOAD=.../libsymmcomm_nccl.so torchrun ... tp_mlp_bench.py run OUT2.json ...
    python3 tests/torch/tp_mlp_bench.py table OUT.json OUT2.json

One process per GPU (rank r on GPU LOCAL_RANK). One step, Megatron-style
(bf16): y = GELU(x @ W1) @ W2, then all_reduce(y), with W1 the rank's
hidden x ffn/N column slice and W2 its ffn/N x hidden row slice; x is
tokens x hidden, the same on every rank. Per token count it times, as the
slowest rank's mean per step:
  GEMMs only   the two GEMMs and the GELU, no all-reduce (what the
               communication adds is the difference);
  eager        the whole step, launched from Python every time;
  graph        the whole step captured once in a CUDA graph, replayed.
Each is timed as users issue steps: --iters steps back to back (no
synchronisation inside the loop), one synchronize after, --runs times;
the figure is the median run (the slowest rank's mean per step) and the
table gives the runs' spread (a stall that comes and goes, as the 2-rank
eager one did, shows there instead of hiding behind a sync per step).
It records a checksum of the all-reduced output (the same inputs in both
runs, so the two checksums must agree to within the reduction's rounding).

"run" writes OUT.json on rank 0 (kind "tp_mlp", "preloaded" telling
whether LD_PRELOAD holds libsymmcomm_nccl); "table" prints the markdown
table of two runs with the ratio NCCL time / preloaded time (> 1: faster
with the stand-in); scripts/perf-tables does the same among the other
tables. NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 are forced: NVLink multicast is never used.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v


def run(a, argv):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    ffn = a.ffn or 4 * a.hidden
    if ffn % world:
        raise SystemExit(f"--ffn {ffn} is not divisible by {world} ranks")
    gen = torch.Generator(device=dev)

    def rand(shape, seed, scale):
        gen.manual_seed(seed)
        return ((torch.rand(shape, device=dev, generator=gen) * 2 - 1) * scale).to(torch.bfloat16)

    w1 = rand((a.hidden, ffn // world), 100 + rank, a.hidden ** -0.5)
    w2 = rand((ffn // world, a.hidden), 200 + rank, ffn ** -0.5)

    def gemms(x):
        return F.gelu(x @ w1, approximate="tanh") @ w2

    def step(x):
        y = gemms(x)
        dist.all_reduce(y)
        return y

    def slowest(ms):
        t = torch.tensor([ms], device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item() * 1000.0  # microseconds

    def timed(fn):
        """Median over --runs of the slowest rank's mean per step; and the spread."""
        for _ in range(a.warmup):
            fn()
        runs = []
        for _ in range(a.runs):
            torch.cuda.synchronize()
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(a.iters):
                fn()
            end.record()
            torch.cuda.synchronize()
            runs.append(slowest(start.elapsed_time(end) / a.iters))
        runs.sort()
        return statistics.median(runs), [runs[0], statistics.median(runs), runs[-1]]

    rows = []
    for tokens in a.tokens:
        x = rand((tokens, a.hidden), 7, 1.0)
        checksum_t = step(x).double().sum()
        torch.cuda.synchronize()
        checksum = checksum_t.item()
        gemm_us, gemm_spread = timed(lambda: gemms(x))
        eager_us, eager_spread = timed(lambda: step(x))
        # CUDA graph: warm up on a side stream (as PyTorch requires before
        # capturing NCCL calls), capture one step, time its replays.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step(x)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y_static = step(x)
        graph.replay()
        torch.cuda.synchronize()
        graph_checksum = y_static.double().sum().item()
        graph_us, graph_spread = timed(graph.replay)
        rows.append({"tokens": tokens, "gemm_us": gemm_us, "eager_us": eager_us, "graph_us": graph_us,
                     "gemm_spread": gemm_spread, "eager_spread": eager_spread, "graph_spread": graph_spread,
                     "checksum": checksum, "graph_checksum": graph_checksum})
        del graph, y_static
        if rank == 0:
            print(f"tokens {tokens}: GEMMs only {gemm_us:.1f} us, eager step {eager_us:.1f} us (runs "
                  f"{eager_spread[0]:.1f}-{eager_spread[2]:.1f}), graph step {graph_us:.1f} us, checksum "
                  f"{checksum:.6e} (graph {graph_checksum:.6e})", flush=True)

    if rank == 0:
        preload = os.environ.get("LD_PRELOAD", "")
        doc = {
            "kind": "tp_mlp", "preloaded": "symmcomm_nccl" in preload, "ld_preload": preload,
            "command": ("LD_PRELOAD=%s " % preload if preload else "")
            + "torchrun --nproc-per-node=%d %s" % (world, " ".join([os.path.relpath(__file__)] + argv)),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "world": world, "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "hidden": a.hidden, "ffn": ffn, "rows": rows,
            "runs": a.runs, "iters": a.iters,
        }
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def render(a, b):
    """The markdown table of a run without (a) and with (b) the stand-in:
    medians, each eager cell with its runs' spread. scripts/perf-tables
    uses this too."""
    def cell(r, key):
        lo, _, hi = r.get(key.replace("_us", "_spread"), [None, None, None])
        return f"{r[key]:.1f}" + (f" ({lo:.1f}–{hi:.1f})" if lo is not None else "")

    out = ["| tokens | GEMMs only (µs) | eager, NCCL (µs, runs' range) | eager, preloaded (µs, runs' range) | "
           "NCCL / preloaded | graph, NCCL (µs) | graph, preloaded (µs) | NCCL / preloaded | output rel. diff |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for ra in a["rows"]:
        rb = next((r for r in b["rows"] if r["tokens"] == ra["tokens"]), None)
        if rb is None:
            continue
        diff = abs(ra["checksum"] - rb["checksum"]) / max(abs(ra["checksum"]), 1e-30)
        out.append(f"| {ra['tokens']} | {ra['gemm_us']:.1f} | {cell(ra, 'eager_us')} | {cell(rb, 'eager_us')} | "
                   f"{ra['eager_us'] / rb['eager_us']:.2f} | {ra['graph_us']:.1f} | {rb['graph_us']:.1f} | "
                   f"{ra['graph_us'] / rb['graph_us']:.2f} | {diff:.1e} |")
    runs = f"{a['runs']} runs of {a['iters']} steps back to back" if "runs" in a else "one run"
    out.append(f"\nWithout: `{a['command']}`\n\nWith: `{b['command']}`\n\n{a['date']}; {a['world']} × {a['gpu']}; "
               f"PyTorch {a['torch']}, NCCL {a['nccl']}; hidden {a['hidden']}, FFN {a['ffn']} (split over the ranks), "
               f"bf16; one step = x·W1 (column-parallel), GELU, ·W2 (row-parallel), all_reduce; slowest rank's mean "
               f"per step, median of {runs}.")
    return "\n".join(out)


def table(nccl_json, symm_json):
    docs = []
    for p in (nccl_json, symm_json):
        with open(p) as f:
            docs.append(json.load(f))
    print(render(*docs))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["table"] and len(argv) == 3:
        return table(argv[1], argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("run",))
    ap.add_argument("out", help="JSON results (rank 0)")
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--ffn", type=int, default=0, help="FFN width, split over the ranks (default 4 x hidden)")
    ap.add_argument("--tokens", type=lambda s: [int(t) for t in s.split(",")], default=[16, 4096])
    ap.add_argument("--iters", type=int, default=200, help="steps per timed run, back to back")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per figure (median reported, spread kept)")
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args(argv)
    return run(a, argv)


if __name__ == "__main__":
    sys.exit(main())
