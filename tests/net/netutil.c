/* netutil.c - see netutil.h. */
#include "netutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

int nt_start(const char *weft, const char *const *extra, nt_worker *out) {
  memset(out, 0, sizeof *out);
  int pfd[2];
  if (pipe(pfd)) return 0;
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    dup2(pfd[1], 1);
    close(pfd[0]);
    close(pfd[1]);
    const char *argv[32] = {weft, "worker", "--listen", "127.0.0.1:0", "--lanes", "cpu"};
    int n = 6;
    for (int i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    execv(weft, (char *const *)argv);
    _exit(127);
  }
  close(pfd[1]);
  signal(SIGPIPE, SIG_IGN);
  char line[256];
  size_t len = 0;
  struct pollfd p = {pfd[0], POLLIN, 0};
  while (len < sizeof line - 1 && poll(&p, 1, 20000) > 0) {
    ssize_t k = read(pfd[0], line + len, 1);
    if (k <= 0) break;
    len++;
    if (line[len - 1] == '\n') break;
  }
  line[len] = 0;
  close(pfd[0]);
  const char *c = strrchr(line, ':');
  out->pid = pid;
  if (!c || strncmp(line, "weft worker: listening on ", 26) != 0) {
    fprintf(stderr, "worker did not start: '%s'\n", line);
    nt_stop(out);
    return 0;
  }
  out->port = atoi(c + 1);
  return out->port > 0;
}

void nt_stop(nt_worker *w) {
  if (w->pid > 0) {
    kill(w->pid, SIGKILL);
    waitpid(w->pid, NULL, 0);
  }
  w->pid = 0;
}

int nt_alive(nt_worker *w) { return w->pid > 0 && waitpid(w->pid, NULL, WNOHANG) == 0; }

int nt_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

int nt_send_raw(int fd, const void *p, size_t n) { return weft_net_send_all(fd, p, n); }

int nt_send(int fd, uint16_t type, uint32_t id, const void *payload, uint32_t len) {
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, type, 0, id, len};
  weft_net_header_encode(&h, hb);
  return nt_send_raw(fd, hb, sizeof hb) && (!len || nt_send_raw(fd, payload, len));
}

int nt_recv(int fd, weft_net_header *h, uint8_t **out_payload) {
  *out_payload = NULL;
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  if (!weft_net_recv_all(fd, hb, sizeof hb)) return 0;
  h->magic = weft_net_get32(hb);
  h->type = weft_net_get16(hb + 4);
  h->status = weft_net_get16(hb + 6);
  h->request_id = weft_net_get32(hb + 8);
  h->length = weft_net_get32(hb + 12);
  if (h->magic != WEFT_NET_MAGIC || h->length > (1u << 30)) return 0;
  uint8_t *p = malloc(h->length + 1);
  if (!p || !weft_net_recv_all(fd, p, h->length)) {
    free(p);
    return 0;
  }
  p[h->length] = 0;
  *out_payload = p;
  return 1;
}

static _Thread_local uint32_t next_id = 1; /* per thread: concurrent clients in one test */

int nt_call(int fd, uint16_t type, const void *payload, uint32_t len, uint8_t **out_payload, uint32_t *out_len) {
  if (out_payload) *out_payload = NULL;
  uint32_t id = next_id++;
  if (!nt_send(fd, type, id, payload, len)) return -1;
  weft_net_header h;
  uint8_t *p;
  if (!nt_recv(fd, &h, &p)) return -1;
  if (h.request_id != id || h.type != (type | WEFT_NET_REPLY)) {
    free(p);
    return -2;
  }
  if (out_len) *out_len = h.length;
  if (out_payload) *out_payload = p;
  else free(p);
  return h.status;
}

int nt_hello(int fd, uint8_t *nonce) {
  uint8_t pl[8];
  weft_net_put32(pl, WEFT_NET_VERSION);
  weft_net_put32(pl + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256);
  uint8_t *r;
  uint32_t n = 0;
  int st = nt_call(fd, WEFT_NET_HELLO, pl, 8, &r, &n);
  if (st == 0 && n >= 12 + WEFT_NET_NONCE_BYTES && nonce) memcpy(nonce, r + 12, WEFT_NET_NONCE_BYTES);
  free(r);
  return st;
}

int nt_closed(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, 2000) <= 0) return 0;
  char c;
  /* A worker that closes with bytes of ours unread (a refused frame's payload it never read) resets. */
  ssize_t k = recv(fd, &c, 1, MSG_DONTWAIT);
  return k == 0 || (k < 0 && errno == ECONNRESET);
}

uint64_t nt_create_typed(int fd, weft_dtype dtype, int ndim, const int64_t *dims) {
  uint8_t pl[8 + 8 * 4];
  weft_net_put32(pl, (uint32_t)dtype);
  weft_net_put32(pl + 4, (uint32_t)ndim);
  for (int i = 0; i < ndim; i++) weft_net_put64(pl + 8 + 8 * i, (uint64_t)dims[i]);
  uint8_t *r;
  uint32_t n = 0;
  uint64_t h = 0;
  if (nt_call(fd, WEFT_NET_CREATE, pl, 8 + 8 * (uint32_t)ndim, &r, &n) == 0 && n == 8) h = weft_net_get64(r);
  free(r);
  return h;
}

uint64_t nt_create(int fd, int ndim, const int64_t *dims) { return nt_create_typed(fd, WEFT_DTYPE_F32, ndim, dims); }

/* The table's operand counts of the version-1 ops (src/core/optable.c). */
static void v1_slots(uint32_t kind, int *nin, int *nout) {
  static const int ins[8] = {2, 2, 1, 2, 1, 1, 1, 2}, outs[8] = {1, 1, 1, 1, 1, 1, 1, 2};
  *nin = kind < 8 ? ins[kind] : 0;
  *nout = kind < 8 ? outs[kind] : 0;
}

size_t nt_op_v1(uint8_t *pl, uint32_t kind, uint32_t contract, int32_t lane, uint32_t flags, float alpha,
                const uint64_t hs[4], const int nd[4], const int64_t dims[4][4]) {
  weft_net_request r;
  memset(&r, 0, sizeof r);
  r.op = (weft_op_kind)kind;
  r.contract = (weft_contract)contract;
  r.lane = lane;
  v1_slots(kind, &r.nin, &r.nout);
  const int at[4] = {WEFT_NET_IN(0), WEFT_NET_IN(1), WEFT_NET_OUT(0), WEFT_NET_OUT(1)};
  for (int i = 0; i < 4; i++) {
    r.handles[at[i]] = hs[i];
    r.shape_ndim[at[i]] = nd ? nd[i] : 0;
    for (int d = 0; nd && d < nd[i]; d++) r.shape_dims[at[i]][d] = dims[i][d];
  }
  r.params.i[0] = (flags & 1) != 0;
  r.params.i[1] = (flags & 2) != 0;
  r.params.f[0] = alpha;
  return weft_net_op_encode(&r, pl);
}

int nt_write(int fd, uint64_t h, const float *x, uint64_t n) {
  uint8_t *pl = malloc(24 + n * 4);
  if (!pl) return -1;
  weft_net_put64(pl, h);
  weft_net_put64(pl + 8, 0);
  weft_net_put64(pl + 16, n);
  memcpy(pl + 24, x, n * 4);
  int st = nt_call(fd, WEFT_NET_WRITE, pl, (uint32_t)(24 + n * 4), NULL, NULL);
  free(pl);
  return st;
}

int nt_read(int fd, uint64_t h, float *x, uint64_t n) {
  uint8_t pl[24], *r;
  uint32_t len = 0;
  weft_net_put64(pl, h);
  weft_net_put64(pl + 8, 0);
  weft_net_put64(pl + 16, n);
  int st = nt_call(fd, WEFT_NET_READ, pl, 24, &r, &len);
  if (st == 0) {
    if (len != 8 + n * 4 || weft_net_get64(r) != n) st = -3;
    else memcpy(x, r + 8, n * 4);
  }
  free(r);
  return st;
}

int nt_op(int fd, uint32_t kind, uint32_t contract, int32_t lane, uint32_t flags, float alpha, const uint64_t hs[4]) {
  uint8_t pl[WEFT_NET_OP_MAX_BYTES];
  size_t n = nt_op_v1(pl, kind, contract, lane, flags, alpha, hs, NULL, NULL);
  return nt_call(fd, WEFT_NET_OP, pl, (uint32_t)n, NULL, NULL);
}

void nt_ref_matmul(const float *a, const float *b, float *c, int m, int k, int n) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      float acc = 0;
      for (int p = 0; p < k; p++) {
        float prod = a[i * k + p] * b[p * n + j];
        acc = acc + prod;
      }
      c[i * n + j] = acc;
    }
}

int nt_auth(int fd, const uint8_t *nonce, const char *secret) {
  /* Mutual: AUTH_START with a client nonce, the worker's proof and identity back (checked), then AUTH_FINISH. */
  uint8_t cn[WEFT_NET_NONCE_BYTES], mac[WEFT_NET_MAC_BYTES], *p = NULL;
  for (size_t i = 0; i < sizeof cn; i++) cn[i] = (uint8_t)(rand() & 0xff);
  uint32_t n = 0;
  if (nt_call(fd, WEFT_NET_AUTH_START, cn, sizeof cn, &p, &n) != 0) return -1;
  char id[WEFT_NET_MAX_IDENTITY + 1] = "";
  int ok = p && n >= WEFT_NET_MAC_BYTES + 2;
  size_t idlen = ok ? weft_net_get16(p + WEFT_NET_MAC_BYTES) : 0;
  ok = ok && idlen <= WEFT_NET_MAX_IDENTITY && n == WEFT_NET_MAC_BYTES + 2 + idlen;
  if (ok) memcpy(id, p + WEFT_NET_MAC_BYTES + 2, idlen);
  ok = ok && weft_net_auth_proof(WEFT_NET_PROOF_WORKER, (const uint8_t *)secret, strlen(secret), nonce, cn, id,
                                 mac) == WEFT_OK &&
       memcmp(mac, p, WEFT_NET_MAC_BYTES) == 0;
  free(p);
  if (!ok) return -1;
  if (weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, (const uint8_t *)secret, strlen(secret), nonce, cn, id, mac))
    return -1;
  return nt_call(fd, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, NULL);
}

int nt_matmul_right(int port, const char *secret, int m, int k, int n, uint64_t seed) {
  int fd = nt_connect(port);
  if (fd < 0) return 0;
  uint8_t nonce[WEFT_NET_NONCE_BYTES];
  int ok = nt_hello(fd, nonce) == 0 && (!secret || nt_auth(fd, nonce, secret) == 0);
  size_t na = (size_t)m * (size_t)k, nb = (size_t)k * (size_t)n, nc = (size_t)m * (size_t)n;
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *want = malloc(nc * 4);
  if (!a || !b || !c || !want) ok = 0;
  if (ok) {
    uint64_t x = seed | 1;
    for (size_t i = 0; i < na + nb; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      float v = (float)((int64_t)(x % 2000001) - 1000000) / 777777.0f;
      if (i < na) a[i] = v;
      else b[i - na] = v;
    }
    nt_ref_matmul(a, b, want, m, k, n);
    int64_t da[2] = {m, k}, db[2] = {k, n}, dc[2] = {m, n};
    uint64_t ha = nt_create(fd, 2, da), hb = nt_create(fd, 2, db), hc = nt_create(fd, 2, dc);
    uint64_t hs[4] = {ha, hb, hc, 0};
    ok = ha && hb && hc && nt_write(fd, ha, a, na) == 0 && nt_write(fd, hb, b, nb) == 0 &&
         nt_op(fd, WEFT_OP_MATMUL, WEFT_CONTRACT_EXACT, -1, 0, 0, hs) == 0 && nt_read(fd, hc, c, nc) == 0 &&
         memcmp(c, want, nc * 4) == 0;
  }
  free(a), free(b), free(c), free(want);
  close(fd);
  return ok;
}

long nt_rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *fp = fopen(path, "r");
  if (!fp) return -1;
  long kib = -1;
  while (fgets(line, sizeof line, fp))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
  fclose(fp);
  return kib;
}

static double nt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int nt_wait_closed(int fd, double seconds) {
  double end = nt_now() + seconds;
  char junk[4096];
  for (;;) {
    double left = end - nt_now();
    if (left <= 0) return 0;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
    ssize_t k = recv(fd, junk, sizeof junk, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return 1;
  }
}

void nt_raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

size_t nt_fake_hello(uint8_t *q, uint32_t version, uint32_t caps, int auth_required) {
  weft_net_put32(q, version);
  weft_net_put32(q + 4, caps);
  weft_net_put32(q + 8, auth_required ? 1 : 0);
  memset(q + 12, 0x5a, WEFT_NET_NONCE_BYTES);
  weft_net_put32(q + 12 + WEFT_NET_NONCE_BYTES, 1u << 20);
  weft_net_put64(q + 16 + WEFT_NET_NONCE_BYTES, 1u << 30);
  return 12 + WEFT_NET_NONCE_BYTES + 12;
}

static void *fake_serve(void *arg) {
  nt_fake *f = arg;
  for (;;) {
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) break;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    weft_net_header h;
    uint8_t *p = NULL;
    while (nt_recv(fd, &h, &p)) {
      free(p);
      p = NULL;
      uint8_t out[WEFT_NET_HEADER_BYTES + NT_FAKE_MAX_REPLY] = {0};
      size_t len = 0;
      uint16_t status = 0;
      uint32_t claim = 0;
      if (!f->answer(f->ctx, &h, out + WEFT_NET_HEADER_BYTES, &len, &status, &claim) || len > NT_FAKE_MAX_REPLY) break;
      weft_net_header rh = {WEFT_NET_MAGIC, (uint16_t)(h.type | WEFT_NET_REPLY), status, h.request_id,
                            claim ? claim : (uint32_t)len};
      weft_net_header_encode(&rh, out);
      if (!nt_send_raw(fd, out, WEFT_NET_HEADER_BYTES + len)) break;
    }
    free(p);
    close(fd);
  }
  return NULL;
}

int nt_fake_start(nt_fake *f, nt_fake_answer answer, void *ctx) {
  memset(f, 0, sizeof *f);
  f->answer = answer;
  f->ctx = ctx;
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&a, sizeof a) || listen(f->lfd, 8) ||
      getsockname(f->lfd, (struct sockaddr *)&a, &al)) {
    if (f->lfd >= 0) close(f->lfd);
    return 0;
  }
  f->port = ntohs(a.sin_port);
  if (pthread_create(&f->th, NULL, fake_serve, f) != 0) {
    close(f->lfd);
    return 0;
  }
  return 1;
}

void nt_fake_stop(nt_fake *f) {
  shutdown(f->lfd, SHUT_RDWR);
  close(f->lfd);
  pthread_join(f->th, NULL);
}
