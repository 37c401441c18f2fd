/* native_hash.c - the native side of the browser determinism check: runs the CPU lane's exact matmul on
 * the same generated inputs as web/bench/bench.js and prints, as one JSON object, the FNV-1a hash of each
 * result's float bits. The Bench page hashes its WebGPU and WebAssembly results the same way; the test
 * (bench_page.mjs) requires all three to agree.
 *
 * The generator and the hash are written identically in bench.js: change both or neither. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

/* Element i of operand `seed`: an integer hash of (seed, i) turned into one of 2^24 evenly spaced values
 * in [-2, 2). Every step is exact in float and double, so C and JavaScript produce the same floats. */
static uint32_t hash32(uint32_t seed, uint32_t i) {
  uint32_t x = seed * 0x9e3779b9u + i * 0x85ebca6bu;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

static float gen_value(uint32_t seed, uint32_t i) { return ((float)(hash32(seed, i) >> 8) * 0x1p-24f - 0.5f) * 4.0f; }

/* The edge-value operands: of every eight values about one is subnormal (or zero), one tiny, one huge
 * (products overflow to infinity, and infinities of both signs sum to NaN); the rest as gen_value. Every
 * third row of A and column of B is also scaled by 2^-66 (edge_matrix), so where they meet the products and
 * sums are subnormal: a GPU that flushes subnormals to zero would show there. All exact, as above. */
static float gen_edge(uint32_t seed, uint32_t i) {
  const uint32_t h = hash32(seed + 100u, i);
  const float v = gen_value(seed, i);
  switch (h & 7u) {
  case 0: return (float)((h >> 8) & 0x7fffffu) * 0x1p-149f;
  case 1: return v * 0x1p-60f;
  case 2: return v * 0x1p100f;
  default: return v;
  }
}

/* A rows x cols operand: seed 1 is A (rows scaled), seed 2 is B (columns scaled). */
static void edge_matrix(uint32_t seed, int64_t rows, int64_t cols, float *out) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      float v = gen_edge(seed, (uint32_t)(r * cols + c));
      if ((seed == 1 ? r : c) % 3 == 0) v *= 0x1p-66f;
      out[r * cols + c] = v;
    }
}

/* FNV-1a (32 bits) over the little-endian bytes of each float, every NaN counted as 0x7fc00000 (the
 * contract compares NaNs normalised). */
static uint32_t fnv1a(const float *v, size_t count) {
  uint32_t h = 0x811c9dc5u;
  for (size_t i = 0; i < count; i++) {
    uint32_t bits;
    memcpy(&bits, &v[i], sizeof bits);
    if (v[i] != v[i]) bits = 0x7fc00000u;
    for (int b = 0; b < 4; b++) {
      h ^= (bits >> (8 * b)) & 0xffu;
      h *= 0x01000193u;
    }
  }
  return h;
}

static int run_shape(weft_fabric *f, int lane, int64_t m, int64_t k, int64_t n, int edge, uint32_t *out_hash) {
  float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n));
  float *c = malloc(sizeof(float) * (size_t)(m * n));
  weft_tensor *ta = NULL, *tb = NULL, *tc = NULL;
  int ok = 0;
  if (!a || !b || !c) goto done;
  if (edge) {
    edge_matrix(1, m, k, a);
    edge_matrix(2, k, n, b);
  } else {
    for (int64_t i = 0; i < m * k; i++) a[i] = gen_value(1, (uint32_t)i);
    for (int64_t i = 0; i < k * n; i++) b[i] = gen_value(2, (uint32_t)i);
  }
  const int64_t da[2] = {m, k}, db[2] = {k, n}, dc[2] = {m, n};
  weft_op_desc desc = WEFT_OP_DESC_INIT;
  desc.lane = lane;
  if (weft_tensor_create(f, 2, da, a, &ta) || weft_tensor_create(f, 2, db, b, &tb) ||
      weft_tensor_create(f, 2, dc, NULL, &tc) || weft_op_matmul(f, &desc, ta, 0, tb, 0, tc) ||
      weft_tensor_read(tc, c, (size_t)(m * n))) {
    fprintf(stderr, "native_hash: %" PRId64 "x%" PRId64 "x%" PRId64 ": %s\n", m, k, n, weft_fabric_last_error(f));
    goto done;
  }
  *out_hash = fnv1a(c, (size_t)(m * n));
  ok = 1;
done:
  weft_tensor_destroy(ta), weft_tensor_destroy(tb), weft_tensor_destroy(tc);
  free(a), free(b), free(c);
  return ok;
}

int main(void) {
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = "cpu";
  desc.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  if (weft_fabric_open(&desc, &f) != WEFT_OK) {
    fprintf(stderr, "native_hash: cannot open a CPU fabric: %s\n", weft_open_error());
    return 1;
  }
  size_t lane = 0;
  if (weft_fabric_lane_find(f, "cpu", &lane) != WEFT_OK) {
    fprintf(stderr, "native_hash: no cpu lane: %s\n", weft_fabric_last_error(f));
    weft_fabric_close(f);
    return 1;
  }
  /* m, k, n, edge values */
  static const int64_t shapes[][4] = {{37, 53, 29, 0}, {128, 128, 128, 0}, {19, 23, 17, 1}};
  printf("{");
  int ok = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    uint32_t h = 0;
    if (!run_shape(f, (int)lane, shapes[s][0], shapes[s][1], shapes[s][2], (int)shapes[s][3], &h)) {
      ok = 0;
      break;
    }
    printf("%s\"%" PRId64 "x%" PRId64 "x%" PRId64 "%s\": \"%08" PRIx32 "\"", s ? ", " : "", shapes[s][0], shapes[s][1],
           shapes[s][2], shapes[s][3] ? "-edge" : "", h);
  }
  printf("}\n");
  weft_fabric_close(f);
  return ok ? 0 : 1;
}
