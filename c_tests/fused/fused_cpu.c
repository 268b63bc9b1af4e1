/*
 * fused_cpu <missing|search>: the fused matmul ops without a GPU.
 *
 *   missing  SYMM_CUBLASLT_LIB names a file that does not exist (CTest sets
 *            it): descriptor and argument errors come first, each with its
 *            code and a message; then a call whose arguments are all fine
 *            (and whose communicator was never created) must be refused
 *            with symmNotSupported, the message naming cuBLASLt, what was
 *            tried and SYMM_CUBLASLT_LIB; and the rest of the library must
 *            still work (symmGetVersion, symmGetUniqueId).
 *   search   The default search on this machine: the same call is refused
 *            with symmNotSupported naming cuBLASLt where it cannot be
 *            loaded, or (cuBLASLt present) with symmInvalidUsage because
 *            the communicator is not live.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "symmcomm.h"
#include "test_util.h"

#define FAKE_COMM ((symmComm_t)(uintptr_t)0x1000)
#define P ((void *)(uintptr_t)0x2000)

static void expect(int line, const char *call, symmResult_t got, symmResult_t want, const char *kw) {
  if (got != want) {
    tu_fail(__FILE__, line, "%s returned %s, expected %s (%s)", call, tu_result_name(got), tu_result_name(want),
            symmGetLastError(NULL));
    return;
  }
  const char *msg = symmGetLastError(NULL);
  if (!msg || !tu_contains_ci(msg, kw)) tu_fail(__FILE__, line, "%s: message \"%s\" should mention \"%s\"", call, msg ? msg : "(null)", kw);
}
#define EXPECT(call, want, kw) expect(__LINE__, #call, (call), (want), (kw))

static void argument_errors(void) {
  symmMatmulDesc_t d, x;
  memset(&d, 0x5a, sizeof d);
  EXPECT(symmMatmulDescInit(NULL, symmBfloat16), symmInvalidArgument, "desc");
  EXPECT(symmMatmulDescInit(&d, (symmDataType_t)99), symmInvalidArgument, "dtype");
  EXPECT(symmMatmulDescInit(&d, symmInt8), symmNotSupported, "symmInt8");
  CHECK(((unsigned char *)&d)[0] == 0x5a, "a refused symmMatmulDescInit wrote its output");
  REQUIRE(symmMatmulDescInit(&d, symmBfloat16) == symmSuccess, "symmMatmulDescInit(bf16)");
  CHECK(d.structSize == sizeof d && d.aType == symmBfloat16 && d.bType == symmBfloat16 && d.cType == symmBfloat16 &&
            d.transB == 0 && d.lda == 0 && d.ldb == 0 && d.ldc == 0 && d.beta == 0.0f &&
            d.scaleMode == symmScaleNone && !d.aScale && !d.bScale && !d.aGathered && d.chunksPerRank == 0,
        "symmMatmulDescInit(bf16) defaults are wrong");
  REQUIRE(symmMatmulDescInit(&x, symmFloat8e4m3) == symmSuccess, "symmMatmulDescInit(e4m3)");
  CHECK(x.aType == symmFloat8e4m3 && x.cType == symmBfloat16, "fp8 defaults: C should be bf16");

  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, NULL, FAKE_COMM, NULL), symmInvalidArgument, "desc");
  EXPECT(symmMatmulReduceScatter(P, P, P, 4, 4, 4, NULL, FAKE_COMM, NULL), symmInvalidArgument, "desc");
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &d, NULL, NULL), symmInvalidArgument, "comm");
  EXPECT(symmAllGatherMatmul(NULL, P, P, 4, 4, 4, &d, FAKE_COMM, NULL), symmInvalidArgument, "aShard");
  EXPECT(symmMatmulReduceScatter(P, NULL, P, 4, 4, 4, &d, FAKE_COMM, NULL), symmInvalidArgument, "b");
  EXPECT(symmMatmulReduceScatter(P, P, NULL, 4, 4, 4, &d, FAKE_COMM, NULL), symmInvalidArgument, "cShard");
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 0, &d, FAKE_COMM, NULL), symmInvalidArgument, "k");
  x = d;
  x.structSize = 16;
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmInvalidArgument, "structSize");
  x = d;
  x.aType = (symmDataType_t)77;
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmInvalidArgument, "aType");
  x = d;
  x.bType = symmFloat16;
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmInvalidArgument, "bType");
  x = d;
  x.cType = symmInt32;
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmNotSupported, "cType");
  x = d;
  x.transB = 5;
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmInvalidArgument, "transB");
  x = d;
  x.lda = 3;
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmInvalidArgument, "lda");
  x = d;
  x.ldc = 2;
  EXPECT(symmMatmulReduceScatter(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmInvalidArgument, "ldc");
  x = d;
  x.scaleMode = (symmScaleMode_t)9;
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmInvalidArgument, "scaleMode");
  x = d;
  x.scaleMode = symmScaleTensor;
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmNotSupported, "fp8");
  x = d;
  x.aType = x.bType = symmFloat8e4m3;
  EXPECT(symmAllGatherMatmul(P, P, P, 16, 16, 16, &x, FAKE_COMM, NULL), symmNotSupported, "transB");
  x.transB = 1;
  x.scaleMode = symmScaleRowwise;
  EXPECT(symmAllGatherMatmul(P, P, P, 16, 16, 16, &x, FAKE_COMM, NULL), symmInvalidArgument, "aScale");
  x = d;
  x.aGathered = P;
  EXPECT(symmMatmulReduceScatter(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmInvalidArgument, "aGathered");
  x = d;
  x.chunksPerRank = -2;
  EXPECT(symmAllGatherMatmul(P, P, P, 4, 4, 4, &x, FAKE_COMM, NULL), symmInvalidArgument, "chunksPerRank");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  REQUIRE(!strcmp(mode, "missing") || !strcmp(mode, "search"), "usage: fused_cpu missing|search");
  argument_errors();
  symmMatmulDesc_t d;
  REQUIRE(symmMatmulDescInit(&d, symmBfloat16) == symmSuccess, "symmMatmulDescInit");
  symmResult_t ag = symmAllGatherMatmul(P, P, P, 4, 4, 4, &d, FAKE_COMM, NULL);
  char ag_msg[1024];
  snprintf(ag_msg, sizeof ag_msg, "%s", symmGetLastError(NULL));
  symmResult_t rs = symmMatmulReduceScatter(P, P, P, 4, 4, 4, &d, FAKE_COMM, NULL);
  const char *rs_msg = symmGetLastError(NULL);
  if (!strcmp(mode, "missing")) {
    CHECK(ag == symmNotSupported && rs == symmNotSupported, "without cuBLASLt: %s and %s, expected symmNotSupported",
          tu_result_name(ag), tu_result_name(rs));
    CHECK(tu_contains_ci(ag_msg, "cuBLASLt") && tu_contains_ci(ag_msg, "no-such-dir") &&
              tu_contains_ci(ag_msg, "SYMM_CUBLASLT_LIB") && tu_contains_ci(ag_msg, "symmAllGatherMatmul"),
          "the message should name the function, cuBLASLt, the path tried and SYMM_CUBLASLT_LIB: \"%s\"", ag_msg);
    CHECK(tu_contains_ci(rs_msg, "cuBLASLt"), "message: \"%s\"", rs_msg);
    printf("without cuBLASLt: %s: %s\n", tu_result_name(ag), ag_msg);
  } else if (ag == symmNotSupported) {
    CHECK(tu_contains_ci(ag_msg, "cuBLASLt") && rs == symmNotSupported, "refused without naming cuBLASLt: \"%s\"",
          ag_msg);
    printf("cuBLASLt cannot be loaded here: %s\n", ag_msg);
  } else {
    CHECK(ag == symmInvalidUsage && rs == symmInvalidUsage && tu_contains_ci(ag_msg, "not a live"),
          "cuBLASLt loads: expected symmInvalidUsage for the dead communicator, got %s (%s)", tu_result_name(ag),
          ag_msg);
    printf("cuBLASLt loads here; the dead communicator is refused: %s\n", ag_msg);
  }
  /* The rest of the library is unaffected. */
  int v = 0;
  CHECK(symmGetVersion(&v) == symmSuccess && v > 0, "symmGetVersion after a refused fused call");
  symmUniqueId id;
  symmResult_t idrc = symmGetUniqueId(&id);
  CHECK(idrc == symmSuccess, "symmGetUniqueId after a refused fused call: %s (%s)", tu_result_name(idrc),
        symmGetLastError(NULL));
  return tu_finish("fused_cpu");
}
