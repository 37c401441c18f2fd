/* test_vk_fuse.c - fusion inside scopes on the Vulkan lane (src/lanes/fuse.h): every pattern gives the bits of
 * the same ops run unfused (a lane opened under WEFT_FUSE=0) and of the CPU lane, and the lane fuses exactly
 * the ops it should (counted by weft_vk_stat_fused_ops):
 *   - matmul + bias [+ residual] [+ GELU], every subset, odd m, n, k, batches, transposes, each matmul kernel,
 *     k long enough to be chunked on lavapipe; NaN, infinities, -0 and subnormals among the inputs;
 *   - add + layernorm, in place (x2 = x2 + b) or not, with and without mean and rstd;
 *   - the cases that must not fuse or must stop fusing: a residual that is c itself, GELU in place, GELU
 *     writing the residual, a layernorm writing one of the add's inputs, a contract that differs, an fp32
 *     matmul, ops outside a scope;
 *   - a read of c in the middle of a pattern (it flushes: c holds matmul + bias), a write to the bias and a
 *     freed bias while the bias add is held;
 * (fp32 cases compare fused with unfused only: the CPU lane's fp32 kernels are other ones.)
 *   - a fused kernel that cannot be recorded after its ops were accepted: the lane goes down, saying so;
 *   - storage bindings capped so that the fused matmul runs in row, column and k blocks and add+layernorm in
 *     row blocks;
 *   - a transformer block as src/gpt/gpt.c's decode step issues it, and GPT-2 decoding itself (weft_gpt_generate
 *     on vulkan:0): the same tokens fused and unfused, with ops fused.
 * Skips (exit 77) where there is no Vulkan device. */
#include <stdlib.h>
#include <string.h>

#include "gpt/gpt.h"
#include "lanes/vulkan/vk_internal.h"
#include "vkt.h"

/* Where a program runs: a fabric and a lane of it. */
typedef struct target {
  weft_fabric *f;
  int lane;
  int scope; /* run the ops inside a scope */
} target;

static weft_tensor *make(weft_fabric *f, int ndim, const int64_t *dims, const float *data) {
  weft_tensor *t = NULL;
  TU_STATUS(weft_tensor_create(f, ndim, dims, data, &t), WEFT_OK, "weft_tensor_create");
  return t;
}

static void read_into(weft_tensor *t, float *dst, size_t n, const char *what) {
  TU_STATUS(weft_tensor_read(t, dst, n), WEFT_OK, what);
}

#define OK(call, what)                                                                                         \
  do {                                                                                                         \
    weft_status st_ = (call);                                                                                  \
    TU_CHECK(st_ == WEFT_OK, "%s: %s (%s)", what, weft_status_str(st_), weft_fabric_last_error(t->f));         \
  } while (0)

/* ------------------------------------------------------------------------------ matmul + epilogue */

enum { ALIAS_NONE = 0, RES_IS_C, GELU_IN_PLACE, GELU_INTO_RES };
enum { MID_NONE = 0, MID_READ_C, MID_WRITE_BIAS, MID_WRITE_BIAS_USE, MID_FREE_BIAS };

typedef struct mm_case {
  const char *name;
  int64_t batch, m, n, k;
  int ta, tb;
  int bias, res, gelu;   /* which epilogue ops follow */
  int specials;          /* 1: special values in a and b too (bias and residual always get them) */
  int alias;             /* ALIAS_* */
  int mid;               /* MID_*: what happens after the bias add */
  weft_contract mm_contract, ew_contract;
  int kernel;            /* weft_vk_force_matmul_kernel */
  int expect;            /* ops the fusing lane runs fused */
} mm_case;

typedef struct mm_data {
  float *a, *b, *bias, *bias2, *res;
  size_t na, nb, nc;
} mm_data;

/* Outputs: c, g, the residual's final value, c read in the middle (each nc floats). */
static void mm_program(const target *t, const mm_case *cs, const mm_data *d, float *out) {
  const int64_t bm = cs->batch * cs->m;
  int64_t da[3] = {cs->batch, cs->ta ? cs->k : cs->m, cs->ta ? cs->m : cs->k};
  int64_t db[2] = {cs->tb ? cs->n : cs->k, cs->tb ? cs->k : cs->n}, dc[3] = {cs->batch, cs->m, cs->n};
  weft_tensor *A = make(t->f, 3, da, d->a), *B = make(t->f, 2, db, d->b), *C = make(t->f, 3, dc, NULL);
  weft_tensor *Bias = make(t->f, 1, &cs->n, d->bias), *R = make(t->f, 3, dc, d->res), *G = make(t->f, 3, dc, NULL);
  (void)bm;
  weft_op_desc mm = {cs->mm_contract, t->lane}, ew = {cs->ew_contract, t->lane};
  if (t->scope) OK(weft_scope_begin(t->f), "scope_begin");
  OK(weft_op_matmul(t->f, &mm, A, cs->ta, B, cs->tb, C), "matmul");
  if (cs->bias) OK(weft_op_add(t->f, &ew, C, Bias, C), "bias add");
  if (cs->mid == MID_READ_C) read_into(C, out + 3 * d->nc, d->nc, "read c mid-pattern");
  if (cs->mid == MID_WRITE_BIAS || cs->mid == MID_WRITE_BIAS_USE)
    OK(weft_tensor_write(Bias, d->bias2, (size_t)cs->n), "write the bias");
  if (cs->mid == MID_WRITE_BIAS_USE) OK(weft_op_add(t->f, &ew, R, Bias, R), "the new bias onto the residual");
  if (cs->mid == MID_FREE_BIAS) weft_tensor_destroy(Bias), Bias = NULL;
  if (cs->res) OK(weft_op_add(t->f, &ew, C, cs->alias == RES_IS_C ? C : R, C), "residual add");
  if (cs->gelu) {
    weft_tensor *g = cs->alias == GELU_IN_PLACE ? C : cs->alias == GELU_INTO_RES ? R : G;
    OK(weft_op_gelu(t->f, &ew, C, g), "gelu");
  }
  if (t->scope) OK(weft_scope_end(t->f), "scope_end");
  read_into(C, out, d->nc, "read c");
  read_into(G, out + d->nc, d->nc, "read g");
  read_into(R, out + 2 * d->nc, d->nc, "read the residual");
  weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(C), weft_tensor_destroy(Bias);
  weft_tensor_destroy(R), weft_tensor_destroy(G);
}

/* The three runs of one program and their comparison. */
typedef struct world {
  target on, off, cpu;
} world;

static uint64_t fused_now(void) { return __atomic_load_n(&weft_vk_stat_fused_ops, __ATOMIC_RELAXED); }

static void check_fused(const char *name, uint64_t got, int expect, int scope) {
  TU_CHECK(got == (uint64_t)expect, "%s: %llu ops ran fused, expected %d%s", name, (unsigned long long)got, expect,
           scope ? "" : " (outside a scope)");
}

static void mm_case_run(world *w, tu_rng *r, const mm_case *cs) {
  mm_data d;
  d.na = (size_t)(cs->batch * cs->m * cs->k), d.nb = (size_t)(cs->k * cs->n), d.nc = (size_t)(cs->batch * cs->m * cs->n);
  d.a = malloc(d.na * 4), d.b = malloc(d.nb * 4), d.bias = malloc((size_t)cs->n * 4), d.bias2 = malloc((size_t)cs->n * 4);
  d.res = malloc(d.nc * 4);
  vkt_fill(r, d.a, d.na, cs->specials);
  vkt_fill(r, d.b, d.nb, cs->specials);
  /* bias and residual: subnormals, tiny and huge values, infinities, NaN, -0 (the adds' hard cases) */
  vkt_fill_bits(r, d.bias, (size_t)cs->n);
  vkt_fill(r, d.bias2, (size_t)cs->n, 1);
  for (size_t i = 0; i < d.nc; i++) d.res[i] = tu_rng_int(r, 0, 3) == 0 ? 0.0f : tu_rng_float(r, -4.0f, 4.0f);
  vkt_fill_bits(r, d.res, d.nc / 3);
  if (d.nc > 2) d.res[d.nc - 1] = tu_float(0x80000000u), d.res[d.nc / 2] = tu_float(0x00000003u);
  const size_t nout = 4 * d.nc;
  float *on = calloc(nout, 4), *off = calloc(nout, 4), *cpu = calloc(nout, 4);
  weft_vk_force_matmul_kernel = cs->kernel;
  uint64_t f0 = fused_now();
  mm_program(&w->on, cs, &d, on);
  uint64_t f1 = fused_now();
  mm_program(&w->off, cs, &d, off);
  uint64_t f2 = fused_now();
  weft_vk_force_matmul_kernel = 0;
  mm_program(&w->cpu, cs, &d, cpu);
  check_fused(cs->name, f1 - f0, cs->expect, w->on.scope);
  TU_CHECK(f2 == f1, "%s: the lane opened under WEFT_FUSE=0 fused %llu ops", cs->name, (unsigned long long)(f2 - f1));
  static const char *part[4] = {"c", "g", "residual", "c read mid-pattern"};
  for (int p = 0; p < 4; p++) {
    char what[200];
    snprintf(what, sizeof what, "%s: %s, fused vs unfused", cs->name, part[p]);
    vkt_same(what, on + p * d.nc, off + p * d.nc, d.nc);
    if (cs->mm_contract != WEFT_CONTRACT_EXACT || cs->ew_contract != WEFT_CONTRACT_EXACT) continue;
    snprintf(what, sizeof what, "%s: %s, fused vs the cpu lane", cs->name, part[p]);
    vkt_same(what, on + p * d.nc, cpu + p * d.nc, d.nc);
  }
  free(on), free(off), free(cpu);
  free(d.a), free(d.b), free(d.bias), free(d.bias2), free(d.res);
}

/* ----------------------------------------------------------------------------- add + layernorm */

typedef struct ln_case {
  const char *name;
  int64_t N, C;
  int in_place; /* x2 = x2 + b (x2 holds a first) */
  int stats;    /* mean and rstd asked for */
  int y_is_b;   /* the layernorm writes the add's second input: must not fuse */
  int mid_read; /* read x2 between the add and the layernorm */
  int specials;
  int expect;
} ln_case;

/* Outputs: x2, y, mean, rstd, b's final value, x2 read in the middle: N*C, N*C, N, N, N*C, N*C. */
static void ln_program(const target *t, const ln_case *cs, const float *a, const float *b, const float *gb,
                       float *out) {
  const size_t n = (size_t)(cs->N * cs->C), N = (size_t)cs->N;
  int64_t dims[2] = {cs->N, cs->C};
  weft_tensor *A = make(t->f, 2, dims, a), *Bt = make(t->f, 2, dims, b), *X2 = cs->in_place ? A : make(t->f, 2, dims, NULL);
  weft_tensor *Ga = make(t->f, 1, &cs->C, gb), *Be = make(t->f, 1, &cs->C, gb + cs->C);
  weft_tensor *Y = cs->y_is_b ? Bt : make(t->f, 2, dims, NULL), *M = make(t->f, 1, &cs->N, NULL), *S = make(t->f, 1, &cs->N, NULL);
  weft_op_desc d = {WEFT_CONTRACT_EXACT, t->lane};
  if (t->scope) OK(weft_scope_begin(t->f), "scope_begin");
  OK(weft_op_add(t->f, &d, A, Bt, X2), "add");
  if (cs->mid_read) read_into(X2, out + 3 * n + 2 * N, n, "read x2 mid-pattern");
  OK(weft_op_layernorm(t->f, &d, X2, Ga, Be, 1e-5f, Y, cs->stats ? M : NULL, cs->stats ? S : NULL), "layernorm");
  if (t->scope) OK(weft_scope_end(t->f), "scope_end");
  read_into(X2, out, n, "read x2");
  read_into(Y, out + n, n, "read y");
  if (cs->stats) read_into(M, out + 2 * n, N, "read mean"), read_into(S, out + 2 * n + N, N, "read rstd");
  read_into(Bt, out + 2 * n + 2 * N, n, "read b");
  weft_tensor_destroy(A), weft_tensor_destroy(Bt), weft_tensor_destroy(Ga), weft_tensor_destroy(Be);
  if (!cs->in_place) weft_tensor_destroy(X2);
  if (!cs->y_is_b) weft_tensor_destroy(Y);
  weft_tensor_destroy(M), weft_tensor_destroy(S);
}

static void ln_case_run(world *w, tu_rng *r, const ln_case *cs) {
  const size_t n = (size_t)(cs->N * cs->C), nout = 4 * n + 2 * (size_t)cs->N;
  float *a = malloc(n * 4), *b = malloc(n * 4), *gb = malloc((size_t)cs->C * 8);
  vkt_fill(r, a, n, cs->specials);
  vkt_fill(r, b, n, 0);
  if (cs->specials) vkt_fill_bits(r, b, n / 4); /* subnormal sums in the first rows */
  vkt_fill(r, gb, (size_t)cs->C * 2, 0);
  float *on = calloc(nout, 4), *off = calloc(nout, 4), *cpu = calloc(nout, 4);
  uint64_t f0 = fused_now();
  ln_program(&w->on, cs, a, b, gb, on);
  uint64_t f1 = fused_now();
  ln_program(&w->off, cs, a, b, gb, off);
  uint64_t f2 = fused_now();
  ln_program(&w->cpu, cs, a, b, gb, cpu);
  check_fused(cs->name, f1 - f0, cs->expect, w->on.scope);
  TU_CHECK(f2 == f1, "%s: the lane opened under WEFT_FUSE=0 fused", cs->name);
  char what[200];
  snprintf(what, sizeof what, "%s: x2, y, mean, rstd, b, fused vs unfused", cs->name);
  vkt_same(what, on, off, nout);
  snprintf(what, sizeof what, "%s: x2, y, mean, rstd, b, fused vs the cpu lane", cs->name);
  vkt_same(what, on, cpu, nout);
  free(on), free(off), free(cpu), free(a), free(b), free(gb);
}

/* ------------------------------------------------------------------- a block as gpt.c decodes it */

/* One position through two transformer MLP/attention-projection sublayers in src/gpt/gpt.c's decode order
 * (attention itself left out): ln1, qkv matmul + bias, proj matmul + bias + residual, ln2, fc matmul + bias,
 * gelu, fc proj matmul + bias + residual; then the final layernorm and the logits. Output: the logits. */
enum { BC = 48, BV = 67, BL = 2 };
typedef struct block_w {
  float wqkv[BL][3 * BC * BC], bqkv[BL][3 * BC], wp[BL][BC * BC], bp[BL][BC], wfc[BL][4 * BC * BC], bfc[BL][4 * BC];
  float wfp[BL][BC * 4 * BC], bfp[BL][BC], g[BL][2][BC], be[BL][2][BC], wte[BV * BC], x0[BC];
} block_w;

static void block_program(const target *t, const block_w *W, float *logits) {
  weft_fabric *f = t->f;
  int64_t dx[2] = {1, BC}, dq[2] = {1, 3 * BC}, df[2] = {1, 4 * BC}, dl[2] = {1, BV}, one = 1, c = BC;
  int64_t wq[2] = {3 * BC, BC}, wp[2] = {BC, BC}, wf[2] = {4 * BC, BC}, wfp[2] = {BC, 4 * BC}, wt[2] = {BV, BC};
  int64_t q3 = 3 * BC, f4 = 4 * BC;
  weft_tensor *x = make(f, 2, dx, W->x0), *ln = make(f, 2, dx, NULL), *qkv = make(f, 2, dq, NULL);
  weft_tensor *x2 = make(f, 2, dx, NULL), *fc = make(f, 2, df, NULL), *fg = make(f, 2, df, NULL);
  weft_tensor *lg = make(f, 2, dl, NULL), *m = make(f, 1, &one, NULL), *s = make(f, 1, &one, NULL);
  weft_tensor *wte = make(f, 2, wt, W->wte), *P[BL][12];
  for (int l = 0; l < BL; l++) {
    P[l][0] = make(f, 2, wq, W->wqkv[l]), P[l][1] = make(f, 1, &q3, W->bqkv[l]);
    P[l][2] = make(f, 2, wp, W->wp[l]), P[l][3] = make(f, 1, &c, W->bp[l]);
    P[l][4] = make(f, 2, wf, W->wfc[l]), P[l][5] = make(f, 1, &f4, W->bfc[l]);
    P[l][6] = make(f, 2, wfp, W->wfp[l]), P[l][7] = make(f, 1, &c, W->bfp[l]);
    P[l][8] = make(f, 1, &c, W->g[l][0]), P[l][9] = make(f, 1, &c, W->be[l][0]);
    P[l][10] = make(f, 1, &c, W->g[l][1]), P[l][11] = make(f, 1, &c, W->be[l][1]);
  }
  weft_op_desc d = {WEFT_CONTRACT_EXACT, t->lane};
  OK(weft_scope_begin(f), "scope_begin");
  for (int l = 0; l < BL; l++) {
    OK(weft_op_layernorm(f, &d, x, P[l][8], P[l][9], 1e-5f, ln, m, s), "ln1");
    OK(weft_op_matmul(f, &d, ln, 0, P[l][0], 1, qkv), "qkv");
    OK(weft_op_add(f, &d, qkv, P[l][1], qkv), "qkv bias");
    /* attention stands in as the layernorm'd row (an op that ends the window) */
    OK(weft_op_matmul(f, &d, ln, 0, P[l][2], 1, x2), "attn proj");
    OK(weft_op_add(f, &d, x2, P[l][3], x2), "attn proj bias");
    OK(weft_op_add(f, &d, x2, x, x2), "residual 1");
    OK(weft_op_layernorm(f, &d, x2, P[l][10], P[l][11], 1e-5f, ln, m, s), "ln2");
    OK(weft_op_matmul(f, &d, ln, 0, P[l][4], 1, fc), "fc");
    OK(weft_op_add(f, &d, fc, P[l][5], fc), "fc bias");
    OK(weft_op_gelu(f, &d, fc, fg), "gelu");
    OK(weft_op_matmul(f, &d, fg, 0, P[l][6], 1, x), "fc proj");
    OK(weft_op_add(f, &d, x, P[l][7], x), "fc proj bias");
    OK(weft_op_add(f, &d, x, x2, x), "residual 2");
  }
  OK(weft_op_layernorm(f, &d, x, P[0][8], P[0][9], 1e-5f, ln, m, s), "lnf");
  OK(weft_op_matmul(f, &d, ln, 0, wte, 1, lg), "logits");
  OK(weft_scope_end(f), "scope_end");
  read_into(lg, logits, BV, "read the logits");
  weft_tensor *all[] = {x, ln, qkv, x2, fc, fg, lg, m, s, wte};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_tensor_destroy(all[i]);
  for (int l = 0; l < BL; l++)
    for (int i = 0; i < 12; i++) weft_tensor_destroy(P[l][i]);
}

static void block_run(world *w, tu_rng *r) {
  block_w *W = malloc(sizeof *W);
  float *p = (float *)W;
  for (size_t i = 0; i < sizeof *W / sizeof(float); i++) p[i] = tu_rng_float(r, -0.3f, 0.3f);
  for (int l = 0; l < BL; l++)
    for (int i = 0; i < BC; i++) W->g[l][0][i] += 1.0f, W->g[l][1][i] += 1.0f;
  float on[BV], off[BV], cpu[BV];
  uint64_t f0 = fused_now();
  block_program(&w->on, W, on);
  uint64_t f1 = fused_now();
  block_program(&w->off, W, off);
  block_program(&w->cpu, W, cpu);
  /* per layer: qkv + bias (2), proj + bias + residual (3), fc + bias + gelu (3), fc proj + bias + residual (3) */
  check_fused("a decode step's block", f1 - f0, 11 * BL, 1);
  vkt_same("a decode step's block: logits, fused vs unfused", on, off, BV);
  vkt_same("a decode step's block: logits, fused vs the cpu lane", on, cpu, BV);
  free(W);
}

/* GPT-2 (a small one) decoding on vulkan:0 through src/gpt: the same tokens with and without fusion, and with
 * fusion some ops ran fused. */
static void gpt_run(world *w) {
  static const weft_gpt_config CFG = {2, 64, 4, 256, 32};
  const size_t n = weft_gpt_param_count(&CFG);
  float *p = malloc(n * sizeof(float));
  weft_gpt_init_params(&CFG, 7, p);
  const int32_t prompt[4] = {'t', 'h', 'e', ' '};
  int32_t tok[2][2][12];
  uint64_t fused[2] = {0, 0};
  for (int which = 0; which < 2; which++) {
    target *t = which ? &w->off : &w->on;
    weft_gpt_opts opts = {WEFT_GPT_PLACE_PINNED, t->lane, WEFT_CONTRACT_EXACT};
    weft_gpt *g = NULL;
    weft_status st = weft_gpt_create(t->f, &CFG, p, n, &opts, &g);
    TU_CHECK(st == WEFT_OK, "gpt create: %s", g ? weft_gpt_last_error(g) : "no memory");
    if (st != WEFT_OK) break;
    uint64_t f0 = fused_now(), rng = 42;
    TU_CHECK(weft_gpt_generate(g, prompt, 4, 12, 0.0f, 0, &rng, tok[which][0], NULL) == WEFT_OK, "greedy: %s",
             weft_gpt_last_error(g));
    rng = 42;
    TU_CHECK(weft_gpt_generate(g, prompt, 4, 12, 0.8f, 20, &rng, tok[which][1], NULL) == WEFT_OK, "sampled: %s",
             weft_gpt_last_error(g));
    fused[which] = fused_now() - f0;
    weft_gpt_destroy(g);
  }
  TU_CHECK(fused[0] > 0 && fused[1] == 0, "gpt decode: %llu ops fused with fusion on, %llu off",
           (unsigned long long)fused[0], (unsigned long long)fused[1]);
  TU_CHECK(memcmp(tok[0], tok[1], sizeof tok[0]) == 0, "gpt decode: fused and unfused runs generate different tokens");
  free(p);
}

/* A fused kernel whose pipeline cannot be built when the window lets it go (the matmul and the bias add
 * were accepted before): the lane goes down, saying so, and c is never read wrong. */
static void fault_run(void) {
  weft_fabric *f = NULL;
  int lane = 0;
  unsetenv("WEFT_FUSE");
  if (!vkt_open(NULL, &f, &lane)) return;
  tu_rng r = {7};
  float a[6 * 10], b[10 * 12], bias[12], got[6 * 12], want[6 * 12];
  vkt_fill(&r, a, 60, 0), vkt_fill(&r, b, 120, 0), vkt_fill(&r, bias, 12, 0);
  int64_t da[2] = {6, 10}, db[2] = {10, 12}, dc[2] = {6, 12}, n = 12;
  weft_tensor *A = make(f, 2, da, a), *B = make(f, 2, db, b), *Bias = make(f, 1, &n, bias), *C = make(f, 2, dc, NULL);
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane}, cpu = {WEFT_CONTRACT_EXACT, WEFT_LANE_AUTO};
  size_t ci = 0;
  TU_STATUS(weft_fabric_lane_find(f, "cpu", &ci), WEFT_OK, "find the cpu lane");
  cpu.lane = (int)ci;
  TU_STATUS(weft_scope_begin(f), WEFT_OK, "scope_begin");
  TU_STATUS(weft_op_matmul(f, &d, A, 0, B, 0, C), WEFT_OK, "matmul (held)");
  TU_STATUS(weft_op_add(f, &d, C, Bias, C), WEFT_OK, "bias add (held)");
  weft_vk_inject_fault = WEFT_VK_FAULT_PIPELINE; /* the lane has built no matmul kernel yet */
  weft_status st = weft_scope_end(f);
  weft_vk_inject_fault = WEFT_VK_FAULT_NONE;
  TU_STATUS(st, WEFT_ERR_LANE_FAILED, "scope_end when the fused kernel cannot be built");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "held back for fusion"), "the message says what was lost: %s",
           weft_fabric_last_error(f));
  /* c was last written in place (c = c + bias), which the core cannot replay from a lost c: the read fails
   * and says so, as it would after any failure of the lane with that value only there; never wrong bits */
  st = weft_tensor_read(C, got, 72);
  printf("reading c after the lane went down: %s (%s)\n", weft_status_str(st), weft_fabric_last_error(f));
  TU_CHECK(st == WEFT_OK || (st == WEFT_ERR_LANE_FAILED && weft_fabric_last_error(f)[0]),
           "read c after the lane went down: %s", weft_status_str(st));
  weft_tensor *C2 = make(f, 2, dc, NULL);
  TU_STATUS(weft_op_matmul(f, &cpu, A, 0, B, 0, C2), WEFT_OK, "matmul on the cpu");
  TU_STATUS(weft_op_add(f, &cpu, C2, Bias, C2), WEFT_OK, "bias add on the cpu");
  TU_STATUS(weft_tensor_read(C2, want, 72), WEFT_OK, "read the cpu's c");
  if (st == WEFT_OK) vkt_same("c after the fused kernel failed", got, want, 72);
  weft_tensor_destroy(A), weft_tensor_destroy(B), weft_tensor_destroy(Bias), weft_tensor_destroy(C);
  weft_tensor_destroy(C2);
  weft_fabric_close(f);
}

/* --------------------------------------------------------------------------------------------- main */

/* max_binding: 0, or a cap on the lane's storage bindings (bytes) that makes every op here run in chunks. */
static int open_lane(int fuse, uint64_t max_binding, weft_fabric **f, int *lane) {
  if (!fuse) setenv("WEFT_FUSE", "0", 1);
  else unsetenv("WEFT_FUSE");
  weft_fabric_desc d = tu_desc();
  d.vulkan_max_binding = max_binding;
  int ok = vkt_open(&d, f, lane);
  unsetenv("WEFT_FUSE");
  return ok;
}

int main(void) {
  double t0 = tu_now();
  world w;
  memset(&w, 0, sizeof w);
  if (!open_lane(1, 0, &w.on.f, &w.on.lane)) return tu_finish("test_vk_fuse", t0);
  if (!open_lane(0, 0, &w.off.f, &w.off.lane)) {
    weft_fabric_close(w.on.f);
    return tu_finish("test_vk_fuse", t0);
  }
  size_t cpu = 0;
  TU_STATUS(weft_fabric_lane_find(w.on.f, "cpu", &cpu), WEFT_OK, "find the cpu lane");
  w.cpu.f = w.on.f, w.cpu.lane = (int)cpu;
  w.on.scope = w.off.scope = w.cpu.scope = 1;
  weft_lane_info info;
  if (weft_fabric_lane_info(w.on.f, (size_t)w.on.lane, &info) == WEFT_OK)
    TU_CHECK(tu_contains(info.details, "fuses matmul epilogues"), "vulkan:0's details do not say it fuses: %s", info.details);
  if (weft_fabric_lane_info(w.off.f, (size_t)w.off.lane, &info) == WEFT_OK)
    TU_CHECK(tu_contains(info.details, "fusion off (WEFT_FUSE=0)"), "under WEFT_FUSE=0 the details say: %s", info.details);
  tu_rng r = {tu_seed()};
  const weft_contract X = WEFT_CONTRACT_EXACT, F = WEFT_CONTRACT_FP32;

  const mm_case mm[] = {
      /* name                                   batch m    n    k   ta tb bias res gelu spec alias mid mm ew kern expect */
      {"decode row: matmul+bias", 1, 1, 96, 64, 0, 1, 1, 0, 0, 0, 0, 0, X, X, 0, 2},
      {"decode row: matmul+bias+residual", 1, 1, 64, 96, 0, 1, 1, 1, 0, 0, 0, 0, X, X, 0, 3},
      {"decode row: matmul+bias+gelu", 1, 1, 200, 50, 0, 1, 1, 0, 1, 0, 0, 0, X, X, 0, 3},
      {"odd: matmul+bias+residual+gelu", 1, 37, 53, 29, 0, 0, 1, 1, 1, 0, 0, 0, X, X, 0, 4},
      {"odd, specials in a and b", 1, 19, 41, 23, 0, 1, 1, 1, 1, 1, 0, 0, X, X, 0, 4},
      {"matmul+residual (no bias)", 1, 21, 33, 17, 0, 0, 0, 1, 0, 0, 0, 0, X, X, 0, 2},
      {"matmul+gelu (no adds)", 1, 21, 33, 17, 1, 0, 0, 0, 1, 0, 0, 0, X, X, 0, 2},
      {"batched, a^T", 3, 17, 70, 30, 1, 0, 1, 1, 1, 0, 0, 0, X, X, 0, 4},
      {"batched, b^T", 4, 33, 40, 65, 0, 1, 1, 0, 1, 1, 0, 0, X, X, 0, 3},
      {"tiles 128x128, k chunked", 1, 150, 260, 1000, 0, 1, 1, 1, 1, 0, 0, 0, X, X, 0, 4},
      {"tiles 64x64", 1, 70, 72, 36, 0, 0, 1, 1, 1, 0, 0, 0, X, X, 3, 4},
      {"tiles 64x64, vector loads", 1, 64, 64, 32, 0, 0, 1, 1, 1, 0, 0, 0, X, X, 3, 4},
      {"tiles 128x128, a^T b^T", 1, 130, 131, 45, 1, 1, 1, 1, 1, 1, 0, 0, X, X, 2, 4},
      {"tiles 128x128 k by 16", 2, 129, 140, 47, 0, 0, 1, 0, 1, 0, 0, 0, X, X, 4, 3},
      {"simple kernel forced", 2, 40, 36, 31, 0, 1, 1, 1, 1, 1, 0, 0, X, X, 1, 4},
      /* must not fuse (or must stop) */
      {"residual is c itself", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, RES_IS_C, 0, X, X, 0, 2},
      {"gelu in place", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, GELU_IN_PLACE, 0, X, X, 0, 3},
      {"gelu writes the residual", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, GELU_INTO_RES, 0, X, X, 0, 3},
      {"adds under fp32, matmul exact", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, 0, 0, X, F, 0, 0},
      {"fp32 matmul", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, 0, 0, F, F, 0, 0},
      {"read c after the bias add", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, 0, MID_READ_C, X, X, 0, 2},
      /* a write replaces the host copy and leaves the lane's buffer to the held add; the upload before the
       * next use of it on the lane, and a free, empty the window first */
      {"write the bias while its add is held", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, 0, MID_WRITE_BIAS, X, X, 0, 4},
      {"write the bias and use it again", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, 0, MID_WRITE_BIAS_USE, X, X, 0, 2},
      {"free the bias while its add is held", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, 0, MID_FREE_BIAS, X, X, 0, 2},
  };
  for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) mm_case_run(&w, &r, &mm[i]);

  const ln_case ln[] = {
      /* name                        N    C   in_place stats y_is_b mid spec expect */
      {"add+layernorm", 5, 96, 0, 1, 0, 0, 0, 2},
      {"add+layernorm in place, specials", 7, 77, 1, 1, 0, 0, 1, 2},
      {"add+layernorm, no mean/rstd", 3, 130, 0, 0, 0, 0, 1, 2},
      {"add+layernorm, one row", 1, 768, 1, 1, 0, 0, 0, 2},
      {"layernorm writes the add's input", 4, 32, 0, 1, 1, 0, 0, 0},
      {"read x2 between add and layernorm", 4, 32, 1, 1, 0, 1, 0, 0},
  };
  for (size_t i = 0; i < sizeof ln / sizeof ln[0]; i++) ln_case_run(&w, &r, &ln[i]);

  /* outside a scope nothing is held back */
  w.on.scope = w.off.scope = w.cpu.scope = 0;
  const mm_case mm_out = {"outside a scope", 1, 9, 24, 13, 0, 0, 1, 1, 1, 0, 0, 0, X, X, 0, 0};
  mm_case_run(&w, &r, &mm_out);
  const ln_case ln_out = {"add+layernorm outside a scope", 4, 32, 0, 1, 0, 0, 0, 0};
  ln_case_run(&w, &r, &ln_out);
  w.on.scope = w.off.scope = w.cpu.scope = 1;

  block_run(&w, &r);
  gpt_run(&w);
  weft_fabric_close(w.on.f);
  weft_fabric_close(w.off.f);

  fault_run();

  /* bindings capped at 32 KiB: the matmul in row, column and k blocks (the epilogue on each block's last k
   * chunk, the bias windowed by columns), the layernorm in row blocks */
  world c;
  memset(&c, 0, sizeof c);
  if (open_lane(1, 32768, &c.on.f, &c.on.lane)) {
    if (open_lane(0, 32768, &c.off.f, &c.off.lane)) {
      TU_STATUS(weft_fabric_lane_find(c.on.f, "cpu", &cpu), WEFT_OK, "find the cpu lane");
      c.cpu.f = c.on.f, c.cpu.lane = (int)cpu;
      c.on.scope = c.off.scope = c.cpu.scope = 1;
      const mm_case mc[] = {
          {"capped bindings: matmul+bias+residual+gelu", 1, 70, 150, 90, 0, 1, 1, 1, 1, 0, 0, 0, X, X, 0, 4},
          {"capped bindings, batched, a^T", 2, 60, 130, 40, 1, 0, 1, 1, 1, 1, 0, 0, X, X, 0, 4},
      };
      for (size_t i = 0; i < sizeof mc / sizeof mc[0]; i++) mm_case_run(&c, &r, &mc[i]);
      const ln_case lc = {"capped bindings: add+layernorm in place", 40, 300, 1, 1, 0, 0, 1, 2};
      ln_case_run(&c, &r, &lc);
      weft_fabric_close(c.off.f);
    }
    weft_fabric_close(c.on.f);
  }
  return tu_finish("test_vk_fuse", t0);
}
