/* hostq.c - the host lanes' queue: ops routed to a lane that computes in host memory (the CPU) run on a
 * thread of the fabric's own, so weft_op_* returns at once and the caller goes on giving work to the other
 * lanes while the CPU computes. One thread runs the jobs in order; a lane is only ever called by one thread
 * at a time (the caller runs host ops itself only when the queue is empty).
 *
 * Dependencies are tracked per tensor (tensor.c): each tensor remembers the last queued job that reads its
 * host memory and the last that writes it, and whoever touches that memory outside the queue (a read, a
 * write, a transfer to or from a device, destroying it) waits for exactly those jobs, not for the queue.
 *
 * Timing: the thread measures each job; the measurements reach the cost model on the caller's thread, at
 * its next op, since the model is not shared between threads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cost/cost.h"
#include "fpenv.h"
#include "internal.h"

#define JOBS 256      /* queued jobs at most; a caller that gets further ahead waits for the oldest */
#define SPIN_NS 50000 /* a waiter polls this long before it sleeps: most waits are short */

typedef struct job {
  int lane;
  weft_op op;
  weft_cost_class cls;
  double work;
  int observe;
  double t0, t1;   /* measured by the thread */
  weft_status st;
  char *msg;       /* the failure's message (allocated by the first failure in this slot, then reused) */
  /* The tensors the job reads and writes, each at the version it reads or makes (weft_hostq_note): a
   * failure is recorded on what it writes, and a job that read a failed value fails its outputs too. The
   * pointers are used only when the job is drained, which happens before any of them can be destroyed
   * (destroying a tensor waits for the jobs that use it). */
  int nin, nout;
  weft_tensor *in[WEFT_OP_MAX_IN + WEFT_OP_MAX_OUT], *out[WEFT_OP_MAX_OUT];
  uint64_t in_version[WEFT_OP_MAX_IN + WEFT_OP_MAX_OUT], out_version[WEFT_OP_MAX_OUT];
} job;

typedef struct weft_hostq weft_hostq;
struct weft_hostq {
  weft_fabric *f;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv;
  job ring[JOBS];
  uint64_t submitted;           /* tickets handed out (the caller's thread only) */
  uint64_t taken;               /* jobs the thread has started (under mu) */
  _Atomic uint64_t completed;   /* jobs finished */
  uint64_t drained;             /* finished jobs whose timings reached the model (the caller's thread) */
  int stop;
  int sleeping_waiters;
  /* The first failure of a queued job that the caller has not been told of (by a read of what it wrote, or
   * an op that read that): weft_fabric_sync reports it. 0: none. */
  uint64_t unreported;
  weft_status unreported_st;
  char unreported_msg[WEFT_ERR_LEN];
};

/* Lanes report errors through the fabric's host; on the queue's thread that must not touch the caller's
 * last error, so the report lands in the running job's message, which goes with its failure. */
static _Thread_local job *on_queue_job;

int weft_hostq_report(weft_status status, const char *fmt, va_list args) {
  job *j = on_queue_job;
  if (!j) return 0;
  if (!j->msg) j->msg = malloc(WEFT_ERR_LEN);
  if (j->msg && !j->msg[0]) vsnprintf(j->msg, WEFT_ERR_LEN, fmt, args);
  (void)status;
  return 1;
}

static void *queue_main(void *arg) {
  weft_hostq *q = arg;
  /* The thread was created with the caller's floating-point environment; host kernels run under the clean
   * one (fpenv.h), set here and checked again before each job. */
  weft_fpenv_clean();
  for (;;) {
    pthread_mutex_lock(&q->mu);
    while (!q->stop && q->taken == q->submitted) pthread_cond_wait(&q->work_cv, &q->mu);
    if (q->taken == q->submitted) { /* stopping, and nothing left */
      pthread_mutex_unlock(&q->mu);
      return NULL;
    }
    job *j = &q->ring[q->taken % JOBS];
    q->taken++;
    pthread_mutex_unlock(&q->mu);
    weft_lane_slot *s = &q->f->lanes[j->lane];
    if (j->msg) j->msg[0] = '\0';
    on_queue_job = j;
    weft_fpenv_clean();
    j->t0 = weft_monotonic_seconds(NULL);
    j->st = s->vt.run(s->self, &j->op);
    j->t1 = weft_monotonic_seconds(NULL);
    on_queue_job = NULL;
    if (j->st != WEFT_OK) {
      char said[WEFT_ERR_LEN];
      snprintf(said, sizeof said, "%s", j->msg ? j->msg : "");
      if (!j->msg) j->msg = malloc(WEFT_ERR_LEN);
      if (j->msg)
        snprintf(j->msg, WEFT_ERR_LEN, "%s on lane %s failed (%s)%s%.900s", weft_op_kind_str(j->op.kind), s->desc.name,
                 weft_status_str(j->st), said[0] ? ": " : "", said);
    }
    atomic_fetch_add_explicit(&q->completed, 1, memory_order_release);
    pthread_mutex_lock(&q->mu);
    if (q->sleeping_waiters) pthread_cond_broadcast(&q->done_cv);
    pthread_mutex_unlock(&q->mu);
  }
}

static weft_hostq *queue_start(weft_fabric *f) {
  weft_hostq *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->f = f;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->work_cv, NULL);
  pthread_cond_init(&q->done_cv, NULL);
  if (pthread_create(&q->thread, NULL, queue_main, q) != 0) {
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->work_cv);
    pthread_cond_destroy(&q->done_cv);
    free(q);
    return NULL;
  }
  return q;
}

uint64_t weft_hostq_done(const weft_fabric *f) {
  return f->hostq ? atomic_load_explicit(&f->hostq->completed, memory_order_acquire) : 0;
}

int weft_hostq_idle(const weft_fabric *f) { return !f->hostq || weft_hostq_done(f) == f->hostq->submitted; }

/* A finished job's outcome goes to the tensors it wrote, in queue order: its own failure, or that of a
 * value it read (a job queued behind a failed one computed from a value that was never made). */
static void job_settle(weft_hostq *q, job *j, uint64_t ticket) {
  weft_status st = j->st;
  const char *msg = j->msg ? j->msg : "";
  for (int i = 0; st == WEFT_OK && i < j->nin; i++)
    if (j->in[i]->err && j->in[i]->err_version == j->in_version[i]) {
      st = j->in[i]->err;
      msg = j->in[i]->errmsg ? j->in[i]->errmsg : "";
      ticket = j->in[i]->err_ticket; /* one failure, however far it reached */
    }
  if (st == WEFT_OK) return;
  for (int o = 0; o < j->nout; o++) weft_tensor_set_error(j->out[o], j->out_version[o], st, ticket, msg);
  if (j->nout && !q->unreported) {
    q->unreported = ticket;
    q->unreported_st = st;
    snprintf(q->unreported_msg, sizeof q->unreported_msg, "%s", msg);
  }
}

/* Hands the finished jobs' timings to the cost model and the lane's counters. */
void weft_hostq_drain(weft_fabric *f) {
  weft_hostq *q = f->hostq;
  if (!q) return;
  uint64_t done = weft_hostq_done(f);
  for (; q->drained < done; q->drained++) {
    job *j = &q->ring[q->drained % JOBS];
    weft_lane_slot *s = &f->lanes[j->lane];
    job_settle(q, j, q->drained + 1);
    if (j->st != WEFT_OK) continue;
    double secs = j->t1 - j->t0;
    s->stats.seconds += secs;
    weft_cost_state *cs = weft_cost_state_of(s, j->cls, j->op.contract);
    if (j->observe && weft_cost_observe(cs, j->work, secs)) weft_route_forget(f);
    if (q->drained + 1 == q->submitted) {
      /* the queue ran dry: the lane is free from when its last job ended */
      double now = weft_fabric_now(f);
      if (s->busy_until > now) s->busy_until = now;
      weft_busy_recompute(f);
    }
  }
}

weft_status weft_hostq_wait(weft_fabric *f, uint64_t ticket) {
  weft_hostq *q = f->hostq;
  if (!q || ticket == 0) return WEFT_OK;
  if (weft_hostq_done(f) < ticket) {
    double spin_until = weft_monotonic_seconds(NULL) + SPIN_NS * 1e-9;
    while (weft_hostq_done(f) < ticket && weft_monotonic_seconds(NULL) < spin_until) {
    }
    if (weft_hostq_done(f) < ticket) {
      pthread_mutex_lock(&q->mu);
      q->sleeping_waiters++;
      while (weft_hostq_done(f) < ticket) pthread_cond_wait(&q->done_cv, &q->mu);
      q->sleeping_waiters--;
      pthread_mutex_unlock(&q->mu);
    }
  }
  weft_hostq_drain(f);
  return WEFT_OK;
}

weft_status weft_hostq_status(weft_fabric *f, uint64_t ticket) {
  weft_hostq *q = f->hostq;
  if (!q || ticket == 0 || ticket > weft_hostq_done(f) || q->submitted - ticket >= JOBS) return WEFT_OK;
  const job *j = &q->ring[(ticket - 1) % JOBS];
  if (j->st != WEFT_OK) weft_fail(f, j->st, "%s", j->msg ? j->msg : weft_status_str(j->st));
  return j->st;
}

weft_status weft_hostq_take_unreported(weft_fabric *f) {
  weft_hostq *q = f->hostq;
  if (!q || !q->unreported) return WEFT_OK;
  weft_status st = q->unreported_st;
  weft_fail(f, st, "%s", q->unreported_msg);
  q->unreported = 0;
  return st;
}

void weft_hostq_reported(weft_fabric *f, uint64_t ticket) {
  if (f->hostq && f->hostq->unreported == ticket) f->hostq->unreported = 0;
}

double weft_hostq_seconds(const weft_fabric *f, uint64_t ticket) {
  const weft_hostq *q = f->hostq;
  if (!q || ticket == 0 || ticket > weft_hostq_done(f) || q->submitted - ticket >= JOBS) return -1;
  const job *j = &q->ring[(ticket - 1) % JOBS];
  return j->st == WEFT_OK ? j->t1 - j->t0 : -1;
}

weft_status weft_hostq_finish(weft_fabric *f) { return f->hostq ? weft_hostq_wait(f, f->hostq->submitted) : WEFT_OK; }

uint64_t weft_hostq_submit(weft_fabric *f, int lane, const weft_op *op, weft_cost_class cls, double work, int observe) {
  if (!f->hostq && !(f->hostq = queue_start(f))) return 0;
  weft_hostq *q = f->hostq;
  /* the ring is full: the oldest job's slot is needed (and its timing drained first) */
  if (q->submitted - q->drained >= JOBS) {
    weft_hostq_wait(f, q->submitted - JOBS + 1);
    weft_hostq_drain(f);
  }
  job *j = &q->ring[q->submitted % JOBS];
  j->lane = lane;
  j->op = *op;
  j->cls = cls;
  j->work = work;
  j->observe = observe;
  j->st = WEFT_OK;
  j->nin = j->nout = 0;
  pthread_mutex_lock(&q->mu);
  q->submitted++;
  pthread_cond_signal(&q->work_cv);
  pthread_mutex_unlock(&q->mu);
  return q->submitted;
}

static job *job_of(weft_fabric *f, uint64_t ticket) {
  weft_hostq *q = f->hostq;
  if (!q || ticket == 0 || ticket > q->submitted || ticket <= q->drained) return NULL;
  return &q->ring[(ticket - 1) % JOBS];
}

/* The job may be running: it touches none of this; drain (this thread) reads it once the job is done. */
void weft_hostq_note_inputs(weft_fabric *f, uint64_t ticket, weft_tensor *const *in, int nin) {
  job *j = job_of(f, ticket);
  if (!j) return;
  for (int i = 0; i < nin && j->nin < WEFT_OP_MAX_IN + WEFT_OP_MAX_OUT; i++)
    if (in[i]) j->in[j->nin] = in[i], j->in_version[j->nin++] = in[i]->version;
}

void weft_hostq_note_outputs(weft_fabric *f, uint64_t ticket, weft_tensor *const *out, int nout) {
  job *j = job_of(f, ticket);
  if (!j) return;
  for (int o = 0; o < nout && j->nout < WEFT_OP_MAX_OUT; o++)
    if (out[o]) j->out[j->nout] = out[o], j->out_version[j->nout++] = out[o]->version;
}

void weft_hostq_stop(weft_fabric *f) {
  weft_hostq *q = f->hostq;
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->stop = 1;
  pthread_cond_signal(&q->work_cv);
  pthread_mutex_unlock(&q->mu);
  pthread_join(q->thread, NULL);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->work_cv);
  pthread_cond_destroy(&q->done_cv);
  for (int i = 0; i < JOBS; i++) free(q->ring[i].msg);
  free(q);
  f->hostq = NULL;
}
