/* browser_hostile.c - hostile clients of the tab endpoint (browser lanes, `weft serve`), without a browser:
 * raw WebSocket clients over TCP and a scripted tab that answers the wire protocol with a real worker
 * session (src/net/worker.c), so its bits are right unless its mode says otherwise. Each class of attack in
 * turn, and after each the fabric still computes right:
 *   rebinding     Host: evil.test:P, Origin: http://evil.test:P (with the right token) is refused
 *   no origin     a missing or empty Origin is refused
 *   no token      a missing or wrong token is refused; the right one is let in
 *   wrong bits    a tab whose reads are one bit off fails its self-test at join and stays out
 *   short read    an admitted tab that answers a read short is dropped, the value computed again right
 *   silent tab    a tab that connects and never answers delays no routed op (it is admitted off the op path)
 *   slot poison   tabs that fail at join (no exact lane, wrong bits) free their slot: a good tab joins after
 *   proofs        a tab's proof of the secret is no `weft worker` login, nor the reverse
 *   stalled worker  a SIGSTOPped `weft worker` delays no routed op while its lane reconnects
 *   weft serve    a tab that answers the check's read short: serve says it left, never "bit-identical"
 *
 *   test_browser_hostile WEFT */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/protocol.h"
#include "net/worker.h"
#include "netutil.h"
#include "tutil.h"
#include "weft.h"

/* ---------------------------------------------------------------------------- a raw WebSocket client */

static int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static int send_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k <= 0) return 0;
    b += k, n -= (size_t)k;
  }
  return 1;
}

/* Reads exactly n bytes, waiting at most ms for each piece; 0 on close or timeout. */
static int recv_all(int fd, void *p, size_t n, int ms) {
  uint8_t *b = p;
  while (n) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, ms) <= 0) return 0;
    ssize_t k = recv(fd, b, n, 0);
    if (k <= 0) return 0;
    b += k, n -= (size_t)k;
  }
  return 1;
}

/* The upgrade request with the headers given (NULL: left out); the connection when the server answered
 * 101, else -1 (refused). */
static int ws_open(int port, const char *host, const char *origin, const char *token) {
  int fd = tcp_connect(port);
  if (fd < 0) return -1;
  char req[1024];
  int n = snprintf(req, sizeof req,
                   "GET /weft%s%s HTTP/1.1\r\n%s%s%sUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                   "Sec-WebSocket-Protocol: weft\r\n%s%s%s\r\n",
                   token ? "?token=" : "", token ? token : "", host ? "Host: " : "", host ? host : "", host ? "\r\n" : "",
                   origin ? "Origin: " : "", origin ? origin : "", origin ? "\r\n" : "");
  char resp[2048];
  size_t got = 0;
  if (!send_all(fd, req, (size_t)n)) goto refused;
  while (got < sizeof resp - 1) {
    if (!recv_all(fd, resp + got, 1, 5000)) goto refused;
    got++;
    resp[got] = 0;
    if (got >= 4 && strcmp(resp + got - 4, "\r\n\r\n") == 0) break;
  }
  if (strncmp(resp, "HTTP/1.1 101", 12) != 0) goto refused;
  return fd;
refused:
  close(fd);
  return -1;
}

static int ws_send(int fd, const uint8_t *p, size_t n) {
  uint8_t h[14];
  size_t hl = 2;
  h[0] = 0x82;
  if (n < 126) h[1] = (uint8_t)(0x80 | n);
  else if (n < 65536) {
    h[1] = 0x80 | 126, h[2] = (uint8_t)(n >> 8), h[3] = (uint8_t)n;
    hl = 4;
  } else {
    h[1] = 0x80 | 127;
    for (int i = 0; i < 8; i++) h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
    hl = 10;
  }
  memset(h + hl, 0, 4); /* a mask of zeros: the payload goes as it is */
  return send_all(fd, h, hl + 4) && send_all(fd, p, n);
}

/* One whole message (fragments joined); its opcode (1 text, 2 binary, 8 close), or -1 on a closed or silent
 * connection. *out is malloc'ed. */
static int ws_recv(int fd, uint8_t **out, size_t *len, int ms) {
  *out = NULL, *len = 0;
  int op = -1;
  for (;;) {
    uint8_t h[2];
    if (!recv_all(fd, h, 2, ms)) break;
    uint64_t n = h[1] & 0x7f;
    uint8_t ext[8];
    if (n == 126) {
      if (!recv_all(fd, ext, 2, ms)) break;
      n = (uint64_t)ext[0] << 8 | ext[1];
    } else if (n == 127) {
      if (!recv_all(fd, ext, 8, ms)) break;
      n = 0;
      for (int i = 0; i < 8; i++) n = n << 8 | ext[i];
    }
    if (n > (64u << 20)) break;
    uint8_t *grown = realloc(*out, *len + (size_t)n + 1);
    if (!grown) break;
    *out = grown;
    if (n && !recv_all(fd, *out + *len, (size_t)n, ms)) break;
    *len += (size_t)n;
    int fop = h[0] & 0x0f;
    if (fop) op = fop;
    if (fop >= 8 || (h[0] & 0x80)) return op;
  }
  free(*out);
  *out = NULL;
  return -1;
}

/* -------------------------------------------------------------------------------- the scripted tab */

typedef struct fake {
  int fd;
  const char *mode; /* good, wrong-bit, no-exact, silent, short-read (a READ of short_n floats), auth-mac, v1 (a
                     * tab of protocol 1: refuses hello), subset (offers the version-1 ops but softmax_xent) */
  uint64_t short_n;
  const uint8_t *secret;
  size_t secret_len;
  char host[64]; /* the host:port it dialled */
  pthread_t th;
  int started;
  char closed[160]; /* "closed: REASON" once the server closed it */
} fake;

static void *fake_main(void *arg) {
  fake *k = arg;
  weft_net_worker_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.lanes = "cpu";
  char err[256];
  weft_net_server *srv = NULL;
  weft_net_session *sess = NULL;
  if (weft_net_server_create(&wd, &srv, err, sizeof err) == WEFT_OK) sess = weft_net_session_create(srv);
  weft_net_limits lim = {64u << 20, 1ull << 32};
  for (;;) {
    uint8_t *m = NULL;
    size_t n = 0;
    int op = ws_recv(k->fd, &m, &n, 60000);
    if (op != 2) {
      snprintf(k->closed, sizeof k->closed, "closed: %.*s", op == 8 && n > 2 ? (int)(n - 2) : 0,
               op == 8 && n > 2 ? (const char *)m + 2 : "");
      free(m);
      break;
    }
    weft_net_header h;
    if (!sess || n < WEFT_NET_HEADER_BYTES || weft_net_header_decode(m, &lim, &h, err, sizeof err) ||
        strcmp(k->mode, "silent") == 0) {
      free(m);
      continue;
    }
    weft_net_buf reply = {0};
    const uint8_t *payload = m + WEFT_NET_HEADER_BYTES;
    if (h.type == WEFT_NET_HELLO && strcmp(k->mode, "v1") == 0) {
      /* What a tab of protocol 1 answers a hello of version 2. */
      static const char msg[] = "protocol version 2 is not spoken here (this tab speaks 1)";
      uint8_t out[WEFT_NET_HEADER_BYTES + sizeof msg];
      weft_net_header rh = {WEFT_NET_MAGIC, (uint16_t)(h.type | WEFT_NET_REPLY), WEFT_ERR_UNSUPPORTED, h.request_id,
                            (uint32_t)(sizeof msg - 1)};
      weft_net_header_encode(&rh, out);
      memcpy(out + WEFT_NET_HEADER_BYTES, msg, sizeof msg - 1);
      ws_send(k->fd, out, WEFT_NET_HEADER_BYTES + sizeof msg - 1);
      free(m);
      continue;
    }
    if (h.type == WEFT_NET_PROVE && h.length == WEFT_NET_NONCE_BYTES) {
      uint8_t out[WEFT_NET_HEADER_BYTES + WEFT_NET_MAC_BYTES];
      weft_net_header rh = {WEFT_NET_MAGIC, (uint16_t)(h.type | WEFT_NET_REPLY), 0, h.request_id, WEFT_NET_MAC_BYTES};
      weft_net_header_encode(&rh, out);
      if (strcmp(k->mode, "auth-mac") == 0) weft_net_auth_mac(k->secret, k->secret_len, payload, out + 16);
      else weft_net_tab_mac(k->secret, k->secret_len, payload, k->host, out + 16);
      ws_send(k->fd, out, sizeof out);
      free(m);
      continue;
    }
    weft_net_session_handle(sess, &h, payload, &reply);
    if (reply.len >= 28 && h.type == WEFT_NET_READ && weft_net_get16(reply.data + 6) == 0) {
      uint64_t count = weft_net_get64(reply.data + 16);
      if (strcmp(k->mode, "wrong-bit") == 0) reply.data[24] ^= 1;
      if (strcmp(k->mode, "short-read") == 0 && count == k->short_n) {
        weft_net_put64(reply.data + 16, count - 1);
        weft_net_put32(reply.data + 12, (uint32_t)(reply.len - 16 - 4));
        reply.len -= 4;
      }
    }
    if (h.type == WEFT_NET_LANES && strcmp(k->mode, "no-exact") == 0 && reply.len >= 24)
      weft_net_put32(reply.data + 20, WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32));
    /* The first entry's op mask (after the count and its contracts): a tab offering a subset. */
    if (h.type == WEFT_NET_LANES && strcmp(k->mode, "subset") == 0 && reply.len >= 32)
      weft_net_put64(reply.data + 24, WEFT_OPS_V1 & ~WEFT_OP_BIT(WEFT_OP_SOFTMAX_XENT));
    ws_send(k->fd, reply.data, reply.len);
    weft_net_buf_free(&reply);
    free(m);
  }
  if (sess) weft_net_session_destroy(sess);
  if (srv) weft_net_server_destroy(srv);
  return NULL;
}

/* Connects a scripted tab as the worker page would (its Host and Origin, the token); 0 when refused. */
/* `secret` (may be NULL) is set before the tab's thread starts: it answers PROVE with it. */
static int fake_start_secret(fake *k, int port, const char *token, const char *mode, const uint8_t *secret,
                             size_t secret_len) {
  memset(k, 0, sizeof *k);
  k->mode = mode;
  k->secret = secret, k->secret_len = secret_len;
  snprintf(k->host, sizeof k->host, "127.0.0.1:%d", port);
  char origin[96];
  snprintf(origin, sizeof origin, "http://%s", k->host);
  k->fd = ws_open(port, k->host, origin, token);
  if (k->fd < 0) return 0;
  k->started = pthread_create(&k->th, NULL, fake_main, k) == 0;
  return k->started;
}

static int fake_start(fake *k, int port, const char *token, const char *mode) {
  return fake_start_secret(k, port, token, mode, NULL, 0);
}

/* Waits for the scripted tab to be closed by the server (at most `seconds`); 1 when it was. */
static int fake_wait_closed(fake *k, double seconds) {
  double end = tu_now() + seconds;
  while (tu_now() < end) {
    if (__atomic_load_n(&k->closed[0], __ATOMIC_ACQUIRE)) return 1;
    usleep(20000);
  }
  return 0;
}

static void fake_stop(fake *k) {
  if (k->fd >= 0) shutdown(k->fd, SHUT_RDWR);
  if (k->started) pthread_join(k->th, NULL);
  if (k->fd >= 0) close(k->fd);
  k->fd = -1;
  k->started = 0;
}

/* ------------------------------------------------------------------------------------------ helpers */

static int lane_up(weft_fabric *f, size_t lane) {
  weft_lane_info li;
  return weft_fabric_lane_info(f, lane, &li) == WEFT_OK && !li.failed;
}

static int wait_up(weft_fabric *f, size_t lane, double seconds) {
  double end = tu_now() + seconds;
  while (tu_now() < end) {
    weft_fabric_revive(f, NULL);
    if (lane_up(f, lane)) return 1;
    usleep(20000);
  }
  return 0;
}

/* The fabric still computes right: a routed 33x17x9 matmul and a relu, against the CPU lane pinned. */
static void still_right(weft_fabric *f, size_t cpu, const char *after) {
  tu_rng r = {tu_seed()};
  int64_t ad[2] = {33, 17}, bd[2] = {17, 9}, cd[2] = {33, 9};
  float a[33 * 17], b[17 * 9], c1[33 * 9], c2[33 * 9];
  for (int i = 0; i < 33 * 17; i++) a[i] = tu_rng_float(&r, -1, 1);
  for (int i = 0; i < 17 * 9; i++) b[i] = tu_rng_float(&r, -1, 1);
  weft_tensor *ta = NULL, *tb = NULL, *tc = NULL;
  weft_tensor_create(f, 2, ad, a, &ta);
  weft_tensor_create(f, 2, bd, b, &tb);
  weft_tensor_create(f, 2, cd, NULL, &tc);
  weft_op_desc on_cpu = WEFT_OP_DESC_INIT;
  on_cpu.lane = (int)cpu;
  weft_status st = weft_op_matmul(f, NULL, ta, 0, tb, 0, tc);
  if (!st) st = weft_tensor_read(tc, c1, 33 * 9);
  if (!st) st = weft_op_matmul(f, &on_cpu, ta, 0, tb, 0, tc);
  if (!st) st = weft_tensor_read(tc, c2, 33 * 9);
  if (!st) st = weft_op_relu(f, NULL, tc, tc);
  float z[33 * 9];
  if (!st) st = weft_tensor_read(tc, z, 33 * 9);
  int ok = !st && memcmp(c1, c2, sizeof c1) == 0;
  for (int i = 0; ok && i < 33 * 9; i++) ok = z[i] == (c2[i] > 0 ? c2[i] : 0);
  TU_CHECK(ok, "after %s: the fabric still computes right (%s)", after, st ? weft_fabric_last_error(f) : "ok");
  weft_tensor_destroy(ta), weft_tensor_destroy(tb), weft_tensor_destroy(tc);
}

/* The slowest of routed 4-element relus run for `seconds`, in seconds. */
static double slowest_tiny_op(weft_fabric *f, double seconds) {
  int64_t d[1] = {4};
  float v[4] = {1, -2, 3, -4}, y[4];
  weft_tensor *x = NULL, *o = NULL;
  weft_tensor_create(f, 1, d, v, &x);
  weft_tensor_create(f, 1, d, NULL, &o);
  double worst = 0, end = tu_now() + seconds;
  int wrong = 0;
  while (tu_now() < end) {
    double t0 = tu_now();
    weft_status st = weft_op_relu(f, NULL, x, o);
    if (!st) st = weft_tensor_read(o, y, 4);
    double t = tu_now() - t0;
    worst = t > worst ? t : worst;
    wrong += st || y[0] != 1 || y[1] != 0 || y[2] != 3 || y[3] != 0;
    usleep(5000);
  }
  TU_CHECK(!wrong, "every routed relu is right (%d wrong)", wrong);
  weft_tensor_destroy(x), weft_tensor_destroy(o);
  return worst;
}

/* A fabric of the CPU and `slots` browser slots on a free loopback port; its port and token. */
static weft_fabric *open_fabric(const char *slots, int *port, char *token, size_t tn, size_t *tab, size_t *cpu) {
  setenv("WEFT_BROWSER_SLOTS", slots, 1);
  weft_fabric_desc desc = tu_desc();
  desc.lanes = "cpu,browser";
  desc.browser = "127.0.0.1:0";
  desc.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  if (weft_fabric_open(&desc, &f) || weft_fabric_lane_find(f, "browser:0", tab) || weft_fabric_lane_find(f, "cpu", cpu)) {
    weft_fabric_close(f);
    return NULL;
  }
  weft_lane_info li;
  weft_fabric_lane_info(f, *tab, &li);
  const char *u = strstr(li.details, "http://127.0.0.1:"), *t = strstr(li.details, "#token=");
  *port = u ? atoi(u + 17) : 0;
  snprintf(token, tn, "%.*s", t ? (int)strspn(t + 7, "0123456789abcdef") : 0, t ? t + 7 : "");
  return f;
}

/* ------------------------------------------------------------------------------------------ the classes */

static void check_endpoint(weft_fabric *f, int port, const char *token, size_t cpu) {
  char host[64], origin[96], evil_host[64], evil_origin[96];
  snprintf(host, sizeof host, "127.0.0.1:%d", port);
  snprintf(origin, sizeof origin, "http://%s", host);
  snprintf(evil_host, sizeof evil_host, "evil.test:%d", port);
  snprintf(evil_origin, sizeof evil_origin, "http://evil.test:%d", port);
  int fd = ws_open(port, evil_host, evil_origin, token);
  TU_CHECK(fd < 0, "rebinding: Host %s, Origin %s is refused", evil_host, evil_origin);
  if (fd >= 0) close(fd);
  snprintf(evil_host, sizeof evil_host, "127.0.0.1:%d", port + 1 > 65535 ? 1 : port + 1);
  fd = ws_open(port, evil_host, NULL, token);
  TU_CHECK(fd < 0, "a Host with another port is refused");
  if (fd >= 0) close(fd);
  still_right(f, cpu, "rebinding");
  fd = ws_open(port, host, NULL, token);
  TU_CHECK(fd < 0, "no Origin: refused");
  if (fd >= 0) close(fd);
  fd = ws_open(port, host, "", token);
  TU_CHECK(fd < 0, "an empty Origin: refused");
  if (fd >= 0) close(fd);
  still_right(f, cpu, "no Origin");
  fd = ws_open(port, host, origin, NULL);
  TU_CHECK(fd < 0, "no token: refused");
  if (fd >= 0) close(fd);
  char wrong[64];
  snprintf(wrong, sizeof wrong, "%s", token);
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  fd = ws_open(port, host, origin, wrong);
  TU_CHECK(fd < 0, "a wrong token: refused");
  if (fd >= 0) close(fd);
  fd = ws_open(port, "localhost", origin, token);
  TU_CHECK(fd < 0, "a Host without the port: refused");
  if (fd >= 0) close(fd);
  /* The right token, Host and Origin: let in (then closed by us). */
  fd = ws_open(port, host, origin, token);
  TU_CHECK(fd >= 0, "the right token, Host and Origin: let in");
  if (fd >= 0) close(fd);
  char lh[64], lo[96];
  snprintf(lh, sizeof lh, "localhost:%d", port);
  snprintf(lo, sizeof lo, "http://localhost:%d", port);
  fd = ws_open(port, lh, lo, token);
  TU_CHECK(fd >= 0, "Host localhost:%d (a name of loopback): let in", port);
  if (fd >= 0) close(fd);
  still_right(f, cpu, "no token");
}

/* A tab refused at join frees its slot: `modes` in turn on a one-slot fabric, then a good tab joins. */
static void check_refused_at_join(weft_fabric *f, int port, const char *token, size_t tab, size_t cpu) {
  const char *modes[] = {"no-exact", "wrong-bit", "v1", "no-exact", "wrong-bit"};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    fake k;
    int in = fake_start(&k, port, token, modes[i]);
    TU_CHECK(in, "%s: the tab connected (the slot was free)", modes[i]);
    for (int j = 0; in && j < 100 && !k.closed[0]; j++) {
      weft_fabric_revive(f, NULL);
      usleep(20000);
    }
    TU_CHECK(in && fake_wait_closed(&k, 10), "%s: the tab was refused at join (%s)", modes[i], k.closed);
    TU_CHECK(!lane_up(f, tab), "%s: the lane stays down", modes[i]);
    if (strcmp(modes[i], "v1") == 0)
      TU_CHECK(tu_contains(k.closed, "older protocol"), "v1: a tab of protocol 1 is told why (%s)", k.closed);
    if (strcmp(modes[i], "wrong-bit") == 0) {
      TU_CHECK(tu_contains(k.closed, "self-test"), "wrong-bit: told it failed the self-test (%s)", k.closed);
      weft_fabric_revive(f, NULL); /* the lane's reason is the one its last revive gave */
      weft_op_desc od = WEFT_OP_DESC_INIT;
      od.lane = (int)tab;
      int64_t d[1] = {4};
      weft_tensor *t = NULL;
      weft_tensor_create(f, 1, d, NULL, &t);
      weft_status st = weft_op_relu(f, &od, t, t);
      TU_CHECK(st == WEFT_ERR_LANE_FAILED && tu_contains(weft_fabric_last_error(f), "refused"),
               "wrong-bit: the lane says the tab was refused (%s)", weft_fabric_last_error(f));
      weft_tensor_destroy(t);
    }
    fake_stop(&k);
    still_right(f, cpu, modes[i]);
  }
  /* After all of them the one slot is free: a good tab joins, computes right, and is then dropped on a
   * short read, the value computed again on the CPU. */
  fake k;
  TU_CHECK(fake_start(&k, port, token, "short-read"), "a good tab connects after the refused ones");
  k.short_n = 4;
  TU_CHECK(wait_up(f, tab, 20), "the good tab is admitted to the freed slot");
  int64_t d[1] = {4};
  float v[4] = {1, -2, 3, -4}, y[4] = {0};
  weft_tensor *x = NULL, *o = NULL;
  weft_tensor_create(f, 1, d, v, &x);
  weft_tensor_create(f, 1, d, NULL, &o);
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = (int)tab;
  TU_STATUS(weft_op_relu(f, &od, x, o), WEFT_OK, "an exact relu pinned to the admitted tab");
  weft_status st = weft_tensor_read(o, y, 4);
  TU_CHECK(st == WEFT_OK && y[0] == 1 && y[1] == 0 && y[2] == 3 && y[3] == 0,
           "short read: the value is computed again right (%s)", st ? weft_fabric_last_error(f) : "ok");
  TU_CHECK(!lane_up(f, tab), "short read: the tab's lane is down");
  TU_CHECK(fake_wait_closed(&k, 10), "short read: the tab was dropped (%s)", k.closed);
  weft_tensor_destroy(x), weft_tensor_destroy(o);
  fake_stop(&k);
  still_right(f, cpu, "short read");
}

/* A tab that offers a subset of the ops: admitted for those (its self-test covers them), and an op it does
 * not offer is never sent to it: pinned there it is UNSUPPORTED, routed it runs elsewhere. */
static void check_subset(weft_fabric *f, int port, const char *token, size_t tab, size_t cpu) {
  fake k;
  TU_CHECK(fake_start(&k, port, token, "subset"), "a tab offering a subset connects");
  TU_CHECK(wait_up(f, tab, 20), "the tab offering all version-1 ops but softmax_xent is admitted");
  int64_t d[2] = {2, 3}, d1[1] = {1};
  float z[6] = {1, 2, 3, -1, 0, 1}, t[6] = {0, 0, 1, 1, 0, 0}, loss = 0;
  weft_tensor *x = NULL, *tt = NULL, *o = NULL, *l = NULL;
  weft_tensor_create(f, 2, d, z, &x);
  weft_tensor_create(f, 2, d, t, &tt);
  weft_tensor_create(f, 2, d, NULL, &o);
  weft_tensor_create(f, 1, d1, NULL, &l);
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = (int)tab;
  TU_STATUS(weft_op_relu(f, &od, x, o), WEFT_OK, "relu pinned to the tab, which offers it");
  weft_status st = weft_op_softmax_xent(f, &od, x, tt, l, NULL);
  TU_CHECK(st == WEFT_ERR_UNSUPPORTED, "softmax_xent pinned to the tab, which does not offer it: %s (%s)",
           weft_status_str(st), weft_fabric_last_error(f));
  TU_STATUS(weft_op_softmax_xent(f, NULL, x, tt, l, NULL), WEFT_OK, "softmax_xent routed");
  TU_CHECK(weft_fabric_last_lane(f) != (int)tab, "the routed softmax_xent ran off the tab");
  TU_CHECK(weft_tensor_read(l, &loss, 1) == WEFT_OK && loss > 0, "and gave a loss");
  TU_CHECK(lane_up(f, tab), "the tab's lane is still up");
  weft_tensor_destroy(x), weft_tensor_destroy(tt), weft_tensor_destroy(o), weft_tensor_destroy(l);
  fake_stop(&k);
  still_right(f, cpu, "a tab offering a subset");
}

/* A tab that connects and never answers: routed tiny ops do not wait for its handshake. */
static void check_silent(weft_fabric *f, int port, const char *token, size_t cpu) {
  fake k;
  TU_CHECK(fake_start(&k, port, token, "silent"), "a silent tab connects");
  usleep(200000); /* attached before the first routed op, which asks the down lanes (the slot is new) */
  double worst = slowest_tiny_op(f, 1.5);
  printf("  silent tab: the slowest routed 4-element relu took %.1f ms\n", worst * 1e3);
  /* waiting for the tab would take the handshake timeout (5 s); the bound leaves a loaded machine its noise */
  TU_CHECK(worst < 1.5, "a silent tab delays no routed op past 1.5 s (slowest %.0f ms)", worst * 1e3);
  TU_CHECK(fake_wait_closed(&k, 15), "the silent tab is dropped after the handshake timeout (%s)", k.closed);
  fake_stop(&k);
  still_right(f, cpu, "a silent tab");
}

/* The tab's proof and the worker's login are different things. */
static void check_proofs(void) {
  static const uint8_t secret[] = "correct-horse-battery-staple-42";
  uint8_t nonce[WEFT_NET_NONCE_BYTES], tab[32], tab2[32], auth[32];
  for (int i = 0; i < 32; i++) nonce[i] = (uint8_t)(i * 37 + 1);
  weft_net_tab_mac(secret, sizeof secret - 1, nonce, "127.0.0.1:8080", tab);
  weft_net_tab_mac(secret, sizeof secret - 1, nonce, "evil.test:8080", tab2);
  weft_net_auth_mac(secret, sizeof secret - 1, nonce, auth);
  TU_CHECK(memcmp(tab, auth, 32) != 0, "a tab's proof differs from a worker login for the same nonce");
  TU_CHECK(memcmp(tab, tab2, 32) != 0, "a tab's proof names the server it dialled");
  /* A worker with the secret: the tab's answer to its nonce is refused as AUTH_FINISH; the real login passes. */
  weft_net_worker_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.lanes = "cpu";
  wd.secret = secret;
  wd.secret_len = sizeof secret - 1;
  char err[256];
  weft_net_server *srv = NULL;
  if (weft_net_server_create(&wd, &srv, err, sizeof err)) {
    TU_CHECK(0, "a worker server with a secret: %s", err);
    return;
  }
  for (int round = 0; round < 2; round++) {
    weft_net_session *s = weft_net_session_create(srv);
    uint8_t hello[8];
    weft_net_put32(hello, WEFT_NET_VERSION);
    weft_net_put32(hello + 4, 0);
    weft_net_header h = {WEFT_NET_MAGIC, WEFT_NET_HELLO, 0, 1, sizeof hello};
    weft_net_buf r = {0};
    weft_net_session_handle(s, &h, hello, &r);
    /* The worker login is mutual: AUTH_START (the worker's proof and identity back), then the client's
     * proof in AUTH_FINISH. Round 0 offers a tab's PROVE answer there instead. */
    uint8_t mac[32] = {0}, wn[32] = {0}, cn[32];
    memset(cn, 5, sizeof cn);
    if (r.len >= 16 + 44) memcpy(wn, r.data + 16 + 12, sizeof wn);
    r.len = 0;
    weft_net_header as = {WEFT_NET_MAGIC, WEFT_NET_AUTH_START, 0, 2, sizeof cn};
    weft_net_session_handle(s, &as, cn, &r);
    char id[WEFT_NET_MAX_IDENTITY + 1] = "";
    if (r.len >= 16 + 34 && weft_net_get16(r.data + 6) == 0) {
      size_t il = weft_net_get16(r.data + 16 + 32);
      if (il <= WEFT_NET_MAX_IDENTITY && r.len == 16 + 34 + il) memcpy(id, r.data + 16 + 34, il);
    }
    if (round == 0) weft_net_tab_mac(secret, sizeof secret - 1, wn, "127.0.0.1:7070", mac);
    else weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, secret, sizeof secret - 1, wn, cn, id, mac);
    r.len = 0;
    weft_net_header a = {WEFT_NET_MAGIC, WEFT_NET_AUTH_FINISH, 0, 3, 32};
    weft_net_session_handle(s, &a, mac, &r);
    int status = r.len >= 16 ? weft_net_get16(r.data + 6) : -1;
    if (round == 0) TU_CHECK(status != 0, "a tab's proof is refused as a worker login (status %d)", status);
    else TU_CHECK(status == 0, "the worker login itself passes (status %d)", status);
    weft_net_buf_free(&r);
    weft_net_session_destroy(s);
  }
  weft_net_server_destroy(srv);
}

/* A fabric with a secret: a tab answering PROVE with a worker login is refused; the tab's own proof joins. */
static void check_tab_proof(void) {
  static const uint8_t secret[] = "correct-horse-battery-staple-42";
  char path[] = "weft-hostile-secret-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, secret, sizeof secret - 1) != (ssize_t)(sizeof secret - 1)) {
    TU_CHECK(0, "a secret file could be written");
    return;
  }
  close(fd);
  setenv("WEFT_BROWSER_SECRET_FILE", path, 1);
  int port = 0;
  char token[64];
  size_t tab = 0, cpu = 0;
  weft_fabric *f = open_fabric("1", &port, token, sizeof token, &tab, &cpu);
  unsetenv("WEFT_BROWSER_SECRET_FILE");
  unlink(path);
  if (!f) {
    TU_CHECK(0, "a fabric with a secret opens");
    return;
  }
  fake k;
  TU_CHECK(fake_start_secret(&k, port, token, "auth-mac", secret, sizeof secret - 1),
           "a tab answering with a worker login connects");
  for (int j = 0; j < 100 && !k.closed[0]; j++) weft_fabric_revive(f, NULL), usleep(20000);
  TU_CHECK(fake_wait_closed(&k, 10) && tu_contains(k.closed, "proof"), "a worker login is no tab proof (%s)",
           k.closed);
  TU_CHECK(!lane_up(f, tab), "its lane stays down");
  fake_stop(&k);
  TU_CHECK(fake_start_secret(&k, port, token, "good", secret, sizeof secret - 1),
           "a tab with the tab's proof connects");
  TU_CHECK(wait_up(f, tab, 20), "the tab's own proof admits it");
  fake_stop(&k);
  weft_fabric_close(f);
}

/* A worker stopped (SIGSTOP) under a remote lane: routed tiny ops do not wait for its reconnection. */
static void check_stalled_worker(const char *weft) {
  nt_worker w;
  if (!nt_start(weft, NULL, &w)) {
    TU_CHECK(0, "a weft worker started");
    return;
  }
  setenv("WEFT_REMOTE_TIMEOUT_MS", "3000", 1);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);
  weft_fabric_desc desc = tu_desc();
  desc.lanes = "cpu,remote";
  desc.remote = addr;
  desc.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  size_t rl = 0;
  if (weft_fabric_open(&desc, &f) || weft_fabric_lane_find(f, "remote:127.0.0.1", &rl) != WEFT_OK) {
    /* the lane's name carries the worker's lane: find it by kind */
    rl = (size_t)-1;
    for (size_t i = 0; f && i < weft_fabric_lane_count(f); i++) {
      weft_lane_info li;
      if (!weft_fabric_lane_info(f, i, &li) && strcmp(li.kind, "remote") == 0) rl = i;
    }
  }
  if (!f || rl == (size_t)-1) {
    TU_CHECK(0, "a fabric with the worker's lane opens");
    weft_fabric_close(f);
    nt_stop(&w);
    return;
  }
  kill(w.pid, SIGSTOP);
  /* kill returns before the worker's threads have stopped: one still running could answer the op. The
   * stop is waited for, as a parent can (as test_net_fault does). */
  int wst = 0;
  TU_CHECK(waitpid(w.pid, &wst, WUNTRACED) == w.pid && WIFSTOPPED(wst), "the worker stopped");
  /* An op pinned to the stopped worker times out and takes the lane down. */
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = (int)rl;
  int64_t d[1] = {4};
  weft_tensor *t = NULL;
  weft_tensor_create(f, 1, d, NULL, &t);
  weft_status st = weft_op_relu(f, &od, t, t);
  if (!st) st = weft_fabric_sync(f);
  weft_tensor_destroy(t);
  TU_CHECK(st == WEFT_ERR_LANE_FAILED && !lane_up(f, rl), "the stopped worker's lane goes down (%s)",
           weft_status_str(st));
  double worst = slowest_tiny_op(f, 2.5);
  printf("  stopped worker: the slowest routed 4-element relu took %.1f ms\n", worst * 1e3);
  /* waiting for the reconnection would take the remote timeout (3 s); the bound leaves a loaded machine its noise */
  TU_CHECK(worst < 1.5, "a stopped worker delays no routed op past 1.5 s (slowest %.0f ms)", worst * 1e3);
  kill(w.pid, SIGCONT);
  still_right(f, 0, "a stopped worker");
  weft_fabric_close(f);
  nt_stop(&w);
  unsetenv("WEFT_REMOTE_TIMEOUT_MS");
}

/* `weft serve` with a tab that passes its self-test and answers the check's read (64 x 64) short. */
static void check_serve_report(const char *weft) {
  int pfd[2];
  if (pipe(pfd)) return;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pfd[1], 1);
    close(pfd[0]);
    execl(weft, weft, "serve", "--port", "0", "--slots", "1", (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  char line[1024], all[8192] = "";
  size_t have = 0;
  int port = 0;
  char token[64] = "";
  fake k;
  memset(&k, 0, sizeof k);
  k.fd = -1;
  double end = tu_now() + 30;
  int joined = 0, left = 0;
  while (tu_now() < end) {
    /* A line at a time, straight from the pipe (a FILE would buffer past what poll sees). */
    struct pollfd pf = {pfd[0], POLLIN, 0};
    if (poll(&pf, 1, 1000) <= 0) continue;
    char ch;
    if (read(pfd[0], &ch, 1) != 1) break;
    if (have < sizeof line - 1) line[have++] = ch;
    if (ch != '\n') continue;
    line[have] = 0;
    have = 0;
    strncat(all, line, sizeof all - strlen(all) - 1);
    const char *u = strstr(line, "worker page: http://127.0.0.1:");
    if (u && !k.started) {
      port = atoi(u + 30);
      const char *t = strstr(line, "#token=");
      snprintf(token, sizeof token, "%.*s", t ? (int)strspn(t + 7, "0123456789abcdef") : 0, t ? t + 7 : "");
      TU_CHECK(fake_start(&k, port, token, "short-read"), "a tab connects to weft serve");
      k.short_n = 64 * 64;
    }
    joined |= strstr(line, "a tab joined") != NULL;
    if (strstr(line, "the tab of browser:0 left")) {
      left = 1;
      break;
    }
  }
  TU_CHECK(joined && left, "weft serve says the tab joined, then that it left");
  TU_CHECK(!tu_contains(all, "bit-identical"), "weft serve never calls the recomputed result bit-identical");
  TU_CHECK(tu_contains(all, "computed again on cpu"), "weft serve says where the result was computed");
  printf("%s", all);
  kill(pid, SIGINT);
  waitpid(pid, NULL, 0);
  fake_stop(&k);
  close(pfd[0]);
}

int main(int argc, char **argv) {
  double start = tu_now();
  if (argc < 2) {
    fprintf(stderr, "usage: test_browser_hostile WEFT\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  unsetenv("WEFT_BROWSER_ORIGINS");
  setenv("WEFT_REMOTE_TIMEOUT_MS", "30000", 1);
  int port = 0;
  char token[64];
  size_t tab = 0, cpu = 0;
  weft_fabric *f = open_fabric("1", &port, token, sizeof token, &tab, &cpu);
  if (!f || !port || strlen(token) != 32) {
    printf("FAIL: a fabric with a browser slot did not open (port %d, token '%s')\n", port, token);
    weft_fabric_close(f);
    return 1;
  }
  check_silent(f, port, token, cpu); /* first: the fabric's first routed op asks the new slot */
  check_endpoint(f, port, token, cpu);
  check_refused_at_join(f, port, token, tab, cpu);
  check_subset(f, port, token, tab, cpu);
  weft_fabric_close(f);
  check_proofs();
  check_tab_proof();
  check_stalled_worker(argv[1]);
  check_serve_report(argv[1]);
  return tu_finish("browser_hostile", start);
}
