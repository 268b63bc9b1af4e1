/*
 * dlopen: load the library by path (as a plugin host or a Python binding
 * would), find every function the header declares, and call the ones that
 * need no GPU.
 *
 *   dlopen_check <path/to/libsymmcomm.so> <path/to/symmcomm.h>
 *
 * The function list is parsed from the header, not written here, so a
 * function added to the header but missing from the library fails this test.
 * This program does not link the library; the header only supplies types.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmcomm.h"
#include "test_util.h"

#define MAX_FUNCS 256

static char names[MAX_FUNCS][TU_NAME_MAX];
static int nnames;

/* dlsym into a typed function pointer: `LOOKUP(lib, symmGetVersion)`. */
#define LOOKUP(lib, fn) ((__typeof__(&fn))lookup((lib), #fn))
static void *lookup(void *lib, const char *name) {
  void *sym = dlsym(lib, name);
  REQUIRE(sym != NULL, "dlsym(%s): %s", name, dlerror());
  return sym;
}

int main(int argc, char **argv) {
  REQUIRE(argc == 3, "usage: %s <libsymmcomm.so> <symmcomm.h>", argv[0]);

  nnames = tu_header_functions(argv[2], names, MAX_FUNCS);
  REQUIRE(nnames >= 0, "cannot parse %s", argv[2]);
  printf("%d functions declared in %s\n", nnames, argv[2]);
  /* A parser that finds almost nothing is broken, not successful. */
  REQUIRE(nnames >= 10, "found only %d functions in the header; the parser is broken", nnames);

  /* If the program were linked against the library, this would not test
   * loading it by path. */
  REQUIRE(dlsym(RTLD_DEFAULT, "symmGetVersion") == NULL, "symmGetVersion is already loaded before dlopen");
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != NULL, "dlopen(%s): %s", argv[1], dlerror());
  for (int i = 0; i < nnames; i++) {
    void *sym = dlsym(lib, names[i]);
    printf("  %-24s %s\n", names[i], sym ? "found" : "MISSING");
    CHECK(sym != NULL, "%s is declared in the header but not exported by %s", names[i], argv[1]);
  }
  /* The ones this program calls must be among the parsed names too. */
  const char *called[] = {"symmGetVersion",   "symmGetErrorString", "symmGetLastError", "symmGetUniqueId",
                          "symmCommCount",    "symmCommDestroy",    "symmMemset32",     "symmCommInitRank",
                          "symmCommInitAll"};
  for (size_t i = 0; i < sizeof called / sizeof called[0]; i++) {
    int found = 0;
    for (int j = 0; j < nnames; j++) found |= strcmp(names[j], called[i]) == 0;
    CHECK(found, "the header parser missed %s", called[i]);
  }

  int v = 0;
  symmResult_t rc = LOOKUP(lib, symmGetVersion)(&v);
  CHECK(rc == symmSuccess && v == SYMM_VERSION_CODE, "symmGetVersion: %s, version %d (header %d)",
        tu_result_name(rc), v, SYMM_VERSION_CODE);
  const char *s = LOOKUP(lib, symmGetErrorString)(symmInvalidArgument);
  CHECK(s && s[0], "symmGetErrorString(symmInvalidArgument) is empty");

  /* GetUniqueId needs no GPU; the id must not be all zeros. */
  symmUniqueId id;
  memset(&id, 0, sizeof id);
  rc = LOOKUP(lib, symmGetUniqueId)(&id);
  CHECK(rc == symmSuccess, "symmGetUniqueId: %s (%s)", tu_result_name(rc), LOOKUP(lib, symmGetLastError)(NULL));
  int nonzero = 0;
  for (size_t i = 0; i < sizeof id.internal; i++) nonzero |= id.internal[i] != 0;
  CHECK(rc != symmSuccess || nonzero, "symmGetUniqueId returned an all-zero id");

  /* Invalid-argument calls: right code and a message, through dlsym'd pointers. */
  int out = 0;
  rc = LOOKUP(lib, symmCommCount)(NULL, &out);
  CHECK(rc == symmInvalidArgument, "symmCommCount(NULL): %s", tu_result_name(rc));
  const char *msg = LOOKUP(lib, symmGetLastError)(NULL);
  CHECK(msg && strstr(msg, "symmCommCount"), "message after symmCommCount(NULL) is \"%s\"", msg ? msg : "(null)");
  rc = LOOKUP(lib, symmCommDestroy)(NULL);
  CHECK(rc == symmInvalidArgument, "symmCommDestroy(NULL): %s", tu_result_name(rc));
  rc = LOOKUP(lib, symmMemset32)(NULL, 0, 0, NULL, NULL);
  CHECK(rc == symmInvalidArgument, "symmMemset32(comm NULL): %s", tu_result_name(rc));
  symmComm_t c = NULL;
  rc = LOOKUP(lib, symmCommInitRank)(&c, 0, id, 0);
  CHECK(rc == symmInvalidArgument, "symmCommInitRank(nranks 0): %s", tu_result_name(rc));
  rc = LOOKUP(lib, symmCommInitAll)(&c, 0, NULL);
  CHECK(rc == symmInvalidArgument, "symmCommInitAll(ndev 0): %s", tu_result_name(rc));

  /* Unloading must not crash (the library may keep itself resident). */
  CHECK(dlclose(lib) == 0, "dlclose: %s", dlerror());
  return tu_finish("dlopen");
}
