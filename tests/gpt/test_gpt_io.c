/* test_gpt_io.c - GPT-2 checkpoints (src/gpt/gpt_io.h): small models (L=2, C=64, NH=4, V=97, maxT=32)
 * written in both formats, read back bit for bit, and every kind of wrong file refused with a message that
 * names the problem: truncated, a lying header length, offsets out of range or overlapping, shapes that
 * disagree, missing or unexpected tensors, unknown dtypes, wrong llm.c magic or version. F16/BF16 tensors,
 * llm.c's bf16 version 5, the `transformer.` prefix, the ignored mask buffers and config.json's n_head are
 * checked too.
 *
 * With an argument DIR it only writes DIR/model.safetensors (+ config.json) and DIR/model.bin from the seeded
 * weights and prints the configuration, for the PyTorch comparison (test_gpt_torch.sh). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt/gpt_io.h"
#include "tutil.h"

static const weft_gpt_io_config CFG = {.L = 2, .C = 64, .NH = 4, .V = 97, .maxT = 32};
static char dir[64];
static char err[512];

static char *path_in(const char *name) {
  static char p[8][128];
  static int k;
  k = (k + 1) % 8;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

static float *random_params(size_t *n) {
  TU_STATUS(weft_gpt_io_sizes(&CFG, NULL, n), WEFT_OK, "sizes");
  float *p = malloc(*n * sizeof(float));
  tu_rng r = {tu_seed()};
  for (size_t i = 0; i < *n; i++) p[i] = tu_rng_float(&r, -0.2f, 0.2f);
  /* layer norm gains near 1 */
  size_t sz[WEFT_GPT_NTENSORS], off[WEFT_GPT_NTENSORS + 1] = {0};
  weft_gpt_io_sizes(&CFG, sz, n);
  for (int t = 0; t < WEFT_GPT_NTENSORS; t++) off[t + 1] = off[t] + sz[t];
  const int gains[] = {WEFT_GPT_T_LN1W, WEFT_GPT_T_LN2W, WEFT_GPT_T_LNFW};
  for (int g = 0; g < 3; g++)
    for (size_t i = off[gains[g]]; i < off[gains[g] + 1]; i++) p[i] += 1.0f;
  return p;
}

static unsigned char *slurp(const char *p, size_t *n) {
  *n = 0;
  FILE *f = fopen(p, "rb");
  if (!f) return calloc(1, 1);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n ? *n : 1);
  if (fread(b, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return b;
}

static void spit(const char *p, const void *b, size_t n) {
  FILE *f = fopen(p, "wb");
  if (f) {
    fwrite(b, 1, n, f);
    fclose(f);
  }
}

static int same(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (tu_bits(a[i]) != tu_bits(b[i])) return 0;
  return 1;
}

/* Loads p and expects status want, and (on failure) a message containing needle. Returns the buffer on success. */
static float *expect(const char *p, weft_status want, const char *needle, weft_gpt_io_config *cfg, size_t *n,
                     const char *what) {
  weft_gpt_io_config c = {0};
  if (cfg) c = *cfg;
  float *buf = NULL;
  size_t nn = 0;
  const weft_status st = weft_gpt_load(p, &c, &buf, &nn, err, sizeof err);
  TU_STATUS(st, want, what);
  if (st != WEFT_OK) {
    TU_CHECK(buf == NULL, "%s: no buffer on failure", what);
    TU_CHECK(tu_contains(err, needle), "%s: message '%s' should mention '%s'", what, err, needle);
    printf("  refused (%s): %s\n", what, err);
  } else if (st == WEFT_OK && want != WEFT_OK) {
    free(buf);
    buf = NULL;
  }
  if (cfg) *cfg = c;
  if (n) *n = nn;
  return buf;
}

/* The safetensors file as header JSON + data, to be edited and written back. */
typedef struct {
  cJSON *h;
  unsigned char *data;
  size_t dn;
} stfile;

static stfile st_read(const char *p) {
  stfile s = {0};
  size_t n;
  unsigned char *b = slurp(p, &n);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
  s.h = cJSON_ParseWithLength((const char *)b + 8, hl);
  s.dn = n - 8 - hl;
  s.data = malloc(s.dn + 64);
  memcpy(s.data, b + 8 + hl, s.dn);
  free(b);
  return s;
}

static void st_write(const stfile *s, const char *p) {
  char *t = cJSON_PrintUnformatted(s->h);
  const size_t tl = strlen(t);
  unsigned char lb[8];
  for (int i = 0; i < 8; i++) lb[i] = (unsigned char)((uint64_t)tl >> (8 * i));
  FILE *f = fopen(p, "wb");
  fwrite(lb, 1, 8, f);
  fwrite(t, 1, tl, f);
  fwrite(s->data, 1, s->dn, f);
  fclose(f);
  free(t);
}

static void st_free(stfile *s) {
  cJSON_Delete(s->h);
  free(s->data);
}

static void set_offsets(cJSON *x, double b, double e) {
  cJSON *o = cJSON_GetObjectItem(x, "data_offsets");
  cJSON_SetNumberValue(cJSON_GetArrayItem(o, 0), b);
  cJSON_SetNumberValue(cJSON_GetArrayItem(o, 1), e);
}

/* Lays the tensors out end to end in the order of their offsets, dropping bytes no tensor names, as a
 * well-formed file has them (the format's reader refuses gaps). */
static void st_pack(stfile *s) {
  cJSON *items[256];
  int n = 0;
  for (cJSON *it = s->h->child; it && n < 256; it = it->next)
    if (strcmp(it->string, "__metadata__")) items[n++] = it;
  for (int i = 1; i < n; i++) /* by begin */
    for (int k = i; k > 0; k--) {
      const double a = cJSON_GetArrayItem(cJSON_GetObjectItem(items[k - 1], "data_offsets"), 0)->valuedouble;
      const double b = cJSON_GetArrayItem(cJSON_GetObjectItem(items[k], "data_offsets"), 0)->valuedouble;
      if (a <= b) break;
      cJSON *t = items[k - 1];
      items[k - 1] = items[k], items[k] = t;
    }
  unsigned char *d = malloc(s->dn + 64);
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    cJSON *o = cJSON_GetObjectItem(items[i], "data_offsets");
    const size_t b = (size_t)cJSON_GetArrayItem(o, 0)->valuedouble, e = (size_t)cJSON_GetArrayItem(o, 1)->valuedouble;
    memcpy(d + at, s->data + b, e - b);
    set_offsets(items[i], (double)at, (double)(at + e - b));
    at += e - b;
  }
  free(s->data);
  s->data = d;
  s->dn = at;
}

/* A variant of the good safetensors file, edited by the caller between st_read and here. */
static const char *variant(stfile *s, const char *name) {
  const char *p = path_in(name);
  st_write(s, p);
  return p;
}

static void test_roundtrip(const float *params, size_t n) {
  weft_gpt_io_config c;
  size_t got;
  weft_gpt_format fmt = 0;
  float *b = NULL;

  /* safetensors with config.json: NH from the file */
  TU_STATUS(weft_gpt_save_safetensors(path_in("model.safetensors"), &CFG, params, 1, err, sizeof err), WEFT_OK, err);
  c = (weft_gpt_io_config){0};
  TU_STATUS(weft_gpt_load_ex(path_in("model.safetensors"), &c, &b, &got, &fmt, err, sizeof err), WEFT_OK, err);
  TU_CHECK(fmt == WEFT_GPT_FORMAT_SAFETENSORS, "format %d", (int)fmt);
  TU_CHECK(!memcmp(&c, &CFG, sizeof c), "safetensors config L=%d C=%d NH=%d V=%d maxT=%d", c.L, c.C, c.NH, c.V,
           c.maxT);
  TU_CHECK(b && got == n && same(b, params, n), "safetensors round trip: same bits");
  free(b);

  /* llm.c, padded Vp (128) and unpadded */
  const int vps[] = {0, 97, 200};
  for (int k = 0; k < 3; k++) {
    char nm[32];
    snprintf(nm, sizeof nm, "model%d.bin", vps[k]);
    TU_STATUS(weft_gpt_save_llmc(path_in(nm), &CFG, params, vps[k], err, sizeof err), WEFT_OK, err);
    size_t fs = 0;
    unsigned char *raw = slurp(path_in(nm), &fs);
    const int vp = vps[k] ? vps[k] : 128;
    TU_CHECK(fs == 1024 + (n + (size_t)(vp - CFG.V) * CFG.C) * 4, "llm.c file size %zu with Vp %d", fs, vp);
    int32_t h[8];
    memcpy(h, raw, sizeof h);
    TU_CHECK(h[0] == 20240326 && h[1] == 3 && h[2] == 32 && h[3] == 97 && h[4] == 2 && h[5] == 4 && h[6] == 64 &&
                 h[7] == vp, "llm.c header");
    free(raw);
    c = (weft_gpt_io_config){0};
    b = NULL;
    TU_STATUS(weft_gpt_load_ex(path_in(nm), &c, &b, &got, &fmt, err, sizeof err), WEFT_OK, err);
    TU_CHECK(fmt == WEFT_GPT_FORMAT_LLMC, "format %d", (int)fmt);
    TU_CHECK(!memcmp(&c, &CFG, sizeof c), "llm.c config");
    TU_CHECK(b && got == n && same(b, params, n), "llm.c round trip (Vp %d): same bits", vp);
    free(b);
  }
  TU_STATUS(weft_gpt_save_llmc(path_in("x.bin"), &CFG, params, 50, err, sizeof err), WEFT_ERR_INVALID_ARGUMENT,
            "Vp < V refused");
  weft_gpt_io_config bad = CFG;
  bad.NH = 5;
  TU_STATUS(weft_gpt_save_llmc(path_in("x.bin"), &bad, params, 0, err, sizeof err), WEFT_ERR_SHAPE, "NH 5 refused");
}

static void test_llmc_bad(const float *params, size_t n) {
  size_t fs = 0;
  unsigned char *good = slurp(path_in("model0.bin"), &fs);
  unsigned char *b = malloc(fs);
  int32_t v;

  spit(path_in("trunc.bin"), good, fs - 4);
  free(expect(path_in("trunc.bin"), WEFT_ERR_INVALID_ARGUMENT, "truncated", NULL, NULL, "llm.c truncated"));
  spit(path_in("trunc.bin"), good, 1000);
  free(expect(path_in("trunc.bin"), WEFT_ERR_INVALID_ARGUMENT, "header", NULL, NULL, "llm.c header cut"));
  unsigned char *big = calloc(fs + 8, 1);
  memcpy(big, good, fs);
  spit(path_in("long.bin"), big, fs + 8);
  free(big);
  free(expect(path_in("long.bin"), WEFT_ERR_INVALID_ARGUMENT, "trailing", NULL, NULL, "llm.c trailing bytes"));

  memcpy(b, good, fs);
  v = 20240327;
  memcpy(b, &v, 4);
  spit(path_in("magic.bin"), b, fs);
  free(expect(path_in("magic.bin"), WEFT_ERR_INVALID_ARGUMENT, "magic", NULL, NULL, "llm.c wrong magic"));

  memcpy(b, good, fs);
  v = 4;
  memcpy(b + 4, &v, 4);
  spit(path_in("ver.bin"), b, fs);
  free(expect(path_in("ver.bin"), WEFT_ERR_INVALID_ARGUMENT, "version 4", NULL, NULL, "llm.c version 4"));

  memcpy(b, good, fs);
  v = 6;
  memcpy(b + 20, &v, 4); /* NH 6 does not divide 64 */
  spit(path_in("nh.bin"), b, fs);
  free(expect(path_in("nh.bin"), WEFT_ERR_INVALID_ARGUMENT, "NH=6", NULL, NULL, "llm.c NH not dividing C"));

  memcpy(b, good, fs);
  v = 2000000000;
  memcpy(b + 16, &v, 4); /* L two billion: the size check, not an allocation, refuses it */
  spit(path_in("lie.bin"), b, fs);
  free(expect(path_in("lie.bin"), WEFT_ERR_INVALID_ARGUMENT, "says", NULL, NULL, "llm.c lying L"));

  /* version 5: bf16 parameters, converted (the top 16 bits of each float) */
  const size_t npad = n + (size_t)(128 - CFG.V) * CFG.C;
  unsigned char *b5 = malloc(1024 + npad * 2);
  memcpy(b5, good, 1024);
  v = 5;
  memcpy(b5 + 4, &v, 4);
  const float *src = (const float *)(good + 1024);
  for (size_t i = 0; i < npad; i++) {
    const uint16_t hi = (uint16_t)(tu_bits(src[i]) >> 16);
    memcpy(b5 + 1024 + 2 * i, &hi, 2);
  }
  spit(path_in("bf16.bin"), b5, 1024 + npad * 2);
  free(b5);
  size_t got;
  float *l = expect(path_in("bf16.bin"), WEFT_OK, "", NULL, &got, "llm.c version 5 (bf16)");
  int ok = l && got == n;
  for (size_t i = 0; ok && i < n; i++) ok = tu_bits(l[i]) == (tu_bits(params[i]) & 0xffff0000u);
  TU_CHECK(ok, "bf16 llm.c values are the fp32 values' top halves");
  free(l);

  unsigned char tiny[3] = {1, 2, 3};
  spit(path_in("tiny.bin"), tiny, 3);
  free(expect(path_in("tiny.bin"), WEFT_ERR_INVALID_ARGUMENT, "neither", NULL, NULL, "3-byte file"));
  free(expect(path_in("absent.bin"), WEFT_ERR_IO, "cannot open", NULL, NULL, "absent file"));
  free(b);
  free(good);
}

static void test_safetensors_bad(const float *params, size_t n) {
  char good[128];
  snprintf(good, sizeof good, "%s", path_in("model.safetensors"));
  size_t fs = 0;
  unsigned char *raw = slurp(good, &fs);
  stfile s;

  spit(path_in("t1.safetensors"), raw, fs - 4);
  free(expect(path_in("t1.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "out of range", NULL, NULL,
              "safetensors truncated"));
  spit(path_in("t2.safetensors"), raw, 100);
  free(expect(path_in("t2.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "runs past the end", NULL, NULL,
              "safetensors cut inside the header"));
  unsigned char *b = malloc(fs);
  memcpy(b, raw, fs);
  b[5] = 0x7f; /* header length ~ 2^47 */
  spit(path_in("t3.safetensors"), b, fs);
  free(expect(path_in("t3.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "header length", NULL, NULL,
              "safetensors lying header length"));
  memcpy(b, raw, fs);
  b[8 + 1] = '!'; /* broken JSON */
  spit(path_in("t4.safetensors"), b, fs);
  free(expect(path_in("t4.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "JSON", NULL, NULL, "safetensors bad JSON"));
  free(b);
  free(raw);

  s = st_read(good);
  set_offsets(cJSON_GetObjectItem(s.h, "ln_f.bias"), (double)s.dn - 256 + 8, (double)s.dn + 8);
  free(expect(variant(&s, "o1.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "out of range", NULL, NULL,
              "offsets past the data"));
  st_free(&s);

  s = st_read(good);
  {
    cJSON *w = cJSON_GetObjectItem(cJSON_GetObjectItem(s.h, "h.0.ln_1.weight"), "data_offsets");
    set_offsets(cJSON_GetObjectItem(s.h, "h.0.ln_1.bias"), cJSON_GetArrayItem(w, 0)->valuedouble,
                cJSON_GetArrayItem(w, 1)->valuedouble);
  }
  free(expect(variant(&s, "o2.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "overlap", NULL, NULL, "overlapping tensors"));
  st_free(&s);

  s = st_read(good);
  cJSON_DeleteItemFromObject(s.h, "h.1.mlp.c_fc.bias");
  free(expect(variant(&s, "m1.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "missing tensor 'h.1.mlp.c_fc.bias'", NULL,
              NULL, "missing tensor"));
  st_free(&s);

  s = st_read(good);
  cJSON_DeleteItemFromObject(s.h, "wpe.weight");
  free(expect(variant(&s, "m2.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "wpe.weight", NULL, NULL, "missing wpe"));
  st_free(&s);

  s = st_read(good);
  { /* c_attn stored [out, in] (the same bytes, the wrong layout) */
    cJSON *sh = cJSON_GetObjectItem(cJSON_GetObjectItem(s.h, "h.0.attn.c_attn.weight"), "shape");
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 0), 192);
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 1), 64);
  }
  free(expect(variant(&s, "s1.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "needs [64, 192]", NULL, NULL,
              "c_attn shape transposed"));
  st_free(&s);

  s = st_read(good);
  {
    cJSON *sh = cJSON_GetObjectItem(cJSON_GetObjectItem(s.h, "h.1.ln_2.bias"), "shape");
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 0), 65);
  }
  free(expect(variant(&s, "s2.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "span", NULL, NULL,
              "shape disagrees with its bytes"));
  st_free(&s);

  s = st_read(good);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(s.h, "ln_f.weight"), "dtype", cJSON_CreateString("I32"));
  free(expect(variant(&s, "d1.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "dtype I32", NULL, NULL, "I32 weights"));
  st_free(&s);

  s = st_read(good);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(s.h, "ln_f.weight"), "dtype", cJSON_CreateString("Q4"));
  free(expect(variant(&s, "d2.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "unknown dtype", NULL, NULL, "dtype Q4"));
  st_free(&s);

  s = st_read(good);
  cJSON_AddItemToObject(s.h, "h.2.ln_1.weight", cJSON_Duplicate(cJSON_GetObjectItem(s.h, "h.1.ln_1.weight"), 1));
  /* a third layer's first tensor, sharing the bytes of layer 1's: refused as overlapping before anything else */
  free(expect(variant(&s, "u0.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "overlap", NULL, NULL, "shared bytes"));
  st_free(&s);

  s = st_read(good);
  { /* ln_f.bias twice: plain and under the prefix, each with bytes of its own */
    cJSON *x = cJSON_Duplicate(cJSON_GetObjectItem(s.h, "ln_f.bias"), 1);
    set_offsets(x, (double)s.dn, (double)s.dn + 256);
    cJSON_AddItemToObject(s.h, "transformer.ln_f.bias", x);
    s.data = realloc(s.data, s.dn + 256);
    memset(s.data + s.dn, 0, 256);
    s.dn += 256;
  }
  free(expect(variant(&s, "u2.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "appears twice", NULL, NULL,
              "a tensor twice"));
  st_free(&s);

  s = st_read(good);
  { /* wte's range stretched over wpe's and h.0.ln_1.weight's */
    cJSON *w = cJSON_GetObjectItem(cJSON_GetObjectItem(s.h, "h.0.ln_1.weight"), "data_offsets");
    cJSON *x = cJSON_GetObjectItem(s.h, "wte.weight");
    cJSON *sh = cJSON_GetObjectItem(x, "shape");
    const double end = cJSON_GetArrayItem(w, 1)->valuedouble;
    set_offsets(x, 0, end);
    cJSON_SetNumberValue(cJSON_GetArrayItem(sh, 0), end / 4 / 64);
  }
  free(expect(variant(&s, "o3.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "overlap", NULL, NULL, "wide overlap"));
  st_free(&s);

  /* Bytes that belong to no tensor: a gap, trailing bytes; an empty tensor placed inside another's bytes;
   * a field given twice in one entry; a name given twice. */
  s = st_read(good);
  {
    cJSON *x = cJSON_GetObjectItem(s.h, "ln_f.bias"), *o = cJSON_GetObjectItem(x, "data_offsets");
    set_offsets(x, cJSON_GetArrayItem(o, 0)->valuedouble + 4, cJSON_GetArrayItem(o, 1)->valuedouble + 4);
    s.dn += 4;
  }
  free(expect(variant(&s, "g1.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "belong to no tensor", NULL, NULL,
              "a gap in the data"));
  st_free(&s);
  s = st_read(good);
  s.dn += 16;
  free(expect(variant(&s, "g2.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "trailing bytes", NULL, NULL,
              "trailing bytes"));
  st_free(&s);
  s = st_read(good);
  {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "dtype", "F32");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(x, "shape"), cJSON_CreateNumber(0));
    cJSON_AddItemToObject(x, "data_offsets", cJSON_CreateArray());
    cJSON_AddItemToArray(cJSON_GetObjectItem(x, "data_offsets"), cJSON_CreateNumber(8));
    cJSON_AddItemToArray(cJSON_GetObjectItem(x, "data_offsets"), cJSON_CreateNumber(8));
    cJSON_AddItemToObject(s.h, "h.0.attn.masked_bias", x);
  }
  free(expect(variant(&s, "g3.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "inside the bytes", NULL, NULL,
              "an empty tensor inside wte's bytes"));
  st_free(&s);
  s = st_read(good);
  cJSON_AddItemToObject(cJSON_GetObjectItem(s.h, "ln_f.weight"), "dtype", cJSON_CreateString("F16"));
  free(expect(variant(&s, "r1.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "'dtype' twice", NULL, NULL,
              "an entry with two dtypes"));
  st_free(&s);
  s = st_read(good);
  cJSON_AddItemToObject(s.h, "ln_f.bias", cJSON_Duplicate(cJSON_GetObjectItem(s.h, "ln_f.bias"), 1));
  free(expect(variant(&s, "r2.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "appears twice", NULL, NULL,
              "a name given twice"));
  st_free(&s);

  /* An extra tensor with its own bytes: unexpected. The prefix and the mask buffer: accepted. F16 and BF16
   * tensors: converted. */
  s = st_read(good);
  {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "dtype", "F32");
    cJSON *sh = cJSON_AddArrayToObject(x, "shape");
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(4));
    cJSON_AddItemToObject(x, "data_offsets", cJSON_CreateArray());
    cJSON_AddItemToArray(cJSON_GetObjectItem(x, "data_offsets"), cJSON_CreateNumber((double)s.dn));
    cJSON_AddItemToArray(cJSON_GetObjectItem(x, "data_offsets"), cJSON_CreateNumber((double)s.dn + 16));
    cJSON_AddItemToObject(s.h, "h.0.attn.extra", x);
    s.dn += 16;
  }
  free(expect(variant(&s, "u1.safetensors"), WEFT_ERR_INVALID_ARGUMENT, "unexpected tensor 'h.0.attn.extra'", NULL,
              NULL, "unexpected tensor"));
  st_free(&s);

  s = st_read(good);
  {
    /* every name under transformer., a mask buffer, ln_f.bias as F16 and wpe's first... no: ln_1 bias as BF16 */
    cJSON *nh = cJSON_CreateObject();
    for (cJSON *it = s.h->child; it; it = it->next) {
      char nm[96];
      if (!strcmp(it->string, "__metadata__")) snprintf(nm, sizeof nm, "%s", it->string);
      else snprintf(nm, sizeof nm, "transformer.%s", it->string);
      cJSON_AddItemToObject(nh, nm, cJSON_Duplicate(it, 1));
    }
    cJSON_Delete(s.h);
    s.h = nh;
    const size_t base = s.dn;
    cJSON *mask = cJSON_CreateObject();
    cJSON_AddStringToObject(mask, "dtype", "BOOL");
    cJSON *sh = cJSON_AddArrayToObject(mask, "shape");
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(4));
    cJSON *o = cJSON_AddArrayToObject(mask, "data_offsets");
    cJSON_AddItemToArray(o, cJSON_CreateNumber((double)base));
    cJSON_AddItemToArray(o, cJSON_CreateNumber((double)base + 4));
    cJSON_AddItemToObject(s.h, "transformer.h.1.attn.bias", mask);
    memset(s.data + base, 1, 4);
    s.dn = base + 4;
    /* ln_f.bias: 64 halves at base+4 (1.5, -2^-24 subnormal, then 0.25 * k); h.0.ln_1.bias: 64 bf16 */
    s.data = realloc(s.data, s.dn + 64 * 2 + 64 * 2);
    uint16_t hv[64], bv[64];
    for (int k = 0; k < 64; k++) hv[k] = (uint16_t)(0x3400 + k); /* 0.25 .. */
    hv[0] = 0x3e00;                                              /* 1.5 */
    hv[1] = 0x8001;                                              /* -2^-24 */
    hv[2] = 0x7c00;                                              /* +inf */
    for (int k = 0; k < 64; k++) bv[k] = (uint16_t)(0x3f80 + k); /* 1.0 .. */
    memcpy(s.data + s.dn, hv, sizeof hv);
    memcpy(s.data + s.dn + 128, bv, sizeof bv);
    cJSON *fb = cJSON_GetObjectItem(s.h, "transformer.ln_f.bias"), *lb = cJSON_GetObjectItem(s.h, "transformer.h.0.ln_1.bias");
    cJSON_ReplaceItemInObject(fb, "dtype", cJSON_CreateString("F16"));
    cJSON_ReplaceItemInObject(lb, "dtype", cJSON_CreateString("BF16"));
    set_offsets(fb, (double)s.dn, (double)s.dn + 128);
    set_offsets(lb, (double)s.dn + 128, (double)s.dn + 256);
    s.dn += 256;
    st_pack(&s); /* the F32 bytes the two tensors left */
  }
  size_t got;
  float *l = expect(variant(&s, "p1.safetensors"), WEFT_OK, "", NULL, &got, "prefix, mask buffer, F16, BF16");
  st_free(&s);
  if (l && got == n) {
    size_t sz[WEFT_GPT_NTENSORS], tot, off[WEFT_GPT_NTENSORS + 1] = {0};
    weft_gpt_io_sizes(&CFG, sz, &tot);
    for (int t = 0; t < WEFT_GPT_NTENSORS; t++) off[t + 1] = off[t] + sz[t];
    const float *fb = l + off[WEFT_GPT_T_LNFB], *lb = l + off[WEFT_GPT_T_LN1B];
    TU_CHECK(fb[0] == 1.5f && fb[1] == -0x1p-24f && fb[2] > 3e38f && fb[3] == 0x1.00cp-2f, "F16 converted: %a %a %a %a",
             fb[0], fb[1], fb[2], fb[3]);
    TU_CHECK(lb[0] == 1.0f && lb[1] == 0x1.02p+0f && same(lb + 64, params + off[WEFT_GPT_T_LN1B] + 64, 64),
             "BF16 converted, layer 1 untouched: %a %a", lb[0], lb[1]);
    TU_CHECK(same(l, params, off[WEFT_GPT_T_LN1B]), "other tensors unchanged");
  }
  free(l);
}

/* Random bytes of the headers changed: every load returns (a status, a message on failure), nothing leaks
 * or reads out of bounds (the sanitizer build watches). */
static void test_mutations(void) {
  const char *files[2] = {"model.safetensors", "model0.bin"};
  tu_rng r = {tu_seed() ^ 0x5eedu};
  int refused = 0, total = 0;
  for (int f = 0; f < 2; f++) {
    char src[128];
    snprintf(src, sizeof src, "%s", path_in(files[f]));
    size_t fs = 0;
    unsigned char *good = slurp(src, &fs), *b = malloc(fs ? fs : 1);
    const size_t span = f == 0 ? 8 + 2400 : 1024 + 64; /* the header (and a little data) */
    for (int k = 0; k < 150 && fs; k++) {
      memcpy(b, good, fs);
      const int flips = (int)tu_rng_int(&r, 1, 4);
      for (int q = 0; q < flips; q++) {
        const size_t at = (size_t)tu_rng_int(&r, 0, (int64_t)(span < fs ? span : fs) - 1);
        b[at] = (unsigned char)(tu_rng_int(&r, 0, 1) ? tu_rng_int(&r, 0, 255) : b[at] ^ (1u << tu_rng_int(&r, 0, 7)));
      }
      const size_t len = tu_rng_int(&r, 0, 3) ? fs : (size_t)tu_rng_int(&r, 0, (int64_t)fs);
      spit(path_in("mut.bin"), b, len);
      weft_gpt_io_config c = {0};
      float *p = NULL;
      size_t n = 0;
      err[0] = '\0';
      const weft_status st = weft_gpt_load(path_in("mut.bin"), &c, &p, &n, err, sizeof err);
      total++;
      if (st != WEFT_OK) {
        refused++;
        TU_CHECK(p == NULL && err[0] != '\0', "a refused mutation has a message and no buffer");
      } else {
        size_t want = 0;
        TU_CHECK(weft_gpt_io_sizes(&c, NULL, &want) == WEFT_OK && want == n && p, "an accepted mutation is a model");
      }
      free(p);
    }
    free(good);
    free(b);
  }
  printf("  %d of %d mutated files refused, the rest loaded as models\n", refused, total);
}

static void test_nh(const float *params) {
  /* Without config.json: the hint, else C/64. */
  char sub[96];
  snprintf(sub, sizeof sub, "%s/nocfg", dir);
  mkdir(sub, 0700);
  char p[128];
  snprintf(p, sizeof p, "%s/m.safetensors", sub);
  TU_STATUS(weft_gpt_save_safetensors(p, &CFG, params, 0, err, sizeof err), WEFT_OK, err);
  weft_gpt_io_config c = {0};
  free(expect(p, WEFT_OK, "", &c, NULL, "no config.json"));
  TU_CHECK(c.NH == 1, "NH defaults to C/64: %d", c.NH);
  c = (weft_gpt_io_config){.NH = 8};
  free(expect(p, WEFT_OK, "", &c, NULL, "no config.json, hint 8"));
  TU_CHECK(c.NH == 8, "NH from the hint: %d", c.NH);
  c = (weft_gpt_io_config){.NH = 7};
  free(expect(p, WEFT_ERR_INVALID_ARGUMENT, "does not divide", &c, NULL, "hint 7"));
  /* config.json wins over the hint; a disagreeing one is refused */
  c = (weft_gpt_io_config){.NH = 8};
  free(expect(path_in("model.safetensors"), WEFT_OK, "", &c, NULL, "config.json and hint"));
  TU_CHECK(c.NH == 4, "NH from config.json: %d", c.NH);
  snprintf(p, sizeof p, "%s/config.json", sub);
  spit(p, "{\"n_head\": 4, \"n_embd\": 128}", 28);
  snprintf(p, sizeof p, "%s/m.safetensors", sub);
  free(expect(p, WEFT_ERR_INVALID_ARGUMENT, "n_embd", NULL, NULL, "config.json disagreeing"));
  snprintf(p, sizeof p, "%s/config.json", sub);
  spit(p, "{\"n_layer\": \"2\"}", 16);
  snprintf(p, sizeof p, "%s/m.safetensors", sub);
  free(expect(p, WEFT_ERR_INVALID_ARGUMENT, "n_layer is not a whole number", NULL, NULL, "config.json n_layer a string"));
  snprintf(p, sizeof p, "%s/config.json", sub);
  remove(p);
  snprintf(p, sizeof p, "%s/m.safetensors", sub);
  remove(p);
  rmdir(sub);
}

int main(int argc, char **argv) {
  const double t0 = tu_now();
  size_t n;
  float *params = random_params(&n);
  if (argc > 1) { /* write the files for the PyTorch comparison */
    snprintf(dir, sizeof dir, "%s", argv[1]);
    TU_STATUS(weft_gpt_save_safetensors(path_in("model.safetensors"), &CFG, params, 1, err, sizeof err), WEFT_OK, err);
    TU_STATUS(weft_gpt_save_llmc(path_in("model.bin"), &CFG, params, 0, err, sizeof err), WEFT_OK, err);
    free(params);
    return tu_finish("test_gpt_io (write)", t0);
  }
  snprintf(dir, sizeof dir, "gptio_XXXXXX");
  TU_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  test_roundtrip(params, n);
  test_llmc_bad(params, n);
  test_safetensors_bad(params, n);
  test_nh(params);
  test_mutations();
  free(params);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  return tu_finish("test_gpt_io", t0);
}
