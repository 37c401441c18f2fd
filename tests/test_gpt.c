/* test_gpt.c - the GPT-2 model of src/gpt on the fabric: a small model (2 layers, 64 wide, 4 heads, bytes)
 * trains (its loss goes down on a tiny repeated text); under the exact contract the same seed gives the same
 * weights fingerprint and the same generated tokens (greedy and sampled, through the KV cache) on the CPU
 * with 1 and 3 threads, pinned to every lane that offers the transformer ops, routed, and with layers
 * placed on lanes, and round robin (op i on the i-th lane offering it); a checkpoint saved mid-run and resumed ends where an uninterrupted run ends; a
 * truncated, corrupted or foreign checkpoint is refused with a message that says which.
 *
 * Every run's logits over the generated sequence (weft_gpt_logits_all) must have the cpu's bits too.
 *
 * WEFT_TEST_LANES restricts the lanes the pinned, routed, layer and round-robin runs use ("cpu,opencl", with
 * WEFT_PLUGIN_PATH naming the OpenCL plugin: the gpt_opencl test); a lane it names that is not here makes the
 * test end Skipped after the others passed.
 *
 * test_gpt --remote (under tests/net/with_worker.sh, WEFT_REMOTE naming a loopback worker): the same
 * fingerprint and tokens as the cpu with every remote lane pinned, and round robin over the cpu and them. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt/gpt.h"
#include "tutil.h"

static const weft_gpt_config CFG = {2, 64, 4, 256, 32};
enum { B = 4, T = 16, STEPS = 4, GEN = 10 };
static const char text[] = "the fabric weaves the same text on every lane. ";

static void batch(int step, int32_t *tok, int32_t *tgt) {
  uint64_t s = 1000u + (uint64_t)step;
  const int n = (int)strlen(text);
  for (int b = 0; b < B; b++) {
    const int at = (int)(weft_gpt_rand(&s) % (uint64_t)n);
    for (int t = 0; t < T; t++) tok[b * T + t] = (unsigned char)text[(at + t) % n], tgt[b * T + t] = (unsigned char)text[(at + t + 1) % n];
  }
}

enum { NLOGITS = (4 + GEN - 1) * 256 };

typedef struct outcome {
  uint64_t fp;
  float first, last;
  int32_t greedy[GEN], sampled[GEN];
  float logits[NLOGITS]; /* every position's logits over the prompt and the greedy tokens */
  int ok;
} outcome;

static weft_fabric *open_fabric(const char *lanes, int threads) {
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = lanes, d.cpu_threads = threads, d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  if (weft_fabric_open(&d, &f) != WEFT_OK) return NULL;
  return f;
}

/* steps from `from` to `to` on model g */
static int train(weft_gpt *g, int from, int to, outcome *o) {
  int32_t tok[B * T], tgt[B * T];
  for (int s = from; s < to; s++) {
    batch(s, tok, tgt);
    float loss = 0, norm = 0;
    weft_status st = weft_gpt_train_step(g, tok, tgt, B, T, 3e-3f, 0.1f, 1.0f, &loss, &norm);
    TU_CHECK(st == WEFT_OK, "train step %d: %s", s, weft_gpt_last_error(g));
    if (st != WEFT_OK) return 0;
    if (s == 0) o->first = loss;
    o->last = loss;
  }
  return 1;
}

static void finish(weft_gpt *g, outcome *o) {
  const size_t n = weft_gpt_param_count(&CFG);
  float *p = malloc(n * sizeof(float));
  TU_CHECK(weft_gpt_read_params(g, p, n) == WEFT_OK, "read params: %s", weft_gpt_last_error(g));
  o->fp = weft_gpt_fingerprint(p, n);
  free(p);
  const int32_t prompt[4] = {'t', 'h', 'e', ' '};
  uint64_t rng = 42;
  TU_CHECK(weft_gpt_generate(g, prompt, 4, GEN, 0.0f, 0, &rng, o->greedy, NULL) == WEFT_OK, "greedy: %s", weft_gpt_last_error(g));
  /* more tokens than the context holds are refused before anything is written, also where prompt + count
   * passes INT_MAX (the sum overflowed, and the call ran out of memory instead) */
  int32_t none[1];
  TU_CHECK(weft_gpt_generate(g, prompt, 4, INT_MAX - 1, 0.0f, 0, &rng, none, NULL) == WEFT_ERR_SHAPE,
           "generate INT_MAX - 1 tokens: %s", weft_gpt_last_error(g));
  /* the KV cache decodes what a full forward over the whole sequence picks */
  int32_t seq[4 + GEN];
  memcpy(seq, prompt, sizeof prompt);
  float lg[256];
  for (int i = 0; i < GEN; i++) {
    TU_CHECK(weft_gpt_logits(g, seq, 4 + i, lg) == WEFT_OK, "logits: %s", weft_gpt_last_error(g));
    int best = 0;
    for (int v = 1; v < 256; v++)
      if (lg[v] > lg[best]) best = v;
    seq[4 + i] = best;
  }
  TU_CHECK(memcmp(seq + 4, o->greedy, sizeof o->greedy) == 0, "greedy decode with the KV cache differs from full forwards");
  /* every position's logits: the last row is weft_gpt_logits's */
  float *all = malloc((size_t)(4 + GEN - 1) * 256 * sizeof(float));
  TU_CHECK(weft_gpt_logits_all(g, seq, 1, 4 + GEN - 1, all) == WEFT_OK, "logits_all: %s", weft_gpt_last_error(g));
  TU_CHECK(memcmp(all + (size_t)(4 + GEN - 2) * 256, lg, sizeof lg) == 0, "logits_all's last row differs from weft_gpt_logits");
  memcpy(o->logits, all, sizeof o->logits);
  free(all);
  rng = 42;
  TU_CHECK(weft_gpt_generate(g, prompt, 4, GEN, 0.8f, 20, &rng, o->sampled, NULL) == WEFT_OK, "sampled: %s", weft_gpt_last_error(g));
  o->ok = 1;
}

static outcome run(const char *lanes, int threads, int place, const char *lane, int steps) {
  outcome o;
  memset(&o, 0, sizeof o);
  weft_fabric *f = open_fabric(lanes, threads);
  TU_CHECK(f != NULL, "open %s: %s", lanes, weft_open_error());
  if (!f) return o;
  const size_t n = weft_gpt_param_count(&CFG);
  float *p = malloc(n * sizeof(float));
  weft_gpt_init_params(&CFG, 7, p);
  weft_gpt_opts opts = {place, -1, WEFT_CONTRACT_EXACT};
  size_t li = 0;
  if (lane) TU_CHECK(weft_fabric_lane_find(f, lane, &li) == WEFT_OK, "no lane %s", lane), opts.lane = (int)li;
  weft_gpt *g = NULL;
  weft_status st = weft_gpt_create(f, &CFG, p, n, &opts, &g);
  TU_CHECK(st == WEFT_OK, "create: %s", g ? weft_gpt_last_error(g) : "no memory");
  free(p);
  if (st == WEFT_OK && train(g, 0, steps, &o)) finish(g, &o);
  /* a lane asked for did work */
  for (size_t i = 0; lane && i < weft_fabric_lane_count(f); i++) {
    weft_lane_info inf;
    weft_lane_stats ls;
    if (weft_fabric_lane_info(f, i, &inf) != WEFT_OK || weft_fabric_lane_stats(f, i, &ls) != WEFT_OK) continue;
    uint64_t n = 0;
    for (int k = 0; k < WEFT_OP_COUNT; k++) n += ls.ops[k];
    if (strcmp(inf.name, lane) == 0) TU_CHECK(n > 0, "no op ran on %s", lane);
  }
  if (place == WEFT_GPT_PLACE_RR && g) { /* every lane that offers the transformer ops did some */
    for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
      weft_lane_info inf;
      weft_lane_stats ls;
      if (weft_fabric_lane_info(f, i, &inf) != WEFT_OK || inf.failed || !(inf.ops & WEFT_OP_BIT(WEFT_OP_ATTENTION)) ||
          !(inf.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)))
        continue;
      TU_CHECK(weft_fabric_lane_stats(f, i, &ls) == WEFT_OK && ls.ops[WEFT_OP_ATTENTION] > 0 && ls.ops[WEFT_OP_MATMUL] > 0,
               "round robin: %s ran no attention or no matmul", inf.name);
    }
  }
  if (place == WEFT_GPT_PLACE_LAYERS && g) {
    weft_lane_stats ls;
    const int l1 = weft_gpt_layer_lane(g, 1);
    TU_CHECK(weft_fabric_lane_stats(f, (size_t)l1, &ls) == WEFT_OK && ls.ops[WEFT_OP_ATTENTION] > 0, "layer 1's lane ran no attention");
  }
  weft_gpt_destroy(g);
  weft_fabric_close(f);
  return o;
}

static void same(const char *what, const outcome *a, const outcome *b) {
  TU_CHECK(b->ok, "%s: did not finish", what);
  TU_CHECK(a->fp == b->fp, "%s: weights fingerprint %016llx, cpu %016llx", what, (unsigned long long)b->fp, (unsigned long long)a->fp);
  TU_CHECK(memcmp(a->greedy, b->greedy, sizeof a->greedy) == 0, "%s: greedy tokens differ from the cpu's", what);
  TU_CHECK(memcmp(a->sampled, b->sampled, sizeof a->sampled) == 0, "%s: sampled tokens differ from the cpu's", what);
  size_t bad = 0, first = 0;
  for (size_t e = 0; e < NLOGITS; e++)
    if (tu_bits(a->logits[e]) != tu_bits(b->logits[e]) && bad++ == 0) first = e;
  TU_CHECK(bad == 0, "%s: %zu of %d logits differ from the cpu's bits; first [%zu][%zu] 0x%08x, cpu 0x%08x", what, bad,
           NLOGITS, first / 256, first % 256, bad ? tu_bits(b->logits[first]) : 0u, bad ? tu_bits(a->logits[first]) : 0u);
  printf("%-28s fingerprint %016llx loss %.4f -> %.4f\n", what, (unsigned long long)b->fp, b->first, b->last);
}

static void checkpoints(const outcome *whole) {
  char path[256], bad[300];
  snprintf(path, sizeof path, "test_gpt_%d.ckpt", (int)getpid());
  weft_fabric *f = open_fabric("cpu", 1);
  const size_t n = weft_gpt_param_count(&CFG);
  float *p = malloc(n * sizeof(float));
  weft_gpt_init_params(&CFG, 7, p);
  weft_gpt_opts opts = {WEFT_GPT_PLACE_AUTO, -1, WEFT_CONTRACT_EXACT};
  weft_gpt *g = NULL;
  outcome o;
  memset(&o, 0, sizeof o);
  char err[512] = "";
  TU_CHECK(weft_gpt_create(f, &CFG, p, n, &opts, &g) == WEFT_OK, "create");
  free(p);
  train(g, 0, STEPS / 2, &o);
  TU_CHECK(weft_gpt_checkpoint_save(g, path, 1234, err, sizeof err) == WEFT_OK, "save: %s", err);
  weft_gpt_destroy(g);
  /* resume in a model made from the file */
  weft_gpt_config c;
  int64_t step = 0;
  uint64_t rs = 0;
  float *P = NULL, *M = NULL, *V = NULL;
  TU_CHECK(weft_gpt_checkpoint_load(path, &c, &step, &rs, &P, &M, &V, err, sizeof err) == WEFT_OK, "load: %s", err);
  TU_CHECK(step == STEPS / 2 && rs == 1234 && c.C == CFG.C, "the checkpoint's step %lld, rng %llu", (long long)step, (unsigned long long)rs);
  if (P) {
    TU_CHECK(weft_gpt_create(f, &c, P, n, &opts, &g) == WEFT_OK, "create from the checkpoint");
    TU_CHECK(weft_gpt_write_moments(g, M, V, n) == WEFT_OK, "moments");
    weft_gpt_set_step(g, step);
    train(g, STEPS / 2, STEPS, &o);
    finish(g, &o);
    weft_gpt_destroy(g);
    same("saved and resumed", whole, &o);
  }
  free(P), free(M), free(V);
  /* damaged files */
  FILE *fh = fopen(path, "rb");
  fseek(fh, 0, SEEK_END);
  const long size = ftell(fh);
  fseek(fh, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)size);
  TU_CHECK(fread(buf, 1, (size_t)size, fh) == (size_t)size, "read back");
  fclose(fh);
  struct { const char *what; long len; long flip; const char *msg; } cases[] = {
      {"truncated", size - 100, -1, "truncated"},
      {"a flipped bit", size, size / 2, "corrupted"},
      {"a lying parameter count", size, 48, "inconsistent"},
      {"not a checkpoint", size, 2, "not a weft gpt checkpoint"},
      {"a header cut short", 20, -1, "truncated"},
  };
  snprintf(bad, sizeof bad, "%s.bad", path);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].flip >= 0) buf[cases[i].flip] ^= 4;
    fh = fopen(bad, "wb");
    fwrite(buf, 1, (size_t)cases[i].len, fh);
    fclose(fh);
    if (cases[i].flip >= 0) buf[cases[i].flip] ^= 4;
    err[0] = 0;
    weft_status st = weft_gpt_checkpoint_load(bad, &c, &step, &rs, &P, &M, &V, err, sizeof err);
    TU_CHECK(st != WEFT_OK && strstr(err, cases[i].msg), "%s: status %d, message '%s'", cases[i].what, (int)st, err);
    printf("checkpoint with %s: %s\n", cases[i].what, err);
    free(P), free(M), free(V);
  }
  TU_CHECK(weft_gpt_checkpoint_load("no/such/file.ckpt", &c, &step, &rs, &P, &M, &V, err, sizeof err) == WEFT_ERR_IO, "a missing file");
  free(buf);
  remove(path), remove(bad);
  weft_fabric_close(f);
}

/* lanes of kind `kind` offering the transformer ops under exact, into names (among those `filter` lets in) */
static int lanes_of(const char *filter, const char *kind, int not, char (*names)[64], int max) {
  weft_fabric *f = open_fabric(filter, 0);
  int nn = 0;
  for (size_t i = 0; f && i < weft_fabric_lane_count(f) && nn < max; i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(f, i, &li) != WEFT_OK || li.failed || (strcmp(li.kind, kind) == 0) == not) continue;
    if (!(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)) || !(li.ops & WEFT_OP_BIT(WEFT_OP_ATTENTION))) continue;
    snprintf(names[nn++], 64, "%s", li.name);
  }
  weft_fabric_close(f);
  return nn;
}

/* the remote lanes: pinned, and round robin over the cpu and them */
static int remote(void) {
  const double start = tu_now();
  if (!getenv("WEFT_REMOTE")) {
    tu_skip("--remote wants WEFT_REMOTE naming a worker (tests/net/with_worker.sh starts one)");
    return tu_finish("gpt --remote", start);
  }
  char names[16][64], lanes[1100] = "cpu";
  const int nn = lanes_of(NULL, "remote", 0, names, 16);
  TU_CHECK(nn > 0, "WEFT_REMOTE=%s: no remote lane offers the transformer ops", getenv("WEFT_REMOTE"));
  outcome base = run("cpu", 1, WEFT_GPT_PLACE_AUTO, NULL, STEPS);
  for (int i = 0; i < nn; i++) {
    char what[1100];
    snprintf(lanes + strlen(lanes), sizeof lanes - strlen(lanes), ",%s", names[i]);
    snprintf(what, sizeof what, "pinned %s", names[i]);
    outcome o = run(lanes, 0, WEFT_GPT_PLACE_PINNED, names[i], STEPS);
    same(what, &base, &o);
  }
  outcome o = run(lanes, 0, WEFT_GPT_PLACE_RR, NULL, STEPS);
  same("round robin, cpu and remote", &base, &o);
  return tu_finish("gpt --remote", start);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--remote") == 0) return remote();
  const double start = tu_now();
  const char *filter = getenv("WEFT_TEST_LANES");
  if (filter && !*filter) filter = NULL;
  if (filter) {
    weft_fabric *f = open_fabric(filter, 0);
    TU_CHECK(f != NULL, "open %s: %s", filter, weft_open_error());
    for (size_t i = 0; f && i < weft_fabric_absent_count(f); i++) {
      const char *name, *reason;
      if (weft_fabric_absent_info(f, i, &name, &reason) == WEFT_OK && !tu_contains(reason, "not requested"))
        printf("absent %s: %s\n", name, reason);
    }
    if (f) tu_require_lanes(f, filter);
    weft_fabric_close(f);
  }
  /* the loss goes down */
  outcome longrun = run("cpu", 0, WEFT_GPT_PLACE_AUTO, NULL, 30);
  TU_CHECK(longrun.ok && longrun.last < 0.6f * longrun.first, "30 steps: loss %.4f -> %.4f", longrun.first, longrun.last);
  printf("30 steps on the cpu: loss %.4f -> %.4f\n", longrun.first, longrun.last);
  outcome base = run("cpu", 1, WEFT_GPT_PLACE_AUTO, NULL, STEPS);
  TU_CHECK(base.ok, "the cpu baseline ran");
  printf("%-28s fingerprint %016llx loss %.4f -> %.4f\n", "cpu, 1 thread", (unsigned long long)base.fp, base.first, base.last);
  outcome o = run("cpu", 3, WEFT_GPT_PLACE_AUTO, NULL, STEPS);
  same("cpu, 3 threads", &base, &o);
  /* every other lane that offers the transformer ops, pinned; then routed and layers over all lanes */
  char names[16][64];
  const int nn = lanes_of(filter, "cpu", 1, names, 16);
  for (int i = 0; i < nn; i++) {
    char lanes[1100], what[1100];
    snprintf(lanes, sizeof lanes, "cpu,%s", names[i]);
    snprintf(what, sizeof what, "pinned %s", names[i]);
    o = run(lanes, 0, WEFT_GPT_PLACE_PINNED, names[i], STEPS);
    same(what, &base, &o);
  }
  if (!nn) printf("no lane but the cpu offers the transformer ops: pinned runs skipped\n");
  o = run(filter, 0, WEFT_GPT_PLACE_AUTO, NULL, STEPS);
  same("routed", &base, &o);
  o = run(filter, 0, WEFT_GPT_PLACE_LAYERS, NULL, STEPS);
  same("layers", &base, &o);
  o = run(filter, 0, WEFT_GPT_PLACE_RR, NULL, STEPS);
  same("round robin", &base, &o);
  checkpoints(&base);
  return tu_finish("gpt", start);
}
