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
#include "../sched/route.h"
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
  /* the first failure of a queued job, reported at the next wait */
  weft_status err;
  char errmsg[WEFT_ERR_LEN];
};

/* Lanes report errors through the fabric's host; on the queue's thread that must not touch the caller's
 * last error, so the report lands here and the next wait passes it on. */
static _Thread_local weft_hostq *on_queue_thread;

int weft_hostq_report(weft_status status, const char *fmt, va_list args) {
  weft_hostq *q = on_queue_thread;
  if (!q) return 0;
  pthread_mutex_lock(&q->mu);
  if (q->err == WEFT_OK) {
    q->err = status;
    vsnprintf(q->errmsg, sizeof q->errmsg, fmt, args);
  }
  pthread_mutex_unlock(&q->mu);
  return 1;
}

static void *queue_main(void *arg) {
  weft_hostq *q = arg;
  on_queue_thread = q;
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
    weft_fpenv_clean();
    j->t0 = weft_monotonic_seconds(NULL);
    j->st = s->vt.run(s->self, &j->op);
    j->t1 = weft_monotonic_seconds(NULL);
    if (j->st != WEFT_OK) {
      pthread_mutex_lock(&q->mu);
      if (q->err == WEFT_OK) {
        q->err = j->st;
        snprintf(q->errmsg, sizeof q->errmsg, "%s: a queued %s failed (%s)", s->desc.name, weft_op_kind_str(j->op.kind),
                 weft_status_str(j->st));
      }
      pthread_mutex_unlock(&q->mu);
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

/* Hands the finished jobs' timings to the cost model and the lane's counters. */
void weft_hostq_drain(weft_fabric *f) {
  weft_hostq *q = f->hostq;
  if (!q) return;
  uint64_t done = weft_hostq_done(f);
  for (; q->drained < done; q->drained++) {
    job *j = &q->ring[q->drained % JOBS];
    weft_lane_slot *s = &f->lanes[j->lane];
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
  pthread_mutex_lock(&q->mu);
  weft_status err = q->err;
  if (err != WEFT_OK) {
    weft_fail(f, err, "%s", q->errmsg);
    q->err = WEFT_OK;
  }
  pthread_mutex_unlock(&q->mu);
  return err;
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
  pthread_mutex_lock(&q->mu);
  q->submitted++;
  pthread_cond_signal(&q->work_cv);
  pthread_mutex_unlock(&q->mu);
  return q->submitted;
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
  free(q);
  f->hostq = NULL;
}
