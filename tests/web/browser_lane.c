/* browser_lane.c - browser lanes end to end: a fabric listens for tabs on an ephemeral loopback port,
 * headless Chromium opens the worker page (browser_lane_tab.mjs drives it), browser:0 comes up, and every
 * op of the allow-list pinned to it returns the CPU lane's bits. Then the page is closed in the middle of
 * a run of auto-routed ops that prefer the tab: every result is still right, the ops move to the CPU, and
 * the lane is down; a new tab brings it back.
 *
 *   browser_lane NODE DRIVER WEB_DIR              the test (exit 77 when Chromium or playwright-core is missing)
 *   browser_lane NODE DRIVER WEB_DIR --bench WEFT also times a tiny op's round trip through browser:0 and
 *                                                 through a remote lane of a `weft worker` on loopback */
#define _GNU_SOURCE
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tutil.h"
#include "weft.h"

/* ------------------------------------------------------------------------------------- the tab driver */

typedef struct driver {
  pid_t pid;
  FILE *in, *out; /* its stdin (our commands), its stdout (its answers) */
} driver;

/* Starts argv[0] with argv, its stdin and stdout piped to us. */
static int driver_spawn(driver *d, char *const argv[]) {
  int to[2], from[2];
  memset(d, 0, sizeof *d);
  if (pipe(to) || pipe(from)) return 0;
  d->pid = fork();
  if (d->pid < 0) return 0;
  if (d->pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[1]);
    close(from[0]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  d->in = fdopen(to[1], "w");
  d->out = fdopen(from[0], "r");
  return d->in && d->out;
}

static int driver_start(driver *d, const char *node, const char *script, const char *url) {
  char *argv[] = {(char *)node, (char *)script, "--url", (char *)url, NULL};
  return driver_spawn(d, argv);
}

/* The driver's next line (without the newline) into buf; 0 when it exited or said nothing for 40 s. */
static int driver_line(driver *d, char *buf, size_t n) {
  buf[0] = 0;
  struct pollfd pfd = {fileno(d->out), POLLIN, 0};
  if (poll(&pfd, 1, 40000) <= 0 || !fgets(buf, (int)n, d->out)) return 0;
  buf[strcspn(buf, "\n")] = 0;
  return 1;
}

static void driver_say(driver *d, const char *cmd) {
  fprintf(d->in, "%s\n", cmd);
  fflush(d->in);
}

static int driver_stop(driver *d) {
  int status = 0;
  if (d->in) {
    driver_say(d, "quit");
    fclose(d->in);
  }
  if (d->out) fclose(d->out);
  if (d->pid > 0 && waitpid(d->pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ------------------------------------------------------------------------------------------ helpers */

static int lane_up(weft_fabric *f, size_t lane) {
  weft_lane_info li;
  return weft_fabric_lane_info(f, lane, &li) == WEFT_OK && !li.failed;
}

/* Asks the down lanes until `lane` is up or the deadline passes. */
static int wait_up(weft_fabric *f, size_t lane, double seconds) {
  double end = tu_now() + seconds;
  while (tu_now() < end) {
    weft_fabric_revive(f, NULL);
    if (lane_up(f, lane)) return 1;
    usleep(20000);
  }
  return 0;
}

static weft_tensor *tensor(weft_fabric *f, int ndim, const int64_t *dims, tu_rng *r, float lo, float hi) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)dims[i];
  float *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = tu_rng_float(r, lo, hi);
  weft_tensor *t = NULL;
  weft_tensor_create(f, ndim, dims, x, &t);
  free(x);
  return t;
}

/* Sets the first n elements of a float tensor (the rest keep their values). */
static void poke(weft_tensor *t, const float *v, size_t n) {
  size_t numel = weft_tensor_numel(t);
  float *x = malloc((numel ? numel : 1) * sizeof *x);
  TU_STATUS(weft_tensor_read(t, x, numel), WEFT_OK, "read a tensor to change some of its elements");
  memcpy(x, v, n * sizeof *x);
  TU_STATUS(weft_tensor_write(t, x, numel), WEFT_OK, "write it back");
  free(x);
}

/* 1 when two tensors hold the same bits, NaNs included (every exact lane stores the canonical 0x7fc00000);
 * names the first difference otherwise. */
static int same(weft_tensor *a, weft_tensor *b, const char *what) {
  size_t n = weft_tensor_numel(a);
  float *x = malloc((n ? n : 1) * 4), *y = malloc((n ? n : 1) * 4);
  int ok = weft_tensor_read(a, x, n) == WEFT_OK && weft_tensor_read(b, y, n) == WEFT_OK;
  for (size_t i = 0; ok && i < n; i++)
    if (tu_bits(x[i]) != tu_bits(y[i])) {
      printf("  %s: element %zu is 0x%08x on the tab, 0x%08x on the CPU\n", what, i, (unsigned)tu_bits(x[i]),
             (unsigned)tu_bits(y[i]));
      ok = 0;
    }
  free(x);
  free(y);
  return ok;
}

/* a^T.a (trans_a) or a.a^T of a rows x cols random matrix, on the tab and on the CPU: the same bits. */
static void tab_matmul_matches(weft_fabric *f, size_t tab, size_t cpu, int64_t rows, int64_t cols, int trans_a,
                               uint64_t seed, const char *what) {
  tu_rng r = {seed};
  int64_t dd[2] = {rows, cols}, n = trans_a ? cols : rows, cd[2] = {n, n};
  weft_tensor *a = tensor(f, 2, dd, &r, -1, 1), *c1 = NULL, *c2 = NULL;
  weft_tensor_create(f, 2, cd, NULL, &c1);
  weft_tensor_create(f, 2, cd, NULL, &c2);
  weft_op_desc on_tab = WEFT_OP_DESC_INIT, on_cpu = WEFT_OP_DESC_INIT;
  on_tab.lane = (int)tab;
  on_cpu.lane = (int)cpu;
  TU_STATUS(weft_op_matmul(f, &on_tab, a, trans_a, a, !trans_a, c1), WEFT_OK, what);
  TU_STATUS(weft_op_matmul(f, &on_cpu, a, trans_a, a, !trans_a, c2), WEFT_OK, "the same matmul on the CPU");
  TU_CHECK(same(c1, c2, what), "%s: its bits equal the CPU lane's", what);
  weft_tensor_destroy(a), weft_tensor_destroy(c1), weft_tensor_destroy(c2);
}


/* ------------------------------------------------------------------------------------------ the ops */

/* The values where a transcription would slip: NaN (with a payload and the sign bit: the tab must store the
 * canonical NaN, not the one its arithmetic made), infinities, signed zeros, subnormals, the largest floats;
 * an empty batch. */
static void check_edges(weft_fabric *f, const weft_op_desc *on_tab, const weft_op_desc *on_cpu) {
  float v[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f, 3.4e38f, -3.4e38f, 1.0f, -1.0f, 88.0f,
                     -104.0f, 1e-30f, 0.5f, 2.0f};
  v[0] = tu_float(0xffc00001u);
  int64_t d[2] = {4, 4};
  weft_tensor *x = NULL, *o[2] = {0}, *sr[2] = {0}, *g[2] = {0}, *t = NULL;
  weft_tensor_create(f, 2, d, v, &x);
  float tv[16];
  for (int i = 0; i < 16; i++) tv[i] = i % 4 == 0 ? 1.0f : 0.0f;
  weft_tensor_create(f, 2, d, tv, &t);
  int64_t four[1] = {4};
  for (int k = 0; k < 2; k++) {
    weft_tensor_create(f, 2, d, NULL, &o[k]);
    weft_tensor_create(f, 2, d, NULL, &g[k]);
    weft_tensor_create(f, 1, four, NULL, &sr[k]);
  }
  const char *names[] = {"add", "relu", "relu_backward", "scale", "axpy", "sum_rows", "softmax_xent"};
  for (int op = 0; op < 7; op++) {
    for (int k = 0; k < 2; k++) {
      const weft_op_desc *od = k ? on_cpu : on_tab;
      weft_status st = WEFT_OK;
      switch (op) {
      case 0: st = weft_op_add(f, od, x, x, o[k]); break;
      case 1: st = weft_op_relu(f, od, x, o[k]); break;
      case 2: st = weft_op_relu_backward(f, od, x, x, o[k]); break;
      case 3: st = weft_op_scale(f, od, 1e-10f, x, o[k]); break;
      case 4:
        weft_tensor_write(o[k], v, 16);
        st = weft_op_axpy(f, od, -3.0f, x, o[k]);
        break;
      case 5: st = weft_op_sum_rows(f, od, x, sr[k]); break;
      case 6: st = weft_op_softmax_xent(f, od, x, t, NULL, g[k]); break;
      }
      TU_STATUS(st, WEFT_OK, names[op]);
    }
    char what[64];
    snprintf(what, sizeof what, "%s of NaN, inf, -0, subnormals", names[op]);
    weft_tensor **r = op == 5 ? sr : op == 6 ? g : o;
    TU_CHECK(same(r[0], r[1], what), "%s: the tab's bits equal the CPU lane's", what);
  }
  /* An empty batch: nothing to compute, and nothing may break. */
  int64_t ad[3] = {0, 5, 3}, bd[2] = {3, 4}, cd[3] = {0, 5, 4};
  weft_tensor *a = NULL, *b = NULL, *c = NULL;
  weft_tensor_create(f, 3, ad, NULL, &a);
  weft_tensor_create(f, 2, bd, NULL, &b);
  weft_tensor_create(f, 3, cd, NULL, &c);
  TU_STATUS(weft_op_matmul(f, on_tab, a, 0, b, 0, c), WEFT_OK, "matmul of an empty batch on the tab");
  weft_tensor *all[] = {x, t, o[0], o[1], sr[0], sr[1], g[0], g[1], a, b, c};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_tensor_destroy(all[i]);
}

/* Every op of the allow-list on the tab and on the CPU, compared bit for bit. */
static void check_ops(weft_fabric *f, int tab, int cpu) {
  tu_rng r = {tu_seed()};
  weft_op_desc on_tab = WEFT_OP_DESC_INIT, on_cpu = WEFT_OP_DESC_INIT;
  on_tab.lane = tab;
  on_cpu.lane = cpu;
  /* matmul: plain, batched with a shared b, both transposed, and one large enough for many GPU tiles. */
  struct {
    int64_t batch, m, k, n;
    int ta, tb, bb;
  } mm[] = {{1, 7, 5, 3, 0, 0, 0}, {3, 33, 47, 29, 0, 0, 0}, {2, 17, 19, 23, 1, 1, 1}, {1, 256, 200, 192, 0, 0, 0}};
  for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
    int64_t ad[3] = {mm[i].batch, mm[i].ta ? mm[i].k : mm[i].m, mm[i].ta ? mm[i].m : mm[i].k};
    int64_t bd[3] = {mm[i].batch, mm[i].tb ? mm[i].n : mm[i].k, mm[i].tb ? mm[i].k : mm[i].n};
    int64_t cd[3] = {mm[i].batch, mm[i].m, mm[i].n};
    weft_tensor *a = tensor(f, 3, ad, &r, -2, 2), *b = tensor(f, mm[i].bb ? 3 : 2, mm[i].bb ? bd : bd + 1, &r, -2, 2);
    weft_tensor *c1 = tensor(f, 3, cd, &r, 0, 0), *c2 = tensor(f, 3, cd, &r, 0, 0);
    char what[96];
    snprintf(what, sizeof what, "matmul %lldx[%lldx%lld].[%lldx%lld]%s%s", (long long)mm[i].batch, (long long)mm[i].m,
             (long long)mm[i].k, (long long)mm[i].k, (long long)mm[i].n, mm[i].ta ? " trans_a" : "",
             mm[i].tb ? " trans_b" : "");
    TU_STATUS(weft_op_matmul(f, &on_tab, a, mm[i].ta, b, mm[i].tb, c1), WEFT_OK, what);
    TU_CHECK(weft_fabric_last_lane(f) == tab, "%s ran on the tab", what);
    TU_STATUS(weft_op_matmul(f, &on_cpu, a, mm[i].ta, b, mm[i].tb, c2), WEFT_OK, what);
    TU_CHECK(same(c1, c2, what), "%s: the tab's bits equal the CPU lane's", what);
    weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c1), weft_tensor_destroy(c2);
  }
  /* The elementwise ops on 37 x 53 with a wide range (exp underflow and large magnitudes included). */
  int64_t d[2] = {37, 53}, row[1] = {53}, one[1] = {1};
  weft_tensor *x = tensor(f, 2, d, &r, -60, 60), *y = tensor(f, 2, d, &r, -3, 3), *bias = tensor(f, 1, row, &r, -1, 1);
  weft_tensor *t = tensor(f, 2, d, &r, 0, 1);
  weft_tensor *o[2], *s[2], *l[2], *g[2];
  for (int k = 0; k < 2; k++) {
    o[k] = tensor(f, 2, d, &r, 0, 0);
    s[k] = tensor(f, 1, row, &r, 0, 0);
    l[k] = tensor(f, 1, one, &r, 0, 0);
    g[k] = tensor(f, 2, d, &r, 0, 0);
  }
  const char *names[] = {"add", "add (bias broadcast)", "relu", "relu_backward", "scale", "axpy", "sum_rows",
                         "softmax_xent"};
  for (int op = 0; op < 8; op++) {
    for (int k = 0; k < 2; k++) {
      const weft_op_desc *od = k ? &on_cpu : &on_tab;
      weft_status st = WEFT_OK;
      switch (op) {
      case 0: st = weft_op_add(f, od, x, y, o[k]); break;
      case 1: st = weft_op_add(f, od, x, bias, o[k]); break;
      case 2: st = weft_op_relu(f, od, x, o[k]); break;
      case 3: st = weft_op_relu_backward(f, od, y, x, o[k]); break;
      case 4: st = weft_op_scale(f, od, 0.3f, x, o[k]); break;
      case 5: {
        float *init = malloc(37 * 53 * 4);
        for (int i = 0; i < 37 * 53; i++) init[i] = (float)i * 0.01f;
        weft_tensor_write(o[k], init, 37 * 53);
        free(init);
        st = weft_op_axpy(f, od, -1.7f, x, o[k]);
        break;
      }
      case 6: st = weft_op_sum_rows(f, od, x, s[k]); break;
      case 7: st = weft_op_softmax_xent(f, od, x, t, l[k], g[k]); break;
      }
      TU_STATUS(st, WEFT_OK, names[op]);
      if (!k) TU_CHECK(weft_fabric_last_lane(f) == tab, "%s ran on the tab", names[op]);
    }
    if (op == 6) TU_CHECK(same(s[0], s[1], names[op]), "%s: the tab's bits equal the CPU lane's", names[op]);
    else if (op == 7) {
      TU_CHECK(same(l[0], l[1], "softmax_xent loss"), "softmax_xent loss: the tab's bits equal the CPU lane's");
      TU_CHECK(same(g[0], g[1], "softmax_xent grad"), "softmax_xent grad: the tab's bits equal the CPU lane's");
    } else {
      TU_CHECK(same(o[0], o[1], names[op]), "%s: the tab's bits equal the CPU lane's", names[op]);
    }
  }
  weft_tensor *all[] = {x, y, bias, t, o[0], o[1], s[0], s[1], l[0], l[1], g[0], g[1]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_tensor_destroy(all[i]);
  check_edges(f, &on_tab, &on_cpu);
}

/* The version-2 ops (the worker page runs them through weft.wasm): a small GPT-shaped chain of every one
 * of them, run with every op on the CPU lane (the baseline), every op pinned to the tab, routed
 * (WEFT_LANE_AUTO with the tab present) and alternating tab / CPU op by op: every result the same bits.
 * The first activation carries zeros of both signs, subnormals, a huge value and an infinity. */
enum { V2_B = 2, V2_T = 5, V2_C = 12, V2_NH = 3, V2_V = 7, V2_N = V2_B * V2_T, V2_RESULTS = 32 };

static weft_tensor *v2_make(weft_fabric *f, weft_tensor **keep, int *nkeep, int nd, int64_t d0, int64_t d1,
                            int64_t d2, int64_t d3, tu_rng *r, float lo, float hi) {
  int64_t d[4] = {d0, d1, d2, d3};
  weft_tensor *t = tensor(f, nd, d, r, lo, hi);
  keep[(*nkeep)++] = t;
  return t;
}

/* mode 0 cpu, 1 tab, 2 routed, 3 alternating; fills res[] with the results, returns how many. */
static int v2_chain(weft_fabric *f, int mode, int tab, int cpu, weft_tensor **res, weft_tensor **keep, int *nkeep) {
  tu_rng r = {4242};
  int step = 0;
  weft_op_desc od = WEFT_OP_DESC_INIT;
  const int B = V2_B, T = V2_T, C = V2_C, NH = V2_NH, V = V2_V, N = V2_N;
  int nres = 0;
#define MK(...) v2_make(f, keep, nkeep, __VA_ARGS__)
#define RUN(what, call)                                                                                    \
  do {                                                                                                     \
    od.lane = mode == 0 ? cpu : mode == 1 ? tab : mode == 2 ? WEFT_LANE_AUTO : (step % 2 ? cpu : tab);   \
    step++;                                                                                                \
    TU_STATUS(call, WEFT_OK, what);                                                                        \
    if (mode == 1) TU_CHECK(weft_fabric_last_lane(f) == tab, "%s ran on the tab", what);                   \
  } while (0)
  int32_t tok[V2_N], tgt[V2_N];
  for (int i = 0; i < N; i++) tok[i] = (i * 5 + 1) % V, tgt[i] = (i * 3 + 2) % V;
  int64_t nd[1] = {N}, bt[2] = {B, T};
  weft_tensor *ttok = NULL, *ttgt = NULL;
  weft_tensor_create_typed(f, WEFT_DTYPE_I32, 2, bt, NULL, &ttok);
  weft_tensor_create_typed(f, WEFT_DTYPE_I32, 1, nd, NULL, &ttgt);
  keep[(*nkeep)++] = ttok, keep[(*nkeep)++] = ttgt;
  weft_tensor_write_i32(ttok, tok, N);
  weft_tensor_write_i32(ttgt, tgt, N);
  weft_tensor *wte = MK(2, V, C, 0, 0, &r, -1, 1), *wpe = MK(2, T, C, 0, 0, &r, -1, 1);
  float sp[8] = {-0.0f, 1e-40f, -1e-40f, 0.0f, 1e30f, 1e-45f, -3e38f, 2.5f};
  poke(wte, sp, 8);
  weft_tensor *x = MK(3, B, T, C, 0, &r, 0, 0);
  RUN("embedding", weft_op_embedding(f, &od, ttok, NULL, wte, wpe, x));
  res[nres++] = x;
  weft_tensor *g = MK(1, C, 0, 0, 0, &r, 0.5f, 1.5f), *be = MK(1, C, 0, 0, 0, &r, -0.5f, 0.5f);
  weft_tensor *y = MK(3, B, T, C, 0, &r, 0, 0), *mean = MK(1, N, 0, 0, 0, &r, 0, 0), *rstd = MK(1, N, 0, 0, 0, &r, 0, 0);
  RUN("layernorm", weft_op_layernorm(f, &od, x, g, be, 1e-5f, y, mean, rstd));
  res[nres++] = y, res[nres++] = mean, res[nres++] = rstd;
  weft_tensor *qkv = MK(3, B, T, 3 * C, 0, &r, -2, 2);
  weft_tensor *att_out = MK(3, B, T, C, 0, &r, 0, 0), *att = MK(4, B, NH, T, T, &r, 0, 0), *pre = MK(4, B, NH, T, T, &r, 0, 0);
  RUN("attention", weft_op_attention(f, &od, qkv, NH, att_out, att, pre));
  res[nres++] = att_out, res[nres++] = att, res[nres++] = pre;
  weft_tensor *h = MK(3, B, T, C, 0, &r, 0, 0);
  RUN("gelu", weft_op_gelu(f, &od, y, h));
  res[nres++] = h;
  weft_tensor *probs = MK(4, B, NH, T, T, &r, 0, 0);
  RUN("causal_softmax", weft_op_causal_softmax(f, &od, pre, 0.5f, probs));
  res[nres++] = probs;
  /* the head: logits = x rows of V (a slice of the chain's values, to keep it small) */
  weft_tensor *logits = MK(2, N, V, 0, 0, &r, -8, 8), *losses = MK(1, N, 0, 0, 0, &r, 0, 0);
  RUN("crossentropy", weft_op_crossentropy(f, &od, logits, ttgt, losses));
  res[nres++] = losses;
  weft_tensor *dloss = MK(1, N, 0, 0, 0, &r, 0.1f, 0.1f), *dlogits = MK(2, N, V, 0, 0, &r, 0, 0);
  RUN("crossentropy_backward", weft_op_crossentropy_backward(f, &od, logits, ttgt, dloss, dlogits));
  res[nres++] = dlogits;
  weft_tensor *dprobs = MK(4, B, NH, T, T, &r, -1, 1), *dscores = MK(4, B, NH, T, T, &r, 0, 0);
  RUN("causal_softmax_backward", weft_op_causal_softmax_backward(f, &od, probs, dprobs, 0.5f, dscores));
  res[nres++] = dscores;
  weft_tensor *dh = MK(3, B, T, C, 0, &r, -1, 1), *dy = MK(3, B, T, C, 0, &r, 0, 0);
  RUN("gelu_backward", weft_op_gelu_backward(f, &od, y, dh, dy));
  res[nres++] = dy;
  weft_tensor *dqkv = MK(3, B, T, 3 * C, 0, &r, 0, 0);
  RUN("attention_backward", weft_op_attention_backward(f, &od, dy, qkv, att, NH, dqkv));
  res[nres++] = dqkv;
  weft_tensor *dx = MK(3, B, T, C, 0, &r, 0, 0), *dg = MK(1, C, 0, 0, 0, &r, 0, 0), *db = MK(1, C, 0, 0, 0, &r, 0, 0);
  RUN("layernorm_backward", weft_op_layernorm_backward(f, &od, dy, x, mean, rstd, g, dx, dg, db));
  res[nres++] = dx, res[nres++] = dg, res[nres++] = db;
  weft_tensor *dwte = MK(2, V, C, 0, 0, &r, 0, 0), *dwpe = MK(2, T, C, 0, 0, &r, 0, 0);
  RUN("embedding_backward", weft_op_embedding_backward(f, &od, dx, ttok, NULL, dwte, dwpe));
  res[nres++] = dwte, res[nres++] = dwpe;
  weft_tensor *acc = MK(1, 1, 0, 0, 0, &r, 0, 0);
  RUN("sumsq", weft_op_sumsq(f, &od, dwte, acc));
  res[nres++] = acc;
  weft_tensor *m = MK(2, V, C, 0, 0, &r, -0.1f, 0.1f), *v = MK(2, V, C, 0, 0, &r, 0, 0.01f);
  RUN("adamw", weft_op_adamw(f, &od, wte, dwte, m, v, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3));
  res[nres++] = wte, res[nres++] = m, res[nres++] = v;
  weft_tensor *perm_y = MK(4, B, NH, T, C / NH, &r, 0, 0);
  int perm[4] = {0, 2, 1, 3};
  weft_tensor *x4 = MK(4, B, T, NH, C / NH, &r, -1, 1);
  RUN("permute", weft_op_permute(f, &od, x4, perm, perm_y));
  res[nres++] = perm_y;
  weft_tensor *cache = MK(3, B, T + 3, C, 0, &r, -1, 1);
  RUN("copy_slice", weft_op_copy_slice(f, &od, x, cache, 1, 2));
  res[nres++] = cache;
  /* decode: queries at positions 2 .. 4 over qkv as the cache */
  weft_tensor *cout = MK(3, B, 3, C, 0, &r, 0, 0), *catt = MK(4, B, NH, 3, T, &r, 0, 0);
  RUN("attention_cached", weft_op_attention_cached(f, &od, qkv, NH, 2, cout, catt));
  res[nres++] = cout, res[nres++] = catt;
#undef MK
#undef RUN
  return nres;
}

static void check_ops_v2(weft_fabric *f, int tab, int cpu) {
  weft_lane_info li;
  weft_fabric_lane_info(f, (size_t)tab, &li);
  const uint64_t tab_ops = (WEFT_OP_BIT(WEFT_OP_ATTENTION_CACHED) << 1) - 1; /* all but matmul_acc */
  TU_CHECK((li.ops & WEFT_OPS_ALL) == tab_ops, "the tab offers every op of the table but matmul_acc (ops 0x%llx)",
           (unsigned long long)li.ops);
  weft_tensor *res[4][V2_RESULTS], *keep[4][96];
  int nres[4], nkeep[4] = {0};
  static const char *const modes[4] = {"cpu", "pinned to the tab", "routed", "alternating tab / cpu"};
  for (int mode = 0; mode < 4; mode++) nres[mode] = v2_chain(f, mode, tab, cpu, res[mode], keep[mode], &nkeep[mode]);
  TU_CHECK(nres[0] == 27 && nres[0] <= V2_RESULTS, "the chain gives its 27 results (%d)", nres[0]);
  for (int mode = 1; mode < 4; mode++) {
    int all = nres[mode] == nres[0];
    for (int i = 0; all && i < nres[0]; i++) {
      char what[64];
      snprintf(what, sizeof what, "%s, result %d", modes[mode], i);
      all = same(res[mode][i], res[0][i], what);
      if (!all) printf("  %s: differs (%s)\n", what, weft_fabric_last_error(f));
    }
    TU_CHECK(all, "the version-2 ops %s: every result the CPU lane's bits", modes[mode]);
  }
  weft_lane_stats st;
  if (weft_fabric_lane_stats(f, (size_t)tab, &st) == WEFT_OK)
    printf("  the tab ran %llu layernorms, %llu attentions, %llu adamw so far\n",
           (unsigned long long)st.ops[WEFT_OP_LAYERNORM], (unsigned long long)st.ops[WEFT_OP_ATTENTION],
           (unsigned long long)st.ops[WEFT_OP_ADAMW]);
  for (int mode = 0; mode < 4; mode++)
    for (int i = 0; i < nkeep[mode]; i++) weft_tensor_destroy(keep[mode][i]);
}

/* The tab closes in the middle of a run of auto-routed matmuls that prefer it: each result is still the
 * CPU's bits, the ops move to the CPU, and the lane is down. */
static void check_close_midrun(weft_fabric *f, driver *d, int tab, int cpu) {
  /* Make the tab look far faster than the CPU, so the router sends it everything while it is there. */
  for (int c = 0; c < WEFT_COST_CLASS_COUNT; c++) {
    weft_fabric_set_cost_model(f, (size_t)cpu, (weft_cost_class)c, WEFT_CONTRACT_EXACT, 1.0, 1e3);
    weft_fabric_set_cost_model(f, (size_t)tab, (weft_cost_class)c, WEFT_CONTRACT_EXACT, 1e-6, 1e12);
  }
  tu_rng r = {tu_seed() + 1};
  int64_t ad[2] = {96, 80}, bd[2] = {80, 64}, cd[2] = {96, 64};
  float *av = malloc(96 * 80 * sizeof *av);
  for (int i = 0; i < 96 * 80; i++) av[i] = tu_rng_float(&r, -1, 1);
  weft_tensor *a = NULL, *b = tensor(f, 2, bd, &r, -1, 1);
  weft_tensor_create(f, 2, ad, av, &a);
  weft_tensor *c = tensor(f, 2, cd, &r, 0, 0), *want = tensor(f, 2, cd, &r, 0, 0);
  weft_op_desc on_cpu = WEFT_OP_DESC_INIT;
  on_cpu.lane = cpu;
  TU_STATUS(weft_op_matmul(f, &on_cpu, a, 0, b, 0, want), WEFT_OK, "the CPU's answer");
  driver_say(d, "close 300");
  int on_tab = 0, after = 0, wrong = 0, errors = 0;
  double end = tu_now() + 30;
  while (tu_now() < end && after < 20) {
    /* A fresh input each time, so every op crosses to the tab (nothing is left resident). */
    weft_tensor_write(a, av, 96 * 80);
    weft_status st = weft_op_matmul(f, NULL, a, 0, b, 0, c);
    if (st) {
      errors++;
      printf("  routed matmul failed: %s\n", weft_fabric_last_error(f));
      break;
    }
    int lane = weft_fabric_last_lane(f);
    if (lane == tab) on_tab++;
    if (!lane_up(f, (size_t)tab)) after++;
    if (!same(c, want, "routed matmul")) wrong++;
  }
  char line[256] = "";
  driver_line(d, line, sizeof line);
  TU_CHECK(strcmp(line, "closed") == 0, "the driver closed the page (said '%s')", line);
  TU_CHECK(on_tab > 0, "ops ran on the tab before it closed (%d)", on_tab);
  TU_CHECK(after >= 20, "ops went on after the tab closed (%d)", after);
  TU_CHECK(!wrong && !errors, "every routed result is the CPU's bits (%d wrong, %d failed)", wrong, errors);
  TU_CHECK(!lane_up(f, (size_t)tab), "the tab's lane is down after the page closed");
  TU_CHECK(weft_fabric_last_lane(f) == cpu, "the last op ran on the CPU");
  weft_op_desc pinned = WEFT_OP_DESC_INIT;
  pinned.lane = tab;
  weft_status st = weft_op_matmul(f, &pinned, a, 0, b, 0, c);
  TU_STATUS(st, WEFT_ERR_LANE_FAILED, "an op pinned to the closed tab");
  printf("  pinned to the closed tab: %s\n", weft_fabric_last_error(f));
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c), weft_tensor_destroy(want);
  free(av);
}

/* --------------------------------------------------------------------------------- misbehaving tabs */

typedef struct fakes {
  const char *node, *script;
  char ws[200]; /* ws://127.0.0.1:PORT/weft?token=T */
} fakes;

/* Starts a scripted tab in `mode`; 0 when it did not connect (its first line is in line). */
static int fake_start(const fakes *fk, const char *mode, driver *d, char *line, size_t n) {
  char *argv[] = {(char *)fk->node, "--experimental-websocket", (char *)fk->script, "--ws", (char *)fk->ws,
                  "--mode", (char *)mode, NULL};
  return driver_spawn(d, argv) && driver_line(d, line, n) && strcmp(line, "open") == 0;
}

/* A tab that breaks the protocol in `mode` never brings the lane up, and its connection is closed. */
static void check_bad_tab(weft_fabric *f, const fakes *fk, size_t tab, const char *mode) {
  driver d;
  char line[512];
  if (!fake_start(fk, mode, &d, line, sizeof line)) {
    TU_CHECK(0, "%s: the scripted tab connected (said '%s')", mode, line);
    driver_stop(&d);
    return;
  }
  /* The handshake runs off the op path; a silent tab is given up after the handshake timeout (5 s). */
  for (int i = 0; i < 5; i++) {
    weft_fabric_revive(f, NULL);
    usleep(20000);
  }
  TU_CHECK(!lane_up(f, tab), "%s: the lane stays down", mode);
  TU_CHECK(driver_line(&d, line, sizeof line) && strncmp(line, "closed", 6) == 0,
           "%s: the fabric closed the tab's connection (%s)", mode, line);
  printf("  %-12s -> %s\n", mode, line);
  /* The scripted tab offers the version-2 ops (it loads weft.wasm as the page does, where it is built): one
   * bit off in the first of them keeps it out, named. */
  char wasm[512];
  snprintf(wasm, sizeof wasm, "%s/wasm/weft.wasm", getenv("WEFT_BROWSER_WEB") ? getenv("WEFT_BROWSER_WEB") : ".");
  if (strcmp(mode, "wrong-v2") == 0 && access(wasm, R_OK) == 0)
    TU_CHECK(tu_contains(line, "self-test: embedding"), "wrong-v2: refused for its embedding's bits (%s)", line);
  driver_stop(&d);
}

/* Tabs that lie, overrun, go silent or speak out of turn: each is dropped, the fabric goes on. */
static void check_bad_tabs(weft_fabric *f, const fakes *fk, size_t tab, int cpu) {
  const char *modes[] = {"wrong-id", "huge-length", "short-hello", "text", "unsolicited", "oversize", "bad-lanes",
                         "silent", "wrong-bit", "no-exact", "wrong-v2"};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) check_bad_tab(f, fk, tab, modes[i]);
  /* Good through the handshake, then a read reply with the wrong count: the lane goes down on it, and the
   * value is computed again on the CPU. */
  driver d;
  char line[512];
  if (!fake_start(fk, "bad-read", &d, line, sizeof line)) {
    TU_CHECK(0, "bad-read: the scripted tab connected (said '%s')", line);
    driver_stop(&d);
    return;
  }
  TU_CHECK(wait_up(f, tab, 10), "bad-read: the lane comes up after a good handshake");
  int64_t dims[1] = {4};
  float x[4] = {1, -2, 3, -4}, y[4] = {0};
  weft_tensor *tx = NULL, *ty = NULL;
  weft_tensor_create(f, 1, dims, x, &tx);
  weft_tensor_create(f, 1, dims, NULL, &ty);
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = (int)tab;
  TU_STATUS(weft_op_relu(f, &od, tx, ty), WEFT_OK, "bad-read: relu on the scripted tab");
  weft_status st = weft_tensor_read(ty, y, 4);
  printf("  %-12s -> read: %s%s%s\n", "bad-read", weft_status_str(st), st ? ": " : "",
         st ? weft_fabric_last_error(f) : "");
  TU_CHECK(st == WEFT_OK ? y[0] == 1 && y[1] == 0 && y[2] == 3 && y[3] == 0 : st == WEFT_ERR_LANE_FAILED,
           "bad-read: the read gives the right values (computed again) or says the lane failed");
  TU_CHECK(!lane_up(f, tab), "bad-read: the lane is down");
  TU_CHECK(driver_line(&d, line, sizeof line) && strncmp(line, "closed", 6) == 0,
           "bad-read: the fabric closed the tab's connection (%s)", line);
  weft_tensor_destroy(tx), weft_tensor_destroy(ty);
  driver_stop(&d);
  (void)cpu;
}

/* Two tabs at once: a batched matmul the router splits across them (both made to look fast) comes back
 * with the CPU's bits, and each tab did a share. */
static void check_two_tabs(weft_fabric *f, driver *d, size_t tab0, size_t tab1, size_t cpu) {
  char line[512];
  driver_say(d, "open");
  TU_CHECK(driver_line(d, line, sizeof line) && strncmp(line, "ready", 5) == 0, "a second tab opened (%s)", line);
  TU_CHECK(wait_up(f, tab1, 60), "browser:1 comes up with the second tab");
  /* Compute that dominates fixed costs and transfers, so sharing the batch halves the predicted time. */
  for (int c = 0; c < WEFT_COST_CLASS_COUNT; c++) {
    double beta = c == WEFT_COST_MATMUL ? 1e7 : 1e12;
    weft_fabric_set_cost_model(f, cpu, (weft_cost_class)c, WEFT_CONTRACT_EXACT, 1.0, 1e3);
    weft_fabric_set_cost_model(f, tab0, (weft_cost_class)c, WEFT_CONTRACT_EXACT, 1e-6, beta);
    weft_fabric_set_cost_model(f, tab1, (weft_cost_class)c, WEFT_CONTRACT_EXACT, 1e-6, beta);
  }
  weft_fabric_reset_stats(f);
  tu_rng r = {17};
  int64_t ad[3] = {8, 40, 24}, bd[2] = {24, 36}, cd[3] = {8, 40, 36};
  weft_tensor *a = tensor(f, 3, ad, &r, -1, 1), *b = tensor(f, 2, bd, &r, -1, 1);
  weft_tensor *c1 = tensor(f, 3, cd, &r, 0, 0), *c2 = tensor(f, 3, cd, &r, 0, 0);
  weft_op_desc on_cpu = WEFT_OP_DESC_INIT;
  on_cpu.lane = (int)cpu;
  TU_STATUS(weft_op_matmul(f, NULL, a, 0, b, 0, c1), WEFT_OK, "a batched matmul routed over two tabs");
  weft_split_report sr;
  if (weft_split_last(f, &sr) == WEFT_OK && sr.split)
    for (size_t i = 0; i < sr.nshares; i++)
      printf("  split share: %s entries %lld..%lld\n", sr.shares[i].lane, (long long)sr.shares[i].first,
             (long long)(sr.shares[i].first + sr.shares[i].entries - 1));
  TU_STATUS(weft_op_matmul(f, &on_cpu, a, 0, b, 0, c2), WEFT_OK, "the same on the CPU");
  TU_CHECK(same(c1, c2, "two-tab matmul"), "the result over two tabs has the CPU lane's bits");
  weft_lane_stats s0, s1;
  weft_fabric_lane_stats(f, tab0, &s0);
  weft_fabric_lane_stats(f, tab1, &s1);
  TU_CHECK(s0.ops[WEFT_OP_MATMUL] > 0 && s1.ops[WEFT_OP_MATMUL] > 0, "both tabs computed a share (%llu, %llu matmuls)",
           (unsigned long long)s0.ops[WEFT_OP_MATMUL], (unsigned long long)s1.ops[WEFT_OP_MATMUL]);
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c1), weft_tensor_destroy(c2);
}

/* ------------------------------------------------------------------------------------ round trips */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* A tiny op (relu of 4 floats, resident on the lane) pinned to `lane`: the median round trip, each op
 * waited for (weft_fabric_sync), in us; and, in *streamed, the time per op of R ops sent back to back and
 * waited for once (lanes that stream their ops overlap the trips). */
static double tiny_op_us(weft_fabric *f, int lane, double *p10, double *p90, double *streamed) {
  int64_t d[1] = {4};
  float v[4] = {1, -2, 3, -4};
  weft_tensor *x = NULL, *y = NULL;
  weft_tensor_create(f, 1, d, v, &x);
  weft_tensor_create(f, 1, d, NULL, &y);
  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = lane;
  enum { R = 2000 };
  static double t[R];
  for (int i = 0; i < 100; i++) weft_op_relu(f, &od, x, y), weft_fabric_sync(f);
  for (int i = 0; i < R; i++) {
    double t0 = tu_now();
    weft_op_relu(f, &od, x, y);
    weft_fabric_sync(f);
    t[i] = tu_now() - t0;
  }
  double t0 = tu_now();
  for (int i = 0; i < R; i++) weft_op_relu(f, &od, x, y);
  weft_fabric_sync(f);
  *streamed = (tu_now() - t0) / R * 1e6;
  qsort(t, R, sizeof t[0], cmp_d);
  weft_tensor_destroy(x), weft_tensor_destroy(y);
  *p10 = t[R / 10] * 1e6;
  *p90 = t[R * 9 / 10] * 1e6;
  return t[R / 2] * 1e6;
}

/* The same through a remote lane of a `weft worker` started here on loopback. */
static void bench_remote(const char *weft) {
  int fds[2];
  if (pipe(fds)) return;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execl(weft, weft, "worker", "--listen", "127.0.0.1:0", "--lanes", "cpu", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  FILE *out = fdopen(fds[0], "r");
  char line[256] = "", addr[128] = "";
  if (out && fgets(line, sizeof line, out)) sscanf(line, "weft worker: listening on %127s", addr);
  if (addr[0]) {
    weft_fabric_desc desc = tu_desc();
    desc.lanes = "remote";
    desc.remote = addr;
    weft_fabric *f = NULL;
    if (weft_fabric_open(&desc, &f) == WEFT_OK) {
      double p10, p90, streamed, med = tiny_op_us(f, 0, &p10, &p90, &streamed);
      printf("tiny op round trip, remote lane (weft worker on loopback TCP): median %.1f us, p10 %.1f, p90 %.1f; "
             "streamed %.1f us per op\n", med, p10, p90, streamed);
      weft_fabric_close(f);
    } else {
      printf("remote fabric did not open: %s\n", weft_open_error());
    }
  }
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
  if (out) fclose(out);
}

/* An address off loopback without a secret, and one that is not an address: no lanes, and the reason. */
static void check_refusals(void) {
  const char *addrs[] = {"0.0.0.0:0", "no-port-here"};
  const char *want[] = {"secret", "HOST:PORT"};
  for (int i = 0; i < 2; i++) {
    weft_fabric_desc desc = tu_desc();
    desc.lanes = "cpu,browser";
    desc.browser = addrs[i];
    weft_fabric *f = NULL;
    size_t lane;
    TU_STATUS(weft_fabric_open(&desc, &f), WEFT_OK, "a fabric with a refused browser address still opens");
    TU_CHECK(f && weft_fabric_lane_find(f, "browser:0", &lane) != WEFT_OK, "%s: no browser lanes", addrs[i]);
    int said = 0;
    for (size_t k = 0; f && k < weft_fabric_absent_count(f); k++) {
      const char *name, *why;
      weft_fabric_absent_info(f, k, &name, &why);
      if (strcmp(name, "browser") == 0) {
        said = tu_contains(why, want[i]);
        printf("  browser=%s -> absent: %s\n", addrs[i], why);
      }
    }
    TU_CHECK(said, "%s: the absent entry says why (mentions '%s')", addrs[i], want[i]);
    weft_fabric_close(f);
  }
}

/* The tab's lane URL, from the lane's details ("... open http://127.0.0.1:PORT/worker/ ..."). */
static void lane_url(weft_fabric *f, size_t lane, char *out, size_t n, fakes *fk) {
  weft_lane_info li;
  weft_fabric_lane_info(f, lane, &li);
  const char *url = strstr(li.details, "http");
  out[0] = 0;
  if (url) snprintf(out, n, "%.*s", (int)strcspn(url, " "), url);
  int port = 0;
  int tls = strncmp(out, "https:", 6) == 0;
  sscanf(out + (tls ? 8 : 7), "127.0.0.1:%d", &port);
  const char *token = strstr(out, "#token=");
  if (fk)
    snprintf(fk->ws, sizeof fk->ws, "%s://127.0.0.1:%d/weft?token=%.64s", tls ? "wss" : "ws", port,
             token ? token + 7 : "");
}

/* A fabric of the CPU lane and one browser slot on a free loopback port (the caller sets what else it
 * needs in the environment first); NULL when it did not open with both. */
static weft_fabric *open_one_tab(size_t *tab, size_t *cpu) {
  setenv("WEFT_BROWSER_SLOTS", "1", 1);
  weft_fabric_desc desc = tu_desc();
  desc.lanes = "cpu,browser";
  desc.browser = "127.0.0.1:0";
  weft_fabric *f = NULL;
  if (weft_fabric_open(&desc, &f) || weft_fabric_lane_find(f, "browser:0", tab) ||
      weft_fabric_lane_find(f, "cpu", cpu)) {
    weft_fabric_close(f);
    return NULL;
  }
  return f;
}

/* Off loopback the tabs must prove the secret: a tab without it and one with a wrong proof stay out, the
 * worker page given the secret in its address comes up. Loopback here, with the secret set all the same. */
static void check_secret(const char *node, const char *driver_js, fakes fk) {
  char tpl[] = "weft-browser-secret-XXXXXX"; /* in the test's working directory */
  int fd = mkstemp(tpl);
  const char *secret = "correct-horse-battery-staple-42";
  if (fd < 0 || write(fd, secret, strlen(secret)) != (ssize_t)strlen(secret)) {
    TU_CHECK(0, "a secret file could be written");
    return;
  }
  close(fd);
  setenv("WEFT_BROWSER_SECRET_FILE", tpl, 1);
  size_t tab = 0, cpu = 0;
  weft_fabric *f = open_one_tab(&tab, &cpu);
  unsetenv("WEFT_BROWSER_SECRET_FILE");
  unlink(tpl);
  if (!f) {
    TU_CHECK(0, "a fabric with a secret opens with browser:0");
    return;
  }
  char url[300];
  lane_url(f, tab, url, sizeof url, &fk);
  check_bad_tab(f, &fk, tab, "no-proof");
  check_bad_tab(f, &fk, tab, "good"); /* knows no secret: refuses PROVE */
  char withsecret[400];
  snprintf(withsecret, sizeof withsecret, "%s&secret=%s", url, secret);
  driver d;
  char line[512];
  if (driver_start(&d, node, driver_js, withsecret) && driver_line(&d, line, sizeof line) &&
      strncmp(line, "ready", 5) == 0) {
    TU_CHECK(wait_up(f, tab, 60), "the worker page that knows the secret comes up");
    tab_matmul_matches(f, tab, cpu, 24, 24, 1, 11, "the authenticated tab");
  } else {
    TU_CHECK(0, "the worker page started for the secret fabric (%s)", line);
  }
  driver_stop(&d);
  weft_fabric_close(f);
  setenv("WEFT_BROWSER_SLOTS", "2", 1);
}

/* https and wss: the worker page of a fabric with a (self-signed, here) certificate comes up. Skipped where
 * the openssl tool is missing. */
static void check_tls(const char *node, const char *driver_js) {
  if (system("openssl req -x509 -newkey rsa:2048 -nodes -keyout weft-browser-key.pem -out weft-browser-cert.pem "
             "-days 1 -subj /CN=127.0.0.1 >/dev/null 2>&1") != 0) {
    printf("https check skipped: no openssl tool to make a certificate\n");
    return;
  }
  setenv("WEFT_BROWSER_TLS_CERT", "weft-browser-cert.pem", 1);
  setenv("WEFT_BROWSER_TLS_KEY", "weft-browser-key.pem", 1);
  size_t tab = 0, cpu = 0;
  weft_fabric *f = open_one_tab(&tab, &cpu);
  unsetenv("WEFT_BROWSER_TLS_CERT");
  unsetenv("WEFT_BROWSER_TLS_KEY");
  if (!f) {
    TU_CHECK(0, "a fabric serving https opens with browser:0");
    return;
  }
  char url[300];
  lane_url(f, tab, url, sizeof url, NULL);
  TU_CHECK(strncmp(url, "https://", 8) == 0, "the lane's address is https (%s)", url);
  driver d;
  char line[512] = "";
  char *argv[] = {(char *)node, (char *)driver_js, "--url", url, "--insecure", NULL};
  if (driver_spawn(&d, argv) && driver_line(&d, line, sizeof line) && strncmp(line, "ready", 5) == 0) {
    TU_CHECK(wait_up(f, tab, 60), "the worker page served over https comes up over wss");
    tab_matmul_matches(f, tab, cpu, 20, 12, 0, 13, "the https tab");
  } else {
    TU_CHECK(0, "the worker page started over https (%s)", line);
  }
  driver_stop(&d);
  weft_fabric_close(f);
  unlink("weft-browser-cert.pem");
  unlink("weft-browser-key.pem");
  setenv("WEFT_BROWSER_SLOTS", "2", 1);
}

/* ------------------------------------------------------------------------------- the tab's two lanes */

/* How many ops of kind `op` the tab's lane `lane` ("webgpu", "cpu") computed, from the details' counts
 * ("...; ran: matmul 3 on webgpu, 1 on cpu; gelu 2 on cpu"); 0 when none. */
static unsigned long long ran_count(weft_fabric *f, size_t tab, const char *op, const char *lane) {
  weft_lane_info li;
  if (weft_fabric_lane_info(f, tab, &li)) return 0;
  const char *ran = strstr(li.details, "; ran: ");
  if (!ran) return 0;
  char key[64];
  snprintf(key, sizeof key, " %s ", op); /* the op's name between a separator and its first count */
  for (const char *p = ran + 6; (p = strstr(p, key)) != NULL; p++) {
    if (p[-1] != ':' && p[-1] != ';') continue;
    const char *end = strchr(p + 1, ';');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char seg[256];
    snprintf(seg, sizeof seg, "%.*s", (int)(len < sizeof seg ? len : sizeof seg - 1), p);
    /* " matmul 3 on webgpu, 1 on cpu" */
    for (char *q = seg + strlen(key); *q;) {
      unsigned long long n = strtoull(q, &q, 10);
      char name[64] = "";
      if (sscanf(q, " on %63[^,;]", name) == 1 && strcmp(name, lane) == 0) return n;
      q = strchr(q, ',');
      if (!q) break;
      q++;
    }
    return 0;
  }
  return 0;
}

/* The ops the tab's GPU runs, each pinned to the tab on ordinary values of a few workgroups' size: the CPU
 * lane's bits, counted on its webgpu lane; then with a subnormal among the inputs: the GPU hands the op to
 * the tab's CPU lane, which gives the same bits, counted there. `wrong` names the ops whose GPU kernel the
 * tab was given wrong: those must have been refused on the GPU at join, and run on its CPU lane. */
static void check_gpu_ops(weft_fabric *f, size_t tab, size_t cpu, const char *const *wrong, int nwrong) {
  tu_rng r = {tu_seed() + 5};
  weft_op_desc on_tab = WEFT_OP_DESC_INIT, on_cpu = WEFT_OP_DESC_INIT;
  on_tab.lane = (int)tab;
  on_cpu.lane = (int)cpu;
  enum { N = 24, C = 80, R = 2, T = 40 };
  int64_t nc[2] = {N, C}, cd[1] = {C}, nd[1] = {N}, sd[3] = {R, T, T}, md[2] = {70, 90}, ad[2] = {70, 130},
          bd[2] = {130, 90};
  static const char *const ops[] = {"matmul", "gelu", "gelu_backward", "layernorm", "layernorm_backward",
                                    "causal_softmax", "causal_softmax_backward"};
  for (int edge = 0; edge < 2; edge++) {
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
      const char *op = ops[k];
      int refused = 0;
      for (int w = 0; w < nwrong; w++) refused |= strcmp(wrong[w], op) == 0;
      /* Inputs: x and y of [N, C], gamma positive, mean and rstd from a layernorm on the CPU. */
      weft_tensor *x = tensor(f, 2, nc, &r, -3, 3), *y = tensor(f, 2, nc, &r, -1, 1), *g = tensor(f, 1, cd, &r, 0.5f, 1.5f);
      weft_tensor *b = tensor(f, 1, cd, &r, -0.5f, 0.5f), *s = tensor(f, 3, sd, &r, -4, 4), *ds = tensor(f, 3, sd, &r, -1, 1);
      weft_tensor *a = tensor(f, 2, ad, &r, -2, 2), *bb = tensor(f, 2, bd, &r, -2, 2);
      weft_tensor *mean = tensor(f, 1, nd, &r, 0, 0), *rstd = tensor(f, 1, nd, &r, 0, 0), *tmp = tensor(f, 2, nc, &r, 0, 0);
      TU_STATUS(weft_op_layernorm(f, &on_cpu, x, g, b, 1e-5f, tmp, mean, rstd), WEFT_OK, "the forward's mean and rstd");
      weft_tensor *probs = tensor(f, 3, sd, &r, 0, 0);
      TU_STATUS(weft_op_causal_softmax(f, &on_cpu, s, 0.25f, probs), WEFT_OK, "probabilities for the backward");
      if (edge) { /* a subnormal where each op reads first */
        float sub = 1e-40f;
        weft_tensor *first = k == 0 ? a : k == 2 ? y : k == 4 ? y : k == 6 ? ds : k == 5 ? s : x;
        poke(first, &sub, 1);
      }
      weft_tensor *o[2][3] = {{NULL}};
      weft_fabric_sync(f); /* every earlier reply counted */
      unsigned long long gpu0 = ran_count(f, tab, op, "webgpu"), cpu0 = ran_count(f, tab, op, "cpu");
      for (int l = 0; l < 2; l++) {
        const weft_op_desc *od = l ? &on_cpu : &on_tab;
        weft_status st = WEFT_OK;
        switch (k) {
        case 0:
          o[l][0] = tensor(f, 2, md, &r, 0, 0);
          st = weft_op_matmul(f, od, a, 0, bb, 0, o[l][0]);
          break;
        case 1:
          o[l][0] = tensor(f, 2, nc, &r, 0, 0);
          st = weft_op_gelu(f, od, x, o[l][0]);
          break;
        case 2:
          o[l][0] = tensor(f, 2, nc, &r, 0, 0);
          st = weft_op_gelu_backward(f, od, x, y, o[l][0]);
          break;
        case 3:
          o[l][0] = tensor(f, 2, nc, &r, 0, 0), o[l][1] = tensor(f, 1, nd, &r, 0, 0), o[l][2] = tensor(f, 1, nd, &r, 0, 0);
          st = weft_op_layernorm(f, od, x, g, b, 1e-5f, o[l][0], o[l][1], o[l][2]);
          break;
        case 4: {
          o[l][0] = tensor(f, 2, nc, &r, 0, 0), o[l][1] = tensor(f, 1, cd, &r, 0, 0), o[l][2] = tensor(f, 1, cd, &r, 0, 0);
          float init[C];
          for (int i = 0; i < C; i++) init[i] = 0.01f * (float)i - 0.3f;
          weft_tensor_write(o[l][1], init, C); /* gradients accumulate into what is there */
          weft_tensor_write(o[l][2], init, C);
          st = weft_op_layernorm_backward(f, od, y, x, mean, rstd, g, o[l][0], o[l][1], o[l][2]);
          break;
        }
        case 5:
          o[l][0] = tensor(f, 3, sd, &r, 0, 0);
          st = weft_op_causal_softmax(f, od, s, 0.25f, o[l][0]);
          break;
        default:
          o[l][0] = tensor(f, 3, sd, &r, 0, 0);
          st = weft_op_causal_softmax_backward(f, od, probs, ds, 0.25f, o[l][0]);
          break;
        }
        TU_STATUS(st, WEFT_OK, op);
      }
      char what[96];
      snprintf(what, sizeof what, "%s on the tab, %s", op, edge ? "a subnormal among its inputs" : "ordinary values");
      int all = 1;
      for (int i = 0; i < 3; i++)
        if (o[0][i]) all &= same(o[0][i], o[1][i], what);
      TU_CHECK(all, "%s: the CPU lane's bits", what);
      /* The counts come with the replies: reading the results above has waited for them. */
      unsigned long long dg = ran_count(f, tab, op, "webgpu") - gpu0, dc = ran_count(f, tab, op, "cpu") - cpu0;
      int on_gpu = !edge && !refused;
      TU_CHECK(dg == (unsigned long long)on_gpu && dc == (unsigned long long)!on_gpu,
               "%s: the tab says its %s lane computed it (+%llu on webgpu, +%llu on cpu)", what,
               on_gpu ? "webgpu" : "cpu", dg, dc);
      weft_tensor *all_t[] = {x, y, g, b, s, ds, a, bb, mean, rstd, tmp, probs, o[0][0], o[0][1], o[0][2], o[1][0],
                              o[1][1], o[1][2]};
      for (size_t i = 0; i < sizeof all_t / sizeof all_t[0]; i++) weft_tensor_destroy(all_t[i]);
    }
  }
}

/* A tab whose GPU computes gelu and matmul wrong (the driver changes those kernels as the page loads them)
 * is admitted, but its GPU is refused for them at join, named, and they run on its CPU lane with the CPU
 * lane's bits; its other GPU ops still run on its GPU. */
static void check_gpu_wrong(const char *node, const char *driver_js) {
  size_t tab = 0, cpu = 0;
  weft_fabric *f = open_one_tab(&tab, &cpu);
  if (!f) {
    TU_CHECK(0, "a fabric for the tab with wrong GPU kernels opens");
    return;
  }
  char url[300], page[340];
  lane_url(f, tab, url, sizeof url, NULL);
  snprintf(page, sizeof page, "%s&gpu_min=0", url);
  driver d;
  char line[512] = "";
  char *argv[] = {(char *)node, (char *)driver_js, "--url", page, "--corrupt-wgsl", "gelu_exact.wgsl,matmul_exact.wgsl",
                  NULL};
  if (driver_spawn(&d, argv) && driver_line(&d, line, sizeof line) && strncmp(line, "ready", 5) == 0 &&
      wait_up(f, tab, 60)) {
    weft_lane_info li;
    weft_fabric_lane_info(f, tab, &li);
    printf("tab with wrong GPU kernels: %s\n", li.details);
    TU_CHECK(tu_contains(li.details, "webgpu lane is not used for matmul, gelu, gelu_backward (wrong bits in its "
                                     "self-test: matmul"),
             "its GPU is refused for matmul, gelu and gelu_backward, with the first wrong bits named");
    TU_CHECK(tu_contains(li.details, "when large: layernorm, layernorm_backward, causal_softmax, causal_softmax_backward;"),
             "its GPU still runs layernorm and the causal softmax");
    static const char *const wrong[] = {"matmul", "gelu", "gelu_backward"};
    check_gpu_ops(f, tab, cpu, wrong, 3);
  } else {
    TU_CHECK(0, "the tab with wrong GPU kernels came up (%s)", line);
  }
  driver_stop(&d);
  weft_fabric_close(f);
  setenv("WEFT_BROWSER_SLOTS", "2", 1);
}

/* A browser without WebGPU: the tab says so in its device, and computes every op in JavaScript with the
 * CPU lane's bits. */
static void check_no_webgpu(const char *node, const char *driver_js) {
  size_t tab = 0, cpu = 0;
  weft_fabric *f = open_one_tab(&tab, &cpu);
  if (!f) {
    TU_CHECK(0, "a fabric for the tab without WebGPU opens");
    return;
  }
  char url[300];
  lane_url(f, tab, url, sizeof url, NULL);
  driver d;
  char line[512] = "";
  char *argv[] = {(char *)node, (char *)driver_js, "--url", url, "--no-webgpu", NULL};
  if (driver_spawn(&d, argv) && driver_line(&d, line, sizeof line) && strncmp(line, "ready", 5) == 0 &&
      wait_up(f, tab, 60)) {
    weft_lane_info li;
    weft_fabric_lane_info(f, tab, &li);
    printf("tab without WebGPU: %s\n", li.device);
    TU_CHECK(tu_contains(li.device, "JavaScript") && tu_contains(li.device, "no WebGPU"),
             "the tab says it has no WebGPU (%s)", li.device);
    check_ops(f, (int)tab, (int)cpu);
    check_ops_v2(f, (int)tab, (int)cpu);
  } else {
    TU_CHECK(0, "the worker page without WebGPU came up (%s)", line);
  }
  driver_stop(&d);
  weft_fabric_close(f);
  setenv("WEFT_BROWSER_SLOTS", "2", 1);
}

int main(int argc, char **argv) {
  double start = tu_now();
  if (argc < 5) {
    fprintf(stderr, "usage: browser_lane NODE DRIVER FAKE WEB_DIR [--bench WEFT]\n");
    return 2;
  }
  const char *node = argv[1], *driver_js = argv[2];
  const char *bench_weft = argc >= 7 && strcmp(argv[5], "--bench") == 0 ? argv[6] : NULL;
  signal(SIGPIPE, SIG_IGN);
  setenv("WEFT_BROWSER_WEB", argv[4], 1);
  setenv("WEFT_BROWSER_SLOTS", "2", 1);
  check_refusals();
  weft_fabric_desc desc = tu_desc();
  desc.lanes = "cpu,browser";
  desc.browser = "127.0.0.1:0";
  weft_fabric *f = NULL;
  weft_status st = weft_fabric_open(&desc, &f);
  if (st) {
    printf("FAIL: the fabric did not open: %s\n", weft_open_error());
    return 1;
  }
  size_t tab = 0, cpu = 0;
  if (weft_fabric_lane_find(f, "browser:0", &tab) || weft_fabric_lane_find(f, "cpu", &cpu)) {
    for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
      const char *name, *why;
      weft_fabric_absent_info(f, i, &name, &why);
      printf("absent %s: %s\n", name, why);
    }
    printf("FAIL: no browser:0 lane\n");
    weft_fabric_close(f);
    return 1;
  }
  weft_lane_info li;
  weft_fabric_lane_info(f, tab, &li);
  TU_CHECK(li.failed && li.revivable, "browser:0 starts down and revivable");
  TU_CHECK(!wait_up(f, tab, 0.1), "browser:0 stays down without a tab");
  char urlbuf[256];
  fakes fk = {node, argv[3], ""};
  lane_url(f, tab, urlbuf, sizeof urlbuf, &fk);
  /* The tab runs every op it has a GPU kernel for on its GPU, however small (its CPU lane is tested by the
   * tab without WebGPU below, and by the self-test). */
  char gpubuf[300];
  snprintf(gpubuf, sizeof gpubuf, "%s&gpu_min=0", urlbuf);
  TU_CHECK(strncmp(urlbuf, "http://127.0.0.1:", 17) == 0 && tu_contains(urlbuf, "/worker/#token="),
           "the lane says where to open the worker page, with the token (%s)", li.details);

  /* Scripted tabs first, while both slots are free. */
  driver d;
  char line[512] = "";
  char *probe[] = {(char *)node, "--experimental-websocket", "-e",
                   "console.log(typeof WebSocket === 'function' ? 'yes' : 'no')", NULL};
  int have_fakes = driver_spawn(&d, probe) && driver_line(&d, line, sizeof line) && strcmp(line, "yes") == 0;
  driver_stop(&d);
  if (have_fakes) {
    check_bad_tabs(f, &fk, tab, (int)cpu);
    if (bench_weft && fake_start(&fk, "good", &d, line, sizeof line) && wait_up(f, tab, 10)) {
      double p10, p90, streamed, med = tiny_op_us(f, (int)tab, &p10, &p90, &streamed);
      printf("tiny op round trip, browser lane with a scripted Node tab (no Chromium): median %.1f us, "
             "p10 %.1f, p90 %.1f; streamed %.1f us per op\n", med, p10, p90, streamed);
      kill(d.pid, SIGTERM);
      driver_stop(&d);
      /* The lane learns that its tab left at its next call. */
      weft_op_desc od = WEFT_OP_DESC_INIT;
      od.lane = (int)tab;
      int64_t one[1] = {1};
      weft_tensor *t = NULL;
      weft_tensor_create(f, 1, one, NULL, &t);
      for (int i = 0; i < 100 && lane_up(f, tab); i++) weft_op_relu(f, &od, t, t), usleep(10000);
      weft_tensor_destroy(t);
    }
  } else {
    printf("scripted tabs skipped: %s\n", line[0] ? line : "this node has no WebSocket client");
  }

  if (!driver_start(&d, node, driver_js, gpubuf) || !driver_line(&d, line, sizeof line)) {
    printf("FAIL: the tab driver did not start\n");
    driver_stop(&d);
    weft_fabric_close(f);
    return 1;
  }
  if (strncmp(line, "SKIP", 4) == 0) {
    printf("%s\n", line);
    driver_stop(&d);
    weft_fabric_close(f);
    return tu_failures ? tu_finish("browser_lane", start) : 77;
  }
  TU_CHECK(strncmp(line, "ready", 5) == 0, "the worker page started (%s)", line);
  TU_CHECK(wait_up(f, tab, 60), "browser:0 comes up once the tab is there");
  /* A page of another site dialling the fabric is refused (it would see the tensors and answer wrong bits). */
  char cmd[256];
  snprintf(cmd, sizeof cmd, "foreign %s", fk.ws);
  driver_say(&d, cmd);
  TU_CHECK(driver_line(&d, line, sizeof line) && strcmp(line, "foreign refused") == 0,
           "a page of another origin cannot join (%s)", line);
  weft_fabric_lane_info(f, tab, &li);
  printf("browser:0: %s | %s\n", li.device, li.details);
  size_t tab1 = 0;
  TU_CHECK(weft_fabric_lane_find(f, "browser:1", &tab1) == WEFT_OK && !lane_up(f, tab1),
           "browser:1 is still waiting (one tab, two slots)");
  if (lane_up(f, tab)) {
    TU_CHECK(tu_contains(li.details, "its lanes cpu (wasm) and webgpu (webgpu)") &&
             tu_contains(li.details, "on its webgpu lane when large: matmul, layernorm, layernorm_backward, gelu, "
                                     "gelu_backward, causal_softmax, causal_softmax_backward"),
             "the tab's GPU passed the self-test for every op it has a kernel for");
    check_ops(f, (int)tab, (int)cpu);
    check_ops_v2(f, (int)tab, (int)cpu);
    check_gpu_ops(f, tab, cpu, NULL, 0);
    TU_CHECK(ran_count(f, tab, "matmul", "webgpu") > 0 && ran_count(f, tab, "embedding", "cpu") > 0,
             "the tab counts matmuls on its webgpu lane and embeddings on its cpu lane");
    if (bench_weft) {
      double p10, p90, streamed, med = tiny_op_us(f, (int)tab, &p10, &p90, &streamed);
      printf("tiny op round trip, browser lane (Chromium tab over loopback WebSocket): median %.1f us, p10 %.1f, "
             "p90 %.1f; streamed %.1f us per op\n", med, p10, p90, streamed);
      bench_remote(bench_weft);
    }
    check_close_midrun(f, &d, (int)tab, (int)cpu);
    /* A new tab takes the free slot and the lane comes back. */
    driver_say(&d, "open");
    TU_CHECK(driver_line(&d, line, sizeof line) && strncmp(line, "ready", 5) == 0, "a second tab opened (%s)", line);
    TU_CHECK(wait_up(f, tab, 60), "browser:0 comes back with the new tab");
    tu_rng r = {7};
    int64_t dd[2] = {16, 16};
    weft_tensor *a = tensor(f, 2, dd, &r, -1, 1), *c1 = tensor(f, 2, dd, &r, 0, 0), *c2 = tensor(f, 2, dd, &r, 0, 0);
    weft_op_desc on_tab = WEFT_OP_DESC_INIT, on_cpu = WEFT_OP_DESC_INIT;
    on_tab.lane = (int)tab;
    on_cpu.lane = (int)cpu;
    TU_STATUS(weft_op_matmul(f, &on_tab, a, 0, a, 1, c1), WEFT_OK, "matmul on the new tab");
    TU_STATUS(weft_op_matmul(f, &on_cpu, a, 0, a, 1, c2), WEFT_OK, "matmul on the CPU");
    TU_CHECK(same(c1, c2, "new tab matmul"), "the new tab's bits equal the CPU lane's");
    weft_tensor_destroy(a), weft_tensor_destroy(c1), weft_tensor_destroy(c2);
    check_two_tabs(f, &d, tab, tab1, cpu);
  }
  int rc = driver_stop(&d);
  TU_CHECK(rc == 0, "the tab driver exited cleanly (%d)", rc);
  weft_fabric_close(f);
  if (have_fakes) check_secret(node, driver_js, fk);
  check_tls(node, driver_js);
  check_no_webgpu(node, driver_js);
  check_gpu_wrong(node, driver_js);
  return tu_finish("browser_lane", start);
}
