/* reference.c - the reference implementation: the canonical order of every op, written out plainly.
 * Built with -ffp-contract=off: every multiply and every add is rounded on its own. Every stored result
 * goes through weft_canon_nan: a NaN result is stored as 0x7fc00000 whatever NaN the arithmetic made. */
#include "reference.h"

#include <string.h>

#include "fpenv.h"

/* Element (r, c) of a row-major matrix with `ld` columns. */
#define AT(p, r, c, ld) ((p)[(size_t)(r) * (size_t)(ld) + (size_t)(c)])

/* MATMUL. For every c[i,j]: acc = 0; for k ascending: acc = acc + a[i,k] * b[k,j].
 * MATMUL_ACC: the same from acc = c[i,j], the value c holds before the op. */
void weft_ref_matmul(const weft_op *op, int64_t p, int64_t i0, int64_t i1) {
  weft_fpenv env;
  weft_fpenv_enter(&env);
  const int64_t m = op->m, n = op->n, k = op->k;
  const float *a = (const float *)op->in[0] + (size_t)p * (size_t)(m * k);
  const float *b = (const float *)op->in[1] + (op->b_batched ? (size_t)p * (size_t)(k * n) : 0);
  float *c = (float *)op->out[0] + (size_t)p * (size_t)(m * n);
  const int chained = op->kind == WEFT_OP_MATMUL_ACC;
  for (int64_t i = i0; i < i1; i++) {
    for (int64_t j = 0; j < n; j++) {
      float acc = chained ? AT(c, i, j, n) : 0.0f;
      for (int64_t q = 0; q < k; q++) {
        float av = op->trans_a ? AT(a, q, i, m) : AT(a, i, q, k);
        float bv = op->trans_b ? AT(b, j, q, k) : AT(b, q, j, n);
        float prod = av * bv;
        acc = acc + prod;
      }
      AT(c, i, j, n) = weft_canon_nan(acc);
    }
  }
  weft_fpenv_leave(&env);
}

/* SOFTMAX_XENT, row by row:
 *   mx = z[0]; for j ascending from 1: mx = z[j] > mx ? z[j] : mx
 *   s = 0; for j ascending: s = s + weft_expf(z[j] - mx)
 *   ls = weft_logf(s)
 *   acc = 0; for j ascending: lsm = (z[j] - mx) - ls; acc = acc + t[j] * lsm; grad[j] = (weft_expf(lsm) - t[j]) * inv_rows
 *   row_loss = -acc
 * loss: tot = 0; for rows ascending: tot = tot + row_loss; loss = tot * inv_rows. */
static void ref_softmax_xent(const weft_op *op) {
  const float *z = op->in[0], *t = op->in[1];
  float *loss = op->out[0], *grad = op->out[1];
  const int64_t rows = op->rows, cols = op->cols;
  float tot = 0.0f;
  for (int64_t i = 0; i < rows; i++) {
    const float *zr = z + (size_t)i * (size_t)cols, *tr = t + (size_t)i * (size_t)cols;
    float mx = zr[0];
    for (int64_t j = 1; j < cols; j++) mx = zr[j] > mx ? zr[j] : mx;
    float s = 0.0f;
    for (int64_t j = 0; j < cols; j++) s = s + weft_expf(zr[j] - mx);
    float ls = weft_logf(s);
    float acc = 0.0f;
    for (int64_t j = 0; j < cols; j++) {
      float lsm = (zr[j] - mx) - ls;
      float prod = tr[j] * lsm;
      acc = acc + prod;
      if (grad) grad[(size_t)i * (size_t)cols + (size_t)j] = weft_canon_nan((weft_expf(lsm) - tr[j]) * op->inv_rows);
    }
    tot = tot + (-acc);
  }
  if (loss) loss[0] = weft_canon_nan(tot * op->inv_rows);
}

void weft_reference_run(const weft_op *op) {
  const size_t count = (size_t)op->rows * (size_t)op->cols;
  const float *x = op->in[0], *y = op->in[1];
  float *out = op->out[0];
  weft_fpenv env;
  weft_fpenv_enter(&env);
  switch (op->kind) {
  case WEFT_OP_MATMUL:
  case WEFT_OP_MATMUL_ACC:
    for (int64_t p = 0; p < op->batch; p++) weft_ref_matmul(op, p, 0, op->m);
    break;
  case WEFT_OP_ADD: /* out = x + y; y broadcast as one row when y_broadcast */
    for (size_t e = 0; e < count; e++) out[e] = weft_canon_nan(x[e] + y[op->y_broadcast ? e % (size_t)op->cols : e]);
    break;
  case WEFT_OP_RELU: /* out = x > 0 ? x : (x is NaN ? the canonical NaN : +0) */
    for (size_t e = 0; e < count; e++) out[e] = x[e] > 0.0f ? x[e] : (x[e] != x[e] ? weft_canon_nan(x[e]) : 0.0f);
    break;
  case WEFT_OP_RELU_BACKWARD: /* in[0] = grad, in[1] = x: out = x > 0 ? grad : +0 */
    for (size_t e = 0; e < count; e++) out[e] = y[e] > 0.0f ? weft_canon_nan(x[e]) : 0.0f;
    break;
  case WEFT_OP_SCALE: /* out = alpha * x */
    for (size_t e = 0; e < count; e++) out[e] = weft_canon_nan(op->alpha * x[e]);
    break;
  case WEFT_OP_AXPY: /* y = (alpha * x) + y: the product rounded, then the sum */
    for (size_t e = 0; e < count; e++) {
      float prod = op->alpha * x[e];
      out[e] = weft_canon_nan(prod + out[e]);
    }
    break;
  case WEFT_OP_SUM_ROWS: /* out[j] = 0 + x[0,j] + x[1,j] + ... rows ascending */
    for (int64_t j = 0; j < op->cols; j++) {
      float acc = 0.0f;
      for (int64_t i = 0; i < op->rows; i++) acc = acc + x[(size_t)i * (size_t)op->cols + (size_t)j];
      out[j] = weft_canon_nan(acc);
    }
    break;
  case WEFT_OP_SOFTMAX_XENT:
    ref_softmax_xent(op);
    break;
  default:
    break;
  }
  weft_fpenv_leave(&env);
}
