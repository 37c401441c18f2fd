// wmath.glsl - weft_expf and weft_logf, transcribed step for step from src/core/wmath.c. Every value is
// `precise`, so each multiply and add is rounded on its own as in the C (built with -ffp-contract=off).
// Constants are given by their bits (the decimal of the C source in the comment) so no parser can round
// them differently. Change the C and you change this file.

float weft_pow2i(int n) { return uintBitsToFloat(uint(n + 127) << 23); }

float weft_expf(float x) {
  if (weft_isnan(x)) return x;
  if (x > uintBitsToFloat(0x42b17218u)) return uintBitsToFloat(0x7f800000u); // 88.72283935546875f: +inf
  if (x < uintBitsToFloat(0xc2cff1b5u)) return 0.0;                          // -103.97208404541015625f
  precise float t = x * uintBitsToFloat(0x3fb8aa3bu) + 0.5;                  // 1.44269502925872802734375f
  float n = floor(t);
  precise float r = x - n * uintBitsToFloat(0x3f317200u);                    // 0.693145751953125f
  r = r - n * uintBitsToFloat(0x35bfbe8eu);                                  // 1.428606765330187045e-06f
  precise float p = uintBitsToFloat(0x39500d01u);                            // 1.98412698e-4f
  p = p * r + uintBitsToFloat(0x3ab60b61u);                                  // 1.38888889e-3f
  p = p * r + uintBitsToFloat(0x3c088889u);                                  // 8.33333377e-3f
  p = p * r + uintBitsToFloat(0x3d2aaaabu);                                  // 4.16666679e-2f
  p = p * r + uintBitsToFloat(0x3e2aaaabu);                                  // 1.66666672e-1f
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  int e = int(n);
  precise float res;
  if (e > 127) res = p * weft_pow2i(127) * weft_pow2i(e - 127);
  else if (e < -126) res = p * weft_pow2i(e + 64) * weft_pow2i(-64);
  else res = p * weft_pow2i(e);
  return res;
}

float weft_logf(float x) {
  if (weft_isnan(x)) return x;
  if (x < 0.0) return uintBitsToFloat(0x7fc00000u);
  if (x == 0.0) return uintBitsToFloat(0xff800000u);
  if (x == uintBitsToFloat(0x7f800000u)) return x;
  int e = 0;
  precise float xs = x;
  if (xs < uintBitsToFloat(0x00800000u)) { // subnormal (1.17549435e-38f): scale into the normal range (exact)
    xs = xs * 8388608.0;
    e = -23;
  }
  uint u = floatBitsToUint(xs);
  e += int((u >> 23) & 0xffu) - 127;
  precise float m = uintBitsToFloat((u & 0x007fffffu) | 0x3f800000u);
  if (m > uintBitsToFloat(0x3fb504f3u)) { // 1.41421353816986083984375f
    m = m * 0.5;
    e = e + 1;
  }
  precise float f = m - 1.0;
  precise float q = uintBitsToFloat(0xbd413d4cu);   // LOG_C[13] -4.717759788e-02f
  q = q * f + uintBitsToFloat(0x3dba287fu);         // LOG_C[12]  9.089755267e-02f
  q = q * f + uintBitsToFloat(0xbdbf579cu);         // LOG_C[11] -9.342882037e-02f
  q = q * f + uintBitsToFloat(0x3db96fafu);         // LOG_C[10]  9.054505080e-02f
  q = q * f + uintBitsToFloat(0xbdca5241u);         // LOG_C[9]  -9.878969938e-02f
  q = q * f + uintBitsToFloat(0x3de363a3u);         // LOG_C[8]   1.110298857e-01f
  q = q * f + uintBitsToFloat(0xbe001169u);         // LOG_C[7]  -1.250664145e-01f
  q = q * f + uintBitsToFloat(0x3e124adau);         // LOG_C[6]   1.428636611e-01f
  q = q * f + uintBitsToFloat(0xbe2aaa34u);         // LOG_C[5]  -1.666648984e-01f
  q = q * f + uintBitsToFloat(0x3e4cccc1u);         // LOG_C[4]   1.999998242e-01f
  q = q * f + uintBitsToFloat(0xbe800001u);         // LOG_C[3]  -2.500000298e-01f
  q = q * f + uintBitsToFloat(0x3eaaaaabu);         // LOG_C[2]   3.333333433e-01f
  q = q * f + -0.5;                                 // LOG_C[1]
  q = q * f + 1.0;                                  // LOG_C[0]
  precise float l = q * f;
  float fe = float(e);
  precise float res = fe * uintBitsToFloat(0x3f317200u) + (l + fe * uintBitsToFloat(0x35bfbe8eu));
  return res;
}
