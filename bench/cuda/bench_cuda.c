/* bench_cuda.c - the CUDA lanes' figures, each next to what it is measured against in the same run:
 *   1. device-resident exact matmul (cuda:0) at n = 1024, 2048, 4096, and cuda:0's fp32 (cuBLAS sgemm);
 *   2. cuda:0.tensor tf32 and bf16 against cuBLAS called directly (opened with dlopen, as the lane does);
 *   3. host arrays -> host result through the public API, n = 4096, exact and tf32: the ordinary path
 *      (weft_tensor_create once, then write a and b, matmul, read c, each call) and the caller's arrays
 *      wrapped (weft_tensor_wrap), in the steady state and in the first three calls on fresh arrays (and the
 *      first call of the process); the limits they are held to, from the bus's pinned copy rate and the
 *      resident matmul measured in the same run;
 *   4. 100 tiny ops in one scope against launch + synchronise per op;
 *   5. the CPU / GPU crossover from host arrays, measured and as the calibrated router predicts it.
 * Every figure is also printed as "RESULT <key> <value>" for bench/cuda/summary.py.
 * Usage: bench_cuda [--quick | --exact | --host]   (--quick: smaller sizes, for a machine without a fast GPU;
 * --exact: only the resident exact matmul, to compare kernel variants; --host: only the host data path and
 * the tiny ops, for bench/cuda/host_path.sh) */
#include <cublas_v2.h>
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"
#include "../bench_util.h"

static void fill(float *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((seed >> 8) & 0xffffff) / 16777216.0f - 0.5f;
  }
}

static void result(const char *key, double value) { printf("RESULT %s %.6g\n", key, value); }

static weft_fabric *F;
static int lane_cpu = -1, lane_cu = -1, lane_cut = -1;

static void must(weft_status st, const char *what);

static weft_tensor *sq(int64_t r, int64_t c, unsigned seed) {
  int64_t d[2] = {r, c};
  weft_tensor *t = NULL;
  must(weft_tensor_create(F, 2, d, NULL, &t), "tensor_create");
  if (seed) {
    size_t count = (size_t)(r * c);
    float *p = malloc(count * sizeof *p);
    fill(p, count, seed);
    must(weft_tensor_write(t, p, count), "tensor_write");
    free(p);
  }
  return t;
}

static void must(weft_status st, const char *what) {
  if (st != WEFT_OK) {
    fprintf(stderr, "%s: %s: %s\n", what, weft_status_str(st), weft_fabric_last_error(F));
    exit(1);
  }
}

/* Seconds per matmul with everything resident on `lane`: `reps` back to back, one sync. Median of 5. */
static double resident_mm(int lane, weft_contract c, int64_t n, int reps) {
  weft_tensor *a = sq(n, n, 1), *b = sq(n, n, 2), *out = sq(n, n, 0);
  weft_op_desc d = {c, lane};
  must(weft_op_matmul(F, &d, a, 0, b, 0, out), "matmul");
  must(weft_fabric_sync(F), "sync");
  double t[5];
  for (int s = 0; s < 5; s++) {
    double t0 = bench_now();
    for (int r = 0; r < reps; r++) must(weft_op_matmul(F, &d, a, 0, b, 0, out), "matmul");
    must(weft_fabric_sync(F), "sync");
    t[s] = (bench_now() - t0) / reps;
  }
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(out);
  return bench_median(t, 5);
}

/* ------------------------------------------------------------------------------ cuBLAS, directly */

typedef struct raw {
  void *cuda, *blas;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void *);
  CUresult (*cuCtxSynchronize)(void);
  cublasStatus_t (*create)(cublasHandle_t *);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*gemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                           const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                           cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
} raw;

static int raw_open(raw *r) {
  memset(r, 0, sizeof *r);
  r->cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                                      "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12"};
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !r->blas && r->cuda; i++) {
    if (strchr(names[i], '/')) {
      char lt[128];
      snprintf(lt, sizeof lt, "/usr/local/cuda/lib64/libcublasLt.so%s", strrchr(names[i], '.'));
      dlopen(lt, RTLD_NOW | RTLD_LOCAL);
    }
    r->blas = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (!r->cuda) return 0;
  *(void **)&r->cuInit = dlsym(r->cuda, "cuInit");
  *(void **)&r->cuDeviceGet = dlsym(r->cuda, "cuDeviceGet");
  *(void **)&r->cuDevicePrimaryCtxRetain = dlsym(r->cuda, "cuDevicePrimaryCtxRetain");
  *(void **)&r->cuCtxSetCurrent = dlsym(r->cuda, "cuCtxSetCurrent");
  *(void **)&r->cuMemAlloc = dlsym(r->cuda, "cuMemAlloc_v2");
  *(void **)&r->cuMemFree = dlsym(r->cuda, "cuMemFree_v2");
  *(void **)&r->cuMemcpyHtoD = dlsym(r->cuda, "cuMemcpyHtoD_v2");
  *(void **)&r->cuMemcpyDtoH = dlsym(r->cuda, "cuMemcpyDtoH_v2");
  *(void **)&r->cuMemHostAlloc = dlsym(r->cuda, "cuMemHostAlloc");
  *(void **)&r->cuMemFreeHost = dlsym(r->cuda, "cuMemFreeHost");
  *(void **)&r->cuCtxSynchronize = dlsym(r->cuda, "cuCtxSynchronize");
  if (r->blas) {
    *(void **)&r->create = dlsym(r->blas, "cublasCreate_v2");
    *(void **)&r->destroy = dlsym(r->blas, "cublasDestroy_v2");
    *(void **)&r->gemmEx = dlsym(r->blas, "cublasGemmEx");
  }
  CUdevice dev;
  CUcontext ctx;
  int ok = r->cuInit && r->cuInit(0) == CUDA_SUCCESS && r->cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
           r->cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && r->cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
  if (!ok) return 0;
  return r->blas && r->gemmEx && r->create ? 2 : 1; /* 1: the driver only (no cuBLAS) */
}

static unsigned short to_bf16(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Seconds per cuBLAS gemm, n^3, on the default stream: `reps` back to back, one sync, median of 5. */
static double raw_gemm(raw *r, int64_t n, int bf16, int reps) {
  size_t count = (size_t)(n * n), esz = bf16 ? 2 : 4;
  CUdeviceptr a, b, c;
  if (r->cuMemAlloc(&a, count * esz) || r->cuMemAlloc(&b, count * esz) || r->cuMemAlloc(&c, count * 4)) return -1;
  float *h = malloc(count * 4);
  unsigned short *h16 = malloc(count * 2);
  for (int m = 0; m < 2; m++) {
    fill(h, count, 1 + (unsigned)m);
    if (bf16) {
      for (size_t i = 0; i < count; i++) h16[i] = to_bf16(h[i]);
      r->cuMemcpyHtoD(m ? b : a, h16, count * 2);
    } else {
      r->cuMemcpyHtoD(m ? b : a, h, count * 4);
    }
  }
  free(h), free(h16);
  cublasHandle_t hd;
  r->create(&hd);
  const float one = 1, zero = 0;
  cudaDataType in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasComputeType_t ct = bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  int N = (int)n;
#define GEMM()                                                                                                     \
  r->gemmEx(hd, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, (void *)(uintptr_t)b, in, N, (void *)(uintptr_t)a, in, N,   \
            &zero, (void *)(uintptr_t)c, CUDA_R_32F, N, ct, CUBLAS_GEMM_DEFAULT)
  GEMM();
  r->cuCtxSynchronize();
  double t[5];
  for (int s = 0; s < 5; s++) {
    double t0 = bench_now();
    for (int i = 0; i < reps; i++) GEMM();
    r->cuCtxSynchronize();
    t[s] = (bench_now() - t0) / reps;
  }
  r->destroy(hd);
  r->cuMemFree(a), r->cuMemFree(b), r->cuMemFree(c);
  return bench_median(t, 5);
}

/* ------------------------------------------------------------------------------- host to host */

typedef struct h2h {
  double total, write, op, read;
} h2h;

/* One call from host arrays to a host result: write a, write b, matmul, read c (the times of each part).
 * `make` first makes the tensors (and the time counts as the writes'): wrapped over the arrays when `wrap`,
 * else made with weft_tensor_create. */
static h2h call_once(int lane, weft_contract c, int64_t n, int wrap, int make, weft_tensor **T, float *a, float *b,
                     float *out) {
  size_t count = (size_t)(n * n);
  int64_t dims[2] = {n, n};
  weft_op_desc d = {c, lane};
  double t0 = bench_now();
  if (make) {
    if (wrap) {
      must(weft_tensor_wrap(F, 2, dims, a, &T[0]), "wrap");
      must(weft_tensor_wrap(F, 2, dims, b, &T[1]), "wrap");
      must(weft_tensor_wrap(F, 2, dims, out, &T[2]), "wrap");
    } else {
      for (int i = 0; i < 3; i++) must(weft_tensor_create(F, 2, dims, NULL, &T[i]), "tensor_create");
    }
  }
  must(weft_tensor_write(T[0], a, count), "write");
  must(weft_tensor_write(T[1], b, count), "write");
  double t1 = bench_now();
  must(weft_op_matmul(F, &d, T[0], 0, T[1], 0, T[2]), "matmul");
  double t2 = bench_now();
  must(weft_tensor_read(T[2], out, count), "read");
  double t3 = bench_now();
  h2h r = {t3 - t0, t1 - t0, t2 - t1, t3 - t2};
  return r;
}

/* The steady state: the median of `reps` calls after `warm` (registration of the host memory with the lane
 * happens at the second and finishes off the caller's path), with new values in a each call. */
static h2h host_to_host(int lane, weft_contract c, int64_t n, int wrap, int warm, int reps) {
  size_t count = (size_t)(n * n);
  float *a = malloc(count * 4), *b = malloc(count * 4), *out = malloc(count * 4);
  fill(a, count, 7), fill(b, count, 8);
  weft_tensor *T[3] = {0};
  double tt[16], tw[16], to[16], tr[16];
  if (reps > 15) reps = 15;
  for (int r = -warm; r < reps; r++) {
    a[r + warm] += 1.0f; /* new data every time */
    h2h x = call_once(lane, c, n, wrap, r == -warm, T, a, b, out);
    if (r >= 0) tt[r] = x.total, tw[r] = x.write, to[r] = x.op, tr[r] = x.read;
  }
  h2h res = {bench_median(tt, reps), bench_median(tw, reps), bench_median(to, reps), bench_median(tr, reps)};
  for (int i = 0; i < 3; i++) weft_tensor_destroy(T[i]);
  free(a), free(b), free(out);
  return res;
}

/* The first three calls on fresh arrays (the caller's a and b filled, its result array not yet touched) in
 * a fabric that has run before; for the ordinary path the tensors are new too (made in the first call). */
static void first_calls(int lane, weft_contract c, int64_t n, int wrap, h2h out3[3]) {
  size_t count = (size_t)(n * n);
  float *a = malloc(count * 4), *b = malloc(count * 4), *out = malloc(count * 4);
  fill(a, count, 17), fill(b, count, 18);
  weft_tensor *T[3] = {0};
  for (int i = 0; i < 3; i++) {
    a[i] += 1.0f;
    out3[i] = call_once(lane, c, n, wrap, i == 0, T, a, b, out);
  }
  for (int i = 0; i < 3; i++) weft_tensor_destroy(T[i]);
  free(a), free(b), free(out);
}

/* The bus's rate with pinned host memory, measured with the driver directly: 64 MiB each way, median of 5. */
static int pcie(int64_t n, double *out_up, double *out_down) {
  raw r;
  size_t bytes = (size_t)(n * n) * 4;
  void *host = NULL;
  CUdeviceptr dev = 0;
  if (!raw_open(&r) || !r.cuMemHostAlloc || r.cuMemHostAlloc(&host, bytes, 0) != CUDA_SUCCESS) return 0;
  if (r.cuMemAlloc(&dev, bytes) != CUDA_SUCCESS) {
    r.cuMemFreeHost(host);
    return 0;
  }
  memset(host, 1, bytes);
  double tu[6], td[6];
  for (int i = 0; i < 6; i++) {
    double t0 = bench_now();
    r.cuMemcpyHtoD(dev, host, bytes);
    double t1 = bench_now();
    r.cuMemcpyDtoH(host, dev, bytes);
    tu[i] = t1 - t0, td[i] = bench_now() - t1;
  }
  *out_up = bench_median(tu + 1, 5), *out_down = bench_median(td + 1, 5);
  r.cuMemFree(dev);
  r.cuMemFreeHost(host);
  return 1;
}

/* Prints a call's time and parts, and RESULT <base>_ms, <base>_write_ms, <base>_op_ms, <base>_read_ms. */
static void print_h2h(const char *what, const char *base, h2h x) {
  printf("  %-44s %7.2f ms  (writes %.2f, matmul call %.2f, read %.2f)\n", what, x.total * 1e3, x.write * 1e3,
         x.op * 1e3, x.read * 1e3);
  static const char *const part[] = {"", "_write", "_op", "_read"};
  const double v[] = {x.total, x.write, x.op, x.read};
  for (int i = 0; i < 4; i++) {
    char k[128];
    snprintf(k, sizeof k, "%s%s_ms", base, part[i]);
    result(k, v[i] * 1e3);
  }
}

/* Section 3: the host data path at n (4096 unless quick) on cuda:0 (exact) and cuda:0.tensor (tf32). */
static void host_path(int64_t n, const h2h *cold) {
  printf("\nhost arrays -> host result, n = %lld (write a, write b, matmul, read c), ms:\n", (long long)n);
  for (int i = 0; cold && i < 3; i++) {
    char what[96], key[96];
    snprintf(what, sizeof what, "call %d of the process (wrapped, exact)", i + 1);
    snprintf(key, sizeof key, "h2h_cold%d_wrap_exact", i + 1);
    print_h2h(what, key, cold[i]);
  }
  double up = 0, down = 0;
  if (pcie(n, &up, &down)) {
    printf("  bus, pinned memory, %lld MiB: up %.3f ms (%.1f GB/s), down %.3f ms (%.1f GB/s)\n",
           (long long)(n * n * 4 >> 20), up * 1e3, (double)(n * n * 4) / up * 1e-9, down * 1e3,
           (double)(n * n * 4) / down * 1e-9);
    result("pcie_up_ms", up * 1e3);
    result("pcie_down_ms", down * 1e3);
  }
  for (int t = 0; t < 2; t++) {
    int lane = t ? lane_cut : lane_cu;
    if (lane < 0) continue;
    weft_contract c = t ? WEFT_CONTRACT_TF32 : WEFT_CONTRACT_EXACT;
    const char *cn = t ? "tf32" : "exact";
    char key[96], what[96];
    double comp = resident_mm(lane, c, n, 5);
    printf(" %s on %s: resident matmul %.3f ms\n", cn, t ? "cuda:0.tensor" : "cuda:0", comp * 1e3);
    snprintf(key, sizeof key, "resident_%s_ms", cn);
    result(key, comp * 1e3);
    if (up > 0) {
      /* the limit the issue sets: a, b up and c down at the bus's rate, overlapped with the compute; and the
       * floor of the lane's row-block pipeline: all of b (all of a too on the tensor lane, which converts a
       * whole) before the first block, one block's part of c after the last */
      double xfer = 2 * up + down, limit = xfer > comp ? xfer : comp, floor = (t ? 2 : 1) * up + comp + down / 8;
      printf("   limit (transfers %.3f ms overlapped with the compute) %.3f ms; pipeline floor %.3f ms\n",
             xfer * 1e3, limit * 1e3, floor * 1e3);
      snprintf(key, sizeof key, "limit_%s_ms", cn);
      result(key, limit * 1e3);
      snprintf(key, sizeof key, "floor_%s_ms", cn);
      result(key, floor * 1e3);
    }
    for (int wrap = 0; wrap < 2; wrap++) {
      const char *pn = wrap ? "wrap" : "ord";
      h2h f3[3];
      first_calls(lane, c, n, wrap, f3);
      for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s, call %d on fresh arrays", wrap ? "wrapped" : "ordinary", i + 1);
        snprintf(key, sizeof key, "h2h_first%d_%s_%s", i + 1, pn, cn);
        print_h2h(what, key, f3[i]);
      }
      h2h st = host_to_host(lane, c, n, wrap, 4, 9);
      snprintf(what, sizeof what, "%s, steady state (median of 9)", wrap ? "wrapped" : "ordinary");
      snprintf(key, sizeof key, "h2h_%s_%s", pn, cn);
      print_h2h(what, key, st);
    }
  }
  /* for scale: one plain memcpy of an operand on this host (what one thread moves) */
  size_t count = (size_t)(n * n);
  float *p = malloc(count * 4), *q = malloc(count * 4);
  fill(p, count, 9);
  memcpy(q, p, count * 4);
  double ts[5];
  for (int s = 0; s < 5; s++) {
    double t1 = bench_now();
    memcpy(q, p, count * 4);
    ts[s] = bench_now() - t1;
  }
  double mc = bench_median(ts, 5);
  printf("  (for scale: one single-threaded memcpy of %zu MiB on this host takes %.2f ms)\n", count * 4 >> 20,
         mc * 1e3);
  result("memcpy_64mib_ms", mc * 1e3);
  free(p), free(q);
}

/* ------------------------------------------------------------------------------------ tiny ops */

static void tiny_ops(void) {
  weft_tensor *x = sq(1, 256, 3), *y = sq(1, 256, 4);
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane_cu};
  must(weft_op_add(F, &d, x, y, x), "add");
  must(weft_fabric_sync(F), "sync");
  const int ops = 100;
  double t[7];
  for (int s = 0; s < 7; s++) { /* launch + synchronise, per op */
    double t0 = bench_now();
    for (int i = 0; i < ops; i++) {
      must(weft_op_add(F, &d, x, y, x), "add");
      must(weft_fabric_sync(F), "sync");
    }
    t[s] = (bench_now() - t0) / ops;
  }
  double per_sync = bench_median(t, 7);
  for (int s = 0; s < 7; s++) { /* no scope, one sync at the end */
    double t0 = bench_now();
    for (int i = 0; i < ops; i++) must(weft_op_add(F, &d, x, y, x), "add");
    must(weft_fabric_sync(F), "sync");
    t[s] = (bench_now() - t0) / ops;
  }
  double one_sync = bench_median(t, 7);
  for (int w = 0; w < 3; w++) { /* warm: the second sight of the sequence captures its graph */
    must(weft_scope_begin(F), "scope");
    for (int i = 0; i < ops; i++) must(weft_op_add(F, &d, x, y, x), "add");
    must(weft_scope_end(F), "scope");
  }
  for (int s = 0; s < 7; s++) {
    const int scopes = 20;
    double t0 = bench_now();
    for (int k = 0; k < scopes; k++) {
      must(weft_scope_begin(F), "scope");
      for (int i = 0; i < ops; i++) must(weft_op_add(F, &d, x, y, x), "add");
      must(weft_scope_end(F), "scope");
    }
    t[s] = (bench_now() - t0) / (scopes * ops);
  }
  double scoped = bench_median(t, 7);
  printf("\n100 tiny ops (add of 256 floats) on cuda:0, per op:\n");
  printf("  launch + sync each      %8.2f us\n", per_sync * 1e6);
  printf("  one sync for all        %8.2f us\n", one_sync * 1e6);
  printf("  one scope (graph)       %8.2f us\n", scoped * 1e6);
  result("tiny_sync_us", per_sync * 1e6);
  result("tiny_onesync_us", one_sync * 1e6);
  result("tiny_scope_us", scoped * 1e6);
  weft_tensor_destroy(x), weft_tensor_destroy(y);
}

/* ---------------------------------------------------------------------------------- crossover */

static void crossover(int quick) {
  static const int64_t sizes[] = {64, 128, 192, 256, 384, 512, 640, 768, 1024, 1536, 2048};
  int nsizes = quick ? 5 : (int)(sizeof sizes / sizeof sizes[0]);
  printf("\nhost arrays -> host result, ms (median):\n%6s %10s %10s %10s %10s\n", "n", "cpu", "cuda:0", "cuda fp32",
         "tensor tf32");
  int64_t cross_exact = 0, cross_tf32 = 0;
  for (int i = 0; i < nsizes; i++) {
    int64_t n = sizes[i];
    int reps = n <= 512 ? 9 : 5;
    double tc = host_to_host(lane_cpu, WEFT_CONTRACT_EXACT, n, 1, 1, reps).total;
    double tg = host_to_host(lane_cu, WEFT_CONTRACT_EXACT, n, 1, 1, reps).total;
    double tf = host_to_host(lane_cu, WEFT_CONTRACT_FP32, n, 1, 1, reps).total;
    double tt = lane_cut >= 0 ? host_to_host(lane_cut, WEFT_CONTRACT_TF32, n, 1, 1, reps).total : 0;
    printf("%6lld %10.3f %10.3f %10.3f %10.3f\n", (long long)n, tc * 1e3, tg * 1e3, tf * 1e3, tt * 1e3);
    if (!cross_exact && tg < tc) cross_exact = n;
    if (!cross_tf32 && lane_cut >= 0 && tt < tc) cross_tf32 = n;
  }
  printf("measured crossover (GPU faster than the CPU lane): exact at n = %lld, tf32 at n = %lld\n",
         (long long)cross_exact, (long long)cross_tf32);
  result("crossover_measured_exact", (double)cross_exact);
  result("crossover_measured_tf32", (double)cross_tf32);

  /* What the router predicts once calibrated: the first n it sends to a GPU lane. */
  must(weft_fabric_calibrate(F), "calibrate");
  int64_t route_exact = 0;
  printf("router (calibrated), exact matmul from host arrays:\n");
  for (int64_t n = 32; n <= 4096; n = n < 256 ? n + 32 : n + 128) {
    weft_route_query q = {WEFT_OP_MATMUL, WEFT_CONTRACT_EXACT, 1, n, n, n, 0, 0};
    weft_route_explanation e;
    if (weft_route_explain(F, &q, &e) != WEFT_OK || e.chosen < 0) continue;
    const char *name = e.lanes[e.chosen].lane;
    if (!route_exact && strncmp(name, "cuda", 4) == 0) {
      route_exact = n;
      printf("  n = %lld: %s (cpu %.3f ms, %s %.3f ms predicted)\n", (long long)n, name,
             e.lanes[lane_cpu].total * 1e3, name, e.lanes[e.chosen].total * 1e3);
    }
  }
  printf("router crossover: exact at n = %lld\n", (long long)route_exact);
  static const int64_t show[] = {256, 1024, 4096};
  for (int i = 0; i < 3; i++) { /* the router's reasoning at a few sizes */
    weft_route_query q = {WEFT_OP_MATMUL, WEFT_CONTRACT_EXACT, 1, show[i], show[i], show[i], 0, 0};
    weft_route_explanation e;
    weft_status st = weft_route_explain(F, &q, &e);
    if (st != WEFT_OK) {
      printf("  explain n=%lld: %s: %s\n", (long long)show[i], weft_status_str(st), weft_fabric_last_error(F));
      continue;
    }
    for (size_t l = 0; l < e.nlanes; l++)
      printf("  n=%-5lld %-14s %s total %9.3f ms = wait %.3f + transfer %.3f + alpha %.3f + compute %.3f%s%s\n",
             (long long)show[i], e.lanes[l].lane, (int)l == e.chosen ? "*" : " ", e.lanes[l].total * 1e3,
             e.lanes[l].wait * 1e3, e.lanes[l].transfer * 1e3, e.lanes[l].alpha * 1e3, e.lanes[l].compute * 1e3,
             e.lanes[l].eligible ? "" : " not eligible: ", e.lanes[l].eligible ? "" : e.lanes[l].why_not);
  }
  result("crossover_router_exact", (double)route_exact);
  weft_cost_line line;
  for (int l = 0; l < 3; l++) {
    int lane = l == 0 ? lane_cpu : l == 1 ? lane_cu : lane_cut;
    weft_contract c = l == 2 ? WEFT_CONTRACT_TF32 : WEFT_CONTRACT_EXACT;
    if (lane < 0 || weft_fabric_cost_model(F, (size_t)lane, WEFT_COST_MATMUL, c, &line) != WEFT_OK) continue;
    weft_lane_info info;
    weft_fabric_lane_info(F, (size_t)lane, &info);
    printf("  cost model %-14s %-5s alpha %8.2f us  beta %8.2f TFLOP/s  (source %d, refine %.2f)\n", info.name,
           weft_contract_str(c), line.alpha * 1e6, line.beta * 1e-12, line.source, line.refine);
    for (int k = WEFT_COST_UPLOAD; k <= WEFT_COST_DOWNLOAD; k++)
      if (weft_fabric_cost_model(F, (size_t)lane, (weft_cost_class)k, WEFT_CONTRACT_EXACT, &line) == WEFT_OK)
        printf("  cost model %-14s %-8s alpha %8.2f us  beta %8.2f GB/s\n", info.name, weft_cost_class_str((weft_cost_class)k),
               line.alpha * 1e6, line.beta * 1e-9);
  }
}

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  int exact_only = argc > 1 && strcmp(argv[1], "--exact") == 0;
  int host_only = argc > 1 && strcmp(argv[1], "--host") == 0;
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = "cpu,cuda";
  desc.calibration = WEFT_CALIBRATION_OFF;
  double t0 = bench_now();
  if (weft_fabric_open(&desc, &F) != WEFT_OK) {
    fprintf(stderr, "open: %s\n", weft_open_error());
    return 1;
  }
  printf("fabric open: %.1f ms\n", (bench_now() - t0) * 1e3);
  size_t idx;
  if (weft_fabric_lane_find(F, "cpu", &idx) == WEFT_OK) lane_cpu = (int)idx;
  if (weft_fabric_lane_find(F, "cuda:0", &idx) == WEFT_OK) lane_cu = (int)idx;
  if (weft_fabric_lane_find(F, "cuda:0.tensor", &idx) == WEFT_OK) lane_cut = (int)idx;
  for (size_t i = 0; i < weft_fabric_lane_count(F); i++) {
    weft_lane_info info;
    weft_fabric_lane_info(F, i, &info);
    printf("lane %-14s %s | %s | %s\n", info.name, info.device, info.driver, info.details);
  }
  for (size_t i = 0; i < weft_fabric_absent_count(F); i++) {
    const char *name, *why;
    weft_fabric_absent_info(F, i, &name, &why);
    printf("absent %-12s %s\n", name, why);
  }
  if (lane_cu < 0) {
    printf("no cuda:0 lane: nothing to measure\n");
    weft_fabric_close(F);
    return 0;
  }

  /* the process's first call from host arrays, before the lanes have moved anything (pinned staging,
   * copy threads and device memory are made on first use) */
  int64_t hn = quick ? 1024 : 4096;
  h2h cold[3];
  first_calls(lane_cu, WEFT_CONTRACT_EXACT, hn, 1, cold);
  if (host_only) {
    host_path(hn, cold);
    tiny_ops();
    weft_fabric_close(F);
    return 0;
  }

  /* 1. resident exact */
  printf("\ndevice-resident matmul, cuda:0:\n");
  static const int64_t ns[] = {1024, 2048, 4096};
  for (int i = 0; i < 3; i++) {
    int64_t n = quick ? ns[i] / 4 : ns[i];
    double t = resident_mm(lane_cu, WEFT_CONTRACT_EXACT, n, n >= 4096 ? 5 : 20);
    double tf = 2.0 * (double)n * (double)n * (double)n / t * 1e-12;
    printf("  exact n=%-5lld %8.3f ms  %7.2f TFLOP/s\n", (long long)n, t * 1e3, tf);
    char key[64];
    snprintf(key, sizeof key, "exact_tflops_%lld", (long long)n);
    result(key, tf);
  }
  if (exact_only) {
    weft_fabric_close(F);
    return 0;
  }
  int64_t nb = quick ? 1024 : 4096;
  double t32 = resident_mm(lane_cu, WEFT_CONTRACT_FP32, nb, 10);
  printf("  fp32  n=%-5lld %8.3f ms  %7.2f TFLOP/s (cuBLAS sgemm through the lane)\n", (long long)nb, t32 * 1e3,
         2.0 * (double)nb * nb * nb / t32 * 1e-12);
  result("fp32_tflops_4096", 2.0 * (double)nb * nb * nb / t32 * 1e-12);

  /* 2. tensor lane against cuBLAS directly */
  if (lane_cut >= 0) {
    raw r;
    int have_raw = raw_open(&r) == 2;
    printf("\ntensor lane against cuBLAS called directly (same run):\n");
    static const int64_t tn[] = {4096, 8192};
    for (int i = 0; i < 2; i++) {
      int64_t n = quick ? tn[i] / 8 : tn[i];
      double flop = 2.0 * (double)n * (double)n * (double)n;
      for (int bf = 0; bf < 2; bf++) {
        double tl = resident_mm(lane_cut, bf ? WEFT_CONTRACT_BF16 : WEFT_CONTRACT_TF32, n, n >= 8192 ? 10 : 40);
        double tr = have_raw ? raw_gemm(&r, n, bf, n >= 8192 ? 10 : 40) : -1;
        printf("  %s n=%-5lld weft %7.1f TFLOP/s   cuBLAS %7.1f TFLOP/s   ratio %.3f\n", bf ? "bf16" : "tf32",
               (long long)n, flop / tl * 1e-12, tr > 0 ? flop / tr * 1e-12 : 0, tr > 0 ? tr / tl : 0);
        char key[64];
        snprintf(key, sizeof key, "%s_tflops_%lld", bf ? "bf16" : "tf32", (long long)n);
        result(key, flop / tl * 1e-12);
        snprintf(key, sizeof key, "%s_cublas_tflops_%lld", bf ? "bf16" : "tf32", (long long)n);
        result(key, tr > 0 ? flop / tr * 1e-12 : 0);
      }
    }
  }

  /* SIMT / tensor units, device-resident: where the tensor lane's tf32 overtakes cuda:0's own kernels */
  if (lane_cut >= 0) {
    static const int64_t rs[] = {64, 128, 256, 512, 1024, 2048};
    printf("\ndevice-resident, ms per matmul:\n%6s %10s %10s %10s %10s\n", "n", "exact", "fp32", "tf32", "bf16");
    int64_t cross = 0;
    for (int i = 0; i < (quick ? 4 : 6); i++) {
      int64_t n = rs[i];
      int reps = n <= 512 ? 50 : 10;
      double te = resident_mm(lane_cu, WEFT_CONTRACT_EXACT, n, reps);
      double tf = resident_mm(lane_cu, WEFT_CONTRACT_FP32, n, reps);
      double tt = resident_mm(lane_cut, WEFT_CONTRACT_TF32, n, reps);
      double tb = resident_mm(lane_cut, WEFT_CONTRACT_BF16, n, reps);
      printf("%6lld %10.4f %10.4f %10.4f %10.4f\n", (long long)n, te * 1e3, tf * 1e3, tt * 1e3, tb * 1e3);
      if (!cross && tt < tf) cross = n;
    }
    printf("tensor units (tf32) faster than cuda:0 fp32 from n = %lld\n", (long long)cross);
    result("crossover_simt_tensor", (double)cross);
  }

  /* 3. host to host */
  host_path(hn, cold);

  /* 4. tiny ops */
  tiny_ops();

  /* 5. crossover */
  crossover(quick);
  weft_fabric_close(F);
  return 0;
}
