/* test_mpi_conformance.c - the conformance suite on the lanes of the other ranks of an MPI job, run as
 * `mpirun -np N test_mpi_conformance`: rank 0 opens a fabric of the mpi:<rank>/<lane> lanes only and runs
 * the whole suite (conformance.c) on each of them, through the router and in chains across them; every
 * other rank serves its lanes (WEFT_MPI_LANES, default cpu) with `weft worker`'s sessions over MPI
 * (src/net/mpi_serve.c) until rank 0 is done (weft_mpi_finalize). With one rank there are no other ranks'
 * lanes: Skipped (77). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "net/mpi.h"
#include "tutil.h"

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
    weft_fabric_close(f);
  }
  weft_mpi_finalize();
  return tu_finish("mpi conformance", start);
}
