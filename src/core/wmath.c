/* wmath.c - weft_expf and weft_logf: the exp and log every exact lane computes bit for bit; below them
 * weft_recipf, weft_rsqrtf, weft_sqrtf and weft_tanhf, which the transformer ops (reference_tx.c) use.
 *
 * Only operations every target rounds the same way are used: fp32 multiply and add, each rounded on its
 * own (this file is built with -ffp-contract=off), floor, comparisons and exponent-field bit moves. No libm,
 * no division. GLSL, CUDA and WGSL lanes carry transcriptions of exp and log, step for step (and must of the
 * others when they run the transformer ops); change one and you change them all. */
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

/* ------------------------------------------------------------------ recip, rsqrt, sqrt, tanh
 *
 * The same rules as above: separately rounded fp32 multiplies and adds, floor, comparisons and exponent bit
 * moves only - no division and no square root, whose precision GPU languages leave loose (Vulkan allows
 * 2.5 ulp for division; WGSL and OpenCL similar), so they could not be transcribed bit for bit. Each is a
 * range reduction by exponent bits, a fixed initial guess, a fixed number of Newton steps and an exact
 * rescaling. Every NaN result is the canonical quiet NaN 0x7fc00000. */

#define WM_QNAN 0x7fc00000u
#define WM_INF 0x7f800000u

/* x * 2^k for any k in [-252, 254] with one rounding at most: the first factor keeps the value normal. */
static float scale2(float x, int k) {
  if (k > 127) return x * pow2i(127) * pow2i(k - 127);
  if (k < -126) return x * pow2i(k + 64) * pow2i(-64);
  return x * pow2i(k);
}

/* For finite x > 0: m in [1, 2) and e with x = m * 2^e, exactly (subnormals scaled up by 2^24 first). */
static float split_exp(float x, int *e_out) {
  int e = 0;
  if (x < 1.17549435e-38f) {
    x = x * 16777216.0f;
    e = -24;
  }
  uint32_t u = float_to_bits(x);
  *e_out = e + (int)((u >> 23) & 0xffu) - 127;
  return bits_to_float((u & 0x007fffffu) | 0x3f800000u);
}

/* 1/m for m in [1, 2): a linear first guess (relative error <= 1/17), then four Newton steps
 * r = r + r * (1 - m * r), each product and sum rounded on its own. */
static float recip_mant(float m) {
  float r = 1.41176474094390869140625f - 0.470588237047195434570312f * m;
  for (int i = 0; i < 4; i++) {
    float e = 1.0f - m * r;
    r = r + r * e;
  }
  return r;
}

float weft_recipf(float x) {
  if (x != x) return bits_to_float(WM_QNAN);
  float a = x < 0.0f ? -x : x;
  float s = x < 0.0f ? -1.0f : 1.0f;
  if (a == 0.0f) return float_to_bits(x) ? bits_to_float(0xff800000u) : bits_to_float(WM_INF);
  if (a == bits_to_float(WM_INF)) return s * 0.0f;
  int e;
  float m = split_exp(a, &e);
  return s * scale2(recip_mant(m), -e);
}

/* 1/sqrt(m) for m in [1, 4): the exponent-halving bit guess (relative error < 3.5%), then four Newton steps
 * y = y * (1.5 - ((0.5 * m) * y) * y). */
static float rsqrt_mant(float m) {
  float y = bits_to_float(0x5f3759dfu - (float_to_bits(m) >> 1));
  float h = 0.5f * m;
  for (int i = 0; i < 3; i++) {
    float t = h * y;
    t = t * y;
    t = 1.5f - t;
    y = y * t;
  }
  /* last step in correction form: y = y + y * (0.5 - (h * y) * y) */
  float t = h * y;
  t = t * y;
  t = 0.5f - t;
  y = y + y * t;
  return y;
}

/* For finite x > 0: m in [1, 4) and an even e with x = m * 2^e. */
static float split_exp_even(float x, int *e_out) {
  int e;
  float m = split_exp(x, &e);
  if (e & 1) {
    m = m * 2.0f;
    e = e - 1;
  }
  *e_out = e;
  return m;
}

float weft_rsqrtf(float x) {
  if (x != x || x < 0.0f) return bits_to_float(WM_QNAN);
  if (x == 0.0f) return float_to_bits(x) == 0x80000000u ? bits_to_float(0xff800000u) : bits_to_float(WM_INF);
  if (x == bits_to_float(WM_INF)) return 0.0f;
  int e;
  float m = split_exp_even(x, &e);
  return scale2(rsqrt_mant(m), -e / 2);
}

float weft_sqrtf(float x) {
  if (x != x || x < 0.0f) return bits_to_float(WM_QNAN);
  if (x == 0.0f || x == bits_to_float(WM_INF)) return x;
  int e;
  float m = split_exp_even(x, &e);
  float y = rsqrt_mant(m);
  float s = m * y;
  /* one Newton step on s itself: s = s + (0.5 * y) * (m - s * s) */
  float r = m - s * s;
  s = s + (0.5f * y) * r;
  return scale2(s, e / 2);
}

/* tanh(z)/z - 1 = z^2 * P(z^2) on |z| < 0.75: the Taylor coefficients of tanh from z^3 to z^25 (the
 * series converges for |z| < pi/2; the first term left out is below 2^-28 relative at 0.75). */
static const float TANH_C[12] = {
    -3.333333432674407958984375e-01f, 1.333333402872085571289062e-01f,  -5.396825447678565979003906e-02f,
    2.186948806047439575195312e-02f,  -8.863235823810100555419922e-03f, 3.592127934098243713378906e-03f,
    -1.455834368243813514709473e-03f, 5.900274263694882392883301e-04f,  -2.391291200183331966400146e-04f,
    9.691537707112729549407959e-05f,  -3.927832221961580216884613e-05f, 1.591890577401500195264816e-05f};

float weft_tanhf(float x) {
  if (x != x) return bits_to_float(WM_QNAN);
  float a = x < 0.0f ? -x : x;
  float s = x < 0.0f ? -1.0f : 1.0f;
  if (a < 0.000244140625f) return x; /* 2^-12: tanh(x) rounds to x; keeps -0 and subnormals */
  if (a >= 10.0f) return s;          /* tanh rounds to +-1 from 9.01 on */
  float t;
  if (a < 0.75f) {
    float z = a * a;
    float p = TANH_C[11];
    for (int i = 10; i >= 0; i--) p = p * z + TANH_C[i];
    t = a + a * (z * p);
  } else {
    /* tanh(a) = 1 - 2 / (exp(2a) + 1); exp(2a) > 4.4, so 2 / (exp(2a) + 1) < 0.37 and little cancels */
    float ex = weft_expf(a + a);
    t = 1.0f - 2.0f * weft_recipf(ex + 1.0f);
  }
  return s * t;
}
