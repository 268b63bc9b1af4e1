// The header from C++: declarations get C linkage, enums and the id struct
// are usable as ordinary C++ types. Compiled by the header_cxx test with
// -fsyntax-only (c++11 and c++17, -pedantic).
#include "symmcomm.h"

static_assert(sizeof(symmUniqueId) == SYMM_UNIQUE_ID_BYTES, "unique id size");
static_assert(symmNotSupported + 1 == SYMM_NUM_RESULTS, "result count");

// C linkage: a pointer to the declared function has the plain C type.
extern "C" typedef symmResult_t count_fn(symmComm_t, int *);
static count_fn *const count_ptr = &symmCommCount;

int header_cxx_use(symmComm_t comm);
int header_cxx_use(symmComm_t comm) {
  int n = 0;
  symmUniqueId id = symmUniqueId();
  (void)id;
  return count_ptr(comm, &n) == symmSuccess ? n : -1;
}
