/* test_cuda.c - the CUDA lanes, through the public API.
 *
 * Without a usable NVIDIA GPU: checks that weft lists the CUDA lanes as absent with a reason a person can act
 * on, prints that reason and exits 77 (CTest: Skipped). With one:
 *  1. tensor lane (cuda:0.tensor), tf32 and bf16, against a float64 reference. The bound per element, with
 *     S = sum_k |a_ik b_kj| and k terms:
 *       tf32: |c - ref| <= (2^-9 + 2^-20 + k 2^-23) S   inputs lose 13 of fp32's 23 fraction bits (rounded or
 *             truncated: relative error <= 2^-10 each, so 2^-9 + 2^-20 per product), fp32 accumulation in
 *             any order adds at most k u S with u = 2^-24, doubled for safety;
 *       bf16: |c - ref| <= (2^-7 + 2^-16 + k 2^-23) S   inputs rounded to nearest bf16 (8 significant bits,
 *             relative error <= 2^-8 each), the same fp32 accumulation.
 *     and, on a large random case, that the error is well above what fp32 inputs would give: the inputs were
 *     really rounded, so the work really ran on the tensor path and was not quietly done in fp32. The bf16
 *     copies the lane keeps of its inputs must follow every change of those inputs.
 *  2. cuda:0 exact: large and odd-shaped matmuls (every transpose form, batches, k not a multiple of 4, NaN
 *     and infinity) bit for bit against the CPU lane; the conformance suite covers the rest of the op set.
 *  3. results streamed back while later row blocks compute: right bits, and right after the result is
 *     overwritten on the lane or its inputs change.
 *  4. scopes: a step of many ops, repeated (recorded, then replayed as a graph), with host writes, reads and
 *     tensors replaced in the middle, bit for bit against the same steps on the CPU lane.
 *  5. out of device memory (the device filled by this test through the driver): WEFT_ERR_OUT_OF_MEMORY, the
 *     lane stays in the fabric and works once memory is free again. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tutil.h"
#include "weft.h"

static tu_rng rng;
static int cpu, cu, cut; /* lane indices */

static weft_tensor *tensor(weft_fabric *f, int ndim, const int64_t *dims, const float *data) {
  weft_tensor *t = NULL;
  weft_status st = weft_tensor_create(f, ndim, dims, data, &t);
  TU_CHECK(st == WEFT_OK, "tensor_create: %s", weft_fabric_last_error(f));
  return t;
}

static float *random_floats(size_t n, float lo, float hi) {
  float *p = malloc(n * sizeof *p + 4);
  for (size_t i = 0; i < n; i++) p[i] = tu_rng_float(&rng, lo, hi);
  return p;
}

static float *read_all(weft_tensor *t) {
  size_t n = weft_tensor_numel(t);
  float *p = malloc(n * sizeof *p + 4);
  weft_status st = weft_tensor_read(t, p, n);
  TU_CHECK(st == WEFT_OK, "tensor_read: %s", weft_status_str(st));
  return p;
}

/* A matmul problem: a [batch,m,k] (or [batch,k,m]), b [k,n] / [n,k] or batched, c [batch,m,n]. */
typedef struct mm {
  int64_t batch, m, n, k;
  int ta, tb, bb;
} mm;

static void mm_dims(const mm *p, int64_t *da, int64_t *db, int64_t *dc, int *nd, int *ndb) {
  *nd = p->batch > 1 || p->bb ? 3 : 2;
  int o = *nd - 2;
  if (o) da[0] = dc[0] = p->batch;
  da[o] = p->ta ? p->k : p->m, da[o + 1] = p->ta ? p->m : p->k;
  dc[o] = p->m, dc[o + 1] = p->n;
  *ndb = p->bb ? 3 : 2;
  if (p->bb) db[0] = p->batch;
  db[*ndb - 2] = p->tb ? p->n : p->k, db[*ndb - 1] = p->tb ? p->k : p->n;
}

static double A_at(const mm *p, const float *a, int64_t q, int64_t i, int64_t kk) {
  return p->ta ? a[(q * p->k + kk) * p->m + i] : a[(q * p->m + i) * p->k + kk];
}
static double B_at(const mm *p, const float *b, int64_t q, int64_t kk, int64_t j) {
  int64_t base = p->bb ? q * p->k * p->n : 0;
  return p->tb ? b[base + j * p->k + kk] : b[base + kk * p->n + j];
}

/* Runs c = a.b pinned to `lane` under `contract` and returns c (malloc'd). */
static float *run_mm(weft_fabric *f, const mm *p, const float *a, const float *b, int lane, weft_contract contract) {
  int64_t da[3], db[3], dc[3];
  int nd, ndb;
  mm_dims(p, da, db, dc, &nd, &ndb);
  weft_tensor *A = tensor(f, nd, da, a), *B = tensor(f, ndb, db, b), *C = tensor(f, nd, dc, NULL);
  weft_op_desc d = {contract, lane};
  weft_status st = weft_op_matmul(f, &d, A, p->ta, B, p->tb, C);
  TU_CHECK(st == WEFT_OK, "matmul %s on lane %d: %s", weft_contract_str(contract), lane, weft_fabric_last_error(f));
  float *c = read_all(C);
  weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(C);
  return c;
}

/* Checks c against float64 with bound (rel + k*acc_u) * S per element; returns the largest |err|/S seen. */
static double check_bound(const mm *p, const float *a, const float *b, const float *c, double rel, double acc_u,
                          const char *what) {
  double worst = 0;
  long bad = 0;
  for (int64_t q = 0; q < p->batch; q++)
    for (int64_t i = 0; i < p->m; i++)
      for (int64_t j = 0; j < p->n; j++) {
        double ref = 0, s = 0;
        for (int64_t kk = 0; kk < p->k; kk++) {
          double x = A_at(p, a, q, i, kk), y = B_at(p, b, q, kk, j);
          ref += x * y;
          s += fabs(x * y);
        }
        double got = c[(q * p->m + i) * p->n + j];
        double err = fabs(got - ref);
        double bound = (rel + (double)p->k * acc_u) * s + 1e-37;
        if (s > 0 && err / s > worst) worst = err / s;
        if (!(err <= bound) && bad++ < 3)
          TU_CHECK(0, "%s [%lld,%lld,%lld] m=%lld n=%lld k=%lld ta=%d tb=%d: got %.9g, float64 %.12g, |err| %.3g > %.3g",
                   what, (long long)q, (long long)i, (long long)j, (long long)p->m, (long long)p->n, (long long)p->k,
                   p->ta, p->tb, got, ref, err, bound);
      }
  TU_CHECK(bad == 0, "%s: %ld elements outside the bound", what, bad);
  return worst;
}

static void test_tensor_lane(weft_fabric *f) {
  if (cut < 0) {
    printf("cuda:0.tensor is absent: tf32/bf16 tests skipped\n");
    return;
  }
  static const mm cases[] = {
      {1, 1, 1, 1, 0, 0, 0},      {1, 7, 5, 3, 0, 0, 0},     {1, 128, 128, 128, 0, 0, 0}, {1, 257, 129, 65, 0, 0, 0},
      {1, 65, 33, 100, 1, 0, 0},  {1, 65, 33, 100, 0, 1, 0}, {1, 31, 47, 77, 1, 1, 0},    {3, 33, 9, 17, 0, 0, 0},
      {2, 16, 8, 24, 0, 0, 1},    {2, 16, 8, 24, 1, 1, 1},   {4, 100, 130, 257, 0, 0, 0},
  };
  const double tf32_rel = 1.0 / 512 + 1.0 / 1048576, bf16_rel = 1.0 / 128 + 1.0 / 65536, acc = 1.0 / 8388608;
  for (int contract = WEFT_CONTRACT_TF32; contract <= WEFT_CONTRACT_BF16; contract++) {
    double rel = contract == WEFT_CONTRACT_TF32 ? tf32_rel : bf16_rel;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      const mm *p = &cases[i];
      size_t na = (size_t)(p->batch * p->m * p->k), nb = (size_t)((p->bb ? p->batch : 1) * p->k * p->n);
      float *a = random_floats(na, -1, 1), *b = random_floats(nb, -2, 2);
      float *c = run_mm(f, p, a, b, cut, (weft_contract)contract);
      char what[64];
      snprintf(what, sizeof what, "cuda:0.tensor %s", weft_contract_str((weft_contract)contract));
      check_bound(p, a, b, c, rel, acc, what);
      free(a), free(b), free(c);
    }
    /* the inputs were rounded: the largest error is far above fp32's (about 2^-20 of S here) */
    mm big = {1, 256, 256, 256, 0, 0, 0};
    float *a = random_floats(256 * 256, -1, 1), *b = random_floats(256 * 256, -1, 1);
    float *c = run_mm(f, &big, a, b, cut, (weft_contract)contract);
    double worst = check_bound(&big, a, b, c, rel, acc, "tensor 256^3");
    double floor = contract == WEFT_CONTRACT_TF32 ? 1.0 / 131072 : 1.0 / 16384;
    TU_CHECK(worst > floor, "%s: largest error %.3g of S is what fp32 inputs give; the tensor path did not round",
             weft_contract_str((weft_contract)contract), worst);
    printf("cuda:0.tensor %s: largest |err| / sum|ab| = %.3g (bound %.3g)\n", weft_contract_str((weft_contract)contract),
           worst, rel + 256 * acc);
    free(a), free(b), free(c);
  }
  /* A NaN input reaches its row and column of the result. */
  {
    mm p = {1, 4, 4, 4, 0, 0, 0};
    float a[16], b[16];
    for (int i = 0; i < 16; i++) a[i] = b[i] = 0.5f;
    a[1 * 4 + 2] = NAN;
    float *c = run_mm(f, &p, a, b, cut, WEFT_CONTRACT_BF16);
    TU_CHECK(isnan(c[1 * 4 + 0]) && isnan(c[1 * 4 + 3]) && c[0] == 1.0f, "bf16: NaN in a[1,2] gives c row 1 %g %g, c[0] %g",
             c[4], c[7], c[0]);
    free(c);
  }
  /* The bf16 copies of the inputs follow the inputs: a host write, and an input that an op rewrote. */
  {
    int64_t d2[2] = {96, 96};
    float *a = random_floats(96 * 96, -1, 1), *b = random_floats(96 * 96, -1, 1), *a2 = random_floats(96 * 96, -1, 1);
    weft_tensor *A = tensor(f, 2, d2, a), *B = tensor(f, 2, d2, b), *C = tensor(f, 2, d2, NULL), *D = tensor(f, 2, d2, NULL);
    weft_op_desc bf = {WEFT_CONTRACT_BF16, cut}, tf = {WEFT_CONTRACT_TF32, cut};
    mm p = {1, 96, 96, 96, 0, 0, 0};
    for (int round = 0; round < 2; round++) {
      TU_CHECK(weft_op_matmul(f, &bf, A, 0, B, 0, D) == WEFT_OK, "bf16 matmul: %s", weft_fabric_last_error(f));
      float *got = read_all(D);
      check_bound(&p, round ? a2 : a, b, got, bf16_rel, acc, round ? "bf16 after a host write" : "bf16");
      free(got);
      weft_tensor_write(A, a2, 96 * 96);
    }
    for (int round = 0; round < 2; round++) { /* C is rewritten by a tf32 op, then read by a bf16 op */
      TU_CHECK(weft_op_matmul(f, &tf, round ? A : B, 0, B, 0, C) == WEFT_OK, "tf32 matmul: %s", weft_fabric_last_error(f));
      TU_CHECK(weft_op_matmul(f, &bf, C, 0, B, 0, D) == WEFT_OK, "bf16 matmul: %s", weft_fabric_last_error(f));
      float *cv = read_all(C), *got = read_all(D);
      check_bound(&p, cv, b, got, bf16_rel, acc, round ? "bf16 of a rewritten input" : "bf16 of an op's output");
      free(cv), free(got);
    }
    weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(C), weft_tensor_destroy(D);
    free(a), free(b), free(a2);
  }
  /* The tensor lane runs matmul only, and only under tf32 and bf16. */
  {
    int64_t d1[1] = {8};
    weft_tensor *x = tensor(f, 1, d1, NULL);
    weft_op_desc tf = {WEFT_CONTRACT_TF32, cut}, ex = {WEFT_CONTRACT_EXACT, cut};
    TU_STATUS(weft_op_relu(f, &tf, x, x), WEFT_ERR_UNSUPPORTED, "relu pinned to cuda:0.tensor");
    TU_CHECK(tu_contains(weft_fabric_last_error(f), "matmul only"), "message: %s", weft_fabric_last_error(f));
    mm p = {1, 8, 8, 8, 0, 0, 0};
    int64_t da[3], db[3], dc[3];
    int nd, ndb;
    mm_dims(&p, da, db, dc, &nd, &ndb);
    weft_tensor *A = tensor(f, 2, da, NULL), *B = tensor(f, 2, db, NULL), *C = tensor(f, 2, dc, NULL);
    TU_STATUS(weft_op_matmul(f, &ex, A, 0, B, 0, C), WEFT_ERR_UNSUPPORTED, "exact matmul pinned to cuda:0.tensor");
    weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(C), weft_tensor_destroy(x);
  }
}

static void fill_specials(float *p, size_t n) {
  /* a few infinities and NaNs among ordinary values, and some exact zeros of both signs */
  for (size_t i = 0; i < n; i += 97) p[i] = (i / 97) % 3 == 0 ? INFINITY : (i / 97) % 3 == 1 ? -0.0f : 0.0f;
  if (n > 50) p[50] = NAN;
}

static void test_exact_large(weft_fabric *f) {
  static const mm cases[] = {
      {1, 517, 389, 1031, 0, 0, 0}, {1, 1024, 1024, 1024, 0, 0, 0}, {1, 2048, 1536, 256, 0, 0, 0},
      {1, 300, 200, 129, 1, 0, 0},  {1, 300, 200, 129, 0, 1, 0},    {1, 300, 200, 129, 1, 1, 0},
      {4, 100, 130, 257, 0, 0, 0},  {3, 65, 66, 33, 0, 0, 1},       {3, 65, 66, 33, 1, 1, 1},
      {2, 640, 512, 96, 1, 0, 0},   {1, 1, 4099, 7, 0, 0, 0},       {1, 4099, 1, 5, 0, 1, 0},
      /* with the ones above, every tile shape of cuda_mm_tiles.h on 132 SMs (an H200): 128x128, 64x64 at 8x8
       * (c = 768x3072 as a weight gradient, a transposed), 64x64 at 4x4, 32x32 */
      {1, 2048, 2048, 72, 1, 1, 0}, {1, 768, 3072, 200, 1, 0, 0},  {1, 1536, 1536, 40, 0, 1, 0},
  };
  for (int contract = WEFT_CONTRACT_EXACT; contract <= WEFT_CONTRACT_FP32; contract++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      const mm *p = &cases[i];
      size_t na = (size_t)(p->batch * p->m * p->k), nb = (size_t)((p->bb ? p->batch : 1) * p->k * p->n);
      float *a = random_floats(na, -1, 1), *b = random_floats(nb, -1, 1);
      if (i == 0) fill_specials(a, na);
      float *got = run_mm(f, p, a, b, cu, (weft_contract)contract);
      if (contract == WEFT_CONTRACT_EXACT) {
        float *want = run_mm(f, p, a, b, cpu, WEFT_CONTRACT_EXACT);
        size_t nc = (size_t)(p->batch * p->m * p->n), diff = 0, first = 0;
        for (size_t e = 0; e < nc; e++)
          if (!tu_same_bits(got[e], want[e]) && diff++ == 0) first = e;
        TU_CHECK(diff == 0,
                 "exact matmul batch=%lld m=%lld n=%lld k=%lld ta=%d tb=%d bb=%d: %zu of %zu elements differ from the "
                 "CPU lane (first at %zu: 0x%08x vs 0x%08x)",
                 (long long)p->batch, (long long)p->m, (long long)p->n, (long long)p->k, p->ta, p->tb, p->bb, diff, nc,
                 first, diff ? tu_bits(got[first]) : 0, diff ? tu_bits(want[first]) : 0);
        free(want);
      } else if (i != 0) {
        check_bound(p, a, b, got, 0, 2.0 / 16777216, "cuda:0 fp32");
      }
      free(a), free(b), free(got);
    }
}

/* Compares a tensor's value with the CPU lane's copy of the same computation. */
static void same_as(weft_tensor *got_t, weft_tensor *want_t, const char *what) {
  float *got = read_all(got_t), *want = read_all(want_t);
  size_t n = weft_tensor_numel(got_t), diff = 0;
  for (size_t e = 0; e < n; e++) diff += !tu_same_bits(got[e], want[e]);
  TU_CHECK(diff == 0, "%s: %zu of %zu elements differ from the CPU lane", what, diff, n);
  free(got), free(want);
}

static void test_stream_back(weft_fabric *f) {
  /* 2560 x 4096 output: several row blocks streamed back on this GPU; 1024^2: one */
  static const int64_t shapes[][3] = {{2560, 4096, 64}, {1024, 1024, 96}};
  for (int s = 0; s < 2; s++) {
    int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
    int64_t da[2] = {m, k}, db[2] = {k, n}, dc[2] = {m, n};
    float *a = random_floats((size_t)(m * k), -1, 1), *b = random_floats((size_t)(k * n), -1, 1);
    weft_tensor *A = tensor(f, 2, da, a), *B = tensor(f, 2, db, b);
    weft_tensor *C = tensor(f, 2, dc, NULL), *Cc = tensor(f, 2, dc, NULL);
    weft_op_desc g = {WEFT_CONTRACT_EXACT, cu}, h = {WEFT_CONTRACT_EXACT, cpu};
    for (int round = 0; round < 3; round++) {
      TU_CHECK(weft_op_matmul(f, &g, A, 0, B, 0, C) == WEFT_OK, "matmul: %s", weft_fabric_last_error(f));
      TU_CHECK(weft_op_matmul(f, &h, A, 0, B, 0, Cc) == WEFT_OK, "cpu matmul: %s", weft_fabric_last_error(f));
      if (round == 1) { /* overwritten on the lane before the read: the streamed copy is stale */
        TU_CHECK(weft_op_scale(f, &g, 0.5f, C, C) == WEFT_OK, "scale: %s", weft_fabric_last_error(f));
        TU_CHECK(weft_op_scale(f, &h, 0.5f, Cc, Cc) == WEFT_OK, "cpu scale: %s", weft_fabric_last_error(f));
      }
      same_as(C, Cc, round == 0 ? "streamed-back matmul" : round == 1 ? "matmul then scale on the lane"
                                                                      : "streamed-back matmul after a host write");
      /* new inputs from the host, both of them: the next matmul streams its result back again */
      for (size_t e = 0; e < (size_t)(m * k); e += 7) a[e] = -a[e];
      weft_tensor_write(A, a, (size_t)(m * k));
      weft_tensor_write(B, b, (size_t)(k * n));
    }
    weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(C), weft_tensor_destroy(Cc);
    free(a), free(b);
  }
}

/* One training-like step on `lane`: h = relu(x.w + bias); loss/grad of softmax_xent; gw = x^T.grad;
 * w = w - 0.1 gw (axpy); gb = sum_rows(grad); bias = bias - 0.1 gb. */
typedef struct step {
  weft_tensor *x, *w, *bias, *t, *h, *loss, *grad, *gw, *gb;
} step;

static void step_make(weft_fabric *f, step *s, const float *x, const float *w, const float *bias, const float *t) {
  int64_t dx[2] = {64, 48}, dw[2] = {48, 40}, db[1] = {40}, dh[2] = {64, 40}, dl[1] = {1};
  s->x = tensor(f, 2, dx, x), s->w = tensor(f, 2, dw, w), s->bias = tensor(f, 1, db, bias), s->t = tensor(f, 2, dh, t);
  s->h = tensor(f, 2, dh, NULL), s->loss = tensor(f, 1, dl, NULL), s->grad = tensor(f, 2, dh, NULL);
  s->gw = tensor(f, 2, dw, NULL), s->gb = tensor(f, 1, db, NULL);
}

static void step_run(weft_fabric *f, step *s, int lane) {
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
  weft_status st = weft_op_matmul(f, &d, s->x, 0, s->w, 0, s->h);
  if (st == WEFT_OK) st = weft_op_add(f, &d, s->h, s->bias, s->h);
  if (st == WEFT_OK) st = weft_op_relu(f, &d, s->h, s->h);
  if (st == WEFT_OK) st = weft_op_softmax_xent(f, &d, s->h, s->t, s->loss, s->grad);
  if (st == WEFT_OK) st = weft_op_relu_backward(f, &d, s->grad, s->h, s->grad);
  if (st == WEFT_OK) st = weft_op_matmul(f, &d, s->x, 1, s->grad, 0, s->gw);
  if (st == WEFT_OK) st = weft_op_axpy(f, &d, -0.1f, s->gw, s->w);
  if (st == WEFT_OK) st = weft_op_sum_rows(f, &d, s->grad, s->gb);
  if (st == WEFT_OK) st = weft_op_scale(f, &d, 0.9f, s->gb, s->gb);
  if (st == WEFT_OK) st = weft_op_axpy(f, &d, -0.1f, s->gb, s->bias);
  TU_CHECK(st == WEFT_OK, "step on lane %d: %s", lane, weft_fabric_last_error(f));
}

static void step_free(step *s) {
  weft_tensor **p = &s->x;
  for (int i = 0; i < 9; i++) weft_tensor_destroy(p[i]);
}

static void test_scopes(weft_fabric *f) {
  float *x = random_floats(64 * 48, -1, 1), *w = random_floats(48 * 40, -0.3f, 0.3f), *bias = random_floats(40, -0.1f, 0.1f);
  float *t = calloc(64 * 40, sizeof *t);
  for (int i = 0; i < 64; i++) t[i * 40 + i % 40] = 1.0f;
  step g, c;
  step_make(f, &g, x, w, bias, t);
  step_make(f, &c, x, w, bias, t);
  for (int it = 0; it < 8; it++) {
    TU_CHECK(weft_scope_begin(f) == WEFT_OK, "scope_begin: %s", weft_fabric_last_error(f));
    step_run(f, &g, cu);
    if (it == 4) { /* a read inside the scope sees the recorded work done */
      float l1, l2;
      weft_tensor_read(g.loss, &l1, 1);
      step_run(f, &c, cpu);
      weft_tensor_read(c.loss, &l2, 1);
      TU_CHECK(tu_same_bits(l1, l2), "loss read inside a scope: %.9g vs the CPU lane's %.9g", l1, l2);
    } else {
      step_run(f, &c, cpu);
    }
    if (it == 5) { /* a host write in the middle of recorded work */
      for (int e = 0; e < 64 * 48; e += 5) x[e] = -x[e];
      weft_tensor_write(g.x, x, 64 * 48);
      weft_tensor_write(c.x, x, 64 * 48);
      step_run(f, &g, cu);
      step_run(f, &c, cpu);
    }
    TU_CHECK(weft_scope_end(f) == WEFT_OK, "scope_end: %s", weft_fabric_last_error(f));
    char what[64];
    snprintf(what, sizeof what, "scope step %d: w", it);
    same_as(g.w, c.w, what);
    snprintf(what, sizeof what, "scope step %d: bias", it);
    same_as(g.bias, c.bias, what);
    snprintf(what, sizeof what, "scope step %d: loss", it);
    same_as(g.loss, c.loss, what);
    if (it == 6) { /* new tensors (new device memory) in a replayed sequence */
      float *wv = read_all(g.w);
      weft_tensor_destroy(g.w);
      int64_t dw[2] = {48, 40};
      g.w = tensor(f, 2, dw, wv);
      free(wv);
    }
  }
  step_free(&g), step_free(&c);
  free(x), free(w), free(bias), free(t);
}

/* The driver, opened by the test itself, to fill the device's memory. */
typedef int (*cu_i_u)(unsigned);
typedef int (*cu_dev_get)(int *, int);
typedef int (*cu_ctx_retain)(void **, int);
typedef int (*cu_ctx_set)(void *);
typedef int (*cu_alloc)(unsigned long long *, size_t);
typedef int (*cu_free)(unsigned long long);

static void test_out_of_memory(weft_fabric *f) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;
  cu_i_u init = (cu_i_u)dlsym(lib, "cuInit");
  cu_dev_get dget = (cu_dev_get)dlsym(lib, "cuDeviceGet");
  cu_ctx_retain retain = (cu_ctx_retain)dlsym(lib, "cuDevicePrimaryCtxRetain");
  cu_ctx_set set = (cu_ctx_set)dlsym(lib, "cuCtxSetCurrent");
  cu_alloc alloc = (cu_alloc)dlsym(lib, "cuMemAlloc_v2");
  cu_free mfree = (cu_free)dlsym(lib, "cuMemFree_v2");
  int dev;
  void *ctx;
  if (!init || !dget || !retain || !set || !alloc || !mfree || init(0) || dget(&dev, 0) || retain(&ctx, dev) ||
      set(ctx)) {
    TU_CHECK(0, "could not open the driver to fill device memory");
    return;
  }
  int64_t dx[2] = {1024, 1024};
  float *x = random_floats(1024 * 1024, -1, 1);
  weft_tensor *X = NULL, *Y = NULL, *kept[24];
  int nkept = 0;
  /* Take everything (1 GiB pieces, then smaller ones) and run the op on fresh tensors. The lane keeps
   * freed allocations for reuse, and frees them all when an allocation fails, so the first tries may
   * still find room: each one that does uses some up, and the device is full within a few. */
  static unsigned long long held[4096];
  int nheld = 0, tries = 0;
  weft_op_desc d = {WEFT_CONTRACT_EXACT, cu};
  weft_status st = WEFT_OK;
  for (; tries < 12 && st == WEFT_OK; tries++) {
    for (size_t piece = (size_t)1 << 30; piece >= ((size_t)2 << 20); piece /= 4)
      while (nheld < 4096 && alloc(&held[nheld], piece) == 0) nheld++;
    X = tensor(f, 2, dx, x), Y = tensor(f, 2, dx, NULL);
    st = weft_op_relu(f, &d, X, Y);
    if (st == WEFT_OK) kept[nkept++] = X, kept[nkept++] = Y; /* holding what it took */
  }
  printf("filled device memory with %d allocations; out of memory at try %d\n", nheld, tries);
  TU_STATUS(st, WEFT_ERR_OUT_OF_MEMORY, "relu on cuda:0 with the device full");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "out of device memory"), "message: %s", weft_fabric_last_error(f));
  weft_lane_info info;
  weft_fabric_lane_info(f, (size_t)cu, &info);
  TU_CHECK(!info.failed, "out of memory must not take the lane out of the fabric");
  for (int i = 0; i < nheld; i++) mfree(held[i]);
  st = weft_op_relu(f, &d, X, Y);
  TU_CHECK(st == WEFT_OK, "relu once memory is free again: %s", weft_fabric_last_error(f));
  float *y = read_all(Y);
  size_t bad = 0;
  for (size_t e = 0; e < 1024 * 1024; e++) bad += !tu_same_bits(y[e], x[e] > 0 ? x[e] : 0.0f);
  TU_CHECK(bad == 0, "relu after out of memory: %zu wrong elements", bad);
  free(y), free(x);
  weft_tensor_destroy(X), weft_tensor_destroy(Y);
  for (int i = 0; i < nkept; i++) weft_tensor_destroy(kept[i]);
}

int main(void) {
  double start = tu_now();
  rng.s = tu_seed();
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.calibration = WEFT_CALIBRATION_OFF;
  desc.lanes = "cpu,cuda";
  weft_fabric *f = NULL;
  weft_status st = weft_fabric_open(&desc, &f);
  TU_CHECK(st == WEFT_OK, "open: %s", weft_open_error());
  if (!f) return tu_finish("cuda", start);
  size_t idx;
  cpu = cu = cut = -1;
  if (weft_fabric_lane_find(f, "cpu", &idx) == WEFT_OK) cpu = (int)idx;
  if (weft_fabric_lane_find(f, "cuda:0", &idx) == WEFT_OK) cu = (int)idx;
  if (weft_fabric_lane_find(f, "cuda:0.tensor", &idx) == WEFT_OK) cut = (int)idx;
  if (cu < 0) {
    /* No GPU here: weft must say why, in words a person can act on. */
    int said = 0;
    for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
      const char *name, *why;
      weft_fabric_absent_info(f, i, &name, &why);
      if (strncmp(name, "cuda", 4) == 0) {
        said = why && strlen(why) > 10;
        tu_skip("%s is absent: %s", name, why); /* exits 77: CTest says Skipped */
      }
    }
    TU_CHECK(said, "the CUDA lanes are missing from the fabric and from its absent list");
    weft_fabric_close(f);
    return tu_finish("cuda", start);
  }
  weft_lane_info info;
  weft_fabric_lane_info(f, (size_t)cu, &info);
  printf("cuda:0: %s | %s | %s\n", info.device, info.driver, info.details);
  /* with cuBLAS (which the tensor lane's presence shows) cuda:0's matmuls honour tf32 and bf16 as well */
  const int have_tensor = cut >= 0;
  const weft_contract_mask tc = WEFT_CONTRACT_BIT(WEFT_CONTRACT_TF32) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_BF16);
  TU_CHECK(info.contracts == (WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32) |
                              (have_tensor ? tc : 0)),
           "cuda:0 honours exact and fp32%s (contracts 0x%x)", have_tensor ? ", tf32 and bf16" : "", info.contracts);
  if (cut >= 0) {
    weft_fabric_lane_info(f, (size_t)cut, &info);
    TU_CHECK(info.contracts == (WEFT_CONTRACT_BIT(WEFT_CONTRACT_TF32) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_BF16)),
             "cuda:0.tensor honours tf32 and bf16 only (contracts 0x%x)", info.contracts);
  }
  test_tensor_lane(f);
  test_exact_large(f);
  test_stream_back(f);
  test_scopes(f);
  test_out_of_memory(f);
  weft_fabric_close(f);
  return tu_finish("cuda", start);
}
