/* cuda_ops.c - turning a validated op into launches: the exact matmul's tiling, the cuBLAS calls of the fp32,
 * tf32 and bf16 paths, the elementwise, sum_rows and softmax kernels; and running a list of launches,
 * directly or as a replayed CUDA graph. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_mm_tiles.h"

_Static_assert(WEFT_TX_SUMSQ_CHUNK == WEFT_SUMSQ_CHUNK, "the CUDA sumsq kernels cut chunks where weft_lane.h does");

#define F4 ((int64_t)sizeof(float))

static void item_kernel(weft_cu_item *it, int fn, uint64_t gx, uint32_t gy, uint32_t block) {
  memset(it, 0, sizeof *it);
  it->kind = WEFT_CU_IT_KERNEL;
  it->fn = fn;
  it->grid[0] = (uint32_t)(gx ? gx : 1), it->grid[1] = gy ? gy : 1, it->grid[2] = 1;
  it->block[0] = block, it->block[1] = 1, it->block[2] = 1;
}

weft_status weft_cu_push(weft_cu_dev *d, const weft_cu_item *it) {
  if (d->nitems == d->items_cap) {
    size_t cap = d->items_cap ? d->items_cap * 2 : 64;
    weft_cu_item *grown = realloc(d->items, cap * sizeof *grown);
    if (!grown)
      return weft_lane_report(d->host, WEFT_ERR_OUT_OF_MEMORY, "cuda:%d: out of host memory recording launches",
                              d->ordinal);
    d->items = grown;
    d->items_cap = cap;
  }
  d->items[d->nitems++] = *it;
  return WEFT_OK;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* A grid for a grid-stride loop over `count` units of `per_block`: enough blocks to fill the device. */
static uint64_t stride_grid(const weft_cu_dev *d, uint64_t count, uint64_t per_block, uint64_t per_sm) {
  uint64_t g = ceil_div(count, per_block), cap = (uint64_t)d->sms * per_sm;
  return g < cap ? g : cap;
}

int64_t weft_cu_matmul_rows(const weft_op *op, int *out_splittable) {
  /* a batch of a's sharing one b, a not transposed, is one tall matmul: [batch*m, k] . [k, n] */
  int fold = op->batch > 1 && !op->trans_a && !op->b_batched && op->batch * op->m <= INT_MAX;
  if (out_splittable) *out_splittable = op->batch == 1 || fold;
  return fold ? op->batch * op->m : op->m;
}

/* The matmul as row-major pieces: pointers and leading dimensions of a sub-range of output rows. */
typedef struct mm_view {
  int64_t batch, rows, n, k;
  int ta, tb, accum; /* accum: matmul_acc */
  int64_t a_off, c_off; /* element offsets of the first row */
  int64_t lda, ldb, ldc, sa, sb, sc;
} mm_view;

static mm_view mm_plan(const weft_op *op, int64_t r0, int64_t r1) {
  mm_view v;
  int split;
  int64_t rows = weft_cu_matmul_rows(op, &split);
  int folded = rows != op->m;
  v.batch = folded ? 1 : op->batch;
  if (!split) r0 = 0, r1 = rows;
  v.rows = r1 - r0, v.n = op->n, v.k = op->k;
  v.ta = op->trans_a, v.tb = op->trans_b, v.accum = op->kind == WEFT_OP_MATMUL_ACC;
  v.lda = op->trans_a ? op->m : op->k;
  v.ldb = op->trans_b ? op->k : op->n;
  v.ldc = op->n;
  v.a_off = op->trans_a ? r0 : r0 * op->k;
  v.c_off = r0 * op->n;
  v.sa = op->m * op->k;
  v.sb = op->b_batched ? op->k * op->n : 0;
  v.sc = op->m * op->n;
  return v;
}

static int aligned(uint64_t ptr, int64_t off, int64_t ld, int64_t stride, int64_t batch, int w) {
  return ((ptr + (uint64_t)(off * F4)) % (uint64_t)(w * F4)) == 0 && ld % w == 0 && (batch <= 1 || stride % w == 0);
}

/* A fused matmul's epilogue buffers (device pointers; 0: none), src/lanes/fuse.h. */
typedef struct mm_epi {
  uint64_t bias, resid, gelu;
} mm_epi;

/* The epilogue's pointers in a launch whose c starts `off` elements into the output: resid and gelu have c's
 * layout, the bias is per column. */
static void epi_args(weft_cu_mm_args *m, const mm_epi *e, int64_t off) {
  if (!e) return;
  m->bias = e->bias;
  m->resid = e->resid ? e->resid + (uint64_t)(off * F4) : 0;
  m->gelu = e->gelu ? e->gelu + (uint64_t)(off * F4) : 0;
}

/* The exact kernels. A few rows of a (decode) get the matrix-vector kernels. Otherwise the tiled kernel
 * whose tile shape has the least estimated time (cuda_mm_tiles.h: weft_cu_mm_pick): the time of the busiest
 * SM, ceil(blocks / SMs) blocks, times the tile's outputs and its cost per output (smaller tiles and 4x4 a
 * thread cost more), times a penalty when an SM would hold fewer than 8 warps. On an H200 (132 SMs) that
 * keeps large matmuls on 128x128 (about 26 TFLOP/s there) and moves those with few tiles, which waves of
 * 128x128 blocks fill badly (GPT-2's weight gradients, c = 768x3072 in 144 blocks: 55%), to 64x64 tiles of
 * 64 threads (576 blocks: an estimated 79%). Every shape runs the same chains, so the bits never depend on
 * the pick. Batches of more than 65535 go in several launches (the grid's y limit). */
static weft_status emit_exact_mm(weft_cu_dev *d, const mm_view *v, uint64_t a, uint64_t b, uint64_t c,
                                 const mm_epi *e) {
  if (v->rows <= WEFT_CU_MV_ROWS && !v->ta) {
    /* a few rows (a decode step's matrix-vector work): a thread per output and its k chain, so every SM
     * has outputs to compute where 64x64 tiles would be mostly empty */
    weft_cu_mm_args m;
    memset(&m, 0, sizeof m);
    m.m = (int32_t)v->rows, m.n = (int32_t)v->n, m.k = (int32_t)v->k;
    m.lda = (int32_t)v->lda, m.ldb = (int32_t)v->ldb, m.ldc = (int32_t)v->ldc;
    m.sa = v->sa, m.sb = v->sb, m.sc = v->sc;
    m.accum = v->accum;
    for (int64_t p0 = 0; p0 < v->batch; p0 += 65535) {
      int64_t nb = v->batch - p0 < 65535 ? v->batch - p0 : 65535;
      weft_cu_item it;
      const int fn = v->rows == 1 ? (v->tb ? WEFT_CUK_MV1_NT : WEFT_CUK_MV1_NN) : (v->tb ? WEFT_CUK_MV_NT : WEFT_CUK_MV_NN);
      const uint64_t outs = fn == WEFT_CUK_MV1_NT ? WEFT_CU_MV1_OUT : WEFT_CU_MV_OUT; /* outputs a block owns */
      item_kernel(&it, fn, ceil_div((uint64_t)v->n, outs), (uint32_t)nb, WEFT_CU_MV_THREADS);
      it.a.mm = m;
      it.a.mm.a = a + (uint64_t)((v->a_off + p0 * v->sa) * F4);
      it.a.mm.b = b + (uint64_t)(p0 * v->sb * F4);
      it.a.mm.c = c + (uint64_t)((v->c_off + p0 * v->sc) * F4);
      epi_args(&it.a.mm, e, v->c_off + p0 * v->sc);
      if (fn == WEFT_CUK_MV1_NT) { /* 16-byte loads of a's row and b's rows where every start is aligned */
        it.a.mm.vec_a = aligned(it.a.mm.a, 0, 0, v->sa, nb, 4);
        it.a.mm.vec_b = aligned(it.a.mm.b, 0, v->ldb, v->sb, nb, 4);
      }
      weft_status st = weft_cu_push(d, &it);
      if (st != WEFT_OK) return st;
    }
    return WEFT_OK;
  }
  const weft_cu_mm_tile *t = weft_cu_mm_tile_at(weft_cu_mm_pick(v->rows, v->n, v->batch, d->sms));
  const int fn = t->fn + (v->ta ? 2 : 0) + (v->tb ? 1 : 0);
  int wa, wb, wc;
  weft_cu_mm_tile_widths(t, &wa, &wb, &wc);
  weft_cu_mm_args m;
  memset(&m, 0, sizeof m);
  m.m = (int32_t)v->rows, m.n = (int32_t)v->n, m.k = (int32_t)v->k;
  m.lda = (int32_t)v->lda, m.ldb = (int32_t)v->ldb, m.ldc = (int32_t)v->ldc;
  m.sa = v->sa, m.sb = v->sb, m.sc = v->sc;
  m.accum = v->accum;
  m.tiles_m = (int32_t)ceil_div((uint64_t)v->rows, (uint64_t)t->bm);
  m.tiles_n = (int32_t)ceil_div((uint64_t)v->n, (uint64_t)t->bn);
  m.group = 8;
  m.vec_a = aligned(a, v->a_off, v->lda, v->sa, v->batch, wa);
  m.vec_b = aligned(b, 0, v->ldb, v->sb, v->batch, wb);
  m.vec_c = aligned(c, v->c_off, v->ldc, v->sc, v->batch, wc);
  for (int64_t p0 = 0; p0 < v->batch; p0 += 65535) {
    int64_t nb = v->batch - p0 < 65535 ? v->batch - p0 : 65535;
    weft_cu_item it;
    item_kernel(&it, fn, (uint64_t)m.tiles_m * (uint64_t)m.tiles_n, (uint32_t)nb, (uint32_t)t->threads);
    it.a.mm = m;
    it.a.mm.a = a + (uint64_t)((v->a_off + p0 * v->sa) * F4);
    it.a.mm.b = b + (uint64_t)(p0 * v->sb * F4);
    it.a.mm.c = c + (uint64_t)((v->c_off + p0 * v->sc) * F4);
    epi_args(&it.a.mm, e, v->c_off + p0 * v->sc);
    weft_status st = weft_cu_push(d, &it);
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

/* Row-major c = op(a) . op(b) is column-major c^T = op(b)^T . op(a)^T: cuBLAS gets b first. `esz` is the
 * input element size (4 for fp32, 2 for bf16 copies). */
static weft_cu_gemm gemm_of(const mm_view *v, uint64_t a, uint64_t b, uint64_t c, int64_t esz) {
  weft_cu_gemm g;
  memset(&g, 0, sizeof g);
  g.opa = v->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.opb = v->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.m = (int32_t)v->n, g.n = (int32_t)v->rows, g.k = (int32_t)v->k;
  g.a = b, g.lda = (int32_t)v->ldb, g.sa = v->sb;
  g.b = a + (uint64_t)(v->a_off * esz), g.ldb = (int32_t)v->lda, g.sb = v->sa;
  g.c = c + (uint64_t)(v->c_off * F4), g.ldc = (int32_t)v->ldc, g.sc = v->sc;
  g.batch = (int32_t)v->batch;
  return g;
}

/* The bf16 copy of a buffer, converted if its contents changed since the last conversion. */
static weft_status bf16_of(weft_cu_dev *d, weft_cu_buf *b, uint64_t *out) {
  if (!b->bf16) {
    weft_status st = weft_cu_enter(d);
    if (st != WEFT_OK) return st;
    CUresult r = d->cu->cuMemAlloc(&b->bf16, b->bytes / 2 + 16);
    if (r != CUDA_SUCCESS) {
      b->bf16 = 0;
      return weft_cu_check(d, r, "allocating a bf16 copy of an input");
    }
    b->bf16_gen = b->gen - 1;
  }
  if (b->bf16_gen != b->gen) {
    int64_t count = (int64_t)(b->bytes / sizeof(float));
    weft_cu_item it;
    item_kernel(&it, WEFT_CUK_TO_BF16, stride_grid(d, (uint64_t)count, 256, 16), 1, 256);
    it.a.cv.in = b->ptr, it.a.cv.out = b->bf16, it.a.cv.count = count;
    weft_status st = weft_cu_push(d, &it);
    if (st != WEFT_OK) return st;
    b->bf16_gen = b->gen;
  }
  *out = b->bf16;
  return WEFT_OK;
}

static weft_status emit_matmul(weft_cu_lane *l, const weft_op *op, int64_t r0, int64_t r1, const mm_epi *e) {
  weft_cu_dev *d = l->dev;
  if (op->batch == 0) return WEFT_OK;
  weft_cu_buf *A = op->in[0], *B = op->in[1], *C = op->out[0];
  mm_view v = mm_plan(op, r0, r1);
  if (v.rows <= 0) return WEFT_OK;
  weft_cu_item it;
  memset(&it, 0, sizeof it);
  /* matmul_acc runs the exact kernel under every contract: its order is valid for each of them */
  switch (v.accum ? WEFT_CONTRACT_EXACT : op->contract) {
  case WEFT_CONTRACT_EXACT:
    return emit_exact_mm(d, &v, A->ptr, B->ptr, C->ptr, e);
  case WEFT_CONTRACT_FP32:
    if (!d->blas) return emit_exact_mm(d, &v, A->ptr, B->ptr, C->ptr, NULL); /* exact is a valid fp32 order */
    it.kind = WEFT_CU_IT_SGEMM;
    it.a.g = gemm_of(&v, A->ptr, B->ptr, C->ptr, F4);
    return weft_cu_push(d, &it);
  case WEFT_CONTRACT_TF32:
    it.kind = WEFT_CU_IT_GEMMEX;
    it.a.g = gemm_of(&v, A->ptr, B->ptr, C->ptr, F4);
    it.a.g.atype = it.a.g.btype = CUDA_R_32F;
    it.a.g.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    return weft_cu_push(d, &it);
  case WEFT_CONTRACT_BF16: {
    uint64_t a16, b16;
    weft_status st = bf16_of(d, A, &a16);
    if (st == WEFT_OK) st = bf16_of(d, B, &b16);
    if (st != WEFT_OK) return st;
    it.kind = WEFT_CU_IT_GEMMEX;
    it.a.g = gemm_of(&v, a16, b16, C->ptr, 2);
    it.a.g.atype = it.a.g.btype = CUDA_R_16BF;
    it.a.g.compute = CUBLAS_COMPUTE_32F;
    return weft_cu_push(d, &it);
  }
  default:
    return weft_lane_report(d->host, WEFT_ERR_UNSUPPORTED, "%s: contract %d is not served here", l->name,
                            (int)op->contract);
  }
}

/* Device scratch of at least `bytes`; replacing it first runs and waits for launches that may use it. */
static weft_status scratch(weft_cu_dev *d, size_t bytes, uint64_t *out) {
  if (d->scratch_bytes < bytes) {
    weft_status st = weft_cu_enter(d);
    if (st == WEFT_OK) st = weft_cu_flush(d);
    if (st == WEFT_OK) st = weft_cu_sync_all(d);
    if (st != WEFT_OK) return st;
    if (d->scratch) d->cu->cuMemFree(d->scratch);
    d->scratch = 0, d->scratch_bytes = 0;
    size_t want = bytes < ((size_t)1 << 16) ? ((size_t)1 << 16) : bytes;
    CUresult r = d->cu->cuMemAlloc(&d->scratch, want);
    if (r != CUDA_SUCCESS) {
      d->scratch = 0;
      return weft_cu_check(d, r, "allocating scratch (softmax rows, attention backward, sumsq partials)");
    }
    d->scratch_bytes = want;
  }
  *out = d->scratch;
  return WEFT_OK;
}

/* Embedding backward's int32 scratch for tables of up to `rows` rows and `bt` positions: count[rows + 1]
 * (zeroed once when allocated; every backward leaves it zero again), start[rows + 1], list[bt]. Growing it
 * first runs and waits for the launches recorded so far (they may use the old one). */
static weft_status eb_scratch(weft_cu_dev *d, int64_t rows, int64_t bt, uint64_t *count, uint64_t *start,
                              uint64_t *list) {
  if (d->eb_rows < rows || d->eb_bt < bt) {
    weft_status st = weft_cu_enter(d);
    if (st == WEFT_OK) st = weft_cu_flush(d);
    if (st == WEFT_OK) st = weft_cu_sync_all(d);
    if (st != WEFT_OK) return st;
    int64_t nr = rows > d->eb_rows ? rows : d->eb_rows, nb = bt > d->eb_bt ? bt : d->eb_bt;
    if (d->eb_scratch) d->cu->cuMemFree(d->eb_scratch);
    d->eb_scratch = 0, d->eb_rows = 0, d->eb_bt = 0;
    if (nr < 1024) nr = 1024;
    if (nb < 1024) nb = 1024;
    size_t words = (size_t)(2 * (nr + 1) + nb);
    CUresult r = d->cu->cuMemAlloc(&d->eb_scratch, words * 4);
    /* count zeroed on the compute stream, ahead of every launch that uses it */
    if (r == CUDA_SUCCESS)
      r = d->cu->cuMemsetD32Async(d->eb_scratch, 0, (size_t)(nr + 1), d->stream[WEFT_CU_S_COMPUTE]);
    if (r != CUDA_SUCCESS) {
      if (d->eb_scratch) d->cu->cuMemFree(d->eb_scratch);
      d->eb_scratch = 0;
      return weft_cu_check(d, r, "allocating embedding backward scratch");
    }
    d->work[WEFT_CU_S_COMPUTE]++;
    d->eb_rows = nr, d->eb_bt = nb;
  }
  *count = d->eb_scratch;
  *start = d->eb_scratch + (uint64_t)(d->eb_rows + 1) * 4;
  *list = d->eb_scratch + (uint64_t)(2 * (d->eb_rows + 1)) * 4;
  return WEFT_OK;
}

static uint64_t bptr(const weft_buffer *b) { return b ? ((const weft_cu_buf *)b)->ptr : 0; }

/* Grids: grid-stride loops over n elements (256 threads a block), and one warp per row (8 rows a block). */
static uint64_t grid_elems(const weft_cu_dev *d, int64_t n) { return stride_grid(d, (uint64_t)(n > 0 ? n : 1), 256, 32); }
static uint64_t grid_rows(const weft_cu_dev *d, int64_t rows) { return stride_grid(d, (uint64_t)(rows > 0 ? rows : 1), 8, 16); }

/* Attention's kernels: a block of 256 threads per (b, h) and tile of 64 rows, tiles strided by the grid. */
static uint64_t grid_attn(const weft_cu_dev *d, const weft_tx_attn_args *a) {
  return stride_grid(d, (uint64_t)(a->B * a->NH * ((a->T + 63) / 64)), 1, 64);
}

/* One kernel launch whose argument block is `args` (`size` bytes) into the item's union. */
static weft_status push_tx(weft_cu_dev *d, int fn, uint64_t gx, uint32_t gy, uint32_t block, const void *args,
                           size_t size) {
  weft_cu_item it;
  item_kernel(&it, fn, gx, gy, block);
  memcpy(&it.a, args, size);
  return weft_cu_push(d, &it);
}
#define PUSH(fn, gx, gy, block, args) push_tx(d, fn, gx, gy, block, &(args), sizeof(args))

/* The transformer ops, as the launch sequences cuda_tx_args.h documents (tests/cuda/test_cuda_tx.c runs the
 * same ones against reference_tx.c). Indices were range-checked by the core before the op got here. */
static weft_status emit_tx(weft_cu_lane *l, const weft_op *op) {
  weft_cu_dev *d = l->dev;
  const int64_t *ip = op->iparam;
  const float *fp = op->fparam;
  /* attention, cross-entropy and GELU have fp32 kernels, for fp32 and the weaker tf32/bf16 (which allow fp32's
   * freedoms outside the matmuls); layernorm and sumsq pick theirs under fp32 below; the other ops run their
   * exact kernels under every contract (the exact order is an fp32 order) */
  const int f32 = op->contract != WEFT_CONTRACT_EXACT;
  weft_status st = WEFT_OK;
  switch (op->kind) {
  case WEFT_OP_EMBEDDING: {
    weft_tx_embed_args a;
    memset(&a, 0, sizeof a);
    a.out = bptr(op->out[0]), a.tok = bptr(op->in[0]), a.pos = bptr(op->in[1]);
    a.wte = bptr(op->in[2]), a.wpe = bptr(op->in[3]);
    a.BT = ip[0] * ip[1], a.T = ip[1], a.C = ip[2], a.V = ip[3], a.P = ip[4];
    if (a.BT * a.C == 0) return WEFT_OK;
    return PUSH(WEFT_CUK_TX_EMBED_FWD, grid_elems(d, a.BT * a.C), 1, 256, a);
  }
  case WEFT_OP_EMBEDDING_BACKWARD: {
    const int64_t BT = ip[0] * ip[1], T = ip[1], C = ip[2];
    if (BT == 0 || C == 0) return WEFT_OK;
    /* the position table with positions bt % T gets a kernel of its own (no scan), after the token table's;
     * the tables given positions by index are scanned, in one kernel each up to WEFT_TX_EB_ROWS_MAXBT
     * positions (no scratch), else counted, sorted and added */
    const int pos_implicit = op->out[1] && !op->in[2];
    const int ntab = 2 - pos_implicit;
    int64_t rows = 0;
    if (op->out[0] && ip[3] > rows) rows = ip[3];
    if (op->out[1] && !pos_implicit && ip[4] > rows) rows = ip[4];
    const int rows_kernel = BT <= WEFT_TX_EB_ROWS_MAXBT;
    uint64_t cnt = 0, start = 0, list = 0;
    const int scanned = op->out[0] || (op->out[1] && !pos_implicit);
    if (!rows_kernel && scanned && (st = eb_scratch(d, rows, BT, &cnt, &start, &list)) != WEFT_OK) return st;
    for (int tab = 0; tab < ntab; tab++) {
      if (!op->out[tab]) continue;
      weft_tx_embed_bwd_args a;
      memset(&a, 0, sizeof a);
      a.table = bptr(op->out[tab]), a.dout = bptr(op->in[0]), a.idx = bptr(op->in[tab ? 2 : 1]);
      a.count = cnt, a.start = start, a.list = list;
      a.BT = BT, a.T = T, a.C = C, a.nrows = tab ? ip[4] : ip[3];
      if (rows_kernel) {
        if ((st = PUSH(WEFT_CUK_TX_EMBED_BWD_ROWS, stride_grid(d, (uint64_t)BT, 1, 8), 1, 256, a)) != WEFT_OK)
          return st;
        continue;
      }
      uint32_t gy = BT < 65535 ? (uint32_t)BT : 65535; /* list positions; only the rows that occur */
      if ((st = PUSH(WEFT_CUK_TX_EMBED_BWD_COUNT, grid_elems(d, BT), 1, 256, a)) != WEFT_OK ||
          (st = PUSH(WEFT_CUK_TX_EMBED_BWD_SCAN, 1, 1, 1024, a)) != WEFT_OK ||
          (st = PUSH(WEFT_CUK_TX_EMBED_BWD_FILL, grid_elems(d, BT), 1, 256, a)) != WEFT_OK ||
          (st = PUSH(WEFT_CUK_TX_EMBED_BWD_SORT, grid_elems(d, a.nrows), 1, 256, a)) != WEFT_OK ||
          (st = PUSH(WEFT_CUK_TX_EMBED_BWD_ACCUM, (uint64_t)((C + 127) / 128), gy, 128, a)) != WEFT_OK)
        return st;
    }
    if (!pos_implicit) return WEFT_OK;
    weft_tx_embed_bwd_args a;
    memset(&a, 0, sizeof a);
    a.table = bptr(op->out[1]), a.dout = bptr(op->in[0]);
    a.BT = BT, a.T = T, a.C = C, a.nrows = ip[4];
    return PUSH(WEFT_CUK_TX_EMBED_BWD_POS, grid_elems(d, (T < ip[4] ? T : ip[4]) * C), 1, 256, a);
  }
  case WEFT_OP_LAYERNORM: {
    weft_tx_ln_args a;
    memset(&a, 0, sizeof a);
    a.y = bptr(op->out[0]), a.mean = bptr(op->out[1]), a.rstd = bptr(op->out[2]);
    a.x = bptr(op->in[0]), a.gamma = bptr(op->in[1]), a.beta = bptr(op->in[2]);
    a.N = ip[0], a.C = ip[1], a.eps = fp[0];
    if (a.N == 0) return WEFT_OK;
    /* fp32: a warp per row, the row in registers (8 rows a block) */
    if (op->contract == WEFT_CONTRACT_FP32 && a.C <= WEFT_TX_LNF_MAXC)
      return PUSH(WEFT_CUK_TX_LN_FWD_F32, grid_rows(d, a.N), 1, 256, a);
    /* a few rows: a block each (their chains would wait on each other's loads in 32-row blocks) */
    if (a.N <= 2 * (int64_t)d->sms && a.C <= WEFT_TX_LN_ROW_MAXC)
      return PUSH(WEFT_CUK_TX_LN_FWD_ROW, (uint64_t)a.N, 1, 256, a);
    return PUSH(WEFT_CUK_TX_LN_FWD, stride_grid(d, (uint64_t)a.N, 32, 6), 1, 256, a); /* 32 rows a block */
  }
  case WEFT_OP_LAYERNORM_BACKWARD: {
    weft_tx_ln_args a;
    memset(&a, 0, sizeof a);
    a.dy = bptr(op->in[0]), a.x = bptr(op->in[1]), a.mean = bptr(op->in[2]), a.rstd = bptr(op->in[3]);
    a.gamma = bptr(op->in[4]);
    a.dx = bptr(op->out[0]), a.dgamma = bptr(op->out[1]), a.dbeta = bptr(op->out[2]);
    a.N = ip[0], a.C = ip[1];
    if (a.N == 0 || a.C == 0) return WEFT_OK;
    if (op->contract == WEFT_CONTRACT_FP32 && a.C <= WEFT_TX_LNF_MAXC) {
      /* fp32: dgamma/dbeta as partials per block of WEFT_TX_LNP_R rows (scratch), added in order after;
       * then dx a warp per row. Blocks of rows beyond the grid's y limit take the exact kernel. */
      const int64_t nrb = (a.N + WEFT_TX_LNP_R - 1) / WEFT_TX_LNP_R;
      if ((a.dgamma || a.dbeta) && nrb <= 65535) {
        if ((st = scratch(d, (size_t)(nrb * 2 * a.C) * sizeof(float), &a.part)) != WEFT_OK ||
            (st = PUSH(WEFT_CUK_TX_LN_BWD_DGB_PART, (uint64_t)((a.C + 31) / 32), (uint32_t)nrb, 256, a)) != WEFT_OK ||
            (st = PUSH(WEFT_CUK_TX_LN_BWD_DGB_SUM, ceil_div((uint64_t)a.C, 256), 1, 256, a)) != WEFT_OK)
          return st;
      } else if ((a.dgamma || a.dbeta) &&
                 (st = PUSH(WEFT_CUK_TX_LN_BWD_DGB, stride_grid(d, (uint64_t)a.C, WEFT_TX_LNG_CW, 8), 1, 256, a)) !=
                     WEFT_OK) {
        return st;
      }
      return PUSH(WEFT_CUK_TX_LN_BWD_DX_F32, grid_rows(d, a.N), 1, 256, a);
    }
    /* dgamma/dbeta first: dx may be dy (in place), and they read dy */
    if ((a.dgamma || a.dbeta) &&
        (st = PUSH(WEFT_CUK_TX_LN_BWD_DGB, stride_grid(d, (uint64_t)a.C, WEFT_TX_LNG_CW, 8), 1, 256, a)) != WEFT_OK)
      return st;
    return PUSH(WEFT_CUK_TX_LN_BWD_DX, stride_grid(d, (uint64_t)a.N, 32, 6), 1, 256, a);
  }
  case WEFT_OP_GELU:
  case WEFT_OP_GELU_BACKWARD: {
    weft_tx_gelu_args a;
    memset(&a, 0, sizeof a);
    a.out = bptr(op->out[0]), a.x = bptr(op->in[0]), a.dy = bptr(op->in[1]), a.n = ip[0];
    if (a.n == 0) return WEFT_OK;
    /* WEFT_TX_GELU_U float4s a thread (all loads issued first) where aligned: one pass over GPT-2's
     * activations (B*T x 3072) without the grid striding, up to 48 blocks an SM */
    return PUSH(op->kind == WEFT_OP_GELU ? (f32 ? WEFT_CUK_TX_GELU_FWD_F32 : WEFT_CUK_TX_GELU_FWD)
                                         : (f32 ? WEFT_CUK_TX_GELU_BWD_F32 : WEFT_CUK_TX_GELU_BWD),
                stride_grid(d, ceil_div((uint64_t)a.n, 4 * WEFT_TX_GELU_U), 256, 48), 1, 256, a);
  }
  case WEFT_OP_CAUSAL_SOFTMAX:
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD: {
    weft_tx_softmax_args a;
    memset(&a, 0, sizeof a);
    a.out = bptr(op->out[0]), a.in = bptr(op->in[0]), a.in2 = bptr(op->in[1]);
    a.R = ip[0], a.T = ip[1], a.scale = fp[0];
    if (a.R * a.T == 0) return WEFT_OK;
    return PUSH(op->kind == WEFT_OP_CAUSAL_SOFTMAX ? WEFT_CUK_TX_SOFTMAX_FWD : WEFT_CUK_TX_SOFTMAX_BWD,
                grid_rows(d, a.R * a.T), 1, 256, a);
  }
  case WEFT_OP_ATTENTION: {
    weft_tx_attn_args a;
    memset(&a, 0, sizeof a);
    a.out = bptr(op->out[0]), a.att = bptr(op->out[1]), a.preatt = bptr(op->out[2]), a.qkv = bptr(op->in[0]);
    a.B = ip[0], a.T = ip[1], a.C = ip[2], a.NH = ip[3];
    if (a.B * a.T * a.NH == 0) return WEFT_OK;
    return PUSH(f32 ? WEFT_CUK_TX_ATTN_FWD_F32 : WEFT_CUK_TX_ATTN_FWD, grid_attn(d, &a), 1, 256, a);
  }
  case WEFT_OP_ATTENTION_CACHED: {
    weft_tx_attn_cached_args a;
    memset(&a, 0, sizeof a);
    a.out = bptr(op->out[0]), a.att = bptr(op->out[1]), a.qkv = bptr(op->in[0]);
    a.B = ip[0], a.Tmax = ip[1], a.C = ip[2], a.NH = ip[3], a.t0 = ip[4], a.Tq = ip[5];
    if (a.B * a.Tq * a.NH == 0) return WEFT_OK;
    if (!a.att && (st = scratch(d, (size_t)(a.B * a.NH * a.Tq * a.Tmax) * sizeof(float), &a.att)) != WEFT_OK)
      return st;
    if (a.B * a.NH * a.Tq <= 4 * (int64_t)d->sms && a.t0 + a.Tq <= WEFT_TX_ATC_MAXT &&
        a.C / a.NH <= WEFT_TX_ATC_MAXHS)
      return PUSH(WEFT_CUK_TX_ATTN_CACHED_BLK, (uint64_t)(a.B * a.NH * a.Tq), 1, 128, a);
    return PUSH(WEFT_CUK_TX_ATTN_CACHED, grid_rows(d, a.B * a.NH * a.Tq), 1, 256, a);
  }
  case WEFT_OP_ATTENTION_BACKWARD: {
    weft_tx_attn_args a;
    memset(&a, 0, sizeof a);
    a.dout = bptr(op->in[0]), a.qkv = bptr(op->in[1]), a.att = bptr(op->in[2]), a.dqkv = bptr(op->out[0]);
    a.B = ip[0], a.T = ip[1], a.C = ip[2], a.NH = ip[3];
    if (a.B * a.T * a.NH == 0) return WEFT_OK;
    if ((st = scratch(d, (size_t)(a.B * a.NH * a.T * a.T) * sizeof(float), &a.ds)) != WEFT_OK) return st;
    if ((st = PUSH(f32 ? WEFT_CUK_TX_ATTN_BWD_DS_F32 : WEFT_CUK_TX_ATTN_BWD_DS, grid_attn(d, &a), 1, 256, a)) !=
        WEFT_OK)
      return st;
    return PUSH(f32 ? WEFT_CUK_TX_ATTN_BWD_DQKV_F32 : WEFT_CUK_TX_ATTN_BWD_DQKV, grid_attn(d, &a), 1, 256, a);
  }
  case WEFT_OP_CROSSENTROPY:
  case WEFT_OP_CROSSENTROPY_BACKWARD: {
    weft_tx_xent_args a;
    memset(&a, 0, sizeof a);
    a.logits = bptr(op->in[0]), a.targets = bptr(op->in[1]);
    if (op->kind == WEFT_OP_CROSSENTROPY) a.losses = bptr(op->out[0]);
    else a.dlogits = bptr(op->out[0]), a.dloss = bptr(op->in[2]);
    a.N = ip[0], a.V = ip[1];
    if (a.N == 0) return WEFT_OK;
    const int fwd = op->kind == WEFT_OP_CROSSENTROPY;
    /* fp32: a block of 512 per row (the row's sums are trees over the block) */
    if (f32)
      return PUSH(fwd ? WEFT_CUK_TX_XENT_FWD_F32 : WEFT_CUK_TX_XENT_BWD_F32, stride_grid(d, (uint64_t)a.N, 1, 4), 1,
                  512, a);
    /* exact: a block of 128 per row, up to 16 blocks per SM (8.6 KB of shared memory each); a few rows (up to
     * 2 per SM) a block of 512 each, so that the loads and exponentials keep the one sum chain fed */
    return PUSH(fwd ? WEFT_CUK_TX_XENT_FWD : WEFT_CUK_TX_XENT_BWD, stride_grid(d, (uint64_t)a.N, 1, 16), 1,
                a.N <= 2 * (int64_t)d->sms ? 512 : 128, a);
  }
  case WEFT_OP_ADAMW: {
    weft_tx_adamw_args a;
    memset(&a, 0, sizeof a);
    a.grad = bptr(op->in[0]), a.param = bptr(op->out[0]), a.m = bptr(op->out[1]), a.v = bptr(op->out[2]);
    a.n = ip[0];
    a.lr = fp[0], a.beta1 = fp[1], a.beta2 = fp[2], a.eps = fp[3], a.weight_decay = fp[4], a.bc1 = fp[5];
    a.bc2 = fp[6];
    if (a.n == 0) return WEFT_OK;
    return PUSH(WEFT_CUK_TX_ADAMW, grid_elems(d, a.n), 1, 256, a);
  }
  case WEFT_OP_SUMSQ: {
    /* chunk partials into scratch (one lane per chunk, 32 chunks a warp), then one warp adds them to acc
     * in order and stores it canonical (a NaN as 0x7fc00000, even with n = 0, as the host kernel does) */
    weft_tx_clip_args a;
    memset(&a, 0, sizeof a);
    a.g = bptr(op->in[0]), a.ss = bptr(op->out[0]), a.n = ip[0];
    const int64_t nch = (a.n + WEFT_SUMSQ_CHUNK - 1) / WEFT_SUMSQ_CHUNK;
    if (op->contract == WEFT_CONTRACT_FP32 && nch > 0) {
      /* fp32: a partial per block of 256 threads (about 8192 elements a block, at most 2 blocks a SM), then
       * the same in-order add over those partials */
      const uint64_t nb = stride_grid(d, (uint64_t)a.n, 8192, 2);
      a.nparts = (int32_t)nb;
      if ((st = scratch(d, (size_t)nb * sizeof(float), &a.part)) != WEFT_OK ||
          (st = PUSH(WEFT_CUK_TX_SUMSQ_F32, nb, 1, 256, a)) != WEFT_OK)
        return st;
      return PUSH(WEFT_CUK_TX_SUMSQ_ADD, 1, 1, 32, a);
    }
    if (nch > 0) {
      if ((st = scratch(d, (size_t)nch * sizeof(float), &a.part)) != WEFT_OK) return st;
      /* a one-warp block per 32 chunks (37 KB of shared memory: 6 a SM) */
      if ((st = PUSH(WEFT_CUK_TX_SUMSQ_CHUNKS, stride_grid(d, (uint64_t)nch, 32, 6), 1, 32, a)) != WEFT_OK) return st;
    }
    return PUSH(WEFT_CUK_TX_SUMSQ_ADD, 1, 1, 32, a);
  }
  case WEFT_OP_PERMUTE: {
    /* y's axis a is x's axis perm[a]: the kernel walks y and reads x at stride xs[perm[a]] */
    weft_tx_permute_args a;
    memset(&a, 0, sizeof a);
    const int64_t *xd = ip + 1;
    int64_t xs[4];
    xs[3] = 1;
    for (int k = 2; k >= 0; k--) xs[k] = xs[k + 1] * xd[k + 1];
    a.out = bptr(op->out[0]), a.in = bptr(op->in[0]), a.rank = 4;
    a.count = xd[0] * xd[1] * xd[2] * xd[3];
    for (int k = 0; k < 4; k++) {
      int p = (int)((ip[5] >> (2 * k)) & 3);
      a.out_dims[k] = xd[p], a.in_stride[k] = xs[p];
    }
    for (int k = 4; k < 6; k++) a.out_dims[k] = 1;
    if (a.count == 0) return WEFT_OK;
    return PUSH(WEFT_CUK_TX_PERMUTE, grid_elems(d, a.count), 1, 256, a);
  }
  case WEFT_OP_COPY_SLICE: {
    /* dst[o, off + i, r] = src[o, i, r]: per o a contiguous run of src_len * inner elements */
    weft_tx_copy_args a;
    memset(&a, 0, sizeof a);
    const int64_t outer = ip[0], sl = ip[1], dl = ip[2], inner = ip[3], off = ip[4];
    a.dst = bptr(op->out[0]), a.src = bptr(op->in[0]);
    a.nb = outer, a.rows = 1, a.cols = sl * inner;
    a.dst_off = off * inner, a.dst_bs = dl * inner, a.dst_rs = 0;
    a.src_off = 0, a.src_bs = sl * inner, a.src_rs = 0;
    if (a.nb * a.cols == 0) return WEFT_OK;
    /* (b, r) pairs over y, each run over x (4 elements a thread where aligned), at most sms * 32 blocks */
    uint64_t gy = a.nb * a.rows < 65535 ? (uint64_t)(a.nb * a.rows) : 65535, cap = (uint64_t)d->sms * 32;
    uint64_t gx = ((uint64_t)a.cols + 1023) / 1024, gxmax = cap / gy ? cap / gy : 1;
    if (gx > gxmax) gx = gxmax;
    return PUSH(WEFT_CUK_TX_COPY_SLICE, gx, (uint32_t)gy, 256, a);
  }
  default:
    return weft_lane_report(d->host, WEFT_ERR_UNSUPPORTED, "%s: op %s is not implemented here", l->name,
                            weft_op_kind_str(op->kind));
  }
}
#undef PUSH

weft_status weft_cu_emit(weft_cu_lane *l, const weft_op *op, int64_t r0, int64_t r1) {
  weft_cu_dev *d = l->dev;
  const weft_cu_buf *x = op->in[0], *y = op->in[1], *o = op->out[0], *o2 = op->out[1];
  int64_t count = op->rows * op->cols;
  weft_cu_item it;
  switch (op->kind) {
  case WEFT_OP_MATMUL:
  case WEFT_OP_MATMUL_ACC:
    return emit_matmul(l, op, r0, r1, NULL);
  case WEFT_OP_ADD:
  case WEFT_OP_RELU:
  case WEFT_OP_RELU_BACKWARD:
  case WEFT_OP_SCALE:
  case WEFT_OP_AXPY: {
    if (count == 0) return WEFT_OK;
    static const int ew[] = {[WEFT_OP_ADD] = WEFT_CU_EW_ADD, [WEFT_OP_RELU] = WEFT_CU_EW_RELU,
                             [WEFT_OP_RELU_BACKWARD] = WEFT_CU_EW_RELU_BACKWARD, [WEFT_OP_SCALE] = WEFT_CU_EW_SCALE,
                             [WEFT_OP_AXPY] = WEFT_CU_EW_AXPY};
    item_kernel(&it, WEFT_CUK_ELEMENTWISE, stride_grid(d, (uint64_t)count, 256, 32), 1, 256);
    it.a.ew.x = x->ptr, it.a.ew.y = y ? y->ptr : 0, it.a.ew.out = o->ptr;
    it.a.ew.count = count, it.a.ew.cols = op->cols;
    it.a.ew.op = ew[op->kind], it.a.ew.y_broadcast = op->y_broadcast, it.a.ew.alpha = op->alpha;
    return weft_cu_push(d, &it);
  }
  case WEFT_OP_SUM_ROWS:
    if (op->cols == 0) return WEFT_OK;
    item_kernel(&it, WEFT_CUK_SUM_ROWS, stride_grid(d, (uint64_t)op->cols, 8, 16), 1, 256);
    it.a.sr.x = x->ptr, it.a.sr.out = o->ptr, it.a.sr.rows = op->rows, it.a.sr.cols = op->cols;
    return weft_cu_push(d, &it);
  case WEFT_OP_SOFTMAX_XENT: {
    uint64_t rl = 0;
    if (o) {
      weft_status st = scratch(d, (size_t)op->rows * sizeof(float), &rl);
      if (st != WEFT_OK) return st;
    }
    item_kernel(&it, WEFT_CUK_SOFTMAX_ROWS, stride_grid(d, (uint64_t)op->rows, 8, 64), 1, 256);
    it.a.sx.z = x->ptr, it.a.sx.t = y->ptr, it.a.sx.grad = o2 ? o2->ptr : 0, it.a.sx.row_loss = rl;
    it.a.sx.loss = o ? o->ptr : 0, it.a.sx.rows = op->rows, it.a.sx.cols = op->cols, it.a.sx.inv_rows = op->inv_rows;
    weft_status st = weft_cu_push(d, &it);
    if (st != WEFT_OK || !o) return st;
    weft_cu_sx_args sx = it.a.sx;
    item_kernel(&it, WEFT_CUK_SOFTMAX_LOSS, 1, 1, 32);
    it.a.sx = sx;
    return weft_cu_push(d, &it);
  }
  default:
    if (op->kind >= WEFT_OP_V1_COUNT && !l->tensor) return emit_tx(l, op);
    return weft_lane_report(d->host, WEFT_ERR_UNSUPPORTED, "%s: op %s is not implemented here", l->name,
                            weft_op_kind_str(op->kind));
  }
}

weft_status weft_cu_emit_fused(weft_cu_lane *l, const weft_fused *f) {
  const weft_op *op = &f->ops[0];
  if (f->kind == WEFT_FUSED_SINGLE)
    return weft_cu_emit(l, op, 0, weft_cu_is_matmul(op) ? weft_cu_matmul_rows(op, NULL) : 0);
  if (f->kind == WEFT_FUSED_MATMUL_EPILOGUE && op->contract == WEFT_CONTRACT_EXACT) {
    mm_epi e = {bptr(f->bias), bptr(f->residual), bptr(f->gelu_out)};
    return emit_matmul(l, op, 0, weft_cu_matmul_rows(op, NULL), &e);
  }
  /* a pattern this lane has no kernel for (the window is set up with the epilogue alone): op by op */
  for (int i = 0; i < f->nops; i++) {
    const weft_op *o = &f->ops[i];
    weft_status st = weft_cu_emit(l, o, 0, weft_cu_is_matmul(o) ? weft_cu_matmul_rows(o, NULL) : 0);
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

/* The window's emit. Ops it held were reported done to the core: if recording them fails their results would
 * silently not exist, so the device is marked failed (the core recomputes what it held elsewhere), as when a
 * launch fails. */
weft_status weft_cu_fuse_emit(void *ctx, const weft_fused *f) {
  weft_cu_lane *l = ctx;
  weft_cu_dev *d = l->dev;
  weft_status st = weft_cu_emit_fused(l, f);
  if (st == WEFT_OK) {
    if (f->kind != WEFT_FUSED_SINGLE) d->fused_ops += (uint64_t)f->nops;
    return st;
  }
  if (f->held == 0 || d->failed) return st;
  d->failed = 1;
  snprintf(d->failure, sizeof d->failure,
           "recording %s (%d ops held back for fusion) failed (%s); the device cannot go on without them",
           f->kind == WEFT_FUSED_SINGLE ? "an op" : "a fused kernel", f->nops, weft_status_str(st));
  return weft_lane_report(d->host, WEFT_ERR_LANE_FAILED, "%s: %s", l->name, d->failure);
}

weft_status weft_cu_fuse_drain(weft_cu_dev *d) {
  if (d->fuse.n == 0 || d->fuse_draining) return WEFT_OK;
  if (d->failed) {
    d->fuse.n = 0; /* nothing can run any more; the device's failure says so */
    return WEFT_OK;
  }
  d->fuse_draining = 1;
  weft_status st = weft_fuse_flush(&d->fuse, weft_cu_fuse_emit, d->fuse_lane);
  d->fuse_draining = 0;
  return st;
}

static weft_status launch_one(weft_cu_dev *d, const weft_cu_item *it) {
  CUstream s = d->stream[WEFT_CU_S_COMPUTE];
  if (it->kind == WEFT_CU_IT_KERNEL) {
    void *params[1] = {(void *)&it->a};
    CUresult r = d->cu->cuLaunchKernel(d->fn[it->fn], it->grid[0], it->grid[1], it->grid[2], it->block[0],
                                       it->block[1], it->block[2], 0, s, it->fn == WEFT_CUK_TRAP ? NULL : params,
                                       NULL);
    return r == CUDA_SUCCESS ? WEFT_OK : weft_cu_check(d, r, "launching a kernel");
  }
  const weft_cu_gemm *g = &it->a.g;
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t bs;
  if (it->kind == WEFT_CU_IT_SGEMM)
    bs = d->bl->cublasSgemmStridedBatched(d->blas, (cublasOperation_t)g->opa, (cublasOperation_t)g->opb, g->m, g->n,
                                          g->k, &one, (const float *)(uintptr_t)g->a, g->lda, g->sa,
                                          (const float *)(uintptr_t)g->b, g->ldb, g->sb, &zero,
                                          (float *)(uintptr_t)g->c, g->ldc, g->sc, g->batch);
  else
    bs = d->bl->cublasGemmStridedBatchedEx(d->blas, (cublasOperation_t)g->opa, (cublasOperation_t)g->opb, g->m, g->n,
                                           g->k, &one, (const void *)(uintptr_t)g->a, (cudaDataType)g->atype, g->lda,
                                           g->sa, (const void *)(uintptr_t)g->b, (cudaDataType)g->btype, g->ldb,
                                           g->sb, &zero, (void *)(uintptr_t)g->c, CUDA_R_32F, g->ldc, g->sc, g->batch,
                                           (cublasComputeType_t)g->compute, CUBLAS_GEMM_DEFAULT);
  return bs == CUBLAS_STATUS_SUCCESS ? WEFT_OK : weft_cu_blas_check(d, bs, "cuBLAS gemm");
}

static int tiny_ew(const weft_cu_item *it) {
  return it->kind == WEFT_CU_IT_KERNEL && it->fn == WEFT_CUK_ELEMENTWISE && it->a.ew.count <= WEFT_CU_EWB_MAX_COUNT;
}

/* The launches of items[0..n): consecutive small elementwise items become one batch launch (weft_ew_batch),
 * whose argument block goes into ewb. L and ewb hold n entries. Returns the number of launches. */
static size_t plan_launches(const weft_cu_item *items, size_t n, weft_cu_launch_t *L, weft_cu_ewb_args *ewb,
                            size_t *out_newb) {
  size_t nl = 0, nb = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && j - i < WEFT_CU_EWB_MAX && tiny_ew(&items[j])) j++;
    weft_cu_launch_t *x = &L[nl++];
    memset(x, 0, sizeof *x);
    x->item = i;
    if (j - i >= 2) {
      weft_cu_ewb_args *b = &ewb[nb++];
      memset(b, 0, sizeof *b);
      b->n = (int32_t)(j - i);
      for (size_t q = i; q < j; q++) b->ops[q - i] = items[q].a.ew;
      x->fn = WEFT_CUK_EW_BATCH;
      x->grid[0] = x->grid[1] = x->grid[2] = 1;
      x->block[0] = 1024, x->block[1] = x->block[2] = 1;
      x->args = b, x->args_size = sizeof *b;
      i = j;
      continue;
    }
    x->fn = items[i].fn, x->blas = items[i].kind != WEFT_CU_IT_KERNEL;
    memcpy(x->grid, items[i].grid, sizeof x->grid);
    memcpy(x->block, items[i].block, sizeof x->block);
    x->args = &items[i].a, x->args_size = sizeof items[i].a;
    i++;
  }
  *out_newb = nb;
  return nl;
}

/* Room for a plan of n items in the device's scratch plan. */
static weft_status plan_room(weft_cu_dev *d, size_t n) {
  if (n <= d->plan_cap) return WEFT_OK;
  weft_cu_launch_t *L = realloc(d->plan, n * sizeof *L);
  if (L) d->plan = L;
  weft_cu_ewb_args *b = L ? realloc(d->plan_ewb, n * sizeof *b) : NULL;
  if (b) d->plan_ewb = b;
  if (!L || !b)
    return weft_lane_report(d->host, WEFT_ERR_OUT_OF_MEMORY, "cuda:%d: out of host memory planning launches",
                            d->ordinal);
  d->plan_cap = n;
  return WEFT_OK;
}

static weft_status launch_item(weft_cu_dev *d, const weft_cu_item *items, const weft_cu_launch_t *x);

static weft_status launch_planned(weft_cu_dev *d, const weft_cu_item *items, const weft_cu_launch_t *L, size_t nl) {
  CUevent ev[2] = {NULL, NULL};
  int prof = d->profile && d->cu->cuEventCreate(&ev[0], CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
             d->cu->cuEventCreate(&ev[1], CU_EVENT_DEFAULT) == CUDA_SUCCESS;
  for (size_t i = 0; i < nl; i++) {
    const weft_cu_launch_t *x = &L[i];
    if (prof) d->cu->cuEventRecord(ev[0], d->stream[WEFT_CU_S_COMPUTE]);
    weft_status st = launch_item(d, items, x);
    if (prof && st == WEFT_OK) {
      float ms = 0;
      d->cu->cuEventRecord(ev[1], d->stream[WEFT_CU_S_COMPUTE]);
      d->cu->cuEventSynchronize(ev[1]);
      d->cu->cuEventElapsedTime(&ms, ev[0], ev[1]);
      const int k = x->blas ? WEFT_CUK_COUNT : x->fn;
      int e = 0;
      while (e < d->nprof && !(d->prof[e].fn == k && d->prof[e].gx == x->grid[0] && d->prof[e].gy == x->grid[1])) e++;
      if (e == d->nprof && e < (int)(sizeof d->prof / sizeof d->prof[0])) {
        d->nprof++;
        d->prof[e].fn = k, d->prof[e].gx = x->grid[0], d->prof[e].gy = x->grid[1];
      }
      if (e < d->nprof) d->prof[e].ms += ms, d->prof[e].n++;
    }
    if (st != WEFT_OK) {
      if (ev[0]) d->cu->cuEventDestroy(ev[0]);
      if (ev[1]) d->cu->cuEventDestroy(ev[1]);
      return st;
    }
  }
  if (ev[0]) d->cu->cuEventDestroy(ev[0]);
  if (ev[1]) d->cu->cuEventDestroy(ev[1]);
  return WEFT_OK;
}

static weft_status launch_item(weft_cu_dev *d, const weft_cu_item *items, const weft_cu_launch_t *x) {
  if (x->blas) return launch_one(d, &items[x->item]);
  void *params[1] = {(void *)x->args};
  CUresult r = d->cu->cuLaunchKernel(d->fn[x->fn], x->grid[0], x->grid[1], x->grid[2], x->block[0], x->block[1],
                                     x->block[2], 0, d->stream[WEFT_CU_S_COMPUTE],
                                     x->fn == WEFT_CUK_TRAP ? NULL : params, NULL);
  if (r != CUDA_SUCCESS)
    return weft_cu_check(d, r, x->fn == WEFT_CUK_EW_BATCH ? "launching a batch of elementwise kernels"
                                                          : "launching a kernel");
  return WEFT_OK;
}

/* Runs items in order; consecutive small elementwise ops go out as one batch launch (weft_ew_batch). */
weft_status weft_cu_launch(weft_cu_dev *d, const weft_cu_item *items, size_t n) {
  weft_status st = plan_room(d, n);
  if (st != WEFT_OK) return st;
  size_t nb;
  size_t nl = plan_launches(items, n, d->plan, d->plan_ewb, &nb);
  return launch_planned(d, items, d->plan, nl);
}

void weft_cu_graph_clear(weft_cu_dev *d, weft_cu_graph *g) {
  if (g->exec) d->cu->cuGraphExecDestroy(g->exec);
  if (g->graph) d->cu->cuGraphDestroy(g->graph);
  free(g->items), free(g->nodes), free(g->launches), free(g->ewb);
  memset(g, 0, sizeof *g);
}

static void kernel_node(const weft_cu_dev *d, const weft_cu_launch_t *x, void **params, CUDA_KERNEL_NODE_PARAMS *kp) {
  memset(kp, 0, sizeof *kp);
  kp->func = d->fn[x->fn];
  kp->gridDimX = x->grid[0], kp->gridDimY = x->grid[1], kp->gridDimZ = x->grid[2];
  kp->blockDimX = x->block[0], kp->blockDimY = x->block[1], kp->blockDimZ = x->block[2];
  params[0] = (void *)x->args;
  kp->kernelParams = params;
}

/* Builds the graph of g's items (kernels only) node by node, keeping the nodes; 0 when it cannot (a cuBLAS
 * call or the fault-injection trap among them, or the driver refused) - then the caller captures instead. */
static int build_nodes(weft_cu_dev *d, weft_cu_graph *g) {
  const weft_cuda_api *cu = d->cu;
  for (size_t i = 0; i < g->n; i++)
    if (g->items[i].kind != WEFT_CU_IT_KERNEL || g->items[i].fn == WEFT_CUK_TRAP) return 0;
  g->launches = malloc(g->n * sizeof *g->launches);
  g->ewb = malloc(g->n * sizeof *g->ewb);
  g->nodes = malloc(g->n * sizeof *g->nodes);
  if (!g->launches || !g->ewb || !g->nodes) goto fail;
  g->nlaunch = plan_launches(g->items, g->n, g->launches, g->ewb, &g->newb);
  if (cu->cuGraphCreate(&g->graph, 0) != CUDA_SUCCESS) goto fail;
  for (size_t i = 0; i < g->nlaunch; i++) {
    CUDA_KERNEL_NODE_PARAMS kp;
    void *params[1];
    kernel_node(d, &g->launches[i], params, &kp);
    if (cu->cuGraphAddKernelNode(&g->nodes[i], g->graph, i ? &g->nodes[i - 1] : NULL, i ? 1 : 0, &kp) !=
        CUDA_SUCCESS)
      goto fail;
  }
  if (cu->cuGraphInstantiate(&g->exec, g->graph, 0) != CUDA_SUCCESS) {
    g->exec = NULL;
    goto fail;
  }
  return 1;
fail:
  if (g->graph) cu->cuGraphDestroy(g->graph);
  g->graph = NULL;
  free(g->nodes), free(g->launches), free(g->ewb);
  g->nodes = NULL, g->launches = NULL, g->ewb = NULL, g->nlaunch = g->newb = 0;
  return 0;
}

/* Captures the items into a graph and instantiates it; 0 when the driver would not (then they run direct). */
static int capture(weft_cu_dev *d, weft_cu_graph *g) {
  const weft_cuda_api *cu = d->cu;
  CUstream s = d->stream[WEFT_CU_S_COMPUTE];
  if (cu->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS) return 0;
  /* a launch refused during capture (a failed capture shows at EndCapture too) leaves the items to run direct */
  int ok = weft_cu_launch(d, g->items, g->n) == WEFT_OK;
  CUgraph graph = NULL;
  CUresult r = cu->cuStreamEndCapture(s, &graph);
  ok = ok && r == CUDA_SUCCESS && graph;
  CUgraphExec exec = NULL;
  if (ok) ok = cu->cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS;
  if (graph) cu->cuGraphDestroy(graph);
  if (!ok) return 0;
  g->exec = exec;
  return 1;
}

/* Same kernels, grids and batching, whatever their arguments: a sequence whose graph can be updated. */
static int same_shape(const weft_cu_item *a, const weft_cu_item *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (a[i].kind != WEFT_CU_IT_KERNEL || b[i].kind != WEFT_CU_IT_KERNEL || a[i].fn != b[i].fn ||
        memcmp(a[i].grid, b[i].grid, sizeof a[i].grid) || memcmp(a[i].block, b[i].block, sizeof a[i].block) ||
        tiny_ew(&a[i]) != tiny_ew(&b[i]))
      return 0;
  }
  return 1;
}

/* Makes g's graph run d's recorded items: the nodes whose arguments differ get the new ones. 0 when the
 * driver refused an update (the graph is then dropped). */
static int update_nodes(weft_cu_dev *d, weft_cu_graph *g, size_t n) {
  size_t nb, nl = plan_launches(d->items, n, d->plan, d->plan_ewb, &nb);
  if (nl != g->nlaunch || nb != g->newb) return 0;
  for (size_t i = 0; i < nl; i++) {
    const weft_cu_launch_t *x = &d->plan[i];
    if (x->args_size == g->launches[i].args_size && memcmp(x->args, g->launches[i].args, x->args_size) == 0)
      continue;
    CUDA_KERNEL_NODE_PARAMS kp;
    void *params[1];
    kernel_node(d, x, params, &kp);
    if (d->cu->cuGraphExecKernelNodeSetParams(g->exec, g->nodes[i], &kp) != CUDA_SUCCESS) return 0;
    d->graph_updates++;
  }
  /* the graph's copies of the arguments (its launches point into them) now match the nodes */
  memcpy(g->items, d->items, n * sizeof *d->items);
  memcpy(g->ewb, d->plan_ewb, nb * sizeof *g->ewb);
  return 1;
}

static weft_status launch_graph(weft_cu_dev *d, weft_cu_graph *g) {
  d->graph_replays++;
  CUresult r = d->cu->cuGraphLaunch(g->exec, d->stream[WEFT_CU_S_COMPUTE]);
  return r == CUDA_SUCCESS ? WEFT_OK : weft_cu_check(d, r, "launching a graph");
}

weft_status weft_cu_flush(weft_cu_dev *d) {
  weft_status fst = weft_cu_fuse_drain(d);
  if (fst != WEFT_OK) return fst;
  size_t n = d->nitems;
  if (n == 0) return WEFT_OK;
  d->nitems = 0;
  weft_status st = weft_cu_order(d, WEFT_CU_S_COMPUTE, WEFT_CU_S_H2D);
  if (st == WEFT_OK && d->wait_d2h) st = weft_cu_order(d, WEFT_CU_S_COMPUTE, WEFT_CU_S_D2H);
  d->wait_d2h = 0;
  if (st == WEFT_OK) st = plan_room(d, n);
  if (st != WEFT_OK) return st;
  d->work[WEFT_CU_S_COMPUTE]++;
  if (n < 2 || d->profile) return weft_cu_launch(d, d->items, n);
  /* A sequence run before is replayed from its graph (made on its second run); one that differs from a
   * remembered one only in kernel arguments updates that graph's nodes; a new one runs directly and is
   * remembered. */
  weft_cu_graph *hit = NULL, *like = NULL, *victim = &d->graphs[0];
  for (int i = 0; i < WEFT_CU_GRAPHS; i++) {
    weft_cu_graph *g = &d->graphs[i];
    if (g->items && g->n == n && memcmp(g->items, d->items, n * sizeof *d->items) == 0) {
      hit = g;
      break;
    }
    if (!like && g->items && g->n == n && !g->no_graph && (!g->exec || g->nodes) && same_shape(g->items, d->items, n))
      like = g;
    if (!g->items || g->used < victim->used) victim = g;
  }
  d->graph_clock++;
  if (!hit && like) {
    like->used = d->graph_clock;
    if (like->exec) {
      if (update_nodes(d, like, n)) return launch_graph(d, like);
      weft_cu_graph_clear(d, like); /* refused: remembered afresh below */
      victim = like;
    } else {
      memcpy(like->items, d->items, n * sizeof *d->items); /* second sight of this shape: build it */
      hit = like;
    }
  }
  if (hit) {
    hit->used = d->graph_clock;
    if (!hit->exec && !hit->no_graph && !build_nodes(d, hit) && !capture(d, hit)) hit->no_graph = 1;
    if (hit->exec) return launch_graph(d, hit);
    return weft_cu_launch(d, d->items, n);
  }
  weft_cu_graph_clear(d, victim);
  victim->items = malloc(n * sizeof *d->items);
  if (victim->items) {
    memcpy(victim->items, d->items, n * sizeof *d->items);
    victim->n = n;
    victim->used = d->graph_clock;
  }
  return weft_cu_launch(d, d->items, n);
}
