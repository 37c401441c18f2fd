/* fpenv.h - the floating-point environment weft's host kernels run under: IEEE round-to-nearest-even, with
 * subnormals kept (no flush-to-zero, no denormals-are-zero) and every exception masked, whatever the
 * caller's thread was set to. A host linked with -ffast-math, or a framework that flushes denormals
 * (torch.set_flush_denormal), sets FTZ/DAZ on its threads; threads inherit the environment of the thread
 * that creates them. Under FTZ/DAZ or another rounding mode the same instructions give other bits, so an
 * exact kernel would disagree with every other lane, and with itself from one thread to the next.
 *
 * On the caller's thread, weft_fpenv_enter / weft_fpenv_leave bracket a kernel: enter reads the state
 * (a few cycles), writes it only when it differs from the clean one, and leave restores exactly what was
 * there (exception flags included) only when enter changed something. Threads weft owns (the CPU pool, the
 * host queue) call weft_fpenv_clean at start and before each job, and keep no caller state.
 *
 * What is set, per architecture:
 *   x86-64: MXCSR (used by SSE/AVX code): FTZ (bit 15) and DAZ (bit 6) cleared, rounding (bits 13-14) to
 *           nearest, exception masks (bits 7-12) set; the x87 control word's rounding (fegetround) to
 *           nearest.
 *   aarch64: FPCR: FZ (bit 24), FZ16 (bit 19), FIZ/AH/NEP (bits 0-2) cleared, RMode (bits 22-23) to
 *           nearest, trap enables (bits 8-12, 15) cleared.
 *   others: the C rounding mode (fegetround / fesetround) only. */
#ifndef WEFT_FPENV_H
#define WEFT_FPENV_H

#include <fenv.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define WEFT_FPENV_X86 1
#elif defined(__aarch64__)
#define WEFT_FPENV_ARM64 1
#endif

typedef struct weft_fpenv {
  int changed; /* enter wrote the state: leave restores it */
  int round;   /* the C rounding mode (x87's on x86) */
#if defined(WEFT_FPENV_X86)
  unsigned mxcsr;
#elif defined(WEFT_FPENV_ARM64)
  uint64_t fpcr;
#endif
} weft_fpenv;

#if defined(WEFT_FPENV_X86)
#define WEFT_MXCSR_FTZ 0x8000u
#define WEFT_MXCSR_DAZ 0x0040u
#define WEFT_MXCSR_RC 0x6000u
#define WEFT_MXCSR_MASKS 0x1f80u
static inline unsigned weft_mxcsr_clean(unsigned v) {
  return (v & ~(WEFT_MXCSR_FTZ | WEFT_MXCSR_DAZ | WEFT_MXCSR_RC)) | WEFT_MXCSR_MASKS;
}
#elif defined(WEFT_FPENV_ARM64)
static inline uint64_t weft_fpcr_get(void) {
  uint64_t v;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
  return v;
}
static inline void weft_fpcr_set(uint64_t v) { __asm__ __volatile__("msr fpcr, %0" : : "r"(v)); }
/* FZ, RMode, FZ16, the trap enables IOE..IXE and IDE, and FEAT_AFP's FIZ, AH and NEP. */
#define WEFT_FPCR_DIRTY ((1ull << 24) | (3ull << 22) | (1ull << 19) | (0x1full << 8) | (1ull << 15) | 0x7ull)
static inline uint64_t weft_fpcr_clean(uint64_t v) { return v & ~WEFT_FPCR_DIRTY; }
#endif

/* Makes this thread's environment the clean one (for threads weft owns; nothing is remembered). */
static inline void weft_fpenv_clean(void) {
#if defined(WEFT_FPENV_ARM64)
  const uint64_t v = weft_fpcr_get();
  if (weft_fpcr_clean(v) != v) weft_fpcr_set(weft_fpcr_clean(v));
#else
  if (fegetround() != FE_TONEAREST) fesetround(FE_TONEAREST);
#if defined(WEFT_FPENV_X86)
  const unsigned v = _mm_getcsr();
  if (weft_mxcsr_clean(v) != v) _mm_setcsr(weft_mxcsr_clean(v));
#endif
#endif
}

/* Saves the caller's environment into *saved and makes it the clean one (writing only if it differs). */
static inline void weft_fpenv_enter(weft_fpenv *saved) {
#if defined(WEFT_FPENV_ARM64)
  saved->round = FE_TONEAREST;
  saved->fpcr = weft_fpcr_get();
  saved->changed = weft_fpcr_clean(saved->fpcr) != saved->fpcr;
  if (saved->changed) weft_fpcr_set(weft_fpcr_clean(saved->fpcr));
#else
  saved->round = fegetround();
#if defined(WEFT_FPENV_X86)
  saved->mxcsr = _mm_getcsr();
  saved->changed = saved->round != FE_TONEAREST || weft_mxcsr_clean(saved->mxcsr) != saved->mxcsr;
  if (!saved->changed) return;
  if (saved->round != FE_TONEAREST) fesetround(FE_TONEAREST); /* x87 and MXCSR rounding */
  _mm_setcsr(weft_mxcsr_clean(saved->mxcsr));
#else
  saved->changed = saved->round != FE_TONEAREST;
  if (saved->changed) fesetround(FE_TONEAREST);
#endif
#endif
}

/* Puts back what weft_fpenv_enter saved, exactly (nothing when enter found the clean state). */
static inline void weft_fpenv_leave(const weft_fpenv *saved) {
  if (!saved->changed) return;
#if defined(WEFT_FPENV_ARM64)
  weft_fpcr_set(saved->fpcr);
#else
  fesetround(saved->round); /* x87 (and MXCSR, which the next line sets exactly) */
#if defined(WEFT_FPENV_X86)
  _mm_setcsr(saved->mxcsr);
#endif
#endif
}

/* 1 / n rounded to nearest, whatever the caller's environment: the host-side factor (softmax's 1/rows)
 * that every lane scales by. The volatile accesses keep the conversion and the division between enter and
 * leave. */
static inline float weft_fpenv_recip(int64_t n) {
  weft_fpenv env;
  weft_fpenv_enter(&env);
  volatile float d = (float)n;
  volatile float r = 1.0f / d;
  const float out = r;
  weft_fpenv_leave(&env);
  return out;
}

#endif
