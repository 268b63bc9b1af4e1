/* Shared helpers of the C test drivers; see test_util.h. */
#include "test_util.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- assertions ------------------------------------------------------- */

int tu_failures = 0;

void tu_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "FAIL %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  tu_failures++;
}

void tu_exit_now(void) {
  fprintf(stderr, "stopping after %d failure(s)\n", tu_failures);
  exit(1);
}

int tu_finish(const char *test_name) {
  if (tu_failures == 0) {
    printf("%s: passed\n", test_name);
    return 0;
  }
  printf("%s: %d check(s) failed\n", test_name, tu_failures);
  return 1;
}

void tu_skip_no_gpu(const char *reason) {
  printf("skipped: no CUDA device (%s)\n", reason);
  fflush(stdout);
  exit(TU_SKIP);
}

void tu_skip(const char *fmt, ...) {
  va_list ap;
  fputs("skipped: ", stdout);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
  exit(TU_SKIP);
}

/* ---- small utilities -------------------------------------------------- */

double tu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tu_contains_ci(const char *haystack, const char *needle) {
  if (!haystack || !needle) return 0;
  size_t n = strlen(needle);
  for (const char *p = haystack; *p; p++)
    if (strncasecmp(p, needle, n) == 0) return 1;
  return n == 0;
}

const char *tu_result_name(int code) {
  static const char *const names[] = {
      "symmSuccess",         "symmUnhandledCudaError", "symmSystemError", "symmInternalError",
      "symmInvalidArgument", "symmInvalidUsage",       "symmRemoteError", "symmInProgress",
      "symmTimeout",         "symmNotSupported",
  };
  if (code >= 0 && code < (int)(sizeof names / sizeof names[0])) return names[code];
  return "(unknown code)";
}

/* ---- the header's function list -------------------------------------- */

/* Remove comments from `line` in place; `in_block` carries a block comment
 * across lines (doc comments mention function names too). */
static void strip_comments(char *line, int *in_block) {
  char *out = line;
  for (char *p = line; *p;) {
    if (*in_block) {
      if (p[0] == '*' && p[1] == '/') {
        *in_block = 0;
        p += 2;
      } else {
        p++;
      }
    } else if (p[0] == '/' && p[1] == '*') {
      *in_block = 1;
      p += 2;
    } else if (p[0] == '/' && p[1] == '/') {
      break;
    } else {
      *out++ = *p++;
    }
  }
  *out = '\0';
}

int tu_header_functions(const char *path, char (*names)[TU_NAME_MAX], int max) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[4096];
  int n = 0, in_extern = 0, in_block = 0, saw_extern = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    if (!in_block && strstr(line, "extern \"C\" {")) {
      in_extern = saw_extern = 1;
      continue;
    }
    strip_comments(line, &in_block);
    if (in_extern && line[0] == '}') { /* the closing brace of extern "C" */
      in_extern = 0;
      continue;
    }
    if (!in_extern) continue;
    for (char *p = line; (p = strstr(p, "symm")) != NULL;) {
      if (p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) { /* inside an identifier */
        p += 4;
        continue;
      }
      char *e = p + 4;
      while (isalnum((unsigned char)*e) || *e == '_') e++;
      size_t len = (size_t)(e - p);
      if (*e == '(' && len < TU_NAME_MAX && n < max) {
        for (int i = 0; i < n; i++)
          if (strlen(names[i]) == len && memcmp(names[i], p, len) == 0) bad = 1;
        memcpy(names[n], p, len);
        names[n][len] = '\0';
        n++;
      }
      p = e;
    }
  }
  fclose(f);
  return saw_extern && !bad ? n : -1;
}

/* ---- CUDA driver API -------------------------------------------------- */

struct tu_cuda_api tu_cu;
static void *cuda_lib;

/* The extended entries: resolved if present, required by tu_cuda_load_ext. */
static const struct {
  const char *name;
  void *slot;
} ext_syms[] = {
    {"cuCtxGetCurrent", &tu_cu.cuCtxGetCurrent},
    {"cuDeviceGetName", &tu_cu.cuDeviceGetName},
    {"cuMemGetInfo_v2", &tu_cu.cuMemGetInfo},
    {"cuModuleLoadData", &tu_cu.cuModuleLoadData},
    {"cuModuleUnload", &tu_cu.cuModuleUnload},
    {"cuModuleGetFunction", &tu_cu.cuModuleGetFunction},
    {"cuLaunchKernel", &tu_cu.cuLaunchKernel},
    {"cuStreamQuery", &tu_cu.cuStreamQuery},
    {"cuStreamBeginCapture_v2", &tu_cu.cuStreamBeginCapture},
    {"cuStreamEndCapture", &tu_cu.cuStreamEndCapture},
    {"cuGraphInstantiateWithFlags", &tu_cu.cuGraphInstantiateWithFlags},
    {"cuGraphLaunch", &tu_cu.cuGraphLaunch},
    {"cuGraphExecDestroy", &tu_cu.cuGraphExecDestroy},
    {"cuGraphDestroy", &tu_cu.cuGraphDestroy},
    {"cuDevicePrimaryCtxReset_v2", &tu_cu.cuDevicePrimaryCtxReset},
};

/* dlsym into a function-pointer slot; the POSIX-sanctioned conversion. */
static int resolve(void *lib, const char *name, void *slot, char *reason, size_t len) {
  void *sym = dlsym(lib, name);
  if (!sym) {
    snprintf(reason, len, "libcuda.so.1 lacks %s", name);
    return -1;
  }
  memcpy(slot, &sym, sizeof sym);
  return 0;
}

int tu_cuda_load(char *reason, size_t len) {
  if (cuda_lib) return 0;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(reason, len, "cannot load the CUDA driver: %s", e ? e : "libcuda.so.1 not found");
    return -1;
  }
  struct {
    const char *name;
    void *slot;
  } syms[] = {
      {"cuInit", &tu_cu.cuInit},
      {"cuDeviceGetCount", &tu_cu.cuDeviceGetCount},
      {"cuDeviceGet", &tu_cu.cuDeviceGet},
      {"cuDevicePrimaryCtxRetain", &tu_cu.cuDevicePrimaryCtxRetain},
      {"cuCtxSetCurrent", &tu_cu.cuCtxSetCurrent},
      {"cuCtxSynchronize", &tu_cu.cuCtxSynchronize},
      {"cuMemAlloc_v2", &tu_cu.cuMemAlloc},
      {"cuMemFree_v2", &tu_cu.cuMemFree},
      {"cuMemcpyDtoH_v2", &tu_cu.cuMemcpyDtoH},
      {"cuMemcpyHtoD_v2", &tu_cu.cuMemcpyHtoD},
      {"cuStreamCreate", &tu_cu.cuStreamCreate},
      {"cuStreamSynchronize", &tu_cu.cuStreamSynchronize},
      {"cuStreamDestroy_v2", &tu_cu.cuStreamDestroy},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    if (resolve(lib, syms[i].name, syms[i].slot, reason, len) != 0) {
      dlclose(lib);
      return -1;
    }
  }
  void *name_fn = dlsym(lib, "cuGetErrorName");
  memcpy(&tu_cu.cuGetErrorName, &name_fn, sizeof name_fn);
  /* The extended set: absent entries stay NULL (see tu_cuda_load_ext). */
  for (size_t i = 0; i < sizeof ext_syms / sizeof ext_syms[0]; i++) {
    void *sym = dlsym(lib, ext_syms[i].name);
    memcpy(ext_syms[i].slot, &sym, sizeof sym);
  }
  cuda_lib = lib;
  return 0;
}

int tu_cuda_load_ext(char *reason, size_t len) {
  if (tu_cuda_load(reason, len) != 0) return -1;
  for (size_t i = 0; i < sizeof ext_syms / sizeof ext_syms[0]; i++) {
    void *sym;
    memcpy(&sym, ext_syms[i].slot, sizeof sym);
    if (!sym) {
      snprintf(reason, len, "libcuda.so.1 lacks %s", ext_syms[i].name);
      return -1;
    }
  }
  return 0;
}

CUresult tu_upload(CUdeviceptr dst, const void *src, size_t bytes) {
  CUresult rc = tu_cu.cuMemcpyHtoD(dst, src, bytes);
  return rc ? rc : tu_cu.cuStreamSynchronize(NULL); /* the legacy stream the copy ran on */
}

const char *tu_cu_error(CUresult r) {
  static char buf[96];
  const char *name = NULL;
  if (tu_cu.cuGetErrorName && tu_cu.cuGetErrorName(r, &name) == 0 && name)
    snprintf(buf, sizeof buf, "%s (%d)", name, r);
  else
    snprintf(buf, sizeof buf, "CUDA error %d", r);
  return buf;
}

int tu_cuda_use_device(int ordinal, char *reason, size_t len) {
  if (tu_cuda_load(reason, len) != 0) return -1;
  CUresult r;
  CUdevice dev;
  CUcontext ctx;
  if ((r = tu_cu.cuInit(0)) != 0) {
    snprintf(reason, len, "cuInit failed: %s", tu_cu_error(r));
    return -1;
  }
  if ((r = tu_cu.cuDeviceGet(&dev, ordinal)) != 0) {
    snprintf(reason, len, "cuDeviceGet(%d) failed: %s", ordinal, tu_cu_error(r));
    return -1;
  }
  if ((r = tu_cu.cuDevicePrimaryCtxRetain(&ctx, dev)) != 0) {
    snprintf(reason, len, "cuDevicePrimaryCtxRetain(%d) failed: %s", ordinal, tu_cu_error(r));
    return -1;
  }
  if ((r = tu_cu.cuCtxSetCurrent(ctx)) != 0) {
    snprintf(reason, len, "cuCtxSetCurrent failed: %s", tu_cu_error(r));
    return -1;
  }
  return 0;
}

/* ---- GPU probe -------------------------------------------------------- */

struct probe_report {
  int count;
  char reason[400];
};

/* Read exactly `len` bytes unless EOF/error/timeout; returns bytes read. */
static size_t read_full(int fd, void *buf, size_t len, double deadline) {
  size_t got = 0;
  while (got < len) {
    double left = deadline - tu_now();
    if (left <= 0) break;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc = poll(&p, 1, (int)(left * 1000) + 1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) break;
    ssize_t n = read(fd, (char *)buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  return got;
}

int tu_gpu_count(char *reason, size_t len) {
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(reason, len, "GPU probe: pipe: %s", strerror(errno));
    return -1;
  }
  fflush(NULL); /* no duplicated stdio buffers in the child */
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(reason, len, "GPU probe: fork: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    struct probe_report rep = {.count = 0, .reason = ""};
    close(fds[0]);
    if (tu_cuda_load(rep.reason, sizeof rep.reason) == 0) {
      CUresult r = tu_cu.cuInit(0);
      if (r != 0) {
        snprintf(rep.reason, sizeof rep.reason, "cuInit failed: %s", tu_cu_error(r));
      } else if ((r = tu_cu.cuDeviceGetCount(&rep.count)) != 0) {
        rep.count = 0;
        snprintf(rep.reason, sizeof rep.reason, "cuDeviceGetCount failed: %s", tu_cu_error(r));
      } else if (rep.count == 0) {
        snprintf(rep.reason, sizeof rep.reason, "the CUDA driver reports 0 devices");
      }
    }
    ssize_t w = write(fds[1], &rep, sizeof rep);
    _exit(w == (ssize_t)sizeof rep ? 0 : 1);
  }
  close(fds[1]);
  struct probe_report rep;
  /* cuInit on a multi-GPU host can take seconds; a minute means it hung. */
  size_t got = read_full(fds[0], &rep, sizeof rep, tu_now() + 60.0);
  close(fds[0]);
  if (got != sizeof rep) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got != sizeof rep) {
    if (WIFSIGNALED(status))
      snprintf(reason, len, "GPU probe child died with signal %d", WTERMSIG(status));
    else
      snprintf(reason, len, "GPU probe child sent no report (hung or failed)");
    return -1;
  }
  rep.reason[sizeof rep.reason - 1] = '\0';
  snprintf(reason, len, "%s", rep.reason);
  return rep.count;
}

/* ---- forked ranks ----------------------------------------------------- */

/* Close every descriptor above stderr except `keep`. The parent's
 * rendezvous root (a thread of the parent) owns sockets that a forked child
 * would otherwise hold copies of; a copy keeps a connection open after the
 * root closes it, so a peer would wait for an EOF that never comes. */
static void close_inherited_fds(int keep) {
  int fds[1024];
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < (int)(sizeof fds / sizeof fds[0])) {
      int fd = atoi(e->d_name);
      if (fd > 2 && fd != keep && fd != self) fds[n++] = fd;
    }
    closedir(d);
  } else {
    for (int fd = 3; fd < 1024; fd++)
      if (fd != keep) fds[n++] = fd;
  }
  for (int i = 0; i < n; i++) close(fds[i]);
}

int tu_run_ranks(int nranks, tu_rank_fn fn, void *ctx, double limit_s, struct tu_rank_result *results) {
  pid_t pids[64];
  int fds[64];
  size_t got[64];
  REQUIRE(nranks > 0 && nranks <= 64, "tu_run_ranks: nranks %d out of range", nranks);

  memset(results, 0, sizeof *results * (size_t)nranks);
  fflush(NULL);
  for (int r = 0; r < nranks; r++) {
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
      close_inherited_fds(p[1]);
      struct tu_rank_result res;
      memset(&res, 0, sizeof res);
      res.count = res.rank = res.device = res.async_error = res.destroy_code = -1;
      res.code = -1;
      fn(r, ctx, &res);
      res.reported = 1;
      fflush(NULL);
      ssize_t w = write(p[1], &res, sizeof res);
      /* _exit: the parent's atexit handlers and the library's process-exit
       * work belong to the parent. */
      _exit(w == (ssize_t)sizeof res ? 0 : 1);
    }
    close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
    got[r] = 0;
  }

  /* Collect reports until every pipe is closed or the deadline passes. */
  double deadline = tu_now() + limit_s;
  int open_fds = nranks;
  while (open_fds > 0) {
    double left = deadline - tu_now();
    if (left <= 0) break;
    struct pollfd pfd[64];
    for (int r = 0; r < nranks; r++) pfd[r] = (struct pollfd){.fd = fds[r], .events = POLLIN};
    int rc = poll(pfd, (nfds_t)nranks, (int)(left * 1000) + 1);
    if (rc < 0 && errno == EINTR) continue;
    REQUIRE(rc >= 0, "poll: %s", strerror(errno));
    for (int r = 0; r < nranks; r++) {
      if (fds[r] < 0 || !pfd[r].revents) continue;
      ssize_t n = read(fds[r], (char *)&results[r] + got[r], sizeof results[r] - got[r]);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        got[r] += (size_t)n;
        if (got[r] < sizeof results[r]) continue;
      }
      close(fds[r]); /* complete report, EOF or error */
      fds[r] = -1;
      open_fds--;
    }
  }

  int ok = 0;
  for (int r = 0; r < nranks; r++) {
    int hung = fds[r] >= 0;
    if (hung) {
      kill(pids[r], SIGKILL);
      close(fds[r]);
    }
    int status = 0;
    while (waitpid(pids[r], &status, 0) < 0 && errno == EINTR) {
    }
    if (got[r] == sizeof results[r] && results[r].reported) continue;
    memset(&results[r], 0, sizeof results[r]);
    results[r].code = -1;
    if (hung)
      snprintf(results[r].msg, sizeof results[r].msg, "rank %d still running after %.0f s; killed", r, limit_s);
    else if (WIFSIGNALED(status))
      snprintf(results[r].msg, sizeof results[r].msg, "rank %d died with signal %d", r, WTERMSIG(status));
    else
      snprintf(results[r].msg, sizeof results[r].msg, "rank %d exited (status %d) without a report", r,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    fprintf(stderr, "%s\n", results[r].msg);
    ok = -1;
  }
  return ok;
}
