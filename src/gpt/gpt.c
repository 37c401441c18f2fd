/* gpt.c - GPT-2 on weft's public API (gpt.h says what). Every op goes through weft_op_*: embedding,
 * layernorm, matmul (weights [out,in], so x.W^T with trans_b) plus a bias row, fused causal attention, GELU,
 * residual adds, the final layernorm, logits tied to wte, crossentropy; the backward with the matmul
 * transposes and sum_rows for the bias gradients; weft_grad_clip and weft_op_adamw. */
#include "gpt/gpt.h"

#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* parameter kinds in llm.c's order */
enum { K_WTE, K_WPE, K_LN1W, K_LN1B, K_QKVW, K_QKVB, K_APW, K_APB, K_LN2W, K_LN2B, K_FCW, K_FCB, K_FPW, K_FPB, K_LNFW, K_LNFB, K_COUNT };

typedef struct acts {
  int B, T;
  weft_tensor *tok, *tgt, *dloss;
  weft_tensor **x, **ln1, **m1, **s1, **qkv, **ay, **att, **x2, **ln2, **m2, **s2, **fch, **fcg; /* per layer (x: L+1) */
  weft_tensor *lnf, *mf, *sf, *logits, *losses;
  /* backward scratch */
  weft_tensor *dlogits, *dlnf, *dxa, *dxb, *dx2, *dtmp, *day, *dqkv, *dfc;
} acts;

struct weft_gpt {
  weft_fabric *f;
  weft_gpt_config cfg;
  weft_gpt_opts opts;
  int np;         /* parameter tensors: 4 + 12 L */
  weft_tensor **P, **G, **M, **Vm;
  size_t *off, *cnt; /* each parameter tensor's place in the flat buffer */
  int64_t (*dims)[2]; /* each parameter tensor's shape (dims[p][1] 0: a vector) */
  int have_train;     /* G, M and Vm made (on the first training step or moments written) */
  int *plane;        /* lane of each parameter tensor's update */
  int *llane;        /* lane per layer, [L] for the embedding and head */
  int64_t step;
  acts a;
  int have_acts;
  int home, home_rest; /* PLACE_AUTO: the lanes the weights were made resident on (-1: not chosen yet) */
  int *pkind;          /* each parameter tensor's kind (K_*) */
  uint64_t rr; /* PLACE_RR: ops placed so far */
  int cur_layer, cur_lane; /* the last op's layer and asked-for lane (D) */
  weft_op_kind cur_kind;
  weft_gpt_op_hook hook;
  void *hook_ctx;
  int dp_B;          /* data-parallel (weft_gpt_set_data_parallel): the whole batch's rows; 0 = off */
  weft_mpi_grad *dp; /* the step's reduction across the ranks, during backward */
  char err[512];
};

static weft_status fail(weft_gpt *g, weft_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->err, sizeof g->err, fmt, ap);
  va_end(ap);
  return st;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *weft_gpt_last_error(const weft_gpt *g) { return g ? g->err : "no model"; }
const weft_gpt_config *weft_gpt_get_config(const weft_gpt *g) { return &g->cfg; }
int64_t weft_gpt_step(const weft_gpt *g) { return g->step; }
void weft_gpt_set_step(weft_gpt *g, int64_t step) { g->step = step; }
int weft_gpt_layer_lane(const weft_gpt *g, int l) { return g->llane[l]; }

uint64_t weft_gpt_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#define FNV_BASIS 0xcbf29ce484222325ull

/* FNV-1a 64 of n bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

uint64_t weft_gpt_fingerprint(const float *p, size_t n) { return fnv1a(FNV_BASIS, p, n * sizeof(float)); }

int weft_gpt_config_ok(const weft_gpt_config *c, char *err, size_t errlen) {
  const char *why = NULL;
  if (c->L < 1 || c->L > 1024) why = "layers must be 1..1024";
  else if (c->C < 1 || c->C > 65536) why = "channels must be 1..65536";
  else if (c->NH < 1 || c->C % c->NH) why = "the number of heads must divide the channels";
  else if (c->V < 1 || c->V > 1 << 24) why = "the vocabulary must be 1..16777216";
  else if (c->maxT < 1 || c->maxT > 1 << 20) why = "the context must be 1..1048576";
  if (why && err) snprintf(err, errlen, "bad model shape (L=%d C=%d NH=%d V=%d maxT=%d): %s", c->L, c->C, c->NH, c->V, c->maxT, why);
  return why == NULL;
}

/* sizes of the 16 kinds (whole, all layers) */
static void kind_sizes(const weft_gpt_config *c, size_t s[K_COUNT]) {
  const size_t L = (size_t)c->L, C = (size_t)c->C;
  s[K_WTE] = (size_t)c->V * C, s[K_WPE] = (size_t)c->maxT * C;
  s[K_LN1W] = s[K_LN1B] = L * C, s[K_QKVW] = L * 3 * C * C, s[K_QKVB] = L * 3 * C;
  s[K_APW] = L * C * C, s[K_APB] = L * C, s[K_LN2W] = s[K_LN2B] = L * C;
  s[K_FCW] = L * 4 * C * C, s[K_FCB] = L * 4 * C, s[K_FPW] = L * 4 * C * C, s[K_FPB] = L * C;
  s[K_LNFW] = s[K_LNFB] = C;
}

size_t weft_gpt_param_count(const weft_gpt_config *c) {
  if (!weft_gpt_config_ok(c, NULL, 0)) return 0;
  size_t s[K_COUNT], n = 0;
  kind_sizes(c, s);
  for (int k = 0; k < K_COUNT; k++) n += s[k];
  return n;
}

/* an approximately normal draw from 12 uniforms (Irwin-Hall), in plain float arithmetic */
static float normal01(uint64_t *s) {
  float acc = 0.0f;
  for (int i = 0; i < 12; i++) acc += (float)(weft_gpt_rand(s) >> 40) * (1.0f / 16777216.0f);
  return acc - 6.0f;
}

void weft_gpt_init_params(const weft_gpt_config *c, uint64_t seed, float *p) {
  size_t s[K_COUNT];
  kind_sizes(c, s);
  uint64_t st = seed ^ 0x5eed5eed5eed5eedull;
  const float resid = 0.02f * weft_rsqrtf(2.0f * (float)c->L);
  for (int k = 0; k < K_COUNT; k++) {
    for (size_t i = 0; i < s[k]; i++) {
      float v;
      switch (k) {
      case K_LN1W: case K_LN2W: case K_LNFW: v = 1.0f; break;
      case K_LN1B: case K_LN2B: case K_LNFB: case K_QKVB: case K_APB: case K_FCB: case K_FPB: v = 0.0f; break;
      case K_APW: case K_FPW: v = normal01(&st) * resid; break;
      default: v = normal01(&st) * 0.02f; break;
      }
      *p++ = v;
    }
  }
}

/* ------------------------------------------------------------------------------------------ placement */

static uint64_t lane_ops(weft_fabric *f, int lane) {
  weft_lane_info li;
  if (lane < 0 || weft_fabric_lane_info(f, (size_t)lane, &li) != WEFT_OK) return 0;
  return li.failed ? 0 : (li.ops ? li.ops : WEFT_OPS_V1);
}

static int lane_honours(weft_fabric *f, int lane, weft_contract c) {
  weft_lane_info li;
  return lane >= 0 && weft_fabric_lane_info(f, (size_t)lane, &li) == WEFT_OK && (li.contracts & WEFT_CONTRACT_BIT(c));
}

static int cpu_lane(weft_fabric *f) {
  size_t i;
  return weft_fabric_lane_find(f, "cpu", &i) == WEFT_OK ? (int)i : WEFT_LANE_AUTO;
}

/* PLACE_RR: the i-th live lane (in turn) that offers op k under contract c; the router when none does. */
static int rr_lane(weft_gpt *g, weft_op_kind k, weft_contract c) {
  int lanes[64], n = 0;
  const size_t nl = weft_fabric_lane_count(g->f);
  for (size_t i = 0; i < nl && n < 64; i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(g->f, i, &li) != WEFT_OK || li.failed) continue;
    if (!(li.contracts & WEFT_CONTRACT_BIT(c))) continue;
    if (lane_ops(g->f, (int)i) & WEFT_OP_BIT(k)) lanes[n++] = (int)i;
  }
  if (!n) return WEFT_LANE_AUTO;
  return lanes[g->rr++ % (uint64_t)n];
}

/* The desc of an op of kind k in layer l (L: embedding/head). */
static weft_op_desc D(weft_gpt *g, int l, weft_op_kind k) {
  weft_op_desc d = WEFT_OP_DESC_INIT;
  /* The matmuls take the model's contract; the other ops exact under exact, and fp32 under any other (the
   * tensor contracts are for matmuls; fp32 lets a lane fuse and reorder the rest). */
  d.contract = k == WEFT_OP_MATMUL                       ? g->opts.contract
               : g->opts.contract == WEFT_CONTRACT_EXACT ? WEFT_CONTRACT_EXACT
                                                         : WEFT_CONTRACT_FP32;
  const int lane = g->llane[l];
  if (g->opts.place == WEFT_GPT_PLACE_RR) d.lane = rr_lane(g, k, d.contract);
  else if (lane >= 0) d.lane = (lane_ops(g->f, lane) & WEFT_OP_BIT(k)) ? lane : cpu_lane(g->f);
  /* a tf32/bf16 matmul on a placed lane that does not honour it (cuda:N does: cuBLAS on its tensor units) goes
   * to the router, among the lanes that do */
  if (d.lane >= 0 && k == WEFT_OP_MATMUL && !lane_honours(g->f, d.lane, d.contract)) d.lane = WEFT_LANE_AUTO;
  /* fp32 asks for less than exact: a lane placed by layer or by name that honours only exact runs the op
   * exact */
  if (k != WEFT_OP_MATMUL && d.contract == WEFT_CONTRACT_FP32 && d.lane >= 0 && !lane_honours(g->f, d.lane, d.contract))
    d.contract = WEFT_CONTRACT_EXACT;
  g->cur_layer = l, g->cur_kind = k, g->cur_lane = d.lane;
  return d;
}

void weft_gpt_set_op_hook(weft_gpt *g, weft_gpt_op_hook hook, void *ctx) {
  if (g) g->hook = hook, g->hook_ctx = ctx;
}

/* after an op ran: the hook (not for tensor reads and writes, nor scopes) */
static void noted(weft_gpt *g, const char *what) {
  if (!g->hook || !strncmp(what, "write ", 6) || !strncmp(what, "read ", 5) || !strncmp(what, "open ", 5) ||
      !strncmp(what, "close ", 6))
    return;
  g->hook(g->hook_ctx, what, g->cur_layer, g->cur_kind, g->cur_lane);
}

#define RUN(expr, what)                                                                                   \
  do {                                                                                                    \
    weft_status st_ = (expr);                                                                             \
    if (st_ != WEFT_OK) return fail(g, st_, "%s: %s", what, weft_fabric_last_error(g->f));               \
    noted(g, what);                                                                                       \
  } while (0)

/* ------------------------------------------------------------------------------------------ create */

static weft_tensor *mk(weft_gpt *g, weft_dtype dt, int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3, const void *data) {
  const int64_t d[4] = {d0, d1, d2, d3};
  weft_tensor *t = NULL;
  if (weft_tensor_create_typed(g->f, dt, nd, d, data, &t) != WEFT_OK) {
    if (!g->err[0]) snprintf(g->err, sizeof g->err, "cannot make a tensor: %s", weft_fabric_last_error(g->f));
    return NULL;
  }
  return t;
}

static weft_tensor *mkf(weft_gpt *g, int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  return mk(g, WEFT_DTYPE_F32, nd, d0, d1, d2, d3, NULL);
}

static void reshape(weft_tensor *t, int nd, int64_t d0, int64_t d1, int64_t d2) {
  const int64_t d[3] = {d0, d1, d2};
  (void)weft_tensor_reshape(t, nd, d);
}

/* parameter index of kind k, layer l */
static int pidx(const weft_gpt *g, int k, int l) {
  if (k == K_WTE) return 0;
  if (k == K_WPE) return 1;
  if (k == K_LNFW) return 2 + 12 * g->cfg.L;
  if (k == K_LNFB) return 3 + 12 * g->cfg.L;
  return 2 + (k - K_LN1W) * g->cfg.L + l;
}

weft_status weft_gpt_create(weft_fabric *f, const weft_gpt_config *cfg, const float *params, size_t count,
                            const weft_gpt_opts *opts, weft_gpt **out) {
  if (!out) return WEFT_ERR_INVALID_ARGUMENT;
  *out = NULL;
  weft_gpt *g = calloc(1, sizeof *g);
  if (!g) return WEFT_ERR_OUT_OF_MEMORY;
  *out = g; /* the caller reads the error from it, and destroys it */
  g->f = f;
  g->home = g->home_rest = -1;
  if (!f || !cfg || !params) return fail(g, WEFT_ERR_INVALID_ARGUMENT, "weft_gpt_create: a NULL argument");
  if (!weft_gpt_config_ok(cfg, g->err, sizeof g->err)) return WEFT_ERR_SHAPE;
  g->cfg = *cfg;
  const size_t want = weft_gpt_param_count(cfg);
  if (count != want)
    return fail(g, WEFT_ERR_SHAPE, "the parameters hold %zu floats; a model of L=%d C=%d NH=%d V=%d maxT=%d needs %zu",
                count, cfg->L, cfg->C, cfg->NH, cfg->V, cfg->maxT, want);
  if (opts) g->opts = *opts;
  else g->opts.place = WEFT_GPT_PLACE_AUTO, g->opts.contract = WEFT_CONTRACT_EXACT;
  const int L = cfg->L;
  const int64_t C = cfg->C;
  g->np = 4 + 12 * L;
  g->P = calloc((size_t)g->np, sizeof *g->P), g->G = calloc((size_t)g->np, sizeof *g->G);
  g->M = calloc((size_t)g->np, sizeof *g->M), g->Vm = calloc((size_t)g->np, sizeof *g->Vm);
  g->off = calloc((size_t)g->np, sizeof *g->off), g->cnt = calloc((size_t)g->np, sizeof *g->cnt);
  g->dims = calloc((size_t)g->np, sizeof *g->dims), g->pkind = calloc((size_t)g->np, sizeof *g->pkind);
  g->plane = calloc((size_t)g->np, sizeof *g->plane), g->llane = calloc((size_t)L + 1, sizeof *g->llane);
  if (!g->P || !g->G || !g->M || !g->Vm || !g->off || !g->cnt || !g->dims || !g->plane || !g->pkind || !g->llane)
    return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory for the model's tables");
  /* placement */
  if (g->opts.place == WEFT_GPT_PLACE_LAYERS) {
    const uint64_t need = WEFT_OP_BIT(WEFT_OP_LAYERNORM) | WEFT_OP_BIT(WEFT_OP_ATTENTION) | WEFT_OP_BIT(WEFT_OP_GELU) |
                          WEFT_OP_BIT(WEFT_OP_MATMUL);
    int lanes[64], n = 0;
    const size_t nl = weft_fabric_lane_count(f);
    for (size_t i = 0; i < nl && n < 64; i++) {
      weft_lane_info li;
      if (weft_fabric_lane_info(f, i, &li) != WEFT_OK || li.failed) continue;
      if (!(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) continue;
      if ((lane_ops(f, (int)i) & need) == need) lanes[n++] = (int)i;
    }
    if (!n) return fail(g, WEFT_ERR_UNSUPPORTED, "--place layers: no lane offers the transformer ops");
    for (int l = 0; l <= L; l++) g->llane[l] = lanes[l % n];
  } else if (g->opts.place == WEFT_GPT_PLACE_RR) {
    for (int l = 0; l <= L; l++) g->llane[l] = WEFT_LANE_AUTO;
  } else if (g->opts.place == WEFT_GPT_PLACE_PINNED) {
    if (lane_ops(f, g->opts.lane) == 0) return fail(g, WEFT_ERR_NOT_FOUND, "lane %d is not a live lane", g->opts.lane);
    for (int l = 0; l <= L; l++) g->llane[l] = g->opts.lane;
  } else {
    for (int l = 0; l <= L; l++) g->llane[l] = WEFT_LANE_AUTO;
  }
  size_t at = 0;
  for (int k = 0; k < K_COUNT; k++) {
    const int nlay = (k == K_WTE || k == K_WPE || k == K_LNFW || k == K_LNFB) ? 1 : L;
    for (int l = 0; l < nlay; l++) {
      int64_t d0 = C, d1 = 0;
      switch (k) {
      case K_WTE: d0 = cfg->V, d1 = C; break;
      case K_WPE: d0 = cfg->maxT, d1 = C; break;
      case K_QKVW: d0 = 3 * C, d1 = C; break;
      case K_QKVB: d0 = 3 * C; break;
      case K_APW: d0 = C, d1 = C; break;
      case K_FCW: d0 = 4 * C, d1 = C; break;
      case K_FCB: d0 = 4 * C; break;
      case K_FPW: d0 = C, d1 = 4 * C; break;
      default: break;
      }
      const int p = pidx(g, k, l);
      const int nd = d1 ? 2 : 1;
      g->off[p] = at, g->cnt[p] = (size_t)(d0 * (d1 ? d1 : 1));
      g->dims[p][0] = d0, g->dims[p][1] = d1;
      g->plane[p] = nlay == 1 ? L : l;
      g->pkind[p] = k;
      g->P[p] = mk(g, WEFT_DTYPE_F32, nd, d0, d1, 0, 0, params + at);
      if (!g->P[p]) return WEFT_ERR_OUT_OF_MEMORY;
      at += g->cnt[p];
    }
  }
  return WEFT_OK;
}

static void acts_free(weft_gpt *g) {
  acts *a = &g->a;
  weft_tensor **arrs[] = {a->x, a->ln1, a->m1, a->s1, a->qkv, a->ay, a->att, a->x2, a->ln2, a->m2, a->s2, a->fch, a->fcg};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
    if (!arrs[i]) continue;
    for (int l = 0; l <= g->cfg.L; l++)
      if (l < g->cfg.L || arrs[i] == a->x) weft_tensor_destroy(arrs[i][l]);
    free(arrs[i]);
  }
  weft_tensor *one[] = {a->tok, a->tgt, a->dloss, a->lnf, a->mf, a->sf, a->logits, a->losses, a->dlogits,
                        a->dlnf, a->dxa, a->dxb, a->dx2, a->dtmp, a->day, a->dqkv, a->dfc};
  for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) weft_tensor_destroy(one[i]);
  memset(a, 0, sizeof *a);
  g->have_acts = 0;
}

void weft_gpt_destroy(weft_gpt *g) {
  if (!g) return;
  acts_free(g);
  for (int p = 0; p < g->np; p++) {
    if (g->P) weft_tensor_destroy(g->P[p]);
    if (g->G) weft_tensor_destroy(g->G[p]);
    if (g->M) weft_tensor_destroy(g->M[p]);
    if (g->Vm) weft_tensor_destroy(g->Vm[p]);
  }
  free(g->P), free(g->G), free(g->M), free(g->Vm), free(g->off), free(g->cnt), free(g->dims), free(g->plane);
  free(g->pkind), free(g->llane);
  free(g);
}

/* The gradients and AdamW's moments (zeros), made when training first needs them: a model that only
 * generates never holds three more copies of its parameters. */
static weft_status train_state_make(weft_gpt *g) {
  if (g->have_train) return WEFT_OK;
  for (int p = 0; p < g->np; p++) {
    const int64_t d0 = g->dims[p][0], d1 = g->dims[p][1];
    const int nd = d1 ? 2 : 1;
    if (!g->G[p]) g->G[p] = mkf(g, nd, d0, d1, 0, 0);
    if (!g->M[p]) g->M[p] = mkf(g, nd, d0, d1, 0, 0);
    if (!g->Vm[p]) g->Vm[p] = mkf(g, nd, d0, d1, 0, 0);
    if (!g->G[p] || !g->M[p] || !g->Vm[p])
      return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of memory for the gradients and AdamW's moments");
  }
  g->have_train = 1;
  return WEFT_OK;
}

static weft_status acts_make(weft_gpt *g, int B, int T) {
  if (g->have_acts && g->a.B == B && g->a.T == T) return WEFT_OK;
  acts_free(g);
  acts *a = &g->a;
  const int L = g->cfg.L, NH = g->cfg.NH;
  const int64_t C = g->cfg.C, N = (int64_t)B * T, V = g->cfg.V;
  a->B = B, a->T = T;
  weft_tensor ***arrs[] = {&a->x, &a->ln1, &a->m1, &a->s1, &a->qkv, &a->ay, &a->att, &a->x2, &a->ln2, &a->m2, &a->s2, &a->fch, &a->fcg};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++)
    if (!(*arrs[i] = calloc((size_t)L + 1, sizeof(weft_tensor *)))) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
  g->have_acts = 1;
  int bad = 0;
  for (int l = 0; l <= L; l++) {
    bad |= !(a->x[l] = mkf(g, 2, N, C, 0, 0));
    if (l == L) break;
    bad |= !(a->ln1[l] = mkf(g, 2, N, C, 0, 0)) || !(a->m1[l] = mkf(g, 1, N, 0, 0, 0)) || !(a->s1[l] = mkf(g, 1, N, 0, 0, 0));
    bad |= !(a->qkv[l] = mkf(g, 2, N, 3 * C, 0, 0)) || !(a->ay[l] = mkf(g, 2, N, C, 0, 0));
    bad |= !(a->att[l] = mkf(g, 4, B, NH, T, T)) || !(a->x2[l] = mkf(g, 2, N, C, 0, 0));
    bad |= !(a->ln2[l] = mkf(g, 2, N, C, 0, 0)) || !(a->m2[l] = mkf(g, 1, N, 0, 0, 0)) || !(a->s2[l] = mkf(g, 1, N, 0, 0, 0));
    bad |= !(a->fch[l] = mkf(g, 2, N, 4 * C, 0, 0)) || !(a->fcg[l] = mkf(g, 2, N, 4 * C, 0, 0));
    if (bad) break;
  }
  bad |= !(a->tok = mk(g, WEFT_DTYPE_I32, 2, B, T, 0, 0, NULL)) || !(a->tgt = mk(g, WEFT_DTYPE_I32, 1, N, 0, 0, 0, NULL));
  bad |= !(a->lnf = mkf(g, 2, N, C, 0, 0)) || !(a->mf = mkf(g, 1, N, 0, 0, 0)) || !(a->sf = mkf(g, 1, N, 0, 0, 0));
  bad |= !(a->logits = mkf(g, 2, N, V, 0, 0)) || !(a->losses = mkf(g, 1, N, 0, 0, 0));
  if (bad) {
    acts_free(g); /* nothing half made is taken for the real thing next time */
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  return WEFT_OK;
}

static weft_status grads_make(weft_gpt *g) {
  acts *a = &g->a;
  if (a->dlogits) return WEFT_OK;
  const int64_t C = g->cfg.C, N = (int64_t)a->B * a->T, V = g->cfg.V;
  float *dl = malloc((size_t)N * sizeof(float));
  if (!dl) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
  /* the mean over the whole batch: this rank's rows of it when data-parallel */
  const float inv = weft_recipf((float)(g->dp_B ? (int64_t)g->dp_B * a->T : N));
  for (int64_t i = 0; i < N; i++) dl[i] = inv;
  a->dloss = mk(g, WEFT_DTYPE_F32, 1, N, 0, 0, 0, dl);
  free(dl);
  int bad = !a->dloss;
  bad |= !(a->dlogits = mkf(g, 2, N, V, 0, 0)) || !(a->dlnf = mkf(g, 2, N, C, 0, 0)) || !(a->dxa = mkf(g, 2, N, C, 0, 0));
  bad |= !(a->dxb = mkf(g, 2, N, C, 0, 0)) || !(a->dx2 = mkf(g, 2, N, C, 0, 0)) || !(a->dtmp = mkf(g, 2, N, C, 0, 0));
  bad |= !(a->day = mkf(g, 2, N, C, 0, 0)) || !(a->dqkv = mkf(g, 2, N, 3 * C, 0, 0)) || !(a->dfc = mkf(g, 2, N, 4 * C, 0, 0));
  if (bad) {
    acts_free(g);
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  return WEFT_OK;
}

static weft_status check_tokens(weft_gpt *g, const int32_t *tok, int B, int T) {
  if (B < 1 || T < 1 || T > g->cfg.maxT)
    return fail(g, WEFT_ERR_SHAPE, "batch %d x %d tokens: T must be 1..%d (the context) and B at least 1", B, T, g->cfg.maxT);
  for (int64_t i = 0; i < (int64_t)B * T; i++)
    if (tok[i] < 0 || tok[i] >= g->cfg.V) return fail(g, WEFT_ERR_INVALID_ARGUMENT, "token %d at %lld is outside 0..%d", tok[i], (long long)i, g->cfg.V - 1);
  return WEFT_OK;
}

#define PP(k, l) g->P[pidx(g, k, l)]
#define GG(k, l) g->G[pidx(g, k, l)]

/* forward of a.tok through the logits (and losses when with_loss) */
static weft_status forward(weft_gpt *g, int with_loss) {
  weft_fabric *f = g->f;
  acts *a = &g->a;
  const int L = g->cfg.L, B = a->B, T = a->T;
  const int64_t C = g->cfg.C, N = (int64_t)B * T;
  weft_op_desc d;
  reshape(a->x[0], 3, B, T, C);
  d = D(g, L, WEFT_OP_EMBEDDING);
  RUN(weft_op_embedding(f, &d, a->tok, NULL, PP(K_WTE, 0), PP(K_WPE, 0), a->x[0]), "embedding");
  reshape(a->x[0], 2, N, C, 0);
  for (int l = 0; l < L; l++) {
    d = D(g, l, WEFT_OP_LAYERNORM);
    RUN(weft_op_layernorm(f, &d, a->x[l], PP(K_LN1W, l), PP(K_LN1B, l), 1e-5f, a->ln1[l], a->m1[l], a->s1[l]), "ln1");
    d = D(g, l, WEFT_OP_MATMUL);
    RUN(weft_op_matmul(f, &d, a->ln1[l], 0, PP(K_QKVW, l), 1, a->qkv[l]), "qkv matmul");
    d = D(g, l, WEFT_OP_ADD);
    RUN(weft_op_add(f, &d, a->qkv[l], PP(K_QKVB, l), a->qkv[l]), "qkv bias");
    reshape(a->qkv[l], 3, B, T, 3 * C), reshape(a->ay[l], 3, B, T, C);
    d = D(g, l, WEFT_OP_ATTENTION);
    RUN(weft_op_attention(f, &d, a->qkv[l], g->cfg.NH, a->ay[l], a->att[l], NULL), "attention");
    reshape(a->qkv[l], 2, N, 3 * C, 0), reshape(a->ay[l], 2, N, C, 0);
    d = D(g, l, WEFT_OP_MATMUL);
    RUN(weft_op_matmul(f, &d, a->ay[l], 0, PP(K_APW, l), 1, a->x2[l]), "attn proj");
    d = D(g, l, WEFT_OP_ADD);
    RUN(weft_op_add(f, &d, a->x2[l], PP(K_APB, l), a->x2[l]), "attn proj bias");
    RUN(weft_op_add(f, &d, a->x2[l], a->x[l], a->x2[l]), "residual 1");
    d = D(g, l, WEFT_OP_LAYERNORM);
    RUN(weft_op_layernorm(f, &d, a->x2[l], PP(K_LN2W, l), PP(K_LN2B, l), 1e-5f, a->ln2[l], a->m2[l], a->s2[l]), "ln2");
    d = D(g, l, WEFT_OP_MATMUL);
    RUN(weft_op_matmul(f, &d, a->ln2[l], 0, PP(K_FCW, l), 1, a->fch[l]), "fc");
    d = D(g, l, WEFT_OP_ADD);
    RUN(weft_op_add(f, &d, a->fch[l], PP(K_FCB, l), a->fch[l]), "fc bias");
    d = D(g, l, WEFT_OP_GELU);
    RUN(weft_op_gelu(f, &d, a->fch[l], a->fcg[l]), "gelu");
    d = D(g, l, WEFT_OP_MATMUL);
    RUN(weft_op_matmul(f, &d, a->fcg[l], 0, PP(K_FPW, l), 1, a->x[l + 1]), "fc proj");
    d = D(g, l, WEFT_OP_ADD);
    RUN(weft_op_add(f, &d, a->x[l + 1], PP(K_FPB, l), a->x[l + 1]), "fc proj bias");
    RUN(weft_op_add(f, &d, a->x[l + 1], a->x2[l], a->x[l + 1]), "residual 2");
  }
  d = D(g, L, WEFT_OP_LAYERNORM);
  RUN(weft_op_layernorm(f, &d, a->x[L], PP(K_LNFW, 0), PP(K_LNFB, 0), 1e-5f, a->lnf, a->mf, a->sf), "lnf");
  d = D(g, L, WEFT_OP_MATMUL);
  RUN(weft_op_matmul(f, &d, a->lnf, 0, PP(K_WTE, 0), 1, a->logits), "logits");
  if (with_loss) {
    d = D(g, L, WEFT_OP_CROSSENTROPY);
    RUN(weft_op_crossentropy(f, &d, a->logits, a->tgt, a->losses), "crossentropy");
  }
  return WEFT_OK;
}

static weft_status mean_loss(weft_gpt *g, float *out) {
  const int64_t N = (int64_t)g->a.B * g->a.T;
  float *l = malloc((size_t)N * sizeof(float));
  if (!l) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
  weft_status st = weft_tensor_read(g->a.losses, l, (size_t)N);
  if (st != WEFT_OK) {
    free(l);
    return fail(g, st, "read the losses: %s", weft_fabric_last_error(g->f));
  }
  double s = 0;
  for (int64_t i = 0; i < N; i++) s += l[i];
  free(l);
  /* data-parallel: this rank's share of the whole batch's mean (the ranks' shares add up to it) */
  *out = (float)(s / (g->dp_B ? (double)g->dp_B * g->a.T : (double)N));
  return WEFT_OK;
}

/* PLACE_AUTO: the weights' home. Every op is still routed one by one, but weights moved to answer one op
 * would be moved again and again (a decode step reads all of them), so they live where the cost model puts
 * a step of this many rows fastest: per lane that runs every op of the model, the predicted dispatch and
 * compute of the step's matmuls, layernorms, GELU and adds (transfers left out: the weights move once).
 * The host's lanes need no copy; a device lane gets one now (weft_tensor_prefetch), so the router sees them
 * resident there and counts no transfer for them. */
static uint64_t model_ops(void) {
  static const weft_op_kind k[] = {WEFT_OP_EMBEDDING, WEFT_OP_LAYERNORM, WEFT_OP_MATMUL, WEFT_OP_ADD,
                                   WEFT_OP_GELU,      WEFT_OP_COPY_SLICE, WEFT_OP_ATTENTION_CACHED};
  uint64_t m = 0;
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) m |= WEFT_OP_BIT(k[i]);
  return m;
}

/* The lane among those that run every op in `ops` (under the matmul's contract for matmuls) with the least
 * predicted dispatch + compute for the queries q[] (per_layer: how many of it a layer has; 0: one a step);
 * -1 when none does. */
typedef struct home_query {
  weft_op_kind op;
  int64_t m, n, k, cols, per_layer;
} home_query;

static int best_lane_cost(weft_gpt *g, uint64_t ops, const home_query *q, size_t nq, int only, double *out_cost);

static int best_lane(weft_gpt *g, uint64_t ops, const home_query *q, size_t nq) {
  double c;
  return best_lane_cost(g, ops, q, nq, -1, &c);
}

/* only >= 0: that lane alone (-1 when it cannot run them); *out_cost: the chosen lane's predicted time */
static int best_lane_cost(weft_gpt *g, uint64_t ops, const home_query *q, size_t nq, int only, double *out_cost) {
  weft_fabric *f = g->f;
  const size_t nl = weft_fabric_lane_count(f);
  double best = 0;
  int home = -1;
  for (size_t i = 0; i < nl; i++) {
    if (only >= 0 && (int)i != only) continue;
    if ((lane_ops(f, (int)i) & ops) != ops) continue;
    double total = 0;
    int ok = 1;
    for (size_t j = 0; j < nq && ok; j++) {
      weft_route_query rq;
      memset(&rq, 0, sizeof rq);
      rq.op = q[j].op, rq.contract = q[j].op == WEFT_OP_MATMUL ? g->opts.contract : WEFT_CONTRACT_EXACT;
      rq.batch = 1, rq.m = q[j].m, rq.n = q[j].n, rq.k = q[j].k, rq.rows = q[j].m, rq.cols = q[j].cols;
      weft_route_explanation ex;
      ok = weft_route_explain(f, &rq, &ex) == WEFT_OK && i < ex.nlanes && ex.lanes[i].eligible;
      if (ok)
        total += (ex.lanes[i].alpha + ex.lanes[i].compute) *
                 (double)(q[j].per_layer ? q[j].per_layer * g->cfg.L : 1);
    }
    if (ok && (home < 0 || total < best)) home = (int)i, best = total;
  }
  *out_cost = best;
  return home;
}

static weft_status choose_home(weft_gpt *g, int64_t rows) {
  if (g->opts.place != WEFT_GPT_PLACE_AUTO || g->home != -1) return WEFT_OK;
  /* on measured models, not the built-in priors: a home chosen on a guess holds the weights for the run */
  if (weft_fabric_lane_count(g->f) > 1) RUN(weft_fabric_calibration_wait(g->f), "measure the lanes");
  const int64_t C = g->cfg.C, V = g->cfg.V;
  const home_query mm[] = {{WEFT_OP_MATMUL, rows, 3 * C, C, 0, 1}, {WEFT_OP_MATMUL, rows, C, C, 0, 1},
                           {WEFT_OP_MATMUL, rows, 4 * C, C, 0, 1}, {WEFT_OP_MATMUL, rows, C, 4 * C, 0, 1},
                           {WEFT_OP_MATMUL, rows, V, C, 0, 0}};
  const home_query rest[] = {{WEFT_OP_LAYERNORM, rows, 0, 0, C, 2}, {WEFT_OP_GELU, rows, 0, 0, 4 * C, 1},
                             {WEFT_OP_ADD, rows, 0, 0, C, 4}};
  /* the matmuls' weights where the matmuls go (under tf32/bf16 the tensor lane, which runs only them), the
   * others' where the other ops go; the token table, which both read, in both places */
  const int hr = best_lane(g, model_ops() & ~WEFT_OP_BIT(WEFT_OP_MATMUL), rest, sizeof rest / sizeof *rest);
  double t_best = 0, t_hr = 0;
  int hm = best_lane_cost(g, WEFT_OP_BIT(WEFT_OP_MATMUL), mm, sizeof mm / sizeof *mm, -1, &t_best);
  /* one home for both where it costs the matmuls at most 5% more: activations then never cross lanes */
  if (hm >= 0 && hr >= 0 && hm != hr && best_lane_cost(g, WEFT_OP_BIT(WEFT_OP_MATMUL), mm, sizeof mm / sizeof *mm, hr, &t_hr) == hr &&
      t_hr <= 1.05 * t_best)
    hm = hr;
  g->home = hm >= 0 ? hm : -2, g->home_rest = hr;
  for (int i = 0; i < g->np; i++) {
    const int k = g->pkind[i];
    const int mat = k == K_QKVW || k == K_APW || k == K_FCW || k == K_FPW;
    if ((mat || k == K_WTE) && hm >= 0) RUN(weft_tensor_prefetch(g->P[i], (size_t)hm), "make the weights resident");
    if (!mat && hr >= 0) RUN(weft_tensor_prefetch(g->P[i], (size_t)hr), "make the weights resident");
  }
  return WEFT_OK;
}

static weft_status load_batch(weft_gpt *g, const int32_t *tok, const int32_t *tgt, int B, int T) {
  weft_status st = check_tokens(g, tok, B, T);
  if (st == WEFT_OK) st = choose_home(g, (int64_t)B * T);
  if (st == WEFT_OK && tgt) st = check_tokens(g, tgt, B, T);
  if (st != WEFT_OK) return st;
  if ((st = acts_make(g, B, T)) != WEFT_OK) return st;
  RUN(weft_tensor_write_i32(g->a.tok, tok, (size_t)B * T), "write the tokens");
  if (tgt) RUN(weft_tensor_write_i32(g->a.tgt, tgt, (size_t)B * T), "write the targets");
  return WEFT_OK;
}

/* The forward pass (or the backward, or the optimizer's steps) as one scope: a GPU lane submits it as one
 * graph (replayed from the second step on) and fuses each matmul with its bias, residual and GELU, the same
 * bits. Inside the caller's own scope (scopes do not nest) it runs in that one. */
static weft_status scoped(weft_gpt *g, weft_status (*fn)(weft_gpt *, const void *), const void *arg,
                          const char *what) {
  weft_status st = weft_scope_begin(g->f);
  if (st == WEFT_ERR_STATE) return fn(g, arg);
  if (st != WEFT_OK) return fail(g, st, "open a scope for the %s: %s", what, weft_fabric_last_error(g->f));
  st = fn(g, arg);
  weft_status end = weft_scope_end(g->f);
  if (st == WEFT_OK && end != WEFT_OK) return fail(g, end, "run the %s: %s", what, weft_fabric_last_error(g->f));
  return st;
}

static weft_status forward_with_loss(weft_gpt *g, const void *unused) {
  (void)unused;
  return forward(g, 1);
}

weft_status weft_gpt_loss(weft_gpt *g, const int32_t *tok, const int32_t *tgt, int B, int T, float *out_loss) {
  weft_status st = load_batch(g, tok, tgt, B, T);
  if (st == WEFT_OK) st = scoped(g, forward_with_loss, NULL, "forward pass");
  if (st == WEFT_OK) st = mean_loss(g, out_loss);
  return st;
}

weft_status weft_gpt_logits(weft_gpt *g, const int32_t *tok, int T, float *out) {
  weft_status st = load_batch(g, tok, NULL, 1, T);
  if (st == WEFT_OK) st = forward(g, 0);
  if (st != WEFT_OK) return st;
  const size_t V = (size_t)g->cfg.V, n = (size_t)T * V;
  float *lg = malloc(n * sizeof(float));
  if (!lg) return fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
  st = weft_tensor_read(g->a.logits, lg, n);
  if (st == WEFT_OK) memcpy(out, lg + (size_t)(T - 1) * V, V * sizeof(float));
  free(lg);
  return st == WEFT_OK ? st : fail(g, st, "read the logits: %s", weft_fabric_last_error(g->f));
}

weft_status weft_gpt_logits_all(weft_gpt *g, const int32_t *tok, int B, int T, float *out) {
  weft_status st = load_batch(g, tok, NULL, B, T);
  if (st == WEFT_OK) st = forward(g, 0);
  if (st != WEFT_OK) return st;
  st = weft_tensor_read(g->a.logits, out, (size_t)B * T * (size_t)g->cfg.V);
  return st == WEFT_OK ? st : fail(g, st, "read the logits: %s", weft_fabric_last_error(g->f));
}

/* The ops that sum over the batch (weight and bias gradients, layernorm's gains and biases): this rank's
 * samples alone, or, data-parallel, the whole batch across the ranks (weft_mpi_grad_*: chained under exact,
 * the bits of one process). */
#define GRAD_MM(a_, ta_, b_, tb_, c_)                                                                            \
  (g->dp ? weft_mpi_grad_matmul(g->dp, &d, a_, ta_, b_, tb_, c_) : weft_op_matmul(f, &d, a_, ta_, b_, tb_, c_))
#define GRAD_SUM(x_, out_) (g->dp ? weft_mpi_grad_sum_rows(g->dp, &d, x_, out_) : weft_op_sum_rows(f, &d, x_, out_))
#define GRAD_LNB(dy_, x_, m_, r_, gam_, dx_, dg_, db_) (g->dp ? lnb_dp(g, &d, dy_, x_, m_, r_, gam_, dx_, dg_, db_) \
                                                            : weft_op_layernorm_backward(f, &d, dy_, x_, m_, r_, gam_, dx_, dg_, db_))

static weft_status lnb_dp(weft_gpt *g, const weft_op_desc *d, weft_tensor *dy, weft_tensor *x, weft_tensor *mean,
                          weft_tensor *rstd, weft_tensor *gamma, weft_tensor *dx, weft_tensor *dgamma,
                          weft_tensor *dbeta) {
  weft_tensor *const in[5] = {dy, x, mean, rstd, gamma}, *const out[3] = {dx, dgamma, dbeta};
  return weft_mpi_grad_op(g->dp, d, WEFT_OP_LAYERNORM_BACKWARD, in, 5, out, 3, NULL, 6u);
}

/* A linear layer's backward in layer l, y = x W^T + b: W's gradient (dy^T x, accumulated over the batch as
 * the data-parallel chain wants), b's (dy's column sums), then dx = dy W, which the caller's RUN names. */
static weft_status linear_backward(weft_gpt *g, int l, weft_tensor *dy, weft_tensor *x, int kw, int kb,
                                   weft_tensor *dx, const char *what_w, const char *what_b) {
  weft_fabric *f = g->f;
  weft_op_desc d = D(g, l, WEFT_OP_MATMUL);
  RUN(GRAD_MM(dy, 1, x, 0, GG(kw, l)), what_w);
  d = D(g, l, WEFT_OP_SUM_ROWS);
  RUN(GRAD_SUM(dy, GG(kb, l)), what_b);
  d = D(g, l, WEFT_OP_MATMUL);
  return weft_op_matmul(f, &d, dy, 0, PP(kw, l), 0, dx);
}

static weft_status backward_ops(weft_gpt *g) {
  weft_fabric *f = g->f;
  acts *a = &g->a;
  const int L = g->cfg.L, B = a->B, T = a->T;
  const int64_t C = g->cfg.C, N = (int64_t)B * T;
  weft_op_desc d;
  /* the accumulated gradients start at zero (the others are written) */
  for (int p = 0; p < g->np; p++) {
    d = D(g, g->plane[p], WEFT_OP_SCALE);
    RUN(weft_op_scale(f, &d, 0.0f, g->G[p], g->G[p]), "zero a gradient");
  }
  d = D(g, L, WEFT_OP_CROSSENTROPY_BACKWARD);
  RUN(weft_op_crossentropy_backward(f, &d, a->logits, a->tgt, a->dloss, a->dlogits), "crossentropy backward");
  d = D(g, L, WEFT_OP_MATMUL);
  RUN(weft_op_matmul(f, &d, a->dlogits, 0, PP(K_WTE, 0), 0, a->dlnf), "dlnf");
  /* the token table's gradient: the head's matmul, then the embedding's backward, each over the batch */
  if (g->dp) RUN(weft_mpi_grad_passes(g->dp, GG(K_WTE, 0), 2), "dwte (two passes)");
  RUN(GRAD_MM(a->dlogits, 1, a->lnf, 0, GG(K_WTE, 0)), "dwte (head)");
  d = D(g, L, WEFT_OP_LAYERNORM_BACKWARD);
  RUN(GRAD_LNB(a->dlnf, a->x[L], a->mf, a->sf, PP(K_LNFW, 0), a->dxa, GG(K_LNFW, 0), GG(K_LNFB, 0)), "lnf backward");
  weft_tensor *dx = a->dxa, *dxn = a->dxb;
  for (int l = L - 1; l >= 0; l--) {
    RUN(linear_backward(g, l, dx, a->fcg[l], K_FPW, K_FPB, a->dfc, "dw fc proj", "db fc proj"), "dgelu");
    d = D(g, l, WEFT_OP_GELU_BACKWARD);
    RUN(weft_op_gelu_backward(f, &d, a->fch[l], a->dfc, a->dfc), "gelu backward");
    RUN(linear_backward(g, l, a->dfc, a->ln2[l], K_FCW, K_FCB, a->dtmp, "dw fc", "db fc"), "dln2");
    d = D(g, l, WEFT_OP_LAYERNORM_BACKWARD);
    RUN(GRAD_LNB(a->dtmp, a->x2[l], a->m2[l], a->s2[l], PP(K_LN2W, l), a->dtmp, GG(K_LN2W, l), GG(K_LN2B, l)), "ln2 backward");
    d = D(g, l, WEFT_OP_ADD);
    RUN(weft_op_add(f, &d, dx, a->dtmp, a->dx2), "dx2");
    RUN(linear_backward(g, l, a->dx2, a->ay[l], K_APW, K_APB, a->day, "dw attn proj", "db attn proj"), "dattn");
    reshape(a->day, 3, B, T, C), reshape(a->qkv[l], 3, B, T, 3 * C), reshape(a->dqkv, 3, B, T, 3 * C);
    d = D(g, l, WEFT_OP_ATTENTION_BACKWARD);
    RUN(weft_op_attention_backward(f, &d, a->day, a->qkv[l], a->att[l], g->cfg.NH, a->dqkv), "attention backward");
    reshape(a->day, 2, N, C, 0), reshape(a->qkv[l], 2, N, 3 * C, 0), reshape(a->dqkv, 2, N, 3 * C, 0);
    RUN(linear_backward(g, l, a->dqkv, a->ln1[l], K_QKVW, K_QKVB, a->dtmp, "dw qkv", "db qkv"), "dln1");
    d = D(g, l, WEFT_OP_LAYERNORM_BACKWARD);
    RUN(GRAD_LNB(a->dtmp, a->x[l], a->m1[l], a->s1[l], PP(K_LN1W, l), a->dtmp, GG(K_LN1W, l), GG(K_LN1B, l)), "ln1 backward");
    d = D(g, l, WEFT_OP_ADD);
    RUN(weft_op_add(f, &d, a->dx2, a->dtmp, dxn), "dx");
    weft_tensor *t = dx;
    dx = dxn, dxn = t;
  }
  reshape(dx, 3, B, T, C);
  d = D(g, L, WEFT_OP_EMBEDDING_BACKWARD);
  weft_status st;
  if (g->dp) {
    weft_tensor *const ein[3] = {dx, a->tok, NULL}, *const eout[2] = {GG(K_WTE, 0), GG(K_WPE, 0)};
    st = weft_mpi_grad_op(g->dp, &d, WEFT_OP_EMBEDDING_BACKWARD, ein, 3, eout, 2, NULL, 3u);
  } else {
    st = weft_op_embedding_backward(f, &d, dx, a->tok, NULL, GG(K_WTE, 0), GG(K_WPE, 0));
  }
  reshape(dx, 2, N, C, 0);
  if (st != WEFT_OK) return fail(g, st, "embedding backward: %s", weft_fabric_last_error(f));
  return WEFT_OK;
}

static weft_status backward(weft_gpt *g) {
  if (!g->dp_B) return backward_ops(g);
  weft_contract c = g->opts.contract == WEFT_CONTRACT_FP32 ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT;
  weft_status st = weft_mpi_grad_begin(g->f, c, &g->dp);
  if (st != WEFT_OK) return fail(g, st, "data-parallel gradients: %s", weft_fabric_last_error(g->f));
  st = backward_ops(g);
  weft_status end = weft_mpi_grad_end(g->dp);
  g->dp = NULL;
  if (st == WEFT_OK && end != WEFT_OK)
    return fail(g, end, "combining the gradients across the ranks: %s", weft_fabric_last_error(g->f));
  return st;
}

weft_status weft_gpt_set_data_parallel(weft_gpt *g, int batch) {
  if (batch < 0) return fail(g, WEFT_ERR_INVALID_ARGUMENT, "data-parallel batch %d", batch);
  if (batch && g->opts.contract != WEFT_CONTRACT_EXACT && g->opts.contract != WEFT_CONTRACT_FP32)
    return fail(g, WEFT_ERR_UNSUPPORTED, "data-parallel training takes the exact or the fp32 contract, not %s",
                weft_contract_str(g->opts.contract));
  g->dp_B = batch;
  if (g->a.dlogits) acts_free(g); /* dloss is made again with the new mean */
  return WEFT_OK;
}

static weft_status backward_all(weft_gpt *g, const void *unused) {
  (void)unused;
  return backward_ops(g);
}

/* AdamW on every parameter; hp: the learning rate and the weight decay. */
static weft_status adamw_all(weft_gpt *g, const void *hp) {
  const float lr = ((const float *)hp)[0], weight_decay = ((const float *)hp)[1];
  weft_op_desc d;
  for (int p = 0; p < g->np; p++) {
    const int matrix = p <= 1 || (p >= pidx(g, K_QKVW, 0) && p < pidx(g, K_QKVB, 0)) ||
                       (p >= pidx(g, K_APW, 0) && p < pidx(g, K_APB, 0)) || (p >= pidx(g, K_FCW, 0) && p < pidx(g, K_FCB, 0)) ||
                       (p >= pidx(g, K_FPW, 0) && p < pidx(g, K_FPB, 0));
    d = D(g, g->plane[p], WEFT_OP_ADAMW);
    RUN(weft_op_adamw(g->f, &d, g->P[p], g->G[p], g->M[p], g->Vm[p], lr, 0.9f, 0.95f, 1e-8f, matrix ? weight_decay : 0.0f, g->step), "adamw");
  }
  return WEFT_OK;
}

weft_status weft_gpt_train_step(weft_gpt *g, const int32_t *tok, const int32_t *tgt, int B, int T, float lr,
                                float weight_decay, float max_norm, float *out_loss, float *out_norm) {
  /* a NaN or infinite hyperparameter would turn every weight into NaN with no word: refused before any op */
  if (!isfinite(lr) || !isfinite(weight_decay) || isnan(max_norm))
    return fail(g, WEFT_ERR_INVALID_ARGUMENT, "train step: lr (%g), weight_decay (%g) and max_norm (%g) must be finite numbers",
                (double)lr, (double)weight_decay, (double)max_norm);
  weft_status st = load_batch(g, tok, tgt, B, T);
  if (st == WEFT_OK) st = train_state_make(g);
  if (st == WEFT_OK) st = grads_make(g);
  if (st == WEFT_OK) st = scoped(g, forward_with_loss, NULL, "forward pass");
  if (st == WEFT_OK && out_loss) st = mean_loss(g, out_loss);
  /* data-parallel: the chained reduction reads and sends gradients as they are made, outside any scope */
  if (st == WEFT_OK) st = g->dp_B ? backward(g) : scoped(g, backward_all, NULL, "backward pass");
  if (st != WEFT_OK) return st;
  float norm = 0;
  weft_op_desc d = D(g, g->cfg.L, WEFT_OP_SUMSQ);
  if (max_norm > 0) RUN(weft_grad_clip(g->f, &d, g->G, g->np, max_norm, &norm), "gradient clip");
  if (out_norm) *out_norm = norm;
  g->step++;
  const float hp[2] = {lr, weight_decay};
  return scoped(g, adamw_all, hp, "optimizer step");
}

static weft_status read_all(weft_gpt *g, weft_tensor **T, float *out, size_t count) {
  if (count != weft_gpt_param_count(&g->cfg)) return fail(g, WEFT_ERR_SHAPE, "%zu floats given, the model has %zu", count, weft_gpt_param_count(&g->cfg));
  for (int p = 0; p < g->np; p++) RUN(weft_tensor_read(T[p], out + g->off[p], g->cnt[p]), "read a parameter");
  return WEFT_OK;
}

weft_status weft_gpt_read_params(weft_gpt *g, float *params, size_t count) { return read_all(g, g->P, params, count); }

weft_status weft_gpt_read_moments(weft_gpt *g, float *m, float *v, size_t count) {
  weft_status st = train_state_make(g);
  if (st != WEFT_OK) return st;
  st = read_all(g, g->M, m, count);
  return st == WEFT_OK ? read_all(g, g->Vm, v, count) : st;
}

weft_status weft_gpt_write_moments(weft_gpt *g, const float *m, const float *v, size_t count) {
  if (count != weft_gpt_param_count(&g->cfg)) return fail(g, WEFT_ERR_SHAPE, "%zu floats given, the model has %zu", count, weft_gpt_param_count(&g->cfg));
  weft_status st = train_state_make(g);
  if (st != WEFT_OK) return st;
  for (int p = 0; p < g->np; p++) {
    RUN(weft_tensor_write(g->M[p], m + g->off[p], g->cnt[p]), "write m");
    RUN(weft_tensor_write(g->Vm[p], v + g->off[p], g->cnt[p]), "write v");
  }
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------------ generation */

static int32_t sample(const float *logits, int V, float temperature, int top_k, uint64_t *rng, float *prob, int *idx) {
  if (temperature <= 0) {
    /* the first index of the largest logit (NaNs never win; a NaN first logit gives 0, as a compare chain
     * from it would): eight running maxima without branches, then the first index that holds it */
    if (logits[0] != logits[0]) return 0;
    float m[8];
    for (int j = 0; j < 8; j++) m[j] = logits[0];
    int i = 0;
    for (; i + 8 <= V; i += 8)
      for (int j = 0; j < 8; j++) m[j] = logits[i + j] > m[j] ? logits[i + j] : m[j];
    for (; i < V; i++) m[0] = logits[i] > m[0] ? logits[i] : m[0];
    float bv = m[0];
    for (int j = 1; j < 8; j++) bv = m[j] > bv ? m[j] : bv;
    for (i = 0; i < V; i++)
      if (logits[i] == bv) return i;
    return 0;
  }
  /* the top k, largest first (ties: the lower index first), kept sorted as the logits stream past: one
   * compare for most of them, not k passes over the vocabulary */
  const int k = top_k > 0 && top_k < V ? top_k : V;
  if (k == V) {
    for (int i = 0; i < V; i++) idx[i] = i; /* every token, in index order */
  } else {
    int cnt = 0;
    for (int i = 0; i < V; i++) {
      const float v = logits[i];
      if (cnt == k && !(v > logits[idx[k - 1]])) continue;
      int j = cnt < k ? cnt++ : k - 1;
      while (j > 0 && v > logits[idx[j - 1]]) idx[j] = idx[j - 1], j--;
      idx[j] = i;
    }
  }
  float mx = logits[idx[0]];
  for (int i = 1; i < k; i++)
    if (logits[idx[i]] > mx) mx = logits[idx[i]];
  const float invt = weft_recipf(temperature);
  float sum = 0;
  for (int i = 0; i < k; i++) sum += (prob[i] = weft_expf((logits[idx[i]] - mx) * invt));
  const float u = (float)(weft_gpt_rand(rng) >> 40) * (1.0f / 16777216.0f) * sum;
  float acc = 0;
  for (int i = 0; i < k; i++) {
    acc += prob[i];
    if (u < acc) return idx[i];
  }
  return idx[k - 1];
}

weft_status weft_gpt_generate(weft_gpt *g, const int32_t *prompt, int n, int ntok, float temperature, int top_k,
                              uint64_t *rng, int32_t *out, double *decode_seconds) {
  if (decode_seconds) *decode_seconds = 0;
  /* a NaN temperature is not <= 0 (greedy) and would make every probability NaN: a token drawn from garbage */
  if (isnan(temperature) || isinf(temperature))
    return fail(g, WEFT_ERR_INVALID_ARGUMENT, "generate: temperature %g; give a finite number (0 or less: greedy)", (double)temperature);
  if (n < 1 || ntok < 0 || n > g->cfg.maxT || ntok > g->cfg.maxT - n) /* n + ntok could overflow */
    return fail(g, WEFT_ERR_SHAPE, "a prompt of %d tokens and %d more must fit the context of %d (and the prompt is not empty)", n, ntok, g->cfg.maxT);
  if (ntok == 0) return WEFT_OK;
  weft_status st = load_batch(g, prompt, NULL, 1, n);
  if (st == WEFT_OK) st = forward(g, 0);
  if (st != WEFT_OK) return st;
  weft_fabric *f = g->f;
  const int L = g->cfg.L, V = g->cfg.V, NH = g->cfg.NH;
  const int64_t C = g->cfg.C, Tc = n + ntok;
  /* the cache and the decode step's tensors */
  weft_tensor **cache = calloc((size_t)L, sizeof *cache), **idx = calloc((size_t)Tc, sizeof *idx);
  float *lg = malloc((size_t)n * V * sizeof(float)), *prob = malloc((size_t)V * sizeof(float));
  int *ix = malloc((size_t)V * sizeof(int));
  weft_tensor *tokT = NULL, *xr = NULL, *lnr = NULL, *qkvr = NULL,
              *ayr = NULL, *x2r = NULL, *fcr = NULL, *fcg = NULL, *lgr = NULL, *mr = NULL, *sr = NULL;
  if (!cache || !idx || !lg || !prob || !ix) {
    st = fail(g, WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  for (int l = 0; l < L; l++)
    if (!(cache[l] = mkf(g, 3, 1, Tc, 3 * C, 0))) goto oom;
  for (int64_t t = 0; t < Tc; t++) {
    const int32_t v = (int32_t)t;
    if (!(idx[t] = mk(g, WEFT_DTYPE_I32, 2, 1, 1, 0, 0, &v))) goto oom;
  }
  if (!(tokT = mk(g, WEFT_DTYPE_I32, 2, 1, 1, 0, 0, NULL)) ||
      !(xr = mkf(g, 3, 1, 1, C, 0)) || !(lnr = mkf(g, 2, 1, C, 0, 0)) || !(qkvr = mkf(g, 2, 1, 3 * C, 0, 0)) ||
      !(ayr = mkf(g, 3, 1, 1, C, 0)) ||
      !(x2r = mkf(g, 2, 1, C, 0, 0)) || !(fcr = mkf(g, 2, 1, 4 * C, 0, 0)) || !(fcg = mkf(g, 2, 1, 4 * C, 0, 0)) ||
      !(lgr = mkf(g, 2, 1, V, 0, 0)) || !(mr = mkf(g, 1, 1, 0, 0, 0)) || !(sr = mkf(g, 1, 1, 0, 0, 0)))
    goto oom;
  /* PLACE_AUTO: the cache and the positions live with the weights, as they do: the router then routes the
   * step's ops knowing the cache is resident there, not on the host it was made on */
  if (g->opts.place == WEFT_GPT_PLACE_AUTO && g->home_rest >= 0) {
    for (int l = 0; l < L && st == WEFT_OK; l++) st = weft_tensor_prefetch(cache[l], (size_t)g->home_rest);
    for (int64_t t = 0; t < Tc && st == WEFT_OK; t++) st = weft_tensor_prefetch(idx[t], (size_t)g->home_rest);
    if (st != WEFT_OK) {
      fail(g, st, "make the cache resident: %s", weft_fabric_last_error(f));
      goto done;
    }
  }
  weft_op_desc d;
#define GRUN(expr, what)                                                                                  \
  do {                                                                                                    \
    if ((st = (expr)) != WEFT_OK) {                                                                       \
      fail(g, st, "%s: %s", what, weft_fabric_last_error(f));                                             \
      goto done;                                                                                          \
    }                                                                                                     \
    noted(g, what);                                                                                       \
  } while (0)
  /* prefill: the prompt's qkv rows into the cache */
  for (int l = 0; l < L; l++) {
    reshape(g->a.qkv[l], 3, 1, n, 3 * C);
    d = D(g, l, WEFT_OP_COPY_SLICE);
    GRUN(weft_op_copy_slice(f, &d, g->a.qkv[l], cache[l], 1, 0), "prefill the cache");
    reshape(g->a.qkv[l], 2, n, 3 * C, 0);
  }
  GRUN(weft_tensor_read(g->a.logits, lg, (size_t)n * V), "read the prompt's logits");
  int32_t next = sample(lg + (size_t)(n - 1) * V, V, temperature, top_k, rng, prob, ix);
  out[0] = next;
  /* an empty scope first: a fabric measures what an op costs inside scopes at its first one (once), which
   * is not a decode step's time */
  GRUN(weft_scope_begin(f), "open a scope");
  GRUN(weft_scope_end(f), "close a scope");
  const double t0 = now_s();
  /* WEFT_GPT_PROFILE=1: where a decode step's time goes, on stderr at the end (a developer's tool) */
  const int prof = getenv("WEFT_GPT_PROFILE") && atoi(getenv("WEFT_GPT_PROFILE")) > 0;
  double pt[5] = {0}, pc = 0;
  for (int i = 1; i < ntok; i++) {
    const int64_t t = n + i - 1; /* the position of `next` */
    if (prof) pc = now_s();
    GRUN(weft_tensor_write_i32(tokT, &next, 1), "write the token");
    GRUN(weft_scope_begin(f), "open the decode step's scope");
    if (prof) pt[0] += now_s() - pc, pc = now_s();
    reshape(xr, 3, 1, 1, C);
    d = D(g, L, WEFT_OP_EMBEDDING);
    GRUN(weft_op_embedding(f, &d, tokT, idx[t], PP(K_WTE, 0), PP(K_WPE, 0), xr), "embedding");
    reshape(xr, 2, 1, C, 0);
    for (int l = 0; l < L; l++) {
      d = D(g, l, WEFT_OP_LAYERNORM);
      GRUN(weft_op_layernorm(f, &d, xr, PP(K_LN1W, l), PP(K_LN1B, l), 1e-5f, lnr, mr, sr), "ln1");
      d = D(g, l, WEFT_OP_MATMUL);
      GRUN(weft_op_matmul(f, &d, lnr, 0, PP(K_QKVW, l), 1, qkvr), "qkv");
      d = D(g, l, WEFT_OP_ADD);
      GRUN(weft_op_add(f, &d, qkvr, PP(K_QKVB, l), qkvr), "qkv bias");
      reshape(qkvr, 3, 1, 1, 3 * C);
      d = D(g, l, WEFT_OP_COPY_SLICE);
      GRUN(weft_op_copy_slice(f, &d, qkvr, cache[l], 1, t), "append to the cache");
      reshape(qkvr, 2, 1, 3 * C, 0);
      /* the new position's attention over the cache: bit for bit row t of the fused attention over
       * positions 0..t, in O(t) rather than O(t^2) */
      reshape(ayr, 3, 1, 1, C);
      d = D(g, l, WEFT_OP_ATTENTION_CACHED);
      GRUN(weft_op_attention_cached(f, &d, cache[l], NH, t, ayr, NULL), "attention over the cache");
      reshape(ayr, 2, 1, C, 0);
      d = D(g, l, WEFT_OP_MATMUL);
      GRUN(weft_op_matmul(f, &d, ayr, 0, PP(K_APW, l), 1, x2r), "attn proj");
      d = D(g, l, WEFT_OP_ADD);
      GRUN(weft_op_add(f, &d, x2r, PP(K_APB, l), x2r), "attn proj bias");
      GRUN(weft_op_add(f, &d, x2r, xr, x2r), "residual 1");
      d = D(g, l, WEFT_OP_LAYERNORM);
      GRUN(weft_op_layernorm(f, &d, x2r, PP(K_LN2W, l), PP(K_LN2B, l), 1e-5f, lnr, mr, sr), "ln2");
      d = D(g, l, WEFT_OP_MATMUL);
      GRUN(weft_op_matmul(f, &d, lnr, 0, PP(K_FCW, l), 1, fcr), "fc");
      d = D(g, l, WEFT_OP_ADD);
      GRUN(weft_op_add(f, &d, fcr, PP(K_FCB, l), fcr), "fc bias");
      d = D(g, l, WEFT_OP_GELU);
      GRUN(weft_op_gelu(f, &d, fcr, fcg), "gelu");
      d = D(g, l, WEFT_OP_MATMUL);
      GRUN(weft_op_matmul(f, &d, fcg, 0, PP(K_FPW, l), 1, xr), "fc proj");
      d = D(g, l, WEFT_OP_ADD);
      GRUN(weft_op_add(f, &d, xr, PP(K_FPB, l), xr), "fc proj bias");
      GRUN(weft_op_add(f, &d, xr, x2r, xr), "residual 2");
    }
    d = D(g, L, WEFT_OP_LAYERNORM);
    GRUN(weft_op_layernorm(f, &d, xr, PP(K_LNFW, 0), PP(K_LNFB, 0), 1e-5f, lnr, mr, sr), "lnf");
    d = D(g, L, WEFT_OP_MATMUL);
    GRUN(weft_op_matmul(f, &d, lnr, 0, PP(K_WTE, 0), 1, lgr), "logits");
    if (prof) pt[1] += now_s() - pc, pc = now_s();
    GRUN(weft_scope_end(f), "close the decode step's scope");
    if (prof) pt[2] += now_s() - pc, pc = now_s();
    GRUN(weft_tensor_read(lgr, lg, (size_t)V), "read the logits");
    if (prof) pt[3] += now_s() - pc, pc = now_s();
    next = sample(lg, V, temperature, top_k, rng, prob, ix);
    out[i] = next;
    if (prof) pt[4] += now_s() - pc;
  }
  if (prof && ntok > 1)
    fprintf(stderr, "decode step, us each: write token + open scope %.1f, record the ops %.1f, close the scope %.1f, "
            "read the logits %.1f, sample %.1f\n", 1e6 * pt[0] / (ntok - 1), 1e6 * pt[1] / (ntok - 1),
            1e6 * pt[2] / (ntok - 1), 1e6 * pt[3] / (ntok - 1), 1e6 * pt[4] / (ntok - 1));
  if (decode_seconds) *decode_seconds = now_s() - t0;
  st = WEFT_OK;
  goto done;
oom:
  st = WEFT_ERR_OUT_OF_MEMORY;
done:
  (void)weft_scope_end(f); /* a no-op unless a step failed inside its scope */
  if (cache)
    for (int l = 0; l < L; l++) weft_tensor_destroy(cache[l]);
  if (idx)
    for (int64_t t = 0; t < Tc; t++) weft_tensor_destroy(idx[t]);
  weft_tensor *tt[] = {tokT, xr, lnr, qkvr, ayr, x2r, fcr, fcg, lgr, mr, sr};
  for (size_t i = 0; i < sizeof tt / sizeof tt[0]; i++) weft_tensor_destroy(tt[i]);
  free(cache), free(idx), free(lg), free(prob), free(ix);
  return st;
}

/* ------------------------------------------------------------------------------------------ checkpoints */

static const char ckpt_magic[8] = {'W', 'E', 'F', 'T', 'G', 'P', 'T', '1'};
#define CKPT_HEADER (8 + 4 + 5 * 4 + 8 + 8 + 8)

static void put(unsigned char **p, const void *v, size_t n) {
  memcpy(*p, v, n);
  *p += n;
}

weft_status weft_gpt_checkpoint_save(weft_gpt *g, const char *path, uint64_t rng_state, char *err, size_t errlen) {
  const size_t n = weft_gpt_param_count(&g->cfg);
  const size_t total = CKPT_HEADER + 3 * n * sizeof(float) + 8;
  unsigned char *buf = malloc(total);
  if (!buf) return snprintf(err, errlen, "out of host memory for a checkpoint of %zu bytes", total), WEFT_ERR_OUT_OF_MEMORY;
  unsigned char *p = buf;
  const uint32_t version = WEFT_GPT_CKPT_VERSION;
  const int32_t c5[5] = {g->cfg.L, g->cfg.C, g->cfg.NH, g->cfg.V, g->cfg.maxT};
  const int64_t step = g->step;
  const uint64_t count = n;
  put(&p, ckpt_magic, 8), put(&p, &version, 4), put(&p, c5, sizeof c5), put(&p, &step, 8), put(&p, &rng_state, 8);
  put(&p, &count, 8);
  float *fp = (float *)(void *)p;
  weft_status st = weft_gpt_read_params(g, fp, n);
  if (st == WEFT_OK) st = weft_gpt_read_moments(g, fp + n, fp + 2 * n, n);
  if (st != WEFT_OK) {
    free(buf);
    return snprintf(err, errlen, "%s", g->err), st;
  }
  p += 3 * n * sizeof(float);
  const uint64_t sum = weft_gpt_fingerprint((const float *)(void *)buf, (size_t)(p - buf) / sizeof(float));
  put(&p, &sum, 8);
  /* written to a temporary name and renamed: an interrupted write never leaves a half checkpoint */
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *fh = fopen(tmp, "wb");
  int ok = fh && fwrite(buf, 1, total, fh) == total;
  if (fh && fclose(fh) != 0) ok = 0;
  free(buf);
  if (!ok || rename(tmp, path) != 0) {
    remove(tmp);
    snprintf(err, errlen, "cannot write the checkpoint '%s'", path);
    return WEFT_ERR_IO;
  }
  return WEFT_OK;
}

weft_status weft_gpt_checkpoint_load(const char *path, weft_gpt_config *cfg, int64_t *step, uint64_t *rng_state,
                          float **out_params, float **out_m, float **out_v, char *err, size_t errlen) {
  *out_params = *out_m = *out_v = NULL;
  FILE *fh = fopen(path, "rb");
  if (!fh) return snprintf(err, errlen, "cannot open the checkpoint '%s'", path), WEFT_ERR_IO;
  unsigned char hdr[CKPT_HEADER];
  const size_t got = fread(hdr, 1, sizeof hdr, fh);
  if (got < 8 || memcmp(hdr, ckpt_magic, 8) != 0) {
    fclose(fh);
    return snprintf(err, errlen, "'%s' is not a weft gpt checkpoint (no WEFTGPT1 magic)", path), WEFT_ERR_INVALID_ARGUMENT;
  }
  if (got < sizeof hdr) {
    fclose(fh);
    return snprintf(err, errlen, "the checkpoint '%s' is truncated: %zu bytes, shorter than its header", path, got), WEFT_ERR_INVALID_ARGUMENT;
  }
  uint32_t version;
  int32_t c5[5];
  uint64_t count, rs;
  int64_t at_step;
  memcpy(&version, hdr + 8, 4), memcpy(c5, hdr + 12, 20), memcpy(&at_step, hdr + 32, 8), memcpy(&rs, hdr + 40, 8);
  memcpy(&count, hdr + 48, 8);
  if (version != WEFT_GPT_CKPT_VERSION) {
    fclose(fh);
    return snprintf(err, errlen, "the checkpoint '%s' has format version %u; this weft reads version %d", path, version, WEFT_GPT_CKPT_VERSION), WEFT_ERR_INVALID_ARGUMENT;
  }
  const weft_gpt_config c = {c5[0], c5[1], c5[2], c5[3], c5[4]};
  char why[256];
  if (!weft_gpt_config_ok(&c, why, sizeof why)) {
    fclose(fh);
    return snprintf(err, errlen, "the checkpoint '%s' is inconsistent: %s", path, why), WEFT_ERR_INVALID_ARGUMENT;
  }
  const size_t n = weft_gpt_param_count(&c);
  if (count != n || at_step < 0) {
    fclose(fh);
    return snprintf(err, errlen, "the checkpoint '%s' is inconsistent: it says %llu parameters (step %lld); its shape needs %zu", path,
                    (unsigned long long)count, (long long)at_step, n), WEFT_ERR_INVALID_ARGUMENT;
  }
  /* the file's size against the header's before anything is allocated: a lying header costs nothing */
  const size_t body = 3 * n * sizeof(float), want = CKPT_HEADER + body + 8;
  off_t end = -1;
  if (fseeko(fh, 0, SEEK_END) != 0 || (end = ftello(fh)) < 0 || fseeko(fh, CKPT_HEADER, SEEK_SET) != 0) {
    fclose(fh);
    return snprintf(err, errlen, "cannot tell the size of the checkpoint '%s' (not a regular file?)", path), WEFT_ERR_IO;
  }
  if ((uint64_t)end != want) {
    fclose(fh);
    return snprintf(err, errlen, "the checkpoint '%s' is %s: %llu bytes, its header (L=%d C=%d V=%d maxT=%d) says %zu", path,
                    (uint64_t)end > want ? "too long" : "truncated", (unsigned long long)end, c.L, c.C, c.V, c.maxT, want),
           WEFT_ERR_INVALID_ARGUMENT;
  }
  float *P = malloc(n * sizeof(float)), *M = malloc(n * sizeof(float)), *V = malloc(n * sizeof(float));
  if (!P || !M || !V) {
    free(P), free(M), free(V);
    fclose(fh);
    return snprintf(err, errlen, "out of host memory reading '%s'", path), WEFT_ERR_OUT_OF_MEMORY;
  }
  uint64_t sum;
  const int ok = fread(P, sizeof(float), n, fh) == n && fread(M, sizeof(float), n, fh) == n &&
                 fread(V, sizeof(float), n, fh) == n && fread(&sum, 8, 1, fh) == 1;
  fclose(fh);
  uint64_t h = fnv1a(FNV_BASIS, hdr, CKPT_HEADER);
  h = fnv1a(fnv1a(fnv1a(h, P, n * sizeof(float)), M, n * sizeof(float)), V, n * sizeof(float));
  if (!ok || sum != h) {
    free(P), free(M), free(V);
    if (!ok) return snprintf(err, errlen, "cannot read the checkpoint '%s' (changed while read?)", path), WEFT_ERR_IO;
    return snprintf(err, errlen, "the checkpoint '%s' is corrupted: its checksum does not match its contents", path), WEFT_ERR_INVALID_ARGUMENT;
  }
  *cfg = c;
  *step = at_step, *rng_state = rs;
  *out_params = P, *out_m = M, *out_v = V;
  return WEFT_OK;
}
