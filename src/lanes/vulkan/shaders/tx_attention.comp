#version 450
// tx_attention.comp - the fused causal attention of src/core/reference_tx.c, built three ways:
//   ATT_FWD:  one invocation per (b, h, t): scores, preatt, the softmax row into att, then out[b,t,h*hs+i].
//             Also the decode op ATTENTION_CACHED: rows t = t0 .. t0+Tq-1 only (t0 = 0, Tq = T for the fused
//             op), T being then the cache's Tmax (qkv's rows and att's row length); out is [B,Tq,C], its row
//             t - t0, and att [nbh,Tq,T] (the caller's or scratch).
//   ATT_DS:   backward, one invocation per (b, h, t): datt, then the softmax backward, into the scratch ds
//             (the [nbh, T, T] rows the reference keeps in its T*T buffer; masked entries never read).
//   ATT_DQKV: backward, one invocation per (b, h, t, i): dq, dk and dv of that element from ds and att.
// Each dispatch covers the (b, h) pairs [bh0, bh0 + nbh) (bh = b * NH + h), so the lane can chunk att, preatt
// and ds by (b, h) blocks when B*NH*T*T floats exceed a binding; qkv, out, dout and dqkv are bound whole.
// The loops are the reference's, sequential and ascending. Under a loop limit (lavapipe) the lane splits one
// (b, h, t) row's work over dispatches, flags saying which phase this one runs: ATT_FWD scores j in [j0, j1)
// (2), the softmax (4), outputs i in [i0, i1) (8); ATT_DS the dots of j in [j0, j1) (2), then the softmax
// backward (4). Every element is still one unbroken sequence inside one dispatch: the same bits.
#include "common.glsl"
#include "wmath.glsl"

layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer Qkv { float qkv[]; };
layout(push_constant) uniform P {
  uint T, C, NH;
  uint bh0, nbh;
  uint flags; // 1: write preatt (ATT_FWD); the phases as above
  uint base_att, base_pre, base_ds;
  uint j0, j1, i0, i1;
  uint t0, Tq; // ATT_FWD: the rows computed (0 and T for the fused op)
} pc;

#if defined(ATT_FWD)
layout(set = 0, binding = 1) writeonly buffer Out { float o[]; };
layout(set = 0, binding = 2) writeonly buffer Pre { float pre[]; };
layout(set = 0, binding = 3) buffer Att { float att[]; };

void main() {
  uint hs = pc.C / pc.NH, C3 = 3u * pc.C;
  float scale = weft_rsqrtf(float(hs));
  uint stride = gl_NumWorkGroups.x * 64u;
  for (uint g = gl_GlobalInvocationID.x; g < pc.nbh * pc.Tq; g += stride) {
    uint bh = pc.bh0 + g / pc.Tq, r = g % pc.Tq, t = pc.t0 + r, b = bh / pc.NH, h = bh % pc.NH;
    uint q = (b * pc.T + t) * C3 + h * hs, ar = pc.base_att + g * pc.T;
    if ((pc.flags & 2u) != 0u) {
      for (uint j = pc.j0; j <= t && j < pc.j1; j++) {
        uint k = (b * pc.T + j) * C3 + pc.C + h * hs;
        float d = 0.0;
        for (uint i = 0u; i < hs; i++) d = weft_add(d, weft_mul(qkv[q + i], qkv[k + i]));
        att[ar + j] = weft_mul(d, scale);
      }
    }
    if ((pc.flags & 4u) != 0u) {
      if ((pc.flags & 1u) != 0u) {
        uint pr = pc.base_pre + g * pc.T;
        for (uint j = 0u; j <= t; j++) pre[pr + j] = weft_canon(att[ar + j]);
        for (uint j = t + 1u; j < pc.T; j++) pre[pr + j] = uintBitsToFloat(0xff800000u); // -inf
      }
      float mx = att[ar];
      for (uint j = 1u; j <= t; j++) {
        float z = att[ar + j];
        if (weft_gt(z, mx)) mx = z;
      }
      float sum = 0.0;
      for (uint j = 0u; j <= t; j++) {
        float e = weft_expf(weft_sub(att[ar + j], mx));
        att[ar + j] = e;
        sum = weft_add(sum, e);
      }
      float inv = weft_recipf(sum);
      for (uint j = 0u; j <= t; j++) att[ar + j] = weft_canon(weft_mul(att[ar + j], inv));
      for (uint j = t + 1u; j < pc.T; j++) att[ar + j] = 0.0;
    }
    if ((pc.flags & 8u) != 0u) {
      uint orow = (b * pc.Tq + r) * pc.C + h * hs;
      for (uint i = pc.i0; i < pc.i1; i++) {
        float acc = 0.0;
        for (uint j = 0u; j <= t; j++)
          acc = weft_add(acc, weft_mul(att[ar + j], qkv[(b * pc.T + j) * C3 + 2u * pc.C + h * hs + i]));
        o[orow + i] = weft_canon(acc);
      }
    }
  }
}
#elif defined(ATT_DS)
layout(set = 0, binding = 1) readonly buffer Dout { float dout[]; };
layout(set = 0, binding = 2) readonly buffer Att { float att[]; };
layout(set = 0, binding = 3) buffer Ds { float ds[]; };

void main() {
  uint hs = pc.C / pc.NH, C3 = 3u * pc.C;
  float scale = weft_rsqrtf(float(hs));
  uint stride = gl_NumWorkGroups.x * 64u;
  for (uint g = gl_GlobalInvocationID.x; g < pc.nbh * pc.T; g += stride) {
    uint bh = pc.bh0 + g / pc.T, t = g % pc.T, b = bh / pc.NH, h = bh % pc.NH;
    uint dor = (b * pc.T + t) * pc.C + h * hs, ar = pc.base_att + g * pc.T, dr = pc.base_ds + g * pc.T;
    if ((pc.flags & 2u) != 0u) {
      for (uint j = pc.j0; j <= t && j < pc.j1; j++) {
        uint v = (b * pc.T + j) * C3 + 2u * pc.C + h * hs;
        float d = 0.0;
        for (uint i = 0u; i < hs; i++) d = weft_add(d, weft_mul(qkv[v + i], dout[dor + i]));
        ds[dr + j] = d;
      }
    }
    if ((pc.flags & 4u) != 0u) {
      float dot = 0.0;
      for (uint j = 0u; j <= t; j++) dot = weft_add(dot, weft_mul(att[ar + j], ds[dr + j]));
      for (uint j = 0u; j <= t; j++) ds[dr + j] = weft_mul(weft_mul(att[ar + j], weft_sub(ds[dr + j], dot)), scale);
    }
  }
}
#elif defined(ATT_DQKV)
layout(set = 0, binding = 1) readonly buffer Dout { float dout[]; };
layout(set = 0, binding = 2) readonly buffer Att { float att[]; };
layout(set = 0, binding = 3) readonly buffer Ds { float ds[]; };
layout(set = 0, binding = 4) writeonly buffer Dqkv { float dqkv[]; };

void main() {
  uint hs = pc.C / pc.NH, C3 = 3u * pc.C;
  uint stride = gl_NumWorkGroups.x * 64u;
  for (uint e = gl_GlobalInvocationID.x; e < pc.nbh * pc.T * hs; e += stride) {
    uint i = e % hs, g = e / hs;
    uint lbh = g / pc.T, bh = pc.bh0 + lbh, t = g % pc.T, b = bh / pc.NH, h = bh % pc.NH;
    uint blk = lbh * pc.T * pc.T; // this (b, h)'s [T, T] block, relative to the bound windows
    float acc = 0.0;
    for (uint j = 0u; j <= t; j++)
      acc = weft_add(acc, weft_mul(ds[pc.base_ds + blk + t * pc.T + j], qkv[(b * pc.T + j) * C3 + pc.C + h * hs + i]));
    float ak = 0.0, av = 0.0;
    for (uint u = t; u < pc.T; u++) {
      ak = weft_add(ak, weft_mul(ds[pc.base_ds + blk + u * pc.T + t], qkv[(b * pc.T + u) * C3 + h * hs + i]));
      av = weft_add(av, weft_mul(att[pc.base_att + blk + u * pc.T + t], dout[(b * pc.T + u) * pc.C + h * hs + i]));
    }
    uint dq = (b * pc.T + t) * C3 + h * hs + i;
    dqkv[dq] = weft_canon(acc);
    dqkv[dq + pc.C] = weft_canon(ak);
    dqkv[dq + 2u * pc.C] = weft_canon(av);
  }
}
#else
#error tx_attention.comp: define ATT_FWD, ATT_DS or ATT_DQKV
#endif
