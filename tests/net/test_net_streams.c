/* test_net_streams.c - striped bulk transfers (STREAMS, JOIN; docs/PROTOCOL.md "Streams"):
 *
 *  - bits: a 24 MiB upload and download striped over four connections of one session is bit for bit what
 *    was sent (every bit pattern, NaNs and subnormals included), through TLS with a secret and in plain TCP
 *    without one (the key then sent by the worker); the fabric's remote lane stripes an op's operands and
 *    result and gives the CPU lane's bits, and falls back cleanly to fewer connections where the worker
 *    grants none (--max-streams 1) or refuses a join (its client cap);
 *  - joins that must fail, each refused and closed while the session and its streams keep serving: a wrong
 *    proof, a replayed join, a proof of one session sent to another, an index not granted, a join to a
 *    session that closed (whose streams the worker shut down), a frame other than the join first; a flood of
 *    bad joins (wrong proofs, unknown sessions, headers claiming 64 MiB) without the worker's memory
 *    growing; and the requests that are not a stream's (lanes on a stream) or not a session's (join on the
 *    session's own connection) refused with the connection kept; a stream writing and reading a tensor while
 *    the session's own connection frees and creates it again and again (the worker never touches a freed
 *    tensor: ASan would say so in that build). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/stripe.h"
#include "net/tls.h"
#include "netutil.h"
#include "tutil.h"
#include "weft.h"

static const char secret[] = "correct horse battery staple 42";
static uint64_t seed = 77;

static int conn_call(weft_net_conn *c, uint16_t type, const void *payload, uint32_t len, uint8_t **out,
                     uint32_t *out_len) {
  static _Thread_local uint32_t id = 1; /* per thread: a racing stream has its own */
  if (out) *out = NULL;
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, type, 0, id, len};
  weft_net_header_encode(&h, hb);
  const uint8_t *piece[3] = {hb, payload, NULL};
  const size_t plen[3] = {sizeof hb, len, 0};
  if (!weft_net_conn_send3(c, piece, plen) || !weft_net_conn_recv_all(c, hb, sizeof hb)) return -1;
  uint32_t n = weft_net_get32(hb + 12);
  if (weft_net_get32(hb + 8) != id++ || n > (1u << 28)) return -2;
  uint8_t *p = malloc(n + 1);
  if (!p || !weft_net_conn_recv_all(c, p, n)) {
    free(p);
    return -1;
  }
  p[n] = 0;
  if (out) *out = p;
  else free(p);
  if (out_len) *out_len = n;
  return weft_net_get16(hb + 6);
}

/* A connection to the worker: TLS when t is given. */
static int dial(weft_net_conn *c, weft_net_tls *t, int port) {
  char err[256];
  weft_net_conn_init(c, nt_connect(port));
  return c->fd >= 0 && (!t || weft_net_conn_connect(c, t, err, sizeof err) == WEFT_OK);
}

/* Hello (announcing streams) and, with a secret, the mutual proof; *key gets the session's stream key. */
static int login(weft_net_conn *c, weft_net_tls *t, int port, const char *sec, uint8_t key[WEFT_NET_KEY_BYTES]) {
  if (!dial(c, t, port)) return 0;
  uint8_t pl[8], *r = NULL, wn[WEFT_NET_NONCE_BYTES], cn[WEFT_NET_NONCE_BYTES], mac[WEFT_NET_MAC_BYTES];
  uint32_t n = 0;
  weft_net_put32(pl, WEFT_NET_VERSION);
  weft_net_put32(pl + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256 | WEFT_NET_CAP_AUTH_MUTUAL | WEFT_NET_CAP_STREAMS);
  if (conn_call(c, WEFT_NET_HELLO, pl, 8, &r, &n) != 0 || n < 12 + WEFT_NET_NONCE_BYTES) return free(r), 0;
  memcpy(wn, r + 12, sizeof wn);
  free(r);
  if (!sec) return 1;
  for (size_t i = 0; i < sizeof cn; i++) cn[i] = (uint8_t)(seed * 31 + i);
  seed++;
  if (conn_call(c, WEFT_NET_AUTH_START, cn, sizeof cn, &r, &n) != 0 || n < WEFT_NET_MAC_BYTES + 2) return free(r), 0;
  char id[WEFT_NET_MAX_IDENTITY + 1];
  size_t il = weft_net_get16(r + WEFT_NET_MAC_BYTES);
  memcpy(id, r + WEFT_NET_MAC_BYTES + 2, il);
  id[il] = 0;
  free(r);
  weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, (const uint8_t *)sec, strlen(sec), wn, cn, id, mac);
  if (conn_call(c, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, NULL) != 0) return 0;
  return weft_net_stream_key((const uint8_t *)sec, strlen(sec), wn, cn, id, key) == WEFT_OK;
}

/* STREAMS: the grant, the session id, the worker's identity; the key from the reply when there is no secret. */
static int ask_streams(weft_net_conn *c, uint32_t want, uint32_t *granted, uint64_t *session, uint8_t *key_if_sent,
                       char *identity) {
  uint8_t pl[4], *r = NULL;
  uint32_t n = 0;
  weft_net_put32(pl, want);
  int st = conn_call(c, WEFT_NET_STREAMS, pl, 4, &r, &n);
  int ok = st == 0 && n >= WEFT_NET_STREAMS_REPLY_BYTES + 2 &&
           n == WEFT_NET_STREAMS_REPLY_BYTES + 2 + weft_net_get16(r + WEFT_NET_STREAMS_REPLY_BYTES);
  if (ok) {
    *granted = weft_net_get32(r);
    *session = weft_net_get64(r + 4);
    if (key_if_sent) memcpy(key_if_sent, r + 12, WEFT_NET_KEY_BYTES);
    size_t il = weft_net_get16(r + WEFT_NET_STREAMS_REPLY_BYTES);
    memcpy(identity, r + WEFT_NET_STREAMS_REPLY_BYTES + 2, il);
    identity[il] = 0;
  }
  free(r);
  return ok;
}

/* A JOIN frame (header and payload) with the given proof. */
static void join_frame(uint8_t f[WEFT_NET_HEADER_BYTES + WEFT_NET_JOIN_BYTES], uint64_t session, uint32_t index,
                       const uint8_t mac[WEFT_NET_MAC_BYTES]) {
  weft_net_header h = {WEFT_NET_MAGIC, WEFT_NET_JOIN, 0, 1, WEFT_NET_JOIN_BYTES};
  weft_net_header_encode(&h, f);
  weft_net_put64(f + WEFT_NET_HEADER_BYTES, session);
  weft_net_put32(f + WEFT_NET_HEADER_BYTES + 8, index);
  memcpy(f + WEFT_NET_HEADER_BYTES + 12, mac, WEFT_NET_MAC_BYTES);
}

/* Sends raw bytes as a connection's first frame; the reply's status (-1: closed without one), its message. */
static int send_first(weft_net_conn *c, const uint8_t *f, size_t n, char *msg, size_t msglen) {
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  msg[0] = 0;
  if (!weft_net_conn_send_all(c, f, n) || !weft_net_conn_recv_all(c, hb, sizeof hb)) return -1;
  uint32_t len = weft_net_get32(hb + 12);
  if (len < msglen && weft_net_conn_recv_all(c, (uint8_t *)msg, len)) msg[len] = 0;
  return weft_net_get16(hb + 6);
}

/* 1 when the worker closed the connection (nothing more comes, or the read fails) within a few seconds. */
static int conn_closed(weft_net_conn *c) {
  if (!c->ssl) return nt_wait_closed(c->fd, 5.0);
  struct timeval tv = {5, 0};
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  uint8_t b;
  return !weft_net_conn_recv_all(c, &b, 1);
}

static uint64_t create(weft_net_conn *c, uint64_t n) {
  uint8_t pl[16], *r = NULL;
  uint32_t rl = 0;
  weft_net_put32(pl, WEFT_DTYPE_F32);
  weft_net_put32(pl + 4, 1);
  weft_net_put64(pl + 8, n);
  uint64_t h = conn_call(c, WEFT_NET_CREATE, pl, 16, &r, &rl) == 0 && rl == 8 ? weft_net_get64(r) : 0;
  free(r);
  return h;
}

/* Every bit pattern: NaNs (with payloads), infinities, subnormals, signed zeros. */
static void fill(uint32_t *x, size_t n, uint32_t s) {
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = s ^ (uint32_t)(i * 2654435761u);
  }
}

/* Reads the tensor back in 4 MiB READs on the session's own connection, one at a time (no striping): what
 * the worker holds, checked apart from the striped read. */
static int plain_read_equal(weft_net_conn *c, uint64_t h, const uint32_t *want, uint64_t n) {
  const uint64_t per = 1u << 20;
  for (uint64_t off = 0; off < n; off += per) {
    uint64_t k = n - off < per ? n - off : per;
    uint8_t pl[24], *r = NULL;
    uint32_t rl = 0;
    weft_net_put64(pl, h);
    weft_net_put64(pl + 8, off);
    weft_net_put64(pl + 16, k);
    int ok = conn_call(c, WEFT_NET_READ, pl, 24, &r, &rl) == 0 && rl == 8 + k * 4 &&
             memcmp(r + 8, want + off, k * 4) == 0;
    free(r);
    if (!ok) return 0;
  }
  return 1;
}

/* One session with `want` connections: a striped upload and download of n elements, bit for bit; the
 * streams stay open in s[1 .. *ns-1] for the caller. */
typedef struct session {
  weft_net_conn s[8];
  size_t ns;
  uint64_t id;
  uint8_t key[WEFT_NET_KEY_BYTES];
  char identity[WEFT_NET_MAX_IDENTITY + 1];
  uint32_t next_id;
} session;

static int session_open(session *S, weft_net_tls *t, int port, const char *sec, uint32_t want, uint32_t join) {
  memset(S, 0, sizeof *S);
  S->next_id = 1000;
  uint32_t granted = 0;
  uint8_t sent_key[WEFT_NET_KEY_BYTES];
  if (!login(&S->s[0], t, port, sec, S->key) || !ask_streams(&S->s[0], want, &granted, &S->id, sent_key, S->identity))
    return 0;
  if (!sec) memcpy(S->key, sent_key, sizeof S->key);
  S->ns = 1;
  for (uint32_t i = 1; i < granted && i <= join; i++) {
    char why[256];
    if (!dial(&S->s[i], t, port) || weft_net_stream_join(&S->s[i], S->id, i, S->key, S->identity, why, sizeof why)) {
      printf("net_streams: stream %u did not join: %s\n", (unsigned)i, why);
      return 0;
    }
    S->ns = i + 1;
  }
  return granted == want;
}

static void session_close(session *S) {
  for (size_t i = 0; i < 8; i++)
    if (S->s[i].fd > 0) weft_net_conn_close(&S->s[i]);
}

static int striped(session *S, int write, uint64_t h, uint32_t *data, uint64_t n, char *why, size_t whylen) {
  weft_net_bulk job = {write, h, 0, n, (uint8_t *)data, ((64u << 20) - 64) / 4};
  return weft_net_bulk_run(S->s, S->ns, &S->next_id, &job, why, whylen) == WEFT_OK;
}

static void test_bits(const char *what, weft_net_tls *t, int port, const char *sec) {
  enum { N = 6 << 20 }; /* 24 MiB */
  uint32_t *x = malloc((size_t)N * 4), *y = malloc((size_t)N * 4);
  fill(x, N, (uint32_t)seed++);
  session S;
  TU_CHECK(session_open(&S, t, port, sec, 4, 3), "%s: a session with 4 connections", what);
  TU_CHECK(S.ns == 4, "%s: three streams joined", what);
  uint64_t h = create(&S.s[0], N);
  char why[512] = "";
  TU_CHECK(h && striped(&S, 1, h, x, N, why, sizeof why), "%s: striped upload (%s)", what, why);
  TU_CHECK(plain_read_equal(&S.s[0], h, x, N), "%s: the worker holds the striped upload bit for bit", what);
  memset(y, 0xa5, (size_t)N * 4);
  TU_CHECK(striped(&S, 0, h, y, N, why, sizeof why), "%s: striped download (%s)", what, why);
  TU_CHECK(memcmp(x, y, (size_t)N * 4) == 0, "%s: the striped download is bit for bit the upload", what);
  /* An offset range, not a multiple of the chunk, through the same streams. */
  weft_net_bulk job = {1, h, 12345, N - 12345 - 777, (uint8_t *)(y + 3), ((64u << 20) - 64) / 4};
  fill(y, N, 99);
  TU_CHECK(weft_net_bulk_run(S.s, S.ns, &S.next_id, &job, why, sizeof why) == WEFT_OK, "%s: a striped write at an "
           "offset (%s)", what, why);
  memcpy(x + 12345, y + 3, (size_t)(N - 12345 - 777) * 4);
  TU_CHECK(plain_read_equal(&S.s[0], h, x, N), "%s: the offset write landed where it belongs and only there", what);
  session_close(&S);
  free(x);
  free(y);
}

/* Established connections whose local port is `port` (the worker's side of each), from /proc/net/tcp. */
static int established(int port) {
  FILE *fp = fopen("/proc/net/tcp", "r");
  char line[512];
  int n = 0;
  while (fp && fgets(line, sizeof line, fp)) {
    unsigned lport = 0, st = 0;
    if (sscanf(line, " %*d: %*8x:%x %*8x:%*x %x", &lport, &st) == 2 && (int)lport == port && st == 1) n++;
  }
  if (fp) fclose(fp);
  return n;
}

/* The fabric's remote lane: an op whose operand and result are large stripes them; its bits are the CPU's.
 * *details gets the lane's details, *conns the connections the worker at `port` held after the op (the
 * lane's own and its streams). */
static int lane_relu_right(const char *addr, int port, char *details, size_t dn, int *conns) {
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu,remote";
  d.remote = addr;
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  details[0] = 0;
  if (weft_fabric_open(&d, &f)) return 0;
  enum { N = 3 << 20 }; /* 12 MiB each way */
  float *x = malloc((size_t)N * 4), *y1 = malloc((size_t)N * 4), *y2 = malloc((size_t)N * 4);
  fill((uint32_t *)x, N, 4242);
  int64_t dims[2] = {N / 1024, 1024};
  weft_tensor *tx = NULL, *ty = NULL;
  size_t cpu = 0, remote = 0;
  char rn[160];
  snprintf(rn, sizeof rn, "remote:%s/cpu", addr);
  int ok = weft_tensor_create(f, 2, dims, x, &tx) == WEFT_OK && weft_tensor_create(f, 2, dims, NULL, &ty) == WEFT_OK &&
           weft_fabric_lane_find(f, "cpu", &cpu) == WEFT_OK && weft_fabric_lane_find(f, rn, &remote) == WEFT_OK;
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.contract = WEFT_CONTRACT_EXACT;
  od.lane = (int)remote;
  ok = ok && weft_op_relu(f, &od, tx, ty) == WEFT_OK && weft_fabric_last_lane(f) == (int)remote &&
       weft_tensor_read(ty, y2, N) == WEFT_OK;
  od.lane = (int)cpu;
  ok = ok && weft_op_relu(f, &od, tx, ty) == WEFT_OK && weft_tensor_read(ty, y1, N) == WEFT_OK &&
       memcmp(y1, y2, (size_t)N * 4) == 0;
  weft_lane_info li;
  if (ok && weft_fabric_lane_info(f, remote, &li) == WEFT_OK && li.details) snprintf(details, dn, "%s", li.details);
  *conns = established(port);
  weft_tensor_destroy(tx);
  weft_tensor_destroy(ty);
  weft_fabric_close(f);
  free(x), free(y1), free(y2);
  return ok;
}

typedef struct race_arg {
  weft_net_conn *c;
  atomic_int stop;
  int done, broken;
  atomic_uint_fast64_t handle;
} race_arg;

/* Writes then reads 1 MiB at the start of whatever tensor the session has now, until told to stop. */
static void *race_stream(void *arg) {
  race_arg *ra = arg;
  enum { M = 1 << 18 };
  uint8_t *buf = malloc(24 + (size_t)M * 4), *r = NULL;
  uint32_t rl = 0;
  memset(buf, 0x3c, 24 + (size_t)M * 4);
  while (buf && !atomic_load(&ra->stop)) {
    uint64_t h = atomic_load(&ra->handle);
    weft_net_put64(buf, h);
    weft_net_put64(buf + 8, 0);
    weft_net_put64(buf + 16, M);
    int a = conn_call(ra->c, WEFT_NET_WRITE, buf, 24 + M * 4, NULL, NULL);
    int b = conn_call(ra->c, WEFT_NET_READ, buf, 24, &r, &rl);
    free(r);
    if ((a != 0 && a != WEFT_ERR_NOT_FOUND) || (b != 0 && b != WEFT_ERR_NOT_FOUND)) {
      ra->broken++;
      break;
    }
    ra->done++;
  }
  free(buf);
  return NULL;
}

static void still_right(nt_worker *w, const char *sec, const char *after) {
  TU_CHECK(nt_alive(w), "the worker died after %s", after);
  TU_CHECK(nt_matmul_right(w->port, sec, 19, 33, 7, seed++), "a matmul after %s is wrong or failed", after);
}

static void test_hostile(const char *weft, const char *path) {
  nt_worker w;
  const char *extra[] = {"--secret-file", path, "--max-streams", "4", "--max-pending", "64", NULL};
  TU_CHECK(nt_start(weft, extra, &w), "a worker with a secret and streams");
  if (!w.port) return;
  session S, T;
  TU_CHECK(session_open(&S, NULL, w.port, secret, 4, 1), "session S with one stream joined");
  TU_CHECK(session_open(&T, NULL, w.port, secret, 4, 0), "session T, no stream joined");
  uint8_t f[WEFT_NET_HEADER_BYTES + WEFT_NET_JOIN_BYTES], mac[WEFT_NET_MAC_BYTES];
  char msg[600];
  weft_net_conn c;

  /* A wrong proof. */
  memset(mac, 0x5a, sizeof mac);
  join_frame(f, S.id, 2, mac);
  TU_CHECK(dial(&c, NULL, w.port), "dial");
  TU_CHECK(send_first(&c, f, sizeof f, msg, sizeof msg) == WEFT_ERR_INVALID_ARGUMENT && strstr(msg, "wrong join proof"),
           "a join with a wrong proof is refused: '%s'", msg);
  TU_CHECK(conn_closed(&c), "... and closed");
  weft_net_conn_close(&c);

  /* A proof made with another key (the secret's stream key of another session, T's) for S. */
  weft_net_join_proof(T.key, S.id, 2, S.identity, mac);
  join_frame(f, S.id, 2, mac);
  TU_CHECK(dial(&c, NULL, w.port) && send_first(&c, f, sizeof f, msg, sizeof msg) == WEFT_ERR_INVALID_ARGUMENT,
           "a proof keyed by another session's key is refused: '%s'", msg);
  weft_net_conn_close(&c);

  /* A replayed join: S's stream 1 joined already; the same bytes again are refused. */
  weft_net_join_proof(S.key, S.id, 1, S.identity, mac);
  join_frame(f, S.id, 1, mac);
  TU_CHECK(dial(&c, NULL, w.port) && send_first(&c, f, sizeof f, msg, sizeof msg) == WEFT_ERR_STATE &&
               strstr(msg, "joined already"),
           "a replayed join is refused: '%s'", msg);
  TU_CHECK(conn_closed(&c), "... and closed");
  weft_net_conn_close(&c);

  /* S's proof for its stream 2 sent to session T (replayed into another session): T's key differs. */
  weft_net_join_proof(S.key, S.id, 2, S.identity, mac);
  join_frame(f, T.id, 2, mac);
  TU_CHECK(dial(&c, NULL, w.port) && send_first(&c, f, sizeof f, msg, sizeof msg) == WEFT_ERR_INVALID_ARGUMENT,
           "one session's join proof sent to another is refused: '%s'", msg);
  weft_net_conn_close(&c);

  /* Indices not granted: 0 (the session's own connection) and 4 (granted 4: streams 1..3). */
  for (uint32_t ix = 0; ix <= 4; ix += 4) {
    weft_net_join_proof(S.key, S.id, ix, S.identity, mac);
    join_frame(f, S.id, ix, mac);
    TU_CHECK(dial(&c, NULL, w.port) && send_first(&c, f, sizeof f, msg, sizeof msg) == WEFT_ERR_STATE &&
                 strstr(msg, "not granted"),
             "stream index %u refused: '%s'", (unsigned)ix, msg);
    weft_net_conn_close(&c);
  }

  /* A join that claims another payload size, and a write before any join: refused before their payload. */
  uint8_t big[WEFT_NET_HEADER_BYTES];
  weft_net_header hj = {WEFT_NET_MAGIC, WEFT_NET_JOIN, 0, 1, 64u << 20};
  weft_net_header_encode(&hj, big);
  TU_CHECK(dial(&c, NULL, w.port) && send_first(&c, big, sizeof big, msg, sizeof msg) == WEFT_ERR_INVALID_ARGUMENT,
           "a join of 64 MiB is refused: '%s'", msg);
  weft_net_conn_close(&c);
  weft_net_header hw = {WEFT_NET_MAGIC, WEFT_NET_WRITE, 0, 1, 1024};
  weft_net_header_encode(&hw, big);
  TU_CHECK(dial(&c, NULL, w.port) && send_first(&c, big, sizeof big, msg, sizeof msg) == WEFT_ERR_STATE,
           "a write as a connection's first frame is refused: '%s'", msg);
  weft_net_conn_close(&c);

  /* The session's stream still serves, and refuses what is not a stream's while staying open. */
  enum { N = 5 << 20 };
  uint32_t *x = malloc((size_t)N * 4), *y = malloc((size_t)N * 4);
  fill(x, N, 5);
  uint64_t h = create(&S.s[0], N);
  char why[512] = "";
  TU_CHECK(h && striped(&S, 1, h, x, N, why, sizeof why) && striped(&S, 0, h, y, N, why, sizeof why) &&
               memcmp(x, y, (size_t)N * 4) == 0,
           "session S stripes bit for bit after the bad joins (%s)", why);
  TU_CHECK(S.ns == 2, "S's stream is still there");
  TU_CHECK(conn_call(&S.s[1], WEFT_NET_LANES, NULL, 0, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT,
           "lanes on a stream is refused");
  TU_CHECK(striped(&S, 0, h, y, N, why, sizeof why) && memcmp(x, y, (size_t)N * 4) == 0 && S.ns == 2,
           "... and the stream still carries reads");
  TU_CHECK(conn_call(&S.s[0], WEFT_NET_JOIN, f + WEFT_NET_HEADER_BYTES, WEFT_NET_JOIN_BYTES, NULL, NULL) ==
               WEFT_ERR_STATE,
           "join on the session's own connection is refused");
  TU_CHECK(conn_call(&S.s[0], WEFT_NET_LANES, NULL, 0, NULL, NULL) == 0, "... and that connection keeps serving");
  uint8_t pl4[4];
  weft_net_put32(pl4, 4);
  TU_CHECK(conn_call(&S.s[0], WEFT_NET_STREAMS, pl4, 4, NULL, NULL) == WEFT_ERR_STATE, "streams are granted once");

  /* STREAMS on a connection whose hello did not announce them: refused, the connection kept. */
  int fd = nt_connect(w.port);
  uint8_t nonce[WEFT_NET_NONCE_BYTES];
  TU_CHECK(nt_hello(fd, nonce) == 0 && nt_auth(fd, nonce, secret) == 0, "a client that does not announce streams");
  TU_CHECK(nt_call(fd, WEFT_NET_STREAMS, pl4, 4, NULL, NULL) == WEFT_ERR_STATE &&
               nt_call(fd, WEFT_NET_LANES, NULL, 0, NULL, NULL) == 0,
           "streams it did not announce are refused, and the connection keeps serving");
  close(fd);

  /* STREAMS before the proof: refused (the stage reads nothing but the handshake) and closed. */
  TU_CHECK(dial(&c, NULL, w.port), "dial");
  uint8_t hello[8];
  weft_net_put32(hello, WEFT_NET_VERSION);
  weft_net_put32(hello + 4, WEFT_NET_CAP_STREAMS);
  TU_CHECK(conn_call(&c, WEFT_NET_HELLO, hello, 8, NULL, NULL) == 0 &&
               conn_call(&c, WEFT_NET_STREAMS, pl4, 4, NULL, NULL) == WEFT_ERR_STATE && conn_closed(&c),
           "streams before the proof are refused and the connection closed");
  weft_net_conn_close(&c);

  /* A flood of bad joins: wrong proofs for live sessions, unknown sessions, headers claiming 64 MiB
   * followed by a megabyte. Each is refused and closed; the worker's memory does not grow. */
  long rss0 = nt_rss_kib(w.pid);
  enum { FLOOD = 300 };
  uint8_t *junk = calloc(1, 1 << 20);
  int refused = 0;
  for (int i = 0; i < FLOOD; i++) {
    if (!dial(&c, NULL, w.port)) continue;
    for (size_t k = 0; k < sizeof mac; k++) mac[k] = (uint8_t)(i * 7 + k);
    int st;
    if (i % 3 == 2) {
      hj.length = 64u << 20;
      weft_net_header_encode(&hj, big);
      send(c.fd, big, sizeof big, MSG_NOSIGNAL);
      send(c.fd, junk, 1 << 20, MSG_NOSIGNAL | MSG_DONTWAIT);
      st = nt_wait_closed(c.fd, 5.0) ? 1 : 0;
    } else {
      join_frame(f, i % 3 ? (uint64_t)i * 0x9e3779b97f4a7c15ull : T.id, 1 + (uint32_t)i % 3, mac);
      st = send_first(&c, f, sizeof f, msg, sizeof msg) > 0 && conn_closed(&c);
    }
    refused += st;
    weft_net_conn_close(&c);
  }
  free(junk);
  long rss1 = nt_rss_kib(w.pid);
  TU_CHECK(refused == FLOOD, "%d of %d bad joins refused and closed", refused, FLOOD);
  TU_CHECK(rss0 > 0 && rss1 - rss0 < 16 * 1024, "the worker grew %ld KiB over a flood of bad joins", rss1 - rss0);
  TU_CHECK(striped(&S, 0, h, y, N, why, sizeof why) && memcmp(x, y, (size_t)N * 4) == 0 && S.ns == 2,
           "session S still stripes after the flood (%s)", why);
  still_right(&w, secret, "the join flood");

  /* A client with the secret racing its own requests: a stream writes and reads a tensor while the
   * session's own connection frees it and creates another, again and again. Every transfer is answered
   * (done, or NOT_FOUND once the handle is gone) and the worker, under ASan in that build, never touches a
   * freed tensor. */
  race_arg ra;
  memset(&ra, 0, sizeof ra);
  ra.c = &S.s[1];
  atomic_init(&ra.stop, 0);
  atomic_init(&ra.handle, h);
  pthread_t th;
  TU_CHECK(pthread_create(&th, NULL, race_stream, &ra) == 0, "a racing stream thread");
  int created = 0;
  for (int i = 0; i < 200; i++) {
    uint8_t fp[8];
    weft_net_put64(fp, atomic_load(&ra.handle));
    if (conn_call(&S.s[0], WEFT_NET_FREE, fp, 8, NULL, NULL) != 0) break;
    uint64_t nh = create(&S.s[0], N);
    if (!nh) break;
    atomic_store(&ra.handle, nh);
    created++;
  }
  atomic_store(&ra.stop, 1);
  pthread_join(th, NULL);
  printf("net_streams: %d stream transfers raced 200 frees and creates\n", ra.done);
  TU_CHECK(created == 200, "the session's own connection freed and created 200 tensors under a racing stream (%d)",
           created);
  TU_CHECK(ra.broken == 0 && ra.done > 0, "the racing stream got an answer to every transfer (%d done, %d broken)",
           ra.done, ra.broken);
  h = atomic_load(&ra.handle);
  TU_CHECK(striped(&S, 1, h, x, N, why, sizeof why) && striped(&S, 0, h, y, N, why, sizeof why) &&
               memcmp(x, y, (size_t)N * 4) == 0 && S.ns == 2,
           "the session stripes bit for bit after the race (%s)", why);
  still_right(&w, secret, "a stream racing frees");

  /* A session that closes: its streams are shut down, and a right proof for it joins nothing. */
  weft_net_conn_close(&S.s[0]);
  TU_CHECK(conn_closed(&S.s[1]), "the worker closes a stream when its session's connection closes");
  weft_net_join_proof(S.key, S.id, 2, S.identity, mac);
  join_frame(f, S.id, 2, mac);
  TU_CHECK(dial(&c, NULL, w.port) && send_first(&c, f, sizeof f, msg, sizeof msg) == WEFT_ERR_STATE &&
               strstr(msg, "no session"),
           "a join to a closed session is refused: '%s'", msg);
  weft_net_conn_close(&c);
  still_right(&w, secret, "joins to a closed session");
  session_close(&S);
  session_close(&T);
  free(x);
  free(y);
  nt_stop(&w);
}

static int write_file(char *path, const char *text) {
  int fd = mkstemp(path);
  if (fd < 0) return 0;
  int ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  close(fd);
  return ok;
}

int main(int argc, char **argv) {
  double start = tu_now();
  if (argc < 2) return 2;
  nt_raise_nofile();
  char path[] = "weft-secret-XXXXXX", addr[64], why[600], details[600];
  TU_CHECK(write_file(path, secret), "secret file");
  weft_net_tls *t = NULL;
  TU_CHECK(weft_net_tls_create(0, (const uint8_t *)secret, strlen(secret), &t, why, sizeof why) == WEFT_OK, "%s", why);

  /* Bits through TLS with a secret. */
  nt_worker w;
  const char *tls_args[] = {"--secret-file", path, "--tls", "--max-streams", "4", NULL};
  TU_CHECK(nt_start(argv[1], tls_args, &w), "a worker with --tls and streams");
  test_bits("TLS", t, w.port, secret);
  /* A wrong proof over TLS too. */
  weft_net_conn c;
  uint8_t f[WEFT_NET_HEADER_BYTES + WEFT_NET_JOIN_BYTES], mac[WEFT_NET_MAC_BYTES];
  memset(mac, 1, sizeof mac);
  join_frame(f, 12345, 1, mac);
  TU_CHECK(dial(&c, t, w.port) && send_first(&c, f, sizeof f, why, sizeof why) == WEFT_ERR_STATE && conn_closed(&c),
           "a join to no session over TLS is refused and closed: '%s'", why);
  weft_net_conn_close(&c);
  /* The fabric's remote lane stripes through TLS. */
  int conns = 0;
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);
  setenv("WEFT_REMOTE_SECRET_FILE", path, 1);
  setenv("WEFT_REMOTE_TLS", "1", 1);
  setenv("WEFT_REMOTE_STREAMS", "3", 1);
  TU_CHECK(lane_relu_right(addr, w.port, details, sizeof details, &conns), "relu of 12 MiB on the remote lane over "
           "TLS gives the CPU lane's bits");
  TU_CHECK(strstr(details, "striped over up to 3 connections") != NULL, "the lane's plan: '%s'", details);
  TU_CHECK(conns == 3, "the lane took 3 connections to the worker (%d)", conns);
  nt_stop(&w);

  /* Plain TCP without a secret: the key comes in the STREAMS reply. */
  TU_CHECK(nt_start(argv[1], (const char *[]){"--max-streams", "4", NULL}, &w), "a plain worker with streams");
  test_bits("plain", NULL, w.port, NULL);
  unsetenv("WEFT_REMOTE_SECRET_FILE");
  unsetenv("WEFT_REMOTE_TLS");
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);
  TU_CHECK(lane_relu_right(addr, w.port, details, sizeof details, &conns), "relu on the remote lane in plain TCP");
  TU_CHECK(strstr(details, "striped over up to 3 connections") != NULL && conns == 3,
           "the plain lane striped over 3 (%d): '%s'", conns, details);
  nt_stop(&w);

  /* Fallbacks: a worker that grants no streams, and one whose client cap refuses the second stream. */
  TU_CHECK(nt_start(argv[1], (const char *[]){"--max-streams", "1", NULL}, &w), "a worker without streams");
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);
  TU_CHECK(lane_relu_right(addr, w.port, details, sizeof details, &conns),
           "relu on a lane whose worker offers no streams");
  TU_CHECK(strstr(details, "one connection (the worker offers no streams)") != NULL && conns == 1, "%d: '%s'", conns,
           details);
  nt_stop(&w);
  TU_CHECK(nt_start(argv[1], (const char *[]){"--max-streams", "4", "--max-clients", "2", NULL}, &w),
           "a worker with two client slots");
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);
  TU_CHECK(lane_relu_right(addr, w.port, details, sizeof details, &conns),
           "relu on a lane whose second stream was refused");
  TU_CHECK(conns == 2, "the lane went on with the 2 connections the worker admitted (%d)", conns);
  /* The fabric's connections leave the worker's client count as their threads end. */
  int right = 0;
  for (int i = 0; i < 50 && !right; i++) {
    right = nt_matmul_right(w.port, NULL, 19, 33, 7, seed++);
    if (!right) usleep(100 * 1000);
  }
  TU_CHECK(right, "a matmul after a refused stream is wrong or failed");
  nt_stop(&w);

  test_hostile(argv[1], path);
  weft_net_tls_destroy(t);
  unlink(path);
  return tu_finish("net_streams", start);
}
