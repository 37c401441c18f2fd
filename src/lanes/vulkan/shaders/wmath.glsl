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
