/* test_cuda_emu.cc - the CUDA lane's transformer kernels (cuda_tx.cu, with cuda_kernels.cu) run on the host,
 * bit for bit against reference_tx.c, so their orders are checked where there is no GPU. The emulation runs
 * one block at a time with blockDim host threads: __syncthreads is a barrier of the block, __syncwarp and
 * every shuffle a barrier of the warp (the value passes through a slot per lane), __shared__ variables are
 * statics (one block at a time), __fadd_rn / __fsub_rn / __fmul_rn single rounded float operations (built
 * with -ffp-contract=off). It checks the kernels' logic - which thread adds what, in which order, which
 * outputs a block owns - not the device's arithmetic (test_cuda_tx does that on a GPU). Launch shapes are
 * those cuda_ops.c uses, and some with fewer blocks, so the grid-stride paths run too. */
#include <barrier>
#include <thread>
#include <vector>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
struct dim3e { unsigned x = 1, y = 1, z = 1; };
thread_local dim3e threadIdx, blockIdx;
dim3e blockDim, gridDim;
std::unique_ptr<std::barrier<>> g_bar;
std::unique_ptr<std::barrier<>> g_wbar[32];
unsigned long long g_slot[32][32];
#define __device__
#define __forceinline__ inline
#define __global__
#define __constant__ static const
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline float __fdividef(float a, float b) { volatile float r = a / b; return r; } /* the device's is within 2 ulp */
inline float __frsqrt_rn(float x) { return (float)(1.0 / std::sqrt((double)x)); } /* near enough for a tolerance */
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline void __syncwarp() { g_wbar[threadIdx.x / 32]->arrive_and_wait(); }
template <class T> T shfl_from(T v, int src) {
  int w = threadIdx.x / 32, l = threadIdx.x % 32;
  unsigned long long s = 0; memcpy(&s, &v, sizeof v); g_slot[w][l] = s;
  g_wbar[w]->arrive_and_wait();
  T r; unsigned long long q = g_slot[w][src & 31]; memcpy(&r, &q, sizeof r);
  g_wbar[w]->arrive_and_wait();
  return r;
}
template <class T> T __shfl_sync(unsigned, T v, int src) { return shfl_from(v, src); }
template <class T> T __shfl_up_sync(unsigned, T v, int d) {
  const int l = (int)(threadIdx.x % 32);
  return shfl_from(v, l >= d ? l - d : l);
}
template <class T> T __shfl_xor_sync(unsigned, T v, int off) { return shfl_from(v, (int)(threadIdx.x % 32) ^ off); }
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int atomicMin(int *p, int v) { int o = *p; while (v < o && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} return o; }
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline float2 make_float2(float a, float b) { return float2{a, b}; }
#include <algorithm>
using std::min;
using std::max;
inline void __trap() { abort(); }
void emu_launch(unsigned gx, unsigned gy, unsigned bd, std::function<void()> body) {
  gridDim.x = gx, gridDim.y = gy, blockDim.x = bd;
  for (unsigned by = 0; by < gy; by++)
    for (unsigned bx = 0; bx < gx; bx++) {
      g_bar = std::make_unique<std::barrier<>>(bd);
      for (unsigned w = 0; w < bd / 32; w++) g_wbar[w] = std::make_unique<std::barrier<>>(32);
      std::vector<std::thread> th;
      for (unsigned t = 0; t < bd; t++)
        th.emplace_back([=] { threadIdx.x = t; blockIdx.x = bx; blockIdx.y = by; body(); });
      for (auto &x : th) x.join();
    }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-function"
#include "cuda_kernels.cu"
#pragma GCC diagnostic pop

#include <cstdio>
#include <cstdlib>
#include <random>
#include "cuda_tx_args.h"
#include "cuda_mm_tiles.h"
extern "C" {
#include "weft.h"
#include "reference_tx.h"
}
static std::mt19937 rng(7);
static std::vector<float> rnd(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi); std::vector<float> v(n); for (auto &x : v) x = u(rng); return v; }
static int fails = 0;
static void cmp(const char *what, const float *a, const float *b, size_t n) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++) if (memcmp(a + i, b + i, 4)) { if (!bad) first = i; bad++; }
  printf("%-22s %s (%zu/%zu differ%s)\n", what, bad ? "FAIL" : "ok", bad, n, "");
  if (bad) { printf("   first %zu: %a vs %a\n", first, a[first], b[first]); fails++; }
}
#define U(p) ((uint64_t)(uintptr_t)(p))
/* the fp32 contract's kernels: within 1e-4 of the output's largest magnitude (tests/test_cpu_tx.c's bound) */
static void near(const char *what, const float *ref, const float *got, size_t n) {
  float big = 0.0f;
  for (size_t i = 0; i < n; i++) big = std::max(big, std::fabs(ref[i]));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!(std::fabs(ref[i] - got[i]) <= 1e-4f * big)) { if (!bad) first = i; bad++; }
  printf("%-22s %s (%zu/%zu off, tolerance %g)\n", what, bad ? "FAIL" : "ok", bad, n, 1e-4 * big);
  if (bad) { printf("   first %zu: %a vs %a\n", first, ref[first], got[first]); fails++; }
}
/* layernorm forward and backward under fp32: a warp per row (float4 where C % 4 == 0), dgamma/dbeta partials */
static void ln32(int64_t N, int64_t C, unsigned gx) {
  auto x = rnd(N*C, -3, 3), ga = rnd(C, -1, 1), be = rnd(C, -1, 1), dy = rnd(N*C, -1, 1);
  for (int64_t i = 0; i < N * C; i += 7) x[i] += 40.0f; /* an offset the two-pass variance must survive */
  std::vector<float> y(N*C), m(N), rs(N), y2(N*C, 7.f), m2(N, 7.f), rs2(N, 7.f);
  weft_ref_layernorm_forward(y.data(), m.data(), rs.data(), x.data(), ga.data(), be.data(), N, C, 1e-5f);
  weft_tx_ln_args a{}; a.y = U(y2.data()); a.mean = U(m2.data()); a.rstd = U(rs2.data()); a.x = U(x.data()); a.gamma = U(ga.data()); a.beta = U(be.data()); a.N = N; a.C = C; a.eps = 1e-5f;
  emu_launch(gx, 1, 64, [&] { weft_tx_layernorm_fwd_f32(a); });
  near("ln32 y", y.data(), y2.data(), y.size()); near("ln32 mean", m.data(), m2.data(), N); near("ln32 rstd", rs.data(), rs2.data(), N);
  auto dg = rnd(C, -1, 1), db = rnd(C, -1, 1); auto dg2 = dg, db2 = db; std::vector<float> dx(N*C), dx2(N*C, 7.f);
  weft_ref_layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), m.data(), rs.data(), ga.data(), N, C);
  const int64_t nrb = (N + WEFT_TX_LNP_R - 1) / WEFT_TX_LNP_R;
  std::vector<float> part(nrb * 2 * C, 7.f);
  a.dx = U(dx2.data()); a.dgamma = U(dg2.data()); a.dbeta = U(db2.data()); a.dy = U(dy.data()); a.part = U(part.data());
  a.mean = U(m.data()); a.rstd = U(rs.data());
  emu_launch((unsigned)((C + 31) / 32 > 2 ? 2 : (C + 31) / 32), (unsigned)nrb, 256, [&] { weft_tx_layernorm_bwd_dgb_part(a); });
  emu_launch(1, 1, 64, [&] { weft_tx_layernorm_bwd_dgb_sum(a); });
  emu_launch(gx, 1, 64, [&] { weft_tx_layernorm_bwd_dx_f32(a); });
  near("ln32 dx", dx.data(), dx2.data(), dx.size());
  near("ln32 dgamma", dg.data(), dg2.data(), C); near("ln32 dbeta", db.data(), db2.data(), C);
}
static void sumsq32(int64_t n, int off, unsigned gx) {
  auto xb = rnd(n + 4, -3, 3);
  float *x = xb.data() + off;
  const float acc0 = 1.5f, want = weft_ref_sumsq(x, n, acc0);
  std::vector<float> part(gx, 7.f);
  float ss = acc0;
  weft_tx_clip_args a{}; a.g = U(x); a.ss = U(&ss); a.part = U(part.data()); a.n = n; a.nparts = (int32_t)gx;
  emu_launch(gx, 1, 256, [&] { weft_tx_sumsq_f32(a); });
  emu_launch(1, 1, 32, [&] { weft_tx_sumsq_add(a); });
  char w[64]; snprintf(w, sizeof w, "sumsq32 n%lld+%d g%u", (long long)n, off, gx);
  near(w, &want, &ss, 1);
}
/* The fp32 contract's comparison (as tests/test_cpu_tx.c): within 1e-4 of the reference's largest finite
 * magnitude; NaN where the reference has NaN (any payload), the same infinity where it has one. */
static void cmp_tol(const char *what, const float *ref, const float *got, size_t n) {
  double big = 0;
  for (size_t i = 0; i < n; i++) if (std::isfinite(ref[i]) && std::fabs(ref[i]) > big) big = std::fabs(ref[i]);
  const double tol = 1e-4 * big;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    const bool ok = std::isnan(ref[i]) ? std::isnan(got[i]) : std::isinf(ref[i]) ? ref[i] == got[i]
                                                            : std::fabs((double)ref[i] - (double)got[i]) <= tol;
    if (!ok && !bad++) first = i;
  }
  printf("%-22s %s (%zu/%zu beyond %.3g)\n", what, bad ? "FAIL" : "ok", bad, n, tol);
  if (bad) { printf("   first %zu: %a vs %a\n", first, ref[first], got[first]); fails++; }
}
static void attn(int64_t B, int64_t T, int64_t C, int64_t NH, unsigned gx, bool specials = false) {
  auto qkv = rnd(B * T * 3 * C, -2, 2), dout = rnd(B * T * C, -1, 1);
  qkv[5] = 0.0f; qkv[7] = -0.0f;
  if (specials && T > 40) { /* head 0: q row 3 zero (its scores all +0: ties), key 0 NaN in (b 0) (z0 NaN), key 37's
                             * channel 1 NaN, key 20's channel 2 +inf, a few -0 and subnormals */
    const int64_t C3 = 3 * C;
    for (int64_t i = 0; i < C / NH; i++) qkv[3 * C3 + i] = 0.0f;
    qkv[C] = NAN; qkv[37 * C3 + C + 1] = NAN; qkv[20 * C3 + C + 2] = INFINITY;
    qkv[9 * C3 + 2 * C] = -0.0f; qkv[11 * C3 + 4] = 1e-40f; qkv[12 * C3 + C + 3] = -1e-39f;
  }
  std::vector<float> o(B*T*C), pre(B*NH*T*T), att(B*NH*T*T), o2(o.size(), 7.f), pre2(pre.size(), 7.f), att2(att.size(), 7.f);
  weft_ref_attention_forward(o.data(), pre.data(), att.data(), qkv.data(), B, T, C, NH);
  weft_tx_attn_args a{}; a.out = U(o2.data()); a.preatt = U(pre2.data()); a.att = U(att2.data()); a.qkv = U(qkv.data());
  a.B = B; a.T = T; a.C = C; a.NH = NH;
  emu_launch(gx, 1, 256, [&] { weft_tx_attn_fwd(a); });
  cmp("attn out", o.data(), o2.data(), o.size()); cmp("attn att", att.data(), att2.data(), att.size()); cmp("attn preatt", pre.data(), pre2.data(), pre.size());
  std::vector<float> dq(B*T*3*C), dq2(dq.size(), 7.f), ds(B*NH*T*T, 5.f);
  weft_ref_attention_backward(dq.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  a.dqkv = U(dq2.data()); a.dout = U(dout.data()); a.ds = U(ds.data()); a.att = U(att.data());
  emu_launch(gx, 1, 256, [&] { weft_tx_attn_bwd_ds(a); });
  emu_launch(gx, 1, 256, [&] { weft_tx_attn_bwd_dqkv(a); });
  cmp("attn dqkv", dq.data(), dq2.data(), dq.size());
  /* the fp32 contract's kernels, within the tolerance */
  std::fill(o2.begin(), o2.end(), 7.f); std::fill(att2.begin(), att2.end(), 7.f); std::fill(dq2.begin(), dq2.end(), 7.f);
  a.att = U(att2.data()); a.preatt = 0;
  emu_launch(gx, 1, 256, [&] { weft_tx_attn_fwd_f32(a); });
  cmp_tol("attn f32 out", o.data(), o2.data(), o.size()); cmp_tol("attn f32 att", att.data(), att2.data(), att.size());
  a.att = U(att.data());
  emu_launch(gx, 1, 256, [&] { weft_tx_attn_bwd_ds_f32(a); });
  emu_launch(gx, 1, 256, [&] { weft_tx_attn_bwd_dqkv_f32(a); });
  cmp_tol("attn f32 dqkv", dq.data(), dq2.data(), dq.size());
}
static void xent(int64_t N, int64_t V, unsigned gx) {
  auto z = rnd(N * V, -15, 15), dl = rnd(N, -1, 1);
  std::vector<int32_t> tg(N); for (auto &t : tg) t = rng() % V;
  if (N > 1 && V > 3) { z[V] = NAN; }             /* row 1: z0 NaN */
  if (N > 2 && V > 9) { z[2*V + 3] = 20; z[2*V + 8] = 20; z[2*V+1] = NAN; }  /* ties */
  if (N > 3 && V > 9) { for (int j = 0; j < V; j++) z[3*V+j] = -5; z[3*V + 4] = 0.0f; z[3*V+6] = -0.0f; z[3*V] = -0.0f; }
  std::vector<float> l(N), l2(N, 7.f), g(N*V), g2(N*V, 7.f);
  weft_ref_crossentropy_forward(l.data(), z.data(), tg.data(), N, V);
  weft_ref_crossentropy_backward(g.data(), z.data(), tg.data(), dl.data(), N, V);
  weft_tx_xent_args a{U(l2.data()), U(z.data()), U(tg.data()), U(g2.data()), U(dl.data()), N, V};
  emu_launch(gx, 1, 128, [&] { weft_tx_xent_fwd(a); });
  emu_launch(gx, 1, 64, [&] { weft_tx_xent_fwd(a); });  /* the smallest block it takes */
  emu_launch(gx, 1, 128, [&] { weft_tx_xent_bwd(a); });
  cmp("xent loss", l.data(), l2.data(), N); cmp("xent dlogits", g.data(), g2.data(), N * V);
  /* the few-rows launch: a block of 512 */
  std::fill(l2.begin(), l2.end(), 7.f); std::fill(g2.begin(), g2.end(), 7.f);
  emu_launch(gx, 1, 512, [&] { weft_tx_xent_fwd(a); });
  emu_launch(gx, 1, 512, [&] { weft_tx_xent_bwd(a); });
  cmp("xent 512 loss", l.data(), l2.data(), N); cmp("xent 512 dlogits", g.data(), g2.data(), N * V);
  /* the fp32 contract's kernels (blocks of 512 as launched, and of 64) */
  for (unsigned bd : {512u, 64u}) {
    std::fill(l2.begin(), l2.end(), 7.f); std::fill(g2.begin(), g2.end(), 7.f);
    emu_launch(gx, 1, bd, [&] { weft_tx_xent_fwd_f32(a); });
    emu_launch(gx, 1, bd, [&] { weft_tx_xent_bwd_f32(a); });
    cmp_tol("xent f32 loss", l.data(), l2.data(), N); cmp_tol("xent f32 dlogits", g.data(), g2.data(), N * V);
  }
}
static void embb(int64_t B, int64_t T, int64_t C, int64_t V, int64_t P, bool withpos) {
  auto dout = rnd(B*T*C, -1, 1), wte = rnd(V*C, -1, 1), wpe = rnd(P*C, -1, 1);
  std::vector<int32_t> tok(B*T), pos(B*T); for (auto &t : tok) t = rng() % V; for (auto &t : pos) t = rng() % P;
  auto wte2 = wte, wpe2 = wpe;
  weft_ref_embedding_backward(wte.data(), wpe.data(), dout.data(), tok.data(), withpos ? pos.data() : nullptr, B, T, C, V, P);
  std::vector<int32_t> cnt(V + P + 2, 0), st(V + P + 2), lst(B*T + 5);
  for (int tab = 0; tab < 2; tab++) {
    weft_tx_embed_bwd_args a{U(tab ? wpe2.data() : wte2.data()), U(dout.data()), tab ? (withpos ? U(pos.data()) : 0) : U(tok.data()),
      U(cnt.data()), U(st.data()), U(lst.data()), B*T, T, C, tab ? P : V};
    int64_t BT = B*T;
    emu_launch(2, 1, 256, [&] { weft_tx_embed_bwd_count(a); });
    emu_launch(1, 1, 1024, [&] { weft_tx_embed_bwd_scan(a); });
    emu_launch(2, 1, 256, [&] { weft_tx_embed_bwd_fill(a); });
    emu_launch(2, 1, 256, [&] { weft_tx_embed_bwd_sort(a); });
    emu_launch((C + 127) / 128, BT < 7 ? BT : 7, 128, [&] { weft_tx_embed_bwd_accum(a); });
  }
  cmp("embed dwte", wte.data(), wte2.data(), wte.size()); cmp("embed dwpe", wpe.data(), wpe2.data(), wpe.size());
  int nz = 0; for (auto c : cnt) nz += c != 0; printf("   count left nonzero: %d\n", nz); if (nz) fails++;
  /* the one-kernel path (no scratch), strided over few blocks and with a block per position; blocks of 256 as
   * launched, and of 32 (windows of 256 positions and columns 128 a pass: several of each in small cases) */
  for (unsigned gx : {3u, (unsigned)(B * T)})
  for (unsigned bd : {256u, 32u}) {
    if (B * T > 300 && (gx > 3 || bd > 32)) continue; /* host threads: the long case in small blocks only */
    std::vector<float> wt4 = rnd(V*C, -1, 1), wp4 = rnd(P*C, -1, 1), wt5 = wt4, wp5 = wp4;
    weft_ref_embedding_backward(wt4.data(), wp4.data(), dout.data(), tok.data(), withpos ? pos.data() : nullptr, B, T, C, V, P);
    for (int tab = 0; tab < 2; tab++) {
      weft_tx_embed_bwd_args a{U(tab ? wp5.data() : wt5.data()), U(dout.data()), tab ? (withpos ? U(pos.data()) : 0) : U(tok.data()),
        0, 0, 0, B*T, T, C, tab ? P : V};
      emu_launch(gx, 1, bd, [&] { weft_tx_embed_bwd_rows(a); });
    }
    cmp("embed rows dwte", wt4.data(), wt5.data(), wt4.size()); cmp("embed rows dwpe", wp4.data(), wp5.data(), wp4.size());
  }
  if (!withpos) { /* implicit positions: the position table's own kernel, a thread per (row, column) */
    for (unsigned gx : {1u, 3u, (unsigned)((T * C + 255) / 256)}) {
      std::vector<float> wt4 = rnd(V*C, -1, 1), wp4 = rnd(P*C, -1, 1), wp5 = wp4;
      weft_ref_embedding_backward(wt4.data(), wp4.data(), dout.data(), tok.data(), nullptr, B, T, C, V, P);
      weft_tx_embed_bwd_args a{U(wp5.data()), U(dout.data()), 0, 0, 0, 0, B*T, T, C, P};
      emu_launch(gx, 1, 256, [&] { weft_tx_embed_bwd_pos(a); });
      cmp("embed pos dwpe", wp4.data(), wp5.data(), wp4.size());
    }
  }
}
static void ln(int64_t N, int64_t C, unsigned gx) {
  auto x = rnd(N*C, -3, 3), ga = rnd(C, -1, 1), be = rnd(C, -1, 1), dy = rnd(N*C, -1, 1);
  std::vector<float> y(N*C), m(N), rs(N), y2(N*C, 7.f), m2(N, 7.f), rs2(N, 7.f);
  weft_ref_layernorm_forward(y.data(), m.data(), rs.data(), x.data(), ga.data(), be.data(), N, C, 1e-5f);
  weft_tx_ln_args a{}; a.y = U(y2.data()); a.mean = U(m2.data()); a.rstd = U(rs2.data()); a.x = U(x.data()); a.gamma = U(ga.data()); a.beta = U(be.data()); a.N = N; a.C = C; a.eps = 1e-5f;
  emu_launch(gx, 1, 256, [&] { weft_tx_layernorm_fwd(a); });
  cmp("ln y", y.data(), y2.data(), y.size()); cmp("ln mean", m.data(), m2.data(), N); cmp("ln rstd", rs.data(), rs2.data(), N);
  if (C <= WEFT_TX_LN_ROW_MAXC) { /* the block-per-row kernel, with fewer blocks than rows too */
    std::fill(y2.begin(), y2.end(), 7.f); std::fill(m2.begin(), m2.end(), 7.f); std::fill(rs2.begin(), rs2.end(), 7.f);
    emu_launch(N < 3 ? (unsigned)N : 3, 1, 256, [&] { weft_tx_layernorm_fwd_row(a); });
    cmp("ln row y", y.data(), y2.data(), y.size()); cmp("ln row mean", m.data(), m2.data(), N); cmp("ln row rstd", rs.data(), rs2.data(), N);
  }
  auto dg = rnd(C, -1, 1), db = rnd(C, -1, 1); auto dg2 = dg, db2 = db; std::vector<float> dx(N*C), dx2(N*C, 7.f);
  weft_ref_layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), m.data(), rs.data(), ga.data(), N, C);
  a.dx = U(dx2.data()); a.dgamma = U(dg2.data()); a.dbeta = U(db2.data()); a.dy = U(dy.data());
  auto dg3 = dg2, db3 = db2;
  emu_launch((unsigned)((C + WEFT_TX_LNG_CW - 1) / WEFT_TX_LNG_CW), 1, 256, [&] { weft_tx_layernorm_bwd_dgb(a); });
  emu_launch(gx, 1, 256, [&] { weft_tx_layernorm_bwd_dx(a); });
  cmp("ln dx", dx.data(), dx2.data(), dx.size());
  cmp("ln dgamma", dg.data(), dg2.data(), C); cmp("ln dbeta", db.data(), db2.data(), C);
  /* one block striding over the channel strips, and dgamma alone */
  weft_tx_ln_args b = a; b.dgamma = U(dg3.data()); b.dbeta = 0;
  emu_launch(1, 1, 256, [&] { weft_tx_layernorm_bwd_dgb(b); });
  cmp("ln dgamma (1 block)", dg.data(), dg3.data(), C);
  b.dgamma = 0; b.dbeta = U(db3.data());
  emu_launch(2, 1, 256, [&] { weft_tx_layernorm_bwd_dgb(b); });
  cmp("ln dbeta (2 blocks)", db.data(), db3.data(), C);
}
/* GELU forward and backward, on aligned arrays (the float4 path and its tail) and on arrays one float off */
static void gelu(int64_t n, int off, unsigned gx) {
  auto xb = rnd(n + 4, -6, 6), dyb = rnd(n + 4, -1, 1);
  const float sp[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1e-40f, -1e-40f, 0.7f, -0.75f, 9.99f, 10.0f, 1e-4f};
  for (size_t i = 0; i < sizeof sp / sizeof sp[0] && i < (size_t)n; i++) xb[off + 3 * i % n] = sp[i];
  const float *x = xb.data() + off, *dy = dyb.data() + off;
  std::vector<float> y(n), dx(n), yb(n + 4, 7.f), dxb(n + 4, 7.f);
  weft_ref_gelu_forward(y.data(), x, n);
  weft_ref_gelu_backward(dx.data(), x, dy, n);
  weft_tx_gelu_args a{U(yb.data() + off), U(x), 0, n};
  emu_launch(gx, 1, 64, [&] { weft_tx_gelu_fwd(a); });
  weft_tx_gelu_args b{U(dxb.data() + off), U(x), U(dy), n};
  emu_launch(gx, 1, 64, [&] { weft_tx_gelu_bwd(b); });
  char w[64];
  snprintf(w, sizeof w, "gelu fwd n%lld+%d", (long long)n, off); cmp(w, y.data(), yb.data() + off, n);
  snprintf(w, sizeof w, "gelu bwd n%lld+%d", (long long)n, off); cmp(w, dx.data(), dxb.data() + off, n);
  /* the fp32 kernels: within the tolerance, specials included, against GELU in double precision where x is
   * finite (the reference's 1 - tanh^2 cancels for large |x|, more than a 3-element row's tolerance allows) */
  for (int64_t i = 0; i < n; i++) {
    if (!std::isfinite(x[i])) continue;
    const double xd = x[i], u = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd), t = std::tanh(u);
    y[i] = (float)(0.5 * xd * (1.0 + t));
    dx[i] = (float)((0.5 * (1.0 + t) + 0.5 * xd * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * xd * xd)) * dy[i]);
  }
  std::vector<float> yf(n + 4, 7.f), dxf(n + 4, 7.f);
  a.out = U(yf.data() + off), b.out = U(dxf.data() + off);
  emu_launch(gx, 1, 64, [&] { weft_tx_gelu_fwd_f32(a); });
  emu_launch(gx, 1, 64, [&] { weft_tx_gelu_bwd_f32(b); });
  snprintf(w, sizeof w, "gelu f32 fwd n%lld+%d", (long long)n, off); cmp_tol(w, y.data(), yf.data() + off, n);
  snprintf(w, sizeof w, "gelu f32 bwd n%lld+%d", (long long)n, off); cmp_tol(w, dx.data(), dxf.data() + off, n);
}
/* SUMSQ: the chunk partials and their in-order add onto acc, against weft_ref_sumsq */
static void sumsq(int64_t n, int off, unsigned gx) {
  auto xb = rnd(n + 4, -3, 3);
  float *x = xb.data() + off;
  if (n > 5000) { x[4100] = 1e-30f; x[17] = -0.0f; x[n - 1] = 1e19f; }
  const float acc0 = 1.5f;
  const float want = weft_ref_sumsq(x, n, acc0);
  const int64_t nch = (n + WEFT_TX_SUMSQ_CHUNK - 1) / WEFT_TX_SUMSQ_CHUNK;
  std::vector<float> part(nch + 1, 7.f);
  float ss = acc0;
  weft_tx_clip_args a{}; a.g = U(x); a.ss = U(&ss); a.part = U(part.data()); a.n = n;
  if (nch) emu_launch(gx, 1, 32, [&] { weft_tx_sumsq_chunks(a); });
  emu_launch(1, 1, 32, [&] { weft_tx_sumsq_add(a); });
  char w[64]; snprintf(w, sizeof w, "sumsq n%lld+%d g%u", (long long)n, off, gx);
  cmp(w, &want, &ss, 1);
}
static void softmax(int64_t R, int64_t T) {
  auto sc = rnd(R * T * T, -4, 4), dp = rnd(R * T * T, -1, 1);
  std::vector<float> pr(sc.size()), pr2(sc.size(), 7.f), ds(sc.size()), ds2(sc.size(), 7.f);
  const float scale = 0.125f;
  weft_ref_causal_softmax_forward(pr.data(), sc.data(), R, T, scale);
  weft_ref_causal_softmax_backward(ds.data(), pr.data(), dp.data(), R, T, scale);
  weft_tx_softmax_args a{}; a.out = U(pr2.data()); a.in = U(sc.data()); a.R = R; a.T = T; a.scale = scale;
  emu_launch((unsigned)((R * T + 7) / 8), 1, 256, [&] { weft_tx_softmax_fwd(a); });
  weft_tx_softmax_args b = a; b.out = U(ds2.data()); b.in = U(pr.data()); b.in2 = U(dp.data());
  emu_launch(3, 1, 256, [&] { weft_tx_softmax_bwd(b); });
  cmp("softmax fwd", pr.data(), pr2.data(), pr.size()); cmp("softmax bwd", ds.data(), ds2.data(), ds.size());
}
static void copies() {
  // permute [2,3,4,5] -> perm (2,0,3,1)
  int64_t d[4] = {2, 3, 4, 5}, xs[4] = {60, 20, 5, 1}; int pm[4] = {2, 0, 3, 1};
  std::vector<float> x = rnd(120, -1, 1), y(120), y2(120, 7.f);
  weft_tx_permute_args a{}; a.out = U(y2.data()); a.in = U(x.data()); a.count = 120; a.rank = 4;
  for (int k = 0; k < 4; k++) a.out_dims[k] = d[pm[k]], a.in_stride[k] = xs[pm[k]];
  for (int i0 = 0; i0 < d[pm[0]]; i0++) for (int i1 = 0; i1 < d[pm[1]]; i1++) for (int i2 = 0; i2 < d[pm[2]]; i2++) for (int i3 = 0; i3 < d[pm[3]]; i3++)
    y[((i0 * d[pm[1]] + i1) * d[pm[2]] + i2) * d[pm[3]] + i3] = x[i0 * xs[pm[0]] + i1 * xs[pm[1]] + i2 * xs[pm[2]] + i3 * xs[pm[3]]];
  emu_launch(1, 1, 256, [&] { weft_tx_permute(a); });
  cmp("permute", y.data(), y2.data(), 120);
  {  /* [2,3,5,8] -> (1,2,0,3): the last axis stays, 8 long: the 16-byte path */
    int64_t e[4] = {2, 3, 5, 8}, es[4] = {120, 40, 8, 1}; int q[4] = {1, 2, 0, 3};
    std::vector<float> u = rnd(240, -1, 1), v(240), v2(240, 7.f);
    weft_tx_permute_args b{}; b.out = U(v2.data()); b.in = U(u.data()); b.count = 240; b.rank = 4;
    for (int k = 0; k < 4; k++) b.out_dims[k] = e[q[k]], b.in_stride[k] = es[q[k]];
    for (int i0 = 0; i0 < e[q[0]]; i0++) for (int i1 = 0; i1 < e[q[1]]; i1++) for (int i2 = 0; i2 < e[q[2]]; i2++) for (int i3 = 0; i3 < e[q[3]]; i3++)
      v[((i0 * e[q[1]] + i1) * e[q[2]] + i2) * e[q[3]] + i3] = u[i0 * es[q[0]] + i1 * es[q[1]] + i2 * es[q[2]] + i3 * es[q[3]]];
    emu_launch(1, 1, 32, [&] { weft_tx_permute(b); });
    cmp("permute (16-byte)", v.data(), v2.data(), 240);
  }
  for (int off = 0; off < 3; off++) {
    int64_t outer = 3, sl = 5, dl = 9, inner = 7 + off;
    auto src = rnd(outer * sl * inner, -1, 1); std::vector<float> dst(outer * dl * inner + 8, 1.f), dst2 = dst;
    for (int o = 0; o < outer; o++) for (int i = 0; i < sl * inner; i++) dst[o * dl * inner + off * inner + i] = src[o * sl * inner + i];
    weft_tx_copy_args c{}; c.dst = U(dst2.data()); c.src = U(src.data()); c.nb = outer; c.rows = 1; c.cols = sl * inner;
    c.dst_off = off * inner; c.dst_bs = dl * inner; c.src_bs = sl * inner;
    emu_launch(2, 2, 256, [&] { weft_tx_copy_slice(c); });
    cmp("copy_slice", dst.data(), dst2.data(), dst.size());
  }
}
/* the matrix-vector kernel against the canonical order written out: 0 + a[r,0]*b[0,j] + ..., k ascending */
static void mv(int M, int N, int K, bool tb, int batch) {
  auto a = rnd((size_t)batch * M * K, -2, 2), b = rnd((size_t)K * N, -2, 2);
  if (a.size() > 3) { a[1] = -0.0f; a[2] = 1e-40f; }
  if (b.size() > 5) { b[4] = INFINITY; b[3] = -0.0f; }
  std::vector<float> c((size_t)batch * M * N), c2(c.size(), 7.f);
  for (int p = 0; p < batch; p++)
    for (int r = 0; r < M; r++)
      for (int j = 0; j < N; j++) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc = __fadd_rn(acc, __fmul_rn(a[(size_t)p * M * K + r * K + k], tb ? b[(size_t)j * K + k] : b[(size_t)k * N + j]));
        c[(size_t)p * M * N + r * N + j] = w_canon(acc);
      }
  weft_cu_mm_args m{}; m.a = U(a.data()); m.b = U(b.data()); m.c = U(c2.data());
  m.m = M; m.n = N; m.k = K; m.lda = K; m.ldb = tb ? K : N; m.ldc = N; m.sa = (int64_t)M * K; m.sb = 0; m.sc = (int64_t)M * N;
  unsigned gx = (unsigned)((N + WEFT_CU_MV_OUT - 1) / WEFT_CU_MV_OUT);
  emu_launch(gx ? gx : 1, (unsigned)batch, WEFT_CU_MV_THREADS, [&] { if (tb) weft_mv_nt(m); else weft_mv_nn(m); });
  if (M == 1) {
    char w1[64]; snprintf(w1, sizeof w1, "mv1 %dx%dx%d %s b%d", M, N, K, tb ? "nt" : "nn", batch);
    std::vector<float> c3(c.size(), 7.f); m.c = U(c3.data());
    const unsigned g1 = tb ? (unsigned)((N + WEFT_CU_MV1_OUT - 1) / WEFT_CU_MV1_OUT) : gx;
    emu_launch(g1 ? g1 : 1, (unsigned)batch, WEFT_CU_MV_THREADS, [&] { if (tb) weft_mv1_nt(m); else weft_mv1_nn(m); });
    cmp(w1, c.data(), c3.data(), c.size());
    if (tb && K % 4 == 0) { /* the 16-byte loads (vectors' data is 16-byte aligned) */
      std::vector<float> c4(c.size(), 7.f); m.c = U(c4.data()); m.vec_a = m.vec_b = 1;
      emu_launch(g1 ? g1 : 1, (unsigned)batch, WEFT_CU_MV_THREADS, [&] { weft_mv1_nt(m); });
      strcat(w1, " vec");
      cmp(w1, c.data(), c4.data(), c.size());
      m.vec_a = m.vec_b = 0;
    }
  }
  char what[64]; snprintf(what, sizeof what, "mv %dx%dx%d %s b%d", M, N, K, tb ? "nt" : "nn", batch);
  cmp(what, c.data(), c2.data(), c.size());
}
/* The matmul kernel families: 0 mv1_nt, 1 mv_nt/nn, then 2 + i for tile shape i of cuda_mm_tiles.h (2 mm128,
 * 3 mm64t8, 4 mm64, 5 mm32). */
enum { MM_KINDS = 2 + WEFT_CU_MM_TILE_COUNT };
static const char *kind_name(int kind) { return kind == 0 ? "mv1" : kind == 1 ? "mv" : weft_cu_mm_tile_at(kind - 2)->name; }
/* The tiled kernels by WEFT_CUK_MM* index (the _nn, _nt, _tn, _tt of each shape are consecutive). */
static void mm_kernel(int fn, weft_cu_mm_args m) {
  switch (fn) {
  case WEFT_CUK_MM128_NN: weft_mm128_nn(m); break; case WEFT_CUK_MM128_NT: weft_mm128_nt(m); break;
  case WEFT_CUK_MM128_TN: weft_mm128_tn(m); break; case WEFT_CUK_MM128_TT: weft_mm128_tt(m); break;
  case WEFT_CUK_MM64_NN: weft_mm64_nn(m); break; case WEFT_CUK_MM64_NT: weft_mm64_nt(m); break;
  case WEFT_CUK_MM64_TN: weft_mm64_tn(m); break; case WEFT_CUK_MM64_TT: weft_mm64_tt(m); break;
  case WEFT_CUK_MM64T8_NN: weft_mm64t8_nn(m); break; case WEFT_CUK_MM64T8_NT: weft_mm64t8_nt(m); break;
  case WEFT_CUK_MM64T8_TN: weft_mm64t8_tn(m); break; case WEFT_CUK_MM64T8_TT: weft_mm64t8_tt(m); break;
  case WEFT_CUK_MM32_NN: weft_mm32_nn(m); break; case WEFT_CUK_MM32_NT: weft_mm32_nt(m); break;
  case WEFT_CUK_MM32_TN: weft_mm32_tn(m); break; case WEFT_CUK_MM32_TT: weft_mm32_tt(m); break;
  default: printf("no kernel %d\n", fn); fails++; break;
  }
}
/* cuda_ops.c's alignment test for vector accesses of width w */
static int mm_aligned(uint64_t ptr, int64_t ld, int64_t stride, int64_t batch, int w) {
  return ptr % (uint64_t)(w * 4) == 0 && ld % w == 0 && (batch <= 1 || stride % w == 0);
}
/* One matmul launch of a kernel family, as cuda_ops.c shapes it. vec: the vector accesses where cuda_ops.c
 * would allow them (else none). */
static void mm_launch(int kind, weft_cu_mm_args &m, bool ta, bool tb, int batch, bool vec = false) {
  const int M = m.m, N = m.n;
  if (kind == 0) {
    emu_launch((unsigned)((N + WEFT_CU_MV1_OUT - 1) / WEFT_CU_MV1_OUT), (unsigned)batch, WEFT_CU_MV_THREADS, [&] { weft_mv1_nt(m); });
  } else if (kind == 1) {
    emu_launch((unsigned)((N + WEFT_CU_MV_OUT - 1) / WEFT_CU_MV_OUT), (unsigned)batch, WEFT_CU_MV_THREADS,
               [&] { if (tb) weft_mv_nt(m); else weft_mv_nn(m); });
  } else {
    const weft_cu_mm_tile *t = weft_cu_mm_tile_at(kind - 2);
    m.tiles_m = (M + t->bm - 1) / t->bm; m.tiles_n = (N + t->bn - 1) / t->bn; m.group = 8;
    m.vec_a = m.vec_b = m.vec_c = 0;
    if (vec) {
      int wa, wb, wc;
      weft_cu_mm_tile_widths(t, &wa, &wb, &wc);
      m.vec_a = mm_aligned(m.a, m.lda, m.sa, batch, wa);
      m.vec_b = mm_aligned(m.b, m.ldb, m.sb, batch, wb);
      m.vec_c = mm_aligned(m.c, m.ldc, m.sc, batch, wc);
    }
    const int fn = t->fn + (ta ? 2 : 0) + (tb ? 1 : 0);
    emu_launch((unsigned)(m.tiles_m * m.tiles_n), (unsigned)batch, (unsigned)t->threads, [&] { mm_kernel(fn, m); });
  }
}
/* A fused matmul epilogue (src/lanes/fuse.h) on each kernel family: c = a.b, then c + bias (per column),
 * c + resid, g = gelu(c), each step as the separate op rounds it; c keeps the value before GELU. kind: as
 * mm_launch's. Which of bias, resid, gelu: bits of `parts`. */
static void epilogue(int kind, int M, int N, int K, bool ta, bool tb, int batch, int parts) {
  auto a = rnd((size_t)batch * M * K, -2, 2), b = rnd((size_t)K * N, -2, 2);
  auto bias = rnd((size_t)N, -1, 1), resid = rnd((size_t)batch * M * N, -3, 3);
  if (a.size() > 3) { a[1] = -0.0f; a[2] = 1e-40f; }
  if (b.size() > 5) { b[4] = INFINITY; b[3] = -0.0f; }
  if (bias.size() > 2) bias[1] = NAN;
  if (resid.size() > 3) resid[2] = -INFINITY, resid[3] = -0.0f;
  const bool hb = parts & 1, hr = parts & 2, hg = parts & 4;
  std::vector<float> c((size_t)batch * M * N), g(c.size(), 5.f);
  for (int p = 0; p < batch; p++)
    for (int r = 0; r < M; r++)
      for (int j = 0; j < N; j++) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
          const float av = ta ? a[(size_t)p * M * K + (size_t)k * M + r] : a[(size_t)p * M * K + (size_t)r * K + k];
          const float bv = tb ? b[(size_t)j * K + k] : b[(size_t)k * N + j];
          acc = __fadd_rn(acc, __fmul_rn(av, bv));
        }
        c[(size_t)p * M * N + (size_t)r * N + j] = w_canon(acc);
      }
  /* the separate ops, as the lane would run them: add (row broadcast), add, gelu */
  for (size_t e = 0; e < c.size(); e++) {
    if (hb) c[e] = w_canon(__fadd_rn(c[e], bias[e % N]));
    if (hr) c[e] = w_canon(__fadd_rn(c[e], resid[e]));
  }
  if (hg) weft_ref_gelu_forward(g.data(), c.data(), (int64_t)c.size());
  for (int vec = 0; vec < (kind >= 2 ? 2 : 1); vec++) {
    std::vector<float> c2(c.size(), 7.f), g2(c.size(), 5.f);
    weft_cu_mm_args m{}; m.a = U(a.data()); m.b = U(b.data()); m.c = U(c2.data());
    m.bias = hb ? U(bias.data()) : 0; m.resid = hr ? U(resid.data()) : 0; m.gelu = hg ? U(g2.data()) : 0;
    m.m = M; m.n = N; m.k = K; m.lda = ta ? M : K; m.ldb = tb ? K : N; m.ldc = N;
    m.sa = (int64_t)M * K; m.sb = 0; m.sc = (int64_t)M * N;
    mm_launch(kind, m, ta, tb, batch, vec);
    char what[96];
    snprintf(what, sizeof what, "epi %s %dx%dx%d %s%s b%d %c%c%c%s", kind_name(kind), M, N, K, ta ? "t" : "n",
             tb ? "t" : "n", batch, hb ? 'b' : '-', hr ? 'r' : '-', hg ? 'g' : '-',
             !vec ? "" : m.vec_a || m.vec_b || m.vec_c ? " vec" : " vec(none)");
    cmp(what, c.data(), c2.data(), c.size());
    if (hg) {
      strcat(what, " g");
      cmp(what, g.data(), g2.data(), g.size());
    }
  }
}
/* matmul_acc (accum): every sum continues from c's value, k ascending; c's -0 survives a row of -0 products and
 * the padding past k's end. kind as in epilogue(). */
static void accum(int kind, int M, int N, int K, bool ta, bool tb, int batch) {
  auto a = rnd((size_t)batch * M * K, -2, 2), b = rnd((size_t)K * N, -2, 2), c0 = rnd((size_t)batch * M * N, -4, 4);
  for (int k = 0; k < K; k++) { /* row 0 of a: -0; column 0 of b: positive: c[0][0]'s products are all -0 */
    (ta ? a[(size_t)k * M] : a[(size_t)k]) = -0.0f;
    (tb ? b[(size_t)k] : b[(size_t)k * N]) = 1.5f;
  }
  c0[0] = -0.0f;
  if (c0.size() > 3) c0[2] = NAN, c0[3] = INFINITY;
  std::vector<float> c(c0);
  for (int p = 0; p < batch; p++)
    for (int r = 0; r < M; r++)
      for (int j = 0; j < N; j++) {
        float acc = c0[(size_t)p * M * N + (size_t)r * N + j];
        for (int k = 0; k < K; k++) {
          const float av = ta ? a[(size_t)p * M * K + (size_t)k * M + r] : a[(size_t)p * M * K + (size_t)r * K + k];
          const float bv = tb ? b[(size_t)j * K + k] : b[(size_t)k * N + j];
          acc = __fadd_rn(acc, __fmul_rn(av, bv));
        }
        c[(size_t)p * M * N + (size_t)r * N + j] = w_canon(acc);
      }
  for (int vec = 0; vec < (kind >= 2 ? 2 : 1); vec++) {
    std::vector<float> c2(c0);
    weft_cu_mm_args m{}; m.a = U(a.data()); m.b = U(b.data()); m.c = U(c2.data()); m.accum = 1;
    m.m = M; m.n = N; m.k = K; m.lda = ta ? M : K; m.ldb = tb ? K : N; m.ldc = N;
    m.sa = (int64_t)M * K; m.sb = 0; m.sc = (int64_t)M * N;
    mm_launch(kind, m, ta, tb, batch, vec);
    char what[96];
    snprintf(what, sizeof what, "acc %s %dx%dx%d %s%s b%d%s", kind_name(kind), M, N, K, ta ? "t" : "n", tb ? "t" : "n",
             batch, !vec ? "" : m.vec_a || m.vec_b || m.vec_c ? " vec" : " vec(none)");
    cmp(what, c.data(), c2.data(), c.size());
  }
}
/* Every tile shape of cuda_mm_tiles.h with all four transposes: partial tiles in m, n and k, k = 1, k = 0
 * with accum, -0 in c with accum (accum()), batches sharing b, every epilogue part, and the vector paths
 * (aligned shapes, and shapes aligned for vectors but not multiples of the tile or of 8 in k). */
static void mm_tiles() {
  for (int i = 0; i < WEFT_CU_MM_TILE_COUNT; i++) {
    const weft_cu_mm_tile *t = weft_cu_mm_tile_at(i);
    const int kind = 2 + i, bm = t->bm, bn = t->bn;
    for (int x = 0; x < 4; x++) {
      const bool ta = x & 2, tb = x & 1;
      epilogue(kind, bm + 3, 2 * bn - 5, 17, ta, tb, 2, 7 - x);
      epilogue(kind, 2 * bm, bn + 8, 24, ta, tb, 1, x);
      epilogue(kind, bm + 12, bn + 20, 20, ta, tb, 2, 7);
      epilogue(kind, bm - 1, bn / 2 + 1, 1, ta, tb, 1, 0);
      epilogue(kind, 5, 3, 0, ta, tb, 1, 3);
      accum(kind, bm + 5, bn - 3, 13, ta, tb, 2);
      accum(kind, 2 * bm, 2 * bn, 16, ta, tb, 1);
      accum(kind, 7, 9, 0, ta, tb, 1);
    }
  }
}
/* The tile shapes weft_cu_mm_pick gives GPT-2 124M's matmuls (B = 8, T = 1024: 8192 rows, C = 768) on an
 * H200's 132 SMs, against the rule before it (128x128 when those tiles fill the SMs, else 64x64 at 4x4).
 * Efficiency: the model's time of perfectly balanced 128x128 work over its estimate for the shape. The
 * weight gradients (k = 8192, few outputs) must leave the 144 blocks of 128x128 (12 SMs doing twice the
 * work); the large ones must stay on 128x128. */
static void mm_picks() {
  const int sms = 132;
  const struct { int64_t m, n, k; int big; } sh[] = {
      {8192, 768, 768, 1},   {8192, 2304, 768, 1}, {8192, 3072, 768, 1}, {8192, 768, 3072, 1},
      {768, 768, 8192, 0},   {768, 2304, 8192, 0}, {768, 3072, 8192, 0}, {3072, 768, 8192, 0},
      {8192, 50257, 768, 1}, {50257, 768, 8192, 1}};
  for (const auto &s : sh) {
    const int pick = weft_cu_mm_pick(s.m, s.n, 1, sms);
    const int old = ((s.m + 127) / 128) * ((s.n + 127) / 128) >= sms ? 0 : 2;
    const weft_cu_mm_tile *t = weft_cu_mm_tile_at(pick), *o = weft_cu_mm_tile_at(old);
    const double ideal = (double)s.m * (double)s.n / sms * 1000.0;
    const int64_t blocks = ((s.m + t->bm - 1) / t->bm) * ((s.n + t->bn - 1) / t->bn);
    const int64_t oblocks = ((s.m + o->bm - 1) / o->bm) * ((s.n + o->bn - 1) / o->bn);
    const double eff = ideal / weft_cu_mm_tile_cost(t, s.m, s.n, 1, sms), oeff = ideal / weft_cu_mm_tile_cost(o, s.m, s.n, 1, sms);
    const bool ok = s.big ? pick == 0 : blocks != 144 && eff > oeff;
    printf("pick %5lldx%5lldx%5lld %-7s %6lld blocks est %3.0f%% (was %-6s %6lld blocks %3.0f%%) %s\n", (long long)s.m,
           (long long)s.n, (long long)s.k, t->name, (long long)blocks, 100 * eff, o->name, (long long)oblocks, 100 * oeff,
           ok ? "ok" : "FAIL");
    if (!ok) fails++;
  }
}
/* attention over a cache: both kernels against weft_ref_attention_cached */
static void atc(int64_t B, int64_t Tmax, int64_t C, int64_t NH, int64_t t0, int64_t Tq) {
  auto qkv = rnd(B * Tmax * 3 * C, -2, 2);
  qkv[3] = -0.0f; qkv[C + 1] = 1e-39f;
  std::vector<float> o(B * Tq * C), at(B * NH * Tq * Tmax), o2(o.size(), 7.f), at2(at.size(), 7.f);
  weft_ref_attention_cached(o.data(), at.data(), qkv.data(), B, Tmax, C, NH, t0, Tq);
  weft_tx_attn_cached_args a{}; a.out = U(o2.data()); a.att = U(at2.data()); a.qkv = U(qkv.data());
  a.B = B; a.Tmax = Tmax; a.C = C; a.NH = NH; a.t0 = t0; a.Tq = Tq;
  emu_launch(2, 1, 128, [&] { weft_tx_attn_cached_blk(a); });
  cmp("atc blk out", o.data(), o2.data(), o.size()); cmp("atc blk att", at.data(), at2.data(), at.size());
  std::fill(o2.begin(), o2.end(), 7.f); std::fill(at2.begin(), at2.end(), 7.f);
  emu_launch(2, 1, 256, [&] { weft_tx_attn_cached(a); });
  cmp("atc warp out", o.data(), o2.data(), o.size()); cmp("atc warp att", at.data(), at2.data(), at.size());
}
int main() {
  atc(1, 40, 64, 2, 37, 1); atc(2, 20, 48, 3, 5, 3); atc(1, 160, 768, 12, 140, 1); atc(1, 200, 256, 2, 150, 1);
  atc(1, 100, 400, 2, 90, 2); atc(1, 300, 32, 1, 0, 1); atc(1, 300, 32, 1, 290, 2);
  mv(1, 37, 130, true, 1); mv(1, 20, 600, true, 1); mv(2, 40, 513, false, 1); mv(3, 16, 64, false, 2); mv(4, 70, 200, true, 1); mv(2, 5, 0, false, 1);
  mv(1, 33, 1, false, 1); mv(1, 21, 777, false, 2); mv(1, 50, 1000, true, 1);
  mv(1, 9, 1030, true, 3); mv(1, 17, 512, true, 1); mv(1, 8, 7, true, 1); mv(1, 23, 1028, true, 2); mv(1, 40, 768, true, 1);
  for (int parts = 0; parts < 8; parts++) epilogue(0, 1, 29, 700, false, true, 2, parts);
  epilogue(1, 3, 40, 300, false, true, 1, 7); epilogue(1, 2, 33, 90, false, false, 2, 5);
  accum(0, 1, 30, 301, false, true, 2); accum(1, 3, 20, 13, false, false, 1); accum(1, 4, 17, 0, false, true, 1);
  mm_tiles();
  mm_picks();
  copies();
  softmax(2, 45);
  ln(11, 77, 1); ln(1, 768, 1); ln(3, 64, 2); ln(70, 200, 2); ln(40, 5, 3); ln(600, 21, 4);
  gelu(1001, 0, 3); gelu(1001, 1, 3); gelu(16, 0, 1); gelu(3, 0, 1);
  sumsq(5, 0, 1); sumsq(4096, 0, 1); sumsq(4097, 1, 1); sumsq(3 * 4096 + 13, 0, 2); sumsq(40 * 4096 + 7, 0, 1);
  sumsq(70 * 4096 + 2, 3, 2); sumsq(0, 0, 1); sumsq(300 * 4096 + 5, 1, 4); /* > 256 partials: the adds run ahead */
  ln32(1, 768, 1); ln32(300, 768, 5); ln32(37, 77, 2); ln32(9, 1024, 3); ln32(5, 5, 1);
  sumsq32(5, 0, 1); sumsq32(100003, 1, 3); sumsq32(40 * 4096, 0, 4);
  embb(2, 5, 10, 13, 5, true); embb(3, 7, 130, 4, 7, false); embb(2, 160, 9, 50, 200, false); embb(4, 40, 9, 3000, 40, true); embb(2, 5, 300, 13, 5, true); embb(2, 160, 9, 50, 160, true);
  xent(4, 5000, 4); xent(5, 7, 2); xent(3, 1, 5); xent(4, 4099, 2);
  /* one tile with a partial last warp; hs 40 (a partial 64-column block) with grid-strided tiles; several
   * 64-row tiles with partial stages and rows (T = 150), strided; hs 96 (two column blocks, the second partial);
   * 8 rows a warp down to 1 (T = 65); the launch grid of cuda_ops.c (one block per tile) */
  attn(1, 33, 64, 1, 2); attn(2, 70, 80, 2, 5); attn(1, 150, 128, 2, 3); attn(1, 97, 96, 1, 2); attn(1, 65, 32, 1, 2);
  attn(1, 130, 64, 1, 3); attn(2, 70, 64, 1, 3, true);
  printf(fails ? "FAILURES %d\n" : "ALL OK\n", fails);
  return fails != 0;
}
