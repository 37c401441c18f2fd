#version 450
// sum_rows.comp - out[j] = 0 + x[0,j] + x[1,j] + ..., rows ascending, one thread per column. A chunk of rows
// continues the sum already in out (accum), which is the same sequence of roundings.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(set = 0, binding = 0) restrict readonly buffer X { float x[]; };
layout(set = 0, binding = 2) restrict buffer O { float o[]; };

layout(push_constant) uniform P {
  uint rows, cols, ldx;
  uint base_x, base_o;
  uint accum;
} pc;

void main() {
  uint j = gl_GlobalInvocationID.x;
  if (j >= pc.cols) return;
  float acc = pc.accum != 0u ? o[pc.base_o + j] : 0.0;
  for (uint i = 0u; i < pc.rows; i++) acc = weft_add(acc, x[pc.base_x + i * pc.ldx + j]);
  o[pc.base_o + j] = weft_canon(acc);
}
