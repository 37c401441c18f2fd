/* test_reference_tx.c - the transformer ops' reference kernels (core/reference_tx.c) and the scalar
 * functions they use (weft_recipf, weft_sqrtf, weft_rsqrtf, weft_tanhf):
 *   - every forward against a float64 implementation written here, on random GPT-2-like inputs;
 *   - every backward against float64 central finite differences of that float64 forward;
 *   - NaN payloads (stored as the canonical 0x7fc00000), +-inf, -0 and subnormals, with the documented
 *     results; out-of-range indices refused before anything is written;
 *   - the bits: the same call twice, the unfused attention (matmul, causal softmax, matmul) against the
 *     fused one, cross-entropy against SOFTMAX_XENT with one-hot targets, and fingerprints of the scalar
 *     functions (every lane transcribes them step for step, so their bits are part of the exact contract);
 *   - the scalar functions' error in ulp against libm in double, over every exponent and densely. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference.h"
#include "core/reference_tx.h"
#include "tutil.h"

#define QNAN_BITS 0x7fc00000u

/* Accuracy achieved, measured over every float (the results depend on the mantissa alone, so one binade
 * is every case; tanh over all of [2^-12, 10)): recip 1.249, rsqrt 1.237, sqrt 0.750, tanh 1.223 ulp;
 * recip's subnormal results, rounded twice, 1.122 units of the smallest subnormal (every 13th pattern). */
#define RECIP_MAX_ULP 1.5
#define RSQRT_MAX_ULP 1.5
#define SQRT_MAX_ULP 1.0
#define TANH_MAX_ULP 1.5
#define MAX_SUBNORMAL_UNITS 1.5

/* Fingerprints of the scalar functions' bits over every 65537th bit pattern. If one changes, the function
 * changed: every lane's transcription must change with it; then record the new value here. */
#define RECIP_FINGERPRINT 0x6509cd7112562dc1ull
#define SQRT_FINGERPRINT 0xe98c96e9ad017afcull
#define RSQRT_FINGERPRINT 0x56fb41b430f3c9beull
#define TANH_FINGERPRINT 0x85483911a5c2c8b2ull

static tu_rng rng;

static float *fbuf(size_t n) {
  float *p = calloc(n ? n : 1, sizeof *p);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}
static double *dbuf(size_t n) {
  double *p = calloc(n ? n : 1, sizeof *p);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}
static void fill(float *p, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) p[i] = tu_rng_float(&rng, lo, hi);
}

/* ------------------------------------------------------------------------------------- comparisons */

/* |got - want| <= tol * (|want| + scale) for every element; returns the worst ratio, reports the first miss. */
static double close_all(const char *what, const float *got, const double *want, size_t n, double tol, double scale) {
  double worst = 0;
  long misses = 0;
  for (size_t i = 0; i < n; i++) {
    double bound = tol * (fabs(want[i]) + scale);
    double err = fabs((double)got[i] - want[i]);
    if (!(err <= bound)) {
      if (misses++ == 0)
        TU_CHECK(0, "%s[%zu] = %.9g, float64 says %.9g (allowed %.3g)", what, i, (double)got[i], want[i], bound);
    }
    if (err / bound > worst) worst = err / bound;
  }
  TU_CHECK(misses == 0, "%s: %ld of %zu elements out of tolerance", what, misses, n);
  return worst;
}

static int all_canonical_nan(const float *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (tu_bits(p[i]) != QNAN_BITS) return 0;
  return 1;
}

static void check_bits(const char *what, float got, uint32_t want) {
  TU_CHECK(tu_bits(got) == want, "%s = 0x%08x (%a), want 0x%08x (%a)", what, tu_bits(got), (double)got, want,
           (double)tu_float(want));
}

/* ---------------------------------------------------------------------------- float64 forwards */

static void d_layernorm(double *y, const double *x, const double *g, const double *b, int64_t N, int64_t C,
                        double eps) {
  for (int64_t r = 0; r < N; r++) {
    const double *xr = x + r * C;
    double s = 0, v = 0;
    for (int64_t c = 0; c < C; c++) s += xr[c];
    double mu = s / (double)C;
    for (int64_t c = 0; c < C; c++) v += (xr[c] - mu) * (xr[c] - mu);
    double rs = 1.0 / sqrt(v / (double)C + eps);
    for (int64_t c = 0; c < C; c++) y[r * C + c] = (xr[c] - mu) * rs * g[c] + b[c];
  }
}

static double d_gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

static void d_softmax_rows(double *p, const double *s, int64_t R, int64_t T, double scale) {
  for (int64_t r = 0; r < R * T; r++) {
    int64_t t = r % T;
    const double *sr = s + r * T;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= t; j++) mx = fmax(mx, sr[j] * scale);
    for (int64_t j = 0; j <= t; j++) sum += exp(sr[j] * scale - mx);
    for (int64_t j = 0; j < T; j++) p[r * T + j] = j <= t ? exp(sr[j] * scale - mx) / sum : 0.0;
  }
}

static void d_attention(double *out, double *att, const double *qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const double scale = 1.0 / sqrt((double)hs);
  double *sc = dbuf((size_t)(T * T));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++) {
      for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < T; j++) {
          double d = 0;
          if (j <= t)
            for (int64_t i = 0; i < hs; i++)
              d += qkv[(b * T + t) * 3 * C + h * hs + i] * qkv[(b * T + j) * 3 * C + C + h * hs + i];
          sc[t * T + j] = d;
        }
      double *a = att + (b * NH + h) * T * T;
      d_softmax_rows(a, sc, 1, T, scale);
      for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < hs; i++) {
          double o = 0;
          for (int64_t j = 0; j <= t; j++) o += a[t * T + j] * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + i];
          out[(b * T + t) * C + h * hs + i] = o;
        }
    }
  free(sc);
}

static void d_xent(double *loss, const double *z, const int32_t *tg, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; n++) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; j++) mx = fmax(mx, z[n * V + j]);
    for (int64_t j = 0; j < V; j++) s += exp(z[n * V + j] - mx);
    loss[n] = -(z[n * V + tg[n]] - mx - log(s));
  }
}

static void to_d(double *d, const float *f, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = (double)f[i];
}

/* ----------------------------------------------------------------- finite-difference harness */

/* A float64 forward of one input vector x (the other operands captured in ctx), to the scalar
 * L = sum_i w[i] * f(x)[i]. */
typedef double (*objective_fn)(void *ctx, const double *x);

/* Checks grad[i] (from the float kernel) against (L(x + h e_i) - L(x - h e_i)) / 2h for `count` indices
 * (all of them when count >= n, else a random subset). */
static void fd_check(const char *what, objective_fn f, void *ctx, const double *x0, const float *grad, size_t n,
                     size_t count) {
  double *x = dbuf(n), *fd = dbuf(n);
  size_t *idx = malloc((n ? n : 1) * sizeof *idx);
  if (!idx) exit(1);
  memcpy(x, x0, n * sizeof *x);
  for (size_t i = 0; i < n; i++) idx[i] = i;
  if (count < n) /* partial Fisher-Yates: the first `count` entries are a random subset */
    for (size_t i = 0; i < count; i++) {
      size_t j = i + (size_t)tu_rng_int(&rng, 0, (int64_t)(n - i - 1));
      size_t t = idx[i];
      idx[i] = idx[j], idx[j] = t;
    }
  else
    count = n;
  double maxabs = 0;
  for (size_t c = 0; c < count; c++) {
    size_t i = idx[c];
    double h = 1e-5 * fmax(1.0, fabs(x0[i]));
    x[i] = x0[i] + h;
    double lp = f(ctx, x);
    x[i] = x0[i] - h;
    double lm = f(ctx, x);
    x[i] = x0[i];
    fd[i] = (lp - lm) / (2 * h);
    if (fabs(fd[i]) > maxabs) maxabs = fabs(fd[i]);
  }
  long misses = 0;
  double worst = 0;
  for (size_t c = 0; c < count; c++) {
    size_t i = idx[c];
    double bound = 1e-4 * fabs(fd[i]) + 1e-5 * maxabs + 1e-12;
    double err = fabs((double)grad[i] - fd[i]);
    if (err / bound > worst) worst = err / bound;
    if (!(err <= bound) && misses++ == 0)
      TU_CHECK(0, "%s: gradient[%zu] = %.9g, finite differences %.9g (allowed %.3g)", what, i, (double)grad[i], fd[i],
               bound);
  }
  TU_CHECK(misses == 0, "%s: %ld of %zu gradient entries off the finite differences", what, misses, count);
  TU_CHECK(maxabs > 0, "%s: the finite differences are all zero (the check would prove nothing)", what);
  printf("  %-28s %zu entries, worst %.3f of the bound\n", what, count, worst);
  free(x), free(fd), free(idx);
}

/* -------------------------------------------------------------------------------------- embedding */

static void test_embedding(void) {
  const int64_t B = 2, T = 32, C = 128, V = 1000, P = 64;
  float *wte = fbuf((size_t)(V * C)), *wpe = fbuf((size_t)(P * C)), *out = fbuf((size_t)(B * T * C)),
        *out2 = fbuf((size_t)(B * T * C));
  int32_t tok[64], pos[64];
  fill(wte, (size_t)(V * C), -1, 1);
  fill(wpe, (size_t)(P * C), -1, 1);
  for (int i = 0; i < B * T; i++) tok[i] = (int32_t)tu_rng_int(&rng, 0, V - 1), pos[i] = (int32_t)tu_rng_int(&rng, 0, P - 1);
  tok[3] = tok[40] = tok[41] = 7; /* repeated ids: their gradient rows accumulate */
  TU_STATUS(weft_ref_embedding_forward(out, tok, NULL, wte, wpe, B, T, C, V, P), WEFT_OK, "embedding forward");
  int exact = 1;
  for (int64_t bt = 0; bt < B * T; bt++)
    for (int64_t c = 0; c < C; c++)
      if (tu_bits(out[bt * C + c]) != tu_bits(wte[tok[bt] * C + c] + wpe[(bt % T) * C + c])) exact = 0;
  TU_CHECK(exact, "embedding forward is not wte[tok] + wpe[t], one add each");
  TU_STATUS(weft_ref_embedding_forward(out2, tok, pos, wte, wpe, B, T, C, V, P), WEFT_OK, "embedding forward, pos");
  TU_CHECK(tu_bits(out2[5 * C + 9]) == tu_bits(wte[tok[5] * C + 9] + wpe[pos[5] * C + 9]),
           "embedding forward with explicit positions uses pos[b,t]");

  /* backward: against float64 sums (a linear op: the finite differences are these sums) */
  float *dout = fbuf((size_t)(B * T * C)), *dwte = fbuf((size_t)(V * C)), *dwpe = fbuf((size_t)(P * C));
  fill(dout, (size_t)(B * T * C), -1, 1);
  dwte[7 * C] = 0.25f; /* accumulates into what is there */
  TU_STATUS(weft_ref_embedding_backward(dwte, dwpe, dout, tok, pos, B, T, C, V, P), WEFT_OK, "embedding backward");
  double *wd = dbuf((size_t)(V * C)), *pd = dbuf((size_t)(P * C));
  wd[7 * C] = 0.25;
  for (int64_t bt = 0; bt < B * T; bt++)
    for (int64_t c = 0; c < C; c++) wd[tok[bt] * C + c] += dout[bt * C + c], pd[pos[bt] * C + c] += dout[bt * C + c];
  close_all("embedding dwte", dwte, wd, (size_t)(V * C), 1e-5, 1.0);
  close_all("embedding dwpe", dwpe, pd, (size_t)(P * C), 1e-5, 1.0);
  /* the order: row 7 gets b,t = 3, 40, 41 ascending, added to 0.25 */
  float want = 0.25f;
  want = want + dout[3 * C];
  want = want + dout[40 * C];
  want = want + dout[41 * C];
  TU_CHECK(tu_bits(dwte[7 * C]) == tu_bits(want), "dwte row 7 is not accumulated in ascending (b,t) order");

  /* out-of-range indices: refused, nothing written */
  float before = out[0];
  out[0] = 12345.0f;
  tok[10] = (int32_t)V;
  TU_STATUS(weft_ref_embedding_forward(out, tok, NULL, wte, wpe, B, T, C, V, P), WEFT_ERR_INVALID_ARGUMENT,
            "embedding forward, token id == V");
  TU_CHECK(out[0] == 12345.0f, "a refused embedding forward wrote its output");
  tok[10] = -1;
  TU_STATUS(weft_ref_embedding_backward(dwte, dwpe, dout, tok, pos, B, T, C, V, P), WEFT_ERR_INVALID_ARGUMENT,
            "embedding backward, token id -1");
  tok[10] = 0;
  pos[2] = (int32_t)P;
  TU_STATUS(weft_ref_embedding_forward(out, tok, pos, wte, wpe, B, T, C, V, P), WEFT_ERR_INVALID_ARGUMENT,
            "embedding forward, position == P");
  TU_STATUS(weft_ref_embedding_forward(out, tok, NULL, wte, wpe, B, T, C, V, T - 1), WEFT_ERR_INVALID_ARGUMENT,
            "embedding forward, T > P rows of wpe");
  out[0] = before;

  /* NaN payloads in the table come out canonical */
  pos[2] = 0;
  wte[tok[0] * C + 1] = tu_float(0x7fa00001u);
  wte[tok[0] * C + 2] = tu_float(0xffc0beefu);
  TU_STATUS(weft_ref_embedding_forward(out, tok, NULL, wte, wpe, B, T, C, V, P), WEFT_OK, "embedding forward, NaN");
  TU_CHECK(all_canonical_nan(out + 1, 2), "embedding forward of NaN payloads: 0x%08x 0x%08x, want 0x%08x",
           tu_bits(out[1]), tu_bits(out[2]), QNAN_BITS);
  free(wte), free(wpe), free(out), free(out2), free(dout), free(dwte), free(dwpe), free(wd), free(pd);
}

/* -------------------------------------------------------------------------------------- layernorm */

typedef struct ln_ctx {
  int64_t N, C;
  double eps;
  double *x, *g, *b, *w, *y;
  int which; /* 0: d/dx, 1: d/dgamma, 2: d/dbeta */
} ln_ctx;

static double ln_obj(void *p, const double *v) {
  ln_ctx *c = p;
  d_layernorm(c->y, c->which == 0 ? v : c->x, c->which == 1 ? v : c->g, c->which == 2 ? v : c->b, c->N, c->C, c->eps);
  double L = 0;
  for (int64_t i = 0; i < c->N * c->C; i++) L += c->w[i] * c->y[i];
  return L;
}

static void test_layernorm(void) {
  const int64_t N = 64, C = 128;
  const float eps = 1e-5f;
  const size_t n = (size_t)(N * C);
  float *x = fbuf(n), *g = fbuf((size_t)C), *b = fbuf((size_t)C), *y = fbuf(n), *y2 = fbuf(n), *mean = fbuf((size_t)N),
        *rstd = fbuf((size_t)N);
  fill(x, n, -2, 3);
  fill(g, (size_t)C, 0.5f, 1.5f);
  fill(b, (size_t)C, -0.5f, 0.5f);
  for (int64_t c = 0; c < C; c++) x[5 * C + c] = 1000.0f + x[5 * C + c]; /* a row with a large mean */
  weft_ref_layernorm_forward(y, mean, rstd, x, g, b, N, C, eps);
  double *xd = dbuf(n), *gd = dbuf((size_t)C), *bd = dbuf((size_t)C), *yd = dbuf(n);
  to_d(xd, x, n), to_d(gd, g, (size_t)C), to_d(bd, b, (size_t)C);
  d_layernorm(yd, xd, gd, bd, N, C, eps);
  /* row 5 (mean ~1000) loses ~log2(1000/std) bits to fp32's x - mean, as any fp32 layernorm does */
  double w = close_all("layernorm y", y, yd, (size_t)(5 * C), 2e-5, 1.0);
  close_all("layernorm y, row 5 (large mean)", y + 5 * C, yd + 5 * C, (size_t)C, 2e-3, 1.0);
  double w2 = close_all("layernorm y, rows 6..", y + 6 * C, yd + 6 * C, (size_t)((N - 6) * C), 2e-5, 1.0);
  {
    double md[64], rd[64];
    for (int64_t r = 0; r < N; r++) {
      double sm = 0, v = 0;
      for (int64_t c = 0; c < C; c++) sm += xd[r * C + c];
      md[r] = sm / (double)C;
      for (int64_t c = 0; c < C; c++) v += (xd[r * C + c] - md[r]) * (xd[r * C + c] - md[r]);
      rd[r] = 1.0 / sqrt(v / (double)C + (double)eps);
    }
    close_all("layernorm mean", mean, md, (size_t)N, 1e-5, 1e-3);
    close_all("layernorm rstd", rstd, rd, 5, 1e-5, 0.0);
    close_all("layernorm rstd, rows 6..", rstd + 6, rd + 6, (size_t)(N - 6), 1e-5, 0.0);
  }
  printf("  layernorm forward: worst %.3f of the bound\n", w > w2 ? w : w2);
  weft_ref_layernorm_forward(y2, NULL, NULL, x, g, b, N, C, eps);
  TU_CHECK(memcmp(y, y2, n * sizeof *y) == 0, "layernorm forward: two calls, different bits");

  /* backward against finite differences, on a smaller problem */
  const int64_t n2 = 4, c2 = 64;
  const size_t m = (size_t)(n2 * c2);
  float *dy = fbuf(m), *dx = fbuf(m), *dg = fbuf((size_t)c2), *db = fbuf((size_t)c2);
  fill(dy, m, -1, 1);
  weft_ref_layernorm_forward(y, mean, rstd, x, g, b, n2, c2, eps);
  weft_ref_layernorm_backward(dx, dg, db, dy, x, mean, rstd, g, n2, c2);
  ln_ctx ctx = {n2, c2, eps, dbuf(m), dbuf((size_t)c2), dbuf((size_t)c2), dbuf(m), dbuf(m), 0};
  to_d(ctx.x, x, m), to_d(ctx.g, g, (size_t)c2), to_d(ctx.b, b, (size_t)c2), to_d(ctx.w, dy, m);
  fd_check("layernorm dx", ln_obj, &ctx, ctx.x, dx, m, m);
  ctx.which = 1;
  fd_check("layernorm dgamma", ln_obj, &ctx, ctx.g, dg, (size_t)c2, (size_t)c2);
  ctx.which = 2;
  fd_check("layernorm dbeta", ln_obj, &ctx, ctx.b, db, (size_t)c2, (size_t)c2);

  /* specials: a NaN row is NaN (canonical) throughout, other rows untouched; a constant row (subnormal
   * values) normalises to beta exactly; +inf makes its row NaN. */
  memcpy(x + C, x, (size_t)C * sizeof *x);
  x[0] = tu_float(0x7f800123u);
  for (int64_t c = 0; c < C; c++) x[2 * C + c] = tu_float(0x00000005u);
  x[3 * C + 7] = INFINITY;
  weft_ref_layernorm_forward(y, mean, rstd, x, g, b, 4, C, eps);
  TU_CHECK(all_canonical_nan(y, (size_t)C) && tu_bits(mean[0]) == QNAN_BITS && tu_bits(rstd[0]) == QNAN_BITS,
           "layernorm of a row with a NaN: y[0] 0x%08x mean 0x%08x rstd 0x%08x, want all 0x%08x", tu_bits(y[0]),
           tu_bits(mean[0]), tu_bits(rstd[0]), QNAN_BITS);
  TU_CHECK(isfinite(y[C]) && isfinite(mean[1]), "layernorm: a NaN in row 0 reached row 1");
  int ok = 1;
  for (int64_t c = 0; c < C; c++) ok &= tu_bits(y[2 * C + c]) == tu_bits(b[c]);
  TU_CHECK(ok && rstd[2] == weft_rsqrtf(eps), "layernorm of a constant subnormal row is not beta exactly");
  TU_CHECK(all_canonical_nan(y + 3 * C, (size_t)C), "layernorm of a row with +inf is not all canonical NaN");
  dy[0] = tu_float(0xffc00001u);
  memset(dg, 0, (size_t)c2 * sizeof *dg);
  weft_ref_layernorm_backward(dx, dg, db, dy, x + C, mean + 1, rstd + 1, g, 1, c2);
  TU_CHECK(all_canonical_nan(dx, (size_t)c2) && tu_bits(dg[0]) == QNAN_BITS,
           "layernorm backward of a NaN dy: dx and dgamma[0] not canonical NaN");
  free(x), free(g), free(b), free(y), free(y2), free(mean), free(rstd), free(xd), free(gd), free(bd), free(yd);
  free(dy), free(dx), free(dg), free(db), free(ctx.x), free(ctx.g), free(ctx.b), free(ctx.w), free(ctx.y);
}

/* ------------------------------------------------------------------------------------------- gelu */

static void test_gelu(void) {
  const size_t n = 8192;
  float *x = fbuf(n), *y = fbuf(n), *dy = fbuf(n), *dx = fbuf(n);
  double *yd = dbuf(n);
  for (size_t i = 0; i < n; i++) x[i] = -8.0f + 16.0f * (float)i / (float)n + tu_rng_float(&rng, 0, 1e-3f);
  weft_ref_gelu_forward(y, x, (int64_t)n);
  /* 1 + tanh(u) cancels for x < 0: its ~1e-7 absolute error, times x/2, bounds the error there */
  long gm = 0;
  for (size_t i = 0; i < n; i++) {
    yd[i] = d_gelu((double)x[i]);
    double bound = 1e-5 * fabs(yd[i]) + 1e-7 * fabs((double)x[i]) + 1e-30;
    if (!(fabs((double)y[i] - yd[i]) <= bound) && gm++ == 0)
      TU_CHECK(0, "gelu(%a) = %.9g, float64 says %.9g", (double)x[i], (double)y[i], yd[i]);
  }
  TU_CHECK(gm == 0, "gelu forward: %ld of %zu out of tolerance", gm, n);
  /* backward: d gelu/dx by central differences of the float64 forward, elementwise */
  for (size_t i = 0; i < n; i++) dy[i] = 1.0f;
  weft_ref_gelu_backward(dx, x, dy, (int64_t)n);
  long misses = 0;
  for (size_t i = 0; i < n; i++) {
    double h = 1e-5, fd = (d_gelu((double)x[i] + h) - d_gelu((double)x[i] - h)) / (2 * h);
    if (!(fabs((double)dx[i] - fd) <= 1e-5 * fabs(fd) + 2e-6) && misses++ == 0)
      TU_CHECK(0, "gelu'(%a) = %.9g, finite differences %.9g", (double)x[i], (double)dx[i], fd);
  }
  TU_CHECK(misses == 0, "gelu backward: %ld of %zu off the finite differences", misses, n);
  fill(dy, n, -2, 2);
  float *dx2 = fbuf(n);
  weft_ref_gelu_backward(dx2, x, dy, (int64_t)n);
  int ok = 1;
  for (size_t i = 0; i < n; i++) ok &= tu_bits(dx2[i]) == tu_bits(dx[i] * dy[i]);
  TU_CHECK(ok, "gelu backward is not gelu'(x) * dy, one multiply");

  /* specials */
  const float sx[] = {tu_float(0x7fa00001u), tu_float(0xffc12345u), INFINITY, -INFINITY, -0.0f, 0.0f,
                      tu_float(0x00000003u), tu_float(0x80400000u), 20.0f, -20.0f, 1e30f, -1e30f};
  const uint32_t want[] = {QNAN_BITS, QNAN_BITS, 0x7f800000u, QNAN_BITS, 0x80000000u, 0x00000000u,
                           tu_bits(0.5f * tu_float(3u)), tu_bits(0.5f * tu_float(0x80400000u)), tu_bits(20.0f), 0x80000000u,
                           tu_bits(1e30f), 0x80000000u};
  float sy[12];
  weft_ref_gelu_forward(sy, sx, 12);
  for (int i = 0; i < 12; i++) {
    char what[64];
    snprintf(what, sizeof what, "gelu(0x%08x)", tu_bits(sx[i]));
    check_bits(what, sy[i], want[i]);
  }
  float sd[12], ones[12];
  for (int i = 0; i < 12; i++) ones[i] = 1.0f;
  weft_ref_gelu_backward(sd, sx, ones, 12);
  TU_CHECK(all_canonical_nan(sd, 2), "gelu backward of NaN payloads is not canonical NaN");
  check_bits("gelu'(-0)", sd[4], tu_bits(0.5f));
  check_bits("gelu'(20)", sd[8], tu_bits(1.0f));
  check_bits("gelu'(-20)", sd[9], 0x00000000u);
  free(x), free(y), free(dy), free(dx), free(dx2), free(yd);
}

/* -------------------------------------------------------------------------------- softmax, attention */

typedef struct sm_ctx {
  int64_t R, T;
  double scale, *w, *p;
} sm_ctx;

static double sm_obj(void *p, const double *s) {
  sm_ctx *c = p;
  d_softmax_rows(c->p, s, c->R, c->T, c->scale);
  double L = 0;
  for (int64_t i = 0; i < c->R * c->T * c->T; i++) L += c->w[i] * c->p[i];
  return L;
}

static void test_softmax(void) {
  const int64_t R = 4, T = 32;
  const size_t n = (size_t)(R * T * T);
  const float scale = 0.125f;
  float *s = fbuf(n), *p = fbuf(n), *dp = fbuf(n), *ds = fbuf(n);
  double *sd = dbuf(n), *pd = dbuf(n);
  fill(s, n, -20, 20);
  weft_ref_causal_softmax_forward(p, s, R, T, scale);
  to_d(sd, s, n);
  d_softmax_rows(pd, sd, R, T, scale);
  close_all("causal softmax p", p, pd, n, 1e-5, 1e-6);
  int masked_zero = 1;
  for (int64_t r = 0; r < R * T; r++)
    for (int64_t j = r % T + 1; j < T; j++) masked_zero &= tu_bits(p[r * T + j]) == 0u;
  TU_CHECK(masked_zero, "causal softmax: a masked probability is not +0");

  const int64_t R2 = 2, T2 = 16;
  const size_t m = (size_t)(R2 * T2 * T2);
  fill(dp, m, -1, 1);
  weft_ref_causal_softmax_forward(p, s, R2, T2, scale);
  weft_ref_causal_softmax_backward(ds, p, dp, R2, T2, scale);
  sm_ctx ctx = {R2, T2, scale, dbuf(m), dbuf(m)};
  to_d(ctx.w, dp, m);
  to_d(sd, s, m);
  /* masked entries have zero gradient both ways: check them all */
  fd_check("causal softmax dscores", sm_obj, &ctx, sd, ds, m, m);

  /* specials: a -inf score is probability 0; NaN anywhere in the visible part makes the row NaN; +inf too */
  for (int64_t j = 0; j < T; j++) s[(T - 1) * T + j] = 0.0f;
  s[(T - 1) * T + 3] = -INFINITY;
  s[1 * T + 0] = tu_float(0x7f812345u);
  s[2 * T + 1] = INFINITY;
  s[3 * T + 3] = 1.0f; /* row 3's column 3 is visible: fine; row 2's column 3 is masked */
  s[2 * T + 3] = tu_float(0xffffffffu);
  weft_ref_causal_softmax_forward(p, s, 1, T, 1.0f);
  TU_CHECK(tu_bits(p[(T - 1) * T + 3]) == 0u && p[(T - 1) * T + 4] == weft_recipf((float)(T - 1)),
           "causal softmax with a -inf score: p = %a, others %a", (double)p[(T - 1) * T + 3], (double)p[(T - 1) * T + 4]);
  TU_CHECK(all_canonical_nan(p + T, 2), "causal softmax row with a NaN score is not canonical NaN");
  TU_CHECK(all_canonical_nan(p + 2 * T, 3) && tu_bits(p[2 * T + 3]) == 0u,
           "causal softmax row with +inf: NaN over the visible columns, +0 masked (a NaN under the mask is ignored)");
  free(s), free(p), free(dp), free(ds), free(sd), free(pd), free(ctx.w), free(ctx.p);
}

typedef struct at_ctx {
  int64_t B, T, C, NH;
  double *w, *out, *att;
} at_ctx;

static double at_obj(void *p, const double *qkv) {
  at_ctx *c = p;
  d_attention(c->out, c->att, qkv, c->B, c->T, c->C, c->NH);
  double L = 0;
  for (int64_t i = 0; i < c->B * c->T * c->C; i++) L += c->w[i] * c->out[i];
  return L;
}

/* The unfused form in the canonical orders: scores by ascending dot products over all j (a matmul),
 * causal softmax, out = att @ v over all j ascending; and the backward likewise. */
static void unfused_attention(float *out, float *att, float *dqkv, const float *dout, const float *qkv, int64_t B,
                              int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = weft_rsqrtf((float)hs);
  float *s = fbuf((size_t)(T * T)), *da = fbuf((size_t)(T * T)), *dsc = fbuf((size_t)(T * T));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++) {
      const float *qkvb = qkv + b * T * C3;
      for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < T; j++) {
          float acc = 0.0f;
          for (int64_t i = 0; i < hs; i++) acc = acc + qkvb[t * C3 + h * hs + i] * qkvb[j * C3 + C + h * hs + i];
          s[t * T + j] = acc;
        }
      float *a = att + (b * NH + h) * T * T;
      weft_ref_causal_softmax_forward(a, s, 1, T, scale);
      for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < hs; i++) {
          float acc = 0.0f;
          for (int64_t j = 0; j < T; j++) acc = acc + a[t * T + j] * qkvb[j * C3 + 2 * C + h * hs + i];
          out[(b * T + t) * C + h * hs + i] = acc;
        }
      const float *dob = dout + b * T * C;
      for (int64_t t = 0; t < T; t++) /* datt = dout @ v^T */
        for (int64_t j = 0; j < T; j++) {
          float acc = 0.0f;
          for (int64_t i = 0; i < hs; i++) acc = acc + dob[t * C + h * hs + i] * qkvb[j * C3 + 2 * C + h * hs + i];
          da[t * T + j] = acc;
        }
      weft_ref_causal_softmax_backward(dsc, a, da, 1, T, scale);
      float *dq = dqkv + b * T * C3;
      for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < hs; i++) {
          float aq = 0.0f, ak = 0.0f, av = 0.0f;
          for (int64_t j = 0; j < T; j++) aq = aq + dsc[t * T + j] * qkvb[j * C3 + C + h * hs + i]; /* ds @ k */
          for (int64_t u = 0; u < T; u++) {
            ak = ak + dsc[u * T + t] * qkvb[u * C3 + h * hs + i]; /* ds^T @ q */
            av = av + a[u * T + t] * dob[u * C + h * hs + i];     /* att^T @ dout */
          }
          dq[t * C3 + h * hs + i] = aq, dq[t * C3 + C + h * hs + i] = ak, dq[t * C3 + 2 * C + h * hs + i] = av;
        }
    }
  free(s), free(da), free(dsc);
}

static void test_attention(void) {
  const int64_t B = 2, T = 32, C = 128, NH = 4;
  const size_t nq = (size_t)(B * T * 3 * C), no = (size_t)(B * T * C), na = (size_t)(B * NH * T * T);
  float *qkv = fbuf(nq), *out = fbuf(no), *pre = fbuf(na), *att = fbuf(na), *out2 = fbuf(no), *att2 = fbuf(na);
  float *dout = fbuf(no), *dqkv = fbuf(nq), *dqkv2 = fbuf(nq);
  fill(qkv, nq, -1, 1);
  fill(dout, no, -1, 1);
  TU_STATUS(weft_ref_attention_forward(out, pre, att, qkv, B, T, C, NH), WEFT_OK, "attention forward");
  double *qd = dbuf(nq), *od = dbuf(no), *ad = dbuf(na);
  to_d(qd, qkv, nq);
  d_attention(od, ad, qd, B, T, C, NH);
  close_all("attention out", out, od, no, 1e-5, 1e-2);
  close_all("attention att", att, ad, na, 1e-5, 1e-6);
  TU_CHECK(isinf(pre[1]) && pre[1] < 0 && isfinite(pre[T]), "attention preatt: masked scores are -inf, others finite");
  TU_STATUS(weft_ref_attention_backward(dqkv, dout, qkv, att, B, T, C, NH), WEFT_OK, "attention backward");

  /* the unfused form gives the same bits */
  unfused_attention(out2, att2, dqkv2, dout, qkv, B, T, C, NH);
  TU_CHECK(memcmp(out, out2, no * sizeof *out) == 0 && memcmp(att, att2, na * sizeof *att) == 0,
           "attention forward: fused and unfused (matmul, causal softmax, matmul) differ in bits");
  TU_CHECK(memcmp(dqkv, dqkv2, nq * sizeof *dqkv) == 0, "attention backward: fused and unfused differ in bits");
  TU_STATUS(weft_ref_attention_forward(out2, NULL, att2, qkv, B, T, C, NH), WEFT_OK, "attention forward again");
  TU_STATUS(weft_ref_attention_backward(dqkv2, dout, qkv, att, B, T, C, NH), WEFT_OK, "attention backward again");
  TU_CHECK(memcmp(out, out2, no * sizeof *out) == 0 && memcmp(dqkv, dqkv2, nq * sizeof *dqkv) == 0,
           "attention: two calls, different bits");
  TU_STATUS(weft_ref_attention_forward(out2, NULL, att2, qkv, B, T, C, 5), WEFT_ERR_SHAPE, "attention, NH not dividing C");
  TU_STATUS(weft_ref_attention_forward(out2, NULL, NULL, qkv, B, T, C, NH), WEFT_ERR_INVALID_ARGUMENT,
            "attention forward without att");
  TU_STATUS(weft_ref_attention_backward(dqkv2, dout, qkv, att, B, -1, C, NH), WEFT_ERR_SHAPE,
            "attention backward, T = -1");
  TU_STATUS(weft_ref_crossentropy_forward(NULL, out, NULL, 1, 4), WEFT_ERR_INVALID_ARGUMENT, "cross-entropy, NULLs");
  TU_STATUS(weft_ref_embedding_forward(out2, NULL, NULL, qkv, qkv, 1, 1, 1, 1, 1), WEFT_ERR_INVALID_ARGUMENT,
            "embedding forward without token ids");

  /* backward against finite differences (a random subset of qkv's entries, on a smaller problem) */
  const int64_t b2 = 1, t2 = 16, c2 = 64, nh2 = 4;
  const size_t mq = (size_t)(b2 * t2 * 3 * c2), mo = (size_t)(b2 * t2 * c2), ma = (size_t)(b2 * nh2 * t2 * t2);
  fill(qkv, mq, -1.5f, 1.5f);
  TU_STATUS(weft_ref_attention_forward(out, NULL, att, qkv, b2, t2, c2, nh2), WEFT_OK, "attention forward (small)");
  TU_STATUS(weft_ref_attention_backward(dqkv, dout, qkv, att, b2, t2, c2, nh2), WEFT_OK, "attention backward (small)");
  at_ctx ctx = {b2, t2, c2, nh2, dbuf(mo), dbuf(mo), dbuf(ma)};
  to_d(ctx.w, dout, mo);
  to_d(qd, qkv, mq);
  fd_check("attention dqkv", at_obj, &ctx, qd, dqkv, mq, 600);

  /* NaN in one query: that head's row is NaN (canonical), the rest finite */
  qkv[0] = tu_float(0x7f800001u);
  TU_STATUS(weft_ref_attention_forward(out, pre, att, qkv, b2, t2, c2, nh2), WEFT_OK, "attention forward, NaN");
  TU_CHECK(all_canonical_nan(out, (size_t)(c2 / nh2)) && all_canonical_nan(pre, 1) && all_canonical_nan(att, 1) &&
               isfinite(out[c2 / nh2]) && isfinite(out[c2]),
           "attention with a NaN query: that row canonical NaN, others finite");
  free(qkv), free(out), free(pre), free(att), free(out2), free(att2), free(dout), free(dqkv), free(dqkv2);
  free(qd), free(od), free(ad), free(ctx.w), free(ctx.out), free(ctx.att);
}

/* ---------------------------------------------------------------------------------- cross-entropy */

typedef struct ce_ctx {
  int64_t N, V;
  const int32_t *tg;
  double *w, *loss;
} ce_ctx;

static double ce_obj(void *p, const double *z) {
  ce_ctx *c = p;
  d_xent(c->loss, z, c->tg, c->N, c->V);
  double L = 0;
  for (int64_t i = 0; i < c->N; i++) L += c->w[i] * c->loss[i];
  return L;
}

static void test_crossentropy(void) {
  const int64_t N = 16, V = 1000;
  const size_t n = (size_t)(N * V);
  float *z = fbuf(n), *loss = fbuf((size_t)N), *dz = fbuf(n), *dloss = fbuf((size_t)N);
  int32_t tg[16];
  fill(z, n, -8, 8);
  for (int i = 0; i < N; i++) tg[i] = (int32_t)tu_rng_int(&rng, 0, V - 1);
  TU_STATUS(weft_ref_crossentropy_forward(loss, z, tg, N, V), WEFT_OK, "cross-entropy forward");
  double *zd = dbuf(n), *ld = dbuf((size_t)N);
  to_d(zd, z, n);
  d_xent(ld, zd, tg, N, V);
  close_all("cross-entropy loss", loss, ld, (size_t)N, 1e-5, 1e-3);

  /* against SOFTMAX_XENT (reference.c) with one-hot targets and dloss = 1/N: the same bits */
  const float inv = weft_recipf((float)N);
  for (int i = 0; i < N; i++) dloss[i] = inv;
  TU_STATUS(weft_ref_crossentropy_backward(dz, z, tg, dloss, N, V), WEFT_OK, "cross-entropy backward");
  float *onehot = fbuf(n), *grad = fbuf(n), total = 0.0f;
  for (int i = 0; i < N; i++) onehot[(size_t)i * V + tg[i]] = 1.0f;
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_SOFTMAX_XENT;
  op.in[0] = z, op.in[1] = onehot, op.out[0] = &total, op.out[1] = grad;
  op.rows = N, op.cols = V, op.inv_rows = inv;
  weft_reference_run(&op);
  float tot = 0.0f;
  for (int i = 0; i < N; i++) tot = tot + loss[i];
  tot = tot * inv;
  TU_CHECK(tu_bits(tot) == tu_bits(total), "cross-entropy: mean of the losses %a, SOFTMAX_XENT's loss %a", (double)tot,
           (double)total);
  TU_CHECK(memcmp(grad, dz, n * sizeof *dz) == 0, "cross-entropy backward differs in bits from SOFTMAX_XENT's gradient");

  /* backward against finite differences of the float64 forward, random dloss */
  const int64_t n2 = 4;
  fill(dloss, (size_t)n2, 0.1f, 1.0f);
  TU_STATUS(weft_ref_crossentropy_backward(dz, z, tg, dloss, n2, V), WEFT_OK, "cross-entropy backward (small)");
  ce_ctx ctx = {n2, V, tg, dbuf((size_t)n2), dbuf((size_t)n2)};
  to_d(ctx.w, dloss, (size_t)n2);
  double *dzd = dbuf((size_t)(n2 * V));
  to_d(dzd, z, (size_t)(n2 * V));
  /* the target entries carry the large gradients: put them in the subset */
  fd_check("cross-entropy dlogits", ce_obj, &ctx, dzd, dz, (size_t)(n2 * V), 500);
  {
    float g[4];
    double *zz = dbuf((size_t)(n2 * V));
    memcpy(zz, dzd, (size_t)(n2 * V) * sizeof *zz);
    for (int i = 0; i < n2; i++) g[i] = dz[(size_t)i * V + tg[i]];
    for (int i = 0; i < n2; i++) {
      size_t k = (size_t)i * V + tg[i];
      double h = 1e-5;
      zz[k] = dzd[k] + h;
      double lp = ce_obj(&ctx, zz);
      zz[k] = dzd[k] - h;
      double lm = ce_obj(&ctx, zz);
      zz[k] = dzd[k];
      double fd = (lp - lm) / (2 * h);
      TU_CHECK(fabs((double)g[i] - fd) <= 1e-4 * fabs(fd) + 1e-6, "cross-entropy dlogits at the target of row %d: %.9g, "
               "finite differences %.9g", i, (double)g[i], fd);
    }
    free(zz);
  }

  /* bad targets refused before anything is written; NaN logits give a canonical NaN loss */
  loss[0] = 42.0f;
  tg[3] = (int32_t)V;
  TU_STATUS(weft_ref_crossentropy_forward(loss, z, tg, N, V), WEFT_ERR_INVALID_ARGUMENT, "cross-entropy, target == V");
  TU_STATUS(weft_ref_crossentropy_backward(dz, z, tg, dloss, N, V), WEFT_ERR_INVALID_ARGUMENT,
            "cross-entropy backward, target == V");
  TU_CHECK(loss[0] == 42.0f, "a refused cross-entropy wrote its output");
  tg[3] = 0;
  z[5] = tu_float(0xffa00001u);
  z[V + 2] = -INFINITY;
  TU_STATUS(weft_ref_crossentropy_forward(loss, z, tg, 2, V), WEFT_OK, "cross-entropy, NaN and -inf logits");
  TU_CHECK(tu_bits(loss[0]) == QNAN_BITS && isfinite(loss[1]), "cross-entropy: NaN row 0x%08x, -inf row %a",
           tu_bits(loss[0]), (double)loss[1]);
  free(z), free(loss), free(dz), free(dloss), free(zd), free(ld), free(onehot), free(grad), free(ctx.w),
      free(ctx.loss), free(dzd);

  /* GPT-2's vocabulary: 50,257 wide, against float64, twice for the bits, and against SOFTMAX_XENT */
  const int64_t NV = 2, VV = 50257;
  const size_t nv = (size_t)(NV * VV);
  float *zv = fbuf(nv), *lv = fbuf(2), *lv2 = fbuf(2), *gv = fbuf(nv), *gv2 = fbuf(nv), *oh = fbuf(nv), tv = 0.0f;
  double *zvd = dbuf(nv), lvd[2];
  int32_t tgv[2] = {50256, 17};
  fill(zv, nv, -12, 12);
  zv[50256] = 15.0f;
  to_d(zvd, zv, nv);
  d_xent(lvd, zvd, tgv, NV, VV);
  TU_STATUS(weft_ref_crossentropy_forward(lv, zv, tgv, NV, VV), WEFT_OK, "cross-entropy forward, V = 50257");
  TU_STATUS(weft_ref_crossentropy_forward(lv2, zv, tgv, NV, VV), WEFT_OK, "cross-entropy forward, V = 50257, again");
  close_all("cross-entropy loss, V = 50257", lv, lvd, 2, 1e-5, 1e-3);
  TU_CHECK(memcmp(lv, lv2, 2 * sizeof *lv) == 0, "cross-entropy: two calls, different bits");
  float dl[2] = {0.5f, 0.5f};
  TU_STATUS(weft_ref_crossentropy_backward(gv, zv, tgv, dl, NV, VV), WEFT_OK, "cross-entropy backward, V = 50257");
  oh[50256] = 1.0f, oh[VV + 17] = 1.0f;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_SOFTMAX_XENT;
  op.in[0] = zv, op.in[1] = oh, op.out[0] = &tv, op.out[1] = gv2;
  op.rows = NV, op.cols = VV, op.inv_rows = 0.5f;
  weft_reference_run(&op);
  TU_CHECK(memcmp(gv, gv2, nv * sizeof *gv) == 0 && tu_bits(tv) == tu_bits((lv[0] + lv[1]) * 0.5f),
           "cross-entropy at V = 50257 differs in bits from SOFTMAX_XENT");
  free(zv), free(lv), free(lv2), free(gv), free(gv2), free(oh), free(zvd);
}

/* ----------------------------------------------------------------------------- AdamW, clip */

static void test_adamw(void) {
  const size_t n = 4096;
  float *p = fbuf(n), *g = fbuf(n), *m = fbuf(n), *v = fbuf(n);
  fill(p, n, -1, 1);
  double *pd = dbuf(n), *md = dbuf(n), *vd = dbuf(n), *pstart = dbuf(n);
  to_d(pd, p, n);
  to_d(pstart, p, n);
  const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  for (int64_t t = 1; t <= 5; t++) {
    fill(g, n, -0.1f, 0.1f);
    if (t == 3) g[0] = 0.0f; /* a zero gradient on an entry with history */
    float bc1 = weft_ref_adamw_bias_correction(b1, t), bc2 = weft_ref_adamw_bias_correction(b2, t);
    TU_CHECK(fabs((double)bc1 - (1 - pow((double)b1, (double)t))) <= 1e-6 &&
                 fabs((double)bc2 - (1 - pow((double)b2, (double)t))) <= 1e-6,
             "AdamW bias corrections at step %lld: %.9g %.9g", (long long)t, (double)bc1, (double)bc2);
    weft_ref_adamw(p, g, m, v, (int64_t)n, lr, b1, b2, eps, wd, bc1, bc2);
    for (size_t i = 0; i < n; i++) {
      double gi = g[i];
      md[i] = b1 * md[i] + (1 - (double)b1) * gi;
      vd[i] = b2 * vd[i] + (1 - (double)b2) * gi * gi;
      double mh = md[i] / (1 - pow(b1, (double)t)), vh = vd[i] / (1 - pow(b2, (double)t));
      pd[i] -= lr * (mh / (sqrt(vh) + eps) + wd * pd[i]);
    }
  }
  /* compare the parameters' change over the 5 steps (about 5 lr): fp32's rounding of p - lr*u, about
   * 2^-25 of |p| a step, is well inside 1e-6 absolute; m and v are EMAs of g, ~0.1, that may cancel */
  float *dp = fbuf(n);
  for (size_t i = 0; i < n; i++) dp[i] = (float)((double)p[i] - pstart[i]), pd[i] -= pstart[i];
  close_all("AdamW parameter change", dp, pd, n, 1e-3, 1e-3);
  close_all("AdamW m", m, md, n, 1e-5, 1e-2);
  close_all("AdamW v", v, vd, n, 1e-5, 1e-4);
  free(dp), free(pstart);
  float p0 = p[1];
  float nanv[2] = {tu_float(0x7f800002u), 1.0f}, zero[2] = {0, 0}, one[2] = {0, 0};
  float pp[2] = {p0, p0};
  weft_ref_adamw(pp, nanv, zero, one, 2, lr, b1, b2, eps, wd, 0.1f, 0.05f);
  TU_CHECK(tu_bits(pp[0]) == QNAN_BITS && tu_bits(zero[0]) == QNAN_BITS && isfinite(pp[1]),
           "AdamW with a NaN gradient: param 0x%08x m 0x%08x, want canonical NaN there and finite elsewhere",
           tu_bits(pp[0]), tu_bits(zero[0]));
  free(p), free(g), free(m), free(v), free(pd), free(md), free(vd);
}

/* SUMSQ's order written out again with the chunk as a parameter: chunk partials from +0, added to acc in
 * order. With chunk = WEFT_SUMSQ_CHUNK it must give weft_ref_sumsq's bits; other chunks (one chain over
 * everything, 4095) give other bits on the data below, so the checks can tell the orders apart. */
static float chunked_sumsq(const float *x, int64_t n, float acc, int64_t chunk) {
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    float p = 0.0f;
    for (int64_t i = c0; i < n && i < c0 + chunk; i++) {
      float sq = x[i] * x[i];
      p = p + sq;
    }
    acc = acc + p;
  }
  return acc;
}

static void test_sumsq(void) {
  TU_CHECK(WEFT_SUMSQ_CHUNK == 4096, "WEFT_SUMSQ_CHUNK is %d; the canonical order says 4096", WEFT_SUMSQ_CHUNK);
  enum { N1 = 3 * 4096 + 17 };
  float *x = malloc(sizeof(float) * N1);
  fill(x, N1, -2, 2);
  x[4095] = 700.25f, x[8190] = -333.5f; /* large squares where chunks of 4095 and 4096 cut differently */
  double d = 0;
  for (int i = 0; i < N1; i++) d += (double)x[i] * x[i];
  float ss = weft_ref_sumsq(x, N1, 0.0f);
  TU_CHECK(fabs((double)ss - d) <= 1e-5 * d, "sumsq of %d elements: %.9g, float64 %.9g", N1, (double)ss, d);
  check_bits("sumsq, 3 chunks + 17", ss, tu_bits(chunked_sumsq(x, N1, 0.0f, WEFT_SUMSQ_CHUNK)));
  TU_CHECK(tu_bits(ss) != tu_bits(chunked_sumsq(x, N1, 0.0f, N1)) &&
               tu_bits(ss) != tu_bits(chunked_sumsq(x, N1, 0.0f, WEFT_SUMSQ_CHUNK - 1)),
           "the data cannot tell the chunked order (0x%08x) from one chain (0x%08x) or from chunks of 4095 (0x%08x)",
           tu_bits(ss), tu_bits(chunked_sumsq(x, N1, 0.0f, N1)), tu_bits(chunked_sumsq(x, N1, 0.0f, WEFT_SUMSQ_CHUNK - 1)));
  /* acc is continued: acc + P[0] + P[1] + ..., not acc + (P[0] + P[1] + ...) */
  const float acc0 = 12345.678f;
  check_bits("sumsq from acc", weft_ref_sumsq(x, N1, acc0), tu_bits(chunked_sumsq(x, N1, acc0, WEFT_SUMSQ_CHUNK)));
  /* one chunk (n <= 4096) is the plain chain; a tensor split at a chunk boundary into two sumsq calls gives
   * the same bits as one call, while a split elsewhere need not */
  check_bits("sumsq of one chunk", weft_ref_sumsq(x, 4096, 0.5f), tu_bits(chunked_sumsq(x, 4096, 0.5f, 4096 * 4)));
  check_bits("sumsq split at a chunk boundary", weft_ref_sumsq(x + 8192, N1 - 8192, weft_ref_sumsq(x, 8192, 0.0f)),
             tu_bits(ss));
  /* n = 0 leaves acc (canonicalised); a NaN anywhere gives the canonical NaN; squares overflow to +inf */
  check_bits("sumsq of nothing", weft_ref_sumsq(x, 0, -0.0f), 0x80000000u);
  check_bits("sumsq of nothing, a NaN acc", weft_ref_sumsq(x, 0, tu_float(0x7f800123u)), QNAN_BITS);
  const float keep = x[5000];
  x[5000] = tu_float(0xffc01234u);
  check_bits("sumsq with a NaN", weft_ref_sumsq(x, N1, 0.0f), QNAN_BITS);
  x[5000] = 3e30f;
  check_bits("sumsq overflowing", weft_ref_sumsq(x, N1, 0.0f), 0x7f800000u);
  x[5000] = keep;
  /* the clip's sum: the tensors' chunk partials in parameter order, one accumulator from +0 */
  float y[50], *gs[2] = {x, y};
  fill(y, 50, -1, 1);
  const int64_t sz[2] = {N1, 50};
  const float want = weft_sqrtf(chunked_sumsq(y, 50, chunked_sumsq(x, N1, 0.0f, 4096), 4096));
  check_bits("clip norm over 3 chunks + 17 and 50", weft_ref_grad_clip(gs, sz, 2, 1e30f), tu_bits(want));
  free(x);
}

static void test_clip(void) {
  float a[300], b[77], c[5];
  fill(a, 300, -1, 1), fill(b, 77, -1, 1), fill(c, 5, -1, 1);
  float a0[300], b0[77], c0[5];
  memcpy(a0, a, sizeof a), memcpy(b0, b, sizeof b), memcpy(c0, c, sizeof c);
  float *gs[3] = {a, b, c};
  const int64_t sz[3] = {300, 77, 5};
  double ss = 0;
  for (int i = 0; i < 300; i++) ss += (double)a[i] * a[i];
  for (int i = 0; i < 77; i++) ss += (double)b[i] * b[i];
  for (int i = 0; i < 5; i++) ss += (double)c[i] * c[i];
  float norm = weft_ref_grad_clip(gs, sz, 3, 100.0f);
  TU_CHECK(fabs((double)norm - sqrt(ss)) <= 1e-5 * sqrt(ss), "clip: norm %.9g, float64 %.9g", (double)norm, sqrt(ss));
  TU_CHECK(memcmp(a, a0, sizeof a) == 0 && memcmp(c, c0, sizeof c) == 0, "clip changed gradients under the limit");
  norm = weft_ref_grad_clip(gs, sz, 3, 1.0f);
  double after = 0;
  for (int i = 0; i < 300; i++) after += (double)a[i] * a[i];
  for (int i = 0; i < 77; i++) after += (double)b[i] * b[i];
  for (int i = 0; i < 5; i++) after += (double)c[i] * c[i];
  TU_CHECK(fabs(sqrt(after) - 1.0) <= 1e-5, "clip to 1: the norm afterwards is %.9g", sqrt(after));
  const float sc = 1.0f * weft_recipf(norm);
  TU_CHECK(tu_bits(b[7]) == tu_bits(b0[7] * sc), "clip does not scale by max_norm * weft_recipf(norm)");
  a[3] = tu_float(0x7f811111u);
  memcpy(b0, b, sizeof b);
  norm = weft_ref_grad_clip(gs, sz, 3, 1.0f);
  TU_CHECK(tu_bits(norm) == QNAN_BITS && memcmp(b, b0, sizeof b) == 0,
           "clip with a NaN gradient: norm 0x%08x (want canonical NaN), gradients left as they are", tu_bits(norm));
}

/* ---------------------------------------------------------------------------------- scalar functions */

static double ulp_at(double v) {
  float f = (float)fabs(v);
  if (f < FLT_MIN) return ldexp(1.0, -149);
  int e;
  frexpf(f, &e);
  return ldexp(1.0, e - 24);
}

typedef struct err_stats {
  double max_ulp, max_sub;
  float at_ulp, at_sub;
  long n, wrong_inf;
} err_stats;

static void record(err_stats *s, float x, float got, double want) {
  s->n++;
  if (fabs(want) > (double)FLT_MAX || isinf(got)) { /* overflow: both must be inf of one sign (or got FLT_MAX-near) */
    if (!(isinf(got) && (got > 0) == (want > 0)) && !(fabs(want) >= (double)FLT_MAX)) s->wrong_inf++;
    if (isinf(got) && fabs(want) < (double)FLT_MAX * (1 - ldexp(1.0, -25))) s->wrong_inf++;
    return;
  }
  double err = fabs((double)got - want);
  if (fabs(want) < (double)FLT_MIN) {
    err /= ldexp(1.0, -149);
    if (err > s->max_sub) s->max_sub = err, s->at_sub = x;
  } else {
    err /= ulp_at(want);
    if (err > s->max_ulp) s->max_ulp = err, s->at_ulp = x;
  }
}

typedef float (*sfn)(float);
typedef double (*dfn)(double);
static double d_recip(double x) { return 1.0 / x; }
static double d_rsqrt(double x) { return 1.0 / sqrt(x); }

static void sweep(const char *name, sfn f, dfn ref, int positive_only, uint32_t dense_lo, uint32_t dense_hi,
                  double max_ulp) {
  err_stats s;
  memset(&s, 0, sizeof s);
  /* every 1021st bit pattern: all exponents, both signs */
  for (uint64_t u = 1; u < 0x100000000ull; u += 1021) {
    float x = tu_float((uint32_t)u);
    if (x != x || isinf(x) || (positive_only && x <= 0)) continue;
    record(&s, x, f(x), ref((double)x));
  }
  /* every 5th pattern over a dense range (one or two binades, or the range a branch changes in) */
  for (uint32_t u = dense_lo; u < dense_hi; u += 5) {
    float x = tu_float(u);
    record(&s, x, f(x), ref((double)x));
  }
  /* every power of two and its neighbours */
  for (int e = -149; e <= 127; e++) {
    uint32_t b = tu_bits(ldexpf(1.0f, e));
    for (int d = -1; d <= 1; d++) {
      float x = tu_float(b + (uint32_t)d);
      if (x > 0 && !isinf(x)) record(&s, x, f(x), ref((double)x));
    }
  }
  printf("  %-12s %ld points, max %.3f ulp at %a, max %.3f subnormal units at %a\n", name, s.n, s.max_ulp,
         (double)s.at_ulp, s.max_sub, (double)s.at_sub);
  TU_CHECK(s.max_ulp <= max_ulp, "%s is %.3f ulp off at %a (allowed %.2f)", name, s.max_ulp, (double)s.at_ulp, max_ulp);
  TU_CHECK(s.max_sub <= MAX_SUBNORMAL_UNITS, "%s is %.3f subnormal units off at %a", name, s.max_sub, (double)s.at_sub);
  TU_CHECK(s.wrong_inf == 0, "%s: %ld results on the wrong side of overflow", name, s.wrong_inf);
}

static uint64_t fnv(uint64_t h, uint32_t v) {
  for (int i = 0; i < 4; i++) h = (h ^ ((v >> (8 * i)) & 0xffu)) * 1099511628211ull;
  return h;
}

static void test_scalars(void) {
  sweep("weft_recipf", weft_recipf, d_recip, 0, 0x3f800000u, 0x40000000u, RECIP_MAX_ULP);
  sweep("weft_rsqrtf", weft_rsqrtf, d_rsqrt, 1, 0x3f800000u, 0x40800000u, RSQRT_MAX_ULP);
  sweep("weft_sqrtf", weft_sqrtf, sqrt, 1, 0x3f800000u, 0x40800000u, SQRT_MAX_ULP);
  sweep("weft_tanhf", weft_tanhf, tanh, 0, 0x3e800000u, 0x3fa00000u, TANH_MAX_ULP); /* 0.25 .. 1.25 */

  /* special values */
  const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0xffc00000u, 0xffffffffu, 0x7fc12345u};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    float x = tu_float(nans[i]);
    TU_CHECK(tu_bits(weft_recipf(x)) == QNAN_BITS && tu_bits(weft_rsqrtf(x)) == QNAN_BITS &&
                 tu_bits(weft_sqrtf(x)) == QNAN_BITS && tu_bits(weft_tanhf(x)) == QNAN_BITS,
             "NaN 0x%08x in: recip 0x%08x rsqrt 0x%08x sqrt 0x%08x tanh 0x%08x, want 0x%08x", nans[i],
             tu_bits(weft_recipf(x)), tu_bits(weft_rsqrtf(x)), tu_bits(weft_sqrtf(x)), tu_bits(weft_tanhf(x)), QNAN_BITS);
  }
  check_bits("weft_recipf(+0)", weft_recipf(0.0f), 0x7f800000u);
  check_bits("weft_recipf(-0)", weft_recipf(-0.0f), 0xff800000u);
  check_bits("weft_recipf(+inf)", weft_recipf(INFINITY), 0x00000000u);
  check_bits("weft_recipf(-inf)", weft_recipf(-INFINITY), 0x80000000u);
  check_bits("weft_recipf(1)", weft_recipf(1.0f), 0x3f800000u);
  check_bits("weft_recipf(-4)", weft_recipf(-4.0f), 0xbe800000u);
  check_bits("weft_recipf(2^-149)", weft_recipf(tu_float(1u)), 0x7f800000u);
  check_bits("weft_recipf(2^-127)", weft_recipf(tu_float(0x00400000u)), 0x7f000000u);
  check_bits("weft_recipf(2^-128)", weft_recipf(tu_float(0x00200000u)), 0x7f800000u);
  check_bits("weft_recipf(2^127)", weft_recipf(tu_float(0x7f000000u)), 0x00400000u);
  { /* a subnormal result: rounded twice (24 bits, then the subnormal's), so within one unit */
    float r = weft_recipf(-3.0f * ldexpf(1.0f, 125)), w = (float)(-1.0 / (3.0 * ldexp(1.0, 125)));
    TU_CHECK(tu_bits(r) - tu_bits(w) + 1u <= 2u, "weft_recipf(-3*2^125) = %a, want %a within one unit", (double)r, (double)w);
  }
  check_bits("weft_recipf(-FLT_MAX)", weft_recipf(-FLT_MAX), tu_bits((float)(1.0 / -(double)FLT_MAX)));
  check_bits("weft_rsqrtf(+0)", weft_rsqrtf(0.0f), 0x7f800000u);
  check_bits("weft_rsqrtf(-0)", weft_rsqrtf(-0.0f), 0xff800000u);
  check_bits("weft_rsqrtf(+inf)", weft_rsqrtf(INFINITY), 0x00000000u);
  check_bits("weft_rsqrtf(-1)", weft_rsqrtf(-1.0f), QNAN_BITS);
  check_bits("weft_rsqrtf(-inf)", weft_rsqrtf(-INFINITY), QNAN_BITS);
  check_bits("weft_rsqrtf(-2^-149)", weft_rsqrtf(tu_float(0x80000001u)), QNAN_BITS);
  check_bits("weft_rsqrtf(4)", weft_rsqrtf(4.0f), 0x3f000000u);
  check_bits("weft_rsqrtf(2^-149)", weft_rsqrtf(tu_float(1u)), tu_bits((float)(1.0 / sqrt(ldexp(1.0, -149)))));
  check_bits("weft_sqrtf(+0)", weft_sqrtf(0.0f), 0x00000000u);
  check_bits("weft_sqrtf(-0)", weft_sqrtf(-0.0f), 0x80000000u);
  check_bits("weft_sqrtf(+inf)", weft_sqrtf(INFINITY), 0x7f800000u);
  check_bits("weft_sqrtf(-1)", weft_sqrtf(-1.0f), QNAN_BITS);
  check_bits("weft_sqrtf(9)", weft_sqrtf(9.0f), 0x40400000u);
  check_bits("weft_sqrtf(2^-148)", weft_sqrtf(tu_float(2u)), tu_bits(ldexpf(1.0f, -74)));
  check_bits("weft_tanhf(+0)", weft_tanhf(0.0f), 0x00000000u);
  check_bits("weft_tanhf(-0)", weft_tanhf(-0.0f), 0x80000000u);
  check_bits("weft_tanhf(+inf)", weft_tanhf(INFINITY), 0x3f800000u);
  check_bits("weft_tanhf(-inf)", weft_tanhf(-INFINITY), 0xbf800000u);
  check_bits("weft_tanhf(2^-149)", weft_tanhf(tu_float(1u)), 0x00000001u);
  check_bits("weft_tanhf(-2^-130)", weft_tanhf(-ldexpf(1.0f, -130)), tu_bits(-ldexpf(1.0f, -130)));
  check_bits("weft_tanhf(-9.5)", weft_tanhf(-9.5f), 0xbf800000u);
  int odd = 1;
  for (float x = 1e-4f; x < 12.0f; x *= 1.01f) odd &= tu_bits(weft_tanhf(-x)) == (tu_bits(weft_tanhf(x)) | 0x80000000u);
  TU_CHECK(odd, "weft_tanhf is not odd bit for bit");
  int mono = 1;
  for (uint32_t u = 0x3e000000u; u < 0x41200000u; u += 3) mono &= weft_tanhf(tu_float(u)) <= weft_tanhf(tu_float(u + 3));
  TU_CHECK(mono, "weft_tanhf is not monotonic on (0.125, 10)");

  /* fingerprints */
  uint64_t h[4] = {1469598103934665603ull, 1469598103934665603ull, 1469598103934665603ull, 1469598103934665603ull};
  for (uint64_t u = 0; u < 0x100000000ull; u += 65537) {
    float x = tu_float((uint32_t)u);
    h[0] = fnv(h[0], tu_bits(weft_recipf(x)));
    h[1] = fnv(h[1], tu_bits(weft_sqrtf(x)));
    h[2] = fnv(h[2], tu_bits(weft_rsqrtf(x)));
    h[3] = fnv(h[3], tu_bits(weft_tanhf(x)));
  }
  printf("  fingerprints: recip 0x%016llx sqrt 0x%016llx rsqrt 0x%016llx tanh 0x%016llx\n", (unsigned long long)h[0],
         (unsigned long long)h[1], (unsigned long long)h[2], (unsigned long long)h[3]);
  const uint64_t want[4] = {RECIP_FINGERPRINT, SQRT_FINGERPRINT, RSQRT_FINGERPRINT, TANH_FINGERPRINT};
  const char *names[4] = {"weft_recipf", "weft_sqrtf", "weft_rsqrtf", "weft_tanhf"};
  for (int i = 0; i < 4; i++)
    TU_CHECK(h[i] == want[i], "%s's bits changed (fingerprint 0x%016llx, recorded 0x%016llx): every lane's "
             "transcription must change with it; then record the new value", names[i], (unsigned long long)h[i],
             (unsigned long long)want[i]);
}

int main(void) {
  const double start = tu_now();
  rng.s = tu_seed();
  printf("scalar functions:\n");
  test_scalars();
  printf("gradient checks:\n");
  test_embedding();
  test_layernorm();
  test_gelu();
  test_softmax();
  test_attention();
  test_crossentropy();
  test_adamw();
  test_sumsq();
  test_clip();
  return tu_finish("reference_tx", start);
}
