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
  /* Microsecond points are at the mercy of every interrupt: give them more runs (up to 30 ms of them) so
   * the median is a median of something. */
  if (out->warmup_s > 0 && out->warmup_s * repeats < 0.03) {
    double more = 0.03 / out->warmup_s;
    repeats = more > WEFT_CLI_MAX_REPEATS ? WEFT_CLI_MAX_REPEATS : (int)more;
    if (repeats < d->repeats) repeats = d->repeats;
  }
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

weft_status weft_cli_measure_matmul_pair(weft_fabric *f, const weft_cli_point_desc *d, int other_lane, const float *a,
                                         const float *b, float *out_c, weft_cli_point *out, weft_cli_point *out_other) {
  if (out) memset(out, 0, sizeof *out);
  if (out_other) memset(out_other, 0, sizeof *out_other);
  if (!f || !d || !a || !b || !out_c || !out || !out_other || d->m < 1 || d->n < 1 || d->k < 1 || d->repeats < 1 ||
      d->repeats > WEFT_CLI_MAX_REPEATS)
    return WEFT_ERR_INVALID_ARGUMENT;
  weft_op_desc op[2] = {WEFT_OP_DESC_INIT, WEFT_OP_DESC_INIT};
  op[0].contract = op[1].contract = d->contract;
  op[0].lane = d->lane;
  op[1].lane = other_lane;
  int64_t da[2] = {d->m, d->k}, db[2] = {d->k, d->n}, dc[2] = {d->m, d->n};
  weft_tensor *ta = NULL, *tb = NULL, *tc = NULL;
  weft_status st = weft_tensor_create(f, 2, da, NULL, &ta);
  if (st == WEFT_OK) st = weft_tensor_create(f, 2, db, NULL, &tb);
  if (st == WEFT_OK) st = weft_tensor_create(f, 2, dc, NULL, &tc);
  double start = weft_cli_now();
  for (int w = 0; w < 2 && st == WEFT_OK; w++) st = run_once(f, &op[w], ta, tb, tc, a, b, out_c, d);
  /* The repeats are planned from a second, timed warm-up pair: the first pays one-time costs (a lane's
   * first use of these shapes, pipelines, registration) and would leave a microsecond point one run. */
  double t1 = weft_cli_now();
  for (int w = 0; w < 2 && st == WEFT_OK; w++) st = run_once(f, &op[w], ta, tb, tc, a, b, out_c, d);
  double warm = (weft_cli_now() - t1) / 2;
  int repeats = d->repeats;
  if (warm > 0 && warm * repeats < 0.03) {
    double more = 0.03 / warm;
    repeats = more > WEFT_CLI_MAX_REPEATS ? WEFT_CLI_MAX_REPEATS : (int)more;
    if (repeats < d->repeats) repeats = d->repeats;
  }
  if (d->max_seconds > 0 && warm > 0) {
    double fit = (0.9 * d->max_seconds - 2 * warm) / (2 * warm);
    if (fit < repeats) repeats = fit < 1 ? 1 : (int)fit;
  }
  static double times[2][WEFT_CLI_MAX_REPEATS];
  int done = 0;
  /* Alternating runs: whatever else the machine does hits both sides alike, so their ratio is fair. */
  while (st == WEFT_OK && done < repeats) {
    for (int w = 0; w < 2 && st == WEFT_OK; w++) {
      double t0 = weft_cli_now();
      st = run_once(f, &op[w], ta, tb, tc, a, b, out_c, d);
      times[w][done] = weft_cli_now() - t0;
      if (w == 0) out->lane = weft_fabric_last_lane(f);
    }
    done++;
  }
  /* the last run left the other lane's result in out_c: run the first once more so out_c is its own */
  if (st == WEFT_OK) st = run_once(f, &op[0], ta, tb, tc, a, b, out_c, d);
  double elapsed = weft_cli_now() - start;
  weft_tensor_destroy(ta);
  weft_tensor_destroy(tb);
  weft_tensor_destroy(tc);
  if (st != WEFT_OK) return st;
  weft_cli_point *pts[2] = {out, out_other};
  for (int w = 0; w < 2; w++) {
    pts[w]->repeats = done;
    pts[w]->median_s = weft_cli_median(times[w], (size_t)done);
    pts[w]->min_s = times[w][0];
    pts[w]->warmup_s = warm;
    pts[w]->elapsed_s = elapsed;
  }
  out_other->lane = other_lane;
  return WEFT_OK;
}
