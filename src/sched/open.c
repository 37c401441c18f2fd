/* open.c - the public fabric: weft_fabric_open and _close, which assemble a fabric from the core's lanes
 * (core/fabric.c), the cost model's cache (cost/cache.c) and the scheduler's state (routing memos, split
 * tracks, measuring in the background, the recovery hooks the core calls), and the router's explanations
 * (weft_route_explain, weft_route_last). The scheduler's layer: the top of docs/DESIGN.md's "Layers". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fpenv.h"
#include "../core/hostcopy.h"
#include "measure.h"
#include "route.h"
#include "sched.h"
#include "split.h"

static _Thread_local char open_error[WEFT_ERR_LEN];

const char *weft_open_error(void) { return open_error; }

static weft_status fabric_open(const weft_fabric_desc *desc, weft_fabric **out_fabric);

/* Lanes start threads when they open (the CPU pool, a driver's own: lavapipe's), and a thread starts with
 * its creator's floating-point environment; so the lanes open, and calibrate, under the clean one
 * (fpenv.h), and the caller's is put back after. */
weft_status weft_fabric_open(const weft_fabric_desc *desc, weft_fabric **out_fabric) {
  weft_fpenv env;
  weft_fpenv_enter(&env);
  weft_status st = fabric_open(desc, out_fabric);
  weft_fpenv_leave(&env);
  return st;
}

static weft_status fabric_open(const weft_fabric_desc *desc, weft_fabric **out_fabric) {
  open_error[0] = '\0';
  if (!out_fabric) {
    snprintf(open_error, sizeof open_error, "weft_fabric_open: out_fabric is NULL");
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  *out_fabric = NULL;
  weft_fabric_desc defaults = WEFT_FABRIC_DESC_INIT;
  if (!desc) desc = &defaults;
  if (desc->cpu_threads < 0) {
    snprintf(open_error, sizeof open_error, "weft_fabric_open: cpu_threads is %d; use 0 for all cores or a count",
             desc->cpu_threads);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  weft_fabric *f = calloc(1, sizeof *f);
  if (!f) {
    snprintf(open_error, sizeof open_error, "weft_fabric_open: out of host memory for the fabric");
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  weft_status st = weft_core_init(f, desc, open_error, sizeof open_error);
  if (st != WEFT_OK) {
    free(f);
    return st;
  }
  /* the core finds lost values; computing them again runs ops, which is ours */
  f->recover = weft_sched_recover;
  f->recover_all = weft_sched_recover_all;
  weft_core_probe(f);
  char why[200];
  if (weft_hostcopy_env_problem(why, sizeof why)) weft_note(f, 0, "weft: %s", why); /* told, not ignored */
  if (f->nlanes > 0 && f->desc.calibration == WEFT_CALIBRATION_AUTO) weft_cost_cache_load(f);
  if (f->nlanes > 0 && f->desc.calibration == WEFT_CALIBRATION_FORCE) {
    weft_fabric_calibrate(f);
    f->err[0] = '\0';
  }
  if (f->nlanes == 0) {
    snprintf(open_error, sizeof open_error, "weft_fabric_open: no lane could be opened%s%s",
             f->lanes_filter ? " with the lane filter " : "", f->lanes_filter ? f->lanes_filter : "");
    weft_fabric_close(f);
    return WEFT_ERR_NOT_FOUND;
  }
  *out_fabric = f;
  return WEFT_OK;
}

void weft_fabric_close(weft_fabric *f) {
  if (!f) return;
  weft_cost_background_finish(f, 1); /* lanes it finished are in the cache already */
  weft_core_release(f);
  weft_route_memo_free(f);
  weft_split_free(f);
  free(f);
}

static weft_status explain(weft_fabric *f, const weft_route_query *q, weft_route_explanation *out, int xfer);

weft_status weft_route_explain(weft_fabric *f, const weft_route_query *q, weft_route_explanation *out) {
  return explain(f, q, out, WEFT_XFER_STAGED);
}

weft_status weft_route_explain_registered(weft_fabric *f, const weft_route_query *q, weft_route_explanation *out) {
  return explain(f, q, out, WEFT_XFER_PINNED);
}

static weft_status explain(weft_fabric *f, const weft_route_query *q, weft_route_explanation *out, int xfer) {
  if (out) memset(out, 0, sizeof *out);
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!q || !out) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_route_explain: query or out is NULL");
  if ((unsigned)q->op >= WEFT_OP_COUNT || (unsigned)q->contract >= WEFT_CONTRACT_COUNT)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_route_explain: op %d or contract %d out of range", (int)q->op,
                     (int)q->contract);
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = q->op;
  op.contract = q->contract;
  if (q->op == WEFT_OP_MATMUL || q->op == WEFT_OP_MATMUL_ACC) {
    if (q->batch < 0 || q->m < 1 || q->n < 1 || q->k < 1)
      return weft_fail(f, WEFT_ERR_SHAPE, "weft_route_explain: matmul needs batch >= 0 and m, n, k >= 1");
    op.batch = q->batch, op.m = q->m, op.n = q->n, op.k = q->k;
  } else {
    if (q->rows < 1 || q->cols < 1)
      return weft_fail(f, WEFT_ERR_SHAPE, "weft_route_explain: %s needs rows and cols >= 1", weft_op_kind_str(q->op));
    op.rows = q->rows, op.cols = q->cols;
    op.inv_rows = weft_fpenv_recip(q->rows);
  }
  f->explain_xfer = xfer;
  int lane = weft_route_pick(f, &op, NULL, 0, f->explain);
  f->explain_xfer = WEFT_XFER_STAGED;
  out->op = op.kind;
  out->contract = op.contract;
  weft_cost_op_work(&op, &out->work);
  out->chosen = lane;
  out->nlanes = f->nlanes;
  out->lanes = f->explain;
  return WEFT_OK;
}

weft_status weft_route_last(weft_fabric *f, weft_route_explanation *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!out) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_route_last: out_explanation is NULL");
  if (!f->last_route.lanes) return weft_fail(f, WEFT_ERR_STATE, "weft_route_last: no op has been routed yet");
  *out = f->last_route;
  return WEFT_OK;
}

