/* test_cuda_fault.c - a GPU fault is a status, not a crash. WEFT_CUDA_FAULT=trap:2 makes cuda:0's second
 * op launch a kernel that traps, which leaves the CUDA context unusable as an illegal memory access would.
 * Then: the read of that op's result computes it again on the CPU from the op that made it, both lanes of the GPU
 * leave the fabric (weft_lane_info.failed), ops pinned to them fail the same way, an op the router had
 * placed on the GPU is routed again and runs on a lane still up (the CPU; another GPU where there is one) with
 * the right result, later small ops the router places (WEFT_LANE_AUTO) run on the CPU, another GPU's lanes
 * either work or leave saying whose fault they follow (the driver stops every GPU of the process), a sync
 * then succeeds, and closing the fabric is clean.
 * Skips (exit 77, CTest's Skipped) without a GPU, after checking that weft says why the lanes are absent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tutil.h"
#include "weft.h"

int main(void) {
  double start = tu_now();
  setenv("WEFT_CUDA_FAULT", "trap:2", 1);
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.calibration = WEFT_CALIBRATION_OFF;
  desc.lanes = "cpu,cuda";
  weft_fabric *f = NULL;
  TU_CHECK(weft_fabric_open(&desc, &f) == WEFT_OK, "open: %s", weft_open_error());
  if (!f) return tu_finish("cuda_fault", start);
  size_t cu, cut = (size_t)-1, cpu = 0;
  if (weft_fabric_lane_find(f, "cuda:0", &cu) != WEFT_OK) {
    int said = 0;
    for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
      const char *name, *why;
      weft_fabric_absent_info(f, i, &name, &why);
      if (strncmp(name, "cuda", 4) == 0) said = why && strlen(why) > 10, tu_skip("%s is absent: %s", name, why);
    }
    TU_CHECK(said, "the CUDA lanes are missing from the fabric and from its absent list");
    weft_fabric_close(f);
    return tu_finish("cuda_fault", start);
  }
  weft_fabric_lane_find(f, "cpu", &cpu);
  int has_tensor = weft_fabric_lane_find(f, "cuda:0.tensor", &cut) == WEFT_OK;

  float x[256], y[256];
  for (int i = 0; i < 256; i++) x[i] = (float)(i % 17) - 8.0f;
  int64_t d[2] = {16, 16};
  weft_tensor *X, *Y, *Z;
  weft_tensor_create(f, 2, d, x, &X);
  weft_tensor_create(f, 2, d, NULL, &Y);
  weft_tensor_create(f, 2, d, NULL, &Z);
  weft_op_desc g = {WEFT_CONTRACT_EXACT, (int)cu};
  TU_CHECK(weft_op_relu(f, &g, X, Y) == WEFT_OK, "first op: %s", weft_fabric_last_error(f));
  TU_CHECK(weft_tensor_read(Y, y, 256) == WEFT_OK, "first read: %s", weft_fabric_last_error(f));
  TU_CHECK(y[0] == 0.0f && y[15] == 7.0f, "first op's result %g %g", y[0], y[15]);

  /* the second op traps */
  weft_status st = weft_op_scale(f, &g, 2.0f, Y, Z);
  TU_CHECK(st == WEFT_OK || st == WEFT_ERR_LANE_FAILED, "the trapping op: %s", weft_status_str(st));
  usleep(200000); /* let the trap happen, so the next call into the GPU sees it */

  /* An op the router sends to the GPU meets the failure there and is routed again: the caller gets the
   * right result from the CPU. 512^3 from host arrays goes to the GPU on the built-in priors. */
  {
    int64_t dm[2] = {512, 512};
    float *am = malloc(512 * 512 * sizeof *am), *cm = malloc(512 * 512 * sizeof *cm);
    for (int i = 0; i < 512 * 512; i++) am[i] = (float)(i % 7) - 3.0f;
    weft_tensor *Am, *Cm;
    weft_tensor_create(f, 2, dm, am, &Am);
    weft_tensor_create(f, 2, dm, NULL, &Cm);
    weft_op_desc au = WEFT_OP_DESC_INIT;
    weft_route_query q = {WEFT_OP_MATMUL, WEFT_CONTRACT_EXACT, 1, 512, 512, 512, 0, 0};
    weft_route_explanation e;
    TU_CHECK(weft_route_explain(f, &q, &e) == WEFT_OK && e.chosen == (int)cu,
             "the router would send 512^3 to cuda:0 (it chose lane %d)", e.chosen);
    st = weft_op_matmul(f, &au, Am, 0, Am, 0, Cm);
    TU_CHECK(st == WEFT_OK, "auto-routed matmul meeting the failed GPU: %s: %s", weft_status_str(st),
             weft_fabric_last_error(f));
    const int ran = weft_fabric_last_lane(f);
    weft_lane_info ri;
    const int ran_ok = ran >= 0 && weft_fabric_lane_info(f, (size_t)ran, &ri) == WEFT_OK;
    TU_CHECK(ran_ok && !ri.failed && strncmp(ri.name, "cuda:0", 6) != 0 && (ran == (int)cpu || strncmp(ri.name, "cuda:", 5) == 0),
             "it ran on lane %d (%s), want the CPU or another GPU", ran, ran_ok ? ri.name : "?");
    if (st == WEFT_OK && weft_tensor_read(Cm, cm, 512 * 512) == WEFT_OK) {
      int wrong = 0;
      for (int i = 0; i < 512 && !wrong; i += 37)
        for (int j = 0; j < 512; j += 41) {
          float acc = 0.0f;
          for (int k = 0; k < 512; k++) acc = acc + am[i * 512 + k] * am[k * 512 + j];
          wrong += cm[i * 512 + j] != acc;
        }
      TU_CHECK(wrong == 0, "the re-routed matmul is wrong");
    }
    weft_tensor_destroy(Am), weft_tensor_destroy(Cm);
    free(am), free(cm);
  }

  /* the trapped op's result lived only on the GPU: reading it computes it again elsewhere */
  st = weft_tensor_read(Z, y, 256);
  TU_STATUS(st, WEFT_OK, "reading the result of a trapped kernel");
  int wrong_z = 0;
  for (int i = 0; i < 256; i++) wrong_z += y[i] != 2.0f * (x[i] > 0 ? x[i] : 0.0f);
  TU_CHECK(wrong_z == 0, "it holds 2 relu(x), computed again on the CPU (%d wrong)", wrong_z);
  weft_lane_info info;
  weft_fabric_lane_info(f, cu, &info);
  TU_CHECK(info.failed, "cuda:0 is marked failed");
  TU_STATUS(weft_op_relu(f, &g, X, Y), WEFT_ERR_LANE_FAILED, "an op pinned to the failed lane");
  if (has_tensor) {
    weft_op_desc t = {WEFT_CONTRACT_TF32, (int)cut};
    st = weft_op_matmul(f, &t, X, 0, X, 0, Z);
    if (st == WEFT_OK) st = weft_tensor_read(Z, y, 256);
    TU_STATUS(st, WEFT_ERR_LANE_FAILED, "the same GPU's tensor lane");
    weft_fabric_lane_info(f, cut, &info);
    TU_CHECK(info.failed, "cuda:0.tensor is marked failed");
  }
  /* The router leaves failed lanes out: the fabric goes on, on the CPU. X still has its host copy. */
  weft_op_desc a = WEFT_OP_DESC_INIT;
  weft_tensor *W;
  weft_tensor_create(f, 2, d, NULL, &W);
  TU_CHECK(weft_op_scale(f, &a, 3.0f, X, W) == WEFT_OK, "auto-routed op after the failure: %s", weft_fabric_last_error(f));
  TU_CHECK(weft_fabric_last_lane(f) == (int)cpu, "the op ran on lane %d, not the CPU", weft_fabric_last_lane(f));
  TU_CHECK(weft_tensor_read(W, y, 256) == WEFT_OK, "read: %s", weft_fabric_last_error(f));
  int bad = 0;
  for (int i = 0; i < 256; i++) bad += y[i] != 3.0f * x[i];
  TU_CHECK(bad == 0, "%d wrong elements after the failure", bad);
  /* Another GPU: the driver stops every GPU of the process once one has faulted (on two H200s, the other's
   * next allocation failed with cuda:0's error). Each of its lanes either still works or, at its next op,
   * leaves the fabric saying whose fault it follows. */
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, i, &li);
    if (strncmp(li.name, "cuda:", 5) != 0 || strncmp(li.name, "cuda:0", 6) == 0) continue;
    const int tensor = strstr(li.name, ".tensor") != NULL;
    weft_op_desc there = {tensor ? WEFT_CONTRACT_TF32 : WEFT_CONTRACT_EXACT, (int)i};
    st = tensor ? weft_op_matmul(f, &there, X, 0, X, 0, Z) : weft_op_relu(f, &there, X, Z);
    if (st == WEFT_OK) st = weft_tensor_read(Z, y, 256);
    const char *why = weft_fabric_last_error(f);
    TU_CHECK(st == WEFT_OK || (st == WEFT_ERR_LANE_FAILED && strstr(why, "after cuda:0's fault")),
             "%s after cuda:0's fault: %s: %s", li.name, weft_status_str(st), why);
    printf("%s after cuda:0's fault: %s\n", li.name, st == WEFT_OK ? "still up" : why);
  }
  st = weft_fabric_sync(f);
  TU_CHECK(st == WEFT_OK, "sync skips failed lanes: %s: %s", weft_status_str(st), weft_fabric_last_error(f));
  weft_fabric_close(f);
  return tu_finish("cuda_fault", start);
}
