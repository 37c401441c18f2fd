/* weft_wasm_ops.c - the op table's version-2 ops (kinds 8..24) in weft.wasm, for the worker page: the same
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

/* Runs op `kind` (8..24) on the operands set above; returns a weft_status (0 = WEFT_OK). The page has
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
  case WEFT_OP_SUMSQ: O(0)[0] = weft_ref_sumsq(F(0), ip[0], O(0)[0]); return 0;
  case WEFT_OP_PERMUTE: {
    int perm[4];
    for (int a = 0; a < 4; a++) perm[a] = (int)((ip[5] >> (2 * a)) & 3);
    weft_ref_permute((uint32_t *)P(op_out[0]), (const uint32_t *)P(op_in[0]), ip + 1, perm);
    return 0;
  }
  case WEFT_OP_COPY_SLICE: weft_ref_copy_slice(P(op_out[0]), P(op_in[0]), ip[0], ip[1], ip[2], ip[3], ip[4]); return 0;
  case WEFT_OP_ATTENTION_CACHED: return weft_ref_attention_cached(O(0), O(1), F(0), ip[0], ip[1], ip[2], ip[3], ip[4], ip[5]);
  default: return WEFT_ERR_UNSUPPORTED;
  }
}
