/* ukr_portable.c - the portable microkernels: plain C that the compiler vectorises across the NR columns
 * for whatever the baseline target offers (SSE2 on x86-64, NEON on arm64). Always built; the fallback when
 * the CPU has nothing better, and the model the ISA kernels must match bit for bit. */
#include "ukernel.h"

#define MR 4
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
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) c[i * ldc + j] = acc[i][j];
}

/* Without a fused multiply-add in the baseline ISA the exact kernel is also the fastest fp32 one. */
const weft_cpu_kernels weft_cpu_kernels_portable = {
    .isa = "portable", .mr = MR, .nr = NR, .mc = 128, .kc = 256, .nc = 2048,
    .exact = ukr_portable_exact, .fp32 = ukr_portable_exact,
};
