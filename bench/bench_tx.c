/* bench_tx.c - the CPU lane's transformer ops through the public API (weft_op_* pinned to the cpu lane, on
 * tensors resident there; each timed call is followed by weft_fabric_sync, so the figure includes the op
 * table's validation, routing, the host queue and the lane's dispatch) at GPT-2 small's shapes: B = 4,
 * C = 768, 12 heads, V = 50257, T given on the command line (default 64 256 1024). Prints one line per op and
 * T: "op T milliseconds" (the best of several runs), for compare_tx.sh to set beside PyTorch's figures from
 * bench_tx_torch.py, measured in the same run. Threads: WEFT_BENCH_THREADS, else every CPU. Contract:
 * WEFT_BENCH_CONTRACT=fp32, else exact (the CPU lane runs the same kernels under both).
 * The op set: embedding, layernorm, gelu, attention (fused, writing att, not preatt), causal softmax (unfused), cross-entropy,
 * each forward and backward, and AdamW over the B*T*C*4 parameters of a sizeable layer; and one decode step
 * (batch 1, a cache of T): the fused attention over the cache beside attention_cached of its last row, with
 * their ratio (attention_decode_ratio: fused ms / cached ms; compare_tx.sh has no PyTorch peer for these). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static weft_fabric *F;

static void die(const char *what) {
  fprintf(stderr, "bench_tx: %s: %s\n", what, F ? weft_fabric_last_error(F) : weft_open_error());
  exit(1);
}

/* A tensor of uniform values in [lo, hi) (lo == hi: that constant), made resident on the cpu lane. */
static weft_tensor *tens(int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3, float lo, float hi, unsigned *seed) {
  const int64_t d[4] = {d0, d1, d2, d3};
  size_t n = 1;
  for (int i = 0; i < nd; i++) n *= (size_t)d[i];
  float *p = malloc(sizeof(float) * n);
  if (!p) die("out of host memory");
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * (float)(*seed >> 8) * (1.0f / 16777216.0f);
  }
  weft_tensor *t = NULL;
  if (weft_tensor_create(F, nd, d, p, &t) != WEFT_OK) die("tensor_create");
  free(p);
  return t;
}

static weft_tensor *itens(int64_t B, int64_t T, const int32_t *v) {
  const int64_t d[2] = {B, T};
  weft_tensor *t = NULL;
  if (weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, d, v, &t) != WEFT_OK) die("tensor_create_typed");
  return t;
}

#define RUN(call)                                                                                                  \
  do {                                                                                                             \
    if ((call) != WEFT_OK || weft_fabric_sync(F) != WEFT_OK) die(#call);                                           \
  } while (0)

#define TIME(name, T, call)                                                                                        \
  do {                                                                                                             \
    RUN(call);                                                                                                     \
    double best = 1e30, spent = 0;                                                                                 \
    for (int rep = 0; rep < 10 && (rep < 3 || spent < 1.0); rep++) {                                               \
      const double t0 = now();                                                                                     \
      RUN(call);                                                                                                   \
      const double dt = now() - t0;                                                                                \
      spent += dt;                                                                                                 \
      if (dt < best) best = dt;                                                                                    \
    }                                                                                                              \
    printf("%s %lld %.4f\n", name, (long long)(T), best * 1e3);                                                    \
    fflush(stdout);                                                                                                \
  } while (0)

/* TIME, keeping the best milliseconds in `ms` too. */
#define TIME_V(name, T, call, ms)                                                                                  \
  do {                                                                                                             \
    RUN(call);                                                                                                     \
    double best = 1e30, spent = 0;                                                                                 \
    for (int rep = 0; rep < 10 && (rep < 3 || spent < 1.0); rep++) {                                               \
      const double t0 = now();                                                                                     \
      RUN(call);                                                                                                   \
      const double dt = now() - t0;                                                                                \
      spent += dt;                                                                                                 \
      if (dt < best) best = dt;                                                                                    \
    }                                                                                                              \
    (ms) = best * 1e3;                                                                                             \
    printf("%s %lld %.4f\n", name, (long long)(T), best * 1e3);                                                    \
    fflush(stdout);                                                                                                \
  } while (0)

int main(int argc, char **argv) {
  const int64_t B = 4, C = 768, NH = 12, V = 50257;
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu";
  d.calibration = WEFT_CALIBRATION_OFF;
  const char *env = getenv("WEFT_BENCH_THREADS");
  if (env && atoi(env) > 0) d.cpu_threads = atoi(env);
  if (weft_fabric_open(&d, &F) != WEFT_OK) die("open the cpu lane");
  const char *ce = getenv("WEFT_BENCH_CONTRACT");
  const int fp32 = ce && strcmp(ce, "fp32") == 0;
  const weft_op_desc pin = {fp32 ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT, 0};
  const weft_op_desc *P = &pin;
  weft_lane_info li;
  if (weft_fabric_lane_info(F, 0, &li) == WEFT_OK) fprintf(stderr, "bench_tx: %s contract, cpu lane: %s\n", fp32 ? "fp32" : "exact", li.details);
  int64_t Ts[8] = {64, 256, 1024};
  int nT = 3;
  if (argc > 1) {
    nT = 0;
    for (int i = 1; i < argc && nT < 8; i++) Ts[nT++] = atoll(argv[i]);
  }
  unsigned seed = 1;
  for (int ti = 0; ti < nT; ti++) {
    const int64_t T = Ts[ti], N = B * T;
    int32_t *tokv = malloc(sizeof(int32_t) * (size_t)N);
    if (!tokv) die("out of host memory");
    for (int64_t i = 0; i < N; i++) tokv[i] = (int32_t)((i * 7919) % V);
    weft_tensor *tok = itens(B, T, tokv);
    weft_tensor *wte = tens(2, V, C, 0, 0, -0.1f, 0.1f, &seed), *wpe = tens(2, 1024, C, 0, 0, -0.1f, 0.1f, &seed);
    weft_tensor *x = tens(2, N, C, 0, 0, -1, 1, &seed), *y = tens(2, N, C, 0, 0, 0, 0, &seed),
                *dy = tens(2, N, C, 0, 0, -1, 1, &seed), *dx = tens(2, N, C, 0, 0, 0, 0, &seed);
    weft_tensor *g = tens(1, C, 0, 0, 0, 0.5f, 1.5f, &seed), *bt = tens(1, C, 0, 0, 0, -0.1f, 0.1f, &seed);
    weft_tensor *dg = tens(1, C, 0, 0, 0, 0, 0, &seed), *db = tens(1, C, 0, 0, 0, 0, 0, &seed);
    weft_tensor *mean = tens(1, N, 0, 0, 0, 0, 0, &seed), *rstd = tens(1, N, 0, 0, 0, 0, 0, &seed);

    TIME("embedding_fwd", T, weft_op_embedding(F, P, tok, NULL, wte, wpe, y));
    TIME("embedding_bwd", T, weft_op_embedding_backward(F, P, dy, tok, NULL, wte, wpe));
    TIME("layernorm_fwd", T, weft_op_layernorm(F, P, x, g, bt, 1e-5f, y, mean, rstd));
    TIME("layernorm_bwd", T, weft_op_layernorm_backward(F, P, dy, x, mean, rstd, g, dx, dg, db));
    weft_tensor *h = tens(2, 4 * N, C, 0, 0, -3, 3, &seed), *hy = tens(2, 4 * N, C, 0, 0, 0, 0, &seed),
                *hd = tens(2, 4 * N, C, 0, 0, -1, 1, &seed);
    TIME("gelu_fwd", T, weft_op_gelu(F, P, h, hy));
    TIME("gelu_bwd", T, weft_op_gelu_backward(F, P, h, hd, hy));
    /* AdamW over 4*N*C parameters (h as params, hd as grads), at step 10 */
    weft_tensor *m = tens(2, 4 * N, C, 0, 0, 0, 0, &seed), *v = tens(2, 4 * N, C, 0, 0, 0, 0, &seed);
    TIME("adamw", T, weft_op_adamw(F, P, h, hd, m, v, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 10));
    weft_tensor_destroy(h), weft_tensor_destroy(hy), weft_tensor_destroy(hd), weft_tensor_destroy(m),
        weft_tensor_destroy(v);

    weft_tensor *qkv = tens(3, B, T, 3 * C, 0, -1, 1, &seed), *att = tens(4, B, NH, T, T, 0, 0, &seed),
                *pre = tens(4, B, NH, T, T, 0, 0, &seed), *dqkv = tens(3, B, T, 3 * C, 0, 0, 0, &seed),
                *ao = tens(3, B, T, C, 0, 0, 0, &seed), *dao = tens(3, B, T, C, 0, -1, 1, &seed);
    TIME("attention_fwd", T, weft_op_attention(F, P, qkv, NH, ao, att, NULL)); /* att only, as llm.c keeps */
    TIME("attention_bwd", T, weft_op_attention_backward(F, P, dao, qkv, att, NH, dqkv));
    /* one decode step at a cache of T positions, batch 1: the fused attention over the whole cache (what a
     * decoder without attention_cached runs) beside attention_cached of the last position (the same bits
     * for that row); attention_decode_ratio is fused / cached, measured here in one run */
    {
      weft_tensor *cq = tens(3, 1, T, 3 * C, 0, -1, 1, &seed), *co = tens(3, 1, T, C, 0, 0, 0, &seed),
                  *ca = tens(4, 1, NH, T, T, 0, 0, &seed), *c1 = tens(3, 1, 1, C, 0, 0, 0, &seed);
      double tf = 0, tc = 0;
      TIME_V("attention_decode_fused", T, weft_op_attention(F, P, cq, NH, co, ca, NULL), tf);
      TIME_V("attention_decode_cached", T, weft_op_attention_cached(F, P, cq, NH, T - 1, c1, NULL), tc);
      printf("attention_decode_ratio %lld %.2f\n", (long long)T, tf / tc);
      weft_tensor_destroy(cq), weft_tensor_destroy(co), weft_tensor_destroy(ca), weft_tensor_destroy(c1);
    }
    weft_tensor *dp = tens(4, B, NH, T, T, -1, 1, &seed), *ds = tens(4, B, NH, T, T, 0, 0, &seed);
    TIME("softmax_fwd", T, weft_op_causal_softmax(F, P, pre, 0.125f, att));
    TIME("softmax_bwd", T, weft_op_causal_softmax_backward(F, P, att, dp, 0.125f, ds));
    weft_tensor *ob[] = {qkv, att, pre, dqkv, ao, dao, dp, ds};
    for (size_t i = 0; i < sizeof ob / sizeof *ob; i++) weft_tensor_destroy(ob[i]);

    weft_tensor *logits = tens(2, N, V, 0, 0, -4, 4, &seed), *losses = tens(1, N, 0, 0, 0, 0, 0, &seed);
    weft_tensor *dl = tens(1, N, 0, 0, 0, 1.0f / (float)N, 1.0f / (float)N, &seed);
    TIME("crossentropy_fwd", T, weft_op_crossentropy(F, P, logits, tok, losses));
    weft_tensor *dlogits = tens(2, N, V, 0, 0, 0, 0, &seed);
    TIME("crossentropy_bwd", T, weft_op_crossentropy_backward(F, P, logits, tok, dl, dlogits));
    weft_tensor *oc[] = {logits, losses, dl, dlogits, tok, wte, wpe, x, y, dy, dx, g, bt, dg, db, mean, rstd};
    for (size_t i = 0; i < sizeof oc / sizeof *oc; i++) weft_tensor_destroy(oc[i]);
    free(tokv);
  }
  weft_fabric_close(F);
  return 0;
}
