/* cuda_args.h - the argument blocks of the CUDA lane's kernels, shared by cuda_kernels.cu (nvcc) and the lane's
 * C code. Each kernel takes exactly one of these by value, so a launch is one pointer in kernelParams and a
 * recorded launch can be compared byte for byte (graph replay). Only fixed-size types, laid out without
 * padding surprises: 8-byte fields first. */
#ifndef WEFT_CUDA_ARGS_H
#define WEFT_CUDA_ARGS_H

#include <stdint.h>

/* The kernels in the embedded module, by index; names in weft_cuda_kernel_names (cuda_lane.c). */
enum {
  WEFT_CUK_MM128_NN, WEFT_CUK_MM128_NT, WEFT_CUK_MM128_TN, WEFT_CUK_MM128_TT,
  WEFT_CUK_MM64_NN, WEFT_CUK_MM64_NT, WEFT_CUK_MM64_TN, WEFT_CUK_MM64_TT,
  WEFT_CUK_MM64T8_NN, WEFT_CUK_MM64T8_NT, WEFT_CUK_MM64T8_TN, WEFT_CUK_MM64T8_TT,
  WEFT_CUK_MM32_NN, WEFT_CUK_MM32_NT, WEFT_CUK_MM32_TN, WEFT_CUK_MM32_TT, /* exact matmul tiles: cuda_mm_tiles.h */
  WEFT_CUK_ELEMENTWISE,
  WEFT_CUK_SUM_ROWS,
  WEFT_CUK_SOFTMAX_ROWS,
  WEFT_CUK_SOFTMAX_LOSS,
  WEFT_CUK_TO_BF16,
  WEFT_CUK_TRAP,
  WEFT_CUK_EW_BATCH,
  /* the transformer ops (cuda_tx.cu, argument blocks in cuda_tx_args.h) */
  WEFT_CUK_TX_EMBED_FWD,
  WEFT_CUK_TX_EMBED_BWD_COUNT, WEFT_CUK_TX_EMBED_BWD_SCAN, WEFT_CUK_TX_EMBED_BWD_FILL, WEFT_CUK_TX_EMBED_BWD_SORT,
  WEFT_CUK_TX_EMBED_BWD_ACCUM,
  WEFT_CUK_TX_LN_FWD, WEFT_CUK_TX_LN_BWD_DX, WEFT_CUK_TX_LN_BWD_DGB,
  WEFT_CUK_TX_GELU_FWD, WEFT_CUK_TX_GELU_BWD,
  WEFT_CUK_TX_SOFTMAX_FWD, WEFT_CUK_TX_SOFTMAX_BWD,
  WEFT_CUK_TX_ATTN_FWD, WEFT_CUK_TX_ATTN_BWD_DS, WEFT_CUK_TX_ATTN_BWD_DQKV, WEFT_CUK_TX_ATTN_CACHED,
  WEFT_CUK_TX_XENT_FWD, WEFT_CUK_TX_XENT_BWD,
  WEFT_CUK_TX_ADAMW,
  WEFT_CUK_TX_SUMSQ_CHUNKS, WEFT_CUK_TX_SUMSQ_ADD,
  WEFT_CUK_TX_PERMUTE, WEFT_CUK_TX_COPY_SLICE,
  /* the exact matmul for at most WEFT_CU_MV_ROWS rows of a (cuda_kernels.cu: mv_exact) */
  WEFT_CUK_MV_NN, WEFT_CUK_MV_NT, WEFT_CUK_MV1_NN, WEFT_CUK_MV1_NT, /* MV1: one row */
  /* a block per row, for a few rows (decode) */
  WEFT_CUK_TX_LN_FWD_ROW, WEFT_CUK_TX_ATTN_CACHED_BLK,
  /* the fp32 contract's layernorm and sumsq (cuda_tx.cu) */
  WEFT_CUK_TX_LN_FWD_F32, WEFT_CUK_TX_LN_BWD_DX_F32, WEFT_CUK_TX_LN_BWD_DGB_PART, WEFT_CUK_TX_LN_BWD_DGB_SUM,
  WEFT_CUK_TX_SUMSQ_F32,
  /* the fp32 contract's attention and cross-entropy (fused multiply-adds; cross-entropy's sums as trees) */
  WEFT_CUK_TX_ATTN_FWD_F32, WEFT_CUK_TX_ATTN_BWD_DS_F32, WEFT_CUK_TX_ATTN_BWD_DQKV_F32,
  WEFT_CUK_TX_XENT_FWD_F32, WEFT_CUK_TX_XENT_BWD_F32,
  WEFT_CUK_TX_EMBED_BWD_ROWS, /* embedding backward in one kernel, up to WEFT_TX_EB_ROWS_MAXBT positions */
  WEFT_CUK_TX_EMBED_BWD_POS,  /* the position table's backward, positions implicit (bt % T) */
  WEFT_CUK_TX_GELU_FWD_F32, WEFT_CUK_TX_GELU_BWD_F32, /* the fp32 contract's GELU (no branch in its tanh) */
  WEFT_CUK_COUNT
};

/* Exact matmul on one batch slice per blockIdx.y: c = op(a) . op(b), row-major, with leading dimensions.
 * Tiles are numbered along blockIdx.x in groups of `group` tile rows, so concurrent blocks share panels of
 * a and b in L2. vec_* say that 16-byte (or 8-byte) vector accesses are aligned for that operand. */
typedef struct weft_cu_mm_args {
  uint64_t a, b, c;
  /* A fused epilogue (src/lanes/fuse.h; 0: none): per element of c, after its k sum, c = c + bias[col],
   * then c = c + resid[the element's index], each rounded and canonical, stored into c; then
   * gelu[the index] = gelu(c). resid and gelu have c's layout (the same offsets, ldc and sc). */
  uint64_t bias, resid, gelu;
  int64_t sa, sb, sc; /* batch strides in elements (sb = 0: b shared) */
  int32_t m, n, k;
  int32_t lda, ldb, ldc;
  int32_t tiles_m, tiles_n, group;
  int32_t vec_a, vec_b, vec_c;
  int32_t accum; /* 1: each sum starts from c's value instead of 0 (matmul_acc, c += a.b) */
} weft_cu_mm_args;

/* The matrix-vector kernels' limits: rows of a, outputs a block of WEFT_CU_MV_THREADS owns. */
#define WEFT_CU_MV_ROWS 4
#define WEFT_CU_MV_OUT 16
#define WEFT_CU_MV_THREADS 256
/* One row against b stored [n][k] (MV1_NT, a decode step's every matmul): a block owns MV1_OUT outputs and
 * stages MV1_K of k at a time (cuda_kernels.cu: mv1_nt). */
#define WEFT_CU_MV1_OUT 8
#define WEFT_CU_MV1_K 512

/* The one-pass elementwise ops. */
enum { WEFT_CU_EW_ADD, WEFT_CU_EW_RELU, WEFT_CU_EW_RELU_BACKWARD, WEFT_CU_EW_SCALE, WEFT_CU_EW_AXPY };

typedef struct weft_cu_ew_args {
  uint64_t x, y, out;
  int64_t count;
  int64_t cols; /* y's length when y_broadcast */
  int32_t op, y_broadcast;
  float alpha;
  int32_t pad_;
} weft_cu_ew_args;

/* Up to WEFT_CU_EWB_MAX small elementwise ops run one after the other by one block (the parameter block
 * stays under the 4 KiB every driver accepts). */
#define WEFT_CU_EWB_MAX 32
#define WEFT_CU_EWB_MAX_COUNT 8192 /* elements: larger ops get a launch of their own */
typedef struct weft_cu_ewb_args {
  int32_t n, pad_;
  weft_cu_ew_args ops[WEFT_CU_EWB_MAX];
} weft_cu_ewb_args;

/* sum_rows: out[j] = x[0,j] + x[1,j] + ..., rows ascending. */
typedef struct weft_cu_sr_args {
  uint64_t x, out;
  int64_t rows, cols;
} weft_cu_sr_args;

/* softmax_xent: the per-row pass writes grad (if any) and -acc per row into row_loss; the loss pass sums
 * row_loss in row order and scales by inv_rows. */
typedef struct weft_cu_sx_args {
  uint64_t z, t, grad, row_loss, loss;
  int64_t rows, cols;
  float inv_rows;
  int32_t pad_;
} weft_cu_sx_args;

/* fp32 -> bf16 (round to nearest even, NaN kept quiet). */
typedef struct weft_cu_cv_args {
  uint64_t in, out;
  int64_t count;
} weft_cu_cv_args;

#endif /* WEFT_CUDA_ARGS_H */
