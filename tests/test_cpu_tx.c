/* test_cpu_tx.c - the CPU lane's transformer ops (lanes/cpu/tx.c) against the reference kernels
 * (core/reference_tx.c), bit for bit: every op, on random inputs at GPT-2-like shapes (and odd ones, so
 * vector tails and partial row groups run), with NaNs of random payloads, +-inf, -0, subnormals and huge
 * values mixed in; with pools of 1, 2, 3 and 8 threads; under every instruction set this CPU has
 * (WEFT_CPU_ISA=portable, avx2, avx512), the portable one always. Every NaN stored must be 0x7fc00000, so
 * outputs are compared with memcmp. Plus uniformly random bit patterns through GELU and AdamW (every branch
 * of the vector tanh, exp, recip and sqrt), rows whose maximum is a zero of either sign, and the statuses
 * for bad arguments. The fp32 contract's tables (FMA, reordered sums, hardware division and square root) run
 * the same tests on finite inputs, within a tolerance of the reference; and the matmul's skinny kernels
 * (tx_kern.inc's gemv, gemm.c's m <= 4 case) under both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference_tx.h"
#include "lanes/cpu/tx.h"
#include "tutil.h"

static tu_rng rng;
static const char *cur_isa = "";
static int cur_threads = 0;
/* The kernel table under test: NULL (the exact one), or the fp32 contract's, which is checked against the
 * reference within a tolerance instead of bit for bit, on finite inputs. */
static const weft_cpu_tx_kernels *K = NULL;
static int fp32_mode = 0;

static float *fbuf(size_t n) {
  float *p = calloc(n ? n : 1, sizeof *p);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

/* A value for test inputs: mostly uniform in [lo, hi), sometimes special. */
static float special_or(float lo, float hi, int specials) {
  if (specials && !fp32_mode && tu_rng_int(&rng, 0, 49) == 0) {
    switch (tu_rng_int(&rng, 0, 8)) {
    case 0: return tu_float(0x7f800001u + (uint32_t)tu_rng_int(&rng, 0, 0x7ffffe)); /* NaN, random payload */
    case 1: return tu_float(0xffc00000u | (uint32_t)tu_rng_int(&rng, 0, 0x3fffff)); /* negative quiet NaN */
    case 2: return tu_float(0x7f800000u);
    case 3: return tu_float(0xff800000u);
    case 4: return -0.0f;
    case 5: return 0.0f;
    case 6: return tu_float((uint32_t)tu_rng_int(&rng, 1, 0x7fffff) | (tu_rng_int(&rng, 0, 1) ? 0x80000000u : 0));
    case 7: return tu_rng_float(&rng, -1e30f, 1e30f);
    default: return tu_rng_float(&rng, -90.0f, 90.0f);
    }
  }
  return tu_rng_float(&rng, lo, hi);
}
static void fill(float *p, size_t n, float lo, float hi, int specials) {
  for (size_t i = 0; i < n; i++) p[i] = special_or(lo, hi, specials);
}
static void fill_bits(float *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = tu_float((uint32_t)tu_rng_next(&rng));
}

/* Compares n floats bit for bit; reports the first difference. In fp32 mode: close instead, each value
 * within 1e-4 of the largest magnitude among the expected ones (a wrong kernel is off by that scale; fused
 * and reordered sums of these sizes stay far inside it), NaN where the reference has NaN. */
static void same(const char *what, const float *want, const float *got, size_t n) {
  size_t bad = 0, first = 0;
  float scale = 0.0f;
  if (fp32_mode)
    for (size_t i = 0; i < n; i++)
      if (want[i] == want[i] && __builtin_fabsf(want[i]) > scale && __builtin_fabsf(want[i]) < 3e38f)
        scale = __builtin_fabsf(want[i]);
  for (size_t i = 0; i < n; i++) {
    int ok = tu_bits(want[i]) == tu_bits(got[i]);
    if (!ok && fp32_mode)
      ok = want[i] != want[i] ? got[i] != got[i] : __builtin_fabsf(got[i] - want[i]) <= 1e-4f * scale + 1e-30f;
    if (!ok) {
      if (!bad) first = i;
      bad++;
    }
  }
  TU_CHECK(bad == 0, "%s [isa %s%s, %d threads]: %zu of %zu differ; first at %zu: want 0x%08x (%g), got 0x%08x (%g)",
           what, cur_isa, fp32_mode ? " fp32" : "", cur_threads, bad, n, first, bad ? tu_bits(want[first]) : 0,
           bad ? (double)want[first] : 0, bad ? tu_bits(got[first]) : 0, bad ? (double)got[first] : 0);
}

/* B*T*C past about a million elements the backward splits the channels over the threads. */
static void test_embedding(weft_cpu_pool *pool, int64_t B, int64_t T) {
  const int64_t C = 771, V = 500, P = T + 27;
  float *wte = fbuf((size_t)(V * C)), *wpe = fbuf((size_t)(P * C)), *dout = fbuf((size_t)(B * T * C));
  float *o1 = fbuf((size_t)(B * T * C)), *o2 = fbuf((size_t)(B * T * C));
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * T)), *pos = malloc(sizeof(int32_t) * (size_t)(B * T));
  if (!tok || !pos) exit(1);
  fill(wte, (size_t)(V * C), -1, 1, 1);
  fill(wpe, (size_t)(P * C), -1, 1, 1);
  fill(dout, (size_t)(B * T * C), -1, 1, 1);
  for (int i = 0; i < B * T; i++)
    tok[i] = (int32_t)tu_rng_int(&rng, 0, 20), pos[i] = (int32_t)tu_rng_int(&rng, 0, P - 1);
  for (int with_pos = 0; with_pos < 2; with_pos++) {
    const int32_t *ps = with_pos ? pos : NULL;
    TU_STATUS(weft_ref_embedding_forward(o1, tok, ps, wte, wpe, B, T, C, V, P), WEFT_OK, "ref embedding fwd");
    TU_STATUS(weft_cpu_tx_embedding_forward(K, pool, o2, tok, ps, wte, wpe, B, T, C, V, P), WEFT_OK, "embedding fwd");
    same("embedding forward", o1, o2, (size_t)(B * T * C));
    /* backward accumulates onto what the tables hold: start both from the same random contents */
    float *w1 = fbuf((size_t)(V * C)), *w2 = fbuf((size_t)(V * C)), *p1 = fbuf((size_t)(P * C)),
          *p2 = fbuf((size_t)(P * C));
    fill(w1, (size_t)(V * C), -1, 1, 1);
    fill(p1, (size_t)(P * C), -1, 1, 1);
    memcpy(w2, w1, sizeof(float) * (size_t)(V * C));
    memcpy(p2, p1, sizeof(float) * (size_t)(P * C));
    TU_STATUS(weft_ref_embedding_backward(w1, p1, dout, tok, ps, B, T, C, V, P), WEFT_OK, "ref embedding bwd");
    TU_STATUS(weft_cpu_tx_embedding_backward(K, pool, w2, p2, dout, tok, ps, B, T, C, V, P), WEFT_OK, "embedding bwd");
    same("embedding backward dwte", w1, w2, (size_t)(V * C));
    same("embedding backward dwpe", p1, p2, (size_t)(P * C));
    TU_STATUS(weft_cpu_tx_embedding_backward(K, pool, w2, NULL, dout, tok, ps, B, T, C, V, P), WEFT_OK, "no dwpe");
    TU_STATUS(weft_ref_embedding_backward(w1, NULL, dout, tok, ps, B, T, C, V, P), WEFT_OK, "ref no dwpe");
    same("embedding backward dwte only", w1, w2, (size_t)(V * C));
    free(w1), free(w2), free(p1), free(p2);
  }
  /* bad arguments: the reference's statuses, nothing written */
  memset(o2, 0, sizeof(float) * (size_t)(B * T * C));
  tok[5] = (int32_t)V;
  TU_STATUS(weft_cpu_tx_embedding_forward(K, pool, o2, tok, NULL, wte, wpe, B, T, C, V, P), WEFT_ERR_INVALID_ARGUMENT,
            "token out of range");
  TU_STATUS(weft_cpu_tx_embedding_backward(K, pool, wte, NULL, dout, tok, NULL, B, T, C, V, P),
            WEFT_ERR_INVALID_ARGUMENT, "token out of range (backward)");
  tok[5] = 0;
  TU_STATUS(weft_cpu_tx_embedding_forward(K, pool, o2, tok, NULL, wte, wpe, B, -1, C, V, P), WEFT_ERR_SHAPE, "T < 0");
  TU_STATUS(weft_cpu_tx_embedding_forward(K, pool, NULL, tok, NULL, wte, wpe, B, T, C, V, P), WEFT_ERR_INVALID_ARGUMENT,
            "NULL out");
  TU_STATUS(weft_cpu_tx_embedding_forward(K, pool, o2, tok, NULL, wte, wpe, B, T, C, V, 10), WEFT_ERR_INVALID_ARGUMENT,
            "T > P without positions");
  int nonzero = 0;
  for (int64_t i = 0; i < B * T * C; i++) nonzero |= o2[i] != 0.0f;
  TU_CHECK(!nonzero, "a refused embedding wrote its output");
  free(wte), free(wpe), free(dout), free(o1), free(o2), free(tok), free(pos);
}

static void test_layernorm(weft_cpu_pool *pool, int64_t N, int64_t C) {
  const size_t nc = (size_t)(N * C);
  float *x = fbuf(nc), *g = fbuf((size_t)C), *b = fbuf((size_t)C), *dy = fbuf(nc);
  float *y1 = fbuf(nc), *y2 = fbuf(nc), *m1 = fbuf((size_t)N), *m2 = fbuf((size_t)N), *r1 = fbuf((size_t)N),
        *r2 = fbuf((size_t)N);
  fill(x, nc, -3, 3, 1);
  fill(g, (size_t)C, 0.5f, 1.5f, 1);
  fill(b, (size_t)C, -0.5f, 0.5f, 1);
  fill(dy, nc, -1, 1, 1);
  weft_ref_layernorm_forward(y1, m1, r1, x, g, b, N, C, 1e-5f);
  weft_cpu_tx_layernorm_forward(K, pool, y2, m2, r2, x, g, b, N, C, 1e-5f);
  same("layernorm forward y", y1, y2, nc);
  same("layernorm forward mean", m1, m2, (size_t)N);
  same("layernorm forward rstd", r1, r2, (size_t)N);
  weft_cpu_tx_layernorm_forward(K, pool, y2, NULL, NULL, x, g, b, N, C, 1e-5f);
  same("layernorm forward y (no mean, rstd)", y1, y2, nc);
  float *dg1 = fbuf((size_t)C), *dg2 = fbuf((size_t)C), *db1 = fbuf((size_t)C), *db2 = fbuf((size_t)C);
  fill(dg1, (size_t)C, -1, 1, 1);
  fill(db1, (size_t)C, -1, 1, 1);
  memcpy(dg2, dg1, sizeof(float) * (size_t)C);
  memcpy(db2, db1, sizeof(float) * (size_t)C);
  weft_ref_layernorm_backward(y1, dg1, db1, dy, x, m1, r1, g, N, C);
  weft_cpu_tx_layernorm_backward(K, pool, y2, dg2, db2, dy, x, m1, r1, g, N, C);
  same("layernorm backward dx", y1, y2, nc);
  same("layernorm backward dgamma", dg1, dg2, (size_t)C);
  same("layernorm backward dbeta", db1, db2, (size_t)C);
  weft_cpu_tx_layernorm_backward(K, pool, y2, NULL, NULL, dy, x, m1, r1, g, N, C);
  same("layernorm backward dx (no dgamma, dbeta)", y1, y2, nc);
  free(x), free(g), free(b), free(dy), free(y1), free(y2), free(m1), free(m2), free(r1), free(r2);
  free(dg1), free(dg2), free(db1), free(db2);
}

static void test_elementwise(weft_cpu_pool *pool) {
  const size_t n = 100003;
  float *x = fbuf(n), *dy = fbuf(n), *y1 = fbuf(n), *y2 = fbuf(n);
  for (int mode = 0; mode < (fp32_mode ? 1 : 2); mode++) {
    if (mode == 0) fill(x, n, -6, 6, 1), fill(dy, n, -1, 1, 1);
    else fill_bits(x, n), fill_bits(dy, n);
    weft_ref_gelu_forward(y1, x, (int64_t)n);
    weft_cpu_tx_gelu_forward(K, pool, y2, x, (int64_t)n);
    same(mode ? "gelu forward (random bits)" : "gelu forward", y1, y2, n);
    weft_ref_gelu_backward(y1, x, dy, (int64_t)n);
    weft_cpu_tx_gelu_backward(K, pool, y2, x, dy, (int64_t)n);
    same(mode ? "gelu backward (random bits)" : "gelu backward", y1, y2, n);
  }
  /* AdamW: params, moments and grads random (then random bits), a few steps in a row */
  float *p1 = fbuf(n), *p2 = fbuf(n), *ma = fbuf(n), *mb = fbuf(n), *va = fbuf(n), *vb = fbuf(n);
  for (int mode = 0; mode < (fp32_mode ? 1 : 2); mode++) {
    if (mode == 0) {
      fill(p1, n, -1, 1, 1);
      fill(ma, n, -0.1f, 0.1f, 1);
      fill(va, n, 0, 0.01f, 1);
    } else {
      fill_bits(p1, n), fill_bits(ma, n), fill_bits(va, n);
    }
    memcpy(p2, p1, n * 4), memcpy(mb, ma, n * 4), memcpy(vb, va, n * 4);
    for (int t = 1; t <= 3; t++) {
      if (mode == 0) fill(dy, n, -1, 1, 1);
      else fill_bits(dy, n);
      const float bc1 = weft_ref_adamw_bias_correction(0.9f, t), bc2 = weft_ref_adamw_bias_correction(0.999f, t);
      weft_ref_adamw(p1, dy, ma, va, (int64_t)n, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2);
      weft_cpu_tx_adamw(K, pool, p2, dy, mb, vb, (int64_t)n, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2);
    }
    same(mode ? "adamw param (random bits)" : "adamw param", p1, p2, n);
    same(mode ? "adamw m (random bits)" : "adamw m", ma, mb, n);
    same(mode ? "adamw v (random bits)" : "adamw v", va, vb, n);
  }
  /* grad clip: two tensors, clipped and not */
  for (int clip = 0; clip < 2; clip++) {
    fill(y1, n, -1, 1, 0);
    fill(p1, 1000, -1, 1, 0);
    memcpy(y2, y1, n * 4), memcpy(p2, p1, 1000 * 4);
    float *ga[2] = {y1, p1}, *gb[2] = {y2, p2};
    const int64_t sizes[2] = {(int64_t)n, 1000};
    const float max_norm = clip ? 1.0f : 1e6f;
    const float na = weft_ref_grad_clip(ga, sizes, 2, max_norm);
    const float nb = weft_cpu_tx_grad_clip(K, pool, gb, sizes, 2, max_norm);
    same("grad clip norm", &na, &nb, 1);
    same("grad clip tensor 0", y1, y2, n);
    same("grad clip tensor 1", p1, p2, 1000);
  }
  free(x), free(dy), free(y1), free(y2), free(p1), free(p2), free(ma), free(mb), free(va), free(vb);
}

/* SUMSQ's chunk partials across threads and vector lanes, added in order: the reference's bits at sizes
 * around the chunk (4096) and the vector groups, from a zero and a nonzero accumulator, on plain data (the
 * chunk order shows in the bits) and on random bits (NaNs, infinities, subnormals). */
static void test_sumsq(weft_cpu_pool *pool) {
  static const int64_t sizes[] = {0, 1, 17, 4095, 4096, 4097, 3 * 4096 + 17, 37 * 4096 + 4000, 130 * 4096 + 3};
  const size_t most = 130 * 4096 + 3;
  float *x = malloc(most * sizeof(float));
  TU_CHECK(x != NULL, "sumsq buffer");
  if (!x) return;
  for (int mode = 0; mode < (fp32_mode ? 2 : 3); mode++)
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      const int64_t n = sizes[s];
      if (mode == 2) fill_bits(x, (size_t)n);
      else fill(x, (size_t)n, -3, 3, 0);
      const float acc0 = mode == 1 ? 0.0f : 1234.5f;
      const float want = weft_ref_sumsq(x, n, acc0), got = weft_cpu_tx_sumsq(K, pool, x, n, acc0);
      char what[96];
      snprintf(what, sizeof what, "sumsq n=%lld %s", (long long)n, mode == 2 ? "(random bits)" : "");
      same(what, &want, &got, 1);
    }
  free(x);
}

static void test_softmax(weft_cpu_pool *pool, int64_t R, int64_t T, int specials) {
  const size_t n = (size_t)(R * T * T);
  float *s = fbuf(n), *p1 = fbuf(n), *p2 = fbuf(n), *dp = fbuf(n), *d1 = fbuf(n), *d2 = fbuf(n);
  fill(s, n, -8, 8, specials);
  fill(dp, n, -1, 1, specials);
  weft_ref_causal_softmax_forward(p1, s, R, T, 0.125f);
  weft_cpu_tx_causal_softmax_forward(K, pool, p2, s, R, T, 0.125f);
  same("causal softmax forward", p1, p2, n);
  weft_ref_causal_softmax_backward(d1, p1, dp, R, T, 0.125f);
  weft_cpu_tx_causal_softmax_backward(K, pool, d2, p1, dp, R, T, 0.125f);
  same("causal softmax backward", d1, d2, n);
  free(s), free(p1), free(p2), free(dp), free(d1), free(d2);
}

static void test_attention(weft_cpu_pool *pool, int64_t B, int64_t T, int64_t C, int64_t NH, int specials) {
  const size_t nq = (size_t)(B * T * 3 * C), no = (size_t)(B * T * C), na = (size_t)(B * NH * T * T);
  float *qkv = fbuf(nq), *o1 = fbuf(no), *o2 = fbuf(no), *pa1 = fbuf(na), *pa2 = fbuf(na), *a1 = fbuf(na),
        *a2 = fbuf(na), *dout = fbuf(no), *dq1 = fbuf(nq), *dq2 = fbuf(nq);
  fill(qkv, nq, -2, 2, specials);
  fill(dout, no, -1, 1, specials);
  TU_STATUS(weft_ref_attention_forward(o1, pa1, a1, qkv, B, T, C, NH), WEFT_OK, "ref attention fwd");
  TU_STATUS(weft_cpu_tx_attention_forward(K, pool, o2, pa2, a2, qkv, B, T, C, NH), WEFT_OK, "attention fwd");
  same("attention forward out", o1, o2, no);
  same("attention forward preatt", pa1, pa2, na);
  same("attention forward att", a1, a2, na);
  TU_STATUS(weft_cpu_tx_attention_forward(K, pool, o2, NULL, a2, qkv, B, T, C, NH), WEFT_OK,
            "attention fwd, no preatt");
  same("attention forward out (no preatt)", o1, o2, no);
  TU_STATUS(weft_ref_attention_backward(dq1, dout, qkv, a1, B, T, C, NH), WEFT_OK, "ref attention bwd");
  TU_STATUS(weft_cpu_tx_attention_backward(K, pool, dq2, dout, qkv, a1, B, T, C, NH), WEFT_OK, "attention bwd");
  same("attention backward dqkv", dq1, dq2, nq);
  TU_STATUS(weft_cpu_tx_attention_forward(K, pool, o2, NULL, a2, qkv, B, T, C, 7), WEFT_ERR_SHAPE, "NH not dividing C");
  TU_STATUS(weft_cpu_tx_attention_backward(K, pool, dq2, dout, qkv, NULL, B, T, C, NH), WEFT_ERR_INVALID_ARGUMENT,
            "NULL att");
  free(qkv), free(o1), free(o2), free(pa1), free(pa2), free(a1), free(a2), free(dout), free(dq1), free(dq2);
}

static void test_crossentropy(weft_cpu_pool *pool, int64_t N, int64_t V, int nonpos) {
  const size_t n = (size_t)(N * V);
  float *z = fbuf(n), *l1 = fbuf((size_t)N), *l2 = fbuf((size_t)N), *dl = fbuf((size_t)N), *g1 = fbuf(n),
        *g2 = fbuf(n);
  int32_t *tg = malloc(sizeof(int32_t) * (size_t)N);
  if (!tg) exit(1);
  if (nonpos) {
    /* Every logit far below zero but two zeros of opposite signs, the first of either sign: the maximum is
     * a zero, which sends the vector row max to its scalar loop (the first zero is the scalar's maximum).
     * Every other exp underflows to 0. (Which zero is the maximum cannot reach these outputs: z - mx is
     * then a zero, and ls = log 2 > 0 is subtracted from it.) */
    for (size_t i = 0; i < n; i++) z[i] = tu_rng_float(&rng, -200, -110);
    for (int64_t r = 0; r < N; r++) {
      const int64_t p1 = tu_rng_int(&rng, 0, V - 2), p2 = tu_rng_int(&rng, p1 + 1, V - 1);
      z[(size_t)(r * V + p1)] = (r & 1) ? -0.0f : 0.0f;
      z[(size_t)(r * V + p2)] = (r & 1) ? 0.0f : -0.0f;
    }
  } else {
    fill(z, n, -10, 10, 1);
  }
  for (int64_t r = 0; r < N; r++) tg[r] = (int32_t)tu_rng_int(&rng, 0, V - 1), dl[r] = special_or(-1, 1, 0);
  if (nonpos)
    for (int64_t r = 0; r < N; r++) /* the target on a zero: the loss's sign of zero depends on the max's */
      for (int64_t j = 0; j < V; j++)
        if (z[(size_t)(r * V + j)] == 0.0f) tg[r] = (int32_t)j;
  TU_STATUS(weft_ref_crossentropy_forward(l1, z, tg, N, V), WEFT_OK, "ref xent fwd");
  TU_STATUS(weft_cpu_tx_crossentropy_forward(K, pool, l2, z, tg, N, V), WEFT_OK, "xent fwd");
  same("crossentropy forward", l1, l2, (size_t)N);
  TU_STATUS(weft_ref_crossentropy_backward(g1, z, tg, dl, N, V), WEFT_OK, "ref xent bwd");
  TU_STATUS(weft_cpu_tx_crossentropy_backward(K, pool, g2, z, tg, dl, N, V), WEFT_OK, "xent bwd");
  same("crossentropy backward", g1, g2, n);
  tg[0] = (int32_t)V;
  TU_STATUS(weft_cpu_tx_crossentropy_forward(K, pool, l2, z, tg, N, V), WEFT_ERR_INVALID_ARGUMENT,
            "target out of range");
  TU_STATUS(weft_cpu_tx_crossentropy_backward(K, pool, g2, z, tg, dl, N, 0), WEFT_ERR_SHAPE, "V = 0");
  free(z), free(l1), free(l2), free(dl), free(g1), free(g2), free(tg);
}

/* The matmul's skinny kernels (gemm.c's m <= 4 case): c = a . B and c += a . B (MATMUL_ACC), B stored [n, k]
 * (nt) or [k, n] (nn), against the canonical loop (acc = acc + a*b, k ascending from +0 or from c; this file
 * is built without contraction), with specials in exact mode; ragged n and k so every tail runs. */
static void test_gemv(void) {
  const weft_cpu_tx_kernels *k = K ? K : weft_cpu_tx_select();
  static const int64_t shapes[][3] = {{1, 1, 1}, {1, 37, 29}, {2, 64, 48}, {3, 100, 771}, {4, 33, 17}, {5, 768, 130},
                                      {1, 4099, 7}};
  for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
    const int64_t m = shapes[sh][0], kk = shapes[sh][1], n = shapes[sh][2];
    float *a = fbuf((size_t)(m * kk)), *b = fbuf((size_t)(kk * n));
    float *c1 = fbuf((size_t)(m * n)), *c2 = fbuf((size_t)(m * n));
    fill(a, (size_t)(m * kk), -1, 1, 1);
    fill(b, (size_t)(kk * n), -1, 1, 1);
    for (int form = 0; form < 4; form++) {
      const int nt = form & 1, from_c = form >> 1; /* from_c: MATMUL_ACC, the sums start from c's values */
      for (size_t e = 0; e < (size_t)(m * n); e++) c2[e] = c1[e] = from_c ? special_or(-1, 1, 1) : 0.0f;
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          float acc = from_c ? c1[i * n + j] : 0.0f;
          for (int64_t q = 0; q < kk; q++) {
            const float pr = a[i * kk + q] * (nt ? b[j * kk + q] : b[q * n + j]);
            acc = acc + pr;
          }
          c1[i * n + j] = acc != acc ? tu_float(0x7fc00000u) : acc;
        }
      if (nt) k->gemv_nt(c2, n, a, m, b, kk, n, kk, from_c);
      else k->gemv_nn(c2, n, a, m, b, n, n, kk, from_c);
      char what[96];
      snprintf(what, sizeof what, "gemv_%s%s m=%lld k=%lld n=%lld", nt ? "nt" : "nn", from_c ? " (c +=)" : "",
               (long long)m, (long long)kk, (long long)n);
      same(what, c1, c2, (size_t)(m * n));
    }
    free(a), free(b), free(c1), free(c2);
  }
}

/* Every op of one kernel table, on one pool. */
static void test_all(weft_cpu_pool *pool) {
  test_embedding(pool, 3, 37);
  test_embedding(pool, 4, 400);
  test_layernorm(pool, 4 * 64, 768);
  test_layernorm(pool, 13, 67);
  test_layernorm(pool, 21, 100);
  test_layernorm(pool, 200, 37); /* fp32: more than one fused block of rows */
  test_elementwise(pool);
  test_sumsq(pool);
  test_softmax(pool, 6, 64, 1);
  test_softmax(pool, 3, 37, 0);
  test_attention(pool, 2, 64, 768, 12, 0);
  test_attention(pool, 2, 37, 96, 4, 1);
  test_attention(pool, 1, 9, 20, 2, 1);
  test_crossentropy(pool, 19, 50257, 0);
  test_crossentropy(pool, 11, 1000, 1);
  test_gemv();
}

int main(void) {
  const double start = tu_now();
  const char *isas[3] = {"portable", "avx2", "avx512"};
  const int threads[4] = {1, 2, 3, 8};
  for (int ii = 0; ii < 3; ii++) {
    setenv("WEFT_CPU_ISA", isas[ii], 1);
    cur_isa = weft_cpu_tx_select()->isa;
    if (strcmp(cur_isa, isas[ii]) != 0) {
      printf("isa %s: not on this CPU, not tested\n", isas[ii]);
      continue;
    }
    for (int ti = 0; ti < 4; ti++) {
      cur_threads = threads[ti];
      weft_cpu_pool *pool = NULL;
      weft_cpu_pool_create(cur_threads, &pool);
      TU_CHECK(pool != NULL, "pool of %d threads", cur_threads);
      if (!pool) continue;
      rng.s = tu_seed() + (uint64_t)ti;
      printf("isa %s, %d threads\n", cur_isa, weft_cpu_pool_threads(pool));
      K = NULL, fp32_mode = 0;
      test_all(pool);
      if (ti == 0 || ti == 2) { /* the fp32 tables: against the reference within a tolerance */
        K = weft_cpu_tx_select_for(WEFT_CONTRACT_FP32), fp32_mode = 1;
        printf("isa %s fp32, %d threads\n", cur_isa, weft_cpu_pool_threads(pool));
        test_all(pool);
        K = NULL, fp32_mode = 0;
      }
      weft_cpu_pool_destroy(pool);
    }
  }
  unsetenv("WEFT_CPU_ISA");
  return tu_finish("cpu_tx", start);
}
