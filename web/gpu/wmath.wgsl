// wmath.wgsl - what every exact WGSL kernel of weft's tabs shares (gpu.js puts it in front of each kernel's
// own source): the guarded multiply and add, and weft_expf, weft_recipf, weft_rsqrtf and weft_tanhf
// transcribed step for step from src/core/wmath.c (constants by their bits, the C source's decimal in the
// comment, so no parser rounds them differently). Change the C and you change this file.
//
// WGSL does not promise IEEE arithmetic everywhere, so these kernels promise the reference's bits only where
// it does, and say so when a value leaves that ground:
//   - fusion: WGSL has no `precise`, and a compiler may fuse a multiply and an add into one fma (one
//     rounding). weft_mul passes every product through its bit pattern xor `prm.keep`, a uniform the host
//     always sets to 0: no compiler can prove the xor is the identity, so the product is rounded on its own.
//   - subnormals: an implementation may flush them to zero (SwiftShader does). Every value a kernel reads
//     is checked (weft_in: zero, or a finite normal of magnitude >= 2^-102), and every product too
//     (weft_mul: zero from a zero operand, or finite and >= 2^-102). A sum of such values is a sum of
//     multiples of 2^-125, so it is zero or at least 2^-125: a normal, never a subnormal that could be
//     flushed. Products whose results are only ever added to values of their own sign, or stored
//     (weft_mul_n: exp's last scaling, a probability), need only be normal (>= 2^-126).
//   - infinities and NaN: an implementation may assume none occur. Every sum is checked for overflow, and
//     every stored value must be finite (weft_out).
// A check that fails sets weft_bad; the kernel then raises its status word, and the host computes the op on
// the CPU (weft.wasm) instead, with the reference's bits. Every check is on integer bits, which no float
// assumption can fold away. Each kernel's module declares `prm`, a uniform whose first field is `keep`.

var<private> weft_bad : u32;

fn weft_exp_field(u : u32) -> u32 { return (u >> 23u) & 0xffu; }

// A value read from a buffer, as bits: zero, or finite with magnitude >= 2^-102 (exponent field >= 25).
fn weft_in(u : u32) -> f32 {
  let e = weft_exp_field(u);
  if (e == 255u || (e < 25u && (u & 0x7fffffffu) != 0u)) {
    weft_bad = 1u;
  }
  return bitcast<f32>(u);
}

// The product of a and b, rounded on its own; finite, and zero only from a zero operand. `lo` is the least
// exponent field allowed (25: >= 2^-102; 1: any normal).
fn weft_mul_at(a : f32, b : f32, lo : u32) -> f32 {
  let u = bitcast<u32>(a * b) ^ prm.keep;
  let e = weft_exp_field(u);
  if (e == 255u) {
    weft_bad = 1u;
  } else if (e < lo) {
    let zero_operand = (bitcast<u32>(a) & 0x7fffffffu) == 0u || (bitcast<u32>(b) & 0x7fffffffu) == 0u;
    if ((u & 0x7fffffffu) != 0u || !zero_operand) {
      weft_bad = 1u;
    }
  }
  return bitcast<f32>(u);
}
fn weft_mul(a : f32, b : f32) -> f32 { return weft_mul_at(a, b, 25u); }
fn weft_mul_n(a : f32, b : f32) -> f32 { return weft_mul_at(a, b, 1u); }

fn weft_add(a : f32, b : f32) -> f32 {
  let s = a + b;
  if (weft_exp_field(bitcast<u32>(s)) == 255u) {
    weft_bad = 1u;
  }
  return s;
}
fn weft_sub(a : f32, b : f32) -> f32 {
  let s = a - b;
  if (weft_exp_field(bitcast<u32>(s)) == 255u) {
    weft_bad = 1u;
  }
  return s;
}

// A value to store, as bits: finite (else the op goes to the CPU), NaN never stored.
fn weft_out(v : f32) -> u32 {
  let u = bitcast<u32>(v);
  if (weft_exp_field(u) == 255u) {
    weft_bad = 1u;
    return 0x7fc00000u;
  }
  return u;
}

// 2^n for -126 <= n <= 127, exactly.
fn weft_pow2i(n : i32) -> f32 { return bitcast<f32>(u32(n + 127) << 23u); }

fn weft_expf(x : f32) -> f32 {
  if (x > bitcast<f32>(0x42b17218u)) { // 88.72283935546875f: overflows to +inf, which is not stored here
    weft_bad = 1u;
    return 0.0;
  }
  if (x < bitcast<f32>(0xc2cff1b5u)) { // -103.97208404541015625f: underflows to 0
    return 0.0;
  }
  let n = floor(weft_add(weft_mul(x, bitcast<f32>(0x3fb8aa3bu)), 0.5)); // 1.44269502925872802734375f
  var r = weft_sub(x, weft_mul(n, bitcast<f32>(0x3f317200u)));           // 0.693145751953125f
  r = weft_sub(r, weft_mul(n, bitcast<f32>(0x35bfbe8eu)));               // 1.428606765330187045e-06f
  var p = bitcast<f32>(0x39500d01u);                                      // 1.98412698e-4f
  p = weft_add(weft_mul(p, r), bitcast<f32>(0x3ab60b61u));                // 1.38888889e-3f
  p = weft_add(weft_mul(p, r), bitcast<f32>(0x3c088889u));                // 8.33333377e-3f
  p = weft_add(weft_mul(p, r), bitcast<f32>(0x3d2aaaabu));                // 4.16666679e-2f
  p = weft_add(weft_mul(p, r), bitcast<f32>(0x3e2aaaabu));                // 1.66666672e-1f
  p = weft_add(weft_mul(p, r), 0.5);
  p = weft_add(weft_mul(p, r), 1.0);
  p = weft_add(weft_mul(p, r), 1.0);
  let e = i32(n);
  if (e > 127) {
    return weft_mul_n(weft_mul_n(p, weft_pow2i(127)), weft_pow2i(e - 127));
  }
  if (e < -126) {
    return weft_mul_n(weft_mul_n(p, weft_pow2i(e + 64)), weft_pow2i(-64));
  }
  return weft_mul_n(p, weft_pow2i(e));
}

// x * 2^k for k in [-252, 254], at most one rounding (wmath.c's scale2).
fn weft_scale2(x : f32, k : i32) -> f32 {
  if (k > 127) {
    return weft_mul_n(weft_mul_n(x, weft_pow2i(127)), weft_pow2i(k - 127));
  }
  if (k < -126) {
    return weft_mul_n(weft_mul_n(x, weft_pow2i(k + 64)), weft_pow2i(-64));
  }
  return weft_mul_n(x, weft_pow2i(k));
}

// For finite normal x > 0 (the only values that reach here unflagged): m in [1, 2), x = m * 2^e.
struct weft_split_t {
  m : f32,
  e : i32,
}
fn weft_split_exp(x : f32) -> weft_split_t {
  let u = bitcast<u32>(x);
  if (u < 0x00800000u) { // subnormal: wmath.c scales it by 2^24 first; a flushing GPU cannot
    weft_bad = 1u;
  }
  return weft_split_t(bitcast<f32>((u & 0x007fffffu) | 0x3f800000u), i32(weft_exp_field(u)) - 127);
}

fn weft_recip_mant(m : f32) -> f32 {
  // 1.41176474094390869140625f - 0.470588237047195434570312f * m
  var r = weft_sub(bitcast<f32>(0x3fb4b4b5u), weft_mul(bitcast<f32>(0x3ef0f0f1u), m));
  for (var i = 0; i < 4; i = i + 1) {
    let e = weft_sub(1.0, weft_mul(m, r));
    r = weft_add(r, weft_mul(r, e));
  }
  return r;
}

fn weft_recipf(x : f32) -> f32 {
  let ux = bitcast<u32>(x);
  let ua = ux & 0x7fffffffu;
  if (ua == 0u || ua >= 0x7f800000u) { // 1/0, 1/inf, NaN: values these kernels never store
    weft_bad = 1u;
    return 0.0;
  }
  let neg = (ux & 0x80000000u) != 0u;
  let s = select(1.0, -1.0, neg);
  let sp = weft_split_exp(bitcast<f32>(ua));
  return weft_mul_n(s, weft_scale2(weft_recip_mant(sp.m), -sp.e));
}

fn weft_rsqrt_mant(m : f32) -> f32 {
  var y = bitcast<f32>(0x5f3759dfu - (bitcast<u32>(m) >> 1u));
  let h = weft_mul(0.5, m);
  for (var i = 0; i < 3; i = i + 1) {
    var t = weft_mul(h, y);
    t = weft_mul(t, y);
    t = weft_sub(1.5, t);
    y = weft_mul(y, t);
  }
  var t = weft_mul(h, y);
  t = weft_mul(t, y);
  t = weft_sub(0.5, t);
  y = weft_add(y, weft_mul(y, t));
  return y;
}

fn weft_rsqrtf(x : f32) -> f32 {
  let ux = bitcast<u32>(x);
  if ((ux & 0x80000000u) != 0u || ux == 0u || ux >= 0x7f800000u) { // -x, 0, inf, NaN: never stored here
    weft_bad = 1u;
    return 0.0;
  }
  var sp = weft_split_exp(x);
  if ((sp.e & 1) != 0) {
    sp.m = weft_mul(sp.m, 2.0);
    sp.e = sp.e - 1;
  }
  return weft_scale2(weft_rsqrt_mant(sp.m), -sp.e / 2);
}

fn weft_tanhf(x : f32) -> f32 {
  let ux = bitcast<u32>(x);
  let ua = ux & 0x7fffffffu;
  let neg = (ux & 0x80000000u) != 0u && ua != 0u; // x < 0.0f
  let a = bitcast<f32>(ua);
  let s = select(1.0, -1.0, neg);
  if (ua < 0x39800000u) { // a < 2^-12: tanh(x) rounds to x
    return x;
  }
  if (ua >= 0x41200000u) { // a >= 10
    return s;
  }
  var t : f32;
  if (ua < 0x3f400000u) { // a < 0.75
    let z = weft_mul(a, a);
    var p = bitcast<f32>(0x37858997u);                      // TANH_C[11]  1.591890577401500195264816e-05f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0xb824bec7u)); // TANH_C[10] -3.927832221961580216884613e-05f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0x38cb3f0cu)); // TANH_C[9]   9.691537707112729549407959e-05f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0xb97abebcu)); // TANH_C[8]  -2.391291200183331966400146e-04f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0x3a1aac12u)); // TANH_C[7]   5.900274263694882392883301e-04f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0xbabed1b2u)); // TANH_C[6]  -1.455834368243813514709473e-03f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0x3b6b69e8u)); // TANH_C[5]   3.592127934098243713378906e-03f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0xbc11371bu)); // TANH_C[4]  -8.863235823810100555419922e-03f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0x3cb327a4u)); // TANH_C[3]   2.186948806047439575195312e-02f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0xbd5d0dd1u)); // TANH_C[2]  -5.396825447678565979003906e-02f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0x3e088889u)); // TANH_C[1]   1.333333402872085571289062e-01f
    p = weft_add(weft_mul(p, z), bitcast<f32>(0xbeaaaaabu)); // TANH_C[0]  -3.333333432674407958984375e-01f
    t = weft_add(a, weft_mul(a, weft_mul(z, p)));
  } else {
    let ex = weft_expf(weft_add(a, a));
    t = weft_sub(1.0, weft_mul(2.0, weft_recipf(weft_add(ex, 1.0))));
  }
  return weft_mul(s, t);
}

// The flat index of this invocation in a dispatch of (x, y) workgroups of 64, x <= 65535.
fn weft_index(gid : vec3<u32>, nwg : vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 64u; }
