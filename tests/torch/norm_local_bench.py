"""The local cost of the fused all-reduce + residual add + RMSNorm on one
GPU, world size 1: what the fusion costs where there is nothing to
communicate, against what it replaces in a PyTorch model, the add and
torch's RMSNorm:

    python3 tests/torch/norm_local_bench.py [--tokens 1,16,128,512] [--hidden 4096,8192] [--iters 200]

Per shape, bf16, each variant captured as --iters calls in one CUDA graph,
replayed once untimed and then --replays times between CUDA events (µs per
call, the median of the replays):

  fused        comm.all_reduce_add_rms_norm(x, residual, weight) (in place:
               out = x, residual_out = residual, as vLLM calls its norm);
  torch        residual.add_(x); out = torch.nn.functional.rms_norm(
               residual, (hidden,), weight, eps): the two kernels the fused
               call replaces at world size 1 (the all-reduce of one rank
               moves nothing).

The fused call must not cost more than the norm it replaces (issue: the
fusion's local cost). The outputs of one call of each are compared first
(within 2^-6 relative, bf16). Prints a markdown table; exit 77 (skipped)
without PyTorch or a CUDA device.
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
    ap.add_argument("--tokens", type=int_list, default=[1, 16, 128, 512])
    ap.add_argument("--hidden", type=int_list, default=[4096, 8192])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--replays", type=int, default=5)
    args = ap.parse_args(argv)
    torch = torch_with_cuda()
    if torch is None:
        return SKIP
    symmcomm = import_symmcomm()
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    comm = symmcomm.Communicator.from_unique_id(symmcomm.get_unique_id(), 0, 1, device=0)
    eps = 1e-6

    def graph_us(fn):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()  # warm-up outside the capture (torch's kernels load lazily)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                for _ in range(args.iters):
                    fn()
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / args.iters)
        return statistics.median(times)

    print(f"torch {torch.__version__}, symmcomm {symmcomm.__version__}, {torch.cuda.get_device_name(0)}; "
          f"bf16, eps {eps}, {args.iters} calls per graph, median of {args.replays} replays\n")
    print("| tokens | hidden | fused (µs) | add + torch rms_norm (µs) | torch / fused | max rel. difference |")
    print("|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for hidden in args.hidden:
        w = (1 + torch.rand(hidden, device=dev)).to(torch.bfloat16)
        for tokens in args.tokens:
            x = (torch.randn(tokens, hidden, device=dev) / 4).to(torch.bfloat16)
            res = torch.randn(tokens, hidden, device=dev).to(torch.bfloat16)
            # One checked call of each, on copies.
            xa, ra = x.clone(), res.clone()
            out, _ = comm.all_reduce_add_rms_norm(xa, ra, w, eps)
            rb = res.clone()
            rb.add_(x)
            want = torch.nn.functional.rms_norm(rb.float(), (hidden,), w.float(), eps)
            torch.cuda.synchronize()
            diff = ((out.float() - want).abs() / want.abs().clamp_min(1e-3)).max().item()
            worst = max(worst, diff)
            xf, rf = x.clone(), res.clone()
            fused = graph_us(lambda: comm.all_reduce_add_rms_norm(xf, rf, w, eps))
            xt, rt = x.clone(), res.clone()

            def unfused():
                rt.add_(xt)
                return torch.nn.functional.rms_norm(rt, (hidden,), w, eps)

            plain = graph_us(unfused)
            print(f"| {tokens} | {hidden} | {fused:.2f} | {plain:.2f} | {plain / fused:.2f} | {diff:.2g} |", flush=True)
    comm.destroy()
    ok = worst <= 2 ** -6
    print(f"\nlargest relative difference {worst:.3g} ({'OK' if ok else 'FAILED'}: bound {2 ** -6:.3g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
