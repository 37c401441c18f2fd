/* test_gpt_block.c - a GPT-2-shaped model (token + position embedding, 2 transformer blocks of layernorm,
 * qkv matmul + bias, fused causal attention, projection + bias, residual, layernorm, fc + bias, GELU, fc
 * projection + bias, residual; a final layernorm, logits tied to the token table, crossentropy), its whole
 * backward (the matmul transposes, sum_rows for the bias gradients, add for the residual paths), a global-norm
 * gradient clip (weft_grad_clip) and one AdamW step on every parameter, through the public API only.
 *
 * Under the exact contract every placement must give the same bits, for every activation, every gradient
 * (before and after the clip), the norm, every updated parameter and both AdamW moments:
 *   cpu        every op on the CPU lane (the baseline);
 *   pinned L   every op on lane L where L offers it (weft_lane_info.ops), on the CPU where it does not;
 *   routed     WEFT_LANE_AUTO on every op;
 *   robin      op i on the (i mod n)-th of the lanes that offer that op;
 *   pipelined  layer l's ops on the (l mod n)-th exact lane (the embedding and the head on the last one),
 *              per op on the CPU where that lane does not offer it.
 * A lane weft gains later (or one that learns an op) is covered with no edit here. A pinned op must run
 * where it was pinned (weft_fabric_last_lane). Then a float64 central finite difference of the mean loss
 * checks the gradient of a few parameters (loose tolerance: the forward is fp32).
 *
 * Environment: WEFT_TEST_LANES restricts the fabric (a lane it names that is not here: Skipped after the
 * others passed; "cpu,opencl" with WEFT_PLUGIN_PATH naming the OpenCL plugin is the gpt_block_opencl test);
 * WEFT_TEST_SEED changes the values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference_tx.h"
#include "tutil.h"
#include "weft.h"

enum { B = 2, T = 8, C = 32, NH = 4, V = 97, L = 2, N = B * T, C3 = 3 * C, C4 = 4 * C };

/* Parameters, in the order the clip and AdamW see them. */
enum { P_LN1G, P_LN1B, P_WQKV, P_BQKV, P_WPROJ, P_BPROJ, P_LN2G, P_LN2B, P_WFC, P_BFC, P_WFP, P_BFP, PER_LAYER };
enum { P_WTE = 0, P_WPE = 1, P_LAYER0 = 2, P_LNFG = P_LAYER0 + L * PER_LAYER, P_LNFB, NP };

static const char *const layer_names[PER_LAYER] = {"ln1.g", "ln1.b", "attn.w_qkv", "attn.b_qkv", "attn.w_proj", "attn.b_proj",
                                                   "ln2.g", "ln2.b", "mlp.w_fc",   "mlp.b_fc",   "mlp.w_proj", "mlp.b_proj"};

static int64_t pdims[NP][2];
static char pname[NP][32];
static float *host_par[NP]; /* the initial parameters */
static int32_t tok[N], tgt[N];

static void init_params(tu_rng *r) {
  pdims[P_WTE][0] = V, pdims[P_WTE][1] = C;
  pdims[P_WPE][0] = T, pdims[P_WPE][1] = C;
  snprintf(pname[P_WTE], 32, "wte"), snprintf(pname[P_WPE], 32, "wpe");
  static const int64_t shp[PER_LAYER][2] = {{1, C}, {1, C}, {C, C3}, {1, C3}, {C, C}, {1, C},
                                            {1, C}, {1, C}, {C, C4}, {1, C4}, {C4, C}, {1, C}};
  for (int l = 0; l < L; l++)
    for (int k = 0; k < PER_LAYER; k++) {
      const int p = P_LAYER0 + l * PER_LAYER + k;
      pdims[p][0] = shp[k][0], pdims[p][1] = shp[k][1];
      snprintf(pname[p], 32, "h%d.%s", l, layer_names[k]);
    }
  pdims[P_LNFG][0] = pdims[P_LNFB][0] = 1, pdims[P_LNFG][1] = pdims[P_LNFB][1] = C;
  snprintf(pname[P_LNFG], 32, "lnf.g"), snprintf(pname[P_LNFB], 32, "lnf.b");
  for (int p = 0; p < NP; p++) {
    const size_t n = (size_t)(pdims[p][0] * pdims[p][1]);
    host_par[p] = malloc(n * sizeof(float));
    const int gamma = strstr(pname[p], ".g") && strstr(pname[p], "ln");
    for (size_t i = 0; i < n; i++)
      host_par[p][i] = gamma ? tu_rng_float(r, 0.8f, 1.2f) : tu_rng_float(r, -0.25f, 0.25f);
  }
  for (int i = 0; i < N; i++) tok[i] = (int32_t)tu_rng_int(r, 0, V - 1), tgt[i] = (int32_t)tu_rng_int(r, 0, V - 1);
}

/* ------------------------------------------------------------------------------------- placements */

enum { PL_CPU, PL_PINNED, PL_ROUTED, PL_ROBIN, PL_PIPE };

typedef struct run {
  weft_fabric *f;
  int placement, pinned; /* PL_PINNED: the lane */
  int layer;             /* the layer being run (-1: embedding and head) */
  long counter;          /* ops so far (round robin) */
  int cpu;               /* the CPU lane's index */
  int lanes[16], nlanes; /* the exact lanes that have not failed */
  long ran[16];          /* ops run per lane index */
  int failed;
  /* every tensor made, in creation order: compared across placements */
  weft_tensor *reg[512];
  char regname[512][40];
  int nreg;
} run;

static uint64_t ops_of(weft_fabric *f, int lane) {
  weft_lane_info li;
  if (weft_fabric_lane_info(f, (size_t)lane, &li) != WEFT_OK) return 0;
  return li.ops ? li.ops : WEFT_OPS_V1;
}

static int offers(run *r, int lane, weft_op_kind k) { return (ops_of(r->f, lane) & WEFT_OP_BIT(k)) != 0; }

static int pick(run *r, weft_op_kind k) {
  switch (r->placement) {
  case PL_PINNED: return offers(r, r->pinned, k) ? r->pinned : r->cpu;
  case PL_ROUTED: return WEFT_LANE_AUTO;
  case PL_ROBIN: {
    int cand[16], n = 0;
    for (int i = 0; i < r->nlanes; i++)
      if (offers(r, r->lanes[i], k)) cand[n++] = r->lanes[i];
    return n ? cand[r->counter % n] : r->cpu;
  }
  case PL_PIPE: {
    const int lane = r->lanes[(r->layer < 0 ? L : r->layer) % r->nlanes];
    return offers(r, lane, k) ? lane : r->cpu;
  }
  default: return r->cpu;
  }
}

static weft_op_desc cur;
static const char *cur_what;

/* The desc for the next op of kind k, from the placement. */
static const weft_op_desc *D(run *r, weft_op_kind k, const char *what) {
  cur.contract = WEFT_CONTRACT_EXACT;
  cur.lane = pick(r, k);
  cur_what = what;
  r->counter++;
  return &cur;
}

static void ok(run *r, weft_status st) {
  TU_CHECK(st == WEFT_OK, "%s on lane %d: %s (%s)", cur_what, cur.lane, weft_status_str(st), weft_fabric_last_error(r->f));
  if (st != WEFT_OK) {
    r->failed = 1;
    return;
  }
  const int ran = weft_fabric_last_lane(r->f);
  if (cur.lane != WEFT_LANE_AUTO)
    TU_CHECK(ran == cur.lane, "%s pinned to lane %d ran on lane %d", cur_what, cur.lane, ran);
  if (ran >= 0 && ran < 16) r->ran[ran]++;
}

static weft_tensor *mk(run *r, const char *name, int nd, int64_t d0, int64_t d1, int64_t d2, const float *data) {
  const int64_t d[3] = {d0, d1, d2};
  weft_tensor *t = NULL;
  weft_status st = weft_tensor_create(r->f, nd, d, data, &t);
  TU_CHECK(st == WEFT_OK, "create %s: %s", name, weft_fabric_last_error(r->f));
  if (st != WEFT_OK || r->nreg >= 512) {
    r->failed = 1;
    return t;
  }
  r->reg[r->nreg] = t;
  snprintf(r->regname[r->nreg++], 40, "%s", name);
  return t;
}

static void shape(run *r, weft_tensor *t, int nd, int64_t d0, int64_t d1, int64_t d2) {
  const int64_t d[3] = {d0, d1, d2};
  weft_status st = weft_tensor_reshape(t, nd, d);
  TU_CHECK(st == WEFT_OK, "reshape: %s", weft_fabric_last_error(r->f));
}

/* What a run leaves: every registered tensor's value, the norm, the gradients before the clip, the mean loss. */
typedef struct result {
  float *vals;
  size_t n;
  float norm;
  float *pregrad[NP];
  double loss;
  int count;              /* tensors in vals, in creation order */
  size_t sizes[512];
  char names[512][40];
} result;

static void result_free(result *res) {
  free(res->vals);
  for (int p = 0; p < NP; p++) free(res->pregrad[p]);
  memset(res, 0, sizeof *res);
}

static size_t pn(int p) { return (size_t)(pdims[p][0] * pdims[p][1]); }

/* Runs the model once under r's placement. forward_only: just the losses (res->loss). `par` replaces the
 * initial parameters when given (the finite differences). */
static void model(run *r, float *const *par, int forward_only, result *res) {
  memset(res, 0, sizeof *res);
  weft_fabric *f = r->f;
  weft_tensor *P[NP], *G[NP], *M[NP], *Vv[NP];
  char nm[40];
  for (int p = 0; p < NP; p++) {
    const int nd = pdims[p][0] == 1 ? 1 : 2;
    const int64_t d0 = nd == 1 ? pdims[p][1] : pdims[p][0];
    P[p] = mk(r, pname[p], nd, d0, pdims[p][1], 0, par ? par[p] : host_par[p]);
    snprintf(nm, sizeof nm, "grad %s", pname[p]);
    G[p] = mk(r, nm, nd, d0, pdims[p][1], 0, NULL);
    snprintf(nm, sizeof nm, "m %s", pname[p]);
    M[p] = mk(r, nm, nd, d0, pdims[p][1], 0, NULL);
    snprintf(nm, sizeof nm, "v %s", pname[p]);
    Vv[p] = mk(r, nm, nd, d0, pdims[p][1], 0, NULL);
  }
  weft_tensor *Ttok = NULL, *Ttgt = NULL;
  weft_tensor_create_typed(f, WEFT_DTYPE_I32, 2, (const int64_t[]){B, T}, tok, &Ttok);
  weft_tensor_create_typed(f, WEFT_DTYPE_I32, 1, (const int64_t[]){N}, tgt, &Ttgt);
  if (r->failed || !Ttok || !Ttgt) goto out;
  /* ------------------------------------------------------------------------------------- forward */
  weft_tensor *x[L + 1], *ln1[L], *m1[L], *s1[L], *qkv[L], *ay[L], *att[L], *pre[L], *pr[L], *x2[L], *ln2[L],
      *m2[L], *s2[L], *fch[L], *fcg[L], *fcp[L];
  r->layer = -1;
  x[0] = mk(r, "x0 (embedding)", 3, B, T, C, NULL);
  ok(r, weft_op_embedding(f, D(r, WEFT_OP_EMBEDDING, "embedding"), Ttok, NULL, P[P_WTE], P[P_WPE], x[0]));
  shape(r, x[0], 2, N, C, 0);
  for (int l = 0; l < L && !r->failed; l++) {
    const int b = P_LAYER0 + l * PER_LAYER;
    r->layer = l;
#define ACT(v, name, nd, d0, d1, d2) (snprintf(nm, sizeof nm, "h%d.%s", l, name), v[l] = mk(r, nm, nd, d0, d1, d2, NULL))
    ACT(ln1, "ln1", 2, N, C, 0), ACT(m1, "ln1.mean", 1, N, 0, 0), ACT(s1, "ln1.rstd", 1, N, 0, 0);
    ACT(qkv, "qkv", 2, N, C3, 0), ACT(ay, "attn.y", 3, B, T, C), ACT(att, "att", 3, B * NH, T, T);
    ACT(pre, "preatt", 3, B * NH, T, T), ACT(pr, "attn.proj", 2, N, C, 0), ACT(x2, "x2 (residual)", 2, N, C, 0);
    ACT(ln2, "ln2", 2, N, C, 0), ACT(m2, "ln2.mean", 1, N, 0, 0), ACT(s2, "ln2.rstd", 1, N, 0, 0);
    ACT(fch, "fc", 2, N, C4, 0), ACT(fcg, "gelu", 2, N, C4, 0), ACT(fcp, "mlp.proj", 2, N, C, 0);
    snprintf(nm, sizeof nm, "x%d (residual)", l + 1);
    x[l + 1] = mk(r, nm, 2, N, C, 0, NULL);
    if (r->failed) break;
    weft_tensor_reshape(att[l], 4, (const int64_t[]){B, NH, T, T});
    weft_tensor_reshape(pre[l], 4, (const int64_t[]){B, NH, T, T});
    ok(r, weft_op_layernorm(f, D(r, WEFT_OP_LAYERNORM, "ln1"), x[l], P[b + P_LN1G], P[b + P_LN1B], 1e-5f, ln1[l], m1[l], s1[l]));
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "qkv matmul"), ln1[l], 0, P[b + P_WQKV], 0, qkv[l]));
    ok(r, weft_op_add(f, D(r, WEFT_OP_ADD, "qkv bias"), qkv[l], P[b + P_BQKV], qkv[l]));
    shape(r, qkv[l], 3, B, T, C3);
    ok(r, weft_op_attention(f, D(r, WEFT_OP_ATTENTION, "attention"), qkv[l], NH, ay[l], att[l], pre[l]));
    shape(r, qkv[l], 2, N, C3, 0), shape(r, ay[l], 2, N, C, 0);
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "attn proj"), ay[l], 0, P[b + P_WPROJ], 0, pr[l]));
    ok(r, weft_op_add(f, D(r, WEFT_OP_ADD, "attn proj bias"), pr[l], P[b + P_BPROJ], pr[l]));
    ok(r, weft_op_add(f, D(r, WEFT_OP_ADD, "residual 1"), x[l], pr[l], x2[l]));
    ok(r, weft_op_layernorm(f, D(r, WEFT_OP_LAYERNORM, "ln2"), x2[l], P[b + P_LN2G], P[b + P_LN2B], 1e-5f, ln2[l], m2[l], s2[l]));
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "fc"), ln2[l], 0, P[b + P_WFC], 0, fch[l]));
    ok(r, weft_op_add(f, D(r, WEFT_OP_ADD, "fc bias"), fch[l], P[b + P_BFC], fch[l]));
    ok(r, weft_op_gelu(f, D(r, WEFT_OP_GELU, "gelu"), fch[l], fcg[l]));
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "mlp proj"), fcg[l], 0, P[b + P_WFP], 0, fcp[l]));
    ok(r, weft_op_add(f, D(r, WEFT_OP_ADD, "mlp proj bias"), fcp[l], P[b + P_BFP], fcp[l]));
    ok(r, weft_op_add(f, D(r, WEFT_OP_ADD, "residual 2"), x2[l], fcp[l], x[l + 1]));
  }
  if (r->failed) goto out;
  r->layer = -1;
  weft_tensor *lnf = mk(r, "lnf", 2, N, C, 0, NULL), *mf = mk(r, "lnf.mean", 1, N, 0, 0, NULL),
              *sf = mk(r, "lnf.rstd", 1, N, 0, 0, NULL), *lg = mk(r, "logits", 2, N, V, 0, NULL),
              *ls = mk(r, "losses", 1, N, 0, 0, NULL);
  ok(r, weft_op_layernorm(f, D(r, WEFT_OP_LAYERNORM, "lnf"), x[L], P[P_LNFG], P[P_LNFB], 1e-5f, lnf, mf, sf));
  ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "logits (tied)"), lnf, 0, P[P_WTE], 1, lg));
  ok(r, weft_op_crossentropy(f, D(r, WEFT_OP_CROSSENTROPY, "crossentropy"), lg, Ttgt, ls));
  if (r->failed) goto out;
  {
    float l32[N];
    TU_CHECK(weft_tensor_read(ls, l32, N) == WEFT_OK, "read losses: %s", weft_fabric_last_error(f));
    for (int i = 0; i < N; i++) res->loss += (double)l32[i];
    res->loss /= N;
  }
  if (forward_only) goto out;
  /* ------------------------------------------------------------------------------------- backward */
  float dl[N];
  for (int i = 0; i < N; i++) dl[i] = 1.0f / (float)N;
  weft_tensor *dls = mk(r, "dlosses", 1, N, 0, 0, dl), *dlg = mk(r, "dlogits", 2, N, V, 0, NULL),
              *dlnf = mk(r, "dlnf", 2, N, C, 0, NULL), *dwt = mk(r, "dwte (head)", 2, V, C, 0, NULL);
  weft_tensor *dx = mk(r, "dx (final)", 2, N, C, 0, NULL);
  ok(r, weft_op_crossentropy_backward(f, D(r, WEFT_OP_CROSSENTROPY_BACKWARD, "crossentropy bw"), lg, Ttgt, dls, dlg));
  ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dlnf"), dlg, 0, P[P_WTE], 0, dlnf));
  ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dwte (head)"), dlg, 1, lnf, 0, dwt));
  ok(r, weft_op_add(f, D(r, WEFT_OP_ADD, "dwte +="), G[P_WTE], dwt, G[P_WTE]));
  ok(r, weft_op_layernorm_backward(f, D(r, WEFT_OP_LAYERNORM_BACKWARD, "lnf bw"), dlnf, x[L], mf, sf, P[P_LNFG], dx,
                                   G[P_LNFG], G[P_LNFB]));
  for (int l = L - 1; l >= 0 && !r->failed; l--) {
    const int b = P_LAYER0 + l * PER_LAYER;
    r->layer = l;
    weft_tensor *dfcg, *dfch, *dln2, *dx2t, *dx2, *day, *dqkv, *dln1, *dxt, *dxn;
#define GRAD(v, name, nd, d0, d1, d2) (snprintf(nm, sizeof nm, "h%d.d%s", l, name), v = mk(r, nm, nd, d0, d1, d2, NULL))
    GRAD(dfcg, "gelu", 2, N, C4, 0), GRAD(dfch, "fc", 2, N, C4, 0), GRAD(dln2, "ln2", 2, N, C, 0);
    GRAD(dx2t, "x2 (ln2 path)", 2, N, C, 0), GRAD(dx2, "x2", 2, N, C, 0), GRAD(day, "attn.y", 3, B, T, C);
    GRAD(dqkv, "qkv", 3, B, T, C3), GRAD(dln1, "ln1", 2, N, C, 0), GRAD(dxt, "x (ln1 path)", 2, N, C, 0);
    GRAD(dxn, "x", 2, N, C, 0);
    if (r->failed) break;
    /* mlp: dx is the gradient of x[l+1] = x2 + fcp */
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dw mlp proj"), fcg[l], 1, dx, 0, G[b + P_WFP]));
    ok(r, weft_op_sum_rows(f, D(r, WEFT_OP_SUM_ROWS, "db mlp proj"), dx, G[b + P_BFP]));
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dgelu"), dx, 0, P[b + P_WFP], 1, dfcg));
    ok(r, weft_op_gelu_backward(f, D(r, WEFT_OP_GELU_BACKWARD, "gelu bw"), fch[l], dfcg, dfch));
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dw fc"), ln2[l], 1, dfch, 0, G[b + P_WFC]));
    ok(r, weft_op_sum_rows(f, D(r, WEFT_OP_SUM_ROWS, "db fc"), dfch, G[b + P_BFC]));
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dln2"), dfch, 0, P[b + P_WFC], 1, dln2));
    ok(r, weft_op_layernorm_backward(f, D(r, WEFT_OP_LAYERNORM_BACKWARD, "ln2 bw"), dln2, x2[l], m2[l], s2[l],
                                     P[b + P_LN2G], dx2t, G[b + P_LN2G], G[b + P_LN2B]));
    ok(r, weft_op_add(f, D(r, WEFT_OP_ADD, "dx2 = dx + ln2 path"), dx, dx2t, dx2));
    /* attention: dx2 is the gradient of x2 = x + proj */
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dw attn proj"), ay[l], 1, dx2, 0, G[b + P_WPROJ]));
    ok(r, weft_op_sum_rows(f, D(r, WEFT_OP_SUM_ROWS, "db attn proj"), dx2, G[b + P_BPROJ]));
    shape(r, day, 2, N, C, 0);
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dattn.y"), dx2, 0, P[b + P_WPROJ], 1, day));
    shape(r, day, 3, B, T, C), shape(r, qkv[l], 3, B, T, C3);
    ok(r, weft_op_attention_backward(f, D(r, WEFT_OP_ATTENTION_BACKWARD, "attention bw"), day, qkv[l], att[l], NH, dqkv));
    shape(r, qkv[l], 2, N, C3, 0), shape(r, dqkv, 2, N, C3, 0);
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dw qkv"), ln1[l], 1, dqkv, 0, G[b + P_WQKV]));
    ok(r, weft_op_sum_rows(f, D(r, WEFT_OP_SUM_ROWS, "db qkv"), dqkv, G[b + P_BQKV]));
    ok(r, weft_op_matmul(f, D(r, WEFT_OP_MATMUL, "dln1"), dqkv, 0, P[b + P_WQKV], 1, dln1));
    ok(r, weft_op_layernorm_backward(f, D(r, WEFT_OP_LAYERNORM_BACKWARD, "ln1 bw"), dln1, x[l], m1[l], s1[l],
                                     P[b + P_LN1G], dxt, G[b + P_LN1G], G[b + P_LN1B]));
    ok(r, weft_op_add(f, D(r, WEFT_OP_ADD, "dx = dx2 + ln1 path"), dx2, dxt, dxn));
    dx = dxn;
  }
  if (r->failed) goto out;
  r->layer = -1;
  shape(r, dx, 3, B, T, C);
  ok(r, weft_op_embedding_backward(f, D(r, WEFT_OP_EMBEDDING_BACKWARD, "embedding bw"), dx, Ttok, NULL, G[P_WTE], G[P_WPE]));
  for (int p = 0; p < NP; p++) {
    res->pregrad[p] = malloc(pn(p) * sizeof(float));
    TU_CHECK(res->pregrad[p] && weft_tensor_read(G[p], res->pregrad[p], pn(p)) == WEFT_OK, "read %s's gradient", pname[p]);
  }
  /* clip (sumsq + scale, on the lanes the placement gives sumsq) and AdamW on every parameter */
  ok(r, weft_grad_clip(f, D(r, WEFT_OP_SUMSQ, "grad clip"), G, NP, 0.25f, &res->norm));
  for (int p = 0; p < NP && !r->failed; p++)
    ok(r, weft_op_adamw(f, D(r, WEFT_OP_ADAMW, "adamw"), P[p], G[p], M[p], Vv[p], 1e-2f, 0.9f, 0.95f, 1e-8f,
                        p == P_WTE || strstr(pname[p], ".w_") ? 0.1f : 0.0f, 1));
  /* every tensor's value */
  res->n = 0;
  for (int i = 0; i < r->nreg; i++) res->n += weft_tensor_numel(r->reg[i]);
  res->vals = malloc(res->n * sizeof(float));
  size_t at = 0;
  for (int i = 0; res->vals && i < r->nreg; i++) {
    const size_t n = weft_tensor_numel(r->reg[i]);
    TU_CHECK(weft_tensor_read(r->reg[i], res->vals + at, n) == WEFT_OK, "read %s: %s", r->regname[i], weft_fabric_last_error(f));
    res->sizes[i] = n;
    memcpy(res->names[i], r->regname[i], 40);
    at += n;
  }
  res->count = r->nreg;
out:
  for (int i = 0; i < r->nreg; i++) weft_tensor_destroy(r->reg[i]);
  r->nreg = 0;
  weft_tensor_destroy(Ttok), weft_tensor_destroy(Ttgt);
}

/* ------------------------------------------------------------------------------------------ checks */

/* got must have base's bits everywhere; the first tensor that differs is named. */
static void same_as(const result *base, const result *got, const char *what) {
  TU_CHECK(got->vals && got->n == base->n && got->count == base->count, "%s: the run did not finish (%zu of %zu values)",
           what, got->n, base->n);
  if (!got->vals || got->n != base->n || got->count != base->count) return;
  TU_CHECK(tu_bits(got->norm) == tu_bits(base->norm), "%s: grad norm 0x%08x (%.9g), the cpu run's 0x%08x (%.9g)", what,
           tu_bits(got->norm), (double)got->norm, tu_bits(base->norm), (double)base->norm);
  size_t at = 0;
  int bad_tensors = 0;
  for (int i = 0; i < base->count; i++) {
    size_t first = base->sizes[i], nbad = 0;
    for (size_t e = 0; e < base->sizes[i]; e++)
      if (tu_bits(got->vals[at + e]) != tu_bits(base->vals[at + e]) && nbad++ == 0) first = e;
    if (nbad && bad_tensors++ < 6)
      TU_CHECK(0, "%s: %s: %zu of %zu elements differ from the cpu run; first [%zu] 0x%08x, cpu 0x%08x", what,
               base->names[i], nbad, base->sizes[i], first, tu_bits(got->vals[at + first]), tu_bits(base->vals[at + first]));
    at += base->sizes[i];
  }
  TU_CHECK(bad_tensors == 0, "%s: %d tensors differ from the cpu run", what, bad_tensors);
}

static void print_ran(run *r, const char *what) {
  char line[512];
  size_t used = (size_t)snprintf(line, sizeof line, "%-22s ops per lane:", what);
  for (int i = 0; i < 16 && used < sizeof line; i++) {
    weft_lane_info li;
    if (r->ran[i] && weft_fabric_lane_info(r->f, (size_t)i, &li) == WEFT_OK)
      used += (size_t)snprintf(line + used, sizeof line - used, " %s %ld", li.name, r->ran[i]);
  }
  printf("%s\n", line);
  memset(r->ran, 0, sizeof r->ran);
  r->counter = 0;
}

/* Central differences in float64 of the mean loss, against the backward's gradient (before the clip). */
static void finite_differences(run *r, const result *base) {
  float *par[NP];
  for (int p = 0; p < NP; p++) {
    par[p] = malloc(pn(p) * sizeof(float));
    memcpy(par[p], host_par[p], pn(p) * sizeof(float));
  }
  static const int which[] = {P_WTE, P_WPE, P_LAYER0 + P_LN1G, P_LAYER0 + P_WQKV, P_LAYER0 + PER_LAYER + P_BFC,
                              P_LAYER0 + PER_LAYER + P_WFP, P_LNFB};
  r->placement = PL_CPU;
  int checked = 0;
  for (size_t w = 0; w < sizeof which / sizeof which[0]; w++) {
    const int p = which[w];
    /* the element with the largest gradient, and one picked at random */
    size_t best = 0;
    for (size_t e = 1; e < pn(p); e++)
      if (fabs(base->pregrad[p][e]) > fabs(base->pregrad[p][best])) best = e;
    const size_t elems[2] = {best, (best * 7919u + 13u) % pn(p)};
    for (int k = 0; k < 2; k++) {
      const size_t e = elems[k];
      const float keep = par[p][e], h = 1e-2f;
      result plus, minus;
      par[p][e] = keep + h;
      model(r, par, 1, &plus);
      par[p][e] = keep - h;
      model(r, par, 1, &minus);
      const double step = ((double)(keep + h) - (double)(keep - h));
      const double fd = (plus.loss - minus.loss) / step, g = (double)base->pregrad[p][e];
      par[p][e] = keep;
      const double tol = 0.05 * fabs(g) + 1e-4;
      TU_CHECK(fabs(fd - g) <= tol, "finite difference of the loss by %s[%zu]: %.6g, the backward's gradient %.6g (tol %.2g)",
               pname[p], e, fd, g, tol);
      checked++;
      result_free(&plus), result_free(&minus);
    }
  }
  printf("finite differences: %d gradient elements of %zu parameters within 5%% + 1e-4\n", checked,
         sizeof which / sizeof which[0]);
  for (int p = 0; p < NP; p++) free(par[p]);
}

int main(void) {
  const double start = tu_now();
  tu_rng rng = {tu_seed() ^ 0x9e3779b97f4a7c15ull};
  init_params(&rng);
  run *r = calloc(1, sizeof *r);
  weft_status st = tu_open(getenv("WEFT_TEST_LANES"), &r->f);
  if (st != WEFT_OK) {
    fprintf(stderr, "FAIL: weft_fabric_open: %s: %s\n", weft_status_str(st), weft_open_error());
    return 1;
  }
  for (size_t i = 0; i < weft_fabric_absent_count(r->f); i++) {
    const char *name, *reason;
    if (weft_fabric_absent_info(r->f, i, &name, &reason) == WEFT_OK && !tu_contains(reason, "not requested"))
      printf("absent %s: %s\n", name, reason);
  }
  tu_require_lanes(r->f, getenv("WEFT_TEST_LANES"));
  r->cpu = -1;
  for (size_t i = 0; i < weft_fabric_lane_count(r->f) && r->nlanes < 16; i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(r->f, i, &li) != WEFT_OK) continue;
    if (li.failed || !(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) {
      printf("lane %s: %s, left out\n", li.name, li.failed ? "down" : "no exact contract");
      continue;
    }
    if (strcmp(li.kind, "cpu") == 0 && r->cpu < 0) r->cpu = (int)i;
    r->lanes[r->nlanes++] = (int)i;
    char offered[400] = "";
    size_t used = 0;
    for (int k = WEFT_OP_V1_COUNT; k < WEFT_OP_COUNT; k++)
      if (!(ops_of(r->f, (int)i) & WEFT_OP_BIT(k)) && used < sizeof offered)
        used += (size_t)snprintf(offered + used, sizeof offered - used, " %s", weft_op_kind_str((weft_op_kind)k));
    printf("lane %s (%s): %s%s\n", li.name, li.kind, used ? "does not offer (the cpu runs these):" : "offers every op",
           offered);
  }
  if (r->cpu < 0) {
    weft_fabric_close(r->f);
    tu_skip("no cpu lane in this fabric (WEFT_TEST_LANES): the baseline and the fallback need it");
  }
  result base;
  r->placement = PL_CPU;
  model(r, NULL, 0, &base);
  print_ran(r, "cpu");
  TU_CHECK(base.vals != NULL, "the cpu run did not finish");
  TU_CHECK(base.norm > 0.25f, "the clip should clip (norm %g)", (double)base.norm);
  { /* the norm is reference_tx's over the same gradients (SUMSQ's chunked order, tensors in order) */
    float *gc[NP];
    int64_t gsz[NP];
    int have = 1;
    for (int p = 0; p < NP; p++) {
      gsz[p] = (int64_t)pn(p), gc[p] = base.pregrad[p] ? malloc(pn(p) * sizeof(float)) : NULL;
      if (gc[p]) memcpy(gc[p], base.pregrad[p], pn(p) * sizeof(float));
      else have = 0;
    }
    const float want = have ? weft_ref_grad_clip(gc, gsz, NP, 0.25f) : 0.0f;
    TU_CHECK(have && tu_bits(base.norm) == tu_bits(want), "cpu: grad norm 0x%08x (%.9g), reference_tx's 0x%08x (%.9g)",
             tu_bits(base.norm), (double)base.norm, tu_bits(want), (double)want);
    for (int p = 0; p < NP; p++) free(gc[p]);
  }
  TU_CHECK(isfinite(base.loss) && base.loss > 3.0 && base.loss < 6.5, "mean loss %g, about log(97) = 4.57 expected",
           base.loss);
  printf("model: B=%d T=%d C=%d NH=%d V=%d, %d layers, %d parameter tensors; loss %.6f, grad norm %.6f, %zu values compared per run\n",
         B, T, C, NH, V, L, NP, base.loss, (double)base.norm, base.n);
  result got;
  char what[96];
  for (int i = 0; i < r->nlanes && base.vals; i++) {
    weft_lane_info li;
    weft_fabric_lane_info(r->f, (size_t)r->lanes[i], &li);
    r->placement = PL_PINNED, r->pinned = r->lanes[i];
    snprintf(what, sizeof what, "pinned %s", li.name);
    model(r, NULL, 0, &got);
    same_as(&base, &got, what);
    print_ran(r, what);
    result_free(&got);
  }
  static const struct {
    int placement;
    const char *name;
  } others[] = {{PL_ROUTED, "routed"}, {PL_ROBIN, "round robin"}, {PL_PIPE, "pipelined (per layer)"}};
  for (size_t k = 0; k < 3 && base.vals; k++) {
    r->placement = others[k].placement;
    model(r, NULL, 0, &got);
    same_as(&base, &got, others[k].name);
    print_ran(r, others[k].name);
    result_free(&got);
  }
  if (base.vals) finite_differences(r, &base);
  result_free(&base);
  weft_fabric_close(r->f);
  free(r);
  for (int p = 0; p < NP; p++) free(host_par[p]);
  return tu_finish("gpt_block", start);
}
