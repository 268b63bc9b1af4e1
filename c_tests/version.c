/*
 * version: the header's version macros agree with each other, with the
 * package version (Cargo.toml, passed in by CMake as CARGO_VERSION_*) and
 * with symmGetVersion; every result code has a distinct description and
 * unknown codes still get a usable string.
 */
#include <stdio.h>
#include <string.h>

#include "symmcomm.h"
#include "test_util.h"

int main(void) {
  /* The macros are part of the ABI contract: code = major*10000 + minor*100 + patch. */
  CHECK(SYMM_VERSION_CODE == SYMM_MAJOR * 10000 + SYMM_MINOR * 100 + SYMM_PATCH,
        "SYMM_VERSION_CODE %d != %d*10000 + %d*100 + %d", SYMM_VERSION_CODE, SYMM_MAJOR, SYMM_MINOR,
        SYMM_PATCH);
  CHECK(SYMM_MINOR < 100 && SYMM_PATCH < 100, "minor/patch must stay below 100 to fit the code");
  CHECK(SYMM_MAJOR == CARGO_VERSION_MAJOR && SYMM_MINOR == CARGO_VERSION_MINOR &&
            SYMM_PATCH == CARGO_VERSION_PATCH,
        "header says %d.%d.%d but Cargo.toml says %d.%d.%d (stale header?)", SYMM_MAJOR, SYMM_MINOR,
        SYMM_PATCH, CARGO_VERSION_MAJOR, CARGO_VERSION_MINOR, CARGO_VERSION_PATCH);

  int v = -12345;
  symmResult_t rc = symmGetVersion(&v);
  CHECK(rc == symmSuccess, "symmGetVersion returned %s", tu_result_name(rc));
  CHECK(v == SYMM_VERSION_CODE, "symmGetVersion gave %d, header SYMM_VERSION_CODE is %d", v, SYMM_VERSION_CODE);
  CHECK(SYMM_UNIQUE_ID_BYTES == 128 && sizeof(symmUniqueId) == SYMM_UNIQUE_ID_BYTES,
        "symmUniqueId is %zu bytes, SYMM_UNIQUE_ID_BYTES %d", sizeof(symmUniqueId), SYMM_UNIQUE_ID_BYTES);

  /* Known codes: non-empty, pairwise distinct. */
  const char *desc[SYMM_NUM_RESULTS];
  for (int c = 0; c < SYMM_NUM_RESULTS; c++) {
    desc[c] = symmGetErrorString((symmResult_t)c);
    CHECK(desc[c] != NULL && desc[c][0] != '\0', "symmGetErrorString(%d) is %s", c, desc[c] ? "empty" : "NULL");
    if (!desc[c]) continue;
    printf("  %2d %-24s %s\n", c, tu_result_name(c), desc[c]);
    for (int d = 0; d < c; d++)
      CHECK(!desc[d] || strcmp(desc[c], desc[d]) != 0, "codes %d and %d share the description \"%s\"", d, c,
            desc[c]);
  }
  /* The last code is symmNotSupported; SYMM_NUM_RESULTS must track the enum. */
  CHECK(SYMM_NUM_RESULTS == symmNotSupported + 1, "SYMM_NUM_RESULTS %d, last enumerator %d", SYMM_NUM_RESULTS,
        (int)symmNotSupported);

  /* Unknown codes (a C caller can pass anything): never NULL, never crash. */
  const int unknown[] = {SYMM_NUM_RESULTS, 99, -1, 1 << 30, -2147483647 - 1};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    const char *s = symmGetErrorString((symmResult_t)unknown[i]);
    CHECK(s != NULL && s[0] != '\0', "symmGetErrorString(%d) is %s", unknown[i], s ? "empty" : "NULL");
    for (int c = 0; s && c < SYMM_NUM_RESULTS; c++)
      CHECK(!desc[c] || strcmp(s, desc[c]) != 0, "unknown code %d is described as known code %d (\"%s\")",
            unknown[i], c, s);
  }
  return tu_finish("version");
}
