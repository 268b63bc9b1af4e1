// one_shot_all_reduce: an all-reduce written as a user kernel on symmcomm's
// device API. Each rank's input lives in symmetric memory, so every rank
// reads every peer's input in place and sums it: one kernel, two barriers.
//
//   one_shot_all_reduce [--nranks=N] [--count=ELEMS] [--iters=K]
//
// Runs N ranks (default 2) as N processes on the visible GPUs (rank r on
// GPU r % GPUs; more ranks than GPUs need SYMM_TEST_SHARED_DEVICES=1, a
// test-only mode). Each rank sums `count` floats (default 1 Mi) K times
// (default 10: 5 plain launches, then a CUDA graph replayed 5 times) and
// checks every element. Exit status 0 when every rank's results are right,
// 77 when there is no GPU.
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "symmcomm.h"
#include "symmcomm_device.cuh"

// [readme:one_shot_all_reduce]
// out[i] = sum over ranks of in[i]. `in` is symmetric memory (symmMemAlloc):
// a peer's copy is one pointer addition away. Block b meets block b of
// every rank at barrier slot b twice: before reading (every input is
// written) and after (no rank overwrites an input a peer still reads).
__global__ void one_shot_all_reduce(symmDevComm dc, const float* in, float* out, size_t n) {
  if (symmDevBarrier(dc, blockIdx.x) != symmSuccess) return;  // timed out or aborted
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < dc.nRanks; ++r) sum += symmDevPeerPtr(dc, in, r)[i];  // same order on every rank
    out[i] = sum;
  }
  symmDevBarrier(dc, blockIdx.x);
}
// [/readme:one_shot_all_reduce]

// ---- host -------------------------------------------------------------------

static float input_value(int rank, size_t i, int iter) { return (float)(rank + 1) + (float)((i + iter) % 7); }

__global__ void fill_input(float* in, size_t n, int rank, int iter) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    in[i] = (float)(rank + 1) + (float)((i + iter) % 7);
}

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

static int run_rank(int rank, int nranks, const symmUniqueId& id, size_t count, int iters) {
  symmComm_t comm = NULL;
  int ngpus = 0;
  CUDA_OK(cudaGetDeviceCount(&ngpus));
  CUDA_OK(cudaSetDevice(rank % ngpus));
  CUDA_OK(cudaFree(0));  // make the device's context current: symmCommInitRank uses it
  SYMM_OK(symmCommInitRank(&comm, nranks, id, rank));

  const int threads = 512, blocks = 32;
  symmDevCommRequirements req = SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.blockCount = blocks;  // one barrier slot per block
  symmDevComm dc;
  SYMM_OK(symmDevCommCreate(comm, &req, &dc));

  float *in = NULL, *out = NULL;
  SYMM_OK(symmMemAlloc(comm, count * sizeof(float), (void**)&in));
  CUDA_OK(cudaMalloc(&out, count * sizeof(float)));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  float* host = (float*)malloc(count * sizeof(float));
  cudaGraphExec_t graph = NULL;  // the second half of the iterations replays the all-reduce as a graph
  int bad_iters = 0;
  for (int it = 0; it < iters; ++it) {
    fill_input<<<blocks, threads, 0, stream>>>(in, count, rank, it);
    if (it < iters / 2) {
      one_shot_all_reduce<<<blocks, threads, 0, stream>>>(dc, in, out, count);
    } else {
      if (!graph) {
        cudaGraph_t g;
        CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        one_shot_all_reduce<<<blocks, threads, 0, stream>>>(dc, in, out, count);
        CUDA_OK(cudaStreamEndCapture(stream, &g));
        CUDA_OK(cudaGraphInstantiate(&graph, g, 0));
        CUDA_OK(cudaGraphDestroy(g));
      }
      CUDA_OK(cudaGraphLaunch(graph, stream));
    }
    CUDA_OK(cudaMemcpyAsync(host, out, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    symmResult_t async = symmSuccess;
    SYMM_OK(symmCommGetAsyncError(comm, &async));
    if (async != symmSuccess) {
      fprintf(stderr, "rank %d: iteration %d: %s\n", rank, it, symmGetLastError(comm));
      return 1;
    }
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float want = 0.0f;
      for (int r = 0; r < nranks; ++r) want += input_value(r, i, it);
      if (host[i] != want && wrong++ == 0)
        fprintf(stderr, "rank %d: iteration %d: out[%zu] = %g, expected %g\n", rank, it, i, host[i], want);
    }
    bad_iters += wrong != 0;
  }
  printf("rank %d/%d: all-reduce of %zu floats, %d times (%d as graph replays): %s\n", rank, nranks, count, iters,
         iters - iters / 2, bad_iters ? "WRONG" : "correct");

  free(host);
  if (graph) CUDA_OK(cudaGraphExecDestroy(graph));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(out));
  SYMM_OK(symmMemFree(comm, in));
  SYMM_OK(symmDevCommDestroy(comm, &dc));
  SYMM_OK(symmCommDestroy(comm));
  return bad_iters ? 1 : 0;
}

// One process per rank: rank 0 makes the unique id and passes it to the
// others through pipes (any channel works, as with NCCL). The parent only
// forks and collects exit codes; it never touches CUDA.
int main(int argc, char** argv) {
  int nranks = 2, iters = 10;
  size_t count = 1 << 20;
  for (int a = 1; a < argc; ++a) {
    if (sscanf(argv[a], "--nranks=%d", &nranks) == 1 && nranks >= 1 && nranks <= 8) continue;
    if (sscanf(argv[a], "--count=%zu", &count) == 1 && count > 0) continue;
    if (sscanf(argv[a], "--iters=%d", &iters) == 1 && iters > 0) continue;
    fprintf(stderr, "usage: %s [--nranks=1..8] [--count=ELEMS] [--iters=K]\n", argv[0]);
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
    exit(run_rank(rank, nranks, id, count, iters));
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
