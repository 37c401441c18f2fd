// layernorm_exact.wgsl - layernorm forward and backward under weft's exact contract, in the orders of
// src/core/reference_tx.c (weft_ref_layernorm_forward / _backward), through wmath.wgsl (which gpu.js puts
// in front of this file, and whose checks say when these values need the CPU). Rows of C channels:
//   ln_stats (one invocation per row): s = 0; s += x[c] ascending; mean = s * invC;
//            v = 0; v += (x[c] - mean)^2 ascending; rstd = rsqrt(v * invC + eps)    -> STATS[2r], STATS[2r+1]
//   ln_norm  (one per element):        y = (((x - mean) * rstd) * gamma) + beta
//   ln_bwd_ab (one per row):           a = sum g, b = sum g n ascending (g = gamma dy, n = (x - mean) rstd),
//                                      each times invC                             -> STATS[2r], STATS[2r+1]
//   ln_bwd_dx (one per element):       dx = ((g - a) - n b) rstd
//   ln_bwd_dgb (one per channel):      rows ascending, from the values given: dbeta += dy, dgamma += n dy
// invC = weft_recipf((float)C), with (float)C given by the host (prm.cf).

struct Params {
  keep : u32,  // always 0 (wmath.wgsl)
  rows : u32,  // N
  cols : u32,  // C
  cf : u32,    // (float)C, as bits
  eps : u32,   // the forward's eps, as bits
  flags : u32, // ln_bwd_dgb: 1 = dgamma, 2 = dbeta
}

@group(0) @binding(0) var<uniform> prm : Params;
@group(0) @binding(1) var<storage, read_write> status : atomic<u32>;
@group(0) @binding(2) var<storage, read> X : array<u32>;
@group(0) @binding(3) var<storage, read> GB : array<u32>;         // gamma [C], then (forward) beta [C]
@group(0) @binding(4) var<storage, read> DY : array<u32>;         // the backward's
@group(0) @binding(5) var<storage, read> MR : array<u32>;         // the backward's: mean [N], then rstd [N]
@group(0) @binding(6) var<storage, read_write> STATS : array<u32>; // per row: mean, rstd (forward); a, b
@group(0) @binding(7) var<storage, read_write> OUT : array<u32>;   // y (forward), dx (backward)
@group(0) @binding(8) var<storage, read_write> DGB : array<u32>;   // dgamma [C], then dbeta [C], accumulated

fn report() {
  if (weft_bad != 0u) {
    atomicOr(&status, 1u);
  }
}

@compute @workgroup_size(64)
fn ln_stats(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let r = weft_index(gid, nwg);
  if (r >= prm.rows) {
    return;
  }
  let C = prm.cols;
  let base = r * C;
  let invC = weft_recipf(weft_in(prm.cf));
  var s = 0.0;
  for (var c = 0u; c < C; c = c + 1u) {
    s = weft_add(s, weft_in(X[base + c]));
  }
  let mu = weft_mul(s, invC);
  var v = 0.0;
  for (var c = 0u; c < C; c = c + 1u) {
    let d = weft_sub(bitcast<f32>(X[base + c]), mu);
    v = weft_add(v, weft_mul(d, d));
  }
  let variance = weft_mul(v, invC);
  let rs = weft_rsqrtf(weft_add(variance, weft_in(prm.eps)));
  STATS[2u * r] = weft_out(mu);
  STATS[2u * r + 1u] = weft_out(rs);
  report();
}

@compute @workgroup_size(64)
fn ln_norm(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let i = weft_index(gid, nwg);
  if (i >= prm.rows * prm.cols) {
    return;
  }
  let r = i / prm.cols;
  let c = i - r * prm.cols;
  let mu = bitcast<f32>(STATS[2u * r]);
  let rs = bitcast<f32>(STATS[2u * r + 1u]);
  let n = weft_mul(weft_sub(weft_in(X[i]), mu), rs);
  let o = weft_mul(n, weft_in(GB[c]));
  OUT[i] = weft_out(weft_add(o, weft_in(GB[prm.cols + c])));
  report();
}

@compute @workgroup_size(64)
fn ln_bwd_ab(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let r = weft_index(gid, nwg);
  if (r >= prm.rows) {
    return;
  }
  let C = prm.cols;
  let base = r * C;
  let invC = weft_recipf(weft_in(prm.cf));
  let mu = weft_in(MR[r]);
  let rs = weft_in(MR[prm.rows + r]);
  var a = 0.0;
  var b = 0.0;
  for (var c = 0u; c < C; c = c + 1u) {
    let n = weft_mul(weft_sub(weft_in(X[base + c]), mu), rs);
    let g = weft_mul(weft_in(GB[c]), weft_in(DY[base + c]));
    a = weft_add(a, g);
    b = weft_add(b, weft_mul(g, n));
  }
  STATS[2u * r] = weft_out(weft_mul(a, invC));
  STATS[2u * r + 1u] = weft_out(weft_mul(b, invC));
  report();
}

@compute @workgroup_size(64)
fn ln_bwd_dx(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let i = weft_index(gid, nwg);
  if (i >= prm.rows * prm.cols) {
    return;
  }
  let r = i / prm.cols;
  let c = i - r * prm.cols;
  let mu = weft_in(MR[r]);
  let rs = weft_in(MR[prm.rows + r]);
  let a = bitcast<f32>(STATS[2u * r]);
  let b = bitcast<f32>(STATS[2u * r + 1u]);
  let n = weft_mul(weft_sub(weft_in(X[i]), mu), rs);
  let g = weft_mul(weft_in(GB[c]), weft_in(DY[i]));
  let t = weft_sub(weft_sub(g, a), weft_mul(n, b));
  OUT[i] = weft_out(weft_mul(t, rs));
  report();
}

@compute @workgroup_size(64)
fn ln_bwd_dgb(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) nwg : vec3<u32>) {
  let c = weft_index(gid, nwg);
  if (c >= prm.cols) {
    return;
  }
  let wg = (prm.flags & 1u) != 0u;
  let wb = (prm.flags & 2u) != 0u;
  var dg = 0.0;
  var db = 0.0;
  if (wg) {
    dg = weft_in(DGB[c]);
  }
  if (wb) {
    db = weft_in(DGB[prm.cols + c]);
  }
  for (var r = 0u; r < prm.rows; r = r + 1u) {
    let i = r * prm.cols + c;
    let dy = weft_in(DY[i]);
    let n = weft_mul(weft_sub(weft_in(X[i]), weft_in(MR[r])), weft_in(MR[prm.rows + r]));
    db = weft_add(db, dy);
    dg = weft_add(dg, weft_mul(n, dy));
  }
  if (wg) {
    DGB[c] = weft_out(dg);
  }
  if (wb) {
    DGB[prm.cols + c] = weft_out(db);
  }
  report();
}
