/* remote_lane.c - lanes of another machine, served by `weft worker` (docs/PROTOCOL.md): one lane per lane
 * the worker offers, named remote:<host:port>/<lane>, one connection each. The protocol's client (buffers
 * as worker-side handles, views per op, chunked transfers, every reply checked) is src/net/client.c, shared
 * with browser lanes; this file is its TCP transport, the handshake's proof of the secret, the probe and
 * revive. A worker that dies or stalls (socket timeouts) makes the lane return WEFT_ERR_LANE_FAILED, so the
 * core takes the lane out and re-routes the op. Reconnecting runs on a thread of the lane's own, never on
 * the caller's: revive only starts an attempt or reads its verdict. */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/client.h"
#include "weft_lane.h"

typedef struct remote_lane {
  weft_net_client client; /* first: the shared vtable functions take the lane as its client */
  int fd;                 /* -1 once the connection broke */
  int timeout_ms;
  weft_contract_mask contracts;
  char addr[128];
  char worker_lane_name[128]; /* the lane's name on the worker: a restarted worker must still offer it */
  char name[256];
  char device[160];
  char details[256];
  uint8_t *scratch; /* the last frame received */
  size_t scratch_cap;
  size_t max_reply; /* the largest reply the last request may get */
  /* Reconnection in the background (state guarded by rv_lock): the thread owns fd and the client while it
   * runs; the lane is down meanwhile, so the fabric's thread does not use them. */
  pthread_mutex_t rv_lock;
  pthread_t rv_thread;
  int rv_state;    /* RV_IDLE, RV_RUNNING, RV_UP, RV_DOWN */
  int rv_fd;       /* the attempt's socket, shut down to end an attempt early */
  int rv_stop;
  weft_lane_host rv_host;
  const weft_lane_host *fabric_host;
  char rv_why[400];
} remote_lane;

enum { RV_IDLE, RV_RUNNING, RV_UP, RV_DOWN };
#define RECONNECT_TIMEOUT_MS 2000 /* a reconnect's dial and handshake, each step */

/* ---------------------------------------------------------------------------------- the TCP transport */

/* Header, payload and tail in one sendmsg where the kernel takes them whole: a small request is one
 * segment on the wire, not three (each a wakeup on the worker). */
static int send_frame(int fd, const uint8_t *const piece[3], const size_t len[3]) {
  struct iovec iov[3];
  size_t total = 0;
  for (int i = 0; i < 3; i++) {
    iov[i].iov_base = (void *)piece[i];
    iov[i].iov_len = piece[i] ? len[i] : 0;
    total += iov[i].iov_len;
  }
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

static int scratch_fit(remote_lane *l, size_t n) {
  if (n <= l->scratch_cap) return 1;
  uint8_t *p = realloc(l->scratch, n);
  if (!p) return 0;
  l->scratch = p;
  l->scratch_cap = n;
  return 1;
}

static weft_status tcp_send(void *ctx, const uint8_t *const piece[3], const size_t len[3], size_t max_reply,
                            char *why, size_t whylen) {
  remote_lane *l = ctx;
  l->max_reply = max_reply;
  if (l->fd >= 0 && send_frame(l->fd, piece, len)) return WEFT_OK;
  snprintf(why, whylen, "%s", l->fd < 0 ? "the connection is closed" : "connection lost");
  return WEFT_ERR_LANE_FAILED;
}

static weft_status tcp_recv(void *ctx, const uint8_t **out_frame, size_t *out_len, char *why, size_t whylen) {
  remote_lane *l = ctx;
  if (l->fd < 0) {
    snprintf(why, whylen, "the connection is closed");
    return WEFT_ERR_LANE_FAILED;
  }
  if (!scratch_fit(l, WEFT_NET_HEADER_BYTES) || !weft_net_recv_all(l->fd, l->scratch, WEFT_NET_HEADER_BYTES))
    goto broken;
  /* Read no more than the request can get back: the header's length is the worker's claim. */
  size_t n = WEFT_NET_HEADER_BYTES + (size_t)weft_net_get32(l->scratch + 12);
  if (n > l->max_reply) {
    snprintf(why, whylen, "a reply of %zu bytes, more than the request can get", n);
    return WEFT_ERR_LANE_FAILED;
  }
  if (!scratch_fit(l, n) || !weft_net_recv_all(l->fd, l->scratch + WEFT_NET_HEADER_BYTES, n - WEFT_NET_HEADER_BYTES))
    goto broken;
  *out_frame = l->scratch;
  *out_len = n;
  return WEFT_OK;
broken:
  if (errno == EAGAIN || errno == EWOULDBLOCK) snprintf(why, whylen, "timed out after %d ms", l->timeout_ms);
  else snprintf(why, whylen, "connection lost");
  return WEFT_ERR_LANE_FAILED;
}

static void tcp_drop(void *ctx, const char *why) {
  remote_lane *l = ctx;
  (void)why; /* a TCP peer has no place for it */
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
}

static const weft_net_transport TCP_TRANSPORT = {tcp_send, tcp_recv, tcp_drop};

static int dial(const char *addr, int ms) {
  char host[128], port[16];
  if (!weft_net_split_addr(addr, host, sizeof host, port, sizeof port)) return -1;
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

/* ------------------------------------------------------------------------------------------- the lane */

/* Hello, and the proof of the secret when the worker asks for it. */
static weft_status handshake(remote_lane *l, char *why, size_t whylen) {
  weft_net_client *c = &l->client;
  weft_net_client_begin(c);
  weft_net_hello hello;
  weft_status st = weft_net_client_hello(c, &hello);
  if (st) {
    snprintf(why, whylen, "the worker refused hello");
    return st;
  }
  if (!hello.auth_required) return WEFT_OK;
  const char *path = getenv("WEFT_REMOTE_SECRET_FILE");
  uint8_t secret[4096], mac[WEFT_NET_MAC_BYTES];
  size_t slen = 0;
  if (!path) {
    snprintf(why, whylen, "the worker requires a shared secret: set WEFT_REMOTE_SECRET_FILE");
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  if (weft_net_read_secret(path, secret, sizeof secret, &slen, why, whylen)) return WEFT_ERR_IO;
  st = weft_net_auth_mac(secret, slen, hello.nonce, mac);
  memset(secret, 0, sizeof secret);
  if (!st) st = weft_net_client_call(c, WEFT_NET_AUTH, mac, sizeof mac, NULL, 0);
  if (st) snprintf(why, whylen, "authentication refused (wrong secret?)");
  return st;
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
  pthread_mutex_lock(&l->rv_lock);
  int running = l->rv_state != RV_IDLE;
  l->rv_stop = 1;
  if (l->rv_state == RV_RUNNING && l->rv_fd >= 0) shutdown(l->rv_fd, SHUT_RDWR);
  pthread_mutex_unlock(&l->rv_lock);
  if (running) pthread_join(l->rv_thread, NULL);
  pthread_mutex_destroy(&l->rv_lock);
  if (l->fd >= 0) close(l->fd);
  free(l->scratch);
  free(l);
}

/* The worker's lanes, one entry per call of `each`; lanes_find and probe_worker's collectors. */
typedef struct lane_match {
  const remote_lane *l;
  int found;
} lane_match;

/* The same lane, at the same index, honouring at least what it did. */
static void match_lane(void *ctx, uint32_t index, weft_contract_mask contracts, const char *name, const char *kind,
                       const char *device) {
  lane_match *m = ctx;
  (void)kind, (void)device;
  if (index == (uint32_t)m->l->client.peer_lane && strcmp(name, m->l->worker_lane_name) == 0 &&
      (contracts & m->l->contracts) == m->l->contracts)
    m->found = 1;
}

static weft_status rv_report(void *ctx, weft_status status, const char *fmt, va_list args) {
  remote_lane *l = ctx;
  vsnprintf(l->rv_why, sizeof l->rv_why, fmt, args);
  return status;
}

/* One reconnection attempt: a worker restarted at the same address that offers the same lane brings the
 * lane back. Its old tensors died with the old process; the core forgot them when the lane went down. Runs
 * on the lane's reconnect thread; reports into rv_why. */
static weft_status reconnect(remote_lane *l) {
  if (l->fd >= 0) close(l->fd);
  l->fd = dial(l->addr, l->timeout_ms < RECONNECT_TIMEOUT_MS ? l->timeout_ms : RECONNECT_TIMEOUT_MS);
  if (l->fd < 0)
    return weft_lane_report(l->client.host, WEFT_ERR_LANE_FAILED, "%s: the worker at %s is not reachable (%s)",
                            l->name, l->addr, strerror(errno));
  pthread_mutex_lock(&l->rv_lock);
  l->rv_fd = l->fd;
  int stop = l->rv_stop;
  pthread_mutex_unlock(&l->rv_lock);
  if (stop) shutdown(l->fd, SHUT_RDWR);
  char why[256] = "";
  lane_match m = {l, 0};
  weft_status st = handshake(l, why, sizeof why);
  if (st == WEFT_OK) st = weft_net_client_lanes(&l->client, match_lane, &m);
  pthread_mutex_lock(&l->rv_lock);
  l->rv_fd = -1;
  pthread_mutex_unlock(&l->rv_lock);
  if (st != WEFT_OK) {
    tcp_drop(l, NULL);
    l->client.up = 0;
    return weft_lane_report(l->client.host, WEFT_ERR_LANE_FAILED, "%s: the worker at %s answered but %s", l->name,
                            l->addr, why[0] ? why : "did not list its lanes");
  }
  if (!m.found) {
    tcp_drop(l, NULL);
    l->client.up = 0;
    return weft_lane_report(l->client.host, WEFT_ERR_LANE_FAILED, "%s: the worker at %s no longer offers lane %s",
                            l->name, l->addr, l->worker_lane_name);
  }
  /* Up: the lane's own timeouts from here on. */
  struct timeval tv = {l->timeout_ms / 1000, (l->timeout_ms % 1000) * 1000};
  setsockopt(l->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(l->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return WEFT_OK;
}

static void *reconnect_main(void *arg) {
  remote_lane *l = arg;
  l->client.host = &l->rv_host;
  l->rv_why[0] = 0;
  weft_status st = reconnect(l);
  pthread_mutex_lock(&l->rv_lock);
  l->rv_state = st == WEFT_OK ? RV_UP : RV_DOWN;
  int stop = l->rv_stop;
  pthread_mutex_unlock(&l->rv_lock);
  if (!stop) weft_lane_revive_soon(l->fabric_host);
  return NULL;
}

/* Asked on the fabric's thread while the lane is down: it never dials or waits here. It takes the verdict
 * of the last attempt (up: the lane is back; down: why, and a new attempt starts), or starts one. */
static weft_status remote_revive(void *self) {
  remote_lane *l = self;
  pthread_mutex_lock(&l->rv_lock);
  int state = l->rv_state;
  pthread_mutex_unlock(&l->rv_lock);
  if (state == RV_RUNNING)
    return weft_lane_report(l->fabric_host, WEFT_ERR_LANE_FAILED, "%s: reconnecting to the worker at %s", l->name,
                            l->addr);
  char why[sizeof l->rv_why] = "";
  if (state == RV_UP || state == RV_DOWN) {
    pthread_join(l->rv_thread, NULL);
    l->client.host = l->fabric_host;
    snprintf(why, sizeof why, "%s", l->rv_why);
    l->rv_state = RV_IDLE;
    if (state == RV_UP) return WEFT_OK;
  }
  /* The client and the socket are the thread's until it is joined: the lane is down, nothing else uses them. */
  l->rv_state = RV_RUNNING;
  if (pthread_create(&l->rv_thread, NULL, reconnect_main, l) != 0) {
    l->rv_state = RV_IDLE;
    return weft_lane_report(l->fabric_host, WEFT_ERR_LANE_FAILED, "%s: cannot start a thread to reconnect", l->name);
  }
  if (why[0]) return weft_lane_report(l->fabric_host, WEFT_ERR_LANE_FAILED, "%s; trying again in the background", why);
  return weft_lane_report(l->fabric_host, WEFT_ERR_LANE_FAILED, "%s: reconnecting to the worker at %s", l->name,
                          l->addr);
}

static const weft_lane_vtable REMOTE_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION,
    .size = sizeof(weft_lane_vtable),
    .describe = remote_describe,
    .destroy = remote_destroy,
    .buffer_alloc = weft_net_client_buffer_alloc,
    .buffer_free = weft_net_client_buffer_free,
    .upload = weft_net_client_upload,
    .download = weft_net_client_download,
    .run = weft_net_client_run,
    .revive = remote_revive,
};

/* Opens one lane: a connection of its own to the worker at `addr`, handshaken. */
static remote_lane *lane_open(const weft_probe_args *args, const char *addr, char *why, size_t whylen) {
  remote_lane *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->client.tp = &TCP_TRANSPORT;
  l->client.tp_ctx = l;
  l->client.host = args->host;
  l->client.name = l->name;
  l->timeout_ms = weft_net_client_timeout_ms();
  pthread_mutex_init(&l->rv_lock, NULL);
  l->rv_fd = -1;
  l->fabric_host = args->host;
  l->rv_host.ctx = l;
  l->rv_host.report = rv_report;
  snprintf(l->addr, sizeof l->addr, "%s", addr);
  snprintf(l->name, sizeof l->name, "remote:%s", addr);
  l->fd = dial(addr, l->timeout_ms);
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

typedef struct worker_lanes {
  const weft_probe_args *args;
  const weft_lane_sink *sink;
  const char *addr;
  remote_lane *first; /* the connection that listed the lanes serves the first of them */
} worker_lanes;

/* One lane of the worker's list: a connection of its own, or absent with the reason. */
static void add_worker_lane(void *ctx, uint32_t index, weft_contract_mask contracts, const char *name,
                            const char *kind, const char *device) {
  worker_lanes *w = ctx;
  char why[512] = "";
  if (!contracts) return; /* a lane that failed on the worker */
  remote_lane *l = w->first ? w->first : lane_open(w->args, w->addr, why, sizeof why);
  w->first = NULL;
  if (!l) {
    char nm[300];
    snprintf(nm, sizeof nm, "remote:%.127s/%.100s", w->addr, name);
    w->sink->add_absent(w->sink->ctx, nm, why[0] ? why : "out of memory");
    return;
  }
  l->client.peer_lane = (int32_t)index;
  l->contracts = contracts;
  snprintf(l->worker_lane_name, sizeof l->worker_lane_name, "%.127s", name);
  snprintf(l->name, sizeof l->name, "remote:%.127s/%.100s", w->addr, name);
  snprintf(l->device, sizeof l->device, "%.159s", device);
  snprintf(l->details, sizeof l->details, "worker %.100s lane %.60s (%.40s), frames up to %u bytes", w->addr, name,
           kind, (unsigned)l->client.max_frame);
  w->sink->add_lane(w->sink->ctx, &REMOTE_VTABLE, l);
}

static void probe_worker(const weft_probe_args *args, const weft_lane_sink *sink, const char *addr) {
  char why[512] = "", absent[160];
  snprintf(absent, sizeof absent, "remote:%s", addr);
  worker_lanes w = {args, sink, addr, lane_open(args, addr, why, sizeof why)};
  if (!w.first) {
    sink->add_absent(sink->ctx, absent, why[0] ? why : "out of memory");
    return;
  }
  remote_lane *lister = w.first;
  /* The list is copied before the callbacks run, so the first lane's connection may be handed out. */
  if (weft_net_client_lanes(&lister->client, add_worker_lane, &w) != WEFT_OK && w.first)
    sink->add_absent(sink->ctx, absent, "the worker did not list its lanes");
  if (w.first) remote_destroy(w.first);
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
