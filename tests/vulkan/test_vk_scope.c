/* test_vk_scope.c - scopes on the Vulkan lane: the ops of a training step recorded into one submission
 * give the same bits as the same ops submitted one by one and as the CPU lane; a read inside a scope
 * flushes it and the scope goes on; a thousand dependent ops in one scope come out right; tensors freed
 * while their work is pending are released safely; the lane's idle slot tells recorded and running work
 * from finished work without blocking, and a split with the CPU polls it. */
#include <stdlib.h>
#include <string.h>

#include "core/testing.h"
#include "vkt.h"

enum { B = 64, IN = 48, HID = 40, OUT = 10, STEPS = 4 };

typedef struct net {
  weft_tensor *x, *t, *w1, *b1, *w2, *h, *a, *z, *loss, *dz, *dw2, *db2, *dh, *dw1, *db1;
} net;

static weft_tensor *tensor(weft_fabric *f, int ndim, int64_t d0, int64_t d1, const float *data) {
  int64_t dims[2] = {d0, d1};
  weft_tensor *t = NULL;
  TU_STATUS(weft_tensor_create(f, ndim, ndim == 1 ? &d1 : dims, data, &t), WEFT_OK, "weft_tensor_create");
  return t;
}

static void net_make(weft_fabric *f, net *n, uint64_t seed) {
  tu_rng r = {seed};
  float x[B * IN], t[B * OUT], w1[IN * HID], b1[HID], w2[HID * OUT];
  vkt_fill(&r, x, B * IN, 0), vkt_fill(&r, w1, IN * HID, 0), vkt_fill(&r, b1, HID, 0), vkt_fill(&r, w2, HID * OUT, 0);
  for (int i = 0; i < B; i++)
    for (int j = 0; j < OUT; j++) t[i * OUT + j] = j == i % OUT ? 1.0f : 0.0f;
  n->x = tensor(f, 2, B, IN, x), n->t = tensor(f, 2, B, OUT, t), n->w1 = tensor(f, 2, IN, HID, w1);
  n->b1 = tensor(f, 1, 1, HID, b1), n->w2 = tensor(f, 2, HID, OUT, w2);
  n->h = tensor(f, 2, B, HID, NULL), n->a = tensor(f, 2, B, HID, NULL), n->z = tensor(f, 2, B, OUT, NULL);
  n->loss = tensor(f, 1, 1, 1, NULL), n->dz = tensor(f, 2, B, OUT, NULL), n->dw2 = tensor(f, 2, HID, OUT, NULL);
  n->db2 = tensor(f, 1, 1, OUT, NULL), n->dh = tensor(f, 2, B, HID, NULL), n->dw1 = tensor(f, 2, IN, HID, NULL);
  n->db1 = tensor(f, 1, 1, HID, NULL);
}

static void net_free(net *n) {
  weft_tensor **all = (weft_tensor **)n;
  for (size_t i = 0; i < sizeof *n / sizeof(weft_tensor *); i++) weft_tensor_destroy(all[i]);
}

/* One step of a two-layer network: forward, softmax cross-entropy, backward, SGD. 13 ops. */
static int net_step(weft_fabric *f, net *n, int lane) {
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
  weft_status st = WEFT_OK;
#define OP(call)                                                                                               \
  if (st == WEFT_OK) st = (call)
  OP(weft_op_matmul(f, &d, n->x, 0, n->w1, 0, n->h));
  OP(weft_op_add(f, &d, n->h, n->b1, n->h));
  OP(weft_op_relu(f, &d, n->h, n->a));
  OP(weft_op_matmul(f, &d, n->a, 0, n->w2, 0, n->z));
  OP(weft_op_softmax_xent(f, &d, n->z, n->t, n->loss, n->dz));
  OP(weft_op_matmul(f, &d, n->a, 1, n->dz, 0, n->dw2));
  OP(weft_op_sum_rows(f, &d, n->dz, n->db2));
  OP(weft_op_matmul(f, &d, n->dz, 0, n->w2, 1, n->dh));
  OP(weft_op_relu_backward(f, &d, n->dh, n->h, n->dh));
  OP(weft_op_matmul(f, &d, n->x, 1, n->dh, 0, n->dw1));
  OP(weft_op_sum_rows(f, &d, n->dh, n->db1));
  OP(weft_op_axpy(f, &d, -0.5f, n->dw2, n->w2));
  OP(weft_op_axpy(f, &d, -0.5f, n->dw1, n->w1));
#undef OP
  TU_CHECK(st == WEFT_OK, "training step on lane %d: %s (%s)", lane, weft_status_str(st), weft_fabric_last_error(f));
  return st == WEFT_OK;
}

/* The tensors a step leaves, read back. */
typedef struct net_out {
  float w1[IN * HID], w2[HID * OUT], loss, db1[HID], db2[OUT];
} net_out;

static void net_read(net *n, net_out *o) {
  TU_STATUS(weft_tensor_read(n->w1, o->w1, IN * HID), WEFT_OK, "read w1");
  TU_STATUS(weft_tensor_read(n->w2, o->w2, HID * OUT), WEFT_OK, "read w2");
  TU_STATUS(weft_tensor_read(n->loss, &o->loss, 1), WEFT_OK, "read loss");
  TU_STATUS(weft_tensor_read(n->db1, o->db1, HID), WEFT_OK, "read db1");
  TU_STATUS(weft_tensor_read(n->db2, o->db2, OUT), WEFT_OK, "read db2");
}

static void same_out(const char *what, const net_out *a, const net_out *b) {
  char w[128];
  snprintf(w, sizeof w, "%s: w1", what), vkt_same(w, a->w1, b->w1, IN * HID);
  snprintf(w, sizeof w, "%s: w2", what), vkt_same(w, a->w2, b->w2, HID * OUT);
  snprintf(w, sizeof w, "%s: loss", what), vkt_same(w, &a->loss, &b->loss, 1);
  snprintf(w, sizeof w, "%s: db1", what), vkt_same(w, a->db1, b->db1, HID);
  snprintf(w, sizeof w, "%s: db2", what), vkt_same(w, a->db2, b->db2, OUT);
}

/* mode 0: ops one by one (no scope), 1: each step in a scope, 2: a scope with a read of the loss in the
 * middle of every step. */
static void run_net(weft_fabric *f, int lane, int mode, net_out *o) {
  net n;
  net_make(f, &n, 99);
  for (int s = 0; s < STEPS; s++) {
    if (mode) TU_STATUS(weft_scope_begin(f), WEFT_OK, "weft_scope_begin");
    if (mode == 2) {
      weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
      TU_STATUS(weft_op_matmul(f, &d, n.x, 0, n.w1, 0, n.h), WEFT_OK, "matmul before the read");
      float h0[B * HID];
      TU_STATUS(weft_tensor_read(n.h, h0, B * HID), WEFT_OK, "read inside a scope");
      TU_CHECK(h0[0] == h0[0], "a read inside a scope returns computed values");
    }
    net_step(f, &n, lane);
    if (mode == 2) {
      float loss;
      TU_STATUS(weft_tensor_read(n.loss, &loss, 1), WEFT_OK, "read the loss inside a scope");
      TU_CHECK(loss > 0.0f && loss < 100.0f, "the loss read inside a scope is a loss: %g", (double)loss);
    }
    if (mode) TU_STATUS(weft_scope_end(f), WEFT_OK, "weft_scope_end");
  }
  net_read(&n, o);
  net_free(&n);
}

/* 2000 dependent ops in one scope: t = s_i * t, then t = t + 1, with random signs s_i. Every step changes
 * the result (integers, exact in fp32), so one missing barrier between two dispatches shows. */
static void long_chain(weft_fabric *f, int lane) {
  enum { N = 1000, LEN = 300 };
  float x[LEN], one[LEN], want[LEN], got[LEN], sign[N];
  tu_rng r = {7};
  for (int i = 0; i < LEN; i++) x[i] = (float)(i + 1), one[i] = 1.0f, want[i] = x[i];
  for (int i = 0; i < N; i++) sign[i] = tu_rng_int(&r, 0, 1) ? 1.0f : -1.0f;
  for (int i = 0; i < N; i++)
    for (int e = 0; e < LEN; e++) want[e] = sign[i] * want[e] + 1.0f;
  int64_t len = LEN;
  weft_tensor *t, *u;
  TU_STATUS(weft_tensor_create(f, 1, &len, x, &t), WEFT_OK, "create chain tensor");
  TU_STATUS(weft_tensor_create(f, 1, &len, one, &u), WEFT_OK, "create ones");
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
  TU_STATUS(weft_scope_begin(f), WEFT_OK, "scope for the chain");
  weft_status st = WEFT_OK;
  for (int i = 0; i < N && st == WEFT_OK; i++) {
    st = weft_op_scale(f, &d, sign[i], t, t);
    if (st == WEFT_OK) st = weft_op_add(f, &d, t, u, t);
  }
  TU_STATUS(st, WEFT_OK, "2000 dependent ops in one scope");
  TU_STATUS(weft_scope_end(f), WEFT_OK, "end the chain's scope");
  TU_STATUS(weft_tensor_read(t, got, LEN), WEFT_OK, "read the chain");
  vkt_same("2000 dependent ops in one scope", got, want, LEN);
  TU_CHECK(strcmp(weft_tensor_location(t), "host,vulkan:0") == 0, "the chain's result lives on vulkan:0: %s",
           weft_tensor_location(t));
  weft_tensor_destroy(t), weft_tensor_destroy(u);
}

/* Tensors destroyed right after the op that uses them, before the scope is submitted. */
static void free_pending(weft_fabric *f, int lane) {
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
  int64_t dims[2] = {64, 64};
  float ones[64 * 64], got[64 * 64];
  for (int i = 0; i < 64 * 64; i++) ones[i] = 1.0f;
  weft_tensor *keep;
  TU_STATUS(weft_tensor_create(f, 2, dims, NULL, &keep), WEFT_OK, "create");
  TU_STATUS(weft_scope_begin(f), WEFT_OK, "scope");
  for (int i = 0; i < 10; i++) {
    weft_tensor *a, *b;
    weft_tensor_create(f, 2, dims, ones, &a), weft_tensor_create(f, 2, dims, ones, &b);
    TU_STATUS(weft_op_matmul(f, &d, a, 0, b, 0, keep), WEFT_OK, "matmul of tensors about to be destroyed");
    weft_tensor_destroy(a), weft_tensor_destroy(b);
  }
  TU_STATUS(weft_scope_end(f), WEFT_OK, "end scope");
  TU_STATUS(weft_tensor_read(keep, got, 64 * 64), WEFT_OK, "read");
  int bad = 0;
  for (int i = 0; i < 64 * 64; i++) bad += got[i] != 64.0f;
  TU_CHECK(bad == 0, "products of freed inputs are right (%d wrong)", bad);
  weft_tensor_destroy(keep);
}

/* The idle slot (what a split polls): yes with nothing given; no while recorded work is not submitted yet
 * (in a scope, or an op the lane batches); yes once the scope has ended; after a flush (as a split starts
 * a device's share), yes by itself, polled without a wait; the result is right. */
static void idle_slot(weft_fabric *f, int lane) {
  enum { N = 128 };
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
  int64_t dims[2] = {N, N};
  static float ones[N * N], got[N * N];
  for (int i = 0; i < N * N; i++) ones[i] = 1.0f;
  weft_tensor *a, *b, *c;
  weft_tensor_create(f, 2, dims, ones, &a), weft_tensor_create(f, 2, dims, ones, &b);
  weft_tensor_create(f, 2, dims, NULL, &c);
  TU_STATUS(weft_fabric_sync(f), WEFT_OK, "sync");
  TU_CHECK(weft_testing_lane_idle(f, (size_t)lane) == 1, "idle with nothing given");
  TU_STATUS(weft_scope_begin(f), WEFT_OK, "scope");
  TU_STATUS(weft_op_matmul(f, &d, a, 0, b, 0, c), WEFT_OK, "matmul in the scope");
  TU_CHECK(weft_testing_lane_idle(f, (size_t)lane) == 0, "not idle while the scope holds recorded work");
  TU_STATUS(weft_scope_end(f), WEFT_OK, "end scope");
  TU_CHECK(weft_testing_lane_idle(f, (size_t)lane) == 1, "idle once the scope has ended");
  TU_STATUS(weft_op_matmul(f, &d, c, 0, b, 0, a), WEFT_OK, "matmul");
  TU_CHECK(weft_testing_lane_idle(f, (size_t)lane) == 0, "not idle with the op recorded (the lane batches ops)");
  TU_STATUS(weft_testing_lane_flush(f, (size_t)lane), WEFT_OK, "flush: the op is submitted");
  int v = 0, polls = 0;
  for (double t0 = tu_now(); (v = weft_testing_lane_idle(f, (size_t)lane)) == 0 && tu_now() - t0 < 60;) polls++;
  TU_CHECK(v == 1, "idle by itself once the work is done (%d polls)", polls);
  TU_STATUS(weft_tensor_read(a, got, N * N), WEFT_OK, "read");
  int bad = 0;
  for (int i = 0; i < N * N; i++) bad += got[i] != (float)(N * N);
  TU_CHECK(bad == 0, "the polled result is right (%d wrong)", bad);
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c);
}

/* A batched matmul shared out between the CPU and the Vulkan lane (the models set so the plan splits it):
 * the Vulkan share is started, polled through its idle slot while the CPU computes, and brought home; every
 * entry has the bits of the CPU alone, and each share reports its measured time. */
static void split_with_cpu(weft_fabric *f, int lane, size_t cpu) {
  enum { BATCH = 8, M = 32, K = 24, N = 40 };
  for (size_t l = 0; l < 2; l++) {
    const size_t i = l ? (size_t)lane : cpu;
    weft_fabric_set_cost_model(f, i, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-5, 1e9);
    weft_fabric_set_cost_model(f, i, WEFT_COST_UPLOAD, 0, 0, 1e15);
    weft_fabric_set_cost_model(f, i, WEFT_COST_DOWNLOAD, 0, 0, 1e15);
  }
  tu_rng r = {11};
  static float ha[BATCH * M * K], hb[K * N], want[BATCH * M * N], got[BATCH * M * N];
  vkt_fill(&r, ha, BATCH * M * K, 1), vkt_fill(&r, hb, K * N, 1);
  int64_t da[3] = {BATCH, M, K}, db[2] = {K, N}, dc[3] = {BATCH, M, N};
  weft_tensor *a, *b, *c;
  weft_tensor_create(f, 3, da, ha, &a), weft_tensor_create(f, 2, db, hb, &b), weft_tensor_create(f, 3, dc, NULL, &c);
  weft_op_desc on_cpu = {WEFT_CONTRACT_EXACT, (int)cpu};
  TU_STATUS(weft_op_matmul(f, &on_cpu, a, 0, b, 0, c), WEFT_OK, "on the cpu alone");
  TU_STATUS(weft_tensor_read(c, want, BATCH * M * N), WEFT_OK, "read");
  weft_tensor_write(a, ha, BATCH * M * K), weft_tensor_write(b, hb, K * N);
  TU_STATUS(weft_op_matmul(f, NULL, a, 0, b, 0, c), WEFT_OK, "routed: split");
  weft_split_report rep;
  TU_STATUS(weft_split_last(f, &rep), WEFT_OK, "split report");
  weft_lane_info li;
  weft_fabric_lane_info(f, (size_t)lane, &li);
  int vk_share = 0;
  for (size_t i = 0; i < rep.nshares; i++)
    if (strcmp(rep.shares[i].lane, li.name) == 0 && rep.shares[i].entries > 0 && rep.shares[i].seconds > 0) vk_share = 1;
  TU_CHECK(rep.split == 1 && rep.nshares == 2 && vk_share, "split between the cpu and %s (split %d, %zu shares)",
           li.name, rep.split, rep.nshares);
  TU_STATUS(weft_tensor_read(c, got, BATCH * M * N), WEFT_OK, "read");
  vkt_same("split vs the cpu alone", got, want, BATCH * M * N);
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c);
}

int main(void) {
  double start = tu_now();
  weft_fabric *f;
  int lane;
  if (!vkt_open(NULL, &f, &lane)) return tu_finish("vulkan scopes", start);
  size_t cpu;
  TU_STATUS(weft_fabric_lane_find(f, "cpu", &cpu), WEFT_OK, "find cpu");
  static net_out plain, scoped, flushed, on_cpu;
  run_net(f, lane, 0, &plain);
  run_net(f, lane, 1, &scoped);
  run_net(f, lane, 2, &flushed);
  run_net(f, (int)cpu, 0, &on_cpu);
  same_out("steps in scopes vs one by one", &scoped, &plain);
  same_out("steps in scopes read mid-way vs one by one", &flushed, &plain);
  same_out("vulkan vs cpu", &plain, &on_cpu);
  long_chain(f, lane);
  free_pending(f, lane);
  idle_slot(f, lane);
  split_with_cpu(f, lane, cpu);
  TU_STATUS(weft_scope_begin(f), WEFT_OK, "begin");
  TU_STATUS(weft_scope_begin(f), WEFT_ERR_STATE, "a second begin");
  TU_STATUS(weft_scope_end(f), WEFT_OK, "end");
  TU_STATUS(weft_scope_end(f), WEFT_ERR_STATE, "an end without a begin");
  weft_fabric_close(f);
  return tu_finish("vulkan scopes", start);
}
