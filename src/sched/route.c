/* route.c - the router. For each op, among the lanes that honour its contract:
 *   finish(lane) = wait until the lane is free
 *                + transfer of the inputs not resident there (download from where they live, upload there)
 *                + the result's way home, when every input came from the host (the caller works on host data)
 *                + alpha + work / beta
 * all scaled by the lane's online refinement factor, and the least finish wins. Costs come from the cost
 * model (cost/); lanes know nothing of routing. The whole decision is a few multiplies per lane. */
#include "route.h"

#include <stdlib.h>
#include <string.h>

#include "../core/optable.h"
#include "../cost/cost.h"
#include "measure.h"

int weft_route_lane_can_run(weft_fabric *f, int lane, const weft_op *op, const char **why) {
  weft_lane_slot *s = &f->lanes[lane];
  const char *w = "";
  if (s->failed) w = s->down_why[0] ? s->down_why : "is down";
  else if (!(weft_lane_ops(&s->desc) & WEFT_OP_BIT(op->kind))) w = "does not offer the op";
  else if (!(s->desc.contracts & WEFT_CONTRACT_BIT(op->contract))) w = "does not honour the contract";
  else if (s->vt.supports && s->vt.supports(s->self, op) != WEFT_OK) w = "declined the op (supports)";
  if (why) *why = w;
  return *w == '\0';
}

/* Seconds to bring `bytes` resident on `to` from where t lives (t NULL: from the host). */
static double move_cost(weft_fabric *f, const weft_tensor *t, int to, double bytes) {
  weft_lane_slot *dst = &f->lanes[to];
  int dst_host = (dst->desc.flags & WEFT_LANE_HOST_MEMORY) != 0;
  if (t && (dst_host ? t->host_valid : t->valid[to])) return 0.0;
  double cost = 0.0;
  if (t && !t->host_valid) {
    /* lives only on another device lane: it comes down first */
    for (size_t i = 0; i < f->nlanes; i++)
      if (t->valid[i]) {
        cost += weft_cost_predict(&f->lanes[i].cost[WEFT_COST_DOWNLOAD][weft_route_xfer(t, (int)i)], bytes);
        break;
      }
  }
  /* no tensor (explain): the line the query asked for */
  int x = t ? weft_route_xfer(t, to) : f->explain_xfer;
  if (!dst_host) cost += weft_cost_predict(&dst->cost[WEFT_COST_UPLOAD][x], bytes);
  return cost;
}

static double out_bytes(const weft_op *op) {
  switch (op->kind) {
  case WEFT_OP_MATMUL:
  case WEFT_OP_MATMUL_ACC: return 4.0 * (double)op->batch * (double)op->m * (double)op->n;
  case WEFT_OP_SUM_ROWS: return 4.0 * (double)op->cols;
  default: return 4.0 * (double)op->rows * (double)op->cols;
  }
}

static double in_bytes(const weft_op *op, int i) {
  if (op->kind == WEFT_OP_MATMUL || op->kind == WEFT_OP_MATMUL_ACC)
    return i == 0 ? 4.0 * (double)op->batch * (double)op->m * (double)op->k
                  : 4.0 * (double)(op->b_batched ? op->batch : 1) * (double)op->k * (double)op->n;
  if (op->kind == WEFT_OP_ADD && i == 1 && op->y_broadcast) return 4.0 * (double)op->cols;
  return 4.0 * (double)op->rows * (double)op->cols;
}

static int pick(weft_fabric *f, const weft_op *op, weft_cost_class cls, double work, double now,
                weft_tensor *const *inputs, int ninputs, weft_route_cost *costs, int may_measure);

int weft_route_pick(weft_fabric *f, const weft_op *op, weft_tensor *const *inputs, int ninputs,
                    weft_route_cost *costs) {
  double work;
  weft_cost_class cls = weft_cost_op_work(op, &work);
  weft_cost_background_poll(f); /* lanes measured in the background since: explained with their lines */
  /* a query: it explains with the models as they are, and never measures (or writes the cache) */
  return pick(f, op, cls, work, weft_fabric_now(f), inputs, ninputs, costs, 0);
}

int weft_route_pick_at(weft_fabric *f, const weft_op *op, weft_cost_class cls, double work, double now,
                       weft_tensor *const *inputs, int ninputs, weft_route_cost *costs) {
  return pick(f, op, cls, work, now, inputs, ninputs, costs, 1);
}

static int pick(weft_fabric *f, const weft_op *op, weft_cost_class cls, double work, double now,
                weft_tensor *const *inputs, int ninputs, weft_route_cost *costs, int may_measure) {
  int from_host = 1;
  for (int k = 0; inputs && k < ninputs; k++)
    if (inputs[k] && !inputs[k]->host_valid) from_host = 0;
  int eligible = 0;
  for (size_t i = 0; i < f->nlanes; i++) {
    costs[i].lane = f->lanes[i].desc.name;
    costs[i].eligible = weft_route_lane_can_run(f, (int)i, op, &costs[i].why_not);
    eligible += costs[i].eligible;
  }
  /* first real choice between lanes: measure what is unmeasured (once; failures and scopes say later) */
  if (may_measure && eligible > 1 && !f->models_ready) weft_cost_ensure(f);
  int best = -1;
  double best_total = 0;
  for (size_t i = 0; i < f->nlanes; i++) {
    weft_lane_slot *s = &f->lanes[i];
    weft_route_cost *c = &costs[i];
    c->wait = c->transfer = c->alpha = c->compute = c->total = 0;
    if (!c->eligible) continue;
    const weft_cost_state *cs = weft_cost_state_of(s, cls, op->contract);
    double refine = cs->line.refine;
    c->wait = s->busy_until > now ? s->busy_until - now : 0.0;
    /* explain passes no tensors: count the op's operands, all on the host (axpy reads x and y) */
    int n_in = inputs ? ninputs : weft_optable[op->kind].nin + (op->kind == WEFT_OP_AXPY);
    const int dst_host = (s->desc.flags & WEFT_LANE_HOST_MEMORY) != 0;
    for (int k = 0; k < n_in; k++) {
      const weft_tensor *t = inputs && k < ninputs ? inputs[k] : NULL;
      /* an operand that lives only on another lane can leave it once that lane has made it: the op waits
       * for that lane as well (a device's queued work, a scope's recorded ops) */
      if (t && !t->host_valid && !(dst_host ? 0 : t->valid[i]))
        for (size_t j = 0; j < f->nlanes; j++)
          if (t->valid[j]) {
            const double ready = f->lanes[j].busy_until - now;
            if (ready > c->wait) c->wait = ready;
            break;
          }
      /* the version-2 ops: the operand's own size where it is known, else one of rows*cols */
      const double bytes = op->kind < WEFT_OP_V1_COUNT ? in_bytes(op, k) : t ? 4.0 * (double)t->numel : out_bytes(op);
      c->transfer += move_cost(f, t, (int)i, bytes);
    }
    if (from_host && !(s->desc.flags & WEFT_LANE_HOST_MEMORY)) {
      /* the result goes home the way its operands came: registered with this lane, or staged */
      int x = inputs && ninputs > 0 && inputs[0] ? weft_route_xfer(inputs[0], (int)i) : f->explain_xfer;
      c->transfer += weft_cost_predict(&s->cost[WEFT_COST_DOWNLOAD][x], out_bytes(op));
    }
    /* alpha is the line's; compute is the rest of the prediction (the measured curve where it reaches) */
    c->alpha = cs->line.alpha * refine;
    c->compute = weft_cost_base(cs, work) * refine - c->alpha;
    /* inside a scope a batching lane pays its dispatch once for the scope: one more op costs less */
    c->alpha = weft_cost_scope_alpha(f, s, c->alpha);
    if (c->compute < 0) c->compute = 0;
    c->total = c->wait + c->transfer + c->alpha + c->compute;
    if (best < 0 || c->total < best_total) best = (int)i, best_total = c->total;
  }
  if (best < 0)
    weft_fail(f, WEFT_ERR_UNSUPPORTED, "%s: no lane in this fabric can run it under the '%s' contract%s",
              weft_op_kind_str(op->kind), weft_contract_str(op->contract),
              op->contract >= WEFT_CONTRACT_TF32 ? " (tf32/bf16 need a tensor-unit lane such as cuda:N.tensor)" : "");
  return best;
}

/* ------------------------------------------------------------------------------- remembered decisions */

#define WEFT_ROUTE_MEMO 16

/* One remembered decision: the op's signature, the lane, and the costs that chose it. */
typedef struct weft_route_memo {
  uint64_t sig;      /* hash of everything below; 0 = empty */
  uint32_t epoch;
  int32_t kind, contract, flags;
  int64_t dims[6];
  uint64_t where[3]; /* per input: bit 0 the host copy is current, bit 1+i lane i's */
  int64_t ip[4];     /* the version-2 ops' first shape parameters */
  int lane;
  size_t cap;
  weft_route_cost *costs;
} weft_route_memo;

void weft_route_memo_free(weft_fabric *f) {
  if (!f->memo) return;
  for (int i = 0; i < WEFT_ROUTE_MEMO; i++) free(f->memo[i].costs);
  free(f->memo);
  f->memo = NULL;
  f->memo_last = NULL;
}

static inline uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull + (h >> 29); }

int weft_route_decide(weft_fabric *f, const weft_op *op, weft_cost_class cls, double work, double now,
                      weft_tensor *const *inputs, int ninputs) {
  /* Decisions are only remembered while every lane is idle (the wait term is then zero) and the fabric is
   * small enough for a bit per lane. This is the op path: keep it to a few dozen instructions. */
  weft_cost_background_poll(f); /* one pointer test while nothing is being measured */
  int memo_ok = f->nlanes < 63 && ninputs <= 3 && f->busy_max <= now;
  if (memo_ok && !f->memo) f->memo = calloc(WEFT_ROUTE_MEMO, sizeof *f->memo);
  weft_route_memo *slot = NULL;
  uint64_t where[3] = {0, 0, 0}, sig = 0;
  /* the transposes are part of the signature: a lane may decline a transposed operand (supports) */
  const int32_t flags = op->b_batched | op->y_broadcast << 1 | ninputs << 2 | op->trans_a << 5 | op->trans_b << 6;
  if (memo_ok && f->memo) {
    for (int k = 0; k < ninputs; k++) where[k] = inputs[k] ? inputs[k]->where : 0;
    /* the same op as last time (a loop): no hashing at all */
    slot = f->memo_last;
    if (slot && slot->epoch == f->route_epoch && slot->dims[1] == op->m && slot->dims[2] == op->n &&
        slot->dims[3] == op->k && slot->dims[4] == op->rows && slot->dims[5] == op->cols &&
        slot->dims[0] == op->batch && slot->kind == (int32_t)op->kind && slot->contract == (int32_t)op->contract &&
        slot->flags == flags && slot->where[0] == where[0] && slot->where[1] == where[1] &&
        slot->where[2] == where[2] && slot->cap >= f->nlanes &&
        !memcmp(slot->ip, op->iparam, sizeof slot->ip)) {
      f->last_route.op = op->kind, f->last_route.contract = op->contract, f->last_route.work = work;
      f->last_route.chosen = slot->lane, f->last_route.nlanes = f->nlanes, f->last_route.lanes = slot->costs;
      return slot->lane;
    }
    sig = mix(mix(mix(0x9e3779b97f4a7c15ull, (uint64_t)op->kind | (uint64_t)op->contract << 8 | (uint64_t)flags << 16),
                  (uint64_t)op->batch ^ (uint64_t)op->m << 20 ^ (uint64_t)op->rows << 40),
              (uint64_t)op->n ^ (uint64_t)op->k << 21 ^ (uint64_t)op->cols << 42);
    sig = mix(mix(mix(sig, where[0]), where[1]), where[2]) | 1; /* never 0: 0 marks an empty slot */
    slot = &f->memo[(sig >> 40) % WEFT_ROUTE_MEMO];
    if (slot->sig == sig && slot->epoch == f->route_epoch && slot->kind == (int32_t)op->kind &&
        slot->contract == (int32_t)op->contract && slot->flags == flags && slot->dims[0] == op->batch &&
        slot->dims[1] == op->m && slot->dims[2] == op->n && slot->dims[3] == op->k && slot->dims[4] == op->rows &&
        slot->dims[5] == op->cols && slot->where[0] == where[0] && slot->where[1] == where[1] &&
        slot->where[2] == where[2] && slot->cap >= f->nlanes &&
        !memcmp(slot->ip, op->iparam, sizeof slot->ip)) {
      f->last_route.op = op->kind, f->last_route.contract = op->contract, f->last_route.work = work;
      f->last_route.chosen = slot->lane, f->last_route.nlanes = f->nlanes, f->last_route.lanes = slot->costs;
      f->memo_last = slot;
      return slot->lane;
    }
    if (slot->cap < f->nlanes) {
      weft_route_cost *c = realloc(slot->costs, f->nlanes * sizeof *c);
      if (!c) slot = NULL;
      else slot->costs = c, slot->cap = f->nlanes;
    }
  }
  weft_route_cost *costs = slot ? slot->costs : f->route;
  int lane = weft_route_pick_at(f, op, cls, work, now, inputs, ninputs, costs);
  if (slot) {
    slot->sig = sig;
    /* calibration may have run inside the pick (first choice between lanes): remember under its epoch */
    slot->epoch = f->route_epoch;
    slot->kind = op->kind, slot->contract = op->contract, slot->flags = flags;
    slot->dims[0] = op->batch, slot->dims[1] = op->m, slot->dims[2] = op->n, slot->dims[3] = op->k;
    slot->dims[4] = op->rows, slot->dims[5] = op->cols;
    memcpy(slot->where, where, sizeof where);
    memcpy(slot->ip, op->iparam, sizeof slot->ip);
    slot->lane = lane;
    f->memo_last = slot;
  }
  f->last_route.op = op->kind, f->last_route.contract = op->contract, f->last_route.work = work;
  f->last_route.chosen = lane, f->last_route.nlanes = f->nlanes, f->last_route.lanes = costs;
  return lane;
}
