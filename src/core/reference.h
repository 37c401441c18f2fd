/* reference.h - the plain reference implementation of every op, on host memory.
 *
 * This is the definition of each op under the exact contract: the loops below are the canonical order, and
 * every exact lane must return these bits. It is always built, serves as the CPU lane's fallback, and is
 * what the conformance suite compares against. */
#ifndef WEFT_REFERENCE_H
#define WEFT_REFERENCE_H

#include "weft_lane.h"

/* Runs `op` with in/out buffers that are host float arrays. Never fails for a validated op. */
WEFT_API void weft_reference_run(const weft_op *op);

/* The per-op reference kernels (also used by the CPU lane for ops it has no faster kernel for). The matmul
 * takes a row range [i0, i1) of every batch entry's output so callers can split it across threads. */
WEFT_API void weft_ref_matmul(const weft_op *op, int64_t p, int64_t i0, int64_t i1);

#endif
