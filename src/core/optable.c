/* optable.c - the op table (optable.h): per op, its operands, cost class and work, and host kernel. The
 * base layer: it calls nothing above it. Checking a call against an entry is sched/validate.c's. */
#include "optable.h"

#include <stdio.h>
#include <string.h>

#include "fpenv.h"
#include "reference.h"
#include "reference_tx.h"

/* ------------------------------------------------------------------------------------------- work */

static double elems(const weft_op *op) { return (double)op->rows * (double)op->cols; }
static double work_matmul(const weft_op *op) {
  return 2.0 * (double)op->batch * (double)op->m * (double)op->n * (double)op->k;
}
/* softmax_xent evaluates two exps and a log per element: about eight elementwise ops' worth */
static double work_x8(const weft_op *op) { return 8.0 * elems(op); }
static double work_x4(const weft_op *op) { return 4.0 * elems(op); }
static double work_x16(const weft_op *op) { return 16.0 * elems(op); }
/* attention: T*T/2 dot products of hs per row and head, twice (scores and the weighted sum) */
static double work_attention(const weft_op *op) {
  const double B = (double)op->iparam[0], T = (double)op->iparam[1], C = (double)op->iparam[2];
  return 2.0 * B * T * T * C + 8.0 * B * (double)op->iparam[3] * T * T;
}

/* cached attention: Tq rows of about t0+Tq/2 columns, each a dot product of hs twice, and the softmax */
static double work_attention_cached(const weft_op *op) {
  const double B = (double)op->iparam[0], C = (double)op->iparam[2], NH = (double)op->iparam[3];
  const double Tq = (double)op->iparam[5], cols = (double)op->iparam[4] + 0.5 * (Tq + 1.0);
  return 2.0 * B * Tq * cols * C + 8.0 * B * NH * Tq * cols;
}

/* cross-entropy, either way: about eight operations per logit (N rows of V), whatever rows/cols say */
static double work_xent(const weft_op *op) { return 8.0 * (double)op->iparam[0] * (double)op->iparam[1]; }
/* embedding backward: one add per element of dout per table, not the tables' size */
static double work_embedding_backward(const weft_op *op) {
  return 2.0 * (double)op->iparam[0] * (double)op->iparam[1] * (double)op->iparam[2];
}

/* ------------------------------------------------------------------------------- host kernels */

#define F(i) ((float *)op->in[i])
#define CF(i) ((const float *)op->in[i])
#define CI(i) ((const int32_t *)op->in[i])
#define O(i) ((float *)op->out[i])

static weft_status h_embedding(const weft_op *op) {
  const int64_t *ip = op->iparam;
  return weft_ref_embedding_forward(O(0), CI(0), CI(1), CF(2), CF(3), ip[0], ip[1], ip[2], ip[3], ip[4]);
}
static weft_status h_embedding_backward(const weft_op *op) {
  const int64_t *ip = op->iparam;
  return weft_ref_embedding_backward(O(0), O(1), CF(0), CI(1), CI(2), ip[0], ip[1], ip[2], ip[3], ip[4]);
}
static weft_status h_layernorm(const weft_op *op) {
  weft_ref_layernorm_forward(O(0), O(1), O(2), CF(0), CF(1), CF(2), op->iparam[0], op->iparam[1], op->fparam[0]);
  return WEFT_OK;
}
static weft_status h_layernorm_backward(const weft_op *op) {
  weft_ref_layernorm_backward(O(0), O(1), O(2), CF(0), CF(1), CF(2), CF(3), CF(4), op->iparam[0], op->iparam[1]);
  return WEFT_OK;
}
static weft_status h_gelu(const weft_op *op) {
  weft_ref_gelu_forward(O(0), CF(0), op->iparam[0]);
  return WEFT_OK;
}
static weft_status h_gelu_backward(const weft_op *op) {
  weft_ref_gelu_backward(O(0), CF(0), CF(1), op->iparam[0]);
  return WEFT_OK;
}
static weft_status h_attention(const weft_op *op) {
  const int64_t *ip = op->iparam;
  return weft_ref_attention_forward(O(0), O(2), O(1), CF(0), ip[0], ip[1], ip[2], ip[3]);
}
static weft_status h_attention_cached(const weft_op *op) {
  const int64_t *ip = op->iparam;
  return weft_ref_attention_cached(O(0), O(1), CF(0), ip[0], ip[1], ip[2], ip[3], ip[4], ip[5]);
}
static weft_status h_attention_backward(const weft_op *op) {
  const int64_t *ip = op->iparam;
  return weft_ref_attention_backward(O(0), CF(0), CF(1), CF(2), ip[0], ip[1], ip[2], ip[3]);
}
static weft_status h_causal_softmax(const weft_op *op) {
  weft_ref_causal_softmax_forward(O(0), CF(0), op->iparam[0], op->iparam[1], op->fparam[0]);
  return WEFT_OK;
}
static weft_status h_causal_softmax_backward(const weft_op *op) {
  weft_ref_causal_softmax_backward(O(0), CF(0), CF(1), op->iparam[0], op->iparam[1], op->fparam[0]);
  return WEFT_OK;
}
static weft_status h_crossentropy(const weft_op *op) {
  return weft_ref_crossentropy_forward(O(0), CF(0), CI(1), op->iparam[0], op->iparam[1]);
}
static weft_status h_crossentropy_backward(const weft_op *op) {
  return weft_ref_crossentropy_backward(O(0), CF(0), CI(1), CF(2), op->iparam[0], op->iparam[1]);
}
static weft_status h_adamw(const weft_op *op) {
  const float *p = op->fparam;
  weft_ref_adamw(O(0), CF(0), O(1), O(2), op->iparam[0], p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
  return WEFT_OK;
}
/* SUMSQ: acc = acc + P[0] + P[1] + ..., P[c] chunk c's ascending sum of squares from +0 (chunks of
 * WEFT_SUMSQ_CHUNK elements, the last one shorter; weft_lane.h and reference_tx.h define the order);
 * stored canonical (GLOBAL-NORM CLIP's sum). */
static weft_status h_sumsq(const weft_op *op) {
  O(0)[0] = weft_ref_sumsq(CF(0), op->iparam[0], O(0)[0]);
  return WEFT_OK;
}
/* PERMUTE: a copy of 4-byte elements; y's index (i0..i3) reads x at the permuted index. */
static weft_status h_permute(const weft_op *op) {
  int perm[4];
  for (int a = 0; a < 4; a++) perm[a] = (int)((op->iparam[5] >> (2 * a)) & 3);
  weft_ref_permute((uint32_t *)op->out[0], (const uint32_t *)op->in[0], op->iparam + 1, perm);
  return WEFT_OK;
}
/* MATMUL_ACC: c += op(a) . op(b), each sum continuing from c's value (reference.c's weft_ref_matmul). */
static weft_status h_matmul_acc(const weft_op *op) {
  for (int64_t p = 0; p < op->batch; p++) weft_ref_matmul(op, p, 0, op->m);
  return WEFT_OK;
}
/* COPY_SLICE: dst[o, offset + i, r] = src[o, i, r]; the rest of dst unchanged. */
static weft_status h_copy_slice(const weft_op *op) {
  const int64_t *ip = op->iparam;
  weft_ref_copy_slice(op->out[0], op->in[0], ip[0], ip[1], ip[2], ip[3], ip[4]);
  return WEFT_OK;
}

weft_status weft_optable_host_run(const weft_op *op, const weft_lane_host *host) {
  if ((unsigned)op->kind >= WEFT_OP_COUNT || !weft_optable[op->kind].host)
    return weft_lane_report(host, WEFT_ERR_UNSUPPORTED, "no host kernel for op %d", (int)op->kind);
  weft_fpenv env;
  weft_fpenv_enter(&env);
  weft_status st = weft_optable[op->kind].host(op);
  weft_fpenv_leave(&env);
  if (st != WEFT_OK)
    return weft_lane_report(host, st, "%s: %s", weft_optable[op->kind].name,
                            st == WEFT_ERR_OUT_OF_MEMORY ? "out of host memory for the kernel's scratch"
                            : st == WEFT_ERR_INVALID_ARGUMENT ? "an index is out of range (or an operand is missing)"
                                                              : "the shapes do not fit the kernel");
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------- the table */

#define FF {WEFT_DT_F32, WEFT_DT_F32, WEFT_DT_F32, WEFT_DT_F32, WEFT_DT_F32, WEFT_DT_F32}
#define FO {WEFT_DT_F32, WEFT_DT_F32, WEFT_DT_F32, WEFT_DT_F32}
#define EW WEFT_COST_ELEMENTWISE

const weft_optable_entry weft_optable[WEFT_OP_COUNT] = {
    [WEFT_OP_MATMUL] = {"matmul", 2, 1, 0, 0, 0, FF, FO, {"a", "b"}, {"c"}, 0, {0}, WEFT_COST_MATMUL,
                        work_matmul, NULL, 1},
    [WEFT_OP_ADD] = {"add", 2, 1, 0, 0, 0, FF, FO, {"x", "y"}, {"out"}, 0, {3}, EW, elems, NULL, 0},
    [WEFT_OP_RELU] = {"relu", 1, 1, 0, 0, 0, FF, FO, {"x"}, {"out"}, 0, {1}, EW, elems, NULL, 0},
    [WEFT_OP_RELU_BACKWARD] = {"relu_backward", 2, 1, 0, 0, 0, FF, FO, {"grad", "x"}, {"out"}, 0, {3},
                               EW, elems, NULL, 0},
    [WEFT_OP_SCALE] = {"scale", 1, 1, 0, 0, 0, FF, FO, {"x"}, {"out"}, 0, {1}, EW, elems, NULL, 0},
    [WEFT_OP_AXPY] = {"axpy", 1, 1, 0, 0, 0, FF, FO, {"x"}, {"y"}, 1, {0}, EW, elems, NULL, 0},
    [WEFT_OP_SUM_ROWS] = {"sum_rows", 1, 1, 0, 0, 0, FF, FO, {"x"}, {"out"}, 0, {0}, EW, elems, NULL, 0},
    [WEFT_OP_SOFTMAX_XENT] = {"softmax_xent", 2, 2, 0, 3, 1, FF, FO, {"logits", "targets"}, {"out_loss", "out_grad"},
                              0, {0}, EW, work_x8, NULL, 0},
    [WEFT_OP_EMBEDDING] = {"embedding", 4, 1, 2, 0, 0, {WEFT_DT_I32, WEFT_DT_I32, WEFT_DT_F32, WEFT_DT_F32}, FO,
                           {"tok", "pos", "wte", "wpe"}, {"out"}, 0, {0}, EW, elems, h_embedding, 0},
    [WEFT_OP_EMBEDDING_BACKWARD] = {"embedding_backward", 3, 2, 4, 3, 1, {WEFT_DT_F32, WEFT_DT_I32, WEFT_DT_I32}, FO,
                                    {"dout", "tok", "pos"}, {"dwte", "dwpe"}, 3, {0}, EW,
                                    work_embedding_backward,
                                    h_embedding_backward, 0},
    [WEFT_OP_LAYERNORM] = {"layernorm", 3, 3, 0, 6, 0, FF, FO, {"x", "gamma", "beta"}, {"y", "mean", "rstd"}, 0,
                           {1}, EW, work_x4, h_layernorm, 0},
    [WEFT_OP_LAYERNORM_BACKWARD] = {"layernorm_backward", 5, 3, 0, 6, 0, FF, FO, {"dy", "x", "mean", "rstd", "gamma"},
                                    {"dx", "dgamma", "dbeta"}, 6, {1}, EW, work_x8,
                                    h_layernorm_backward, 0},
    [WEFT_OP_GELU] = {"gelu", 1, 1, 0, 0, 0, FF, FO, {"x"}, {"y"}, 0, {1}, EW, work_x8, h_gelu, 0},
    [WEFT_OP_GELU_BACKWARD] = {"gelu_backward", 2, 1, 0, 0, 0, FF, FO, {"x", "dy"}, {"dx"}, 0, {3}, EW, work_x16, h_gelu_backward, 0},
    [WEFT_OP_ATTENTION] = {"attention", 1, 3, 0, 4, 0, FF, FO, {"qkv"}, {"out", "att", "preatt"}, 0, {0},
                           EW, work_attention, h_attention, 0},
    [WEFT_OP_ATTENTION_BACKWARD] = {"attention_backward", 3, 1, 0, 0, 0, FF, FO, {"dout", "qkv", "att"}, {"dqkv"}, 0,
                                    {0}, EW, work_attention, h_attention_backward, 0},
    [WEFT_OP_CAUSAL_SOFTMAX] = {"causal_softmax", 1, 1, 0, 0, 0, FF, FO, {"scores"}, {"probs"}, 0, {1},
                                EW, work_x8, h_causal_softmax, 0},
    [WEFT_OP_CAUSAL_SOFTMAX_BACKWARD] = {"causal_softmax_backward", 2, 1, 0, 0, 0, FF, FO, {"probs", "dprobs"},
                                         {"dscores"}, 0, {2}, EW, work_x4,
                                         h_causal_softmax_backward, 0},
    [WEFT_OP_CROSSENTROPY] = {"crossentropy", 2, 1, 0, 0, 0, {WEFT_DT_F32, WEFT_DT_I32}, FO, {"logits", "targets"},
                              {"losses"}, 0, {0}, EW, work_xent, h_crossentropy, 0},
    [WEFT_OP_CROSSENTROPY_BACKWARD] = {"crossentropy_backward", 3, 1, 0, 0, 0, {WEFT_DT_F32, WEFT_DT_I32, WEFT_DT_F32},
                                       FO, {"logits", "targets", "dloss"}, {"dlogits"}, 0, {0}, EW,
                                       work_xent, h_crossentropy_backward, 0},
    [WEFT_OP_ADAMW] = {"adamw", 1, 3, 0, 0, 0, FF, FO, {"grad"}, {"param", "m", "v"}, 7, {0}, EW, work_x16,
                       h_adamw, 0},
    [WEFT_OP_SUMSQ] = {"sumsq", 1, 1, 0, 0, 0, FF, FO, {"x"}, {"acc"}, 1, {0}, EW, elems, h_sumsq, 0},
    [WEFT_OP_PERMUTE] = {"permute", 1, 1, 0, 0, 0, {WEFT_DT_SAME}, {WEFT_DT_SAME}, {"x"}, {"y"}, 0, {0}, EW,
                         elems, h_permute, 0},
    [WEFT_OP_COPY_SLICE] = {"copy_slice", 1, 1, 0, 0, 0, {WEFT_DT_SAME}, {WEFT_DT_SAME}, {"src"}, {"dst"}, 1, {0},
                            EW, elems, h_copy_slice, 0},
    [WEFT_OP_ATTENTION_CACHED] = {"attention_cached", 1, 2, 0, 2, 0, FF, FO, {"qkv"}, {"out", "att"}, 0, {0},
                                  EW, work_attention_cached, h_attention_cached, 0},
    [WEFT_OP_MATMUL_ACC] = {"matmul_acc", 2, 1, 0, 0, 0, FF, FO, {"a", "b"}, {"c"}, 1, {0}, WEFT_COST_MATMUL,
                            work_matmul, h_matmul_acc, 0},
};
