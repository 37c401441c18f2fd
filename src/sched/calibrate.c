/* calibrate.c - measuring a lane: short sweeps of matmul (per contract the lane honours), elementwise and
 * transfer sizes; each point is the median of repeats (a timing spike cannot move a median), and the fit
 * (cost/model.c) turns the points into alpha and beta. Budgeted so that every lane of a 2-core machine is
 * measured in well under two seconds. It times ops run through the public op path, so it is the
 * scheduler's (measure.h), above the core; the lines it fits go into the cost model below (cost/). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"

#define MAX_POINTS 16
#define ELEMENTWISE_CONTRACTS (WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32))

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void fill(float *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

/* A sweep's running state: the points so far and the time left. */
typedef struct sweep {
  double work[MAX_POINTS], secs[MAX_POINTS];
  int n;
  double deadline;
} sweep;

/* Times `run` (which must leave the lane idle when it returns) as the median of repeats after a warm-up. */
typedef weft_status (*run_fn)(void *ctx);

/* A background measurement whose owner asked it to stop: each point ends the sweep early (its line is
 * then not handed over). */
static int stopped(const weft_fabric *f) { return f->calib_stop && atomic_load(f->calib_stop); }

static weft_status time_point(weft_fabric *f, run_fn run, void *ctx, double *out_median) {
  if (stopped(f)) return WEFT_ERR_STATE;
  weft_status st = run(ctx); /* warm-up: first-use uploads, pipeline creation, page faults */
  if (st != WEFT_OK) return st;
  double t[7];
  int reps = 0;
  double first = 0;
  for (; reps < 7 && !stopped(f); reps++) {
    double t0 = weft_monotonic_seconds(NULL);
    if ((st = run(ctx)) != WEFT_OK) return st;
    t[reps] = weft_monotonic_seconds(NULL) - t0;
    if (reps == 0) first = t[0];
    /* long points get 3 repeats, short ones 7: the median of 3 already ignores one spike */
    if (reps >= 2 && first > 2e-3) {
      reps++;
      break;
    }
  }
  if (reps == 0) return WEFT_ERR_STATE;
  *out_median = median(t, reps);
  return WEFT_OK;
}

typedef struct mm_ctx {
  weft_fabric *f;
  weft_op_desc d;
  weft_tensor *a, *b, *c;
} mm_ctx;

static weft_status mm_run(void *p) {
  mm_ctx *m = p;
  weft_status st = weft_op_matmul(m->f, &m->d, m->a, 0, m->b, 0, m->c);
  return st == WEFT_OK ? weft_fabric_sync(m->f) : st;
}

typedef struct add_ctx {
  weft_fabric *f;
  weft_op_desc d;
  weft_tensor *x, *y, *out;
} add_ctx;

static weft_status add_run(void *p) {
  add_ctx *m = p;
  weft_status st = weft_op_add(m->f, &m->d, m->x, m->y, m->out);
  return st == WEFT_OK ? weft_fabric_sync(m->f) : st;
}

static weft_status tensor_sq(weft_fabric *f, int64_t r, int64_t c, uint32_t seed, weft_tensor **out) {
  int64_t dims[2] = {r, c};
  weft_status st = weft_tensor_create(f, 2, dims, NULL, out);
  if (st != WEFT_OK) return st;
  if (seed) fill((*out)->host, (*out)->numel, seed);
  return WEFT_OK;
}

static void set_line(weft_cost_state *c, sweep *s) {
  double alpha, beta;
  if (!weft_cost_fit(s->work, s->secs, s->n, &alpha, &beta)) return;
  memset(c, 0, sizeof *c);
  c->line.alpha = alpha;
  c->line.beta = beta;
  c->line.refine = 1.0;
  c->line.source = WEFT_COST_MEASURED;
  c->line.points = s->n;
  /* keep the points (they come in ascending work) with times made non-decreasing, so a noisy point can
   * never make more work look cheaper */
  for (int i = 0; i < s->n && c->npts < WEFT_COST_POINTS; i++) {
    double t = s->secs[i];
    if (c->npts && t < c->pt[c->npts - 1]) t = c->pt[c->npts - 1];
    if (c->npts && s->work[i] <= c->pw[c->npts - 1]) continue;
    c->pw[c->npts] = s->work[i];
    c->pt[c->npts++] = t;
  }
}

static weft_status sweep_matmul(weft_fabric *f, int lane, weft_contract contract, double budget) {
  static const int64_t sizes[] = {8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048};
  weft_lane_slot *slot = &f->lanes[lane];
  sweep s = {.n = 0, .deadline = weft_monotonic_seconds(NULL) + budget};
  weft_status st = WEFT_OK;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && s.n < MAX_POINTS; i++) {
    int64_t n = sizes[i];
    mm_ctx m = {f, {contract, lane}, NULL, NULL, NULL};
    if ((st = tensor_sq(f, n, n, 11, &m.a)) == WEFT_OK && (st = tensor_sq(f, n, n, 23, &m.b)) == WEFT_OK &&
        (st = tensor_sq(f, n, n, 0, &m.c)) == WEFT_OK) {
      double t;
      st = time_point(f, mm_run, &m, &t);
      if (st == WEFT_OK) {
        s.work[s.n] = 2.0 * (double)n * (double)n * (double)n;
        s.secs[s.n++] = t;
        weft_note(f, 0, "calibrate %s: matmul %s n=%lld  %.3f ms  (%.2f GFLOP/s)", slot->desc.name,
                  weft_contract_str(contract), (long long)n, t * 1e3, s.work[s.n - 1] / t * 1e-9);
        /* stop when the next point (8x the work) would overrun the budget; points under a millisecond
         * are cheap enough to take anyway, and a GPU's large sizes are where its throughput shows (two
         * identical GPUs measured only on small sizes can differ by a fifth, and a split follows that) */
        double left = s.deadline - weft_monotonic_seconds(NULL);
        if (t * 8 * 4 > left && s.n >= 3 && t > 1e-3) i = sizeof sizes / sizeof sizes[0];
      }
    }
    weft_tensor_destroy(m.a), weft_tensor_destroy(m.b), weft_tensor_destroy(m.c);
    if (st != WEFT_OK) break;
  }
  if (s.n >= 2) set_line(weft_cost_state_of(slot, WEFT_COST_MATMUL, contract), &s);
  return st;
}

static weft_status sweep_elementwise(weft_fabric *f, int lane, double budget) {
  static const int64_t rows[] = {1, 8, 64, 512, 4096};
  weft_lane_slot *slot = &f->lanes[lane];
  sweep s = {.n = 0, .deadline = weft_monotonic_seconds(NULL) + budget};
  weft_status st = WEFT_OK;
  weft_contract contract = (slot->desc.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)) ? WEFT_CONTRACT_EXACT
                                                                                          : WEFT_CONTRACT_FP32;
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    add_ctx m = {f, {contract, lane}, NULL, NULL, NULL};
    if ((st = tensor_sq(f, rows[i], 1024, 5, &m.x)) == WEFT_OK && (st = tensor_sq(f, rows[i], 1024, 7, &m.y)) == WEFT_OK &&
        (st = tensor_sq(f, rows[i], 1024, 0, &m.out)) == WEFT_OK) {
      double t;
      st = time_point(f, add_run, &m, &t);
      if (st == WEFT_OK) {
        s.work[s.n] = (double)rows[i] * 1024.0;
        s.secs[s.n++] = t;
        weft_note(f, 0, "calibrate %s: elementwise %lld elements  %.3f ms", slot->desc.name,
                  (long long)(rows[i] * 1024), t * 1e3);
        if (t * 8 * 4 > s.deadline - weft_monotonic_seconds(NULL) && s.n >= 3) i = sizeof rows / sizeof rows[0];
      }
    }
    weft_tensor_destroy(m.x), weft_tensor_destroy(m.y), weft_tensor_destroy(m.out);
    if (st != WEFT_OK) break;
  }
  if (s.n >= 2) set_line(weft_cost_state_of(slot, WEFT_COST_ELEMENTWISE, 0), &s);
  return st;
}

/* One transfer size through the lane's own vtable: upload then sync, and download (which waits by
 * contract), five times; adds the medians to `up` and `down` (the first repeat pays first-touch costs and
 * is dropped). `registered`: the host memory is offered to the lane first, as a tensor's is once it has
 * crossed twice; a lane that declines it leaves the sweep as it was and *out_declined set. */
static weft_status time_transfer(weft_fabric *f, int lane, size_t bytes, int registered, sweep *up, sweep *down,
                                 int *out_declined) {
  weft_lane_slot *slot = &f->lanes[lane];
  float *host = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
  weft_buffer *buf = NULL;
  if (!host) return WEFT_ERR_OUT_OF_MEMORY;
  fill(host, bytes / sizeof(float), registered ? 5 : 3);
  if (registered && slot->vt.host_register(slot->self, host, bytes) != WEFT_OK) {
    free(host);
    *out_declined = 1;
    return WEFT_OK;
  }
  weft_status st = slot->vt.buffer_alloc(slot->self, bytes, &buf);
  double tu[5], td[5];
  int reps = 0;
  /* An op's inputs are uploaded back to back and submitted with the op, whose own line already pays the
   * submission and the wait; so an upload costs what one more upload adds before the sync: two uploads
   * and a sync, less one upload and a sync. (Timed as one upload and a sync, each input was charged a
   * whole round trip, and a device lane looked slower than it is on small host data.) */
  for (; st == WEFT_OK && reps < 5; reps++) {
    double t0 = weft_monotonic_seconds(NULL);
    st = slot->vt.upload(slot->self, buf, 0, host, bytes);
    if (st == WEFT_OK && slot->vt.sync) st = slot->vt.sync(slot->self);
    double t1 = weft_monotonic_seconds(NULL);
    for (int k = 0; k < 2 && st == WEFT_OK; k++) st = slot->vt.upload(slot->self, buf, 0, host, bytes);
    if (st == WEFT_OK && slot->vt.sync) st = slot->vt.sync(slot->self);
    double t2 = weft_monotonic_seconds(NULL);
    if (st == WEFT_OK) st = slot->vt.download(slot->self, buf, 0, host, bytes);
    double t3 = weft_monotonic_seconds(NULL);
    double marginal = (t2 - t1) - (t1 - t0);
    tu[reps] = marginal > 1e-9 ? marginal : 1e-9, td[reps] = t3 - t2;
  }
  if (buf) slot->vt.buffer_free(slot->self, buf);
  if (registered) slot->vt.host_unregister(slot->self, host, bytes);
  free(host);
  if (st != WEFT_OK) return st;
  up->work[up->n] = down->work[down->n] = (double)bytes;
  up->secs[up->n++] = median(tu + 1, reps - 1);
  down->secs[down->n++] = median(td + 1, reps - 1);
  weft_note(f, 0, "calibrate %s: %stransfer %zu KiB  up %.3f ms  down %.3f ms", slot->desc.name,
            registered ? "registered " : "", bytes >> 10, up->secs[up->n - 1] * 1e3, down->secs[down->n - 1] * 1e3);
  return WEFT_OK;
}

/* Transfers of pageable host memory (through the lane's staging), then of memory registered with the lane,
 * which may move straight over the bus: each kind has its own lines. A lane that registers nothing moves
 * registered memory like any other. */
static weft_status sweep_transfers(weft_fabric *f, int lane, double budget) {
  static const size_t bytes[] = {4096, 65536, 1u << 20, 8u << 20, 32u << 20};
  weft_lane_slot *slot = &f->lanes[lane];
  sweep up = {.n = 0}, down = {.n = 0};
  double deadline = weft_monotonic_seconds(NULL) + budget;
  weft_status st = WEFT_OK;
  int declined = 0;
  for (size_t i = 0; i < sizeof bytes / sizeof bytes[0] && st == WEFT_OK && !stopped(f); i++) {
    st = time_transfer(f, lane, bytes[i], 0, &up, &down, &declined);
    if (weft_monotonic_seconds(NULL) > deadline && up.n >= 3) break;
  }
  /* indexed directly: weft_cost_state_of folds every class but matmul onto its first slot */
  if (up.n >= 2) set_line(&slot->cost[WEFT_COST_UPLOAD][WEFT_XFER_STAGED], &up);
  if (down.n >= 2) set_line(&slot->cost[WEFT_COST_DOWNLOAD][WEFT_XFER_STAGED], &down);
  slot->cost[WEFT_COST_UPLOAD][WEFT_XFER_PINNED] = slot->cost[WEFT_COST_UPLOAD][WEFT_XFER_STAGED];
  slot->cost[WEFT_COST_DOWNLOAD][WEFT_XFER_PINNED] = slot->cost[WEFT_COST_DOWNLOAD][WEFT_XFER_STAGED];
  if (st != WEFT_OK || !slot->vt.host_register || !slot->vt.host_unregister) return st;
  sweep rup = {.n = 0}, rdown = {.n = 0};
  for (size_t i = 2; i < sizeof bytes / sizeof bytes[0] && st == WEFT_OK && !declined; i++)
    st = time_transfer(f, lane, bytes[i], 1, &rup, &rdown, &declined);
  if (rup.n >= 2) set_line(&slot->cost[WEFT_COST_UPLOAD][WEFT_XFER_PINNED], &rup);
  if (rdown.n >= 2) set_line(&slot->cost[WEFT_COST_DOWNLOAD][WEFT_XFER_PINNED], &rdown);
  return st;
}

weft_status weft_cost_calibrate_lane(weft_fabric *f, int lane, double budget) {
  weft_lane_slot *slot = &f->lanes[lane];
  if (slot->failed) return WEFT_OK;
  int host = (slot->desc.flags & WEFT_LANE_HOST_MEMORY) != 0;
  int ncontracts = 0;
  for (int c = 0; c < WEFT_CONTRACT_COUNT; c++) ncontracts += (slot->desc.contracts >> c) & 1;
  double share = budget / (ncontracts + 1 + (host ? 0 : 1));
  int was = f->calibrating;
  f->calibrating = 1;
  slot->calib_tried = 1;
  weft_status st = WEFT_OK;
  for (int c = 0; c < WEFT_CONTRACT_COUNT && st == WEFT_OK; c++)
    if (slot->desc.contracts & WEFT_CONTRACT_BIT(c)) st = sweep_matmul(f, lane, (weft_contract)c, share);
  /* a lane of tensor units (tf32/bf16 matmul only) has no elementwise ops to measure */
  if (st == WEFT_OK && (slot->desc.contracts & ELEMENTWISE_CONTRACTS)) st = sweep_elementwise(f, lane, share);
  if (st == WEFT_OK && !host) st = sweep_transfers(f, lane, share);
  f->calibrating = was;
  weft_route_forget(f);
  if (stopped(f)) return WEFT_ERR_STATE;
  if (st != WEFT_OK)
    weft_note(f, 1, "weft: calibrating lane %s failed (%s: %s); it keeps its prior cost model", slot->desc.name,
              weft_status_str(st), f->err);
  return st;
}

static int lane_needs_measuring(const weft_lane_slot *s) {
  /* a lane whose measurement failed keeps priors (no retry per op); one measured in the background waits */
  if (s->failed || s->calib_tried || s->calib_pending) return 0;
  for (int c = 0; c < WEFT_CONTRACT_COUNT; c++)
    if ((s->desc.contracts & WEFT_CONTRACT_BIT(c)) && s->cost[WEFT_COST_MATMUL][c].line.source == WEFT_COST_PRIOR)
      return 1;
  return (s->desc.contracts & ELEMENTWISE_CONTRACTS) && s->cost[WEFT_COST_ELEMENTWISE][0].line.source == WEFT_COST_PRIOR;
}

/* Per-lane budget: the whole fabric in about 1.5 s on a small machine. */
static double lane_budget(const weft_fabric *f) { return f->nlanes > 1 ? 1.5 / (double)f->nlanes : 1.0; }

weft_status weft_fabric_calibrate(weft_fabric *f) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (f->in_scope) return weft_fail(f, WEFT_ERR_STATE, "weft_fabric_calibrate: close the open scope first");
  weft_cost_background_finish(f, 1); /* measuring everything now: a background sweep would only disturb it */
  weft_status first = WEFT_OK;
  char why[WEFT_ERR_LEN] = "";
  for (size_t i = 0; i < f->nlanes; i++) {
    weft_note(f, 0, "calibrating %s (%s)", f->lanes[i].desc.name, f->lanes[i].desc.device);
    weft_status st = weft_cost_calibrate_lane(f, (int)i, lane_budget(f));
    if (st != WEFT_OK && first == WEFT_OK) first = st, memcpy(why, f->err, sizeof why);
  }
  if (f->desc.calibration != WEFT_CALIBRATION_OFF && weft_cost_cache_save(f) != WEFT_OK && first == WEFT_OK) {
    char path[1024] = "";
    weft_cost_cache_path(path, sizeof path);
    return weft_fail(f, WEFT_ERR_IO, "weft_fabric_calibrate: the lanes were measured, but the cache %s could not be "
                     "written; they will be measured again next time", *path ? path : "(no $HOME or $XDG_CACHE_HOME)");
  }
  if (first != WEFT_OK) return weft_fail(f, first, "%s", why);
  return WEFT_OK;
}

/* Says once, through on_note, which lanes are being measured and where their lines will be kept. */
static void announce(weft_fabric *f, const int *lanes, size_t n, int background) {
  char names[512] = "", path[1024] = "";
  for (size_t i = 0; i < n; i++) {
    size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", f->lanes[lanes[i]].desc.name);
  }
  if (weft_cost_cache_path(path, sizeof path) != WEFT_OK) snprintf(path, sizeof path, "nowhere (no $HOME)");
  if (background)
    weft_note(f, 0, "weft: measuring lanes %s in the background for the router (ops run meanwhile, routed on "
              "estimates); the results are kept in %s", names, path);
  else
    weft_note(f, 0, "weft: measuring lanes %s for the router (a second or two, once); the results are kept in %s",
              names, path);
}

/* Measures, on the caller's thread, the lanes that still need it and the background cannot take. */
static void measure_here(weft_fabric *f) {
  int *todo = malloc((f->nlanes ? f->nlanes : 1) * sizeof *todo);
  size_t n = 0;
  for (size_t i = 0; todo && i < f->nlanes; i++)
    if (lane_needs_measuring(&f->lanes[i])) todo[n++] = (int)i;
  if (n) announce(f, todo, n, 0);
  for (size_t k = 0; k < n; k++) {
    int i = todo[k];
    char saved[WEFT_ERR_LEN];
    memcpy(saved, f->err, sizeof saved);
    weft_note(f, 0, "calibrating %s (%s)", f->lanes[i].desc.name, f->lanes[i].desc.device);
    weft_cost_calibrate_lane(f, i, lane_budget(f));
    memcpy(f->err, saved, sizeof saved);
  }
  if (n) weft_cost_cache_save(f);
  free(todo);
}

void weft_cost_ensure(weft_fabric *f) {
  if (f->calibrating) return;
  if (f->desc.calibration != WEFT_CALIBRATION_AUTO) {
    f->models_ready = 1;
    return;
  }
  /* 1. lanes a second fabric can open: measured by a thread of their own while the caller's ops go on */
  if (!f->calib_bg && weft_cost_background_allowed()) {
    int *todo = malloc((f->nlanes ? f->nlanes : 1) * sizeof *todo);
    size_t n = 0;
    for (size_t i = 0; todo && i < f->nlanes; i++)
      if (f->lanes[i].reopenable && !f->lanes[i].calib_refused && lane_needs_measuring(&f->lanes[i])) todo[n++] = (int)i;
    if (n && weft_cost_background_start(f, todo, n) == WEFT_OK) announce(f, todo, n, 1);
    free(todo);
  }
  /* 2. the rest, here; not inside a scope, whose recording a sweep's ops would flush */
  if (f->in_scope) return;
  measure_here(f);
  f->models_ready = 1;
  weft_route_forget(f);
}

weft_status weft_fabric_calibration_wait(weft_fabric *f) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (f->in_scope) return weft_fail(f, WEFT_ERR_STATE, "weft_fabric_calibration_wait: close the open scope first");
  weft_cost_background_finish(f, 0);
  if (f->desc.calibration == WEFT_CALIBRATION_AUTO) measure_here(f);
  f->models_ready = 1;
  weft_route_forget(f);
  return WEFT_OK;
}
