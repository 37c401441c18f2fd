/* bench_tx.c - the CPU lane's transformer ops (exact, bit for bit the reference) at GPT-2 small's shapes:
 * B = 4, C = 768, 12 heads, V = 50257, T given on the command line (default 64 256 1024). Prints one line
 * per op and T: "op T milliseconds" (the best of several runs), for compare_tx.sh to set beside PyTorch's
 * figures from bench_tx_torch.py, measured in the same run. Threads: WEFT_BENCH_THREADS, else every CPU.
 * The op set: embedding, layernorm, gelu, attention (fused, with att), causal softmax (unfused), cross-entropy,
 * each forward and backward, and AdamW over the B*T*C*4 parameters of a sizeable layer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lanes/cpu/tx.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *fbuf(size_t n, float lo, float hi, unsigned *seed) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  if (!p) {
    fprintf(stderr, "bench_tx: out of memory (%zu floats)\n", n);
    exit(1);
  }
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * (float)(*seed >> 8) * (1.0f / 16777216.0f);
  }
  return p;
}

#define TIME(name, T, call)                                                                                        \
  do {                                                                                                             \
    call;                                                                                                          \
    double best = 1e30, spent = 0;                                                                                 \
    for (int rep = 0; rep < 10 && (rep < 3 || spent < 1.0); rep++) {                                               \
      const double t0 = now();                                                                                     \
      call;                                                                                                        \
      const double dt = now() - t0;                                                                                \
      spent += dt;                                                                                                 \
      if (dt < best) best = dt;                                                                                    \
    }                                                                                                              \
    printf("%s %lld %.4f\n", name, (long long)(T), best * 1e3);                                                    \
    fflush(stdout);                                                                                                \
  } while (0)

int main(int argc, char **argv) {
  const int64_t B = 4, C = 768, NH = 12, V = 50257;
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  const char *env = getenv("WEFT_BENCH_THREADS");
  if (env && atoi(env) > 0) threads = atoi(env);
  weft_cpu_pool *pool = NULL;
  weft_cpu_pool_create(threads, &pool);
  fprintf(stderr, "bench_tx: %d threads, isa %s\n", weft_cpu_pool_threads(pool), weft_cpu_tx_select()->isa);
  int64_t Ts[8] = {64, 256, 1024};
  int nT = 3;
  if (argc > 1) {
    nT = 0;
    for (int i = 1; i < argc && nT < 8; i++) Ts[nT++] = atoll(argv[i]);
  }
  unsigned seed = 1;
  for (int ti = 0; ti < nT; ti++) {
    const int64_t T = Ts[ti], N = B * T;
    const size_t nc = (size_t)(N * C);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919) % V);
    float *wte = fbuf((size_t)(V * C), -0.1f, 0.1f, &seed), *wpe = fbuf((size_t)(1024 * C), -0.1f, 0.1f, &seed);
    float *x = fbuf(nc, -1, 1, &seed), *y = fbuf(nc, 0, 0, &seed), *dy = fbuf(nc, -1, 1, &seed);
    float *g = fbuf((size_t)C, 0.5f, 1.5f, &seed), *bt = fbuf((size_t)C, -0.1f, 0.1f, &seed);
    float *dg = fbuf((size_t)C, 0, 0, &seed), *db = fbuf((size_t)C, 0, 0, &seed);
    float *mean = fbuf((size_t)N, 0, 0, &seed), *rstd = fbuf((size_t)N, 0, 0, &seed);

    TIME("embedding_fwd", T, weft_cpu_tx_embedding_forward(pool, y, tok, NULL, wte, wpe, B, T, C, V, 1024));
    TIME("embedding_bwd", T, weft_cpu_tx_embedding_backward(pool, wte, wpe, dy, tok, NULL, B, T, C, V, 1024));
    TIME("layernorm_fwd", T, weft_cpu_tx_layernorm_forward(pool, y, mean, rstd, x, g, bt, N, C, 1e-5f));
    TIME("layernorm_bwd", T, weft_cpu_tx_layernorm_backward(pool, y, dg, db, dy, x, mean, rstd, g, N, C));
    float *h = fbuf(4 * nc, -3, 3, &seed), *hy = fbuf(4 * nc, 0, 0, &seed), *hd = fbuf(4 * nc, -1, 1, &seed);
    TIME("gelu_fwd", T, weft_cpu_tx_gelu_forward(pool, hy, h, (int64_t)(4 * nc)));
    TIME("gelu_bwd", T, weft_cpu_tx_gelu_backward(pool, hy, h, hd, (int64_t)(4 * nc)));
    /* AdamW over 4*N*C parameters (h as params, hd as grads) */
    float *m = fbuf(4 * nc, 0, 0, &seed), *v = fbuf(4 * nc, 0, 0, &seed);
    TIME("adamw", T, weft_cpu_tx_adamw(pool, h, hd, m, v, (int64_t)(4 * nc), 3e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f));
    free(h), free(hy), free(hd), free(m), free(v);

    const size_t natt = (size_t)(B * NH * T * T);
    float *qkv = fbuf(3 * nc, -1, 1, &seed), *att = fbuf(natt, 0, 0, &seed), *pre = fbuf(natt, 0, 0, &seed);
    float *dqkv = fbuf(3 * nc, 0, 0, &seed);
    TIME("attention_fwd", T, weft_cpu_tx_attention_forward(pool, y, pre, att, qkv, B, T, C, NH));
    TIME("attention_bwd", T, weft_cpu_tx_attention_backward(pool, dqkv, dy, qkv, att, B, T, C, NH));
    float *dp = fbuf(natt, -1, 1, &seed), *ds = fbuf(natt, 0, 0, &seed);
    TIME("softmax_fwd", T, weft_cpu_tx_causal_softmax_forward(pool, att, pre, B * NH, T, 0.125f));
    TIME("softmax_bwd", T, weft_cpu_tx_causal_softmax_backward(pool, ds, att, dp, B * NH, T, 0.125f));
    free(qkv), free(att), free(pre), free(dqkv), free(dp), free(ds);

    float *logits = fbuf((size_t)(N * V), -4, 4, &seed), *losses = fbuf((size_t)N, 0, 0, &seed);
    float *dl = fbuf((size_t)N, 1.0f / (float)N, 1.0f / (float)N, &seed);
    TIME("crossentropy_fwd", T, weft_cpu_tx_crossentropy_forward(pool, losses, logits, tok, N, V));
    float *dlogits = fbuf((size_t)(N * V), 0, 0, &seed);
    TIME("crossentropy_bwd", T, weft_cpu_tx_crossentropy_backward(pool, dlogits, logits, tok, dl, N, V));
    free(logits), free(losses), free(dl), free(dlogits);
    free(tok), free(wte), free(wpe), free(x), free(y), free(dy), free(g), free(bt), free(dg), free(db), free(mean),
        free(rstd);
  }
  weft_cpu_pool_destroy(pool);
  return 0;
}
