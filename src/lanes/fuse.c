/* fuse.c - the peephole of fuse.h: a window of at most WEFT_FUSE_WINDOW ops, the patterns it recognises,
 * and the rules that keep a fusion from changing what any buffer holds. */
#include "lanes/fuse.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

void weft_fuse_init(weft_fuse *z, unsigned patterns, weft_contract_mask contracts) {
  memset(z, 0, sizeof *z);
  z->patterns = patterns;
  z->contracts = contracts;
}

int weft_fuse_env_enabled(void) {
  const char *e = getenv("WEFT_FUSE");
  if (!e) return 1;
  return !(strcmp(e, "0") == 0 || strcasecmp(e, "off") == 0 || strcasecmp(e, "no") == 0 ||
           strcasecmp(e, "false") == 0);
}

int weft_fuse_uses(const weft_fuse *z, const weft_buffer *b) {
  if (!b) return 0;
  for (int i = 0; i < z->n; i++) {
    for (int s = 0; s < WEFT_OP_MAX_IN; s++)
      if (z->ops[i].in[s] == b) return 1;
    for (int s = 0; s < WEFT_OP_MAX_OUT; s++)
      if (z->ops[i].out[s] == b) return 1;
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------- the rules */

/* Every operand fp32, no result streamed home as it is computed (out_host), a contract the lane fuses. */
static int plain(const weft_fuse *z, const weft_op *op) {
  if (!(z->contracts & WEFT_CONTRACT_BIT(op->contract))) return 0;
  for (int s = 0; s < WEFT_OP_MAX_IN; s++)
    if (op->in[s] && op->in_dtype[s] != WEFT_DTYPE_F32) return 0;
  for (int s = 0; s < WEFT_OP_MAX_OUT; s++)
    if (op->out[s] && (op->out_dtype[s] != WEFT_DTYPE_F32 || op->out_host[s])) return 0;
  return 1;
}

static int64_t mm_elems(const weft_op *mm) { return mm->batch * mm->m * mm->n; }

/* A matmul an epilogue can follow: c is neither a nor b (each block of c is written while a and b are read
 * by other blocks), and the k sum is not empty (with k = 0 some lanes write c without running a kernel). */
static int mm_start(const weft_fuse *z, const weft_op *op) {
  return (z->patterns & WEFT_FUSE_MATMUL_EPILOGUE) && op->kind == WEFT_OP_MATMUL && plain(z, op) && op->batch > 0 &&
         op->m > 0 && op->n > 0 && op->k > 0 && op->out[0] && op->out[0] != op->in[0] && op->out[0] != op->in[1];
}

/* An add that may start add -> layernorm: full shape (no broadcast row). */
static int add_start(const weft_fuse *z, const weft_op *op) {
  return (z->patterns & WEFT_FUSE_ADD_LAYERNORM) && op->kind == WEFT_OP_ADD && plain(z, op) && !op->y_broadcast &&
         op->rows > 0 && op->cols > 0 && op->out[0];
}

static int same_contract(const weft_op *a, const weft_op *b) { return a->contract == b->contract; }

/* Whether `op` extends the held matmul's epilogue (fills z->bias / residual / gelu_out when it does). The
 * epilogue's order is fixed (bias, residual, gelu), each at most once, each reading c in place. */
static int mm_extend(weft_fuse *z, const weft_op *op) {
  const weft_op *mm = &z->ops[0];
  weft_buffer *c = mm->out[0];
  if (z->gelu_out || !plain(z, op) || !same_contract(mm, op)) return 0;
  if (op->kind == WEFT_OP_ADD && op->in[0] == c && op->out[0] == c && op->in[1] && op->in[1] != c) {
    /* the bias row: [batch*m, n] + one row of n */
    if (op->y_broadcast && !z->bias && !z->residual && op->cols == mm->n && op->rows == mm->batch * mm->m) {
      z->bias = op->in[1];
      return 1;
    }
    /* the residual: c's shape, read elementwise */
    if (!op->y_broadcast && !z->residual && op->rows * op->cols == mm_elems(mm)) {
      z->residual = op->in[1];
      return 1;
    }
    return 0;
  }
  if (op->kind == WEFT_OP_GELU && op->in[0] == c && op->out[0] && op->out[0] != c && op->iparam[0] == mm_elems(mm)) {
    weft_buffer *g = op->out[0];
    if (g == mm->in[0] || g == mm->in[1] || g == z->bias || g == z->residual) return 0;
    z->gelu_out = g;
    return 1;
  }
  return 0;
}

/* Whether `ln` is a layernorm of the held add's sum x2 that one kernel can run with it: the kernel reads a and
 * b (either may be x2 itself: an in-place residual) and writes x2, y, mean and rstd, so no output may be an
 * input of the other op or another output. */
static int add_ln(const weft_fuse *z, const weft_op *ln) {
  const weft_op *add = &z->ops[0];
  weft_buffer *x2 = add->out[0];
  if (ln->kind != WEFT_OP_LAYERNORM || !plain(z, ln) || !same_contract(add, ln) || ln->in[0] != x2) return 0;
  if (ln->iparam[0] * ln->iparam[1] != add->rows * add->cols || ln->iparam[1] <= 0) return 0;
  weft_buffer *reads[4] = {add->in[0], add->in[1], ln->in[1], ln->in[2]};
  if (ln->in[1] == x2 || ln->in[2] == x2) return 0;
  for (int o = 0; o < 3; o++) {
    weft_buffer *w = ln->out[o];
    if (!w) {
      if (o == 0) return 0;
      continue;
    }
    if (w == x2) return 0;
    for (int i = 0; i < 4; i++)
      if (w == reads[i]) return 0;
    for (int p = 0; p < o; p++)
      if (w == ln->out[p]) return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------------------------------- window */

static void clear(weft_fuse *z) {
  z->n = 0;
  z->bias = z->residual = z->gelu_out = NULL;
}

/* Emits the window; `held` of its ops were accepted by earlier calls. */
static weft_status flush_held(weft_fuse *z, int held, weft_fuse_emit_fn emit, void *ctx) {
  if (z->n == 0) return WEFT_OK;
  weft_fused f;
  memset(&f, 0, sizeof f);
  f.ops = z->ops;
  f.nops = z->n;
  f.held = held;
  weft_status st;
  if (z->n == 1) {
    f.kind = WEFT_FUSED_SINGLE;
  } else if (z->ops[0].kind == WEFT_OP_MATMUL) {
    f.kind = WEFT_FUSED_MATMUL_EPILOGUE;
    f.bias = z->bias, f.residual = z->residual, f.gelu_out = z->gelu_out;
  } else {
    f.kind = WEFT_FUSED_ADD_LAYERNORM;
  }
  st = emit(ctx, &f);
  clear(z);
  return st;
}

weft_status weft_fuse_flush(weft_fuse *z, weft_fuse_emit_fn emit, void *ctx) { return flush_held(z, z->n, emit, ctx); }

static weft_status emit_single(const weft_op *op, weft_fuse_emit_fn emit, void *ctx) {
  weft_fused f;
  memset(&f, 0, sizeof f);
  f.kind = WEFT_FUSED_SINGLE;
  f.nops = 1;
  f.ops = op;
  return emit(ctx, &f);
}

weft_status weft_fuse_run(weft_fuse *z, const weft_op *op, weft_fuse_emit_fn emit, void *ctx) {
  if (z->n > 0) {
    const int is_mm = z->ops[0].kind == WEFT_OP_MATMUL;
    if (is_mm ? mm_extend(z, op) : add_ln(z, op)) {
      z->ops[z->n++] = *op;
      /* complete: a gelu ends the epilogue, a layernorm its pattern */
      if (z->n == WEFT_FUSE_WINDOW || op->kind == WEFT_OP_GELU || op->kind == WEFT_OP_LAYERNORM)
        return flush_held(z, z->n - 1, emit, ctx);
      return WEFT_OK;
    }
    weft_status st = weft_fuse_flush(z, emit, ctx);
    if (st != WEFT_OK) return st;
  }
  if (mm_start(z, op) || add_start(z, op)) {
    z->ops[0] = *op;
    z->n = 1;
    return WEFT_OK;
  }
  return emit_single(op, emit, ctx);
}
