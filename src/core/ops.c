/* ops.c - the public ops: validate every argument at the boundary, resolve the op to a lane and its
 * buffers, run it, and record where the result now lives. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../cost/cost.h"
#include "../sched/route.h"
#include "../sched/split.h"
#include "fpenv.h"
#include "internal.h"

static weft_status check_desc(weft_fabric *f, const weft_op_desc *desc, const char *fn, weft_op *op) {
  weft_op_desc d = WEFT_OP_DESC_INIT;
  if (desc) d = *desc;
  if ((unsigned)d.contract >= WEFT_CONTRACT_COUNT)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: contract %d is not a weft_contract", fn, (int)d.contract);
  if (d.lane != WEFT_LANE_AUTO && (d.lane < 0 || (size_t)d.lane >= f->nlanes))
    return weft_fail(f, WEFT_ERR_NOT_FOUND, "%s: lane %d does not exist (the fabric has %zu lanes)", fn, d.lane,
                     f->nlanes);
  op->contract = d.contract;
  return WEFT_OK;
}

/* Rows and columns of a tensor seen as a matrix whose rows are every leading dimension. */
static void as_rows_cols(const weft_tensor *t, int64_t *rows, int64_t *cols) {
  *cols = t->dims[t->ndim - 1];
  *rows = *cols ? (int64_t)(t->numel / (size_t)*cols) : 0;
}

static int same_shape(const weft_tensor *a, const weft_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->dims[d] != b->dims[d]) return 0;
  return 1;
}

static const char *shape_str(const weft_tensor *t, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < t->ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? "," : "", (long long)t->dims[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

/* 1 when two different tensors' host memory overlaps (weft_tensor_wrap of the same or overlapping memory). */
static int overlaps(const weft_tensor *a, const weft_tensor *b) {
  if (a == b || !a->numel || !b->numel || (!a->borrowed && !b->borrowed)) return 0;
  const uintptr_t a0 = (uintptr_t)a->host, a1 = a0 + a->numel * sizeof(float);
  const uintptr_t b0 = (uintptr_t)b->host, b1 = b0 + b->numel * sizeof(float);
  return a0 < b1 && b0 < a1;
}

/* An op may write one of its inputs only when that output IS the input (the same tensor: the elementwise
 * ops allow it, the others refuse it by name). Different tensors over overlapping memory - two wraps of one
 * buffer, or of parts of it - are refused: each keeps copies of its own on the lanes, so the op would read
 * values it is overwriting on one lane and not on another. */
static weft_status refuse_overlap(weft_fabric *f, const weft_op *op, weft_tensor **in, const char *const *in_name,
                                  int nin, weft_tensor **out, const char *const *out_name, int nout) {
  for (int o = 0; o < nout; o++) {
    if (!out[o]) continue;
    for (int i = 0; i < nin; i++)
      if (overlaps(out[o], in[i]))
        return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT,
                         "weft_op_%s: %s and %s are different tensors over overlapping memory (two wraps of one "
                         "buffer); pass the same tensor for an in-place op, or give the result memory of its own",
                         weft_op_kind_str(op->kind), out_name[o], in_name[i]);
    for (int p = 0; p < o; p++)
      if (out[p] && overlaps(out[o], out[p]))
        return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT,
                         "weft_op_%s: %s and %s are different tensors over overlapping memory; give each output "
                         "memory of its own", weft_op_kind_str(op->kind), out_name[o], out_name[p]);
  }
  return WEFT_OK;
}

/* Host ops predicted to take this long always go to the host queue; this long, when another lane is busy. */
#define WEFT_QUEUE_LONG_S 1e-3
#define WEFT_QUEUE_OVERLAP_S 50e-6

/* An input whose producer (a queued op) failed fails the op that reads it, with that op's message; axpy
 * reads its output too. Inputs still being made are checked once they are waited for, or, when this op is
 * queued behind them, when it is drained (hostq.c). */
static weft_status inputs_failed(const weft_op *op, weft_tensor **in, int nin, weft_tensor **out) {
  weft_status st = WEFT_OK;
  for (int i = 0; i < nin && st == WEFT_OK; i++) st = weft_tensor_failure(in[i]);
  if (st == WEFT_OK && op->kind == WEFT_OP_AXPY) st = weft_tensor_failure(out[0]);
  return st;
}

/* Moves inputs to the chosen lane, runs (or queues) the op, and marks outputs as living there. */
static weft_status dispatch_once(weft_fabric *f, const weft_op_desc *desc, weft_op *op, weft_tensor **in, int nin,
                                 weft_tensor **out, int nout, const double *now) {
  int pinned = desc ? desc->lane : WEFT_LANE_AUTO;
  int lane;
  double work, t0 = 0;
  uint64_t ticket = 0;
  weft_status st = inputs_failed(op, in, nin, out);
  if (st != WEFT_OK) return st;
  const weft_cost_class cls = weft_cost_op_work(op, &work);
  if (pinned != WEFT_LANE_AUTO) {
    weft_lane_slot *s = &f->lanes[pinned];
    if (s->failed)
      return weft_fail(f, WEFT_ERR_LANE_FAILED, "%s: lane %s %s", weft_op_kind_str(op->kind), s->desc.name,
                       s->down_why[0] ? s->down_why : "is down");
    if (!(s->desc.contracts & WEFT_CONTRACT_BIT(op->contract)))
      return weft_fail(f, WEFT_ERR_UNSUPPORTED, "%s: lane %s does not honour the '%s' contract",
                       weft_op_kind_str(op->kind), s->desc.name, weft_contract_str(op->contract));
    if (s->vt.supports) {
      weft_status st = s->vt.supports(s->self, op);
      if (st != WEFT_OK) return st;
    }
    lane = pinned;
  } else {
    /* axpy also reads its output: its residency counts like an input's */
    weft_tensor *route_in[3] = {nin > 0 ? in[0] : NULL, nin > 1 ? in[1] : NULL, NULL};
    int nroute = nin;
    if (op->kind == WEFT_OP_AXPY) route_in[nroute++] = out[0];
    t0 = now ? *now : weft_fabric_now(f); /* one clock read serves the route and the op's timing */
    if (t0 >= f->revive_at || atomic_load_explicit(&f->revive_poke, memory_order_relaxed)) weft_lanes_revive(f, 0);
    lane = weft_route_decide(f, op, cls, work, t0, route_in, nroute);
    if (lane < 0) return WEFT_ERR_UNSUPPORTED;
  }
  /* every input on the host: the caller works on host data and will want the result there too */
  int home = 1;
  for (int i = 0; i < nin; i++) home &= in[i]->host_valid;
  /* last input first: a matmul's b goes over before a, so a device may start on a's first rows while the
   * rest of a is still in flight */
  for (int i = nin - 1; i >= 0; i--) {
    if ((st = weft_tensor_make_valid(in[i], lane)) != WEFT_OK) return st;
    if ((st = weft_tensor_lane_buffer(in[i], lane, &op->in[i])) != WEFT_OK) return st;
  }
  for (int o = 0; o < nout; o++) {
    op->out[o] = NULL;
    if (!out[o]) continue;
    /* AXPY reads its output; an output that is also an input is already current there. */
    if (op->kind == WEFT_OP_AXPY && (st = weft_tensor_make_valid(out[o], lane)) != WEFT_OK) return st;
    if ((st = weft_tensor_lane_buffer(out[o], lane, &op->out[o])) != WEFT_OK) return st;
  }
  /* moving the inputs waited for what makes them: a failure there is known now */
  if (!weft_lane_is_host(f, lane) && (st = inputs_failed(op, in, nin, out)) != WEFT_OK) return st;
  weft_lane_slot *s = &f->lanes[lane];
  weft_cost_state *cs = weft_cost_state_of(s, cls, op->contract);
  if (pinned != WEFT_LANE_AUTO) t0 = now ? *now : weft_fabric_now(f);
  const int host = weft_lane_is_host(f, lane);
  for (int o = 0; o < nout; o++) {
    op->out_host[o] = NULL;
    if (!out[o]) continue;
    /* the host memory an op writes, or a device may stream a result into, must be free of other transfers */
    if (out[o]->dma_lane && (host || out[o]->dma_lane != lane + 1) && (st = weft_tensor_wait_dma(out[o])) != WEFT_OK)
      return st;
    if (!host && weft_lane_bit(out[o]->reg_mask | out[o]->cover_mask, (size_t)lane) && home)
      op->out_host[o] = out[o]->host;
  }
  const double pred = weft_cost_predict(cs, work);
  /* ops predicted under 10 us are sampled one in eight: at that size the bookkeeping would cost a
   * noticeable share of the op, and a median over a sample is as robust as over them all */
  const int observe = host && !f->calibrating && ((++s->observe_tick & 7) == 0 || pred >= 10e-6);
  /* A host op goes to the queue (it returns at once) when the queue already has work, which it must
   * follow; when it is long enough that a hand-over (a few microseconds) is noise; or when another lane is
   * working and the caller may have more to give it meanwhile. Tiny ops run here: no hand-over to pay. */
  if (host && !f->calibrating &&
      (!weft_hostq_idle(f) || pred >= WEFT_QUEUE_LONG_S || (f->busy_max > t0 && pred >= WEFT_QUEUE_OVERLAP_S))) {
    ticket = weft_hostq_submit(f, lane, op, cls, work, observe);
    if (ticket) {
      weft_hostq_note_inputs(f, ticket, in, nin);
      if (op->kind == WEFT_OP_AXPY) weft_hostq_note_inputs(f, ticket, out, 1);
      for (int i = 0; i < nin; i++) in[i]->q_read = ticket;
      for (int o = 0; o < nout; o++)
        if (out[o]) out[o]->q_write = ticket;
      s->stats.ops[op->kind]++;
      s->busy_until = (s->busy_until > t0 ? s->busy_until : t0) + pred;
      if (s->busy_until > f->busy_max) f->busy_max = s->busy_until;
      goto written;
    }
    /* no queue (no thread could start): run it here */
  }
  if (host && !weft_hostq_idle(f)) {
    if ((st = weft_hostq_finish(f)) != WEFT_OK) return st;
    if ((st = inputs_failed(op, in, nin, out)) != WEFT_OK) return st; /* what the queue made is known now */
  }
  st = s->vt.run(s->self, op);
  double t1 = weft_fabric_now(f);
  if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, lane);
  if (st != WEFT_OK) return st;
  s->stats.ops[op->kind]++;
  if (host) {
    /* host lanes finish the op before run returns: the time is an observation for the model */
    s->stats.seconds += t1 - t0;
    if (observe && weft_cost_observe(cs, work, t1 - t0)) weft_route_forget(f);
    s->busy_until = t1;
    if (t1 > f->busy_max) f->busy_max = t1;
  } else {
    /* device lanes may still be working: the lane is busy for the predicted time */
    s->stats.seconds += pred;
    s->busy_until = (s->busy_until > t0 ? s->busy_until : t0) + pred;
    if (s->busy_until > f->busy_max) f->busy_max = s->busy_until;
  }
written:
  for (int o = 0; o < nout; o++)
    if (out[o] && op->out_host[o]) out[o]->dma_lane = lane + 1; /* the lane may be writing its host memory */
  weft_tensor_note_recipe(in, nin, out, nout, op, lane); /* before the outputs' versions move on */
  for (int o = 0; o < nout; o++)
    if (out[o]) weft_tensor_mark_written(out[o], lane);
  if (ticket) weft_hostq_note_outputs(f, ticket, out, nout);
  f->last_lane = lane;
  return WEFT_OK;
}

/* A lane the router chose may fail under the op (a lost device shows at the next call into it): it has left
 * the fabric, so the op is routed again among the others, whose copies of the inputs (the host's at least,
 * unless the value lived only on the failed lane) are still current. Pinned ops report the failure. `now`,
 * when not NULL, is the clock as the caller just read it (the first attempt uses it). */
static weft_status dispatch_at(weft_fabric *f, const weft_op_desc *desc, weft_op *op, weft_tensor **in, int nin,
                               weft_tensor **out, int nout, const double *now) {
  const int pinned = desc ? desc->lane : WEFT_LANE_AUTO;
  if (f->lost) weft_fabric_recover_all(f), now = NULL; /* before this op overwrites what a lost value was made from */
  if (f->hostq) weft_hostq_drain(f);                   /* the queue's measurements reach the model */
  for (size_t attempt = 0;; attempt++) {
    weft_status st = dispatch_once(f, desc, op, in, nin, out, nout, attempt ? NULL : now);
    if (st != WEFT_ERR_LANE_FAILED || pinned != WEFT_LANE_AUTO || attempt >= f->nlanes) return st;
  }
}

static weft_status dispatch(weft_fabric *f, const weft_op_desc *desc, weft_op *op, weft_tensor **in, int nin,
                            weft_tensor **out, int nout) {
  return dispatch_at(f, desc, op, in, nin, out, nout, NULL);
}

#define CHECK_T(t, name)                                                                                           \
  do {                                                                                                             \
    weft_status st_ = weft_tensor_check(f, (t), name);                                                           \
    if (st_ != WEFT_OK) return st_;                                                                                \
  } while (0)

weft_status weft_op_matmul(weft_fabric *f, const weft_op_desc *desc, weft_tensor *a, int trans_a, weft_tensor *b,
                           int trans_b, weft_tensor *c) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  weft_op op = {0};
  op.kind = WEFT_OP_MATMUL;
  weft_status st = check_desc(f, desc, "weft_op_matmul", &op);
  if (st != WEFT_OK) return st;
  CHECK_T(a, "matmul: a");
  CHECK_T(b, "matmul: b");
  CHECK_T(c, "matmul: c");
  if (c == a || c == b) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "matmul: c must not be a or b (no in-place matmul)");
  char sa[96], sb[96], sc[96];
  if (a->ndim < 2 || b->ndim < 2 || c->ndim < 2)
    return weft_fail(f, WEFT_ERR_SHAPE, "matmul: a %s, b %s and c %s must each have rank 2 to 4",
                     shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb), shape_str(c, sc, sizeof sc));
  int64_t am = a->dims[a->ndim - 2], ak = a->dims[a->ndim - 1];
  if (trans_a) am = a->dims[a->ndim - 1], ak = a->dims[a->ndim - 2];
  int64_t bk = b->dims[b->ndim - 2], bn = b->dims[b->ndim - 1];
  if (trans_b) bk = b->dims[b->ndim - 1], bn = b->dims[b->ndim - 2];
  int64_t batch = (int64_t)(a->numel / (size_t)(am * ak));
  int b_batched = b->ndim > 2;
  int64_t bbatch = (int64_t)(b->numel / (size_t)(bk * bn));
  if (ak != bk)
    return weft_fail(f, WEFT_ERR_SHAPE, "matmul: inner dimensions differ: a %s%s gives k=%lld, b %s%s gives k=%lld",
                     shape_str(a, sa, sizeof sa), trans_a ? "^T" : "", (long long)ak, shape_str(b, sb, sizeof sb),
                     trans_b ? "^T" : "", (long long)bk);
  if (b_batched && (b->ndim != a->ndim || bbatch != batch || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)(a->ndim - 2))))
    return weft_fail(f, WEFT_ERR_SHAPE, "matmul: batched b %s must have a %s's batch dimensions",
                     shape_str(b, sb, sizeof sb), shape_str(a, sa, sizeof sa));
  int shape_ok = c->ndim == a->ndim && c->dims[c->ndim - 2] == am && c->dims[c->ndim - 1] == bn &&
                 memcmp(a->dims, c->dims, sizeof(int64_t) * (size_t)(a->ndim - 2)) == 0;
  if (!shape_ok)
    return weft_fail(f, WEFT_ERR_SHAPE, "matmul: c is %s; a %s%s . b %s%s needs c of a's batch dimensions then [%lld,%lld]",
                     shape_str(c, sc, sizeof sc), shape_str(a, sa, sizeof sa), trans_a ? "^T" : "",
                     shape_str(b, sb, sizeof sb), trans_b ? "^T" : "", (long long)am, (long long)bn);
  op.batch = batch, op.m = am, op.n = bn, op.k = ak;
  op.trans_a = trans_a != 0, op.trans_b = trans_b != 0, op.b_batched = b_batched;
  weft_tensor *in[2] = {a, b}, *out[1] = {c};
  static const char *const in_names[2] = {"a", "b"}, *const out_names[1] = {"c"};
  if ((st = refuse_overlap(f, &op, in, in_names, 2, out, out_names, 1)) != WEFT_OK) return st;
  if (!desc || desc->lane == WEFT_LANE_AUTO) {
    /* on host data, a batch may be worth sharing out across lanes, and lanes the models put close are
     * measured (sched/split.c); a split that fails leaves the result unwritten, and the whole op then runs
     * on one lane */
    int done = 0, lane = -1, have_now = 0;
    double now = 0;
    weft_status st = weft_split_matmul(f, &op, a, b, c, &done, &lane, &have_now, &now);
    if (st == WEFT_OK && done) return WEFT_OK;
    if (st == WEFT_OK) {
      /* lane >= 0: the lane this shape measured fastest; should it fail under the op, the router takes over */
      weft_op_desc there = {op.contract, lane};
      st = dispatch_at(f, lane >= 0 ? &there : desc, &op, in, 2, out, 1, have_now ? &now : NULL);
      if (lane < 0 || st != WEFT_ERR_LANE_FAILED) return st;
    }
  }
  return dispatch(f, desc, &op, in, 2, out, 1);
}

/* Shared checks for the one-input elementwise ops (relu, scale). */
static weft_status unary(weft_fabric *f, const weft_op_desc *desc, weft_op *op, const char *fn, weft_tensor *x,
                         weft_tensor *out) {
  weft_status st = check_desc(f, desc, fn, op);
  if (st != WEFT_OK) return st;
  char wx[64], wo[64]; /* the messages name the op: "weft_op_relu: x is NULL" */
  snprintf(wx, sizeof wx, "%s: x", fn);
  snprintf(wo, sizeof wo, "%s: out", fn);
  CHECK_T(x, wx);
  CHECK_T(out, wo);
  char sx[96], so[96];
  if (!same_shape(x, out))
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: out %s must have x's shape %s", fn, shape_str(out, so, sizeof so),
                     shape_str(x, sx, sizeof sx));
  as_rows_cols(x, &op->rows, &op->cols);
  weft_tensor *in[1] = {x}, *o[1] = {out};
  static const char *const in_names[1] = {"x"}, *const out_names[1] = {"out"};
  if ((st = refuse_overlap(f, op, in, in_names, 1, o, out_names, 1)) != WEFT_OK) return st;
  return dispatch(f, desc, op, in, 1, o, 1);
}

weft_status weft_op_relu(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  weft_op op = {0};
  op.kind = WEFT_OP_RELU;
  return unary(f, desc, &op, "weft_op_relu", x, out);
}

weft_status weft_op_scale(weft_fabric *f, const weft_op_desc *desc, float alpha, weft_tensor *x, weft_tensor *out) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  weft_op op = {0};
  op.kind = WEFT_OP_SCALE;
  op.alpha = alpha;
  return unary(f, desc, &op, "weft_op_scale", x, out);
}

weft_status weft_op_axpy(weft_fabric *f, const weft_op_desc *desc, float alpha, weft_tensor *x, weft_tensor *y) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  weft_op op = {0};
  op.kind = WEFT_OP_AXPY;
  op.alpha = alpha;
  weft_status st = check_desc(f, desc, "weft_op_axpy", &op);
  if (st != WEFT_OK) return st;
  CHECK_T(x, "axpy: x");
  CHECK_T(y, "axpy: y");
  char sx[96], sy[96];
  if (!same_shape(x, y))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_axpy: y %s must have x's shape %s", shape_str(y, sy, sizeof sy),
                     shape_str(x, sx, sizeof sx));
  if (x == y) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_axpy: x and y must be different tensors (use scale)");
  as_rows_cols(x, &op.rows, &op.cols);
  weft_tensor *in[1] = {x}, *o[1] = {y};
  static const char *const in_names[1] = {"x"}, *const out_names[1] = {"y"};
  if ((st = refuse_overlap(f, &op, in, in_names, 1, o, out_names, 1)) != WEFT_OK) return st;
  return dispatch(f, desc, &op, in, 1, o, 1);
}

weft_status weft_op_add(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *y, weft_tensor *out) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  weft_op op = {0};
  op.kind = WEFT_OP_ADD;
  weft_status st = check_desc(f, desc, "weft_op_add", &op);
  if (st != WEFT_OK) return st;
  CHECK_T(x, "add: x");
  CHECK_T(y, "add: y");
  CHECK_T(out, "add: out");
  char sx[96], sy[96], so[96];
  as_rows_cols(x, &op.rows, &op.cols);
  int row = (y->ndim == 1 || (y->ndim == 2 && y->dims[0] == 1)) && y->dims[y->ndim - 1] == op.cols;
  if (same_shape(x, y)) op.y_broadcast = 0;
  else if (row) op.y_broadcast = 1;
  else
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_add: y %s must have x's shape %s or be one row [%lld] to broadcast",
                     shape_str(y, sy, sizeof sy), shape_str(x, sx, sizeof sx), (long long)op.cols);
  if (!same_shape(x, out))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_add: out %s must have x's shape %s", shape_str(out, so, sizeof so),
                     shape_str(x, sx, sizeof sx));
  if (out == y && op.y_broadcast)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_add: out must not be the broadcast row y");
  weft_tensor *in[2] = {x, y}, *o[1] = {out};
  static const char *const in_names[2] = {"x", "y"}, *const out_names[1] = {"out"};
  if ((st = refuse_overlap(f, &op, in, in_names, 2, o, out_names, 1)) != WEFT_OK) return st;
  return dispatch(f, desc, &op, in, 2, o, 1);
}

weft_status weft_op_relu_backward(weft_fabric *f, const weft_op_desc *desc, weft_tensor *grad, weft_tensor *x,
                                  weft_tensor *out) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  weft_op op = {0};
  op.kind = WEFT_OP_RELU_BACKWARD;
  weft_status st = check_desc(f, desc, "weft_op_relu_backward", &op);
  if (st != WEFT_OK) return st;
  CHECK_T(grad, "relu_backward: grad");
  CHECK_T(x, "relu_backward: x");
  CHECK_T(out, "relu_backward: out");
  char sg[96], sx[96], so[96];
  if (!same_shape(grad, x) || !same_shape(grad, out))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_relu_backward: grad %s, x %s and out %s must have one shape",
                     shape_str(grad, sg, sizeof sg), shape_str(x, sx, sizeof sx), shape_str(out, so, sizeof so));
  as_rows_cols(x, &op.rows, &op.cols);
  weft_tensor *in[2] = {grad, x}, *o[1] = {out};
  static const char *const in_names[2] = {"grad", "x"}, *const out_names[1] = {"out"};
  if ((st = refuse_overlap(f, &op, in, in_names, 2, o, out_names, 1)) != WEFT_OK) return st;
  return dispatch(f, desc, &op, in, 2, o, 1);
}

weft_status weft_op_sum_rows(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  weft_op op = {0};
  op.kind = WEFT_OP_SUM_ROWS;
  weft_status st = check_desc(f, desc, "weft_op_sum_rows", &op);
  if (st != WEFT_OK) return st;
  CHECK_T(x, "sum_rows: x");
  CHECK_T(out, "sum_rows: out");
  if (x == out) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_sum_rows: out must not be x");
  as_rows_cols(x, &op.rows, &op.cols);
  char sx[96], so[96];
  int ok = (out->ndim == 1 || (out->ndim == 2 && out->dims[0] == 1)) && out->dims[out->ndim - 1] == op.cols;
  if (!ok)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_sum_rows: out %s must be [%lld] or [1,%lld] for x %s",
                     shape_str(out, so, sizeof so), (long long)op.cols, (long long)op.cols, shape_str(x, sx, sizeof sx));
  weft_tensor *in[1] = {x}, *o[1] = {out};
  static const char *const in_names[1] = {"x"}, *const out_names[1] = {"out"};
  if ((st = refuse_overlap(f, &op, in, in_names, 1, o, out_names, 1)) != WEFT_OK) return st;
  return dispatch(f, desc, &op, in, 1, o, 1);
}

weft_status weft_op_softmax_xent(weft_fabric *f, const weft_op_desc *desc, weft_tensor *logits, weft_tensor *targets,
                                 weft_tensor *out_loss, weft_tensor *out_grad) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  weft_op op = {0};
  op.kind = WEFT_OP_SOFTMAX_XENT;
  weft_status st = check_desc(f, desc, "weft_op_softmax_xent", &op);
  if (st != WEFT_OK) return st;
  CHECK_T(logits, "softmax_xent: logits");
  CHECK_T(targets, "softmax_xent: targets");
  if (!out_loss && !out_grad)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_softmax_xent: out_loss and out_grad are both NULL");
  if (out_loss) CHECK_T(out_loss, "softmax_xent: out_loss");
  if (out_grad) CHECK_T(out_grad, "softmax_xent: out_grad");
  char sl[96], st2[96], so[96];
  if (!same_shape(logits, targets))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_softmax_xent: targets %s must have the logits' shape %s",
                     shape_str(targets, st2, sizeof st2), shape_str(logits, sl, sizeof sl));
  if (out_grad && !same_shape(logits, out_grad))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_softmax_xent: out_grad %s must have the logits' shape %s",
                     shape_str(out_grad, so, sizeof so), shape_str(logits, sl, sizeof sl));
  if (out_loss && out_loss->numel != 1)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_softmax_xent: out_loss %s must hold one element",
                     shape_str(out_loss, so, sizeof so));
  if (out_loss && (out_loss == logits || out_loss == targets || out_loss == out_grad))
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_softmax_xent: out_loss must be a tensor of its own");
  if (out_grad && (out_grad == logits || out_grad == targets))
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_softmax_xent: out_grad must not be an input");
  as_rows_cols(logits, &op.rows, &op.cols);
  if (op.rows == 0) return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_softmax_xent: the logits have no rows");
  op.inv_rows = weft_fpenv_recip(op.rows); /* rounded to nearest whatever the caller's environment */
  weft_tensor *in[2] = {logits, targets}, *o[2] = {out_loss, out_grad};
  static const char *const in_names[2] = {"logits", "targets"}, *const out_names[2] = {"out_loss", "out_grad"};
  if ((st = refuse_overlap(f, &op, in, in_names, 2, o, out_names, 2)) != WEFT_OK) return st;
  return dispatch(f, desc, &op, in, 2, o, 2);
}
