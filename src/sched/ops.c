/* ops.c - the public op path: weft_op_run and the typed ops. Validates every argument at the boundary
 * (the table's operand, liveness and dtype checks, then the op's validator, validate.c), offers a batched
 * matmul to the split (split.c), picks the lane (pinned, or the router's: route.c), has the core run it
 * there (core/exec.c), and routes again when the lane fails under it. The scheduler's layer, above the
 * core (docs/DESIGN.md, "Layers"). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../core/fpenv.h"
#include "../core/optable.h"
#include "../core/reference_tx.h"
#include "route.h"
#include "sched.h"
#include "split.h"

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
static weft_status refuse_overlap(weft_fabric *f, const weft_op *op, weft_tensor *const *in,
                                  const char *const *in_name, int nin, weft_tensor *const *out,
                                  const char *const *out_name, int nout) {
  for (int o = 0; o < nout; o++) {
    if (!out[o]) continue;
    for (int i = 0; i < nin; i++)
      if (in[i] && overlaps(out[o], in[i]))
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

/* Picks the op's lane (the one it is pinned to, checked, or the router's choice) and has the core run it
 * there (core/exec.c). */
static weft_status dispatch_once(weft_fabric *f, const weft_op_desc *desc, weft_op *op, weft_tensor **in, int nin,
                                 weft_tensor **out, int nout, const weft_op_params *params, const double *now) {
  int pinned = desc ? desc->lane : WEFT_LANE_AUTO;
  int lane;
  double work, t0 = 0;
  weft_status st = weft_exec_inputs_failed(op, in, nin, out, nout);
  if (st != WEFT_OK) return st;
  const weft_cost_class cls = weft_cost_op_work(op, &work);
  if (pinned != WEFT_LANE_AUTO) {
    weft_lane_slot *s = &f->lanes[pinned];
    if (s->failed)
      return weft_fail(f, WEFT_ERR_LANE_FAILED, "%s: lane %s %s", weft_op_kind_str(op->kind), s->desc.name,
                       s->down_why[0] ? s->down_why : "is down");
    if (!(weft_lane_ops(&s->desc) & WEFT_OP_BIT(op->kind)))
      return weft_fail(f, WEFT_ERR_UNSUPPORTED, "%s: lane %s does not offer this op (see weft devices for what it offers)",
                       weft_op_kind_str(op->kind), s->desc.name);
    if (!(s->desc.contracts & WEFT_CONTRACT_BIT(op->contract)))
      return weft_fail(f, WEFT_ERR_UNSUPPORTED, "%s: lane %s does not honour the '%s' contract",
                       weft_op_kind_str(op->kind), s->desc.name, weft_contract_str(op->contract));
    if (s->vt.supports) {
      weft_status st = s->vt.supports(s->self, op);
      if (st != WEFT_OK) return st;
    }
    lane = pinned;
  } else {
    /* outputs the op reads (axpy's y, accumulated gradients) count like inputs: their residency matters */
    weft_tensor *route_in[WEFT_OP_MAX_IN + WEFT_OP_MAX_OUT];
    int nroute = 0;
    for (int i = 0; i < nin; i++)
      if (in[i]) route_in[nroute++] = in[i];
    for (int o = 0; o < nout; o++)
      if (out[o] && ((weft_optable[op->kind].out_reads >> o) & 1)) route_in[nroute++] = out[o];
    t0 = now ? *now : weft_fabric_now(f); /* one clock read serves the route and the op's timing */
    if (t0 >= f->revive_at || atomic_load_explicit(&f->revive_poke, memory_order_relaxed)) weft_lanes_revive(f, 0);
    lane = weft_route_decide(f, op, cls, work, t0, route_in, nroute);
    if (lane < 0) return WEFT_ERR_UNSUPPORTED;
  }
  /* the route's clock read times the op too; a pinned op is timed from when its inputs are in place */
  return weft_exec(f, lane, op, in, nin, out, nout, params, cls, work, pinned != WEFT_LANE_AUTO ? now : &t0);
}

/* A lane the router chose may fail under the op (a lost device shows at the next call into it): it has left
 * the fabric, so the op is routed again among the others, whose copies of the inputs (the host's at least,
 * unless the value lived only on the failed lane) are still current. Pinned ops report the failure. `now`,
 * when not NULL, is the clock as the caller just read it (the first attempt uses it). */
static weft_status dispatch_at(weft_fabric *f, const weft_op_desc *desc, weft_op *op, weft_tensor **in, int nin,
                               weft_tensor **out, int nout, const weft_op_params *params, const double *now) {
  const int pinned = desc ? desc->lane : WEFT_LANE_AUTO;
  if (f->lost) weft_sched_recover_all(f), now = NULL; /* before this op overwrites what a lost value was made from */
  if (f->hostq) weft_hostq_drain(f);                   /* the queue's measurements reach the model */
  for (size_t attempt = 0;; attempt++) {
    weft_status st = dispatch_once(f, desc, op, in, nin, out, nout, params, attempt ? NULL : now);
    if (st != WEFT_ERR_LANE_FAILED || pinned != WEFT_LANE_AUTO || attempt >= f->nlanes) return st;
  }
}

/* ------------------------------------------------------------------------------ the one generic path */

/* What weft_tensor_check accepts, without a message: a live tensor of this fabric. */
static int tensor_live(const weft_fabric *f, const weft_tensor *t) {
  return t && t->magic == WEFT_TENSOR_MAGIC && t->fabric == f;
}

weft_status weft_op_run(weft_fabric *f, const weft_op_desc *desc, weft_op_kind kind, weft_tensor *const *in_arg,
                        int nin_arg, weft_tensor *const *out_arg, int nout_arg, const weft_op_params *params) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if ((unsigned)kind >= WEFT_OP_COUNT)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_run: op kind %d is not a weft_op_kind", (int)kind);
  const weft_optable_entry *e = &weft_optable[kind];
  /* "weft_op_<name>", for messages: built without snprintf, which would cost a good part of a tiny op */
  char fn[64] = "weft_op_";
  const size_t nlen = strlen(e->name);
  memcpy(fn + 8, e->name, nlen < sizeof fn - 9 ? nlen + 1 : sizeof fn - 9);
  fn[sizeof fn - 1] = 0;
  if (nin_arg < 0 || nin_arg > e->nin || nout_arg < 0 || nout_arg > e->nout || (nin_arg && !in_arg) ||
      (nout_arg && !out_arg))
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: takes %d inputs and %d outputs; %d and %d given", fn, e->nin,
                     e->nout, nin_arg, nout_arg);
  weft_op_params p;
  memset(&p, 0, sizeof p);
  if (params) p = *params;
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = kind;
  weft_status st = check_desc(f, desc, fn, &op);
  if (st != WEFT_OK) return st;
  weft_tensor *in[WEFT_OP_MAX_IN] = {0}, *out[WEFT_OP_MAX_OUT] = {0};
  for (int i = 0; i < nin_arg; i++) in[i] = in_arg[i];
  for (int o = 0; o < nout_arg; o++) out[o] = out_arg[o];
  char what[96];
  int nouts = 0;
  /* the message names the argument; it is only formatted for a tensor that fails the check */
  for (int i = 0; i < e->nin; i++) {
    if (!in[i] && ((e->in_optional >> i) & 1)) continue;
    if (tensor_live(f, in[i])) continue;
    snprintf(what, sizeof what, "%s: %s", fn, e->in_name[i]);
    return weft_tensor_check(f, in[i], what);
  }
  for (int o = 0; o < e->nout; o++) {
    if (!out[o] && ((e->out_optional >> o) & 1)) continue;
    nouts++;
    if (tensor_live(f, out[o])) continue;
    snprintf(what, sizeof what, "%s: %s", fn, e->out_name[o]);
    return weft_tensor_check(f, out[o], what);
  }
  if (e->need_one_out && !nouts) {
    char names[96] = "";
    for (int o = 0; o < e->nout; o++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", o ? " and " : "", e->out_name[o]);
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: %s are %s NULL; give at least one", fn, names,
                     e->nout == 2 ? "both" : "all");
  }
  /* dtypes, from the table: an int tensor where floats are wanted is the caller's mistake, named */
  const weft_dtype d0 = in[0] ? in[0]->dtype : WEFT_DTYPE_F32;
  for (int i = 0; i < e->nin + e->nout; i++) {
    const int is_in = i < e->nin, k = is_in ? i : i - e->nin;
    const weft_tensor *t = is_in ? in[k] : out[k];
    if (!t) continue;
    const int rule = is_in ? e->in_dt[k] : e->out_dt[k];
    const weft_dtype want = rule == WEFT_DT_SAME ? d0 : rule == WEFT_DT_I32 ? WEFT_DTYPE_I32 : WEFT_DTYPE_F32;
    if (t->dtype != want)
      return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: %s is an %s tensor; this op wants %s there%s", fn,
                       is_in ? e->in_name[k] : e->out_name[k], weft_dtype_str(t->dtype), weft_dtype_str(want),
                       rule == WEFT_DT_SAME ? " (the input's dtype)" : want == WEFT_DTYPE_I32 ? " (indices)" : "");
    if (is_in) op.in_dtype[k] = t->dtype;
    else op.out_dtype[k] = t->dtype;
  }
  if ((st = weft_op_validators[kind](f, &op, in, out, &p)) != WEFT_OK) return st;
  /* which output may be which input (the table); two outputs are never one tensor */
  for (int o = 0; o < e->nout; o++) {
    if (!out[o]) continue;
    for (int i = 0; i < e->nin; i++)
      if (out[o] == in[i] && !((e->alias_ok[o] >> i) & 1))
        return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: %s must not be %s (give the result a tensor of its own)", fn,
                         e->out_name[o], e->in_name[i]);
    for (int q = 0; q < o; q++)
      if (out[q] == out[o])
        return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: %s and %s are one tensor; give each output its own", fn,
                         e->out_name[q], e->out_name[o]);
  }
  if ((st = refuse_overlap(f, &op, in, e->in_name, e->nin, out, e->out_name, e->nout)) != WEFT_OK) return st;
  if (e->splittable && (!desc || desc->lane == WEFT_LANE_AUTO)) {
    /* on host data, a batch may be worth sharing out across lanes, and lanes the models put close are
     * measured (sched/split.c); a split that fails leaves the result unwritten, and the whole op then runs
     * on one lane */
    int done = 0, lane = -1, have_now = 0;
    double now = 0;
    st = weft_split_matmul(f, &op, in[0], in[1], out[0], &done, &lane, &have_now, &now);
    if (st == WEFT_OK && done) return WEFT_OK;
    if (st == WEFT_OK) {
      /* lane >= 0: the lane this shape measured fastest; should it fail under the op, the router takes over */
      weft_op_desc there = {op.contract, lane};
      st = dispatch_at(f, lane >= 0 ? &there : desc, &op, in, e->nin, out, e->nout, &p, have_now ? &now : NULL);
      if (lane < 0 || st != WEFT_ERR_LANE_FAILED) return st;
    }
  }
  return dispatch_at(f, desc, &op, in, e->nin, out, e->nout, &p, NULL);
}

/* --------------------------------------------------------------------------------- the typed ops */

#define RUN(kind, ins, outs, params)                                                                               \
  do {                                                                                                             \
    weft_tensor *const in_[] = ins, *const out_[] = outs;                                                          \
    return weft_op_run(f, desc, kind, in_, (int)(sizeof in_ / sizeof *in_), out_, (int)(sizeof out_ / sizeof *out_), \
                       params);                                                                                    \
  } while (0)
#define L(...) {__VA_ARGS__}

weft_status weft_op_matmul(weft_fabric *f, const weft_op_desc *desc, weft_tensor *a, int trans_a, weft_tensor *b,
                           int trans_b, weft_tensor *c) {
  weft_op_params p = {{trans_a != 0, trans_b != 0}, {0}};
  RUN(WEFT_OP_MATMUL, L(a, b), L(c), &p);
}
weft_status weft_op_matmul_acc(weft_fabric *f, const weft_op_desc *desc, weft_tensor *a, int trans_a, weft_tensor *b,
                               int trans_b, weft_tensor *c) {
  weft_op_params p = {{trans_a != 0, trans_b != 0}, {0}};
  RUN(WEFT_OP_MATMUL_ACC, L(a, b), L(c), &p);
}
weft_status weft_op_add(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *y, weft_tensor *out) {
  RUN(WEFT_OP_ADD, L(x, y), L(out), NULL);
}
weft_status weft_op_relu(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out) {
  RUN(WEFT_OP_RELU, L(x), L(out), NULL);
}
weft_status weft_op_relu_backward(weft_fabric *f, const weft_op_desc *desc, weft_tensor *grad, weft_tensor *x,
                                  weft_tensor *out) {
  RUN(WEFT_OP_RELU_BACKWARD, L(grad, x), L(out), NULL);
}
weft_status weft_op_scale(weft_fabric *f, const weft_op_desc *desc, float alpha, weft_tensor *x, weft_tensor *out) {
  weft_op_params p = {{0}, {alpha}};
  RUN(WEFT_OP_SCALE, L(x), L(out), &p);
}
weft_status weft_op_axpy(weft_fabric *f, const weft_op_desc *desc, float alpha, weft_tensor *x, weft_tensor *y) {
  weft_op_params p = {{0}, {alpha}};
  RUN(WEFT_OP_AXPY, L(x), L(y), &p);
}
weft_status weft_op_sum_rows(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out) {
  RUN(WEFT_OP_SUM_ROWS, L(x), L(out), NULL);
}
weft_status weft_op_softmax_xent(weft_fabric *f, const weft_op_desc *desc, weft_tensor *logits, weft_tensor *targets,
                                 weft_tensor *out_loss, weft_tensor *out_grad) {
  RUN(WEFT_OP_SOFTMAX_XENT, L(logits, targets), L(out_loss, out_grad), NULL);
}
weft_status weft_op_embedding(weft_fabric *f, const weft_op_desc *desc, weft_tensor *tok, weft_tensor *pos,
                              weft_tensor *wte, weft_tensor *wpe, weft_tensor *out) {
  RUN(WEFT_OP_EMBEDDING, L(tok, pos, wte, wpe), L(out), NULL);
}
weft_status weft_op_embedding_backward(weft_fabric *f, const weft_op_desc *desc, weft_tensor *dout, weft_tensor *tok,
                                       weft_tensor *pos, weft_tensor *dwte, weft_tensor *dwpe) {
  RUN(WEFT_OP_EMBEDDING_BACKWARD, L(dout, tok, pos), L(dwte, dwpe), NULL);
}
weft_status weft_op_layernorm(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *gamma,
                              weft_tensor *beta, float eps, weft_tensor *y, weft_tensor *mean, weft_tensor *rstd) {
  weft_op_params p = {{0}, {eps}};
  RUN(WEFT_OP_LAYERNORM, L(x, gamma, beta), L(y, mean, rstd), &p);
}
weft_status weft_op_layernorm_backward(weft_fabric *f, const weft_op_desc *desc, weft_tensor *dy, weft_tensor *x,
                                       weft_tensor *mean, weft_tensor *rstd, weft_tensor *gamma, weft_tensor *dx,
                                       weft_tensor *dgamma, weft_tensor *dbeta) {
  RUN(WEFT_OP_LAYERNORM_BACKWARD, L(dy, x, mean, rstd, gamma), L(dx, dgamma, dbeta), NULL);
}
weft_status weft_op_gelu(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *y) {
  RUN(WEFT_OP_GELU, L(x), L(y), NULL);
}
weft_status weft_op_gelu_backward(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *dy,
                                  weft_tensor *dx) {
  RUN(WEFT_OP_GELU_BACKWARD, L(x, dy), L(dx), NULL);
}
weft_status weft_op_attention(weft_fabric *f, const weft_op_desc *desc, weft_tensor *qkv, int64_t n_head,
                              weft_tensor *out, weft_tensor *att, weft_tensor *preatt) {
  weft_op_params p = {{n_head}, {0}};
  RUN(WEFT_OP_ATTENTION, L(qkv), L(out, att, preatt), &p);
}
weft_status weft_op_attention_cached(weft_fabric *f, const weft_op_desc *desc, weft_tensor *qkv, int64_t n_head,
                                     int64_t t0, weft_tensor *out, weft_tensor *att) {
  weft_op_params p = {{n_head, t0}, {0}};
  RUN(WEFT_OP_ATTENTION_CACHED, L(qkv), L(out, att), &p);
}
weft_status weft_op_attention_backward(weft_fabric *f, const weft_op_desc *desc, weft_tensor *dout, weft_tensor *qkv,
                                       weft_tensor *att, int64_t n_head, weft_tensor *dqkv) {
  weft_op_params p = {{n_head}, {0}};
  RUN(WEFT_OP_ATTENTION_BACKWARD, L(dout, qkv, att), L(dqkv), &p);
}
weft_status weft_op_causal_softmax(weft_fabric *f, const weft_op_desc *desc, weft_tensor *scores, float scale,
                                   weft_tensor *probs) {
  weft_op_params p = {{0}, {scale}};
  RUN(WEFT_OP_CAUSAL_SOFTMAX, L(scores), L(probs), &p);
}
weft_status weft_op_causal_softmax_backward(weft_fabric *f, const weft_op_desc *desc, weft_tensor *probs,
                                            weft_tensor *dprobs, float scale, weft_tensor *dscores) {
  weft_op_params p = {{0}, {scale}};
  RUN(WEFT_OP_CAUSAL_SOFTMAX_BACKWARD, L(probs, dprobs), L(dscores), &p);
}
weft_status weft_op_crossentropy(weft_fabric *f, const weft_op_desc *desc, weft_tensor *logits, weft_tensor *targets,
                                 weft_tensor *losses) {
  RUN(WEFT_OP_CROSSENTROPY, L(logits, targets), L(losses), NULL);
}
weft_status weft_op_crossentropy_backward(weft_fabric *f, const weft_op_desc *desc, weft_tensor *logits,
                                          weft_tensor *targets, weft_tensor *dloss, weft_tensor *dlogits) {
  RUN(WEFT_OP_CROSSENTROPY_BACKWARD, L(logits, targets, dloss), L(dlogits), NULL);
}
float weft_adamw_bias_correction(float beta, int64_t step) { return weft_ref_adamw_bias_correction(beta, step); }
weft_status weft_op_adamw(weft_fabric *f, const weft_op_desc *desc, weft_tensor *param, weft_tensor *grad,
                          weft_tensor *m, weft_tensor *v, float lr, float beta1, float beta2, float eps,
                          float weight_decay, int64_t step) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (step < 1) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_adamw: step is %lld; steps count from 1", (long long)step);
  weft_op_params p = {{0}, {lr, beta1, beta2, eps, weight_decay, weft_adamw_bias_correction(beta1, step),
                            weft_adamw_bias_correction(beta2, step)}};
  RUN(WEFT_OP_ADAMW, L(grad), L(param, m, v), &p);
}
weft_status weft_op_sumsq(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, weft_tensor *acc) {
  RUN(WEFT_OP_SUMSQ, L(x), L(acc), NULL);
}
weft_status weft_op_permute(weft_fabric *f, const weft_op_desc *desc, weft_tensor *x, const int *perm, weft_tensor *y) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!perm) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_permute: perm is NULL");
  weft_status st = weft_tensor_check(f, x, "weft_op_permute: x");
  if (st != WEFT_OK) return st;
  weft_op_params p;
  memset(&p, 0, sizeof p);
  for (int a = 0; a < x->ndim; a++) p.i[a] = perm[a];
  RUN(WEFT_OP_PERMUTE, L(x), L(y), &p);
}
weft_status weft_op_copy_slice(weft_fabric *f, const weft_op_desc *desc, weft_tensor *src, weft_tensor *dst, int axis,
                               int64_t offset) {
  weft_op_params p = {{axis, offset}, {0}};
  RUN(WEFT_OP_COPY_SLICE, L(src), L(dst), &p);
}

weft_status weft_grad_clip(weft_fabric *f, const weft_op_desc *desc, weft_tensor *const *grads, int n, float max_norm,
                           float *out_norm) {
  if (out_norm) *out_norm = 0;
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (n < 0) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_grad_clip: n is %d; it counts the gradients", n);
  if (n && !grads) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_grad_clip: grads is NULL with n = %d", n);
  if (!(max_norm >= 0.0f)) /* a negative limit would flip every gradient's sign; NaN would never clip */
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_grad_clip: max_norm is %g; it must be 0 or more", (double)max_norm);
  weft_status st;
  for (int k = 0; k < n; k++) {
    char what[64];
    snprintf(what, sizeof what, "weft_grad_clip: grads[%d]", k);
    if ((st = weft_tensor_check(f, grads[k], what)) != WEFT_OK) return st;
    if (grads[k]->dtype != WEFT_DTYPE_F32)
      return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_grad_clip: grads[%d] is an i32 tensor; gradients are f32", k);
    /* one gradient named twice would count twice in the norm and be scaled twice */
    for (int j = 0; j < k; j++)
      if (grads[j] == grads[k] || overlaps(grads[j], grads[k]))
        return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_grad_clip: grads[%d] and grads[%d] are %s; name each "
                         "gradient once", j, k, grads[j] == grads[k] ? "one tensor" : "over overlapping memory");
  }
  const int64_t one = 1;
  weft_tensor *acc = NULL;
  if ((st = weft_tensor_create(f, 1, &one, NULL, &acc)) != WEFT_OK) return st;
  for (int k = 0; k < n && st == WEFT_OK; k++) st = weft_op_sumsq(f, desc, grads[k], acc);
  float ss = 0;
  if (st == WEFT_OK) st = weft_tensor_read(acc, &ss, 1);
  weft_tensor_destroy(acc);
  if (st != WEFT_OK) return st;
  /* GLOBAL-NORM CLIP (reference_tx.c): norm = sqrt(ss); scale by max_norm * (1/norm) when norm > max_norm */
  weft_fpenv env; /* rounded to nearest, whatever the caller's environment */
  weft_fpenv_enter(&env);
  const float norm = weft_sqrtf(ss);
  const float sc = max_norm * weft_recipf(norm);
  weft_fpenv_leave(&env);
  if (norm > max_norm) {
    for (int k = 0; k < n; k++)
      if ((st = weft_op_scale(f, desc, sc, grads[k], grads[k])) != WEFT_OK) {
        /* the ones before it are scaled already: say so, so the caller does not clip them twice */
        char why[WEFT_ERR_LEN], done[48] = "none is scaled";
        snprintf(why, sizeof why, "%s", f->err);
        if (k == 1) snprintf(done, sizeof done, "grads[0] is scaled already");
        if (k > 1) snprintf(done, sizeof done, "grads[0..%d] are scaled already", k - 1);
        return weft_fail(f, st, "weft_grad_clip: scaling grads[%d] by %g (%s): %.900s", k, (double)sc, done, why);
      }
  }
  if (out_norm) *out_norm = norm;
  return WEFT_OK;
}
