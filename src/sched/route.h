/* route.h - choosing the lane an op runs on. */
#ifndef WEFT_ROUTE_H
#define WEFT_ROUTE_H

#include "../core/internal.h"

/* Picks a lane for `op` among those that honour its contract, are not failed and accept it (supports).
 * `inputs` are the op's input tensors (NULL entries skipped). Returns the lane index, or -1 with the
 * fabric's last error set when no lane can run it. */
int weft_route_pick(weft_fabric *f, const weft_op *op, weft_tensor *const *inputs, int ninputs);

/* 1 when lane i can run op: contract honoured, not failed, and its supports() (if any) agrees. */
int weft_route_lane_can_run(weft_fabric *f, int lane, const weft_op *op);

#endif
