"""torch.distributed (backend "nccl") with and without libsymmcomm_nccl.so
preloaded as libnccl.so.2. One process per GPU. Modes:

  run OUTDIR [NRANKS]      every checked op; each rank saves inputs and
                           outputs to OUTDIR/rank<r>.pt
  compare REF TEST NRANKS  TEST (preloaded) against REF (plain NCCL):
                           integers and order-free float ops must be equal;
                           sums/averages/products must be at least as close
                           to an fp64 reference as NCCL's (within one unit
                           of the dtype's rounding at the result's scale)
  bench OUTJSON [NRANKS]   all_reduce (fp32 sum, in place) time, 8 B to 1 GiB
  table NCCL.json SYMM.json  a markdown table of the two bench runs

scripts/device-nccl runs each mode with and without LD_PRELOAD.
"""
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

FLOAT_TYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INT_TYPES = [torch.int32, torch.int64, torch.uint8]
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
       "min": dist.ReduceOp.MIN, "prod": dist.ReduceOp.PRODUCT}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make(rank, dtype, n, salt, small=False):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype.is_floating_point:
        t = torch.randn(n, generator=g, dtype=torch.float64)
        if small:  # products: values near 1 keep them finite
            t = 1 + 0.25 * t
        return t.to(dtype)
    lo, hi = (0, 3) if small else ((0, 100) if dtype == torch.uint8 else (-1000, 1000))
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)


def worker(rank, world, port, outdir):
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    rec = {}
    salt = 0

    def keep(name, inp, out):
        rec[name] = {"in": inp.cpu() if inp is not None else None, "out": out.cpu()}

    for dtype in FLOAT_TYPES + INT_TYPES:
        for opname, op in OPS.items():
            if opname == "avg" and not dtype.is_floating_point:
                continue
            for n in (1, 1000, 300_001):
                salt += 1
                x = make(rank, dtype, n, salt, small=(opname == "prod")).to(dev)
                y = x.clone()
                dist.all_reduce(y, op=op)
                keep(f"all_reduce/{opname}/{dtype}/{n}", x, y)
        n = 4099
        salt += 1
        x = make(rank, dtype, n, salt).to(dev)
        y = torch.empty(n * world, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(y, x)
        keep(f"all_gather/{dtype}", x, y)
        salt += 1
        x = make(rank, dtype, n * world, salt).to(dev)
        y = torch.empty(n, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(y, x, op=dist.ReduceOp.SUM)
        keep(f"reduce_scatter/sum/{dtype}", x, y)
        salt += 1
        x = make(rank, dtype, n, salt).to(dev)
        y = x.clone()
        dist.broadcast(y, src=world - 1)
        keep(f"broadcast/{dtype}", x, y)
        salt += 1
        x = make(rank, dtype, n, salt).to(dev)
        y = x.clone()
        dist.reduce(y, dst=0, op=dist.ReduceOp.SUM)
        keep(f"reduce/sum/{dtype}", x, y if rank == 0 else x)
        salt += 1
        x = make(rank, dtype, n * world, salt).to(dev)
        y = torch.empty_like(x)
        dist.all_to_all_single(y, x)
        keep(f"all_to_all/{dtype}", x, y)
    # Uneven all_to_all_single (PyTorch issues grouped send/recv with host
    # counts: the drop-in serves the group natively, in one launch), zero
    # splits included from 3 ranks: rank r sends ((r + 2p) % 3) * 37 rows of
    # 5 to rank p != r, and 53 to itself (one rank alone still moves rows).
    def split(src, dst):
        return 53 if src == dst else ((src + 2 * dst) % 3) * 37

    for dtype in (torch.float32, torch.bfloat16):
        salt += 1
        inp = [split(rank, p) for p in range(world)]
        outp = [split(p, rank) for p in range(world)]
        x = make(rank, dtype, sum(inp) * 5, salt).to(dev).view(-1, 5)
        y = torch.full((sum(outp), 5), -1, dtype=dtype, device=dev)
        dist.all_to_all_single(y, x, output_split_sizes=outp, input_split_sizes=inp)
        keep(f"all_to_all_uneven/{dtype}", x, y)
    # send/recv and batch_isend_irecv (a ring); one rank has no peer (PyTorch
    # would wait for a second rank that never comes).
    if world > 1:
        x = make(rank, torch.float32, 65537, 777).to(dev)
        y = torch.empty_like(x)
        if rank == 0:
            dist.send(x, dst=1)
            dist.recv(y, src=1)
        elif rank == 1:
            dist.recv(y, src=0)
            dist.send(x, dst=0)
        else:
            y.copy_(x)
        keep("send_recv", x, y)
        ops = [dist.P2POp(dist.isend, x, (rank + 1) % world), dist.P2POp(dist.irecv, y, (rank - 1) % world)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        keep("batch_isend_irecv", x, y)
    # new_group: the even ranks (and all ranks)
    for ranks in ([r for r in range(world) if r % 2 == 0], list(range(world))):
        grp = dist.new_group(ranks)
        x = make(rank, torch.float32, 10001, 900 + len(ranks)).to(dev)
        y = x.clone()
        if rank in ranks:
            dist.all_reduce(y, group=grp)
        keep(f"new_group/{len(ranks)}", x, y)
    # CUDA-graph-captured all_reduce, replayed
    x = make(rank, torch.float32, 8192, 999).to(dev)
    y = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dist.all_reduce(y)  # warm-up outside capture (as PyTorch requires)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dist.all_reduce(y)
    for _ in range(3):
        y.copy_(x)
        g.replay()
    torch.cuda.synchronize()
    keep("cuda_graph/all_reduce", x, y)
    dist.barrier()
    torch.save(rec, os.path.join(outdir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def reference(name, ins, rank, world):
    """fp64 reference of case `name` for `rank`, from every rank's input."""
    kind = name.split("/")[0]
    x = [t.to(torch.float64) for t in ins]
    if kind in ("all_reduce", "new_group", "cuda_graph"):
        op = name.split("/")[1] if kind == "all_reduce" else "sum"
        if kind == "new_group":
            count = int(name.split("/")[1])
            members = list(range(world)) if count == world else [r for r in range(world) if r % 2 == 0]
            if rank not in members:
                return x[rank]
            x = [x[r] for r in members]
        st = torch.stack(x)
        return {"sum": st.sum(0), "avg": st.mean(0), "max": st.max(0).values, "min": st.min(0).values,
                "prod": st.prod(0)}[op]
    if kind == "all_gather":
        return torch.cat(x)
    if kind == "reduce_scatter":
        return torch.stack(x).sum(0).chunk(world)[rank]
    if kind == "broadcast":
        return x[world - 1]
    if kind == "reduce":
        return torch.stack(x).sum(0) if rank == 0 else x[rank]
    if kind == "all_to_all":
        return torch.cat([x[q].chunk(world)[rank] for q in range(world)])
    if kind == "send_recv":
        return x[1] if rank == 0 else x[0] if rank == 1 else x[rank]
    if kind == "batch_isend_irecv":
        return x[(rank - 1) % world]
    raise KeyError(name)


def compare(ref_dir, test_dir, world):
    bad = 0
    ref = [torch.load(os.path.join(ref_dir, f"rank{r}.pt")) for r in range(world)]
    test = [torch.load(os.path.join(test_dir, f"rank{r}.pt")) for r in range(world)]
    for name in ref[0]:
        ins = [ref[r][name]["in"] for r in range(world)]
        for r in range(world):
            a, b = ref[r][name]["out"], test[r][name]["out"]
            if not torch.equal(ins[r], test[r][name]["in"]):
                print(f"FAIL {name} rank {r}: inputs differ between runs"); bad += 1; continue
            exact = not a.dtype.is_floating_point or not any(k in name for k in ("sum", "avg", "prod", "new_group", "cuda_graph"))
            if exact:
                if not torch.equal(a, b):
                    print(f"FAIL {name} rank {r}: {(a != b).sum().item()} elements differ from NCCL's"); bad += 1
                continue
            exp = reference(name, ins, r, world)
            err_ref = (a.to(torch.float64) - exp).abs().max().item()
            err_test = (b.to(torch.float64) - exp).abs().max().item()
            floor = torch.finfo(a.dtype).eps * exp.abs().max().item()
            if not err_test <= max(err_ref, floor):
                print(f"FAIL {name} rank {r}: max error {err_test:.3g} vs NCCL's {err_ref:.3g} (floor {floor:.3g})"); bad += 1
    print(f"compare: {len(ref[0])} cases x {world} ranks, {bad} failures")
    return 1 if bad else 0


def bench_worker(rank, world, port, out):
    import time
    torch.cuda.set_device(rank)
    torch.zeros(1, device="cuda")  # CUDA context outside the timed part
    t0 = time.perf_counter()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dist.all_reduce(torch.ones(1, device="cuda"))  # communicator init happens here (lazy)
    torch.cuda.synchronize()
    init_s = time.perf_counter() - t0
    res = {}
    nbytes = 8
    while nbytes <= 1 << 30:
        x = torch.ones(nbytes // 4 if nbytes >= 4 else 1, dtype=torch.float32, device="cuda")
        iters = 200 if nbytes <= 1 << 20 else 50 if nbytes <= 1 << 26 else 10
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        res[nbytes] = start.elapsed_time(end) * 1000 / iters
        nbytes *= 8
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"nccl_version": ".".join(map(str, torch.cuda.nccl.version())), "init_s": init_s, "us": res}, f)
    dist.destroy_process_group()


def table(nccl_json, symm_json):
    a, b = json.load(open(nccl_json)), json.load(open(symm_json))
    print(f"Communicator init (init_process_group + first all_reduce, rank 0): NCCL {a['init_s']:.2f} s, "
          f"preloaded {b['init_s']:.2f} s\n")
    print(f"| size | NCCL {a['nccl_version']} (µs) | symmcomm preloaded (µs) | speed-up |")
    print("|---:|---:|---:|---:|")
    for k in a["us"]:
        n = int(k)
        size = f"{n} B" if n < 1024 else f"{n >> 10} KiB" if n < 1 << 20 else f"{n >> 20} MiB" if n < 1 << 30 else "1 GiB"
        print(f"| {size} | {a['us'][k]:.1f} | {b['us'][k]:.1f} | {a['us'][k] / b['us'][k]:.2f}x |")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    if mode == "table":
        table(sys.argv[2], sys.argv[3])
        sys.exit(0)
    world = int(sys.argv[3]) if len(sys.argv) > 3 else torch.cuda.device_count()
    target = worker if mode == "run" else bench_worker
    if mode == "run":
        os.makedirs(sys.argv[2], exist_ok=True)
    mp.spawn(target, args=(world, free_port(), sys.argv[2]), nprocs=world, join=True)
