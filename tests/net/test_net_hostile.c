/* test_net_hostile.c - `weft worker` against hostile clients, one class at a time; after each class the
 * worker must still compute right (a matmul checked bit for bit against the canonical order):
 *
 *  - lockout: 160 connections that send nothing or one byte and stall, held open, must not keep a client
 *    that holds the secret out (the handshake stage has its own cap and drops the oldest for a newcomer);
 *    a silent connection is dropped at the handshake deadline, an authenticated one at the idle timeout;
 *  - memory before auth: HELLO headers claiming 64 MiB, followed by the bytes, are refused and closed
 *    without the worker growing; a frame of another type before the proof likewise;
 *  - the worker-wide memory cap: two connections share it (tensors and receive buffers count). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/tls.h"
#include "netutil.h"
#include "tutil.h"

static const char secret[] = "correct horse battery staple 42";
static uint64_t seed;

static void still_right(nt_worker *w, const char *sec, const char *after) {
  TU_CHECK(nt_alive(w), "the worker died after %s", after);
  TU_CHECK(nt_matmul_right(w->port, sec, 19, 33, 7, seed++), "a matmul after %s is wrong or failed", after);
}

/* ------------------------------------------------------------------------------------------ lockout */

static void test_lockout(const char *weft, const char *secret_path) {
  nt_worker w;
  const char *extra[] = {"--secret-file", secret_path, "--handshake-timeout-ms", "3000", NULL};
  TU_CHECK(nt_start(weft, extra, &w), "worker with a secret starts");
  if (!w.port) return;
  enum { IDLE = 80, TRICKLE = 80 };
  int fds[IDLE + TRICKLE];
  int opened = 0;
  for (int i = 0; i < IDLE + TRICKLE; i++) {
    fds[i] = nt_connect(w.port);
    if (fds[i] < 0) continue;
    opened++;
    /* One byte of a header, then nothing. */
    if (i >= IDLE) nt_send_raw(fds[i], "W", 1);
  }
  TU_CHECK(opened == IDLE + TRICKLE, "opened %d of %d hostile connections", opened, IDLE + TRICKLE);
  /* The client that holds the secret gets in promptly, while every hostile socket is still open. */
  double t0 = tu_now();
  int right = nt_matmul_right(w.port, secret, 21, 17, 9, seed++);
  double took = tu_now() - t0;
  TU_CHECK(right, "an authenticated client behind %d idle and trickling connections was locked out or got wrong bits",
           opened);
  TU_CHECK(took < 10.0, "the authenticated client took %.1f s behind idle and trickling connections", took);
  for (int i = 0; i < IDLE + TRICKLE; i++)
    if (fds[i] >= 0) close(fds[i]);
  still_right(&w, secret, "160 idle and trickling connections");

  /* The handshake deadline: a silent connection and a trickling one are dropped (3 s here). */
  int idle = nt_connect(w.port), trickle = nt_connect(w.port);
  nt_send_raw(trickle, "WE", 2);
  t0 = tu_now();
  TU_CHECK(nt_wait_closed(idle, 15.0), "a silent connection was not dropped at the handshake deadline");
  TU_CHECK(nt_wait_closed(trickle, 5.0), "a trickling connection was not dropped at the handshake deadline");
  TU_CHECK(tu_now() - t0 > 1.0, "the connections were dropped before the handshake deadline");
  close(idle);
  close(trickle);
  /* HELLO, then silence before AUTH: dropped too. */
  int half = nt_connect(w.port);
  TU_CHECK(nt_hello(half, NULL) == 0, "hello");
  TU_CHECK(nt_wait_closed(half, 15.0), "a connection that never sent its proof was not dropped");
  close(half);
  still_right(&w, secret, "the handshake deadline");
  nt_stop(&w);

  /* The idle timeout between frames of an authenticated connection. */
  const char *extra2[] = {"--secret-file", secret_path, "--idle-timeout-s", "1", NULL};
  TU_CHECK(nt_start(weft, extra2, &w), "worker with an idle timeout starts");
  if (!w.port) return;
  int fd = nt_connect(w.port);
  uint8_t nonce[WEFT_NET_NONCE_BYTES];
  TU_CHECK(nt_hello(fd, nonce) == 0 && nt_auth(fd, nonce, secret) == 0, "authenticated");
  TU_CHECK(nt_call(fd, WEFT_NET_LANES, NULL, 0, NULL, NULL) == 0, "served");
  TU_CHECK(nt_wait_closed(fd, 15.0), "an idle authenticated connection was not dropped at the idle timeout");
  close(fd);
  still_right(&w, secret, "the idle timeout");
  nt_stop(&w);
}

/* The same with TLS on: sockets that never start TLS (silent, or a TLS record's first byte and no more) are
 * held in the handshake stage like any other, and a TLS client with the secret gets in behind them. */
static int tls_call(weft_net_conn *c, uint16_t type, uint32_t id, const void *payload, uint32_t len, uint8_t **out,
                    uint32_t *out_len) {
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, type, 0, id, len};
  weft_net_header_encode(&h, hb);
  const uint8_t *piece[3] = {hb, payload, NULL};
  const size_t plen[3] = {sizeof hb, len, 0};
  if (!weft_net_conn_send3(c, piece, plen) || !weft_net_conn_recv_all(c, hb, sizeof hb)) return -1;
  uint32_t n = weft_net_get32(hb + 12);
  if (weft_net_get32(hb + 8) != id || n > (1u << 20)) return -1;
  uint8_t *p = malloc(n + 1);
  if (!p || !weft_net_conn_recv_all(c, p, n)) {
    free(p);
    return -1;
  }
  if (out) *out = p;
  else free(p);
  if (out_len) *out_len = n;
  return weft_net_get16(hb + 6);
}

static int tls_round_trip(int port, char *err, size_t errlen) {
  weft_net_tls *t = NULL;
  if (weft_net_tls_create(0, (const uint8_t *)secret, strlen(secret), &t, err, errlen)) return 0;
  weft_net_conn c;
  weft_net_conn_init(&c, nt_connect(port));
  int ok = c.fd >= 0 && weft_net_conn_connect(&c, t, err, errlen) == WEFT_OK;
  uint8_t pl[64], *r = NULL, wn[WEFT_NET_NONCE_BYTES], cn[WEFT_NET_NONCE_BYTES], mac[WEFT_NET_MAC_BYTES];
  uint32_t n = 0;
  weft_net_put32(pl, WEFT_NET_VERSION);
  weft_net_put32(pl + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256 | WEFT_NET_CAP_AUTH_MUTUAL);
  ok = ok && tls_call(&c, WEFT_NET_HELLO, 1, pl, 8, &r, &n) == 0 && n >= 12 + WEFT_NET_NONCE_BYTES;
  if (ok) memcpy(wn, r + 12, sizeof wn);
  free(r), r = NULL;
  memset(cn, 9, sizeof cn);
  ok = ok && tls_call(&c, WEFT_NET_AUTH_START, 2, cn, sizeof cn, &r, &n) == 0 && n >= WEFT_NET_MAC_BYTES + 2;
  char id[WEFT_NET_MAX_IDENTITY + 1] = "";
  size_t il = ok ? weft_net_get16(r + WEFT_NET_MAC_BYTES) : 0;
  ok = ok && il <= WEFT_NET_MAX_IDENTITY && n == WEFT_NET_MAC_BYTES + 2 + il;
  if (ok) memcpy(id, r + WEFT_NET_MAC_BYTES + 2, il);
  free(r), r = NULL;
  ok = ok && weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, (const uint8_t *)secret, strlen(secret), wn, cn, id, mac) == 0;
  ok = ok && tls_call(&c, WEFT_NET_AUTH_FINISH, 3, mac, sizeof mac, NULL, NULL) == 0;
  /* A tensor's bits there and back. */
  weft_net_put32(pl, WEFT_DTYPE_F32);
  weft_net_put32(pl + 4, 1);
  weft_net_put64(pl + 8, 5);
  ok = ok && tls_call(&c, WEFT_NET_CREATE, 4, pl, 16, &r, &n) == 0 && n == 8;
  uint64_t h = ok ? weft_net_get64(r) : 0;
  free(r), r = NULL;
  const float x[5] = {1.5f, -2.25f, 3e-7f, 65504.0f, -0.0f};
  weft_net_put64(pl, h);
  weft_net_put64(pl + 8, 0);
  weft_net_put64(pl + 16, 5);
  memcpy(pl + 24, x, sizeof x);
  ok = ok && tls_call(&c, WEFT_NET_WRITE, 5, pl, 24 + sizeof x, NULL, NULL) == 0;
  ok = ok && tls_call(&c, WEFT_NET_READ, 6, pl, 24, &r, &n) == 0 && n == 8 + sizeof x &&
       memcmp(r + 8, x, sizeof x) == 0;
  free(r);
  weft_net_conn_close(&c);
  weft_net_tls_destroy(t);
  return ok;
}

static void test_lockout_tls(const char *weft, const char *secret_path) {
  nt_worker w;
  const char *extra[] = {"--secret-file", secret_path, "--tls", "--handshake-timeout-ms", "3000", NULL};
  TU_CHECK(nt_start(weft, extra, &w), "worker with a secret and --tls starts");
  if (!w.port) return;
  enum { IDLE = 80, TRICKLE = 80 };
  int fds[IDLE + TRICKLE];
  int opened = 0;
  for (int i = 0; i < IDLE + TRICKLE; i++) {
    fds[i] = nt_connect(w.port);
    if (fds[i] < 0) continue;
    opened++;
    /* The first byte of a TLS handshake record, then nothing. */
    if (i >= IDLE) nt_send_raw(fds[i], "\x16", 1);
  }
  TU_CHECK(opened == IDLE + TRICKLE, "opened %d of %d hostile connections", opened, IDLE + TRICKLE);
  char err[512] = "";
  double t0 = tu_now();
  int right = tls_round_trip(w.port, err, sizeof err);
  double took = tu_now() - t0;
  TU_CHECK(right, "a TLS client with the secret behind %d sockets that never start TLS was locked out (%s)", opened,
           err);
  TU_CHECK(took < 10.0, "the TLS client took %.1f s behind sockets that never start TLS", took);
  /* The deadline covers TLS's handshake: a socket that never starts TLS is closed. */
  int idle = nt_connect(w.port);
  TU_CHECK(nt_wait_closed(idle, 15.0), "a socket that never started TLS outlived the handshake deadline");
  close(idle);
  for (int i = 0; i < IDLE + TRICKLE; i++)
    if (fds[i] >= 0) close(fds[i]);
  TU_CHECK(nt_alive(&w) && tls_round_trip(w.port, err, sizeof err), "TLS still served afterwards (%s)", err);
  nt_stop(&w);
}

/* ------------------------------------------------------------------------------------- memory before auth */

/* Sends a header claiming `len` bytes of type `type`, then as much of the payload as the socket takes within
 * about a second without blocking: the bytes a worker that reads them would hold. */
static size_t push_claim(int fd, uint16_t type, uint32_t len) {
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, type, 0, 7, len};
  weft_net_header_encode(&h, hb);
  if (!nt_send_raw(fd, hb, sizeof hb)) return 0;
  static uint8_t junk[1 << 16];
  memset(junk, 0x5a, sizeof junk);
  size_t sent = 0;
  double end = tu_now() + 1.0;
  while (sent < len && tu_now() < end) {
    size_t n = len - sent < sizeof junk ? len - sent : sizeof junk;
    ssize_t k = send(fd, junk, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k > 0) sent += (size_t)k;
    else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
    else usleep(1000);
  }
  return sent;
}

static void test_memory_before_auth(const char *weft, const char *secret_path) {
  nt_worker w;
  const char *extra[] = {"--secret-file", secret_path, NULL};
  TU_CHECK(nt_start(weft, extra, &w), "worker starts");
  if (!w.port) return;
  still_right(&w, secret, "start"); /* its fabric and threads are up: the baseline below is its steady state */
  long before = nt_rss_kib(w.pid);
  enum { N = 4 };
  int fds[N];
  for (int i = 0; i < N; i++) {
    fds[i] = nt_connect(w.port);
    push_claim(fds[i], WEFT_NET_HELLO, 64u << 20);
  }
  /* A right HELLO, then a frame of another type before the proof: also refused before its payload. */
  int late = nt_connect(w.port);
  TU_CHECK(nt_hello(late, NULL) == 0, "hello");
  push_claim(late, WEFT_NET_WRITE, 64u << 20);
  usleep(300 * 1000);
  long during = nt_rss_kib(w.pid);
  TU_CHECK(before > 0 && during > 0 && during - before < 24 * 1024,
           "the worker grew from %ld KiB to %ld KiB on frames claiming 64 MiB before authentication", before, during);
  for (int i = 0; i < N; i++) {
    TU_CHECK(nt_wait_closed(fds[i], 5.0), "a HELLO claiming 64 MiB did not get its connection closed");
    close(fds[i]);
  }
  TU_CHECK(nt_wait_closed(late, 5.0), "a 64 MiB WRITE before the proof did not get its connection closed");
  close(late);
  /* The refusal says why when the peer sent nothing after the header. */
  int fd = nt_connect(w.port);
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, WEFT_NET_HELLO, 0, 9, 64u << 20};
  weft_net_header_encode(&h, hb);
  nt_send_raw(fd, hb, sizeof hb);
  weft_net_header rh;
  uint8_t *msg = NULL;
  TU_CHECK(nt_recv(fd, &rh, &msg) && rh.status == WEFT_ERR_INVALID_ARGUMENT && tu_contains((char *)msg, "exactly"),
           "a HELLO of the wrong size is refused with a reason (%s)", msg ? (char *)msg : "no reply");
  free(msg);
  TU_CHECK(nt_wait_closed(fd, 5.0), "and its connection closed");
  close(fd);
  still_right(&w, secret, "frames claiming 64 MiB before authentication");
  nt_stop(&w);
}

/* ------------------------------------------------------------------------------------ worker-wide cap */

static uint64_t create_flat(int fd, int64_t n) { return nt_create(fd, 1, &n); }

static void test_global_cap(const char *weft) {
  nt_worker w;
  const char *extra[] = {"--max-total-mib", "8", "--max-resident-mib", "6", NULL};
  TU_CHECK(nt_start(weft, extra, &w), "worker with a worker-wide cap starts");
  if (!w.port) return;
  int a = nt_connect(w.port), b = nt_connect(w.port);
  TU_CHECK(nt_hello(a, NULL) == 0 && nt_hello(b, NULL) == 0, "hello");
  int64_t five = (5 << 20) / 4;
  uint64_t ha = create_flat(a, five);
  TU_CHECK(ha != 0, "5 MiB on connection A fits");
  uint8_t pl[16];
  weft_net_put32(pl, WEFT_DTYPE_F32);
  weft_net_put32(pl + 4, 1);
  weft_net_put64(pl + 8, (uint64_t)five);
  uint8_t *r = NULL;
  int st = nt_call(b, WEFT_NET_CREATE, pl, sizeof pl, &r, NULL);
  TU_CHECK(st == WEFT_ERR_OUT_OF_MEMORY && r && tu_contains((char *)r, "all connections"),
           "5 MiB more on connection B passes the 8 MiB worker-wide cap (got %d: %s)", st, r ? (char *)r : "");
  free(r);
  /* A receive buffer counts too: a 4 MiB frame that cannot land in a tensor is refused, the stream kept. */
  size_t n = (4u << 20) / 4;
  float *junk = calloc(n, 4);
  uint64_t bogus = 0xbadull;
  int wst = nt_write(b, bogus, junk, n);
  free(junk);
  TU_CHECK(wst == WEFT_ERR_OUT_OF_MEMORY, "a 4 MiB staged frame over the worker-wide cap is refused (got %d)", wst);
  TU_CHECK(nt_call(b, WEFT_NET_LANES, NULL, 0, NULL, NULL) == 0, "the connection stays in step after that");
  weft_net_put64(pl, ha);
  TU_CHECK(nt_call(a, WEFT_NET_FREE, pl, 8, NULL, NULL) == 0, "free on A");
  TU_CHECK(create_flat(b, five) != 0, "after A frees, B's 5 MiB fits");
  close(a);
  close(b);
  usleep(200 * 1000);
  int c = nt_connect(w.port);
  TU_CHECK(nt_hello(c, NULL) == 0 && create_flat(c, five) != 0, "closed connections give their bytes back");
  close(c);
  still_right(&w, NULL, "the worker-wide cap");
  nt_stop(&w);
}

int main(int argc, char **argv) {
  double start = tu_now();
  if (argc < 2) return 2;
  nt_raise_nofile();
  seed = tu_seed();
  char path[] = "weft-secret-XXXXXX";
  int sfd = mkstemp(path);
  TU_CHECK(sfd >= 0 && write(sfd, secret, strlen(secret)) == (ssize_t)strlen(secret), "secret file");
  if (sfd >= 0) close(sfd);
  test_lockout(argv[1], path);
  test_lockout_tls(argv[1], path);
  test_memory_before_auth(argv[1], path);
  test_global_cap(argv[1]);
  unlink(path);
  return tu_finish("net_hostile", start);
}
