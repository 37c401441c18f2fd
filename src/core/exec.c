/* exec.c - the core's execution entry: runs an op that the scheduler has already validated and routed to
 * a lane. It makes the op's inputs current on that lane, runs the op there or queues it for the host
 * lanes' thread, charges the lane's busy time and the cost model with what it took, and records where the
 * outputs now live and how to compute them again. It chooses nothing: which lane, and what to do when the
 * lane fails under the op, are the scheduler's (sched/ops.c), above it (docs/DESIGN.md, "Layers"). */
#include <stdint.h>
#include <string.h>

#include "../cost/cost.h"
#include "internal.h"
#include "optable.h"

/* Host ops predicted to take this long always go to the host queue; this long, when another lane is busy. */
#define WEFT_QUEUE_LONG_S 1e-3
#define WEFT_QUEUE_OVERLAP_S 50e-6

/* An input whose producer (a queued op) failed fails the op that reads it, with that op's message; axpy
 * reads its output too. Inputs still being made are checked once they are waited for, or, when this op is
 * queued behind them, when it is drained (hostq.c). */
weft_status weft_exec_inputs_failed(const weft_op *op, weft_tensor **in, int nin, weft_tensor **out, int nout) {
  weft_status st = WEFT_OK;
  const uint32_t reads = weft_optable[op->kind].out_reads;
  for (int i = 0; i < nin && st == WEFT_OK; i++)
    if (in[i]) st = weft_tensor_failure(in[i]);
  for (int o = 0; o < nout && st == WEFT_OK; o++)
    if (out[o] && ((reads >> o) & 1)) st = weft_tensor_failure(out[o]);
  return st;
}

weft_status weft_exec(weft_fabric *f, int lane, weft_op *op, weft_tensor **in, int nin, weft_tensor **out, int nout,
                      const weft_op_params *params, weft_cost_class cls, double work, const double *at) {
  weft_status st;
  uint64_t ticket = 0;
  /* every input on the host: the caller works on host data and will want the result there too */
  int home = 1;
  for (int i = 0; i < nin; i++) home &= !in[i] || in[i]->host_valid;
  /* last input first: a matmul's b goes over before a, so a device may start on a's first rows while the
   * rest of a is still in flight */
  for (int i = nin - 1; i >= 0; i--) {
    op->in[i] = NULL;
    if (!in[i]) continue;
    if ((st = weft_tensor_make_valid(in[i], lane)) != WEFT_OK) return st;
    if ((st = weft_tensor_lane_buffer(in[i], lane, &op->in[i])) != WEFT_OK) return st;
  }
  for (int o = 0; o < nout; o++) {
    op->out[o] = NULL;
    if (!out[o]) continue;
    /* an output the op reads (axpy's y, an accumulation) must be current there too */
    if (((weft_optable[op->kind].out_reads >> o) & 1) && (st = weft_tensor_make_valid(out[o], lane)) != WEFT_OK) return st;
    if ((st = weft_tensor_lane_buffer(out[o], lane, &op->out[o])) != WEFT_OK) return st;
  }
  /* moving the inputs waited for what makes them: a failure there is known now */
  if (!weft_lane_is_host(f, lane) && (st = weft_exec_inputs_failed(op, in, nin, out, nout)) != WEFT_OK) return st;
  weft_lane_slot *s = &f->lanes[lane];
  weft_cost_state *cs = weft_cost_state_of(s, cls, op->contract);
  const double t0 = at ? *at : weft_fabric_now(f); /* pinned: timed from here, its inputs in place */
  const int host = weft_lane_is_host(f, lane);
  for (int o = 0; o < nout; o++) {
    op->out_host[o] = NULL;
    if (!out[o]) continue;
    /* the host memory an op writes, or a device may stream a result into, must be free of other transfers */
    if (out[o]->dma_lane && (host || out[o]->dma_lane != lane + 1) && (st = weft_tensor_wait_dma(out[o])) != WEFT_OK)
      return st;
    if (!host && weft_lane_bit(out[o]->reg_mask | out[o]->cover_mask, (size_t)lane) && home)
      op->out_host[o] = out[o]->host;
  }
  double pred = weft_cost_predict(cs, work);
  if (f->in_scope && !host) {
    /* recorded into the scope's one submission: the lane's in-scope cost per op, not its dispatch */
    const double a = cs->line.alpha * cs->line.refine, sa = weft_cost_scope_alpha(f, s, a);
    if (sa < a) pred -= a - sa;
    if (pred < sa) pred = sa;
  }
  /* ops predicted under 10 us are sampled one in eight: at that size the bookkeeping would cost a
   * noticeable share of the op, and a median over a sample is as robust as over them all */
  const int observe = host && !f->calibrating && ((++s->observe_tick & 7) == 0 || pred >= 10e-6);
  /* A host op goes to the queue (it returns at once) when the queue already has work, which it must
   * follow; when it is long enough that a hand-over (a few microseconds) is noise; or when another lane is
   * working and the caller may have more to give it meanwhile. Tiny ops run here: no hand-over to pay. */
  if (host && !f->calibrating &&
      (!weft_hostq_idle(f) || pred >= WEFT_QUEUE_LONG_S || (f->busy_max > t0 && pred >= WEFT_QUEUE_OVERLAP_S))) {
    ticket = weft_hostq_submit(f, lane, op, cls, work, observe);
    if (ticket) {
      weft_hostq_note_inputs(f, ticket, in, nin);
      for (int o = 0; o < nout; o++)
        if (out[o] && ((weft_optable[op->kind].out_reads >> o) & 1)) weft_hostq_note_inputs(f, ticket, &out[o], 1);
      for (int i = 0; i < nin; i++)
        if (in[i]) in[i]->q_read = ticket;
      for (int o = 0; o < nout; o++)
        if (out[o]) out[o]->q_write = ticket;
      s->stats.ops[op->kind]++;
      s->busy_until = (s->busy_until > t0 ? s->busy_until : t0) + pred;
      if (s->busy_until > f->busy_max) f->busy_max = s->busy_until;
      goto written;
    }
    /* no queue (no thread could start): run it here */
  }
  if (host && !weft_hostq_idle(f)) {
    if ((st = weft_hostq_finish(f)) != WEFT_OK) return st;
    if ((st = weft_exec_inputs_failed(op, in, nin, out, nout)) != WEFT_OK) return st; /* what the queue made is known now */
  }
  st = s->vt.run(s->self, op);
  double t1 = weft_fabric_now(f);
  if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, lane);
  if (st != WEFT_OK) return st;
  s->stats.ops[op->kind]++;
  if (host) {
    /* host lanes finish the op before run returns: the time is an observation for the model */
    s->stats.seconds += t1 - t0;
    if (observe && weft_cost_observe(cs, work, t1 - t0)) weft_route_forget(f);
    s->busy_until = t1;
    if (t1 > f->busy_max) f->busy_max = t1;
  } else {
    /* device lanes may still be working: the lane is busy for the predicted time */
    s->stats.seconds += pred;
    s->busy_until = (s->busy_until > t0 ? s->busy_until : t0) + pred;
    if (s->busy_until > f->busy_max) f->busy_max = s->busy_until;
  }
written:
  for (int o = 0; o < nout; o++)
    if (out[o] && op->out_host[o]) out[o]->dma_lane = lane + 1; /* the lane may be writing its host memory */
  weft_tensor_note_recipe(in, nin, out, nout, op, params, lane); /* before the outputs' versions move on */
  for (int o = 0; o < nout; o++)
    if (out[o]) weft_tensor_mark_written(out[o], lane);
  if (ticket) weft_hostq_note_outputs(f, ticket, out, nout);
  f->last_lane = lane;
  return WEFT_OK;
}

