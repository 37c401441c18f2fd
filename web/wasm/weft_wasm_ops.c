/* weft_wasm_ops.c - the op table's version-2 ops (kinds 8..23) in weft.wasm, for the worker page: the same
 * reference functions the native library defines them by (src/core/reference_tx.c over src/core/wmath.c),
 * compiled with -ffp-contract=off and no fast-math, so a tab returns the reference's bits. The slot and
 * parameter conventions are the op table's (src/core/optable.c's host kernels): in[6], out[4] are byte
 * addresses in this module's memory (0 = absent), iparam[8] and fparam[8] as weft_op carries them. */
#include <stdint.h>
#include <string.h>

#include "core/reference.h"
#include "core/reference_tx.h"

#define EXPORT(name) __attribute__((export_name(#name), visibility("default")))

/* The call's operands, filled by the page before weft_wasm_run: addresses, then the parameters. */
static uint32_t op_in[6], op_out[4];
static int64_t op_ip[8];
static float op_fp[8];

EXPORT(weft_wasm_op_in) uint32_t *weft_wasm_op_in(void) { return op_in; }
EXPORT(weft_wasm_op_out) uint32_t *weft_wasm_op_out(void) { return op_out; }
EXPORT(weft_wasm_op_iparam) int64_t *weft_wasm_op_iparam(void) { return op_ip; }
EXPORT(weft_wasm_op_fparam) float *weft_wasm_op_fparam(void) { return op_fp; }

#define P(a) ((void *)(uintptr_t)(a))
#define F(i) ((float *)P(op_in[i]))
#define CI(i) ((const int32_t *)P(op_in[i]))
#define O(i) ((float *)P(op_out[i]))

static void sumsq(void) {
  const float *x = F(0);
  float acc = O(0)[0];
  for (int64_t i = 0; i < op_ip[0]; i++) {
    float sq = x[i] * x[i];
    acc = acc + sq;
  }
  O(0)[0] = weft_canon_nan(acc);
}

static void permute(void) {
  const uint32_t *x = (const uint32_t *)P(op_in[0]);
  uint32_t *y = (uint32_t *)P(op_out[0]);
  const int64_t *xd = op_ip + 1;
  int perm[4];
  for (int a = 0; a < 4; a++) perm[a] = (int)((op_ip[5] >> (2 * a)) & 3);
  int64_t xs[4];
  xs[3] = 1;
  for (int a = 2; a >= 0; a--) xs[a] = xs[a + 1] * xd[a + 1];
  int64_t yd[4], st[4];
  for (int a = 0; a < 4; a++) yd[a] = xd[perm[a]], st[a] = xs[perm[a]];
  size_t o = 0;
  for (int64_t i0 = 0; i0 < yd[0]; i0++)
    for (int64_t i1 = 0; i1 < yd[1]; i1++)
      for (int64_t i2 = 0; i2 < yd[2]; i2++) {
        const uint32_t *src = x + i0 * st[0] + i1 * st[1] + i2 * st[2];
        for (int64_t i3 = 0; i3 < yd[3]; i3++) y[o++] = src[i3 * st[3]];
      }
}

static void copy_slice(void) {
  const int64_t outer = op_ip[0], sl = op_ip[1], dl = op_ip[2], inner = op_ip[3], off = op_ip[4];
  const char *s = P(op_in[0]);
  char *d = P(op_out[0]);
  const size_t row = (size_t)(sl * inner) * 4;
  for (int64_t o = 0; o < outer; o++) memmove(d + (size_t)((o * dl + off) * inner) * 4, s + (size_t)o * row, row);
}

/* Runs op `kind` (8..23) on the operands set above; returns a weft_status (0 = WEFT_OK). The page has
 * checked the shapes and the index operands' range, as the host does before any lane runs an op. */
EXPORT(weft_wasm_run) int weft_wasm_run(int kind) {
  const int64_t *ip = op_ip;
  const float *fp = op_fp;
  switch (kind) {
  case WEFT_OP_EMBEDDING:
    return weft_ref_embedding_forward(O(0), CI(0), CI(1), F(2), F(3), ip[0], ip[1], ip[2], ip[3], ip[4]);
  case WEFT_OP_EMBEDDING_BACKWARD:
    return weft_ref_embedding_backward(O(0), O(1), F(0), CI(1), CI(2), ip[0], ip[1], ip[2], ip[3], ip[4]);
  case WEFT_OP_LAYERNORM: weft_ref_layernorm_forward(O(0), O(1), O(2), F(0), F(1), F(2), ip[0], ip[1], fp[0]); return 0;
  case WEFT_OP_LAYERNORM_BACKWARD:
    weft_ref_layernorm_backward(O(0), O(1), O(2), F(0), F(1), F(2), F(3), F(4), ip[0], ip[1]);
    return 0;
  case WEFT_OP_GELU: weft_ref_gelu_forward(O(0), F(0), ip[0]); return 0;
  case WEFT_OP_GELU_BACKWARD: weft_ref_gelu_backward(O(0), F(0), F(1), ip[0]); return 0;
  case WEFT_OP_ATTENTION: return weft_ref_attention_forward(O(0), O(2), O(1), F(0), ip[0], ip[1], ip[2], ip[3]);
  case WEFT_OP_ATTENTION_BACKWARD: return weft_ref_attention_backward(O(0), F(0), F(1), F(2), ip[0], ip[1], ip[2], ip[3]);
  case WEFT_OP_CAUSAL_SOFTMAX: weft_ref_causal_softmax_forward(O(0), F(0), ip[0], ip[1], fp[0]); return 0;
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD: weft_ref_causal_softmax_backward(O(0), F(0), F(1), ip[0], ip[1], fp[0]); return 0;
  case WEFT_OP_CROSSENTROPY: return weft_ref_crossentropy_forward(O(0), F(0), CI(1), ip[0], ip[1]);
  case WEFT_OP_CROSSENTROPY_BACKWARD: return weft_ref_crossentropy_backward(O(0), F(0), CI(1), F(2), ip[0], ip[1]);
  case WEFT_OP_ADAMW: weft_ref_adamw(O(0), F(0), O(1), O(2), ip[0], fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], fp[6]); return 0;
  case WEFT_OP_SUMSQ: sumsq(); return 0;
  case WEFT_OP_PERMUTE: permute(); return 0;
  case WEFT_OP_COPY_SLICE: copy_slice(); return 0;
  default: return WEFT_ERR_UNSUPPORTED;
  }
}
