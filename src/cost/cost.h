/* cost.h - the cost model: t = alpha + work / beta per lane and op class, its fit, its online refinement,
 * and the on-disk cache of measured lines. Pure arithmetic over the lanes' cost lines: it runs no op and
 * knows nothing about kernels. It sits below the core (docs/DESIGN.md, "Layers"): the core charges and
 * refines it as ops run, the scheduler routes on it; measuring lanes (running ops to time them) is the
 * scheduler's (sched/measure.h). */
#ifndef WEFT_COST_H
#define WEFT_COST_H

#include "../core/state.h"

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

/* Loads cached lines for lanes whose identity matches; notes mismatches and corrupt files. */
void weft_cost_cache_load(weft_fabric *f);
/* Writes every measured lane's lines into the cache (merging with entries for other devices). */
weft_status weft_cost_cache_save(weft_fabric *f);

/* The fixed cost the router counts for an op on lane s: inside a scope, the lane's scope_alpha where it was
 * measured and is smaller; else alpha. */
static inline double weft_cost_scope_alpha(const weft_fabric *f, const weft_lane_slot *s, double alpha) {
  return f->in_scope && s->scope_alpha > 0 && s->scope_alpha < alpha ? s->scope_alpha : alpha;
}

#endif
