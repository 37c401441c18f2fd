/* ukr_avx2.c - the AVX2 microkernels (built with -mavx2 -mfma), 6 rows x 16 columns: 12 ymm accumulators,
 * two B vectors, one broadcast A value and one product fill the 16 ymm registers.
 *
 * Exact: one vmulps and one vaddps per accumulator per k. On Zen 4 multiplies and adds issue to different
 * pipes, so the pair sustains nearly the throughput of one FMA; 12 independent add chains per k step hide
 * the add latency. fp32: one vfmadd231ps per accumulator per k. */
#include <immintrin.h>

#include "ukernel.h"

#define MR 6
#define NR 16

/* The tile's accumulators as named locals: gcc keeps a small fixed set of named __m256 in registers
 * reliably, which it does not always do for an array indexed in unrolled loops. */
#define TILE_DECL __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51
#define TILE_ZERO                                                                                                  \
  c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps()
#define ROW_LOAD(r)                                                                                                \
  c##r##0 = _mm256_loadu_ps(c + r * ldc);                                                                          \
  c##r##1 = _mm256_loadu_ps(c + r * ldc + 8)
#define ROW_STORE(r)                                                                                               \
  _mm256_storeu_ps(c + r * ldc, c##r##0);                                                                          \
  _mm256_storeu_ps(c + r * ldc + 8, c##r##1)
#define TILE_LOAD ROW_LOAD(0); ROW_LOAD(1); ROW_LOAD(2); ROW_LOAD(3); ROW_LOAD(4); ROW_LOAD(5)
#define TILE_STORE ROW_STORE(0); ROW_STORE(1); ROW_STORE(2); ROW_STORE(3); ROW_STORE(4); ROW_STORE(5)

#define ROW_EXACT(r)                                                                                               \
  do {                                                                                                             \
    __m256 av = _mm256_broadcast_ss(a + r);                                                                        \
    c##r##0 = _mm256_add_ps(c##r##0, _mm256_mul_ps(av, b0));                                                       \
    c##r##1 = _mm256_add_ps(c##r##1, _mm256_mul_ps(av, b1));                                                       \
  } while (0)
#define ROW_FMA(r)                                                                                                 \
  do {                                                                                                             \
    __m256 av = _mm256_broadcast_ss(a + r);                                                                        \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                                    \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                                                    \
  } while (0)

#define KERNEL(name, ROW)                                                                                          \
  static void name(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c, int64_t ldc,   \
                   int first) {                                                                                    \
    TILE_DECL;                                                                                                     \
    if (first) {                                                                                                   \
      TILE_ZERO;                                                                                                   \
    } else {                                                                                                       \
      TILE_LOAD;                                                                                                   \
    }                                                                                                              \
    for (int64_t p = 0; p < kc; p++) {                                                                             \
      __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);                                                   \
      ROW(0); ROW(1); ROW(2); ROW(3); ROW(4); ROW(5);                                                              \
      a += MR;                                                                                                     \
      b += NR;                                                                                                     \
    }                                                                                                              \
    TILE_STORE;                                                                                                    \
  }

KERNEL(ukr_avx2_exact, ROW_EXACT)
KERNEL(ukr_avx2_fma, ROW_FMA)

const weft_cpu_kernels weft_cpu_kernels_avx2 = {
    .isa = "avx2", .mr = MR, .nr = NR, .mc = 144, .kc = 256, .nc = 4080,
    .exact = ukr_avx2_exact, .fp32 = ukr_avx2_fma,
};
