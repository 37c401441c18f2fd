/* gemm.c - the CPU lane's matmul framework, BLIS-style: the loops over nc/kc/mc blocks, the packing of A
 * and B panels (which absorbs transposition and zero-pads edges), edge tiles, and the split of the work over
 * the lane's threads. The arithmetic itself is the microkernels' (kernels/), chosen per instruction set.
 *
 * Exactness: every output element is summed by one microkernel call per kc block, in ascending k, each
 * block continuing from the partial sum left in C by the block before. Which thread computes a tile never
 * changes the order within it, so the threading and blocking choices below never change the result bits. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Below this many multiply-adds a matmul runs as plain loops on the caller's thread: packing would cost
 * more than it saves. */
#define TINY_WORK (16 * 16 * 16)
/* Each extra thread must get at least this many multiply-adds, or waking it costs more than it saves. */
#define MIN_WORK_PER_THREAD ((int64_t)48 * 48 * 48)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/* One matmul of the batch, c = op(a) . op(b), as row-major host arrays. */
typedef struct mm_view {
  const float *a, *b;
  float *c;
  int64_t m, n, k;
  int ta, tb;
} mm_view;

static mm_view view_of(const weft_op *op, int64_t p) {
  mm_view v;
  v.m = op->m, v.n = op->n, v.k = op->k;
  v.ta = op->trans_a, v.tb = op->trans_b;
  v.a = (const float *)op->in[0] + (size_t)p * (size_t)(v.m * v.k);
  v.b = (const float *)op->in[1] + (op->b_batched ? (size_t)p * (size_t)(v.k * v.n) : 0);
  v.c = (float *)op->out[0] + (size_t)p * (size_t)(v.m * v.n);
  return v;
}

/* ------------------------------------------------------------------------------------------ tiny ops */

/* Row by row, k ascending, the j loop innermost so it vectorises: every c[i,j] still sees acc = acc + a*b
 * in ascending k from +0, the canonical order. */
static void matmul_tiny(const mm_view *v) {
  const int64_t m = v->m, n = v->n, k = v->k;
  for (int64_t i = 0; i < m; i++) {
    float *restrict crow = v->c + i * n;
    for (int64_t j = 0; j < n; j++) crow[j] = 0.0f;
    for (int64_t q = 0; q < k; q++) {
      const float av = v->ta ? v->a[q * m + i] : v->a[i * k + q];
      if (!v->tb) {
        const float *restrict brow = v->b + q * n;
        for (int64_t j = 0; j < n; j++) {
          float prod = av * brow[j];
          crow[j] = crow[j] + prod;
        }
      } else {
        for (int64_t j = 0; j < n; j++) {
          float prod = av * v->b[j * k + q];
          crow[j] = crow[j] + prod;
        }
      }
    }
  }
}

/* ----------------------------------------------------------------------------------------- packing */

/* Packs rows [i0, i0+mc) and depth [p0, p0+kc) of op(A) into mr-row micro-panels: for each k, mr values.
 * Rows past the matrix are zeros (their results are computed and thrown away). */
static void pack_a(const mm_view *v, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr, float *restrict dst) {
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int64_t rows = min64(mr, mc - ir);
    if (v->ta) { /* a stored [k, m]: each k's mr values are contiguous */
      for (int64_t q = 0; q < kc; q++) {
        const float *src = v->a + (p0 + q) * v->m + i0 + ir;
        int64_t r = 0;
        for (; r < rows; r++) dst[q * mr + r] = src[r];
        for (; r < mr; r++) dst[q * mr + r] = 0.0f;
      }
    } else { /* a stored [m, k]: gather one value from each of mr rows per k */
      const float *src[WEFT_CPU_MR_MAX];
      for (int64_t r = 0; r < rows; r++) src[r] = v->a + (i0 + ir + r) * v->k + p0;
      for (int64_t q = 0; q < kc; q++) {
        int64_t r = 0;
        for (; r < rows; r++) dst[q * mr + r] = src[r][q];
        for (; r < mr; r++) dst[q * mr + r] = 0.0f;
      }
    }
    dst += (size_t)mr * (size_t)kc;
  }
}

/* Packs nr-column micro-panels [jp0, jp1) of columns [j0, j0+nc), depth [p0, p0+kc) of op(B): for each k, nr
 * values. Columns past the matrix are zeros. dst is the start of the whole block. */
static void pack_b(const mm_view *v, int64_t j0, int64_t nc, int64_t p0, int64_t kc, int nr, int64_t jp0,
                   int64_t jp1, float *restrict dst) {
  for (int64_t jp = jp0; jp < jp1; jp++) {
    const int64_t jr = jp * nr, cols = min64(nr, nc - jr);
    float *restrict d = dst + (size_t)jp * (size_t)nr * (size_t)kc;
    if (!v->tb) { /* b stored [k, n]: each k's nr values are contiguous */
      for (int64_t q = 0; q < kc; q++) {
        const float *src = v->b + (p0 + q) * v->n + j0 + jr;
        if (cols == nr) {
          memcpy(d + q * nr, src, sizeof(float) * (size_t)nr);
        } else {
          int64_t c = 0;
          for (; c < cols; c++) d[q * nr + c] = src[c];
          for (; c < nr; c++) d[q * nr + c] = 0.0f;
        }
      }
    } else { /* b stored [n, k]: gather one value from each of nr rows per k */
      const float *src[WEFT_CPU_NR_MAX];
      for (int64_t c = 0; c < cols; c++) src[c] = v->b + (j0 + jr + c) * v->k + p0;
      for (int64_t q = 0; q < kc; q++) {
        int64_t c = 0;
        for (; c < cols; c++) d[q * nr + c] = src[c][q];
        for (; c < nr; c++) d[q * nr + c] = 0.0f;
      }
    }
  }
}

/* ----------------------------------------------------------------------------------- macro kernel */

/* Multiplies a packed A block (mc x kc) by packed B micro-panels [jp0, jp1) into C (row stride ldc). Whole
 * tiles go straight to the microkernel; edge tiles go through a full-size tile buffer. */
static void macro_kernel(const weft_cpu_kernels *kr, weft_cpu_ukr_fn ukr, const float *ap, const float *bp,
                         int64_t mc, int64_t nc, int64_t kc, int64_t jp0, int64_t jp1, float *c, int64_t ldc,
                         int first) {
  const int mr = kr->mr, nr = kr->nr;
  _Alignas(64) float tile[WEFT_CPU_MR_MAX * WEFT_CPU_NR_MAX];
  for (int64_t jp = jp0; jp < jp1; jp++) {
    const int64_t jr = jp * nr, cols = min64(nr, nc - jr);
    const float *b = bp + (size_t)jp * (size_t)nr * (size_t)kc;
    for (int64_t ir = 0; ir < mc; ir += mr) {
      const int64_t rows = min64(mr, mc - ir);
      const float *a = ap + (size_t)ir * (size_t)kc;
      float *ct = c + ir * ldc + jr;
      if (rows == mr && cols == nr) {
        ukr(kc, a, b, ct, ldc, first);
        continue;
      }
      if (!first)
        for (int64_t r = 0; r < rows; r++) memcpy(tile + r * nr, ct + r * ldc, sizeof(float) * (size_t)cols);
      ukr(kc, a, b, tile, nr, first);
      for (int64_t r = 0; r < rows; r++) memcpy(ct + r * ldc, tile + r * nr, sizeof(float) * (size_t)cols);
    }
  }
}

/* ------------------------------------------------------------------------------------ the job */

typedef struct gemm_job {
  const weft_op *op;
  const weft_cpu_kernels *kr;
  weft_cpu_ukr_fn ukr;
  weft_cpu_pool *pool;
  weft_cpu_scratch *scratch;
  int64_t kc, nc;       /* block sizes clamped to the problem */
  atomic_int_fast64_t next_entry; /* batch split: the next batch entry to take */
  atomic_int_fast64_t units[2];   /* shared split: the next unit of the block pair, by block parity */
} gemm_job;

/* Threads 0 .. nthreads-1 compute batch entries [p0, p1) together: for each (nc, kc) block pair they pack B
 * into a shared, double-buffered block (each thread a share of its micro-panels), meet at a barrier, then
 * take units (an mc-row block by a run of micro-panels) from a shared counter, each packing its own A.
 * Double buffering B leaves one barrier per block pair: a thread packing block pair t+1 has passed the
 * barrier of t, which every thread reaches only after it finished computing t-1, the last user of that
 * buffer. With nthreads == 1 the same code is the plain single-threaded blocked loop. */
static void gemm_entries(gemm_job *job, int tid, int nthreads, int64_t p0, int64_t p1, atomic_int_fast64_t *units,
                         float *abuf, float *bbuf0, float *bbuf1) {
  const weft_cpu_kernels *kr = job->kr;
  const int64_t mr = kr->mr, nr = kr->nr, mcb = kr->mc, kcb = job->kc, ncb = job->nc;
  int64_t iter = 0;
  for (int64_t p = p0; p < p1; p++) {
    const mm_view v = view_of(job->op, p);
    const int64_t n_ic = (v.m + mcb - 1) / mcb;
    for (int64_t jc = 0; jc < v.n; jc += ncb) {
      const int64_t nc = min64(ncb, v.n - jc), npanels = (nc + nr - 1) / nr;
      /* Enough units that a thread slowed by the machine's other work does not hold the others up. */
      int64_t nchunks = (4 * nthreads + n_ic - 1) / n_ic;
      if (nchunks > npanels) nchunks = npanels;
      if (nchunks < 1) nchunks = 1;
      const int64_t nunits = n_ic * nchunks;
      for (int64_t pc = 0; pc < v.k; pc += kcb, iter++) {
        const int64_t kc = min64(kcb, v.k - pc);
        float *bbuf = (iter & 1) ? bbuf1 : bbuf0;
        pack_b(&v, jc, nc, pc, kc, (int)nr, npanels * tid / nthreads, npanels * (tid + 1) / nthreads, bbuf);
        weft_cpu_pool_barrier(job->pool, nthreads);
        /* The counter of the next block pair was last used by block pair iter-1, which every thread has
         * left (they are all past this barrier): thread 0 may reset it for iter+1. */
        if (tid == 0) atomic_store_explicit(&units[(iter + 1) & 1], 0, memory_order_relaxed);
        int64_t packed_ic = -1;
        for (;;) {
          const int64_t u = atomic_fetch_add_explicit(&units[iter & 1], 1, memory_order_relaxed);
          if (u >= nunits) break;
          const int64_t ic = u / nchunks, ch = u % nchunks;
          const int64_t i0 = ic * mcb, mc = min64(mcb, v.m - i0);
          if (ic != packed_ic) {
            pack_a(&v, i0, mc, pc, kc, (int)mr, abuf);
            packed_ic = ic;
          }
          macro_kernel(kr, job->ukr, abuf, bbuf, mc, nc, kc, npanels * ch / nchunks, npanels * (ch + 1) / nchunks,
                       v.c + i0 * v.n + jc, v.n, pc == 0);
        }
      }
    }
  }
}

/* Shared split: every thread works on every batch entry. */
static void task_shared(void *ctx, int tid, int nthreads) {
  gemm_job *job = ctx;
  gemm_entries(job, tid, nthreads, 0, job->op->batch, job->units, job->scratch[tid].a, job->scratch[0].b,
               job->scratch[0].b + job->kc * job->nc);
}

/* Batch split: each thread takes whole batch entries and runs them alone with its own B block. */
static void task_batch(void *ctx, int tid, int nthreads) {
  (void)nthreads;
  gemm_job *job = ctx;
  atomic_int_fast64_t units[2];
  for (;;) {
    const int64_t p = atomic_fetch_add_explicit(&job->next_entry, 1, memory_order_relaxed);
    if (p >= job->op->batch) break;
    atomic_init(&units[0], 0);
    atomic_init(&units[1], 0);
    gemm_entries(job, 0, 1, p, p + 1, units, job->scratch[tid].a, job->scratch[tid].b, job->scratch[tid].b);
  }
}

/* Grows thread t's scratch to at least a_need and b_need floats (64-byte aligned). */
static int scratch_reserve(weft_cpu_scratch *s, size_t a_need, size_t b_need) {
  if (s->a_cap < a_need) {
    free(s->a);
    s->a = aligned_alloc(64, round_up((int64_t)a_need * 4, 64));
    s->a_cap = s->a ? a_need : 0;
    if (!s->a) return 0;
  }
  if (s->b_cap < b_need) {
    free(s->b);
    s->b = aligned_alloc(64, round_up((int64_t)b_need * 4, 64));
    s->b_cap = s->b ? b_need : 0;
    if (!s->b) return 0;
  }
  return 1;
}

void weft_cpu_scratch_free(weft_cpu_lane *lane) {
  if (!lane->scratch) return;
  for (int t = 0; t < lane->threads; t++) free(lane->scratch[t].a), free(lane->scratch[t].b);
  free(lane->scratch);
  lane->scratch = NULL;
}

weft_status weft_cpu_matmul(weft_cpu_lane *lane, const weft_op *op) {
  const int64_t m = op->m, n = op->n, k = op->k, batch = op->batch;
  if (batch == 0 || m == 0 || n == 0) return WEFT_OK;
  if (k == 0) { /* no terms: every sum is +0 */
    memset(op->out[0], 0, sizeof(float) * (size_t)(batch * m * n));
    return WEFT_OK;
  }
  const int64_t per_entry = m * n * k;
  if (per_entry <= TINY_WORK) {
    for (int64_t p = 0; p < batch; p++) {
      const mm_view v = view_of(op, p);
      matmul_tiny(&v);
    }
    return WEFT_OK;
  }

  gemm_job job;
  memset(&job, 0, sizeof job);
  job.op = op;
  job.kr = lane->kernels;
  job.ukr = op->contract == WEFT_CONTRACT_FP32 ? job.kr->fp32 : job.kr->exact;
  job.pool = lane->pool;
  job.kc = min64(job.kr->kc, k);
  job.nc = min64(job.kr->nc, round_up(n, job.kr->nr));
  atomic_init(&job.next_entry, 0);
  atomic_init(&job.units[0], 0);
  atomic_init(&job.units[1], 0);

  /* Threads: as many as the work feeds, the caller included. */
  int64_t total = per_entry * batch; /* fits: each tensor holds at most 2^40 elements */
  int64_t fed = total / MIN_WORK_PER_THREAD;
  int nthreads = weft_cpu_pool_threads(lane->pool);
  if (nthreads > lane->threads) nthreads = lane->threads;
  if (fed < nthreads) nthreads = fed < 1 ? 1 : (int)fed;
  /* Whole batch entries per thread when they divide evenly enough; else all threads on each entry. */
  const int by_batch = nthreads > 1 && batch >= nthreads &&
                       (batch % nthreads == 0 || batch >= 4 * nthreads || per_entry < 2 * MIN_WORK_PER_THREAD);

  if (!lane->scratch) {
    lane->scratch = calloc((size_t)lane->threads, sizeof *lane->scratch);
    if (!lane->scratch) return weft_lane_report(lane->host, WEFT_ERR_OUT_OF_MEMORY, "cpu: out of host memory for matmul scratch");
  }
  const size_t a_need = (size_t)min64(job.kr->mc, round_up(m, job.kr->mr)) * (size_t)job.kc;
  const size_t b_block = (size_t)job.kc * (size_t)job.nc;
  for (int t = 0; t < nthreads; t++) {
    size_t b_need = by_batch ? b_block : (t == 0 ? (nthreads > 1 ? 2 * b_block : b_block) : 0);
    if (!scratch_reserve(&lane->scratch[t], a_need, b_need))
      return weft_lane_report(lane->host, WEFT_ERR_OUT_OF_MEMORY,
                              "cpu: out of host memory for matmul scratch (%zu floats per thread)", a_need + b_need);
  }
  job.scratch = lane->scratch;
  if (nthreads == 1) {
    gemm_entries(&job, 0, 1, 0, batch, job.units, job.scratch[0].a, job.scratch[0].b, job.scratch[0].b);
  } else {
    weft_cpu_pool_run(lane->pool, nthreads, by_batch ? task_batch : task_shared, &job);
  }
  return WEFT_OK;
}
