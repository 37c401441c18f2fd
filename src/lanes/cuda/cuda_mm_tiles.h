/* cuda_mm_tiles.h - the exact matmul's tile shapes (the instances of mm_exact in cuda_kernels.cu) and the
 * small cost model that picks one for a matmul's shape (emit_exact_mm in cuda_ops.c). Pure functions of the
 * shape and the SM count, shared by the lane (C) and the host emulation test (C++), which launches every
 * shape the way the lane does and checks the picks for GPT-2's matmuls.
 *
 * Every shape computes each output as the same one chain (acc = 0 or c; acc = acc + a*b, k ascending, each
 * rounded; the epilogue after it), so the pick changes the speed, never the bits. Split-k is not a choice
 * (an output's sum is one chain in k order): the only freedom is how many outputs a block owns. */
#ifndef WEFT_CUDA_MM_TILES_H
#define WEFT_CUDA_MM_TILES_H

#include <stdint.h>

#include "cuda_args.h"

/* One instance of mm_exact<BM, BN, TM, TN, ...>: a block of threads = (bm/tm)*(bn/tn) computes a bm x bn
 * tile of c, each thread tm x tn outputs; `fn` is its _nn kernel (then _nt, _tn, _tt); `resident` the blocks
 * an SM holds at once (its __launch_bounds__ minimum, which registers bound); `cost` the time of one output
 * of a full device relative to the 128x128 kernel, in thousandths (below). */
typedef struct weft_cu_mm_tile {
  int bm, bn, tm, tn, threads, resident, cost, fn;
  const char *name;
} weft_cu_mm_tile;

enum { WEFT_CU_MM_TILE_COUNT = 4 };

/* The shapes, larger tiles first (ties go to the earlier one). */
static inline const weft_cu_mm_tile *weft_cu_mm_tile_at(int i) {
  static const weft_cu_mm_tile tiles[WEFT_CU_MM_TILE_COUNT] = {
      {128, 128, 8, 8, 256, 2, 1000, WEFT_CUK_MM128_NN, "mm128"},
      {64, 64, 8, 8, 64, 6, 1100, WEFT_CUK_MM64T8_NN, "mm64t8"},
      {64, 64, 4, 4, 256, 4, 1250, WEFT_CUK_MM64_NN, "mm64"},
      {32, 32, 4, 4, 64, 10, 1480, WEFT_CUK_MM32_NN, "mm32"},
  };
  return i >= 0 && i < WEFT_CU_MM_TILE_COUNT ? &tiles[i] : &tiles[0];
}

/* The estimated time of a rows x n x batch matmul (any k: every block runs the whole k, so k scales every
 * shape alike) with tile `t` on `sms` SMs, in arbitrary units.
 *
 * The model, from a GPT-2 124M training step on an H200 (132 SMs), each launch timed alone: an SM runs at
 * about the same rate with 1 or 2 resident 128x128 blocks (8 or 16 warps), about 26 TFLOP/s over the device
 * at full occupancy. So the time is that of the busiest SM, ceil(blocks / sms) blocks of bm*bn outputs each:
 * c = 768x3072 in 144 128x128 blocks leaves 12 SMs with two blocks, 55% of the full rate (measured 14.6
 * TFLOP/s). Each output then costs more for smaller per-thread tiles and smaller tiles (`cost`):
 *   - 4x4 a thread is bound by shared-memory reads: 64x64 tiles at 4x4 cost 1.25 (calibrated: the model then
 *     predicts 17.0 and 11.4 TFLOP/s for c = 768x2304 in 432 blocks and 768x768 in 144, measured 17.8 and
 *     11.4);
 *   - a tile's global loads per output grow with 1/bm + 1/bn: 5% for each halving of a side below 128
 *     (64x64 at 8x8: 1.10; 32x32 at 4x4: 1.25 / 1.10 * 1.30 = 1.48).
 * And an SM that holds fewer than 8 warps (min(ceil(blocks / sms), resident) blocks) hides less latency:
 * x1.25 at 4 to 7 warps, and below 4 warps some of its 4 schedulers idle: x1.25 * 4 / warps. */
static inline double weft_cu_mm_tile_cost(const weft_cu_mm_tile *t, int64_t rows, int64_t n, int64_t batch,
                                          int sms) {
  const uint64_t tiles = (uint64_t)((rows + t->bm - 1) / t->bm) * (uint64_t)((n + t->bn - 1) / t->bn);
  const uint64_t blocks = tiles * (uint64_t)(batch > 0 ? batch : 1), s = (uint64_t)(sms > 0 ? sms : 1);
  const uint64_t waves = (blocks + s - 1) / s;
  const uint64_t warps = (waves < (uint64_t)t->resident ? waves : (uint64_t)t->resident) * (uint64_t)t->threads / 32;
  const double occ = warps >= 8 ? 1.0 : warps >= 4 ? 1.25 : 5.0 / (double)(warps ? warps : 1);
  return (double)waves * (double)(t->bm * t->bn) * (double)t->cost * occ;
}

/* The tile shape (an index for weft_cu_mm_tile_at) with the least estimated time; ties go to the larger
 * tile. A shape whose tile count would pass the grid's x limit is left out; the 128x128 tile is always a
 * candidate. */
static inline int weft_cu_mm_pick(int64_t rows, int64_t n, int64_t batch, int sms) {
  int best = 0;
  double best_cost = weft_cu_mm_tile_cost(weft_cu_mm_tile_at(0), rows, n, batch, sms);
  for (int i = 1; i < WEFT_CU_MM_TILE_COUNT; i++) {
    const weft_cu_mm_tile *t = weft_cu_mm_tile_at(i);
    const uint64_t tiles = (uint64_t)((rows + t->bm - 1) / t->bm) * (uint64_t)((n + t->bn - 1) / t->bn);
    if (tiles > 0x7fffffffu) continue;
    const double c = weft_cu_mm_tile_cost(t, rows, n, batch, sms);
    if (c < best_cost) best = i, best_cost = c;
  }
  return best;
}

/* The widths (in floats) a tile's vector accesses need aligned: a's and b's loads (LA and LB elements a
 * thread per k tile, LA = bm*8/threads, as 16-byte accesses at most) and c's stores (tn/2 columns a group). */
static inline void weft_cu_mm_tile_widths(const weft_cu_mm_tile *t, int *out_wa, int *out_wb, int *out_wc) {
  const int la = t->bm * 8 / t->threads, lb = t->bn * 8 / t->threads;
  *out_wa = la < 4 ? la : 4;
  *out_wb = lb < 4 ? lb : 4;
  *out_wc = t->tn / 2;
}

#endif /* WEFT_CUDA_MM_TILES_H */
