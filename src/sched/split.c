/* split.c - data-parallel splits of a batched matmul across lanes.
 *
 * Pass 1, the plan: for every lane that can run the op, a fixed cost c (wait, alpha, the transfers' own
 * alphas, the shared operand's upload if it is not there yet) and a per-entry cost r (compute, plus the
 * entry's upload and its result's download on device lanes). The makespan of a plan is max(c_i + s_i r_i)
 * over the lanes with a share s_i > 0; it is least when every used lane finishes together:
 * T = (B + sum c_i/r_i) / sum 1/r_i, s_i = (T - c_i) / r_i, and a lane with c_i >= T gets nothing (it is
 * dropped and T recomputed). Shares are rounded to whole entries.
 * Pass 2, the decision: the split is used only if its makespan beats the best single lane by 10%, the
 * margin that keeps model error from making a split lose.
 * Pass 3, the run: device lanes get their slices first (uploaded, dispatched, flushed so they start), the
 * host lane computes its slice on the caller's thread meanwhile, then the device slices come home into
 * the result. Every entry is computed by an exact kernel, so the bits are those of any single lane. */
#include "split.h"

#include <stdlib.h>
#include <string.h>

#include "../cost/cost.h"
#include "route.h"

void weft_split_free(weft_fabric *f) {
  free(f->split_shares);
  f->split_shares = NULL;
}

weft_status weft_split_last(weft_fabric *f, weft_split_report *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!f || !out) return WEFT_ERR_INVALID_ARGUMENT;
  if (f->split.batch == 0) return weft_fail(f, WEFT_ERR_STATE, "weft_split_last: no batched matmul was routed yet");
  *out = f->split;
  return WEFT_OK;
}

typedef struct lane_plan {
  int lane;
  double c, r;    /* fixed and per-entry seconds */
  int64_t share;
} lane_plan;

/* Water-filling over the lanes in `p` (n of them) for B entries; returns the makespan. */
static double plan_shares(lane_plan *p, int n, int64_t B) {
  int active[64];
  int na = 0;
  for (int i = 0; i < n; i++) active[na++] = i, p[i].share = 0;
  double T = 0;
  for (;;) {
    double num = (double)B, den = 0;
    for (int j = 0; j < na; j++) num += p[active[j]].c / p[active[j]].r, den += 1.0 / p[active[j]].r;
    T = num / den;
    int kept = 0;
    for (int j = 0; j < na; j++)
      if (p[active[j]].c < T) active[kept++] = active[j];
    if (kept == na || kept == 0) break;
    na = kept;
  }
  /* whole entries: floor each share, then hand the remainder one by one to whichever lane it delays least */
  int64_t given = 0;
  for (int j = 0; j < na; j++) {
    lane_plan *q = &p[active[j]];
    double s = (T - q->c) / q->r;
    q->share = s > 0 ? (int64_t)s : 0;
    given += q->share;
  }
  while (given < B) {
    int best = -1;
    double best_t = 0;
    for (int j = 0; j < na; j++) {
      lane_plan *q = &p[active[j]];
      double t = q->c + (double)(q->share + 1) * q->r;
      if (best < 0 || t < best_t) best = active[j], best_t = t;
    }
    p[best].share++;
    given++;
  }
  double makespan = 0;
  for (int i = 0; i < n; i++)
    if (p[i].share > 0 && p[i].c + (double)p[i].share * p[i].r > makespan) makespan = p[i].c + (double)p[i].share * p[i].r;
  return makespan;
}

weft_status weft_split_matmul(weft_fabric *f, weft_op *op, weft_tensor *a, weft_tensor *b, weft_tensor *c,
                              int *out_done) {
  *out_done = 0;
  const int64_t B = op->batch;
  if (B < 2 || f->in_scope || f->calibrating || !a->host_valid || !b->host_valid || f->nlanes > 64) return WEFT_OK;
  /* The same shape, with every lane idle and nothing in the models changed, was planned before and not
   * worth splitting on any count: that holds without planning again (a few microseconds on tiny ops). */
  weft_split_memo key = {B, op->m, op->n, op->k, (int)op->contract, op->trans_a, op->trans_b, op->b_batched,
                         a->where, b->where, f->route_epoch};
  const int idle = f->busy_max <= weft_fabric_now(f);
  if (idle && f->split_memo_valid && memcmp(&key, &f->split_memo, sizeof key) == 0) return WEFT_OK;
  int eligible = 0;
  for (size_t i = 0; i < f->nlanes; i++) eligible += weft_route_lane_can_run(f, (int)i, op, NULL);
  if (eligible < 2) return WEFT_OK;
  if (!f->models_ready) weft_cost_ensure(f);

  /* Pass 1: every eligible lane's fixed and per-entry cost. */
  lane_plan plan[64];
  memset(plan, 0, sizeof plan);
  int n = 0;
  const double entry_flops = 2.0 * (double)op->m * (double)op->n * (double)op->k;
  const double a_bytes = 4.0 * (double)op->m * (double)op->k, c_bytes = 4.0 * (double)op->m * (double)op->n;
  const double b_bytes = 4.0 * (double)op->k * (double)op->n;
  const double now = weft_fabric_now(f);
  for (size_t i = 0; i < f->nlanes; i++) {
    if (!weft_route_lane_can_run(f, (int)i, op, NULL)) continue;
    weft_lane_slot *s = &f->lanes[i];
    const weft_cost_state *mm = weft_cost_state_of(s, WEFT_COST_MATMUL, op->contract);
    lane_plan *q = &plan[n++];
    q->lane = (int)i;
    /* per entry: the predicted time of the whole batch on this lane, less alpha, shared out */
    q->c = (s->busy_until > now ? s->busy_until - now : 0.0) + mm->line.alpha * mm->line.refine;
    q->r = (weft_cost_predict(mm, entry_flops * (double)B) - mm->line.alpha * mm->line.refine) / (double)B;
    if (!weft_lane_is_host(f, (int)i)) {
      /* the shares move as slices of a and c: registered with the lane or not, as a and c are */
      const int x = weft_route_xfer(a, (int)i);
      const weft_cost_line *up = &s->cost[WEFT_COST_UPLOAD][x].line, *down = &s->cost[WEFT_COST_DOWNLOAD][x].line;
      q->c += up->alpha + down->alpha;
      if (op->b_batched) q->r += up->beta > 0 ? b_bytes / up->beta : 0;
      else if (!b->valid[i]) q->c += (up->beta > 0 ? b_bytes / up->beta : 0);
      q->r += (up->beta > 0 ? a_bytes / up->beta : 0) + (down->beta > 0 ? c_bytes / down->beta : 0);
    }
    if (q->r <= 0) q->r = 1e-12;
  }

  if (n < 2) return WEFT_OK;
  /* Pass 2: the best single lane against the best split. */
  int single = 0;
  for (int i = 1; i < n; i++)
    if (plan[i].c + (double)B * plan[i].r < plan[single].c + (double)B * plan[single].r) single = i;
  double single_t = plan[single].c + (double)B * plan[single].r;
  double makespan = plan_shares(plan, n, B);
  const double refine = f->split_refine > 0 ? f->split_refine : 1.0;
  makespan *= refine;
  int used = 0;
  for (int i = 0; i < n; i++) used += plan[i].share > 0;
  weft_split_share *shares = realloc(f->split_shares, (size_t)n * sizeof *shares);
  if (!shares) return WEFT_OK; /* no room to report a split: run it whole */
  f->split_shares = shares;
  memset(&f->split, 0, sizeof f->split);
  f->split.batch = B;
  f->split.predicted = makespan;
  f->split.predicted_single = single_t;
  f->split.single_lane = f->lanes[plan[single].lane].desc.name;
  f->split.shares = shares;
  if (used < 2 || makespan > 0.9 * single_t) {
    /* A plan that loses only by what earlier splits measured is tried again now and then: the lanes may
     * have changed since (memory registered, a cache warmed), and only a run shows it. */
    int blocked_by_refine = used >= 2 && makespan / refine <= 0.9 * single_t;
    if (!blocked_by_refine && idle) f->split_memo = key, f->split_memo_valid = 1;
    if (!blocked_by_refine || ++f->split_probe % 16 != 0) return WEFT_OK; /* one lane: the caller's dispatch */
  }

  /* Pass 3: run the shares. Device lanes first, each on its own slice tensors, started at once. The shares
   * work on the operands' host memory directly: queued host work on it is finished first. */
  weft_status qst = weft_hostq_finish(f);
  if (qst == WEFT_OK) qst = weft_tensor_wait_dma(c);
  if (qst != WEFT_OK) return qst;
  /* The shares cross as slices of the operands' host memory, made anew per split: the operands themselves
   * are offered for registration, so a device lane that takes them moves every slice without staging. */
  for (int i = 0; i < n; i++)
    if (plan[i].share > 0 && !weft_lane_is_host(f, plan[i].lane)) {
      weft_tensor_offer_host(a, plan[i].lane);
      if (op->b_batched) weft_tensor_offer_host(b, plan[i].lane);
      weft_tensor_offer_host(c, plan[i].lane);
    }
  const double t_start = weft_fabric_now(f);
  typedef struct running {
    int plan;
    int64_t first;
    weft_tensor *ta, *tb, *tc;
    double t0;
  } running;
  running run[64];
  int nrun = 0;
  int64_t first = 0;
  weft_status st = WEFT_OK;
  const size_t a_elems = (size_t)(op->m * op->k), b_elems = (size_t)(op->k * op->n), c_elems = (size_t)(op->m * op->n);
  int host_plan = -1;
  int64_t host_first = 0;
  for (int i = 0; i < n && st == WEFT_OK; i++) {
    lane_plan *q = &plan[i];
    if (q->share == 0) continue;
    if (weft_lane_is_host(f, q->lane) && host_plan < 0) {
      host_plan = i, host_first = first; /* runs below, while the devices work */
      first += q->share;
      continue;
    }
    running *r = &run[nrun++];
    memset(r, 0, sizeof *r);
    r->plan = i, r->first = first, r->t0 = weft_fabric_now(f);
    int64_t da[3] = {q->share, op->trans_a ? op->k : op->m, op->trans_a ? op->m : op->k};
    int64_t db[3] = {q->share, op->trans_b ? op->n : op->k, op->trans_b ? op->k : op->n};
    int64_t dc[3] = {q->share, op->m, op->n};
    /* slices of the operands' and the result's host copies, wrapped rather than copied */
    st = weft_tensor_wrap(f, 3, da, a->host + (size_t)first * a_elems, &r->ta);
    if (st == WEFT_OK && op->b_batched) st = weft_tensor_wrap(f, 3, db, b->host + (size_t)first * b_elems, &r->tb);
    if (st == WEFT_OK) st = weft_tensor_wrap(f, 3, dc, c->host + (size_t)first * c_elems, &r->tc);
    /* slices of registered memory move like it, straight over the bus */
    if (r->ta) r->ta->cover_mask = a->reg_mask;
    if (r->tb) r->tb->cover_mask = b->reg_mask;
    if (r->tc) r->tc->cover_mask = c->reg_mask;
    weft_op_desc d = {op->contract, q->lane};
    if (st == WEFT_OK) st = weft_op_matmul(f, &d, r->ta, op->trans_a, op->b_batched ? r->tb : b, op->trans_b, r->tc);
    weft_lane_slot *s = &f->lanes[q->lane];
    if (st == WEFT_OK && s->vt.flush) st = s->vt.flush(s->self);
    first += q->share;
  }
  /* The host lane's share, straight on the host copies. */
  if (st == WEFT_OK && host_plan >= 0) {
    lane_plan *q = &plan[host_plan];
    weft_lane_slot *s = &f->lanes[q->lane];
    weft_op sub = *op;
    sub.batch = q->share;
    sub.in[0] = a->host + (size_t)host_first * a_elems;
    sub.in[1] = op->b_batched ? b->host + (size_t)host_first * b_elems : b->host;
    sub.out[0] = c->host + (size_t)host_first * c_elems;
    double t0 = weft_fabric_now(f);
    st = s->vt.run(s->self, &sub);
    double t1 = weft_fabric_now(f);
    if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, q->lane);
    s->stats.ops[WEFT_OP_MATMUL]++;
    s->stats.seconds += t1 - t0;
    weft_split_share *sh = &shares[f->split.nshares++];
    sh->lane = s->desc.name, sh->first = host_first, sh->entries = q->share;
    sh->predicted = q->c + (double)q->share * q->r, sh->seconds = t1 - t0;
  }
  /* The device shares come home into the result's host copy. */
  for (int j = 0; j < nrun; j++) {
    running *r = &run[j];
    lane_plan *q = &plan[r->plan];
    if (st == WEFT_OK) st = weft_tensor_read(r->tc, c->host + (size_t)r->first * c_elems, (size_t)q->share * c_elems);
    weft_split_share *sh = &shares[f->split.nshares++];
    sh->lane = f->lanes[q->lane].desc.name, sh->first = r->first, sh->entries = q->share;
    sh->predicted = q->c + (double)q->share * q->r, sh->seconds = weft_fabric_now(f) - r->t0;
    weft_tensor_destroy(r->ta), weft_tensor_destroy(r->tb), weft_tensor_destroy(r->tc);
  }
  if (st != WEFT_OK) return st; /* the caller's dispatch may try again on one lane */
  weft_tensor_mark_written(c, -1);
  f->split.split = 1;
  f->split.seconds = weft_fabric_now(f) - t_start;
  /* learn from it: measured against the plan's own (unrefined) makespan */
  double ratio = f->split.seconds / (makespan / refine);
  f->split_ratio[f->split_pos] = (float)ratio;
  f->split_pos = (f->split_pos + 1) % 5;
  if (f->split_nratio < 5) f->split_nratio++;
  float sorted[5];
  memcpy(sorted, f->split_ratio, sizeof sorted);
  for (int i = 1; i < f->split_nratio; i++)
    for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
      float t = sorted[j];
      sorted[j] = sorted[j - 1], sorted[j - 1] = t;
    }
  /* one split is evidence enough to stop trusting a plan that lost; a median needs three to forgive */
  f->split_refine = f->split_nratio < 3 ? (ratio > refine ? ratio : refine) : sorted[f->split_nratio / 2];
  *out_done = 1;
  return WEFT_OK;
}
