/* bench_blas.c - weft's CPU lane against OpenBLAS and oneDNN on square sgemm, and the cost of a tiny matmul
 * through the public API. A benchmark, not a test: it reports figures and fails only when something
 * cannot run.
 *
 * Every contender gets host arrays in and a host result out: for weft the arrays are wrapped as tensors
 * (weft_tensor_wrap: no copies), and each run is weft_tensor_write of a and b (which copies nothing, only
 * tells the fabric they changed), weft_op_matmul, weft_tensor_read of c (in place); for OpenBLAS
 * cblas_sgemm, for oneDNN dnnl_sgemm, straight on the arrays. Times are the best of several repeats after a
 * warm-up, with the contenders interleaved round by round and a pause between them, because the peers'
 * worker threads keep spinning for a while after a call and would otherwise steal the next one's cores.
 *
 * Usage: bench_blas [--sizes 256,512,...] [--rounds R] [--threads T] [--openblas-only]
 *   --openblas-only times OpenBLAS alone (used to show its default core type next to the tuned one). */
#include <cblas.h>
#include <dnnl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"
#include "bench_util.h"

/* Long enough for OpenBLAS's and OpenMP's spinning workers to go to sleep before the next contender. */
static void settle(void) { usleep(150000); }

static void fill(float *x, size_t count, uint64_t seed) {
  for (size_t i = 0; i < count; i++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    x[i] = (float)(seed >> 40) / (float)(1 << 24) - 0.5f;
  }
}

enum { WEFT_EXACT, WEFT_FP32, OPENBLAS, ONEDNN, NIMPL };
static const char *const IMPL_NAME[NIMPL] = {"weft exact", "weft fp32", "OpenBLAS", "oneDNN"};

typedef struct ctx {
  weft_fabric *fabric;
  int64_t n;
  float *a, *b, *c;
  weft_tensor *ta, *tb, *tc;
} ctx;

static int run_one(ctx *x, int impl) {
  const int64_t n = x->n;
  const size_t count = (size_t)(n * n);
  switch (impl) {
  case WEFT_EXACT:
  case WEFT_FP32: {
    weft_op_desc d = WEFT_OP_DESC_INIT;
    d.contract = impl == WEFT_FP32 ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT;
    if (weft_tensor_write(x->ta, x->a, count) || weft_tensor_write(x->tb, x->b, count) ||
        weft_op_matmul(x->fabric, &d, x->ta, 0, x->tb, 0, x->tc) || weft_tensor_read(x->tc, x->c, count)) {
      fprintf(stderr, "bench_blas: weft failed: %s\n", weft_fabric_last_error(x->fabric));
      return 1;
    }
    return 0;
  }
  case OPENBLAS:
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, x->a, (int)n, x->b, (int)n,
                0.0f, x->c, (int)n);
    return 0;
  case ONEDNN:
    if (dnnl_sgemm('N', 'N', n, n, n, 1.0f, x->a, n, x->b, n, 0.0f, x->c, n) != dnnl_success) {
      fprintf(stderr, "bench_blas: dnnl_sgemm failed\n");
      return 1;
    }
    return 0;
  }
  return 1;
}

/* Seconds per call of a tiny matmul through the public API, the best of a few timed loops. */
static double tiny_weft(weft_fabric *f, int64_t n, int calls) {
  int64_t dims[2] = {n, n};
  float data[64 * 64];
  fill(data, (size_t)(n * n), 7);
  weft_tensor *a, *b, *c;
  if (weft_tensor_create(f, 2, dims, data, &a) || weft_tensor_create(f, 2, dims, data, &b) ||
      weft_tensor_create(f, 2, dims, NULL, &c))
    return -1;
  double best = 1e9;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = bench_now();
    for (int i = 0; i < calls; i++)
      if (weft_op_matmul(f, NULL, a, 0, b, 0, c) != WEFT_OK) return -1;
    double t = (bench_now() - t0) / calls;
    if (t < best) best = t;
  }
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c);
  return best;
}

static double tiny_openblas(int n, int calls) {
  float a[64 * 64], b[64 * 64], c[64 * 64];
  fill(a, (size_t)(n * n), 7), fill(b, (size_t)(n * n), 9);
  double best = 1e9;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = bench_now();
    for (int i = 0; i < calls; i++)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double t = (bench_now() - t0) / calls;
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  int64_t sizes[16] = {256, 512, 1024, 2048};
  int nsizes = 4, rounds = 5, threads = 0, openblas_only = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      nsizes = 0;
      for (char *s = strtok(argv[++i], ","); s && nsizes < 16; s = strtok(NULL, ",")) sizes[nsizes++] = atoll(s);
    } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--openblas-only") == 0) {
      openblas_only = 1;
    } else {
      fprintf(stderr, "usage: %s [--sizes 256,512,...] [--rounds R] [--threads T] [--openblas-only]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1) rounds = 1;
  if (threads <= 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    threads = online > 0 ? (int)online : 1;
  }
  openblas_set_num_threads(threads);

  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = "cpu";
  desc.cpu_threads = threads;
  weft_fabric *f = NULL;
  if (weft_fabric_open(&desc, &f) != WEFT_OK) {
    fprintf(stderr, "bench_blas: cannot open weft's cpu lane: %s\n", weft_open_error());
    return 1;
  }
  weft_lane_info li;
  weft_fabric_lane_info(f, 0, &li);
  const dnnl_version_t *dv = dnnl_version();
  printf("weft %s cpu lane: %s; %s\n", weft_version(), li.device, li.details);
  printf("OpenBLAS: %s, core type %s, %d threads\n", openblas_get_config(), openblas_get_corename(), threads);
  if (!openblas_only)
    printf("oneDNN %d.%d.%d (threads from OMP_NUM_THREADS, default all cores)\n", dv->major, dv->minor, dv->patch);
  printf("best of %d rounds, contenders interleaved; weft times include writing a, b and reading c\n\n", rounds);

  int first = openblas_only ? OPENBLAS : WEFT_EXACT, last = openblas_only ? OPENBLAS : ONEDNN;
  printf("%6s", "n");
  for (int m = first; m <= last; m++) printf(" | %10s ms  GFLOP/s", IMPL_NAME[m]);
  if (!openblas_only) printf(" | exact/OB fp32/OB fp32/DNNL");
  printf("\n");
  for (int si = 0; si < nsizes; si++) {
    ctx x;
    memset(&x, 0, sizeof x);
    x.fabric = f;
    x.n = sizes[si];
    const int64_t n = x.n;
    const size_t count = (size_t)(n * n);
    int64_t dims[2] = {n, n};
    x.a = malloc(count * sizeof(float)), x.b = malloc(count * sizeof(float)), x.c = malloc(count * sizeof(float));
    if (!x.a || !x.b || !x.c || weft_tensor_wrap(f, 2, dims, x.a, &x.ta) ||
        weft_tensor_wrap(f, 2, dims, x.b, &x.tb) || weft_tensor_wrap(f, 2, dims, x.c, &x.tc)) {
      fprintf(stderr, "bench_blas: out of memory at n=%lld\n", (long long)n);
      return 1;
    }
    fill(x.a, count, 1), fill(x.b, count, 2);
    double best[NIMPL];
    for (int m = first; m <= last; m++) {
      best[m] = 1e30;
      if (run_one(&x, m)) return 1; /* warm-up: first-touch of buffers, packing scratch, thread start */
    }
    for (int r = 0; r < rounds; r++)
      for (int m = first; m <= last; m++) {
        settle();
        for (int rep = 0; rep < 2; rep++) {
          double t0 = bench_now();
          if (run_one(&x, m)) return 1;
          double t = bench_now() - t0;
          if (t < best[m]) best[m] = t;
        }
      }
    const double flop = 2.0 * (double)n * (double)n * (double)n;
    printf("%6lld", (long long)n);
    for (int m = first; m <= last; m++) printf(" | %13.3f %8.1f", best[m] * 1e3, flop / best[m] * 1e-9);
    if (!openblas_only)
      printf(" | %8.2f %7.2f %9.2f", best[OPENBLAS] / best[WEFT_EXACT], best[OPENBLAS] / best[WEFT_FP32],
             best[ONEDNN] / best[WEFT_FP32]);
    printf("\n");
    fflush(stdout);
    weft_tensor_destroy(x.ta), weft_tensor_destroy(x.tb), weft_tensor_destroy(x.tc);
    free(x.a), free(x.b), free(x.c);
  }
  if (!openblas_only) {
    printf("(ratios are speed ratios: weft's GFLOP/s over the peer's; above 1 means weft is faster)\n\n");
    const int calls = 200000;
    double w4 = tiny_weft(f, 4, calls), w8 = tiny_weft(f, 8, calls);
    settle();
    double o4 = tiny_openblas(4, calls), o8 = tiny_openblas(8, calls);
    printf("tiny matmul per call: weft_op_matmul 4x4 %.3f us, 8x8 %.3f us; cblas_sgemm 4x4 %.3f us, 8x8 %.3f us\n",
           w4 * 1e6, w8 * 1e6, o4 * 1e6, o8 * 1e6);
  }
  weft_fabric_close(f);
  return 0;
}
