#version 450
// tx_wmath_probe.comp - the GLSL scalar functions of wmath.glsl on every element, for test_vk_tx.c to compare
// with src/core/wmath.c bit for bit: FN 0 recip, 1 rsqrt, 2 sqrt, 3 tanh, 4 exp, 5 log (no canonicalisation
// here: the C returns 0x7fc00000 for its own NaNs and the test compares NaNs normalised).
#include "common.glsl"
#include "wmath.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint FN = 0;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint count; } pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint e = gl_GlobalInvocationID.x; e < pc.count; e += stride) {
    float v = x[e], r;
    if (FN == 0u) r = weft_recipf(v);
    else if (FN == 1u) r = weft_rsqrtf(v);
    else if (FN == 2u) r = weft_sqrtf(v);
    else if (FN == 3u) r = weft_tanhf(v);
    else if (FN == 4u) r = weft_expf(v);
    else r = weft_logf(v);
    o[e] = r;
  }
}
