/* Linked against the REAL libnccl.so.2, run with LD_PRELOAD=<our library>:
 * every NCCL call must reach ours (argv[1]), which forwards to the real
 * library named by SYMM_NCCL_LIB when needed. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int same_file(const char *a, const char *b) {
  struct stat x, y;
  return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  Dl_info info;
  if (!dladdr((void *)&ncclAllReduce, &info) || !same_file(info.dli_fname, argv[1])) {
    fprintf(stderr, "FAIL: ncclAllReduce resolves to %s, not the preloaded %s\n", info.dli_fname, argv[1]);
    return 1;
  }
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    fprintf(stderr, "FAIL: ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  if (memcmp(id.internal, "SYMMNCCL", 8) != 0 || !(id.internal[8] & 2) || !(id.internal[8] & 1)) {
    fprintf(stderr, "FAIL: the id is not ours with both parts (flags %d)\n", id.internal[8]);
    return 1;
  }
  int v = 0;
  /* The stand-in reports 2.28.9; the header compiled against may be another
   * 2.28 release (the GPU machine's is 2.28.3): the series must match. */
  if (ncclGetVersion(&v) != ncclSuccess || v / 100 != NCCL_VERSION_CODE / 100) {
    fprintf(stderr, "FAIL: version %d\n", v);
    return 1;
  }
  printf("nccl_preload: OK (calls reach %s; the real NCCL serves the fallback)\n", info.dli_fname);
  return 0;
}
