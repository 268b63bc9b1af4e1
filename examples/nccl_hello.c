/* A program written for NCCL (nccl.h, -lnccl), run on symmcomm's drop-in
 * libnccl.so.2 (README, "Drop-in libnccl.so.2"). It says which
 * libnccl.so.2 the loader picked and its version; with a GPU it all-reduces
 * a buffer from ncclMemAlloc on a one-GPU communicator.
 *
 *   cc examples/nccl_hello.c -I<dir of nccl.h> -L<dir of libnccl.so> -lnccl -ldl -o nccl_hello */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>

int main(void) {
  Dl_info info;
  if (dladdr((void *)ncclGetVersion, &info) && info.dli_fname) printf("libnccl.so.2 from %s\n", info.dli_fname);
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 1;
  printf("NCCL API version %d\n", version);

  ncclComm_t comm;
  ncclResult_t rc = ncclCommInitAll(&comm, 1, NULL);
  if (rc != ncclSuccess) {
    /* No GPU here: every call still answers, with a reason. */
    printf("no communicator on this machine: %s\n", ncclGetLastError(NULL));
    return 0;
  }
  const size_t count = 1 << 20;
  float *buf = NULL;
  if (ncclMemAlloc((void **)&buf, count * sizeof(float)) != ncclSuccess ||
      ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess) {
    printf("all-reduce failed: %s\n", ncclGetLastError(comm));
    return 1;
  }
  ncclMemFree(buf); /* waits for the device, as cudaFree does */
  ncclCommDestroy(comm);
  printf("all-reduce of %zu floats on one GPU: ok\n", count);
  return 0;
}
