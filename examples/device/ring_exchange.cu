// ring_exchange: an all-gather as a put-with-signal ring pipeline, written
// as a user kernel on symmcomm's device API. Every rank forwards each chunk
// to the next rank as soon as it arrives from the previous one, so the
// steps of the ring overlap chunk by chunk.
//
//   ring_exchange [--nranks=N] [--count=ELEMS] [--chunk=ELEMS] [--iters=K]
//
// Runs N ranks (default 2) as N processes on the visible GPUs (rank r on
// GPU r % GPUs; more ranks than GPUs need SYMM_TEST_SHARED_DEVICES=1).
// Each rank contributes `count` floats (default 1 Mi) in chunks of
// `chunk` (default 16 Ki); after each of K iterations (default 6, the
// second half graph replays) every rank checks that it holds every rank's
// data. Exit status 0 when all is right, 77 when there is no GPU.
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

// `out` is symmetric memory: [nRanks][count] floats, this rank's own data
// already in out[rank]. At step s (0 .. nRanks-2) a rank forwards rank
// (rank - s)'s data to the next rank; from step 1 on it is what arrived
// from the previous rank at step s - 1. Block b moves the chunks c with
// c % gridDim.x == b and counts them on signal slot b: a put adds 1 to the
// next rank's slot and releases the chunk with it; symmDevBlockSignalWaitNext
// waits for the previous rank's next chunk. The per-slot counts live on the
// device and are never reset, so the kernel can be relaunched or replayed
// in a CUDA graph as is.
__global__ void ring_all_gather(symmDevComm dc, float* out, size_t count, size_t chunk) {
  const int n = dc.nRanks, next = (dc.rank + 1) % n, prev = (dc.rank + n - 1) % n;
  const uint32_t slot = blockIdx.x;
  const size_t nchunks = (count + chunk - 1) / chunk;
  // Nobody writes into a peer's buffer before it is done with the last launch.
  if (symmDevBarrier(dc, blockIdx.x) != symmSuccess) return;
  for (int s = 0; s < n - 1; ++s) {
    const int owner = (dc.rank - s + n) % n;
    for (size_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
      if (s > 0 && symmDevBlockSignalWaitNext(dc, slot, prev) != symmSuccess) return;  // chunk c of `owner` is here
      float* part = out + owner * count + c * chunk;
      const size_t len = c * chunk + chunk <= count ? chunk : count - c * chunk;
      if (symmDevBlockPutSignal(dc, next, part, part, len * sizeof(float), slot, 1, symmDevSignalOpAdd) != symmSuccess)
        return;
    }
  }
  // The last step's chunks (rank `next`'s data) end here.
  for (size_t c = blockIdx.x; c < nchunks; c += gridDim.x)
    if (symmDevBlockSignalWaitNext(dc, slot, prev) != symmSuccess) return;
}

__global__ void fill_own(float* own, size_t count, int rank, int iter) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
    own[i] = (float)(rank * 1000003 + (int)(i % 1000) * 7 + iter);
}

// ---- host -------------------------------------------------------------------

static float value(int rank, size_t i, int iter) { return (float)(rank * 1000003 + (int)(i % 1000) * 7 + iter); }

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

static int run_rank(int rank, int nranks, const symmUniqueId& id, size_t count, size_t chunk, int iters) {
  symmComm_t comm = NULL;
  int ngpus = 0;
  CUDA_OK(cudaGetDeviceCount(&ngpus));
  CUDA_OK(cudaSetDevice(rank % ngpus));
  CUDA_OK(cudaFree(0));  // make the device's context current: symmCommInitRank uses it
  SYMM_OK(symmCommInitRank(&comm, nranks, id, rank));

  const int threads = 256, blocks = 8;
  symmDevCommRequirements req = SYMM_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.blockCount = blocks;   // barrier slots
  req.signalCount = blocks;  // one chunk counter per block
  symmDevComm dc;
  SYMM_OK(symmDevCommCreate(comm, &req, &dc));
  const size_t bytes = nranks * count * sizeof(float);
  float* out = NULL;
  SYMM_OK(symmMemAlloc(comm, bytes, (void**)&out));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  float* host = (float*)malloc(bytes);
  cudaGraphExec_t graph = NULL;
  int bad_iters = 0;
  for (int it = 0; it < iters; ++it) {
    fill_own<<<64, threads, 0, stream>>>(out + rank * count, count, rank, it);
    if (it < iters / 2) {
      ring_all_gather<<<blocks, threads, 0, stream>>>(dc, out, count, chunk);
    } else {
      if (!graph) {
        cudaGraph_t g;
        CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        ring_all_gather<<<blocks, threads, 0, stream>>>(dc, out, count, chunk);
        CUDA_OK(cudaStreamEndCapture(stream, &g));
        CUDA_OK(cudaGraphInstantiate(&graph, g, 0));
        CUDA_OK(cudaGraphDestroy(g));
      }
      CUDA_OK(cudaGraphLaunch(graph, stream));
    }
    CUDA_OK(cudaMemcpyAsync(host, out, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    symmResult_t async = symmSuccess;
    SYMM_OK(symmCommGetAsyncError(comm, &async));
    if (async != symmSuccess) {
      fprintf(stderr, "rank %d: iteration %d: %s\n", rank, it, symmGetLastError(comm));
      return 1;
    }
    size_t wrong = 0;
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < count; ++i)
        if (host[r * count + i] != value(r, i, it) && wrong++ == 0)
          fprintf(stderr, "rank %d: iteration %d: rank %d's element %zu is %g, expected %g\n", rank, it, r, i,
                  host[r * count + i], value(r, i, it));
    bad_iters += wrong != 0;
  }
  printf("rank %d/%d: ring all-gather of %zu floats per rank in chunks of %zu, %d times (%d as graph replays): %s\n",
         rank, nranks, count, chunk, iters, iters - iters / 2, bad_iters ? "WRONG" : "correct");

  free(host);
  if (graph) CUDA_OK(cudaGraphExecDestroy(graph));
  CUDA_OK(cudaStreamDestroy(stream));
  SYMM_OK(symmMemFree(comm, out));
  SYMM_OK(symmDevCommDestroy(comm, &dc));
  SYMM_OK(symmCommDestroy(comm));
  return bad_iters ? 1 : 0;
}

// One process per rank: rank 0 makes the unique id and passes it to the
// others through pipes (any channel works, as with NCCL). The parent only
// forks and collects exit codes; it never touches CUDA.
int main(int argc, char** argv) {
  int nranks = 2, iters = 6;
  size_t count = 1 << 20, chunk = 16 << 10;
  for (int a = 1; a < argc; ++a) {
    // A ring needs a neighbour: with one rank nobody would signal the waits.
    if (sscanf(argv[a], "--nranks=%d", &nranks) == 1 && nranks >= 2 && nranks <= 8) continue;
    if (sscanf(argv[a], "--count=%zu", &count) == 1 && count > 0) continue;
    if (sscanf(argv[a], "--chunk=%zu", &chunk) == 1 && chunk > 0) continue;
    if (sscanf(argv[a], "--iters=%d", &iters) == 1 && iters > 0) continue;
    fprintf(stderr, "usage: %s [--nranks=2..8] [--count=ELEMS] [--chunk=ELEMS] [--iters=K]\n", argv[0]);
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
    exit(run_rank(rank, nranks, id, count, chunk, iters));
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
