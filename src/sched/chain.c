/* chain.c - data-parallel gradients across the ranks of an MPI job (weft_mpi_grad_*, include/weft.h).
 *
 * Exact contract: the chained reduction. A weight gradient is a sum over the batch's samples in ascending
 * order (the canonical order of matmul over k, of sum_rows over rows, of the accumulating transformer ops
 * over (b, t)). Rank r holds the samples after rank r-1's, so rank r continues rank r-1's running sum over
 * its own samples, starting from the value rank r-1 left: matmul_acc, whose every sum starts from the value
 * in its output. Rank 0 starts from zero (a plain matmul). The result on the last rank is, bit for bit, what
 * one process computes over the whole batch, whatever the number of ranks; weft_mpi_grad_end broadcasts it.
 *
 * The chain is pipelined: a gradient's rows go in chunks (CHUNK_FLOATS), each passed on to the next rank as
 * soon as it is done while this rank computes the next chunk, and the ranks receive all of a gradient's
 * chunks as they come; and a rank passes each gradient on while it goes on with the rest of its backward
 * pass, so the ranks work at once, each a little behind the one before. The chain then costs bandwidth
 * (one gradient's worth per link, plus the broadcast) and chunk latencies, not R whole transfers.
 *
 * A gradient that several ops of a step accumulate into (GPT-2's tied token table: the head's matmul and
 * the embedding's backward) is passed along once per op (weft_mpi_grad_passes): between passes the last
 * rank hands its running sum back to rank 0.
 *
 * fp32 contract: each rank sums its own samples (any order); weft_mpi_grad_end adds the ranks' sums with
 * MPI_Allreduce, whose order depends on the number of ranks (not bit-stable across job sizes).
 *
 * Every wait is bounded (weft_mpi_timeout_ms); a rank that died or hangs is named in the error. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "net/mpi.h"

/* Floats per message of a running sum: 256 KiB, a size at which MPI's bandwidth is near its peak while a
 * chunk still passes in tens of microseconds on shared memory. */
#define CHUNK_FLOATS ((size_t)1 << 16)

typedef struct grad_entry {
  weft_tensor *t;
  int passes, done; /* passes declared, passes this rank has made */
  float *host;      /* the running sum this rank received, extended and passed on; the final value */
  size_t n;
  MPI_Request *sends; /* this entry's sends still in flight (they read `host`) */
  int nsends, sends_cap;
} grad_entry;

struct weft_mpi_grad {
  weft_fabric *f;
  weft_contract contract;
  int rank, size, timeout_ms;
  int chained; /* exact and more than one rank */
  int broken;  /* a call failed: the step is abandoned (weft_mpi_grad_end only frees) */
  grad_entry *e;
  size_t ne, cap;
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

static weft_status mpi_failed(weft_mpi_grad *g, int w, int code, int peer, const char *what) {
  char e[200];
  if (w == 1)
    return fail(g, WEFT_ERR_LANE_FAILED,
                "rank %d: nothing from rank %d within %d ms while %s: rank %d died or hangs (WEFT_MPI_TIMEOUT_MS)",
                g->rank, peer, g->timeout_ms, what, peer);
  return fail(g, WEFT_ERR_IO, "rank %d: MPI failed while %s: %s", g->rank, what, weft_mpi_strerror(code, e, sizeof e));
}

weft_status weft_mpi_grad_begin(weft_fabric *f, weft_contract contract, weft_mpi_grad **out) {
  if (out) *out = NULL;
  if (!f || !out) return WEFT_ERR_INVALID_ARGUMENT;
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

static grad_entry *entry_of(weft_mpi_grad *g, weft_tensor *t) {
  for (size_t i = 0; i < g->ne; i++)
    if (g->e[i].t == t) return &g->e[i];
  if (g->ne == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 64;
    grad_entry *p = realloc(g->e, cap * sizeof *p);
    if (!p) return NULL;
    g->e = p;
    g->cap = cap;
  }
  grad_entry *e = &g->e[g->ne];
  memset(e, 0, sizeof *e);
  e->t = t;
  e->passes = 1;
  e->n = weft_tensor_numel(t);
  if (g->chained && !(e->host = malloc((e->n ? e->n : 1) * sizeof(float)))) return NULL;
  g->ne++;
  return e;
}

weft_status weft_mpi_grad_passes(weft_mpi_grad *g, weft_tensor *c, int passes) {
  if (!g || !c) return WEFT_ERR_INVALID_ARGUMENT;
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

/* Waits until the entry's earlier sends are done with its buffer. */
static weft_status sends_wait(weft_mpi_grad *g, grad_entry *e) {
  if (!e->nsends) return WEFT_OK;
  int code = 0, w = weft_mpi_wait(e->sends, e->nsends, NULL, g->timeout_ms, &code);
  if (w) return mpi_failed(g, w, code, dest_of(g, e) >= 0 ? dest_of(g, e) : 0, "passing a running sum on");
  e->nsends = 0;
  return WEFT_OK;
}

static weft_status send_chunk(weft_mpi_grad *g, grad_entry *e, int dest, size_t at, size_t count) {
  if (e->nsends == e->sends_cap) {
    int cap = e->sends_cap ? 2 * e->sends_cap : 8;
    MPI_Request *p = realloc(e->sends, (size_t)cap * sizeof *p);
    if (!p) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    e->sends = p;
    e->sends_cap = cap;
  }
  weft_mpi_lock();
  int rc = MPI_Isend(e->host + at, (int)count, MPI_FLOAT, dest, WEFT_MPI_TAG_CHAIN, weft_mpi_job_get()->dp,
                     &e->sends[e->nsends]);
  weft_mpi_unlock();
  if (rc != MPI_SUCCESS) return mpi_failed(g, -1, rc, dest, "passing a running sum on");
  e->nsends++;
  return WEFT_OK;
}

/* Posts the receives of a running sum of `rows` rows of `cols` floats in chunks of whole rows. */
static weft_status recv_post(weft_mpi_grad *g, grad_entry *e, int src, int64_t rows, int64_t cols, int64_t per,
                             MPI_Request *req) {
  int j = 0;
  for (int64_t i0 = 0; i0 < rows; i0 += per, j++) {
    const int64_t nr = rows - i0 < per ? rows - i0 : per;
    weft_mpi_lock();
    int rc = MPI_Irecv(e->host + (size_t)(i0 * cols), (int)(nr * cols), MPI_FLOAT, src, WEFT_MPI_TAG_CHAIN,
                       weft_mpi_job_get()->dp, &req[j]);
    weft_mpi_unlock();
    if (rc != MPI_SUCCESS) return mpi_failed(g, -1, rc, src, "receiving a running sum");
  }
  return WEFT_OK;
}

static weft_status recv_wait(weft_mpi_grad *g, MPI_Request *req, int src, const char *what) {
  MPI_Status st;
  int code = 0, w = weft_mpi_wait(req, 1, &st, g->timeout_ms, &code);
  if (w) return mpi_failed(g, w, code, src, what);
  return WEFT_OK;
}

/* c (m x n, the entry) = the chained sum of at (m x k, rows of op(a)) . op(b): the pass's running sum comes
 * in chunks of rows, this rank's samples are added to each by matmul_acc (a plain matmul where this rank
 * starts the sum), and each chunk goes on as soon as it is done. */
static weft_status chain_matmul(weft_mpi_grad *g, const weft_op_desc *desc, grad_entry *e, const float *at,
                                int64_t m, int64_t k, float *bh, int tb, int64_t n) {
  weft_status st = sends_wait(g, e);
  if (st) return st;
  const int src = source_of(g, e), dest = dest_of(g, e);
  const int64_t per = (int64_t)(CHUNK_FLOATS / (size_t)n) > 0 ? (int64_t)(CHUNK_FLOATS / (size_t)n) : 1;
  const int nchunks = (int)((m + per - 1) / per);
  MPI_Request *req = src >= 0 ? calloc((size_t)nchunks, sizeof *req) : NULL;
  if (src >= 0 && !req) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
  if (src >= 0 && (st = recv_post(g, e, src, m, n, per, req)) != WEFT_OK) {
    free(req);
    return st;
  }
  const int64_t bd[2] = {tb ? n : k, tb ? k : n};
  weft_tensor *tbt = NULL;
  st = weft_tensor_wrap(g->f, 2, bd, bh, &tbt);
  int j = 0;
  for (int64_t i0 = 0; st == WEFT_OK && i0 < m; i0 += per, j++) {
    const int64_t nr = m - i0 < per ? m - i0 : per;
    if (src >= 0 && (st = recv_wait(g, &req[j], src, "waiting for a running sum")) != WEFT_OK) break;
    const int64_t ad[2] = {nr, k}, cd[2] = {nr, n};
    weft_tensor *ta = NULL, *tc = NULL;
    float *c = e->host + (size_t)(i0 * n);
    st = weft_tensor_wrap(g->f, 2, ad, (float *)at + (size_t)(i0 * k), &ta);
    if (st == WEFT_OK) st = weft_tensor_wrap(g->f, 2, cd, c, &tc);
    if (st == WEFT_OK)
      st = src >= 0 ? weft_op_matmul_acc(g->f, desc, ta, 0, tbt, tb, tc) : weft_op_matmul(g->f, desc, ta, 0, tbt, tb, tc);
    if (st == WEFT_OK) st = weft_tensor_read(tc, c, (size_t)(nr * n));
    weft_tensor_destroy(ta);
    weft_tensor_destroy(tc);
    if (st == WEFT_OK && dest >= 0) st = send_chunk(g, e, dest, (size_t)(i0 * n), (size_t)(nr * n));
  }
  weft_tensor_destroy(tbt);
  if (st != WEFT_OK && req) {
    /* The receives not yet matched are cancelled: nothing of this step can be trusted now. */
    for (int q = j; q < nchunks; q++) {
      weft_mpi_lock();
      MPI_Cancel(&req[q]);
      MPI_Request_free(&req[q]);
      weft_mpi_unlock();
    }
  }
  free(req);
  if (st == WEFT_OK && dest < 0) st = weft_tensor_write(e->t, e->host, e->n); /* the final value */
  if (st == WEFT_OK) e->done++;
  return st;
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
  if (!g || !a || !b || !c) return WEFT_ERR_INVALID_ARGUMENT;
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
  if (ah && bh && (!trans_a || at)) st = chain_matmul(g, desc, e, trans_a ? at : ah, m, k, bh, trans_b, n);
  free(ah), free(bh), free(at);
  return st;
}

static weft_status grad_sum_rows(weft_mpi_grad *g, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out) {
  if (!g || !x || !out) return WEFT_ERR_INVALID_ARGUMENT;
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
    st = chain_matmul(g, desc, e, ones, 1, rows, xh, 0, n);
  }
  free(xh), free(ones);
  return st;
}

static weft_status grad_op(weft_mpi_grad *g, const weft_op_desc *desc, weft_op_kind kind, weft_tensor *const *in,
                           int nin, weft_tensor *const *out, int nout, const weft_op_params *params, uint32_t chained) {
  if (!g || nout < 0 || nout > WEFT_OP_MAX_OUT || (!out && nout)) return WEFT_ERR_INVALID_ARGUMENT;
  grad_entry *ent[WEFT_OP_MAX_OUT] = {0};
  for (int o = 0; o < nout; o++)
    if (((chained >> o) & 1u) && out[o] && !(ent[o] = entry_of(g, out[o])))
      return fail(g, WEFT_ERR_OUT_OF_MEMORY, "weft_mpi_grad_op: out of host memory");
  weft_status st = WEFT_OK;
  if (g->chained) {
    /* Each running sum arrives into its tensor before the op... */
    for (int o = 0; o < nout && st == WEFT_OK; o++) {
      grad_entry *e = ent[o];
      if (!e) continue;
      if (e->done >= e->passes)
        return fail(g, WEFT_ERR_STATE, "weft_mpi_grad_op: gradient accumulated more often than its %d passes",
                    e->passes);
      if ((st = sends_wait(g, e)) != WEFT_OK) return st;
      const int src = source_of(g, e);
      if (src < 0) continue;
      const int64_t per = (int64_t)CHUNK_FLOATS, nch = ((int64_t)e->n + per - 1) / per;
      MPI_Request *req = calloc((size_t)(nch ? nch : 1), sizeof *req);
      if (!req) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
      st = recv_post(g, e, src, (int64_t)e->n, 1, per, req);
      for (int64_t j = 0; j < nch && st == WEFT_OK; j++) st = recv_wait(g, &req[j], src, "waiting for a running sum");
      free(req);
      if (st == WEFT_OK) st = weft_tensor_write(e->t, e->host, e->n);
    }
  }
  if (st == WEFT_OK) st = weft_op_run(g->f, desc, kind, in, nin, out, nout, params);
  for (int o = 0; o < nout && st == WEFT_OK; o++) {
    grad_entry *e = ent[o];
    if (!e) continue;
    if (g->chained) {
      /* ... and leaves for the next rank after it, in chunks. */
      const int dest = dest_of(g, e);
      st = weft_tensor_read(e->t, e->host, e->n); /* passed on, or (dest < 0) the final value to broadcast */
      for (size_t at = 0; dest >= 0 && at < e->n && st == WEFT_OK; at += CHUNK_FLOATS)
        st = send_chunk(g, e, dest, at, e->n - at < CHUNK_FLOATS ? e->n - at : CHUNK_FLOATS);
    }
    e->done++;
  }
  return st;
}

/* The public calls: a failure abandons the step (its messages may be out of step with the other ranks'). */
weft_status weft_mpi_grad_matmul(weft_mpi_grad *g, const weft_op_desc *desc, weft_tensor *a, int trans_a,
                                 weft_tensor *b, int trans_b, weft_tensor *c) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (g->broken) return WEFT_ERR_STATE;
  weft_status st = grad_matmul(g, desc, a, trans_a, b, trans_b, c);
  if (st != WEFT_OK) g->broken = 1;
  return st;
}

weft_status weft_mpi_grad_sum_rows(weft_mpi_grad *g, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (g->broken) return WEFT_ERR_STATE;
  weft_status st = grad_sum_rows(g, desc, x, out);
  if (st != WEFT_OK) g->broken = 1;
  return st;
}

weft_status weft_mpi_grad_op(weft_mpi_grad *g, const weft_op_desc *desc, weft_op_kind kind, weft_tensor *const *in,
                             int nin, weft_tensor *const *out, int nout, const weft_op_params *params,
                             uint32_t chained) {
  if (!g) return WEFT_ERR_INVALID_ARGUMENT;
  if (g->broken) return WEFT_ERR_STATE;
  weft_status st = grad_op(g, desc, kind, in, nin, out, nout, params, chained);
  if (st != WEFT_OK) g->broken = 1;
  return st;
}

static void grad_free(weft_mpi_grad *g) {
  for (size_t i = 0; i < g->ne; i++) {
    grad_entry *e = &g->e[i];
    for (int q = 0; q < e->nsends; q++) {
      weft_mpi_lock();
      MPI_Request_free(&e->sends[q]);
      weft_mpi_unlock();
    }
    free(e->sends);
    free(e->host);
  }
  free(g->e);
  free(g);
}

weft_status weft_mpi_grad_end(weft_mpi_grad *g) {
  if (!g) return WEFT_OK;
  if (g->broken) { /* the failure was reported where it happened */
    grad_free(g);
    return WEFT_ERR_STATE;
  }
  weft_status st = WEFT_OK;
  weft_mpi_job *job = weft_mpi_job_get();
  if (g->size > 1) {
    for (size_t i = 0; i < g->ne && st == WEFT_OK; i++) {
      grad_entry *e = &g->e[i];
      if (e->done != e->passes && g->chained)
        st = fail(g, WEFT_ERR_STATE, "weft_mpi_grad_end: a gradient was accumulated %d times, not its %d passes",
                  e->done, e->passes);
      if (st == WEFT_OK) st = sends_wait(g, e);
    }
    /* One collective per gradient, in the order every rank registered them; all posted, then waited on. */
    MPI_Request *req = st == WEFT_OK ? calloc(g->ne ? g->ne : 1, sizeof *req) : NULL;
    float **buf = st == WEFT_OK ? calloc(g->ne ? g->ne : 1, sizeof *buf) : NULL;
    if (st == WEFT_OK && (!req || !buf)) st = fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    size_t posted = 0;
    for (size_t i = 0; i < g->ne && st == WEFT_OK; i++, posted++) {
      grad_entry *e = &g->e[i];
      int rc;
      if (g->chained) {
        buf[i] = e->host;
        weft_mpi_lock();
        rc = MPI_Ibcast(e->host, (int)e->n, MPI_FLOAT, g->size - 1, job->dp, &req[i]);
        weft_mpi_unlock();
      } else {
        /* fp32: every rank's own sum, added by MPI in an order of its choosing */
        if (!(buf[i] = host_copy(g, e->t, &st))) break;
        weft_mpi_lock();
        rc = MPI_Iallreduce(MPI_IN_PLACE, buf[i], (int)e->n, MPI_FLOAT, MPI_SUM, job->dp, &req[i]);
        weft_mpi_unlock();
      }
      if (rc != MPI_SUCCESS) st = mpi_failed(g, -1, rc, g->size - 1, "combining the gradients");
    }
    if (st == WEFT_OK) {
      int code = 0, w = weft_mpi_wait(req, (int)posted, NULL, g->timeout_ms, &code);
      if (w) st = mpi_failed(g, w, code, g->size - 1, g->chained ? "broadcasting the gradients" : "in MPI_Allreduce");
    }
    for (size_t i = 0; i < posted && st == WEFT_OK; i++)
      if (!g->chained || g->rank != g->size - 1) st = weft_tensor_write(g->e[i].t, buf[i], g->e[i].n);
    if (buf && !g->chained)
      for (size_t i = 0; i < g->ne; i++) free(buf[i]);
    free(req);
    free(buf);
  }
  grad_free(g);
  return st;
}
