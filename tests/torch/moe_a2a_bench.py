"""Mixture-of-experts dispatch and combine as an expert-parallel layer
issues them, side by side in one process per rank:

    torchrun --standalone --nproc-per-node=N tests/torch/moe_a2a_bench.py run OUT.json \
        [--tokens 128,1024,4096] [--hidden 7168] [--topk 8] [--experts-per-rank 8] \
        [--skew 0,1.2] [--runs 3] [--min-ms 200] [--align 16]
    python3 tests/torch/moe_a2a_bench.py table OUT.json [...]

Each rank routes --tokens tokens of --hidden bf16 to --topk distinct
experts of N x --experts-per-rank (--skew S: expert e drawn with weight
1 / (1 + e)^S, so S = 0 is uniform and S > 0 piles tokens on the first
experts, whose rank then receives the most), lays the token copies out
rank-major / expert-minor, and moves them to the experts' ranks
(dispatch) and back (combine, the identity standing in for the expert
GEMMs), three ways:

  nccl     what PyTorch code does today without device counts: the per-rank
           counts exchanged with dist.all_to_all_single, copied to the host
           (.tolist(): a stream synchronisation), then dist.all_to_all_single
           with split sizes (grouped NCCL send/recv); the combine reuses the
           host counts. Eager only: the host copy cannot be captured.
  vdev     symmcomm's all_to_all_vdev (counts per rank on the GPU; output
           rank-major), and for the combine all_to_all_vdev again with the
           received counts as the send counts.
  vdev2d   symmcomm's all_to_all_vdev_2d (counts per rank and expert on the
           GPU; output grouped by expert, each group aligned to --align
           rows) and all_to_all_vdev_2d_offset back.

symmcomm's paths run eager (back to back, no synchronisation inside) and
graph-replayed (dispatch and combine captured once). Per path, launch kind
and op (dispatch, combine, both) the time per call over --runs runs of at
least --min-ms each: min / median / max (µs), the slowest rank's. The
round trip is checked once per path before timing: the combine's output
must equal the dispatch's input, bit for bit. Rank 0 reports each stage on
stderr as it starts; after --watchdog-s seconds (default 900) every rank
prints its Python stacks and exits, so a stuck path shows where it stuck
instead of holding the GPUs.

Run it under plain torchrun: PyTorch's NCCL serves the nccl path (with
symmcomm's libnccl.so.2 preloaded, the stand-in does). NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are forced.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import collective_runs, table_command  # noqa: E402

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

PATHS = ("nccl", "vdev", "vdev2d")
OPS = ("dispatch", "combine", "both")


def parse_ints(s):
    try:
        out = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a list of integers") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{s!r}: every value must be at least 1")
    return out


def parse_floats(s):
    try:
        out = [float(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a list of numbers") from None
    if min(out) < 0:
        raise argparse.ArgumentTypeError(f"{s!r}: skews are at least 0")
    return out


def route(torch, tokens, world, ne, topk, skew, seed):
    """(token index of each copy in dispatch order, copies per global expert):
    each token goes to `topk` distinct experts of world * ne, drawn with
    weights 1 / (1 + e)^skew; copies sorted by expert (rank-major, expert-minor)."""
    experts = world * ne
    g = torch.Generator().manual_seed(seed)
    weights = (1.0 + torch.arange(experts, dtype=torch.float64)).pow(-skew)
    chosen = torch.multinomial(weights.expand(tokens, experts), topk, replacement=False, generator=g)
    flat = chosen.flatten()
    order = torch.argsort(flat, stable=True)
    token_of_copy = torch.arange(tokens).repeat_interleave(topk)[order]
    return token_of_copy, torch.bincount(flat, minlength=experts)


def run(args):
    import faulthandler

    import torch
    import torch.distributed as dist

    if args.watchdog_s > 0:
        faulthandler.dump_traceback_later(args.watchdog_s, exit=True)

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    W, R = dist.get_world_size(), dist.get_rank()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import symmcomm
    from symmcomm import symmetric_memory as symm_mem

    comm = symm_mem.get_communicator()
    ne, topk, H = args.experts_per_rank, args.topk, args.hidden
    if topk > W * ne:
        sys.exit(f"--topk {topk} is more than the {W * ne} experts")
    maxT = max(args.tokens)
    # Capacity: a rank receives at most min(topk, ne) copies of each token of
    # each rank, plus the alignment's padding.
    cap = W * maxT * min(topk, ne) + ne * args.align
    inp = symm_mem.empty(maxT * topk, H, dtype=torch.bfloat16)
    mid = symm_mem.empty(cap, H, dtype=torch.bfloat16)
    back = torch.empty(maxT * topk, H, dtype=torch.bfloat16, device=dev)
    oso = torch.empty(2, W, dtype=torch.int64, device=dev)
    oso_back = torch.empty(2, W, dtype=torch.int64, device=dev)
    oso2 = torch.empty(2, W * ne, dtype=torch.int64, device=dev)
    oso2_back = torch.empty(2, W * ne, dtype=torch.int64, device=dev)
    rows = []
    for T in args.tokens:
        for skew in args.skew:
            token_of_copy, per_expert = route(torch, T, W, ne, topk, skew, seed=1000 * R + T)
            n_copies = T * topk
            x = torch.randn(T, H, dtype=torch.bfloat16, device=dev)
            send = inp[:n_copies]
            send.copy_(x[token_of_copy.to(dev)])
            splits2d = per_expert.to(dev)
            splits1d = per_expert.view(W, ne).sum(1).to(dev)

            def nccl_dispatch():
                recv_counts = torch.empty_like(splits1d)
                dist.all_to_all_single(recv_counts, splits1d)
                sl, rl = splits1d.tolist(), recv_counts.tolist()
                dist.all_to_all_single(mid[:sum(rl)], send, rl, sl)
                return sl, rl

            lists = {}

            def nccl_combine():
                sl, rl = lists["nccl"]
                dist.all_to_all_single(back[:n_copies], mid[:sum(rl)], sl, rl)

            def nccl_both():
                lists["nccl"] = nccl_dispatch()
                nccl_combine()

            def vdev_dispatch():
                comm.all_to_all_vdev(send, mid, splits1d, oso)

            def vdev_combine():
                comm.all_to_all_vdev(mid, back, oso[0], oso_back)

            def vdev_both():
                vdev_dispatch()
                vdev_combine()

            def vdev2d_dispatch():
                comm.all_to_all_vdev_2d(send, mid, splits2d, oso2, major_align=args.align)

            def vdev2d_combine():
                comm.all_to_all_vdev_2d_offset(mid, back, oso2, oso2_back)

            def vdev2d_both():
                vdev2d_dispatch()
                vdev2d_combine()

            fns = {"nccl": (nccl_dispatch, nccl_combine, nccl_both), "vdev": (vdev_dispatch, vdev_combine, vdev_both),
                   "vdev2d": (vdev2d_dispatch, vdev2d_combine, vdev2d_both)}
            for path, (d, c, both) in fns.items():
                if R == 0:
                    print(f"tokens {T} skew {skew} {path}: round trip, then timing", file=sys.stderr, flush=True)
                back.zero_()
                both()
                torch.cuda.synchronize()
                ok = torch.tensor([int(torch.equal(back[:n_copies], send))], device=dev)
                dist.all_reduce(ok, op=dist.ReduceOp.MIN)
                kinds = [("eager", d, c, both)]
                if path != "nccl":
                    graphs = {}
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    for name, fn in (("dispatch", d), ("combine", c), ("both", both)):
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g, stream=s):
                            fn()
                        graphs[name] = g
                    torch.cuda.synchronize()
                    kinds.append(("graph", graphs["dispatch"].replay, graphs["combine"].replay, graphs["both"].replay))
                for launch, fd, fc, fb in kinds:
                    for op, fn in zip(OPS, (fd, fc, fb)):
                        if path == "nccl" and op == "combine":
                            lists["nccl"] = nccl_dispatch()
                        per_run = collective_runs(torch, dist, dev, fn, args.min_ms, args.runs)
                        rows.append({"tokens": T, "skew": skew, "path": path, "launch": launch, "op": op,
                                     "ok": bool(ok.item()), "min_us": min(per_run),
                                     "median_us": statistics.median(per_run), "max_us": max(per_run),
                                     "bytes_per_rank": n_copies * H * 2})
                if R == 0:
                    print(f"tokens {T} skew {skew} {path}: round trip {'ok' if ok.item() else 'WRONG'}", flush=True)
    if R == 0:
        doc = {"kind": "moe_a2a", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "world": W, "hidden": H, "topk": topk, "experts_per_rank": ne, "align": args.align,
               "device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
               "nccl": ".".join(map(str, torch.cuda.nccl.version())), "symmcomm": symmcomm.__version__,
               "command": " ".join(sys.argv), "rows": rows}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(render([doc]))
    wrong = any(not r["ok"] for r in rows)
    dist.destroy_process_group()
    return 1 if wrong else 0


def render(docs):
    """One markdown table per document: per tokens and skew, the median µs of
    each path's dispatch, combine and both (eager; symmcomm also graph), and
    the nccl path's eager time over each symmcomm one (> 1: symmcomm faster)."""
    out = []
    for doc in docs:
        out.append(f"#### MoE dispatch / combine, {doc['world']} ranks, hidden {doc['hidden']} bf16, top-{doc['topk']} of "
                   f"{doc['world']} x {doc['experts_per_rank']} experts ({doc['device']}, {doc['date']})\n")
        out.append(f"`{doc['command']}`; torch {doc['torch']}, NCCL {doc['nccl']}, symmcomm {doc['symmcomm']}; "
                   f"times: median of runs (min-max), the slowest rank's, µs per call.\n")
        cols = [(p, launch) for p in PATHS for launch in ("eager", "graph") if not (p == "nccl" and launch == "graph")]
        by = {(r["tokens"], r["skew"], r["path"], r["launch"], r["op"]): r for r in doc["rows"]}
        head = ["tokens", "skew", "op"] + [f"{p} {launch}" for p, launch in cols] + \
               [f"nccl / {p} {launch}" for p, launch in cols if p != "nccl"] + ["round trip"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|---:|---:|:---|" + "---:|" * (len(head) - 4) + ":---|")
        keys = sorted({(r["tokens"], r["skew"]) for r in doc["rows"]})
        for T, skew in keys:
            for op in OPS:
                cells = [str(T), f"{skew:g}", op]
                for p, launch in cols:
                    r = by.get((T, skew, p, launch, op))
                    cells.append(f"{r['median_us']:.1f} ({r['min_us']:.1f}-{r['max_us']:.1f})" if r else "-")
                ref = by.get((T, skew, "nccl", "eager", op))
                for p, launch in cols:
                    if p == "nccl":
                        continue
                    r = by.get((T, skew, p, launch, op))
                    cells.append(f"{ref['median_us'] / r['median_us']:.2f}" if r and ref else "-")
                oks = [r["ok"] for (t, s, *_), r in by.items() if (t, s) == (T, skew)]
                cells.append("ok" if all(oks) else "WRONG")
                out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv):
    rc = table_command(argv, render, "moe_a2a_bench.py")
    if rc is not None:
        return rc
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cmd", choices=["run"])
    p.add_argument("out")
    p.add_argument("--tokens", type=parse_ints, default=[128, 1024, 4096])
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts-per-rank", type=int, default=8)
    p.add_argument("--skew", type=parse_floats, default=[0.0, 1.2])
    p.add_argument("--align", type=int, default=16, help="rows each expert's group starts at a multiple of (vdev2d)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--min-ms", type=float, default=200.0)
    p.add_argument("--watchdog-s", type=float, default=900.0,
                   help="after this many seconds print every thread's stack and exit (0: never)")
    args = p.parse_args(argv)
    if args.hidden < 8 or args.hidden % 8:
        p.error("--hidden must be a positive multiple of 8 (16-byte rows)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
