// softmax_exact.wgsl - the causal softmax (unfused attention's) and its backward under weft's exact
// contract, in the orders of src/core/reference_tx.c (weft_ref_causal_softmax_forward / _backward), through
// wmath.wgsl (which gpu.js puts in front of this file, and whose checks say when these values need the CPU).
// R blocks of [T, T]; row q = (block, t) reads columns 0 .. t:
//   sm_rows  (one invocation per row): z[j] = scores[j] * scale; mx = z[0], then z[j] > mx ? z[j] : mx for j
//            ascending; sum = 0; sum += weft_expf(z[j] - mx) ascending; inv = weft_recipf(sum)  -> STATS[2q..]
//   sm_probs (one per element):         probs = weft_expf(z[j] - mx) * inv for j <= t, +0 after
//   sm_bwd_dot (one per row):           dot = 0; dot += probs[j] * dprobs[j] ascending          -> STATS[q]
//   sm_bwd   (one per element):         dscores = (probs (dprobs - dot)) * scale for j <= t, +0 after
// weft_expf is a function of its argument alone, so the element pass computes each e[j] again with the
// bits the row pass summed.

struct Params {
  keep : u32,   // always 0 (wmath.wgsl)
  rows : u32,   // R * T
  t : u32,      // T
  scale : u32,  // as bits
}

@group(0) @binding(0) var<uniform> prm : Params;
@group(0) @binding(1) var<storage, read_write> status : atomic<u32>;
@group(0) @binding(2) var<storage, read> S : array<u32>;    // scores (forward), probs (backward)
@group(0) @binding(3) var<storage, read> DP : array<u32>;   // dprobs (backward)
@group(0) @binding(4) var<storage, read_write> STATS : array<u32>;
@group(0) @binding(5) var<storage, read_write> OUT : array<u32>;

fn report() {
  if (weft_bad != 0u) {
    atomicOr(&status, 1u);
  }
}

@compute @workgroup_size(64)
fn sm_rows(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let q = weft_index(gid, nwg);
  if (q >= prm.rows) {
    return;
  }
  let T = prm.t;
  let t = q % T;
  let base = q * T;
  let scale = weft_in(prm.scale);
  var mx = weft_mul(weft_in(S[base]), scale);
  for (var j = 1u; j <= t; j = j + 1u) {
    let z = weft_mul(weft_in(S[base + j]), scale);
    if (z > mx) {
      mx = z;
    }
  }
  var sum = 0.0;
  for (var j = 0u; j <= t; j = j + 1u) {
    let z = weft_mul(bitcast<f32>(S[base + j]), scale);
    sum = weft_add(sum, weft_expf(weft_sub(z, mx)));
  }
  STATS[2u * q] = weft_out(mx);
  STATS[2u * q + 1u] = weft_out(weft_recipf(sum));
  report();
}

@compute @workgroup_size(64)
fn sm_probs(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let i = weft_index(gid, nwg);
  if (i >= prm.rows * prm.t) {
    return;
  }
  let q = i / prm.t;
  let j = i - q * prm.t;
  if (j > q % prm.t) {
    OUT[i] = 0u;
    return;
  }
  let mx = bitcast<f32>(STATS[2u * q]);
  let inv = bitcast<f32>(STATS[2u * q + 1u]);
  let z = weft_mul(weft_in(S[i]), weft_in(prm.scale));
  OUT[i] = weft_out(weft_mul_n(weft_expf(weft_sub(z, mx)), inv));
  report();
}

@compute @workgroup_size(64)
fn sm_bwd_dot(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let q = weft_index(gid, nwg);
  if (q >= prm.rows) {
    return;
  }
  let t = q % prm.t;
  let base = q * prm.t;
  var dot = 0.0;
  for (var j = 0u; j <= t; j = j + 1u) {
    dot = weft_add(dot, weft_mul(weft_in(S[base + j]), weft_in(DP[base + j])));
  }
  STATS[q] = weft_out(dot);
  report();
}

@compute @workgroup_size(64)
fn sm_bwd(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let i = weft_index(gid, nwg);
  if (i >= prm.rows * prm.t) {
    return;
  }
  let q = i / prm.t;
  let j = i - q * prm.t;
  if (j > q % prm.t) {
    OUT[i] = 0u;
    return;
  }
  let dot = bitcast<f32>(STATS[q]);
  let g = weft_mul(weft_in(S[i]), weft_sub(weft_in(DP[i]), dot));
  OUT[i] = weft_out(weft_mul(g, weft_in(prm.scale)));
  report();
}
