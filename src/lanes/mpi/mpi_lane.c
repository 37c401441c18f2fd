/* mpi_lane.c - lanes of the other ranks of an MPI job (WEFT_MPI_LANES), in rank 0's fabrics: one lane per
 * lane a serving rank offers, named mpi:<rank>/<lane>, one session (connection) each. The protocol's client
 * is src/net/client.c, as for remote and browser lanes: the same frames, handles, caps and checks; the lane
 * glue over it (the vtable, the probe of a rank's list, the check on revive) is src/net/peer_lane.c, as for
 * remote lanes. This file is its MPI transport (src/net/mpi.h says how a frame travels; large transfers keep
 * several frames in flight, mpi_bulk), a session's opening and closing, and revive. A rank that does not answer within WEFT_MPI_TIMEOUT_MS makes the lane fail
 * (WEFT_ERR_LANE_FAILED), so the core takes it out and re-routes the op; a rank that stopped answering is
 * not asked again (MPI ranks do not come back). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/client.h"
#include "net/mpi.h"
#include "net/peer_lane.h"
#include "weft_lane.h"

typedef struct mpi_lane {
  weft_net_peer_lane peer; /* first: the shared vtable functions take the lane as theirs */
  int rank;                /* the serving rank */
  int session;             /* the session's tag is WEFT_MPI_TAG_SESSION0 + session */
  int open;                /* the session exists on the serving rank (a close is due when it ends) */
  int dead;                /* the rank stopped answering: never asked again */
  char dead_why[160];      /* how it was found out (every later error of the lane says it again) */
  int timeout_ms;
  uint8_t *sendbuf; /* a frame gathered into one message */
  size_t sendbuf_cap;
} mpi_lane;

static int tag_of(const mpi_lane *l) { return WEFT_MPI_TAG_SESSION0 + l->session; }

/* The lane's rank stopped taking or answering: it is not asked again, and what showed it is kept, so that a
 * later error of the lane (an op routed to it, a revive) still names the cause and not only the symptom.
 * why: where the error goes (NULL: nowhere). */
static weft_status rank_lost(mpi_lane *l, const char *doing, char *why, size_t whylen) {
  l->dead = 1, weft_mpi_job_get()->dead_rank = l->rank;
  snprintf(l->dead_why, sizeof l->dead_why, "rank %d %s within %d ms (it died or hangs; WEFT_MPI_TIMEOUT_MS)",
           l->rank, doing, l->timeout_ms);
  if (why) snprintf(why, whylen, "%s", l->dead_why);
  return WEFT_ERR_LANE_FAILED;
}

/* The answer of a lane that is closed, or whose rank was found dead before. */
static weft_status not_open(const mpi_lane *l, char *why, size_t whylen) {
  if (l->dead) snprintf(why, whylen, "its rank stopped answering: %s", l->dead_why);
  else snprintf(why, whylen, "the session is closed");
  return WEFT_ERR_LANE_FAILED;
}

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
    /* The send is still pending: MPI may read its buffer if the rank wakes up. The lane's own buffer is left
     * to it (never freed or reused: the lane is dead); a caller's memory (a large payload) cannot be. */
    if (p == l->sendbuf) l->sendbuf = NULL, l->sendbuf_cap = 0;
    return rank_lost(l, "took no message", why, whylen);
  }
  snprintf(why, whylen, "MPI_Isend to rank %d: %s", l->rank, weft_mpi_strerror(rc != MPI_SUCCESS ? rc : err, e, sizeof e));
  return WEFT_ERR_LANE_FAILED;
}

static weft_status mpi_send(void *ctx, const uint8_t *const piece[3], const size_t len[3], size_t max_reply, char *why,
                            size_t whylen) {
  mpi_lane *l = ctx;
  l->peer.max_reply = max_reply;
  if (!l->open || l->dead) return not_open(l, why, whylen);
  const size_t total = len[0] + len[1] + len[2];
  /* A large payload goes as two messages: the header with the payload's first bytes, then the rest sent
   * from the caller's memory (no copy) and received where it belongs (a WRITE's floats into the tensor). */
  const size_t head = WEFT_NET_HEADER_BYTES + WEFT_MPI_HEAD_PAYLOAD;
  const int split = total - WEFT_NET_HEADER_BYTES > WEFT_MPI_SPLIT_BYTES && len[0] == WEFT_NET_HEADER_BYTES &&
                    len[1] == WEFT_MPI_HEAD_PAYLOAD;
  const size_t first = split ? head : total;
  if (!weft_net_peer_grow(&l->sendbuf, &l->sendbuf_cap, first)) {
    snprintf(why, whylen, "out of host memory for a request of %zu bytes", first);
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
  if (!l->open || l->dead) return not_open(l, why, whylen);
  MPI_Message msg;
  MPI_Status status;
  int err = 0, count = 0;
  char e[200];
  int w = weft_mpi_probe(l->rank, tag_of(l), job->lanes, &msg, &status, l->timeout_ms, &err);
  if (w == 1) return rank_lost(l, "did not answer", why, whylen);
  if (w < 0) {
    snprintf(why, whylen, "MPI_Improbe from rank %d: %s", l->rank, weft_mpi_strerror(err, e, sizeof e));
    return WEFT_ERR_LANE_FAILED;
  }
  MPI_Get_count(&status, MPI_BYTE, &count);
  /* Take no more than the request can get back; a larger message is taken into nothing and refused. */
  size_t n = count < 0 ? 0 : (size_t)count;
  uint8_t *buf = weft_net_peer_reply_room(&l->peer, n ? n : 1, why, whylen);
  weft_mpi_lock();
  int rc = MPI_Mrecv(buf, buf ? (int)n : 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
  weft_mpi_unlock();
  if (!buf) return WEFT_ERR_LANE_FAILED;
  if (rc != MPI_SUCCESS) {
    snprintf(why, whylen, "MPI_Mrecv from rank %d: %s", l->rank, weft_mpi_strerror(rc, e, sizeof e));
    return WEFT_ERR_LANE_FAILED;
  }
  *out_frame = buf;
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
  if (rc == MPI_SUCCESS && weft_mpi_wait(&req, 1, NULL, l->timeout_ms, NULL) == 1)
    rank_lost(l, "took no close of its session", NULL, 0);
}

static void mpi_drop(void *ctx, const char *why) {
  (void)why; /* the serving rank learns nothing from it: the session just ends */
  session_close(ctx);
}

/* Chunks of a bulk transfer in flight at once (their requests sent, their replies not yet read). */
#define BULK_WINDOW 8

/* A large WRITE or READ as a stream of frames with up to BULK_WINDOW of them in flight, so that the serving
 * rank goes from one chunk to the next without waiting for this rank to read a reply and send the next
 * request (each round trip would otherwise leave the link idle while both ranks wake up). A WRITE chunk is
 * a split frame (mpi.h): its elements are sent from the caller's memory and received straight into the
 * tensor. A READ chunk's reply is one message, copied into the caller's buffer. The chunks are of equal
 * size (so none is small enough to go unsplit), at most job->max_chunk elements. */
static weft_status mpi_bulk(void *ctx, const weft_net_bulk *job, uint32_t *next_id, char *why, size_t whylen) {
  mpi_lane *l = ctx;
  if (!l->open || l->dead) return not_open(l, why, whylen);
  const uint64_t cap = job->max_chunk ? job->max_chunk : 1, nch = job->count ? (job->count + cap - 1) / cap : 0;
  const uint64_t per = nch ? (job->count + nch - 1) / nch : 0;
  const uint16_t type = (uint16_t)(job->write ? WEFT_NET_WRITE : WEFT_NET_READ);
  uint8_t head[BULK_WINDOW][WEFT_NET_HEADER_BYTES + WEFT_MPI_HEAD_PAYLOAD];
  MPI_Request req[BULK_WINDOW][2];
  uint32_t ids[BULK_WINDOW];
  weft_status refused = WEFT_OK;
  uint64_t sent = 0, got = 0;
  while (got < sent || (!refused && sent < nch)) {
    /* 1. requests, up to the window (none more once one was refused) */
    for (; !refused && sent < nch && sent - got < BULK_WINDOW; sent++) {
      const int w = (int)(sent % BULK_WINDOW);
      const uint64_t e0 = sent * per, n = job->count - e0 < per ? job->count - e0 : per;
      ids[w] = (*next_id)++;
      weft_net_header h = {WEFT_NET_MAGIC, type, 0, ids[w], (uint32_t)(WEFT_MPI_HEAD_PAYLOAD + (job->write ? n * 4 : 0))};
      weft_net_header_encode(&h, head[w]);
      weft_net_put64(head[w] + WEFT_NET_HEADER_BYTES, job->handle);
      weft_net_put64(head[w] + WEFT_NET_HEADER_BYTES + 8, job->first + e0);
      weft_net_put64(head[w] + WEFT_NET_HEADER_BYTES + 16, n);
      req[w][0] = req[w][1] = MPI_REQUEST_NULL;
      weft_mpi_lock();
      int rc = MPI_Isend(head[w], (int)sizeof head[w], MPI_BYTE, l->rank, tag_of(l), weft_mpi_job_get()->lanes,
                         &req[w][0]);
      if (rc == MPI_SUCCESS && job->write)
        rc = MPI_Isend(job->data + e0 * 4, (int)(n * 4), MPI_BYTE, l->rank, tag_of(l), weft_mpi_job_get()->lanes,
                       &req[w][1]);
      weft_mpi_unlock();
      if (rc != MPI_SUCCESS) {
        char e[200];
        snprintf(why, whylen, "MPI_Isend to rank %d: %s", l->rank, weft_mpi_strerror(rc, e, sizeof e));
        return WEFT_ERR_LANE_FAILED;
      }
    }
    /* 2. the oldest chunk's reply (in order, as the serving rank answers them) */
    const int w = (int)(got % BULK_WINDOW);
    const uint64_t e0 = got * per, n = job->count - e0 < per ? job->count - e0 : per;
    const uint8_t *frame = NULL;
    size_t len = 0;
    l->peer.max_reply = WEFT_NET_HEADER_BYTES + (job->write ? WEFT_NET_MAX_MESSAGE : 8 + n * 4 + WEFT_NET_MAX_MESSAGE);
    weft_status st = mpi_recv(l, &frame, &len, why, whylen);
    if (st) return st;
    /* the reply means the rank took the request; its sends are done, or end at once */
    int err = 0, k = weft_mpi_wait(req[w], 2, NULL, l->timeout_ms, &err);
    if (k == 1) return rank_lost(l, "took no message", why, whylen);
    if (k < 0) {
      char e[200];
      snprintf(why, whylen, "MPI_Isend to rank %d: %s", l->rank, weft_mpi_strerror(err, e, sizeof e));
      return WEFT_ERR_LANE_FAILED;
    }
    got++;
    weft_net_header h = {0, 0, 0, 0, 0};
    if (len >= WEFT_NET_HEADER_BYTES)
      h = (weft_net_header){weft_net_get32(frame), weft_net_get16(frame + 4), weft_net_get16(frame + 6),
                            weft_net_get32(frame + 8), weft_net_get32(frame + 12)};
    if (len < WEFT_NET_HEADER_BYTES || h.magic != WEFT_NET_MAGIC || h.type != (uint16_t)(type | WEFT_NET_REPLY) ||
        h.request_id != ids[w] || len != WEFT_NET_HEADER_BYTES + (size_t)h.length) {
      snprintf(why, whylen, "a malformed reply to a bulk %s (%zu bytes, wanted the reply to request %u)",
               job->write ? "write" : "read", len, (unsigned)ids[w]);
      return WEFT_ERR_LANE_FAILED;
    }
    if (h.status) {
      /* refused: the replies to the chunks still in flight are read too, so the session stays in step */
      if (refused == WEFT_OK) {
        size_t m = h.length < WEFT_NET_MAX_MESSAGE ? h.length : WEFT_NET_MAX_MESSAGE;
        char msg[WEFT_NET_MAX_MESSAGE + 1];
        memcpy(msg, frame + WEFT_NET_HEADER_BYTES, m);
        for (size_t i = 0; i < m; i++)
          if ((uint8_t)msg[i] < 0x20 || msg[i] == 0x7f) msg[i] = '?';
        msg[m] = 0;
        snprintf(why, whylen, "%s", msg);
        refused = h.status < 64 ? (weft_status)h.status : WEFT_ERR_INTERNAL;
      }
      continue;
    }
    if (refused != WEFT_OK) continue;
    if (job->write ? h.length != 0 : (h.length != 8 + n * 4 || weft_net_get64(frame + WEFT_NET_HEADER_BYTES) != n)) {
      snprintf(why, whylen, "a %s reply of %u bytes for %llu elements", job->write ? "write" : "read",
               (unsigned)h.length, (unsigned long long)n);
      return WEFT_ERR_LANE_FAILED;
    }
    if (!job->write) memcpy(job->data + e0 * 4, frame + WEFT_NET_HEADER_BYTES + 8, (size_t)n * 4);
  }
  return refused;
}

static const weft_net_transport MPI_TRANSPORT = {mpi_send, mpi_recv, mpi_drop, mpi_bulk};

/* A new session with the rank: hello (no secret: MPI has no authentication, see mpi.h). */
static weft_status session_open(mpi_lane *l, char *why, size_t whylen) {
  session_close(l);
  l->session = weft_mpi_session_new();
  l->open = 1;
  weft_status st = weft_net_peer_handshake(&l->peer, NULL, 0, NULL, NULL, 0, why, whylen);
  if (st != WEFT_OK) {
    session_close(l);
    l->peer.client.up = 0;
  }
  return st;
}

static void mpi_destroy(weft_net_peer_lane *self) {
  mpi_lane *l = (mpi_lane *)self;
  session_close(l);
  weft_net_peer_release(&l->peer);
  free(l->sendbuf);
  free(l);
}

/* The lane failed (its rank's lane failed under an op, or a reply was malformed): a new session to the same
 * rank brings it back if that rank still offers the lane. A rank that stopped answering stays out. */
static weft_status mpi_revive(weft_net_peer_lane *self) {
  mpi_lane *l = (mpi_lane *)self;
  if (l->dead)
    return weft_lane_report(l->peer.client.host, WEFT_ERR_LANE_FAILED,
                            "%s: %s; a rank of an MPI job does not come back", l->peer.name, l->dead_why);
  char why[512] = "";
  if (session_open(l, why, sizeof why) != WEFT_OK)
    return weft_lane_report(l->peer.client.host, WEFT_ERR_LANE_FAILED, "%s: %s", l->peer.name, why);
  return weft_net_peer_relist(&l->peer);
}

/* A probe of one rank: what each of its lanes' sessions is opened with. */
typedef struct rank_probe {
  const weft_probe_args *args;
  int rank;
} rank_probe;

/* Opens one lane: a session of its own with the rank, hello done. */
static weft_net_peer_lane *lane_open(void *ctx, char *why, size_t whylen) {
  const rank_probe *w = ctx;
  mpi_lane *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  char name[32], peer[32];
  snprintf(name, sizeof name, "mpi:%d", w->rank);
  snprintf(peer, sizeof peer, "rank %d", w->rank);
  weft_net_peer_init(&l->peer, &MPI_TRANSPORT, w->args->host, name, peer);
  l->rank = w->rank;
  l->timeout_ms = weft_mpi_timeout_ms();
  if (session_open(l, why, whylen) != WEFT_OK) {
    mpi_destroy(&l->peer);
    return NULL;
  }
  return &l->peer;
}

/* The details of a lane of the rank, once its LANES entry is known. */
static void lane_details(weft_net_peer_lane *self, void *ctx, const char *lane, const char *kind) {
  const rank_probe *w = ctx;
  snprintf(self->details, sizeof self->details,
           "rank %d of %d, lane %.60s (%.30s) over MPI point-to-point messages (no authentication: the job's "
           "processes are trusted), frames up to %u bytes",
           w->rank, weft_mpi_size(), lane, kind, (unsigned)self->client.max_frame);
}

static const weft_net_peer_kind MPI_KIND = {"mpi", "weft wire protocol v2 over MPI", lane_open, lane_details,
                                            mpi_destroy, mpi_revive};

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
    char prefix[32];
    snprintf(prefix, sizeof prefix, "mpi:%d", r);
    rank_probe w = {args, r};
    weft_net_peer_probe(&MPI_KIND, &w, sink, prefix);
  }
  return WEFT_OK;
}
