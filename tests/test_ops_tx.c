/* test_ops_tx.c - the transformer ops through the public API (the op table, weft_op_run and the typed
 * wrappers) on the CPU lane, bit for bit against reference_tx's kernels called directly: every op on
 * random inputs of small GPT-2-like shapes, the in-place and aliasing rules, dtype and index errors (which
 * change nothing), int32 tensors and reshape, the lanes' op sets (a lane that offers only matmul is routed
 * around and refuses a pinned layernorm), and a small GPT-2 block forward + backward + clip + AdamW whose
 * every bit matches the same chain run on the reference functions; and every op the CPU lane runs on its
 * threaded kernels at sizes it splits, with 1, 3 and 8 threads, called one by one and queued as a chain,
 * with matmuls of 1 and 4 rows (B read in place), and a few ops under fp32 (close to the reference).
 * attention_cached (decode) against the fused forward's rows over the cache's filled prefix. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference.h"
#include "core/optable.h"
#include "core/reference_tx.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft_lane.h"

static weft_fabric *F;
static tu_rng R;

static float *rnd(size_t n, float lo, float hi) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = tu_rng_float(&R, lo, hi);
  return p;
}
static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static int32_t *idx(size_t n, int64_t limit) {
  int32_t *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (int32_t)tu_rng_int(&R, 0, limit - 1);
  return p;
}

static weft_tensor *tf(int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3, const float *data) {
  const int64_t d[4] = {d0, d1, d2, d3};
  weft_tensor *t = NULL;
  weft_status st = weft_tensor_create(F, nd, d, data, &t);
  TU_CHECK(st == WEFT_OK, "create f32: %s", weft_fabric_last_error(F));
  return t;
}
static weft_tensor *ti(int nd, int64_t d0, int64_t d1, const int32_t *data) {
  const int64_t d[2] = {d0, d1};
  weft_tensor *t = NULL;
  weft_status st = weft_tensor_create_typed(F, WEFT_DTYPE_I32, nd, d, data, &t);
  TU_CHECK(st == WEFT_OK, "create i32: %s", weft_fabric_last_error(F));
  return t;
}

/* t's value has exactly the bits of want[0..n). */
static void same(weft_tensor *t, const float *want, size_t n, const char *what) {
  float *got = malloc((n ? n : 1) * sizeof *got);
  weft_status st = weft_tensor_read(t, got, n);
  TU_CHECK(st == WEFT_OK, "%s: read: %s", what, weft_fabric_last_error(F));
  size_t bad = n;
  for (size_t i = 0; st == WEFT_OK && i < n && bad == n; i++)
    if (tu_bits(got[i]) != tu_bits(want[i])) bad = i;
  TU_CHECK(bad == n, "%s: element %zu is %.9g (0x%08x), the reference gives %.9g (0x%08x)", what, bad,
           bad < n ? (double)got[bad] : 0.0, bad < n ? tu_bits(got[bad]) : 0u, bad < n ? (double)want[bad] : 0.0,
           bad < n ? tu_bits(want[bad]) : 0u);
  free(got);
}

/* t's value within 1e-4 of want's largest magnitude (the fp32 contract: fused and reordered sums). */
static void near(weft_tensor *t, const float *want, size_t n, const char *what) {
  float *got = malloc((n ? n : 1) * sizeof *got);
  weft_status st = weft_tensor_read(t, got, n);
  TU_CHECK(st == WEFT_OK, "%s: read: %s", what, weft_fabric_last_error(F));
  float scale = 0.0f;
  for (size_t i = 0; i < n; i++) scale = fabsf(want[i]) > scale ? fabsf(want[i]) : scale;
  size_t bad = n;
  for (size_t i = 0; st == WEFT_OK && i < n && bad == n; i++)
    if (!(fabsf(got[i] - want[i]) <= 1e-4f * scale)) bad = i;
  TU_CHECK(bad == n, "%s: element %zu is %.9g, the reference gives %.9g (scale %g)", what, bad,
           bad < n ? (double)got[bad] : 0.0, bad < n ? (double)want[bad] : 0.0, (double)scale);
  free(got);
}

static void ok(weft_status st, const char *what) {
  TU_CHECK(st == WEFT_OK, "%s: %s (%s)", what, weft_status_str(st), weft_fabric_last_error(F));
}

/* ------------------------------------------------------------------------------------ each op */

enum { B = 2, T = 7, C = 24, NH = 3, V = 41, N = B * T };

static void test_embedding(void) {
  int32_t *tok = idx(N, V), *pos = idx(N, T);
  float *wte = rnd((size_t)V * C, -1, 1), *wpe = rnd((size_t)T * C, -1, 1);
  weft_tensor *ttok = ti(2, B, T, tok), *tpos = ti(2, B, T, pos), *twte = tf(2, V, C, 0, 0, wte),
              *twpe = tf(2, T, C, 0, 0, wpe), *out = tf(3, B, T, C, 0, NULL);
  float *ref = zeros((size_t)N * C);
  for (int with_pos = 0; with_pos < 2; with_pos++) {
    ok(weft_op_embedding(F, NULL, ttok, with_pos ? tpos : NULL, twte, twpe, out), "embedding");
    ok(weft_ref_embedding_forward(ref, tok, with_pos ? pos : NULL, wte, wpe, B, T, C, V, T), "ref embedding");
    same(out, ref, (size_t)N * C, with_pos ? "embedding (pos)" : "embedding (pos = t)");
  }
  /* backward: accumulated into what the tables held */
  float *dout = rnd((size_t)N * C, -1, 1), *dwte = rnd((size_t)V * C, -1, 1), *dwpe = rnd((size_t)T * C, -1, 1);
  weft_tensor *tdout = tf(3, B, T, C, 0, dout), *tdwte = tf(2, V, C, 0, 0, dwte), *tdwpe = tf(2, T, C, 0, 0, dwpe);
  ok(weft_op_embedding_backward(F, NULL, tdout, ttok, tpos, tdwte, tdwpe), "embedding_backward");
  ok(weft_ref_embedding_backward(dwte, dwpe, dout, tok, pos, B, T, C, V, T), "ref embedding_backward");
  same(tdwte, dwte, (size_t)V * C, "embedding_backward dwte");
  same(tdwpe, dwpe, (size_t)T * C, "embedding_backward dwpe");
  /* only one table */
  ok(weft_op_embedding_backward(F, NULL, tdout, ttok, NULL, NULL, tdwpe), "embedding_backward (dwpe only)");
  ok(weft_ref_embedding_backward(NULL, dwpe, dout, tok, NULL, B, T, C, V, T), "ref embedding_backward (dwpe only)");
  same(tdwpe, dwpe, (size_t)T * C, "embedding_backward dwpe only");
  TU_STATUS(weft_op_embedding_backward(F, NULL, tdout, ttok, NULL, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT,
            "embedding_backward with no table");

  /* an index out of range: a clear error, and nothing written */
  int32_t bad[N];
  memcpy(bad, tok, sizeof bad);
  bad[5] = V;
  ok(weft_tensor_write_i32(ttok, bad, N), "write bad tok");
  float *before = zeros((size_t)N * C);
  ok(weft_tensor_read(out, before, (size_t)N * C), "read out");
  weft_status st = weft_op_embedding(F, NULL, ttok, NULL, twte, twpe, out);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(F), "tok[5]") &&
               tu_contains(weft_fabric_last_error(F), "outside"),
           "a token id of V: %s (%s)", weft_status_str(st), weft_fabric_last_error(F));
  same(out, before, (size_t)N * C, "out after a refused lookup");
  bad[5] = -1;
  ok(weft_tensor_write_i32(ttok, bad, N), "write bad tok");
  st = weft_op_embedding_backward(F, NULL, tdout, ttok, NULL, tdwte, NULL);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "a token id of -1 in the backward: %s", weft_status_str(st));
  same(tdwte, dwte, (size_t)V * C, "dwte after a refused backward");
  /* positions beyond the table when pos is NULL */
  weft_tensor *small = tf(2, T - 1, C, 0, 0, NULL);
  ok(weft_tensor_write_i32(ttok, tok, N), "write tok");
  TU_STATUS(weft_op_embedding(F, NULL, ttok, NULL, twte, small, out), WEFT_ERR_INVALID_ARGUMENT,
            "pos = t beyond the position table");
  /* dtypes: a float tensor where indices are wanted, an int tensor where floats are */
  st = weft_op_embedding(F, NULL, twte, NULL, twte, twpe, out);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(F), "tok is an f32 tensor"),
           "f32 tok: %s", weft_fabric_last_error(F));
  st = weft_op_embedding(F, NULL, ttok, NULL, ttok, twpe, out);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(F), "wte is an i32 tensor"),
           "i32 wte: %s", weft_fabric_last_error(F));
  weft_tensor *objs[] = {ttok, tpos, twte, twpe, out, tdout, tdwte, tdwpe, small};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(tok), free(pos), free(wte), free(wpe), free(ref), free(dout), free(dwte), free(dwpe), free(before);
}

static void test_layernorm(void) {
  float *x = rnd((size_t)N * C, -2, 2), *g = rnd(C, 0.5f, 1.5f), *b = rnd(C, -0.5f, 0.5f);
  float *y = zeros((size_t)N * C), *mean = zeros(N), *rstd = zeros(N);
  weft_tensor *tx = tf(3, B, T, C, 0, x), *tg = tf(1, C, 0, 0, 0, g), *tb = tf(1, C, 0, 0, 0, b),
              *ty = tf(3, B, T, C, 0, NULL), *tm = tf(1, N, 0, 0, 0, NULL), *tr = tf(2, B, T, 0, 0, NULL);
  ok(weft_op_layernorm(F, NULL, tx, tg, tb, 1e-5f, ty, tm, tr), "layernorm");
  weft_ref_layernorm_forward(y, mean, rstd, x, g, b, N, C, 1e-5f);
  same(ty, y, (size_t)N * C, "layernorm y");
  same(tm, mean, N, "layernorm mean");
  same(tr, rstd, N, "layernorm rstd");
  /* in place: y may be x */
  weft_tensor *tx2 = tf(3, B, T, C, 0, x);
  ok(weft_op_layernorm(F, NULL, tx2, tg, tb, 1e-5f, tx2, NULL, NULL), "layernorm in place");
  same(tx2, y, (size_t)N * C, "layernorm in place");
  /* backward; dgamma, dbeta accumulate */
  float *dy = rnd((size_t)N * C, -1, 1), *dx = zeros((size_t)N * C), *dg = rnd(C, -1, 1), *db = rnd(C, -1, 1);
  weft_tensor *tdy = tf(3, B, T, C, 0, dy), *tdx = tf(3, B, T, C, 0, NULL), *tdg = tf(1, C, 0, 0, 0, dg),
              *tdb = tf(1, C, 0, 0, 0, db);
  ok(weft_op_layernorm_backward(F, NULL, tdy, tx, tm, tr, tg, tdx, tdg, tdb), "layernorm_backward");
  weft_ref_layernorm_backward(dx, dg, db, dy, x, mean, rstd, g, N, C);
  same(tdx, dx, (size_t)N * C, "layernorm_backward dx");
  same(tdg, dg, C, "layernorm_backward dgamma");
  same(tdb, db, C, "layernorm_backward dbeta");
  /* dx may be dy */
  ok(weft_op_layernorm_backward(F, NULL, tdy, tx, tm, tr, tg, tdy, NULL, NULL), "layernorm_backward dx = dy");
  same(tdy, dx, (size_t)N * C, "layernorm_backward in place");
  /* refused: shapes, aliasing, dtypes */
  weft_tensor *wrong = tf(1, C + 1, 0, 0, 0, NULL);
  TU_STATUS(weft_op_layernorm(F, NULL, tx, wrong, tb, 1e-5f, ty, NULL, NULL), WEFT_ERR_SHAPE, "gamma of C+1");
  weft_status st = weft_op_layernorm(F, NULL, tx, tg, tb, 1e-5f, ty, tr, tr);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(F), "mean and rstd"),
           "mean and rstd one tensor: %s", weft_fabric_last_error(F));
  st = weft_op_layernorm(F, NULL, tx, tg, tb, 1e-5f, ty, tg, NULL);
  TU_CHECK(st != WEFT_OK, "mean = gamma accepted");
  int32_t zi[C] = {0};
  weft_tensor *ig = ti(1, C, 0, zi);
  st = weft_op_layernorm(F, NULL, tx, ig, tb, 1e-5f, ty, NULL, NULL);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(F), "gamma is an i32 tensor"),
           "i32 gamma: %s", weft_fabric_last_error(F));
  same(ty, y, (size_t)N * C, "y after refused calls");
  weft_tensor *objs[] = {tx, tg, tb, ty, tm, tr, tx2, tdy, tdx, tdg, tdb, wrong, ig};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(x), free(g), free(b), free(y), free(mean), free(rstd), free(dy), free(dx), free(dg), free(db);
}

static void test_gelu(void) {
  const size_t n = (size_t)N * 4 * C;
  float *x = rnd(n, -5, 5), *dy = rnd(n, -1, 1), *y = zeros(n), *dx = zeros(n);
  x[0] = -0.0f, x[1] = 1e-40f, x[2] = 1e30f;
  weft_tensor *tx = tf(2, N, 4 * C, 0, 0, x), *ty = tf(2, N, 4 * C, 0, 0, NULL), *tdy = tf(2, N, 4 * C, 0, 0, dy),
              *tdx = tf(2, N, 4 * C, 0, 0, NULL);
  ok(weft_op_gelu(F, NULL, tx, ty), "gelu");
  weft_ref_gelu_forward(y, x, (int64_t)n);
  same(ty, y, n, "gelu");
  ok(weft_op_gelu_backward(F, NULL, tx, tdy, tdx), "gelu_backward");
  weft_ref_gelu_backward(dx, x, dy, (int64_t)n);
  same(tdx, dx, n, "gelu_backward");
  ok(weft_op_gelu_backward(F, NULL, tx, tdy, tdy), "gelu_backward dx = dy");
  same(tdy, dx, n, "gelu_backward in place");
  ok(weft_op_gelu(F, NULL, tx, tx), "gelu in place");
  same(tx, y, n, "gelu in place");
  weft_tensor *wrong = tf(2, N, 4 * C + 1, 0, 0, NULL);
  TU_STATUS(weft_op_gelu(F, NULL, tx, wrong), WEFT_ERR_SHAPE, "gelu into another shape");
  weft_tensor *objs[] = {tx, ty, tdy, tdx, wrong};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(x), free(dy), free(y), free(dx);
}

static void test_attention(void) {
  const size_t nq = (size_t)N * 3 * C, na = (size_t)B * NH * T * T, no = (size_t)N * C;
  float *qkv = rnd(nq, -1, 1), *out = zeros(no), *att = zeros(na), *pre = zeros(na);
  weft_tensor *tq = tf(3, B, T, 3 * C, 0, qkv), *to = tf(3, B, T, C, 0, NULL), *ta = tf(4, B, NH, T, T, NULL),
              *tp = tf(4, B, NH, T, T, NULL);
  ok(weft_op_attention(F, NULL, tq, NH, to, ta, tp), "attention");
  ok(weft_ref_attention_forward(out, pre, att, qkv, B, T, C, NH), "ref attention");
  same(to, out, no, "attention out");
  same(ta, att, na, "attention att");
  same(tp, pre, na, "attention preatt");
  float *dout = rnd(no, -1, 1), *dqkv = zeros(nq);
  weft_tensor *tdo = tf(3, B, T, C, 0, dout), *tdq = tf(3, B, T, 3 * C, 0, NULL);
  ok(weft_op_attention_backward(F, NULL, tdo, tq, ta, NH, tdq), "attention_backward");
  ok(weft_ref_attention_backward(dqkv, dout, qkv, att, B, T, C, NH), "ref attention_backward");
  same(tdq, dqkv, nq, "attention_backward dqkv");
  /* heads that do not divide C; out = qkv refused */
  TU_STATUS(weft_op_attention(F, NULL, tq, 5, to, ta, NULL), WEFT_ERR_SHAPE, "5 heads of C = 24");
  weft_status st = weft_op_attention_backward(F, NULL, tdo, tq, ta, NH, tq);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(F), "dqkv must not be qkv"),
           "dqkv = qkv: %s", weft_fabric_last_error(F));
  /* the unfused form: causal softmax and its backward over [R,T,T] */
  const float scale = 0.35f;
  float *s = rnd(na, -3, 3), *p = zeros(na), *dp = rnd(na, -1, 1), *ds = zeros(na);
  weft_tensor *ts = tf(4, B, NH, T, T, s), *tpr = tf(3, B * NH, T, T, 0, NULL), *tdp = tf(4, B, NH, T, T, dp),
              *tds = tf(4, B, NH, T, T, NULL);
  weft_tensor_reshape(tpr, 4, (const int64_t[]){B, NH, T, T});
  ok(weft_op_causal_softmax(F, NULL, ts, scale, tpr), "causal_softmax");
  weft_ref_causal_softmax_forward(p, s, B * NH, T, scale);
  same(tpr, p, na, "causal_softmax");
  ok(weft_op_causal_softmax_backward(F, NULL, tpr, tdp, scale, tds), "causal_softmax_backward");
  weft_ref_causal_softmax_backward(ds, p, dp, B * NH, T, scale);
  same(tds, ds, na, "causal_softmax_backward");
  ok(weft_op_causal_softmax(F, NULL, ts, scale, ts), "causal_softmax in place");
  same(ts, p, na, "causal_softmax in place");
  TU_STATUS(weft_op_causal_softmax(F, NULL, to, scale, to), WEFT_ERR_SHAPE, "causal_softmax of [B,T,C]");
  weft_tensor *objs[] = {tq, to, ta, tp, tdo, tdq, ts, tpr, tdp, tds};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(qkv), free(out), free(att), free(pre), free(dout), free(dqkv), free(s), free(p), free(dp), free(ds);
}

/* The fused forward over the first n positions of a [B,Tmax,3C] cache (copied to [B,n,3C]): fout [B,n,C],
 * fatt [B,NH,n,n]. */
static void fused_prefix(float *fout, float *fatt, const float *cache, int64_t b_, int64_t tmax, int64_t c_,
                         int64_t nh, int64_t n) {
  float *q = zeros((size_t)(b_ * n * 3 * c_));
  for (int64_t b = 0; b < b_; b++)
    memcpy(q + b * n * 3 * c_, cache + b * tmax * 3 * c_, sizeof(float) * (size_t)(n * 3 * c_));
  ok(weft_ref_attention_forward(fout, NULL, fatt, q, b_, n, c_, nh), "ref attention over the prefix");
  free(q);
}

/* attention_cached: for (t0, Tq) pairs, out's rows are the fused forward's rows t0 .. t0+Tq-1 over the first
 * t0+Tq positions, bit for bit (the reference function, and the op on the lane, with att and without); att's
 * rows are the fused att's rows widened with zeros; the cache's rows past t0+Tq are NaN and never read. */
static void cached_case(int64_t b_, int64_t tmax, int64_t c_, int64_t nh, int64_t t0, int64_t tq) {
  char what[128];
  const int64_t n = t0 + tq;
  const size_t nq = (size_t)(b_ * tmax * 3 * c_), no = (size_t)(b_ * tq * c_), na = (size_t)(b_ * nh * tq * tmax);
  float *cache = rnd(nq, -2, 2);
  for (int64_t b = 0; b < b_; b++)
    for (size_t i = (size_t)(n * 3 * c_); i < (size_t)(tmax * 3 * c_); i++) cache[(size_t)(b * tmax * 3 * c_) + i] = __builtin_nanf("");
  float *fout = zeros((size_t)(b_ * n * c_)), *fatt = zeros((size_t)(b_ * nh * n * n));
  fused_prefix(fout, fatt, cache, b_, tmax, c_, nh, n);
  float *wout = zeros(no), *watt = zeros(na);
  for (int64_t b = 0; b < b_; b++)
    for (int64_t r = 0; r < tq; r++) {
      memcpy(wout + (b * tq + r) * c_, fout + (b * n + t0 + r) * c_, sizeof(float) * (size_t)c_);
      for (int64_t h = 0; h < nh; h++)
        memcpy(watt + ((b * nh + h) * tq + r) * tmax, fatt + ((b * nh + h) * n + t0 + r) * n, sizeof(float) * (size_t)n);
    }
  float *rout = zeros(no), *ratt = zeros(na);
  snprintf(what, sizeof what, "ref attention_cached B=%lld Tmax=%lld C=%lld NH=%lld t0=%lld Tq=%lld", (long long)b_,
           (long long)tmax, (long long)c_, (long long)nh, (long long)t0, (long long)tq);
  ok(weft_ref_attention_cached(rout, ratt, cache, b_, tmax, c_, nh, t0, tq), what);
  TU_CHECK(memcmp(rout, wout, no * 4) == 0 && memcmp(ratt, watt, na * 4) == 0, "%s: not the fused rows' bits", what);
  float *rout2 = zeros(no);
  ok(weft_ref_attention_cached(rout2, NULL, cache, b_, tmax, c_, nh, t0, tq), what);
  TU_CHECK(memcmp(rout2, wout, no * 4) == 0, "%s (att NULL): not the fused rows' bits", what);
  weft_tensor *tq_ = tf(3, b_, tmax, 3 * c_, 0, cache), *to = tf(3, b_, tq, c_, 0, NULL),
              *ta = tf(4, b_, nh, tq, tmax, NULL), *to2 = tf(3, b_, tq, c_, 0, NULL);
  snprintf(what, sizeof what, "attention_cached B=%lld Tmax=%lld C=%lld NH=%lld t0=%lld Tq=%lld", (long long)b_,
           (long long)tmax, (long long)c_, (long long)nh, (long long)t0, (long long)tq);
  ok(weft_op_attention_cached(F, NULL, tq_, nh, t0, to, ta), what);
  same(to, wout, no, what);
  same(ta, watt, na, what);
  ok(weft_op_attention_cached(F, NULL, tq_, nh, t0, to2, NULL), what);
  same(to2, wout, no, what);
  weft_tensor *objs[] = {tq_, to, ta, to2};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(cache), free(fout), free(fatt), free(wout), free(watt), free(rout), free(ratt), free(rout2);
}

static void test_attention_cached(void) {
  const int64_t pairs[][2] = {{0, 1}, {0, T}, {4, 1}, {T - 1, 1}, {2, 3}, {0, 4}, {3, T - 3}};
  for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) cached_case(B, T, C, NH, pairs[i][0], pairs[i][1]);
  cached_case(1, 12, C, NH, 5, 2); /* a cache longer than what is filled */
  cached_case(2, 80, 64, 4, 50, 13); /* sizes the lane's threads split, a vector tail in every row */
  cached_case(3, 70, 48, 2, 69, 1);
  /* bad input: nothing runs, the message says what is wrong */
  float *cache = rnd((size_t)B * T * 3 * C, -1, 1);
  weft_tensor *tq_ = tf(3, B, T, 3 * C, 0, cache), *to = tf(3, B, 2, C, 0, NULL), *ta = tf(4, B, NH, 2, T, NULL),
              *bad = tf(3, B, 2, C + 1, 0, NULL), *bada = tf(4, B, NH, 2, T - 1, NULL), *q2 = tf(2, B, 3 * C, 0, 0, cache);
  weft_status st = weft_op_attention_cached(F, NULL, tq_, NH, T - 1, to, ta);
  TU_CHECK(st == WEFT_ERR_SHAPE && tu_contains(weft_fabric_last_error(F), "must lie in the cache"), "t0+Tq > Tmax: %s",
           weft_fabric_last_error(F));
  TU_STATUS(weft_op_attention_cached(F, NULL, tq_, NH, -1, to, ta), WEFT_ERR_SHAPE, "t0 < 0");
  st = weft_op_attention_cached(F, NULL, tq_, 5, 0, to, ta);
  TU_CHECK(st == WEFT_ERR_SHAPE && tu_contains(weft_fabric_last_error(F), "heads do not divide"), "5 heads: %s",
           weft_fabric_last_error(F));
  TU_STATUS(weft_op_attention_cached(F, NULL, tq_, 0, 0, to, ta), WEFT_ERR_SHAPE, "0 heads");
  TU_STATUS(weft_op_attention_cached(F, NULL, tq_, NH, 0, bad, NULL), WEFT_ERR_SHAPE, "out [B,Tq,C+1]");
  TU_STATUS(weft_op_attention_cached(F, NULL, tq_, NH, 0, to, bada), WEFT_ERR_SHAPE, "att [B,NH,Tq,Tmax-1]");
  TU_STATUS(weft_op_attention_cached(F, NULL, q2, NH, 0, to, NULL), WEFT_ERR_SHAPE, "qkv of rank 2");
  TU_STATUS(weft_op_attention_cached(F, NULL, tq_, NH, 0, NULL, ta), WEFT_ERR_INVALID_ARGUMENT, "out NULL");
  TU_STATUS(weft_ref_attention_cached(cache, NULL, cache, B, T, C, NH, T - 1, 2), WEFT_ERR_SHAPE, "ref t0+Tq > Tmax");
  weft_tensor *objs[] = {tq_, to, ta, bad, bada, q2};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(cache);
}

static void test_crossentropy(void) {
  const size_t nl = (size_t)N * V;
  float *logits = rnd(nl, -4, 4), *loss = zeros(N), *dloss = rnd(N, 0, 1), *dl = zeros(nl);
  int32_t *tg = idx(N, V);
  weft_tensor *tz = tf(3, B, T, V, 0, logits), *tt = ti(2, B, T, tg), *tls = tf(1, N, 0, 0, 0, NULL),
              *tdl = tf(1, N, 0, 0, 0, dloss), *tdz = tf(3, B, T, V, 0, NULL);
  ok(weft_op_crossentropy(F, NULL, tz, tt, tls), "crossentropy");
  ok(weft_ref_crossentropy_forward(loss, logits, tg, N, V), "ref crossentropy");
  same(tls, loss, N, "crossentropy losses");
  ok(weft_op_crossentropy_backward(F, NULL, tz, tt, tdl, tdz), "crossentropy_backward");
  ok(weft_ref_crossentropy_backward(dl, logits, tg, dloss, N, V), "ref crossentropy_backward");
  same(tdz, dl, nl, "crossentropy_backward dlogits");
  /* f32 targets (softmax_xent's kind) where indices are wanted; a target of V */
  weft_status st = weft_op_crossentropy(F, NULL, tz, tls, tls);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(F), "targets is an f32 tensor"),
           "f32 targets: %s", weft_fabric_last_error(F));
  tg[N - 1] = V;
  ok(weft_tensor_write_i32(tt, tg, N), "write targets");
  st = weft_op_crossentropy(F, NULL, tz, tt, tls);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(F), "targets["),
           "target V: %s", weft_fabric_last_error(F));
  same(tls, loss, N, "losses after a refused call");
  /* i32 tensors: reading one as floats, or floats as int32, is refused */
  float fl[N];
  int32_t il[N];
  TU_STATUS(weft_tensor_read(tt, fl, N), WEFT_ERR_INVALID_ARGUMENT, "read an i32 tensor as f32");
  TU_STATUS(weft_tensor_read_i32(tls, il, N), WEFT_ERR_INVALID_ARGUMENT, "read an f32 tensor as i32");
  TU_STATUS(weft_tensor_write(tt, fl, N), WEFT_ERR_INVALID_ARGUMENT, "write floats into an i32 tensor");
  ok(weft_tensor_read_i32(tt, il, N), "read_i32");
  TU_CHECK(memcmp(il, tg, sizeof il) == 0, "read_i32 gives what was written");
  TU_CHECK(weft_tensor_dtype(tt) == WEFT_DTYPE_I32 && weft_tensor_dtype(tls) == WEFT_DTYPE_F32 &&
               weft_tensor_dtype(NULL) == WEFT_DTYPE_COUNT,
           "weft_tensor_dtype");
  /* an int tensor into a version-1 op */
  st = weft_op_relu(F, NULL, tt, tt);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(F), "i32"), "relu of i32: %s",
           weft_fabric_last_error(F));
  weft_tensor *objs[] = {tz, tt, tls, tdl, tdz};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(logits), free(loss), free(dloss), free(dl), free(tg);
}

static void test_adamw_clip(void) {
  const size_t n = 333;
  float *p = rnd(n, -1, 1), *g = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 0, 0.01f);
  weft_tensor *tp = tf(1, n, 0, 0, 0, p), *tg = tf(1, n, 0, 0, 0, g), *tm = tf(1, n, 0, 0, 0, m), *tv = tf(1, n, 0, 0, 0, v);
  for (int64_t step = 1; step <= 3; step++) {
    ok(weft_op_adamw(F, NULL, tp, tg, tm, tv, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, step), "adamw");
    weft_ref_adamw(p, g, m, v, (int64_t)n, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, weft_ref_adamw_bias_correction(0.9f, step),
                   weft_ref_adamw_bias_correction(0.999f, step));
  }
  same(tp, p, n, "adamw param");
  same(tm, m, n, "adamw m");
  same(tv, v, n, "adamw v");
  TU_STATUS(weft_op_adamw(F, NULL, tp, tg, tm, tm, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 1), WEFT_ERR_INVALID_ARGUMENT,
            "adamw with m = v");
  TU_STATUS(weft_op_adamw(F, NULL, tp, tg, tm, tv, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 0), WEFT_ERR_INVALID_ARGUMENT,
            "adamw step 0");
  same(tp, p, n, "param after refused steps");
  /* the global-norm clip over three gradients, clipped and not */
  float *g2 = rnd(50, -3, 3), *g3 = rnd(7, -3, 3);
  weft_tensor *tg2 = tf(2, 5, 10, 0, 0, g2), *tg3 = tf(1, 7, 0, 0, 0, g3);
  for (int round = 0; round < 2; round++) {
    const float max_norm = round ? 1e6f : 1.0f;
    float *gs[3] = {g, g2, g3};
    const int64_t sizes[3] = {(int64_t)n, 50, 7};
    const float want = weft_ref_grad_clip(gs, sizes, 3, max_norm);
    weft_tensor *const tgs[3] = {tg, tg2, tg3};
    float norm = -1;
    ok(weft_grad_clip(F, NULL, tgs, 3, max_norm, &norm), "grad_clip");
    TU_CHECK(tu_bits(norm) == tu_bits(want), "grad_clip norm %.9g, the reference %.9g", (double)norm, (double)want);
    same(tg, g, n, "clipped grads[0]");
    same(tg2, g2, 50, "clipped grads[1]");
    same(tg3, g3, 7, "clipped grads[2]");
  }
  weft_tensor *objs[] = {tp, tg, tm, tv, tg2, tg3};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(p), free(g), free(m), free(v), free(g2), free(g3);
}

static void test_copies(void) {
  enum { H = 3, D = 5 };
  const size_t n = (size_t)B * T * H * D;
  float *x = rnd(n, -1, 1), *want = zeros(n);
  weft_tensor *tx = tf(4, B, T, H, D, x), *ty = tf(4, B, H, T, D, NULL), *tz = tf(4, B, T, H, D, NULL);
  const int perm[4] = {0, 2, 1, 3};
  ok(weft_op_permute(F, NULL, tx, perm, ty), "permute");
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) want[(((size_t)b * H + h) * T + t) * D + d] = x[(((size_t)b * T + t) * H + h) * D + d];
  same(ty, want, n, "permute [B,T,H,D] -> [B,H,T,D]");
  ok(weft_op_permute(F, NULL, ty, perm, tz), "permute back");
  same(tz, x, n, "permute back");
  TU_STATUS(weft_op_permute(F, NULL, tx, perm, tz), WEFT_ERR_SHAPE, "permute into the wrong shape");
  const int notperm[4] = {0, 1, 1, 3};
  TU_STATUS(weft_op_permute(F, NULL, tx, notperm, ty), WEFT_ERR_INVALID_ARGUMENT, "perm with a repeated axis");
  /* an i32 tensor permutes too (2-D transpose) */
  int32_t iv[6] = {1, 2, 3, 4, 5, 6}, it[6];
  weft_tensor *ia = ti(2, 2, 3, iv), *ib = ti(2, 3, 2, NULL);
  ok(weft_op_permute(F, NULL, ia, (const int[]){1, 0}, ib), "permute i32");
  ok(weft_tensor_read_i32(ib, it, 6), "read permuted i32");
  TU_CHECK(it[0] == 1 && it[1] == 4 && it[2] == 2 && it[5] == 6, "i32 transpose gave %d %d %d .. %d", it[0], it[1],
           it[2], it[5]);
  TU_STATUS(weft_op_permute(F, NULL, ia, (const int[]){1, 0}, tf(2, 3, 2, 0, 0, NULL)), WEFT_ERR_INVALID_ARGUMENT,
            "permute i32 into f32");
  /* copy_slice: a KV cache [B,H,Tmax,D] gets one step's [B,H,1,D] at position 4 */
  enum { TM = 9 };
  const size_t nc = (size_t)B * H * TM * D, ns = (size_t)B * H * D;
  float *cache = rnd(nc, -1, 1), *step = rnd(ns, -1, 1);
  weft_tensor *tc = tf(4, B, H, TM, D, cache), *tsn = tf(4, B, H, 1, D, step);
  ok(weft_op_copy_slice(F, NULL, tsn, tc, 2, 4), "copy_slice");
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int d = 0; d < D; d++) cache[(((size_t)b * H + h) * TM + 4) * D + d] = step[((size_t)b * H + h) * D + d];
  same(tc, cache, nc, "copy_slice into the cache");
  TU_STATUS(weft_op_copy_slice(F, NULL, tsn, tc, 2, TM), WEFT_ERR_SHAPE, "copy_slice past the end");
  TU_STATUS(weft_op_copy_slice(F, NULL, tsn, tc, 1, 0), WEFT_ERR_SHAPE, "copy_slice differing on another axis");
  TU_STATUS(weft_op_copy_slice(F, NULL, tsn, tc, 7, 0), WEFT_ERR_INVALID_ARGUMENT, "copy_slice axis 7");
  same(tc, cache, nc, "the cache after refused copies");
  /* reshape: a relabel with no copy; the count must match */
  ok(weft_tensor_reshape(tc, 2, (const int64_t[]){B * H * TM, D}), "reshape");
  int nd = 0;
  int64_t dims[4];
  weft_tensor_shape(tc, &nd, dims);
  TU_CHECK(nd == 2 && dims[0] == B * H * TM && dims[1] == D, "reshape gave rank %d [%lld,%lld]", nd,
           (long long)dims[0], (long long)dims[1]);
  same(tc, cache, nc, "the value after a reshape");
  TU_STATUS(weft_tensor_reshape(tc, 2, (const int64_t[]){B * H * TM, D + 1}), WEFT_ERR_SHAPE, "reshape to more elements");
  weft_tensor *objs[] = {tx, ty, tz, ia, ib, tc, tsn};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(x), free(want), free(cache), free(step);
}

/* weft_op_run directly: operand counts and unknown kinds */
static void test_op_run(void) {
  float x[4] = {1, -2, 3, -4};
  weft_tensor *t = tf(1, 4, 0, 0, 0, x), *u = tf(1, 4, 0, 0, 0, NULL);
  weft_tensor *in[1] = {t}, *out[1] = {u};
  ok(weft_op_run(F, NULL, WEFT_OP_RELU, in, 1, out, 1, NULL), "weft_op_run relu");
  same(u, (const float[]){1, 0, 3, 0}, 4, "weft_op_run relu");
  weft_tensor *two[2] = {t, t};
  TU_STATUS(weft_op_run(F, NULL, WEFT_OP_RELU, two, 2, out, 1, NULL), WEFT_ERR_INVALID_ARGUMENT, "relu with 2 inputs");
  TU_STATUS(weft_op_run(F, NULL, WEFT_OP_COUNT, in, 1, out, 1, NULL), WEFT_ERR_INVALID_ARGUMENT, "kind COUNT");
  TU_STATUS(weft_op_run(F, NULL, WEFT_OP_LAYERNORM, in, 1, out, 1, NULL), WEFT_ERR_INVALID_ARGUMENT,
            "layernorm without gamma and beta");
  weft_op_kind k;
  TU_CHECK(weft_op_kind_parse("copy_slice", &k) == WEFT_OK && k == WEFT_OP_COPY_SLICE &&
               strcmp(weft_op_kind_str(WEFT_OP_LAYERNORM_BACKWARD), "layernorm_backward") == 0,
           "op names come from the table");
  weft_tensor_destroy(t), weft_tensor_destroy(u);
}

/* ------------------------------------------------------------------------------- lane op sets */

typedef struct { uint64_t ops; int runs; } fake;
static void fk_describe(void *self, weft_lane_desc *out) {
  fake *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->ops ? "fake-matmul" : "fake-v1";
  out->kind = "fake";
  out->device = "fake";
  out->driver = "";
  out->details = "";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT);
  out->ops = l->ops;
}
static void fk_destroy(void *self) { free(self); }
static weft_status fk_run(void *self, const weft_op *op) {
  fake *l = self;
  l->runs++;
  weft_reference_run(op);
  return WEFT_OK;
}
static const weft_lane_vtable FAKE_VT = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
    .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc, .buffer_free = tu_fake_free,
    .upload = tu_fake_upload, .download = tu_fake_download, .run = fk_run,
};

static void test_op_sets(void) {
  fake *only_mm = calloc(1, sizeof *only_mm), *v1 = calloc(1, sizeof *v1);
  only_mm->ops = WEFT_OP_BIT(WEFT_OP_MATMUL);
  TU_CHECK(weft_testing_add_lane(F, &FAKE_VT, only_mm) == WEFT_OK && weft_testing_add_lane(F, &FAKE_VT, v1) == WEFT_OK,
           "add fake lanes");
  size_t lmm = 0, lv1 = 0, lcpu = 0;
  weft_fabric_lane_find(F, "fake-matmul", &lmm);
  weft_fabric_lane_find(F, "fake-v1", &lv1);
  weft_fabric_lane_find(F, "cpu", &lcpu);
  weft_lane_info li;
  weft_fabric_lane_info(F, lmm, &li);
  TU_CHECK(li.ops == WEFT_OP_BIT(WEFT_OP_MATMUL), "lane info ops of the matmul-only lane: 0x%llx", (unsigned long long)li.ops);
  weft_fabric_lane_info(F, lv1, &li);
  TU_CHECK(li.ops == WEFT_OPS_V1, "a lane that says nothing offers the v1 set: 0x%llx", (unsigned long long)li.ops);
  weft_fabric_lane_info(F, lcpu, &li);
  TU_CHECK(li.ops == WEFT_OPS_ALL, "the cpu lane offers every op: 0x%llx", (unsigned long long)li.ops);
  float *x = rnd((size_t)N * C, -1, 1), *g = rnd(C, 0.5f, 1.5f), *b = rnd(C, -1, 1), *y = zeros((size_t)N * C);
  weft_tensor *tx = tf(2, N, C, 0, 0, x), *tg = tf(1, C, 0, 0, 0, g), *tb = tf(1, C, 0, 0, 0, b),
              *ty = tf(2, N, C, 0, 0, NULL);
  /* routed: the fakes are never given a layernorm, though their models make them the cheapest lanes */
  for (int c = 0; c < WEFT_COST_CLASS_COUNT; c++) {
    const double alpha = c == WEFT_COST_MATMUL || c == WEFT_COST_ELEMENTWISE ? 1e-9 : 0, beta = c < 2 ? 1e18 : 0;
    ok(weft_fabric_set_cost_model(F, lmm, (weft_cost_class)c, WEFT_CONTRACT_EXACT, alpha, beta), "fake model");
    ok(weft_fabric_set_cost_model(F, lv1, (weft_cost_class)c, WEFT_CONTRACT_EXACT, alpha, beta), "fake model");
  }
  for (int i = 0; i < 5; i++) ok(weft_op_layernorm(F, NULL, tx, tg, tb, 1e-5f, ty, NULL, NULL), "routed layernorm");
  TU_CHECK(only_mm->runs == 0 && v1->runs == 0 && weft_fabric_last_lane(F) == (int)lcpu,
           "a layernorm reached a lane that does not offer it (runs %d, %d; last lane %d)", only_mm->runs, v1->runs,
           weft_fabric_last_lane(F));
  weft_ref_layernorm_forward(y, NULL, NULL, x, g, b, N, C, 1e-5f);
  same(ty, y, (size_t)N * C, "routed layernorm");
  /* pinned to a lane that does not offer it: UNSUPPORTED, named */
  const weft_op_desc pin_mm = {WEFT_CONTRACT_EXACT, (int)lmm}, pin_v1 = {WEFT_CONTRACT_EXACT, (int)lv1};
  weft_status st = weft_op_layernorm(F, &pin_mm, tx, tg, tb, 1e-5f, ty, NULL, NULL);
  TU_CHECK(st == WEFT_ERR_UNSUPPORTED && tu_contains(weft_fabric_last_error(F), "does not offer"),
           "layernorm pinned to fake-matmul: %s (%s)", weft_status_str(st), weft_fabric_last_error(F));
  st = weft_op_gelu(F, &pin_v1, tx, ty);
  TU_CHECK(st == WEFT_ERR_UNSUPPORTED && tu_contains(weft_fabric_last_error(F), "fake-v1"),
           "gelu pinned to a v1 lane: %s (%s)", weft_status_str(st), weft_fabric_last_error(F));
  st = weft_op_relu(F, &pin_mm, tx, ty);
  TU_CHECK(st == WEFT_ERR_UNSUPPORTED, "relu pinned to the matmul-only lane: %s", weft_status_str(st));
  /* what it offers it runs */
  weft_tensor *w = tf(2, C, C, 0, 0, NULL), *o = tf(2, N, C, 0, 0, NULL);
  ok(weft_op_matmul(F, &pin_mm, tx, 0, w, 0, o), "matmul pinned to the matmul-only lane");
  TU_CHECK(only_mm->runs == 1, "the matmul-only lane ran %d ops", only_mm->runs);
  ok(weft_op_relu(F, &pin_v1, tx, ty), "relu on the v1 lane");
  /* the route explanation says why a lane is not eligible */
  weft_route_query q = {WEFT_OP_LAYERNORM, WEFT_CONTRACT_EXACT, 0, 0, 0, 0, N, C};
  weft_route_explanation ex;
  ok(weft_route_explain(F, &q, &ex), "explain layernorm");
  TU_CHECK(ex.chosen == (int)lcpu && !ex.lanes[lmm].eligible && tu_contains(ex.lanes[lmm].why_not, "does not offer"),
           "explain: chosen %d, fake-matmul eligible %d (%s)", ex.chosen, ex.lanes[lmm].eligible, ex.lanes[lmm].why_not);
  /* a lane built against lane ABI version 1 is refused, both versions named */
  static const weft_lane_vtable V1_VT = {.abi_version = 1, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
                                         .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc,
                                         .buffer_free = tu_fake_free, .upload = tu_fake_upload,
                                         .download = tu_fake_download, .run = fk_run};
  TU_STATUS(weft_testing_add_lane(F, &V1_VT, calloc(1, sizeof(fake))), WEFT_ERR_UNSUPPORTED, "a lane of ABI version 1");
  int named = 0;
  for (size_t i = 0; i < weft_fabric_absent_count(F); i++) {
    const char *an, *why;
    if (weft_fabric_absent_info(F, i, &an, &why) == WEFT_OK && tu_contains(why, "lane ABI version 1") &&
        tu_contains(why, "speaks version 2"))
      named = 1;
  }
  TU_CHECK(named, "the refusal of a version-1 lane names both versions");
  weft_tensor *objs[] = {tx, tg, tb, ty, w, o};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(x), free(g), free(b), free(y);
}

/* A device lane (not host memory) that offers every op, runs them on the op table's host kernels over its
 * host-memory buffers, and can go down: values that lived only there are recomputed on the CPU from their
 * recipes (weft_op_run with the recorded kind, contract and params). */
typedef struct { int down, runs; } dev;
static weft_status dv_report(void *ctx, weft_status st, const char *fmt, va_list args) {
  (void)ctx, (void)fmt, (void)args;
  return st;
}
static const weft_lane_host DV_HOST = {NULL, dv_report};
static void dv_describe(void *self, weft_lane_desc *out) {
  (void)self;
  memset(out, 0, sizeof *out);
  out->name = "fake-dev";
  out->kind = "fake";
  out->device = out->driver = out->details = "";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT);
  out->ops = WEFT_OPS_ALL;
}
static weft_status dv_run(void *self, const weft_op *op) {
  dev *d = self;
  if (d->down) return WEFT_ERR_LANE_FAILED;
  d->runs++;
  if (op->kind < WEFT_OP_V1_COUNT) {
    weft_reference_run(op);
    return WEFT_OK;
  }
  return weft_optable_host_run(op, &DV_HOST);
}
static weft_status dv_down(void *self, void *buffer, size_t offset, void *dst, size_t bytes) {
  dev *d = self;
  return d->down ? WEFT_ERR_LANE_FAILED : tu_fake_download(self, buffer, offset, dst, bytes);
}
static const weft_lane_vtable DEV_VT = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = dv_describe,
    .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc, .buffer_free = tu_fake_free,
    .upload = tu_fake_upload, .download = dv_down, .run = dv_run,
};

static void test_recovery(void) {
  weft_fabric *saved = F;
  if (tu_open("cpu", &F) != WEFT_OK) {
    TU_CHECK(0, "open: %s", weft_open_error());
    F = saved;
    return;
  }
  dev *d = calloc(1, sizeof *d);
  TU_CHECK(weft_testing_add_lane(F, &DEV_VT, d) == WEFT_OK, "add fake-dev");
  size_t ld = 0;
  weft_fabric_lane_find(F, "fake-dev", &ld);
  const weft_op_desc pin = {WEFT_CONTRACT_EXACT, (int)ld};
  float *x = rnd((size_t)N * C, -2, 2), *g = rnd(C, 0.5f, 1.5f), *b = rnd(C, -1, 1), *y = zeros((size_t)N * C);
  float acc0 = 0.25f;
  weft_tensor *tx = tf(2, N, C, 0, 0, x), *tg = tf(1, C, 0, 0, 0, g), *tb = tf(1, C, 0, 0, 0, b),
              *ty = tf(2, N, C, 0, 0, NULL), *tm = tf(1, N, 0, 0, 0, NULL), *acc = tf(1, 1, 0, 0, 0, &acc0),
              *tz = tf(2, N, C, 0, 0, NULL);
  /* y and mean (layernorm, eps a parameter), z = gelu(y), acc += sum z^2 (it reads acc): all only on the lane */
  ok(weft_op_layernorm(F, &pin, tx, tg, tb, 1e-3f, ty, tm, NULL), "layernorm on fake-dev");
  ok(weft_op_gelu(F, &pin, ty, tz), "gelu on fake-dev");
  ok(weft_op_sumsq(F, &pin, tz, acc), "sumsq on fake-dev");
  TU_CHECK(d->runs == 3, "fake-dev ran %d ops", d->runs);
  d->down = 1;
  float *mean = zeros(N), *z = zeros((size_t)N * C);
  weft_ref_layernorm_forward(y, mean, NULL, x, g, b, N, C, 1e-3f);
  weft_ref_gelu_forward(z, y, (int64_t)N * C);
  const float ss = weft_ref_sumsq(z, (int64_t)N * C, acc0);
  same(acc, &ss, 1, "sumsq recovered (from acc's host value)");
  same(tz, z, (size_t)N * C, "gelu recovered");
  same(ty, y, (size_t)N * C, "layernorm y recovered");
  same(tm, mean, N, "layernorm mean recovered");
  weft_lane_info li;
  weft_fabric_lane_info(F, ld, &li);
  TU_CHECK(li.failed, "fake-dev is down");
  weft_fabric_close(F);
  F = saved;
  free(x), free(g), free(b), free(y), free(mean), free(z);
}

/* ----------------------------------------------------------------------------- a GPT-2 block */

/* c[M,N] = op(a) . op(b), canonical order (k ascending, each multiply and add rounded). */
static void mm(float *c, const float *a, const float *b, int64_t M, int64_t K, int64_t Nn, int ta, int tb) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < Nn; j++) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; k++) {
        float av = ta ? a[k * M + i] : a[i * K + k], bv = tb ? b[j * K + k] : b[k * Nn + j];
        float pr = av * bv;
        acc = acc + pr;
      }
      c[i * Nn + j] = weft_canon_nan(acc);
    }
}
static void addv(float *c, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++) c[i] = weft_canon_nan(a[i] + b[i]);
}

/* Parameters, in the order the clip and AdamW see them. */
enum { P_WTE, P_WPE, P_G, P_B, P_QKV, P_PROJ, NP };

static void test_block(void) {
  const size_t sz[NP] = {(size_t)V * C, (size_t)T * C, C, C, (size_t)C * 3 * C, (size_t)C * C};
  int32_t *tok = idx(N, V), *tgt = idx(N, V);
  float *par[NP], *grad[NP], *mom[NP], *vel[NP];
  weft_tensor *tpar[NP], *tgrad[NP], *tmom[NP], *tvel[NP];
  for (int i = 0; i < NP; i++) {
    par[i] = i == P_G ? rnd(sz[i], 0.8f, 1.2f) : rnd(sz[i], -0.3f, 0.3f);
    grad[i] = zeros(sz[i]), mom[i] = zeros(sz[i]), vel[i] = zeros(sz[i]);
    tpar[i] = tf(1, (int64_t)sz[i], 0, 0, 0, par[i]);
    tgrad[i] = tf(1, (int64_t)sz[i], 0, 0, 0, NULL);
    tmom[i] = tf(1, (int64_t)sz[i], 0, 0, 0, NULL);
    tvel[i] = tf(1, (int64_t)sz[i], 0, 0, 0, NULL);
  }
  /* the parameter tensors get their working shapes (a relabel: reshape) */
  weft_tensor_reshape(tpar[P_WTE], 2, (const int64_t[]){V, C});
  weft_tensor_reshape(tpar[P_WPE], 2, (const int64_t[]){T, C});
  weft_tensor_reshape(tpar[P_QKV], 2, (const int64_t[]){C, 3 * C});
  weft_tensor_reshape(tpar[P_PROJ], 2, (const int64_t[]){C, C});
  weft_tensor_reshape(tgrad[P_WTE], 2, (const int64_t[]){V, C});
  weft_tensor_reshape(tgrad[P_WPE], 2, (const int64_t[]){T, C});
  weft_tensor_reshape(tgrad[P_QKV], 2, (const int64_t[]){C, 3 * C});
  weft_tensor_reshape(tgrad[P_PROJ], 2, (const int64_t[]){C, C});
  weft_tensor *ttok = ti(2, B, T, tok), *ttgt = ti(2, B, T, tgt);
  const size_t nC = (size_t)N * C, n3 = nC * 3, nA = (size_t)B * NH * T * T, nV = (size_t)N * V;
  /* reference chain, on host arrays */
  float *x0 = zeros(nC), *h = zeros(nC), *mean = zeros(N), *rstd = zeros(N), *qkv = zeros(n3), *ao = zeros(nC),
        *att = zeros(nA), *pp = zeros(nC), *x1 = zeros(nC), *gg = zeros(nC), *lg = zeros(nV), *ls = zeros(N);
  ok(weft_ref_embedding_forward(x0, tok, NULL, par[P_WTE], par[P_WPE], B, T, C, V, T), "ref emb");
  weft_ref_layernorm_forward(h, mean, rstd, x0, par[P_G], par[P_B], N, C, 1e-5f);
  mm(qkv, h, par[P_QKV], N, C, 3 * C, 0, 0);
  ok(weft_ref_attention_forward(ao, NULL, att, qkv, B, T, C, NH), "ref attn");
  mm(pp, ao, par[P_PROJ], N, C, C, 0, 0);
  addv(x1, x0, pp, nC);
  weft_ref_gelu_forward(gg, x1, (int64_t)nC);
  mm(lg, gg, par[P_WTE], N, C, V, 0, 1);
  ok(weft_ref_crossentropy_forward(ls, lg, tgt, N, V), "ref xent");
  float *dls = zeros(N), *dlg = zeros(nV), *dgg = zeros(nC), *tmp = zeros((size_t)V * C), *dx1 = zeros(nC),
        *dao = zeros(nC), *dqkv = zeros(n3), *dh = zeros(nC), *dxl = zeros(nC), *dx0 = zeros(nC);
  for (int i = 0; i < N; i++) dls[i] = 1.0f / (float)N;
  ok(weft_ref_crossentropy_backward(dlg, lg, tgt, dls, N, V), "ref xent bw");
  mm(dgg, dlg, par[P_WTE], N, V, C, 0, 0);
  mm(tmp, dlg, gg, V, N, C, 1, 0);
  addv(grad[P_WTE], grad[P_WTE], tmp, sz[P_WTE]);
  weft_ref_gelu_backward(dx1, x1, dgg, (int64_t)nC);
  mm(dao, dx1, par[P_PROJ], N, C, C, 0, 1);
  mm(grad[P_PROJ], ao, dx1, C, N, C, 1, 0);
  ok(weft_ref_attention_backward(dqkv, dao, qkv, att, B, T, C, NH), "ref attn bw");
  mm(dh, dqkv, par[P_QKV], N, 3 * C, C, 0, 1);
  mm(grad[P_QKV], h, dqkv, C, N, 3 * C, 1, 0);
  weft_ref_layernorm_backward(dxl, grad[P_G], grad[P_B], dh, x0, mean, rstd, par[P_G], N, C);
  addv(dx0, dx1, dxl, nC);
  ok(weft_ref_embedding_backward(grad[P_WTE], grad[P_WPE], dx0, tok, NULL, B, T, C, V, T), "ref emb bw");
  const int64_t sizes[NP] = {(int64_t)sz[0], (int64_t)sz[1], (int64_t)sz[2], (int64_t)sz[3], (int64_t)sz[4], (int64_t)sz[5]};
  const float norm = weft_ref_grad_clip(grad, sizes, NP, 0.5f);
  for (int i = 0; i < NP; i++)
    weft_ref_adamw(par[i], grad[i], mom[i], vel[i], (int64_t)sz[i], 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                   weft_ref_adamw_bias_correction(0.9f, 1), weft_ref_adamw_bias_correction(0.95f, 1));

  /* the same through the API */
  weft_tensor *Tx0 = tf(2, N, C, 0, 0, NULL), *Th = tf(2, N, C, 0, 0, NULL), *Tmean = tf(1, N, 0, 0, 0, NULL),
              *Trstd = tf(1, N, 0, 0, 0, NULL), *Tqkv = tf(2, N, 3 * C, 0, 0, NULL), *Tao = tf(3, B, T, C, 0, NULL),
              *Tatt = tf(4, B, NH, T, T, NULL), *Tpp = tf(2, N, C, 0, 0, NULL), *Tx1 = tf(2, N, C, 0, 0, NULL),
              *Tgg = tf(2, N, C, 0, 0, NULL), *Tlg = tf(2, N, V, 0, 0, NULL), *Tls = tf(1, N, 0, 0, 0, NULL);
  ok(weft_op_embedding(F, NULL, ttok, NULL, tpar[P_WTE], tpar[P_WPE], Tx0), "emb");
  ok(weft_op_layernorm(F, NULL, Tx0, tpar[P_G], tpar[P_B], 1e-5f, Th, Tmean, Trstd), "ln");
  ok(weft_op_matmul(F, NULL, Th, 0, tpar[P_QKV], 0, Tqkv), "qkv");
  ok(weft_tensor_reshape(Tqkv, 3, (const int64_t[]){B, T, 3 * C}), "qkv as [B,T,3C]");
  ok(weft_op_attention(F, NULL, Tqkv, NH, Tao, Tatt, NULL), "attn");
  ok(weft_tensor_reshape(Tao, 2, (const int64_t[]){N, C}), "ao as [N,C]");
  ok(weft_op_matmul(F, NULL, Tao, 0, tpar[P_PROJ], 0, Tpp), "proj");
  ok(weft_op_add(F, NULL, Tx0, Tpp, Tx1), "residual");
  ok(weft_op_gelu(F, NULL, Tx1, Tgg), "gelu");
  ok(weft_op_matmul(F, NULL, Tgg, 0, tpar[P_WTE], 1, Tlg), "logits");
  ok(weft_op_crossentropy(F, NULL, Tlg, ttgt, Tls), "xent");
  same(Tls, ls, N, "block losses");
  weft_tensor *Tdls = tf(1, N, 0, 0, 0, dls), *Tdlg = tf(2, N, V, 0, 0, NULL), *Tdgg = tf(2, N, C, 0, 0, NULL),
              *Ttmp = tf(2, V, C, 0, 0, NULL), *Tdx1 = tf(2, N, C, 0, 0, NULL), *Tdao = tf(3, B, T, C, 0, NULL),
              *Tdqkv = tf(3, B, T, 3 * C, 0, NULL), *Tdh = tf(2, N, C, 0, 0, NULL), *Tdxl = tf(2, N, C, 0, 0, NULL),
              *Tdx0 = tf(2, N, C, 0, 0, NULL);
  ok(weft_op_crossentropy_backward(F, NULL, Tlg, ttgt, Tdls, Tdlg), "xent bw");
  ok(weft_op_matmul(F, NULL, Tdlg, 0, tpar[P_WTE], 0, Tdgg), "dgg");
  ok(weft_op_matmul(F, NULL, Tdlg, 1, Tgg, 0, Ttmp), "dwte (logits)");
  ok(weft_op_add(F, NULL, tgrad[P_WTE], Ttmp, tgrad[P_WTE]), "dwte +=");
  ok(weft_op_gelu_backward(F, NULL, Tx1, Tdgg, Tdx1), "gelu bw");
  ok(weft_tensor_reshape(Tdao, 2, (const int64_t[]){N, C}), "dao as [N,C]");
  ok(weft_op_matmul(F, NULL, Tdx1, 0, tpar[P_PROJ], 1, Tdao), "dao");
  ok(weft_op_matmul(F, NULL, Tao, 1, Tdx1, 0, tgrad[P_PROJ]), "dwproj");
  ok(weft_tensor_reshape(Tdao, 3, (const int64_t[]){B, T, C}), "dao as [B,T,C]");
  ok(weft_op_attention_backward(F, NULL, Tdao, Tqkv, Tatt, NH, Tdqkv), "attn bw");
  ok(weft_tensor_reshape(Tdqkv, 2, (const int64_t[]){N, 3 * C}), "dqkv as [N,3C]");
  ok(weft_tensor_reshape(Tqkv, 2, (const int64_t[]){N, 3 * C}), "qkv as [N,3C]");
  ok(weft_op_matmul(F, NULL, Tdqkv, 0, tpar[P_QKV], 1, Tdh), "dh");
  ok(weft_op_matmul(F, NULL, Th, 1, Tdqkv, 0, tgrad[P_QKV]), "dwqkv");
  ok(weft_op_layernorm_backward(F, NULL, Tdh, Tx0, Tmean, Trstd, tpar[P_G], Tdxl, tgrad[P_G], tgrad[P_B]), "ln bw");
  ok(weft_op_add(F, NULL, Tdx1, Tdxl, Tdx0), "dx0");
  ok(weft_op_embedding_backward(F, NULL, Tdx0, ttok, NULL, tgrad[P_WTE], tgrad[P_WPE]), "emb bw");
  float got_norm = 0;
  ok(weft_grad_clip(F, NULL, tgrad, NP, 0.5f, &got_norm), "clip");
  TU_CHECK(tu_bits(got_norm) == tu_bits(norm), "block grad norm %.9g, the reference %.9g", (double)got_norm, (double)norm);
  TU_CHECK(norm > 0.5f, "the clip clipped (norm %g)", (double)norm);
  for (int i = 0; i < NP; i++)
    ok(weft_op_adamw(F, NULL, tpar[i], tgrad[i], tmom[i], tvel[i], 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1), "adamw");
  static const char *const names[NP] = {"wte", "wpe", "ln gamma", "ln beta", "w_qkv", "w_proj"};
  for (int i = 0; i < NP; i++) {
    char what[64];
    snprintf(what, sizeof what, "block: %s after the step", names[i]);
    same(tpar[i], par[i], sz[i], what);
    snprintf(what, sizeof what, "block: %s's gradient", names[i]);
    same(tgrad[i], grad[i], sz[i], what);
  }
  weft_tensor *objs[] = {ttok, ttgt, Tx0, Th, Tmean, Trstd, Tqkv, Tao, Tatt, Tpp, Tx1, Tgg, Tlg, Tls,
                         Tdls, Tdlg, Tdgg, Ttmp, Tdx1, Tdao, Tdqkv, Tdh, Tdxl, Tdx0};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  for (int i = 0; i < NP; i++) {
    weft_tensor_destroy(tpar[i]), weft_tensor_destroy(tgrad[i]), weft_tensor_destroy(tmom[i]), weft_tensor_destroy(tvel[i]);
    free(par[i]), free(grad[i]), free(mom[i]), free(vel[i]);
  }
  float *fr[] = {x0, h, mean, rstd, qkv, ao, att, pp, x1, gg, lg, ls, dls, dlg, dgg, tmp, dx1, dao, dqkv, dh, dxl, dx0};
  for (size_t i = 0; i < sizeof fr / sizeof *fr; i++) free(fr[i]);
  free(tok), free(tgt);
}

/* Ops long enough to go to the host queue (and a chain through it): the same bits, dependencies kept. */
static void test_queued(void) {
  enum { QN = 2048, QC = 768 };
  const size_t n = (size_t)QN * QC;
  float *x = rnd(n, -2, 2), *g = rnd(QC, 0.5f, 1.5f), *b = rnd(QC, -1, 1), *y = zeros(n), *z = zeros(n);
  weft_tensor *tx = tf(2, QN, QC, 0, 0, x), *tg = tf(1, QC, 0, 0, 0, g), *tb = tf(1, QC, 0, 0, 0, b),
              *ty = tf(2, QN, QC, 0, 0, NULL), *tz = tf(2, QN, QC, 0, 0, NULL), *acc = tf(1, 1, 0, 0, 0, NULL);
  ok(weft_op_layernorm(F, NULL, tx, tg, tb, 1e-5f, ty, NULL, NULL), "queued layernorm");
  ok(weft_op_gelu(F, NULL, ty, tz), "queued gelu");
  ok(weft_op_sumsq(F, NULL, tz, acc), "queued sumsq");
  ok(weft_op_sumsq(F, NULL, tz, acc), "queued sumsq again (accumulates)");
  weft_ref_layernorm_forward(y, NULL, NULL, x, g, b, QN, QC, 1e-5f);
  weft_ref_gelu_forward(z, y, (int64_t)n);
  float ss = 0.0f; /* SUMSQ's chunked order (reference_tx.c), twice into one accumulator */
  for (int r = 0; r < 2; r++) ss = weft_ref_sumsq(z, (int64_t)n, ss);
  same(acc, &ss, 1, "queued sumsq");
  same(tz, z, n, "queued gelu");
  weft_tensor *objs[] = {tx, tg, tb, ty, tz, acc};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  free(x), free(g), free(b), free(y), free(z);
}

/* ---------------------------------------------------------------------------- thread counts */

/* Every op the CPU lane runs on its threaded kernels, at GPT-2-like sizes big enough to be split (T = 61:
 * parts of unequal length), pinned to the CPU lane of a fabric with `threads` threads: the reference's
 * bits. With `queued`, a large layernorm goes first, so the ops after it join the host queue behind it and
 * run there as a chain (each reads what the one before wrote where it can). */
static void tx_threads_once(int threads, int queued) {
  enum { TB = 4, TT = 61, TC = 768, TNH = 12, TV = 1024, TN = TB * TT, QN = 2048 };
  weft_fabric_desc d = tu_desc();
  d.lanes = "cpu";
  d.cpu_threads = threads;
  weft_fabric *saved = F;
  if (weft_fabric_open(&d, &F) != WEFT_OK) {
    TU_CHECK(0, "open cpu with %d threads: %s", threads, weft_open_error());
    F = saved;
    return;
  }
  const weft_op_desc pin = {WEFT_CONTRACT_EXACT, 0};
  char what[96];
#define W(s) (snprintf(what, sizeof what, "%s (%d threads%s)", s, threads, queued ? ", queued" : ""), what)
  const size_t nc = (size_t)TN * TC, n3 = 3 * nc, na = (size_t)TB * TNH * TT * TT, nl = (size_t)TN * TV;
  int32_t *tok = idx(TN, TV), *pos = idx(TN, TT), *tgt = idx(TN, TV);
  float *wte = rnd((size_t)TV * TC, -1, 1), *wpe = rnd((size_t)TT * TC, -1, 1), *g = rnd(TC, 0.5f, 1.5f),
        *be = rnd(TC, -1, 1), *qkv = rnd(n3, -2, 2), *dout = rnd(nc, -1, 1), *dqkvo = rnd(n3, -1, 1),
        *sc = rnd(na, -4, 4), *dp = rnd(na, -1, 1), *lg = rnd(nl, -6, 6), *dl = rnd(TN, 0, 1),
        *par = rnd(nl, -1, 1), *grd = rnd(nl, -1, 1), *mo = rnd(nl, -0.1f, 0.1f), *ve = rnd(nl, 0, 0.01f),
        *dwte = rnd((size_t)TV * TC, -1, 1), *dwpe = rnd((size_t)TT * TC, -1, 1), *dg = rnd(TC, -1, 1),
        *db = rnd(TC, -1, 1), *big = rnd((size_t)QN * TC, -2, 2);
  float *x = zeros(nc), *y = zeros(nc), *mean = zeros(TN), *rstd = zeros(TN), *dx = zeros(nc), *ge = zeros(nc),
        *gb = zeros(nc), *ao = zeros(nc), *att = zeros(na), *pre = zeros(na), *dqkv = zeros(n3), *pr = zeros(na),
        *ds = zeros(na), *ls = zeros(TN), *dlg = zeros(nl), *bigy = zeros((size_t)QN * TC);
  weft_tensor *ttok = ti(2, TB, TT, tok), *tpos = ti(2, TB, TT, pos), *ttgt = ti(1, TN, 0, tgt),
              *twte = tf(2, TV, TC, 0, 0, wte), *twpe = tf(2, TT, TC, 0, 0, wpe), *tg = tf(1, TC, 0, 0, 0, g),
              *tbe = tf(1, TC, 0, 0, 0, be), *tx = tf(3, TB, TT, TC, 0, NULL), *ty = tf(3, TB, TT, TC, 0, NULL),
              *tmean = tf(1, TN, 0, 0, 0, NULL), *trstd = tf(1, TN, 0, 0, 0, NULL), *tdout = tf(3, TB, TT, TC, 0, dout),
              *tdx = tf(3, TB, TT, TC, 0, NULL), *tdg = tf(1, TC, 0, 0, 0, dg), *tdb = tf(1, TC, 0, 0, 0, db),
              *tge = tf(3, TB, TT, TC, 0, NULL), *tgb = tf(3, TB, TT, TC, 0, NULL), *tqkv = tf(3, TB, TT, 3 * TC, 0, qkv),
              *tao = tf(3, TB, TT, TC, 0, NULL), *tatt = tf(4, TB, TNH, TT, TT, NULL), *tpre = tf(4, TB, TNH, TT, TT, NULL),
              *tdqkv = tf(3, TB, TT, 3 * TC, 0, NULL), *tsc = tf(4, TB, TNH, TT, TT, sc), *tdp = tf(4, TB, TNH, TT, TT, dp),
              *tpr = tf(4, TB, TNH, TT, TT, NULL), *tds = tf(4, TB, TNH, TT, TT, NULL), *tlg = tf(2, TN, TV, 0, 0, lg),
              *tls = tf(1, TN, 0, 0, 0, NULL), *tdl = tf(1, TN, 0, 0, 0, dl), *tdlg = tf(2, TN, TV, 0, 0, NULL),
              *tpar = tf(2, TN, TV, 0, 0, par), *tgrd = tf(2, TN, TV, 0, 0, grd), *tmo = tf(2, TN, TV, 0, 0, mo),
              *tve = tf(2, TN, TV, 0, 0, ve), *tdwte = tf(2, TV, TC, 0, 0, dwte), *tdwpe = tf(2, TT, TC, 0, 0, dwpe),
              *tbig = tf(2, QN, TC, 0, 0, big), *tbigy = tf(2, QN, TC, 0, 0, NULL);
  (void)dqkvo;
  if (queued) ok(weft_op_layernorm(F, &pin, tbig, tg, tbe, 1e-5f, tbigy, NULL, NULL), W("the large layernorm first"));
  /* the chain: embedding -> layernorm -> gelu -> attention on qkv; backward pieces; the rest */
  ok(weft_op_adamw(F, &pin, tpar, tgrd, tmo, tve, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 3), W("adamw"));
  ok(weft_op_embedding(F, &pin, ttok, tpos, twte, twpe, tx), W("embedding"));
  ok(weft_op_layernorm(F, &pin, tx, tg, tbe, 1e-5f, ty, tmean, trstd), W("layernorm"));
  ok(weft_op_layernorm_backward(F, &pin, tdout, tx, tmean, trstd, tg, tdx, tdg, tdb), W("layernorm_backward"));
  ok(weft_op_gelu(F, &pin, ty, tge), W("gelu"));
  ok(weft_op_gelu_backward(F, &pin, ty, tdx, tgb), W("gelu_backward"));
  ok(weft_op_attention(F, &pin, tqkv, TNH, tao, tatt, tpre), W("attention"));
  ok(weft_op_attention_backward(F, &pin, tgb, tqkv, tatt, TNH, tdqkv), W("attention_backward"));
  ok(weft_op_embedding_backward(F, &pin, tao, ttok, tpos, tdwte, tdwpe), W("embedding_backward"));
  ok(weft_op_embedding_backward(F, &pin, tao, ttok, NULL, NULL, tdwpe), W("embedding_backward (dwpe, pos = t)"));
  ok(weft_op_causal_softmax(F, &pin, tsc, 0.125f, tpr), W("causal_softmax"));
  ok(weft_op_causal_softmax_backward(F, &pin, tpr, tdp, 0.125f, tds), W("causal_softmax_backward"));
  ok(weft_op_crossentropy(F, &pin, tlg, ttgt, tls), W("crossentropy"));
  ok(weft_op_crossentropy_backward(F, &pin, tlg, ttgt, tdl, tdlg), W("crossentropy_backward"));

  ok(weft_ref_embedding_forward(x, tok, pos, wte, wpe, TB, TT, TC, TV, TT), "ref embedding");
  weft_ref_layernorm_forward(y, mean, rstd, x, g, be, TN, TC, 1e-5f);
  weft_ref_layernorm_backward(dx, dg, db, dout, x, mean, rstd, g, TN, TC);
  weft_ref_gelu_forward(ge, y, (int64_t)nc);
  weft_ref_gelu_backward(gb, y, dx, (int64_t)nc);
  ok(weft_ref_attention_forward(ao, pre, att, qkv, TB, TT, TC, TNH), "ref attention");
  ok(weft_ref_attention_backward(dqkv, gb, qkv, att, TB, TT, TC, TNH), "ref attention_backward");
  ok(weft_ref_embedding_backward(dwte, dwpe, ao, tok, pos, TB, TT, TC, TV, TT), "ref embedding_backward");
  ok(weft_ref_embedding_backward(NULL, dwpe, ao, tok, NULL, TB, TT, TC, TV, TT), "ref embedding_backward (dwpe)");
  weft_ref_causal_softmax_forward(pr, sc, TB * TNH, TT, 0.125f);
  weft_ref_causal_softmax_backward(ds, pr, dp, TB * TNH, TT, 0.125f);
  ok(weft_ref_crossentropy_forward(ls, lg, tgt, TN, TV), "ref crossentropy");
  ok(weft_ref_crossentropy_backward(dlg, lg, tgt, dl, TN, TV), "ref crossentropy_backward");
  weft_ref_adamw(par, grd, mo, ve, (int64_t)nl, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f,
                 weft_ref_adamw_bias_correction(0.9f, 3), weft_ref_adamw_bias_correction(0.999f, 3));
  if (queued) weft_ref_layernorm_forward(bigy, NULL, NULL, big, g, be, QN, TC, 1e-5f);

  same(tx, x, nc, W("embedding"));
  same(ty, y, nc, W("layernorm y")), same(tmean, mean, TN, W("layernorm mean")), same(trstd, rstd, TN, W("layernorm rstd"));
  same(tdx, dx, nc, W("layernorm_backward dx")), same(tdg, dg, TC, W("layernorm_backward dgamma"));
  same(tdb, db, TC, W("layernorm_backward dbeta"));
  same(tge, ge, nc, W("gelu")), same(tgb, gb, nc, W("gelu_backward"));
  same(tao, ao, nc, W("attention out")), same(tatt, att, na, W("attention att")), same(tpre, pre, na, W("attention preatt"));
  same(tdqkv, dqkv, n3, W("attention_backward"));
  same(tdwte, dwte, (size_t)TV * TC, W("embedding_backward dwte")), same(tdwpe, dwpe, (size_t)TT * TC, W("embedding_backward dwpe"));
  same(tpr, pr, na, W("causal_softmax")), same(tds, ds, na, W("causal_softmax_backward"));
  same(tls, ls, TN, W("crossentropy")), same(tdlg, dlg, nl, W("crossentropy_backward"));
  same(tpar, par, nl, W("adamw param")), same(tmo, mo, nl, W("adamw m")), same(tve, ve, nl, W("adamw v"));
  if (queued) same(tbigy, bigy, (size_t)QN * TC, W("the large layernorm"));

  /* Matmuls of 1 to 4 rows (gemm.c's skinny case: B read in place, columns split over the threads), every
   * transpose: the canonical order's bits. */
  for (int64_t mrows = 1; mrows <= 4; mrows += 3)
    for (int t = 0; t < 4; t++) {
      const int ta = t & 1, tb = t >> 1;
      const int64_t K = 771, NN = 1999;
      float *a = rnd((size_t)(mrows * K), -1, 1), *bm = rnd((size_t)(K * NN), -1, 1), *c = zeros((size_t)(mrows * NN));
      weft_tensor *tam = ta ? tf(2, K, mrows, 0, 0, a) : tf(2, mrows, K, 0, 0, a);
      weft_tensor *tbm = tb ? tf(2, NN, K, 0, 0, bm) : tf(2, K, NN, 0, 0, bm), *tcm = tf(2, mrows, NN, 0, 0, NULL);
      char mw[64];
      snprintf(mw, sizeof mw, "matmul %lld rows, ta %d tb %d", (long long)mrows, ta, tb);
      ok(weft_op_matmul(F, &pin, tam, ta, tbm, tb, tcm), W(mw));
      mm(c, a, bm, mrows, K, NN, ta, tb);
      same(tcm, c, (size_t)(mrows * NN), W(mw));
      weft_tensor_destroy(tam), weft_tensor_destroy(tbm), weft_tensor_destroy(tcm);
      free(a), free(bm), free(c);
    }
  /* Under fp32 the lane takes its fp32 kernels: close to the reference, not its bits. */
  {
    const weft_op_desc f32 = {WEFT_CONTRACT_FP32, 0};
    float *dg0 = zeros(TC), *db0 = zeros(TC);
    weft_tensor *tdg0 = tf(1, TC, 0, 0, 0, NULL), *tdb0 = tf(1, TC, 0, 0, 0, NULL);
    weft_ref_layernorm_backward(dx, dg0, db0, dout, x, mean, rstd, g, TN, TC);
    ok(weft_op_layernorm_backward(F, &f32, tdout, tx, tmean, trstd, tg, tdx, tdg0, tdb0), W("fp32 layernorm_backward"));
    ok(weft_op_causal_softmax(F, &f32, tsc, 0.125f, tpr), W("fp32 causal_softmax"));
    ok(weft_op_crossentropy(F, &f32, tlg, ttgt, tls), W("fp32 crossentropy"));
    near(tdx, dx, nc, W("fp32 layernorm_backward dx"));
    near(tdg0, dg0, TC, W("fp32 layernorm_backward dgamma"));
    near(tdb0, db0, TC, W("fp32 layernorm_backward dbeta"));
    weft_tensor_destroy(tdg0), weft_tensor_destroy(tdb0);
    free(dg0), free(db0);
    near(tpr, pr, na, W("fp32 causal_softmax"));
    near(tls, ls, TN, W("fp32 crossentropy"));
  }
#undef W
  weft_tensor *objs[] = {ttok, tpos, ttgt, twte, twpe, tg, tbe, tx, ty, tmean, trstd, tdout, tdx, tdg, tdb, tge, tgb,
                         tqkv, tao, tatt, tpre, tdqkv, tsc, tdp, tpr, tds, tlg, tls, tdl, tdlg, tpar, tgrd, tmo, tve,
                         tdwte, tdwpe, tbig, tbigy};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) weft_tensor_destroy(objs[i]);
  void *fr[] = {tok, pos, tgt, wte, wpe, g, be, qkv, dout, dqkvo, sc, dp, lg, dl, par, grd, mo, ve, dwte, dwpe, dg, db,
                big, x, y, mean, rstd, dx, ge, gb, ao, att, pre, dqkv, pr, ds, ls, dlg, bigy};
  for (size_t i = 0; i < sizeof fr / sizeof *fr; i++) free(fr[i]);
  weft_fabric_close(F);
  F = saved;
}

static void test_threads(void) {
  const int counts[] = {1, 3, 8};
  for (int i = 0; i < 3; i++)
    for (int q = 0; q < 2; q++) tx_threads_once(counts[i], q);
}

int main(void) {
  const double start = tu_now();
  R.s = tu_seed();
  if (tu_open("cpu", &F) != WEFT_OK) {
    TU_CHECK(0, "open cpu: %s", weft_open_error());
    return tu_finish("ops_tx", start);
  }
  test_embedding();
  test_layernorm();
  test_gelu();
  test_attention();
  test_attention_cached();
  test_crossentropy();
  test_adamw_clip();
  test_copies();
  test_op_run();
  test_queued();
  test_threads();
  test_block(); /* before the fakes join: every op on the cpu lane */
  test_op_sets();
  weft_fabric_close(F);
  F = NULL;
  test_recovery();
  return tu_finish("ops_tx", start);
}
