/* bench_tx.c - the CPU lane's transformer ops through the public API (weft_op_* pinned to the cpu lane, on
 * tensors resident there; each timed call is followed by weft_fabric_sync, so the figure includes the op
 * table's validation, routing, the host queue and the lane's dispatch) at GPT-2 small's shapes: B = 4,
 * C = 768, 12 heads, V = 50257, T given on the command line (default 64 256 1024). Prints one line per op and
 * T: "op T milliseconds" (the best of several calls). Threads: WEFT_BENCH_THREADS, else every CPU. Contract:
 * WEFT_BENCH_CONTRACT=fp32, else exact.
 * The op set: embedding, layernorm, gelu, attention (fused, writing att, not preatt), causal softmax (unfused),
 * cross-entropy, each forward and backward, and AdamW over the B*T*C*4 parameters of a sizeable layer; and one
 * decode step (batch 1, a cache of T): the fused attention over the cache beside attention_cached of its last
 * row, with their ratio (attention_decode_ratio: fused ms / cached ms).
 *
 * `bench_tx --serve` reads requests "OP T [exact|fp32]" from stdin, one a line, and answers each with
 * "OP T milliseconds" (the shape's tensors are made when T changes; the contract, when given, holds from
 * then on): compare_tx.py alternates it with PyTorch's server op by op, so both see the same load on a
 * shared machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"
#include "bench_util.h"

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

/* One shape's tensors. */
enum { B = 4, C = 768, NH = 12, V = 50257 };
typedef struct shape {
  int64_t T;
  weft_tensor *tok, *wte, *wpe, *x, *y, *dy, *dx, *g, *bt, *dg, *db, *mean, *rstd;
  weft_tensor *h, *hy, *hd, *m, *v;
  weft_tensor *qkv, *att, *pre, *dqkv, *ao, *dao, *dp, *ds;
  weft_tensor *cq, *co, *ca, *c1;
  weft_tensor *logits, *losses, *dl, *dlogits;
} shape;

static shape S;
static weft_op_desc P;

static void shape_free(void) {
  weft_tensor **all = &S.tok;
  for (weft_tensor **t = all; t <= &S.dlogits; t++)
    if (*t) weft_tensor_destroy(*t), *t = NULL;
  S.T = 0;
}

static void shape_make(int64_t T) {
  if (S.T == T) return;
  shape_free();
  const int64_t N = B * T;
  unsigned seed = 1;
  S.T = T;
  int32_t *tokv = malloc(sizeof(int32_t) * (size_t)N);
  if (!tokv) die("out of host memory");
  for (int64_t i = 0; i < N; i++) tokv[i] = (int32_t)((i * 7919) % V);
  S.tok = itens(B, T, tokv);
  free(tokv);
  S.wte = tens(2, V, C, 0, 0, -0.1f, 0.1f, &seed), S.wpe = tens(2, 1024, C, 0, 0, -0.1f, 0.1f, &seed);
  S.x = tens(2, N, C, 0, 0, -1, 1, &seed), S.y = tens(2, N, C, 0, 0, 0, 0, &seed);
  S.dy = tens(2, N, C, 0, 0, -1, 1, &seed), S.dx = tens(2, N, C, 0, 0, 0, 0, &seed);
  S.g = tens(1, C, 0, 0, 0, 0.5f, 1.5f, &seed), S.bt = tens(1, C, 0, 0, 0, -0.1f, 0.1f, &seed);
  S.dg = tens(1, C, 0, 0, 0, 0, 0, &seed), S.db = tens(1, C, 0, 0, 0, 0, 0, &seed);
  S.mean = tens(1, N, 0, 0, 0, 0, 0, &seed), S.rstd = tens(1, N, 0, 0, 0, 0, 0, &seed);
  S.h = tens(2, 4 * N, C, 0, 0, -3, 3, &seed), S.hy = tens(2, 4 * N, C, 0, 0, 0, 0, &seed);
  S.hd = tens(2, 4 * N, C, 0, 0, -1, 1, &seed);
  S.m = tens(2, 4 * N, C, 0, 0, 0, 0, &seed), S.v = tens(2, 4 * N, C, 0, 0, 0, 0, &seed);
  S.qkv = tens(3, B, T, 3 * C, 0, -1, 1, &seed), S.att = tens(4, B, NH, T, T, 0, 0, &seed);
  S.pre = tens(4, B, NH, T, T, -8, 8, &seed), S.dqkv = tens(3, B, T, 3 * C, 0, 0, 0, &seed);
  S.ao = tens(3, B, T, C, 0, 0, 0, &seed), S.dao = tens(3, B, T, C, 0, -1, 1, &seed);
  S.dp = tens(4, B, NH, T, T, -1, 1, &seed), S.ds = tens(4, B, NH, T, T, 0, 0, &seed);
  S.cq = tens(3, 1, T, 3 * C, 0, -1, 1, &seed), S.co = tens(3, 1, T, C, 0, 0, 0, &seed);
  S.ca = tens(4, 1, NH, T, T, 0, 0, &seed), S.c1 = tens(3, 1, 1, C, 0, 0, 0, &seed);
  S.logits = tens(2, N, V, 0, 0, -4, 4, &seed), S.losses = tens(1, N, 0, 0, 0, 0, 0, &seed);
  S.dl = tens(1, N, 0, 0, 0, 1.0f / (float)N, 1.0f / (float)N, &seed);
  S.dlogits = tens(2, N, V, 0, 0, 0, 0, &seed);
  /* what the backward passes read: a layernorm's statistics, attention's att (llm.c keeps att, not preatt) */
  if (weft_op_layernorm(F, &P, S.x, S.g, S.bt, 1e-5f, S.y, S.mean, S.rstd) != WEFT_OK ||
      weft_op_attention(F, &P, S.qkv, NH, S.ao, S.att, NULL) != WEFT_OK || weft_fabric_sync(F) != WEFT_OK)
    die("the backward passes' inputs");
}

/* Runs op `name` once on the current shape; 0 for an unknown name. */
static int run_op(const char *name) {
  weft_status st;
  if (!strcmp(name, "embedding_fwd")) st = weft_op_embedding(F, &P, S.tok, NULL, S.wte, S.wpe, S.y);
  else if (!strcmp(name, "embedding_bwd")) st = weft_op_embedding_backward(F, &P, S.dy, S.tok, NULL, S.wte, S.wpe);
  else if (!strcmp(name, "layernorm_fwd")) st = weft_op_layernorm(F, &P, S.x, S.g, S.bt, 1e-5f, S.y, S.mean, S.rstd);
  else if (!strcmp(name, "layernorm_bwd"))
    st = weft_op_layernorm_backward(F, &P, S.dy, S.x, S.mean, S.rstd, S.g, S.dx, S.dg, S.db);
  else if (!strcmp(name, "gelu_fwd")) st = weft_op_gelu(F, &P, S.h, S.hy);
  else if (!strcmp(name, "gelu_bwd")) st = weft_op_gelu_backward(F, &P, S.h, S.hd, S.hy);
  /* AdamW over 4*N*C parameters (h as params, hd as grads), at step 10 */
  else if (!strcmp(name, "adamw")) st = weft_op_adamw(F, &P, S.h, S.hd, S.m, S.v, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 10);
  else if (!strcmp(name, "attention_fwd")) st = weft_op_attention(F, &P, S.qkv, NH, S.ao, S.att, NULL);
  else if (!strcmp(name, "attention_bwd")) st = weft_op_attention_backward(F, &P, S.dao, S.qkv, S.att, NH, S.dqkv);
  /* one decode step at a cache of T positions, batch 1: the fused attention over the whole cache (what a
   * decoder without attention_cached runs) and attention_cached of the last position (the same bits for
   * that row) */
  else if (!strcmp(name, "attention_decode_fused")) st = weft_op_attention(F, &P, S.cq, NH, S.co, S.ca, NULL);
  else if (!strcmp(name, "attention_decode_cached")) st = weft_op_attention_cached(F, &P, S.cq, NH, S.T - 1, S.c1, NULL);
  else if (!strcmp(name, "softmax_fwd")) st = weft_op_causal_softmax(F, &P, S.pre, 0.125f, S.ds);
  else if (!strcmp(name, "softmax_bwd")) st = weft_op_causal_softmax_backward(F, &P, S.att, S.dp, 0.125f, S.ds);
  else if (!strcmp(name, "crossentropy_fwd")) st = weft_op_crossentropy(F, &P, S.logits, S.tok, S.losses);
  else if (!strcmp(name, "crossentropy_bwd")) st = weft_op_crossentropy_backward(F, &P, S.logits, S.tok, S.dl, S.dlogits);
  else return 0;
  if (st != WEFT_OK || weft_fabric_sync(F) != WEFT_OK) die(name);
  return 1;
}

/* The best of up to 10 calls after one untimed (at least 3, then while under `budget` seconds in all). */
static double time_op(const char *name, double budget) {
  if (!run_op(name)) return -1;
  double best = 1e30, spent = 0;
  for (int rep = 0; rep < 10 && (rep < 3 || spent < budget); rep++) {
    const double t0 = bench_now();
    run_op(name);
    const double dt = bench_now() - t0;
    spent += dt;
    if (dt < best) best = dt;
  }
  return best * 1e3;
}

static const char *const OPS[] = {"embedding_fwd", "embedding_bwd", "layernorm_fwd", "layernorm_bwd", "gelu_fwd",
                                  "gelu_bwd", "adamw", "attention_fwd", "attention_bwd", "attention_decode_fused",
                                  "attention_decode_cached", "softmax_fwd", "softmax_bwd", "crossentropy_fwd",
                                  "crossentropy_bwd"};

int main(int argc, char **argv) {
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu";
  d.calibration = WEFT_CALIBRATION_OFF;
  const char *env = getenv("WEFT_BENCH_THREADS");
  if (env && atoi(env) > 0) d.cpu_threads = atoi(env);
  if (weft_fabric_open(&d, &F) != WEFT_OK) die("open the cpu lane");
  const char *ce = getenv("WEFT_BENCH_CONTRACT");
  const int fp32 = ce && strcmp(ce, "fp32") == 0;
  P = (weft_op_desc){fp32 ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT, 0};
  weft_lane_info li;
  if (weft_fabric_lane_info(F, 0, &li) == WEFT_OK)
    fprintf(stderr, "bench_tx: %s contract, cpu lane: %s\n", fp32 ? "fp32" : "exact", li.details);
  if (argc > 1 && !strcmp(argv[1], "--serve")) {
    char line[256], op[128], contract[16];
    long long T;
    while (fgets(line, sizeof line, stdin)) {
      const int got = sscanf(line, "%127s %lld %15s", op, &T, contract);
      if (got < 2 || T < 1 || T > 1024) {
        printf("error %s", line);
        fflush(stdout);
        continue;
      }
      if (got == 3) P.contract = strcmp(contract, "fp32") == 0 ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT;
      shape_make(T);
      printf("%s %lld %.4f\n", op, T, time_op(op, 0.3));
      fflush(stdout);
    }
  } else {
    int64_t Ts[8] = {64, 256, 1024};
    int nT = 3;
    if (argc > 1) {
      nT = 0;
      for (int i = 1; i < argc && nT < 8; i++) Ts[nT++] = atoll(argv[i]);
    }
    for (int ti = 0; ti < nT; ti++) {
      shape_make(Ts[ti]);
      double fused = 0, cached = 0;
      for (size_t i = 0; i < sizeof OPS / sizeof *OPS; i++) {
        const double ms = time_op(OPS[i], 1.0);
        printf("%s %lld %.4f\n", OPS[i], (long long)Ts[ti], ms);
        if (!strcmp(OPS[i], "attention_decode_fused")) fused = ms;
        if (!strcmp(OPS[i], "attention_decode_cached")) cached = ms;
        fflush(stdout);
      }
      printf("attention_decode_ratio %lld %.2f\n", (long long)Ts[ti], fused / cached);
    }
  }
  shape_free();
  weft_fabric_close(F);
  return 0;
}
