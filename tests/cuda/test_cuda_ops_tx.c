/* test_cuda_ops_tx.c - the transformer ops on cuda:0 through the public API, bit for bit against the same
 * ops pinned to the CPU lane (the op table's reference kernels).
 *
 * Without a usable NVIDIA GPU: prints why and exits 77 (CTest: Skipped). With one:
 *  1. every transformer op (embedding and its backward, layernorm and its backward, gelu and its backward,
 *     attention and its backward, causal softmax and its backward, cross-entropy and its backward, adamw,
 *     sumsq, permute, copy_slice, attention_cached) at GPT-2-like shapes (C = 768, 12 heads, V = 50,257), inputs holding NaNs
 *     with payloads, infinities, -0 and subnormals, run once pinned to cpu and once pinned to cuda:0: every
 *     output (and every accumulated or updated operand) bit for bit equal; the in-place forms too;
 *  2. the same inside scopes, each scope running the op twice, three scopes in a row: on cuda:0 the second
 *     and third are replayed as a CUDA graph (accumulating ops accumulate six times, on both lanes);
 *  3. for information, each op's time on cuda:0 at GPT-2 small's shapes (B = 4, T = 64 and 1024, C = 768,
 *     V = 50,257), from scopes of repeated ops. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tutil.h"
#include "weft.h"

static weft_fabric *F;
static tu_rng R;
static int L_CPU, L_CU;
static int g_scoped; /* 1: each op runs twice in each of three scopes */

static const uint32_t specials[] = {0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x7fa00000u, 0x7f800000u, 0xff800000u,
                                    0x80000000u, 0x00000000u, 0x00000001u, 0x80000003u, 0x007fffffu, 0x80400000u,
                                    0x00012345u, 0x7f7fffffu, 0xff7fffffu, 0x00800000u};
#define NSPECIAL (sizeof specials / sizeof specials[0])

/* n floats uniform in [lo, hi), each a special value with probability `rate`. */
static float *rnd(size_t n, float lo, float hi, double rate) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; i < n; i++) {
    if (rate > 0 && (double)(tu_rng_next(&R) >> 11) * (1.0 / 9007199254740992.0) < rate)
      p[i] = tu_float(specials[tu_rng_next(&R) % NSPECIAL]);
    else p[i] = tu_rng_float(&R, lo, hi);
  }
  return p;
}
static int32_t *idx(size_t n, int64_t limit) {
  int32_t *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (int32_t)tu_rng_int(&R, 0, limit - 1);
  return p;
}

static void ok(weft_status st, const char *what) {
  TU_CHECK(st == WEFT_OK, "%s: %s (%s)", what, weft_status_str(st), weft_fabric_last_error(F));
}

static weft_tensor *tf(int nd, const int64_t *d, const float *data) {
  weft_tensor *t = NULL;
  ok(weft_tensor_create(F, nd, d, data, &t), "tensor_create");
  return t;
}
static weft_tensor *ti(int nd, const int64_t *d, const int32_t *data) {
  weft_tensor *t = NULL;
  ok(weft_tensor_create_typed(F, WEFT_DTYPE_I32, nd, d, data, &t), "tensor_create_typed");
  return t;
}
#define D(...) ((const int64_t[]){__VA_ARGS__})

/* Results of one run: up to 8 outputs, read back as bits. */
typedef struct result {
  int n;
  char name[8][32];
  uint32_t *bits[8];
  size_t count[8];
} result;
static result RES[2];
static int CUR; /* 0: cpu run, 1: cuda run */

static void keep(weft_tensor *t, const char *name) {
  result *r = &RES[CUR];
  if (!t || r->n == 8) return;
  size_t n = weft_tensor_numel(t);
  uint32_t *b = malloc((n ? n : 1) * 4);
  weft_status st = weft_tensor_dtype(t) == WEFT_DTYPE_I32 ? weft_tensor_read_i32(t, (int32_t *)b, n)
                                                           : weft_tensor_read(t, (float *)b, n);
  ok(st, "tensor_read");
  snprintf(r->name[r->n], sizeof r->name[0], "%s", name);
  r->bits[r->n] = b, r->count[r->n] = n;
  r->n++;
}
static void clear(result *r) {
  for (int i = 0; i < r->n; i++) free(r->bits[i]);
  memset(r, 0, sizeof *r);
}

#define APPLY(call)                                                                                                \
  do {                                                                                                             \
    if (!g_scoped) ok((call), #call);                                                                              \
    else                                                                                                           \
      for (int s_ = 0; s_ < 3; s_++) {                                                                             \
        ok(weft_scope_begin(F), "scope_begin");                                                                    \
        ok((call), #call);                                                                                         \
        ok((call), #call);                                                                                         \
        ok(weft_scope_end(F), "scope_end");                                                                        \
      }                                                                                                            \
  } while (0)

static void destroy(weft_tensor **ts, int n) {
  for (int i = 0; i < n; i++) weft_tensor_destroy(ts[i]);
}

/* ------------------------------------------------------------------------------------------ the ops */

enum { B = 2, T = 64, C = 768, NH = 12, V = 50257, P = 1024 };
#define RATE 0.002

static void op_embedding(const weft_op_desc *pin, int inplace) {
  (void)inplace;
  int32_t *tok = idx(B * T, V), *pos = idx(B * T, T);
  float *wte = rnd((size_t)V * C, -1, 1, RATE), *wpe = rnd((size_t)P * C, -1, 1, RATE);
  float *dout = rnd((size_t)B * T * C, -1, 1, RATE), *g1 = rnd((size_t)V * C, -1, 1, RATE);
  float *g2 = rnd((size_t)P * C, -1, 1, RATE);
  tok[0] = tok[1] = tok[5] = 7; /* one row gathers several positions: their order matters */
  weft_tensor *t[] = {ti(2, D(B, T), tok),   ti(2, D(B, T), pos),      tf(2, D(V, C), wte),   tf(2, D(P, C), wpe),
                      tf(3, D(B, T, C), NULL), tf(3, D(B, T, C), dout), tf(2, D(V, C), g1),    tf(2, D(P, C), g2)};
  APPLY(weft_op_embedding(F, pin, t[0], t[1], t[2], t[3], t[4]));
  keep(t[4], "out");
  APPLY(weft_op_embedding(F, pin, t[0], NULL, t[2], t[3], t[4]));
  keep(t[4], "out (pos = t)");
  APPLY(weft_op_embedding_backward(F, pin, t[5], t[0], t[1], t[6], t[7]));
  keep(t[6], "dwte"), keep(t[7], "dwpe");
  APPLY(weft_op_embedding_backward(F, pin, t[5], t[0], NULL, NULL, t[7]));
  keep(t[7], "dwpe (pos = t, no dwte)");
  destroy(t, 8);
  free(tok), free(pos), free(wte), free(wpe), free(dout), free(g1), free(g2);
}

static void op_layernorm(const weft_op_desc *pin, int inplace) {
  const int64_t N = B * T;
  float *x = rnd((size_t)N * C, -3, 3, RATE), *g = rnd(C, -2, 2, RATE), *b = rnd(C, -1, 1, RATE);
  float *dy = rnd((size_t)N * C, -1, 1, RATE), *dg = rnd(C, -1, 1, RATE), *db = rnd(C, -1, 1, RATE);
  weft_tensor *t[] = {tf(2, D(N, C), x),  tf(1, D(C), g),       tf(1, D(C), b),        tf(2, D(N, C), NULL),
                      tf(1, D(N), NULL),  tf(1, D(N), NULL),    tf(2, D(N, C), dy),    tf(2, D(N, C), NULL),
                      tf(1, D(C), dg),    tf(1, D(C), db),      tf(2, D(N, C), x)};
  weft_tensor *y = inplace ? t[10] : t[3], *dx = inplace ? t[6] : t[7];
  /* the forward once outside any scope (its mean/rstd feed the backward), the backward as asked */
  ok(weft_op_layernorm(F, pin, t[0], t[1], t[2], 1e-5f, t[3], t[4], t[5]), "layernorm");
  keep(t[3], "y"), keep(t[4], "mean"), keep(t[5], "rstd");
  APPLY(weft_op_layernorm(F, pin, y == t[3] ? t[0] : y, t[1], t[2], 1e-5f, y, NULL, NULL));
  keep(y, inplace ? "y (in place, repeated)" : "y (no mean/rstd)");
  APPLY(weft_op_layernorm_backward(F, pin, t[6], t[0], t[4], t[5], t[1], dx, t[8], t[9]));
  keep(dx, inplace ? "dx (= dy)" : "dx"), keep(t[8], "dgamma"), keep(t[9], "dbeta");
  destroy(t, 11);
  free(x), free(g), free(b), free(dy), free(dg), free(db);
}

static void op_gelu(const weft_op_desc *pin, int inplace) {
  const size_t n = (size_t)B * T * 4 * C;
  float *x = rnd(n, -6, 6, RATE), *dy = rnd(n, -2, 2, RATE);
  weft_tensor *t[] = {tf(2, D(B * T, 4 * C), x), tf(2, D(B * T, 4 * C), dy), tf(2, D(B * T, 4 * C), NULL)};
  weft_tensor *y = inplace ? t[0] : t[2];
  APPLY(weft_op_gelu_backward(F, pin, t[0], t[1], inplace ? t[1] : t[2]));
  keep(inplace ? t[1] : t[2], inplace ? "dx (= dy)" : "dx");
  APPLY(weft_op_gelu(F, pin, t[0], y));
  keep(y, inplace ? "y (= x)" : "y");
  destroy(t, 3);
  free(x), free(dy);
}

static void op_attention(const weft_op_desc *pin, int inplace) {
  (void)inplace;
  float *qkv = rnd((size_t)B * T * 3 * C, -2, 2, RATE / 20), *dout = rnd((size_t)B * T * C, -1, 1, RATE / 20);
  weft_tensor *t[] = {tf(3, D(B, T, 3 * C), qkv),       tf(3, D(B, T, C), NULL),     tf(4, D(B, NH, T, T), NULL),
                      tf(4, D(B, NH, T, T), NULL),      tf(3, D(B, T, C), dout),     tf(3, D(B, T, 3 * C), NULL)};
  APPLY(weft_op_attention(F, pin, t[0], NH, t[1], t[2], t[3]));
  keep(t[1], "out"), keep(t[2], "att"), keep(t[3], "preatt");
  APPLY(weft_op_attention(F, pin, t[0], NH, t[1], t[2], NULL));
  keep(t[1], "out (no preatt)");
  APPLY(weft_op_attention_backward(F, pin, t[4], t[0], t[2], NH, t[5]));
  keep(t[5], "dqkv");
  destroy(t, 6);
  free(qkv), free(dout);
}

/* Decode attention over a cache of 256 positions: the last token, a few rows mid-cache (no att), a prompt. */
static void op_attention_cached(const weft_op_desc *pin, int inplace) {
  (void)inplace;
  enum { TM = 256 };
  float *qkv = rnd((size_t)B * TM * 3 * C, -2, 2, RATE / 20);
  weft_tensor *t[] = {tf(3, D(B, TM, 3 * C), qkv), tf(3, D(B, 1, C), NULL),  tf(4, D(B, NH, 1, TM), NULL),
                      tf(3, D(B, 4, C), NULL),     tf(3, D(B, T, C), NULL),  tf(4, D(B, NH, T, TM), NULL)};
  APPLY(weft_op_attention_cached(F, pin, t[0], NH, TM - 1, t[1], t[2]));
  keep(t[1], "out (t0 = 255)"), keep(t[2], "att (t0 = 255)");
  APPLY(weft_op_attention_cached(F, pin, t[0], NH, 100, t[3], NULL));
  keep(t[3], "out (t0 = 100, Tq = 4, no att)");
  APPLY(weft_op_attention_cached(F, pin, t[0], NH, 0, t[4], t[5]));
  keep(t[4], "out (t0 = 0, Tq = 64)"), keep(t[5], "att (t0 = 0, Tq = 64)");
  destroy(t, 6);
  free(qkv);
}

static void op_softmax(const weft_op_desc *pin, int inplace) {
  const int64_t Rr = B * NH;
  const size_t n = (size_t)Rr * T * T;
  float *s = rnd(n, -8, 8, RATE), *dp = rnd(n, -1, 1, RATE);
  weft_tensor *t[] = {tf(3, D(Rr, T, T), s), tf(3, D(Rr, T, T), NULL), tf(3, D(Rr, T, T), dp),
                      tf(3, D(Rr, T, T), NULL)};
  APPLY(weft_op_causal_softmax(F, pin, t[0], 0.125f, inplace ? t[0] : t[1]));
  weft_tensor *pr = inplace ? t[0] : t[1];
  keep(pr, inplace ? "probs (= scores)" : "probs");
  APPLY(weft_op_causal_softmax_backward(F, pin, pr, t[2], 0.125f, inplace ? t[2] : t[3]));
  keep(inplace ? t[2] : t[3], inplace ? "dscores (= dprobs)" : "dscores");
  destroy(t, 4);
  free(s), free(dp);
}

static void op_crossentropy(const weft_op_desc *pin, int inplace) {
  (void)inplace;
  const int64_t N = B * T;
  float *z = rnd((size_t)N * V, -10, 10, RATE / 50), *dl = rnd(N, -1, 1, RATE);
  int32_t *tg = idx(N, V);
  weft_tensor *t[] = {tf(2, D(N, V), z), ti(1, D(N), tg), tf(1, D(N), NULL), tf(1, D(N), dl), tf(2, D(N, V), NULL)};
  APPLY(weft_op_crossentropy(F, pin, t[0], t[1], t[2]));
  keep(t[2], "losses");
  APPLY(weft_op_crossentropy_backward(F, pin, t[0], t[1], t[3], t[4]));
  keep(t[4], "dlogits");
  destroy(t, 5);
  free(z), free(dl), free(tg);
}

static void op_adamw_sumsq(const weft_op_desc *pin, int inplace) {
  (void)inplace;
  const size_t n = (size_t)C * 4 * C + 1234;
  float *p = rnd(n, -1, 1, RATE), *g = rnd(n, -1, 1, RATE), *m = rnd(n, -0.1f, 0.1f, RATE);
  float *v = rnd(n, 0, 0.01f, RATE), acc0 = 0.5f, accn = tu_float(0x7fa00001u), accz = -0.0f;
  weft_tensor *t[] = {tf(1, D((int64_t)n), p), tf(1, D((int64_t)n), g),  tf(1, D((int64_t)n), m),
                      tf(1, D((int64_t)n), v), tf(1, D(1), &acc0),         tf(1, D(1), &accn),
                      tf(1, D(1), &accz),      tf(1, D(1), &accz),         tf(1, D(4099), g),
                      tf(1, D(3 * 4096 + 17), m), tf(1, D(1), &acc0)};
  APPLY(weft_op_adamw(F, pin, t[0], t[1], t[2], t[3], 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3));
  keep(t[0], "param"), keep(t[2], "m"), keep(t[3], "v");
  APPLY(weft_op_sumsq(F, pin, t[1], t[4]));
  keep(t[4], "acc");
  APPLY(weft_op_sumsq(F, pin, t[8], t[5])); /* a NaN with a payload in acc */
  keep(t[5], "acc (NaN payload)");
  APPLY(weft_op_sumsq(F, pin, t[7], t[6])); /* -0 + (-0)^2 */
  keep(t[6], "acc (-0)");
  APPLY(weft_op_sumsq(F, pin, t[9], t[10])); /* 3 chunks + 17 */
  APPLY(weft_op_sumsq(F, pin, t[8], t[10])); /* continued: 1 chunk + 3 */
  keep(t[10], "acc (3 chunks + 17, then 4099)");
  destroy(t, 11);
  free(p), free(g), free(m), free(v);
}

static void op_copies(const weft_op_desc *pin, int inplace) {
  (void)inplace;
  const int64_t hs = C / NH, Tm = 100, Tn = 7, t0 = 33;
  const size_t n = (size_t)B * T * NH * hs;
  float *x = rnd(n, -1, 1, 0.05); /* NaN payloads must survive: a copy */
  int32_t *xi = malloc(n * 4);
  for (size_t i = 0; i < n; i++) xi[i] = (int32_t)(uint32_t)tu_rng_next(&R);
  float *dst = rnd((size_t)B * NH * Tm * hs, -1, 1, 0.05), *src = rnd((size_t)B * NH * Tn * hs, -1, 1, 0.05);
  weft_tensor *t[] = {tf(4, D(B, T, NH, hs), x),        tf(4, D(B, NH, T, hs), NULL), ti(4, D(B, T, NH, hs), xi),
                      ti(4, D(B, NH, T, hs), NULL),     tf(4, D(B, NH, Tm, hs), dst), tf(4, D(B, NH, Tn, hs), src),
                      tf(3, D(B, T, C), NULL),          tf(2, D(C, B * T), NULL)};
  const int perm[4] = {0, 2, 1, 3}, p3[3] = {1, 0, 2}, p2[2] = {1, 0};
  APPLY(weft_op_permute(F, pin, t[0], perm, t[1]));
  keep(t[1], "permute f32");
  APPLY(weft_op_permute(F, pin, t[2], perm, t[3]));
  keep(t[3], "permute i32");
  APPLY(weft_op_copy_slice(F, pin, t[5], t[4], 2, t0));
  keep(t[4], "copy_slice (kv append)");
  /* rank 3 and 2 */
  weft_tensor *x3 = tf(3, D(T, B, C), x), *x2 = tf(2, D(B * T, C), x);
  APPLY(weft_op_permute(F, pin, x3, p3, t[6]));
  keep(t[6], "permute rank 3");
  APPLY(weft_op_permute(F, pin, x2, p2, t[7]));
  keep(t[7], "permute rank 2");
  /* the bits are the input's bits: checked on the host too */
  if (CUR == 1) {
    const uint32_t *got = RES[1].bits[0];
    size_t bad = 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t tt = 0; tt < T; tt++)
        for (int64_t h = 0; h < NH; h++)
          for (int64_t d = 0; d < hs; d++)
            bad += got[((b * NH + h) * T + tt) * hs + d] != tu_bits(x[((b * T + tt) * NH + h) * hs + d]);
    TU_CHECK(bad == 0, "permute on cuda:0: %zu elements are not the input's bits", bad);
  }
  weft_tensor_destroy(x3), weft_tensor_destroy(x2);
  destroy(t, 8);
  free(x), free(xi), free(dst), free(src);
}

typedef struct opcase {
  const char *name;
  void (*fn)(const weft_op_desc *pin, int inplace);
  int has_inplace;
} opcase;

static const opcase CASES[] = {
    {"embedding (+ backward)", op_embedding, 0},  {"layernorm (+ backward)", op_layernorm, 1},
    {"gelu (+ backward)", op_gelu, 1},            {"attention (+ backward)", op_attention, 0},
    {"causal_softmax (+ backward)", op_softmax, 1}, {"crossentropy (+ backward)", op_crossentropy, 0},
    {"adamw, sumsq", op_adamw_sumsq, 0},          {"permute, copy_slice", op_copies, 0},
    {"attention_cached", op_attention_cached, 0},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static void run_case(const opcase *c, int inplace, int scoped) {
  uint64_t seed = tu_rng_next(&R);
  for (int lane = 0; lane < 2; lane++) {
    const weft_op_desc pin = {WEFT_CONTRACT_EXACT, lane ? L_CU : L_CPU};
    R.s = seed;
    CUR = lane;
    g_scoped = scoped;
    c->fn(&pin, inplace);
  }
  TU_CHECK(RES[0].n == RES[1].n && RES[0].n > 0, "%s: %d outputs on cpu, %d on cuda:0", c->name, RES[0].n, RES[1].n);
  for (int i = 0; i < RES[0].n && i < RES[1].n; i++) {
    size_t n = RES[0].count[i], bad = 0, first = 0;
    for (size_t k = 0; k < n; k++)
      if (RES[0].bits[i][k] != RES[1].bits[i][k] && bad++ == 0) first = k;
    TU_CHECK(bad == 0, "%s%s%s: %s: %zu of %zu elements differ from cpu; first [%zu] cuda 0x%08x cpu 0x%08x", c->name,
             inplace ? " in place" : "", scoped ? " in scopes" : "", RES[0].name[i], bad, n, first,
             bad ? RES[1].bits[i][first] : 0, bad ? RES[0].bits[i][first] : 0);
  }
  printf("  %-30s %-9s %-7s %d outputs compared\n", c->name, inplace ? "in place" : "", scoped ? "scoped" : "",
         RES[0].n);
  clear(&RES[0]), clear(&RES[1]);
}

/* ------------------------------------------------------------------------------ the fp32 contract */

/* got within 1e-4 of ref's largest magnitude, element by element (tests/test_cpu_tx.c's bound) */
static void near(const char *what, const float *ref, const float *got, size_t n) {
  float big = 0.0f;
  for (size_t i = 0; i < n; i++) big = fabsf(ref[i]) > big ? fabsf(ref[i]) : big;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!(fabsf(ref[i] - got[i]) <= 1e-4f * big) && bad++ == 0) first = i;
  TU_CHECK(bad == 0, "fp32 %s: %zu of %zu elements beyond 1e-4 of %g; first [%zu] cuda %g cpu %g", what, bad, n,
           (double)big, first, bad ? (double)got[first] : 0.0, bad ? (double)ref[first] : 0.0);
}

/* layernorm (forward, backward) and sumsq pinned to cuda:0 under fp32 (its reordered kernels) against the cpu
 * lane under exact; finite inputs, rows of 768 (float4 path), 77 (scalar path) and 1100 (wider than the fp32
 * kernels take: the exact ones) */
static void fp32_ops(void) {
  const int64_t shapes[][2] = {{B * T, C}, {37, 77}, {5, 1100}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    const int64_t N = shapes[k][0], W = shapes[k][1];
    float *x = rnd((size_t)(N * W), -3, 3, 0), *g = rnd((size_t)W, -2, 2, 0), *b = rnd((size_t)W, -1, 1, 0);
    float *dy = rnd((size_t)(N * W), -1, 1, 0), *dg = rnd((size_t)W, -1, 1, 0), *db = rnd((size_t)W, -1, 1, 0);
    float *out[2][6];
    const size_t cnt[6] = {(size_t)(N * W), (size_t)N, (size_t)N, (size_t)(N * W), (size_t)W, (size_t)W};
    for (int lane = 0; lane < 2; lane++) {
      const weft_op_desc pin = {lane ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT, lane ? L_CU : L_CPU};
      weft_tensor *t[] = {tf(2, D(N, W), x), tf(1, D(W), g),  tf(1, D(W), b),     tf(2, D(N, W), NULL), tf(1, D(N), NULL),
                          tf(1, D(N), NULL), tf(2, D(N, W), dy), tf(2, D(N, W), NULL), tf(1, D(W), dg),  tf(1, D(W), db)};
      ok(weft_op_layernorm(F, &pin, t[0], t[1], t[2], 1e-5f, t[3], t[4], t[5]), "layernorm (fp32)");
      ok(weft_op_layernorm_backward(F, &pin, t[6], t[0], t[4], t[5], t[1], t[7], t[8], t[9]), "layernorm_backward (fp32)");
      weft_tensor *rd[6] = {t[3], t[4], t[5], t[7], t[8], t[9]};
      for (int i = 0; i < 6; i++) {
        out[lane][i] = malloc(cnt[i] * sizeof(float));
        ok(weft_tensor_read(rd[i], out[lane][i], cnt[i]), "tensor_read");
      }
      destroy(t, 10);
    }
    static const char *names[6] = {"y", "mean", "rstd", "dx", "dgamma", "dbeta"};
    for (int i = 0; i < 6; i++) {
      char what[64];
      snprintf(what, sizeof what, "layernorm %lldx%lld %s", (long long)N, (long long)W, names[i]);
      near(what, out[0][i], out[1][i], cnt[i]);
      free(out[0][i]), free(out[1][i]);
    }
    free(x), free(g), free(b), free(dy), free(dg), free(db);
  }
  const size_t ns[] = {5, 4099, (size_t)C * 4 * C + 1234};
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
    float *v = rnd(ns[k], -1, 1, 0), acc[2] = {0.5f, 0.5f};
    for (int lane = 0; lane < 2; lane++) {
      const weft_op_desc pin = {lane ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT, lane ? L_CU : L_CPU};
      weft_tensor *tv = tf(1, D((int64_t)ns[k]), v), *ta = tf(1, D(1), &acc[lane]);
      ok(weft_op_sumsq(F, &pin, tv, ta), "sumsq (fp32)");
      ok(weft_op_sumsq(F, &pin, tv, ta), "sumsq (fp32), continued");
      ok(weft_tensor_read(ta, &acc[lane], 1), "tensor_read");
      weft_tensor_destroy(tv), weft_tensor_destroy(ta);
    }
    char what[64];
    snprintf(what, sizeof what, "sumsq n=%zu (twice)", ns[k]);
    near(what, &acc[0], &acc[1], 1);
    free(v);
  }
  printf("  fp32 layernorm (+ backward), sumsq within 1e-4 of the cpu's exact results\n");
}

/* ------------------------------------------------------------------------------------------ timing */

typedef struct tctx {
  int64_t Bt, Tt;
  weft_tensor *t[12];
} tctx;

static double median3(double a, double b, double c) {
  return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* Milliseconds per op: `reps` ops in a scope (replayed as a graph after the first), median of three. */
#define TIME_OP(label, call)                                                                                       \
  do {                                                                                                             \
    double ts_[3];                                                                                                 \
    for (int k_ = -1; k_ < 3; k_++) {                                                                              \
      double s0_ = tu_now();                                                                                       \
      ok(weft_scope_begin(F), "scope_begin");                                                                      \
      for (int r_ = 0; r_ < reps; r_++) ok((call), label);                                                         \
      ok(weft_scope_end(F), "scope_end");                                                                          \
      if (k_ >= 0) ts_[k_] = (tu_now() - s0_) * 1e3 / reps;                                                        \
    }                                                                                                              \
    printf("  %-30s B=%lld T=%-5lld %10.3f ms\n", label, (long long)Bt, (long long)Tt,                            \
           median3(ts_[0], ts_[1], ts_[2]));                                                                       \
  } while (0)

static void timing(int64_t Bt, int64_t Tt) {
  const weft_op_desc pin = {WEFT_CONTRACT_EXACT, L_CU};
  const weft_op_desc *pn = &pin;
  const int64_t N = Bt * Tt, hs = C / NH;
  const int reps = Tt >= 1024 ? 5 : 20;
  int32_t *tok = idx((size_t)N, V), *tg = idx((size_t)N, V);
  float *w = rnd((size_t)V * C, -1, 1, 0), *a = rnd((size_t)N * 4 * C, -1, 1, 0);
  weft_tensor *ttok = ti(2, D(Bt, Tt), tok), *ttg = ti(1, D(N), tg), *wte = tf(2, D(V, C), w);
  weft_tensor *wpe = tf(2, D(P, C), w), *x = tf(2, D(N, C), a), *y = tf(2, D(N, C), NULL);
  weft_tensor *g = tf(1, D(C), a), *bb = tf(1, D(C), a), *mean = tf(1, D(N), NULL), *rstd = tf(1, D(N), NULL);
  weft_tensor *dg = tf(1, D(C), NULL), *db = tf(1, D(C), NULL), *h = tf(2, D(N, 4 * C), a);
  weft_tensor *h2 = tf(2, D(N, 4 * C), NULL), *qkv = tf(3, D(Bt, Tt, 3 * C), a), *o = tf(3, D(Bt, Tt, C), NULL);
  weft_tensor *att = tf(4, D(Bt, NH, Tt, Tt), NULL), *att2 = tf(4, D(Bt, NH, Tt, Tt), NULL);
  weft_tensor *dqkv = tf(3, D(Bt, Tt, 3 * C), NULL), *gw = tf(2, D(V, C), NULL), *gp = tf(2, D(P, C), NULL);
  weft_tensor *dl = tf(1, D(N), a), *acc = tf(1, D(1), NULL), *x4 = tf(4, D(Bt, Tt, NH, hs), a);
  weft_tensor *y4 = tf(4, D(Bt, NH, Tt, hs), NULL), *kv = tf(4, D(Bt, NH, 1024, hs), NULL);
  weft_tensor *mm = tf(2, D(4 * C, C), NULL), *vv = tf(2, D(4 * C, C), NULL), *pp = tf(2, D(4 * C, C), a);
  weft_tensor *gg = tf(2, D(4 * C, C), a), *o1 = tf(3, D(Bt, 1, C), NULL);
  weft_tensor *lg = NULL, *dlg = NULL;
  ok(weft_tensor_create(F, 2, D(N, V), NULL, &lg), "logits");
  ok(weft_tensor_create(F, 2, D(N, V), NULL, &dlg), "dlogits");
  ok(weft_op_attention(F, pn, qkv, NH, o, att, NULL), "attention");
  const int perm[4] = {0, 2, 1, 3};
  TIME_OP("embedding", weft_op_embedding(F, pn, ttok, NULL, wte, wpe, y));
  TIME_OP("embedding_backward", weft_op_embedding_backward(F, pn, y, ttok, NULL, gw, gp));
  TIME_OP("layernorm", weft_op_layernorm(F, pn, x, g, bb, 1e-5f, y, mean, rstd));
  TIME_OP("layernorm_backward", weft_op_layernorm_backward(F, pn, x, x, mean, rstd, g, y, dg, db));
  TIME_OP("gelu", weft_op_gelu(F, pn, h, h2));
  TIME_OP("gelu_backward", weft_op_gelu_backward(F, pn, h, h, h2));
  TIME_OP("attention", weft_op_attention(F, pn, qkv, NH, o, att, NULL));
  TIME_OP("attention_backward", weft_op_attention_backward(F, pn, o, qkv, att, NH, dqkv));
  TIME_OP("attention_cached (last token)", weft_op_attention_cached(F, pn, qkv, NH, Tt - 1, o1, NULL));
  TIME_OP("causal_softmax", weft_op_causal_softmax(F, pn, att, 0.125f, att2));
  TIME_OP("causal_softmax_backward", weft_op_causal_softmax_backward(F, pn, att, att, 0.125f, att2));
  TIME_OP("crossentropy", weft_op_crossentropy(F, pn, lg, ttg, dl));
  TIME_OP("crossentropy_backward", weft_op_crossentropy_backward(F, pn, lg, ttg, dl, dlg));
  TIME_OP("adamw (4C x C)", weft_op_adamw(F, pn, pp, gg, mm, vv, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1));
  TIME_OP("sumsq (4C x C)", weft_op_sumsq(F, pn, gg, acc));
  const weft_op_desc pin32 = {WEFT_CONTRACT_FP32, L_CU};
  TIME_OP("layernorm (fp32)", weft_op_layernorm(F, &pin32, x, g, bb, 1e-5f, y, mean, rstd));
  TIME_OP("layernorm_backward (fp32)", weft_op_layernorm_backward(F, &pin32, x, x, mean, rstd, g, y, dg, db));
  TIME_OP("sumsq (4C x C, fp32)", weft_op_sumsq(F, &pin32, gg, acc));
  TIME_OP("permute [B,T,NH,hs]", weft_op_permute(F, pn, x4, perm, y4));
  TIME_OP("copy_slice (kv append)", weft_op_copy_slice(F, pn, y4, kv, 2, 0));
  weft_tensor *all[] = {ttok, ttg, wte, wpe, x, y, g, bb, mean, rstd, dg, db, h, h2, qkv, o, att, att2,
                        dqkv, gw, gp, dl, acc, x4, y4, kv, mm, vv, pp, gg, lg, dlg, o1};
  destroy(all, (int)(sizeof all / sizeof all[0]));
  free(tok), free(tg), free(w), free(a);
}

int main(void) {
  double start = tu_now();
  R.s = tu_seed();
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.calibration = WEFT_CALIBRATION_OFF;
  desc.lanes = getenv("WEFT_TEST_TX_LANE") ? NULL : "cpu,cuda";
  weft_status st = weft_fabric_open(&desc, &F);
  TU_CHECK(st == WEFT_OK, "open: %s", weft_open_error());
  if (!F) return tu_finish("cuda_ops_tx", start);
  size_t li;
  L_CPU = L_CU = -1;
  if (weft_fabric_lane_find(F, "cpu", &li) == WEFT_OK) L_CPU = (int)li;
  /* WEFT_TEST_TX_LANE names another lane to hold against cpu (the test's own check: "cpu" must pass) */
  const char *lname = getenv("WEFT_TEST_TX_LANE") ? getenv("WEFT_TEST_TX_LANE") : "cuda:0";
  if (weft_fabric_lane_find(F, lname, &li) == WEFT_OK) L_CU = (int)li;
  if (L_CU < 0) {
    const char *why = "no cuda lane in the fabric";
    for (size_t i = 0; i < weft_fabric_absent_count(F); i++) {
      const char *name, *w;
      weft_fabric_absent_info(F, i, &name, &w);
      if (strncmp(name, "cuda", 4) == 0 && w) why = w;
    }
    tu_skip("cuda:0 is absent: %s", why);
    return tu_finish("cuda_ops_tx", start); /* 77: CTest says Skipped */
  }
  weft_lane_info info;
  weft_fabric_lane_info(F, (size_t)L_CU, &info);
  printf("%s: %s | %s\n", lname, info.device, info.driver);
  TU_CHECK(info.ops == WEFT_OPS_ALL, "cuda:0 offers every op, matmul_acc included (ops 0x%llx)",
           (unsigned long long)info.ops);
  if (weft_fabric_lane_find(F, "cuda:0.tensor", &li) == WEFT_OK) {
    weft_fabric_lane_info(F, li, &info);
    TU_CHECK(!(info.ops & WEFT_OP_BIT(WEFT_OP_LAYERNORM)), "cuda:0.tensor offers no layernorm (ops 0x%llx)",
             (unsigned long long)info.ops);
  }
  printf("bit for bit against cpu:\n");
  for (size_t i = 0; i < NCASES; i++)
    for (int inplace = 0; inplace <= CASES[i].has_inplace; inplace++)
      for (int scoped = 0; scoped < 2; scoped++) run_case(&CASES[i], inplace, scoped);
  fp32_ops();
  if (!getenv("WEFT_TEST_NO_TIMING")) {
    printf("cuda:0 times at GPT-2 small shapes (C=768, NH=12, V=50257), for information:\n");
    timing(4, 64);
    timing(4, 1024);
  }
  weft_fabric_close(F);
  return tu_finish("cuda_ops_tx", start);
}
