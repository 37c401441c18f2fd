// common.glsl - what every weft kernel shares: the float-control execution modes and bit-level tests.
//
// DenormPreserve and SignedZeroInfNanPreserve ask for IEEE behaviour of subnormals, signed zeros, infinities
// and NaNs, which the exact contract needs (weft_expf produces subnormals on purpose). A device that cannot
// honour one of them gets the module with that mode removed at load time (vk_ops.c) and says so in its
// details line.
#extension GL_EXT_spirv_intrinsics : require
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4464], 4459, 32);
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4466], 4461, 32);

// Tests written on the bits, so that no compiler assumption about NaN can change them.
bool weft_isnan(float v) { return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u; }
// v > 0 for every v, NaN included (false), -0 included (false).
bool weft_positive(float v) {
  uint u = floatBitsToUint(v);
  return u != 0u && u <= 0x7f800000u;
}
