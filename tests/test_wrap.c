/* test_wrap.c - tensors over the caller's memory (weft_tensor_wrap): ops on host lanes write it in place,
 * reads and writes with the same pointer copy nothing yet keep every lane's copy honest, and destroying the
 * tensor leaves the memory to its owner. Run on every lane present. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference.h"
#include "tutil.h"
#include "weft.h"


enum { M = 19, K = 23, N = 17 };

static void reference(const float *a, const float *b, float *c) {
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_MATMUL, op.batch = 1, op.m = M, op.n = N, op.k = K;
  op.in[0] = (void *)a, op.in[1] = (void *)b, op.out[0] = c;
  weft_reference_run(&op);
}

int main(void) {
  double start = tu_now();
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f;
  if (weft_fabric_open(&d, &f) != WEFT_OK) return printf("open: %s\n", weft_open_error()), 1;
  float *ha = malloc(sizeof(float) * M * K), *hb = malloc(sizeof(float) * K * N);
  float *hc = malloc(sizeof(float) * M * N), *want = malloc(sizeof(float) * M * N);
  for (int i = 0; i < M * K; i++) ha[i] = (float)((i * 37) % 101) * 0.01f - 0.5f;
  for (int i = 0; i < K * N; i++) hb[i] = (float)((i * 53) % 97) * 0.01f - 0.5f;
  for (size_t l = 0; l < weft_fabric_lane_count(f); l++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, l, &li);
    if (!(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) {
      printf("skip %s: no exact contract\n", li.name);
      continue;
    }
    weft_tensor *a, *b, *c;
    int64_t da[2] = {M, K}, db[2] = {K, N}, dc[2] = {M, N};
    TU_CHECK(weft_tensor_wrap(f, 2, da, ha, &a) == WEFT_OK && weft_tensor_wrap(f, 2, db, hb, &b) == WEFT_OK &&
              weft_tensor_wrap(f, 2, dc, hc, &c) == WEFT_OK,
          "wrap: %s", weft_fabric_last_error(f));
    memset(hc, 0xff, sizeof(float) * M * N);
    weft_tensor_write(c, hc, (size_t)(M * N));
    weft_op_desc od = {WEFT_CONTRACT_EXACT, (int)l};
    TU_CHECK(weft_op_matmul(f, &od, a, 0, b, 0, c) == WEFT_OK, "%s matmul: %s", li.name, weft_fabric_last_error(f));
    TU_CHECK(weft_tensor_read(c, hc, (size_t)(M * N)) == WEFT_OK, "%s read in place", li.name);
    reference(ha, hb, want);
    TU_CHECK(memcmp(hc, want, sizeof(float) * M * N) == 0, "%s: the caller's memory holds the reference's bits", li.name);
    /* the caller changes a and says so: the next op sees the new values on every lane */
    ha[0] += 1.0f;
    TU_CHECK(weft_tensor_write(a, ha, (size_t)(M * K)) == WEFT_OK, "%s write in place", li.name);
    TU_CHECK(strcmp(weft_tensor_location(a), "host") == 0, "%s: a lane's stale copy is dropped: %s", li.name,
          weft_tensor_location(a));
    weft_op_matmul(f, &od, a, 0, b, 0, c);
    weft_tensor_read(c, hc, (size_t)(M * N));
    reference(ha, hb, want);
    TU_CHECK(memcmp(hc, want, sizeof(float) * M * N) == 0, "%s: the changed input was used", li.name);
    weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c);
    ha[1] = 3.0f; /* still the caller's: writing it after destroy is fine (ASan would say otherwise) */
  }
  weft_tensor *t;
  int64_t bad[2] = {0, 4};
  TU_CHECK(weft_tensor_wrap(f, 2, (int64_t[]){2, 2}, NULL, &t) == WEFT_ERR_INVALID_ARGUMENT && !t, "NULL data refused");
  TU_CHECK(weft_tensor_wrap(f, 2, bad, ha, &t) == WEFT_ERR_SHAPE && !t, "shape rules apply");
  /* Device memory of another library (weft_tensor_wrap_lane, weft_tensor_lane_address): lanes that cannot take
   * or hand out theirs say so, by name; the cuda lanes can (python/tests/test_dlpack.py, with PyTorch). */
  size_t nl = weft_fabric_lane_count(f);
  for (size_t i = 0; i < nl; i++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, i, &li);
    if (strncmp(li.name, "cuda:", 5) == 0) continue;
    t = (weft_tensor *)1;
    TU_CHECK(weft_tensor_wrap_lane(f, i, 2, (int64_t[]){2, 2}, ha, &t) == WEFT_ERR_UNSUPPORTED && !t &&
                 strstr(weft_fabric_last_error(f), li.name),
             "%s refuses another library's memory: %s", li.name, weft_fabric_last_error(f));
    weft_tensor *u = NULL;
    void *addr = (void *)1;
    TU_CHECK(weft_tensor_create(f, 1, (int64_t[]){4}, NULL, &u) == WEFT_OK, "create");
    TU_CHECK(weft_tensor_lane_address(u, i, &addr) == WEFT_ERR_UNSUPPORTED && !addr, "%s hands out no address: %s",
             li.name, weft_fabric_last_error(f));
    weft_tensor_destroy(u);
  }
  TU_CHECK(weft_tensor_wrap_lane(f, nl, 1, (int64_t[]){4}, ha, &t) == WEFT_ERR_NOT_FOUND, "a lane that does not exist");
  weft_fabric_close(f);
  free(ha), free(hb), free(hc), free(want);
  return tu_finish("wrap", start);
}
