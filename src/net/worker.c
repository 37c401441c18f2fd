/* worker.c - `weft worker`'s engine: sessions that run each request through the public API on resident
 * tensors named by handles, and the TCP server (a thread per connection, each isolated: a bad frame gets
 * an error reply or closes that connection only). */
#define _GNU_SOURCE /* accept4 */
#include "net/worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "net/tls.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the worker copies float payloads as little-endian bytes; a big-endian port must swap them"
#endif

struct weft_net_server {
  weft_fabric *fabric;
  pthread_mutex_t lock; /* a fabric is used from one thread at a time */
  uint8_t secret[4096];
  size_t secret_len;
  int need_auth;
  char identity[WEFT_NET_MAX_IDENTITY + 1]; /* bound into both proofs */
  weft_net_tls *tls;                        /* NULL: plain TCP */
  weft_net_limits limits;
  int io_timeout_ms;
  int max_clients;
  pthread_mutex_t count_lock;
  int clients;
};

/* A resident tensor: the session owns its floats; each op sees them through tensors wrapped over them
 * (weft_tensor_wrap) in the shape that op wants, so a client lane can treat a handle as a flat buffer. */
typedef struct slot {
  uint64_t id;
  float *data;
  uint64_t numel;
  int ndim;
  int64_t dims[WEFT_NET_MAX_RANK];
} slot;

struct weft_net_session {
  weft_net_server *srv;
  int hello, authed, auth_started;
  uint8_t nonce[WEFT_NET_NONCE_BYTES];
  uint8_t client_nonce[WEFT_NET_NONCE_BYTES];
  slot *slots;
  size_t nslots;
  uint64_t next_id, resident;
  char err[WEFT_NET_MAX_MESSAGE];
};

/* ------------------------------------------------------------------------------------------ replies */

static int buf_reserve(weft_net_buf *b, size_t more) {
  if (b->cap - b->len >= more) return 1;
  size_t cap = b->cap ? b->cap : 256;
  while (cap - b->len < more) {
    if (cap > SIZE_MAX / 2) return 0;
    cap *= 2;
  }
  uint8_t *p = realloc(b->data, cap);
  if (!p) return 0;
  b->data = p;
  b->cap = cap;
  return 1;
}

void weft_net_buf_free(weft_net_buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

/* Starts a reply frame of `len` payload bytes; returns where the payload goes, NULL out of memory. */
static uint8_t *reply_begin(weft_net_buf *b, const weft_net_header *req, weft_status st, size_t len) {
  if (len > UINT32_MAX || !buf_reserve(b, WEFT_NET_HEADER_BYTES + len)) return NULL;
  weft_net_header h = {WEFT_NET_MAGIC, (uint16_t)(req->type | WEFT_NET_REPLY), (uint16_t)st, req->request_id,
                       (uint32_t)len};
  weft_net_header_encode(&h, b->data + b->len);
  uint8_t *p = b->data + b->len + WEFT_NET_HEADER_BYTES;
  b->len += WEFT_NET_HEADER_BYTES + len;
  return p;
}

static void reply_error(weft_net_buf *b, const weft_net_header *req, weft_status st, const char *msg) {
  size_t n = strnlen(msg, WEFT_NET_MAX_MESSAGE);
  uint8_t *p = reply_begin(b, req, st ? st : WEFT_ERR_INTERNAL, n);
  if (p) memcpy(p, msg, n);
}

static int errorf(weft_net_session *s, weft_net_buf *b, const weft_net_header *req, weft_status st, const char *fmt,
                  ...) __attribute__((format(printf, 5, 6)));
static int errorf(weft_net_session *s, weft_net_buf *b, const weft_net_header *req, weft_status st, const char *fmt,
                  ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  reply_error(b, req, st, s->err);
  return 1;
}

/* -------------------------------------------------------------------------------------------- server */

weft_status weft_net_server_create(const weft_net_worker_desc *desc, weft_net_server **out, char *err,
                                   size_t errlen) {
  *out = NULL;
  weft_net_server *srv = calloc(1, sizeof *srv);
  if (!srv) {
    snprintf(err, errlen, "out of memory");
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  if (desc->secret_len > sizeof srv->secret) {
    free(srv);
    snprintf(err, errlen, "the secret is over %zu bytes", sizeof srv->secret);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  if (desc->secret && desc->secret_len) {
    memcpy(srv->secret, desc->secret, desc->secret_len);
    srv->secret_len = desc->secret_len;
    srv->need_auth = 1;
  }
  if (desc->identity && strlen(desc->identity) > WEFT_NET_MAX_IDENTITY) {
    free(srv);
    snprintf(err, errlen, "the worker's identity is over %u bytes", WEFT_NET_MAX_IDENTITY);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  snprintf(srv->identity, sizeof srv->identity, "%s", desc->identity ? desc->identity : "weft-worker");
  srv->limits = desc->limits;
  if (!srv->limits.max_frame) srv->limits.max_frame = WEFT_NET_DEFAULT_MAX_FRAME;
  if (!srv->limits.max_resident) srv->limits.max_resident = WEFT_NET_DEFAULT_MAX_RESIDENT;
  srv->io_timeout_ms = desc->io_timeout_ms > 0 ? desc->io_timeout_ms : 30000;
  srv->max_clients = desc->max_clients > 0 ? desc->max_clients : 64;
  weft_fabric_desc fd = WEFT_FABRIC_DESC_INIT;
  fd.lanes = desc->lanes;
  /* A worker must answer at once; the client measures it over the wire anyway. */
  fd.calibration = WEFT_CALIBRATION_OFF;
  weft_status st = weft_fabric_open(&fd, &srv->fabric);
  if (st) {
    snprintf(err, errlen, "cannot open the worker's fabric: %s", weft_open_error());
    free(srv);
    return st;
  }
  pthread_mutex_init(&srv->lock, NULL);
  pthread_mutex_init(&srv->count_lock, NULL);
  *out = srv;
  return WEFT_OK;
}

void weft_net_server_destroy(weft_net_server *srv) {
  if (!srv) return;
  weft_fabric_close(srv->fabric);
  weft_net_tls_destroy(srv->tls);
  pthread_mutex_destroy(&srv->lock);
  pthread_mutex_destroy(&srv->count_lock);
  OPENSSL_cleanse(srv->secret, sizeof srv->secret);
  free(srv);
}

weft_net_session *weft_net_session_create(weft_net_server *srv) {
  weft_net_session *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->srv = srv;
  s->next_id = 1;
  s->slots = calloc(WEFT_NET_MAX_HANDLES, sizeof *s->slots);
  if (!s->slots || RAND_bytes(s->nonce, sizeof s->nonce) != 1) {
    free(s->slots);
    free(s);
    return NULL;
  }
  return s;
}

void weft_net_session_destroy(weft_net_session *s) {
  if (!s) return;
  /* No fabric tensor outlives an op (each is wrapped and destroyed inside it): the floats are all. */
  for (size_t i = 0; i < s->nslots; i++) free(s->slots[i].data);
  free(s->slots);
  free(s);
}

/* Handles are ids this session issued; anything else (0, an id freed or never issued, another session's)
 * refers to nothing. */
static slot *find(weft_net_session *s, uint64_t id) {
  if (!id) return NULL;
  for (size_t i = 0; i < s->nslots; i++)
    if (s->slots[i].id == id) return &s->slots[i];
  return NULL;
}

/* ---------------------------------------------------------------------------------------------- ops */

/* Which handle slots an op uses: bit i = slot i required, and optional ones. */
static void op_slots(weft_op_kind op, unsigned *required, unsigned *optional) {
  *optional = 0;
  switch (op) {
  case WEFT_OP_MATMUL:
  case WEFT_OP_ADD:
  case WEFT_OP_RELU_BACKWARD: *required = 1 | 2 | 4; break;
  case WEFT_OP_RELU:
  case WEFT_OP_SCALE:
  case WEFT_OP_AXPY:
  case WEFT_OP_SUM_ROWS: *required = 1 | 4; break;
  case WEFT_OP_SOFTMAX_XENT:
    *required = 1 | 2;
    *optional = 4 | 8;
    break;
  default: *required = 0; break;
  }
}

static int run_op(weft_net_session *s, const weft_net_header *h, const weft_net_request *r, weft_net_buf *b) {
  unsigned required, optional;
  op_slots(r->op, &required, &optional);
  slot *sl[4] = {0};
  for (int i = 0; i < 4; i++) {
    unsigned bit = 1u << i;
    if (!r->handles[i]) {
      if (required & bit)
        return errorf(s, b, h, WEFT_ERR_INVALID_ARGUMENT, "%s needs a tensor in slot %d", weft_op_kind_str(r->op), i);
      continue;
    }
    if (!((required | optional) & bit))
      return errorf(s, b, h, WEFT_ERR_INVALID_ARGUMENT, "%s takes no tensor in slot %d (handle %llu)",
                    weft_op_kind_str(r->op), i, (unsigned long long)r->handles[i]);
    sl[i] = find(s, r->handles[i]);
    if (!sl[i])
      return errorf(s, b, h, WEFT_ERR_NOT_FOUND, "handle %llu in slot %d refers to no tensor of this connection",
                    (unsigned long long)r->handles[i], i);
    /* A view may cover a prefix of the tensor's elements, never more. */
    if (r->shape_ndim[i] && r->shape_numel[i] > sl[i]->numel)
      return errorf(s, b, h, WEFT_ERR_SHAPE, "slot %d's view of %llu elements exceeds its tensor's %llu", i,
                    (unsigned long long)r->shape_numel[i], (unsigned long long)sl[i]->numel);
  }
  if (r->op == WEFT_OP_SOFTMAX_XENT && !sl[2] && !sl[3])
    return errorf(s, b, h, WEFT_ERR_INVALID_ARGUMENT, "softmax_xent needs a loss or a grad output");
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.contract = r->contract;
  od.lane = r->lane < 0 ? WEFT_LANE_AUTO : r->lane;
  weft_fabric *f = s->srv->fabric;
  weft_tensor *t[4] = {0};
  int owner[4] = {0}; /* t[i] was wrapped for slot i (not shared with an earlier slot) */
  pthread_mutex_lock(&s->srv->lock);
  weft_status st = WEFT_OK;
  for (int i = 0; i < 4 && !st; i++) {
    if (!sl[i]) continue;
    int nd = r->shape_ndim[i] ? r->shape_ndim[i] : sl[i]->ndim;
    const int64_t *dims = r->shape_ndim[i] ? r->shape_dims[i] : sl[i]->dims;
    /* The same handle in the same shape is one tensor, so the core sees in-place ops as such. */
    for (int j = 0; j < i; j++) {
      int ndj = r->shape_ndim[j] ? r->shape_ndim[j] : (sl[j] ? sl[j]->ndim : 0);
      const int64_t *dj = r->shape_ndim[j] ? r->shape_dims[j] : (sl[j] ? sl[j]->dims : NULL);
      if (sl[j] == sl[i] && ndj == nd && !memcmp(dj, dims, sizeof(int64_t) * (size_t)nd)) t[i] = t[j];
    }
    if (t[i]) continue;
    st = weft_tensor_wrap(f, nd, dims, sl[i]->data, &t[i]);
    owner[i] = 1;
  }
  int ta = !!(r->flags & WEFT_NET_OP_TRANS_A), tb = !!(r->flags & WEFT_NET_OP_TRANS_B);
  if (!st) switch (r->op) {
    case WEFT_OP_MATMUL: st = weft_op_matmul(f, &od, t[0], ta, t[1], tb, t[2]); break;
    case WEFT_OP_ADD: st = weft_op_add(f, &od, t[0], t[1], t[2]); break;
    case WEFT_OP_RELU: st = weft_op_relu(f, &od, t[0], t[2]); break;
    case WEFT_OP_RELU_BACKWARD: st = weft_op_relu_backward(f, &od, t[0], t[1], t[2]); break;
    case WEFT_OP_SCALE: st = weft_op_scale(f, &od, r->alpha, t[0], t[2]); break;
    case WEFT_OP_AXPY: st = weft_op_axpy(f, &od, r->alpha, t[0], t[2]); break;
    case WEFT_OP_SUM_ROWS: st = weft_op_sum_rows(f, &od, t[0], t[2]); break;
    case WEFT_OP_SOFTMAX_XENT: st = weft_op_softmax_xent(f, &od, t[0], t[1], t[2], t[3]); break;
    default: st = WEFT_ERR_UNSUPPORTED; break;
    }
  int lane = weft_fabric_last_lane(f);
  if (st) snprintf(s->err, sizeof s->err, "%s", weft_fabric_last_error(f));
  /* Outputs back into the session's floats (a no-copy read when the op ran on a host lane). */
  for (int i = 2; i < 4 && !st; i++)
    if (t[i] && owner[i]) {
      st = weft_tensor_read(t[i], sl[i]->data, weft_tensor_numel(t[i]));
      if (st) snprintf(s->err, sizeof s->err, "%s", weft_fabric_last_error(f));
    }
  for (int i = 0; i < 4; i++)
    if (owner[i]) weft_tensor_destroy(t[i]);
  pthread_mutex_unlock(&s->srv->lock);
  if (st) {
    reply_error(b, h, st, s->err);
    return 1;
  }
  uint8_t *p = reply_begin(b, h, WEFT_OK, 4);
  if (p) weft_net_put32(p, (uint32_t)lane);
  return 1;
}

/* -------------------------------------------------------------------------------------------- frames */

int weft_net_session_handle(weft_net_session *s, const weft_net_header *h, const uint8_t *payload,
                            weft_net_buf *b) {
  weft_net_server *srv = s->srv;
  weft_net_request r;
  weft_status st = weft_net_request_decode(h->type, payload, h->length, &srv->limits, &r, s->err, sizeof s->err);
  if (st) {
    reply_error(b, h, st, s->err);
    /* A peer that cannot even say hello properly is not worth a second chance. */
    return s->hello;
  }
  if (!s->hello && r.type != WEFT_NET_HELLO) {
    errorf(s, b, h, WEFT_ERR_STATE, "the first frame must be hello");
    return 0;
  }
  if (srv->need_auth && !s->authed && r.type != WEFT_NET_HELLO && r.type != WEFT_NET_AUTH &&
      r.type != WEFT_NET_AUTH_START && r.type != WEFT_NET_AUTH_FINISH) {
    errorf(s, b, h, WEFT_ERR_STATE,
           "this worker requires authentication (auth_start, auth_finish) before any request");
    return 0;
  }
  switch (r.type) {
  case WEFT_NET_HELLO: {
    if (s->hello) return errorf(s, b, h, WEFT_ERR_STATE, "hello was already received");
    if (r.version != WEFT_NET_VERSION) {
      errorf(s, b, h, WEFT_ERR_UNSUPPORTED, "protocol version %u is not spoken here (this worker speaks %u)",
             (unsigned)r.version, (unsigned)WEFT_NET_VERSION);
      return 0;
    }
    s->hello = 1;
    uint8_t *p = reply_begin(b, h, WEFT_OK, 12 + WEFT_NET_NONCE_BYTES + 12);
    if (!p) return 0;
    weft_net_put32(p, WEFT_NET_VERSION);
    weft_net_put32(p + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256 | (srv->need_auth ? WEFT_NET_CAP_AUTH_MUTUAL : 0));
    weft_net_put32(p + 8, (uint32_t)srv->need_auth);
    memcpy(p + 12, s->nonce, WEFT_NET_NONCE_BYTES);
    weft_net_put32(p + 12 + WEFT_NET_NONCE_BYTES, srv->limits.max_frame);
    weft_net_put64(p + 16 + WEFT_NET_NONCE_BYTES, srv->limits.max_resident);
    return 1;
  }
  case WEFT_NET_AUTH:
    /* The first release's proof shares its label with browser tabs' PROVE answer: a tab holding the secret
     * could sign it for any worker it was pointed at. */
    errorf(s, b, h, WEFT_ERR_UNSUPPORTED,
           "the single-sided auth proof is retired (it shares its domain with browser tabs' proofs): this worker "
           "wants mutual authentication (auth_start, auth_finish); update the client");
    return 0;
  case WEFT_NET_AUTH_START: {
    if (!srv->need_auth) {
      errorf(s, b, h, WEFT_ERR_STATE, "this worker has no shared secret: there is nothing to prove");
      return 0;
    }
    /* One try per connection: a second challenge would be a second guess against the same nonce. */
    if (s->auth_started || s->authed) {
      errorf(s, b, h, WEFT_ERR_STATE, "auth_start was already received on this connection");
      return 0;
    }
    s->auth_started = 1;
    memcpy(s->client_nonce, r.nonce, WEFT_NET_NONCE_BYTES);
    size_t idlen = strlen(srv->identity), mark = b->len;
    uint8_t *p = reply_begin(b, h, WEFT_OK, WEFT_NET_MAC_BYTES + 2 + idlen);
    if (!p || weft_net_auth_proof(WEFT_NET_PROOF_WORKER, srv->secret, srv->secret_len, s->nonce, s->client_nonce,
                                  srv->identity, p)) {
      b->len = mark;
      errorf(s, b, h, WEFT_ERR_INTERNAL, "HMAC failed");
      return 0;
    }
    weft_net_put16(p + WEFT_NET_MAC_BYTES, (uint16_t)idlen);
    memcpy(p + WEFT_NET_MAC_BYTES + 2, srv->identity, idlen);
    return 1;
  }
  case WEFT_NET_AUTH_FINISH: {
    if (!srv->need_auth || !s->auth_started || s->authed) {
      errorf(s, b, h, WEFT_ERR_STATE, "auth_finish comes once, after auth_start, on a worker with a secret");
      return 0;
    }
    uint8_t want[WEFT_NET_MAC_BYTES];
    if (weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, srv->secret, srv->secret_len, s->nonce, s->client_nonce,
                            srv->identity, want)) {
      errorf(s, b, h, WEFT_ERR_INTERNAL, "HMAC failed");
      return 0;
    }
    /* One try per connection, compared in constant time. */
    if (CRYPTO_memcmp(want, r.mac, WEFT_NET_MAC_BYTES) != 0) {
      errorf(s, b, h, WEFT_ERR_INVALID_ARGUMENT,
             "authentication failed: wrong proof of the shared secret for worker '%s'", srv->identity);
      return 0;
    }
    s->authed = 1;
    reply_begin(b, h, WEFT_OK, 0);
    return 1;
  }
  case WEFT_NET_LANES: {
    pthread_mutex_lock(&srv->lock);
    size_t n = weft_fabric_lane_count(srv->fabric), len = 4;
    /* Sized exactly as the loop below writes: a lane that cannot be described still gets its entry. */
    for (size_t i = 0; i < n; i++) {
      weft_lane_info li;
      len += 4 + 6;
      if (weft_fabric_lane_info(srv->fabric, i, &li)) continue;
      len += (li.name ? strnlen(li.name, 255) : 0) + (li.kind ? strnlen(li.kind, 255) : 0) +
             (li.device ? strnlen(li.device, 255) : 0);
    }
    uint8_t *p = reply_begin(b, h, WEFT_OK, len);
    if (p) {
      weft_net_put32(p, (uint32_t)n);
      p += 4;
      for (size_t i = 0; i < n; i++) {
        weft_lane_info li;
        if (weft_fabric_lane_info(srv->fabric, i, &li)) memset(&li, 0, sizeof li);
        weft_net_put32(p, li.failed ? 0 : li.contracts);
        p += 4;
        const char *strs[3] = {li.name, li.kind, li.device};
        for (int k = 0; k < 3; k++) {
          size_t sl = strs[k] ? strnlen(strs[k], 255) : 0;
          weft_net_put16(p, (uint16_t)sl);
          if (sl) memcpy(p + 2, strs[k], sl);
          p += 2 + sl;
        }
      }
    }
    pthread_mutex_unlock(&srv->lock);
    return p != NULL;
  }
  case WEFT_NET_CREATE: {
    uint64_t bytes = r.numel * 4;
    if (s->nslots >= WEFT_NET_MAX_HANDLES)
      return errorf(s, b, h, WEFT_ERR_OUT_OF_MEMORY, "this connection holds %u tensors, the cap",
                    WEFT_NET_MAX_HANDLES);
    if (bytes > srv->limits.max_resident - s->resident)
      return errorf(s, b, h, WEFT_ERR_OUT_OF_MEMORY,
                    "a tensor of %llu bytes would pass this connection's resident cap (%llu of %llu bytes held)",
                    (unsigned long long)bytes, (unsigned long long)s->resident,
                    (unsigned long long)srv->limits.max_resident);
    float *data = calloc(r.numel ? r.numel : 1, sizeof(float));
    if (!data) return errorf(s, b, h, WEFT_ERR_OUT_OF_MEMORY, "out of memory for %llu bytes", (unsigned long long)bytes);
    slot *sl = &s->slots[s->nslots++];
    sl->id = s->next_id++;
    sl->data = data;
    sl->numel = r.numel;
    sl->ndim = r.ndim;
    memcpy(sl->dims, r.dims, sizeof sl->dims);
    s->resident += bytes;
    uint8_t *p = reply_begin(b, h, WEFT_OK, 8);
    if (p) weft_net_put64(p, sl->id);
    return 1;
  }
  case WEFT_NET_WRITE:
  case WEFT_NET_READ: {
    slot *sl = find(s, r.handle);
    if (!sl)
      return errorf(s, b, h, WEFT_ERR_NOT_FOUND, "handle %llu refers to no tensor of this connection",
                    (unsigned long long)r.handle);
    /* Both are at most 2^28 (the decoder's caps), so the sum cannot wrap. */
    if (r.offset + r.numel > sl->numel)
      return errorf(s, b, h, WEFT_ERR_SHAPE, "%s of %llu floats at %llu runs past a tensor of %llu",
                    r.type == WEFT_NET_WRITE ? "write" : "read", (unsigned long long)r.numel,
                    (unsigned long long)r.offset, (unsigned long long)sl->numel);
    if (r.type == WEFT_NET_WRITE) {
      memcpy(sl->data + r.offset, r.data, r.numel * 4);
      reply_begin(b, h, WEFT_OK, 0);
      return 1;
    }
    uint8_t *p = reply_begin(b, h, WEFT_OK, 8 + r.numel * 4);
    if (p) {
      weft_net_put64(p, r.numel);
      memcpy(p + 8, sl->data + r.offset, r.numel * 4);
    }
    return p != NULL;
  }
  case WEFT_NET_FREE: {
    slot *sl = find(s, r.handle);
    if (!sl)
      return errorf(s, b, h, WEFT_ERR_NOT_FOUND, "handle %llu refers to no tensor of this connection",
                    (unsigned long long)r.handle);
    free(sl->data);
    s->resident -= sl->numel * 4;
    *sl = s->slots[--s->nslots];
    reply_begin(b, h, WEFT_OK, 0);
    return 1;
  }
  case WEFT_NET_OP: return run_op(s, h, &r, b);
  default: return errorf(s, b, h, WEFT_ERR_INVALID_ARGUMENT, "unknown request type %u", (unsigned)h->type);
  }
}

/* For a WRITE whose first 24 bytes (handle, offset, count) are `prefix`: where its floats may be received
 * directly (no staging copy), or NULL when the frame is not a valid write for this session now; the caller
 * then reads the frame whole and weft_net_session_handle answers it (with the error). */
static float *session_write_target(weft_net_session *s, const weft_net_header *h, const uint8_t *prefix) {
  if (h->type != WEFT_NET_WRITE || h->length < 24 || !s->hello || (s->srv->need_auth && !s->authed)) return NULL;
  uint64_t handle = weft_net_get64(prefix), offset = weft_net_get64(prefix + 8), count = weft_net_get64(prefix + 16);
  if (count > WEFT_NET_MAX_ELEMENTS || offset > WEFT_NET_MAX_ELEMENTS || count * 4 != h->length - 24u) return NULL;
  slot *sl = find(s, handle);
  if (!sl || offset + count > sl->numel) return NULL;
  return sl->data + offset;
}

/* ------------------------------------------------------------------------------------------- sockets */

typedef struct conn {
  weft_net_server *srv;
  int fd;
} conn;

static void set_timeout(int fd, int ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void *serve_conn(void *arg) {
  conn c = *(conn *)arg;
  free(arg);
  /* Every byte of the connection goes through nc: plain TCP, or TLS once its handshake is done. */
  weft_net_conn nc;
  weft_net_conn_init(&nc, c.fd);
  weft_net_session *s = weft_net_session_create(c.srv);
  weft_net_buf out = {0};
  uint8_t *payload = NULL;
  size_t payload_cap = 0;
  if (!s) goto done;
  int one = 1;
  setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_timeout(c.fd, c.srv->io_timeout_ms);
  /* A client may sit idle between frames as long as it likes (its fabric holds the lane open); keepalive
   * finds peers that vanished. Once a frame starts, the io timeout applies. */
  setsockopt(c.fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  if (c.srv->tls && weft_net_conn_accept(&nc, c.srv->tls, s->err, sizeof s->err) != WEFT_OK) goto done;
  for (;;) {
    uint8_t hb[WEFT_NET_HEADER_BYTES];
    struct pollfd pfd = {c.fd, POLLIN, 0};
    int pr = 1;
    /* Bytes TLS already decrypted are not on the socket any more: poll only when none wait. */
    if (!weft_net_conn_pending(&nc))
      while ((pr = poll(&pfd, 1, -1)) < 0 && errno == EINTR) {
      }
    if (pr <= 0 || !weft_net_conn_recv_all(&nc, hb, sizeof hb)) break;
    weft_net_header h;
    out.len = 0;
    weft_status st = weft_net_header_decode(hb, &c.srv->limits, &h, s->err, sizeof s->err);
    if (st) {
      /* The stream cannot be resynchronised after a bad header: say why, then close. Nothing is read or
       * allocated on the strength of the peer's length. */
      reply_error(&out, &h, st, s->err);
      weft_net_conn_send_all(&nc, out.data, out.len);
      break;
    }
    /* The length is capped by max_frame above. The buffer is kept between frames (large uploads would
     * otherwise fault in fresh pages every frame) and grows only to what a frame actually needs. */
    if (h.length > payload_cap) {
      uint8_t *p = realloc(payload, h.length);
      if (!p) break;
      payload = p;
      payload_cap = h.length;
    }
    if (h.type == WEFT_NET_WRITE && h.length >= 24) {
      /* Large uploads land straight in the tensor once the prefix says where, and is valid. */
      uint8_t prefix[24];
      if (!weft_net_conn_recv_all(&nc, prefix, sizeof prefix)) break;
      float *dst = session_write_target(s, &h, prefix);
      if (dst) {
        if (!weft_net_conn_recv_all(&nc, (uint8_t *)dst, h.length - 24u)) break;
        reply_begin(&out, &h, WEFT_OK, 0);
        if (!weft_net_conn_send_all(&nc, out.data, out.len)) break;
        continue;
      }
      memcpy(payload, prefix, sizeof prefix);
      if (!weft_net_conn_recv_all(&nc, payload + 24, h.length - 24u)) break;
    } else if (!weft_net_conn_recv_all(&nc, payload, h.length)) {
      break;
    }
    int keep = weft_net_session_handle(s, &h, payload, &out);
    if (out.len && !weft_net_conn_send_all(&nc, out.data, out.len)) break;
    if (!keep) break;
  }
done:
  free(payload);
  weft_net_buf_free(&out);
  weft_net_session_destroy(s);
  weft_net_conn_close(&nc);
  pthread_mutex_lock(&c.srv->count_lock);
  c.srv->clients--;
  pthread_mutex_unlock(&c.srv->count_lock);
  return NULL;
}

weft_status weft_net_worker_run(const weft_net_worker_desc *desc, char *err, size_t errlen) {
  const char *addr = desc->listen ? desc->listen : "127.0.0.1:7070";
  char host[256], port[32];
  if (!weft_net_split_addr(addr, host, sizeof host, port, sizeof port)) {
    snprintf(err, errlen, "--listen wants HOST:PORT, got '%s'", addr);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int gai = getaddrinfo(host, port, &hints, &ai);
  if (gai) {
    snprintf(err, errlen, "cannot resolve '%s': %s", addr, gai_strerror(gai));
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  if (!weft_net_is_loopback(ai->ai_addr) && !(desc->secret && desc->secret_len)) {
    freeaddrinfo(ai);
    snprintf(err, errlen,
             "refusing to listen on '%s' without a shared secret: anything off loopback needs --secret-file", addr);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  /* Off loopback the frames run inside TLS whatever was asked: the proof alone protects neither their
   * integrity nor their privacy. */
  int loopback = weft_net_is_loopback(ai->ai_addr), tls = desc->tls || !loopback;
  if (tls && !(desc->secret && desc->secret_len)) {
    freeaddrinfo(ai);
    snprintf(err, errlen, "--tls needs --secret-file: the TLS key is derived from the shared secret");
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    snprintf(err, errlen, "cannot listen on '%s': %s", addr, strerror(errno));
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return WEFT_ERR_IO;
  }
  freeaddrinfo(ai);
  struct sockaddr_storage bound;
  socklen_t bl = sizeof bound;
  getsockname(fd, (struct sockaddr *)&bound, &bl);
  int bport = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                 : ((struct sockaddr_in *)&bound)->sin_port);
  weft_net_server *srv = NULL;
  weft_net_worker_desc d = *desc;
  char identity[WEFT_NET_MAX_IDENTITY + 1];
  if (!d.identity) {
    /* The name a client sees proven: this host's name and the port bound, unless one was given. */
    char hn[200] = "";
    if (gethostname(hn, sizeof hn - 1) != 0 || !hn[0]) snprintf(hn, sizeof hn, "weft-worker");
    snprintf(identity, sizeof identity, "%s:%d", hn, bport);
    d.identity = identity;
  }
  weft_status st = weft_net_server_create(&d, &srv, err, errlen);
  if (!st && tls) st = weft_net_tls_create(1, srv->secret, srv->secret_len, &srv->tls, err, errlen);
  if (st) {
    weft_net_server_destroy(srv);
    close(fd);
    return st;
  }
  signal(SIGPIPE, SIG_IGN);
  if (desc->on_listen) desc->on_listen(desc->ctx, host, bport);
  for (;;) {
    int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        if (errno == EMFILE || errno == ENFILE) usleep(10000);
        continue;
      }
      snprintf(err, errlen, "accept failed: %s", strerror(errno));
      break;
    }
    pthread_mutex_lock(&srv->count_lock);
    int full = srv->clients >= srv->max_clients;
    if (!full) srv->clients++;
    pthread_mutex_unlock(&srv->count_lock);
    if (full) {
      /* Say why before closing, so the client's lane reports it rather than a bare disconnect. */
      weft_net_buf b = {0};
      weft_net_header h = {WEFT_NET_MAGIC, WEFT_NET_HELLO, 0, 0, 0};
      reply_error(&b, &h, WEFT_ERR_STATE, "the worker serves its maximum number of clients; try again later");
      set_timeout(cfd, 1000);
      if (b.len) weft_net_send_all(cfd, b.data, b.len);
      weft_net_buf_free(&b);
      close(cfd);
      continue;
    }
    conn *c = malloc(sizeof *c);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (!c || (c->srv = srv, c->fd = cfd, pthread_create(&th, &attr, serve_conn, c) != 0)) {
      free(c);
      close(cfd);
      pthread_mutex_lock(&srv->count_lock);
      srv->clients--;
      pthread_mutex_unlock(&srv->count_lock);
    }
    pthread_attr_destroy(&attr);
  }
  close(fd);
  /* Connections may still be running: the server is left to the process's exit. */
  return WEFT_ERR_IO;
}
