/* test_cuda_tx.c - the CUDA lane's transformer-op kernels (src/lanes/cuda/cuda_tx.cu), straight through the
 * driver API on the lane's own embedded module, bit for bit against the reference kernels of
 * src/core/reference_tx.c (and wmath.c for the scalar functions).
 *
 * Inputs are random with NaNs of several payloads, +-inf, -0 and subnormals mixed in, at GPT-2-like shapes
 * and odd ones. Every output is compared on its raw bits (both sides store NaN as 0x7fc00000). One line per
 * op: cases, elements compared, failures. Then, for information, each op's time at GPT-2 small shapes
 * (B=4, T=64..1024, C=768, NH=12, V=50257) - speed figures proper belong in bench/.
 *
 * Without the CUDA lanes in the build, without a driver or without a GPU: says why and exits 77 (Skipped). */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tutil.h"
#include "weft.h"

#ifndef WEFT_HAVE_CUDA
int main(void) {
  double start = tu_now();
  tu_skip("this weft was built without the CUDA lanes (nvcc or CUDA's headers were not found)");
  return tu_finish("cuda_tx", start);
}
#else

#include "core/reference_tx.h"
#include "cuda_api.h"
#include "cuda_tx_args.h"

extern const unsigned char weft_cuda_fatbin[];

static const weft_cuda_api *cu;
static CUmodule mod;
static tu_rng rng;

/* ------------------------------------------------------------------------------------ driver helpers */

static int cu_ok(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return 1;
  const char *n = NULL;
  cu->cuGetErrorName(r, &n);
  TU_CHECK(0, "%s: %s", what, n ? n : "?");
  return 0;
}

static CUdeviceptr dalloc(size_t bytes) {
  CUdeviceptr p = 0;
  if (!cu_ok(cu->cuMemAlloc(&p, bytes ? bytes : 4), "cuMemAlloc")) {
    fprintf(stderr, "out of device memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}
static CUdeviceptr dup_(const void *h, size_t bytes) {
  CUdeviceptr p = dalloc(bytes);
  if (bytes) cu_ok(cu->cuMemcpyHtoD(p, h, bytes), "cuMemcpyHtoD");
  return p;
}
static void down(void *h, CUdeviceptr p, size_t bytes) {
  if (bytes) cu_ok(cu->cuMemcpyDtoH(h, p, bytes), "cuMemcpyDtoH");
}
static void dfree(CUdeviceptr p) {
  if (p) cu->cuMemFree(p);
}

static void launch2(const char *name, unsigned gx, unsigned gy, unsigned block, void *args) {
  CUfunction f;
  if (!cu_ok(cu->cuModuleGetFunction(&f, mod, name), name)) return;
  void *params[1] = {args};
  char what[96];
  snprintf(what, sizeof what, "launching %s", name);
  cu_ok(cu->cuLaunchKernel(f, gx ? gx : 1, gy ? gy : 1, 1, block, 1, 1, 0, NULL, params, NULL), what);
}
static void launch(const char *name, unsigned gx, unsigned block, void *args) { launch2(name, gx, 1, block, args); }
static void sync_(const char *what) { cu_ok(cu->cuCtxSynchronize(), what); }

/* grid for a grid-stride loop over n units, 256 threads a block */
static unsigned grid_for(int64_t n, int64_t per_block) {
  int64_t g = (n + per_block - 1) / per_block;
  if (g < 1) g = 1;
  if (g > 65535 * 4) g = 65535 * 4;
  return (unsigned)g;
}
/* warps: one row per warp, 8 warps a block */
static unsigned grid_rows(int64_t rows) { return grid_for(rows, 8); }

/* ------------------------------------------------------------------------------------------ inputs */

static const uint32_t specials[] = {0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x7fa00000u, 0x7f800000u, 0xff800000u,
                                    0x80000000u, 0x00000000u, 0x00000001u, 0x80000003u, 0x007fffffu, 0x80400000u,
                                    0x00012345u, 0x7f7fffffu, 0xff7fffffu, 0x00800000u};
#define NSPECIAL (sizeof specials / sizeof specials[0])

/* n floats uniform in [lo, hi), each replaced by a special value with probability `rate`. */
static float *rnd(size_t n, float lo, float hi, double rate) {
  float *p = malloc(n * sizeof *p + 4);
  for (size_t i = 0; i < n; i++) {
    if (rate > 0 && (double)(tu_rng_next(&rng) >> 11) * (1.0 / 9007199254740992.0) < rate)
      p[i] = tu_float(specials[tu_rng_next(&rng) % NSPECIAL]);
    else
      p[i] = tu_rng_float(&rng, lo, hi);
  }
  return p;
}
static int32_t *rnd_idx(size_t n, int64_t limit) {
  int32_t *p = malloc(n * sizeof *p + 4);
  for (size_t i = 0; i < n; i++) p[i] = (int32_t)tu_rng_int(&rng, 0, limit - 1);
  return p;
}
static float *copyf(const float *a, size_t n) {
  float *p = malloc(n * sizeof *p + 4);
  memcpy(p, a, n * sizeof *p);
  return p;
}

/* ------------------------------------------------------------------------------------- comparison */

typedef struct tally {
  const char *op;
  long cases, elements, failures;
} tally;

static void compare(tally *t, const char *what, const void *got, const void *want, size_t n) {
  const uint32_t *g = got, *w = want;
  long bad = 0;
  for (size_t i = 0; i < n; i++)
    if (g[i] != w[i]) {
      if (bad < 4)
        TU_CHECK(0, "%s %s: element %zu: got 0x%08x (%.9g), want 0x%08x (%.9g)", t->op, what, i, g[i],
                 tu_float(g[i]), w[i], tu_float(w[i]));
      bad++;
    }
  if (bad > 4) TU_CHECK(0, "%s %s: %ld of %zu elements differ", t->op, what, bad, n);
  t->elements += (long)n;
  t->failures += bad;
}
/* The fp32 contract's comparison (as tests/test_cpu_tx.c): within 1e-4 of want's largest finite magnitude, NaN
 * where want has NaN, the same infinity where it has one. */
static void compare_tol(tally *t, const char *what, const float *got, const float *want, size_t n) {
  double big = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(want[i]) && fabs(want[i]) > big) big = fabs(want[i]);
  const double tol = 1e-4 * big;
  long bad = 0;
  for (size_t i = 0; i < n; i++) {
    const int ok = isnan(want[i])   ? isnan(got[i])
                   : isinf(want[i]) ? got[i] == want[i]
                                    : fabs((double)got[i] - (double)want[i]) <= tol;
    if (!ok) {
      if (bad < 4) TU_CHECK(0, "%s %s (fp32): element %zu: got %.9g, want %.9g (tolerance %.3g)", t->op, what, i,
                            got[i], want[i], tol);
      bad++;
    }
  }
  if (bad > 4) TU_CHECK(0, "%s %s (fp32): %ld of %zu elements beyond the tolerance", t->op, what, bad, n);
  t->elements += (long)n;
  t->failures += bad;
}

static void report(const tally *t) {
  printf("%-22s cases %3ld  elements %10ld  failures %ld\n", t->op, t->cases, t->elements, t->failures);
}

/* ------------------------------------------------------------------------------------- the ops */

static void test_wmath(void) {
  tally t = {"wmath (6 functions)", 0, 0, 0};
  /* a sweep over the bit patterns (every exponent, both signs) plus the specials and a dense range */
  const size_t n = (1u << 20) + NSPECIAL + 65536;
  float *x = malloc(n * sizeof *x);
  size_t k = 0;
  for (uint64_t u = 0; u < (1ull << 32) && k < (1u << 20); u += 4099) x[k++] = tu_float((uint32_t)u);
  for (size_t i = 0; i < NSPECIAL; i++) x[k++] = tu_float(specials[i]);
  while (k < n) x[k++] = tu_rng_float(&rng, -12.0f, 12.0f);
  float *want = malloc(6 * n * sizeof *want), *got = malloc(6 * n * sizeof *got);
  for (size_t i = 0; i < n; i++) {
    float r[6] = {weft_recipf(x[i]), weft_rsqrtf(x[i]), weft_sqrtf(x[i]), weft_tanhf(x[i]), weft_expf(x[i]),
                  weft_logf(x[i])};
    for (int j = 0; j < 6; j++) want[6 * i + j] = r[j] != r[j] ? tu_float(0x7fc00000u) : r[j];
  }
  CUdeviceptr dx = dup_(x, n * 4), dout = dalloc(6 * n * 4);
  weft_tx_gelu_args a = {dout, dx, 0, (int64_t)n};
  launch("weft_tx_wmath_probe", grid_for((int64_t)n, 256), 256, &a);
  sync_("wmath probe");
  down(got, dout, 6 * n * 4);
  static const char *names[6] = {"recipf", "rsqrtf", "sqrtf", "tanhf", "expf", "logf"};
  for (int j = 0; j < 6; j++) {
    long bad = 0;
    for (size_t i = 0; i < n; i++)
      if (tu_bits(got[6 * i + j]) != tu_bits(want[6 * i + j]) && bad++ < 3)
        TU_CHECK(0, "%s(0x%08x): got 0x%08x, want 0x%08x", names[j], tu_bits(x[i]), tu_bits(got[6 * i + j]),
                 tu_bits(want[6 * i + j]));
    TU_CHECK(bad == 0, "%s: %ld inputs differ", names[j], bad);
    t.failures += bad;
  }
  t.cases = 1, t.elements = (long)(6 * n);
  report(&t);
  dfree(dx), dfree(dout);
  free(x), free(want), free(got);
}

static void test_embedding(void) {
  tally f = {"embedding_fwd", 0, 0, 0}, b = {"embedding_bwd", 0, 0, 0}, ck = {"index_check", 0, 0, 0};
  static const struct {
    int64_t B, T, C, V, P;
    int with_pos;
  } cases[] = {{2, 64, 768, 50257, 1024, 0}, {3, 17, 33, 100, 40, 1}, {4, 64, 96, 7, 64, 1}, {1, 1, 1, 1, 1, 0}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const int64_t B = cases[ci].B, T = cases[ci].T, C = cases[ci].C, V = cases[ci].V, P = cases[ci].P, BT = B * T;
    float *wte = rnd((size_t)(V * C), -1, 1, 0.001), *wpe = rnd((size_t)(P * C), -1, 1, 0.001);
    int32_t *tok = rnd_idx((size_t)BT, V), *pos = cases[ci].with_pos ? rnd_idx((size_t)BT, P) : NULL;
    float *want = malloc((size_t)(BT * C) * 4), *got = malloc((size_t)(BT * C) * 4);
    TU_CHECK(weft_ref_embedding_forward(want, tok, pos, wte, wpe, B, T, C, V, P) == WEFT_OK, "reference embedding");
    CUdeviceptr dwte = dup_(wte, (size_t)(V * C) * 4), dwpe = dup_(wpe, (size_t)(P * C) * 4);
    CUdeviceptr dtok = dup_(tok, (size_t)BT * 4), dpos = pos ? dup_(pos, (size_t)BT * 4) : 0;
    CUdeviceptr dout = dalloc((size_t)(BT * C) * 4);
    weft_tx_embed_args ea = {dout, dtok, dpos, dwte, dwpe, BT, T, C, V, P};
    launch("weft_tx_embedding_fwd", grid_for(BT * C, 256), 256, &ea);
    sync_("embedding fwd");
    down(got, dout, (size_t)(BT * C) * 4);
    compare(&f, "out", got, want, (size_t)(BT * C));
    f.cases++;

    /* backward: dwte and dwpe start from random values (accumulation), dout has specials */
    float *dy = rnd((size_t)(BT * C), -1, 1, 0.001);
    float *gte = rnd((size_t)(V * C), -1, 1, 0.0005), *gpe = rnd((size_t)(P * C), -1, 1, 0.0005);
    float *wgte = copyf(gte, (size_t)(V * C)), *wgpe = copyf(gpe, (size_t)(P * C));
    TU_CHECK(weft_ref_embedding_backward(wgte, wgpe, dy, tok, pos, B, T, C, V, P) == WEFT_OK, "reference bwd");
    CUdeviceptr ddy = dup_(dy, (size_t)(BT * C) * 4);
    CUdeviceptr dgte = dup_(gte, (size_t)(V * C) * 4), dgpe = dup_(gpe, (size_t)(P * C) * 4);
    int64_t maxrows = V > P ? V : P;
    int32_t *zeros = calloc((size_t)maxrows + 1, 4);
    CUdeviceptr dcount = dup_(zeros, (size_t)(maxrows + 1) * 4), dstart = dalloc((size_t)(maxrows + 1) * 4);
    CUdeviceptr dlist = dalloc((size_t)BT * 4);
    for (int tab = 0; tab < 2; tab++) {
      weft_tx_embed_bwd_args ba = {tab ? dgpe : dgte, ddy, tab ? dpos : dtok, dcount, dstart, dlist, BT, T, C,
                                   tab ? P : V};
      launch("weft_tx_embed_bwd_count", grid_for(BT, 256), 256, &ba);
      launch("weft_tx_embed_bwd_scan", 1, 1024, &ba);
      launch("weft_tx_embed_bwd_fill", grid_for(BT, 256), 256, &ba);
      launch("weft_tx_embed_bwd_sort", grid_for(ba.nrows, 256), 256, &ba);
      launch2("weft_tx_embed_bwd_accum", (unsigned)((C + 127) / 128), BT < 65535 ? (unsigned)BT : 65535,
              128, &ba);
    }
    sync_("embedding bwd");
    float *g1 = malloc((size_t)(V * C) * 4), *g2 = malloc((size_t)(P * C) * 4);
    down(g1, dgte, (size_t)(V * C) * 4), down(g2, dgpe, (size_t)(P * C) * 4);
    compare(&b, "dwte", g1, wgte, (size_t)(V * C));
    compare(&b, "dwpe", g2, wgpe, (size_t)(P * C));
    int32_t *cnt = malloc((size_t)(maxrows + 1) * 4);
    down(cnt, dcount, (size_t)maxrows * 4);
    long nz = 0;
    for (int64_t r = 0; r < maxrows; r++) nz += cnt[r] != 0;
    TU_CHECK(nz == 0, "embedding bwd: %ld counts left non-zero", nz);
    b.cases++;
    /* the one-kernel path (no scratch) from the same starting tables */
    cu_ok(cu->cuMemcpyHtoD(dgte, gte, (size_t)(V * C) * 4), "cuMemcpyHtoD");
    cu_ok(cu->cuMemcpyHtoD(dgpe, gpe, (size_t)(P * C) * 4), "cuMemcpyHtoD");
    for (int tab = 0; tab < 2; tab++) {
      weft_tx_embed_bwd_args ba = {tab ? dgpe : dgte, ddy, tab ? dpos : dtok, 0, 0, 0, BT, T, C, tab ? P : V};
      launch("weft_tx_embed_bwd_rows", grid_for(BT, 1), 256, &ba);
    }
    sync_("embedding bwd rows");
    down(g1, dgte, (size_t)(V * C) * 4), down(g2, dgpe, (size_t)(P * C) * 4);
    compare(&b, "dwte (rows)", g1, wgte, (size_t)(V * C));
    compare(&b, "dwpe (rows)", g2, wgpe, (size_t)(P * C));

    /* index check: two bad indices, the first reported */
    if (BT >= 8) {
      int32_t *bad = malloc((size_t)BT * 4);
      memcpy(bad, tok, (size_t)BT * 4);
      bad[BT - 1] = (int32_t)V, bad[BT / 2] = -1;
      int32_t first = (int32_t)BT;
      CUdeviceptr dbad = dup_(bad, (size_t)BT * 4), dfirst = dup_(&first, 4);
      weft_tx_index_args ia = {dbad, dfirst, BT, V};
      launch("weft_tx_index_check", grid_for(BT, 256), 256, &ia);
      sync_("index check");
      down(&first, dfirst, 4);
      TU_CHECK(first == (int32_t)(BT / 2), "index check: first bad index %d, want %lld", first, (long long)(BT / 2));
      ck.failures += first != (int32_t)(BT / 2);
      ck.cases++, ck.elements += (long)BT;
      first = (int32_t)BT;
      cu_ok(cu->cuMemcpyHtoD(dfirst, &first, 4), "HtoD");
      ia.idx = dtok;
      launch("weft_tx_index_check", grid_for(BT, 256), 256, &ia);
      sync_("index check");
      down(&first, dfirst, 4);
      TU_CHECK(first == (int32_t)BT, "index check on good indices: %d", first);
      dfree(dbad), dfree(dfirst);
      free(bad);
    }
    dfree(dwte), dfree(dwpe), dfree(dtok), dfree(dpos), dfree(dout), dfree(ddy), dfree(dgte), dfree(dgpe);
    dfree(dcount), dfree(dstart), dfree(dlist);
    free(wte), free(wpe), free(tok), free(pos), free(want), free(got), free(dy), free(gte), free(gpe);
    free(wgte), free(wgpe), free(zeros), free(g1), free(g2), free(cnt);
  }
  report(&f), report(&b), report(&ck);
}

static void test_layernorm(void) {
  tally f = {"layernorm_fwd", 0, 0, 0}, b = {"layernorm_bwd", 0, 0, 0};
  static const int64_t cases[][2] = {{128, 768}, {37, 33}, {5, 1}, {64, 1600}, {3, 31}, {150, 70}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const int64_t N = cases[ci][0], C = cases[ci][1];
    const size_t nc = (size_t)(N * C);
    float *x = rnd(nc, -3, 3, 0.0003), *gamma = rnd((size_t)C, 0.5f, 1.5f, 0.002), *beta = rnd((size_t)C, -1, 1, 0.002);
    /* rows with a constant value (variance 0) and subnormal spreads */
    for (int64_t c = 0; c < C; c++) x[c] = 0.25f, x[(N - 1) * C + c] = tu_float(0x00000100u + (uint32_t)c);
    float *y = malloc(nc * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    weft_ref_layernorm_forward(y, mean, rstd, x, gamma, beta, N, C, 1e-5f);
    CUdeviceptr dx = dup_(x, nc * 4), dg = dup_(gamma, (size_t)C * 4), db = dup_(beta, (size_t)C * 4);
    CUdeviceptr dy_ = dalloc(nc * 4), dm = dalloc((size_t)N * 4), dr = dalloc((size_t)N * 4);
    weft_tx_ln_args a;
    memset(&a, 0, sizeof a);
    a.y = dy_, a.mean = dm, a.rstd = dr, a.x = dx, a.gamma = dg, a.beta = db, a.N = N, a.C = C, a.eps = 1e-5f;
    launch("weft_tx_layernorm_fwd", grid_for(N, 32), 256, &a);
    sync_("layernorm fwd");
    float *gy = malloc(nc * 4), *gm = malloc((size_t)N * 4), *gr = malloc((size_t)N * 4);
    down(gy, dy_, nc * 4), down(gm, dm, (size_t)N * 4), down(gr, dr, (size_t)N * 4);
    compare(&f, "y", gy, y, nc), compare(&f, "mean", gm, mean, (size_t)N), compare(&f, "rstd", gr, rstd, (size_t)N);
    f.cases++;

    float *dyv = rnd(nc, -1, 1, 0.0003), *dgam = rnd((size_t)C, -1, 1, 0.002), *dbet = rnd((size_t)C, -1, 1, 0.002);
    float *wdx = malloc(nc * 4), *wdg = copyf(dgam, (size_t)C), *wdb = copyf(dbet, (size_t)C);
    weft_ref_layernorm_backward(wdx, wdg, wdb, dyv, x, mean, rstd, gamma, N, C);
    CUdeviceptr ddy = dup_(dyv, nc * 4), ddx = dalloc(nc * 4);
    CUdeviceptr ddg = dup_(dgam, (size_t)C * 4), ddb = dup_(dbet, (size_t)C * 4);
    a.dx = ddx, a.dgamma = ddg, a.dbeta = ddb, a.dy = ddy;
    launch("weft_tx_layernorm_bwd_dx", grid_for(N, 32), 256, &a);
    launch("weft_tx_layernorm_bwd_dgb", grid_for(C, WEFT_TX_LNG_CW), 256, &a);
    sync_("layernorm bwd");
    float *gdx = malloc(nc * 4), *gdg = malloc((size_t)C * 4), *gdb = malloc((size_t)C * 4);
    down(gdx, ddx, nc * 4), down(gdg, ddg, (size_t)C * 4), down(gdb, ddb, (size_t)C * 4);
    compare(&b, "dx", gdx, wdx, nc), compare(&b, "dgamma", gdg, wdg, (size_t)C), compare(&b, "dbeta", gdb, wdb, (size_t)C);
    b.cases++;
    dfree(dx), dfree(dg), dfree(db), dfree(dy_), dfree(dm), dfree(dr), dfree(ddy), dfree(ddx), dfree(ddg), dfree(ddb);
    free(x), free(gamma), free(beta), free(y), free(mean), free(rstd), free(gy), free(gm), free(gr);
    free(dyv), free(dgam), free(dbet), free(wdx), free(wdg), free(wdb), free(gdx), free(gdg), free(gdb);
  }
  report(&f), report(&b);
}

/* One elementwise GELU kernel over n elements, its result into g. */
static void gelu_run(const char *kernel, weft_tx_gelu_args *a, float *g, size_t n) {
  launch(kernel, grid_for((int64_t)n, 256), 256, a);
  sync_(kernel);
  down(g, a->out, n * 4);
}

static void test_gelu(void) {
  tally f = {"gelu_fwd", 0, 0, 0}, b = {"gelu_bwd", 0, 0, 0};
  static const double ranges[][2] = {{-12, 12}, {-0.01, 0.01}, {-1e-30, 1e-30}, {-1e20, 1e20}};
  for (size_t ci = 0; ci < 4; ci++) {
    const size_t n = (size_t)1 << 20;
    float *x = rnd(n, (float)ranges[ci][0], (float)ranges[ci][1], 0.01), *dy = rnd(n, -2, 2, 0.01);
    float *wy = malloc(n * 4), *wdx = malloc(n * 4), *g = malloc(n * 4);
    weft_ref_gelu_forward(wy, x, (int64_t)n);
    weft_ref_gelu_backward(wdx, x, dy, (int64_t)n);
    CUdeviceptr dx = dup_(x, n * 4), ddy = dup_(dy, n * 4), dout = dalloc(n * 4);
    weft_tx_gelu_args a = {dout, dx, ddy, (int64_t)n};
    gelu_run("weft_tx_gelu_fwd", &a, g, n);
    compare(&f, "y", g, wy, n);
    gelu_run("weft_tx_gelu_bwd", &a, g, n);
    compare(&b, "dx", g, wdx, n);
    /* the fp32 contract's kernels (the logistic form, fast reciprocal): within the tolerance */
    gelu_run("weft_tx_gelu_fwd_f32", &a, g, n);
    compare_tol(&f, "y", g, wy, n);
    gelu_run("weft_tx_gelu_bwd_f32", &a, g, n);
    /* Left out: where dy is infinite, dx is inf or NaN by whether the derivative rounds to 0 (the reference's
     * 1 - tanh^2 does for |x| past about 5.5, the logistic form only past about 9); and where |dy| is near
     * the largest float, dy times a derivative a rounding above 1 overflows (the reference's tanh rounds the
     * part above 1 away, the logistic form keeps it: FLT_MAX against inf). */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
      if (isnan(dy[i]) || fabsf(dy[i]) < 1e30f) g[m] = g[i], wdx[m] = wdx[i], m++;
    compare_tol(&b, "dx", g, wdx, m);
    f.cases++, b.cases++;
    dfree(dx), dfree(ddy), dfree(dout);
    free(x), free(dy), free(wy), free(wdx), free(g);
  }
  report(&f), report(&b);
}

static void test_softmax(void) {
  tally f = {"causal_softmax_fwd", 0, 0, 0}, b = {"causal_softmax_bwd", 0, 0, 0};
  static const struct {
    int64_t R, T;
    float scale;
  } cases[] = {{24, 64, 0.125f}, {3, 37, 1.0f}, {2, 200, 0.35355339f}, {1, 1, 2.0f}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const int64_t R = cases[ci].R, T = cases[ci].T;
    const size_t n = (size_t)(R * T * T);
    float *s = rnd(n, -20, 20, 0.0005), *dp = rnd(n, -1, 1, 0.0005);
    /* ties for the maximum, with zeros of both signs */
    s[T * 5 % (int64_t)n] = -0.0f;
    float *wp = malloc(n * 4), *wds = malloc(n * 4), *g = malloc(n * 4);
    weft_ref_causal_softmax_forward(wp, s, R, T, cases[ci].scale);
    weft_ref_causal_softmax_backward(wds, wp, dp, R, T, cases[ci].scale);
    CUdeviceptr ds_ = dup_(s, n * 4), ddp = dup_(dp, n * 4), dpr = dalloc(n * 4), dds = dalloc(n * 4);
    weft_tx_softmax_args a = {dpr, ds_, 0, R, T, cases[ci].scale, 0};
    launch("weft_tx_softmax_fwd", grid_rows(R * T), 256, &a);
    sync_("softmax fwd");
    down(g, dpr, n * 4);
    compare(&f, "probs", g, wp, n);
    weft_tx_softmax_args a2 = {dds, dpr, ddp, R, T, cases[ci].scale, 0};
    launch("weft_tx_softmax_bwd", grid_rows(R * T), 256, &a2);
    sync_("softmax bwd");
    down(g, dds, n * 4);
    compare(&b, "dscores", g, wds, n);
    f.cases++, b.cases++;
    dfree(ds_), dfree(ddp), dfree(dpr), dfree(dds);
    free(s), free(dp), free(wp), free(wds), free(g);
  }
  report(&f), report(&b);
}

static void test_attention(void) {
  tally f = {"attention_fwd", 0, 0, 0}, b = {"attention_bwd", 0, 0, 0};
  static const int64_t cases[][4] = {{2, 64, 768, 12}, {1, 37, 96, 4}, {2, 5, 6, 3}, {1, 130, 64, 1}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const int64_t B = cases[ci][0], T = cases[ci][1], C = cases[ci][2], NH = cases[ci][3];
    const size_t nq = (size_t)(B * T * 3 * C), no = (size_t)(B * T * C), na = (size_t)(B * NH * T * T);
    float *qkv = rnd(nq, -1, 1, 0.00005), *dout = rnd(no, -1, 1, 0.0001);
    float *wo = malloc(no * 4), *wpre = malloc(na * 4), *watt = malloc(na * 4), *wdq = malloc(nq * 4);
    TU_CHECK(weft_ref_attention_forward(wo, wpre, watt, qkv, B, T, C, NH) == WEFT_OK, "reference attention");
    TU_CHECK(weft_ref_attention_backward(wdq, dout, qkv, watt, B, T, C, NH) == WEFT_OK, "reference attention bwd");
    CUdeviceptr dq = dup_(qkv, nq * 4), ddo = dup_(dout, no * 4), dout_ = dalloc(no * 4), dpre = dalloc(na * 4);
    CUdeviceptr datt = dalloc(na * 4), dds = dalloc(na * 4), ddq = dalloc(nq * 4);
    weft_tx_attn_args a = {dout_, dpre, datt, dq, ddq, ddo, dds, B, T, C, NH};
    launch("weft_tx_attn_fwd", grid_rows(B * NH * T), 256, &a);
    sync_("attention fwd");
    float *g = malloc((nq > na ? nq : na) * 4);
    down(g, dout_, no * 4), compare(&f, "out", g, wo, no);
    down(g, dpre, na * 4), compare(&f, "preatt", g, wpre, na);
    down(g, datt, na * 4), compare(&f, "att", g, watt, na);
    launch("weft_tx_attn_bwd_ds", grid_rows(B * NH * T), 256, &a);
    launch("weft_tx_attn_bwd_dqkv", grid_for(B * T * C, 256), 256, &a);
    sync_("attention bwd");
    down(g, ddq, nq * 4), compare(&b, "dqkv", g, wdq, nq);
    /* the fp32 contract's kernels (the backward from the exact att) */
    weft_tx_attn_args a32 = a;
    a32.preatt = 0, a32.att = dds;
    launch("weft_tx_attn_fwd_f32", grid_rows(B * NH * T), 256, &a32);
    sync_("attention fwd fp32");
    down(g, dout_, no * 4), compare_tol(&f, "out", g, wo, no);
    down(g, dds, na * 4), compare_tol(&f, "att", g, watt, na);
    launch("weft_tx_attn_bwd_ds_f32", grid_rows(B * NH * T), 256, &a);
    launch("weft_tx_attn_bwd_dqkv_f32", grid_rows(B * NH * T), 256, &a);
    sync_("attention bwd fp32");
    down(g, ddq, nq * 4), compare_tol(&b, "dqkv", g, wdq, nq);
    f.cases++, b.cases++;
    dfree(dq), dfree(ddo), dfree(dout_), dfree(dpre), dfree(datt), dfree(dds), dfree(ddq);
    free(qkv), free(dout), free(wo), free(wpre), free(watt), free(wdq), free(g);
  }
  report(&f), report(&b);
}

static void test_xent(void) {
  tally f = {"crossentropy_fwd", 0, 0, 0}, b = {"crossentropy_bwd", 0, 0, 0};
  static const int64_t cases[][2] = {{24, 50257}, {5, 7}, {3, 1}, {40, 1000}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const int64_t N = cases[ci][0], V = cases[ci][1];
    const size_t nv = (size_t)(N * V);
    float *z = rnd(nv, -15, 15, 0.5 / (double)nv * (double)N), *dl = rnd((size_t)N, -1, 1, 0.05);
    int32_t *tg = rnd_idx((size_t)N, V);
    float *wl = malloc((size_t)N * 4), *wg = malloc(nv * 4), *g = malloc(nv * 4);
    TU_CHECK(weft_ref_crossentropy_forward(wl, z, tg, N, V) == WEFT_OK, "reference xent");
    TU_CHECK(weft_ref_crossentropy_backward(wg, z, tg, dl, N, V) == WEFT_OK, "reference xent bwd");
    CUdeviceptr dz = dup_(z, nv * 4), dtg = dup_(tg, (size_t)N * 4), ddl = dup_(dl, (size_t)N * 4);
    CUdeviceptr dls = dalloc((size_t)N * 4), dg = dalloc(nv * 4);
    weft_tx_xent_args a = {dls, dz, dtg, dg, ddl, N, V};
    launch("weft_tx_xent_fwd", grid_for(N, 1), 128, &a);
    launch("weft_tx_xent_bwd", grid_for(N, 1), 128, &a);
    sync_("crossentropy");
    down(g, dls, (size_t)N * 4), compare(&f, "losses", g, wl, (size_t)N);
    down(g, dg, nv * 4), compare(&b, "dlogits", g, wg, nv);
    /* blocks of 512 (few rows), then the fp32 contract's kernels */
    launch("weft_tx_xent_fwd", grid_for(N, 1), 512, &a);
    launch("weft_tx_xent_bwd", grid_for(N, 1), 512, &a);
    sync_("crossentropy 512");
    down(g, dls, (size_t)N * 4), compare(&f, "losses", g, wl, (size_t)N);
    down(g, dg, nv * 4), compare(&b, "dlogits", g, wg, nv);
    launch("weft_tx_xent_fwd_f32", grid_for(N, 1), 512, &a);
    launch("weft_tx_xent_bwd_f32", grid_for(N, 1), 512, &a);
    sync_("crossentropy fp32");
    down(g, dls, (size_t)N * 4), compare_tol(&f, "losses", g, wl, (size_t)N);
    down(g, dg, nv * 4), compare_tol(&b, "dlogits", g, wg, nv);
    f.cases++, b.cases++;
    dfree(dz), dfree(dtg), dfree(ddl), dfree(dls), dfree(dg);
    free(z), free(dl), free(tg), free(wl), free(wg), free(g);
  }
  report(&f), report(&b);
}

static void test_adamw_clip(void) {
  tally t = {"adamw", 0, 0, 0}, c = {"grad_clip", 0, 0, 0};
  for (int step = 1; step <= 3; step += 2) {
    const size_t n = (size_t)1 << 20;
    float *p = rnd(n, -1, 1, 0.002), *g = rnd(n, -0.1f, 0.1f, 0.002), *m = rnd(n, -0.01f, 0.01f, 0.001);
    float *v = rnd(n, 0, 0.001f, 0.001);
    const float bc1 = weft_ref_adamw_bias_correction(0.9f, step), bc2 = weft_ref_adamw_bias_correction(0.95f, step);
    CUdeviceptr dp = dup_(p, n * 4), dg = dup_(g, n * 4), dm = dup_(m, n * 4), dv = dup_(v, n * 4);
    weft_ref_adamw(p, g, m, v, (int64_t)n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2);
    weft_tx_adamw_args a = {dp, dg, dm, dv, (int64_t)n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2, 0};
    launch("weft_tx_adamw", grid_for((int64_t)n, 256), 256, &a);
    sync_("adamw");
    float *got = malloc(n * 4);
    down(got, dp, n * 4), compare(&t, "param", got, p, n);
    down(got, dm, n * 4), compare(&t, "m", got, m, n);
    down(got, dv, n * 4), compare(&t, "v", got, v, n);
    t.cases++;
    dfree(dp), dfree(dg), dfree(dm), dfree(dv);
    free(p), free(g), free(m), free(v), free(got);
  }
  static const float max_norms[] = {1.0f, 1e6f};
  for (int ci = 0; ci < 2; ci++) {
    /* SUMSQ's chunked order: tensors of one chunk, 3 chunks + 17, 256 chunks + 5 (8 warps' groups, on a grid
     * of 3 blocks: the grid-stride loop), and under one chunk */
    enum { NT = 4 };
    const int64_t sizes[NT] = {1000, 3 * 4096 + 17, (1 << 20) + 5, 77};
    float *h[NT], *w[NT];
    CUdeviceptr d[NT];
    for (int k = 0; k < NT; k++) {
      h[k] = rnd((size_t)sizes[k], -1, 1, 0), w[k] = copyf(h[k], (size_t)sizes[k]);
      d[k] = dup_(h[k], (size_t)sizes[k] * 4);
    }
    const float wnorm = weft_ref_grad_clip(w, sizes, NT, max_norms[ci]);
    float zero = 0.0f, gnorm = 0.0f;
    CUdeviceptr dss = dup_(&zero, 4), dn = dalloc(4), dpart = dalloc((size_t)((sizes[2] + 4095) / 4096) * 4);
    for (int k = 0; k < NT; k++) {
      weft_tx_clip_args a = {d[k], dss, 0, dpart, sizes[k], max_norms[ci], 0};
      launch("weft_tx_sumsq_chunks", k == 2 ? 3 : 1, 32, &a);
      launch("weft_tx_sumsq_add", 1, 32, &a);
    }
    for (int k = 0; k < NT; k++) {
      weft_tx_clip_args a = {d[k], dss, k == 0 ? dn : 0, 0, sizes[k], max_norms[ci], 0};
      launch("weft_tx_clip_scale", grid_for(sizes[k], 256), 256, &a);
    }
    sync_("clip");
    down(&gnorm, dn, 4);
    compare(&c, "norm", &gnorm, &wnorm, 1);
    for (int k = 0; k < NT; k++) {
      float *got = malloc((size_t)sizes[k] * 4);
      down(got, d[k], (size_t)sizes[k] * 4), compare(&c, "grads", got, w[k], (size_t)sizes[k]);
      free(got), free(h[k]), free(w[k]), dfree(d[k]);
    }
    dfree(dss), dfree(dn), dfree(dpart);
    c.cases++;
  }
  report(&t), report(&c);
}

static void test_copies(void) {
  tally t = {"permute", 0, 0, 0}, c = {"copy_slice", 0, 0, 0};
  /* [B,T,H,D] -> [B,H,T,D] and back, on bit patterns that include NaNs with payloads (an int32 tensor) */
  const int64_t B = 2, T = 37, H = 12, D = 64;
  const size_t n = (size_t)(B * T * H * D);
  uint32_t *x = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  for (size_t i = 0; i < n; i++) x[i] = (uint32_t)tu_rng_next(&rng);
  x[0] = 0x7f800001u, x[1] = 0xffffffffu;
  for (int64_t b = 0; b < B; b++)
    for (int64_t tt = 0; tt < T; tt++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t d = 0; d < D; d++) want[((b * H + h) * T + tt) * D + d] = x[((b * T + tt) * H + h) * D + d];
  CUdeviceptr dx = dup_(x, n * 4), dy = dalloc(n * 4), dz = dalloc(n * 4);
  weft_tx_permute_args a;
  memset(&a, 0, sizeof a);
  a.out = dy, a.in = dx, a.count = (int64_t)n, a.rank = 4;
  a.out_dims[0] = B, a.out_dims[1] = H, a.out_dims[2] = T, a.out_dims[3] = D;
  a.in_stride[0] = T * H * D, a.in_stride[1] = D, a.in_stride[2] = H * D, a.in_stride[3] = 1;
  launch("weft_tx_permute", grid_for((int64_t)n, 256), 256, &a);
  weft_tx_permute_args back = a;
  back.out = dz, back.in = dy;
  back.out_dims[1] = T, back.out_dims[2] = H;
  back.in_stride[0] = H * T * D, back.in_stride[1] = D, back.in_stride[2] = T * D, back.in_stride[3] = 1;
  launch("weft_tx_permute", grid_for((int64_t)n, 256), 256, &back);
  sync_("permute");
  down(got, dy, n * 4), compare(&t, "[B,T,H,D]->[B,H,T,D]", got, want, n);
  down(got, dz, n * 4), compare(&t, "and back", got, x, n);
  t.cases += 2;
  /* KV-cache append: src [B, 7, C] into dst [B, 100, C] at row 33 */
  const int64_t C = 768, Tm = 100, Tn = 7, t0 = 33;
  const size_t nd = (size_t)(B * Tm * C), ns = (size_t)(B * Tn * C);
  uint32_t *dst = malloc(nd * 4), *src = malloc(ns * 4), *gd = malloc(nd * 4);
  for (size_t i = 0; i < nd; i++) dst[i] = (uint32_t)tu_rng_next(&rng);
  for (size_t i = 0; i < ns; i++) src[i] = (uint32_t)tu_rng_next(&rng);
  CUdeviceptr ddst = dup_(dst, nd * 4), dsrc = dup_(src, ns * 4);
  for (int64_t b = 0; b < B; b++)
    for (int64_t r = 0; r < Tn; r++)
      for (int64_t k = 0; k < C; k++) dst[(b * Tm + t0 + r) * C + k] = src[(b * Tn + r) * C + k];
  weft_tx_copy_args ca = {ddst, dsrc, B, Tn, C, t0 * C, Tm * C, C, 0, Tn * C, C};
  launch("weft_tx_copy_slice", grid_for((int64_t)ns, 256), 256, &ca);
  sync_("copy_slice");
  down(gd, ddst, nd * 4), compare(&c, "kv append", gd, dst, nd);
  c.cases++;
  dfree(dx), dfree(dy), dfree(dz), dfree(ddst), dfree(dsrc);
  free(x), free(want), free(got), free(dst), free(src), free(gd);
  report(&t), report(&c);
}

/* ------------------------------------------------------------------------------------------ timing */

static double time_it(void (*fn)(void *), void *ctx) {
  fn(ctx);
  sync_("timing warm-up");
  int reps = 0;
  double t0 = tu_now(), el = 0;
  do {
    fn(ctx);
    reps++;
    sync_("timing");
    el = tu_now() - t0;
  } while (el < 0.05 && reps < 50);
  return el / reps * 1e6;
}

typedef struct tctx {
  int64_t B, T, C, NH, V, P;
  CUdeviceptr a0, a1, a2, a3, a4, a5, a6, a7, a8;
  weft_tx_embed_args ea;
  weft_tx_embed_bwd_args eb;
  weft_tx_ln_args ln;
  weft_tx_gelu_args ge;
  weft_tx_softmax_args sf, sb;
  weft_tx_attn_args at;
  weft_tx_xent_args xe;
  weft_tx_adamw_args ad;
  weft_tx_permute_args pm;
} tctx;

static void r_emb_f(void *c) {
  tctx *x = c;
  launch("weft_tx_embedding_fwd", grid_for(x->ea.BT * x->ea.C, 256), 256, &x->ea);
}
static void r_emb_b(void *c) {
  tctx *x = c;
  launch("weft_tx_embed_bwd_count", grid_for(x->eb.BT, 256), 256, &x->eb);
  launch("weft_tx_embed_bwd_scan", 1, 1024, &x->eb);
  launch("weft_tx_embed_bwd_fill", grid_for(x->eb.BT, 256), 256, &x->eb);
  launch("weft_tx_embed_bwd_sort", grid_for(x->eb.nrows, 256), 256, &x->eb);
  launch2("weft_tx_embed_bwd_accum", (unsigned)((x->eb.C + 127) / 128),
          x->eb.BT < 65535 ? (unsigned)x->eb.BT : 65535, 128, &x->eb);
}
static void r_ln_f(void *c) {
  tctx *x = c;
  launch("weft_tx_layernorm_fwd", grid_for(x->ln.N, 32), 256, &x->ln);
}
static void r_ln_b(void *c) {
  tctx *x = c;
  launch("weft_tx_layernorm_bwd_dx", grid_for(x->ln.N, 32), 256, &x->ln);
  launch("weft_tx_layernorm_bwd_dgb", grid_for(x->ln.C, WEFT_TX_LNG_CW), 256, &x->ln);
}
static void r_gelu_f(void *c) {
  tctx *x = c;
  launch("weft_tx_gelu_fwd", grid_for(x->ge.n, 256), 256, &x->ge);
}
static void r_gelu_b(void *c) {
  tctx *x = c;
  launch("weft_tx_gelu_bwd", grid_for(x->ge.n, 256), 256, &x->ge);
}
static void r_sm_f(void *c) {
  tctx *x = c;
  launch("weft_tx_softmax_fwd", grid_rows(x->sf.R * x->sf.T), 256, &x->sf);
}
static void r_sm_b(void *c) {
  tctx *x = c;
  launch("weft_tx_softmax_bwd", grid_rows(x->sb.R * x->sb.T), 256, &x->sb);
}
static void r_at_f(void *c) {
  tctx *x = c;
  launch("weft_tx_attn_fwd", grid_rows(x->B * x->NH * x->T), 256, &x->at);
}
static void r_at_b(void *c) {
  tctx *x = c;
  launch("weft_tx_attn_bwd_ds", grid_rows(x->B * x->NH * x->T), 256, &x->at);
  launch("weft_tx_attn_bwd_dqkv", grid_for(x->B * x->T * x->C, 256), 256, &x->at);
}
static void r_xe_f(void *c) {
  tctx *x = c;
  launch("weft_tx_xent_fwd", grid_for(x->xe.N, 1), 128, &x->xe);
}
static void r_xe_b(void *c) {
  tctx *x = c;
  launch("weft_tx_xent_bwd", grid_for(x->xe.N, 1), 128, &x->xe);
}
static void r_adamw(void *c) {
  tctx *x = c;
  launch("weft_tx_adamw", grid_for(x->ad.n, 256), 256, &x->ad);
}
static void r_perm(void *c) {
  tctx *x = c;
  launch("weft_tx_permute", grid_for(x->pm.count, 256), 256, &x->pm);
}

static void timings(void) {
  printf("\ntimes at GPT-2 small shapes (B=4, C=768, NH=12, V=50257), microseconds per call, for information:\n");
  printf("%-6s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "T", "emb_f", "emb_b", "ln_f",
         "ln_b", "gelu_f", "gelu_b", "smax_f", "smax_b", "attn_f", "attn_b", "xent_f", "xent_b", "permute");
  const int64_t B = 4, C = 768, NH = 12, V = 50257, P = 1024;
  for (int64_t T = 64; T <= 1024; T *= 4) {
    tctx x;
    memset(&x, 0, sizeof x);
    x.B = B, x.T = T, x.C = C, x.NH = NH, x.V = V, x.P = P;
    const int64_t BT = B * T;
    const size_t att = (size_t)(B * NH * T * T);
    size_t big = (size_t)(V * C); /* the largest array uploaded from h */
    if ((size_t)(BT * V) > big) big = (size_t)(BT * V);
    if ((size_t)(BT * 4 * C) > big) big = (size_t)(BT * 4 * C);
    if (att > big) big = att;
    float *h = rnd(big, -1, 1, 0);
    int32_t *tok = rnd_idx((size_t)BT, V);
    int32_t *zeros = calloc((size_t)V + 1, 4);
    CUdeviceptr wte = dup_(h, (size_t)(V * C) * 4), wpe = dup_(h, (size_t)(P * C) * 4), dtok = dup_(tok, (size_t)BT * 4);
    CUdeviceptr act = dup_(h, (size_t)(BT * 4 * C) * 4), act2 = dup_(h, (size_t)(BT * 4 * C) * 4);
    CUdeviceptr out = dalloc((size_t)(BT * 4 * C) * 4), cnt = dup_(zeros, ((size_t)V + 1) * 4);
    CUdeviceptr st = dalloc(((size_t)V + 1) * 4), lst = dalloc((size_t)BT * 4), gte = dup_(h, (size_t)(V * C) * 4);
    CUdeviceptr vec = dup_(h, (size_t)BT * 4), vec2 = dalloc((size_t)BT * 4), gam = dup_(h, (size_t)C * 4);
    CUdeviceptr gam2 = dup_(h, (size_t)C * 4), sc = dup_(h, att * 4), pr = dalloc(att * 4), dsx = dalloc(att * 4);
    CUdeviceptr lg = dup_(h, (size_t)(BT * V) * 4), dlg = dalloc((size_t)(BT * V) * 4);
    /* rstd from a forward over the same data, so the backward sees real values */
    x.ea = (weft_tx_embed_args){out, dtok, 0, wte, wpe, BT, T, C, V, P};
    x.eb = (weft_tx_embed_bwd_args){gte, act, dtok, cnt, st, lst, BT, T, C, V};
    memset(&x.ln, 0, sizeof x.ln);
    x.ln.y = out, x.ln.mean = vec, x.ln.rstd = vec2, x.ln.x = act, x.ln.gamma = gam, x.ln.beta = gam2;
    x.ln.dx = out, x.ln.dgamma = gam2, x.ln.dbeta = gam, x.ln.dy = act2, x.ln.N = BT, x.ln.C = C, x.ln.eps = 1e-5f;
    x.ge = (weft_tx_gelu_args){out, act, act2, BT * 4 * C};
    x.sf = (weft_tx_softmax_args){pr, sc, 0, B * NH, T, 0.125f, 0};
    x.sb = (weft_tx_softmax_args){dsx, pr, sc, B * NH, T, 0.125f, 0};
    x.at = (weft_tx_attn_args){out, 0, pr, act, act2, act, dsx, B, T, C, NH};
    x.xe = (weft_tx_xent_args){vec2, lg, dtok, dlg, vec, BT, V};
    x.pm.out = out, x.pm.in = act, x.pm.count = BT * C, x.pm.rank = 4;
    x.pm.out_dims[0] = B, x.pm.out_dims[1] = NH, x.pm.out_dims[2] = T, x.pm.out_dims[3] = C / NH;
    x.pm.in_stride[0] = T * C, x.pm.in_stride[1] = C / NH, x.pm.in_stride[2] = C, x.pm.in_stride[3] = 1;
    void (*fns[13])(void *) = {r_emb_f, r_emb_b, r_ln_f, r_ln_b, r_gelu_f, r_gelu_b, r_sm_f,
                               r_sm_b,  r_at_f,  r_at_b, r_xe_f, r_xe_b,   r_perm};
    printf("%-6lld", (long long)T);
    for (int k = 0; k < 13; k++) {
      if (k == 3) r_ln_f(&x), sync_("ln"); /* the backward reads mean and rstd from a forward */
      printf(" %10.1f", time_it(fns[k], &x));
      fflush(stdout);
    }
    printf("\n");
    CUdeviceptr all[] = {wte, wpe, dtok, act, act2, out, cnt, st, lst, gte, vec, vec2, gam, gam2, sc, pr, dsx, lg, dlg};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) dfree(all[k]);
    free(h), free(tok), free(zeros);
  }
  /* AdamW over GPT-2 small's 124,439,808 parameters */
  {
    const int64_t n = 124439808;
    tctx x;
    memset(&x, 0, sizeof x);
    float *h = rnd((size_t)1 << 24, -1, 1, 0);
    CUdeviceptr d[4];
    for (int k = 0; k < 4; k++) {
      d[k] = dalloc((size_t)n * 4);
      for (int64_t o = 0; o < n; o += (int64_t)1 << 24) {
        int64_t m = n - o < ((int64_t)1 << 24) ? n - o : ((int64_t)1 << 24);
        cu_ok(cu->cuMemcpyHtoD(d[k] + (CUdeviceptr)(o * 4), h, (size_t)m * 4), "HtoD");
      }
    }
    x.ad = (weft_tx_adamw_args){d[0], d[1], d[2], d[3], n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 0};
    printf("adamw over %lld parameters: %.1f us\n", (long long)n, time_it(r_adamw, &x));
    for (int k = 0; k < 4; k++) dfree(d[k]);
    free(h);
  }
}

int main(void) {
  double start = tu_now();
  rng.s = tu_seed();
  const char *why = NULL;
  cu = weft_cuda_api_load(&why);
  if (!cu) {
    tu_skip("%s", why && *why ? why : "the NVIDIA driver could not be loaded");
    return tu_finish("cuda_tx", start);
  }
  int n = 0;
  CUresult r = cu->cuInit(0);
  if (r == CUDA_SUCCESS) r = cu->cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n < 1) {
    const char *en = NULL;
    if (r != CUDA_SUCCESS) cu->cuGetErrorName(r, &en);
    tu_skip("no NVIDIA GPU usable (%s)", r != CUDA_SUCCESS ? (en ? en : "cuInit failed") : "none found");
    return tu_finish("cuda_tx", start);
  }
  CUdevice dev;
  CUcontext ctx;
  if (!cu_ok(cu->cuDeviceGet(&dev, 0), "cuDeviceGet") || !cu_ok(cu->cuDevicePrimaryCtxRetain(&ctx, dev), "ctx") ||
      !cu_ok(cu->cuCtxSetCurrent(ctx), "cuCtxSetCurrent") ||
      !cu_ok(cu->cuModuleLoadData(&mod, weft_cuda_fatbin), "loading the lane's kernels"))
    return tu_finish("cuda_tx", start);
  char name[128] = "?";
  cu->cuDeviceGetName(name, (int)sizeof name, dev);
  printf("device: %s\n", name);
  test_wmath();
  test_embedding();
  test_layernorm();
  test_gelu();
  test_softmax();
  test_attention();
  test_xent();
  test_adamw_clip();
  test_copies();
  if (!getenv("WEFT_CUDA_TX_NO_TIMING") && tu_failures == 0) timings();
  cu->cuModuleUnload(mod);
  cu->cuDevicePrimaryCtxRelease(dev);
  return tu_finish("cuda_tx", start);
}
#endif
