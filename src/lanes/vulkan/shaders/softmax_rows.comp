#version 450
// softmax_rows.comp - softmax cross-entropy, one thread per row, in the order of src/core/reference.c:
// max, sum of exps, log of the sum, then per element the log-softmax, the loss term and the gradient.
// Writes the row's loss (-acc) for softmax_loss.comp to sum in row order.
#include "common.glsl"
#include "wmath.glsl"

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) restrict readonly buffer Z { float z[]; };
layout(set = 0, binding = 1) restrict readonly buffer T { float t[]; };
layout(set = 0, binding = 2) restrict writeonly buffer G { float g[]; };
layout(set = 0, binding = 3) restrict writeonly buffer L { float rowloss[]; };

layout(push_constant) uniform P {
  uint rows, cols;
  uint base_z, base_t, base_g, base_l;
  uint flags; // 1: write the gradient, 2: write the row losses
  float inv_rows;
} pc;

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= pc.rows) return;
  uint zr = pc.base_z + i * pc.cols, tr = pc.base_t + i * pc.cols, gr = pc.base_g + i * pc.cols;
  float mx = z[zr];
  for (uint j = 1u; j < pc.cols; j++) {
    float v = z[zr + j];
    // mx = v > mx ? v : mx, compared on the bits: no compiler can turn it into a max(), nor flush a
    // subnormal to zero before comparing.
    if (weft_gt(v, mx)) mx = v;
  }
  float s = 0.0;
  for (uint j = 0u; j < pc.cols; j++) s = weft_add(s, weft_expf(weft_sub(z[zr + j], mx)));
  float ls = weft_logf(s);
  float acc = 0.0;
  for (uint j = 0u; j < pc.cols; j++) {
    float lsm = weft_sub(weft_sub(z[zr + j], mx), ls);
    float tj = t[tr + j];
    acc = weft_add(acc, weft_mul(tj, lsm));
    if ((pc.flags & 1u) != 0u) g[gr + j] = weft_canon(weft_mul(weft_sub(weft_expf(lsm), tj), pc.inv_rows));
  }
  if ((pc.flags & 2u) != 0u) rowloss[pc.base_l + i] = weft_canon(weft_neg(acc));
}
