"""All-reduce on symmetric memory as PyTorch users would call it, side by
side in one process per rank: PyTorch's NCCL, PyTorch's own symmetric-memory
kernels and symmcomm.

    torchrun --standalone --nproc-per-node=N tests/torch/allreduce_torch_bench.py run OUT.json \
        [--sizes 64K,256K,1M,4M,16M,64M,256M,1G] [--one-shot-max 16M] [--runs 3] [--min-ms 100]
    python3 tests/torch/allreduce_torch_bench.py table OUT.json [...]

Per size (bytes of bf16, sum), each path in place on its own buffer:

  nccl       dist.all_reduce on an ordinary tensor (PyTorch's NCCL).
  one_shot   torch.ops.symm_mem.one_shot_all_reduce_out (or
             one_shot_all_reduce where there is no _out form) from a
             tensor of torch.distributed._symmetric_memory: every rank
             reads every peer's input; up to --one-shot-max only, as users
             keep it to small messages.
  two_shot   torch.ops.symm_mem.two_shot_all_reduce_ on such a tensor (what
             vLLM and SGLang call where multicast is off).
  symmcomm   symmcomm's Communicator.all_reduce on a tensor of
             symmcomm.symmetric_memory (the library's default algorithm).

Times: µs per call issued back to back (no synchronisation inside) for at
least --min-ms, the slowest rank's; min / median / max over --runs runs.
Each path's result is checked once per size before timing, bit for bit
(small integers, exact in bf16). Rank 0 prints a markdown table and writes
OUT.json for scripts/perf-tables (kind "allreduce_torch").

NVLink multicast is never used: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are forced
before anything starts.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import collective_runs, human, parse_bytes, parse_sizes, table_command  # noqa: E402

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

PATHS = ("nccl", "one_shot", "two_shot", "symmcomm")
DEFAULT_SIZES = "64K,256K,1M,4M,16M,64M,256M,1G"


def run(args):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as torch_symm

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    W, R = dist.get_world_size(), dist.get_rank()
    group_name = dist.group.WORLD.group_name
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import symmcomm
    from symmcomm import symmetric_memory as sc_symm

    # PyTorch's symmetric memory on its CUDA backend (fused_torch_bench.py
    # explains the release differences).
    from fused_torch_bench import call_by_schema, enable_symm_mem
    backend = enable_symm_mem(group_name)
    ops = torch.ops.symm_mem
    comm = sc_symm.get_communicator()

    maxn = max(args.sizes) // 2
    plain = torch.empty(maxn, dtype=torch.bfloat16, device=dev)
    t_symm = torch_symm.empty(maxn, dtype=torch.bfloat16, device=dev)
    torch_symm.rendezvous(t_symm, group_name)
    s_symm = sc_symm.empty(maxn, dtype=torch.bfloat16, device=dev)
    one_out = torch.empty(min(maxn, args.one_shot_max // 2), dtype=torch.bfloat16, device=dev)

    def pattern(n):
        return torch.arange(n, device=dev, dtype=torch.int32) % 7

    def fill(buf, n):
        # Rank-dependent small integers: every sum of up to 8 ranks is exact in bf16.
        buf[:n].copy_((pattern(n) + R).to(torch.bfloat16))

    rows = []
    for size in args.sizes:
        n = size // 2
        want = (pattern(n) * W + W * (W - 1) // 2).to(torch.bfloat16)  # the sum over r of pattern + r
        calls = {
            "nccl": lambda: dist.all_reduce(plain[:n]),
            "two_shot": lambda: ops.two_shot_all_reduce_(t_symm[:n], "sum", group_name),
            "symmcomm": lambda: comm.all_reduce(s_symm[:n]),
        }
        bufs = {"nccl": plain, "two_shot": t_symm, "symmcomm": s_symm}
        if size <= args.one_shot_max:
            if hasattr(ops, "one_shot_all_reduce_out"):
                calls["one_shot"] = lambda: call_by_schema(ops.one_shot_all_reduce_out, input=t_symm[:n], reduce_op="sum",
                                                           group_name=group_name, out=one_out[:n])
            else:
                calls["one_shot"] = lambda: one_out[:n].copy_(ops.one_shot_all_reduce(t_symm[:n], "sum", group_name))
            bufs["one_shot"] = t_symm
        for path in PATHS:
            if path not in calls:
                continue
            if R == 0:
                print(f"{human(size)} {path}", file=sys.stderr, flush=True)
            row = {"bytes": size, "path": path}
            try:
                fill(bufs[path], n)
                torch.cuda.synchronize()
                dist.barrier()
                calls[path]()
                got = one_out[:n] if path == "one_shot" else bufs[path][:n]
                ok = torch.tensor([int(torch.equal(got, want))], device=dev)
                dist.all_reduce(ok, op=dist.ReduceOp.MIN)
                row["ok"] = bool(ok.item())
                us = collective_runs(torch, dist, dev, calls[path], args.min_ms, args.runs)
                row.update(min_us=min(us), median_us=statistics.median(us), max_us=max(us))
            except Exception as e:  # a path PyTorch refuses at this size: say so, go on
                row.update(ok=False, error=f"{type(e).__name__}: {e}"[:300])
                torch.cuda.synchronize()
            rows.append(row)
    if R == 0:
        doc = {"kind": "allreduce_torch",
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "world": W,
               "device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
               "nccl": ".".join(map(str, torch.cuda.nccl.version())), "symmcomm": symmcomm.__version__,
               "symm_mem_backend": backend, "command": " ".join(sys.argv), "rows": rows}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(render([doc]))
    wrong = any(not r["ok"] and "error" not in r for r in rows)
    dist.destroy_process_group()
    return 1 if wrong else 0


def render(docs):
    """One markdown table per document: per size the median µs of each path
    (min-max), then NCCL's and the faster PyTorch kernel's time over
    symmcomm's (> 1: symmcomm faster)."""
    out = []
    for doc in docs:
        out.append(f"#### All-reduce on symmetric memory, {doc['world']} ranks, bf16 sum, in place "
                   f"({doc['device']}, {doc['date']})\n")
        out.append(f"`{doc['command']}`; torch {doc['torch']} (symmetric memory: {doc['symm_mem_backend']}), "
                   f"NCCL {doc['nccl']}, symmcomm {doc['symmcomm']}; eager, back to back; median of runs (min-max), "
                   "the slowest rank's, µs per call.\n")
        by = {(r["bytes"], r["path"]): r for r in doc["rows"]}
        head = ["size", "NCCL", "torch one-shot", "torch two-shot", "symmcomm", "NCCL / symmcomm",
                "best torch / symmcomm", "check"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|---:|" + "---:|" * (len(head) - 2) + ":---|")
        notes = []
        for size in sorted({r["bytes"] for r in doc["rows"]}):
            cells = [human(size)]
            for path in PATHS:
                r = by.get((size, path))
                if r is None:
                    cells.append("-")
                elif "median_us" in r:
                    cells.append(f"{r['median_us']:.1f} ({r['min_us']:.1f}-{r['max_us']:.1f})")
                else:
                    cells.append("failed")
                    notes.append(f"{human(size)} {path}: {r.get('error', 'no time')}")
            mine = by.get((size, "symmcomm"), {}).get("median_us")
            ref = by.get((size, "nccl"), {}).get("median_us")
            torch_best = min((by[(size, p)]["median_us"] for p in ("one_shot", "two_shot")
                              if "median_us" in by.get((size, p), {})), default=None)
            cells.append(f"{ref / mine:.2f}" if ref and mine else "-")
            cells.append(f"{torch_best / mine:.2f}" if torch_best and mine else "-")
            oks = [r["ok"] for (b, _), r in by.items() if b == size and "error" not in r]
            cells.append("ok" if oks and all(oks) else "WRONG")
            out.append("| " + " | ".join(cells) + " |")
        out.extend([""] + [f"- {n}" for n in notes] + ([""] if notes else []))
    return "\n".join(out)


def main(argv):
    rc = table_command(argv, render, "allreduce_torch_bench.py")
    if rc is not None:
        return rc
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cmd", choices=["run"])
    p.add_argument("out")
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes(DEFAULT_SIZES))
    p.add_argument("--one-shot-max", type=parse_bytes, default=16 << 20,
                   help="largest size PyTorch's one-shot kernel runs at (default 16M)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--min-ms", type=float, default=100.0)
    args = p.parse_args(argv)
    if any(s % 16 for s in args.sizes):
        p.error("--sizes: multiples of 16 bytes (PyTorch's kernels move 16-byte vectors)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
