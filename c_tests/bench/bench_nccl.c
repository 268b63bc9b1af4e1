/* NCCL through dlopen for symm_bench --vs-nccl; see bench_nccl.h. */
#include "bench_nccl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

struct bn_api bn;
static void *nccl_lib;
static char nccl_lib_name[512]; /* as loaded, for messages */

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
      {"ncclMemAlloc", &bn.MemAlloc, 1},
      {"ncclMemFree", &bn.MemFree, 1},
      {"ncclCommWindowRegister", &bn.CommWindowRegister, 1},
      {"ncclCommWindowDeregister", &bn.CommWindowDeregister, 1},
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
  snprintf(nccl_lib_name, sizeof nccl_lib_name, "%s", name);
  return 0;
}

int bn_window_check(char *reason, size_t len) {
  const struct {
    const char *name;
    int present;
  } needed[] = {
      {"ncclMemAlloc", bn.MemAlloc != NULL},
      {"ncclMemFree", bn.MemFree != NULL},
      {"ncclCommWindowRegister", bn.CommWindowRegister != NULL},
      {"ncclCommWindowDeregister", bn.CommWindowDeregister != NULL},
  };
  if (!nccl_lib) {
    snprintf(reason, len, "NCCL is not loaded");
    return -1;
  }
  for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
    if (!needed[i].present) {
      snprintf(reason, len, "%s lacks %s (window registration needs NCCL 2.27 or later)", nccl_lib_name,
               needed[i].name);
      return -1;
    }
  }
  return 0;
}

void bn_note_declined_windows(uint64_t declined, uint64_t total) {
  if (declined)
    printf("# note: NCCL declined %llu of %llu window registrations (ncclCommWindowRegister gave a NULL window): "
           "the NCCL window column times NCCL's ordinary path there\n",
           (unsigned long long)declined, (unsigned long long)total);
}

const char *bn_error(bn_result r, bn_comm comm, char *buf, size_t len) {
  const char *s = bn.GetErrorString ? bn.GetErrorString(r) : NULL;
  const char *last = bn.GetLastError ? bn.GetLastError(comm) : NULL;
  snprintf(buf, len, "NCCL error %d (%s)%s%s", r, s ? s : "?", last && last[0] ? ": " : "", last ? last : "");
  return buf;
}
