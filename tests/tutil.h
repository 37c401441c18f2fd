/* tutil.h - the small test harness every test file shares: check counters, NaN-normalised bit comparison,
 * a seeded random generator, substring checks on error messages, and the closing summary.
 *
 * Deliberately tiny: a failed check prints where and why and the test goes on, so one run shows every
 * difference; main() returns tu_finish()'s exit code, which CTest reads. */
#ifndef WEFT_TUTIL_H
#define WEFT_TUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft.h"

extern long tu_checks;   /* checks made */
extern long tu_failures; /* checks that failed */

/* The exit code CTest reads as "skipped" (each test that can skip has SKIP_RETURN_CODE 77). */
#define TU_SKIP_EXIT 77

/* Records one check; on failure prints file:line and the printf-style explanation. */
void tu_check_at(int ok, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#define TU_CHECK(cond, ...) tu_check_at((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)

/* Checks that a call returned `want`. */
#define TU_STATUS(got, want, what)                                                                                \
  do {                                                                                                            \
    weft_status tu_g_ = (got), tu_w_ = (want);                                                                    \
    TU_CHECK(tu_g_ == tu_w_, "%s: got %s (%d), want %s (%d)", (what), weft_status_str(tu_g_), (int)tu_g_,         \
             weft_status_str(tu_w_), (int)tu_w_);                                                                 \
  } while (0)

/* Bits of a float and back. */
uint32_t tu_bits(float x);
float tu_float(uint32_t bits);
/* 1 when a and b have the same bits, NaNs included: under the exact contract every lane stores a NaN
 * result as the one canonical quiet NaN (0x7fc00000), so a reference that makes a NaN must store that too. */
int tu_same_bits(float a, float b);

/* splitmix64: small, seedable, the same sequence on every platform. */
typedef struct tu_rng {
  uint64_t s;
} tu_rng;
uint64_t tu_rng_next(tu_rng *r);
/* Uniform integer in [lo, hi]. */
int64_t tu_rng_int(tu_rng *r, int64_t lo, int64_t hi);
/* Uniform float in [lo, hi), with full 24-bit mantissas (not multiples of a coarse step). */
float tu_rng_float(tu_rng *r, float lo, float hi);
/* The suite's seed: WEFT_TEST_SEED from the environment (decimal or 0x...), else a fixed default, so a
 * failing run can be repeated exactly. */
uint64_t tu_seed(void);

/* The fabric options tests open with: calibration off, so no test measures lanes (slow on a software GPU)
 * or reads or writes the user's calibration cache; routing then uses the built-in priors. */
weft_fabric_desc tu_desc(void);
/* Opens a fabric with tu_desc() and `lanes` as the lane filter (NULL: every lane). */
weft_status tu_open(const char *lanes, weft_fabric **out_fabric);

/* Case-insensitive substring test; NULL haystack never matches. */
int tu_contains(const char *haystack, const char *needle);
/* Seconds on a monotonic clock. */
double tu_now(void);
/* Buffer slots for fake device lanes whose buffers are plain host memory (calloc), for tests that drive
 * the core with lanes of their own (weft_testing_add_lane). */
weft_status tu_fake_alloc(void *self, size_t bytes, void **out_buffer);
void tu_fake_free(void *self, void *buffer);
weft_status tu_fake_upload(void *self, void *buffer, size_t offset, const void *src, size_t bytes);
weft_status tu_fake_download(void *self, void *buffer, size_t offset, void *dst, size_t bytes);

/* Marks the whole test as skipped (nothing here to test: no GPU, no driver) and prints "SKIP: <why>".
 * tu_finish then returns TU_SKIP_EXIT unless a check failed. */
void tu_skip(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* For each item of a lane filter (WEFT_TEST_LANES: "cpu,opencl") that no lane of `fabric` matches by kind
 * or name, tu_skip saying so: a run for a lane that is not here tested nothing of it (it ends Skipped
 * after the lanes that are here passed, never Passed). NULL or "" names nothing. */
void tu_require_lanes(weft_fabric *fabric, const char *filter);

/* Prints "<name>: N checks, M failed (S s)" and returns the process exit code: 1 when a check failed,
 * TU_SKIP_EXIT when the test skipped (tu_skip), 1 when it made no check at all (a test that checked
 * nothing cannot have passed), else 0. */
int tu_finish(const char *name, double start);

#endif
