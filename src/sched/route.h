/* route.h - choosing the lane an op runs on: the least predicted finish time among the lanes that honour
 * its contract. */
#ifndef WEFT_ROUTE_H
#define WEFT_ROUTE_H

#include "../core/internal.h"

/* Picks a lane for `op`. `inputs` are the op's input tensors (NULL entries skipped; NULL array = all on the
 * host, for explain). Fills `costs` (one per lane) with every lane's prediction. Returns the lane index,
 * or -1 with the fabric's last error set when no lane can run it. */
int weft_route_pick(weft_fabric *f, const weft_op *op, weft_tensor *const *inputs, int ninputs,
                    weft_route_cost *costs);

/* 1 when lane i can run op: contract honoured, not failed, and its supports() (if any) agrees; otherwise 0
 * and *why (if given) says why. */
int weft_route_lane_can_run(weft_fabric *f, int lane, const weft_op *op, const char **why);

#endif
