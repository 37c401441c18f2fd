#version 450
// matmul_tiled.comp - the fast matmul: a (16*TM) x (16*TN) block of c per workgroup of 256 threads, each
// thread a TM x TN register tile, k in steps of BK through double-buffered shared memory.
//
// Exact contract: every c[i,j] is one thread's running sum, acc = acc + a[i,k]*b[k,j] for k ascending (the
// tiles of k in order, k in order inside a tile), each product and sum rounded on its own (`precise`). The
// last, partial tile of k runs only its real steps: padding k with zeros would turn a -0 sum into +0.
// Built a second time with WEFT_FP32 (no `precise`) for the fp32 contract, where the driver may fuse.
//
// Subnormals: where the hardware flushes them (NVIDIA's Vulkan driver does), a product or a partial sum
// below 2^-126 would come out as zero. None can arise when every operand is zero or normal, the smallest
// nonzero |a| times the smallest nonzero |b| of the block's panels is at least 2^-103 (then every product
// and every partial sum is a multiple of 2^-126: zero or normal), and a partial sum carried in from c is
// zero or at least 2^-103. The kernel tracks those minimums while it loads (a few integer instructions per
// four values) and, when the test fails, recomputes its block with weft_mul / weft_add (common.glsl) in the
// same order before anything is stored. Data of ordinary magnitudes never takes that path.
//
// Epilogue (exact builds): on the last k chunk a lane may fuse the ops that follow the matmul (bias, residual,
// GELU: epilogue.glsl); they run on each element after the block is stored, in the order the ops came.
//
// Specialisation: TRANS_A / TRANS_B pick the layouts; VEC=1 loads and stores 4 floats at a time and is used
// only when every row start is a multiple of 4 floats and the vector dimensions are multiples of 4 (the
// host checks), so a vector never straddles an edge. The register tile is unrolled by macros rather than
// loops so the accumulators can only ever live in registers.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef BK
#define BK 8
#endif
#define BM (16 * TM)
#define BN (16 * TN)
#ifdef WEFT_FP32
#define PRECISE
#else
#define PRECISE precise
#endif

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint TRANS_A = 0;
layout(constant_id = 1) const uint TRANS_B = 0;
layout(constant_id = 2) const uint VEC = 0;

layout(set = 0, binding = 0) restrict readonly buffer A { vec4 a4[]; };
layout(set = 0, binding = 1) restrict readonly buffer B { vec4 b4[]; };
layout(set = 0, binding = 2) restrict buffer C { vec4 c4[]; };

#include "matmul_pc.glsl"
#ifndef WEFT_FP32
#include "wmath.glsl"
#include "epilogue.glsl"
#endif

// k-major tiles: As[buf][k][i], Bs[buf][k][j], as vec4 so a thread reads 4 rows (columns) in one load.
shared vec4 As[2 * BK * BM / 4];
shared vec4 Bs[2 * BK * BN / 4];

// Groups of 4 floats each thread moves per tile.
#define GA ((BM * BK / 4 + 255) / 256)
#define GB ((BN * BK / 4 + 255) / 256)

vec4 pa[GA], pb[GB];
uint tid, tx, ty, i0, j0, abase, bbase, cbase;
#ifndef WEFT_FP32
// (|x| bits) - 1 minimised over the values this thread loaded: zero wraps to the top and drops out.
uint amin1 = 0xffffffffu, bmin1 = 0xffffffffu;
shared uint s_amin1, s_bmin1, s_cbad;
void track(inout uint m, vec4 v) {
  uvec4 b = (floatBitsToUint(v) & 0x7fffffffu) - 1u;
  m = min(m, min(min(b.x, b.y), min(b.z, b.w)));
}
// A partial sum from c that could meet a flush: nonzero and below 2^-103.
bool tiny_sum(vec4 v) { return any(lessThan((floatBitsToUint(v) & 0x7fffffffu) - 1u, uvec4(0x0bffffffu))); }
#endif

float ld_a(uint idx) { return a4[idx >> 2][idx & 3u]; }
float ld_b(uint idx) { return b4[idx >> 2][idx & 3u]; }

// Fetches tile t of a and b from memory into pa/pb; out-of-range elements read as 0 and are never used.
void fetch(uint t) {
  uint k0 = t * BK;
  [[unroll]] for (uint s = 0u; s < GA; s++) {
    uint g = tid + s * 256u;
    vec4 v = vec4(0.0);
    if (g < BM * BK / 4) {
      if (TRANS_A == 0u) { // 4 consecutive k of row i
        uint gi = i0 + g / (BK / 4), gk = k0 + (g % (BK / 4)) * 4u;
        uint at = abase + gi * pc.lda + gk;
        if (gi < pc.M) {
          if (VEC != 0u) { if (gk < pc.K) v = a4[at >> 2]; }
          else {
            if (gk < pc.K) v.x = ld_a(at);
            if (gk + 1u < pc.K) v.y = ld_a(at + 1u);
            if (gk + 2u < pc.K) v.z = ld_a(at + 2u);
            if (gk + 3u < pc.K) v.w = ld_a(at + 3u);
          }
        }
      } else { // 4 consecutive i of row k of a^T
        uint gk = k0 + g / (BM / 4), gi = i0 + (g % (BM / 4)) * 4u;
        uint at = abase + gk * pc.lda + gi;
        if (gk < pc.K) {
          if (VEC != 0u) { if (gi < pc.M) v = a4[at >> 2]; }
          else {
            if (gi < pc.M) v.x = ld_a(at);
            if (gi + 1u < pc.M) v.y = ld_a(at + 1u);
            if (gi + 2u < pc.M) v.z = ld_a(at + 2u);
            if (gi + 3u < pc.M) v.w = ld_a(at + 3u);
          }
        }
      }
    }
    pa[s] = v;
#ifndef WEFT_FP32
    track(amin1, v);
#endif
  }
  [[unroll]] for (uint s = 0u; s < GB; s++) {
    uint g = tid + s * 256u;
    vec4 v = vec4(0.0);
    if (g < BN * BK / 4) {
      if (TRANS_B == 0u) { // 4 consecutive j of row k
        uint gk = k0 + g / (BN / 4), gj = j0 + (g % (BN / 4)) * 4u;
        uint at = bbase + gk * pc.ldb + gj;
        if (gk < pc.K) {
          if (VEC != 0u) { if (gj < pc.N) v = b4[at >> 2]; }
          else {
            if (gj < pc.N) v.x = ld_b(at);
            if (gj + 1u < pc.N) v.y = ld_b(at + 1u);
            if (gj + 2u < pc.N) v.z = ld_b(at + 2u);
            if (gj + 3u < pc.N) v.w = ld_b(at + 3u);
          }
        }
      } else { // 4 consecutive k of row j of b^T
        uint gj = j0 + g / (BK / 4), gk = k0 + (g % (BK / 4)) * 4u;
        uint at = bbase + gj * pc.ldb + gk;
        if (gj < pc.N) {
          if (VEC != 0u) { if (gk < pc.K) v = b4[at >> 2]; }
          else {
            if (gk < pc.K) v.x = ld_b(at);
            if (gk + 1u < pc.K) v.y = ld_b(at + 1u);
            if (gk + 2u < pc.K) v.z = ld_b(at + 2u);
            if (gk + 3u < pc.K) v.w = ld_b(at + 3u);
          }
        }
      }
    }
    pb[s] = v;
#ifndef WEFT_FP32
    track(bmin1, v);
#endif
  }
}

// Writes pa/pb into shared buffer `buf`, k-major.
void stash(uint buf) {
  [[unroll]] for (uint s = 0u; s < GA; s++) {
    uint g = tid + s * 256u;
    if (g < BM * BK / 4) {
      if (TRANS_A == 0u) {
        uint r = g / (BK / 4), kq = (g % (BK / 4)) * 4u;
        uint at = (buf * BK + kq) * (BM / 4) + (r >> 2), c = r & 3u;
        As[at][c] = pa[s].x;
        As[at + BM / 4][c] = pa[s].y;
        As[at + 2u * (BM / 4)][c] = pa[s].z;
        As[at + 3u * (BM / 4)][c] = pa[s].w;
      } else {
        As[(buf * BK + g / (BM / 4)) * (BM / 4) + g % (BM / 4)] = pa[s];
      }
    }
  }
  [[unroll]] for (uint s = 0u; s < GB; s++) {
    uint g = tid + s * 256u;
    if (g < BN * BK / 4) {
      if (TRANS_B == 0u) {
        Bs[(buf * BK + g / (BN / 4)) * (BN / 4) + g % (BN / 4)] = pb[s];
      } else {
        uint r = g / (BK / 4), kq = (g % (BK / 4)) * 4u;
        uint at = (buf * BK + kq) * (BN / 4) + (r >> 2), c = r & 3u;
        Bs[at][c] = pb[s].x;
        Bs[at + BN / 4][c] = pb[s].y;
        Bs[at + 2u * (BN / 4)][c] = pb[s].z;
        Bs[at + 3u * (BN / 4)][c] = pb[s].w;
      }
    }
  }
}

// The thread's rows are g*64 + ty*4 + q and its columns g*64 + tx*4 + q (g < TM/4, q < 4): reading 4
// consecutive vec4 per 4 threads keeps the shared loads free of bank conflicts.
#if TM == 8
#define FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#else
#define FOR_ROWS(X) X(0) X(1) X(2) X(3)
#endif
#define MAC(i, j) acc[(i) * TN + (j)] = acc[(i) * TN + (j)] + ra[i] * rb[j];
#if TN == 8
#define MAC_ROW(i) MAC(i, 0) MAC(i, 1) MAC(i, 2) MAC(i, 3) MAC(i, 4) MAC(i, 5) MAC(i, 6) MAC(i, 7)
#else
#define MAC_ROW(i) MAC(i, 0) MAC(i, 1) MAC(i, 2) MAC(i, 3)
#endif

// One k step of the register tile from shared buffer `buf` (a macro: the accumulators are locals of main,
// which keeps them out of memory on every compiler).
#if TM == 8
#define LOAD_RA(ao)                                                                                            \
  vec4 a0 = As[ao + ty], a1 = As[ao + 16u + ty];                                                               \
  float ra[8] = float[8](a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w);
#else
#define LOAD_RA(ao)                                                                                            \
  vec4 a0 = As[ao + ty];                                                                                       \
  float ra[4] = float[4](a0.x, a0.y, a0.z, a0.w);
#endif
#if TN == 8
#define LOAD_RB(bo)                                                                                            \
  vec4 b0 = Bs[bo + tx], b1 = Bs[bo + 16u + tx];                                                               \
  float rb[8] = float[8](b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w);
#else
#define LOAD_RB(bo)                                                                                            \
  vec4 b0 = Bs[bo + tx];                                                                                       \
  float rb[4] = float[4](b0.x, b0.y, b0.z, b0.w);
#endif
#define STEP(buf, kk)                                                                                          \
  {                                                                                                            \
    LOAD_RA(((buf) * BK + (kk)) * (BM / 4))                                                                    \
    LOAD_RB(((buf) * BK + (kk)) * (BN / 4))                                                                    \
    FOR_ROWS(MAC_ROW)                                                                                          \
  }

uint row_of(uint i) { return i0 + (i >> 2) * 64u + ty * 4u + (i & 3u); }

vec4 load_c4(uint row, uint col) {
  vec4 v = vec4(0.0);
  if (row >= pc.M) return v;
  uint at = cbase + row * pc.ldc + col;
  if (VEC != 0u) {
    if (col < pc.N) v = c4[at >> 2];
  } else {
    if (col < pc.N) v.x = c4[at >> 2][at & 3u];
    if (col + 1u < pc.N) v.y = c4[(at + 1u) >> 2][(at + 1u) & 3u];
    if (col + 2u < pc.N) v.z = c4[(at + 2u) >> 2][(at + 2u) & 3u];
    if (col + 3u < pc.N) v.w = c4[(at + 3u) >> 2][(at + 3u) & 3u];
  }
  return v;
}

void store_c4(uint row, uint col, vec4 v) {
  if (row >= pc.M) return;
#ifndef WEFT_FP32
  v = weft_canon4(v);
#endif
  uint at = cbase + row * pc.ldc + col;
  if (VEC != 0u) {
    if (col < pc.N) c4[at >> 2] = v;
  } else {
    if (col < pc.N) c4[at >> 2][at & 3u] = v.x;
    if (col + 1u < pc.N) c4[(at + 1u) >> 2][(at + 1u) & 3u] = v.y;
    if (col + 2u < pc.N) c4[(at + 2u) >> 2][(at + 2u) & 3u] = v.z;
    if (col + 3u < pc.N) c4[(at + 3u) >> 2][(at + 3u) & 3u] = v.w;
  }
}

#ifndef WEFT_FP32
// The block again, each c[i,j] as one sequence of weft_add / weft_mul in the canonical order, straight from
// memory: slow, and only for data whose magnitudes could meet a flushed subnormal.
void exact_block(bool accum) {
  for (uint i = 0u; i < TM; i++) {
    uint row = row_of(i);
    if (row >= pc.M) continue;
    for (uint j = 0u; j < TN; j++) {
      uint col = j0 + (j >> 2) * 64u + tx * 4u + (j & 3u);
      if (col >= pc.N) continue;
      uint ci = cbase + row * pc.ldc + col;
      float acc = accum ? c4[ci >> 2][ci & 3u] : 0.0;
      for (uint k = 0u; k < pc.K; k++) {
        uint ai = TRANS_A != 0u ? abase + k * pc.lda + row : abase + row * pc.lda + k;
        uint bi = TRANS_B != 0u ? bbase + col * pc.ldb + k : bbase + k * pc.ldb + col;
        acc = weft_add(acc, weft_mul(ld_a(ai), ld_b(bi)));
      }
      c4[ci >> 2][ci & 3u] = weft_canon(acc);
    }
  }
}

// The fused epilogue over the thread's elements of c, once they are stored (this invocation reads back only
// what it wrote). A loop, not the unrolled macros: one copy of the GELU code.
void epilogue_block() {
  for (uint i = 0u; i < TM; i++) {
    uint row = row_of(i);
    if (row >= pc.M) continue;
    for (uint j = 0u; j < TN; j++) {
      uint col = j0 + (j >> 2) * 64u + tx * 4u + (j & 3u);
      if (col >= pc.N) continue;
      uint ci = cbase + row * pc.ldc + col;
      float v = weft_epilogue(c4[ci >> 2][ci & 3u], ci, col);
      if ((pc.flags & (WEFT_EPI_BIAS | WEFT_EPI_RES)) != 0u) c4[ci >> 2][ci & 3u] = v;
    }
  }
}
#endif

#define INIT4(i, jg)                                                                                           \
  {                                                                                                            \
    vec4 v = accum ? load_c4(row_of(i), j0 + (jg) * 64u + tx * 4u) : vec4(0.0);                                 \
    CHECK_SUM(v)                                                                                               \
    acc[(i) * TN + (jg) * 4] = v.x;                                                                            \
    acc[(i) * TN + (jg) * 4 + 1] = v.y;                                                                        \
    acc[(i) * TN + (jg) * 4 + 2] = v.z;                                                                        \
    acc[(i) * TN + (jg) * 4 + 3] = v.w;                                                                        \
  }
#define STORE4(i, jg)                                                                                          \
  store_c4(row_of(i), j0 + (jg) * 64u + tx * 4u,                                                               \
           vec4(acc[(i) * TN + (jg) * 4], acc[(i) * TN + (jg) * 4 + 1], acc[(i) * TN + (jg) * 4 + 2],          \
                acc[(i) * TN + (jg) * 4 + 3]));
#ifdef WEFT_FP32
#define CHECK_SUM(v)
#else
#define CHECK_SUM(v) cbad = cbad || tiny_sum(v);
#endif
#if TN == 8
#define INIT_ROW(i) INIT4(i, 0) INIT4(i, 1)
#define STORE_ROW(i) STORE4(i, 0) STORE4(i, 1)
#else
#define INIT_ROW(i) INIT4(i, 0)
#define STORE_ROW(i) STORE4(i, 0)
#endif

void main() {
  tid = gl_LocalInvocationIndex;
  tx = tid % 16u;
  ty = tid / 16u;
  i0 = gl_WorkGroupID.y * BM;
  j0 = gl_WorkGroupID.x * BN;
  uint p = gl_WorkGroupID.z;
  abase = pc.base_a + p * pc.stride_a;
  bbase = pc.base_b + p * pc.stride_b;
  cbase = pc.base_c + p * pc.stride_c;
  bool accum = (pc.flags & 4u) != 0u;
  PRECISE float acc[TM * TN];
#ifndef WEFT_FP32
  bool cbad = false;
  if (tid == 0u) s_amin1 = 0xffffffffu, s_bmin1 = 0xffffffffu, s_cbad = 0u; // ordered by the barriers below
#endif
  FOR_ROWS(INIT_ROW)

  uint ntiles = (pc.K + BK - 1u) / BK;
  if (ntiles > 0u) {
    fetch(0u);
    stash(0u);
  }
  barrier();
  for (uint t = 0u; t < ntiles; t++) {
    uint cur = t & 1u;
    bool more = t + 1u < ntiles;
    if (more) fetch(t + 1u); // in flight while this tile is multiplied
    uint kmax = min(uint(BK), pc.K - t * BK);
    if (kmax == BK) {
      [[unroll]] for (uint kk = 0u; kk < BK; kk++) STEP(cur, kk)
    } else {
      for (uint kk = 0u; kk < kmax; kk++) STEP(cur, kk)
    }
    if (more) stash(cur ^ 1u);
    barrier();
  }
#ifndef WEFT_FP32
  atomicMin(s_amin1, amin1);
  atomicMin(s_bmin1, bmin1);
  if (cbad) atomicOr(s_cbad, 1u);
  barrier();
  uint am = s_amin1, bm = s_bmin1;
  // A subnormal operand (bits 1..0x7fffff), a tiny carried sum, or products that may fall below 2^-103.
  bool slow = s_cbad != 0u || am < 0x7fffffu || bm < 0x7fffffu;
  if (!slow && am != 0xffffffffu && bm != 0xffffffffu) {
    precise float pmin = uintBitsToFloat(am + 1u) * uintBitsToFloat(bm + 1u);
    slow = (floatBitsToUint(pmin) & 0x7fffffffu) < 0x0c000000u;
  }
  if (slow) exact_block(accum);
  else {
    FOR_ROWS(STORE_ROW)
  }
  if ((pc.flags & WEFT_EPI_ANY) != 0u) epilogue_block();
#else
  FOR_ROWS(STORE_ROW)
#endif
}
