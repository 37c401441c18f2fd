/* gemm.c - the CPU lane's matmul framework, BLIS-style: the loops over nc/kc/mc blocks, the packing of A
 * and B panels (which absorbs transposition and zero-pads edges), edge tiles, and the split of the work over
 * the lane's threads. The arithmetic itself is the microkernels' (kernels/), chosen per instruction set.
 *
 * Exactness: every output element is summed by one microkernel call per kc block, in ascending k, each
 * block continuing from the partial sum left in C by the block before. Which thread computes a tile never
 * changes the order within it, so the threading and blocking choices below never change the result bits.
 * The exact microkernels store every NaN as the canonical NaN (0x7fc00000) at each store of a C tile; a NaN
 * partial sum stays NaN through the later k blocks, so the result is canonical whatever the blocking.
 * MATMUL_ACC is the same loops with the first kc block continuing from C's value too (c += a.b).
 *
 * A matmul of at most SKINNY_M rows (a decode step's matrix-vector products) skips all of that: packing B
 * would read and write the whole of it for a handful of output rows, so B is read where it lies, once. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/reference.h"
#include "cpu.h"
#include "tx.h"

/* Up to this many multiply-adds a matmul runs as plain loops: packing costs more than it saves only for
 * the very smallest (measured: the packed path wins from about 6x6x6 up). */
#define TINY_WORK 128
/* Each extra thread must get at least this many multiply-adds, or waking it costs more than it saves.
 * Measured on 2 cores: a second thread gained nothing on a 64^3 matmul and 27% on 80^3; with this value
 * two threads start at about 70^3. */
#define MIN_WORK_PER_THREAD ((int64_t)56 * 56 * 56)
/* The shared split's threads wait on one another (a packed panel before its units, computed units before
 * the panel buffer is reused), so one thread the OS preempts stalls them all. A short job on a large pool
 * leaves two cores free for whatever else the host runs: on the H200 machine (16 cores), a 0.13 ms
 * [8,128,128] matmul ran at 0.45-0.6 ms in most runs right after GPU work when all 16 threads took part
 * (the GPU lane's host threads and the driver's wanted a core), and at 0.13 ms in every run with 14.
 * Longer jobs keep every thread: a stall costs them less than a sixth of the pool would. */
#define SHORT_SHARED_WORK ((int64_t)1 << 27)
#define SHORT_SHARED_MIN_POOL 8

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/* One matmul of the batch, c = op(a) . op(b), as row-major host arrays. */
typedef struct mm_view {
  const float *a, *b;
  float *c;
  int64_t m, n, k;
  int ta, tb;
  int acc; /* MATMUL_ACC: every sum starts from C's value, not +0 */
} mm_view;

static mm_view view_of(const weft_op *op, int64_t p) {
  mm_view v;
  v.m = op->m, v.n = op->n, v.k = op->k;
  v.ta = op->trans_a, v.tb = op->trans_b;
  v.acc = op->kind == WEFT_OP_MATMUL_ACC;
  v.a = (const float *)op->in[0] + (size_t)p * (size_t)(v.m * v.k);
  v.b = (const float *)op->in[1] + (op->b_batched ? (size_t)p * (size_t)(v.k * v.n) : 0);
  v.c = (float *)op->out[0] + (size_t)p * (size_t)(v.m * v.n);
  return v;
}

/* ------------------------------------------------------------------------------------------ tiny ops */

/* Row by row, k ascending, the j loop innermost so it vectorises: every c[i,j] still sees acc = acc + a*b
 * in ascending k from +0, the canonical order. A NaN result is stored as the canonical NaN. */
static void matmul_tiny(const mm_view *v) {
  const int64_t m = v->m, n = v->n, k = v->k;
  for (int64_t i = 0; i < m; i++) {
    float *restrict crow = v->c + i * n;
    if (!v->acc)
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
    for (int64_t j = 0; j < n; j++) crow[j] = weft_canon_nan(crow[j]);
  }
}

/* ----------------------------------------------------------------------------------------- packing */

/* The two moves packing is made of, for a panel w values wide and kc deep (dst[q*w + r]):
 *   gather: value r comes from its own row src[r], at src[r][q] (a strided operand: A, or B transposed);
 *   copy:   the w values are contiguous in memory at src + q * ld (A transposed, or B).
 * Lanes past `have` are zeros. The full-width cases of the kernels' widths are compiled with w constant,
 * so the compiler unrolls them; everything else (edges) takes the generic loop. */
#define DEFINE_FULL_MOVES(W)                                                                                       \
  static void gather_##W(const float *const *src, int64_t kc, float *restrict dst) {                              \
    for (int64_t q = 0; q < kc; q++)                                                                               \
      for (int r = 0; r < W; r++) dst[q * W + r] = src[r][q];                                                      \
  }                                                                                                                \
  static void copy_##W(const float *src, int64_t ld, int64_t kc, float *restrict dst) {                           \
    for (int64_t q = 0; q < kc; q++)                                                                               \
      for (int r = 0; r < W; r++) dst[q * W + r] = src[q * ld + r];                                                \
  }
DEFINE_FULL_MOVES(4)
DEFINE_FULL_MOVES(6)
DEFINE_FULL_MOVES(12)
DEFINE_FULL_MOVES(16)
DEFINE_FULL_MOVES(32)

static void gather_panel(const float *const *src, int64_t have, int64_t w, int64_t kc, float *restrict dst) {
  if (have == w) {
    switch (w) {
    case 4: gather_4(src, kc, dst); return;
    case 6: gather_6(src, kc, dst); return;
    case 12: gather_12(src, kc, dst); return;
    case 16: gather_16(src, kc, dst); return;
    case 32: gather_32(src, kc, dst); return;
    default: break;
    }
  }
  for (int64_t q = 0; q < kc; q++) {
    int64_t r = 0;
    for (; r < have; r++) dst[q * w + r] = src[r][q];
    for (; r < w; r++) dst[q * w + r] = 0.0f;
  }
}

static void copy_panel(const float *src, int64_t ld, int64_t have, int64_t w, int64_t kc, float *restrict dst) {
  if (have == w) {
    switch (w) {
    case 4: copy_4(src, ld, kc, dst); return;
    case 6: copy_6(src, ld, kc, dst); return;
    case 12: copy_12(src, ld, kc, dst); return;
    case 16: copy_16(src, ld, kc, dst); return;
    case 32: copy_32(src, ld, kc, dst); return;
    default: break;
    }
  }
  for (int64_t q = 0; q < kc; q++) {
    int64_t r = 0;
    for (; r < have; r++) dst[q * w + r] = src[q * ld + r];
    for (; r < w; r++) dst[q * w + r] = 0.0f;
  }
}

/* Packs rows [i0, i0+mc) and depth [p0, p0+kc) of op(A) into mr-row micro-panels: for each k, mr values.
 * Rows past the matrix are zeros (their results are computed and thrown away). */
static void pack_a(const mm_view *v, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr, float *restrict dst) {
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int64_t rows = min64(mr, mc - ir);
    if (v->ta) { /* a stored [k, m] */
      copy_panel(v->a + p0 * v->m + i0 + ir, v->m, rows, mr, kc, dst);
    } else { /* a stored [m, k] */
      const float *src[WEFT_CPU_MR_MAX];
      for (int64_t r = 0; r < rows; r++) src[r] = v->a + (i0 + ir + r) * v->k + p0;
      gather_panel(src, rows, mr, kc, dst);
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
    if (!v->tb) { /* b stored [k, n] */
      copy_panel(v->b + p0 * v->n + j0 + jr, v->n, cols, nr, kc, d);
    } else { /* b stored [n, k] */
      const float *src[WEFT_CPU_NR_MAX];
      for (int64_t c = 0; c < cols; c++) src[c] = v->b + (j0 + jr + c) * v->k + p0;
      gather_panel(src, cols, nr, kc, d);
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
      /* The microkernel reads its C tile before its first add: start fetching the next tile's rows now,
       * so they arrive while this tile computes (kc steps of several cycles each). */
      const int64_t next_ir = ir + mr < mc ? ir + mr : 0, next_jr = ir + mr < mc ? jr : jr + nr;
      if (next_jr < nc)
        for (int64_t r = 0; r < mr && next_ir + r < mc; r++) {
          const float *row = c + (next_ir + r) * ldc + next_jr;
          __builtin_prefetch(row, 1);
          __builtin_prefetch(row + min64(nr, nc - next_jr) - 1, 1);
        }
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

/* ---------------------------------------------------------------------------------- skinny ops */

/* Rows of op(A) up to which B is read in place (tx_kern.inc's gemv kernels) instead of packed. */
#define SKINNY_M 4
/* Columns of C per unit of the skinny split: whole cache lines, and whole vectors of every width. */
#define SKINNY_ALIGN 64

typedef struct skinny_job {
  const weft_op *op;
  const weft_cpu_tx_kernels *k;
  const float *a;         /* op(A) of every entry, rows contiguous: entry p's row i at a + (p*m + i)*k */
  int64_t per, per_entry; /* columns per unit, units per entry */
  int64_t nunits;
  atomic_llong next, done;
} skinny_job;

static void skinny_task(void *ctx, int tid) {
  skinny_job *job = ctx;
  const weft_op *op = job->op;
  const int64_t m = op->m, n = op->n, k = op->k;
  (void)tid;
  for (;;) {
    const int64_t u = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
    if (u >= job->nunits) break;
    const int64_t p = u / job->per_entry, j0 = (u % job->per_entry) * job->per, j1 = min64(n, j0 + job->per);
    const float *a = job->a + (size_t)(p * m) * (size_t)k;
    const float *b = (const float *)op->in[1] + (op->b_batched ? (size_t)p * (size_t)(k * n) : 0);
    float *c = (float *)op->out[0] + (size_t)(p * m) * (size_t)n + j0;
    const int acc = op->kind == WEFT_OP_MATMUL_ACC;
    if (op->trans_b) job->k->gemv_nt(c, n, a, m, b + (size_t)j0 * (size_t)k, k, j1 - j0, k, acc);
    else job->k->gemv_nn(c, n, a, m, b + j0, n, j1 - j0, k, acc);
    atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
  }
  if (tid == 0) weft_cpu_wait_until(&job->done, job->nunits);
}

/* A matmul of m <= SKINNY_M rows: the columns split over the threads. A transposed A ([k, m]) is first
 * copied into rows (m*k floats per entry, small beside B). */
static weft_status matmul_skinny(weft_cpu_lane *lane, const weft_op *op) {
  const int64_t m = op->m, n = op->n, k = op->k, batch = op->batch;
  skinny_job job;
  job.op = op;
  job.k = weft_cpu_tx_select_for(op->contract);
  float *apack = NULL;
  if (op->trans_a) {
    apack = malloc(sizeof(float) * (size_t)(batch * m * k));
    if (!apack) return weft_lane_report(lane->host, WEFT_ERR_OUT_OF_MEMORY, "cpu: out of host memory for a matmul");
    const float *a = op->in[0];
    for (int64_t p = 0; p < batch; p++)
      for (int64_t i = 0; i < m; i++)
        for (int64_t q = 0; q < k; q++) apack[(p * m + i) * k + q] = a[p * m * k + q * m + i];
  }
  job.a = apack ? apack : (const float *)op->in[0];
  int nthreads = weft_cpu_pool_threads(lane->pool);
  if (nthreads > lane->threads) nthreads = lane->threads;
  const int64_t fed = batch * m * n * k / MIN_WORK_PER_THREAD;
  if (fed < nthreads) nthreads = fed < 1 ? 1 : (int)fed;
  /* A few units per thread, so a thread slowed by the machine's other work does not hold the op up. */
  job.per = round_up((n + 4 * nthreads - 1) / (4 * nthreads), SKINNY_ALIGN);
  job.per_entry = (n + job.per - 1) / job.per;
  job.nunits = batch * job.per_entry;
  atomic_init(&job.next, 0);
  atomic_init(&job.done, 0);
  weft_cpu_pool_run(lane->pool, nthreads, skinny_task, &job);
  free(apack);
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------ the job */

typedef struct gemm_job {
  const weft_op *op;
  const weft_cpu_kernels *kr;
  weft_cpu_ukr_fn ukr;
  weft_cpu_scratch *scratch; /* per thread: A blocks; B blocks for the batch split */
  int nthreads;              /* the most threads that may join, for the grain of the work */
  int64_t mc, kc, nc;        /* block sizes fitted to the problem */
  /* Batch split: whole entries per thread. */
  atomic_llong next_entry, entries_done;
  /* Shared split (see task_shared). Block pair t is batch entry, nc block and kc block, kc fastest. */
  int64_t njc, npc, iters, n_ic, total_items;
  float *bbuf[2];
  int64_t *base;           /* [iters + 1]: the first item of each block pair */
  atomic_llong *packed;    /* [iters]: B chunks packed */
  atomic_llong *computed;  /* [iters]: units computed */
  atomic_llong *unit_iter; /* [units]: 1 + the last block pair in which this unit was computed */
  atomic_llong next_item, items_done;
} gemm_job;

/* The plain single-threaded blocked loops over one matmul. */
static void gemm_single(const gemm_job *job, const mm_view *v, float *abuf, float *bbuf) {
  const weft_cpu_kernels *kr = job->kr;
  const int64_t mcb = job->mc;
  for (int64_t jc = 0; jc < v->n; jc += job->nc) {
    const int64_t nc = min64(job->nc, v->n - jc), npanels = (nc + kr->nr - 1) / kr->nr;
    for (int64_t pc = 0; pc < v->k; pc += job->kc) {
      const int64_t kc = min64(job->kc, v->k - pc);
      pack_b(v, jc, nc, pc, kc, kr->nr, 0, npanels, bbuf);
      for (int64_t ic = 0; ic < v->m; ic += mcb) {
        const int64_t mc = min64(mcb, v->m - ic);
        pack_a(v, ic, mc, pc, kc, kr->mr, abuf);
        macro_kernel(kr, job->ukr, abuf, bbuf, mc, nc, kc, 0, npanels, v->c + ic * v->n + jc, v->n, pc == 0 && !v->acc);
      }
    }
  }
}

/* Batch split: each thread takes whole batch entries and runs them alone with its own B block. */
static void task_batch(void *ctx, int tid) {
  gemm_job *job = ctx;
  for (;;) {
    const int64_t p = atomic_fetch_add_explicit(&job->next_entry, 1, memory_order_relaxed);
    if (p >= job->op->batch) break;
    const mm_view v = view_of(job->op, p);
    gemm_single(job, &v, job->scratch[tid].a, job->scratch[tid].b);
    atomic_fetch_add_explicit(&job->entries_done, 1, memory_order_release);
  }
  if (tid == 0) weft_cpu_wait_until(&job->entries_done, job->op->batch);
}

/* The shape of block pair t of the shared split. */
typedef struct block_pair {
  int64_t p, jc, nc, pc, kc;
  int64_t npanels, per_pack, npack; /* B micro-panels, and how they are grouped into pack items */
  int64_t nchunks, nunits;          /* compute units: n_ic row blocks x nchunks runs of micro-panels */
} block_pair;

static void block_pair_of(const gemm_job *job, int64_t t, block_pair *b) {
  const int64_t nr = job->kr->nr;
  const int64_t per_entry = job->njc * job->npc, r = t % per_entry;
  b->p = t / per_entry;
  b->jc = (r / job->npc) * job->nc;
  b->nc = min64(job->nc, job->op->n - b->jc);
  b->pc = (r % job->npc) * job->kc;
  b->kc = min64(job->kc, job->op->k - b->pc);
  b->npanels = (b->nc + nr - 1) / nr;
  b->per_pack = (b->npanels + 4 * job->nthreads - 1) / (4 * job->nthreads);
  b->npack = (b->npanels + b->per_pack - 1) / b->per_pack;
  /* Enough units that a thread slowed by the machine's other work does not hold the others up. */
  b->nchunks = (4 * job->nthreads + job->n_ic - 1) / job->n_ic;
  if (b->nchunks > b->npanels) b->nchunks = b->npanels;
  b->nunits = job->n_ic * b->nchunks;
}

/* Shared split: all threads work on every batch entry. The work is one sequence of items, taken in order
 * from one counter: for each block pair t, its B pack items (groups of micro-panels into a shared B block),
 * then its compute units (an mc-row block of A, packed by the thread itself, times a run of micro-panels).
 * An item waits only for items already taken by others, never for a thread to arrive:
 *   - a compute unit of t waits for all of t's B packs, and for the same unit of t-1 when t continues the
 *     same C tiles (its kc block follows t-1's): the per-element sums then still run in ascending k;
 *   - a B pack of t waits until every unit of t-2 is done: B blocks are double-buffered, so t's buffer was
 *     last read by t-2. Packing t+1 thus overlaps the tail of t. */
static void task_shared(void *ctx, int tid) {
  gemm_job *job = ctx;
  const weft_cpu_kernels *kr = job->kr;
  float *abuf = job->scratch[tid].a;
  int64_t t = 0, a_t = -1, a_ic = -1; /* the block pair and row block in abuf */
  block_pair b;
  block_pair_of(job, 0, &b);
  mm_view v = view_of(job->op, b.p);
  for (;;) {
    const int64_t item = atomic_fetch_add_explicit(&job->next_item, 1, memory_order_relaxed);
    if (item >= job->total_items) break;
    if (item >= job->base[t + 1]) {
      while (item >= job->base[t + 1]) t++;
      block_pair_of(job, t, &b);
      v = view_of(job->op, b.p);
    }
    float *bbuf = job->bbuf[t & 1];
    const int64_t local = item - job->base[t];
    if (local < b.npack) {
      if (t >= 2) {
        block_pair old;
        block_pair_of(job, t - 2, &old);
        weft_cpu_wait_until(&job->computed[t - 2], old.nunits);
      }
      const int64_t jp0 = local * b.per_pack, jp1 = min64(b.npanels, jp0 + b.per_pack);
      pack_b(&v, b.jc, b.nc, b.pc, b.kc, kr->nr, jp0, jp1, bbuf);
      atomic_fetch_add_explicit(&job->packed[t], 1, memory_order_release);
    } else {
      const int64_t u = local - b.npack, ic = u / b.nchunks, ch = u % b.nchunks;
      weft_cpu_wait_until(&job->packed[t], b.npack);
      if (b.pc > 0) weft_cpu_wait_until(&job->unit_iter[u], t);
      const int64_t i0 = ic * job->mc, mc = min64(job->mc, v.m - i0);
      if (a_t != t || a_ic != ic) {
        pack_a(&v, i0, mc, b.pc, b.kc, kr->mr, abuf);
        a_t = t, a_ic = ic;
      }
      macro_kernel(kr, job->ukr, abuf, bbuf, mc, b.nc, b.kc, b.npanels * ch / b.nchunks,
                   b.npanels * (ch + 1) / b.nchunks, v.c + i0 * v.n + b.jc, v.n, b.pc == 0 && !v.acc);
      /* A later block pair of another C tile may have finished this unit first: keep the largest. */
      long long seen = atomic_load_explicit(&job->unit_iter[u], memory_order_relaxed);
      while (seen < t + 1 && !atomic_compare_exchange_weak_explicit(&job->unit_iter[u], &seen, t + 1,
                                                                    memory_order_release, memory_order_relaxed)) {
      }
      atomic_fetch_add_explicit(&job->computed[t], 1, memory_order_release);
    }
    atomic_fetch_add_explicit(&job->items_done, 1, memory_order_release);
  }
  if (tid == 0) weft_cpu_wait_until(&job->items_done, job->total_items);
}

/* Lays out the shared split's item sequence; 0 when out of memory. */
static int shared_plan(gemm_job *job) {
  const weft_op *op = job->op;
  job->njc = (op->n + job->nc - 1) / job->nc;
  job->npc = (op->k + job->kc - 1) / job->kc;
  job->n_ic = (op->m + job->mc - 1) / job->mc;
  job->iters = op->batch * job->njc * job->npc;
  const int64_t max_units = job->n_ic * (4 * job->nthreads);
  char *mem = malloc(sizeof(int64_t) * (size_t)(job->iters + 1) +
                     sizeof(atomic_llong) * (size_t)(2 * job->iters + max_units));
  if (!mem) return 0;
  job->base = (int64_t *)mem;
  job->packed = (atomic_llong *)(job->base + job->iters + 1);
  job->computed = job->packed + job->iters;
  job->unit_iter = job->computed + job->iters;
  job->base[0] = 0;
  for (int64_t t = 0; t < job->iters; t++) {
    block_pair b;
    block_pair_of(job, t, &b);
    job->base[t + 1] = job->base[t] + b.npack + b.nunits;
    atomic_init(&job->packed[t], 0);
    atomic_init(&job->computed[t], 0);
  }
  for (int64_t u = 0; u < max_units; u++) atomic_init(&job->unit_iter[u], 0);
  job->total_items = job->base[job->iters];
  atomic_init(&job->next_item, 0);
  atomic_init(&job->items_done, 0);
  return 1;
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
  if (k == 0) { /* no terms: every sum is +0 (or, accumulating, C's value, canonical as a stored result) */
    float *c = op->out[0];
    if (op->kind == WEFT_OP_MATMUL_ACC)
      for (size_t e = 0; e < (size_t)(batch * m * n); e++) c[e] = weft_canon_nan(c[e]);
    else memset(c, 0, sizeof(float) * (size_t)(batch * m * n));
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
  if (m <= SKINNY_M) return matmul_skinny(lane, op);

  gemm_job job;
  memset(&job, 0, sizeof job);
  job.op = op;
  job.kr = lane->kernels;
  job.ukr = op->contract == WEFT_CONTRACT_FP32 ? job.kr->fp32 : job.kr->exact;
  /* Row blocks of equal height (at most the kernel's mc): a short last block would leave one thread a
   * short unit to do while the other finishes a full one. */
  const int64_t n_ic = (m + job.kr->mc - 1) / job.kr->mc;
  job.mc = round_up((m + n_ic - 1) / n_ic, job.kr->mr);
  job.kc = min64(job.kr->kc, k);
  job.nc = min64(job.kr->nc, round_up(n, job.kr->nr));

  /* Threads: as many as the work feeds, the caller included. */
  const int64_t total = per_entry * batch; /* fits: each tensor holds at most 2^40 elements */
  const int64_t fed = total / MIN_WORK_PER_THREAD;
  int nthreads = weft_cpu_pool_threads(lane->pool);
  if (nthreads > lane->threads) nthreads = lane->threads;
  if (fed < nthreads) nthreads = fed < 1 ? 1 : (int)fed;
  job.nthreads = nthreads;
  /* Whole batch entries per thread when they divide evenly enough; else all threads on each entry. */
  const int by_batch = nthreads > 1 && batch >= nthreads &&
                       (batch % nthreads == 0 || batch >= 4 * nthreads || per_entry < 4 * MIN_WORK_PER_THREAD);
  if (!by_batch && nthreads >= SHORT_SHARED_MIN_POOL && total < SHORT_SHARED_WORK) job.nthreads = nthreads -= 2;

  if (!lane->scratch) {
    lane->scratch = calloc((size_t)lane->threads, sizeof *lane->scratch);
    if (!lane->scratch)
      return weft_lane_report(lane->host, WEFT_ERR_OUT_OF_MEMORY, "cpu: out of host memory for matmul scratch");
  }
  const size_t a_need = (size_t)job.mc * (size_t)job.kc;
  const size_t b_block = (size_t)job.kc * (size_t)job.nc;
  for (int t = 0; t < nthreads; t++) {
    const size_t b_need = nthreads == 1 || by_batch ? b_block : (t == 0 ? 2 * b_block : 0);
    if (!scratch_reserve(&lane->scratch[t], a_need, b_need))
      return weft_lane_report(lane->host, WEFT_ERR_OUT_OF_MEMORY,
                              "cpu: out of host memory for matmul scratch (%zu floats per thread)", a_need + b_need);
  }
  job.scratch = lane->scratch;
  if (nthreads == 1) {
    for (int64_t p = 0; p < batch; p++) {
      const mm_view v = view_of(op, p);
      gemm_single(&job, &v, job.scratch[0].a, job.scratch[0].b);
    }
  } else if (by_batch) {
    atomic_init(&job.next_entry, 0);
    atomic_init(&job.entries_done, 0);
    weft_cpu_pool_run(lane->pool, nthreads, task_batch, &job);
  } else {
    if (!shared_plan(&job))
      return weft_lane_report(lane->host, WEFT_ERR_OUT_OF_MEMORY, "cpu: out of host memory for the matmul plan");
    job.bbuf[0] = job.scratch[0].b;
    job.bbuf[1] = job.scratch[0].b + b_block;
    weft_cpu_pool_run(lane->pool, nthreads, task_shared, &job);
    free(job.base);
  }
  return WEFT_OK;
}
