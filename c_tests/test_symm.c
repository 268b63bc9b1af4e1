/* The helpers that call into libsymmcomm, kept apart from test_util.c so
 * that a program which only dlopens the library (dlopen_check) can use the
 * rest of the helpers without linking it. */
#include <stdio.h>

#include "test_util.h"

const char *tu_last_error(symmComm_t comm, char *buf, size_t len) {
  const char *s = symmGetLastError(comm);
  if (!s) return NULL;
  snprintf(buf, len, "%s", s);
  return buf;
}

void tu_rank_finish(symmResult_t rc, symmComm_t comm, struct tu_rank_result *out) {
  out->code = rc;
  if (rc != symmSuccess) {
    const char *m = symmGetLastError(NULL);
    snprintf(out->msg, sizeof out->msg, "%s", m ? m : "(symmGetLastError returned NULL)");
    return;
  }
  symmResult_t async = symmSuccess;
  if (symmCommCount(comm, &out->count) != symmSuccess) out->count = -2;
  if (symmCommUserRank(comm, &out->rank) != symmSuccess) out->rank = -2;
  if (symmCommCuDevice(comm, &out->device) != symmSuccess) out->device = -2;
  out->async_error = symmCommGetAsyncError(comm, &async) == symmSuccess ? (int)async : -2;
  out->destroy_code = symmCommDestroy(comm);
}
