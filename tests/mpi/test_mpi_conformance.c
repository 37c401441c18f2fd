/* test_mpi_conformance.c - the conformance suite on the lanes of the other ranks of an MPI job, run as
 * `mpirun -np N test_mpi_conformance`: rank 0 opens a fabric of the mpi:<rank>/<lane> lanes only and runs
 * the whole suite (conformance.c) on each of them, through the router and in chains across them; every
 * other rank serves its lanes (WEFT_MPI_LANES, default cpu) with `weft worker`'s sessions over MPI
 * (src/net/mpi_serve.c) until rank 0 is done (weft_mpi_finalize). Then a tensor larger than one frame goes
 * to each of those lanes and back (the lanes' bulk path: several frames in flight, a WRITE's elements
 * received straight into the tensor). With one rank there are no other ranks' lanes: Skipped (77). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "net/mpi.h"
#include "tutil.h"

/* 68 MiB (two 64 MiB frames' worth) up to lane `name`, scaled by 1 there (exact: the same bits), and back:
 * every float as it went. */
static void large_transfer(weft_fabric *f, const char *name) {
  const int64_t n = (int64_t)17 << 20;
  size_t lane = 0;
  float *h = malloc((size_t)n * sizeof(float)), *back = malloc((size_t)n * sizeof(float));
  weft_tensor *x = NULL, *y = NULL;
  TU_CHECK(h && back, "host memory for a large transfer");
  if (!h || !back || weft_fabric_lane_find(f, name, &lane) != WEFT_OK) {
    free(h), free(back);
    return;
  }
  for (int64_t i = 0; i < n; i++) h[i] = (float)(i % 100003) - 50000.5f;
  weft_op_desc od = {WEFT_CONTRACT_EXACT, (int)lane};
  weft_status st = weft_tensor_create(f, 1, &n, h, &x);
  if (st == WEFT_OK) st = weft_tensor_create(f, 1, &n, NULL, &y);
  if (st == WEFT_OK) st = weft_op_scale(f, &od, 1.0f, x, y);
  if (st == WEFT_OK) st = weft_tensor_read(y, back, (size_t)n);
  TU_CHECK(st == WEFT_OK, "%s: a tensor of %lld floats there and back: %s", name, (long long)n,
           st == WEFT_OK ? "" : weft_fabric_last_error(f));
  if (st == WEFT_OK) {
    int64_t bad = 0;
    while (bad < n && memcmp(&h[bad], &back[bad], sizeof(float)) == 0) bad++;
    TU_CHECK(bad == n, "%s: a large transfer came back with float %lld changed", name, (long long)bad);
    TU_CHECK(weft_fabric_last_lane(f) == (int)lane, "%s: the op ran there", name);
  }
  weft_tensor_destroy(x), weft_tensor_destroy(y);
  free(h), free(back);
}

int main(int argc, char **argv) {
  const double start = tu_now();
  if (weft_mpi_init(WEFT_MPI_LANES, &argc, &argv) != WEFT_OK) {
    fprintf(stderr, "FAIL: weft_mpi_init: %s\n", weft_mpi_last_error());
    return 1;
  }
  const int rank = weft_mpi_rank(), size = weft_mpi_size();
  if (size < 2) {
    weft_mpi_finalize();
    tu_skip("an MPI job of one rank has no other ranks' lanes (mpirun -np 2 or more)");
    return tu_finish("mpi conformance", start);
  }
  if (rank != 0) {
    char err[512] = "";
    const char *lanes = getenv("WEFT_MPI_LANES");
    weft_status st = weft_net_mpi_serve(lanes && lanes[0] ? lanes : "cpu", err, sizeof err);
    if (st != WEFT_OK) fprintf(stderr, "FAIL: rank %d: weft_net_mpi_serve: %s\n", rank, err);
    weft_mpi_finalize();
    return st != WEFT_OK;
  }
  const uint64_t seed = tu_seed();
  weft_fabric *f = NULL;
  weft_status st = tu_open("mpi", &f);
  TU_CHECK(st == WEFT_OK, "weft_fabric_open(mpi): %s", weft_open_error());
  if (st == WEFT_OK) {
    printf("conformance over MPI: %d ranks, seed %llu\n", size, (unsigned long long)seed);
    size_t n = weft_fabric_lane_count(f);
    TU_CHECK(n >= (size_t)(size - 1), "rank 0's fabric has a lane of each of the %d other ranks (it has %zu)", size - 1, n);
    for (int r = 1; r < size; r++) {
      char name[32];
      size_t at = 0;
      snprintf(name, sizeof name, "mpi:%d/cpu", r);
      TU_CHECK(weft_fabric_lane_find(f, name, &at) == WEFT_OK, "lane %s is in the fabric", name);
    }
    weft_conf_stats total = {0, 0, 0, 0};
    weft_conf_run_all(f, seed, &total);
    printf("total: %ld cases, %ld elements compared, %ld failed\n", total.cases, total.elements, total.failed);
    TU_CHECK(total.failed == 0, "%ld of %ld conformance cases failed", total.failed, total.cases);
    TU_CHECK(total.cases > 0, "the suite ran");
    for (int r = 1; r < size; r++) {
      char name[32];
      snprintf(name, sizeof name, "mpi:%d/cpu", r);
      large_transfer(f, name);
    }
    weft_fabric_close(f);
  }
  weft_mpi_finalize();
  return tu_finish("mpi conformance", start);
}
