// common.glsl - what every weft kernel shares: the float-control execution modes, bit-level tests, and
// multiply and add that are exact IEEE fp32 even where the hardware flushes subnormals.
//
// DenormPreserve and SignedZeroInfNanPreserve ask for IEEE behaviour of subnormals, signed zeros, infinities
// and NaNs. A device that cannot honour one of them gets the module with that mode removed at load time
// (vk_ops.c). NVIDIA's Vulkan driver, for one, cannot preserve fp32 subnormals: it flushes them to zero on
// input and output of every float instruction (comparisons too). weft_mul and weft_add below therefore
// check, with integer tests, whether a subnormal is or could be involved and then compute the IEEE result
// with integer arithmetic and exact scalings; otherwise they are one hardware instruction and a few tests.
// Loads, stores and bit casts never flush, so values travel intact.
#extension GL_EXT_spirv_intrinsics : require
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4464], 4459, 32);
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4466], 4461, 32);

// Tests written on the bits, so that no compiler assumption about NaN, and no flushing, can change them.
bool weft_isnan(float v) { return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u; }
// v > 0 for every v, NaN included (false), -0 and +0 (false), subnormals (true).
bool weft_positive(float v) {
  uint u = floatBitsToUint(v);
  return u != 0u && u <= 0x7f800000u;
}
// a > b as IEEE compares them (false if either is NaN; -0 and +0 equal), subnormals included.
bool weft_gt(float a, float b) {
  uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  if (weft_isnan(a) || weft_isnan(b) || ((ua | ub) & 0x7fffffffu) == 0u) return false;
  // Order-preserving map of the bits to unsigned integers.
  uint ka = (ua & 0x80000000u) != 0u ? ~ua : ua | 0x80000000u;
  uint kb = (ub & 0x80000000u) != 0u ? ~ub : ub | 0x80000000u;
  return ka > kb;
}
float weft_neg(float v) { return uintBitsToFloat(floatBitsToUint(v) ^ 0x80000000u); }
// Every result a kernel stores goes through weft_canon: a NaN becomes the canonical quiet NaN 0x7fc00000,
// whatever NaN the device made (they differ in sign and payload), so NaN results have the same bits on
// every lane too.
float weft_canon(float v) { return weft_isnan(v) ? uintBitsToFloat(0x7fc00000u) : v; }
vec4 weft_canon4(vec4 v) { return vec4(weft_canon(v.x), weft_canon(v.y), weft_canon(v.z), weft_canon(v.w)); }

// The integer mantissa and exponent of a finite nonzero float: |x| = m * 2^e, m < 2^24.
void weft_split(float x, out uint m, out int e) {
  uint u = floatBitsToUint(x) & 0x7fffffffu, ex = u >> 23;
  m = u & 0x7fffffu;
  if (ex != 0u) {
    m |= 0x800000u;
    e = int(ex) - 150;
  } else {
    e = -149;
  }
}

// (hi:lo) * 2^e, a nonzero integer below 2^48 times a power of two, rounded to the nearest float (ties to
// even) with gradual underflow and overflow to infinity; `s` is the sign bit.
float weft_round(uint hi, uint lo, int e, uint s) {
  int nbits = hi != 0u ? findMSB(hi) + 33 : findMSB(lo) + 1;
  int u = max(e + nbits - 24, -149); // exponent of the result's last mantissa bit
  int sh = u - e;                    // bits to drop
  uint q;
  if (sh <= 0) {
    q = lo << uint(-sh); // exact: fewer than 24 bits (hi is 0 then)
  } else if (sh >= 64) {
    q = 0u; // below half the smallest subnormal (the value is < 2^48 < 2^(sh-1))
  } else {
    uint rhi, rlo, hhi, hlo;
    if (sh < 32) {
      q = (lo >> uint(sh)) | (sh > 0 ? hi << uint(32 - sh) : 0u);
      rhi = 0u, rlo = lo & ((1u << uint(sh)) - 1u);
    } else {
      q = hi >> uint(sh - 32);
      rhi = sh == 32 ? 0u : hi & ((1u << uint(sh - 32)) - 1u), rlo = lo;
    }
    if (sh - 1 < 32) hhi = 0u, hlo = 1u << uint(sh - 1);
    else hhi = 1u << uint(sh - 33), hlo = 0u;
    bool above = rhi > hhi || (rhi == hhi && rlo > hlo), tie = rhi == hhi && rlo == hlo;
    if (above || (tie && (q & 1u) != 0u)) q += 1u;
  }
  if (q == 0x1000000u) q = 0x800000u, u += 1; // rounding carried into a new bit
  uint bits;
  if (q < 0x800000u) bits = q; // subnormal (u is -149) or zero
  else if (u + 150 >= 255) bits = 0x7f800000u;
  else bits = (uint(u + 150) << 23) | (q & 0x7fffffu);
  return uintBitsToFloat(s | bits);
}

// a * b, rounded once, IEEE fp32 with subnormals.
float weft_mul(float a, float b) {
  precise float r = a * b;
  uint ua = floatBitsToUint(a) & 0x7fffffffu, ub = floatBitsToUint(b) & 0x7fffffffu;
  uint ur = floatBitsToUint(r) & 0x7fffffffu;
  // No subnormal operand, and the result at least 2^-125 (or an operand zero, infinite or NaN): the
  // hardware's answer is the IEEE one.
  bool sub = (ua - 1u) < 0x7fffffu || (ub - 1u) < 0x7fffffu;
  if (!sub && (ur >= 0x01000000u || ua == 0u || ub == 0u)) return r;
  uint s = (floatBitsToUint(a) ^ floatBitsToUint(b)) & 0x80000000u;
  if (ua > 0x7f800000u || ub > 0x7f800000u) return uintBitsToFloat(0x7fc00000u);
  if (ua == 0x7f800000u || ub == 0x7f800000u)
    return (ua == 0u || ub == 0u) ? uintBitsToFloat(0x7fc00000u) : uintBitsToFloat(s | 0x7f800000u);
  if (ua == 0u || ub == 0u) return uintBitsToFloat(s);
  uint ma, mb, hi, lo;
  int ea, eb;
  weft_split(a, ma, ea);
  weft_split(b, mb, eb);
  umulExtended(ma, mb, hi, lo);
  return weft_round(hi, lo, ea + eb, s);
}

// x * 2^64 exactly, for |x| < 2^63 (subnormals built from their integer mantissa).
float weft_scale_up(float x) {
  uint u = floatBitsToUint(x), au = u & 0x7fffffffu;
  if (au == 0u) return x;
  if (au < 0x800000u) {
    precise float v = float(au) * uintBitsToFloat(0x15000000u); // m * 2^-149 * 2^64 = m * 2^-85
    return uintBitsToFloat((u & 0x80000000u) | floatBitsToUint(v));
  }
  precise float v = x * uintBitsToFloat(0x5f800000u); // 2^64
  return v;
}

// x + y, rounded once, IEEE fp32 with subnormals.
float weft_add(float x, float y) {
  precise float r = x + y;
  uint ux = floatBitsToUint(x) & 0x7fffffffu, uy = floatBitsToUint(y) & 0x7fffffffu;
  uint ur = floatBitsToUint(r) & 0x7fffffffu;
  bool sub = (ux - 1u) < 0x7fffffu || (uy - 1u) < 0x7fffffu;
  // Normal operands: the hardware is right unless the exact sum is subnormal, which it would flush to zero
  // (an exactly zero sum, x == -y, is right either way).
  if (!sub && (ur >= 0x800000u || (ux == uy && (floatBitsToUint(x) ^ floatBitsToUint(y)) >= 0x80000000u)))
    return r;
  if (ux >= 0x7f800000u || uy >= 0x7f800000u) return r; // infinities and NaN: no subnormal matters
  // A subnormal is below half an ulp of any float from 2^-101 up: the larger operand is the sum. (Two normal
  // operands reach here only when both are below 2^-102.)
  if (max(ux, uy) >= 0x0d000000u) return ux >= uy ? x : y;
  // Both below 2^-101: add them scaled by 2^64, where everything is normal. The scaled sum is rounded as
  // the true sum would be when that is normal, and is exact when the true sum is subnormal.
  precise float big = weft_scale_up(x) + weft_scale_up(y);
  uint ub = floatBitsToUint(big), aub = ub & 0x7fffffffu;
  if (aub >= 0x20800000u) { // |sum| >= 2^-126: scale back exactly
    precise float v = big * uintBitsToFloat(0x1f800000u); // 2^-64
    return v;
  }
  if (aub == 0u) return big;
  precise float k = uintBitsToFloat(aub) * uintBitsToFloat(0x6a000000u); // the sum in units of 2^-149
  return uintBitsToFloat((ub & 0x80000000u) | uint(k));
}

float weft_sub(float x, float y) { return weft_add(x, weft_neg(y)); }
