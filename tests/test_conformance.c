/* test_conformance.c - runs the conformance suite (conformance.c) on every lane the fabric finds, under each
 * contract the lane honours, then once through the router, then the op chain across every combination of
 * lanes. A lane that does not honour a contract is skipped for it with a line saying so (and must refuse an
 * op pinned to it under that contract).
 *
 * Environment: WEFT_TEST_LANES restricts the fabric ("vulkan" to test only that lane while writing it);
 * WEFT_TEST_SEED repeats a run's shapes and values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "tutil.h"

#define MAX_LANES 64

/* An op pinned to a lane under a contract it does not honour must be refused, not run weaker. */
static void check_refused(weft_fabric *f, int lane, weft_contract contract, const char *name) {
  const int64_t dims[2] = {2, 3};
  weft_tensor *x = NULL, *y = NULL;
  weft_tensor_create(f, 2, dims, NULL, &x);
  weft_tensor_create(f, 2, dims, NULL, &y);
  weft_op_desc d = {contract, lane};
  weft_status st = weft_op_relu(f, &d, x, y);
  TU_CHECK(st == WEFT_ERR_UNSUPPORTED, "relu pinned to %s under '%s' (not honoured): got %s, want unsupported", name,
           weft_contract_str(contract), weft_status_str(st));
  TU_CHECK(tu_contains(weft_fabric_last_error(f), name), "the refusal does not name the lane: '%s'",
           weft_fabric_last_error(f));
  weft_tensor_destroy(x);
  weft_tensor_destroy(y);
}

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
  size_t nl = weft_fabric_lane_count(f);
  if (nl > MAX_LANES) nl = MAX_LANES;
  int exact_lanes[MAX_LANES + 1], nexact = 0, any_slow = 0;
  weft_contract_mask any_contract = 0;
  static const weft_contract contracts[] = {WEFT_CONTRACT_EXACT, WEFT_CONTRACT_FP32};
  for (size_t i = 0; i < nl; i++) {
    weft_lane_info info;
    if (weft_fabric_lane_info(f, i, &info) != WEFT_OK) continue;
    /* Only the CPU is known to be fast; every other lane (a software Vulkan driver, a remote machine) gets
     * dimensions <= 256 and fewer random cases. */
    const int slow = strcmp(info.kind, "cpu") != 0;
    any_slow |= slow;
    any_contract |= info.contracts;
    printf("lane %zu: %s (%s, %s%s%s)%s\n", i, info.name, info.kind, info.device, info.details[0] ? ", " : "",
           info.details, slow ? " [sizes <= 256]" : "");
    if (info.failed) {
      printf("skip: lane %s has failed and left the fabric\n", info.name);
      continue;
    }
    if (info.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)) exact_lanes[nexact++] = (int)i;
    for (size_t ci = 0; ci < sizeof contracts / sizeof contracts[0]; ci++) {
      const weft_contract contract = contracts[ci];
      if (!(info.contracts & WEFT_CONTRACT_BIT(contract))) {
        printf("skip: lane %s does not honour the %s contract\n", info.name, weft_contract_str(contract));
        check_refused(f, (int)i, contract, info.name);
        continue;
      }
      weft_conf_stats s = {0, 0, 0};
      const double t = tu_now();
      weft_conf_run(f, (int)i, contract, slow, 0, seed, &s);
      printf("lane %-10s %-5s: %4ld cases, %9ld elements, %ld failed (%.2f s)\n", info.name, weft_contract_str(contract),
             s.cases, s.elements, s.failed, tu_now() - t);
    }
    for (int c = WEFT_CONTRACT_TF32; c < WEFT_CONTRACT_COUNT; c++)
      if (!(info.contracts & WEFT_CONTRACT_BIT(c))) check_refused(f, (int)i, (weft_contract)c, info.name);
  }
  /* The router must pick a lane that honours the contract; under exact any lane gives the same bits. */
  for (size_t ci = 0; ci < sizeof contracts / sizeof contracts[0]; ci++) {
    if (!(any_contract & WEFT_CONTRACT_BIT(contracts[ci]))) continue;
    weft_conf_stats s = {0, 0, 0};
    const double t = tu_now();
    weft_conf_run(f, WEFT_LANE_AUTO, contracts[ci], any_slow, 1, seed, &s);
    printf("router     %-5s: %4ld cases, %9ld elements, %ld failed (%.2f s)\n", weft_contract_str(contracts[ci]),
           s.cases, s.elements, s.failed, tu_now() - t);
  }
  if (nexact > 0) {
    if (nexact > 3) nexact = 3;
    exact_lanes[nexact++] = WEFT_LANE_AUTO;
    weft_conf_stats s = {0, 0, 0};
    const double t = tu_now();
    weft_conf_chain(f, exact_lanes, nexact, seed, &s);
    printf("chain      exact: %4ld cases, %9ld elements, %ld failed (%.2f s)\n", s.cases, s.elements, s.failed,
           tu_now() - t);
  }
  weft_fabric_close(f);
  return tu_finish("conformance", start);
}
