/* test_net_ops_v2.c - the transformer ops over protocol 2. A real `weft worker` (its CPU lane, and its Vulkan
 * lane when it has one) serves remote lanes of a local fabric; every op of the table beyond the version-1
 * set runs through the public API pinned to each remote lane that offers it, and its outputs' bits must
 * equal the local CPU lane's, int32 tensors (token ids, targets, an int32 permute and copy_slice) included,
 * outputs read and written (adamw, accumulated gradients, sumsq, copy_slice) included.
 *
 * Then hostile version-2 frames on a raw connection, each answered with an error while the worker keeps
 * serving: an op naming more inputs or outputs than the table gives it, an f32 handle in an i32 slot, a
 * kind beyond the table, parameters the op's validator refuses, a view past its tensor, a payload of the
 * wrong size, a token index out of range, a bad RETYPE; and a HELLO of protocol 1, refused with a reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netutil.h"
#include "tutil.h"
#include "weft.h"

enum { B = 2, T = 3, C = 8, V = 11, P = 5, NH = 2 };

/* One operand of a case: its dtype and shape, and how to fill it. */
typedef struct operand {
  int given; /* 0: NULL (an absent optional operand) */
  weft_dtype dt;
  int nd;
  int64_t d[4];
  int64_t imax; /* i32: values in [0, imax) */
  float lo, hi; /* f32: values in [lo, hi) */
} operand;

typedef struct tcase {
  const char *what;
  weft_op_kind kind;
  int nin, nout;
  operand in[WEFT_OP_MAX_IN], out[WEFT_OP_MAX_OUT];
  weft_op_params p;
} tcase;

#define F(lo_, hi_, nd_, ...) {1, WEFT_DTYPE_F32, nd_, {__VA_ARGS__}, 0, lo_, hi_}
#define I(max_, nd_, ...) {1, WEFT_DTYPE_I32, nd_, {__VA_ARGS__}, max_, 0, 0}
#define NONE {0, WEFT_DTYPE_F32, 0, {0}, 0, 0, 0}

static size_t numel(const operand *o) {
  size_t n = 1;
  for (int i = 0; i < o->nd; i++) n *= (size_t)o->d[i];
  return n;
}

/* The operand's initial value: the same on both lanes (the seed is the operand's position in the case). */
static void *fill(const operand *o, uint64_t seed) {
  size_t n = numel(o);
  tu_rng r = {seed * 0x9e3779b97f4a7c15ull + 1};
  if (o->dt == WEFT_DTYPE_I32) {
    int32_t *x = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) x[i] = (int32_t)tu_rng_int(&r, 0, o->imax - 1);
    /* Data, not indices: bit patterns that are NaNs as floats must cross the wire unchanged. */
    if (n > 3 && o->imax >= (1 << 30)) x[0] = 0x7f800001, x[1] = (int32_t)0xffc00001u, x[2] = INT32_MIN;
    return x;
  }
  float *x = malloc(n * 4 + 4);
  for (size_t i = 0; i < n; i++) x[i] = tu_rng_float(&r, o->lo, o->hi);
  /* Signed zeros and subnormals where the range allows them. */
  if (n > 3 && o->lo < 0) x[0] = -0.0f, x[1] = 1e-40f, x[2] = -3e-41f;
  return x;
}

static weft_status make(weft_fabric *f, const operand *o, uint64_t seed, weft_tensor **t) {
  *t = NULL;
  if (!o->given) return WEFT_OK;
  void *x = fill(o, seed);
  weft_status st = weft_tensor_create_typed(f, o->dt, o->nd, o->d, x, t);
  free(x);
  return st;
}

/* Runs the case pinned to `lane`; outputs' bits into got[o] (malloc'ed). */
static weft_status run_on(weft_fabric *f, const tcase *c, int lane, void *got[WEFT_OP_MAX_OUT], int *ran_on) {
  weft_tensor *in[WEFT_OP_MAX_IN] = {0}, *out[WEFT_OP_MAX_OUT] = {0};
  weft_status st = WEFT_OK;
  for (int i = 0; i < c->nin && !st; i++) st = make(f, &c->in[i], (uint64_t)(100 + i), &in[i]);
  for (int o = 0; o < c->nout && !st; o++) st = make(f, &c->out[o], (uint64_t)(200 + o), &out[o]);
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = lane;
  if (!st) st = weft_op_run(f, &od, c->kind, in, c->nin, out, c->nout, &c->p);
  *ran_on = weft_fabric_last_lane(f);
  for (int o = 0; o < c->nout && !st; o++) {
    if (!out[o]) continue;
    size_t n = weft_tensor_numel(out[o]);
    got[o] = malloc(n * 4 + 4);
    st = c->out[o].dt == WEFT_DTYPE_I32 ? weft_tensor_read_i32(out[o], got[o], n) : weft_tensor_read(out[o], got[o], n);
  }
  for (int i = 0; i < WEFT_OP_MAX_IN; i++) weft_tensor_destroy(in[i]);
  for (int o = 0; o < WEFT_OP_MAX_OUT; o++) weft_tensor_destroy(out[o]);
  return st;
}

static tcase *cases(int *count) {
  static tcase cs[32];
  int n = 0;
  const float eps = 1e-5f, scale = 0.35355339f;
  float bc1 = weft_adamw_bias_correction(0.9f, 3), bc2 = weft_adamw_bias_correction(0.999f, 3);
  cs[n++] = (tcase){"embedding", WEFT_OP_EMBEDDING, 4, 1,
                    {I(V, 2, B, T), I(P, 2, B, T), F(-1, 1, 2, V, C), F(-1, 1, 2, P, C)}, {F(0, 1, 3, B, T, C)}, {.i = {0}}};
  cs[n++] = (tcase){"embedding (pos = t)", WEFT_OP_EMBEDDING, 4, 1,
                    {I(V, 2, B, T), NONE, F(-1, 1, 2, V, C), F(-1, 1, 2, P, C)}, {F(0, 1, 3, B, T, C)}, {.i = {0}}};
  cs[n++] = (tcase){"embedding_backward", WEFT_OP_EMBEDDING_BACKWARD, 3, 2,
                    {F(-1, 1, 3, B, T, C), I(V, 2, B, T), I(P, 2, B, T)}, {F(-1, 1, 2, V, C), F(-1, 1, 2, P, C)}, {.i = {0}}};
  cs[n++] = (tcase){"embedding_backward (dwte only)", WEFT_OP_EMBEDDING_BACKWARD, 3, 2,
                    {F(-1, 1, 3, B, T, C), I(V, 2, B, T), NONE}, {F(-1, 1, 2, V, C), NONE}, {.i = {0}}};
  cs[n++] = (tcase){"layernorm", WEFT_OP_LAYERNORM, 3, 3, {F(-3, 3, 3, B, T, C), F(-1, 1, 1, C), F(-1, 1, 1, C)},
                    {F(0, 1, 3, B, T, C), F(0, 1, 1, B * T), F(0, 1, 1, B * T)}, {.f = {eps}}};
  cs[n++] = (tcase){"layernorm_backward", WEFT_OP_LAYERNORM_BACKWARD, 5, 3,
                    {F(-1, 1, 3, B, T, C), F(-3, 3, 3, B, T, C), F(-1, 1, 1, B * T), F(0.5f, 2, 1, B * T), F(-1, 1, 1, C)},
                    {F(0, 1, 3, B, T, C), F(-1, 1, 1, C), F(-1, 1, 1, C)}, {.i = {0}}};
  cs[n++] = (tcase){"gelu", WEFT_OP_GELU, 1, 1, {F(-6, 6, 3, B, T, C)}, {F(0, 1, 3, B, T, C)}, {.i = {0}}};
  cs[n++] = (tcase){"gelu_backward", WEFT_OP_GELU_BACKWARD, 2, 1, {F(-6, 6, 3, B, T, C), F(-1, 1, 3, B, T, C)},
                    {F(0, 1, 3, B, T, C)}, {.i = {0}}};
  cs[n++] = (tcase){"attention", WEFT_OP_ATTENTION, 1, 3, {F(-2, 2, 3, B, T, 3 * C)},
                    {F(0, 1, 3, B, T, C), F(0, 1, 4, B, NH, T, T), F(0, 1, 4, B, NH, T, T)}, {.i = {NH}}};
  cs[n++] = (tcase){"attention_backward", WEFT_OP_ATTENTION_BACKWARD, 3, 1,
                    {F(-1, 1, 3, B, T, C), F(-2, 2, 3, B, T, 3 * C), F(0, 1, 4, B, NH, T, T)},
                    {F(-1, 1, 3, B, T, 3 * C)}, {.i = {NH}}};
  cs[n++] = (tcase){"causal_softmax", WEFT_OP_CAUSAL_SOFTMAX, 1, 1, {F(-4, 4, 3, B * NH, T, T)},
                    {F(0, 1, 3, B * NH, T, T)}, {.f = {scale}}};
  cs[n++] = (tcase){"causal_softmax_backward", WEFT_OP_CAUSAL_SOFTMAX_BACKWARD, 2, 1,
                    {F(0, 1, 3, B * NH, T, T), F(-1, 1, 3, B * NH, T, T)}, {F(0, 1, 3, B * NH, T, T)}, {.f = {scale}}};
  cs[n++] = (tcase){"crossentropy", WEFT_OP_CROSSENTROPY, 2, 1, {F(-5, 5, 2, B * T, V), I(V, 1, B * T)},
                    {F(0, 1, 1, B * T)}, {.i = {0}}};
  cs[n++] = (tcase){"crossentropy_backward", WEFT_OP_CROSSENTROPY_BACKWARD, 3, 1,
                    {F(-5, 5, 2, B * T, V), I(V, 1, B * T), F(0, 1, 1, B * T)}, {F(0, 1, 2, B * T, V)}, {.i = {0}}};
  cs[n++] = (tcase){"adamw", WEFT_OP_ADAMW, 1, 3, {F(-1, 1, 2, 4, 9)}, {F(-1, 1, 2, 4, 9), F(-1, 1, 1, 36), F(0, 1, 1, 36)},
                    {.f = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2}}};
  cs[n++] = (tcase){"sumsq", WEFT_OP_SUMSQ, 1, 1, {F(-2, 2, 3, B, T, C)}, {F(1, 2, 1, 1)}, {.i = {0}}};
  cs[n++] = (tcase){"permute f32", WEFT_OP_PERMUTE, 1, 1, {F(-1, 1, 4, 2, 3, 4, 5)}, {F(0, 1, 4, 2, 4, 3, 5)},
                    {.i = {0, 2, 1, 3}}};
  cs[n++] = (tcase){"permute i32", WEFT_OP_PERMUTE, 1, 1, {I(1 << 30, 3, 2, 3, 4)}, {I(1, 3, 4, 2, 3)}, {.i = {2, 0, 1}}};
  cs[n++] = (tcase){"copy_slice f32", WEFT_OP_COPY_SLICE, 1, 1, {F(-1, 1, 3, 2, 3, 4)}, {F(-1, 1, 3, 2, 7, 4)},
                    {.i = {1, 2}}};
  cs[n++] = (tcase){"copy_slice i32", WEFT_OP_COPY_SLICE, 1, 1, {I(1 << 30, 2, 3, 4)}, {I(1 << 30, 2, 3, 9)},
                    {.i = {1, 5}}};
  cs[n++] = (tcase){"attention_cached", WEFT_OP_ATTENTION_CACHED, 1, 2, {F(-2, 2, 3, B, T + 3, 3 * C)},
                    {F(0, 1, 3, B, 2, C), F(0, 1, 4, B, NH, 2, T + 3)}, {.i = {NH, T - 2}}};
  cs[n++] = (tcase){"attention_cached (no att)", WEFT_OP_ATTENTION_CACHED, 1, 2, {F(-2, 2, 3, B, T + 3, 3 * C)},
                    {F(0, 1, 3, B, 1, C), NONE}, {.i = {NH, 0}}};
  /* c (rw) += a^T . b, continuing from c's values */
  cs[n++] = (tcase){"matmul_acc", WEFT_OP_MATMUL_ACC, 2, 1, {F(-1, 1, 2, B * T, C), F(-1, 1, 2, B * T, 5)},
                    {F(-3, 3, 2, C, 5)}, {.i = {1, 0}}};
  *count = n;
  return cs;
}

static void test_ops(const char *addr, int want_vulkan) {
  weft_fabric_desc d = tu_desc();
  d.lanes = "cpu,remote";
  d.remote = addr;
  weft_fabric *f = NULL;
  TU_STATUS(weft_fabric_open(&d, &f), WEFT_OK, "open with a remote worker");
  if (!f) return;
  size_t cpu = 0;
  TU_STATUS(weft_fabric_lane_find(f, "cpu", &cpu), WEFT_OK, "local cpu lane");
  int ncases = 0;
  tcase *cs = cases(&ncases);
  uint64_t covered = 0;
  int remotes = 0;
  for (size_t l = 0; l < weft_fabric_lane_count(f); l++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(f, l, &li) || li.failed || strcmp(li.kind, "remote") != 0) continue;
    remotes++;
    printf("net_ops_v2: %s offers ops 0x%llx\n", li.name, (unsigned long long)li.ops);
    int is_cpu = strstr(li.name, "/cpu") != NULL;
    /* The lane offers what the worker's lane offers: everything for the worker's CPU. */
    if (is_cpu)
      TU_CHECK((li.ops & WEFT_OPS_ALL) == WEFT_OPS_ALL, "%s offers every op of the table (ops 0x%llx)", li.name,
               (unsigned long long)li.ops);
    TU_CHECK((li.ops & WEFT_OPS_V1) == WEFT_OPS_V1, "%s offers the version-1 ops", li.name);
    for (int k = 0; k < ncases; k++) {
      const tcase *c = &cs[k];
      void *want[WEFT_OP_MAX_OUT] = {0}, *got[WEFT_OP_MAX_OUT] = {0};
      int ran_cpu = -1, ran = -1;
      weft_status sc = run_on(f, c, (int)cpu, want, &ran_cpu);
      TU_STATUS(sc, WEFT_OK, c->what);
      weft_status sr = run_on(f, c, (int)l, got, &ran);
      if (!(li.ops & WEFT_OP_BIT(c->kind))) {
        TU_CHECK(sr == WEFT_ERR_UNSUPPORTED, "%s on %s, which does not offer it: UNSUPPORTED (got %s)", c->what,
                 li.name, weft_status_str(sr));
      } else {
        TU_CHECK(sr == WEFT_OK && ran == (int)l, "%s on %s: %s (ran on lane %d): %s", c->what, li.name,
                 weft_status_str(sr), ran, weft_fabric_last_error(f));
        for (int o = 0; o < c->nout && sr == WEFT_OK && sc == WEFT_OK; o++) {
          if (!c->out[o].given) continue;
          size_t n = numel(&c->out[o]), bad = n;
          for (size_t e = 0; e < n && bad == n; e++)
            if (memcmp((uint8_t *)want[o] + 4 * e, (uint8_t *)got[o] + 4 * e, 4)) bad = e;
          uint32_t wb = 0, gb = 0;
          if (bad < n) memcpy(&wb, (uint8_t *)want[o] + 4 * bad, 4), memcpy(&gb, (uint8_t *)got[o] + 4 * bad, 4);
          TU_CHECK(bad == n, "%s on %s: output %d has the local cpu lane's bits (element %zu: 0x%08x, want 0x%08x)",
                   c->what, li.name, o, bad, (unsigned)gb, (unsigned)wb);
        }
        if (sr == WEFT_OK) covered |= WEFT_OP_BIT(c->kind);
      }
      for (int o = 0; o < WEFT_OP_MAX_OUT; o++) free(want[o]), free(got[o]);
    }
  }
  TU_CHECK(remotes >= 1, "the worker's lanes are in the fabric");
  TU_CHECK((covered & (WEFT_OPS_ALL & ~WEFT_OPS_V1)) == (WEFT_OPS_ALL & ~WEFT_OPS_V1),
           "every op beyond the version-1 set ran on a remote lane (covered 0x%llx)", (unsigned long long)covered);
  if (want_vulkan) TU_CHECK(remotes >= 2, "the worker's Vulkan lane is a remote lane too");
  /* Routed, in a fabric of the worker's lanes only: the router sends each op to a lane that offers it (the
   * worker's CPU; its Vulkan lane offers the version-1 set), with the local CPU's bits. */
  weft_fabric_desc d2 = tu_desc();
  d2.lanes = "remote";
  d2.remote = addr;
  weft_fabric *g = NULL;
  TU_STATUS(weft_fabric_open(&d2, &g), WEFT_OK, "open a fabric of remote lanes only");
  for (int k = 0; g && k < ncases; k++) {
    const tcase *c = &cs[k];
    void *want[WEFT_OP_MAX_OUT] = {0}, *got[WEFT_OP_MAX_OUT] = {0};
    int ran_cpu = -1, ran = -1;
    weft_status sc = run_on(f, c, (int)cpu, want, &ran_cpu);
    weft_status sr = run_on(g, c, WEFT_LANE_AUTO, got, &ran);
    weft_lane_info li;
    int offers = ran >= 0 && weft_fabric_lane_info(g, (size_t)ran, &li) == WEFT_OK && (li.ops & WEFT_OP_BIT(c->kind));
    TU_CHECK(sc == WEFT_OK && sr == WEFT_OK && offers, "%s routed among remote lanes: %s, on a lane that offers it",
             c->what, weft_status_str(sr));
    for (int o = 0; o < c->nout && sr == WEFT_OK && sc == WEFT_OK; o++)
      if (c->out[o].given)
        TU_CHECK(memcmp(want[o], got[o], 4 * numel(&c->out[o])) == 0, "%s routed: output %d has the cpu lane's bits",
                 c->what, o);
    for (int o = 0; o < WEFT_OP_MAX_OUT; o++) free(want[o]), free(got[o]);
  }
  weft_fabric_close(g);
  weft_fabric_close(f);
}

/* ------------------------------------------------------------------------------------------ hostile */

static int serving(int fd) { return nt_call(fd, WEFT_NET_LANES, NULL, 0, NULL, NULL) == 0; }

/* Sends an OP and returns its status; *msg (may be NULL) receives the reply's text. */
static int op_call(int fd, const weft_net_request *r, size_t len_adjust, char *msg, size_t msgcap) {
  uint8_t pl[WEFT_NET_OP_MAX_BYTES + 64];
  memset(pl, 0, sizeof pl);
  size_t n = weft_net_op_encode(r, pl);
  uint8_t *reply = NULL;
  uint32_t rl = 0;
  int st = nt_call(fd, WEFT_NET_OP, pl, (uint32_t)(n + len_adjust), &reply, &rl);
  if (msg && msgcap) snprintf(msg, msgcap, "%.*s", reply ? (int)rl : 0, reply ? (const char *)reply : "");
  free(reply);
  return st;
}

static void test_hostile(int port) {
  int fd = nt_connect(port);
  TU_CHECK(fd >= 0 && nt_hello(fd, NULL) == 0, "hello at protocol 2");
  if (fd < 0) return;
  int64_t d6[1] = {6}, dl[2] = {6, V};
  uint64_t logits = nt_create(fd, 2, dl), tgt_f = nt_create(fd, 1, d6), tgt_i = nt_create_typed(fd, WEFT_DTYPE_I32, 1, d6);
  uint64_t losses = nt_create(fd, 1, d6);
  TU_CHECK(logits && tgt_f && tgt_i && losses, "tensors created (f32 and i32)");
  int32_t ti[6] = {0, 1, 2, 3, 4, 10};
  TU_CHECK(nt_write(fd, tgt_i, (const float *)(const void *)ti, 6) == 0, "i32 targets written as bits");
  char msg[600];
  weft_net_request r;
  /* A well-formed crossentropy first: the frames below differ from it in one thing each. */
  memset(&r, 0, sizeof r);
  r.op = WEFT_OP_CROSSENTROPY;
  r.lane = -1;
  r.nin = 2, r.nout = 1;
  r.handles[WEFT_NET_IN(0)] = logits, r.handles[WEFT_NET_IN(1)] = tgt_i, r.handles[WEFT_NET_OUT(0)] = losses;
  TU_CHECK(op_call(fd, &r, 0, msg, sizeof msg) == 0, "crossentropy with i32 targets runs (%s)", msg);
  weft_net_request h = r;
  h.handles[WEFT_NET_IN(1)] = tgt_f;
  int st = op_call(fd, &h, 0, msg, sizeof msg);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT && strstr(msg, "i32"), "an f32 handle in an i32 slot: refused (%d: %s)", st,
           msg);
  h = r, h.nin = 3;
  st = op_call(fd, &h, 0, msg, sizeof msg);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "nin beyond the table's slots (%d: %s)", st, msg);
  h = r, h.nout = 4;
  st = op_call(fd, &h, 0, msg, sizeof msg);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "nout beyond the table's slots (%d: %s)", st, msg);
  h = r, h.op = (weft_op_kind)WEFT_OP_COUNT;
  st = op_call(fd, &h, 0, msg, sizeof msg);
  TU_CHECK(st == WEFT_ERR_UNSUPPORTED, "kind beyond the table (%d: %s)", st, msg);
  h = r, h.op = (weft_op_kind)250;
  TU_CHECK(op_call(fd, &h, 0, NULL, 0) == WEFT_ERR_UNSUPPORTED, "kind 250");
  st = op_call(fd, &r, 4, msg, sizeof msg);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "a payload longer than its operands say (%d: %s)", st, msg);
  h = r, h.shape_ndim[WEFT_NET_IN(0)] = 2, h.shape_dims[WEFT_NET_IN(0)][0] = 7, h.shape_dims[WEFT_NET_IN(0)][1] = V;
  st = op_call(fd, &h, 0, msg, sizeof msg);
  TU_CHECK(st == WEFT_ERR_SHAPE, "a view past its tensor (%d: %s)", st, msg);
  h = r, h.nin = 1;
  st = op_call(fd, &h, 0, msg, sizeof msg);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "a required input left off (%d: %s)", st, msg);
  h = r, h.flags = 1;
  TU_CHECK(op_call(fd, &h, 0, NULL, 0) == WEFT_ERR_INVALID_ARGUMENT, "op flags are reserved");
  /* Indices out of range: refused before any kernel reads them. */
  int32_t bad[6] = {0, 1, 2, 3, 4, V};
  TU_CHECK(nt_write(fd, tgt_i, (const float *)(const void *)bad, 6) == 0, "write an index out of range");
  st = op_call(fd, &r, 0, msg, sizeof msg);
  TU_CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "a target index past V is refused (%d: %s)", st, msg);
  /* Parameters the validator refuses: garbage heads, a perm that is no permutation, a slice past dst. */
  int64_t dq[3] = {2, 3, 24}, dout[3] = {2, 3, 8}, datt[4] = {2, 2, 3, 3};
  uint64_t qkv = nt_create(fd, 3, dq), ao = nt_create(fd, 3, dout), att = nt_create(fd, 4, datt);
  memset(&h, 0, sizeof h);
  h.op = WEFT_OP_ATTENTION, h.lane = -1, h.nin = 1, h.nout = 2;
  h.handles[WEFT_NET_IN(0)] = qkv, h.handles[WEFT_NET_OUT(0)] = ao, h.handles[WEFT_NET_OUT(1)] = att;
  h.params.i[0] = 2;
  TU_CHECK(op_call(fd, &h, 0, msg, sizeof msg) == 0, "attention with 2 heads runs (%s)", msg);
  const int64_t garbage[] = {0, 3, -1, (int64_t)1 << 40, INT64_MIN};
  for (size_t g = 0; g < sizeof garbage / sizeof garbage[0]; g++) {
    h.params.i[0] = garbage[g];
    st = op_call(fd, &h, 0, msg, sizeof msg);
    TU_CHECK(st != 0, "attention with %lld heads refused (%d: %s)", (long long)garbage[g], st, msg);
  }
  memset(&h, 0, sizeof h);
  h.op = WEFT_OP_PERMUTE, h.lane = -1, h.nin = 1, h.nout = 1;
  h.handles[WEFT_NET_IN(0)] = ao, h.handles[WEFT_NET_OUT(0)] = ao;
  h.params.i[0] = 9, h.params.i[1] = -1, h.params.i[2] = 0;
  st = op_call(fd, &h, 0, msg, sizeof msg);
  TU_CHECK(st != 0, "permute with a perm of garbage refused (%d: %s)", st, msg);
  memset(&h, 0, sizeof h);
  h.op = WEFT_OP_COPY_SLICE, h.lane = -1, h.nin = 1, h.nout = 1;
  h.handles[WEFT_NET_IN(0)] = ao, h.handles[WEFT_NET_OUT(0)] = qkv;
  h.params.i[0] = 2, h.params.i[1] = 20;
  st = op_call(fd, &h, 0, msg, sizeof msg);
  TU_CHECK(st != 0, "copy_slice past dst's extent refused (%d: %s)", st, msg);
  h.params.i[0] = 7, h.params.i[1] = INT64_MIN;
  TU_CHECK(op_call(fd, &h, 0, NULL, 0) != 0, "copy_slice on axis 7 refused");
  memset(&h, 0, sizeof h);
  h.op = WEFT_OP_LAYERNORM, h.lane = -1, h.nin = 3, h.nout = 1;
  h.handles[WEFT_NET_IN(0)] = ao, h.handles[WEFT_NET_IN(1)] = qkv, h.handles[WEFT_NET_IN(2)] = qkv;
  h.handles[WEFT_NET_OUT(0)] = ao;
  st = op_call(fd, &h, 0, msg, sizeof msg);
  TU_CHECK(st == WEFT_ERR_SHAPE || st == WEFT_ERR_INVALID_ARGUMENT, "layernorm with gamma of the wrong shape (%d: %s)",
           st, msg);
  /* RETYPE: an unknown handle, an unknown dtype. */
  uint8_t rt[12];
  weft_net_put64(rt, 0xdeadull);
  weft_net_put32(rt + 8, WEFT_DTYPE_I32);
  TU_CHECK(nt_call(fd, WEFT_NET_RETYPE, rt, 12, NULL, NULL) == WEFT_ERR_NOT_FOUND, "retype of no handle");
  weft_net_put64(rt, tgt_f);
  weft_net_put32(rt + 8, 7);
  TU_CHECK(nt_call(fd, WEFT_NET_RETYPE, rt, 12, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT, "retype to dtype 7");
  weft_net_put32(rt + 8, WEFT_DTYPE_I32);
  TU_CHECK(nt_call(fd, WEFT_NET_RETYPE, rt, 12, NULL, NULL) == 0, "retype to i32");
  TU_CHECK(nt_write(fd, tgt_f, (const float *)(const void *)ti, 6) == 0, "its bits written");
  h = r, h.handles[WEFT_NET_IN(1)] = tgt_f;
  TU_CHECK(op_call(fd, &h, 0, msg, sizeof msg) == 0, "the retyped handle serves as i32 targets (%s)", msg);
  TU_CHECK(serving(fd), "the connection still serves after every refusal");
  close(fd);
  /* A client of protocol 1: refused with what to do, and closed. */
  fd = nt_connect(port);
  uint8_t hello[8];
  weft_net_put32(hello, 1);
  weft_net_put32(hello + 4, WEFT_NET_CAP_AUTH_HMAC_SHA256);
  uint8_t *reply = NULL;
  uint32_t rl = 0;
  st = nt_call(fd, WEFT_NET_HELLO, hello, 8, &reply, &rl);
  snprintf(msg, sizeof msg, "%.*s", reply ? (int)rl : 0, reply ? (const char *)reply : "");
  free(reply);
  TU_CHECK(st == WEFT_ERR_UNSUPPORTED && strstr(msg, "this worker speaks protocol 2; update the client"),
           "a protocol-1 hello is refused with a reason (%d: %s)", st, msg);
  TU_CHECK(nt_closed(fd), "and its connection closed");
  close(fd);
  /* The worker keeps serving. */
  fd = nt_connect(port);
  TU_CHECK(fd >= 0 && nt_hello(fd, NULL) == 0 && serving(fd), "a new client is served after all that");
  if (fd >= 0) close(fd);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_net_ops_v2 PATH_TO_WEFT\n");
    return 2;
  }
  double t0 = tu_now();
  nt_worker w;
  /* The worker's CPU lane, and its Vulkan lane where a driver is present (the lane then comes up). */
  const char *extra[] = {"--lanes", "cpu,vulkan", NULL};
  if (!nt_start(argv[1], extra, &w)) {
    fprintf(stderr, "cannot start a worker\n");
    return 1;
  }
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);
  weft_fabric *probe = NULL;
  int vulkan = 0;
  if (tu_open("vulkan", &probe) == WEFT_OK) {
    vulkan = weft_fabric_lane_count(probe) > 0;
    weft_fabric_close(probe);
  }
  test_ops(addr, vulkan);
  test_hostile(w.port);
  TU_CHECK(nt_alive(&w), "the worker survived");
  nt_stop(&w);
  return tu_finish("net_ops_v2", t0);
}
