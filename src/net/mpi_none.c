/* mpi_none.c - the weft_mpi_* calls of include/weft.h in a build without MPI (-DWEFT_MPI=OFF, or no MPI
 * library found): each says so, so a program can tell the user what to install. */
#include <stdlib.h>

#include "core/internal.h"

static const char *const NO_MPI =
    "weft was built without MPI (Debian: openmpi-bin libopenmpi-dev, then rebuild; -DWEFT_MPI=AUTO finds it)";

int weft_mpi_built(void) { return 0; }
int weft_mpi_launched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}
weft_status weft_mpi_init(weft_mpi_mode mode, int *argc, char ***argv) {
  (void)mode, (void)argc, (void)argv;
  return WEFT_ERR_UNSUPPORTED;
}
int weft_mpi_rank(void) { return 0; }
int weft_mpi_size(void) { return 1; }
const char *weft_mpi_last_error(void) { return NO_MPI; }
weft_status weft_mpi_finalize(void) { return WEFT_OK; }
void weft_mpi_abort(int code) { (void)code; }
weft_status weft_mpi_sum_ordered(double *values, int n) {
  (void)values, (void)n;
  return WEFT_ERR_UNSUPPORTED;
}
int weft_mpi_timeout_ms(void) { return 60000; }
weft_status weft_mpi_grad_begin(weft_fabric *f, weft_contract contract, weft_mpi_grad **out) {
  (void)contract;
  if (out) *out = NULL;
  return f ? weft_fail(f, WEFT_ERR_UNSUPPORTED, "%s", NO_MPI) : WEFT_ERR_UNSUPPORTED;
}
weft_status weft_mpi_grad_passes(weft_mpi_grad *g, weft_tensor *c, int passes) {
  (void)g, (void)c, (void)passes;
  return WEFT_ERR_UNSUPPORTED;
}
weft_status weft_mpi_grad_matmul(weft_mpi_grad *g, const weft_op_desc *desc, weft_tensor *a, int ta, weft_tensor *b,
                                 int tb, weft_tensor *c) {
  (void)g, (void)desc, (void)a, (void)ta, (void)b, (void)tb, (void)c;
  return WEFT_ERR_UNSUPPORTED;
}
weft_status weft_mpi_grad_sum_rows(weft_mpi_grad *g, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out) {
  (void)g, (void)desc, (void)x, (void)out;
  return WEFT_ERR_UNSUPPORTED;
}
weft_status weft_mpi_grad_op(weft_mpi_grad *g, const weft_op_desc *desc, weft_op_kind kind, weft_tensor *const *in,
                             int nin, weft_tensor *const *out, int nout, const weft_op_params *params,
                             uint32_t chained) {
  (void)g, (void)desc, (void)kind, (void)in, (void)nin, (void)out, (void)nout, (void)params, (void)chained;
  return WEFT_ERR_UNSUPPORTED;
}
weft_status weft_mpi_grad_end(weft_mpi_grad *g) {
  (void)g;
  return WEFT_OK;
}
