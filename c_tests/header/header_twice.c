/* Including the header twice must be harmless (include guard). */
#include "symmcomm.h"
#include "symmcomm.h"

int header_twice_code(void);
int header_twice_code(void) { return SYMM_VERSION_CODE + (int)symmSuccess; }
