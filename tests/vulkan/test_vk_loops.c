/* test_vk_loops.c - shapes past llvmpipe's loop limit. lavapipe ends a shader invocation's loops, silently,
 * once they have run 65,535 iterations together: no error, the loop just stops and the results are wrong.
 * The lane splits those kernels over dispatches or refuses the op; here every such shape, on vulkan:0, either
 * matches the CPU lane bit for bit or is refused with a message naming the limit, and then, routed, runs
 * elsewhere with the right bits: attention forward and backward at T 640 and 1024 (hs 64), matmul with
 * k = 70,000, sum_rows over 70,000 rows, softmax_xent over 40,000 columns, layernorm rows of 30,000. On a
 * lane with the limit it also shows, through the lane's test hook, that attention without the split comes
 * out wrong: the comparison catches the truncation. Skips (exit 77) where there is no Vulkan device. */
#include <stdlib.h>
#include <string.h>

#include "lanes/vulkan/vk_internal.h"
#include "vkt.h"

static weft_fabric *F;
static int VK, CPU, LIMITED;
static tu_rng R;

static float *fdata(size_t n, float scale) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = tu_rng_float(&R, -scale, scale);
  return x;
}

static weft_tensor *mk(int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3, const float *data) {
  int64_t d[4] = {d0, d1, d2, d3};
  weft_tensor *t = NULL;
  weft_status st = weft_tensor_create(F, nd, d, NULL, &t);
  TU_CHECK(st == WEFT_OK, "create: %s", weft_fabric_last_error(F));
  size_t n = 1;
  for (int i = 0; i < nd; i++) n *= (size_t)d[i];
  float *fill = NULL;
  if (!data) { /* garbage, so that an element a kernel forgets shows */
    fill = malloc(n * 4);
    for (size_t i = 0; i < n; i++) fill[i] = tu_float(0x7fa5a5a5u);
  }
  if (t) TU_STATUS(weft_tensor_write(t, data ? data : fill, n), WEFT_OK, "write");
  free(fill);
  return t;
}

static float *rd(weft_tensor *t, size_t n) {
  float *x = malloc(n * 4);
  TU_STATUS(weft_tensor_read(t, x, n), WEFT_OK, "read");
  return x;
}

/* Words of got that differ from want. */
static size_t ndiff(const float *got, const float *want, size_t n, size_t *first) {
  size_t bad = 0;
  *first = n;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], 4) != 0) {
      if (!bad) *first = i;
      bad++;
    }
  return bad;
}

static void same(const char *what, const float *got, const float *want, size_t n) {
  size_t first, bad = ndiff(got, want, n, &first);
  TU_CHECK(bad == 0, "%s: %zu of %zu words differ from the cpu lane's, first at %zu", what, bad, n, first);
}

static void pinned_ran(const char *what, weft_status st, int lane) {
  TU_CHECK(st == WEFT_OK, "%s: %s (%s)", what, weft_status_str(st), weft_fabric_last_error(F));
  if (st == WEFT_OK) TU_CHECK(weft_fabric_last_lane(F) == lane, "%s ran on lane %d, pinned to %d", what,
                              weft_fabric_last_lane(F), lane);
}

/* A refusal must say why: the limit and the count. */
static void refused(const char *what, weft_status st) {
  const char *msg = weft_fabric_last_error(F);
  TU_CHECK(st == WEFT_ERR_UNSUPPORTED, "%s pinned to vulkan:0 on lavapipe: %s, want a refusal", what,
           weft_status_str(st));
  TU_CHECK(msg && strstr(msg, "65535") && strstr(msg, "lavapipe"), "%s: the refusal does not name the limit: %s",
           what, msg ? msg : "(none)");
}

/* Attention forward (out, att, preatt) and backward (dqkv) at B 1, NH 1, C 64, on vulkan:0 and cpu.
 * Returns the number of words of the forward's outputs that differ (the caller decides what it expects). */
static size_t attention(int64_t T, int expect_same) {
  const int64_t C = 64;
  const size_t nq = (size_t)(T * 3 * C), no = (size_t)(T * C), na = (size_t)(T * T);
  float *qkv = fdata(nq, 2.0f), *dout = fdata(no, 1.0f);
  float *o[2], *a[2], *p[2], *dq[2];
  char what[96];
  snprintf(what, sizeof what, "attention T %lld hs 64", (long long)T);
  for (int side = 0; side < 2; side++) {
    const int lane = side ? CPU : VK;
    weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
    weft_tensor *tq = mk(3, 1, T, 3 * C, 0, qkv), *to = mk(3, 1, T, C, 0, NULL), *ta = mk(4, 1, 1, T, T, NULL),
                *tp = mk(4, 1, 1, T, T, NULL);
    pinned_ran(what, weft_op_attention(F, &d, tq, 1, to, ta, tp), lane);
    o[side] = rd(to, no), a[side] = rd(ta, na), p[side] = rd(tp, na);
    weft_tensor *td = mk(3, 1, T, C, 0, dout), *tdq = mk(3, 1, T, 3 * C, 0, NULL);
    pinned_ran(what, weft_op_attention_backward(F, &d, td, tq, ta, 1, tdq), lane);
    dq[side] = rd(tdq, nq);
    weft_tensor_destroy(tq), weft_tensor_destroy(to), weft_tensor_destroy(ta), weft_tensor_destroy(tp);
    weft_tensor_destroy(td), weft_tensor_destroy(tdq);
  }
  size_t first, bad = ndiff(o[0], o[1], no, &first) + ndiff(a[0], a[1], na, &first) + ndiff(p[0], p[1], na, &first);
  if (expect_same) {
    char w2[128];
    snprintf(w2, sizeof w2, "%s: out", what), same(w2, o[0], o[1], no);
    snprintf(w2, sizeof w2, "%s: att", what), same(w2, a[0], a[1], na);
    snprintf(w2, sizeof w2, "%s: preatt", what), same(w2, p[0], p[1], na);
    snprintf(w2, sizeof w2, "%s: dqkv", what), same(w2, dq[0], dq[1], nq);
  }
  for (int s = 0; s < 2; s++) free(o[s]), free(a[s]), free(p[s]), free(dq[s]);
  free(qkv), free(dout);
  return bad;
}

/* c [m, n] = a [m, k] . b [k, n] with a long k. */
static void matmul(int64_t m, int64_t n, int64_t k) {
  float *a = fdata((size_t)(m * k), 1.0f), *b = fdata((size_t)(k * n), 1.0f), *c[2];
  for (int side = 0; side < 2; side++) {
    const int lane = side ? CPU : VK;
    weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
    weft_tensor *ta = mk(2, m, k, 0, 0, a), *tb = mk(2, k, n, 0, 0, b), *tc = mk(2, m, n, 0, 0, NULL);
    pinned_ran("matmul k 70000", weft_op_matmul(F, &d, ta, 0, tb, 0, tc), lane);
    c[side] = rd(tc, (size_t)(m * n));
    weft_tensor_destroy(ta), weft_tensor_destroy(tb), weft_tensor_destroy(tc);
  }
  same("matmul k 70000", c[0], c[1], (size_t)(m * n));
  free(a), free(b), free(c[0]), free(c[1]);
}

static void sum_rows(int64_t rows, int64_t cols) {
  float *x = fdata((size_t)(rows * cols), 1.0f), *s[2];
  for (int side = 0; side < 2; side++) {
    const int lane = side ? CPU : VK;
    weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
    weft_tensor *tx = mk(2, rows, cols, 0, 0, x), *ts = mk(1, cols, 0, 0, 0, NULL);
    pinned_ran("sum_rows 70000 rows", weft_op_sum_rows(F, &d, tx, ts), lane);
    s[side] = rd(ts, (size_t)cols);
    weft_tensor_destroy(tx), weft_tensor_destroy(ts);
  }
  same("sum_rows 70000 rows", s[0], s[1], (size_t)cols);
  free(x), free(s[0]), free(s[1]);
}

/* The op pinned to vulkan:0 (match, or a refusal naming the limit where the lane has it), and routed (the
 * right bits wherever it ran). side 0 pinned vulkan, 1 cpu, 2 routed. */
static void softmax_xent(int64_t rows, int64_t cols) {
  const size_t n = (size_t)(rows * cols);
  float *z = fdata(n, 8.0f), *t = calloc(n, 4), *g[3], loss[3];
  for (int64_t i = 0; i < rows; i++) t[i * cols + tu_rng_int(&R, 0, cols - 1)] = 1.0f;
  weft_status st[3];
  for (int side = 0; side < 3; side++) {
    weft_op_desc d = {WEFT_CONTRACT_EXACT, side == 0 ? VK : side == 1 ? CPU : WEFT_LANE_AUTO};
    weft_tensor *tz = mk(2, rows, cols, 0, 0, z), *tt = mk(2, rows, cols, 0, 0, t), *tl = mk(1, 1, 0, 0, 0, NULL),
                *tg = mk(2, rows, cols, 0, 0, NULL);
    st[side] = weft_op_softmax_xent(F, &d, tz, tt, tl, tg);
    if (side == 0 && LIMITED) refused("softmax_xent over 40000 columns", st[0]);
    else TU_CHECK(st[side] == WEFT_OK, "softmax_xent side %d: %s (%s)", side, weft_status_str(st[side]),
                  weft_fabric_last_error(F));
    if (side == 2 && LIMITED) TU_CHECK(weft_fabric_last_lane(F) != VK, "softmax_xent routed to the lane that refused it");
    g[side] = st[side] == WEFT_OK ? rd(tg, n) : NULL;
    if (st[side] == WEFT_OK) TU_STATUS(weft_tensor_read(tl, &loss[side], 1), WEFT_OK, "read loss");
    weft_tensor_destroy(tz), weft_tensor_destroy(tt), weft_tensor_destroy(tl), weft_tensor_destroy(tg);
  }
  for (int side = 0; side < 3; side += 2) {
    if (!g[side] || !g[1]) continue;
    same(side ? "softmax_xent routed: grad" : "softmax_xent pinned: grad", g[side], g[1], n);
    same(side ? "softmax_xent routed: loss" : "softmax_xent pinned: loss", &loss[side], &loss[1], 1);
  }
  for (int s = 0; s < 3; s++) free(g[s]);
  free(z), free(t);
}

static void layernorm(int64_t N, int64_t C) {
  const size_t n = (size_t)(N * C);
  float *x = fdata(n, 3.0f), *ga = fdata((size_t)C, 1.0f), *be = fdata((size_t)C, 1.0f), *y[3];
  weft_status st[3];
  for (int side = 0; side < 3; side++) {
    weft_op_desc d = {WEFT_CONTRACT_EXACT, side == 0 ? VK : side == 1 ? CPU : WEFT_LANE_AUTO};
    weft_tensor *tx = mk(2, N, C, 0, 0, x), *tg = mk(1, C, 0, 0, 0, ga), *tb = mk(1, C, 0, 0, 0, be),
                *ty = mk(2, N, C, 0, 0, NULL);
    st[side] = weft_op_layernorm(F, &d, tx, tg, tb, 1e-5f, ty, NULL, NULL);
    if (side == 0 && LIMITED) refused("layernorm rows of 30000", st[0]);
    else TU_CHECK(st[side] == WEFT_OK, "layernorm side %d: %s (%s)", side, weft_status_str(st[side]),
                  weft_fabric_last_error(F));
    if (side == 2 && LIMITED) TU_CHECK(weft_fabric_last_lane(F) != VK, "layernorm routed to the lane that refused it");
    y[side] = st[side] == WEFT_OK ? rd(ty, n) : NULL;
    weft_tensor_destroy(tx), weft_tensor_destroy(tg), weft_tensor_destroy(tb), weft_tensor_destroy(ty);
  }
  if (y[0] && y[1]) same("layernorm rows of 30000 pinned", y[0], y[1], n);
  if (y[2] && y[1]) same("layernorm rows of 30000 routed", y[2], y[1], n);
  for (int s = 0; s < 3; s++) free(y[s]);
  free(x), free(ga), free(be);
}

int main(void) {
  double start = tu_now();
  R = (tu_rng){tu_seed()};
  int lane;
  if (!vkt_open(NULL, &F, &lane)) return tu_finish("vulkan loop limit", start);
  size_t ci;
  TU_STATUS(weft_fabric_lane_find(F, "cpu", &ci), WEFT_OK, "find cpu");
  VK = lane, CPU = (int)ci;
  weft_lane_info info;
  TU_STATUS(weft_fabric_lane_info(F, (size_t)VK, &info), WEFT_OK, "lane info");
  LIMITED = info.details && strstr(info.details, "65535") != NULL;
  printf("vulkan:0 %s a loop limit\n", LIMITED ? "has" : "has no");

  attention(640, 1);
  attention(1024, 1);
  if (LIMITED) { /* the same without the split: the comparison must see the truncated loops */
    weft_vk_ignore_loop_limit = 1;
    size_t bad = attention(640, 0);
    weft_vk_ignore_loop_limit = 0;
    TU_CHECK(bad > 0, "attention T 640 without the split matched: the test would not catch the truncation");
    printf("without the split: %zu words of attention T 640 wrong (the truncation the split avoids)\n", bad);
  }
  matmul(2, 3, 70000);
  sum_rows(70000, 3);
  softmax_xent(2, 40000);
  layernorm(2, 30000);
  weft_fabric_close(F);
  return tu_finish("vulkan loop limit", start);
}
