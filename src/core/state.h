/* state.h - the data of a fabric, its lanes and its tensors: one layout in which every layer keeps its own
 * state (the cost model its lines, the core its lanes and tensors, the scheduler its memos and split
 * tracks), and the few base helpers over it: the last error, notes, the clock, lane bits. Behaviour lives
 * in each layer's own header, and calls go one way only (docs/DESIGN.md, "Layers"): cost/cost.h (the
 * model, below the core), core/internal.h (lanes, tensors, the execution entry), sched/sched.h (the op
 * path, above the core). Not installed. */
#ifndef WEFT_STATE_H
#define WEFT_STATE_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"
#include "weft_lane.h"

#define WEFT_ERR_LEN 1024

/* The cost model's state (cost/model.c), kept per lane. */
#define WEFT_REFINE_N 15    /* observations the online refinement keeps per cost line */
#define WEFT_COST_POINTS 16 /* calibration points kept per cost line */

/* A cost line and the recent observed/predicted ratios that refine it. */
typedef struct weft_cost_state {
  weft_cost_line line;
  float ratio[WEFT_REFINE_N];  /* the window in arrival order (a ring): the oldest leaves first */
  float sorted[WEFT_REFINE_N]; /* the same values kept sorted, so the median is one load */
  int nratio, pos;
  double refine_mark;          /* the refinement when routing last took note of it (see route_epoch) */
  /* The calibration's own points (work ascending, median seconds): inside their range the prediction
   * follows them (piecewise linear) rather than the two-parameter line, whose one throughput cannot hold a
   * many-core CPU's ramp from tiny to large ops. Zero points: the line alone. */
  int npts;
  double pw[WEFT_COST_POINTS], pt[WEFT_COST_POINTS];
} weft_cost_state;

/* Transfer lines (WEFT_COST_UPLOAD, WEFT_COST_DOWNLOAD) use no contract; their two slots hold the cost of
 * moving pageable host memory (through the lane's staging) and memory registered with the lane
 * (weft_lane_vtable.host_register), which may move straight over the bus. */
#define WEFT_XFER_STAGED 0
#define WEFT_XFER_PINNED 1

/* A batched matmul's signature that was planned and not worth splitting (split.c), with the route epoch
 * it was planned in. Compared bytewise: built from a zeroed struct. */
typedef struct weft_split_memo {
  int64_t batch, m, n, k;
  int contract, trans_a, trans_b, b_batched;
  uint64_t where_a, where_b;
  uint64_t epoch;
} weft_split_memo;

/* How a batched matmul of one signature runs best, measured (split.c). The signature is the memo's, with
 * the lanes that hold the operands' memory registered and the lanes epoch in place of the route epoch. The
 * candidates are the split and the lanes the models put near the best; each keeps its last few wall times
 * and when it is next due to be timed again. Each lane's factor (measured / predicted, as it ran a share
 * beside the others) corrects its share in the next split. */
#define WEFT_SPLIT_TRACKS 8
#define WEFT_SPLIT_SAMPLES 5
#define WEFT_SPLIT_CANDS WEFT_SPLIT_CANDIDATES
typedef struct weft_split_cand {
  int lane;                          /* -1: the split */
  int host;                          /* 1: a host lane (warmed longer before it is timed, split.c) */
  int n;                             /* timings done (the ring holds the last WEFT_SPLIT_SAMPLES) */
  double t[WEFT_SPLIT_SAMPLES];      /* each timing: the median of a burst of runs in a row (split.c) */
  double med;                        /* the median of the ring (0: none yet) */
  double bt[3];                      /* the timing under way: its runs so far */
  int bn;
  uint64_t due;                      /* the track's run count at which it is timed again */
  double best_med;                   /* the lowest median it has had (0: none yet) */
  uint64_t backoff;                  /* after it lost the lead: runs to its next timing at most (0: none) */
  int shift;                         /* its last timing left the median: +1 above, -1 below, 0 not */
} weft_split_cand;
typedef struct weft_split_track {
  weft_split_memo key;
  uint64_t stamp;                    /* last use (0: the slot is free) */
  float k[64];                       /* per lane; 0 = not measured */
  weft_split_cand cand[WEFT_SPLIT_CANDS];
  int ncand;
  int best;                          /* the candidate that runs between timings (-1: none measured yet) */
  int last;                          /* the candidate that ran last (-1: none yet) */
  unsigned streak;                   /* how many times in a row it ran */
  double streak_t0;                  /* when that streak began (the fabric's clock) */
  int burst, burst_left;             /* the candidate being timed, and how many timed runs it still has */
  uint64_t runs;                     /* runs of the signature while tracked */
} weft_split_track;


/* One lane in the fabric: the vtable it registered, its state, what it said about itself, its cost model. */
typedef struct weft_lane_slot {
  weft_lane_vtable vt; /* copied, with slots beyond the lane's own size zeroed */
  void *self;
  weft_lane_desc desc;
  int failed;         /* down: failed, or started down (WEFT_LANE_STARTS_DOWN) */
  double retry_at;    /* down and revivable: when (fabric clock) to ask again; the gap doubles per refusal */
  double backoff;
  char down_why[192]; /* what the lane last said about being down */
  /* [class][contract]; only matmul uses the contract index, the other classes live at [cls][0]. */
  weft_cost_state cost[WEFT_COST_CLASS_COUNT][WEFT_CONTRACT_COUNT];
  int calib_tried;    /* calibration ran (or was attempted) for this lane */
  int calib_pending;  /* being measured in the background (cost/background.c); routed on priors meanwhile */
  int calib_refused;  /* the background could not open it: measured on the caller's thread */
  int reopenable;     /* a provider's lane that a second fabric can open (not a browser slot, not a test's) */
  unsigned observe_tick; /* counts ops, for sampling the observations of tiny ones */
  weft_lane_stats stats;
  double busy_until; /* predicted time (fabric clock) at which work already given to the lane is done */
  /* What one more op costs a lane that batches a scope's ops into one submission (measured at the first
   * scope: cost/scope.c); 0 for lanes that do not (their alpha stands inside scopes too). */
  double scope_alpha;
} weft_lane_slot;

typedef struct weft_absent {
  char *name;
  char *reason;
} weft_absent;

struct weft_fabric {
  weft_fabric_desc desc;
  char *lanes_filter; /* owned copy of desc.lanes */
  weft_lane_host host;
  weft_lane_slot *lanes;
  size_t nlanes;
  weft_absent *absent;
  size_t nabsent;
  weft_tensor *tensors; /* every live tensor, so close can free them */
  int in_scope;
  int scope_measured; /* the lanes' scope_alpha were measured (at the first scope) */
  int last_lane;
  int calibrating;                /* set while calibration runs ops of its own */
  int models_ready;               /* every lane measured, cached or given up on: routing asks no more */
  struct weft_calib_bg *calib_bg; /* lanes measured off the caller's path (cost/background.c); NULL: none */
  const atomic_int *calib_stop;   /* set in a background measuring fabric: its owner asks it to stop */
  char cache_path[1024];          /* "": the cache of the environment now; else this file (a background
                                   * fabric saves where its owner's cache was when it started) */
  double (*clock)(void *ctx);     /* seconds; monotonic unless a test injects its own */
  void *clock_ctx;
  weft_route_cost *route;         /* per lane: the last routing decision's costs (weft_route_last) */
  weft_route_explanation last_route;
  weft_route_cost *explain;       /* per lane: scratch for weft_route_explain */
  int explain_xfer;               /* the transfer line explain prices host operands on (weft_route_query) */
  /* Routing decisions are remembered per op signature (shape, contract, where the inputs live) while
   * nothing that feeds them changes; anything that does (a cost line set, measured or refined by more than
   * a few percent, a lane failing or joining) bumps the epoch and forgets them all. */
  uint32_t route_epoch;
  double busy_max;                /* the latest busy_until of any lane: one compare tells "all idle" */
  double revive_at;               /* the earliest retry_at of a down, revivable lane; INFINITY when none */
  /* Set from any thread (weft_lane_revive_soon) when a down lane became ready in the background: the next
   * op asks every down lane's revive at once, which for such lanes is a cheap check. */
  atomic_int revive_poke;
  int lost;                       /* some tensor's value went down with its lane: recover before writes */
  weft_split_memo split_memo;
  int split_memo_valid;
  int recovering;                 /* weft_fabric_recover_all is running (its replays must not re-enter it) */
  /* Computing lost values again (sched/recover.c), set by weft_fabric_open: the core finds a value lost when
   * it is read, or when what it was made from is about to change, but computing it again runs ops, which is
   * the scheduler's work (it sits above the core). NULL: lost values stay lost. */
  weft_status (*recover)(weft_tensor *t, int depth);
  void (*recover_all)(weft_fabric *f);
  struct weft_hostq *hostq;       /* host lanes' queue (hostq.c); started by the first op that is queued */
  uint64_t next_tensor_id;
  struct weft_route_memo *memo;   /* WEFT_ROUTE_MEMO entries */
  struct weft_route_memo *memo_last; /* the entry the last op used */
  weft_split_report split;        /* the last split considered (weft_split_last) */
  weft_split_share *split_shares; /* per lane */
  weft_split_track *split_tracks; /* WEFT_SPLIT_TRACKS, made by the first split */
  uint32_t lanes_epoch;           /* bumped when a lane joins, fails or comes back: splits measure anew */
  uint64_t split_clock;
  struct weft_hostcopy *copier;   /* the process's host copier (hostcopy.c), taken at the first large copy */
  int copier_tried;
  char err[WEFT_ERR_LEN];
};

/* The fabric's clock in seconds. */
static inline double weft_fabric_now(const weft_fabric *f) { return f->clock(f->clock_ctx); }
double weft_monotonic_seconds(void *ctx);
/* Sends a line to desc.on_note, or to stderr when `always` and no callback is set. */
void weft_note(const weft_fabric *f, int always, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#define WEFT_TENSOR_MAGIC 0x7466657774656e73ull /* "tsnetwef": catches destroyed or foreign pointers */

struct weft_tensor {
  uint64_t magic;
  weft_fabric *fabric;
  weft_tensor *prev, *next;
  int ndim;
  int64_t dims[WEFT_MAX_DIMS];
  size_t numel;
  size_t bytes;        /* numel * 4, at least 4 so empty tensors still have storage */
  weft_dtype dtype;    /* f32 or i32: 4 bytes either way, so lanes and transfers see only bytes */
  float *host;         /* host copy; allocated at creation, or the caller's own memory (borrowed) */
  int borrowed;        /* host is the caller's (weft_tensor_wrap): never freed here */
  size_t mapped;       /* host is pages of its own (mmap) of this many bytes; 0: aligned_alloc */
  int host_valid;      /* the host copy holds the current value */
  weft_buffer **buf;   /* per lane, NULL until used there; host-memory lanes use `host` instead */
  uint8_t *valid;      /* per lane: that lane's copy holds the current value */
  uint64_t where;      /* the same as bits, for the router's memo: bit 0 host, bit 1+i lane i (i < 63) */
  /* Recovery from a lane that goes down holding the only copy of a value: each write makes a new version;
   * an op that wrote this tensor on a device lane leaves its recipe (the op and its inputs' versions), so
   * the value can be computed again elsewhere while those inputs are intact. `host_version` is the version
   * the host memory holds even when stale: an in-place op (axpy) is replayed from it. */
  uint64_t id, version, host_version;
  struct weft_recipe *recipe;
  int lost;            /* its only current copy went down with a lane */
  int lost_lane;       /* that lane (its index), named in the errors of a value that cannot come back */
  /* The last jobs of the host queue (hostq.c) that read and that write the host memory: touching that
   * memory from outside the queue waits for them. 0: none. */
  uint64_t q_read, q_write;
  /* Host memory registered with lanes (bit i: lane i, i < 64; weft_lane_vtable.host_register), transfers
   * between this memory and any lane (registration waits for the second), and the lane whose direct,
   * asynchronous transfers may still be using the memory (index + 1; 0: none). */
  uint64_t reg_mask;
  uint64_t cover_mask; /* lanes where this memory lies inside another tensor's registered memory (a slice) */
  unsigned xfers;
  int dma_lane;
  /* A queued op that was to make version `err_version` of this tensor failed (or read a value whose
   * producer failed): reading that version reports `err` with the op's message. A later write makes a new
   * version, which is not failed. err_ticket names the failure (the queue ticket of the op that failed). */
  weft_status err;
  uint64_t err_version, err_ticket;
  char *errmsg;
  char location[256];
};

/* What wrote a tensor on a device lane, so a lost value can be computed again. */
typedef struct weft_recipe {
  weft_op_kind kind;
  weft_contract contract;
  weft_op_params params; /* what weft_op_run was given */
  int out_slot;          /* which output of the op the tensor was */
  int nin;               /* input slots (a NULL optional input has id 0) */
  /* in[0 .. nin-1], then the tensor itself when the op read it (axpy's y, an accumulation: at its version
   * before the op) */
  uint64_t in_id[WEFT_OP_MAX_IN + 1], in_version[WEFT_OP_MAX_IN + 1];
  int self_read;         /* 1: in_id[nin] is the tensor itself */
  /* the op's other required outputs, by shape: a replay writes them into scratch tensors */
  int nout;
  int out_ndim[WEFT_OP_MAX_OUT];
  int64_t out_dims[WEFT_OP_MAX_OUT][WEFT_MAX_DIMS];
  weft_dtype out_dtype[WEFT_OP_MAX_OUT];
} weft_recipe;
/* Per-lane bit masks (a tensor's registered memory) have one bit for each of the first WEFT_LANE_BITS
 * lanes; a lane beyond them never sets its bit (its transfers are staged). weft_lane_bit is defined for
 * any index: a shift by 64 or more is not. */
#define WEFT_LANE_BITS 64
static inline int weft_lane_bit(uint64_t mask, size_t lane) {
  return lane < WEFT_LANE_BITS && ((mask >> lane) & 1u);
}

/* Records a message in the fabric's last error and returns `status`. */
weft_status weft_fail(weft_fabric *f, weft_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
weft_status weft_vfail(weft_fabric *f, weft_status status, const char *fmt, va_list args);

/* 1 when lane i keeps its data in host memory. */
static inline int weft_lane_is_host(const weft_fabric *f, int i) {
  return i < 0 || (f->lanes[i].desc.flags & WEFT_LANE_HOST_MEMORY) != 0;
}
/* Recomputes busy_max after a lane's busy_until went down. */
static inline void weft_busy_recompute(weft_fabric *f) {
  double m = 0;
  for (size_t i = 0; i < f->nlanes; i++) m = f->lanes[i].busy_until > m ? f->lanes[i].busy_until : m;
  f->busy_max = m;
}
/* Lane i has done all it was given (a download or a sync of it returned): it is free from now, whatever
 * its model predicted for that work. Without this, a lane whose results stream into registered host memory
 * (waited for by a sync, not a download) stayed "busy" until the sum of its predictions ran out: where the
 * model predicts more than the op takes, that runs ahead of the clock, the router adds a wait that is not
 * there, and host ops meanwhile take the queue's hand-over (a thread wake) instead of running inline. */
static inline void weft_lane_caught_up(weft_fabric *f, int i) {
  const double now = weft_fabric_now(f);
  if (f->lanes[i].busy_until > now) {
    f->lanes[i].busy_until = now;
    weft_busy_recompute(f);
  }
}
/* Forgets remembered routing decisions (sched/route.c): something they depended on changed - a cost line
 * set, measured or refined, a lane failing or joining, host memory registered. An epoch bump, so any layer
 * may say it. */
static inline void weft_route_forget(weft_fabric *f) { f->route_epoch++; }

#endif /* WEFT_STATE_H */
