/* fuse.h - a peephole over the ops a lane is given inside a scope: it holds back a few ops and recognises,
 * by buffer identity and shapes, the sequences a transformer issues that a lane can run as one kernel
 * without changing a bit:
 *
 *   MATMUL c = a.b -> [ADD c = c + bias (a row broadcast)] -> [ADD c = c + r (c's shape)] -> [GELU g = gelu(c)]
 *   ADD x2 = a + b (full shape) -> LAYERNORM of x2
 *
 * A fused kernel performs the same separately rounded operations, in the same order, as the ops it stands
 * for, and leaves every buffer as they would (c still holds the pre-GELU value the backward reads; x2 the
 * sum the next residual reads): so fusing is invisible except in time. Lane-independent: a lane hands each
 * op to weft_fuse_run and gets back, through its emit callback, either one op to run as usual or a fused
 * description, always in the order the ops came. The lane flushes the window (weft_fuse_flush) before
 * anything that must see the ops' effects or order: a download, an upload or free of a buffer a pending op
 * uses (weft_fuse_uses), sync, flush, the end of the scope. Not thread-safe; one per lane. */
#ifndef WEFT_LANES_FUSE_H
#define WEFT_LANES_FUSE_H

#include "weft_lane.h"

/* Ops held at most: a matmul and its three epilogue ops. */
#define WEFT_FUSE_WINDOW 4

/* The patterns a lane has kernels for (weft_fuse_init). */
#define WEFT_FUSE_MATMUL_EPILOGUE 1u
#define WEFT_FUSE_ADD_LAYERNORM 2u

typedef enum weft_fused_kind {
  WEFT_FUSED_SINGLE = 0,      /* ops[0] alone, unfused */
  WEFT_FUSED_MATMUL_EPILOGUE, /* ops[0] a matmul, then the epilogue below */
  WEFT_FUSED_ADD_LAYERNORM,   /* ops[0] the add (x2 = in[0] + in[1]), ops[1] the layernorm of x2 */
} weft_fused_kind;

/* What the lane is asked to run. */
typedef struct weft_fused {
  weft_fused_kind kind;
  int nops;            /* the ops it stands for (1 for SINGLE) */
  int held;            /* how many of them earlier weft_fuse_run calls accepted (returned WEFT_OK for): if this
                        * fails, their results are lost although their callers were told they would come */
  const weft_op *ops;  /* them, in the order they came */
  /* WEFT_FUSED_MATMUL_EPILOGUE: after c = a.b (ops[0], c = out[0], [batch*m, n]) completes its k sum, per
   * element of c, in this order, each result rounded and stored canonical as the separate op would:
   * c = c + bias[j] (bias NULL: none), c = c + residual[i,j] (NULL: none), g[i,j] = gelu(c) (gelu_out NULL:
   * none); c keeps its last value. None of these buffers is a, b or c, and g is neither bias nor residual. */
  weft_buffer *bias, *residual, *gelu_out;
} weft_fused;

/* Runs one fused or single op on the lane; returns its status. */
typedef weft_status (*weft_fuse_emit_fn)(void *ctx, const weft_fused *fused);

typedef struct weft_fuse {
  unsigned patterns;             /* WEFT_FUSE_* the lane has kernels for */
  weft_contract_mask contracts;  /* contracts under which the lane fuses (every op of a pattern the same one) */
  int n;                         /* ops held */
  weft_op ops[WEFT_FUSE_WINDOW]; /* copies: the core's op records do not outlive run() */
  weft_buffer *bias, *residual, *gelu_out; /* the matmul's epilogue gathered so far */
} weft_fuse;

/* Sets up an empty window. `patterns` 0 turns the helper into a pass-through. */
void weft_fuse_init(weft_fuse *z, unsigned patterns, weft_contract_mask contracts);

/* Takes the next op: emits what can no longer be fused (in order), and holds `op` if it may start or extend
 * a pattern, else emits it too. The first failed emit's status is returned; the window is empty then. */
weft_status weft_fuse_run(weft_fuse *z, const weft_op *op, weft_fuse_emit_fn emit, void *ctx);

/* Emits every held op, fused as far as the window got. */
weft_status weft_fuse_flush(weft_fuse *z, weft_fuse_emit_fn emit, void *ctx);

/* 1 when a held op reads or writes buffer `b`. */
int weft_fuse_uses(const weft_fuse *z, const weft_buffer *b);

/* Whether the environment allows fusing: WEFT_FUSE=0 (or off, no, false) turns it off for lanes opened
 * from then on; unset or anything else leaves it on. */
int weft_fuse_env_enabled(void);

#endif /* WEFT_LANES_FUSE_H */
