#version 450
// tx_xent.comp - cross-entropy with integer targets (src/core/reference_tx.c), built two ways:
//   XENT_ROWS: one invocation per row: max and log-sum-exp over the logits of columns [j0, j1), sequential
//              and ascending, continuing the row's running max (stats[2n]) and sum (stats[2n+1]) that an
//              earlier dispatch over the columns before j0 left there (flags & 4: max pass, flags & 8: sum
//              pass). With flags & 16 (the sum pass that reaches V) it finishes the row: stats[2n+1] = ls,
//              and the loss when flags & 2.
//   XENT_GRAD: one invocation per element: dlogits[n,j] from the row's stats (the forward's exact values).
// Rows [0, nrows) relative to the bound windows: the lane chunks [N, V] logits larger than a binding by rows.
// A row wider than XENT_COLS (vk_ops.c) is reduced in column ranges by several dispatches: llvmpipe bounds
// the loop iterations one invocation may run (65535 in all, counted over every loop of the shader), and a
// loop past that bound ends early without any error, so no invocation here may loop over a whole long row.
#include "common.glsl"
#include "wmath.glsl"

layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer Z { float z[]; };
layout(set = 0, binding = 1) readonly buffer Tgt { int tgt[]; };

#if defined(XENT_ROWS)
layout(set = 0, binding = 2) buffer Stats { float stats[]; };
layout(set = 0, binding = 3) writeonly buffer Loss { float loss[]; };
layout(push_constant) uniform P {
  uint nrows, V;
  uint flags; // 2: write losses, 4: max over [j0, j1), 8: sum over [j0, j1), 16: finish (j1 == V)
  uint base_z, base_t, base_s, base_l;
  uint j0, j1;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 64u;
  for (uint n = gl_GlobalInvocationID.x; n < pc.nrows; n += stride) {
    uint zr = pc.base_z + n * pc.V, sr = pc.base_s + 2u * n;
    float mx;
    if ((pc.flags & 4u) != 0u) {
      uint j = pc.j0;
      if (j == 0u) mx = z[zr], j = 1u;
      else mx = stats[sr];
      for (; j < pc.j1; j++) {
        float v = z[zr + j];
        if (weft_gt(v, mx)) mx = v;
      }
      stats[sr] = mx;
    } else {
      mx = stats[sr];
    }
    if ((pc.flags & 8u) == 0u) continue;
    float s = pc.j0 == 0u ? 0.0 : stats[sr + 1u];
    for (uint j = pc.j0; j < pc.j1; j++) s = weft_add(s, weft_expf(weft_sub(z[zr + j], mx)));
    if ((pc.flags & 16u) == 0u) {
      stats[sr + 1u] = s;
      continue;
    }
    float ls = weft_logf(s);
    stats[sr + 1u] = ls;
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
