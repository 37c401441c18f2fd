/* conformance.h - the conformance suite as a library of cases, run against any lane of a fabric.
 *
 * Nothing here names a lane: the driver (test_conformance.c) enumerates the fabric's lanes and calls
 * weft_conf_run once per lane and contract, so a lane added to weft later (vulkan, cuda, remote, ...) is
 * covered with no copy of the suite. Every case builds its inputs on the host, runs the op through the public
 * API pinned to the lane, reads the result back with weft_tensor_read and compares it:
 *   exact contract: bit for bit against the reference (src/core/reference.c) run on host copies, NaNs too
 *                   (each must be the canonical 0x7fc00000), and within the fp32 bound below against
 *                   float64 (which checks the reference too);
 *   fp32 contract:  against a float64 reference within a stated bound per op (see conformance.c). */
#ifndef WEFT_CONFORMANCE_H
#define WEFT_CONFORMANCE_H

#include <stdint.h>
#include <stdio.h>

#include "weft.h"

/* What a run covered. */
typedef struct weft_conf_stats {
  long cases;    /* op invocations checked */
  long elements; /* output elements compared */
  long failed;   /* cases with at least one failed check */
  long skipped;  /* cases not counted in `cases`: the lane pinned refused an op it offers as beyond its size
                  * limits (WEFT_ERR_UNSUPPORTED; weft_conf_run lists them per op) */
} weft_conf_stats;

/* Runs every case on lane `lane` (an index from weft_fabric_lane_count, or WEFT_LANE_AUTO to let the router
 * choose) under `contract`. `slow` keeps every dimension <= 256 and trims the random cases (for lanes that
 * are not the CPU: a software Vulkan driver is 50-400x slower); `quick` runs only the fixed edge cases.
 * Large-k matmuls (k up to 4099, odd shapes, small m and n) run on every lane whatever `slow` says; `quick`
 * leaves them out. Shapes and values come from `seed`, so every lane sees the same cases. Adds to *stats. */
void weft_conf_run(weft_fabric *fabric, int lane, weft_contract contract, int slow, int quick, uint64_t seed,
                   weft_conf_stats *stats);

/* Runs the chain matmul -> add bias (in place) -> relu (in place) with each step pinned to a lane from
 * `lanes` (every combination of up to 4 lanes; WEFT_LANE_AUTO allowed) under the exact contract, with and
 * without a scope, checking the bits against the reference chain and the residency each step leaves behind
 * (weft_tensor_location). */
void weft_conf_chain(weft_fabric *fabric, const int *lanes, int nlanes, uint64_t seed, weft_conf_stats *stats);

/* The whole suite on a fabric: weft_conf_run on every lane under exact and fp32 (a contract the lane does not
 * honour is skipped with a printed line, and an op pinned there must be refused), once more through the
 * router (edge cases only), then the chain over up to three exact lanes and the router. Prints a line per
 * run; adds to *total. */
void weft_conf_run_all(weft_fabric *fabric, uint64_t seed, weft_conf_stats *total);

/* Where mismatches are printed (NULL: stderr). The fault-injection test points it at a scratch file. */
extern FILE *weft_conf_log;

#endif
