/* pool.c - the CPU lane's persistent worker threads. Each worker watches its own wake-up counter, so a
 * job that uses only some of the threads never disturbs the others; after a job a worker polls for a
 * fraction of a millisecond before it sleeps on its condition variable, so back-to-back large ops do not
 * pay a futex wake each (and do not risk the OS placing the woken worker on the caller's core).
 *
 * Joining: the job's gate holds its sequence number, a closed bit and the count of workers inside. A
 * worker enters only an open gate of the job it was woken for; the caller closes the gate when its own
 * share is done and waits only for workers already inside, never for one that has not arrived.
 *
 * Placement: on some kernels (seen in VMs) a woken worker lands on the caller's core and the load balancer
 * leaves both there, halving the throughput for as long as the pool stays busy. A worker that finds
 * itself on the caller's core therefore moves itself off it (an affinity mask of the process's CPUs minus
 * that one). */
#define _GNU_SOURCE
#include "pool.h"

#include "../../core/fpenv.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long an idle worker polls before it sleeps. */
#define IDLE_SPIN_NS 300000
/* Pauses before a waiter inside a job starts yielding its core. */
#define SPIN_BEFORE_YIELD 1000

#define GATE_CLOSED ((uint64_t)1 << 31)
#define GATE_USERS ((uint64_t)GATE_CLOSED - 1)

typedef struct worker {
  weft_cpu_pool *pool;
  int tid;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint go;      /* the sequence number of the last job this worker was woken for */
  atomic_int sleeping; /* the worker is blocked (or about to block) on cv */
} worker;

struct weft_cpu_pool {
  int nworkers;
#ifdef __linux__
  cpu_set_t allowed; /* the CPUs the process may use, read when the pool starts */
  int caller_cpu;    /* where the caller's thread is running the current job */
#endif
  worker *workers;
  atomic_int stop;
  unsigned seq; /* the caller's count of jobs (only the caller writes it) */
  /* The current job, written before the gate opens. */
  weft_cpu_task_fn fn;
  void *ctx;
  atomic_ullong gate; /* seq << 32 | closed bit | workers inside */
};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Waits until the worker's go differs from `seen` (or the pool stops) and returns the new value. */
static unsigned wait_for_job(worker *w, unsigned seen) {
  weft_cpu_pool *p = w->pool;
  int64_t until = now_ns() + IDLE_SPIN_NS;
  unsigned spins = 0;
  for (;;) {
    unsigned g = atomic_load_explicit(&w->go, memory_order_acquire);
    if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) return g;
    CPU_RELAX();
    if ((++spins & 63) == 0 && now_ns() > until) break;
  }
  /* sleeping is raised before go is re-read, and the waker stores go before reading sleeping, so one of
   * the two always sees the other: no wake-up is lost. */
  pthread_mutex_lock(&w->mu);
  atomic_store(&w->sleeping, 1);
  while (atomic_load(&w->go) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&w->cv, &w->mu);
  atomic_store(&w->sleeping, 0);
  pthread_mutex_unlock(&w->mu);
  return atomic_load_explicit(&w->go, memory_order_acquire);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  weft_cpu_pool *p = w->pool;
  unsigned seen = 0;
  /* A thread starts with its creator's floating-point environment: whatever the caller had set when the
   * lane was opened (FTZ/DAZ, another rounding mode). The workers' is the clean one (fpenv.h), set here
   * and checked again before each job (a library the caller loads could change it in a callback). */
  weft_fpenv_clean();
  for (;;) {
    seen = wait_for_job(w, seen);
    if (atomic_load(&p->stop)) return NULL;
    uint64_t v = atomic_load_explicit(&p->gate, memory_order_acquire);
    int joined = 0;
    while ((unsigned)(v >> 32) == seen && !(v & GATE_CLOSED)) {
      if (atomic_compare_exchange_weak_explicit(&p->gate, &v, v + 1, memory_order_acquire, memory_order_acquire)) {
        joined = 1;
        break;
      }
    }
    if (!joined) continue; /* woken too late: the caller already finished that job */
#ifdef __linux__
    int cpu = sched_getcpu();
    if (cpu >= 0 && cpu == p->caller_cpu && cpu < CPU_SETSIZE && CPU_COUNT(&p->allowed) > 1) {
      cpu_set_t set = p->allowed;
      CPU_CLR(cpu, &set);
      pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
#endif
    weft_fpenv_clean();
    p->fn(p->ctx, w->tid);
    atomic_fetch_sub_explicit(&p->gate, 1, memory_order_release);
  }
}

void weft_cpu_pool_create(int threads, weft_cpu_pool **out_pool) {
  *out_pool = NULL;
  weft_cpu_pool *p = calloc(1, sizeof *p);
  if (!p) return;
  atomic_init(&p->gate, GATE_CLOSED);
#ifdef __linux__
  if (sched_getaffinity(0, sizeof p->allowed, &p->allowed) != 0) CPU_ZERO(&p->allowed);
#endif
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

static void wake(worker *w, unsigned seq) {
  atomic_store(&w->go, seq);
  if (atomic_load(&w->sleeping)) {
    pthread_mutex_lock(&w->mu);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
  }
}

void weft_cpu_pool_run(weft_cpu_pool *p, int nthreads, weft_cpu_task_fn fn, void *ctx) {
  int avail = weft_cpu_pool_threads(p);
  if (nthreads > avail) nthreads = avail;
  if (nthreads <= 1) {
    fn(ctx, 0);
    return;
  }
  if (++p->seq == 0) p->seq = 1; /* 0 is every worker's initial "seen" */
  p->fn = fn;
  p->ctx = ctx;
#ifdef __linux__
  p->caller_cpu = sched_getcpu();
#endif
  atomic_store_explicit(&p->gate, (uint64_t)p->seq << 32, memory_order_release);
  for (int i = 0; i < nthreads - 1; i++) wake(&p->workers[i], p->seq);
  fn(ctx, 0);
  uint64_t v = atomic_fetch_or_explicit(&p->gate, GATE_CLOSED, memory_order_acq_rel) | GATE_CLOSED;
  int spins = 0;
  while (v & GATE_USERS) {
    if (++spins < SPIN_BEFORE_YIELD) CPU_RELAX();
    else sched_yield();
    v = atomic_load_explicit(&p->gate, memory_order_acquire);
  }
}

void weft_cpu_wait_until(const atomic_llong *counter, long long target) {
  int spins = 0;
  while (atomic_load_explicit(counter, memory_order_acquire) < target) {
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
