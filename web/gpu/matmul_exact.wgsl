// matmul_exact.wgsl - C = A . B (row-major, f32) under weft's exact contract: for each output element
// acc = 0; for k ascending: acc = acc + a[i,k] * b[k,j], the product and the sum rounded separately.
//
// Tiling: a workgroup of 8 x 8 threads computes a 32 x 32 tile of C, each thread a 4 x 4 block; A and B
// are staged through workgroup memory 16 values of k at a time. Tiling changes where values are read
// from, never the order of one element's sum: every thread walks k ascending across the tiles, carrying
// its partial sums in registers, and stops at k itself (no zero padding enters a sum).
//
// NaN: C is written as bits, and a NaN result as the canonical quiet NaN 0x7fc00000 (every exact lane stores
// that one), tested on the bits: WGSL lets an implementation assume no NaN occurs, so a float test could be
// folded away, and a float store of a NaN keeps whatever bits the device made.
//
// Why the xor: WGSL, like SPIR-V without the NoContraction decoration, lets a driver fuse a multiply
// followed by an add into one fma, which rounds once and changes the bits. The product is therefore
// passed through its bit pattern xor `dims.keep`, a uniform the host always sets to 0: no compiler can
// prove that the xor is the identity, so it must round the product before the add sees it.

struct Dims {
  m : u32,
  n : u32,
  k : u32,
  keep : u32, // always 0; see above
}

@group(0) @binding(0) var<storage, read> A : array<f32>;
@group(0) @binding(1) var<storage, read> B : array<f32>;
@group(0) @binding(2) var<storage, read_write> C : array<u32>; // f32 bits
@group(0) @binding(3) var<uniform> dims : Dims;

const TM : u32 = 32u; // rows of C per workgroup
const TN : u32 = 32u; // columns of C per workgroup
const TK : u32 = 16u; // depth staged per step
const R : u32 = 4u;   // each thread: R x R outputs
const THREADS : u32 = 64u;

var<workgroup> As : array<f32, 512>; // [kk][row], TK x TM
var<workgroup> Bs : array<f32, 512>; // [kk][col], TK x TN

fn canonical_bits(v : f32) -> u32 {
  let u = bitcast<u32>(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return 0x7fc00000u;
  }
  return u;
}

fn rounded_product(a : f32, b : f32) -> f32 {
  return bitcast<f32>(bitcast<u32>(a * b) ^ dims.keep);
}

@compute @workgroup_size(8, 8, 1)
fn main(@builtin(workgroup_id) wg : vec3<u32>, @builtin(local_invocation_id) lid : vec3<u32>,
        @builtin(local_invocation_index) li : u32) {
  let m = dims.m;
  let n = dims.n;
  let k = dims.k;
  let row0 = wg.y * TM;
  let col0 = wg.x * TN;
  var acc : array<f32, 16>; // zero-initialised: every sum starts at +0

  for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
    for (var e = li; e < TM * TK; e = e + THREADS) {
      let r = e / TK;
      let kk = e % TK;
      var v = 0.0;
      if (row0 + r < m && k0 + kk < k) {
        v = A[(row0 + r) * k + k0 + kk];
      }
      As[kk * TM + r] = v;
    }
    for (var e = li; e < TK * TN; e = e + THREADS) {
      let kk = e / TN;
      let c = e % TN;
      var v = 0.0;
      if (col0 + c < n && k0 + kk < k) {
        v = B[(k0 + kk) * n + col0 + c];
      }
      Bs[kk * TN + c] = v;
    }
    workgroupBarrier();
    let kmax = min(TK, k - k0);
    for (var kk = 0u; kk < kmax; kk = kk + 1u) {
      var a : array<f32, 4>;
      var b : array<f32, 4>;
      for (var i = 0u; i < R; i = i + 1u) {
        a[i] = As[kk * TM + lid.y * R + i];
        b[i] = Bs[kk * TN + lid.x * R + i];
      }
      for (var i = 0u; i < R; i = i + 1u) {
        for (var j = 0u; j < R; j = j + 1u) {
          acc[i * R + j] = acc[i * R + j] + rounded_product(a[i], b[j]);
        }
      }
    }
    workgroupBarrier();
  }

  for (var i = 0u; i < R; i = i + 1u) {
    let r = row0 + lid.y * R + i;
    for (var j = 0u; j < R; j = j + 1u) {
      let c = col0 + lid.x * R + j;
      if (r < m && c < n) {
        C[r * n + c] = canonical_bits(acc[i * R + j]);
      }
    }
  }
}
