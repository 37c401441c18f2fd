/* internal.h - the core's functions (docs/DESIGN.md, "Layers"): lane slots, probing, lane failure and
 * revival, tensors and where their current value lives, the host lanes' queue, host copies, and the
 * execution entry that runs an already-routed op on a given lane. The core calls the base and the cost
 * model below it, never the scheduler above it (tests/layers.sh checks). The data is state.h's. Not
 * installed. */
#ifndef WEFT_INTERNAL_H
#define WEFT_INTERNAL_H

#include "state.h"

/* Records that version `version` of t failed to be made (hostq.c, when a queued op is drained). */
void weft_tensor_set_error(weft_tensor *t, uint64_t version, weft_status err, uint64_t ticket, const char *msg);
/* The failure of t's current value, if its producer failed: sets the fabric's last error to the op's
 * message (and takes it off what weft_fabric_sync still has to report). WEFT_OK when the value is good. */
weft_status weft_tensor_failure(weft_tensor *t);

/* Lane providers, in probe order (src/core/lanes.c). */
typedef struct weft_lane_provider {
  const char *kind;
  weft_lane_probe_fn probe; /* NULL: built without it; `why` says so */
  const char *why;
} weft_lane_provider;
extern const weft_lane_provider weft_lane_providers[];
extern const size_t weft_lane_provider_count;

/* Makes the tensor's current value valid on lane `lane` (or on the host when lane < 0 or the lane uses host
 * memory). Downloads and uploads as needed. */
weft_status weft_tensor_make_valid(weft_tensor *t, int lane);
/* The buffer an op on `lane` uses for t, allocating it if needed (no data moved). */
weft_status weft_tensor_lane_buffer(weft_tensor *t, int lane, weft_buffer **out_buffer);
/* Records that only `lane`'s copy (the host's for lane < 0 or host-memory lanes) is now current. */
void weft_tensor_mark_written(weft_tensor *t, int lane);
/* Checks that t is a live tensor of fabric f; `what` names the argument in the message. */
weft_status weft_tensor_check(weft_fabric *f, const weft_tensor *t, const char *what);
/* Marks a lane failed after it returned WEFT_ERR_LANE_FAILED: it leaves routing, its buffers are released
 * and values that lived only there are marked lost (recovered by weft_tensor_recover). */
void weft_lane_mark_failed(weft_fabric *f, int lane);
/* Asks down lanes whose retry time has come whether they are back (all of them when `all`). */
void weft_lanes_revive(weft_fabric *f, int all);
/* Safe from any thread: a down lane is ready, so the fabric's next op asks the down lanes' revive at once. */
void weft_lane_revive_soon(const weft_lane_host *host);

/* Records, for each output of an op that ran on a device lane, how to compute it again. An op that reads
 * other outputs too (AdamW's m and v) leaves no recipe: it cannot be run for one output alone. */
void weft_tensor_note_recipe(weft_tensor **in, int nin, weft_tensor **out, int nout, const weft_op *op,
                             const weft_op_params *params, int lane);
/* The host lanes' queue (hostq.c). Tickets count from 1; ticket t is done once weft_hostq_done() >= t. */
uint64_t weft_hostq_submit(weft_fabric *f, int lane, const weft_op *op, weft_cost_class cls, double work, int observe);
uint64_t weft_hostq_done(const weft_fabric *f);
int weft_hostq_idle(const weft_fabric *f);
/* Waits for ticket `ticket` and drains what finished. A queued job's failure is not a failure of the wait:
 * it is recorded on the tensors the job wrote (weft_tensor_failure), where reads and ops find it. */
weft_status weft_hostq_wait(weft_fabric *f, uint64_t ticket);
/* Waits for everything queued (the same: failures are on the tensors). */
weft_status weft_hostq_finish(weft_fabric *f);
/* The status of finished job `ticket` itself (its message in the fabric's last error when it failed);
 * WEFT_OK when it succeeded or is no longer known. */
weft_status weft_hostq_status(weft_fabric *f, uint64_t ticket);
/* The first failure of a queued op the caller has not been told of yet (into the fabric's last error),
 * then forgotten: weft_fabric_sync's report. WEFT_OK when there is none. */
weft_status weft_hostq_take_unreported(weft_fabric *f);
/* The caller was told of failure `ticket` (a read or an op found it on a tensor): sync need not say it. */
void weft_hostq_reported(weft_fabric *f, uint64_t ticket);
/* Records the tensors a just-submitted job reads (at their versions now) and, after they are marked
 * written, those it writes. */
void weft_hostq_note_inputs(weft_fabric *f, uint64_t ticket, weft_tensor *const *in, int nin);
void weft_hostq_note_outputs(weft_fabric *f, uint64_t ticket, weft_tensor *const *out, int nout);
/* The seconds a finished job ran (measured on the queue's thread); -1 if it failed or is not known. */
double weft_hostq_seconds(const weft_fabric *f, uint64_t ticket);
/* Passes finished jobs' timings to the cost model (the caller's thread). */
void weft_hostq_drain(weft_fabric *f);
void weft_hostq_stop(weft_fabric *f);
/* On the queue's thread: keeps a lane's report as the running job's message and returns 1; elsewhere 0. */
int weft_hostq_report(weft_status status, const char *fmt, va_list args);
/* Waits until no queued job still writes t's host memory (before reading it), or reads or writes it
 * (before writing it). */
static inline weft_status weft_tensor_wait_writer(weft_tensor *t) {
  return t->q_write && weft_hostq_done(t->fabric) < t->q_write ? weft_hostq_wait(t->fabric, t->q_write) : WEFT_OK;
}
static inline weft_status weft_tensor_wait_users(weft_tensor *t) {
  uint64_t last = t->q_read > t->q_write ? t->q_read : t->q_write;
  return last && weft_hostq_done(t->fabric) < last ? weft_hostq_wait(t->fabric, last) : WEFT_OK;
}

/* Copies host memory (or zeroes it when src is NULL) on several threads when it is large (hostcopy.c). */
void weft_host_copy(weft_fabric *f, void *dst, const void *src, size_t bytes);

/* Registered host memory (tensor.c). Offers t's host memory to lane `lane` once it is worth it. */
void weft_tensor_offer_host(weft_tensor *t, int lane);
/* Waits until no lane's direct transfer still uses t's host memory (before the host copy is written). */
weft_status weft_tensor_wait_dma(weft_tensor *t);

/* A lost value, computed again through the hook the scheduler set (sched/recover.c); without one it stays
 * lost. */
static inline weft_status weft_tensor_recover(weft_tensor *t, int depth) {
  if (t->fabric->recover) return t->fabric->recover(t, depth);
  return weft_fail(t->fabric, WEFT_ERR_LANE_FAILED, "a tensor's only copy was on a lane that went down, and "
                   "nothing in this fabric can compute it again");
}
/* Every lost value, computed again now (before anything it was made from changes), through the same hook. */
static inline void weft_fabric_recover_all(weft_fabric *f) {
  if (f->recover_all) f->recover_all(f);
}

/* ------------------------------------------------------------------------------ the execution entry */

/* The failure of an op's inputs (and of the outputs it reads): an input whose producer, a queued op,
 * failed fails this op too, with that op's message in the fabric's last error (exec.c). WEFT_OK if none. */
weft_status weft_exec_inputs_failed(const weft_op *op, weft_tensor **in, int nin, weft_tensor **out, int nout);
/* Runs an op already validated and routed to `lane` (exec.c): makes its inputs current there, runs it or
 * queues it for the host lanes' thread, charges the lane's busy time and the cost model, and records where
 * the outputs now live (and how to compute them again). `cls` and `work` are the op's cost class and work;
 * `t0` the fabric's clock when the op was routed, or NULL to read it once the inputs are in place (an op
 * pinned to a lane). WEFT_ERR_LANE_FAILED: the lane went down under the op (it is marked failed). */
weft_status weft_exec(weft_fabric *f, int lane, weft_op *op, weft_tensor **in, int nin, weft_tensor **out, int nout,
                      const weft_op_params *params, weft_cost_class cls, double work, const double *t0);

/* ---------------------------------------------------------------------- the fabric's lanes (fabric.c) */

/* Fills a new fabric from its description: the options, the clock, the lane host (fabric.c). Writes a
 * message into err and returns its status when the description is refused; the fabric is then empty. */
weft_status weft_core_init(weft_fabric *f, const weft_fabric_desc *desc, char *err, size_t err_len);
/* Asks every lane provider the filter wants for its lanes; what is not there goes on the absent list. */
void weft_core_probe(weft_fabric *f);
/* Stops the host queue, destroys the tensors and the lanes, frees what the core holds (not f itself). */
void weft_core_release(weft_fabric *f);
/* Begins a scope on every live lane (weft_scope_begin's work, once the scheduler has measured what an op
 * costs inside one). */
weft_status weft_core_scope_begin(weft_fabric *f);

#endif /* WEFT_INTERNAL_H */
