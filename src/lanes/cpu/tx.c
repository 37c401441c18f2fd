/* tx.c - the CPU lane's transformer ops: the loops, the split over the pool's threads and the sums, around
 * the vector kernels of tx_kern.inc. The bits are reference_tx.c's (tx.h says how); the rules kept here:
 *   - a sum over k runs k ascending from +0 in one accumulator. Where a row's sum is a long dependent chain
 *     (layernorm's mean and variance, a softmax's or cross-entropy's sum of exps), eight rows run side by
 *     side, each in its own accumulator, so eight chains overlap without any being reordered;
 *   - sumsq's chunks (WEFT_SUMSQ_CHUNK elements each, one chain apiece) run across threads and vector
 *     lanes; their partials are added in order afterwards on the caller's thread;
 *   - threads take parts of independent outputs (rows, channels, (batch, head) pairs) from a counter; a
 *     part's bits do not depend on which thread takes it or how many there are;
 *   - parameter gradients (dwte, dwpe, dgamma, dbeta), accumulated in ascending (b, t) or row order, are
 *     split by channels: each thread walks every row in order for its own channels. */
#include "tx.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/reference_tx.h"
#include "cpu.h"

/* Rows side by side in the sums. */
#define G 8
/* Work (roughly element operations) below which an op stays on the caller's thread, and the least each
 * extra thread must get. */
#define MIN_WORK_PER_THREAD ((int64_t)1 << 16)
#define PARTS_PER_THREAD 4

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
static inline float canon(float x) { return x != x ? __builtin_nanf("") : x; }

const weft_cpu_tx_kernels *weft_cpu_tx_select(void) { return weft_cpu_tx_select_for(WEFT_CONTRACT_EXACT); }

const weft_cpu_tx_kernels *weft_cpu_tx_select_for(weft_contract contract) {
  const int fp32 = contract == WEFT_CONTRACT_FP32;
#if defined(__x86_64__) || defined(__i386__)
  const char *isa = weft_cpu_isa_name();
  if (strcmp(isa, "avx512") == 0) return fp32 ? &weft_cpu_tx_avx512_fp32 : &weft_cpu_tx_avx512;
  if (strcmp(isa, "avx2") == 0) return fp32 ? &weft_cpu_tx_avx2_fp32 : &weft_cpu_tx_avx2;
#endif
  return fp32 ? &weft_cpu_tx_portable_fp32 : &weft_cpu_tx_portable;
}

/* ------------------------------------------------------------------------------ the parallel loop */

typedef void (*range_fn)(void *ctx, int64_t lo, int64_t hi, int tid);

typedef struct par_job {
  range_fn fn;
  void *ctx;
  int64_t n, per, nparts;
  atomic_llong next, done;
} par_job;

static void par_task(void *c, int tid) {
  par_job *job = c;
  for (;;) {
    const int64_t part = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
    if (part >= job->nparts) break;
    const int64_t lo = part * job->per;
    job->fn(job->ctx, lo, min64(lo + job->per, job->n), tid);
    atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
  }
  if (tid == 0) weft_cpu_wait_until(&job->done, job->nparts);
}

/* Threads an op of `work` may use (at least 1, at most the pool's). */
static int threads_for(const weft_cpu_pool *pool, int64_t work) {
  int nth = weft_cpu_pool_threads(pool);
  const int64_t fed = work / MIN_WORK_PER_THREAD;
  if (fed < nth) nth = fed < 1 ? 1 : (int)fed;
  return nth;
}

/* fn over [0, n) in parts of a multiple of `align` items, each item about `work_per_item` operations. */
static void par_for(weft_cpu_pool *pool, int64_t n, int64_t align, int64_t work_per_item, range_fn fn, void *ctx) {
  if (n <= 0) return;
  const int nth = threads_for(pool, n * (work_per_item > 0 ? work_per_item : 1));
  if (nth <= 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  par_job job;
  job.fn = fn;
  job.ctx = ctx;
  job.n = n;
  job.per = (n + (int64_t)nth * PARTS_PER_THREAD - 1) / ((int64_t)nth * PARTS_PER_THREAD);
  job.per = (job.per + align - 1) / align * align;
  job.nparts = (n + job.per - 1) / job.per;
  atomic_init(&job.next, 0);
  atomic_init(&job.done, 0);
  weft_cpu_pool_run(pool, nth, par_task, &job);
}

/* --------------------------------------------------------------------------------- shared pieces */

/* Rows side by side in the vector kernels' row sums: the widest vector's lanes. */
#define WMAX 16

/* Rows at least this long take the fp32 tables' per-row vector sums; shorter ones the transposed loads,
 * which keep the vector lanes full on rows of a few vectors or less. */
#define FP32_ROW_MIN 64

/* out[r] = 0 + rows[r][0] + ... + rows[r][len[r]-1] for r < g, each row in its own ascending chain (exact
 * tables): the vector lanes take `width` rows at a time through transposed loads, reading every row up to n
 * (at least every len), which must hold +0 past the row's length (adding +0 changes no sum from +0); a lone
 * row runs its chain on its own. fp32 tables: long rows (or a lone one) each in its own vector sum. */
static void sum_rows_of(const weft_cpu_tx_kernels *k, float *const *rows, const int64_t *len, int g, int64_t n,
                        float *out) {
  int64_t minlen = len[0];
  for (int r = 1; r < g; r++) minlen = len[r] < minlen ? len[r] : minlen;
  if (k->fp32 && (g == 1 || minlen >= FP32_ROW_MIN)) {
    for (int r = 0; r < g; r++) out[r] = k->sum(rows[r], len[r]);
    return;
  }
  if (g == 1) {
    float s = 0.0f;
    for (int64_t j = 0; j < len[0]; j++) s = s + rows[0][j];
    out[0] = s;
    return;
  }
  const int W = k->width;
  for (int r0 = 0; r0 < g; r0 += W) {
    const float *rr[WMAX];
    float sum[WMAX];
    for (int r = 0; r < W; r++) rr[r] = rows[r0 + r < g ? r0 + r : g - 1];
    k->sums_t(rr, n, sum);
    for (int r = r0; r < g && r < r0 + W; r++) out[r] = sum[r - r0];
  }
}

/* The causal softmax of g rows in place (reference_tx.c's softmax_row): row r holds its scaled scores in
 * p[r][0..len[r]), and gets its probabilities there, and +0 from len[r] up to zero_to (T for an att row;
 * a scratch row needs none). Exact tables sum several rows' exps at once (sum_rows_of), so with g > 1 the
 * rows are zero-filled to zero_to first, and zero_to must be the rows' length T. */
static void softmax_rows(const weft_cpu_tx_kernels *k, float *const *p, const int64_t *len, int g, int64_t zero_to) {
  int64_t maxlen = 0;
  for (int r = 0; r < g; r++) {
    const float mx = k->row_max(p[r], len[r]);
    k->exp_sub(p[r], p[r], len[r], mx);
    for (int64_t j = len[r]; j < zero_to; j++) p[r][j] = 0.0f;
    if (len[r] > maxlen) maxlen = len[r];
  }
  float sum[G];
  sum_rows_of(k, p, len, g, min64(zero_to, round_up(maxlen, k->width)), sum);
  for (int r = 0; r < g; r++) k->mul(p[r], p[r], len[r], k->fp32 ? 1.0f / sum[r] : weft_recipf(sum[r]), 1);
}

/* Max and log-sum-exp of g rows of V logits, as reference_tx.c's lse_row: the exps of a block of columns
 * go to a scratch block, then G accumulators add them, each its own row's in ascending order (fp32 tables:
 * each block's vector sum). */
#define LSE_BLOCK 512
static void lse_rows(const weft_cpu_tx_kernels *k, const float *const *z, int g, int64_t V, float *mx, float *ls) {
  float tmp[G][LSE_BLOCK];
  float s[G];
  for (int r = 0; r < g; r++) mx[r] = k->row_max(z[r], V);
  for (int r = 0; r < G; r++) s[r] = 0.0f;
  for (int64_t j0 = 0; j0 < V; j0 += LSE_BLOCK) {
    const int64_t nb = min64(LSE_BLOCK, V - j0);
    for (int r = 0; r < g; r++) k->exp_sub(tmp[r], z[r] + j0, nb, mx[r]);
    if (k->fp32) {
      for (int r = 0; r < g; r++) s[r] += k->sum(tmp[r], nb);
      continue;
    }
    for (int r = g; r < G; r++) memcpy(tmp[r], tmp[g - 1], sizeof(float) * (size_t)nb);
    for (int64_t j = 0; j < nb; j++)
      for (int r = 0; r < G; r++) s[r] = s[r] + tmp[r][j];
  }
  for (int r = 0; r < g; r++) ls[r] = weft_logf(s[r]);
}

static weft_status check_index(const int32_t *idx, int64_t n, int64_t limit) {
  if (!idx) return WEFT_OK;
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < 0 || (int64_t)idx[i] >= limit) return WEFT_ERR_INVALID_ARGUMENT;
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------- embedding */

typedef struct emb_ctx {
  const weft_cpu_tx_kernels *k;
  float *out, *dwte, *dwpe;
  const float *wte, *wpe, *dout;
  const int32_t *tok, *pos;
  int64_t T, C, BT;
} emb_ctx;

static void emb_fwd_part(void *c, int64_t lo, int64_t hi, int tid) {
  const emb_ctx *e = c;
  (void)tid;
  for (int64_t bt = lo; bt < hi; bt++) {
    const int64_t p = e->pos ? e->pos[bt] : bt % e->T;
    e->k->add(e->out + (size_t)bt * (size_t)e->C, e->wte + (size_t)e->tok[bt] * (size_t)e->C,
              e->wpe + (size_t)p * (size_t)e->C, e->C);
  }
}

weft_status weft_cpu_tx_embedding_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *out,
                                          const int32_t *tok, const int32_t *pos, const float *wte, const float *wpe,
                                          int64_t B, int64_t T, int64_t C, int64_t V, int64_t P) {
  if (!out || !tok || !wte || !wpe) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || T < 0 || C < 0 || V < 0 || P < 0) return WEFT_ERR_SHAPE;
  if (check_index(tok, B * T, V) != WEFT_OK || check_index(pos, B * T, P) != WEFT_OK) return WEFT_ERR_INVALID_ARGUMENT;
  if (!pos && T > P) return WEFT_ERR_INVALID_ARGUMENT;
  emb_ctx e = {.k = k ? k : weft_cpu_tx_select(), .out = out, .wte = wte, .wpe = wpe, .tok = tok, .pos = pos,
               .T = T, .C = C};
  par_for(pool, B * T, 1, C, emb_fwd_part, &e);
  return WEFT_OK;
}

/* Channels [lo, hi): every (b, t) in ascending order adds its row's slice into the tables' rows. */
static void emb_bwd_part(void *c, int64_t lo, int64_t hi, int tid) {
  const emb_ctx *e = c;
  (void)tid;
  const int64_t C = e->C, n = hi - lo;
  for (int64_t bt = 0; bt < e->BT; bt++) {
    const float *d = e->dout + (size_t)bt * (size_t)C + lo;
    if (e->dwte) {
      float *w = e->dwte + (size_t)e->tok[bt] * (size_t)C + lo;
      e->k->add(w, w, d, n);
    }
    if (e->dwpe) {
      const int64_t p = e->pos ? e->pos[bt] : bt % e->T;
      float *q = e->dwpe + (size_t)p * (size_t)C + lo;
      e->k->add(q, q, d, n);
    }
  }
}

weft_status weft_cpu_tx_embedding_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dwte, float *dwpe,
                                           const float *dout, const int32_t *tok, const int32_t *pos, int64_t B,
                                           int64_t T, int64_t C, int64_t V, int64_t P) {
  if (!dout || !tok) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || T < 0 || C < 0 || V < 0 || P < 0) return WEFT_ERR_SHAPE;
  if (check_index(tok, B * T, V) != WEFT_OK || check_index(pos, B * T, P) != WEFT_OK) return WEFT_ERR_INVALID_ARGUMENT;
  if (!pos && T > P) return WEFT_ERR_INVALID_ARGUMENT;
  if (!dwte && !dwpe) return WEFT_OK;
  emb_ctx e = {.k = k ? k : weft_cpu_tx_select(), .dwte = dwte, .dwpe = dwpe, .dout = dout, .tok = tok, .pos = pos,
               .T = T, .C = C, .BT = B * T};
  /* One part of channels per thread (whole cache lines): each walks the (b, t) rows once, reading each table
   * row's slice in one stream. A row's work is a few vector adds, so a second thread pays only on large
   * batches: on the 2-core machine one thread took 0.09 ms at B*T*C = 786K elements and two took 0.12-0.36
   * ms; at 3.1M elements two took 0.8 ms against one's 1.2. */
  const int nth = threads_for(pool, C * B * T / 8);
  if (nth <= 1) {
    emb_bwd_part(&e, 0, C, 0);
    return WEFT_OK;
  }
  par_for(pool, C, round_up((C + nth - 1) / nth, 16), (B * T + 7) / 8, emb_bwd_part, &e);
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------- layernorm */

typedef struct ln_ctx {
  const weft_cpu_tx_kernels *k;
  float *y, *mean, *rstd, *dx, *dgamma, *dbeta;
  const float *x, *gamma, *beta, *dy, *cmean, *crstd;
  float *part; /* fp32 backward: per block of rows, its dgamma and dbeta partials */
  int64_t N, C;
  float eps, invC;
} ln_ctx;

static void ln_fwd_part(void *c, int64_t lo, int64_t hi, int tid) {
  const ln_ctx *l = c;
  (void)tid;
  const int64_t C = l->C, W = l->k->width;
  for (int64_t r0 = lo; r0 < hi; r0 += W) {
    const int g = (int)min64(W, hi - r0);
    const float *xr[WMAX];
    float mu[WMAX], v[WMAX];
    for (int r = 0; r < W; r++) xr[r] = l->x + (size_t)(r0 + (r < g ? r : g - 1)) * (size_t)C;
    if (l->k->fp32)
      for (int r = 0; r < g; r++) l->k->ln_row_stats(xr[r], C, l->invC, &mu[r], &v[r]);
    else
      l->k->ln_stats(xr, C, l->invC, mu, v);
    for (int r = 0; r < g; r++) {
      const float var = v[r] * l->invC;
      const float rs = weft_rsqrtf(var + l->eps);
      l->k->ln_out(l->y + (size_t)(r0 + r) * (size_t)C, xr[r], l->gamma, l->beta, C, mu[r], rs);
      if (l->mean) l->mean[r0 + r] = canon(mu[r]);
      if (l->rstd) l->rstd[r0 + r] = canon(rs);
    }
  }
}

void weft_cpu_tx_layernorm_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *y, float *mean,
                                   float *rstd, const float *x, const float *gamma, const float *beta, int64_t N,
                                   int64_t C, float eps) {
  ln_ctx l = {.k = k ? k : weft_cpu_tx_select(), .y = y, .mean = mean, .rstd = rstd, .x = x, .gamma = gamma,
              .beta = beta, .N = N, .C = C, .eps = eps, .invC = weft_recipf((float)C)};
  par_for(pool, N, WMAX, 4 * C, ln_fwd_part, &l);
}

/* Rows [lo, hi) of dx. */
static void ln_bwd_rows(void *c, int64_t lo, int64_t hi, int tid) {
  const ln_ctx *l = c;
  (void)tid;
  const int64_t C = l->C, W = l->k->width;
  for (int64_t r0 = lo; r0 < hi; r0 += W) {
    const int g = (int)min64(W, hi - r0);
    const float *xr[WMAX], *dyr[WMAX];
    float mu[WMAX], rs[WMAX], a[WMAX], b[WMAX];
    for (int r = 0; r < W; r++) {
      const int64_t row = r0 + (r < g ? r : g - 1);
      xr[r] = l->x + (size_t)row * (size_t)C;
      dyr[r] = l->dy + (size_t)row * (size_t)C;
      mu[r] = l->cmean[row];
      rs[r] = l->crstd[row];
    }
    if (l->k->fp32)
      for (int r = 0; r < g; r++) l->k->ln_row_bwd_sums(xr[r], dyr[r], l->gamma, C, mu[r], rs[r], &a[r], &b[r]);
    else
      l->k->ln_bwd_sums(xr, dyr, l->gamma, C, mu, rs, a, b);
    for (int r = 0; r < g; r++)
      l->k->ln_dx(l->dx + (size_t)(r0 + r) * (size_t)C, xr[r], dyr[r], l->gamma, C, mu[r], rs[r], a[r] * l->invC,
                  b[r] * l->invC);
  }
}

/* Channels [lo, hi) of dgamma and dbeta, rows ascending. */
static void ln_bwd_params(void *c, int64_t lo, int64_t hi, int tid) {
  const ln_ctx *l = c;
  (void)tid;
  l->k->ln_dparams(l->dgamma, l->dbeta, l->x, l->dy, l->C, l->N, lo, hi, l->cmean, l->crstd);
}

/* fp32's one pass: rows in blocks of LN_FUSED_ROWS; a block's parameter sums go to its own partials (the
 * block's rows, then dx of those rows while they are still in cache), added up in block order after. The
 * blocks are fixed by N alone, so the bits do not depend on the threads. */
#define LN_FUSED_ROWS 64
static void ln_bwd_fused(void *c, int64_t lo, int64_t hi, int tid) {
  const ln_ctx *l = c;
  const int64_t C = l->C;
  for (int64_t blk = lo; blk < hi; blk++) {
    const int64_t r0 = blk * LN_FUSED_ROWS, r1 = min64(l->N, r0 + LN_FUSED_ROWS);
    float *pg = l->part + (size_t)blk * 2 * (size_t)C, *pb = pg + C;
    memset(pg, 0, sizeof(float) * 2 * (size_t)C);
    /* the parameters first: dx may overwrite dy */
    l->k->ln_dparams(pg, pb, l->x + (size_t)r0 * (size_t)C, l->dy + (size_t)r0 * (size_t)C, C, r1 - r0, 0, C,
                     l->cmean + r0, l->crstd + r0);
    ln_bwd_rows((void *)l, r0, r1, tid);
  }
}

void weft_cpu_tx_layernorm_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dx, float *dgamma,
                                    float *dbeta, const float *dy, const float *x, const float *mean, const float *rstd,
                                    const float *gamma, int64_t N, int64_t C) {
  ln_ctx l = {.k = k ? k : weft_cpu_tx_select(), .dx = dx, .dgamma = dgamma, .dbeta = dbeta, .dy = dy, .x = x,
              .cmean = mean, .crstd = rstd, .gamma = gamma, .N = N, .C = C, .invC = weft_recipf((float)C)};
  const int64_t nblk = (N + LN_FUSED_ROWS - 1) / LN_FUSED_ROWS;
  if (l.k->fp32 && (dgamma || dbeta) && nblk > 1 &&
      (l.part = malloc(sizeof(float) * 2 * (size_t)C * (size_t)nblk)) != NULL) {
    par_for(pool, nblk, 1, LN_FUSED_ROWS * 8 * C, ln_bwd_fused, &l);
    for (int64_t blk = 0; blk < nblk; blk++) {
      const float *pg = l.part + (size_t)blk * 2 * (size_t)C, *pb = pg + C;
      if (dgamma)
        for (int64_t c = 0; c < C; c++) dgamma[c] += pg[c];
      if (dbeta)
        for (int64_t c = 0; c < C; c++) dbeta[c] += pb[c];
    }
    free(l.part);
    return;
  }
  /* The parameters first: they read dy and x, which dx may overwrite (in place). */
  if (dgamma || dbeta) { /* one run of channels per thread: each reads its part of every row, row after row */
    const int nth = threads_for(pool, 3 * N * C);
    par_for(pool, C, round_up((C + nth - 1) / nth, 16), 3 * N, ln_bwd_params, &l);
  }
  par_for(pool, N, WMAX, 6 * C, ln_bwd_rows, &l);
}

/* ------------------------------------------------------------------------------- elementwise ops */

typedef struct ew_ctx {
  const weft_cpu_tx_kernels *k;
  float *out, *m, *v;
  const float *a, *b;
  weft_cpu_tx_adamw_k adam;
} ew_ctx;

static void gelu_fwd_part(void *c, int64_t lo, int64_t hi, int tid) {
  const ew_ctx *e = c;
  (void)tid;
  e->k->gelu_forward(e->out + lo, e->a + lo, hi - lo);
}
static void gelu_bwd_part(void *c, int64_t lo, int64_t hi, int tid) {
  const ew_ctx *e = c;
  (void)tid;
  e->k->gelu_backward(e->out + lo, e->a + lo, e->b + lo, hi - lo);
}
static void adamw_part(void *c, int64_t lo, int64_t hi, int tid) {
  const ew_ctx *e = c;
  (void)tid;
  e->k->adamw(e->out + lo, e->a + lo, e->m + lo, e->v + lo, hi - lo, &e->adam);
}
static void scale_part(void *c, int64_t lo, int64_t hi, int tid) {
  const ew_ctx *e = c;
  (void)tid;
  e->k->mul(e->out + lo, e->out + lo, hi - lo, e->adam.lr, 1);
}

void weft_cpu_tx_gelu_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *y, const float *x, int64_t n) {
  ew_ctx e = {.k = k ? k : weft_cpu_tx_select(), .out = y, .a = x};
  par_for(pool, n, 16, 32, gelu_fwd_part, &e);
}

void weft_cpu_tx_gelu_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dx, const float *x,
                               const float *dy, int64_t n) {
  ew_ctx e = {.k = k ? k : weft_cpu_tx_select(), .out = dx, .a = x, .b = dy};
  par_for(pool, n, 16, 40, gelu_bwd_part, &e);
}

void weft_cpu_tx_adamw(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *param, const float *grad, float *m,
                       float *v, int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                       float bc1, float bc2) {
  ew_ctx e = {.k = k ? k : weft_cpu_tx_select(), .out = param, .a = grad, .m = m, .v = v};
  e.adam.lr = lr, e.adam.beta1 = beta1, e.adam.beta2 = beta2, e.adam.eps = eps, e.adam.weight_decay = weight_decay;
  e.adam.o1 = 1.0f - beta1, e.adam.o2 = 1.0f - beta2;
  e.adam.r1 = weft_recipf(bc1), e.adam.r2 = weft_recipf(bc2);
  par_for(pool, n, 16, 40, adamw_part, &e);
}

/* SUMSQ's partial of one chunk, on its own (a short last chunk, or chunks that do not fill a vector). */
static float sumsq_chunk(const float *x, int64_t len) {
  float p = 0.0f;
  for (int64_t i = 0; i < len; i++) {
    float sq = x[i] * x[i];
    p = p + sq;
  }
  return p;
}

typedef struct ss_ctx {
  const weft_cpu_tx_kernels *k;
  const float *x;
  int64_t n;
  float *part; /* part[c], chunk c's partial */
} ss_ctx;

/* Chunks [lo, hi): whole groups of k->width chunks in the vector lanes, the rest one by one. */
static void sumsq_part(void *c, int64_t lo, int64_t hi, int tid) {
  const ss_ctx *s = c;
  (void)tid;
  const int w = s->k->width;
  int64_t ch = lo;
  for (; ch + w <= hi && (ch + w) * WEFT_SUMSQ_CHUNK <= s->n; ch += w) {
    const float *rows[16];
    for (int r = 0; r < w; r++) rows[r] = s->x + (ch + r) * WEFT_SUMSQ_CHUNK;
    s->k->sumsq_chunks(rows, WEFT_SUMSQ_CHUNK, s->part + ch);
  }
  for (; ch < hi; ch++) {
    const int64_t c0 = ch * WEFT_SUMSQ_CHUNK;
    s->part[ch] = sumsq_chunk(s->x + c0, min64(WEFT_SUMSQ_CHUNK, s->n - c0));
  }
}

float weft_cpu_tx_sumsq(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, const float *x, int64_t n, float acc) {
  if (n <= 0) return canon(acc);
  const int64_t nch = (n + WEFT_SUMSQ_CHUNK - 1) / WEFT_SUMSQ_CHUNK;
  float local[256];
  float *part = nch <= 256 ? local : malloc(sizeof(float) * (size_t)nch);
  if (!part) { /* no room for the partials: the chunks one after another, the same bits */
    for (int64_t c0 = 0; c0 < n; c0 += WEFT_SUMSQ_CHUNK)
      acc = acc + sumsq_chunk(x + c0, min64(WEFT_SUMSQ_CHUNK, n - c0));
    return canon(acc);
  }
  ss_ctx s = {.k = k ? k : weft_cpu_tx_select(), .x = x, .n = n, .part = part};
  par_for(pool, nch, s.k->width, 2 * WEFT_SUMSQ_CHUNK, sumsq_part, &s);
  for (int64_t c = 0; c < nch; c++) acc = acc + part[c];
  if (part != local) free(part);
  return canon(acc);
}

float weft_cpu_tx_grad_clip(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *const *grads,
                            const int64_t *sizes, int64_t ntensors, float max_norm) {
  /* SUMSQ's chunked order over the tensors in order, into one accumulator from +0, as the reference's. */
  float ss = 0.0f;
  for (int64_t t = 0; t < ntensors; t++) ss = weft_cpu_tx_sumsq(k, pool, grads[t], sizes[t], ss);
  const float norm = weft_sqrtf(ss);
  if (norm > max_norm) {
    ew_ctx e = {.k = k ? k : weft_cpu_tx_select()};
    e.adam.lr = max_norm * weft_recipf(norm); /* the scale factor */
    for (int64_t t = 0; t < ntensors; t++) {
      e.out = grads[t];
      par_for(pool, sizes[t], 16, 2, scale_part, &e);
    }
  }
  return canon(norm);
}

/* -------------------------------------------------------------------------------- causal softmax */

typedef struct sm_ctx {
  const weft_cpu_tx_kernels *k;
  float *out;
  const float *a, *b;
  int64_t T;
  float scale;
} sm_ctx;

static void sm_fwd_part(void *c, int64_t lo, int64_t hi, int tid) {
  const sm_ctx *s = c;
  (void)tid;
  const int64_t T = s->T;
  for (int64_t r0 = lo; r0 < hi; r0 += G) {
    const int g = (int)min64(G, hi - r0);
    float *p[G];
    int64_t len[G];
    for (int r = 0; r < g; r++) {
      const int64_t row = r0 + r;
      p[r] = s->out + (size_t)row * (size_t)T;
      len[r] = row % T + 1;
      s->k->mul(p[r], s->a + (size_t)row * (size_t)T, len[r], s->scale, 0);
    }
    softmax_rows(s->k, p, len, g, T);
  }
}

void weft_cpu_tx_causal_softmax_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *probs,
                                        const float *scores, int64_t R, int64_t T, float scale) {
  if (R <= 0 || T <= 0) return;
  sm_ctx s = {.k = k ? k : weft_cpu_tx_select(), .out = probs, .a = scores, .T = T, .scale = scale};
  par_for(pool, R * T, G, 20 * T, sm_fwd_part, &s);
}

static void sm_bwd_part(void *c, int64_t lo, int64_t hi, int tid) {
  const sm_ctx *s = c;
  (void)tid;
  const int64_t T = s->T, W = s->k->width;
  for (int64_t r0 = lo; r0 < hi; r0 += W) {
    const int g = (int)min64(W, hi - r0);
    const float *p[WMAX], *dp[WMAX];
    int64_t len[WMAX], maxlen = 0;
    for (int r = 0; r < W; r++) {
      const int64_t row = r0 + (r < g ? r : g - 1);
      p[r] = s->a + (size_t)row * (size_t)T;
      dp[r] = s->b + (size_t)row * (size_t)T;
      len[r] = row % T + 1;
      if (len[r] > maxlen) maxlen = len[r];
    }
    /* dot = Σ asc p * dp per row over its own length: the rows side by side in the vector lanes (masked past
     * each row's length); fp32 long rows, each row's own vector sum */
    float dot[WMAX];
    if (s->k->fp32 && len[0] >= FP32_ROW_MIN && len[W - 1] >= FP32_ROW_MIN)
      for (int r = 0; r < g; r++) dot[r] = s->k->dot(p[r], dp[r], len[r]);
    else
      s->k->dots_t(p, dp, len, maxlen, dot);
    for (int r = 0; r < g; r++) {
      float *ds = s->out + (size_t)(r0 + r) * (size_t)T;
      s->k->softmax_bwd_row(ds, p[r], dp[r], len[r], dot[r], s->scale);
      for (int64_t j = len[r]; j < T; j++) ds[j] = 0.0f;
    }
  }
}

void weft_cpu_tx_causal_softmax_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dscores,
                                         const float *probs, const float *dprobs, int64_t R, int64_t T, float scale) {
  if (R <= 0 || T <= 0) return;
  sm_ctx s = {.k = k ? k : weft_cpu_tx_select(), .out = dscores, .a = probs, .b = dprobs, .T = T, .scale = scale};
  par_for(pool, R * T, WMAX, 4 * T, sm_bwd_part, &s);
}

/* --------------------------------------------------------------------------------- cross-entropy */

typedef struct xe_ctx {
  const weft_cpu_tx_kernels *k;
  float *out;
  const float *logits, *dloss;
  const int32_t *targets;
  int64_t V;
} xe_ctx;

static void xe_part(void *c, int64_t lo, int64_t hi, int tid) {
  const xe_ctx *x = c;
  (void)tid;
  const int64_t V = x->V;
  for (int64_t r0 = lo; r0 < hi; r0 += G) {
    const int g = (int)min64(G, hi - r0);
    const float *z[G];
    float mx[G], ls[G];
    for (int r = 0; r < g; r++) z[r] = x->logits + (size_t)(r0 + r) * (size_t)V;
    lse_rows(x->k, z, g, V, mx, ls);
    for (int r = 0; r < g; r++) {
      const int64_t n = r0 + r, tgt = x->targets[n];
      if (!x->dloss) {
        float lsm = (z[r][tgt] - mx[r]) - ls[r];
        x->out[n] = canon(-lsm);
      } else {
        x->k->xent_grad(x->out + (size_t)n * (size_t)V, z[r], V, mx[r], ls[r], tgt, x->dloss[n]);
      }
    }
  }
}

weft_status weft_cpu_tx_crossentropy_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *losses,
                                             const float *logits, const int32_t *targets, int64_t N, int64_t V) {
  if (!losses || !logits || !targets) return WEFT_ERR_INVALID_ARGUMENT;
  if (N < 0 || V <= 0) return WEFT_ERR_SHAPE;
  if (check_index(targets, N, V) != WEFT_OK) return WEFT_ERR_INVALID_ARGUMENT;
  xe_ctx x = {.k = k ? k : weft_cpu_tx_select(), .out = losses, .logits = logits, .targets = targets, .V = V};
  par_for(pool, N, G, 24 * V, xe_part, &x);
  return WEFT_OK;
}

weft_status weft_cpu_tx_crossentropy_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dlogits,
                                              const float *logits, const int32_t *targets, const float *dloss,
                                              int64_t N, int64_t V) {
  if (!dlogits || !logits || !targets || !dloss) return WEFT_ERR_INVALID_ARGUMENT;
  if (N < 0 || V <= 0) return WEFT_ERR_SHAPE;
  if (check_index(targets, N, V) != WEFT_OK) return WEFT_ERR_INVALID_ARGUMENT;
  xe_ctx x = {.k = k ? k : weft_cpu_tx_select(), .out = dlogits, .logits = logits, .dloss = dloss, .targets = targets,
              .V = V};
  par_for(pool, N, G, 48 * V, xe_part, &x);
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------- attention */

typedef struct at_ctx {
  const weft_cpu_tx_kernels *k;
  float *out, *preatt, *att, *dqkv;
  const float *qkv, *dout, *catt;
  int64_t B, T, C, NH, hs, ld; /* ld: the transposed panel's row stride */
  int64_t t0, Tq;              /* attention_cached: the first query position, how many (T is Tmax) */
  float scale;
  float *scratch;
  size_t per_thread; /* floats of scratch per thread */
} at_ctx;

/* dst[j * hs + i] = src[j * stride + i]: one head's T rows of hs, contiguous. */
static void pack_panel(float *dst, const float *src, int64_t stride, int64_t T, int64_t hs) {
  for (int64_t j = 0; j < T; j++) memcpy(dst + j * hs, src + j * stride, sizeof(float) * (size_t)hs);
}

static void at_fwd_part(void *c, int64_t lo, int64_t hi, int tid) {
  const at_ctx *a = c;
  const int64_t T = a->T, C = a->C, C3 = 3 * C, hs = a->hs;
  float *kt = a->scratch + (size_t)tid * a->per_thread, *vp = kt + (size_t)hs * (size_t)a->ld;
  for (int64_t u = lo; u < hi; u++) {
    const int64_t b = u / a->NH, h = u % a->NH;
    const float *base = a->qkv + (size_t)(b * T) * (size_t)C3 + (size_t)(h * hs);
    a->k->transpose(kt, a->ld, base + C, C3, T, hs);
    pack_panel(vp, base + 2 * C, C3, T, hs);
    for (int64_t t0 = 0; t0 < T; t0 += G) {
      const int g = (int)min64(G, T - t0);
      float *p[G];
      int64_t len[G];
      const float *q[G];
      for (int r = 0; r < g; r++) {
        const int64_t t = t0 + r;
        p[r] = a->att + (size_t)(u * T + t) * (size_t)T;
        len[r] = t + 1;
        q[r] = base + (size_t)t * (size_t)C3;
      }
      /* the scores, four rows at a time to the longest one's length (the shorter rows' extra columns are
       * overwritten below: with -inf in preatt, +0 in att) */
      int r4 = 0;
      for (; r4 + 4 <= g; r4 += 4) a->k->dots4(p + r4, q + r4, kt, a->ld, len[r4 + 3], hs, a->scale);
      for (; r4 < g; r4++) a->k->dots(p[r4], q[r4], kt, a->ld, len[r4], hs, a->scale);
      for (int r = 0; r < g; r++) {
        const int64_t t = t0 + r;
        if (a->preatt) {
          float *pa = a->preatt + (size_t)(u * T + t) * (size_t)T;
          for (int64_t j = 0; j <= t; j++) pa[j] = canon(p[r][j]);
          for (int64_t j = t + 1; j < T; j++) pa[j] = -__builtin_inff();
        }
      }
      softmax_rows(a->k, p, len, g, T);
      int r = 0;
      for (; r + 4 <= g; r += 4) { /* four rows t at a time: one pass over v for four sums */
        float *o[4];
        for (int m = 0; m < 4; m++) o[m] = a->out + (size_t)(b * T + t0 + r + m) * (size_t)C + (size_t)(h * hs);
        a->k->wsum4e(o, p[r], T, vp, hs, t0 + r + 1, hs);
      }
      for (; r < g; r++) {
        const int64_t t = t0 + r;
        a->k->wsum(a->out + (size_t)(b * T + t) * (size_t)C + (size_t)(h * hs), p[r], 1, vp, hs, t + 1, hs);
      }
    }
  }
}

weft_status weft_cpu_tx_attention_forward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *out, float *preatt,
                                          float *att, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  if (!out || !att || !qkv) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || T < 0 || C < 0 || NH <= 0 || C % NH != 0) return WEFT_ERR_SHAPE;
  if (B == 0 || T == 0) return WEFT_OK;
  at_ctx a = {.k = k ? k : weft_cpu_tx_select(), .out = out, .preatt = preatt, .att = att, .qkv = qkv, .B = B, .T = T,
              .C = C, .NH = NH, .hs = C / NH};
  a.scale = weft_rsqrtf((float)a.hs);
  a.ld = round_up(T, 16) + 16; /* room for the vector tail's reads past column T */
  a.per_thread = (size_t)(a.hs > 0 ? a.hs : 1) * (size_t)a.ld + (size_t)T * (size_t)a.hs;
  const int nth = threads_for(pool, B * NH * T * T * (a.hs + 20));
  a.scratch = malloc(sizeof(float) * a.per_thread * (size_t)weft_cpu_pool_threads(pool));
  if (!a.scratch) return WEFT_ERR_OUT_OF_MEMORY;
  (void)nth;
  par_for(pool, B * NH, 1, T * T * (a.hs + 20), at_fwd_part, &a);
  free(a.scratch);
  return WEFT_OK;
}

/* Decode: units u = (b*NH + h)*Tq + r, row t = t0 + r. A thread's run of units transposes each (b, h)'s keys
 * once (up to the last row it needs), then per row: the dot products, the softmax, the weighted sum of v
 * read in place: the fused forward's kernels, so the fused forward's bits. */
static void at_cached_part(void *c, int64_t lo, int64_t hi, int tid) {
  const at_ctx *a = c;
  const int64_t T = a->T, C = a->C, C3 = 3 * C, hs = a->hs, Tq = a->Tq, t0 = a->t0;
  float *kt = a->scratch + (size_t)tid * a->per_thread, *row = kt + (size_t)hs * (size_t)a->ld;
  int64_t cur = -1;
  for (int64_t u = lo; u < hi; u++) {
    const int64_t bh = u / Tq, r = u % Tq, t = t0 + r, b = bh / a->NH, h = bh % a->NH;
    const float *base = a->qkv + (size_t)(b * T) * (size_t)C3 + (size_t)(h * hs);
    float *p = a->att ? a->att + (size_t)u * (size_t)T : row;
    int64_t len = t + 1;
    const float *q = base + (size_t)t * (size_t)C3;
    if (a->k->fp32) { /* each key's dot product read in place: no transposed panel to build */
      for (int64_t j = 0; j < len; j++) p[j] = a->k->dot(q, base + C + (size_t)j * (size_t)C3, hs) * a->scale;
    } else {
      if (bh != cur) { /* keys 0 .. the last row of this (b, h) in [lo, hi) */
        const int64_t last = min64(hi - 1, (bh + 1) * Tq - 1) % Tq;
        a->k->transpose(kt, a->ld, base + C, C3, t0 + last + 1, hs);
        cur = bh;
      }
      a->k->dots(p, q, kt, a->ld, len, hs, a->scale);
    }
    softmax_rows(a->k, &p, &len, 1, a->att ? T : len);
    a->k->wsum(a->out + (size_t)(b * Tq + r) * (size_t)C + (size_t)(h * hs), p, 1, base + 2 * C, C3, len, hs);
  }
}

weft_status weft_cpu_tx_attention_cached(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *out, float *att,
                                         const float *qkv, int64_t B, int64_t Tmax, int64_t C, int64_t NH, int64_t t0,
                                         int64_t Tq) {
  if (!out || !qkv) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || Tmax < 0 || C < 0 || NH <= 0 || C % NH != 0 || t0 < 0 || Tq < 0 || t0 + Tq > Tmax)
    return WEFT_ERR_SHAPE;
  if (B == 0 || Tq == 0) return WEFT_OK;
  at_ctx a = {.k = k ? k : weft_cpu_tx_select(), .out = out, .att = att, .qkv = qkv, .B = B, .T = Tmax, .C = C,
              .NH = NH, .hs = C / NH, .t0 = t0, .Tq = Tq};
  a.scale = weft_rsqrtf((float)a.hs);
  const int64_t n = t0 + Tq;
  a.ld = round_up(n, 16) + 16; /* room for the vector tail's reads past the last column */
  a.per_thread = (size_t)(a.hs > 0 ? a.hs : 1) * (size_t)a.ld + (size_t)Tmax + 16;
  a.scratch = malloc(sizeof(float) * a.per_thread * (size_t)weft_cpu_pool_threads(pool));
  if (!a.scratch) return WEFT_ERR_OUT_OF_MEMORY;
  par_for(pool, B * NH * Tq, 1, n * (2 * a.hs + 20), at_cached_part, &a);
  free(a.scratch);
  return WEFT_OK;
}

static void at_bwd_part(void *c, int64_t lo, int64_t hi, int tid) {
  const at_ctx *a = c;
  const int64_t T = a->T, C = a->C, C3 = 3 * C, hs = a->hs;
  float *vt = a->scratch + (size_t)tid * a->per_thread, *ds = vt + (size_t)hs * (size_t)a->ld;
  float *qp = ds + (size_t)T * (size_t)T, *kp = qp + (size_t)T * (size_t)hs, *dop = kp + (size_t)T * (size_t)hs;
  for (int64_t u = lo; u < hi; u++) {
    const int64_t b = u / a->NH, h = u % a->NH;
    const float *base = a->qkv + (size_t)(b * T) * (size_t)C3 + (size_t)(h * hs);
    const float *dob = a->dout + (size_t)(b * T) * (size_t)C + (size_t)(h * hs);
    const float *ab = a->catt + (size_t)(u * T) * (size_t)T;
    float *dbase = a->dqkv + (size_t)(b * T) * (size_t)C3 + (size_t)(h * hs);
    a->k->transpose(vt, a->ld, base + 2 * C, C3, T, hs);
    pack_panel(qp, base, C3, T, hs);
    pack_panel(kp, base + C, C3, T, hs);
    pack_panel(dop, dob, C, T, hs);
    /* ds, in groups of `width` rows t: datt = dout . v^T (four rows at a time, to the longest one's length;
     * what a shorter row gets past its length is never read), each row's dot = Σ asc att * datt (the group's
     * rows side by side, or long rows each on its own under fp32), then the softmax backward of the row */
    const int W = a->k->width;
    for (int64_t t0 = 0; t0 < T; t0 += W) {
      const int g = (int)min64(W, T - t0);
      float *dst[WMAX];
      const float *at[WMAX], *dq[WMAX];
      int64_t len[WMAX];
      for (int r = 0; r < W; r++) {
        const int64_t t = t0 + (r < g ? r : g - 1);
        dst[r] = ds + (size_t)t * (size_t)T;
        at[r] = ab + (size_t)t * (size_t)T;
        dq[r] = dop + (size_t)t * (size_t)hs;
        len[r] = t + 1;
      }
      int r4 = 0;
      for (; r4 + 4 <= g; r4 += 4) a->k->dots4(dst + r4, dq + r4, vt, a->ld, len[r4 + 3], hs, 1.0f);
      for (; r4 < g; r4++) a->k->dots(dst[r4], dq[r4], vt, a->ld, len[r4], hs, 1.0f);
      float dot[WMAX];
      if (a->k->fp32 && len[0] >= FP32_ROW_MIN)
        for (int r = 0; r < g; r++) dot[r] = a->k->dot(at[r], dst[r], len[r]);
      else
        a->k->dots_t(at, (const float *const *)dst, len, len[W - 1], dot);
      for (int r = 0; r < g; r++) a->k->softmax_bwd_row(dst[r], at[r], dst[r], len[r], dot[r], a->scale);
    }
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) { /* dq, four rows t at a time */
      float *dq[4];
      for (int m = 0; m < 4; m++) dq[m] = dbase + (size_t)(t + m) * (size_t)C3;
      a->k->wsum4e(dq, ds + (size_t)t * (size_t)T, T, kp, hs, t + 1, hs);
    }
    for (; t < T; t++) a->k->wsum(dbase + (size_t)t * (size_t)C3, ds + (size_t)t * (size_t)T, 1, kp, hs, t + 1, hs);
    /* dk and dv, four columns j at a time (each column's sum over t ascending from j) */
    int64_t j = 0;
    for (; j + 4 <= T; j += 4) {
      float *dk[4], *dv[4];
      for (int m = 0; m < 4; m++) {
        dk[m] = dbase + (size_t)(j + m) * (size_t)C3 + C;
        dv[m] = dk[m] + C;
      }
      a->k->wsum4(dk, ds + (size_t)j * (size_t)T + j, T, qp + (size_t)j * (size_t)hs, hs, T - j, hs);
      a->k->wsum4(dv, ab + (size_t)j * (size_t)T + j, T, dop + (size_t)j * (size_t)hs, hs, T - j, hs);
    }
    for (; j < T; j++) {
      float *dk = dbase + (size_t)j * (size_t)C3 + C;
      a->k->wsum(dk, ds + (size_t)j * (size_t)T + j, T, qp + (size_t)j * (size_t)hs, hs, T - j, hs);
      a->k->wsum(dk + C, ab + (size_t)j * (size_t)T + j, T, dop + (size_t)j * (size_t)hs, hs, T - j, hs);
    }
  }
}

weft_status weft_cpu_tx_attention_backward(const weft_cpu_tx_kernels *k, weft_cpu_pool *pool, float *dqkv,
                                           const float *dout, const float *qkv, const float *att, int64_t B, int64_t T,
                                           int64_t C, int64_t NH) {
  if (!dqkv || !dout || !qkv || !att) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || T < 0 || C < 0 || NH <= 0 || C % NH != 0) return WEFT_ERR_SHAPE;
  if (B == 0 || T == 0) return WEFT_OK;
  at_ctx a = {.k = k ? k : weft_cpu_tx_select(), .dqkv = dqkv, .dout = dout, .qkv = qkv, .catt = att, .B = B, .T = T,
              .C = C, .NH = NH, .hs = C / NH};
  a.scale = weft_rsqrtf((float)a.hs);
  a.ld = round_up(T, 16) + 16;
  a.per_thread = (size_t)a.hs * (size_t)a.ld + (size_t)T * (size_t)T + 3 * (size_t)T * (size_t)a.hs + 16;
  a.scratch = malloc(sizeof(float) * a.per_thread * (size_t)weft_cpu_pool_threads(pool));
  if (!a.scratch) return WEFT_ERR_OUT_OF_MEMORY;
  par_for(pool, B * NH, 1, T * T * (3 * a.hs + 10), at_bwd_part, &a);
  free(a.scratch);
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------ the lane's dispatch */

#define OF(i) ((float *)op->out[i])
#define IF(i) ((const float *)op->in[i])
#define II(i) ((const int32_t *)op->in[i])

weft_status weft_cpu_tx_run(weft_cpu_pool *pool, const weft_op *op) {
  const int64_t *ip = op->iparam;
  const float *fp = op->fparam;
  const weft_cpu_tx_kernels *k = weft_cpu_tx_select_for(op->contract);
  switch (op->kind) {
  case WEFT_OP_EMBEDDING:
    return weft_cpu_tx_embedding_forward(k, pool, OF(0), II(0), II(1), IF(2), IF(3), ip[0], ip[1], ip[2], ip[3], ip[4]);
  case WEFT_OP_EMBEDDING_BACKWARD:
    return weft_cpu_tx_embedding_backward(k, pool, OF(0), OF(1), IF(0), II(1), II(2), ip[0], ip[1], ip[2], ip[3],
                                          ip[4]);
  case WEFT_OP_LAYERNORM:
    weft_cpu_tx_layernorm_forward(k, pool, OF(0), OF(1), OF(2), IF(0), IF(1), IF(2), ip[0], ip[1], fp[0]);
    return WEFT_OK;
  case WEFT_OP_LAYERNORM_BACKWARD:
    weft_cpu_tx_layernorm_backward(k, pool, OF(0), OF(1), OF(2), IF(0), IF(1), IF(2), IF(3), IF(4), ip[0], ip[1]);
    return WEFT_OK;
  case WEFT_OP_GELU:
    weft_cpu_tx_gelu_forward(k, pool, OF(0), IF(0), ip[0]);
    return WEFT_OK;
  case WEFT_OP_GELU_BACKWARD:
    weft_cpu_tx_gelu_backward(k, pool, OF(0), IF(0), IF(1), ip[0]);
    return WEFT_OK;
  case WEFT_OP_ATTENTION: /* out 0 = out, 1 = att, 2 = preatt (may be NULL) */
    return weft_cpu_tx_attention_forward(k, pool, OF(0), OF(2), OF(1), IF(0), ip[0], ip[1], ip[2], ip[3]);
  case WEFT_OP_ATTENTION_CACHED: /* out 0 = out, 1 = att (may be NULL) */
    return weft_cpu_tx_attention_cached(k, pool, OF(0), OF(1), IF(0), ip[0], ip[1], ip[2], ip[3], ip[4], ip[5]);
  case WEFT_OP_ATTENTION_BACKWARD:
    return weft_cpu_tx_attention_backward(k, pool, OF(0), IF(0), IF(1), IF(2), ip[0], ip[1], ip[2], ip[3]);
  case WEFT_OP_CAUSAL_SOFTMAX:
    weft_cpu_tx_causal_softmax_forward(k, pool, OF(0), IF(0), ip[0], ip[1], fp[0]);
    return WEFT_OK;
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD:
    weft_cpu_tx_causal_softmax_backward(k, pool, OF(0), IF(0), IF(1), ip[0], ip[1], fp[0]);
    return WEFT_OK;
  case WEFT_OP_CROSSENTROPY:
    return weft_cpu_tx_crossentropy_forward(k, pool, OF(0), IF(0), II(1), ip[0], ip[1]);
  case WEFT_OP_CROSSENTROPY_BACKWARD:
    return weft_cpu_tx_crossentropy_backward(k, pool, OF(0), IF(0), II(1), IF(2), ip[0], ip[1]);
  case WEFT_OP_ADAMW: /* fparam 0-6: lr, beta1, beta2, eps, weight decay, bc1, bc2 */
    weft_cpu_tx_adamw(k, pool, OF(0), IF(0), OF(1), OF(2), ip[0], fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], fp[6]);
    return WEFT_OK;
  case WEFT_OP_SUMSQ: /* acc (rw) += the chunk partials in order */
    OF(0)[0] = weft_cpu_tx_sumsq(k, pool, IF(0), ip[0], OF(0)[0]);
    return WEFT_OK;
  default:
    return WEFT_ERR_UNSUPPORTED; /* PERMUTE, COPY_SLICE: the op table's host kernels */
  }
}
