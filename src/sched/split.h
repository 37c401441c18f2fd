/* split.h - data-parallel splits of batched matmuls across lanes. */
#ifndef WEFT_SPLIT_H
#define WEFT_SPLIT_H

#include "../core/internal.h"

/* Plans (and, when a split wins, runs) an auto-routed batched matmul across lanes, or measures how one
 * runs best. Returns WEFT_OK with *out_done = 1 when it ran the op (split, or on one lane to time it);
 * *out_done = 0 means "run it on one lane": *out_lane, the lane measured fastest, or -1 for the router's.
 * *out_have_now = 1 when *out_now holds the fabric's clock as read here with only bookkeeping after it: the
 * dispatch that follows uses it instead of reading the clock again (on an op of a few hundred nanoseconds a
 * clock read is a tenth of the call). */
weft_status weft_split_matmul(weft_fabric *f, weft_op *op, weft_tensor *a, weft_tensor *b, weft_tensor *c,
                              int *out_done, int *out_lane, int *out_have_now, double *out_now);
/* Frees the last report's storage and what splits measured (fabric close). */
void weft_split_free(weft_fabric *f);

#endif
