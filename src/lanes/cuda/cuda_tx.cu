/* cuda_tx.cu - the transformer ops' kernels (GPT-2's set) for the CUDA lane under the exact contract: each
 * returns the bits of its reference in src/core/reference_tx.c. Included at the end of cuda_kernels.cu, so
 * it is built into the same embedded fatbin with the same flags and uses that file's DEV, w_canon, w_expf
 * and w_logf; argument blocks and launch shapes are in cuda_tx_args.h.
 *
 * The rules of cuda_kernels.cu hold: every multiply and add is __fmul_rn / __fadd_rn / __fsub_rn, nothing
 * divides or takes a square root except through w_recipf / w_rsqrtf / w_sqrtf (transcribed step for step
 * from src/core/wmath.c), every float stored goes through w_canon. Sums run in the reference's order: one
 * thread walks an ascending loop, or a warp loads 32 values at a time and every lane adds them one by one in
 * index order (each lane then holds the same running sum). */
#ifndef WEFT_CUDA_KERNELS_BODY
#error "cuda_tx.cu is built as part of cuda_kernels.cu (it is #included there)"
#endif

#include "cuda_tx_args.h"

#define TX_FULL 0xffffffffu

/* ------------------------------------------------------------------ recip, rsqrt, sqrt, tanh (wmath.c) */

DEV float w_bits(unsigned u) { return __uint_as_float(u); }
DEV float w_p2(int n) { return __uint_as_float((unsigned)(n + 127) << 23); }

DEV float w_scale2(float x, int k) {
  if (k > 127) return __fmul_rn(__fmul_rn(x, w_p2(127)), w_p2(k - 127));
  if (k < -126) return __fmul_rn(__fmul_rn(x, w_p2(k + 64)), w_p2(-64));
  return __fmul_rn(x, w_p2(k));
}

DEV float w_split_exp(float x, int *e_out) {
  int e = 0;
  if (x < 1.17549435e-38f) {
    x = __fmul_rn(x, 16777216.0f);
    e = -24;
  }
  unsigned u = __float_as_uint(x);
  *e_out = e + (int)((u >> 23) & 0xffu) - 127;
  return __uint_as_float((u & 0x007fffffu) | 0x3f800000u);
}

DEV float w_recip_mant(float m) {
  float r = __fsub_rn(1.41176474094390869140625f, __fmul_rn(0.470588237047195434570312f, m));
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float e = __fsub_rn(1.0f, __fmul_rn(m, r));
    r = __fadd_rn(r, __fmul_rn(r, e));
  }
  return r;
}

DEV float w_recipf(float x) {
  if (x != x) return w_bits(0x7fc00000u);
  float a = x < 0.0f ? -x : x;
  float s = x < 0.0f ? -1.0f : 1.0f;
  if (a == 0.0f) return __float_as_uint(x) ? w_bits(0xff800000u) : w_bits(0x7f800000u);
  if (a == w_bits(0x7f800000u)) return __fmul_rn(s, 0.0f);
  int e;
  float m = w_split_exp(a, &e);
  return __fmul_rn(s, w_scale2(w_recip_mant(m), -e));
}

DEV float w_rsqrt_mant(float m) {
  float y = __uint_as_float(0x5f3759dfu - (__float_as_uint(m) >> 1));
  float h = __fmul_rn(0.5f, m);
#pragma unroll
  for (int i = 0; i < 3; i++) {
    float t = __fmul_rn(h, y);
    t = __fmul_rn(t, y);
    t = __fsub_rn(1.5f, t);
    y = __fmul_rn(y, t);
  }
  float t = __fmul_rn(h, y);
  t = __fmul_rn(t, y);
  t = __fsub_rn(0.5f, t);
  y = __fadd_rn(y, __fmul_rn(y, t));
  return y;
}

DEV float w_split_exp_even(float x, int *e_out) {
  int e;
  float m = w_split_exp(x, &e);
  if (e & 1) {
    m = __fmul_rn(m, 2.0f);
    e = e - 1;
  }
  *e_out = e;
  return m;
}

DEV float w_rsqrtf(float x) {
  if (x != x || x < 0.0f) return w_bits(0x7fc00000u);
  if (x == 0.0f) return __float_as_uint(x) == 0x80000000u ? w_bits(0xff800000u) : w_bits(0x7f800000u);
  if (x == w_bits(0x7f800000u)) return 0.0f;
  int e;
  float m = w_split_exp_even(x, &e);
  return w_scale2(w_rsqrt_mant(m), -e / 2);
}

DEV float w_sqrtf(float x) {
  if (x != x || x < 0.0f) return w_bits(0x7fc00000u);
  if (x == 0.0f || x == w_bits(0x7f800000u)) return x;
  int e;
  float m = w_split_exp_even(x, &e);
  float y = w_rsqrt_mant(m);
  float s = __fmul_rn(m, y);
  float r = __fsub_rn(m, __fmul_rn(s, s));
  s = __fadd_rn(s, __fmul_rn(__fmul_rn(0.5f, y), r));
  return w_scale2(s, e / 2);
}

__constant__ float W_TANH_C[12] = {
    -3.333333432674407958984375e-01f, 1.333333402872085571289062e-01f,  -5.396825447678565979003906e-02f,
    2.186948806047439575195312e-02f,  -8.863235823810100555419922e-03f, 3.592127934098243713378906e-03f,
    -1.455834368243813514709473e-03f, 5.900274263694882392883301e-04f,  -2.391291200183331966400146e-04f,
    9.691537707112729549407959e-05f,  -3.927832221961580216884613e-05f, 1.591890577401500195264816e-05f};

DEV float w_tanhf(float x) {
  if (x != x) return w_bits(0x7fc00000u);
  float a = x < 0.0f ? -x : x;
  float s = x < 0.0f ? -1.0f : 1.0f;
  if (a < 0.000244140625f) return x;
  if (a >= 10.0f) return s;
  float t;
  if (a < 0.75f) {
    float z = __fmul_rn(a, a);
    float p = W_TANH_C[11];
#pragma unroll
    for (int i = 10; i >= 0; i--) p = __fadd_rn(__fmul_rn(p, z), W_TANH_C[i]);
    t = __fadd_rn(a, __fmul_rn(a, __fmul_rn(z, p)));
  } else {
    float ex = w_expf(__fadd_rn(a, a));
    t = __fsub_rn(1.0f, __fmul_rn(2.0f, w_recipf(__fadd_rn(ex, 1.0f))));
  }
  return __fmul_rn(s, t);
}

/* ------------------------------------------------------------------------------------ warp helpers */

/* s + v[0] + v[1] + ... + v[n-1] in that order, v[q] held by lane q: every lane returns the same sum. */
DEV float warp_seq_add(float s, float v, int n) {
  for (int q = 0; q < n; q++) s = __fadd_rn(s, __shfl_sync(TX_FULL, v, q));
  return s;
}

/* The reference's `mx = z[0]; for j ascending from 1: mx = z[j] > mx ? z[j] : mx` over z[0..n), as a warp
 * reduction: with z[0] not NaN, that loop ends at the first (lowest index) element equal to the largest
 * non-NaN value (-0 and +0 equal); each lane keeps the first of its own (strict >, ascending), the
 * butterfly keeps the lower index on ties. With z[0] NaN it ends at z[0]. get(j) returns z[j]. */
template <typename G> DEV float warp_first_max(G get, long long n) {
  const int lane = threadIdx.x & 31;
  const float z0 = get(0);
  if (z0 != z0) return z0;
  float best = z0;
  long long bi = 0;
  for (long long j = lane; j < n; j += 32) {
    const float v = get(j);
    if (v > best) best = v, bi = j;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(TX_FULL, best, off);
    const long long oi = __shfl_xor_sync(TX_FULL, bi, off);
    if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
  }
  /* every lane now holds the same index; take the value from it bit for bit (the sign of a zero) */
  return __shfl_sync(TX_FULL, best, 0);
}

#define WARP_ID ((long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32)
#define WARPS ((long long)gridDim.x * (blockDim.x / 32))
#define GTID ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define GSTRIDE ((long long)gridDim.x * blockDim.x)

/* ------------------------------------------------------------------------------------ index check */

extern "C" __global__ void weft_tx_index_check(weft_tx_index_args p) {
  const int *idx = reinterpret_cast<const int *>(p.idx);
  for (long long i = GTID; i < p.n; i += GSTRIDE) {
    const int v = idx[i];
    if (v < 0 || (long long)v >= p.limit) atomicMin(reinterpret_cast<int *>(p.first_bad), (int)i);
  }
}

/* -------------------------------------------------------------------------------------- embedding */

extern "C" __global__ void weft_tx_embedding_fwd(weft_tx_embed_args p) {
  const int *tok = reinterpret_cast<const int *>(p.tok);
  const int *pos = reinterpret_cast<const int *>(p.pos);
  const float *wte = reinterpret_cast<const float *>(p.wte);
  const float *wpe = reinterpret_cast<const float *>(p.wpe);
  float *out = reinterpret_cast<float *>(p.out);
  const long long total = p.BT * p.C;
  for (long long e = GTID; e < total; e += GSTRIDE) {
    const long long bt = e / p.C, c = e - bt * p.C;
    const long long tk = tok[bt];
    const long long ps = pos ? (long long)pos[bt] : bt % p.T;
    if (tk < 0 || tk >= p.V || ps < 0 || ps >= p.P) continue;
    out[e] = w_canon(__fadd_rn(wte[tk * p.C + c], wpe[ps * p.C + c]));
  }
}

DEV long long eb_index(const weft_tx_embed_bwd_args &p, long long bt) {
  return p.idx ? (long long)reinterpret_cast<const int *>(p.idx)[bt] : bt % p.T;
}

extern "C" __global__ void weft_tx_embed_bwd_count(weft_tx_embed_bwd_args p) {
  int *count = reinterpret_cast<int *>(p.count);
  for (long long bt = GTID; bt < p.BT; bt += GSTRIDE) {
    const long long r = eb_index(p, bt);
    if (r >= 0 && r < p.nrows) atomicAdd(&count[r], 1);
  }
}

/* One block of 1024 threads: start[r] = count[0] + ... + count[r-1] for r <= nrows (integers: any order is
 * exact); count is zeroed for the fill. */
extern "C" __global__ void __launch_bounds__(1024) weft_tx_embed_bwd_scan(weft_tx_embed_bwd_args p) {
  __shared__ long long part[1024];
  int *count = reinterpret_cast<int *>(p.count);
  int *start = reinterpret_cast<int *>(p.start);
  const long long n = p.nrows + 1;
  const int tid = threadIdx.x, nt = blockDim.x;
  const long long chunk = (n + nt - 1) / nt;
  const long long lo = tid * chunk < n ? tid * chunk : n, hi = lo + chunk < n ? lo + chunk : n;
  long long s = 0;
  for (long long r = lo; r < hi; r++) s += r < p.nrows ? count[r] : 0;
  part[tid] = s;
  __syncthreads();
  if (tid == 0) {
    long long run = 0;
    for (int i = 0; i < nt; i++) {
      const long long v = part[i];
      part[i] = run;
      run += v;
    }
  }
  __syncthreads();
  long long run = part[tid];
  for (long long r = lo; r < hi; r++) {
    const long long c = r < p.nrows ? count[r] : 0;
    start[r] = (int)run;
    run += c;
    if (r < p.nrows) count[r] = 0;
  }
}

extern "C" __global__ void weft_tx_embed_bwd_fill(weft_tx_embed_bwd_args p) {
  int *count = reinterpret_cast<int *>(p.count);
  const int *start = reinterpret_cast<const int *>(p.start);
  int *list = reinterpret_cast<int *>(p.list);
  for (long long bt = GTID; bt < p.BT; bt += GSTRIDE) {
    const long long r = eb_index(p, bt);
    if (r >= 0 && r < p.nrows) list[start[r] + atomicAdd(&count[r], 1)] = (int)bt;
  }
}

extern "C" __global__ void weft_tx_embed_bwd_sort(weft_tx_embed_bwd_args p) {
  const int *start = reinterpret_cast<const int *>(p.start);
  int *list = reinterpret_cast<int *>(p.list);
  int *count = reinterpret_cast<int *>(p.count);
  for (long long r = GTID; r < p.nrows; r += GSTRIDE) {
    count[r] = 0; /* left zeroed for the next backward */
    const int a = start[r], b = start[r + 1];
    for (int i = a + 1; i < b; i++) {
      const int v = list[i];
      int k = i - 1;
      while (k >= a && list[k] > v) {
        list[k + 1] = list[k];
        k--;
      }
      list[k + 1] = v;
    }
  }
}

extern "C" __global__ void weft_tx_embed_bwd_accum(weft_tx_embed_bwd_args p) {
  const int *start = reinterpret_cast<const int *>(p.start);
  const int *list = reinterpret_cast<const int *>(p.list);
  const float *dout = reinterpret_cast<const float *>(p.dout);
  float *table = reinterpret_cast<float *>(p.table);
  const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (long long r = blockIdx.y; r < p.nrows; r += gridDim.y) {
    const int a = start[r], b = start[r + 1];
    if (a == b || c >= p.C) continue;
    float acc = table[r * p.C + c];
    for (int i = a; i < b; i++) acc = __fadd_rn(acc, dout[(long long)list[i] * p.C + c]);
    table[r * p.C + c] = w_canon(acc); /* a NaN stays NaN through the adds: canonical at the end is enough */
  }
}

/* -------------------------------------------------------------------------------------- layernorm */

extern "C" __global__ void weft_tx_layernorm_fwd(weft_tx_ln_args p) {
  const int lane = threadIdx.x & 31;
  const long long C = p.C;
  const float invC = w_recipf((float)C);
  const float *X = reinterpret_cast<const float *>(p.x);
  const float *gamma = reinterpret_cast<const float *>(p.gamma), *beta = reinterpret_cast<const float *>(p.beta);
  float *Y = reinterpret_cast<float *>(p.y);
  float *M = reinterpret_cast<float *>(p.mean), *RS = reinterpret_cast<float *>(p.rstd);
  for (long long r = WARP_ID; r < p.N; r += WARPS) {
    const float *x = X + r * C;
    float *y = Y + r * C;
    float s = 0.0f;
    for (long long base = 0; base < C; base += 32) {
      const long long c = base + lane;
      const float v = c < C ? x[c] : 0.0f;
      s = warp_seq_add(s, v, C - base < 32 ? (int)(C - base) : 32);
    }
    const float mu = __fmul_rn(s, invC);
    float v = 0.0f;
    for (long long base = 0; base < C; base += 32) {
      const long long c = base + lane;
      float sq = 0.0f;
      if (c < C) {
        const float d = __fsub_rn(x[c], mu);
        sq = __fmul_rn(d, d);
      }
      v = warp_seq_add(v, sq, C - base < 32 ? (int)(C - base) : 32);
    }
    const float var = __fmul_rn(v, invC);
    const float rs = w_rsqrtf(__fadd_rn(var, p.eps));
    for (long long c = lane; c < C; c += 32) {
      const float n = __fmul_rn(__fsub_rn(x[c], mu), rs);
      const float o = __fmul_rn(n, gamma[c]);
      y[c] = w_canon(__fadd_rn(o, beta[c]));
    }
    if (lane == 0) {
      if (M) M[r] = w_canon(mu);
      if (RS) RS[r] = w_canon(rs);
    }
  }
}

extern "C" __global__ void weft_tx_layernorm_bwd_dx(weft_tx_ln_args p) {
  const int lane = threadIdx.x & 31;
  const long long C = p.C;
  const float invC = w_recipf((float)C);
  const float *X = reinterpret_cast<const float *>(p.x), *DY = reinterpret_cast<const float *>(p.dy);
  const float *gamma = reinterpret_cast<const float *>(p.gamma);
  const float *M = reinterpret_cast<const float *>(p.mean), *RS = reinterpret_cast<const float *>(p.rstd);
  float *DX = reinterpret_cast<float *>(p.dx);
  for (long long r = WARP_ID; r < p.N; r += WARPS) {
    const float *x = X + r * C, *dy = DY + r * C;
    float *dx = DX + r * C;
    const float mu = M[r], rs = RS[r];
    float a = 0.0f, b = 0.0f;
    for (long long base = 0; base < C; base += 32) {
      const long long c = base + lane;
      float g = 0.0f, gn = 0.0f;
      if (c < C) {
        const float n = __fmul_rn(__fsub_rn(x[c], mu), rs);
        g = __fmul_rn(gamma[c], dy[c]);
        gn = __fmul_rn(g, n);
      }
      const int cnt = C - base < 32 ? (int)(C - base) : 32;
      for (int q = 0; q < cnt; q++) {
        a = __fadd_rn(a, __shfl_sync(TX_FULL, g, q));
        b = __fadd_rn(b, __shfl_sync(TX_FULL, gn, q));
      }
    }
    a = __fmul_rn(a, invC);
    b = __fmul_rn(b, invC);
    for (long long c = lane; c < C; c += 32) {
      const float n = __fmul_rn(__fsub_rn(x[c], mu), rs);
      const float g = __fmul_rn(gamma[c], dy[c]);
      const float nb = __fmul_rn(n, b);
      const float t = __fsub_rn(__fsub_rn(g, a), nb);
      dx[c] = w_canon(__fmul_rn(t, rs));
    }
  }
}

/* dgamma, dbeta: 32 channels a block (blockDim 256, grid ceil(C/32), channels also strided by gridDim.x).
 * All 256 threads compute n*dy and dy for a tile of LNG_ROWS rows into shared memory (elementwise: no order
 * involved), then warp 0 - one thread per channel - adds the tile's rows in ascending order. */
#define LNG_ROWS 64
extern "C" __global__ void __launch_bounds__(256) weft_tx_layernorm_bwd_dgb(weft_tx_ln_args p) {
  __shared__ float tn[LNG_ROWS][33], td[LNG_ROWS][33];
  const long long C = p.C;
  const float *X = reinterpret_cast<const float *>(p.x), *DY = reinterpret_cast<const float *>(p.dy);
  const float *M = reinterpret_cast<const float *>(p.mean), *RS = reinterpret_cast<const float *>(p.rstd);
  float *DG = reinterpret_cast<float *>(p.dgamma), *DB = reinterpret_cast<float *>(p.dbeta);
  if (p.N <= 0) return; /* nothing added: the accumulators keep their bits */
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  for (long long c0 = (long long)blockIdx.x * 32; c0 < C; c0 += (long long)gridDim.x * 32) {
    const long long c = c0 + tx;
    float g = 0.0f, bb = 0.0f;
    if (ty == 0 && c < C) g = DG ? DG[c] : 0.0f, bb = DB ? DB[c] : 0.0f;
    for (long long r0 = 0; r0 < p.N; r0 += LNG_ROWS) {
      for (int q = ty; q < LNG_ROWS; q += 8) {
        const long long r = r0 + q;
        float nd = 0.0f, dy = 0.0f;
        if (r < p.N && c < C) {
          dy = DY[r * C + c];
          nd = __fmul_rn(__fmul_rn(__fsub_rn(X[r * C + c], M[r]), RS[r]), dy);
        }
        tn[q][tx] = nd, td[q][tx] = dy;
      }
      __syncthreads();
      if (ty == 0) {
        const int n = p.N - r0 < LNG_ROWS ? (int)(p.N - r0) : LNG_ROWS;
        for (int q = 0; q < n; q++) {
          bb = __fadd_rn(bb, td[q][tx]);
          g = __fadd_rn(g, tn[q][tx]);
        }
      }
      __syncthreads();
    }
    if (ty == 0 && c < C) {
      if (DG) DG[c] = w_canon(g);
      if (DB) DB[c] = w_canon(bb);
    }
  }
}

/* ------------------------------------------------------------------------------------------- gelu */

#define TX_GELU_S 0.79788458347320556640625f
#define TX_GELU_K 0.044715001225471496582031f
#define TX_GELU_3K 0.13414500653743743896484f

extern "C" __global__ void weft_tx_gelu_fwd(weft_tx_gelu_args p) {
  const float *X = reinterpret_cast<const float *>(p.x);
  float *Y = reinterpret_cast<float *>(p.out);
  for (long long i = GTID; i < p.n; i += GSTRIDE) {
    const float x = X[i];
    float c = __fmul_rn(TX_GELU_K, x);
    c = __fmul_rn(c, x);
    c = __fmul_rn(c, x);
    const float u = __fmul_rn(TX_GELU_S, __fadd_rn(x, c));
    const float th = w_tanhf(u);
    const float h = __fmul_rn(0.5f, x);
    Y[i] = w_canon(__fmul_rn(h, __fadd_rn(1.0f, th)));
  }
}

extern "C" __global__ void weft_tx_gelu_bwd(weft_tx_gelu_args p) {
  const float *X = reinterpret_cast<const float *>(p.x), *DY = reinterpret_cast<const float *>(p.dy);
  float *DX = reinterpret_cast<float *>(p.out);
  for (long long i = GTID; i < p.n; i += GSTRIDE) {
    const float x = X[i];
    float c = __fmul_rn(TX_GELU_K, x);
    c = __fmul_rn(c, x);
    c = __fmul_rn(c, x);
    const float u = __fmul_rn(TX_GELU_S, __fadd_rn(x, c));
    const float th = w_tanhf(u);
    const float sech2 = __fsub_rn(1.0f, __fmul_rn(th, th));
    const float l = __fmul_rn(0.5f, __fadd_rn(1.0f, th));
    float r = __fmul_rn(0.5f, x);
    r = __fmul_rn(r, sech2);
    r = __fmul_rn(r, TX_GELU_S);
    float k = __fmul_rn(TX_GELU_3K, x);
    k = __fmul_rn(k, x);
    r = __fmul_rn(r, __fadd_rn(1.0f, k));
    DX[i] = w_canon(__fmul_rn(__fadd_rn(l, r), DY[i]));
  }
}

/* ---------------------------------------------------------------------------------- causal softmax */

/* One causal softmax row by a warp: z(j) the already scaled score of column j <= t; p[0..T) written:
 * canonical e[j] * recip(sum) for j <= t, +0 after. The exponentials are computed twice (the sum, then the
 * store): the same function of the same bits, so the same values the reference stores and sums. */
template <typename Z> DEV void warp_softmax_row(float *p, Z z, long long t, long long T) {
  const int lane = threadIdx.x & 31;
  const long long n = t + 1;
  const float mx = warp_first_max(z, n);
  float sum = 0.0f;
  for (long long base = 0; base < n; base += 32) {
    const long long j = base + lane;
    const float e = j < n ? w_expf(__fsub_rn(z(j), mx)) : 0.0f;
    sum = warp_seq_add(sum, e, n - base < 32 ? (int)(n - base) : 32);
  }
  const float inv = w_recipf(sum);
  for (long long j = lane; j < n; j += 32) p[j] = w_canon(__fmul_rn(w_expf(__fsub_rn(z(j), mx)), inv));
  for (long long j = n + lane; j < T; j += 32) p[j] = 0.0f;
}

extern "C" __global__ void weft_tx_softmax_fwd(weft_tx_softmax_args p) {
  const long long T = p.T;
  const float *S = reinterpret_cast<const float *>(p.in);
  float *P = reinterpret_cast<float *>(p.out);
  const float scale = p.scale;
  for (long long row = WARP_ID; row < p.R * T; row += WARPS) {
    const long long t = row % T;
    const float *s = S + row * T;
    warp_softmax_row(P + row * T, [&](long long j) { return __fmul_rn(s[j], scale); }, t, T);
  }
}

extern "C" __global__ void weft_tx_softmax_bwd(weft_tx_softmax_args p) {
  const int lane = threadIdx.x & 31;
  const long long T = p.T;
  const float *PR = reinterpret_cast<const float *>(p.in), *DP = reinterpret_cast<const float *>(p.in2);
  float *DS = reinterpret_cast<float *>(p.out);
  for (long long row = WARP_ID; row < p.R * T; row += WARPS) {
    const long long t = row % T, n = t + 1;
    const float *pr = PR + row * T, *dp = DP + row * T;
    float *ds = DS + row * T;
    float dot = 0.0f;
    for (long long base = 0; base < n; base += 32) {
      const long long j = base + lane;
      const float pd = j < n ? __fmul_rn(pr[j], dp[j]) : 0.0f;
      dot = warp_seq_add(dot, pd, n - base < 32 ? (int)(n - base) : 32);
    }
    for (long long j = lane; j < n; j += 32) {
      const float g = __fmul_rn(pr[j], __fsub_rn(dp[j], dot));
      ds[j] = w_canon(__fmul_rn(g, p.scale));
    }
    for (long long j = n + lane; j < T; j += 32) ds[j] = 0.0f;
  }
}

/* -------------------------------------------------------------------------------------- attention */

/* Forward: one warp per (b, h, t). Lane j computes the score of column j (its own sequential dot product
 * over i ascending) into att's row, the warp runs the causal softmax over it, then lanes split the head's
 * hs outputs and walk j ascending over the stored probabilities.
 * Fast later: K/V tiles in shared memory shared by the rows of a block (every (b,h) row reads the same
 * k[0..t], v[0..t]), q in registers, and the PV product as a tiled matmul per (b,h) with j ascending; the
 * order constraints are only along each dot product and along each row's sum, never across rows. */
extern "C" __global__ void weft_tx_attn_fwd(weft_tx_attn_args p) {
  const int lane = threadIdx.x & 31;
  const long long T = p.T, C = p.C, NH = p.NH, hs = C / NH, C3 = 3 * C;
  const float scale = w_rsqrtf((float)hs);
  const float *QKV = reinterpret_cast<const float *>(p.qkv);
  float *ATT = reinterpret_cast<float *>(p.att), *PRE = reinterpret_cast<float *>(p.preatt);
  float *OUT = reinterpret_cast<float *>(p.out);
  for (long long row = WARP_ID; row < p.B * NH * T; row += WARPS) {
    const long long t = row % T, bh = row / T, h = bh % NH, b = bh / NH;
    const float *q = QKV + (b * T + t) * C3 + h * hs;
    float *a = ATT + row * T;
    for (long long j = lane; j <= t; j += 32) {
      const float *k = QKV + (b * T + j) * C3 + C + h * hs;
      float d = 0.0f;
      for (long long i = 0; i < hs; i++) d = __fadd_rn(d, __fmul_rn(q[i], k[i]));
      a[j] = __fmul_rn(d, scale);
    }
    __syncwarp();
    if (PRE) {
      float *pa = PRE + row * T;
      for (long long j = lane; j <= t; j += 32) pa[j] = w_canon(a[j]);
      for (long long j = t + 1 + lane; j < T; j += 32) pa[j] = __uint_as_float(0xff800000u);
    }
    /* the scores are read by every lane below and overwritten only after the sum pass */
    const long long n = t + 1;
    const float mx = warp_first_max([&](long long j) { return a[j]; }, n);
    float sum = 0.0f;
    for (long long base = 0; base < n; base += 32) {
      const long long j = base + lane;
      const float e = j < n ? w_expf(__fsub_rn(a[j], mx)) : 0.0f;
      sum = warp_seq_add(sum, e, n - base < 32 ? (int)(n - base) : 32);
    }
    const float inv = w_recipf(sum);
    for (long long j = lane; j < n; j += 32) a[j] = w_canon(__fmul_rn(w_expf(__fsub_rn(a[j], mx)), inv));
    for (long long j = n + lane; j < T; j += 32) a[j] = 0.0f;
    __syncwarp();
    float *o = OUT + (b * T + t) * C + h * hs;
    for (long long i = lane; i < hs; i += 32) {
      float acc = 0.0f;
      const float *v = QKV + b * T * C3 + 2 * C + h * hs + i;
      for (long long j = 0; j <= t; j++) acc = __fadd_rn(acc, __fmul_rn(a[j], v[j * C3]));
      o[i] = w_canon(acc);
    }
    __syncwarp();
  }
}

/* Decode (ATTENTION_CACHED): one warp per (b, h, r), t = t0 + r: the fused forward's row t, with qkv's rows
 * Tmax apart, the probabilities in att's row (or scratch) of Tmax, and out's row r of [B,Tq,C]. */
extern "C" __global__ void weft_tx_attn_cached(weft_tx_attn_cached_args p) {
  const int lane = threadIdx.x & 31;
  const long long T = p.Tmax, C = p.C, NH = p.NH, hs = C / NH, C3 = 3 * C, Tq = p.Tq, t0 = p.t0;
  const float scale = w_rsqrtf((float)hs);
  const float *QKV = reinterpret_cast<const float *>(p.qkv);
  float *ATT = reinterpret_cast<float *>(p.att), *OUT = reinterpret_cast<float *>(p.out);
  for (long long row = WARP_ID; row < p.B * NH * Tq; row += WARPS) {
    const long long r = row % Tq, t = t0 + r, bh = row / Tq, h = bh % NH, b = bh / NH;
    const float *q = QKV + (b * T + t) * C3 + h * hs;
    float *a = ATT + row * T;
    for (long long j = lane; j <= t; j += 32) {
      const float *k = QKV + (b * T + j) * C3 + C + h * hs;
      float d = 0.0f;
      for (long long i = 0; i < hs; i++) d = __fadd_rn(d, __fmul_rn(q[i], k[i]));
      a[j] = __fmul_rn(d, scale);
    }
    __syncwarp();
    const long long n = t + 1;
    const float mx = warp_first_max([&](long long j) { return a[j]; }, n);
    float sum = 0.0f;
    for (long long base = 0; base < n; base += 32) {
      const long long j = base + lane;
      const float e = j < n ? w_expf(__fsub_rn(a[j], mx)) : 0.0f;
      sum = warp_seq_add(sum, e, n - base < 32 ? (int)(n - base) : 32);
    }
    const float inv = w_recipf(sum);
    for (long long j = lane; j < n; j += 32) a[j] = w_canon(__fmul_rn(w_expf(__fsub_rn(a[j], mx)), inv));
    for (long long j = n + lane; j < T; j += 32) a[j] = 0.0f;
    __syncwarp();
    float *o = OUT + (b * Tq + r) * C + h * hs;
    for (long long i = lane; i < hs; i += 32) {
      float acc = 0.0f;
      const float *v = QKV + b * T * C3 + 2 * C + h * hs + i;
      for (long long j = 0; j <= t; j++) acc = __fadd_rn(acc, __fmul_rn(a[j], v[j * C3]));
      o[i] = w_canon(acc);
    }
    __syncwarp();
  }
}

/* Backward, part 1: one warp per (b, h, t): ds[t][j] for j <= t (not canonicalised: scratch, as in the
 * reference). */
extern "C" __global__ void weft_tx_attn_bwd_ds(weft_tx_attn_args p) {
  const int lane = threadIdx.x & 31;
  const long long T = p.T, C = p.C, NH = p.NH, hs = C / NH, C3 = 3 * C;
  const float scale = w_rsqrtf((float)hs);
  const float *QKV = reinterpret_cast<const float *>(p.qkv), *ATT = reinterpret_cast<const float *>(p.att);
  const float *DOUT = reinterpret_cast<const float *>(p.dout);
  float *DS = reinterpret_cast<float *>(p.ds);
  for (long long row = WARP_ID; row < p.B * NH * T; row += WARPS) {
    const long long t = row % T, bh = row / T, h = bh % NH, b = bh / NH, n = t + 1;
    const float *dout = DOUT + (b * T + t) * C + h * hs;
    const float *a = ATT + row * T;
    float *ds = DS + row * T;
    float dot = 0.0f;
    for (long long base = 0; base < n; base += 32) {
      const long long j = base + lane;
      float pd = 0.0f;
      if (j < n) {
        const float *v = QKV + (b * T + j) * C3 + 2 * C + h * hs;
        float d = 0.0f;
        for (long long i = 0; i < hs; i++) d = __fadd_rn(d, __fmul_rn(v[i], dout[i]));
        ds[j] = d;
        pd = __fmul_rn(a[j], d);
      }
      dot = warp_seq_add(dot, pd, n - base < 32 ? (int)(n - base) : 32);
    }
    for (long long j = lane; j < n; j += 32) {
      const float g = __fmul_rn(a[j], __fsub_rn(ds[j], dot));
      ds[j] = __fmul_rn(g, scale);
    }
  }
}

/* Backward, part 2: one thread per (b, h, t, i): dq walks j = 0..t, dk and dv walk u = t..T-1, ascending.
 * Fast later: tile over (t, i) with the ds/att columns and q/dout rows in shared memory (a matmul-shaped
 * kernel per (b,h), k-loop ascending as the exact matmul does). */
extern "C" __global__ void weft_tx_attn_bwd_dqkv(weft_tx_attn_args p) {
  const long long T = p.T, C = p.C, NH = p.NH, hs = C / NH, C3 = 3 * C;
  const float *QKV = reinterpret_cast<const float *>(p.qkv), *ATT = reinterpret_cast<const float *>(p.att);
  const float *DOUT = reinterpret_cast<const float *>(p.dout), *DS = reinterpret_cast<const float *>(p.ds);
  float *DQKV = reinterpret_cast<float *>(p.dqkv);
  const long long total = p.B * NH * T * hs;
  for (long long e = GTID; e < total; e += GSTRIDE) {
    const long long i = e % hs, t = (e / hs) % T, bh = e / (hs * T), h = bh % NH, b = bh / NH;
    const float *ds = DS + bh * T * T, *ab = ATT + bh * T * T;
    const float *Qc = QKV + b * T * C3 + h * hs + i; /* q[u][i] = Qc[u * C3] */
    const float *Kc = Qc + C, *Do = DOUT + b * T * C + h * hs + i;
    float acc = 0.0f;
    for (long long j = 0; j <= t; j++) acc = __fadd_rn(acc, __fmul_rn(ds[t * T + j], Kc[j * C3]));
    float ak = 0.0f, av = 0.0f;
    for (long long u = t; u < T; u++) {
      ak = __fadd_rn(ak, __fmul_rn(ds[u * T + t], Qc[u * C3]));
      av = __fadd_rn(av, __fmul_rn(ab[u * T + t], Do[u * C]));
    }
    float *dq = DQKV + (b * T + t) * C3 + h * hs + i;
    dq[0] = w_canon(acc);
    dq[C] = w_canon(ak);
    dq[2 * C] = w_canon(av);
  }
}

/* ---------------------------------------------------------------------------------- cross-entropy */

/* mx and ls of row z[0..V) by a warp, as lse_row in reference_tx.c. */
DEV void warp_lse(const float *z, long long V, float *mx_out, float *ls_out) {
  const int lane = threadIdx.x & 31;
  const float mx = warp_first_max([&](long long j) { return z[j]; }, V);
  float s = 0.0f;
  for (long long base = 0; base < V; base += 32) {
    const long long j = base + lane;
    const float e = j < V ? w_expf(__fsub_rn(z[j], mx)) : 0.0f;
    s = warp_seq_add(s, e, V - base < 32 ? (int)(V - base) : 32);
  }
  *mx_out = mx;
  *ls_out = w_logf(s);
}

extern "C" __global__ void weft_tx_xent_fwd(weft_tx_xent_args p) {
  const int lane = threadIdx.x & 31;
  const float *Z = reinterpret_cast<const float *>(p.logits);
  const int *tg = reinterpret_cast<const int *>(p.targets);
  float *L = reinterpret_cast<float *>(p.losses);
  for (long long n = WARP_ID; n < p.N; n += WARPS) {
    const long long tgt = tg[n];
    if (tgt < 0 || tgt >= p.V) continue;
    const float *z = Z + n * p.V;
    float mx, ls;
    warp_lse(z, p.V, &mx, &ls);
    if (lane == 0) L[n] = w_canon(-__fsub_rn(__fsub_rn(z[tgt], mx), ls));
  }
}

extern "C" __global__ void weft_tx_xent_bwd(weft_tx_xent_args p) {
  const int lane = threadIdx.x & 31;
  const float *Z = reinterpret_cast<const float *>(p.logits), *DL = reinterpret_cast<const float *>(p.dloss);
  const int *tg = reinterpret_cast<const int *>(p.targets);
  float *G = reinterpret_cast<float *>(p.dlogits);
  for (long long n = WARP_ID; n < p.N; n += WARPS) {
    const long long tgt = tg[n];
    if (tgt < 0 || tgt >= p.V) continue;
    const float *z = Z + n * p.V;
    float *g = G + n * p.V;
    float mx, ls;
    warp_lse(z, p.V, &mx, &ls);
    const float dl = DL[n];
    for (long long j = lane; j < p.V; j += 32) {
      const float pr = w_expf(__fsub_rn(__fsub_rn(z[j], mx), ls));
      const float ind = j == tgt ? 1.0f : 0.0f;
      g[j] = w_canon(__fmul_rn(__fsub_rn(pr, ind), dl));
    }
  }
}

/* ------------------------------------------------------------------------------------------ adamw */

extern "C" __global__ void weft_tx_adamw(weft_tx_adamw_args p) {
  float *P = reinterpret_cast<float *>(p.param), *M = reinterpret_cast<float *>(p.m);
  float *Vv = reinterpret_cast<float *>(p.v);
  const float *G = reinterpret_cast<const float *>(p.grad);
  const float o1 = __fsub_rn(1.0f, p.beta1), o2 = __fsub_rn(1.0f, p.beta2);
  const float r1 = w_recipf(p.bc1), r2 = w_recipf(p.bc2);
  for (long long i = GTID; i < p.n; i += GSTRIDE) {
    const float g = G[i], pp = P[i];
    float mm = __fmul_rn(p.beta1, M[i]);
    mm = __fadd_rn(mm, __fmul_rn(o1, g));
    float vv = __fmul_rn(p.beta2, Vv[i]);
    float vg = __fmul_rn(o2, g);
    vg = __fmul_rn(vg, g);
    vv = __fadd_rn(vv, vg);
    const float mh = __fmul_rn(mm, r1), vh = __fmul_rn(vv, r2);
    const float den = __fadd_rn(w_sqrtf(vh), p.eps);
    float u = __fmul_rn(mh, w_recipf(den));
    u = __fadd_rn(u, __fmul_rn(p.weight_decay, pp));
    const float step = __fmul_rn(p.lr, u);
    M[i] = w_canon(mm);
    Vv[i] = w_canon(vv);
    P[i] = w_canon(__fsub_rn(pp, step));
  }
}

/* ------------------------------------------------------------------------------- global-norm clip */

/* Each warp takes groups of 32 chunks; lane l owns chunk 32*group + l. A round loads 32 consecutive elements
 * of each of the 32 chunks into a padded 32x33 tile (row r = chunk r, one coalesced 128-byte load per
 * row), then lane l adds its own row's 32 squares in ascending order into its own chain. Elements past a
 * chunk's end (the last chunk, or chunks past the tensor's end) read as +0: a square of +0 added to a
 * partial that starts at +0 and only ever adds squares (never -0) leaves it bit for bit unchanged. */
#define SQ_TILE 32
extern "C" __global__ void weft_tx_sumsq_chunks(weft_tx_clip_args p) {
  __shared__ float tile[SQ_TILE][SQ_TILE + 1];
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32) return;
  const float *g = reinterpret_cast<const float *>(p.g);
  float *part = reinterpret_cast<float *>(p.part);
  const long long K = WEFT_TX_SUMSQ_CHUNK;
  const long long nch = (p.n + K - 1) / K;
  for (long long c0 = (long long)blockIdx.x * SQ_TILE; c0 < nch; c0 += (long long)gridDim.x * SQ_TILE) {
    float s = 0.0f;
    for (long long j0 = 0; j0 < K; j0 += SQ_TILE) {
      for (int r = 0; r < SQ_TILE; r++) {
        const long long i = (c0 + r) * K + j0 + lane; /* chunk c0 + r, element j0 + lane (K % 32 == 0) */
        tile[r][lane] = i < p.n ? g[i] : 0.0f;
      }
      __syncwarp();
      for (int q = 0; q < SQ_TILE; q++) {
        const float v = tile[lane][q];
        s = __fadd_rn(s, __fmul_rn(v, v));
      }
      __syncwarp();
    }
    if (c0 + lane < nch) part[c0 + lane] = s; /* not canonicalised: weft_tx_sumsq_add's result is */
  }
}

extern "C" __global__ void weft_tx_sumsq_add(weft_tx_clip_args p) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32 || blockIdx.x != 0) return;
  const float *part = reinterpret_cast<const float *>(p.part);
  float *ssp = reinterpret_cast<float *>(p.ss);
  const long long nch = (p.n + WEFT_TX_SUMSQ_CHUNK - 1) / WEFT_TX_SUMSQ_CHUNK;
  float ss = *ssp;
  for (long long base = 0; base < nch; base += 32) {
    const long long c = base + lane;
    const float v = c < nch ? part[c] : 0.0f;
    ss = warp_seq_add(ss, v, nch - base < 32 ? (int)(nch - base) : 32);
  }
  if (lane == 0) *ssp = w_canon(ss);
}

extern "C" __global__ void weft_tx_clip_scale(weft_tx_clip_args p) {
  const float norm = w_sqrtf(*reinterpret_cast<const float *>(p.ss));
  if (GTID == 0 && p.norm_out) *reinterpret_cast<float *>(p.norm_out) = w_canon(norm);
  if (!(norm > p.max_norm)) return;
  const float sc = __fmul_rn(p.max_norm, w_recipf(norm));
  float *g = reinterpret_cast<float *>(p.g);
  for (long long i = GTID; i < p.n; i += GSTRIDE) g[i] = w_canon(__fmul_rn(g[i], sc));
}

/* ------------------------------------------------------------------------------ scalar math probe */

/* For the tests: out[6*i + k] = recip, rsqrt, sqrt, tanh, exp, log of x[i] (canonical NaN), so each
 * transcription can be compared with wmath.c on its own. Any grid, grid-stride over n. */
extern "C" __global__ void weft_tx_wmath_probe(weft_tx_gelu_args p) {
  const float *X = reinterpret_cast<const float *>(p.x);
  float *O = reinterpret_cast<float *>(p.out);
  for (long long i = GTID; i < p.n; i += GSTRIDE) {
    const float x = X[i];
    O[6 * i + 0] = w_canon(w_recipf(x));
    O[6 * i + 1] = w_canon(w_rsqrtf(x));
    O[6 * i + 2] = w_canon(w_sqrtf(x));
    O[6 * i + 3] = w_canon(w_tanhf(x));
    O[6 * i + 4] = w_canon(w_expf(x));
    O[6 * i + 5] = w_canon(w_logf(x));
  }
}

/* -------------------------------------------------------------------------------- permute and copy */

extern "C" __global__ void weft_tx_permute(weft_tx_permute_args p) {
  const unsigned *in = reinterpret_cast<const unsigned *>(p.in);
  unsigned *out = reinterpret_cast<unsigned *>(p.out);
  for (long long e = GTID; e < p.count; e += GSTRIDE) {
    long long rem = e, off = 0;
    for (int k = p.rank - 1; k >= 0; k--) {
      const long long d = p.out_dims[k];
      const long long ik = rem % d;
      rem /= d;
      off += ik * p.in_stride[k];
    }
    out[e] = in[off];
  }
}

extern "C" __global__ void weft_tx_copy_slice(weft_tx_copy_args p) {
  const unsigned *src = reinterpret_cast<const unsigned *>(p.src);
  unsigned *dst = reinterpret_cast<unsigned *>(p.dst);
  const long long total = p.nb * p.rows * p.cols;
  for (long long e = GTID; e < total; e += GSTRIDE) {
    const long long c = e % p.cols, r = (e / p.cols) % p.rows, b = e / (p.cols * p.rows);
    dst[p.dst_off + b * p.dst_bs + r * p.dst_rs + c] = src[p.src_off + b * p.src_bs + r * p.src_rs + c];
  }
}
