#version 450
// tx_xent.comp - cross-entropy with integer targets (src/core/reference_tx.c), built two ways:
//   XENT_ROWS: one invocation per row: max and log-sum-exp over the V logits, sequential and ascending;
//              writes stats[2n] = mx, stats[2n+1] = ls (flags & 1) and the loss (flags & 2).
//   XENT_GRAD: one invocation per element: dlogits[n,j] from the row's stats (the forward's exact values).
// Rows [0, nrows) relative to the bound windows: the lane chunks [N, V] logits larger than a binding by rows.
#include "common.glsl"
#include "wmath.glsl"

layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer Z { float z[]; };
layout(set = 0, binding = 1) readonly buffer Tgt { int tgt[]; };

#if defined(XENT_ROWS)
layout(set = 0, binding = 2) writeonly buffer Stats { float stats[]; };
layout(set = 0, binding = 3) writeonly buffer Loss { float loss[]; };
layout(push_constant) uniform P {
  uint nrows, V;
  uint flags; // 1: write stats, 2: write losses
  uint base_z, base_t, base_s, base_l;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 64u;
  for (uint n = gl_GlobalInvocationID.x; n < pc.nrows; n += stride) {
    uint zr = pc.base_z + n * pc.V;
    float mx = z[zr];
    for (uint j = 1u; j < pc.V; j++) {
      float v = z[zr + j];
      if (weft_gt(v, mx)) mx = v;
    }
    float s = 0.0;
    for (uint j = 0u; j < pc.V; j++) s = weft_add(s, weft_expf(weft_sub(z[zr + j], mx)));
    float ls = weft_logf(s);
    if ((pc.flags & 1u) != 0u) {
      stats[pc.base_s + 2u * n] = mx;
      stats[pc.base_s + 2u * n + 1u] = ls;
    }
    if ((pc.flags & 2u) != 0u) {
      float lsm = weft_sub(weft_sub(z[zr + uint(tgt[pc.base_t + n])], mx), ls);
      loss[pc.base_l + n] = weft_canon(weft_neg(lsm));
    }
  }
}
#elif defined(XENT_GRAD)
layout(set = 0, binding = 2) readonly buffer Stats { float stats[]; };
layout(set = 0, binding = 3) readonly buffer Dloss { float dloss[]; };
layout(set = 0, binding = 4) writeonly buffer G { float g[]; };
layout(push_constant) uniform P {
  uint nrows, V;
  uint base_z, base_t, base_s, base_dl, base_g;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 64u, count = pc.nrows * pc.V;
  for (uint e = gl_GlobalInvocationID.x; e < count; e += stride) {
    uint n = e / pc.V, j = e % pc.V;
    float mx = stats[pc.base_s + 2u * n], ls = stats[pc.base_s + 2u * n + 1u];
    float lsm = weft_sub(weft_sub(z[pc.base_z + e], mx), ls);
    float p = weft_expf(lsm);
    float ind = uint(tgt[pc.base_t + n]) == j ? 1.0 : 0.0;
    g[pc.base_g + e] = weft_canon(weft_mul(weft_sub(p, ind), dloss[pc.base_dl + n]));
  }
}
#else
#error tx_xent.comp: define XENT_ROWS or XENT_GRAD
#endif
