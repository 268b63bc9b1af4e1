"""PyTorch's communicators and NCCL buffers on symmcomm, natively: run with
libsymmcomm_nccl.so preloaded as libnccl.so.2 and SYMM_NCCL_MODE=symm (so
nothing can fall back to NCCL), SYMM_DEBUG=INFO (the log says which path
every communicator and every collective input took). One process per rank,
rank r on GPU r % ngpus; more ranks than GPUs need SYMM_TEST_SHARED_DEVICES=1
(the test-only shared-device mode). Modes:

  mesh NRANKS      init_process_group("nccl", device_id=...) (eager: the
                   default communicator is made at once, and every later
                   group is an ncclCommSplit of it); init_device_mesh("cuda",
                   (2, NRANKS // 2)); all-reduce, all-gather, reduce-scatter
                   and broadcast on both mesh dimensions and on a new_group
                   of the even ranks, all checked.
  mempool NRANKS   torch.cuda.MemPool over ncclMemAlloc, twice: PyTorch's
                   own ProcessGroupNCCL allocator (backend.mem_allocator) and
                   a CUDAPluggableAllocator built from nccl_allocator.c (as
                   Megatron/vLLM do); each pool's segments window-registered
                   (backend.register_mem_pool(pool, symm=True)); all-gather
                   and reduce-scatter from pool tensors (peers read them in
                   place: the zero-copy path) and all-reduce (in place, as
                   PyTorch always calls it: staged), all checked.

Every check prints "CHECK ok <what>" or "CHECK FAIL <what>: <why>"; the exit
code is non-zero on any failure. scripts/device-nccl-native runs both modes
and checks the log.
"""
import datetime
import os
import socket
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Checks:
    def __init__(self, rank):
        self.rank, self.failed = rank, 0

    def equal(self, what, got, want):
        if torch.equal(got, want):
            print(f"[rank {self.rank}] CHECK ok {what}", flush=True)
            return
        bad = (got != want).nonzero()
        first = bad[0].tolist() if len(bad) else "?"
        print(f"[rank {self.rank}] CHECK FAIL {what}: {len(bad)} elements differ, first at {first}", flush=True)
        self.failed += 1

    def fail(self, what, why):
        print(f"[rank {self.rank}] CHECK FAIL {what}: {why}", flush=True)
        self.failed += 1


def contribution(rank, n, salt, dev):
    """Rank `rank`'s input: small integers, exact in float32 sums."""
    return (torch.arange(n, device=dev, dtype=torch.float32) % 13) + 16 * (rank + 1) + salt


def check_group(ck, name, group, dev, n):
    """All-reduce, all-gather, reduce-scatter and broadcast on `group`."""
    me = dist.get_rank()
    ranks = dist.get_process_group_ranks(group)
    size = len(ranks)
    inputs = [contribution(r, n * size, 1, dev) for r in ranks]
    mine = inputs[ranks.index(me)]
    x = mine[:n].clone()
    dist.all_reduce(x, group=group)
    ck.equal(f"{name}: all_reduce over ranks {ranks}", x, sum(i[:n] for i in inputs))
    out = torch.empty(n * size, device=dev)
    dist.all_gather_into_tensor(out, mine[:n].contiguous(), group=group)
    ck.equal(f"{name}: all_gather_into_tensor", out, torch.cat([i[:n] for i in inputs]))
    rs = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(rs, mine.clone(), group=group)
    g = ranks.index(me)
    ck.equal(f"{name}: reduce_scatter_tensor", rs, sum(inputs)[g * n:(g + 1) * n])
    b = mine[:n].clone()
    dist.broadcast(b, src=ranks[-1], group=group)
    ck.equal(f"{name}: broadcast from rank {ranks[-1]}", b, inputs[-1][:n])


def setup(rank, world, port):
    ngpu = torch.cuda.device_count()
    dev = torch.device("cuda", rank % ngpu)
    torch.cuda.set_device(dev)
    # device_id: eager init, so every later group is a split of this one.
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=dev, timeout=datetime.timedelta(seconds=300))
    return dev


def mesh_worker(rank, world, port):
    from torch.distributed.device_mesh import init_device_mesh
    dev = setup(rank, world, port)
    ck = Checks(rank)
    # Small (LL packets) and large (synced kernels, staged) messages.
    for n in (4099, 262147):
        check_group(ck, f"world n={n}", dist.group.WORLD, dev, n)
    mesh = init_device_mesh("cuda", (2, world // 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        for n in (4099, 262147):
            check_group(ck, f"mesh {dim} n={n}", mesh.get_group(dim), dev, n)
    evens = dist.new_group(list(range(0, world, 2)))
    if rank % 2 == 0:
        check_group(ck, "new_group(evens)", evens, dev, 65537)
    dist.barrier()
    dist.destroy_process_group()
    print(f"[rank {rank}] mesh done, {ck.failed} failure(s)", flush=True)
    sys.exit(1 if ck.failed else 0)


def build_plugin(build_dir):
    """nccl_allocator.c as a shared library (path, None), or (None, why)."""
    so = os.path.join(build_dir, "nccl_allocator.so")
    inc = os.environ.get("NCCL_INCLUDE", "/usr/include")
    # nccl.h includes cuda_runtime.h: the CUDA toolkit's headers too.
    cuda = os.environ.get("CUDA_HOME") or os.path.dirname(os.path.dirname(shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"))
    r = subprocess.run(["cc", "-shared", "-fPIC", "-O2", f"-I{inc}", f"-I{os.path.join(cuda, 'include')}", "-o", so,
                        os.path.join(HERE, "nccl_allocator.c")],
                       capture_output=True, text=True)
    return (so, None) if r.returncode == 0 else (None, f"cc failed: {r.stderr.strip()}")


def check_pool(ck, name, backend, allocator, dev, world, rank):
    pool = torch.cuda.MemPool(allocator)
    n = 1 << 20  # 4 MiB per rank: above the LL size, so collectives take the synced kernels
    with torch.cuda.use_mem_pool(pool):
        # The pool hands out pieces of its ncclMemAlloc blocks, registered
        # through the whole block: `rs` first, so that the all-gather input
        # `a` lies at an offset inside the block they share.
        pad = torch.empty(4096, device=dev)
        rs = torch.empty(n, device=dev)
        a = torch.empty(n, device=dev)
        big = torch.empty(n * world, device=dev)
        out = torch.empty(n * world, device=dev)
    try:
        segs = [s for s in torch.cuda.memory.memory_snapshot() if tuple(s.get("segment_pool_id", ())) == tuple(pool.id)]
        print(f"[rank {rank}] {name}: pool {pool.id}: segments {[(hex(s['address']), s['total_size']) for s in segs]}, "
              f"tensors pad, rs, a, big, out at {[hex(t.data_ptr()) for t in (pad, rs, a, big, out)]}", flush=True)
    except Exception as e:  # noqa: BLE001 - informational only
        print(f"[rank {rank}] {name}: no memory snapshot ({e!r})", flush=True)
    try:
        backend.register_mem_pool(pool, True)  # symm=True: ncclCommWindowRegister
    except TypeError:
        backend.register_mem_pool(pool)
        ck.fail(f"{name}: register_mem_pool", "this PyTorch has no symm argument: segments are not windows")
    a.copy_(contribution(rank, n, 3, dev))
    big.copy_(contribution(rank, n * world, 5, dev))
    torch.cuda.synchronize()
    allin = [contribution(r, n, 3, dev) for r in range(world)]
    dist.all_gather_into_tensor(out, a)
    ck.equal(f"{name}: all_gather_into_tensor from a pool tensor", out, torch.cat(allin))
    dist.reduce_scatter_tensor(rs, big)
    want = sum(contribution(r, n * world, 5, dev) for r in range(world))[rank * n:(rank + 1) * n]
    ck.equal(f"{name}: reduce_scatter_tensor from a pool tensor", rs, want)
    dist.all_reduce(a)  # PyTorch's all_reduce is in place: the staged path
    ck.equal(f"{name}: all_reduce of a pool tensor (in place)", a, sum(allin))
    torch.cuda.synchronize()
    dist.barrier()
    backend.deregister_mem_pool(pool)
    del pad, a, big, out, rs
    return pool


def mempool_worker(rank, world, port, plugin_so, plugin_error):
    dev = setup(rank, world, port)
    ck = Checks(rank)
    backend = dist.group.WORLD._get_backend(dev)
    pools = []
    # PyTorch serves its own ncclMemAlloc allocator only where the GPU
    # supports NVLink multicast (ProcessGroupNCCL::supportsTensorAlloc) and
    # raises RuntimeError elsewhere (e.g. one GPU): then the pluggable
    # allocator below, as Megatron and vLLM build it, is the check.
    try:
        alloc, why = backend.mem_allocator, ""
    except (AttributeError, RuntimeError) as e:
        alloc, why = None, str(e).splitlines()[0]
    if alloc is None:
        print(f"[rank {rank}] ProcessGroupNCCL.mem_allocator not served here ({why}); "
              "checking the CUDAPluggableAllocator over ncclMemAlloc only", flush=True)
    else:
        pools.append(check_pool(ck, "ProcessGroupNCCL allocator", backend, alloc, dev, world, rank))
    if plugin_so is None:
        ck.fail("CUDAPluggableAllocator from nccl_allocator.c", plugin_error)
    else:
        plugin = torch.cuda.memory.CUDAPluggableAllocator(plugin_so, "nccl_alloc", "nccl_free").allocator()
        pools.append(check_pool(ck, "CUDAPluggableAllocator", backend, plugin, dev, world, rank))
    dist.barrier()
    torch.cuda.synchronize()
    pools.clear()
    dist.destroy_process_group()
    print(f"[rank {rank}] mempool done, {ck.failed} failure(s)", flush=True)
    sys.exit(1 if ck.failed else 0)


if __name__ == "__main__":
    mode, world = sys.argv[1], int(sys.argv[2])
    if mode not in ("mesh", "mempool") or world < 2 or world % 2:
        sys.exit(f"usage: {sys.argv[0]} mesh|mempool NRANKS (even, >= 2)")
    if world > torch.cuda.device_count() and os.environ.get("SYMM_TEST_SHARED_DEVICES", "0") == "0":
        sys.exit(f"{world} ranks on {torch.cuda.device_count()} GPU(s) need SYMM_TEST_SHARED_DEVICES=1")
    port = free_port()
    if mode == "mesh":
        mp.spawn(mesh_worker, args=(world, port), nprocs=world, join=True)
    else:
        with tempfile.TemporaryDirectory() as d:
            so, why = build_plugin(d)
            mp.spawn(mempool_worker, args=(world, port, so, why), nprocs=world, join=True)
