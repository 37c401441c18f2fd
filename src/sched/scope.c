/* scope.c - what one more op costs inside a scope. A lane that batches a scope's ops into one submission
 * (scope_begin/scope_end: a CUDA graph, a Vulkan command buffer) pays its full fixed cost - submit, wait -
 * once per scope, not once per op; the router, deciding op by op inside a scope, must weigh that smaller
 * cost, or it sends small ops away from the lane that holds their data to save a dispatch the scope never
 * pays. Measured once, at the fabric's first scope, on each such lane: tiny adds on resident buffers, one
 * in a scope and then WEFT_SCOPE_PROBE_OPS in a scope, the difference per op (the best of a few tries).
 * It makes tensors and runs ops on the core's lanes, so it is the scheduler's (measure.h), as is the public
 * weft_scope_begin that asks for it before the core opens the lanes' scopes. */
#include <string.h>

#include "../core/optable.h"
#include "measure.h"

#define WEFT_SCOPE_PROBE_OPS 32
#define WEFT_SCOPE_PROBE_TRIES 3
#define WEFT_SCOPE_PROBE_N 64 /* elements an add touches */

/* Seconds for `n` adds recorded in one of the lane's scopes and submitted; < 0 on a failure. */
static double scoped_adds(weft_fabric *f, weft_lane_slot *s, weft_op *op, int n) {
  const double t0 = weft_fabric_now(f);
  if (s->vt.scope_begin(s->self) != WEFT_OK) return -1;
  weft_status st = WEFT_OK;
  for (int i = 0; i < n && st == WEFT_OK; i++) st = s->vt.run(s->self, op);
  if (s->vt.scope_end(s->self) != WEFT_OK || st != WEFT_OK) return -1;
  return weft_fabric_now(f) - t0;
}

static void measure_lane(weft_fabric *f, int lane) {
  weft_lane_slot *s = &f->lanes[lane];
  const int64_t dims[1] = {WEFT_SCOPE_PROBE_N};
  float host[WEFT_SCOPE_PROBE_N];
  for (int i = 0; i < WEFT_SCOPE_PROBE_N; i++) host[i] = (float)i;
  weft_tensor *x = NULL, *y = NULL;
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_ADD, op.contract = WEFT_CONTRACT_EXACT, op.rows = 1, op.cols = WEFT_SCOPE_PROBE_N;
  if (weft_tensor_create(f, 1, dims, host, &x) != WEFT_OK || weft_tensor_create(f, 1, dims, host, &y) != WEFT_OK ||
      weft_tensor_make_valid(x, lane) != WEFT_OK || weft_tensor_make_valid(y, lane) != WEFT_OK ||
      weft_tensor_lane_buffer(x, lane, &op.in[0]) != WEFT_OK || weft_tensor_lane_buffer(y, lane, &op.in[1]) != WEFT_OK)
    goto done;
  op.out[0] = op.in[1]; /* y = x + y, in place: the lanes all take it (hardening #21, item 3) */
  double best = -1;
  for (int t = 0; t < WEFT_SCOPE_PROBE_TRIES; t++) {
    const double one = scoped_adds(f, s, &op, 1), many = scoped_adds(f, s, &op, WEFT_SCOPE_PROBE_OPS);
    if (one < 0 || many < 0) goto done;
    const double per = (many - one) / (WEFT_SCOPE_PROBE_OPS - 1);
    if (per > 0 && (best < 0 || per < best)) best = per;
  }
  if (best > 0) s->scope_alpha = best;
done:
  /* the probe wrote y on the lane behind the core's back: it is scratch, dropped with its copies */
  weft_tensor_destroy(x);
  weft_tensor_destroy(y);
  f->err[0] = '\0';
}

void weft_cost_measure_scopes(weft_fabric *f) {
  if (f->scope_measured || f->calibrating) return;
  f->scope_measured = 1;
  int eligible = 0;
  for (size_t i = 0; i < f->nlanes; i++) eligible += !f->lanes[i].failed;
  if (eligible < 2) return; /* nothing to choose between */
  for (size_t i = 0; i < f->nlanes; i++) {
    weft_lane_slot *s = &f->lanes[i];
    if (s->failed || !s->vt.scope_begin || !s->vt.scope_end || (s->desc.flags & WEFT_LANE_HOST_MEMORY) ||
        !(weft_lane_ops(&s->desc) & WEFT_OP_BIT(WEFT_OP_ADD)))
      continue;
    measure_lane(f, (int)i);
  }
}

weft_status weft_scope_begin(weft_fabric *f) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (f->in_scope) return weft_fail(f, WEFT_ERR_STATE, "weft_scope_begin: a scope is already open (scopes do not nest)");
  f->err[0] = '\0';
  if (!f->scope_measured) weft_cost_measure_scopes(f); /* once: what an op costs inside a scope, per lane */
  return weft_core_scope_begin(f);
}
