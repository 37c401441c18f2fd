/* client.c - the client half of the wire protocol over a frame transport: what a remote lane (TCP) and a
 * browser lane (WebSocket) share. Every reply is checked before anything in it is trusted: magic, type,
 * request id, the length the header claims against the bytes received, and each reply's own size. */
#include "net/client.h"

#include "core/envnum.h"
#include "core/optable.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A buffer on the peer: a handle of one session. */
typedef struct client_buffer {
  uint64_t handle;
  size_t bytes;
  uint32_t session;
  weft_dtype dtype; /* the handle's dtype on the peer: f32 from CREATE until an op wants it otherwise (RETYPE) */
} client_buffer;

int weft_net_client_timeout_ms(void) {
  long v;
  return weft_env_long("WEFT_REMOTE_TIMEOUT_MS", 1, WEFT_NET_TIMEOUT_MS_MAX, &v) == 1 ? (int)v : 30000;
}

void weft_net_client_begin(weft_net_client *c) {
  c->next_id = 1;
  c->session++;
  c->up = 1;
  c->pending = 0;
  c->max_frame = 1u << 20; /* until the peer's hello says otherwise */
  c->reply = NULL;
  c->reply_len = 0;
}

weft_status weft_net_client_fail(weft_net_client *c, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(c->why, sizeof c->why, "%s", msg);
  if (c->up && c->tp->drop) c->tp->drop(c->tp_ctx, msg);
  c->up = 0;
  c->pending = 0;
  return weft_lane_report(c->host, WEFT_ERR_LANE_FAILED, "%s: %s; the lane is down", c->name, msg);
}

/* Sends one request; its id is *out_id. */
static weft_status send_request(weft_net_client *c, uint16_t type, const uint8_t *payload, size_t len,
                                const uint8_t *tail, size_t tail_len, uint32_t *out_id) {
  if (!c->up)
    return weft_lane_report(c->host, WEFT_ERR_LANE_FAILED, "%s: the connection to its peer is down", c->name);
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  uint32_t id = c->next_id++;
  weft_net_header h = {WEFT_NET_MAGIC, type, 0, id, (uint32_t)(len + tail_len)};
  weft_net_header_encode(&h, hb);
  const uint8_t *piece[3] = {hb, payload, tail};
  const size_t plen[3] = {sizeof hb, len, tail_len};
  char why[256] = "";
  /* The largest reply any request gets is a read of one chunk; an error message is far smaller. */
  size_t max_reply = WEFT_NET_HEADER_BYTES + (size_t)c->max_frame + 64;
  if (c->tp->send(c->tp_ctx, piece, plen, max_reply, why, sizeof why) != WEFT_OK)
    return weft_net_client_fail(c, "its peer stopped answering (%s)", why[0] ? why : "connection lost");
  *out_id = id;
  return WEFT_OK;
}

/* Receives the reply to request `id` of `type` and checks it; leaves the payload in c->reply. */
static weft_status take_reply(weft_net_client *c, uint16_t type, uint32_t id) {
  c->reply = NULL;
  c->reply_len = 0;
  const uint8_t *frame = NULL;
  size_t n = 0;
  char why[256] = "";
  if (c->tp->recv(c->tp_ctx, &frame, &n, why, sizeof why) != WEFT_OK)
    return weft_net_client_fail(c, "its peer stopped answering (%s)", why[0] ? why : "connection lost");
  if (n < WEFT_NET_HEADER_BYTES) return weft_net_client_fail(c, "its peer sent a frame of %zu bytes", n);
  weft_net_header r = {weft_net_get32(frame), weft_net_get16(frame + 4), weft_net_get16(frame + 6),
                       weft_net_get32(frame + 8), weft_net_get32(frame + 12)};
  if (r.magic != WEFT_NET_MAGIC || r.request_id != id || r.type != (type | WEFT_NET_REPLY) ||
      (size_t)r.length != n - WEFT_NET_HEADER_BYTES)
    return weft_net_client_fail(c,
                                "its peer sent a malformed reply (type 0x%x, id %u, %u bytes claimed, %zu received; "
                                "wanted type 0x%x, id %u)",
                                (unsigned)r.type, (unsigned)r.request_id, (unsigned)r.length,
                                n - WEFT_NET_HEADER_BYTES, (unsigned)(type | WEFT_NET_REPLY), (unsigned)id);
  if (r.status) {
    /* The peer's words, bounded and printable: they end up in messages and terminals. */
    char msg[WEFT_NET_MAX_MESSAGE + 1];
    size_t ml = r.length < WEFT_NET_MAX_MESSAGE ? r.length : WEFT_NET_MAX_MESSAGE;
    for (size_t i = 0; i < ml; i++) {
      uint8_t ch = frame[WEFT_NET_HEADER_BYTES + i];
      msg[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    msg[ml] = 0;
    /* The peer's own lane failed: this lane goes down with it, and its connection is not kept. */
    if (r.status == WEFT_ERR_LANE_FAILED) return weft_net_client_fail(c, "its peer's lane failed: %s", msg);
    weft_status st = r.status < 64 ? (weft_status)r.status : WEFT_ERR_INTERNAL;
    snprintf(c->why, sizeof c->why, "it says: %.500s", msg);
    return weft_lane_report(c->host, st, "%s: its peer says: %s", c->name, msg);
  }
  c->reply = frame + WEFT_NET_HEADER_BYTES;
  c->reply_len = r.length;
  return WEFT_OK;
}

weft_status weft_net_client_drain(weft_net_client *c) {
  while (c->pending) {
    uint32_t id = c->first_pending_id++;
    c->pending--;
    weft_status st = take_reply(c, WEFT_NET_OP, id);
    if (st == WEFT_OK && c->reply_len != 4) st = weft_net_client_fail(c, "its peer sent a malformed op reply");
    if (st == WEFT_OK && c->op_ran)
      c->op_ran(c, (weft_op_kind)c->pending_kind[id % WEFT_NET_CLIENT_MAX_PENDING], (int32_t)weft_net_get32(c->reply));
    /* The caller was told the op ran: a failure now can only take the lane down, so the core computes what
     * the op wrote again elsewhere. */
    if (st != WEFT_OK && st != WEFT_ERR_LANE_FAILED)
      st = weft_net_client_fail(c, "an op it had accepted failed (%s)", weft_status_str(st));
    if (st) return st;
  }
  return WEFT_OK;
}

weft_status weft_net_client_call(weft_net_client *c, uint16_t type, const uint8_t *payload, size_t len,
                                 const uint8_t *tail, size_t tail_len) {
  c->reply = NULL;
  c->reply_len = 0;
  uint32_t id = 0;
  weft_status st = weft_net_client_drain(c);
  if (!st) st = send_request(c, type, payload, len, tail, tail_len, &id);
  return st ? st : take_reply(c, type, id);
}

weft_status weft_net_client_hello(weft_net_client *c, weft_net_hello *out) {
  memset(out, 0, sizeof *out);
  uint8_t pl[8];
  weft_net_put32(pl, WEFT_NET_VERSION);
  weft_net_put32(pl + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256 | WEFT_NET_CAP_AUTH_MUTUAL |
                             (c->tp->bulk ? WEFT_NET_CAP_STREAMS : 0));
  c->peer_caps = 0;
  c->have_stream_key = 0;
  c->proven_identity[0] = 0;
  weft_status st = weft_net_client_call(c, WEFT_NET_HELLO, pl, sizeof pl, NULL, 0);
  /* A peer of protocol 1 refuses version 2 with UNSUPPORTED and its own words: say what to do about it. */
  if (st == WEFT_ERR_UNSUPPORTED)
    return weft_net_client_fail(c, "its peer speaks an older protocol; update the peer (weft worker, or reload "
                                "the worker page): it refused protocol %u (%.300s)",
                                (unsigned)WEFT_NET_VERSION, c->why);
  if (st) return st;
  if (c->reply_len != 24 + WEFT_NET_NONCE_BYTES)
    return weft_net_client_fail(c, "its peer's hello reply is %zu bytes, not %u", c->reply_len,
                                (unsigned)(24 + WEFT_NET_NONCE_BYTES));
  out->version = weft_net_get32(c->reply);
  out->caps = weft_net_get32(c->reply + 4);
  out->auth_required = weft_net_get32(c->reply + 8) != 0;
  memcpy(out->nonce, c->reply + 12, WEFT_NET_NONCE_BYTES);
  out->max_frame = weft_net_get32(c->reply + 12 + WEFT_NET_NONCE_BYTES);
  out->max_resident = weft_net_get64(c->reply + 16 + WEFT_NET_NONCE_BYTES);
  c->peer_caps = out->caps;
  if (out->version != WEFT_NET_VERSION)
    return weft_net_client_fail(c, "its peer speaks protocol version %u; this client speaks %u: update the %s",
                                (unsigned)out->version, (unsigned)WEFT_NET_VERSION,
                                out->version < WEFT_NET_VERSION ? "peer" : "client");
  /* The peer's word sizes our receive buffer and our chunks: keep it within what a sane peer would say. */
  c->max_frame = out->max_frame < 4096 ? 4096 : out->max_frame > (1u << 30) ? 1u << 30 : out->max_frame;
  return WEFT_OK;
}

/* A printable copy of an identity for a message: control characters as '?'. */
static void printable(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src);
  for (char *q = dst; *q; q++)
    if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = '?';
}

weft_status weft_net_client_authenticate(weft_net_client *c, const weft_net_hello *hello, const uint8_t *secret,
                                         size_t secret_len, const char *expect_identity, char *identity,
                                         size_t identity_cap) {
  if (identity && identity_cap) identity[0] = 0;
  char pin[WEFT_NET_MAX_IDENTITY + 1] = "";
  if (expect_identity && expect_identity[0]) {
    printable(pin, sizeof pin, expect_identity);
    /* Only the proof of the secret binds an identity: without one, any peer could claim any name. */
    if (!secret_len)
      return weft_net_client_fail(c,
                                  "this client pins the worker's identity to '%.255s' but has no shared secret: "
                                  "a worker proves its identity only with the secret (set "
                                  "WEFT_REMOTE_SECRET_FILE, or drop the pin)",
                                  pin);
  }
  if (!hello->auth_required) {
    /* No downgrade: a worker that asks for nothing proves nothing, and could be anyone. */
    if (secret_len)
      return weft_net_client_fail(c,
                                  "the worker asks for no authentication, but this client has a shared secret: "
                                  "refusing a worker that cannot prove it knows the secret (start the worker with "
                                  "--secret-file, or drop the client's secret)");
    return WEFT_OK;
  }
  if (!secret_len)
    return weft_net_client_fail(c, "the worker requires a shared secret: set WEFT_REMOTE_SECRET_FILE");
  if (!(hello->caps & WEFT_NET_CAP_AUTH_MUTUAL))
    return weft_net_client_fail(c, "the worker does not offer mutual authentication (an older weft worker?): "
                                   "refusing to prove the secret to a worker that will not prove it back");
  uint8_t cn[WEFT_NET_NONCE_BYTES], want[WEFT_NET_MAC_BYTES], mac[WEFT_NET_MAC_BYTES];
  if (RAND_bytes(cn, sizeof cn) != 1) return weft_net_client_fail(c, "could not draw a nonce");
  weft_status st = weft_net_client_call(c, WEFT_NET_AUTH_START, cn, sizeof cn, NULL, 0);
  if (st)
    return st == WEFT_ERR_LANE_FAILED ? st : weft_net_client_fail(c, "the worker refused auth_start (%s)", c->why);
  /* mac[32], u16 len, identity: checked whole before anything in it is used. */
  size_t idlen = c->reply_len >= WEFT_NET_MAC_BYTES + 2 ? weft_net_get16(c->reply + WEFT_NET_MAC_BYTES) : 0;
  if (c->reply_len < WEFT_NET_MAC_BYTES + 2 || idlen > WEFT_NET_MAX_IDENTITY ||
      c->reply_len != WEFT_NET_MAC_BYTES + 2 + idlen)
    return weft_net_client_fail(c, "the worker's auth_start reply is malformed (%zu bytes)", c->reply_len);
  char id[WEFT_NET_MAX_IDENTITY + 1];
  memcpy(id, c->reply + WEFT_NET_MAC_BYTES + 2, idlen);
  id[idlen] = 0;
  if (strlen(id) != idlen) return weft_net_client_fail(c, "the worker's identity holds a NUL byte");
  memcpy(mac, c->reply, sizeof mac);
  /* The worker proves first; the client's own proof (and any tensor) goes only to a worker that did. */
  if (weft_net_auth_proof(WEFT_NET_PROOF_WORKER, secret, secret_len, hello->nonce, cn, id, want))
    return weft_net_client_fail(c, "HMAC failed");
  if (CRYPTO_memcmp(want, mac, sizeof mac) != 0)
    return weft_net_client_fail(c, "the worker's proof of the shared secret is wrong: it does not know this "
                                   "client's secret (a different secret, or not the worker it claims to be)");
  /* The identity is proven now; a pinned one must match byte for byte, before this client proves anything. */
  if (pin[0] && strcmp(id, expect_identity) != 0) {
    char got[WEFT_NET_MAX_IDENTITY + 1];
    printable(got, sizeof got, id);
    return weft_net_client_fail(c,
                                "the worker proved it is '%.255s', but this client expects '%.255s' (the pinned "
                                "identity): refusing it (a different worker that holds the secret, or the pin is "
                                "wrong: see the worker's --identity)",
                                got, pin);
  }
  if (weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, secret, secret_len, hello->nonce, cn, id, mac))
    return weft_net_client_fail(c, "HMAC failed");
  st = weft_net_client_call(c, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, 0);
  if (st)
    return st == WEFT_ERR_LANE_FAILED ? st
                                      : weft_net_client_fail(c, "the worker refused this client's proof (%s)", c->why);
  if (identity && identity_cap) printable(identity, identity_cap, id);
  /* Both ends know the session's stream key now; it never crosses the wire. */
  c->have_stream_key =
      weft_net_stream_key(secret, secret_len, hello->nonce, cn, id, c->stream_key) == WEFT_OK;
  snprintf(c->proven_identity, sizeof c->proven_identity, "%s", id);
  return WEFT_OK;
}

weft_status weft_net_client_streams(weft_net_client *c, uint32_t wanted, uint32_t *granted, uint64_t *session,
                                    uint8_t key[WEFT_NET_KEY_BYTES], char *identity, size_t identity_cap) {
  *granted = 1;
  *session = 0;
  uint8_t pl[4];
  weft_net_put32(pl, wanted);
  weft_status st = weft_net_client_call(c, WEFT_NET_STREAMS, pl, sizeof pl, NULL, 0);
  if (st) return st;
  const uint8_t *r = c->reply;
  size_t idlen = c->reply_len >= WEFT_NET_STREAMS_REPLY_BYTES + 2 ? weft_net_get16(r + WEFT_NET_STREAMS_REPLY_BYTES) : 0;
  if (c->reply_len < WEFT_NET_STREAMS_REPLY_BYTES + 2 || idlen > WEFT_NET_MAX_IDENTITY ||
      c->reply_len != WEFT_NET_STREAMS_REPLY_BYTES + 2 + idlen || idlen >= identity_cap)
    return weft_net_client_fail(c, "its peer's streams reply is malformed (%zu bytes)", c->reply_len);
  uint32_t g = weft_net_get32(r);
  if (g < 1 || g > wanted) return weft_net_client_fail(c, "its peer granted %u streams of %u asked", (unsigned)g, (unsigned)wanted);
  memcpy(identity, r + WEFT_NET_STREAMS_REPLY_BYTES + 2, idlen);
  identity[idlen] = 0;
  if (g == 1) return WEFT_OK;
  *session = weft_net_get64(r + 4);
  if (c->have_stream_key) {
    /* With a secret the key comes from the proof, and the streams name the identity that was proven. */
    if (strcmp(identity, c->proven_identity) != 0)
      return weft_net_client_fail(c, "its peer grants streams as '%.100s' but proved it is '%.100s'", identity,
                                  c->proven_identity);
    memcpy(key, c->stream_key, WEFT_NET_KEY_BYTES);
  } else {
    memcpy(key, r + 12, WEFT_NET_KEY_BYTES);
  }
  *granted = g;
  return WEFT_OK;
}

typedef struct lane_entry {
  weft_contract_mask contracts;
  uint64_t ops;
  char strs[3][256]; /* name, kind, device */
} lane_entry;

weft_status weft_net_client_lanes(weft_net_client *c,
                                  void (*each)(void *ctx, uint32_t index, weft_contract_mask contracts,
                                               uint64_t ops, const char *name, const char *kind,
                                               const char *device),
                                  void *ctx) {
  weft_status st = weft_net_client_call(c, WEFT_NET_LANES, NULL, 0, NULL, 0);
  if (st) return st;
  const uint8_t *list = c->reply;
  size_t n = c->reply_len, p = 4;
  uint32_t count = n >= 4 ? weft_net_get32(list) : 0;
  int ok = n >= 4 && count <= 256;
  /* The whole list is checked before `each` sees any of it: a callback may hand this lane's connection to
   * the fabric (the first lane of a worker), after which nothing here may touch it. */
  lane_entry *e = ok && count ? calloc(count, sizeof *e) : NULL;
  if (ok && count && !e) return weft_lane_report(c->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
  for (uint32_t i = 0; ok && i < count; i++) {
    if (p + 12 > n) {
      ok = 0;
      break;
    }
    e[i].contracts = weft_net_get32(list + p);
    /* Only ops this library knows: a newer peer's bits beyond the table mean nothing here. */
    e[i].ops = weft_net_get64(list + p + 4) & WEFT_OPS_ALL;
    p += 12;
    for (int k = 0; k < 3 && ok; k++) {
      size_t sl = p + 2 <= n ? weft_net_get16(list + p) : 0;
      if (p + 2 > n || sl > 255 || p + 2 + sl > n) {
        ok = 0;
        break;
      }
      memcpy(e[i].strs[k], list + p + 2, sl);
      for (size_t j = 0; j < sl; j++)
        if ((uint8_t)e[i].strs[k][j] < 0x20 || e[i].strs[k][j] == 0x7f) e[i].strs[k][j] = '?';
      p += 2 + sl;
    }
  }
  if (!ok || p != n) {
    free(e);
    return weft_net_client_fail(c, "its peer sent a malformed lanes list (%zu bytes)", n);
  }
  for (uint32_t i = 0; i < count; i++) each(ctx, i, e[i].contracts, e[i].ops, e[i].strs[0], e[i].strs[1], e[i].strs[2]);
  free(e);
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------------ buffers */

/* A buffer of an earlier session names nothing on the current connection. */
static weft_status check_session(weft_net_client *c, const client_buffer *b) {
  if (b->session != c->session || !c->up)
    return weft_lane_report(c->host, WEFT_ERR_LANE_FAILED, "%s: the buffer belongs to a connection that closed",
                            c->name);
  return WEFT_OK;
}

weft_status weft_net_client_buffer_alloc(void *self, size_t bytes, weft_buffer **out) {
  weft_net_client *c = self;
  *out = NULL;
  client_buffer *b = calloc(1, sizeof *b);
  if (!b) return weft_lane_report(c->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
  /* f32 until an op uses it as another dtype (a lane's buffers are untyped; RETYPE in run). */
  uint8_t pl[16];
  weft_net_put32(pl, WEFT_DTYPE_F32);
  weft_net_put32(pl + 4, 1);
  weft_net_put64(pl + 8, (bytes + 3) / 4);
  weft_status st = weft_net_client_call(c, WEFT_NET_CREATE, pl, sizeof pl, NULL, 0);
  if (!st && c->reply_len != 8) st = weft_net_client_fail(c, "its peer sent a malformed create reply");
  if (!st && weft_net_get64(c->reply) == 0) st = weft_net_client_fail(c, "its peer issued handle 0");
  if (st) {
    free(b);
    return st;
  }
  b->handle = weft_net_get64(c->reply);
  b->bytes = bytes;
  b->session = c->session;
  b->dtype = WEFT_DTYPE_F32;
  *out = b;
  return WEFT_OK;
}

void weft_net_client_buffer_free(void *self, weft_buffer *buffer) {
  weft_net_client *c = self;
  client_buffer *b = buffer;
  if (!b) return;
  /* Never a request on a dead connection: freeing must not wait on a peer that is gone. (A FREE waits for
   * the ops still on the wire first, which may use the buffer.) */
  if (c->up && b->session == c->session) {
    uint8_t pl[8];
    weft_net_put64(pl, b->handle);
    weft_net_client_call(c, WEFT_NET_FREE, pl, sizeof pl, NULL, 0);
  }
  free(b);
}

/* Elements per frame, so a large tensor travels in frames under the peer's cap. */
static size_t chunk_elems(const weft_net_client *c) { return (c->max_frame - 64) / 4; }

/* A transfer in frames under the peer's cap: checks the buffer belongs to this session and the range is in
 * whole floats, then gives each frame's (handle, first element, count) header, element offset and count. */
typedef struct chunked {
  size_t first, count, per, done, n;
  uint8_t pl[24];
} chunked;

static weft_status chunked_start(weft_net_client *c, client_buffer *b, size_t offset, size_t bytes, const char *what,
                                 chunked *k) {
  weft_status st = check_session(c, b);
  if (st) return st;
  if (offset % 4 || bytes % 4)
    return weft_lane_report(c->host, WEFT_ERR_INTERNAL, "%s: %s not in whole floats", c->name, what);
  k->first = offset / 4, k->count = bytes / 4, k->per = chunk_elems(c), k->done = 0;
  return WEFT_OK;
}

/* The next frame's header; 0 when the transfer is done. */
static int chunked_next(const client_buffer *b, chunked *k) {
  if (k->done >= k->count) return 0;
  k->n = k->count - k->done < k->per ? k->count - k->done : k->per;
  weft_net_put64(k->pl, b->handle);
  weft_net_put64(k->pl + 8, k->first + k->done);
  weft_net_put64(k->pl + 16, k->n);
  return 1;
}

/* A large transfer through the transport's bulk path (striped over the session's streams when it has any,
 * straight into the destination either way). */
static weft_status bulk(weft_net_client *c, const client_buffer *b, int write, const chunked *k, uint8_t *data) {
  weft_status st = weft_net_client_drain(c);
  if (st) return st;
  weft_net_bulk job = {write, b->handle, k->first, k->count, data, k->per};
  char why[512] = "";
  st = c->tp->bulk(c->tp_ctx, &job, &c->next_id, why, sizeof why);
  if (st == WEFT_OK) return WEFT_OK;
  if (st == WEFT_ERR_LANE_FAILED)
    return weft_net_client_fail(c, "its peer stopped answering a bulk %s (%s)", write ? "write" : "read",
                                why[0] ? why : "connection lost");
  snprintf(c->why, sizeof c->why, "it says: %.500s", why);
  return weft_lane_report(c->host, st, "%s: its peer says: %s", c->name, why);
}

weft_status weft_net_client_upload(void *self, weft_buffer *buffer, size_t offset, const void *src, size_t bytes) {
  weft_net_client *c = self;
  client_buffer *b = buffer;
  chunked k;
  weft_status st = chunked_start(c, b, offset, bytes, "upload", &k);
  if (st) return st;
  if (c->tp->bulk && bytes >= WEFT_NET_BULK_MIN_BYTES) return bulk(c, b, 1, &k, (uint8_t *)(uintptr_t)src);
  for (; chunked_next(b, &k); k.done += k.n) {
    size_t done = k.done, n = k.n;
    st = weft_net_client_call(c, WEFT_NET_WRITE, k.pl, sizeof k.pl, (const uint8_t *)src + done * 4, n * 4);
    if (st) return st;
  }
  return WEFT_OK;
}

weft_status weft_net_client_download(void *self, weft_buffer *buffer, size_t offset, void *dst, size_t bytes) {
  weft_net_client *c = self;
  client_buffer *b = buffer;
  chunked k;
  weft_status st = chunked_start(c, b, offset, bytes, "download", &k);
  if (st) return st;
  if (c->tp->bulk && bytes >= WEFT_NET_BULK_MIN_BYTES) return bulk(c, b, 0, &k, dst);
  for (; chunked_next(b, &k); k.done += k.n) {
    size_t done = k.done, n = k.n;
    st = weft_net_client_call(c, WEFT_NET_READ, k.pl, sizeof k.pl, NULL, 0);
    if (st) return st;
    if (c->reply_len != 8 + n * 4 || weft_net_get64(c->reply) != n)
      return weft_net_client_fail(c, "its peer sent a malformed read reply (%zu bytes for %zu floats)", c->reply_len,
                                  n);
    memcpy((uint8_t *)dst + done * 4, c->reply + 8, n * 4);
  }
  return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------------- ops */

/* Slot k's view: nd dims. */
static void setv(weft_net_request *r, int k, int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  const int64_t d[4] = {d0, d1, d2, d3};
  r->shape_ndim[k] = nd;
  for (int i = 0; i < 4; i++) r->shape_dims[k][i] = i < nd ? d[i] : 0;
}

/* A [rows, cols] operand; an empty one (rows 0) as [0, 1, cols], since only batch dimensions may be 0. */
static void set_rows(weft_net_request *r, int k, int64_t rows, int64_t cols) {
  if (rows) setv(r, k, 2, rows, cols, 0, 0);
  else setv(r, k, 3, 0, 1, cols, 0);
}

/* An [n] operand; an empty one as [0, 1, 1]. */
static void set_vec(weft_net_request *r, int k, int64_t n) {
  if (n) setv(r, k, 1, n, 0, 0, 0);
  else setv(r, k, 3, 0, 1, 1, 0);
}

#define IN(i) WEFT_NET_IN(i)
#define OUT(o) WEFT_NET_OUT(o)

/* The op's operands as shapes and its parameters as weft_op_run takes them, rebuilt from the lane's op (its
 * sizes and kernel parameters): the worker runs it through the public API, which validates them again. */
static int op_views(const weft_op *op, weft_net_request *r) {
  const int64_t *ip = op->iparam;
  int64_t rows = op->rows, cols = op->cols;
  switch (op->kind) {
  case WEFT_OP_MATMUL:
  case WEFT_OP_MATMUL_ACC:
    setv(r, IN(0), 3, op->batch, op->trans_a ? op->k : op->m, op->trans_a ? op->m : op->k, 0);
    if (op->b_batched) setv(r, IN(1), 3, op->batch, op->trans_b ? op->n : op->k, op->trans_b ? op->k : op->n, 0);
    else setv(r, IN(1), 2, op->trans_b ? op->n : op->k, op->trans_b ? op->k : op->n, 0, 0);
    setv(r, OUT(0), 3, op->batch, op->m, op->n, 0);
    r->params.i[0] = op->trans_a != 0, r->params.i[1] = op->trans_b != 0;
    return 1;
  case WEFT_OP_ADD:
    set_rows(r, IN(0), rows, cols);
    if (op->y_broadcast) setv(r, IN(1), 1, cols, 0, 0, 0);
    else set_rows(r, IN(1), rows, cols);
    set_rows(r, OUT(0), rows, cols);
    return 1;
  case WEFT_OP_RELU_BACKWARD:
    set_rows(r, IN(1), rows, cols);
    /* fall through */
  case WEFT_OP_RELU:
  case WEFT_OP_SCALE:
  case WEFT_OP_AXPY:
    set_rows(r, IN(0), rows, cols);
    set_rows(r, OUT(0), rows, cols);
    r->params.f[0] = op->alpha;
    return 1;
  case WEFT_OP_SUM_ROWS:
    set_rows(r, IN(0), rows, cols);
    setv(r, OUT(0), 1, cols, 0, 0, 0);
    return 1;
  case WEFT_OP_SOFTMAX_XENT:
    set_rows(r, IN(0), rows, cols);
    set_rows(r, IN(1), rows, cols);
    setv(r, OUT(0), 1, 1, 0, 0, 0);
    set_rows(r, OUT(1), rows, cols);
    r->params.i[0] = op->iparam[0] != rows ? op->iparam[0] : 0; /* the mean over a larger batch */
    return 1;
  case WEFT_OP_EMBEDDING: /* B, T, C, V, P */
    set_rows(r, IN(0), ip[0], ip[1]);
    set_rows(r, IN(1), ip[0], ip[1]);
    set_rows(r, IN(2), ip[3], ip[2]);
    set_rows(r, IN(3), ip[4], ip[2]);
    setv(r, OUT(0), 3, ip[0], ip[1], ip[2], 0);
    return 1;
  case WEFT_OP_EMBEDDING_BACKWARD:
    setv(r, IN(0), 3, ip[0], ip[1], ip[2], 0);
    set_rows(r, IN(1), ip[0], ip[1]);
    set_rows(r, IN(2), ip[0], ip[1]);
    set_rows(r, OUT(0), ip[3], ip[2]);
    set_rows(r, OUT(1), ip[4], ip[2]);
    return 1;
  case WEFT_OP_LAYERNORM: /* N, C; eps */
    set_rows(r, IN(0), ip[0], ip[1]);
    set_vec(r, IN(1), ip[1]);
    set_vec(r, IN(2), ip[1]);
    set_rows(r, OUT(0), ip[0], ip[1]);
    set_vec(r, OUT(1), ip[0]);
    set_vec(r, OUT(2), ip[0]);
    r->params.f[0] = op->fparam[0];
    return 1;
  case WEFT_OP_LAYERNORM_BACKWARD:
    set_rows(r, IN(0), ip[0], ip[1]);
    set_rows(r, IN(1), ip[0], ip[1]);
    set_vec(r, IN(2), ip[0]);
    set_vec(r, IN(3), ip[0]);
    set_vec(r, IN(4), ip[1]);
    set_rows(r, OUT(0), ip[0], ip[1]);
    set_vec(r, OUT(1), ip[1]);
    set_vec(r, OUT(2), ip[1]);
    return 1;
  case WEFT_OP_GELU:
  case WEFT_OP_GELU_BACKWARD:
    set_vec(r, IN(0), ip[0]);
    set_vec(r, IN(1), ip[0]);
    set_vec(r, OUT(0), ip[0]);
    return 1;
  case WEFT_OP_ATTENTION: /* B, T, C, NH */
    setv(r, IN(0), 3, ip[0], ip[1], 3 * ip[2], 0);
    setv(r, OUT(0), 3, ip[0], ip[1], ip[2], 0);
    setv(r, OUT(1), 4, ip[0], ip[3], ip[1], ip[1]);
    setv(r, OUT(2), 4, ip[0], ip[3], ip[1], ip[1]);
    r->params.i[0] = ip[3];
    return 1;
  case WEFT_OP_ATTENTION_CACHED: /* B, Tmax, C, NH, t0, Tq */
    setv(r, IN(0), 3, ip[0], ip[1], 3 * ip[2], 0);
    setv(r, OUT(0), 3, ip[0], ip[5], ip[2], 0);
    setv(r, OUT(1), 4, ip[0], ip[3], ip[5], ip[1]);
    r->params.i[0] = ip[3], r->params.i[1] = ip[4];
    return 1;
  case WEFT_OP_ATTENTION_BACKWARD:
    setv(r, IN(0), 3, ip[0], ip[1], ip[2], 0);
    setv(r, IN(1), 3, ip[0], ip[1], 3 * ip[2], 0);
    setv(r, IN(2), 4, ip[0], ip[3], ip[1], ip[1]);
    setv(r, OUT(0), 3, ip[0], ip[1], 3 * ip[2], 0);
    r->params.i[0] = ip[3];
    return 1;
  case WEFT_OP_CAUSAL_SOFTMAX: /* R, T; scale */
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD:
    setv(r, IN(0), 3, ip[0], ip[1], ip[1], 0);
    setv(r, IN(1), 3, ip[0], ip[1], ip[1], 0);
    setv(r, OUT(0), 3, ip[0], ip[1], ip[1], 0);
    r->params.f[0] = op->fparam[0];
    return 1;
  case WEFT_OP_CROSSENTROPY: /* N, V */
  case WEFT_OP_CROSSENTROPY_BACKWARD:
    set_rows(r, IN(0), ip[0], ip[1]);
    set_vec(r, IN(1), ip[0]);
    set_vec(r, IN(2), ip[0]);
    if (op->kind == WEFT_OP_CROSSENTROPY) set_vec(r, OUT(0), ip[0]);
    else set_rows(r, OUT(0), ip[0], ip[1]);
    return 1;
  case WEFT_OP_ADAMW: /* n; lr, b1, b2, eps, wd, bc1, bc2 */
    set_vec(r, IN(0), ip[0]);
    for (int o = 0; o < 3; o++) set_vec(r, OUT(o), ip[0]);
    for (int i = 0; i < 7; i++) r->params.f[i] = op->fparam[i];
    return 1;
  case WEFT_OP_SUMSQ:
    set_vec(r, IN(0), ip[0]);
    setv(r, OUT(0), 1, 1, 0, 0, 0);
    return 1;
  case WEFT_OP_PERMUTE: { /* rank, x's dims, perm packed */
    int rank = (int)ip[0];
    if (rank < 1 || rank > 4) return 0;
    int64_t xd[4] = {ip[1], ip[2], ip[3], ip[4]}, yd[4] = {1, 1, 1, 1};
    for (int a = 0; a < rank; a++) {
      int p = (int)((ip[5] >> (2 * a)) & 3);
      yd[a] = xd[p];
      r->params.i[a] = p;
    }
    setv(r, IN(0), rank, xd[0], xd[1], xd[2], xd[3]);
    setv(r, OUT(0), rank, yd[0], yd[1], yd[2], yd[3]);
    return 1;
  }
  case WEFT_OP_COPY_SLICE: /* outer, src_len, dst_len, inner, offset: rank 4 so outer and the lengths may be 0 */
    setv(r, IN(0), 4, ip[0], ip[1], 1, ip[3]);
    setv(r, OUT(0), 4, ip[0], ip[2], 1, ip[3]);
    r->params.i[0] = 1, r->params.i[1] = ip[4];
    return 1;
  default: return 0;
  }
}

#undef IN
#undef OUT

weft_status weft_net_client_run(void *self, const weft_op *op) {
  weft_net_client *c = self;
  if ((unsigned)op->kind >= WEFT_OP_COUNT)
    return weft_lane_report(c->host, WEFT_ERR_UNSUPPORTED, "%s: op %d unknown", c->name, (int)op->kind);
  const weft_optable_entry *e = &weft_optable[op->kind];
  weft_net_request r;
  memset(&r, 0, sizeof r);
  r.type = WEFT_NET_OP;
  r.op = op->kind;
  r.contract = op->contract;
  r.lane = c->peer_routes & WEFT_OP_BIT(op->kind) ? -1 : c->peer_lane;
  r.nin = e->nin;
  r.nout = e->nout;
  if (!op_views(op, &r)) return weft_lane_report(c->host, WEFT_ERR_UNSUPPORTED, "%s: op %s cannot be sent", c->name, e->name);
  for (int k = 0; k < e->nin + e->nout; k++) {
    int in = k < e->nin, i = in ? k : k - e->nin, at = in ? WEFT_NET_IN(i) : WEFT_NET_OUT(i);
    client_buffer *b = in ? op->in[i] : op->out[i];
    if (!b) {
      r.shape_ndim[at] = 0;
      continue;
    }
    weft_status st = check_session(c, b);
    if (st) return st;
    r.handles[at] = b->handle;
    /* The peer checks each handle's dtype against the op table: a buffer the op uses as another dtype than
     * the peer holds it in is relabelled first (its bits unchanged). */
    weft_dtype want = in ? op->in_dtype[i] : op->out_dtype[i];
    if ((unsigned)want >= WEFT_DTYPE_COUNT) want = WEFT_DTYPE_F32;
    if (b->dtype != want) {
      uint8_t pl[12];
      weft_net_put64(pl, b->handle);
      weft_net_put32(pl + 8, (uint32_t)want);
      st = weft_net_client_call(c, WEFT_NET_RETYPE, pl, sizeof pl, NULL, 0);
      if (st) return st == WEFT_ERR_LANE_FAILED ? st : weft_net_client_fail(c, "its peer refused retype (%s)", c->why);
      b->dtype = want;
    }
  }
  uint8_t pl[WEFT_NET_OP_MAX_BYTES];
  size_t len = weft_net_op_encode(&r, pl);
  if (c->pipeline) {
    weft_status st = c->pending >= WEFT_NET_CLIENT_MAX_PENDING ? weft_net_client_drain(c) : WEFT_OK;
    uint32_t id = 0;
    if (!st) st = send_request(c, WEFT_NET_OP, pl, len, NULL, 0, &id);
    if (st) return st;
    if (!c->pending) c->first_pending_id = id;
    c->pending++;
    c->pending_kind[id % WEFT_NET_CLIENT_MAX_PENDING] = (uint8_t)op->kind;
    return WEFT_OK;
  }
  weft_status st = weft_net_client_call(c, WEFT_NET_OP, pl, len, NULL, 0);
  if (!st && c->reply_len != 4) st = weft_net_client_fail(c, "its peer sent a malformed op reply");
  if (!st && c->op_ran) c->op_ran(c, op->kind, (int32_t)weft_net_get32(c->reply));
  return st;
}

weft_status weft_net_client_sync(void *self) { return weft_net_client_drain(self); }
