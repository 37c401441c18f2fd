/* test_vk_kernels.c - every kernel of the Vulkan lane against the reference, bit for bit: each matmul
 * kernel (one thread per element, 128x128 and 64x64 tiles; vector and scalar loads; every transpose;
 * shared and batched b; edges and a partial last k tile) forced in turn, the elementwise ops, sum_rows and
 * softmax_xent, with NaN, infinities, -0 and subnormals in the data; then all of it again through
 * descriptor pools instead of push descriptors. Skips (exit 77) where there is no Vulkan device. */
#include <math.h>

#include "core/reference.h"
#include "lanes/vulkan/vk_internal.h"
#include "vkt.h"

static const struct {
  int64_t batch, m, n, k;
  int b_batched;
} SHAPES[] = {
    {1, 1, 1, 1, 0},     {1, 128, 128, 64, 0}, /* whole tiles, vector loads */
    {1, 130, 67, 37, 0},                       /* edges everywhere, k not a multiple of the tile */
    {1, 64, 68, 8, 0},   {1, 5, 300, 9, 0},    {2, 33, 40, 17, 1}, {3, 129, 132, 12, 0}, {2, 100, 36, 20, 1},
    {0, 7, 5, 3, 1}, /* an empty batch */
};

static void kernels(weft_fabric *f, int lane, tu_rng *r) {
  static const char *NAMES[] = {"automatic", "simple", "tiled 128x128", "tiled 64x64", "tiled 128x128 k16"};
  for (int kern = 0; kern <= 4; kern++) {
    weft_vk_force_matmul_kernel = kern;
    long before = tu_failures;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
      for (int t = 0; t < 4; t++)
        vkt_matmul(f, lane, r, SHAPES[s].batch, SHAPES[s].m, SHAPES[s].n, SHAPES[s].k, t & 1, t >> 1,
                   SHAPES[s].b_batched, 0);
    for (int t = 0; t < 4; t++) vkt_matmul(f, lane, r, 2, 40, 36, 20, t & 1, t >> 1, 0, 1);
    printf("  matmul, %s kernel: %s\n", NAMES[kern], tu_failures == before ? "same bits" : "DIFFERENT");
  }
  weft_vk_force_matmul_kernel = 0;
  for (int sp = 0; sp <= 1; sp++) {
    vkt_elementwise(f, lane, r, WEFT_OP_ADD, 37, 53, 0, sp);
    vkt_elementwise(f, lane, r, WEFT_OP_ADD, 37, 53, 1, sp);
    vkt_elementwise(f, lane, r, WEFT_OP_RELU, 37, 53, 0, sp);
    vkt_elementwise(f, lane, r, WEFT_OP_RELU_BACKWARD, 37, 53, 0, sp);
    vkt_elementwise(f, lane, r, WEFT_OP_SCALE, 37, 53, 0, sp);
    vkt_elementwise(f, lane, r, WEFT_OP_AXPY, 37, 53, 0, sp);
    vkt_elementwise(f, lane, r, WEFT_OP_AXPY, 1, 70000, 0, sp); /* more elements than one pass of the grid */
    vkt_sum_rows(f, lane, r, 300, 45, sp);
    vkt_sum_rows(f, lane, r, 1, 7, sp);
  }
  /* Spreads of 60 and 120 push exp(z - max) into subnormals and to zero: the exp's two-step scaling. */
  const float spreads[] = {1.0f, 8.0f, 60.0f, 120.0f};
  for (size_t s = 0; s < sizeof spreads / sizeof spreads[0]; s++) vkt_softmax(f, lane, r, 33, 50, spreads[s], 1, 1);
  vkt_softmax(f, lane, r, 17, 10, 5.0f, 1, 0);
  vkt_softmax(f, lane, r, 17, 10, 5.0f, 0, 1);
  vkt_softmax(f, lane, r, 1, 1, 5.0f, 1, 1);
}

/* The kernels' multiply and add on inputs built to break them: random bit patterns around the subnormal
 * range, through add (x + y), scale (alpha * x for awkward alphas) and a k=1 matmul (0 + a[i] * b[j]),
 * which reach every path of the lane's exact multiply and add. */
static void ieee_edges(weft_fabric *f, int lane, tu_rng *r) {
  enum { N = 60000, SIDE = 160 };
  static float x[N], y[N], got[N], want[N], a[SIDE], b[SIDE], c[SIDE * SIDE], cw[SIDE * SIDE];
  vkt_fill_bits(r, x, N);
  vkt_fill_bits(r, y, N);
  int64_t n = N;
  weft_tensor *X, *Y, *O;
  weft_tensor_create(f, 1, &n, x, &X), weft_tensor_create(f, 1, &n, y, &Y), weft_tensor_create(f, 1, &n, NULL, &O);
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
  TU_STATUS(weft_op_add(f, &d, X, Y, O), WEFT_OK, "add of edge values");
  TU_STATUS(weft_tensor_read(O, got, N), WEFT_OK, "read");
  for (int i = 0; i < N; i++) want[i] = weft_canon_nan(x[i] + y[i]);
  vkt_same("add of edge values", got, want, N);
  const uint32_t alphas[] = {0x3f800001u, 0x00000003u, 0x00400001u, 0x1f800000u, 0x3e800000u, 0xbf7fffffu, 0x5f800000u, 0x0c000000u};
  for (size_t k = 0; k < sizeof alphas / sizeof alphas[0]; k++) {
    float al = tu_float(alphas[k]);
    TU_STATUS(weft_op_scale(f, &d, al, X, O), WEFT_OK, "scale of edge values");
    TU_STATUS(weft_tensor_read(O, got, N), WEFT_OK, "read");
    for (int i = 0; i < N; i++) want[i] = weft_canon_nan(al * x[i]);
    char what[64];
    snprintf(what, sizeof what, "scale of edge values by 0x%08x", alphas[k]);
    vkt_same(what, got, want, N);
  }
  weft_tensor_destroy(X), weft_tensor_destroy(Y), weft_tensor_destroy(O);
  vkt_fill_bits(r, a, SIDE);
  vkt_fill_bits(r, b, SIDE);
  int64_t da[2] = {SIDE, 1}, db[2] = {1, SIDE}, dc[2] = {SIDE, SIDE};
  weft_tensor *A, *B, *C;
  weft_tensor_create(f, 2, da, a, &A), weft_tensor_create(f, 2, db, b, &B), weft_tensor_create(f, 2, dc, NULL, &C);
  for (int i = 0; i < SIDE; i++)
    for (int j = 0; j < SIDE; j++) {
      float acc = 0.0f, p = a[i] * b[j];
      cw[i * SIDE + j] = weft_canon_nan(acc + p);
    }
  for (int kern = 1; kern <= 3; kern++) {
    weft_vk_force_matmul_kernel = kern;
    TU_STATUS(weft_op_matmul(f, &d, A, 0, B, 0, C), WEFT_OK, "outer product of edge values");
    TU_STATUS(weft_tensor_read(C, c, SIDE * SIDE), WEFT_OK, "read");
    char what[64];
    snprintf(what, sizeof what, "outer product of edge values, kernel %d", kern);
    vkt_same(what, c, cw, SIDE * SIDE);
  }
  weft_vk_force_matmul_kernel = 0;
  weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(C);
}

/* The fp32 contract's tiled kernels may fuse; they must still be accurate. */
static void fp32_matmul(weft_fabric *f, int lane, tu_rng *r) {
  const int64_t m = 150, n = 140, k = 96;
  float a[150 * 96], b[96 * 140], c[150 * 140];
  vkt_fill(r, a, sizeof a / sizeof a[0], 0);
  vkt_fill(r, b, sizeof b / sizeof b[0], 0);
  int64_t da[2] = {m, k}, db[2] = {k, n}, dc[2] = {m, n};
  weft_tensor *A, *B, *C;
  weft_tensor_create(f, 2, da, a, &A), weft_tensor_create(f, 2, db, b, &B), weft_tensor_create(f, 2, dc, NULL, &C);
  weft_op_desc od = {WEFT_CONTRACT_FP32, lane};
  for (int kern = 2; kern <= 3; kern++) {
    weft_vk_force_matmul_kernel = kern;
    TU_STATUS(weft_op_matmul(f, &od, A, 0, B, 0, C), WEFT_OK, "fp32 matmul");
    TU_STATUS(weft_tensor_read(C, c, sizeof c / sizeof c[0]), WEFT_OK, "read fp32 matmul");
    int worst = 0;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double ref = 0, mag = 0;
        for (int64_t q = 0; q < k; q++) ref += (double)a[i * k + q] * b[q * n + j], mag += fabs((double)a[i * k + q] * b[q * n + j]);
        double bound = 2.0 * (double)(k + 1) * 0x1p-24 * mag + 0x1p-120;
        if (fabs(c[i * n + j] - ref) > bound) worst++;
      }
    TU_CHECK(worst == 0, "fp32 matmul (kernel %d): %d elements beyond the error bound", kern, worst);
  }
  weft_vk_force_matmul_kernel = 0;
  weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(C);
}

int main(void) {
  double start = tu_now();
  tu_rng r = {tu_seed()};
  for (int pools = 0; pools <= 1; pools++) {
    weft_vk_disable_push_descriptors = pools;
    weft_fabric *f;
    int lane;
    if (!vkt_open(NULL, &f, &lane)) return tu_finish("vulkan kernels", start);
    weft_lane_info info;
    weft_fabric_lane_info(f, (size_t)lane, &info);
    printf("%s: %s; %s\n  %s\n", info.name, info.device, info.driver, info.details);
    TU_CHECK(tu_contains(info.details, pools ? "descriptor pools" : "push descriptors") ||
                 (!pools && tu_contains(info.details, "descriptor pools")),
             "details say how descriptors are bound: %s", info.details);
    ieee_edges(f, lane, &r);
    kernels(f, lane, &r);
    fp32_matmul(f, lane, &r);
    weft_fabric_close(f);
  }
  return tu_finish("vulkan kernels", start);
}
