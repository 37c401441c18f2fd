/* test_conformance.c - runs the conformance suite (conformance.c) on every lane the fabric finds, under each
 * contract the lane honours, then through the router, then the op chain across lanes. A lane weft gains
 * later is covered by this file unchanged.
 *
 * Environment: WEFT_TEST_LANES restricts the fabric ("vulkan" to test only that lane while writing it);
 * WEFT_TEST_SEED repeats a run's shapes and values. */
#include <stdio.h>
#include <stdlib.h>

#include "conformance.h"
#include "tutil.h"

int main(void) {
  const double start = tu_now();
  const uint64_t seed = tu_seed();
  weft_fabric *f = NULL;
  weft_status st = tu_open(getenv("WEFT_TEST_LANES"), &f);
  if (st != WEFT_OK) {
    fprintf(stderr, "FAIL: weft_fabric_open: %s: %s\n", weft_status_str(st), weft_open_error());
    return 1;
  }
  printf("conformance: seed %llu (WEFT_TEST_SEED repeats it)\n", (unsigned long long)seed);
  printf("exact: bits equal to the reference (NaNs normalised); fp32: |got - ref64| <= 2(k+1) 2^-24 sum|a b| + "
         "(2k+2) 2^-126 for matmul, per-op bounds in conformance.c\n");
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
    const char *name, *reason;
    if (weft_fabric_absent_info(f, i, &name, &reason) == WEFT_OK) printf("absent %s: %s\n", name, reason);
  }
  weft_conf_stats total = {0, 0, 0};
  weft_conf_run_all(f, seed, &total);
  printf("total: %ld cases, %ld elements compared, %ld failed\n", total.cases, total.elements, total.failed);
  weft_fabric_close(f);
  return tu_finish("conformance", start);
}
