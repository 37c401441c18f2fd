/* route.c - the router. For now a residency rule: run where every input already lives, else on a
 * host-memory lane (the CPU), else on the first lane that can. The measured cost model replaces this rule
 * (cost/); lanes know nothing of it either way. */
#include "route.h"

int weft_route_lane_can_run(weft_fabric *f, int lane, const weft_op *op) {
  weft_lane_slot *s = &f->lanes[lane];
  if (s->failed || !(s->desc.contracts & WEFT_CONTRACT_BIT(op->contract))) return 0;
  if (s->vt.supports && s->vt.supports(s->self, op) != WEFT_OK) return 0;
  return 1;
}

int weft_route_pick(weft_fabric *f, const weft_op *op, weft_tensor *const *inputs, int ninputs) {
  int host_lane = -1, first = -1;
  for (size_t i = 0; i < f->nlanes; i++) {
    if (!weft_route_lane_can_run(f, (int)i, op)) continue;
    if (first < 0) first = (int)i;
    if (weft_lane_is_host(f, (int)i)) {
      if (host_lane < 0) host_lane = (int)i;
      continue;
    }
    int all_here = ninputs > 0;
    for (int k = 0; k < ninputs; k++)
      if (inputs[k] && !inputs[k]->valid[i]) all_here = 0;
    if (all_here) return (int)i;
  }
  if (host_lane >= 0) return host_lane;
  if (first < 0)
    weft_fail(f, WEFT_ERR_UNSUPPORTED, "%s: no lane in this fabric honours the '%s' contract for this op",
              weft_op_kind_str(op->kind), weft_contract_str(op->contract));
  return first;
}
