/* gpt_io.c - GPT-2 checkpoints: Hugging Face safetensors and llm.c's .bin, read and written (gpt_io.h).
 *
 * Every size in a file is checked against the file's own size before it is used: a header length past the
 * end, offsets out of range, overlapping or leaving bytes that belong to no tensor, shapes that disagree with
 * each other, with their byte ranges or with config.json, a name or an entry's field given twice, missing or
 * unexpected tensors, unknown dtypes and versions are each refused with a message that names the tensor or
 * field. Allocations are bounded by the file's size (every element read is backed by bytes in the file),
 * and the safetensors JSON header by 100 MB, as the format's own reader bounds it. */
#include "gpt/gpt_io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LLMC_MAGIC 20240326
#define LLMC_HEADER_INTS 256
#define ST_MAX_HEADER (100u * 1024u * 1024u)
#define CONFIG_MAX_BYTES (1u << 20)

static weft_status fail(char *err, size_t errlen, weft_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static weft_status fail(char *err, size_t errlen, weft_status st, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return st;
}

static int host_little_endian(void) {
  const uint32_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ------------------------------------------------------------------------------------------ the layout */

/* Rows and columns of tensor t of ONE layer (or the whole tensor for the non-layer ones); rank 1 tensors
 * have rows 1. */
static void tensor_dims(const weft_gpt_io_config *c, int t, int64_t *rows, int64_t *cols, int *per_layer) {
  const int64_t C = c->C;
  int64_t r = 1, k = C;
  int pl = 1;
  switch (t) {
  case WEFT_GPT_T_WTE: r = c->V, pl = 0; break;
  case WEFT_GPT_T_WPE: r = c->maxT, pl = 0; break;
  case WEFT_GPT_T_QKVW: r = 3 * C; break;
  case WEFT_GPT_T_QKVB: k = 3 * C; break;
  case WEFT_GPT_T_ATTPROJW: r = C; break;
  case WEFT_GPT_T_FCW: r = 4 * C; break;
  case WEFT_GPT_T_FCB: k = 4 * C; break;
  case WEFT_GPT_T_FCPROJW: r = C, k = 4 * C; break;
  case WEFT_GPT_T_LNFW:
  case WEFT_GPT_T_LNFB: pl = 0; break;
  default: break; /* the layer norms and the C-sized biases */
  }
  *rows = r, *cols = k, *per_layer = pl;
}

static int is_matrix(int t) {
  return t == WEFT_GPT_T_WTE || t == WEFT_GPT_T_WPE || t == WEFT_GPT_T_QKVW || t == WEFT_GPT_T_ATTPROJW ||
         t == WEFT_GPT_T_FCW || t == WEFT_GPT_T_FCPROJW;
}

/* Hugging Face names (after the optional "transformer." prefix); %d is the layer. Conv1D weights are
 * stored [in, out]: transposed here. */
static const char *const hf_names[WEFT_GPT_NTENSORS] = {
    "wte.weight",        "wpe.weight",          "h.%d.ln_1.weight",      "h.%d.ln_1.bias",
    "h.%d.attn.c_attn.weight", "h.%d.attn.c_attn.bias", "h.%d.attn.c_proj.weight", "h.%d.attn.c_proj.bias",
    "h.%d.ln_2.weight",  "h.%d.ln_2.bias",      "h.%d.mlp.c_fc.weight",  "h.%d.mlp.c_fc.bias",
    "h.%d.mlp.c_proj.weight", "h.%d.mlp.c_proj.bias", "ln_f.weight",  "ln_f.bias"};
static int hf_transposed(int t) {
  return t == WEFT_GPT_T_QKVW || t == WEFT_GPT_T_ATTPROJW || t == WEFT_GPT_T_FCW || t == WEFT_GPT_T_FCPROJW;
}

static int mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

weft_status weft_gpt_io_sizes(const weft_gpt_io_config *cfg, size_t sizes[WEFT_GPT_NTENSORS], size_t *total) {
  if (!cfg || !total) return WEFT_ERR_INVALID_ARGUMENT;
  if (cfg->L <= 0 || cfg->C <= 0 || cfg->NH <= 0 || cfg->V <= 0 || cfg->maxT <= 0 || cfg->C % cfg->NH != 0)
    return WEFT_ERR_SHAPE;
  if (cfg->C > (1 << 26)) return WEFT_ERR_OVERFLOW; /* 4C must fit an int */
  size_t sum = 0;
  for (int t = 0; t < WEFT_GPT_NTENSORS; t++) {
    int64_t r, k;
    int pl;
    tensor_dims(cfg, t, &r, &k, &pl);
    size_t n;
    if (!mul_ok((size_t)r, (size_t)k, &n) || (pl && !mul_ok(n, (size_t)cfg->L, &n)) ||
        __builtin_add_overflow(sum, n, &sum))
      return WEFT_ERR_OVERFLOW;
    if (sizes) sizes[t] = n;
  }
  if (sum > SIZE_MAX / sizeof(float)) return WEFT_ERR_OVERFLOW;
  *total = sum;
  return WEFT_OK;
}

static const char *shape_problem(weft_status st) {
  return st == WEFT_ERR_OVERFLOW ? "sizes too large to describe" : "sizes not positive, or NH not dividing C";
}

/* ------------------------------------------------------------------------------------------ file access */

typedef struct {
  FILE *f;
  const char *path;
  uint64_t size;
} rfile;

/* The size of the open file f (closed on failure). */
static weft_status rf_from(rfile *rf, FILE *f, const char *path, char *err, size_t errlen) {
  rf->f = f;
  rf->path = path;
  rf->size = 0;
  if (fseeko(rf->f, 0, SEEK_END) != 0) {
    fclose(rf->f);
    return fail(err, errlen, WEFT_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
  }
  const off_t end = ftello(rf->f);
  if (end < 0) {
    fclose(rf->f);
    return fail(err, errlen, WEFT_ERR_IO, "%s: cannot tell its size (not a regular file?)", path);
  }
  rf->size = (uint64_t)end;
  return WEFT_OK;
}

static weft_status rf_open(rfile *rf, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, WEFT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  return rf_from(rf, f, path, err, errlen);
}

static weft_status rf_read(rfile *rf, uint64_t off, void *dst, size_t n, char *err, size_t errlen) {
  if (off > rf->size || n > rf->size - off)
    return fail(err, errlen, WEFT_ERR_IO, "%s: %zu bytes at offset %" PRIu64 " run past the end of the file (%" PRIu64
                " bytes)", rf->path, n, off, rf->size);
  if (fseeko(rf->f, (off_t)off, SEEK_SET) != 0 || fread(dst, 1, n, rf->f) != n)
    return fail(err, errlen, WEFT_ERR_IO, "%s: short read of %zu bytes at offset %" PRIu64, rf->path, n, off);
  return WEFT_OK;
}

/* Element types: fp32, fp16, bf16. */
enum { DT_F32, DT_F16, DT_BF16 };

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  if (e == 0) {
    if (m == 0) {
      bits = sign;
    } else { /* subnormal half: normalise */
      int32_t ex = 127 - 15 + 1;
      while (!(m & 0x400u)) m <<= 1, ex--;
      bits = sign | ((uint32_t)ex << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (m << 13);
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Reads n elements of type dt at off into dst as floats. */
static weft_status read_elems(rfile *rf, uint64_t off, float *dst, size_t n, int dt, char *err, size_t errlen) {
  if (dt == DT_F32) return rf_read(rf, off, dst, n * 4, err, errlen);
  enum { CHUNK = 1 << 16 };
  uint16_t *tmp = malloc(CHUNK * sizeof(uint16_t));
  if (!tmp) return fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
  weft_status st = WEFT_OK;
  for (size_t i = 0; i < n && st == WEFT_OK; i += CHUNK) {
    const size_t k = n - i < CHUNK ? n - i : CHUNK;
    st = rf_read(rf, off + (uint64_t)i * 2, tmp, k * 2, err, errlen);
    for (size_t j = 0; st == WEFT_OK && j < k; j++) {
      if (dt == DT_F16) {
        dst[i + j] = f16_to_f32(tmp[j]);
      } else {
        const uint32_t b = (uint32_t)tmp[j] << 16;
        memcpy(&dst[i + j], &b, 4);
      }
    }
  }
  free(tmp);
  return st;
}

/* ------------------------------------------------------------------------------------------ llm.c */

static weft_status load_llmc(rfile *rf, weft_gpt_io_config *cfg, float **params, size_t *nparams, char *err,
                             size_t errlen) {
  const char *p = rf->path;
  if (rf->size < LLMC_HEADER_INTS * 4)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: truncated llm.c checkpoint: %" PRIu64 " bytes, less than its 1024-byte header", p, rf->size);
  int32_t h[LLMC_HEADER_INTS];
  weft_status st = rf_read(rf, 0, h, sizeof h, err, errlen);
  if (st) return st;
  if (h[0] != LLMC_MAGIC)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: bad llm.c magic %d (want %d)", p, h[0], LLMC_MAGIC);
  int dt;
  if (h[1] == 3) dt = DT_F32;
  else if (h[1] == 5) dt = DT_BF16;
  else
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: llm.c checkpoint version %d not supported (3 is fp32, 5 is bf16)", p, h[1]);
  weft_gpt_io_config c = {.maxT = h[2], .V = h[3], .L = h[4], .NH = h[5], .C = h[6]};
  const int Vp = h[7];
  if (c.maxT <= 0 || c.V <= 0 || c.L <= 0 || c.NH <= 0 || c.C <= 0 || Vp < c.V || c.C % c.NH != 0)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: llm.c header makes no model: maxT=%d V=%d L=%d NH=%d C=%d Vp=%d (all > 0, Vp >= V, NH | C)", p,
                c.maxT, c.V, c.L, c.NH, c.C, Vp);
  size_t sizes[WEFT_GPT_NTENSORS], total;
  weft_gpt_io_config cp = c;
  cp.V = Vp;
  st = weft_gpt_io_sizes(&cp, sizes, &total);
  if (st)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: llm.c header: %s", p, shape_problem(st));
  const uint64_t esize = dt == DT_F32 ? 4 : 2;
  if (total > (UINT64_MAX - 1024) / esize)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: llm.c header: sizes too large", p);
  const uint64_t want = 1024 + (uint64_t)total * esize;
  if (rf->size != want)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: %s llm.c checkpoint: the file is %" PRIu64 " bytes, its header (L=%d C=%d Vp=%d maxT=%d, %s) "
                "says %" PRIu64, p, rf->size < want ? "truncated" : "oversized (trailing bytes after the parameters of an)",
                rf->size, c.L, c.C, Vp, c.maxT, dt == DT_F32 ? "fp32" : "bf16", want);
  const size_t drop = (size_t)(Vp - c.V) * (size_t)c.C;
  const size_t n = total - drop;
  float *buf = malloc(n * sizeof(float));
  if (!buf) return fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu parameters", p, n);
  /* wte's first V rows, skip the padding, then everything else in order. */
  const size_t wte = (size_t)c.V * (size_t)c.C;
  st = read_elems(rf, 1024, buf, wte, dt, err, errlen);
  if (!st) st = read_elems(rf, 1024 + (uint64_t)(wte + drop) * esize, buf + wte, n - wte, dt, err, errlen);
  if (st) {
    free(buf);
    return st;
  }
  *cfg = c;
  *params = buf;
  *nparams = n;
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------------ safetensors */

typedef struct {
  const char *name; /* points into the cJSON tree */
  int dt;           /* DT_* or -1 for a dtype only an ignored tensor may have */
  const char *dtype;
  int nd;
  int64_t shape[8];
  uint64_t begin, end;
  int used;
} st_entry;

static int json_u64(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return 0;
  const double d = j->valuedouble;
  if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return 0;
  *out = (uint64_t)d;
  return 1;
}

static int dtype_size(const char *s, int *dt) {
  static const struct {
    const char *n;
    int size, dt;
  } tab[] = {{"F32", 4, DT_F32}, {"F16", 2, DT_F16}, {"BF16", 2, DT_BF16}, {"F64", 8, -1}, {"I64", 8, -1},
             {"U64", 8, -1},     {"I32", 4, -1},     {"U32", 4, -1},       {"I16", 2, -1}, {"U16", 2, -1},
             {"I8", 1, -1},      {"U8", 1, -1},      {"BOOL", 1, -1},      {"F8_E4M3", 1, -1}, {"F8_E5M2", 1, -1}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (!strcmp(s, tab[i].n)) {
      *dt = tab[i].dt;
      return tab[i].size;
    }
  return 0;
}

/* The field of a header entry given more than once (JSON leaves which one counts to the reader), or NULL. */
static const char *repeated_field(const cJSON *entry) {
  static const char *const fields[] = {"dtype", "shape", "data_offsets"};
  int seen[3] = {0};
  for (const cJSON *f = entry->child; f; f = f->next)
    for (int k = 0; k < 3; k++)
      if (f->string && !strcmp(f->string, fields[k]) && seen[k]++) return fields[k];
  return NULL;
}

static int cmp_begin(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

static const char *strip_prefix(const char *n) {
  return strncmp(n, "transformer.", 12) == 0 ? n + 12 : n;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(strip_prefix((*(const st_entry *const *)a)->name), strip_prefix((*(const st_entry *const *)b)->name));
}

/* byname: the entries sorted by name without the prefix (a binary search, so a header of many entries
 * costs n log n, not n^2). */
static st_entry *find_entry(st_entry *const *byname, int ne, const char *name) {
  int lo = 0, hi = ne;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2, c = strcmp(strip_prefix(byname[mid]->name), name);
    if (c == 0) return byname[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

static int ignorable(const char *name) {
  const char *n = strip_prefix(name);
  if (!strcmp(name, "lm_head.weight")) return 1; /* tied to wte */
  int layer, len = 0;
  if (sscanf(n, "h.%d.attn.bias%n", &layer, &len) == 1 && len > 0 && n[len] == '\0') return 1;
  len = 0;
  if (sscanf(n, "h.%d.attn.masked_bias%n", &layer, &len) == 1 && len > 0 && n[len] == '\0') return 1;
  return 0;
}

/* n_head (and agreement of the other sizes) from a config.json in the folder of path; 0 when there is none. */
static weft_status read_hf_config(const char *path, const weft_gpt_io_config *c, int *nh, char *err, size_t errlen) {
  *nh = 0;
  const char *slash = strrchr(path, '/');
  const size_t dl = slash ? (size_t)(slash - path + 1) : 0;
  char *cp = malloc(dl + sizeof "config.json");
  if (!cp) return fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
  memcpy(cp, path, dl);
  memcpy(cp + dl, "config.json", sizeof "config.json");
  FILE *f = fopen(cp, "rb");
  if (!f) {
    free(cp);
    return WEFT_OK;
  }
  rfile rf;
  weft_status st = rf_from(&rf, f, cp, err, errlen);
  if (st) {
    free(cp);
    return st;
  }
  /* sized by the file: a config is a few hundred bytes */
  const size_t n = rf.size > CONFIG_MAX_BYTES ? 0 : (size_t)rf.size;
  char *txt = rf.size > CONFIG_MAX_BYTES ? NULL : malloc(n + 1);
  cJSON *j = NULL;
  if (rf.size > CONFIG_MAX_BYTES)
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: larger than 1 MB: not a model config", cp);
  else if (!txt)
    st = fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
  else
    st = rf_read(&rf, 0, txt, n, err, errlen);
  fclose(rf.f);
  if (!st && (!(j = cJSON_ParseWithLength(txt, n)) || !cJSON_IsObject(j))) {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: not a JSON object", cp);
  } else if (!st) {
    static const char *const keys[] = {"n_layer", "n_embd", "vocab_size", "n_positions"};
    const int have[] = {c->L, c->C, c->V, c->maxT};
    for (int k = 0; k < 4 && !st; k++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
      uint64_t u;
      if (v && !json_u64(v, &u))
        st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: %s is not a whole number (the weights say %d)", cp,
                  keys[k], have[k]);
      else if (v && u != (uint64_t)have[k])
        st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: %s is %" PRIu64 " but the weights say %d", cp,
                  keys[k], u, have[k]);
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "n_head");
    uint64_t u;
    if (!st && v) {
      if (!json_u64(v, &u) || u == 0 || u > (uint64_t)c->C || c->C % (int)u != 0)
        st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: n_head must be a positive divisor of n_embd %d", cp,
                  c->C);
      else
        *nh = (int)u;
    }
  }
  cJSON_Delete(j);
  free(txt);
  free(cp);
  return st;
}

static weft_status load_safetensors(rfile *rf, weft_gpt_io_config *cfg, float **params, size_t *nparams,
                                    char *err, size_t errlen) {
  const char *p = rf->path;
  unsigned char lb[8];
  if (rf->size < 8)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: %" PRIu64 " bytes: too short for a safetensors file", p,
                rf->size);
  weft_status st = rf_read(rf, 0, lb, 8, err, errlen);
  if (st) return st;
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | lb[i];
  if (hl > rf->size - 8)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: safetensors header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)", p, hl,
                rf->size);
  if (hl > ST_MAX_HEADER)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: safetensors header length %" PRIu64 " exceeds 100 MB",
                p, hl);
  char *hdr = malloc(hl + 1);
  if (!hdr) return fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory for the header", p);
  st = rf_read(rf, 8, hdr, hl, err, errlen);
  if (st) {
    free(hdr);
    return st;
  }
  hdr[hl] = '\0';
  cJSON *j = cJSON_ParseWithLength(hdr, hl);
  free(hdr);
  if (!j || !cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: the safetensors header is not a JSON object", p);
  }
  const uint64_t data0 = 8 + hl, dsize = rf->size - data0;
  const int nchild = cJSON_GetArraySize(j);
  st_entry *e = calloc((size_t)(nchild > 0 ? nchild : 1), sizeof *e);
  st_entry **order = calloc((size_t)(nchild > 0 ? nchild : 1), sizeof *order);
  st_entry **byname = calloc((size_t)(nchild > 0 ? nchild : 1), sizeof *byname);
  float *buf = NULL;
  int ne = 0;
  if (!e || !order || !byname) {
    st = fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (const cJSON *it = j->child; it && !st; it = it->next) {
    if (!strcmp(it->string, "__metadata__")) continue;
    st_entry *x = &e[ne];
    x->name = it->string;
    const cJSON *dtj = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *shj = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *ofj = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsObject(it) || !cJSON_IsString(dtj) || !cJSON_IsArray(shj) || !cJSON_IsArray(ofj) ||
        cJSON_GetArraySize(ofj) != 2) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: tensor '%s': header entry needs dtype, shape and data_offsets [begin, end]", p, x->name);
      break;
    }
    const char *twice = repeated_field(it);
    if (twice) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: tensor '%s': header entry gives '%s' twice", p, x->name,
                twice);
      break;
    }
    x->dtype = dtj->valuestring;
    const int esize = dtype_size(x->dtype, &x->dt);
    if (!esize) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: tensor '%s': unknown dtype '%s'", p, x->name, x->dtype);
      break;
    }
    x->nd = cJSON_GetArraySize(shj);
    if (x->nd > 8) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: tensor '%s': rank %d", p, x->name, x->nd);
      break;
    }
    uint64_t count = 1;
    int ok = 1;
    for (int d = 0; d < x->nd && ok; d++) {
      uint64_t u;
      ok = json_u64(cJSON_GetArrayItem(shj, d), &u) && u <= INT64_MAX && !__builtin_mul_overflow(count, u, &count);
      if (ok) x->shape[d] = (int64_t)u;
    }
    if (!ok || __builtin_mul_overflow(count, (uint64_t)esize, &count)) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: tensor '%s': bad shape", p, x->name);
      break;
    }
    if (!json_u64(cJSON_GetArrayItem(ofj, 0), &x->begin) || !json_u64(cJSON_GetArrayItem(ofj, 1), &x->end) ||
        x->begin > x->end || x->end > dsize) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: tensor '%s': data_offsets out of range (the data section is %" PRIu64 " bytes)", p, x->name,
                dsize);
      break;
    }
    if (x->end - x->begin != count) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: tensor '%s': its shape and dtype make %" PRIu64 " bytes but data_offsets span %" PRIu64, p,
                x->name, count, x->end - x->begin);
      break;
    }
    order[ne] = byname[ne] = x;
    ne++;
  }
  if (st) goto done;
  qsort(byname, (size_t)ne, sizeof *byname, cmp_name);
  for (int i = 0; i + 1 < ne; i++)
    if (!cmp_name(&byname[i], &byname[i + 1])) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: tensor '%s' appears twice%s", p,
                strip_prefix(byname[i]->name), strcmp(byname[i]->name, byname[i + 1]->name) ?
                " (with and without the 'transformer.' prefix)" : "");
      goto done;
    }
  qsort(order, (size_t)ne, sizeof *order, cmp_begin);
  for (int i = 0, last = -1; i < ne; i++) { /* last: the nonempty tensor ending furthest so far */
    if (order[i]->end == order[i]->begin) continue;
    if (last >= 0 && order[last]->end > order[i]->begin) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: tensors '%s' and '%s' overlap in the data section", p,
                order[last]->name, order[i]->name);
      goto done;
    }
    if (last < 0 || order[i]->end > order[last]->end) last = i;
  }
  /* The configuration, from the shapes. */
  st_entry *wte = find_entry(byname, ne, "wte.weight"), *wpe = find_entry(byname, ne, "wpe.weight");
  if (!wte || !wpe) {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: missing tensor '%s': not a GPT-2 checkpoint", p,
              !wte ? "wte.weight" : "wpe.weight");
    goto done;
  }
  if (wte->nd != 2 || wpe->nd != 2 || wte->shape[1] != wpe->shape[1] || wte->shape[0] <= 0 || wpe->shape[0] <= 0 ||
      wte->shape[1] <= 0 || wte->shape[0] > INT32_MAX || wpe->shape[0] > INT32_MAX || wte->shape[1] > (1 << 26)) {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
              "%s: wte.weight and wpe.weight must be [V, C] and [maxT, C] with the same C > 0", p);
    goto done;
  }
  weft_gpt_io_config c = {.V = (int)wte->shape[0], .C = (int)wte->shape[1], .maxT = (int)wpe->shape[0]};
  char nm[64];
  while (c.L < 100000) {
    snprintf(nm, sizeof nm, "h.%d.ln_1.weight", c.L);
    if (!find_entry(byname, ne, nm)) break;
    c.L++;
  }
  if (c.L == 0) {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: missing tensor 'h.0.ln_1.weight': no layers", p);
    goto done;
  }
  int nh;
  st = read_hf_config(p, &c, &nh, err, errlen);
  if (st) goto done;
  c.NH = nh ? nh : cfg->NH > 0 ? cfg->NH : c.C / 64;
  if (c.NH <= 0 || c.C % c.NH != 0) {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
              "%s: the number of heads is not in the file and %d does not divide C=%d: give it (config.json n_head, "
              "or the NH hint)", p, c.NH, c.C);
    goto done;
  }
  size_t sizes[WEFT_GPT_NTENSORS], total;
  weft_status zs = weft_gpt_io_sizes(&c, sizes, &total);
  if (zs) {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: %s", p, shape_problem(zs));
    goto done;
  }
  /* Every tensor present with its shape before anything is allocated. */
  for (int t = 0; t < WEFT_GPT_NTENSORS; t++) {
    int64_t r, k;
    int pl;
    tensor_dims(&c, t, &r, &k, &pl);
    for (int l = 0; l < (pl ? c.L : 1); l++) {
      snprintf(nm, sizeof nm, hf_names[t], l);
      st_entry *x = find_entry(byname, ne, nm);
      if (!x) {
        st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: missing tensor '%s'", p, nm);
        goto done;
      }
      const int mat = is_matrix(t);
      const int64_t d0 = hf_transposed(t) ? k : r, d1 = hf_transposed(t) ? r : k;
      if (x->nd != (mat ? 2 : 1) || x->shape[0] != (mat ? d0 : k) || (mat && x->shape[1] != d1)) {
        char want[64];
        if (mat) snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "]", d0, d1);
        else snprintf(want, sizeof want, "[%" PRId64 "]", k);
        st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                  "%s: tensor '%s' has rank %d and first dimension %" PRId64 "; the model (L=%d C=%d V=%d maxT=%d) "
                  "needs %s", p, nm, x->nd, x->nd ? x->shape[0] : 0, c.L, c.C, c.V, c.maxT, want);
        goto done;
      }
      if (x->dt < 0) {
        st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: tensor '%s': dtype %s is not F32, F16 or BF16", p, nm,
                  x->dtype);
        goto done;
      }
      x->used = 1;
    }
  }
  for (int i = 0; i < ne; i++)
    if (!e[i].used && !ignorable(e[i].name)) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: unexpected tensor '%s' (not part of a %d-layer GPT-2)", p, e[i].name, c.L);
      goto done;
    }
  /* The tensors cover the data section end to end, as the format's own reader requires: bytes that belong to
   * no tensor mean the header does not describe the file. (Overlaps of nonempty tensors were refused above.) */
  uint64_t at = 0;
  for (int i = 0; i < ne; i++) {
    if (order[i]->begin > at) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: bytes %" PRIu64 " to %" PRIu64 " of the data section belong to no tensor (a gap before '%s')", p,
                at, order[i]->begin, order[i]->name);
      goto done;
    }
    if (order[i]->begin < at) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
                "%s: tensor '%s' is placed at byte %" PRIu64 ", inside the bytes of the tensors before it (up to %" PRIu64 ")",
                p, order[i]->name, order[i]->begin, at);
      goto done;
    }
    at = order[i]->end;
  }
  if (at != dsize) {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
              "%s: the data section is %" PRIu64 " bytes but its tensors end at byte %" PRIu64 " (trailing bytes)", p,
              dsize, at);
    goto done;
  }
  buf = malloc(total * sizeof(float));
  if (!buf) {
    st = fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu parameters", p, total);
    goto done;
  }
  float *dst = buf;
  for (int t = 0; t < WEFT_GPT_NTENSORS && !st; t++) {
    int64_t r, k;
    int pl;
    tensor_dims(&c, t, &r, &k, &pl);
    const size_t n = (size_t)r * (size_t)k;
    float *tmp = NULL;
    if (hf_transposed(t) && !(tmp = malloc(n * sizeof(float)))) {
      st = fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    for (int l = 0; l < (pl ? c.L : 1) && !st; l++, dst += n) {
      snprintf(nm, sizeof nm, hf_names[t], l);
      const st_entry *x = find_entry(byname, ne, nm);
      st = read_elems(rf, data0 + x->begin, tmp ? tmp : dst, n, x->dt, err, errlen);
      if (!st && tmp) /* stored [k, r] (in, out): dst[i, kk] = tmp[kk, i] */
        for (int64_t i = 0; i < r; i++)
          for (int64_t kk = 0; kk < k; kk++) dst[i * k + kk] = tmp[kk * r + i];
    }
    free(tmp);
  }
  if (st) goto done;
  *cfg = c;
  *params = buf;
  *nparams = total;
  buf = NULL;
done:
  free(buf);
  free(byname);
  free(order);
  free(e);
  cJSON_Delete(j);
  return st;
}

weft_status weft_gpt_load_ex(const char *path, weft_gpt_io_config *cfg, float **params, size_t *nparams,
                             weft_gpt_format *format, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!path || !cfg || !params || !nparams)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "weft_gpt_load: path, cfg, params and nparams are needed");
  if (!host_little_endian())
    return fail(err, errlen, WEFT_ERR_UNSUPPORTED, "weft_gpt_load: both formats are little-endian; this host is not");
  rfile rf;
  weft_status st = rf_open(&rf, path, err, errlen);
  if (st) return st;
  unsigned char head[9] = {0};
  if (fseeko(rf.f, 0, SEEK_SET) != 0 || fread(head, 1, rf.size < 9 ? (size_t)rf.size : 9, rf.f) != (rf.size < 9 ? rf.size : 9)) {
    fclose(rf.f);
    return fail(err, errlen, WEFT_ERR_IO, "%s: cannot read its first bytes", path);
  }
  int32_t magic;
  memcpy(&magic, head, 4);
  if (rf.size >= 4 && magic == LLMC_MAGIC) {
    st = load_llmc(&rf, cfg, params, nparams, err, errlen);
    if (!st && format) *format = WEFT_GPT_FORMAT_LLMC;
  } else if (rf.size >= 9 && head[8] == '{') {
    st = load_safetensors(&rf, cfg, params, nparams, err, errlen);
    if (!st && format) *format = WEFT_GPT_FORMAT_SAFETENSORS;
  } else {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT,
              "%s: neither an llm.c checkpoint (int32 magic %d first) nor a safetensors file (8-byte header length, "
              "then '{'): %" PRIu64 " bytes", path, LLMC_MAGIC, rf.size);
  }
  fclose(rf.f);
  return st;
}

weft_status weft_gpt_load(const char *path, weft_gpt_io_config *cfg, float **params, size_t *nparams, char *err,
                          size_t errlen) {
  return weft_gpt_load_ex(path, cfg, params, nparams, NULL, err, errlen);
}

/* ------------------------------------------------------------------------------------------ writers */

static weft_status write_all(FILE *f, const char *path, const void *p, size_t n, char *err, size_t errlen) {
  if (n && fwrite(p, 1, n, f) != n)
    return fail(err, errlen, WEFT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  return WEFT_OK;
}

static weft_status close_file(FILE *f, const char *path, weft_status st, char *err, size_t errlen) {
  if (fclose(f) != 0 && !st) st = fail(err, errlen, WEFT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  return st;
}

static weft_status check_save_args(const char *path, const weft_gpt_io_config *cfg, const float *params,
                                   size_t sizes[WEFT_GPT_NTENSORS], size_t *total, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!path || !cfg || !params) return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "path, cfg and params are needed");
  if (!host_little_endian())
    return fail(err, errlen, WEFT_ERR_UNSUPPORTED, "both formats are little-endian; this host is not");
  weft_status st = weft_gpt_io_sizes(cfg, sizes, total);
  if (st)
    return fail(err, errlen, st, "bad configuration L=%d C=%d NH=%d V=%d maxT=%d: %s", cfg->L, cfg->C, cfg->NH,
                cfg->V, cfg->maxT, shape_problem(st));
  return WEFT_OK;
}

weft_status weft_gpt_save_llmc(const char *path, const weft_gpt_io_config *cfg, const float *params, int Vp,
                               char *err, size_t errlen) {
  size_t sizes[WEFT_GPT_NTENSORS], total;
  weft_status st = check_save_args(path, cfg, params, sizes, &total, err, errlen);
  if (st) return st;
  if (Vp == 0) Vp = cfg->V > INT32_MAX - 127 ? cfg->V : (cfg->V + 127) / 128 * 128;
  if (Vp < cfg->V) return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "Vp %d is less than V %d", Vp, cfg->V);
  int32_t h[LLMC_HEADER_INTS] = {0};
  h[0] = LLMC_MAGIC, h[1] = 3, h[2] = cfg->maxT, h[3] = cfg->V, h[4] = cfg->L, h[5] = cfg->NH, h[6] = cfg->C,
  h[7] = Vp;
  FILE *f = fopen(path, "wb");
  if (!f) return fail(err, errlen, WEFT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  st = write_all(f, path, h, sizeof h, err, errlen);
  const size_t wte = sizes[WEFT_GPT_T_WTE];
  if (!st) st = write_all(f, path, params, wte * sizeof(float), err, errlen);
  const float zero[64] = {0};
  for (size_t left = (size_t)(Vp - cfg->V) * (size_t)cfg->C; !st && left;) {
    const size_t k = left < 64 ? left : 64;
    st = write_all(f, path, zero, k * sizeof(float), err, errlen);
    left -= k;
  }
  if (!st) st = write_all(f, path, params + wte, (total - wte) * sizeof(float), err, errlen);
  return close_file(f, path, st, err, errlen);
}

weft_status weft_gpt_save_safetensors(const char *path, const weft_gpt_io_config *cfg, const float *params,
                                      int write_config, char *err, size_t errlen) {
  size_t sizes[WEFT_GPT_NTENSORS], total;
  weft_status st = check_save_args(path, cfg, params, sizes, &total, err, errlen);
  if (st) return st;
  cJSON *j = cJSON_CreateObject();
  cJSON *meta = cJSON_AddObjectToObject(j, "__metadata__");
  if (meta) cJSON_AddStringToObject(meta, "format", "pt");
  char nm[64];
  uint64_t off = 0;
  for (int t = 0; t < WEFT_GPT_NTENSORS; t++) {
    int64_t r, k;
    int pl;
    tensor_dims(cfg, t, &r, &k, &pl);
    const uint64_t bytes = (uint64_t)r * (uint64_t)k * 4;
    for (int l = 0; l < (pl ? cfg->L : 1); l++) {
      snprintf(nm, sizeof nm, hf_names[t], l);
      cJSON *x = cJSON_AddObjectToObject(j, nm);
      if (!x) continue;
      cJSON_AddStringToObject(x, "dtype", "F32");
      cJSON *sh = cJSON_AddArrayToObject(x, "shape"), *of = cJSON_AddArrayToObject(x, "data_offsets");
      if (is_matrix(t)) {
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)(hf_transposed(t) ? k : r)));
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)(hf_transposed(t) ? r : k)));
      } else {
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)k));
      }
      cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
      cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + bytes)));
      off += bytes;
    }
  }
  char *txt = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!txt) return fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory for the safetensors header");
  const size_t tl = strlen(txt), hl = (tl + 7) / 8 * 8;
  unsigned char lb[8];
  for (int i = 0; i < 8; i++) lb[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  FILE *f = fopen(path, "wb");
  if (!f) {
    free(txt);
    return fail(err, errlen, WEFT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  }
  st = write_all(f, path, lb, 8, err, errlen);
  if (!st) st = write_all(f, path, txt, tl, err, errlen);
  if (!st) st = write_all(f, path, "        ", hl - tl, err, errlen);
  free(txt);
  const float *src = params;
  for (int t = 0; t < WEFT_GPT_NTENSORS && !st; t++) {
    int64_t r, k;
    int pl;
    tensor_dims(cfg, t, &r, &k, &pl);
    const size_t n = (size_t)r * (size_t)k;
    float *tmp = NULL;
    if (hf_transposed(t) && !(tmp = malloc(n * sizeof(float)))) {
      st = fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    for (int l = 0; l < (pl ? cfg->L : 1) && !st; l++, src += n) {
      if (tmp)
        for (int64_t i = 0; i < r; i++)
          for (int64_t kk = 0; kk < k; kk++) tmp[kk * r + i] = src[i * k + kk];
      st = write_all(f, path, tmp ? tmp : src, n * sizeof(float), err, errlen);
    }
    free(tmp);
  }
  st = close_file(f, path, st, err, errlen);
  if (st || !write_config) return st;
  const char *slash = strrchr(path, '/');
  const size_t dl = slash ? (size_t)(slash - path + 1) : 0;
  char *cp = malloc(dl + sizeof "config.json");
  if (!cp) return fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
  memcpy(cp, path, dl);
  memcpy(cp + dl, "config.json", sizeof "config.json");
  f = fopen(cp, "wb");
  if (!f) {
    st = fail(err, errlen, WEFT_ERR_IO, "%s: cannot create: %s", cp, strerror(errno));
  } else {
    if (fprintf(f,
                "{\n  \"model_type\": \"gpt2\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"n_layer\": %d,\n"
                "  \"n_embd\": %d,\n  \"n_head\": %d,\n  \"vocab_size\": %d,\n  \"n_positions\": %d,\n"
                "  \"n_ctx\": %d,\n  \"layer_norm_epsilon\": 1e-05,\n  \"activation_function\": \"gelu_new\"\n}\n",
                cfg->L, cfg->C, cfg->NH, cfg->V, cfg->maxT, cfg->maxT) < 0)
      st = fail(err, errlen, WEFT_ERR_IO, "%s: write failed", cp);
    st = close_file(f, cp, st, err, errlen);
  }
  free(cp);
  return st;
}
