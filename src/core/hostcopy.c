/* hostcopy.c - large host memory copies on several threads, one set of threads for the whole process.
 * One thread's memcpy reaches a fraction of a host's memory bandwidth (5.5 GB/s on a 16-core VM where nine
 * threads together moved 24 GB/s), while the bus to a GPU moves 55 GB/s and the caller waits for the copy
 * anyway: cores that would idle copy instead. Users: a tensor's data into and out of its host copy
 * (tensor.c), a GPU lane's pinned staging (cuda_lane.c).
 *
 * A copy is cut into pieces taken from a shared counter; the caller takes pieces too. Workers join a copy
 * through a gate (as the CPU lane's pool does): the caller closes it when no piece is left and waits only for
 * workers inside, never for one the OS has not woken yet. After a copy a worker polls briefly before it
 * sleeps, so a run of copies (a transfer in parts) does not pay a wake-up each. */
#define _GNU_SOURCE
#include "envnum.h"
#include "hostcopy.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PIECE ((size_t)256 << 10) /* bytes a thread takes at a time */
#define IDLE_SPIN_NS 50000        /* how long an idle worker polls before it sleeps: the gap between two
                                   * pieces of a transfer, not long enough to crowd a compute pool starting */
#define MAX_THREADS 64

#define GATE_CLOSED ((uint64_t)1 << 31)
#define GATE_USERS (GATE_CLOSED - 1)

struct weft_hostcopy {
  int refs; /* under g_mu */
  int nworkers;
  pthread_t *threads;
  pthread_mutex_t job_mu; /* one copy at a time */
  pthread_mutex_t mu;     /* sleeping workers */
  pthread_cond_t wake;
  int sleepers; /* under mu */
  atomic_int stop;
  uint32_t seq;       /* the caller's count of copies (under job_mu) */
  atomic_ullong gate; /* seq << 32 | closed bit | workers inside */
  /* the copy under way, written before its gate opens */
  char *dst;
  const char *src; /* NULL: zero dst */
  size_t bytes, npieces;
  atomic_size_t next; /* the next piece to take */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static weft_hostcopy *g_copier;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Takes pieces until none is left. */
static void take_pieces(weft_hostcopy *c) {
  char *dst = c->dst;
  const char *src = c->src;
  const size_t bytes = c->bytes, n = c->npieces;
  for (;;) {
    size_t i = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
    if (i >= n) return;
    size_t lo = i * PIECE, len = bytes - lo < PIECE ? bytes - lo : PIECE;
    if (src) memcpy(dst + lo, src + lo, len);
    else memset(dst + lo, 0, len);
  }
}

static void *worker(void *arg) {
  weft_hostcopy *c = arg;
  uint32_t seen = 0;
  for (;;) {
    int64_t until = now_ns() + IDLE_SPIN_NS;
    unsigned spins = 0;
    while ((uint32_t)(atomic_load_explicit(&c->gate, memory_order_acquire) >> 32) == seen &&
           !atomic_load_explicit(&c->stop, memory_order_relaxed)) {
      if ((++spins & 63) == 0 && now_ns() > until) {
        pthread_mutex_lock(&c->mu);
        c->sleepers++;
        while ((uint32_t)(atomic_load_explicit(&c->gate, memory_order_acquire) >> 32) == seen &&
               !atomic_load_explicit(&c->stop, memory_order_relaxed))
          pthread_cond_wait(&c->wake, &c->mu);
        c->sleepers--;
        pthread_mutex_unlock(&c->mu);
        break;
      }
    }
    if (atomic_load_explicit(&c->stop, memory_order_relaxed)) return NULL;
    uint64_t g = atomic_load_explicit(&c->gate, memory_order_acquire);
    seen = (uint32_t)(g >> 32);
    int in = 0;
    while (!(g & GATE_CLOSED) && (uint32_t)(g >> 32) == seen)
      if (atomic_compare_exchange_weak_explicit(&c->gate, &g, g + 1, memory_order_acq_rel, memory_order_acquire)) {
        in = 1;
        break;
      }
    if (!in) continue; /* woken too late: the copy is done */
    take_pieces(c);
    atomic_fetch_sub_explicit(&c->gate, 1, memory_order_release);
  }
}

static int threads_default(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  long n = online - 1;
  return n < 1 ? 1 : n > 16 ? 16 : (int)n;
}

static int threads_wanted(void) {
  long v;
  if (weft_env_long("WEFT_COPY_THREADS", 1, MAX_THREADS, &v) == 1) return (int)v;
  return threads_default();
}

int weft_hostcopy_env_problem(char *why, size_t whylen) {
  long v;
  if (weft_env_long("WEFT_COPY_THREADS", 1, MAX_THREADS, &v) >= 0) return 0;
  snprintf(why, whylen, "WEFT_COPY_THREADS='%s' is not a whole number from 1 to %d: host copies use the default, %d "
           "thread%s", getenv("WEFT_COPY_THREADS"), MAX_THREADS, threads_default(), threads_default() == 1 ? "" : "s");
  return 1;
}

static void destroy(weft_hostcopy *c) {
  atomic_store(&c->stop, 1);
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->wake);
  pthread_mutex_unlock(&c->mu);
  for (int i = 0; i < c->nworkers; i++) pthread_join(c->threads[i], NULL);
  pthread_mutex_destroy(&c->job_mu);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->wake);
  free(c->threads);
  free(c);
}

static weft_hostcopy *create(void) {
  int n = threads_wanted() - 1;
  if (n < 1) return NULL;
  weft_hostcopy *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->threads = calloc((size_t)n, sizeof *c->threads);
  if (!c->threads) {
    free(c);
    return NULL;
  }
  pthread_mutex_init(&c->job_mu, NULL);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->wake, NULL);
  atomic_init(&c->gate, GATE_CLOSED);
  atomic_init(&c->stop, 0);
  atomic_init(&c->next, 0);
  for (int i = 0; i < n; i++) {
    if (pthread_create(&c->threads[i], NULL, worker, c) != 0) break;
    c->nworkers++;
  }
  if (c->nworkers == 0) {
    destroy(c);
    return NULL;
  }
  return c;
}

weft_hostcopy *weft_hostcopy_acquire(void) {
  pthread_mutex_lock(&g_mu);
  if (!g_copier) g_copier = create();
  if (g_copier) g_copier->refs++;
  weft_hostcopy *c = g_copier;
  pthread_mutex_unlock(&g_mu);
  return c;
}

void weft_hostcopy_release(weft_hostcopy *c) {
  if (!c) return;
  pthread_mutex_lock(&g_mu);
  int last = --c->refs == 0;
  if (last && g_copier == c) g_copier = NULL;
  pthread_mutex_unlock(&g_mu);
  if (last) destroy(c);
}

int weft_hostcopy_threads(const weft_hostcopy *c) { return c ? c->nworkers + 1 : 1; }

void weft_hostcopy_run(weft_hostcopy *c, void *dst, const void *src, size_t bytes) {
  if (!bytes) return;
  if (!c || bytes < WEFT_HOSTCOPY_MIN || pthread_mutex_trylock(&c->job_mu) != 0) {
    if (src) memcpy(dst, src, bytes);
    else memset(dst, 0, bytes);
    return;
  }
  c->dst = dst;
  c->src = src;
  c->bytes = bytes;
  c->npieces = (bytes + PIECE - 1) / PIECE;
  atomic_store_explicit(&c->next, 0, memory_order_relaxed);
  c->seq++;
  atomic_store_explicit(&c->gate, (uint64_t)c->seq << 32, memory_order_release); /* open, nobody inside */
  pthread_mutex_lock(&c->mu);
  if (c->sleepers) pthread_cond_broadcast(&c->wake);
  pthread_mutex_unlock(&c->mu);
  take_pieces(c);
  /* no piece is left: close the gate, then wait for the pieces workers inside are still copying */
  atomic_fetch_or_explicit(&c->gate, GATE_CLOSED, memory_order_acq_rel);
  unsigned spins = 0;
  while (atomic_load_explicit(&c->gate, memory_order_acquire) & GATE_USERS)
    if (++spins > 256) sched_yield();
  pthread_mutex_unlock(&c->job_mu);
}
