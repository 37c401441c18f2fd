/* cpu.h - the CPU lane's parts: the kernel framework (gemm.c), the thread pool (pool.c), and ISA detection. */
#ifndef WEFT_CPU_H
#define WEFT_CPU_H

#include "weft_lane.h"

typedef struct weft_cpu_lane weft_cpu_lane;

/* Runs a validated matmul on host buffers under op->contract (exact or fp32). */
void weft_cpu_matmul(weft_cpu_lane *lane, const weft_op *op);

/* The instruction set the kernels were chosen for ("avx512", "avx2", "portable"). */
const char *weft_cpu_isa_name(void);

#endif
