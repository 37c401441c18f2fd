/* bpe.c - GPT-2's byte-level BPE (bpe.h): the tables from encoder.json and vocab.bpe, the pre-tokenizer
 * written out as a scanner, and the merge loop of GPT-2's encoder.py (lowest-ranked adjacent pair first,
 * every non-overlapping occurrence of it merged left to right, until no ranked pair is left). */
#include "gpt/bpe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE_BYTES (64u << 20)

typedef struct {
  uint64_t key; /* (a << 32 | b) + 1; 0 = empty */
  int32_t rank, merged;
} pair_slot;

struct weft_bpe {
  int32_t n;                   /* tokens */
  unsigned char **tok;         /* tok[id]: bytes */
  size_t *tlen;                /* their lengths */
  int32_t *slots;              /* bytes -> id hash table (id + 1; 0 empty) */
  size_t nslots;               /* a power of two */
  pair_slot *pairs;            /* (a, b) -> rank, merged id */
  size_t npairs;               /* a power of two */
  int32_t byte_id[256];        /* the token of each single byte */
};

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

static uint64_t fnv(const unsigned char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

static int32_t lookup(const weft_bpe *b, const unsigned char *s, size_t n) {
  for (size_t i = fnv(s, n) & (b->nslots - 1);; i = (i + 1) & (b->nslots - 1)) {
    const int32_t v = b->slots[i];
    if (!v) return -1;
    if (b->tlen[v - 1] == n && !memcmp(b->tok[v - 1], s, n)) return v - 1;
  }
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33;
  return x;
}

static const pair_slot *pair_find(const weft_bpe *b, int32_t a, int32_t c) {
  const uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)c) + 1;
  for (size_t i = mix(key) & (b->npairs - 1);; i = (i + 1) & (b->npairs - 1)) {
    if (!b->pairs[i].key) return NULL;
    if (b->pairs[i].key == key) return &b->pairs[i];
  }
}

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to 256 + k in byte order.
 * Inverse: code point -> byte, -1 for a code point outside the mapping. */
static void unicode_to_byte(int16_t inv[324]) {
  for (int i = 0; i < 324; i++) inv[i] = -1;
  int k = 0;
  for (int b = 0; b < 256; b++) {
    const int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    inv[printable ? b : 256 + k++] = (int16_t)b;
  }
}

/* Decodes one UTF-8 sequence at s[0..n); returns its length (1 for an invalid byte, *cp = -1). */
static size_t utf8_next(const unsigned char *s, size_t n, int32_t *cp) {
  const unsigned c = s[0];
  size_t len;
  int32_t v, min;
  if (c < 0x80) {
    *cp = (int32_t)c;
    return 1;
  } else if ((c & 0xe0) == 0xc0) len = 2, v = c & 0x1f, min = 0x80;
  else if ((c & 0xf0) == 0xe0) len = 3, v = c & 0x0f, min = 0x800;
  else if ((c & 0xf8) == 0xf0) len = 4, v = c & 0x07, min = 0x10000;
  else {
    *cp = -1;
    return 1;
  }
  if (len > n) {
    *cp = -1;
    return 1;
  }
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) {
      *cp = -1;
      return 1;
    }
    v = v << 6 | (s[i] & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
    *cp = -1;
    return 1;
  }
  *cp = v;
  return len;
}

/* Token strings of encoder.json / vocab.bpe (byte-to-unicode text, UTF-8) to raw bytes; -1 when malformed. */
static long to_bytes(const int16_t inv[324], const char *s, size_t n, unsigned char *out) {
  long k = 0;
  for (size_t i = 0; i < n;) {
    int32_t cp;
    i += utf8_next((const unsigned char *)s + i, n - i, &cp);
    if (cp < 0 || cp >= 324 || inv[cp] < 0) return -1;
    out[k++] = (unsigned char)inv[cp];
  }
  return k;
}

static char *read_text(const char *path, size_t *n, char *err, size_t errlen, weft_status *st) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    *st = fail(err, errlen, WEFT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  /* grown as the file is read, so the buffer is at most twice the file (not 64 MB for every file) */
  char *buf = NULL;
  size_t cap = 0;
  *n = 0;
  while (*n <= MAX_FILE_BYTES && !feof(f) && !ferror(f)) {
    if (*n == cap) {
      cap = cap ? (cap > MAX_FILE_BYTES / 2 ? MAX_FILE_BYTES + 1 : 2 * cap) : 1u << 16;
      char *g = realloc(buf, cap + 1);
      if (!g) {
        free(buf);
        fclose(f);
        *st = fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
        return NULL;
      }
      buf = g;
    }
    *n += fread(buf + *n, 1, cap - *n, f);
  }
  const int bad = ferror(f);
  fclose(f);
  if (bad || *n > MAX_FILE_BYTES) {
    free(buf);
    *st = bad ? fail(err, errlen, WEFT_ERR_IO, "%s: read failed", path)
              : fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: larger than 64 MB", path);
    return NULL;
  }
  buf[*n] = '\0';
  *st = WEFT_OK;
  return buf;
}

static size_t pow2_above(size_t n) {
  size_t p = 16;
  while (p < 2 * n) p <<= 1;
  return p;
}

void weft_bpe_free(weft_bpe *b) {
  if (!b) return;
  if (b->tok)
    for (int32_t i = 0; i < b->n; i++) free(b->tok[i]);
  free(b->tok);
  free(b->tlen);
  free(b->slots);
  free(b->pairs);
  free(b);
}

weft_status weft_bpe_load(const char *encoder_json, const char *vocab_bpe, weft_bpe **out, char *err,
                          size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!encoder_json || !vocab_bpe || !out)
    return fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "weft_bpe_load: both paths and out are needed");
  *out = NULL;
  int16_t inv[324];
  unicode_to_byte(inv);
  weft_status st;
  size_t n;
  char *txt = read_text(encoder_json, &n, err, errlen, &st);
  if (!txt) return st;
  cJSON *j = cJSON_ParseWithLength(txt, n);
  free(txt);
  weft_bpe *b = calloc(1, sizeof *b);
  unsigned char *tmp = NULL;
  if (!b) {
    cJSON_Delete(j);
    return fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (!j || !cJSON_IsObject(j) || cJSON_GetArraySize(j) < 256) {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: not a JSON object of at least 256 tokens", encoder_json);
    goto fail;
  }
  b->n = cJSON_GetArraySize(j);
  b->tok = calloc((size_t)b->n, sizeof *b->tok);
  b->tlen = calloc((size_t)b->n, sizeof *b->tlen);
  b->nslots = pow2_above((size_t)b->n);
  b->slots = calloc(b->nslots, sizeof *b->slots);
  if (!b->tok || !b->tlen || !b->slots) {
    st = fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  for (const cJSON *it = j->child; it; it = it->next) {
    if (!cJSON_IsNumber(it)) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: token '%s' has an id that is not a number (ids are 0..%d)",
                encoder_json, it->string, b->n - 1);
      goto fail;
    }
    const double d = it->valuedouble;
    if (!(d >= 0 && d < b->n && d == (double)(int32_t)d)) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: token '%s' has id %g, not in 0..%d", encoder_json,
                it->string, d, b->n - 1);
      goto fail;
    }
    const int32_t id = (int32_t)d;
    const size_t sl = strlen(it->string);
    if (b->tok[id]) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: id %d given twice", encoder_json, id);
      goto fail;
    }
    b->tok[id] = malloc(sl + 1);
    if (!b->tok[id]) {
      st = fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
      goto fail;
    }
    long k = to_bytes(inv, it->string, sl, b->tok[id]);
    if (k < 0) {
      /* special tokens such as <|endoftext|> are plain printable text and map; anything else is refused */
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: token '%s' is not in GPT-2's byte alphabet",
                encoder_json, it->string);
      goto fail;
    }
    b->tlen[id] = (size_t)k;
  }
  for (int32_t id = 0; id < b->n; id++) {
    if (!b->tok[id]) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: no token has id %d (ids must be 0..%d)", encoder_json,
                id, b->n - 1);
      goto fail;
    }
    if (lookup(b, b->tok[id], b->tlen[id]) >= 0) continue; /* a duplicate string: keep the first id */
    for (size_t i = fnv(b->tok[id], b->tlen[id]) & (b->nslots - 1);; i = (i + 1) & (b->nslots - 1))
      if (!b->slots[i]) {
        b->slots[i] = id + 1;
        break;
      }
  }
  for (int c = 0; c < 256; c++) {
    const unsigned char byte = (unsigned char)c;
    if ((b->byte_id[c] = lookup(b, &byte, 1)) < 0) {
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: byte 0x%02x has no token", encoder_json, c);
      goto fail;
    }
  }
  cJSON_Delete(j);
  j = NULL;

  /* vocab.bpe: "#version" line, then "A B" per line, rank = line order. */
  txt = read_text(vocab_bpe, &n, err, errlen, &st);
  if (!txt) goto fail;
  size_t lines = 0;
  for (size_t i = 0; i < n; i++) lines += txt[i] == '\n';
  b->npairs = pow2_above(lines + 1);
  b->pairs = calloc(b->npairs, sizeof *b->pairs);
  tmp = malloc(n + 1);
  if (!b->pairs || !tmp) {
    free(txt);
    st = fail(err, errlen, WEFT_ERR_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  int32_t rank = 0;
  size_t lineno = 0;
  for (char *line = txt; line < txt + n; lineno++) {
    char *nl = memchr(line, '\n', (size_t)(txt + n - line));
    char *end = nl ? nl : txt + n;
    char *next = nl ? nl + 1 : txt + n;
    if (end > line && end[-1] == '\r') end--;
    if (end == line || (lineno == 0 && !strncmp(line, "#version", 8))) {
      line = next;
      continue;
    }
    char *sp = memchr(line, ' ', (size_t)(end - line));
    long la, lb;
    if (!sp || (la = to_bytes(inv, line, (size_t)(sp - line), tmp)) <= 0 ||
        (lb = to_bytes(inv, sp + 1, (size_t)(end - sp - 1), tmp + la)) <= 0) {
      free(txt);
      st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s:%zu: not a merge 'A B' of GPT-2 byte symbols", vocab_bpe,
                lineno + 1);
      goto fail;
    }
    const int32_t a = lookup(b, tmp, (size_t)la), c = lookup(b, tmp + la, (size_t)lb),
                  m = lookup(b, tmp, (size_t)(la + lb));
    if (a >= 0 && c >= 0 && m >= 0 && !pair_find(b, a, c)) {
      const uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)c) + 1;
      for (size_t i = mix(key) & (b->npairs - 1);; i = (i + 1) & (b->npairs - 1))
        if (!b->pairs[i].key) {
          b->pairs[i] = (pair_slot){key, rank, m};
          break;
        }
    }
    rank++;
    line = next;
  }
  free(txt);
  free(tmp);
  if (rank == 0) {
    st = fail(err, errlen, WEFT_ERR_INVALID_ARGUMENT, "%s: no merges", vocab_bpe);
    tmp = NULL;
    goto fail;
  }
  *out = b;
  return WEFT_OK;
fail:
  free(tmp);
  cJSON_Delete(j);
  weft_bpe_free(b);
  return st;
}

int32_t weft_bpe_vocab_size(const weft_bpe *b) { return b ? b->n : 0; }

const unsigned char *weft_bpe_token_bytes(const weft_bpe *b, int32_t id, size_t *len) {
  if (!b || id < 0 || id >= b->n) return NULL;
  if (len) *len = b->tlen[id];
  return b->tok[id];
}

/* ---------------------------------------------------------------------------------- the pre-tokenizer */

enum { CL_L, CL_N, CL_S, CL_O };

static int in(int32_t c, int32_t lo, int32_t hi) { return c >= lo && c <= hi; }

static int cls(int32_t c) {
  if (c < 0) return CL_O; /* a byte that is not UTF-8 */
  if (c < 128) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CL_L;
    if (c >= '0' && c <= '9') return CL_N;
    if (c == ' ' || (c >= 9 && c <= 13)) return CL_S;
    return CL_O;
  }
  /* JavaScript's \s */
  if (c == 0xa0 || c == 0x1680 || in(c, 0x2000, 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
      c == 0x205f || c == 0x3000 || c == 0xfeff)
    return CL_S;
  /* numbers (Nd, Nl, No) of the common blocks */
  static const int32_t num[][2] = {
      {0xb2, 0xb3},       {0xb9, 0xb9},       {0xbc, 0xbe},       {0x660, 0x669},     {0x6f0, 0x6f9},
      {0x7c0, 0x7c9},     {0x966, 0x96f},     {0x9e6, 0x9ef},     {0xa66, 0xa6f},     {0xae6, 0xaef},
      {0xb66, 0xb6f},     {0xbe6, 0xbf2},     {0xc66, 0xc6f},     {0xce6, 0xcef},     {0xd66, 0xd6f},
      {0xe50, 0xe59},     {0xed0, 0xed9},     {0xf20, 0xf33},     {0x1040, 0x1049},   {0x17e0, 0x17e9},
      {0x1810, 0x1819},   {0x2070, 0x2070},   {0x2074, 0x2079},   {0x2080, 0x2089},   {0x2150, 0x2182},
      {0x2185, 0x2189},   {0x2460, 0x249b},   {0x24ea, 0x24ff},   {0x2776, 0x2793},   {0x3007, 0x3007},
      {0x3021, 0x3029},   {0x3038, 0x303a},   {0x3192, 0x3195},   {0x3220, 0x3229},   {0x3248, 0x324f},
      {0x3251, 0x325f},   {0x3280, 0x3289},   {0x32b1, 0x32bf},   {0xff10, 0xff19},   {0x1d7ce, 0x1d7ff},
      {0x1f100, 0x1f10c}};
  for (size_t i = 0; i < sizeof num / sizeof num[0]; i++)
    if (in(c, num[i][0], num[i][1])) return CL_N;
  /* Latin-1: punctuation and symbols, except the letters ª µ º */
  if (c < 0x100) return (in(c, 0xa1, 0xbf) && c != 0xaa && c != 0xb5 && c != 0xba) || c == 0xd7 || c == 0xf7 ||
                                in(c, 0x80, 0x9f)
                            ? CL_O
                            : CL_L;
  /* neither letters nor numbers: marks, punctuation, symbols, emoji, controls, private use */
  static const int32_t other[][2] = {
      {0x2c2, 0x2c5},     {0x2d2, 0x2df},     {0x2e5, 0x2eb},     {0x2ed, 0x2ed},     {0x2ef, 0x36f},
      {0x375, 0x375},     {0x37e, 0x37e},     {0x384, 0x385},     {0x387, 0x387},     {0x3f6, 0x3f6},
      {0x482, 0x489},     {0x55a, 0x55f},     {0x589, 0x58a},     {0x591, 0x5c7},     {0x5f3, 0x5f4},
      {0x600, 0x61f},     {0x64b, 0x65f},     {0x66a, 0x66d},     {0x670, 0x670},     {0x6d4, 0x6d4},
      {0x6d6, 0x6ed},     {0x900, 0x903},     {0x93a, 0x93c},     {0x93e, 0x94f},     {0x951, 0x957},
      {0x962, 0x965},     {0x970, 0x970},     {0xe31, 0xe31},     {0xe34, 0xe3f},     {0xe47, 0xe4f},
      {0x2010, 0x205e},   {0x2060, 0x206f},   {0x207a, 0x207e},   {0x208a, 0x208e},   {0x20a0, 0x20ff},
      {0x2100, 0x2101},   {0x2103, 0x2106},   {0x2108, 0x2109},   {0x2114, 0x2114},   {0x2116, 0x2118},
      {0x211e, 0x2123},   {0x2125, 0x2125},   {0x2127, 0x2127},   {0x2129, 0x2129},   {0x212e, 0x212e},
      {0x213a, 0x213b},   {0x2140, 0x2144},   {0x214a, 0x214d},   {0x214f, 0x214f},   {0x2190, 0x245f},
      {0x249c, 0x24e9},   {0x2500, 0x2775},   {0x2794, 0x2bff},   {0x2ce5, 0x2cea},   {0x2e00, 0x2e7f},
      {0x2e80, 0x2fff},   {0x3001, 0x3004},   {0x3008, 0x3020},   {0x302a, 0x3030},   {0x3036, 0x3037},
      {0x303d, 0x303f},   {0x3099, 0x309c},   {0x30a0, 0x30a0},   {0x30fb, 0x30fb},   {0x3200, 0x321e},
      {0x322a, 0x3247},   {0x3250, 0x3250},   {0x3260, 0x327f},   {0x328a, 0x32b0},   {0x32c0, 0x33ff},
      {0x4dc0, 0x4dff},   {0xd800, 0xf8ff},   {0xfd3e, 0xfd3f},   {0xfe00, 0xfe6f},   {0xff01, 0xff0f},
      {0xff1a, 0xff20},   {0xff3b, 0xff40},   {0xff5b, 0xff65},   {0xffe0, 0xffff},   {0x1d100, 0x1d1ff},
      {0x1f000, 0x1faff}, {0xe0000, 0xe007f}, {0xf0000, 0x10ffff}};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    if (in(c, other[i][0], other[i][1])) return CL_O;
  return CL_L;
}

/* A long word's merges with a heap, in O(n log n): the lowest (rank, position) first. Equivalent to the
 * pass-by-pass loop below because every occurrence of one pair has the same rank, taken left to right, and
 * a pair made by a merge ranks after the merge that made it (vocab.bpe lists merges in the order learned). */
typedef struct {
  int32_t rank, pos;
} hent;

static int hless(hent a, hent b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void hpush(hent *h, size_t *hn, hent e) {
  size_t i = (*hn)++;
  while (i && hless(e, h[(i - 1) / 2])) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
  h[i] = e;
}

static hent hpop(hent *h, size_t *hn) {
  const hent top = h[0], e = h[--*hn];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *hn) break;
    if (c + 1 < *hn && hless(h[c + 1], h[c])) c++;
    if (!hless(h[c], e)) break;
    h[i] = h[c], i = c;
  }
  if (*hn) h[i] = e;
  return top;
}

static size_t merge_long(const weft_bpe *b, int32_t *w, size_t n, int32_t *nxt, int32_t *prv, hent *h) {
  size_t hn = 0;
  for (size_t i = 0; i < n; i++) {
    nxt[i] = i + 1 < n ? (int32_t)(i + 1) : -1, prv[i] = (int32_t)i - 1;
    const pair_slot *p = i + 1 < n ? pair_find(b, w[i], w[i + 1]) : NULL;
    if (p) hpush(h, &hn, (hent){p->rank, (int32_t)i});
  }
  while (hn) {
    const hent e = hpop(h, &hn);
    const int32_t i = e.pos, j = nxt[i];
    if (w[i] < 0 || j < 0) continue;
    const pair_slot *p = pair_find(b, w[i], w[j]);
    if (!p || p->rank != e.rank) continue; /* stale: a neighbour merged since */
    w[i] = p->merged;
    w[j] = -1;
    nxt[i] = nxt[j];
    if (nxt[j] >= 0) prv[nxt[j]] = i;
    const pair_slot *q;
    if (prv[i] >= 0 && (q = pair_find(b, w[prv[i]], w[i]))) hpush(h, &hn, (hent){q->rank, prv[i]});
    if (nxt[i] >= 0 && (q = pair_find(b, w[i], w[nxt[i]]))) hpush(h, &hn, (hent){q->rank, i});
  }
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (w[i] >= 0) w[m++] = w[i];
  return m;
}

enum { LONG_WORD = 64 };

/* BPE of one pre-token's bytes; appends ids to *out (growing it). w holds n ids of scratch. */
static weft_status bpe_word(const weft_bpe *b, const unsigned char *s, size_t n, int32_t **out, size_t *nout,
                            size_t *cap, int32_t *w) {
  size_t m = n;
  for (size_t i = 0; i < n; i++) w[i] = b->byte_id[s[i]];
  if (n > LONG_WORD) {
    int32_t *nx = malloc(2 * n * sizeof(int32_t));
    hent *h = malloc(3 * n * sizeof(hent));
    if (!nx || !h) {
      free(nx);
      free(h);
      return WEFT_ERR_OUT_OF_MEMORY;
    }
    m = merge_long(b, w, n, nx, nx + n, h);
    free(nx);
    free(h);
  }
  while (m > 1) {
    int32_t best = INT32_MAX;
    int32_t fa = -1, fb = -1, merged = -1;
    for (size_t i = 0; i + 1 < m; i++) {
      const pair_slot *p = pair_find(b, w[i], w[i + 1]);
      if (p && p->rank < best) best = p->rank, fa = w[i], fb = w[i + 1], merged = p->merged;
    }
    if (merged < 0) break;
    size_t k = 0;
    for (size_t i = 0; i < m;) {
      if (i + 1 < m && w[i] == fa && w[i + 1] == fb) {
        w[k++] = merged;
        i += 2;
      } else {
        w[k++] = w[i++];
      }
    }
    m = k;
  }
  if (*nout + m > *cap) {
    size_t nc = *cap ? *cap : 64;
    while (nc < *nout + m) nc *= 2;
    int32_t *g = realloc(*out, nc * sizeof(int32_t));
    if (!g) return WEFT_ERR_OUT_OF_MEMORY;
    *out = g, *cap = nc;
  }
  memcpy(*out + *nout, w, m * sizeof(int32_t));
  *nout += m;
  return WEFT_OK;
}

weft_status weft_bpe_encode(const weft_bpe *b, const char *text, size_t len, int32_t **tokens, size_t *ntokens) {
  if (!b || (!text && len) || !tokens || !ntokens) return WEFT_ERR_INVALID_ARGUMENT;
  *tokens = NULL;
  *ntokens = 0;
  if (len == 0) return WEFT_OK;
  const unsigned char *s = (const unsigned char *)text;
  /* code points: their byte offsets and classes */
  size_t *off = malloc((len + 1) * sizeof(size_t));
  unsigned char *cl = malloc(len + 1);
  int32_t *cps = malloc((len + 1) * sizeof(int32_t));
  int32_t *w = malloc(len * sizeof(int32_t));
  size_t cap = 0, np = 0;
  int32_t *out = NULL;
  weft_status st = WEFT_OK;
  if (!off || !cl || !cps || !w) {
    st = WEFT_ERR_OUT_OF_MEMORY;
    goto done;
  }
  for (size_t i = 0; i < len;) {
    off[np] = i;
    i += utf8_next(s + i, len - i, &cps[np]);
    cl[np] = (unsigned char)cls(cps[np]);
    np++;
  }
  off[np] = len;
  cl[np] = 255;
  cps[np] = 0;
  for (size_t i = 0; i < np && st == WEFT_OK;) {
    size_t j = i;
    /* 's|'t|'re|'ve|'m|'ll|'d */
    if (cps[i] == '\'') {
      const int32_t a = i + 1 < np ? cps[i + 1] : 0, c = i + 2 < np ? cps[i + 2] : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') j = i + 2;
      else if ((a == 'r' && c == 'e') || (a == 'v' && c == 'e') || (a == 'l' && c == 'l')) j = i + 3;
    }
    if (j == i) {
      const size_t k = (cps[i] == ' ' && i + 1 < np && cl[i + 1] != CL_S) ? i + 1 : i;
      if (cl[k] != CL_S) { /* ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` */
        j = k;
        while (j < np && cl[j] == cl[k]) j++;
      } else { /* `\s+(?!\S)|\s+` */
        j = i;
        while (j < np && cl[j] == CL_S) j++;
        if (j < np && j - i >= 2) j--; /* leave the last space to the next word */
      }
    }
    st = bpe_word(b, s + off[i], off[j] - off[i], &out, ntokens, &cap, w);
    i = j;
  }
done:
  free(off);
  free(cl);
  free(cps);
  free(w);
  if (st) {
    free(out);
    *ntokens = 0;
    return st;
  }
  *tokens = out;
  return WEFT_OK;
}

weft_status weft_bpe_decode(const weft_bpe *b, const int32_t *tokens, size_t n, char **text, size_t *len) {
  if (!b || (!tokens && n) || !text) return WEFT_ERR_INVALID_ARGUMENT;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (tokens[i] < 0 || tokens[i] >= b->n) return WEFT_ERR_INVALID_ARGUMENT;
    total += b->tlen[tokens[i]];
  }
  char *t = malloc(total + 1);
  if (!t) return WEFT_ERR_OUT_OF_MEMORY;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    memcpy(t + k, b->tok[tokens[i]], b->tlen[tokens[i]]);
    k += b->tlen[tokens[i]];
  }
  t[k] = '\0';
  *text = t;
  if (len) *len = k;
  return WEFT_OK;
}
