/* recover.c - computing lost values again. When a lane goes down holding the only copy of a value, the
 * core marks it lost (core/fabric.c); each write on a device lane left a recipe (core/exec.c: the op and
 * its inputs' versions). Here a lost value is computed again by running that op once more through the op
 * path, routed among the lanes still up, its inputs recovered first where they were lost too. Running ops
 * is the scheduler's, so this sits above the core, which calls it through the fabric's recover hooks (set
 * by weft_fabric_open, open.c) when it reads a lost value or is about to change what one was made from. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched.h"

static weft_tensor *tensor_by_id(weft_fabric *f, uint64_t id) {
  for (weft_tensor *t = f->tensors; t; t = t->next)
    if (t->id == id) return t;
  return NULL;
}

/* Runs the recorded op again through the public API, so it is routed among the lanes still up. */
static weft_status replay(weft_fabric *f, const weft_recipe *r, weft_tensor **x, weft_tensor *t) {
  weft_op_desc d = WEFT_OP_DESC_INIT;
  d.contract = r->contract;
  weft_tensor *out[WEFT_OP_MAX_OUT] = {0}, *scratch[WEFT_OP_MAX_OUT] = {0};
  out[r->out_slot] = t;
  weft_status st = WEFT_OK;
  /* the op's other required outputs are computed again too, into scratch (they may have moved on since) */
  for (int q = 0; q < r->nout && st == WEFT_OK; q++)
    if (r->out_ndim[q] && (st = weft_tensor_create_typed(f, r->out_dtype[q], r->out_ndim[q], r->out_dims[q], NULL,
                                                         &scratch[q])) == WEFT_OK)
      out[q] = scratch[q];
  if (st == WEFT_OK) st = weft_op_run(f, &d, r->kind, x, r->nin, out, r->nout, &r->params);
  for (int q = 0; q < r->nout; q++) weft_tensor_destroy(scratch[q]);
  return st;
}

/* A lost value that cannot be computed again stays lost: later attempts answer at once. The error names
 * the lane the value went down with and what that lane said, since that is the cause a person acts on. */
static weft_status gone(weft_tensor *t, const char *fmt, ...) {
  weft_fabric *f = t->fabric;
  char what[320];
  va_list args;
  va_start(args, fmt);
  vsnprintf(what, sizeof what, fmt, args);
  va_end(args);
  t->lost = 2;
  const weft_lane_slot *s = t->lost_lane >= 0 && (size_t)t->lost_lane < f->nlanes ? &f->lanes[t->lost_lane] : NULL;
  if (!s) return weft_fail(f, WEFT_ERR_LANE_FAILED, "%s", what);
  return weft_fail(f, WEFT_ERR_LANE_FAILED, "%s; it was on lane %s, which %s", what, s->desc.name,
                   s->failed ? (s->down_why[0] ? s->down_why : "is down") : "went down (it is up again now)");
}

static weft_status recover_at(weft_tensor *t, int depth) {
  weft_fabric *f = t->fabric;
  if (!t->lost) return WEFT_OK;
  if (t->lost == 2)
    return gone(t, "a tensor's only copy was on a lane that went down, and it cannot be computed again (what made "
                   "it is not on record, or has changed since)");
  if (!t->recipe)
    return gone(t, "a tensor's only copy was on a lane that went down, and no op that made it is on record");
  if (depth > 64)
    return gone(t, "a lost tensor is more than 64 ops from a value still held anywhere");
  /* a copy: recomputing an input may run ops that record recipes of their own */
  const weft_recipe saved = *t->recipe, *r = &saved;
  weft_tensor *x[WEFT_OP_MAX_IN + 1] = {0};
  int self_input = -1;
  for (int i = 0; i < r->nin + r->self_read; i++) {
    if (!r->in_id[i]) continue; /* an optional input left out */
    x[i] = tensor_by_id(f, r->in_id[i]);
    if (!x[i])
      return gone(t, "a tensor's only copy was on a lane that went down, and an input of the %s that made it has "
                       "been destroyed since, so it cannot be computed again",
                       weft_op_kind_str(r->kind));
    if (x[i] == t) {
      /* an in-place op: the host memory may still hold the value it started from */
      if (t->host_version != r->in_version[i])
        return gone(t, "a tensor's only copy was on a lane that went down, and the value the in-place %s started "
                         "from is held nowhere, so it cannot be computed again",
                         weft_op_kind_str(r->kind));
      self_input = i;
      continue;
    }
    if (x[i]->version != r->in_version[i])
      return gone(t, "a tensor's only copy was on a lane that went down, and an input of the %s that made it has "
                       "been overwritten since, so it cannot be computed again",
                       weft_op_kind_str(r->kind));
    weft_status st = recover_at(x[i], depth + 1);
    if (st != WEFT_OK) return st;
  }
  if (!t->lost) return WEFT_OK; /* recomputing an input brought it back too */
  const uint64_t version = t->version;
  if (self_input >= 0) {
    t->host_valid = 1;
    t->where |= 1;
    t->lost = 0;
    t->version = saved.in_version[self_input];
  }
  weft_status st = replay(f, &saved, x, t);
  if (st != WEFT_OK) {
    if (self_input >= 0) t->host_valid = 0, t->where &= ~(uint64_t)1, t->lost = 1, t->version = version;
    return st;
  }
  /* the value is the one that was lost: it keeps its version, so recipes that read it still hold */
  t->version = version;
  if (t->host_valid) t->host_version = version;
  f->lanes[f->last_lane >= 0 ? f->last_lane : 0].stats.recovered++;
  return WEFT_OK;
}


weft_status weft_sched_recover(weft_tensor *t, int depth) {
  weft_fabric *f = t->fabric;
  /* the replays go through dispatch, which must not start a sweep of every lost value meanwhile */
  int outer = !f->recovering;
  f->recovering = 1;
  weft_status st = recover_at(t, depth);
  if (outer) f->recovering = 0;
  return st;
}

void weft_sched_recover_all(weft_fabric *f) {
  if (!f->lost || f->recovering) return;
  f->recovering = 1;
  f->lost = 0;
  char saved[WEFT_ERR_LEN];
  memcpy(saved, f->err, sizeof saved);
  for (weft_tensor *t = f->tensors; t; t = t->next)
    if (t->lost == 1 && recover_at(t, 0) != WEFT_OK) weft_note(f, 1, "weft: %s", f->err);
  f->recovering = 0;
  memcpy(f->err, saved, sizeof saved);
}
