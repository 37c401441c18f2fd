#version 450
// tx_copy.comp - pure data movement on 32-bit words (fp32 or int32 alike: bit copies), built two ways:
//   COPY_PERMUTE: out element e (row-major over the output dims [d0, d1, d2, d3]) = in[i0*s0 + i1*s1 + i2*s2 +
//                 i3*s3], s the input strides of the output axes: [B,T,H,D] <-> [B,H,T,D] and any other
//                 permutation of up to four axes.
//   COPY_SLICE:   dst[r*dst_ld + c] = src[r*src_ld + c] for r < rows, c < cols: rows written into a
//                 preallocated tensor at an offset (a KV-cache append), the offsets folded into the bases.
// flags & 1 (float data): a NaN is stored as 0x7fc00000, as every weft kernel stores NaNs; clear for int32
// data, which is copied bit for bit.
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) readonly buffer Src { uint src[]; };
layout(set = 0, binding = 1) writeonly buffer Dst { uint dst[]; };

uint canon_bits(uint u, uint flags) {
  return ((flags & 1u) != 0u && (u & 0x7fffffffu) > 0x7f800000u) ? 0x7fc00000u : u;
}

#if defined(COPY_PERMUTE)
layout(push_constant) uniform P {
  uint count, d1, d2, d3;
  uint s0, s1, s2, s3;
  uint base_src, base_dst, flags;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint e = gl_GlobalInvocationID.x; e < pc.count; e += stride) {
    uint r = e, i3 = r % pc.d3;
    r /= pc.d3;
    uint i2 = r % pc.d2;
    r /= pc.d2;
    uint i1 = r % pc.d1, i0 = r / pc.d1;
    dst[pc.base_dst + e] = canon_bits(src[pc.base_src + i0 * pc.s0 + i1 * pc.s1 + i2 * pc.s2 + i3 * pc.s3], pc.flags);
  }
}
#elif defined(COPY_SLICE)
layout(push_constant) uniform P {
  uint rows, cols, src_ld, dst_ld;
  uint base_src, base_dst, flags;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u, count = pc.rows * pc.cols;
  for (uint e = gl_GlobalInvocationID.x; e < count; e += stride) {
    uint r = e / pc.cols, c = e % pc.cols;
    dst[pc.base_dst + r * pc.dst_ld + c] = canon_bits(src[pc.base_src + r * pc.src_ld + c], pc.flags);
  }
}
#else
#error tx_copy.comp: define COPY_PERMUTE or COPY_SLICE
#endif
