/* split.c - data-parallel splits of a batched matmul across lanes.
 *
 * Pass 1, the plan: for every lane that can run the op, a fixed cost c (wait, alpha, the transfers' own
 * alphas, the shared operand's upload if it is not there yet) and a per-entry cost r (compute, plus the
 * entry's upload and its result's download on device lanes), both scaled by what the lane measured the
 * last time it ran a share of this signature beside the others (its factor: measured / predicted). The
 * makespan of a plan is max(c_i + s_i r_i) over the lanes with a share s_i > 0; it is least when every used
 * lane finishes together: T = (B + sum c_i/r_i) / sum 1/r_i, s_i = (T - c_i) / r_i, and a lane with
 * c_i >= T gets nothing (it is dropped and T recomputed). Shares are rounded to whole entries.
 * Pass 2, the decision: a split is tried only if its makespan beats the best single lane by 10%. Models
 * cannot see lanes contending for the host's memory or cores, so what decides in the end is measurement:
 * each signature's split and the lane the router would pick alone are both timed (the single lane now and
 * then, through the same path the op takes unsplit), and the split is kept while it wins by 3%.
 * Pass 3, the run: device lanes get their slices first (uploaded, dispatched, flushed so they start), the
 * host lane computes its slice on the caller's thread meanwhile, then the device slices come home into
 * the result. Every entry is computed by an exact kernel, so the bits are those of any single lane. */
#include "split.h"

#include <math.h>
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
  double c, r;    /* fixed and per-entry seconds, as planned (scaled by the lane's measured factor) */
  double c0, r0;  /* the same from the models alone */
  int64_t share;
  double seconds; /* measured: the share's time */
  int exact;      /* 1: the share was still running when waited for, so `seconds` is its time; 0: at most */
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

/* The track of a signature (created, taking the least recently used slot, when `make`); NULL if none. */
static weft_split_track *track_of(weft_fabric *f, const weft_split_memo *key, int make) {
  if (!f->split_tracks) {
    if (!make) return NULL;
    f->split_tracks = calloc(WEFT_SPLIT_TRACKS, sizeof *f->split_tracks);
    if (!f->split_tracks) return NULL;
  }
  weft_split_track *oldest = &f->split_tracks[0];
  for (int i = 0; i < WEFT_SPLIT_TRACKS; i++) {
    weft_split_track *t = &f->split_tracks[i];
    if (t->stamp && memcmp(&t->key, key, sizeof *key) == 0) {
      t->stamp = ++f->split_clock;
      return t;
    }
    if (t->stamp < oldest->stamp) oldest = t;
  }
  if (!make) return NULL;
  memset(oldest, 0, sizeof *oldest);
  oldest->key = *key;
  oldest->stamp = ++f->split_clock;
  return oldest;
}

static double best_of(const double *t, int n) {
  double b = 0;
  for (int i = 0; i < n && i < WEFT_SPLIT_SAMPLES; i++)
    if (i == 0 || t[i] < b) b = t[i];
  return b;
}

/* A new wall time for the split (or the single lane), and the verdict it leads to: the split is kept while
 * its best recent run beats the single lane's best recent run by 3% (two of each are needed to judge). */
static void track_note(weft_split_track *tr, int split, double seconds) {
  if (split) tr->t_split[tr->n_split++ % WEFT_SPLIT_SAMPLES] = seconds;
  else tr->t_single[tr->n_single++ % WEFT_SPLIT_SAMPLES] = seconds;
  if (tr->n_split >= 2 && tr->n_single >= 2)
    tr->verdict = best_of(tr->t_split, tr->n_split) < 0.97 * best_of(tr->t_single, tr->n_single) ? 1 : -1;
}

static void report_measured(weft_fabric *f, const weft_split_track *tr) {
  f->split.measured_split = tr ? best_of(tr->t_split, tr->n_split) : 0;
  f->split.measured_single = tr ? best_of(tr->t_single, tr->n_single) : 0;
}

/* Pass 3: the shares in `plan` (those with entries), each timed. The operands' host memory is used
 * directly: queued host work on it is finished first. */
static weft_status run_shares(weft_fabric *f, const weft_op *op, weft_tensor *a, weft_tensor *b, weft_tensor *c,
                              lane_plan *plan, int n) {
  weft_status st = weft_hostq_finish(f);
  if (st == WEFT_OK) st = weft_tensor_wait_dma(c);
  if (st != WEFT_OK) return st;
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
    q->seconds = t1 - t0, q->exact = 1;
    weft_split_share *sh = &f->split_shares[f->split.nshares++];
    sh->lane = s->desc.name, sh->first = host_first, sh->entries = q->share;
    sh->predicted = q->c + (double)q->share * q->r, sh->seconds = t1 - t0;
  }
  /* The device shares come home into the result's host copy. A share still running when it is waited for
   * measured its own time; one already done measured only an upper bound. */
  for (int j = 0; j < nrun; j++) {
    running *r = &run[j];
    lane_plan *q = &plan[r->plan];
    double w0 = weft_fabric_now(f);
    if (st == WEFT_OK) st = weft_tensor_read(r->tc, c->host + (size_t)r->first * c_elems, (size_t)q->share * c_elems);
    double w1 = weft_fabric_now(f);
    q->seconds = w1 - r->t0;
    q->exact = w1 - w0 > 20e-6 && w1 - w0 > 0.02 * (w1 - t_start);
    weft_split_share *sh = &f->split_shares[f->split.nshares++];
    sh->lane = f->lanes[q->lane].desc.name, sh->first = r->first, sh->entries = q->share;
    sh->predicted = q->c + (double)q->share * q->r, sh->seconds = q->seconds;
    weft_tensor_destroy(r->ta), weft_tensor_destroy(r->tb), weft_tensor_destroy(r->tc);
  }
  if (st != WEFT_OK) return st; /* the caller's dispatch may try again on one lane */
  weft_tensor_mark_written(c, -1);
  f->split.seconds = weft_fabric_now(f) - t_start;
  return WEFT_OK;
}

/* The single lane, measured the way the op runs unsplit: dispatched to the lane the router picks, then
 * its result brought home (where the caller reads it). */
static weft_status run_single(weft_fabric *f, weft_op *op, weft_tensor *a, weft_tensor *b, weft_tensor *c,
                              double *out_seconds) {
  double work;
  weft_cost_class cls = weft_cost_op_work(op, &work);
  weft_tensor *in[2] = {a, b};
  const double t0 = weft_fabric_now(f);
  int lane = weft_route_decide(f, op, cls, work, t0, in, 2);
  if (lane < 0) return WEFT_ERR_UNSUPPORTED;
  weft_op_desc d = {op->contract, lane};
  weft_status st = weft_op_matmul(f, &d, a, op->trans_a, b, op->trans_b, c);
  if (st == WEFT_OK) st = weft_tensor_read(c, c->host, c->numel);
  *out_seconds = weft_fabric_now(f) - t0;
  f->split.single_lane = f->lanes[lane].desc.name;
  f->split.seconds = *out_seconds;
  return st;
}

weft_status weft_split_matmul(weft_fabric *f, weft_op *op, weft_tensor *a, weft_tensor *b, weft_tensor *c,
                              int *out_done) {
  *out_done = 0;
  const int64_t B = op->batch;
  if (B < 2 || f->in_scope || f->calibrating || !a->host_valid || !b->host_valid || !c->host || f->nlanes > 64)
    return WEFT_OK;
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
  /* what earlier splits of this signature measured: keyed by where the operands' memory is registered
   * too, since that changes what moving them costs */
  weft_split_memo tkey = key;
  tkey.epoch = a->reg_mask ^ (c->reg_mask * 0x9e3779b97f4a7c15ull) ^ (b->reg_mask << 1);
  weft_split_track *tr = track_of(f, &tkey, 0);

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
    q->c = mm->line.alpha * mm->line.refine;
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
    q->c0 = q->c, q->r0 = q->r;
    const double k = tr && i < 64 && tr->k[i] > 0 ? tr->k[i] : 1.0;
    q->c *= k, q->r *= k;
    q->c += s->busy_until > now ? s->busy_until - now : 0.0; /* the wait is no model's to scale */
  }

  if (n < 2) return WEFT_OK;
  /* Pass 2: the best single lane against the best split. */
  int single = 0;
  for (int i = 1; i < n; i++)
    if (plan[i].c + (double)B * plan[i].r < plan[single].c + (double)B * plan[single].r) single = i;
  double single_t = plan[single].c + (double)B * plan[single].r;
  double makespan = plan_shares(plan, n, B);
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
  report_measured(f, tr);
  if (used < 2 || makespan > 0.9 * single_t) {
    if (idle) f->split_memo = key, f->split_memo_valid = 1;
    return WEFT_OK; /* one lane: the caller's dispatch */
  }
  if (!tr && !(tr = track_of(f, &tkey, 1))) return WEFT_OK;
  /* Measured, the split lost: the op runs on one lane, and every 16th time the split is tried again (the
   * lanes may have changed since: memory registered, another lane's load gone). Not yet judged: two
   * splits (the second with shares corrected by what the first measured), then the single lane, in turn
   * until there are two of each. Judged a win: the single lane is measured again every 32nd time. */
  int split_now = 1;
  if (tr->verdict < 0) {
    if (++tr->since % 16 != 0) return WEFT_OK;
  } else if (tr->verdict == 0) {
    split_now = tr->n_split < 2 || tr->n_single >= tr->n_split - 1;
  } else if (++tr->since % 32 == 0) {
    split_now = 0;
  }
  if (!split_now) {
    double t = 0;
    weft_status st = run_single(f, op, a, b, c, &t);
    if (st != WEFT_OK) return st;
    track_note(tr, 0, t);
    report_measured(f, tr);
    *out_done = 1;
    return WEFT_OK;
  }

  weft_status st = run_shares(f, op, a, b, c, plan, n);
  if (st != WEFT_OK) return st;
  f->split.split = 1;
  /* learn from it: each lane's measured time against its model's prediction for the share it had */
  for (int i = 0; i < n; i++) {
    lane_plan *q = &plan[i];
    if (q->share == 0 || q->lane >= 64) continue;
    double pred = q->c0 + (double)q->share * q->r0;
    if (pred <= 0 || q->seconds <= 0) continue;
    double kn = q->seconds / pred;
    kn = kn < 0.02 ? 0.02 : kn > 50 ? 50 : kn;
    float *k = &tr->k[q->lane];
    if (q->exact) *k = *k > 0 ? (float)sqrt(*k * kn) : (float)kn; /* damped: shares move, so does contention */
    else if (*k == 0 || kn < *k) *k = (float)kn;
  }
  track_note(tr, 1, f->split.seconds);
  report_measured(f, tr);
  *out_done = 1;
  return WEFT_OK;
}
