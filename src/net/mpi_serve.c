/* mpi_serve.c - a serving rank of a WEFT_MPI_LANES job: `weft worker`'s sessions (src/net/worker.c: one
 * decoder, the same handles, caps and validation, every op through weft_op_run) fed by MPI messages instead
 * of a socket (the transport of src/net/mpi.h). One session per session tag; frames are served in the order
 * they arrive, one at a time, so an op of one lane waits for the op of another lane of this rank that came
 * first (a rank is one thread). Idle, the loop polls rarely (it sleeps up to 1 ms between polls once it has
 * waited 10 ms; mpi.h), so a rank that serves nothing does not burn a core. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/mpi.h"
#include "net/worker.h"

#define MAX_SESSIONS 64

typedef struct served {
  int id; /* the session (tag - WEFT_MPI_TAG_SESSION0); -1: a free slot */
  weft_net_session *s;
} served;

typedef struct server {
  weft_net_server *srv;
  weft_net_limits limits;
  served sessions[MAX_SESSIONS];
  uint8_t *buf; /* the frame being received */
  size_t cap;
  weft_net_buf out;
} server;

static served *find_session(server *sv, int id) {
  for (int i = 0; i < MAX_SESSIONS; i++)
    if (sv->sessions[i].id == id) return &sv->sessions[i];
  return NULL;
}

static void end_session(served *x) {
  weft_net_session_destroy(x->s);
  x->s = NULL;
  x->id = -1;
}

static int grow(server *sv, size_t n) {
  if (n <= sv->cap) return 1;
  uint8_t *p = realloc(sv->buf, n);
  if (!p) return 0;
  sv->buf = p;
  sv->cap = n;
  return 1;
}

/* Sends a reply frame to rank 0 on the session's tag; waits for rank 0 without bound (it is waiting for this
 * reply; if it died, the launcher ends this process). */
static int send_reply(int tag, const uint8_t *p, size_t n) {
  weft_mpi_job *job = weft_mpi_job_get();
  MPI_Request req;
  weft_mpi_lock();
  int rc = MPI_Isend(p, (int)n, MPI_BYTE, 0, tag, job->lanes, &req);
  weft_mpi_unlock();
  return rc == MPI_SUCCESS && weft_mpi_wait(&req, 1, NULL, -1, NULL) == 0;
}

/* An error reply to a frame whose header is known, without a session behind it. */
static void reply_error(server *sv, int tag, const weft_net_header *h, weft_status st, const char *msg) {
  size_t n = strnlen(msg, WEFT_NET_MAX_MESSAGE);
  uint8_t frame[WEFT_NET_HEADER_BYTES + WEFT_NET_MAX_MESSAGE];
  weft_net_header r = {WEFT_NET_MAGIC, (uint16_t)(h->type | WEFT_NET_REPLY), (uint16_t)st, h->request_id, (uint32_t)n};
  weft_net_header_encode(&r, frame);
  memcpy(frame + WEFT_NET_HEADER_BYTES, msg, n);
  (void)sv;
  send_reply(tag, frame, WEFT_NET_HEADER_BYTES + n);
}

/* Receives the second message of a split frame (`rest` bytes) into dst. 1 on success. */
static int recv_rest(int tag, uint8_t *dst, size_t rest) {
  weft_mpi_job *job = weft_mpi_job_get();
  MPI_Message msg;
  MPI_Status status;
  int count = -1;
  if (weft_mpi_probe(0, tag, job->lanes, &msg, &status, weft_mpi_timeout_ms(), NULL) != 0) return 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  int ok = count >= 0 && (size_t)count == rest;
  weft_mpi_lock();
  int rc = MPI_Mrecv(ok ? dst : NULL, ok ? count : 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
  weft_mpi_unlock();
  return ok && rc == MPI_SUCCESS;
}

/* One frame on a session's tag (its first message already probed): 1 keep serving, 0 a fatal MPI failure. */
static int serve_frame(server *sv, MPI_Message *msg, const MPI_Status *status) {
  int tag = status->MPI_TAG, count = 0;
  MPI_Get_count(status, MPI_BYTE, &count);
  const int id = tag - WEFT_MPI_TAG_SESSION0;
  const size_t n = count < 0 ? 0 : (size_t)count;
  /* A message larger than any frame is taken into nothing (its bytes are dropped) and the session ended. */
  int fits = n >= WEFT_NET_HEADER_BYTES && n <= WEFT_NET_HEADER_BYTES + (size_t)sv->limits.max_frame && grow(sv, n);
  weft_mpi_lock();
  int rc = MPI_Mrecv(fits ? sv->buf : NULL, fits ? count : 0, MPI_BYTE, msg, MPI_STATUS_IGNORE);
  weft_mpi_unlock();
  served *x = find_session(sv, id);
  if (!fits || rc != MPI_SUCCESS) {
    if (x) end_session(x);
    return rc == MPI_SUCCESS || !fits;
  }
  weft_net_header h;
  char err[WEFT_NET_MAX_MESSAGE];
  weft_status st = weft_net_header_decode(sv->buf, &sv->limits, &h, err, sizeof err);
  if (st != WEFT_OK) {
    /* As over TCP: a header that cannot be trusted ends the session, with a reply that says why. */
    reply_error(sv, tag, &h, st, err);
    if (x) end_session(x);
    return 1;
  }
  const size_t have = n - WEFT_NET_HEADER_BYTES;
  if (have > h.length) {
    reply_error(sv, tag, &h, WEFT_ERR_INVALID_ARGUMENT, "a frame longer than its header says");
    if (x) end_session(x);
    return 1;
  }
  if (!x) {
    /* A new session: its first frame must be hello, which the session itself checks. */
    x = find_session(sv, -1);
    if (!x || !(x->s = weft_net_session_create(sv->srv))) {
      if (x) x->s = NULL;
      reply_error(sv, tag, &h, WEFT_ERR_STATE, "this rank serves its maximum number of sessions; close one");
      if (have < h.length) recv_rest(tag, NULL, 0);
      return 1;
    }
    x->id = id;
  }
  if (have < h.length) {
    /* A split frame: a WRITE's floats land in the tensor, as `weft worker` receives them. */
    const size_t rest = h.length - have;
    float *dst = have == WEFT_MPI_HEAD_PAYLOAD ? weft_net_session_write_target(x->s, &h, sv->buf + WEFT_NET_HEADER_BYTES)
                                               : NULL;
    if (dst) {
      if (!recv_rest(tag, (uint8_t *)dst, rest)) {
        end_session(x);
        return 1;
      }
      uint8_t ok[WEFT_NET_HEADER_BYTES];
      weft_net_header r = {WEFT_NET_MAGIC, (uint16_t)(h.type | WEFT_NET_REPLY), 0, h.request_id, 0};
      weft_net_header_encode(&r, ok);
      send_reply(tag, ok, sizeof ok);
      return 1;
    }
    if (!grow(sv, WEFT_NET_HEADER_BYTES + (size_t)h.length) || !recv_rest(tag, sv->buf + n, rest)) {
      end_session(x);
      return 1;
    }
  }
  sv->out.len = 0;
  int keep = weft_net_session_handle(x->s, &h, sv->buf + WEFT_NET_HEADER_BYTES, &sv->out);
  if (sv->out.len) send_reply(tag, sv->out.data, sv->out.len);
  if (!keep) end_session(x);
  /* A large reply (a READ) is transient: its buffer is not kept between frames. */
  if (sv->out.cap > ((size_t)1 << 20)) weft_net_buf_free(&sv->out);
  return 1;
}

weft_status weft_net_mpi_serve(const char *lanes, char *err, size_t errlen) {
  weft_mpi_job *job = weft_mpi_job_get();
  if (!job->inited || job->mode != WEFT_MPI_LANES || job->rank == 0) {
    snprintf(err, errlen, "only a rank other than 0 of an MPI job of lanes serves");
    return WEFT_ERR_STATE;
  }
  server sv;
  memset(&sv, 0, sizeof sv);
  for (int i = 0; i < MAX_SESSIONS; i++) sv.sessions[i].id = -1;
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  char identity[128];
  snprintf(identity, sizeof identity, "mpi rank %d on %.60s", job->rank, host);
  weft_net_worker_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.lanes = lanes;
  desc.identity = identity;
  sv.limits.max_frame = WEFT_NET_DEFAULT_MAX_FRAME;
  sv.limits.max_resident = WEFT_NET_DEFAULT_MAX_RESIDENT;
  desc.limits = sv.limits;
  weft_status st = weft_net_server_create(&desc, &sv.srv, err, errlen);
  if (st != WEFT_OK) return st;
  for (;;) {
    MPI_Message msg;
    MPI_Status status;
    int code = 0;
    if (weft_mpi_probe(0, MPI_ANY_TAG, job->lanes, &msg, &status, -1, &code) != 0) {
      char e[200];
      snprintf(err, errlen, "rank %d: MPI_Improbe: %s", job->rank, weft_mpi_strerror(code, e, sizeof e));
      st = WEFT_ERR_IO;
      break;
    }
    if (status.MPI_TAG == WEFT_MPI_TAG_CTL) {
      uint32_t ctl[2] = {0, 0};
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      weft_mpi_lock();
      MPI_Mrecv(count == (int)sizeof ctl ? ctl : NULL, count == (int)sizeof ctl ? 2 : 0, MPI_UINT32_T, &msg,
                MPI_STATUS_IGNORE);
      weft_mpi_unlock();
      if (ctl[0] == WEFT_MPI_CTL_STOP) break;
      served *x = ctl[0] == WEFT_MPI_CTL_CLOSE ? find_session(&sv, (int)ctl[1]) : NULL;
      if (x && ctl[1] < (uint32_t)job->tag_ub) end_session(x);
      continue;
    }
    if (status.MPI_TAG < WEFT_MPI_TAG_SESSION0) { /* nothing of ours: taken and dropped */
      weft_mpi_lock();
      MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      weft_mpi_unlock();
      continue;
    }
    if (!serve_frame(&sv, &msg, &status)) {
      snprintf(err, errlen, "rank %d: an MPI receive failed", job->rank);
      st = WEFT_ERR_IO;
      break;
    }
  }
  for (int i = 0; i < MAX_SESSIONS; i++)
    if (sv.sessions[i].s) end_session(&sv.sessions[i]);
  weft_net_buf_free(&sv.out);
  free(sv.buf);
  weft_net_server_destroy(sv.srv);
  return st;
}
