/* test_route.c - the router and cost model, driven with fake lanes and an injected clock so every decision
 * is checked exactly: least predicted finish time, contracts, residency, queue wait, refinement that
 * ignores one outlier, the explanation's arithmetic, and the calibration cache surviving corrupt files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/reference.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft.h"

static int failures = 0, checks = 0;
#define CHECK(cond, ...)                                                                                           \
  do {                                                                                                             \
    checks++;                                                                                                      \
    if (!(cond)) {                                                                                                 \
      failures++;                                                                                                  \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                  \
      printf(__VA_ARGS__);                                                                                         \
      printf("\n");                                                                                                \
    }                                                                                                              \
  } while (0)

/* A fake device lane: host malloc behind a device-style interface, the reference kernels, and a run
 * counter. Its costs are whatever the test sets. */
/* The injected clock: each read advances by `step` seconds. */
typedef struct fake_clock {
  double t, step;
} fake_clock;
static void fake_clock_advance(fake_clock *c, double seconds) { c->t += seconds; }

typedef struct fake {
  char name[32];
  weft_contract_mask contracts;
  uint32_t flags; /* WEFT_LANE_HOST_MEMORY: a host lane */
  int runs;
  int fail_at; /* > 0: the run with this number reports the device lost */
  struct fake_clock *clock; /* set: each run advances it by `per_entry` seconds per batch entry */
  double per_entry;
  int slow_runs;      /* its first slow_runs runs take slow_factor times as long (the machine busy) */
  double slow_factor;
  /* cold_for > 0: after another lane ran (the clock moved since its last run), its runs take cold_factor
   * times as long until it has run cold_for seconds in a row, as a host lane idle a while does */
  double cold_for, cold_factor, warm_so_far, last_end;
  /* its runs that start while the clock is in [stretch_from, stretch_to) take stretch_factor times as long
   * (a slow stretch of the machine, tens of ms, as the H200 machine's CPU had) */
  double stretch_from, stretch_to, stretch_factor;
} fake;

static void fk_describe(void *self, weft_lane_desc *out) {
  fake *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = "fake";
  out->device = "fake device";
  out->driver = "";
  out->details = "test lane";
  out->contracts = l->contracts;
  out->flags = l->flags;
}
static void fk_destroy(void *self) { free(self); }
static weft_status fk_run(void *self, const weft_op *op) {
  fake *l = self;
  if (++l->runs == l->fail_at) return WEFT_ERR_LANE_FAILED;
  double slow = l->runs <= l->slow_runs ? l->slow_factor : 1.0;
  if (l->clock && l->cold_for > 0) {
    if (l->clock->t != l->last_end) l->warm_so_far = 0;
    if (l->warm_so_far < l->cold_for) slow *= l->cold_factor;
  }
  if (l->clock && l->stretch_factor > 0 && l->clock->t >= l->stretch_from && l->clock->t < l->stretch_to)
    slow *= l->stretch_factor;
  if (l->clock) {
    const double t = slow * l->per_entry * (double)(op->kind == WEFT_OP_MATMUL ? op->batch : 1);
    fake_clock_advance(l->clock, t);
    l->warm_so_far += t, l->last_end = l->clock->t;
  }
  weft_reference_run(op);
  return WEFT_OK;
}
static const weft_lane_vtable FAKE_VT = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
    .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc, .buffer_free = tu_fake_free,
    .upload = tu_fake_upload, .download = tu_fake_download, .run = fk_run,
};

static fake *add_fake_flags(weft_fabric *f, const char *name, weft_contract_mask contracts, uint32_t flags,
                            size_t *out_index) {
  fake *l = calloc(1, sizeof *l);
  snprintf(l->name, sizeof l->name, "%s", name);
  l->contracts = contracts;
  l->flags = flags;
  if (weft_testing_add_lane(f, &FAKE_VT, l) != WEFT_OK) return NULL;
  weft_fabric_lane_find(f, name, out_index);
  return l;
}
static fake *add_fake(weft_fabric *f, const char *name, weft_contract_mask contracts, size_t *out_index) {
  return add_fake_flags(f, name, contracts, 0, out_index);
}


static double clock_read(void *ctx) {
  fake_clock *c = ctx;
  double now = c->t;
  c->t += c->step;
  return now;
}

static weft_tensor *mat(weft_fabric *f, int64_t r, int64_t c) {
  int64_t d[2] = {r, c};
  weft_tensor *t = NULL;
  weft_tensor_create(f, 2, d, NULL, &t);
  return t;
}

static const weft_contract_mask EXACT_FP32 =
    WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32);

static void set_models(weft_fabric *f, size_t cpu, size_t gpu) {
  /* cpu: 1 us + flops / 100 GFLOP/s, no transfers. gpu: 50 us + flops / 10 TFLOP/s, 10 us + bytes / 10 GB/s each
   * way. Crossover (from host data): roughly n = 100. */
  for (int c = 0; c < 2; c++) {
    weft_fabric_set_cost_model(f, cpu, WEFT_COST_MATMUL, (weft_contract)c, 1e-6, 100e9);
    weft_fabric_set_cost_model(f, gpu, WEFT_COST_MATMUL, (weft_contract)c, 50e-6, 10e12);
  }
  weft_fabric_set_cost_model(f, cpu, WEFT_COST_ELEMENTWISE, 0, 0.1e-6, 1e9);
  weft_fabric_set_cost_model(f, gpu, WEFT_COST_ELEMENTWISE, 0, 20e-6, 100e9);
  weft_fabric_set_cost_model(f, cpu, WEFT_COST_UPLOAD, 0, 0, 0);
  weft_fabric_set_cost_model(f, cpu, WEFT_COST_DOWNLOAD, 0, 0, 0);
  weft_fabric_set_cost_model(f, gpu, WEFT_COST_UPLOAD, 0, 10e-6, 10e9);
  weft_fabric_set_cost_model(f, gpu, WEFT_COST_DOWNLOAD, 0, 10e-6, 10e9);
}

static int explain_mm(weft_fabric *f, int64_t n, weft_contract c, weft_route_explanation *e) {
  weft_route_query q = {WEFT_OP_MATMUL, c, 1, n, n, n, 0, 0};
  if (weft_route_explain(f, &q, e) != WEFT_OK) return -2;
  return e->chosen;
}

/* A fabric of the CPU lane alone, no calibration (the tests set models themselves). */
static weft_fabric *open_cpu(void) {
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu";
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  CHECK(weft_fabric_open(&d, &f) == WEFT_OK, "open: %s", weft_open_error());
  return f;
}

/* The CPU lane (index 0) and a fake "gpu" with set_models' costs, on the injected clock `clk`. */
static weft_fabric *open_cpu_gpu(fake_clock *clk, fake **out_gpu, size_t *out_gpu_index) {
  weft_fabric *f = open_cpu();
  weft_testing_set_clock(f, clock_read, clk);
  fake *g = add_fake(f, "gpu", EXACT_FP32, out_gpu_index);
  set_models(f, 0, *out_gpu_index);
  if (out_gpu) *out_gpu = g;
  return f;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 + 1e-9 * fabs(b); }

static void test_least_finish_time(void) {
  fake_clock clk = {100.0, 0.0};
  size_t cpu = 0, gpu = 0;
  weft_fabric *f = open_cpu_gpu(&clk, NULL, &gpu);
  weft_route_explanation e;
  CHECK(explain_mm(f, 8, WEFT_CONTRACT_EXACT, &e) == (int)cpu, "n=8 goes to the cpu (chose %d)", e.chosen);
  CHECK(explain_mm(f, 1024, WEFT_CONTRACT_EXACT, &e) == (int)gpu, "n=1024 goes to the gpu (chose %d)", e.chosen);
  /* the explanation's parts, exactly: gpu at n=1024 from host data */
  double flops = 2.0 * 1024 * 1024 * 1024, bytes = 4.0 * 1024 * 1024;
  const weft_route_cost *g = &e.lanes[gpu], *c = &e.lanes[cpu];
  CHECK(near(e.work, flops), "work %g", e.work);
  CHECK(near(g->alpha, 50e-6) && near(g->compute, flops / 10e12), "gpu alpha %g compute %g", g->alpha, g->compute);
  CHECK(near(g->transfer, 2 * (10e-6 + bytes / 10e9) + (10e-6 + bytes / 10e9)),
        "gpu transfer: two inputs up and the result down: %g", g->transfer);
  CHECK(near(g->total, g->wait + g->transfer + g->alpha + g->compute), "total is the sum of the parts");
  CHECK(c->transfer == 0 && near(c->compute, flops / 100e9), "cpu moves nothing: %g %g", c->transfer, c->compute);
  CHECK(strcmp(g->lane, "gpu") == 0 && g->eligible && g->why_not[0] == '\0', "lane entry named and eligible");
  weft_fabric_close(f);
}

static void test_contracts(void) {
  weft_fabric *f = open_cpu();
  size_t tens = 0;
  add_fake(f, "tensor", WEFT_CONTRACT_BIT(WEFT_CONTRACT_TF32), &tens);
  /* make the tensor lane look irresistibly fast: it must still never get an exact op */
  weft_fabric_set_cost_model(f, tens, WEFT_COST_MATMUL, WEFT_CONTRACT_TF32, 0, 1e18);
  weft_route_explanation e;
  CHECK(explain_mm(f, 2048, WEFT_CONTRACT_EXACT, &e) == 0, "exact never goes to a tf32-only lane");
  CHECK(!e.lanes[tens].eligible && strstr(e.lanes[tens].why_not, "contract"), "why_not names the contract: '%s'",
        e.lanes[tens].why_not);
  CHECK(explain_mm(f, 4, WEFT_CONTRACT_TF32, &e) == (int)tens, "tf32 goes to the only lane that honours it");
  weft_route_query q = {WEFT_OP_MATMUL, WEFT_CONTRACT_BF16, 1, 4, 4, 4, 0, 0};
  CHECK(weft_route_explain(f, &q, &e) == WEFT_OK && e.chosen == -1, "bf16: no lane, chosen -1");
  /* running it is an error that says so */
  weft_tensor *a = mat(f, 4, 4), *b = mat(f, 4, 4), *c = mat(f, 4, 4);
  weft_op_desc od = {WEFT_CONTRACT_BF16, WEFT_LANE_AUTO};
  CHECK(weft_op_matmul(f, &od, a, 0, b, 0, c) == WEFT_ERR_UNSUPPORTED, "bf16 matmul unsupported");
  CHECK(strstr(weft_fabric_last_error(f), "bf16") != NULL, "message names the contract: %s", weft_fabric_last_error(f));
  weft_fabric_close(f);
}

static void test_residency(void) {
  fake_clock clk = {0.0, 0.0};
  size_t cpu = 0, gpu = 0;
  fake *g;
  weft_fabric *f = open_cpu_gpu(&clk, &g, &gpu);
  /* n = 128 from host data: the cpu wins (43 us against the gpu's 100 us, mostly transfers); with the
   * operands on the gpu it is 50 us there against 60 us for the cpu, which would have to fetch c */
  weft_tensor *a = mat(f, 128, 128), *b = mat(f, 128, 128), *c = mat(f, 128, 128), *c2 = mat(f, 128, 128);
  CHECK(weft_op_matmul(f, NULL, a, 0, b, 0, c) == WEFT_OK && weft_fabric_last_lane(f) == (int)cpu,
        "host data, n=128: cpu (ran on %d)", weft_fabric_last_lane(f));
  /* once the operands live on the gpu, the same op stays there */
  weft_op_desc pin = {WEFT_CONTRACT_EXACT, (int)gpu};
  CHECK(weft_op_matmul(f, &pin, a, 0, b, 0, c) == WEFT_OK, "pinned to gpu");
  CHECK(strcmp(weft_tensor_location(c), "gpu") == 0, "c lives on the gpu: %s", weft_tensor_location(c));
  clk.t += 1.0; /* the gpu has long finished */
  int before = g->runs;
  CHECK(weft_op_matmul(f, NULL, c, 0, b, 0, c2) == WEFT_OK && weft_fabric_last_lane(f) == (int)gpu,
        "resident chain stays on the gpu (ran on %d)", weft_fabric_last_lane(f));
  CHECK(g->runs == before + 1, "the gpu ran it");
  weft_route_explanation e;
  CHECK(weft_route_last(f, &e) == WEFT_OK && e.chosen == (int)gpu && e.lanes[gpu].transfer == 0,
        "route_last: gpu with no transfer (%g)", e.lanes[gpu].transfer);
  CHECK(e.lanes[cpu].transfer > 0, "the cpu would have to bring c down: %g", e.lanes[cpu].transfer);
  weft_fabric_close(f);
}

static void test_queue_wait(void) {
  fake_clock clk = {0.0, 0.0};
  size_t gpu = 0;
  weft_fabric *f = open_cpu_gpu(&clk, NULL, &gpu);
  weft_tensor *a = mat(f, 512, 512), *b = mat(f, 512, 512), *c = mat(f, 512, 512);
  weft_op_desc pin = {WEFT_CONTRACT_EXACT, (int)gpu};
  weft_op_matmul(f, &pin, a, 0, b, 0, c); /* the gpu is now busy for its predicted time */
  weft_route_explanation e;
  explain_mm(f, 512, WEFT_CONTRACT_EXACT, &e);
  double busy = 50e-6 + 2.0 * 512 * 512 * 512 / 10e12;
  CHECK(near(e.lanes[gpu].wait, busy), "gpu wait %g, expected %g", e.lanes[gpu].wait, busy);
  clk.t += 1.0; /* a second later the lane is free again */
  explain_mm(f, 512, WEFT_CONTRACT_EXACT, &e);
  CHECK(e.lanes[gpu].wait == 0, "wait after the lane drained: %g", e.lanes[gpu].wait);
  weft_fabric_close(f);
}

static void test_refinement_ignores_outlier(void) {
  fake_clock clk = {0.0, 0.0};
  size_t cpu = 0, gpu = 0;
  weft_fabric *f = open_cpu_gpu(&clk, NULL, &gpu);
  /* n = 80: predicted cpu 1 us + 10.24 us; gpu well above that with transfers */
  weft_tensor *a = mat(f, 80, 80), *b = mat(f, 80, 80), *c = mat(f, 80, 80);
  double pred = 1e-6 + 2.0 * 80 * 80 * 80 / 100e9;
  /* The op's time is the step between the clock reads around the lane's run. (Predicted over 10 us, so
   * every op is observed; smaller ones are sampled.) A 10x outlier would make the gpu look better. */
  for (int i = 0; i < 10; i++) {
    clk.step = i == 5 ? 10.0 * pred : pred;
    CHECK(weft_op_matmul(f, NULL, a, 0, b, 0, c) == WEFT_OK && weft_fabric_last_lane(f) == (int)cpu,
          "op %d stays on the cpu (ran on %d)", i, weft_fabric_last_lane(f));
  }
  weft_cost_line line;
  weft_fabric_cost_model(f, cpu, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
  CHECK(fabs(line.refine - 1.0) < 1e-3, "one outlier leaves the refinement at 1 (%g)", line.refine);
  /* a lasting change does move it: ten observations at 3x */
  for (int i = 0; i < 10; i++) {
    clk.step = 3.0 * pred;
    weft_op_matmul(f, NULL, a, 0, b, 0, c);
  }
  weft_fabric_cost_model(f, cpu, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
  CHECK(fabs(line.refine - 3.0) < 1e-2, "a lasting 3x slowdown is learned (%g)", line.refine);
  weft_fabric_close(f);
}

static void test_cache(void) {
  char dir[] = "/tmp/weft-route-test-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  setenv("XDG_CACHE_HOME", dir, 1);
  char path[512];
  CHECK(weft_cost_cache_path(path, sizeof path) == WEFT_OK && strstr(path, dir) == path, "cache path %s", path);
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu";
  d.cpu_threads = 1;
  d.calibration = WEFT_CALIBRATION_FORCE;
  weft_fabric *f;
  CHECK(weft_fabric_open(&d, &f) == WEFT_OK, "open with forced calibration");
  weft_cost_line line;
  weft_fabric_cost_model(f, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
  CHECK(line.source == WEFT_COST_MEASURED && line.beta > 1e8 && line.alpha >= 0 && line.points >= 3,
        "measured: alpha %g beta %g points %d", line.alpha, line.beta, line.points);
  weft_fabric_close(f);
  CHECK(access(path, R_OK) == 0, "cache written at %s", path);
  d.calibration = WEFT_CALIBRATION_AUTO;
  CHECK(weft_fabric_open(&d, &f) == WEFT_OK, "reopen");
  weft_fabric_cost_model(f, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
  CHECK(line.source == WEFT_COST_CACHED, "read back from the cache (source %d)", line.source);
  weft_fabric_close(f);
  /* a corrupt file: a note, priors, no crash; then a measurement rewrites it */
  FILE *fp = fopen(path, "w");
  fputs("{\"format\": 1, \"lanes\": [tru", fp);
  fclose(fp);
  CHECK(weft_fabric_open(&d, &f) == WEFT_OK, "open over a corrupt cache");
  weft_fabric_cost_model(f, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
  CHECK(line.source == WEFT_COST_PRIOR, "corrupt cache: priors until measured (source %d)", line.source);
  CHECK(weft_fabric_calibrate(f) == WEFT_OK, "calibrate");
  weft_fabric_close(f);
  /* another weft version's cache is not trusted */
  fp = fopen(path, "w");
  fputs("{\"format\": 3, \"weft_version\": \"0.0.1\", \"lanes\": []}", fp);
  fclose(fp);
  CHECK(weft_fabric_open(&d, &f) == WEFT_OK, "open over a foreign-version cache");
  weft_fabric_cost_model(f, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
  CHECK(line.source == WEFT_COST_PRIOR, "foreign version: priors (source %d)", line.source);
  weft_fabric_close(f);
  unlink(path);
  char sub[600];
  snprintf(sub, sizeof sub, "%s/weft", dir);
  rmdir(sub);
  rmdir(dir);
}

static void test_bad_queries(void) {
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f;
  weft_fabric_open(&d, &f);
  weft_route_explanation e;
  weft_route_query q = {WEFT_OP_MATMUL, WEFT_CONTRACT_EXACT, 1, 0, 4, 4, 0, 0};
  CHECK(weft_route_explain(f, &q, &e) == WEFT_ERR_SHAPE, "m = 0 is a shape error");
  q.op = (weft_op_kind)99;
  CHECK(weft_route_explain(f, &q, &e) == WEFT_ERR_INVALID_ARGUMENT, "unknown op");
  CHECK(weft_route_explain(f, NULL, &e) == WEFT_ERR_INVALID_ARGUMENT, "NULL query");
  CHECK(weft_fabric_set_cost_model(f, 0, WEFT_COST_MATMUL, 0, -1, 1) == WEFT_ERR_INVALID_ARGUMENT, "negative alpha");
  CHECK(weft_fabric_set_cost_model(f, 0, WEFT_COST_MATMUL, 0, NAN, 1) == WEFT_ERR_INVALID_ARGUMENT, "NaN alpha");
  CHECK(weft_fabric_set_cost_model(f, 99, WEFT_COST_MATMUL, 0, 0, 1) == WEFT_ERR_NOT_FOUND, "no such lane");
  weft_route_explanation last;
  CHECK(weft_route_last(f, &last) == WEFT_ERR_STATE, "nothing routed yet");
  weft_fabric_close(f);
}

/* A batched matmul [B,M,K].[K,N] for the split tests: seeded host operands, room for a result, and the
 * reference's result. */
typedef struct mm_case {
  int64_t B, M, K, N;
  float *ha, *hb, *got, *want;
  weft_tensor *a, *b, *c; /* in the fabric: a and b hold ha and hb */
} mm_case;

static mm_case mm_case_make(weft_fabric *f, int64_t B, int64_t M, int64_t K, int64_t N, uint32_t x) {
  mm_case m = {B, M, K, N, malloc(sizeof(float) * B * M * K), malloc(sizeof(float) * K * N),
               malloc(sizeof(float) * B * M * N), malloc(sizeof(float) * B * M * N), NULL, NULL, NULL};
  for (int64_t i = 0; i < B * M * K; i++) x = x * 1664525u + 1013904223u, m.ha[i] = (float)(int)(x >> 9) * 1e-6f;
  for (int64_t i = 0; i < K * N; i++) x = x * 1664525u + 1013904223u, m.hb[i] = (float)(int)(x >> 9) * 1e-6f;
  weft_op ref;
  memset(&ref, 0, sizeof ref);
  ref.kind = WEFT_OP_MATMUL, ref.batch = B, ref.m = M, ref.n = N, ref.k = K;
  ref.in[0] = m.ha, ref.in[1] = m.hb, ref.out[0] = m.want;
  weft_reference_run(&ref);
  int64_t da[3] = {B, M, K}, db[2] = {K, N}, dc[3] = {B, M, N};
  weft_tensor_create(f, 3, da, m.ha, &m.a);
  weft_tensor_create(f, 2, db, m.hb, &m.b);
  weft_tensor_create(f, 3, dc, NULL, &m.c);
  return m;
}

static void mm_case_free(mm_case *m) { free(m->ha), free(m->hb), free(m->got), free(m->want); }

/* Data-parallel split: two fake device lanes that are as fast as the cpu share a batch with it; a lane
 * whose fixed cost outweighs any share gets nothing; the bits are the reference's. */
static void test_split(void) {
  weft_fabric *f = open_cpu();
  size_t cpu = 0, g1 = 0, g2 = 0;
  fake *l1 = add_fake(f, "gpu1", EXACT_FP32, &g1);
  fake *l2 = add_fake(f, "slow", EXACT_FP32, &g2);
  /* per entry 32.5 kflop: 32.5 us on the cpu, 16 us on gpu1 */
  weft_fabric_set_cost_model(f, cpu, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, 1e9);
  weft_fabric_set_cost_model(f, g1, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 5e-6, 2e9);
  weft_fabric_set_cost_model(f, g1, WEFT_COST_UPLOAD, 0, 1e-6, 1e12);
  weft_fabric_set_cost_model(f, g1, WEFT_COST_DOWNLOAD, 0, 1e-6, 1e12);
  /* "slow": a second of fixed cost per op - it must get nothing */
  weft_fabric_set_cost_model(f, g2, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1.0, 1e12);
  weft_fabric_set_cost_model(f, g2, WEFT_COST_UPLOAD, 0, 1e-6, 1e12);
  weft_fabric_set_cost_model(f, g2, WEFT_COST_DOWNLOAD, 0, 1e-6, 1e12);
  mm_case m = mm_case_make(f, 12, 33, 17, 29, 7);
  const int64_t B = m.B, M = m.M, K = m.K, N = m.N;
  float *ha = m.ha, *got = m.got, *want = m.want;
  weft_tensor *a = m.a, *b = m.b, *c = m.c;
  CHECK(weft_op_matmul(f, NULL, a, 0, b, 0, c) == WEFT_OK, "split matmul: %s", weft_fabric_last_error(f));
  weft_split_report rep;
  CHECK(weft_split_last(f, &rep) == WEFT_OK && rep.split == 1, "the batch was split (split=%d)", rep.split);
  int64_t total = 0, slow_entries = 0, gpu_entries = 0, cpu_entries = 0;
  for (size_t i = 0; i < rep.nshares; i++) {
    total += rep.shares[i].entries;
    if (strcmp(rep.shares[i].lane, "slow") == 0) slow_entries += rep.shares[i].entries;
    if (strcmp(rep.shares[i].lane, "gpu1") == 0) gpu_entries += rep.shares[i].entries;
    if (strcmp(rep.shares[i].lane, "cpu") == 0) cpu_entries += rep.shares[i].entries;
  }
  CHECK(total == B, "shares cover the batch: %lld", (long long)total);
  CHECK(slow_entries == 0 && l2->runs == 0, "the lane whose fixed cost outweighs its share gets nothing");
  /* gpu1 is twice the cpu's speed: about two thirds of the batch */
  CHECK(gpu_entries >= 7 && gpu_entries <= 9 && cpu_entries == B - gpu_entries && l1->runs == 1,
        "shares follow the speeds: gpu1 %lld, cpu %lld", (long long)gpu_entries, (long long)cpu_entries);
  CHECK(rep.predicted < rep.predicted_single, "the plan beats the best single lane (%g < %g)", rep.predicted,
        rep.predicted_single);
  weft_tensor_read(c, got, (size_t)(B * M * N));
  CHECK(memcmp(got, want, sizeof(float) * B * M * N) == 0, "split result is the reference's bits");
  CHECK(strcmp(weft_tensor_location(c), "host") == 0, "the result is on the host: %s", weft_tensor_location(c));
  /* a batch of one is never split */
  int64_t d1[3] = {1, M, K}, dc1[3] = {1, M, N};
  weft_tensor *a1, *c1;
  weft_tensor_create(f, 3, d1, ha, &a1);
  weft_tensor_create(f, 3, dc1, NULL, &c1);
  CHECK(weft_op_matmul(f, NULL, a1, 0, b, 0, c1) == WEFT_OK && weft_split_last(f, &rep) == WEFT_OK && rep.batch == 1 &&
            rep.split == 0 && rep.nshares == 0,
        "batch 1 is never split (batch %lld, split %d, %zu shares)", (long long)rep.batch, rep.split, rep.nshares);
  /* the cpu alone (the gpu's models made slow): no split, and the report says which lane */
  weft_fabric_set_cost_model(f, g1, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1.0, 1e12);
  CHECK(weft_op_matmul(f, NULL, a, 0, b, 0, c) == WEFT_OK && weft_split_last(f, &rep) == WEFT_OK && rep.split == 0 &&
            strcmp(rep.single_lane, "cpu") == 0 && weft_fabric_last_lane(f) == (int)cpu,
        "no split when one lane is best: split=%d single=%s", rep.split, rep.single_lane);
  mm_case_free(&m);
  weft_fabric_close(f);
}

/* A cpu fabric on an injected clock with two fake lanes, g1 and g2, that advance it by per_entry seconds
 * per entry (1 ms unless the caller changes it). The cpu is made slow (it gets nothing); to the models g1
 * and g2 both take 1 ms per entry (29.3 kflop), g2 after a fixed cost g2_alpha; transfers are free. */
typedef struct two_fakes {
  weft_fabric *f;
  fake *l1, *l2;
  size_t g1, g2;
} two_fakes;

static two_fakes two_fakes_open(fake_clock *clk, double g2_alpha) {
  two_fakes t = {open_cpu(), NULL, NULL, 0, 0};
  weft_testing_set_clock(t.f, clock_read, clk);
  t.l1 = add_fake(t.f, "g1", EXACT_FP32, &t.g1), t.l2 = add_fake(t.f, "g2", EXACT_FP32, &t.g2);
  t.l1->clock = t.l2->clock = clk;
  t.l1->per_entry = t.l2->per_entry = 1e-3;
  weft_fabric_set_cost_model(t.f, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1.0, 1e9);
  for (size_t g = t.g1; g <= t.g2; g++) {
    weft_fabric_set_cost_model(t.f, g, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, g == t.g2 ? g2_alpha : 1e-6, 29.282e6);
    weft_fabric_set_cost_model(t.f, g, WEFT_COST_UPLOAD, 0, 0, 1e15);
    weft_fabric_set_cost_model(t.f, g, WEFT_COST_DOWNLOAD, 0, 0, 1e15);
  }
  return t;
}

/* The split is kept only while it measures faster than the lanes alone. Two fake lanes whose models promise
 * that sharing a batch halves it, but which run one after the other (each advances the injected clock by
 * its share's time), gain nothing: once the split and each lane are measured (three times each), the op
 * runs on one lane, and now and then another candidate is measured again. Every result keeps the bits. */
static void test_split_measured(void) {
  fake_clock clk = {10.0, 0.0};
  two_fakes t = two_fakes_open(&clk, 1e-6); /* g1 and g2 alike */
  weft_fabric *f = t.f;
  fake *l1 = t.l1, *l2 = t.l2;
  mm_case m = mm_case_make(f, 8, 33, 17, 26, 11);
  const int64_t B = m.B, M = m.M, K = m.K, N = m.N;
  float *ha = m.ha, *got = m.got, *want = m.want;
  weft_tensor *a = m.a, *b = m.b, *c = m.c;
  int splits = 0, late_splits = 0, bits_ok = 1;
  weft_split_report rep;
  memset(&rep, 0, sizeof rep);
  for (int run = 0; run < 44; run++) {
    weft_tensor_write(a, ha, (size_t)(B * M * K)); /* fresh host data each time, as a caller's loop has */
    CHECK(weft_op_matmul(f, NULL, a, 0, b, 0, c) == WEFT_OK, "run %d: %s", run, weft_fabric_last_error(f));
    CHECK(weft_split_last(f, &rep) == WEFT_OK, "a report");
    splits += rep.split;
    if (run >= 10) late_splits += rep.split;
    weft_tensor_read(c, got, (size_t)(B * M * N));
    bits_ok &= memcmp(got, want, sizeof(float) * B * M * N) == 0;
    if (run == 0) CHECK(rep.split == 1, "the first run is split, as the models promise (split=%d)", rep.split);
  }
  CHECK(bits_ok, "every run, split or not, has the reference's bits");
  /* run 0 splits (b is then resident on the fakes: a new signature); runs 1..17 measure that one: the
   * split three times, then g1 and g2 each run four times untimed (warming it, as the caller's op) and three
   * times timed. g1 is kept; the others are as fast, so each is timed again 16 runs after its last timing,
   * three runs in a row: the split at runs 19..21 and 37..39 */
  CHECK(splits == 10 && late_splits == 6, "splits measured and dropped: %d in all, %d after the choice", splits,
        late_splits);
  /* measuring runs nothing twice: every call ran one lane, or both for a split (the cpu got nothing) */
  CHECK(l1->runs + l2->runs == 44 + splits, "each call ran the op once: %d lane runs for 44 calls, %d split",
        l1->runs + l2->runs, splits);
  CHECK(rep.measured_split > 0 && rep.measured_single > 0 && rep.measured_split >= 0.97 * rep.measured_single,
        "the report shows why: split %g s against one lane %g s", rep.measured_split, rep.measured_single);
  CHECK(rep.ncandidates == 3 && strcmp(rep.candidate[0], "split") == 0 && strcmp(rep.candidate[1], "g1") == 0 &&
            strcmp(rep.candidate[2], "g2") == 0 && rep.candidate_seconds[1] > 0,
        "the report lists what was measured: %zu candidates", rep.ncandidates);
  /* a lane that joins is a new candidate: the shape is measured anew, the newcomer among the lanes */
  size_t g3 = 0;
  fake *l3 = add_fake(f, "g3", EXACT_FP32, &g3);
  l3->clock = &clk;
  l3->per_entry = 1e-3;
  weft_fabric_set_cost_model(f, g3, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, 29.282e6);
  weft_fabric_set_cost_model(f, g3, WEFT_COST_UPLOAD, 0, 0, 1e15);
  weft_fabric_set_cost_model(f, g3, WEFT_COST_DOWNLOAD, 0, 0, 1e15);
  weft_tensor_write(a, ha, (size_t)(B * M * K));
  CHECK(weft_op_matmul(f, NULL, a, 0, b, 0, c) == WEFT_OK && weft_split_last(f, &rep) == WEFT_OK, "after g3 joined");
  int has_g3 = 0;
  for (size_t i = 0; i < rep.ncandidates; i++) has_g3 |= strcmp(rep.candidate[i], "g3") == 0;
  CHECK(has_g3 && rep.ncandidates == 4, "the lane that joined is measured too (%zu candidates)", rep.ncandidates);
  weft_tensor_read(c, got, (size_t)(B * M * N));
  CHECK(memcmp(got, want, sizeof(float) * B * M * N) == 0, "the bits after g3 joined");
  mm_case_free(&m);
  weft_fabric_close(f);
}

/* A lane timed while the machine was busy elsewhere is not written off for long: g2 is faster than g1, but
 * slow through its first timing; its second timing comes early (at 4% of the runs' cost, not 0.5%), finds
 * it fast, and the fabric moves to it. Timed again only at the 0.5% rate, it would stay on g1 for ~1500
 * runs. */
static void test_split_retime(void) {
  fake_clock clk = {10.0, 0.0};
  /* g2's 7 ms fixed cost to the models: a candidate (15 ms against 8), and no split is worth measuring
   * (its plan, 7.5 ms, is not 10% better than g1 alone) */
  two_fakes t = two_fakes_open(&clk, 7e-3);
  weft_fabric *f = t.f;
  const size_t g1 = t.g1, g2 = t.g2;
  t.l2->per_entry = 0.7e-3;
  t.l2->slow_runs = 6, t.l2->slow_factor = 3.0; /* its first timing: four runs to warm it, two timed */
  mm_case m = mm_case_make(f, 8, 33, 17, 26, 5);
  int on_g1_early = 0, on_g2_late = 0, bits_ok = 1;
  for (int run = 0; run < 320; run++) {
    /* fresh host data for both operands each time: the signature (where they live) stays one */
    weft_tensor_write(m.a, m.ha, (size_t)(m.B * m.M * m.K));
    weft_tensor_write(m.b, m.hb, (size_t)(m.K * m.N));
    CHECK(weft_op_matmul(f, NULL, m.a, 0, m.b, 0, m.c) == WEFT_OK, "run %d: %s", run, weft_fabric_last_error(f));
    weft_split_report rep;
    const int lane = weft_split_last(f, &rep) == WEFT_OK && rep.split ? -1 : weft_fabric_last_lane(f);
    if (run >= 40 && run < 140) on_g1_early += lane == (int)g1;
    if (run >= 270) on_g2_late += lane == (int)g2;
    weft_tensor_read(m.c, m.got, (size_t)(m.B * m.M * m.N));
    bits_ok &= memcmp(m.got, m.want, sizeof(float) * m.B * m.M * m.N) == 0;
  }
  CHECK(bits_ok, "every run has the reference's bits");
  CHECK(on_g1_early >= 90, "after g2's slow first timing, g1 runs (%d of 100 runs)", on_g1_early);
  CHECK(on_g2_late >= 40, "g2's second timing found it fast: it runs now (%d of the last 50 runs)", on_g2_late);
  mm_case_free(&m);
  weft_fabric_close(f);
}

/* g1 (a fake device lane) and h (a fake host-memory lane) on the injected clock, taking g1_s and h_s seconds
 * per batch entry; to the models the cpu is far off, g1 and h take 1 us plus their flops at g1_beta and
 * h_beta, and g1's transfers are free. */
typedef struct host_pair {
  weft_fabric *f;
  fake *l1, *l2;
  size_t g1, h;
} host_pair;

static host_pair host_pair_open(fake_clock *clk, double g1_s, double h_s, double g1_beta, double h_beta) {
  host_pair p = {open_cpu(), NULL, NULL, 0, 0};
  weft_testing_set_clock(p.f, clock_read, clk);
  p.l1 = add_fake(p.f, "g1", EXACT_FP32, &p.g1);
  p.l2 = add_fake_flags(p.f, "h", EXACT_FP32, WEFT_LANE_HOST_MEMORY, &p.h);
  p.l1->clock = p.l2->clock = clk;
  p.l1->per_entry = g1_s, p.l2->per_entry = h_s;
  weft_fabric_set_cost_model(p.f, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1.0, 1e9);
  weft_fabric_set_cost_model(p.f, p.g1, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, g1_beta);
  weft_fabric_set_cost_model(p.f, p.h, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, h_beta);
  weft_fabric_set_cost_model(p.f, p.g1, WEFT_COST_UPLOAD, 0, 0, 1e15);
  weft_fabric_set_cost_model(p.f, p.g1, WEFT_COST_DOWNLOAD, 0, 0, 1e15);
  return p;
}

/* One auto-routed run of m on fresh host data for a; its result is compared with the reference's bits
 * (*bits_ok cleared on a difference). Returns the lane it ran on, -1 for a split. */
static int mm_step(weft_fabric *f, mm_case *m, int run, int *bits_ok) {
  weft_tensor_write(m->a, m->ha, (size_t)(m->B * m->M * m->K));
  CHECK(weft_op_matmul(f, NULL, m->a, 0, m->b, 0, m->c) == WEFT_OK, "run %d: %s", run, weft_fabric_last_error(f));
  weft_split_report rep;
  const int lane = weft_split_last(f, &rep) == WEFT_OK && rep.split ? -1 : weft_fabric_last_lane(f);
  weft_tensor_read(m->c, m->got, (size_t)(m->B * m->M * m->N));
  *bits_ok &= memcmp(m->got, m->want, sizeof(float) * m->B * m->M * m->N) == 0;
  return lane;
}

/* n auto-routed runs of m (see mm_step); returns how many of runs [from, to) ran on `lane`. */
static int mm_runs_on(weft_fabric *f, mm_case *m, int n, int from, int to, int lane, int *bits_ok) {
  int on = 0;
  for (int run = 0; run < n; run++) {
    const int ran = mm_step(f, m, run, bits_ok);
    on += run >= from && run < to && ran == lane;
  }
  return on;
}

/* A host lane that comes back slowly after another ran is timed only once warm, and a device lane is not
 * held that long. h (a host-memory lane) is 25% faster than g1 in a loop (120 us a run against 160), but
 * 1.5x slower through its first 0.95 ms after the other ran, as the H200 machine's CPU is after GPU runs.
 * Timed after four untimed runs (its 5th to 7th, two of them cold) it would look slower than g1 at every
 * timing and never run; warmed for a millisecond, it is timed at its loop's speed and runs. g1, a device
 * lane, is timed after four untimed runs. */
static void test_split_warm(void) {
  fake_clock clk = {10.0, 0.0};
  /* to the models: g1 10 us an entry, h 120 (within 1 ms of g1, so a candidate; a split of the two only 8%
   * better than g1, so not one), both short enough to run inline, never queued */
  host_pair p = host_pair_open(&clk, 20e-6, 15e-6, 29.282e6 * 100, 29.282e6 / 0.12);
  p.l2->cold_for = 0.95e-3, p.l2->cold_factor = 1.5;
  mm_case m = mm_case_make(p.f, 8, 33, 17, 26, 7);
  int on_h_late = 0, bits_ok = 1, g1_first_burst = -1;
  for (int run = 0; run < 200; run++) {
    const int lane = mm_step(p.f, &m, run, &bits_ok);
    CHECK(lane != -1, "run %d: no split (the models put it under 10%% better)", run);
    if (lane == (int)p.h && g1_first_burst < 0) g1_first_burst = p.l1->runs;
    if (run >= 100) on_h_late += lane == (int)p.h;
  }
  CHECK(bits_ok, "every run has the reference's bits");
  /* the first call is a signature of its own (b is not on g1 yet): one run; then g1's burst, 4 + 3 runs */
  CHECK(g1_first_burst == 8, "g1 (a device lane) was first timed after four untimed runs: %d runs before h ran",
        g1_first_burst);
  CHECK(on_h_late >= 90, "h, timed once warm, runs (%d of the last 100 runs)", on_h_late);
  mm_case_free(&m);
  weft_fabric_close(p.f);
}

/* A slow stretch of the machine moves the fabric off a lane for its length, not for long after. h (a host
 * lane) takes 120 us a run against g1's 160, but from 20 ms to 60 ms into the test every run of h takes
 * 2.2x as long. The fabric moves to g1 during the stretch; once it ends, h's timings find it fast again and
 * the fabric goes back. Before h's rings followed such a stretch, its ring held the slow timings and h was
 * timed again only at its cost-based interval (over a thousand runs), so g1 kept running long after. */
static void test_split_stretch(void) {
  fake_clock clk = {10.0, 0.0};
  host_pair p = host_pair_open(&clk, 20e-6, 15e-6, 29.282e6 * 100, 29.282e6 / 0.12); /* as test_split_warm's */
  p.l2->stretch_from = 10.020, p.l2->stretch_to = 10.060, p.l2->stretch_factor = 2.2;
  mm_case m = mm_case_make(p.f, 8, 33, 17, 26, 9);
  int on_g1_in = 0, in = 0, on_h_after = 0, after = 0, bits_ok = 1, end_run = -1;
  for (int run = 0; (end_run < 0 || run < end_run + 600) && run < 100000; run++) {
    const double t0 = clk.t;
    const int lane = mm_step(p.f, &m, run, &bits_ok);
    if (t0 >= 10.030 && t0 < 10.060) in++, on_g1_in += lane == (int)p.g1; /* the stretch, after 10 ms to see it */
    if (end_run < 0 && t0 >= 10.060) end_run = run;
    if (end_run >= 0 && run >= end_run + 500) after++, on_h_after += lane == (int)p.h;
  }
  CHECK(bits_ok, "every run has the reference's bits");
  CHECK(in > 100 && on_g1_in >= in * 8 / 10, "during h's slow stretch g1 runs (%d of %d runs)", on_g1_in, in);
  CHECK(after == 100 && on_h_after >= 90, "after the stretch h runs again (%d of 100 runs, 500 runs after it ended)",
        on_h_after);
  mm_case_free(&m);
  weft_fabric_close(p.f);
}

/* A matmul of one matrix whose k dominates (a weight gradient's shape) is split along k, chained: gpu1 (which
 * does not offer matmul_acc) sums the first range of k from zero, the cpu continues the sums over the rest
 * (matmul_acc), pipelined over chunks of c's rows; every run has the bits of one lane. */
static void test_split_chain(void) {
  weft_fabric *f = open_cpu();
  size_t cpu = 0, g1 = 0;
  fake *l1 = add_fake(f, "gpu1", EXACT_FP32, &g1);
  /* 2 * 16 * 8 * 4096 = 1 Mflop: 1 ms on either lane alone, about half that shared */
  weft_fabric_set_cost_model(f, cpu, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, 1e9);
  weft_fabric_set_cost_model(f, g1, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 5e-6, 1e9);
  weft_fabric_set_cost_model(f, g1, WEFT_COST_UPLOAD, 0, 1e-6, 1e12);
  weft_fabric_set_cost_model(f, g1, WEFT_COST_DOWNLOAD, 0, 1e-6, 1e12);
  mm_case m = mm_case_make(f, 1, 16, 4096, 8, 11);
  int bits_ok = 1;
  CHECK(mm_step(f, &m, 0, &bits_ok) == -1, "the first run is the split along k");
  weft_split_report rep;
  CHECK(weft_split_last(f, &rep) == WEFT_OK && rep.split == 1 && rep.nshares == 2, "two shares of k (%zu)", rep.nshares);
  if (rep.nshares == 2) {
    CHECK(strcmp(rep.shares[0].lane, "gpu1") == 0 && rep.shares[0].first == 0,
          "gpu1, without matmul_acc, starts the sums (first share: %s from %lld)", rep.shares[0].lane,
          (long long)rep.shares[0].first);
    CHECK(strcmp(rep.shares[1].lane, "cpu") == 0 && rep.shares[1].first == rep.shares[0].entries &&
              rep.shares[0].entries + rep.shares[1].entries == 4096,
          "the cpu continues them over the rest of k (%lld + %lld)", (long long)rep.shares[0].entries,
          (long long)rep.shares[1].entries);
  }
  CHECK(bits_ok, "the chained split has one lane's bits");
  weft_lane_stats ls;
  CHECK(weft_fabric_lane_stats(f, cpu, &ls) == WEFT_OK && ls.ops[WEFT_OP_MATMUL_ACC] >= 1 && l1->runs >= 1,
        "gpu1 ran matmuls (%d), the cpu matmul_acc (%llu)", l1->runs, (unsigned long long)ls.ops[WEFT_OP_MATMUL_ACC]);
  mm_runs_on(f, &m, 40, 0, 40, -1, &bits_ok);
  CHECK(bits_ok, "forty runs more (split or on one lane, as measured), each with one lane's bits");
  mm_case_free(&m);
  weft_fabric_close(f);
}

/* One matrix (batch 1) on host data is measured too where the models put two lanes within 3x: the models
 * say h (a host lane) takes 100 us and g1 130, but g1 takes 80 us a run and h 120, so after both are timed
 * g1 runs. (The router alone stays on h: its refinement learns h's 120 us, still under g1's 130, and g1,
 * never run, never corrects its own.) An op where g1's prediction is over 3x h's is the
 * router's alone: never measured, g1 never runs. (On the H200 machine the router put [256,256] x [256,256] on the CPU, 0.097 ms, where cuda:0 took 0.082.) */
static void test_single_measured(void) {
  fake_clock clk = {10.0, 0.0};
  /* 2 * 33 * 17 * 26 = 29172 flop: h 100 us to the models, g1 130 */
  host_pair p = host_pair_open(&clk, 80e-6, 120e-6, 29172 / 129e-6, 29172 / 99e-6);
  mm_case m = mm_case_make(p.f, 1, 33, 17, 26, 3);
  int bits_ok = 1;
  const int on_g1_late = mm_runs_on(p.f, &m, 200, 60, 160, (int)p.g1, &bits_ok);
  CHECK(bits_ok, "every run has the reference's bits");
  /* the first 50-odd runs time both (h's timings are 1 ms of untimed runs, then three timed), then g1 runs
   * until h's next timing, a thousand runs later */
  CHECK(on_g1_late == 100, "g1, measured faster, runs (%d of runs 60-159)", on_g1_late);
  weft_split_report rep;
  CHECK(weft_split_last(p.f, &rep) == WEFT_OK && rep.batch == 1 && rep.split == 0 && rep.ncandidates == 2,
        "the report lists the two lanes measured (%zu candidates)", rep.ncandidates);
  /* another shape, where g1 is over 3x h to the models: the router's choice, h, every time */
  weft_fabric_set_cost_model(p.f, p.g1, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-3, 1e15);
  mm_case m2 = mm_case_make(p.f, 1, 34, 17, 26, 4);
  const int g1_runs = p.l1->runs;
  const int on_h = mm_runs_on(p.f, &m2, 50, 0, 50, (int)p.h, &bits_ok);
  CHECK(on_h == 50, "h, the router's choice, runs (%d of 50 runs)", on_h);
  CHECK(bits_ok && p.l1->runs == g1_runs, "a lane over 3x the best is not measured at batch 1 (%d runs)",
        p.l1->runs - g1_runs);
  mm_case_free(&m2);
  mm_case_free(&m);
  weft_fabric_close(p.f);
}

/* A batch of a few microseconds is not tracked against a lane the models put 100x slower, though within
 * 1 ms of it: h takes 2 us for 4 entries to the models, g1 300 us; g1 never runs and no candidates are
 * reported (the router's choice, with no per-call bookkeeping). With g1 at 150 us to the models (75x) the
 * shape is tracked: g1 is timed, then h runs. */
static void test_split_tiny_batch(void) {
  fake_clock clk = {10.0, 0.0};
  /* 4 entries of 2 * 8 * 8 * 8 = 1024 flop: h 1 us + 4096 flop at 4.096 Gflop/s = 2 us */
  host_pair p = host_pair_open(&clk, 50e-6, 0.5e-6, 4096 / 299e-6, 4096 / 1e-6);
  mm_case m = mm_case_make(p.f, 4, 8, 8, 8, 5);
  int bits_ok = 1;
  const int on_h = mm_runs_on(p.f, &m, 300, 0, 300, (int)p.h, &bits_ok);
  CHECK(on_h == 300, "h runs (%d of 300 runs)", on_h);
  weft_split_report rep;
  CHECK(bits_ok && p.l1->runs == 0, "g1, 150x h to the models, never runs (%d runs)", p.l1->runs);
  CHECK(weft_split_last(p.f, &rep) == WEFT_OK && rep.ncandidates == 0, "nothing measured (%zu candidates)",
        rep.ncandidates);
  weft_fabric_set_cost_model(p.f, p.g1, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, 4096 / 149e-6);
  mm_case m2 = mm_case_make(p.f, 4, 8, 8, 9, 6);
  const int on_h_late = mm_runs_on(p.f, &m2, 400, 300, 400, (int)p.h, &bits_ok);
  /* h's first timing comes after 1 ms of untimed runs (128 at most), then g1's, and g1's second (a timing
   * may have met a busy machine) 64 runs after that */
  CHECK(bits_ok && p.l1->runs >= 7, "g1, 75x h to the models, is timed (%d runs)", p.l1->runs);
  CHECK(on_h_late == 100, "then h runs (%d of runs 300-399)", on_h_late);
  CHECK(weft_split_last(p.f, &rep) == WEFT_OK && rep.ncandidates == 2, "both measured (%zu candidates)",
        rep.ncandidates);
  mm_case_free(&m2);
  mm_case_free(&m);
  weft_fabric_close(p.f);
}

/* A lane that fails mid-run leaves the fabric; the op it failed is routed again and the caller gets the
 * right result; later ops never go there. */
static void test_failure(void) {
  weft_fabric *f = open_cpu();
  size_t cpu = 0, gpu = 0;
  fake *g = add_fake(f, "gpu", EXACT_FP32, &gpu);
  g->fail_at = 2;
  /* the gpu looks irresistible, so the router sends everything there */
  weft_fabric_set_cost_model(f, cpu, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-3, 1e6);
  weft_fabric_set_cost_model(f, gpu, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 0, 1e15);
  weft_fabric_set_cost_model(f, gpu, WEFT_COST_UPLOAD, 0, 0, 1e15);
  weft_fabric_set_cost_model(f, gpu, WEFT_COST_DOWNLOAD, 0, 0, 1e15);
  float ha[6] = {1, 2, 3, 4, 5, 6}, hb[6] = {1, 0, 0, 1, 1, 1}, hc[4];
  int64_t da[2] = {2, 3}, db[2] = {3, 2}, dc[2] = {2, 2};
  weft_tensor *a, *b, *c;
  weft_tensor_create(f, 2, da, ha, &a);
  weft_tensor_create(f, 2, db, hb, &b);
  weft_tensor_create(f, 2, dc, NULL, &c);
  CHECK(weft_op_matmul(f, NULL, a, 0, b, 0, c) == WEFT_OK && weft_fabric_last_lane(f) == (int)gpu, "first op on the gpu");
  /* the second run fails on the gpu: re-routed to the cpu, correct result */
  CHECK(weft_op_matmul(f, NULL, a, 0, b, 0, c) == WEFT_OK, "the failed op is re-routed: %s", weft_fabric_last_error(f));
  CHECK(weft_fabric_last_lane(f) == (int)cpu, "it ran on the cpu (lane %d)", weft_fabric_last_lane(f));
  weft_tensor_read(c, hc, 4);
  CHECK(hc[0] == 4 && hc[1] == 5 && hc[2] == 10 && hc[3] == 11, "the result is right: %g %g %g %g", hc[0], hc[1],
        hc[2], hc[3]);
  weft_lane_info li;
  weft_fabric_lane_info(f, gpu, &li);
  CHECK(li.failed == 1, "the gpu lane is marked failed");
  int runs = g->runs;
  CHECK(weft_op_matmul(f, NULL, a, 0, b, 0, c) == WEFT_OK && weft_fabric_last_lane(f) == (int)cpu && g->runs == runs,
        "later ops stay off the failed lane");
  weft_op_desc pin = {WEFT_CONTRACT_EXACT, (int)gpu};
  CHECK(weft_op_matmul(f, &pin, a, 0, b, 0, c) == WEFT_ERR_LANE_FAILED && strstr(weft_fabric_last_error(f), "failed"),
        "pinning to the failed lane says so: %s", weft_fabric_last_error(f));
  weft_fabric_close(f);
}


typedef struct bg_notes {
  int announced, measured_here, adopted;
} bg_notes;

static void bg_collect(void *ctx, const char *line) {
  bg_notes *n = ctx;
  if (strncmp(line, "weft: measuring lanes cpu", 25) == 0 && strstr(line, "in the background")) n->announced++;
  if (strncmp(line, "calibrate cpu:", 14) == 0) n->measured_here++;
  if (strncmp(line, "lane cpu measured in the background", 35) == 0) n->adopted++;
}

/* The first choice between lanes without models: the cpu lane (which a second fabric can open) is measured
 * by a thread of its own, off the caller's path, with one note saying so; the ops meanwhile have the bits
 * they have anywhere; calibration_wait hands the measured lines over, and the cache holds them. */
static void test_background_calibration(void) {
  char dir[] = "/tmp/weft-bg-test-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  setenv("XDG_CACHE_HOME", dir, 1);
  bg_notes notes = {0, 0, 0};
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu";
  d.cpu_threads = 1;
  d.calibration = WEFT_CALIBRATION_AUTO;
  d.on_note = bg_collect;
  d.note_ctx = &notes;
  weft_fabric *f;
  CHECK(weft_fabric_open(&d, &f) == WEFT_OK, "open");
  size_t g;
  CHECK(add_fake(f, "fake-bg", WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT), &g) != NULL, "a second lane");
  mm_case m = mm_case_make(f, 1, 24, 16, 20, 7);
  weft_op_desc auto_op = WEFT_OP_DESC_INIT, on_cpu = WEFT_OP_DESC_INIT;
  on_cpu.lane = 0;
  float ref[24 * 20], got[24 * 20];
  CHECK(weft_op_matmul(f, &on_cpu, m.a, 0, m.b, 0, m.c) == WEFT_OK && weft_tensor_read(m.c, ref, 24 * 20) == WEFT_OK,
        "pinned to the cpu");
  CHECK(weft_op_matmul(f, &auto_op, m.a, 0, m.b, 0, m.c) == WEFT_OK && weft_tensor_read(m.c, got, 24 * 20) == WEFT_OK,
        "routed, the first choice between lanes");
  CHECK(memcmp(ref, got, sizeof ref) == 0, "routed on estimates: the same bits");
  CHECK(notes.announced == 1, "one note says the lanes are measured in the background (%d)", notes.announced);
  CHECK(notes.measured_here == 0, "the cpu lane was not measured on the caller's thread (%d progress lines)",
        notes.measured_here);
  CHECK(weft_fabric_calibration_wait(f) == WEFT_OK, "calibration_wait");
  weft_cost_line line;
  weft_fabric_cost_model(f, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
  CHECK(line.source == WEFT_COST_MEASURED && line.points >= 3, "the cpu lane's measured line was handed over (source %d)",
        line.source);
  CHECK(notes.adopted == 1 && notes.measured_here == 0, "taken from the background (%d), not measured here (%d)",
        notes.adopted, notes.measured_here);
  CHECK(weft_op_matmul(f, &auto_op, m.a, 0, m.b, 0, m.c) == WEFT_OK && weft_tensor_read(m.c, got, 24 * 20) == WEFT_OK &&
            memcmp(ref, got, sizeof ref) == 0,
        "routed on the measured lines: the same bits");
  mm_case_free(&m);
  weft_fabric_close(f);
  char path[512];
  CHECK(weft_cost_cache_path(path, sizeof path) == WEFT_OK, "cache path");
  FILE *fp = fopen(path, "r");
  char text[1 << 16] = "";
  size_t n = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
  if (fp) fclose(fp);
  text[n] = '\0';
  CHECK(strstr(text, "\"lane\":\t\"cpu\"") || strstr(text, "\"lane\": \"cpu\""), "the background wrote the cpu lane to the cache");
  unlink(path);
  char lock[600], sub[600];
  snprintf(lock, sizeof lock, "%s.lock", path);
  unlink(lock);
  snprintf(sub, sizeof sub, "%s/weft", dir);
  rmdir(sub);
  rmdir(dir);
}

int main(void) {
  test_failure();
  test_split();
  test_split_measured();
  test_split_chain();
  test_split_retime();
  test_split_warm();
  test_split_stretch();
  test_single_measured();
  test_split_tiny_batch();
  test_least_finish_time();
  test_contracts();
  test_residency();
  test_queue_wait();
  test_refinement_ignores_outlier();
  test_cache();
  test_background_calibration();
  test_bad_queries();
  printf("route: %d checks, %d failed\n", checks, failures);
  if (checks == 0) fprintf(stderr, "FAIL route: made no checks at all, so it proved nothing\n");
  return failures || checks == 0 ? 1 : 0;
}
