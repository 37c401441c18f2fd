/* cpu.h - the CPU lane's parts: the lane's state, the kernel framework (gemm.c), the other ops
 * (elementwise.c), the thread pool (pool.c) and the choice of microkernels by instruction set (cpu_isa.c). */
#ifndef WEFT_CPU_H
#define WEFT_CPU_H

#include <stddef.h>

#include "kernels/ukernel.h"
#include "pool.h"
#include "weft_lane.h"

/* Scratch for packed panels, per thread; grown on the caller's thread before a job starts, freed with the
 * lane. */
typedef struct weft_cpu_scratch {
  float *a, *b;
  size_t a_cap, b_cap; /* in floats */
} weft_cpu_scratch;

typedef struct weft_cpu_lane {
  const weft_lane_host *host;
  int threads; /* threads a large op may use, the caller's included */
  const weft_cpu_kernels *kernels;
  weft_cpu_pool *pool;
  weft_cpu_scratch *scratch; /* one per thread */
  char device[128];
  char details[256];
} weft_cpu_lane;

/* Runs a validated matmul on host buffers under op->contract (exact or fp32). Fails only when scratch
 * memory cannot be allocated. */
weft_status weft_cpu_matmul(weft_cpu_lane *lane, const weft_op *op);

/* Runs a validated op other than matmul on host buffers (elementwise.c). */
void weft_cpu_elementwise(weft_cpu_lane *lane, const weft_op *op);

/* Frees the lane's scratch buffers. */
void weft_cpu_scratch_free(weft_cpu_lane *lane);

/* The microkernels for this CPU: the best instruction set it supports, lowered (never raised) by the
 * environment variable WEFT_CPU_ISA=portable|avx2|avx512. */
const weft_cpu_kernels *weft_cpu_kernels_select(void);
/* 1 when WEFT_CPU_ISA names no instruction set weft knows (it is then ignored: the lane's details say so). */
int weft_cpu_isa_request_unknown(void);

/* The instruction set the kernels are chosen for ("avx512", "avx2", "portable"), as weft_cpu_kernels_select
 * would choose now. */
const char *weft_cpu_isa_name(void);

#endif
