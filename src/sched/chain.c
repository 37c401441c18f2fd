/* chain.c - data-parallel gradients across the ranks of an MPI job (weft_mpi_grad_*, include/weft.h).
 *
 * Exact contract: the chained reduction. A weight gradient is a sum over the batch's samples in ascending
 * order (the canonical order of matmul over k, of sum_rows over rows, of the accumulating transformer ops
 * over (b, t)). Rank r holds the samples after rank r-1's, so rank r continues rank r-1's running sum over
 * its own samples, starting from the value rank r-1 left: matmul_acc, whose every sum starts from the value
 * in its output. Rank 0 starts from zero (a plain matmul). The result on the last rank is, bit for bit, what
 * one process computes over the whole batch, whatever the number of ranks.
 *
 * The chain is pipelined: a gradient's rows go in chunks (chunk_floats), each passed on to the next rank as
 * soon as it is done while this rank computes the next chunk, and the ranks receive all of a gradient's
 * chunks as they come; and a rank passes each gradient on while it goes on with the rest of its backward
 * pass, so the ranks work at once, each a little behind the one before. Each chunk the last rank finishes
 * is final: it goes straight back down the chain (rank, ..., to 0), each rank passing it on as
 * it comes, while later chunks still go up. Both directions of every link are busy at once, and a gradient
 * costs one gradient's worth over each link each way and 2(R-1) chunk latencies, not R whole transfers
 * plus a broadcast.
 *
 * Everything happens in each gradient's own host memory: the running sum arrives there, grows there by the
 * fabric's matmul_acc on views of it, leaves from there, and the final value lands there. No copy of a
 * gradient is made, and none is allocated per step. Until weft_mpi_grad_end the memory belongs to MPI.
 *
 * A gradient that several ops of a step accumulate into (GPT-2's tied token table: the head's matmul and
 * the embedding's backward) is passed along once per op (weft_mpi_grad_passes): between passes the last
 * rank hands its running sum back to rank 0.
 *
 * fp32 contract: each rank sums its own samples (any order); weft_mpi_grad_end adds the ranks' sums with
 * MPI_Allreduce, in place, whose order depends on the number of ranks (not bit-stable across job sizes).
 *
 * Every wait is bounded (weft_mpi_timeout_ms). A rank that hears nothing from the rank it waits for within
 * the timeout checks whether that rank is alive; one that does not answer within another timeout is named
 * in the error, and the rank that names it tells every other rank, so that a rank waiting on a live rank
 * (which waits on the dead one) names the dead one too. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "net/mpi.h"

/* Floats per message of a running sum or a final value: 1 MiB. Every chunk costs a message each way, an op
 * and the waits of both ranks: GPT-2 124M's gradient on 4 ranks on 2 cores took 1.25 s in 16 Ki-float
 * chunks, 0.34-0.50 s in 64 Ki, 0.28-0.33 s in 256 Ki and 0.31 s in 1 Mi (bench/mpi/README.md); and a chunk
 * still passes in a few hundred microseconds, so the chain fills quickly. */
#define CHUNK_FLOATS ((size_t)1 << 18)

/* The chunk for a job of `size` ranks: CHUNK_FLOATS up to 64 ranks, then halved for each doubling of the job
 * (down to 16 Ki floats), since the chain's fill and drain take 2(R-1) chunks: in bench/mpi/chain_model.py
 * (a 100 Gb/s network) GPT-2's gradient in 1 MiB chunks takes 1.57x a ring all-reduce at 512 ranks and
 * 2.59x at 1024; in these, 0.74x and 0.83x (the best chunk for each size: 0.73x and 0.83x). */
static size_t chunk_floats(int size) {
  size_t c = CHUNK_FLOATS;
  for (int r = 64; r < size && c > ((size_t)1 << 14); r *= 2) c /= 2;
  return c;
}
/* Checks of a peer that answers but sends nothing, before it is named anyway (drive_until). */
#define MAX_CHECKS 3

typedef struct grad_entry {
  weft_tensor *t;
  float *h; /* t's host memory: the running sum arrives, grows and leaves there, and the final value lands */
  size_t n;
  int passes, done; /* passes declared, passes this rank has made */
  /* The current (or last) pass's chunks: `per` rows of `cols` floats each (the last may hold fewer). */
  int64_t cols, per;
  int nch, cap;
  int sends_to;       /* where this pass's chunks went */
  MPI_Request *sends; /* this pass's chunks passed on (running sums; on the last rank's last pass, finals) */
  MPI_Request *fin;   /* the final values received from the next rank (ranks before the last) */
  MPI_Request *fwd;   /* the final values passed on to the rank before (ranks between the first and the last) */
} grad_entry;

struct weft_mpi_grad {
  weft_fabric *f;
  weft_contract contract;
  int rank, size, timeout_ms;
  int chained; /* exact and more than one rank */
  int broken;  /* a call failed: the step is abandoned (weft_mpi_grad_end only frees) */
  grad_entry **e;
  size_t ne, cap;
  /* The final values on their way back down the chain (ranks before the last): the entries in the order
   * their last pass ended, which is the order the next rank sends them in; the next chunk whose receive is
   * to be posted (once this rank's own send of that chunk is done: the same memory), and the next to be
   * taken (and passed on to the rank before). */
  size_t *order, norder, order_cap;
  size_t post_o, take_o;
  int post_j, take_j;
  /* At the end: the entries and chunks whose sends are known to be done. */
  size_t done_e;
  int done_j;
};

static weft_status fail(weft_mpi_grad *g, weft_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static weft_status fail(weft_mpi_grad *g, weft_status st, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  weft_mpi_fail(st, "%s", msg);
  return weft_fail(g->f, st, "%s", msg);
}

static weft_status mpi_error(weft_mpi_grad *g, int code, const char *what) {
  char e[200];
  return fail(g, WEFT_ERR_IO, "rank %d: MPI failed while %s: %s", g->rank, what, weft_mpi_strerror(code, e, sizeof e));
}

weft_status weft_mpi_grad_begin(weft_fabric *f, weft_contract contract, weft_mpi_grad **out) {
  if (out) *out = NULL;
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!out) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_mpi_grad_begin: out_grad is NULL");
  weft_mpi_job *job = weft_mpi_job_get();
  if (!job->inited || job->mode != WEFT_MPI_DATA_PARALLEL)
    return weft_fail(f, WEFT_ERR_STATE,
                     "weft_mpi_grad_begin: not a data-parallel MPI job (weft_mpi_init(WEFT_MPI_DATA_PARALLEL, ...))");
  if (contract != WEFT_CONTRACT_EXACT && contract != WEFT_CONTRACT_FP32)
    return weft_fail(f, WEFT_ERR_UNSUPPORTED, "weft_mpi_grad_begin: the %s contract: exact (chained) or fp32 "
                     "(MPI_Allreduce) only", weft_contract_str(contract));
  weft_mpi_grad *g = calloc(1, sizeof *g);
  if (!g) return weft_fail(f, WEFT_ERR_OUT_OF_MEMORY, "weft_mpi_grad_begin: out of host memory");
  g->f = f;
  g->contract = contract;
  g->rank = job->rank;
  g->size = job->size;
  g->timeout_ms = weft_mpi_timeout_ms();
  g->chained = contract == WEFT_CONTRACT_EXACT && job->size > 1;
  *out = g;
  return WEFT_OK;
}

/* The entry of gradient t (made on first use). Entries do not move: a caller may hold several. */
static grad_entry *entry_of(weft_mpi_grad *g, weft_tensor *t) {
  for (size_t i = 0; i < g->ne; i++)
    if (g->e[i]->t == t) return g->e[i];
  if (g->ne == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 64;
    grad_entry **p = realloc(g->e, cap * sizeof *p);
    if (!p) return NULL;
    g->e = p;
    g->cap = cap;
  }
  grad_entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->t = t;
  e->passes = 1;
  e->n = weft_tensor_numel(t);
  e->sends_to = -1;
  g->e[g->ne++] = e;
  return e;
}

weft_status weft_mpi_grad_passes(weft_mpi_grad *g, weft_tensor *c, int passes) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (!c) return fail(g, WEFT_ERR_INVALID_ARGUMENT, "weft_mpi_grad_passes: c is NULL");
  if (passes < 1 || passes > 64)
    return fail(g, WEFT_ERR_INVALID_ARGUMENT, "weft_mpi_grad_passes: %d passes; 1 to 64", passes);
  grad_entry *e = entry_of(g, c);
  if (!e) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "weft_mpi_grad_passes: out of host memory");
  if (e->done) return fail(g, WEFT_ERR_STATE, "weft_mpi_grad_passes: the gradient was accumulated into already");
  e->passes = passes;
  return WEFT_OK;
}

/* Where pass e->done's running sum comes from (-1: zero, this rank starts it) and goes to (-1: it is final). */
static int source_of(const weft_mpi_grad *g, const grad_entry *e) {
  if (g->rank > 0) return g->rank - 1;
  return e->done > 0 ? g->size - 1 : -1;
}
static int dest_of(const weft_mpi_grad *g, const grad_entry *e) {
  if (g->rank < g->size - 1) return g->rank + 1;
  return e->done + 1 < e->passes ? 0 : -1;
}

/* Chunk j of the entry's current pass: its first float and count. */
static size_t chunk_of(const grad_entry *e, int j, size_t *count) {
  const int64_t rows = (int64_t)(e->n / (size_t)e->cols), r0 = (int64_t)j * e->per;
  const int64_t nr = rows - r0 < e->per ? rows - r0 : e->per;
  *count = (size_t)(nr * e->cols);
  return (size_t)(r0 * e->cols);
}

static int isend(float *p, size_t count, int dest, int tag, MPI_Request *req) {
  weft_mpi_lock();
  int rc = MPI_Isend(p, (int)count, MPI_FLOAT, dest, tag, weft_mpi_job_get()->dp, req);
  weft_mpi_unlock();
  return rc;
}
static int irecv(float *p, size_t count, int src, int tag, MPI_Request *req) {
  weft_mpi_lock();
  int rc = MPI_Irecv(p, (int)count, MPI_FLOAT, src, tag, weft_mpi_job_get()->dp, req);
  weft_mpi_unlock();
  return rc;
}
/* 1 when the request is done (MPI_REQUEST_NULL is), 0 when not, -1 (code in *rc) on an MPI error. */
static int tested(MPI_Request *req, int *rc) {
  int flag = 0;
  weft_mpi_lock();
  *rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
  weft_mpi_unlock();
  return *rc != MPI_SUCCESS ? -1 : flag;
}

/* Moves the final values along as far as they can go now: posts the receives whose memory this rank no
 * longer sends from, and passes on (to the rank before) those that came, in order. *moved: anything did. */
static weft_status progress(weft_mpi_grad *g, int *moved) {
  int rc = 0;
  while (g->post_o < g->norder) {
    grad_entry *e = g->e[g->order[g->post_o]];
    if (g->post_j == e->nch) {
      g->post_o++, g->post_j = 0;
      continue;
    }
    int k = tested(&e->sends[g->post_j], &rc);
    if (k < 0) return mpi_error(g, rc, "passing a running sum on");
    if (!k) break;
    size_t count, at = chunk_of(e, g->post_j, &count);
    if ((rc = irecv(e->h + at, count, g->rank + 1, WEFT_MPI_TAG_FINAL, &e->fin[g->post_j])) != MPI_SUCCESS)
      return mpi_error(g, rc, "receiving the final values");
    g->post_j++, *moved = 1;
  }
  while (g->take_o < g->post_o || (g->take_o == g->post_o && g->take_j < g->post_j)) {
    grad_entry *e = g->e[g->order[g->take_o]];
    if (g->take_j == e->nch) {
      g->take_o++, g->take_j = 0;
      continue;
    }
    int k = tested(&e->fin[g->take_j], &rc);
    if (k < 0) return mpi_error(g, rc, "receiving the final values");
    if (!k) break;
    if (g->rank > 0) {
      size_t count, at = chunk_of(e, g->take_j, &count);
      if ((rc = isend(e->h + at, count, g->rank - 1, WEFT_MPI_TAG_FINAL, &e->fwd[g->take_j])) != MPI_SUCCESS)
        return mpi_error(g, rc, "passing the final values on");
    }
    g->take_j++, *moved = 1;
  }
  return WEFT_OK;
}

/* 1 when every final value has come and been passed on and every send of the step is done; else 0, with
 * *peer the rank this rank waits for and *what why. -1 on an MPI error (code in *rc). */
static int step_done(weft_mpi_grad *g, int *peer, const char **what, int *rc) {
  if (g->take_o < g->norder) {
    const int posted = g->take_o < g->post_o || g->take_j < g->post_j;
    *peer = g->rank + 1;
    *what = posted ? "waiting for the final values" : "passing a running sum on";
    return 0;
  }
  for (; g->done_e < g->ne; g->done_e++, g->done_j = 0) {
    grad_entry *e = g->e[g->done_e];
    for (; g->done_j < e->nch; g->done_j++) {
      int k = tested(&e->sends[g->done_j], rc);
      if (k <= 0) {
        *peer = e->sends_to, *what = e->sends_to < g->rank ? "passing the final values on" : "passing a running sum on";
        return k;
      }
      if ((k = tested(&e->fwd[g->done_j], rc)) <= 0) {
        *peer = g->rank - 1, *what = "passing the final values on";
        return k;
      }
    }
  }
  return 1;
}

/* ------------------------------------------------------------------ a rank that waits too long */

/* A rank that gives up on another tells every rank why (the first time only: this text stays in place
 * while the messages are in flight), so that ranks waiting on ranks that wait on it say what happened. */
static char notice_text[512];
static int notice_sent;

static void tell_all(weft_mpi_grad *g, const char *text) {
  if (notice_sent) return;
  notice_sent = 1;
  snprintf(notice_text, sizeof notice_text, "%s", text);
  for (int r = 0; r < g->size; r++) {
    if (r == g->rank) continue;
    MPI_Request req;
    weft_mpi_lock();
    if (MPI_Isend(notice_text, (int)strlen(notice_text) + 1, MPI_CHAR, r, WEFT_MPI_TAG_NOTICE,
                  weft_mpi_job_get()->dp, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
    weft_mpi_unlock();
  }
}

static void send_empty(int dest, int tag) {
  MPI_Request req;
  weft_mpi_lock();
  if (MPI_Isend(NULL, 0, MPI_BYTE, dest, tag, weft_mpi_job_get()->dp, &req) == MPI_SUCCESS) MPI_Request_free(&req);
  weft_mpi_unlock();
}

/* Takes one message of `tag` from `src` (MPI_ANY_SOURCE: any) if there is one: 1 and its source, else 0.
 * Up to `len` bytes of it land in buf (NULL: none). */
static int take_msg(int src, int tag, char *buf, int len, int *from) {
  int flag = 0, count = 0;
  MPI_Message msg;
  MPI_Status status;
  weft_mpi_lock();
  if (MPI_Improbe(src, tag, weft_mpi_job_get()->dp, &flag, &msg, &status) == MPI_SUCCESS && flag) {
    MPI_Get_count(&status, MPI_CHAR, &count);
    const int fits = buf && count >= 0 && count <= len;
    MPI_Mrecv(fits ? buf : NULL, fits ? count : 0, MPI_CHAR, &msg, MPI_STATUS_IGNORE);
    if (buf && len > 0) buf[fits && count > 0 ? count - 1 : 0] = 0;
  }
  weft_mpi_unlock();
  if (flag && from) *from = status.MPI_SOURCE;
  return flag;
}

/* Answers other ranks' checks, and fails with a rank's report if one came. *alive: `peer` answered ours. */
static weft_status answer(weft_mpi_grad *g, int peer, int *alive) {
  int from = 0;
  char text[sizeof notice_text];
  while (take_msg(MPI_ANY_SOURCE, WEFT_MPI_TAG_PING, NULL, 0, &from)) send_empty(from, WEFT_MPI_TAG_PONG);
  if (take_msg(MPI_ANY_SOURCE, WEFT_MPI_TAG_NOTICE, text, (int)sizeof text, &from))
    return fail(g, WEFT_ERR_LANE_FAILED, "rank %d: rank %d reports %s", g->rank, from,
                text[0] ? text : "a failure it could not put in words");
  *alive = peer >= 0 && take_msg(peer, WEFT_MPI_TAG_PONG, NULL, 0, NULL);
  return WEFT_OK;
}

/* Waits until reqs[0 .. n-1] are done (n < 0: until the step is, step_done), moving the final values
 * along meanwhile. A wait that hears nothing from `peer` within the timeout asks whether it is alive: a
 * rank that answers is itself waiting for another (which it will name, to every rank, if that one never
 * answers); one that does not answer within another timeout is named here. */
static weft_status drive_until(weft_mpi_grad *g, MPI_Request *reqs, int n, int peer, const char *what) {
  weft_mpi_waiter w;
  weft_mpi_waiter_init(&w, g->timeout_ms);
  int pinged = 0, checks = 0, rc = 0, polls = 0;
  for (;;) {
    int moved = 0, done;
    weft_status st = progress(g, &moved);
    if (st) return st;
    if (n >= 0) {
      weft_mpi_lock();
      rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
      weft_mpi_unlock();
      if (rc != MPI_SUCCESS) done = -1;
    } else {
      done = step_done(g, &peer, &what, &rc);
    }
    if (done < 0) return mpi_error(g, rc, what);
    if (done) return WEFT_OK;
    int alive = 0; /* (checks are not looked for in a short wait: it costs the polls of the wait itself) */
    if (++polls > 64 && (st = answer(g, pinged ? peer : -1, &alive)) != WEFT_OK) return st;
    if ((n < 0 && moved) || alive) { /* things move, or the peer is there: a new timeout */
      weft_mpi_waiter_init(&w, g->timeout_ms);
      pinged = 0;
    }
    if (!weft_mpi_waiter_step(&w)) continue;
    char text[sizeof notice_text];
    if (!pinged && checks < MAX_CHECKS) {
      while (take_msg(peer, WEFT_MPI_TAG_PONG, NULL, 0, NULL)) {} /* answers to checks of earlier waits */
      send_empty(peer, WEFT_MPI_TAG_PING);
      pinged = 1, checks++;
      weft_mpi_waiter_init(&w, g->timeout_ms);
      continue;
    }
    if (pinged)
      snprintf(text, sizeof text, "nothing from rank %d within %d ms while %s, nor an answer to a check in %d ms "
               "more: rank %d died or hangs (WEFT_MPI_TIMEOUT_MS)", peer, g->timeout_ms, what, g->timeout_ms, peer);
    else
      snprintf(text, sizeof text, "nothing from rank %d for %d ms while %s, though it answers checks: it waits "
               "for a rank that neither answers nor reports (WEFT_MPI_TIMEOUT_MS)", peer,
               (MAX_CHECKS + 1) * g->timeout_ms, what);
    tell_all(g, text);
    return fail(g, WEFT_ERR_LANE_FAILED, "rank %d: %s", g->rank, text);
  }
}

/* ---------------------------------------------------------------------------------------- a pass */

/* Starts pass e->done of the entry, in chunks of `per` rows of `cols` floats: waits until the pass before
 * has left this rank's memory, and makes the tensor's host memory the working copy (its value kept when
 * `keep`: this rank continues from it). */
static weft_status pass_begin(weft_mpi_grad *g, grad_entry *e, int64_t cols, int keep) {
  weft_status st = e->nch ? drive_until(g, e->sends, e->nch, e->sends_to, "passing a running sum on") : WEFT_OK;
  if (st) return st;
  if (cols < 1) cols = 1;
  const int64_t rows = (int64_t)(e->n / (size_t)cols);
  const size_t chunk = chunk_floats(g->size);
  const int64_t per = (int64_t)(chunk / (size_t)cols) > 0 ? (int64_t)(chunk / (size_t)cols) : 1;
  const int nch = (int)((rows + per - 1) / per);
  if (nch > e->cap) {
    MPI_Request *s = realloc(e->sends, (size_t)nch * sizeof *s);
    if (s) e->sends = s;
    MPI_Request *fi = s ? realloc(e->fin, (size_t)nch * sizeof *fi) : NULL;
    if (fi) e->fin = fi;
    MPI_Request *fw = fi ? realloc(e->fwd, (size_t)nch * sizeof *fw) : NULL;
    if (!fw) {
      e->nch = 0; /* the arrays hold nothing in flight */
      return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    e->fwd = fw;
    e->cap = nch;
  }
  for (int j = 0; j < nch; j++) e->sends[j] = e->fin[j] = e->fwd[j] = MPI_REQUEST_NULL;
  e->cols = cols, e->per = per, e->nch = nch;
  e->sends_to = -1;
  /* The tensor's host memory is where the running sum lives until the end of the step (no other copy):
   * it is made the current value now; the receives and the ops below write it in place. */
  if (keep && (st = weft_tensor_read(e->t, e->t->host, e->n)) != WEFT_OK) return st;
  if ((st = weft_tensor_write(e->t, e->t->host, e->n)) != WEFT_OK) return st;
  e->h = e->t->host;
  return WEFT_OK;
}

/* Passes chunk j of the entry on: the running sum to `dest`, or where this is the last rank's last pass,
 * the final value back to the rank before. */
static weft_status pass_chunk(weft_mpi_grad *g, grad_entry *e, int j, int dest) {
  const int final = dest < 0;
  if (final) dest = g->rank - 1;
  size_t count, at = chunk_of(e, j, &count);
  int rc = isend(e->h + at, count, dest, final ? WEFT_MPI_TAG_FINAL : WEFT_MPI_TAG_CHAIN, &e->sends[j]);
  if (rc != MPI_SUCCESS) return mpi_error(g, rc, final ? "passing the final values on" : "passing a running sum on");
  e->sends_to = dest;
  return WEFT_OK;
}

/* Ends the pass: after its last, a rank before the last waits for the final values (progress). */
static weft_status pass_end(weft_mpi_grad *g, grad_entry *e) {
  e->done++;
  if (e->done < e->passes || g->rank == g->size - 1) return WEFT_OK;
  if (g->norder == g->order_cap) {
    size_t cap = g->order_cap ? 2 * g->order_cap : 64, *p = realloc(g->order, cap * sizeof *p);
    if (!p) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    g->order = p, g->order_cap = cap;
  }
  size_t i = 0;
  while (g->e[i] != e) i++;
  g->order[g->norder++] = i;
  int moved = 0;
  return progress(g, &moved);
}

/* Cancels receives not yet matched: after a failure nothing of this step can be trusted. */
static void cancel_all(MPI_Request *req, int n) {
  for (int q = 0; q < n; q++) {
    if (req[q] == MPI_REQUEST_NULL) continue;
    weft_mpi_lock();
    MPI_Cancel(&req[q]);
    MPI_Request_free(&req[q]);
    weft_mpi_unlock();
  }
}

/* Posts the receives of the pass's running sum from `src`, one per chunk. */
static weft_status recv_post(weft_mpi_grad *g, grad_entry *e, int src, MPI_Request *req) {
  for (int j = 0; j < e->nch; j++) req[j] = MPI_REQUEST_NULL;
  for (int j = 0; j < e->nch; j++) {
    size_t count, at = chunk_of(e, j, &count);
    int rc = irecv(e->h + at, count, src, WEFT_MPI_TAG_CHAIN, &req[j]);
    if (rc != MPI_SUCCESS) {
      cancel_all(req, j);
      return mpi_error(g, rc, "receiving a running sum");
    }
  }
  return WEFT_OK;
}

/* c (m x n, the entry's n floats) = the chained sum of at (m x k, rows of op(a)) . op(b): the pass's running sum comes
 * in chunks of rows, this rank's samples are added to each by matmul_acc (a plain matmul where this rank
 * starts the sum), and each chunk goes on as soon as it is done: up the chain, or from the last rank's last
 * pass, back down it as the final value. Everything happens in the gradient's own host memory. */
static weft_status chain_matmul(weft_mpi_grad *g, const weft_op_desc *desc, grad_entry *e, const float *at,
                                int64_t k, float *bh, int tb, int64_t n) {
  const int src = source_of(g, e), dest = dest_of(g, e);
  weft_status st = pass_begin(g, e, n, 0);
  if (st) return st;
  MPI_Request *req = src >= 0 ? malloc((size_t)(e->nch ? e->nch : 1) * sizeof *req) : NULL;
  if (src >= 0 && !req) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
  if (src >= 0 && (st = recv_post(g, e, src, req)) != WEFT_OK) {
    free(req);
    return st;
  }
  const int64_t bd[2] = {tb ? n : k, tb ? k : n};
  weft_tensor *tbt = NULL;
  st = weft_tensor_wrap(g->f, 2, bd, bh, &tbt);
  for (int j = 0; st == WEFT_OK && j < e->nch; j++) {
    size_t count, off = chunk_of(e, j, &count);
    const int64_t i0 = (int64_t)(off / (size_t)n), nr = (int64_t)(count / (size_t)n);
    if (src >= 0) st = drive_until(g, &req[j], 1, src, "waiting for a running sum");
    else {
      int moved = 0;
      st = progress(g, &moved);
    }
    if (st != WEFT_OK) break;
    const int64_t ad[2] = {nr, k}, cd[2] = {nr, n};
    weft_tensor *ta = NULL, *tc = NULL;
    float *c = e->h + off;
    st = weft_tensor_wrap(g->f, 2, ad, (float *)at + (size_t)(i0 * k), &ta);
    if (st == WEFT_OK) st = weft_tensor_wrap(g->f, 2, cd, c, &tc);
    if (st == WEFT_OK)
      st = src >= 0 ? weft_op_matmul_acc(g->f, desc, ta, 0, tbt, tb, tc) : weft_op_matmul(g->f, desc, ta, 0, tbt, tb, tc);
    if (st == WEFT_OK) st = weft_tensor_read(tc, c, count); /* in place: waits for the op, copies nothing */
    weft_tensor_destroy(ta);
    weft_tensor_destroy(tc);
    if (st == WEFT_OK) st = pass_chunk(g, e, j, dest);
  }
  weft_tensor_destroy(tbt);
  if (st != WEFT_OK && req) cancel_all(req, e->nch);
  free(req);
  return st == WEFT_OK ? pass_end(g, e) : st;
}

/* A rank-2 (or flat) tensor's host copy. */
static float *host_copy(weft_mpi_grad *g, weft_tensor *t, weft_status *st) {
  size_t n = weft_tensor_numel(t);
  float *p = malloc((n ? n : 1) * sizeof(float));
  if (!p) {
    *st = fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    return NULL;
  }
  *st = weft_tensor_read(t, p, n);
  if (*st != WEFT_OK) {
    free(p);
    return NULL;
  }
  return p;
}

static weft_status dims2(weft_mpi_grad *g, weft_tensor *t, const char *what, int64_t *r, int64_t *c) {
  int nd = 0;
  int64_t d[WEFT_MAX_DIMS];
  weft_status st = weft_tensor_shape(t, &nd, d);
  if (st) return st;
  if (nd != 2) return fail(g, WEFT_ERR_SHAPE, "weft_mpi_grad_matmul: %s must have rank 2 (it has %d)", what, nd);
  *r = d[0], *c = d[1];
  return WEFT_OK;
}

static weft_status grad_matmul(weft_mpi_grad *g, const weft_op_desc *desc, weft_tensor *a, int trans_a,
                                 weft_tensor *b, int trans_b, weft_tensor *c) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (!a || !b || !c) return fail(g, WEFT_ERR_INVALID_ARGUMENT, "weft_mpi_grad_matmul: a, b or c is NULL");
  grad_entry *e = entry_of(g, c);
  if (!e) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "weft_mpi_grad_matmul: out of host memory");
  if (!g->chained) {
    /* One rank, or fp32 (each rank its own sum; added at the end): the op itself. */
    weft_status st = e->done ? weft_op_matmul_acc(g->f, desc, a, trans_a, b, trans_b, c)
                             : weft_op_matmul(g->f, desc, a, trans_a, b, trans_b, c);
    if (st == WEFT_OK) e->done++;
    return st;
  }
  if (e->done >= e->passes)
    return fail(g, WEFT_ERR_STATE, "weft_mpi_grad_matmul: gradient accumulated more often than its %d passes",
                e->passes);
  int64_t ar = 0, ac = 0, br = 0, bc = 0;
  weft_status st;
  if ((st = dims2(g, a, "a", &ar, &ac)) || (st = dims2(g, b, "b", &br, &bc))) return st;
  const int64_t m = trans_a ? ac : ar, k = trans_a ? ar : ac, kb = trans_b ? bc : br, n = trans_b ? br : bc;
  if (k != kb || (size_t)(m * n) != e->n)
    return fail(g, WEFT_ERR_SHAPE, "weft_mpi_grad_matmul: a gives [%lld,%lld], b [%lld,%lld], c holds %zu elements",
                (long long)m, (long long)k, (long long)kb, (long long)n, e->n);
  float *ah = host_copy(g, a, &st), *bh = ah ? host_copy(g, b, &st) : NULL, *at = NULL;
  if (ah && bh && trans_a) {
    /* rows of op(a) contiguous, so each chunk of c's rows is one matmul (a copy: bits unchanged) */
    at = malloc((size_t)(m * k) * sizeof(float));
    if (!at) st = fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    else
      for (int64_t q = 0; q < k; q++)
        for (int64_t i = 0; i < m; i++) at[i * k + q] = ah[q * m + i];
  }
  if (ah && bh && (!trans_a || at)) st = chain_matmul(g, desc, e, trans_a ? at : ah, k, bh, trans_b, n);
  free(ah), free(bh), free(at);
  return st;
}

static weft_status grad_sum_rows(weft_mpi_grad *g, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (!x || !out) return fail(g, WEFT_ERR_INVALID_ARGUMENT, "weft_mpi_grad_sum_rows: x or out is NULL");
  grad_entry *e = entry_of(g, out);
  if (!e) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "weft_mpi_grad_sum_rows: out of host memory");
  if (!g->chained) {
    weft_status st = weft_op_sum_rows(g->f, desc, x, out);
    if (st == WEFT_OK) e->done++;
    return st;
  }
  if (e->done >= e->passes)
    return fail(g, WEFT_ERR_STATE, "weft_mpi_grad_sum_rows: gradient accumulated more often than its %d passes",
                e->passes);
  /* sum_rows's order is 0 + x[0,j] + x[1,j] + ...; 1 * x is x exactly, so it is ones[1,rows] . x, which
   * the chain continues like any matmul. */
  int nd = 0;
  int64_t d[WEFT_MAX_DIMS];
  weft_status st = weft_tensor_shape(x, &nd, d);
  if (st) return st;
  const int64_t n = d[nd - 1], rows = n ? (int64_t)(weft_tensor_numel(x) / (size_t)n) : 0;
  if ((size_t)n != e->n || rows < 1)
    return fail(g, WEFT_ERR_SHAPE, "weft_mpi_grad_sum_rows: x has %lld columns, out %zu elements", (long long)n, e->n);
  float *xh = host_copy(g, x, &st), *ones = xh ? malloc((size_t)rows * sizeof(float)) : NULL;
  if (xh && !ones) st = fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
  if (ones) {
    for (int64_t i = 0; i < rows; i++) ones[i] = 1.0f;
    st = chain_matmul(g, desc, e, ones, rows, xh, 0, n);
  }
  free(xh), free(ones);
  return st;
}

static weft_status grad_op(weft_mpi_grad *g, const weft_op_desc *desc, weft_op_kind kind, weft_tensor *const *in,
                           int nin, weft_tensor *const *out, int nout, const weft_op_params *params, uint32_t chained) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (nout < 0 || nout > WEFT_OP_MAX_OUT || (!out && nout))
    return fail(g, WEFT_ERR_INVALID_ARGUMENT, "weft_mpi_grad_op: %d outputs at %p; 0 to %d, not NULL when any", nout,
                (const void *)out, WEFT_OP_MAX_OUT);
  grad_entry *ent[WEFT_OP_MAX_OUT] = {0};
  for (int o = 0; o < nout; o++)
    if (((chained >> o) & 1u) && out[o] && !(ent[o] = entry_of(g, out[o])))
      return fail(g, WEFT_ERR_OUT_OF_MEMORY, "weft_mpi_grad_op: out of host memory");
  weft_status st = WEFT_OK;
  if (g->chained) {
    /* Each running sum arrives into its tensor before the op (in chunks, straight into its host memory)... */
    for (int o = 0; o < nout; o++) {
      grad_entry *e = ent[o];
      if (!e) continue;
      if (e->done >= e->passes)
        return fail(g, WEFT_ERR_STATE, "weft_mpi_grad_op: gradient accumulated more often than its %d passes",
                    e->passes);
      const int src = source_of(g, e);
      if ((st = pass_begin(g, e, 1, src < 0)) != WEFT_OK) return st;
      if (src < 0) continue;
      MPI_Request *req = malloc((size_t)(e->nch ? e->nch : 1) * sizeof *req);
      if (!req) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
      st = recv_post(g, e, src, req);
      if (st == WEFT_OK) st = drive_until(g, req, e->nch, src, "waiting for a running sum");
      if (st != WEFT_OK) cancel_all(req, e->nch);
      free(req);
      if (st != WEFT_OK) return st;
    }
  }
  if (st == WEFT_OK) st = weft_op_run(g->f, desc, kind, in, nin, out, nout, params);
  for (int o = 0; o < nout && st == WEFT_OK; o++) {
    grad_entry *e = ent[o];
    if (!e) continue;
    if (!g->chained) {
      e->done++;
      continue;
    }
    /* ... and leaves after it, in chunks: up the chain, or from the last rank's last pass back down it. */
    const int dest = dest_of(g, e);
    st = weft_tensor_read(e->t, e->h, e->n); /* the value back in host memory (in place: no copy) */
    for (int j = 0; j < e->nch && st == WEFT_OK; j++) st = pass_chunk(g, e, j, dest);
    if (st == WEFT_OK) st = pass_end(g, e);
  }
  return st;
}

/* The public calls: a failure abandons the step (its messages may be out of step with the other ranks'). */
weft_status weft_mpi_grad_matmul(weft_mpi_grad *g, const weft_op_desc *desc, weft_tensor *a, int trans_a,
                                 weft_tensor *b, int trans_b, weft_tensor *c) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (g->broken) return WEFT_ERR_STATE; /* the failure that abandoned the step stays the message: its cause */
  weft_status st = grad_matmul(g, desc, a, trans_a, b, trans_b, c);
  if (st != WEFT_OK) g->broken = 1;
  return st;
}

weft_status weft_mpi_grad_sum_rows(weft_mpi_grad *g, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (g->broken) return WEFT_ERR_STATE; /* the failure that abandoned the step stays the message: its cause */
  weft_status st = grad_sum_rows(g, desc, x, out);
  if (st != WEFT_OK) g->broken = 1;
  return st;
}

weft_status weft_mpi_grad_op(weft_mpi_grad *g, const weft_op_desc *desc, weft_op_kind kind, weft_tensor *const *in,
                             int nin, weft_tensor *const *out, int nout, const weft_op_params *params,
                             uint32_t chained) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (g->broken) return WEFT_ERR_STATE; /* the failure that abandoned the step stays the message: its cause */
  weft_status st = grad_op(g, desc, kind, in, nin, out, nout, params, chained);
  if (st != WEFT_OK) g->broken = 1;
  return st;
}

static void grad_free(weft_mpi_grad *g) {
  for (size_t i = 0; i < g->ne; i++) {
    grad_entry *e = g->e[i];
    /* after a failure: receives cancelled, sends left to MPI (the tensors' memory outlives them) */
    for (int j = 0; j < e->nch; j++) {
      weft_mpi_lock();
      if (e->sends[j] != MPI_REQUEST_NULL) MPI_Request_free(&e->sends[j]);
      if (e->fwd[j] != MPI_REQUEST_NULL) MPI_Request_free(&e->fwd[j]);
      weft_mpi_unlock();
    }
    if (e->nch) cancel_all(e->fin, e->nch);
    free(e->sends), free(e->fin), free(e->fwd);
    free(e);
  }
  free(g->e);
  free(g->order);
  free(g);
}

weft_status weft_mpi_grad_end(weft_mpi_grad *g) {
  if (!g) return WEFT_OK;
  if (g->broken) { /* the failure was reported where it happened */
    grad_free(g);
    return WEFT_ERR_STATE;
  }
  weft_status st = WEFT_OK;
  if (g->chained) {
    for (size_t i = 0; i < g->ne && st == WEFT_OK; i++)
      if (g->e[i]->done != g->e[i]->passes)
        st = fail(g, WEFT_ERR_STATE, "weft_mpi_grad_end: a gradient was accumulated %d times, not its %d passes",
                  g->e[i]->done, g->e[i]->passes);
    /* the final values still on their way down the chain */
    if (st == WEFT_OK) st = drive_until(g, NULL, -1, -1, NULL);
    /* what MPI and the ops wrote into the host memory is each gradient's value now (no copy) */
    for (size_t i = 0; i < g->ne && st == WEFT_OK; i++) st = weft_tensor_write(g->e[i]->t, g->e[i]->h, g->e[i]->n);
  } else if (g->size > 1) {
    /* fp32: every rank's own sum, added in place in each tensor's host memory by MPI in an order of its
     * choosing; one collective per gradient, in the order every rank registered them, all posted, then
     * waited on */
    weft_mpi_job *job = weft_mpi_job_get();
    MPI_Request *req = calloc(g->ne ? g->ne : 1, sizeof *req);
    if (!req) st = fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    size_t posted = 0;
    for (size_t i = 0; i < g->ne && st == WEFT_OK; i++, posted++) {
      weft_tensor *t = g->e[i]->t;
      if ((st = weft_tensor_read(t, t->host, g->e[i]->n)) != WEFT_OK) break;
      if ((st = weft_tensor_write(t, t->host, g->e[i]->n)) != WEFT_OK) break;
      weft_mpi_lock();
      int rc = MPI_Iallreduce(MPI_IN_PLACE, t->host, (int)g->e[i]->n, MPI_FLOAT, MPI_SUM, job->dp, &req[i]);
      weft_mpi_unlock();
      if (rc != MPI_SUCCESS) st = mpi_error(g, rc, "in MPI_Allreduce");
    }
    if (st == WEFT_OK) {
      int code = 0, w = weft_mpi_wait(req, (int)posted, NULL, g->timeout_ms, &code);
      if (w == 1)
        st = fail(g, WEFT_ERR_LANE_FAILED, "rank %d: MPI_Allreduce did not complete within %d ms: a rank died or "
                  "hangs (WEFT_MPI_TIMEOUT_MS)", g->rank, g->timeout_ms);
      else if (w)
        st = mpi_error(g, code, "in MPI_Allreduce");
    }
    for (size_t i = 0; i < posted && st == WEFT_OK; i++)
      st = weft_tensor_write(g->e[i]->t, g->e[i]->t->host, g->e[i]->n);
    free(req);
  }
  grad_free(g);
  return st;
}
