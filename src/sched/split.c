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
 * each signature's split and the lanes near the best are timed (a lane through the same path the op takes
 * unsplit), the split is kept while it wins by 3%, and the others are timed again now and then (see
 * track_pick and cand_interval).
 * A matmul of one matrix (B = 1) on host data takes the same measured path between its lanes within 3x,
 * never split: the router's refinement corrects only the lane that ran.
 * Pass 3, the run: device lanes get their slices first (uploaded, dispatched, flushed so they start), the
 * host lane computes its slice on the caller's thread meanwhile, then the device slices come home into
 * the result. Every entry is computed by an exact kernel, so the bits are those of any single lane.
 *
 * A matmul of one matrix whose k dominates (a weight gradient, x^T . dy over a batch of samples: chain_shape)
 * is shared out along k instead, chained: lane 0 sums its range of k from zero, each next lane continues the
 * running sums over its range (matmul_acc), so every element is summed in ascending k - the canonical
 * order, the bits of one lane. It is pipelined over chunks of c's rows, dispatched as a wavefront (lane l's
 * chunk j after lane l-1's chunk j+1), so the lanes work at once on different chunks. Lanes that do not
 * offer matmul_acc can only start the sums: the best of them may go first. Planned per unit of k by the same
 * water-filling, decided and measured as the batch split is (it is "the split" of such a shape). */
#include "split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cost/cost.h"
#include "measure.h"
#include "route.h"

void weft_split_free(weft_fabric *f) {
  free(f->split_shares);
  f->split_shares = NULL;
  free(f->split_tracks);
  f->split_tracks = NULL;
}

weft_status weft_split_last(weft_fabric *f, weft_split_report *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!out) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_split_last: out_report is NULL");
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

/* Two signatures alike (field by field: on an op of a microsecond a library memcmp shows). */
static int memo_eq(const weft_split_memo *x, const weft_split_memo *y) {
  return x->batch == y->batch && x->m == y->m && x->n == y->n && x->k == y->k && x->contract == y->contract &&
         x->trans_a == y->trans_a && x->trans_b == y->trans_b && x->b_batched == y->b_batched &&
         x->where_a == y->where_a && x->where_b == y->where_b && x->epoch == y->epoch;
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
    if (t->stamp && memo_eq(&t->key, key)) {
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

/* The lower median of n values (the lower of the middle two when n is even: one slow value of two must not
 * count for half); 0 when n is 0. */
static double lower_median(const double *v, int n) {
  if (n <= 0) return 0;
  double t[WEFT_SPLIT_SAMPLES];
  memcpy(t, v, sizeof(double) * (size_t)n);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      double x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  return t[(n - 1) / 2];
}

/* A candidate's typical recent wall time: the median of its ring. Not the best: one lucky run must not
 * win a shape. */
static double ring_median(const weft_split_cand *c) {
  return lower_median(c->t, c->n < WEFT_SPLIT_SAMPLES ? c->n : WEFT_SPLIT_SAMPLES);
}

/* How the rings follow a machine whose lanes change speed for stretches of tens of ms (the H200 machine's
 * CPU ran 2-2.5x slower for such stretches; bench/sim_split models them):
 * - a timing SHIFT_FACTOR off its candidate's median is checked by another within 16 runs, and when that
 *   one agrees (off the same way) the ring restarts from the two: three fresh timings need not outvote five
 *   stale ones;
 * - a lane that lost the lead is timed again LOST_LEAD_RUNS later, then at twice that, and so on (never
 *   later than its cost-based interval), while it is a contender: its lowest median so far beats the kept
 *   one's median now. A lane that never was faster is timed at its cost-based interval only. */
#define SHIFT_FACTOR 1.25
#define LOST_LEAD_RUNS 64

/* The candidate that runs between timings, from the medians: the fastest lane (the one running stays
 * unless another is 2% faster: two lanes alike must not trade places on noise, each trade costing a cold
 * run), the split only while it beats that lane by 3% (contention the models cannot see must not make a
 * split lose). */
static void track_settle(weft_split_track *tr) {
  int best = -1, split = -1;
  for (int i = 0; i < tr->ncand; i++) {
    const weft_split_cand *c = &tr->cand[i];
    if (!c->n) continue;
    if (c->lane < 0) split = i;
    else if (best < 0 || c->med < tr->cand[best].med) best = i;
  }
  const int cur = tr->best;
  if (best >= 0 && cur >= 0 && cur != best && tr->cand[cur].lane >= 0 && tr->cand[cur].n &&
      tr->cand[best].med > 0.98 * tr->cand[cur].med)
    best = cur;
  if (split >= 0 && (best < 0 || tr->cand[split].med < 0.97 * tr->cand[best].med)) best = split;
  if (best != cur && cur >= 0) /* the gaps the others were scheduled by no longer hold: all timed again soon */
    for (int i = 0; i < tr->ncand; i++)
      if (tr->cand[i].med < 1e29 && tr->cand[i].due > tr->runs + 16) tr->cand[i].due = tr->runs + 16;
  /* the one that lost the lead may get it back soon (a slow stretch of the machine ends): see track_note */
  if (best != cur && cur >= 0) tr->cand[cur].backoff = LOST_LEAD_RUNS;
  if (best >= 0) tr->cand[best].backoff = 0;
  tr->best = best;
}

/* Untimed runs a lane gets when it takes over from another candidate, before it is timed. Measured on the
 * H200 machine, 40 trials each:
 * - a device lane needs a few runs: the GPU's first run after CPU work took 0.25-0.38 ms, its second
 *   0.09-0.21, and from its fifth it ran at its loop's speed (0.06-0.19 ms by batch);
 * - a host lane that ran nothing for a while (a device ran the op, or nothing did) needs about a
 *   millisecond of work: a 45 us CPU op ran 20% slower in its 5th to 7th runs after 24 GPU runs, 5% slower
 *   in its 16th, at its loop's speed from about its 20th; the same after 2 or 20 ms idle.
 * So every lane gets WARM_RUNS, and a host lane also WARM_SECONDS since it took over (at most WARM_MAX
 * runs). A device lane is not held longer: the host lane cools all the while. */
#define WARM_RUNS 4
#define WARM_SECONDS 1e-3
#define WARM_MAX 128

/* The untimed runs candidate c gets before its timing, when a run there takes `seconds`. */
static double warm_runs(const weft_split_cand *c, double seconds) {
  double n = c->host && seconds > 0 ? ceil(WARM_SECONDS / seconds) : WARM_RUNS;
  return n < WARM_RUNS ? WARM_RUNS : n > WARM_MAX ? WARM_MAX : n;
}

/* Runs between timings of candidate i: the best is timed every 16th run (its median must stay fresh, and
 * timing it costs nothing but waiting for its results); another when what timing it costs (its gap to the
 * best, over its warm-up and 3 timed runs where it is a lane) comes to 0.5% of the runs between; its second timing
 * when that comes to 4% (but at least 64 runs after the first). */
static uint64_t cand_interval(const weft_split_track *tr, int i) {
  const weft_split_cand *c = &tr->cand[i];
  if (c->med >= 1e29) return UINT64_MAX / 2; /* ruled out */
  if (i == tr->best || tr->best < 0) return 16;
  const double gap = c->med / tr->cand[tr->best].med - 1.0, cost = c->lane >= 0 ? warm_runs(c, c->med) + 3.0 : 3.0;
  double iv = cost * (gap > 0 ? gap : 0) / 0.005;
  /* one timing may have met the machine busy elsewhere: the second comes sooner, on 8x the budget */
  if (c->n < 2 && iv > 64) iv = iv / 8 > 64 ? iv / 8 : 64;
  return iv < 16 ? 16 : iv > 1e12 ? (uint64_t)1e12 : (uint64_t)iv;
}

/* A timed run of candidate i. A timing is a burst of runs in a row; what enters the ring is their median.
 * When a timing ends, the choice is settled again and the candidate's next timing scheduled. A timed run
 * outside a burst (a split that is the best runs timed anyway) only corrects the shares. */
static void track_note(weft_split_track *tr, int i, double seconds) {
  weft_split_cand *c = &tr->cand[i];
  if (tr->burst != i) return;
  if (c->bn < 3) c->bt[c->bn++] = seconds;
  /* a burst ends early on two runs more than twice the best's: that candidate is out of the race for now */
  const int far = i != tr->best && tr->best >= 0 && c->bn >= 2 && c->bt[0] > 2 * tr->cand[tr->best].med &&
                  c->bt[1] > 2 * tr->cand[tr->best].med;
  if (--tr->burst_left > 0 && !far) return;
  const double fresh = lower_median(c->bt, c->bn);
  int check = 0;
  if (c->n >= 2 && c->med > 0 && c->med < 1e29) {
    const int shift = fresh > SHIFT_FACTOR * c->med ? 1 : fresh * SHIFT_FACTOR < c->med ? -1 : 0;
    if (shift && shift == c->shift) {
      /* confirmed: the ring restarts from the timing before and this one */
      const double prev = c->t[(c->n - 1) % WEFT_SPLIT_SAMPLES];
      c->t[0] = prev, c->n = 1, c->shift = 0;
    } else {
      c->shift = shift, check = shift != 0;
    }
  }
  c->t[c->n++ % WEFT_SPLIT_SAMPLES] = fresh;
  c->bn = 0;
  c->med = ring_median(c);
  if (c->best_med == 0 || c->med < c->best_med) c->best_med = c->med;
  tr->burst = -1;
  track_settle(tr);
  uint64_t iv = cand_interval(tr, i);
  if (c->backoff && i != tr->best && tr->best >= 0 && c->best_med < tr->cand[tr->best].med) {
    if (c->backoff < iv) iv = c->backoff;
    c->backoff *= 2;
  }
  if (check && iv > 16) iv = 16;
  c->due = tr->runs + iv;
}

/* The split, measured not to pay: never tried again for this signature. */
static void track_rule_out(weft_split_track *tr, int i) {
  weft_split_cand *c = &tr->cand[i];
  for (int j = 0; j < WEFT_SPLIT_SAMPLES; j++) c->t[j] = 1e30;
  c->n = WEFT_SPLIT_SAMPLES, c->med = 1e30, c->due = UINT64_MAX, c->bn = 0, c->backoff = 0;
  if (tr->burst == i) tr->burst = -1;
  track_settle(tr);
}

/* Candidate `pick` ran, starting at `t0`: how many times in a row, since when. */
static void ran(weft_split_track *tr, int pick, double t0) {
  if (tr->last != pick || !tr->streak) tr->streak = 0, tr->streak_t0 = t0;
  tr->streak++;
  tr->last = pick;
}

/* Which candidate runs now, and whether it is timed (*probe). A candidate is timed in a burst of three
 * runs in a row, as a loop of the op runs it: first each in turn, then whenever it is due. A lane timed
 * right after another candidate ran is not in the state a loop keeps it in (a host lane's workers asleep,
 * its caches cold, another lane's threads still spinning): its burst starts with untimed runs (see
 * WARM_RUNS), each the caller's op run there, not an extra one. Between bursts the best runs. */
static int track_pick(weft_split_track *tr, double now, int *probe) {
  tr->runs++;
  *probe = 0;
  if (tr->burst < 0) {
    for (int i = 0; i < tr->ncand && tr->burst < 0; i++)
      if (tr->cand[i].n == 0) tr->burst = i; /* not timed yet: in turn */
    if (tr->burst < 0)
      for (int i = 0; i < tr->ncand; i++) /* the longest overdue first */
        if (tr->runs >= tr->cand[i].due && (tr->burst < 0 || tr->cand[i].due < tr->cand[tr->burst].due)) tr->burst = i;
    if (tr->burst >= 0) tr->burst_left = 3, tr->cand[tr->burst].bn = 0;
  }
  if (tr->burst < 0) return tr->best;
  const int pick = tr->burst;
  *probe = tr->cand[pick].lane < 0 ||
           (tr->last == pick && tr->streak >= WARM_RUNS &&
            (!tr->cand[pick].host || now - tr->streak_t0 >= WARM_SECONDS || tr->streak >= WARM_MAX));
  return pick;
}

static void report_measured(weft_fabric *f, const weft_split_track *tr) {
  f->split.measured_split = f->split.measured_single = 0;
  f->split.ncandidates = tr ? (size_t)tr->ncand : 0;
  for (int i = 0; tr && i < tr->ncand; i++) {
    double t = tr->cand[i].med;
    if (t >= 1e29) t = 0; /* a split the factors ruled out: never measured as such */
    f->split.candidate[i] = tr->cand[i].lane < 0 ? "split" : f->lanes[tr->cand[i].lane].desc.name;
    f->split.candidate_seconds[i] = t;
    if (tr->cand[i].lane < 0) f->split.measured_split = t;
    else if (t > 0 && (f->split.measured_single == 0 || t < f->split.measured_single)) f->split.measured_single = t;
  }
}

/* Pass 3: the shares in `plan` (those with entries), each timed. The operands' host memory is used
 * directly: queued host work on it is finished first. Shares follow one another in plan order. */
static weft_status run_shares(weft_fabric *f, const weft_op *op, weft_tensor *a, weft_tensor *b, weft_tensor *c,
                              lane_plan *plan, int n) {
  weft_status st = weft_hostq_finish(f);
  /* an operand whose producer failed: no split (the op then fails with that failure, ops.c) */
  if (st == WEFT_OK && (weft_tensor_failure(a) != WEFT_OK || weft_tensor_failure(b) != WEFT_OK)) st = WEFT_ERR_STATE;
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
    double t0, done_at; /* dispatched; seen done (0: not seen) */
  } running;
  running run[64];
  int nrun = 0;
  const size_t a_elems = (size_t)(op->m * op->k), b_elems = (size_t)(op->k * op->n), c_elems = (size_t)(op->m * op->n);
  /* The host lane's share starts first, on the host queue's thread, straight on the host copies: the
   * caller's thread then starts the devices and waits for each, so every lane's own time is measured. */
  int host_plan = -1;
  int64_t host_first = 0, first = 0;
  for (int i = 0; i < n; i++) {
    if (plan[i].share > 0 && weft_lane_is_host(f, plan[i].lane) && host_plan < 0) host_plan = i, host_first = first;
    first += plan[i].share;
  }
  weft_op sub = *op;
  uint64_t ticket = 0;
  double host_t0 = 0;
  if (host_plan >= 0) {
    lane_plan *q = &plan[host_plan];
    sub.batch = q->share;
    sub.in[0] = a->host + (size_t)host_first * a_elems;
    sub.in[1] = op->b_batched ? b->host + (size_t)host_first * b_elems : b->host;
    sub.out[0] = c->host + (size_t)host_first * c_elems;
    double work;
    weft_cost_class cls = weft_cost_op_work(&sub, &work);
    host_t0 = weft_fabric_now(f);
    ticket = weft_hostq_submit(f, q->lane, &sub, cls, work, 0); /* 0: no thread to run it: below, inline */
  }
  first = 0;
  for (int i = 0; i < n && st == WEFT_OK; i++) {
    lane_plan *q = &plan[i];
    if (q->share == 0 || i == host_plan) {
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
  const double t_started = weft_fabric_now(f);
  if (host_plan >= 0 && !ticket && st == WEFT_OK) {
    /* no queue thread: the host share runs here, while the devices work */
    lane_plan *q = &plan[host_plan];
    weft_lane_slot *s = &f->lanes[q->lane];
    double t0 = weft_fabric_now(f);
    st = s->vt.run(s->self, &sub);
    q->seconds = weft_fabric_now(f) - t0, q->exact = 1;
    if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, q->lane);
    s->stats.seconds += q->seconds;
  }
  /* While the CPU computes, the devices that can say whether they are done (idle) are asked every 20 us or
   * so, from a thread that sleeps in between: a thread spinning in a device's wait would take a core from
   * the CPU's share. Each share's time is then its own, to the poll's grain. */
  int polling = ticket != 0 && st == WEFT_OK;
  while (polling) {
    polling = 0;
    for (int j = 0; j < nrun; j++) {
      running *r = &run[j];
      weft_lane_slot *s = &f->lanes[plan[r->plan].lane];
      if (r->done_at > 0 || !s->vt.idle) continue;
      if (s->vt.idle(s->self)) r->done_at = weft_fabric_now(f);
      else polling = 1;
    }
    if (!polling || weft_hostq_done(f) >= ticket) break;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
  /* The device shares come home into the result's host copy. A share seen done, waited for as soon as the
   * devices were started, or still running when waited for, measured its own time; otherwise only an upper
   * bound. */
  for (int j = 0; j < nrun; j++) {
    running *r = &run[j];
    lane_plan *q = &plan[r->plan];
    double w0 = weft_fabric_now(f);
    if (st == WEFT_OK) st = weft_tensor_read(r->tc, c->host + (size_t)r->first * c_elems, (size_t)q->share * c_elems);
    double w1 = weft_fabric_now(f), slack = 0.02 * (w1 - t_start) > 20e-6 ? 0.02 * (w1 - t_start) : 20e-6;
    q->seconds = (r->done_at > 0 ? r->done_at : w1) - r->t0;
    q->exact = r->done_at > 0 || w1 - w0 > slack || w0 - t_started < slack;
    weft_tensor_destroy(r->ta), weft_tensor_destroy(r->tb), weft_tensor_destroy(r->tc);
  }
  if (ticket) {
    /* the queue's own measurement; stats.seconds comes with it when the queue is drained */
    lane_plan *q = &plan[host_plan];
    weft_status qs = weft_hostq_wait(f, ticket);
    if (qs == WEFT_OK) qs = weft_hostq_status(f, ticket); /* the share's own outcome */
    if (st == WEFT_OK) st = qs;
    if (qs == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, q->lane);
    double secs = weft_hostq_seconds(f, ticket);
    q->seconds = secs > 0 ? secs : weft_fabric_now(f) - host_t0, q->exact = 1;
  }
  if (host_plan >= 0) f->lanes[plan[host_plan].lane].stats.ops[WEFT_OP_MATMUL]++;
  /* the report: shares in batch order */
  first = 0;
  for (int i = 0; i < n; i++) {
    lane_plan *q = &plan[i];
    if (q->share == 0) continue;
    weft_split_share *sh = &f->split_shares[f->split.nshares++];
    sh->lane = f->lanes[q->lane].desc.name, sh->first = first, sh->entries = q->share;
    sh->predicted = q->c + (double)q->share * q->r, sh->seconds = q->seconds;
    first += q->share;
  }
  if (st != WEFT_OK) return st; /* the caller's dispatch may try again on one lane */
  weft_tensor_mark_written(c, -1);
  f->split.seconds = weft_fabric_now(f) - t_start;
  return WEFT_OK;
}

/* ---------------------------------------------------------------------------------- chained over k */

static int chain_shape(const weft_op *op) {
  const int64_t big = op->m > op->n ? op->m : op->n;
  return op->batch == 1 && op->k >= 256 && op->k >= 8 * big;
}

/* Pass 1 of a chain: per lane a fixed cost (alpha; on a device lane its transfers' alphas and the running
 * sums crossing both ways) and a cost per unit of k (compute, and on a device lane a row of a and of b
 * going up). Every lane that offers matmul_acc, and the best one that does not (it can only start the
 * sums), in that order: the latter first. */
static int plan_chain(weft_fabric *f, const weft_op *op, const weft_split_track *tr, lane_plan *plan) {
  int n = 0, starter = -1;
  double starter_t = 0;
  const double K = (double)op->k, flops = 2.0 * (double)op->m * (double)op->n * K;
  const double c_bytes = 4.0 * (double)op->m * (double)op->n, unit_bytes = 4.0 * (double)(op->m + op->n);
  const double now = weft_fabric_now(f);
  weft_op acc = *op;
  acc.kind = WEFT_OP_MATMUL_ACC;
  lane_plan cand[64];
  int nc = 0;
  for (size_t i = 0; i < f->nlanes && nc < 64; i++) {
    const int can_acc = weft_route_lane_can_run(f, (int)i, &acc, NULL);
    if (!can_acc && !weft_route_lane_can_run(f, (int)i, op, NULL)) continue;
    weft_lane_slot *s = &f->lanes[i];
    const weft_cost_state *mm = weft_cost_state_of(s, WEFT_COST_MATMUL, op->contract);
    lane_plan *q = &cand[nc++];
    memset(q, 0, sizeof *q);
    q->lane = (int)i;
    q->exact = can_acc; /* borrowed while planning: 1 offers matmul_acc */
    q->c = mm->line.alpha * mm->line.refine;
    q->r = (weft_cost_predict(mm, flops) - q->c) / K;
    if (!weft_lane_is_host(f, (int)i)) {
      const weft_cost_line *up = &s->cost[WEFT_COST_UPLOAD][WEFT_XFER_STAGED].line;
      const weft_cost_line *down = &s->cost[WEFT_COST_DOWNLOAD][WEFT_XFER_STAGED].line;
      q->c += up->alpha + down->alpha + (up->beta > 0 ? c_bytes / up->beta : 0) + (down->beta > 0 ? c_bytes / down->beta : 0);
      q->r += up->beta > 0 ? unit_bytes / up->beta : 0;
    }
    if (q->r <= 0) q->r = 1e-12;
    q->c0 = q->c, q->r0 = q->r;
    const double k = tr && i < 64 && tr->k[i] > 0 ? tr->k[i] : 1.0;
    q->c *= k, q->r *= k;
    q->c += s->busy_until > now ? s->busy_until - now : 0.0;
    if (!can_acc && (starter < 0 || q->c + K * q->r < starter_t)) starter = nc - 1, starter_t = q->c + K * q->r;
  }
  if (starter >= 0) plan[n++] = cand[starter];
  for (int i = 0; i < nc; i++)
    if (cand[i].exact) plan[n++] = cand[i];
  for (int i = 0; i < n; i++) plan[i].exact = 0;
  return n;
}

/* Pass 3 of a chain: lane plan[0]'s range of k first, each next lane's after it. */
static weft_status chain_run(weft_fabric *f, const weft_op *op, weft_tensor *a, weft_tensor *b, weft_tensor *c,
                             lane_plan *plan, int n) {
  weft_status st = weft_hostq_finish(f);
  if (st == WEFT_OK && (weft_tensor_failure(a) != WEFT_OK || weft_tensor_failure(b) != WEFT_OK)) st = WEFT_ERR_STATE;
  if (st == WEFT_OK) st = weft_tensor_wait_dma(c);
  if (st != WEFT_OK) return st;
  const int64_t m = op->m, nn = op->n, k = op->k;
  int L = 0, li[64];
  int64_t k0[65];
  k0[0] = 0;
  for (int i = 0; i < n; i++)
    if (plan[i].share > 0) li[L] = i, k0[L + 1] = k0[L] + plan[i].share, L++;
  if (L < 2 || k0[L] != k) return WEFT_ERR_STATE;
  /* Each lane's rows of op(a) over its range of k, packed contiguous (and of op(b) when b is transposed):
   * copies, the bits unchanged. */
  const int nch = (int)(m < 4 * L ? m : 4 * L);
  const int64_t per = (m + nch - 1) / nch;
  float *ap = malloc(sizeof(float) * (size_t)(m * k)), *bp = op->trans_b ? malloc(sizeof(float) * (size_t)(k * nn)) : NULL;
  weft_tensor **ta = calloc((size_t)(L * nch), sizeof *ta), **tb = calloc((size_t)L, sizeof *tb);
  weft_tensor **tc = calloc((size_t)nch, sizeof *tc);
  if (!ap || (op->trans_b && !bp) || !ta || !tb || !tc) st = weft_fail(f, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int l = 0; l < L && st == WEFT_OK; l++) {
    const int64_t kl = k0[l + 1] - k0[l];
    float *al = ap + (size_t)(m * k0[l]);
    for (int64_t i = 0; i < m; i++)
      for (int64_t q = 0; q < kl; q++)
        al[i * kl + q] = op->trans_a ? a->host[(size_t)((k0[l] + q) * m + i)] : a->host[(size_t)(i * k + k0[l] + q)];
    float *bl = b->host + (size_t)(k0[l] * nn);
    if (op->trans_b) {
      bl = bp + (size_t)(k0[l] * nn);
      for (int64_t q = 0; q < kl; q++)
        for (int64_t j = 0; j < nn; j++) bl[q * nn + j] = b->host[(size_t)(j * k + k0[l] + q)];
    }
    const int64_t db[2] = {kl, nn};
    st = weft_tensor_wrap(f, 2, db, bl, &tb[l]);
    for (int j = 0; j < nch && st == WEFT_OK; j++) {
      const int64_t i0 = j * per, rows = m - i0 < per ? m - i0 : per, da[2] = {rows, kl};
      if (rows > 0) st = weft_tensor_wrap(f, 2, da, al + (size_t)(i0 * kl), &ta[l * nch + j]);
    }
  }
  for (int j = 0; j < nch && st == WEFT_OK; j++) {
    const int64_t i0 = j * per, rows = m - i0 < per ? m - i0 : per, dc[2] = {rows, nn};
    if (rows > 0) st = weft_tensor_wrap(f, 2, dc, c->host + (size_t)(i0 * nn), &tc[j]);
  }
  const double t_start = weft_fabric_now(f);
  /* The wavefront: step s runs chunk s - l on lane l, the later lanes first, so that lane l-1 is already
   * given chunk j+1 when lane l waits for chunk j to reach it. */
  for (int s = 0; s < nch + L - 1 && st == WEFT_OK; s++) {
    for (int l = L - 1; l >= 0 && st == WEFT_OK; l--) {
      const int j = s - l;
      if (j < 0 || j >= nch || !tc[j]) continue;
      const int lane = plan[li[l]].lane;
      weft_op_desc d = {op->contract, lane};
      st = l == 0 ? weft_op_matmul(f, &d, ta[l * nch + j], 0, tb[l], 0, tc[j])
                  : weft_op_matmul_acc(f, &d, ta[l * nch + j], 0, tb[l], 0, tc[j]);
      weft_lane_slot *sl = &f->lanes[lane];
      if (st == WEFT_OK && sl->vt.flush) st = sl->vt.flush(sl->self);
    }
  }
  for (int j = 0; j < nch && st == WEFT_OK; j++) {
    const int64_t i0 = j * per, rows = m - i0 < per ? m - i0 : per;
    if (tc[j]) st = weft_tensor_read(tc[j], c->host + (size_t)(i0 * nn), (size_t)(rows * nn));
  }
  for (int i = 0; ta && i < L * nch; i++) weft_tensor_destroy(ta[i]);
  for (int i = 0; tb && i < L; i++) weft_tensor_destroy(tb[i]);
  for (int i = 0; tc && i < nch; i++) weft_tensor_destroy(tc[i]);
  free(ta), free(tb), free(tc), free(ap), free(bp);
  for (int l = 0; l < L; l++) {
    weft_split_share *sh = &f->split_shares[f->split.nshares++];
    lane_plan *q = &plan[li[l]];
    sh->lane = f->lanes[q->lane].desc.name, sh->first = k0[l], sh->entries = q->share;
    sh->predicted = q->c + (double)q->share * q->r, sh->seconds = 0; /* the lanes overlap: only the whole is timed */
  }
  if (st != WEFT_OK) return st;
  weft_tensor_mark_written(c, -1);
  f->split.seconds = weft_fabric_now(f) - t_start;
  f->split.split = 1;
  return WEFT_OK;
}

/* Candidate `pick` of the track (one lane) timed: the op dispatched there, as it runs unsplit, and its
 * result brought home, as the caller will read it. */
static weft_status probe_lane(weft_fabric *f, const weft_op *op, weft_split_track *tr, int pick, weft_tensor *a,
                              weft_tensor *b, weft_tensor *c, int *out_done) {
  const int lane = tr->cand[pick].lane;
  weft_op_desc d = {op->contract, lane};
  const double t0 = weft_fabric_now(f);
  weft_status st = weft_op_matmul(f, &d, a, op->trans_a, b, op->trans_b, c);
  if (st == WEFT_OK) st = weft_tensor_read(c, c->host, c->numel);
  const double t = weft_fabric_now(f) - t0;
  ran(tr, pick, t0);
  if (st == WEFT_ERR_LANE_FAILED) {
    memset(tr, 0, sizeof *tr);
    return WEFT_OK; /* the caller's dispatch routes it again among the lanes still up */
  }
  if (st != WEFT_OK) return st;
  track_note(tr, pick, t);
  f->split.single_lane = f->lanes[lane].desc.name, f->split.seconds = t;
  report_measured(f, tr);
  *out_done = 1;
  return WEFT_OK;
}

/* Candidate `pick`, one lane: timed here (probe), or handed to the caller to dispatch there. */
static weft_status run_lane_pick(weft_fabric *f, const weft_op *op, weft_split_track *tr, int pick, int probe,
                                 double now, weft_tensor *a, weft_tensor *b, weft_tensor *c, int *out_done,
                                 int *out_lane) {
  f->split.single_lane = f->lanes[tr->cand[pick].lane].desc.name;
  report_measured(f, tr);
  if (probe) return probe_lane(f, op, tr, pick, a, b, c, out_done);
  *out_lane = tr->cand[pick].lane;
  ran(tr, pick, now);
  return WEFT_OK;
}

/* Pass 1: every eligible lane's fixed and per-entry cost, scaled by the track's factors; returns the count. */
static int plan_lanes(weft_fabric *f, const weft_op *op, const weft_tensor *a, const weft_tensor *b,
                      const weft_split_track *tr, lane_plan *plan) {
  int n = 0;
  const int64_t B = op->batch;
  const double entry_flops = 2.0 * (double)op->m * (double)op->n * (double)op->k;
  const double a_bytes = 4.0 * (double)op->m * (double)op->k, c_bytes = 4.0 * (double)op->m * (double)op->n;
  const double b_bytes = 4.0 * (double)op->k * (double)op->n;
  const double now = weft_fabric_now(f);
  for (size_t i = 0; i < f->nlanes; i++) {
    if (!weft_route_lane_can_run(f, (int)i, op, NULL)) continue;
    weft_lane_slot *s = &f->lanes[i];
    const weft_cost_state *mm = weft_cost_state_of(s, WEFT_COST_MATMUL, op->contract);
    lane_plan *q = &plan[n++];
    memset(q, 0, sizeof *q);
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
  return n;
}

/* The split run and timed, each lane's factor learned from the share it had. */
static weft_status split_run(weft_fabric *f, const weft_op *op, weft_tensor *a, weft_tensor *b, weft_tensor *c,
                             lane_plan *plan, int n, weft_split_track *tr) {
  weft_status st = run_shares(f, op, a, b, c, plan, n);
  if (st != WEFT_OK) return st;
  f->split.split = 1;
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
  return WEFT_OK;
}

weft_status weft_split_matmul(weft_fabric *f, weft_op *op, weft_tensor *a, weft_tensor *b, weft_tensor *c,
                              int *out_done, int *out_lane, int *out_have_now, double *out_now) {
  *out_done = 0;
  *out_lane = -1;
  *out_have_now = 0;
  const int64_t B = op->batch;
  if (B < 1 || f->in_scope || f->calibrating || !a->host_valid || !b->host_valid || !c->host || f->nlanes > 64)
    return WEFT_OK;
  /* what this signature measured before: keyed by where the operands' memory is registered too, since that
   * changes what moving them costs, and by the set of lanes up (one that joins or comes back is a new
   * candidate; the old track ages out) */
  weft_split_memo key = {B, op->m, op->n, op->k, (int)op->contract, op->trans_a, op->trans_b, op->b_batched,
                         a->where, b->where, f->route_epoch};
  weft_split_memo tkey = key;
  tkey.epoch = a->reg_mask ^ (c->reg_mask * 0x9e3779b97f4a7c15ull) ^ (b->reg_mask << 1) ^
               ((uint64_t)f->lanes_epoch * 0xc2b2ae3d27d4eb4full);
  weft_split_track *tr = track_of(f, &tkey, 0);
  double now = weft_fabric_now(f); /* one clock read serves the tracked path and the dispatch after */
  const int idle = f->busy_max <= now;
  *out_now = now;
  lane_plan plan[64];
  int n = 0;
  if (!tr) {
    /* The same shape, with every lane idle and nothing in the models changed, was planned before and had
     * nothing to choose between: that holds without planning again (a few microseconds on tiny ops). */
    *out_have_now = 1; /* until planning, which may take a while (a first calibration) */
    if (idle && f->split_memo_valid && memo_eq(&key, &f->split_memo)) return WEFT_OK;
    int eligible = 0;
    for (size_t i = 0; i < f->nlanes; i++) eligible += weft_route_lane_can_run(f, (int)i, op, NULL);
    if (eligible < 2) {
      if (idle) f->split_memo = key, f->split_memo_valid = 1; /* one lane: nothing to choose between either */
      return WEFT_OK;
    }
    *out_have_now = 0;
    if (!f->models_ready) weft_cost_ensure(f);
  }
  memset(&f->split, 0, sizeof f->split);
  f->split.batch = B;
  f->split.shares = f->split_shares;

  int pick = -1, probe = 0;
  if (tr) {
    /* Measured before: the candidate to run now. A lane gone down drops what was measured. */
    pick = track_pick(tr, now, &probe);
    int lane = pick >= 0 ? tr->cand[pick].lane : -1;
    if (pick < 0 || (lane >= 0 && !weft_route_lane_can_run(f, lane, op, NULL))) {
      memset(tr, 0, sizeof *tr);
      return WEFT_OK;
    }
    if (lane >= 0) {
      *out_have_now = !probe;
      return run_lane_pick(f, op, tr, pick, probe, now, a, b, c, out_done, out_lane);
    }
  }

  /* Pass 2: the best single lane against the best split, from the models (and the factors measured). */
  weft_split_share *shares = realloc(f->split_shares, f->nlanes * sizeof *shares);
  if (!shares) return WEFT_OK; /* no room to report a split: run it whole */
  f->split_shares = shares;
  f->split.shares = shares;
  /* a chain's units are k's steps; a batch split's, the batch's entries */
  const int chained = chain_shape(op);
  const int64_t U = chained ? op->k : B;
  n = chained ? plan_chain(f, op, tr, plan) : plan_lanes(f, op, a, b, tr, plan);
  if (n < 2) return WEFT_OK;
  int order[64];
  for (int i = 0; i < n; i++) {
    int j = i;
    double ti = plan[i].c + (double)U * plan[i].r;
    while (j > 0 && plan[order[j - 1]].c + (double)U * plan[order[j - 1]].r > ti) order[j] = order[j - 1], j--;
    order[j] = i;
  }
  const int single = order[0];
  const double single_t = plan[single].c + (double)U * plan[single].r;
  double makespan = plan_shares(plan, n, U);
  if (chained) {
    /* the pipeline's fill and drain: each lane after the first waits for the first chunk (a quarter of a
     * lane's time, with 4 chunks a lane) */
    int used_lanes = 0;
    for (int i = 0; i < n; i++) used_lanes += plan[i].share > 0;
    makespan *= 1.0 + 0.25 * (used_lanes > 1 ? used_lanes - 1 : 0) / (double)(used_lanes > 0 ? used_lanes : 1);
  }
  int used = 0;
  for (int i = 0; i < n; i++) used += plan[i].share > 0;
  f->split.predicted = makespan;
  f->split.predicted_single = single_t;
  f->split.single_lane = f->lanes[plan[single].lane].desc.name;
  if (!tr) {
    /* A choice worth measuring: a split predicted to beat the best lane by 10%, or lanes within 3x of it
     * or, for a batch, 1 ms (the models' error can be that large; measurement settles it, and on small ops
     * trying a lane costs little), though never 100x the best lane's time: a lane the models put 100x
     * slower than a batch of a few microseconds is not worth a track, and a tracked op pays for its
     * bookkeeping on every call (on 2 cores, a 16x16 batch of 2 against lavapipe predicted 0.16 ms: 70 ns
     * a call, against 20 untracked, on an op of 0.8 us). One matrix (B = 1) is measured only between lanes
     * within 3x: an op of a few microseconds, where a device lane's launch is most of its time, stays the
     * router's. Else the router's choice stands. */
    weft_split_cand cands[WEFT_SPLIT_CANDS];
    int nc = 0;
    memset(cands, 0, sizeof cands);
    if (used >= 2 && makespan <= 0.9 * single_t) cands[nc++].lane = -1;
    for (int i = 0; i < n && nc < WEFT_SPLIT_CANDS; i++) {
      const double t = plan[order[i]].c + (double)U * plan[order[i]].r;
      if (t <= 3.0 * single_t || (B >= 2 && t <= single_t + 1e-3 && t <= 100.0 * single_t)) {
        cands[nc].lane = plan[order[i]].lane;
        cands[nc++].host = weft_lane_is_host(f, plan[order[i]].lane);
      }
    }
    if (nc < 2) {
      if (idle) f->split_memo = key, f->split_memo_valid = 1;
      return WEFT_OK; /* one lane: the caller's dispatch */
    }
    if (!(tr = track_of(f, &tkey, 1))) return WEFT_OK;
    memcpy(tr->cand, cands, sizeof cands);
    tr->ncand = nc;
    tr->best = tr->last = tr->burst = -1;
    now = weft_fabric_now(f); /* planning (and a first calibration) came between */
    pick = track_pick(tr, now, &probe);
    if (tr->cand[pick].lane >= 0) return run_lane_pick(f, op, tr, pick, probe, now, a, b, c, out_done, out_lane);
  }
  if (used < 2) {
    /* the factors measured leave one lane worth using: the split is no longer a candidate */
    track_rule_out(tr, pick);
    return WEFT_OK;
  }
  /* Pass 3: the split, timed. */
  const double t0 = weft_fabric_now(f);
  weft_status st = chained ? chain_run(f, op, a, b, c, plan, n) : split_run(f, op, a, b, c, plan, n, tr);
  if (st != WEFT_OK) return st;
  ran(tr, pick, t0);
  track_note(tr, pick, f->split.seconds);
  report_measured(f, tr);
  *out_done = 1;
  return WEFT_OK;
}
