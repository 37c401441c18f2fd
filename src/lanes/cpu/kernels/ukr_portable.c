/* ukr_portable.c - the portable microkernels: plain C that the compiler vectorises across the NR columns
 * for whatever the baseline target offers (SSE2 on x86-64, NEON on arm64). Always built; the fallback when
 * the CPU has nothing better, and the model the ISA kernels must match bit for bit.
 *
 * 2 rows x 16 columns: with SSE2's 16 registers that is 8 accumulators and 4 B vectors. Measured on Zen 4
 * (SSE2 only): 2x16 ran a 1024 matmul at ~24 GFLOP/s on one core, 3x16 and 6x8 at ~21, 4x16 (which spills)
 * at 7. */
#include "ukernel.h"

#define MR 2
#define NR 16

/* The tile lives in a local array the compiler keeps in vector registers; products are rounded before the
 * add because the whole project builds with -ffp-contract=off. */
static void ukr_portable_exact(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                               int64_t ldc, int first) {
  float acc[MR][NR];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) acc[i][j] = first ? 0.0f : c[i * ldc + j];
  for (int64_t p = 0; p < kc; p++) {
    for (int i = 0; i < MR; i++) {
      const float av = a[i];
      for (int j = 0; j < NR; j++) {
        float prod = av * b[j];
        acc[i][j] = acc[i][j] + prod;
      }
    }
    a += MR;
    b += NR;
  }
  /* NaN results are stored as the canonical 0x7fc00000 (WEFT_CANON_NAN_BITS), as every exact kernel does. */
  union {
    uint32_t u;
    float f;
  } canon = {0x7fc00000u};
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) c[i * ldc + j] = acc[i][j] != acc[i][j] ? canon.f : acc[i][j];
}

/* Without a fused multiply-add in the baseline ISA the exact kernel is also the fastest fp32 one. */
const weft_cpu_kernels weft_cpu_kernels_portable = {
    .isa = "portable", .mr = MR, .nr = NR, .mc = 128, .kc = 256, .nc = 2048,
    .exact = ukr_portable_exact, .fp32 = ukr_portable_exact,
};
