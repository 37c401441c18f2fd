/* test_conformance.c - runs the conformance suite (conformance.c) on every lane the fabric finds, under each
 * contract the lane honours, then through the router, then the op chain across lanes. A lane weft gains
 * later is covered by this file unchanged.
 *
 * Environment: WEFT_TEST_LANES restricts the fabric ("vulkan" to test only that lane while writing it);
 * WEFT_TEST_SEED repeats a run's shapes and values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  printf("exact: bits equal to the reference (NaNs too: every NaN is 0x7fc00000); fp32: |got - ref64| <= 2(k+1) 2^-24 sum|a b| + "
         "(2k+2) 2^-126 for matmul, per-op bounds in conformance.c\n");
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
    const char *name, *reason;
    if (weft_fabric_absent_info(f, i, &name, &reason) == WEFT_OK) printf("absent %s: %s\n", name, reason);
  }
  /* A run for one lane kind (WEFT_TEST_LANES=cpu,opencl) whose lane is not here tested nothing of it: it
   * says so and exits 77 (CTest: Skipped) after the lanes that are here passed, never Passed. */
  tu_require_lanes(f, getenv("WEFT_TEST_LANES"));
  weft_conf_stats total = {0, 0, 0, 0};
  weft_conf_run_all(f, seed, &total);
  int has_vulkan = 0;
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    has_vulkan |= weft_fabric_lane_info(f, i, &li) == WEFT_OK && strcmp(li.kind, "vulkan") == 0;
  }
  weft_fabric_close(f);
  /* A Vulkan lane splits tensors larger than its largest storage binding into windows. With the binding
   * capped at 4 KiB (the fabric's test hook) nearly every case is split, so the split paths meet the same
   * suite. */
  if (has_vulkan) {
    weft_fabric_desc d = tu_desc();
    d.lanes = getenv("WEFT_TEST_LANES");
    d.vulkan_max_binding = 4096;
    if (weft_fabric_open(&d, &f) == WEFT_OK) {
      for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
        weft_lane_info li;
        if (weft_fabric_lane_info(f, i, &li) != WEFT_OK || strcmp(li.kind, "vulkan") != 0) continue;
        for (int ci = 0; ci < 2; ci++) {
          const weft_contract contract = ci ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT;
          if (!(li.contracts & WEFT_CONTRACT_BIT(contract))) continue;
          weft_conf_stats s = {0, 0, 0, 0};
          const double t = tu_now();
          weft_conf_run(f, (int)i, contract, 1, 0, seed, &s);
          printf("%s, 4 KiB bindings %-5s: %4ld cases, %9ld elements, %ld failed, %ld skipped (%.2f s)\n", li.name,
                 weft_contract_str(contract), s.cases, s.elements, s.failed, s.skipped, tu_now() - t);
          total.cases += s.cases, total.elements += s.elements, total.failed += s.failed, total.skipped += s.skipped;
        }
      }
      weft_fabric_close(f);
    } else {
      TU_CHECK(0, "weft_fabric_open(vulkan_max_binding 4096): %s", weft_open_error());
    }
  }
  /* The CPU lane splits work across its threads: one thread, and more threads than this machine may have
   * cores (uneven splits), must give the same bits. */
  const char *filter = getenv("WEFT_TEST_LANES");
  static const int thread_counts[] = {1, 3, 8};
  for (int ti = 0; ti < 3 && (!filter || !*filter || tu_contains(filter, "cpu")); ti++) {
    const int threads = thread_counts[ti];
    weft_fabric_desc d = tu_desc();
    d.lanes = "cpu";
    d.cpu_threads = threads;
    if (weft_fabric_open(&d, &f) != WEFT_OK) {
      TU_CHECK(0, "weft_fabric_open(cpu, %d threads): %s", threads, weft_open_error());
      continue;
    }
    for (int ci = 0; ci < 2; ci++) {
      weft_conf_stats s = {0, 0, 0, 0};
      const double t = tu_now();
      weft_conf_run(f, 0, ci ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT, 0, 0, seed, &s);
      printf("cpu, %d thread%s %-5s: %4ld cases, %9ld elements, %ld failed (%.2f s)\n", threads, threads > 1 ? "s" : "",
             ci ? "fp32" : "exact", s.cases, s.elements, s.failed, tu_now() - t);
      total.cases += s.cases, total.elements += s.elements, total.failed += s.failed;
    }
    weft_fabric_close(f);
  }
  printf("total: %ld cases, %ld elements compared, %ld failed, %ld skipped (beyond a lane's size limits)\n",
         total.cases, total.elements, total.failed, total.skipped);
  return tu_finish("conformance", start);
}
