#version 450
// tx_adamw.comp - one AdamW step per element, in place on param, m and v, exactly as weft_ref_adamw
// (src/core/reference_tx.c); bc1 and bc2 are the host's weft_ref_adamw_bias_correction of the step. Elements
// [0, count) relative to the bound windows; threads stride over them.
#include "common.glsl"
#include "wmath.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) buffer Param { float param[]; };
layout(set = 0, binding = 1) readonly buffer Grad { float grad[]; };
layout(set = 0, binding = 2) buffer M { float m[]; };
layout(set = 0, binding = 3) buffer V { float v[]; };
layout(push_constant) uniform P {
  uint count;
  float lr, beta1, beta2, eps, weight_decay, bc1, bc2;
  uint base_p, base_g, base_m, base_v;
} pc;

void main() {
  float o1 = weft_sub(1.0, pc.beta1), o2 = weft_sub(1.0, pc.beta2);
  float r1 = weft_recipf(pc.bc1), r2 = weft_recipf(pc.bc2);
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint e = gl_GlobalInvocationID.x; e < pc.count; e += stride) {
    float g = grad[pc.base_g + e], p = param[pc.base_p + e];
    float mm = weft_add(weft_mul(pc.beta1, m[pc.base_m + e]), weft_mul(o1, g));
    float vv = weft_add(weft_mul(pc.beta2, v[pc.base_v + e]), weft_mul(weft_mul(o2, g), g));
    float mh = weft_mul(mm, r1), vh = weft_mul(vv, r2);
    float den = weft_add(weft_sqrtf(vh), pc.eps);
    float u = weft_add(weft_mul(mh, weft_recipf(den)), weft_mul(pc.weight_decay, p));
    m[pc.base_m + e] = weft_canon(mm);
    v[pc.base_v + e] = weft_canon(vv);
    param[pc.base_p + e] = weft_canon(weft_sub(p, weft_mul(pc.lr, u)));
  }
}
