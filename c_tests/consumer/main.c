/* A downstream program: the package's version, the header's and the
 * library's must agree, and a failing call must leave a message. */
#include <stdio.h>
#include <string.h>

#include <symmcomm.h>

int main(void) {
  int v = -1, n = 0;
  const int pkg = PKG_VERSION_MAJOR * 10000 + PKG_VERSION_MINOR * 100 + PKG_VERSION_PATCH;
  if (symmGetVersion(&v) != symmSuccess || v != SYMM_VERSION_CODE || v != pkg) {
    fprintf(stderr, "consumer: library version %d, header %d, package %d\n", v, SYMM_VERSION_CODE, pkg);
    return 1;
  }
  if (symmCommCount(NULL, &n) != symmInvalidArgument || strlen(symmGetLastError(NULL)) == 0) {
    fprintf(stderr, "consumer: symmCommCount(NULL) did not fail with a message\n");
    return 1;
  }
  printf("consumer (%s): symmcomm %d OK; last error \"%s\"\n", CONSUMER_KIND, v, symmGetLastError(NULL));
  return 0;
}
