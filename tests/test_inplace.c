/* test_inplace.c - in-place ops and aliasing, on every lane the fabric has (WEFT_TEST_LANES filters them;
 * under tests/net/with_worker.sh the remote lanes of a real worker, whose lanes WEFT_WORKER_LANES names).
 *
 * The semantics (include/weft.h, "In-place ops"): an elementwise op (add, relu, relu_backward, scale)
 * may name one of its inputs as its output - the same tensor - and gives the bits of the same op out of
 * place; axpy is in place by definition. matmul, sum_rows and softmax_xent refuse an output that is an
 * input. Different tensors over overlapping memory (two weft_tensor_wrap of one buffer, or of overlapping
 * parts of it) as an input and an output, or as two outputs, are refused with WEFT_ERR_INVALID_ARGUMENT,
 * and nothing changes. A fake device lane (memory behind a device-style interface) is added so a device
 * path is tested even where no GPU is. */
#include <stdlib.h>
#include <string.h>

#include "core/reference.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft.h"

#define R 37
#define C 29
#define N (R * C)

static void fk_describe(void *self, weft_lane_desc *out) {
  (void)self;
  memset(out, 0, sizeof *out);
  out->name = "fake-device";
  out->kind = "fake";
  out->device = "fake device";
  out->driver = "";
  out->details = "device-style memory, reference kernels";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32);
}
static void fk_destroy(void *self) { (void)self; }
static weft_status fk_run(void *self, const weft_op *op) {
  (void)self;
  weft_reference_run(op);
  return WEFT_OK;
}

static void fill(float *x, size_t n, tu_rng *rng) {
  for (size_t i = 0; i < n; i++) x[i] = tu_rng_float(rng, -4.0f, 4.0f);
  x[3] = 0.0f, x[5] = -0.0f; /* relu and relu_backward at zero */
}

static int same(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!tu_same_bits(a[i], b[i])) return 0;
  return 1;
}

typedef enum { IP_ADD_X, IP_ADD_Y, IP_ADD_BCAST_X, IP_RELU, IP_RB_GRAD, IP_RB_X, IP_SCALE, IP_COUNT } ip_case;
static const char *const IP_NAMES[IP_COUNT] = {"add out=x", "add out=y", "add (bias) out=x", "relu out=x",
                                               "relu_backward out=grad", "relu_backward out=x", "scale out=x"};

/* Runs case `c` on lane `lane`: out of place into a fresh tensor, then in place; both must agree bitwise,
 * and the in-place tensor must hold the result whether read at once or after another op. */
static void check_case(weft_fabric *f, int lane, const char *lname, ip_case c, const float *x0, const float *y0,
                       int big) {
  weft_op_desc d = WEFT_OP_DESC_INIT;
  d.lane = lane;
  const int64_t rows = big ? 512 : R, cols = big ? 1024 : C;
  const size_t n = (size_t)(rows * cols);
  int64_t dims[2] = {rows, cols}, row[1] = {cols};
  weft_tensor *x = NULL, *y = NULL, *o = NULL, *ix = NULL, *iy = NULL;
  const int bcast = c == IP_ADD_BCAST_X;
  tu_check_at(weft_tensor_create(f, 2, dims, x0, &x) == WEFT_OK, __FILE__, __LINE__, "create x");
  tu_check_at(weft_tensor_create(f, bcast ? 1 : 2, bcast ? row : dims, y0, &y) == WEFT_OK, __FILE__, __LINE__, "create y");
  tu_check_at(weft_tensor_create(f, 2, dims, NULL, &o) == WEFT_OK, __FILE__, __LINE__, "create out");
  tu_check_at(weft_tensor_create(f, 2, dims, x0, &ix) == WEFT_OK, __FILE__, __LINE__, "create in-place x");
  tu_check_at(weft_tensor_create(f, bcast ? 1 : 2, bcast ? row : dims, y0, &iy) == WEFT_OK, __FILE__, __LINE__,
              "create in-place y");
  weft_status s1 = WEFT_ERR_INTERNAL, s2 = WEFT_ERR_INTERNAL;
  weft_tensor *target = ix; /* the tensor the in-place op overwrites */
  switch (c) {
  case IP_ADD_X:
  case IP_ADD_BCAST_X:
    s1 = weft_op_add(f, &d, x, y, o);
    s2 = weft_op_add(f, &d, ix, iy, ix);
    break;
  case IP_ADD_Y:
    s1 = weft_op_add(f, &d, x, y, o);
    s2 = weft_op_add(f, &d, ix, iy, iy), target = iy;
    break;
  case IP_RELU:
    s1 = weft_op_relu(f, &d, x, o);
    s2 = weft_op_relu(f, &d, ix, ix);
    break;
  case IP_RB_GRAD: /* grad = x0, relu input = y0 */
    s1 = weft_op_relu_backward(f, &d, x, y, o);
    s2 = weft_op_relu_backward(f, &d, ix, iy, ix);
    break;
  case IP_RB_X:
    s1 = weft_op_relu_backward(f, &d, x, y, o);
    s2 = weft_op_relu_backward(f, &d, ix, iy, iy), target = iy;
    break;
  case IP_SCALE:
    s1 = weft_op_scale(f, &d, -1.75f, x, o);
    s2 = weft_op_scale(f, &d, -1.75f, ix, ix);
    break;
  case IP_COUNT: break;
  }
  float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
  tu_check_at(s1 == WEFT_OK && s2 == WEFT_OK, __FILE__, __LINE__, "%s on %s%s: out of place %s, in place %s (%s)",
              IP_NAMES[c], lname, big ? " (large)" : "", weft_status_str(s1), weft_status_str(s2),
              weft_fabric_last_error(f));
  weft_status r1 = weft_tensor_read(o, want, n), r2 = weft_tensor_read(target, got, n);
  tu_check_at(r1 == WEFT_OK && r2 == WEFT_OK, __FILE__, __LINE__, "%s on %s: reads %s / %s", IP_NAMES[c], lname,
              weft_status_str(r1), weft_status_str(r2));
  tu_check_at(same(want, got, n), __FILE__, __LINE__, "%s on %s%s: the in-place result differs from the out-of-place one",
              IP_NAMES[c], lname, big ? " (large)" : "");
  /* and it changed something: the op's result is not the tensor's old value */
  const float *before = target == ix ? x0 : y0;
  tu_check_at(!same(before, got, bcast && target == iy ? (size_t)cols : n), __FILE__, __LINE__,
              "%s on %s: the in-place tensor is unchanged", IP_NAMES[c], lname);
  free(want), free(got);
  weft_tensor_destroy(x), weft_tensor_destroy(y), weft_tensor_destroy(o), weft_tensor_destroy(ix),
      weft_tensor_destroy(iy);
}

/* axpy is in place by definition: it must agree with the reference, read twice (after a sync too). */
static void check_axpy(weft_fabric *f, int lane, const char *lname, const float *x0, const float *y0) {
  weft_op_desc d = WEFT_OP_DESC_INIT;
  d.lane = lane;
  int64_t dims[2] = {R, C};
  weft_tensor *x = NULL, *y = NULL;
  weft_tensor_create(f, 2, dims, x0, &x);
  weft_tensor_create(f, 2, dims, y0, &y);
  float want[N], got[N];
  for (int i = 0; i < N; i++) {
    volatile float p = 0.5f * x0[i];
    want[i] = p + y0[i];
  }
  TU_STATUS(weft_op_axpy(f, &d, 0.5f, x, y), WEFT_OK, "axpy");
  TU_STATUS(weft_tensor_read(y, got, N), WEFT_OK, "read y");
  TU_CHECK(same(want, got, N), "axpy on %s: y is not alpha*x + y", lname);
  weft_tensor_destroy(x), weft_tensor_destroy(y);
}

/* The refused cases, on one lane: the error is the one documented, its message says why, and no tensor
 * changes. */
static void check_refused(weft_fabric *f, int lane, const char *lname, const float *x0) {
  weft_op_desc d = WEFT_OP_DESC_INIT;
  d.lane = lane;
  int64_t sq[2] = {C, C}, dims[2] = {R, C}, one[1] = {1};
  float *buf = malloc(2 * N * sizeof(float)), *keep = malloc(2 * N * sizeof(float)), got[N];
  memcpy(buf, x0, N * sizeof(float));
  memcpy(buf + N, x0, N * sizeof(float));
  memcpy(keep, buf, 2 * N * sizeof(float));
  weft_tensor *a = NULL, *w1 = NULL, *w2 = NULL, *w3 = NULL, *loss = NULL, *t = NULL;
  weft_tensor_create(f, 2, sq, x0, &a);
  weft_tensor_create(f, 1, one, NULL, &loss);
  weft_tensor_create(f, 2, dims, x0, &t);
  /* the same tensor as input and output, where the op does not allow it */
  weft_status st = weft_op_matmul(f, &d, a, 0, a, 0, a);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(f), "in-place"),
           "matmul c=a on %s: %s (%s)", lname, weft_status_str(st), weft_fabric_last_error(f));
  int64_t rowc[1] = {C};
  weft_tensor *r1 = NULL;
  weft_tensor_create(f, 1, rowc, x0, &r1);
  st = weft_op_sum_rows(f, &d, r1, r1);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(f), "must not be x"),
           "sum_rows out=x on %s: %s (%s)", lname, weft_status_str(st), weft_fabric_last_error(f));
  st = weft_op_softmax_xent(f, &d, t, t, loss, t);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(f), "must not be an input"),
           "softmax_xent grad=logits on %s: %s (%s)", lname, weft_status_str(st), weft_fabric_last_error(f));
  TU_STATUS(weft_tensor_read(a, got, C * C), WEFT_OK, "read a");
  TU_CHECK(same(got, x0, C * C), "a refused matmul changed a on %s", lname);
  TU_STATUS(weft_tensor_read(t, got, N), WEFT_OK, "read t");
  TU_CHECK(same(got, x0, N), "a refused softmax_xent changed its logits on %s", lname);

  /* two wraps of the same memory: different tensors over one buffer */
  weft_tensor_wrap(f, 2, dims, buf, &w1);
  weft_tensor_wrap(f, 2, dims, buf, &w2);
  st = weft_op_relu(f, &d, w1, w2);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(f), "overlapping memory"),
           "relu over two wraps of one buffer on %s: %s (%s)", lname, weft_status_str(st), weft_fabric_last_error(f));
  /* partly overlapping: a wrap one row further on */
  weft_tensor_wrap(f, 2, dims, buf + C, &w3);
  st = weft_op_scale(f, &d, 2.0f, w1, w3);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(f), "overlapping memory"),
           "scale into a partly overlapping wrap on %s: %s (%s)", lname, weft_status_str(st), weft_fabric_last_error(f));
  st = weft_op_add(f, &d, t, w3, w1);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(f), "out and y"),
           "add with out overlapping y on %s: %s (%s)", lname, weft_status_str(st), weft_fabric_last_error(f));
  st = weft_op_axpy(f, &d, 1.0f, w1, w3);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "axpy with x overlapping y on %s: %s", lname, weft_status_str(st));
  st = weft_op_relu_backward(f, &d, t, w1, w3);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "relu_backward with out overlapping x on %s: %s", lname,
           weft_status_str(st));
  weft_tensor *sqw = NULL, *sqw2 = NULL;
  weft_tensor_wrap(f, 2, sq, buf, &sqw);
  weft_tensor_wrap(f, 2, sq, buf + 3, &sqw2);
  st = weft_op_matmul(f, &d, sqw, 0, a, 0, sqw2);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(f), "c and a"),
           "matmul into memory overlapping a on %s: %s (%s)", lname, weft_status_str(st), weft_fabric_last_error(f));
  weft_tensor *g1 = NULL;
  weft_tensor_wrap(f, 1, one, buf + 7, &g1);
  st = weft_op_softmax_xent(f, &d, t, t, g1, w1);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && tu_contains(weft_fabric_last_error(f), "out_grad and out_loss"),
           "softmax_xent with the loss inside the grad on %s: %s (%s)", lname, weft_status_str(st),
           weft_fabric_last_error(f));
  TU_STATUS(weft_fabric_sync(f), WEFT_OK, "sync");
  TU_CHECK(memcmp(buf, keep, 2 * N * sizeof(float)) == 0, "a refused op changed the wrapped memory on %s", lname);
  /* reading two wraps of one buffer as inputs only is fine */
  weft_tensor *o = NULL;
  weft_tensor_create(f, 2, dims, NULL, &o);
  TU_STATUS(weft_op_add(f, &d, w1, w2, o), WEFT_OK, "add of two wraps of one buffer into a tensor of its own");
  weft_tensor_destroy(o);
  weft_tensor_destroy(a), weft_tensor_destroy(r1), weft_tensor_destroy(loss), weft_tensor_destroy(t);
  weft_tensor_destroy(w1), weft_tensor_destroy(w2), weft_tensor_destroy(w3), weft_tensor_destroy(sqw);
  weft_tensor_destroy(sqw2), weft_tensor_destroy(g1);
  free(buf), free(keep);
}

int main(void) {
  double start = tu_now();
  weft_fabric *f = NULL;
  const char *filter = getenv("WEFT_TEST_LANES");
  if (tu_open(filter, &f) != WEFT_OK) {
    printf("inplace: no fabric: %s\n", weft_open_error());
    return 1;
  }
  if (!filter || !*filter) {
    static const weft_lane_vtable vt = {
        .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
        .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc, .buffer_free = tu_fake_free,
        .upload = tu_fake_upload, .download = tu_fake_download, .run = fk_run};
    TU_STATUS(weft_testing_add_lane(f, &vt, NULL), WEFT_OK, "add the fake device lane");
  }
  tu_rng rng = {tu_seed()};
  float *x0 = malloc(512 * 1024 * sizeof(float)), *y0 = malloc(512 * 1024 * sizeof(float));
  fill(x0, 512 * 1024, &rng);
  fill(y0, 512 * 1024, &rng);
  size_t nl = weft_fabric_lane_count(f);
  int remote = 0;
  for (size_t l = 0; l < nl; l++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, l, &li);
    if (li.failed || !(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) continue;
    remote += strcmp(li.kind, "remote") == 0;
    printf("inplace: lane %s\n", li.name);
    for (int c = 0; c < IP_COUNT; c++) check_case(f, (int)l, li.name, (ip_case)c, x0, y0, 0);
    /* large enough that the CPU queues it and splits it over its threads */
    check_case(f, (int)l, li.name, IP_RELU, x0, y0, 1);
    check_case(f, (int)l, li.name, IP_ADD_Y, x0, y0, 1);
    check_axpy(f, (int)l, li.name, x0, y0);
    check_refused(f, (int)l, li.name, x0);
  }
  /* routed (no lane named): the same semantics */
  for (int c = 0; c < IP_COUNT; c++) check_case(f, WEFT_LANE_AUTO, "auto", (ip_case)c, x0, y0, 0);
  check_refused(f, WEFT_LANE_AUTO, "auto", x0);
  if (filter && strstr(filter, "remote")) TU_CHECK(remote > 0, "WEFT_TEST_LANES asks for remote lanes: none joined");
  free(x0), free(y0);
  weft_fabric_close(f);
  return tu_finish("inplace", start);
}
