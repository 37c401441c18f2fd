/* test_no_checks.c - the harness itself: a test binary that made no check proved nothing and must fail
 * (tu_finish returns 1). Registered with WILL_FAIL, so CTest passes it only when it does fail. */
#include "tutil.h"

int main(void) { return tu_finish("no_checks (must fail)", tu_now()); }
