/* remote_lane.c - lanes of another machine, served by `weft worker` (docs/PROTOCOL.md): one lane per lane
 * the worker offers, named remote:<host:port>/<lane>, one connection each. Buffers are worker-side
 * tensors named by handles; each op sends the shapes it needs as views. A worker that dies or stalls
 * (socket timeouts) makes the lane return WEFT_ERR_LANE_FAILED, so the core takes the lane out and
 * re-routes the op. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/protocol.h"
#include "weft_lane.h"

typedef struct remote_lane {
  const weft_lane_host *host;
  int fd; /* -1 once the connection broke */
  uint32_t next_id;
  uint32_t max_frame;
  int32_t worker_lane;
  weft_contract_mask contracts;
  char addr[128];
  char worker_lane_name[128]; /* the lane's name on the worker: a restarted worker must still offer it */
  char name[256];
  char device[160];
  char details[256];
  uint8_t *scratch;
  size_t scratch_cap;
} remote_lane;

typedef struct remote_buffer {
  uint64_t handle;
  size_t bytes;
} remote_buffer;

static int timeout_ms(void) {
  const char *e = getenv("WEFT_REMOTE_TIMEOUT_MS");
  long v = e ? strtol(e, NULL, 10) : 0;
  return v > 0 && v < 3600000 ? (int)v : 30000;
}

/* Header, payload and tail in one sendmsg where the kernel takes them whole: a small request is one
 * segment on the wire, not three (each a wakeup on the worker). */
static int send_frame(int fd, const uint8_t *hb, const uint8_t *a, size_t al, const uint8_t *b, size_t bl) {
  struct iovec iov[3] = {{(void *)hb, WEFT_NET_HEADER_BYTES}, {(void *)a, al}, {(void *)b, bl}};
  size_t total = WEFT_NET_HEADER_BYTES + al + bl;
  struct msghdr m = {0};
  m.msg_iov = iov;
  m.msg_iovlen = 3;
  ssize_t k;
  while ((k = sendmsg(fd, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  if (k < 0) return 0;
  if ((size_t)k == total) return 1;
  /* A partial send: finish piece by piece. */
  size_t done = (size_t)k;
  for (int i = 0; i < 3; i++) {
    size_t n = iov[i].iov_len;
    if (done >= n) {
      done -= n;
      continue;
    }
    if (!weft_net_send_all(fd, (const uint8_t *)iov[i].iov_base + done, n - done)) return 0;
    done = 0;
  }
  return 1;
}

static int dial(const char *addr, int ms) {
  char host[128], port[16];
  const char *colon = strrchr(addr, ':');
  if (!colon || (size_t)(colon - addr) >= sizeof host || strlen(colon + 1) >= sizeof port) return -1;
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = 0;
  snprintf(port, sizeof port, "%s", colon + 1);
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, port, &hints, &ai) || !ai) return -1;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    /* On Linux SO_SNDTIMEO also bounds connect(). */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  return fd;
}

/* One request, one reply. Returns the reply's status; a transport failure marks the lane broken and is
 * WEFT_ERR_LANE_FAILED. The reply payload is left in l->scratch (len in *out_len). */
static weft_status call(remote_lane *l, uint16_t type, const uint8_t *payload, size_t len, const uint8_t *tail,
                        size_t tail_len, size_t *out_len) {
  if (out_len) *out_len = 0;
  if (l->fd < 0) return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: the connection to the worker is down", l->name);
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  uint32_t id = l->next_id++;
  weft_net_header h = {WEFT_NET_MAGIC, type, 0, id, (uint32_t)(len + tail_len)};
  weft_net_header_encode(&h, hb);
  weft_net_header r;
  if (!send_frame(l->fd, hb, payload, len, tail, tail_len) || !weft_net_recv_all(l->fd, hb, sizeof hb)) goto broken;
  r.magic = weft_net_get32(hb);
  r.type = weft_net_get16(hb + 4);
  r.status = weft_net_get16(hb + 6);
  r.request_id = weft_net_get32(hb + 8);
  r.length = weft_net_get32(hb + 12);
  if (r.magic != WEFT_NET_MAGIC || r.request_id != id || r.type != (type | WEFT_NET_REPLY) ||
      r.length > (size_t)l->max_frame + 64)
    goto broken;
  if (r.length + 1 > l->scratch_cap) {
    uint8_t *p = realloc(l->scratch, r.length + 1);
    if (!p) goto broken;
    l->scratch = p;
    l->scratch_cap = r.length + 1;
  }
  if (!weft_net_recv_all(l->fd, l->scratch, r.length)) goto broken;
  l->scratch[r.length] = 0;
  if (out_len) *out_len = r.length;
  if (r.status) {
    weft_status st = r.status < 64 ? (weft_status)r.status : WEFT_ERR_INTERNAL;
    return weft_lane_report(l->host, st, "%s: the worker says: %s", l->name, (const char *)l->scratch);
  }
  return WEFT_OK;
broken:
  close(l->fd);
  l->fd = -1;
  return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED,
                          "%s: the worker stopped answering (%s); the lane is out of the fabric", l->name,
                          errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : "connection lost");
}

/* Hello (and the proof of the secret when the worker asks for it). */
static weft_status handshake(remote_lane *l, char *why, size_t whylen) {
  uint8_t pl[8];
  weft_net_put32(pl, WEFT_NET_VERSION);
  weft_net_put32(pl + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256);
  size_t n = 0;
  l->max_frame = 1u << 20;
  weft_status st = call(l, WEFT_NET_HELLO, pl, 8, NULL, 0, &n);
  if (st || n < 12 + WEFT_NET_NONCE_BYTES + 4) {
    snprintf(why, whylen, "the worker refused hello");
    return st ? st : WEFT_ERR_IO;
  }
  int need_auth = weft_net_get32(l->scratch + 8) != 0;
  uint8_t nonce[WEFT_NET_NONCE_BYTES];
  memcpy(nonce, l->scratch + 12, sizeof nonce);
  l->max_frame = weft_net_get32(l->scratch + 12 + WEFT_NET_NONCE_BYTES);
  /* The worker's word sizes our receive buffer: keep it within what a sane worker would say. */
  if (l->max_frame < 4096) l->max_frame = 4096;
  if (l->max_frame > (1u << 30)) l->max_frame = 1u << 30;
  if (need_auth) {
    const char *path = getenv("WEFT_REMOTE_SECRET_FILE");
    uint8_t secret[4096], mac[WEFT_NET_MAC_BYTES];
    size_t slen = 0;
    if (!path) {
      snprintf(why, whylen, "the worker requires a shared secret: set WEFT_REMOTE_SECRET_FILE");
      return WEFT_ERR_INVALID_ARGUMENT;
    }
    if (weft_net_read_secret(path, secret, sizeof secret, &slen, why, whylen)) return WEFT_ERR_IO;
    st = weft_net_auth_mac(secret, slen, nonce, mac);
    memset(secret, 0, sizeof secret);
    if (!st) st = call(l, WEFT_NET_AUTH, mac, sizeof mac, NULL, 0, NULL);
    if (st) {
      snprintf(why, whylen, "authentication refused (wrong secret?)");
      return st;
    }
  }
  return WEFT_OK;
}

static void remote_describe(void *self, weft_lane_desc *out) {
  remote_lane *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = "remote";
  out->device = l->device;
  out->driver = "weft wire protocol v1";
  out->details = l->details;
  out->contracts = l->contracts;
  out->flags = 0;
}

static void remote_destroy(void *self) {
  remote_lane *l = self;
  if (l->fd >= 0) close(l->fd);
  free(l->scratch);
  free(l);
}

static weft_status remote_alloc(void *self, size_t bytes, weft_buffer **out) {
  remote_lane *l = self;
  *out = NULL;
  remote_buffer *b = calloc(1, sizeof *b);
  if (!b) return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", l->name);
  uint8_t pl[12];
  weft_net_put32(pl, 1);
  weft_net_put64(pl + 4, (bytes + 3) / 4);
  size_t n = 0;
  weft_status st = call(l, WEFT_NET_CREATE, pl, sizeof pl, NULL, 0, &n);
  if (!st && n != 8) st = weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: malformed create reply", l->name);
  if (st) {
    free(b);
    return st;
  }
  b->handle = weft_net_get64(l->scratch);
  b->bytes = bytes;
  *out = b;
  return WEFT_OK;
}

static void remote_free(void *self, weft_buffer *buffer) {
  remote_lane *l = self;
  remote_buffer *b = buffer;
  if (!b) return;
  if (l->fd >= 0) {
    uint8_t pl[8];
    weft_net_put64(pl, b->handle);
    call(l, WEFT_NET_FREE, pl, sizeof pl, NULL, 0, NULL);
  }
  free(b);
}

/* Elements per frame, so a large tensor travels in frames under the worker's cap. */
static size_t chunk_elems(const remote_lane *l) { return (l->max_frame - 64) / 4; }

static weft_status remote_upload(void *self, weft_buffer *buffer, size_t offset, const void *src, size_t bytes) {
  remote_lane *l = self;
  remote_buffer *b = buffer;
  if (offset % 4 || bytes % 4)
    return weft_lane_report(l->host, WEFT_ERR_INTERNAL, "%s: upload not in whole floats", l->name);
  size_t first = offset / 4, count = bytes / 4, per = chunk_elems(l);
  for (size_t done = 0; done < count;) {
    size_t n = count - done < per ? count - done : per;
    uint8_t pl[24];
    weft_net_put64(pl, b->handle);
    weft_net_put64(pl + 8, first + done);
    weft_net_put64(pl + 16, n);
    weft_status st = call(l, WEFT_NET_WRITE, pl, sizeof pl, (const uint8_t *)src + done * 4, n * 4, NULL);
    if (st) return st;
    done += n;
  }
  return WEFT_OK;
}

static weft_status remote_download(void *self, weft_buffer *buffer, size_t offset, void *dst, size_t bytes) {
  remote_lane *l = self;
  remote_buffer *b = buffer;
  if (offset % 4 || bytes % 4)
    return weft_lane_report(l->host, WEFT_ERR_INTERNAL, "%s: download not in whole floats", l->name);
  size_t first = offset / 4, count = bytes / 4, per = chunk_elems(l);
  for (size_t done = 0; done < count;) {
    size_t n = count - done < per ? count - done : per, got = 0;
    uint8_t pl[24];
    weft_net_put64(pl, b->handle);
    weft_net_put64(pl + 8, first + done);
    weft_net_put64(pl + 16, n);
    weft_status st = call(l, WEFT_NET_READ, pl, sizeof pl, NULL, 0, &got);
    if (st) return st;
    if (got != 8 + n * 4 || weft_net_get64(l->scratch) != n) {
      close(l->fd);
      l->fd = -1;
      return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: the worker sent a malformed read reply", l->name);
    }
    memcpy((uint8_t *)dst + done * 4, l->scratch + 8, n * 4);
    done += n;
  }
  return WEFT_OK;
}

/* A [rows, cols] operand; an empty one (rows 0) as [0, 1, cols], since only batch dimensions may be 0. */
static void put_rows(uint8_t *q, int64_t rows, int64_t cols) {
  int64_t d[3] = {rows, rows ? cols : 1, cols};
  int nd = rows ? 2 : 3;
  weft_net_put32(q, (uint32_t)nd);
  for (int i = 0; i < nd; i++) weft_net_put64(q + 4 + 8 * i, (uint64_t)d[i]);
}

static void put_view(uint8_t *q, int nd, int64_t d0, int64_t d1, int64_t d2) {
  int64_t d[3] = {d0, d1, d2};
  weft_net_put32(q, (uint32_t)nd);
  for (int i = 0; i < nd; i++) weft_net_put64(q + 4 + 8 * i, (uint64_t)d[i]);
}

static weft_status remote_run(void *self, const weft_op *op) {
  remote_lane *l = self;
  uint8_t pl[WEFT_NET_OP_BYTES];
  memset(pl, 0, sizeof pl);
  weft_net_put32(pl, (uint32_t)op->kind);
  weft_net_put32(pl + 4, (uint32_t)op->contract);
  weft_net_put32(pl + 8, (uint32_t)l->worker_lane);
  weft_net_put32(pl + 12, (op->trans_a ? WEFT_NET_OP_TRANS_A : 0) | (op->trans_b ? WEFT_NET_OP_TRANS_B : 0));
  uint32_t a;
  memcpy(&a, &op->alpha, 4);
  weft_net_put32(pl + 16, a);
  weft_buffer *bufs[4] = {op->in[0], op->in[1], op->out[0], op->out[1]};
  for (int i = 0; i < 4; i++) weft_net_put64(pl + 20 + 8 * i, bufs[i] ? ((remote_buffer *)bufs[i])->handle : 0);
  uint8_t *v = pl + 52;
  int64_t r = op->rows, c = op->cols;
  switch (op->kind) {
  case WEFT_OP_MATMUL:
    put_view(v, 3, op->batch, op->trans_a ? op->k : op->m, op->trans_a ? op->m : op->k);
    if (op->b_batched) put_view(v + 36, 3, op->batch, op->trans_b ? op->n : op->k, op->trans_b ? op->k : op->n);
    else put_view(v + 36, 2, op->trans_b ? op->n : op->k, op->trans_b ? op->k : op->n, 0);
    put_view(v + 72, 3, op->batch, op->m, op->n);
    break;
  case WEFT_OP_ADD:
    put_rows(v, r, c);
    if (op->y_broadcast) put_view(v + 36, 1, c, 0, 0);
    else put_rows(v + 36, r, c);
    put_rows(v + 72, r, c);
    break;
  case WEFT_OP_RELU_BACKWARD:
    put_rows(v + 36, r, c);
    /* fall through */
  case WEFT_OP_RELU:
  case WEFT_OP_SCALE:
  case WEFT_OP_AXPY:
    put_rows(v, r, c);
    put_rows(v + 72, r, c);
    break;
  case WEFT_OP_SUM_ROWS:
    put_rows(v, r, c);
    put_view(v + 72, 1, c, 0, 0);
    break;
  case WEFT_OP_SOFTMAX_XENT:
    put_rows(v, r, c);
    put_rows(v + 36, r, c);
    if (op->out[0]) put_view(v + 72, 1, 1, 0, 0);
    if (op->out[1]) put_rows(v + 108, r, c);
    break;
  default: return weft_lane_report(l->host, WEFT_ERR_UNSUPPORTED, "%s: op %d unknown", l->name, (int)op->kind);
  }
  return call(l, WEFT_NET_OP, pl, sizeof pl, NULL, 0, NULL);
}

/* Asked while the lane is down: a worker restarted at the same address that offers the same lane brings
 * it back. Its old tensors died with the old process; the core forgot them when the lane went down. */
static weft_status remote_revive(void *self) {
  remote_lane *l = self;
  if (l->fd >= 0) close(l->fd);
  int ms = timeout_ms();
  l->fd = dial(l->addr, ms < 1000 ? ms : 1000); /* a quick try: this runs on the caller's thread */
  if (l->fd < 0)
    return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: the worker at %s is not reachable (%s)", l->name,
                            l->addr, strerror(errno));
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  setsockopt(l->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(l->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  char why[256] = "";
  size_t n = 0;
  weft_status st = handshake(l, why, sizeof why);
  if (st == WEFT_OK) st = call(l, WEFT_NET_LANES, NULL, 0, NULL, 0, &n);
  if (st != WEFT_OK) {
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
    return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: the worker at %s answered but %s", l->name, l->addr,
                            why[0] ? why : "did not list its lanes");
  }
  /* The same lane, at the same index, honouring at least what it did. */
  const uint8_t *q = l->scratch;
  size_t p = 4;
  uint32_t count = n >= 4 ? weft_net_get32(q) : 0;
  for (uint32_t i = 0; i < count && p + 4 <= n; i++) {
    weft_contract_mask contracts = weft_net_get32(q + p);
    p += 4;
    size_t sl = p + 2 <= n ? weft_net_get16(q + p) : (size_t)-1;
    if (sl == (size_t)-1 || p + 2 + sl > n) break;
    int same = i == (uint32_t)l->worker_lane && sl == strlen(l->worker_lane_name) &&
               memcmp(q + p + 2, l->worker_lane_name, sl) == 0 && (contracts & l->contracts) == l->contracts;
    if (same) return WEFT_OK;
    p += 2 + sl;
    for (int k = 0; k < 2 && p + 2 <= n; k++) p += 2 + weft_net_get16(q + p);
  }
  close(l->fd);
  l->fd = -1;
  return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: the worker at %s no longer offers lane %s", l->name,
                          l->addr, l->worker_lane_name);
}

static const weft_lane_vtable REMOTE_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = remote_describe,
    .destroy = remote_destroy, .buffer_alloc = remote_alloc, .buffer_free = remote_free,
    .upload = remote_upload, .download = remote_download, .run = remote_run, .revive = remote_revive,
};

/* Opens one lane: a connection of its own to the worker at `addr`, handshaken. */
static remote_lane *lane_open(const weft_probe_args *args, const char *addr, char *why, size_t whylen) {
  remote_lane *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->host = args->host;
  l->next_id = 1;
  snprintf(l->addr, sizeof l->addr, "%s", addr);
  snprintf(l->name, sizeof l->name, "remote:%s", addr);
  l->fd = dial(addr, timeout_ms());
  if (l->fd < 0) {
    snprintf(why, whylen, "cannot connect to %s: %s", addr, strerror(errno));
    remote_destroy(l);
    return NULL;
  }
  if (handshake(l, why, whylen)) {
    remote_destroy(l);
    return NULL;
  }
  return l;
}

static void probe_worker(const weft_probe_args *args, const weft_lane_sink *sink, const char *addr) {
  char why[512] = "", absent[160];
  snprintf(absent, sizeof absent, "remote:%s", addr);
  remote_lane *first = lane_open(args, addr, why, sizeof why);
  if (!first) {
    sink->add_absent(sink->ctx, absent, why[0] ? why : "out of memory");
    return;
  }
  size_t n = 0;
  if (call(first, WEFT_NET_LANES, NULL, 0, NULL, 0, &n) || n < 4) {
    sink->add_absent(sink->ctx, absent, "the worker did not list its lanes");
    remote_destroy(first);
    return;
  }
  /* Copy the list: the scratch buffer is reused by the next call. */
  uint8_t *list = malloc(n);
  if (!list) {
    remote_destroy(first);
    return;
  }
  memcpy(list, first->scratch, n);
  uint32_t count = weft_net_get32(list);
  size_t p = 4;
  for (uint32_t i = 0; i < count && i < 256; i++) {
    char strs[3][256];
    if (p + 4 > n) break;
    weft_contract_mask contracts = weft_net_get32(list + p);
    p += 4;
    int ok = 1;
    for (int k = 0; k < 3; k++) {
      if (p + 2 > n) { ok = 0; break; }
      size_t sl = weft_net_get16(list + p);
      p += 2;
      if (p + sl > n || sl > 255) { ok = 0; break; }
      memcpy(strs[k], list + p, sl);
      strs[k][sl] = 0;
      p += sl;
    }
    if (!ok) break;
    if (!contracts) continue; /* a lane that failed on the worker */
    remote_lane *l = first ? first : lane_open(args, addr, why, sizeof why);
    first = NULL;
    if (!l) {
      char nm[300];
      snprintf(nm, sizeof nm, "remote:%.127s/%.100s", addr, strs[0]);
      sink->add_absent(sink->ctx, nm, why);
      continue;
    }
    l->worker_lane = (int32_t)i;
    l->contracts = contracts;
    snprintf(l->worker_lane_name, sizeof l->worker_lane_name, "%.127s", strs[0]);
    snprintf(l->name, sizeof l->name, "remote:%.127s/%.100s", addr, strs[0]);
    snprintf(l->device, sizeof l->device, "%.159s", strs[2]);
    snprintf(l->details, sizeof l->details, "worker %.100s lane %.60s (%.40s), frames up to %u bytes", addr, strs[0], strs[1],
             (unsigned)l->max_frame);
    sink->add_lane(sink->ctx, &REMOTE_VTABLE, l);
  }
  if (first) remote_destroy(first);
  free(list);
}

weft_status weft_remote_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  const char *list = args->desc->remote && args->desc->remote[0] ? args->desc->remote : getenv("WEFT_REMOTE");
  if (!list || !list[0]) {
    sink->add_absent(sink->ctx, "remote",
                     "no workers named (WEFT_REMOTE=host:port,... or the fabric's `remote` option)");
    return WEFT_OK;
  }
  char addr[128];
  const char *p = list;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    size_t n = strcspn(p, ", ");
    if (!n) break;
    if (n < sizeof addr) {
      memcpy(addr, p, n);
      addr[n] = 0;
      probe_worker(args, sink, addr);
    } else {
      sink->add_absent(sink->ctx, "remote", "a worker address longer than 127 characters");
    }
    p += n;
  }
  return WEFT_OK;
}
