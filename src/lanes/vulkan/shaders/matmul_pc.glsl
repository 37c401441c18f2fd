// matmul_pc.glsl - the push constants of both matmul kernels. A dispatch computes an M x N block of c for
// the k range [0, K) of its chunk, for gl_NumWorkGroups.z batch entries. Element (i,k) of a is at
// base_a + i*lda + k (trans_a: base_a + k*lda + i), (k,j) of b at base_b + k*ldb + j (trans_b: base_b +
// j*ldb + k), (i,j) of c at base_c + i*ldc + j; batch entry p adds p*stride_*. All relative to the bound
// windows, so every index fits 32 bits. The epilogue (epilogue.glsl; exact kernels, the last k chunk only)
// reads the bias row at base_bias + j and the residual at (c's index) - base_c + base_r, and writes GELU's
// output at (c's index) - base_c + base_g.
layout(push_constant) uniform P {
  uint M, N, K;
  uint lda, ldb, ldc;
  uint base_a, base_b, base_c;
  uint stride_a, stride_b, stride_c;
  uint flags; // 1: trans_a, 2: trans_b, 4: accumulate onto c (a later k chunk); epilogue: 8 bias, 16 residual, 32 gelu
  uint base_bias, base_r, base_g;
} pc;
