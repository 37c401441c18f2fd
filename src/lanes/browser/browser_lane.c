/* browser_lane.c - browser tabs as lanes. The fabric listens (libwebsockets, on a thread of its own) for
 * tabs that open the worker page (web/worker/); each tab that connects takes a free slot browser:0 ..
 * browser:K-1, and the fabric then speaks the wire protocol (docs/PROTOCOL.md) to it as the client, one
 * frame per WebSocket binary message, through the same client code as remote lanes (src/net/client.c).
 * Slots start down ("waiting for a tab"). A tab is admitted off the op path, by a thread of its slot: the
 * handshake (hello, the proof of the secret when one is set, its lanes) and a bit-exact self-test of every
 * op against the reference; only then does the slot say it is ready, and the fabric's next op brings the
 * lane up through a revive that only reads that flag. A tab that fails any of it is told why and dropped,
 * and its slot is free for the next. A tab lists its CPU lane first (every op it offers) and may list its
 * GPU second (the ops it has WebGPU kernels for): each of those is tested again on the GPU lane, and those
 * that pass are sent with lane -1, so that the tab runs a large one on its GPU; one that fails is sent to
 * the CPU lane only. Each reply names the lane that computed the op, which the lane's details count. A tab that closes, hangs past the timeout or breaks the protocol later
 * fails its lane, so the core re-routes the op. The endpoint takes a tab only with the server's token, a
 * Host that names this server and an Origin (DNS rebinding, pages of other sites). The same server serves
 * the worker page (and the rest of a web folder) as static files. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libwebsockets.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "core/envnum.h"
#include "core/optable.h"
#include "core/reference.h"
#include "net/client.h"
#include "weft_lane.h"

/* The ops a tab can be admitted for: those the self-test below proves (matmul .. attention_cached). An op
 * added to the table later, before the self-test has a case for it (matmul_acc), is left to other lanes. */
#define WEFT_OPS_TAB ((WEFT_OP_BIT(WEFT_OP_ATTENTION_CACHED) << 1) - 1)
#define BROWSER_SLOTS_DEFAULT 4
#define BROWSER_SLOTS_MAX 64
#define FRAG_BYTES (256u << 10)    /* a request goes out in WebSocket fragments of this size */
#define HANDSHAKE_TIMEOUT_MS 5000  /* a tab that attached answers its handshake at once, or is dropped */

typedef struct browser_server browser_server;

typedef struct browser_slot {
  weft_net_client client; /* first: the shared vtable functions take the lane as its client */
  browser_server *srv;
  int index;
  int alive;              /* 0 once the fabric destroyed the lane: no tab attaches here any more */
  char name[32];
  char device[256];
  char details[2048];
  weft_contract_mask tab_contracts; /* what the attached tab said it honours */
  uint64_t tab_ops;                 /* the ops the attached tab offers that its self-test verified */
  /* The tab's lanes: ops go to its CPU lane (client.peer_lane), or with lane -1 for the ops its GPU lane
   * passed the self-test on (client.peer_routes). ran[k][0] counts ops of kind k its CPU lane computed,
   * ran[k][1] those its GPU lane did, from the replies (fabric's thread; reset when a tab is admitted). */
  int32_t gpu_lane; /* the tab's GPU lane index, or -1 */
  char lane_name[2][64];
  uint64_t ran[WEFT_OP_COUNT][2];
  size_t details_fixed; /* details' length before the counts */
  pthread_cond_t cond;
  /* The connection, guarded by srv->lock. `conn` counts attachments; `bound` is the attachment the
   * client's session was handshaken with, so a new tab in the slot never receives the old one's requests. */
  struct lws *wsi;
  uint32_t conn, bound;
  int ready, kick;
  char kick_why[124]; /* told to the tab in the close frame */
  char peer[64];
  char tab_host[256]; /* the Host the tab dialled (checked against this server's names): its proof names it */
  int timeout_ms;
  /* Admission, off the fabric's thread (guarded by srv->lock). `down_ack`: the fabric has seen the lane down
   * (its revive ran), so the slot's thread may use the client; revive returning WEFT_OK hands it back.
   * The admission thread reports through adm_host into adm_err, and stages what describe will say. */
  int down_ack, admitting;
  pthread_t admit_thread;
  int admit_started;
  weft_lane_host adm_host;
  const weft_lane_host *fabric_host;
  char adm_err[400];
  char refusal[560]; /* why the last tab was refused, kept after it left */
  char adm_device[256], adm_details[1024];
  int32_t adm_gpu_lane;
  uint64_t adm_gpu_ops;
  char adm_lane_name[2][64];
  /* Frames both ways, guarded by srv->lock. Requests are copied into `out` (the fabric's thread appends, the
   * service thread sends and frees them); replies the tab owes (`owed`) are assembled in `in` and queued in
   * `replies` until the fabric's thread takes them; `cur` is the reply it holds now. */
  struct frame *out, *out_tail;
  struct frame *replies, *replies_tail;
  struct frame *in;
  struct frame *cur;
  uint32_t owed;
  size_t in_max; /* the largest reply the client accepts */
} browser_slot;

struct browser_server {
  struct lws_context *ctx;
  pthread_t thread;
  int thread_started;
  pthread_mutex_t lock;
  int stop;
  int refs; /* lanes alive; the last one to go stops the server */
  size_t nslots;
  browser_slot *slots;
  char host[128]; /* numeric address bound */
  int port;
  char url[360];  /* where a person opens the worker page, with the token */
  char token[33]; /* a tab's WebSocket URL carries it (?token=); random per server */
  char names[512]; /* WEFT_BROWSER_HOSTS: further names tabs may dial this server by (a public name) */
  int loopback, wildcard; /* bound to a loopback address; to every address (0.0.0.0, ::) */
  uint8_t secret[4096];
  size_t secret_len;
  char web_dir[1024];
  char origins[1024]; /* WEFT_BROWSER_ORIGINS: other pages allowed to connect ("*": any) */
  char tls_cert[1024], tls_key[1024]; /* https and wss when set: browsers give WebGPU to secure pages only */
  struct lws_http_mount mount;
  struct lws_protocol_vhost_options headers[2]; /* sent with every page: cross-origin isolation */
  struct lws_protocol_vhost_options mime[4];
  struct lws_protocols protocols[2];
  int timeout_ms;
};

/* A frame in a queue: LWS_PRE bytes of headroom for libwebsockets' own header, then the frame. */
typedef struct frame {
  struct frame *next;
  size_t len, cap, sent;
  uint8_t data[];
} frame;

static frame *frame_new(size_t cap) {
  frame *f = malloc(sizeof *f + LWS_PRE + cap);
  if (f) {
    f->next = NULL;
    f->len = f->sent = 0;
    f->cap = cap;
  }
  return f;
}

static void frames_free(frame *f) {
  while (f) {
    frame *next = f->next;
    free(f);
    f = next;
  }
}

/* Per WebSocket connection. */
typedef struct tab_session {
  browser_slot *slot;
  uint32_t conn;
} tab_session;

/* ------------------------------------------------------------------------------- the service thread */

/* The reason travels in the close frame, which holds at most 123 bytes of it. */
static void refuse(struct lws *wsi, enum lws_close_status status, const char *why) {
  size_t n = strlen(why);
  lws_close_reason(wsi, status, (unsigned char *)why, n < 120 ? n : 120);
}

static int same_name(const char *a, size_t n, const char *b) { return strlen(b) == n && strncasecmp(a, b, n) == 0; }

static int is_ip_literal(const char *name, size_t n) {
  char buf[64];
  unsigned char addr[16];
  if (n >= sizeof buf) return 0;
  if (name[0] == '[' && n > 2 && name[n - 1] == ']') {
    memcpy(buf, name + 1, n - 2);
    buf[n - 2] = 0;
    return inet_pton(AF_INET6, buf, addr) == 1;
  }
  memcpy(buf, name, n);
  buf[n] = 0;
  return inet_pton(AF_INET, buf, addr) == 1;
}

/* The Host a tab sent names this server: the port bound, and the address bound (with its loopback names on
 * loopback; any address literal where every address is bound) or a name configured in WEFT_BROWSER_HOSTS.
 * A DNS-rebinding page dials the fabric under its own name (Host: evil.test:P), which is none of these. */
static int host_allowed(const browser_server *srv, const char *h) {
  size_t n;
  const char *port;
  if (h[0] == '[') {
    const char *e = strchr(h, ']');
    if (!e) return 0;
    n = (size_t)(e - h) + 1;
    port = e[1] == ':' ? e + 2 : e[1] ? NULL : "";
  } else {
    const char *c = strchr(h, ':');
    if (c && strchr(c + 1, ':')) return 0;
    n = c ? (size_t)(c - h) : strlen(h);
    port = c ? c + 1 : "";
  }
  if (!port || !n) return 0;
  if (!port[0]) {
    if (srv->port != (srv->tls_cert[0] ? 443 : 80)) return 0;
  } else {
    char *end = NULL;
    long p = strtol(port, &end, 10);
    if (*end || p != srv->port) return 0;
  }
  char bound[140];
  snprintf(bound, sizeof bound, strchr(srv->host, ':') ? "[%s]" : "%s", srv->host);
  if (same_name(h, n, bound)) return 1;
  if ((srv->loopback || srv->wildcard) && same_name(h, n, "localhost")) return 1;
  if (srv->loopback && (same_name(h, n, "127.0.0.1") || same_name(h, n, "[::1]"))) return 1;
  if (srv->wildcard && is_ip_literal(h, n)) return 1;
  for (const char *p = srv->names; *p;) {
    size_t k = strcspn(p, ", ");
    if (k && k == n && strncasecmp(p, h, n) == 0) return 1;
    p += k;
    while (*p == ',' || *p == ' ') p++;
  }
  return 0;
}

/* WebSockets are not bound by the same-origin policy: any page the person visits could dial a fabric on
 * loopback, read the tensors it is sent and answer wrong bits. So a connection to the tab endpoint needs
 * all of: a Host that names this server (host_allowed: no DNS rebinding), the server's token in its URL
 * (?token=..., which the worker page has from the address weft serve printed), and an Origin, that of a
 * page of this server (its authority is the Host it dialled) or one listed in WEFT_BROWSER_ORIGINS ("*":
 * any). A client that sends no Origin is no web page and is refused too. 0 to refuse. */
static int origin_allowed(browser_server *srv, struct lws *wsi) {
  char origin[256] = "", host[256] = "", arg[96] = "";
  if (lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST) <= 0 || !host_allowed(srv, host)) return 0;
  const char *tok = lws_get_urlarg_by_name(wsi, "token=", arg, sizeof arg);
  if (!tok || strlen(tok) != sizeof srv->token - 1 || CRYPTO_memcmp(tok, srv->token, sizeof srv->token - 1) != 0)
    return 0;
  if (lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) <= 0 || !origin[0]) return 0;
  if (strcmp(srv->origins, "*") == 0) return 1;
  for (const char *p = srv->origins; *p;) {
    size_t n = strcspn(p, ", ");
    if (n && n == strlen(origin) && strncasecmp(p, origin, n) == 0) return 1;
    p += n;
    while (*p == ',' || *p == ' ') p++;
  }
  const char *authority = strstr(origin, "://");
  return authority && strcasecmp(authority + 3, host) == 0;
}

/* A tab connected: the first free slot takes it. */
static int tab_attach(browser_server *srv, struct lws *wsi, tab_session *ts) {
  pthread_mutex_lock(&srv->lock);
  browser_slot *s = NULL;
  for (size_t i = 0; i < srv->nslots && !s; i++)
    if (srv->slots[i].alive && !srv->slots[i].wsi) s = &srv->slots[i];
  if (!s) {
    pthread_mutex_unlock(&srv->lock);
    refuse(wsi, LWS_CLOSE_STATUS_GOINGAWAY, "every browser slot of this fabric is taken");
    return -1;
  }
  s->wsi = wsi;
  s->conn++;
  s->ready = s->kick = 0;
  s->owed = 0;
  s->peer[0] = s->kick_why[0] = s->tab_host[0] = 0;
  lws_get_peer_simple(wsi, s->peer, sizeof s->peer);
  if (lws_hdr_copy(wsi, s->tab_host, sizeof s->tab_host, WSI_TOKEN_HOST) <= 0) s->tab_host[0] = 0;
  ts->slot = s;
  ts->conn = s->conn;
  pthread_cond_broadcast(&s->cond); /* the slot's admission thread */
  pthread_mutex_unlock(&srv->lock);
  return 0;
}

/* The slot this connection still holds, or NULL when it was displaced. Called with the lock held. */
static browser_slot *tab_slot(struct lws *wsi, const tab_session *ts) {
  browser_slot *s = ts ? ts->slot : NULL;
  return s && s->wsi == wsi && s->conn == ts->conn ? s : NULL;
}

/* Forgets what the connection carried (the fabric's thread keeps `cur`). Called with the lock held. */
static void slot_clear(browser_slot *s) {
  frames_free(s->out);
  frames_free(s->replies);
  frames_free(s->in);
  s->out = s->out_tail = s->replies = s->replies_tail = s->in = NULL;
  s->owed = 0;
}

/* A whole or partial message from the tab: part of a reply it owes, or a protocol violation. */
static int tab_receive(browser_server *srv, struct lws *wsi, tab_session *ts, const uint8_t *in, size_t len) {
  pthread_mutex_lock(&srv->lock);
  browser_slot *s = tab_slot(wsi, ts);
  const char *bad = NULL;
  size_t have = s && s->in ? s->in->len : 0;
  if (!s) bad = "this connection no longer holds a slot";
  else if (!lws_frame_is_binary(wsi)) bad = "text message: the protocol is binary frames";
  else if (!s->owed) bad = "a message nobody asked for";
  else if (len > s->in_max - have) bad = "a reply larger than any request allows";
  if (!bad && (!s->in || have + len > s->in->cap)) {
    size_t cap = s->in ? s->in->cap : 0;
    cap = cap ? cap : 256;
    while (cap < have + len) cap *= 2;
    frame *f = realloc(s->in, sizeof *f + LWS_PRE + cap);
    if (!f) bad = "out of memory for its reply";
    else {
      if (!s->in) f->next = NULL, f->len = f->sent = 0;
      f->cap = cap;
      s->in = f;
    }
  }
  if (bad) {
    /* Whatever the fabric's thread waits for will not come: wake it to fail the lane. */
    if (s) {
      slot_clear(s);
      s->wsi = NULL;
      pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&srv->lock);
    refuse(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION, bad);
    return -1;
  }
  memcpy(s->in->data + LWS_PRE + have, in, len);
  s->in->len += len;
  if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
    if (s->replies_tail) s->replies_tail->next = s->in;
    else s->replies = s->in;
    s->replies_tail = s->in;
    s->in = NULL;
    s->owed--;
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&srv->lock);
  return 0;
}

/* The socket can take more: the next fragment of the oldest request, or the close the fabric asked for. */
static int tab_writeable(browser_server *srv, struct lws *wsi, tab_session *ts) {
  pthread_mutex_lock(&srv->lock);
  browser_slot *s = tab_slot(wsi, ts);
  if (!s || s->kick) {
    char why[sizeof s->kick_why];
    snprintf(why, sizeof why, "%s", s && s->kick_why[0] ? s->kick_why : "the fabric dropped this tab");
    /* A fabric closing is going away; anything else is the tab's fault. */
    enum lws_close_status status = s && !s->alive ? LWS_CLOSE_STATUS_GOINGAWAY : LWS_CLOSE_STATUS_POLICY_VIOLATION;
    pthread_mutex_unlock(&srv->lock);
    refuse(wsi, status, why);
    return -1;
  }
  frame *f = s->out;
  pthread_mutex_unlock(&srv->lock);
  if (!f) return 0;
  /* Only this thread removes requests from the queue, so `f` stays ours without the lock. Each fragment's
   * WebSocket header goes into the bytes before it: the headroom, then the fragment already sent. */
  size_t n = f->len - f->sent < FRAG_BYTES ? f->len - f->sent : FRAG_BYTES;
  int first = f->sent == 0, last = f->sent + n == f->len;
  if (lws_write(wsi, f->data + LWS_PRE + f->sent, n,
                (enum lws_write_protocol)lws_write_ws_flags(LWS_WRITE_BINARY, first, last)) < (int)n)
    return -1;
  pthread_mutex_lock(&srv->lock);
  f->sent += n;
  if (last) {
    s->out = f->next;
    if (!s->out) s->out_tail = NULL;
    free(f);
  }
  int more = s->out != NULL;
  pthread_mutex_unlock(&srv->lock);
  if (more) lws_callback_on_writable(wsi);
  return 0;
}

static void tab_detach(browser_server *srv, struct lws *wsi, tab_session *ts) {
  pthread_mutex_lock(&srv->lock);
  browser_slot *s = tab_slot(wsi, ts);
  if (s) {
    slot_clear(s);
    s->wsi = NULL;
    s->ready = 0;
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&srv->lock);
}

static int ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
  browser_server *srv = lws_context_user(lws_get_context(wsi));
  tab_session *ts = user;
  switch (reason) {
  case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: return origin_allowed(srv, wsi) ? 0 : 1;
  case LWS_CALLBACK_ESTABLISHED: return tab_attach(srv, wsi, ts);
  case LWS_CALLBACK_RECEIVE: return tab_receive(srv, wsi, ts, in, len);
  case LWS_CALLBACK_SERVER_WRITEABLE: return tab_writeable(srv, wsi, ts);
  case LWS_CALLBACK_CLOSED: tab_detach(srv, wsi, ts); return 0;
  case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
    /* The fabric's thread queued a request or asked for a tab to be dropped. */
    pthread_mutex_lock(&srv->lock);
    for (size_t i = 0; i < srv->nslots; i++) {
      browser_slot *s = &srv->slots[i];
      if (s->wsi && (s->out || s->kick)) lws_callback_on_writable(s->wsi);
    }
    pthread_mutex_unlock(&srv->lock);
    return 0;
  default: return lws_callback_http_dummy(wsi, reason, user, in, len);
  }
}

static void *service_main(void *arg) {
  browser_server *srv = arg;
  for (;;) {
    pthread_mutex_lock(&srv->lock);
    int stop = srv->stop;
    pthread_mutex_unlock(&srv->lock);
    if (stop || lws_service(srv->ctx, 0) < 0) break;
  }
  return NULL;
}

/* ------------------------------------------------------------------------------ the fabric's thread */

static void wake(browser_server *srv) { lws_cancel_service(srv->ctx); }

static int attached(const browser_slot *s) { return s->wsi && s->conn == s->bound; }

static weft_status tab_send(void *ctx, const uint8_t *const piece[3], const size_t len[3], size_t max_reply,
                            char *why, size_t whylen) {
  browser_slot *s = ctx;
  size_t total = 0;
  for (int i = 0; i < 3; i++) total += piece[i] ? len[i] : 0;
  frame *f = frame_new(total);
  if (!f) {
    snprintf(why, whylen, "out of host memory for a request of %zu bytes", total);
    return WEFT_ERR_LANE_FAILED;
  }
  size_t at = 0;
  for (int i = 0; i < 3; i++)
    if (piece[i] && len[i]) {
      memcpy(f->data + LWS_PRE + at, piece[i], len[i]);
      at += len[i];
    }
  f->len = total;
  pthread_mutex_lock(&s->srv->lock);
  int ok = attached(s);
  if (ok) {
    if (s->out_tail) s->out_tail->next = f;
    else s->out = f;
    s->out_tail = f;
    s->owed++;
    s->in_max = max_reply;
  }
  pthread_mutex_unlock(&s->srv->lock);
  if (!ok) {
    free(f);
    snprintf(why, whylen, "the tab closed");
    return WEFT_ERR_LANE_FAILED;
  }
  wake(s->srv);
  return WEFT_OK;
}

static weft_status tab_recv(void *ctx, const uint8_t **out_frame, size_t *out_len, char *why, size_t whylen) {
  browser_slot *s = ctx;
  browser_server *srv = s->srv;
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += s->timeout_ms / 1000;
  deadline.tv_nsec += (long)(s->timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&srv->lock);
  free(s->cur);
  s->cur = NULL;
  int timed_out = 0;
  while (!s->replies && attached(s) && !timed_out && !srv->stop)
    timed_out = pthread_cond_timedwait(&s->cond, &srv->lock, &deadline) == ETIMEDOUT;
  weft_status st = WEFT_OK;
  if (s->replies && attached(s)) {
    s->cur = s->replies;
    s->replies = s->cur->next;
    if (!s->replies) s->replies_tail = NULL;
    *out_frame = s->cur->data + LWS_PRE;
    *out_len = s->cur->len;
  } else {
    if (timed_out) snprintf(why, whylen, "timed out after %d ms", s->timeout_ms);
    else snprintf(why, whylen, "the tab closed");
    st = WEFT_ERR_LANE_FAILED;
  }
  pthread_mutex_unlock(&srv->lock);
  return st;
}

static void tab_drop(void *ctx, const char *why) {
  browser_slot *s = ctx;
  pthread_mutex_lock(&s->srv->lock);
  if (attached(s)) {
    s->kick = 1;
    snprintf(s->kick_why, sizeof s->kick_why, "%s", why);
  }
  s->ready = 0;
  pthread_mutex_unlock(&s->srv->lock);
  wake(s->srv);
}

static const weft_net_transport TAB_TRANSPORT = {tab_send, tab_recv, tab_drop, NULL}; /* no bulk: one connection */

/* ------------------------------------------------------------------------------------------- the lane */

static void set_waiting(browser_slot *s) {
  snprintf(s->device, sizeof s->device, "(no tab attached)");
  snprintf(s->details, sizeof s->details, "waiting for a tab: open %s in a browser with WebGPU", s->srv->url);
}

static void browser_describe(void *self, weft_lane_desc *out) {
  browser_slot *s = self;
  memset(out, 0, sizeof *out);
  out->name = s->name;
  out->kind = "browser";
  out->device = s->device;
  out->driver = "weft wire protocol v2 over WebSocket";
  out->details = s->details;
  /* What a worker page implements: the canonical order, which also satisfies fp32. The tab's own list is
   * checked per op (supports). */
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32);
  /* What a tab can be admitted for: the ops its self-test verifies (every op of the table: the worker page
   * runs the version-2 ops through weft.wasm). A tab may offer a subset of them; the tab's own set, each op
   * of it proved at join, is checked per op (supports). */
  out->ops = WEFT_OPS_TAB;
  out->flags = WEFT_LANE_STARTS_DOWN;
}

static void server_destroy(browser_server *srv) {
  /* The admission threads first: one may be waiting for its tab's reply, which needs the service thread. */
  pthread_mutex_lock(&srv->lock);
  srv->stop = 1;
  for (size_t i = 0; i < srv->nslots; i++) pthread_cond_broadcast(&srv->slots[i].cond);
  pthread_mutex_unlock(&srv->lock);
  for (size_t i = 0; i < srv->nslots; i++)
    if (srv->slots[i].admit_started) pthread_join(srv->slots[i].admit_thread, NULL);
  if (srv->thread_started) {
    pthread_mutex_lock(&srv->lock);
    srv->stop = 1;
    pthread_mutex_unlock(&srv->lock);
    wake(srv);
    pthread_join(srv->thread, NULL);
  }
  /* Closes the tabs still attached; their close callbacks run here, on this thread. */
  if (srv->ctx) lws_context_destroy(srv->ctx);
  for (size_t i = 0; i < srv->nslots; i++) {
    slot_clear(&srv->slots[i]);
    free(srv->slots[i].cur);
    pthread_cond_destroy(&srv->slots[i].cond);
  }
  free(srv->slots);
  pthread_mutex_destroy(&srv->lock);
  OPENSSL_cleanse(srv->secret, sizeof srv->secret);
  free(srv);
}

static void browser_destroy(void *self) {
  browser_slot *s = self;
  browser_server *srv = s->srv;
  pthread_mutex_lock(&srv->lock);
  s->alive = 0;
  if (s->wsi) {
    s->kick = 1;
    snprintf(s->kick_why, sizeof s->kick_why, "the fabric closed");
  }
  int last = --srv->refs == 0;
  pthread_mutex_unlock(&srv->lock);
  /* Slots live as long as the server: the service thread may still be looking at this one. */
  if (last) server_destroy(srv);
  else wake(srv);
}

static weft_status browser_supports(void *self, const weft_op *op) {
  browser_slot *s = self;
  if ((unsigned)op->kind >= WEFT_OP_COUNT || !(s->tab_ops & WEFT_OP_BIT(op->kind)))
    return weft_lane_report(s->fabric_host, WEFT_ERR_UNSUPPORTED, "%s: the tab does not offer %s", s->name,
                            weft_op_kind_str(op->kind));
  /* The worker page takes a softmax_xent's mean over its logits' rows: a share of a larger batch goes
   * elsewhere. */
  if (op->kind == WEFT_OP_SOFTMAX_XENT && op->iparam[0] && op->iparam[0] != op->rows)
    return weft_lane_report(s->fabric_host, WEFT_ERR_UNSUPPORTED,
                            "%s: the tab takes softmax_xent's mean over its logits' rows only", s->name);
  if (!(s->tab_contracts & WEFT_CONTRACT_BIT(op->contract)))
    return weft_lane_report(s->fabric_host, WEFT_ERR_UNSUPPORTED, "%s: the tab does not honour the %s contract",
                            s->name, weft_contract_str(op->contract));
  return WEFT_OK;
}

typedef struct lanes_pick {
  int found;
  uint32_t index;
  weft_contract_mask contracts;
  uint64_t ops;
  char name[256], kind[256], device[256];
  /* The tab's GPU: its next lane with the exact contract, for ops its first lane offers too. */
  int gpu_found;
  uint32_t gpu_index;
  uint64_t gpu_ops;
  char gpu_name[256], gpu_kind[256], gpu_device[256];
} lanes_pick;

/* The tab's first lane that honours the exact contract is the one this slot serves (its CPU: every op the
 * tab offers); the next such lane, if any, is the tab's GPU, which may run the ops of its set that the
 * first lane offers too (the fabric sends those with lane -1 once they pass the self-test there). */
static void pick_lane(void *ctx, uint32_t index, weft_contract_mask contracts, uint64_t ops, const char *name,
                      const char *kind, const char *device) {
  lanes_pick *p = ctx;
  if (!(contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) return;
  /* A tab offers a subset of the ops; those the admission self-test can prove are taken (an op added to the
   * table later, before the self-test has a case for it, is left to other lanes), and each is proved. */
  ops &= WEFT_OPS_TAB;
  if (!p->found) {
    p->found = 1;
    p->index = index;
    p->contracts = contracts;
    p->ops = ops;
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->kind, sizeof p->kind, "%s", kind);
    snprintf(p->device, sizeof p->device, "%s", device);
  } else if (!p->gpu_found) {
    p->gpu_found = 1;
    p->gpu_index = index;
    p->gpu_ops = (contracts & p->contracts) == p->contracts ? ops & p->ops : 0; /* it must honour what the first does */
    snprintf(p->gpu_name, sizeof p->gpu_name, "%s", name);
    snprintf(p->gpu_kind, sizeof p->gpu_kind, "%s", kind);
    snprintf(p->gpu_device, sizeof p->gpu_device, "%s", device);
  }
}

/* The handshake with a newly attached tab: hello, the proof of the shared secret when one is set (bound to
 * the name the tab dialled this server by), its lanes. Run by the slot's admission thread, bounded by a
 * short timeout. */
static weft_status handshake(browser_slot *s, lanes_pick *pick) {
  weft_net_client *c = &s->client;
  browser_server *srv = s->srv;
  weft_net_client_begin(c);
  s->timeout_ms = srv->timeout_ms < HANDSHAKE_TIMEOUT_MS ? srv->timeout_ms : HANDSHAKE_TIMEOUT_MS;
  weft_net_hello hello;
  weft_status st = weft_net_client_hello(c, &hello);
  if (st) return st;
  if (srv->secret_len) {
    uint8_t nonce[WEFT_NET_NONCE_BYTES], want[WEFT_NET_MAC_BYTES];
    if (RAND_bytes(nonce, sizeof nonce) != 1 ||
        weft_net_tab_mac(srv->secret, srv->secret_len, nonce, s->tab_host, want))
      return weft_net_client_fail(c, "could not make a nonce for the tab's proof");
    st = weft_net_client_call(c, WEFT_NET_PROVE, nonce, sizeof nonce, NULL, 0);
    if (st) return weft_net_client_fail(c, "the tab did not prove the shared secret (%s)", weft_status_str(st));
    /* One try per connection, compared in constant time, as `weft worker` does. */
    if (c->reply_len != WEFT_NET_MAC_BYTES || CRYPTO_memcmp(c->reply, want, WEFT_NET_MAC_BYTES) != 0)
      return weft_net_client_fail(c, "the tab's proof of the shared secret is wrong");
  }
  st = weft_net_client_lanes(c, pick_lane, pick);
  if (st) return st;
  if (!pick->found) return weft_net_client_fail(c, "the tab offers no lane with the exact contract");
  if (!pick->ops)
    return weft_net_client_fail(c, "the tab's lane offers none of the ops a browser lane runs (matmul .. softmax_xent)");
  c->peer_lane = (int32_t)pick->index;
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------ the self-test */

static void fill(float *x, size_t n, uint32_t *seed, float lo, float hi) {
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    x[i] = lo + (hi - lo) * (float)(*seed >> 8) / 16777216.0f;
  }
}

/* The bits of a and b agree (any NaN matches any NaN: NaN payloads are another matter). */
static int same_bits(float a, float b) { return (a != a && b != b) || memcmp(&a, &b, 4) == 0; }

/* The two kinds of self-test case: EDGE, the join's own (small shapes whose inputs hold signed zeros,
 * subnormals, huge values and infinities: any lane of the tab may compute them, one of its GPU handing them
 * to its CPU included); GPU, larger shapes of ordinary values, which a tab's GPU lane must compute itself
 * (they are within the ground where its WebGPU kernels are exact), so that its kernels are what is tested. */
enum { CASE_EDGE = 0, CASE_GPU = 1 };

/* One op on the tab's lane `lane` and in the reference: its inputs and outputs are host arrays of
 * in_n/out_n floats (outputs hold their initial values). With must_there, the tab's reply must say that
 * lane computed it. 1 when it did and every output bit agrees; else 0 and why. */
static int selftest_op(browser_slot *s, weft_op *ref, const size_t in_n[WEFT_OP_MAX_IN],
                       const size_t out_n[WEFT_OP_MAX_OUT], const char *what, int32_t lane, int must_there, char *why,
                       size_t whylen) {
  weft_net_client *c = &s->client;
  weft_buffer *bi[WEFT_OP_MAX_IN] = {NULL}, *bo[WEFT_OP_MAX_OUT] = {NULL};
  float *got[WEFT_OP_MAX_OUT] = {NULL};
  weft_op op = *ref;
  weft_status st = WEFT_OK;
  for (int i = 0; i < WEFT_OP_MAX_IN && !st; i++) {
    if (!ref->in[i]) continue;
    st = weft_net_client_buffer_alloc(c, in_n[i] * 4, &bi[i]);
    if (!st) st = weft_net_client_upload(c, bi[i], 0, ref->in[i], in_n[i] * 4);
    op.in[i] = bi[i];
  }
  for (int o = 0; o < WEFT_OP_MAX_OUT && !st; o++) {
    if (!ref->out[o]) continue;
    st = weft_net_client_buffer_alloc(c, out_n[o] * 4, &bo[o]);
    if (!st) st = weft_net_client_upload(c, bo[o], 0, ref->out[o], out_n[o] * 4);
    op.out[o] = bo[o];
  }
  /* Not pipelined here: the reply is read at once, and names the lane that computed the op. */
  int32_t keep_lane = c->peer_lane;
  uint64_t keep_routes = c->peer_routes;
  c->peer_lane = lane, c->peer_routes = 0;
  if (!st) st = weft_net_client_run(c, &op);
  c->peer_lane = keep_lane, c->peer_routes = keep_routes;
  int ok = !st;
  int32_t ran = ok && c->reply_len == 4 ? (int32_t)weft_net_get32(c->reply) : -1;
  if (ok && must_there && ran != lane) {
    snprintf(why, whylen, "its self-test: lane %d of the tab computed %s, not lane %d, though its values are ordinary",
             (int)ran, what, (int)lane);
    ok = -1;
  }
  /* The reference: reference.c for the version-1 ops, the op table's host kernels (reference_tx.c) after. */
  if (ok == 1 && ref->kind < WEFT_OP_V1_COUNT) weft_reference_run(ref);
  if (ok == 1 && ref->kind >= WEFT_OP_V1_COUNT && weft_optable_host_run(ref, &s->adm_host) != WEFT_OK) {
    snprintf(why, whylen, "its self-test's reference failed: %.60s: %.200s", what, s->adm_err);
    ok = -1;
  }
  for (int o = 0; o < WEFT_OP_MAX_OUT && ok == 1; o++) {
    if (!ref->out[o]) continue;
    got[o] = malloc(out_n[o] * 4);
    if (!got[o] || weft_net_client_download(c, bo[o], 0, got[o], out_n[o] * 4)) {
      ok = 0;
      if (!got[o]) snprintf(why, whylen, "out of host memory for its self-test");
      break;
    }
    const float *want = ref->out[o];
    for (size_t e = 0; e < out_n[o]; e++)
      if (!same_bits(got[o][e], want[e])) {
        uint32_t g, w;
        memcpy(&g, &got[o][e], 4);
        memcpy(&w, &want[e], 4);
        snprintf(why, whylen, "wrong bits in its self-test: %s, element %zu is 0x%08x from the tab, 0x%08x in the "
                 "reference", what, e, (unsigned)g, (unsigned)w);
        ok = -1;
        break;
      }
  }
  if (ok == 0 && !why[0]) snprintf(why, whylen, "%s", s->adm_err[0] ? s->adm_err : "its self-test failed");
  for (int i = 0; i < WEFT_OP_MAX_IN; i++) weft_net_client_buffer_free(c, bi[i]);
  for (int o = 0; o < WEFT_OP_MAX_OUT; o++) {
    weft_net_client_buffer_free(c, bo[o]);
    free(got[o]);
  }
  return ok == 1;
}

/* Index operands: n int32 in [0, lim), in the float array's cells. */
static void idx_fill(float *cells, int n, int lim) {
  for (int e = 0; e < n; e++) {
    int32_t v = (int32_t)((e * 7 + 3) % lim);
    memcpy(&cells[e], &v, 4);
  }
}

/* A version-2 op, once, bit for bit against the op table's host kernels (the reference). EDGE: B 2, T 3, C 8,
 * 2 heads, a vocabulary of 5, the first float input holding zeros of both signs, subnormals, a huge value and
 * an infinity; GPU: B 4, T 24, C 40, 4 heads, ordinary values. */
static int selftest_v2(browser_slot *s, int kind, int variant, int32_t lane, uint32_t *seed, char *why, size_t whylen) {
  const int edge = variant == CASE_EDGE;
  const int B = edge ? 2 : 4, T = edge ? 3 : 24, C = edge ? 8 : 40, NH = edge ? 2 : 4, V = 5, P = edge ? 4 : 24;
  const int N = B * T, SR = 3, ST = edge ? 4 : 24; /* the causal softmax: SR blocks of ST x ST */
  const size_t CAP = edge ? 160 : (size_t)N * 3 * C;
  float *in[WEFT_OP_MAX_IN] = {NULL}, *out[WEFT_OP_MAX_OUT] = {NULL};
  int pass = 1;
  for (int i = 0; i < WEFT_OP_MAX_IN; i++) pass = pass && (in[i] = malloc(CAP * sizeof(float)));
  for (int o = 0; o < WEFT_OP_MAX_OUT; o++) pass = pass && (out[o] = malloc(CAP * sizeof(float)));
  if (!pass) snprintf(why, whylen, "out of host memory for its self-test");
  if (pass) {
    for (int i = 0; i < WEFT_OP_MAX_IN; i++) fill(in[i], CAP, seed, -4, 4);
    for (int o = 0; o < WEFT_OP_MAX_OUT; o++) fill(out[o], CAP, seed, -1, 1);
    float *x = in[0];
    if (edge) x[0] = -0.0f, x[1] = 1e-40f, x[2] = -1e-40f, x[3] = 0.0f, x[4] = 1e30f, x[5] = -INFINITY, x[6] = 1e-45f;
    weft_op op;
    memset(&op, 0, sizeof op);
    op.kind = (weft_op_kind)kind;
    op.contract = WEFT_CONTRACT_EXACT;
    size_t in_n[WEFT_OP_MAX_IN] = {0}, out_n[WEFT_OP_MAX_OUT] = {0};
    int64_t *ip = op.iparam;
    float *fp = op.fparam;
#define IN(i, n) (op.in[i] = in[i], in_n[i] = (size_t)(n))
#define OUT(o, n) (op.out[o] = out[o], out_n[o] = (size_t)(n))
#define IDX(i, n, lim) (idx_fill(in[i], n, lim), op.in_dtype[i] = WEFT_DTYPE_I32, IN(i, n))
    switch (kind) {
    case WEFT_OP_EMBEDDING:
      ip[0] = B, ip[1] = T, ip[2] = C, ip[3] = V, ip[4] = P;
      IDX(0, N, V), IDX(1, N, P), IN(2, V * C), IN(3, P * C), OUT(0, N * C);
      if (edge) in[2][0] = -0.0f, in[2][1] = 1e-40f, in[3][1] = -1e-40f, in[3][2] = INFINITY;
      break;
    case WEFT_OP_EMBEDDING_BACKWARD:
      ip[0] = B, ip[1] = T, ip[2] = C, ip[3] = V, ip[4] = P;
      IN(0, N * C), IDX(1, N, V), IDX(2, N, P), OUT(0, V * C), OUT(1, P * C);
      break;
    case WEFT_OP_LAYERNORM:
      ip[0] = N, ip[1] = C, fp[0] = 1e-5f;
      if (edge) in[0][C + 1] = 1e30f, x[5] = 2.5f; /* a row with a huge value next to an ordinary one */
      IN(0, N * C), IN(1, C), IN(2, C), OUT(0, N * C), OUT(1, N), OUT(2, N);
      break;
    case WEFT_OP_LAYERNORM_BACKWARD:
      ip[0] = N, ip[1] = C;
      for (int e = 0; e < N; e++) in[3][e] = 0.25f + (float)e;
      IN(0, N * C), IN(1, N * C), IN(2, N), IN(3, N), IN(4, C), OUT(0, N * C), OUT(1, C), OUT(2, C);
      break;
    case WEFT_OP_GELU:
      ip[0] = N * C, IN(0, N * C), OUT(0, N * C);
      if (edge) x[7] = 20.0f, x[8] = -20.0f, x[9] = INFINITY, x[10] = 1e-20f;
      break;
    case WEFT_OP_GELU_BACKWARD:
      ip[0] = N * C, IN(0, N * C), IN(1, N * C), OUT(0, N * C);
      if (edge) x[7] = 20.0f, x[8] = -20.0f;
      break;
    case WEFT_OP_ATTENTION:
      ip[0] = B, ip[1] = T, ip[2] = C, ip[3] = NH;
      if (edge) x[4] = 1e3f, x[5] = -1e3f;
      IN(0, N * 3 * C), OUT(0, N * C), OUT(1, B * NH * T * T), OUT(2, B * NH * T * T);
      break;
    case WEFT_OP_ATTENTION_BACKWARD:
      ip[0] = B, ip[1] = T, ip[2] = C, ip[3] = NH;
      if (edge) x[5] = 3.0f;
      IN(0, N * C), IN(1, N * 3 * C), IN(2, B * NH * T * T), OUT(0, N * 3 * C);
      break;
    case WEFT_OP_CAUSAL_SOFTMAX:
      ip[0] = SR, ip[1] = ST, fp[0] = 0.35f;
      if (edge) x[5] = 80.0f;
      IN(0, SR * ST * ST), OUT(0, SR * ST * ST);
      break;
    case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD:
      ip[0] = SR, ip[1] = ST, fp[0] = 0.35f;
      IN(0, SR * ST * ST), IN(1, SR * ST * ST), OUT(0, SR * ST * ST);
      break;
    case WEFT_OP_CROSSENTROPY:
      ip[0] = N, ip[1] = V;
      if (edge) x[5] = 90.0f;
      IN(0, N * V), IDX(1, N, V), OUT(0, N);
      break;
    case WEFT_OP_CROSSENTROPY_BACKWARD:
      ip[0] = N, ip[1] = V;
      if (edge) x[5] = 90.0f;
      IN(0, N * V), IDX(1, N, V), IN(2, N), OUT(0, N * V);
      break;
    case WEFT_OP_ADAMW:
      ip[0] = N * C;
      fp[0] = 1e-3f, fp[1] = 0.9f, fp[2] = 0.999f, fp[3] = 1e-8f, fp[4] = 0.01f, fp[5] = 0.19f, fp[6] = 0.002f;
      if (edge) x[5] = 1e-3f;
      for (int e = 0; e < N * C; e++) out[2][e] = out[2][e] < 0 ? -out[2][e] : out[2][e];
      IN(0, N * C), OUT(0, N * C), OUT(1, N * C), OUT(2, N * C);
      break;
    case WEFT_OP_SUMSQ:
      ip[0] = N * C;
      if (edge) x[5] = 3.0f, x[4] = 1e15f;
      IN(0, N * C), OUT(0, 1);
      break;
    case WEFT_OP_PERMUTE: /* [2,3,4,5] to [2,4,3,5] */
      ip[0] = 4, ip[1] = 2, ip[2] = 3, ip[3] = 4, ip[4] = 5, ip[5] = 0 | 2 << 2 | 1 << 4 | 3 << 6;
      IN(0, 120), OUT(0, 120);
      break;
    case WEFT_OP_COPY_SLICE: /* 2 x [3 of 5 rows, at 1] x 4 */
      ip[0] = 2, ip[1] = 3, ip[2] = 5, ip[3] = 4, ip[4] = 1;
      IN(0, 24), OUT(0, 40);
      break;
    case WEFT_OP_ATTENTION_CACHED: /* a cache of T positions, queries at 1 and 2 */
      ip[0] = B, ip[1] = T, ip[2] = C, ip[3] = NH, ip[4] = 1, ip[5] = 2;
      if (edge) x[4] = 1e3f, x[5] = -1e3f;
      IN(0, N * 3 * C), OUT(0, B * 2 * C), OUT(1, B * NH * 2 * T);
      break;
    default:
      /* An op this self-test has no case for is not admitted on the tab's word: it leaves the tab's set. */
      snprintf(why, whylen, "offers %s, which weft's tab self-test cannot check yet", weft_optable[kind].name);
      pass = 0;
      break;
    }
#undef IN
#undef OUT
#undef IDX
    op.rows = 1, op.cols = (int64_t)out_n[0];
    if (pass) pass = selftest_op(s, &op, in_n, out_n, weft_optable[kind].name, lane, !edge, why, whylen);
  }
  for (int i = 0; i < WEFT_OP_MAX_IN; i++) free(in[i]);
  for (int o = 0; o < WEFT_OP_MAX_OUT; o++) free(out[o]);
  return pass;
}

/* The matmuls: EDGE, one with a k of 1531 and odd m and n and one batched with both operands transposed;
 * GPU, one of several tiles each way with k not a multiple of a tile, and the batched transposed one. */
static int selftest_matmul(browser_slot *s, int variant, int32_t lane, uint32_t *seed, char *why, size_t whylen) {
  static const struct {
    int64_t batch, m, k, n;
    int ta, tb, bb;
  } cases[2][2] = {{{1, 5, 1531, 7, 0, 0, 0}, {2, 3, 33, 5, 1, 1, 1}}, {{1, 70, 300, 90, 0, 0, 0}, {2, 33, 47, 29, 1, 1, 1}}};
  int pass = 1;
  for (size_t i = 0; pass && i < 2; i++) {
    const int64_t batch = cases[variant][i].batch, m = cases[variant][i].m, k = cases[variant][i].k,
                  n = cases[variant][i].n;
    const int bb = cases[variant][i].bb;
    size_t na = (size_t)(batch * m * k), nb = (size_t)((bb ? batch : 1) * k * n), nc = (size_t)(batch * m * n);
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = calloc(nc, 4);
    if (!a || !b || !c) {
      snprintf(why, whylen, "out of host memory for its self-test");
      pass = 0;
    } else {
      fill(a, na, seed, -2, 2);
      fill(b, nb, seed, -2, 2);
      weft_op op;
      memset(&op, 0, sizeof op);
      op.kind = WEFT_OP_MATMUL;
      op.contract = WEFT_CONTRACT_EXACT;
      op.in[0] = a, op.in[1] = b, op.out[0] = c;
      op.batch = batch, op.m = m, op.k = k, op.n = n;
      op.trans_a = cases[variant][i].ta, op.trans_b = cases[variant][i].tb, op.b_batched = bb;
      char what[80];
      snprintf(what, sizeof what, "matmul %lldx[%lldx%lld].[%lldx%lld]%s", (long long)batch, (long long)m,
               (long long)k, (long long)k, (long long)n, op.trans_a ? " transposed" : "");
      size_t in_n[WEFT_OP_MAX_IN] = {na, nb}, out_n[WEFT_OP_MAX_OUT] = {nc, 0};
      pass = selftest_op(s, &op, in_n, out_n, what, lane, variant == CASE_GPU, why, whylen);
    }
    free(a), free(b), free(c);
  }
  return pass;
}

/* The elementwise version-1 ops over 7 x 13 values of a wide range; EDGE adds signed zeros, subnormals and
 * the largest floats (add runs twice: plain, then with a row broadcast). */
static int selftest_v1(browser_slot *s, int kind, int variant, int32_t lane, uint32_t *seed, char *why, size_t whylen) {
  enum { R = 7, C = 13 };
  float x[R * C], y[R * C], t[R * C], o[R * C], g[R * C], row[C], loss[1];
  int pass = 1;
  for (int bcast = 0; pass && bcast <= (kind == WEFT_OP_ADD); bcast++) {
    fill(x, R * C, seed, -30, 30);
    fill(y, R * C, seed, -3, 3);
    fill(t, R * C, seed, 0, 1);
    fill(o, R * C, seed, -1, 1);
    fill(row, C, seed, -1, 1);
    if (variant == CASE_EDGE)
      x[0] = -0.0f, x[1] = 1e-40f, x[2] = -1e-40f, x[3] = 0.0f, x[4] = 3e38f, y[4] = 3e38f, y[5] = 1e-45f;
    memset(g, 0, sizeof g);
    loss[0] = 0;
    weft_op op;
    memset(&op, 0, sizeof op);
    op.kind = (weft_op_kind)kind;
    op.contract = WEFT_CONTRACT_EXACT;
    op.rows = R, op.cols = C;
    op.alpha = op.kind == WEFT_OP_SCALE ? 0.3f : -1.7f;
    op.inv_rows = 1.0f / (float)R;
    if (op.kind == WEFT_OP_SOFTMAX_XENT) op.iparam[0] = R;
    op.in[0] = x;
    op.out[0] = o;
    size_t in_n[WEFT_OP_MAX_IN] = {R * C, 0}, out_n[WEFT_OP_MAX_OUT] = {R * C, 0};
    switch (op.kind) {
    case WEFT_OP_ADD:
      op.y_broadcast = bcast;
      op.in[1] = bcast ? row : y;
      in_n[1] = bcast ? C : R * C;
      break;
    case WEFT_OP_RELU: break;
    case WEFT_OP_RELU_BACKWARD: op.in[0] = y, op.in[1] = x, in_n[1] = R * C; break;
    case WEFT_OP_SCALE: break;
    case WEFT_OP_AXPY: break;
    case WEFT_OP_SUM_ROWS: out_n[0] = C; break;
    default: /* softmax_xent */
      fill(x, R * C, seed, -60, 60);
      op.in[1] = t, in_n[1] = R * C;
      op.out[0] = loss, out_n[0] = 1;
      op.out[1] = g, out_n[1] = R * C;
      break;
    }
    pass = selftest_op(s, &op, in_n, out_n, bcast ? "add (a row broadcast)" : weft_optable[kind].name, lane,
                       variant == CASE_GPU, why, whylen);
  }
  return pass;
}

/* The self-test cases of op `kind` of one variant, on the tab's lane `lane`. */
static int selftest_kind(browser_slot *s, int kind, int variant, int32_t lane, uint32_t *seed, char *why,
                         size_t whylen) {
  if (kind == WEFT_OP_MATMUL) return selftest_matmul(s, variant, lane, seed, why, whylen);
  if (kind < WEFT_OP_V1_COUNT) return selftest_v1(s, kind, variant, lane, seed, why, whylen);
  return selftest_v2(s, kind, variant, lane, seed, why, whylen);
}

/* Every op the tab offers, on its first lane, bit for bit against the reference (the EDGE cases): a tab that
 * computes any bit differently stays out (0, and why). Then every op its GPU lane offers, on that lane: the
 * EDGE cases and the GPU ones, which it must compute there; an op whose GPU bits are wrong (or that it hands
 * back) is left out of *gpu_ops, the first such reason in gpu_why, and runs on the tab's first lane. */
static int selftest(browser_slot *s, const lanes_pick *pick, uint64_t *gpu_ops, char *gpu_why, size_t gpu_whylen,
                    char *why, size_t whylen) {
  uint32_t seed = 0x9e3779b9u;
  *gpu_ops = 0;
  for (int kind = 0; kind < WEFT_OP_COUNT; kind++) {
    /* a tab tested for what it offers; the rest never reach it */
    if ((pick->ops & WEFT_OP_BIT(kind)) && !selftest_kind(s, kind, CASE_EDGE, (int32_t)pick->index, &seed, why, whylen))
      return 0;
  }
  if (!pick->gpu_found) return 1;
  char refused[160] = "";
  for (int kind = 0; kind < WEFT_OP_COUNT; kind++) {
    if (!(pick->gpu_ops & WEFT_OP_BIT(kind))) continue;
    char w[400] = "";
    int32_t lane = (int32_t)pick->gpu_index;
    int ok = selftest_kind(s, kind, CASE_EDGE, lane, &seed, w, sizeof w) &&
             selftest_kind(s, kind, CASE_GPU, lane, &seed, w, sizeof w);
    if (!s->client.up) { /* the tab left or broke the protocol: nothing more to test */
      snprintf(why, whylen, "%s", w[0] ? w : "its connection failed during the self-test of its GPU");
      return 0;
    }
    if (ok) {
      *gpu_ops |= WEFT_OP_BIT(kind);
    } else {
      size_t used = strlen(refused);
      snprintf(refused + used, sizeof refused - used, "%s%s", used ? ", " : "", weft_optable[kind].name);
      if (!gpu_why[0]) snprintf(gpu_why, gpu_whylen, "%s", w);
    }
  }
  if (refused[0]) {
    char first[400];
    snprintf(first, sizeof first, "%s", gpu_why);
    snprintf(gpu_why, gpu_whylen, "its %.60s lane is not used for %.159s (%.300s)", pick->gpu_name, refused, first);
  }
  return 1;
}

/* ---------------------------------------------------------------------------------------- admission */

static weft_status adm_report(void *ctx, weft_status status, const char *fmt, va_list args) {
  browser_slot *s = ctx;
  vsnprintf(s->adm_err, sizeof s->adm_err, fmt, args);
  return status;
}

/* Handshake and self-test of the tab now bound to the slot, on the slot's thread; 1 when it is admitted,
 * else 0 with why (the tab has been dropped, told why). */
static int admit(browser_slot *s, char *why, size_t whylen) {
  weft_net_client *c = &s->client;
  browser_server *srv = s->srv;
  c->host = &s->adm_host;
  c->pipeline = 0;
  c->op_ran = NULL; /* the self-test's ops are not the lane's */
  c->peer_routes = 0;
  s->adm_err[0] = 0;
  lanes_pick pick;
  memset(&pick, 0, sizeof pick);
  weft_status st = handshake(s, &pick);
  if (st) snprintf(why, whylen, "%s", s->adm_err[0] ? s->adm_err : "its handshake failed");
  int ok = !st;
  uint64_t gpu_ops = 0;
  char gpu_why[640] = "";
  if (ok) {
    s->timeout_ms = srv->timeout_ms;
    ok = selftest(s, &pick, &gpu_ops, gpu_why, sizeof gpu_why, why, whylen);
    if (!ok) weft_net_client_fail(c, "%s", why);
  }
  c->pipeline = 1;
  if (!ok) return 0;
  s->tab_contracts = pick.contracts;
  s->tab_ops = pick.ops;
  /* What the lane will say: its lanes, the ops its GPU runs when large, the ones it was refused for. */
  char gpu[700] = "";
  if (pick.gpu_found) {
    size_t used = (size_t)snprintf(gpu, sizeof gpu, "; on its %.60s lane when large: ", pick.gpu_name);
    const char *sep = "";
    for (int k = 0; k < WEFT_OP_COUNT && used < sizeof gpu; k++)
      if (gpu_ops & WEFT_OP_BIT(k)) {
        used += (size_t)snprintf(gpu + used, sizeof gpu - used, "%s%s", sep, weft_optable[k].name);
        sep = ", ";
      }
    if (!gpu_ops && used < sizeof gpu) snprintf(gpu + used, sizeof gpu - used, "none");
    used = strlen(gpu);
    if (gpu_why[0] && used < sizeof gpu) snprintf(gpu + used, sizeof gpu - used, "; %s", gpu_why);
  }
  pthread_mutex_lock(&srv->lock);
  snprintf(s->adm_device, sizeof s->adm_device, "%s", pick.gpu_found ? pick.gpu_device : pick.device);
  s->adm_gpu_lane = pick.gpu_found ? (int32_t)pick.gpu_index : -1;
  s->adm_gpu_ops = gpu_ops;
  snprintf(s->adm_lane_name[0], sizeof s->adm_lane_name[0], "%.63s", pick.name);
  snprintf(s->adm_lane_name[1], sizeof s->adm_lane_name[1], "%.63s", pick.gpu_found ? pick.gpu_name : "");
  char lanes[300];
  if (pick.gpu_found)
    snprintf(lanes, sizeof lanes, "its lanes %.60s (%.60s) and %.60s (%.60s)", pick.name, pick.kind, pick.gpu_name,
             pick.gpu_kind);
  else
    snprintf(lanes, sizeof lanes, "its lane %.100s (%.100s)", pick.name, pick.kind);
  snprintf(s->adm_details, sizeof s->adm_details,
           "tab %.63s at %.200s: %s, frames up to %u bytes; passed the bit-exact self-test at join%s",
           s->peer[0] ? s->peer : "?", srv->url, lanes, (unsigned)c->max_frame, gpu);
  pthread_mutex_unlock(&srv->lock);
  return 1;
}

/* The slot's admission thread: a tab attached to a slot the fabric has seen down is handshaken and tested
 * here, never on the caller's thread; the verdict is a flag, and the fabric is asked to look at it. */
static void *admit_main(void *arg) {
  browser_slot *s = arg;
  browser_server *srv = s->srv;
  pthread_mutex_lock(&srv->lock);
  while (!srv->stop) {
    if (!(s->alive && s->wsi && s->down_ack && !s->ready && s->bound != s->conn)) {
      pthread_cond_wait(&s->cond, &srv->lock);
      continue;
    }
    s->bound = s->conn;
    s->admitting = 1;
    pthread_mutex_unlock(&srv->lock);
    char why[400] = "";
    int ok = admit(s, why, sizeof why);
    pthread_mutex_lock(&srv->lock);
    s->admitting = 0;
    if (ok && attached(s)) s->ready = 1;
    else if (!ok) snprintf(s->refusal, sizeof s->refusal, "the tab at %.63s was refused: %.399s", s->peer, why);
    int alive = s->alive && !srv->stop;
    pthread_mutex_unlock(&srv->lock);
    if (alive) weft_lane_revive_soon(s->fabric_host);
    pthread_mutex_lock(&srv->lock);
  }
  pthread_mutex_unlock(&srv->lock);
  return NULL;
}

/* From an op's reply, on the fabric's thread: which of the tab's lanes computed it. The details end with
 * the count per op and lane ("; ran: matmul 3 on webgpu, 1 on cpu; gelu 2 on cpu"), rewritten as they
 * change (a few hundred bytes: small beside an op's round trip to a tab). */
static void browser_op_ran(weft_net_client *c, weft_op_kind kind, int32_t lane) {
  browser_slot *s = (browser_slot *)c;
  int at = lane == c->peer_lane ? 0 : s->gpu_lane >= 0 && lane == s->gpu_lane ? 1 : -1;
  if (at < 0 || (unsigned)kind >= WEFT_OP_COUNT) return; /* a lane it does not have: nothing to count */
  s->ran[kind][at]++;
  size_t used = s->details_fixed, cap = sizeof s->details;
  const char *sep = "; ran: ";
  for (int k = 0; k < WEFT_OP_COUNT && used + 1 < cap; k++) {
    if (!s->ran[k][0] && !s->ran[k][1]) continue;
    used += (size_t)snprintf(s->details + used, cap - used, "%s%s", sep, weft_optable[k].name);
    sep = "; ";
    for (int l = 1; l >= 0 && used + 1 < cap; l--) /* the GPU first */
      if (s->ran[k][l])
        used += (size_t)snprintf(s->details + used, cap - used, "%s %llu on %s", l == 1 || !s->ran[k][1] ? "" : ",",
                                 (unsigned long long)s->ran[k][l], s->lane_name[l]);
  }
}

/* Asked on the fabric's thread while the lane is down: only reads the admission's verdict. */
static weft_status browser_revive(void *self) {
  browser_slot *s = self;
  browser_server *srv = s->srv;
  pthread_mutex_lock(&srv->lock);
  s->down_ack = 1; /* the fabric no longer uses the client: the admission thread may */
  if (s->ready && attached(s) && !s->admitting) {
    s->down_ack = 0;
    s->client.host = s->fabric_host;
    snprintf(s->device, sizeof s->device, "%s", s->adm_device);
    snprintf(s->details, sizeof s->details, "%s", s->adm_details);
    s->details_fixed = strlen(s->details);
    s->gpu_lane = s->adm_gpu_lane;
    memcpy(s->lane_name, s->adm_lane_name, sizeof s->lane_name);
    memset(s->ran, 0, sizeof s->ran);
    s->client.peer_routes = s->gpu_lane >= 0 ? s->adm_gpu_ops : 0;
    s->client.op_ran = browser_op_ran;
    pthread_mutex_unlock(&srv->lock);
    return WEFT_OK;
  }
  int tab = s->admitting || (s->wsi && s->bound != s->conn); /* a tab there, its verdict still to come */
  char peer[64], refusal[sizeof s->refusal];
  snprintf(peer, sizeof peer, "%s", s->peer);
  snprintf(refusal, sizeof refusal, "%s", s->refusal);
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&srv->lock);
  if (tab)
    return weft_lane_report(s->fabric_host, WEFT_ERR_LANE_FAILED,
                            "%s: the tab at %s is being admitted (handshake and bit-exact self-test)", s->name,
                            peer[0] ? peer : "?");
  set_waiting(s);
  return weft_lane_report(s->fabric_host, WEFT_ERR_LANE_FAILED, "%s is waiting for a tab: open %s%s%s%s", s->name,
                          srv->url, refusal[0] ? " (" : "", refusal, refusal[0] ? ")" : "");
}

static const weft_lane_vtable BROWSER_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION,
    .size = sizeof(weft_lane_vtable),
    .describe = browser_describe,
    .destroy = browser_destroy,
    .buffer_alloc = weft_net_client_buffer_alloc,
    .buffer_free = weft_net_client_buffer_free,
    .upload = weft_net_client_upload,
    .download = weft_net_client_download,
    .supports = browser_supports,
    .run = weft_net_client_run,
    .sync = weft_net_client_sync,
    .revive = browser_revive,
};

/* ------------------------------------------------------------------------------------------ the probe */

static void absent(const weft_lane_sink *sink, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void absent(const weft_lane_sink *sink, const char *fmt, ...) {
  char why[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  sink->add_absent(sink->ctx, "browser", why);
}

/* Resolves the address to listen on into a numeric host; 1 on success, with `loopback` set. */
static int resolve(const char *host, char *numeric, size_t nl, int *loopback, char *why, size_t whylen) {
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int gai = getaddrinfo(host, NULL, &hints, &ai);
  if (gai || !ai) {
    snprintf(why, whylen, "cannot resolve '%s': %s", host, gai ? gai_strerror(gai) : "no address");
    return 0;
  }
  *loopback = weft_net_is_loopback(ai->ai_addr);
  int ok = getnameinfo(ai->ai_addr, ai->ai_addrlen, numeric, (socklen_t)nl, NULL, 0, NI_NUMERICHOST) == 0;
  if (!ok) snprintf(why, whylen, "cannot make a numeric address of '%s'", host);
  freeaddrinfo(ai);
  return ok;
}

static weft_status server_start(browser_server *srv, long port, char *why, size_t whylen) {
  srv->protocols[0].name = "weft";
  srv->protocols[0].callback = ws_callback;
  srv->protocols[0].per_session_data_size = sizeof(tab_session);
  srv->protocols[0].rx_buffer_size = 64 << 10;
  static const struct {
    const char *ext, *type;
  } mimes[] = {{".js", "text/javascript"}, {".mjs", "text/javascript"}, {".wasm", "application/wasm"},
               {".wgsl", "text/plain"}};
  for (int i = 0; i < 4; i++) {
    srv->mime[i].name = mimes[i].ext;
    srv->mime[i].value = mimes[i].type;
    srv->mime[i].next = i < 3 ? &srv->mime[i + 1] : NULL;
  }
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.port = (int)port;
  info.iface = srv->host;
  info.protocols = srv->protocols;
  info.user = srv;
  info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
  if (!strchr(srv->host, ':')) info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
  if (srv->tls_cert[0]) {
    info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.ssl_cert_filepath = srv->tls_cert;
    info.ssl_private_key_filepath = srv->tls_key;
    /* HTTP/1.1 only: every tab's WebSocket is an upgrade of it, and this libwebsockets' HTTP/2 leaks. */
    info.alpn = "http/1.1";
  }
  /* Cross-origin isolation: the Bench page's clock ticks in microseconds instead of 0.1 ms steps, and the
   * pages load nothing from elsewhere, so it costs them nothing. */
  srv->headers[0].next = &srv->headers[1];
  srv->headers[0].name = "cross-origin-opener-policy:";
  srv->headers[0].value = "same-origin";
  srv->headers[1].next = NULL;
  srv->headers[1].name = "cross-origin-embedder-policy:";
  srv->headers[1].value = "require-corp";
  info.headers = &srv->headers[0];
  if (srv->web_dir[0]) {
    srv->mount.mountpoint = "/";
    srv->mount.mountpoint_len = 1;
    srv->mount.origin = srv->web_dir;
    srv->mount.def = "index.html";
    srv->mount.origin_protocol = LWSMPRO_FILE;
    srv->mount.extra_mimetypes = &srv->mime[0];
    info.mounts = &srv->mount;
  }
  srv->ctx = lws_create_context(&info);
  struct lws_vhost *vh = srv->ctx ? lws_get_vhost_by_name(srv->ctx, "default") : NULL;
  int bound = vh ? lws_get_vhost_listen_port(vh) : -1;
  if (!srv->ctx || bound <= 0) {
    snprintf(why, whylen, "cannot listen for tabs on %s:%ld (in use, not an address of this machine%s)", srv->host,
             port, srv->tls_cert[0] ? ", or a certificate and key that do not load" : "");
    return WEFT_ERR_IO;
  }
  srv->port = bound;
  const char *l = strchr(srv->host, ':') ? "[" : "", *r = strchr(srv->host, ':') ? "]" : "";
  snprintf(srv->url, sizeof srv->url, "%s://%s%s%s:%d/worker/#token=%s", srv->tls_cert[0] ? "https" : "http", l,
           srv->host, r, bound, srv->token);
  if (pthread_create(&srv->thread, NULL, service_main, srv) != 0) {
    snprintf(why, whylen, "cannot start the WebSocket thread");
    return WEFT_ERR_INTERNAL;
  }
  srv->thread_started = 1;
  return WEFT_OK;
}

weft_status weft_browser_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  const char *addr = args->desc->browser && args->desc->browser[0] ? args->desc->browser : getenv("WEFT_BROWSER");
  if (!addr || !addr[0]) {
    absent(sink, "not asked for: set WEFT_BROWSER=host:port or weft serve");
    return WEFT_OK;
  }
  char host[128], port_s[16], why[600] = "";
  char *end = NULL;
  long port = -1;
  if (weft_net_split_addr(addr, host, sizeof host, port_s, sizeof port_s)) port = strtol(port_s, &end, 10);
  if (port < 0 || port > 65535 || !end || *end) {
    absent(sink, "the browser address '%s' is not HOST:PORT", addr);
    return WEFT_OK;
  }
  long slots = BROWSER_SLOTS_DEFAULT;
  if (weft_env_long("WEFT_BROWSER_SLOTS", 1, BROWSER_SLOTS_MAX, &slots) < 0) {
    absent(sink, "WEFT_BROWSER_SLOTS is '%s'; use 1 to %d", getenv("WEFT_BROWSER_SLOTS"), BROWSER_SLOTS_MAX);
    return WEFT_OK;
  }
  browser_server *srv = calloc(1, sizeof *srv);
  if (!srv) return WEFT_ERR_OUT_OF_MEMORY;
  pthread_mutex_init(&srv->lock, NULL);
  srv->timeout_ms = weft_net_client_timeout_ms();
  int loopback = 0;
  weft_status st = WEFT_OK;
  if (!resolve(host, srv->host, sizeof srv->host, &loopback, why, sizeof why)) st = WEFT_ERR_INVALID_ARGUMENT;
  srv->loopback = loopback;
  srv->wildcard = strcmp(srv->host, "0.0.0.0") == 0 || strcmp(srv->host, "::") == 0;
  /* The token a tab's URL must carry, even on loopback: a page of another site cannot know it. */
  uint8_t tok[16];
  if (!st && RAND_bytes(tok, sizeof tok) != 1) {
    snprintf(why, sizeof why, "could not make a random token for the tab endpoint");
    st = WEFT_ERR_INTERNAL;
  }
  for (size_t i = 0; i < sizeof tok; i++) snprintf(srv->token + 2 * i, 3, "%02x", tok[i]);
  const char *names = getenv("WEFT_BROWSER_HOSTS");
  if (names) snprintf(srv->names, sizeof srv->names, "%s", names);
  const char *secret_file = getenv("WEFT_BROWSER_SECRET_FILE");
  if (!st && secret_file && secret_file[0] &&
      weft_net_read_secret(secret_file, srv->secret, sizeof srv->secret, &srv->secret_len, why, sizeof why))
    st = WEFT_ERR_IO;
  if (!st && !loopback && !srv->secret_len) {
    snprintf(why, sizeof why,
             "refusing to listen for tabs on '%s' without a shared secret: anything off loopback needs "
             "WEFT_BROWSER_SECRET_FILE (weft serve --secret-file)",
             addr);
    st = WEFT_ERR_INVALID_ARGUMENT;
  }
  const char *web = getenv("WEFT_BROWSER_WEB");
  struct stat sb;
  if (!st && web && web[0]) {
    if (stat(web, &sb) != 0 || !S_ISDIR(sb.st_mode) || strlen(web) >= sizeof srv->web_dir) {
      snprintf(why, sizeof why, "WEFT_BROWSER_WEB '%s' is not a folder (the web pages to serve)", web);
      st = WEFT_ERR_INVALID_ARGUMENT;
    } else {
      snprintf(srv->web_dir, sizeof srv->web_dir, "%s", web);
    }
  }
  const char *cert = getenv("WEFT_BROWSER_TLS_CERT"), *key = getenv("WEFT_BROWSER_TLS_KEY");
  int has_cert = cert && cert[0], has_key = key && key[0];
  if (!st && has_cert != has_key) {
    snprintf(why, sizeof why, "https needs both WEFT_BROWSER_TLS_CERT and WEFT_BROWSER_TLS_KEY (weft serve --tls-cert, "
                              "--tls-key)");
    st = WEFT_ERR_INVALID_ARGUMENT;
  }
  if (!st && has_cert) {
    if (access(cert, R_OK) != 0 || access(key, R_OK) != 0 || strlen(cert) >= sizeof srv->tls_cert ||
        strlen(key) >= sizeof srv->tls_key) {
      snprintf(why, sizeof why, "cannot read the TLS certificate '%s' or key '%s'", cert, key);
      st = WEFT_ERR_IO;
    } else {
      snprintf(srv->tls_cert, sizeof srv->tls_cert, "%s", cert);
      snprintf(srv->tls_key, sizeof srv->tls_key, "%s", key);
    }
  }
  const char *origins = getenv("WEFT_BROWSER_ORIGINS");
  if (origins) snprintf(srv->origins, sizeof srv->origins, "%s", origins);
  srv->slots = st ? NULL : calloc((size_t)slots, sizeof *srv->slots);
  if (!st && !srv->slots) st = WEFT_ERR_OUT_OF_MEMORY;
  for (long i = 0; !st && i < slots; i++) {
    browser_slot *s = &srv->slots[i];
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    srv->nslots++;
  }
  if (!st) {
    /* lws is chatty on stderr, errors included ("ERROR on binding fd ... to port"): a library says
     * nothing itself, and every failure comes back as this lane's reason (a port in use included). */
    lws_set_log_level(0, NULL);
    st = server_start(srv, port, why, sizeof why);
  }
  if (st) {
    absent(sink, "%s", why[0] ? why : weft_status_str(st));
    server_destroy(srv);
    return st == WEFT_ERR_OUT_OF_MEMORY ? st : WEFT_OK;
  }
  /* Every slot holds a reference before any is added: a lane the filter leaves out is destroyed at once. */
  srv->refs = (int)slots;
  for (long i = 0; i < slots; i++) {
    browser_slot *s = &srv->slots[i];
    s->srv = srv;
    s->index = (int)i;
    s->gpu_lane = -1;
    s->alive = 1;
    s->timeout_ms = srv->timeout_ms;
    snprintf(s->name, sizeof s->name, "browser:%ld", i);
    s->client.tp = &TAB_TRANSPORT;
    s->client.tp_ctx = s;
    s->client.host = args->host;
    s->client.name = s->name;
    /* Ops stream to the tab like a GPU queue: the caller goes on while the tab computes, and several tabs
     * compute at once. */
    s->client.pipeline = 1;
    s->fabric_host = args->host;
    s->adm_host.ctx = s;
    s->adm_host.report = adm_report;
    s->down_ack = 1; /* it starts down */
    set_waiting(s);
  }
  /* One admission thread per slot, so a tab that stalls its handshake holds up no other tab. */
  for (long i = 0; i < slots; i++) {
    browser_slot *s = &srv->slots[i];
    s->admit_started = pthread_create(&s->admit_thread, NULL, admit_main, s) == 0;
    if (!s->admit_started) {
      snprintf(s->refusal, sizeof s->refusal, "no admission thread could start for this slot");
      s->alive = 0;
    }
  }
  for (long i = 0; i < slots; i++) sink->add_lane(sink->ctx, &BROWSER_VTABLE, &srv->slots[i]);
  return WEFT_OK;
}
