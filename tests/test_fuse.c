/* test_fuse.c - the fusion window (src/lanes/fuse.h) on its own, with made-up buffers: which op sequences it
 * hands over fused and which one by one, always in the order they came; the aliasing, shape and contract
 * rules; what a failed emit leaves; the WEFT_FUSE switch. The kernels are the lanes' (tests/vulkan/test_vk_fuse.c
 * checks their bits). */
#include <stdlib.h>
#include <string.h>

#include "lanes/fuse.h"
#include "tutil.h"

/* What the window handed over, in order. */
typedef struct log_t {
  int n;
  weft_fused_kind kind[16];
  int nops[16];
  int held[16];
  weft_op_kind first[16];
  weft_buffer *bias[16], *res[16], *gelu[16];
  weft_status fail_with; /* returned by the next emit when set */
} log_t;

static weft_status emit(void *ctx, const weft_fused *f) {
  log_t *l = ctx;
  if (l->fail_with != WEFT_OK) {
    weft_status st = l->fail_with;
    l->fail_with = WEFT_OK;
    return st;
  }
  if (l->n < 16) {
    l->kind[l->n] = f->kind, l->nops[l->n] = f->nops, l->first[l->n] = f->ops[0].kind, l->held[l->n] = f->held;
    l->bias[l->n] = f->bias, l->res[l->n] = f->residual, l->gelu[l->n] = f->gelu_out;
  }
  l->n++;
  return WEFT_OK;
}

static char bufs[16];
#define BUF(i) ((weft_buffer *)&bufs[i])
enum { A = 0, B, C, BIAS, R, G, X2, Y, MEAN, RSTD, GAMMA, BETA, OTHER };

static weft_op matmul(int64_t m, int64_t n, int64_t k) {
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_MATMUL, op.contract = WEFT_CONTRACT_EXACT;
  op.in[0] = BUF(A), op.in[1] = BUF(B), op.out[0] = BUF(C);
  op.batch = 1, op.m = m, op.n = n, op.k = k;
  return op;
}

static weft_op add(int x, int y, int out, int64_t rows, int64_t cols, int bcast) {
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_ADD, op.contract = WEFT_CONTRACT_EXACT;
  op.in[0] = BUF(x), op.in[1] = BUF(y), op.out[0] = BUF(out);
  op.rows = rows, op.cols = cols, op.y_broadcast = bcast;
  return op;
}

static weft_op gelu(int x, int y, int64_t n) {
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_GELU, op.contract = WEFT_CONTRACT_EXACT;
  op.in[0] = BUF(x), op.out[0] = BUF(y), op.iparam[0] = n;
  return op;
}

static weft_op layernorm(int x, int y, int64_t N, int64_t Cc) {
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_LAYERNORM, op.contract = WEFT_CONTRACT_EXACT;
  op.in[0] = BUF(x), op.in[1] = BUF(GAMMA), op.in[2] = BUF(BETA);
  op.out[0] = BUF(y), op.out[1] = BUF(MEAN), op.out[2] = BUF(RSTD);
  op.iparam[0] = N, op.iparam[1] = Cc;
  return op;
}

/* Runs the ops through a fresh window and flushes it; returns the log. */
static log_t run(const weft_op *ops, int n) {
  weft_fuse z;
  weft_fuse_init(&z, WEFT_FUSE_MATMUL_EPILOGUE | WEFT_FUSE_ADD_LAYERNORM, WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT));
  log_t l;
  memset(&l, 0, sizeof l);
  for (int i = 0; i < n; i++) TU_STATUS(weft_fuse_run(&z, &ops[i], emit, &l), WEFT_OK, "weft_fuse_run");
  TU_STATUS(weft_fuse_flush(&z, emit, &l), WEFT_OK, "weft_fuse_flush");
  TU_CHECK(z.n == 0, "the window holds %d ops after a flush", z.n);
  return l;
}

/* The log is `n` emits of these sizes (nops; kind fused when > 1). */
static void expect(const char *what, const log_t *l, int n, const int *nops) {
  TU_CHECK(l->n == n, "%s: %d emits, expected %d", what, l->n, n);
  int total = 0;
  for (int i = 0; i < n && i < l->n; i++) {
    TU_CHECK(l->nops[i] == nops[i], "%s: emit %d stands for %d ops, expected %d", what, i, l->nops[i], nops[i]);
    TU_CHECK((l->kind[i] == WEFT_FUSED_SINGLE) == (nops[i] == 1), "%s: emit %d kind %d", what, i, (int)l->kind[i]);
    total += l->nops[i];
  }
  (void)total;
}

int main(void) {
  double t0 = tu_now();
  const int64_t M = 3, N = 8, K = 5;

  { /* the whole epilogue, in one kernel, its buffers named */
    weft_op ops[] = {matmul(M, N, K), add(C, BIAS, C, M, N, 1), add(C, R, C, M, N, 0), gelu(C, G, M * N)};
    log_t l = run(ops, 4);
    expect("matmul+bias+residual+gelu", &l, 1, (int[]){4});
    TU_CHECK(l.kind[0] == WEFT_FUSED_MATMUL_EPILOGUE && l.bias[0] == BUF(BIAS) && l.res[0] == BUF(R) &&
                 l.gelu[0] == BUF(G),
             "matmul+bias+residual+gelu: the fused description's buffers");
    /* the gelu completed it in its own call: the three before it had been accepted */
    TU_CHECK(l.held[0] == 3, "matmul+bias+residual+gelu: %d ops held, expected 3", l.held[0]);
  }
  { /* a prefix, then what does not extend it: the prefix first, in order */
    weft_op ops[] = {matmul(M, N, K), add(C, BIAS, C, M, N, 1), matmul(M, N, K), gelu(C, G, M * N)};
    log_t l = run(ops, 4);
    expect("matmul+bias, matmul+gelu", &l, 2, (int[]){2, 2});
    TU_CHECK(l.held[0] == 2 && l.held[1] == 1, "matmul+bias, matmul+gelu: held %d and %d, expected 2 and 1",
             l.held[0], l.held[1]);
    TU_CHECK(l.bias[0] == BUF(BIAS) && !l.res[0] && !l.gelu[0] && l.gelu[1] == BUF(G) && !l.bias[1],
             "matmul+bias, matmul+gelu: the epilogues");
  }
  { /* the order is fixed: a bias after the residual, or a second residual, ends the epilogue */
    weft_op ops[] = {matmul(M, N, K), add(C, R, C, M, N, 0), add(C, BIAS, C, M, N, 1)};
    log_t l = run(ops, 3);
    expect("residual then bias", &l, 2, (int[]){2, 1});
    weft_op ops2[] = {matmul(M, N, K), add(C, R, C, M, N, 0), add(C, OTHER, C, M, N, 0)};
    l = run(ops2, 3);
    expect("two residuals", &l, 2, (int[]){2, 1});
    TU_CHECK(l.held[1] == 1, "an add held for a layernorm and flushed: held %d, expected 1", l.held[1]);
    weft_op ops3[] = {matmul(M, N, K), add(C, BIAS, C, M, N, 1), add(OTHER, OTHER, OTHER, 1, 1, 1)};
    l = run(ops3, 3);
    expect("matmul+bias, broadcast add", &l, 2, (int[]){2, 1});
    TU_CHECK(l.held[1] == 0, "an op emitted in its own call: held %d, expected 0", l.held[1]);
  }
  { /* shapes: a bias row of the wrong width, a residual of another size, a gelu over part of c */
    weft_op ops[] = {matmul(M, N, K), add(C, BIAS, C, M * N / 2, 2, 1)};
    log_t l = run(ops, 2);
    expect("bias of another width", &l, 2, (int[]){1, 1});
    weft_op ops2[] = {matmul(M, N, K), add(C, R, C, M, N - 1, 0)};
    l = run(ops2, 2);
    expect("residual of another size", &l, 2, (int[]){1, 1});
    weft_op ops3[] = {matmul(M, N, K), gelu(C, G, M * N - 1)};
    l = run(ops3, 2);
    expect("gelu over part of c", &l, 2, (int[]){1, 1});
    weft_op ops4[] = {matmul(M, N, 0), add(C, BIAS, C, M, N, 1)};
    l = run(ops4, 2);
    expect("k = 0", &l, 2, (int[]){1, 1});
  }
  { /* aliasing */
    weft_op ops[] = {matmul(M, N, K), add(C, C, C, M, N, 0)};
    log_t l = run(ops, 2);
    expect("residual is c", &l, 2, (int[]){1, 1});
    weft_op ops2[] = {matmul(M, N, K), gelu(C, C, M * N)};
    l = run(ops2, 2);
    expect("gelu in place", &l, 2, (int[]){1, 1});
    weft_op ops3[] = {matmul(M, N, K), add(C, R, C, M, N, 0), gelu(C, R, M * N)};
    l = run(ops3, 3);
    expect("gelu into the residual", &l, 2, (int[]){2, 1});
    weft_op ops4[] = {matmul(M, N, K), gelu(C, A, M * N)};
    l = run(ops4, 2);
    expect("gelu into a", &l, 2, (int[]){1, 1});
    weft_op ops5[] = {matmul(M, N, K), add(R, BIAS, C, M, N, 1)};
    l = run(ops5, 2);
    expect("an add into c not from c", &l, 2, (int[]){1, 1});
    weft_op mm = matmul(M, N, K);
    mm.out[0] = BUF(A);
    weft_op ops6[] = {mm, add(A, BIAS, A, M, N, 1)};
    l = run(ops6, 2);
    expect("c is a", &l, 2, (int[]){1, 1});
  }
  { /* contracts, dtypes, results streamed home */
    weft_op ops[] = {matmul(M, N, K), add(C, BIAS, C, M, N, 1)};
    ops[1].contract = WEFT_CONTRACT_FP32;
    log_t l = run(ops, 2);
    expect("contracts differ", &l, 2, (int[]){1, 1});
    ops[0].contract = WEFT_CONTRACT_FP32;
    l = run(ops, 2);
    expect("a contract the lane does not fuse", &l, 2, (int[]){1, 1});
    weft_op ops2[] = {matmul(M, N, K), add(C, BIAS, C, M, N, 1)};
    ops2[1].in_dtype[1] = WEFT_DTYPE_I32;
    l = run(ops2, 2);
    expect("an int32 operand", &l, 2, (int[]){1, 1});
    weft_op ops3[] = {matmul(M, N, K), add(C, BIAS, C, M, N, 1)};
    ops3[0].out_host[0] = bufs;
    l = run(ops3, 2);
    expect("a result streamed home", &l, 2, (int[]){1, 1});
  }
  { /* add + layernorm */
    weft_op ops[] = {add(A, B, X2, M, N, 0), layernorm(X2, Y, M, N)};
    log_t l = run(ops, 2);
    expect("add+layernorm", &l, 1, (int[]){2});
    TU_CHECK(l.kind[0] == WEFT_FUSED_ADD_LAYERNORM && l.first[0] == WEFT_OP_ADD, "add+layernorm: kind");
    weft_op ops2[] = {add(X2, B, X2, M, N, 0), layernorm(X2, Y, M, N)};
    l = run(ops2, 2);
    expect("add in place + layernorm", &l, 1, (int[]){2});
    weft_op ops3[] = {add(A, B, X2, M, N, 1), layernorm(X2, Y, M, N)};
    l = run(ops3, 2);
    expect("broadcast add + layernorm", &l, 2, (int[]){1, 1});
    weft_op ops4[] = {add(A, B, X2, M, N, 0), layernorm(A, Y, M, N)};
    l = run(ops4, 2);
    expect("layernorm of another tensor", &l, 2, (int[]){1, 1});
    weft_op ops5[] = {add(A, B, X2, M, N, 0), layernorm(X2, B, M, N)};
    l = run(ops5, 2);
    expect("layernorm into the add's input", &l, 2, (int[]){1, 1});
    weft_op ops6[] = {add(A, B, X2, M, N, 0), layernorm(X2, Y, M, N)};
    ops6[1].out[1] = BUF(A);
    l = run(ops6, 2);
    expect("mean into the add's input", &l, 2, (int[]){1, 1});
    weft_op ops7[] = {add(A, B, X2, M, N, 0), layernorm(X2, Y, M, N)};
    ops7[1].out[1] = ops7[1].out[2] = NULL;
    l = run(ops7, 2);
    expect("add+layernorm without mean and rstd", &l, 1, (int[]){2});
    weft_op ops8[] = {add(A, B, X2, M, N, 0), layernorm(X2, Y, M, N)};
    ops8[1].in[1] = BUF(X2);
    l = run(ops8, 2);
    expect("gamma is x2", &l, 2, (int[]){1, 1});
  }
  { /* gpt.c's sublayer: the residual goes into the matmul, the layernorm runs alone */
    weft_op ops[] = {matmul(M, N, K), add(C, BIAS, C, M, N, 1), add(C, R, C, M, N, 0), layernorm(C, Y, M, N)};
    log_t l = run(ops, 4);
    expect("matmul+bias+residual, layernorm", &l, 2, (int[]){3, 1});
  }
  { /* uses(), a failed emit, a pass-through window */
    weft_fuse z;
    weft_fuse_init(&z, WEFT_FUSE_MATMUL_EPILOGUE | WEFT_FUSE_ADD_LAYERNORM, WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT));
    log_t l;
    memset(&l, 0, sizeof l);
    weft_op mm = matmul(M, N, K), b = add(C, BIAS, C, M, N, 1), other = add(OTHER, OTHER, OTHER, 1, 1, 1);
    TU_STATUS(weft_fuse_run(&z, &mm, emit, &l), WEFT_OK, "hold the matmul");
    TU_STATUS(weft_fuse_run(&z, &b, emit, &l), WEFT_OK, "hold the bias add");
    TU_CHECK(l.n == 0 && z.n == 2, "two ops held, none emitted (%d emitted)", l.n);
    TU_CHECK(weft_fuse_uses(&z, BUF(A)) && weft_fuse_uses(&z, BUF(BIAS)) && weft_fuse_uses(&z, BUF(C)) &&
                 !weft_fuse_uses(&z, BUF(G)) && !weft_fuse_uses(&z, NULL),
             "uses() names the held ops' buffers and no others");
    l.fail_with = WEFT_ERR_LANE_FAILED;
    TU_STATUS(weft_fuse_run(&z, &other, emit, &l), WEFT_ERR_LANE_FAILED, "a failed emit's status comes back");
    TU_CHECK(z.n == 0 && l.n == 0, "after a failed emit the window is empty (%d held)", z.n);
    weft_fuse_init(&z, 0, WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT));
    TU_STATUS(weft_fuse_run(&z, &mm, emit, &l), WEFT_OK, "pass-through");
    TU_CHECK(z.n == 0 && l.n == 1 && l.kind[0] == WEFT_FUSED_SINGLE, "with no patterns every op passes through");
  }
  { /* the switch */
    unsetenv("WEFT_FUSE");
    TU_CHECK(weft_fuse_env_enabled(), "WEFT_FUSE unset: on");
    const char *off[] = {"0", "off", "OFF", "no", "false"}, *on[] = {"1", "on", "yes", ""};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
      setenv("WEFT_FUSE", off[i], 1);
      TU_CHECK(!weft_fuse_env_enabled(), "WEFT_FUSE=%s: off", off[i]);
    }
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
      setenv("WEFT_FUSE", on[i], 1);
      TU_CHECK(weft_fuse_env_enabled(), "WEFT_FUSE=%s: on", on[i]);
    }
    unsetenv("WEFT_FUSE");
  }
  return tu_finish("test_fuse", t0);
}
