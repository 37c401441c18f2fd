/* bench_fuse.c - what fusion inside a scope (src/lanes/fuse.h) does to a GPT-2 decode step on vulkan:0: ms per
 * token and dispatches per token with fusion on and off (WEFT_FUSE=0), the two measured alternately in one
 * run, each a fresh fabric, the median of the repetitions. Random weights (timing does not depend on their
 * values); a prompt of 16 tokens, then greedy decoding through src/gpt's KV cache, one scope per token. The
 * dispatches of a step (and its CPU time, every thread of the process: lavapipe runs in it) are those of a
 * generate minus those of a generate of the prompt alone, after a warm-up generate.
 *
 * Usage: bench_fuse [--model small|gpt2|both] [--tokens N] [--reps R]
 *   small: 2 layers, 64 wide, 4 heads, a vocabulary of 256 (tests/test_gpt.c's model): dispatch-bound
 *   gpt2:  GPT-2 124M's shapes (12 layers, 768 wide, 12 heads, 50,257 tokens, a context of 1,024)
 *   --tokens: decode steps per measurement (default 32 small, 8 gpt2); --reps: measurements per setting (3) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpt/gpt.h"
#include "lanes/vulkan/vk_internal.h"
#include "weft.h"
#include "../bench_util.h"

static uint64_t dispatches(void) { return __atomic_load_n(&weft_vk_stat_dispatches, __ATOMIC_RELAXED); }
static uint64_t fused_ops(void) { return __atomic_load_n(&weft_vk_stat_fused_ops, __ATOMIC_RELAXED); }

/* CPU time of every thread of the process (lavapipe's included): on a shared machine, what a step costs
 * whatever else runs. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct result {
  double ms_per_token, cpu_ms_per_token, dispatches_per_token, fused_per_token;
} result;

/* One measurement: a fresh fabric with fusion on or off, the model pinned to vulkan:0. */
static int measure(const weft_gpt_config *cfg, const float *params, size_t np, int fuse, int steps, result *out) {
  if (fuse) unsetenv("WEFT_FUSE");
  else setenv("WEFT_FUSE", "0", 1);
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu,vulkan";
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  weft_status st = weft_fabric_open(&d, &f);
  unsetenv("WEFT_FUSE");
  if (st != WEFT_OK) {
    fprintf(stderr, "bench_fuse: open: %s\n", weft_open_error());
    return 0;
  }
  size_t vk = 0;
  if (weft_fabric_lane_find(f, "vulkan:0", &vk) != WEFT_OK) {
    fprintf(stderr, "bench_fuse: no vulkan:0 here\n");
    weft_fabric_close(f);
    return 0;
  }
  weft_gpt_opts opts = {WEFT_GPT_PLACE_PINNED, (int)vk, WEFT_CONTRACT_EXACT};
  weft_gpt *g = NULL;
  if ((st = weft_gpt_create(f, cfg, params, np, &opts, &g)) != WEFT_OK) {
    fprintf(stderr, "bench_fuse: create: %s\n", g ? weft_gpt_last_error(g) : weft_status_str(st));
    weft_gpt_destroy(g);
    weft_fabric_close(f);
    return 0;
  }
  int32_t prompt[16], *tok = malloc((size_t)(steps + 1) * sizeof(int32_t));
  for (int i = 0; i < 16; i++) prompt[i] = (int32_t)((i * 37 + 11) % cfg->V);
  uint64_t rng = 1;
  double secs = 0;
  /* a warm-up (kernels compiled), the prompt alone, then the prompt and the steps */
  st = weft_gpt_generate(g, prompt, 16, 3, 0.0f, 0, &rng, tok, NULL);
  uint64_t d0 = dispatches();
  double c0 = cpu_s();
  if (st == WEFT_OK) st = weft_gpt_generate(g, prompt, 16, 1, 0.0f, 0, &rng, tok, NULL);
  uint64_t d1 = dispatches(), f1 = fused_ops();
  double c1 = cpu_s();
  if (st == WEFT_OK) st = weft_gpt_generate(g, prompt, 16, steps + 1, 0.0f, 0, &rng, tok, &secs);
  uint64_t d2 = dispatches(), f2 = fused_ops();
  double c2 = cpu_s();
  if (st != WEFT_OK) fprintf(stderr, "bench_fuse: generate: %s\n", weft_gpt_last_error(g));
  out->ms_per_token = 1e3 * secs / steps;
  out->cpu_ms_per_token = 1e3 * ((c2 - c1) - (c1 - c0)) / steps;
  out->dispatches_per_token = ((double)(d2 - d1) - (double)(d1 - d0)) / steps;
  out->fused_per_token = (double)(f2 - f1) / steps;
  free(tok);
  weft_gpt_destroy(g);
  weft_fabric_close(f);
  return st == WEFT_OK;
}

static int run_model(const char *name, const weft_gpt_config *cfg, int steps, int reps) {
  const size_t np = weft_gpt_param_count(cfg);
  float *p = malloc(np * sizeof(float));
  if (!p) return 0;
  weft_gpt_init_params(cfg, 7, p);
  double ms[2][16], cpu[2][16], disp[2] = {0, 0}, fz[2] = {0, 0};
  if (reps > 16) reps = 16;
  for (int r = 0; r < reps; r++)
    for (int i = 0; i < 2; i++) {
      int fuse = (r + i) % 2; /* alternate which goes first */
      result res;
      if (!measure(cfg, p, np, fuse, steps, &res)) {
        free(p);
        return 0;
      }
      ms[fuse][r] = res.ms_per_token, cpu[fuse][r] = res.cpu_ms_per_token, disp[fuse] = res.dispatches_per_token, fz[fuse] = res.fused_per_token;
    }
  double off = bench_median(ms[0], reps), on = bench_median(ms[1], reps), coff = bench_median(cpu[0], reps), con = bench_median(cpu[1], reps);
  printf("%s (L=%d C=%d V=%d), median of %d, per token:\n", name, cfg->L, cfg->C, cfg->V, reps);
  printf("  fusion off: %9.3f ms wall %9.3f ms CPU %6.1f dispatches\n", off, coff, disp[0]);
  printf("  fusion on:  %9.3f ms wall %9.3f ms CPU %6.1f dispatches (%.1f ops ran fused)\n", on, con, disp[1], fz[1]);
  printf("  on/off:     %9.3f wall     %9.3f CPU    %6.3f dispatches\n", on / off, con / coff, disp[1] / disp[0]);
  free(p);
  return 1;
}

int main(int argc, char **argv) {
  const char *model = "both";
  int tokens = 0, reps = 3;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) model = argv[++i];
    else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) tokens = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_fuse [--model small|gpt2|both] [--tokens N] [--reps R]\n");
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  int ok = 1;
  if (strcmp(model, "small") == 0 || strcmp(model, "both") == 0) {
    static const weft_gpt_config small = {2, 64, 4, 256, 64};
    ok &= run_model("small", &small, tokens > 0 ? tokens : 32, reps);
  }
  if (ok && (strcmp(model, "gpt2") == 0 || strcmp(model, "both") == 0)) {
    static const weft_gpt_config gpt2 = {12, 768, 12, 50257, 1024};
    ok &= run_model("gpt2", &gpt2, tokens > 0 ? tokens : 8, reps);
  }
  return ok ? 0 : 1;
}
