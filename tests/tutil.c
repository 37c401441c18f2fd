/* tutil.c - the shared test harness (see tutil.h). */
#include "tutil.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

long tu_checks, tu_failures;
static int tu_skipped;

void tu_skip(const char *fmt, ...) {
  tu_skipped = 1;
  printf("SKIP: ");
  va_list args;
  va_start(args, fmt);
  vprintf(fmt, args);
  va_end(args);
  printf("\n");
  fflush(stdout);
}

void tu_check_at(int ok, const char *file, int line, const char *fmt, ...) {
  tu_checks++;
  if (ok) return;
  tu_failures++;
  fprintf(stderr, "FAIL %s:%d: ", file, line);
  va_list args;
  va_start(args, fmt);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fputc('\n', stderr);
}

uint32_t tu_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

float tu_float(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

int tu_same_bits(float a, float b) {
  return tu_bits(a) == tu_bits(b);
}

uint64_t tu_rng_next(tu_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t tu_rng_int(tu_rng *r, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1;
  return lo + (int64_t)(tu_rng_next(r) % span);
}

float tu_rng_float(tu_rng *r, float lo, float hi) {
  /* 24 random bits give a float in [0,1) exactly; the affine map then rounds once per step. */
  float u = (float)(tu_rng_next(r) >> 40) * (1.0f / 16777216.0f);
  return lo + (hi - lo) * u;
}

uint64_t tu_seed(void) {
  const char *s = getenv("WEFT_TEST_SEED");
  if (s && *s) return strtoull(s, NULL, 0);
  return 20240611ull;
}

weft_fabric_desc tu_desc(void) {
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.calibration = WEFT_CALIBRATION_OFF;
  return d;
}

weft_status tu_open(const char *lanes, weft_fabric **out_fabric) {
  weft_fabric_desc d = tu_desc();
  d.lanes = lanes;
  return weft_fabric_open(&d, out_fabric);
}

void tu_require_lanes(weft_fabric *f, const char *filter) {
  for (const char *p = filter; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[64];
    snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
    int found = 0;
    for (size_t i = 0; i < weft_fabric_lane_count(f) && !found; i++) {
      weft_lane_info li;
      found = weft_fabric_lane_info(f, i, &li) == WEFT_OK && (strcmp(li.kind, item) == 0 || strcmp(li.name, item) == 0);
    }
    if (item[0] && !found) tu_skip("WEFT_TEST_LANES names '%s' and this fabric has no such lane", item);
    p = end ? end + 1 : p + len;
  }
}

int tu_contains(const char *haystack, const char *needle) {
  if (!haystack || !needle) return 0;
  size_t n = strlen(needle);
  for (const char *p = haystack; *p; p++) {
    size_t i = 0;
    while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return 1;
  }
  return n == 0;
}

double tu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tu_finish(const char *name, double start) {
  printf("%s: %ld checks, %ld failed (%.2f s)%s\n", name, tu_checks, tu_failures, tu_now() - start,
         tu_failures || !tu_skipped ? "" : ", skipped");
  if (tu_failures) return 1;
  if (tu_skipped) return TU_SKIP_EXIT;
  if (tu_checks == 0) {
    fprintf(stderr, "FAIL %s: made no checks at all, so it proved nothing\n", name);
    return 1;
  }
  return 0;
}

weft_status tu_fake_alloc(void *self, size_t bytes, void **out_buffer) {
  (void)self;
  *out_buffer = calloc(1, bytes);
  return *out_buffer ? WEFT_OK : WEFT_ERR_OUT_OF_MEMORY;
}

void tu_fake_free(void *self, void *buffer) {
  (void)self;
  free(buffer);
}

weft_status tu_fake_upload(void *self, void *buffer, size_t offset, const void *src, size_t bytes) {
  (void)self;
  memcpy((char *)buffer + offset, src, bytes);
  return WEFT_OK;
}

weft_status tu_fake_download(void *self, void *buffer, size_t offset, void *dst, size_t bytes) {
  (void)self;
  memcpy(dst, (const char *)buffer + offset, bytes);
  return WEFT_OK;
}
