/* optable.h - the op table: one entry per weft_op_kind saying everything the core needs to know about an
 * op - its name, operands (how many, which are optional, their dtypes and names), its cost class and work,
 * which output may be which input, which outputs it reads as well as writes, and its host reference
 * kernel. The base layer: the cost model, the core, the lanes and the wire protocol read it. How a call's
 * tensors are checked and the lane's weft_op filled is the scheduler's (sched/validate.c, one validator per
 * op), since checking index tensors brings them home through the core. sched/ops.c runs every op through
 * one generic path over both; adding an op is one entry here, one validator, plus its kernels. */
#ifndef WEFT_OPTABLE_H
#define WEFT_OPTABLE_H

#include "state.h"

/* An operand's dtype rule. */
enum { WEFT_DT_F32 = 0, WEFT_DT_I32 = 1, WEFT_DT_SAME = 2 /* whatever in[0] is (the copy ops) */ };

typedef struct weft_optable_entry {
  const char *name;
  int nin, nout;                           /* operand slots */
  uint32_t in_optional, out_optional;      /* bit i: that operand may be NULL */
  int need_one_out;                        /* at least one output must be given (all optional) */
  uint8_t in_dt[WEFT_OP_MAX_IN], out_dt[WEFT_OP_MAX_OUT];
  const char *in_name[WEFT_OP_MAX_IN], *out_name[WEFT_OP_MAX_OUT];
  uint32_t out_reads;                      /* bit o: out[o] is read as well as written (rw) */
  uint32_t alias_ok[WEFT_OP_MAX_OUT];      /* bit i of [o]: out[o] may be the same tensor as in[i] */
  weft_cost_class cls;
  double (*work)(const weft_op *op);       /* flops (matmul) or weighted elements */
  /* The reference kernel on host arrays (the CPU lane's implementation of the version-2 ops); NULL for the
   * version-1 ops, whose kernels are reference.c's and the CPU lane's own. */
  weft_status (*host)(const weft_op *op);
  int splittable;                          /* a batched matmul may be shared out across lanes (split.c) */
} weft_optable_entry;

extern const weft_optable_entry weft_optable[WEFT_OP_COUNT];

/* Runs a validated version-2 op on host arrays, under the clean floating-point environment; a failure
 * (an index out of range the host could not check first, no memory) is reported through `host`. */
WEFT_API weft_status weft_optable_host_run(const weft_op *op, const weft_lane_host *host);

/* The ops a lane offers (its desc.ops, or the version-1 set when it said nothing). */
static inline uint64_t weft_lane_ops(const weft_lane_desc *d) { return d->ops ? d->ops : WEFT_OPS_V1; }

#endif
