/* test_recover.c - lanes that go down and come back. A fake device lane holds results the host has not
 * seen; when it goes down, each value that lived only there is computed again on the CPU from the op that
 * made it (a chain, an in-place axpy, and before an input is overwritten), a value whose inputs have moved
 * on says so rather than inventing one, the lane's buffers are released, and a lane with a revive slot
 * comes back with backoff or at once on weft_fabric_revive. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft.h"

/* A fake device: malloc'd buffers behind a device interface, the reference kernels. `down` makes every
 * call but buffer_free report a lost device, as a dead GPU or worker would; `ready` is what revive says. */
typedef struct fake {
  char name[32];
  int down, ready, revives;
  int live_buffers;
  uint32_t flags;
} fake;

static void fk_describe(void *self, weft_lane_desc *out) {
  fake *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name, out->kind = "fake", out->device = "fake device", out->driver = "", out->details = "";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32);
  out->flags = l->flags;
}
static void fk_destroy(void *self) { free(self); }
static weft_status fk_alloc(void *self, size_t bytes, weft_buffer **out) {
  fake *l = self;
  if (l->down) return WEFT_ERR_LANE_FAILED;
  *out = calloc(1, bytes);
  l->live_buffers += *out != NULL;
  return *out ? WEFT_OK : WEFT_ERR_OUT_OF_MEMORY;
}
static void fk_free(void *self, weft_buffer *b) {
  fake *l = self;
  l->live_buffers--;
  free(b);
}
static weft_status fk_up(void *self, weft_buffer *b, size_t off, const void *src, size_t n) {
  fake *l = self;
  if (l->down) return WEFT_ERR_LANE_FAILED;
  memcpy((char *)b + off, src, n);
  return WEFT_OK;
}
static weft_status fk_down(void *self, weft_buffer *b, size_t off, void *dst, size_t n) {
  fake *l = self;
  if (l->down) return WEFT_ERR_LANE_FAILED;
  memcpy(dst, (char *)b + off, n);
  return WEFT_OK;
}
static weft_status fk_run(void *self, const weft_op *op) {
  fake *l = self;
  if (l->down) return WEFT_ERR_LANE_FAILED;
  weft_reference_run(op);
  return WEFT_OK;
}
static weft_status fk_sync(void *self) {
  fake *l = self;
  return l->down ? WEFT_ERR_LANE_FAILED : WEFT_OK;
}
static weft_status fk_revive(void *self) {
  fake *l = self;
  l->revives++;
  if (!l->ready) return WEFT_ERR_LANE_FAILED;
  l->down = 0;
  return WEFT_OK;
}
static const weft_lane_vtable FAKE_VT = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
    .destroy = fk_destroy, .buffer_alloc = fk_alloc, .buffer_free = fk_free, .upload = fk_up,
    .download = fk_down, .run = fk_run, .sync = fk_sync, .revive = fk_revive,
};

static double fake_now;
static double fake_clock(void *ctx) {
  (void)ctx;
  return fake_now;
}

/* A fabric of the CPU lane and one fake lane; *lane is the fake's index. */
static weft_fabric *open_with_fake(uint32_t flags, fake **out_fake, int *lane) {
  weft_fabric *f = NULL;
  if (tu_open("cpu", &f) != WEFT_OK) return NULL;
  weft_testing_set_clock(f, fake_clock, NULL);
  fake *k = calloc(1, sizeof *k);
  snprintf(k->name, sizeof k->name, "fake:0");
  k->flags = flags;
  if (weft_testing_add_lane(f, &FAKE_VT, k) != WEFT_OK) return weft_fabric_close(f), NULL;
  size_t i;
  weft_fabric_lane_find(f, "fake:0", &i);
  *lane = (int)i;
  *out_fake = k;
  return f;
}

static weft_tensor *mat(weft_fabric *f, int rows, int cols, uint64_t seed, float *keep) {
  tu_rng r = {seed};
  float *v = malloc(sizeof(float) * (size_t)(rows * cols));
  for (int i = 0; i < rows * cols; i++) v[i] = tu_rng_float(&r, -1.0f, 1.0f);
  if (keep) memcpy(keep, v, sizeof(float) * (size_t)(rows * cols));
  int64_t d[2] = {rows, cols};
  weft_tensor *t = NULL;
  weft_tensor_create(f, 2, d, v, &t);
  free(v);
  return t;
}

static int lane_down(weft_fabric *f, int lane) {
  weft_lane_info li;
  weft_fabric_lane_info(f, (size_t)lane, &li);
  return li.failed;
}

enum { M = 13, K = 17, N = 11 };

int main(void) {
  double start = tu_now();
  fake *k;
  int lane;
  float a0[M * K], b0[K * N], want[M * N], got[M * N];

  /* 1. A chain that lived on the lane: c = a.b, d = relu(c). Both come back from their recipes. */
  weft_fabric *f = open_with_fake(0, &k, &lane);
  TU_CHECK(f != NULL, "open: %s", weft_open_error());
  if (!f) return tu_finish("recover", start);
  weft_op_desc on_fake = {WEFT_CONTRACT_EXACT, lane};
  weft_tensor *a = mat(f, M, K, 1, a0), *b = mat(f, K, N, 2, b0), *c = mat(f, M, N, 3, NULL), *d = mat(f, M, N, 4, NULL);
  TU_STATUS(weft_op_matmul(f, &on_fake, a, 0, b, 0, c), WEFT_OK, "matmul on the fake lane");
  TU_STATUS(weft_op_relu(f, &on_fake, c, d), WEFT_OK, "relu on the fake lane");
  TU_CHECK(strcmp(weft_tensor_location(d), "fake:0") == 0, "d lives only on the lane: %s", weft_tensor_location(d));
  k->down = 1;
  TU_STATUS(weft_fabric_sync(f), WEFT_ERR_LANE_FAILED, "sync finds the lane gone");
  TU_CHECK(lane_down(f, lane), "the lane is down");
  TU_CHECK(k->live_buffers == 0, "its buffers were released: %d left", k->live_buffers);
  TU_STATUS(weft_tensor_read(d, got, M * N), WEFT_OK, "reading d computes it again");
  weft_op r = {0};
  r.kind = WEFT_OP_MATMUL, r.batch = 1, r.m = M, r.n = N, r.k = K, r.in[0] = a0, r.in[1] = b0, r.out[0] = want;
  weft_reference_run(&r);
  for (int i = 0; i < M * N; i++) want[i] = want[i] > 0.0f ? want[i] : 0.0f;
  TU_CHECK(memcmp(got, want, sizeof got) == 0, "the recomputed chain has the reference's bits");
  weft_lane_stats cs;
  weft_fabric_lane_stats(f, 0, &cs);
  TU_CHECK(cs.recovered == 2, "the CPU ran both ops again: %llu", (unsigned long long)cs.recovered);
  TU_STATUS(weft_op_relu(f, &on_fake, c, d), WEFT_ERR_LANE_FAILED, "an op pinned to the down lane");

  /* 2. The lane comes back: not before its backoff, at once when asked. */
  k->ready = 1;
  int asked = k->revives;
  TU_STATUS(weft_op_relu(f, NULL, c, d), WEFT_OK, "a routed op before the backoff has passed");
  TU_CHECK(k->revives == asked, "the lane is not asked before its time (%d asks)", k->revives - asked);
  fake_now += 1.0;
  TU_STATUS(weft_op_relu(f, NULL, c, d), WEFT_OK, "a routed op after it");
  TU_CHECK(k->revives == asked + 1 && !lane_down(f, lane), "the lane was asked once and is back");
  TU_STATUS(weft_op_relu(f, &on_fake, c, d), WEFT_OK, "ops run on it again");
  TU_STATUS(weft_tensor_read(d, got, M * N), WEFT_OK, "and its results come home");
  TU_CHECK(memcmp(got, want, sizeof got) == 0, "with the reference's bits");

  /* 3. An in-place axpy on the lane: replayed from the value the host memory still holds. */
  float x0[M * N], y0[M * N];
  weft_tensor *x = mat(f, M, N, 5, x0), *y = mat(f, M, N, 6, y0);
  TU_STATUS(weft_op_axpy(f, &on_fake, 0.5f, x, y), WEFT_OK, "axpy on the lane");
  k->down = 1;
  TU_STATUS(weft_tensor_read(y, got, M * N), WEFT_OK, "reading y after the lane went down under the read");
  int same = 1;
  for (int i = 0; i < M * N; i++) same &= tu_same_bits(got[i], y0[i] + 0.5f * x0[i]);
  TU_CHECK(same, "y = y0 + 0.5 x, computed again from y0");

  /* 4. The lane goes down, then an input is about to be overwritten: the lost value is computed first. */
  k->down = 0, k->ready = 1;
  size_t up;
  weft_fabric_revive(f, &up);
  TU_CHECK(up == 2 && !lane_down(f, lane), "weft_fabric_revive brings it back at once (%zu up)", up);
  TU_STATUS(weft_op_matmul(f, &on_fake, a, 0, b, 0, c), WEFT_OK, "matmul on the lane");
  k->down = 1, k->ready = 0;
  weft_fabric_sync(f);
  float a1[M * K];
  for (int i = 0; i < M * K; i++) a1[i] = 2.0f * a0[i];
  TU_STATUS(weft_tensor_write(a, a1, M * K), WEFT_OK, "overwrite an input of the lost value");
  TU_STATUS(weft_tensor_read(c, got, M * N), WEFT_OK, "the lost value still reads");
  r.in[0] = a0, r.out[0] = want;
  weft_reference_run(&r);
  TU_CHECK(memcmp(got, want, sizeof got) == 0, "computed from the input as it was, not as it is now");

  /* 5. A value whose input moved on while the lane still looked healthy cannot be made again: it says so. */
  k->down = 0, k->ready = 1;
  weft_fabric_revive(f, NULL);
  TU_STATUS(weft_op_matmul(f, &on_fake, a, 0, b, 0, c), WEFT_OK, "matmul on the lane");
  TU_STATUS(weft_tensor_write(b, b0, K * N), WEFT_OK, "b is written again (same values, a new version)");
  k->down = 1, k->ready = 0;
  weft_status st = weft_tensor_read(c, got, M * N);
  TU_STATUS(st, WEFT_ERR_LANE_FAILED, "reading a value that cannot be computed again");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "overwritten since"), "the message says why: %s",
           weft_fabric_last_error(f));
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "it was on lane fake:0, which is down"),
           "and names the lane it went down with: %s", weft_fabric_last_error(f));
  TU_STATUS(weft_tensor_read(c, got, M * N), WEFT_ERR_LANE_FAILED, "reading it again");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "it was on lane fake:0"), "names the lane again: %s",
           weft_fabric_last_error(f));
  TU_STATUS(weft_op_relu(f, NULL, a, a), WEFT_OK, "the fabric goes on");
  weft_fabric_close(f);

  /* 6. A lane that starts down (a browser slot waiting for its tab) is not routed until it comes up. */
  f = open_with_fake(WEFT_LANE_STARTS_DOWN, &k, &lane);
  TU_CHECK(f != NULL, "open with a waiting lane");
  if (!f) return tu_finish("recover", start);
  weft_lane_info li;
  weft_fabric_lane_info(f, (size_t)lane, &li);
  TU_CHECK(li.failed && li.revivable, "listed down and revivable (failed %d, revivable %d)", li.failed, li.revivable);
  on_fake.lane = lane;
  a = mat(f, M, K, 1, NULL), b = mat(f, K, N, 2, NULL), c = mat(f, M, N, 3, NULL);
  TU_STATUS(weft_op_matmul(f, &on_fake, a, 0, b, 0, c), WEFT_ERR_LANE_FAILED, "pinned to the waiting lane");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "down"), "the message says it is down: %s", weft_fabric_last_error(f));
  weft_fabric_revive(f, &up);
  TU_CHECK(up == 1, "still waiting: %zu up", up);
  k->ready = 1;
  weft_fabric_revive(f, &up);
  TU_CHECK(up == 2, "its device attached: %zu up", up);
  TU_STATUS(weft_op_matmul(f, &on_fake, a, 0, b, 0, c), WEFT_OK, "ops run on it");
  weft_fabric_close(f);
  return tu_finish("recover", start);
}
