// wmath.glsl - weft_expf and weft_logf, transcribed step for step from src/core/wmath.c, every multiply and
// add through weft_mul / weft_add (common.glsl) so that subnormal results (exp's two-step scaling makes
// them on purpose) come out as the C computes them on any hardware. Comparisons are on the bits where a
// subnormal could meet them. Constants are given by their bits, the decimal of the C source in the comment,
// so no parser can round them differently. Change the C and you change this file.

float weft_pow2i(int n) { return uintBitsToFloat(uint(n + 127) << 23); }

float weft_expf(float x) {
  if (weft_isnan(x)) return x;
  if (weft_gt(x, uintBitsToFloat(0x42b17218u))) return uintBitsToFloat(0x7f800000u); // 88.72283935546875f: +inf
  if (weft_gt(uintBitsToFloat(0xc2cff1b5u), x)) return 0.0;                          // -103.97208404541015625f
  float t = weft_add(weft_mul(x, uintBitsToFloat(0x3fb8aa3bu)), 0.5);                // 1.44269502925872802734375f
  float n = floor(t); // t is a multiple of 2^-25 or zero, never subnormal
  float r = weft_sub(x, weft_mul(n, uintBitsToFloat(0x3f317200u)));                  // 0.693145751953125f
  r = weft_sub(r, weft_mul(n, uintBitsToFloat(0x35bfbe8eu)));                        // 1.428606765330187045e-06f
  float p = uintBitsToFloat(0x39500d01u);                                            // 1.98412698e-4f
  p = weft_add(weft_mul(p, r), uintBitsToFloat(0x3ab60b61u));                        // 1.38888889e-3f
  p = weft_add(weft_mul(p, r), uintBitsToFloat(0x3c088889u));                        // 8.33333377e-3f
  p = weft_add(weft_mul(p, r), uintBitsToFloat(0x3d2aaaabu));                        // 4.16666679e-2f
  p = weft_add(weft_mul(p, r), uintBitsToFloat(0x3e2aaaabu));                        // 1.66666672e-1f
  p = weft_add(weft_mul(p, r), 0.5);
  p = weft_add(weft_mul(p, r), 1.0);
  p = weft_add(weft_mul(p, r), 1.0);
  int e = int(n);
  if (e > 127) return weft_mul(weft_mul(p, weft_pow2i(127)), weft_pow2i(e - 127));
  if (e < -126) return weft_mul(weft_mul(p, weft_pow2i(e + 64)), weft_pow2i(-64));
  return weft_mul(p, weft_pow2i(e));
}

float weft_logf(float x) {
  uint ux = floatBitsToUint(x);
  if (weft_isnan(x)) return x;
  if ((ux & 0x7fffffffu) == 0u) return uintBitsToFloat(0xff800000u); // +-0: -inf
  if ((ux & 0x80000000u) != 0u) return uintBitsToFloat(0x7fc00000u); // negative: NaN
  if (ux == 0x7f800000u) return x;
  int e = 0;
  float xs = x;
  if (ux < 0x00800000u) { // subnormal (below 1.17549435e-38f): x * 2^23 exactly, = mantissa * 2^-126
    precise float v = float(ux) * uintBitsToFloat(0x00800000u);
    xs = v;
    e = -23;
  }
  uint u = floatBitsToUint(xs);
  e += int((u >> 23) & 0xffu) - 127;
  float m = uintBitsToFloat((u & 0x007fffffu) | 0x3f800000u);
  if (weft_gt(m, uintBitsToFloat(0x3fb504f3u))) { // 1.41421353816986083984375f
    m = weft_mul(m, 0.5);
    e = e + 1;
  }
  float f = weft_sub(m, 1.0);
  float q = uintBitsToFloat(0xbd413d4cu);                  // LOG_C[13] -4.717759788e-02f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0x3dba287fu)); // LOG_C[12]  9.089755267e-02f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0xbdbf579cu)); // LOG_C[11] -9.342882037e-02f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0x3db96fafu)); // LOG_C[10]  9.054505080e-02f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0xbdca5241u)); // LOG_C[9]  -9.878969938e-02f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0x3de363a3u)); // LOG_C[8]   1.110298857e-01f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0xbe001169u)); // LOG_C[7]  -1.250664145e-01f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0x3e124adau)); // LOG_C[6]   1.428636611e-01f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0xbe2aaa34u)); // LOG_C[5]  -1.666648984e-01f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0x3e4cccc1u)); // LOG_C[4]   1.999998242e-01f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0xbe800001u)); // LOG_C[3]  -2.500000298e-01f
  q = weft_add(weft_mul(q, f), uintBitsToFloat(0x3eaaaaabu)); // LOG_C[2]   3.333333433e-01f
  q = weft_add(weft_mul(q, f), -0.5);                         // LOG_C[1]
  q = weft_add(weft_mul(q, f), 1.0);                          // LOG_C[0]
  float l = weft_mul(q, f);
  float fe = float(e);
  return weft_add(weft_mul(fe, uintBitsToFloat(0x3f317200u)), weft_add(l, weft_mul(fe, uintBitsToFloat(0x35bfbe8eu))));
}

// ------------------------------------------------------------------ recip, rsqrt, sqrt, tanh
// weft_recipf, weft_rsqrtf, weft_sqrtf and weft_tanhf of src/core/wmath.c, step for step, the same way: every
// multiply and add through weft_mul / weft_add, comparisons on the bits (the arguments compared are never NaN
// there), constants by their bits. Every NaN result is 0x7fc00000.

// x * 2^k for any k in [-252, 254], at most one rounding (wmath.c's scale2).
float weft_scale2(float x, int k) {
  if (k > 127) return weft_mul(weft_mul(x, weft_pow2i(127)), weft_pow2i(k - 127));
  if (k < -126) return weft_mul(weft_mul(x, weft_pow2i(k + 64)), weft_pow2i(-64));
  return weft_mul(x, weft_pow2i(k));
}

// For finite x > 0: m in [1, 2) and e with x = m * 2^e (wmath.c's split_exp).
float weft_split_exp(float x, out int e_out) {
  int e = 0;
  if (floatBitsToUint(x) < 0x00800000u) { // x < 1.17549435e-38f: subnormal, scaled by 2^24 exactly
    x = weft_mul(x, uintBitsToFloat(0x4b800000u)); // 16777216.0f
    e = -24;
  }
  uint u = floatBitsToUint(x);
  e_out = e + int((u >> 23) & 0xffu) - 127;
  return uintBitsToFloat((u & 0x007fffffu) | 0x3f800000u);
}

float weft_recip_mant(float m) {
  // 1.41176474094390869140625f - 0.470588237047195434570312f * m
  float r = weft_sub(uintBitsToFloat(0x3fb4b4b5u), weft_mul(uintBitsToFloat(0x3ef0f0f1u), m));
  for (int i = 0; i < 4; i++) {
    float e = weft_sub(1.0, weft_mul(m, r));
    r = weft_add(r, weft_mul(r, e));
  }
  return r;
}

float weft_recipf(float x) {
  if (weft_isnan(x)) return uintBitsToFloat(0x7fc00000u);
  uint ux = floatBitsToUint(x), ua = ux & 0x7fffffffu;
  bool neg = (ux & 0x80000000u) != 0u && ua != 0u; // x < 0.0f
  float a = neg ? weft_neg(x) : x;
  float s = neg ? -1.0 : 1.0;
  if (ua == 0u) return ux != 0u ? uintBitsToFloat(0xff800000u) : uintBitsToFloat(0x7f800000u);
  if (ua == 0x7f800000u) return uintBitsToFloat(neg ? 0x80000000u : 0u); // s * 0.0f, written as its bits
  int e;
  float m = weft_split_exp(a, e);
  return weft_mul(s, weft_scale2(weft_recip_mant(m), -e));
}

float weft_rsqrt_mant(float m) {
  float y = uintBitsToFloat(0x5f3759dfu - (floatBitsToUint(m) >> 1));
  float h = weft_mul(0.5, m);
  for (int i = 0; i < 3; i++) {
    float t = weft_mul(h, y);
    t = weft_mul(t, y);
    t = weft_sub(1.5, t);
    y = weft_mul(y, t);
  }
  float t = weft_mul(h, y);
  t = weft_mul(t, y);
  t = weft_sub(0.5, t);
  y = weft_add(y, weft_mul(y, t));
  return y;
}

// For finite x > 0: m in [1, 4) and an even e with x = m * 2^e.
float weft_split_exp_even(float x, out int e_out) {
  int e;
  float m = weft_split_exp(x, e);
  if ((e & 1) != 0) {
    m = weft_mul(m, 2.0);
    e = e - 1;
  }
  e_out = e;
  return m;
}

float weft_rsqrtf(float x) {
  uint ux = floatBitsToUint(x);
  if (weft_isnan(x) || ((ux & 0x80000000u) != 0u && ux != 0x80000000u)) return uintBitsToFloat(0x7fc00000u);
  if ((ux & 0x7fffffffu) == 0u) return ux == 0x80000000u ? uintBitsToFloat(0xff800000u) : uintBitsToFloat(0x7f800000u);
  if (ux == 0x7f800000u) return 0.0;
  int e;
  float m = weft_split_exp_even(x, e);
  return weft_scale2(weft_rsqrt_mant(m), -e / 2);
}

float weft_sqrtf(float x) {
  uint ux = floatBitsToUint(x);
  if (weft_isnan(x) || ((ux & 0x80000000u) != 0u && ux != 0x80000000u)) return uintBitsToFloat(0x7fc00000u);
  if ((ux & 0x7fffffffu) == 0u || ux == 0x7f800000u) return x;
  int e;
  float m = weft_split_exp_even(x, e);
  float y = weft_rsqrt_mant(m);
  float s = weft_mul(m, y);
  float r = weft_sub(m, weft_mul(s, s));
  s = weft_add(s, weft_mul(weft_mul(0.5, y), r));
  return weft_scale2(s, e / 2);
}

float weft_tanhf(float x) {
  if (weft_isnan(x)) return uintBitsToFloat(0x7fc00000u);
  uint ux = floatBitsToUint(x), ua = ux & 0x7fffffffu;
  bool neg = (ux & 0x80000000u) != 0u && ua != 0u; // x < 0.0f
  float a = neg ? weft_neg(x) : x;
  float s = neg ? -1.0 : 1.0;
  if (ua < 0x39800000u) return x; // a < 2^-12: tanh(x) rounds to x
  if (ua >= 0x41200000u) return s; // a >= 10
  float t;
  if (ua < 0x3f400000u) { // a < 0.75
    float z = weft_mul(a, a);
    float p = uintBitsToFloat(0x37858997u);                     // TANH_C[11]  1.591890577401500195264816e-05f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0xb824bec7u)); // TANH_C[10] -3.927832221961580216884613e-05f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0x38cb3f0cu)); // TANH_C[9]   9.691537707112729549407959e-05f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0xb97abebcu)); // TANH_C[8]  -2.391291200183331966400146e-04f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0x3a1aac12u)); // TANH_C[7]   5.900274263694882392883301e-04f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0xbabed1b2u)); // TANH_C[6]  -1.455834368243813514709473e-03f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0x3b6b69e8u)); // TANH_C[5]   3.592127934098243713378906e-03f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0xbc11371bu)); // TANH_C[4]  -8.863235823810100555419922e-03f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0x3cb327a4u)); // TANH_C[3]   2.186948806047439575195312e-02f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0xbd5d0dd1u)); // TANH_C[2]  -5.396825447678565979003906e-02f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0x3e088889u)); // TANH_C[1]   1.333333402872085571289062e-01f
    p = weft_add(weft_mul(p, z), uintBitsToFloat(0xbeaaaaabu)); // TANH_C[0]  -3.333333432674407958984375e-01f
    t = weft_add(a, weft_mul(a, weft_mul(z, p)));
  } else {
    float ex = weft_expf(weft_add(a, a));
    t = weft_sub(1.0, weft_mul(2.0, weft_recipf(weft_add(ex, 1.0))));
  }
  return weft_mul(s, t);
}

// ------------------------------------------------------------------------------------------- gelu
// GPT-2's GELU (tanh form), forward, as weft_ref_gelu_forward (src/core/reference_tx.c) computes one element:
// c = ((K*x)*x)*x; u = S*(x + c); y = (0.5*x) * (1 + tanh(u)). Shared by tx_gelu.comp and the matmul
// epilogue (epilogue.glsl), so a fused GELU is the same transcription as the separate one.
const uint WEFT_GELU_S = 0x3f4c422au;  // 0.79788458347320556640625f, sqrt(2/pi)
const uint WEFT_GELU_K = 0x3d372714u;  // 0.044715f
const uint WEFT_GELU_3K = 0x3e095d4fu; // 0.134145f
float weft_gelu(float xi) {
  float c = weft_mul(uintBitsToFloat(WEFT_GELU_K), xi);
  c = weft_mul(c, xi);
  c = weft_mul(c, xi);
  float u = weft_mul(uintBitsToFloat(WEFT_GELU_S), weft_add(xi, c));
  float th = weft_tanhf(u);
  float h = weft_mul(0.5, xi);
  return weft_mul(h, weft_add(1.0, th));
}
