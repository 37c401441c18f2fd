/* bench_vulkan.c - the Vulkan lane's figures.
 *
 *  1. Device-resident matmul: a and b are uploaded once, then many back-to-back matmuls run with one
 *     weft_fabric_sync at the end; TFLOP/s = 2 n^3 reps / time. Exact contract (and fp32 for comparison),
 *     with the exact result of the first size checked bit for bit against the CPU lane.
 *  2. Dispatch cost: 100 tiny ops (256 floats) inside one scope, per op, dependent (a chain) and
 *     independent; against each op followed by its own submit and wait (weft_fabric_sync) outside a scope.
 *
 * Usage: bench_vulkan [--sizes N,N,...] [--sweep] [--seconds S]
 *   --sizes    matmul sizes (default 1024,2048,4096 on a GPU, 256,512 on a software device)
 *   --sweep    also time each tiled kernel on its own (tuning the automatic choice)
 *   --seconds  time to spend per matmul measurement (default 0.5) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lanes/vulkan/vk_internal.h"
#include "weft.h"
#include "../bench_util.h"

#define CHECK(call)                                                                                            \
  do {                                                                                                         \
    weft_status st_ = (call);                                                                                  \
    if (st_ != WEFT_OK) {                                                                                      \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, weft_status_str(st_),                \
              weft_fabric_last_error(f));                                                                      \
      exit(1);                                                                                                 \
    }                                                                                                          \
  } while (0)

static weft_fabric *f;
static int vk;

/* Seconds per matmul of n x n under `contract`, with the inputs resident. */
static double time_matmul(weft_tensor *a, weft_tensor *b, weft_tensor *c, weft_contract contract, double budget) {
  weft_op_desc d = {contract, vk};
  CHECK(weft_op_matmul(f, &d, a, 0, b, 0, c)); /* the kernel is compiled on first use */
  CHECK(weft_fabric_sync(f));
  double t0 = bench_now();
  CHECK(weft_op_matmul(f, &d, a, 0, b, 0, c));
  CHECK(weft_fabric_sync(f));
  double one = bench_now() - t0;
  int reps = (int)(budget / (one > 1e-6 ? one : 1e-6));
  reps = reps < 3 ? 3 : reps > 500 ? 500 : reps;
  t0 = bench_now();
  for (int r = 0; r < reps; r++) CHECK(weft_op_matmul(f, &d, a, 0, b, 0, c));
  CHECK(weft_fabric_sync(f));
  return (bench_now() - t0) / reps;
}

typedef struct row {
  int n;
  double exact, fp32, t88, t44, t88k16;
  int checked, same;
} row;

static void bench_matmul(int n, int sweep, double budget, int check, row *out) {
  size_t count = (size_t)n * (size_t)n;
  float *ha = malloc(count * sizeof(float)), *hb = malloc(count * sizeof(float));
  uint64_t s = 12345;
  for (size_t i = 0; i < count; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    ha[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    hb[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
  }
  int64_t dims[2] = {n, n};
  weft_tensor *a, *b, *c;
  CHECK(weft_tensor_create(f, 2, dims, ha, &a));
  CHECK(weft_tensor_create(f, 2, dims, hb, &b));
  CHECK(weft_tensor_create(f, 2, dims, NULL, &c));
  double flop = 2.0 * n * (double)n * n;
  memset(out, 0, sizeof *out);
  out->n = n;
  out->exact = flop / time_matmul(a, b, c, WEFT_CONTRACT_EXACT, budget) * 1e-12;
  if (check) { /* the exact result, bit for bit, against the CPU lane */
    float *gpu = malloc(count * sizeof(float)), *cpu = malloc(count * sizeof(float));
    size_t ci;
    CHECK(weft_tensor_read(c, gpu, count));
    if (weft_fabric_lane_find(f, "cpu", &ci) == WEFT_OK) {
      weft_op_desc d = {WEFT_CONTRACT_EXACT, (int)ci};
      weft_tensor *c2;
      CHECK(weft_tensor_create(f, 2, dims, NULL, &c2));
      CHECK(weft_op_matmul(f, &d, a, 0, b, 0, c2));
      CHECK(weft_tensor_read(c2, cpu, count));
      out->checked = 1;
      out->same = memcmp(gpu, cpu, count * sizeof(float)) == 0;
      weft_tensor_destroy(c2);
    }
    free(gpu), free(cpu);
  }
  out->fp32 = flop / time_matmul(a, b, c, WEFT_CONTRACT_FP32, budget) * 1e-12;
  if (sweep) {
    weft_vk_force_matmul_kernel = 2;
    out->t88 = flop / time_matmul(a, b, c, WEFT_CONTRACT_EXACT, budget) * 1e-12;
    weft_vk_force_matmul_kernel = 3;
    out->t44 = flop / time_matmul(a, b, c, WEFT_CONTRACT_EXACT, budget) * 1e-12;
    weft_vk_force_matmul_kernel = 4;
    out->t88k16 = flop / time_matmul(a, b, c, WEFT_CONTRACT_EXACT, budget) * 1e-12;
    weft_vk_force_matmul_kernel = 0;
  }
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c);
  free(ha), free(hb);
}

enum { NOPS = 100, TINY = 256, REPEAT = 30 };

typedef struct dispatch_figures {
  double scope_chain, scope_chain_record, scope_indep, batched_chain, each_synced;
} dispatch_figures;

static void bench_dispatch(dispatch_figures *out) {
  weft_op_desc d = {WEFT_CONTRACT_EXACT, vk};
  int64_t len = TINY;
  float host[TINY];
  for (int i = 0; i < TINY; i++) host[i] = 1.0f;
  weft_tensor *t, *many[NOPS];
  CHECK(weft_tensor_create(f, 1, &len, host, &t));
  for (int i = 0; i < NOPS; i++) CHECK(weft_tensor_create(f, 1, &len, host, &many[i]));
  /* Warm: uploads, kernel compiled. */
  CHECK(weft_op_scale(f, &d, 1.0f, t, t));
  for (int i = 0; i < NOPS; i++) CHECK(weft_op_scale(f, &d, 1.0f, many[i], many[i]));
  CHECK(weft_fabric_sync(f));
  double v[REPEAT], rec[REPEAT];
  /* A chain of dependent ops in one scope: each waits for the previous (a barrier between them). */
  for (int r = 0; r < REPEAT; r++) {
    double t0 = bench_now();
    CHECK(weft_scope_begin(f));
    for (int i = 0; i < NOPS; i++) CHECK(weft_op_scale(f, &d, i % 2 ? 0.5f : 2.0f, t, t));
    double t1 = bench_now();
    CHECK(weft_scope_end(f));
    v[r] = (bench_now() - t0) / NOPS, rec[r] = (t1 - t0) / NOPS;
  }
  out->scope_chain = bench_median(v, REPEAT), out->scope_chain_record = bench_median(rec, REPEAT);
  /* Independent ops in one scope: no barriers needed between them. */
  for (int r = 0; r < REPEAT; r++) {
    double t0 = bench_now();
    CHECK(weft_scope_begin(f));
    for (int i = 0; i < NOPS; i++) CHECK(weft_op_scale(f, &d, i % 2 ? 0.5f : 2.0f, many[i], many[i]));
    CHECK(weft_scope_end(f));
    v[r] = (bench_now() - t0) / NOPS;
  }
  out->scope_indep = bench_median(v, REPEAT);
  /* Outside a scope, no sync until the end: the lane batches on its own. */
  for (int r = 0; r < REPEAT; r++) {
    double t0 = bench_now();
    for (int i = 0; i < NOPS; i++) CHECK(weft_op_scale(f, &d, i % 2 ? 0.5f : 2.0f, t, t));
    CHECK(weft_fabric_sync(f));
    v[r] = (bench_now() - t0) / NOPS;
  }
  out->batched_chain = bench_median(v, REPEAT);
  /* Each op submitted and waited for on its own. */
  double each[NOPS * 3];
  for (int i = 0; i < NOPS * 3; i++) {
    double t0 = bench_now();
    CHECK(weft_op_scale(f, &d, i % 2 ? 0.5f : 2.0f, t, t));
    CHECK(weft_fabric_sync(f));
    each[i] = bench_now() - t0;
  }
  out->each_synced = bench_median(each, NOPS * 3);
  float back[TINY];
  CHECK(weft_tensor_read(t, back, TINY));
  if (back[0] != 1.0f) fprintf(stderr, "warning: the dispatch chain computed %g, expected 1\n", (double)back[0]);
  weft_tensor_destroy(t);
  for (int i = 0; i < NOPS; i++) weft_tensor_destroy(many[i]);
}

int main(int argc, char **argv) {
  int sizes[16], nsizes = 0, sweep = 0;
  double budget = 0.5;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--sweep") == 0) sweep = 1;
    else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) budget = atof(argv[++i]);
    else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      for (char *p = argv[++i]; *p && nsizes < 16;) {
        sizes[nsizes++] = (int)strtol(p, &p, 10);
        if (*p == ',') p++;
      }
    } else {
      fprintf(stderr, "usage: %s [--sizes N,N,...] [--sweep] [--seconds S]\n", argv[0]);
      return 2;
    }
  }
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = "cpu,vulkan";
  desc.calibration = WEFT_CALIBRATION_OFF;
  if (weft_fabric_open(&desc, &f) != WEFT_OK) {
    fprintf(stderr, "weft_fabric_open: %s\n", weft_open_error());
    return 1;
  }
  size_t idx;
  if (weft_fabric_lane_find(f, "vulkan:0", &idx) != WEFT_OK) {
    const char *name, *reason;
    printf("no Vulkan lane: nothing to measure");
    for (size_t i = 0; i < weft_fabric_absent_count(f); i++)
      if (weft_fabric_absent_info(f, i, &name, &reason) == WEFT_OK && strncmp(name, "vulkan", 6) == 0)
        printf(" (%s: %s)", name, reason);
    printf("\n");
    weft_fabric_close(f);
    return 0;
  }
  vk = (int)idx;
  weft_lane_info info;
  weft_fabric_lane_info(f, idx, &info);
  printf("%s: %s\n  %s\n  %s\n", info.name, info.device, info.driver, info.details);
  int software = strstr(info.details, "CPU (software)") != NULL;
  if (!nsizes) {
    if (software) sizes[0] = 256, sizes[1] = 512, nsizes = 2;
    else sizes[0] = 1024, sizes[1] = 2048, sizes[2] = 4096, nsizes = 3;
  }

  row rows[16];
  for (int i = 0; i < nsizes; i++) {
    bench_matmul(sizes[i], sweep, budget, i == 0, &rows[i]);
    printf("matmul n=%d: exact %.4g TFLOP/s, fp32 %.4g TFLOP/s", rows[i].n, rows[i].exact, rows[i].fp32);
    if (sweep)
      printf(" (exact tiles: 128x128 %.4g, 64x64 %.4g, 128x128 k16 %.4g)", rows[i].t88, rows[i].t44, rows[i].t88k16);
    if (rows[i].checked) printf("; exact result %s the CPU lane's", rows[i].same ? "bit-identical to" : "DIFFERS from");
    printf("\n");
    fflush(stdout);
  }
  dispatch_figures df;
  bench_dispatch(&df);

  printf("\n| figure | value |\n|---|---|\n");
  for (int i = 0; i < nsizes; i++) {
    printf("| exact matmul n=%d, device-resident | %.4g TFLOP/s |\n", rows[i].n, rows[i].exact);
    printf("| fp32 matmul n=%d, device-resident | %.4g TFLOP/s |\n", rows[i].n, rows[i].fp32);
    if (sweep)
      printf("| exact n=%d by tile: 128x128 / 64x64 / 128x128 k16 | %.4g / %.4g / %.4g TFLOP/s |\n", rows[i].n,
             rows[i].t88, rows[i].t44, rows[i].t88k16);
  }
  if (nsizes && rows[0].checked)
    printf("| exact n=%d vs CPU lane | %s |\n", rows[0].n, rows[0].same ? "bit-identical" : "DIFFERENT");
  printf("| %d tiny dependent ops in one scope | %.2f us per op (recording %.2f us) |\n", NOPS, df.scope_chain * 1e6,
         df.scope_chain_record * 1e6);
  printf("| %d tiny independent ops in one scope | %.2f us per op |\n", NOPS, df.scope_indep * 1e6);
  printf("| %d tiny dependent ops, no scope, one sync | %.2f us per op |\n", NOPS, df.batched_chain * 1e6);
  printf("| tiny op + its own submit and wait | %.2f us per op |\n", df.each_synced * 1e6);
  weft_fabric_close(f);
  return 0;
}
