/* test_gpt_logits.c - the checkpoint loaders against an independent GPT-2: small random weights (L=2,
 * C=64, NH=4, V=97, maxT=32) written as safetensors (+ config.json) and as an llm.c .bin, each loaded with
 * weft_gpt_load and run through a GPT-2 forward built here from the reference kernels (reference_tx.h:
 * embedding, layernorm, fused causal attention, GELU; plain loops for the matmuls), and each given to
 * tests/gpt/torch_ref.py, which reads the file with its own code and computes the logits in PyTorch. The
 * two must agree within fp32 tolerance, and both formats must give weft the same bits.
 * Then the real model (src/gpt/gpt.c, weft_gpt_create from the loaded buffer, weft_gpt_logits_all) pinned
 * to every lane that offers the transformer ops under the exact contract (cpu, vulkan, cuda, remote when
 * present): every lane gives the first lane's bits (for both files), and PyTorch's values within fp32
 * tolerance. (The forward here sums its matmuls in its own order, so it is not bit-equal to the model.)
 *
 * Usage: test_gpt_logits PYTHON TORCH_REF_PY. Skips (77) when PYTHON cannot import torch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference_tx.h"
#include "gpt/gpt.h"
#include "gpt/gpt_io.h"
#include "tutil.h"

enum { L = 2, C = 64, NH = 4, V = 97, MAXT = 32, T = 12 };

static void linear(float *out, const float *in, const float *w, const float *b, int rows, int nin, int nout) {
  for (int t = 0; t < rows; t++)
    for (int o = 0; o < nout; o++) {
      float s = b ? b[o] : 0.0f;
      for (int i = 0; i < nin; i++) s += in[t * nin + i] * w[o * nin + i];
      out[t * nout + o] = s;
    }
}

/* logits[T,V] from params in llm.c's order. */
static void forward(const float *p, const int32_t *tok, float *logits) {
  const float *wte = p, *wpe = wte + V * C, *ln1w = wpe + MAXT * C, *ln1b = ln1w + L * C, *qkvw = ln1b + L * C,
              *qkvb = qkvw + L * 3 * C * C, *apw = qkvb + L * 3 * C, *apb = apw + L * C * C, *ln2w = apb + L * C,
              *ln2b = ln2w + L * C, *fcw = ln2b + L * C, *fcb = fcw + L * 4 * C * C, *fpw = fcb + L * 4 * C,
              *fpb = fpw + L * C * 4 * C, *lnfw = fpb + L * C, *lnfb = lnfw + C;
  static float x[T * C], h[T * C], qkv[T * 3 * C], y[T * C], att[NH * T * T], f[T * 4 * C], g[T * 4 * C];
  weft_ref_embedding_forward(x, tok, NULL, wte, wpe, 1, T, C, V, MAXT);
  for (int l = 0; l < L; l++) {
    weft_ref_layernorm_forward(h, NULL, NULL, x, ln1w + l * C, ln1b + l * C, T, C, 1e-5f);
    linear(qkv, h, qkvw + (size_t)l * 3 * C * C, qkvb + l * 3 * C, T, C, 3 * C);
    weft_ref_attention_forward(y, NULL, att, qkv, 1, T, C, NH);
    linear(h, y, apw + (size_t)l * C * C, apb + l * C, T, C, C);
    for (int i = 0; i < T * C; i++) x[i] += h[i];
    weft_ref_layernorm_forward(h, NULL, NULL, x, ln2w + l * C, ln2b + l * C, T, C, 1e-5f);
    linear(f, h, fcw + (size_t)l * 4 * C * C, fcb + l * 4 * C, T, C, 4 * C);
    weft_ref_gelu_forward(g, f, T * 4 * C);
    linear(h, g, fpw + (size_t)l * C * 4 * C, fpb + l * C, T, 4 * C, C);
    for (int i = 0; i < T * C; i++) x[i] += h[i];
  }
  weft_ref_layernorm_forward(h, NULL, NULL, x, lnfw, lnfb, T, C, 1e-5f);
  linear(logits, h, wte, NULL, T, C, V);
}

/* The model on every lane that offers the transformer ops (exact), pinned there: each lane's logits into
 * out[lane count][T*V]; returns how many lanes ran, their names in names. */
static int model_logits(const float *p, size_t np, const int32_t *tok, float (*out)[T * V], char (*names)[64], int max) {
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  TU_CHECK(weft_fabric_open(&d, &f) == WEFT_OK, "open the fabric: %s", weft_open_error());
  if (!f) return 0;
  const weft_gpt_config cfg = {L, C, NH, V, MAXT};
  const uint64_t need = WEFT_OP_BIT(WEFT_OP_EMBEDDING) | WEFT_OP_BIT(WEFT_OP_LAYERNORM) | WEFT_OP_BIT(WEFT_OP_ATTENTION) |
                        WEFT_OP_BIT(WEFT_OP_GELU) | WEFT_OP_BIT(WEFT_OP_MATMUL);
  int n = 0;
  for (size_t i = 0; i < weft_fabric_lane_count(f) && n < max; i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(f, i, &li) != WEFT_OK || li.failed) continue;
    if (!(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)) || (li.ops & need) != need) continue;
    weft_gpt_opts o = {WEFT_GPT_PLACE_PINNED, (int)i, WEFT_CONTRACT_EXACT};
    weft_gpt *g = NULL;
    weft_status st = weft_gpt_create(f, &cfg, p, np, &o, &g);
    TU_CHECK(st == WEFT_OK, "%s: create: %s", li.name, weft_gpt_last_error(g));
    if (st == WEFT_OK) {
      st = weft_gpt_logits_all(g, tok, 1, T, out[n]);
      TU_CHECK(st == WEFT_OK, "%s: logits: %s", li.name, weft_gpt_last_error(g));
      if (st == WEFT_OK) snprintf(names[n++], 64, "%s", li.name);
    }
    weft_gpt_destroy(g);
  }
  weft_fabric_close(f);
  return n;
}

/* Runs torch_ref.py on path; reads T lines of V hex floats. */
static int torch_logits(const char *py, const char *script, const char *path, const int32_t *tok, float *out) {
  char cmd[4096];
  int k = snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", py, script, path);
  for (int t = 0; t < T; t++) k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %d", (int)tok[t]);
  FILE *p = popen(cmd, "r");
  if (!p) return 0;
  int n = 0;
  unsigned u;
  while (n < T * V && fscanf(p, "%x", &u) == 1) out[n++] = tu_float(u);
  const int rc = pclose(p);
  return rc == 0 && n == T * V;
}

int main(int argc, char **argv) {
  const double t0 = tu_now();
  if (argc < 3) {
    fprintf(stderr, "usage: test_gpt_logits PYTHON TORCH_REF_PY\n");
    return 2;
  }
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' -c 'import torch, numpy' >/dev/null 2>&1", argv[1]);
  if (system(cmd) != 0) {
    tu_skip("%s cannot import torch and numpy (Debian: python3-torch)", argv[1]);
    return tu_finish("test_gpt_logits", t0);
  }
  const weft_gpt_io_config cfg = {.L = L, .C = C, .NH = NH, .V = V, .maxT = MAXT};
  size_t n;
  TU_STATUS(weft_gpt_io_sizes(&cfg, NULL, &n), WEFT_OK, "sizes");
  float *par = malloc(n * sizeof(float));
  tu_rng r = {tu_seed()};
  for (size_t i = 0; i < n; i++) par[i] = tu_rng_float(&r, -0.25f, 0.25f);
  { /* layer norm gains near 1, so the logits are of order 1 to 10 */
    size_t sz[WEFT_GPT_NTENSORS], off[WEFT_GPT_NTENSORS + 1] = {0};
    weft_gpt_io_sizes(&cfg, sz, &n);
    for (int t = 0; t < WEFT_GPT_NTENSORS; t++) off[t + 1] = off[t] + sz[t];
    const int gains[] = {WEFT_GPT_T_LN1W, WEFT_GPT_T_LN2W, WEFT_GPT_T_LNFW};
    for (int k = 0; k < 3; k++)
      for (size_t i = off[gains[k]]; i < off[gains[k] + 1]; i++) par[i] += 1.0f;
  }
  int32_t tok[T];
  for (int t = 0; t < T; t++) tok[t] = (int32_t)tu_rng_int(&r, 0, V - 1);
  char dir[] = "gptlogits_XXXXXX", st_path[64], bin_path[64], err[512];
  TU_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
  snprintf(bin_path, sizeof bin_path, "%s/model.bin", dir);
  TU_STATUS(weft_gpt_save_safetensors(st_path, &cfg, par, 1, err, sizeof err), WEFT_OK, err);
  TU_STATUS(weft_gpt_save_llmc(bin_path, &cfg, par, 0, err, sizeof err), WEFT_OK, err);
  static float ours[2][T * V], ref[T * V], lanes[16][T * V], first[T * V];
  char names[16][64], first_lane[64] = "";
  const char *paths[2] = {st_path, bin_path};
  for (int k = 0; k < 2; k++) {
    weft_gpt_io_config c = {0};
    float *p = NULL;
    size_t np = 0;
    TU_STATUS(weft_gpt_load(paths[k], &c, &p, &np, err, sizeof err), WEFT_OK, err);
    if (!p) continue;
    TU_CHECK(np == n && c.NH == NH, "%s: %zu parameters, NH %d", paths[k], np, c.NH);
    forward(p, tok, ours[k]);
    const int nl = np == n ? model_logits(p, np, tok, lanes, names, 16) : 0;
    free(p);
    TU_CHECK(nl > 0, "%s: no lane ran the model", paths[k]);
    if (k == 0 && nl > 0) snprintf(first_lane, sizeof first_lane, "%s", names[0]);
    const int ok = torch_logits(argv[1], argv[2], paths[k], tok, ref);
    TU_CHECK(ok, "%s: torch_ref.py gave %d x %d logits", paths[k], T, V);
    double worst = 0, scale = 0;
    int bad = 0;
    for (int i = 0; ok && i < T * V; i++) {
      const double d = fabs((double)ours[k][i] - ref[i]);
      worst = d > worst ? d : worst;
      scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
      bad += !(d <= 1e-4 + 1e-4 * fabs(ref[i]));
    }
    TU_CHECK(ok && bad == 0, "%s: %d of %d logits differ from PyTorch beyond fp32 tolerance (worst %.3g)",
             paths[k], bad, T * V, worst);
    printf("%s: weft's loader + reference forward vs PyTorch: max |diff| %.3g over logits up to %.3g\n", paths[k],
           worst, scale);
    for (int li = 0; li < nl; li++) { /* the model on each lane: the first lane's bits, PyTorch's values */
      int diff = 0, far = 0;
      double w = 0;
      for (int i = 0; i < T * V; i++) {
        if (k == 0 && li == 0) first[i] = lanes[0][i];
        diff += tu_bits(lanes[li][i]) != tu_bits(first[i]);
        const double dd = fabs((double)lanes[li][i] - ref[i]);
        w = dd > w ? dd : w;
        far += !(dd <= 1e-4 + 1e-4 * fabs(ref[i]));
      }
      TU_CHECK(diff == 0, "%s: the model on %s: %d of %d logits differ in their bits from the model on %s (%s)",
               paths[k], names[li], diff, T * V, first_lane, paths[0]);
      TU_CHECK(ok && far == 0, "%s: the model on %s: %d logits differ from PyTorch beyond fp32 tolerance (worst %.3g)",
               paths[k], names[li], far, w);
      printf("%s: weft_gpt_logits_all on %-10s the same bits as on %s; vs PyTorch max |diff| %.3g\n", paths[k],
             names[li], first_lane, w);
    }
  }
  { /* the interface a caller compares its own logits through: torch_ref.py --check, and it can fail */
    char hex[80];
    snprintf(hex, sizeof hex, "%s/logits.hex", dir);
    for (int pass = 0; pass < 2; pass++) {
      FILE *f = fopen(hex, "w");
      for (int t = 0; f && t < T; t++)
        for (int v = 0; v < V; v++)
          fprintf(f, "%08x%c", (unsigned)tu_bits(ours[1][t * V + v] + (pass && t == 3 && v == 5 ? 0.01f : 0.0f)),
                  v + 1 < V ? ' ' : '\n');
      if (f) fclose(f);
      snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' --check '%s'", argv[1], argv[2], bin_path, hex);
      for (int t = 0; t < T; t++) snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " %d", (int)tok[t]);
      const int rc = system(cmd);
      TU_CHECK(pass == 0 ? rc == 0 : rc != 0, "torch_ref.py --check %s logits: status %d", pass ? "off by 0.01" : "weft's",
               rc);
    }
  }
  int same = 1;
  for (int i = 0; i < T * V; i++) same &= tu_bits(ours[0][i]) == tu_bits(ours[1][i]);
  TU_CHECK(same, "safetensors and llm.c files give weft the same logits bits");
  free(par);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  return tu_finish("test_gpt_logits", t0);
}
