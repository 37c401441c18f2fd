#version 450
// softmax_loss.comp - the mean loss: tot = 0 + row_loss[0] + row_loss[1] + ..., rows ascending, then
// tot * inv_rows. One thread: the canonical order is a sequence. A chunk of rows continues the running sum
// left in out[0] (accum); only the last chunk scales it (final).
#include "common.glsl"

layout(local_size_x = 1) in;

layout(set = 0, binding = 0) restrict readonly buffer L { float rowloss[]; };
layout(set = 0, binding = 2) restrict buffer O { float o[]; };

layout(push_constant) uniform P {
  uint rows;
  uint base_l, base_o;
  uint flags; // 1: accum (continue from o), 2: final (scale by inv_rows)
  float inv_rows;
} pc;

void main() {
  float tot = (pc.flags & 1u) != 0u ? o[pc.base_o] : 0.0;
  for (uint i = 0u; i < pc.rows; i++) tot = weft_add(tot, rowloss[pc.base_l + i]);
  o[pc.base_o] = weft_canon((pc.flags & 2u) != 0u ? weft_mul(tot, pc.inv_rows) : tot);
}
