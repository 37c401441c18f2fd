#version 450
// ew.comp - the elementwise ops (add, relu, relu_backward, scale, axpy), one per specialisation of OP, each
// element exactly as src/core/reference.c computes it (weft_add / weft_mul: subnormals kept on any device). A chunk of `count` elements; indices are relative to
// the bound windows (base_*). Threads stride over the chunk so the group count stays under the device limit.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0; // 0 add, 1 relu, 2 relu_backward, 3 scale, 4 axpy

// Not `restrict`: an in-place op binds its output's buffer as an input too (each element is read, then
// written, by one invocation).
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Y { float y[]; };
layout(set = 0, binding = 2) buffer O { float o[]; };

layout(push_constant) uniform P {
  uint count;
  uint base_x, base_y, base_o;
  uint ymod0; // add with a broadcast row: y index = (ymod0 + e) % ycols
  uint ycols; // 0: y has x's shape
  float alpha;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint e = gl_GlobalInvocationID.x; e < pc.count; e += stride) {
    float r;
    if (OP == 0u) {
      uint yi = pc.ycols != 0u ? (pc.ymod0 + e) % pc.ycols : e;
      r = weft_add(x[pc.base_x + e], y[pc.base_y + yi]);
    } else if (OP == 1u) {
      float v = x[pc.base_x + e];
      r = weft_positive(v) ? v : (weft_isnan(v) ? v : 0.0);
    } else if (OP == 2u) {
      // x binding: the incoming gradient, y binding: relu's input.
      r = weft_positive(y[pc.base_y + e]) ? x[pc.base_x + e] : 0.0;
    } else if (OP == 3u) {
      r = weft_mul(pc.alpha, x[pc.base_x + e]);
    } else {
      r = weft_add(weft_mul(pc.alpha, x[pc.base_x + e]), o[pc.base_o + e]);
    }
    o[pc.base_o + e] = weft_canon(r);
  }
}
