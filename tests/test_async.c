/* test_async.c - the host lanes' queue. A fake host-memory lane whose ops block until the test lets them
 * go shows, without timing anything, that: a long host op returns before it has run; a device lane gets
 * and finishes work meanwhile, and reading its result does not wait for the host queue; reading the host
 * result waits for exactly the op that makes it; overwriting an input of a queued op waits for that op, so
 * it computes with the old value; queued ops keep their order; and the real CPU lane gives the same bits
 * queued as inline. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/reference.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft.h"

typedef struct fake {
  char name[32];
  uint32_t flags;
  atomic_int gate; /* host lane: runs wait while this is 0 */
  atomic_int runs;
  /* registered host memory (host_register), the out_host a run was given, and syncs asked of the lane */
  void *reg_ptr;
  int registers, unregisters, syncs;
  void *last_out_host;
} fake;

static void fk_describe(void *self, weft_lane_desc *out) {
  fake *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name, out->kind = "fake", out->device = "fake", out->driver = "", out->details = "";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT);
  out->flags = l->flags;
}
static void fk_destroy(void *self) { free(self); }
static weft_status fk_run(void *self, const weft_op *op) {
  fake *l = self;
  l->last_out_host = op->out_host[0];
  while (!atomic_load(&l->gate)) usleep(1000);
  weft_reference_run(op);
  atomic_fetch_add(&l->runs, 1);
  return WEFT_OK;
}
static weft_status fk_register(void *self, void *ptr, size_t bytes) {
  fake *l = self;
  (void)bytes;
  l->registers++;
  l->reg_ptr = ptr;
  return WEFT_OK;
}
static void fk_unregister(void *self, void *ptr, size_t bytes) {
  fake *l = self;
  (void)bytes;
  if (ptr == l->reg_ptr) l->unregisters++;
}
static weft_status fk_sync(void *self) {
  fake *l = self;
  l->syncs++;
  return WEFT_OK;
}
static const weft_lane_vtable REG_VT = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
    .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc, .buffer_free = tu_fake_free,
    .upload = tu_fake_upload, .download = tu_fake_download, .run = fk_run, .sync = fk_sync,
    .host_register = fk_register, .host_unregister = fk_unregister,
};
static const weft_lane_vtable FAKE_VT = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
    .destroy = fk_destroy, .buffer_alloc = tu_fake_alloc, .buffer_free = tu_fake_free,
    .upload = tu_fake_upload, .download = tu_fake_download, .run = fk_run,
};

/* What the router would wait for lane `lane` before a relu of [n, n] could start there. */
static double lane_wait(weft_fabric *f, int lane, int64_t n) {
  weft_route_query q = {WEFT_OP_RELU, WEFT_CONTRACT_EXACT, 1, 0, 0, 0, n, n};
  weft_route_explanation e;
  if (weft_route_explain(f, &q, &e) != WEFT_OK || (size_t)lane >= e.nlanes) return -1;
  return e.lanes[lane].wait;
}

static fake *add_fake_vt(weft_fabric *f, const weft_lane_vtable *vt, const char *name, uint32_t flags, int gate,
                         int *out_lane) {
  fake *k = calloc(1, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name);
  k->flags = flags;
  atomic_store(&k->gate, gate);
  if (weft_testing_add_lane(f, vt, k) != WEFT_OK) return NULL;
  size_t i;
  weft_fabric_lane_find(f, name, &i);
  *out_lane = (int)i;
  /* long enough for the queue: every op on it is predicted at 10 ms */
  for (int c = 0; c < WEFT_COST_CLASS_COUNT; c++)
    weft_fabric_set_cost_model(f, i, (weft_cost_class)c, WEFT_CONTRACT_EXACT, 10e-3, 1e12);
  return k;
}
static fake *add_fake(weft_fabric *f, const char *name, uint32_t flags, int gate, int *out_lane) {
  return add_fake_vt(f, &FAKE_VT, name, flags, gate, out_lane);
}

/* Opens the gate after `ms` milliseconds, from another thread. */
typedef struct opener {
  fake *k;
  int ms;
  pthread_t th;
} opener;
static void *open_later(void *arg) {
  opener *o = arg;
  usleep((useconds_t)o->ms * 1000);
  atomic_store(&o->k->gate, 1);
  return NULL;
}
static void open_gate_in(opener *o, fake *k, int ms) {
  o->k = k, o->ms = ms;
  pthread_create(&o->th, NULL, open_later, o);
}

enum { M = 9, K = 7, N = 5 };

static weft_tensor *mat(weft_fabric *f, int rows, int cols, float base, float *keep) {
  float v[64];
  for (int i = 0; i < rows * cols; i++) v[i] = base + 0.25f * (float)(i % 11) - 1.0f;
  if (keep) memcpy(keep, v, sizeof(float) * (size_t)(rows * cols));
  int64_t d[2] = {rows, cols};
  weft_tensor *t = NULL;
  weft_tensor_create(f, 2, d, v, &t);
  return t;
}

static void ref_matmul(const float *a, const float *b, float *c) {
  weft_op r = {0};
  r.kind = WEFT_OP_MATMUL, r.batch = 1, r.m = M, r.n = N, r.k = K;
  r.in[0] = (void *)a, r.in[1] = (void *)b, r.out[0] = c;
  weft_reference_run(&r);
}

int main(void) {
  double start = tu_now();
  weft_fabric *f = NULL;
  TU_STATUS(tu_open("cpu", &f), WEFT_OK, "open");
  if (!f) return tu_finish("async", start);
  int hl, dl;
  fake *host = add_fake(f, "slowhost:0", WEFT_LANE_HOST_MEMORY, 0, &hl);
  fake *dev = add_fake(f, "dev:0", 0, 1, &dl);
  TU_CHECK(host && dev, "fake lanes added");
  if (!host || !dev) return tu_finish("async", start);
  weft_op_desc on_host = {WEFT_CONTRACT_EXACT, hl}, on_dev = {WEFT_CONTRACT_EXACT, dl};
  float a0[M * K], b0[K * N], want[M * N], got[M * N];

  /* 1. A long host op returns before it runs; a device lane works meanwhile; reading the device's result
   * does not wait for the host queue; reading the host's result waits for its op. */
  weft_tensor *a = mat(f, M, K, 0.5f, a0), *b = mat(f, K, N, -0.25f, b0), *c = mat(f, M, N, 0, NULL);
  weft_tensor *c2 = mat(f, M, N, 0, NULL);
  TU_STATUS(weft_op_matmul(f, &on_host, a, 0, b, 0, c), WEFT_OK, "matmul queued on the host lane");
  TU_CHECK(atomic_load(&host->runs) == 0, "weft_op_matmul returned before the host lane ran it");
  TU_STATUS(weft_op_matmul(f, &on_dev, a, 0, b, 0, c2), WEFT_OK, "the same matmul on the device lane");
  TU_STATUS(weft_tensor_read(c2, got, M * N), WEFT_OK, "read the device's result");
  ref_matmul(a0, b0, want);
  TU_CHECK(memcmp(got, want, sizeof got) == 0, "the device's result is right");
  TU_CHECK(atomic_load(&host->runs) == 0, "and reading it did not wait for the host queue");
  opener o;
  open_gate_in(&o, host, 30);
  TU_STATUS(weft_tensor_read(c, got, M * N), WEFT_OK, "read the host's result");
  TU_CHECK(atomic_load(&host->runs) == 1, "the read waited for the op that makes it");
  TU_CHECK(memcmp(got, want, sizeof got) == 0, "the host's result is right");
  pthread_join(o.th, NULL);

  /* 2. Overwriting an input of a queued op waits for it: the op sees the old value. Ops queue in order. */
  atomic_store(&host->gate, 0);
  TU_STATUS(weft_op_matmul(f, &on_host, a, 0, b, 0, c), WEFT_OK, "matmul queued");
  weft_tensor *d = mat(f, M, N, 0, NULL);
  TU_STATUS(weft_op_relu(f, &on_host, c, d), WEFT_OK, "relu of its result queued behind it");
  TU_CHECK(atomic_load(&host->runs) == 1, "neither has run");
  float a1[M * K];
  for (int i = 0; i < M * K; i++) a1[i] = 3.0f * a0[i];
  open_gate_in(&o, host, 30);
  TU_STATUS(weft_tensor_write(a, a1, M * K), WEFT_OK, "overwrite a while the matmul reading it is queued");
  TU_CHECK(atomic_load(&host->runs) >= 2, "the write waited for the matmul");
  TU_STATUS(weft_tensor_read(d, got, M * N), WEFT_OK, "read relu(a.b)");
  for (int i = 0; i < M * N; i++) want[i] = want[i] > 0 ? want[i] : 0.0f;
  TU_CHECK(memcmp(got, want, sizeof got) == 0, "computed from the old a, in order");
  pthread_join(o.th, NULL);

  /* 3. Destroying a tensor a queued op uses, and closing the fabric, wait for it. */
  atomic_store(&host->gate, 0);
  TU_STATUS(weft_op_matmul(f, &on_host, a, 0, b, 0, c), WEFT_OK, "matmul queued");
  int before = atomic_load(&host->runs);
  open_gate_in(&o, host, 20);
  weft_tensor_destroy(a);
  TU_CHECK(atomic_load(&host->runs) == before + 1, "destroying an input waited for the op");
  pthread_join(o.th, NULL);
  weft_fabric_close(f);

  /* 4. The CPU lane, queued (a long predicted time) and inline (the priors' short one), same bits. */
  TU_STATUS(tu_open("cpu", &f), WEFT_OK, "open cpu");
  if (!f) return tu_finish("async", start);
  weft_tensor *x = mat(f, M, K, 0.5f, a0), *y = mat(f, K, N, -0.25f, b0), *z = mat(f, M, N, 0, NULL);
  weft_op_desc exact = {WEFT_CONTRACT_EXACT, WEFT_LANE_AUTO};
  TU_STATUS(weft_op_matmul(f, &exact, x, 0, y, 0, z), WEFT_OK, "cpu matmul inline");
  float inline_bits[M * N];
  weft_tensor_read(z, inline_bits, M * N);
  weft_fabric_set_cost_model(f, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 10e-3, 1e12);
  for (int r = 0; r < 20; r++) TU_STATUS(weft_op_matmul(f, &exact, x, 0, y, 0, z), WEFT_OK, "cpu matmul queued");
  TU_STATUS(weft_op_relu(f, &exact, z, z), WEFT_OK, "a short op behind them queues too");
  TU_STATUS(weft_tensor_read(z, got, M * N), WEFT_OK, "read");
  for (int i = 0; i < M * N; i++) inline_bits[i] = inline_bits[i] > 0 ? inline_bits[i] : 0.0f;
  TU_CHECK(memcmp(got, inline_bits, sizeof got) == 0, "queued and inline give the same bits");
  weft_lane_stats st;
  weft_fabric_lane_stats(f, 0, &st);
  TU_CHECK(st.ops[WEFT_OP_MATMUL] == 21 && st.seconds > 0, "the queued ops are counted and timed (%llu, %g s)",
           (unsigned long long)st.ops[WEFT_OP_MATMUL], st.seconds);
  TU_STATUS(weft_fabric_sync(f), WEFT_OK, "sync");

  /* 5. Registered host memory: offered on a tensor's second crossing (1 MiB or more), given to the lane
   * as out_host when a result is expected home, waited for before the host writes it, released at destroy. */
  int rl;
  fake *reg = add_fake_vt(f, &REG_VT, "regdev:0", 0, 1, &rl);
  TU_CHECK(reg != NULL, "registering lane added");
  if (!reg) return tu_finish("async", start);
  weft_op_desc on_reg = {WEFT_CONTRACT_EXACT, rl};
  enum { BIG = 512 };
  int64_t dd[2] = {BIG, BIG};
  weft_tensor *p = NULL, *q = NULL;
  weft_tensor_create(f, 2, dd, NULL, &p);
  weft_tensor_create(f, 2, dd, NULL, &q);
  float *buf = calloc(BIG * BIG, sizeof(float));
  TU_STATUS(weft_op_relu(f, &on_reg, p, q), WEFT_OK, "first op on the lane");
  TU_CHECK(reg->registers == 0 && reg->last_out_host == NULL, "nothing registered on a first crossing");
  TU_STATUS(weft_tensor_read(q, buf, BIG * BIG), WEFT_OK, "q comes home");
  TU_STATUS(weft_tensor_write(p, buf, BIG * BIG), WEFT_OK, "p changes on the host");
  TU_STATUS(weft_op_relu(f, &on_reg, p, q), WEFT_OK, "second op");
  TU_CHECK(reg->registers == 1, "p's memory was offered on its second crossing (%d)", reg->registers);
  TU_STATUS(weft_tensor_read(q, buf, BIG * BIG), WEFT_OK, "q comes home again");
  TU_CHECK(reg->registers == 2, "and q's on its second (%d)", reg->registers);
  TU_STATUS(weft_tensor_write(p, buf, BIG * BIG), WEFT_OK, "p changes again");
  /* the model predicts the op takes 5 s: the lane is busy that long, until a wait shows it done */
  weft_fabric_set_cost_model(f, (size_t)rl, WEFT_COST_ELEMENTWISE, WEFT_CONTRACT_EXACT, 5.0, 1e9);
  TU_STATUS(weft_op_relu(f, &on_reg, p, q), WEFT_OK, "third op, inputs from the host");
  TU_CHECK(reg->last_out_host != NULL, "the lane was told where q's host copy is");
  TU_CHECK(lane_wait(f, rl, BIG) > 1.0, "the lane counts as busy for its predicted time (%g s)", lane_wait(f, rl, BIG));
  int syncs = reg->syncs;
  TU_STATUS(weft_tensor_write(p, buf, BIG * BIG), WEFT_OK, "writing p while the lane may still read it");
  TU_CHECK(reg->syncs == syncs + 1, "waited for the lane's transfers first (%d syncs)", reg->syncs - syncs);
  TU_CHECK(lane_wait(f, rl, BIG) == 0, "after that sync the lane is free (wait %g s)", lane_wait(f, rl, BIG));
  weft_tensor_destroy(q);
  TU_CHECK(reg->unregisters == 1, "q's memory was released at destroy (%d)", reg->unregisters);
  weft_tensor_destroy(p);
  free(buf);
  weft_fabric_close(f);
  return tu_finish("async", start);
}
