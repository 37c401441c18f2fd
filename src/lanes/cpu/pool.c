/* pool.c - the CPU lane's persistent worker threads. Each worker watches its own job counter, so a job
 * that uses only some of the threads never disturbs the others; after a job a worker polls briefly before
 * it sleeps on its condition variable, so back-to-back large ops do not pay a futex wake each. Inside a job
 * the phases meet at a spinning barrier (every thread of a job is running, so spinning is cheap; it falls
 * back to yielding when the machine is oversubscribed). */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Roughly 50-100 microseconds of polling before a worker sleeps, and before a waiter starts yielding. */
#define SPIN_BEFORE_SLEEP 4000
#define SPIN_BEFORE_YIELD 2000

typedef struct worker {
  weft_cpu_pool *pool;
  int tid;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint go;      /* bumped once for each job this worker takes part in */
  atomic_int sleeping; /* the worker is blocked (or about to block) on cv */
} worker;

struct weft_cpu_pool {
  int nworkers;
  worker *workers;
  atomic_int pending; /* workers of the current job not finished yet */
  atomic_int stop;
  /* The current job: written before the participants' counters are bumped, read only by participants,
   * and not changed again until every participant has finished. */
  weft_cpu_task_fn fn;
  void *ctx;
  int nthreads;
  /* Barrier state: arrivals in this round, and the round number the waiters watch. */
  atomic_int bar_count;
  atomic_uint bar_round;
};

static void *worker_main(void *arg) {
  worker *w = arg;
  weft_cpu_pool *p = w->pool;
  unsigned seen = 0;
  for (;;) {
    int spins = 0;
    while (atomic_load_explicit(&w->go, memory_order_acquire) == seen && !atomic_load(&p->stop)) {
      if (++spins < SPIN_BEFORE_SLEEP) {
        CPU_RELAX();
        continue;
      }
      /* sleeping is raised before go is re-read, and the runner bumps go before reading sleeping, so one
       * of the two always sees the other: no wake-up is lost. */
      pthread_mutex_lock(&w->mu);
      atomic_store(&w->sleeping, 1);
      while (atomic_load(&w->go) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&w->cv, &w->mu);
      atomic_store(&w->sleeping, 0);
      pthread_mutex_unlock(&w->mu);
      spins = 0;
    }
    if (atomic_load(&p->stop)) return NULL;
    seen++;
    p->fn(p->ctx, w->tid, p->nthreads);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
  }
}

static void wake(worker *w) {
  atomic_fetch_add(&w->go, 1);
  if (atomic_load(&w->sleeping)) {
    pthread_mutex_lock(&w->mu);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
  }
}

void weft_cpu_pool_create(int threads, weft_cpu_pool **out_pool) {
  *out_pool = NULL;
  weft_cpu_pool *p = calloc(1, sizeof *p);
  if (!p) return;
  int want = threads > 1 ? threads - 1 : 0;
  p->workers = want ? calloc((size_t)want, sizeof *p->workers) : NULL;
  if (want && !p->workers) want = 0;
  for (int i = 0; i < want; i++) {
    worker *w = &p->workers[i];
    w->pool = p;
    w->tid = i + 1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
      pthread_cond_destroy(&w->cv);
      pthread_mutex_destroy(&w->mu);
      break;
    }
    p->nworkers++;
  }
  *out_pool = p;
}

int weft_cpu_pool_threads(const weft_cpu_pool *p) { return p ? p->nworkers + 1 : 1; }

void weft_cpu_pool_run(weft_cpu_pool *p, int nthreads, weft_cpu_task_fn fn, void *ctx) {
  int avail = weft_cpu_pool_threads(p);
  if (nthreads > avail) nthreads = avail;
  if (nthreads <= 1) {
    fn(ctx, 0, 1);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  p->nthreads = nthreads;
  atomic_store(&p->bar_count, 0);
  atomic_store(&p->pending, nthreads - 1);
  for (int i = 0; i < nthreads - 1; i++) wake(&p->workers[i]);
  fn(ctx, 0, nthreads);
  int spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
    if (++spins < SPIN_BEFORE_YIELD) CPU_RELAX();
    else sched_yield();
  }
}

void weft_cpu_pool_barrier(weft_cpu_pool *p, int nthreads) {
  if (nthreads <= 1) return;
  unsigned round = atomic_load_explicit(&p->bar_round, memory_order_acquire);
  if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == nthreads - 1) {
    atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->bar_round, 1, memory_order_release);
    return;
  }
  int spins = 0;
  while (atomic_load_explicit(&p->bar_round, memory_order_acquire) == round) {
    if (++spins < SPIN_BEFORE_YIELD) CPU_RELAX();
    else sched_yield();
  }
}

void weft_cpu_pool_destroy(weft_cpu_pool *p) {
  if (!p) return;
  atomic_store(&p->stop, 1);
  for (int i = 0; i < p->nworkers; i++) {
    worker *w = &p->workers[i];
    pthread_mutex_lock(&w->mu);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
  }
  for (int i = 0; i < p->nworkers; i++) {
    pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->workers[i].cv);
    pthread_mutex_destroy(&p->workers[i].mu);
  }
  free(p->workers);
  free(p);
}
