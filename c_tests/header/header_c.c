/* The header on its own, as the first and only include of a C file.
 * Compiled with -fsyntax-only by the header_c test (c99 and c11, -pedantic). */
#include "symmcomm.h"

/* Touch the declarations so that a typo in a type or macro is an error. */
typedef char unique_id_is_128_bytes[sizeof(symmUniqueId) == SYMM_UNIQUE_ID_BYTES ? 1 : -1];
typedef char version_code_matches[SYMM_VERSION_CODE == SYMM_MAJOR * 10000 + SYMM_MINOR * 100 + SYMM_PATCH ? 1 : -1];

symmResult_t header_use(symmComm_t comm, struct CUstream_st *stream);
symmResult_t header_use(symmComm_t comm, struct CUstream_st *stream) {
  int n = 0;
  symmResult_t rc = symmCommCount(comm, &n);
  symmDataType_t t = symmBfloat16;
  symmRedOp_t op = symmAvg;
  (void)t;
  (void)op;
  if (rc != symmSuccess) return rc;
  return symmMemset32(NULL, 0u, (size_t)n, comm, stream);
}
