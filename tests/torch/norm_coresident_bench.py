"""The fused all-reduce + residual add + RMSNorm against the all-reduce
alone, with every rank co-resident on ONE GPU (one process,
symmCommInitAll, one stream per rank): a local ceiling, never an NVLink
figure. What it shows is the fused op's own cost over the all-reduce when
the peers' packets arrive at local-memory latency, the SM-side work (the
add, the block reductions, the norm's loads and stores, the block shape)
apart from what the link adds:

    SYMM_TEST_SHARED_DEVICES=1 python3 tests/torch/norm_coresident_bench.py [--ranks 2,4]
        [--tokens 1,2,4,8,16,32,64,128] [--hidden 4096,8192] [--iters 200] [--replays 5]

Per rank count and shape, bf16: each variant captured as --iters calls in
one CUDA graph per rank, the ranks' graphs replayed at once on their own
streams, once untimed, then --replays times between CUDA events (µs per
call, the median replay):

  allreduce   comm.all_reduce(x) in place (the rows' bytes);
  fused       comm.all_reduce_add_rms_norm(x, residual, weight, out=o,
              residual_out=ro): out of place, as device_bench times it;
  in place    the same with out = x, residual_out = residual (vLLM's call).

The algorithm is the process's SYMM_ALGO (run once per setting). Prints a
markdown table with the fused columns' gap over the all-reduce alone;
exit 77 (skipped) without PyTorch or a CUDA device.
"""
import argparse
import os
import statistics
import sys

# This folder's shared helpers.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import SKIP, import_symmcomm, int_list, torch_with_cuda  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int_list, default=[2, 4])
    ap.add_argument("--tokens", type=int_list, default=[1, 2, 4, 8, 16, 32, 64, 128])
    ap.add_argument("--hidden", type=int_list, default=[4096, 8192])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--replays", type=int, default=5)
    args = ap.parse_args(argv)
    torch = torch_with_cuda()
    if torch is None:
        return SKIP
    if os.environ.get("SYMM_TEST_SHARED_DEVICES") != "1":
        print("needs SYMM_TEST_SHARED_DEVICES=1 (every rank on GPU 0)", file=sys.stderr)
        return 2
    symmcomm = import_symmcomm()
    from symmcomm import _library
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    lib = _library.library()
    eps = 1e-6
    print(f"torch {torch.__version__}, symmcomm {symmcomm.__version__}, {torch.cuda.get_device_name(0)}; "
          f"ranks co-resident on one GPU (local ceiling); bf16; SYMM_ALGO={os.environ.get('SYMM_ALGO', '')!r}; "
          f"{args.iters} calls per graph, median of {args.replays} replays\n")
    print("| ranks | tokens | hidden | allreduce (µs) | fused (µs) | fused - allreduce | in place (µs) | in place - allreduce |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.ranks:
        comms = [symmcomm.Communicator._from_handle(lib, h) for h in lib.symmCommInitAll([0] * n)]
        streams = [torch.cuda.Stream() for _ in range(n)]

        def graphs_us(fns):
            """fns[r]() issues rank r's call on the current stream."""
            gs = []
            for r in range(n):
                streams[r].wait_stream(torch.cuda.current_stream())
            for r in range(n):  # one untimed call of every rank first (lazy loads), then capture
                with torch.cuda.stream(streams[r]):
                    fns[r]()
            torch.cuda.synchronize()
            for r in range(n):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.stream(streams[r]):
                    with torch.cuda.graph(g, stream=streams[r]):
                        for _ in range(args.iters):
                            fns[r]()
                gs.append(g)

            def replay():
                start = torch.cuda.Event(enable_timing=True)
                start.record()
                for r in range(n):
                    streams[r].wait_event(start)
                    with torch.cuda.stream(streams[r]):
                        gs[r].replay()
                ends = []
                for r in range(n):
                    e = torch.cuda.Event(enable_timing=True)
                    e.record(streams[r])
                    ends.append(e)
                torch.cuda.synchronize()
                return max(start.elapsed_time(e) for e in ends) * 1e3 / args.iters

            replay()
            return statistics.median(replay() for _ in range(args.replays))

        for hidden in args.hidden:
            w = (1 + torch.rand(hidden, device=dev)).to(torch.bfloat16)
            for tokens in args.tokens:
                xs = [(torch.randn(tokens, hidden, device=dev) / 4).to(torch.bfloat16) for _ in range(n)]
                res = [torch.randn(tokens, hidden, device=dev).to(torch.bfloat16) for _ in range(n)]
                outs = [torch.empty_like(x) for x in xs]
                routs = [torch.empty_like(x) for x in xs]
                ar = graphs_us([lambda r=r: comms[r].all_reduce(xs[r]) for r in range(n)])
                fused = graphs_us([lambda r=r: comms[r].all_reduce_add_rms_norm(xs[r], res[r], w, eps, out=outs[r],
                                                                                residual_out=routs[r])
                                   for r in range(n)])
                inplace = graphs_us([lambda r=r: comms[r].all_reduce_add_rms_norm(xs[r], res[r], w, eps)
                                     for r in range(n)])
                print(f"| {n} | {tokens} | {hidden} | {ar:.2f} | {fused:.2f} | {fused - ar:+.2f} | {inplace:.2f} | "
                      f"{inplace - ar:+.2f} |", flush=True)
        torch.cuda.synchronize()
        for c in comms:
            c.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
