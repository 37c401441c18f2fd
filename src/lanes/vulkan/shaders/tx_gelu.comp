#version 450
// tx_gelu.comp - GPT-2's GELU (tanh form), forward or (GELU_BWD) backward, per element exactly as
// src/core/reference_tx.c. Elements [0, count) relative to the bound windows; threads stride over them.
#include "common.glsl"
#include "wmath.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Dy { float dy[]; }; // backward only
layout(set = 0, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint count;
  uint base_x, base_dy, base_o;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint e = gl_GlobalInvocationID.x; e < pc.count; e += stride) {
    float xi = x[pc.base_x + e];
#if defined(GELU_BWD)
    float S = uintBitsToFloat(WEFT_GELU_S), K = uintBitsToFloat(WEFT_GELU_K);
    float c = weft_mul(K, xi);
    c = weft_mul(c, xi);
    c = weft_mul(c, xi);
    float u = weft_mul(S, weft_add(xi, c));
    float th = weft_tanhf(u);
    float sech2 = weft_sub(1.0, weft_mul(th, th));
    float l = weft_mul(0.5, weft_add(1.0, th));
    float r = weft_mul(0.5, xi);
    r = weft_mul(r, sech2);
    r = weft_mul(r, S);
    float k = weft_mul(uintBitsToFloat(WEFT_GELU_3K), xi);
    k = weft_mul(k, xi);
    r = weft_mul(r, weft_add(1.0, k));
    o[pc.base_o + e] = weft_canon(weft_mul(weft_add(l, r), dy[pc.base_dy + e]));
#else
    o[pc.base_o + e] = weft_canon(weft_gelu(xi));
#endif
  }
}
