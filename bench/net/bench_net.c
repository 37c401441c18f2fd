/* bench_net.c - figures for remote lanes on loopback (not a test): a tiny op's round trip through a real
 * `weft worker`, the same round trip with 500 idle and trickling connections held open in the worker's
 * handshake stage against none (alternating blocks, one run), a large upload against raw loopback TCP
 * measured in the same run, the same upload inside TLS 1.3 (a second worker with --tls) alternating with
 * plain TCP (with the CPU each side spent per GB moved), and 8 concurrent clients x 1000 ops with 10%
 * malformed frames mixed in (wrong results and crashes counted).
 *
 *   bench_net /path/to/weft [tls]   (tls: only the TLS against plain TCP upload) */
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
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "net/protocol.h"
#include "net/tls.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

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
            "--secret-file", tls_secret_file, "--tls", (char *)NULL);
    else
      execl(weft, weft, "worker", "--listen", "127.0.0.1:0", "--lanes", "cpu", "--max-frame-mib", "64",
            "--max-resident-mib", "2048", "--max-pending", "1024", "--handshake-timeout-ms", "600000", (char *)NULL);
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

/* Hello and, given a secret, the mutual proof (the worker's proof is not checked here: a bench). */
static int conn_login(weft_net_conn *c, const char *secret, uint8_t **buf, size_t *cap) {
  uint8_t pl[8], wn[WEFT_NET_NONCE_BYTES], cn[WEFT_NET_NONCE_BYTES], mac[WEFT_NET_MAC_BYTES];
  weft_net_put32(pl, WEFT_NET_VERSION);
  weft_net_put32(pl + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256 | WEFT_NET_CAP_AUTH_MUTUAL);
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
  return conn_call(c, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, 0, buf, cap) == 0;
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

/* GB/s of one upload of `bytes` in `per`-byte WRITE frames into handle h. */
static double conn_upload(weft_net_conn *c, uint64_t h, const uint8_t *data, size_t bytes, size_t per, uint8_t **buf,
                          size_t *cap) {
  double t0 = now();
  for (size_t off = 0; off < bytes; off += per) {
    uint8_t p[24];
    weft_net_put64(p, h);
    weft_net_put64(p + 8, off / 4);
    weft_net_put64(p + 16, per / 4);
    if (conn_call(c, WEFT_NET_WRITE, p, 24, data + off, per, buf, cap) != 0) return 0;
  }
  return (double)bytes / (now() - t0) * 1e-9;
}

/* ------------------------------------------------------------------------------------- raw TCP sink */

static void *sink_thread(void *arg) {
  int lfd = *(int *)arg;
  int fd = accept(lfd, NULL, NULL);
  static uint8_t b[1 << 20];
  for (;;) {
    ssize_t k = recv(fd, b, sizeof b, 0);
    if (k <= 0) break;
  }
  uint8_t ack = 1;
  (void)ack;
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
  double t0 = now();
  io(fd, (void *)data, bytes, 0);
  shutdown(fd, SHUT_WR);
  pthread_join(th, NULL); /* the sink has read everything */
  double t = now() - t0;
  close(fd);
  close(lfd);
  return (double)bytes / t * 1e-9;
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
    double t0 = now();
    io(fd, b, sizeof b, 0);
    io(fd, b, 20, 1);
    t[i] = now() - t0;
  }
  close(fd);
  pthread_join(th, NULL);
  close(lfd);
  qsort(t, (size_t)reps, sizeof t[0], cmp_d);
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
    fprintf(stderr, "usage: bench_net /path/to/weft [tls]   (tls: only the TLS against plain TCP upload)\n");
    return 2;
  }
  int only_tls = argc > 2 && strcmp(argv[2], "tls") == 0;
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
    double t0 = now();
    call(fd, WEFT_NET_OP, pl, sizeof pl, NULL, 0, &buf, &cap, NULL);
    t[i] = now() - t0;
  }
  qsort(t, R, sizeof t[0], cmp_d);
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
        double t0 = now();
        if (call(fd, WEFT_NET_OP, pl, sizeof pl, NULL, 0, &buf, &cap, NULL) != 0) {
          fprintf(stderr, "bench_net: a tiny op failed with %d connections held\n", load ? held : 0);
          return 1;
        }
        dst[i] = now() - t0;
      }
      if (load) close_hostile();
    }
  }
  qsort(loaded, BLOCKS * PER, sizeof loaded[0], cmp_d);
  qsort(unloaded, BLOCKS * PER, sizeof unloaded[0], cmp_d);
  double ml = loaded[BLOCKS * PER / 2], mu = unloaded[BLOCKS * PER / 2];
  printf("tiny op round trip with %d idle/trickling connections held open: median %.1f us (p90 %.1f us); none held: "
         "median %.1f us (p90 %.1f us); ratio %.2f (target <= 2)\n",
         held, ml * 1e6, loaded[BLOCKS * PER * 9 / 10] * 1e6, mu * 1e6, unloaded[BLOCKS * PER * 9 / 10] * 1e6, ml / mu);

  /* 3. Large upload: 256 MiB in 32 MiB frames vs raw loopback TCP of the same bytes. */
  uint64_t big = create(fd, (int64_t)(bytes / 4), &buf, &cap);
  double best_up = 0, best_raw = 0;
  for (int rep = 0; rep < 3; rep++) {
    double t0 = now();
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
    double up = (double)bytes / (now() - t0) * 1e-9;
    double raw = raw_tcp_gbps(data, bytes);
    if (up > best_up) best_up = up;
    if (raw > best_raw) best_raw = raw;
  }
  printf("large upload (256 MiB, 32 MiB frames): %.2f GB/s; raw loopback TCP %.2f GB/s; ratio %.2f (target >= 0.8)\n",
         best_up, best_raw, best_up / best_raw);

  /* 2b. The same bulk upload inside TLS 1.3 (a second worker, --tls) against plain TCP (the first worker),
   * alternating: 64 MiB tensors written in 32 MiB frames, medians of 7 rounds each. */
tls: {
    static const char tls_secret[] = "bench-secret-0123456789abcdef";
    char spath[] = "/tmp/weft-bench-secret-XXXXXX";
    int sfd = mkstemp(spath);
    if (sfd < 0 || write(sfd, tls_secret, strlen(tls_secret)) != (ssize_t)strlen(tls_secret)) return 1;
    close(sfd);
    pid_t plain_pid = worker_pid;
    int plain_port = worker_port;
    if (!start_worker(argv[1], spath)) {
      fprintf(stderr, "bench_net: the TLS worker did not start\n");
      return 1;
    }
    pid_t tls_pid = worker_pid;
    int tls_port = worker_port;
    worker_pid = plain_pid;
    worker_port = plain_port;
    weft_net_tls *t = NULL;
    char err[256] = "";
    weft_net_conn pc, tc;
    weft_net_conn_init(&pc, dial(plain_port));
    weft_net_conn_init(&tc, dial(tls_port));
    if (weft_net_tls_create(0, (const uint8_t *)tls_secret, strlen(tls_secret), &t, err, sizeof err) ||
        weft_net_conn_connect(&tc, t, err, sizeof err) || !conn_login(&tc, tls_secret, &buf, &cap) ||
        !conn_login(&pc, NULL, &buf, &cap)) {
      fprintf(stderr, "bench_net: TLS setup failed: %s %s\n", err, buf ? (char *)buf : "");
      return 1;
    }
    char desc[160];
    weft_net_conn_describe(&tc, desc, sizeof desc);
    size_t tb = (size_t)64 << 20, tper = (size_t)32 << 20;
    uint8_t cp[16];
    weft_net_put32(cp, WEFT_DTYPE_F32);
    weft_net_put32(cp + 4, 1);
    weft_net_put64(cp + 8, tb / 4);
    uint64_t hp = conn_call(&pc, WEFT_NET_CREATE, cp, 16, NULL, 0, &buf, &cap) == 0 ? weft_net_get64(buf) : 0;
    uint64_t ht = conn_call(&tc, WEFT_NET_CREATE, cp, 16, NULL, 0, &buf, &cap) == 0 ? weft_net_get64(buf) : 0;
    enum { ROUNDS = 7 };
    double gp[ROUNDS], gt[ROUNDS], gr[ROUNDS];
    conn_upload(&pc, hp, data, tb, tper, &buf, &cap); /* warm both: pages faulted in on each worker */
    conn_upload(&tc, ht, data, tb, tper, &buf, &cap);
    /* CPU seconds per side (this client, the worker) for each kind of upload, summed over the rounds. */
    double cpu_pc = 0, cpu_pw = 0, cpu_tc = 0, cpu_tw = 0;
    for (int r = 0; r < ROUNDS; r++) {
      double c0 = self_cpu_s(), w0 = proc_cpu_s(plain_pid);
      gp[r] = conn_upload(&pc, hp, data, tb, tper, &buf, &cap);
      double c1 = self_cpu_s(), w1 = proc_cpu_s(plain_pid), w2 = proc_cpu_s(tls_pid);
      gt[r] = conn_upload(&tc, ht, data, tb, tper, &buf, &cap);
      double c2 = self_cpu_s(), w3 = proc_cpu_s(tls_pid);
      cpu_pc += c1 - c0, cpu_pw += w1 - w0, cpu_tc += c2 - c1, cpu_tw += w3 - w2;
      gr[r] = raw_tcp_gbps(data, tb);
    }
    double gb = (double)tb * ROUNDS * 1e-9;
    qsort(gp, ROUNDS, sizeof gp[0], cmp_d);
    qsort(gt, ROUNDS, sizeof gt[0], cmp_d);
    qsort(gr, ROUNDS, sizeof gr[0], cmp_d);
    printf("bulk upload, 64 MiB tensors in 32 MiB frames, alternating, median of %d: %s %.2f GB/s; plain TCP "
           "%.2f GB/s; raw loopback TCP %.2f GB/s; TLS/plain %.2f, TLS/raw %.2f (target >= 0.8)\n",
           ROUNDS, desc, gt[ROUNDS / 2], gp[ROUNDS / 2], gr[ROUNDS / 2], gt[ROUNDS / 2] / gp[ROUNDS / 2],
           gt[ROUNDS / 2] / gr[ROUNDS / 2]);
    printf("  CPU per GB moved: TLS client %.3f s, worker %.3f s; plain client %.3f s, worker %.3f s (the busier "
           "side bounds the rate on 2 cores: TLS %.2f GB/s, plain %.2f GB/s)\n",
           cpu_tc / gb, cpu_tw / gb, cpu_pc / gb, cpu_pw / gb, gb / (cpu_tc > cpu_tw ? cpu_tc : cpu_tw),
           gb / (cpu_pc > cpu_pw ? cpu_pc : cpu_pw));
    weft_net_conn_close(&tc);
    weft_net_conn_close(&pc);
    weft_net_tls_destroy(t);
    kill(tls_pid, SIGKILL);
    waitpid(tls_pid, NULL, 0);
    unlink(spath);
  }
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
  double t0 = now();
  for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, client, &res[i]);
  for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
  double el = now() - t0;
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
