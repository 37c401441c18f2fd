/* measure.h - measuring lanes for the cost model: calibration sweeps (calibrate.c), measuring off the
 * caller's path (background.c) and what one more op costs inside a scope (scope.c). Measuring runs ops
 * through the public op path and the router asks for it, so it is the scheduler's, above the core; what it
 * measures goes into the cost model's lines (cost/cost.h) and its cache. */
#ifndef WEFT_MEASURE_H
#define WEFT_MEASURE_H

#include "../core/internal.h"
#include "../cost/cost.h"

/* Measures one lane (every class it needs) within a time budget in seconds. */
weft_status weft_cost_calibrate_lane(weft_fabric *f, int lane, double budget);
/* Measures the lanes that still run on priors, if calibration is AUTO and it is safe to now. */
void weft_cost_ensure(weft_fabric *f);
/* Measures, once per fabric (at its first scope), what one more op costs inside a scope on each lane that
 * batches scopes (scope.c); lane slots' scope_alpha. */
void weft_cost_measure_scopes(weft_fabric *f);

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
