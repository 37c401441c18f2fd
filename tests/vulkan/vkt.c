/* vkt.c - the Vulkan tests' shared helpers (see vkt.h). */
#include "vkt.h"

#include <stdlib.h>
#include <string.h>

#include "core/reference.h"

int vkt_open(const weft_fabric_desc *desc, weft_fabric **out_fabric, int *out_lane) {
  weft_fabric_desc d = desc ? *desc : tu_desc();
  if (!d.lanes) d.lanes = "cpu,vulkan";
  weft_fabric *f = NULL;
  weft_status st = weft_fabric_open(&d, &f);
  TU_STATUS(st, WEFT_OK, "weft_fabric_open");
  if (st != WEFT_OK) {
    printf("open failed: %s\n", weft_open_error());
    return 0;
  }
  size_t idx;
  if (weft_fabric_lane_find(f, "vulkan:0", &idx) != WEFT_OK) {
    const char *name, *reason;
    char why[1024] = "no Vulkan lane here";
    for (size_t i = 0; i < weft_fabric_absent_count(f); i++)
      if (weft_fabric_absent_info(f, i, &name, &reason) == WEFT_OK && strncmp(name, "vulkan", 6) == 0) {
        size_t used = strlen(why);
        snprintf(why + used, sizeof why - used, "; %s: %s", name, reason);
      }
    tu_skip("%s", why); /* the test then exits 77: CTest reports it Skipped, not Passed */
    weft_fabric_close(f);
    return 0;
  }
  *out_fabric = f;
  *out_lane = (int)idx;
  return 1;
}

void vkt_fill(tu_rng *r, float *x, size_t n, int specials) {
  static const uint32_t SPECIAL[] = {
      0x7fc00000u, /* NaN */
      0x7f800000u, /* +inf */
      0xff800000u, /* -inf */
      0x80000000u, /* -0 */
      0x00000001u, /* smallest subnormal */
      0x807fffffu, /* largest negative subnormal */
      0x00400000u, /* a subnormal */
      0x7f7fffffu, /* FLT_MAX */
      0x1f800000u, /* 2^-64: products underflow into subnormals */
  };
  for (size_t i = 0; i < n; i++) {
    x[i] = tu_rng_float(r, -1.0f, 1.0f);
    if (specials && tu_rng_int(r, 0, 15) == 0)
      x[i] = tu_float(SPECIAL[tu_rng_int(r, 0, (int64_t)(sizeof SPECIAL / sizeof SPECIAL[0]) - 1)]);
  }
}

void vkt_fill_bits(tu_rng *r, float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t sign = (uint32_t)tu_rng_int(r, 0, 1) << 31, mant = (uint32_t)tu_rng_int(r, 0, 0x7fffff), ex;
    int64_t pick = tu_rng_int(r, 0, 99);
    if (pick < 30) ex = 0;                                      /* subnormal (or zero) */
    else if (pick < 70) ex = (uint32_t)tu_rng_int(r, 1, 40);     /* tiny normals */
    else if (pick < 85) ex = (uint32_t)tu_rng_int(r, 60, 140);   /* ordinary */
    else if (pick < 98) ex = (uint32_t)tu_rng_int(r, 200, 254); /* large */
    else ex = 255;                                               /* infinities and NaN */
    if (pick % 7 == 0) mant = pick % 2 ? 0 : 0x7fffff;           /* powers of two and all-ones mantissas */
    x[i] = tu_float(sign | ex << 23 | mant);
  }
}

void vkt_same(const char *what, const float *got, const float *want, size_t n) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!tu_same_bits(got[i], want[i]) && bad++ == 0) first = i;
  TU_CHECK(bad == 0, "%s: %zu of %zu elements differ; first [%zu] got 0x%08x (%g) want 0x%08x (%g)", what, bad, n,
           first, bad ? tu_bits(got[first]) : 0, bad ? (double)got[first] : 0.0, bad ? tu_bits(want[first]) : 0,
           bad ? (double)want[first] : 0.0);
}

static weft_tensor *make(weft_fabric *f, int ndim, const int64_t *dims, const float *data) {
  weft_tensor *t = NULL;
  weft_status st = weft_tensor_create(f, ndim, dims, data, &t);
  TU_STATUS(st, WEFT_OK, "weft_tensor_create");
  return t;
}

static float *alloc_floats(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

void vkt_matmul(weft_fabric *f, int lane, tu_rng *r, int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb,
                int b_batched, int specials) {
  size_t na = (size_t)(batch * m * k), nb = (size_t)((b_batched ? batch : 1) * k * n), nc = (size_t)(batch * m * n);
  float *a = alloc_floats(na), *b = alloc_floats(nb), *c = alloc_floats(nc), *want = alloc_floats(nc);
  vkt_fill(r, a, na, specials);
  vkt_fill(r, b, nb, specials);
  int64_t da[3] = {batch, ta ? k : m, ta ? m : k}, db[3] = {batch, tb ? n : k, tb ? k : n}, dc[3] = {batch, m, n};
  weft_tensor *A = make(f, 3, da, a), *B = b_batched ? make(f, 3, db, b) : make(f, 2, db + 1, b), *C = make(f, 3, dc, NULL);
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = lane;
  char what[160];
  snprintf(what, sizeof what, "matmul batch %lld m %lld n %lld k %lld%s%s%s%s", (long long)batch, (long long)m,
           (long long)n, (long long)k, ta ? " a^T" : "", tb ? " b^T" : "", b_batched ? " batched b" : "",
           specials ? " with special values" : "");
  weft_status st = weft_op_matmul(f, &od, A, ta, B, tb, C);
  TU_CHECK(st == WEFT_OK, "%s: %s (%s)", what, weft_status_str(st), weft_fabric_last_error(f));
  if (st == WEFT_OK) {
    TU_STATUS(weft_tensor_read(C, c, nc), WEFT_OK, "read c");
    weft_op op;
    memset(&op, 0, sizeof op);
    op.kind = WEFT_OP_MATMUL;
    op.in[0] = a, op.in[1] = b, op.out[0] = want;
    op.batch = batch, op.m = m, op.n = n, op.k = k, op.trans_a = ta, op.trans_b = tb, op.b_batched = b_batched;
    weft_reference_run(&op);
    vkt_same(what, c, want, nc);
  }
  weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(C);
  free(a), free(b), free(c), free(want);
}

void vkt_elementwise(weft_fabric *f, int lane, tu_rng *r, weft_op_kind kind, int64_t rows, int64_t cols,
                     int y_broadcast, int specials) {
  size_t n = (size_t)(rows * cols), ny = y_broadcast ? (size_t)cols : n;
  float *x = alloc_floats(n), *y = alloc_floats(ny), *got = alloc_floats(n), *want = alloc_floats(n);
  vkt_fill(r, x, n, specials);
  vkt_fill(r, y, ny, specials);
  float alpha = tu_rng_float(r, -2.0f, 2.0f);
  int64_t dims[2] = {rows, cols};
  weft_tensor *X = make(f, 2, dims, x), *Y = y_broadcast ? make(f, 1, &cols, y) : make(f, 2, dims, y);
  weft_tensor *O = make(f, 2, dims, NULL);
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = lane;
  weft_status st = WEFT_ERR_INTERNAL;
  switch (kind) {
  case WEFT_OP_ADD: st = weft_op_add(f, &od, X, Y, O); break;
  case WEFT_OP_RELU: st = weft_op_relu(f, &od, X, O); break;
  case WEFT_OP_RELU_BACKWARD: st = weft_op_relu_backward(f, &od, X, Y, O); break;
  case WEFT_OP_SCALE: st = weft_op_scale(f, &od, alpha, X, O); break;
  case WEFT_OP_AXPY: st = weft_op_axpy(f, &od, alpha, X, Y); break;
  default: break;
  }
  char what[128];
  snprintf(what, sizeof what, "%s [%lld,%lld]%s%s", weft_op_kind_str(kind), (long long)rows, (long long)cols,
           y_broadcast ? " broadcast" : "", specials ? " with special values" : "");
  TU_CHECK(st == WEFT_OK, "%s: %s (%s)", what, weft_status_str(st), weft_fabric_last_error(f));
  if (st == WEFT_OK) {
    weft_tensor *res = kind == WEFT_OP_AXPY ? Y : O;
    TU_STATUS(weft_tensor_read(res, got, n), WEFT_OK, "read result");
    weft_op op;
    memset(&op, 0, sizeof op);
    op.kind = kind;
    op.rows = rows, op.cols = cols, op.y_broadcast = y_broadcast, op.alpha = alpha;
    op.in[0] = x, op.in[1] = y, op.out[0] = want;
    if (kind == WEFT_OP_AXPY) memcpy(want, y, n * sizeof(float));
    weft_reference_run(&op);
    vkt_same(what, got, want, n);
  }
  weft_tensor_destroy(X), weft_tensor_destroy(Y), weft_tensor_destroy(O);
  free(x), free(y), free(got), free(want);
}

void vkt_sum_rows(weft_fabric *f, int lane, tu_rng *r, int64_t rows, int64_t cols, int specials) {
  size_t n = (size_t)(rows * cols);
  float *x = alloc_floats(n), *got = alloc_floats((size_t)cols), *want = alloc_floats((size_t)cols);
  vkt_fill(r, x, n, specials);
  int64_t dims[2] = {rows, cols};
  weft_tensor *X = make(f, 2, dims, x), *O = make(f, 1, &cols, NULL);
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = lane;
  char what[96];
  snprintf(what, sizeof what, "sum_rows [%lld,%lld]%s", (long long)rows, (long long)cols, specials ? " with special values" : "");
  weft_status st = weft_op_sum_rows(f, &od, X, O);
  TU_CHECK(st == WEFT_OK, "%s: %s (%s)", what, weft_status_str(st), weft_fabric_last_error(f));
  if (st == WEFT_OK) {
    TU_STATUS(weft_tensor_read(O, got, (size_t)cols), WEFT_OK, "read sums");
    weft_op op;
    memset(&op, 0, sizeof op);
    op.kind = WEFT_OP_SUM_ROWS, op.rows = rows, op.cols = cols, op.in[0] = x, op.out[0] = want;
    weft_reference_run(&op);
    vkt_same(what, got, want, (size_t)cols);
  }
  weft_tensor_destroy(X), weft_tensor_destroy(O);
  free(x), free(got), free(want);
}

void vkt_softmax(weft_fabric *f, int lane, tu_rng *r, int64_t rows, int64_t cols, float spread, int want_loss,
                 int want_grad) {
  size_t n = (size_t)(rows * cols);
  float *z = alloc_floats(n), *t = alloc_floats(n), *g = alloc_floats(n), *wg = alloc_floats(n), loss = 0, wl = 0;
  for (size_t i = 0; i < n; i++) z[i] = tu_rng_float(r, -spread, spread);
  for (int64_t i = 0; i < rows; i++) { /* soft targets on some rows, one-hot on others */
    int onehot = (int)tu_rng_int(r, 0, 1);
    int64_t hot = tu_rng_int(r, 0, cols - 1);
    for (int64_t j = 0; j < cols; j++)
      t[i * cols + j] = onehot ? (j == hot ? 1.0f : 0.0f) : tu_rng_float(r, 0.0f, 2.0f / (float)cols);
  }
  int64_t dims[2] = {rows, cols}, one = 1;
  weft_tensor *Z = make(f, 2, dims, z), *T = make(f, 2, dims, t);
  weft_tensor *L = want_loss ? make(f, 1, &one, NULL) : NULL, *G = want_grad ? make(f, 2, dims, NULL) : NULL;
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = lane;
  char what[128];
  snprintf(what, sizeof what, "softmax_xent [%lld,%lld] spread %g%s%s", (long long)rows, (long long)cols,
           (double)spread, want_loss ? " loss" : "", want_grad ? " grad" : "");
  weft_status st = weft_op_softmax_xent(f, &od, Z, T, L, G);
  TU_CHECK(st == WEFT_OK, "%s: %s (%s)", what, weft_status_str(st), weft_fabric_last_error(f));
  if (st == WEFT_OK) {
    weft_op op;
    memset(&op, 0, sizeof op);
    op.kind = WEFT_OP_SOFTMAX_XENT, op.rows = rows, op.cols = cols, op.inv_rows = 1.0f / (float)rows;
    op.in[0] = z, op.in[1] = t, op.out[0] = &wl, op.out[1] = wg;
    weft_reference_run(&op);
    char w2[160];
    if (L) {
      TU_STATUS(weft_tensor_read(L, &loss, 1), WEFT_OK, "read loss");
      snprintf(w2, sizeof w2, "%s: loss", what);
      vkt_same(w2, &loss, &wl, 1);
    }
    if (G) {
      TU_STATUS(weft_tensor_read(G, g, n), WEFT_OK, "read grad");
      snprintf(w2, sizeof w2, "%s: grad", what);
      vkt_same(w2, g, wg, n);
    }
  }
  weft_tensor_destroy(Z), weft_tensor_destroy(T), weft_tensor_destroy(L), weft_tensor_destroy(G);
  free(z), free(t), free(g), free(wg);
}
