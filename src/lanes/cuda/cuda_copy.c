/* cuda_copy.c - host memory copies on several threads: between the caller's (pageable) arrays and the
 * lane's pinned staging memory. One thread's memcpy reaches a fraction of the host's memory bandwidth; the
 * bus to the GPU is faster than that, so the copies into and out of staging are split across threads. */
#include "cuda_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct weft_cu_copier {
  int nworkers;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  uint64_t gen;  /* bumped per job */
  int pending;   /* workers still copying the current job */
  int stop;
  char *dst;
  const char *src;
  size_t bytes;
};

/* Part `i` of `parts` of a copy, cut at 4 KiB boundaries so no two threads write one page. */
static void copy_part(char *dst, const char *src, size_t bytes, int i, int parts) {
  size_t per = (bytes / (size_t)parts + 4095) & ~(size_t)4095;
  size_t lo = per * (size_t)i;
  if (lo >= bytes) return;
  size_t hi = lo + per < bytes ? lo + per : bytes;
  memcpy(dst + lo, src + lo, hi - lo);
}

typedef struct worker_arg {
  weft_cu_copier *c;
  int index;
} worker_arg;

static void *worker(void *p) {
  worker_arg a = *(worker_arg *)p;
  free(p);
  weft_cu_copier *c = a.c;
  uint64_t seen = 0;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (c->gen == seen && !c->stop) pthread_cond_wait(&c->work, &c->mu);
    if (c->stop) break;
    seen = c->gen;
    char *dst = c->dst;
    const char *src = c->src;
    size_t bytes = c->bytes;
    pthread_mutex_unlock(&c->mu);
    copy_part(dst, src, bytes, a.index, c->nworkers + 1);
    pthread_mutex_lock(&c->mu);
    if (--c->pending == 0) pthread_cond_signal(&c->done);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

weft_cu_copier *weft_cu_copier_create(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  /* One thread's memcpy reaches a small part of the memory bandwidth (5.5 GB/s on a 16-core VM where nine
   * threads together moved 24 GB/s), and the caller waits for the copy anyway: all cores but one join. */
  int n = online > 2 ? (int)online - 2 : 0;
  if (n > 15) n = 15;
  if (n < 1) return NULL;
  weft_cu_copier *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->threads = calloc((size_t)n, sizeof *c->threads);
  if (!c->threads) {
    free(c);
    return NULL;
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->work, NULL);
  pthread_cond_init(&c->done, NULL);
  for (int i = 0; i < n; i++) {
    worker_arg *a = malloc(sizeof *a);
    if (!a) break;
    a->c = c;
    a->index = i + 1; /* part 0 is the caller's */
    if (pthread_create(&c->threads[i], NULL, worker, a) != 0) {
      free(a);
      break;
    }
    c->nworkers++;
  }
  if (c->nworkers == 0) {
    weft_cu_copier_destroy(c);
    return NULL;
  }
  return c;
}

void weft_cu_copier_destroy(weft_cu_copier *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_cond_broadcast(&c->work);
  pthread_mutex_unlock(&c->mu);
  for (int i = 0; i < c->nworkers; i++) pthread_join(c->threads[i], NULL);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->work);
  pthread_cond_destroy(&c->done);
  free(c->threads);
  free(c);
}

void weft_cu_copy(weft_cu_copier *c, void *dst, const void *src, size_t bytes) {
  /* below a few MiB the hand-off costs more than it saves */
  if (!c || bytes < ((size_t)2 << 20)) {
    memcpy(dst, src, bytes);
    return;
  }
  pthread_mutex_lock(&c->mu);
  c->dst = dst;
  c->src = src;
  c->bytes = bytes;
  c->pending = c->nworkers;
  c->gen++;
  pthread_cond_broadcast(&c->work);
  pthread_mutex_unlock(&c->mu);
  copy_part(dst, src, bytes, 0, c->nworkers + 1);
  pthread_mutex_lock(&c->mu);
  while (c->pending > 0) pthread_cond_wait(&c->done, &c->mu);
  pthread_mutex_unlock(&c->mu);
}

int weft_cu_copier_threads(const weft_cu_copier *c) { return c ? c->nworkers + 1 : 1; }
