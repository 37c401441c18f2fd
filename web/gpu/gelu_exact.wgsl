// gelu_exact.wgsl - GPT-2's GELU (tanh form) and its backward under weft's exact contract: one invocation per
// element, each step of src/core/reference_tx.c's weft_ref_gelu_forward / _backward in its order, through
// wmath.wgsl (which gpu.js puts in front of this file, and whose checks say when these values need the CPU).
//   gelu_fwd: y = (0.5 x) (1 + tanh(S (x + K x x x)))
//   gelu_bwd: dx = (0.5 (1 + th) + ((((0.5 x) sech2) S) (1 + (3K x) x))) dy, sech2 = 1 - th th

struct Params {
  keep : u32, // always 0 (wmath.wgsl)
  n : u32,    // elements
}

@group(0) @binding(0) var<uniform> prm : Params;
@group(0) @binding(1) var<storage, read_write> status : atomic<u32>;
@group(0) @binding(2) var<storage, read> X : array<u32>;
@group(0) @binding(3) var<storage, read> DY : array<u32>; // the backward's
@group(0) @binding(4) var<storage, read_write> OUT : array<u32>;

const GELU_S : u32 = 0x3f4c422au;  // 0.79788458347320556640625f, sqrt(2/pi)
const GELU_K : u32 = 0x3d372714u;  // 0.044715f
const GELU_3K : u32 = 0x3e095d4fu; // 0.134145f

@compute @workgroup_size(64)
fn gelu_fwd(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let i = weft_index(gid, nwg);
  if (i >= prm.n) {
    return;
  }
  let x = weft_in(X[i]);
  var c = weft_mul(bitcast<f32>(GELU_K), x);
  c = weft_mul(c, x);
  c = weft_mul(c, x);
  let u = weft_mul(bitcast<f32>(GELU_S), weft_add(x, c));
  let th = weft_tanhf(u);
  let h = weft_mul(0.5, x);
  OUT[i] = weft_out(weft_mul(h, weft_add(1.0, th)));
  if (weft_bad != 0u) {
    atomicOr(&status, 1u);
  }
}

@compute @workgroup_size(64)
fn gelu_bwd(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let i = weft_index(gid, nwg);
  if (i >= prm.n) {
    return;
  }
  let x = weft_in(X[i]);
  let dy = weft_in(DY[i]);
  var c = weft_mul(bitcast<f32>(GELU_K), x);
  c = weft_mul(c, x);
  c = weft_mul(c, x);
  let u = weft_mul(bitcast<f32>(GELU_S), weft_add(x, c));
  let th = weft_tanhf(u);
  let sech2 = weft_sub(1.0, weft_mul(th, th));
  let l = weft_mul(0.5, weft_add(1.0, th));
  var r = weft_mul(0.5, x);
  r = weft_mul(r, sech2);
  r = weft_mul(r, bitcast<f32>(GELU_S));
  var k = weft_mul(bitcast<f32>(GELU_3K), x);
  k = weft_mul(k, x);
  r = weft_mul(r, weft_add(1.0, k));
  OUT[i] = weft_out(weft_mul(weft_add(l, r), dy));
  if (weft_bad != 0u) {
    atomicOr(&status, 1u);
  }
}
