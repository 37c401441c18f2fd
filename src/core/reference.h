/* reference.h - the plain reference implementation of every op, on host memory.
 *
 * This is the definition of each op under the exact contract: the loops below are the canonical order, and
 * every exact lane must return these bits. It is always built, serves as the CPU lane's fallback, and is
 * what the conformance suite compares against. */
#ifndef WEFT_REFERENCE_H
#define WEFT_REFERENCE_H

#include <stdint.h>
#include <string.h>

#include "weft_lane.h"

/* The one NaN every exact kernel stores: the canonical quiet NaN, positive, payload 0. Hardware differs in
 * the NaN it produces (x86 gives 0xffc00000 for inf - inf and keeps an input NaN's payload; GPUs differ
 * again), so each store of a result that can be NaN goes through weft_canon_nan, and "the same bits on
 * every lane" holds for NaN results too. */
#define WEFT_CANON_NAN_BITS 0x7fc00000u
static inline float weft_canon_nan(float v) {
  if (v != v) {
    const uint32_t u = WEFT_CANON_NAN_BITS;
    memcpy(&v, &u, sizeof v);
  }
  return v;
}

/* Runs `op` with in/out buffers that are host float arrays. Never fails for a validated op. Runs under the
 * clean floating-point environment (fpenv.h) whatever the calling thread's, and puts that back after. */
WEFT_API void weft_reference_run(const weft_op *op);

/* The per-op reference kernels (also used by the CPU lane for ops it has no faster kernel for). The matmul
 * takes a row range [i0, i1) of every batch entry's output so callers can split it across threads. */
WEFT_API void weft_ref_matmul(const weft_op *op, int64_t p, int64_t i0, int64_t i1);

#endif
