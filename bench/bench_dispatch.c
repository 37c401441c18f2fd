/* bench_dispatch.c - what one more op costs weft's caller (#22's dispatch figures), in one run:
 *   routing:  a tiny add (16 elements, resident on the cpu lane) routed (WEFT_LANE_AUTO) against the same
 *             add pinned to the cpu lane; the difference per op is the router's cost on the op path;
 *   scope:    on each device lane that batches scopes (cuda:N, vulkan:N), N tiny adds on resident tensors
 *             recorded in one scope and submitted, against one add in a scope; (t_N - t_1) / (N - 1) is the
 *             cost of one more op inside a scope, submission and the device's time for it included.
 * Medians of repeats, interleaved. Prints one line per figure and a RESULT line each (key=value).
 *
 *   bench_dispatch [--ops N] [--repeats R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"
#include "bench_util.h"

/* seconds for n adds y = x + y with desc d (NULL: routed), outside any scope */
static double adds(weft_fabric *f, const weft_op_desc *d, weft_tensor *x, weft_tensor *y, int n) {
  const double t0 = bench_now();
  for (int i = 0; i < n; i++)
    if (weft_op_add(f, d, x, y, y) != WEFT_OK) return -1;
  if (weft_fabric_sync(f) != WEFT_OK) return -1;
  return bench_now() - t0;
}

static double scoped(weft_fabric *f, const weft_op_desc *d, weft_tensor *x, weft_tensor *y, int n) {
  const double t0 = bench_now();
  if (weft_scope_begin(f) != WEFT_OK) return -1;
  for (int i = 0; i < n; i++)
    if (weft_op_add(f, d, x, y, y) != WEFT_OK) return -1;
  if (weft_scope_end(f) != WEFT_OK) return -1;
  return bench_now() - t0;
}

int main(int argc, char **argv) {
  int ops = 2000, reps = 9;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ops") && i + 1 < argc) ops = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_dispatch [--ops N] [--repeats R]\n");
      return 2;
    }
  }
  if (ops < 2 || reps < 1 || reps > 99) {
    fprintf(stderr, "bench_dispatch: --ops at least 2, --repeats 1..99\n");
    return 2;
  }
  weft_fabric_desc fd = WEFT_FABRIC_DESC_INIT;
  weft_fabric *f = NULL;
  if (weft_fabric_open(&fd, &f) != WEFT_OK) {
    fprintf(stderr, "bench_dispatch: %s\n", weft_open_error());
    return 1;
  }
  (void)weft_fabric_calibration_wait(f);
  size_t cpu = 0;
  if (weft_fabric_lane_find(f, "cpu", &cpu) != WEFT_OK) {
    fprintf(stderr, "bench_dispatch: no cpu lane: %s\n", weft_fabric_last_error(f));
    return 1;
  }
  const int64_t dims[1] = {16};
  float h[16];
  for (int i = 0; i < 16; i++) h[i] = 0.0f;
  weft_tensor *x = NULL, *y = NULL;
  if (weft_tensor_create(f, 1, dims, h, &x) != WEFT_OK || weft_tensor_create(f, 1, dims, h, &y) != WEFT_OK) {
    fprintf(stderr, "bench_dispatch: %s\n", weft_fabric_last_error(f));
    return 1;
  }
  /* routing: pinned and routed, interleaved */
  weft_op_desc pin = WEFT_OP_DESC_INIT;
  pin.lane = (int)cpu;
  double tp[99], tr[99];
  adds(f, &pin, x, y, ops), adds(f, NULL, x, y, ops); /* warm */
  for (int r = 0; r < reps; r++) {
    tp[r] = adds(f, &pin, x, y, ops);
    tr[r] = adds(f, NULL, x, y, ops);
    if (tp[r] < 0 || tr[r] < 0) {
      fprintf(stderr, "bench_dispatch: %s\n", weft_fabric_last_error(f));
      return 1;
    }
  }
  const double mp = bench_median(tp, reps) / ops, mr = bench_median(tr, reps) / ops;
  printf("routing: a tiny add pinned to cpu %.3f us, routed %.3f us: the router adds %.3f us an op (goal <= 0.5)\n",
         1e6 * mp, 1e6 * mr, 1e6 * (mr - mp));
  printf("RESULT what=routing pinned_us=%.4f routed_us=%.4f router_us=%.4f\n", 1e6 * mp, 1e6 * mr, 1e6 * (mr - mp));
  /* scopes: each device lane that offers add */
  const size_t nl = weft_fabric_lane_count(f);
  for (size_t i = 0; i < nl; i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(f, i, &li) != WEFT_OK || li.failed || i == cpu || !(li.ops & WEFT_OP_BIT(WEFT_OP_ADD)))
      continue;
    if (strcmp(li.kind, "cuda") && strcmp(li.kind, "vulkan")) continue;
    weft_op_desc d = WEFT_OP_DESC_INIT;
    d.lane = (int)i;
    double t1[99], tn[99];
    if (scoped(f, &d, x, y, 1) < 0 || scoped(f, &d, x, y, ops) < 0) {
      printf("scope on %s: %s\n", li.name, weft_fabric_last_error(f));
      continue;
    }
    for (int r = 0; r < reps; r++) t1[r] = scoped(f, &d, x, y, 1), tn[r] = scoped(f, &d, x, y, ops);
    const double a = bench_median(t1, reps), b = bench_median(tn, reps), per = (b - a) / (ops - 1);
    printf("scope on %s: one add %.1f us, %d adds %.1f us: one more op %.3f us (goal <= 1 on cuda)\n", li.name, 1e6 * a,
           ops, 1e6 * b, 1e6 * per);
    printf("RESULT what=scope lane=%s one_us=%.3f n=%d n_us=%.3f per_op_us=%.4f\n", li.name, 1e6 * a, ops, 1e6 * b,
           1e6 * per);
  }
  weft_tensor_destroy(x);
  weft_tensor_destroy(y);
  weft_fabric_close(f);
  return 0;
}
