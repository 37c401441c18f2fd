/* model.c - the cost model's arithmetic: priors, prediction, the robust fit, online refinement. */
#include <math.h>
#include <string.h>

#include "cost.h"

#include "../core/optable.h"

const char *weft_cost_class_str(weft_cost_class cls) {
  static const char *const names[WEFT_COST_CLASS_COUNT] = {"matmul", "elementwise", "upload", "download"};
  return (unsigned)cls < WEFT_COST_CLASS_COUNT ? names[cls] : "?";
}

weft_cost_class weft_cost_op_work(const weft_op *op, double *out_work) {
  if (op->kind >= WEFT_OP_V1_COUNT && op->kind < WEFT_OP_COUNT) {
    /* the version-2 ops: the table's estimate (weighted elements) */
    *out_work = weft_optable[op->kind].work(op);
    return weft_optable[op->kind].cls;
  }
  if (op->kind == WEFT_OP_MATMUL) {
    *out_work = 2.0 * (double)op->batch * (double)op->m * (double)op->n * (double)op->k;
    return WEFT_COST_MATMUL;
  }
  double elems = (double)op->rows * (double)op->cols;
  /* softmax_xent evaluates two exps and a log per element: about eight elementwise ops' worth */
  *out_work = op->kind == WEFT_OP_SOFTMAX_XENT ? 8.0 * elems : elems;
  return WEFT_COST_ELEMENTWISE;
}

weft_cost_state *weft_cost_state_of(weft_lane_slot *s, weft_cost_class cls, weft_contract contract) {
  return &s->cost[cls][cls == WEFT_COST_MATMUL ? (int)contract : 0];
}

double weft_cost_base(const weft_cost_state *c, double work) {
  const weft_cost_line *l = &c->line;
  double line = l->alpha + (l->beta > 0 ? work / l->beta : 0.0);
  int n = c->npts;
  if (n < 2 || work <= 0) return line;
  const double *w = c->pw, *t = c->pt;
  if (work <= w[0]) /* below the smallest point: from alpha at no work up to that point */
    return l->alpha + (t[0] > l->alpha ? (t[0] - l->alpha) * (work / w[0]) : 0.0);
  if (work >= w[n - 1]) /* beyond the largest: that point plus the line's throughput */
    return t[n - 1] + (l->beta > 0 ? (work - w[n - 1]) / l->beta : 0.0);
  int j = 0;
  while (j < n - 2 && work > w[j + 1]) j++;
  return t[j] + (t[j + 1] - t[j]) * ((work - w[j]) / (w[j + 1] - w[j]));
}

double weft_cost_predict(const weft_cost_state *c, double work) { return weft_cost_base(c, work) * c->line.refine; }

#if defined(__GNUC__) && !defined(__clang__)
/* the shifts below are a few floats: a call to memmove would cost more than the moves */
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
int weft_cost_observe(weft_cost_state *c, double work, double seconds) {
  double pred = weft_cost_base(c, work);
  if (!(pred > 0) || !(seconds > 0)) return 0;
  float r = (float)(seconds / pred);
  /* This runs on every host-lane op, so the window is kept sorted incrementally: drop the oldest value
   * from the sorted copy, insert the new one, read the middle. */
  int n = c->nratio;
  if (n == WEFT_REFINE_N) {
    float old = c->ratio[c->pos];
    int i = 0;
    while (i < n - 1 && c->sorted[i] != old) i++;
    for (; i < n - 1; i++) c->sorted[i] = c->sorted[i + 1];
    n--;
  }
  int j = n;
  while (j > 0 && c->sorted[j - 1] > r) {
    c->sorted[j] = c->sorted[j - 1];
    j--;
  }
  c->sorted[j] = r;
  c->nratio = n + 1;
  c->ratio[c->pos] = r;
  c->pos = (c->pos + 1) % WEFT_REFINE_N;
  if (c->nratio < 3) return 0; /* a median of fewer than three is one observation's say */
  int m = c->nratio;
  c->line.refine = m % 2 ? c->sorted[m / 2] : 0.5 * (c->sorted[m / 2 - 1] + c->sorted[m / 2]);
  double mark = c->refine_mark > 0 ? c->refine_mark : 1.0;
  if (c->line.refine > mark * 1.05 || c->line.refine < mark / 1.05) {
    c->refine_mark = c->line.refine;
    return 1;
  }
  return 0;
}

/* Priors: deliberately plain guesses, used only until a lane is measured (or with calibration OFF). Host
 * lanes move no data; device lanes pay a launch and a bus. */
void weft_cost_init_lane(weft_lane_slot *s) {
  int host = (s->desc.flags & WEFT_LANE_HOST_MEMORY) != 0;
  for (int cls = 0; cls < WEFT_COST_CLASS_COUNT; cls++)
    for (int c = 0; c < WEFT_CONTRACT_COUNT; c++) {
      weft_cost_state *st = &s->cost[cls][c];
      memset(st, 0, sizeof *st);
      st->line.refine = 1.0;
      st->line.source = WEFT_COST_PRIOR;
      switch (cls) {
      case WEFT_COST_MATMUL:
        st->line.alpha = host ? 0.2e-6 : 20e-6;
        st->line.beta = host ? 20e9 : 1e12;
        break;
      case WEFT_COST_ELEMENTWISE:
        st->line.alpha = host ? 0.1e-6 : 20e-6;
        st->line.beta = host ? 1e9 : 50e9;
        break;
      default: /* transfers: free for host lanes */
        st->line.alpha = host ? 0.0 : 10e-6;
        st->line.beta = host ? 0.0 : 10e9;
        break;
      }
    }
}

int weft_cost_fit(const double *w, const double *t, int n, double *out_alpha, double *out_beta) {
  /* Weighted least squares on t = a + w*g with weights 1/t^2: every point counts by its relative error, so
   * the microsecond points fix alpha and the large ones fix beta. */
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  int used = 0;
  for (int i = 0; i < n; i++) {
    if (!(t[i] > 0) || !(w[i] >= 0)) continue;
    double wt = 1.0 / (t[i] * t[i]);
    s00 += wt, s01 += wt * w[i], s11 += wt * w[i] * w[i];
    r0 += wt * t[i], r1 += wt * w[i] * t[i];
    used++;
  }
  if (used < 2) return 0;
  double det = s00 * s11 - s01 * s01;
  double a = 0, g = 0;
  if (fabs(det) > 1e-300 * s00 * s11) {
    a = (r0 * s11 - r1 * s01) / det;
    g = (s00 * r1 - s01 * r0) / det;
  }
  if (!(a >= 0) || !(g > 0)) {
    /* A negative intercept or slope is noise winning: fall back to alpha = 0 (or the smallest time) and the
     * slope through the rest. */
    if (!(g > 0)) {
      double tmin = t[0];
      for (int i = 1; i < n; i++) tmin = t[i] < tmin ? t[i] : tmin;
      a = tmin;
      double num = 0, den = 0;
      for (int i = 0; i < n; i++) {
        double wt = 1.0 / (t[i] * t[i]);
        if (t[i] > a) num += wt * w[i] * (t[i] - a), den += wt * w[i] * w[i];
      }
      g = den > 0 && num > 0 ? num / den : 1e-18;
    } else {
      a = 0;
      g = r1 / s11;
    }
  }
  *out_alpha = a;
  *out_beta = 1.0 / g;
  return used;
}
