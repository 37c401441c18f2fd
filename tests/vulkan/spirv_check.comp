#version 450
// spirv_check.comp - the inputs of the SPIR-V check's own tests: the same dot product written three ways.
// CASE_plain / CASE_glslc_fuses: a plain accumulation (a driver, or glslc -O itself, may fuse it);
// CASE_fma: an explicit fma(); CASE_precise: the accumulation `precise`, as weft's kernels write it.
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(push_constant) uniform P { uint n; } pc;
void main() {
  uint i = gl_GlobalInvocationID.x;
#if defined(CASE_precise)
  precise float acc = 0.0;
#else
  float acc = 0.0;
#endif
  for (uint k = 0u; k < pc.n; k++) {
#if defined(CASE_fma)
    acc = fma(a[i + k], a[k], acc);
#else
    acc = acc + a[i + k] * a[k];
#endif
  }
  a[i] = acc;
}
