/* tx.h - the CPU lane's transformer ops (GPT-2's set): vectorised and threaded. Each function has its
 * reference's signature (and returns the same statuses for the same bad arguments) with a kernel table and
 * the lane's thread pool first; a NULL table means weft_cpu_tx_select() (exact), a NULL pool runs on the
 * caller's thread alone.
 *
 * Exact tables (weft_cpu_tx_select): bit for bit the kernels of core/reference_tx.c. Which thread computes a
 * row never changes its bits, and neither does the instruction set: the vector kernels (tx_kern.inc) do the
 * reference's scalar steps lane by lane, and every sum keeps its canonical order.
 * fp32 tables (weft_cpu_tx_select_for(WEFT_CONTRACT_FP32)): the same formulas and weft's own exp, log and
 * tanh, but multiplies and adds may fuse (FMA), sums may be split and reordered (per-row vector sums, several
 * accumulators), and division and square root are the hardware's correctly rounded instructions in place of
 * weft_recipf and weft_sqrtf: results within a few fp32 roundings of the reference's, which may differ with
 * the instruction set; still not with the thread count.
 * The instruction set is the one weft_cpu_isa_name() names (WEFT_CPU_ISA lowers it), read per call.
 *
 * Scratch: attention forward and backward allocate per-thread scratch per call (WEFT_ERR_OUT_OF_MEMORY when
 * they cannot); the others need none beyond the stack. The caller's floating-point environment is the
 * caller's business (cpu_lane.c brackets each op with weft_fpenv_enter/leave); the pool's threads keep
 * theirs clean. */
#ifndef WEFT_CPU_TX_H
#define WEFT_CPU_TX_H

#include <stdint.h>

#include "pool.h"
#include "weft.h"
#include "weft_lane.h"

/* AdamW's per-call constants, computed once on the caller's thread exactly as the reference does. */
typedef struct weft_cpu_tx_adamw_k {
  float lr, beta1, beta2, eps, weight_decay, o1, o2, r1, r2;
} weft_cpu_tx_adamw_k;

/* The per-instruction-set vector parts (tx_kern.inc); tx.c does the loops, the threads and the sums. */
typedef struct weft_cpu_tx_kernels {
  const char *isa;
  int width;
  int fp32; /* 0: exact (the reference's bits); 1: the fp32 contract's kernels (see above) */
  void (*gelu_forward)(float *y, const float *x, int64_t n);
  void (*gelu_backward)(float *dx, const float *x, const float *dy, int64_t n);
  void (*adamw)(float *param, const float *grad, float *m, float *v, int64_t n, const weft_cpu_tx_adamw_k *k);
  float (*row_max)(const float *z, int64_t n);
  void (*exp_sub)(float *dst, const float *src, int64_t n, float sub);
  void (*mul)(float *dst, const float *src, int64_t n, float s, int canon);
  void (*xent_grad)(float *g, const float *z, int64_t n, float mx, float ls, int64_t tgt, float dl);
  /* Layernorm's per-row sums for `width` rows at once (row pointers; pad with repeats), lane r row r. */
  void (*ln_stats)(const float *const *x, int64_t C, float invC, float *mu, float *v);
  void (*ln_bwd_sums)(const float *const *x, const float *const *dy, const float *gamma, int64_t C, const float *mu,
                      const float *rs, float *a, float *b);
  /* `width` rows' sums at once (row pointers, padded with repeats), lane r row r, each in ascending order:
   * sums_t: out[r] = 0 + x[r][0] + ... + x[r][n-1]; dots_t: out[r] = 0 + x[r][0]*y[r][0] + ... over
   * j < len[r], the rows read up to n (at least every len). */
  void (*sums_t)(const float *const *x, int64_t n, float *out);
  void (*dots_t)(const float *const *x, const float *const *y, const int64_t *len, int64_t n, float *out);
  /* SUMSQ's partials of `width` chunks at once (chunk pointers, len a multiple of width), lane r chunk r. */
  void (*sumsq_chunks)(const float *const *x, int64_t len, float *out);
  void (*ln_out)(float *y, const float *x, const float *gamma, const float *beta, int64_t C, float mu, float rs);
  void (*ln_dx)(float *dx, const float *x, const float *dy, const float *gamma, int64_t C, float mu, float rs,
                float a, float b);
  void (*ln_dparams)(float *dgamma, float *dbeta, const float *x, const float *dy, int64_t C, int64_t N, int64_t c0,
                     int64_t c1, const float *mean, const float *rstd);
  void (*add)(float *out, const float *a, const float *b, int64_t n);
  void (*dots)(float *out, const float *q, const float *kt, int64_t ld, int64_t n, int64_t hs, float scale);
  /* dots for four rows of q at once, all to the same n (each kt column read once for the four). */
  void (*dots4)(float *const *out, const float *const *q, const float *kt, int64_t ld, int64_t n, int64_t hs,
                float scale);
  void (*wsum)(float *out, const float *w, int64_t ws, const float *rows, int64_t ld, int64_t n, int64_t hs);
  void (*wsum4)(float *const *out, const float *w, int64_t ws, const float *rows, int64_t ld, int64_t n, int64_t hs);
  void (*wsum4e)(float *const *out, const float *w, int64_t wrs, const float *rows, int64_t ld, int64_t n, int64_t hs);
  void (*softmax_bwd_row)(float *ds, const float *p, const float *dp, int64_t n, float dot, float scale);
  /* dst[i*ld + j] = src[j*stride + i] for j < n, i < hs (attention's transposed panels). */
  void (*transpose)(float *dst, int64_t ld, const float *src, int64_t stride, int64_t n, int64_t hs);
  /* The matmul's skinny case (gemm.c: a few rows of A, B read in place, never packed), m rows of a (row
   * stride k): c[i*ldc + j] = s + sum over q ascending below k of a[i*k + q] * B(q, j), for j < n, where s
   * is +0, or c's own value with `acc` (MATMUL_ACC), and B(q, j) is b[j*ldb + q] (nt: B stored transposed,
   * as a linear layer's weights) or b[q*ldb + j] (nn). Exact tables keep matmul's canonical order per
   * element and store canonical NaNs; fp32 tables may fuse and reorder. */
  void (*gemv_nt)(float *c, int64_t ldc, const float *a, int64_t m, const float *b, int64_t ldb, int64_t n,
                  int64_t k, int acc);
  void (*gemv_nn)(float *c, int64_t ldc, const float *a, int64_t m, const float *b, int64_t ldb, int64_t n,
                  int64_t k, int acc);
  /* fp32 tables only (NULL in exact ones), sums in any order: the sum of x[0..n) and of x[j] * y[j];
   * layernorm's mean and unscaled variance of one row, and its backward's two sums of one row. */
  float (*sum)(const float *x, int64_t n);
  float (*dot)(const float *x, const float *y, int64_t n);
  void (*ln_row_stats)(const float *x, int64_t C, float invC, float *mu, float *v);
  void (*ln_row_bwd_sums)(const float *x, const float *dy, const float *gamma, int64_t C, float mu, float rs,
                          float *a, float *b);
} weft_cpu_tx_kernels;

extern const weft_cpu_tx_kernels weft_cpu_tx_portable, weft_cpu_tx_portable_fp32;
#if defined(__x86_64__) || defined(__i386__)
extern const weft_cpu_tx_kernels weft_cpu_tx_avx2, weft_cpu_tx_avx2_fp32;
extern const weft_cpu_tx_kernels weft_cpu_tx_avx512, weft_cpu_tx_avx512_fp32;
#endif

/* The exact table the ops use now ("portable", "avx2" or "avx512"; WEFT_CPU_ISA lowers it, as for matmul). */
const weft_cpu_tx_kernels *weft_cpu_tx_select(void);
/* The table for an op's contract: the fp32 one of the same instruction set under WEFT_CONTRACT_FP32, the
 * exact one otherwise. */
const weft_cpu_tx_kernels *weft_cpu_tx_select_for(weft_contract contract);

weft_status weft_cpu_tx_embedding_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *out,
                                          const int32_t *tok, const int32_t *pos, const float *wte, const float *wpe,
                                          int64_t B, int64_t T, int64_t C, int64_t V, int64_t P);
weft_status weft_cpu_tx_embedding_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dwte, float *dwpe,
                                           const float *dout, const int32_t *tok, const int32_t *pos, int64_t B,
                                           int64_t T, int64_t C, int64_t V, int64_t P);
void weft_cpu_tx_layernorm_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *y, float *mean,
                                   float *rstd, const float *x, const float *gamma, const float *beta, int64_t N,
                                   int64_t C, float eps);
void weft_cpu_tx_layernorm_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dx, float *dgamma,
                                    float *dbeta, const float *dy, const float *x, const float *mean, const float *rstd,
                                    const float *gamma, int64_t N, int64_t C);
void weft_cpu_tx_gelu_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *y, const float *x, int64_t n);
void weft_cpu_tx_gelu_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dx, const float *x,
                               const float *dy, int64_t n);
weft_status weft_cpu_tx_attention_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *out, float *preatt,
                                          float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
/* Decode attention (weft_lane.h's ATTENTION_CACHED): out[B,Tq,C], att[B,NH,Tq,Tmax] (may be NULL) for query
 * positions t0 .. t0+Tq-1 of qkv[B,Tmax,3C]; threads over (b, h, t). */
weft_status weft_cpu_tx_attention_cached(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *out, float *att,
                                         const float *qkv, int64_t B, int64_t Tmax, int64_t C, int64_t NH, int64_t t0,
                                         int64_t Tq);
weft_status weft_cpu_tx_attention_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dqkv,
                                           const float *dout, const float *qkv, const float *att, int64_t B, int64_t T,
                                           int64_t C, int64_t NH);
void weft_cpu_tx_causal_softmax_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *probs,
                                        const float *scores, int64_t R, int64_t T, float scale);
void weft_cpu_tx_causal_softmax_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dscores,
                                         const float *probs, const float *dprobs, int64_t R, int64_t T, float scale);
weft_status weft_cpu_tx_crossentropy_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *losses,
                                             const float *logits, const int32_t *targets, int64_t N, int64_t V);
weft_status weft_cpu_tx_crossentropy_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dlogits,
                                              const float *logits, const int32_t *targets, const float *dloss,
                                              int64_t N, int64_t V);
void weft_cpu_tx_adamw(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *param, const float *grad, float *m,
                       float *v, int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                       float bc1, float bc2);
/* SUMSQ (reference_tx.c's weft_ref_sumsq): returns acc + P[0] + P[1] + ... (canonical), the chunk
 * partials computed across the pool's threads, `width` chunks side by side in the vector lanes, each chunk
 * in its own ascending chain; then added in order on the caller's thread. (When the partials' array cannot
 * be had, the chunks run one after another on the caller's thread: the same bits.) */
float weft_cpu_tx_sumsq(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, const float *x, int64_t n, float acc);
float weft_cpu_tx_grad_clip(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *const *grads,
                            const int64_t *sizes, int64_t ntensors, float max_norm);

/* Runs a validated version-2 op (weft_lane.h's slots, iparam and fparam as the op table fills them) on
 * these kernels. WEFT_ERR_UNSUPPORTED for the ops they do not cover (PERMUTE and COPY_SLICE, plain copies): the caller
 * runs those on the op table's host kernels. Other statuses are the kernels' own (WEFT_ERR_OUT_OF_MEMORY for
 * attention's scratch). */
weft_status weft_cpu_tx_run(weft_cpu_pool *pool, const weft_op *op);

#endif
