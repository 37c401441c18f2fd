/* protocol.c - the wire protocol's pure parts: header and request decoding against the hard caps, shape
 * checks, and the authentication proof (HMAC-SHA256 from libcrypto). Nothing here touches a socket or a
 * fabric, so the fuzzer drives it directly. */
#include "net/protocol.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "core/optable.h"

static weft_status fail(char *err, size_t errlen, weft_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static weft_status fail(char *err, size_t errlen, weft_status st, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return st;
}

void weft_net_header_encode(const weft_net_header *h, uint8_t out[WEFT_NET_HEADER_BYTES]) {
  weft_net_put32(out, h->magic);
  weft_net_put16(out + 4, h->type);
  weft_net_put16(out + 6, h->status);
  weft_net_put32(out + 8, h->request_id);
  weft_net_put32(out + 12, h->length);
}

weft_status weft_net_header_decode(const uint8_t in[WEFT_NET_HEADER_BYTES], const weft_net_limits *limits,
                                   weft_net_header *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  out->magic = weft_net_get32(in);
  out->type = weft_net_get16(in + 4);
  out->status = weft_net_get16(in + 6);
  out->request_id = weft_net_get32(in + 8);
  out->length = weft_net_get32(in + 12);
  if (out->magic != WEFT_NET_MAGIC)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "bad frame magic 0x%08x (want 0x%08x): not a weft peer",
                (unsigned)out->magic, (unsigned)WEFT_NET_MAGIC);
  if (out->type == 0 || out->type >= WEFT_NET_TYPE_END)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "unknown request type %u", (unsigned)out->type);
  if (out->length > limits->max_frame)
    return fail(err, errlen, WEFT_ERR_OVERFLOW, "frame payload of %u bytes exceeds this connection's cap of %u",
                (unsigned)out->length, (unsigned)limits->max_frame);
  return WEFT_OK;
}

weft_status weft_net_shape_check(int ndim, const int64_t *dims, uint64_t *out_numel, char *err, size_t errlen) {
  *out_numel = 0;
  if (ndim < 1 || ndim > WEFT_NET_MAX_RANK)
    return fail(err, errlen, WEFT_ERR_SHAPE, "rank %d; a tensor has 1 to %d dimensions", ndim, WEFT_NET_MAX_RANK);
  uint64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    int batch_dim = ndim >= 3 && d < ndim - 2;
    if (dims[d] < 0 || (dims[d] == 0 && !batch_dim))
      return fail(err, errlen, WEFT_ERR_SHAPE,
                  "dimension %d is %lld; dimensions must be >= 1 (only batch dimensions may be 0)", d,
                  (long long)dims[d]);
    if (dims[d] > WEFT_NET_MAX_DIM)
      return fail(err, errlen, WEFT_ERR_OVERFLOW, "dimension %d is %lld; the cap is %lld", d, (long long)dims[d],
                  (long long)WEFT_NET_MAX_DIM);
    /* Empty batches count as 1 for the cap: the matrix behind them must still be describable. */
    if (__builtin_mul_overflow(numel, dims[d] ? (uint64_t)dims[d] : 1u, &numel) || numel > WEFT_NET_MAX_ELEMENTS)
      return fail(err, errlen, WEFT_ERR_OVERFLOW, "the element count passes the cap of %llu at dimension %d",
                  (unsigned long long)WEFT_NET_MAX_ELEMENTS, d);
  }
  uint64_t real = 1;
  for (int d = 0; d < ndim; d++) real *= (uint64_t)dims[d];
  *out_numel = real;
  return WEFT_OK;
}

static weft_status want_len(size_t len, size_t want, const char *what, char *err, size_t errlen) {
  if (len != want)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s payload is %zu bytes; it must be exactly %zu", what, len,
                want);
  return WEFT_OK;
}

weft_status weft_net_request_decode(uint16_t type, const uint8_t *payload, size_t len,
                                    const weft_net_limits *limits, weft_net_request *out, char *err,
                                    size_t errlen) {
  memset(out, 0, sizeof *out);
  if (len > limits->max_frame)
    return fail(err, errlen, WEFT_ERR_OVERFLOW, "payload of %zu bytes exceeds the cap of %u", len,
                (unsigned)limits->max_frame);
  if (len && !payload) return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "payload missing");
  out->type = (weft_net_type)type;
  weft_status st;
  switch (type) {
  case WEFT_NET_HELLO:
    if ((st = want_len(len, 8, "hello", err, errlen))) return st;
    out->version = weft_net_get32(payload);
    out->caps = weft_net_get32(payload + 4);
    return WEFT_OK;
  case WEFT_NET_AUTH:
  case WEFT_NET_AUTH_FINISH:
    if ((st = want_len(len, WEFT_NET_MAC_BYTES, type == WEFT_NET_AUTH ? "auth" : "auth_finish", err, errlen)))
      return st;
    out->mac = payload;
    return WEFT_OK;
  case WEFT_NET_AUTH_START:
    if ((st = want_len(len, WEFT_NET_NONCE_BYTES, "auth_start", err, errlen))) return st;
    out->nonce = payload;
    return WEFT_OK;
  case WEFT_NET_LANES: return want_len(len, 0, "lanes", err, errlen);
  case WEFT_NET_STREAMS:
    if ((st = want_len(len, 4, "streams", err, errlen))) return st;
    out->streams = weft_net_get32(payload);
    if (out->streams < 2 || out->streams > 255)
      return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "streams asks for %u connections; 2 to 255",
                  (unsigned)out->streams);
    return WEFT_OK;
  case WEFT_NET_JOIN:
    if ((st = want_len(len, WEFT_NET_JOIN_BYTES, "join", err, errlen))) return st;
    out->session = weft_net_get64(payload);
    out->streams = weft_net_get32(payload + 8);
    out->mac = payload + 12;
    return WEFT_OK;
  case WEFT_NET_CREATE: {
    if (len < 8) return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "create payload of %zu bytes is truncated", len);
    uint32_t dtype = weft_net_get32(payload), ndim = weft_net_get32(payload + 4);
    if (dtype >= WEFT_DTYPE_COUNT)
      return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "dtype %u is unknown (0 = f32, 1 = i32)", (unsigned)dtype);
    if (ndim < 1 || ndim > WEFT_NET_MAX_RANK)
      return fail(err, errlen, WEFT_ERR_SHAPE, "rank %u; a tensor has 1 to %d dimensions", (unsigned)ndim,
                  WEFT_NET_MAX_RANK);
    if ((st = want_len(len, 8 + 8 * (size_t)ndim, "create", err, errlen))) return st;
    out->dtype = (weft_dtype)dtype;
    out->ndim = (int)ndim;
    for (uint32_t d = 0; d < ndim; d++) out->dims[d] = (int64_t)weft_net_get64(payload + 8 + 8 * d);
    if ((st = weft_net_shape_check(out->ndim, out->dims, &out->numel, err, errlen))) return st;
    if (out->numel * 4 > limits->max_resident)
      return fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "a tensor of %llu bytes exceeds the resident cap of %llu",
                  (unsigned long long)(out->numel * 4), (unsigned long long)limits->max_resident);
    return WEFT_OK;
  }
  case WEFT_NET_RETYPE: {
    if ((st = want_len(len, 12, "retype", err, errlen))) return st;
    out->handle = weft_net_get64(payload);
    uint32_t dtype = weft_net_get32(payload + 8);
    if (dtype >= WEFT_DTYPE_COUNT)
      return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "dtype %u is unknown (0 = f32, 1 = i32)", (unsigned)dtype);
    out->dtype = (weft_dtype)dtype;
    return WEFT_OK;
  }
  case WEFT_NET_WRITE: {
    if (len < 24) return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "write payload of %zu bytes is truncated", len);
    out->handle = weft_net_get64(payload);
    out->offset = weft_net_get64(payload + 8);
    out->numel = weft_net_get64(payload + 16);
    /* The count is the peer's claim: check it against the bytes actually present, never the other way. */
    if (out->numel > WEFT_NET_MAX_ELEMENTS || out->numel * 4 != len - 24)
      return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                  "write claims %llu elements but carries %zu bytes of data", (unsigned long long)out->numel, len - 24);
    if (out->offset > WEFT_NET_MAX_ELEMENTS)
      return fail(err, errlen, WEFT_ERR_SHAPE, "write offset %llu is beyond any tensor",
                  (unsigned long long)out->offset);
    out->data = payload + 24;
    return WEFT_OK;
  }
  case WEFT_NET_READ:
    if ((st = want_len(len, 24, "read", err, errlen))) return st;
    out->handle = weft_net_get64(payload);
    out->offset = weft_net_get64(payload + 8);
    out->numel = weft_net_get64(payload + 16);
    if (out->offset > WEFT_NET_MAX_ELEMENTS || out->numel > WEFT_NET_MAX_ELEMENTS)
      return fail(err, errlen, WEFT_ERR_SHAPE, "read of %llu elements at %llu is beyond any tensor",
                  (unsigned long long)out->numel, (unsigned long long)out->offset);
    if (out->numel * 4 + 8 > limits->max_frame)
      return fail(err, errlen, WEFT_ERR_OVERFLOW, "a read of %llu elements would not fit one frame (cap %u bytes)",
                  (unsigned long long)out->numel, (unsigned)limits->max_frame);
    return WEFT_OK;
  case WEFT_NET_FREE:
    if ((st = want_len(len, 8, "free", err, errlen))) return st;
    out->handle = weft_net_get64(payload);
    return WEFT_OK;
  case WEFT_NET_OP: {
    if (len < WEFT_NET_OP_HEAD_BYTES)
      return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "op payload of %zu bytes is truncated", len);
    uint32_t kind = weft_net_get32(payload), contract = weft_net_get32(payload + 4);
    /* The allow-list is the op table: every op the library has, nothing else. */
    if (kind >= WEFT_OP_COUNT)
      return fail(err, errlen, WEFT_ERR_UNSUPPORTED, "op kind %u is not on the allow-list (0..%d)", (unsigned)kind,
                  WEFT_OP_COUNT - 1);
    if (contract >= WEFT_CONTRACT_COUNT)
      return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "contract %u is unknown", (unsigned)contract);
    const weft_optable_entry *e = &weft_optable[kind];
    out->op = (weft_op_kind)kind;
    out->contract = (weft_contract)contract;
    out->lane = (int32_t)weft_net_get32(payload + 8);
    out->flags = weft_net_get32(payload + 12);
    if (out->flags)
      return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "op flags 0x%x: no flag is defined (parameters carry "
                  "trans_a, trans_b, alpha)", (unsigned)out->flags);
    out->nin = payload[16];
    out->nout = payload[17];
    if (weft_net_get16(payload + 18))
      return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "op bytes 18-19 are reserved and must be 0");
    if (out->nin > e->nin || out->nout > e->nout)
      return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s takes %d inputs and %d outputs; the op names %d and %d",
                  e->name, e->nin, e->nout, out->nin, out->nout);
    if ((st = want_len(len, WEFT_NET_OP_BYTES(out->nin, out->nout), "op", err, errlen))) return st;
    const uint8_t *q = payload + WEFT_NET_OP_HEAD_BYTES;
    for (int k = 0; k < out->nin + out->nout; k++, q += WEFT_NET_OP_ENTRY_BYTES) {
      int s = k < out->nin ? WEFT_NET_IN(k) : WEFT_NET_OUT(k - out->nin);
      out->handles[s] = weft_net_get64(q);
      uint32_t nd = weft_net_get32(q + 8);
      if (nd == 0) continue;
      if (nd > WEFT_NET_MAX_RANK)
        return fail(err, errlen, WEFT_ERR_SHAPE, "operand %d's view has rank %u; at most %d", k, (unsigned)nd,
                    WEFT_NET_MAX_RANK);
      out->shape_ndim[s] = (int)nd;
      for (uint32_t d = 0; d < nd; d++) out->shape_dims[s][d] = (int64_t)weft_net_get64(q + 12 + 8 * d);
      if ((st = weft_net_shape_check(out->shape_ndim[s], out->shape_dims[s], &out->shape_numel[s], err, errlen)))
        return st;
    }
    /* The parameters are the op's own business: the table's validator checks them (weft_op_run). */
    for (int i = 0; i < 8; i++) out->params.i[i] = (int64_t)weft_net_get64(q + 8 * i);
    for (int i = 0; i < 8; i++) {
      uint32_t b = weft_net_get32(q + 64 + 4 * i);
      memcpy(&out->params.f[i], &b, 4);
    }
    return WEFT_OK;
  }
  default: return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "unknown request type %u", (unsigned)type);
  }
}

size_t weft_net_op_encode(const weft_net_request *r, uint8_t *out) {
  size_t len = WEFT_NET_OP_BYTES(r->nin, r->nout);
  memset(out, 0, len);
  weft_net_put32(out, (uint32_t)r->op);
  weft_net_put32(out + 4, (uint32_t)r->contract);
  weft_net_put32(out + 8, (uint32_t)r->lane);
  weft_net_put32(out + 12, r->flags);
  out[16] = (uint8_t)r->nin;
  out[17] = (uint8_t)r->nout;
  uint8_t *q = out + WEFT_NET_OP_HEAD_BYTES;
  for (int k = 0; k < r->nin + r->nout; k++, q += WEFT_NET_OP_ENTRY_BYTES) {
    int s = k < r->nin ? WEFT_NET_IN(k) : WEFT_NET_OUT(k - r->nin);
    weft_net_put64(q, r->handles[s]);
    weft_net_put32(q + 8, (uint32_t)r->shape_ndim[s]);
    for (int d = 0; d < r->shape_ndim[s] && d < WEFT_NET_MAX_RANK; d++)
      weft_net_put64(q + 12 + 8 * d, (uint64_t)r->shape_dims[s][d]);
  }
  for (int i = 0; i < 8; i++) weft_net_put64(q + 8 * i, (uint64_t)r->params.i[i]);
  for (int i = 0; i < 8; i++) {
    uint32_t b;
    memcpy(&b, &r->params.f[i], 4);
    weft_net_put32(q + 64 + 4 * i, b);
  }
  return len;
}

long weft_net_handshake_len(uint16_t type) {
  /* Must agree with weft_net_request_decode's sizes for these types. */
  switch (type) {
  case WEFT_NET_HELLO: return 8;
  case WEFT_NET_AUTH_START: return WEFT_NET_NONCE_BYTES;
  case WEFT_NET_AUTH_FINISH: return WEFT_NET_MAC_BYTES;
  case WEFT_NET_JOIN: return WEFT_NET_JOIN_BYTES;
  default: return -1;
  }
}

weft_status weft_net_auth_mac(const uint8_t *secret, size_t secret_len, const uint8_t nonce[WEFT_NET_NONCE_BYTES],
                              uint8_t out[WEFT_NET_MAC_BYTES]) {
  static const char label[] = "weft-auth-v1";
  uint8_t msg[sizeof label - 1 + WEFT_NET_NONCE_BYTES];
  memcpy(msg, label, sizeof label - 1);
  memcpy(msg + sizeof label - 1, nonce, WEFT_NET_NONCE_BYTES);
  unsigned int n = 0;
  if (!HMAC(EVP_sha256(), secret, (int)secret_len, msg, sizeof msg, out, &n) || n != WEFT_NET_MAC_BYTES)
    return WEFT_ERR_INTERNAL;
  return WEFT_OK;
}

weft_status weft_net_auth_proof(weft_net_proof which, const uint8_t *secret, size_t secret_len,
                                const uint8_t worker_nonce[WEFT_NET_NONCE_BYTES],
                                const uint8_t client_nonce[WEFT_NET_NONCE_BYTES], const char *identity,
                                uint8_t out[WEFT_NET_MAC_BYTES]) {
  /* Each label with its NUL: no label is a prefix of another, so no message of one domain is one of another. */
  static const char client_label[] = WEFT_NET_LABEL_CLIENT_PROOF, worker_label[] = WEFT_NET_LABEL_WORKER_PROOF;
  _Static_assert(sizeof client_label == sizeof worker_label, "labels of one length");
  size_t idlen = identity ? strnlen(identity, WEFT_NET_MAX_IDENTITY + 1) : 0;
  if (idlen > WEFT_NET_MAX_IDENTITY) return WEFT_ERR_INVALID_ARGUMENT;
  uint8_t msg[sizeof client_label + 2 * WEFT_NET_NONCE_BYTES + 2 + WEFT_NET_MAX_IDENTITY];
  int client = which == WEFT_NET_PROOF_CLIENT;
  size_t n = sizeof client_label;
  memcpy(msg, client ? client_label : worker_label, n);
  /* The receiver's nonce first: each side's proof answers the other side's challenge. */
  memcpy(msg + n, client ? worker_nonce : client_nonce, WEFT_NET_NONCE_BYTES);
  memcpy(msg + n + WEFT_NET_NONCE_BYTES, client ? client_nonce : worker_nonce, WEFT_NET_NONCE_BYTES);
  n += 2 * WEFT_NET_NONCE_BYTES;
  weft_net_put16(msg + n, (uint16_t)idlen);
  if (idlen) memcpy(msg + n + 2, identity, idlen);
  n += 2 + idlen;
  unsigned int mlen = 0;
  if (!HMAC(EVP_sha256(), secret, (int)secret_len, msg, n, out, &mlen) || mlen != WEFT_NET_MAC_BYTES)
    return WEFT_ERR_INTERNAL;
  return WEFT_OK;
}

/* label (with its NUL) || body || u16 len || identity, MACed with key. */
static weft_status labelled_mac(const uint8_t *key, size_t key_len, const char *label, size_t label_size,
                                const uint8_t *body, size_t body_len, const char *identity, uint8_t out[32]) {
  size_t idlen = identity ? strnlen(identity, WEFT_NET_MAX_IDENTITY + 1) : 0;
  if (idlen > WEFT_NET_MAX_IDENTITY || label_size + body_len > 96) return WEFT_ERR_INVALID_ARGUMENT;
  uint8_t msg[96 + 2 + WEFT_NET_MAX_IDENTITY];
  memcpy(msg, label, label_size);
  memcpy(msg + label_size, body, body_len);
  size_t n = label_size + body_len;
  weft_net_put16(msg + n, (uint16_t)idlen);
  if (idlen) memcpy(msg + n + 2, identity, idlen);
  n += 2 + idlen;
  unsigned int mlen = 0;
  if (!HMAC(EVP_sha256(), key, (int)key_len, msg, n, out, &mlen) || mlen != WEFT_NET_MAC_BYTES)
    return WEFT_ERR_INTERNAL;
  return WEFT_OK;
}

weft_status weft_net_stream_key(const uint8_t *secret, size_t secret_len,
                                const uint8_t worker_nonce[WEFT_NET_NONCE_BYTES],
                                const uint8_t client_nonce[WEFT_NET_NONCE_BYTES], const char *identity,
                                uint8_t out[WEFT_NET_KEY_BYTES]) {
  static const char label[] = WEFT_NET_LABEL_STREAM_KEY;
  uint8_t body[2 * WEFT_NET_NONCE_BYTES];
  memcpy(body, worker_nonce, WEFT_NET_NONCE_BYTES);
  memcpy(body + WEFT_NET_NONCE_BYTES, client_nonce, WEFT_NET_NONCE_BYTES);
  return labelled_mac(secret, secret_len, label, sizeof label, body, sizeof body, identity, out);
}

weft_status weft_net_join_proof(const uint8_t key[WEFT_NET_KEY_BYTES], uint64_t session, uint32_t index,
                                const char *identity, uint8_t out[WEFT_NET_MAC_BYTES]) {
  static const char label[] = WEFT_NET_LABEL_STREAM_JOIN;
  uint8_t body[12];
  weft_net_put64(body, session);
  weft_net_put32(body + 8, index);
  return labelled_mac(key, WEFT_NET_KEY_BYTES, label, sizeof label, body, sizeof body, identity, out);
}

weft_status weft_net_tab_mac(const uint8_t *secret, size_t secret_len, const uint8_t nonce[WEFT_NET_NONCE_BYTES],
                             const char *server, uint8_t out[WEFT_NET_MAC_BYTES]) {
  static const char label[] = "weft-v1 tab->fabric";
  size_t sl = strlen(server);
  if (sl > 1024) return WEFT_ERR_INVALID_ARGUMENT;
  uint8_t msg[sizeof label - 1 + WEFT_NET_NONCE_BYTES + 1024];
  memcpy(msg, label, sizeof label - 1);
  memcpy(msg + sizeof label - 1, nonce, WEFT_NET_NONCE_BYTES);
  memcpy(msg + sizeof label - 1 + WEFT_NET_NONCE_BYTES, server, sl);
  unsigned int n = 0;
  if (!HMAC(EVP_sha256(), secret, (int)secret_len, msg, sizeof label - 1 + WEFT_NET_NONCE_BYTES + sl, out, &n) ||
      n != WEFT_NET_MAC_BYTES)
    return WEFT_ERR_INTERNAL;
  return WEFT_OK;
}

weft_status weft_net_read_secret(const char *path, uint8_t *out, size_t cap, size_t *out_len, char *err,
                                 size_t errlen) {
  *out_len = 0;
  FILE *fp = fopen(path, "rb");
  if (!fp) return fail(err, errlen, WEFT_ERR_IO, "cannot open the secret file '%s': %s", path, strerror(errno));
  size_t n = fread(out, 1, cap, fp);
  int more = fgetc(fp) != EOF;
  const int bad = ferror(fp), why = errno; /* a directory opens, then fails to read (EISDIR) */
  fclose(fp);
  if (bad) return fail(err, errlen, WEFT_ERR_IO, "cannot read the secret file '%s': %s", path, strerror(why));
  if (more) return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "the secret file '%s' is over %zu bytes", path, cap);
  while (n && (out[n - 1] == '\n' || out[n - 1] == '\r')) n--;
  if (n < 16)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "the secret in '%s' is %zu bytes; use at least 16 (e.g. head -c 32 /dev/urandom | base64)", path, n);
  *out_len = n;
  return WEFT_OK;
}

int weft_net_send_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    p += k;
    n -= (size_t)k;
  }
  return 1;
}

int weft_net_recv_all(int fd, uint8_t *p, size_t n) {
  while (n) {
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    p += k;
    n -= (size_t)k;
  }
  return 1;
}

uint32_t weft_net_default_streams(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1u : n > 8 ? 8u : (uint32_t)n;
}

int weft_net_split_addr(const char *addr, char *host, size_t hl, char *port, size_t pl) {
  const char *colon = strrchr(addr, ':');
  if (!colon || colon == addr || !colon[1]) return 0;
  size_t n = (size_t)(colon - addr);
  if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']') {
    addr++;
    n -= 2;
  }
  if (n >= hl || strlen(colon + 1) >= pl) return 0;
  memcpy(host, addr, n);
  host[n] = 0;
  snprintf(port, pl, "%s", colon + 1);
  return 1;
}

int weft_net_is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
  return 0;
}
