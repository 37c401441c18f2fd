/* cuda_tx.cu - the transformer ops' kernels (GPT-2's set) for the CUDA lane under the exact contract: each
 * returns the bits of its reference in src/core/reference_tx.c. Included at the end of cuda_kernels.cu, so
 * it is built into the same embedded fatbin with the same flags and uses that file's DEV, w_canon, w_expf
 * and w_logf; argument blocks and launch shapes are in cuda_tx_args.h.
 *
 * The rules of cuda_kernels.cu hold: every multiply and add is __fmul_rn / __fadd_rn / __fsub_rn, nothing
 * divides or takes a square root except through w_recipf / w_rsqrtf / w_sqrtf (transcribed step for step
 * from src/core/wmath.c), every float stored goes through w_canon. Sums run in the reference's order: one
 * thread walks an ascending loop, or a warp loads 32 values at a time and every lane adds them one by one in
 * index order (each lane then holds the same running sum). The fp32 contract's layernorm and sumsq kernels
 * (the last section) follow that contract's rules instead. */
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

#define TX_GELU_S 0.79788458347320556640625f
#define TX_GELU_K 0.044715001225471496582031f
#define TX_GELU_3K 0.13414500653743743896484f

/* gelu(x) = 0.5x(1 + tanh(S(x + Kx^3))), the reference's order (declared in cuda_kernels.cu, where the
 * matmul epilogue uses it too) */
DEV float w_gelu(float x) {
  float c = __fmul_rn(TX_GELU_K, x);
  c = __fmul_rn(c, x);
  c = __fmul_rn(c, x);
  const float u = __fmul_rn(TX_GELU_S, __fadd_rn(x, c));
  const float th = w_tanhf(u);
  const float h = __fmul_rn(0.5f, x);
  return w_canon(__fmul_rn(h, __fadd_rn(1.0f, th)));
}

/* ------------------------------------------------------------------------------------ warp helpers */

/* s + v[0] + v[1] + ... + v[n-1] in that order, v[q] held by lane q: every lane returns the same sum. A full
 * group of 32 is unrolled, the 32 shuffles first (they do not depend on s, so they are issued back to back)
 * and then the 32 dependent adds in index order: the same adds in the same order as the loop. */
DEV float warp_seq_add(float s, float v, int n) {
  if (n == 32) {
    float w[32];
#pragma unroll
    for (int q = 0; q < 32; q++) w[q] = __shfl_sync(TX_FULL, v, q);
#pragma unroll
    for (int q = 0; q < 32; q++) s = __fadd_rn(s, w[q]);
    return s;
  }
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

/* One block of 1024 threads (a multiple of 32, at most 1024): start[r] = count[0] + ... + count[r-1] for
 * r <= nrows (integers: any order is exact); count is zeroed for the fill. */
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
  /* exclusive prefix of the threads' chunk sums: a shuffle scan in each warp, then over the warps' totals */
  const int lane = tid & 31, w = tid >> 5, nw = nt >> 5;
  long long v = s;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const long long o = __shfl_up_sync(TX_FULL, v, off);
    if (lane >= off) v += o;
  }
  if (lane == 31) part[w] = v;
  __syncthreads();
  if (w == 0) {
    long long x = lane < nw ? part[lane] : 0;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const long long o = __shfl_up_sync(TX_FULL, x, off);
      if (lane >= off) x += o;
    }
    if (lane < nw) part[32 + lane] = x;
  }
  __syncthreads();
  long long run = v - s + (w > 0 ? part[32 + w - 1] : 0);
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

/* Only the rows that occur: block y walks the sorted list's positions i (strided by gridDim.y) and does the
 * row r of list[i] only where i is that row's first position (i == start[r]), so every occurring row is done
 * by exactly one block and the empty rows cost nothing. Each table element then gets its row's segment
 * added one by one in ascending bt, as before. The list holds start[nrows] positions (rows out of range
 * were never filled in). */
extern "C" __global__ void weft_tx_embed_bwd_accum(weft_tx_embed_bwd_args p) {
  const int *start = reinterpret_cast<const int *>(p.start);
  const int *list = reinterpret_cast<const int *>(p.list);
  const float *dout = reinterpret_cast<const float *>(p.dout);
  float *table = reinterpret_cast<float *>(p.table);
  const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long used = start[p.nrows];
  for (long long i = blockIdx.y; i < used; i += gridDim.y) {
    const long long r = eb_index(p, list[i]);
    const int a = start[r], b = start[r + 1];
    if (a != i || c >= p.C) continue;
    float acc = table[r * p.C + c];
    for (int k = a; k < b; k++) acc = __fadd_rn(acc, dout[(long long)list[k] * p.C + c]);
    table[r * p.C + c] = w_canon(acc); /* a NaN stays NaN through the adds: canonical at the end is enough */
  }
}

/* Embedding backward in one kernel without scratch, for up to WEFT_TX_EB_ROWS_MAXBT positions: block b takes
 * positions bt (strided by gridDim.x); its row is r = idx[bt]. The block scans the positions in windows of
 * 8 * blockDim.x (8 consecutive ones a thread): a match of r before bt means bt is not r's first position (another
 * block does the row) and the block moves on; otherwise the window's matches are compacted in ascending order
 * (a scan of the threads' counts) and every thread adds them to its columns' accumulators one by one:
 * table[r, c] = (...(table[r, c] + dout[bt0, c]) + dout[bt1, c]) ...) over r's positions ascending, the
 * reference's order. Columns 4 * blockDim.x at a time (a wider C scans again). Any grid; blockDim a multiple
 * of 32 up to 256 (256 is launched). */
extern "C" __global__ void __launch_bounds__(256) weft_tx_embed_bwd_rows(weft_tx_embed_bwd_args p) {
  __shared__ int seg[8 * 256];
  __shared__ int wsum[8];
  __shared__ int early;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, nt = blockDim.x, nw = nt >> 5;
  const float *dout = reinterpret_cast<const float *>(p.dout);
  float *table = reinterpret_cast<float *>(p.table);
  const long long C = p.C, BT = p.BT;
  for (long long bt = blockIdx.x; bt < BT; bt += gridDim.x) {
    const long long r = eb_index(p, bt);
    if (r < 0 || r >= p.nrows) continue; /* the same in every thread */
    __syncthreads(); /* every thread has read `early` of the previous position */
    if (tid == 0) early = 0;
    __syncthreads();
    bool first = true;
    for (long long c0 = 0; c0 < C && first; c0 += 4 * nt) {
      float acc[4];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const long long c = c0 + tid + (long long)nt * u;
        acc[u] = c < C ? table[r * C + c] : 0.0f;
      }
      for (long long w0 = 0; w0 < BT; w0 += 8 * nt) {
        const long long j0 = w0 + 8 * tid;
        unsigned m = 0;
        int cnt = 0;
#pragma unroll
        for (int u = 0; u < 8; u++)
          if (j0 + u < BT && eb_index(p, j0 + u) == r) {
            m |= 1u << u, cnt++;
            if (j0 + u < bt) early = 1;
          }
        int incl = cnt; /* inclusive scan of the counts over the block, in thread order */
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
          const int o = __shfl_up_sync(TX_FULL, incl, off);
          if (lane >= off) incl += o;
        }
        if (lane == 31) wsum[w] = incl;
        __syncthreads();
        if (early) { /* r occurs before bt: not this block's row */
          first = false;
          break;
        }
        int pos = incl - cnt, total = 0;
        for (int q = 0; q < nw; q++) {
          if (q < w) pos += wsum[q];
          total += wsum[q];
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
          if (m >> u & 1u) seg[pos++] = (int)(j0 + u);
        __syncthreads();
        for (int k = 0; k < total; k++) {
          const float *d = dout + (long long)seg[k] * C + c0 + tid;
#pragma unroll
          for (int u = 0; u < 4; u++)
            if (c0 + tid + (long long)nt * u < C) acc[u] = __fadd_rn(acc[u], d[nt * u]);
        }
        __syncthreads(); /* seg and wsum are free for the next window */
      }
      if (!first) break;
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const long long c = c0 + tid + (long long)nt * u;
        if (c < C) table[r * C + c] = w_canon(acc[u]); /* a NaN stays NaN through the adds */
      }
    }
  }
}

/* The position table's backward when the positions are implicit (idx[bt] = bt % T): row r's positions are
 * r, T + r, 2T + r, ... ascending, so a thread per (r, c) adds them in that order onto table[r, c] - the
 * reference's order, with no scan of the positions. Rows r < min(T, nrows); grid-stride over them. */
extern "C" __global__ void weft_tx_embed_bwd_pos(weft_tx_embed_bwd_args p) {
  const float *dout = reinterpret_cast<const float *>(p.dout);
  float *table = reinterpret_cast<float *>(p.table);
  const long long C = p.C, T = p.T, B = p.BT / p.T, R = p.T < p.nrows ? p.T : p.nrows;
  for (long long i = GTID; i < R * C; i += GSTRIDE) {
    const long long r = i / C, c = i - r * C;
    const float *d = dout + r * C + c;
    float acc = table[i];
#pragma unroll 4
    for (long long b = 0; b < B; b++) acc = __fadd_rn(acc, d[b * T * C]);
    table[i] = w_canon(acc); /* a NaN stays NaN through the adds */
  }
}

/* -------------------------------------------------------------------------------------- layernorm */

/* Layernorm: a block of 256 threads takes 32 rows (rows strided by the grid) and thread r of warp 0 makes
 * row r's sums, one accumulator from +0 adding the columns in ascending order. Warps 1..7 stream the rows
 * through shared memory LN_CH columns at a time (coalesced loads, computing the summands - x, (x - mean)^2,
 * gamma * dy, (gamma * dy) * n - elementwise) while warp 0 adds the previous chunk's (double buffered, one
 * barrier a chunk); a warp's reads of a chunk hit 32 different banks (rows padded to LN_CH + 1). Then every
 * thread writes y or dx elementwise, a warp per row. Only independent outputs run side by side. */
#define LN_R 32
#define LN_CH 64
struct ln_shared {
  float t[2][2][LN_R][LN_CH + 1]; /* [buffer][summand][row][column] */
  float mu[LN_R], rs[LN_R], a[LN_R], b[LN_R];
};

/* The summands of columns [c0, c0 + LN_CH) of rows r0.. into sh.t[buf]: kind 0 x, kind 1 (x - mu)^2, kind 2
 * g = gamma * dy and g * n with n = (x - mu) * rs. Threads t0, t0 + nt, ... Each thread's loads go out
 * LN_FB at a time into registers before any of its shared-memory stores: a store through shared memory
 * would otherwise order every later global load after it (the compiler cannot prove they do not alias), so
 * the loads of one fill would run one latency after another. */
#define LN_FB 10
#define LN_OB 8
DEV void ln_fill(ln_shared &sh, int buf, int kind, const weft_tx_ln_args &p, long long r0, int nr, long long c0,
                 int t0, int nt) {
  const long long C = p.C;
  const float *X = reinterpret_cast<const float *>(p.x);
  const float *DY = reinterpret_cast<const float *>(p.dy), *gamma = reinterpret_cast<const float *>(p.gamma);
  const int nc = C - c0 < LN_CH ? (int)(C - c0) : LN_CH;
  for (int e0 = t0; e0 < LN_R * LN_CH; e0 += LN_FB * nt) {
    float xv[LN_FB], dv[LN_FB], gv[LN_FB];
#pragma unroll
    for (int k = 0; k < LN_FB; k++) {
      const int e = e0 + k * nt, rr = e / LN_CH, cc = e - rr * LN_CH;
      xv[k] = dv[k] = gv[k] = 0.0f;
      if (e >= LN_R * LN_CH || rr >= nr || cc >= nc) continue;
      const long long i = (r0 + rr) * C + c0 + cc;
      xv[k] = X[i];
      if (kind == 2) dv[k] = DY[i], gv[k] = gamma[c0 + cc];
    }
#pragma unroll
    for (int k = 0; k < LN_FB; k++) {
      const int e = e0 + k * nt, rr = e / LN_CH, cc = e - rr * LN_CH;
      if (e >= LN_R * LN_CH || rr >= nr || cc >= nc) continue;
      const float x = xv[k];
      if (kind == 0) {
        sh.t[buf][0][rr][cc] = x;
      } else if (kind == 1) {
        const float d = __fsub_rn(x, sh.mu[rr]);
        sh.t[buf][0][rr][cc] = __fmul_rn(d, d);
      } else {
        const float n = __fmul_rn(__fsub_rn(x, sh.mu[rr]), sh.rs[rr]);
        const float g = __fmul_rn(gv[k], dv[k]);
        sh.t[buf][0][rr][cc] = g;
        sh.t[buf][1][rr][cc] = __fmul_rn(g, n);
      }
    }
  }
}

/* Row r's sums (thread r of warp 0, r < nr) over all C columns: s0 of summand 0 and, for kind 2, s1 of
 * summand 1, each ascending. */
DEV void ln_sums(ln_shared &sh, int kind, const weft_tx_ln_args &p, long long r0, int nr, float *s0, float *s1) {
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, w = tid >> 5;
  const long long C = p.C, nch = (C + LN_CH - 1) / LN_CH;
  float a = 0.0f, b = 0.0f;
  ln_fill(sh, 0, kind, p, r0, nr, 0, tid, nt);
  __syncthreads();
  for (long long ch = 0; ch < nch; ch++) {
    const int buf = (int)(ch & 1);
    if (w == 0) {
      if (lane < nr) {
        const int nc = C - ch * LN_CH < LN_CH ? (int)(C - ch * LN_CH) : LN_CH;
        const float *u = sh.t[buf][0][lane], *v = sh.t[buf][1][lane];
        if (kind == 2) {
          for (int cc = 0; cc < nc; cc++) {
            a = __fadd_rn(a, u[cc]);
            b = __fadd_rn(b, v[cc]);
          }
        } else {
#pragma unroll 8
          for (int cc = 0; cc < nc; cc++) a = __fadd_rn(a, u[cc]);
        }
      }
    } else if (ch + 1 < nch) {
      ln_fill(sh, buf ^ 1, kind, p, r0, nr, (ch + 1) * LN_CH, tid - 32, nt - 32);
    }
    __syncthreads(); /* chunk ch+1 written; chunk ch's buffer free for ch+2 */
  }
  *s0 = a, *s1 = b;
}

extern "C" __global__ void __launch_bounds__(256) weft_tx_layernorm_fwd(weft_tx_ln_args p) {
  __shared__ ln_shared sh;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, nw = blockDim.x >> 5;
  const long long C = p.C;
  const float invC = w_recipf((float)C);
  const float *X = reinterpret_cast<const float *>(p.x);
  const float *gamma = reinterpret_cast<const float *>(p.gamma), *beta = reinterpret_cast<const float *>(p.beta);
  float *Y = reinterpret_cast<float *>(p.y);
  float *M = reinterpret_cast<float *>(p.mean), *RS = reinterpret_cast<float *>(p.rstd);
  for (long long r0 = (long long)blockIdx.x * LN_R; r0 < p.N; r0 += (long long)gridDim.x * LN_R) {
    const int nr = p.N - r0 < LN_R ? (int)(p.N - r0) : LN_R;
    float s, unused;
    ln_sums(sh, 0, p, r0, nr, &s, &unused);
    if (w == 0 && lane < nr) sh.mu[lane] = __fmul_rn(s, invC);
    __syncthreads();
    ln_sums(sh, 1, p, r0, nr, &s, &unused);
    if (w == 0 && lane < nr) {
      const float var = __fmul_rn(s, invC);
      const float rs = w_rsqrtf(__fadd_rn(var, p.eps));
      sh.rs[lane] = rs;
      if (M) M[r0 + lane] = w_canon(sh.mu[lane]);
      if (RS) RS[r0 + lane] = w_canon(rs);
    }
    __syncthreads();
    for (int rr = w; rr < nr; rr += nw) {
      const float mu = sh.mu[rr], rs = sh.rs[rr];
      const float *x = X + (r0 + rr) * C;
      float *y = Y + (r0 + rr) * C;
      /* LN_OB columns' loads ahead of their stores (see ln_fill) */
      for (long long c0 = lane; c0 < C; c0 += 32 * LN_OB) {
        float xv[LN_OB], gv[LN_OB], bv[LN_OB];
#pragma unroll
        for (int k = 0; k < LN_OB; k++) {
          const long long c = c0 + 32 * k;
          xv[k] = c < C ? x[c] : 0.0f, gv[k] = c < C ? gamma[c] : 0.0f, bv[k] = c < C ? beta[c] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < LN_OB; k++) {
          const long long c = c0 + 32 * k;
          if (c >= C) continue;
          const float n = __fmul_rn(__fsub_rn(xv[k], mu), rs);
          const float o = __fmul_rn(n, gv[k]);
          y[c] = w_canon(__fadd_rn(o, bv[k]));
        }
      }
    }
    __syncthreads(); /* mu, rs and the buffers are reused by the next rows */
  }
}

/* s + v[0] + v[stride] + ... + v[(n-1)*stride], ascending, each add rounded (v in shared memory). Software
 * pipelined: the next eight values are loaded before this eight's adds, so the shared-memory latency (~30
 * cycles) hides behind eight dependent adds (~32) and the chain runs at the add's latency, not at load +
 * adds. */
DEV float seq_add(float s, const float *v, long long stride, long long n) {
  const long long n8 = n >> 3;
  if (n8 > 0) {
    float b[8];
#pragma unroll
    for (int u = 0; u < 8; u++) b[u] = v[u * stride];
    for (long long j = 0; j < n8; j++) {
      float nb[8];
      const long long nx = (j + 1 < n8 ? 8 * (j + 1) : 8 * j) * stride; /* the last round reloads its own */
#pragma unroll
      for (int u = 0; u < 8; u++) nb[u] = v[nx + u * stride];
#pragma unroll
      for (int u = 0; u < 8; u++) s = __fadd_rn(s, b[u]);
#pragma unroll
      for (int u = 0; u < 8; u++) b[u] = nb[u];
    }
  }
  for (long long j = n8 << 3; j < n; j++) s = __fadd_rn(s, v[j * stride]);
  return s;
}

/* 0 + v[0] + ... + v[n-1], ascending (seq_add from +0). */
DEV float seq_sum(const float *v, long long n) { return seq_add(0.0f, v, 1, n); }

/* Layernorm for a few rows (a decode step's one): a block per row. The row goes into shared memory in one
 * pass; thread 0 runs the reference's two chains (the sum, then the squares the block computed in parallel)
 * from there, and the block normalises. Rows up to WEFT_TX_LN_ROW_MAXC columns. */
extern "C" __global__ void __launch_bounds__(256) weft_tx_layernorm_fwd_row(weft_tx_ln_args p) {
  __shared__ __align__(16) float xs[WEFT_TX_LN_ROW_MAXC];
  __shared__ __align__(16) float sq[WEFT_TX_LN_ROW_MAXC];
  __shared__ float st[2];
  const int tid = threadIdx.x, nt = blockDim.x;
  const long long C = p.C;
  const float invC = w_recipf((float)C);
  const float *X = reinterpret_cast<const float *>(p.x);
  const float *gamma = reinterpret_cast<const float *>(p.gamma), *beta = reinterpret_cast<const float *>(p.beta);
  float *Y = reinterpret_cast<float *>(p.y);
  float *M = reinterpret_cast<float *>(p.mean), *RS = reinterpret_cast<float *>(p.rstd);
  for (long long r = blockIdx.x; r < p.N; r += gridDim.x) {
    const float *x = X + r * C;
    /* the row's loads all in flight, gamma's and beta's with them (their latency hides under the chains),
     * then the stores */
    constexpr int MAXL = WEFT_TX_LN_ROW_MAXC / 256;
    float ga[MAXL], be[MAXL];
    {
      float v[MAXL];
#pragma unroll
      for (int u = 0; u < MAXL; u++) {
        const long long c = u * nt + tid;
        v[u] = c < C ? x[c] : 0.0f;
        ga[u] = c < C ? gamma[c] : 0.0f, be[u] = c < C ? beta[c] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < MAXL; u++)
        if (u * nt + tid < C) xs[u * nt + tid] = v[u];
    }
    __syncthreads();
    if (tid == 0) st[0] = __fmul_rn(seq_sum(xs, C), invC);
    __syncthreads();
    const float mu = st[0];
    for (long long c = tid; c < C; c += nt) {
      const float dd = __fsub_rn(xs[c], mu);
      sq[c] = __fmul_rn(dd, dd);
    }
    __syncthreads();
    if (tid == 0) {
      const float v = seq_sum(sq, C);
      const float rs = w_rsqrtf(__fadd_rn(__fmul_rn(v, invC), p.eps));
      st[1] = rs;
      if (M) M[r] = w_canon(mu);
      if (RS) RS[r] = w_canon(rs);
    }
    __syncthreads();
    const float rs = st[1];
    float *y = Y + r * C;
    {
#pragma unroll
      for (int u = 0; u < MAXL; u++) {
        const long long c = u * nt + tid;
        if (c >= C) continue;
        const float n = __fmul_rn(__fsub_rn(xs[c], mu), rs);
        y[c] = w_canon(__fadd_rn(__fmul_rn(n, ga[u]), be[u]));
      }
    }
    __syncthreads(); /* xs and st are the next row's */
  }
}

/* mean and rstd are the forward's (read, as the reference reads them); a = (sum g) * invC, b = (sum g * n) *
 * invC, dx = ((g - a) - n * b) * rstd. */
extern "C" __global__ void __launch_bounds__(256) weft_tx_layernorm_bwd_dx(weft_tx_ln_args p) {
  __shared__ ln_shared sh;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, nw = blockDim.x >> 5;
  const long long C = p.C;
  const float invC = w_recipf((float)C);
  const float *X = reinterpret_cast<const float *>(p.x), *DY = reinterpret_cast<const float *>(p.dy);
  const float *gamma = reinterpret_cast<const float *>(p.gamma);
  const float *M = reinterpret_cast<const float *>(p.mean), *RS = reinterpret_cast<const float *>(p.rstd);
  float *DX = reinterpret_cast<float *>(p.dx);
  for (long long r0 = (long long)blockIdx.x * LN_R; r0 < p.N; r0 += (long long)gridDim.x * LN_R) {
    const int nr = p.N - r0 < LN_R ? (int)(p.N - r0) : LN_R;
    if (tid < nr) sh.mu[tid] = M[r0 + tid], sh.rs[tid] = RS[r0 + tid];
    __syncthreads();
    float sa, sb;
    ln_sums(sh, 2, p, r0, nr, &sa, &sb);
    if (w == 0 && lane < nr) sh.a[lane] = __fmul_rn(sa, invC), sh.b[lane] = __fmul_rn(sb, invC);
    __syncthreads();
    for (int rr = w; rr < nr; rr += nw) {
      const float mu = sh.mu[rr], rs = sh.rs[rr], a = sh.a[rr], b = sh.b[rr];
      const float *x = X + (r0 + rr) * C, *dy = DY + (r0 + rr) * C;
      float *dx = DX + (r0 + rr) * C;
      for (long long c0 = lane; c0 < C; c0 += 32 * LN_OB) {
        float xv[LN_OB], gv[LN_OB], dv[LN_OB];
#pragma unroll
        for (int k = 0; k < LN_OB; k++) {
          const long long c = c0 + 32 * k;
          xv[k] = c < C ? x[c] : 0.0f, gv[k] = c < C ? gamma[c] : 0.0f, dv[k] = c < C ? dy[c] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < LN_OB; k++) {
          const long long c = c0 + 32 * k;
          if (c >= C) continue;
          const float n = __fmul_rn(__fsub_rn(xv[k], mu), rs);
          const float g = __fmul_rn(gv[k], dv[k]);
          const float nb = __fmul_rn(n, b);
          const float t = __fsub_rn(__fsub_rn(g, a), nb);
          dx[c] = w_canon(__fmul_rn(t, rs));
        }
      }
    }
    __syncthreads();
  }
}

/* dgamma, dbeta: each is a chain per channel down the rows (rows ascending from the accumulator's value), so
 * the channels are the only parallelism: WEFT_TX_LNG_CW channels a block (grid ceil(C / CW), channels also
 * strided by gridDim.x), lanes 0..CW-1 of warp 0 run dgamma's chains and lanes CW..2CW-1 dbeta's. All 256
 * threads load a tile of LNG_R rows (LNG_PER elements each, into registers), compute n*dy (elementwise: no
 * order involved) and store n*dy and dy to shared memory; the loads of tile k+1 are issued before warp 0
 * adds tile k and stored after (double buffered, one barrier a tile), so the chains wait on the adds (LNG_R
 * adds ~ LNG_R * 4 cycles a tile) and the loads' latency hides behind them. Narrow strips (32-byte row
 * segments) give C / CW blocks: 96 for C = 768, where 32 channels a block gave 24. */
#define LNG_CW WEFT_TX_LNG_CW
#define LNG_R 256
#define LNG_PER (LNG_R * LNG_CW / 256)
#define LNG_ST (LNG_R * LNG_CW + LNG_CW) /* a summand's stride: dgamma's and dbeta's lanes on different banks */

DEV void lng_load(const weft_tx_ln_args &p, long long r0, long long c0, float *xv, float *dv, float *mv, float *rv) {
  const float *X = reinterpret_cast<const float *>(p.x), *DY = reinterpret_cast<const float *>(p.dy);
  const float *M = reinterpret_cast<const float *>(p.mean), *RS = reinterpret_cast<const float *>(p.rstd);
#pragma unroll
  for (int k = 0; k < LNG_PER; k++) {
    const int e = (int)threadIdx.x + 256 * k;
    const long long r = r0 + e / LNG_CW, c = c0 + e % LNG_CW;
    xv[k] = dv[k] = mv[k] = rv[k] = 0.0f;
    if (r < p.N && c < p.C) xv[k] = X[r * p.C + c], dv[k] = DY[r * p.C + c], mv[k] = M[r], rv[k] = RS[r];
  }
}

DEV void lng_store(float *t, const float *xv, const float *dv, const float *mv, const float *rv) {
#pragma unroll
  for (int k = 0; k < LNG_PER; k++) {
    const int e = (int)threadIdx.x + 256 * k;
    t[e] = __fmul_rn(__fmul_rn(__fsub_rn(xv[k], mv[k]), rv[k]), dv[k]);
    t[LNG_ST + e] = dv[k];
  }
}

extern "C" __global__ void __launch_bounds__(256) weft_tx_layernorm_bwd_dgb(weft_tx_ln_args p) {
  __shared__ float t[2][2 * LNG_ST]; /* [buffer][n*dy tile | dy tile], a tile [row][channel] */
  const long long C = p.C, N = p.N;
  float *DG = reinterpret_cast<float *>(p.dgamma), *DB = reinterpret_cast<float *>(p.dbeta);
  if (N <= 0) return; /* nothing added: the accumulators keep their bits */
  const int tid = threadIdx.x, kind = tid / LNG_CW, col = tid % LNG_CW;
  const bool adder = tid < 2 * LNG_CW;
  const long long ntiles = (N + LNG_R - 1) / LNG_R;
  for (long long c0 = (long long)blockIdx.x * LNG_CW; c0 < C; c0 += (long long)gridDim.x * LNG_CW) {
    const long long c = c0 + col;
    float *acc_out = kind == 0 ? DG : DB;
    float acc = 0.0f;
    if (adder && c < C && acc_out) acc = acc_out[c];
    float xv[LNG_PER], dv[LNG_PER], mv[LNG_PER], rv[LNG_PER];
    lng_load(p, 0, c0, xv, dv, mv, rv);
    lng_store(t[0], xv, dv, mv, rv);
    __syncthreads();
    for (long long k = 0; k < ntiles; k++) {
      const bool more = k + 1 < ntiles;
      if (more) lng_load(p, (k + 1) * LNG_R, c0, xv, dv, mv, rv);
      if (adder) {
        const long long rem = N - k * LNG_R;
        acc = seq_add(acc, t[k & 1] + kind * LNG_ST + col, LNG_CW, rem < LNG_R ? rem : LNG_R);
      }
      if (more) lng_store(t[(k + 1) & 1], xv, dv, mv, rv);
      __syncthreads(); /* tile k+1 stored; tile k's buffer free for tile k+2 */
    }
    if (adder && c < C && acc_out) acc_out[c] = w_canon(acc);
  }
}

/* ------------------------------------------------------------------------------------------- gelu */

DEV float gelu_b(float x, float dy) {
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
  return w_canon(__fmul_rn(__fadd_rn(l, r), dy));
}

/* GELU forward and backward, elementwise. Where every array is 16-byte aligned a thread takes GELU_U float4s
 * (strided by the grid), all their loads issued before any store (a store would order later loads after it:
 * the compiler cannot prove the arrays apart), then computes and stores them; the n % 4 tail and unaligned
 * arrays go element by element. The arithmetic is per element, so the grouping changes no bits. */
#define GELU_U WEFT_TX_GELU_U
DEV bool gelu_vec(const void *a, const void *b, const void *c) {
  return ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b) |
           reinterpret_cast<unsigned long long>(c)) & 15u) == 0;
}

/* The fp32 contract's GELU (forward and backward), as the logistic form of the same function:
 * 0.5x(1 + tanh u) = x s with s = 1 / (1 + e), e = exp(-2u) (weft's exp, with fused multiply-adds), and its
 * derivative s + 2 S x e s^2 (1 + 3K x^2) (the tanh form's (1 - tanh^2) / 4 is e s^2, with no cancellation
 * near s = 1). The divisions are the hardware's fast reciprocal (__fdividef, within 2 ulp; a denominator past
 * 2^126, where e has overflowed, gives 0: the limits x s -> -0 and the derivative -> 0). About a third fewer
 * instructions than tanh's 1 - 2 / (exp(2|u|) + 1) with a correctly rounded division: on GPT-2's activations
 * the kernels are bound by their arithmetic as much as by memory. Within a few roundings of the reference. */
template <bool F32> DEV float gelu_f(float x) {
  if (!F32) return w_gelu(x);
  const float u = TX_GELU_S * fmaf(TX_GELU_K * x, x * x, x);
  return __fdividef(x, 1.0f + w_expf_f32(-2.0f * u));
}
template <bool F32> DEV float gelu_bf(float x, float dy) {
  if (!F32) return gelu_b(x, dy);
  const float u = TX_GELU_S * fmaf(TX_GELU_K * x, x * x, x);
  const float e = w_expf_f32(-2.0f * u);
  const float sg = __fdividef(1.0f, 1.0f + e);
  const float es = fminf(e * sg, 1.0f); /* e / (1 + e): 1 where e is inf (inf * 0) */
  const float r = (2.0f * TX_GELU_S) * x * es * sg * fmaf(TX_GELU_3K * x, x, 1.0f);
  return (sg + r) * dy;
}

template <bool F32> DEV void gelu_fwd_body(const weft_tx_gelu_args &p) {
  const float *X = reinterpret_cast<const float *>(p.x);
  float *Y = reinterpret_cast<float *>(p.out);
  long long i0 = 0;
  if (gelu_vec(X, Y, X)) {
    const long long n4 = p.n >> 2;
    const float4 *X4 = reinterpret_cast<const float4 *>(X);
    float4 *Y4 = reinterpret_cast<float4 *>(Y);
    for (long long i = GTID; i < n4; i += GELU_U * GSTRIDE) {
      float4 v[GELU_U];
#pragma unroll
      for (int u = 0; u < GELU_U; u++)
        if (i + u * GSTRIDE < n4) v[u] = X4[i + u * GSTRIDE];
#pragma unroll
      for (int u = 0; u < GELU_U; u++)
        if (i + u * GSTRIDE < n4)
          Y4[i + u * GSTRIDE] = make_float4(gelu_f<F32>(v[u].x), gelu_f<F32>(v[u].y), gelu_f<F32>(v[u].z), gelu_f<F32>(v[u].w));
    }
    i0 = n4 << 2;
  }
  for (long long i = i0 + GTID; i < p.n; i += GSTRIDE) Y[i] = gelu_f<F32>(X[i]);
}

template <bool F32> DEV void gelu_bwd_body(const weft_tx_gelu_args &p) {
  const float *X = reinterpret_cast<const float *>(p.x), *DY = reinterpret_cast<const float *>(p.dy);
  float *DX = reinterpret_cast<float *>(p.out);
  long long i0 = 0;
  if (gelu_vec(X, DY, DX)) {
    const long long n4 = p.n >> 2;
    const float4 *X4 = reinterpret_cast<const float4 *>(X), *D4 = reinterpret_cast<const float4 *>(DY);
    float4 *O4 = reinterpret_cast<float4 *>(DX);
    for (long long i = GTID; i < n4; i += GELU_U * GSTRIDE) {
      float4 v[GELU_U], d[GELU_U];
#pragma unroll
      for (int u = 0; u < GELU_U; u++)
        if (i + u * GSTRIDE < n4) v[u] = X4[i + u * GSTRIDE], d[u] = D4[i + u * GSTRIDE];
#pragma unroll
      for (int u = 0; u < GELU_U; u++)
        if (i + u * GSTRIDE < n4)
          O4[i + u * GSTRIDE] = make_float4(gelu_bf<F32>(v[u].x, d[u].x), gelu_bf<F32>(v[u].y, d[u].y), gelu_bf<F32>(v[u].z, d[u].z),
                                            gelu_bf<F32>(v[u].w, d[u].w));
    }
    i0 = n4 << 2;
  }
  for (long long i = i0 + GTID; i < p.n; i += GSTRIDE) DX[i] = gelu_bf<F32>(X[i], DY[i]);
}
extern "C" __global__ void __launch_bounds__(256, WEFT_TX_GELU_MINB) weft_tx_gelu_fwd(weft_tx_gelu_args p) { gelu_fwd_body<false>(p); }
extern "C" __global__ void __launch_bounds__(256, WEFT_TX_GELU_MINB) weft_tx_gelu_bwd(weft_tx_gelu_args p) { gelu_bwd_body<false>(p); }
extern "C" __global__ void __launch_bounds__(256, WEFT_TX_GELU_MINB) weft_tx_gelu_fwd_f32(weft_tx_gelu_args p) { gelu_fwd_body<true>(p); }
extern "C" __global__ void __launch_bounds__(256, WEFT_TX_GELU_MINB) weft_tx_gelu_bwd_f32(weft_tx_gelu_args p) { gelu_bwd_body<true>(p); }

/* ---------------------------------------------------------------------------------- causal softmax */

/* The rest of a causal softmax row by a warp, once mx is known: the lanes store e[j] = w_expf(z(j) - mx) into
 * p[j] (j < n; z(j) is read before p[j] is written, by the same lane, so p may be the scores' own row),
 * lane 0 adds p[0..n) one by one in ascending order (one accumulator from +0, no shuffle per element), and
 * the lanes scale their own e[j] by recip(sum): the reference's e, sum and p = e * recip(sum), bit for bit.
 * Columns n..T-1 get +0. */
template <typename Z> DEV void warp_softmax_tail(float *p, Z z, float mx, long long n, long long T) {
  const int lane = threadIdx.x & 31;
  __syncwarp(); /* every lane has finished reading the row for the max */
  for (long long j = lane; j < n; j += 32) p[j] = w_expf(__fsub_rn(z(j), mx));
  __syncwarp(); /* the e[j] are visible to lane 0 */
  float sum = 0.0f;
  if (lane == 0) {
    long long j = 0;
    for (; j + 4 <= n; j += 4) {
      const float e0 = p[j], e1 = p[j + 1], e2 = p[j + 2], e3 = p[j + 3];
      sum = __fadd_rn(sum, e0);
      sum = __fadd_rn(sum, e1);
      sum = __fadd_rn(sum, e2);
      sum = __fadd_rn(sum, e3);
    }
    for (; j < n; j++) sum = __fadd_rn(sum, p[j]);
  }
  sum = __shfl_sync(TX_FULL, sum, 0);
  const float inv = w_recipf(sum);
  for (long long j = lane; j < n; j += 32) p[j] = w_canon(__fmul_rn(p[j], inv));
  for (long long j = n + lane; j < T; j += 32) p[j] = 0.0f;
}

/* dot = sum over j < n ascending of x[j] * y[j], one accumulator from +0, made by lane 0 and returned to every
 * lane (the shuffle also holds the other lanes until lane 0 has read the row, so they may overwrite it). */
DEV float lane0_dot(const float *x, const float *y, long long n) {
  float dot = 0.0f;
  if ((threadIdx.x & 31) == 0) {
    long long j = 0;
    for (; j + 4 <= n; j += 4) {
      const float p0 = __fmul_rn(x[j], y[j]), p1 = __fmul_rn(x[j + 1], y[j + 1]);
      const float p2 = __fmul_rn(x[j + 2], y[j + 2]), p3 = __fmul_rn(x[j + 3], y[j + 3]);
      dot = __fadd_rn(dot, p0);
      dot = __fadd_rn(dot, p1);
      dot = __fadd_rn(dot, p2);
      dot = __fadd_rn(dot, p3);
    }
    for (; j < n; j++) dot = __fadd_rn(dot, __fmul_rn(x[j], y[j]));
  }
  return __shfl_sync(TX_FULL, dot, 0);
}

/* One causal softmax row by a warp: z(j) the already scaled score of column j <= t; p[0..T) written:
 * canonical e[j] * recip(sum) for j <= t, +0 after. */
template <typename Z> DEV void warp_softmax_row(float *p, Z z, long long t, long long T) {
  const long long n = t + 1;
  const float mx = warp_first_max(z, n);
  warp_softmax_tail(p, z, mx, n, T);
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
    const float dot = lane0_dot(pr, dp, n);
    for (long long j = lane; j < n; j += 32) {
      const float g = __fmul_rn(pr[j], __fsub_rn(dp[j], dot));
      ds[j] = w_canon(__fmul_rn(g, p.scale));
    }
    for (long long j = n + lane; j < T; j += 32) ds[j] = 0.0f;
  }
}

/* -------------------------------------------------------------------------------------- attention */

/* Attention in register tiles. A block of 256 threads takes one (b, h) and a tile of AX_M = 64 rows; thread
 * tid = 16 ty + tx owns rows 4ty .. 4ty+3 of the tile and columns 4tx .. 4tx+3 of each 64-wide column block:
 * 16 outputs, one accumulator each. Operands pass through shared memory AX_K = 32 deep by 64 wide, stored
 * k-major, so a thread reads its 4 row values and its 4 column values as one float4 each: per k step two
 * shared loads feed 16 multiplies and 16 adds, and the kernel waits on arithmetic, not on shared memory (the
 * 32 x 32 tiles with one value per thread before made 5 loads per 4 products). Every output is still one
 * accumulator that starts at +0 and adds its products one by one in the reference's ascending order (k runs
 * over a stage, stages ascending); only independent outputs run side by side. A product is one rounded
 * multiply of the same two values (x * y and y * x are the same bits; a NaN is canonical when stored). Tiles
 * above the causal diagonal are never visited; on the diagonal a product is added only where the reference
 * adds it (a masked +0 product would turn an accumulator of -0 into +0). */
#define AX_M 64
#define AX_K 32
#define AX_P 68 /* row pitch of a stage: float4 aligned */
struct ax_smem {
  float a[AX_K][AX_P];
  float b[AX_K][AX_P];
  float e[8][8][33]; /* per warp, 8 rows of 32 values for the rows' chains (pitch 33: no bank conflicts) */
  float mx[8][8];    /* per warp, its rows' maxima (the forward) */
};

DEV void ax_zero(float acc[4][4]) {
#pragma unroll
  for (int r = 0; r < 4; r++)
#pragma unroll
    for (int c = 0; c < 4; c++) acc[r][c] = 0.0f;
}

/* acc[r][c] += x[r] * y[c], each its own rounded multiply and add, for the 4 x 4 (rows, columns); under the
 * fp32 contract (F32) one fused multiply-add. */
template <bool F32> DEV void ax_madd(float &acc, float x, float y) {
  acc = F32 ? __fmaf_rn(x, y, acc) : __fadd_rn(acc, __fmul_rn(x, y));
}

template <bool F32> DEV void ax_step(float acc[4][4], const float *xa, const float *ya) {
  const float4 x = *reinterpret_cast<const float4 *>(xa), y = *reinterpret_cast<const float4 *>(ya);
  const float xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
  for (int r = 0; r < 4; r++)
#pragma unroll
    for (int c = 0; c < 4; c++) ax_madd<F32>(acc[r][c], xs[r], ys[c]);
}

/* acc[r][c] = sum over i ascending (i < hs) of X[row][i] * Y[col][i], row = row0 + 4ty + r, col = col0 + 4tx
 * + c; X row t at X + t * ldx, Y row j at Y + j * ldy, rows up to T (beyond: zeros, results unused). */
template <bool F32>
DEV void ax_dots(ax_smem &sm, const float *X, long long ldx, const float *Y, long long ldy, long long row0,
                 long long col0, long long T, long long hs, float acc[4][4]) {
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  ax_zero(acc);
  for (long long i0 = 0; i0 < hs; i0 += AX_K) {
    const int ni = hs - i0 < AX_K ? (int)(hs - i0) : AX_K;
    for (int e = tid; e < AX_M * AX_K; e += blockDim.x) { /* a warp reads 32 consecutive i of one row */
      const int rr = e >> 5, ii = e & 31;
      sm.a[ii][rr] = (row0 + rr < T && ii < ni) ? X[(row0 + rr) * ldx + i0 + ii] : 0.0f;
      sm.b[ii][rr] = (col0 + rr < T && ii < ni) ? Y[(col0 + rr) * ldy + i0 + ii] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int ii = 0; ii < ni; ii++) ax_step<F32>(acc, &sm.a[ii][4 * ty], &sm.b[ii][4 * tx]);
    __syncthreads();
  }
}

/* acc[r][c] += sum over k ascending of A(row, k) * Bm[k][4tx + c] for row = row0 + 4ty + r, with k in [0, row]
 * (GE false) or [row, T) (GE true). A(row, k) = A[row * lda + k], or A[k * lda + row] when TR; Bm row k at
 * Bm + k * ldb, ncol (<= 64) columns valid. */
template <bool F32, bool TR, bool GE>
DEV void ax_mm(ax_smem &sm, const float *A, long long lda, const float *Bm, long long ldb, long long row0, long long T,
               int ncol, float acc[4][4]) {
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const long long R0 = row0 + 4 * ty; /* this thread's first row */
  const long long kend = GE ? T : (row0 + AX_M < T ? row0 + AX_M : T);
  for (long long k0 = GE ? row0 : 0; k0 < kend; k0 += AX_K) {
    for (int e = tid; e < AX_M * AX_K; e += blockDim.x) {
      if (TR) { /* A stored with the row index fastest: a warp reads 32 consecutive rows */
        const int rr = e & 63, kk = e >> 6;
        const long long gr = row0 + rr, gk = k0 + kk;
        sm.a[kk][rr] = (gr < T && gk < T) ? A[gk * lda + gr] : 0.0f;
      } else { /* a warp reads 32 consecutive k of one row */
        const int kk = e & 31, rr = e >> 5;
        const long long gr = row0 + rr, gk = k0 + kk;
        sm.a[kk][rr] = (gr < T && gk < T) ? A[gr * lda + gk] : 0.0f;
      }
      const int cc = e & 63, kk = e >> 6;
      sm.b[kk][cc] = (k0 + kk < T && cc < ncol) ? Bm[(k0 + kk) * ldb + cc] : 0.0f;
    }
    __syncthreads();
    const int kn = T - k0 < AX_K ? (int)(T - k0) : AX_K;
    const bool full = GE ? k0 >= R0 + 3 : k0 + kn - 1 <= R0; /* every k of the stage counts for all 4 rows */
    if (full) {
#pragma unroll 4
      for (int kk = 0; kk < kn; kk++) ax_step<F32>(acc, &sm.a[kk][4 * ty], &sm.b[kk][4 * tx]);
    } else {
      for (int kk = 0; kk < kn; kk++) {
        const long long k = k0 + kk;
        const float4 x = *reinterpret_cast<const float4 *>(&sm.a[kk][4 * ty]);
        const float4 y = *reinterpret_cast<const float4 *>(&sm.b[kk][4 * tx]);
        const float xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
        for (int r = 0; r < 4; r++)
          if (GE ? k >= R0 + r : k <= R0 + r)
#pragma unroll
            for (int c = 0; c < 4; c++) ax_madd<F32>(acc[r][c], xs[r], ys[c]);
      }
    }
    __syncthreads();
  }
}

/* The row chains of a warp's 8 rows t = rb + r (r < nr), lane r holding row r's: s_r = 0 + f(r, 0) + f(r, 1)
 * + ... + f(r, t), each add rounded, ascending. The lanes evaluate f for 32 columns of all 8 rows at a time
 * (f may also store), stage the values in shared memory, and lanes 0..7 then add their row's 32 one by one:
 * eight chains run side by side instead of one, and they read shared memory, not global. */
template <typename F> DEV float ax_row_chains(ax_smem &sm, long long rb, int nr, F f) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  float s = 0.0f;
  const long long n = rb + nr; /* the longest row's length */
  for (long long base = 0; base < n; base += 32) {
    const long long j = base + lane;
#pragma unroll
    for (int r = 0; r < 8; r++)
      if (r < nr) sm.e[w][r][lane] = j <= rb + r ? f(r, j) : 0.0f;
    __syncwarp();
    if (lane < nr) {
      const long long m = rb + lane + 1 - base; /* this row's values in the group */
      const float *v = sm.e[w][lane];
      if (m >= 32) {
#pragma unroll
        for (int q = 0; q < 32; q++) s = __fadd_rn(s, v[q]);
      } else {
        for (int q = 0; q < m; q++) s = __fadd_rn(s, v[q]);
      }
    }
    __syncwarp(); /* the staging is free for the next group */
  }
  return s;
}

/* Tiles: B * NH * ceil(T / AX_M), strided by gridDim.x, ordered by row tile first so that the longest ones
 * (the last rows in the forward, HEAVY_LAST; the first in dqkv) start first and the short ones fill the tail. */
DEV void ax_tile(long long tile, long long BH, long long nt, bool heavy_last, long long *bh, long long *row0) {
  const long long ri = tile / BH;
  *bh = tile - ri * BH;
  *row0 = (heavy_last ? nt - 1 - ri : ri) * AX_M;
}

/* Forward, per tile: the scores of rows t against keys j <= t (q . k over i ascending, times scale) into att's
 * rows; then each warp runs the causal softmax of its 8 rows over their stored scores (preatt written first:
 * the first max by warp_first_max, the exponentials stored in att, the sums as eight side-by-side chains,
 * then att = e * recip(sum)); then out[t][i] = sum over j <= t ascending of att[t][j] * v[j][i]. */
template <bool F32> DEV void ax_fwd(ax_smem &sm, const weft_tx_attn_args &p) {
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4, lane = tid & 31, wid = tid >> 5;
  const long long T = p.T, C = p.C, NH = p.NH, hs = C / NH, C3 = 3 * C, BH = p.B * NH;
  const float scale = w_rsqrtf((float)hs);
  const float *QKV = reinterpret_cast<const float *>(p.qkv);
  float *ATT = reinterpret_cast<float *>(p.att), *PRE = reinterpret_cast<float *>(p.preatt);
  float *OUT = reinterpret_cast<float *>(p.out);
  const long long nt = (T + AX_M - 1) / AX_M;
  for (long long tile = blockIdx.x; tile < BH * nt; tile += gridDim.x) {
    long long bh, row0;
    ax_tile(tile, BH, nt, true, &bh, &row0);
    const long long h = bh % NH, b = bh / NH;
    const float *Qb = QKV + b * T * C3 + h * hs; /* q row t at Qb + t * C3, k at + C, v at + 2C */
    const long long R0 = row0 + 4 * ty, kend = row0 + AX_M < T ? row0 + AX_M : T;
    for (long long j0 = 0; j0 < kend; j0 += AX_M) {
      float acc[4][4];
      ax_dots<F32>(sm, Qb, C3, Qb + C, C3, row0, j0, T, hs, acc);
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const long long t = R0 + r;
        if (t >= T) break;
        float *arow = ATT + (bh * T + t) * T;
#pragma unroll
        for (int c = 0; c < 4; c++) {
          const long long j = j0 + 4 * tx + c;
          if (j <= t) arow[j] = __fmul_rn(acc[r][c], scale);
        }
      }
    }
    __syncthreads(); /* the scores of the tile's rows, written by every thread, are read by the row warps */
    const long long rb = row0 + 8 * wid;
    if (rb < T) {
      const int nr = T - rb < 8 ? (int)(T - rb) : 8;
      for (int r = 0; r < nr; r++) {
        const long long t = rb + r;
        float *a = ATT + (bh * T + t) * T;
        if (PRE) {
          float *pa = PRE + (bh * T + t) * T;
          for (long long j = lane; j <= t; j += 32) pa[j] = w_canon(a[j]);
          for (long long j = t + 1 + lane; j < T; j += 32) pa[j] = __uint_as_float(0xff800000u);
        }
        const float mx = warp_first_max([&](long long j) { return a[j]; }, t + 1);
        if (lane == 0) sm.mx[wid][r] = mx;
      }
      __syncwarp(); /* every lane has read the scores (the max) before they are overwritten */
      const float sum = ax_row_chains(sm, rb, nr, [&](int r, long long j) {
        float *a = ATT + (bh * T + rb + r) * T;
        const float e = w_expf(__fsub_rn(a[j], sm.mx[wid][r]));
        a[j] = e;
        return e;
      });
      const float inv = w_recipf(sum);
      for (int r = 0; r < nr; r++) {
        const long long t = rb + r;
        const float ir = __shfl_sync(TX_FULL, inv, r);
        float *a = ATT + (bh * T + t) * T;
        for (long long j = lane; j <= t; j += 32) a[j] = w_canon(__fmul_rn(a[j], ir));
        for (long long j = t + 1 + lane; j < T; j += 32) a[j] = 0.0f;
      }
    }
    __syncthreads(); /* the probabilities are read by every thread below */
    for (long long i0 = 0; i0 < hs; i0 += AX_M) {
      const int ni = hs - i0 < AX_M ? (int)(hs - i0) : AX_M;
      float acc[4][4];
      ax_zero(acc);
      ax_mm<F32, false, false>(sm, ATT + bh * T * T, T, Qb + 2 * C + i0, C3, row0, T, ni, acc);
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const long long t = R0 + r;
        if (t >= T) break;
        float *o = OUT + (b * T + t) * C + h * hs + i0;
#pragma unroll
        for (int c = 0; c < 4; c++)
          if (4 * tx + c < ni) o[4 * tx + c] = w_canon(acc[r][c]);
      }
    }
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

/* attention_cached with a block per row (a decode step's few rows), launched with 128 threads: the block
 * computes the row's scores in parallel (a thread per position, its i chain as the reference's), thread 0
 * the max and the sum chains over shared memory, the block the exponentials and probabilities, and a thread
 * per output column its chain over the positions. For rows of at most WEFT_TX_ATC_MAXT positions and heads of
 * at most WEFT_TX_ATC_MAXHS. */
#define ATC_KREG 64  /* key rows up to this long are loaded into registers whole */
#define ATC_V 2048   /* floats of value rows a chunk holds */
extern "C" __global__ void __launch_bounds__(128) weft_tx_attn_cached_blk(weft_tx_attn_cached_args p) {
  __shared__ float qs[WEFT_TX_ATC_MAXHS], zs[WEFT_TX_ATC_MAXT];
  __shared__ float vs[2][ATC_V];
  __shared__ float st[2];
  const int tid = threadIdx.x, nt = blockDim.x;
  const long long T = p.Tmax, C = p.C, NH = p.NH, hs = C / NH, C3 = 3 * C, Tq = p.Tq, t0 = p.t0;
  const float scale = w_rsqrtf((float)hs);
  const float *QKV = reinterpret_cast<const float *>(p.qkv);
  float *ATT = reinterpret_cast<float *>(p.att), *OUT = reinterpret_cast<float *>(p.out);
  /* which value (position within a chunk, column) each of this thread's staging loads is: fixed for the
   * launch, so the chunks' loads need no division */
  int vj[ATC_V / 128], vi[ATC_V / 128];
#pragma unroll
  for (int q = 0; q < ATC_V / 128; q++) vj[q] = (q * 128 + tid) / (int)hs, vi[q] = (q * 128 + tid) % (int)hs;
  for (long long row = blockIdx.x; row < p.B * NH * Tq; row += gridDim.x) {
    const long long r = row % Tq, t = t0 + r, bh = row / Tq, h = bh % NH, b = bh / NH, n = t + 1;
    const float *q = QKV + (b * T + t) * C3 + h * hs;
    for (long long i = tid; i < hs; i += nt) qs[i] = q[i];
    __syncthreads();
    for (long long j = tid; j < n; j += nt) {
      const float *k = QKV + (b * T + j) * C3 + C + h * hs;
      float d = 0.0f;
      if (hs <= ATC_KREG) {
        /* the whole key row's loads in flight at once (a few blocks run: registers are plentiful), then the
         * chain */
        float kr[ATC_KREG];
#pragma unroll
        for (int i = 0; i < ATC_KREG; i++) kr[i] = i < hs ? k[i] : 0.0f;
#pragma unroll
        for (int i = 0; i < ATC_KREG; i++)
          if (i < hs) d = __fadd_rn(d, __fmul_rn(qs[i], kr[i]));
      } else {
        long long i = 0;
        for (; i + 8 <= hs; i += 8) { /* eight products ahead of their adds */
          float pr[8];
#pragma unroll
          for (int u = 0; u < 8; u++) pr[u] = __fmul_rn(qs[i + u], k[i + u]);
#pragma unroll
          for (int u = 0; u < 8; u++) d = __fadd_rn(d, pr[u]);
        }
        for (; i < hs; i++) d = __fadd_rn(d, __fmul_rn(qs[i], k[i]));
      }
      zs[j] = __fmul_rn(d, scale);
    }
    __syncthreads();
    if (tid == 0) {
      float mx = zs[0];
      for (long long j = 1; j < n; j++) mx = zs[j] > mx ? zs[j] : mx;
      st[0] = mx;
    }
    __syncthreads();
    const float mx = st[0];
    for (long long j = tid; j < n; j += nt) zs[j] = w_expf(__fsub_rn(zs[j], mx));
    __syncthreads();
    if (tid == 0) st[1] = w_recipf(seq_sum(zs, n));
    __syncthreads();
    const float inv = st[1];
    float *a = ATT + row * T;
    for (long long j = tid; j < n; j += nt) {
      const float v = w_canon(__fmul_rn(zs[j], inv));
      zs[j] = v;
      a[j] = v;
    }
    for (long long j = n + tid; j < T; j += nt) a[j] = 0.0f;
    __syncthreads();
    /* the output: column i's chain over the positions, by thread i (threads hs.. only load). The value rows
     * come through shared memory in chunks of ATC_V / hs positions, loaded by the whole block (coalesced,
     * all in flight) while the chains add the previous chunk: the chains wait on their adds, not on loads. */
    float *o = OUT + (b * Tq + r) * C + h * hs;
    const float *V = QKV + b * T * C3 + 2 * C + h * hs;
    const int cp = ATC_V / (int)hs;
    const long long nch = (n + cp - 1) / cp;
    float rv[ATC_V / 128];
    auto vload = [&](long long c) {
#pragma unroll
      for (int q = 0; q < ATC_V / 128; q++) {
        const long long j = c * cp + vj[q];
        rv[q] = vj[q] < cp && j < n ? V[j * C3 + vi[q]] : 0.0f;
      }
    };
    auto vstore = [&](int buf) {
#pragma unroll
      for (int q = 0; q < ATC_V / 128; q++) vs[buf][q * 128 + tid] = rv[q];
    };
    float acc0 = 0.0f, acc1 = 0.0f; /* columns tid and tid + 128 (heads up to WEFT_TX_ATC_MAXHS = 256) */
    vload(0);
    vstore(0);
    __syncthreads();
    for (long long c = 0; c < nch; c++) {
      if (c + 1 < nch) vload(c + 1);
      const long long j0 = c * cp, m = n - j0 < cp ? n - j0 : cp;
      if (tid < hs) {
        const float *vc = vs[c & 1] + tid;
        for (long long jj = 0; jj < m; jj++) acc0 = __fadd_rn(acc0, __fmul_rn(zs[j0 + jj], vc[jj * hs]));
      }
      if (tid + 128 < hs) {
        const float *vc = vs[c & 1] + tid + 128;
        for (long long jj = 0; jj < m; jj++) acc1 = __fadd_rn(acc1, __fmul_rn(zs[j0 + jj], vc[jj * hs]));
      }
      if (c + 1 < nch) vstore((int)((c + 1) & 1));
      __syncthreads();
    }
    if (tid < hs) o[tid] = w_canon(acc0);
    if (tid + 128 < hs) o[tid + 128] = w_canon(acc1);
    __syncthreads(); /* qs, zs, vs and st are the next row's */
  }
}

/* Backward, part 1, per tile: datt[t][j] = sum over i ascending of v[j][i] * dout[t][i] (j <= t) into ds's
 * rows; then each warp, for its 8 rows: dot = sum over j <= t ascending of att * datt (eight side-by-side
 * chains, as in the forward), ds = (att * (datt - dot)) * scale (not canonicalised: scratch, as in the
 * reference). */
template <bool F32> DEV void ax_bwd_ds(ax_smem &sm, const weft_tx_attn_args &p) {
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4, lane = tid & 31, wid = tid >> 5;
  const long long T = p.T, C = p.C, NH = p.NH, hs = C / NH, C3 = 3 * C, BH = p.B * NH;
  const float scale = w_rsqrtf((float)hs);
  const float *QKV = reinterpret_cast<const float *>(p.qkv), *ATT = reinterpret_cast<const float *>(p.att);
  const float *DOUT = reinterpret_cast<const float *>(p.dout);
  float *DS = reinterpret_cast<float *>(p.ds);
  const long long nt = (T + AX_M - 1) / AX_M;
  for (long long tile = blockIdx.x; tile < BH * nt; tile += gridDim.x) {
    long long bh, row0;
    ax_tile(tile, BH, nt, true, &bh, &row0);
    const long long h = bh % NH, b = bh / NH;
    const float *Vb = QKV + b * T * C3 + 2 * C + h * hs, *Db = DOUT + b * T * C + h * hs;
    const long long R0 = row0 + 4 * ty, kend = row0 + AX_M < T ? row0 + AX_M : T;
    for (long long j0 = 0; j0 < kend; j0 += AX_M) {
      float acc[4][4];
      ax_dots<F32>(sm, Db, C, Vb, C3, row0, j0, T, hs, acc);
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const long long t = R0 + r;
        if (t >= T) break;
        float *drow = DS + (bh * T + t) * T;
#pragma unroll
        for (int c = 0; c < 4; c++) {
          const long long j = j0 + 4 * tx + c;
          if (j <= t) drow[j] = acc[r][c];
        }
      }
    }
    __syncthreads(); /* the datt rows, written by every thread, are read by the row warps */
    const long long rb = row0 + 8 * wid;
    if (rb < T) {
      const int nr = T - rb < 8 ? (int)(T - rb) : 8;
      const float *ab = ATT + (bh * T + rb) * T;
      float *db = DS + (bh * T + rb) * T;
      const float dot = ax_row_chains(sm, rb, nr, [&](int r, long long j) {
        return __fmul_rn(ab[r * T + j], db[r * T + j]);
      });
      for (int r = 0; r < nr; r++) {
        const long long t = rb + r;
        const float dr = __shfl_sync(TX_FULL, dot, r);
        const float *a = ab + r * T;
        float *ds = db + r * T;
        for (long long j = lane; j <= t; j += 32) ds[j] = __fmul_rn(__fmul_rn(a[j], __fsub_rn(ds[j], dr)), scale);
      }
    }
    __syncthreads(); /* before the next tile's loads into shared memory */
  }
}

/* Backward, part 2, per tile of 64 rows and 64 channels at a time: dq[t][i] = sum over j = 0..t ascending of
 * ds[t][j] * k[j][i]; dk[j][i] = sum over t = j..T-1 ascending of ds[t][j] * q[t][i]; dv[j][i] = sum over
 * t = j..T-1 ascending of att[t][j] * dout[t][i] (the tile's rows playing t for dq and j for dk, dv). */
template <bool F32> DEV void ax_bwd_dqkv(ax_smem &sm, const weft_tx_attn_args &p) {
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const long long T = p.T, C = p.C, NH = p.NH, hs = C / NH, C3 = 3 * C, BH = p.B * NH;
  const float *QKV = reinterpret_cast<const float *>(p.qkv), *ATT = reinterpret_cast<const float *>(p.att);
  const float *DOUT = reinterpret_cast<const float *>(p.dout), *DS = reinterpret_cast<const float *>(p.ds);
  float *DQKV = reinterpret_cast<float *>(p.dqkv);
  const long long nt = (T + AX_M - 1) / AX_M;
  for (long long tile = blockIdx.x; tile < BH * nt; tile += gridDim.x) {
    long long bh, row0;
    ax_tile(tile, BH, nt, false, &bh, &row0);
    const long long h = bh % NH, b = bh / NH;
    const float *Qb = QKV + b * T * C3 + h * hs, *Db = DOUT + b * T * C + h * hs;
    const float *dsb = DS + bh * T * T, *ab = ATT + bh * T * T;
    const long long R0 = row0 + 4 * ty;
    for (long long i0 = 0; i0 < hs; i0 += AX_M) {
      const int ni = hs - i0 < AX_M ? (int)(hs - i0) : AX_M;
      for (int part = 0; part < 3; part++) {
        float acc[4][4];
        ax_zero(acc);
        if (part == 0) ax_mm<F32, false, false>(sm, dsb, T, Qb + C + i0, C3, row0, T, ni, acc);
        else if (part == 1) ax_mm<F32, true, true>(sm, dsb, T, Qb + i0, C3, row0, T, ni, acc);
        else ax_mm<F32, true, true>(sm, ab, T, Db + i0, C, row0, T, ni, acc);
#pragma unroll
        for (int r = 0; r < 4; r++) {
          const long long t = R0 + r;
          if (t >= T) break;
          float *d = DQKV + (b * T + t) * C3 + part * C + h * hs + i0;
#pragma unroll
          for (int c = 0; c < 4; c++)
            if (4 * tx + c < ni) d[4 * tx + c] = w_canon(acc[r][c]);
        }
      }
    }
  }
}

/* The kernels: the exact contract's, and the fp32 contract's (each product and add one fused multiply-add;
 * the orders, the softmax and the chains as under exact). */
#define AX_KERNEL(name, body, f32)                                                                          \
  extern "C" __global__ void __launch_bounds__(256) name(weft_tx_attn_args p) {                             \
    __shared__ __align__(16) ax_smem sm;                                                                    \
    body<f32>(sm, p);                                                                                       \
  }
AX_KERNEL(weft_tx_attn_fwd, ax_fwd, false)
AX_KERNEL(weft_tx_attn_bwd_ds, ax_bwd_ds, false)
AX_KERNEL(weft_tx_attn_bwd_dqkv, ax_bwd_dqkv, false)
AX_KERNEL(weft_tx_attn_fwd_f32, ax_fwd, true)
AX_KERNEL(weft_tx_attn_bwd_ds_f32, ax_bwd_ds, true)
AX_KERNEL(weft_tx_attn_bwd_dqkv_f32, ax_bwd_dqkv, true)

/* ---------------------------------------------------------------------------------- cross-entropy */

/* One row per block (rows strided by gridDim.x; blockDim a multiple of 32 from 64 to 512: 128 or 512 is launched).
 * mx and ls of row z[0..V) as lse_row in reference_tx.c:
 * - the first maximum: every thread keeps the first maximum of its own strided elements (strict >,
 *   ascending, starting from z[0] at index 0), then the warps and then thread 0 combine (value, index)
 *   pairs keeping the larger value and, on equal values (-0 and +0 equal), the lower index. For z[0] not
 *   NaN no NaN ever enters a pair, so "larger value, then lower index" is a total order on the pairs and
 *   every combining tree ends at the same pair: the lowest index holding the largest non-NaN value, where
 *   the reference's loop ends (warp_first_max's argument, across warps). With z[0] NaN the loop ends at z[0].
 * - the sum: the exponentials are independent, so warps 1.. compute e[j] = w_expf(z[j] - mx) for a chunk
 *   of XE_CHUNK columns into shared memory while thread 0 adds the previous chunk's, one by one in
 *   ascending j, into the one accumulator that starts at +0 (double buffered; one barrier per chunk). The
 *   adds are the reference's adds in the reference's order; only the exponentials moved to other threads.
 * ls is left in *ls_out for thread 0 only (the others get it through shared memory when they need it). */
#define XE_CHUNK 1024
struct xe_shared {
  float buf[2][XE_CHUNK];
  float rv[32];
  long long ri[32];
  float bc[2];
};

/* four loads in flight per thread before their exponentials (the loop waited on one load at a time) */
DEV void xe_fill(float *dst, const float *z, long long j0, long long V, float mx, int t, int nt) {
  const long long n = V - j0 < XE_CHUNK ? V - j0 : XE_CHUNK;
  long long k = t;
  for (; k + 3 * nt < n; k += 4 * nt) {
    const float z0 = z[j0 + k], z1 = z[j0 + k + nt], z2 = z[j0 + k + 2 * nt], z3 = z[j0 + k + 3 * nt];
    dst[k] = w_expf(__fsub_rn(z0, mx));
    dst[k + nt] = w_expf(__fsub_rn(z1, mx));
    dst[k + 2 * nt] = w_expf(__fsub_rn(z2, mx));
    dst[k + 3 * nt] = w_expf(__fsub_rn(z3, mx));
  }
  for (; k < n; k += nt) dst[k] = w_expf(__fsub_rn(z[j0 + k], mx));
}

DEV void block_lse(xe_shared &sh, const float *z, long long V, float *mx_out, float *ls_out) {
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, w = tid >> 5, nw = nt >> 5;
  const float z0 = z[0];
  float mx = z0;
  if (z0 == z0) { /* the same branch in every thread of the block */
    float best = z0;
    long long bi = 0, j = tid;
    for (; j + 3 * nt < V; j += 4 * nt) { /* four loads in flight, compared in ascending order */
      const float v0 = z[j], v1 = z[j + nt], v2 = z[j + 2 * nt], v3 = z[j + 3 * nt];
      if (v0 > best) best = v0, bi = j;
      if (v1 > best) best = v1, bi = j + nt;
      if (v2 > best) best = v2, bi = j + 2 * nt;
      if (v3 > best) best = v3, bi = j + 3 * nt;
    }
    for (; j < V; j += nt) {
      const float v = z[j];
      if (v > best) best = v, bi = j;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(TX_FULL, best, off);
      const long long oi = __shfl_xor_sync(TX_FULL, bi, off);
      if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
    }
    if (lane == 0) sh.rv[w] = best, sh.ri[w] = bi;
    __syncthreads();
    if (tid == 0) {
      best = sh.rv[0], bi = sh.ri[0];
      for (int q = 1; q < nw; q++)
        if (sh.rv[q] > best || (sh.rv[q] == best && sh.ri[q] < bi)) best = sh.rv[q], bi = sh.ri[q];
      sh.bc[0] = best;
    }
    __syncthreads();
    mx = sh.bc[0];
  }
  const long long nch = (V + XE_CHUNK - 1) / XE_CHUNK;
  xe_fill(sh.buf[0], z, 0, V, mx, tid, nt);
  __syncthreads();
  float s = 0.0f;
  for (long long c = 0; c < nch; c++) {
    if (w == 0) {
      if (lane == 0) {
        const float *bp = sh.buf[c & 1];
        const long long rem = V - c * XE_CHUNK;
        const int n = rem < XE_CHUNK ? (int)rem : XE_CHUNK;
        int k = 0;
#pragma unroll 4
        for (; k + 4 <= n; k += 4) {
          const float4 q = *reinterpret_cast<const float4 *>(bp + k);
          s = __fadd_rn(s, q.x);
          s = __fadd_rn(s, q.y);
          s = __fadd_rn(s, q.z);
          s = __fadd_rn(s, q.w);
        }
        for (; k < n; k++) s = __fadd_rn(s, bp[k]);
      }
    } else if (c + 1 < nch) {
      xe_fill(sh.buf[(c + 1) & 1], z, (c + 1) * XE_CHUNK, V, mx, tid - 32, nt - 32);
    }
    __syncthreads(); /* chunk c+1 written, chunk c's buffer free for chunk c+2 */
  }
  *mx_out = mx;
  *ls_out = w_logf(s); /* thread 0's */
}

extern "C" __global__ void __launch_bounds__(512) weft_tx_xent_fwd(weft_tx_xent_args p) {
  __shared__ __align__(16) xe_shared sh;
  const float *Z = reinterpret_cast<const float *>(p.logits);
  const int *tg = reinterpret_cast<const int *>(p.targets);
  float *L = reinterpret_cast<float *>(p.losses);
  for (long long n = blockIdx.x; n < p.N; n += gridDim.x) {
    const long long tgt = tg[n];
    if (tgt < 0 || tgt >= p.V) continue;
    const float *z = Z + n * p.V;
    float mx, ls;
    block_lse(sh, z, p.V, &mx, &ls);
    if (threadIdx.x == 0) L[n] = w_canon(-__fsub_rn(__fsub_rn(z[tgt], mx), ls));
  }
}

extern "C" __global__ void __launch_bounds__(512) weft_tx_xent_bwd(weft_tx_xent_args p) {
  __shared__ __align__(16) xe_shared sh;
  const float *Z = reinterpret_cast<const float *>(p.logits), *DL = reinterpret_cast<const float *>(p.dloss);
  const int *tg = reinterpret_cast<const int *>(p.targets);
  float *G = reinterpret_cast<float *>(p.dlogits);
  for (long long n = blockIdx.x; n < p.N; n += gridDim.x) {
    const long long tgt = tg[n];
    if (tgt < 0 || tgt >= p.V) continue;
    const float *z = Z + n * p.V;
    float *g = G + n * p.V;
    float mx, ls;
    block_lse(sh, z, p.V, &mx, &ls);
    if (threadIdx.x == 0) sh.bc[1] = ls;
    __syncthreads();
    ls = sh.bc[1];
    const float dl = DL[n];
    const long long nt = blockDim.x;
    long long j = threadIdx.x;
    for (; j + 3 * nt < p.V; j += 4 * nt) { /* four loads in flight */
      float zz[4];
#pragma unroll
      for (int u = 0; u < 4; u++) zz[u] = z[j + u * nt];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const float pr = w_expf(__fsub_rn(__fsub_rn(zz[u], mx), ls));
        const float ind = j + u * nt == tgt ? 1.0f : 0.0f;
        g[j + u * nt] = w_canon(__fmul_rn(__fsub_rn(pr, ind), dl));
      }
    }
    for (; j < p.V; j += nt) {
      const float pr = w_expf(__fsub_rn(__fsub_rn(z[j], mx), ls));
      const float ind = j == tgt ? 1.0f : 0.0f;
      g[j] = w_canon(__fmul_rn(__fsub_rn(pr, ind), dl));
    }
    __syncthreads(); /* bc[1] and the buffers are reused by the next row */
  }
}

/* Cross-entropy under the fp32 contract (docs/DESIGN.md): one row per block (blockDim a multiple of 32 from 64
 * to 1024; 512 is launched), the row's log-sum-exp in one pass spread over the whole block (xf_lse); weft's
 * own expf and logf. The results are in every thread. */
/* A running log-sum-exp: m the largest value seen, s the sum of expf(v - m) over the values seen. Merging
 * rescales the smaller side's sum. A NaN value or max reaches s (NaN), as it reaches the reference's sum. */
DEV void xf_merge(float &m, float &s, float m2, float s2) {
  const float mm = m2 > m ? m2 : m;
  s = s * w_expf_f32(m - mm) + s2 * w_expf_f32(m2 - mm);
  m = mm;
}
DEV void xf_add(float &m, float &s, float v) {
  if (v > m) {
    s = s * w_expf_f32(m - v) + 1.0f;
    m = v;
  } else {
    s += w_expf_f32(v - m);
  }
}

/* mx: the row's largest value; ls = logf(sum of expf(z - mx)). One pass over the row: each thread keeps four
 * running (max, sum) pairs over its columns (8 loads in flight), merged in the thread, over the warp
 * (butterfly) and over the warps in warp order by every thread, so every thread holds the same bits. */
DEV void xf_lse(float *part, const float *z, long long V, float *mx_out, float *ls_out) {
  const long long nt = blockDim.x;
  const float z0 = z[0];
  float m[4] = {z0, z0, z0, z0}, s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  long long j = threadIdx.x;
  for (; j + 7 * nt < V; j += 8 * nt) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) v[u] = z[j + u * nt];
#pragma unroll
    for (int u = 0; u < 8; u++) xf_add(m[u & 3], s[u & 3], v[u]);
  }
  for (; j < V; j += nt) xf_add(m[0], s[0], z[j]);
  xf_merge(m[0], s[0], m[1], s[1]);
  xf_merge(m[2], s[2], m[3], s[3]);
  xf_merge(m[0], s[0], m[2], s[2]);
  float mx = m[0], sm = s[0];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(TX_FULL, mx, off), s2 = __shfl_xor_sync(TX_FULL, sm, off);
    /* both lanes of a pair merge the same two values in the same order (lower lane's first) */
    if (lane & off) {
      float mo = m2, so = s2;
      xf_merge(mo, so, mx, sm);
      mx = mo, sm = so;
    } else {
      xf_merge(mx, sm, m2, s2);
    }
  }
  if (lane == 0) part[w] = mx, part[32 + w] = sm;
  __syncthreads();
  mx = part[0], sm = part[32];
  for (int q = 1; q < nw; q++) xf_merge(mx, sm, part[q], part[32 + q]);
  __syncthreads(); /* part is free again */
  *mx_out = mx;
  *ls_out = w_logf(sm);
}

extern "C" __global__ void __launch_bounds__(1024) weft_tx_xent_fwd_f32(weft_tx_xent_args p) {
  __shared__ float part[64];
  const float *Z = reinterpret_cast<const float *>(p.logits);
  const int *tg = reinterpret_cast<const int *>(p.targets);
  float *L = reinterpret_cast<float *>(p.losses);
  for (long long n = blockIdx.x; n < p.N; n += gridDim.x) {
    const long long tgt = tg[n];
    if (tgt < 0 || tgt >= p.V) continue;
    const float *z = Z + n * p.V;
    float mx, ls;
    xf_lse(part, z, p.V, &mx, &ls);
    if (threadIdx.x == 0) L[n] = -((z[tgt] - mx) - ls);
  }
}

extern "C" __global__ void __launch_bounds__(1024) weft_tx_xent_bwd_f32(weft_tx_xent_args p) {
  __shared__ float part[64];
  const float *Z = reinterpret_cast<const float *>(p.logits), *DL = reinterpret_cast<const float *>(p.dloss);
  const int *tg = reinterpret_cast<const int *>(p.targets);
  float *G = reinterpret_cast<float *>(p.dlogits);
  for (long long n = blockIdx.x; n < p.N; n += gridDim.x) {
    const long long tgt = tg[n];
    if (tgt < 0 || tgt >= p.V) continue;
    const float *z = Z + n * p.V;
    float *g = G + n * p.V;
    float mx, ls;
    xf_lse(part, z, p.V, &mx, &ls);
    const float dl = DL[n];
    const long long nt = blockDim.x;
    long long j = threadIdx.x;
    for (; j + 3 * nt < p.V; j += 4 * nt) {
      float zz[4];
#pragma unroll
      for (int u = 0; u < 4; u++) zz[u] = z[j + u * nt];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const float pr = w_expf_f32((zz[u] - mx) - ls);
        g[j + u * nt] = (j + u * nt == tgt ? pr - 1.0f : pr) * dl;
      }
    }
    for (; j < p.V; j += nt) {
      const float pr = w_expf_f32((z[j] - mx) - ls);
      g[j] = (j == tgt ? pr - 1.0f : pr) * dl;
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

#define SQ_ST 8
#define SQ_W 32
#define SQ_PITCH 36

/* 16 bytes (4 floats) from src to shared dst, the floats past the first `valid` (0..4) zero, none of them
 * read. On sm_80 and later an asynchronous copy (cp.async, completed by sq_wait and made visible to the warp by
 * __syncwarp) where src is 16-byte aligned; else (and on the host) plain loads. */
DEV void sq_copy16(float *dst, const float *src, int valid, bool async) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (async) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(src), "r"(valid * 4) : "memory");
    return;
  }
#else
  (void)async;
#endif
  for (int q = 0; q < 4; q++) dst[q] = q < valid ? src[q] : 0.0f;
}
DEV void sq_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
/* waits for all but the newest SQ_ST - 1 groups of this thread's copies */
DEV void sq_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(SQ_ST - 1) : "memory");
#endif
}

/* A block is one warp and takes groups of 32 chunks (strided by the grid); lane l owns chunk 32*group + l and
 * adds its squares in ascending order into its own chain. The warp streams the 32 chunks through shared
 * memory SQ_W elements of each at a time (a stage: 32 rows of 128 bytes, each row filled by 8 lanes' 16-byte
 * copies, coalesced), SQ_ST stages in flight: the copies of stage st + SQ_ST - 1 are issued before the adds
 * of stage st, so a lane's chain (4096 dependent adds a chunk, ~4 cycles each) waits on its adds and not on
 * memory. A lane reads its row 16 bytes at a time (rows padded to 36 floats: the 8 lanes of each quarter-warp
 * phase hit 32 different banks). Elements past the tensor's end (and rows of chunks past it) are zero-filled,
 * never read: a square of +0 added to a partial that starts at +0 and only ever adds squares (never -0)
 * leaves it bit for bit unchanged. Only the stages the group's longest chunk (its first) needs are run. */
DEV void sq_issue(float (*stage)[SQ_PITCH], const float *g, long long n, long long nch, long long c0, long long j0,
                  int lane, bool async) {
  const long long K = WEFT_TX_SUMSQ_CHUNK;
  const int piece = lane & 7;
#pragma unroll
  for (int k = 0; k < 8; k++) {
    const int r = (lane >> 3) + 4 * k;
    const long long c = c0 + r, i = c * K + j0 + 4 * piece;
    const long long left = c < nch ? n - i : 0;
    const int valid = left <= 0 ? 0 : left >= 4 ? 4 : (int)left;
    sq_copy16(&stage[r][4 * piece], valid ? g + i : g, valid, async);
  }
}

extern "C" __global__ void __launch_bounds__(32) weft_tx_sumsq_chunks(weft_tx_clip_args p) {
  __shared__ __align__(16) float buf[SQ_ST][32][SQ_PITCH];
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32) return;
  const float *g = reinterpret_cast<const float *>(p.g);
  float *part = reinterpret_cast<float *>(p.part);
  const long long K = WEFT_TX_SUMSQ_CHUNK;
  const long long nch = (p.n + K - 1) / K;
  const bool async = (reinterpret_cast<unsigned long long>(g) & 15u) == 0;
  for (long long c0 = (long long)blockIdx.x * 32; c0 < nch; c0 += (long long)gridDim.x * 32) {
    const long long len0 = p.n - c0 * K < K ? p.n - c0 * K : K;
    const long long nst = (len0 + SQ_W - 1) / SQ_W;
#pragma unroll
    for (int st = 0; st < SQ_ST - 1; st++) {
      if (st < nst) sq_issue(buf[st], g, p.n, nch, c0, (long long)st * SQ_W, lane, async);
      sq_commit();
    }
    float s = 0.0f;
    for (long long st = 0; st < nst; st++) {
      const long long ahead = st + SQ_ST - 1;
      if (ahead < nst) sq_issue(buf[ahead % SQ_ST], g, p.n, nch, c0, ahead * SQ_W, lane, async);
      sq_commit();
      sq_wait(); /* this thread's copies of stage st are done ... */
      __syncwarp(); /* ... and every lane's are visible */
      const float4 *row = reinterpret_cast<const float4 *>(buf[st % SQ_ST][lane]);
#pragma unroll
      for (int q = 0; q < SQ_W / 4; q++) {
        const float4 v = row[q];
        s = __fadd_rn(s, __fmul_rn(v.x, v.x));
        s = __fadd_rn(s, __fmul_rn(v.y, v.y));
        s = __fadd_rn(s, __fmul_rn(v.z, v.z));
        s = __fadd_rn(s, __fmul_rn(v.w, v.w));
      }
      __syncwarp(); /* stage st's buffer is free for stage st + SQ_ST */
    }
    if (c0 + lane < nch) part[c0 + lane] = s; /* not canonicalised: weft_tx_sumsq_add's result is */
  }
}

#define SQA_U 8
extern "C" __global__ void weft_tx_sumsq_add(weft_tx_clip_args p) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32 || blockIdx.x != 0) return;
  const float *part = reinterpret_cast<const float *>(p.part);
  float *ssp = reinterpret_cast<float *>(p.ss);
  const long long nch = p.nparts ? p.nparts : (p.n + WEFT_TX_SUMSQ_CHUNK - 1) / WEFT_TX_SUMSQ_CHUNK;
  float ss = *ssp;
  /* SQA_U rounds of 32 partials loaded ahead of the adds of the current SQA_U (a round's shuffles and 32
   * dependent adds take ~150 cycles; a load's latency several times that) */
  float cur[SQA_U], nxt[SQA_U];
#pragma unroll
  for (int u = 0; u < SQA_U; u++) cur[u] = 32 * u + lane < nch ? part[32 * u + lane] : 0.0f;
  for (long long base = 0; base < nch; base += 32 * SQA_U) {
    const long long nb = base + 32 * SQA_U;
#pragma unroll
    for (int u = 0; u < SQA_U; u++) nxt[u] = nb + 32 * u + lane < nch ? part[nb + 32 * u + lane] : 0.0f;
#pragma unroll
    for (int u = 0; u < SQA_U; u++) {
      const long long b = base + 32 * u;
      if (b < nch) ss = warp_seq_add(ss, cur[u], nch - b < 32 ? (int)(nch - b) : 32);
    }
#pragma unroll
    for (int u = 0; u < SQA_U; u++) cur[u] = nxt[u];
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

/* ------------------------------------------------------------------------- the fp32 contract's kernels */

/* Under the fp32 contract (docs/DESIGN.md) the reductions may be reordered: these kernels sum with per-thread
 * partials, fused multiply-adds and warp shuffle trees, divide and take square roots in hardware (correctly
 * rounded), and do not canonicalise NaNs. Within a few fp32 roundings of the reference, and deterministic
 * (the same grid gives the same bits), but not the exact contract's bits. emit_tx picks them by op->contract. */

DEV float warp_sum_f32(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(TX_FULL, v, off));
  return v;
}

/* A row of C <= WEFT_TX_LNF_MAXC columns held in a lane's registers, LNF_V values a lane: with VEC (C % 4 == 0
 * and the arrays 16-byte aligned) value k of lane l is column 4 * (l + 32 * (k / 4)) + k % 4 (float4 loads),
 * else column l + 32 * k. */
#define LNF_V (WEFT_TX_LNF_MAXC / 32)
template <bool VEC> DEV int lnf_col(int lane, int k) {
  return VEC ? 4 * (lane + 32 * (k >> 2)) + (k & 3) : lane + 32 * k;
}
template <bool VEC> DEV void lnf_load(float *v, const float *row, long long C, int lane) {
  if (VEC) {
#pragma unroll
    for (int k = 0; k < LNF_V; k += 4) {
      const int c = lnf_col<true>(lane, k);
      float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (c < C) q = *reinterpret_cast<const float4 *>(row + c);
      v[k] = q.x, v[k + 1] = q.y, v[k + 2] = q.z, v[k + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < LNF_V; k++) {
      const int c = lnf_col<false>(lane, k);
      v[k] = c < C ? row[c] : 0.0f;
    }
  }
}

/* Forward: a warp per row (rows strided over all warps): mean = (sum x) / C, var = (sum (x - mean)^2) / C,
 * rstd = 1 / sqrt(var + eps) correctly rounded, y = n * gamma + beta fused. */
template <bool VEC> DEV void lnf_fwd_rows(const weft_tx_ln_args &p) {
  const int lane = threadIdx.x & 31;
  const long long C = p.C;
  const float *X = reinterpret_cast<const float *>(p.x);
  const float *gamma = reinterpret_cast<const float *>(p.gamma), *beta = reinterpret_cast<const float *>(p.beta);
  float *Y = reinterpret_cast<float *>(p.y);
  float *M = reinterpret_cast<float *>(p.mean), *RS = reinterpret_cast<float *>(p.rstd);
  const float invC = __fdiv_rn(1.0f, (float)C);
  for (long long r = WARP_ID; r < p.N; r += WARPS) {
    float v[LNF_V];
    lnf_load<VEC>(v, X + r * C, C, lane);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < LNF_V; k++) s = __fadd_rn(s, v[k]); /* past C: +0 */
    const float mu = __fmul_rn(warp_sum_f32(s), invC);
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < LNF_V; k++) {
      const float d = lnf_col<VEC>(lane, k) < C ? __fsub_rn(v[k], mu) : 0.0f;
      q = __fmaf_rn(d, d, q);
    }
    const float rs = __frsqrt_rn(__fmaf_rn(warp_sum_f32(q), invC, p.eps));
    if (lane == 0) {
      if (M) M[r] = mu;
      if (RS) RS[r] = rs;
    }
    float *y = Y + r * C;
    if (VEC) { /* gamma, beta and y four columns at a time, as x came in */
#pragma unroll
      for (int k = 0; k < LNF_V; k += 4) {
        const int c = lnf_col<VEC>(lane, k);
        if (c >= C) continue;
        const float4 g = *reinterpret_cast<const float4 *>(gamma + c), b = *reinterpret_cast<const float4 *>(beta + c);
        *reinterpret_cast<float4 *>(y + c) = make_float4(__fmaf_rn(__fmul_rn(__fsub_rn(v[k], mu), rs), g.x, b.x),
                                                         __fmaf_rn(__fmul_rn(__fsub_rn(v[k + 1], mu), rs), g.y, b.y),
                                                         __fmaf_rn(__fmul_rn(__fsub_rn(v[k + 2], mu), rs), g.z, b.z),
                                                         __fmaf_rn(__fmul_rn(__fsub_rn(v[k + 3], mu), rs), g.w, b.w));
      }
    } else {
#pragma unroll
      for (int k = 0; k < LNF_V; k++) {
        const int c = lnf_col<VEC>(lane, k);
        if (c < C) y[c] = __fmaf_rn(__fmul_rn(__fsub_rn(v[k], mu), rs), gamma[c], beta[c]);
      }
    }
  }
}

DEV bool lnf_vec(long long C, const void *a, const void *b, const void *c, const void *d) {
  return C % 4 == 0 && ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b) |
                         reinterpret_cast<unsigned long long>(c) | reinterpret_cast<unsigned long long>(d)) & 15u) == 0;
}

extern "C" __global__ void __launch_bounds__(256) weft_tx_layernorm_fwd_f32(weft_tx_ln_args p) {
  if (lnf_vec(p.C, reinterpret_cast<const void *>(p.x), reinterpret_cast<const void *>(p.y),
              reinterpret_cast<const void *>(p.gamma), reinterpret_cast<const void *>(p.beta)))
    lnf_fwd_rows<true>(p);
  else
    lnf_fwd_rows<false>(p);
}

/* Backward dx: a warp per row: a = (sum g) / C, b = (sum g * n) / C with g = gamma * dy, n = (x - mean) * rstd;
 * dx = (g - a - n * b) * rstd, fused. */
template <bool VEC> DEV void lnf_dx_rows(const weft_tx_ln_args &p) {
  const int lane = threadIdx.x & 31;
  const long long C = p.C;
  const float *X = reinterpret_cast<const float *>(p.x), *DY = reinterpret_cast<const float *>(p.dy);
  const float *gamma = reinterpret_cast<const float *>(p.gamma);
  const float *M = reinterpret_cast<const float *>(p.mean), *RS = reinterpret_cast<const float *>(p.rstd);
  float *DX = reinterpret_cast<float *>(p.dx);
  const float invC = __fdiv_rn(1.0f, (float)C);
  for (long long r = WARP_ID; r < p.N; r += WARPS) {
    float xv[LNF_V], gv[LNF_V];
    lnf_load<VEC>(xv, X + r * C, C, lane);
    lnf_load<VEC>(gv, DY + r * C, C, lane);
    const float mu = M[r], rs = RS[r];
    float sa = 0.0f, sb = 0.0f;
#pragma unroll
    for (int k = 0; k < LNF_V; k++) {
      const int c = lnf_col<VEC>(lane, k);
      const float ga = c < C ? gamma[c] : 0.0f;
      xv[k] = __fmul_rn(__fsub_rn(xv[k], mu), rs); /* n */
      gv[k] = __fmul_rn(ga, gv[k]);                 /* g (+0 past C) */
      sa = __fadd_rn(sa, gv[k]);
      sb = __fmaf_rn(gv[k], xv[k], sb);
    }
    const float a = __fmul_rn(warp_sum_f32(sa), invC), b = __fmul_rn(warp_sum_f32(sb), invC);
    float *dx = DX + r * C;
    if (VEC) {
#pragma unroll
      for (int k = 0; k < LNF_V; k += 4) {
        const int c = lnf_col<VEC>(lane, k);
        if (c < C)
          *reinterpret_cast<float4 *>(dx + c) = make_float4(__fmul_rn(__fmaf_rn(-xv[k], b, __fsub_rn(gv[k], a)), rs),
                                                            __fmul_rn(__fmaf_rn(-xv[k + 1], b, __fsub_rn(gv[k + 1], a)), rs),
                                                            __fmul_rn(__fmaf_rn(-xv[k + 2], b, __fsub_rn(gv[k + 2], a)), rs),
                                                            __fmul_rn(__fmaf_rn(-xv[k + 3], b, __fsub_rn(gv[k + 3], a)), rs));
      }
    } else {
#pragma unroll
      for (int k = 0; k < LNF_V; k++) {
        const int c = lnf_col<VEC>(lane, k);
        if (c < C) dx[c] = __fmul_rn(__fmaf_rn(-xv[k], b, __fsub_rn(gv[k], a)), rs);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) weft_tx_layernorm_bwd_dx_f32(weft_tx_ln_args p) {
  if (lnf_vec(p.C, reinterpret_cast<const void *>(p.x), reinterpret_cast<const void *>(p.dy),
              reinterpret_cast<const void *>(p.dx), reinterpret_cast<const void *>(p.x)))
    lnf_dx_rows<true>(p);
  else
    lnf_dx_rows<false>(p);
}

/* Backward dgamma, dbeta in two kernels. weft_tx_layernorm_bwd_dgb_part: block (x, y) = 32 channels x
 * WEFT_TX_LNP_R rows, thread (ty, tx) = channel tx, rows ty, ty + 8, ...: its partial sums of n * dy and dy
 * (fused), the 8 combined through shared memory in ty order into part[y][0][c] and part[y][1][c] (part is
 * [gridDim.y][2][C] floats of scratch). weft_tx_layernorm_bwd_dgb_sum: a thread per channel adds the row
 * blocks' partials in order onto dgamma / dbeta. */
extern "C" __global__ void __launch_bounds__(256) weft_tx_layernorm_bwd_dgb_part(weft_tx_ln_args p) {
  __shared__ float sg[8][33], sb[8][33];
  const long long C = p.C;
  const float *X = reinterpret_cast<const float *>(p.x), *DY = reinterpret_cast<const float *>(p.dy);
  const float *M = reinterpret_cast<const float *>(p.mean), *RS = reinterpret_cast<const float *>(p.rstd);
  float *part = reinterpret_cast<float *>(p.part);
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const long long r0 = (long long)blockIdx.y * WEFT_TX_LNP_R;
  const long long r1 = r0 + WEFT_TX_LNP_R < p.N ? r0 + WEFT_TX_LNP_R : p.N;
  for (long long c0 = (long long)blockIdx.x * 32; c0 < C; c0 += (long long)gridDim.x * 32) {
    const long long c = c0 + tx;
    float g = 0.0f, b = 0.0f;
    if (c < C) {
#pragma unroll 4
      for (long long r = r0 + ty; r < r1; r += 8) {
        const float dy = DY[r * C + c];
        g = __fmaf_rn(__fmul_rn(__fsub_rn(X[r * C + c], M[r]), RS[r]), dy, g);
        b = __fadd_rn(b, dy);
      }
    }
    sg[ty][tx] = g, sb[ty][tx] = b;
    __syncthreads();
    if (ty == 0 && c < C) {
      float tg = sg[0][tx], tb = sb[0][tx];
      for (int q = 1; q < 8; q++) tg = __fadd_rn(tg, sg[q][tx]), tb = __fadd_rn(tb, sb[q][tx]);
      part[(long long)blockIdx.y * 2 * C + c] = tg;
      part[(long long)blockIdx.y * 2 * C + C + c] = tb;
    }
    __syncthreads();
  }
}

extern "C" __global__ void weft_tx_layernorm_bwd_dgb_sum(weft_tx_ln_args p) {
  const long long C = p.C, nrb = (p.N + WEFT_TX_LNP_R - 1) / WEFT_TX_LNP_R;
  const float *part = reinterpret_cast<const float *>(p.part);
  float *DG = reinterpret_cast<float *>(p.dgamma), *DB = reinterpret_cast<float *>(p.dbeta);
  for (long long c = GTID; c < C; c += GSTRIDE) {
    float g = 0.0f, b = 0.0f;
    for (long long q = 0; q < nrb; q++) g = __fadd_rn(g, part[q * 2 * C + c]), b = __fadd_rn(b, part[q * 2 * C + C + c]);
    if (DG) DG[c] = __fadd_rn(DG[c], g);
    if (DB) DB[c] = __fadd_rn(DB[c], b);
  }
}

/* SUMSQ under fp32: block b's partial of the squares of its grid-stride share of g (float4 loads where
 * aligned, four fused accumulators a thread, a shuffle tree, then the warps in order) into part[b];
 * weft_tx_sumsq_add then adds the gridDim.x partials (nparts) in order onto *ss. blockDim 256. */
extern "C" __global__ void __launch_bounds__(256) weft_tx_sumsq_f32(weft_tx_clip_args p) {
  __shared__ float ws[8];
  const float *g = reinterpret_cast<const float *>(p.g);
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
  long long i0 = 0;
  if ((reinterpret_cast<unsigned long long>(g) & 15u) == 0) {
    const long long n4 = p.n >> 2;
    const float4 *g4 = reinterpret_cast<const float4 *>(g);
#pragma unroll 4
    for (long long i = GTID; i < n4; i += GSTRIDE) {
      const float4 v = g4[i];
      a0 = __fmaf_rn(v.x, v.x, a0), a1 = __fmaf_rn(v.y, v.y, a1), a2 = __fmaf_rn(v.z, v.z, a2);
      a3 = __fmaf_rn(v.w, v.w, a3);
    }
    i0 = n4 << 2;
  }
  for (long long i = i0 + GTID; i < p.n; i += GSTRIDE) a0 = __fmaf_rn(g[i], g[i], a0);
  const float s = warp_sum_f32(__fadd_rn(__fadd_rn(a0, a1), __fadd_rn(a2, a3)));
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  if (lane == 0) ws[w] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = ws[0];
    for (int q = 1; q < (int)(blockDim.x >> 5); q++) t = __fadd_rn(t, ws[q]);
    reinterpret_cast<float *>(p.part)[blockIdx.x] = t;
  }
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

/* Bit copies. The permute's index arithmetic is 32-bit where the sizes allow it (a 64-bit division is a
 * long software sequence); copy_slice walks (b, r) pairs over gridDim.y and the run of cols over x, 16 bytes at
 * a time where both runs are 16-byte aligned. Either way every output element receives its source's bits. */
extern "C" __global__ void weft_tx_permute(weft_tx_permute_args p) {
  const unsigned *in = reinterpret_cast<const unsigned *>(p.in);
  unsigned *out = reinterpret_cast<unsigned *>(p.out);
  if (p.count <= 0x7fffffffLL) {
    unsigned dims[6], strides[6];
#pragma unroll
    for (int k = 0; k < 6; k++)
      dims[k] = k < p.rank ? (unsigned)p.out_dims[k] : 1u, strides[k] = k < p.rank ? (unsigned)p.in_stride[k] : 0u;
    /* The last axis kept in place with a length that is a multiple of 4 (so every other input stride is a
     * multiple of 4 too) and both arrays 16-byte aligned: 4 consecutive outputs are 4 consecutive inputs,
     * copied as one 16-byte load and store. */
    unsigned last_d = 1, last_s = 0; /* the last axis's, picked with constant indices (the arrays stay in registers) */
#pragma unroll
    for (int k = 0; k < 6; k++)
      if (k == p.rank - 1) last_d = dims[k], last_s = strides[k];
    const int vec = p.rank > 0 && last_s == 1 && last_d % 4 == 0 &&
                    ((reinterpret_cast<unsigned long long>(in) | reinterpret_cast<unsigned long long>(out)) & 15u) == 0;
    const long long step = vec ? 4 : 1;
    for (long long e = GTID * step; e < p.count; e += GSTRIDE * step) {
      unsigned rem = (unsigned)e, off = 0;
#pragma unroll
      for (int k = 5; k >= 0; k--) {
        if (k >= p.rank) continue;
        const unsigned q = rem / dims[k];
        off += (rem - q * dims[k]) * strides[k];
        rem = q;
      }
      if (vec) reinterpret_cast<uint4 *>(out)[e >> 2] = reinterpret_cast<const uint4 *>(in)[off >> 2];
      else out[e] = in[off];
    }
    return;
  }
  for (long long e = GTID; e < p.count; e += GSTRIDE) {
    long long rem = e, off = 0;
#pragma unroll
    for (int k = 5; k >= 0; k--) {
      if (k >= p.rank) continue;
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
  const long long x0 = (long long)blockIdx.x * blockDim.x + threadIdx.x, xs = (long long)gridDim.x * blockDim.x;
  for (long long br = blockIdx.y; br < p.nb * p.rows; br += gridDim.y) {
    const long long b = br / p.rows, r = br - b * p.rows;
    const unsigned *s = src + p.src_off + b * p.src_bs + r * p.src_rs;
    unsigned *d = dst + p.dst_off + b * p.dst_bs + r * p.dst_rs;
    long long c0 = 0;
    if (((reinterpret_cast<unsigned long long>(s) | reinterpret_cast<unsigned long long>(d)) & 15u) == 0) {
      const long long n4 = p.cols >> 2;
      const uint4 *s4 = reinterpret_cast<const uint4 *>(s);
      uint4 *d4 = reinterpret_cast<uint4 *>(d);
      for (long long c = x0; c < n4; c += xs) d4[c] = s4[c];
      c0 = n4 << 2;
    }
    for (long long c = c0 + x0; c < p.cols; c += xs) d[c] = s[c];
  }
}
