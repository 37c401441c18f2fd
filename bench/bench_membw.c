/* bench_membw.c - this machine's memory bandwidth by a simple copy: 1, 2, ... T threads (default every
 * CPU) each memcpy their share of a buffer of 256 MiB (far past any cache) into another, the best of 10
 * rounds at each count. Prints "membw_copy GBPS" for the best count, counting the bytes read and the bytes
 * written (2 x 256 MiB a round): the figure compare_gpt.sh divides a decode step's weight bytes by for the
 * bandwidth limit. A figure, not a test. Usage: bench_membw [threads] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bench_util.h"

#define BYTES ((size_t)256 << 20)

typedef struct part {
  char *dst;
  const char *src;
  size_t n;
} part;

static void *copy_part(void *arg) {
  part *p = arg;
  memcpy(p->dst, p->src, p->n);
  return NULL;
}

/* The best time of 10 rounds of the copy on nth threads. */
static double best_copy(char *dst, const char *src, long nth) {
  pthread_t th[256];
  part parts[256];
  const size_t share = BYTES / (size_t)nth / 64 * 64;
  double best = 1e30;
  for (int round = 0; round < 10; round++) {
    const double t0 = bench_now();
    for (long i = 0; i < nth; i++) {
      parts[i].dst = dst + (size_t)i * share, parts[i].src = src + (size_t)i * share;
      parts[i].n = i == nth - 1 ? BYTES - (size_t)i * share : share;
      if (i > 0 && pthread_create(&th[i], NULL, copy_part, &parts[i]) != 0) copy_part(&parts[i]), th[i] = 0;
    }
    copy_part(&parts[0]);
    for (long i = 1; i < nth; i++)
      if (th[i]) pthread_join(th[i], NULL);
    const double dt = bench_now() - t0;
    if (dt < best) best = dt;
  }
  return best;
}

int main(int argc, char **argv) {
  long most = argc > 1 ? atol(argv[1]) : sysconf(_SC_NPROCESSORS_ONLN);
  if (most < 1 || most > 256) most = 1;
  char *a = malloc(BYTES), *b = malloc(BYTES);
  if (!a || !b) {
    fprintf(stderr, "bench_membw: out of memory for 2 x %zu bytes\n", BYTES);
    return 1;
  }
  memset(a, 1, BYTES); /* touch every page before timing */
  memset(b, 2, BYTES);
  double best = 1e30;
  long best_nth = 1;
  for (long nth = 1; nth <= most; nth++) {
    const double t = best_copy(b, a, nth);
    if (t < best) best = t, best_nth = nth;
  }
  fprintf(stderr, "bench_membw: memcpy of %zu MiB, best of 10 rounds at 1..%ld threads: at %ld\n", BYTES >> 20, most,
          best_nth);
  printf("membw_copy %.2f\n", 2.0 * (double)BYTES / best / 1e9);
  free(a), free(b);
  return 0;
}
