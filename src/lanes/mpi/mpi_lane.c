/* mpi_lane.c - lanes of the other ranks of an MPI job (WEFT_MPI_LANES), in rank 0's fabrics: one lane per
 * lane a serving rank offers, named mpi:<rank>/<lane>, one session (connection) each. The protocol's client
 * is src/net/client.c, as for remote and browser lanes: the same frames, handles, caps and checks; this file
 * is its MPI transport (src/net/mpi.h says how a frame travels) and the probe. A rank that does not answer
 * within WEFT_MPI_TIMEOUT_MS makes the lane fail (WEFT_ERR_LANE_FAILED), so the core takes it out and
 * re-routes the op; a rank that stopped answering is not asked again (MPI ranks do not come back). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/client.h"
#include "net/mpi.h"
#include "weft_lane.h"

typedef struct mpi_lane {
  weft_net_client client; /* first: the shared vtable functions take the lane as its client */
  int rank;               /* the serving rank */
  int session;            /* the session's tag is WEFT_MPI_TAG_SESSION0 + session */
  int open;               /* the session exists on the serving rank (a close is due when it ends) */
  int dead;               /* the rank stopped answering: never asked again */
  int timeout_ms;
  size_t max_reply;
  uint8_t *scratch; /* the last reply */
  size_t scratch_cap;
  uint8_t *sendbuf; /* a frame gathered into one message */
  size_t sendbuf_cap;
  weft_contract_mask contracts;
  uint64_t ops;
  char worker_lane_name[128];
  char name[256];
  char device[160];
  char details[400];
} mpi_lane;

static int grow(uint8_t **buf, size_t *cap, size_t n) {
  if (n <= *cap) return 1;
  uint8_t *p = realloc(*buf, n);
  if (!p) return 0;
  *buf = p;
  *cap = n;
  return 1;
}

static int tag_of(const mpi_lane *l) { return WEFT_MPI_TAG_SESSION0 + l->session; }

/* Sends one message and waits until MPI is done with its buffer (bounded by the lane's timeout). */
static weft_status send_msg(mpi_lane *l, const void *p, size_t n, char *why, size_t whylen) {
  weft_mpi_job *job = weft_mpi_job_get();
  MPI_Request req;
  int err = 0;
  weft_mpi_lock();
  int rc = MPI_Isend(p, (int)n, MPI_BYTE, l->rank, tag_of(l), job->lanes, &req);
  weft_mpi_unlock();
  int w = rc == MPI_SUCCESS ? weft_mpi_wait(&req, 1, NULL, l->timeout_ms, &err) : -1;
  if (w == 0) return WEFT_OK;
  char e[200];
  if (w == 1) {
    l->dead = 1;
    snprintf(why, whylen, "rank %d took no message for %d ms (it died or hangs)", l->rank, l->timeout_ms);
  } else {
    snprintf(why, whylen, "MPI_Isend to rank %d: %s", l->rank, weft_mpi_strerror(rc != MPI_SUCCESS ? rc : err, e, sizeof e));
  }
  return WEFT_ERR_LANE_FAILED;
}

static weft_status mpi_send(void *ctx, const uint8_t *const piece[3], const size_t len[3], size_t max_reply, char *why,
                            size_t whylen) {
  mpi_lane *l = ctx;
  l->max_reply = max_reply;
  if (!l->open || l->dead) {
    snprintf(why, whylen, "%s", l->dead ? "its rank stopped answering" : "the session is closed");
    return WEFT_ERR_LANE_FAILED;
  }
  const size_t total = len[0] + len[1] + len[2];
  /* A large payload goes as two messages: the header with the payload's first bytes, then the rest sent
   * from the caller's memory (no copy) and received where it belongs (a WRITE's floats into the tensor). */
  const size_t head = WEFT_NET_HEADER_BYTES + WEFT_MPI_HEAD_PAYLOAD;
  const int split = total - WEFT_NET_HEADER_BYTES > WEFT_MPI_SPLIT_BYTES && len[0] == WEFT_NET_HEADER_BYTES &&
                    len[1] == WEFT_MPI_HEAD_PAYLOAD;
  const size_t first = split ? head : total;
  if (!grow(&l->sendbuf, &l->sendbuf_cap, first)) {
    snprintf(why, whylen, "out of host memory");
    return WEFT_ERR_LANE_FAILED;
  }
  size_t at = 0;
  for (int i = 0; i < (split ? 2 : 3); i++)
    if (len[i]) memcpy(l->sendbuf + at, piece[i], len[i]), at += len[i];
  weft_status st = send_msg(l, l->sendbuf, first, why, whylen);
  if (st == WEFT_OK && split) st = send_msg(l, piece[2], len[2], why, whylen);
  return st;
}

static weft_status mpi_recv(void *ctx, const uint8_t **out_frame, size_t *out_len, char *why, size_t whylen) {
  mpi_lane *l = ctx;
  weft_mpi_job *job = weft_mpi_job_get();
  if (!l->open || l->dead) {
    snprintf(why, whylen, "%s", l->dead ? "its rank stopped answering" : "the session is closed");
    return WEFT_ERR_LANE_FAILED;
  }
  MPI_Message msg;
  MPI_Status status;
  int err = 0, count = 0;
  char e[200];
  int w = weft_mpi_probe(l->rank, tag_of(l), job->lanes, &msg, &status, l->timeout_ms, &err);
  if (w == 1) {
    l->dead = 1;
    snprintf(why, whylen, "rank %d did not answer within %d ms (it died or hangs; WEFT_MPI_TIMEOUT_MS)", l->rank,
             l->timeout_ms);
    return WEFT_ERR_LANE_FAILED;
  }
  if (w < 0) {
    snprintf(why, whylen, "MPI_Improbe from rank %d: %s", l->rank, weft_mpi_strerror(err, e, sizeof e));
    return WEFT_ERR_LANE_FAILED;
  }
  MPI_Get_count(&status, MPI_BYTE, &count);
  /* Take no more than the request can get back; a larger message is taken into nothing and refused. */
  size_t n = count < 0 ? 0 : (size_t)count;
  int fits = n <= l->max_reply && grow(&l->scratch, &l->scratch_cap, n ? n : 1);
  weft_mpi_lock();
  int rc = MPI_Mrecv(fits ? l->scratch : NULL, fits ? count : 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
  weft_mpi_unlock();
  if (!fits) {
    snprintf(why, whylen, "a reply of %zu bytes, more than the request can get", n);
    return WEFT_ERR_LANE_FAILED;
  }
  if (rc != MPI_SUCCESS) {
    snprintf(why, whylen, "MPI_Mrecv from rank %d: %s", l->rank, weft_mpi_strerror(rc, e, sizeof e));
    return WEFT_ERR_LANE_FAILED;
  }
  *out_frame = l->scratch;
  *out_len = n;
  return WEFT_OK;
}

/* Ends the session on the serving rank (its tensors are freed there). */
static void session_close(mpi_lane *l) {
  if (!l->open) return;
  l->open = 0;
  if (l->dead) return;
  weft_mpi_job *job = weft_mpi_job_get();
  if (!job->inited) return;
  uint32_t ctl[2] = {WEFT_MPI_CTL_CLOSE, (uint32_t)l->session};
  MPI_Request req;
  weft_mpi_lock();
  int rc = MPI_Isend(ctl, 2, MPI_UINT32_T, l->rank, WEFT_MPI_TAG_CTL, job->lanes, &req);
  weft_mpi_unlock();
  if (rc == MPI_SUCCESS && weft_mpi_wait(&req, 1, NULL, l->timeout_ms, NULL) == 1) l->dead = 1;
}

static void mpi_drop(void *ctx, const char *why) {
  (void)why; /* the serving rank learns nothing from it: the session just ends */
  session_close(ctx);
}

static const weft_net_transport MPI_TRANSPORT = {mpi_send, mpi_recv, mpi_drop, NULL}; /* no bulk: MPI moves large messages itself */

/* A new session with the rank: hello (no secret: MPI has no authentication, see mpi.h). */
static weft_status session_open(mpi_lane *l, char *why, size_t whylen) {
  session_close(l);
  l->session = weft_mpi_session_new();
  l->open = 1;
  weft_net_client *c = &l->client;
  weft_net_client_begin(c);
  weft_net_hello hello;
  weft_status st = weft_net_client_hello(c, &hello);
  if (st == WEFT_OK) st = weft_net_client_authenticate(c, &hello, NULL, 0, NULL, NULL, 0);
  if (st != WEFT_OK) {
    snprintf(why, whylen, "rank %d refused hello: %.400s", l->rank, c->why);
    session_close(l);
    c->up = 0;
  }
  return st;
}

static void mpi_describe(void *self, weft_lane_desc *out) {
  mpi_lane *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = "mpi";
  out->device = l->device;
  out->driver = "weft wire protocol v2 over MPI";
  out->details = l->details;
  out->contracts = l->contracts;
  out->ops = l->ops;
}

static void mpi_destroy(void *self) {
  mpi_lane *l = self;
  session_close(l);
  free(l->scratch);
  free(l->sendbuf);
  free(l);
}

typedef struct lane_match {
  const mpi_lane *l;
  int found;
} lane_match;

static void match_lane(void *ctx, uint32_t index, weft_contract_mask contracts, uint64_t ops, const char *name,
                       const char *kind, const char *device) {
  lane_match *m = ctx;
  (void)kind, (void)device;
  if (index == (uint32_t)m->l->client.peer_lane && strcmp(name, m->l->worker_lane_name) == 0 &&
      (contracts & m->l->contracts) == m->l->contracts && (ops & m->l->ops) == m->l->ops)
    m->found = 1;
}

/* The lane failed (its rank's lane failed under an op, or a reply was malformed): a new session to the same
 * rank brings it back if that rank still offers the lane. A rank that stopped answering stays out. */
static weft_status mpi_revive(void *self) {
  mpi_lane *l = self;
  if (l->dead)
    return weft_lane_report(l->client.host, WEFT_ERR_LANE_FAILED,
                            "%s: rank %d stopped answering; a rank of an MPI job does not come back", l->name, l->rank);
  char why[512] = "";
  if (session_open(l, why, sizeof why) != WEFT_OK)
    return weft_lane_report(l->client.host, WEFT_ERR_LANE_FAILED, "%s: %s", l->name, why);
  lane_match m = {l, 0};
  if (weft_net_client_lanes(&l->client, match_lane, &m) != WEFT_OK || !m.found) {
    session_close(l);
    l->client.up = 0;
    return weft_lane_report(l->client.host, WEFT_ERR_LANE_FAILED, "%s: rank %d no longer offers lane %s", l->name,
                            l->rank, l->worker_lane_name);
  }
  return WEFT_OK;
}

static const weft_lane_vtable MPI_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION,
    .size = sizeof(weft_lane_vtable),
    .describe = mpi_describe,
    .destroy = mpi_destroy,
    .buffer_alloc = weft_net_client_buffer_alloc,
    .buffer_free = weft_net_client_buffer_free,
    .upload = weft_net_client_upload,
    .download = weft_net_client_download,
    .run = weft_net_client_run,
    .revive = mpi_revive,
};

static mpi_lane *lane_open(const weft_probe_args *args, int rank, char *why, size_t whylen) {
  mpi_lane *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->client.tp = &MPI_TRANSPORT;
  l->client.tp_ctx = l;
  l->client.host = args->host;
  l->client.name = l->name;
  l->rank = rank;
  l->timeout_ms = weft_mpi_timeout_ms();
  snprintf(l->name, sizeof l->name, "mpi:%d", rank);
  if (session_open(l, why, whylen) != WEFT_OK) {
    mpi_destroy(l);
    return NULL;
  }
  return l;
}

typedef struct rank_lanes {
  const weft_probe_args *args;
  const weft_lane_sink *sink;
  int rank;
  mpi_lane *first; /* the session that listed the lanes serves the first of them */
} rank_lanes;

static void add_rank_lane(void *ctx, uint32_t index, weft_contract_mask contracts, uint64_t ops, const char *name,
                          const char *kind, const char *device) {
  rank_lanes *w = ctx;
  char why[512] = "";
  if (!contracts || !ops) return;
  mpi_lane *l = w->first ? w->first : lane_open(w->args, w->rank, why, sizeof why);
  w->first = NULL;
  if (!l) {
    char nm[300];
    snprintf(nm, sizeof nm, "mpi:%d/%.100s", w->rank, name);
    w->sink->add_absent(w->sink->ctx, nm, why[0] ? why : "out of memory");
    return;
  }
  l->client.peer_lane = (int32_t)index;
  l->contracts = contracts;
  l->ops = ops;
  snprintf(l->worker_lane_name, sizeof l->worker_lane_name, "%.127s", name);
  snprintf(l->name, sizeof l->name, "mpi:%d/%.100s", w->rank, name);
  snprintf(l->device, sizeof l->device, "%.159s", device);
  snprintf(l->details, sizeof l->details,
           "rank %d of %d, lane %.60s (%.30s) over MPI point-to-point messages (no authentication: the job's "
           "processes are trusted), frames up to %u bytes",
           w->rank, weft_mpi_size(), name, kind, (unsigned)l->client.max_frame);
  w->sink->add_lane(w->sink->ctx, &MPI_VTABLE, l);
}

weft_status weft_mpi_lanes_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  weft_mpi_job *job = weft_mpi_job_get();
  const char *why = !job->inited                          ? "not an MPI job (mpirun -np N weft ..., or weft_mpi_init)"
                    : job->mode != WEFT_MPI_LANES         ? "a data-parallel MPI job: every rank trains, none serves lanes"
                    : job->rank != 0                      ? "only rank 0's fabric has the other ranks' lanes"
                    : job->size < 2                       ? "an MPI job of one rank: no other rank to serve lanes"
                                                          : NULL;
  if (why) {
    sink->add_absent(sink->ctx, "mpi", why);
    return WEFT_OK;
  }
  for (int r = 1; r < job->size; r++) {
    char err[512] = "", absent[32];
    snprintf(absent, sizeof absent, "mpi:%d", r);
    rank_lanes w = {args, sink, r, lane_open(args, r, err, sizeof err)};
    if (!w.first) {
      sink->add_absent(sink->ctx, absent, err[0] ? err : "out of memory");
      continue;
    }
    mpi_lane *lister = w.first;
    if (weft_net_client_lanes(&lister->client, add_rank_lane, &w) != WEFT_OK && w.first)
      sink->add_absent(sink->ctx, absent, "the rank did not list its lanes");
    if (w.first) mpi_destroy(w.first);
  }
  return WEFT_OK;
}
