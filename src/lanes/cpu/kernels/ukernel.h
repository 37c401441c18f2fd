/* ukernel.h - the one signature every matmul microkernel has, and the context table that names, per
 * instruction set, the microkernels and the blocking sizes the framework (gemm.c) uses with them.
 *
 * A microkernel computes one MR x NR tile of C from packed panels:
 *   a: kc steps of MR floats (column k of an MR-row slice of A), 64-byte aligned;
 *   b: kc steps of NR floats (row k of an NR-column slice of B), 64-byte aligned;
 *   c: the tile, row-major with row stride ldc (any alignment).
 * With `first` set the tile starts from +0; otherwise it continues from the partial sums already in C.
 * The exact kernels then do, for each element and k ascending, acc = acc + a*b with the product and the sum
 * rounded separately, so splitting k into blocks and carrying the sum in C gives the reference's bits.
 * The fp32 kernels may fuse (FMA). Edge tiles are the framework's business: kernels see whole tiles only. */
#ifndef WEFT_CPU_UKERNEL_H
#define WEFT_CPU_UKERNEL_H

#include <stdint.h>

typedef void (*weft_cpu_ukr_fn)(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                                int64_t ldc, int first);

/* Upper bounds over every kernel's tile, for the framework's edge buffer. */
#define WEFT_CPU_MR_MAX 16
#define WEFT_CPU_NR_MAX 64

/* One instruction set's kernels and the cache blocking tuned for them:
 *   kc: depth of a packed block (a B micro-panel kc x nr should stay in L1 while A streams past it);
 *   mc: rows of the packed A block (mc x kc stays in L2), a multiple of mr;
 *   nc: columns of the packed B block (kc x nc stays in L3), a multiple of nr. */
typedef struct weft_cpu_kernels {
  const char *isa; /* "avx512", "avx2", "portable" */
  int mr, nr;
  int mc, kc, nc;
  weft_cpu_ukr_fn exact;
  weft_cpu_ukr_fn fp32;
} weft_cpu_kernels;

extern const weft_cpu_kernels weft_cpu_kernels_portable;
#if defined(__x86_64__) || defined(__i386__)
#define WEFT_CPU_X86 1
extern const weft_cpu_kernels weft_cpu_kernels_avx2;
extern const weft_cpu_kernels weft_cpu_kernels_avx512;
#endif

#endif
