/* cuda_kernels.cu - the CUDA lane's kernels: the exact matmul, the elementwise ops, sum_rows, softmax
 * cross-entropy and the fp32 -> bf16 conversion the tensor lane feeds cuBLAS with.
 *
 * Exact contract: every multiply and add is written as __fmul_rn / __fadd_rn (never fused, whatever the
 * compiler flags), and the module is also built with -fmad=false -ftz=false -prec-div=true -prec-sqrt=true,
 * so subnormals survive and nothing contracts. Orders are those of src/core/reference.c; weft_expf and
 * weft_logf are transcribed step for step from src/core/wmath.c. Built by nvcc into a fatbin that the
 * library embeds and loads with cuModuleLoadData, so no CUDA runtime is linked. */
#include "cuda_args.h"

#define DEV __device__ __forceinline__

/* Every result an exact kernel stores goes through w_canon: a NaN becomes the canonical quiet NaN
 * 0x7fc00000 (src/core/reference.h), whatever NaN the hardware made, so NaN results have the same bits on
 * every lane. Tested on the bits, which no compiler assumption about NaN can change. */
DEV float w_canon(float v) {
  return (__float_as_uint(v) & 0x7fffffffu) > 0x7f800000u ? __uint_as_float(0x7fc00000u) : v;
}

/* ---------------------------------------------------------------------------------- exp and log */

DEV float w_pow2i(int n) { return __int_as_float((n + 127) << 23); }

DEV float w_expf(float x) {
  if (x != x) return x;
  if (x > 88.72283935546875f) return __int_as_float(0x7f800000);
  if (x < -103.97208404541015625f) return 0.0f;
  float n = floorf(__fadd_rn(__fmul_rn(x, 1.44269502925872802734375f), 0.5f));
  float r = __fsub_rn(x, __fmul_rn(n, 0.693145751953125f));
  r = __fsub_rn(r, __fmul_rn(n, 1.428606765330187045e-06f));
  float p = 1.98412698e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.38888889e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.33333377e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.16666679e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.66666672e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 0.5f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f);
  int e = (int)n;
  if (e > 127) return __fmul_rn(__fmul_rn(p, w_pow2i(127)), w_pow2i(e - 127));
  if (e < -126) return __fmul_rn(__fmul_rn(p, w_pow2i(e + 64)), w_pow2i(-64));
  return __fmul_rn(p, w_pow2i(e));
}

/* The fp32 contract's exp: weft_expf's range reduction and polynomial, each multiply-add fused (within a
 * rounding or two of w_expf, in about half the instructions), and without branches, since it runs per
 * element in GELU, softmax and cross-entropy: x is clamped to [-104.5, 89] (a NaN passes the comparisons and
 * comes out NaN; beyond the clamps the result is 0 or inf as before, but for x in (-104.5, -103.97] it may be
 * the smallest subnormal instead of 0), and 2^e is applied as two exact halves, 2^(e>>1) then the rest, so
 * one rounding happens, as with w_expf's three cases. */
DEV float w_expf_f32(float x) {
  x = x > 89.0f ? 89.0f : x;
  x = x < -104.5f ? -104.5f : x;
  const float n = floorf(fmaf(x, 1.44269502925872802734375f, 0.5f));
  float r = fmaf(-n, 0.693145751953125f, x);
  r = fmaf(-n, 1.428606765330187045e-06f, r);
  float p = 1.98412698e-4f;
  p = fmaf(p, r, 1.38888889e-3f);
  p = fmaf(p, r, 8.33333377e-3f);
  p = fmaf(p, r, 4.16666679e-2f);
  p = fmaf(p, r, 1.66666672e-1f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const int e = n == n ? (int)n : 0, e1 = e >> 1; /* e in [-151, 129]: both halves are normal powers of two */
  return p * w_pow2i(e1) * w_pow2i(e - e1);
}

__constant__ float W_LOG_C[14] = {
    1.000000000e+00f,  -5.000000000e-01f, 3.333333433e-01f,  -2.500000298e-01f, 1.999998242e-01f,
    -1.666648984e-01f, 1.428636611e-01f,  -1.250664145e-01f, 1.110298857e-01f,  -9.878969938e-02f,
    9.054505080e-02f,  -9.342882037e-02f, 9.089755267e-02f,  -4.717759788e-02f};

DEV float w_logf(float x) {
  if (x != x) return x;
  if (x < 0.0f) return __uint_as_float(0x7fc00000u);
  if (x == 0.0f) return __uint_as_float(0xff800000u);
  if (x == __uint_as_float(0x7f800000u)) return x;
  int e = 0;
  if (x < 1.17549435e-38f) {
    x = __fmul_rn(x, 8388608.0f);
    e = -23;
  }
  unsigned u = __float_as_uint(x);
  e += (int)((u >> 23) & 0xffu) - 127;
  float m = __uint_as_float((u & 0x007fffffu) | 0x3f800000u);
  if (m > 1.41421353816986083984375f) {
    m = __fmul_rn(m, 0.5f);
    e = e + 1;
  }
  float f = __fsub_rn(m, 1.0f);
  float q = W_LOG_C[13];
#pragma unroll
  for (int i = 12; i >= 0; i--) q = __fadd_rn(__fmul_rn(q, f), W_LOG_C[i]);
  float l = __fmul_rn(q, f);
  float fe = (float)e;
  return __fadd_rn(__fmul_rn(fe, 0.693145751953125f), __fadd_rn(l, __fmul_rn(fe, 1.428606765330187045e-06f)));
}

/* ---------------------------------------------------------------------------------- exact matmul */

template <int L> struct vecf;
template <> struct vecf<4> {
  typedef float4 t;
  static DEV void get(const float *p, float *v) {
    float4 q = *reinterpret_cast<const float4 *>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  }
  static DEV void put(float *p, const float *v) { *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]); }
};
template <> struct vecf<8> { /* two 16-byte accesses: needs only 16-byte alignment */
  static DEV void get(const float *p, float *v) {
    vecf<4>::get(p, v);
    vecf<4>::get(p + 4, v + 4);
  }
  static DEV void put(float *p, const float *v) {
    vecf<4>::put(p, v);
    vecf<4>::put(p + 4, v + 4);
  }
};
template <> struct vecf<2> {
  typedef float2 t;
  static DEV void get(const float *p, float *v) {
    float2 q = *reinterpret_cast<const float2 *>(p);
    v[0] = q.x, v[1] = q.y;
  }
  static DEV void put(float *p, const float *v) { *reinterpret_cast<float2 *>(p) = make_float2(v[0], v[1]); }
};

/* One block of THREADS = (BM/TM) * (BN/TN) threads computes a BM x BN tile of c; each thread a TM x TN
 * sub-tile made of two row groups and two column groups half a tile apart (so shared-memory reads are vector
 * loads without bank conflicts). The shapes built, and which one a matmul gets: cuda_mm_tiles.h. The k
 * loop walks tiles of 8 ascending and, inside, k ascending, so every c[i,j] is
 * acc = 0; acc = acc + a[i,k]*b[k,j] for k = 0, 1, ... with the product and the sum each rounded: the
 * canonical order. Past k's end a is loaded as -0 and b as +0, so each padded term is -0, and
 * acc + (-0) == acc for every acc, -0 included (a matmul_acc sum starts from c's value, which may be -0).
 * Elsewhere past the edges operands are zeros; those products only reach outputs that are not stored. */
/* GELU (GPT-2's tanh form) in the exact order: weft_tx_gelu_fwd's arithmetic (cuda_tx.cu). */
DEV float w_gelu(float x);

/* A fused matmul's epilogue (weft_cu_mm_args: bias, resid, gelu; src/lanes/fuse.h): `v` is the element's
 * finished k sum and `ci` its offset from this batch slice's c. Each step is the separate op's: rounded and
 * canonical, in the order bias, residual, store, GELU. Returns what c holds. */
DEV float mm_epilogue(const weft_cu_mm_args &p, long long slice, long long ci, int col, float v) {
  v = w_canon(v);
  if (p.bias) v = w_canon(__fadd_rn(v, reinterpret_cast<const float *>(p.bias)[col]));
  if (p.resid) v = w_canon(__fadd_rn(v, reinterpret_cast<const float *>(p.resid)[slice + ci]));
  if (p.gelu) reinterpret_cast<float *>(p.gelu)[slice + ci] = w_gelu(v);
  return v;
}

template <int BM, int BN, int TM, int TN, bool TA, bool TB> /* TM x TN outputs a thread */
DEV void mm_exact(const weft_cu_mm_args &p) {
  constexpr int BK = 8, PAD = 4;
  constexpr int NX = BN / TN, NY = BM / TM, THREADS = NX * NY; /* threads along n and m */
  constexpr int HM = TM / 2, HN = TN / 2; /* each thread's outputs split into two groups half a tile apart */
  constexpr int LA = BM * BK / THREADS, LB = BN * BK / THREADS; /* elements each thread loads per k tile */
  static_assert(BM % TM == 0 && BN % TN == 0 && (HM == 2 || HM == 4) && (HN == 2 || HN == 4), "sub-tile shape");
  static_assert((LA == 2 || LA == 4 || LA == 8) && (LB == 2 || LB == 4 || LB == 8), "loader widths");
  static_assert(LA * THREADS == BM * BK && LB * THREADS == BN * BK && BM % LA == 0 && BN % LB == 0, "loads");
  static_assert((BM + PAD) % 4 == 0 && (BN + PAD) % 4 == 0, "16-byte aligned shared rows");
  __shared__ __align__(16) float As[2][BK][BM + PAD];
  __shared__ __align__(16) float Bs[2][BK][BN + PAD];

  const int tid = threadIdx.x;
  /* grouped tile order: `group` tile rows advance together along n */
  const int pid = blockIdx.x;
  const int width = p.group * p.tiles_n;
  const int first_m = (pid / width) * p.group;
  const int gsize = min(p.tiles_m - first_m, p.group);
  const int tm = first_m + (pid % width) % gsize;
  const int tn = (pid % width) / gsize;
  const int m0 = tm * BM, n0 = tn * BN;
  const int M = p.m, N = p.n, K = p.k;

  const float *A = reinterpret_cast<const float *>(p.a) + (size_t)blockIdx.y * (size_t)p.sa;
  const float *B = reinterpret_cast<const float *>(p.b) + (size_t)blockIdx.y * (size_t)p.sb;
  float *C = reinterpret_cast<float *>(p.c) + (size_t)blockIdx.y * (size_t)p.sc;

  /* What this thread loads. A not transposed: LA consecutive k of one row; transposed: LA consecutive m of
   * one k row. Likewise B. */
  const int a_r = TA ? tid / (BM / LA) : tid / (BK / LA);
  const int a_c = TA ? (tid % (BM / LA)) * LA : (tid % (BK / LA)) * LA;
  const int b_r = TB ? tid / (BK / LB) : tid / (BN / LB);
  const int b_c = TB ? (tid % (BK / LB)) * LB : (tid % (BN / LB)) * LB;

  float ra[LA], rb[LB];

  /* Per-thread source pointers and the edge tests that do not change along k, hoisted out of the loop. */
  const float *pa, *pb;
  bool a_fixed_ok, b_fixed_ok; /* the row (or column) this thread loads exists */
  if (!TA) {
    pa = A + (size_t)(m0 + a_r) * (size_t)p.lda + a_c;
    a_fixed_ok = m0 + a_r < M;
  } else {
    pa = A + (size_t)a_r * (size_t)p.lda + m0 + a_c;
    a_fixed_ok = m0 + a_c + LA <= M;
  }
  if (!TB) {
    pb = B + (size_t)b_r * (size_t)p.ldb + n0 + b_c;
    b_fixed_ok = n0 + b_c + LB <= N;
  } else {
    pb = B + (size_t)(n0 + b_r) * (size_t)p.ldb + b_c;
    b_fixed_ok = n0 + b_r < N;
  }
  const bool a_vec = p.vec_a && a_fixed_ok, b_vec = p.vec_b && b_fixed_ok;
  /* how far the pointers move per k tile */
  const size_t a_step = TA ? (size_t)BK * (size_t)p.lda : BK;
  const size_t b_step = TB ? BK : (size_t)BK * (size_t)p.ldb;

  auto load_a = [&](int k0) {
    if (!TA) { /* row m0+a_r, columns k0+a_c .. +LA */
      const int col = k0 + a_c;
      if (a_vec && col + LA <= K) {
        vecf<LA>::get(pa, ra);
      } else {
#pragma unroll
        for (int q = 0; q < LA; q++) ra[q] = (a_fixed_ok && col + q < K) ? pa[q] : -0.0f;
      }
    } else { /* k row k0+a_r, columns m0+a_c .. +LA */
      const int krow = k0 + a_r;
      if (a_vec && krow < K) {
        vecf<LA>::get(pa, ra);
      } else {
#pragma unroll
        for (int q = 0; q < LA; q++) ra[q] = (krow < K && m0 + a_c + q < M) ? pa[q] : -0.0f;
      }
    }
    pa += a_step;
  };
  auto load_b = [&](int k0) {
    if (!TB) { /* k row k0+b_r, columns n0+b_c .. +LB */
      const int krow = k0 + b_r;
      if (b_vec && krow < K) {
        vecf<LB>::get(pb, rb);
      } else {
#pragma unroll
        for (int q = 0; q < LB; q++) rb[q] = (krow < K && n0 + b_c + q < N) ? pb[q] : 0.0f;
      }
    } else { /* row n0+b_r of the stored [n][k], columns k0+b_c .. +LB */
      const int col = k0 + b_c;
      if (b_vec && col + LB <= K) {
        vecf<LB>::get(pb, rb);
      } else {
#pragma unroll
        for (int q = 0; q < LB; q++) rb[q] = (b_fixed_ok && col + q < K) ? pb[q] : 0.0f;
      }
    }
    pb += b_step;
  };
  auto store = [&](int buf) {
    if (!TA) {
#pragma unroll
      for (int q = 0; q < LA; q++) As[buf][a_c + q][a_r] = ra[q];
    } else {
      vecf<LA>::put(&As[buf][a_r][a_c], ra);
    }
    if (!TB) {
      vecf<LB>::put(&Bs[buf][b_r][b_c], rb);
    } else {
#pragma unroll
      for (int q = 0; q < LB; q++) Bs[buf][b_c + q][b_r] = rb[q];
    }
  };

  const int tx = tid % NX, ty = tid / NX;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; i++)
#pragma unroll
    for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
  if (p.accum) { /* matmul_acc: each sum continues from c's value */
#pragma unroll
    for (int i = 0; i < TM; i++) {
      const int row = m0 + (i < HM ? ty * HM + i : BM / 2 + ty * HM + (i - HM));
#pragma unroll
      for (int j = 0; j < TN; j++) {
        const int col = n0 + (j < HN ? tx * HN + j : BN / 2 + tx * HN + (j - HN));
        if (row < M && col < N) acc[i][j] = C[(size_t)row * (size_t)p.ldc + col];
      }
    }
  }

  const int ktiles = (K + BK - 1) / BK;
  load_a(0);
  load_b(0);
  store(0);
  __syncthreads();
  for (int t = 0; t < ktiles; t++) {
    const int cur = t & 1;
    if (t + 1 < ktiles) {
      load_a((t + 1) * BK);
      load_b((t + 1) * BK);
    }
#pragma unroll
    for (int kk = 0; kk < BK; kk++) {
      float a[TM], b[TN];
      vecf<HM>::get(&As[cur][kk][ty * HM], a);
      vecf<HM>::get(&As[cur][kk][BM / 2 + ty * HM], a + HM);
      vecf<HN>::get(&Bs[cur][kk][tx * HN], b);
      vecf<HN>::get(&Bs[cur][kk][BN / 2 + tx * HN], b + HN);
#pragma unroll
      for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
    }
    if (t + 1 < ktiles) store(cur ^ 1);
    __syncthreads();
  }

  const bool epi = p.bias || p.resid || p.gelu;
  const long long slice = (long long)blockIdx.y * p.sc;
#pragma unroll
  for (int i = 0; i < TM; i++) {
    const int row = m0 + (i < HM ? ty * HM + i : BM / 2 + ty * HM + (i - HM));
    if (row >= M) continue;
    float *crow = C + (size_t)row * (size_t)p.ldc;
    if (epi) {
#pragma unroll
      for (int j = 0; j < TN; j++) {
        const int col = n0 + (j < HN ? tx * HN + j : BN / 2 + tx * HN + (j - HN));
        if (col < N) acc[i][j] = mm_epilogue(p, slice, (long long)row * p.ldc + col, col, acc[i][j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < TN; j++) acc[i][j] = w_canon(acc[i][j]);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int col = n0 + h * (BN / 2) + tx * HN;
      if (p.vec_c && col + HN <= N) {
        vecf<HN>::put(crow + col, &acc[i][h * HN]);
      } else {
#pragma unroll
        for (int j = 0; j < HN; j++)
          if (col + j < N) crow[col + j] = acc[i][h * HN + j];
      }
    }
  }
}

/* The instances (cuda_mm_tiles.h: their shapes and the cost model that picks one; its `resident` is the
 * minblocks here). minblocks bounds the registers: ptxas (sm_90) gives mm64t8 168 a thread and mm32 at most 87,
 * neither spilling; mm128 (128) and mm64 (64) spill a few bytes, as they did before the shapes were
 * generalised. */
#define WEFT_MM(name, bm, bn, tm, tn, minblocks, ta, tb)                                                         \
  extern "C" __global__ void __launch_bounds__((bm / tm) * (bn / tn), minblocks) name(weft_cu_mm_args p) {        \
    mm_exact<bm, bn, tm, tn, ta, tb>(p);                                                                          \
  }
#define WEFT_MM4(prefix, bm, bn, tm, tn, minblocks)                                                               \
  WEFT_MM(prefix##_nn, bm, bn, tm, tn, minblocks, false, false)                                                   \
  WEFT_MM(prefix##_nt, bm, bn, tm, tn, minblocks, false, true)                                                    \
  WEFT_MM(prefix##_tn, bm, bn, tm, tn, minblocks, true, false)                                                    \
  WEFT_MM(prefix##_tt, bm, bn, tm, tn, minblocks, true, true)
WEFT_MM4(weft_mm128, 128, 128, 8, 8, 2) /* 256 threads */
WEFT_MM4(weft_mm64t8, 64, 64, 8, 8, 6)  /* 64 threads */
WEFT_MM4(weft_mm64, 64, 64, 4, 4, 4)    /* 256 threads */
WEFT_MM4(weft_mm32, 32, 32, 4, 4, 10)   /* 64 threads */

/* The exact matmul for a few rows of a (decode's matrix-vector work): a block owns MV_OUT outputs of each
 * row, and one thread per output runs that output's whole k chain - 0 + a[r,0]*b[0,j] + a[r,1]*b[1,j] + ...,
 * each product and sum rounded, k ascending: the same order as mm_exact and the reference. The block's other
 * threads only stage tiles of b (MV_OUT outputs x MV_K of k) and of a through shared memory, so b is read
 * coalesced whichever way it is laid out and the next tile loads while the chain runs over this one. With up
 * to MV_R rows, a thread carries MV_R independent chains. a is not transposed; blockIdx.y is the batch. */
#define MV_OUT WEFT_CU_MV_OUT
#define MV_K 256
#define MV_R WEFT_CU_MV_ROWS
#define MV_THREADS WEFT_CU_MV_THREADS
static_assert(MV_K == MV_THREADS, "a's tile is staged one element a thread");
template <bool TB, int R> DEV void mv_exact(const weft_cu_mm_args &p) {
  const float *A = reinterpret_cast<const float *>(p.a) + (long long)blockIdx.y * p.sa;
  const float *B = reinterpret_cast<const float *>(p.b) + (long long)blockIdx.y * p.sb;
  float *C = reinterpret_cast<float *>(p.c) + (long long)blockIdx.y * p.sc;
  /* b's tile transposed, [k][output]: the chain threads read consecutive banks */
  __shared__ float Ws[2][MV_K][MV_OUT + 1]; /* +1: the staging stores, a k per thread, hit distinct banks */
  __shared__ float Xs[2][R][MV_K];
  const int tid = threadIdx.x, n0 = blockIdx.x * MV_OUT, M = R == 1 ? 1 : p.m, N = p.n, K = p.k;
  constexpr int PER = MV_OUT * MV_K / MV_THREADS; /* b elements a thread stages per tile */
  float rw[PER], rx[R];
  auto load = [&](int k0) {
#pragma unroll
    for (int q = 0; q < PER; q++) {
      const int e = q * MV_THREADS + tid;
      /* TB: b is [N, K], a run of MV_K along k per output; else [K, N], a run of MV_OUT outputs per k */
      const int j = TB ? e / MV_K : e % MV_OUT, kk = TB ? e % MV_K : e / MV_OUT;
      const int col = n0 + j, k = k0 + kk;
      rw[q] = col < N && k < K ? (TB ? B[(long long)col * p.ldb + k] : B[(long long)k * p.ldb + col]) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < R; r++) rx[r] = r < M && k0 + tid < K ? A[(long long)r * p.lda + k0 + tid] : 0.0f;
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int q = 0; q < PER; q++) {
      const int e = q * MV_THREADS + tid;
      const int j = TB ? e / MV_K : e % MV_OUT, kk = TB ? e % MV_K : e / MV_OUT;
      Ws[buf][kk][j] = rw[q];
    }
#pragma unroll
    for (int r = 0; r < R; r++) Xs[buf][r][tid] = rx[r];
  };
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; r++)
    acc[r] = p.accum && tid < MV_OUT && r < M && n0 + tid < N ? C[(long long)r * p.ldc + n0 + tid] : 0.0f;
  const int ktiles = (K + MV_K - 1) / MV_K;
  if (ktiles > 0) {
    load(0);
    store(0);
  }
  __syncthreads();
  for (int t = 0; t < ktiles; t++) {
    const int cur = t & 1, k0 = t * MV_K;
    if (t + 1 < ktiles) load(k0 + MV_K);
    if (tid < MV_OUT) {
      const int kn = K - k0 < MV_K ? K - k0 : MV_K, k8 = kn & ~7;
      /* eight products at a time into registers (their loads and multiplies overlap), then eight adds in
       * order: the chain waits only on its adds */
#pragma unroll 2
      for (int kk = 0; kk < k8; kk += 8) {
        float w[8];
#pragma unroll
        for (int u = 0; u < 8; u++) w[u] = Ws[cur][kk + u][tid];
#pragma unroll
        for (int r = 0; r < R; r++) {
          if (r >= M) break;
          float pr[8];
#pragma unroll
          for (int u = 0; u < 8; u++) pr[u] = __fmul_rn(Xs[cur][r][kk + u], w[u]);
#pragma unroll
          for (int u = 0; u < 8; u++) acc[r] = __fadd_rn(acc[r], pr[u]);
        }
      }
      for (int kk = k8; kk < kn; kk++) {
        const float w = Ws[cur][kk][tid];
#pragma unroll
        for (int r = 0; r < R; r++)
          if (r < M) acc[r] = __fadd_rn(acc[r], __fmul_rn(Xs[cur][r][kk], w));
      }
    }
    if (t + 1 < ktiles) store(cur ^ 1);
    __syncthreads();
  }
  if (tid < MV_OUT && n0 + tid < N) {
    const long long slice = (long long)blockIdx.y * p.sc;
#pragma unroll
    for (int r = 0; r < R; r++)
      if (r < M) {
        const long long ci = (long long)r * p.ldc + n0 + tid;
        C[ci] = mm_epilogue(p, slice, ci, n0 + tid, acc[r]);
      }
  }
}

/* One row of a against b stored [n][k] (a decode step's matmuls, the tied logits): the same chains as
 * mv_exact, 0 + a[0]*b[j,0] + a[1]*b[j,1] + ..., k ascending, each product and sum rounded. A chain is
 * k adds long whatever is done, so the kernel keeps every chain busy and every SM fed: a block owns only
 * MV1_OUT outputs (768 outputs are 96 blocks), its 256 threads load MV1_K of k for all of them at once
 * (four consecutive k a load, coalesced along b's rows), multiply by a and store the products into shared
 * memory, and the chain threads only add: a 16-byte shared load and four adds per four k. The next tile's
 * loads are in flight while the chains run over this one. The products are kept output-major, each row of
 * MV1_K padded by 4 floats, so the block's 16-byte stores and the chains' 16-byte loads are conflict-free. */
#define MV1_OUT WEFT_CU_MV1_OUT
#define MV1_K WEFT_CU_MV1_K
#define MV1_LD (MV1_K + 4)
static_assert(MV1_OUT * MV1_K == 16 * MV_THREADS && MV1_K % 4 == 0, "four float4 of b a thread per tile");
DEV void mv1_nt(const weft_cu_mm_args &p) {
  const float *A = reinterpret_cast<const float *>(p.a) + (long long)blockIdx.y * p.sa;
  const float *B = reinterpret_cast<const float *>(p.b) + (long long)blockIdx.y * p.sb;
  float *C = reinterpret_cast<float *>(p.c) + (long long)blockIdx.y * p.sc;
  __shared__ __align__(16) float Ps[2][MV1_OUT * MV1_LD];
  const int tid = threadIdx.x, n0 = blockIdx.x * MV1_OUT, N = p.n, K = p.k;
  /* this thread's four k (kk .. kk+3 of a tile) of rows r0, r0 + 2, r0 + 4, r0 + 6 */
  constexpr int TPR = MV1_K / 4; /* threads per row of a tile */
  const int kk = (tid % TPR) * 4, r0 = tid / TPR;
  constexpr int RSTEP = MV_THREADS / TPR, NR = MV1_OUT / RSTEP;
  float4 rw[NR], rx;
  auto get4 = [&](const float *src, int k, bool vec) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (vec && k + 3 < K) return *reinterpret_cast<const float4 *>(src);
    if (k < K) v.x = src[0];
    if (k + 1 < K) v.y = src[1];
    if (k + 2 < K) v.z = src[2];
    if (k + 3 < K) v.w = src[3];
    return v;
  };
  auto load = [&](int k0) {
    const int k = k0 + kk;
#pragma unroll
    for (int q = 0; q < NR; q++) {
      const int col = n0 + r0 + q * RSTEP;
      rw[q] = col < N ? get4(B + (long long)col * p.ldb + k, k, p.vec_b) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    rx = get4(A + k, k, p.vec_a);
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int q = 0; q < NR; q++) {
      const float4 v = make_float4(__fmul_rn(rx.x, rw[q].x), __fmul_rn(rx.y, rw[q].y), __fmul_rn(rx.z, rw[q].z),
                                   __fmul_rn(rx.w, rw[q].w));
      *reinterpret_cast<float4 *>(&Ps[buf][(r0 + q * RSTEP) * MV1_LD + kk]) = v;
    }
  };
  float acc = p.accum && tid < MV1_OUT && n0 + tid < N ? C[n0 + tid] : 0.0f;
  const int ktiles = (K + MV1_K - 1) / MV1_K;
  if (ktiles > 0) {
    load(0);
    store(0);
  }
  __syncthreads();
  for (int t = 0; t < ktiles; t++) {
    const int cur = t & 1, k0 = t * MV1_K;
    if (t + 1 < ktiles) load(k0 + MV1_K);
    if (tid < MV1_OUT) {
      const int kn = K - k0 < MV1_K ? K - k0 : MV1_K, k4 = kn & ~3;
      const float *pr = &Ps[cur][tid * MV1_LD];
#pragma unroll 8
      for (int q = 0; q < k4; q += 4) {
        const float4 v = *reinterpret_cast<const float4 *>(pr + q);
        acc = __fadd_rn(acc, v.x);
        acc = __fadd_rn(acc, v.y);
        acc = __fadd_rn(acc, v.z);
        acc = __fadd_rn(acc, v.w);
      }
      for (int q = k4; q < kn; q++) acc = __fadd_rn(acc, pr[q]);
    }
    if (t + 1 < ktiles) store(cur ^ 1);
    __syncthreads();
  }
  if (tid < MV1_OUT && n0 + tid < N)
    C[n0 + tid] = mm_epilogue(p, (long long)blockIdx.y * p.sc, n0 + tid, n0 + tid, acc);
}
extern "C" __global__ void __launch_bounds__(MV_THREADS) weft_mv_nn(weft_cu_mm_args p) { mv_exact<false, MV_R>(p); }
extern "C" __global__ void __launch_bounds__(MV_THREADS) weft_mv_nt(weft_cu_mm_args p) { mv_exact<true, MV_R>(p); }
extern "C" __global__ void __launch_bounds__(MV_THREADS) weft_mv1_nn(weft_cu_mm_args p) { mv_exact<false, 1>(p); }
extern "C" __global__ void __launch_bounds__(MV_THREADS) weft_mv1_nt(weft_cu_mm_args p) { mv1_nt(p); }

/* ------------------------------------------------------------------------------------ elementwise */

/* One elementwise op over elements e = start, start + stride, ... */
DEV void ew_body(const weft_cu_ew_args &p, long long e, long long stride) {
  const float *x = reinterpret_cast<const float *>(p.x);
  const float *y = reinterpret_cast<const float *>(p.y);
  float *out = reinterpret_cast<float *>(p.out);
  switch (p.op) {
  case WEFT_CU_EW_ADD:
    if (p.y_broadcast) {
      if (p.count <= 0xffffffffll) { /* 32-bit remainders are several times cheaper */
        const unsigned cols = (unsigned)p.cols;
        for (; e < p.count; e += stride) out[e] = w_canon(__fadd_rn(x[e], y[(unsigned)e % cols]));
      } else {
        for (; e < p.count; e += stride) out[e] = w_canon(__fadd_rn(x[e], y[e % p.cols]));
      }
    } else {
      for (; e < p.count; e += stride) out[e] = w_canon(__fadd_rn(x[e], y[e]));
    }
    break;
  case WEFT_CU_EW_RELU:
    for (; e < p.count; e += stride) {
      const float v = x[e];
      out[e] = v > 0.0f ? v : (v != v ? w_canon(v) : 0.0f);
    }
    break;
  case WEFT_CU_EW_RELU_BACKWARD: /* x = grad, y = the relu's input */
    for (; e < p.count; e += stride) out[e] = y[e] > 0.0f ? w_canon(x[e]) : 0.0f;
    break;
  case WEFT_CU_EW_SCALE:
    for (; e < p.count; e += stride) out[e] = w_canon(__fmul_rn(p.alpha, x[e]));
    break;
  case WEFT_CU_EW_AXPY:
    for (; e < p.count; e += stride) out[e] = w_canon(__fadd_rn(__fmul_rn(p.alpha, x[e]), out[e]));
    break;
  default:
    break;
  }
}

extern "C" __global__ void weft_elementwise(weft_cu_ew_args p) {
  ew_body(p, (long long)blockIdx.x * blockDim.x + threadIdx.x, (long long)gridDim.x * blockDim.x);
}

/* A run of small elementwise ops from a scope, in order, in one block: each op's writes are visible to the
 * next after the barrier, so a chain of dependent tiny ops costs one launch instead of one each. Every
 * element is computed exactly as weft_elementwise computes it. The loop is unrolled so that each op's
 * arguments are read from the parameter space at a fixed offset. */
extern "C" __global__ void __launch_bounds__(1024) weft_ew_batch(weft_cu_ewb_args p) {
#pragma unroll
  for (int i = 0; i < WEFT_CU_EWB_MAX; i++) {
    if (i >= p.n) break;
    ew_body(p.ops[i], threadIdx.x, blockDim.x);
    __syncthreads();
  }
}

/* ---------------------------------------------------------------------------------------- sum_rows */

/* A block owns SR_COLS columns and walks the rows in tiles of SR_ROWS: all 256 threads load a tile into
 * shared memory (many loads in flight), then one thread per column adds the tile's rows in order. The next
 * tile is loaded into registers while the current one is being added. */
#define SR_COLS 8
#define SR_ROWS 128
extern "C" __global__ void __launch_bounds__(256) weft_sum_rows(weft_cu_sr_args p) {
  __shared__ float tile[SR_ROWS][SR_COLS + 1];
  const float *x = reinterpret_cast<const float *>(p.x);
  float *out = reinterpret_cast<float *>(p.out);
  const int tid = threadIdx.x;
  const int c = tid % SR_COLS, r = tid / SR_COLS; /* r in 0..31 */
  constexpr int PER = SR_ROWS / (256 / SR_COLS);   /* rows each thread loads per tile */
  for (long long c0 = (long long)blockIdx.x * SR_COLS; c0 < p.cols; c0 += (long long)gridDim.x * SR_COLS) {
    const long long col = c0 + c;
    float acc = 0.0f;
    float v[PER];
    auto load = [&](long long r0) {
#pragma unroll
      for (int q = 0; q < PER; q++) {
        const long long row = r0 + r + q * (256 / SR_COLS);
        v[q] = (row < p.rows && col < p.cols) ? x[row * p.cols + col] : 0.0f;
      }
    };
    load(0);
    for (long long r0 = 0; r0 < p.rows; r0 += SR_ROWS) {
      __syncthreads();
#pragma unroll
      for (int q = 0; q < PER; q++) tile[r + q * (256 / SR_COLS)][c] = v[q];
      __syncthreads();
      if (r0 + SR_ROWS < p.rows) load(r0 + SR_ROWS);
      if (tid < SR_COLS) {
        const long long n = p.rows - r0 < SR_ROWS ? p.rows - r0 : SR_ROWS;
        for (int i = 0; i < n; i++) acc = __fadd_rn(acc, tile[i][tid]);
      }
    }
    if (tid < SR_COLS && col < p.cols) out[col] = w_canon(acc);
    __syncthreads();
  }
}

/* ----------------------------------------------------------------------------------- softmax_xent */

/* One warp per row. The parts that are sums run in the canonical order: each chunk of 32 values is
 * broadcast lane by lane and every lane adds them in index order, so all lanes hold the same running sum.
 * The maximum is a reduction: the reference's `mx = z[j] > mx ? z[j] : mx` ends at the first element (in
 * index order) equal to the largest non-NaN value, or at z[0] when z[0] is NaN; the reduction below picks
 * exactly that element. */
extern "C" __global__ void __launch_bounds__(256) weft_softmax_rows(weft_cu_sx_args p) {
  const unsigned full = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  const long long warps = (long long)gridDim.x * (blockDim.x / 32);
  const float *Z = reinterpret_cast<const float *>(p.z);
  const float *T = reinterpret_cast<const float *>(p.t);
  float *G = reinterpret_cast<float *>(p.grad);
  float *RL = reinterpret_cast<float *>(p.row_loss);
  const long long cols = p.cols;
  for (long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < p.rows; row += warps) {
    const float *z = Z + row * cols, *t = T + row * cols;
    const float z0 = z[0];
    float mx = z0;
    if (z0 == z0) {
      float best = z0;
      long long bi = 0;
      for (long long j = lane; j < cols; j += 32) {
        const float v = z[j];
        if (v > best) best = v, bi = j;
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(full, best, off);
        const long long oi = __shfl_xor_sync(full, bi, off);
        if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
      }
      mx = best;
    }
    float s = 0.0f;
    for (long long base = 0; base < cols; base += 32) {
      const long long j = base + lane;
      const float e = j < cols ? w_expf(__fsub_rn(z[j], mx)) : 0.0f;
      const int n = cols - base < 32 ? (int)(cols - base) : 32;
      for (int q = 0; q < n; q++) s = __fadd_rn(s, __shfl_sync(full, e, q));
    }
    const float ls = w_logf(s);
    float acc = 0.0f;
    for (long long base = 0; base < cols; base += 32) {
      const long long j = base + lane;
      float prod = 0.0f;
      if (j < cols) {
        const float lsm = __fsub_rn(__fsub_rn(z[j], mx), ls);
        const float tj = t[j];
        prod = __fmul_rn(tj, lsm);
        if (G) G[row * cols + j] = w_canon(__fmul_rn(__fsub_rn(w_expf(lsm), tj), p.inv_rows));
      }
      const int n = cols - base < 32 ? (int)(cols - base) : 32;
      for (int q = 0; q < n; q++) acc = __fadd_rn(acc, __shfl_sync(full, prod, q));
    }
    if (lane == 0 && RL) RL[row] = w_canon(-acc);
  }
}

/* loss = (row_loss[0] + row_loss[1] + ...) * inv_rows, rows ascending; one warp, same broadcast scheme. */
extern "C" __global__ void weft_softmax_loss(weft_cu_sx_args p) {
  const unsigned full = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32) return;
  const float *RL = reinterpret_cast<const float *>(p.row_loss);
  float tot = 0.0f;
  for (long long base = 0; base < p.rows; base += 32) {
    const long long i = base + lane;
    const float v = i < p.rows ? RL[i] : 0.0f;
    const int n = p.rows - base < 32 ? (int)(p.rows - base) : 32;
    for (int q = 0; q < n; q++) tot = __fadd_rn(tot, __shfl_sync(full, v, q));
  }
  if (lane == 0) *reinterpret_cast<float *>(p.loss) = w_canon(__fmul_rn(tot, p.inv_rows));
}

/* ------------------------------------------------------------------------------- bf16 conversion */

extern "C" __global__ void weft_to_bf16(weft_cu_cv_args p) {
  const unsigned *in = reinterpret_cast<const unsigned *>(p.in);
  unsigned short *out = reinterpret_cast<unsigned short *>(p.out);
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < p.count; e += stride) {
    const unsigned u = in[e];
    unsigned short h;
    if ((u & 0x7fffffffu) > 0x7f800000u) h = (unsigned short)((u >> 16) | 0x40u); /* NaN stays NaN */
    else h = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);          /* nearest, ties to even */
    out[e] = h;
  }
}

/* Fault injection for the lane's failure-path test (WEFT_CUDA_FAULT): stops the context as a bad kernel
 * would. */
extern "C" __global__ void weft_trap(void) { __trap(); }

/* The transformer ops' kernels, in this same module (they use w_canon, w_expf and w_logf above). */
#define WEFT_CUDA_KERNELS_BODY
#include "cuda_tx.cu"
