/* worker.c - `weft worker`'s engine: sessions that run each request through the public API on resident
 * tensors named by handles, and the TCP server (each connection isolated: a bad frame gets an error reply
 * or closes that connection only).
 *
 * Connections. The accepting thread runs the handshake stage: every connection that has not completed
 * (TLS's handshake, non-blocking, with --tls or off loopback, then) HELLO (+ AUTH_START and AUTH_FINISH with a
 * secret) sits in one poll() set with a frame buffer of a few dozen bytes, on a cap of its own (the oldest is
 * dropped for a newcomer when full) and a deadline from accept; before the handshake only those frames are
 * read, each at its fixed size, anything else is refused without its payload being read. A connection that completes the handshake gets a thread of its own (the client cap) and is dropped
 * after the idle timeout between frames. Tensors and kept receive buffers draw from a worker-wide budget.
 *
 * Lanes. A fabric is used from one thread at a time. The worker opens a directory fabric (it answers LANES,
 * whose indices are the ones clients see, and routes with weft_route_explain) and then each lane again in a
 * fabric of its own; each fabric sits behind a FIFO (ticket) lock. An op takes its lane's lock only, so ops of
 * different clients on different lanes run at once, and on one lane an op waits only for the ops queued
 * before it, never for a client that keeps coming back. A routed op (lane -1) takes the core's own choice
 * when that lane has nothing queued; otherwise each eligible lane's prediction, scaled by how long its recent
 * ops of that kind took, plus what is queued on it. The bits are the lane's own (an exact op gives the same
 * bits on every lane); the lane in the reply is the directory's index of the lane that ran it. A lane that
 * cannot be opened alone stays in the directory fabric (group 0) and runs under the directory's lock. */
#define _GNU_SOURCE /* accept4 */
#include "net/worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "core/optable.h"
#include "net/tls.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the worker copies float payloads as little-endian bytes; a big-endian port must swap them"
#endif

/* A FIFO (ticket) lock: waiters are served in the order they asked, so an op waits at most for the ops that
 * were already queued on its lane when it arrived, never for a client that keeps coming back. */
typedef struct ticket_lock {
  pthread_mutex_t m;
  pthread_cond_t cv;
  uint64_t next, serving;
} ticket_lock;

static void ticket_init(ticket_lock *t) {
  pthread_mutex_init(&t->m, NULL);
  pthread_cond_init(&t->cv, NULL);
  t->next = t->serving = 0;
}

static void ticket_destroy(ticket_lock *t) {
  pthread_mutex_destroy(&t->m);
  pthread_cond_destroy(&t->cv);
}

static void ticket_take(ticket_lock *t) {
  pthread_mutex_lock(&t->m);
  uint64_t me = t->next++;
  while (t->serving != me) pthread_cond_wait(&t->cv, &t->m);
  pthread_mutex_unlock(&t->m);
}

static void ticket_give(ticket_lock *t) {
  pthread_mutex_lock(&t->m);
  t->serving++;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->m);
}

/* A fabric that runs ops, used by one thread at a time (its ticket lock). Group 0 is the directory fabric. */
typedef struct lane_group {
  weft_fabric *fabric;
  ticket_lock lock;
  size_t lane; /* groups past 0: the one lane (its directory index) this fabric was opened for */
} lane_group;

/* A lane as the worker serves it (indexed as in the directory fabric, the indices clients see). */
typedef struct lane_route {
  size_t group; /* the group whose fabric runs its ops */
  int local;    /* its index in that fabric */
  atomic_int down; /* it failed under an op: routed ops avoid it, LANES reports it without contracts */
  double pending;  /* predicted seconds of ops queued or running on it (under pend_lock) */
  double scale[WEFT_OP_COUNT]; /* measured over predicted time of its recent ops, per kind (under pend_lock) */
} lane_route;

struct weft_net_server {
  lane_group *groups; /* [0]: the directory (LANES, routing; runs the ops of lanes that cannot be opened
                       * alone); [1..]: one fabric per lane */
  size_t ngroups;
  lane_route *lanes;
  size_t nlanes;
  pthread_mutex_t pend_lock;
  uint8_t secret[4096];
  size_t secret_len;
  int need_auth;
  char identity[WEFT_NET_MAX_IDENTITY + 1]; /* bound into both proofs */
  weft_net_tls *tls;                        /* NULL: plain TCP */
  weft_net_limits limits;
  int io_timeout_ms, idle_timeout_ms, handshake_timeout_ms;
  int max_clients, max_pending;
  pthread_mutex_t count_lock;
  int clients;
  uint64_t max_total;    /* bytes across all connections: tensors and frame buffers */
  atomic_uint_fast64_t total;
  uint32_t max_streams;  /* connections one session may stripe over (its first included); 1 = none */
  /* Sessions that granted streams, by their stream session id: what a JOIN looks up. Also guards each
   * session's refs, joined indices and stream sockets. */
  pthread_mutex_t reg_lock;
  weft_net_session **reg;
  size_t nreg, reg_cap;
  void (*on_log)(void *ctx, const char *line); /* connection events (weft_net_worker_desc.on_log) */
  void *log_ctx;
};

static void wlog(const weft_net_server *srv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(const weft_net_server *srv, const char *fmt, ...) {
  if (!srv->on_log) return;
  char line[WEFT_NET_MAX_MESSAGE + 160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  srv->on_log(srv->log_ctx, line);
}

/* Takes n bytes from the worker-wide budget; 0 when they would pass it. */
static int mem_take(weft_net_server *srv, uint64_t n) {
  uint_fast64_t cur = atomic_load(&srv->total);
  do {
    if (cur > srv->max_total || n > srv->max_total - cur) return 0;
  } while (!atomic_compare_exchange_weak(&srv->total, &cur, cur + n));
  return 1;
}

static void mem_give(weft_net_server *srv, uint64_t n) {
  if (n) atomic_fetch_sub(&srv->total, n);
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A resident tensor: the session owns its floats; each op sees them through tensors wrapped over them
 * (weft_tensor_wrap) in the shape that op wants, so a client lane can treat a handle as a flat buffer. */
typedef struct slot {
  uint64_t id;
  weft_dtype dtype; /* CREATE's, or RETYPE's: the op table checks it; WRITE and READ copy bits whatever it is */
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
  char err[WEFT_NET_MAX_MESSAGE]; /* the first connection's: streams keep their own */
  /* Streams (STREAMS, JOIN): connections joined to this session carry WRITE and READ of its handles, each on
   * a thread of its own. `lock` is held shared while a WRITE or READ moves a tensor's bytes and exclusive by
   * every other request (which may create, free or retype the slots those use). Under srv->reg_lock: */
  pthread_rwlock_t lock;
  int refs;                 /* the first connection's and each joined stream's */
  uint64_t stream_session;  /* the id streams join by (0: none granted) */
  uint32_t stream_granted;  /* connections granted, the first included */
  uint8_t stream_key[WEFT_NET_KEY_BYTES];
  uint64_t joined[(WEFT_NET_MAX_STREAMS + 63) / 64]; /* indices that joined: each joins once */
  int stream_fd[WEFT_NET_MAX_STREAMS];               /* their sockets while they live, else -1 */
  int streams_asked;                                 /* STREAMS comes once (the first connection's thread) */
  uint32_t client_caps;                              /* its hello's */
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

/* Half the machine's physical memory: the default budget for what all connections together may hold. */
static uint64_t default_max_total(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return (uint64_t)8 << 30;
  return (uint64_t)pages * (uint64_t)page / 2;
}

/* Opens the directory fabric (desc->lanes), then each of its lanes again alone, in a fabric of its own: ops
 * on different lanes then never share a fabric (which is used from one thread at a time) or a lock. A lane
 * that cannot be opened alone (it did not come up, or came with others) stays in group 0. */
static weft_status open_lanes(weft_net_server *srv, const weft_net_worker_desc *desc, char *err, size_t errlen) {
  weft_fabric_desc fd = WEFT_FABRIC_DESC_INIT;
  fd.lanes = desc->lanes;
  /* A worker must answer at once; the client measures it over the wire anyway. */
  fd.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *dir = NULL;
  weft_status st = weft_fabric_open(&fd, &dir);
  if (st) {
    snprintf(err, errlen, "cannot open the worker's fabric: %s", weft_open_error());
    return st;
  }
  size_t n = weft_fabric_lane_count(dir);
  srv->groups = calloc(n + 1, sizeof *srv->groups);
  srv->lanes = calloc(n ? n : 1, sizeof *srv->lanes);
  if (!srv->groups || !srv->lanes) {
    weft_fabric_close(dir);
    snprintf(err, errlen, "out of memory");
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  srv->groups[0].fabric = dir;
  ticket_init(&srv->groups[0].lock);
  srv->ngroups = 1;
  srv->nlanes = n;
  for (size_t i = 0; i < n; i++) {
    lane_route *lr = &srv->lanes[i];
    lr->group = 0;
    lr->local = (int)i;
    atomic_init(&lr->down, 0);
    for (int k = 0; k < WEFT_OP_COUNT; k++) lr->scale[k] = 1.0;
    weft_lane_info li;
    if (weft_fabric_lane_info(dir, i, &li) || !li.name || li.failed) continue;
    weft_fabric_desc one = WEFT_FABRIC_DESC_INIT;
    one.lanes = li.name;
    one.calibration = WEFT_CALIBRATION_OFF;
    weft_fabric *f = NULL;
    if (weft_fabric_open(&one, &f)) continue;
    size_t at = 0;
    weft_lane_info lo;
    if (weft_fabric_lane_count(f) != 1 || weft_fabric_lane_find(f, li.name, &at) || weft_fabric_lane_info(f, at, &lo) ||
        lo.failed || lo.contracts != li.contracts) {
      weft_fabric_close(f);
      continue;
    }
    lane_group *g = &srv->groups[srv->ngroups];
    g->fabric = f;
    g->lane = i;
    ticket_init(&g->lock);
    lr->group = srv->ngroups++;
    lr->local = (int)at;
  }
  return WEFT_OK;
}

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
  srv->idle_timeout_ms = desc->idle_timeout_ms > 0 ? desc->idle_timeout_ms : desc->idle_timeout_ms < 0 ? -1 : 3600000;
  srv->handshake_timeout_ms = desc->handshake_timeout_ms > 0 ? desc->handshake_timeout_ms : 5000;
  srv->on_log = desc->on_log;
  srv->log_ctx = desc->ctx;
  srv->max_clients = desc->max_clients > 0 ? desc->max_clients : 64;
  srv->max_pending = desc->max_pending > 0 ? desc->max_pending : 64;
  srv->max_total = desc->max_total_resident ? desc->max_total_resident : default_max_total();
  atomic_init(&srv->total, 0);
  srv->max_streams = desc->max_streams > 0 ? (uint32_t)desc->max_streams : weft_net_default_streams();
  if (srv->max_streams > WEFT_NET_MAX_STREAMS) srv->max_streams = WEFT_NET_MAX_STREAMS;
  pthread_mutex_init(&srv->pend_lock, NULL);
  pthread_mutex_init(&srv->count_lock, NULL);
  pthread_mutex_init(&srv->reg_lock, NULL);
  weft_status st = open_lanes(srv, desc, err, errlen);
  if (st) {
    weft_net_server_destroy(srv);
    return st;
  }
  *out = srv;
  return WEFT_OK;
}

void weft_net_server_destroy(weft_net_server *srv) {
  if (!srv) return;
  for (size_t g = 0; g < srv->ngroups; g++) {
    weft_fabric_close(srv->groups[g].fabric);
    ticket_destroy(&srv->groups[g].lock);
  }
  free(srv->groups);
  free(srv->lanes);
  weft_net_tls_destroy(srv->tls);
  pthread_mutex_destroy(&srv->pend_lock);
  pthread_mutex_destroy(&srv->count_lock);
  pthread_mutex_destroy(&srv->reg_lock);
  free(srv->reg);
  OPENSSL_cleanse(srv->secret, sizeof srv->secret);
  free(srv);
}

weft_net_session *weft_net_session_create(weft_net_server *srv) {
  weft_net_session *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->srv = srv;
  s->next_id = 1;
  s->refs = 1;
  for (size_t i = 0; i < WEFT_NET_MAX_STREAMS; i++) s->stream_fd[i] = -1;
  /* The handle table comes with the first CREATE: a connection still in the handshake costs little. */
  if (RAND_bytes(s->nonce, sizeof s->nonce) != 1 || pthread_rwlock_init(&s->lock, NULL) != 0) {
    free(s);
    return NULL;
  }
  return s;
}

/* Drops one reference (the first connection's, or a stream's); the last frees the tensors. */
static void session_unref(weft_net_session *s) {
  weft_net_server *srv = s->srv;
  pthread_mutex_lock(&srv->reg_lock);
  int last = --s->refs == 0;
  pthread_mutex_unlock(&srv->reg_lock);
  if (!last) return;
  /* No fabric tensor outlives an op (each is wrapped and destroyed inside it): the floats are all. */
  for (size_t i = 0; i < s->nslots; i++) free(s->slots[i].data);
  mem_give(srv, s->resident);
  free(s->slots);
  pthread_rwlock_destroy(&s->lock);
  OPENSSL_cleanse(s->stream_key, sizeof s->stream_key);
  free(s);
}

/* Its first connection closed: no stream may join it any more, and those joined are shut down (their
 * threads see the connection end and drop their references). */
void weft_net_session_destroy(weft_net_session *s) {
  if (!s) return;
  weft_net_server *srv = s->srv;
  pthread_mutex_lock(&srv->reg_lock);
  for (size_t i = 0; i < srv->nreg; i++)
    if (srv->reg[i] == s) {
      srv->reg[i] = srv->reg[--srv->nreg];
      break;
    }
  for (size_t i = 0; i < WEFT_NET_MAX_STREAMS; i++)
    if (s->stream_fd[i] >= 0) shutdown(s->stream_fd[i], SHUT_RDWR);
  pthread_mutex_unlock(&srv->reg_lock);
  session_unref(s);
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

/* Where an op runs: a lane (directory index) and the group whose fabric runs it, or lane -1 and group 0 when
 * no lane could be chosen (the directory fabric then routes it, and says what is wrong). */
typedef struct op_plan {
  size_t group;
  int lane;
  double cost; /* its predicted seconds, added to the lane's pending while it waits and runs */
} op_plan;

/* The route query for an op, from its operands' shapes as the core reads them; 0 when the shapes give none
 * (the op's own checks then say what is wrong). Shapes are within the caps, so the products fit. */
static int op_query(const weft_net_request *r, const int nd[2], const int64_t *const dims[2], weft_route_query *q) {
  memset(q, 0, sizeof *q);
  q->op = r->op;
  q->contract = r->contract;
  if (r->op == WEFT_OP_MATMUL || r->op == WEFT_OP_MATMUL_ACC) {
    if (nd[0] < 2 || nd[1] < 2) return 0;
    int ta = r->params.i[0] != 0, tb = r->params.i[1] != 0;
    int64_t am = dims[0][nd[0] - 2], ak = dims[0][nd[0] - 1], bn = dims[1][nd[1] - 1];
    if (ta) am = dims[0][nd[0] - 1], ak = dims[0][nd[0] - 2];
    if (tb) bn = dims[1][nd[1] - 2];
    int64_t batch = 1;
    for (int d = 0; d < nd[0] - 2; d++) batch *= dims[0][d];
    q->batch = batch, q->m = am, q->n = bn, q->k = ak;
    return am >= 1 && ak >= 1 && bn >= 1;
  }
  /* The other ops: the size of their first input, as rows of its last dimension (the router's estimate). */
  if (nd[0] < 1) return 0;
  int64_t numel = 1;
  for (int d = 0; d < nd[0]; d++) numel *= dims[0][d];
  q->cols = dims[0][nd[0] - 1];
  q->rows = q->cols ? numel / q->cols : 0;
  return q->rows >= 1 && q->cols >= 1;
}

/* Chooses the lane of an op: a pinned one as asked; a routed one by the directory fabric's cost model
 * (weft_route_explain: every lane's predicted cost with the inputs on the host, as the worker's are). The
 * directory runs no op, so it predicts each lane idle; when the lane it picks has work queued or running
 * (other clients'), every lane's prediction, scaled by how long that lane's recent ops of this kind really
 * took, plus what is queued on it, decides instead. Lanes that failed are left out. Only this choice holds
 * the directory's lock, never an op on another lane. */
static void plan_op(weft_net_server *srv, const weft_net_request *r, const weft_route_query *q, int have_q,
                    op_plan *pl) {
  pl->group = 0;
  pl->lane = -1;
  pl->cost = 0;
  weft_route_explanation ex;
  ticket_take(&srv->groups[0].lock);
  int ok = have_q && weft_route_explain(srv->groups[0].fabric, q, &ex) == WEFT_OK && ex.nlanes == srv->nlanes;
  pthread_mutex_lock(&srv->pend_lock);
  if (r->lane >= 0) {
    pl->lane = r->lane;
    const weft_route_cost *c = ok ? &ex.lanes[r->lane] : NULL;
    if (c && c->eligible && c->total >= 0) pl->cost = c->total * srv->lanes[r->lane].scale[r->op];
  } else if (ok) {
    int chosen = ex.chosen;
    if (chosen >= 0 && (size_t)chosen < srv->nlanes && ex.lanes[chosen].eligible && ex.lanes[chosen].total >= 0 &&
        !atomic_load(&srv->lanes[chosen].down) && srv->lanes[chosen].pending == 0) {
      pl->lane = chosen; /* the core's own choice, as a fabric of its own would make it */
      pl->cost = ex.lanes[chosen].total * srv->lanes[chosen].scale[r->op];
    } else {
      double best = 0;
      for (size_t i = 0; i < srv->nlanes; i++) {
        const weft_route_cost *c = &ex.lanes[i];
        if (!c->eligible || !(c->total >= 0) || atomic_load(&srv->lanes[i].down)) continue;
        double own = c->total * srv->lanes[i].scale[r->op], t = own + srv->lanes[i].pending;
        if (pl->lane < 0 || t < best) best = t, pl->lane = (int)i, pl->cost = own;
      }
    }
  }
  if (pl->lane >= 0) {
    srv->lanes[pl->lane].pending += pl->cost;
    pl->group = srv->lanes[pl->lane].group;
  }
  pthread_mutex_unlock(&srv->pend_lock);
  ticket_give(&srv->groups[0].lock);
}

/* The op has left its lane after `ran` seconds on it (0: it failed). */
static void plan_done(weft_net_server *srv, const op_plan *pl, weft_op_kind kind, double ran) {
  if (pl->lane < 0) return;
  pthread_mutex_lock(&srv->pend_lock);
  lane_route *lr = &srv->lanes[pl->lane];
  lr->pending -= pl->cost;
  if (lr->pending < 1e-12) lr->pending = 0;
  if (ran > 0 && pl->cost > 0) {
    double ratio = ran / (pl->cost / lr->scale[kind]);
    ratio = ratio < 1e-3 ? 1e-3 : ratio > 1e6 ? 1e6 : ratio;
    lr->scale[kind] = 0.5 * lr->scale[kind] + 0.5 * ratio;
  }
  pthread_mutex_unlock(&srv->pend_lock);
}

/* The view slot k of r gives its handle: the view's shape, or the tensor's own. */
static int view_of(const weft_net_request *r, slot *const *sl, int k, const int64_t **dims) {
  if (r->shape_ndim[k]) {
    *dims = r->shape_dims[k];
    return r->shape_ndim[k];
  }
  *dims = sl[k] ? sl[k]->dims : NULL;
  return sl[k] ? sl[k]->ndim : 0;
}

/* Wraps a session's elements as a tensor of the handle's dtype (no copy: both dtypes are 4-byte cells). */
static weft_status wrap_typed(weft_fabric *f, int nd, const int64_t *dims, slot *sl, weft_tensor **out) {
  weft_status st = weft_tensor_wrap(f, nd, dims, sl->data, out);
  if (!st) (*out)->dtype = sl->dtype;
  return st;
}

static int run_op(weft_net_session *s, const weft_net_header *h, const weft_net_request *r, weft_net_buf *b) {
  const weft_optable_entry *e = &weft_optable[r->op];
  const char *opname = e->name;
  slot *sl[WEFT_NET_OP_SLOTS] = {0};
  /* Every operand against the table: present where required, a handle of this connection, a view within its
   * tensor, the dtype the table wants. weft_op_run checks shapes and parameters again. */
  for (int k = 0; k < r->nin + r->nout; k++) {
    int in = k < r->nin, i = in ? k : k - r->nin, at = in ? WEFT_NET_IN(i) : WEFT_NET_OUT(i);
    const char *name = in ? e->in_name[i] : e->out_name[i];
    int optional = (int)(((in ? e->in_optional : e->out_optional) >> i) & 1u);
    if (!r->handles[at]) {
      if (!optional)
        return errorf(s, b, h, WEFT_ERR_INVALID_ARGUMENT, "%s needs a tensor as its %s (%s %d)", opname, name,
                      in ? "input" : "output", i);
      continue;
    }
    sl[at] = find(s, r->handles[at]);
    if (!sl[at])
      return errorf(s, b, h, WEFT_ERR_NOT_FOUND, "handle %llu (%s's %s) refers to no tensor of this connection",
                    (unsigned long long)r->handles[at], opname, name);
    /* A view may cover a prefix of the tensor's elements, never more. */
    if (r->shape_ndim[at] && r->shape_numel[at] > sl[at]->numel)
      return errorf(s, b, h, WEFT_ERR_SHAPE, "%s's %s: a view of %llu elements exceeds its tensor's %llu", opname, name,
                    (unsigned long long)r->shape_numel[at], (unsigned long long)sl[at]->numel);
  }
  /* Required operands left off the end count as absent. */
  for (int i = r->nin; i < e->nin; i++)
    if (!((e->in_optional >> i) & 1u))
      return errorf(s, b, h, WEFT_ERR_INVALID_ARGUMENT, "%s needs a tensor as its %s (input %d)", opname,
                    e->in_name[i], i);
  for (int o = r->nout; o < e->nout; o++)
    if (!((e->out_optional >> o) & 1u))
      return errorf(s, b, h, WEFT_ERR_INVALID_ARGUMENT, "%s needs a tensor as its %s (output %d)", opname,
                    e->out_name[o], o);
  weft_dtype d0 = sl[0] ? sl[0]->dtype : WEFT_DTYPE_F32;
  for (int k = 0; k < WEFT_NET_OP_SLOTS; k++) {
    if (!sl[k]) continue;
    int in = k < WEFT_OP_MAX_IN, i = in ? k : k - WEFT_OP_MAX_IN;
    int rule = in ? e->in_dt[i] : e->out_dt[i];
    weft_dtype want = rule == WEFT_DT_SAME ? d0 : rule == WEFT_DT_I32 ? WEFT_DTYPE_I32 : WEFT_DTYPE_F32;
    if (sl[k]->dtype != want)
      return errorf(s, b, h, WEFT_ERR_INVALID_ARGUMENT, "%s's %s is an %s tensor (handle %llu); it must be %s", opname,
                    in ? e->in_name[i] : e->out_name[i], weft_dtype_str(sl[k]->dtype),
                    (unsigned long long)r->handles[k], weft_dtype_str(want));
  }
  weft_net_server *srv = s->srv;
  if (r->lane >= 0 && (size_t)r->lane >= srv->nlanes)
    return errorf(s, b, h, WEFT_ERR_NOT_FOUND, "%s: lane %d does not exist (the worker has %zu lanes)", opname,
                  (int)r->lane, srv->nlanes);
  int qnd[2] = {0};
  const int64_t *qdims[2] = {0};
  for (int i = 0; i < 2; i++) qnd[i] = view_of(r, sl, i, &qdims[i]);
  weft_route_query q;
  int have_q = op_query(r, qnd, qdims, &q);
  size_t attempt = 0;
retry:;
  op_plan pl;
  plan_op(srv, r, &q, have_q, &pl);
  lane_group *g = &srv->groups[pl.group];
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.contract = r->contract;
  od.lane = pl.lane < 0 ? WEFT_LANE_AUTO : srv->lanes[pl.lane].local;
  weft_fabric *f = g->fabric;
  weft_tensor *t[WEFT_NET_OP_SLOTS] = {0};
  int owner[WEFT_NET_OP_SLOTS] = {0}; /* t[k] was wrapped for slot k (not shared with an earlier slot) */
  ticket_take(&g->lock);
  double began = mono_s();
  weft_status st = WEFT_OK;
  for (int k = 0; k < WEFT_NET_OP_SLOTS && !st; k++) {
    if (!sl[k]) continue;
    const int64_t *dims;
    int nd = view_of(r, sl, k, &dims);
    /* The same handle in the same shape is one tensor, so the core sees in-place ops as such. */
    for (int j = 0; j < k && !t[k]; j++) {
      const int64_t *dj;
      int ndj = view_of(r, sl, j, &dj);
      if (sl[j] == sl[k] && ndj == nd && !memcmp(dj, dims, sizeof(int64_t) * (size_t)nd)) t[k] = t[j];
    }
    if (t[k]) continue;
    st = wrap_typed(f, nd, dims, sl[k], &t[k]);
    owner[k] = 1;
  }
  if (!st) {
    weft_tensor *ins[WEFT_OP_MAX_IN], *outs[WEFT_OP_MAX_OUT];
    for (int i = 0; i < WEFT_OP_MAX_IN; i++) ins[i] = t[WEFT_NET_IN(i)];
    for (int o = 0; o < WEFT_OP_MAX_OUT; o++) outs[o] = t[WEFT_NET_OUT(o)];
    st = weft_op_run(f, &od, r->op, ins, r->nin, outs, r->nout, &r->params);
  }
  int lane = weft_fabric_last_lane(f);
  if (lane >= 0 && pl.group) lane = (int)g->lane; /* as the client numbers lanes: the directory's index */
  if (st) snprintf(s->err, sizeof s->err, "%s", weft_fabric_last_error(f));
  /* Outputs back into the session's elements (a no-copy read when the op ran on a host lane): every output,
   * those the op reads as well as writes (adamw's, an accumulated gradient, copy_slice's dst) included. An
   * output that is also an input (an in-place op: the same handle in the same shape) is one tensor, wrapped
   * for the input's slot: it is read back all the same, once. */
  for (int o = 0; o < WEFT_OP_MAX_OUT && !st; o++) {
    weft_tensor *to = t[WEFT_NET_OUT(o)];
    int seen = !to;
    for (int p = 0; p < o && !seen; p++) seen = t[WEFT_NET_OUT(p)] == to;
    if (seen) continue;
    slot *so = sl[WEFT_NET_OUT(o)];
    size_t n = weft_tensor_numel(to);
    st = so->dtype == WEFT_DTYPE_I32 ? weft_tensor_read_i32(to, (int32_t *)(void *)so->data, n)
                                     : weft_tensor_read(to, so->data, n);
    if (st) snprintf(s->err, sizeof s->err, "%s", weft_fabric_last_error(f));
  }
  for (int k = 0; k < WEFT_NET_OP_SLOTS; k++)
    if (owner[k]) weft_tensor_destroy(t[k]);
  weft_lane_info li;
  if (st && pl.lane >= 0 && !weft_fabric_lane_info(f, (size_t)od.lane, &li) && li.failed)
    atomic_store(&srv->lanes[pl.lane].down, 1);
  double ran = st ? 0 : mono_s() - began;
  ticket_give(&g->lock);
  plan_done(srv, &pl, r->op, ran);
  /* A routed op whose lane failed under it goes to the next best lane (the session's elements are intact: a
   * lane that can fail is a device lane, which wrote nothing back). */
  if (st == WEFT_ERR_LANE_FAILED && r->lane < 0 && pl.lane >= 0 && ++attempt < srv->nlanes) goto retry;
  if (st) {
    reply_error(b, h, st, s->err);
    return 1;
  }
  uint8_t *p = reply_begin(b, h, WEFT_OK, 4);
  if (p) weft_net_put32(p, (uint32_t)lane);
  return 1;
}

/* -------------------------------------------------------------------------------------------- frames */

/* A WRITE's or READ's target: a handle of this session, the range within its tensor. The caller holds the
 * session's lock (shared or exclusive). */
static weft_status data_check(weft_net_session *s, const weft_net_request *r, slot **out, char *err, size_t errlen) {
  slot *sl = find(s, r->handle);
  *out = sl;
  if (!sl) {
    snprintf(err, errlen, "handle %llu refers to no tensor of this connection", (unsigned long long)r->handle);
    return WEFT_ERR_NOT_FOUND;
  }
  /* Both are at most 2^28 (the decoder's caps), so the sum cannot wrap. */
  if (r->offset + r->numel > sl->numel) {
    snprintf(err, errlen, "%s of %llu elements at %llu runs past a tensor of %llu",
             r->type == WEFT_NET_WRITE ? "write" : "read", (unsigned long long)r->numel,
             (unsigned long long)r->offset, (unsigned long long)sl->numel);
    return WEFT_ERR_SHAPE;
  }
  return WEFT_OK;
}

/* STREAMS: grants up to the worker's --max-streams connections (this one included) and registers the
 * session so that other connections may JOIN it. The join key comes from the secret and both nonces of the
 * mutual proof (never sent); without a secret the worker draws it and sends it here. */
static int grant_streams(weft_net_session *s, const weft_net_header *h, const weft_net_request *r, weft_net_buf *b) {
  weft_net_server *srv = s->srv;
  if (!(s->client_caps & WEFT_NET_CAP_STREAMS))
    return errorf(s, b, h, WEFT_ERR_STATE, "streams were not announced in this connection's hello (capability %u)",
                  WEFT_NET_CAP_STREAMS);
  if (s->streams_asked)
    return errorf(s, b, h, WEFT_ERR_STATE, "streams were asked for already on this connection (granted %u)",
                  (unsigned)(s->stream_granted ? s->stream_granted : 1));
  s->streams_asked = 1;
  uint32_t granted = r->streams < srv->max_streams ? r->streams : srv->max_streams;
  uint8_t key[WEFT_NET_KEY_BYTES] = {0};
  uint64_t id = 0;
  if (granted > 1) {
    weft_status st = WEFT_OK;
    if (srv->need_auth)
      st = weft_net_stream_key(srv->secret, srv->secret_len, s->nonce, s->client_nonce, srv->identity,
                               s->stream_key);
    else if (RAND_bytes(s->stream_key, sizeof s->stream_key) != 1)
      st = WEFT_ERR_INTERNAL;
    if (!st && !srv->need_auth) memcpy(key, s->stream_key, sizeof key);
    pthread_mutex_lock(&srv->reg_lock);
    if (!st && srv->nreg == srv->reg_cap) {
      size_t cap = srv->reg_cap ? 2 * srv->reg_cap : 16;
      weft_net_session **p = realloc(srv->reg, cap * sizeof *p);
      if (p) srv->reg = p, srv->reg_cap = cap;
      else st = WEFT_ERR_OUT_OF_MEMORY;
    }
    /* A random id, none other's (and not 0, which means none). */
    for (int fresh = 0; !st && !fresh;) {
      uint8_t idb[8];
      if (RAND_bytes(idb, sizeof idb) != 1) st = WEFT_ERR_INTERNAL;
      id = weft_net_get64(idb);
      fresh = id != 0;
      for (size_t i = 0; fresh && i < srv->nreg; i++) fresh = srv->reg[i]->stream_session != id;
    }
    if (!st) {
      srv->reg[srv->nreg++] = s;
      s->stream_session = id;
      s->stream_granted = granted;
    }
    pthread_mutex_unlock(&srv->reg_lock);
    if (st) {
      OPENSSL_cleanse(key, sizeof key);
      return errorf(s, b, h, st, "cannot grant streams now (out of memory or randomness); this connection alone "
                    "carries the transfers");
    }
  } else {
    granted = 1;
  }
  size_t idlen = strlen(srv->identity);
  uint8_t *p = reply_begin(b, h, WEFT_OK, WEFT_NET_STREAMS_REPLY_BYTES + 2 + idlen);
  if (p) {
    weft_net_put32(p, granted);
    weft_net_put64(p + 4, id);
    memcpy(p + 12, key, WEFT_NET_KEY_BYTES);
    weft_net_put16(p + WEFT_NET_STREAMS_REPLY_BYTES, (uint16_t)idlen);
    memcpy(p + WEFT_NET_STREAMS_REPLY_BYTES + 2, srv->identity, idlen);
  }
  OPENSSL_cleanse(key, sizeof key);
  return 1;
}

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
      if (r.version < WEFT_NET_VERSION)
        errorf(s, b, h, WEFT_ERR_UNSUPPORTED, "this worker speaks protocol %u; update the client (it speaks %u)",
               (unsigned)WEFT_NET_VERSION, (unsigned)r.version);
      else
        errorf(s, b, h, WEFT_ERR_UNSUPPORTED, "protocol version %u is not spoken here (this worker speaks %u); "
               "update the worker", (unsigned)r.version, (unsigned)WEFT_NET_VERSION);
      return 0;
    }
    s->hello = 1;
    s->client_caps = r.caps;
    uint8_t *p = reply_begin(b, h, WEFT_OK, 12 + WEFT_NET_NONCE_BYTES + 12);
    if (!p) return 0;
    weft_net_put32(p, WEFT_NET_VERSION);
    weft_net_put32(p + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256 | (srv->need_auth ? WEFT_NET_CAP_AUTH_MUTUAL : 0) |
                              (srv->max_streams > 1 ? WEFT_NET_CAP_STREAMS : 0));
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
    weft_fabric *dir = srv->groups[0].fabric;
    ticket_take(&srv->groups[0].lock);
    size_t n = weft_fabric_lane_count(dir), len = 4;
    /* Sized exactly as the loop below writes: a lane that cannot be described still gets its entry. */
    for (size_t i = 0; i < n; i++) {
      weft_lane_info li;
      len += 4 + 8 + 6;
      if (weft_fabric_lane_info(dir, i, &li)) continue;
      len += (li.name ? strnlen(li.name, 255) : 0) + (li.kind ? strnlen(li.kind, 255) : 0) +
             (li.device ? strnlen(li.device, 255) : 0);
    }
    uint8_t *p = reply_begin(b, h, WEFT_OK, len);
    if (p) {
      weft_net_put32(p, (uint32_t)n);
      p += 4;
      for (size_t i = 0; i < n; i++) {
        weft_lane_info li;
        if (weft_fabric_lane_info(dir, i, &li)) memset(&li, 0, sizeof li);
        weft_net_put32(p, li.failed || atomic_load(&srv->lanes[i].down) ? 0 : li.contracts);
        weft_net_put64(p + 4, li.ops & WEFT_OPS_ALL);
        p += 12;
        const char *strs[3] = {li.name, li.kind, li.device};
        for (int k = 0; k < 3; k++) {
          size_t sl = strs[k] ? strnlen(strs[k], 255) : 0;
          weft_net_put16(p, (uint16_t)sl);
          if (sl) memcpy(p + 2, strs[k], sl);
          p += 2 + sl;
        }
      }
    }
    ticket_give(&srv->groups[0].lock);
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
    if (!s->slots && !(s->slots = calloc(WEFT_NET_MAX_HANDLES, sizeof *s->slots)))
      return errorf(s, b, h, WEFT_ERR_OUT_OF_MEMORY, "out of memory for the handle table");
    if (!mem_take(srv, bytes))
      return errorf(s, b, h, WEFT_ERR_OUT_OF_MEMORY,
                    "a tensor of %llu bytes would pass the worker's cap across all connections (%llu of %llu bytes "
                    "held)",
                    (unsigned long long)bytes, (unsigned long long)atomic_load(&srv->total),
                    (unsigned long long)srv->max_total);
    float *data = calloc(r.numel ? r.numel : 1, sizeof(float));
    if (!data) {
      mem_give(srv, bytes);
      return errorf(s, b, h, WEFT_ERR_OUT_OF_MEMORY, "out of memory for %llu bytes", (unsigned long long)bytes);
    }
    slot *sl = &s->slots[s->nslots++];
    sl->id = s->next_id++;
    sl->dtype = r.dtype;
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
    slot *sl = NULL;
    weft_status dst = data_check(s, &r, &sl, s->err, sizeof s->err);
    if (dst) {
      reply_error(b, h, dst, s->err);
      return 1;
    }
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
    mem_give(srv, sl->numel * 4);
    *sl = s->slots[--s->nslots];
    reply_begin(b, h, WEFT_OK, 0);
    return 1;
  }
  case WEFT_NET_RETYPE: {
    slot *sl = find(s, r.handle);
    if (!sl)
      return errorf(s, b, h, WEFT_ERR_NOT_FOUND, "handle %llu refers to no tensor of this connection",
                    (unsigned long long)r.handle);
    sl->dtype = r.dtype;
    reply_begin(b, h, WEFT_OK, 0);
    return 1;
  }
  case WEFT_NET_OP: return run_op(s, h, &r, b);
  case WEFT_NET_STREAMS: return grant_streams(s, h, &r, b);
  case WEFT_NET_JOIN:
    return errorf(s, b, h, WEFT_ERR_STATE,
                  "join is the first frame of a stream connection, never a request on a session's own connection");
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

/* The fuzzer's way to the zero-copy WRITE path without a socket (serve_conn's receive, worker.h). */
float *weft_net_session_write_target(weft_net_session *s, const weft_net_header *h, const uint8_t *prefix) {
  return session_write_target(s, h, prefix);
}

/* ------------------------------------------------------------------------------------------- sockets */

/* A connection. Every read and write of its byte stream goes through conn_read and conn_write, so a
 * transport under the frames (TLS) wraps them in one place. */
typedef struct conn {
  weft_net_server *srv;
  int fd;
  weft_net_conn nc; /* the byte stream: plain, or TLS over fd (its SSL moves with the connection) */
  int tls_wait;     /* TLS's handshake is not done: nothing can be said to the peer yet */
  int tls_out;      /* that handshake waits to write */
  weft_net_session *s;
  uint32_t stream; /* 0: the session's own connection; k > 0: stream k joined to it (WRITE and READ only) */
  char err[WEFT_NET_MAX_MESSAGE]; /* this connection's messages (a stream shares its session, not this) */
  /* While in the handshake stage: */
  double deadline; /* monotonic seconds by which the handshake must be complete */
  uint64_t seq;    /* accept order: the oldest is dropped first when the stage is full */
  uint8_t buf[WEFT_NET_HEADER_BYTES + 64]; /* the frame being read (handshake frames are small) */
  size_t have, want;
  weft_net_header h;
  char peer[80]; /* "host:port" of the peer, for the log */
} conn;

/* Reads up to n bytes once: the count read, 0 when the peer closed, -1 on an error (a blocking read's
 * timeout too), -2 when nothing is there now (nonblock only). */
static ssize_t conn_read(conn *c, void *p, size_t n, int nonblock) {
  if (c->nc.ssl) {
    /* The fd is non-blocking in the stage and blocking (with the io timeout) on serve_conn's thread. */
    long k = weft_net_conn_read_some(&c->nc, p, n);
    return k == -2 && !nonblock ? -1 : (ssize_t)k;
  }
  for (;;) {
    ssize_t k = recv(c->fd, p, n, nonblock ? MSG_DONTWAIT : 0);
    if (k >= 0) return k;
    if (errno == EINTR) continue;
    return nonblock && (errno == EAGAIN || errno == EWOULDBLOCK) ? -2 : -1;
  }
}

/* Writes up to n bytes once: the count written, -1 on an error, -2 when it cannot now (nonblock only). */
static ssize_t conn_write(conn *c, const void *p, size_t n, int nonblock) {
  if (c->nc.ssl) {
    long k = weft_net_conn_write_some(&c->nc, p, n);
    return k == -2 && !nonblock ? -1 : (ssize_t)k;
  }
  for (;;) {
    ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL | (nonblock ? MSG_DONTWAIT : 0));
    if (k >= 0) return k;
    if (errno == EINTR) continue;
    return nonblock && (errno == EAGAIN || errno == EWOULDBLOCK) ? -2 : -1;
  }
}

static int conn_recv_all(conn *c, void *p, size_t n) {
  uint8_t *q = p;
  while (n) {
    ssize_t k = conn_read(c, q, n, 0);
    if (k <= 0) return 0;
    q += k;
    n -= (size_t)k;
  }
  return 1;
}

static int conn_send_all(conn *c, const void *p, size_t n) {
  const uint8_t *q = p;
  while (n) {
    ssize_t k = conn_write(c, q, n, 0);
    if (k <= 0) return 0;
    q += k;
    n -= (size_t)k;
  }
  return 1;
}

/* Reads and drops n bytes: a frame refused for its size keeps the stream in step without holding it. */
static int conn_discard(conn *c, size_t n) {
  uint8_t junk[16384];
  while (n) {
    size_t k = n < sizeof junk ? n : sizeof junk;
    if (!conn_recv_all(c, junk, k)) return 0;
    n -= k;
  }
  return 1;
}

static void set_timeout(int fd, int ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void conn_free(conn *c) {
  if (c->stream) {
    /* A stream: its session lives on with its first connection (and the other streams). */
    weft_net_server *srv = c->srv;
    pthread_mutex_lock(&srv->reg_lock);
    if (c->s->stream_fd[c->stream] == c->fd) c->s->stream_fd[c->stream] = -1;
    pthread_mutex_unlock(&srv->reg_lock);
    weft_net_conn_close(&c->nc);
    session_unref(c->s);
  } else {
    weft_net_session_destroy(c->s);
    weft_net_conn_close(&c->nc); /* closes fd */
  }
  free(c);
}

/* Grows a connection's receive buffer to n bytes, counted in the worker-wide budget with the tensors:
 * 1 done, 0 the budget is spent (nothing changed), -1 out of memory. */
static int payload_grow(weft_net_server *srv, uint8_t **payload, size_t *cap, size_t n) {
  if (n <= *cap) return 1;
  if (!mem_take(srv, n - *cap)) return 0;
  uint8_t *p = realloc(*payload, n);
  if (!p) {
    mem_give(srv, n - *cap);
    return -1;
  }
  *payload = p;
  *cap = n;
  return 1;
}

/* An authenticated connection, on a thread of its own: frames until the peer closes, breaks the stream or
 * stays silent past the idle timeout. */
/* A READ answered straight from the tensor: the header, the count and the elements where they lie (no staging
 * copy; through TLS they are encrypted from there), under the session's lock shared. A READ that is not
 * valid is answered with its error in `out`. 0 when the connection broke. */
static int answer_read(conn *c, const weft_net_header *h, const uint8_t *payload, weft_net_buf *out) {
  weft_net_session *s = c->s;
  weft_net_request r;
  slot *sl = NULL;
  weft_status st = weft_net_request_decode(WEFT_NET_READ, payload, h->length, &c->srv->limits, &r, c->err,
                                           sizeof c->err);
  if (st) {
    reply_error(out, h, st, c->err);
    return 1;
  }
  pthread_rwlock_rdlock(&s->lock);
  st = data_check(s, &r, &sl, c->err, sizeof c->err);
  int ok = 1;
  if (!st) {
    uint8_t head[WEFT_NET_HEADER_BYTES + 8];
    weft_net_header rh = {WEFT_NET_MAGIC, (uint16_t)(WEFT_NET_READ | WEFT_NET_REPLY), 0, h->request_id,
                          (uint32_t)(8 + r.numel * 4)};
    weft_net_header_encode(&rh, head);
    weft_net_put64(head + WEFT_NET_HEADER_BYTES, r.numel);
    const uint8_t *piece[3] = {head, (const uint8_t *)(sl->data + r.offset), NULL};
    const size_t len[3] = {sizeof head, (size_t)r.numel * 4, 0};
    ok = weft_net_conn_send3(&c->nc, piece, len);
  }
  pthread_rwlock_unlock(&s->lock);
  if (st) reply_error(out, h, st, c->err);
  return ok;
}

/* A stream's WRITE that the zero-copy path did not take: answered with its error (a valid one, which only a
 * race with the session's own connection could bring here, is copied in). */
static void answer_stream_write(conn *c, const weft_net_header *h, const uint8_t *payload, weft_net_buf *out) {
  weft_net_session *s = c->s;
  weft_net_request r;
  slot *sl = NULL;
  weft_status st = weft_net_request_decode(WEFT_NET_WRITE, payload, h->length, &c->srv->limits, &r, c->err,
                                           sizeof c->err);
  if (!st) {
    pthread_rwlock_rdlock(&s->lock);
    st = data_check(s, &r, &sl, c->err, sizeof c->err);
    if (!st) memcpy(sl->data + r.offset, r.data, r.numel * 4);
    pthread_rwlock_unlock(&s->lock);
  }
  if (st) reply_error(out, h, st, c->err);
  else reply_begin(out, h, WEFT_OK, 0);
}

/* An authenticated connection (a session's own, or a stream joined to one), on a thread of its own: frames
 * until the peer closes, breaks the stream or stays silent past the idle timeout. */
static void *serve_conn(void *arg) {
  conn *c = arg;
  weft_net_server *srv = c->srv;
  weft_net_session *s = c->s;
  weft_net_buf out = {0};
  uint8_t *payload = NULL;
  size_t payload_cap = 0; /* held in the worker-wide budget */
  /* Blocking from here, under the io timeout (the stage had the fd non-blocking). */
  fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK);
  set_timeout(c->fd, srv->io_timeout_ms);
  for (;;) {
    uint8_t hb[WEFT_NET_HEADER_BYTES];
    struct pollfd pfd = {c->fd, POLLIN, 0};
    int pr;
    /* Between frames a client may sit idle up to the idle timeout (its fabric holds the lane open);
     * keepalive finds peers that vanished. Once a frame starts, the io timeout applies. A stream idles as
     * long as its session: the session's own connection's timeout ends both. */
    pr = 1;
    /* Bytes TLS already took off the socket and decrypted are invisible to poll: poll only when none wait. */
    if (!weft_net_conn_pending(&c->nc))
      while ((pr = poll(&pfd, 1, c->stream ? -1 : srv->idle_timeout_ms)) < 0 && errno == EINTR) {
      }
    if (pr <= 0 || !conn_recv_all(c, hb, sizeof hb)) break;
    weft_net_header h;
    out.len = 0;
    weft_status st = weft_net_header_decode(hb, &srv->limits, &h, c->err, sizeof c->err);
    if (st) {
      /* The stream cannot be resynchronised after a bad header: say why, then close. Nothing is read or
       * allocated on the strength of the peer's length. */
      reply_error(&out, &h, st, c->err);
      conn_send_all(c, out.data, out.len);
      break;
    }
    if (c->stream && h.type != WEFT_NET_WRITE && h.type != WEFT_NET_READ) {
      /* A stream moves bytes; everything else belongs to the session's own connection. */
      if (!conn_discard(c, h.length)) break;
      snprintf(c->err, sizeof c->err, "a stream connection carries only write and read (type %u refused); send "
               "other requests on the session's own connection", (unsigned)h.type);
      reply_error(&out, &h, WEFT_ERR_INVALID_ARGUMENT, c->err);
      if (!conn_send_all(c, out.data, out.len)) break;
      continue;
    }
    /* The length is capped by max_frame above. The buffer is kept between frames (large uploads would
     * otherwise fault in fresh pages every frame), grows only to what a frame actually needs, and counts
     * against the worker-wide budget while it is held. */
    size_t skip = 0;
    int grown = 1;
    if (h.type == WEFT_NET_WRITE && h.length >= 24) {
      /* Large uploads land straight in the tensor once the prefix says where, and is valid; streams of the
       * session write theirs at once (the lock is shared), nothing may free the tensor meanwhile. */
      uint8_t prefix[24];
      if (!conn_recv_all(c, prefix, sizeof prefix)) break;
      pthread_rwlock_rdlock(&s->lock);
      float *dst = session_write_target(s, &h, prefix);
      int ok = !dst || conn_recv_all(c, (uint8_t *)dst, h.length - 24u);
      pthread_rwlock_unlock(&s->lock);
      if (!ok) break;
      if (dst) {
        reply_begin(&out, &h, WEFT_OK, 0);
        if (!conn_send_all(c, out.data, out.len)) break;
        continue;
      }
      grown = payload_grow(srv, &payload, &payload_cap, h.length);
      if (grown > 0) {
        memcpy(payload, prefix, sizeof prefix);
        if (!conn_recv_all(c, payload + 24, h.length - 24u)) break;
      } else {
        skip = h.length - 24u;
      }
    } else {
      grown = payload_grow(srv, &payload, &payload_cap, h.length);
      if (grown > 0 && !conn_recv_all(c, payload, h.length)) break;
      if (grown <= 0) skip = h.length;
    }
    if (grown < 0) break;
    int keep = 1;
    if (!grown) {
      if (!conn_discard(c, skip)) break;
      snprintf(c->err, sizeof c->err,
               "a frame of %u bytes would pass the worker's memory cap across all connections (%llu of %llu bytes "
               "held)",
               (unsigned)h.length, (unsigned long long)atomic_load(&srv->total), (unsigned long long)srv->max_total);
      reply_error(&out, &h, WEFT_ERR_OUT_OF_MEMORY, c->err);
    } else if (h.type == WEFT_NET_READ) {
      if (!answer_read(c, &h, payload, &out)) break;
    } else if (c->stream) {
      answer_stream_write(c, &h, payload, &out);
    } else {
      pthread_rwlock_wrlock(&s->lock);
      keep = weft_net_session_handle(s, &h, payload, &out);
      pthread_rwlock_unlock(&s->lock);
    }
    if (out.len && !conn_send_all(c, out.data, out.len)) break;
    if (!keep) break;
    /* A large reply is transient: its buffer is not kept between frames. */
    if (out.cap > ((size_t)1 << 20)) weft_net_buf_free(&out);
  }
  free(payload);
  mem_give(srv, payload_cap);
  weft_net_buf_free(&out);
  wlog(srv, "%s left", c->peer);
  conn_free(c);
  pthread_mutex_lock(&srv->count_lock);
  srv->clients--;
  pthread_mutex_unlock(&srv->count_lock);
  return NULL;
}

/* ------------------------------------------------------------------------------------ handshake stage */

/* Connections that have not completed the handshake live here, in one poll() loop on the accepting thread
 * (no thread, no handle table, no buffer beyond a handshake frame each): they count against their own cap
 * (max_pending), never against the clients', and are dropped at the handshake deadline. When the stage is
 * full the oldest is dropped for the newcomer, so sockets that idle or trickle can delay a client that
 * holds the secret by a round trip at most, never lock it out. */

enum { STAGE_WAIT, STAGE_DROP, STAGE_READY };

static int session_ready(const weft_net_session *s) { return s->hello && (!s->srv->need_auth || s->authed); }

/* Sends a handshake reply without waiting: the socket's send buffer is empty then, so a reply of a few dozen
 * bytes fits; a peer that does not read is not waited for. */
static int stage_send(conn *c, const weft_net_buf *b) {
  return !b->len || conn_write(c, b->data, b->len, 1) == (ssize_t)b->len;
}

static void stage_refuse(conn *c, const weft_net_header *h, weft_status st, const char *msg) {
  /* Inside TLS once it is up; before (or while) its handshake runs, nothing the peer could read. */
  if (c->tls_wait) return;
  weft_net_buf b = {0};
  reply_error(&b, h, st, msg);
  stage_send(c, &b);
  weft_net_buf_free(&b);
}

/* The frame the stage reads next, 0 when the handshake is complete. */
static uint16_t stage_expect(const weft_net_session *s) {
  if (!s->hello) return WEFT_NET_HELLO;
  if (!s->srv->need_auth || s->authed) return 0;
  return s->auth_started ? WEFT_NET_AUTH_FINISH : WEFT_NET_AUTH_START;
}

static const char *type_word(uint16_t t) {
  return t == WEFT_NET_HELLO        ? "hello"
         : t == WEFT_NET_AUTH_START ? "auth_start"
         : t == WEFT_NET_JOIN       ? "join"
                                    : "auth_finish";
}

/* JOIN, a stream connection's first frame: the session it names is looked up, checked and joined under the
 * registry's lock. The session must be open and have granted streams, the index must be one it granted and
 * that has not joined yet (each joins once, so a copy of a join joins nothing), and the proof, keyed by the
 * session's stream key and naming the session, the index and this worker, must be right (constant time).
 * Anything else is refused and closed. The connection then serves the session's WRITE and READ. */
static int stage_join(conn *c) {
  weft_net_server *srv = c->srv;
  weft_net_request r;
  weft_status st = weft_net_request_decode(WEFT_NET_JOIN, c->buf + WEFT_NET_HEADER_BYTES, c->h.length, &srv->limits,
                                           &r, c->s->err, sizeof c->s->err);
  if (st) {
    stage_refuse(c, &c->h, st, c->s->err);
    return STAGE_DROP;
  }
  weft_net_session *target = NULL;
  uint8_t want[WEFT_NET_MAC_BYTES];
  st = WEFT_ERR_STATE;
  pthread_mutex_lock(&srv->reg_lock);
  for (size_t i = 0; i < srv->nreg && !target; i++)
    if (srv->reg[i]->stream_session == r.session) target = srv->reg[i];
  uint32_t ix = r.streams;
  if (!target)
    snprintf(c->err, sizeof c->err, "no session takes streams under id %llu (it closed, or never asked for streams)",
             (unsigned long long)r.session);
  else if (ix < 1 || ix >= target->stream_granted)
    snprintf(c->err, sizeof c->err, "stream %u was not granted: the session has streams 1 to %u", (unsigned)ix,
             (unsigned)target->stream_granted - 1);
  else if (target->joined[ix / 64] >> (ix % 64) & 1)
    snprintf(c->err, sizeof c->err, "stream %u of this session has joined already (each joins once)", (unsigned)ix);
  else if (weft_net_join_proof(target->stream_key, r.session, ix, srv->identity, want) != WEFT_OK ||
           CRYPTO_memcmp(want, r.mac, WEFT_NET_MAC_BYTES) != 0) {
    st = WEFT_ERR_INVALID_ARGUMENT;
    snprintf(c->err, sizeof c->err, "wrong join proof for stream %u of session %llu (worker '%s')", (unsigned)ix,
             (unsigned long long)r.session, srv->identity);
  } else {
    st = WEFT_OK;
    target->joined[ix / 64] |= (uint64_t)1 << (ix % 64);
    target->refs++;
    target->stream_fd[ix] = c->fd;
  }
  pthread_mutex_unlock(&srv->reg_lock);
  OPENSSL_cleanse(want, sizeof want);
  if (st) {
    stage_refuse(c, &c->h, st, c->err);
    snprintf(c->s->err, sizeof c->s->err, "%s", c->err); /* for the connection log */
    return STAGE_DROP;
  }
  weft_net_session_destroy(c->s); /* the fresh one it was accepted with: it holds nothing */
  c->s = target;
  c->stream = ix;
  weft_net_buf b = {0};
  reply_begin(&b, &c->h, WEFT_OK, 0);
  int sent = stage_send(c, &b);
  weft_net_buf_free(&b);
  return sent ? STAGE_READY : STAGE_DROP;
}

/* Reads what the peer sent (at most the rest of the current frame, so nothing past the handshake is taken
 * from the socket; with TLS, what the TLS layer took stays in it and moves with the connection) and answers
 * a frame once it is whole. With TLS, its handshake runs here first, non-blocking, under the same deadline. */
static int stage_step(conn *c) {
  weft_net_server *srv = c->srv;
  weft_net_session *s = c->s;
  if (c->tls_wait) {
    int r = weft_net_conn_accept_step(&c->nc, srv->tls, &c->tls_out, s->err, sizeof s->err);
    if (r < 0) return STAGE_DROP;
    if (r == 0) return STAGE_WAIT;
    c->tls_wait = c->tls_out = 0;
  }
  ssize_t k = conn_read(c, c->buf + c->have, c->want - c->have, 1);
  if (k == -2) return STAGE_WAIT;
  if (k <= 0) return STAGE_DROP;
  c->have += (size_t)k;
  if (c->have < c->want) return STAGE_WAIT;
  if (c->want == WEFT_NET_HEADER_BYTES) {
    weft_status st = weft_net_header_decode(c->buf, &srv->limits, &c->h, s->err, sizeof s->err);
    if (st) {
      stage_refuse(c, &c->h, st, s->err);
      return STAGE_DROP;
    }
    /* Before the handshake completes only its own frames are read, each at its fixed size: anything else
     * is refused and the connection closed before a byte of its payload is read or allocated. */
    uint16_t expect = stage_expect(s);
    /* A stream connection joins a session in place of its hello. */
    if (expect == WEFT_NET_HELLO && c->h.type == WEFT_NET_JOIN) expect = WEFT_NET_JOIN;
    long fixed = weft_net_handshake_len(expect);
    if (c->h.type == WEFT_NET_AUTH && expect == WEFT_NET_AUTH_START) {
      stage_refuse(c, &c->h, WEFT_ERR_UNSUPPORTED,
                   "the single-sided auth proof is retired (it shares its domain with browser tabs' proofs): this "
                   "worker wants mutual authentication (auth_start, auth_finish); update the client");
      return STAGE_DROP;
    }
    if (c->h.type != expect) {
      stage_refuse(c, &c->h, WEFT_ERR_STATE,
                   !s->hello ? "the first frame must be hello (or join, on a stream connection)"
                   : expect == WEFT_NET_AUTH_START
                       ? "this worker requires authentication (auth_start, auth_finish) before any request"
                       : "auth_finish must follow auth_start");
      return STAGE_DROP;
    }
    if (fixed < 0 || c->h.length != (uint64_t)fixed || (size_t)fixed > sizeof c->buf - WEFT_NET_HEADER_BYTES) {
      snprintf(s->err, sizeof s->err, "%s payload is %u bytes; before the handshake completes it must be exactly %ld",
               type_word(expect), (unsigned)c->h.length, fixed);
      stage_refuse(c, &c->h, WEFT_ERR_INVALID_ARGUMENT, s->err);
      return STAGE_DROP;
    }
    c->want += c->h.length;
    if (c->have < c->want) return STAGE_WAIT;
  }
  /* A whole frame. The one that would complete the handshake is refused while the client cap is full. */
  if (c->h.type == WEFT_NET_AUTH_FINISH || c->h.type == WEFT_NET_JOIN || !srv->need_auth) {
    pthread_mutex_lock(&srv->count_lock);
    int full = srv->clients >= srv->max_clients;
    pthread_mutex_unlock(&srv->count_lock);
    if (full) {
      stage_refuse(c, &c->h, WEFT_ERR_STATE, "the worker serves its maximum number of clients; try again later");
      return STAGE_DROP;
    }
  }
  if (c->h.type == WEFT_NET_JOIN) return stage_join(c);
  weft_net_buf b = {0};
  int keep = weft_net_session_handle(s, &c->h, c->buf + WEFT_NET_HEADER_BYTES, &b);
  int sent = stage_send(c, &b);
  weft_net_buf_free(&b);
  if (!keep || !sent) return STAGE_DROP;
  c->have = 0;
  c->want = WEFT_NET_HEADER_BYTES;
  return session_ready(s) ? STAGE_READY : STAGE_WAIT;
}

/* The handshake is done: the connection gets a thread of its own and counts as a client. */
static int hand_off(conn *c) {
  weft_net_server *srv = c->srv;
  pthread_mutex_lock(&srv->count_lock);
  srv->clients++;
  pthread_mutex_unlock(&srv->count_lock);
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int ok = pthread_create(&th, &attr, serve_conn, c) == 0;
  pthread_attr_destroy(&attr);
  if (!ok) {
    pthread_mutex_lock(&srv->count_lock);
    srv->clients--;
    pthread_mutex_unlock(&srv->count_lock);
  }
  return ok;
}

static void drop_oldest(conn **pend, size_t *npend, int max_pending) {
  size_t o = 0;
  for (size_t i = 1; i < *npend; i++)
    if (pend[i]->seq < pend[o]->seq) o = i;
  conn *c = pend[o];
  pend[o] = pend[--*npend];
  char msg[WEFT_NET_MAX_MESSAGE];
  snprintf(msg, sizeof msg, "dropped before its handshake completed: the worker holds at most %d connections in the "
           "handshake and a newer one came",
           max_pending);
  weft_net_header h = {WEFT_NET_MAGIC, WEFT_NET_HELLO, 0, 0, 0};
  stage_refuse(c, &h, WEFT_ERR_STATE, msg);
  wlog(c->srv, "%s %s", c->peer, msg);
  conn_free(c);
}

/* As many descriptors as the hard limit allows: held sockets are cheap here, and a full table would refuse
 * the client that matters. */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static weft_status serve(weft_net_server *srv, int lfd, char *err, size_t errlen) {
  size_t cap = (size_t)srv->max_pending;
  conn **pend = calloc(cap, sizeof *pend);
  struct pollfd *pfds = calloc(cap + 1, sizeof *pfds);
  if (!pend || !pfds) {
    free(pend);
    free(pfds);
    snprintf(err, errlen, "out of memory");
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
  size_t npend = 0;
  uint64_t seq = 0;
  double pause_until = 0;
  weft_status st = WEFT_ERR_IO;
  for (;;) {
    double t = mono_s();
    int listening = t >= pause_until;
    double wait = listening ? -1 : pause_until - t;
    pfds[0] = (struct pollfd){lfd, (short)(listening ? POLLIN : 0), 0};
    for (size_t i = 0; i < npend; i++) {
      pfds[i + 1] = (struct pollfd){pend[i]->fd, (short)(pend[i]->tls_out ? POLLOUT : POLLIN), 0};
      double d = pend[i]->deadline - t;
      /* Bytes TLS already decrypted are invisible to poll: such a connection is stepped at once. */
      if (!pend[i]->tls_wait && weft_net_conn_pending(&pend[i]->nc)) d = 0;
      /* A deadline already past waits for nothing (a negative d must not read as "no deadline"). */
      if (d < 0) d = 0;
      if (wait < 0 || d < wait) wait = d;
    }
    int timeout = wait < 0 ? -1 : (int)(wait * 1000) + 1;
    int pr = poll(pfds, npend + 1, timeout);
    if (pr < 0 && errno != EINTR) {
      snprintf(err, errlen, "poll failed: %s", strerror(errno));
      break;
    }
    t = mono_s();
    /* Backwards, so a connection leaving (the last one takes its place) does not move any still to visit. */
    for (size_t i = npend; i-- > 0;) {
      conn *c = pend[i];
      int ready = (pr > 0 && pfds[i + 1].revents) || (!c->tls_wait && weft_net_conn_pending(&c->nc));
      int r = ready ? stage_step(c) : STAGE_WAIT;
      if (r == STAGE_WAIT && t >= c->deadline) {
        char msg[WEFT_NET_MAX_MESSAGE];
        snprintf(msg, sizeof msg, "no complete handshake within %d ms", srv->handshake_timeout_ms);
        weft_net_header h = {WEFT_NET_MAGIC, c->want > WEFT_NET_HEADER_BYTES ? c->h.type : WEFT_NET_HELLO, 0,
                             c->want > WEFT_NET_HEADER_BYTES ? c->h.request_id : 0, 0};
        stage_refuse(c, &h, WEFT_ERR_STATE, msg);
        snprintf(c->s->err, sizeof c->s->err, "%s", msg);
        r = STAGE_DROP;
      }
      if (r == STAGE_WAIT) continue;
      pend[i] = pend[--npend];
      if (r == STAGE_DROP)
        wlog(srv, "%s refused before its handshake completed: %s", c->peer,
             c->s->err[0] ? c->s->err : "it closed the connection or broke the protocol");
      else if (c->stream)
        wlog(srv, "%s joined a session as its stream %u", c->peer, (unsigned)c->stream);
      else
        wlog(srv, "%s joined (%s)", c->peer,
             srv->need_auth ? "proved the shared secret" : "no secret asked: loopback");
      if (r == STAGE_DROP || !hand_off(c)) conn_free(c);
    }
    if (pr <= 0 || !(pfds[0].revents & POLLIN)) continue;
    for (int n = 0; n < 256; n++) {
      int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      if (cfd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          /* Out of descriptors: a connection in the handshake makes room; with none, wait a little. */
          if (npend) {
            drop_oldest(pend, &npend, srv->max_pending);
            continue;
          }
          pause_until = mono_s() + 0.01;
          break;
        }
        snprintf(err, errlen, "accept failed: %s", strerror(errno));
        goto out;
      }
      if (npend == cap) drop_oldest(pend, &npend, srv->max_pending);
      conn *c = calloc(1, sizeof *c);
      weft_net_session *s = c ? weft_net_session_create(srv) : NULL;
      if (!s) {
        free(c);
        close(cfd);
        continue;
      }
      int one = 1;
      setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(cfd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
      /* Non-blocking for the stage (TLS's handshake steps on it); serve_conn makes it blocking again. */
      fcntl(cfd, F_SETFL, fcntl(cfd, F_GETFL) | O_NONBLOCK);
      c->srv = srv;
      c->fd = cfd;
      struct sockaddr_storage ss;
      socklen_t sl = sizeof ss;
      char h[64] = "?", pt[16] = "?";
      if (getpeername(cfd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, pt, sizeof pt, NI_NUMERICHOST | NI_NUMERICSERV);
      snprintf(c->peer, sizeof c->peer, "%s%s%s:%s", ss.ss_family == AF_INET6 ? "[" : "", h,
               ss.ss_family == AF_INET6 ? "]" : "", pt);
      wlog(srv, "%s connected", c->peer);
      weft_net_conn_init(&c->nc, cfd);
      c->tls_wait = srv->tls != NULL;
      c->s = s;
      c->deadline = mono_s() + srv->handshake_timeout_ms / 1000.0;
      c->seq = seq++;
      c->want = WEFT_NET_HEADER_BYTES;
      pend[npend++] = c;
    }
  }
out:
  for (size_t i = 0; i < npend; i++) conn_free(pend[i]);
  free(pend);
  free(pfds);
  return st;
}

weft_status weft_net_worker_run(const weft_net_worker_desc *desc, char *err, size_t errlen) {
  const char *addr = desc->listen ? desc->listen : "127.0.0.1:7070";
  char host[256], port[32];
  char *pend = NULL;
  long pn = weft_net_split_addr(addr, host, sizeof host, port, sizeof port) ? strtol(port, &pend, 10) : -1;
  if (pn < 0 || pend == port || *pend) {
    snprintf(err, errlen, "--listen wants HOST:PORT (e.g. 127.0.0.1:7070), got '%s'", addr);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  if (pn > 65535) {
    snprintf(err, errlen, "bad port %ld in '%s': a port is a number from 0 (any free one) to 65535", pn, addr);
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
  raise_nofile();
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
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
  st = serve(srv, fd, err, errlen);
  close(fd);
  /* Connections may still be running: the server is left to the process's exit. */
  return st;
}
