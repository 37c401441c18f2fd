/* ukr_avx2.c - the AVX2 microkernels (built with -mavx2 -mfma), 4 rows x 24 columns: 12 ymm accumulators,
 * three B vectors and one broadcast A value; products go through the remaining register.
 *
 * Exact: one vmulps and one vaddps per accumulator per k. On Zen 4 multiplies and adds issue to different
 * pipes, so the pair sustains nearly the throughput of one FMA; 12 independent add chains per k step hide
 * the add latency. fp32: one vfmadd231ps per accumulator per k. The exact kernel stores every NaN as the
 * canonical 0x7fc00000 (a compare and a blend per vector per tile store, next to kc multiply-adds).
 *
 * Why 4x24 rather than 6x16 (same register budget): per k step it reads 4 A values from the L2-resident
 * packed A block instead of 6. Measured on Zen 4 (2 cores): 1024 and 2048 matmuls ran 2-5% faster on two
 * threads; 6x16 was faster only at 256, where 24 does not divide the width. */
#include <immintrin.h>

#include "ukernel.h"

#define MR 4
#define NR 24

/* The accumulators as named locals: gcc keeps a fixed set of named __m256 in registers reliably, which it
 * does not always do for an array indexed in unrolled loops. */
#define TILE_DECL __m256 c00, c01, c02, c10, c11, c12, c20, c21, c22, c30, c31, c32
#define TILE_ZERO c00 = c01 = c02 = c10 = c11 = c12 = c20 = c21 = c22 = c30 = c31 = c32 = _mm256_setzero_ps()
#define ROW_LOAD(r)                                                                                                \
  c##r##0 = _mm256_loadu_ps(c + r * ldc);                                                                          \
  c##r##1 = _mm256_loadu_ps(c + r * ldc + 8);                                                                      \
  c##r##2 = _mm256_loadu_ps(c + r * ldc + 16)
#define ROW_STORE(r)                                                                                               \
  _mm256_storeu_ps(c + r * ldc, c##r##0);                                                                          \
  _mm256_storeu_ps(c + r * ldc + 8, c##r##1);                                                                      \
  _mm256_storeu_ps(c + r * ldc + 16, c##r##2)
#define ALL_ROWS(X) X(0); X(1); X(2); X(3)
/* NaN lanes of v replaced by the canonical NaN. */
#define CANON(v) v = _mm256_blendv_ps(v, canon, _mm256_cmp_ps(v, v, _CMP_UNORD_Q))
#define ROW_CANON_STORE(r)                                                                                         \
  CANON(c##r##0);                                                                                                  \
  CANON(c##r##1);                                                                                                  \
  CANON(c##r##2);                                                                                                  \
  ROW_STORE(r)

#define ROW_EXACT(r)                                                                                               \
  do {                                                                                                             \
    __m256 av = _mm256_broadcast_ss(a + r);                                                                        \
    c##r##0 = _mm256_add_ps(c##r##0, _mm256_mul_ps(av, b0));                                                       \
    c##r##1 = _mm256_add_ps(c##r##1, _mm256_mul_ps(av, b1));                                                       \
    c##r##2 = _mm256_add_ps(c##r##2, _mm256_mul_ps(av, b2));                                                       \
  } while (0)
#define ROW_FMA(r)                                                                                                 \
  do {                                                                                                             \
    __m256 av = _mm256_broadcast_ss(a + r);                                                                        \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                                    \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                                                    \
    c##r##2 = _mm256_fmadd_ps(av, b2, c##r##2);                                                                    \
  } while (0)

#define KERNEL(name, ROW, STORE)                                                                                       \
  static void name(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c, int64_t ldc,   \
                   int first) {                                                                                    \
    TILE_DECL;                                                                                                     \
    if (first) {                                                                                                   \
      TILE_ZERO;                                                                                                   \
    } else {                                                                                                       \
      ALL_ROWS(ROW_LOAD);                                                                                          \
    }                                                                                                              \
    for (int64_t p = 0; p < kc; p++) {                                                                             \
      __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8), b2 = _mm256_load_ps(b + 16);                      \
      ALL_ROWS(ROW);                                                                                               \
      a += MR;                                                                                                     \
      b += NR;                                                                                                     \
    }                                                                                                              \
    const __m256 canon = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));                                     \
    (void)canon;                                                                                                   \
    ALL_ROWS(STORE);                                                                                               \
  }

KERNEL(ukr_avx2_exact, ROW_EXACT, ROW_CANON_STORE)
KERNEL(ukr_avx2_fma, ROW_FMA, ROW_STORE)

/* kc 256: a B micro-panel (24 KiB) stays in the 32 KiB L1 while A streams past; mc 144: the packed A block
 * (144 KiB) sits in L2 with room for B's panels; nc 4080 (a multiple of 24): the shared B block (4 MiB)
 * sits in L3. Sweeps of mc 96-192 and kc 192-384 on Zen 4 moved results by less than the noise. */
const weft_cpu_kernels weft_cpu_kernels_avx2 = {
    .isa = "avx2", .mr = MR, .nr = NR, .mc = 144, .kc = 256, .nc = 4080,
    .exact = ukr_avx2_exact, .fp32 = ukr_avx2_fma,
};
