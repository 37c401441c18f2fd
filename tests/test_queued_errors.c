/* test_queued_errors.c - the failure of an op that ran on the host lanes' queue (after the op call had
 * returned OK) belongs to that op and the tensors it writes:
 *   - weft_tensor_read of its output returns the failure, with the op's message, and copies nothing;
 *   - an op that reads that output fails the same way (at once, or - when it was queued behind the failed
 *     op - its own outputs carry the failure);
 *   - weft_fabric_sync reports a failure no read or op has reported yet, once;
 *   - an unrelated read, op or sync is not failed by it;
 *   - a later successful write of the tensor (weft_tensor_write, or an op) clears it.
 * The failure is injected by a fake host-memory lane whose scale with alpha = 13 fails after a short while;
 * its cost model is set so that its ops always go to the queue. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/reference.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft.h"

#define N 64

static void fh_describe(void *self, weft_lane_desc *out) {
  (void)self;
  memset(out, 0, sizeof *out);
  out->name = "fake-host";
  out->kind = "fake";
  out->device = "fake host lane";
  out->driver = "";
  out->details = "host memory, reference kernels, scale by 13 fails";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT);
  out->flags = WEFT_LANE_HOST_MEMORY;
}
static void fh_destroy(void *self) { (void)self; }
static weft_status fh_alloc(void *self, size_t bytes, weft_buffer **out) {
  (void)self, (void)bytes, (void)out;
  return WEFT_ERR_INTERNAL; /* host-memory lanes are never asked */
}
static void fh_free(void *self, weft_buffer *b) { (void)self, (void)b; }
static weft_status fh_copy(void *self, weft_buffer *b, size_t off, const void *p, size_t n) {
  (void)self, (void)b, (void)off, (void)p, (void)n;
  return WEFT_ERR_INTERNAL;
}
static weft_status fh_down(void *self, weft_buffer *b, size_t off, void *p, size_t n) {
  (void)self, (void)b, (void)off, (void)p, (void)n;
  return WEFT_ERR_INTERNAL;
}
static weft_status fh_run(void *self, const weft_op *op) {
  (void)self;
  struct timespec ts = {0, 5 * 1000 * 1000}; /* the caller has gone on by the time it fails */
  nanosleep(&ts, NULL);
  if (op->kind == WEFT_OP_SCALE && op->alpha == 13.0f) return WEFT_ERR_OUT_OF_MEMORY;
  weft_reference_run(op);
  return WEFT_OK;
}

static int all(const float *x, float v) {
  for (int i = 0; i < N; i++)
    if (x[i] != v) return 0;
  return 1;
}

int main(void) {
  double start = tu_now();
  weft_fabric *f = NULL;
  if (tu_open("cpu", &f) != WEFT_OK) {
    printf("queued_errors: no fabric: %s\n", weft_open_error());
    return 1;
  }
  static const weft_lane_vtable vt = {.abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable),
                                      .describe = fh_describe, .destroy = fh_destroy, .buffer_alloc = fh_alloc,
                                      .buffer_free = fh_free, .upload = fh_copy, .download = fh_down,
                                      .run = fh_run};
  TU_STATUS(weft_testing_add_lane(f, &vt, NULL), WEFT_OK, "add the fake host lane");
  size_t fake = 0, cpu = 0;
  TU_STATUS(weft_fabric_lane_find(f, "fake-host", &fake), WEFT_OK, "find fake-host");
  TU_STATUS(weft_fabric_lane_find(f, "cpu", &cpu), WEFT_OK, "find cpu");
  /* 10 ms per op predicted: over the queue's threshold, so every op on it is queued */
  TU_STATUS(weft_fabric_set_cost_model(f, fake, WEFT_COST_ELEMENTWISE, WEFT_CONTRACT_EXACT, 0.01, 1e9), WEFT_OK,
            "set the fake lane's model");
  weft_op_desc on_fake = WEFT_OP_DESC_INIT, on_cpu = WEFT_OP_DESC_INIT;
  on_fake.lane = (int)fake;
  on_cpu.lane = (int)cpu;
  int64_t dims[1] = {N};
  float ones[N], sevens[N], buf[N];
  for (int i = 0; i < N; i++) ones[i] = 1.0f, sevens[i] = 7.0f;
  weft_tensor *x = NULL, *out = NULL, *u = NULL, *uo = NULL, *z = NULL, *out2 = NULL, *out3 = NULL;
  weft_tensor_create(f, 1, dims, ones, &x);
  weft_tensor_create(f, 1, dims, sevens, &out);
  weft_tensor_create(f, 1, dims, ones, &u);
  weft_tensor_create(f, 1, dims, NULL, &uo);
  weft_tensor_create(f, 1, dims, sevens, &z);
  weft_tensor_create(f, 1, dims, NULL, &out2);
  weft_tensor_create(f, 1, dims, sevens, &out3);

  /* 1. the op is queued: its call succeeds */
  TU_STATUS(weft_op_scale(f, &on_fake, 13.0f, x, out), WEFT_OK, "the failing scale, queued");
  /* 2. unrelated work meanwhile is not failed by it: an op on the CPU (which waits for the queue first) and
   * the read of its result */
  TU_STATUS(weft_op_relu(f, &on_cpu, u, uo), WEFT_OK, "an unrelated relu on the CPU after the failed op");
  TU_STATUS(weft_tensor_read(uo, buf, N), WEFT_OK, "read of the unrelated relu's result");
  TU_CHECK(all(buf, 1.0f), "the unrelated relu's result is right");
  /* 3. the read of the failed op's output is the op's failure, and copies nothing */
  for (int i = 0; i < N; i++) buf[i] = -5.0f;
  weft_status st = weft_tensor_read(out, buf, N);
  TU_CHECK(st == WEFT_ERR_OUT_OF_MEMORY, "read of the failed scale's output: %s, want out of memory", weft_status_str(st));
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "scale") && tu_contains(weft_fabric_last_error(f), "fake-host"),
           "the read's message names the op and the lane: '%s'", weft_fabric_last_error(f));
  TU_CHECK(all(buf, -5.0f), "a failed read copied something");
  /* again: the tensor keeps the failure until it is written */
  TU_STATUS(weft_tensor_read(out, buf, N), WEFT_ERR_OUT_OF_MEMORY, "a second read of the failed output");
  /* 4. an op reading the failed tensor fails with it, and writes nothing */
  st = weft_op_relu(f, &on_cpu, out, z);
  TU_CHECK(st == WEFT_ERR_OUT_OF_MEMORY && tu_contains(weft_fabric_last_error(f), "scale"),
           "relu of the failed output: %s (%s)", weft_status_str(st), weft_fabric_last_error(f));
  TU_STATUS(weft_tensor_read(z, buf, N), WEFT_OK, "read of the relu's output");
  TU_CHECK(all(buf, 7.0f), "the failed relu wrote its output");
  /* 5. sync: the failure was reported (by the reads): an unrelated sync is clean */
  TU_STATUS(weft_fabric_sync(f), WEFT_OK, "a sync after the failure was reported");

  /* 6. a chain on the queue: the second op reads what the failed first was to make */
  TU_STATUS(weft_op_scale(f, &on_fake, 13.0f, x, out2), WEFT_OK, "the failing scale again, queued");
  TU_STATUS(weft_op_relu(f, &on_fake, out2, out3), WEFT_OK, "a relu of its output, queued behind it");
  st = weft_tensor_read(out3, buf, N);
  TU_CHECK(st == WEFT_ERR_OUT_OF_MEMORY && tu_contains(weft_fabric_last_error(f), "scale"),
           "the read of what was made from a failed value: %s (%s)", weft_status_str(st), weft_fabric_last_error(f));
  TU_STATUS(weft_tensor_read(out2, buf, N), WEFT_ERR_OUT_OF_MEMORY, "the failed scale's own output");
  TU_STATUS(weft_fabric_sync(f), WEFT_OK, "sync after both were reported");

  /* 7. a failure nobody read: the next sync reports it, once; its output still does */
  TU_STATUS(weft_op_scale(f, &on_fake, 13.0f, x, out2), WEFT_OK, "a third failing scale, queued");
  st = weft_fabric_sync(f);
  TU_CHECK(st == WEFT_ERR_OUT_OF_MEMORY && tu_contains(weft_fabric_last_error(f), "scale"),
           "sync reports the failure no read reported: %s (%s)", weft_status_str(st), weft_fabric_last_error(f));
  TU_STATUS(weft_fabric_sync(f), WEFT_OK, "the next sync does not report it again");
  TU_STATUS(weft_tensor_read(out2, buf, N), WEFT_ERR_OUT_OF_MEMORY, "its output still holds the failure");

  /* 8. a later successful write clears it: by the host, and by an op */
  TU_STATUS(weft_tensor_write(out, ones, N), WEFT_OK, "write the failed tensor");
  TU_STATUS(weft_tensor_read(out, buf, N), WEFT_OK, "read it after the write");
  TU_CHECK(all(buf, 1.0f), "the written value");
  TU_STATUS(weft_op_scale(f, &on_fake, 2.0f, x, out2), WEFT_OK, "a good scale into the failed tensor, queued");
  TU_STATUS(weft_tensor_read(out2, buf, N), WEFT_OK, "read it after the good op");
  TU_CHECK(all(buf, 2.0f), "the good op's value");
  /* a failing op followed, in the queue, by a good one writing the same tensor: the good one's value */
  TU_STATUS(weft_op_scale(f, &on_fake, 13.0f, x, out3), WEFT_OK, "failing scale into out3");
  TU_STATUS(weft_op_scale(f, &on_fake, 3.0f, x, out3), WEFT_OK, "good scale into out3 behind it");
  TU_STATUS(weft_tensor_read(out3, buf, N), WEFT_OK, "read out3: the later good write wins");
  TU_CHECK(all(buf, 3.0f), "out3 holds the good op's value");
  TU_STATUS(weft_fabric_sync(f), WEFT_ERR_OUT_OF_MEMORY, "the overwritten failure was never read: sync says it");
  TU_STATUS(weft_fabric_sync(f), WEFT_OK, "once");

  weft_tensor_destroy(x), weft_tensor_destroy(out), weft_tensor_destroy(u), weft_tensor_destroy(uo);
  weft_tensor_destroy(z), weft_tensor_destroy(out2), weft_tensor_destroy(out3);
  /* a failed op whose output is destroyed before anyone looked: nothing dangles */
  weft_tensor *t = NULL;
  weft_tensor_create(f, 1, dims, ones, &x);
  weft_tensor_create(f, 1, dims, NULL, &t);
  TU_STATUS(weft_op_scale(f, &on_fake, 13.0f, x, t), WEFT_OK, "failing scale, output destroyed unread");
  weft_tensor_destroy(t);
  TU_STATUS(weft_fabric_sync(f), WEFT_ERR_OUT_OF_MEMORY, "sync still reports it");
  weft_tensor_destroy(x);
  weft_fabric_close(f);
  return tu_finish("queued_errors", start);
}
