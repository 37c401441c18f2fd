/* remote_lane.c - lanes of another machine, served by `weft worker` (docs/PROTOCOL.md): one lane per lane
 * the worker offers, named remote:<host:port>/<lane>, one connection each. The protocol's client (buffers
 * as worker-side handles, views per op, chunked transfers, every reply checked) is src/net/client.c, shared
 * with browser and MPI lanes, and the lane glue over it (the vtable, the probe of the worker's list, the
 * check that a worker that came back offers the same lane) is src/net/peer_lane.c, shared with MPI lanes;
 * this file is its TCP transport (plain on loopback, TLS 1.3 with a key derived from the shared secret
 * anywhere else or when WEFT_REMOTE_TLS=1; src/net/tls.c; streams for bulk transfers), the connection and
 * its handshake (mutual proof of the secret, src/net/client.c), the list of workers and revive. A worker
 * that dies or stalls (socket timeouts) makes the lane return WEFT_ERR_LANE_FAILED, so the core takes the
 * lane out and re-routes the op. Reconnecting runs on a thread of the lane's own, never on the caller's:
 * revive only starts an attempt or reads its verdict. */
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

#include <openssl/crypto.h>

#include "core/envnum.h"
#include "net/client.h"
#include "net/peer_lane.h"
#include "net/stripe.h"
#include "net/tls.h"
#include "weft_lane.h"

typedef struct remote_lane {
  weft_net_peer_lane peer; /* first: the shared vtable functions take the lane as theirs */
  weft_net_conn conn;      /* fd -1 once the connection broke */
  weft_net_tls *tls;      /* the TLS configuration of the current connection, or NULL (plain TCP) */
  char identity[WEFT_NET_MAX_IDENTITY + 1]; /* what the worker proved it is ("" without a secret) */
  char pinned[WEFT_NET_MAX_IDENTITY + 1];   /* what it must prove it is ("": any identity the secret proves) */
  char transport[96];
  int timeout_ms;
  char addr[128];
  /* Streams joined to this connection's session for bulk transfers (conns[0] is `conn`'s place: the
   * session's own connection, copied in for each transfer). Opened on the first bulk transfer, closed
   * with the connection; a stream the worker closed is dropped. */
  weft_net_conn *streams; /* [WEFT_NET_MAX_STREAMS]; streams[0] unused */
  size_t nstreams;        /* connections of the session joined, its own included (1: no streams) */
  uint32_t granted;       /* connections the worker granted this session (1: none) */
  int joined;             /* the granted streams were joined (or tried): on the first bulk transfer */
  uint64_t session;       /* what they join by, their key (cleared once they joined) and the worker's name */
  uint8_t stream_key[WEFT_NET_KEY_BYTES];
  char stream_identity[WEFT_NET_MAX_IDENTITY + 1];
  char streams_plan[160]; /* for the details: how many connections bulk transfers take, or why one */
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

static weft_status tcp_send(void *ctx, const uint8_t *const piece[3], const size_t len[3], size_t max_reply,
                            char *why, size_t whylen) {
  remote_lane *l = ctx;
  l->peer.max_reply = max_reply;
  if (l->conn.fd >= 0 && weft_net_conn_send3(&l->conn, piece, len)) return WEFT_OK;
  snprintf(why, whylen, "%s", l->conn.fd < 0 ? "the connection is closed" : "connection lost");
  return WEFT_ERR_LANE_FAILED;
}

static weft_status tcp_recv(void *ctx, const uint8_t **out_frame, size_t *out_len, char *why, size_t whylen) {
  remote_lane *l = ctx;
  if (l->conn.fd < 0) {
    snprintf(why, whylen, "the connection is closed");
    return WEFT_ERR_LANE_FAILED;
  }
  uint8_t *buf = weft_net_peer_reply_room(&l->peer, WEFT_NET_HEADER_BYTES, why, whylen);
  if (!buf) return WEFT_ERR_LANE_FAILED;
  errno = 0; /* a worker that closes the connection sets none: an earlier call's EAGAIN is no timeout */
  if (!weft_net_conn_recv_all(&l->conn, buf, WEFT_NET_HEADER_BYTES)) goto broken;
  /* Read no more than the request can get back: the header's length is the worker's claim. */
  size_t n = WEFT_NET_HEADER_BYTES + (size_t)weft_net_get32(buf + 12);
  if (!(buf = weft_net_peer_reply_room(&l->peer, n, why, whylen))) return WEFT_ERR_LANE_FAILED;
  if (!weft_net_conn_recv_all(&l->conn, buf + WEFT_NET_HEADER_BYTES, n - WEFT_NET_HEADER_BYTES)) goto broken;
  *out_frame = buf;
  *out_len = n;
  return WEFT_OK;
broken:
  if (errno == EAGAIN || errno == EWOULDBLOCK) snprintf(why, whylen, "timed out after %d ms", l->timeout_ms);
  else if (!errno) snprintf(why, whylen, "connection lost (the worker closed it)");
  else snprintf(why, whylen, "connection lost (%s)", strerror(errno));
  return WEFT_ERR_LANE_FAILED;
}

static void streams_close(remote_lane *l) {
  for (size_t i = 1; i < l->nstreams; i++) weft_net_conn_close(&l->streams[i]);
  l->nstreams = 1;
}

static void tcp_drop(void *ctx, const char *why) {
  remote_lane *l = ctx;
  (void)why; /* a TCP peer has no place for it */
  streams_close(l);
  weft_net_conn_close(&l->conn);
}

static int dial(const char *addr, int ms, int *loopback, char *why, size_t whylen);

/* WEFT_REMOTE_STREAMS: connections a bulk transfer stripes over (1 = none); default from the cores. */
#define STREAMS_ASK_MAX (1L << 20) /* WEFT_REMOTE_STREAMS' largest value (more than the protocol's are capped) */
static uint32_t streams_wanted(void) {
  long v;
  if (weft_env_long("WEFT_REMOTE_STREAMS", 1, STREAMS_ASK_MAX, &v) == 1)
    return v > (long)WEFT_NET_MAX_STREAMS ? WEFT_NET_MAX_STREAMS : (uint32_t)v;
  return weft_net_default_streams();
}

/* After the handshake: asks the worker for streams (when both want them), so the lane knows from the start
 * how many connections its bulk transfers may take (its details say so, and stay as they are: the cost
 * cache keys on them). The streams themselves join on the first bulk transfer. A refusal leaves the lane
 * with its own connection; only a broken connection is an error. */
static weft_status streams_ask(remote_lane *l) {
  l->granted = 1;
  l->joined = 0;
  uint32_t want = streams_wanted();
  if (want < 2) {
    snprintf(l->streams_plan, sizeof l->streams_plan, "bulk transfers over one connection (WEFT_REMOTE_STREAMS=1)");
    return WEFT_OK;
  }
  if (!(l->peer.client.peer_caps & WEFT_NET_CAP_STREAMS)) {
    snprintf(l->streams_plan, sizeof l->streams_plan, "bulk transfers over one connection (the worker offers no "
             "streams)");
    return WEFT_OK;
  }
  weft_status st = weft_net_client_streams(&l->peer.client, want, &l->granted, &l->session, l->stream_key,
                                           l->stream_identity, sizeof l->stream_identity);
  if (st == WEFT_ERR_LANE_FAILED || !l->peer.client.up) return WEFT_ERR_LANE_FAILED;
  if (st) {
    l->granted = 1;
    snprintf(l->streams_plan, sizeof l->streams_plan, "bulk transfers over one connection (streams refused: %.100s)",
             l->peer.client.why);
  } else if (l->granted > 1) {
    snprintf(l->streams_plan, sizeof l->streams_plan, "bulk transfers striped over up to %u connections",
             (unsigned)l->granted);
  } else {
    snprintf(l->streams_plan, sizeof l->streams_plan, "bulk transfers over one connection (the worker granted no "
             "streams)");
  }
  return WEFT_OK;
}

/* Joins the streams the worker granted: each a connection of its own (TLS where the session has it) whose
 * first frame is JOIN. One that fails to connect or is refused (the worker's client cap, say) ends the
 * joining: the transfers take the connections there are, the lane's own at least. */
static void streams_join(remote_lane *l) {
  l->joined = 1;
  char why[256] = "";
  for (uint32_t i = 1; i < l->granted; i++) {
    int loopback = 0;
    int fd = dial(l->addr, l->timeout_ms, &loopback, why, sizeof why);
    weft_net_conn *sc = &l->streams[i];
    weft_net_conn_init(sc, fd);
    if (fd < 0) break;
    if ((l->tls && weft_net_conn_connect(sc, l->tls, why, sizeof why)) ||
        weft_net_stream_join(sc, l->session, i, l->stream_key, l->stream_identity, why, sizeof why)) {
      weft_net_conn_close(sc);
      break;
    }
    l->nstreams = i + 1;
  }
  OPENSSL_cleanse(l->stream_key, sizeof l->stream_key);
}

static weft_status tcp_bulk(void *ctx, const weft_net_bulk *job, uint32_t *next_id, char *why, size_t whylen) {
  remote_lane *l = ctx;
  if (l->conn.fd < 0) {
    snprintf(why, whylen, "the connection is closed");
    return WEFT_ERR_LANE_FAILED;
  }
  if (!l->joined && l->granted > 1) streams_join(l);
  l->streams[0] = l->conn;
  weft_status st = weft_net_bulk_run(l->streams, l->nstreams, next_id, job, why, whylen);
  l->conn = l->streams[0];
  /* Streams the worker closed are gone: keep the ones that are left, in order. */
  size_t k = 1;
  for (size_t i = 1; i < l->nstreams; i++)
    if (l->streams[i].fd >= 0) l->streams[k++] = l->streams[i];
  l->nstreams = k;
  return st;
}

static const weft_net_transport TCP_TRANSPORT = {tcp_send, tcp_recv, tcp_drop, tcp_bulk};

/* Connects; *loopback says whether the address reached is on loopback (127/8, ::1). On failure returns -1
 * with why the address is wrong or what connect said in `why`. */
static int dial(const char *addr, int ms, int *loopback, char *why, size_t whylen) {
  char host[128], port[16];
  if (!weft_net_split_addr(addr, host, sizeof host, port, sizeof port)) {
    snprintf(why, whylen, "'%s' is not a worker address: write HOST:PORT (e.g. 127.0.0.1:7070)", addr);
    return -1;
  }
  char *end;
  long pn = strtol(port, &end, 10);
  if (*end || end == port || pn < 1 || pn > 65535) {
    snprintf(why, whylen, "bad port '%s' in '%s': a port is a number from 1 to 65535", port, addr);
    return -1;
  }
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int gai = getaddrinfo(host, port, &hints, &ai);
  if (gai || !ai) {
    snprintf(why, whylen, "cannot resolve the host '%s' of '%s': %s", host, addr, gai ? gai_strerror(gai) : "no address");
    return -1;
  }
  /* every address the name has, in the resolver's order ("localhost" may give ::1 before 127.0.0.1, and the
   * worker listen on one of them only): the first that takes the connection; the first failure is told */
  int fd = -1;
  why[0] = 0;
  for (const struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      if (!why[0]) snprintf(why, whylen, "cannot connect to %s: %s", addr, strerror(errno));
      continue;
    }
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    /* On Linux SO_SNDTIMEO also bounds connect(). */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (!why[0])
        snprintf(why, whylen, "cannot connect to %s: %s%s", addr, strerror(errno),
                 errno == ECONNREFUSED ? " (is `weft worker` running there?)" : "");
      close(fd);
      fd = -1;
      continue;
    }
    *loopback = weft_net_is_loopback(a->ai_addr);
  }
  freeaddrinfo(ai);
  return fd;
}

/* ------------------------------------------------------------------------------------------- the lane */

/* WEFT_REMOTE_TLS: "1" runs TLS on loopback too; off loopback it is on whatever this says. */
static int tls_wanted(void) {
  const char *e = getenv("WEFT_REMOTE_TLS");
  return e && e[0] && strcmp(e, "0") != 0;
}

/* Dials the worker, starts TLS where the policy wants it, says hello and runs the mutual proof of the secret.
 * On failure why says what a person can do about it and the connection is closed. */
static weft_status connect_worker(remote_lane *l, int dial_ms, char *why, size_t whylen) {
  streams_close(l);
  weft_net_conn_close(&l->conn);
  weft_net_tls_destroy(l->tls);
  l->tls = NULL;
  l->identity[0] = 0;
  const char *path = getenv("WEFT_REMOTE_SECRET_FILE");
  uint8_t secret[4096];
  size_t slen = 0;
  if (path && path[0] && weft_net_read_secret(path, secret, sizeof secret, &slen, why, whylen)) return WEFT_ERR_IO;
  int loopback = 0;
  int fd = dial(l->addr, dial_ms, &loopback, why, whylen);
  weft_status st = WEFT_OK;
  if (fd < 0) {
    st = WEFT_ERR_LANE_FAILED;
    goto out;
  }
  weft_net_conn_init(&l->conn, fd);
  /* A reconnect on the lane's thread: destroy may shut this socket down to end the attempt early. */
  pthread_mutex_lock(&l->rv_lock);
  l->rv_fd = fd;
  int stop = l->rv_stop;
  pthread_mutex_unlock(&l->rv_lock);
  if (stop) shutdown(fd, SHUT_RDWR);
  struct timeval tv = {l->timeout_ms / 1000, (l->timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (!loopback || tls_wanted()) {
    /* Never plaintext off loopback: the frames would be neither private nor protected. */
    if (!slen) {
      snprintf(why, whylen,
               "%s needs TLS, whose key comes from the shared secret: set WEFT_REMOTE_SECRET_FILE (plaintext is "
               "refused off loopback)",
               loopback ? "WEFT_REMOTE_TLS=1" : "a worker off loopback");
      st = WEFT_ERR_INVALID_ARGUMENT;
      goto out;
    }
    if ((st = weft_net_tls_create(0, secret, slen, &l->tls, why, whylen)) ||
        (st = weft_net_conn_connect(&l->conn, l->tls, why, whylen)))
      goto out;
  }
  weft_net_conn_describe(&l->conn, l->transport, sizeof l->transport);
  st = weft_net_peer_handshake(&l->peer, secret, slen, l->pinned, l->identity, sizeof l->identity, why, whylen);
  if (!st && (st = streams_ask(l))) snprintf(why, whylen, "%s", l->peer.client.why);
out:
  OPENSSL_cleanse(secret, sizeof secret);
  pthread_mutex_lock(&l->rv_lock);
  l->rv_fd = -1;
  pthread_mutex_unlock(&l->rv_lock);
  if (st) {
    weft_net_conn_close(&l->conn);
    l->peer.client.up = 0;
  }
  return st;
}

static void remote_destroy(weft_net_peer_lane *self) {
  remote_lane *l = (remote_lane *)self;
  pthread_mutex_lock(&l->rv_lock);
  int running = l->rv_state != RV_IDLE;
  l->rv_stop = 1;
  if (l->rv_state == RV_RUNNING && l->rv_fd >= 0) shutdown(l->rv_fd, SHUT_RDWR);
  pthread_mutex_unlock(&l->rv_lock);
  if (running) pthread_join(l->rv_thread, NULL);
  pthread_mutex_destroy(&l->rv_lock);
  streams_close(l);
  free(l->streams);
  OPENSSL_cleanse(l->stream_key, sizeof l->stream_key);
  weft_net_conn_close(&l->conn);
  weft_net_tls_destroy(l->tls);
  weft_net_peer_release(&l->peer);
  free(l);
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
  char why[512] = "";
  weft_status st =
      connect_worker(l, l->timeout_ms < RECONNECT_TIMEOUT_MS ? l->timeout_ms : RECONNECT_TIMEOUT_MS, why, sizeof why);
  if (st != WEFT_OK)
    return weft_lane_report(l->peer.client.host, WEFT_ERR_LANE_FAILED, "%s: the worker at %s: %s", l->peer.name,
                            l->addr, why);
  return weft_net_peer_relist(&l->peer);
}

static void *reconnect_main(void *arg) {
  remote_lane *l = arg;
  l->peer.client.host = &l->rv_host;
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
static weft_status remote_revive(weft_net_peer_lane *self) {
  remote_lane *l = (remote_lane *)self;
  pthread_mutex_lock(&l->rv_lock);
  int state = l->rv_state;
  pthread_mutex_unlock(&l->rv_lock);
  if (state == RV_RUNNING)
    return weft_lane_report(l->fabric_host, WEFT_ERR_LANE_FAILED, "%s: reconnecting to the worker at %s", l->peer.name,
                            l->addr);
  char why[sizeof l->rv_why] = "";
  if (state == RV_UP || state == RV_DOWN) {
    pthread_join(l->rv_thread, NULL);
    l->peer.client.host = l->fabric_host;
    snprintf(why, sizeof why, "%s", l->rv_why);
    l->rv_state = RV_IDLE;
    if (state == RV_UP) return WEFT_OK;
  }
  /* The client and the socket are the thread's until it is joined: the lane is down, nothing else uses them. */
  l->rv_state = RV_RUNNING;
  if (pthread_create(&l->rv_thread, NULL, reconnect_main, l) != 0) {
    l->rv_state = RV_IDLE;
    return weft_lane_report(l->fabric_host, WEFT_ERR_LANE_FAILED, "%s: cannot start a thread to reconnect",
                            l->peer.name);
  }
  if (why[0]) return weft_lane_report(l->fabric_host, WEFT_ERR_LANE_FAILED, "%s; trying again in the background", why);
  return weft_lane_report(l->fabric_host, WEFT_ERR_LANE_FAILED, "%s: reconnecting to the worker at %s", l->peer.name,
                          l->addr);
}

/* A probe of one worker: what each of its lanes' connections is opened with. */
typedef struct worker_probe {
  const weft_probe_args *args;
  const char *addr, *pinned;
} worker_probe;

/* Opens one lane: a connection of its own to the worker at `addr`, handshaken. */
static weft_net_peer_lane *lane_open(void *ctx, char *why, size_t whylen) {
  const worker_probe *w = ctx;
  const char *addr = w->addr;
  remote_lane *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  char name[160], peer[160];
  snprintf(name, sizeof name, "remote:%s", addr);
  snprintf(peer, sizeof peer, "the worker at %s", addr);
  weft_net_peer_init(&l->peer, &TCP_TRANSPORT, w->args->host, name, peer);
  l->timeout_ms = weft_net_client_timeout_ms();
  pthread_mutex_init(&l->rv_lock, NULL);
  l->rv_fd = -1;
  l->fabric_host = w->args->host;
  l->rv_host.ctx = l;
  l->rv_host.report = rv_report;
  snprintf(l->addr, sizeof l->addr, "%s", addr);
  snprintf(l->pinned, sizeof l->pinned, "%s", w->pinned);
  weft_net_conn_init(&l->conn, -1);
  l->streams = calloc(WEFT_NET_MAX_STREAMS, sizeof *l->streams);
  l->nstreams = 1;
  if (!l->streams || connect_worker(l, l->timeout_ms, why, whylen)) {
    remote_destroy(&l->peer);
    return NULL;
  }
  return &l->peer;
}

/* The details of a lane of the worker, once its LANES entry is known. */
static void lane_details(weft_net_peer_lane *self, void *ctx, const char *lane, const char *kind) {
  remote_lane *l = (remote_lane *)self;
  const worker_probe *w = ctx;
  snprintf(l->peer.details, sizeof l->peer.details,
           "worker %.60s lane %.40s (%.30s) over %.70s, %s%.40s, frames up to %u bytes, %.150s", w->addr, lane, kind,
           l->transport,
           l->identity[0] ? (l->pinned[0] ? "proved it is the pinned " : "proved it is ") : "no secret", l->identity,
           (unsigned)l->peer.client.max_frame, l->streams_plan);
}

static const weft_net_peer_kind REMOTE_KIND = {"remote", "weft wire protocol v2", lane_open, lane_details,
                                               remote_destroy, remote_revive};

static void probe_worker(const weft_probe_args *args, const weft_lane_sink *sink, const char *addr,
                         const char *pinned) {
  char prefix[160];
  snprintf(prefix, sizeof prefix, "remote:%s", addr);
  worker_probe w = {args, addr, pinned};
  weft_net_peer_probe(&REMOTE_KIND, &w, sink, prefix);
}

weft_status weft_remote_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  const char *list = args->desc->remote && args->desc->remote[0] ? args->desc->remote : getenv("WEFT_REMOTE");
  if (!list || !list[0]) {
    sink->add_absent(sink->ctx, "remote",
                     "no workers named (WEFT_REMOTE=host:port,... or the fabric's `remote` option)");
    return WEFT_OK;
  }
  /* A tuning variable set to something that is not a number in its range is a mistake to show, not to
   * replace with the default in silence: the workers stay out, saying which variable and what it takes. */
  static const struct {
    const char *name;
    long lo, hi;
    const char *unit;
  } knobs[] = {{"WEFT_REMOTE_TIMEOUT_MS", 1, WEFT_NET_TIMEOUT_MS_MAX, "milliseconds"},
               {"WEFT_REMOTE_STREAMS", 1, STREAMS_ASK_MAX, "connections"}};
  for (size_t k = 0; k < sizeof knobs / sizeof knobs[0]; k++) {
    long v;
    if (weft_env_long(knobs[k].name, knobs[k].lo, knobs[k].hi, &v) < 0) {
      char why[200];
      snprintf(why, sizeof why, "%s is '%.40s'; it takes a whole number of %s from %ld to %ld", knobs[k].name,
               getenv(knobs[k].name), knobs[k].unit, knobs[k].lo, knobs[k].hi);
      sink->add_absent(sink->ctx, "remote", why);
      return WEFT_OK;
    }
  }
  /* Each entry: host:port, or host:port=IDENTITY to pin the identity that worker must prove (a worker that
   * proves another is refused); WEFT_REMOTE_IDENTITY pins the entries that name none. */
  const char *pin_all = getenv("WEFT_REMOTE_IDENTITY");
  char addr[128], pinned[WEFT_NET_MAX_IDENTITY + 1];
  const char *p = list;
  int entries = 0;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    size_t n = strcspn(p, ", ");
    if (!n) break;
    entries++;
    size_t na = strcspn(p, "=, ");
    size_t np = na < n ? n - na - 1 : 0; /* the pin after '=' */
    if (na >= sizeof addr) {
      sink->add_absent(sink->ctx, "remote", "a worker address longer than 127 characters");
    } else if (np > WEFT_NET_MAX_IDENTITY || (na < n && !np)) {
      memcpy(addr, p, na);
      addr[na] = 0;
      char nm[160];
      snprintf(nm, sizeof nm, "remote:%s", addr);
      sink->add_absent(sink->ctx, nm, np ? "the pinned identity after '=' is longer than 255 bytes"
                                         : "an empty pinned identity after '=' (host:port=IDENTITY)");
    } else {
      memcpy(addr, p, na);
      addr[na] = 0;
      if (np) memcpy(pinned, p + na + 1, np);
      pinned[np] = 0;
      if (!np && pin_all) snprintf(pinned, sizeof pinned, "%s", pin_all);
      probe_worker(args, sink, addr, pinned);
    }
    p += n;
  }
  if (!entries) {
    char why[256];
    snprintf(why, sizeof why, "'%.64s' names no worker: write host:port,... (WEFT_REMOTE or the fabric's `remote`)",
             list);
    sink->add_absent(sink->ctx, "remote", why);
  }
  return WEFT_OK;
}
