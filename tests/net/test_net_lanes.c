/* test_net_lanes.c - one client's long op must not stall another's: a real `weft worker` serving cpu and
 * vulkan:0; client A runs large matmuls on cpu while client B runs a 4-element relu.
 *
 *  - on another lane (vulkan:0, pinned, and routed by the worker) B's op completes long before A's;
 *  - on the same lane B waits at most for the op that is running, even while A keeps several queued
 *    (FIFO, not a lock A can take again before B);
 *  - the lane indices in replies are those LANES lists; A's result has the canonical order's bits.
 *
 * Bounds are relative to A's own op time, measured here, and generous. Without a second lane (no Vulkan
 * driver) the same-lane half runs and the test then exits 77 (skipped). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netutil.h"
#include "tutil.h"

static nt_worker w;
static int cpu_lane = -1, vk_lane = -1;

static uint32_t op_payload(uint8_t *pl, uint32_t kind, int32_t lane, const uint64_t hs[4]) {
  return (uint32_t)nt_op_v1(pl, kind, 0, lane, 0, 0, hs, NULL, NULL);
}

/* Runs an op and returns the lane its reply names, or -1 - status. */
static int op_lane(int fd, uint32_t kind, int32_t lane, const uint64_t hs[4]) {
  uint8_t pl[WEFT_NET_OP_MAX_BYTES], *r = NULL;
  uint32_t plen = op_payload(pl, kind, lane, hs);
  uint32_t n = 0;
  int st = nt_call(fd, WEFT_NET_OP, pl, plen, &r, &n);
  int got = st == 0 && n == 4 ? (int)weft_net_get32(r) : -1 - (st < 0 ? 100 : st);
  free(r);
  return got;
}

static int read_at(int fd, uint64_t h, uint64_t off, float *x, uint64_t n) {
  uint8_t pl[24], *r = NULL;
  uint32_t len = 0;
  weft_net_put64(pl, h);
  weft_net_put64(pl + 8, off);
  weft_net_put64(pl + 16, n);
  int st = nt_call(fd, WEFT_NET_READ, pl, 24, &r, &len);
  if (st == 0 && len == 8 + n * 4) memcpy(x, r + 8, n * 4);
  else if (st == 0) st = -3;
  free(r);
  return st;
}

/* Writes n floats in frames of at most 4 Mi floats (under the frame cap). */
static int write_chunked(int fd, uint64_t h, const float *x, uint64_t n) {
  uint64_t per = (uint64_t)1 << 22;
  uint8_t *pl = malloc(24 + per * 4);
  int st = pl ? 0 : -1;
  for (uint64_t off = 0; off < n && st == 0; off += per) {
    uint64_t k = n - off < per ? n - off : per;
    weft_net_put64(pl, h);
    weft_net_put64(pl + 8, off);
    weft_net_put64(pl + 16, k);
    memcpy(pl + 24, x + off, k * 4);
    st = nt_call(fd, WEFT_NET_WRITE, pl, (uint32_t)(24 + k * 4), NULL, NULL);
  }
  free(pl);
  return st;
}

static void find_lanes(int fd) {
  uint8_t *r = NULL;
  uint32_t n = 0;
  if (nt_call(fd, WEFT_NET_LANES, NULL, 0, &r, &n) != 0 || n < 4) {
    free(r);
    return;
  }
  uint32_t count = weft_net_get32(r), at = 4;
  for (uint32_t i = 0; i < count && at + 12 <= n; i++) {
    uint32_t contracts = weft_net_get32(r + at);
    at += 12; /* contracts, ops */
    char name[256] = "";
    for (int k = 0; k < 3 && at + 2 <= n; k++) {
      uint16_t len = weft_net_get16(r + at);
      if (k == 0 && len < sizeof name && at + 2 + len <= n) memcpy(name, r + at + 2, len), name[len] = 0;
      at += 2u + len;
    }
    if (!(contracts & 1u)) continue;
    if (strcmp(name, "cpu") == 0) cpu_lane = (int)i;
    if (strcmp(name, "vulkan:0") == 0) vk_lane = (int)i;
  }
  free(r);
}

/* Client A: n x n matmuls on cpu, `count` of them sent back to back before any reply is read. */
typedef struct big {
  int fd;
  uint64_t hs[4];
  int count;
  double seconds; /* from the first send to the last reply */
  int ok;
} big;

static void *run_big(void *arg) {
  big *b = arg;
  uint8_t pl[WEFT_NET_OP_MAX_BYTES];
  uint32_t plen = op_payload(pl, WEFT_OP_MATMUL, cpu_lane, b->hs);
  double t0 = tu_now();
  b->ok = 1;
  for (int i = 0; i < b->count; i++) b->ok &= nt_send(b->fd, WEFT_NET_OP, 1000u + (uint32_t)i, pl, plen);
  for (int i = 0; i < b->count; i++) {
    weft_net_header h;
    uint8_t *r = NULL;
    b->ok &= nt_recv(b->fd, &h, &r) && h.status == 0 && h.request_id == 1000u + (uint32_t)i &&
             weft_net_get32(r) == (uint32_t)cpu_lane;
    free(r);
  }
  b->seconds = tu_now() - t0;
  return NULL;
}

int main(int argc, char **argv) {
  double start = tu_now();
  if (argc < 2) return 2;
  const char *extra[] = {"--lanes", "cpu,vulkan", NULL};
  TU_CHECK(nt_start(argv[1], extra, &w), "worker starts");
  if (!w.port) return tu_finish("net_lanes", start);
  int a = nt_connect(w.port), b = nt_connect(w.port);
  TU_CHECK(nt_hello(a, NULL) == 0 && nt_hello(b, NULL) == 0, "hello");
  find_lanes(a);
  TU_CHECK(cpu_lane >= 0, "the worker lists a cpu lane");
  if (cpu_lane < 0) return tu_finish("net_lanes", start);

  /* B's tiny op, warmed on each lane (the first Vulkan op builds its pipeline). */
  int64_t d4[1] = {4};
  uint64_t x = nt_create(b, 1, d4), y = nt_create(b, 1, d4);
  float xv[4] = {-1, 2, -3, 4}, yv[4];
  TU_CHECK(x && y && nt_write(b, x, xv, 4) == 0, "B's tensors");
  uint64_t tiny[4] = {x, 0, y, 0};
  TU_CHECK(op_lane(b, WEFT_OP_RELU, cpu_lane, tiny) == cpu_lane, "B's relu pinned to cpu says cpu");
  if (vk_lane >= 0) TU_CHECK(op_lane(b, WEFT_OP_RELU, vk_lane, tiny) == vk_lane, "B's relu pinned to vulkan:0 says so");

  /* A's matmul, grown until one takes 0.8 s here (4096^3 at most). */
  int64_t n = 256;
  uint64_t ha = 0, hb = 0, hc = 0;
  double t_a = 0;
  float *av = NULL, *bv = NULL;
  for (;;) {
    int64_t dims[2] = {n, n};
    size_t nn = (size_t)(n * n);
    av = realloc(av, nn * 4), bv = realloc(bv, nn * 4);
    tu_rng rng = {tu_seed()};
    for (size_t i = 0; i < nn; i++) av[i] = tu_rng_float(&rng, -1, 1), bv[i] = tu_rng_float(&rng, -1, 1);
    ha = nt_create(a, 2, dims), hb = nt_create(a, 2, dims), hc = nt_create(a, 2, dims);
    TU_CHECK(ha && hb && hc && write_chunked(a, ha, av, nn) == 0 && write_chunked(a, hb, bv, nn) == 0, "A's tensors");
    uint64_t hs[4] = {ha, hb, hc, 0};
    double t0 = tu_now();
    TU_CHECK(op_lane(a, WEFT_OP_MATMUL, cpu_lane, hs) == cpu_lane, "A's matmul on cpu");
    t_a = tu_now() - t0;
    if (t_a >= 0.8 || n >= 4096) break;
    uint8_t pl[8];
    uint64_t hh[3] = {ha, hb, hc};
    for (int i = 0; i < 3; i++) weft_net_put64(pl, hh[i]), nt_call(a, WEFT_NET_FREE, pl, 8, NULL, NULL);
    n *= 2;
  }
  /* A's bits: a few rows against the canonical order. */
  {
    float *row = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    int same = 1;
    for (int64_t i = 0; i < n; i += n / 4) {
      nt_ref_matmul(av + i * n, bv, row, 1, (int)n, (int)n);
      same &= read_at(a, hc, (uint64_t)(i * n), got, (uint64_t)n) == 0 && memcmp(row, got, (size_t)n * 4) == 0;
    }
    TU_CHECK(same, "A's %lldx%lld matmul differs from the canonical order", (long long)n, (long long)n);
    free(row), free(got);
  }
  free(av), free(bv);
  printf("A's matmul: %lld^3 on cpu, %.2f s\n", (long long)n, t_a);
  big job = {a, {ha, hb, hc, 0}, 1, 0, 0};
  pthread_t th;

  /* Same lane: A keeps three queued; B's op waits for the one running, not for all three. */
  job.count = 3;
  pthread_create(&th, NULL, run_big, &job);
  usleep((useconds_t)(t_a * 0.3 * 1e6));
  double t0 = tu_now();
  int lane = op_lane(b, WEFT_OP_RELU, cpu_lane, tiny);
  double wait_same = tu_now() - t0;
  pthread_join(th, NULL);
  TU_CHECK(job.ok, "A's queued matmuls answered in order on cpu");
  TU_CHECK(lane == cpu_lane, "B's op on cpu ran (lane %d)", lane);
  printf("same lane: B waited %.2f s behind A's %d queued ops of %.2f s each (%.2f s in all)\n", wait_same, job.count,
         t_a, job.seconds);
  double per_op = job.seconds / job.count > t_a ? job.seconds / job.count : t_a;
  TU_CHECK(wait_same < 1.6 * per_op, "on A's lane B waited %.2f s: more than the one op running (%.2f s)", wait_same,
           per_op);
  TU_CHECK(nt_read(b, y, yv, 4) == 0 && yv[0] == 0 && yv[1] == 2 && yv[2] == 0 && yv[3] == 4, "B's relu result");

  if (vk_lane >= 0) {
    /* Another lane: B's op, pinned to vulkan:0 and then routed, while A's runs on cpu. */
    job.count = 1;
    pthread_create(&th, NULL, run_big, &job);
    usleep((useconds_t)(t_a * 0.2 * 1e6));
    t0 = tu_now();
    lane = op_lane(b, WEFT_OP_RELU, vk_lane, tiny);
    double wait_other = tu_now() - t0;
    pthread_join(th, NULL);
    TU_CHECK(job.ok && lane == vk_lane, "both ran where asked (B on %d)", lane);
    printf("other lane: B's op took %.3f s while A's took %.2f s\n", wait_other, job.seconds);
    TU_CHECK(wait_other < 0.5 * job.seconds, "B's op on vulkan:0 took %.2f s: it queued behind A's on cpu (%.2f s)",
             wait_other, job.seconds);

    pthread_create(&th, NULL, run_big, &job);
    usleep((useconds_t)(t_a * 0.2 * 1e6));
    t0 = tu_now();
    lane = op_lane(b, WEFT_OP_RELU, -1, tiny);
    double wait_routed = tu_now() - t0;
    pthread_join(th, NULL);
    printf("routed: B's op ran on lane %d in %.3f s while A's took %.2f s\n", lane, wait_routed, job.seconds);
    TU_CHECK(lane == vk_lane || lane == cpu_lane, "the routed op names a lane LANES listed (%d)", lane);
    TU_CHECK(wait_routed < 0.5 * job.seconds, "B's routed op took %.2f s: it queued behind A's busy lane (%.2f s)",
             wait_routed, job.seconds);
    TU_CHECK(nt_read(b, y, yv, 4) == 0 && yv[1] == 2 && yv[2] == 0, "B's routed relu result");
  }
  close(a);
  close(b);
  TU_CHECK(nt_alive(&w), "worker alive");
  TU_CHECK(nt_matmul_right(w.port, NULL, 19, 33, 7, tu_seed()), "a matmul after the concurrent clients is right");
  nt_stop(&w);
  int rc = tu_finish("net_lanes", start);
  if (rc == 0 && vk_lane < 0) {
    printf("SKIP: no vulkan:0 lane here: the other-lane half did not run\n");
    return 77;
  }
  return rc;
}
