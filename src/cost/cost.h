/* cost.h - the cost model: t = alpha + work / beta per lane and op class, its fit, its online refinement,
 * calibration and the on-disk cache. Knows nothing about kernels: it only times ops through the core. */
#ifndef WEFT_COST_H
#define WEFT_COST_H

#include "../core/internal.h"

/* The class and amount of work of an op (flops for matmul, weighted elements otherwise). */
weft_cost_class weft_cost_op_work(const weft_op *op, double *out_work);
/* The state of lane `lane`'s line for a class and contract (contract matters for matmul only). */
weft_cost_state *weft_cost_state_of(weft_lane_slot *s, weft_cost_class cls, weft_contract contract);
/* Predicted seconds for `work` on a line, refinement applied. */
double weft_cost_predict(const weft_cost_state *c, double work);
/* The same before refinement: the measured points where they reach, alpha + work/beta beyond them. */
double weft_cost_base(const weft_cost_state *c, double work);
/* Records an observed time; the refinement factor becomes the median of recent observed/predicted ratios,
 * so one outlier moves nothing. Returns 1 when the factor moved by more than 5% since routing last took
 * note (the caller then forgets remembered decisions). */
int weft_cost_observe(weft_cost_state *c, double work, double seconds);
/* Sets the built-in priors on a new lane (used until it is measured). */
void weft_cost_init_lane(weft_lane_slot *s);
/* Fits t = alpha + work/beta to points, minimising relative error; alpha >= 0. Returns 0 on too few points. */
int weft_cost_fit(const double *work, const double *seconds, int n, double *out_alpha, double *out_beta);

/* Measures one lane (every class it needs) within a time budget in seconds. */
weft_status weft_cost_calibrate_lane(weft_fabric *f, int lane, double budget);
/* Loads cached lines for lanes whose identity matches; notes mismatches and corrupt files. */
void weft_cost_cache_load(weft_fabric *f);
/* Writes every measured lane's lines into the cache (merging with entries for other devices). */
weft_status weft_cost_cache_save(weft_fabric *f);
/* Measures the lanes that still run on priors, if calibration is AUTO and it is safe to now. */
void weft_cost_ensure(weft_fabric *f);
/* Measures, once per fabric (at its first scope), what one more op costs inside a scope on each lane that
 * batches scopes (scope.c); lane slots' scope_alpha. */
void weft_cost_measure_scopes(weft_fabric *f);
/* The fixed cost the router counts for an op on lane s: inside a scope, the lane's scope_alpha where it was
 * measured and is smaller; else alpha. */
static inline double weft_cost_scope_alpha(const weft_fabric *f, const weft_lane_slot *s, double alpha) {
  return f->in_scope && s->scope_alpha > 0 && s->scope_alpha < alpha ? s->scope_alpha : alpha;
}

/* Measuring off the caller's path (background.c). */
typedef struct weft_calib_bg weft_calib_bg;
/* 0 when WEFT_CALIBRATE_IN_BACKGROUND=0 asks for every lane to be measured on the caller's thread. */
int weft_cost_background_allowed(void);
/* Starts a thread that measures lanes `lanes[0..n)` of f in a fabric of its own and marks them pending. */
weft_status weft_cost_background_start(weft_fabric *f, const int *lanes, size_t n);
/* Takes the lines of lanes measured since the last call (the op path calls it while f->calib_bg is set). */
void weft_cost_background_adopt(weft_fabric *f);
static inline void weft_cost_background_poll(weft_fabric *f) {
  if (f->calib_bg) weft_cost_background_adopt(f);
}
/* Waits for the thread (asking it to stop first when `cancel`), takes what it measured and frees it. */
void weft_cost_background_finish(weft_fabric *f, int cancel);
/* Lanes still being measured in the background. */
size_t weft_cost_background_pending(const weft_fabric *f);

#endif
