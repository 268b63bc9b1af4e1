/* pynccl-style loading by path.
 *   after_real <ours> <real>: the real NCCL is already loaded globally (as
 *     torch does) when ours is dlopened by path: ours must be a separate
 *     object, and find and use the loaded real one (no SYMM_NCCL_LIB).
 *   search <ours> <real>: dlopen("libnccl.so.2") with our shim directory
 *     first on LD_LIBRARY_PATH gives ours, which finds the real one further
 *     down the path, skipping itself. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef ncclResult_t (*get_id_fn)(ncclUniqueId *);
typedef const char *(*last_error_fn)(ncclComm_t);

static int same_file(const char *a, const char *b) {
  struct stat x, y;
  return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  const char *mode = argv[1], *ours = argv[2], *real = argv[3];
  void *h;
  if (strcmp(mode, "after_real") == 0) {
    if (!dlopen(real, RTLD_NOW | RTLD_GLOBAL)) {
      fprintf(stderr, "FAIL: dlopen real: %s\n", dlerror());
      return 1;
    }
    h = dlopen(ours, RTLD_NOW | RTLD_LOCAL);
  } else {
    h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
    return 1;
  }
  get_id_fn get_id = (get_id_fn)dlsym(h, "ncclGetUniqueId");
  last_error_fn last_error = (last_error_fn)dlsym(h, "ncclGetLastError");
  Dl_info info;
  if (!get_id || !last_error || !dladdr((void *)get_id, &info) || !same_file(info.dli_fname, ours)) {
    fprintf(stderr, "FAIL: ncclGetUniqueId is not ours\n");
    return 1;
  }
  ncclUniqueId id;
  if (get_id(&id) != ncclSuccess) {
    fprintf(stderr, "FAIL: ncclGetUniqueId: %s\n", last_error(NULL));
    return 1;
  }
  if (memcmp(id.internal, "SYMMNCCL", 8) != 0 || !(id.internal[8] & 2)) {
    fprintf(stderr, "FAIL: the real NCCL was not found (id flags %d)\n", id.internal[8]);
    return 1;
  }
  printf("nccl_dlopen %s: OK\n", mode);
  return 0;
}
