/* testing.h - hooks for weft's own tests: fake lanes and an injected clock, so routing decisions are
 * checked exactly rather than timed. Exported from the library but not installed. */
#ifndef WEFT_TESTING_H
#define WEFT_TESTING_H

#include "weft_lane.h"

/* Adds a lane to an open fabric as if a provider had found it; the fabric takes ownership of `self`. */
WEFT_API weft_status weft_testing_add_lane(weft_fabric *fabric, const weft_lane_vtable *vtable, void *self);
/* A lane's idle slot (weft_lane.h): 1 or 0 as the lane says, -1 when it has none or the index is bad. */
WEFT_API int weft_testing_lane_idle(weft_fabric *fabric, size_t lane);
/* A lane's flush slot, as a split calls it to start a device's share: what was recorded starts running. */
WEFT_API weft_status weft_testing_lane_flush(weft_fabric *fabric, size_t lane);
/* Replaces the fabric's clock (seconds). */
WEFT_API void weft_testing_set_clock(weft_fabric *fabric, double (*clock)(void *ctx), void *ctx);

/* Marks lane `lane`'s elementwise cost line as measured (alpha, beta) and saves the calibration cache as
 * calibration does (the lock, the merge with what other writers saved, the rename). */
WEFT_API weft_status weft_testing_cache_store(weft_fabric *fabric, size_t lane, double alpha, double beta);

#endif
