/* test_hostpath.c - the host data path: large host copies on several threads (hostcopy.c) and the pieced
 * transfers of tensor.c. Checked, with WEFT_COPY_THREADS=4 so the threads run even on a small machine:
 *   - the copier alone: odd sizes, odd offsets, zeroing, two threads copying at once;
 *   - on every lane present: tensors made, written and read from caller arrays at odd offsets and odd
 *     sizes (small, just over the copier's threshold, several pieces with a short tail) keep the bits, ops
 *     on them give the reference's bits, and the caller's memory outside the range is not touched; on a
 *     CUDA lane, matmuls whose results stream home (first into the lane's memory, then pinned) keep the CPU
 *     lane's bits round after round;
 *   - with a device lane that registers host memory (a fake one): a write sends the new value on to the lane
 *     the old one lived on, piece by piece, so the op that follows uploads nothing; a read of a result the
 *     lane streams home comes in pieces; and when a piece fails - the lane going down, or a plain error - the
 *     write still succeeds with a current host copy, the read recomputes or reports, and nothing is lost. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hostcopy.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft.h"

/* ---------------------------------------------------------------------------------------- the copier */

static void fill_bytes(unsigned char *p, size_t n, uint64_t seed) {
  tu_rng r = {seed};
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)tu_rng_next(&r);
}

typedef struct copy_job {
  weft_hostcopy *c;
  unsigned char *dst;
  const unsigned char *src;
  size_t bytes;
  int rounds;
} copy_job;

static void *copy_thread(void *arg) {
  copy_job *j = arg;
  for (int i = 0; i < j->rounds; i++) weft_hostcopy_run(j->c, j->dst, j->src, j->bytes);
  return NULL;
}

static void test_copier(void) {
  weft_hostcopy *c = weft_hostcopy_acquire();
  TU_CHECK(c && weft_hostcopy_threads(c) == 4, "WEFT_COPY_THREADS=4 gives a copier of 4 threads (got %d)",
           weft_hostcopy_threads(c));
  const size_t piece = (size_t)256 << 10, big = ((size_t)9 << 20) + 4099;
  unsigned char *src = malloc(big + 64), *dst = malloc(big + 64);
  fill_bytes(src, big + 64, 11);
  static const size_t sizes[] = {0, 1, 4095, (size_t)2 << 20, ((size_t)2 << 20) + 1, ((size_t)2 << 20) - 1,
                                 ((size_t)2 << 20) + ((size_t)256 << 10) + 3, ((size_t)9 << 20) + 4099};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (size_t so = 0; so < 3; so++)
      for (size_t d_off = 0; d_off < 3; d_off++) {
        const size_t n = sizes[s] - (sizes[s] > 8 ? so + d_off : 0);
        memset(dst, 0xa5, big + 64);
        weft_hostcopy_run(c, dst + 1 + d_off * 7, src + so * 5, n);
        int ok = memcmp(dst + 1 + d_off * 7, src + so * 5, n) == 0 && dst[0] == 0xa5 &&
                 dst[1 + d_off * 7 + n] == 0xa5;
        TU_CHECK(ok, "copy of %zu bytes (src +%zu, dst +%zu): the bytes and nothing around them", n, so * 5,
                 1 + d_off * 7);
      }
  /* zeroing, across pieces, at an odd offset */
  memset(dst, 0xa5, big + 64);
  weft_hostcopy_run(c, dst + 3, NULL, 5 * piece + 17);
  int zero = dst[2] == 0xa5 && dst[3 + 5 * piece + 17] == 0xa5;
  for (size_t i = 3; i < 3 + 5 * piece + 17 && zero; i++) zero = dst[i] == 0;
  TU_CHECK(zero, "zeroing %zu bytes at +3: zeros there and nothing around them", 5 * piece + 17);
  /* two threads at once: one gets the threads, the other copies alone; both copies complete */
  unsigned char *src2 = malloc(big), *dst2 = malloc(big);
  fill_bytes(src2, big, 12);
  copy_job a = {c, dst, src, big, 20}, b = {c, dst2, src2, big, 20};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, copy_thread, &a);
  pthread_create(&tb, NULL, copy_thread, &b);
  pthread_join(ta, NULL), pthread_join(tb, NULL);
  TU_CHECK(memcmp(dst, src, big) == 0 && memcmp(dst2, src2, big) == 0, "two threads copying at once");
  free(src), free(dst), free(src2), free(dst2);
  weft_hostcopy *c2 = weft_hostcopy_acquire();
  TU_CHECK(c2 == c, "one copier for the process");
  weft_hostcopy_release(c2);
  weft_hostcopy_release(c);
}

/* ------------------------------------------------------------------------------------- every lane */

static void fill(float *p, size_t n, uint64_t seed) {
  tu_rng r = {seed};
  for (size_t i = 0; i < n; i++) p[i] = tu_rng_float(&r, -4.0f, 4.0f);
}

/* Bits equal over n floats. */
static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

#define CANARY 0x7f812345u /* a signalling NaN's bits: no op result has them */

static void lane_shapes(weft_fabric *f, int lane, const char *name) {
  static const int64_t shapes[][2] = {{7, 13}, {1, 524291}, {1531, 2053}};
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int off = 0; off < 2; off++) {
      const int64_t *dims = shapes[s];
      const size_t n = (size_t)(dims[0] * dims[1]);
      float *x = malloc((n + 2) * sizeof(float)), *out = malloc((n + 2) * sizeof(float));
      float *want = malloc(n * sizeof(float));
      uint32_t canary = CANARY;
      weft_tensor *X = NULL, *Y = NULL, *Z = NULL;
      fill(x + off, n, 100 + s);
      TU_STATUS(weft_tensor_create(f, 2, dims, x + off, &X), WEFT_OK, "create from data");
      TU_STATUS(weft_tensor_create(f, 2, dims, NULL, &Y), WEFT_OK, "create zeros");
      TU_STATUS(weft_tensor_create(f, 2, dims, NULL, &Z), WEFT_OK, "create zeros");
      if (!X || !Y || !Z) goto next;
      memset(out, 0xff, (n + 2) * sizeof(float));
      TU_STATUS(weft_tensor_read(Y, out + off, n), WEFT_OK, "read zeros");
      int zeros = 1;
      for (size_t i = 0; i < n && zeros; i++) zeros = tu_bits(out[off + i]) == 0;
      TU_CHECK(zeros, "%s [%lld,%lld] +%d: a tensor made without data reads as zeros", name, (long long)dims[0],
               (long long)dims[1], off);
      for (int round = 0; round < 3; round++) {
        fill(x + off, n, 200 + 10 * s + (uint64_t)round);
        TU_STATUS(weft_tensor_write(X, x + off, n), WEFT_OK, "write");
        TU_STATUS(weft_op_scale(f, &d, 2.0f, X, Y), WEFT_OK, "scale");
        TU_STATUS(weft_op_add(f, &d, X, Y, Z), WEFT_OK, "add");
        memcpy(&out[off ? 0 : n], &canary, 4);
        memcpy(&out[off + n], &canary, 4);
        TU_STATUS(weft_tensor_read(Z, out + off, n), WEFT_OK, "read");
        for (size_t i = 0; i < n; i++) want[i] = x[off + i] + x[off + i] * 2.0f;
        TU_CHECK(same(out + off, want, n), "%s [%lld,%lld] +%d round %d: x + 2x read back with the reference's bits",
                 name, (long long)dims[0], (long long)dims[1], off, round);
        TU_CHECK(tu_bits(out[off + n]) == CANARY && tu_bits(out[off ? 0 : n]) == CANARY,
                 "%s [%lld,%lld] +%d: the read touched nothing outside its range", name, (long long)dims[0],
                 (long long)dims[1], off);
        TU_STATUS(weft_tensor_read(X, out + off, n), WEFT_OK, "read the input");
        TU_CHECK(same(out + off, x + off, n), "%s [%lld,%lld] +%d round %d: the input's host copy is current", name,
                 (long long)dims[0], (long long)dims[1], off, round);
      }
    next:
      weft_tensor_destroy(X), weft_tensor_destroy(Y), weft_tensor_destroy(Z);
      free(x), free(out), free(want);
    }
  /* a wrapped tensor written from and read into other arrays */
  const int64_t dims[2] = {1531, 2053};
  const size_t n = (size_t)(dims[0] * dims[1]);
  float *w = malloc(n * sizeof(float)), *x = malloc((n + 1) * sizeof(float)), *out = malloc((n + 1) * sizeof(float));
  fill(w, n, 7);
  weft_tensor *W = NULL, *Y = NULL;
  TU_STATUS(weft_tensor_wrap(f, 2, dims, w, &W), WEFT_OK, "wrap");
  TU_STATUS(weft_tensor_create(f, 2, dims, NULL, &Y), WEFT_OK, "create");
  for (int round = 0; round < 3 && W && Y; round++) {
    fill(x + 1, n, 300 + (uint64_t)round);
    TU_STATUS(weft_tensor_write(W, x + 1, n), WEFT_OK, "write into wrapped memory");
    TU_CHECK(same(w, x + 1, n), "%s round %d: the write landed in the wrapped memory", name, round);
    TU_STATUS(weft_op_scale(f, &d, 2.0f, W, Y), WEFT_OK, "scale");
    TU_STATUS(weft_op_scale(f, &d, 0.5f, Y, W), WEFT_OK, "scale back");
    TU_STATUS(weft_tensor_read(W, out + 1, n), WEFT_OK, "read wrapped");
    TU_CHECK(same(out + 1, x + 1, n), "%s round %d: the wrapped tensor reads back (2x, then half)", name, round);
    TU_CHECK(same(w, x + 1, n), "%s round %d: and its memory holds the value", name, round);
  }
  weft_tensor_destroy(W), weft_tensor_destroy(Y);
  free(w), free(x), free(out);
}

/* Matmuls from host arrays on each CUDA lane (none here without a GPU): the result streams home in row
 * blocks, first into the lane's own pinned memory, then, once the arrays are pinned, straight into the
 * result's host copy; a's host copy (over 32 MiB) is pinned by the lane's pinning thread, and from then on a
 * write of a goes on to the GPU piece by piece. Every round's bits are the CPU lane's. */
static void gpu_matmuls(weft_fabric *f) {
  size_t cpu = 0;
  if (weft_fabric_lane_find(f, "cpu", &cpu) != WEFT_OK) return;
  const int64_t M = 4096, K = 2100, N = 1024; /* out below holds a (K > N) or c */
  for (size_t l = 0; l < weft_fabric_lane_count(f); l++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, l, &li);
    if (strcmp(li.kind, "cuda") != 0 || !(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) continue;
    printf("matmuls on %s\n", li.name);
    float *a = malloc((size_t)(M * K) * sizeof(float)), *b = malloc((size_t)(K * N) * sizeof(float));
    float *want = malloc((size_t)(M * N) * sizeof(float)), *out = malloc((size_t)(M * K + 1) * sizeof(float));
    int64_t da[2] = {M, K}, db[2] = {K, N}, dc[2] = {M, N};
    weft_tensor *A = NULL, *B = NULL, *C = NULL, *R = NULL;
    weft_tensor_create(f, 2, da, NULL, &A), weft_tensor_create(f, 2, db, NULL, &B);
    weft_tensor_create(f, 2, dc, NULL, &C), weft_tensor_create(f, 2, dc, NULL, &R);
    weft_op_desc on_cpu = {WEFT_CONTRACT_EXACT, (int)cpu}, on_gpu = {WEFT_CONTRACT_EXACT, (int)l};
    fill(b, (size_t)(K * N), 900);
    for (int round = 0; round < 6 && A && B && C && R; round++) {
      fill(a, (size_t)(M * K), 910 + (uint64_t)round);
      TU_STATUS(weft_tensor_write(A, a, (size_t)(M * K)), WEFT_OK, "write a");
      TU_STATUS(weft_tensor_write(B, b, (size_t)(K * N)), WEFT_OK, "write b");
      TU_STATUS(weft_op_matmul(f, &on_cpu, A, 0, B, 0, R), WEFT_OK, "matmul on the CPU");
      TU_STATUS(weft_tensor_read(R, want, (size_t)(M * N)), WEFT_OK, "read the CPU's");
      TU_STATUS(weft_op_matmul(f, &on_gpu, A, 0, B, 0, C), WEFT_OK, "matmul on the GPU");
      TU_STATUS(weft_tensor_read(C, out + 1, (size_t)(M * N)), WEFT_OK, "read the GPU's");
      TU_CHECK(same(out + 1, want, (size_t)(M * N)), "%s round %d: the CPU lane's bits", li.name, round);
      TU_STATUS(weft_tensor_read(A, out + 1, (size_t)(M * K)), WEFT_OK, "read a");
      TU_CHECK(same(out + 1, a, (size_t)(M * K)), "%s round %d: a's host copy is current", li.name, round);
    }
    weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(C), weft_tensor_destroy(R);
    free(a), free(b), free(want), free(out);
  }
}

static void test_lanes(void) {
  weft_fabric *f = NULL;
  if (tu_open(NULL, &f) != WEFT_OK) {
    TU_CHECK(0, "open: %s", weft_open_error());
    return;
  }
  for (size_t l = 0; l < weft_fabric_lane_count(f); l++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, l, &li);
    if (!(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) {
      printf("%s: no exact contract, not run here\n", li.name);
      continue;
    }
    printf("lane %s\n", li.name);
    lane_shapes(f, (int)l, li.name);
  }
  gpu_matmuls(f);
  weft_fabric_close(f);
}

/* -------------------------------------------------------------------- a device lane that registers */

typedef struct fake {
  char name[32];
  int uploads, downloads, registers, unregisters;
  size_t up_bytes;
  /* the Nth upload (download) from when it is set fails with fail_status (0: none) */
  int fail_upload, fail_download;
  weft_status fail_status;
  int not_streaming; /* the streaming slot says no */
  void *last_out_host;
} fake;

static void fk_describe(void *self, weft_lane_desc *out) {
  fake *k = self;
  memset(out, 0, sizeof *out);
  out->name = k->name, out->kind = "fake", out->device = "fake", out->driver = "", out->details = "";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT);
}
static void fk_destroy(void *self) { free(self); }
static weft_status fk_upload(void *self, void *buffer, size_t offset, const void *src, size_t bytes) {
  fake *k = self;
  if (k->fail_upload && --k->fail_upload == 0) return k->fail_status;
  k->uploads++;
  k->up_bytes += bytes;
  return tu_fake_upload(self, buffer, offset, src, bytes);
}
static weft_status fk_download(void *self, void *buffer, size_t offset, void *dst, size_t bytes) {
  fake *k = self;
  if (k->fail_download && --k->fail_download == 0) return k->fail_status;
  k->downloads++;
  return tu_fake_download(self, buffer, offset, dst, bytes);
}
static weft_status fk_run(void *self, const weft_op *op);
static weft_status fk_register(void *self, void *ptr, size_t bytes) {
  (void)ptr, (void)bytes;
  ((fake *)self)->registers++;
  return WEFT_OK;
}
static void fk_unregister(void *self, void *ptr, size_t bytes) {
  (void)ptr, (void)bytes;
  ((fake *)self)->unregisters++;
}
static weft_status fk_sync(void *self) {
  (void)self;
  return WEFT_OK;
}
static int fk_streaming(void *self, weft_buffer *buffer) {
  (void)buffer;
  return !((fake *)self)->not_streaming;
}
static const weft_lane_vtable FAKE_VT = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
    .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc, .buffer_free = tu_fake_free, .upload = fk_upload,
    .download = fk_download, .run = fk_run, .sync = fk_sync, .host_register = fk_register,
    .host_unregister = fk_unregister, .streaming = fk_streaming,
};
/* registers nothing, but says its results stream home (as the CUDA lane's matmuls on host data do into
 * memory of its own before the host memory is registered) */
static const weft_lane_vtable STREAM_VT = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
    .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc, .buffer_free = tu_fake_free, .upload = fk_upload,
    .download = fk_download, .run = fk_run, .sync = fk_sync, .streaming = fk_streaming,
};

/* scale only: enough to move values through the lane */
static weft_status fk_run(void *self, const weft_op *op) {
  fake *k = self;
  if (op->kind != WEFT_OP_SCALE) return WEFT_ERR_UNSUPPORTED;
  k->last_out_host = op->out_host[0];
  const float *x = op->in[0];
  float *y = op->out[0];
  for (int64_t i = 0; i < op->rows * op->cols; i++) y[i] = op->alpha * x[i];
  return WEFT_OK;
}

typedef struct rig {
  weft_fabric *f;
  fake *k;
  int lane, cpu;
  weft_tensor *X, *Y;
  float *x, *out, *want;
  size_t n;
} rig;

static const int64_t RIG_DIMS[2] = {1531, 2053}; /* 12.6 MB: three pieces, 4 MiB, 4 MiB and a shorter one */
enum { RIG_PIECES = 3 };

/* A fabric with the fake lane, and X -> Y = 2X run on it until both tensors are registered there (twice
 * across): the third round is the steady state. */
static int rig_open_vt(rig *r, int rounds, const weft_lane_vtable *vt) {
  memset(r, 0, sizeof *r);
  if (tu_open("cpu", &r->f) != WEFT_OK) return TU_CHECK(0, "open: %s", weft_open_error()), 0;
  r->k = calloc(1, sizeof *r->k);
  snprintf(r->k->name, sizeof r->k->name, "fake:0");
  if (weft_testing_add_lane(r->f, vt, r->k) != WEFT_OK) return TU_CHECK(0, "add lane"), 0;
  size_t i;
  weft_fabric_lane_find(r->f, "fake:0", &i);
  r->lane = (int)i;
  weft_fabric_lane_find(r->f, "cpu", &i);
  r->cpu = (int)i;
  r->n = (size_t)(RIG_DIMS[0] * RIG_DIMS[1]);
  r->x = malloc(r->n * sizeof(float));
  r->out = malloc((r->n + 1) * sizeof(float));
  r->want = malloc(r->n * sizeof(float));
  weft_tensor_create(r->f, 2, RIG_DIMS, NULL, &r->X);
  weft_tensor_create(r->f, 2, RIG_DIMS, NULL, &r->Y);
  weft_op_desc d = {WEFT_CONTRACT_EXACT, r->lane};
  for (int round = 0; round < rounds; round++) {
    fill(r->x, r->n, 500 + (uint64_t)round);
    if (weft_tensor_write(r->X, r->x, r->n) != WEFT_OK || weft_op_scale(r->f, &d, 2.0f, r->X, r->Y) != WEFT_OK ||
        weft_tensor_read(r->Y, r->out + 1, r->n) != WEFT_OK)
      return TU_CHECK(0, "rig round %d: %s", round, weft_fabric_last_error(r->f)), 0;
  }
  return 1;
}

static int rig_open(rig *r, int rounds) { return rig_open_vt(r, rounds, &FAKE_VT); }

static void rig_close(rig *r) {
  weft_fabric_close(r->f);
  free(r->x), free(r->out), free(r->want);
}

/* Y read back (into out + 1) holds 2x. */
static int y_is_2x(rig *r) {
  for (size_t i = 0; i < r->n; i++) r->want[i] = 2.0f * r->x[i];
  return weft_tensor_read(r->Y, r->out + 1, r->n) == WEFT_OK && same(r->out + 1, r->want, r->n);
}

static int lane_down(weft_fabric *f, int lane) {
  weft_lane_info li;
  return weft_fabric_lane_info(f, (size_t)lane, &li) == WEFT_OK && li.failed;
}

static void test_pieces(void) {
  rig r;
  if (!rig_open(&r, 2)) return rig_close(&r);
  weft_op_desc d = {WEFT_CONTRACT_EXACT, r.lane};
  TU_CHECK(r.k->registers == 2, "both tensors registered after crossing twice (%d)", r.k->registers);
  /* steady state: the write goes on to the lane in pieces, the op uploads nothing more */
  fill(r.x, r.n, 601);
  int up0 = r.k->uploads;
  TU_STATUS(weft_tensor_write(r.X, r.x, r.n), WEFT_OK, "write");
  TU_CHECK(r.k->uploads - up0 == RIG_PIECES, "the write went on to the lane in %d pieces (%d uploads)", RIG_PIECES,
           r.k->uploads - up0);
  TU_CHECK(strcmp(weft_tensor_location(r.X), "host,fake:0") == 0, "written value on the host and the lane: %s",
           weft_tensor_location(r.X));
  up0 = r.k->uploads;
  TU_STATUS(weft_op_scale(r.f, &d, 2.0f, r.X, r.Y), WEFT_OK, "scale");
  TU_CHECK(r.k->uploads == up0, "the op found its input in place (%d uploads)", r.k->uploads - up0);
  TU_CHECK(r.k->last_out_host != NULL, "the op was offered the result's registered host memory");
  int down0 = r.k->downloads;
  TU_CHECK(y_is_2x(&r), "2x read back through the pieces");
  TU_CHECK(r.k->downloads - down0 == RIG_PIECES, "the read came home in %d pieces (%d downloads)", RIG_PIECES,
           r.k->downloads - down0);
  TU_CHECK(strcmp(weft_tensor_location(r.Y), "host,fake:0") == 0, "the result is home: %s", weft_tensor_location(r.Y));
  down0 = r.k->downloads;
  TU_CHECK(y_is_2x(&r) && r.k->downloads == down0, "a second read is served by the host copy");
  /* a result that is not streaming home comes in one download */
  r.k->not_streaming = 1;
  fill(r.x, r.n, 602);
  TU_STATUS(weft_tensor_write(r.X, r.x, r.n), WEFT_OK, "write");
  TU_STATUS(weft_op_scale(r.f, &d, 2.0f, r.X, r.Y), WEFT_OK, "scale");
  down0 = r.k->downloads;
  TU_CHECK(y_is_2x(&r), "2x read back whole");
  TU_CHECK(r.k->downloads - down0 == 1, "not streaming: one download (%d)", r.k->downloads - down0);
  rig_close(&r);
}

/* A lane that registers nothing but streams its results home: reads come in pieces, writes do not go on. */
static void test_streaming(void) {
  rig r;
  if (!rig_open_vt(&r, 2, &STREAM_VT)) return rig_close(&r);
  weft_op_desc d = {WEFT_CONTRACT_EXACT, r.lane};
  fill(r.x, r.n, 651);
  int up0 = r.k->uploads;
  TU_STATUS(weft_tensor_write(r.X, r.x, r.n), WEFT_OK, "write");
  TU_CHECK(r.k->uploads == up0 && strcmp(weft_tensor_location(r.X), "host") == 0,
           "nothing registered: the write stays on the host (%s, %d uploads)", weft_tensor_location(r.X),
           r.k->uploads - up0);
  TU_STATUS(weft_op_scale(r.f, &d, 2.0f, r.X, r.Y), WEFT_OK, "scale");
  TU_CHECK(r.k->uploads - up0 == 1 && r.k->last_out_host == NULL, "the op uploaded its input whole, no host memory offered");
  int down0 = r.k->downloads;
  TU_CHECK(y_is_2x(&r), "2x read back through the pieces");
  TU_CHECK(r.k->downloads - down0 == RIG_PIECES, "the streamed result came home in %d pieces (%d downloads)",
           RIG_PIECES, r.k->downloads - down0);
  rig_close(&r);
}

/* A piece of a write refused: by the lane going down, or by a plain error. */
static void test_write_fails(weft_status how) {
  rig r;
  if (!rig_open(&r, 2)) return rig_close(&r);
  fill(r.x, r.n, 701);
  r.k->fail_upload = 3, r.k->fail_status = how;
  TU_STATUS(weft_tensor_write(r.X, r.x, r.n), WEFT_OK, "a write whose third piece the lane refuses");
  TU_CHECK(strcmp(weft_tensor_location(r.X), "host") == 0, "%s: the value is on the host only: %s",
           weft_status_str(how), weft_tensor_location(r.X));
  TU_CHECK(lane_down(r.f, r.lane) == (how == WEFT_ERR_LANE_FAILED), "%s: the lane is %s", weft_status_str(how),
           lane_down(r.f, r.lane) ? "down" : "up");
  TU_STATUS(weft_tensor_read(r.X, r.out + 1, r.n), WEFT_OK, "read the written tensor");
  TU_CHECK(same(r.out + 1, r.x, r.n), "%s: its host copy holds the whole write", weft_status_str(how));
  weft_op_desc d = {WEFT_CONTRACT_EXACT, how == WEFT_ERR_LANE_FAILED ? r.cpu : r.lane};
  int up0 = r.k->uploads;
  TU_STATUS(weft_op_scale(r.f, &d, 2.0f, r.X, r.Y), WEFT_OK, "scale");
  if (how != WEFT_ERR_LANE_FAILED)
    TU_CHECK(r.k->uploads - up0 == 1, "%s: the op uploaded the value the lane did not get whole (%d uploads)",
             weft_status_str(how), r.k->uploads - up0);
  TU_CHECK(y_is_2x(&r), "%s: the op used the new value", weft_status_str(how));
  rig_close(&r);
}

/* A piece of a streamed read refused. */
static void test_read_fails(weft_status how) {
  rig r;
  if (!rig_open(&r, 2)) return rig_close(&r);
  weft_op_desc d = {WEFT_CONTRACT_EXACT, r.lane};
  fill(r.x, r.n, 801);
  TU_STATUS(weft_tensor_write(r.X, r.x, r.n), WEFT_OK, "write");
  TU_STATUS(weft_op_scale(r.f, &d, 2.0f, r.X, r.Y), WEFT_OK, "scale");
  TU_CHECK(strcmp(weft_tensor_location(r.Y), "fake:0") == 0, "the result lives on the lane alone: %s",
           weft_tensor_location(r.Y));
  r.k->fail_download = 3, r.k->fail_status = how;
  for (size_t i = 0; i < r.n; i++) r.want[i] = 2.0f * r.x[i];
  weft_status st = weft_tensor_read(r.Y, r.out + 1, r.n);
  if (how == WEFT_ERR_LANE_FAILED) {
    /* the value went down with the lane: computed again on the CPU from X, whole */
    TU_CHECK(st == WEFT_OK && same(r.out + 1, r.want, r.n), "%s: the read recomputed the value: %s",
             weft_status_str(how), weft_status_str(st));
    TU_CHECK(lane_down(r.f, r.lane), "the lane is down");
    rig_close(&r);
    /* an in-place op's result: its read does not land in pieces over the value the op started from, so a
     * failure leaves that value whole and the op is replayed from it */
    for (int at = 1; at <= 3; at += 2) {
      if (!rig_open(&r, 2)) return rig_close(&r);
      d.lane = r.lane;
      TU_STATUS(weft_op_scale(r.f, &d, 2.0f, r.Y, r.Y), WEFT_OK, "scale in place");
      r.k->fail_download = at, r.k->fail_status = how;
      for (size_t i = 0; i < r.n; i++) r.want[i] = 4.0f * r.x[i];
      st = weft_tensor_read(r.Y, r.out + 1, r.n);
      TU_CHECK(st == WEFT_OK && same(r.out + 1, r.want, r.n), "in place, %s at download %d: 2 * 2x read: %s",
               weft_status_str(how), at, weft_status_str(st));
      if (at < 3) rig_close(&r);
    }
  } else {
    TU_STATUS(st, how, "a read whose third piece fails reports the failure");
    TU_CHECK(strstr(weft_tensor_location(r.Y), "fake:0") != NULL, "the value is still on the lane: %s",
             weft_tensor_location(r.Y));
    TU_CHECK(y_is_2x(&r), "read again: the whole value");
  }
  rig_close(&r);
}

int main(void) {
  double start = tu_now();
  setenv("WEFT_COPY_THREADS", "4", 1); /* the threads run even where the machine has two cores */
  test_copier();
  test_lanes();
  test_pieces();
  test_streaming();
  test_write_fails(WEFT_ERR_LANE_FAILED);
  test_write_fails(WEFT_ERR_OUT_OF_MEMORY);
  test_read_fails(WEFT_ERR_LANE_FAILED);
  test_read_fails(WEFT_ERR_INTERNAL);
  return tu_finish("hostpath", start);
}
