#version 450
// tx_softmax.comp - the causal softmax (unfused) of src/core/reference_tx.c, forward or (SM_BWD) backward: one
// invocation per row of the [R, T, T] blocks, each row's loops sequential and ascending as the reference's.
// Rows [0, nrows) of this dispatch are rows row0 + i of the whole tensor (so row i's t is (row0 + i) % T):
// the lane chunks a tensor larger than a binding by rows. Forward may run in place (probs bound to scores).
#include "common.glsl"
#include "wmath.glsl"

layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };  // forward: scores; backward: probs
layout(set = 0, binding = 1) readonly buffer B { float bb[]; }; // backward: dprobs
layout(set = 0, binding = 2) buffer O { float o[]; };           // forward: probs; backward: dscores
layout(push_constant) uniform P {
  uint nrows, T, row0;
  float scale;
  uint base_a, base_b, base_o;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 64u;
  for (uint i = gl_GlobalInvocationID.x; i < pc.nrows; i += stride) {
    uint t = (pc.row0 + i) % pc.T;
    uint ar = pc.base_a + i * pc.T, orow = pc.base_o + i * pc.T;
#if defined(SM_BWD)
    uint br = pc.base_b + i * pc.T;
    float dot = 0.0;
    for (uint j = 0u; j <= t; j++) dot = weft_add(dot, weft_mul(a[ar + j], bb[br + j]));
    for (uint j = 0u; j <= t; j++)
      o[orow + j] = weft_canon(weft_mul(weft_mul(a[ar + j], weft_sub(bb[br + j], dot)), pc.scale));
#else
    float mx = weft_mul(a[ar], pc.scale);
    for (uint j = 1u; j <= t; j++) {
      float z = weft_mul(a[ar + j], pc.scale);
      if (weft_gt(z, mx)) mx = z;
    }
    float sum = 0.0;
    for (uint j = 0u; j <= t; j++) {
      float e = weft_expf(weft_sub(weft_mul(a[ar + j], pc.scale), mx));
      o[orow + j] = e;
      sum = weft_add(sum, e);
    }
    float inv = weft_recipf(sum);
    for (uint j = 0u; j <= t; j++) o[orow + j] = weft_canon(weft_mul(o[orow + j], inv));
#endif
    for (uint j = t + 1u; j < pc.T; j++) o[orow + j] = 0.0;
  }
}
