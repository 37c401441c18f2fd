#version 450
// tx_layernorm.comp - layernorm forward and backward (src/core/reference_tx.c), built three ways:
//   LN_FWD:    one workgroup per row (rows strided over the groups): invocation 0 makes the row's sums in the
//              reference's sequential ascending order, then the workgroup normalises the row, one channel each.
//              With LN_ADD too, the row is x2 = a + b (a residual add fused before it, src/lanes/fuse.h):
//              every read of an element of x2 computes canon(a + b) afresh, the value the separate add would
//              have stored, and the normalising pass stores it into x2. a or b may be x2 itself (an in-place
//              add): each element is read and then written by one invocation, after the row's sums.
//   LN_BWD_DX: the same shape: invocation 0 makes a and b, the workgroup writes dx.
//   LN_BWD_DGB: one invocation per channel, rows ascending: dgamma and dbeta accumulated in the reference's
//              order (flags & 1: dgamma, flags & 2: dbeta).
#include "common.glsl"
#include "wmath.glsl"

#if defined(LN_BWD_DGB)
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer Dy { float dy[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer Mean { float mean[]; };
layout(set = 0, binding = 3) readonly buffer Rstd { float rstd[]; };
layout(set = 0, binding = 4) buffer Dg { float dgamma[]; };
layout(set = 0, binding = 5) buffer Db { float dbeta[]; };
layout(push_constant) uniform P {
  uint N, C, flags;
  uint base_x, base_dy, base_stats, base_dg, base_db;
} pc;

void main() {
  uint c = gl_GlobalInvocationID.x;
  if (c >= pc.C) return;
  bool wg = (pc.flags & 1u) != 0u, wb = (pc.flags & 2u) != 0u;
  float g = wg ? dgamma[pc.base_dg + c] : 0.0, b = wb ? dbeta[pc.base_db + c] : 0.0;
  for (uint r = 0u; r < pc.N; r++) {
    float mu = mean[pc.base_stats + r], rs = rstd[pc.base_stats + r];
    float xv = x[pc.base_x + r * pc.C + c], d = dy[pc.base_dy + r * pc.C + c];
    float n = weft_mul(weft_sub(xv, mu), rs);
    b = weft_canon(weft_add(b, d));
    g = weft_canon(weft_add(g, weft_mul(n, d)));
  }
  if (wg) dgamma[pc.base_dg + c] = g;
  if (wb) dbeta[pc.base_db + c] = b;
}
#else
layout(local_size_x = 64) in;
shared float s_a, s_b;

#if defined(LN_FWD)
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
#if defined(LN_ADD)
layout(set = 0, binding = 6) readonly buffer Xb { float xb[]; };
layout(set = 0, binding = 7) buffer X2 { float x2[]; };
#endif
layout(set = 0, binding = 1) readonly buffer Gamma { float gamma[]; };
layout(set = 0, binding = 2) readonly buffer Beta { float beta[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 4) writeonly buffer Mean { float mean[]; };
layout(set = 0, binding = 5) writeonly buffer Rstd { float rstd[]; };
layout(push_constant) uniform P {
  uint N, C;
  uint flags; // 1: write mean, 2: write rstd
  float eps;
  uint base_x, base_y, base_stats;
  uint base_b, base_x2; // LN_ADD
} pc;

// Element e (r*C + c) of the row data: x's, or the fused add's sum.
float xin(uint e) {
#if defined(LN_ADD)
  return weft_canon(weft_add(x[pc.base_x + e], xb[pc.base_b + e]));
#else
  return x[pc.base_x + e];
#endif
}

void main() {
  uint lid = gl_LocalInvocationID.x;
  float invC = weft_recipf(float(pc.C));
  for (uint r = gl_WorkGroupID.x; r < pc.N; r += gl_NumWorkGroups.x) {
    uint xr = r * pc.C;
    if (lid == 0u) {
      float s = 0.0;
      for (uint c = 0u; c < pc.C; c++) s = weft_add(s, xin(xr + c));
      float mu = weft_mul(s, invC);
      float v = 0.0;
      for (uint c = 0u; c < pc.C; c++) {
        float d = weft_sub(xin(xr + c), mu);
        v = weft_add(v, weft_mul(d, d));
      }
      float var = weft_mul(v, invC);
      float rs = weft_rsqrtf(weft_add(var, pc.eps));
      s_a = mu;
      s_b = rs;
      if ((pc.flags & 1u) != 0u) mean[pc.base_stats + r] = weft_canon(mu);
      if ((pc.flags & 2u) != 0u) rstd[pc.base_stats + r] = weft_canon(rs);
    }
    barrier();
    float mu = s_a, rs = s_b;
    for (uint c = lid; c < pc.C; c += 64u) {
      float xv = xin(xr + c);
#if defined(LN_ADD)
      x2[pc.base_x2 + xr + c] = xv;
#endif
      float n = weft_mul(weft_sub(xv, mu), rs);
      y[pc.base_y + r * pc.C + c] = weft_canon(weft_add(weft_mul(n, gamma[c]), beta[c]));
    }
    barrier();
  }
}
#elif defined(LN_BWD_DX)
layout(set = 0, binding = 0) readonly buffer Dy { float dy[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer Mean { float mean[]; };
layout(set = 0, binding = 3) readonly buffer Rstd { float rstd[]; };
layout(set = 0, binding = 4) readonly buffer Gamma { float gamma[]; };
layout(set = 0, binding = 5) writeonly buffer Dx { float dx[]; };
layout(push_constant) uniform P {
  uint N, C;
  uint base_x, base_dy, base_dx, base_stats;
} pc;

void main() {
  uint lid = gl_LocalInvocationID.x;
  float invC = weft_recipf(float(pc.C));
  for (uint r = gl_WorkGroupID.x; r < pc.N; r += gl_NumWorkGroups.x) {
    uint xr = pc.base_x + r * pc.C, dr = pc.base_dy + r * pc.C;
    float mu = mean[pc.base_stats + r], rs = rstd[pc.base_stats + r];
    if (lid == 0u) {
      float a = 0.0, b = 0.0;
      for (uint c = 0u; c < pc.C; c++) {
        float n = weft_mul(weft_sub(x[xr + c], mu), rs);
        float g = weft_mul(gamma[c], dy[dr + c]);
        a = weft_add(a, g);
        b = weft_add(b, weft_mul(g, n));
      }
      s_a = weft_mul(a, invC);
      s_b = weft_mul(b, invC);
    }
    barrier();
    float a = s_a, b = s_b;
    for (uint c = lid; c < pc.C; c += 64u) {
      float n = weft_mul(weft_sub(x[xr + c], mu), rs);
      float g = weft_mul(gamma[c], dy[dr + c]);
      float t = weft_sub(weft_sub(g, a), weft_mul(n, b));
      dx[pc.base_dx + r * pc.C + c] = weft_canon(weft_mul(t, rs));
    }
    barrier();
  }
}
#else
#error tx_layernorm.comp: define LN_FWD, LN_BWD_DX or LN_BWD_DGB
#endif
#endif
