/* validate.c - checking an op call against its table entry and filling the lane's weft_op: shapes, sizes,
 * parameters, and index tensors' values (brought home through the core, checked on the host before
 * anything runs). One validator per op, in weft_op_validators; the op path (ops.c) runs them after the
 * table's operand, liveness and dtype checks. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/fpenv.h"
#include "../core/optable.h"
#include "sched.h"

/* ---------------------------------------------------------------------------------------- helpers */

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
#define SH(t) shape_str((t), (char[96]){0}, 96)

/* An index tensor's values must lie in [0, limit): checked on the host before the op is given to a lane
 * (it is brought home if it lives elsewhere: index tensors are small), so a bad index changes nothing. */
static weft_status check_indices(weft_fabric *f, const char *fn, const char *what, weft_tensor *t, int64_t limit) {
  weft_status st = weft_tensor_make_valid(t, -1);
  if (st == WEFT_OK) st = weft_tensor_wait_writer(t);
  if (st == WEFT_OK) st = weft_tensor_failure(t);
  if (st != WEFT_OK) return st;
  const int32_t *v = (const int32_t *)t->host;
  for (size_t i = 0; i < t->numel; i++)
    if (v[i] < 0 || (int64_t)v[i] >= limit)
      return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: %s[%zu] is %d, outside 0..%lld", fn, what, i, (int)v[i],
                       (long long)(limit - 1));
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------- version-1 ops */

static weft_status v_matmul(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                            const weft_op_params *p) {
  weft_tensor *a = in[0], *b = in[1], *c = out[0];
  const int trans_a = p->i[0] != 0, trans_b = p->i[1] != 0;
  if (c == a || c == b)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: c must not be a or b (no in-place matmul)",
                     weft_optable[op->kind].name);
  if (a->ndim < 2 || b->ndim < 2 || c->ndim < 2)
    return weft_fail(f, WEFT_ERR_SHAPE, "matmul: a %s, b %s and c %s must each have rank 2 to 4", SH(a), SH(b), SH(c));
  int64_t am = a->dims[a->ndim - 2], ak = a->dims[a->ndim - 1];
  if (trans_a) am = a->dims[a->ndim - 1], ak = a->dims[a->ndim - 2];
  int64_t bk = b->dims[b->ndim - 2], bn = b->dims[b->ndim - 1];
  if (trans_b) bk = b->dims[b->ndim - 1], bn = b->dims[b->ndim - 2];
  int64_t batch = (int64_t)(a->numel / (size_t)(am * ak));
  int b_batched = b->ndim > 2;
  int64_t bbatch = (int64_t)(b->numel / (size_t)(bk * bn));
  if (ak != bk)
    return weft_fail(f, WEFT_ERR_SHAPE, "matmul: inner dimensions differ: a %s%s gives k=%lld, b %s%s gives k=%lld",
                     SH(a), trans_a ? "^T" : "", (long long)ak, SH(b), trans_b ? "^T" : "", (long long)bk);
  if (b_batched && (b->ndim != a->ndim || bbatch != batch || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)(a->ndim - 2))))
    return weft_fail(f, WEFT_ERR_SHAPE, "matmul: batched b %s must have a %s's batch dimensions", SH(b), SH(a));
  int shape_ok = c->ndim == a->ndim && c->dims[c->ndim - 2] == am && c->dims[c->ndim - 1] == bn &&
                 memcmp(a->dims, c->dims, sizeof(int64_t) * (size_t)(a->ndim - 2)) == 0;
  if (!shape_ok)
    return weft_fail(f, WEFT_ERR_SHAPE, "matmul: c is %s; a %s%s . b %s%s needs c of a's batch dimensions then [%lld,%lld]",
                     SH(c), SH(a), trans_a ? "^T" : "", SH(b), trans_b ? "^T" : "", (long long)am, (long long)bn);
  op->batch = batch, op->m = am, op->n = bn, op->k = ak;
  op->trans_a = trans_a, op->trans_b = trans_b, op->b_batched = b_batched;
  return WEFT_OK;
}

static weft_status v_unary(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                           const weft_op_params *p) {
  weft_tensor *x = in[0], *o = out[0];
  const char *fn = op->kind == WEFT_OP_RELU ? "weft_op_relu" : op->kind == WEFT_OP_SCALE ? "weft_op_scale" : "weft_op_gelu";
  if (!same_shape(x, o)) return weft_fail(f, WEFT_ERR_SHAPE, "%s: out %s must have x's shape %s", fn, SH(o), SH(x));
  as_rows_cols(x, &op->rows, &op->cols);
  op->alpha = p->f[0];
  op->iparam[0] = (int64_t)x->numel;
  return WEFT_OK;
}

static weft_status v_axpy(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                          const weft_op_params *p) {
  weft_tensor *x = in[0], *y = out[0];
  if (!same_shape(x, y)) return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_axpy: y %s must have x's shape %s", SH(y), SH(x));
  if (x == y) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_axpy: x and y must be different tensors (use scale)");
  as_rows_cols(x, &op->rows, &op->cols);
  op->alpha = p->f[0];
  return WEFT_OK;
}

static weft_status v_add(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                         const weft_op_params *p) {
  (void)p;
  weft_tensor *x = in[0], *y = in[1], *o = out[0];
  as_rows_cols(x, &op->rows, &op->cols);
  int row = (y->ndim == 1 || (y->ndim == 2 && y->dims[0] == 1)) && y->dims[y->ndim - 1] == op->cols;
  if (same_shape(x, y)) op->y_broadcast = 0;
  else if (row) op->y_broadcast = 1;
  else
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_add: y %s must have x's shape %s or be one row [%lld] to broadcast",
                     SH(y), SH(x), (long long)op->cols);
  if (!same_shape(x, o))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_add: out %s must have x's shape %s", SH(o), SH(x));
  if (o == y && op->y_broadcast)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_add: out must not be the broadcast row y");
  return WEFT_OK;
}

static weft_status v_relu_backward(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                   const weft_op_params *p) {
  (void)p;
  weft_tensor *grad = in[0], *x = in[1], *o = out[0];
  if (!same_shape(grad, x) || !same_shape(grad, o))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_relu_backward: grad %s, x %s and out %s must have one shape", SH(grad),
                     SH(x), SH(o));
  as_rows_cols(x, &op->rows, &op->cols);
  return WEFT_OK;
}

static weft_status v_sum_rows(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                              const weft_op_params *p) {
  (void)p;
  weft_tensor *x = in[0], *o = out[0];
  if (x == o) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_sum_rows: out must not be x");
  as_rows_cols(x, &op->rows, &op->cols);
  int ok = (o->ndim == 1 || (o->ndim == 2 && o->dims[0] == 1)) && o->dims[o->ndim - 1] == op->cols;
  if (!ok)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_sum_rows: out %s must be [%lld] or [1,%lld] for x %s", SH(o),
                     (long long)op->cols, (long long)op->cols, SH(x));
  return WEFT_OK;
}

static weft_status v_softmax_xent(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                  const weft_op_params *p) {
  (void)p;
  weft_tensor *logits = in[0], *targets = in[1], *out_loss = out[0], *out_grad = out[1];
  if (!same_shape(logits, targets))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_softmax_xent: targets %s must have the logits' shape %s", SH(targets),
                     SH(logits));
  if (out_grad && !same_shape(logits, out_grad))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_softmax_xent: out_grad %s must have the logits' shape %s",
                     SH(out_grad), SH(logits));
  if (out_loss && out_loss->numel != 1)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_softmax_xent: out_loss %s must hold one element", SH(out_loss));
  if (out_loss && (out_loss == logits || out_loss == targets || out_loss == out_grad))
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_softmax_xent: out_loss must be a tensor of its own");
  if (out_grad && (out_grad == logits || out_grad == targets))
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_softmax_xent: out_grad must not be an input");
  as_rows_cols(logits, &op->rows, &op->cols);
  if (op->rows == 0) return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_softmax_xent: the logits have no rows");
  /* The mean may be over a larger batch than these rows (a data-parallel rank's share): i[0] rows. */
  const int64_t over = p->i[0] ? p->i[0] : op->rows;
  if (over < op->rows || over > ((int64_t)1 << 40))
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT,
                     "weft_op_softmax_xent: the mean is over %lld rows (params i[0]); it must be 0 or at least the "
                     "logits' %lld rows",
                     (long long)p->i[0], (long long)op->rows);
  op->iparam[0] = over;
  op->inv_rows = weft_fpenv_recip(over); /* rounded to nearest whatever the caller's environment */
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------ transformer ops */

/* tok (and pos) [B,T] or [T] (B = 1): B and T. */
static weft_status bt_of(weft_fabric *f, const char *fn, const char *what, const weft_tensor *t, int64_t *B, int64_t *T) {
  if (t->ndim == 1) *B = 1, *T = t->dims[0];
  else if (t->ndim == 2) *B = t->dims[0], *T = t->dims[1];
  else return weft_fail(f, WEFT_ERR_SHAPE, "%s: %s %s must be [B,T] (or [T])", fn, what, SH(t));
  return WEFT_OK;
}

static weft_status embedding_shapes(weft_fabric *f, weft_op *op, const char *fn, weft_tensor *tok, weft_tensor *pos,
                                    weft_tensor *act, const char *act_name, weft_tensor *wte, weft_tensor *wpe) {
  int64_t B = 0, T = 0, C;
  weft_status st = bt_of(f, fn, "tok", tok, &B, &T);
  if (st != WEFT_OK) return st;
  if (pos && !same_shape(pos, tok)) return weft_fail(f, WEFT_ERR_SHAPE, "%s: pos %s must have tok's shape %s", fn, SH(pos), SH(tok));
  C = act->dims[act->ndim - 1];
  int64_t btc = 0; /* B*T and C come from different tensors: their product may not fit */
  if (__builtin_mul_overflow(B * T, C, &btc) || (int64_t)act->numel != btc ||
      (act->ndim == 3 && (act->dims[0] != B || act->dims[1] != T)))
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: %s %s must be [B,T,C] = [%lld,%lld,C] for tok %s", fn, act_name, SH(act),
                     (long long)B, (long long)T, SH(tok));
  /* a table not given bounds nothing: its rows are taken as the largest an int32 index can name */
  int64_t V = (int64_t)1 << 31, P = (int64_t)1 << 31;
  if (wte) {
    if (wte->ndim != 2 || wte->dims[1] != C)
      return weft_fail(f, WEFT_ERR_SHAPE, "%s: the token table %s must be [V,%lld]", fn, SH(wte), (long long)C);
    V = wte->dims[0];
  }
  if (wpe) {
    if (wpe->ndim != 2 || wpe->dims[1] != C)
      return weft_fail(f, WEFT_ERR_SHAPE, "%s: the position table %s must be [P,%lld]", fn, SH(wpe), (long long)C);
    P = wpe->dims[0];
  }
  if (wte && (st = check_indices(f, fn, "tok", tok, V)) != WEFT_OK) return st;
  if (wpe && pos && (st = check_indices(f, fn, "pos", pos, P)) != WEFT_OK) return st;
  if (wpe && !pos && T > P)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: with pos NULL, positions run to %lld but the position table has %lld rows",
                     fn, (long long)(T - 1), (long long)P);
  op->iparam[0] = B, op->iparam[1] = T, op->iparam[2] = C, op->iparam[3] = V, op->iparam[4] = P;
  op->rows = B * T, op->cols = C;
  return WEFT_OK;
}

static weft_status v_embedding(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                               const weft_op_params *p) {
  (void)p;
  return embedding_shapes(f, op, "weft_op_embedding", in[0], in[1], out[0], "out", in[2], in[3]);
}

static weft_status v_embedding_backward(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                        const weft_op_params *p) {
  (void)p;
  weft_status st = embedding_shapes(f, op, "weft_op_embedding_backward", in[1], in[2], in[0], "dout", out[0], out[1]);
  if (st == WEFT_OK) op->rows = out[0] ? op->iparam[3] : op->iparam[4]; /* the first table's size */
  return st;
}

static weft_status v_layernorm(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                               const weft_op_params *p) {
  weft_tensor *x = in[0], *g = in[1], *b = in[2], *y = out[0], *mean = out[1], *rstd = out[2];
  int64_t N, C;
  as_rows_cols(x, &N, &C);
  if (!same_shape(x, y)) return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_layernorm: y %s must have x's shape %s", SH(y), SH(x));
  if ((int64_t)g->numel != C || (int64_t)b->numel != C)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_layernorm: gamma %s and beta %s must hold C = %lld elements", SH(g), SH(b),
                     (long long)C);
  if ((mean && (int64_t)mean->numel != N) || (rstd && (int64_t)rstd->numel != N))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_layernorm: mean and rstd must hold one element per row (%lld)", (long long)N);
  op->iparam[0] = N, op->iparam[1] = C, op->fparam[0] = p->f[0];
  op->rows = N, op->cols = C;
  return WEFT_OK;
}

static weft_status v_layernorm_backward(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                        const weft_op_params *p) {
  (void)p;
  weft_tensor *dy = in[0], *x = in[1], *mean = in[2], *rstd = in[3], *g = in[4];
  weft_tensor *dx = out[0], *dg = out[1], *db = out[2];
  int64_t N, C;
  as_rows_cols(x, &N, &C);
  if (!same_shape(x, dy) || !same_shape(x, dx))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_layernorm_backward: dy %s, x %s and dx %s must have one shape", SH(dy),
                     SH(x), SH(dx));
  if ((int64_t)mean->numel != N || (int64_t)rstd->numel != N)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_layernorm_backward: mean %s and rstd %s must hold one element per row (%lld)",
                     SH(mean), SH(rstd), (long long)N);
  if ((int64_t)g->numel != C || (dg && (int64_t)dg->numel != C) || (db && (int64_t)db->numel != C))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_layernorm_backward: gamma, dgamma and dbeta must hold C = %lld elements",
                     (long long)C);
  op->iparam[0] = N, op->iparam[1] = C;
  op->rows = N, op->cols = C;
  return WEFT_OK;
}

static weft_status v_gelu_backward(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                   const weft_op_params *p) {
  (void)p;
  if (!same_shape(in[0], in[1]) || !same_shape(in[0], out[0]))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_gelu_backward: x %s, dy %s and dx %s must have one shape", SH(in[0]),
                     SH(in[1]), SH(out[0]));
  as_rows_cols(in[0], &op->rows, &op->cols);
  op->iparam[0] = (int64_t)in[0]->numel;
  return WEFT_OK;
}

static weft_status attn_shapes(weft_fabric *f, weft_op *op, const char *fn, weft_tensor *qkv, int64_t NH,
                               weft_tensor *act, const char *act_name, weft_tensor *att, const char *att_name,
                               weft_tensor *att2) {
  if (qkv->ndim != 3 || qkv->dims[2] % 3 != 0)
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: qkv %s must be [B,T,3C]", fn, SH(qkv));
  const int64_t B = qkv->dims[0], T = qkv->dims[1], C = qkv->dims[2] / 3;
  if (NH <= 0 || C % NH != 0)
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: %lld heads do not divide C = %lld", fn, (long long)NH, (long long)C);
  if (act->ndim != 3 || act->dims[0] != B || act->dims[1] != T || act->dims[2] != C)
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: %s %s must be [B,T,C] = [%lld,%lld,%lld]", fn, act_name, SH(act),
                     (long long)B, (long long)T, (long long)C);
  weft_tensor *as[2] = {att, att2};
  for (int i = 0; i < 2; i++)
    if (as[i] && (as[i]->ndim != 4 || as[i]->dims[0] != B || as[i]->dims[1] != NH || as[i]->dims[2] != T ||
                  as[i]->dims[3] != T))
      return weft_fail(f, WEFT_ERR_SHAPE, "%s: %s %s must be [B,NH,T,T] = [%lld,%lld,%lld,%lld]", fn,
                       i ? "preatt" : att_name, SH(as[i]), (long long)B, (long long)NH, (long long)T, (long long)T);
  op->iparam[0] = B, op->iparam[1] = T, op->iparam[2] = C, op->iparam[3] = NH;
  op->rows = B * T, op->cols = C;
  return WEFT_OK;
}

static weft_status v_attention(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                               const weft_op_params *p) {
  return attn_shapes(f, op, "weft_op_attention", in[0], p->i[0], out[0], "out", out[1], "att", out[2]);
}

static weft_status v_attention_cached(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                      const weft_op_params *p) {
  static const char fn[] = "weft_op_attention_cached";
  weft_tensor *qkv = in[0], *o = out[0], *att = out[1];
  const int64_t NH = p->i[0], t0 = p->i[1];
  if (qkv->ndim != 3 || qkv->dims[2] % 3 != 0)
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: qkv %s must be the cache [B,Tmax,3C]", fn, SH(qkv));
  const int64_t B = qkv->dims[0], Tmax = qkv->dims[1], C = qkv->dims[2] / 3;
  if (NH <= 0 || C % NH != 0)
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: %lld heads do not divide C = %lld", fn, (long long)NH, (long long)C);
  if (o->ndim != 3 || o->dims[0] != B || o->dims[2] != C)
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: out %s must be [B,Tq,C] = [%lld,Tq,%lld]", fn, SH(o), (long long)B,
                     (long long)C);
  const int64_t Tq = o->dims[1];
  if (t0 < 0 || t0 > Tmax || Tq > Tmax - t0)
    return weft_fail(f, WEFT_ERR_SHAPE,
                     "%s: query positions from t0 = %lld, %lld of them, must lie in the cache's %lld positions (qkv %s)",
                     fn, (long long)t0, (long long)Tq, (long long)Tmax, SH(qkv));
  if (att && (att->ndim != 4 || att->dims[0] != B || att->dims[1] != NH || att->dims[2] != Tq || att->dims[3] != Tmax))
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: att %s must be [B,NH,Tq,Tmax] = [%lld,%lld,%lld,%lld]", fn, SH(att),
                     (long long)B, (long long)NH, (long long)Tq, (long long)Tmax);
  op->iparam[0] = B, op->iparam[1] = Tmax, op->iparam[2] = C, op->iparam[3] = NH, op->iparam[4] = t0;
  op->iparam[5] = Tq;
  op->rows = B * Tq, op->cols = C;
  return WEFT_OK;
}

static weft_status v_attention_backward(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                        const weft_op_params *p) {
  weft_status st = attn_shapes(f, op, "weft_op_attention_backward", in[1], p->i[0], in[0], "dout", in[2], "att", NULL);
  if (st != WEFT_OK) return st;
  if (!same_shape(out[0], in[1]))
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_attention_backward: dqkv %s must have qkv's shape %s", SH(out[0]), SH(in[1]));
  op->cols = 3 * op->iparam[2];
  return WEFT_OK;
}

static weft_status v_causal_softmax(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                    const weft_op_params *p) {
  const char *fn = op->kind == WEFT_OP_CAUSAL_SOFTMAX ? "weft_op_causal_softmax" : "weft_op_causal_softmax_backward";
  weft_tensor *s = in[0];
  if (s->ndim < 2 || s->dims[s->ndim - 1] != s->dims[s->ndim - 2])
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: %s %s must be [..,T,T]", fn, op->kind == WEFT_OP_CAUSAL_SOFTMAX ? "scores" : "probs", SH(s));
  for (int i = 1; i < 2; i++)
    if (op->kind == WEFT_OP_CAUSAL_SOFTMAX_BACKWARD && !same_shape(s, in[i]))
      return weft_fail(f, WEFT_ERR_SHAPE, "%s: dprobs %s must have probs' shape %s", fn, SH(in[i]), SH(s));
  if (!same_shape(s, out[0]))
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: the output %s must have the input's shape %s", fn, SH(out[0]), SH(s));
  const int64_t T = s->dims[s->ndim - 1];
  op->iparam[0] = (int64_t)s->numel / (T * T), op->iparam[1] = T, op->fparam[0] = p->f[0];
  op->rows = op->iparam[0] * T, op->cols = T;
  return WEFT_OK;
}

static weft_status v_crossentropy(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                  const weft_op_params *p) {
  (void)p;
  const int back = op->kind == WEFT_OP_CROSSENTROPY_BACKWARD;
  const char *fn = back ? "weft_op_crossentropy_backward" : "weft_op_crossentropy";
  weft_tensor *logits = in[0], *tg = in[1];
  int64_t N, V;
  as_rows_cols(logits, &N, &V);
  if ((int64_t)tg->numel != N)
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: targets %s must hold one index per row of the logits %s (%lld)", fn, SH(tg),
                     SH(logits), (long long)N);
  if (back) {
    if ((int64_t)in[2]->numel != N)
      return weft_fail(f, WEFT_ERR_SHAPE, "%s: dloss %s must hold one element per row (%lld)", fn, SH(in[2]), (long long)N);
    if (!same_shape(out[0], logits))
      return weft_fail(f, WEFT_ERR_SHAPE, "%s: dlogits %s must have the logits' shape %s", fn, SH(out[0]), SH(logits));
  } else if ((int64_t)out[0]->numel != N) {
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: losses %s must hold one element per row (%lld)", fn, SH(out[0]), (long long)N);
  }
  weft_status st = check_indices(f, fn, "targets", tg, V);
  if (st != WEFT_OK) return st;
  op->iparam[0] = N, op->iparam[1] = V;
  op->rows = back ? N : 1, op->cols = back ? V : N;
  return WEFT_OK;
}

static weft_status v_adamw(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                           const weft_op_params *p) {
  weft_tensor *g = in[0];
  for (int o = 0; o < 3; o++)
    if (out[o]->numel != g->numel)
      return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_adamw: param %s, grad %s, m %s and v %s must hold one number of elements",
                       SH(out[0]), SH(g), SH(out[1]), SH(out[2]));
  if (out[0] == out[1] || out[0] == out[2] || out[1] == out[2])
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_adamw: param, m and v must be three different tensors");
  /* hyperparameters that would make every parameter NaN or infinite, refused before anything is written:
   * lr, eps and weight_decay finite, betas in [0, 1), bias corrections (given directly through weft_op_run)
   * finite and above 0 */
  static const char *const names[7] = {"lr", "beta1", "beta2", "eps", "weight_decay", "bias correction 1",
                                       "bias correction 2"};
  for (int i = 0; i < 7; i++) {
    const float x = p->f[i];
    const int beta = i == 1 || i == 2, bc = i >= 5;
    const int ok = beta ? (x >= 0.0f && x < 1.0f) : bc ? (isfinite(x) && x > 0.0f) : isfinite(x);
    if (!ok)
      return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_adamw: %s is %g; it must be %s", names[i], (double)x,
                       beta ? "in [0, 1)" : bc ? "finite and above 0 (1 - beta^step)" : "finite");
  }
  op->iparam[0] = (int64_t)g->numel;
  for (int i = 0; i < 7; i++) op->fparam[i] = p->f[i];
  op->rows = 1, op->cols = (int64_t)g->numel;
  return WEFT_OK;
}

/* SUMSQ is never split across lanes: its chunks (WEFT_SUMSQ_CHUNK) count from x's first element, and its
 * partials are added to acc in order (h_sumsq below). */
static weft_status v_sumsq(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                           const weft_op_params *p) {
  (void)p;
  if (out[0]->numel != 1)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_sumsq: acc %s must hold one element", SH(out[0]));
  op->iparam[0] = (int64_t)in[0]->numel;
  op->rows = 1, op->cols = (int64_t)in[0]->numel; /* the work; the output is one element */
  return WEFT_OK;
}

static weft_status v_permute(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                             const weft_op_params *p) {
  weft_tensor *x = in[0], *y = out[0];
  const int r = x->ndim;
  int seen = 0;
  for (int a = 0; a < r; a++) {
    if (p->i[a] < 0 || p->i[a] >= r || (seen >> p->i[a]) & 1)
      return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_permute: perm is not a permutation of 0..%d", r - 1);
    seen |= 1 << p->i[a];
  }
  int ok = y->ndim == r;
  for (int a = 0; ok && a < r; a++) ok = y->dims[a] == x->dims[p->i[a]];
  if (!ok) return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_permute: y %s must be x %s's dims in perm's order", SH(y), SH(x));
  op->iparam[0] = r;
  int64_t packed = 0;
  for (int a = 0; a < 4; a++) {
    op->iparam[1 + a] = a < r ? x->dims[a] : 1;
    packed |= (a < r ? p->i[a] : a) << (2 * a);
  }
  op->iparam[5] = packed;
  op->rows = 1, op->cols = (int64_t)x->numel;
  return WEFT_OK;
}

static weft_status v_copy_slice(weft_fabric *f, weft_op *op, weft_tensor *const *in, weft_tensor *const *out,
                                const weft_op_params *p) {
  weft_tensor *s = in[0], *d = out[0];
  const int64_t axis = p->i[0], off = p->i[1];
  if (s->ndim != d->ndim)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_copy_slice: src %s and dst %s must have one rank", SH(s), SH(d));
  if (axis < 0 || axis >= s->ndim)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_op_copy_slice: axis %lld is not an axis of a rank-%d tensor",
                     (long long)axis, s->ndim);
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < s->ndim; a++) {
    if (a != axis && s->dims[a] != d->dims[a])
      return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_copy_slice: src %s and dst %s differ on axis %d (only axis %lld may)",
                       SH(s), SH(d), a, (long long)axis);
    if (a < axis) outer *= s->dims[a];
    if (a > axis) inner *= s->dims[a];
  }
  if (off < 0 || off > d->dims[axis] - s->dims[axis])
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_op_copy_slice: %lld rows at offset %lld do not fit dst's %lld on axis %lld",
                     (long long)s->dims[axis], (long long)off, (long long)d->dims[axis], (long long)axis);
  op->iparam[0] = outer, op->iparam[1] = s->dims[axis], op->iparam[2] = d->dims[axis], op->iparam[3] = inner;
  op->iparam[4] = off;
  op->rows = 1, op->cols = (int64_t)s->numel;
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------------- the list */

const weft_op_validate_fn weft_op_validators[WEFT_OP_COUNT] = {
    [WEFT_OP_MATMUL] = v_matmul,
    [WEFT_OP_ADD] = v_add,
    [WEFT_OP_RELU] = v_unary,
    [WEFT_OP_RELU_BACKWARD] = v_relu_backward,
    [WEFT_OP_SCALE] = v_unary,
    [WEFT_OP_AXPY] = v_axpy,
    [WEFT_OP_SUM_ROWS] = v_sum_rows,
    [WEFT_OP_SOFTMAX_XENT] = v_softmax_xent,
    [WEFT_OP_EMBEDDING] = v_embedding,
    [WEFT_OP_EMBEDDING_BACKWARD] = v_embedding_backward,
    [WEFT_OP_LAYERNORM] = v_layernorm,
    [WEFT_OP_LAYERNORM_BACKWARD] = v_layernorm_backward,
    [WEFT_OP_GELU] = v_unary,
    [WEFT_OP_GELU_BACKWARD] = v_gelu_backward,
    [WEFT_OP_ATTENTION] = v_attention,
    [WEFT_OP_ATTENTION_BACKWARD] = v_attention_backward,
    [WEFT_OP_CAUSAL_SOFTMAX] = v_causal_softmax,
    [WEFT_OP_CAUSAL_SOFTMAX_BACKWARD] = v_causal_softmax,
    [WEFT_OP_CROSSENTROPY] = v_crossentropy,
    [WEFT_OP_CROSSENTROPY_BACKWARD] = v_crossentropy,
    [WEFT_OP_ADAMW] = v_adamw,
    [WEFT_OP_SUMSQ] = v_sumsq,
    [WEFT_OP_PERMUTE] = v_permute,
    [WEFT_OP_COPY_SLICE] = v_copy_slice,
    [WEFT_OP_ATTENTION_CACHED] = v_attention_cached,
    [WEFT_OP_MATMUL_ACC] = v_matmul,
};
