/* reference_tx.h - the reference kernels of the transformer ops (GPT-2's set, after llm.c), on host memory.
 *
 * Like reference.c, these loops are the definition of each op under the exact contract: the comment above
 * each kernel in reference_tx.c names its canonical order, docs/DESIGN.md ("Canonical orders of the
 * transformer ops") states it again, and every exact lane must return these bits. Each multiply and add is
 * rounded on its own (the file is built with -ffp-contract=off); division, sqrt, exp and tanh go through
 * weft_recipf, weft_rsqrtf, weft_sqrtf, weft_expf, weft_logf and weft_tanhf. Every NaN stored is the quiet
 * NaN 0x7fc00000.
 *
 * Plain arrays, row-major, sizes in elements; int32 arrays for token ids, positions and targets.
 * Gradients of parameters (dwte, dwpe, dgamma, dbeta) are ACCUMULATED into what the caller passes (zero
 * them first for a fresh gradient); gradients of activations (dx, dqkv, dlogits, dscores) are WRITTEN.
 * The kernels that return a status check before writing anything: WEFT_ERR_INVALID_ARGUMENT for a NULL
 * array they need or an index out of range, WEFT_ERR_SHAPE for a negative size (or NH not dividing C),
 * WEFT_ERR_OUT_OF_MEMORY when the attention backward's T*T scratch cannot be had. The void kernels trust
 * their caller (the op layer validates shapes before it runs them). */
#ifndef WEFT_REFERENCE_TX_H
#define WEFT_REFERENCE_TX_H

#include <stdint.h>

#include "weft.h"
#include "weft_lane.h"

/* out[B,T,C] = wte[tok[b,t], :] + wpe[pos[b,t], :]; pos NULL means pos[b,t] = t. wte is [V,C], wpe [P,C]. */
WEFT_API weft_status weft_ref_embedding_forward(float *out, const int32_t *tok, const int32_t *pos, const float *wte,
                                                const float *wpe, int64_t B, int64_t T, int64_t C, int64_t V,
                                                int64_t P);
/* dwte[tok[b,t], :] += dout[b,t,:] and dwpe[pos[b,t], :] += dout[b,t,:], (b,t) ascending. Either may be NULL. */
WEFT_API weft_status weft_ref_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                                 const int32_t *pos, int64_t B, int64_t T, int64_t C, int64_t V,
                                                 int64_t P);

/* x[N,C] -> y[N,C], mean[N], rstd[N] (mean and rstd may be NULL). */
WEFT_API void weft_ref_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                                         const float *beta, int64_t N, int64_t C, float eps);
/* dx written; dgamma, dbeta accumulated (rows ascending); dgamma/dbeta may be NULL. */
WEFT_API void weft_ref_layernorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                          const float *mean, const float *rstd, const float *gamma, int64_t N,
                                          int64_t C);

/* GPT-2's GELU (tanh form) on n elements, and its backward dx = gelu'(x) * dy. */
WEFT_API void weft_ref_gelu_forward(float *y, const float *x, int64_t n);
WEFT_API void weft_ref_gelu_backward(float *dx, const float *x, const float *dy, int64_t n);

/* Causal self-attention, fused (llm.c's attention_forward): qkv[B,T,3C] (q, k, v side by side, NH heads of
 * C/NH each) -> out[B,T,C], preatt[B,NH,T,T] (scaled scores; may be NULL), att[B,NH,T,T] (probabilities).
 * WEFT_ERR_SHAPE when NH does not divide C. */
WEFT_API weft_status weft_ref_attention_forward(float *out, float *preatt, float *att, const float *qkv, int64_t B,
                                                int64_t T, int64_t C, int64_t NH);
/* Decode attention: query positions t0 .. t0+Tq-1 over qkv[B,Tmax,3C] (rows 0 .. t0+Tq-1 read) -> out[B,Tq,C],
 * att[B,NH,Tq,Tmax] (may be NULL). Each (b, h, t) is weft_ref_attention_forward's row t: the same bits.
 * WEFT_ERR_SHAPE when NH does not divide C or t0 + Tq > Tmax; WEFT_ERR_OUT_OF_MEMORY for the row of
 * scratch when att is NULL. */
WEFT_API weft_status weft_ref_attention_cached(float *out, float *att, const float *qkv, int64_t B, int64_t Tmax,
                                               int64_t C, int64_t NH, int64_t t0, int64_t Tq);
/* dqkv[B,T,3C] written, from dout[B,T,C], the forward's qkv and att. */
WEFT_API weft_status weft_ref_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                                                 int64_t B, int64_t T, int64_t C, int64_t NH);

/* The unfused form: scores[R,T,T] -> probs[R,T,T], row t a softmax of scale*scores over columns <= t. */
WEFT_API void weft_ref_causal_softmax_forward(float *probs, const float *scores, int64_t R, int64_t T, float scale);
/* dscores[R,T,T] written from probs and dprobs. */
WEFT_API void weft_ref_causal_softmax_backward(float *dscores, const float *probs, const float *dprobs, int64_t R,
                                               int64_t T, float scale);

/* losses[N] = -log softmax(logits[n,:])[targets[n]]; logits [N,V]. */
WEFT_API weft_status weft_ref_crossentropy_forward(float *losses, const float *logits, const int32_t *targets,
                                                   int64_t N, int64_t V);
/* dlogits[N,V] written: (softmax(logits[n,:])[j] - (j == targets[n])) * dloss[n]. */
WEFT_API weft_status weft_ref_crossentropy_backward(float *dlogits, const float *logits, const int32_t *targets,
                                                    const float *dloss, int64_t N, int64_t V);

/* 1 - beta^t, beta^t by t repeated multiplications from 1 (t >= 1): the caller computes the bias
 * corrections of step t once, on the host, and passes them to every AdamW step of that step. */
WEFT_API float weft_ref_adamw_bias_correction(float beta, int64_t t);
/* One AdamW step on n parameters, in place on param, m, v. bc1, bc2 from weft_ref_adamw_bias_correction. */
WEFT_API void weft_ref_adamw(float *param, const float *grad, float *m, float *v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float bc1, float bc2);

/* SUMSQ, the global-norm clip's sum, in its chunked canonical order: x is cut into chunks of
 * WEFT_SUMSQ_CHUNK (4096) elements, the last one shorter; chunk c's partial P[c] = 0 + x[i]*x[i] + ... over
 * its elements ascending (each product and each sum rounded on its own); returns acc + P[0] + P[1] + ...
 * added left to right from the acc passed (n = 0 returns acc), a NaN as 0x7fc00000. The partials do not
 * depend on one another, so a lane computes them all at once, then adds them in order: the bits do not
 * depend on the lane, its threads or its vector width. */
WEFT_API float weft_ref_sumsq(const float *x, int64_t n, float acc);

/* Global-norm clip over ntensors gradient tensors (grads[k] of sizes[k] elements, in that order): returns
 * the norm, and scales every gradient by max_norm/norm when the norm exceeds max_norm. The sum of squares
 * is weft_ref_sumsq over the tensors in order, into one accumulator from +0: the chunk partials of every
 * tensor, in parameter order, added left to right (a chunk never spans two tensors). */
WEFT_API float weft_ref_grad_clip(float *const *grads, const int64_t *sizes, int64_t ntensors, float max_norm);

/* PERMUTE: a copy of 4-byte elements (bits unchanged, any dtype). x has dims xd[0..3] (padded with 1); y's
 * axis a is x's axis perm[a]; y is written in its own row-major order. */
WEFT_API void weft_ref_permute(uint32_t *y, const uint32_t *x, const int64_t xd[4], const int perm[4]);
/* COPY_SLICE: dst[o, offset + i, r] = src[o, i, r] for o < outer, i < src_len, r < inner, 4-byte elements
 * (bits unchanged); dst has dst_len along the middle axis and is otherwise left as it was. */
WEFT_API void weft_ref_copy_slice(void *dst, const void *src, int64_t outer, int64_t src_len, int64_t dst_len,
                                  int64_t inner, int64_t offset);

#endif
