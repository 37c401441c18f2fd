/* elementwise.c - the CPU lane's ops other than matmul: the reference kernels, split by rows across the
 * lane's threads when an op is large enough to pay for waking them. Every element is still computed by
 * the reference's own expression, so the bits are the reference's. sum_rows has a loop of its own that
 * walks x row by row (the reference walks it column by column, which strides through memory); each
 * column's sum still starts at +0 and adds rows in ascending order. softmax_xent stays on the reference:
 * its loss is one sum over all rows in order. relu_backward also has its own loop: the reference's
 * `x > 0 ? grad : 0` reads grad only on one side of the condition, which the compiler must then branch on
 * (a mispredicted branch per element on real gradients); reading both first gives the same values
 * branch-free. Like the reference, every NaN result is stored as the canonical NaN (weft_canon_nan). */
#include <stdatomic.h>

#include "../../core/reference.h"
#include "cpu.h"

/* Elements below which an op runs on the caller's thread alone (about 1 MiB of each operand). */
#define PARALLEL_MIN_ELEMS ((int64_t)1 << 18)
/* Parts per thread: enough that a thread slowed by other work does not hold the op up. */
#define PARTS_PER_THREAD 4

/* Elements [e0, e1) of relu_backward: out = x > 0 ? grad : +0 (in[0] = grad, in[1] = x). */
static void relu_backward_part(const weft_op *op, size_t e0, size_t e1) {
  const float *grad = op->in[0], *x = op->in[1];
  float *out = op->out[0]; /* may be grad */
  for (size_t e = e0; e < e1; e++) {
    const float g = grad[e], xv = x[e];
    out[e] = xv > 0.0f ? weft_canon_nan(g) : 0.0f;
  }
}

/* Rows [r0, r1) of a row-wise op: the same op on pointers moved to row r0 (a broadcast row stays put). */
static void rows_part(const weft_op *op, int64_t r0, int64_t r1) {
  weft_op sub = *op;
  const size_t off = (size_t)r0 * (size_t)op->cols;
  sub.rows = r1 - r0;
  sub.in[0] = (float *)op->in[0] + off;
  if (op->kind == WEFT_OP_RELU_BACKWARD || (op->kind == WEFT_OP_ADD && !op->y_broadcast))
    sub.in[1] = (float *)op->in[1] + off;
  sub.out[0] = (float *)op->out[0] + off;
  if (op->kind == WEFT_OP_RELU_BACKWARD) relu_backward_part(op, off, off + (size_t)sub.rows * (size_t)op->cols);
  else weft_reference_run(&sub);
}

/* Columns [j0, j1) of sum_rows: out[j] = 0 + x[0,j] + x[1,j] + ..., rows ascending, read row by row. */
static void sum_rows_part(const weft_op *op, int64_t j0, int64_t j1) {
  const float *x = op->in[0];
  float *restrict out = op->out[0];
  const int64_t cols = op->cols;
  for (int64_t j = j0; j < j1; j++) out[j] = 0.0f;
  for (int64_t i = 0; i < op->rows; i++) {
    const float *restrict row = x + (size_t)i * (size_t)cols;
    for (int64_t j = j0; j < j1; j++) out[j] = out[j] + row[j];
  }
  for (int64_t j = j0; j < j1; j++) out[j] = weft_canon_nan(out[j]);
}

typedef struct ew_job {
  const weft_op *op;
  int64_t span, per_part, nparts; /* rows (or columns for sum_rows) split into parts of per_part */
  atomic_llong next, done;
} ew_job;

static void ew_task(void *ctx, int tid) {
  ew_job *job = ctx;
  for (;;) {
    const int64_t part = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
    if (part >= job->nparts) break;
    const int64_t lo = part * job->per_part;
    const int64_t hi = lo + job->per_part < job->span ? lo + job->per_part : job->span;
    if (job->op->kind == WEFT_OP_SUM_ROWS) sum_rows_part(job->op, lo, hi);
    else rows_part(job->op, lo, hi);
    atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
  }
  if (tid == 0) weft_cpu_wait_until(&job->done, job->nparts);
}

void weft_cpu_elementwise(weft_cpu_lane *lane, const weft_op *op) {
  const int64_t elems = op->rows * op->cols;
  const int row_wise = op->kind == WEFT_OP_ADD || op->kind == WEFT_OP_RELU || op->kind == WEFT_OP_RELU_BACKWARD ||
                       op->kind == WEFT_OP_SCALE || op->kind == WEFT_OP_AXPY;
  int nthreads = lane->threads;
  if (elems < 2 * PARALLEL_MIN_ELEMS || !(row_wise || op->kind == WEFT_OP_SUM_ROWS)) nthreads = 1;
  if (nthreads > 1 && elems / PARALLEL_MIN_ELEMS < nthreads) nthreads = (int)(elems / PARALLEL_MIN_ELEMS);
  if (op->kind == WEFT_OP_SUM_ROWS && nthreads <= 1) {
    sum_rows_part(op, 0, op->cols);
    return;
  }
  if (nthreads <= 1) {
    if (op->kind == WEFT_OP_RELU_BACKWARD) relu_backward_part(op, 0, (size_t)elems);
    else weft_reference_run(op);
    return;
  }
  ew_job job;
  job.op = op;
  job.span = op->kind == WEFT_OP_SUM_ROWS ? op->cols : op->rows;
  job.per_part = (job.span + (int64_t)nthreads * PARTS_PER_THREAD - 1) / ((int64_t)nthreads * PARTS_PER_THREAD);
  /* Column parts in whole cache lines, so two threads never write one line of out. */
  if (op->kind == WEFT_OP_SUM_ROWS) job.per_part = (job.per_part + 15) / 16 * 16;
  job.nparts = (job.span + job.per_part - 1) / job.per_part;
  atomic_init(&job.next, 0);
  atomic_init(&job.done, 0);
  weft_cpu_pool_run(lane->pool, nthreads, ew_task, &job);
}
