// all_reduce_rms_norm: the all-reduce that ends a tensor-parallel layer,
// fused with the residual add and RMSNorm that follow it, as one user
// kernel on symmcomm's device API (what inference engines ship as a fused
// op). bf16 in and out, fp32 accumulation:
//
//   y        = residual + sum over ranks of x_r          (fp32, rank order)
//   residual = bf16(y)                                   (in place, for the next layer)
//   out      = bf16(y / sqrt(mean(y^2) + eps) * weight)
//
//   all_reduce_rms_norm [--nranks=N] [--tokens=T] [--hidden=H] [--iters=K]
//
// Runs N ranks (default 2) as N processes on the visible GPUs (rank r on
// GPU r % GPUs; more ranks than GPUs need SYMM_TEST_SHARED_DEVICES=1).
// Each of K iterations (default 3; the last one a CUDA graph replay) uses
// fresh inputs; every rank checks `out` and `residual` against a host fp64
// reference and prints the largest error. Exit status 0 when every error
// is within bf16 rounding, 77 when there is no GPU.
//
// A teaching example of the device API, kept simple: one row per block and
// 2-byte peer loads make it 3-8x slower than the library's
// symmAllReduceAddRMSNorm (LL packets, 16-byte loads; 4 x H200,
// docs/perf/measure-4xH200-2026-11-27-s5.md). For speed, call that.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "symmcomm.h"
#include "symmcomm_device.cuh"

// [kernel:all_reduce_rms_norm] (c_tests/bench/device_bench times this block as it is)
// Sum of v over the block, returned to every thread (blockDim.x a multiple
// of 32, at most 1024); `scratch` holds 32 floats.
__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // the previous call's readers are done with scratch
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  // Every warp adds up all the warps' partial sums (lane i takes warp i's),
  // in the same order, so every thread gets the same total.
  const unsigned lane = threadIdx.x % 32;
  v = lane < blockDim.x / 32 ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One token row per block at a time. `x` is symmetric memory (every rank's
// partial sums, read in place); `residual`, `weight` and `out` are this
// rank's own. Dynamic shared memory: `hidden` floats (the row's y).
__global__ void all_reduce_add_rms_norm(symmDevComm dc, const __nv_bfloat16* x, __nv_bfloat16* residual,
                                        const __nv_bfloat16* weight, __nv_bfloat16* out, int tokens, int hidden,
                                        float eps) {
  extern __shared__ float y[];
  __shared__ float scratch[32];
  if (symmDevBarrier(dc, blockIdx.x) != symmSuccess) return;  // every rank's x is written
  for (int t = blockIdx.x; t < tokens; t += gridDim.x) {
    const size_t row = (size_t)t * hidden;
    float squares = 0.0f;
    for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
      float acc = 0.0f;
      for (int r = 0; r < dc.nRanks; ++r) acc += __bfloat162float(symmDevPeerPtr(dc, x, r)[row + h]);
      const float v = acc + __bfloat162float(residual[row + h]);
      residual[row + h] = __float2bfloat16(v);
      y[h] = v;
      squares += v * v;
    }
    const float scale = rsqrtf(block_sum(squares, scratch) / (float)hidden + eps);
    for (int h = threadIdx.x; h < hidden; h += blockDim.x)
      out[row + h] = __float2bfloat16(y[h] * scale * __bfloat162float(weight[h]));
  }
  symmDevBarrier(dc, blockIdx.x);  // no rank overwrites its x while a peer still reads it
}
// [/kernel:all_reduce_rms_norm]

// ---- host -------------------------------------------------------------------

// Deterministic inputs in [0, 1): every rank can compute every rank's x.
static float unit(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = a * 0x9E3779B1u ^ b * 0x85EBCA77u ^ c * 0xC2B2AE3Du;
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12, h *= 0x297A2D39u, h ^= h >> 15;
  return (float)(h >> 8) / 16777216.0f;
}
static __nv_bfloat16 x_value(int rank, size_t i, int iter) { return __float2bfloat16(unit(rank, (uint32_t)i, iter) - 0.5f); }
static __nv_bfloat16 residual_value(size_t i, int iter) { return __float2bfloat16(2.0f * unit(1000, (uint32_t)i, iter) - 1.0f); }
static __nv_bfloat16 weight_value(int h) { return __float2bfloat16(0.5f + unit(2000, (uint32_t)h, 0)); }

#define CUDA_OK(call)                                                                                  \
  do {                                                                                                 \
    cudaError_t e_ = (call);                                                                           \
    if (e_ != cudaSuccess) {                                                                           \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_));                       \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)
#define SYMM_OK(call)                                                                                  \
  do {                                                                                                 \
    symmResult_t r_ = (call);                                                                          \
    if (r_ != symmSuccess) {                                                                           \
      fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, symmGetErrorString(r_), symmGetLastError(comm)); \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)

static int run_rank(int rank, int nranks, const symmUniqueId& id, int tokens, int hidden, int iters) {
  symmComm_t comm = NULL;
  int ngpus = 0;
  CUDA_OK(cudaGetDeviceCount(&ngpus));
  CUDA_OK(cudaSetDevice(rank % ngpus));
  CUDA_OK(cudaFree(0));  // make the device's context current: symmCommInitRank uses it
  SYMM_OK(symmCommInitRank(&comm, nranks, id, rank));

  const int threads = 256, blocks = tokens < 64 ? tokens : 64;
  const float eps = 1e-6f;
  const size_t n = (size_t)tokens * hidden, bytes = n * sizeof(__nv_bfloat16);
  symmDevCommRequirements req = SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.blockCount = blocks;
  symmDevComm dc;
  SYMM_OK(symmDevCommCreate(comm, &req, &dc));
  __nv_bfloat16 *x = NULL, *residual = NULL, *weight = NULL, *out = NULL;
  SYMM_OK(symmMemAlloc(comm, bytes, (void**)&x));
  CUDA_OK(cudaMalloc(&residual, bytes));
  CUDA_OK(cudaMalloc(&weight, hidden * sizeof(__nv_bfloat16)));
  CUDA_OK(cudaMalloc(&out, bytes));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t smem = hidden * sizeof(float);
  CUDA_OK(cudaFuncSetAttribute(all_reduce_add_rms_norm, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));

  __nv_bfloat16* h_x = (__nv_bfloat16*)malloc(bytes);
  __nv_bfloat16* h_res = (__nv_bfloat16*)malloc(bytes);
  __nv_bfloat16* h_out = (__nv_bfloat16*)malloc(bytes);
  __nv_bfloat16* h_w = (__nv_bfloat16*)malloc(hidden * sizeof(__nv_bfloat16));
  double* y = (double*)malloc(hidden * sizeof(double));
  for (int h = 0; h < hidden; ++h) h_w[h] = weight_value(h);
  // On the stream: a cudaMemcpy from pageable memory may return before its
  // DMA ends, and a non-blocking stream does not wait for it.
  CUDA_OK(cudaMemcpyAsync(weight, h_w, hidden * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice, stream));

  cudaGraphExec_t graph = NULL;
  double worst_out = 0, worst_res = 0, worst_rel = 0, largest = 0;
  size_t wrong = 0;
  for (int it = 0; it < iters; ++it) {
    for (size_t i = 0; i < n; ++i) h_x[i] = x_value(rank, i, it), h_res[i] = residual_value(i, it);
    CUDA_OK(cudaMemcpyAsync(x, h_x, bytes, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(residual, h_res, bytes, cudaMemcpyHostToDevice, stream));
    if (it < iters - 1) {
      all_reduce_add_rms_norm<<<blocks, threads, smem, stream>>>(dc, x, residual, weight, out, tokens, hidden, eps);
    } else {  // the last iteration: captured once, replayed (as a serving loop would)
      cudaGraph_t g;
      CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      all_reduce_add_rms_norm<<<blocks, threads, smem, stream>>>(dc, x, residual, weight, out, tokens, hidden, eps);
      CUDA_OK(cudaStreamEndCapture(stream, &g));
      CUDA_OK(cudaGraphInstantiate(&graph, g, 0));
      CUDA_OK(cudaGraphDestroy(g));
      CUDA_OK(cudaGraphLaunch(graph, stream));
    }
    CUDA_OK(cudaMemcpyAsync(h_out, out, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaMemcpyAsync(h_x, residual, bytes, cudaMemcpyDeviceToHost, stream));  // h_x: the new residual
    CUDA_OK(cudaStreamSynchronize(stream));
    symmResult_t async = symmSuccess;
    SYMM_OK(symmCommGetAsyncError(comm, &async));
    if (async != symmSuccess) {
      fprintf(stderr, "rank %d: iteration %d: %s\n", rank, it, symmGetLastError(comm));
      return 1;
    }
    // fp64 reference. bf16 keeps 8 significant bits: a correctly rounded
    // result is within 2^-8 of the exact value, relatively; allow 2^-7.
    for (int t = 0; t < tokens; ++t) {
      const size_t row = (size_t)t * hidden;
      double squares = 0;
      for (int h = 0; h < hidden; ++h) {
        double v = (double)__bfloat162float(h_res[row + h]);
        for (int r = 0; r < nranks; ++r) v += (double)__bfloat162float(x_value(r, row + h, it));
        y[h] = v;
        squares += v * v;
      }
      const double scale = 1.0 / sqrt(squares / hidden + (double)eps);
      for (int h = 0; h < hidden; ++h) {
        const double ref = y[h] * scale * (double)__bfloat162float(h_w[h]);
        const double e_out = fabs((double)__bfloat162float(h_out[row + h]) - ref);
        const double e_res = fabs((double)__bfloat162float(h_x[row + h]) - y[h]);
        wrong += e_out > fabs(ref) / 128 + 1e-6 || e_res > fabs(y[h]) / 128 + 1e-6;
        if (e_out > worst_out) worst_out = e_out;
        if (e_res > worst_res) worst_res = e_res;
        if (fabs(ref) > 1e-3 && e_out / fabs(ref) > worst_rel) worst_rel = e_out / fabs(ref);
        if (fabs(ref) > largest) largest = fabs(ref);
      }
    }
  }
  printf("rank %d/%d: all-reduce + residual add + RMSNorm, %d x %d bf16, %d iterations: max |out - fp64 reference| = "
         "%.3e (|out| up to %.2f), max relative error %.3e (bf16 rounding: %.3e), max |residual - fp64| = %.3e: %s\n",
         rank, nranks, tokens, hidden, iters, worst_out, largest, worst_rel, 1.0 / 256, worst_res,
         wrong ? "WRONG" : "correct");
  if (wrong) fprintf(stderr, "rank %d: %zu values outside the bf16 tolerance\n", rank, wrong);

  free(h_x), free(h_res), free(h_out), free(h_w), free(y);
  CUDA_OK(cudaGraphExecDestroy(graph));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(residual));
  CUDA_OK(cudaFree(weight));
  CUDA_OK(cudaFree(out));
  SYMM_OK(symmMemFree(comm, x));
  SYMM_OK(symmDevCommDestroy(comm, &dc));
  SYMM_OK(symmCommDestroy(comm));
  return wrong ? 1 : 0;
}

// One process per rank: rank 0 makes the unique id and passes it to the
// others through pipes (any channel works, as with NCCL). The parent only
// forks and collects exit codes; it never touches CUDA.
int main(int argc, char** argv) {
  int nranks = 2, tokens = 128, hidden = 4096, iters = 3;
  for (int a = 1; a < argc; ++a) {
    if (sscanf(argv[a], "--nranks=%d", &nranks) == 1 && nranks >= 1 && nranks <= 8) continue;
    if (sscanf(argv[a], "--tokens=%d", &tokens) == 1 && tokens > 0) continue;
    if (sscanf(argv[a], "--hidden=%d", &hidden) == 1 && hidden > 0 && hidden <= 12288) continue;
    if (sscanf(argv[a], "--iters=%d", &iters) == 1 && iters > 0) continue;
    fprintf(stderr, "usage: %s [--nranks=1..8] [--tokens=T] [--hidden=1..12288] [--iters=K]\n", argv[0]);
    return 2;
  }
  int pipes[8][2];
  for (int r = 0; r < nranks; ++r)
    if (pipe(pipes[r]) != 0) return perror("pipe"), 1;
  pid_t pids[8];
  for (int r = 0; r < nranks; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) return perror("fork"), 1;
    if (pids[r] > 0) continue;
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
    const int rank = r;
    for (int q = 0; q < nranks; ++q) close(rank == 0 ? pipes[q][0] : pipes[q][1]);  // EOF if rank 0 dies
    int ngpus = 0;
    const cudaError_t e = cudaGetDeviceCount(&ngpus);
    if (e != cudaSuccess || ngpus == 0) {
      if (rank == 0) printf("skipped: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
      exit(77);
    }
    symmUniqueId id;
    if (rank == 0) {
      symmComm_t comm = NULL;
      SYMM_OK(symmGetUniqueId(&id));
      for (int q = 1; q < nranks; ++q)
        if (write(pipes[q][1], &id, sizeof id) != (ssize_t)sizeof id) exit(1);
    } else if (read(pipes[rank][0], &id, sizeof id) != (ssize_t)sizeof id) {
      fprintf(stderr, "rank %d: no unique id from rank 0\n", rank);
      exit(1);
    }
    exit(run_rank(rank, nranks, id, tokens, hidden, iters));
  }
  for (int r = 0; r < nranks; ++r) close(pipes[r][0]), close(pipes[r][1]);
  int worst = 0;
  for (int r = 0; r < nranks; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (code != 0 && (worst == 0 || worst == 77)) worst = code;
  }
  return worst;
}
