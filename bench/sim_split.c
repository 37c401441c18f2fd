/* sim_split.c - the fabric's choice between two lanes, on a simulated machine. Not a measurement of any
 * machine: a tool for trying the split's timing rules (src/sched/split.c) on many runs without a GPU.
 *
 * Two fake lanes, "simcpu" (host memory) and "simgpu" (a device), compute a tiny op for real (so every
 * result is checked by the fabric's own paths) but advance a virtual clock, the fabric's only clock, by
 * times drawn from a model of the H200 machine's lanes (measured there, see docs/DESIGN.md and the notes
 * of the split's sessions):
 * - the CPU runs at its loop's speed times lognormal noise (sigma 0.18, p90 about 1.3x the median) with 5%
 *   of runs 1.5-3x slower; after 0.3 ms without a run it is cold: 1 + 0.5 e^(-w / 0.32 ms) slower after w
 *   seconds of work, its first run twice that (20% slow after 0.3 ms of work, 5% after 0.75 ms);
 * - with stretches on (the default), the CPU also has slow stretches, 2.2x, about 40 ms long, about 150 ms
 *   apart (exponentially distributed), as seen within single processes there;
 * - the GPU runs at its speed with 3% noise and 1% of runs up to 2x slower; after 0.3 ms idle its first
 *   run takes 3.5x and its second 1.5x.
 * On top runs bench_split's method: each lane pinned picks the best, 32 auto runs, then up to 101 pairs of
 * 8-run blocks (auto, then the best pinned), the ratio the median of the block ratios. Each row is a fresh
 * fabric; the same seeds run the control (the best lane in auto's place), whose misses are the method's.
 *
 * Usage: sim_split [rows]   (SIM_STRETCHES=0: no slow stretches; SIM_TRACE=k: every auto run of row k of
 * the 130/180 us pair, with where it ran and the candidates' medians) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft.h"

static double vt; /* virtual seconds: only the fake lanes move it */
static double clock_read(void *ctx) {
  (void)ctx;
  return vt;
}

typedef struct model {
  double cpu, gpu;                     /* loop speeds, seconds a run */
  double slow, dwell_fast, dwell_slow; /* the CPU's slow stretches: factor, mean seconds between and of them */
  double sigma_cpu, out_cpu;           /* lognormal noise, share of outliers */
  double sigma_gpu, out_gpu;
  double cold_amp, cold_tau, idle_gap; /* cold after idle_gap: 1 + amp e^(-w / tau) */
} model;

typedef struct sim {
  model m;
  tu_rng rng;
  int slow_now;
  double slow_until;
  double cpu_last_end, cpu_warm, gpu_last_end;
  int gpu_seq;
} sim;

static double unif(sim *s) { return (double)(tu_rng_next(&s->rng) >> 11) * (1.0 / 9007199254740992.0); }
static double gauss(sim *s) {
  double u1 = unif(s), u2 = unif(s);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}
static double expo(sim *s, double mean) { return -mean * log(1 - unif(s)); }

typedef struct fake {
  char name[16];
  int host;
  sim *s;
} fake;

static void fk_describe(void *self, weft_lane_desc *out) {
  fake *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name, out->kind = "sim", out->device = "simulated", out->driver = "", out->details = "";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32);
  out->flags = l->host ? WEFT_LANE_HOST_MEMORY : 0;
}
static void fk_destroy(void *self) { free(self); }

/* The time a run takes, as the model has it now; the clock moves on by it. */
static weft_status fk_run(void *self, const weft_op *op) {
  fake *l = self;
  sim *s = l->s;
  const model *m = &s->m;
  double f;
  if (l->host) {
    while (m->dwell_fast > 0 && vt >= s->slow_until) {
      s->slow_now = !s->slow_now;
      s->slow_until += expo(s, s->slow_now ? m->dwell_slow : m->dwell_fast);
    }
    const int first = vt - s->cpu_last_end > m->idle_gap;
    if (first) s->cpu_warm = 0;
    f = (s->slow_now ? m->slow : 1.0) * (1 + m->cold_amp * exp(-s->cpu_warm / m->cold_tau)) * (first ? 2 : 1);
    f *= exp(m->sigma_cpu * gauss(s));
    if (unif(s) < m->out_cpu) f *= 1.5 + 1.5 * unif(s);
    const double t = m->cpu * f;
    vt += t;
    s->cpu_warm += t, s->cpu_last_end = vt;
  } else {
    if (vt - s->gpu_last_end > m->idle_gap) s->gpu_seq = 0;
    f = s->gpu_seq == 0 ? 3.5 : s->gpu_seq == 1 ? 1.5 : 1.0;
    f *= exp(m->sigma_gpu * gauss(s));
    if (unif(s) < m->out_gpu) f *= 1.5 + 0.5 * unif(s);
    vt += m->gpu * f;
    s->gpu_seq++, s->gpu_last_end = vt;
  }
  weft_reference_run(op);
  return WEFT_OK;
}

static const weft_lane_vtable VT = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
    .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc, .buffer_free = tu_fake_free,
    .upload = tu_fake_upload, .download = tu_fake_download, .run = fk_run,
};

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct rig {
  weft_fabric *f;
  weft_tensor *a, *b, *c;
  float *ha, *hb, *hc;
  size_t n;
  int cpu, gpu;
} rig;

/* One run as bench_split times it: write a and b, matmul, read c. */
static double run1(rig *r, int lane) {
  weft_op_desc d = WEFT_OP_DESC_INIT;
  d.lane = lane;
  d.contract = WEFT_CONTRACT_FP32;
  const double t0 = vt;
  weft_tensor_write(r->a, r->ha, r->n);
  weft_tensor_write(r->b, r->hb, r->n);
  if (weft_op_matmul(r->f, &d, r->a, 0, r->b, 0, r->c) != WEFT_OK || weft_tensor_read(r->c, r->hc, r->n) != WEFT_OK) {
    fprintf(stderr, "sim_split: %s\n", weft_fabric_last_error(r->f));
    exit(1);
  }
  return vt - t0;
}

/* One bench row on a fresh fabric: the median block ratio; *total the summed-time ratio, *on_best the share
 * of the measured auto runs that ran on the best lane. */
static double row(const model *m, uint64_t seed, int control, int trace, double *total, double *on_best) {
  static sim s;
  memset(&s, 0, sizeof s);
  s.m = *m, s.rng.s = seed;
  vt = 10.0;
  s.slow_until = vt + (m->dwell_fast > 0 ? expo(&s, m->dwell_fast) : 1e30);
  s.cpu_last_end = s.gpu_last_end = -1;
  rig r;
  memset(&r, 0, sizeof r);
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu";
  d.calibration = WEFT_CALIBRATION_OFF;
  if (weft_fabric_open(&d, &r.f) != WEFT_OK) {
    fprintf(stderr, "sim_split: %s\n", weft_open_error());
    exit(1);
  }
  weft_testing_set_clock(r.f, clock_read, NULL);
  fake *fc = calloc(1, sizeof *fc), *fg = calloc(1, sizeof *fg);
  snprintf(fc->name, sizeof fc->name, "simcpu"), fc->host = 1, fc->s = &s;
  snprintf(fg->name, sizeof fg->name, "simgpu"), fg->s = &s;
  size_t ic = 0, ig = 0;
  if (weft_testing_add_lane(r.f, &VT, fc) != WEFT_OK || weft_testing_add_lane(r.f, &VT, fg) != WEFT_OK ||
      weft_fabric_lane_find(r.f, "simcpu", &ic) != WEFT_OK || weft_fabric_lane_find(r.f, "simgpu", &ig) != WEFT_OK) {
    fprintf(stderr, "sim_split: adding the lanes: %s\n", weft_fabric_last_error(r.f));
    exit(1);
  }
  r.cpu = (int)ic, r.gpu = (int)ig;
  const int64_t B = 4, n = 4;
  const double flops = 2.0 * (double)(n * n * n * B);
  /* the models: the real CPU lane far off; simcpu as it runs; simgpu a fixed cost the size of simcpu's
   * time, so both are candidates and a split would give simgpu nothing (none is tried: the shares of a
   * split run concurrently, which one virtual clock cannot show) */
  for (int c = 0; c < 2; c++) {
    weft_fabric_set_cost_model(r.f, 0, WEFT_COST_MATMUL, (weft_contract)c, 1.0, 1e9);
    weft_fabric_set_cost_model(r.f, ic, WEFT_COST_MATMUL, (weft_contract)c, 1e-7, flops / m->cpu);
    weft_fabric_set_cost_model(r.f, ig, WEFT_COST_MATMUL, (weft_contract)c, m->cpu, 1e15);
  }
  weft_fabric_set_cost_model(r.f, ig, WEFT_COST_UPLOAD, 0, 0, 1e15);
  weft_fabric_set_cost_model(r.f, ig, WEFT_COST_DOWNLOAD, 0, 0, 1e15);
  int64_t dims[3] = {B, n, n};
  r.n = (size_t)(B * n * n);
  r.ha = calloc(r.n, sizeof(float)), r.hb = calloc(r.n, sizeof(float)), r.hc = calloc(r.n, sizeof(float));
  for (size_t i = 0; i < r.n; i++) r.ha[i] = (float)(i % 7) * 0.25f, r.hb[i] = (float)(i % 5) * 0.5f;
  weft_tensor_wrap(r.f, 3, dims, r.ha, &r.a), weft_tensor_wrap(r.f, 3, dims, r.hb, &r.b);
  weft_tensor_wrap(r.f, 3, dims, r.hc, &r.c);
  /* bench_split's method */
  int lanes[2] = {r.cpu, r.gpu}, best = -1;
  double best_t = 0;
  for (int l = 0; l < 2; l++) {
    double t[9];
    run1(&r, lanes[l]);
    int reps = 0;
    const double start = vt;
    while (reps < 9 && (reps < 3 || vt - start < 0.5)) t[reps++] = run1(&r, lanes[l]);
    qsort(t, (size_t)reps, sizeof t[0], cmpd);
    if (best < 0 || t[reps / 2] < best_t) best = lanes[l], best_t = t[reps / 2];
  }
  const int subject = control ? best : WEFT_LANE_AUTO;
  for (int w = 0; w < 32; w++) run1(&r, subject);
  double pr[101], blk[8], sum_a = 0, sum_b = 0;
  int pairs = 0, on = 0, runs = 0;
  const double start = vt;
  while (pairs < 101 && (pairs < 3 || vt - start < 1.0)) {
    for (int i = 0; i < 8; i++) {
      blk[i] = run1(&r, subject), sum_a += blk[i], runs++;
      on += weft_fabric_last_lane(r.f) == best;
      if (trace) {
        weft_split_report rep;
        weft_split_last(r.f, &rep);
        printf("%9.3f ms  %s %7.1f us %s |", (vt - 10) * 1e3, weft_fabric_last_lane(r.f) == r.cpu ? "simcpu" : "simgpu",
               blk[i] * 1e6, s.slow_now ? "slow" : "    ");
        for (size_t q = 0; q < rep.ncandidates; q++) printf(" %s %.1f", rep.candidate[q], rep.candidate_seconds[q] * 1e6);
        printf("\n");
      }
    }
    qsort(blk, 8, sizeof blk[0], cmpd);
    const double am = 0.5 * (blk[3] + blk[4]);
    for (int i = 0; i < 8; i++) sum_b += blk[i] = run1(&r, best);
    qsort(blk, 8, sizeof blk[0], cmpd);
    pr[pairs++] = am / (0.5 * (blk[3] + blk[4]));
  }
  qsort(pr, (size_t)pairs, sizeof pr[0], cmpd);
  *total = sum_a / sum_b;
  *on_best = (double)on / runs;
  weft_tensor_destroy(r.a), weft_tensor_destroy(r.b), weft_tensor_destroy(r.c);
  free(r.ha), free(r.hb), free(r.hc);
  weft_fabric_close(r.f);
  return pr[pairs / 2];
}

int main(int argc, char **argv) {
  const int rows = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 200;
  model base = {0, 0, 2.2, 0.15, 0.04, 0.18, 0.05, 0.03, 0.01, 0.5, 0.32e-3, 0.3e-3};
  const char *st = getenv("SIM_STRETCHES");
  if (st && strcmp(st, "0") == 0) base.dwell_fast = 0;
  /* pairs of loop speeds (CPU, GPU) seen on the H200 machine at fp32, n=128, b per entry, B = 2 ... 16 */
  const double speeds[][2] = {{40e-6, 52e-6}, {70e-6, 85e-6}, {80e-6, 87e-6}, {130e-6, 180e-6}};
  const char *tr = getenv("SIM_TRACE");
  if (tr) {
    model m = base;
    m.cpu = speeds[3][0], m.gpu = speeds[3][1];
    double tot, on;
    const double r = row(&m, 0x1234567ull + (uint64_t)atoi(tr) * 7919, 0, 1, &tot, &on);
    printf("ratio %.3f, total %.3f\n", r, tot);
    return 0;
  }
  printf("simulated CPU and GPU (slow stretches %s), %d rows each; a row as bench_split's, auto/best\n",
         base.dwell_fast > 0 ? "on" : "off", rows);
  for (size_t p = 0; p < sizeof speeds / sizeof speeds[0]; p++) {
    model m = base;
    m.cpu = speeds[p][0], m.gpu = speeds[p][1];
    for (int control = 1; control >= 0; control--) {
      int over = 0;
      double sum = 0, tsum = 0, on = 0, worst = 0;
      for (int k = 0; k < rows; k++) {
        double tot, ob;
        const double r = row(&m, 0x1234567ull + (uint64_t)k * 7919, control, 0, &tot, &ob);
        over += r > 1.03, sum += r, tsum += tot, on += ob;
        worst = r > worst ? r : worst;
      }
      printf("cpu %3.0f us, gpu %3.0f us, %-7s: over 1.03 in %3d of %d rows; mean %.4f, worst %.3f; total %.4f; "
             "%.1f%% of auto runs on the best\n",
             m.cpu * 1e6, m.gpu * 1e6, control ? "control" : "auto", over, rows, sum / rows, worst, tsum / rows,
             100 * on / rows);
    }
  }
  return 0;
}
