// epilogue.glsl - the exact matmul kernels' epilogue: the ops a lane fuses into a matmul (src/lanes/fuse.h)
// applied to one finished element of c, each exactly as its own kernel computes it (ew.comp's add, tx_gelu's
// forward), in the order the ops came, every result stored canonical: c = c + bias[j]; c = c + r[i,j];
// g[i,j] = gelu(c). The caller stores the returned value into c. Bindings 3 to 5; pc.flags bits 8, 16, 32
// (matmul_pc.glsl) say which steps run. Include after matmul_pc.glsl, common.glsl and wmath.glsl.
layout(set = 0, binding = 3) restrict readonly buffer EBias { float e_bias[]; };
layout(set = 0, binding = 4) restrict readonly buffer ERes { float e_res[]; };
layout(set = 0, binding = 5) restrict writeonly buffer EGelu { float e_gelu[]; };

const uint WEFT_EPI_BIAS = 8u, WEFT_EPI_RES = 16u, WEFT_EPI_GELU = 32u;
const uint WEFT_EPI_ANY = 56u;

// v: c[ci], already canonical; ci: its index in c's window; col: its column in the block.
float weft_epilogue(float v, uint ci, uint col) {
  if ((pc.flags & WEFT_EPI_BIAS) != 0u) v = weft_canon(weft_add(v, e_bias[pc.base_bias + col]));
  if ((pc.flags & WEFT_EPI_RES) != 0u) v = weft_canon(weft_add(v, e_res[ci - pc.base_c + pc.base_r]));
  if ((pc.flags & WEFT_EPI_GELU) != 0u) e_gelu[ci - pc.base_c + pc.base_g] = weft_canon(weft_gelu(v));
  return v;
}
