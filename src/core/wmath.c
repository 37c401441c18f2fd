/* wmath.c - weft_expf and weft_logf: the exp and log every exact lane computes bit for bit.
 *
 * Only operations every target rounds the same way are used: fp32 multiply and add, each rounded on its
 * own (this file is built with -ffp-contract=off), floor, comparisons and exponent-field bit moves. No libm,
 * no division. GLSL, CUDA and WGSL lanes carry transcriptions of these two functions, step for step; change
 * one and you change them all. */
#include <stdint.h>
#include <string.h>

#include "weft.h"

static float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* 2^n for -126 <= n <= 127, exactly. */
static float pow2i(int n) { return bits_to_float((uint32_t)(n + 127) << 23); }

float weft_expf(float x) {
  if (x != x) return x;
  if (x > 88.72283935546875f) return bits_to_float(0x7f800000u); /* overflows to +inf */
  if (x < -103.97208404541015625f) return 0.0f;                   /* underflows past the smallest subnormal */
  /* x = n*ln2 + r, |r| <= ln2/2. ln2_hi has 16 significant bits, so n*ln2_hi is exact for |n| < 256. */
  float n = __builtin_floorf(x * 1.44269502925872802734375f + 0.5f);
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  /* Taylor to degree 7: the truncation error |r|^8/8! < 2^-27 relative on |r| <= 0.347. */
  float p = 1.98412698e-4f;
  p = p * r + 1.38888889e-3f;
  p = p * r + 8.33333377e-3f;
  p = p * r + 4.16666679e-2f;
  p = p * r + 1.66666672e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int e = (int)n;
  if (e > 127) return p * pow2i(127) * pow2i(e - 127);
  if (e < -126) return p * pow2i(e + 64) * pow2i(-64); /* two steps: the first stays normal */
  return p * pow2i(e);
}

/* log1p(f)/f on f in [sqrt(1/2)-1, sqrt(2)-1]: Chebyshev interpolant of degree 13 in monomial form. */
static const float LOG_C[14] = {
    1.000000000e+00f,  -5.000000000e-01f, 3.333333433e-01f,  -2.500000298e-01f, 1.999998242e-01f,
    -1.666648984e-01f, 1.428636611e-01f,  -1.250664145e-01f, 1.110298857e-01f,  -9.878969938e-02f,
    9.054505080e-02f,  -9.342882037e-02f, 9.089755267e-02f,  -4.717759788e-02f};

float weft_logf(float x) {
  if (x != x) return x;
  if (x < 0.0f) return bits_to_float(0x7fc00000u); /* NaN */
  if (x == 0.0f) return bits_to_float(0xff800000u); /* -inf */
  if (x == bits_to_float(0x7f800000u)) return x;
  int e = 0;
  if (x < 1.17549435e-38f) { /* subnormal: scale into the normal range first (exact) */
    x = x * 8388608.0f;
    e = -23;
  }
  uint32_t u = float_to_bits(x);
  e += (int)((u >> 23) & 0xffu) - 127;
  float m = bits_to_float((u & 0x007fffffu) | 0x3f800000u); /* m in [1, 2) */
  if (m > 1.41421353816986083984375f) {
    m = m * 0.5f;
    e = e + 1;
  }
  float f = m - 1.0f; /* exact (Sterbenz) */
  float q = LOG_C[13];
  for (int i = 12; i >= 0; i--) q = q * f + LOG_C[i];
  float l = q * f;
  float fe = (float)e;
  /* e*ln2 split so that e*ln2_hi is exact; the small part joins the polynomial first. */
  return fe * 0.693145751953125f + (l + fe * 1.428606765330187045e-06f);
}
