/* fuzz_files.c - libFuzzer targets for the parsers of files weft reads from people: the GPT-2 weights
 * loader (weft_gpt_load_ex: llm.c .bin and safetensors, with a config.json beside it), weft's own training
 * checkpoint (weft_gpt_checkpoint_load) and GPT-2's BPE tables (weft_bpe_load). Each input is written to
 * files in a scratch folder and loaded through the public function, as a user's file would be. Besides the
 * sanitizers' reports, each target checks what the headers promise:
 *   - a refused file gets WEFT_ERR_IO or WEFT_ERR_INVALID_ARGUMENT, a message naming the file, nothing
 *     allocated;
 *   - no single allocation during a load is larger than the input can justify (64 bytes per input byte, plus
 *     2 MB for fixed buffers; checked under ASan, where allocations can be watched);
 *   - an accepted file says what it holds: weights whose every element is backed by bytes in the file and
 *     that read back bit for bit through both writers; a checkpoint whose floats are the file's; a tokenizer
 *     for which decode(encode(x)) == x, x being the input itself.
 *
 * Inputs (the corpora tests/gpt/corpus-load, corpus-ckpt, corpus-bpe):
 *   load: the weights file, optionally followed by "\n--config.json--\n" and the config.json to put beside
 *         it; the input's size mod 3 is the NH hint.
 *   ckpt: a flag byte, then the checkpoint. Flag bit 1: the header's parameter count is set to what its
 *         config needs; bit 0: the checksum (the file's last 8 bytes) is recomputed. Each gets mutated files
 *         past a check that would refuse nearly all of them, to the parser behind it.
 *   bpe:  encoder.json, "\n--vocab.bpe--\n", vocab.bpe.
 * fuzz.sh builds one target per binary (-DFUZZ_TARGET=load, ckpt or bpe) with clang's libFuzzer.
 *
 * Built with -DFUZZ_REPLAY_MAIN it is a plain program (no libFuzzer): `fuzz_gpt_replay TARGET DIR...` runs
 * every file of the folders through TARGET once and fails when none of them loads (the gpt_fuzz_replay_*
 * tests), and `fuzz_gpt_replay seeds DIR` writes the seed corpora into DIR/corpus-* with weft's own writers
 * (and the reproducers of bugs that are easier made than kept; the others are the fuzzer's own files). */
#define _GNU_SOURCE /* memmem, mkdtemp */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt/bpe.h"
#include "gpt/gpt.h"
#include "gpt/gpt_io.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_WATCH_ALLOCS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_WATCH_ALLOCS 1
#endif
#endif
#ifdef FUZZ_WATCH_ALLOCS /* the sanitizer runtime's (declared here: gcc installs no sanitizer headers) */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
#endif

static const char CONFIG_SEP[] = "\n--config.json--\n";
static const char VOCAB_SEP[] = "\n--vocab.bpe--\n";

static char dir[256]; /* the scratch folder the inputs are written into */

static void die(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FUZZ CHECK FAILED: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

static void scratch_init(void) {
  if (dir[0]) return;
  const char *t = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/weft-fuzz-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(dir)) die("cannot make a scratch folder %s", dir);
  char rt[320];
  snprintf(rt, sizeof rt, "%s/rt", dir); /* where the weights are written back */
  if (mkdir(rt, 0700) != 0) die("cannot make %s", rt);
}

static const char *path_of(const char *name) {
  static char p[4][320];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

static void put_file(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(b, 1, n, f) != n) || fclose(f) != 0) die("cannot write %s", path);
}

/* ------------------------------------------------------------------------------- allocation watch */

static size_t watch_limit, watch_largest;
static int watching;

#ifdef FUZZ_WATCH_ALLOCS
static void on_malloc(const volatile void *p, size_t n) {
  (void)p;
  if (watching && n > watch_largest) watch_largest = n;
}
static void on_free(const volatile void *p) { (void)p; }
#endif

/* From here to watch_end, no allocation may exceed 64 bytes per input byte plus 2 MB. */
static void watch_begin(size_t input) {
#ifdef FUZZ_WATCH_ALLOCS
  static int hooked;
  if (!hooked) hooked = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
#endif
  watch_limit = input * 64 + (2u << 20);
  watch_largest = 0;
  watching = 1;
}

static void watch_end(const char *what) {
  watching = 0;
  if (watch_largest > watch_limit)
    die("%s: an allocation of %zu bytes, more than an input of this size justifies (%zu)", what, watch_largest,
        watch_limit);
}

static char last_refusal[512]; /* the message of the last refused input */

/* A refusal must be one of the two documented statuses, with a message that names the file. */
static void check_refusal(weft_status st, const char *err, const char *what) {
  snprintf(last_refusal, sizeof last_refusal, "%s", err);
  if (st != WEFT_ERR_IO && st != WEFT_ERR_INVALID_ARGUMENT)
    die("%s: status %s, not WEFT_ERR_IO or WEFT_ERR_INVALID_ARGUMENT (%s)", what, weft_status_str(st), err);
  if (!err[0]) die("%s: refused without a message", what);
  if (!strstr(err, dir)) die("%s: the message '%s' does not name the file", what, err);
}

static int accepted; /* inputs the target's loader accepted */

/* ------------------------------------------------------------------------------- weights */

static weft_status load_weights(const char *path, int nh, weft_gpt_io_config *c, float **p, size_t *n,
                                weft_gpt_format *fmt, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  c->NH = nh;
  *p = NULL;
  *n = 0;
  return weft_gpt_load_ex(path, c, p, n, fmt, err, errlen);
}

/* Writes the weights with one of weft's writers and reads them back: the same config, the same bits. */
static void round_trip(const weft_gpt_io_config *c, const float *p, size_t n, int llmc) {
  const char *path = path_of(llmc ? "rt/model.bin" : "rt/model.safetensors");
  char err[512];
  weft_status st = llmc ? weft_gpt_save_llmc(path, c, p, 0, err, sizeof err)
                        : weft_gpt_save_safetensors(path, c, p, 1, err, sizeof err);
  if (st) die("writing back what was read failed: %s", err);
  weft_gpt_io_config c2;
  float *p2;
  size_t n2;
  weft_gpt_format f2;
  st = load_weights(path, 0, &c2, &p2, &n2, &f2, err, sizeof err);
  if (st) die("what weft wrote does not load: %s", err);
  if (memcmp(&c2, c, sizeof *c) != 0 || n2 != n || memcmp(p2, p, n * sizeof(float)) != 0)
    die("weights written by %s and read back differ", llmc ? "weft_gpt_save_llmc" : "weft_gpt_save_safetensors");
  free(p2);
}

static int fuzz_load(const uint8_t *data, size_t size) {
  scratch_init();
  size_t model = size; /* the config.json follows the last separator */
  for (const uint8_t *s = data; size && (s = memmem(s, size - (size_t)(s - data), CONFIG_SEP, sizeof CONFIG_SEP - 1));
       s++)
    model = (size_t)(s - data);
  const char *path = path_of("model"), *cfgpath = path_of("config.json");
  put_file(path, data, model);
  if (model < size) put_file(cfgpath, data + model + sizeof CONFIG_SEP - 1, size - model - (sizeof CONFIG_SEP - 1));
  else unlink(cfgpath);

  weft_gpt_io_config c;
  float *p;
  size_t n;
  weft_gpt_format fmt = 0;
  char err[512];
  watch_begin(size);
  const weft_status st = load_weights(path, (int)(size % 3), &c, &p, &n, &fmt, err, sizeof err);
  watch_end("weft_gpt_load");
  if (st) {
    check_refusal(st, err, "weft_gpt_load");
    if (p || n) die("weft_gpt_load failed but returned a buffer");
    return 0;
  }
  accepted++;
  size_t total;
  if (weft_gpt_io_sizes(&c, NULL, &total) != WEFT_OK || total != n)
    die("weft_gpt_load accepted a file whose config (L=%d C=%d NH=%d V=%d maxT=%d) does not make its %zu parameters",
        c.L, c.C, c.NH, c.V, c.maxT, n);
  if (fmt != WEFT_GPT_FORMAT_LLMC && fmt != WEFT_GPT_FORMAT_SAFETENSORS) die("no format reported");
  if (n > model / 2) die("%zu parameters from a file of %zu bytes", n, model); /* F16/BF16: 2 bytes each */
  (void)weft_gpt_fingerprint(p, n); /* reads every element: ASan sees a short buffer */
  round_trip(&c, p, n, 0);
  round_trip(&c, p, n, 1);
  free(p);
  return 0;
}

/* ------------------------------------------------------------------------------- checkpoint */

#define CKPT_HEADER 56 /* magic, version, config, step, rng state, count */

static int fuzz_ckpt(const uint8_t *data, size_t size) {
  scratch_init();
  if (size == 0) return 0;
  const int fix = data[0] & 1;
  const size_t len = size - 1;
  uint8_t *file = malloc(len ? len : 1);
  if (!file) die("out of memory");
  memcpy(file, data + 1, len);
  if ((data[0] & 2) && len >= CKPT_HEADER) { /* the parameter count the header's config needs */
    int32_t c5[5];
    memcpy(c5, file + 12, sizeof c5);
    const weft_gpt_config hc = {c5[0], c5[1], c5[2], c5[3], c5[4]};
    const uint64_t count = weft_gpt_param_count(&hc);
    if (count) memcpy(file + 48, &count, 8);
  }
  if (fix && len >= 8 && (len - 8) % 4 == 0) {
    const uint64_t sum = weft_gpt_fingerprint((const float *)(void *)file, (len - 8) / 4);
    memcpy(file + len - 8, &sum, 8);
  }
  const char *path = path_of("checkpoint");
  put_file(path, file, len);
  weft_gpt_config c = {0};
  int64_t step = 0;
  uint64_t rng = 0;
  float *P = NULL, *M = NULL, *V = NULL;
  char err[512] = "";
  watch_begin(size);
  const weft_status st = weft_gpt_checkpoint_load(path, &c, &step, &rng, &P, &M, &V, err, sizeof err);
  watch_end("weft_gpt_checkpoint_load");
  if (st) {
    check_refusal(st, err, "weft_gpt_checkpoint_load");
    if (P || M || V) die("weft_gpt_checkpoint_load failed but returned buffers");
    free(file);
    return 0;
  }
  accepted++;
  char why[256];
  if (!weft_gpt_config_ok(&c, why, sizeof why)) die("a checkpoint accepted with a bad config: %s", why);
  const size_t n = weft_gpt_param_count(&c);
  if (len != CKPT_HEADER + 3 * n * sizeof(float) + 8) die("a checkpoint of %zu bytes accepted for %zu parameters", len, n);
  if (memcmp(P, file + CKPT_HEADER, n * 4) || memcmp(M, file + CKPT_HEADER + n * 4, n * 4) ||
      memcmp(V, file + CKPT_HEADER + 2 * n * 4, n * 4))
    die("the parameters or moments read are not the file's");
  if (step < 0) die("a negative step accepted");
  free(P), free(M), free(V), free(file);
  return 0;
}

/* ------------------------------------------------------------------------------- tokenizer */

static int fuzz_bpe(const uint8_t *data, size_t size) {
  scratch_init();
  const uint8_t *sep = size ? memmem(data, size, VOCAB_SEP, sizeof VOCAB_SEP - 1) : NULL;
  const size_t ne = sep ? (size_t)(sep - data) : size, vo = sep ? ne + sizeof VOCAB_SEP - 1 : size;
  const char *enc = path_of("encoder.json"), *voc = path_of("vocab.bpe");
  put_file(enc, data, ne);
  put_file(voc, data + vo, size - vo);
  weft_bpe *b = (weft_bpe *)(uintptr_t)1; /* must come back NULL on failure */
  char err[512] = "";
  watch_begin(size);
  weft_status st = weft_bpe_load(enc, voc, &b, err, sizeof err);
  watch_end("weft_bpe_load");
  if (st) {
    check_refusal(st, err, "weft_bpe_load");
    if (b) die("weft_bpe_load failed but returned a tokenizer");
    return 0;
  }
  accepted++;
  const int32_t nv = weft_bpe_vocab_size(b);
  if (nv < 256) die("a tokenizer of %d tokens accepted", nv);
  for (int32_t id = 0; id < nv; id++) {
    size_t tl;
    if (!weft_bpe_token_bytes(b, id, &tl)) die("token %d has no bytes", id);
  }
  /* decode(encode(x)) == x, x the whole input (JSON, merges, separator, anything mutated in) */
  int32_t *tok = NULL;
  size_t nt = 0;
  watch_begin(size);
  st = weft_bpe_encode(b, (const char *)data, size, &tok, &nt);
  watch_end("weft_bpe_encode");
  if (st) die("weft_bpe_encode failed: %s", weft_status_str(st));
  if (nt > size) die("%zu tokens for %zu bytes", nt, size);
  char *text = NULL;
  size_t tl = 0;
  st = weft_bpe_decode(b, tok, nt, &text, &tl);
  if (st) die("weft_bpe_decode of what weft_bpe_encode made failed: %s", weft_status_str(st));
  if (tl != size || memcmp(text, data, size) != 0) die("decode(encode(x)) != x for the %zu bytes of the input", size);
  free(text);
  free(tok);
  weft_bpe_free(b);
  return 0;
}

/* ------------------------------------------------------------------------------- entry points */

#ifndef FUZZ_REPLAY_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
#define FUZZ_PASTE2(a, b) a##b
#define FUZZ_PASTE(a, b) FUZZ_PASTE2(a, b)
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return FUZZ_PASTE(fuzz_, FUZZ_TARGET)(data, size); }
#else
#include <dirent.h>
#include <cjson/cJSON.h>

static void scratch_clean(void) {
  static const char *const names[] = {"model", "config.json", "checkpoint", "encoder.json", "vocab.bpe",
                                      "rt/model.bin", "rt/model.safetensors", "rt/config.json", "rt"};
  if (!dir[0]) return;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) remove(path_of(names[i]));
  rmdir(dir);
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *b = NULL;
  long end = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (end >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)end + 1)) != NULL &&
      fread(b, 1, (size_t)end, f) != (size_t)end) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *n = end > 0 ? (size_t)end : 0;
  return b;
}

/* ------------------------------------------------------------------------------- the seed corpora */

typedef struct {
  uint8_t *b;
  size_t n;
} bytes;

static void cat(bytes *o, const void *p, size_t n) {
  o->b = realloc(o->b, o->n + n + 1);
  if (!o->b) die("out of memory");
  memcpy(o->b + o->n, p, n);
  o->n += n;
}

static void seed(const char *root, const char *corpus, const char *name, const bytes *o) {
  char p[4096];
  snprintf(p, sizeof p, "%s/corpus-%s/%s", root, corpus, name);
  put_file(p, o->b, o->n);
  printf("%s: %zu bytes\n", p, o->n);
}

static uint16_t to_f16(float f) { /* round to nearest even; the seeds' values are small normal numbers */
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
  if (e <= 0) return (uint16_t)sign; /* flushed: none of the seed's values are that small */
  uint32_t m = u & 0x7fffffu, h = sign | (uint32_t)e << 10 | m >> 13;
  const uint32_t rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
  return (uint16_t)h;
}

/* The safetensors file at path rewritten with every tensor in dtype ("F16" or "BF16"), names under prefix,
 * and, with masks, the ignored buffers a Hugging Face file carries (h.0.attn.bias as U8, masked_bias, a
 * scalar). */
static bytes st_variant(const char *path, const char *dtype, const char *prefix, int masks) {
  size_t n;
  uint8_t *f = slurp(path, &n);
  if (!f || n < 8) die("cannot read %s", path);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | f[i];
  cJSON *h = cJSON_ParseWithLength((const char *)f + 8, hl), *o = cJSON_CreateObject();
  bytes data = {0};
  for (cJSON *it = h ? h->child : NULL; it; it = it->next) {
    if (!strcmp(it->string, "__metadata__")) continue;
    const cJSON *of = cJSON_GetObjectItem(it, "data_offsets");
    const size_t b0 = (size_t)cJSON_GetArrayItem(of, 0)->valuedouble, b1 = (size_t)cJSON_GetArrayItem(of, 1)->valuedouble;
    const size_t begin = data.n;
    for (size_t k = b0; k < b1; k += 4) {
      float v;
      memcpy(&v, f + 8 + hl + k, 4);
      uint32_t u;
      memcpy(&u, &v, 4);
      const uint16_t x = !strcmp(dtype, "F16") ? to_f16(v) : (uint16_t)(u >> 16);
      cat(&data, &x, 2);
    }
    char nm[128];
    snprintf(nm, sizeof nm, "%s%s", prefix, it->string);
    cJSON *e = cJSON_AddObjectToObject(o, nm);
    cJSON_AddStringToObject(e, "dtype", dtype);
    cJSON_AddItemToObject(e, "shape", cJSON_Duplicate(cJSON_GetObjectItem(it, "shape"), 1));
    cJSON *no = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(no, cJSON_CreateNumber((double)begin));
    cJSON_AddItemToArray(no, cJSON_CreateNumber((double)data.n));
  }
  if (masks) {
    static const uint8_t tri[9] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    const float mb = -10000.0f;
    char nm[128];
    snprintf(nm, sizeof nm, "%sh.0.attn.bias", prefix);
    cJSON *e = cJSON_AddObjectToObject(o, nm);
    cJSON_AddStringToObject(e, "dtype", "U8");
    const double sh[4] = {1, 1, 3, 3};
    cJSON_AddItemToObject(e, "shape", cJSON_CreateDoubleArray(sh, 4));
    cJSON *no = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(no, cJSON_CreateNumber((double)data.n));
    cat(&data, tri, sizeof tri);
    cJSON_AddItemToArray(no, cJSON_CreateNumber((double)data.n));
    snprintf(nm, sizeof nm, "%sh.0.attn.masked_bias", prefix);
    e = cJSON_AddObjectToObject(o, nm);
    cJSON_AddStringToObject(e, "dtype", "F32");
    cJSON_AddArrayToObject(e, "shape");
    no = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(no, cJSON_CreateNumber((double)data.n));
    cat(&data, &mb, 4);
    cJSON_AddItemToArray(no, cJSON_CreateNumber((double)data.n));
  }
  char *t = cJSON_PrintUnformatted(o);
  const size_t tl = strlen(t);
  uint8_t lb[8];
  for (int i = 0; i < 8; i++) lb[i] = (uint8_t)((uint64_t)tl >> (8 * i));
  bytes out = {0};
  cat(&out, lb, 8);
  cat(&out, t, tl);
  cat(&out, data.b, data.n);
  free(t), free(data.b), free(f);
  cJSON_Delete(h), cJSON_Delete(o);
  return out;
}

/* GPT-2's bytes_to_unicode: byte -> code point, as UTF-8 into out (NUL-terminated). */
static void byte_symbol(int b, char out[4]) {
  int k = 0, cp = -1;
  for (int x = 0; x < 256; x++) {
    const int printable = (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff);
    const int c = printable ? x : 256 + k++;
    if (x == b) cp = c;
  }
  if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
  else out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
}

static int write_seeds(const char *root) {
  const weft_gpt_io_config io = {.L = 1, .C = 4, .NH = 2, .V = 6, .maxT = 3};
  const weft_gpt_config gc = {io.L, io.C, io.NH, io.V, io.maxT};
  const size_t n = weft_gpt_param_count(&gc);
  float *p = malloc(n * sizeof(float));
  weft_gpt_init_params(&gc, 1, p);
  char err[512];
  bytes o = {0};
  /* llm.c: version 3 with two padded rows of wte, and the same as version 5 (bf16) */
  const char *bin = path_of("model.bin");
  if (weft_gpt_save_llmc(bin, &io, p, 8, err, sizeof err)) die("%s", err);
  o.b = slurp(bin, &o.n);
  seed(root, "load", "llmc_v3_fp32", &o);
  bytes v5 = {0};
  int32_t hd[256];
  memcpy(hd, o.b, sizeof hd);
  hd[1] = 5;
  cat(&v5, hd, sizeof hd);
  for (size_t k = 1024; k < o.n; k += 4) cat(&v5, o.b + k + 2, 2); /* the high half of each float */
  seed(root, "load", "llmc_v5_bf16", &v5);
  free(v5.b), free(o.b);
  /* safetensors: F32 with its config.json after the separator; F16 under transformer. with the mask
   * buffers; BF16 without a config (the heads from the hint) */
  const char *st = path_of("model.safetensors"), *cj = path_of("config.json");
  if (weft_gpt_save_safetensors(st, &io, p, 1, err, sizeof err)) die("%s", err);
  o = (bytes){0};
  o.b = slurp(st, &o.n);
  size_t cn;
  uint8_t *cfg = slurp(cj, &cn);
  cat(&o, CONFIG_SEP, sizeof CONFIG_SEP - 1);
  cat(&o, cfg, cn);
  seed(root, "load", "safetensors_f32_config", &o);
  free(o.b), free(cfg);
  /* files weft once took or answered wrongly: 16 bytes no tensor names (accepted), a config.json whose
   * n_layer is a string (refused as "n_layer is -1") */
  o = (bytes){0};
  o.b = slurp(st, &o.n);
  cat(&o, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
  seed(root, "load", "repro_trailing_bytes", &o);
  free(o.b);
  o = (bytes){0};
  o.b = slurp(st, &o.n);
  const char sc[] = "{\"n_layer\": \"1\", \"n_head\": 2}";
  cat(&o, CONFIG_SEP, sizeof CONFIG_SEP - 1);
  cat(&o, sc, sizeof sc - 1);
  seed(root, "load", "repro_config_string", &o);
  free(o.b);
  o = st_variant(st, "F16", "transformer.", 1);
  seed(root, "load", "safetensors_f16_prefix_masks", &o);
  free(o.b);
  o = st_variant(st, "BF16", "", 0);
  seed(root, "load", "safetensors_bf16", &o);
  free(o.b);
  remove(bin), remove(st), remove(cj);

  /* weft's checkpoint of a model with moments, as saved; the flag byte 3 recomputes the count and checksum */
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu", d.cpu_threads = 1, d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  weft_gpt *g = NULL;
  if (weft_fabric_open(&d, &f) || weft_gpt_create(f, &gc, p, n, NULL, &g)) die("cannot make the model");
  float *m = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
  for (size_t k = 0; k < n; k++) m[k] = p[k] * 0.1f, v[k] = p[k] * p[k];
  const char *ck = path_of("checkpoint");
  if (weft_gpt_write_moments(g, m, v, n)) die("%s", weft_gpt_last_error(g));
  weft_gpt_set_step(g, 3);
  if (weft_gpt_checkpoint_save(g, ck, 42, err, sizeof err)) die("%s", err);
  weft_gpt_destroy(g);
  weft_fabric_close(f);
  free(m), free(v);
  for (int flag = 0; flag < 4; flag += 3) {
    o = (bytes){0};
    const uint8_t fl = (uint8_t)flag;
    cat(&o, &fl, 1);
    size_t cl;
    uint8_t *c = slurp(ck, &cl);
    cat(&o, c, cl);
    free(c);
    seed(root, "ckpt", flag ? "checkpoint_fix_count_checksum" : "checkpoint", &o);
    free(o.b);
  }
  remove(ck);
  free(p);

  /* a tiny BPE: the 256 byte tokens, a few merges, <|endoftext|> */
  static const char *const merges[][2] = {{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"},
                                          {"e", "r"}, {"Ġ", "a"}, {"o", "n"},  {"Ġa", "n"}};
  const int nm = (int)(sizeof merges / sizeof merges[0]);
  cJSON *e = cJSON_CreateObject();
  for (int b = 0; b < 256; b++) {
    char s[4];
    byte_symbol(b, s);
    cJSON_AddNumberToObject(e, s, b);
  }
  o = (bytes){0};
  bytes vb = {0};
  const char ver[] = "#version: 0.2\n";
  cat(&vb, ver, sizeof ver - 1);
  for (int k = 0; k < nm; k++) {
    char s[16];
    snprintf(s, sizeof s, "%s%s", merges[k][0], merges[k][1]);
    cJSON_AddNumberToObject(e, s, 256 + k);
    char line[24];
    snprintf(line, sizeof line, "%s %s\n", merges[k][0], merges[k][1]);
    cat(&vb, line, strlen(line));
  }
  cJSON_AddNumberToObject(e, "<|endoftext|>", 256 + nm);
  char *t = cJSON_PrintUnformatted(e);
  cat(&o, t, strlen(t));
  cat(&o, VOCAB_SEP, sizeof VOCAB_SEP - 1);
  cat(&o, vb.b, vb.n);
  seed(root, "bpe", "tiny_pair", &o);
  free(t), free(o.b), free(vb.b);
  cJSON_Delete(e);
  /* any pair made weft_bpe_load allocate 64 MB for each file */
  o = (bytes){0};
  cat(&o, "{}", 2);
  cat(&o, VOCAB_SEP, sizeof VOCAB_SEP - 1);
  seed(root, "bpe", "repro_64mb_read_buffer", &o);
  free(o.b);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "seeds")) {
    scratch_init();
    const int r = write_seeds(argv[2]);
    scratch_clean();
    return r;
  }
  int (*target)(const uint8_t *, size_t) = NULL;
  if (argc >= 3 && !strcmp(argv[1], "load")) target = fuzz_load;
  else if (argc >= 3 && !strcmp(argv[1], "ckpt")) target = fuzz_ckpt;
  else if (argc >= 3 && !strcmp(argv[1], "bpe")) target = fuzz_bpe;
  if (!target) {
    fprintf(stderr, "usage: fuzz_gpt_replay load|ckpt|bpe DIR...   or   fuzz_gpt_replay seeds TESTS_GPT_DIR\n");
    return 2;
  }
  int files = 0;
  for (int a = 2; a < argc; a++) {
    DIR *d = opendir(argv[a]);
    if (!d) {
      fprintf(stderr, "fuzz_gpt_replay: cannot open %s\n", argv[a]);
      return 1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
      size_t n;
      uint8_t *buf = slurp(path, &n);
      if (!buf) continue;
      const int before = accepted;
      target(buf, n);
      free(buf);
      printf("%s: %zu bytes, %s%s\n", e->d_name, n, accepted > before ? "loads" : "refused: ",
             accepted > before ? "" : last_refusal);
      files++;
    }
    closedir(d);
  }
  scratch_clean();
  printf("fuzz_gpt_replay %s: %d inputs, %d load\n", argv[1], files, accepted);
  if (files == 0 || accepted == 0) {
    fprintf(stderr, "FAIL fuzz_gpt_replay: %s\n", files ? "no input loads: the seeds do not reach the parser's end" : "no inputs");
    return 1;
  }
  return 0;
}
#endif
