/* NCCL through dlopen for symm_bench --vs-nccl; see bench_nccl.h. */
#include "bench_nccl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

struct bn_api bn;
static void *nccl_lib;

int bn_load(const char *path, char *reason, size_t len) {
  if (nccl_lib) return 0;
  const char *name = path && path[0] ? path : "libnccl.so.2";
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(reason, len, "cannot load NCCL (%s): %s", name, e ? e : "not found");
    return -1;
  }
  const struct {
    const char *name;
    void *slot;
    int optional;
  } syms[] = {
      {"ncclGetVersion", &bn.GetVersion, 0},
      {"ncclGetUniqueId", &bn.GetUniqueId, 0},
      {"ncclCommInitRank", &bn.CommInitRank, 0},
      {"ncclCommInitAll", &bn.CommInitAll, 0},
      {"ncclCommDestroy", &bn.CommDestroy, 0},
      {"ncclAllReduce", &bn.AllReduce, 0},
      {"ncclAllGather", &bn.AllGather, 0},
      {"ncclReduceScatter", &bn.ReduceScatter, 0},
      {"ncclBroadcast", &bn.Broadcast, 0},
      {"ncclReduce", &bn.Reduce, 0},
      {"ncclSend", &bn.Send, 0},
      {"ncclRecv", &bn.Recv, 0},
      {"ncclGroupStart", &bn.GroupStart, 0},
      {"ncclGroupEnd", &bn.GroupEnd, 0},
      {"ncclGetErrorString", &bn.GetErrorString, 0},
      {"ncclGetLastError", &bn.GetLastError, 1},
      {"ncclCommGetAsyncError", &bn.CommGetAsyncError, 1},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *sym = dlsym(lib, syms[i].name);
    if (!sym && !syms[i].optional) {
      snprintf(reason, len, "%s lacks %s (NCCL too old?)", name, syms[i].name);
      dlclose(lib);
      memset(&bn, 0, sizeof bn);
      return -1;
    }
    memcpy(syms[i].slot, &sym, sizeof sym);
  }
  nccl_lib = lib;
  return 0;
}

const char *bn_error(bn_result r, bn_comm comm, char *buf, size_t len) {
  const char *s = bn.GetErrorString ? bn.GetErrorString(r) : NULL;
  const char *last = bn.GetLastError ? bn.GetLastError(comm) : NULL;
  snprintf(buf, len, "NCCL error %d (%s)%s%s", r, s ? s : "?", last && last[0] ? ": " : "", last ? last : "");
  return buf;
}
