/* bench_net.c - figures for remote lanes on loopback (not a test): a tiny op's round trip through a real
 * `weft worker`, the same round trip with 500 idle and trickling connections held open in the worker's
 * handshake stage against none (alternating blocks, one run), a large upload against raw loopback TCP
 * measured in the same run, bulk transfers (upload and download, 16 to 256 MiB) inside TLS 1.3 striped over
 * several connections against plain TCP at its best (one connection and striped, weft's frames and raw
 * sockets), alternating in one run, with the CPU each side spent per GB moved, and 8 concurrent clients x
 * 1000 ops with 10% malformed frames mixed in (wrong results and crashes counted).
 *
 *   bench_net /path/to/weft [bulk [STREAMS [ROUNDS [SIZES_MIB]]]]
 *
 * bulk: only the bulk transfers; STREAMS connections per striped transfer (default: this machine's cores, 2
 * to 8), ROUNDS per figure (default 5, medians), SIZES_MIB a comma-separated list (default 16,64,256). "tls"
 * is read as "bulk". */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "net/protocol.h"
#include "net/stripe.h"
#include "net/tls.h"
#include "../bench_util.h"

static int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
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
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

static int io(int fd, void *p, size_t n, int rd) { return rd ? weft_net_recv_all(fd, p, n) : weft_net_send_all(fd, p, n); }

/* Sends a frame (header + a + b) and reads the reply into *buf (grown); returns the status or -1. */
static int call(int fd, uint16_t type, const void *a, size_t al, const void *b, size_t bl, uint8_t **buf,
                size_t *cap, size_t *len) {
  static _Thread_local uint32_t id = 1;
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, type, 0, id++, (uint32_t)(al + bl)};
  weft_net_header_encode(&h, hb);
  if (al + bl <= 4096) {
    /* Small requests as one send, as a client lane does (one segment, one wakeup on the worker). */
    uint8_t one[16 + 4096];
    memcpy(one, hb, 16);
    if (al) memcpy(one + 16, a, al);
    if (bl) memcpy(one + 16 + al, b, bl);
    if (!io(fd, one, 16 + al + bl, 0)) return -1;
  } else if (!io(fd, hb, 16, 0) || (al && !io(fd, (void *)a, al, 0)) || (bl && !io(fd, (void *)b, bl, 0))) {
    return -1;
  }
  if (!io(fd, hb, 16, 1)) return -1;
  uint32_t n = weft_net_get32(hb + 12);
  if (n + 1 > *cap) {
    *buf = realloc(*buf, n + 1);
    *cap = n + 1;
  }
  if (!io(fd, *buf, n, 1)) return -1;
  if (len) *len = n;
  return weft_net_get16(hb + 6);
}

static int hello(int fd, uint8_t **buf, size_t *cap) {
  uint8_t pl[8];
  weft_net_put32(pl, WEFT_NET_VERSION);
  weft_net_put32(pl + 4, 0);
  return call(fd, WEFT_NET_HELLO, pl, 8, NULL, 0, buf, cap, NULL);
}

static uint64_t create(int fd, int64_t n, uint8_t **buf, size_t *cap) {
  uint8_t pl[16];
  weft_net_put32(pl, WEFT_DTYPE_F32);
  weft_net_put32(pl + 4, 1);
  weft_net_put64(pl + 8, (uint64_t)n);
  return call(fd, WEFT_NET_CREATE, pl, 16, NULL, 0, buf, cap, NULL) == 0 ? weft_net_get64(*buf) : 0;
}

/* A one-input, one-output op (relu, or a kind off the table), routed by the worker. */
#define OPB WEFT_NET_OP_BYTES(1, 1)
static void op_payload(uint8_t *pl, uint32_t kind, uint64_t in, uint64_t out) {
  weft_net_request r;
  memset(&r, 0, sizeof r);
  r.op = (weft_op_kind)kind;
  r.lane = -1;
  r.nin = r.nout = 1;
  r.handles[WEFT_NET_IN(0)] = in;
  r.handles[WEFT_NET_OUT(0)] = out;
  weft_net_op_encode(&r, pl);
}

static pid_t worker_pid;
static int worker_port;

/* Starts a worker; with a secret file, with --tls and that secret. Sets worker_pid and worker_port. */
static int start_worker(const char *weft, const char *tls_secret_file) {
  int p[2];
  if (pipe(p)) return 0;
  worker_pid = fork();
  if (worker_pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    /* The handshake stage holds every hostile connection of section 2 for the whole measurement (its
     * defaults would drop the oldest past 64 and each at 5 s, which only makes the load lighter). */
    if (tls_secret_file)
      execl(weft, weft, "worker", "--listen", "127.0.0.1:0", "--lanes", "cpu", "--max-frame-mib", "64",
            "--max-resident-mib", "2048", "--max-pending", "1024", "--handshake-timeout-ms", "600000",
            "--max-streams", "64", "--secret-file", tls_secret_file, "--tls", (char *)NULL);
    else
      execl(weft, weft, "worker", "--listen", "127.0.0.1:0", "--lanes", "cpu", "--max-frame-mib", "64",
            "--max-resident-mib", "2048", "--max-pending", "1024", "--handshake-timeout-ms", "600000",
            "--max-streams", "64", (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  char line[256] = "";
  size_t n = 0;
  while (n < sizeof line - 1 && read(p[0], line + n, 1) == 1 && line[n] != '\n') n++;
  line[n] = 0;
  close(p[0]);
  const char *c = strrchr(line, ':');
  worker_port = c ? atoi(c + 1) : 0;
  return worker_port > 0;
}

/* ------------------------------------------------------------------------------------ TLS vs plain */

/* One request, one reply over a connection (plain or TLS); the status, or -1. */
static int conn_call(weft_net_conn *c, uint16_t type, const void *a, size_t al, const void *b, size_t bl, uint8_t **buf,
                     size_t *cap) {
  static uint32_t id = 1;
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, type, 0, id++, (uint32_t)(al + bl)};
  weft_net_header_encode(&h, hb);
  const uint8_t *piece[3] = {hb, a, b};
  const size_t len[3] = {sizeof hb, al, bl};
  if (!weft_net_conn_send3(c, piece, len) || !weft_net_conn_recv_all(c, hb, sizeof hb)) return -1;
  uint32_t n = weft_net_get32(hb + 12);
  if (n + 1 > *cap) {
    *buf = realloc(*buf, n + 1);
    *cap = n + 1;
  }
  if (!weft_net_conn_recv_all(c, *buf, n)) return -1;
  (*buf)[n] = 0;
  return weft_net_get16(hb + 6);
}

/* Hello and, given a secret, the mutual proof (the worker's proof is not checked here: a bench); key gets the
 * session's stream key. */
static int conn_login(weft_net_conn *c, const char *secret, uint8_t **buf, size_t *cap, uint8_t key[WEFT_NET_KEY_BYTES]) {
  uint8_t pl[8], wn[WEFT_NET_NONCE_BYTES], cn[WEFT_NET_NONCE_BYTES], mac[WEFT_NET_MAC_BYTES];
  weft_net_put32(pl, WEFT_NET_VERSION);
  weft_net_put32(pl + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256 | WEFT_NET_CAP_AUTH_MUTUAL | WEFT_NET_CAP_STREAMS);
  if (conn_call(c, WEFT_NET_HELLO, pl, 8, NULL, 0, buf, cap) != 0) return 0;
  if (!secret) return 1;
  memcpy(wn, *buf + 12, sizeof wn);
  memset(cn, 1, sizeof cn);
  if (conn_call(c, WEFT_NET_AUTH_START, cn, sizeof cn, NULL, 0, buf, cap) != 0) return 0;
  char id[WEFT_NET_MAX_IDENTITY + 1];
  size_t il = weft_net_get16(*buf + WEFT_NET_MAC_BYTES);
  memcpy(id, *buf + WEFT_NET_MAC_BYTES + 2, il);
  id[il] = 0;
  weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, (const uint8_t *)secret, strlen(secret), wn, cn, id, mac);
  return conn_call(c, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, 0, buf, cap) == 0 &&
         weft_net_stream_key((const uint8_t *)secret, strlen(secret), wn, cn, id, key) == WEFT_OK;
}

/* CPU seconds a process has used, all its threads (/proc/PID/task/TID/schedstat: nanoseconds on a CPU). */
static double proc_cpu_s(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  double sum = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char f[128];
    snprintf(f, sizeof f, "/proc/%d/task/%.20s/schedstat", (int)pid, e->d_name);
    FILE *fp = fopen(f, "r");
    unsigned long long ns = 0;
    if (fp && fscanf(fp, "%llu", &ns) == 1) sum += (double)ns * 1e-9;
    if (fp) fclose(fp);
  }
  if (d) closedir(d);
  return sum;
}

static double self_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------------------- raw TCP sink */

static void *sink_thread(void *arg) {
  int lfd = *(int *)arg;
  int fd = accept(lfd, NULL, NULL);
  uint8_t *b = malloc(1 << 20); /* one per sink: striped sinks run at once */
  for (;;) {
    ssize_t k = b ? recv(fd, b, 1 << 20, 0) : -1;
    if (k <= 0) break;
  }
  free(b);
  close(fd);
  return NULL;
}

/* A listening socket on a free loopback port; *port says which. */
static int listen_loopback(int *port) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  bind(lfd, (struct sockaddr *)&a, sizeof a);
  listen(lfd, 1);
  getsockname(lfd, (struct sockaddr *)&a, &al);
  *port = ntohs(a.sin_port);
  return lfd;
}

static double raw_tcp_gbps(const uint8_t *data, size_t bytes) {
  int port = 0, lfd = listen_loopback(&port);
  pthread_t th;
  pthread_create(&th, NULL, sink_thread, &lfd);
  int fd = dial(port);
  double t0 = bench_now();
  io(fd, (void *)data, bytes, 0);
  shutdown(fd, SHUT_WR);
  pthread_join(th, NULL); /* the sink has read everything */
  double t = bench_now() - t0;
  close(fd);
  close(lfd);
  return (double)bytes / t * 1e-9;
}

/* ------------------------------------------------------------------------------------ bulk transfers */

/* Raw TCP striped: `n` socket pairs on loopback, a sender and a sink thread each, every pair moving its share
 * of the bytes; the figure runs from the first byte sent to the last received. */
typedef struct raw_pair {
  int lfd, fd, port;
  const uint8_t *p;
  size_t n;
  pthread_t sink, sender;
} raw_pair;

static void *raw_sender(void *arg) {
  raw_pair *r = arg;
  io(r->fd, (void *)r->p, r->n, 0);
  shutdown(r->fd, SHUT_WR);
  return NULL;
}

static double raw_striped_gbps(const uint8_t *data, size_t bytes, int n) {
  if (n <= 1) return raw_tcp_gbps(data, bytes);
  raw_pair *r = calloc((size_t)n, sizeof *r);
  size_t per = (bytes / (size_t)n + 4095) / 4096 * 4096;
  for (int i = 0; i < n; i++) {
    r[i].lfd = listen_loopback(&r[i].port);
    pthread_create(&r[i].sink, NULL, sink_thread, &r[i].lfd);
    r[i].fd = dial(r[i].port);
    size_t off = per * (size_t)i;
    r[i].p = data + (off < bytes ? off : bytes);
    r[i].n = off >= bytes ? 0 : bytes - off < per ? bytes - off : per;
  }
  double t0 = bench_now();
  for (int i = 0; i < n; i++) pthread_create(&r[i].sender, NULL, raw_sender, &r[i]);
  for (int i = 0; i < n; i++) pthread_join(r[i].sender, NULL);
  for (int i = 0; i < n; i++) pthread_join(r[i].sink, NULL);
  double t = bench_now() - t0;
  for (int i = 0; i < n; i++) {
    close(r[i].fd);
    close(r[i].lfd);
  }
  free(r);
  return (double)bytes / t * 1e-9;
}

/* One session on a worker with `n` connections (the session's own and n-1 streams joined to it). */
typedef struct bulk_sess {
  weft_net_conn c[WEFT_NET_MAX_STREAMS];
  size_t n;
  uint32_t next_id;
  uint64_t h; /* a tensor of the current size */
  pid_t worker;
} bulk_sess;

static int bulk_open(bulk_sess *s, weft_net_tls *t, int port, pid_t worker, const char *secret, uint32_t want,
                     uint8_t **buf, size_t *cap) {
  memset(s, 0, sizeof *s);
  s->worker = worker;
  s->next_id = 1u << 20;
  char err[256] = "";
  uint8_t key[WEFT_NET_KEY_BYTES];
  weft_net_conn_init(&s->c[0], dial(port));
  if (s->c[0].fd < 0 || (t && weft_net_conn_connect(&s->c[0], t, err, sizeof err)) ||
      !conn_login(&s->c[0], secret, buf, cap, key)) {
    fprintf(stderr, "bench_net: login failed: %s\n", err);
    return 0;
  }
  s->n = 1;
  if (want < 2) return 1;
  uint8_t pl[4];
  weft_net_put32(pl, want);
  if (conn_call(&s->c[0], WEFT_NET_STREAMS, pl, 4, NULL, 0, buf, cap) != 0) return 0;
  uint32_t granted = weft_net_get32(*buf);
  uint64_t session = weft_net_get64(*buf + 4);
  if (!secret) memcpy(key, *buf + 12, sizeof key);
  char id[WEFT_NET_MAX_IDENTITY + 1];
  size_t il = weft_net_get16(*buf + WEFT_NET_STREAMS_REPLY_BYTES);
  memcpy(id, *buf + WEFT_NET_STREAMS_REPLY_BYTES + 2, il);
  id[il] = 0;
  for (uint32_t i = 1; i < granted; i++) {
    weft_net_conn_init(&s->c[i], dial(port));
    if (s->c[i].fd < 0 || (t && weft_net_conn_connect(&s->c[i], t, err, sizeof err)) ||
        weft_net_stream_join(&s->c[i], session, i, key, id, err, sizeof err)) {
      fprintf(stderr, "bench_net: stream %u did not join: %s\n", (unsigned)i, err);
      return 0;
    }
    s->n = i + 1;
  }
  return s->n == want;
}

static void bulk_close(bulk_sess *s) {
  for (size_t i = 0; i < s->n; i++) weft_net_conn_close(&s->c[i]);
}

static int bulk_tensor(bulk_sess *s, size_t bytes, uint8_t **buf, size_t *cap) {
  uint8_t pl[16];
  if (s->h) {
    weft_net_put64(pl, s->h);
    conn_call(&s->c[0], WEFT_NET_FREE, pl, 8, NULL, 0, buf, cap);
  }
  weft_net_put32(pl, WEFT_DTYPE_F32);
  weft_net_put32(pl + 4, 1);
  weft_net_put64(pl + 8, bytes / 4);
  s->h = conn_call(&s->c[0], WEFT_NET_CREATE, pl, 16, NULL, 0, buf, cap) == 0 ? weft_net_get64(*buf) : 0;
  return s->h != 0;
}

/* GB/s of one transfer; the CPU seconds this process and the worker spent on it are added to cpu[0..1]. */
static double bulk_gbps(bulk_sess *s, int write, uint8_t *data, size_t bytes, double cpu[2]) {
  weft_net_bulk job = {write, s->h, 0, bytes / 4, data, ((64u << 20) - 64) / 4};
  char why[512] = "";
  double c0 = self_cpu_s(), w0 = proc_cpu_s(s->worker), t0 = bench_now();
  weft_status st = weft_net_bulk_run(s->c, s->n, &s->next_id, &job, why, sizeof why);
  double t = bench_now() - t0;
  cpu[0] += self_cpu_s() - c0;
  cpu[1] += proc_cpu_s(s->worker) - w0;
  if (st) {
    fprintf(stderr, "bench_net: a bulk %s failed: %s\n", write ? "write" : "read", why);
    exit(1);
  }
  return (double)bytes / t * 1e-9;
}

/* Whether this kernel can do TLS records itself (kTLS): the "tls" upper-layer protocol on a connected TCP
 * socket. OpenSSL uses it only where it is there (SSL_OP_ENABLE_KTLS in src/net/tls.c). */
static const char *ktls_kernel(char *buf, size_t n) {
  int port = 0, lfd = listen_loopback(&port), fd = dial(port);
  int afd = accept(lfd, NULL, NULL);
  int r = fd >= 0 ? setsockopt(fd, IPPROTO_TCP, 31 /* TCP_ULP */, "tls", sizeof "tls") : -1;
  int e = errno;
  snprintf(buf, n, "%s", r == 0 ? "the kernel offers the tls upper-layer protocol (kTLS)"
                   : e == ENOENT ? "the kernel has no kTLS (no tls upper-layer protocol: CONFIG_TLS off or the "
                                   "tls module not loaded)"
                                 : strerror(e));
  if (afd >= 0) close(afd);
  if (fd >= 0) close(fd);
  close(lfd);
  return buf;
}

enum { B_PLAIN1, B_PLAINN, B_TLS1, B_TLSN, B_RAW1, B_RAWN, B_KINDS };
static const char *const B_NAME[B_KINDS] = {"plain 1", "plain N", "TLS 1", "TLS N", "raw 1", "raw N"};

/* The bulk figures: for each size, upload and download through weft's frames in plain TCP and in TLS, over
 * one connection and striped over `streams`, and raw loopback TCP over one socket and `streams`, in an order
 * that rotates every round. */
static int bulk_section(const char *weft, pid_t plain_pid, int plain_port, int streams, int rounds, const char *sizes) {
  static const char tls_secret[] = "bench-secret-0123456789abcdef";
  char spath[] = "/tmp/weft-bench-secret-XXXXXX";
  int sfd = mkstemp(spath);
  if (sfd < 0 || write(sfd, tls_secret, strlen(tls_secret)) != (ssize_t)strlen(tls_secret)) return 1;
  close(sfd);
  pid_t keep_pid = worker_pid;
  int keep_port = worker_port;
  if (!start_worker(weft, spath)) {
    fprintf(stderr, "bench_net: the TLS worker did not start\n");
    return 1;
  }
  pid_t tls_pid = worker_pid;
  int tls_port = worker_port;
  worker_pid = keep_pid, worker_port = keep_port;
  weft_net_tls *t = NULL;
  char err[256] = "";
  if (weft_net_tls_create(0, (const uint8_t *)tls_secret, strlen(tls_secret), &t, err, sizeof err)) {
    fprintf(stderr, "bench_net: %s\n", err);
    return 1;
  }
  uint8_t *buf = NULL;
  size_t cap = 0;
  static bulk_sess S[4];
  if (!bulk_open(&S[B_PLAIN1], NULL, plain_port, plain_pid, NULL, 1, &buf, &cap) ||
      !bulk_open(&S[B_PLAINN], NULL, plain_port, plain_pid, NULL, (uint32_t)streams, &buf, &cap) ||
      !bulk_open(&S[B_TLS1], t, tls_port, tls_pid, tls_secret, 1, &buf, &cap) ||
      !bulk_open(&S[B_TLSN], t, tls_port, tls_pid, tls_secret, (uint32_t)streams, &buf, &cap)) {
    fprintf(stderr, "bench_net: the bulk sessions did not open\n");
    return 1;
  }
  char desc[160], kt[200];
  double load[3] = {0};
  if (getloadavg(load, 3) < 1) load[0] = -1;
  printf("bulk transfers on loopback, %d connections striped (N), %ld cores online, load average %.2f at the start; "
         "%s; %s; medians of %d rounds, the kinds alternating\n",
         streams, sysconf(_SC_NPROCESSORS_ONLN), load[0], weft_net_conn_describe(&S[B_TLS1].c[0], desc, sizeof desc),
         ktls_kernel(kt, sizeof kt), rounds);
  printf("%-8s %-8s %8s %8s %8s %8s %8s %8s  %-10s %-10s %-8s %-8s\n", "size", "", "plain 1", "plain N", "TLS 1",
         "TLS N", "raw 1", "raw N", "TLS N/best", "TLS N/best", "TLS N/", "TLS 1/");
  printf("%-8s %-8s %8s %8s %8s %8s %8s %8s  %-10s %-10s %-8s %-8s\n", "", "", "GB/s", "GB/s", "GB/s", "GB/s", "GB/s",
         "GB/s", "weft plain", "any plain", "plain 1", "plain 1");
  int worst = 0;
  double worst_ratio = 1e9, worst_one = 1e9;
  char list[256];
  snprintf(list, sizeof list, "%s", sizes);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    size_t mib = (size_t)strtoul(tok, NULL, 10);
    if (!mib) continue;
    size_t bytes = mib << 20;
    uint8_t *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) return 1;
    for (size_t i = 0; i < bytes; i++) src[i] = (uint8_t)(i * 131 + (i >> 20));
    memset(dst, 0, bytes);
    double cpu_dummy[2] = {0};
    for (int k = 0; k < 4; k++) {
      if (!bulk_tensor(&S[k], bytes, &buf, &cap)) {
        fprintf(stderr, "bench_net: no tensor of %zu MiB on the worker\n", mib);
        return 1;
      }
      /* Warm: the worker's pages faulted in, and the bits checked once each way. */
      bulk_gbps(&S[k], 1, src, bytes, cpu_dummy);
      bulk_gbps(&S[k], 0, dst, bytes, cpu_dummy);
      if (memcmp(src, dst, bytes) != 0) {
        fprintf(stderr, "bench_net: %s read back other bits than it wrote\n", B_NAME[k]);
        return 1;
      }
    }
    double *g[2][B_KINDS];
    double cpu[2][4][2];
    memset(cpu, 0, sizeof cpu);
    for (int d = 0; d < 2; d++)
      for (int k = 0; k < B_KINDS; k++) g[d][k] = calloc((size_t)rounds, sizeof(double));
    for (int r = 0; r < rounds; r++) {
      for (int j = 0; j < B_KINDS; j++) {
        int k = (j + r) % B_KINDS;
        if (k == B_RAW1 || k == B_RAWN) {
          /* Raw sockets move bytes one way; the figure stands for both directions. */
          g[0][k][r] = g[1][k][r] = raw_striped_gbps(src, bytes, k == B_RAW1 ? 1 : streams);
          continue;
        }
        g[0][k][r] = bulk_gbps(&S[k], 1, src, bytes, cpu[0][k]);
        g[1][k][r] = bulk_gbps(&S[k], 0, dst, bytes, cpu[1][k]);
      }
    }
    for (int d = 0; d < 2; d++) {
      double m[B_KINDS];
      for (int k = 0; k < B_KINDS; k++) m[k] = bench_median(g[d][k], rounds);
      double best_weft = m[B_PLAIN1] > m[B_PLAINN] ? m[B_PLAIN1] : m[B_PLAINN];
      double best_any = best_weft;
      for (int k = B_RAW1; k <= B_RAWN; k++)
        if (m[k] > best_any) best_any = m[k];
      char sz[32];
      snprintf(sz, sizeof sz, "%zu MiB", mib);
      printf("%-8s %-8s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f  %-10.2f %-10.2f %-8.2f %-8.2f\n", d ? "" : sz,
             d ? "download" : "upload", m[B_PLAIN1], m[B_PLAINN], m[B_TLS1], m[B_TLSN], m[B_RAW1], m[B_RAWN],
             m[B_TLSN] / best_weft, m[B_TLSN] / best_any, m[B_TLSN] / m[B_PLAIN1], m[B_TLS1] / m[B_PLAIN1]);
      if (m[B_TLSN] / best_weft < worst_ratio) worst_ratio = m[B_TLSN] / best_weft;
      if (m[B_TLSN] / m[B_PLAIN1] < worst_one) worst_one = m[B_TLSN] / m[B_PLAIN1];
    }
    double gb = (double)bytes * rounds * 1e-9;
    printf("%-8s CPU s/GB (client, worker): upload plain 1 %.2f, %.2f; TLS 1 %.2f, %.2f; TLS N %.2f, %.2f; "
           "download plain 1 %.2f, %.2f; TLS N %.2f, %.2f\n",
           "", cpu[0][B_PLAIN1][0] / gb, cpu[0][B_PLAIN1][1] / gb, cpu[0][B_TLS1][0] / gb, cpu[0][B_TLS1][1] / gb,
           cpu[0][B_TLSN][0] / gb, cpu[0][B_TLSN][1] / gb, cpu[1][B_PLAIN1][0] / gb, cpu[1][B_PLAIN1][1] / gb,
           cpu[1][B_TLSN][0] / gb, cpu[1][B_TLSN][1] / gb);
    for (int d = 0; d < 2; d++)
      for (int k = 0; k < B_KINDS; k++) free(g[d][k]);
    free(src);
    free(dst);
    worst++;
  }
  printf("TLS striped over %d, worst over %d sizes x 2 directions: %.2f of weft's plain TCP at its best (one "
         "connection or striped), %.2f of one plain connection (target >= 0.8)\n",
         streams, worst, worst_ratio, worst_one);
  for (int k = 0; k < 4; k++) bulk_close(&S[k]);
  weft_net_tls_destroy(t);
  free(buf);
  kill(tls_pid, SIGKILL);
  waitpid(tls_pid, NULL, 0);
  unlink(spath);
  return 0;
}

/* The floor under any round trip: a thread that echoes a 20-byte answer to each op-sized message. */
static void *echo_thread(void *arg) {
  int lfd = *(int *)arg;
  int fd = accept(lfd, NULL, NULL);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  uint8_t b[16 + OPB];
  while (io(fd, b, sizeof b, 1) && io(fd, b, 20, 0)) {
  }
  close(fd);
  return NULL;
}

static double raw_ping_us(int reps) {
  int port = 0, lfd = listen_loopback(&port);
  pthread_t th;
  pthread_create(&th, NULL, echo_thread, &lfd);
  int fd = dial(port);
  uint8_t b[16 + OPB] = {0};
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int i = 0; i < reps; i++) {
    double t0 = bench_now();
    io(fd, b, sizeof b, 0);
    io(fd, b, 20, 1);
    t[i] = bench_now() - t0;
  }
  close(fd);
  pthread_join(th, NULL);
  close(lfd);
  qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
  double m = t[reps / 2] * 1e6;
  free(t);
  return m;
}

/* ---------------------------------------------------------------------------------- held sockets */

enum { HOSTILE = 500 };
static int hostile[HOSTILE];

/* Opens HOSTILE connections that never complete a handshake: half send nothing, half one byte of a header. */
static int open_hostile(void) {
  int n = 0;
  for (int i = 0; i < HOSTILE; i++) {
    hostile[i] = dial(worker_port);
    if (hostile[i] < 0) continue;
    n++;
    if (i % 2) send(hostile[i], "W", 1, MSG_NOSIGNAL);
  }
  usleep(100 * 1000); /* the worker has accepted them all */
  return n;
}

static void close_hostile(void) {
  for (int i = 0; i < HOSTILE; i++)
    if (hostile[i] >= 0) close(hostile[i]);
  usleep(100 * 1000);
}

/* ------------------------------------------------------------------------------------ concurrency */

typedef struct client_result {
  long ok, wrong, errors_expected, errors_unexpected, malformed;
} client_result;

static void *client(void *arg) {
  client_result *r = arg;
  uint8_t *buf = NULL;
  size_t cap = 0, len = 0;
  unsigned seed = (unsigned)(uintptr_t)arg;
  int fd = dial(worker_port);
  if (fd < 0 || hello(fd, &buf, &cap) != 0) {
    r->errors_unexpected++;
    return NULL;
  }
  enum { N = 64 };
  uint64_t x = create(fd, N, &buf, &cap), y = create(fd, N, &buf, &cap);
  float in[N], out[N];
  uint8_t pl[OPB], wr[24 + N * 4], rd[24];
  for (int i = 0; i < 1000; i++) {
    if (i % 10 == 5) {
      /* A malformed frame: which kind varies; each must get an error reply on a live connection. */
      r->malformed++;
      int st;
      switch (rand_r(&seed) % 4) {
      case 0: op_payload(pl, 99, x, y); st = call(fd, WEFT_NET_OP, pl, sizeof pl, NULL, 0, &buf, &cap, NULL); break;
      case 1: op_payload(pl, 2, 0xfeedull, y); st = call(fd, WEFT_NET_OP, pl, sizeof pl, NULL, 0, &buf, &cap, NULL); break;
      case 2:
        weft_net_put64(wr, x);
        weft_net_put64(wr + 8, 0);
        weft_net_put64(wr + 16, N + 7); /* lies about its count */
        st = call(fd, WEFT_NET_WRITE, wr, sizeof wr, NULL, 0, &buf, &cap, NULL);
        break;
      default: st = call(fd, WEFT_NET_CREATE, pl, 9, NULL, 0, &buf, &cap, NULL); break;
      }
      if (st > 0) r->errors_expected++;
      else r->errors_unexpected++;
      continue;
    }
    for (int j = 0; j < N; j++) in[j] = (float)((int)(rand_r(&seed) % 2001) - 1000) / 7.0f;
    weft_net_put64(wr, x);
    weft_net_put64(wr + 8, 0);
    weft_net_put64(wr + 16, N);
    memcpy(wr + 24, in, sizeof in);
    op_payload(pl, 2 /* relu */, x, y);
    weft_net_put64(rd, y);
    weft_net_put64(rd + 8, 0);
    weft_net_put64(rd + 16, N);
    if (call(fd, WEFT_NET_WRITE, wr, sizeof wr, NULL, 0, &buf, &cap, NULL) != 0 ||
        call(fd, WEFT_NET_OP, pl, sizeof pl, NULL, 0, &buf, &cap, NULL) != 0 ||
        call(fd, WEFT_NET_READ, rd, sizeof rd, NULL, 0, &buf, &cap, &len) != 0 || len != 8 + sizeof out) {
      r->errors_unexpected++;
      continue;
    }
    memcpy(out, buf + 8, sizeof out);
    int good = 1;
    for (int j = 0; j < N; j++) good &= out[j] == (in[j] > 0 ? in[j] : 0.0f);
    if (good) r->ok++;
    else r->wrong++;
  }
  close(fd);
  free(buf);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_net /path/to/weft [bulk [STREAMS [ROUNDS [SIZES_MIB]]]]\n");
    return 2;
  }
  int only_tls = argc > 2 && (strcmp(argv[2], "bulk") == 0 || strcmp(argv[2], "tls") == 0);
  int streams = argc > 3 ? atoi(argv[3]) : (int)weft_net_default_streams();
  if (streams < 2) streams = 2;
  if (streams > (int)WEFT_NET_MAX_STREAMS) streams = (int)WEFT_NET_MAX_STREAMS;
  int rounds = argc > 4 && atoi(argv[4]) > 0 ? atoi(argv[4]) : 5;
  const char *sizes = argc > 5 ? argv[5] : "16,64,256";
  signal(SIGPIPE, SIG_IGN);
  struct rlimit rl; /* HOSTILE sockets and more: as many descriptors as the hard limit allows */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (!start_worker(argv[1], NULL)) {
    fprintf(stderr, "bench_net: the worker did not start\n");
    return 1;
  }
  uint8_t *buf = NULL;
  size_t cap = 0;
  int fd = dial(worker_port);
  hello(fd, &buf, &cap);

  size_t bytes = (size_t)256 << 20, per = (size_t)32 << 20;
  uint8_t *data = malloc(bytes);
  for (size_t i = 0; i < bytes; i++) data[i] = (uint8_t)(i * 131);
  if (only_tls) goto tls;

  /* 1. Tiny op round trip: relu of 4 floats on resident tensors. */
  uint64_t x = create(fd, 4, &buf, &cap), y = create(fd, 4, &buf, &cap);
  uint8_t pl[OPB];
  op_payload(pl, 2, x, y);
  enum { R = 5000 };
  static double t[R];
  for (int i = 0; i < 200; i++) call(fd, WEFT_NET_OP, pl, sizeof pl, NULL, 0, &buf, &cap, NULL);
  for (int i = 0; i < R; i++) {
    double t0 = bench_now();
    call(fd, WEFT_NET_OP, pl, sizeof pl, NULL, 0, &buf, &cap, NULL);
    t[i] = bench_now() - t0;
  }
  qsort(t, R, sizeof t[0], bench_cmp_double);
  printf("tiny op round trip (relu of 4 floats, resident): median %.1f us, p10 %.1f us, p90 %.1f us (target <= 50 us)\n",
         t[R / 2] * 1e6, t[R / 10] * 1e6, t[R * 9 / 10] * 1e6);
  printf("  raw loopback TCP ping-pong of the same sizes (echo thread, no weft): median %.1f us\n", raw_ping_us(R));

  /* 2. The same round trip with HOSTILE idle and trickling connections held open, against none, in
   * alternating blocks of one run (so both see the same machine). */
  enum { BLOCKS = 6, PER = 1000 };
  static double loaded[BLOCKS * PER], unloaded[BLOCKS * PER];
  int held = 0;
  for (int blk = 0; blk < BLOCKS; blk++) {
    for (int pass = 0; pass < 2; pass++) {
      int load = (blk + pass) % 2 == 0; /* alternate which comes first */
      if (load) held = open_hostile();
      double *dst = (load ? loaded : unloaded) + blk * PER;
      for (int i = 0; i < PER; i++) {
        double t0 = bench_now();
        if (call(fd, WEFT_NET_OP, pl, sizeof pl, NULL, 0, &buf, &cap, NULL) != 0) {
          fprintf(stderr, "bench_net: a tiny op failed with %d connections held\n", load ? held : 0);
          return 1;
        }
        dst[i] = bench_now() - t0;
      }
      if (load) close_hostile();
    }
  }
  qsort(loaded, BLOCKS * PER, sizeof loaded[0], bench_cmp_double);
  qsort(unloaded, BLOCKS * PER, sizeof unloaded[0], bench_cmp_double);
  double ml = loaded[BLOCKS * PER / 2], mu = unloaded[BLOCKS * PER / 2];
  printf("tiny op round trip with %d idle/trickling connections held open: median %.1f us (p90 %.1f us); none held: "
         "median %.1f us (p90 %.1f us); ratio %.2f (target <= 2)\n",
         held, ml * 1e6, loaded[BLOCKS * PER * 9 / 10] * 1e6, mu * 1e6, unloaded[BLOCKS * PER * 9 / 10] * 1e6, ml / mu);

  /* 3. Large upload: 256 MiB in 32 MiB frames vs raw loopback TCP of the same bytes. */
  uint64_t big = create(fd, (int64_t)(bytes / 4), &buf, &cap);
  double best_up = 0, best_raw = 0;
  for (int rep = 0; rep < 3; rep++) {
    double t0 = bench_now();
    for (size_t off = 0; off < bytes; off += per) {
      uint8_t h[24];
      weft_net_put64(h, big);
      weft_net_put64(h + 8, off / 4);
      weft_net_put64(h + 16, per / 4);
      if (call(fd, WEFT_NET_WRITE, h, 24, data + off, per, &buf, &cap, NULL) != 0) {
        fprintf(stderr, "upload failed: %s\n", buf);
        return 1;
      }
    }
    double up = (double)bytes / (bench_now() - t0) * 1e-9;
    double raw = raw_tcp_gbps(data, bytes);
    if (up > best_up) best_up = up;
    if (raw > best_raw) best_raw = raw;
  }
  printf("large upload (256 MiB, 32 MiB frames): %.2f GB/s; raw loopback TCP %.2f GB/s; ratio %.2f (target >= 0.8)\n",
         best_up, best_raw, best_up / best_raw);

  /* 2b. Bulk transfers: TLS striped against plain TCP at its best. */
tls:
  if (bulk_section(argv[1], worker_pid, worker_port, streams, rounds, sizes)) return 1;
  free(data);
  close(fd);
  if (only_tls) {
    kill(worker_pid, SIGKILL);
    waitpid(worker_pid, NULL, 0);
    free(buf);
    return 0;
  }

  /* 4. 8 concurrent clients x 1000 ops, 10% malformed. */
  pthread_t th[8];
  client_result res[8];
  memset(res, 0, sizeof res);
  double t0 = bench_now();
  for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, client, &res[i]);
  for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
  double el = bench_now() - t0;
  client_result tot = {0};
  for (int i = 0; i < 8; i++) {
    tot.ok += res[i].ok;
    tot.wrong += res[i].wrong;
    tot.malformed += res[i].malformed;
    tot.errors_expected += res[i].errors_expected;
    tot.errors_unexpected += res[i].errors_unexpected;
  }
  int alive = waitpid(worker_pid, NULL, WNOHANG) == 0;
  printf("8 clients x 1000 ops (%ld malformed): %ld correct, %ld wrong, %ld malformed answered with an error, "
         "%ld unexpected failures; worker %s; %.2f s\n",
         tot.malformed, tot.ok, tot.wrong, tot.errors_expected, tot.errors_unexpected, alive ? "alive" : "DEAD", el);
  kill(worker_pid, SIGKILL);
  waitpid(worker_pid, NULL, 0);
  free(buf);
  return tot.wrong || tot.errors_unexpected || !alive ? 1 : 0;
}
