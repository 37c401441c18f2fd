/* conformance.c - the conformance cases: every public op, in every form the API allows, on seeded random
 * and edge shapes (1, odd, prime, empty batches) and on special values, against the reference.
 *
 * Two comparisons, chosen by the contract the case runs under:
 *   exact: every output element must have the reference's bits (src/core/reference.c run on host copies of
 *          the inputs; NaNs too: every NaN an exact lane stores is the canonical 0x7fc00000, see same_bits_exact
 *          and cases_nan). The fp32 bound below is checked too, which
 *          catches a reference that is itself wrong (the bit comparison alone cannot).
 *   fp32:  |got - ref| <= bound per element, ref computed in float64 here. With u = 2^-24 (fp32's unit
 *          roundoff) the bounds are the classical ones for any summation order (with or without fused
 *          multiply-add), with a safety factor of two, plus an absolute term of a few 2^-126 per
 *          operation so that a lane that flushes subnormals to zero still meets fp32:
 *            matmul   2 (k+1) u sum_k |a b|                + (2k+2) 2^-126
 *            sum_rows 2 (r+1) u sum_i |x|                  + (r+1) 2^-126
 *            add, scale           2u |ref|                 + 2^-126
 *            axpy                 2u (|alpha x| + |y|)     + 2^-126
 *            relu, relu_backward  2^-126 (any zero sign accepted; subnormals may be flushed)
 *            softmax_xent: see softmax_ref().
 *          A NaN reference needs a NaN, an infinite one the same infinity. */
#include "conformance.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference.h"
#include "core/reference_tx.h"
#include "tutil.h"

#define U24 (1.0 / 16777216.0)   /* 2^-24 */
#define TINY ((double)FLT_MIN)   /* 2^-126: one flushed subnormal */
#define SENTINEL (-1234.5f)      /* outputs start as this, so an element a lane never writes shows up */
#define MAX_PRINT 4              /* mismatching elements printed per case */
#define LOG (weft_conf_log ? weft_conf_log : stderr)

FILE *weft_conf_log;

/* ------------------------------------------------------------------------------------------ context */

typedef struct ctx {
  weft_fabric *f;
  weft_op_desc desc;
  char lane_name[64];
  int exact;
  int slow, quick;
  int64_t max_dim;
  double work_cap; /* most multiply-adds one random matmul case may do */
  tu_rng rng;
  weft_conf_stats *st;
  char what[320]; /* the case being run: op and shapes */
  int failed;     /* the current case failed a check */
  int skipped;    /* the lane refused an op of the current case as beyond its size limits (op_ran) */
  long size_skips[WEFT_OP_COUNT]; /* such refusals, per op kind, over the run */
  int printed;    /* check failures the current case has printed */
} ctx;

static void begin_case(ctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void begin_case(ctx *c, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(c->what, sizeof c->what, fmt, args);
  va_end(args);
  c->failed = 0;
  c->skipped = 0;
  c->printed = 0;
  c->st->cases++;
}

static void end_case(ctx *c) {
  if (c->failed) c->st->failed++;
  else if (c->skipped) c->st->cases--, c->st->skipped++;
}

static void case_check(ctx *c, int ok, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void case_check(ctx *c, int ok, const char *fmt, ...) {
  tu_checks++;
  if (ok) return;
  tu_failures++;
  c->failed = 1;
  if (c->printed++ >= MAX_PRINT) return; /* one broken case should not bury the others */
  fprintf(LOG, "FAIL [%s/%s] %s: ", c->lane_name, c->exact ? "exact" : "fp32", c->what);
  va_list args;
  va_start(args, fmt);
  vfprintf(LOG, fmt, args);
  va_end(args);
  fputc('\n', LOG);
}

/* The exact contract's comparison: the same 32 bits, NaNs included (no NaN equals any NaN shortcut). */
static int same_bits_exact(float a, float b) { return tu_bits(a) == tu_bits(b); }

/* Under exact every NaN a lane stores is the canonical quiet NaN 0x7fc00000 (src/core/reference.h). */
static int canonical_nan(float v) { return v == v || tu_bits(v) == 0x7fc00000u; }


/* ------------------------------------------------------------------------------------------- tensors */

typedef struct tens {
  weft_tensor *t;
  float *h; /* what was written into the tensor */
  size_t n;
  int ndim;
  int64_t dims[4];
} tens;

enum fill {
  FILL_UNIFORM,  /* [-1, 1) */
  FILL_SENTINEL, /* every element SENTINEL */
  FILL_SPECIAL,  /* about 1 in 10 from special_values(), the rest uniform */
  FILL_SPARSE,   /* about 1 in 100 special (NaN/inf would otherwise swamp every dot product) */
  FILL_TINY,     /* subnormals, -0, +-FLT_MIN multiples: products and sums stay subnormal */
  FILL_NEGZERO,  /* every element -0.0 */
  FILL_WIDE,     /* [-80, 80): exp near its limits in softmax */
  FILL_LOGITS,   /* [-4, 4) */
  FILL_ONEHOT,   /* one 1 per row of the last dimension, the rest 0 */
  FILL_SOFT,     /* positive rows summing to about 1 */
  FILL_NANS,     /* NaNs of several payloads (quiet, signalling, negative) and infinities among uniform values */
  FILL_INFZERO,  /* only +-inf, +-0 and +-1: products 0*inf and sums inf-inf make NaNs from no NaN input */
};

static float special_value(ctx *c) {
  static const uint32_t bits[] = {
      0x7fc00000u, /* NaN */
      0xffc00001u, /* -NaN with a payload */
      0x7f800000u, /* +inf */
      0xff800000u, /* -inf */
      0x80000000u, /* -0 */
      0x00000000u, /* +0 */
      0x00000001u, /* smallest subnormal */
      0x806f0000u, /* negative subnormal */
      0x00400000u, /* subnormal, half of FLT_MIN */
      0x00800000u, /* FLT_MIN */
      0x80800000u, /* -FLT_MIN */
      0x3f800000u, /* 1 */
  };
  return tu_float(bits[tu_rng_int(&c->rng, 0, (int64_t)(sizeof bits / sizeof bits[0]) - 1)]);
}

static float nan_fill_value(ctx *c, int fill);

static void fill_values(ctx *c, float *h, size_t n, int64_t cols, int fill) {
  for (size_t e = 0; e < n; e++) {
    switch (fill) {
    case FILL_SENTINEL: h[e] = SENTINEL; break;
    case FILL_SPECIAL: h[e] = tu_rng_int(&c->rng, 0, 9) == 0 ? special_value(c) : tu_rng_float(&c->rng, -1, 1); break;
    case FILL_SPARSE: h[e] = tu_rng_int(&c->rng, 0, 99) == 0 ? special_value(c) : tu_rng_float(&c->rng, -1, 1); break;
    case FILL_TINY: {
      int64_t r = tu_rng_int(&c->rng, 0, 5);
      if (r == 0) h[e] = -0.0f;
      else if (r == 1) h[e] = tu_float((uint32_t)tu_rng_int(&c->rng, 1, 0x007fffff)); /* subnormal */
      else if (r == 2) h[e] = -tu_float((uint32_t)tu_rng_int(&c->rng, 1, 0x007fffff));
      else h[e] = tu_rng_float(&c->rng, -4, 4) * FLT_MIN;
      break;
    }
    case FILL_NEGZERO: h[e] = -0.0f; break;
    case FILL_NANS:
    case FILL_INFZERO: h[e] = nan_fill_value(c, fill); break;
    case FILL_WIDE: h[e] = tu_rng_float(&c->rng, -80, 80); break;
    case FILL_LOGITS: h[e] = tu_rng_float(&c->rng, -4, 4); break;
    case FILL_ONEHOT:
    case FILL_SOFT: h[e] = 0.0f; break;
    default: h[e] = tu_rng_float(&c->rng, -1, 1); break;
    }
  }
  if ((fill == FILL_ONEHOT || fill == FILL_SOFT) && cols > 0) {
    for (size_t r = 0; r < n / (size_t)cols; r++) {
      float *row = h + r * (size_t)cols;
      if (fill == FILL_ONEHOT) {
        row[tu_rng_int(&c->rng, 0, cols - 1)] = 1.0f;
        continue;
      }
      float s = 0.0f;
      for (int64_t j = 0; j < cols; j++) s += row[j] = tu_rng_float(&c->rng, 0.01f, 1.0f);
      for (int64_t j = 0; j < cols; j++) row[j] = row[j] / s;
    }
  }
}

static size_t numel_of(int ndim, const int64_t *dims) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
  return n;
}

static const char *dims_str(char *buf, size_t len, int ndim, const int64_t *dims) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? "," : "", (long long)dims[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

static int tens_new(ctx *c, tens *x, int ndim, const int64_t *dims, int fill) {
  memset(x, 0, sizeof *x);
  x->ndim = ndim;
  memcpy(x->dims, dims, sizeof(int64_t) * (size_t)ndim);
  x->n = numel_of(ndim, dims);
  x->h = malloc((x->n ? x->n : 1) * sizeof(float));
  if (!x->h) {
    case_check(c, 0, "out of host memory for %zu floats", x->n);
    return 0;
  }
  fill_values(c, x->h, x->n, dims[ndim - 1], fill);
  weft_status st = weft_tensor_create(c->f, ndim, dims, x->h, &x->t);
  char s[96];
  case_check(c, st == WEFT_OK, "weft_tensor_create %s: %s: %s", dims_str(s, sizeof s, ndim, dims),
             weft_status_str(st), weft_fabric_last_error(c->f));
  return st == WEFT_OK;
}

static void tens_free(tens *x) {
  weft_tensor_destroy(x->t);
  free(x->h);
  memset(x, 0, sizeof *x);
}

/* Reads a tensor back (at least one float allocated so empty tensors need no special case). */
static float *tens_read(ctx *c, const tens *x, const char *name) {
  float *out = malloc((x->n ? x->n : 1) * sizeof(float));
  if (!out) return NULL;
  weft_status st = weft_tensor_read(x->t, out, x->n);
  case_check(c, st == WEFT_OK, "weft_tensor_read(%s): %s: %s", name, weft_status_str(st), weft_fabric_last_error(c->f));
  if (st != WEFT_OK) {
    free(out);
    return NULL;
  }
  /* A read makes the host copy current; the lane's copy may stay current too. */
  case_check(c, tu_contains(weft_tensor_location(x->t), "host"), "after reading %s its location is '%s', not host",
             name, weft_tensor_location(x->t));
  return out;
}

/* An input an op only reads must come back with the bits it went in with. */
static void check_unchanged(ctx *c, const tens *x, const char *name) {
  float *got = tens_read(c, x, name);
  if (!got) return;
  size_t bad = 0, first = 0;
  for (size_t e = 0; e < x->n; e++)
    if (!same_bits_exact(got[e], x->h[e]) && bad++ == 0) first = e;
  case_check(c, bad == 0, "input %s was modified by the op: %zu elements differ, first [%zu] now 0x%08x, was 0x%08x",
             name, bad, first, bad ? tu_bits(got[first]) : 0u, bad ? tu_bits(x->h[first]) : 0u);
  free(got);
}

/* After an op pinned to a lane, the output's only current copy is that lane's (or the host's, for a lane
 * that computes in host memory); under the router, exactly one place, or the host and one lane: a batched
 * matmul the fabric is still measuring (split.c) runs on a lane and brings its result home to time it. */
static void check_written_location(ctx *c, const tens *x, const char *name) {
  const char *loc = weft_tensor_location(x->t);
  if (c->desc.lane != WEFT_LANE_AUTO)
    case_check(c, strcmp(loc, "host") == 0 || strcmp(loc, c->lane_name) == 0,
               "after the op, %s's location is '%s'; want '%s' (or 'host' for a host-memory lane)", name, loc,
               c->lane_name);
  else
    case_check(c, loc[0] && (!strchr(loc, ',') || (strncmp(loc, "host,", 5) == 0 && !strchr(loc + 5, ','))),
               "after the op, %s's location is '%s'; want exactly one place (or the host and one lane)", name, loc);
}

static int op_ok(ctx *c, weft_status st, const char *fn) {
  case_check(c, st == WEFT_OK, "%s returned %s: %s", fn, weft_status_str(st), weft_fabric_last_error(c->f));
  if (st == WEFT_OK && c->desc.lane != WEFT_LANE_AUTO)
    case_check(c, weft_fabric_last_lane(c->f) == c->desc.lane, "%s ran on lane %d, pinned to lane %d", fn,
               weft_fabric_last_lane(c->f), c->desc.lane);
  return st == WEFT_OK;
}

static uint64_t lane_ops(ctx *c);
static void compare_bits(ctx *c, const char *name, const tens *out, const float *want);

/* op_ok for an op a lane may refuse by its size limits. A lane can decline an op it offers when the case
 * does not fit it (the Vulkan lane: an operand that must fit one storage binding, as with the 4 KiB
 * bindings of test_conformance's second pass); the router goes around it. Pinned there, that answer,
 * WEFT_ERR_UNSUPPORTED for an op in the lane's op set, is no failure: the case is skipped, counted
 * (weft_conf_stats.skipped) and listed per op at the end of weft_conf_run. Any other status, that status
 * from the router or for an op the lane does not list, still fails, and so do wrong bits when it runs. */
static int op_ran(ctx *c, weft_status st, weft_op_kind kind, const char *fn) {
  if (st == WEFT_ERR_UNSUPPORTED && c->desc.lane != WEFT_LANE_AUTO && (lane_ops(c) & WEFT_OP_BIT(kind))) {
    c->skipped = 1;
    c->size_skips[kind]++;
    return 0;
  }
  return op_ok(c, st, fn);
}

/* ---------------------------------------------------------------------------------------- comparison */


static void coord_str(char *buf, size_t len, const tens *x, size_t e) {
  size_t idx[4];
  for (int d = x->ndim - 1; d >= 0; d--) {
    size_t dim = (size_t)x->dims[d];
    idx[d] = dim ? e % dim : 0;
    e = dim ? e / dim : 0;
  }
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < x->ndim && used < len; d++) used += (size_t)snprintf(buf + used, len - used, "%s%zu", d ? "," : "", idx[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

/* Compares `got` (out's elements, read back) with the reference. `want` holds the reference bits (exact
 * contract) or is NULL; `ref` and `bound` the float64 reference and its allowed distance. */
static void compare(ctx *c, const char *name, const tens *out, const float *got, const float *want, const double *ref,
                    const double *bound) {
  size_t bad = 0;
  for (size_t e = 0; e < out->n; e++) {
    int bits_ok = !want || (same_bits_exact(got[e], want[e]) && canonical_nan(got[e]));
    double g = (double)got[e];
    int tol_ok;
    if (isnan(ref[e])) tol_ok = isnan(g);
    else if (isinf(ref[e])) tol_ok = g == ref[e];
    else tol_ok = isfinite(g) && fabs(g - ref[e]) <= bound[e];
    if (bits_ok && tol_ok) continue;
    if (bad++ < MAX_PRINT) {
      char at[64];
      coord_str(at, sizeof at, out, e);
      if (!bits_ok)
        fprintf(LOG, "FAIL [%s/exact] %s: %s%s got 0x%08x (%.9g) want 0x%08x (%.9g) [%s]\n", c->lane_name, c->what,
                name, at, tu_bits(got[e]), got[e], tu_bits(want[e]), want[e],
                canonical_nan(got[e]) ? "bits vs reference" : "a NaN must be the canonical 0x7fc00000");
      if (!tol_ok)
        fprintf(LOG, "FAIL [%s/%s] %s: %s%s got 0x%08x (%.9g) want %.12g +- %.3g [float64 bound]\n", c->lane_name,
                c->exact ? "exact" : "fp32", c->what, name, at, tu_bits(got[e]), got[e], ref[e], bound[e]);
    }
  }
  if (bad > MAX_PRINT)
    fprintf(LOG, "FAIL [%s/%s] %s: ... %zu of %zu elements of %s differ\n", c->lane_name,
            c->exact ? "exact" : "fp32", c->what, bad, out->n, name);
  c->st->elements += (long)out->n;
  tu_checks++;
  if (bad) {
    tu_failures++;
    c->failed = 1;
  }
}

/* ------------------------------------------------------------------------------------------- shapes */

/* A dimension up to `max`: half the time one of the sizes kernels split on (1, odd, prime, around powers
 * of two), else uniform. */
static int64_t pick_dim(ctx *c, int64_t max) {
  static const int64_t interesting[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,   11,  13,  15,  16,  17,  23,
                                        31, 32, 33, 47, 63, 64, 65, 96, 97, 127, 128, 129, 191, 255, 256};
  if (max < 1) max = 1;
  if (tu_rng_int(&c->rng, 0, 1)) {
    for (int tries = 0; tries < 8; tries++) {
      int64_t d = interesting[tu_rng_int(&c->rng, 0, (int64_t)(sizeof interesting / sizeof interesting[0]) - 1)];
      if (d <= max) return d;
    }
  }
  return tu_rng_int(&c->rng, 1, max);
}

/* ------------------------------------------------------------------------------------------- matmul */

typedef struct mm_case {
  int nb;        /* batch dimensions of a (and c): 0, 1 or 2 */
  int64_t bd[2]; /* their sizes (0 allowed: an empty batch) */
  int64_t m, n, k;
  int ta, tb;
  int b_batched; /* b carries a's batch dimensions; otherwise b is one [k,n] shared by the batch */
  int fill_a, fill_b;
  int acc;       /* matmul_acc: c starts with fill_c's values and each sum continues from them */
  int fill_c;
} mm_case;

static void mm_run(ctx *c, const mm_case *mc) {
  int64_t ad[4], bdm[4], cd[4];
  int an = 0, bn = 0, cn = 0;
  size_t batch = 1;
  for (int i = 0; i < mc->nb; i++) {
    ad[an++] = cd[cn++] = mc->bd[i];
    if (mc->b_batched) bdm[bn++] = mc->bd[i];
    batch *= (size_t)mc->bd[i];
  }
  const int64_t m = mc->m, n = mc->n, k = mc->k;
  ad[an++] = mc->ta ? k : m, ad[an++] = mc->ta ? m : k;
  bdm[bn++] = mc->tb ? n : k, bdm[bn++] = mc->tb ? k : n;
  cd[cn++] = m, cd[cn++] = n;
  tens A, B, C;
  memset(&A, 0, sizeof A), memset(&B, 0, sizeof B), memset(&C, 0, sizeof C);
  char sa[64], sb[64], sc[64];
  begin_case(c, "%s a%s%s . b%s%s -> c%s", mc->acc ? "matmul_acc" : "matmul", dims_str(sa, sizeof sa, an, ad),
             mc->ta ? "^T" : "", dims_str(sb, sizeof sb, bn, bdm), mc->tb ? "^T" : "", dims_str(sc, sizeof sc, cn, cd));
  if (!tens_new(c, &A, an, ad, mc->fill_a) || !tens_new(c, &B, bn, bdm, mc->fill_b) ||
      !tens_new(c, &C, cn, cd, mc->acc ? mc->fill_c : FILL_SENTINEL))
    goto done;
  if (mc->acc) {
    if (!op_ran(c, weft_op_matmul_acc(c->f, &c->desc, A.t, mc->ta, B.t, mc->tb, C.t), WEFT_OP_MATMUL_ACC,
                "weft_op_matmul_acc"))
      goto done;
  } else if (!op_ok(c, weft_op_matmul(c->f, &c->desc, A.t, mc->ta, B.t, mc->tb, C.t), "weft_op_matmul"))
    goto done;
  check_written_location(c, &C, "c");
  float *got = tens_read(c, &C, "c");
  float *want = c->exact ? malloc((C.n ? C.n : 1) * sizeof(float)) : NULL;
  double *ref = malloc((C.n ? C.n : 1) * sizeof(double)), *bound = malloc((C.n ? C.n : 1) * sizeof(double));
  if (got && ref && bound && (want || !c->exact)) {
    if (want) {
      weft_op op;
      memset(&op, 0, sizeof op);
      op.kind = mc->acc ? WEFT_OP_MATMUL_ACC : WEFT_OP_MATMUL;
      op.contract = WEFT_CONTRACT_EXACT;
      op.in[0] = A.h, op.in[1] = B.h, op.out[0] = want;
      if (mc->acc) memcpy(want, C.h, C.n * sizeof(float));
      op.batch = (int64_t)batch, op.m = m, op.n = n, op.k = k;
      op.trans_a = mc->ta, op.trans_b = mc->tb, op.b_batched = mc->b_batched;
      weft_reference_run(&op);
    }
    for (size_t p = 0; p < batch; p++) {
      const float *a = A.h + p * (size_t)(m * k), *b = B.h + (mc->b_batched ? p * (size_t)(k * n) : 0);
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          size_t e = p * (size_t)(m * n) + (size_t)(i * n + j);
          double s = mc->acc ? C.h[e] : 0, sa_ = fabs(s);
          for (int64_t q = 0; q < k; q++) {
            double av = mc->ta ? a[q * m + i] : a[i * k + q];
            double bv = mc->tb ? b[j * k + q] : b[q * n + j];
            s += av * bv;
            sa_ += fabs(av * bv);
          }
          ref[e] = s;
          bound[e] = 2.0 * (double)(k + 1) * U24 * sa_ + (double)(2 * k + 2) * TINY;
        }
    }
    compare(c, "c", &C, got, want, ref, bound);
    check_unchanged(c, &A, "a");
    check_unchanged(c, &B, "b");
  }
  free(got), free(want), free(ref), free(bound);
done:
  end_case(c);
  tens_free(&A), tens_free(&B), tens_free(&C);
}

/* Forms of the batched matmul: a's batch rank, and whether b carries the batch. */
static const struct {
  int nb, b_batched;
} MM_FORMS[] = {{0, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 1}};
#define MM_NFORMS ((int)(sizeof MM_FORMS / sizeof MM_FORMS[0]))

static void mm_case_init(mm_case *mc, int form, int64_t b0, int64_t b1, int64_t m, int64_t k, int64_t n, int ta, int tb) {
  memset(mc, 0, sizeof *mc);
  mc->nb = MM_FORMS[form].nb, mc->b_batched = MM_FORMS[form].b_batched;
  mc->bd[0] = b0, mc->bd[1] = b1;
  mc->m = m, mc->k = k, mc->n = n, mc->ta = ta, mc->tb = tb;
  mc->fill_a = mc->fill_b = FILL_UNIFORM;
}

static void cases_matmul(ctx *c) {
  mm_case mc;
  /* Rank 2, every transpose combination, on the shapes kernels get wrong: unit dimensions, k = 1, primes. */
  static const int64_t fixed[][3] = {{1, 1, 1}, {1, 7, 1}, {3, 1, 5}, {5, 3, 1}, {1, 9, 6},
                                     {7, 13, 5}, {16, 16, 16}, {17, 31, 23}}; /* m, k, n */
  for (size_t s = 0; s < sizeof fixed / sizeof fixed[0]; s++)
    for (int t = 0; t < 4; t++) {
      mm_case_init(&mc, 0, 1, 1, fixed[s][0], fixed[s][1], fixed[s][2], t & 1, t >> 1);
      mm_run(c, &mc);
    }
  /* Every batched form, every transpose combination. */
  for (int form = 1; form < MM_NFORMS; form++)
    for (int t = 0; t < 4; t++) {
      mm_case_init(&mc, form, 3, 2, 5, 7, 3, t & 1, t >> 1);
      mm_run(c, &mc);
      mm_case_init(&mc, form, 2, 1, 1, 11, 4, t & 1, t >> 1);
      mm_run(c, &mc);
    }
  /* Empty batches: zero in the first or the second batch dimension. */
  for (int form = 1; form < MM_NFORMS; form++)
    for (int t = 0; t < 4; t += 3) {
      mm_case_init(&mc, form, 0, 3, 4, 6, 5, t & 1, t >> 1);
      mm_run(c, &mc);
      if (MM_FORMS[form].nb == 2) {
        mm_case_init(&mc, form, 2, 0, 4, 6, 5, t & 1, t >> 1);
        mm_run(c, &mc);
      }
    }
  /* Special values: NaN, infinities, signed zeros and subnormals travel through the dot products. */
  for (int t = 0; t < 4; t += 3) {
    mm_case_init(&mc, 0, 1, 1, 9, 17, 11, t & 1, t >> 1);
    mc.fill_a = mc.fill_b = FILL_SPARSE;
    mm_run(c, &mc);
    mm_case_init(&mc, 2, 2, 1, 6, 19, 7, t & 1, t >> 1);
    mc.fill_a = FILL_TINY; /* subnormal products and sums: a lane flushing them to zero fails exact */
    mm_run(c, &mc);
    mm_case_init(&mc, 0, 1, 1, 3, 4, 5, t & 1, t >> 1);
    mc.fill_a = FILL_NEGZERO; /* acc starts at +0: -0 products must sum to +0 */
    mm_run(c, &mc);
    mm_case_init(&mc, 0, 1, 1, 4, 3, 6, t & 1, t >> 1);
    mc.fill_b = FILL_NEGZERO;
    mm_run(c, &mc);
  }
  if (c->quick) return;
  /* Seeded random shapes in every form; the batch kept small so one case stays under the work cap. */
  for (int form = 0; form < MM_NFORMS; form++)
    for (int r = 0; r < (c->slow ? 4 : 8); r++) {
      int64_t b0 = tu_rng_int(&c->rng, 1, 4), b1 = tu_rng_int(&c->rng, 1, 3);
      int64_t m = pick_dim(c, c->max_dim), k = pick_dim(c, c->max_dim), n = pick_dim(c, c->max_dim);
      double batch = MM_FORMS[form].nb == 0 ? 1 : MM_FORMS[form].nb == 1 ? (double)b0 : (double)(b0 * b1);
      while (batch * (double)m * (double)n * (double)k > c->work_cap) {
        if (m >= n && m >= k) m = (m + 1) / 2;
        else if (n >= k) n = (n + 1) / 2;
        else k = (k + 1) / 2;
      }
      mm_case_init(&mc, form, b0, b1, m, k, n, (int)tu_rng_int(&c->rng, 0, 1), (int)tu_rng_int(&c->rng, 0, 1));
      mm_run(c, &mc);
    }
  if (c->slow) return;
  /* Larger than a cache block in each dimension in turn (k past 512 and 1024 crosses the k-blocking). */
  static const int64_t big[][3] = {{97, 600, 129}, {263, 67, 301}, {8, 1031, 17}, {130, 257, 70}};
  for (size_t s = 0; s < sizeof big / sizeof big[0]; s++) {
    mm_case_init(&mc, 0, 1, 1, big[s][0], big[s][1], big[s][2], (int)(s & 1), (int)(s >> 1 & 1));
    mm_run(c, &mc);
  }
  mm_case_init(&mc, 2, 4, 1, 65, 129, 33, 0, 0);
  mm_run(c, &mc);
}

/* Large k on every lane, whatever its size cap: a lane that fuses multiply-adds, sums in another order or
 * splits k only past some length, or only on full tiles, differs here. Small m and n keep the work (about
 * 6 M multiply-adds in all) modest on a software GPU. */
static void cases_matmul_large_k(ctx *c) {
  mm_case mc;
  for (int t = 0; t < 4; t++) { /* k = 4099: past 4096, prime-ish, every transpose combination */
    mm_case_init(&mc, 0, 1, 1, 3, 4099, 5, t & 1, t >> 1);
    mm_run(c, &mc);
  }
  /* odd m, n and k, no multiple of any tile or block size */
  mm_case_init(&mc, 0, 1, 1, 67, 2111, 33, 0, 0);
  mm_run(c, &mc);
  mm_case_init(&mc, 0, 1, 1, 13, 3001, 9, 1, 1);
  mm_run(c, &mc);
  /* a batch with large k, b batched and shared */
  mm_case_init(&mc, 2, 2, 1, 5, 4099, 3, 0, 1);
  mm_run(c, &mc);
  mm_case_init(&mc, 1, 3, 1, 7, 2049, 4, 1, 0);
  mm_run(c, &mc);
  /* large k with subnormal products and sparse specials */
  mm_case_init(&mc, 0, 1, 1, 2, 4099, 3, 0, 0);
  mc.fill_a = FILL_TINY;
  mm_run(c, &mc);
  mm_case_init(&mc, 0, 1, 1, 3, 4099, 2, 0, 1);
  mc.fill_a = mc.fill_b = FILL_SPARSE;
  mm_run(c, &mc);
}

/* The accumulating matmul: c += a.b from c's values (every form and transpose, specials in c and in the
 * products, k = 0, large k); then, under exact, the chain: one matmul over k cut into consecutive ranges, run
 * as matmul over the first and matmul_acc over each next, must give one matmul's bits (what a gradient split
 * over a batch across lanes or MPI ranks relies on). */
static void cases_matmul_acc(ctx *c) {
  mm_case mc;
  static const int64_t fixed[][3] = {{1, 1, 1}, {3, 1, 5}, {7, 13, 5}, {17, 31, 23}}; /* m, k, n */
  for (size_t s = 0; s < sizeof fixed / sizeof fixed[0]; s++)
    for (int t = 0; t < 4; t++) {
      mm_case_init(&mc, 0, 1, 1, fixed[s][0], fixed[s][1], fixed[s][2], t & 1, t >> 1);
      mc.acc = 1, mc.fill_c = s == 3 ? FILL_SPECIAL : FILL_UNIFORM;
      mm_run(c, &mc);
    }
  /* an empty batch: nothing to add, nothing written */
  mm_case_init(&mc, 1, 0, 1, 4, 6, 5, 0, 0);
  mc.acc = 1, mc.fill_c = FILL_UNIFORM;
  mm_run(c, &mc);
  for (int form = 1; form < MM_NFORMS; form++)
    for (int t = 0; t < 4; t += 3) {
      mm_case_init(&mc, form, 3, 2, 5, 7, 3, t & 1, t >> 1);
      mc.acc = 1, mc.fill_c = FILL_UNIFORM;
      mm_run(c, &mc);
    }
  /* -0 in c plus -0 products stays -0 (a lane that restarts from +0 gives +0); NaNs, infinities and
   * subnormals in c travel on. */
  mm_case_init(&mc, 0, 1, 1, 3, 4, 5, 0, 0);
  mc.acc = 1, mc.fill_a = FILL_NEGZERO, mc.fill_c = FILL_NEGZERO;
  mm_run(c, &mc);
  mm_case_init(&mc, 0, 1, 1, 9, 17, 11, 1, 0);
  mc.acc = 1, mc.fill_c = FILL_SPECIAL, mc.fill_a = FILL_SPARSE;
  mm_run(c, &mc);
  mm_case_init(&mc, 0, 1, 1, 6, 19, 7, 0, 1);
  mc.acc = 1, mc.fill_a = FILL_TINY, mc.fill_c = FILL_TINY;
  mm_run(c, &mc);
  if (!c->quick) {
    /* past the CPU lane's k block, and large enough to take its threaded paths */
    mm_case_init(&mc, 0, 1, 1, 97, 600, 129, 1, 0);
    mc.acc = 1, mc.fill_c = FILL_UNIFORM;
    mm_run(c, &mc);
    mm_case_init(&mc, 0, 1, 1, 3, 4099, 5, 0, 0);
    mc.acc = 1, mc.fill_c = FILL_UNIFORM;
    mm_run(c, &mc);
  }
  if (!c->exact) return;
  /* The chain: dW = X^T . dY over k samples, cut at cuts[], bit for bit one matmul. */
  static const int64_t shapes[][3] = {{5, 40, 7}, {33, 700, 20}, {64, 257, 10}}; /* m, k, n */
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] && !(c->quick && s > 0); s++) {
    const int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
    const int64_t cuts[] = {0, k / 3, k / 3 + 1, k - 1, k};
    const int64_t xd[2] = {k, m}, yd[2] = {k, n}, cd[2] = {m, n};
    tens X, Y, C;
    memset(&X, 0, sizeof X), memset(&Y, 0, sizeof Y), memset(&C, 0, sizeof C);
    begin_case(c, "chained matmul over k = %lld cut in 4 ([%lld,%lld] x^T . [%lld,%lld])", (long long)k, (long long)k,
               (long long)m, (long long)k, (long long)n);
    if (tens_new(c, &X, 2, xd, FILL_UNIFORM) && tens_new(c, &Y, 2, yd, FILL_UNIFORM) &&
        tens_new(c, &C, 2, cd, FILL_SENTINEL)) {
      int ok = 1;
      for (int part = 0; part < 4 && ok; part++) {
        const int64_t k0 = cuts[part], k1 = cuts[part + 1], pxd[2] = {k1 - k0, m}, pyd[2] = {k1 - k0, n};
        weft_tensor *px = NULL, *py = NULL;
        ok = weft_tensor_create(c->f, 2, pxd, X.h + k0 * m, &px) == WEFT_OK &&
             weft_tensor_create(c->f, 2, pyd, Y.h + k0 * n, &py) == WEFT_OK;
        if (ok) ok = part == 0 ? op_ok(c, weft_op_matmul(c->f, &c->desc, px, 1, py, 0, C.t), "weft_op_matmul")
                               : op_ran(c, weft_op_matmul_acc(c->f, &c->desc, px, 1, py, 0, C.t), WEFT_OP_MATMUL_ACC,
                                        "weft_op_matmul_acc");
        weft_tensor_destroy(px), weft_tensor_destroy(py);
      }
      float *got = ok ? tens_read(c, &C, "c") : NULL, *want = malloc(C.n * sizeof(float));
      if (got && want) {
        weft_op op;
        memset(&op, 0, sizeof op);
        op.kind = WEFT_OP_MATMUL, op.contract = WEFT_CONTRACT_EXACT;
        op.in[0] = X.h, op.in[1] = Y.h, op.out[0] = want;
        op.batch = 1, op.m = m, op.n = n, op.k = k, op.trans_a = 1;
        weft_reference_run(&op);
        compare_bits(c, "c", &C, want);
      }
      free(got), free(want);
    }
    end_case(c);
    tens_free(&X), tens_free(&Y), tens_free(&C);
  }
}

/* ------------------------------------------------------------------------------------- elementwise */

/* One elementwise op: p is x (add, relu, scale, axpy) or grad (relu_backward); q is y (add, axpy) or x
 * (relu_backward). */
typedef struct ew_case {
  weft_op_kind kind;
  int ndim;
  int64_t dims[4];
  int ymode;   /* add: 0 y has x's shape, 1 y is [n], 2 y is [1,n] */
  int inplace; /* out is p (relu, scale, add: x; relu_backward: grad) */
  float alpha;
  int fill_p, fill_q;
} ew_case;

static void ew_run(ctx *c, const ew_case *ec) {
  const int64_t cols = ec->dims[ec->ndim - 1];
  const int has_q = ec->kind == WEFT_OP_ADD || ec->kind == WEFT_OP_RELU_BACKWARD || ec->kind == WEFT_OP_AXPY;
  int64_t qd[4];
  int qn = ec->ndim;
  memcpy(qd, ec->dims, sizeof qd);
  if (ec->kind == WEFT_OP_ADD && ec->ymode == 1) qn = 1, qd[0] = cols;
  if (ec->kind == WEFT_OP_ADD && ec->ymode == 2) qn = 2, qd[0] = 1, qd[1] = cols;
  tens P, Q, O;
  memset(&P, 0, sizeof P), memset(&Q, 0, sizeof Q), memset(&O, 0, sizeof O);
  char sp[64], sq[64];
  const char *op_name = weft_op_kind_str(ec->kind);
  dims_str(sp, sizeof sp, ec->ndim, ec->dims);
  dims_str(sq, sizeof sq, qn, qd);
  switch (ec->kind) {
  case WEFT_OP_ADD: begin_case(c, "add x%s + y%s%s", sp, sq, ec->inplace ? " (out = x)" : ""); break;
  case WEFT_OP_RELU: begin_case(c, "relu x%s%s", sp, ec->inplace ? " (out = x)" : ""); break;
  case WEFT_OP_RELU_BACKWARD: begin_case(c, "relu_backward grad%s x%s%s", sp, sp, ec->inplace ? " (out = grad)" : ""); break;
  case WEFT_OP_SCALE: begin_case(c, "scale %.9g * x%s%s", ec->alpha, sp, ec->inplace ? " (out = x)" : ""); break;
  default: begin_case(c, "axpy y%s += %.9g * x%s", sp, ec->alpha, sp); break;
  }
  if (!tens_new(c, &P, ec->ndim, ec->dims, ec->fill_p)) goto done;
  if (has_q && !tens_new(c, &Q, qn, qd, ec->fill_q)) goto done;
  const tens *out = &P;
  if (ec->kind == WEFT_OP_AXPY) out = &Q;
  else if (!ec->inplace) {
    if (!tens_new(c, &O, ec->ndim, ec->dims, FILL_SENTINEL)) goto done;
    out = &O;
  }
  weft_status st;
  switch (ec->kind) {
  case WEFT_OP_ADD: st = weft_op_add(c->f, &c->desc, P.t, Q.t, out->t); break;
  case WEFT_OP_RELU: st = weft_op_relu(c->f, &c->desc, P.t, out->t); break;
  case WEFT_OP_RELU_BACKWARD: st = weft_op_relu_backward(c->f, &c->desc, P.t, Q.t, out->t); break;
  case WEFT_OP_SCALE: st = weft_op_scale(c->f, &c->desc, ec->alpha, P.t, out->t); break;
  default: st = weft_op_axpy(c->f, &c->desc, ec->alpha, P.t, Q.t); break;
  }
  if (!op_ok(c, st, op_name)) goto done;
  check_written_location(c, out, "out");
  size_t n = P.n;
  float *got = tens_read(c, out, "out");
  float *want = malloc((n ? n : 1) * sizeof(float));
  double *ref = malloc((n ? n : 1) * sizeof(double)), *bound = malloc((n ? n : 1) * sizeof(double));
  if (got && want && ref && bound) {
    /* The reference writes its output in place of the right input when the op does. */
    if (ec->kind == WEFT_OP_AXPY) memcpy(want, Q.h, n * sizeof(float));
    weft_op op;
    memset(&op, 0, sizeof op);
    op.kind = ec->kind;
    op.contract = WEFT_CONTRACT_EXACT;
    op.in[0] = P.h, op.in[1] = has_q ? Q.h : NULL, op.out[0] = want;
    op.rows = cols ? (int64_t)(n / (size_t)cols) : 0, op.cols = cols;
    op.y_broadcast = ec->kind == WEFT_OP_ADD && ec->ymode != 0;
    op.alpha = ec->alpha;
    weft_reference_run(&op);
    for (size_t e = 0; e < n; e++) {
      double p = P.h[e], q = has_q ? Q.h[op.y_broadcast ? e % (size_t)cols : e] : 0, a = ec->alpha;
      switch (ec->kind) {
      case WEFT_OP_ADD: ref[e] = p + q, bound[e] = 2 * U24 * fabs(ref[e]) + TINY; break;
      case WEFT_OP_RELU: ref[e] = p != p ? p : (p > 0 ? p : 0), bound[e] = TINY; break;
      case WEFT_OP_RELU_BACKWARD: ref[e] = q > 0 ? p : 0, bound[e] = TINY; break;
      case WEFT_OP_SCALE: ref[e] = a * p, bound[e] = 2 * U24 * fabs(ref[e]) + TINY; break;
      default: ref[e] = a * p + q, bound[e] = 2 * U24 * (fabs(a * p) + fabs(q)) + TINY; break;
      }
    }
    compare(c, "out", out, got, c->exact ? want : NULL, ref, bound);
    if (out != &P) check_unchanged(c, &P, ec->kind == WEFT_OP_RELU_BACKWARD ? "grad" : "x");
    if (has_q && out != &Q) check_unchanged(c, &Q, ec->kind == WEFT_OP_RELU_BACKWARD ? "x" : "y");
  }
  free(got), free(want), free(ref), free(bound);
done:
  end_case(c);
  tens_free(&P), tens_free(&Q), tens_free(&O);
}

/* A random shape of rank `ndim` (batch dimensions small, the last two up to max_dim, at most ~64K elements). */
static void random_shape(ctx *c, int ndim, int64_t *dims) {
  for (int d = 0; d < ndim; d++) dims[d] = d < ndim - 2 ? tu_rng_int(&c->rng, 1, 3) : pick_dim(c, c->max_dim);
  for (int d = ndim - 1; numel_of(ndim, dims) > 65536; d = d == 0 ? ndim - 1 : d - 1) dims[d] = (dims[d] + 1) / 2;
}

static void ew_init(ew_case *ec, weft_op_kind kind, int ndim, const int64_t *dims) {
  memset(ec, 0, sizeof *ec);
  ec->kind = kind, ec->ndim = ndim;
  memcpy(ec->dims, dims, sizeof(int64_t) * (size_t)ndim);
  ec->alpha = 1.0f;
  ec->fill_p = ec->fill_q = FILL_UNIFORM;
}

static void cases_elementwise(ctx *c, weft_op_kind kind) {
  static const int64_t fixed[][4] = {{1, 0, 0, 0}, {7, 0, 0, 0}, {1, 1, 0, 0}, {3, 5, 0, 0}, {2, 3, 4, 0}, {2, 1, 3, 5}};
  static const int fixed_rank[] = {1, 1, 2, 2, 3, 4};
  static const int64_t empty[][4] = {{0, 3, 4, 0}, {2, 0, 3, 4}};
  static const int empty_rank[] = {3, 4};
  static const float alphas[] = {1.0f, 0.0f, -1.0f, 0.5f, 3.7f, -2.25e-3f};
  ew_case ec;
  const int nfixed = (int)(sizeof fixed_rank / sizeof fixed_rank[0]);
  for (int s = 0; s < nfixed; s++) {
    for (int inplace = 0; inplace < 2; inplace++) {
      if (inplace && (kind == WEFT_OP_AXPY)) continue;
      ew_init(&ec, kind, fixed_rank[s], fixed[s]);
      ec.inplace = inplace;
      ec.alpha = alphas[(s + inplace) % 6];
      ew_run(c, &ec);
      /* add: the bias forms, y = [n] and y = [1,n] broadcast over every row */
      if (kind == WEFT_OP_ADD && fixed_rank[s] >= 2)
        for (int ymode = 1; ymode <= 2; ymode++) {
          ec.ymode = ymode;
          ew_run(c, &ec);
        }
    }
  }
  for (int s = 0; s < 2; s++) {
    ew_init(&ec, kind, empty_rank[s], empty[s]);
    ew_run(c, &ec);
    if (kind == WEFT_OP_ADD) {
      ec.ymode = 1;
      ew_run(c, &ec);
    }
  }
  /* Special values in every operand (and, for scale and axpy, in alpha). */
  static const int64_t sp[2] = {9, 13};
  static const float special_alpha[] = {INFINITY, -0.0f, NAN, 1e-30f};
  for (int v = 0; v < 4; v++) {
    ew_init(&ec, kind, 2, sp);
    ec.fill_p = v & 1 ? FILL_SPECIAL : FILL_TINY;
    ec.fill_q = v & 2 ? FILL_SPECIAL : FILL_UNIFORM;
    ec.alpha = special_alpha[v];
    ec.inplace = kind != WEFT_OP_AXPY && v == 3;
    ew_run(c, &ec);
    if (kind == WEFT_OP_ADD) {
      ec.ymode = 1;
      ew_run(c, &ec);
    }
  }
  if (c->quick) return;
  for (int r = 0; r < (c->slow ? 4 : 8); r++) {
    int64_t dims[4];
    int ndim = (int)tu_rng_int(&c->rng, 1, 4);
    random_shape(c, ndim, dims);
    ew_init(&ec, kind, ndim, dims);
    ec.alpha = tu_rng_float(&c->rng, -4, 4);
    ec.inplace = kind != WEFT_OP_AXPY && tu_rng_int(&c->rng, 0, 1);
    if (kind == WEFT_OP_ADD && ndim >= 2) ec.ymode = (int)tu_rng_int(&c->rng, 0, 2);
    ew_run(c, &ec);
  }
}

/* ---------------------------------------------------------------------------------------- sum_rows */

static void sum_rows_run(ctx *c, int ndim, const int64_t *dims, int out_rank2, int fill) {
  const int64_t cols = dims[ndim - 1];
  int64_t od[2] = {1, cols};
  tens X, O;
  memset(&X, 0, sizeof X), memset(&O, 0, sizeof O);
  char sx[64], so[64];
  begin_case(c, "sum_rows x%s -> out%s", dims_str(sx, sizeof sx, ndim, dims),
             dims_str(so, sizeof so, out_rank2 ? 2 : 1, out_rank2 ? od : od + 1));
  if (!tens_new(c, &X, ndim, dims, fill) || !tens_new(c, &O, out_rank2 ? 2 : 1, out_rank2 ? od : od + 1, FILL_SENTINEL))
    goto done;
  if (!op_ok(c, weft_op_sum_rows(c->f, &c->desc, X.t, O.t), "weft_op_sum_rows")) goto done;
  check_written_location(c, &O, "out");
  float *got = tens_read(c, &O, "out");
  float *want = malloc((size_t)cols * sizeof(float));
  double *ref = malloc((size_t)cols * sizeof(double)), *bound = malloc((size_t)cols * sizeof(double));
  if (got && want && ref && bound) {
    const size_t rows = X.n / (size_t)cols;
    weft_op op;
    memset(&op, 0, sizeof op);
    op.kind = WEFT_OP_SUM_ROWS;
    op.in[0] = X.h, op.out[0] = want, op.rows = (int64_t)rows, op.cols = cols;
    weft_reference_run(&op);
    for (int64_t j = 0; j < cols; j++) {
      double s = 0, sa = 0;
      for (size_t i = 0; i < rows; i++) s += X.h[i * (size_t)cols + (size_t)j], sa += fabs(X.h[i * (size_t)cols + (size_t)j]);
      ref[j] = s;
      bound[j] = 2.0 * (double)(rows + 1) * U24 * sa + (double)(rows + 1) * TINY;
    }
    compare(c, "out", &O, got, c->exact ? want : NULL, ref, bound);
    if (c->exact && rows == 0)
      for (int64_t j = 0; j < cols; j++) /* no rows: every sum is the starting +0 */
        case_check(c, tu_bits(got[j]) == 0, "out[%lld] of an empty sum is 0x%08x, want +0", (long long)j, tu_bits(got[j]));
    check_unchanged(c, &X, "x");
  }
  free(got), free(want), free(ref), free(bound);
done:
  end_case(c);
  tens_free(&X), tens_free(&O);
}

static void cases_sum_rows(ctx *c) {
  static const int64_t fixed[][4] = {{1, 0, 0, 0}, {9, 0, 0, 0}, {1, 1, 0, 0}, {5, 1, 0, 0}, {7, 13, 0, 0},
                                     {3, 4, 5, 0}, {2, 3, 1, 6}, {0, 3, 4, 0}, {2, 0, 5, 3}};
  static const int rank[] = {1, 1, 2, 2, 2, 3, 4, 3, 4};
  for (size_t s = 0; s < sizeof rank / sizeof rank[0]; s++)
    for (int o = 0; o < 2; o++) sum_rows_run(c, rank[s], fixed[s], o, FILL_UNIFORM);
  static const int64_t sp[2] = {31, 7};
  sum_rows_run(c, 2, sp, 0, FILL_SPECIAL);
  sum_rows_run(c, 2, sp, 1, FILL_TINY);
  if (c->quick) return;
  for (int r = 0; r < (c->slow ? 4 : 8); r++) {
    int64_t dims[4];
    int ndim = (int)tu_rng_int(&c->rng, 1, 4);
    random_shape(c, ndim, dims);
    sum_rows_run(c, ndim, dims, (int)tu_rng_int(&c->rng, 0, 1), FILL_UNIFORM);
  }
  /* Tall: many rows into few columns (a reduction a lane may split across threads or workgroups). */
  int64_t tall[2] = {c->slow ? 256 : 3001, 3};
  sum_rows_run(c, 2, tall, 0, FILL_UNIFORM);
}

/* ------------------------------------------------------------------------------------ softmax_xent */

/* The fp32 bound for softmax_xent. Per row: d_j = z_j - max z, ls = log sum_j exp(d_j), lsm_j = d_j - ls,
 * p_j = exp(lsm_j). Rounding d_j, summing c terms and taking the log leave lsm_j off by at most about
 * u (|d_j| + |ls| + |lsm_j| + c + e), where e covers the few ulp of the lane's exp and log; exp turns that
 * into a relative error of p_j. With L_j = |d_j| + |ls| + |lsm_j| + c + 8 and a safety factor of four:
 *   grad_j: 4u L_j (p_j + |t_j|) / r                                 + 4 * 2^-126
 *   loss:   4u / r * sum_ij |t_ij| (L_ij + (c + r + 8)(1 + |lsm_ij|)) + 4 * 2^-126
 * (the second term of the loss is the rounding of the c products and r + c sums that make it). */
static void softmax_ref(const float *z, const float *t, int64_t rows, int64_t cols, double *loss, double *loss_bound,
                        double *grad, double *grad_bound) {
  double tot = 0, tb = 0;
  for (int64_t i = 0; i < rows; i++) {
    const float *zr = z + i * cols, *tr = t + i * cols;
    double mx = zr[0];
    for (int64_t j = 1; j < cols; j++) mx = zr[j] > mx ? zr[j] : mx;
    double s = 0;
    for (int64_t j = 0; j < cols; j++) s += exp((double)zr[j] - mx);
    double ls = log(s), acc = 0;
    for (int64_t j = 0; j < cols; j++) {
      double d = (double)zr[j] - mx, lsm = d - ls, p = exp(lsm);
      double L = fabs(d) + fabs(ls) + fabs(lsm) + (double)cols + 8;
      acc += tr[j] * lsm;
      grad[i * cols + j] = (p - tr[j]) / (double)rows;
      /* a -inf logit makes L infinite where p and t are 0: the term is then 0, not inf * 0 */
      const double pt = p + fabs(tr[j]);
      grad_bound[i * cols + j] = (pt != 0 ? 4 * U24 * L * pt / (double)rows : 0) + 4 * TINY;
      if (tr[j] != 0) tb += fabs(tr[j]) * (L + (double)(cols + rows + 8) * (1 + fabs(lsm)));
    }
    tot += -acc;
  }
  *loss = tot / (double)rows;
  *loss_bound = 4 * U24 * tb / (double)rows + 4 * TINY;
}

/* outputs: 1 loss only, 2 grad only, 3 both. */
static void softmax_run(ctx *c, int ndim, const int64_t *dims, int fill_z, int fill_t, int outputs) {
  const int64_t cols = dims[ndim - 1];
  const int64_t one = 1;
  tens Z, T, L, G;
  memset(&Z, 0, sizeof Z), memset(&T, 0, sizeof T), memset(&L, 0, sizeof L), memset(&G, 0, sizeof G);
  char sz[64];
  begin_case(c, "softmax_xent logits%s targets %s, %s", dims_str(sz, sizeof sz, ndim, dims),
             fill_t == FILL_ONEHOT ? "one-hot" : "soft", outputs == 1 ? "loss only" : outputs == 2 ? "grad only" : "loss and grad");
  if (!tens_new(c, &Z, ndim, dims, fill_z) || !tens_new(c, &T, ndim, dims, fill_t)) goto done;
  if ((outputs & 1) && !tens_new(c, &L, 1, &one, FILL_SENTINEL)) goto done;
  if ((outputs & 2) && !tens_new(c, &G, ndim, dims, FILL_SENTINEL)) goto done;
  if (!op_ran(c, weft_op_softmax_xent(c->f, &c->desc, Z.t, T.t, L.t, G.t), WEFT_OP_SOFTMAX_XENT, "weft_op_softmax_xent"))
    goto done;
  if (L.t) check_written_location(c, &L, "loss");
  if (G.t) check_written_location(c, &G, "grad");
  const int64_t rows = (int64_t)(Z.n / (size_t)cols);
  float want_loss = 0, *want_grad = malloc(Z.n * sizeof(float));
  double loss, loss_bound, *grad = malloc(Z.n * sizeof(double)), *grad_bound = malloc(Z.n * sizeof(double));
  if (want_grad && grad && grad_bound) {
    weft_op op;
    memset(&op, 0, sizeof op);
    op.kind = WEFT_OP_SOFTMAX_XENT;
    op.in[0] = Z.h, op.in[1] = T.h, op.out[0] = &want_loss, op.out[1] = want_grad;
    op.rows = rows, op.cols = cols, op.inv_rows = 1.0f / (float)rows;
    weft_reference_run(&op);
    softmax_ref(Z.h, T.h, rows, cols, &loss, &loss_bound, grad, grad_bound);
    if (L.t) {
      float *got = tens_read(c, &L, "loss");
      if (got) compare(c, "loss", &L, got, c->exact ? &want_loss : NULL, &loss, &loss_bound);
      free(got);
    }
    if (G.t) {
      float *got = tens_read(c, &G, "grad");
      if (got) compare(c, "grad", &G, got, c->exact ? want_grad : NULL, grad, grad_bound);
      free(got);
    }
    check_unchanged(c, &Z, "logits");
    check_unchanged(c, &T, "targets");
  }
  free(want_grad), free(grad), free(grad_bound);
done:
  end_case(c);
  tens_free(&Z), tens_free(&T), tens_free(&L), tens_free(&G);
}

static void cases_softmax(ctx *c) {
  static const int64_t fixed[][4] = {{1, 1}, {1, 7}, {5, 1}, {13, 10}, {64, 33}, {3, 2, 5}, {2, 2, 3, 4}};
  static const int rank[] = {2, 2, 2, 2, 2, 3, 4};
  for (size_t s = 0; s < sizeof rank / sizeof rank[0]; s++)
    for (int outputs = 1; outputs <= 3; outputs++)
      softmax_run(c, rank[s], fixed[s], FILL_LOGITS, s & 1 ? FILL_SOFT : FILL_ONEHOT, outputs);
  static const int64_t sp[2] = {16, 9};
  softmax_run(c, 2, sp, FILL_WIDE, FILL_SOFT, 3);
  softmax_run(c, 2, sp, FILL_SPECIAL, FILL_ONEHOT, 3);
  softmax_run(c, 2, sp, FILL_LOGITS, FILL_SPECIAL, 3);
  if (c->quick) return;
  for (int r = 0; r < (c->slow ? 4 : 8); r++) {
    int64_t dims[4];
    int ndim = (int)tu_rng_int(&c->rng, 2, 3);
    random_shape(c, ndim, dims);
    softmax_run(c, ndim, dims, FILL_LOGITS, tu_rng_int(&c->rng, 0, 1) ? FILL_SOFT : FILL_ONEHOT,
                (int)tu_rng_int(&c->rng, 1, 3));
  }
}

/* ------------------------------------------------------------------------------------------- NaNs */

/* FILL_NANS and FILL_INFZERO. Hardware differs in the NaN it makes: x86 keeps (and quiets) an input NaN's
 * payload and sign and makes 0xffc00000 for inf - inf or 0 * inf; GPUs make others. Under exact every lane
 * must store the canonical 0x7fc00000 instead, which these values expose. */
static float nan_fill_value(ctx *c, int fill) {
  static const uint32_t nans[] = {
      0x7fc00001u, /* quiet NaN with a payload */
      0xffc00000u, /* negative quiet NaN (x86's default NaN) */
      0x7f800001u, /* signalling NaN */
      0xff800001u, /* negative signalling NaN */
      0xffc00001u, /* negative quiet NaN with a payload */
      0x7fffffffu, /* every payload bit */
      0x7f800000u, /* +inf */
      0xff800000u, /* -inf */
      0x80000000u, /* -0 */
      0x00000000u, /* +0 */
  };
  static const uint32_t infzero[] = {0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u};
  if (fill == FILL_INFZERO)
    return tu_float(infzero[tu_rng_int(&c->rng, 0, (int64_t)(sizeof infzero / sizeof infzero[0]) - 1)]);
  if (tu_rng_int(&c->rng, 0, 3) != 0) return tu_rng_float(&c->rng, -1, 1);
  return tu_float(nans[tu_rng_int(&c->rng, 0, (int64_t)(sizeof nans / sizeof nans[0]) - 1)]);
}

/* Every op on inputs that make NaNs: NaN inputs of different payloads, signalling NaNs, inf - inf, 0 * inf
 * (in the products, and through alpha for scale and axpy). Under exact the outputs are compared bit for bit
 * with the reference, whose every NaN is 0x7fc00000; compare() also requires any NaN read back to be that
 * one. The matmul shapes take the tiny path, the packed path with edge tiles, and a k that crosses the CPU's
 * k-blocking (a NaN partial sum carried from one block to the next). */
static void cases_nan(ctx *c) {
  static const int fills[2] = {FILL_NANS, FILL_INFZERO};
  for (int fi = 0; fi < 2; fi++) {
    const int fill = fills[fi];
    mm_case mc;
    static const int64_t mm_shapes[][3] = {{5, 7, 3}, {13, 37, 29}, {20, 300, 35}}; /* m, k, n */
    for (size_t s = 0; s < sizeof mm_shapes / sizeof mm_shapes[0]; s++)
      for (int t = 0; t < 4; t += 3) {
        mm_case_init(&mc, 0, 1, 1, mm_shapes[s][0], mm_shapes[s][1], mm_shapes[s][2], t & 1, t >> 1);
        mc.fill_a = fill;
        mc.fill_b = s == 1 ? FILL_UNIFORM : fill;
        mm_run(c, &mc);
      }
    mm_case_init(&mc, 3, 3, 2, 6, 9, 5, 0, 0); /* batched, b shared */
    mc.fill_a = mc.fill_b = fill;
    mm_run(c, &mc);

    static const weft_op_kind ew[] = {WEFT_OP_ADD, WEFT_OP_RELU, WEFT_OP_RELU_BACKWARD, WEFT_OP_SCALE, WEFT_OP_AXPY};
    static const int64_t ew_shapes[][2] = {{9, 13}, {97, 65}};
    const float alphas[] = {0.0f, INFINITY, tu_float(0xffc00001u), 1.5f};
    for (size_t k = 0; k < sizeof ew / sizeof ew[0]; k++)
      for (size_t s = 0; s < 2; s++) {
        const int uses_alpha = ew[k] == WEFT_OP_SCALE || ew[k] == WEFT_OP_AXPY;
        for (int a = 0; a < (uses_alpha ? 4 : 1); a++) {
          ew_case ec;
          ew_init(&ec, ew[k], 2, ew_shapes[s]);
          ec.fill_p = fill;
          ec.fill_q = a & 1 ? FILL_UNIFORM : fill;
          ec.alpha = alphas[a];
          ew_run(c, &ec);
          if (ew[k] == WEFT_OP_ADD) { /* a broadcast bias row of NaNs */
            ec.ymode = 1;
            ew_run(c, &ec);
          }
        }
      }

    static const int64_t sr[2] = {37, 21};
    sum_rows_run(c, 2, sr, 0, fill);
    static const int64_t sx[2] = {16, 9};
    softmax_run(c, 2, sx, fill, FILL_ONEHOT, 3);
    softmax_run(c, 2, sx, FILL_LOGITS, fill, 3);
  }
}

/* --------------------------------------------------------------------------------------- residency */

/* The bookkeeping of where a tensor's current value lives: a host write after the lane computed with the
 * tensor must reach the lane, a lane-resident output must feed the next op without a host round trip, and
 * a host write over a lane-resident output must win. */
static void cases_residency(ctx *c) {
  const int64_t dims[2] = {5, 7};
  tens X, O, Q;
  memset(&X, 0, sizeof X), memset(&O, 0, sizeof O), memset(&Q, 0, sizeof Q);
  begin_case(c, "residency: relu x[5,7], write x, relu again; scale of a lane-resident output; write over it");
  if (!tens_new(c, &X, 2, dims, FILL_UNIFORM) || !tens_new(c, &O, 2, dims, FILL_SENTINEL) ||
      !tens_new(c, &Q, 2, dims, FILL_SENTINEL))
    goto done;
  float fresh[35], want[35], want2[35], *got;
  for (int round = 0; round < 2; round++) {
    if (round) {
      for (int e = 0; e < 35; e++) fresh[e] = tu_rng_float(&c->rng, -1, 1);
      case_check(c, weft_tensor_write(X.t, fresh, 35) == WEFT_OK, "weft_tensor_write: %s", weft_fabric_last_error(c->f));
      case_check(c, strcmp(weft_tensor_location(X.t), "host") == 0, "after weft_tensor_write x lives at '%s', not host",
                 weft_tensor_location(X.t));
      memcpy(X.h, fresh, sizeof fresh);
    }
    if (!op_ok(c, weft_op_relu(c->f, &c->desc, X.t, O.t), "weft_op_relu")) goto done;
    for (int e = 0; e < 35; e++) want[e] = X.h[e] > 0 ? X.h[e] : 0.0f;
    /* No read in between: O must go from the lane straight into the next op. */
    if (!op_ok(c, weft_op_scale(c->f, &c->desc, 2.0f, O.t, Q.t), "weft_op_scale")) goto done;
    check_written_location(c, &Q, "q");
    for (int e = 0; e < 35; e++) want2[e] = 2.0f * want[e];
    if ((got = tens_read(c, &Q, "q"))) {
      size_t bad = 0;
      /* relu and a scale by 2 round nothing: bits under exact, values (any zero sign) under fp32 */
      for (int e = 0; e < 35; e++) bad += c->exact ? !same_bits_exact(got[e], want2[e]) : got[e] != want2[e];
      case_check(c, bad == 0, "round %d: scale(relu(x)) differs from the host's in %zu of 35 elements%s", round, bad,
                 round ? " (a stale lane copy of x after weft_tensor_write?)" : "");
      free(got);
    }
  }
  for (int e = 0; e < 35; e++) fresh[e] = (float)e;
  case_check(c, weft_tensor_write(O.t, fresh, 35) == WEFT_OK, "weft_tensor_write over a lane output: %s",
             weft_fabric_last_error(c->f));
  if ((got = tens_read(c, &O, "o"))) {
    case_check(c, memcmp(got, fresh, sizeof fresh) == 0, "a host write over a lane-resident output did not win");
    free(got);
  }
done:
  end_case(c);
  tens_free(&X), tens_free(&O), tens_free(&Q);
}

/* ------------------------------------------------------------------------------- transformer ops */

/* The transformer ops (issue 22's set: embedding .. copy_slice) under the exact contract: every output bit
 * for bit against reference_tx.c's kernel run on host copies of the inputs (permute and copy_slice move
 * data only: against the host loop), every NaN the canonical 0x7fc00000. Inputs carry NaNs of several
 * payloads, +-inf, -0 and subnormals; shapes are GPT-2-like and small plus odd ones (C not a multiple of 8
 * or 32, T = 1, one crossentropy row of GPT-2's vocabulary of 50,257). A lane whose op set
 * (weft_lane_info.ops) leaves an op out is not asked to run it here: the op pinned there must be refused
 * (WEFT_ERR_UNSUPPORTED), and weft_conf_run prints the ops it skipped for that lane. An op the lane offers
 * but refuses for one case as beyond its size limits is a skipped case (op_ran). Under fp32 these ops are
 * not checked (no bound is stated for them). */

/* The ops the lane under test offers (the router: any lane that has not failed). */
static uint64_t lane_ops(ctx *c) {
  uint64_t ops = 0;
  for (size_t i = 0; i < weft_fabric_lane_count(c->f); i++) {
    if (c->desc.lane != WEFT_LANE_AUTO && (size_t)c->desc.lane != i) continue;
    weft_lane_info li;
    if (weft_fabric_lane_info(c->f, i, &li) != WEFT_OK || li.failed) continue;
    ops |= li.ops ? li.ops : WEFT_OPS_V1;
  }
  return ops;
}

typedef struct itens {
  weft_tensor *t;
  int32_t *h;
  size_t n;
} itens;

static int itens_new(ctx *c, itens *x, int ndim, const int64_t *dims, int64_t lo, int64_t hi) {
  memset(x, 0, sizeof *x);
  x->n = numel_of(ndim, dims);
  x->h = malloc((x->n ? x->n : 1) * sizeof(int32_t));
  if (!x->h) return 0;
  for (size_t e = 0; e < x->n; e++) x->h[e] = (int32_t)tu_rng_int(&c->rng, lo, hi);
  weft_status st = weft_tensor_create_typed(c->f, WEFT_DTYPE_I32, ndim, dims, x->h, &x->t);
  case_check(c, st == WEFT_OK, "weft_tensor_create_typed(i32): %s: %s", weft_status_str(st), weft_fabric_last_error(c->f));
  return st == WEFT_OK;
}

static void itens_free(itens *x) {
  weft_tensor_destroy(x->t);
  free(x->h);
  memset(x, 0, sizeof *x);
}

/* A float tensor of n elements whose host copy is `h` (taken). */
static float *copy_of(const tens *x) {
  float *p = malloc((x->n ? x->n : 1) * sizeof(float));
  if (p && x->n) memcpy(p, x->h, x->n * sizeof(float));
  return p;
}

/* out's value must have want's bits (n elements), every NaN the canonical one. */
static void compare_bits(ctx *c, const char *name, const tens *out, const float *want) {
  float *got = tens_read(c, out, name);
  if (!got || !want) {
    case_check(c, 0, "%s: no result to compare (read failed or out of host memory)", name);
    free(got);
    return;
  }
  size_t bad = 0;
  for (size_t e = 0; e < out->n; e++) {
    if (same_bits_exact(got[e], want[e]) && canonical_nan(got[e])) continue;
    if (bad++ < MAX_PRINT) {
      char at[64];
      coord_str(at, sizeof at, out, e);
      fprintf(LOG, "FAIL [%s/exact] %s: %s%s got 0x%08x (%.9g) want 0x%08x (%.9g) [%s]\n", c->lane_name, c->what, name,
              at, tu_bits(got[e]), got[e], tu_bits(want[e]), want[e],
              canonical_nan(got[e]) ? "bits vs reference_tx" : "a NaN must be the canonical 0x7fc00000");
    }
  }
  if (bad > MAX_PRINT)
    fprintf(LOG, "FAIL [%s/exact] %s: ... %zu of %zu elements of %s differ\n", c->lane_name, c->what, bad, out->n, name);
  c->st->elements += (long)out->n;
  tu_checks++;
  if (bad) {
    tu_failures++;
    c->failed = 1;
  }
  free(got);
}

static const char *fill_name(int fill) {
  switch (fill) {
  case FILL_NANS: return "nans";
  case FILL_INFZERO: return "inf/0";
  case FILL_TINY: return "subnormal";
  case FILL_SPECIAL: return "special";
  case FILL_WIDE: return "wide";
  case FILL_NEGZERO: return "-0";
  default: return "uniform";
  }
}

#define TX_FILLS 5
static const int tx_fills[TX_FILLS] = {FILL_UNIFORM, FILL_NANS, FILL_TINY, FILL_SPECIAL, FILL_INFZERO};
/* A slow lane (software Vulkan, a remote machine) gets the first three fills: NaN payloads, infinities, -0
 * and subnormals are all still in them. */
#define TX_NFILLS(c) ((c)->slow ? 3 : TX_FILLS)

static void cases_embedding(ctx *c) {
  static const int64_t shapes[][5] = {{2, 8, 32, 97, 8}, {1, 1, 33, 5, 3}, {3, 5, 13, 50, 11}}; /* B T C V P */
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int fi = 0; fi < TX_NFILLS(c); fi++)
      for (int use_pos = 0; use_pos < 2; use_pos++) {
        const int64_t B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3], P = shapes[s][4];
        const int fill = tx_fills[fi];
        const int64_t bt[2] = {B, T}, vc[2] = {V, C}, pc[2] = {P, C}, btc[3] = {B, T, C};
        tens W, Pw, O, DO, DW, DP;
        itens tok, pos;
        memset(&W, 0, sizeof W), memset(&Pw, 0, sizeof Pw), memset(&O, 0, sizeof O), memset(&DO, 0, sizeof DO);
        memset(&DW, 0, sizeof DW), memset(&DP, 0, sizeof DP), memset(&tok, 0, sizeof tok), memset(&pos, 0, sizeof pos);
        begin_case(c, "embedding B=%lld T=%lld C=%lld V=%lld P=%lld %s, %s, forward and backward", (long long)B,
                   (long long)T, (long long)C, (long long)V, (long long)P, use_pos ? "pos given" : "pos NULL",
                   fill_name(fill));
        float *want = NULL, *wdw = NULL, *wdp = NULL;
        if (!itens_new(c, &tok, 2, bt, 0, V - 1) || !itens_new(c, &pos, 2, bt, 0, P - 1) ||
            !tens_new(c, &W, 2, vc, fill) || !tens_new(c, &Pw, 2, pc, fill) || !tens_new(c, &O, 3, btc, FILL_SENTINEL) ||
            !tens_new(c, &DO, 3, btc, fill) || !tens_new(c, &DW, 2, vc, FILL_UNIFORM) || !tens_new(c, &DP, 2, pc, FILL_UNIFORM))
          goto done;
        if (!use_pos) /* pos NULL is pos[b,t] = t: T <= P in every shape here */
          for (size_t e = 0; e < pos.n; e++) pos.h[e] = (int32_t)((int64_t)e % T);
        want = malloc(O.n * sizeof(float)), wdw = copy_of(&DW), wdp = copy_of(&DP);
        if (!want || !wdw || !wdp) goto done;
        case_check(c, weft_ref_embedding_forward(want, tok.h, use_pos ? pos.h : NULL, W.h, Pw.h, B, T, C, V, P) == WEFT_OK,
                   "reference embedding refused the case");
        if (op_ran(c, weft_op_embedding(c->f, &c->desc, tok.t, use_pos ? pos.t : NULL, W.t, Pw.t, O.t), WEFT_OP_EMBEDDING, "weft_op_embedding"))
          compare_bits(c, "out", &O, want);
        /* backward: both tables, then one at a time (the other NULL) */
        int ran = 1;
        for (int which = 0; which < 3 && ran; which++) {
          float *dw = which == 2 ? NULL : wdw, *dp = which == 1 ? NULL : wdp;
          case_check(c, weft_ref_embedding_backward(dw, dp, DO.h, tok.h, use_pos ? pos.h : NULL, B, T, C, V, P) == WEFT_OK,
                     "reference embedding backward refused the case");
          if (!op_ran(c, weft_op_embedding_backward(c->f, &c->desc, DO.t, tok.t, use_pos ? pos.t : NULL,
                                                   which == 2 ? NULL : DW.t, which == 1 ? NULL : DP.t), WEFT_OP_EMBEDDING_BACKWARD,
                     "weft_op_embedding_backward"))
            ran = 0;
        }
        if (ran) {
          compare_bits(c, "dwte (accumulated 2x)", &DW, wdw);
          compare_bits(c, "dwpe (accumulated 2x)", &DP, wdp);
        }
        check_unchanged(c, &W, "wte");
        check_unchanged(c, &DO, "dout");
      done:
        end_case(c);
        free(want), free(wdw), free(wdp);
        tens_free(&W), tens_free(&Pw), tens_free(&O), tens_free(&DO), tens_free(&DW), tens_free(&DP);
        itens_free(&tok), itens_free(&pos);
      }
}

static void cases_layernorm(ctx *c) {
  static const int64_t shapes[][2] = {{16, 32}, {1, 1}, {7, 13}, {3, 769}, {5, 255}}; /* N, C */
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int fi = 0; fi < TX_NFILLS(c); fi++)
      for (int variant = 0; variant < 2; variant++) { /* 1: in place (y = x, dx = dy), mean and rstd NULL */
        const int64_t N = shapes[s][0], C = shapes[s][1], nc[2] = {N, C}, cc[1] = {C}, nn[1] = {N};
        const int fill = tx_fills[fi];
        tens X, G, Bt, Y, M, R, DY, DX, DG, DB;
        tens *all[] = {&X, &G, &Bt, &Y, &M, &R, &DY, &DX, &DG, &DB};
        for (size_t k = 0; k < 10; k++) memset(all[k], 0, sizeof(tens));
        float *wy = NULL, *wm = NULL, *wr = NULL, *wdx = NULL, *wdg = NULL, *wdb = NULL;
        begin_case(c, "layernorm N=%lld C=%lld %s%s, forward and backward", (long long)N, (long long)C, fill_name(fill),
                   variant ? ", in place, mean/rstd NULL in the forward" : "");
        if (!tens_new(c, &X, 2, nc, fill) || !tens_new(c, &G, 1, cc, fill == FILL_UNIFORM ? FILL_UNIFORM : FILL_SPECIAL) ||
            !tens_new(c, &Bt, 1, cc, fill) || !tens_new(c, &Y, 2, nc, FILL_SENTINEL) ||
            !tens_new(c, &M, 1, nn, FILL_SENTINEL) || !tens_new(c, &R, 1, nn, FILL_SENTINEL) ||
            !tens_new(c, &DY, 2, nc, fill) || !tens_new(c, &DX, 2, nc, FILL_SENTINEL) ||
            !tens_new(c, &DG, 1, cc, FILL_UNIFORM) || !tens_new(c, &DB, 1, cc, FILL_UNIFORM))
          goto done;
        wy = malloc(X.n * sizeof(float)), wm = malloc(N * sizeof(float)), wr = malloc(N * sizeof(float));
        wdx = malloc(X.n * sizeof(float)), wdg = copy_of(&DG), wdb = copy_of(&DB);
        if (!wy || !wm || !wr || !wdx || !wdg || !wdb) goto done;
        weft_ref_layernorm_forward(wy, wm, wr, X.h, G.h, Bt.h, N, C, 1e-5f);
        if (!variant) {
          if (op_ran(c, weft_op_layernorm(c->f, &c->desc, X.t, G.t, Bt.t, 1e-5f, Y.t, M.t, R.t), WEFT_OP_LAYERNORM, "weft_op_layernorm")) {
            compare_bits(c, "y", &Y, wy);
            compare_bits(c, "mean", &M, wm);
            compare_bits(c, "rstd", &R, wr);
            check_unchanged(c, &X, "x");
          }
        } else {
          /* in place on a copy of x: Y takes x's values */
          case_check(c, weft_tensor_write(Y.t, X.h, X.n) == WEFT_OK, "write y: %s", weft_fabric_last_error(c->f));
          if (op_ran(c, weft_op_layernorm(c->f, &c->desc, Y.t, G.t, Bt.t, 1e-5f, Y.t, NULL, NULL), WEFT_OP_LAYERNORM, "weft_op_layernorm in place"))
            compare_bits(c, "y (in place)", &Y, wy);
        }
        /* backward from the reference's mean and rstd */
        case_check(c, weft_tensor_write(M.t, wm, (size_t)N) == WEFT_OK && weft_tensor_write(R.t, wr, (size_t)N) == WEFT_OK,
                   "write mean/rstd: %s", weft_fabric_last_error(c->f));
        weft_ref_layernorm_backward(wdx, wdg, wdb, DY.h, X.h, wm, wr, G.h, N, C);
        if (!variant) {
          if (op_ran(c, weft_op_layernorm_backward(c->f, &c->desc, DY.t, X.t, M.t, R.t, G.t, DX.t, DG.t, DB.t), WEFT_OP_LAYERNORM_BACKWARD,
                    "weft_op_layernorm_backward")) {
            compare_bits(c, "dx", &DX, wdx);
            compare_bits(c, "dgamma (accumulated)", &DG, wdg);
            compare_bits(c, "dbeta (accumulated)", &DB, wdb);
            check_unchanged(c, &DY, "dy");
          }
        } else {
          if (op_ran(c, weft_op_layernorm_backward(c->f, &c->desc, DY.t, X.t, M.t, R.t, G.t, DY.t, NULL, NULL), WEFT_OP_LAYERNORM_BACKWARD,
                    "weft_op_layernorm_backward in place"))
            compare_bits(c, "dx (in place over dy)", &DY, wdx);
        }
      done:
        end_case(c);
        free(wy), free(wm), free(wr), free(wdx), free(wdg), free(wdb);
        for (size_t k = 0; k < 10; k++) tens_free(all[k]);
      }
}

static void cases_gelu(ctx *c) {
  static const int64_t sizes[] = {1, 7, 256, 1003};
  static const int fills[] = {FILL_UNIFORM, FILL_WIDE, FILL_NANS, FILL_TINY, FILL_SPECIAL, FILL_INFZERO, FILL_NEGZERO};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (size_t fi = 0; fi < sizeof fills / sizeof fills[0]; fi++)
      for (int variant = 0; variant < 3; variant++) { /* 0 fresh outputs, 1 in place (y = x, dx = x), 2 dx = dy */
        const int64_t n = sizes[s], d[2] = {1, n};
        tens X, DY, Y, DX;
        memset(&X, 0, sizeof X), memset(&DY, 0, sizeof DY), memset(&Y, 0, sizeof Y), memset(&DX, 0, sizeof DX);
        float *wy = NULL, *wdx = NULL;
        begin_case(c, "gelu n=%lld %s%s, forward and backward", (long long)n, fill_name(fills[fi]),
                   variant == 1 ? ", in place" : variant == 2 ? ", dx = dy" : "");
        if (!tens_new(c, &X, 2, d, fills[fi]) || !tens_new(c, &DY, 2, d, fi & 1 ? FILL_SPECIAL : FILL_UNIFORM) ||
            !tens_new(c, &Y, 2, d, FILL_SENTINEL) || !tens_new(c, &DX, 2, d, FILL_SENTINEL))
          goto done;
        wy = malloc(X.n * sizeof(float)), wdx = malloc(X.n * sizeof(float));
        if (!wy || !wdx) goto done;
        weft_ref_gelu_forward(wy, X.h, n);
        weft_ref_gelu_backward(wdx, X.h, DY.h, n);
        if (variant == 0) {
          if (op_ran(c, weft_op_gelu(c->f, &c->desc, X.t, Y.t), WEFT_OP_GELU, "weft_op_gelu")) compare_bits(c, "y", &Y, wy);
          if (op_ran(c, weft_op_gelu_backward(c->f, &c->desc, X.t, DY.t, DX.t), WEFT_OP_GELU_BACKWARD, "weft_op_gelu_backward")) {
            compare_bits(c, "dx", &DX, wdx);
            check_unchanged(c, &X, "x");
            check_unchanged(c, &DY, "dy");
          }
        } else if (variant == 1) {
          case_check(c, weft_tensor_write(Y.t, X.h, X.n) == WEFT_OK && weft_tensor_write(DX.t, X.h, X.n) == WEFT_OK,
                     "write: %s", weft_fabric_last_error(c->f));
          if (op_ran(c, weft_op_gelu(c->f, &c->desc, Y.t, Y.t), WEFT_OP_GELU, "weft_op_gelu in place")) compare_bits(c, "y (in place)", &Y, wy);
          if (op_ran(c, weft_op_gelu_backward(c->f, &c->desc, DX.t, DY.t, DX.t), WEFT_OP_GELU_BACKWARD, "weft_op_gelu_backward dx = x"))
            compare_bits(c, "dx (over x)", &DX, wdx);
        } else {
          if (op_ran(c, weft_op_gelu_backward(c->f, &c->desc, X.t, DY.t, DY.t), WEFT_OP_GELU_BACKWARD, "weft_op_gelu_backward dx = dy"))
            compare_bits(c, "dx (over dy)", &DY, wdx);
        }
      done:
        end_case(c);
        free(wy), free(wdx);
        tens_free(&X), tens_free(&DY), tens_free(&Y), tens_free(&DX);
      }
}

static void cases_attention(ctx *c) {
  static const int64_t shapes[][4] = {{2, 8, 32, 4}, {1, 1, 8, 2}, {1, 5, 12, 3}, {2, 7, 40, 5}, {1, 13, 36, 1}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int fi = 0; fi < TX_NFILLS(c); fi++)
      for (int with_pre = 0; with_pre < 2; with_pre++) {
        const int64_t B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
        const int64_t q[3] = {B, T, 3 * C}, o[3] = {B, T, C}, a[4] = {B, NH, T, T};
        const int fill = tx_fills[fi];
        tens Q, O, A, P, DO, DQ;
        memset(&Q, 0, sizeof Q), memset(&O, 0, sizeof O), memset(&A, 0, sizeof A), memset(&P, 0, sizeof P);
        memset(&DO, 0, sizeof DO), memset(&DQ, 0, sizeof DQ);
        float *wo = NULL, *wa = NULL, *wp = NULL, *wdq = NULL;
        begin_case(c, "attention B=%lld T=%lld C=%lld NH=%lld %s%s, forward and backward", (long long)B, (long long)T,
                   (long long)C, (long long)NH, fill_name(fill), with_pre ? ", preatt" : ", preatt NULL");
        /* NaNs and infinities in every q.k would make every row NaN: qkv gets the sparse specials */
        if (!tens_new(c, &Q, 3, q, fill == FILL_UNIFORM || fill == FILL_TINY ? fill : FILL_SPARSE) ||
            !tens_new(c, &O, 3, o, FILL_SENTINEL) || !tens_new(c, &A, 4, a, FILL_SENTINEL) ||
            !tens_new(c, &P, 4, a, FILL_SENTINEL) || !tens_new(c, &DO, 3, o, fill) || !tens_new(c, &DQ, 3, q, FILL_SENTINEL))
          goto done;
        if (fill == FILL_NANS || fill == FILL_INFZERO) /* and a few of the raw special values in q, k and v */
          for (size_t e = 0; e < Q.n; e += 17) Q.h[e] = nan_fill_value(c, fill);
        case_check(c, weft_tensor_write(Q.t, Q.h, Q.n) == WEFT_OK, "write qkv: %s", weft_fabric_last_error(c->f));
        wo = malloc(O.n * sizeof(float)), wa = malloc(A.n * sizeof(float)), wp = malloc(A.n * sizeof(float));
        wdq = malloc(Q.n * sizeof(float));
        if (!wo || !wa || !wp || !wdq) goto done;
        case_check(c, weft_ref_attention_forward(wo, wp, wa, Q.h, B, T, C, NH) == WEFT_OK, "reference attention refused");
        if (op_ran(c, weft_op_attention(c->f, &c->desc, Q.t, NH, O.t, A.t, with_pre ? P.t : NULL), WEFT_OP_ATTENTION, "weft_op_attention")) {
          compare_bits(c, "out", &O, wo);
          compare_bits(c, "att", &A, wa);
          if (with_pre) compare_bits(c, "preatt", &P, wp);
          check_unchanged(c, &Q, "qkv");
        }
        /* the backward from the reference's att */
        case_check(c, weft_tensor_write(A.t, wa, A.n) == WEFT_OK, "write att: %s", weft_fabric_last_error(c->f));
        case_check(c, weft_ref_attention_backward(wdq, DO.h, Q.h, wa, B, T, C, NH) == WEFT_OK,
                   "reference attention backward refused");
        if (op_ran(c, weft_op_attention_backward(c->f, &c->desc, DO.t, Q.t, A.t, NH, DQ.t), WEFT_OP_ATTENTION_BACKWARD, "weft_op_attention_backward"))
          compare_bits(c, "dqkv", &DQ, wdq);
      done:
        end_case(c);
        free(wo), free(wa), free(wp), free(wdq);
        tens_free(&Q), tens_free(&O), tens_free(&A), tens_free(&P), tens_free(&DO), tens_free(&DQ);
      }
}

/* Decode attention over a cache of Tmax positions, queries t0 .. t0+Tq-1: the cache's rows past t0+Tq-1 hold
 * NaNs with payloads (never read: a lane that reads them gets other bits). att given or NULL. */
static void cases_attention_cached(ctx *c) {
  static const int64_t shapes[][6] = {{2, 8, 32, 4, 0, 1}, {1, 9, 12, 3, 8, 1}, {2, 10, 40, 5, 3, 4},
                                      {1, 13, 36, 1, 0, 13}, {1, 6, 8, 2, 2, 3}, {2, 40, 24, 2, 30, 2}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int fi = 0; fi < TX_NFILLS(c); fi++)
      for (int with_att = 0; with_att < 2; with_att++) {
        const int64_t B = shapes[s][0], Tm = shapes[s][1], C = shapes[s][2], NH = shapes[s][3], t0 = shapes[s][4],
                      Tq = shapes[s][5];
        const int64_t q[3] = {B, Tm, 3 * C}, o[3] = {B, Tq, C}, a[4] = {B, NH, Tq, Tm};
        const int fill = tx_fills[fi];
        tens Q, O, A;
        memset(&Q, 0, sizeof Q), memset(&O, 0, sizeof O), memset(&A, 0, sizeof A);
        float *wo = NULL, *wa = NULL;
        begin_case(c, "attention_cached B=%lld Tmax=%lld C=%lld NH=%lld t0=%lld Tq=%lld %s%s", (long long)B,
                   (long long)Tm, (long long)C, (long long)NH, (long long)t0, (long long)Tq, fill_name(fill),
                   with_att ? ", att" : ", att NULL");
        if (!tens_new(c, &Q, 3, q, fill == FILL_UNIFORM || fill == FILL_TINY ? fill : FILL_SPARSE) ||
            !tens_new(c, &O, 3, o, FILL_SENTINEL) || !tens_new(c, &A, 4, a, FILL_SENTINEL))
          goto done;
        if (fill == FILL_NANS || fill == FILL_INFZERO)
          for (size_t e = 0; e < Q.n; e += 17) Q.h[e] = nan_fill_value(c, fill);
        for (int64_t b = 0; b < B; b++) /* the unfilled end of the cache */
          for (int64_t e = (t0 + Tq) * 3 * C; e < Tm * 3 * C; e++) {
            const uint32_t u = 0x7fa00000u + (uint32_t)(e & 0xff) + 1u;
            memcpy(&Q.h[b * Tm * 3 * C + e], &u, 4);
          }
        case_check(c, weft_tensor_write(Q.t, Q.h, Q.n) == WEFT_OK, "write qkv: %s", weft_fabric_last_error(c->f));
        wo = malloc(O.n * sizeof(float)), wa = malloc(A.n * sizeof(float));
        if (!wo || !wa) goto done;
        case_check(c, weft_ref_attention_cached(wo, wa, Q.h, B, Tm, C, NH, t0, Tq) == WEFT_OK,
                   "reference attention_cached refused");
        if (op_ran(c, weft_op_attention_cached(c->f, &c->desc, Q.t, NH, t0, O.t, with_att ? A.t : NULL),
                   WEFT_OP_ATTENTION_CACHED, "weft_op_attention_cached")) {
          compare_bits(c, "out", &O, wo);
          if (with_att) compare_bits(c, "att", &A, wa);
          else check_unchanged(c, &A, "att (not given)");
          check_unchanged(c, &Q, "qkv");
        }
      done:
        end_case(c);
        free(wo), free(wa);
        tens_free(&Q), tens_free(&O), tens_free(&A);
      }
}

static void cases_causal_softmax(ctx *c) {
  static const int64_t shapes[][2] = {{8, 8}, {3, 1}, {5, 13}, {2, 33}}; /* R, T */
  static const float scales[] = {0.25f, 1.0f, 0.17677669f};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int fi = 0; fi < TX_NFILLS(c); fi++)
      for (int inplace = 0; inplace < 2; inplace++) {
        const int64_t R = shapes[s][0], T = shapes[s][1], d[3] = {R, T, T};
        const float scale = scales[(s + (size_t)fi) % 3];
        const int fill = tx_fills[fi];
        tens S, P, DP, DS;
        memset(&S, 0, sizeof S), memset(&P, 0, sizeof P), memset(&DP, 0, sizeof DP), memset(&DS, 0, sizeof DS);
        float *wp = NULL, *wds = NULL;
        begin_case(c, "causal_softmax R=%lld T=%lld scale %g %s%s, forward and backward", (long long)R, (long long)T,
                   (double)scale, fill_name(fill), inplace ? ", in place" : "");
        if (!tens_new(c, &S, 3, d, fill == FILL_UNIFORM ? FILL_WIDE : fill) || !tens_new(c, &P, 3, d, FILL_SENTINEL) ||
            !tens_new(c, &DP, 3, d, fill) || !tens_new(c, &DS, 3, d, FILL_SENTINEL))
          goto done;
        wp = malloc(S.n * sizeof(float)), wds = malloc(S.n * sizeof(float));
        if (!wp || !wds) goto done;
        weft_ref_causal_softmax_forward(wp, S.h, R, T, scale);
        weft_ref_causal_softmax_backward(wds, wp, DP.h, R, T, scale);
        if (!inplace) {
          if (op_ran(c, weft_op_causal_softmax(c->f, &c->desc, S.t, scale, P.t), WEFT_OP_CAUSAL_SOFTMAX, "weft_op_causal_softmax"))
            compare_bits(c, "probs", &P, wp);
        } else {
          case_check(c, weft_tensor_write(P.t, S.h, S.n) == WEFT_OK, "write: %s", weft_fabric_last_error(c->f));
          if (op_ran(c, weft_op_causal_softmax(c->f, &c->desc, P.t, scale, P.t), WEFT_OP_CAUSAL_SOFTMAX, "weft_op_causal_softmax in place"))
            compare_bits(c, "probs (in place)", &P, wp);
        }
        case_check(c, weft_tensor_write(P.t, wp, P.n) == WEFT_OK, "write probs: %s", weft_fabric_last_error(c->f));
        if (op_ran(c, weft_op_causal_softmax_backward(c->f, &c->desc, P.t, DP.t, scale, inplace ? DP.t : DS.t), WEFT_OP_CAUSAL_SOFTMAX_BACKWARD,
                  "weft_op_causal_softmax_backward"))
          compare_bits(c, inplace ? "dscores (over dprobs)" : "dscores", inplace ? &DP : &DS, wds);
      done:
        end_case(c);
        free(wp), free(wds);
        tens_free(&S), tens_free(&P), tens_free(&DP), tens_free(&DS);
      }
}

static void cases_crossentropy(ctx *c) {
  static const int64_t shapes[][2] = {{16, 97}, {1, 1}, {5, 33}, {2, 50257}}; /* N, V; the last: GPT-2's vocabulary */
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int fi = 0; fi < TX_NFILLS(c); fi++) {
      const int64_t N = shapes[s][0], V = shapes[s][1], nv[2] = {N, V}, nn[1] = {N};
      const int fill = tx_fills[fi];
      if (V > 1000 && (c->quick || fi > 1)) continue; /* GPT-2's width: uniform and NaN rows, not in quick runs */
      tens L, LS, DL, DLG;
      itens TG;
      memset(&L, 0, sizeof L), memset(&LS, 0, sizeof LS), memset(&DL, 0, sizeof DL), memset(&DLG, 0, sizeof DLG);
      memset(&TG, 0, sizeof TG);
      float *wl = NULL, *wd = NULL;
      begin_case(c, "crossentropy N=%lld V=%lld %s, forward and backward", (long long)N, (long long)V, fill_name(fill));
      if (!tens_new(c, &L, 2, nv, fill == FILL_UNIFORM ? FILL_WIDE : fill) || !itens_new(c, &TG, 1, nn, 0, V - 1) ||
          !tens_new(c, &LS, 1, nn, FILL_SENTINEL) || !tens_new(c, &DL, 1, nn, fill == FILL_NANS ? FILL_NANS : FILL_UNIFORM) ||
          !tens_new(c, &DLG, 2, nv, FILL_SENTINEL))
        goto done;
      if (V > 1000 && fill == FILL_NANS) { /* GPT-2's width: keep most rows finite, one NaN in row 0 */
        for (size_t e = 0; e < L.n; e++) L.h[e] = tu_rng_float(&c->rng, -8, 8);
        L.h[12345] = tu_float(0xffc00001u);
        L.h[(size_t)V + 777] = INFINITY;
        case_check(c, weft_tensor_write(L.t, L.h, L.n) == WEFT_OK, "write logits: %s", weft_fabric_last_error(c->f));
      }
      wl = malloc(N * sizeof(float)), wd = malloc(L.n * sizeof(float));
      if (!wl || !wd) goto done;
      case_check(c, weft_ref_crossentropy_forward(wl, L.h, TG.h, N, V) == WEFT_OK, "reference crossentropy refused");
      case_check(c, weft_ref_crossentropy_backward(wd, L.h, TG.h, DL.h, N, V) == WEFT_OK,
                 "reference crossentropy backward refused");
      if (op_ran(c, weft_op_crossentropy(c->f, &c->desc, L.t, TG.t, LS.t), WEFT_OP_CROSSENTROPY, "weft_op_crossentropy"))
        compare_bits(c, "losses", &LS, wl);
      if (op_ran(c, weft_op_crossentropy_backward(c->f, &c->desc, L.t, TG.t, DL.t, DLG.t), WEFT_OP_CROSSENTROPY_BACKWARD, "weft_op_crossentropy_backward")) {
        compare_bits(c, "dlogits", &DLG, wd);
        check_unchanged(c, &L, "logits");
      }
    done:
      end_case(c);
      free(wl), free(wd);
      tens_free(&L), tens_free(&LS), tens_free(&DL), tens_free(&DLG);
      itens_free(&TG);
    }
}

/* weft_grad_clip over four gradients (n elements, one chunk + 3, 1000, 5), clipped: the norm and every
 * gradient against reference_tx's. */
static void clip_tensors(ctx *c, int64_t n) {
  enum { NT = 4 };
  const int64_t sz[NT] = {n, WEFT_SUMSQ_CHUNK + 3, 1000, 5};
  tens T[NT];
  float *w[NT] = {0};
  weft_tensor *gt[NT];
  memset(T, 0, sizeof T);
  int ok = 1;
  for (int k = 0; k < NT && ok; k++) {
    const int64_t d[1] = {sz[k]};
    ok = tens_new(c, &T[k], 1, d, FILL_UNIFORM) && (w[k] = copy_of(&T[k])) != NULL;
    gt[k] = T[k].t;
  }
  if (ok) {
    const float want = weft_ref_grad_clip(w, sz, NT, 0.5f);
    float norm = 0.0f;
    if (op_ran(c, weft_grad_clip(c->f, &c->desc, gt, NT, 0.5f, &norm), WEFT_OP_SUMSQ, "weft_grad_clip (4 tensors)")) {
      case_check(c, tu_bits(norm) == tu_bits(want), "grad_clip norm over 4 tensors 0x%08x, reference 0x%08x",
                 tu_bits(norm), tu_bits(want));
      for (int k = 0; k < NT; k++) compare_bits(c, "clipped grads (4 tensors)", &T[k], w[k]);
    }
  }
  for (int k = 0; k < NT; k++) free(w[k]), tens_free(&T[k]);
}

static void cases_adamw_sumsq(ctx *c, uint64_t ops) {
  static const int64_t sizes[] = {1, 37, 1000, 3 * WEFT_SUMSQ_CHUNK + 17}; /* sumsq: one chunk, and 3 + a tail */
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int fi = 0; fi < TX_NFILLS(c); fi++) {
      const int64_t n = sizes[s], d[1] = {n}, one[1] = {1};
      const int fill = tx_fills[fi];
      tens P, G, M, Vv, A;
      memset(&P, 0, sizeof P), memset(&G, 0, sizeof G), memset(&M, 0, sizeof M), memset(&Vv, 0, sizeof Vv);
      memset(&A, 0, sizeof A);
      float *wp = NULL, *wm = NULL, *wv = NULL;
      begin_case(c, "adamw and sumsq n=%lld %s", (long long)n, fill_name(fill));
      if (!tens_new(c, &P, 1, d, fill) || !tens_new(c, &G, 1, d, fill) || !tens_new(c, &M, 1, d, FILL_UNIFORM) ||
          !tens_new(c, &Vv, 1, d, FILL_SOFT) || !tens_new(c, &A, 1, one, FILL_UNIFORM))
        goto done;
      if (ops & WEFT_OP_BIT(WEFT_OP_ADAMW)) {
        wp = copy_of(&P), wm = copy_of(&M), wv = copy_of(&Vv);
        if (!wp || !wm || !wv) goto done;
        int ran = 1;
        for (int64_t step = 1; step <= 3 && ran; step += 2) { /* two steps, bias corrections of steps 1 and 3 */
          const float wd = step == 1 ? 0.1f : 0.0f;
          weft_ref_adamw(wp, G.h, wm, wv, n, 3e-4f, 0.9f, 0.999f, 1e-8f, wd, weft_ref_adamw_bias_correction(0.9f, step),
                         weft_ref_adamw_bias_correction(0.999f, step));
          if (!op_ran(c, weft_op_adamw(c->f, &c->desc, P.t, G.t, M.t, Vv.t, 3e-4f, 0.9f, 0.999f, 1e-8f, wd, step), WEFT_OP_ADAMW,
                     "weft_op_adamw"))
            ran = 0;
        }
        if (ran) {
          compare_bits(c, "param", &P, wp);
          compare_bits(c, "m", &M, wm);
          compare_bits(c, "v", &Vv, wv);
        }
        check_unchanged(c, &G, "grad");
      }
      if (ops & WEFT_OP_BIT(WEFT_OP_SUMSQ)) {
        const float acc = weft_ref_sumsq(G.h, n, A.h[0]); /* chunk partials added to acc in order */
        if (op_ran(c, weft_op_sumsq(c->f, &c->desc, G.t, A.t), WEFT_OP_SUMSQ, "weft_op_sumsq")) compare_bits(c, "acc", &A, &acc);
        /* the clip's norm (weft_grad_clip is sumsq + scale) against reference_tx's */
        if (ops & WEFT_OP_BIT(WEFT_OP_SCALE) && (fill == FILL_UNIFORM || fill == FILL_TINY)) { /* NaN grads: no clip, no canonical NaN */
          float *g2 = copy_of(&G);
          float *gl[1] = {g2};
          const int64_t sz[1] = {n};
          const float want_norm = g2 ? weft_ref_grad_clip(gl, sz, 1, 0.5f) : 0.0f;
          float norm = 0.0f;
          weft_tensor *gt[1] = {G.t};
          if (g2 && op_ran(c, weft_grad_clip(c->f, &c->desc, gt, 1, 0.5f, &norm), WEFT_OP_SUMSQ, "weft_grad_clip")) {
            case_check(c, tu_bits(norm) == tu_bits(want_norm), "grad_clip norm 0x%08x, reference 0x%08x", tu_bits(norm),
                       tu_bits(want_norm));
            compare_bits(c, "clipped grad", &G, g2);
          }
          free(g2);
        }
        /* the clip over several tensors (their chunk partials in parameter order, one accumulator) */
        if (ops & WEFT_OP_BIT(WEFT_OP_SCALE) && fill == FILL_UNIFORM && s + 1 == sizeof sizes / sizeof sizes[0])
          clip_tensors(c, n);
      }
    done:
      end_case(c);
      free(wp), free(wm), free(wv);
      tens_free(&P), tens_free(&G), tens_free(&M), tens_free(&Vv), tens_free(&A);
    }
}

static void cases_permute_copy(ctx *c, uint64_t ops) {
  static const int64_t shapes[][4] = {{2, 8, 4, 8}, {1, 1, 3, 5}, {3, 5, 7, 2}};
  static const int perms[][4] = {{0, 2, 1, 3}, {3, 2, 1, 0}, {1, 0, 3, 2}, {2, 0, 3, 1}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int rank = 2; rank <= 4; rank++)
      for (size_t p = 0; p < sizeof perms / sizeof perms[0] && (ops & WEFT_OP_BIT(WEFT_OP_PERMUTE)); p++) {
        int perm[4];
        if (rank == 4) memcpy(perm, perms[p], sizeof perm);
        else if (rank == 3) perm[0] = (int)(p % 3), perm[1] = (int)((p + 1 + p / 3) % 3), perm[2] = 3 - perm[0] - perm[1];
        else perm[0] = (int)(p & 1), perm[1] = 1 - perm[0];
        if (rank == 3 && perm[0] == perm[1]) continue;
        const int64_t *xd = shapes[s] + (4 - rank);
        int64_t yd[4];
        for (int a = 0; a < rank; a++) yd[a] = xd[perm[a]];
        tens X, Y;
        memset(&X, 0, sizeof X), memset(&Y, 0, sizeof Y);
        begin_case(c, "permute rank %d perm {%d,%d,%d,%d}, NaN payloads kept", rank, perm[0], perm[1], rank > 2 ? perm[2] : -1,
                   rank > 3 ? perm[3] : -1);
        float *want = NULL;
        if (!tens_new(c, &X, rank, xd, FILL_SPECIAL) || !tens_new(c, &Y, rank, yd, FILL_SENTINEL)) goto pdone;
        want = malloc(X.n * sizeof(float));
        if (!want) goto pdone;
        /* y[i0..] = x[j] with x's axis perm[a] at index i_a; data moves, so NaN payloads survive */
        int64_t xs[4] = {1, 1, 1, 1};
        for (int a = rank - 2; a >= 0; a--) xs[a] = xs[a + 1] * xd[a + 1];
        for (size_t e = 0; e < Y.n; e++) {
          size_t r = e, off = 0;
          for (int a = rank - 1; a >= 0; a--) {
            off += (r % (size_t)yd[a]) * (size_t)xs[perm[a]];
            r /= (size_t)yd[a];
          }
          want[e] = X.h[off];
        }
        if (op_ran(c, weft_op_permute(c->f, &c->desc, X.t, perm, Y.t), WEFT_OP_PERMUTE, "weft_op_permute")) {
          /* data movement keeps every bit: a NaN's payload too (compare_bits would want it canonical) */
          float *got = tens_read(c, &Y, "y");
          size_t bad = 0;
          for (size_t e = 0; got && e < Y.n; e++) bad += tu_bits(got[e]) != tu_bits(want[e]);
          case_check(c, got && bad == 0, "%zu of %zu elements of y are not x's permuted", bad, Y.n);
          c->st->elements += (long)Y.n;
          free(got);
        }
      pdone:
        end_case(c);
        free(want);
        tens_free(&X), tens_free(&Y);
      }
  /* copy_slice: a KV-cache append along each axis of a rank-3 tensor */
  for (int axis = 0; axis < 3 && (ops & WEFT_OP_BIT(WEFT_OP_COPY_SLICE)); axis++)
    for (int k = 0; k < 3; k++) {
      int64_t dd[3] = {3, 9, 5}, sd[3] = {3, 9, 5};
      sd[axis] = k == 0 ? 1 : k == 1 ? 2 : dd[axis];
      const int64_t offset = k == 0 ? dd[axis] - 1 : k == 1 ? 1 : 0;
      tens S, D;
      memset(&S, 0, sizeof S), memset(&D, 0, sizeof D);
      begin_case(c, "copy_slice src [%lld,%lld,%lld] into dst [3,9,5] axis %d offset %lld", (long long)sd[0],
                 (long long)sd[1], (long long)sd[2], axis, (long long)offset);
      float *want = NULL;
      if (!tens_new(c, &S, 3, sd, FILL_SPECIAL) || !tens_new(c, &D, 3, dd, FILL_UNIFORM)) goto cdone;
      want = copy_of(&D);
      if (!want) goto cdone;
      int64_t outer = 1, inner = 1;
      for (int a = 0; a < axis; a++) outer *= dd[a];
      for (int a = axis + 1; a < 3; a++) inner *= dd[a];
      for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < sd[axis]; i++)
          for (int64_t r = 0; r < inner; r++)
            want[(o * dd[axis] + offset + i) * inner + r] = S.h[(o * sd[axis] + i) * inner + r];
      if (op_ran(c, weft_op_copy_slice(c->f, &c->desc, S.t, D.t, axis, offset), WEFT_OP_COPY_SLICE, "weft_op_copy_slice")) {
        float *got = tens_read(c, &D, "dst");
        size_t bad = 0;
        for (size_t e = 0; got && e < D.n; e++) bad += tu_bits(got[e]) != tu_bits(want[e]);
        case_check(c, got && bad == 0, "%zu of %zu elements of dst differ from the host's copy", bad, D.n);
        c->st->elements += (long)D.n;
        free(got);
      }
    cdone:
      end_case(c);
      free(want);
      tens_free(&S), tens_free(&D);
    }
}

/* An op the lane does not offer, pinned there, must be refused (and the refusal name the op). */
static void check_not_offered(ctx *c, weft_op_kind kind) {
  const int64_t d[2] = {2, 3};
  tens X, Y;
  memset(&X, 0, sizeof X), memset(&Y, 0, sizeof Y);
  begin_case(c, "%s pinned to %s, which does not offer it", weft_op_kind_str(kind), c->lane_name);
  if (tens_new(c, &X, 2, d, FILL_UNIFORM) && tens_new(c, &Y, 2, d, FILL_SENTINEL)) {
    weft_status st = weft_op_gelu(c->f, &c->desc, X.t, Y.t);
    case_check(c, st == WEFT_ERR_UNSUPPORTED, "gelu pinned to a lane without it: got %s, want unsupported",
               weft_status_str(st));
    check_unchanged(c, &Y, "y");
  }
  end_case(c);
  tens_free(&X), tens_free(&Y);
}

static uint64_t family_seed(uint64_t seed, const char *family);

static void cases_tx(ctx *c, uint64_t seed) {
  const uint64_t ops = lane_ops(c);
  static const struct {
    const char *family;
    weft_op_kind kinds[2];
  } fams[] = {
      {"embedding", {WEFT_OP_EMBEDDING, WEFT_OP_EMBEDDING_BACKWARD}},
      {"layernorm", {WEFT_OP_LAYERNORM, WEFT_OP_LAYERNORM_BACKWARD}},
      {"gelu", {WEFT_OP_GELU, WEFT_OP_GELU_BACKWARD}},
      {"attention", {WEFT_OP_ATTENTION, WEFT_OP_ATTENTION_BACKWARD}},
      {"causal_softmax", {WEFT_OP_CAUSAL_SOFTMAX, WEFT_OP_CAUSAL_SOFTMAX_BACKWARD}},
      {"crossentropy", {WEFT_OP_CROSSENTROPY, WEFT_OP_CROSSENTROPY_BACKWARD}},
      {"adamw_sumsq", {WEFT_OP_ADAMW, WEFT_OP_SUMSQ}},
      {"permute_copy", {WEFT_OP_PERMUTE, WEFT_OP_COPY_SLICE}},
      {"attention_cached", {WEFT_OP_ATTENTION_CACHED, WEFT_OP_ATTENTION_CACHED}},
  };
  char skipped[512] = "";
  size_t used = 0;
  for (int k = WEFT_OP_V1_COUNT; k < WEFT_OP_COUNT; k++)
    if (!(ops & WEFT_OP_BIT(k)) && used < sizeof skipped)
      used += (size_t)snprintf(skipped + used, sizeof skipped - used, "%s%s", used ? ", " : "", weft_op_kind_str((weft_op_kind)k));
  if (skipped[0])
    printf("%s %-10s exact: not offered, skipped: %s\n", c->desc.lane == WEFT_LANE_AUTO ? "router" : "lane",
           c->desc.lane == WEFT_LANE_AUTO ? "(no lane)" : c->lane_name, skipped);
  if (!(ops & WEFT_OP_BIT(WEFT_OP_GELU)) && c->desc.lane != WEFT_LANE_AUTO) check_not_offered(c, WEFT_OP_GELU);
  for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
    const int both = (ops & WEFT_OP_BIT(fams[i].kinds[0])) && (ops & WEFT_OP_BIT(fams[i].kinds[1]));
    const int either = (ops & WEFT_OP_BIT(fams[i].kinds[0])) || (ops & WEFT_OP_BIT(fams[i].kinds[1]));
    c->rng.s = family_seed(seed, fams[i].family);
    switch (i) {
    /* a forward and its backward are checked together: both offered, or neither is run */
    case 0: if (both) cases_embedding(c); break;
    case 1: if (both) cases_layernorm(c); break;
    case 2: if (both) cases_gelu(c); break;
    case 3: if (both) cases_attention(c); break;
    case 4: if (both) cases_causal_softmax(c); break;
    case 5: if (both) cases_crossentropy(c); break;
    case 6: if (either) cases_adamw_sumsq(c, ops); break;
    case 7: if (either) cases_permute_copy(c, ops); break;
    default: if (either) cases_attention_cached(c); break;
    }
    if (!both && either && i < 6)
      printf("lane %-10s exact: %s offers only one of %s and %s: family skipped\n", c->lane_name, fams[i].family,
             weft_op_kind_str(fams[i].kinds[0]), weft_op_kind_str(fams[i].kinds[1]));
  }
}

/* ------------------------------------------------------------------------------------------- entry */

static uint64_t family_seed(uint64_t seed, const char *family) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = family; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  return seed ^ h;
}

void weft_conf_run(weft_fabric *f, int lane, weft_contract contract, int slow, int quick, uint64_t seed,
                   weft_conf_stats *stats) {
  ctx c;
  memset(&c, 0, sizeof c);
  c.f = f;
  c.desc.contract = contract;
  c.desc.lane = lane;
  c.exact = contract == WEFT_CONTRACT_EXACT;
  c.slow = slow, c.quick = quick;
  c.max_dim = slow ? 256 : 320;
  c.work_cap = slow ? 2e6 : 6e6;
  c.st = stats;
  weft_lane_info info;
  if (lane == WEFT_LANE_AUTO) snprintf(c.lane_name, sizeof c.lane_name, "auto");
  else if (weft_fabric_lane_info(f, (size_t)lane, &info) == WEFT_OK) snprintf(c.lane_name, sizeof c.lane_name, "%s", info.name);
  else snprintf(c.lane_name, sizeof c.lane_name, "lane %d", lane);
  /* Each family draws from its own stream so that adding cases to one leaves the others' shapes alone. */
  c.rng.s = family_seed(seed, "matmul");
  cases_matmul(&c);
  if (!quick) {
    c.rng.s = family_seed(seed, "matmul_large_k");
    cases_matmul_large_k(&c);
  }
  c.rng.s = family_seed(seed, "matmul_acc");
  if (lane_ops(&c) & WEFT_OP_BIT(WEFT_OP_MATMUL_ACC)) cases_matmul_acc(&c);
  else if (lane != WEFT_LANE_AUTO) {
    /* Pinned to a lane that does not offer it: refused, and c unchanged. */
    const int64_t d[2] = {2, 2};
    tens A, C;
    memset(&A, 0, sizeof A), memset(&C, 0, sizeof C);
    begin_case(&c, "matmul_acc pinned to %s, which does not offer it", c.lane_name);
    if (tens_new(&c, &A, 2, d, FILL_UNIFORM) && tens_new(&c, &C, 2, d, FILL_UNIFORM)) {
      weft_status st = weft_op_matmul_acc(f, &c.desc, A.t, 0, A.t, 0, C.t);
      case_check(&c, st == WEFT_ERR_UNSUPPORTED, "matmul_acc pinned to a lane without it: got %s, want unsupported",
                 weft_status_str(st));
      check_unchanged(&c, &C, "c");
    }
    end_case(&c);
    tens_free(&A), tens_free(&C);
  }
  static const weft_op_kind ew[] = {WEFT_OP_ADD, WEFT_OP_RELU, WEFT_OP_RELU_BACKWARD, WEFT_OP_SCALE, WEFT_OP_AXPY};
  for (size_t i = 0; i < sizeof ew / sizeof ew[0]; i++) {
    c.rng.s = family_seed(seed, weft_op_kind_str(ew[i]));
    cases_elementwise(&c, ew[i]);
  }
  c.rng.s = family_seed(seed, "sum_rows");
  cases_sum_rows(&c);
  c.rng.s = family_seed(seed, "softmax_xent");
  cases_softmax(&c);
  c.rng.s = family_seed(seed, "residency");
  cases_residency(&c);
  c.rng.s = family_seed(seed, "nan");
  cases_nan(&c);
  if (c.exact) cases_tx(&c, seed);
  /* What the lane refused as beyond its size limits (op_ran), listed like the ops it does not offer. */
  char skipped[768] = "";
  size_t used = 0;
  for (int k = 0; k < WEFT_OP_COUNT; k++)
    if (c.size_skips[k] && used < sizeof skipped)
      used += (size_t)snprintf(skipped + used, sizeof skipped - used, "%s%s (%ld)", used ? ", " : "",
                               weft_op_kind_str((weft_op_kind)k), c.size_skips[k]);
  if (skipped[0])
    printf("lane %-10s %-5s: beyond the lane's size limits (unsupported), skipped: %s\n", c.lane_name,
           weft_contract_str(contract), skipped);
}

/* ------------------------------------------------------------------------------------------- chain */

static void chain_one(ctx *c, const int *steps, const char *const *names, int scoped) {
  const int64_t xd[3] = {3, 17, 33}, wd[2] = {33, 9}, bd[1] = {9}, hd[3] = {3, 17, 9};
  tens X, W, B, H;
  memset(&X, 0, sizeof X), memset(&W, 0, sizeof W), memset(&B, 0, sizeof B), memset(&H, 0, sizeof H);
  begin_case(c, "chain%s matmul x[3,17,33].w[33,9] on %s -> add bias[9] on %s -> relu on %s", scoped ? " in a scope" : "",
             names[0], names[1], names[2]);
  if (!tens_new(c, &X, 3, xd, FILL_UNIFORM) || !tens_new(c, &W, 2, wd, FILL_UNIFORM) ||
      !tens_new(c, &B, 1, bd, FILL_UNIFORM) || !tens_new(c, &H, 3, hd, FILL_SENTINEL))
    goto done;
  if (scoped) case_check(c, weft_scope_begin(c->f) == WEFT_OK, "weft_scope_begin: %s", weft_fabric_last_error(c->f));
  weft_op_desc d = WEFT_OP_DESC_INIT;
  for (int s = 0; s < 3; s++) {
    d.lane = steps[s];
    c->desc.lane = steps[s];
    snprintf(c->lane_name, sizeof c->lane_name, "%s", names[s]);
    weft_status st = s == 0   ? weft_op_matmul(c->f, &d, X.t, 0, W.t, 0, H.t)
                     : s == 1 ? weft_op_add(c->f, &d, H.t, B.t, H.t)
                              : weft_op_relu(c->f, &d, H.t, H.t);
    if (!op_ok(c, st, s == 0 ? "matmul" : s == 1 ? "add" : "relu")) break;
    check_written_location(c, &H, "h");
    /* Inputs only read stay current on the host. */
    case_check(c, tu_contains(weft_tensor_location(X.t), "host"), "x (never written) lives at '%s', not on the host",
               weft_tensor_location(X.t));
  }
  /* Reading inside the scope flushes it. */
  float want[3 * 17 * 9];
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_MATMUL, op.in[0] = X.h, op.in[1] = W.h, op.out[0] = want;
  op.batch = 3, op.m = 17, op.n = 9, op.k = 33;
  weft_reference_run(&op);
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_ADD, op.in[0] = want, op.in[1] = B.h, op.out[0] = want, op.rows = 51, op.cols = 9, op.y_broadcast = 1;
  weft_reference_run(&op);
  op.kind = WEFT_OP_RELU, op.in[1] = NULL;
  weft_reference_run(&op);
  float *got = tens_read(c, &H, "h");
  if (got) {
    size_t bad = 0, first = 0;
    for (size_t e = 0; e < H.n; e++)
      if (!same_bits_exact(got[e], want[e]) && bad++ == 0) first = e;
    case_check(c, bad == 0, "%zu of %zu elements differ from the reference chain; first h[%zu] got 0x%08x want 0x%08x",
               bad, H.n, first, bad ? tu_bits(got[first]) : 0u, bad ? tu_bits(want[first]) : 0u);
    c->st->elements += (long)H.n;
    free(got);
  }
  if (scoped) case_check(c, weft_scope_end(c->f) == WEFT_OK, "weft_scope_end: %s", weft_fabric_last_error(c->f));
done:
  end_case(c);
  tens_free(&X), tens_free(&W), tens_free(&B), tens_free(&H);
}

void weft_conf_chain(weft_fabric *f, const int *lanes, int nlanes, uint64_t seed, weft_conf_stats *stats) {
  ctx c;
  memset(&c, 0, sizeof c);
  c.f = f;
  c.exact = 1;
  c.st = stats;
  c.rng.s = family_seed(seed, "chain");
  if (nlanes > 4) nlanes = 4;
  char names[4][64];
  for (int i = 0; i < nlanes; i++) {
    weft_lane_info info;
    if (lanes[i] == WEFT_LANE_AUTO || weft_fabric_lane_info(f, (size_t)lanes[i], &info) != WEFT_OK)
      snprintf(names[i], sizeof names[i], "auto");
    else snprintf(names[i], sizeof names[i], "%s", info.name);
  }
  /* Every sequence of three lanes: each step's input lives where the previous step left it. */
  for (int i = 0; i < nlanes; i++)
    for (int j = 0; j < nlanes; j++)
      for (int k = 0; k < nlanes; k++) {
        const int steps[3] = {lanes[i], lanes[j], lanes[k]};
        const char *const nm[3] = {names[i], names[j], names[k]};
        chain_one(&c, steps, nm, 0);
        chain_one(&c, steps, nm, 1);
      }
}

/* ------------------------------------------------------------------------------------------ driver */

/* An op pinned to a lane under a contract it does not honour must be refused, not run weaker. */
static void check_refused(weft_fabric *f, int lane, weft_contract contract, const char *name) {
  const int64_t dims[2] = {2, 3};
  weft_tensor *x = NULL, *y = NULL;
  weft_tensor_create(f, 2, dims, NULL, &x);
  weft_tensor_create(f, 2, dims, NULL, &y);
  weft_op_desc d = {contract, lane};
  weft_status st = weft_op_relu(f, &d, x, y);
  TU_CHECK(st == WEFT_ERR_UNSUPPORTED, "relu pinned to %s under '%s' (not honoured): got %s, want unsupported", name,
           weft_contract_str(contract), weft_status_str(st));
  TU_CHECK(tu_contains(weft_fabric_last_error(f), name), "the refusal does not name the lane: '%s'",
           weft_fabric_last_error(f));
  weft_tensor_destroy(x);
  weft_tensor_destroy(y);
}

static void add_stats(weft_conf_stats *total, const weft_conf_stats *s) {
  total->cases += s->cases, total->elements += s->elements, total->failed += s->failed, total->skipped += s->skipped;
}

void weft_conf_run_all(weft_fabric *f, uint64_t seed, weft_conf_stats *total) {
  static const weft_contract contracts[] = {WEFT_CONTRACT_EXACT, WEFT_CONTRACT_FP32};
  size_t nl = weft_fabric_lane_count(f);
  int exact_lanes[4], nexact = 0, any_slow = 0;
  weft_contract_mask any_contract = 0;
  for (size_t i = 0; i < nl; i++) {
    weft_lane_info info;
    if (weft_fabric_lane_info(f, i, &info) != WEFT_OK) continue;
    /* Only the CPU is known to be fast; every other lane (a software Vulkan driver, a remote machine) gets
     * dimensions <= 256 and fewer random cases. */
    const int slow = strcmp(info.kind, "cpu") != 0;
    any_slow |= slow;
    any_contract |= info.contracts;
    printf("lane %zu: %s (%s, %s%s%s)%s\n", i, info.name, info.kind, info.device, info.details[0] ? ", " : "",
           info.details, slow ? " [sizes <= 256]" : "");
    if (info.failed) {
      printf("skip: lane %s has failed and left the fabric\n", info.name);
      continue;
    }
    if ((info.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)) && nexact < 3) exact_lanes[nexact++] = (int)i;
    for (size_t ci = 0; ci < sizeof contracts / sizeof contracts[0]; ci++) {
      const weft_contract contract = contracts[ci];
      if (!(info.contracts & WEFT_CONTRACT_BIT(contract))) {
        printf("skip: lane %s does not honour the %s contract\n", info.name, weft_contract_str(contract));
        check_refused(f, (int)i, contract, info.name);
        continue;
      }
      weft_conf_stats s = {0, 0, 0, 0};
      const double t = tu_now();
      weft_conf_run(f, (int)i, contract, slow, 0, seed, &s);
      printf("lane %-10s %-5s: %4ld cases, %9ld elements, %ld failed, %ld skipped (%.2f s)\n", info.name,
             weft_contract_str(contract), s.cases, s.elements, s.failed, s.skipped, tu_now() - t);
      add_stats(total, &s);
    }
    for (int c = WEFT_CONTRACT_TF32; c < WEFT_CONTRACT_COUNT; c++)
      if (!(info.contracts & WEFT_CONTRACT_BIT(c))) check_refused(f, (int)i, (weft_contract)c, info.name);
  }
  /* The router must pick a lane that honours the contract; under exact any lane gives the same bits. */
  for (size_t ci = 0; ci < sizeof contracts / sizeof contracts[0]; ci++) {
    if (!(any_contract & WEFT_CONTRACT_BIT(contracts[ci]))) continue;
    weft_conf_stats s = {0, 0, 0, 0};
    const double t = tu_now();
    weft_conf_run(f, WEFT_LANE_AUTO, contracts[ci], any_slow, 1, seed, &s);
    printf("router     %-5s: %4ld cases, %9ld elements, %ld failed (%.2f s)\n", weft_contract_str(contracts[ci]),
           s.cases, s.elements, s.failed, tu_now() - t);
    add_stats(total, &s);
  }
  if (nexact > 0) {
    exact_lanes[nexact++] = WEFT_LANE_AUTO;
    weft_conf_stats s = {0, 0, 0, 0};
    const double t = tu_now();
    weft_conf_chain(f, exact_lanes, nexact, seed, &s);
    printf("chain      exact: %4ld cases, %9ld elements, %ld failed (%.2f s)\n", s.cases, s.elements, s.failed,
           tu_now() - t);
    add_stats(total, &s);
  }
}
