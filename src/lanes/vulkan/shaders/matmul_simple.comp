#version 450
// matmul_simple.comp - one thread per output element, any strides: the path for small or thin products
// where a 64- or 128-wide tile would mostly idle, and the tiled kernel's exact fallback's model. Each step is
// weft_mul / weft_add, so subnormals come out right on hardware that flushes them. For each c[i,j]: acc = 0 (or the partial sum already in c
// when a long k is split into chunks); for k ascending acc = acc + a[i,k] * b[k,j]; then, on the last k
// chunk, the fused epilogue if any (epilogue.glsl).
#include "common.glsl"

layout(local_size_x = 16, local_size_y = 16) in;

layout(set = 0, binding = 0) restrict readonly buffer A { float a[]; };
layout(set = 0, binding = 1) restrict readonly buffer B { float b[]; };
layout(set = 0, binding = 2) restrict buffer C { float c[]; };

#include "matmul_pc.glsl"
#include "wmath.glsl"
#include "epilogue.glsl"

void main() {
  uint j = gl_GlobalInvocationID.x, i = gl_GlobalInvocationID.y, p = gl_WorkGroupID.z;
  if (i >= pc.M || j >= pc.N) return;
  uint ab = pc.base_a + p * pc.stride_a, bb = pc.base_b + p * pc.stride_b;
  uint ci = pc.base_c + p * pc.stride_c + i * pc.ldc + j;
  // Element (i,k) of op(a) and (k,j) of op(b) are at a step of ask/bsk per k.
  uint ai = ab + ((pc.flags & 1u) != 0u ? i : i * pc.lda);
  uint ask = (pc.flags & 1u) != 0u ? pc.lda : 1u;
  uint bi = bb + ((pc.flags & 2u) != 0u ? j * pc.ldb : j);
  uint bsk = (pc.flags & 2u) != 0u ? 1u : pc.ldb;
  float acc = (pc.flags & 4u) != 0u ? c[ci] : 0.0;
  for (uint k = 0u; k < pc.K; k++) acc = weft_add(acc, weft_mul(a[ai + k * ask], b[bi + k * bsk]));
  float v = weft_canon(acc);
  if ((pc.flags & WEFT_EPI_ANY) != 0u) v = weft_epilogue(v, ci, j);
  c[ci] = v;
}
