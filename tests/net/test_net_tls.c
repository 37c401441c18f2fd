/* test_net_tls.c - the frames inside TLS 1.3 (a PSK derived from the shared secret): a worker started with
 * --tls serves a TLS client bit for bit (large writes through its zero-copy path, an op through the fabric's
 * remote lane); a plaintext client against it and a TLS client against a plaintext worker get clear errors;
 * a wrong secret fails the handshake cleanly and the worker keeps serving; off loopback the worker runs TLS
 * whatever it was asked and the client refuses plaintext. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/tls.h"
#include "netutil.h"
#include "tutil.h"
#include "weft.h"

static const char secret[] = "correct horse battery staple 42";
static const char other[] = "a different secret, long enough";

static int conn_call(weft_net_conn *c, uint16_t type, const void *payload, uint32_t len, const void *tail,
                     uint32_t tail_len, uint8_t **out, uint32_t *out_len) {
  static uint32_t id = 1;
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, type, 0, id, len + tail_len};
  weft_net_header_encode(&h, hb);
  const uint8_t *piece[3] = {hb, payload, tail};
  const size_t plen[3] = {sizeof hb, len, tail_len};
  if (!weft_net_conn_send3(c, piece, plen)) return -1;
  if (!weft_net_conn_recv_all(c, hb, sizeof hb)) return -1;
  uint32_t n = weft_net_get32(hb + 12);
  if (weft_net_get32(hb + 8) != id++ || n > (1u << 28)) return -2;
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

/* TLS to the worker, hello and the mutual proof; returns 1 when ready for requests. */
static int tls_login(weft_net_conn *c, weft_net_tls *t, int port, const char *key, char *err, size_t errlen) {
  weft_net_conn_init(c, nt_connect(port));
  if (c->fd < 0 || weft_net_conn_connect(c, t, err, errlen)) return 0;
  uint8_t pl[8], *r = NULL, cn[WEFT_NET_NONCE_BYTES], wn[WEFT_NET_NONCE_BYTES], mac[WEFT_NET_MAC_BYTES];
  uint32_t n = 0;
  weft_net_put32(pl, WEFT_NET_VERSION);
  weft_net_put32(pl + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256 | WEFT_NET_CAP_AUTH_MUTUAL);
  if (conn_call(c, WEFT_NET_HELLO, pl, 8, NULL, 0, &r, &n) != 0 || n < 12 + WEFT_NET_NONCE_BYTES) return free(r), 0;
  memcpy(wn, r + 12, sizeof wn);
  free(r);
  memset(cn, 7, sizeof cn);
  if (conn_call(c, WEFT_NET_AUTH_START, cn, sizeof cn, NULL, 0, &r, &n) != 0 || n < WEFT_NET_MAC_BYTES + 2)
    return free(r), 0;
  char id[300];
  size_t il = weft_net_get16(r + WEFT_NET_MAC_BYTES);
  memcpy(id, r + WEFT_NET_MAC_BYTES + 2, il < 299 ? il : 299);
  id[il < 299 ? il : 299] = 0;
  free(r);
  weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, (const uint8_t *)key, strlen(key), wn, cn, id, mac);
  return conn_call(c, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, 0, NULL, NULL) == 0;
}

/* A fabric with the cpu lane and the worker at addr: "" when its remote lane joined, else why it is absent.
 * When fabric_out is given and the lane joined, the fabric is handed back open. */
static const char *remote_outcome(const char *addr, char *why, size_t n, weft_fabric **fabric_out) {
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu,remote";
  d.remote = addr;
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  snprintf(why, n, "the fabric did not open");
  if (weft_fabric_open(&d, &f)) return why;
  snprintf(why, n, "no remote lane and no reason");
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    if (!weft_fabric_lane_info(f, i, &li) && strcmp(li.kind, "remote") == 0) why[0] = 0;
  }
  for (size_t i = 0; why[0] && i < weft_fabric_absent_count(f); i++) {
    const char *name, *reason;
    if (!weft_fabric_absent_info(f, i, &name, &reason) && strncmp(name, "remote:", 7) == 0)
      snprintf(why, n, "%s", reason);
  }
  if (fabric_out && !why[0]) *fabric_out = f;
  else weft_fabric_close(f);
  return why;
}

/* A non-loopback IPv4 address of this machine, or 0 when it has none (then that part is left out). */
static int outside_address(char *buf, size_t n) {
  struct ifaddrs *ifs = NULL, *i;
  int found = 0;
  if (getifaddrs(&ifs)) return 0;
  for (i = ifs; i && !found; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK))
      found = inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, (socklen_t)n) != NULL;
  freeifaddrs(ifs);
  return found;
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
  char path[] = "weft-secret-XXXXXX", other_path[] = "weft-secret-XXXXXX", why[600], addr[64];
  TU_CHECK(write_file(path, secret) && write_file(other_path, other), "secret files");

  nt_worker w;
  const char *extra[] = {"--secret-file", path, "--tls", NULL};
  TU_CHECK(nt_start(argv[1], extra, &w), "a worker with --tls starts");
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);

  /* Large writes (the worker receives them straight into the tensor) and reads, bit for bit, over TLS. */
  weft_net_tls *t = NULL;
  TU_CHECK(weft_net_tls_create(0, (const uint8_t *)secret, strlen(secret), &t, why, sizeof why) == WEFT_OK, "%s", why);
  weft_net_conn c;
  why[0] = 0;
  int in = t && tls_login(&c, t, w.port, secret, why, sizeof why);
  TU_CHECK(in, "TLS, hello and the mutual proof (%s)", why);
  if (in) {
    char desc[160];
    TU_CHECK(strstr(weft_net_conn_describe(&c, desc, sizeof desc), "TLSv1.3") != NULL, "TLS 1.3: %s", desc);
    enum { N = 3 << 20 }; /* 12 MiB: many TLS records */
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    uint32_t seed = 12345;
    for (size_t i = 0; i < N; i++) {
      seed = seed * 1664525u + 1013904223u;
      uint32_t bits = seed;
      memcpy(&x[i], &bits, 4); /* every bit pattern, NaNs and subnormals included */
    }
    uint8_t pl[24], *r = NULL;
    uint32_t n = 0;
    weft_net_put32(pl, WEFT_DTYPE_F32);
    weft_net_put32(pl + 4, 1);
    weft_net_put64(pl + 8, N);
    TU_CHECK(conn_call(&c, WEFT_NET_CREATE, pl, 16, NULL, 0, &r, &n) == 0 && n == 8, "create");
    uint64_t h = r ? weft_net_get64(r) : 0;
    free(r);
    weft_net_put64(pl, h);
    weft_net_put64(pl + 8, 0);
    weft_net_put64(pl + 16, N);
    TU_CHECK(conn_call(&c, WEFT_NET_WRITE, pl, 24, x, sizeof(float) * N, NULL, NULL) == 0, "a 12 MiB write over TLS");
    r = NULL;
    TU_CHECK(conn_call(&c, WEFT_NET_READ, pl, 24, NULL, 0, &r, &n) == 0 && n == 8 + sizeof(float) * N, "read back");
    TU_CHECK(r && memcmp(r + 8, x, sizeof(float) * N) == 0, "the bits came back unchanged through TLS");
    free(r);
    /* A frame of a small request right after a large one: records split and joined anywhere must parse. */
    TU_CHECK(conn_call(&c, WEFT_NET_LANES, NULL, 0, NULL, 0, NULL, NULL) == 0, "lanes after the large frames");
    free(x);
    free(y);
    weft_net_conn_close(&c);
  }

  /* The fabric's remote lane over TLS: ops give the CPU lane's bits. */
  setenv("WEFT_REMOTE_SECRET_FILE", path, 1);
  setenv("WEFT_REMOTE_TLS", "1", 1);
  weft_fabric *f = NULL;
  TU_CHECK(remote_outcome(addr, why, sizeof why, &f)[0] == 0, "the remote lane joins over TLS (%s)", why);
  if (f) {
    enum { M = 37, K = 53, NN = 29 };
    float a[M * K], b[K * NN], c1[M * NN], c2[M * NN];
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7919) % 201 - 100) / 13.0f;
    for (int i = 0; i < K * NN; i++) b[i] = (float)((i * 104729) % 199 - 99) / 17.0f;
    int64_t da[2] = {M, K}, db[2] = {K, NN}, dc[2] = {M, NN};
    weft_tensor *ta = NULL, *tb = NULL, *tc = NULL;
    weft_tensor_create(f, 2, da, a, &ta);
    weft_tensor_create(f, 2, db, b, &tb);
    weft_tensor_create(f, 2, dc, NULL, &tc);
    size_t cpu = 0, remote = 0;
    weft_fabric_lane_find(f, "cpu", &cpu);
    char rn[128];
    snprintf(rn, sizeof rn, "remote:%s/cpu", addr);
    TU_CHECK(weft_fabric_lane_find(f, rn, &remote) == WEFT_OK, "%s", rn);
    weft_op_desc od = WEFT_OP_DESC_INIT;
    od.contract = WEFT_CONTRACT_EXACT;
    od.lane = (int)remote;
    TU_CHECK(weft_op_matmul(f, &od, ta, 0, tb, 0, tc) == WEFT_OK, "matmul on the remote lane over TLS: %s",
             weft_fabric_last_error(f));
    TU_CHECK(weft_fabric_last_lane(f) == (int)remote, "it ran on the remote lane");
    weft_tensor_read(tc, c2, M * NN);
    od.lane = (int)cpu;
    weft_op_matmul(f, &od, ta, 0, tb, 0, tc);
    weft_tensor_read(tc, c1, M * NN);
    TU_CHECK(memcmp(c1, c2, sizeof c1) == 0, "the remote lane over TLS gives the CPU lane's bits");
    weft_tensor_destroy(ta);
    weft_tensor_destroy(tb);
    weft_tensor_destroy(tc);
    weft_fabric_close(f);
  }

  /* A wrong secret fails TLS's handshake, cleanly, with the reason. */
  setenv("WEFT_REMOTE_SECRET_FILE", other_path, 1);
  remote_outcome(addr, why, sizeof why, NULL);
  TU_CHECK(strstr(why, "secret differs") != NULL, "a wrong secret under TLS: '%s'", why);

  /* A plaintext client against the TLS worker is told to use TLS. */
  setenv("WEFT_REMOTE_SECRET_FILE", path, 1);
  unsetenv("WEFT_REMOTE_TLS");
  remote_outcome(addr, why, sizeof why, NULL);
  TU_CHECK(strstr(why, "TLS 1.3 only") != NULL, "a plaintext client against a TLS worker: '%s'", why);
  TU_CHECK(nt_alive(&w), "the TLS worker is alive after bad clients");
  /* ... and it still serves a good one. */
  setenv("WEFT_REMOTE_TLS", "1", 1);
  TU_CHECK(remote_outcome(addr, why, sizeof why, NULL)[0] == 0, "a good TLS client after bad ones (%s)", why);
  nt_stop(&w);

  /* A TLS client against a plaintext worker (with the same secret) is told the worker does not speak TLS. */
  const char *plain[] = {"--secret-file", path, NULL};
  TU_CHECK(nt_start(argv[1], plain, &w), "a plaintext worker with a secret");
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);
  remote_outcome(addr, why, sizeof why, NULL);
  TU_CHECK(strstr(why, "does not speak TLS") != NULL, "a TLS client against a plaintext worker: '%s'", why);
  nt_stop(&w);

  /* Off loopback the worker runs TLS unasked, and the client refuses plaintext there. */
  char ip[40];
  if (outside_address(ip, sizeof ip)) {
    /* nt_start binds 127.0.0.1; a later --listen wins. */
    const char *args[] = {"--listen", "0.0.0.0:0", "--secret-file", path, NULL};
    TU_CHECK(nt_start(argv[1], args, &w), "a worker on 0.0.0.0");
    snprintf(addr, sizeof addr, "%.39s:%d", ip, w.port);
    unsetenv("WEFT_REMOTE_TLS");
    TU_CHECK(remote_outcome(addr, why, sizeof why, NULL)[0] == 0, "off loopback TLS is on without asking (%s)", why);
    unsetenv("WEFT_REMOTE_SECRET_FILE");
    remote_outcome(addr, why, sizeof why, NULL);
    TU_CHECK(strstr(why, "off loopback") != NULL, "no plaintext off loopback: '%s'", why);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)w.port);
    inet_pton(AF_INET, ip, &sa.sin_addr);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    TU_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect to %s", addr);
    TU_CHECK(nt_hello(fd, NULL) == WEFT_ERR_UNSUPPORTED, "the worker off loopback refuses a plaintext hello");
    close(fd);
    nt_stop(&w);
  } else {
    printf("net_tls: no non-loopback IPv4 address here; the off-loopback part is left out\n");
  }
  weft_net_tls_destroy(t);
  unlink(path);
  unlink(other_path);
  return tu_finish("net_tls", start);
}
