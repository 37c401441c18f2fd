/* cli_measure.c - the timed measurement of one op point (host data in, op, host result out), shared by
 * `weft bench` and the commands that will fit costs to the same figures. */
#include <string.h>

#include "cli.h"

/* One run as a caller holding host data sees it: both inputs written, the op, the result read back. */
static weft_status run_once(weft_fabric *f, const weft_op_desc *op, weft_tensor *ta, weft_tensor *tb,
                            weft_tensor *tc, const float *a, const float *b, float *c, const weft_cli_point_desc *d) {
  weft_status st = weft_tensor_write(ta, a, (size_t)(d->m * d->k));
  if (st == WEFT_OK) st = weft_tensor_write(tb, b, (size_t)(d->k * d->n));
  if (st == WEFT_OK) st = weft_op_matmul(f, op, ta, 0, tb, 0, tc);
  if (st == WEFT_OK) st = weft_tensor_read(tc, c, (size_t)(d->m * d->n));
  return st;
}

weft_status weft_cli_measure_matmul(weft_fabric *f, const weft_cli_point_desc *d, const float *a, const float *b,
                                    float *out_c, weft_cli_point *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!f || !d || !a || !b || !out_c || !out || d->m < 1 || d->n < 1 || d->k < 1 || d->repeats < 1 ||
      d->repeats > WEFT_CLI_MAX_REPEATS)
    return WEFT_ERR_INVALID_ARGUMENT;
  weft_op_desc op = WEFT_OP_DESC_INIT;
  op.contract = d->contract;
  op.lane = d->lane;
  int64_t da[2] = {d->m, d->k}, db[2] = {d->k, d->n}, dc[2] = {d->m, d->n};
  weft_tensor *ta = NULL, *tb = NULL, *tc = NULL;
  weft_status st = weft_tensor_create(f, 2, da, NULL, &ta);
  if (st == WEFT_OK) st = weft_tensor_create(f, 2, db, NULL, &tb);
  if (st == WEFT_OK) st = weft_tensor_create(f, 2, dc, NULL, &tc);

  double start = weft_cli_now();
  /* The warm-up pays one-time costs (first allocation on the lane, pipeline creation, page faults) that
   * are not the steady cost of the op. */
  if (st == WEFT_OK) st = run_once(f, &op, ta, tb, tc, a, b, out_c, d);
  out->warmup_s = weft_cli_now() - start;
  int repeats = d->repeats;
  if (d->max_seconds > 0 && out->warmup_s > 0) {
    /* A tenth of the budget is kept as margin: runs vary, and a point over budget stops bench at that size. */
    double fit = (0.9 * d->max_seconds - out->warmup_s) / out->warmup_s;
    if (fit < repeats) repeats = fit < 1 ? 1 : (int)fit;
  }
  double times[WEFT_CLI_MAX_REPEATS];
  int done = 0;
  while (st == WEFT_OK && done < repeats) {
    double t0 = weft_cli_now();
    st = run_once(f, &op, ta, tb, tc, a, b, out_c, d);
    times[done++] = weft_cli_now() - t0;
  }
  out->elapsed_s = weft_cli_now() - start;
  out->lane = weft_fabric_last_lane(f);
  weft_tensor_destroy(ta);
  weft_tensor_destroy(tb);
  weft_tensor_destroy(tc);
  if (st != WEFT_OK) return st;
  out->repeats = done;
  out->median_s = weft_cli_median(times, (size_t)done);
  out->min_s = times[0]; /* sorted by the median */
  return WEFT_OK;
}
