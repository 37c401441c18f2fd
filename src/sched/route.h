/* route.h - choosing the lane an op runs on: the least predicted finish time among the lanes that honour
 * its contract. The scheduler's (docs/DESIGN.md, "Layers"); weft_route_forget, which any layer may call, is
 * core/state.h's. */
#ifndef WEFT_ROUTE_H
#define WEFT_ROUTE_H

#include "../core/internal.h"

/* Picks a lane for `op`. `inputs` are the op's input tensors (NULL entries skipped; NULL array = all on the
 * host, for explain). Fills `costs` (one per lane) with every lane's prediction. Returns the lane index,
 * or -1 with the fabric's last error set when no lane can run it. A query: it never measures a lane (nor
 * writes the cache); lanes without a measured model are explained from their priors. */
int weft_route_pick(weft_fabric *f, const weft_op *op, weft_tensor *const *inputs, int ninputs,
                    weft_route_cost *costs);
/* The same, for a caller that already knows the op's cost class, work and the time (the op path): the
 * first real choice between lanes measures those without a model (weft_cost_ensure). */
int weft_route_pick_at(weft_fabric *f, const weft_op *op, weft_cost_class cls, double work, double now,
                       weft_tensor *const *inputs, int ninputs, weft_route_cost *costs);

/* 1 when lane i can run op: contract honoured, not failed, and its supports() (if any) agrees; otherwise 0
 * and *why (if given) says why. */
int weft_route_lane_can_run(weft_fabric *f, int lane, const weft_op *op, const char **why);

/* The op path's entry: picks the lane for an op about to run (remembering decisions per op signature
 * while nothing that feeds them changes) and records the reasoning for weft_route_last. */
int weft_route_decide(weft_fabric *f, const weft_op *op, weft_cost_class cls, double work, double now,
                      weft_tensor *const *inputs, int ninputs);
/* Which transfer line moves t's host memory to or from lane `lane`: registered with it, or staged. */
static inline int weft_route_xfer(const weft_tensor *t, int lane) {
  return t && lane >= 0 && weft_lane_bit(t->reg_mask, (size_t)lane) ? WEFT_XFER_PINNED : WEFT_XFER_STAGED;
}
/* Frees the decision memory (fabric close). */
void weft_route_memo_free(weft_fabric *f);

#endif
