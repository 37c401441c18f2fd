/* weft_wasm.c - the entry points of weft.wasm: weft's own CPU matmul (src/lanes/cpu/gemm.c with the
 * portable microkernels, the same C the native CPU lane runs) and weft's router and cost model
 * (src/sched/route.c, src/cost/model.c) over a two-lane fabric, "cpu-wasm" and "webgpu", whose cost lines
 * the page fills with what it measured.
 *
 * gemm.c's skinny case uses the portable transformer kernels' matrix-vector parts (tx_portable*.c).
 * What the browser does not have is replaced here, and only that: the CPU lane's thread pool runs every
 * job on the caller's thread (a page's wasm is single-threaded without cross-origin isolation), lane
 * reports carry no message, and calibration is the page's own sweep, fed in through
 * weft_wasm_router_point. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/optable.h"
#include "cost/cost.h"
#include "lanes/cpu/cpu.h"
#include "lanes/cpu/tx.h"
#include "sched/route.h"

#define EXPORT(name) __attribute__((export_name(#name), visibility("default")))

/* ------------------------------------------------------------------- what the native build links in */

/* The pool with no workers: gemm.c asks for threads and gets one, so it takes its single-thread path. */
int weft_cpu_pool_threads(const weft_cpu_pool *pool) {
  (void)pool;
  return 1;
}
void weft_cpu_pool_run(weft_cpu_pool *pool, int nthreads, weft_cpu_task_fn fn, void *ctx) {
  (void)pool, (void)nthreads;
  fn(ctx, 0);
}
void weft_cpu_wait_until(const atomic_llong *counter, long long target) {
  while (atomic_load_explicit(counter, memory_order_acquire) < target) {
  }
}

/* gemm.c's skinny matmuls take their vector parts from the transformer kernels' table: the portable ones. */
const weft_cpu_tx_kernels *weft_cpu_tx_select_for(weft_contract contract) {
  return contract == WEFT_CONTRACT_FP32 ? &weft_cpu_tx_portable_fp32 : &weft_cpu_tx_portable;
}

weft_status weft_lane_report(const weft_lane_host *host, weft_status status, const char *fmt, ...) {
  (void)host, (void)fmt;
  return status;
}

/* Error text without printf: the router only fails when no lane honours the contract. */
weft_status weft_fail(weft_fabric *f, weft_status status, const char *fmt, ...) {
  if (f) {
    size_t n = strlen(fmt);
    if (n >= sizeof f->err) n = sizeof f->err - 1;
    memcpy(f->err, fmt, n);
    f->err[n] = '\0';
  }
  return status;
}

const char *weft_op_kind_str(weft_op_kind kind) { return kind == WEFT_OP_MATMUL ? "matmul" : "op"; }
/* The op table's entries the router and cost model read for the version-2 ops: the page routes only
 * matmuls, so an empty table serves. */
const weft_optable_entry weft_optable[WEFT_OP_COUNT];
const char *weft_contract_str(weft_contract contract) { return contract == WEFT_CONTRACT_EXACT ? "exact" : "other"; }

/* The page measures both lanes itself before it routes, so the lines are never missing. */
void weft_cost_ensure(weft_fabric *f) { f->models_ready = 1; }
/* never set here: the page's router is given its lines, it measures nothing in the background */
void weft_cost_background_adopt(weft_fabric *f) { f->calib_bg = 0; }

/* ---------------------------------------------------------------------------------- the CPU lane */

static weft_cpu_lane cpu_lane;

EXPORT(weft_wasm_alloc) void *weft_wasm_alloc(uint32_t bytes) { return malloc(bytes); }
EXPORT(weft_wasm_free) void weft_wasm_free(void *ptr) { free(ptr); }

/* The microkernel set the wasm CPU lane uses ("portable": 2 x 16 tiles, vectorised to simd128). */
EXPORT(weft_wasm_isa) const char *weft_wasm_isa(void) { return weft_cpu_kernels_portable.isa; }

/* c = a . b, row-major, under the exact contract. Returns a weft_status (0 = WEFT_OK). */
EXPORT(weft_wasm_matmul)
int weft_wasm_matmul(const float *a, const float *b, float *c, int32_t m, int32_t k, int32_t n) {
  if (m < 0 || k < 0 || n < 0 || !a || !b || !c) return WEFT_ERR_INVALID_ARGUMENT;
  if (!cpu_lane.kernels) {
    cpu_lane.threads = 1;
    cpu_lane.kernels = &weft_cpu_kernels_portable;
  }
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_MATMUL;
  op.contract = WEFT_CONTRACT_EXACT;
  op.in[0] = (void *)a;
  op.in[1] = (void *)b;
  op.out[0] = c;
  op.batch = 1;
  op.m = m, op.k = k, op.n = n;
  return weft_cpu_matmul(&cpu_lane, &op);
}

/* ------------------------------------------------------------------------------------- the router */

enum { LANE_CPU = 0, LANE_GPU = 1, MAX_LANES = 2 };
static const char *const lane_names[MAX_LANES] = {"cpu-wasm", "webgpu"};

static weft_fabric fabric;
static weft_lane_slot slots[MAX_LANES];
static weft_route_cost route_costs[MAX_LANES];

/* A fresh fabric: cpu-wasm, plus webgpu when the tab has a GPU. Both start on weft's priors. The GPU's
 * transfers are free lines here because the page times each GPU matmul end to end, uploads and the
 * read-back included: they are already in its matmul points. */
EXPORT(weft_wasm_router_reset) int weft_wasm_router_reset(int has_gpu) {
  weft_route_memo_free(&fabric);
  memset(&fabric, 0, sizeof fabric);
  memset(slots, 0, sizeof slots);
  fabric.lanes = slots;
  fabric.nlanes = has_gpu ? 2 : 1;
  fabric.route = route_costs;
  fabric.models_ready = 1;
  for (size_t i = 0; i < fabric.nlanes; i++) {
    weft_lane_slot *s = &slots[i];
    s->desc.name = lane_names[i];
    s->desc.kind = lane_names[i];
    s->desc.device = i == LANE_CPU ? "WebAssembly" : "WebGPU";
    s->desc.driver = "";
    s->desc.details = "";
    s->desc.contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT);
    s->desc.flags = i == LANE_CPU ? WEFT_LANE_HOST_MEMORY : 0;
    weft_cost_init_lane(s);
    if (i == LANE_GPU) {
      s->cost[WEFT_COST_UPLOAD][0].line.alpha = s->cost[WEFT_COST_UPLOAD][0].line.beta = 0;
      s->cost[WEFT_COST_DOWNLOAD][0].line.alpha = s->cost[WEFT_COST_DOWNLOAD][0].line.beta = 0;
    }
  }
  return (int)fabric.nlanes;
}

EXPORT(weft_wasm_lane_name) const char *weft_wasm_lane_name(int lane) {
  return lane >= 0 && lane < MAX_LANES ? lane_names[lane] : "?";
}

/* Records a measured point (median seconds of an m x k x n matmul) on a lane's exact matmul line: the
 * points are kept in ascending work (a point at a work already held replaces it) and the line is refitted,
 * as calibration does. Returns the number of points, or -1 for a bad lane or time. */
EXPORT(weft_wasm_router_point)
int weft_wasm_router_point(int lane, int32_t m, int32_t k, int32_t n, double seconds) {
  if (lane < 0 || (size_t)lane >= fabric.nlanes || !(seconds > 0) || m <= 0 || k <= 0 || n <= 0) return -1;
  weft_cost_state *c = weft_cost_state_of(&slots[lane], WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT);
  const double work = 2.0 * (double)m * (double)n * (double)k;
  int at = 0;
  while (at < c->npts && c->pw[at] < work) at++;
  if (at < c->npts && c->pw[at] == work) {
    c->pt[at] = seconds;
  } else {
    if (c->npts == WEFT_COST_POINTS) return -1;
    memmove(&c->pw[at + 1], &c->pw[at], sizeof(double) * (size_t)(c->npts - at));
    memmove(&c->pt[at + 1], &c->pt[at], sizeof(double) * (size_t)(c->npts - at));
    c->pw[at] = work, c->pt[at] = seconds;
    c->npts++;
  }
  /* Each point is the median of the page's own repeats at exactly the sizes it routes, so the points are
   * kept as measured (calibration's smoothing into a non-decreasing curve is for sizes between points). */
  double alpha = 0, beta = c->pw[0] / c->pt[0]; /* one point: the line through it from zero */
  if (c->npts >= 2) weft_cost_fit(c->pw, c->pt, c->npts, &alpha, &beta);
  c->line.alpha = alpha, c->line.beta = beta;
  c->line.source = WEFT_COST_MEASURED;
  c->line.points = c->npts;
  weft_route_forget(&fabric);
  return c->npts;
}

/* The lane the router picks for an m x k x n exact matmul with its inputs on the host: the op path's own
 * decision (remembered per shape until a point changes). -1 when no lane can run it. */
EXPORT(weft_wasm_route) int weft_wasm_route(int32_t m, int32_t k, int32_t n) {
  if (!fabric.lanes) return -1;
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_MATMUL;
  op.contract = WEFT_CONTRACT_EXACT;
  op.batch = 1;
  op.m = m, op.k = k, op.n = n;
  double work;
  weft_cost_class cls = weft_cost_op_work(&op, &work);
  return weft_route_decide(&fabric, &op, cls, work, 0.0, NULL, 0);
}

/* The last decision's predicted seconds on a lane (every term), or -1 when the lane was not eligible. */
EXPORT(weft_wasm_route_predicted) double weft_wasm_route_predicted(int lane) {
  const weft_route_explanation *e = &fabric.last_route;
  if (!e->lanes || lane < 0 || (size_t)lane >= e->nlanes || !e->lanes[lane].eligible) return -1;
  return e->lanes[lane].total;
}

/* A lane's fitted line, for the page's table: alpha in seconds, beta in flop/s. */
EXPORT(weft_wasm_line_alpha) double weft_wasm_line_alpha(int lane) {
  if (lane < 0 || (size_t)lane >= fabric.nlanes) return -1;
  return weft_cost_state_of(&slots[lane], WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT)->line.alpha;
}
EXPORT(weft_wasm_line_beta) double weft_wasm_line_beta(int lane) {
  if (lane < 0 || (size_t)lane >= fabric.nlanes) return -1;
  return weft_cost_state_of(&slots[lane], WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT)->line.beta;
}
