/* gemm.c - the CPU lane's matmul framework. (First cut: the reference loops; the blocked framework and the
 * per-ISA microkernels replace this.) */
#include "../../core/reference.h"
#include "cpu.h"

void weft_cpu_matmul(weft_cpu_lane *lane, const weft_op *op) {
  (void)lane;
  for (int64_t p = 0; p < op->batch; p++) weft_ref_matmul(op, p, 0, op->m);
}

const char *weft_cpu_isa_name(void) { return "portable"; }
