/* sched.h - the scheduler's own declarations, shared between its files: the op path's validators (one per
 * op, validate.c), computing lost values again (recover.c). The scheduler is the top of the library's
 * layers (docs/DESIGN.md, "Layers"): the public op path, routing (route.h), splits (split.h), measuring
 * (measure.h), recovery and weft_fabric_open/close, over the core (core/internal.h), the cost model
 * (cost/cost.h) and the base. */
#ifndef WEFT_SCHED_H
#define WEFT_SCHED_H

#include "../core/internal.h"
#include "../cost/cost.h"

/* Checks a call's shapes (and what else the op needs) and fills the weft_op's fields; operands are
 * non-NULL where required, of the right dtypes, and live tensors of f. Index tensors are checked on the
 * host before anything runs (brought home if need be: they are small). */
typedef weft_status (*weft_op_validate_fn)(weft_fabric *f, weft_op *op, weft_tensor *const *in,
                                           weft_tensor *const *out, const weft_op_params *p);
/* One per weft_op_kind (validate.c). */
extern const weft_op_validate_fn weft_op_validators[WEFT_OP_COUNT];

/* Computes a lost value again on the lanes still up, by running the op that made it through the op path
 * (recover.c); WEFT_ERR_LANE_FAILED with the reason when it cannot. The core calls it through the fabric's
 * recover hook. */
weft_status weft_sched_recover(weft_tensor *t, int depth);
/* Recovers every lost value now, before anything it was made from changes (the fabric's recover_all). */
void weft_sched_recover_all(weft_fabric *f);

#endif
