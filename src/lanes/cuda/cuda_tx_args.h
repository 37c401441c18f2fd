/* cuda_tx_args.h - the argument blocks of the transformer kernels (cuda_tx.cu), shared by nvcc and the lane's C
 * code, in the style of cuda_args.h: each kernel takes exactly one block by value (one pointer in
 * kernelParams, comparable byte for byte for graph replay), 8-byte fields first, no padding surprises.
 * Pointers are device addresses (CUdeviceptr) as uint64_t; sizes are elements. Every kernel trusts its
 * shapes (the op layer validates them) but never reads or writes outside the arrays its arguments describe:
 * an index out of range is skipped, and weft_tx_index_check reports it. The orders are those of
 * src/core/reference_tx.c; each struct's comment names the kernels that take it and their launch shape. */
#ifndef WEFT_CUDA_TX_ARGS_H
#define WEFT_CUDA_TX_ARGS_H

#include <stdint.h>

/* weft_tx_index_check: for i in [0, n): idx[i] outside [0, limit) lowers *first_bad (int32, set to n by the
 * caller beforehand) to the smallest such i (atomicMin: the result does not depend on the order).
 * Any grid; grid-stride loop. */
typedef struct weft_tx_index_args {
  uint64_t idx, first_bad;
  int64_t n, limit;
} weft_tx_index_args;

/* weft_tx_embedding_fwd: out[bt, c] = wte[tok[bt], c] + wpe[p, c], p = pos ? pos[bt] : bt % T.
 * Any grid; grid-stride over BT*C elements. Rows whose index is out of range are left unwritten. */
typedef struct weft_tx_embed_args {
  uint64_t out, tok, pos, wte, wpe; /* pos 0: positions are bt % T */
  int64_t BT, T, C, V, P;
} weft_tx_embed_args;

/* Embedding backward, deterministic, in three kernels over one table (run once for dwte with idx = tok,
 * nrows = V, and once for dwpe with idx = pos (or 0: bt % T), nrows = P). Scratch: count[nrows + 1] and
 * start[nrows + 1] int32 (count zeroed by the caller), list[BT] int32.
 *   weft_tx_embed_bwd_count: count[idx[bt]] += 1 (atomicAdd on integers: exact).  Any grid, stride over BT.
 *   weft_tx_embed_bwd_scan:  start = exclusive prefix sum of count; count zeroed again for the fill.
 *                            ONE block of 1024 threads.
 *   weft_tx_embed_bwd_fill:  list[start[r] + atomicAdd(&count[r], 1)] = bt, then
 *   weft_tx_embed_bwd_sort:  each row's segment sorted ascending (one thread per row, insertion sort), so
 *                            the segment of row r is the bt with idx[bt] == r, ascending.
 *                            fill: any grid, stride over BT; sort: any grid, stride over rows.
 *   weft_tx_embed_bwd_accum: table[r, c] = (...((table[r,c] + dout[bt0,c]) + dout[bt1,c])...) over the
 *                            segment in order. grid (ceil(C / blockDim.x), min(BT, 65535)): block y
 *                            walks list positions i (strided by gridDim.y, i < start[nrows]) and does
 *                            the row of list[i] where i is that row's first position, so only the
 *                            rows that occur are visited, each by one block.
 * count must be zero before the first backward; the sort kernel zeroes it again, so the sequence leaves it
 * zero for the next one.
 * (The reference's order per element is exactly this: row r receives its contributions in ascending bt.) */
/* Up to WEFT_TX_EB_ROWS_MAXBT positions the lane runs instead ONE kernel per table and no scratch (count,
 * start, list unused):
 *   weft_tx_embed_bwd_rows: block b takes positions bt (strided by gridDim.x; blockDim 256); where bt is the
 *     first position of its row r, the block scans idx in windows of 8 * blockDim positions, compacts r's
 *     positions in ascending order and adds them to the row as the accum kernel does (4 * blockDim columns
 *     a pass). Each block scans up to BT indices, so the cost grows as BT times the rows that occur: beyond
 *     the limit the sorted list above is cheaper. */
#define WEFT_TX_EB_ROWS_MAXBT 16384
typedef struct weft_tx_embed_bwd_args {
  uint64_t table, dout, idx; /* idx 0: idx[bt] = bt % T */
  uint64_t count, start, list;
  int64_t BT, T, C, nrows;
} weft_tx_embed_bwd_args;

/* Layernorm.
 *   weft_tx_layernorm_fwd: blockDim 256 (a multiple of 32 from 64 to 1024 works), 32 rows a block (rows
 *     strided by the grid): one thread per row makes its sums from shared memory, the other warps stream the
 *     rows in: y[N,C], mean[N], rstd[N] (mean/rstd may be 0) from x, gamma, beta.
 *   weft_tx_layernorm_bwd_dx: the same shape: dx[N,C] from dy, x, mean, rstd, gamma.
 *   weft_tx_layernorm_bwd_dgb: blockDim exactly 256, grid ceil(C / WEFT_TX_LNG_CW) (WEFT_TX_LNG_CW channels a
 *     block, strided by the grid): one thread per channel and output adds the rows ascending: dgamma[C] and
 *     dbeta[C] accumulated (either may be 0). */
#define WEFT_TX_LNG_CW 8
/* weft_tx_layernorm_fwd_row's limit on C (a block per row, the row in shared memory) */
#define WEFT_TX_LN_ROW_MAXC 4096
/* Under the fp32 contract (emit_tx picks by op->contract; reordered sums, FMA, hardware division and square
 * root, not the exact bits):
 *   weft_tx_layernorm_fwd_f32, weft_tx_layernorm_bwd_dx_f32: a warp per row, rows strided over all warps
 *     (blockDim a multiple of 32), the row in registers: C <= WEFT_TX_LNF_MAXC (wider rows take the exact
 *     kernels, which are a valid fp32 order).
 *   weft_tx_layernorm_bwd_dgb_part: blockDim exactly 256, grid (any x, ceil(N / WEFT_TX_LNP_R)): the row
 *     block y's partial sums of n * dy and dy per channel into part[y][2][C] (scratch), then
 *   weft_tx_layernorm_bwd_dgb_sum: any grid, a thread per channel: dgamma/dbeta += the partials in order. */
#define WEFT_TX_LNF_MAXC 1024
#define WEFT_TX_LNP_R 128
typedef struct weft_tx_ln_args {
  uint64_t y, mean, rstd, x, gamma, beta;   /* forward */
  uint64_t dx, dgamma, dbeta, dy;           /* backward (x, mean, rstd, gamma shared) */
  uint64_t part;                            /* fp32 dgamma/dbeta partials (scratch) */
  int64_t N, C;
  float eps;
  int32_t pad_;
} weft_tx_ln_args;

/* GELU (tanh form). weft_tx_gelu_fwd: y = gelu(x); weft_tx_gelu_bwd: dx = gelu'(x) * dy. Any grid,
 * grid-stride over n. Also weft_tx_wmath_probe (tests only): out[6i..6i+5] = recip, rsqrt, sqrt, tanh, exp,
 * log of x[i]. */
/* GELU: float4s a thread (all loaded before any store; the grid covers the array in one pass where it can)
 * and the kernels' blocks an SM (__launch_bounds__' minimum, which caps their registers) */
#define WEFT_TX_GELU_U 4
#define WEFT_TX_GELU_MINB 4
typedef struct weft_tx_gelu_args {
  uint64_t out, x, dy; /* out is y (forward) or dx (backward) */
  int64_t n;
} weft_tx_gelu_args;

/* Causal softmax over R blocks of [T,T] (rows R*T). One warp per row, rows strided over all warps.
 *   weft_tx_softmax_fwd: probs from scores (scaled by scale inside).
 *   weft_tx_softmax_bwd: dscores from probs and dprobs. */
typedef struct weft_tx_softmax_args {
  uint64_t out, in, in2; /* fwd: out=probs, in=scores; bwd: out=dscores, in=probs, in2=dprobs */
  int64_t R, T;
  float scale;
  int32_t pad_;
} weft_tx_softmax_args;

/* Fused causal attention, qkv[B,T,3C], NH heads of hs = C/NH. All three kernels: blockDim exactly 256, one
 * block per (b, h) and tile of 64 rows (B*NH*ceil(T/64) tiles, strided by gridDim.x, the longest first);
 * each thread owns a 4 x 4 register tile of outputs, operands staged through shared memory 32 deep, each
 * output one accumulator in the reference's order.
 *   weft_tx_attn_fwd: preatt (may be 0) and att [B,NH,T,T], out[B,T,C] (scores, then each warp the softmax
 *     of 8 rows, their sums as 8 side-by-side chains, then att . v).
 *   weft_tx_attn_bwd_ds: ds[B,NH,T,T] (scratch, the softmax backward of each row, only j <= t written) from
 *     dout, qkv, att.
 *   weft_tx_attn_bwd_dqkv: dqkv[B,T,3C] from ds, qkv, att, dout (the tile's rows are t for dq, j for dk, dv). */
typedef struct weft_tx_attn_args {
  uint64_t out, preatt, att, qkv;
  uint64_t dqkv, dout, ds;
  int64_t B, T, C, NH;
} weft_tx_attn_args;

/* Decode attention (ATTENTION_CACHED): query positions t0 .. t0+Tq-1 over qkv[B,Tmax,3C].
 *   weft_tx_attn_cached: one warp per (b, h, r) row, t = t0 + r (rows strided over all warps): att row
 *     [Tmax] (the caller's att [B,NH,Tq,Tmax], or scratch of that size when att is NULL), out[B,Tq,C]. */
/* weft_tx_attn_cached_blk's limits (a block per row; the warp-per-row kernel takes the rest) */
#define WEFT_TX_ATC_MAXT 4096
#define WEFT_TX_ATC_MAXHS 256
typedef struct weft_tx_attn_cached_args {
  uint64_t out, att, qkv;
  int64_t B, Tmax, C, NH, t0, Tq;
} weft_tx_attn_cached_args;

/* Cross-entropy with int32 targets over logits [N,V]. One block per row (blockDim 128; any multiple of 32
 * from 64 to 256 works), rows strided by gridDim.x: the max by a block reduction, the exponentials by warps
 * 1.. into shared memory, their sum by thread 0 in ascending order.
 *   weft_tx_xent_fwd: losses[N].   weft_tx_xent_bwd: dlogits[N,V] from dloss[N].
 * Rows whose target is out of range are left unwritten. */
typedef struct weft_tx_xent_args {
  uint64_t losses, logits, targets, dlogits, dloss;
  int64_t N, V;
} weft_tx_xent_args;

/* AdamW, in place on param, m, v. Any grid, grid-stride over n. bc1, bc2 from
 * weft_ref_adamw_bias_correction on the host. */
typedef struct weft_tx_adamw_args {
  uint64_t param, grad, m, v;
  int64_t n;
  float lr, beta1, beta2, eps, weight_decay, bc1, bc2;
  int32_t pad_;
} weft_tx_adamw_args;

/* SUMSQ's chunk (weft_lane.h's WEFT_SUMSQ_CHUNK; cuda_ops.c checks that the two agree). */
#define WEFT_TX_SUMSQ_CHUNK 4096

/* SUMSQ and the global-norm clip, in SUMSQ's chunked canonical order (weft_lane.h, reference_tx.c's
 * weft_ref_sumsq), three kernels:
 *   weft_tx_sumsq_chunks: blockDim 32 (one warp), any grid, grid-stride over groups of 32 chunks of
 *     WEFT_TX_SUMSQ_CHUNK elements of g[0..n): part[c] = 0 + g[i]*g[i] + ... over chunk c's elements
 *     ascending, each chunk's chain in one lane (the warp loads its 32 chunks cooperatively through shared
 *     memory). part (ceil(n / WEFT_TX_SUMSQ_CHUNK) floats) is device scratch.
 *   weft_tx_sumsq_add: ONE warp (blockDim 32, grid 1): *ss = canon(*ss + part[0] + part[1] + ...) in order
 *     over the ceil(n / WEFT_TX_SUMSQ_CHUNK) partials (n = 0: *ss canonicalised). ss a device float; for
 *     the clip, zeroed before the first tensor, then chunks + add once per tensor, in order.
 *   weft_tx_sumsq_f32 (the fp32 contract): blockDim 256, any grid: part[b] = block b's partial of the squares
 *     (reordered, fused) of its grid-stride share; then weft_tx_sumsq_add with nparts = gridDim.x.
 *   weft_tx_clip_scale: any grid, grid-stride over n: norm = weft_sqrtf(*ss); if norm > max_norm,
 *     g[i] = g[i] * (max_norm * weft_recipf(norm)); thread 0 also writes the norm to *norm_out (if not 0). */
typedef struct weft_tx_clip_args {
  uint64_t g, ss, norm_out, part;
  int64_t n;
  float max_norm;
  int32_t nparts; /* weft_tx_sumsq_add's partials: 0 = the chunk count; the fp32 path's block count */
} weft_tx_clip_args;

/* Bit copies of 4-byte elements (float or int32), never rounded and never canonicalised.
 *   weft_tx_permute: out has `rank` (<= 6) dims out_dims; out element (i0..i{rank-1}) = in[sum_k ik *
 *     in_stride[k]] (in_stride[k]: the input's stride, in elements, of the axis that becomes out axis k).
 *     Any grid, grid-stride over the output.
 *   weft_tx_copy_slice: dst[dst_off + b*dst_bs + r*dst_rs + c] = src[src_off + b*src_bs + r*src_rs + c] for
 *     b < nb, r < rows, c < cols (a KV-cache append: rows T at row offset t0). Any grid: (b, r) pairs
 *     strided by gridDim.y, each run of cols by the x threads (16 bytes at a time where both runs are
 *     16-byte aligned). */
typedef struct weft_tx_permute_args {
  uint64_t out, in;
  int64_t count;
  int64_t out_dims[6];
  int64_t in_stride[6];
  int32_t rank, pad_;
} weft_tx_permute_args;

typedef struct weft_tx_copy_args {
  uint64_t dst, src;
  int64_t nb, rows, cols;
  int64_t dst_off, dst_bs, dst_rs;
  int64_t src_off, src_bs, src_rs;
} weft_tx_copy_args;

#endif /* WEFT_CUDA_TX_ARGS_H */
